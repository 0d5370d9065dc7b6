//! The batch pipeline, in stages over the whole batch (VPP style): classify, learn and look up,
//! then act per destination.
//!
//! 1. **Ingress classification** (per run of frames from one ingress port, which resolves the
//!    port, its bridge and the FDB table once per run): size and source checks, link-local
//!    groups, VLAN classification and the ingress filter. Pure functions of the frame and the
//!    port's compiled state. The result is one [`FrameMeta`] per frame in the worker's scratch
//!    array (the frame's parsed MACs, VID, tag state): later stages never re-read the header.
//! 2. **FDB warming** (large tables only): touch the home slots of every classified frame's
//!    source and destination keys, from the same [`FrameMeta`]s, so the cache misses overlap.
//! 3. **Learn and decide**, in frame order (frame *i*'s source is learned before frame *i*'s
//!    destination is looked up and after frame *i − 1*'s, exactly as one frame at a time):
//!    learning, FDB lookup, the unicast checks; the verdict is an egress port, "flood", or a
//!    counted drop. A frame to one egress port gets its egress work here too, while its
//!    metadata is at hand: the tag rewrite (pop, push or rewrite in place of the 4 tag bytes),
//!    the egress size check and the transmit tallies.
//! 4. **Move**, in frame order: each buffer into its output batch or back to the pool, flood
//!    copies made and rewritten per target. When one transmit tally run holds every frame of
//!    the batch (all to one port), the whole batch moves at once (a vector swap or append).
//!
//! Counters are summed per run (rx per ingress run, tx per egress port run, VLAN rx/tx per VID
//! run; stage 3 sums per route, see `Route`) and written once per run; drops are counted where
//! decided. Each buffer moves to exactly one place: an output batch, or back to the pool.
//! Flooding sends pool copies to all targets but the last, which gets the original buffer.
//! Nothing here allocates after warm-up, takes a lock (other than the FDB writer's on a new or
//! moved address), makes a syscall or calls through a `dyn`.
//!
//! Order of checks (the reference model follows the same order, see docs/semantics.md):
//! port down, no bridge, runt, oversize (ingress), invalid source MAC, link-local group,
//! VLAN classification (runt tag, reserved VID, no PVID), ingress filter, spanning-tree state
//! (Discarding: dropped; Learning: learned, then dropped), learning, then forwarding: local,
//! same port, egress filter (membership, then spanning-tree state), egress down, isolation,
//! private VLANs, or flooding (to the VID's members that forward in it); and per copy
//! the oversize check on the egress port after the tag rewrite.

use super::classify::*;
use super::meta::*;
use super::rewrite::*;
use super::{Forwarder, Outputs, Path};
use crate::cells::PortCells;
use crate::counters::DropReason;
use crate::fdb::{Fdb, Learned, Slot, TableCache, TableView, F_LOCKED, F_PERMANENT};
use crate::plan::{Bridge, PortRecord};
use crate::vlanmode::{pvlan_allows, violation_of, Violation};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::frame::{MAC_BROADCAST, MAC_GROUP_BIT};

/// [`Route::key`] of FDB entry `entry` for a frame in `vid`: VID, port and flags, from the low
/// bits up (never [`Route::NONE`]).
#[inline(always)]
fn route_key(entry: &Slot, vid: u16) -> u64 {
    vid as u64 | (entry.port as u64) << 16 | (entry.flags as u64) << 32
}

/// The egress port of a [`Route::key`].
#[inline(always)]
fn route_port(key: u64) -> u16 {
    (key >> 16) as u16
}

/// Stage 3's transmit state: the current route, and the frames and bytes that routes before it
/// sent to its port (their VID counters are written when a route is left, the port's when the
/// port changes).
struct Tx<'a> {
    route: Route<'a>,
    port_frames: u64,
    port_bytes: u64,
}

