//! Compiled components, cached in memory by content digest and on disk by digest and engine compatibility hash,
//! so a restart or a reload of an unchanged policy skips the ~40 ms compile.
//!
//! Each compile runs in an engine of its own, dropped once the artifact is made, and the serving engine only
//! deserializes: cranelift keeps the working memory of its compiles (register allocation and code buffers, grown
//! to the largest function, one set per compiling thread) in its engine for reuse, which in the serving engine
//! would stay for the life of the process (~90 MB after loading the default set, measured with heaptrack).
//!
//! Only artifacts this process wrote are ever deserialized: the cache directory belongs to the host, never to the
//! policy source (a ConfigMap), because a precompiled artifact is trusted native code.
//!
//! A component whose compile went past the limits ([`super::compiler`]) is remembered by digest, in memory and
//! beside the artifacts, and refused at once from then on: a rescan or a restart does not pay for it again.

use super::compiler::{CompileError, Compiler};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Artifacts kept on disk: enough for every policy of a large set plus recent versions. A reload storm of new
/// versions would otherwise fill the directory (128 files, 84 MB seen).
const MAX_DISK_ARTIFACTS: usize = 64;
const MAX_DISK_BYTES: u64 = 256 << 20;
/// Refused digests remembered on disk; past this, only in memory.
const MAX_DISK_REFUSALS: usize = 256;

pub struct ArtifactCache {
    /// Components by digest, with how many loaded policies use each: two versions of a policy that differ only
    /// in settings share one component, and the first to go must not drop it for the other.
    in_memory: Mutex<HashMap<String, (Component, usize)>>,
    directory: Option<PathBuf>,
    compatibility: String,
    compiler: Compiler,
    /// Digests whose compile went past the limits, with the reason.
    refused: Mutex<HashMap<String, String>>,
}

/// Where a component came from, for logs and reload metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Memory,
    Disk,
    Compiled,
}

impl ArtifactCache {
    pub fn new(engine: &Engine, directory: Option<PathBuf>, compiler: Compiler) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ArtifactCache {
            in_memory: Mutex::new(HashMap::new()),
            directory,
            compatibility: format!("{:016x}", hasher.finish()),
            compiler,
            refused: Mutex::new(HashMap::new()),
        }
    }

    pub fn directory(&self) -> Option<&std::path::Path> {
        self.directory.as_deref()
    }

    /// The component of `digest`: from memory, from disk, or compiled with an engine of `config` (the serving
    /// `engine`'s own configuration).
    pub fn get_or_compile(&self, engine: &Engine, config: &Config, digest: &str, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        if let Some((component, users)) = self.lock().get_mut(digest) {
            *users += 1;
            return Ok((component.clone(), CacheOutcome::Memory));
        }
        let (component, outcome) = self.load_from_disk_or_compile(engine, config, digest, wasm)?;
        self.lock().entry(digest.to_string()).or_insert_with(|| (component.clone(), 0)).1 += 1;
        Ok((component, outcome))
    }

    /// One user is done with a component; the last one drops it from memory (the disk copy stays for the next
    /// start).
    pub fn release(&self, digest: &str) {
        let mut in_memory = self.lock();
        if let Some((_, users)) = in_memory.get_mut(digest) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                in_memory.remove(digest);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Component, usize)>> {
        self.in_memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn load_from_disk_or_compile(&self, engine: &Engine, config: &Config, digest: &str, wasm: &[u8]) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(directory) = &self.directory else {
            let artifact = self.compile(config, digest, wasm)?;
            // SAFETY: the bytes were produced just now by an engine of the same configuration.
            return Ok((unsafe { Component::deserialize(engine, &artifact)? }, CacheOutcome::Compiled));
        };
        let path = directory.join(format!("{digest}-{}.cwasm", self.compatibility));
        if path.exists() {
            // SAFETY: the file is in the host's own cache directory and was written by `precompile_component` of an
            // engine with the same compatibility hash (part of the name).
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Disk)),
                Err(error) => tracing::warn!(path = %path.display(), %error, "discarding unreadable cached artifact"),
            }
        }
        let artifact = self.compile(config, digest, wasm)?;
        if let Err(error) = write_atomically(&path, &artifact) {
            tracing::warn!(path = %path.display(), %error, "could not write artifact cache");
        }
        let in_use: Vec<String> = self.lock().keys().cloned().chain([digest.to_string()]).collect();
        if let Err(error) = prune(directory, &in_use, MAX_DISK_ARTIFACTS, MAX_DISK_BYTES) {
            tracing::warn!(directory = %directory.display(), %error, "could not prune the artifact cache");
        }
        // SAFETY: the bytes were produced just now by an engine of the same configuration (in this process or
        // in the child that runs this binary).
        let component = unsafe { Component::deserialize(engine, &artifact)? };
        Ok((component, CacheOutcome::Compiled))
    }

    /// The artifact of `wasm`, or the refusal of a digest that went past the compile limits before.
    fn compile(&self, config: &Config, digest: &str, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
        if let Some(reason) = self.refusal(digest) {
            return Err(wasmtime::Error::msg(format!("{reason} (remembered from an earlier compile of this file)")));
        }
        match self.compiler.compile(config, wasm) {
            Ok(artifact) => Ok(artifact),
            Err(CompileError::OverLimit(reason)) => {
                self.remember_refusal(digest, &reason);
                Err(wasmtime::Error::msg(reason))
            }
            Err(error) => Err(wasmtime::Error::msg(error.to_string())),
        }
    }

    /// Where a refusal is remembered: for this engine (an upgrade may compile it) and these limits (raised ones
    /// try again).
    fn refusal_path(&self, digest: &str) -> Option<PathBuf> {
        let directory = self.directory.as_ref()?;
        Some(directory.join(format!("{digest}-{}-{}.refused", self.compatibility, self.compiler.limits_tag())))
    }

    fn refusal(&self, digest: &str) -> Option<String> {
        let mut refused = self.refused.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(reason) = refused.get(digest) {
            return Some(reason.clone());
        }
        let remembered = std::fs::read_to_string(self.refusal_path(digest)?).ok()?;
        refused.insert(digest.to_string(), remembered.clone());
        Some(remembered)
    }

    fn remember_refusal(&self, digest: &str, reason: &str) {
        tracing::warn!(digest = &digest[..digest.len().min(12)], reason, "a component went past the compile limits; refused from now on");
        self.refused.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(digest.to_string(), reason.to_string());
        let (Some(directory), Some(path)) = (&self.directory, self.refusal_path(digest)) else { return };
        let on_disk = std::fs::read_dir(directory)
            .map(|entries| entries.flatten().filter(|entry| entry.file_name().to_string_lossy().ends_with(".refused")).count())
            .unwrap_or(0);
        if on_disk < MAX_DISK_REFUSALS {
            if let Err(error) = write_atomically(&path, reason.as_bytes()) {
                tracing::warn!(path = %path.display(), %error, "could not remember the refusal");
            }
        }
    }
}

