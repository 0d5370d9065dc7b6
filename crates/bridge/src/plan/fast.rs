//! What the eBPF fast path needs of a plan and of a forwarded frame (docs/fast-path.md): which
//! ports it may serve, the FDB entries its flows rely on, its counters folded into the
//! switch's. The datapath's fast-path module reads these; the pipeline itself does not know
//! the fast path exists.

use super::mirror::CompiledDst;
use super::{Plan, PortId};
use crate::fdb::{fdb_key, key_fid, key_mac, Slot, F_LOCKED, F_PERMANENT};
use crate::settings::Role;
use qbridge_wire::MacAddr;

/// A port as the fast path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastPort {
    /// The bridge the port belongs to.
    pub bridge: u16,
    /// The port's bridge TPID (a tag of another TPID is not the bridge's).
    pub tpid: u16,
    /// Longest frame (no FCS) the port takes in or sends out.
    pub max_frame: u32,
    /// The port learns source addresses (the fast path then needs each source learned on it).
    pub learning: bool,
    /// The port is locked (`locked on`, with or without MAB): a frame passes only if its source
    /// has an entry on the port that is not `locked`, so a flow needs that entry too and the
    /// program checks it on every hit (decision 75).
    pub locked: bool,
}

/// An FDB entry as the fast path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastEntry {
    pub port: u16,
    /// Frames to it go to `port` alone (not a local entry, not a locked one).
    pub forwards: bool,
    /// Last seen, on the engine's clock.
    pub seen_ns: u64,
}

impl FastEntry {
    fn of(s: &Slot) -> FastEntry {
        FastEntry {
            port: s.port,
            forwards: s.flags & (F_PERMANENT | F_LOCKED) == 0,
            seen_ns: s.seen_ns,
        }
    }
}

/// What classification made of a frame: its bridge, VLAN and FDB id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastClass {
    pub bridge: u16,
    pub vid: u16,
    pub fid: u16,
    /// The priority the ingress port's `rx_pcp` counts it under (8: not counted, a bridge
    /// that does not filter VLANs).
    pub pcp: u8,
}

/// A mirror copy the pipeline makes of a frame a flow forwards (decision 80): the session's
/// index, its direction, its destination port and what that port checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastCopy {
    pub session: u8,
    /// A copy of the frame as it leaves (after the egress rewrite); else as received.
    pub tx: bool,
    pub dst: u16,
    /// The RSPAN tag pushed outermost on the copy: the destination's bridge TPID and the
    /// session's VID (PCP 0).
    pub rspan: Option<(u16, u16)>,
    /// The destination's `max_frame` (the copy with its RSPAN tag must fit).
    pub max_frame: u32,
    /// The destination runs (else the pipeline counts `port_down`, and no flow is made).
    pub running: bool,
}

/// One FDB change the fast path must follow: `(bridge, mac, fid)` and the entry now.
pub type FastChange = (u16, MacAddr, u16, Option<FastEntry>);

impl Plan {
    /// Port `id` when the fast path may receive for it and send to it: a running device port
    /// of a bridge (no stacked device on it) whose bridge does not learn per inner VID (those
    /// FIDs live only while a batch runs), that no mirror session copies (as source, rx or tx,
    /// whatever its VLAN filter: a copy's delivery depends on more than a flow's key, e.g. a
    /// frame's length against the destination's `max_frame`). Ports no session covers keep
    /// their flows while sessions exist (decision 75). A locked port (MAB or not) is served:
    /// its flows need the source's entry on it ([`FastPort::locked`]).
    pub fn fast_port(&self, id: PortId) -> Option<FastPort> {
        if let Some(m) = &self.mirrors {
            let i = id.0 as usize;
            let mut mask =
                m.rx_mask.get(i).copied().unwrap_or(0) | m.tx_mask.get(i).copied().unwrap_or(0);
            // Copies to a port are cloned by the program (decision 80); to a pcap file they
            // stay with the pipeline.
            while mask != 0 {
                let si = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                if !matches!(m.sessions.get(si)?.dst, CompiledDst::Port(_)) {
                    return None;
                }
            }
        }
        let p = self.port(id)?;
        let bridge = p.master?;
        let br = self.bridges.get(bridge as usize)?.as_deref()?;
        let plain_device = matches!(p.role, Role::Device) && p.uppers.is_none();
        if !p.running || !plain_device {
            return None;
        }
        if br.settings.learn_inner_vid && br.settings.vlan_filtering {
            return None;
        }
        Some(FastPort {
            bridge,
            tpid: p.tpid,
            max_frame: p.max_frame,
            learning: p.settings.learning && br.settings.ageing_time_ns != 0,
            locked: p.settings.locked,
        })
    }

