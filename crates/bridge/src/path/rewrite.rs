//! The egress tag rewrite of the bridge pipeline: what a frame's bridge tag becomes on an egress
//! port (pop, push, rewrite in place, or kept; VLAN maps out, selective Q-in-Q, two-tag maps,
//! `cvlans` on egress), decided per route ([`route_tag`]) or per frame, and the egress size check
//! (the frame's length on the wire, a GSO super-frame's largest segment).

use super::meta::*;
use crate::counters::DropReason;
use crate::plan::PortRecord;
use crate::tagmap::InnerTag;
use qbridge_packet::PacketBuf;
use qbridge_wire::{frame, Tag, Tci, Tpid};

/// Where a frame to a known unicast destination goes, and what has been sent that way: the key
/// of the FDB entry's port and flags and the frame's VID ([`route_key`]) that last passed the
/// unicast checks, its egress port, and the frames and bytes sent on it since it was taken.
/// The port records do not change within a batch, so a frame with the same key passes the same
/// checks: one compare stands for the entry's tests (locked, permanent, ageing off) and the
/// checks.
pub(super) struct Route<'a> {
    pub(super) key: u64,
    pub(super) port: &'a PortRecord,
    /// What [`rewrite_tag`] does to the bridge tag of the route's frames ([`route_tag`]).
    pub(super) tag: u32,
    pub(super) frames: u64,
    pub(super) bytes: u64,
}

impl Route<'_> {
    /// A key that matches no entry.
    pub(super) const NONE: u64 = u64::MAX;
}

/// [`Route::tag`] for frames that leave as they are (a bridge that does not filter VLANs).
pub(super) const TAG_KEEP: u32 = u32::MAX - 2;
/// [`Route::tag`] for frames that leave untagged (the bridge tag popped if they carry one).
pub(super) const TAG_POP: u32 = u32::MAX - 1;
/// [`Route::tag`] for frames whose tag is decided frame by frame (selective Q-in-Q and 2:1/2:2
/// maps on the egress port look at each frame's C-tag): the whole of [`rewrite_tag`].
pub(super) const TAG_FRAME: u32 = u32::MAX;

/// [`Route::tag`] of the frames in VLAN `vid` to port `ep`, as [`rewrite_tag`] decides: a tag word
/// (the port's TPID << 16 | the wire VID; PCP and DEI clear, so below every marker) when they
/// leave tagged, else [`TAG_KEEP`], [`TAG_POP`] or [`TAG_FRAME`].
#[inline(always)]
pub(super) fn route_tag(ep: &PortRecord, vid: u16, filtering: bool) -> u32 {
    if !filtering {
        TAG_KEEP
    } else if ep.cvid_in.is_some() || ep.tag2.is_some() || ep.cvlans.is_some() {
        TAG_FRAME
    } else if ep.untagged.contains(vid) {
        TAG_POP
    } else {
        let vid = match &ep.vid_out {
            None => vid,
            Some(t) => vid_out(t, vid),
        };
        (ep.tpid as u32) << 16 | (vid & 0x0fff) as u32
    }
}

/// Selective Q-in-Q on egress port `ep`: whether the frame's inner C-tag (behind the bridge
/// tag, or outermost when the frame entered untagged to the bridge) has a VID `ep` maps to the
/// frame's VLAN, so that it leaves without the bridge tag.
#[cold]
#[inline(never)]
pub(super) fn cvid_untags(ep: &PortRecord, m: &FrameMeta, pkt: &PacketBuf) -> bool {
    let Some(t) = ep.cvid_in.as_ref() else {
        return false;
    };
    match frame::vid_at(pkt.frame(), m.tagged as usize, Tpid::DOT1Q) {
        Some(cvid) => t[usize::from(cvid)] == m.vid,
        None => false,
    }
}

/// Two-tag maps on egress port `ep` for a frame leaving tagged: a 2:2 map of the frame's VLAN
/// and its C-tag (behind the bridge tag, or outermost when the frame is untagged to the
/// bridge) rewrites the C-tag's VID, a 2:1 map of the VLAN pushes a C-tag behind the bridge
/// tag (PCP and DEI those of the bridge tag); either way the bridge tag gets the map's S-VID.
/// Returns false (frame untouched) when no map applies.
#[cold]
#[inline(never)]
pub(super) fn map_out(ep: &PortRecord, m: &FrameMeta, pkt: &mut PacketBuf) -> bool {
    let Some(t) = ep.tag2.as_ref() else {
        return false;
    };
    let inner = frame::vid_at(pkt.frame(), m.tagged as usize, Tpid::DOT1Q);
    let Some((svid, op)) = t.egress(m.vid, inner) else {
        return false;
    };
    set_bridge_tag(pkt, m.tagged, ep.tpid, m.tci_hi | svid);
    match op {
        InnerTag::Set(c) => apply_inner_tag(InnerTag::Set(c), pkt),
        InnerTag::Push(c) => {
            let ctag = frame::tag_bytes(Tag::new(Tpid::DOT1Q, Tci(m.tci_hi | c)));
            if pkt.insert_tag(frame::tag_offset(1), ctag) {
                pkt.offload.shift_headers(4);
            }
        }
        InnerTag::Pop => {}
    }
    true
}

