//! The daemon's state file (`qbridge daemon --state FILE`): the running configuration, written
//! after every change that alters it, so that a restart restores it.
//!
//! A write never leaves a torn file: the text goes to `FILE.tmp` in the same directory, is
//! flushed to the disk (`fsync`), and is renamed over `FILE` (atomic on POSIX file systems);
//! the directory is then synced so the rename itself survives a power cut. A crash at any
//! moment leaves either the old file or the new one.
//!
//! `FILE.tmp` is created afresh each time (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600, after
//! removing a stale one): a link planted there (symbolic or hard) is replaced, never written
//! through, so the root daemon cannot be made to overwrite another file.
//!
//! A write that fails (a full disk) keeps the old file; [`StateFile::is_saved`] says the
//! running configuration is not on disk (metrics: `qbridge_state_unsaved`), and the next
//! change tries again.
//!
//! Reading at start ([`read_state`]): FILE must be a regular file of at most
//! [`MAX_STATE_BYTES`]; a FIFO, a device (`/dev/zero`) or a directory is refused without
//! blocking on it or reading it.
//!
//! **Appended changes.** Writing the whole configuration costs O(the configuration): with
//! 20 000 FDB entries added one `fdb add` at a time it was 12 ms of rendering and 1 MB of
//! writing per command. A change whose command recreates it (`fdb add`, `vlan add`, `link set`…:
//! [`qbridge_control::running::change_line`]) is instead appended to the file, after a
//! [`CHANGES_MARKER`] line, with one `write` (`O_APPEND`) and an `fdatasync` before the reply:
//! O(the change), and every acknowledged change is still on the disk. Restoring applies the
//! lines after the marker as `qbridge apply` does ([`qbridge_control::Session::restore`]). Once
//! the appended lines outgrow the configuration above them (at least 64 KiB), the next change
//! writes the whole configuration again, as above: amortised, a change costs O(1) bytes. A
//! crash during an append can leave the last appended line without its newline; restoring
//! leaves such a line out (it was never acknowledged).

use qbridge_control::running::CHANGES_MARKER;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest state file read at start: the largest batch the daemon accepts.
pub const MAX_STATE_BYTES: u64 = qbridge_control::MAX_BATCH_BYTES;
/// Appended bytes always allowed before the whole configuration is written again.
const APPENDED_MIN: usize = 64 * 1024;

/// The state file and what was last written to it.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    /// The configuration text the file starts with (`None`: unknown, the next save writes).
    saved: Option<String>,
    /// The last write failed: the running configuration differs from the file.
    unsaved: bool,
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
            unsaved: false,
            appended: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file holds the configuration last given to [`StateFile::save`] (false after
    /// a failed write, until one succeeds).
    pub fn is_saved(&self) -> bool {
        !self.unsaved
    }

    /// Writes `text` unless the file holds it already. Returns whether it wrote.
    pub fn save(&mut self, text: &str) -> std::io::Result<bool> {
        if self.appended == 0 && self.saved.as_deref() == Some(text) {
            self.unsaved = false;
            return Ok(false);
        }
        self.saved = None;
        if let Err(e) = write_atomic(&self.path, text.as_bytes()) {
            self.unsaved = true;
            return Err(e);
        }
        self.saved = Some(text.to_owned());
        self.appended = 0;
        self.unsaved = false;
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
                self.unsaved = true;
                Err(e)
            }
        }
    }
}

/// Why a state file cannot be read at start.
#[derive(Debug)]
pub enum ReadStateError {
    Io(std::io::Error),
    /// What it is instead (`FIFO`, `character device`, …).
    NotRegular(&'static str),
    /// Its size in bytes.
    TooLarge(u64),
    /// The line of the first invalid byte.
    NotUtf8(usize),
}

impl std::fmt::Display for ReadStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadStateError::Io(e) => write!(f, "{e}"),
            ReadStateError::NotRegular(what) => {
                write!(f, "not a regular file (a {what}); give a file")
            }
            ReadStateError::TooLarge(n) => {
                write!(f, "{n} bytes is over the limit of {MAX_STATE_BYTES} bytes")
            }
            ReadStateError::NotUtf8(line) => write!(f, "not valid UTF-8 (line {line})"),
        }
    }
}

impl std::error::Error for ReadStateError {}

impl From<std::io::Error> for ReadStateError {
    fn from(e: std::io::Error) -> Self {
        ReadStateError::Io(e)
    }
}

/// The text of state file `path`, `Ok(None)` when it does not exist. Opened without blocking
/// (`O_NONBLOCK`: a FIFO without a writer does not hang the start) and refused unless a
/// regular file of at most [`MAX_STATE_BYTES`]; a file that grows while read is cut there and
/// refused as too large.
pub fn read_state(path: &Path) -> Result<Option<String>, ReadStateError> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let meta = f.metadata()?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(ReadStateError::NotRegular(if ft.is_fifo() {
            "FIFO"
        } else if ft.is_dir() {
            "directory"
        } else if ft.is_char_device() {
            "character device"
        } else if ft.is_block_device() {
            "block device"
        } else if ft.is_socket() {
            "socket"
        } else {
            "special file"
        }));
    }
    if meta.len() > MAX_STATE_BYTES {
        return Err(ReadStateError::TooLarge(meta.len()));
    }
    let mut buf = Vec::new();
    f.take(MAX_STATE_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_STATE_BYTES {
        return Err(ReadStateError::TooLarge(buf.len() as u64));
    }
    String::from_utf8(buf).map(Some).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        ReadStateError::NotUtf8(e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1)
    })
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
    // A stale FILE.tmp (a crash between create and rename), or a link planted there: the
    // name goes, what it pointed to is untouched.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut created = false;
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .mode(0o600)
            .open(&tmp)?;
        created = true;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    })();
    if result.is_err() && created {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qbridge-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn saves_only_changes_and_replaces_whole() {
        let dir = dir("save");
        let path = dir.join("state");
        let mut s = StateFile::new(path.clone(), None);
        assert!(s.save("a\n").unwrap());
        assert!(!s.save("a\n").unwrap());
        assert!(s.save("bb\n").unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "bb\n");
        assert!(!dir.join("state.tmp").exists());
        assert!(s.is_saved());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_planted_at_the_tmp_name_is_not_written_through() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir("link");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.join("state");
        std::os::unix::fs::symlink(&victim, dir.join("state.tmp")).unwrap();
        let mut s = StateFile::new(path.clone(), None);
        assert!(s.save("link add br0 type bridge\n").unwrap());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "link add br0 type bridge\n"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A hard link too.
        std::fs::hard_link(&victim, dir.join("state.tmp")).unwrap();
        assert!(s.save("link add br1 type bridge\n").unwrap());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = dir("read");
        assert!(read_state(&dir.join("none")).unwrap().is_none());
        std::fs::write(dir.join("ok"), "x\n").unwrap();
        assert_eq!(read_state(&dir.join("ok")).unwrap().as_deref(), Some("x\n"));
        let e = read_state(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(e, "not a regular file (a character device); give a file");
        let e = read_state(&dir).unwrap_err().to_string();
        assert_eq!(e, "not a regular file (a directory); give a file");
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_state(&fifo).unwrap_err().to_string();
        assert_eq!(e, "not a regular file (a FIFO); give a file");
        std::fs::write(dir.join("bad"), b"a\n\xff\n").unwrap();
        let e = read_state(&dir.join("bad")).unwrap_err().to_string();
        assert_eq!(e, "not valid UTF-8 (line 2)");
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
