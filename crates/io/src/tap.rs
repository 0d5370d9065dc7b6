//! TAP port: a `/dev/net/tun` TAP device as a switch port, the way VMs and containers attach.
//!
//! The device is opened with `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`, a virtio-net header of 10 or
//! 12 bytes (`TUNSETVNETHDRSZ`) and `TUNSETOFFLOAD(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)`, so the
//! kernel hands over 64 KB TCP super-frames with partial checksums, and takes them back: the
//! [`OffloadMeta`](qbridge_packet::OffloadMeta) of each frame is the virtio-net header. The interface may be moved into a
//! network namespace (`netns`), where it keeps working; it is set up either way.
//!
//! Moving it uses `ip link set dev IF netns NS` through [`std::process::Command`]: control path
//! only, once per port; it spares this crate an rtnetlink client for one message.
//!
//! Cost: the tun driver has no batch interface, so a burst is one `read(2)` per received frame
//! (into a 64 KB vector; a frame longer than [`SWAP_MIN_FRAME`] then becomes a pool buffer by
//! exchanging vectors, a shorter one is copied into a pooled buffer) and
//! one `writev(2)` per transmitted frame (header + frame, no copy). The descriptor is
//! nonblocking; a burst stops at `EAGAIN`.
//!
//! Several workers: [`TapPort::open_queues`] creates the device with `IFF_MULTI_QUEUE` and
//! attaches [`TapConfig::queues`] descriptors (one `TUNSETIFF` each, same name), one
//! [`TapPort`] per queue, each owned by one worker. The kernel spreads the frames it sends
//! into the TAP over the queues by flow hash (its `tun_select_queue`); a frame written on any
//! queue enters the kernel the same way. All queues are attached before the device moves into
//! [`TapConfig::netns`]: `TUNSETIFF` finds the device by name in the opener's namespace, so
//! after the move it would create a new device instead. A multi-queue TAP of the name that is
//! already in [`TapConfig::netns`] (the TAP of a port replaced in the same batch) gets the
//! queues attached to it there, from a thread in that namespace ([`TapConfig::multi_queue`]
//! makes a one-queue device take more queues later).
//!
//! Link loss: a TAP that is set down refuses writes with `EIO`, one whose device went away
//! answers `EBADFD`; both are reported as [`IoError::LinkDown`]. The device lives as long as
//! the port (it is not persistent), so closing the port — every queue of it — removes the
//! interface.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;

use qbridge_packet::{Batch, BufPool, HEADROOM};

use crate::afpacket::{meta_to_vnet, vnet_to_meta, VNET_HDR_LEN};
use crate::netns::run_in_netns;
use crate::port::{recycle, BackendDrops, Port, PortCaps, TxOutcome};
use crate::sys::{self, IfReq};
use crate::IoError;

/// Largest frame read from a TAP: a 64 KB IP super-frame plus Ethernet header and tags.
pub const TAP_MAX_FRAME: usize = 65_535 + 14 + 4 * 8;

/// A received frame longer than this becomes a pool buffer by exchanging vectors with the read
/// buffer; a shorter one is copied (cheaper than growing the vector that comes back, which a
/// pool buffer of the default 2 KB would need for the next read).
pub const SWAP_MIN_FRAME: usize = 2048;

/// How to create a TAP port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapConfig {
    /// Interface name; `None` lets the kernel pick (`tap%d`).
    pub ifname: Option<String>,
    /// Network namespace (a name under `/var/run/netns`) to move the interface into.
    pub netns: Option<String>,
    /// virtio-net header length: 10 (`struct virtio_net_hdr`) or 12 (with `num_buffers`).
    pub vnet_hdr_len: usize,
    /// Ask for checksum and TSO offload (`TUNSETOFFLOAD`).
    pub offload: bool,
    /// Device MTU to set (after the move); `None`: the default 1500.
    pub device_mtu: Option<u32>,
    /// Queues ([`TapPort::open_queues`]): 1 (the default) opens a single-queue device as
    /// [`TapPort::open`] does; more creates it with `IFF_MULTI_QUEUE` (at most 256).
    pub queues: usize,
    /// Create the device with `IFF_MULTI_QUEUE` even for one queue, so that more queues can
    /// attach to it later (a port that takes over the TAP of a port deleted in the same batch
    /// attaches its queues before the old ones close). More than one queue implies it.
    pub multi_queue: bool,
    /// The device's MAC address; `None`: the kernel's random one.
    pub mac: Option<[u8; 6]>,
}

