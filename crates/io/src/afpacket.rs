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
//! One file over 800 lines on purpose: one backend, whose ring, socket options, offload
//! reading and tag restoring share one socket's state and its `unsafe` blocks.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLockReadGuard};

use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf, HEADROOM};
use qbridge_wire::virtio::HeaderKind;

use crate::port::{
    depth_bit, kernel_tag_depth, BackendDrops, DeviceOffloads, Port, PortCaps, Tick, TxOutcome,
    TxReport,
};
pub use crate::rxfilter::RxFilterHandle;
use crate::rxfilter::{mac_key, membership};
use crate::sys::{self, FeatureBits, LinkState};
use crate::IoError;

/// Length of `struct virtio_net_hdr` (no `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;

// Constants of <linux/if_packet.h> / <linux/if_ether.h>, spelled out where libc has them only
// in some versions.
const ETH_P_ALL: u16 = 0x0003;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const PACKET_OTHERHOST: u8 = 3;
const PACKET_OUTGOING: u8 = 4;
const TPID_8021Q: u16 = 0x8100;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_COPY_THRESH: libc::c_int = 7;
/// Classic BPF `ret #k`: with k = 0, drop the frame.
const BPF_RET_K: u16 = 0x06;
const TP_STATUS_COPY: u32 = 1 << 1;
/// Largest frame the socket queue can hand over: virtio-net header, 64 KB IP packet,
/// Ethernet header and tags.
const COPY_BUF_BYTES: usize = VNET_HDR_LEN + 65_535 + 14 + 4 * 8;

/// V2: reads the frame of `wire_len` bytes (after a `vnet_len`-byte virtio-net header) waiting
/// in the socket queue of `fd` straight into `buf` after [`HEADROOM`] bytes, and makes it a
/// pool buffer by exchanging vectors ([`PacketBuf::swap_in_frame`]): the kernel's copy is the
/// only one (a 64 KB super-frame was copied a second time from a scratch buffer before).
/// `buf` keeps the pool buffer's old vector for the next frame. `None` when the queue did not
/// hold a frame of that length.
fn recv_queued(
    fd: RawFd,
    buf: &mut Vec<u8>,
    vnet_len: usize,
    wire_len: usize,
    pool: &mut BufPool,
) -> Option<PacketBuf> {
    // The virtio-net header lands in the headroom, right before the frame.
    let at = HEADROOM - vnet_len;
    // One byte more than expected, so that a longer frame shows as one.
    let want = vnet_len + wire_len + 1;
    // SAFETY: `recv` writes at most `len` bytes at `ptr` and returns the count (or -1).
    let n = unsafe {
        sys::read_at(buf, at, want, |ptr, len| {
            libc::recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT)
        })
    };
    if n < 0 || (n as usize) < vnet_len || n as usize - vnet_len != wire_len {
        return None;
    }
    let offload = if vnet_len != 0 {
        vnet_to_meta(&buf[at..HEADROOM])
    } else {
        OffloadMeta::default()
    };
    let mut p = pool.take();
    if !p.swap_in_frame(buf) {
        return None;
    }
    p.offload = offload;
    Some(p)
}

/// Byte offsets in the ring's structures (`struct tpacket_block_desc`, `struct tpacket3_hdr`,
/// `struct tpacket2_hdr`, `struct sockaddr_ll`), which the kernel fixes by ABI.
mod field {
    pub const BLK_STATUS: usize = 8;
    pub const BLK_NUM_PKTS: usize = 12;
    pub const BLK_FIRST_PKT: usize = 16;
    /// `tp_next_offset` of a `tpacket3_hdr`.
    pub const V3_NEXT: usize = 0;
    /// `tp_status` of a `tpacket2_hdr`: the per-frame ownership word of a V2 ring.
    pub const V2_STATUS: usize = 0;
}

/// Where a ring version keeps each per-frame field (offsets from the frame header).
#[derive(Clone, Copy, Debug)]
struct PktLayout {
    sec: usize,
    nsec: usize,
    snaplen: usize,
    len: usize,
    status: usize,
    mac: usize,
    vlan_tci: usize,
    vlan_tpid: usize,
    /// `sll_pkttype`: the `sockaddr_ll` follows the TPACKET_ALIGN'ed header, +10.
    pkttype: usize,
    /// Smallest header the kernel writes before a frame (header + sockaddr_ll).
    hdr_min: usize,
}

const V3_LAYOUT: PktLayout = PktLayout {
    sec: 4,
    nsec: 8,
    snaplen: 12,
    len: 16,
    status: 20,
    mac: 24,
    vlan_tci: 32,
    vlan_tpid: 36,
    pkttype: 48 + 10,
    hdr_min: 48 + 20,
};

const V2_LAYOUT: PktLayout = PktLayout {
    status: 0,
    len: 4,
    snaplen: 8,
    mac: 12,
    sec: 16,
    nsec: 20,
    vlan_tci: 24,
    vlan_tpid: 26,
    pkttype: 32 + 10,
    hdr_min: 32 + 20,
};

/// Which receive ring to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingVersion {
    /// TPACKET_V3: variable-size frames packed into blocks; the densest ring and the fewest
    /// wake-ups under load, but a block that is not full is handed over only when its timer
    /// (`block_timeout_ms`) fires, which adds up to that much latency at low rates (measured
    /// here: ~0.9 ms median per hop with 1 ms).
    V3,
    /// TPACKET_V2: fixed slots of [`AfPacketConfig::slot_bytes`], each handed over as soon as
    /// it is filled (no added latency). A frame longer than a slot (a TCP super-frame, a jumbo
    /// frame) is not lost: the kernel queues the whole frame on the socket as well
    /// (`PACKET_COPY_THRESH`), marks its truncated slot `TP_STATUS_COPY`, and the port reads
    /// it from there with one `recv` (counted in [`AfPacketStats::rx_copied`]).
    V2,
}

/// [`PacketBuf::port`] of an upcalled frame that came without its port (not from the fast
/// path's program: counted and dropped by the caller).
pub const UPCALL_NO_PORT: u16 = u16::MAX;