impl<'a> Tx<'a> {
    /// No route (`port` is unused until one is taken).
    fn new(port: &'a PortRecord) -> Tx<'a> {
        Tx {
            route: Route {
                key: Route::NONE,
                port,
                tag: TAG_FRAME,
                frames: 0,
                bytes: 0,
            },
            port_frames: 0,
            port_bytes: 0,
        }
    }

    /// Leaves the current route for `key` to port `ep`, counting what it sent.
    #[inline(always)]
    fn reroute(&mut self, key: u64, ep: &'a PortRecord, tag: u32, br: &Bridge, wi: usize) {
        let r = &self.route;
        if r.frames != 0 {
            let vid = r.key as u16 as usize;
            count_vlan_tx(&br.vlan_counters, wi, (vid, r.frames, r.bytes));
        }
        self.port_frames += r.frames;
        self.port_bytes += r.bytes;
        if route_port(key) != route_port(r.key) || key == Route::NONE {
            if self.port_frames != 0 {
                let c = r.port.counters.writer(wi);
                c.tx_frames.add(self.port_frames);
                c.tx_bytes.add(self.port_bytes);
            }
            self.port_frames = 0;
            self.port_bytes = 0;
        }
        self.route = Route {
            key,
            port: ep,
            tag,
            frames: 0,
            bytes: 0,
        };
    }
}

impl Path<'_> {
    /// The bridge pipeline: forwards every frame of `rx` (each buffer's `port` is its
    /// ingress bridge port) at time `now_ns` as worker `w`, appending what leaves to
    /// `out.ports[egress]`. `rx` is left empty. [`Forwarder::process`] calls it directly when no
    /// device is stacked on any port (`super::stack`).
    pub(super) fn process_flat(
        &self,
        w: &mut Forwarder,
        now_ns: u64,
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        out.ensure(self.ports.len());
        let Forwarder {
            index,
            scratch,
            tables,
            meta,
            flood_credit,
            ..
        } = w;
        let wi = *index;
        if tables.len() < self.bridges.len() {
            tables.resize_with(self.bridges.len(), TableCache::default);
        }
        let n = rx.pkts.len();
        // Grown, never shrunk or cleared: stage 1 writes every entry of the batch.
        if meta.len() < n {
            meta.resize(n, FrameMeta::DROPPED);
        }
        let meta = &mut meta[..n];
        let pkts = &mut rx.pkts[..n];
        // The destination every frame so far shares (an egress port, flood or drop), or
        // DEST_MIXED.
        let mut one = DEST_MIXED;
        let mut i = 0;
        while i < n {
            let (len, to) = self.ingress(wi, tables, now_ns, &mut pkts[i..], &mut meta[i..]);
            one = if i == 0 || to == one { to } else { DEST_MIXED };
            i += len;
        }
        if one < DEST_MIXED {
            // Every frame goes to port `one`, already rewritten and counted: the whole batch
            // moves at once.
            let q = &mut out.ports[one as usize].pkts;
            if q.is_empty() {
                std::mem::swap(q, &mut rx.pkts);
            } else {
                q.append(&mut rx.pkts);
            }
        } else {
            self.move_stage(wi, scratch, flood_credit, meta, rx, out);
        }
    }

    /// Stages 1-3 for the run of frames at the start of `pkts` that share one ingress port:
    /// classify every frame, warm the FDB, then learn and decide frame by frame, and rewrite,
    /// size-check and count a frame whose destination is one port. Fills `meta` (one per frame
    /// of the run) and returns the run's length and the destination all its frames share (or
    /// [`DEST_MIXED`]).
    fn ingress(
        &self,
        wi: usize,
        tables: &mut [TableCache],
        now_ns: u64,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
    ) -> (usize, u16) {
        let Some(first) = pkts.first() else {
            return (0, DEST_MIXED);
        };
        let in_port = first.port;
        let in_id = in_port as usize;
        let bridge = match self.ports.get(in_id) {
            Some(Some(inp)) if inp.running => inp.master.and_then(|b| {
                let br = self.bridges.get(b as usize)?.as_deref()?;
                Some((inp, b, br, tables.get_mut(b as usize)?))
            }),
            _ => None,
        };
        let Some((inp, bi, br, cache)) = bridge else {
            return self.ingress_dropped(wi, pkts, meta);
        };
        let c = inp.counters.writer(wi);

        // Stage 1: classify, up to the end of the run.
        let (n, live) = if inp.plain {
            classify_run::<true>(br, bi, inp, c, wi, pkts, meta)
        } else {
            return self.ingress_features(wi, now_ns, br, bi, cache, inp, c, pkts, meta);
        };
        if live == 0 {
            return (n, DEST_DROP);
        }
        let meta = &mut meta[..n];
        let pkts = &mut pkts[..n];
        // A bridge that learns per inner VID takes its own copy of stages 2 and 3, so that
        // the FID is the VID, at no cost, everywhere else.
        let one = if br.settings.learn_inner_vid && br.settings.vlan_filtering {
            self.decide_inner(wi, now_ns, br, cache, inp, c, pkts, meta, live)
        } else {
            self.decide::<false, false>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
        };
        (n, one)
    }