    /// Whether the plan has mirror sessions.
    pub fn has_mirrors(&self) -> bool {
        self.mirrors.is_some()
    }

    /// Mirror sessions of the plan (their indexes, the program's `qb_mir_stats` keys, are
    /// below this).
    pub fn mirror_sessions(&self) -> usize {
        self.mirrors.as_ref().map_or(0, |m| m.sessions.len())
    }

    /// The copies the pipeline makes of a frame received on `in_id` as `input` and sent on
    /// `out_id` as `output`, in the order it delivers them (rx copies, then tx; sessions in
    /// order), with the sessions' VLAN filters applied (a function of the frames' outer tags
    /// and the ports' PVIDs). `None` when a session copying either port sends to a pcap file
    /// (those copies stay with the pipeline) or `input` is a runt.
    pub fn fast_copies(
        &self,
        in_id: PortId,
        input: &[u8],
        out_id: PortId,
        output: &[u8],
    ) -> Option<Vec<FastCopy>> {
        let mut out = Vec::new();
        let Some(m) = &self.mirrors else {
            return Some(out);
        };
        for (tx, id, frame) in [(false, in_id, input), (true, out_id, output)] {
            let i = id.0 as usize;
            let mut mask = if tx { &m.tx_mask } else { &m.rx_mask }
                .get(i)
                .copied()
                .unwrap_or(0);
            if mask == 0 {
                continue;
            }
            let p = self.port(id)?;
            if frame.len() < 14 {
                return None;
            }
            let vlan = crate::path::mirror::frame_vlan(p.tpid, p.pvid, frame);
            while mask != 0 {
                let si = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let sess = m.sessions.get(si)?;
                let CompiledDst::Port(d) = sess.dst else {
                    return None;
                };
                if sess.vids.as_ref().is_some_and(|v| !v.contains(vlan)) {
                    continue;
                }
                let dp = self.port(PortId(d))?;
                out.push(FastCopy {
                    session: si as u8,
                    tx,
                    dst: d,
                    rspan: (sess.rspan != 0).then_some((dp.tpid, sess.rspan)),
                    max_frame: dp.max_frame,
                    running: dp.running,
                });
            }
        }
        Some(out)
    }

    /// Counts copies the fast path sent for mirror session `session` (writer `worker`'s
    /// block), into the session's `frames`/`bytes`.
    pub fn count_mirror(&self, session: usize, worker: usize, frames: u64, bytes: u64) {
        if let Some(s) = self.mirrors.as_ref().and_then(|m| m.sessions.get(session)) {
            let c = s.counters.writer(worker);
            c.frames.add(frames);
            c.bytes.add(bytes);
        }
    }

    /// Counts copies for mirror session `session` the fast path's clone failed to send (the
    /// kernel refused it: the destination gone or down; decision 85), as the session's
    /// `tx_error` drops.
    pub fn count_mirror_failed(&self, session: usize, worker: usize, n: u64) {
        if let Some(s) = self.mirrors.as_ref().and_then(|m| m.sessions.get(session)) {
            s.counters.writer(worker).drops[crate::counters::DropReason::TxError as usize].add(n);
        }
    }

    /// The entry of `mac` in FDB `fid` of bridge `bridge`.
    pub fn fdb_entry(&self, bridge: u16, mac: MacAddr, fid: u16) -> Option<FastEntry> {
        let br = self.bridges.get(bridge as usize)?.as_deref()?;
        br.fdb.get(fdb_key(mac, fid)).map(|s| FastEntry::of(&s))
    }

