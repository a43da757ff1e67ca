//! The kubelet's atomic writer for ConfigMap volumes, step for step (pkg/volume/util/atomic_writer.go): the
//! payload goes into a new `..<timestamp>` directory, a `..data_tmp` symlink to it is renamed over `..data`,
//! visible names are symlinks `name -> ..data/name`, then the old directory and stale names are removed.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

pub struct AtomicWriter {
    target: PathBuf,
}

impl AtomicWriter {
    pub fn new(target: &Path) -> AtomicWriter {
        std::fs::create_dir_all(target).unwrap();
        AtomicWriter { target: target.to_path_buf() }
    }

    pub fn path(&self) -> &Path {
        &self.target
    }

    /// Replaces the whole payload, as the kubelet does when the ConfigMap changes.
    pub fn write(&self, payload: &BTreeMap<String, Vec<u8>>) {
        let data_link = self.target.join("..data");
        let old_directory = std::fs::read_link(&data_link).ok();
        // 1. A new timestamped directory with the payload.
        let stamp = jiff::Timestamp::now().strftime("..%Y_%m_%d_%H_%M_%S.%f").to_string();
        let new_directory = self.target.join(format!("{stamp}{:04}", fastrand::u32(..10_000)));
        std::fs::create_dir(&new_directory).unwrap();
        for (name, bytes) in payload {
            std::fs::write(new_directory.join(name), bytes).unwrap();
        }
        // 2. `..data_tmp` -> the new directory, renamed over `..data` (the atomic step).
        let temporary_link = self.target.join("..data_tmp");
        symlink(new_directory.file_name().unwrap(), &temporary_link).unwrap();
        std::fs::rename(&temporary_link, &data_link).unwrap();
        // 3. Visible names for new keys.
        for name in payload.keys() {
            let visible = self.target.join(name);
            if std::fs::symlink_metadata(&visible).is_err() {
                symlink(Path::new("..data").join(name), &visible).unwrap();
            }
        }
        // 4. The old directory, then names no longer in the payload.
        if let Some(old) = old_directory {
            std::fs::remove_dir_all(self.target.join(old)).unwrap();
        }
        for entry in std::fs::read_dir(&self.target).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !payload.contains_key(&name) {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
    }
}