impl TapConfig {
    pub fn new(ifname: Option<&str>) -> TapConfig {
        TapConfig {
            ifname: ifname.map(str::to_owned),
            netns: None,
            vnet_hdr_len: VNET_HDR_LEN,
            offload: true,
            device_mtu: None,
            queues: 1,
            multi_queue: false,
            mac: None,
        }
    }
}

/// Most queues a tun device takes (the kernel's `MAX_TAP_QUEUES`).
pub const MAX_TAP_QUEUES: usize = 256;

/// One `TUNSETIFF` on a fresh `/dev/net/tun` descriptor: creates the device `want` (empty:
/// the kernel picks `tap%d`) or attaches another queue to it. Returns the descriptor and the
/// device's name.
fn attach_queue(want: &str, flags: libc::c_int) -> Result<(OwnedFd, String), IoError> {
    let path = c"/dev/net/tun";
    // SAFETY: `path` is a NUL-terminated string literal.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EACCES) {
            return Err(IoError::Access(format!(
                "/dev/net/tun: {e}: TAP ports need read and write access to /dev/net/tun \
                 (mode 0666 on most distributions) and CAP_NET_ADMIN; see docs/operating.md"
            )));
        }
        return Err(IoError::File {
            path: "/dev/net/tun".into(),
            source: e,
        });
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = if want.is_empty() {
        let mut r = IfReq::new("x")?;
        r.name = [0; sys::IFNAMSIZ];
        r
    } else {
        IfReq::new(want)?
    };
    req.set_flags(flags as i16);
    // SAFETY: `req` is a live, correctly sized ifreq the kernel reads and writes back.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) } < 0 {
        return Err(sys::sys_err("TUNSETIFF", want, io::Error::last_os_error()));
    }
    Ok((fd, req.name()))
}

/// Counters the port keeps itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Reads shorter than the virtio-net header; dropped.
    pub rx_short: u64,
}

/// A TAP device owned by this port.
#[derive(Debug)]
pub struct TapPort {
    cfg: TapConfig,
    ifname: String,
    queue: usize,
    fd: OwnedFd,
    /// The device MTU when it was set up.
    mtu: u32,
    caps: PortCaps,
    scratch: Vec<u8>,
    stats: TapStats,
}

impl TapPort {
    /// Creates the TAP device, configures offloads, moves it and sets it up: a single-queue
    /// device ([`TapConfig::queues`] must be 1; see [`TapPort::open_queues`]).
    pub fn open(cfg: TapConfig) -> Result<TapPort, IoError> {
        if cfg.queues != 1 {
            return Err(IoError::Invalid(format!(
                "TapPort::open opens one queue, not {}: use TapPort::open_queues",
                cfg.queues
            )));
        }
        let mut q = TapPort::open_queues(cfg)?;
        Ok(q.remove(0))
    }

