//! Policies the configuration takes from an OCI registry (`policies.NAME.source: oci://...`): pulled once into a
//! store by digest, then read from there, so a registry that is down never blocks the host.
//!
//! A source pinned by digest is pulled only when the store does not hold it; a tag is resolved once (the digest is
//! remembered in the store and reported as the policy's source) and then treated as pinned until the configuration
//! changes it. The store keeps each artifact's manifest and attached signatures beside the component and checks them
//! again when it reads them, so a component from the store is verified exactly as one just pulled. It lives under
//! the artifact cache directory (`oci/`), or only in memory without one.

use crate::oci::{parse_reference, Artifact, RegistryClient, RegistryOptions};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one pull may take before the reload gives up on it (and retries at the next rescan).
const PULL_TIMEOUT: Duration = Duration::from_secs(60);
/// Artifacts kept in the store besides those serving: recent versions to go back to without the registry, within
/// a byte budget that leaves the cache volume room for the compiled artifacts (manifests/30-deployment.yaml).
const MAX_STORED_UNUSED: usize = 16;
const MAX_STORED_UNUSED_BYTES: u64 = 64 << 20;
/// An artifact's record: its manifest and signatures, a few KiB.
const MAX_RECORD_BYTES: u64 = 1 << 20;

pub struct RemoteSources {
    directory: Option<PathBuf>,
    /// Artifacts by manifest digest.
    artifacts: Mutex<HashMap<String, Arc<Artifact>>>,
    /// Tags resolved: source as written -> manifest digest.
    resolved: Mutex<HashMap<String, String>>,
    /// Whether the last reload failed to get a source: the next rescan reloads even if no file changed.
    failing: std::sync::atomic::AtomicBool,
}