    /// [`Plan::ingress`] for a port that is not plain: stages 1-3, within a run of the
    /// bridge's (S-VID, C-VID) pair epoch when it has pairs (`crate::fdb::InnerFids`: a
    /// pair's FID is used from classification to the lookup, never after the run).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn ingress_features(
        &self,
        wi: usize,
        now_ns: u64,
        br: &Bridge,
        bi: u16,
        cache: &mut TableCache,
        inp: &PortRecord,
        c: &PortCells,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
    ) -> (usize, u16) {
        let inner = br.fdb.inner();
        if let Some(i) = inner {
            i.enter(wi);
        }
        let (n, live) = classify_run_features(br, bi, inp, c, wi, pkts, meta);
        let one = if live == 0 {
            DEST_DROP
        } else {
            let (meta, pkts) = (&mut meta[..n], &mut pkts[..n]);
            if br.settings.learn_inner_vid && br.settings.vlan_filtering {
                self.decide_inner(wi, now_ns, br, cache, inp, c, pkts, meta, live)
            } else if inp.stp.is_some() {
                self.decide_stp(wi, now_ns, br, cache, inp, c, pkts, meta, live)
            } else {
                self.decide::<false, false>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
            }
        };
        if let Some(i) = inner {
            i.exit(wi);
        }
        (n, one)
    }

    /// [`Plan::decide`] for a port with a spanning-tree state: out of line.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decide_stp(
        &self,
        wi: usize,
        now_ns: u64,
        br: &Bridge,
        cache: &mut TableCache,
        inp: &PortRecord,
        c: &PortCells,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
        live: usize,
    ) -> u16 {
        self.decide::<false, true>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
    }

    /// [`Plan::decide`] for a bridge with `learn_inner_vid`: out of line.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decide_inner(
        &self,
        wi: usize,
        now_ns: u64,
        br: &Bridge,
        cache: &mut TableCache,
        inp: &PortRecord,
        c: &PortCells,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
        live: usize,
    ) -> u16 {
        self.decide::<true, true>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
    }

    /// Stages 2 and 3 for the classified run `pkts` (`live` frames not dropped): warm a large
    /// FDB table, then learn and decide frame by frame. Returns the destination every frame
    /// shares, or [`DEST_MIXED`]. `INNER`: the bridge learns per inner VID (the FID is
    /// [`FrameMeta::fid`], and a destination unknown for its pair may be a user's entry of the
    /// VLAN); else the FID is the VID. `STP`: the port may have frames marked [`DEST_LEARN`]
    /// (it has a spanning-tree state, so it is not plain).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn decide<const INNER: bool, const STP: bool>(
        &self,
        wi: usize,
        now_ns: u64,
        br: &Bridge,
        cache: &mut TableCache,
        inp: &PortRecord,
        c: &PortCells,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
        live: usize,
    ) -> u16 {
        let n = pkts.len();
        let in_id = usize::from(pkts.first().map_or(0, |p| p.port));
        let fid = |m: &FrameMeta| if INNER { m.fid() } else { m.vid };

        // Stage 2: warm a large FDB table.
        let mut table: TableView = cache.get(&br.fdb).view();
        if live > 1 && table.capacity() >= FDB_WARM_MIN_SLOTS {
            warm_fdb(table, meta);
        }

        // Stage 3: learn and decide, frame by frame.
        // ageing_time 0 makes every dynamic entry expire at once: nothing is learned and dynamic
        // entries are not used, so the bridge floods like a hub (as Linux does).
        let ageing_off = br.settings.ageing_time_ns == 0;
        let learning = inp.settings.learning && !ageing_off;
        // The key learned (or refreshed) last on this port: a burst from one source learns
        // once. Refreshes within one batch all write the same `now_ns`, so skipping them is
        // exact. 0 is never a key.
        let mut last_learned = 0u64;
        // The route of the last frame that passed the unicast checks, and the frames sent on it
        // since (see `Route`).
        let mut tx = Tx::new(inp);
        let locked = inp.settings.locked;
        for (pkt, m) in pkts.iter_mut().zip(meta.iter_mut()) {
            if m.dest != DEST_DROP {
                if locked
                    && !locked_admits(&self.ports, wi, br, table, inp, in_id as u16, m, now_ns)
                {
                    drop_counted(m);
                    table = cache.get(&br.fdb).view();
                    continue;
                }
                if learning {
                    let key = fid_key(m.src, fid(m));
                    if key != last_learned {
                        last_learned = key;
                        let learned = if Fdb::learn_kept(table, key, in_id as u16, now_ns) {
                            Learned::Kept
                        } else {
                            learn_locked(br, inp, key, m.vid, in_id as u16, now_ns)
                        };
                        match learned {
                            Learned::Kept => {}
                            Learned::New => table = cache.get(&br.fdb).view(),
                            Learned::Moved => {
                                c.fdb_moves.add(1);
                                table = cache.get(&br.fdb).view();
                            }
                            Learned::Refused => {
                                c.fdb_learn_refused.add(1);
                                // Not learned: the next frame from this source tries again.
                                last_learned = 0;
                            }
                            Learned::RefusedVlan => {
                                mac_limit_drop(inp, c, m.vid);
                                last_learned = 0;
                                drop_counted(m);
                                continue;
                            }
                            Learned::NewEvicting { port } => {
                                if let Some(Some(v)) = self.ports.get(port as usize) {
                                    v.counters.writer(wi).fdb_evictions.add(1);
                                }
                                table = cache.get(&br.fdb).view();
                            }
                        }
                    }
                }
                if STP && m.dest == DEST_LEARN {
                    // Spanning tree Learning: learned above, not forwarded.
                    count_drop(c, DropReason::StpDiscarding);
                    drop_counted(m);
                    continue;
                }
                m.dest = if m.dst == MAC_BROADCAST {
                    m.flood = FloodClass::Broadcast;
                    DEST_FLOOD
                } else if m.dst & MAC_GROUP_BIT != 0 {
                    m.flood = FloodClass::Multicast;
                    DEST_FLOOD
                } else {
                    match table.find_entry(fid_key(m.dst, fid(m))) {
                        Some(entry) => {
                            let key = route_key(&entry, m.vid);
                            if key != tx.route.key {
                                if (ageing_off && entry.ages()) || entry.flags & F_LOCKED != 0 {
                                    m.flood = FloodClass::Unknown;
                                    m.dest = DEST_FLOOD;
                                    continue;
                                }
                                if entry.flags & F_PERMANENT != 0 {
                                    m.dest = local_out(&self.ports, br, inp, in_id, wi, m, pkt);
                                    if m.dest == DEST_DROP {
                                        drop_counted(m);
                                    }
                                    continue;
                                }
                                let ep = if (key ^ tx.route.key) >> 16 == 0 {
                                    // The route's entry in another VID: the VID's checks.
                                    unicast_vid(inp, c, wi, tx.route.port, m)
                                } else {
                                    unicast(&self.ports, inp, in_id, c, wi, &entry, m)
                                };
                                let Some(ep) = ep else {
                                    drop_counted(m);
                                    continue;
                                };
                                let tag = route_tag(ep, m.vid, m.filtering);
                                tx.reroute(key, ep, tag, br, wi);
                            }
                            // Stage 4's per-frame work for one egress port, done here while
                            // the frame's metadata is at hand.
                            match rewrite_tag_route(&tx.route, wi, m, pkt) {
                                Some(len) => {
                                    tx.route.frames += 1;
                                    tx.route.bytes += len as u64;
                                    pkt.port = entry.port;
                                    entry.port
                                }
                                None => refused(m),
                            }
                        }
                        None if INNER && m.fid_x != 0 => {
                            match self.user_entry(wi, br, table, inp, c, m, pkt, ageing_off) {
                                Some(DEST_DROP) => refused(m),
                                Some(e) => e,
                                None => {
                                    m.flood = FloodClass::Unknown;
                                    DEST_FLOOD
                                }
                            }
                        }
                        _ => {
                            m.flood = FloodClass::Unknown;
                            DEST_FLOOD
                        }
                    }
                };
            }
        }
        // The port's frames are the route's and those of routes before it to the same port:
        // when they are all `n`, every frame goes to that port.
        let one = if tx.port_frames + tx.route.frames == n as u64 {
            route_port(tx.route.key)
        } else {
            DEST_MIXED
        };
        tx.reroute(Route::NONE, inp, TAG_FRAME, br, wi);
        one
    }

    /// A run from a port that is unknown, not running or in no bridge: every frame of it is
    /// counted and dropped. Returns the run's length.
    #[cold]
    #[inline(never)]
    fn ingress_dropped(
        &self,
        wi: usize,
        pkts: &[PacketBuf],
        meta: &mut [FrameMeta],
    ) -> (usize, u16) {
        let in_port = pkts.first().map_or(0, |p| p.port);
        let mut n = 0usize;
        let mut bytes = 0u64;
        for (pkt, m) in pkts.iter().zip(meta.iter_mut()) {
            if pkt.port != in_port {
                break;
            }
            n += 1;
            bytes += pkt.len() as u64;
            *m = FrameMeta::DROPPED;
        }
        let known = self.ports.get(in_port as usize).and_then(|p| p.as_deref());
        let why = match known {
            Some(inp) if inp.running => DropReason::NoBridge as u8 + 1,
            Some(_) => DropReason::PortDown as u8 + 1,
            None => 0,
        };
        for m in meta.iter_mut().take(n) {
            m.why = why;
        }
        match self.ports.get(in_port as usize) {
            Some(Some(inp)) => {
                let c = inp.counters.writer(wi);
                c.rx_frames.add(n as u64);
                c.rx_bytes.add(bytes);
                let reason = if inp.running {
                    DropReason::NoBridge
                } else {
                    DropReason::PortDown
                };
                c.drops[reason as usize].add(n as u64);
            }
            _ => {
                if let Some(u) = &self.unknown_port_drops {
                    u.writer(wi).add(n as u64);
                }
            }
        }
        (n, DEST_DROP)
    }

    /// Stage 4 when the frames do not all go to one port: floods, and moves every frame of the
    /// batch, in order, into its output batch or back to the pool (a frame to one port was
    /// rewritten and counted in stage 3).
    fn move_stage(
        &self,
        wi: usize,
        scratch: &mut Vec<u16>,
        credit: &mut Option<u64>,
        meta: &mut [FrameMeta],
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        for (mut pkt, m) in rx.pkts.drain(..).zip(meta) {
            let verdict = match m.dest {
                DEST_DROP => None,
                DEST_FLOOD => {
                    let v = self.flood(wi, scratch, credit, m, &mut pkt, out);
                    // No copy left (no_destination, flood_rate), or the last one was refused
                    // at its port: why; else none.
                    m.why = if v.is_none() {
                        crate::cells::last_drop()
                    } else {
                        0
                    };
                    v
                }
                e => Some(e as usize),
            };
            match verdict {
                Some(e) => out.ports[e].push(pkt),
                None => out.pool.put(pkt),
            }
        }
    }

    /// Floods to the VID's member ports that the flags, isolation and hairpin allow: pool copies
    /// to all targets but the last, which gets the original buffer (returned as the verdict).
    /// With a flood credit, the copies are paid for from it or the frame is dropped as
    /// `flood_rate` ([`Forwarder::set_flood_credit`]).
    #[inline(never)]
    fn flood(
        &self,
        wi: usize,
        scratch: &mut Vec<u16>,
        credit: &mut Option<u64>,
        m: &FrameMeta,
        pkt: &mut PacketBuf,
        out: &mut Outputs,
    ) -> Option<usize> {
        let ports = &self.ports[..];
        let in_id = pkt.port as usize;
        let inp = ports[in_id].as_deref().expect("ingress port exists");
        let br = self.bridges[m.bridge as usize]
            .as_deref()
            .expect("ingress bridge exists");
        let list = &br.flood[m.vid as usize & 0x0fff];
        scratch.clear();
        for &p in list.iter() {
            let Some(ep) = ports[p as usize].as_deref() else {
                continue;
            };
            let s = &ep.settings;
            let allowed = match m.flood {
                FloodClass::Unknown => s.flood,
                FloodClass::Broadcast => s.bcast_flood,
                FloodClass::Multicast => s.mcast_flood,
            };
            if !allowed
                || !ep.running
                || (p as usize == in_id && !inp.settings.hairpin)
                || (inp.settings.isolated && s.isolated)
                || ((inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, m.vid))
            {
                continue;
            }
            scratch.push(p);
        }
        let Some((&last, rest)) = scratch.split_last() else {
            inp.counters.writer(wi).drop(DropReason::NoDestination);
            return None;
        };
        if let Some(c) = credit {
            let copies = scratch.len() as u64;
            if *c < copies {
                inp.counters.writer(wi).drop(DropReason::FloodRate);
                return None;
            }
            *c -= copies;
        }
        for &p in rest {
            let mut copy = out.pool.get_copy(pkt);
            let ep = ports[p as usize].as_deref().expect("listed port exists");
            if flood_copy(br, ep, p as usize, wi, m, &mut copy) {
                out.ports[p as usize].push(copy);
            } else {
                out.pool.put(copy);
            }
        }
        let ep = ports[last as usize].as_deref().expect("listed port exists");
        flood_copy(br, ep, last as usize, wi, m, pkt).then_some(last as usize)
    }
}

