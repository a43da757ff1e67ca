//! An audit log, as kube-apiserver's at its Metadata level: one JSON line per request to a resource once it is
//! answered (when, who, verb, resource, subresource, namespace, name, status code). Benchmarks and tests count
//! from it what the server received and how it answered (bindings per pod, evictions refused by a budget),
//! rather than what a client says it sent.

use serde::Serialize;
use std::fs::File;
use std::io::{LineWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// One answered request.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AuditEntry {
    /// Milliseconds since the Unix epoch, when the answer was ready.
    pub at_ms: u64,
    pub user: String,
    pub verb: String,
    /// `pods`, `deployments.apps`, ...
    pub resource: String,
    /// `binding`, `eviction`, `status`, ...; empty for the object itself.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
}

pub struct AuditLog {
    out: Mutex<LineWriter<File>>,
}

impl AuditLog {
    /// Appends to `path`, creating it.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditLog { out: Mutex::new(LineWriter::new(file)) })
    }

    /// Writes `entry` stamped with the time now. A write that fails (a full disk) is dropped: the log must
    /// never fail a request.
    pub fn record(&self, mut entry: AuditEntry) {
        entry.at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as u64);
        let Ok(mut line) = serde_json::to_vec(&entry) else { return };
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = out.write_all(&line);
    }

    /// Every entry of the log at `path`, in order (lines that do not parse, a last one half written, are skipped).
    pub fn read(path: &Path) -> std::io::Result<Vec<AuditEntry>> {
        Ok(std::fs::read_to_string(path)?.lines().filter_map(|line| serde_json::from_str(line).ok()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_appended_one_per_line_and_read_back() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("audit.log");
        let log = AuditLog::open(&path).unwrap();
        let entry = |name: &str, code| AuditEntry {
            at_ms: 0,
            user: "admin".into(),
            verb: "create".into(),
            resource: "pods".into(),
            subresource: "binding".into(),
            namespace: "default".into(),
            name: name.into(),
            code,
        };
        log.record(entry("a", 201));
        log.record(entry("a", 409));
        let read = AuditLog::read(&path).unwrap();
        assert_eq!(read.iter().map(|entry| (entry.name.as_str(), entry.code)).collect::<Vec<_>>(), [("a", 201), ("a", 409)]);
        assert!(read[0].at_ms > 0 && read[1].at_ms >= read[0].at_ms);
    }
}
