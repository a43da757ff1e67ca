//! Which keys must have signed a policy before it is compiled or run: `verification` for every policy, or
//! `policies.NAME.verification` for one (which replaces the general one for that policy, as a whole).

use anyhow::bail;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// More keys than any rotation needs; each is tried on every signature.
const MAX_KEYS: usize = 16;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Verification {
    /// Public key files (PEM, such as cosign's `cosign.pub`, from a Secret mounted beside the policies); a relative
    /// path is relative to the configuration file's folder. A component is verified when one of them signed it.
    #[serde(default)]
    pub keys: Vec<PathBuf>,
    /// Refuse a component that none of `keys` signed. Without it, a component with no signature is taken (and shown
    /// as unsigned); a signature that is there must still check: a bad one is refused either way.
    #[serde(default)]
    pub require: bool,
}

impl Verification {
    pub fn validate(&self, field: &str) -> anyhow::Result<()> {
        if self.require && self.keys.is_empty() {
            bail!("{field}.require: signatures cannot be required without a key in {field}.keys");
        }
        if self.keys.len() > MAX_KEYS {
            bail!("{field}.keys: {} keys, more than the {MAX_KEYS} allowed", self.keys.len());
        }
        Ok(())
    }

    /// Whether signatures are checked at all.
    pub fn checks(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Relative key paths made relative to `folder`.
    pub(super) fn resolve_keys(&mut self, folder: &Path) {
        for key in &mut self.keys {
            if key.is_relative() {
                *key = folder.join(&*key);
            }
        }
    }
}
