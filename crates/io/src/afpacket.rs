//! AF_PACKET port: a Linux interface (veth, physical NIC) as a switch port.
//!
//! Receive uses a memory-mapped ring, one ring walk per burst without syscalls: TPACKET_V2 by
//! default (fixed 2 KiB slots handed over as soon as each is filled; 8192 of them, 16 MiB; a
//! longer frame — a TCP super-frame — comes whole through the socket queue, one `recv` each;
//! docs/decisions.md 20), or TPACKET_V3 (blocks of variable-size frames handed over whole —
//! denser, but a partly filled block waits for its timer: ~0.9 ms added per hop at low rates,
//! see docs/decisions.md 12). [`AfPacketConfig::with_ring_frames`] sizes the ring per port. Transmit uses `sendmmsg(2)`: one
//! syscall — one kick — per batch, each message a virtio-net header and the frame in two
//! iovecs. Chosen over a TPACKET_V2/V3 transmit ring because the ring needs a `send()` kick per
//! batch anyway, copies the frame into the ring just as `sendmmsg` copies it into an skb, and
//! its virtio-net header support depends on the kernel version; `sendmmsg` reports which frame
//! failed and why (`EMSGSIZE` for one frame, `ENOBUFS` for a full queue), which the ring does
//! only through status words. `PACKET_QDISC_BYPASS` (the default; [`AfPacketConfig::qdisc_bypass`])
//! sends straight to the driver.
//!
//! Super-frames and the device (docs/decisions.md 15). With qdisc bypass the kernel validates
//! a frame against the device's features for *that* frame and drops it (`ENOBUFS`, the device's
//! `tx_dropped` + 1) when it would have to segment it in software: TSO off on the device
//! (`ethtool -K IF tso off`), or a device that refuses TSO for two stacked tags (a VXLAN
//! device; a veth does not). So the port reads the device's offload features through its own
//! socket ([`AfPacketPort::refresh_offloads`], at open and then as often as the caller likes,
//! once a second in the daemon) and reports them in [`PortCaps::device`], and a super-frame the
//! kernel refuses anyway is handed back to the caller of [`Port::tx_burst_report`] to segment,
//! with its tag depth remembered for [`REFUSAL_TICKS`] refreshes. Without qdisc bypass the
//! kernel's qdisc path segments in software itself, and `tcpdump` on the interface sees what
//! was sent (the bypass skips the taps).
//!
//! Facts this module respects (`docs/architecture.md`, "Linux facts the backends rely on"):
//! * The kernel strips the outermost VLAN tag (0x8100 or 0x88a8) on receive and reports it in
//!   `tp_vlan_tci` / `tp_vlan_tpid`. [`AfPacketPort::rx_burst`] puts it back at offset 12 with
//!   the reported TPID (0x8100 only when the kernel did not report one), inner tags untouched,
//!   and moves the offload offsets (`csum_start`, `hdr_len`) by 4.
//! * With `PACKET_VNET_HDR` every frame carries a `struct virtio_net_hdr` (10 bytes, native
//!   little-endian), converted to and from [`OffloadMeta`]: TCP super-frames cross intact.
//! * Frames the socket sent itself are not received (`PACKET_IGNORE_OUTGOING`, and a
//!   `PACKET_OUTGOING` check for kernels without it).
//! * The kernel's send-size check allows one tag of slack, for 0x8100 only; give
//!   [`AfPacketConfig::device_mtu`] to raise the device MTU for envelope frames.
//!
//! Link loss: an interface that goes down or disappears turns into [`IoError::LinkDown`] (or
//! [`IoError::NoSuchInterface`]) from a burst; the caller marks the port down, watches
//! [`AfPacketPort::link_state`], and calls [`AfPacketPort::reopen`] when it is back. (After a
//! plain down/up the kernel resumes the socket by itself; after the interface was deleted and
//! recreated only `reopen` helps.)
//!
//! Several workers on one interface: each opens its own port with the same
//! [`AfPacketConfig::fanout`] group, and the kernel hands every received frame to exactly one
//! of them, by flow hash ([`FanoutMode::Hash`]: whole flows, in order, also through 802.1ad +
//! 802.1Q tags; docs/decisions.md 17).
//!
//! Receive filters change without reopening: a port's sockets share an [`RxFilterHandle`]
//! (promiscuous mode and accepted unicast addresses, held as memberships of one extra,
//! unbound socket), which the control plane changes address by address while workers receive.
//!
//! Frames the kernel drops because the receive ring is full never reach user space; the kernel
//! counts them per socket (`PACKET_STATISTICS`, reset on every read).
//! [`AfPacketPort::poll_kernel_stats`] (one syscall; once a second, not per burst) adds them to
//! [`AfPacketStats::rx_ring_full`].
//!
//! Threads: one port belongs to one thread at a time (`Send`, not `Sync`).
//!
//! Files, along the seams of one socket's life: this one opens the socket (options, bind,
//! fanout, memberships), keeps the port's state (offloads and refusals, counters, reopen)
//! and implements [`Port`]; `afpacket/config.rs` what to open ([`AfPacketConfig`], fanout
//! groups, ring sizes: plain data); `afpacket/ring.rs` the receive ring (setup, `mmap`,
//! ABI layouts, checked reads of what the kernel writes); `afpacket/rx.rs` receive (ring
//! walks, frames out of the ring or the socket queue, the outer tag put back);
//! `afpacket/tx.rs` transmit (`sendmmsg`, each frame settled by its errno); `afpacket/vnet.rs`
//! the virtio-net header. The port's fields are private to this module and its files; the
//! `unsafe` is in ring.rs, rx.rs, tx.rs and [`AfPacketPort::open`], each block justified.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use qbridge_packet::{Batch, BufPool, HEADROOM};

