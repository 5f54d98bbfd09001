//! `run --shard auto`'s reading of the environment over any variables:
//! one line of error, or a shard that exists, never a panic. The input
//! is `NAME=VALUE` lines (the engines' variables; others are ignored).
#![no_main]

use std::collections::BTreeMap;

use lazyinit_orchestrator::shard::{from_env, MAX_SHARDS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env: BTreeMap<&str, &str> = text.split('\n').filter_map(|l| l.split_once('=')).collect();
    match from_env(|k| env.get(k).map(|v| v.to_string())) {
        Ok((shard, said)) => {
            assert!(1 <= shard.index() && shard.index() <= shard.count());
            assert!(shard.count() <= MAX_SHARDS);
            assert!(!said.chars().any(char::is_control), "{said:?}");
        }
        Err(e) => {
            let line = e.to_string();
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }
});
