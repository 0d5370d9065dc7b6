//! How an AF_PACKET port attaches: [`AfPacketConfig`] (ring version and size, filters,
//! offloads, fanout), [`RxMode`], [`Fanout`] groups, and the ring-size constants. Plain data
//! and arithmetic: no syscall, no `unsafe`.

use std::sync::Arc;

use crate::rxfilter::RxFilterHandle;

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
    /// Slow Protocols frames only (bound to `ETH_P_SLOW`, 0x8809): a bond member whose other
    /// frames the eBPF fast path receives at TC ingress. A protocol's handler runs after TC
    /// ingress, so the socket gets the LACPDUs and markers the program passes on, and nothing
    /// it forwards or sends up. Its ring is one small block.
    Slow,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
