//! How the host reaches the OCI registries that policies come from (`policies.NAME.source: oci://...`): the
//! credentials (a `kubernetes.io/dockerconfigjson` Secret's file) and a private CA.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Registries {
    /// A Docker config file (`.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret): credentials by
    /// registry. Registries it does not name are pulled from anonymously.
    #[serde(default)]
    pub credentials: Option<PathBuf>,
    /// CA certificates (PEM) trusted besides the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

impl Registries {
    pub fn options(&self) -> crate::oci::RegistryOptions {
        crate::oci::RegistryOptions { credentials: self.credentials.clone(), ca_file: self.ca_file.clone() }
    }

    /// Relative paths made relative to `folder`.
    pub(super) fn resolve_paths(&mut self, folder: &Path) {
        for path in [&mut self.credentials, &mut self.ca_file].into_iter().flatten() {
            if path.is_relative() {
                *path = folder.join(&*path);
            }
        }
    }
}
