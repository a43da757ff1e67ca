//! Reading what is on disk: the policy directory and the configuration file, as they are now.
//!
//! The directory may be a ConfigMap volume: the kubelet keeps the data in a timestamped `..<time>/` directory,
//! points `..data` at it and exposes each key as a symlink `name -> ..data/name`. Entries starting with `..` are
//! the writer's own and are skipped; reading a visible name follows the symlinks to the current data.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `<name>.wasm` file.
pub struct PolicyFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`, hex.
    pub digest: String,
}

/// What the policy directory and configuration file hold at one moment.
pub struct SourceSnapshot {
    /// Policy files by policy name (the file name without `.wasm`).
    pub policies: BTreeMap<String, PolicyFile>,
    /// The configuration file's text, when the registry follows one.
    pub config: Option<Result<String, String>>,
    /// Files that could not be read, with the reason.
    pub unreadable: Vec<String>,
}

/// Identifies a snapshot's contents: equal fingerprints mean nothing changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    policies: BTreeMap<String, String>,
    config: Option<String>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl SourceSnapshot {
    pub fn read(policy_dir: &Path, config_path: Option<&Path>) -> SourceSnapshot {
        let mut snapshot = SourceSnapshot { policies: BTreeMap::new(), config: None, unreadable: Vec::new() };
        match std::fs::read_dir(policy_dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let file_name = entry.file_name().to_string_lossy().into_owned();
                    let Some(name) = file_name.strip_suffix(".wasm") else { continue };
                    if file_name.starts_with("..") {
                        continue;
                    }
                    let path = entry.path();
                    match std::fs::read(&path) {
                        Ok(bytes) => {
                            let digest = sha256_hex(&bytes);
                            snapshot.policies.insert(name.to_string(), PolicyFile { path, bytes, digest });
                        }
                        // A symlink left dangling for an instant by a writer: the next event rescans.
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                        Err(error) => snapshot.unreadable.push(format!("{}: {error}", path.display())),
                    }
                }
            }
            Err(error) => snapshot.unreadable.push(format!("policy directory {}: {error}", policy_dir.display())),
        }
        snapshot.config = config_path.map(|path| {
            std::fs::read_to_string(path).map_err(|error| format!("reading {}: {error}", path.display()))
        });
        snapshot
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            policies: self.policies.iter().map(|(name, file)| (name.clone(), file.digest.clone())).collect(),
            config: self.config.as_ref().map(|text| match text {
                Ok(text) => sha256_hex(text.as_bytes()),
                Err(error) => error.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_the_atomic_writers_entries_and_follows_its_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("..2026_11_29_10_00_00.000000001");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("a.wasm"), b"first").unwrap();
        std::os::unix::fs::symlink(data.file_name().unwrap(), dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/a.wasm", dir.path().join("a.wasm")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"not a policy").unwrap();
        let snapshot = SourceSnapshot::read(dir.path(), None);
        assert_eq!(snapshot.policies.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(snapshot.policies["a"].bytes, b"first");
        let before = snapshot.fingerprint();
        assert_eq!(before, SourceSnapshot::read(dir.path(), None).fingerprint(), "same contents, same fingerprint");
        std::fs::write(data.join("a.wasm"), b"second").unwrap();
        assert_ne!(before, SourceSnapshot::read(dir.path(), None).fingerprint());
    }
}