/// `vlan map … translate` on egress: the wire VID of VLAN `vid` through map `t`.
#[cold]
#[inline(never)]
pub(super) fn vid_out(t: &[u16], vid: u16) -> u16 {
    match t[usize::from(vid)] {
        0 => vid,
        w => w,
    }
}

/// Gives the frame the bridge tag `tpid`/`tci` outermost: in place of the one it has
/// (`tagged`), or pushed.
#[inline(always)]
pub(super) fn set_bridge_tag(pkt: &mut PacketBuf, tagged: bool, tpid: u16, tci: u16) {
    let tag = frame::tag_word(Tag::new(Tpid(tpid), Tci(tci)));
    if tagged {
        frame::set_tag_word_at(pkt.frame_mut(), 0, tag);
    } else {
        pkt.insert_tag(frame::tag_offset(0), tag.to_be_bytes());
        pkt.offload.shift_headers(4);
    }
}

/// Rewrites the bridge tag for egress port `ep` and checks the size (an oversize copy is
/// counted on the egress port). Returns the frame's length when it may leave.
#[inline(always)]
pub(super) fn rewrite_tag(
    ep: &PortRecord,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> Option<usize> {
    if m.filtering {
        if ep.untagged.contains(m.vid) || (ep.cvid_in.is_some() && cvid_untags(ep, m, pkt)) {
            if m.tagged {
                pkt.remove_tag(frame::tag_offset(0));
                pkt.offload.shift_headers(-4);
            }
        } else if !(ep.tag2.is_some() && map_out(ep, m, pkt)) {
            let vid = match &ep.vid_out {
                None => m.vid,
                Some(t) => vid_out(t, m.vid),
            };
            set_bridge_tag(pkt, m.tagged, ep.tpid, m.tci_hi | vid);
        }
        if ep.cvlans.is_some() && !cvlan_leaves(ep, wi, pkt) {
            return None;
        }
    }
    egress_size(ep, wi, pkt)
}

/// `cvlans` on egress port `ep` (a `dot1q-tunnel` port), for a frame rewritten for it: its
/// customer VLAN — the VID of its 0x8100 outer tag, else 0 (untagged), exactly as the ingress
/// check reads it — must be one `ep` admits; otherwise the copy is counted on `ep`
/// (`egress_cvlan_not_allowed`) and dropped: a customer never sees a C-VLAN it did not buy
/// (Open vSwitch's `xbundle_includes_vlan` checks the inner VID on output too).
#[cold]
#[inline(never)]
pub(super) fn cvlan_leaves(ep: &PortRecord, wi: usize, pkt: &PacketBuf) -> bool {
    let Some(cvlans) = ep.cvlans.as_deref() else {
        return true;
    };
    let f = pkt.frame();
    // A frame shorter than a tag reads as untagged.
    let tag = frame::tag_word_at(f, 0).unwrap_or(0);
    if cvlans.contains(customer_vid(tag, f.len())) {
        return true;
    }
    count_drop(ep.counters.writer(wi), DropReason::EgressCvlanNotAllowed);
    false
}

/// The egress size check of [`rewrite_tag`] on a rewritten frame (an oversize frame is counted on
/// the egress port). Returns the frame's length when it may leave.
#[inline(always)]
pub(super) fn egress_size(ep: &PortRecord, wi: usize, pkt: &PacketBuf) -> Option<usize> {
    let len = pkt.len();
    let on_wire = if pkt.offload.is_gso() {
        gso_segment_len(pkt, ep.tpid)
    } else {
        len
    };
    if on_wire > ep.max_frame as usize {
        count_drop(ep.counters.writer(wi), DropReason::Oversize);
        return None;
    }
    Some(len)
}

/// [`rewrite_tag`] for a frame on `route`, with the tag decision taken when the route was
/// ([`route_tag`]).
#[inline(always)]
pub(super) fn rewrite_tag_route(
    route: &Route,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> Option<usize> {
    let ep = route.port;
    match route.tag {
        TAG_KEEP => {}
        TAG_POP => {
            if m.tagged {
                pkt.remove_tag(frame::tag_offset(0));
                pkt.offload.shift_headers(-4);
            }
        }
        TAG_FRAME => return rewrite_tag_frame(ep, wi, m, pkt),
        tag => {
            let tag = tag | m.tci_hi as u32;
            if m.tagged {
                frame::set_tag_word_at(pkt.frame_mut(), 0, tag);
            } else {
                pkt.insert_tag(frame::tag_offset(0), tag.to_be_bytes());
                pkt.offload.shift_headers(4);
            }
        }
    }
    egress_size(ep, wi, pkt)
}

/// [`rewrite_tag`], out of line: a route whose frames' tags are decided one by one.
#[cold]
#[inline(never)]
pub(super) fn rewrite_tag_frame(
    ep: &PortRecord,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> Option<usize> {
    rewrite_tag(ep, wi, m, pkt)
}
