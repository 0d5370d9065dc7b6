//! A port's receive filter shared by all of its AF_PACKET sockets, changed in place.
//!
//! [`RxFilterHandle`] owns the port's device memberships (promiscuous mode, accepted unicast
//! addresses) on one extra, unbound AF_PACKET socket, and the set of accepted addresses that
//! each socket's receive path consults for frames the device delivers for other hosts. The
//! control plane changes it address by address while worker threads receive; nothing is
//! reopened (docs/decisions.md 19). Cost: one syscall per changed address (the kernel's own
//! work per change grows with the number of addresses); readers take the set's read lock at
//! most once per burst. Threads: `Sync`; control operations are serialised by a mutex.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::sys;
use crate::IoError;

/// A MAC address as the key of the accepted set (the 6 bytes, big-endian, in a u64).
pub(crate) fn mac_key(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&mac);
    u64::from_be_bytes(b)
}

fn fmt_mac(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// Adds or drops one `PACKET_MR_*` membership of socket `fd` on interface `ifindex`.
pub(crate) fn membership(
    fd: RawFd,
    ifindex: u32,
    ifname: &str,
    add: bool,
    mr_type: libc::c_int,
    addr: Option<[u8; 6]>,
) -> Result<(), IoError> {
    let mut mr = libc::packet_mreq {
        mr_ifindex: ifindex as i32,
        mr_type: mr_type as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    if let Some(a) = addr {
        mr.mr_alen = 6;
        mr.mr_address[..6].copy_from_slice(&a);
    }
    let (opt, what) = if add {
        (libc::PACKET_ADD_MEMBERSHIP, "PACKET_ADD_MEMBERSHIP")
    } else {
        (libc::PACKET_DROP_MEMBERSHIP, "PACKET_DROP_MEMBERSHIP")
    };
    sys::setsockopt_raw(fd, libc::SOL_PACKET, opt, &mr).map_err(|e| match addr {
        Some(a) => IoError::Sys {
            op: what,
            ifname: format!("{ifname} (unicast {})", fmt_mac(a)),
            source: e,
        },
        None => sys::sys_err(what, ifname, e),
    })
}

/// The receive filter of one port, shared by all of its sockets (`Arc<RxFilterHandle>` in
/// each socket's [`AfPacketConfig::filter`](crate::afpacket::AfPacketConfig::filter)) and changed by the control plane while workers
/// receive, without reopening anything.
///
/// It owns one extra AF_PACKET socket of protocol 0 that is never bound, so it receives
/// nothing; it only holds the port's device memberships: `PACKET_MR_PROMISC`, and one
/// `PACKET_MR_UNICAST` per accepted address. Memberships are device-level and refcounted by
/// the kernel, so one socket's memberships serve every socket of the port, and closing the
/// handle (dropping its last `Arc`) removes them all. A change touches only what changed:
/// [`RxFilterHandle::set_unicast`] adds and drops one membership per changed address.
///
/// A device without a unicast filter (a veth, many virtual devices) delivers frames for other
/// hosts anyway (`PACKET_OTHERHOST`); without promiscuous mode each socket drops those whose
/// destination is not in the accepted set and counts them
/// ([`AfPacketStats::rx_otherhost_filtered`](crate::afpacket::AfPacketStats::rx_otherhost_filtered)). Readers take the set's read lock once per
/// burst, and only in a burst that holds such a frame; control operations are serialised
/// among themselves and hold the write lock only to insert or remove one address. (An
/// `RwLock` rather than a copy-on-write snapshot: a snapshot per added address would copy the
/// whole set each time, O(n²) for a 20 000-entry FDB added address by address.)
///
/// Open it in the interface's namespace (see [`crate::netns::run_in_netns`]), like the port.
#[derive(Debug)]
pub struct RxFilterHandle {
    ifname: String,
    /// The device's index when the memberships were last made ([`RxFilterHandle::reattach`]).
    ifindex: AtomicU32,
    fd: OwnedFd,
    /// Serialises control operations (membership changes and their publication).
    ctl: Mutex<()>,
    promisc: AtomicBool,
    unicast: RwLock<HashSet<u64>>,
}

impl PartialEq for RxFilterHandle {
    /// Identity: two handles are the same filter only if they are the same object.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for RxFilterHandle {}

impl RxFilterHandle {
    /// Opens the membership socket for `ifname`: no promiscuous mode, no unicast address.
    pub fn open(ifname: &str) -> Result<Arc<RxFilterHandle>, IoError> {
        let ifindex = sys::ifindex(ifname)?;
        // Protocol 0 and never bound: the socket receives nothing.
        // SAFETY: socket(2) takes no pointers.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(sys::sys_err(
                "socket(AF_PACKET) for the receive filter",
                ifname,
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Arc::new(RxFilterHandle {
            ifname: ifname.to_owned(),
            ifindex: AtomicU32::new(ifindex),
            fd,
            ctl: Mutex::new(()),
            promisc: AtomicBool::new(false),
            unicast: RwLock::new(HashSet::new()),
        }))
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    fn lock_ctl(&self) -> std::sync::MutexGuard<'_, ()> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_set(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<u64>> {
        self.unicast.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn read_set(&self) -> RwLockReadGuard<'_, HashSet<u64>> {
        self.unicast.read().unwrap_or_else(|e| e.into_inner())
    }

    fn member(
        &self,
        add: bool,
        mr_type: libc::c_int,
        addr: Option<[u8; 6]>,
    ) -> Result<(), IoError> {
        let ifindex = self.ifindex.load(Ordering::Relaxed);
        membership(
            self.fd.as_raw_fd(),
            ifindex,
            &self.ifname,
            add,
            mr_type,
            addr,
        )
    }

    /// Makes the memberships again on the device now named [`RxFilterHandle::ifname`]: after
    /// the interface was deleted and recreated (the kernel dropped the old device's
    /// memberships with it), alongside [`AfPacketPort::reopen`](crate::afpacket::AfPacketPort::reopen). Call it from a thread in the
    /// interface's namespace. Memberships still held on the old index (the device was not
    /// deleted after all) are dropped first, so nothing is counted twice. One syscall per
    /// accepted address.
    pub fn reattach(&self) -> Result<(), IoError> {
        let _ctl = self.lock_ctl();
        let fresh = sys::ifindex(&self.ifname)?;
        let keys: Vec<u64> = self.read_set().iter().copied().collect();
        let promisc = self.promisc();
        let unkey = |k: u64| {
            let b = k.to_be_bytes();
            [b[2], b[3], b[4], b[5], b[6], b[7]]
        };
        // Best effort: a deleted device took its memberships with it (EADDRNOTAVAIL here).
        if promisc {
            let _ = self.member(false, libc::PACKET_MR_PROMISC, None);
        }
        for &k in &keys {
            let _ = self.member(false, libc::PACKET_MR_UNICAST, Some(unkey(k)));
        }
        self.ifindex.store(fresh, Ordering::Relaxed);
        if promisc {
            self.member(true, libc::PACKET_MR_PROMISC, None)?;
        }
        for &k in &keys {
            self.member(true, libc::PACKET_MR_UNICAST, Some(unkey(k)))?;
        }
        Ok(())
    }

    /// Whether the port receives every frame.
    pub fn promisc(&self) -> bool {
        self.promisc.load(Ordering::Relaxed)
    }

    /// Turns promiscuous mode on or off (one membership change; nothing when unchanged).
    pub fn set_promisc(&self, on: bool) -> Result<(), IoError> {
        let _ctl = self.lock_ctl();
        if self.promisc() == on {
            return Ok(());
        }
        if on {
            self.member(true, libc::PACKET_MR_PROMISC, None)?;
            self.promisc.store(true, Ordering::Relaxed);
        } else {
            // Sockets stop taking other hosts' frames first, then the device stops sending.
            self.promisc.store(false, Ordering::Relaxed);
            self.member(false, libc::PACKET_MR_PROMISC, None)?;
        }
        Ok(())
    }

    /// Accepts `mac` (one `PACKET_MR_UNICAST` membership). Returns false if it was already.
    pub fn add_unicast(&self, mac: [u8; 6]) -> Result<bool, IoError> {
        let _ctl = self.lock_ctl();
        self.add_locked(mac)
    }

    fn add_locked(&self, mac: [u8; 6]) -> Result<bool, IoError> {
        if self.read_set().contains(&mac_key(mac)) {
            return Ok(false);
        }
        self.member(true, libc::PACKET_MR_UNICAST, Some(mac))?;
        self.write_set().insert(mac_key(mac));
        Ok(true)
    }

    /// Stops accepting `mac`. Returns false if it was not accepted.
    pub fn del_unicast(&self, mac: [u8; 6]) -> Result<bool, IoError> {
        let _ctl = self.lock_ctl();
        self.del_locked(mac)
    }

    fn del_locked(&self, mac: [u8; 6]) -> Result<bool, IoError> {
        if !self.write_set().remove(&mac_key(mac)) {
            return Ok(false);
        }
        if let Err(e) = self.member(false, libc::PACKET_MR_UNICAST, Some(mac)) {
            // Still a member: keep the software filter in step with the device.
            self.write_set().insert(mac_key(mac));
            return Err(e);
        }
        Ok(true)
    }

    /// Makes `macs` the accepted set, touching only the difference: one membership added per
    /// new address, one dropped per address no longer listed. Returns (added, removed). On an
    /// error the set holds every change made before it.
    pub fn set_unicast(&self, macs: &[[u8; 6]]) -> Result<(usize, usize), IoError> {
        let _ctl = self.lock_ctl();
        let want: HashSet<u64> = macs.iter().map(|&m| mac_key(m)).collect();
        let gone: Vec<u64> = self.read_set().difference(&want).copied().collect();
        let mut removed = 0;
        for k in gone {
            let b = k.to_be_bytes();
            if self.del_locked([b[2], b[3], b[4], b[5], b[6], b[7]])? {
                removed += 1;
            }
        }
        let mut added = 0;
        for &m in macs {
            if self.add_locked(m)? {
                added += 1;
            }
        }
        Ok((added, removed))
    }

    /// Whether `mac` is accepted now.
    pub fn accepts(&self, mac: [u8; 6]) -> bool {
        self.read_set().contains(&mac_key(mac))
    }

    /// How many unicast addresses are accepted.
    pub fn unicast_len(&self) -> usize {
        self.read_set().len()
    }
}
