//! What the stages of the bridge pipeline share: the frame's metadata (what the ingress stages
//! decided about one frame, [`FrameMeta`], 32 bytes, one per frame in the worker's array) and
//! the destination markers, how a stage marks a frame dropped (counted on the spot), the
//! per-run counter tallies, and the frame readings more than one stage makes (its length on
//! the wire, a tunnel port's customer VID, a two-tag map's change to the C-tag).

use crate::cells::{PortCells, VlanCounterSet};
use crate::counters::DropReason;
use crate::plan::PortRecord;
use crate::tagmap::InnerTag;
use qbridge_packet::PacketBuf;
use qbridge_wire::frame;
use std::sync::Arc;

pub(super) type Ports = [Option<Arc<PortRecord>>];

/// FDB key of a 48-bit MAC in FID `fid` (see `fdb::fdb_key`).
#[inline(always)]
pub(super) fn fid_key(mac: u64, fid: u16) -> u64 {
    mac | ((fid as u64 & 0x7fff) << 48)
}

/// [`FrameMeta::dest`] of a frame that was dropped (and counted).
pub(super) const DEST_DROP: u16 = u16::MAX;
/// [`FrameMeta::dest`] of a frame to flood (class in [`FrameMeta::flood`]).
pub(super) const DEST_FLOOD: u16 = u16::MAX - 1;
/// Not a [`FrameMeta::dest`]: the frames of a run or batch do not all share one destination.
pub(super) const DEST_MIXED: u16 = u16::MAX - 2;
/// [`FrameMeta::dest`] after stage 1 of a frame from a port in spanning-tree state Learning in
/// its VLAN: stage 3 learns its source, then drops it (`stp_discarding`). Never left after
/// stage 3.
pub(super) const DEST_LEARN: u16 = u16::MAX - 3;
const _: () = assert!(crate::plan::MAX_PORTS < DEST_LEARN as usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FloodClass {
    Unknown,
    Broadcast,
    Multicast,
}

/// What the ingress stages decided about one frame: the batch's per-frame metadata (VPP's
/// buffer opaque), kept in [`Forwarder`] beside the batch, index for index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameMeta {
    /// Destination MAC as a 48-bit integer.
    pub(super) dst: u64,
    /// Source MAC as a 48-bit integer.
    pub(super) src: u64,
    /// Egress port id, [`DEST_FLOOD`], or [`DEST_DROP`].
    pub(super) dest: u16,
    /// VID; 0 on a VLAN-unaware bridge.
    pub(super) vid: u16,
    /// With `learn_inner_vid`, the FID of (VID, inner C-VID) XOR the VID; 0 otherwise (the
    /// FID is the VID), so that classification need not write it ([`FrameMeta::fid`]).
    pub(super) fid_x: u16,
    /// PCP and DEI bits to keep when the tag is rewritten (0 when untagged).
    pub(super) tci_hi: u16,
    /// Bridge id of the ingress port.
    pub(super) bridge: u16,
    /// The frame carries a bridge tag at offset 12 (tagged or priority-tagged).
    pub(super) tagged: bool,
    /// The bridge filters VLANs (tags are rewritten on egress).
    pub(super) filtering: bool,
    pub(super) flood: FloodClass,
    /// Why the frame was dropped, [`DropReason`] plus one: for the drop watch
    /// ([`Forwarder::dropped`](super::Forwarder::dropped)). Written only where a frame is
    /// dropped (`DEST_DROP`) and, for a flood, when its copies are made (0: the last one left);
    /// stale otherwise, and not read.
    pub(super) why: u8,
}

const _: () = assert!(core::mem::size_of::<FrameMeta>() == 32);

impl FrameMeta {
    /// FID of the frame's FDB keys: its VID, or with `learn_inner_vid` that of (VID, inner
    /// C-VID).
    #[inline(always)]
    pub(crate) fn fid(&self) -> u16 {
        self.vid ^ self.fid_x
    }

    pub(super) const DROPPED: FrameMeta = FrameMeta {
        dst: 0,
        src: 0,
        dest: DEST_DROP,
        vid: 0,
        fid_x: 0,
        tci_hi: 0,
        bridge: 0,
        tagged: false,
        filtering: false,
        flood: FloodClass::Unknown,
        why: 0,
    };
}

/// Marks `m`'s frame dropped for `reason`, counted (only [`FrameMeta::dest`] is read of a
/// dropped frame).
#[inline(always)]
pub(super) fn drop_into(m: &mut FrameMeta, counters: &PortCells, reason: DropReason) {
    mark_drop(m, counters, reason);
}

/// [`drop_into`]'s work, out of line: the frame path carries one call.
#[cold]
#[inline(never)]
fn mark_drop(m: &mut FrameMeta, counters: &PortCells, reason: DropReason) {
    m.dest = DEST_DROP;
    m.why = reason as u8 + 1;
    counters.drop(reason);
}

/// [`drop_into`] for a frame dropped before classification: its VLAN reads 0 (the drop
/// watch's, rather than a previous batch's frame's).
#[cold]
#[inline(never)]
pub(super) fn drop_early(m: &mut FrameMeta, counters: &PortCells, reason: DropReason) {
    m.vid = 0;
    drop_into(m, counters, reason);
}

