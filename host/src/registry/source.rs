//! Reading what is on disk: the policy directory and the configuration file, as they are now.
//!
//! The directory may be a ConfigMap volume: the kubelet keeps the data in a timestamped `..<time>/` directory,
//! points `..data` at it and exposes each key as a symlink `name -> ..data/name`. Entries starting with `..` are
//! the writer's own and are skipped; reading a visible name follows the symlinks to the current data. Policies
//! are `NAME.wasm` files, `NAME.wasm.zst` files (one compressed component) or components of a bundle
//! (`*.tar.zst`, see [`super::bundle`]). A component's signature is `NAME.wasm.sig` beside it or in its bundle
//! (see [`super::signature`]).

use super::bundle::{decompress, unpack, BUNDLE_SUFFIX, COMPRESSED_SUFFIX};
use super::signature::{MAX_SIGNATURE_BYTES, SIGNATURE_SUFFIX};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Larger than any policy a ConfigMap (1 MiB) can deliver, with room for other volume types; bounds what one file
/// can make the host read (a symlink to `/dev/zero` would otherwise be read until the host is out of memory).
pub const MAX_POLICY_BYTES: u64 = 16 << 20;

/// Reads a policy file if it is a regular file (after following symlinks) of at most [`MAX_POLICY_BYTES`]: a FIFO
/// or a device would block the reload thread or never end.
fn read_policy(path: &Path) -> std::io::Result<Vec<u8>> {
    read_regular(path, MAX_POLICY_BYTES)
}

/// The file at `path` if it is a regular file (after following symlinks) of at most `limit` bytes. Checked on the
/// opened descriptor, which is opened without blocking: a file swapped for a FIFO between a check by name and the
/// open would otherwise block the reader forever.
pub(crate) fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    let file = std::fs::File::options().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(invalid(format!("not a regular file ({:?}); only regular files are read", metadata.file_type())));
    }
    if metadata.len() > limit {
        return Err(invalid(format!("{} bytes is more than the {limit} a file here may have", metadata.len())));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(invalid(format!("grew past the {limit} bytes a file here may have while being read")));
    }
    Ok(bytes)
}

