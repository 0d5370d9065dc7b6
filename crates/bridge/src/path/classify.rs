//! Stage 1 of the bridge pipeline, ingress classification: per run of frames from one ingress
//! port, the size and source checks, link-local groups, VLAN classification (tags, PVID,
//! tunnel ports, VLAN maps in, selective Q-in-Q, inner-VID learning), the ingress filter and
//! the port's spanning-tree state in the frame's VLAN.
//! Pure functions of the frame and the port's compiled state; the result is one
//! [`FrameMeta`] per frame. Order of checks: see `super::pipeline`.

use super::meta::*;
use crate::cells::PortCells;
use crate::counters::DropReason;
use crate::fdb::{Learned, TableView, F_LOCKED, F_PERMANENT};
use crate::plan::{Bridge, PortRecord, StpSets};
use crate::settings::{VlanProtocol, GROUP_FWD_8021AD};
use qbridge_packet::PacketBuf;
use qbridge_wire::frame::{self, LINK_LOCAL_BASE, MAC_BROADCAST, MAC_GROUP_BIT};
use qbridge_wire::Tpid;
use std::sync::Arc;

/// Stage 1 for the run of frames at the start of `pkts` from one ingress port: classifies each
/// into `meta` and counts the run's rx frames and bytes, its VLAN rx and per-PCP rx counters.
/// Returns the run's length and how many of its frames are live (not dropped).
///
/// `PLAIN`: the port uses none of the provider features ([`PortRecord::plain`]), so a frame
/// untagged to the bridge has PCP 0: only tagged frames with another PCP are counted one by one (in
/// [`classify`], which adds them to `counted`); the rest in `rx_pcp[0]` once per run.
#[inline(always)]
pub(super) fn classify_run<const PLAIN: bool>(
    br: &Bridge,
    bi: u16,
    inp: &PortRecord,
    c: &PortCells,
    wi: usize,
    pkts: &[PacketBuf],
    meta: &mut [FrameMeta],
) -> (usize, usize) {
    let in_port = pkts.first().map_or(0, |p| p.port);
    let mut rx_bytes = 0u64;
    let mut vlan_rx = Tally::new();
    let mut live = 0usize;
    // Live frames counted in a per-PCP counter one by one (PLAIN).
    let mut counted = 0usize;
    let mut n = 0usize;
    for (pkt, m) in pkts.iter().zip(meta.iter_mut()) {
        if pkt.port != in_port {
            break;
        }
        n += 1;
        let len = pkt.len() as u64;
        rx_bytes += len;
        classify::<PLAIN>(br, bi, inp, c, pkt, &mut counted, m);
        if m.dest != DEST_DROP {
            live += 1;
            if let Some(run) = vlan_rx.add(m.vid as usize, len) {
                count_vlan_rx(&br.vlan_counters, wi, run);
            }
        }
    }
    c.rx_frames.add(n as u64);
    c.rx_bytes.add(rx_bytes);
    if PLAIN && br.settings.vlan_filtering && live > counted {
        c.rx_pcp[0].add((live - counted) as u64);
    }
    if let Some(run) = vlan_rx.take() {
        count_vlan_rx(&br.vlan_counters, wi, run);
    }
    (n, live)
}

/// [`classify_run`] for a port that uses provider features: out of line.
#[cold]
#[inline(never)]
pub(super) fn classify_run_features(
    br: &Bridge,
    bi: u16,
    inp: &PortRecord,
    c: &PortCells,
    wi: usize,
    pkts: &mut [PacketBuf],
    meta: &mut [FrameMeta],
) -> (usize, usize) {
    let (n, mut live) = classify_run::<false>(br, bi, inp, c, wi, pkts, meta);
    if let Some(stp) = &inp.stp {
        live -= stp_ingress(stp, c, &mut meta[..n]);
    }
    // On the admitted frames: a two-tag map's change to the C-tag (the map `map_in` found for
    // the same tags), then the FID of the frame's VLAN and C-tag.
    let inner_learning = br.settings.vlan_filtering && br.settings.learn_inner_vid;
    if inp.tag2.is_some() || inner_learning {
        for (pkt, m) in pkts[..n].iter_mut().zip(meta[..n].iter_mut()) {
            if m.dest == DEST_DROP {
                continue;
            }
            if let (Some(t), true) = (&inp.tag2, m.tagged) {
                let f = pkt.frame();
                let svid = frame::tag_at(f, 0).map_or(0, |t| t.tci.vid().get());
                if let Some((_, op)) = t.ingress(svid, inner_cvid(f)) {
                    apply_inner_tag(op, pkt);
                }
            }
            if inner_learning {
                m.fid_x = inner_fid(br, m, pkt) ^ m.vid;
            }
        }
    }
    (n, live)
}

