//! Port mirroring (`mirror add NAME src P1[,P2] [direction rx|tx|both] [vid LIST] dst PORT|pcap
//! FILE [rspan VID]`): a copy of the frames a port receives and/or sends, exactly as they
//! passed the port, to another port or to a pcap file. `docs/semantics.md` §M states the rules.
//!
//! **Configuration** (`crate::config::mirror`). A [`Switch`](crate::Switch) holds at most
//! [`MAX_MIRRORS`](crate::MAX_MIRRORS) named sessions (Open vSwitch's limit), in creation order,
//! each with its own per-worker counters (`MirrorCounterSet`, shared by every copy of the
//! configuration like a port's). Every operation validates before it changes anything. Deleting a
//! port takes it out of every session; a session left with no source, or whose destination port is
//! deleted, is deleted with it.
//!
//! **Compilation** (`crate::plan::mirror`). [`Switch::plan`](crate::Switch::plan) compiles the
//! sessions into [`Mirrors`]: per port id a 32-bit mask of the sessions that mirror what the port
//! receives (`rx_mask`) and sends (`tx_mask`). A plan without sessions has `mirrors: None`, and
//! [`Forwarder::process`] pays one test of that `Option` per batch.
//!
//! **Datapath** (this module: `Path::process_mirrored`, wrapped around the whole forwarding path,
//! flat or stacked): before forwarding, every received frame whose port is an rx source is copied
//! from the pool as it arrived (also frames the bridge then drops); the length of each tx source's
//! output batch is noted; after forwarding, the frames appended to those batches (as they leave:
//! after the egress tag rewrite) are copied. Only then are the copies delivered — an RSPAN tag
//! pushed, the size checked against the destination port — and appended to the destination's output
//! batch, after its own frames of the batch: rx copies first (in frame order, sessions in order),
//! then tx copies (by source port id, then frame order, then session). Copies are never mirrored
//! (they are appended after every copy was taken) and never enter a bridge. Cost when a session
//! exists: one mask load per received frame and per tx-source port, and a pool copy per mirrored
//! frame; nothing allocates after warm-up.

use super::{Forwarder, Outputs, Path};
use crate::counters::DropReason;
use crate::plan::mirror::{Compiled, CompiledDst, Mirrors};
use crate::plan::PortRecord;
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::{frame, Tag, Tci, Tpid};

/// A worker's scratch for mirroring; kept between batches to avoid allocating.
#[derive(Debug, Default)]
pub(crate) struct MirrorScratch {
    /// Copies taken in this batch, with their session index, in delivery order.
    copies: Vec<(u8, PacketBuf)>,
    /// Each tx source port and the length of its output batch before forwarding.
    marks: Vec<(u16, usize)>,
}

/// The VLAN a mirror's `vid LIST` judges a frame by, on port `p` (where it was received or is
/// being sent): the VID of its outer tag when that tag's TPID is `p`'s bridge TPID and the VID
/// is not 0; otherwise (untagged, priority-tagged, another TPID) `p`'s PVID, 0 when it has
/// none (matches no list). It reads the frame as it is on the port's wire, not the bridge's
/// classification (VLAN maps, tunnel ports and the like are not applied).
#[inline]
pub(crate) fn frame_vlan(tpid: u16, pvid: u16, f: &[u8]) -> u16 {
    match frame::full_tag_at(f, 0) {
        Some(t) if t.tpid == Tpid(tpid) && t.tci.vid().get() != 0 => t.tci.vid().get(),
        _ => pvid,
    }
}

