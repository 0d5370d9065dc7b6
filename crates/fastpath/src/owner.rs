//! The program's owner: a lease the daemon renews while it runs, so that the filters of a
//! daemon that died (classic `clsact` filters outlive their process) stop claiming frames,
//! and a way for the next daemon to find and remove what such an orphan left in its
//! namespace. docs/fast-path.md, "When the daemon dies"; decision 64.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::maps::{raw, Owner};

/// How long a program claims frames after its daemon's last renewal.
pub const LEASE: Duration = Duration::from_secs(5);
/// How often the daemon renews it.
pub const RENEW: Duration = Duration::from_secs(1);

/// CLOCK_MONOTONIC in nanoseconds (the clock of `bpf_ktime_get_coarse_ns`).
pub(crate) fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The inode of the calling thread's network namespace (what tells namespaces apart).
pub(crate) fn netns_ino() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// The thread that renews the lease; dropping it stops the thread and ends the lease at once
/// (a program left attached after that claims nothing).
pub(crate) struct Lease {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    fd: OwnedFd,
    owner: Owner,
}

impl Lease {
    /// Writes the first renewal now and starts the thread that writes one every [`RENEW`].
    pub(crate) fn start(fd: OwnedFd, owner: Owner) -> std::io::Result<Lease> {
        let renew = move |fd: &OwnedFd| {
            let o = Owner {
                deadline_ns: mono_ns() + LEASE.as_nanos() as u64,
                ..owner
            };
            raw::update(fd.as_raw_fd(), &0u32, &o)
        };
        renew(&fd)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_fd = fd.as_fd().try_clone_to_owned()?;
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fast-path lease".into())
            .spawn(move || {
                let (lock, cv) = &*thread_stop;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                while !*stopped {
                    stopped = cv
                        .wait_timeout(stopped, RENEW)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    if !*stopped {
                        if let Err(e) = renew(&thread_fd) {
                            // The next renewal tries again; five in a row failing end the
                            // lease, and the fast path with it (frames then go on as if the
                            // program were not there).
                            tracing::warn!("fast path: cannot renew the lease: {e}");
                        }
                    }
                }
            })?;
        Ok(Lease {
            stop,
            thread: Some(thread),
            fd,
            owner,
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let ended = Owner {
            deadline_ns: 0,
            ..self.owner
        };
        let _ = raw::update(self.fd.as_raw_fd(), &0u32, &ended);
    }
}

/// What a daemon that died left in the calling thread's namespace: the upcall device of its
/// program and the interfaces whose filters still run it (less those a live daemon serves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The id of the orphan's `qb_owner` map (it names the orphan in logs).
    pub owner_map: u32,
    /// Its upcall device (0: none).
    pub upcall_ifindex: u32,
    /// The interfaces its `qb_ports` map lists that no live program serves.
    pub ports: Vec<u32>,
}

/// The orphans in the calling thread's namespace: programs of this crate (found among the
/// loaded BPF programs by name, with their maps by id; needs CAP_SYS_ADMIN) whose lease
/// ended. `own`: the `qb_owner` map id of the caller's own program, never an orphan. A
/// program without a lease (loaded by something that never took one, e.g. a test) counts as
/// live; a program of a qbridge that predates the lease has no `qb_owner` map and is not
/// found here (a daemon that takes one of its interfaces removes its filter, see
/// [`crate::remove_filters`]).
pub fn orphans(own: Option<u32>) -> std::io::Result<Vec<Orphan>> {
    let here = netns_ino()?;
    let now = mono_ns();
    // owner map id -> (owner, its program's qb_ports map id, if a qb_ingress uses it)
    let mut owners: BTreeMap<u32, (Owner, Option<u32>)> = BTreeMap::new();
    for prog in aya::programs::loaded_programs() {
        let Ok(prog) = prog else { continue };
        let name = prog.name_as_str().unwrap_or("");
        if name != crate::PROGRAM && name != crate::SINK {
            continue;
        }
        let Ok(Some(ids)) = prog.map_ids() else {
            continue;
        };
        let mut owner = None;
        let mut ports = None;
        for id in ids {
            let Ok(map) = aya::maps::MapData::from_id(id) else {
                continue;
            };
            let Ok(info) = map.info() else { continue };
            match info.name_as_str() {
                Some("qb_owner") => {
                    let fd = map.fd().as_fd().as_raw_fd();
                    if let Ok(Some(o)) = raw::lookup::<u32, Owner>(fd, &0) {
                        owner = Some((id, o));
                    }
                }
                Some("qb_ports") => ports = Some(id),
                _ => {}
            }
        }
        if let Some((id, o)) = owner {
            let e = owners.entry(id).or_insert((o, None));
            if ports.is_some() {
                e.1 = ports;
            }
        }
    }
    let mut live_ports = BTreeSet::new();
    let mut dead = Vec::new();
    for (id, (o, ports)) in owners {
        if o.netns_ino != here {
            continue;
        }
        let ifindexes = ports.map(port_ifindexes).unwrap_or_default();
        if Some(id) == own || o.deadline_ns >= now {
            live_ports.extend(ifindexes);
        } else {
            dead.push((id, o, ifindexes));
        }
    }
    Ok(dead
        .into_iter()
        .map(|(owner_map, o, ports)| Orphan {
            owner_map,
            upcall_ifindex: o.upcall_ifindex,
            ports: ports
                .into_iter()
                .filter(|i| !live_ports.contains(i))
                .collect(),
        })
        .collect())
}

/// The keys (ifindexes) of the `qb_ports` map `id`.
fn port_ifindexes(id: u32) -> Vec<u32> {
    let Ok(map) = aya::maps::MapData::from_id(id) else {
        return Vec::new();
    };
    let Ok(m) = aya::maps::HashMap::<_, u32, crate::Port>::try_from(aya::maps::Map::HashMap(map))
    else {
        return Vec::new();
    };
    m.keys().filter_map(Result::ok).collect()
}