/// How to attach to an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    pub ifname: String,
    /// Receive every frame (`PACKET_MR_PROMISC`): for learning or flooding ports.
    pub promisc: bool,
    /// Without `promisc`: unicast addresses the interface must accept (`PACKET_MR_UNICAST`),
    /// besides its own address, broadcast and multicast. Frames for other unicast addresses
    /// that the device delivers anyway are dropped and counted.
    pub unicast: Vec<[u8; 6]>,
    /// Raise the device MTU to at least this (L3 MTU + envelope allowance); `None`: leave it.
    pub device_mtu: Option<u32>,
    /// Exchange virtio-net headers with the kernel (`PACKET_VNET_HDR`).
    pub vnet_hdr: bool,
    /// Send straight to the driver (`PACKET_QDISC_BYPASS`): faster, but `tcpdump` on the
    /// interface does not see what this socket sends, and the kernel drops (rather than
    /// segments) a super-frame the device cannot segment; see the module documentation.
    pub qdisc_bypass: bool,
    /// Receive ring version.
    pub ring: RingVersion,
    /// Receive ring: bytes per block (a multiple of the page size, at least 128 KiB so a
    /// super-frame fits a V3 block) and number of blocks. The ring's memory is their product,
    /// pinned in the kernel for the socket's life. See [`AfPacketConfig::with_ring_frames`].
    pub block_bytes: u32,
    pub block_count: u32,
    /// V2 only: bytes per slot (a multiple of 16, from 256 to `block_bytes`). A slot holds
    /// the frame header, the virtio-net header and a frame of up to `slot_bytes -`
    /// [`V2_SLOT_OVERHEAD`] bytes; longer frames arrive through the socket's queue (one extra
    /// `recv` each). Default [`V2_SLOT_BYTES`]: every frame up to 1972 bytes (1500-byte MTU,
    /// envelope frames, any tag stack) in the ring; [`V2_SUPER_SLOT_BYTES`] fits 64 KB
    /// super-frames in the ring too, at 32 times the memory per frame.
    pub slot_bytes: u32,
    /// V3 only: milliseconds after which the kernel hands over a partly filled block: the
    /// worst-case added latency at low rates.
    pub block_timeout_ms: u32,
    /// Join a `PACKET_FANOUT` group after binding, so several sockets on one interface (one
    /// per worker thread) share its frames instead of each receiving all of them.
    pub fanout: Option<Fanout>,
    /// The port's receive filter, shared by every socket of the port (one per worker) and
    /// changed by the control plane while the workers run: promiscuous mode and the accepted
    /// unicast addresses. When given, [`AfPacketConfig::promisc`] and
    /// [`AfPacketConfig::unicast`] are ignored and the socket joins no membership itself.
    pub filter: Option<Arc<RxFilterHandle>>,
    /// Open receiving nothing (a drop-all socket filter stays attached) until
    /// [`AfPacketPort::resume`]: for sockets that replace others of the same interface, which
    /// keep forwarding until the new ones take over — both receiving would deliver the frames
    /// of that moment twice (two fanout groups each get every frame). Transmit works at once.
    pub paused: bool,
    /// What the socket receives (default [`RxMode::Frames`]).
    pub rx: RxMode,
}

/// What an AF_PACKET socket receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// Every frame of the interface (bound to `ETH_P_ALL`).
    #[default]
    Frames,
    /// Nothing: bound with protocol 0, the socket only transmits (a port whose frames the
    /// eBPF fast path receives at TC ingress; packet taps run before TC, so a receiving socket
    /// would see frames twice, and frames a tc rule drops). Its ring is one small block.
    None,
    /// The fast path's upcall device: every frame carries the ingress port in its accelerated
    /// tag, which is metadata, not a tag of the frame: [`PacketBuf::port`] gets the TCI and
    /// nothing is put back into the frame.
    Upcall,
}

/// A `PACKET_FANOUT` group: every socket of one port (one per worker) joins the same group,
/// and the kernel hands each received frame to exactly one of them.
///
/// The group id namespace is the network namespace: sockets bound to the same device with the
/// same id and mode share a group, whatever process owns them; a socket whose id is taken by a
/// group of another mode fails to join (`EINVAL`), and so does one bound to another device
/// than the group's. [`Fanout::unique`] lets the kernel pick an id no group of the namespace
/// holds (`PACKET_FANOUT_FLAG_UNIQUEID`, Linux 4.3): the first socket of a port asks for one,
/// [`AfPacketPort::fanout`] reports it, and the port's other sockets join with it. Ids so
/// chosen never meet a group that still lives — a port deleted and one added in the same
/// batch, whose old sockets are still open when the new ones join (docs/decisions.md 27).
/// [`fanout_group_for`] picks ids that do not collide within one process and rarely between
/// processes, for callers that name the group themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fanout {
    pub group: u16,
    pub mode: FanoutMode,
    /// Ask the kernel for a fresh group id (`group` is ignored); see [`Fanout::unique`].
    pub unique_id: bool,
}

/// How the kernel picks a group member for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanoutMode {
    /// `PACKET_FANOUT_HASH`: by the kernel's symmetric flow hash (the flow dissector, which
    /// reads through 0x8100 and 0x88a8 tags to the L3 addresses and L4 ports; checked by
    /// `tests/fanout_netns.rs`, docs/decisions.md 17). Every frame of a flow goes to one
    /// socket, in order: the mode for a switch. No rollover: moving a flow's frames to
    /// another socket when its ring is full would reorder the flow.
    Hash,
    /// `PACKET_FANOUT_CPU`: by the CPU that received the frame (follows the device's RSS or
    /// RPS, which may or may not read through stacked tags).
    Cpu,
    /// `PACKET_FANOUT_LB`: round robin; reorders flows.
    LoadBalance,
    /// `PACKET_FANOUT_QM`: by the device's receive queue (`skb_get_rx_queue`).
    QueueMapping,
}

