//! The batch port interface every backend implements.
//!
//! A port moves frames between the outside world and [`Batch`]es of pooled [`PacketBuf`](qbridge_packet::PacketBuf)s.
//! The contract, in the manner of Open vSwitch's `netdev-provider.h`, is about who owns each
//! buffer when:
//!
//! * [`Port::rx_burst`] takes buffers from the caller's [`BufPool`], fills them, and *appends*
//!   them to the caller's batch (frames already in the batch stay untouched). When it returns,
//!   the caller owns every appended buffer. Each buffer holds one whole Ethernet frame with all
//!   its VLAN tags on the wire (a backend whose kernel strips a tag puts it back), its
//!   [`OffloadMeta`](qbridge_packet::OffloadMeta) taken from the virtio-net header when the
//!   port has one (else zero), and `time_ns` the backend's receive timestamp when it has one
//!   (else 0; the caller may overwrite it with its own clock). `port` is left 0: the caller
//!   knows the port's id, the backend does not. On `Err`, nothing was appended.
//! * [`Port::tx_burst`] takes every buffer out of the batch (it is empty on return, whatever
//!   happens) and gives each buffer back to the pool once the frame is sent or dropped. The
//!   caller keeps nothing. [`TxOutcome`] says how many frames were sent and why the others
//!   were dropped, so the caller can count `tx_queue_full` and `tx_error` per port. `Err` means
//!   the port itself failed (see [`IoError::is_link_down`]); the batch is still drained and its
//!   buffers still returned, and the frames count as dropped.
//! * [`Port::tx_burst_report`] is the same with every drop's cause ([`TxReport`]) and one
//!   hand-back: a TCP super-frame the kernel refused whole (it would have had to segment it
//!   in software, which a qdisc-bypass AF_PACKET socket does not do) is moved into the
//!   caller's `refused` batch instead of being dropped; the caller owns it and segments it.
//!
//! Ports are single-threaded objects (`&mut self`); a worker thread owns the ports it polls.
//! No call allocates after warm-up, and a backend makes a bounded number of syscalls per burst
//! (one kick per transmitted batch), never one per frame where the kernel offers better.
//!
//! Besides the bursts, the trait carries what a poll loop needs to drive a port, each with a
//! default for backends that have nothing to say (the in-memory port, pcap files): how to wait
//! for it ([`Port::fd`], or [`Port::rx_pending`] for frames waiting without a descriptor), what
//! the backend dropped before a caller saw a frame ([`Port::drops`], by cause:
//! [`BackendDrops`]), a once-a-second [`Port::tick`] (device offloads re-read, kernel drop
//! statistics), [`Port::start`] for a port opened paused, and closing ([`Port::close`],
//! [`Port::visible_close`]). The datapath engine (`qbridge_datapath`) drives every backend
//! through these alone, boxed as `Box<dyn Port + Send>`: one dynamic call per burst, none per
//! frame.

use qbridge_packet::{Batch, BufPool, OffloadMeta};
use qbridge_wire::virtio::GsoType;
use qbridge_wire::Tpid;
use std::fmt;
#[cfg(unix)]
use std::os::fd::BorrowedFd;

use crate::IoError;

/// What a port can take, for the transmit stage's offload decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCaps {
    /// Frames cross this port with a virtio-net header (offload metadata is honoured on tx and
    /// filled on rx).
    pub vnet_hdr: bool,
    /// Accepts TCP super-frames (GSO) for transmission; without it the caller must segment.
    /// [`PortCaps::device`], when present, narrows this per frame.
    pub tso: bool,
    /// Accepts frames whose checksum is left to do (`NEEDS_CSUM`); without it the caller must
    /// complete checksums.
    pub csum: bool,
    /// Largest frame (without FCS, all tags included) the port can send, not counting GSO
    /// super-frames when `tso` is set (those are judged per segment).
    pub max_frame: usize,
    /// What the device behind the port segments itself, when the backend hands super-frames to
    /// a device that may not (AF_PACKET with `PACKET_QDISC_BYPASS`: the kernel drops a
    /// super-frame it would have to segment in software). `None`: `tso` says it all (TAP,
    /// pcap, in-memory, or an AF_PACKET socket whose kernel segments in its qdisc path).
    pub device: Option<DeviceOffloads>,
}