impl Path<'_> {
    /// [`Forwarder::process`] with mirror sessions (see the module documentation).
    #[cold]
    #[inline(never)]
    pub(super) fn process_mirrored(
        &self,
        m: &Mirrors,
        w: &mut Forwarder,
        now_ns: u64,
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        out.ensure(self.ports.len());
        let wi = w.index;
        let mut s = w.mirror.take().unwrap_or_default();
        let Outputs { ports, pool, .. } = out;
        for pkt in &rx.pkts {
            let p = pkt.port as usize;
            let mask = m.rx_mask.get(p).copied().unwrap_or(0);
            if mask == 0 {
                continue;
            }
            let Some(Some(port)) = self.ports.get(p) else {
                continue;
            };
            if !port.running {
                continue;
            }
            self.take_copies(m, port, mask, wi, pkt, pool, &mut s.copies);
        }
        s.marks.clear();
        s.marks
            .extend(m.tx_ports.iter().map(|&p| (p, ports[p as usize].len())));
        self.forward(w, now_ns, rx, out);
        let Outputs { ports, pool, .. } = out;
        for &(p, before) in &s.marks {
            let Some(Some(port)) = self.ports.get(p as usize) else {
                continue;
            };
            let mask = m.tx_mask[p as usize];
            for pkt in ports[p as usize].pkts.get(before..).unwrap_or(&[]) {
                self.take_copies(m, port, mask, wi, pkt, pool, &mut s.copies);
            }
        }
        for (si, copy) in s.copies.drain(..) {
            self.deliver(&m.sessions[si as usize], wi, copy, out);
        }
        w.mirror = Some(s);
    }

    /// Copies `pkt` (seen on `port`) for every session of `mask` whose VLAN filter admits it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn take_copies(
        &self,
        m: &Mirrors,
        port: &PortRecord,
        mut mask: u32,
        wi: usize,
        pkt: &PacketBuf,
        pool: &mut qbridge_packet::BufPool,
        copies: &mut Vec<(u8, PacketBuf)>,
    ) {
        let frame = pkt.frame();
        let vlan = frame_vlan(port.tpid, port.pvid, frame);
        while mask != 0 {
            let si = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let sess = &m.sessions[si];
            if frame.len() < 14 {
                sess.counters.writer(wi).drops[DropReason::Runt as usize].add(1);
                continue;
            }
            if let Some(v) = &sess.vids {
                if !v.contains(vlan) {
                    continue;
                }
            }
            copies.push((si as u8, pool.get_copy(pkt)));
        }
    }

    /// Sends one copy to its session's destination: the RSPAN tag, the size and state checks,
    /// the counters.
    fn deliver(&self, sess: &Compiled, wi: usize, mut copy: PacketBuf, out: &mut Outputs) {
        let c = sess.counters.writer(wi);
        match sess.dst {
            CompiledDst::Port(d) => {
                let Some(Some(dp)) = self.ports.get(d as usize) else {
                    // The plan compiles sessions only with live ports.
                    return out.pool.put(copy);
                };
                if !dp.running {
                    c.drops[DropReason::PortDown as usize].add(1);
                    return out.pool.put(copy);
                }
                if sess.rspan != 0 {
                    let tag = frame::tag_bytes(Tag::new(Tpid(dp.tpid), Tci(sess.rspan)));
                    copy.insert_tag(frame::tag_offset(0), tag);
                    copy.offload.shift_headers(4);
                }
                if super::meta::wire_len(&copy, dp.tpid) > dp.max_frame as usize {
                    c.drops[DropReason::Oversize as usize].add(1);
                    return out.pool.put(copy);
                }
                let len = copy.len() as u64;
                c.frames.add(1);
                c.bytes.add(len);
                let pc = dp.counters.writer(wi);
                pc.tx_frames.add(1);
                pc.tx_bytes.add(len);
                copy.port = d;
                out.ports[d as usize].push(copy);
            }
            CompiledDst::Sink(k) => {
                c.frames.add(1);
                c.bytes.add(copy.len() as u64);
                let k = k as usize;
                if out.mirror_sinks.len() <= k {
                    out.mirror_sinks.resize_with(k + 1, Batch::default);
                }
                out.mirror_sinks[k].push(copy);
            }
        }
    }
}