impl FanoutMode {
    /// The `PACKET_FANOUT_*` type number (`<linux/if_packet.h>`).
    pub fn kernel_type(self) -> u16 {
        match self {
            FanoutMode::Hash => 0,
            FanoutMode::LoadBalance => 1,
            FanoutMode::Cpu => 2,
            FanoutMode::QueueMapping => 5,
        }
    }
}

/// `PACKET_FANOUT_FLAG_UNIQUEID` (`<linux/if_packet.h>`), in the option's type byte.
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;

impl Fanout {
    /// Group `group` in mode `mode`.
    pub fn new(group: u16, mode: FanoutMode) -> Fanout {
        Fanout {
            group,
            mode,
            unique_id: false,
        }
    }

    /// A new group in mode `mode` whose id the kernel picks when the socket joins: one no
    /// group of the network namespace holds at that moment.
    pub fn unique(mode: FanoutMode) -> Fanout {
        Fanout {
            group: 0,
            mode,
            unique_id: true,
        }
    }

    /// The `PACKET_FANOUT` option value: group id in the low 16 bits, type and flags above.
    /// No `ROLLOVER` (reorders flows), no `DEFRAG` (a switch must forward IP fragments as
    /// they came; the kernel hashes every fragment of a datagram by its addresses only, so
    /// fragments stay together anyway); `UNIQUEID` (with id 0) for [`Fanout::unique`].
    pub fn option_value(&self) -> u32 {
        if self.unique_id {
            return (u32::from(self.mode.kernel_type()) | PACKET_FANOUT_FLAG_UNIQUEID) << 16;
        }
        u32::from(self.group) | u32::from(self.mode.kernel_type()) << 16
    }
}

/// A fanout group id for port `port_id` of this process: `port_id` plus a per-process offset
/// derived from the pid, modulo 2^16. Distinct port ids of one process (fewer than 65 536)
/// never share an id; two processes attached to the *same* device in the same namespace (the
/// only case where ids meet, as a group belongs to one device) collide with probability
/// about 1 in 65 536 per port pair.
pub fn fanout_group_for(port_id: u32) -> u16 {
    let pid = std::process::id();
    // A multiplicative hash spreads neighbouring pids far apart.
    let salt = (pid.wrapping_mul(0x9e37_79b1) >> 16) as u16;
    salt.wrapping_add(port_id as u16)
}

impl AfPacketConfig {
    /// Defaults: promiscuous, virtio-net headers, qdisc bypass, a TPACKET_V2 ring of
    /// [`DEFAULT_RING_FRAMES`] slots of 2 KiB (16 blocks of 1 MiB: 16 MiB per socket; longer
    /// frames through the socket queue, see [`RingVersion::V2`]). V2 because V3 holds a partly
    /// filled block until its timer fires: measured here ~0.9 ms added per hop at low rates
    /// against ~20 µs for V2 — a ping through four switch hops would pay it eight times
    /// (docs/decisions.md 12, 20). Use [`RingVersion::V3`] for ports that only ever run
    /// loaded.
    pub fn new(ifname: &str) -> AfPacketConfig {
        AfPacketConfig {
            ifname: ifname.to_owned(),
            promisc: true,
            unicast: Vec::new(),
            device_mtu: None,
            vnet_hdr: true,
            qdisc_bypass: true,
            ring: RingVersion::V2,
            block_bytes: 1 << 20,
            block_count: DEFAULT_RING_FRAMES / ((1 << 20) / V2_SLOT_BYTES),
            slot_bytes: V2_SLOT_BYTES,
            block_timeout_ms: 1,
            fanout: None,
            filter: None,
            paused: false,
            rx: RxMode::Frames,
        }
    }

    /// Sizes the receive ring for at least `frames` frames: for V2, `frames` slots (whole
    /// blocks of `block_bytes`); for V3, `frames` x [`V2_SLOT_BYTES`] bytes of blocks, which
    /// holds at least as many frames of up to 1972 bytes and far more small ones. Memory per
    /// socket: about `frames` x `slot_bytes` (V2) or `frames` x 2 KiB (V3). At least one block.
    /// A V2 ring whose frames do not fill whole blocks is made of [`SMALL_BLOCK_BYTES`]
    /// blocks instead (64 slots of 2 KiB each; slots that divide 128 KiB), so a small ring costs about what it holds, not
    /// whole 1 MiB blocks. (The kernel allocates each block as a power-of-two run of pages, so
    /// blocks stay powers of two.)
    pub fn with_ring_frames(mut self, frames: u32) -> AfPacketConfig {
        if self.ring == RingVersion::V2
            && self.slot_bytes != 0
            && SMALL_BLOCK_BYTES % self.slot_bytes == 0
            && self.block_bytes > SMALL_BLOCK_BYTES
            && frames % (self.block_bytes / self.slot_bytes.max(1)).max(1) != 0
        {
            self.block_bytes = SMALL_BLOCK_BYTES;
        }
        let per_block = match self.ring {
            RingVersion::V2 => (self.block_bytes / self.slot_bytes.max(1)).max(1),
            RingVersion::V3 => (self.block_bytes / V2_SLOT_BYTES).max(1),
        };
        self.block_count = frames.div_ceil(per_block).max(1);
        self
    }

    /// Frames the ring holds for sure: V2 slots; for V3, frames of up to 1972 bytes.
    pub fn ring_frames(&self) -> u32 {
        match self.ring {
            RingVersion::V2 => self.block_bytes / self.slot_bytes.max(1) * self.block_count,
            RingVersion::V3 => self.block_bytes / V2_SLOT_BYTES * self.block_count,
        }
    }

    /// Bytes of ring memory per socket (`block_bytes` x `block_count`).
    pub fn ring_bytes(&self) -> u64 {
        u64::from(self.block_bytes) * u64::from(self.block_count)
    }
}

/// Default bytes per V2 ring slot: frames up to 2048 - [`V2_SLOT_OVERHEAD`] = 1972 bytes
/// stay in the ring.
pub const V2_SLOT_BYTES: u32 = 2048;