/// Stage 1's last check, for a port with a spanning-tree state (never plain), once the VLAN
/// of each frame is known (after the VLAN's rx counters): a frame in a VLAN the port does not
/// forward in is dropped (Discarding) or marked [`DEST_LEARN`] (Learning: stage 3 learns its
/// source, then drops it). Returns the number of frames dropped.
#[cold]
#[inline(never)]
fn stp_ingress(stp: &StpSets, c: &PortCells, meta: &mut [FrameMeta]) -> usize {
    let mut dropped = 0;
    for m in meta.iter_mut().filter(|m| m.dest != DEST_DROP) {
        if !stp.fwd.contains(m.vid) {
            if stp.learn.contains(m.vid) {
                m.dest = DEST_LEARN;
            } else {
                drop_into(m, c, DropReason::StpDiscarding);
                dropped += 1;
            }
        }
    }
    dropped
}

/// Stage 1 for one frame: everything decided from the frame and its ingress port alone.
/// `PLAIN`: [`PortRecord::plain`] holds (the provider features' tests are left out).
#[inline(always)]
pub(super) fn classify<const PLAIN: bool>(
    br: &Bridge,
    bi: u16,
    inp: &PortRecord,
    c: &PortCells,
    pkt: &PacketBuf,
    counted: &mut usize,
    m: &mut FrameMeta,
) {
    let len = pkt.len();
    if len < 14 {
        return drop_early(m, c, DropReason::Runt);
    }
    if wire_len(pkt, inp.tpid) > inp.max_frame as usize {
        return drop_early(m, c, DropReason::Oversize);
    }
    // The first 16 bytes as words: MACs as 48-bit integers (the class tests below are single
    // compares), and the outer tag (TPID and TCI). A 14..15-byte frame is zero-padded; its tag
    // is checked against `len` below.
    let frame = pkt.frame();
    let (w0, w1, tag) = match frame.first_chunk::<16>() {
        Some(h) => frame::header_words(h),
        None => {
            let mut h = [0u8; 16];
            let n = frame.len().min(16);
            h[..n].copy_from_slice(&frame[..n]);
            frame::header_words(&h)
        }
    };
    let dst = w0 >> 16;
    let src = w1 & MAC_BROADCAST;
    if src & MAC_GROUP_BIT != 0 || src == 0 {
        return drop_early(m, c, DropReason::InvalidSrcMac);
    }
    if dst & !0xf == LINK_LOCAL_BASE && !link_local_forwarded(br, (dst & 0xf) as u8) {
        return drop_early(m, c, DropReason::LinkLocal);
    }
    let filtering = br.settings.vlan_filtering;
    m.dst = dst;
    m.src = src;
    m.dest = DEST_FLOOD;
    m.vid = 0;
    m.fid_x = 0;
    m.tci_hi = 0;
    m.bridge = bi;
    m.tagged = false;
    m.filtering = filtering;
    m.flood = FloodClass::Unknown;
    if filtering {
        // `dot1q-tunnel`: whatever the frame carries is the customer's; it enters the port's
        // VLAN untagged to the bridge (the bridge tag goes on top), once admitted by `cvlans`.
        if let (false, Some(cvlans)) = (PLAIN, &inp.cvlans) {
            if !cvlans.contains(customer_vid(tag, len)) {
                return drop_into(m, c, DropReason::CvlanNotAllowed);
            }
        }
        if (PLAIN || !inp.tunnel) && (tag >> 16) as u16 == inp.tpid {
            if len < 18 {
                return drop_into(m, c, DropReason::Runt);
            }
            let tci = tag as u16;
            m.vid = match tci & 0x0fff {
                0x0fff => return drop_into(m, c, DropReason::ReservedVid),
                0 if inp.pvid == 0 => return drop_into(m, c, DropReason::NoPvid),
                0 => inp.pvid,
                v if PLAIN => v,
                // `vlan map`: the wire tags' VLAN inside the bridge.
                v if inp.tag2.is_some() || inp.vid_in.is_some() => match map_in(inp, v, frame) {
                    0 => return drop_into(m, c, DropReason::TranslatedVid),
                    vid => vid,
                },
                v => v,
            };
            m.tagged = true;
            m.tci_hi = tci & 0xf000;
            if PLAIN {
                // Counted here, where the PCP is at hand; untagged frames (PCP 0) once per run.
                if !inp.member.contains(m.vid) {
                    return drop_into(m, c, DropReason::VlanNotMember);
                }
                if m.tci_hi >= 0x2000 {
                    c.rx_pcp[(m.tci_hi >> 13) as usize].add(1);
                    *counted += 1;
                }
                return;
            }
        } else {
            // `vlan map … cvid C svid S`: a C-tagged frame in a mapped C-VLAN is in S.
            let svid = match &inp.cvid_in {
                _ if PLAIN => 0,
                Some(t) if (tag >> 16) as u16 == 0x8100 && len >= 18 => {
                    t[usize::from(tag as u16 & 0x0fff)]
                }
                _ => 0,
            };
            m.vid = if svid != 0 {
                svid
            } else if inp.pvid == 0 {
                return drop_into(m, c, DropReason::NoPvid);
            } else {
                inp.pvid
            };
            // `pcp_mode`: the priority of the tag the frame will get.
            m.tci_hi = if PLAIN {
                0
            } else if inp.pcp_inner && len >= 18 && Tpid((tag >> 16) as u16).is_well_known() {
                inp.pcp_table[(tag as u16 >> 12) as usize]
            } else {
                inp.pcp_untagged
            };
        }
        if !inp.member.contains(m.vid) {
            return drop_into(m, c, DropReason::VlanNotMember);
        }
        if !PLAIN {
            c.rx_pcp[(m.tci_hi >> 13) as usize].add(1);
        }
    }
}

