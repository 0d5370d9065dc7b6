//! The daemon's state file (`qbridge daemon --state FILE`): the running configuration, written
//! after every change that alters it, so that a restart restores it.
//!
//! A write never leaves a torn file: the text goes to `FILE.tmp` in the same directory, is
//! flushed to the disk (`fsync`), and is renamed over `FILE` (atomic on POSIX file systems);
//! the directory is then synced so the rename itself survives a power cut. A crash at any
//! moment leaves either the old file or the new one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The state file and what was last written to it.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    saved: Option<String>,
}

impl StateFile {
    /// `saved`: what the file holds now (read at start), so an unchanged configuration is not
    /// rewritten.
    pub fn new(path: PathBuf, saved: Option<String>) -> StateFile {
        StateFile { path, saved }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `text` unless the file holds it already. Returns whether it wrote.
    pub fn save(&mut self, text: &str) -> std::io::Result<bool> {
        if self.saved.as_deref() == Some(text) {
            return Ok(false);
        }
        write_atomic(&self.path, text.as_bytes())?;
        self.saved = Some(text.to_owned());
        Ok(true)
    }
}

/// Replaces `path` with `data` atomically and durably (see the module documentation).
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_only_changes_and_replaces_whole() {
        let dir = std::env::temp_dir().join(format!("qbridge-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        let mut s = StateFile::new(path.clone(), None);
        assert!(s.save("a\n").unwrap());
        assert!(!s.save("a\n").unwrap());
        assert!(s.save("bb\n").unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "bb\n");
        assert!(!dir.join("state.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
