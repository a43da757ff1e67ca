//! The host's configuration as an operator writes it (the ConfigMap's `config.yaml`): parsed and validated, or
//! refused with the field named, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(config) = wasp::config::HostConfig::parse(text) {
        let _ = config.validate();
    }
});