/// A device's transmit offloads as the kernel reports them (`ethtool -k`: the *active*
/// features), and the tag depths at which the kernel refused super-frames lately.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceOffloads {
    /// `tx-tcp-segmentation`: TCP over IPv4.
    pub tso4: bool,
    /// `tx-tcp6-segmentation`: TCP over IPv6.
    pub tso6: bool,
    /// `tx-tcp-ecn-segmentation`: super-frames with the ECN bit (`GSO_ECN`) set.
    pub tso_ecn: bool,
    /// `tx-scatter-gather` (Linux turns TSO off without it; checked anyway).
    pub sg: bool,
    /// `tx-checksum-ipv4` or `tx-checksum-ip-generic`.
    pub csum4: bool,
    /// `tx-checksum-ipv6` or `tx-checksum-ip-generic`.
    pub csum6: bool,
    /// Bit `n` set: the kernel refused a super-frame with `n` VLAN tags (0x8100/0x88a8, as
    /// [`kernel_tag_depth`] counts them; 7 and more share bit 7) although the features above
    /// allow it, so such frames are segmented by the caller until the bit is cleared again
    /// (the backend retries the direct path after a while). A kernel VXLAN device, for
    /// example, refuses TSO for frames with two tags.
    pub refused_tags: u8,
}

impl DeviceOffloads {
    /// Whether the device segments a super-frame of type `gso` (with the ECN bit `ecn`) with
    /// `depth` tags itself.
    pub fn segments(&self, gso: GsoType, ecn: bool, depth: usize) -> bool {
        let kind = match gso {
            GsoType::TcpV4 => self.tso4,
            GsoType::TcpV6 => self.tso6,
            // Not TCP: the caller cannot segment it either; let the kernel decide.
            _ => return true,
        };
        let ecn = !ecn || self.tso_ecn;
        kind && ecn && self.sg && self.refused_tags & depth_bit(depth) == 0
    }

    /// Whether every TCP super-frame, whatever its kind or tag depth, is taken as it is.
    pub fn segments_all(&self) -> bool {
        self.tso4 && self.tso6 && self.tso_ecn && self.sg && self.refused_tags == 0
    }
}

/// The bit of [`DeviceOffloads::refused_tags`] for `depth` tags.
pub fn depth_bit(depth: usize) -> u8 {
    1 << depth.min(7)
}

/// How many VLAN tags the kernel sees in front of L3: leading whole 0x8100 / 0x88a8 tags (the
/// kernel's `eth_type_vlan`; other TPIDs are payload to it). At most 7 are counted.
pub fn kernel_tag_depth(frame: &[u8]) -> usize {
    let mut n = 0;
    while n < 7 {
        match qbridge_wire::frame::tag_at(frame, n).map(|t| t.tpid) {
            Some(Tpid::DOT1Q | Tpid::DOT1AD) => n += 1,
            _ => break,
        }
    }
    n
}

impl PortCaps {
    /// Whether the super-frame `frame` (with metadata `meta`) may be handed to the port whole;
    /// otherwise the caller segments it. Non-GSO frames: always true.
    pub fn takes_super_frame(&self, frame: &[u8], meta: &OffloadMeta) -> bool {
        if !meta.is_gso() {
            return true;
        }
        if !self.tso {
            return false;
        }
        match &self.device {
            None => true,
            Some(d) => d.segments(meta.gso(), meta.gso_ecn(), kernel_tag_depth(frame)),
        }
    }

    /// Whether every frame can be handed over as it is (no per-frame look needed): TSO for
    /// every kind and depth, and checksum offload.
    pub fn takes_everything(&self) -> bool {
        self.tso
            && self.csum
            && self
                .device
                .as_ref()
                .is_none_or(DeviceOffloads::segments_all)
    }
}

/// What happened to the frames of one [`Port::tx_burst`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct TxOutcome {
    /// Frames handed to the kernel or the medium.
    pub sent: usize,
    /// Frames dropped because the kernel had no room for them: the socket buffer or ring was
    /// full (`EAGAIN`), or the device or its peer dropped them (`ENOBUFS`).
    /// [`Port::tx_burst_report`] tells these apart.
    pub queue_full: usize,
    /// Frames dropped because the kernel refused them (`EMSGSIZE`, `EINVAL`, ...) or the port
    /// could not represent them.
    pub error: usize,
}

impl TxOutcome {
    pub fn dropped(&self) -> usize {
        self.queue_full + self.error
    }

    pub fn total(&self) -> usize {
        self.sent + self.dropped()
    }
}

/// What happened to the frames of one [`Port::tx_burst_report`], by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct TxReport {
    /// Frames handed to the kernel or the medium.
    pub sent: usize,
    /// Dropped: the socket buffer or ring was full (`EAGAIN`).
    pub queue_full: usize,
    /// Dropped: the kernel took the frame and the device (or a veth's peer) dropped it
    /// (`ENOBUFS`), a frame that was not a refused super-frame.
    pub kernel_drop: usize,
    /// Dropped: longer than the device accepts (`EMSGSIZE`).
    pub too_long: usize,
    /// Dropped for another reason (`EINVAL`, a frame the port cannot represent, ...).
    pub error: usize,
    /// Super-frames the kernel refused whole (`ENOBUFS` on a qdisc-bypass socket: it would
    /// have had to segment them in software), moved to the caller's `refused` batch, not
    /// dropped.
    pub refused: usize,
}