/// A V2 slot big enough for a 64 KB super-frame with tags, virtio-net header and the frame
/// header (the slot of every V2 ring before docs/decisions.md 20).
pub const V2_SUPER_SLOT_BYTES: u32 = 65_536 + 512;

/// Bytes of a V2 slot before the frame: `tpacket2_hdr` and `sockaddr_ll` (52, aligned to 16
/// with the kernel's 16-byte minimum MAC room: 80), then the 10-byte virtio-net header, less
/// the 14-byte Ethernet header the kernel counts inside that room.
pub const V2_SLOT_OVERHEAD: u32 = 76;

/// The block size of a V2 ring smaller than one default block (1 MiB): 128 KiB, the smallest
/// block [`AfPacketPort::open`] takes (64 slots of 2 KiB).
pub const SMALL_BLOCK_BYTES: u32 = 128 * 1024;

/// Default ring size in frames (V2 slots): 8192, 16 MiB per socket with 2 KiB slots. A
/// 64-byte flood at 1 Mframe/s fills it in 8 ms; the old 64.5 KiB slots held 480 frames in
/// 32 MiB.
pub const DEFAULT_RING_FRAMES: u32 = 8192;

/// Receive buffer asked for (`SO_RCVBUFFORCE`, else `SO_RCVBUF` up to `rmem_max`) so frames
/// longer than a V2 slot can wait in the socket queue: about 480 64 KB super-frames, what the
/// ring of 64.5 KiB slots held before (memory is taken only while frames wait). With 4 MiB
/// (60 super-frames) 16 TCP streams through one port overflowed it (measured: 53 566
/// retransmits in 3 s, `scripts/bench-live.sh`, qb-plain).
const COPY_QUEUE_BYTES: libc::c_int = 32 << 20;

/// Refreshes ([`AfPacketPort::refresh_offloads`], once a second in the daemon) during which a
/// tag depth whose super-frame the kernel refused stays marked in
/// [`DeviceOffloads::refused_tags`]; then the direct path is tried again, so a feature change
/// or a passing drop by a veth's busy peer (also `ENOBUFS`) does not pin that depth to
/// software segmentation for good.
pub const REFUSAL_TICKS: u8 = 10;

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

/// Per burst: how frames for other hosts (`PACKET_OTHERHOST`) are judged.
enum Otherhost<'a> {
    /// Promiscuous: take them all.
    TakeAll,
    /// The port's own [`AfPacketConfig::unicast`] (no shared filter).
    Config,
    /// The shared filter's set, read-locked at the first such frame of the burst.
    Shared {
        handle: &'a RxFilterHandle,
        set: Option<RwLockReadGuard<'a, HashSet<u64>>>,
    },
}

impl<'a> Otherhost<'a> {
    fn for_burst(promisc: bool, filter: Option<&'a RxFilterHandle>) -> Otherhost<'a> {
        match filter {
            Some(h) if h.promisc() => Otherhost::TakeAll,
            Some(h) => Otherhost::Shared {
                handle: h,
                set: None,
            },
            None if promisc => Otherhost::TakeAll,
            None => Otherhost::Config,
        }
    }

    fn accepts(&mut self, dst: Option<[u8; 6]>, config: &[[u8; 6]]) -> bool {
        let Some(dst) = dst else { return false };
        match self {
            Otherhost::TakeAll => true,
            Otherhost::Config => config.contains(&dst),
            Otherhost::Shared { handle, set } => set
                .get_or_insert_with(|| handle.read_set())
                .contains(&mac_key(dst)),
        }
    }
}

/// The mmap'ed receive ring (V3 blocks or V2 slots).
#[derive(Debug)]
struct RxRing {
    version: RingVersion,
    layout: PktLayout,
    base: NonNull<u8>,
    len: usize,
    block_bytes: usize,
    block_count: usize,
    /// V2: slot size, slots per block, total slots, and the next slot to read.
    slot_bytes: usize,
    slots_per_block: usize,
    slot_count: usize,
    slot: usize,
    /// V3: block being read, and where in it.
    block: usize,
    pkts_left: u32,
    pkt_off: usize,
    reading: bool,
}

// SAFETY: the mapping is owned by exactly one `RxRing` and only touched through `&mut self`;
// moving it to another thread moves that exclusive access with it.
unsafe impl Send for RxRing {}

impl RxRing {
    fn block_ptr(&self, block: usize) -> *mut u8 {
        debug_assert!(block < self.block_count);
        // SAFETY: `block * block_bytes < len`, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(block * self.block_bytes) }
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.slot_count);
        let (b, i) = (slot / self.slots_per_block, slot % self.slots_per_block);
        // SAFETY: `i * slot_bytes + slot_bytes <= block_bytes`, so the slot is inside block `b`.
        unsafe { self.block_ptr(b).add(i * self.slot_bytes) }
    }

    /// Whether the `n` bytes at `at` lie inside the mapping. The ring's own offsets (status
    /// words) are inside by construction; offsets the kernel writes into the ring (`tp_mac`,
    /// `tp_snaplen`, V3's next-frame offset) are checked here before anything is read.
    fn inside(&self, at: *const u8, n: usize) -> bool {
        let off = (at as usize).wrapping_sub(self.base.as_ptr() as usize);
        off <= self.len && n <= self.len - off
    }

    /// A status word shared with the kernel, at `at` (4-byte aligned, inside the mapping).
    fn status_word(&self, at: *mut u8) -> &AtomicU32 {
        // Only the ring's own offsets come here (block and slot headers), never kernel data.
        assert!(
            self.inside(at, 4) && (at as usize) % 4 == 0,
            "ring status word outside the mapping"
        );
        // SAFETY: `at` is a 4-byte aligned u32 inside the mapping (checked above); it is shared
        // with the kernel, hence atomic; the mapping outlives the reference (tied to `&self`).
        unsafe { &*(at as *const AtomicU32) }
    }