/// A frame refused by the check that returned `None` (counted there): [`DEST_DROP`], its
/// reason kept for the drop watch. Out of line, so the forwarding path does not carry it.
#[cold]
#[inline(never)]
fn refused(m: &mut FrameMeta) -> u16 {
    m.why = crate::cells::last_drop();
    DEST_DROP
}

/// [`rewrite_tag`] for one flooded copy, counted at once (flood targets change every copy, so
/// there is no run to sum).
#[inline(always)]
fn flood_copy(
    br: &Bridge,
    ep: &PortRecord,
    e: usize,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> bool {
    let Some(len) = rewrite_tag(ep, wi, m, pkt) else {
        return false;
    };
    let c = ep.counters.writer(wi);
    let len = len as u64;
    c.tx_frames.add(1);
    c.tx_bytes.add(len);
    let vc = br.vlan_counters.writer(wi, m.vid);
    vc.tx_frames.add(1);
    vc.tx_bytes.add(len);
    pkt.port = e as u16;
    true
}

/// Stage 3's learning when the lock-free half did not finish it: the writer's path, which alone
/// reads the learning limits of the bridge and the ingress port.
#[cold]
#[inline(never)]
fn learn_locked(
    br: &Bridge,
    inp: &PortRecord,
    key: u64,
    vid: u16,
    port: u16,
    now_ns: u64,
) -> Learned {
    br.fdb.learn_locked(
        key,
        port,
        now_ns,
        br.settings.fdb_max_learned,
        inp.settings.fdb_max_learned,
        vlan_limit(inp, vid),
    )
}

impl Path<'_> {
    /// `learn_inner_vid`: a destination unknown in its (VID, inner C-VID) FID may have an
    /// entry a user added (or the bridge's own address) in the VLAN's own FID, which applies
    /// to every inner VLAN of it. Stage 3's work for such a hit, counted at once (off the
    /// tallies): the destination (a port, or [`DEST_DROP`]); `None` when there is no such
    /// entry (the frame floods).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn user_entry(
        &self,
        wi: usize,
        br: &Bridge,
        table: TableView<'_>,
        inp: &PortRecord,
        c: &PortCells,
        m: &FrameMeta,
        pkt: &mut PacketBuf,
        ageing_off: bool,
    ) -> Option<u16> {
        let (_, entry) = table
            .find(fid_key(m.dst, m.vid))
            .filter(|(_, e)| !(e.is_learned() || (ageing_off && e.ages())))?;
        let in_id = pkt.port as usize;
        let (ep, e) = if entry.flags & F_PERMANENT != 0 {
            local(&self.ports, br, inp, in_id, c, m)
        } else {
            (
                unicast(&self.ports, inp, in_id, c, wi, &entry, m),
                entry.port,
            )
        };
        let Some(ep) = ep else {
            return Some(DEST_DROP);
        };
        Some(if flood_copy(br, ep, usize::from(e), wi, m, pkt) {
            e
        } else {
            DEST_DROP
        })
    }
}

