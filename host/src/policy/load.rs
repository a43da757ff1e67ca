//! Turning bytes into a validated, configured policy: each step says precisely what is wrong and with which file.

use crate::contract::types::Descriptor;
use crate::contract::{CONTRACT_VERSION, EXPORTED_INTERFACES};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::Component;
use wasmtime::Engine;

const WASM_MAGIC: &[u8; 4] = b"\0asm";
const CORE_MODULE_VERSION: [u8; 4] = [1, 0, 0, 0];

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("policy {origin}: {reason}")]
pub struct LoadError {
    /// The file (or other origin) the bytes came from.
    pub origin: String,
    pub reason: String,
    /// The component calls itself by another name than the one it was loaded as.
    pub name_mismatch: bool,
}

impl LoadError {
    pub fn new(origin: &str, reason: impl Into<String>) -> Self {
        LoadError { origin: origin.to_string(), reason: reason.into(), name_mismatch: false }
    }
}

/// Cheap checks before handing bytes to the compiler, which would give a less helpful message.
pub fn check_binary_kind(wasm: &[u8]) -> Result<(), String> {
    if wasm.is_empty() {
        return Err("the file is empty".into());
    }
    if wasm.len() < 8 || &wasm[..4] != WASM_MAGIC {
        return Err("not a WebAssembly binary (no \\0asm header)".into());
    }
    if wasm[4..8] == CORE_MODULE_VERSION {
        return Err("this is a core WebAssembly module, not a component: build the policy with \
                    `--target wasm32-wasip2` (see sdk/README.md)"
            .into());
    }
    Ok(())
}

/// The `wasp:policy` version a component was built against, read from its export names, after checking that
/// it exports every interface of the contract at a version this host supports.
pub fn check_contract(engine: &Engine, component: &Component) -> Result<String, String> {
    let component_type = component.component_type();
    let exports: Vec<(String, bool)> =
        component_type.exports(engine).map(|(name, item)| (name.to_string(), matches!(item.ty, ComponentItem::ComponentInstance(_)))).collect();
    let contract_exports: Vec<&str> =
        exports.iter().filter(|(name, is_instance)| *is_instance && name.starts_with("wasp:policy/")).map(|(name, _)| name.as_str()).collect();
    let Some(first) = contract_exports.first() else {
        let names: Vec<&str> = exports.iter().map(|(name, _)| name.as_str()).collect();
        return Err(format!(
            "not a wasp policy: it exports none of the wasp:policy interfaces (exports: [{}]); \
             build it with wasp-sdk's export_policy!",
            names.join(", ")
        ));
    };
    let version = first.rsplit_once('@').map(|(_, version)| version.to_string()).unwrap_or_default();
    if !compatible(&version) {
        return Err(format!(
            "built against contract wasp:policy@{version}, this host implements wasp:policy@{CONTRACT_VERSION}; \
             rebuild the policy with a wasp-sdk for contract {CONTRACT_VERSION}"
        ));
    }
    let missing: Vec<String> = EXPORTED_INTERFACES
        .iter()
        .map(|interface| format!("wasp:policy/{interface}@{version}"))
        .filter(|wanted| !contract_exports.contains(&wanted.as_str()))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing exports: {}", missing.join(", ")));
    }
    Ok(version)
}

/// The same version exactly. Since 0.9 `apply` carries the records as encoded bytes, which instantiation does
/// not type-check, and their encoding names no fields: a component whose records differ in any way would decode
/// them wrongly, so no range of versions is taken on trust (sdk/RATIONALE.md, "0.9").
fn compatible(version: &str) -> bool {
    version == CONTRACT_VERSION
}

/// Checks what a component says about itself.
pub fn check_descriptor(descriptor: &Descriptor) -> Result<(), String> {
    // A descriptor is read once and kept for the life of the version: bound what a component can make the host
    // keep (a 50 MB descriptor, a million kinds).
    const MAX_NAME: usize = 63;
    const MAX_VERSION: usize = 64;
    const MAX_TEXT: usize = 64 << 10;
    if descriptor.name.len() > MAX_NAME {
        return Err(format!("describe returned a name of {} bytes: at most {MAX_NAME}", descriptor.name.len()));
    }
    if descriptor.version.len() > MAX_VERSION {
        return Err(format!("describe returned a version of {} bytes: at most {MAX_VERSION}", descriptor.version.len()));
    }
    if descriptor.kinds.len() > crate::contract::types::PolicyKind::ALL.len() {
        return Err(format!("describe lists {} kinds: there are {}", descriptor.kinds.len(), crate::contract::types::PolicyKind::ALL.len()));
    }
    for (field, text) in [("default settings", &descriptor.default_settings), ("settings documentation", &descriptor.settings_doc)] {
        if text.len() > MAX_TEXT {
            return Err(format!("describe returned {} bytes of {field}: at most {MAX_TEXT}", text.len()));
        }
    }
    let valid_name = !descriptor.name.is_empty() && descriptor.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        return Err(format!("describe returned the name {:?}: use lowercase letters, digits and '-'", descriptor.name));
    }
    if descriptor.kinds.is_empty() {
        return Err("describe lists no policy kinds (filter, score, evict, scale)".into());
    }
    match serde_json::from_str::<serde_json::Value>(&descriptor.default_settings) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(format!("describe returned default settings that are not a JSON object: {}", descriptor.default_settings)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_kinds() {
        assert_eq!(check_binary_kind(b"").unwrap_err(), "the file is empty");
        assert!(check_binary_kind(b"hello world").unwrap_err().contains("not a WebAssembly binary"));
        assert!(check_binary_kind(b"\0asm\x01\0\0\0").unwrap_err().contains("core WebAssembly module"));
        assert!(check_binary_kind(b"\0asm\x0d\0\x01\0").is_ok());
    }

    #[test]
    fn versions() {
        assert!(compatible("0.10.0"));
        assert!(!compatible("0.10.1"), "the records of another 0.10 could differ: only the same version");
        assert!(!compatible("0.9.0"));
        assert!(!compatible("0.11.0"));
        assert!(!compatible("1.2.0"));
        assert!(!compatible(""));
    }
}
