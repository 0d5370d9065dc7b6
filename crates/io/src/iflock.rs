//! One switch per interface, across daemons: a lock file per host interface.
//!
//! Two qbridge daemons (or two ports of one) on the same interface would each receive every
//! frame and send it on: every frame twice. Linux gives a device one master and
//! `ovs-vsctl add-port` refuses a port twice; qbridge takes an exclusive `flock` on
//! `DIR/NETNS-IFNAME.lock` while a port uses the interface (DIR: `$QBRIDGE_LOCK_DIR`, else
//! `/run/qbridge/interfaces`; NETNS: the inode of the daemon's network namespace, so the same
//! name in two namespaces is two interfaces). The file says who holds it. The lock dies with
//! the process: a crashed daemon leaves nothing that blocks a restart.
//!
//! The file is removed when the lock is released (the port goes, the daemon stops), so
//! `DIR` does not fill up with one file per interface ever used. Removal and locking race:
//! a daemon could open the file, then the holder unlinks it and unlocks, then the first one
//! locks the unlinked inode while a third creates a new file at the name and locks that —
//! two holders. So the holder unlinks *while it holds the lock* (then closes), and a taker,
//! once its `flock` succeeds, checks that the name still leads to the inode it locked
//! (`fstat` against `lstat`); if not (the file was removed, or replaced), it drops it and
//! starts again. Whoever holds the lock on the file the name leads to holds the interface.
//! A crash still leaves the file behind, unlocked; the next taker uses it.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// Where the lock files live unless `$QBRIDGE_LOCK_DIR` says otherwise.
pub const DEFAULT_LOCK_DIR: &str = "/run/qbridge/interfaces";

/// An exclusive `flock` on a file that names its holder; dropping it removes the file (while
/// still locked) and releases the lock. The interface locks below and the daemon's
/// `SOCKET.lock` are both this.
#[derive(Debug)]
pub struct LockedFile {
    file: File,
    path: PathBuf,
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // Unlinked while still locked (see the module documentation), and only if the name
        // still leads to our file.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` (not followed if a link) is the file `file` has open.
fn same_file(file: &File, path: &std::path::Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Attempts at a lock file removed or replaced under us before giving up.
const LOCK_ATTEMPTS: usize = 100;

/// Why a lock file could not be locked.
#[derive(Debug)]
pub enum LockFileError {
    /// Another open file holds the lock; what the file says (empty if nothing).
    Busy(String),
    /// The file cannot be opened or locked.
    Unavailable(std::io::Error),
    /// The file was removed or replaced [`LOCK_ATTEMPTS`] times while being locked.
    Unstable,
}

/// Takes an exclusive, non-blocking `flock` on `path` (created with `mode`, never through a
/// symbolic link) and writes `who` in it. A taker whose lock lands on a file its last holder
/// has just removed (or that was replaced) starts again.
pub fn lock_file(
    path: &std::path::Path,
    mode: u32,
    who: &str,
) -> Result<LockedFile, LockFileError> {
    for _ in 0..LOCK_ATTEMPTS {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(LockFileError::Unavailable)?;
        // SAFETY: flock(2) on a descriptor `file` owns; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        let err = std::io::Error::last_os_error();
        match rc {
            0 => {}
            _ if err.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(LockFileError::Busy(holder.trim().to_owned()));
            }
            _ => return Err(LockFileError::Unavailable(err)),
        }
        if !same_file(&file, path) {
            // Removed (or replaced) by its last holder between our open and our lock.
            continue;
        }
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(who.as_bytes()));
        return Ok(LockedFile {
            file,
            path: path.to_owned(),
        });
    }
    Err(LockFileError::Unstable)
}

/// A held interface lock; dropping it removes the lock file and releases the interface.
#[derive(Debug)]
pub struct IfaceLock {
    _file: LockedFile,
    ifname: String,
}