/// A frame from a new source over its port's limit in its VLAN: dropped under the violation
/// mode's reason (the daemon acts on `restrict` and `shutdown`).
#[cold]
#[inline(never)]
fn mac_limit_drop(inp: &PortRecord, c: &PortCells, vid: u16) {
    let code = inp
        .vlan_limits
        .as_ref()
        .map_or(0, |t| t[usize::from(vid & 0x0fff)]);
    c.drop(match violation_of(code) {
        Violation::Protect => DropReason::MacLimit,
        Violation::Restrict => DropReason::MacLimitRestrict,
        Violation::Shutdown => DropReason::MacLimitShutdown,
    });
}

/// Tables smaller than this stay in cache and are not worth a warming pass.
const FDB_WARM_MIN_SLOTS: usize = 1 << 17;

/// Touches the FDB home slots of every classified frame's source and destination so the misses
/// of a large table overlap (memory-level parallelism) before stage 3, which then finds them
/// cached. Reads only.
#[inline(never)]
fn warm_fdb(t: TableView, meta: &[FrameMeta]) {
    let mut acc = 0u64;
    for m in meta {
        if m.dest != DEST_DROP {
            acc ^= t.touch(fid_key(m.src, m.fid())) ^ t.touch(fid_key(m.dst, m.fid()));
        }
    }
    std::hint::black_box(acc);
}