impl RemoteSources {
    pub fn new(cache_directory: Option<PathBuf>) -> RemoteSources {
        let directory = cache_directory.map(|directory| directory.join("oci"));
        let resolved = directory
            .as_ref()
            .and_then(|directory| std::fs::read(directory.join("tags.json")).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        RemoteSources { directory, artifacts: Mutex::default(), resolved: Mutex::new(resolved), failing: Default::default() }
    }

    /// Whether a source failed at the last reload (see [`Self::failed`]).
    pub fn failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records whether the reload that just ended failed to get a source.
    pub fn failed(&self, failed: bool) {
        self.failing.store(failed, std::sync::atomic::Ordering::Relaxed);
    }

    /// The artifact `source` names, with the source as reported (`oci://REGISTRY/REPOSITORY:TAG@sha256:HEX`): from
    /// memory or the store when its digest is known, else pulled. Blocks the calling (reload) thread.
    pub fn get(&self, source: &str, options: &RegistryOptions) -> Result<(Arc<Artifact>, String), String> {
        let reference = parse_reference(source).map_err(|error| format!("{error:#}"))?;
        let known = reference.digest().map(str::to_string).or_else(|| self.lock_resolved().get(source).cloned());
        if let Some(digest) = &known {
            if let Some(artifact) = self.lock_artifacts().get(digest) {
                return Ok((artifact.clone(), reported(source, digest)));
            }
            if let Some(artifact) = self.read_stored(digest) {
                let artifact = Arc::new(artifact);
                self.lock_artifacts().insert(digest.clone(), artifact.clone());
                return Ok((artifact, reported(source, digest)));
            }
        }
        let target = known.as_ref().map_or(reference.clone(), |digest| reference.clone_with_digest(digest.clone()));
        let artifact = pull(&target, options).map_err(|error| format!("{error:#}"))?;
        tracing::info!(%source, digest = %artifact.digest, bytes = artifact.component.len(), "policy pulled from its registry");
        let digest = artifact.digest.clone();
        self.store(&artifact);
        if reference.digest().is_none() {
            self.lock_resolved().insert(source.to_string(), digest.clone());
            self.store_tags();
        }
        let artifact = Arc::new(artifact);
        self.lock_artifacts().insert(digest.clone(), artifact.clone());
        Ok((artifact, reported(source, &digest)))
    }

    /// Drops the artifact `source` resolved to (`digest`) from memory and the store, and the tag's resolution: its
    /// signatures did not check, so the next rescan pulls it again with the signatures attached by then.
    pub fn forget(&self, source: &str, digest: &str) {
        self.lock_artifacts().remove(digest);
        if let Some(folder) = self.stored_at(digest) {
            let _ = std::fs::remove_dir_all(folder);
        }
        if self.lock_resolved().remove(source).is_some() {
            self.store_tags();
        }
        self.failed(true);
    }

    /// Keeps in memory only the artifacts of `serving` (manifest digests), and in the store those and the most
    /// recent others, at most [`MAX_STORED_UNUSED`] of [`MAX_STORED_UNUSED_BYTES`] together.
    pub fn retain(&self, serving: &[&str]) {
        self.lock_artifacts().retain(|digest, _| serving.contains(&digest.as_str()));
        let Some(directory) = &self.directory else { return };
        let Ok(entries) = std::fs::read_dir(directory) else { return };
        let mut unused: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .filter(|entry| !serving.iter().any(|digest| entry.file_name().to_string_lossy() == digest.replace(':', "-")))
            .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
            .collect();
        // Newest first: kept while they fit.
        unused.sort_by(|a, b| b.cmp(a));
        let mut kept_bytes = 0u64;
        let size = |folder: &PathBuf| {
            std::fs::read_dir(folder).map(|files| files.flatten().filter_map(|file| file.metadata().ok()).map(|metadata| metadata.len()).sum()).unwrap_or(0)
        };
        for (index, (_, folder)) in unused.into_iter().enumerate() {
            kept_bytes += size(&folder);
            if index < MAX_STORED_UNUSED && kept_bytes <= MAX_STORED_UNUSED_BYTES {
                continue;
            }
            if let Err(error) = std::fs::remove_dir_all(&folder) {
                tracing::warn!(%error, folder = %folder.display(), "an unused stored policy artifact could not be removed");
            }
        }
    }

    fn lock_artifacts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Artifact>>> {
        self.artifacts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_resolved(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.resolved.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn stored_at(&self, digest: &str) -> Option<PathBuf> {
        Some(self.directory.as_ref()?.join(digest.replace(':', "-")))
    }

    /// The artifact of `digest` from the store, if it is there and holds together.
    fn read_stored(&self, digest: &str) -> Option<Artifact> {
        let folder = self.stored_at(digest)?;
        let record = super::source::read_regular(&folder.join("artifact.json"), MAX_RECORD_BYTES).ok()?;
        let mut artifact: Artifact = serde_json::from_slice(&record).ok()?;
        artifact.component = super::source::read_regular(&folder.join("component.wasm"), super::source::MAX_POLICY_BYTES).ok()?;
        match artifact.check() {
            Ok(()) if artifact.digest == digest => Some(artifact),
            outcome => {
                tracing::warn!(%digest, folder = %folder.display(), ?outcome, "a stored policy artifact does not hold together; pulled again");
                None
            }
        }
    }

    /// Keeps `artifact` in the store (best effort: without it, the next restart pulls again).
    fn store(&self, artifact: &Artifact) {
        let Some(folder) = self.stored_at(&artifact.digest) else { return };
        let written = (|| -> std::io::Result<()> {
            let partial = folder.with_extension("partial");
            let _ = std::fs::remove_dir_all(&partial);
            std::fs::create_dir_all(&partial)?;
            std::fs::write(partial.join("component.wasm"), &artifact.component)?;
            std::fs::write(partial.join("artifact.json"), serde_json::to_vec(artifact)?)?;
            let _ = std::fs::remove_dir_all(&folder);
            std::fs::rename(&partial, &folder)
        })();
        if let Err(error) = written {
            tracing::warn!(%error, folder = %folder.display(), "a pulled policy could not be kept in the store; a restart pulls it again");
        }
    }

    fn store_tags(&self) {
        let Some(directory) = &self.directory else { return };
        let tags = serde_json::to_vec(&*self.lock_resolved()).expect("tags serialize");
        let temporary = directory.join("tags.json.partial");
        if let Err(error) = std::fs::create_dir_all(directory)
            .and_then(|()| std::fs::write(&temporary, tags))
            .and_then(|()| std::fs::rename(&temporary, directory.join("tags.json")))
        {
            tracing::warn!(%error, "the resolved tags could not be kept; a restart resolves them again");
        }
    }
}

/// The source as reported: the digest appended to a tag, as the reference pinned.
fn reported(source: &str, digest: &str) -> String {
    if source.contains('@') {
        source.to_string()
    } else {
        format!("{source}@{digest}")
    }
}

/// Pulls `reference` on a thread of its own (reloads run on worker threads, where no runtime may be entered).
fn pull(reference: &oci_client::Reference, options: &RegistryOptions) -> anyhow::Result<Artifact> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(async {
                    let client = RegistryClient::new(options, reference)?;
                    tokio::time::timeout(PULL_TIMEOUT, client.fetch(reference))
                        .await
                        .map_err(|_| anyhow::anyhow!("pulling {}: no answer within {PULL_TIMEOUT:?}", reference.whole()))?
                })
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("pulling {} panicked", reference.whole())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_what_serves_and_the_most_recent_others() {
        let cache = tempfile::tempdir().unwrap();
        let sources = RemoteSources::new(Some(cache.path().to_path_buf()));
        let store = cache.path().join("oci");
        let digests: Vec<String> = (0..20).map(|index| format!("sha256:{index:064}")).collect();
        for (age, digest) in digests.iter().enumerate() {
            let folder = store.join(digest.replace(':', "-"));
            std::fs::create_dir_all(&folder).unwrap();
            // The first is the oldest.
            let when = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + age as u64);
            std::fs::File::open(&folder).unwrap().set_modified(when).unwrap();
        }
        sources.retain(&[digests[0].as_str()]);
        let mut left: Vec<String> = std::fs::read_dir(&store).unwrap().map(|entry| entry.unwrap().file_name().to_string_lossy().replace('-', ":")).collect();
        left.sort();
        let mut expected: Vec<String> = std::iter::once(digests[0].clone()).chain(digests[4..].iter().cloned()).collect();
        expected.sort();
        assert_eq!(left, expected, "the serving one, old as it is, and the 16 most recent others");
    }
}
