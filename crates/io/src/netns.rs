//! Running code inside a named network namespace (`/var/run/netns/NAME`, as `ip netns` makes).
//!
//! A socket belongs to the namespace it was created in, whatever thread later uses it, so a
//! port for an interface in another namespace is opened by [`run_in_netns`] and then used
//! from any thread. The closure runs on a short-lived thread that joins the namespace with
//! `setns(2)`; the calling thread's namespace never changes. Control path only.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use crate::IoError;

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_RUN_DIR: &str = "/var/run/netns";

/// The path of namespace `name`, refusing names that are not plain file names.
pub fn netns_path(name: &str) -> Result<PathBuf, IoError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(IoError::Invalid(format!("network namespace name {name:?}")));
    }
    Ok(PathBuf::from(NETNS_RUN_DIR).join(name))
}

/// Runs `f` on a thread inside network namespace `name` and returns its result.
pub fn run_in_netns<T, F>(name: &str, f: F) -> Result<T, IoError>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let path = netns_path(name)?;
    let ns = File::open(&path).map_err(|source| IoError::File {
        path: path.clone(),
        source,
    })?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: `ns` is an open namespace file; setns only changes this thread's network
            // namespace, and this thread ends when the closure returns.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc < 0 {
                return Err(IoError::Sys {
                    op: "setns(CLONE_NEWNET)",
                    ifname: name.to_owned(),
                    source: std::io::Error::last_os_error(),
                });
            }
            Ok(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}