use crate::port::{
    depth_bit, BackendDrops, DeviceOffloads, Port, PortCaps, Tick, TxOutcome, TxReport,
};
use crate::rxfilter::membership;
pub use crate::rxfilter::RxFilterHandle;
use crate::sys::{self, FeatureBits, LinkState};
use crate::IoError;

mod config;
mod ring;
mod rx;
mod tx;
mod vnet;

pub use config::{
    fanout_group_for, AfPacketConfig, Fanout, FanoutMode, RingVersion, RxMode, DEFAULT_RING_FRAMES,
    SMALL_BLOCK_BYTES, V2_SLOT_BYTES, V2_SLOT_OVERHEAD, V2_SUPER_SLOT_BYTES,
};
use ring::RxRing;
pub use rx::UPCALL_NO_PORT;
use rx::{Otherhost, COPY_BUF_BYTES};
use tx::TxScratch;
pub use tx::REFUSAL_TICKS;
pub use vnet::{meta_to_vnet, vnet_to_meta, VNET_HDR_LEN};

// Constants of <linux/if_packet.h> / <linux/if_ether.h>, spelled out where libc has them only
// in some versions.
const ETH_P_ALL: u16 = 0x0003;
/// Slow Protocols (LACP, markers): [`RxMode::Slow`]'s binding.
const ETH_P_SLOW: u16 = 0x8809;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_STATISTICS: libc::c_int = 6;
/// Classic BPF `ret #k`: with k = 0, drop the frame.
const BPF_RET_K: u16 = 0x06;

/// Counters the port keeps itself (the caller keeps the per-port datapath counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames the socket saw leaving the interface and skipped (kernels without
    /// `PACKET_IGNORE_OUTGOING`).
    pub rx_outgoing_skipped: u64,
    /// Frames cut short by the ring (longer than a V3 block); dropped.
    pub rx_truncated: u64,
    /// V2: frames longer than a slot that the kernel could not queue whole on the socket
    /// because its receive queue was full (the port did not keep up); dropped. The daemon
    /// counts them with the ring's own drops, as `rx_ring_full`.
    pub rx_copy_queue_full: u64,
    /// V2: frames longer than a slot, read whole from the socket queue (one `recv` each).
    pub rx_copied: u64,
    /// VLAN tags put back into received frames.
    pub rx_vlan_restored: u64,
    /// Without `promisc`: unicast frames for another host that the device let through anyway
    /// (a veth, or a NIC without a unicast filter, delivers them), dropped because their
    /// destination is not in [`AfPacketConfig::unicast`] (or, with a shared
    /// [`AfPacketConfig::filter`], not in its accepted set).
    pub rx_otherhost_filtered: u64,
    /// Frames the kernel dropped for this socket because the receive ring had no free slot
    /// (or block): `tp_drops` of `PACKET_STATISTICS`, summed over every
    /// [`AfPacketPort::poll_kernel_stats`]. (The kernel also counts here the rare frame it
    /// could not copy for lack of memory.) Only as fresh as the last poll.
    pub rx_ring_full: u64,
    /// TPACKET_V3 only: times the ring froze — every block was in user space, so the kernel
    /// dropped frames until one came back (`tp_freeze_q_cnt`). Only as fresh as the last poll.
    pub rx_ring_frozen: u64,
}