/// Deletes the oldest artifacts (by modification time) beyond `max_files` or `max_bytes`, never one whose digest
/// is `in_use`.
fn prune(directory: &std::path::Path, in_use: &[String], max_files: usize, max_bytes: u64) -> std::io::Result<()> {
    let mut artifacts = Vec::new();
    for entry in std::fs::read_dir(directory)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".cwasm") {
            continue;
        }
        let metadata = entry.metadata()?;
        artifacts.push((metadata.modified()?, metadata.len(), name, entry.path()));
    }
    artifacts.sort();
    let mut files = artifacts.len();
    let mut bytes: u64 = artifacts.iter().map(|(_, size, _, _)| size).sum();
    for (_, size, name, path) in artifacts {
        if files <= max_files && bytes <= max_bytes {
            break;
        }
        if in_use.iter().any(|digest| name.starts_with(digest.as_str())) {
            continue;
        }
        std::fs::remove_file(&path)?;
        files -= 1;
        bytes -= size;
    }
    Ok(())
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // Unique per write: two threads compiling the same digest must not write one temporary file.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let temporary = path.with_extension(format!("tmp{}-{}", std::process::id(), WRITES.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_artifacts_not_in_use_are_pruned() {
        let directory = tempfile::tempdir().unwrap();
        for (index, digest) in ["aaa", "bbb", "ccc", "ddd"].iter().enumerate() {
            let path = directory.path().join(format!("{digest}-compat.cwasm"));
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            let modified = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + index as u64);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
        }
        std::fs::write(directory.path().join("notes.txt"), b"left alone").unwrap();
        prune(directory.path(), &["aaa".to_string()], 2, u64::MAX).unwrap();
        let mut left: Vec<String> =
            std::fs::read_dir(directory.path()).unwrap().map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["aaa-compat.cwasm", "ddd-compat.cwasm", "notes.txt"], "the oldest in use stays, the next oldest go");
        prune(directory.path(), &[], 10, 150).unwrap();
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 2, "over the byte budget, the oldest goes");
    }
}
