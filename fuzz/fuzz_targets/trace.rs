//! The guest's trace and key=value parsers over any text: no panic.
#![no_main]

use lazyinit_guest::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse::key_values(text);
    for line in text.lines() {
        let _ = parse::trace_line(line);
    }
    let _ = parse::first_zeroings_after(text, "lazyinit-bench-marker");
    let _ = parse::summarize(text);
});
