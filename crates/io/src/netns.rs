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
    let ns = open_netns(name)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // This thread ends when the closure returns: the caller's namespace never changes.
            setns(&ns, name)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The handle of namespace `name`.
fn open_netns(name: &str) -> Result<File, IoError> {
    let path = netns_path(name)?;
    File::open(&path).map_err(|source| IoError::File { path, source })
}

/// Moves the calling thread into the network namespace of handle `ns` (named `name`).
fn setns(ns: &File, name: &str) -> Result<(), IoError> {
    // SAFETY: `ns` is an open namespace file; setns changes only the calling thread's network
    // namespace, which is what each caller asks for.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(IoError::Sys {
            op: "setns(CLONE_NEWNET)",
            ifname: name.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The control socket a daemon of the init network namespace listens on by default.
pub const DEFAULT_SOCKET: &str = "/run/qbridge/qbridge.sock";
/// Where daemons of other network namespaces put their default sockets.
pub const NETNS_SOCKET_DIR: &str = "/run/qbridge/netns";

/// The network namespace of the calling thread, as the default socket path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnNetns {
    /// The namespace of process 1 (the host's, or a container's own where the container
    /// runs its own init): the default socket is [`DEFAULT_SOCKET`].
    Init,
    /// A namespace `ip netns` knows by this name (the first in sorted order when it has
    /// several).
    Named(String),
    /// A namespace without a name (a container runtime's), by the inode of its handle.
    Inode(u64),
}

impl OwnNetns {
    /// The calling thread's namespace: process 1's, else the one `ip netns` names, else one
    /// without a name. Where process 1's namespace cannot be read (a sandbox, a container
    /// whose process 1 is outside its user namespace), a namespace without a name counts as
    /// [`OwnNetns::Init`], the path every daemon used before; so does one `/proc` cannot tell.
    pub fn current() -> OwnNetns {
        use std::os::unix::fs::MetadataExt;
        let own = std::fs::metadata("/proc/thread-self/ns/net")
            .or_else(|_| std::fs::metadata("/proc/self/ns/net"));
        let Ok(own) = own else {
            return OwnNetns::Init;
        };
        let init = std::fs::metadata("/proc/1/ns/net").ok();
        if init
            .as_ref()
            .is_some_and(|i| own.dev() == i.dev() && own.ino() == i.ino())
        {
            return OwnNetns::Init;
        }
        let mut names: Vec<String> = std::fs::read_dir(NETNS_RUN_DIR)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.metadata()
                    .is_ok_and(|m| m.dev() == own.dev() && m.ino() == own.ino())
            })
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| netns_path(n).is_ok())
            .collect();
        names.sort();
        match (names.into_iter().next(), init) {
            (Some(n), _) => OwnNetns::Named(n),
            (None, Some(_)) => OwnNetns::Inode(own.ino()),
            (None, None) => OwnNetns::Init,
        }
    }

    /// The default control socket of a daemon in this namespace: [`DEFAULT_SOCKET`] in the
    /// init namespace, else `/run/qbridge/netns/NAME.sock` (`ino-INODE.sock` without a
    /// name). A daemon and a command run in the same namespace find each other; a command run
    /// in another namespace (`ip netns exec`, `qbridge -n NETNS`) finds that namespace's
    /// daemon, never another's.
    pub fn default_socket(&self) -> PathBuf {
        match self {
            OwnNetns::Init => PathBuf::from(DEFAULT_SOCKET),
            OwnNetns::Named(n) => PathBuf::from(NETNS_SOCKET_DIR).join(format!("{n}.sock")),
            OwnNetns::Inode(i) => PathBuf::from(NETNS_SOCKET_DIR).join(format!("ino-{i}.sock")),
        }
    }
}

/// Moves the calling thread into network namespace `name` (`qbridge -n NETNS`, as `ip -n`):
/// called by a single-threaded process before it starts any thread, every thread it starts
/// later is in `name` too.
pub fn enter_netns(name: &str) -> Result<(), IoError> {
    setns(&open_netns(name)?, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn default_sockets_per_namespace() {
        assert_eq!(
            OwnNetns::Init.default_socket(),
            Path::new("/run/qbridge/qbridge.sock")
        );
        assert_eq!(
            OwnNetns::Named("h2".into()).default_socket(),
            Path::new("/run/qbridge/netns/h2.sock")
        );
        assert_eq!(
            OwnNetns::Inode(4026532318).default_socket(),
            Path::new("/run/qbridge/netns/ino-4026532318.sock")
        );
    }

    #[test]
    fn names_that_are_not_file_names_are_refused() {
        for bad in ["", ".", "..", "a/b"] {
            assert!(enter_netns(bad).is_err(), "{bad:?}");
        }
    }
}