impl IfaceLock {
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

/// Why an interface could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; what its lock file says (`pid N port P`).
    Busy { ifname: String, holder: String },
    /// The lock directory or file cannot be used (not a conflict: the caller may go on).
    Unavailable(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Busy { ifname, holder } => write!(
                f,
                "interface {ifname} is already a port of another qbridge daemon ({holder}); \
                 a device can be a port of one switch only"
            ),
            LockError::Unavailable(why) => write!(f, "cannot lock: {why}"),
        }
    }
}

fn lock_dir() -> PathBuf {
    match std::env::var_os("QBRIDGE_LOCK_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_LOCK_DIR),
    }
}

/// Locks host interface `ifname` (in the calling thread's network namespace) for port `port`.
pub fn lock_interface(ifname: &str, port: &str) -> Result<IfaceLock, LockError> {
    let unavailable =
        |what: &str, e: std::io::Error| LockError::Unavailable(format!("{what}: {e}"));
    let ns = std::fs::metadata("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::metadata("/proc/self/ns/net"))
        .map_err(|e| unavailable("/proc/self/ns/net", e))?
        .ino();
    let dir = lock_dir();
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(|e| unavailable(&dir.display().to_string(), e))?;
    }
    let path = dir.join(format!("{ns}-{ifname}.lock"));
    let who = format!("pid {} port {port}\n", std::process::id());
    match lock_file(&path, 0o644, &who) {
        Ok(file) => Ok(IfaceLock {
            _file: file,
            ifname: ifname.to_owned(),
        }),
        Err(LockFileError::Busy(holder)) => Err(LockError::Busy {
            ifname: ifname.to_owned(),
            holder: if holder.is_empty() {
                format!("lock {}", path.display())
            } else {
                holder
            },
        }),
        Err(LockFileError::Unavailable(e)) => Err(unavailable(&path.display().to_string(), e)),
        Err(LockFileError::Unstable) => Err(LockError::Unavailable(format!(
            "{}: removed or replaced {LOCK_ATTEMPTS} times while being locked",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_interface_is_refused_and_names_the_holder() {
        let dir = std::env::temp_dir().join(format!("qbridge-iflock-{}", std::process::id()));
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        std::env::set_var("QBRIDGE_LOCK_DIR", &dir);
        let a = lock_interface("ethX", "p1").unwrap();
        // flock is per open file: a second open in this process conflicts like another daemon.
        let e = lock_interface("ethX", "p2").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "interface ethX is already a port of another qbridge daemon (pid {} port p1); \
                 a device can be a port of one switch only",
                std::process::id()
            )
        );
        let b = lock_interface("ethY", "p2").unwrap();
        drop(a);
        let _a2 = lock_interface("ethX", "p3").unwrap();
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 17 item 17b: lock files were never removed. Now a released lock takes its file
    /// with it, and the unlink/lock race cannot give two holders: many threads (each lock is
    /// its own open file, as another daemon's would be) take and release one interface's lock
    /// in a loop; never are two holding it at once.
    #[test]
    fn released_locks_remove_their_file_and_never_have_two_holders() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = std::env::temp_dir().join(format!("qbridge-iflock-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Every lock function reads the directory from the environment: one for this test.
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        std::env::set_var("QBRIDGE_LOCK_DIR", &dir);
        let l = lock_interface("ethR", "p1").unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        drop(l);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the lock file stays after its lock is released"
        );
        let holders = AtomicUsize::new(0);
        let taken = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (holders, taken) = (&holders, &taken);
                s.spawn(move || {
                    for _ in 0..1000 {
                        if let Ok(l) = lock_interface("ethR", &format!("t{t}")) {
                            let n = holders.fetch_add(1, Ordering::SeqCst);
                            assert_eq!(n, 0, "two holders of one interface");
                            taken.fetch_add(1, Ordering::Relaxed);
                            // Hold it a moment, as a port does: time for a racing taker.
                            std::thread::sleep(std::time::Duration::from_micros(100));
                            holders.fetch_sub(1, Ordering::SeqCst);
                            drop(l);
                        }
                    }
                });
            }
        });
        assert!(taken.load(Ordering::Relaxed) > 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
}