impl TxReport {
    /// Frames dropped, all causes.
    pub fn dropped(&self) -> usize {
        self.queue_full + self.kernel_drop + self.too_long + self.error
    }

    /// The same burst as a [`TxOutcome`] (refused super-frames count as dropped by the
    /// kernel, as they are for a caller that does not take them back).
    pub fn outcome(&self) -> TxOutcome {
        TxOutcome {
            sent: self.sent,
            queue_full: self.queue_full + self.kernel_drop + self.refused,
            error: self.too_long + self.error,
        }
    }
}

impl From<TxOutcome> for TxReport {
    /// A backend that does not tell causes apart: `queue_full` stays queue-full, every other
    /// drop is an error.
    fn from(o: TxOutcome) -> TxReport {
        TxReport {
            sent: o.sent,
            queue_full: o.queue_full,
            error: o.error,
            ..TxReport::default()
        }
    }
}

/// A port backend. See the module documentation for buffer ownership.
pub trait Port {
    /// Receives up to `max` frames without blocking, appending them to `batch` with buffers
    /// from `pool`. Returns how many were appended (0 when nothing is waiting).
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError>;

    /// Transmits every frame of `batch` with one kick, draining it and returning every buffer
    /// to `pool`.
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError>;

    /// As [`Port::tx_burst`], with the cause of every drop, and one exception to "every buffer
    /// goes back to the pool": a super-frame the kernel refused whole because the device
    /// would not segment it (see [`TxReport::refused`]) is moved to `refused`, which the
    /// caller owns and is expected to segment and send again. The default, for backends
    /// without such refusals, is `tx_burst` with its outcome converted.
    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        let _ = refused;
        self.tx_burst(batch, pool).map(TxReport::from)
    }

    /// What the port can take.
    fn caps(&self) -> PortCaps;

    /// A name for logs and errors (the interface name for live ports).
    fn name(&self) -> &str;

    /// The descriptor that becomes readable when frames wait (`None`: the port has none, or
    /// the caller does not receive on it).
    #[cfg(unix)]
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Frames that can be received without waiting on a descriptor (pcap input, patch links,
    /// the in-memory port).
    fn rx_pending(&self) -> bool {
        false
    }

    /// What the backend dropped so far, by cause (cumulative since it was opened).
    fn drops(&self) -> BackendDrops {
        BackendDrops::default()
    }

    /// Once a second: re-reads what may change under the port (device offloads, kernel drop
    /// statistics).
    fn tick(&mut self) -> Result<Tick, IoError> {
        Ok(Tick::default())
    }

    /// Called by the thread that takes the port over, before its first burst: a port opened
    /// paused (AF_PACKET sockets replacing others on their interface) starts receiving.
    fn start(&mut self) -> Result<(), IoError> {
        Ok(())
    }

    /// Whether closing changes something others see — a TAP interface goes away, a pcap file
    /// is finished, an XDP program is detached — so that whoever closes it can wait for it.
    /// Sockets: no.
    fn visible_close(&self) -> bool {
        false
    }

    /// Closes the port, reporting what closing can still fail with (a pcap file's flush).
    /// Dropping a port closes it too, without the report.
    fn close(self: Box<Self>) -> Result<(), IoError> {
        Ok(())
    }
}

/// A boxed port in logs and `Debug` output: its name.
impl fmt::Debug for dyn Port + Send + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Port")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// Frames a backend dropped before they reached its caller, cumulative since the port was
/// opened, by cause (each is a switch drop reason of the same name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendDrops {
    /// Longer than the receive slot; cut short (`rx_truncated`).
    pub rx_truncated: u64,
    /// Unicast for another host, delivered by a device that does not filter (`rx_filtered`).
    pub rx_filtered: u64,
    /// A read too short to hold a frame (`rx_short`).
    pub rx_short: u64,
    /// Dropped by the kernel because the receive ring was full (`rx_ring_full`).
    pub rx_ring_full: u64,
    /// VXLAN ports: a datagram that is not VXLAN, or whose inner frame is shorter than an
    /// Ethernet header (`vxlan_malformed`).
    pub vxlan_malformed: u64,
    /// VXLAN ports: a datagram of another VNI (`vxlan_wrong_vni`).
    pub vxlan_wrong_vni: u64,
    /// VXLAN ports: a frame with no remote VTEP to go to (`vxlan_no_remote`).
    pub vxlan_no_remote: u64,
    /// External VXLAN ports: a frame whose VLAN maps to no VNI (`vxlan_unmapped_vlan`).
    pub vxlan_unmapped_vlan: u64,
    /// External VXLAN ports: a datagram whose VNI maps to no VLAN (`vxlan_unmapped_vni`).
    pub vxlan_unmapped_vni: u64,
}