    /// Creates the TAP device with [`TapConfig::queues`] queues (`IFF_MULTI_QUEUE` when more
    /// than one), configures offloads, moves it and sets it up. Returns one port per queue,
    /// queue 0 first; each is an independent [`Port`] for one worker. The device goes away
    /// when the last of them is dropped.
    pub fn open_queues(cfg: TapConfig) -> Result<Vec<TapPort>, IoError> {
        if cfg.vnet_hdr_len != 10 && cfg.vnet_hdr_len != 12 {
            return Err(IoError::Invalid(format!(
                "virtio-net header length {} (must be 10 or 12)",
                cfg.vnet_hdr_len
            )));
        }
        if cfg.queues == 0 || cfg.queues > MAX_TAP_QUEUES {
            return Err(IoError::Invalid(format!(
                "{} TAP queues (must be 1 to {MAX_TAP_QUEUES})",
                cfg.queues
            )));
        }
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
        if cfg.queues > 1 || cfg.multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        // A multi-queue TAP of that name already in the target namespace (the TAP of a port
        // being replaced in the same batch): attach the queues to it there — `TUNSETIFF` finds
        // a device by name in the opener's namespace — instead of making one here and moving it.
        let existing_in_ns = match (&cfg.netns, &cfg.ifname) {
            (Some(ns), Some(name)) if flags & libc::IFF_MULTI_QUEUE != 0 && !name.contains('%') => {
                let n = name.clone();
                run_in_netns(ns, move || sys::ifindex(&n).is_ok()).unwrap_or(false)
            }
            _ => false,
        };
        let attach_all = || -> Result<(Vec<OwnedFd>, String), IoError> {
            let (first, ifname) = attach_queue(cfg.ifname.as_deref().unwrap_or(""), flags)?;
            let mut fds = vec![first];
            // Every queue before the move: after it the name is not found in this namespace.
            for _ in 1..cfg.queues {
                let (fd, name) = attach_queue(&ifname, flags)?;
                if name != ifname {
                    return Err(IoError::Invalid(format!(
                        "TUNSETIFF for another queue of {ifname} attached to {name}"
                    )));
                }
                fds.push(fd);
            }
            Ok((fds, ifname))
        };
        let (fds, ifname) = match (&cfg.netns, existing_in_ns) {
            (Some(ns), true) => run_in_netns(ns, attach_all)??,
            _ => attach_all()?,
        };
        let hdr_len = cfg.vnet_hdr_len as libc::c_int;
        // Per device in the kernel, set through the first queue.
        let fd0 = fds[0].as_raw_fd();
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which is live.
        if unsafe { libc::ioctl(fd0, libc::TUNSETVNETHDRSZ, &hdr_len as *const _) } < 0 {
            return Err(sys::sys_err(
                "TUNSETVNETHDRSZ",
                &ifname,
                io::Error::last_os_error(),
            ));
        }
        if cfg.offload {
            let flags = (libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6) as libc::c_ulong;
            // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is touched.
            if unsafe { libc::ioctl(fd0, libc::TUNSETOFFLOAD, flags) } < 0 {
                return Err(sys::sys_err(
                    "TUNSETOFFLOAD",
                    &ifname,
                    io::Error::last_os_error(),
                ));
            }
        }
        let setup = |name: &str| -> Result<(), IoError> {
            if let Some(mtu) = cfg.device_mtu {
                sys::raise_mtu(name, mtu)?;
            }
            if let Some(mac) = cfg.mac {
                sys::set_mac(name, mac)?;
            }
            sys::set_up(name)
        };
        let mtu = match &cfg.netns {
            Some(ns) if existing_in_ns => {
                run_in_netns(ns, || setup(&ifname).and_then(|()| sys::get_mtu(&ifname)))??
            }
            Some(ns) => {
                let out = Command::new("ip")
                    .args(["link", "set", "dev", &ifname, "netns", ns])
                    .output()
                    .map_err(|e| IoError::Sys {
                        op: "running ip(8)",
                        ifname: ifname.clone(),
                        source: e,
                    })?;
                if !out.status.success() {
                    return Err(IoError::Invalid(format!(
                        "ip link set dev {ifname} netns {ns}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                run_in_netns(ns, || setup(&ifname).and_then(|()| sys::get_mtu(&ifname)))??
            }
            None => {
                setup(&ifname)?;
                sys::get_mtu(&ifname)?
            }
        };
        let caps = PortCaps {
            vnet_hdr: true,
            tso: cfg.offload,
            csum: cfg.offload,
            max_frame: mtu as usize + 14 + 4,
            // The TAP's reader (a VM, a container's kernel) takes what it announced.
            device: None,
        };
        Ok(fds
            .into_iter()
            .enumerate()
            .map(|(queue, fd)| TapPort {
                cfg: cfg.clone(),
                ifname: ifname.clone(),
                queue,
                fd,
                mtu,
                caps,
                scratch: Vec::with_capacity(HEADROOM + TAP_MAX_FRAME),
                stats: TapStats::default(),
            })
            .collect())
    }

    /// The device's MTU as set up at open ([`TapConfig::device_mtu`], else the kernel's).
    pub fn device_mtu(&self) -> u32 {
        self.mtu
    }

    /// Which queue of the device this port is (0 for a single-queue device).
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// The interface name (the kernel's choice when none was given).
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    pub fn stats(&self) -> TapStats {
        self.stats
    }

    pub fn config(&self) -> &TapConfig {
        &self.cfg
    }

    /// Waits up to `timeout_ms` for a frame to be ready.
    pub fn wait_readable(&self, timeout_ms: i32) -> Result<bool, IoError> {
        sys::wait_readable(self.fd.as_raw_fd(), timeout_ms)
            .map_err(|e| sys::sys_err("poll", &self.ifname, e))
    }

    fn link_err(&self, op: &'static str, e: io::Error) -> IoError {
        match e.raw_os_error() {
            Some(libc::EIO | libc::EBADFD) => IoError::LinkDown {
                ifname: self.ifname.clone(),
                source: e,
            },
            _ => sys::sys_err(op, &self.ifname, e),
        }
    }
}

impl AsRawFd for TapPort {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for TapPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Port for TapPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        let hl = self.cfg.vnet_hdr_len;
        // Frames land after HEADROOM bytes, their virtio-net header just before them: a long
        // one then becomes a pool buffer by exchanging vectors, with no copy after the
        // kernel's; a short one is copied (the 64 KB vector stays for the next read).
        let at = HEADROOM - hl;
        let fd = self.fd.as_raw_fd();
        let mut n = 0;
        while n < max {
            // SAFETY: `read` writes at most `len` bytes at `ptr` and returns the count (or -1).
            let rc = unsafe {
                sys::read_at(&mut self.scratch, at, hl + TAP_MAX_FRAME, |ptr, len| {
                    libc::read(fd, ptr.cast(), len)
                })
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ if n > 0 => break,
                    _ => return Err(self.link_err("read", e)),
                }
            }
            let len = rc as usize;
            if len < hl {
                self.stats.rx_short += 1;
                continue;
            }
            let offload = vnet_to_meta(&self.scratch[at..at + hl.min(VNET_HDR_LEN)]);
            let mut p = pool.take();
            if len - hl <= SWAP_MIN_FRAME || !p.swap_in_frame(&mut self.scratch) {
                p.set_frame(&self.scratch[HEADROOM..]);
            }
            p.offload = offload;
            batch.push(p);
            n += 1;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        let mut out = TxOutcome::default();
        let hl = self.cfg.vnet_hdr_len;
        let mut link = None;
        for p in batch.iter() {
            if link.is_some() {
                out.error += 1;
                continue;
            }
            let mut hdr = [0u8; 12];
            hdr[..VNET_HDR_LEN].copy_from_slice(&meta_to_vnet(&p.offload));
            let frame = p.frame();
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr().cast(),
                    iov_len: hl,
                },
                libc::iovec {
                    iov_base: frame.as_ptr() as *mut _,
                    iov_len: frame.len(),
                },
            ];
            let rc = loop {
                // SAFETY: both iovecs point to live buffers of the stated lengths, which the
                // kernel only reads.
                let rc = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
                if rc >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    break rc;
                }
            };
            if rc >= 0 {
                out.sent += 1;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::ENOBUFS) => out.queue_full += 1,
                Some(libc::EIO | libc::EBADFD) => {
                    out.error += 1;
                    link = Some(e);
                }
                _ => out.error += 1,
            }
        }
        recycle(batch, pool);
        match link {
            Some(e) => Err(self.link_err("writev", e)),
            None => Ok(out),
        }
    }

    fn caps(&self) -> PortCaps {
        self.caps
    }

    fn name(&self) -> &str {
        &self.ifname
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn drops(&self) -> BackendDrops {
        BackendDrops {
            rx_short: self.stats().rx_short,
            ..BackendDrops::default()
        }
    }

    /// The interface goes away with the device's last queue.
    fn visible_close(&self) -> bool {
        true
    }
}