/// A locked port (`locked on`, Linux's `br_handle_frame_finish`): a frame passes only if its
/// source has an FDB entry on this port that is not `locked` (and not the bridge's own). An
/// unknown source on a port with `mab on` gets a locked entry; a locked entry of this port is
/// refreshed. Either way the frame is dropped (`port_locked`).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn locked_admits(
    ports: &[Option<Arc<PortRecord>>],
    wi: usize,
    br: &Bridge,
    table: TableView<'_>,
    inp: &PortRecord,
    in_id: u16,
    m: &FrameMeta,
    now_ns: u64,
) -> bool {
    let c = inp.counters.writer(wi);
    let key = fid_key(m.src, m.fid());
    let mab = match table.find(key) {
        Some((_, e)) if e.port == in_id && e.flags & (F_LOCKED | F_PERMANENT) == 0 => return true,
        None => inp.settings.mab,
        Some((_, e)) => inp.settings.mab && e.port == in_id && e.flags & F_LOCKED != 0,
    };
    if mab {
        let limits = (br.settings.fdb_max_learned, inp.settings.fdb_max_learned);
        match br.fdb.learn_mab(
            key,
            in_id,
            now_ns,
            limits.0,
            limits.1,
            vlan_limit(inp, m.vid),
        ) {
            Learned::Refused | Learned::RefusedVlan => c.fdb_learn_refused.add(1),
            Learned::NewEvicting { port } => {
                if let Some(Some(v)) = ports.get(port as usize) {
                    v.counters.writer(wi).fdb_evictions.add(1);
                }
            }
            _ => {}
        }
    }
    c.drop(DropReason::PortLocked);
    false
}

/// Whether bridge `br` forwards link-local group 01-80-C2-00-00-0`group`. 01-80-C2-00-00-00
/// (STP) is forwarded while the bridge has `stp` off, as by a Linux bridge with STP off, and
/// is the bridge's own with it on (except on an 802.1ad bridge, whose STP group is 08: 00 is
/// the customers'); MAC pause (01) never.
#[inline(always)]
pub(crate) fn link_local_forwarded(br: &Bridge, group: u8) -> bool {
    let mut mask = br.settings.group_fwd_mask;
    if br.settings.vlan_protocol == VlanProtocol::Dot1Ad {
        mask |= GROUP_FWD_8021AD;
    }
    (group == 0 && !br.settings.stp) || (group != 1 && mask & (1 << group) != 0)
}

/// The VLAN inside the bridge of a frame tagged to the bridge with (wire) VID `v` on a port
/// with VLAN maps: a 2:1 or 2:2 map of `v` and the C-tag right behind the bridge tag (its
/// change to that C-tag goes to `op`), else a 1:1 map of `v`, else `v` — or 0 when `v` (or
/// `v` with that C-tag) is what a map sends translated (dropped as `translated_vid`).
#[cold]
#[inline(never)]
pub(crate) fn map_in(inp: &PortRecord, v: u16, frame: &[u8]) -> u16 {
    let inner = inner_cvid(frame);
    if let Some((vid, _)) = inp.tag2.as_ref().and_then(|t| t.ingress(v, inner)) {
        return vid;
    }
    if let Some(t) = &inp.vid_in {
        if t[usize::from(v)] != 0 {
            return t[usize::from(v)];
        }
    }
    let out_1to1 = inp.vid_out.as_ref().is_some_and(|t| t[usize::from(v)] != 0);
    let out_2 = inp.tag2.as_ref().is_some_and(|t| {
        t.by_inside(v, 0).is_some() || (inner != 0 && t.by_inside(v, inner).is_some())
    });
    if out_1to1 || out_2 {
        return 0;
    }
    v
}

/// `learn_inner_vid`: the FID of the frame's VLAN and the VID of its C-tag (behind the bridge
/// tag, or outermost when the frame is untagged to the bridge); the VLAN's own FID when it
/// has none (or VID 0).
#[cold]
#[inline(never)]
pub(super) fn inner_fid(br: &Bridge, m: &FrameMeta, pkt: &PacketBuf) -> u16 {
    let depth = m.tagged as usize;
    match frame::full_tag_at(pkt.frame(), depth) {
        Some(c) if c.tpid == Tpid::DOT1Q => match c.tci.vid().get() {
            0 => m.vid,
            cvid => br.fdb.inner_fids().fid(m.vid, cvid),
        },
        _ => m.vid,
    }
}

/// The VID of the C-tag (0x8100) right behind a frame's bridge tag (0: none there).
pub(crate) fn inner_cvid(f: &[u8]) -> u16 {
    match frame::full_tag_at(f, 1) {
        Some(c) if c.tpid == Tpid::DOT1Q => c.tci.vid().get(),
        _ => 0,
    }
}