/// What a port's once-a-second [`Port::tick`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// The device's transmit offloads as read now (AF_PACKET), refusals included.
    pub offloads: Option<DeviceOffloads>,
    /// Whether the device's features (refusals aside) changed since the last tick.
    pub offloads_changed: bool,
}

/// Returns every buffer of `batch` to `pool` in one move ([`BufPool::put_all`]); for the
/// transmit paths once every frame is settled, and their error paths.
pub(crate) fn recycle(batch: &mut Batch, pool: &mut BufPool) -> usize {
    let n = batch.len();
    pool.put_all(batch);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_wire::virtio::GSO_ECN;

    fn tagged(tpids: &[u16]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for t in tpids {
            f.extend(t.to_be_bytes());
            f.extend([0, 10]);
        }
        f.extend([0x08, 0x00]);
        f.resize(f.len() + 40, 0);
        f
    }

    #[test]
    fn kernel_tag_depth_counts_8100_and_88a8_only() {
        assert_eq!(kernel_tag_depth(&tagged(&[])), 0);
        assert_eq!(kernel_tag_depth(&tagged(&[0x8100])), 1);
        assert_eq!(kernel_tag_depth(&tagged(&[0x88a8, 0x8100])), 2);
        assert_eq!(kernel_tag_depth(&tagged(&[0x9100, 0x8100])), 0);
        assert_eq!(kernel_tag_depth(&tagged(&[0x8100; 9])), 7);
        assert_eq!(kernel_tag_depth(&[0u8; 13]), 0);
    }

    #[test]
    fn super_frames_follow_device_features_and_refusals() {
        let v4 = OffloadMeta {
            gso_type: GsoType::TcpV4.raw(),
            gso_size: 1448,
            ..OffloadMeta::default()
        };
        let v6 = OffloadMeta {
            gso_type: GsoType::TcpV6.raw(),
            ..v4
        };
        let ecn = OffloadMeta {
            gso_type: GsoType::TcpV4.raw() | GSO_ECN,
            ..v4
        };
        let plain = OffloadMeta::default();
        let one = tagged(&[0x8100]);
        let two = tagged(&[0x88a8, 0x8100]);
        let mut caps = PortCaps {
            vnet_hdr: true,
            tso: true,
            csum: true,
            max_frame: 1518,
            device: None,
        };
        assert!(caps.takes_super_frame(&two, &v4) && caps.takes_everything());
        let all = DeviceOffloads {
            tso4: true,
            tso6: true,
            tso_ecn: true,
            sg: true,
            csum4: true,
            csum6: true,
            refused_tags: 0,
        };
        caps.device = Some(all);
        assert!(caps.takes_everything());
        caps.device = Some(DeviceOffloads { tso6: false, ..all });
        assert!(caps.takes_super_frame(&one, &v4));
        assert!(!caps.takes_super_frame(&one, &v6));
        assert!(caps.takes_super_frame(&one, &plain));
        assert!(!caps.takes_everything());
        caps.device = Some(DeviceOffloads {
            tso_ecn: false,
            ..all
        });
        assert!(!caps.takes_super_frame(&one, &ecn));
        assert!(caps.takes_super_frame(&one, &v4));
        caps.device = Some(DeviceOffloads { sg: false, ..all });
        assert!(!caps.takes_super_frame(&one, &v4));
        caps.device = Some(DeviceOffloads {
            refused_tags: depth_bit(2),
            ..all
        });
        assert!(caps.takes_super_frame(&one, &v4));
        assert!(!caps.takes_super_frame(&two, &v4));
        caps.tso = false;
        caps.device = Some(all);
        assert!(!caps.takes_super_frame(&one, &v4));
    }

    #[test]
    fn report_converts_to_outcome_and_back() {
        let r = TxReport {
            sent: 5,
            queue_full: 1,
            kernel_drop: 2,
            too_long: 3,
            error: 4,
            refused: 6,
        };
        assert_eq!(r.dropped(), 10);
        assert_eq!(
            r.outcome(),
            TxOutcome {
                sent: 5,
                queue_full: 9,
                error: 7
            }
        );
        let o = TxOutcome {
            sent: 1,
            queue_full: 2,
            error: 3,
        };
        assert_eq!(TxReport::from(o).outcome(), o);
    }
}