    /// Moves the last-seen time of `mac` in FDB `fid` of bridge `bridge` up to `seen_ns` (the
    /// fast path forwarded frames from it), never back.
    pub fn fdb_seen(&self, bridge: u16, mac: MacAddr, fid: u16, seen_ns: u64) {
        if let Some(br) = self.bridges.get(bridge as usize).and_then(|b| b.as_deref()) {
            br.fdb.seen(fdb_key(mac, fid), seen_ns);
        }
    }

    /// Turns on (or off) the log of FDB entries that move or go, on every bridge.
    pub fn log_fast(&self, on: bool) {
        for br in self.bridges.iter().flatten() {
            br.fdb.log_fast(on);
        }
    }

    /// The FDB entries that moved, changed or went since the last call, with their state now;
    /// true when a log overflowed meanwhile (some changes are missing: the caller must compare
    /// everything it mirrors).
    pub fn take_fast_changes(&self, out: &mut Vec<FastChange>) -> bool {
        let mut keys = Vec::new();
        let mut lost = false;
        for (b, br) in self.bridges.iter().enumerate() {
            let Some(br) = br else { continue };
            keys.clear();
            lost |= br.fdb.take_fast_changes(&mut keys);
            for (key, slot) in &keys {
                out.push((
                    b as u16,
                    key_mac(*key),
                    key_fid(*key),
                    slot.as_ref().map(FastEntry::of),
                ));
            }
        }
        lost
    }

    /// [`Plan::take_fast_changes`], each change handed to `f` while its bridge's FDB writer
    /// lock is held: the fast path's map written from it is in the order of the FDB's own
    /// changes, whichever thread follows (decision 85). True when a log overflowed.
    pub fn follow_fast_changes(&self, mut f: impl FnMut(&FastChange)) -> bool {
        let mut lost = false;
        for (b, br) in self.bridges.iter().enumerate() {
            let Some(br) = br else { continue };
            lost |= br.fdb.follow_fast_changes(|key, slot| {
                f(&(
                    b as u16,
                    key_mac(key),
                    key_fid(key),
                    slot.as_ref().map(FastEntry::of),
                ))
            });
        }
        lost
    }

    /// The entry of `mac` in FDB `fid` of bridge `bridge` handed to `f` while that FDB's
    /// writer lock is held (decision 85); `None` without such a bridge.
    pub fn with_fdb_entry_locked<R>(
        &self,
        bridge: u16,
        mac: MacAddr,
        fid: u16,
        f: impl FnOnce(Option<FastEntry>) -> R,
    ) -> Option<R> {
        let br = self.bridges.get(bridge as usize)?.as_deref()?;
        Some(
            br.fdb
                .with_entry_locked(fdb_key(mac, fid), |s| f(s.as_ref().map(FastEntry::of))),
        )
    }

    /// Counts frames the fast path received on port `id` (writer `worker`'s block; the
    /// control plane's is any index past the workers), `pcp[p]` of them with priority `p`.
    pub fn count_rx(&self, id: PortId, worker: usize, n: u64, bytes: u64, pcp: &[u64; 8]) {
        if let Some(p) = self.port(id) {
            let w = p.counters.writer(worker);
            w.rx_frames.add(n);
            w.rx_bytes.add(bytes);
            for (c, k) in w.rx_pcp.iter().zip(pcp) {
                if *k != 0 {
                    c.add(*k);
                }
            }
        }
    }

    /// Counts frames the fast path forwarded in VLAN `vid` of bridge `bridge`.
    pub fn count_vlan(&self, bridge: u16, vid: u16, worker: usize, rx: (u64, u64), tx: (u64, u64)) {
        if let Some(br) = self.bridges.get(bridge as usize).and_then(|b| b.as_deref()) {
            let c = br.vlan_counters.writer(worker, vid);
            c.rx_frames.add(rx.0);
            c.rx_bytes.add(rx.1);
            c.tx_frames.add(tx.0);
            c.tx_bytes.add(tx.1);
        }
    }

    /// Bridge slots of the plan (bridge indices are below this).
    pub fn bridge_slots(&self) -> usize {
        self.bridges.len()
    }
}