    fn block_status(&self, block: usize) -> &AtomicU32 {
        self.status_word(self.block_ptr(block).wrapping_add(field::BLK_STATUS))
    }

    /// The u32 at `at`; 0 if those bytes are not inside the mapping.
    fn read_u32(&self, at: *const u8) -> u32 {
        if !self.inside(at, 4) {
            return 0;
        }
        // SAFETY: the 4 bytes are inside the mapping (checked above), which lives as long as
        // `&self`; the read is unaligned-safe. Callers read only blocks or slots the kernel has
        // handed to user space (status TP_STATUS_USER, acquired).
        unsafe { std::ptr::read_unaligned(at as *const u32) }
    }

    /// `tp_vlan_tci`: a u32 in V3's header, a u16 in V2's.
    fn read_tci(&self, at: *const u8) -> u16 {
        match self.version {
            RingVersion::V3 => self.read_u32(at) as u16,
            RingVersion::V2 => self.read_u16(at),
        }
    }

    /// The u16 at `at`; 0 if those bytes are not inside the mapping.
    fn read_u16(&self, at: *const u8) -> u16 {
        if !self.inside(at, 2) {
            return 0;
        }
        // SAFETY: as for `read_u32`: 2 bytes inside the mapping, checked above.
        unsafe { std::ptr::read_unaligned(at as *const u16) }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `open`, unmapped once, here.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Scratch arrays for `sendmmsg`, kept between bursts so transmit does not allocate. They hold
/// pointers only during one `tx_burst` call.
#[derive(Default)]
struct TxScratch {
    hdrs: Vec<[u8; VNET_HDR_LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
    /// Per frame of the burst: 0 sent, else the errno its send failed with.
    errnos: Vec<i32>,
}

impl std::fmt::Debug for TxScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxScratch")
            .field("capacity", &self.msgs.capacity())
            .finish()
    }
}

// SAFETY: the raw pointers in `iovs`/`msgs` are only meaningful inside one `tx_burst` call,
// which cleared and rebuilt them from buffers it borrows; between calls they are dead values.
unsafe impl Send for TxScratch {}

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
        let slots_per_block = (cfg.block_bytes / cfg.slot_bytes.max(1)) as usize;
        match cfg.ring {
            RingVersion::V3 => {
                opt(
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    TPACKET_V3,
                    "PACKET_VERSION",
                )?;
                let req = libc::tpacket_req3 {
                    tp_block_size: cfg.block_bytes,
                    tp_block_nr: cfg.block_count,
                    tp_frame_size: 2048,
                    tp_frame_nr: cfg.block_bytes / 2048 * cfg.block_count,
                    tp_retire_blk_tov: cfg.block_timeout_ms,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                sys::setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| sys::sys_err("PACKET_RX_RING", &name, e))?;
            }
            RingVersion::V2 => {
                opt(
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    TPACKET_V2,
                    "PACKET_VERSION",
                )?;
                let req = libc::tpacket_req {
                    tp_block_size: cfg.block_bytes,
                    tp_block_nr: cfg.block_count,
                    tp_frame_size: cfg.slot_bytes,
                    tp_frame_nr: slots_per_block as u32 * cfg.block_count,
                };
                sys::setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| sys::sys_err("PACKET_RX_RING", &name, e))?;
                // Frames longer than a slot: queued whole on the socket too (any non-zero
                // threshold turns it on), with room for them in the receive buffer.
                opt(
                    libc::SOL_PACKET,
                    PACKET_COPY_THRESH,
                    1,
                    "PACKET_COPY_THRESH",
                )?;
                if sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, COPY_QUEUE_BYTES)
                    .is_err()
                {
                    // Without CAP_NET_ADMIN: as much as rmem_max allows.
                    let _ =
                        sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUF, COPY_QUEUE_BYTES);
                }
            }
        }
        let len = cfg.block_bytes as usize * cfg.block_count as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket; no existing memory
        // is affected, and the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                s,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno_err("mmap(rx ring)", &name));
        }
        let ring = RxRing {
            version: cfg.ring,
            layout: match cfg.ring {
                RingVersion::V3 => V3_LAYOUT,
                RingVersion::V2 => V2_LAYOUT,
            },
            slot_bytes: cfg.slot_bytes as usize,
            slots_per_block,
            slot_count: slots_per_block * cfg.block_count as usize,
            slot: 0,
            base: NonNull::new(p.cast())
                .ok_or_else(|| IoError::Invalid("mmap returned NULL".into()))?,
            len,
            block_bytes: cfg.block_bytes as usize,
            block_count: cfg.block_count as usize,
            block: 0,
            pkts_left: 0,
            pkt_off: 0,
            reading: false,
        };
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
        sll.sll_protocol = if cfg.rx == RxMode::None {
            0
        } else {
            ETH_P_ALL.to_be()
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

    /// One `sendmmsg` pass over `batch` (more calls only after a frame fails), then every
    /// frame settled by its result (see [`settle`]). A frame that fails does not stop the
    /// ones after it, except `EAGAIN` (the socket buffer is full: the rest would fail the
    /// same way) and a link error.
    fn send(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: Option<&mut Batch>,
    ) -> Result<TxReport, IoError> {
        let n = batch.len();
        if n == 0 {
            return Ok(TxReport::default());
        }
        let vnet = self.cfg.vnet_hdr;
        let tx = &mut self.tx;
        tx.hdrs.clear();
        tx.iovs.clear();
        tx.msgs.clear();
        tx.errnos.clear();
        tx.errnos.resize(n, 0);
        for p in batch.iter() {
            tx.hdrs.push(meta_to_vnet(&p.offload));
        }
        for (p, h) in batch.iter().zip(&tx.hdrs) {
            let hdr_iov = libc::iovec {
                iov_base: h.as_ptr() as *mut _,
                iov_len: VNET_HDR_LEN,
            };
            let frame = p.frame();
            let frame_iov = libc::iovec {
                iov_base: frame.as_ptr() as *mut _,
                iov_len: frame.len(),
            };
            tx.iovs.push(if vnet {
                [hdr_iov, frame_iov]
            } else {
                [frame_iov, frame_iov]
            });
        }
        for iov in tx.iovs.iter_mut() {
            // SAFETY: msghdr is plain old data; all-zero is a valid (empty) value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = if vnet { 2 } else { 1 };
            tx.msgs.push(m);
        }
        let fd = self.fd.as_raw_fd();
        let mut i = 0;
        let mut link_err = None;
        while i < n {
            // SAFETY: `msgs[i..]` are initialised mmsghdrs whose iovecs point into `hdrs` and
            // into the frames of `batch`, all alive and unmoved until this loop ends; the
            // kernel only reads them (and writes `msg_len`).
            let rc = unsafe {
                libc::sendmmsg(fd, tx.msgs.as_mut_ptr().add(i), (n - i) as libc::c_uint, 0)
            };
            if rc > 0 {
                i += rc as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            if code == libc::EINTR {
                continue;
            }
            if code == libc::EAGAIN || sys::is_link_errno(&e) {
                tx.errnos[i..].fill(code);
                if code != libc::EAGAIN {
                    link_err = Some(e);
                }
                break;
            }
            // ENOBUFS, EMSGSIZE, EINVAL, ...: this frame only; go on with the next.
            tx.errnos[i] = code;
            i += 1;
        }
        tx.msgs.clear();
        tx.iovs.clear();
        // Only a qdisc-bypass socket's ENOBUFS on a super-frame means "segment it yourself";
        // through the qdisc the kernel segments, and ENOBUFS is a drop.
        let bypass = self.cfg.qdisc_bypass && vnet;
        let report = settle(
            batch,
            &tx.errnos,
            pool,
            bypass.then_some(&mut self.refused_ticks),
            refused,
        );
        if report.refused > 0 || (bypass && self.refused_mask() != self.offloads.refused_tags) {
            self.update_caps();
        }
        match link_err {
            Some(source) => Err(IoError::LinkDown {
                ifname: self.cfg.ifname.clone(),
                source,
            }),
            None => Ok(report),
        }
    }

    /// Returns the current block to the kernel and moves to the next.
    fn release_block(&mut self) {
        self.ring
            .block_status(self.ring.block)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.ring.block = (self.ring.block + 1) % self.ring.block_count;
        self.ring.reading = false;
        self.ring.pkts_left = 0;
    }

    /// Copies the frame whose `tpacket3_hdr` starts at `pkt` (inside the current block) into
    /// a pooled buffer; `None` when the frame is skipped (counted).
    fn take_frame(
        &mut self,
        pkt: *const u8,
        room: usize,
        pool: &mut BufPool,
        otherhost: &mut Otherhost<'_>,
    ) -> Option<PacketBuf> {
        let r = &self.ring;
        // Offsets are ABI offsets within the packet header, which the kernel places inside the
        // block; `room` bounds the frame. (Pointer arithmetic only; reads are checked below.)
        let at = |off: usize| pkt.wrapping_add(off);
        if room < r.layout.hdr_min {
            self.stats.rx_truncated += 1;
            return None;
        }
        // SAFETY: see `at`; one byte inside the header.
        let pkttype = unsafe { *at(r.layout.pkttype) };
        if pkttype == PACKET_OUTGOING {
            self.stats.rx_outgoing_skipped += 1;
            return None;
        }
        if pkttype == PACKET_OTHERHOST && !matches!(otherhost, Otherhost::TakeAll) {
            // SAFETY: the header is in the block; the destination MAC is the frame's first 6
            // bytes, inside the frame when the kernel's snap length covers them.
            let dst = unsafe {
                let mac = r.read_u16(at(r.layout.mac)) as usize;
                let snap = r.read_u32(at(r.layout.snaplen)) as usize;
                (snap >= 6 && mac + 6 <= room)
                    .then(|| std::ptr::read_unaligned(at(mac) as *const [u8; 6]))
            };
            if !otherhost.accepts(dst, &self.cfg.unicast) {
                self.stats.rx_otherhost_filtered += 1;
                return None;
            }
        }
        let snaplen = r.read_u32(at(r.layout.snaplen)) as usize;
        let wire_len = r.read_u32(at(r.layout.len)) as usize;
        let status = r.read_u32(at(r.layout.status));
        let mac = r.read_u16(at(r.layout.mac)) as usize;
        let vnet_len = if self.cfg.vnet_hdr { VNET_HDR_LEN } else { 0 };
        let copied = r.version == RingVersion::V2 && status & TP_STATUS_COPY != 0;
        let mut p = if copied {
            // The slot holds the head of a frame longer than a slot; the whole frame (the
            // outer tag still in the slot's header) is next in the socket queue, which holds
            // nothing else: one skb per TP_STATUS_COPY slot, in ring order.
            let Some(p) = recv_queued(
                self.fd.as_raw_fd(),
                &mut self.copy_buf,
                vnet_len,
                wire_len,
                pool,
            ) else {
                self.stats.rx_truncated += 1;
                return None;
            };
            self.stats.rx_copied += 1;
            p
        } else {
            if snaplen < wire_len && r.version == RingVersion::V2 && mac + snaplen <= room {
                // Longer than a slot, and the kernel did not queue it whole (no
                // TP_STATUS_COPY): the socket's receive queue was full. The kernel dropped the
                // frame because this port did not keep up, as when the ring is full.
                self.stats.rx_copy_queue_full += 1;
                return None;
            }
            if snaplen < wire_len || mac < vnet_len || mac + snaplen > room {
                self.stats.rx_truncated += 1;
                return None;
            }
            // SAFETY: `mac - vnet_len .. mac + snaplen` lies inside the block (checked against
            // `room` above) and the kernel does not write a block while it is TP_STATUS_USER.
            let (vnet, data) = unsafe {
                (
                    std::slice::from_raw_parts(at(mac - vnet_len), vnet_len),
                    std::slice::from_raw_parts(at(mac), snaplen),
                )
            };
            let mut p = pool.take();
            // The copy first: `set_frame` resets the metadata.
            p.set_frame(data);
            if vnet_len != 0 {
                p.offload = vnet_to_meta(vnet);
            }
            p
        };
        p.time_ns = u64::from(r.read_u32(at(r.layout.sec))) * 1_000_000_000
            + u64::from(r.read_u32(at(r.layout.nsec)));
        if self.cfg.rx == RxMode::Upcall {
            // The accelerated tag is the ingress port (the fast path's upcall); the frame's
            // own tags are inline.
            p.port = if status & TP_STATUS_VLAN_VALID != 0 {
                r.read_tci(at(r.layout.vlan_tci))
            } else {
                UPCALL_NO_PORT
            };
        } else if status & TP_STATUS_VLAN_VALID != 0 && p.len() >= 12 {
            let tci = r.read_tci(at(r.layout.vlan_tci));
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                r.read_u16(at(r.layout.vlan_tpid))
            } else {
                TPID_8021Q
            };
            // One copy out of the ring, then the tag goes back into the headroom: the 12
            // address bytes move, the frame body does not (no zero-fill either).
            let [t0, t1] = tpid.to_be_bytes();
            let [c0, c1] = tci.to_be_bytes();
            p.insert_tag(12, [t0, t1, c0, c1]);
            p.offload.shift_headers(4);
            self.stats.rx_vlan_restored += 1;
        }
        Some(p)
    }

    /// Walks V3 blocks: frames of a block the kernel handed over, the block returned once read.
    fn rx_v3(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
        otherhost: &mut Otherhost<'_>,
    ) -> usize {
        let mut n = 0;
        while n < max {
            if !self.ring.reading {
                let status = self
                    .ring
                    .block_status(self.ring.block)
                    .load(Ordering::Acquire);
                if status & TP_STATUS_USER == 0 {
                    break;
                }
                let b = self.ring.block_ptr(self.ring.block);
                // SAFETY: header fields at fixed offsets of a block we now own.
                let (num, first) = unsafe {
                    (
                        self.ring.read_u32(b.add(field::BLK_NUM_PKTS)),
                        self.ring.read_u32(b.add(field::BLK_FIRST_PKT)) as usize,
                    )
                };
                self.ring.reading = true;
                self.ring.pkts_left = num;
                self.ring.pkt_off = first;
                if num == 0 || first >= self.ring.block_bytes {
                    self.release_block();
                    continue;
                }
            }
            let off = self.ring.pkt_off;
            let room = self.ring.block_bytes - off;
            // SAFETY: `off < block_bytes`, checked when it was set.
            let pkt = unsafe { self.ring.block_ptr(self.ring.block).add(off) };
            let next = if room >= 4 {
                self.ring.read_u32(pkt.wrapping_add(field::V3_NEXT)) as usize
            } else {
                0
            };
            if let Some(p) = self.take_frame(pkt, room, pool, otherhost) {
                batch.push(p);
                n += 1;
            }
            self.ring.pkts_left -= 1;
            if self.ring.pkts_left == 0 || next == 0 || off + next >= self.ring.block_bytes {
                self.release_block();
            } else {
                self.ring.pkt_off = off + next;
            }
        }
        n
    }

    /// Walks V2 slots: each slot is handed over, read and returned on its own.
    fn rx_v2(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
        otherhost: &mut Otherhost<'_>,
    ) -> usize {
        let mut n = 0;
        while n < max {
            let pkt = self.ring.slot_ptr(self.ring.slot);
            let status_at = pkt.wrapping_add(field::V2_STATUS);
            if self.ring.status_word(status_at).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            if let Some(p) = self.take_frame(pkt, self.ring.slot_bytes, pool, otherhost) {
                batch.push(p);
                n += 1;
            }
            self.ring
                .status_word(status_at)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.ring.slot = (self.ring.slot + 1) % self.ring.slot_count;
        }
        n
    }
}

