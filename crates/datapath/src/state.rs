//! The daemon's state file (`qbridge daemon --state FILE`): the running configuration, written
//! after every change that alters it, so that a restart restores it.
//!
//! A write never leaves a torn file: the text goes to `FILE.tmp` in the same directory, is
//! flushed to the disk (`fsync`), and is renamed over `FILE` (atomic on POSIX file systems);
//! the directory is then synced so the rename itself survives a power cut. A crash at any
//! moment leaves either the old file or the new one.
//!
//! **Appended changes.** Writing the whole configuration costs O(the configuration): with
//! 20 000 FDB entries added one `fdb add` at a time it was 12 ms of rendering and 1 MB of
//! writing per command. A change whose command recreates it (`fdb add`, `fdb del`:
//! [`qbridge_control::running::change_line`]) is instead appended to the file, after a
//! [`CHANGES_MARKER`] line, with one `write` (`O_APPEND`) and an `fdatasync` before the reply:
//! O(the change), and every acknowledged change is still on the disk. Restoring applies the
//! lines after the marker as `qbridge apply` does ([`qbridge_control::running::restore`]). Once
//! the appended lines outgrow the configuration above them (at least 64 KiB), the next change
//! writes the whole configuration again, as above: amortised, a change costs O(1) bytes. A
//! crash during an append can leave the last appended line without its newline; restoring
//! leaves such a line out (it was never acknowledged).

use qbridge_control::running::CHANGES_MARKER;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Appended bytes always allowed before the whole configuration is written again.
const APPENDED_MIN: usize = 64 * 1024;

/// The state file and what was last written to it.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    /// The configuration text the file starts with (`None`: unknown, the next save writes).
    saved: Option<String>,
    /// Bytes appended after it (the marker included).
    appended: usize,
}

impl StateFile {
    /// `saved`: what the file holds now (read at start), so an unchanged configuration is not
    /// rewritten.
    pub fn new(path: PathBuf, saved: Option<String>) -> StateFile {
        StateFile {
            path,
            saved,
            appended: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `text` unless the file holds it already. Returns whether it wrote.
    pub fn save(&mut self, text: &str) -> std::io::Result<bool> {
        if self.appended == 0 && self.saved.as_deref() == Some(text) {
            return Ok(false);
        }
        self.saved = None;
        write_atomic(&self.path, text.as_bytes())?;
        self.saved = Some(text.to_owned());
        self.appended = 0;
        Ok(true)
    }

    /// Appends `line` (a [`qbridge_control::running::change_line`]) and syncs it to the disk.
    /// `Ok(false)`: not appended — the file's text is not known, or the appended lines have
    /// outgrown the configuration —; the caller saves the whole configuration instead. After
    /// an error the file's end is unknown and the next change writes it whole.
    pub fn append(&mut self, line: &str) -> std::io::Result<bool> {
        let Some(saved) = &self.saved else {
            return Ok(false);
        };
        if self.appended + line.len() > saved.len().max(APPENDED_MIN) {
            return Ok(false);
        }
        let mut bytes = Vec::with_capacity(CHANGES_MARKER.len() + line.len());
        if self.appended == 0 {
            bytes.extend_from_slice(CHANGES_MARKER.as_bytes());
        }
        bytes.extend_from_slice(line.as_bytes());
        let result = (|| {
            let mut f = OpenOptions::new().append(true).open(&self.path)?;
            f.write_all(&bytes)?;
            f.sync_data()
        })();
        match result {
            Ok(()) => {
                self.appended += bytes.len();
                Ok(true)
            }
            Err(e) => {
                self.saved = None;
                Err(e)
            }
        }
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

    #[test]
    fn appends_until_the_changes_outgrow_the_configuration() {
        let dir = std::env::temp_dir().join(format!("qbridge-state-app-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        let mut s = StateFile::new(path.clone(), None);
        assert!(
            !s.append("x\n").unwrap(),
            "nothing written yet: the whole text first"
        );
        let config = "c".repeat(APPENDED_MIN * 2) + "\n";
        assert!(s.save(&config).unwrap());
        let line = "l".repeat(1023) + "\n";
        let mut n = 0;
        while s.append(&line).unwrap() {
            n += 1;
        }
        // Up to the configuration's size, then the whole configuration again.
        assert_eq!(n, (config.len() - CHANGES_MARKER.len()) / line.len());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{config}{CHANGES_MARKER}{}", line.repeat(n)));
        assert!(
            s.save(&config).unwrap(),
            "the same text, but the file has changes"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), config);
        assert!(!s.save(&config).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