/// Marks `m`'s frame dropped for the reason counted last on this thread (by the check that
/// just refused it).
#[cold]
#[inline(never)]
pub(super) fn drop_counted(m: &mut FrameMeta) {
    m.dest = DEST_DROP;
    m.why = crate::cells::last_drop();
}

#[cold]
#[inline(never)]
pub(super) fn count_drop(counters: &PortCells, reason: DropReason) {
    counters.drop(reason);
}

#[cold]
#[inline(never)]
pub(super) fn drop_port<'a>(counters: &PortCells, reason: DropReason) -> Option<&'a PortRecord> {
    counters.drop(reason);
    None
}

/// Frames and bytes of a run of frames with one key (a port id, a VID), written to the
/// counters once per run instead of once per frame.
pub(super) struct Tally {
    pub(super) key: usize,
    pub(super) frames: u64,
    pub(super) bytes: u64,
}

impl Tally {
    pub(super) const NONE: usize = usize::MAX;

    pub(super) fn new() -> Tally {
        Tally {
            key: Tally::NONE,
            frames: 0,
            bytes: 0,
        }
    }

    /// Adds a frame of `bytes` under `key`; when the key changes, returns the finished run.
    #[inline(always)]
    pub(super) fn add(&mut self, key: usize, bytes: u64) -> Option<(usize, u64, u64)> {
        if key == self.key {
            self.frames += 1;
            self.bytes += bytes;
            return None;
        }
        let done = self.take();
        *self = Tally {
            key,
            frames: 1,
            bytes,
        };
        done
    }

    /// The run so far, if any; the tally is empty afterwards.
    #[inline(always)]
    pub(super) fn take(&mut self) -> Option<(usize, u64, u64)> {
        let done = (self.key != Tally::NONE).then_some((self.key, self.frames, self.bytes));
        self.key = Tally::NONE;
        done
    }
}

#[inline(always)]
pub(super) fn count_vlan_rx(set: &VlanCounterSet, wi: usize, run: (usize, u64, u64)) {
    let v = set.writer(wi, run.0 as u16);
    v.rx_frames.add(run.1);
    v.rx_bytes.add(run.2);
}

#[inline(always)]
pub(super) fn count_vlan_tx(set: &VlanCounterSet, wi: usize, run: (usize, u64, u64)) {
    let v = set.writer(wi, run.0 as u16);
    v.tx_frames.add(run.1);
    v.tx_bytes.add(run.2);
}

/// The ingress port's learning limit in VLAN `vid` (0: none).
pub(super) fn vlan_limit(inp: &PortRecord, vid: u16) -> u32 {
    inp.vlan_limits
        .as_ref()
        .map_or(0, |t| t[usize::from(vid & 0x0fff)] & 0x00ff_ffff)
}

/// Length the frame has on the wire: its length, or for a GSO super-frame the length of its
/// largest segment — the real headers plus `gso_size`. Headers are read through the
/// well-known TPIDs and the TPID of the port judging (`tpid`) with [`PacketBuf::headers`]:
/// parsed at the first call (ingress), from the recorded layout at each egress. The `hdr_len`
/// a sender puts in the virtio-net header is not trusted: Linux fills it with the length of the
/// skb's linear part, which can include payload.
#[inline(always)]
pub(crate) fn wire_len(pkt: &PacketBuf, tpid: u16) -> usize {
    if pkt.offload.is_gso() {
        gso_segment_len(pkt, tpid)
    } else {
        pkt.len()
    }
}

#[cold]
#[inline(never)]
pub(super) fn gso_segment_len(pkt: &PacketBuf, tpid: u16) -> usize {
    let len = pkt.len();
    match pkt.headers(|t| t.is_well_known() || t.0 == tpid) {
        Ok(h) => match h.payload_offset {
            Some(hdrs) => (hdrs + pkt.offload.gso_size as usize).min(len),
            None => len,
        },
        // Not a parsable TCP/UDP super-frame: judged whole.
        Err(_) => len,
    }
}

/// A `dot1q-tunnel` port's customer VLAN of a frame whose bytes 12..16 are `tag`, `len` bytes
/// long: the VID of its 0x8100 outer tag, 0 when it has none (`cvlans` on ingress and egress).
#[inline(always)]
pub(crate) fn customer_vid(tag: u32, len: usize) -> u16 {
    if (tag >> 16) as u16 == 0x8100 && len >= 18 {
        tag as u16 & 0x0fff
    } else {
        0
    }
}

/// Makes a two-tag map's change to the C-tag behind the outer tag of a frame: removed, or its VID
/// set (PCP and DEI kept).
#[cold]
#[inline(never)]
pub(super) fn apply_inner_tag(op: InnerTag, pkt: &mut PacketBuf) {
    match op {
        InnerTag::Pop => {
            if pkt.remove_tag(frame::tag_offset(1)) {
                pkt.offload.shift_headers(-4);
            }
        }
        InnerTag::Set(c) => {
            frame::set_vid_at(pkt.frame_mut(), 1, c);
        }
        InnerTag::Push(_) => {}
    }
}