/// Drains a sent batch: frame `i` was sent when `errnos[i]` is 0, else its send failed with
/// that errno. Every buffer goes back to `pool`, except refused super-frames (below), and
/// every frame is counted once in the report.
///
/// `refusals` is given for a qdisc-bypass socket with virtio-net headers: there `ENOBUFS` on
/// a super-frame is the kernel refusing to segment it in software, so its tag depth is marked
/// for [`REFUSAL_TICKS`] refreshes, and the frame moves to `refused` when the caller takes
/// refused frames back (else it is counted as dropped by the kernel). `ENOBUFS` on any other
/// frame is a drop by the device or its peer.
fn settle(
    batch: &mut Batch,
    errnos: &[i32],
    pool: &mut BufPool,
    mut refusals: Option<&mut [u8; 8]>,
    refused: Option<&mut Batch>,
) -> TxReport {
    let mut r = TxReport::default();
    let code = |i: usize| errnos.get(i).copied().unwrap_or(libc::EIO);
    let takes_refused = refusals.is_some() && refused.is_some();
    for (i, p) in batch.iter().enumerate() {
        match code(i) {
            0 => r.sent += 1,
            libc::EAGAIN => r.queue_full += 1,
            libc::ENOBUFS if p.offload.is_gso() && refusals.is_some() => {
                if let Some(ticks) = refusals.as_deref_mut() {
                    ticks[kernel_tag_depth(p.frame()).min(7)] = REFUSAL_TICKS;
                }
                if takes_refused {
                    r.refused += 1;
                } else {
                    r.kernel_drop += 1;
                }
            }
            libc::ENOBUFS => r.kernel_drop += 1,
            libc::EMSGSIZE => r.too_long += 1,
            _ => r.error += 1,
        }
    }
    match refused {
        // Refused super-frames move to the caller, in order; every other buffer goes back.
        Some(out) if r.refused > 0 => {
            for (i, p) in batch.drain().enumerate() {
                if code(i) == libc::ENOBUFS && p.offload.is_gso() {
                    out.push(p);
                } else {
                    pool.put(p);
                }
            }
        }
        _ => pool.put_all(batch),
    }
    r
}