/// One policy's component: a `NAME.wasm` file, a `NAME.wasm.zst` file uncompressed, or a bundle's entry.
pub struct PolicyFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`, hex.
    pub digest: String,
    /// Its `NAME.wasm.sig`, if there is one: loose beside it, else in its bundle; an error if it cannot be read.
    pub signature: Option<Result<Vec<u8>, String>>,
    /// The OCI artifact it came from (`policies.NAME.source`), whose attached signatures stand for `signature`.
    pub artifact: Option<std::sync::Arc<crate::oci::Artifact>>,
}

impl PolicyFile {
    pub fn new(path: PathBuf, bytes: Vec<u8>) -> PolicyFile {
        let digest = sha256_hex(&bytes);
        PolicyFile { path, bytes, digest, signature: None, artifact: None }
    }
}

/// What the policy directory and configuration file hold at one moment.
pub struct SourceSnapshot {
    /// Policy files by policy name (the file name without `.wasm` or `.wasm.zst`), uncompressed.
    pub policies: BTreeMap<String, PolicyFile>,
    /// The configuration file's text, when the registry follows one.
    pub config: Option<Result<String, String>>,
    /// Files that could not be read, with the reason.
    pub unreadable: Vec<String>,
    /// Policies whose own file (`NAME.wasm` or `NAME.wasm.zst`) is there but could not be read, with the reason:
    /// not taken from a bundle instead (a damaged override must not quietly bring the bundled version back).
    pub failed: BTreeMap<String, String>,
    /// Bundles read but not unpacked yet ([`Self::unpack_bundles`]).
    packed: Vec<(PathBuf, Vec<u8>)>,
    /// Loose `NAME.wasm.sig` files by policy name, given to the components when the bundles are unpacked.
    signatures: BTreeMap<String, Result<Vec<u8>, String>>,
    fingerprint: Fingerprint,
}

/// Identifies a snapshot's contents: equal fingerprints mean nothing changed. A bundle counts by the digest of its
/// packed bytes, so an unchanged bundle is not unpacked (up to 256 MiB) and hashed again on every rescan, and a
/// bundle that is refused still changes the fingerprint (and is reported).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    files: BTreeMap<String, String>,
    config: Option<String>,
}

impl Fingerprint {
    /// This fingerprint with the contents of `files` too: the verification keys, so that a key rotated in its
    /// Secret is a change that checks every signature again.
    pub fn with_files(mut self, files: &[&Path]) -> Fingerprint {
        for path in files {
            let state = read_regular(path, super::signature::MAX_KEY_BYTES).map_or_else(|error| error.to_string(), |bytes| sha256_hex(&bytes));
            self.files.insert(format!("key {}", path.display()), state);
        }
        self
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl SourceSnapshot {
    /// The directory and the configuration file, bundles unpacked.
    pub fn read(policy_dir: &Path, config_path: Option<&Path>) -> SourceSnapshot {
        let mut snapshot = Self::read_packed(policy_dir, config_path);
        snapshot.unpack_bundles();
        snapshot
    }

    /// The directory and the configuration file with the bundles still packed: enough for the
    /// [`fingerprint`](Self::fingerprint), which says whether [`unpack_bundles`](Self::unpack_bundles) is worth it.
    pub fn read_packed(policy_dir: &Path, config_path: Option<&Path>) -> SourceSnapshot {
        let mut snapshot = SourceSnapshot {
            policies: BTreeMap::new(),
            config: None,
            unreadable: Vec::new(),
            failed: BTreeMap::new(),
            packed: Vec::new(),
            signatures: BTreeMap::new(),
            fingerprint: Fingerprint::default(),
        };
        let (mut compressed, mut bundles) = (Vec::new(), Vec::new());
        match std::fs::read_dir(policy_dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let file_name = entry.file_name().to_string_lossy().into_owned();
                    if file_name.starts_with("..") {
                        continue;
                    }
                    if let Some(name) = file_name.strip_suffix(SIGNATURE_SUFFIX) {
                        match read_regular(&entry.path(), MAX_SIGNATURE_BYTES) {
                            // Dangling for an instant while a writer swaps the directory: the next event rescans.
                            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                            read => {
                                snapshot.signatures.insert(name.to_string(), read.map_err(|error| format!("{}: {error}", entry.path().display())));
                            }
                        }
                        continue;
                    }
                    let bundle = file_name.ends_with(BUNDLE_SUFFIX);
                    let zst = file_name.strip_suffix(COMPRESSED_SUFFIX);
                    let Some(name) = file_name.strip_suffix(".wasm").or(zst).or(bundle.then_some(file_name.as_str())) else { continue };
                    let path = entry.path();
                    match read_policy(&path) {
                        Ok(bytes) if bundle => bundles.push((path, bytes)),
                        Ok(bytes) if zst.is_some() => compressed.push((name.to_string(), path, bytes)),
                        Ok(bytes) => {
                            snapshot.policies.insert(name.to_string(), PolicyFile::new(path, bytes));
                        }
                        // A symlink left dangling for an instant by a writer: the next event rescans.
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                        Err(error) => {
                            let message = format!("{}: {error}", path.display());
                            if !bundle {
                                snapshot.failed.insert(name.to_string(), message.clone());
                            }
                            snapshot.unreadable.push(message);
                        }
                    }
                }
            }
            Err(error) => snapshot.unreadable.push(format!("policy directory {}: {error}", policy_dir.display())),
        }
        snapshot.add_compressed(compressed);
        snapshot.config = config_path.map(|path| {
            let bytes = read_regular(path, crate::config::MAX_CONFIG_BYTES as u64).map_err(|error| format!("reading {}: {error}", path.display()))?;
            String::from_utf8(bytes).map_err(|_| format!("reading {}: not UTF-8 text", path.display()))
        });
        let mut files: BTreeMap<String, String> = snapshot.policies.iter().map(|(name, file)| (name.clone(), file.digest.clone())).collect();
        files.extend(snapshot.failed.iter().map(|(name, error)| (name.clone(), error.clone())));
        files.extend(bundles.iter().map(|(path, bytes): &(PathBuf, Vec<u8>)| (path.display().to_string(), sha256_hex(bytes))));
        files.extend(snapshot.signatures.iter().map(|(name, signature)| {
            let state = signature.as_ref().map_or_else(Clone::clone, |bytes| sha256_hex(bytes));
            (format!("{name}{SIGNATURE_SUFFIX}"), state)
        }));
        let config = snapshot.config.as_ref().map(|text| match text {
            Ok(text) => sha256_hex(text.as_bytes()),
            Err(error) => error.clone(),
        });
        snapshot.fingerprint = Fingerprint { files, config };
        snapshot.packed = bundles;
        snapshot
    }

    /// Adds the bundles' components (see [`Self::add_bundles`]), then gives each component its loose signature, which
    /// takes precedence over its bundle's.
    pub fn unpack_bundles(&mut self) {
        let bundles = std::mem::take(&mut self.packed);
        self.add_bundles(bundles);
        for (name, signature) in std::mem::take(&mut self.signatures) {
            if let Err(message) = &signature {
                self.unreadable.push(message.clone());
            }
            if let Some(file) = self.policies.get_mut(&name) {
                file.signature = Some(signature);
            }
        }
    }

    /// Each `NAME.wasm.zst`, uncompressed, unless a `NAME.wasm` is there too (which is kept, with an error: one of
    /// the two is a leftover, and which one the user meant is not ours to guess).
    fn add_compressed(&mut self, files: Vec<(String, PathBuf, Vec<u8>)>) {
        for (name, path, bytes) in files {
            if let Some(loose) = self.policies.get(&name) {
                self.unreadable.push(format!("{}: {name} is also {}, which is kept", path.display(), loose.path.display()));
                continue;
            }
            match decompress(&bytes) {
                Ok(bytes) => {
                    self.policies.insert(name, PolicyFile::new(path, bytes));
                }
                Err(error) => {
                    let message = format!("{}: {error}", path.display());
                    self.failed.insert(name, message.clone());
                    self.unreadable.push(message);
                }
            }
        }
    }

    /// The components of each bundle, in file name order. A loose `NAME.wasm` takes precedence over a bundle's
    /// (drop one file next to the default set's bundle to replace that policy); a name in two bundles is an error,
    /// and the first bundle's component is kept.
    fn add_bundles(&mut self, mut bundles: Vec<(PathBuf, Vec<u8>)>) {
        bundles.sort_by(|a, b| a.0.cmp(&b.0));
        let loose: std::collections::BTreeSet<String> = self.policies.keys().chain(self.failed.keys()).cloned().collect();
        for (bundle, bytes) in bundles {
            let components = match unpack(&bytes) {
                Ok(components) => components,
                Err(error) => {
                    self.unreadable.push(format!("{}: {error}", bundle.display()));
                    continue;
                }
            };
            let (signatures, components): (Vec<_>, Vec<_>) = components.into_iter().partition(|(file_name, _)| file_name.ends_with(SIGNATURE_SUFFIX));
            let mut signatures: BTreeMap<String, Vec<u8>> =
                signatures.into_iter().filter_map(|(file_name, bytes)| Some((file_name.strip_suffix(SIGNATURE_SUFFIX)?.to_string(), bytes))).collect();
            for (file_name, bytes) in components {
                let name = file_name.strip_suffix(".wasm").unwrap_or(&file_name).to_string();
                if loose.contains(&name) {
                    continue;
                }
                let path = PathBuf::from(format!("{}:{file_name}", bundle.display()));
                if let Some(first) = self.policies.get(&name) {
                    self.unreadable.push(format!("{}: {name} is also in {}, which is kept", path.display(), first.path.display()));
                    continue;
                }
                let mut file = PolicyFile::new(path, bytes);
                file.signature = signatures.remove(&name).map(Ok);
                self.policies.insert(name, file);
            }
        }
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint.clone()
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

    #[test]
    fn bundles_add_their_components_and_a_loose_file_replaces_one() {
        let dir = tempfile::tempdir().unwrap();
        let pack = |entries: &[(&str, &[u8])]| {
            super::super::bundle::pack(&entries.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect::<Vec<_>>()).unwrap()
        };
        std::fs::write(dir.path().join("a.tar.zst"), pack(&[("a.wasm", b"bundled a"), ("b.wasm", b"bundled b")])).unwrap();
        std::fs::write(dir.path().join("z.tar.zst"), pack(&[("b.wasm", b"other b"), ("c.wasm", b"bundled c")])).unwrap();
        std::fs::write(dir.path().join("a.wasm"), b"loose a").unwrap();
        std::fs::write(dir.path().join("broken.tar.zst"), b"not a bundle").unwrap();
        let snapshot = SourceSnapshot::read(dir.path(), None);
        let contents: Vec<(&str, &[u8])> = snapshot.policies.iter().map(|(name, file)| (name.as_str(), file.bytes.as_slice())).collect();
        assert_eq!(contents, [("a", b"loose a".as_slice()), ("b", b"bundled b"), ("c", b"bundled c")]);
        assert!(snapshot.policies["c"].path.ends_with("z.tar.zst:c.wasm"), "{:?}", snapshot.policies["c"].path);
        assert_eq!(snapshot.unreadable.len(), 2, "{:?}", snapshot.unreadable);
        assert!(snapshot.unreadable.iter().any(|error| error.contains("broken.tar.zst: not zstd")), "{:?}", snapshot.unreadable);
        assert!(
            snapshot.unreadable.iter().any(|error| error.contains("z.tar.zst:b.wasm: b is also in") && error.contains("a.tar.zst:b.wasm, which is kept")),
            "{:?}",
            snapshot.unreadable
        );
    }

    #[test]
    fn bundles_count_in_the_fingerprint_packed_so_a_refused_one_is_a_change_and_an_unchanged_one_is_not_unpacked() {
        let dir = tempfile::tempdir().unwrap();
        let pack = |entries: &[(&str, &[u8])]| {
            super::super::bundle::pack(&entries.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect::<Vec<_>>()).unwrap()
        };
        std::fs::write(dir.path().join("a.tar.zst"), pack(&[("a.wasm", b"bundled a")])).unwrap();
        let before = SourceSnapshot::read(dir.path(), None).fingerprint();
        let packed = SourceSnapshot::read_packed(dir.path(), None);
        assert!(packed.policies.is_empty() && packed.fingerprint() == before, "the fingerprint needs no unpacking");
        // A bundle that holds nothing usable still changes the directory: the reload that reads it reports it.
        std::fs::write(dir.path().join("broken.tar.zst"), b"not a bundle").unwrap();
        assert_ne!(SourceSnapshot::read_packed(dir.path(), None).fingerprint(), before);
    }

    #[test]
    fn a_compressed_component_is_read_uncompressed_and_a_loose_one_of_the_same_name_wins() {
        let dir = tempfile::tempdir().unwrap();
        let compress = |bytes: &[u8]| super::super::bundle::compress(bytes).unwrap();
        std::fs::write(dir.path().join("a.wasm.zst"), compress(b"compressed a")).unwrap();
        std::fs::write(dir.path().join("b.wasm.zst"), compress(b"compressed b")).unwrap();
        std::fs::write(dir.path().join("b.wasm"), b"loose b").unwrap();
        std::fs::write(dir.path().join("c.wasm.zst"), b"loose bytes named .zst").unwrap();
        let bundle = super::super::bundle::pack(&[("a.wasm".to_string(), b"bundled a".to_vec()), ("c.wasm".to_string(), b"bundled c".to_vec())]).unwrap();
        std::fs::write(dir.path().join("set.tar.zst"), bundle).unwrap();
        let snapshot = SourceSnapshot::read(dir.path(), None);
        let contents: Vec<(&str, &[u8])> = snapshot.policies.iter().map(|(name, file)| (name.as_str(), file.bytes.as_slice())).collect();
        // The damaged c.wasm.zst is not replaced by the bundle's c: it fails, and the host keeps what it serves.
        assert_eq!(contents, [("a", b"compressed a".as_slice()), ("b", b"loose b")]);
        assert_eq!(snapshot.failed.keys().collect::<Vec<_>>(), ["c"]);
        // The digest is the component's, whichever way it was stored.
        assert_eq!(snapshot.policies["a"].digest, sha256_hex(b"compressed a"));
        assert!(snapshot.policies["a"].path.ends_with("a.wasm.zst"));
        let mut errors = snapshot.unreadable.clone();
        errors.sort();
        assert_eq!(errors.len(), 2, "{errors:?}");
        let kept = format!("b.wasm.zst: b is also {}, which is kept", dir.path().join("b.wasm").display());
        assert!(errors[0].ends_with(&kept), "{}", errors[0]);
        assert!(errors[1].ends_with("c.wasm.zst: not zstd: a NAME.wasm.zst file is one component compressed with zstd"), "{}", errors[1]);
    }

    #[test]
    fn a_signature_is_found_beside_its_component_or_in_its_bundle_and_the_loose_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let entries =
            [("a.wasm", b"bundled a".as_slice()), ("a.wasm.sig", b"bundle's sig of a"), ("b.wasm", b"bundled b"), ("b.wasm.sig", b"bundle's sig of b")];
        let bundle = super::super::bundle::pack(&entries.iter().map(|(name, bytes)| (name.to_string(), bytes.to_vec())).collect::<Vec<_>>()).unwrap();
        std::fs::write(dir.path().join("set.tar.zst"), bundle).unwrap();
        std::fs::write(dir.path().join("b.wasm.sig"), b"loose sig of b").unwrap();
        std::fs::write(dir.path().join("c.wasm.zst"), super::super::bundle::compress(b"compressed c").unwrap()).unwrap();
        std::fs::write(dir.path().join("c.wasm.sig"), b"loose sig of c").unwrap();
        std::fs::write(dir.path().join("d.wasm"), b"unsigned d").unwrap();
        let snapshot = SourceSnapshot::read(dir.path(), None);
        let signature = |name: &str| snapshot.policies[name].signature.clone().map(|signature| String::from_utf8(signature.unwrap()).unwrap());
        assert_eq!(signature("a").as_deref(), Some("bundle's sig of a"));
        assert_eq!(signature("b").as_deref(), Some("loose sig of b"));
        assert_eq!(signature("c").as_deref(), Some("loose sig of c"));
        assert_eq!(signature("d"), None);
        assert!(snapshot.unreadable.is_empty(), "{:?}", snapshot.unreadable);
        // A new signature alone is a change: the reload checks it.
        let before = snapshot.fingerprint();
        std::fs::write(dir.path().join("d.wasm.sig"), b"sig of d").unwrap();
        assert_ne!(SourceSnapshot::read(dir.path(), None).fingerprint(), before);
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = std::ffi::CString::new(dir.path().join("fifo.wasm").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.wasm")).unwrap();
        std::fs::write(dir.path().join("big.wasm"), vec![0u8; MAX_POLICY_BYTES as usize + 1]).unwrap();
        std::fs::write(dir.path().join("fine.wasm"), b"bytes").unwrap();
        let snapshot = SourceSnapshot::read(dir.path(), None);
        assert_eq!(snapshot.policies.keys().collect::<Vec<_>>(), ["fine"]);
        let mut errors = snapshot.unreadable.clone();
        errors.sort();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].ends_with("big.wasm: 16777217 bytes is more than the 16777216 a file here may have"), "{}", errors[0]);
        assert!(errors[1].contains("fifo.wasm: not a regular file"), "{}", errors[1]);
        assert!(errors[2].contains("zero.wasm: not a regular file"), "{}", errors[2]);
    }
}