/// Stage 3 for a destination that is a permanent (local) entry: the bridge itself. To its host
/// port when it has one, with the checks on the way to any port; else dropped as `local`.
/// Returns the port (`None`: dropped, counted) and its id.
#[cold]
#[inline(never)]
fn local<'a>(
    ports: &'a Ports,
    br: &Bridge,
    inp: &PortRecord,
    in_id: usize,
    c: &PortCells,
    m: &FrameMeta,
) -> (Option<&'a PortRecord>, u16) {
    let Some(h) = br.host else {
        return (drop_port(c, DropReason::Local), 0);
    };
    let e = h as usize;
    if e == in_id && !inp.settings.hairpin {
        return (drop_port(c, DropReason::SamePort), h);
    }
    let Some(Some(ep)) = ports.get(e) else {
        return (drop_port(c, DropReason::EgressDown), h);
    };
    if m.filtering && !ep.member.contains(m.vid) {
        return (drop_port(c, DropReason::EgressNotMember), h);
    }
    if !ep.running {
        return (drop_port(c, DropReason::EgressDown), h);
    }
    (Some(ep), h)
}

/// Stage 3 and 4 for a frame to a permanent (local) entry ([`local`]): rewritten, size-checked
/// and counted at once. Returns its destination.
#[cold]
#[inline(never)]
fn local_out(
    ports: &Ports,
    br: &Bridge,
    inp: &PortRecord,
    in_id: usize,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> u16 {
    let c = inp.counters.writer(wi);
    match local(ports, br, inp, in_id, c, m) {
        (Some(ep), h) if flood_copy(br, ep, h as usize, wi, m, pkt) => h,
        _ => DEST_DROP,
    }
}

/// Stage 3 for a known unicast destination that is not local: the checks on the way to port
/// `entry.port`. Returns that port, or `None` when the frame is dropped (and counted).
#[inline(always)]
fn unicast<'a>(
    ports: &'a Ports,
    inp: &PortRecord,
    in_id: usize,
    c: &PortCells,
    wi: usize,
    entry: &Slot,
    m: &FrameMeta,
) -> Option<&'a PortRecord> {
    let e = entry.port as usize;
    if e == in_id && !inp.settings.hairpin {
        return drop_port(c, DropReason::SamePort);
    }
    let Some(Some(ep)) = ports.get(e) else {
        return drop_port(c, DropReason::EgressDown);
    };
    if m.filtering && !ep.member.contains(m.vid) {
        return drop_port(c, DropReason::EgressNotMember);
    }
    if !ep.sends && !sends_in(c, wi, ep, m.vid) {
        return None;
    }
    if inp.settings.isolated && ep.settings.isolated {
        return drop_port(c, DropReason::Isolated);
    }
    if (inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, m.vid) {
        return drop_port(c, DropReason::Pvlan);
    }
    Some(ep)
}