/// `struct virtio_net_hdr` (10 bytes, little-endian fields) to [`OffloadMeta`], through the one
/// codec of the project (`qbridge_offload::read_vnet_header`, the one the fuzz targets and the
/// offload tests exercise). `h` is at least [`VNET_HDR_LEN`] bytes wherever it is called (a
/// ring slot's header, a TAP read checked for length); a shorter one reads as no metadata.
pub fn vnet_to_meta(h: &[u8]) -> OffloadMeta {
    match qbridge_offload::read_vnet_header(h, HeaderKind::Legacy) {
        Ok((m, _)) => m,
        Err(_) => {
            debug_assert!(false, "virtio-net header of {} bytes", h.len());
            OffloadMeta::default()
        }
    }
}

/// [`OffloadMeta`] to `struct virtio_net_hdr`, through the same codec
/// (`qbridge_offload::write_vnet_header`).
pub fn meta_to_vnet(m: &OffloadMeta) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    // Cannot fail: the buffer is exactly the legacy header's length.
    let _ = qbridge_offload::write_vnet_header(m, HeaderKind::Legacy, &mut h);
    h
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
    use qbridge_wire::virtio::GsoType;

    /// Small rings in 128 KiB blocks, whole 1 MiB blocks kept where they fill; V3 untouched.
    #[test]
    fn ring_sizes_follow_the_frames_asked_for() {
        let v2 = |n| AfPacketConfig::new("x").with_ring_frames(n);
        let c = v2(64);
        assert_eq!((c.ring_frames(), c.ring_bytes()), (64, 128 << 10));
        let c = v2(655);
        assert_eq!((c.ring_frames(), c.ring_bytes()), (704, 11 * (128 << 10)));
        let c = v2(8192);
        assert_eq!(
            (c.block_bytes, c.ring_frames(), c.ring_bytes()),
            (1 << 20, 8192, 16 << 20)
        );
        let c = v2(1024);
        assert_eq!((c.block_bytes, c.ring_bytes()), (1 << 20, 2 << 20));
        let mut big = AfPacketConfig::new("x");
        big.slot_bytes = V2_SUPER_SLOT_BYTES;
        let c = big.with_ring_frames(10);
        assert_eq!(
            c.block_bytes,
            1 << 20,
            "a 64.5 KiB slot keeps its big blocks"
        );
        let mut v3 = AfPacketConfig::new("x");
        v3.ring = RingVersion::V3;
        let c = v3.with_ring_frames(64);
        assert_eq!(c.ring_bytes(), 1 << 20, "V3 blocks must hold a super-frame");
    }

    #[test]
    fn vnet_header_round_trip() {
        let m = OffloadMeta {
            flags: 1,
            gso_type: 4,
            hdr_len: 0x1234,
            gso_size: 1448,
            csum_start: 58,
            csum_offset: 16,
        };
        let h = meta_to_vnet(&m);
        assert_eq!(h, [1, 4, 0x34, 0x12, 0xa8, 0x05, 58, 0, 16, 0]);
        assert_eq!(vnet_to_meta(&h), m);
    }

    fn gso_frame(tags: &[u16]) -> PacketBuf {
        let mut f = vec![0u8; 12];
        for t in tags {
            f.extend(t.to_be_bytes());
            f.extend([0, 7]);
        }
        f.extend([0x08, 0x00]);
        f.resize(f.len() + 3000, 0);
        let mut p = PacketBuf::from_frame(&f);
        p.offload.gso_type = GsoType::TcpV4.raw();
        p.offload.gso_size = 1448;
        p
    }

    /// The seam between the syscall and the accounting: ENOBUFS on a super-frame of a
    /// qdisc-bypass socket hands the frame back and marks its depth; on a plain frame, or
    /// without bypass, it is a drop; nothing stops the frames after it.
    #[test]
    fn settle_hands_back_refused_super_frames() {
        let mut pool = BufPool::new(16);
        let make = || {
            let mut b = Batch::default();
            b.push(gso_frame(&[0x88a8, 0x8100]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b.push(gso_frame(&[0x8100]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b
        };
        let errnos = [
            libc::ENOBUFS,
            libc::ENOBUFS,
            0,
            libc::EMSGSIZE,
            libc::EAGAIN,
        ];
        let mut ticks = [0u8; 8];
        let mut refused = Batch::default();
        let mut batch = make();
        let r = settle(
            &mut batch,
            &errnos,
            &mut pool,
            Some(&mut ticks),
            Some(&mut refused),
        );
        assert_eq!(
            r,
            TxReport {
                sent: 1,
                queue_full: 1,
                kernel_drop: 1,
                too_long: 1,
                error: 0,
                refused: 1,
            }
        );
        assert!(batch.is_empty());
        assert_eq!(refused.len(), 1);
        assert_eq!(kernel_tag_depth(refused.pkts[0].frame()), 2);
        assert_eq!(ticks, [0, 0, REFUSAL_TICKS, 0, 0, 0, 0, 0]);
        assert_eq!(r.outcome().total(), 5);

        // A caller that takes nothing back (plain tx_burst): counted as a kernel drop, depth
        // still remembered.
        let mut ticks = [0u8; 8];
        let mut batch = make();
        let r = settle(&mut batch, &errnos, &mut pool, Some(&mut ticks), None);
        assert_eq!((r.refused, r.kernel_drop), (0, 2));
        assert_eq!(ticks[2], REFUSAL_TICKS);

        // Without qdisc bypass the kernel segments itself: ENOBUFS is a drop.
        let mut batch = make();
        let mut refused = Batch::default();
        let r = settle(&mut batch, &errnos, &mut pool, None, Some(&mut refused));
        assert_eq!((r.refused, r.kernel_drop), (0, 2));
        assert!(refused.is_empty());
    }

    #[test]
    fn missing_interface_is_reported() {
        let e = AfPacketPort::open(AfPacketConfig::new("qbnoexist0")).unwrap_err();
        assert!(matches!(e, IoError::NoSuchInterface { .. }), "{e}");
    }
}