/// An AF_PACKET port bound to one interface.
#[derive(Debug)]
pub struct AfPacketPort {
    cfg: AfPacketConfig,
    fd: OwnedFd,
    ring: RxRing,
    caps: PortCaps,
    tx: TxScratch,
    /// V2: the vector a frame longer than a slot is read into from the socket queue, which
    /// then becomes a pool buffer's (see [`recv_queued`]).
    copy_buf: Vec<u8>,
    stats: AfPacketStats,
    /// Where the offload features sit in the kernel's feature bitmap (`None`: the names could
    /// not be read; the device is then taken to segment nothing).
    feature_bits: Option<FeatureBits>,
    /// The device's offloads as last read, refusals included.
    offloads: DeviceOffloads,
    /// Per tag depth (see [`kernel_tag_depth`]): refreshes left before a refused depth is
    /// tried on the direct path again.
    refused_ticks: [u8; 8],
}

fn errno_err(op: &'static str, ifname: &str) -> IoError {
    sys::sys_err(op, ifname, io::Error::last_os_error())
}

impl AfPacketPort {
    /// Opens a socket on `cfg.ifname`, sets up the rings and options, and binds it.
    pub fn open(mut cfg: AfPacketConfig) -> Result<AfPacketPort, IoError> {
        if cfg.rx == RxMode::None {
            // Receives nothing: the smallest ring the code below accepts.
            cfg.block_bytes = 128 * 1024;
            cfg.block_count = 1;
            cfg.fanout = None;
            cfg.paused = false;
        }
        if cfg.rx == RxMode::Slow {
            // A few protocol frames a second (one socket of the fanout group gets each).
            cfg.block_bytes = 128 * 1024;
            cfg.block_count = 1;
        }
        let name = cfg.ifname.clone();
        let ifindex = sys::ifindex(&name)?;
        let page = 4096u32;
        if cfg.block_bytes < 128 * 1024 || cfg.block_bytes % page != 0 || cfg.block_count == 0 {
            return Err(IoError::Invalid(format!(
                "ring of {} blocks of {} bytes: blocks must be >= 128 KiB and page multiples",
                cfg.block_count, cfg.block_bytes
            )));
        }
        if cfg.ring == RingVersion::V2
            && (cfg.slot_bytes < 256
                || cfg.slot_bytes % 16 != 0
                || cfg.slot_bytes > cfg.block_bytes)
        {
            return Err(IoError::Invalid(format!(
                "{name}: ring slots of {} bytes: must be a multiple of 16 from 256 to the block \
                 size ({})",
                cfg.slot_bytes, cfg.block_bytes
            )));
        }
        // Protocol 0: receive nothing until bound to the interface below.
        // SAFETY: socket(2) takes no pointers.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(errno_err("socket(AF_PACKET)", &name));
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let opt = |lvl, opt, v, what| {
            sys::setsockopt_int(s, lvl, opt, v).map_err(|e| sys::sys_err(what, &name, e))
        };
        // Through this socket, so the ioctl reaches the socket's namespace.
        let mtu = match cfg.device_mtu {
            Some(mtu) => sys::raise_mtu_via(s, &name, mtu)?,
            None => sys::get_mtu_via(s, &name)?,
        };
        if cfg.vnet_hdr {
            // Must precede the ring setup.
            opt(
                libc::SOL_PACKET,
                libc::PACKET_VNET_HDR,
                1,
                "PACKET_VNET_HDR",
            )?;
        }
        let ring = RxRing::setup(s, &cfg, &name)?;
        if cfg.qdisc_bypass {
            opt(
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                1,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        // Best effort (Linux >= 4.20); rx_burst also skips PACKET_OUTGOING frames.
        let _ = sys::setsockopt_int(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);

        // Only a bound socket may join a fanout group, and from bind until it has joined it
        // receives every frame — duplicates of what the group's members already get. A
        // drop-all filter closes that window: nothing enters the ring until the socket has
        // joined (frames hashed to it between the join and the filter's removal, a few
        // microseconds, are dropped instead; none is delivered twice).
        let mut drop_all = [libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        if cfg.fanout.is_some() || cfg.paused {
            let prog = libc::sock_fprog {
                len: 1,
                filter: drop_all.as_mut_ptr(),
            };
            sys::setsockopt_raw(s, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
                .map_err(|e| sys::sys_err("SO_ATTACH_FILTER", &name, e))?;
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        // Protocol 0 registers no receive hook: a transmit-only socket.
        sll.sll_protocol = match cfg.rx {
            RxMode::None => 0,
            RxMode::Slow => ETH_P_SLOW.to_be(),
            _ => ETH_P_ALL.to_be(),
        };
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(errno_err("bind(AF_PACKET)", &name));
        }
        if let Some(f) = cfg.fanout {
            sys::setsockopt_int(
                s,
                libc::SOL_PACKET,
                PACKET_FANOUT,
                f.option_value() as libc::c_int,
            )
            .map_err(|e| match e.raw_os_error() {
                // EINVAL: the id belongs to a group of another mode (or another device's
                // group with other flags); ENOSPC: the group is full.
                Some(libc::EINVAL | libc::ENOSPC) => IoError::Sys {
                    op: "PACKET_FANOUT",
                    ifname: format!("{name} (group {}, {:?})", f.group, f.mode),
                    source: e,
                },
                _ => sys::sys_err("PACKET_FANOUT", &name, e),
            })?;
            if !cfg.paused {
                sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)
                    .map_err(|e| sys::sys_err("SO_DETACH_FILTER", &name, e))?;
            }
        }
        let mut cfg = cfg;
        if let Some(f) = &mut cfg.fanout {
            if f.unique_id {
                // The id the kernel chose: the port's other sockets (and a reopen) join it.
                let mut v: u32 = 0;
                sys::getsockopt_raw(s, libc::SOL_PACKET, PACKET_FANOUT, &mut v)
                    .map_err(|e| sys::sys_err("getsockopt(PACKET_FANOUT)", &name, e))?;
                *f = Fanout::new(v as u16, f.mode);
            }
        }
        if cfg.filter.is_none() {
            if cfg.promisc {
                membership(s, ifindex, &name, true, libc::PACKET_MR_PROMISC, None)?;
            } else {
                for a in &cfg.unicast {
                    membership(s, ifindex, &name, true, libc::PACKET_MR_UNICAST, Some(*a))?;
                }
            }
        }
        let caps = PortCaps {
            vnet_hdr: cfg.vnet_hdr,
            tso: cfg.vnet_hdr,
            // The kernel completes a checksum the device cannot, in place, on either path.
            csum: cfg.vnet_hdr,
            // The kernel's send check: MTU + Ethernet header (+4 only for a 0x8100 tag).
            max_frame: mtu as usize + 14,
            device: None,
        };
        let feature_bits = sys::feature_bits_via(s, &name).ok();
        let copy_buf = match cfg.ring {
            RingVersion::V2 => Vec::with_capacity(HEADROOM + COPY_BUF_BYTES),
            RingVersion::V3 => Vec::new(),
        };
        let mut port = AfPacketPort {
            cfg,
            fd,
            ring,
            caps,
            tx: TxScratch::default(),
            copy_buf,
            stats: AfPacketStats::default(),
            feature_bits,
            offloads: DeviceOffloads::default(),
            refused_ticks: [0; 8],
        };
        port.read_offloads()?;
        Ok(port)
    }

    /// Reads the device's offload features (through this socket, so in its namespace) and
    /// updates [`PortCaps::device`]. Unreadable names leave every feature off: super-frames are
    /// then segmented by the caller, never dropped.
    fn read_offloads(&mut self) -> Result<(), IoError> {
        let mut d = match &self.feature_bits {
            Some(bits) => sys::device_offloads_via(self.fd.as_raw_fd(), &self.cfg.ifname, bits)?,
            None => DeviceOffloads::default(),
        };
        d.refused_tags = self.refused_mask();
        self.offloads = d;
        self.update_caps();
        Ok(())
    }

    fn refused_mask(&self) -> u8 {
        (0..8)
            .filter(|&i| self.refused_ticks[i] > 0)
            .fold(0, |m, i| m | depth_bit(i))
    }

    fn update_caps(&mut self) {
        self.offloads.refused_tags = self.refused_mask();
        // Only a qdisc-bypass socket with virtio-net headers hands super-frames to the device
        // unvalidated; otherwise the kernel segments what the device cannot.
        self.caps.device = (self.cfg.vnet_hdr && self.cfg.qdisc_bypass).then_some(self.offloads);
    }

    /// Reads the device's offload features again and counts one tick off every remembered
    /// refusal ([`REFUSAL_TICKS`]). Call it about once a second. Returns whether the device's
    /// features (refusals aside) changed.
    pub fn refresh_offloads(&mut self) -> Result<bool, IoError> {
        let before = DeviceOffloads {
            refused_tags: 0,
            ..self.offloads
        };
        for t in self.refused_ticks.iter_mut() {
            *t = t.saturating_sub(1);
        }
        self.read_offloads()?;
        Ok(DeviceOffloads {
            refused_tags: 0,
            ..self.offloads
        } != before)
    }

    /// The device's transmit offloads as last read, with the tag depths whose super-frames
    /// the kernel refused lately (whether or not qdisc bypass makes them matter).
    pub fn device_offloads(&self) -> DeviceOffloads {
        self.offloads
    }

    /// Closes the socket and opens it again with the same configuration: after the interface
    /// came back (or was recreated under the same name). Call it from a thread in the
    /// interface's namespace (see [`crate::netns::run_in_netns`]).
    pub fn reopen(&mut self) -> Result<(), IoError> {
        let fresh = AfPacketPort::open(self.cfg.clone())?;
        // The old socket's last drops, before it closes (best effort: it may be dead).
        let _ = self.poll_kernel_stats();
        let (stats, ticks) = (self.stats, self.refused_ticks);
        *self = fresh;
        self.stats = stats;
        self.refused_ticks = ticks;
        self.update_caps();
        Ok(())
    }

    pub fn config(&self) -> &AfPacketConfig {
        &self.cfg
    }

    /// Starts receiving on a socket opened [`AfPacketConfig::paused`] (removes its drop-all
    /// filter: one syscall); nothing to do otherwise. A reopen is not paused.
    pub fn resume(&mut self) -> Result<(), IoError> {
        if !self.cfg.paused {
            return Ok(());
        }
        sys::setsockopt_int(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DETACH_FILTER,
            0,
        )
        .map_err(|e| sys::sys_err("SO_DETACH_FILTER", &self.cfg.ifname, e))?;
        self.cfg.paused = false;
        Ok(())
    }

    /// The fanout group the socket joined, with its id (the kernel's choice for
    /// [`Fanout::unique`]); `None` without fanout.
    pub fn fanout(&self) -> Option<Fanout> {
        self.cfg.fanout
    }

    /// Reads the kernel's counters for this socket (`getsockopt(PACKET_STATISTICS)`: one
    /// syscall) and adds them to [`AfPacketPort::stats`] (`rx_ring_full`, `rx_ring_frozen`).
    /// The kernel resets its counters on every read, so each drop is counted exactly once,
    /// however often this is called. A syscall: call it about once a second (the daemon's
    /// housekeeping tick, with [`AfPacketPort::refresh_offloads`]), not per burst.
    pub fn poll_kernel_stats(&mut self) -> Result<(), IoError> {
        // struct tpacket_stats_v3 {tp_packets, tp_drops, tp_freeze_q_cnt}; a V2 socket
        // writes only the first two (struct tpacket_stats).
        let mut st = [0u32; 3];
        let want = match self.ring.version {
            RingVersion::V3 => 12,
            RingVersion::V2 => 8,
        };
        let fd = self.fd.as_raw_fd();
        let got = sys::getsockopt_raw(fd, libc::SOL_PACKET, PACKET_STATISTICS, &mut st)
            .map_err(|e| sys::sys_err("getsockopt(PACKET_STATISTICS)", &self.cfg.ifname, e))?;
        if got < want {
            return Err(IoError::Invalid(format!(
                "{}: PACKET_STATISTICS returned {got} bytes, expected {want}",
                self.cfg.ifname
            )));
        }
        self.stats.rx_ring_full += u64::from(st[1]);
        if self.ring.version == RingVersion::V3 {
            self.stats.rx_ring_frozen += u64::from(st[2]);
        }
        Ok(())
    }

    pub fn stats(&self) -> AfPacketStats {
        self.stats
    }

    /// The interface's link state now (asked in the socket's own namespace).
    pub fn link_state(&self) -> Result<LinkState, IoError> {
        sys::link_state_via(self.fd.as_raw_fd(), &self.cfg.ifname)
    }

    /// Waits up to `timeout_ms` for frames (or an error) to be ready.
    pub fn wait_readable(&self, timeout_ms: i32) -> Result<bool, IoError> {
        sys::wait_readable(self.fd.as_raw_fd(), timeout_ms)
            .map_err(|e| sys::sys_err("poll", &self.cfg.ifname, e))
    }
}

impl AsRawFd for AfPacketPort {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for AfPacketPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Port for AfPacketPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        // The shared filter moves out of the config for the burst, so the burst can borrow it
        // (and its set's read guard) while the port is borrowed mutably; no atomic operation.
        let filter = self.cfg.filter.take();
        let mut otherhost = Otherhost::for_burst(self.cfg.promisc, filter.as_deref());
        let n = match self.ring.version {
            RingVersion::V3 => self.rx_v3(batch, pool, max, &mut otherhost),
            RingVersion::V2 => self.rx_v2(batch, pool, max, &mut otherhost),
        };
        drop(otherhost);
        self.cfg.filter = filter;
        if n == 0 {
            // Idle: the one place a pending socket error (interface down or gone) shows up.
            let err = sys::take_socket_error(self.fd.as_raw_fd())
                .map_err(|e| sys::sys_err("getsockopt(SO_ERROR)", &self.cfg.ifname, e))?;
            if let Some(e) = err {
                if sys::is_link_errno(&e) {
                    return Err(IoError::LinkDown {
                        ifname: self.cfg.ifname.clone(),
                        source: e,
                    });
                }
                return Err(IoError::Sys {
                    op: "receive",
                    ifname: self.cfg.ifname.clone(),
                    source: e,
                });
            }
        }
        Ok(n)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        self.send(batch, pool, None).map(|r| r.outcome())
    }

    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        self.send(batch, pool, Some(refused))
    }

    fn caps(&self) -> PortCaps {
        self.caps
    }

    fn name(&self) -> &str {
        &self.cfg.ifname
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn drops(&self) -> BackendDrops {
        let s = self.stats();
        BackendDrops {
            rx_truncated: s.rx_truncated,
            rx_filtered: s.rx_otherhost_filtered,
            rx_ring_full: s.rx_ring_full + s.rx_copy_queue_full,
            ..BackendDrops::default()
        }
    }

    fn start(&mut self) -> Result<(), IoError> {
        self.resume()
    }

    fn tick(&mut self) -> Result<Tick, IoError> {
        self.poll_kernel_stats()?;
        let changed = self.refresh_offloads()?;
        Ok(Tick {
            offloads: Some(self.device_offloads()),
            offloads_changed: changed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_interface_is_reported() {
        let e = AfPacketPort::open(AfPacketConfig::new("qbnoexist0")).unwrap_err();
        assert!(matches!(e, IoError::NoSuchInterface { .. }), "{e}");
    }
}