/// [`unicast`] for port `ep` when it passed them for the same entry in another VID: the checks
/// that depend on the VID, in their order there (the others pass again).
#[inline(always)]
fn unicast_vid<'a>(
    inp: &PortRecord,
    c: &PortCells,
    wi: usize,
    ep: &'a PortRecord,
    m: &FrameMeta,
) -> Option<&'a PortRecord> {
    if !ep.tx_member.contains(m.vid) {
        return egress_filter_drop(c, wi, ep, m.vid);
    }
    if (inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, m.vid) {
        return drop_port(c, DropReason::Pvlan);
    }
    Some(ep)
}

/// Known unicast to port `ep` when it is not [`PortRecord::sends`] (the egress-down test,
/// which also covers the spanning-tree state): not Forwarding in `vid` (`stp_discarding`,
/// counted on the egress port), or not running (`egress_down`, counted on the ingress port's
/// `c`). Whether the frame may go on.
#[cold]
#[inline(never)]
fn sends_in(c: &PortCells, wi: usize, ep: &PortRecord, vid: u16) -> bool {
    if ep.stp.as_ref().is_some_and(|s| !s.fwd.contains(vid)) {
        ep.counters.writer(wi).drop(DropReason::StpDiscarding);
        return false;
    }
    if !ep.running {
        c.drop(DropReason::EgressDown);
        return false;
    }
    true
}

/// [`unicast_vid`]'s egress filter, for port `ep`, which does not send in `vid`
/// ([`PortRecord::tx_member`]): not a member (`egress_not_member`, counted on the ingress port's `c`), or not Forwarding in
/// it (`stp_discarding`, counted on the egress port). Returns `None` (dropped).
#[cold]
#[inline(never)]
fn egress_filter_drop<'a>(
    c: &PortCells,
    wi: usize,
    ep: &PortRecord,
    vid: u16,
) -> Option<&'a PortRecord> {
    if ep.stp.as_ref().is_some_and(|s| !s.fwd.contains(vid))
        && (vid == 0 || ep.member.contains(vid))
    {
        ep.counters.writer(wi).drop(DropReason::StpDiscarding);
    } else {
        c.drop(DropReason::EgressNotMember);
    }
    None
}

/// Whether private-VLAN roles in `vid` let a frame go from `inp` to `ep`.
#[inline(always)]
pub(crate) fn pvlan_ok(inp: &PortRecord, ep: &PortRecord, vid: u16) -> bool {
    let code = |p: &PortRecord| p.pvlan.as_ref().map_or(0, |t| t[usize::from(vid & 0x0fff)]);
    pvlan_allows(code(inp), code(ep))
}
