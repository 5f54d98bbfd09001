//! The spec parser and validator over any text: an error, never a panic.
#![no_main]

use lazyinit_orchestrator::spec::{ProviderConfigs, Spec};
use libfuzzer_sys::fuzz_target;

/// Provider tables left untyped, as the orchestrator's own tests read them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Any(toml::Table);

impl ProviderConfigs for Any {
    fn default_provider() -> String {
        "qemu".into()
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = Spec::<Any>::parse(text, "fuzz") {
            // A spec that parsed is bounded: counting and naming it is cheap.
            assert!(spec.cell_count() <= lazyinit_orchestrator::spec::MAX_CELLS);
            let _ = spec.run_id();
        }
    }
});
