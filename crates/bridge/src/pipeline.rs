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
//! VLAN classification (runt tag, reserved VID, no PVID), ingress filter, learning, then
//! forwarding: local, same port, egress filter, egress down, isolation, or flooding; and per copy
//! the oversize check on the egress port after the tag rewrite.

use crate::cells::{PortCells, VlanCounterSet};
use crate::config::{VlanProtocol, GROUP_FWD_8021AD};
use crate::counters::DropReason;
use crate::fdb::{Fdb, Learned, Slot, TableCache, TableView, F_LOCKED, F_PERMANENT};
use crate::switch::violation_of;
use crate::switch::{Bridge, Outputs, Plan, Port, Worker};
use crate::tagmap::InnerTag;
use crate::vlanmode::{pvlan_allows, Violation};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::Tpid;
use std::sync::Arc;

type Ports = [Option<Arc<Port>>];

/// The I/G bit of a MAC held in the low 48 bits of a u64.
const MAC_GROUP_BIT: u64 = 1 << 40;
const MAC_BROADCAST: u64 = 0xffff_ffff_ffff;
/// 01-80-C2-00-00-00: the IEEE 802.1D reserved groups are this plus 0..=15.
const LINK_LOCAL_BASE: u64 = 0x0180_c200_0000;

/// FDB key of a 48-bit MAC in FID `fid` (see `fdb::fdb_key`).
#[inline(always)]
fn fid_key(mac: u64, fid: u16) -> u64 {
    mac | ((fid as u64 & 0x7fff) << 48)
}

/// [`FrameMeta::dest`] of a frame that was dropped (and counted).
const DEST_DROP: u16 = u16::MAX;
/// [`FrameMeta::dest`] of a frame to flood (class in [`FrameMeta::flood`]).
const DEST_FLOOD: u16 = u16::MAX - 1;
/// Not a [`FrameMeta::dest`]: the frames of a run or batch do not all share one destination.
const DEST_MIXED: u16 = u16::MAX - 2;
const _: () = assert!(crate::switch::MAX_PORTS < DEST_MIXED as usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FloodClass {
    Unknown,
    Broadcast,
    Multicast,
}

/// What the ingress stages decided about one frame: the batch's per-frame metadata (VPP's
/// buffer opaque), kept in [`Worker`] beside the batch, index for index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameMeta {
    /// Destination MAC as a 48-bit integer.
    dst: u64,
    /// Source MAC as a 48-bit integer.
    src: u64,
    /// Egress port id, [`DEST_FLOOD`], or [`DEST_DROP`].
    dest: u16,
    /// VID; 0 on a VLAN-unaware bridge.
    vid: u16,
    /// With `learn_inner_vid`, the FID of (VID, inner C-VID) XOR the VID; 0 otherwise (the
    /// FID is the VID), so that classification need not write it ([`FrameMeta::fid`]).
    fid_x: u16,
    /// PCP and DEI bits to keep when the tag is rewritten (0 when untagged).
    tci_hi: u16,
    /// Bridge id of the ingress port.
    bridge: u16,
    /// The frame carries a bridge tag at offset 12 (tagged or priority-tagged).
    tagged: bool,
    /// The bridge filters VLANs (tags are rewritten on egress).
    filtering: bool,
    flood: FloodClass,
}

const _: () = assert!(core::mem::size_of::<FrameMeta>() == 32);

impl FrameMeta {
    /// FID of the frame's FDB keys: its VID, or with `learn_inner_vid` that of (VID, inner
    /// C-VID).
    #[inline(always)]
    fn fid(&self) -> u16 {
        self.vid ^ self.fid_x
    }

    const DROPPED: FrameMeta = FrameMeta {
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
    };
}

/// Frames and bytes of a run of frames with one key (a port id, a VID), written to the
/// counters once per run instead of once per frame.
struct Tally {
    key: usize,
    frames: u64,
    bytes: u64,
}

impl Tally {
    const NONE: usize = usize::MAX;

    fn new() -> Tally {
        Tally {
            key: Tally::NONE,
            frames: 0,
            bytes: 0,
        }
    }

    /// Adds a frame of `bytes` under `key`; when the key changes, returns the finished run.
    #[inline(always)]
    fn add(&mut self, key: usize, bytes: u64) -> Option<(usize, u64, u64)> {
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
    fn take(&mut self) -> Option<(usize, u64, u64)> {
        let done = (self.key != Tally::NONE).then_some((self.key, self.frames, self.bytes));
        self.key = Tally::NONE;
        done
    }
}

#[inline(always)]
fn count_vlan_rx(set: &VlanCounterSet, wi: usize, run: (usize, u64, u64)) {
    let v = set.writer(wi, run.0 as u16);
    v.rx_frames.add(run.1);
    v.rx_bytes.add(run.2);
}

#[inline(always)]
fn count_vlan_tx(set: &VlanCounterSet, wi: usize, run: (usize, u64, u64)) {
    let v = set.writer(wi, run.0 as u16);
    v.tx_frames.add(run.1);
    v.tx_bytes.add(run.2);
}

/// Where a frame to a known unicast destination goes, and what has been sent that way: the key
/// of the FDB entry's port and flags and the frame's VID ([`route_key`]) that last passed the
/// unicast checks, its egress port, and the frames and bytes sent on it since it was taken.
/// The port records do not change within a batch, so a frame with the same key passes the same
/// checks: one compare stands for the entry's tests (locked, permanent, ageing off) and the
/// checks.
struct Route<'a> {
    key: u64,
    port: &'a Port,
    /// What [`egress`] does to the bridge tag of the route's frames ([`route_tag`]).
    tag: u32,
    frames: u64,
    bytes: u64,
}

impl Route<'_> {
    /// A key that matches no entry.
    const NONE: u64 = u64::MAX;
}

/// [`Route::tag`] for frames that leave as they are (a bridge that does not filter VLANs).
const TAG_KEEP: u32 = u32::MAX - 2;
/// [`Route::tag`] for frames that leave untagged (the bridge tag popped if they carry one).
const TAG_POP: u32 = u32::MAX - 1;
/// [`Route::tag`] for frames whose tag is decided frame by frame (selective Q-in-Q and 2:1/2:2
/// maps on the egress port look at each frame's C-tag): the whole of [`egress`].
const TAG_FRAME: u32 = u32::MAX;

/// [`Route::tag`] of the frames in VLAN `vid` to port `ep`, as [`egress`] decides: a tag word
/// (the port's TPID << 16 | the wire VID; PCP and DEI clear, so below every marker) when they
/// leave tagged, else [`TAG_KEEP`], [`TAG_POP`] or [`TAG_FRAME`].
#[inline(always)]
fn route_tag(ep: &Port, vid: u16, filtering: bool) -> u32 {
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
    fn new(port: &'a Port) -> Tx<'a> {
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
    fn reroute(&mut self, key: u64, ep: &'a Port, tag: u32, br: &Bridge, wi: usize) {
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

impl Plan {
    /// The bridge pipeline: forwards every frame of `rx` (each buffer's `port` is its
    /// ingress bridge port) at time `now_ns` as worker `w`, appending what leaves to
    /// `out.ports[egress]`. `rx` is left empty. [`Plan::process`] calls it directly when no
    /// device is stacked on any port (`crate::stack`).
    pub(crate) fn process_flat(
        &self,
        w: &mut Worker,
        now_ns: u64,
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        out.ensure(self.ports.len());
        let Worker {
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
            self.egress_stage(wi, scratch, flood_credit, meta, rx, out);
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
            self.decide::<false>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
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
        inp: &Port,
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
            } else {
                self.decide::<false>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
            }
        };
        if let Some(i) = inner {
            i.exit(wi);
        }
        (n, one)
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
        inp: &Port,
        c: &PortCells,
        pkts: &mut [PacketBuf],
        meta: &mut [FrameMeta],
        live: usize,
    ) -> u16 {
        self.decide::<true>(wi, now_ns, br, cache, inp, c, pkts, meta, live)
    }

    /// Stages 2 and 3 for the classified run `pkts` (`live` frames not dropped): warm a large
    /// FDB table, then learn and decide frame by frame. Returns the destination every frame
    /// shares, or [`DEST_MIXED`]. `INNER`: the bridge learns per inner VID (the FID is
    /// [`FrameMeta::fid`], and a destination unknown for its pair may be a user's entry of the
    /// VLAN); else the FID is the VID.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn decide<const INNER: bool>(
        &self,
        wi: usize,
        now_ns: u64,
        br: &Bridge,
        cache: &mut TableCache,
        inp: &Port,
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
                    m.dest = DEST_DROP;
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
                                m.dest = DEST_DROP;
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
                                    continue;
                                }
                                let ep = if (key ^ tx.route.key) >> 16 == 0 {
                                    // The route's entry in another VID: the VID's checks.
                                    unicast_vid(inp, c, tx.route.port, m)
                                } else {
                                    unicast(&self.ports, inp, in_id, c, &entry, m)
                                };
                                let Some(ep) = ep else {
                                    m.dest = DEST_DROP;
                                    continue;
                                };
                                let tag = route_tag(ep, m.vid, m.filtering);
                                tx.reroute(key, ep, tag, br, wi);
                            }
                            // Stage 4's per-frame work for one egress port, done here while
                            // the frame's metadata is at hand.
                            match egress_route(&tx.route, wi, m, pkt) {
                                Some(len) => {
                                    tx.route.frames += 1;
                                    tx.route.bytes += len as u64;
                                    pkt.port = entry.port;
                                    entry.port
                                }
                                None => DEST_DROP,
                            }
                        }
                        None if INNER && m.fid_x != 0 => {
                            match self.user_entry(wi, br, table, inp, c, m, pkt, ageing_off) {
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
    fn egress_stage(
        &self,
        wi: usize,
        scratch: &mut Vec<u16>,
        credit: &mut Option<u64>,
        meta: &[FrameMeta],
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        for (mut pkt, m) in rx.pkts.drain(..).zip(meta) {
            let verdict = match m.dest {
                DEST_DROP => None,
                DEST_FLOOD => self.flood(wi, scratch, credit, m, &mut pkt, out),
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
    /// `flood_rate` ([`Worker::set_flood_credit`]).
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

/// [`egress`] for one flooded copy, counted at once (flood targets change every copy, so
/// there is no run to sum).
#[inline(always)]
fn flood_copy(
    br: &Bridge,
    ep: &Port,
    e: usize,
    wi: usize,
    m: &FrameMeta,
    pkt: &mut PacketBuf,
) -> bool {
    let Some(len) = egress(ep, wi, m, pkt) else {
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
fn learn_locked(br: &Bridge, inp: &Port, key: u64, vid: u16, port: u16, now_ns: u64) -> Learned {
    br.fdb.learn_locked(
        key,
        port,
        now_ns,
        br.settings.fdb_max_learned,
        inp.settings.fdb_max_learned,
        vlan_limit(inp, vid),
    )
}

/// The ingress port's learning limit in VLAN `vid` (0: none).
fn vlan_limit(inp: &Port, vid: u16) -> u32 {
    inp.vlan_limits
        .as_ref()
        .map_or(0, |t| t[usize::from(vid & 0x0fff)] & 0x00ff_ffff)
}

impl Plan {
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
        inp: &Port,
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
            (unicast(&self.ports, inp, in_id, c, &entry, m), entry.port)
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
fn mac_limit_drop(inp: &Port, c: &PortCells, vid: u16) {
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
fn gso_segment_len(pkt: &PacketBuf, tpid: u16) -> usize {
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

/// Marks `m`'s frame dropped for `reason`, counted (only [`FrameMeta::dest`] is read of a
/// dropped frame).
#[inline(always)]
fn drop_into(m: &mut FrameMeta, counters: &PortCells, reason: DropReason) {
    m.dest = DEST_DROP;
    count_drop(counters, reason);
}

#[cold]
#[inline(never)]
fn count_drop(counters: &PortCells, reason: DropReason) {
    counters.drop(reason);
}

#[cold]
#[inline(never)]
fn drop_port<'a>(counters: &PortCells, reason: DropReason) -> Option<&'a Port> {
    counters.drop(reason);
    None
}

/// A `dot1q-tunnel` port's customer VLAN of a frame whose bytes 12..16 are `tag`, `len` bytes
/// long: the VID of its 0x8100 outer tag, 0 when it has none (`cvlans` on ingress and egress).
#[inline(always)]
fn customer_vid(tag: u32, len: usize) -> u16 {
    if (tag >> 16) as u16 == 0x8100 && len >= 18 {
        tag as u16 & 0x0fff
    } else {
        0
    }
}

/// Bytes 0..8, 4..12 and 12..16 of a frame header as big-endian words.
#[inline(always)]
fn header_words(h: &[u8; 16]) -> (u64, u64, u32) {
    let (a, rest) = h.split_at(8);
    let w0 = u64::from_be_bytes(a.try_into().unwrap_or_default());
    let w1 = u64::from_be_bytes(h[4..12].try_into().unwrap_or_default());
    let tag = u32::from_be_bytes(rest[4..8].try_into().unwrap_or_default());
    (w0, w1, tag)
}

/// Stage 1 for the run of frames at the start of `pkts` from one ingress port: classifies each
/// into `meta` and counts the run's rx frames and bytes, its VLAN rx and per-PCP rx counters.
/// Returns the run's length and how many of its frames are live (not dropped).
///
/// `PLAIN`: the port uses none of the provider features ([`Port::plain`]), so a frame untagged
/// to the bridge has PCP 0: only tagged frames with another PCP are counted one by one (in
/// [`classify`], which adds them to `counted`); the rest in `rx_pcp[0]` once per run.
#[inline(always)]
fn classify_run<const PLAIN: bool>(
    br: &Bridge,
    bi: u16,
    inp: &Port,
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
fn classify_run_features(
    br: &Bridge,
    bi: u16,
    inp: &Port,
    c: &PortCells,
    wi: usize,
    pkts: &mut [PacketBuf],
    meta: &mut [FrameMeta],
) -> (usize, usize) {
    let (n, live) = classify_run::<false>(br, bi, inp, c, wi, pkts, meta);
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
                let svid = f
                    .get(14..16)
                    .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]) & 0x0fff);
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

/// Stage 1 for one frame: everything decided from the frame and its ingress port alone.
/// `PLAIN`: [`Port::plain`] holds (the provider features' tests are left out).
#[inline(always)]
fn classify<const PLAIN: bool>(
    br: &Bridge,
    bi: u16,
    inp: &Port,
    c: &PortCells,
    pkt: &PacketBuf,
    counted: &mut usize,
    m: &mut FrameMeta,
) {
    let len = pkt.len();
    if len < 14 {
        return drop_into(m, c, DropReason::Runt);
    }
    if wire_len(pkt, inp.tpid) > inp.max_frame as usize {
        return drop_into(m, c, DropReason::Oversize);
    }
    // The first 16 bytes as words: MACs as 48-bit integers (the class tests below are single
    // compares), and the outer tag (TPID and TCI). A 14..15-byte frame is zero-padded; its tag
    // is checked against `len` below.
    let frame = pkt.frame();
    let (w0, w1, tag) = match frame.first_chunk::<16>() {
        Some(h) => header_words(h),
        None => {
            let mut h = [0u8; 16];
            let n = frame.len().min(16);
            h[..n].copy_from_slice(&frame[..n]);
            header_words(&h)
        }
    };
    let dst = w0 >> 16;
    let src = w1 & MAC_BROADCAST;
    if src & MAC_GROUP_BIT != 0 || src == 0 {
        return drop_into(m, c, DropReason::InvalidSrcMac);
    }
    if dst & !0xf == LINK_LOCAL_BASE && !link_local_forwarded(br, (dst & 0xf) as u8) {
        return drop_into(m, c, DropReason::LinkLocal);
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
fn locked_admits(
    ports: &[Option<Arc<Port>>],
    wi: usize,
    br: &Bridge,
    table: TableView<'_>,
    inp: &Port,
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

/// Whether bridge `br` forwards link-local group 01-80-C2-00-00-0`group`. No STP in qbridge:
/// 01-80-C2-00-00-00 is forwarded, as by a Linux bridge with STP off; MAC pause (01) never.
#[inline(always)]
pub(crate) fn link_local_forwarded(br: &Bridge, group: u8) -> bool {
    let mut mask = br.settings.group_fwd_mask;
    if br.settings.vlan_protocol == VlanProtocol::Dot1Ad {
        mask |= GROUP_FWD_8021AD;
    }
    group == 0 || (group != 1 && mask & (1 << group) != 0)
}

/// Stage 3 for a destination that is a permanent (local) entry: the bridge itself. To its host
/// port when it has one, with the checks on the way to any port; else dropped as `local`.
/// Returns the port (`None`: dropped, counted) and its id.
#[cold]
#[inline(never)]
fn local<'a>(
    ports: &'a Ports,
    br: &Bridge,
    inp: &Port,
    in_id: usize,
    c: &PortCells,
    m: &FrameMeta,
) -> (Option<&'a Port>, u16) {
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
    inp: &Port,
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
    inp: &Port,
    in_id: usize,
    c: &PortCells,
    entry: &Slot,
    m: &FrameMeta,
) -> Option<&'a Port> {
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
    if !ep.running {
        return drop_port(c, DropReason::EgressDown);
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
fn unicast_vid<'a>(inp: &Port, c: &PortCells, ep: &'a Port, m: &FrameMeta) -> Option<&'a Port> {
    if m.filtering && !ep.member.contains(m.vid) {
        return drop_port(c, DropReason::EgressNotMember);
    }
    if (inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, m.vid) {
        return drop_port(c, DropReason::Pvlan);
    }
    Some(ep)
}

/// Selective Q-in-Q on egress port `ep`: whether the frame's inner C-tag (behind the bridge
/// tag, or outermost when the frame entered untagged to the bridge) has a VID `ep` maps to the
/// frame's VLAN, so that it leaves without the bridge tag.
#[cold]
#[inline(never)]
fn cvid_untags(ep: &Port, m: &FrameMeta, pkt: &PacketBuf) -> bool {
    let at = if m.tagged { 16 } else { 12 };
    let f = pkt.frame();
    let Some(t) = ep.cvid_in.as_ref() else {
        return false;
    };
    match f.get(at..at + 4) {
        Some(c) if c[0] == 0x81 && c[1] == 0x00 => {
            let cvid = u16::from_be_bytes([c[2], c[3]]) & 0x0fff;
            t[usize::from(cvid)] == m.vid
        }
        _ => false,
    }
}

/// The VLAN inside the bridge of a frame tagged to the bridge with (wire) VID `v` on a port
/// with VLAN maps: a 2:1 or 2:2 map of `v` and the C-tag right behind the bridge tag (its
/// change to that C-tag goes to `op`), else a 1:1 map of `v`, else `v` — or 0 when `v` (or
/// `v` with that C-tag) is what a map sends translated (dropped as `translated_vid`).
#[cold]
#[inline(never)]
fn map_in(inp: &Port, v: u16, frame: &[u8]) -> u16 {
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
fn inner_fid(br: &Bridge, m: &FrameMeta, pkt: &PacketBuf) -> u16 {
    let at = if m.tagged { 16 } else { 12 };
    let f = pkt.frame();
    match f.get(at..at + 4) {
        Some(c) if c[0] == 0x81 && c[1] == 0x00 && f.len() >= at + 6 => {
            match u16::from_be_bytes([c[2], c[3]]) & 0x0fff {
                0 => m.vid,
                cvid => br.fdb.inner_fids().fid(m.vid, cvid),
            }
        }
        _ => m.vid,
    }
}

/// The VID of the C-tag (0x8100) right behind a frame's bridge tag (0: none there).
fn inner_cvid(frame: &[u8]) -> u16 {
    match frame.get(16..20) {
        Some(c) if c[0] == 0x81 && c[1] == 0x00 && frame.len() >= 22 => {
            u16::from_be_bytes([c[2], c[3]]) & 0x0fff
        }
        _ => 0,
    }
}

/// Makes a two-tag map's change to the C-tag at offset 16 of a frame: removed, or its VID set
/// (PCP and DEI kept).
#[cold]
#[inline(never)]
fn apply_inner_tag(op: InnerTag, pkt: &mut PacketBuf) {
    match op {
        InnerTag::Pop => {
            if pkt.remove_tag(16) {
                pkt.offload.shift_headers(-4);
            }
        }
        InnerTag::Set(c) => {
            if let Some(t) = pkt.frame_mut().get_mut(18..20) {
                let tci = u16::from_be_bytes([t[0], t[1]]) & 0xf000 | (c & 0x0fff);
                t.copy_from_slice(&tci.to_be_bytes());
            }
        }
        InnerTag::Push(_) => {}
    }
}

/// Two-tag maps on egress port `ep` for a frame leaving tagged: a 2:2 map of the frame's VLAN
/// and its C-tag (behind the bridge tag, or outermost when the frame is untagged to the
/// bridge) rewrites the C-tag's VID, a 2:1 map of the VLAN pushes a C-tag behind the bridge
/// tag (PCP and DEI those of the bridge tag); either way the bridge tag gets the map's S-VID.
/// Returns false (frame untouched) when no map applies.
#[cold]
#[inline(never)]
fn map_out(ep: &Port, m: &FrameMeta, pkt: &mut PacketBuf) -> bool {
    let Some(t) = ep.tag2.as_ref() else {
        return false;
    };
    let at = if m.tagged { 16 } else { 12 };
    let f = pkt.frame();
    let inner = match f.get(at..at + 4) {
        Some(c) if c[0] == 0x81 && c[1] == 0x00 => Some(u16::from_be_bytes([c[2], c[3]]) & 0x0fff),
        _ => None,
    };
    let Some((svid, op)) = t.egress(m.vid, inner) else {
        return false;
    };
    set_bridge_tag(pkt, m.tagged, ep.tpid, m.tci_hi | svid);
    match op {
        InnerTag::Set(c) => apply_inner_tag(InnerTag::Set(c), pkt),
        InnerTag::Push(c) => {
            let ctag = (0x8100u32 << 16 | (m.tci_hi | c) as u32).to_be_bytes();
            if pkt.insert_tag(16, ctag) {
                pkt.offload.shift_headers(4);
            }
        }
        InnerTag::Pop => {}
    }
    true
}

/// Whether private-VLAN roles in `vid` let a frame go from `inp` to `ep`.
#[inline(always)]
fn pvlan_ok(inp: &Port, ep: &Port, vid: u16) -> bool {
    let code = |p: &Port| p.pvlan.as_ref().map_or(0, |t| t[usize::from(vid & 0x0fff)]);
    pvlan_allows(code(inp), code(ep))
}

/// `vlan map … translate` on egress: the wire VID of VLAN `vid` through map `t`.
#[cold]
#[inline(never)]
fn vid_out(t: &[u16], vid: u16) -> u16 {
    match t[usize::from(vid)] {
        0 => vid,
        w => w,
    }
}

/// Gives the frame the bridge tag `tpid`/`tci` outermost: in place of the one it has
/// (`tagged`), or pushed.
#[inline(always)]
fn set_bridge_tag(pkt: &mut PacketBuf, tagged: bool, tpid: u16, tci: u16) {
    let tag = ((tpid as u32) << 16 | tci as u32).to_be_bytes();
    if tagged {
        if let Some(t) = pkt.frame_mut().get_mut(12..16) {
            t.copy_from_slice(&tag);
        }
    } else {
        pkt.insert_tag(12, tag);
        pkt.offload.shift_headers(4);
    }
}

/// Rewrites the bridge tag for egress port `ep` and checks the size (an oversize copy is
/// counted on the egress port). Returns the frame's length when it may leave.
#[inline(always)]
fn egress(ep: &Port, wi: usize, m: &FrameMeta, pkt: &mut PacketBuf) -> Option<usize> {
    if m.filtering {
        if ep.untagged.contains(m.vid) || (ep.cvid_in.is_some() && cvid_untags(ep, m, pkt)) {
            if m.tagged {
                pkt.remove_tag(12);
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
fn cvlan_leaves(ep: &Port, wi: usize, pkt: &PacketBuf) -> bool {
    let Some(cvlans) = ep.cvlans.as_deref() else {
        return true;
    };
    let f = pkt.frame();
    // A frame shorter than a tag reads as untagged (zeros past its end).
    let mut h = [0u8; 16];
    let n = f.len().min(16);
    h[..n].copy_from_slice(&f[..n]);
    if cvlans.contains(customer_vid(header_words(&h).2, f.len())) {
        return true;
    }
    count_drop(ep.counters.writer(wi), DropReason::EgressCvlanNotAllowed);
    false
}

/// The egress size check of [`egress`] on a rewritten frame (an oversize frame is counted on
/// the egress port). Returns the frame's length when it may leave.
#[inline(always)]
fn egress_size(ep: &Port, wi: usize, pkt: &PacketBuf) -> Option<usize> {
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

/// [`egress`] for a frame on `route`, with the tag decision taken when the route was
/// ([`route_tag`]).
#[inline(always)]
fn egress_route(route: &Route, wi: usize, m: &FrameMeta, pkt: &mut PacketBuf) -> Option<usize> {
    let ep = route.port;
    match route.tag {
        TAG_KEEP => {}
        TAG_POP => {
            if m.tagged {
                pkt.remove_tag(12);
                pkt.offload.shift_headers(-4);
            }
        }
        TAG_FRAME => return egress_frame(ep, wi, m, pkt),
        tag => {
            let tag = (tag | m.tci_hi as u32).to_be_bytes();
            if m.tagged {
                if let Some(t) = pkt.frame_mut().get_mut(12..16) {
                    t.copy_from_slice(&tag);
                }
            } else {
                pkt.insert_tag(12, tag);
                pkt.offload.shift_headers(4);
            }
        }
    }
    egress_size(ep, wi, pkt)
}

/// [`egress`], out of line: a route whose frames' tags are decided one by one.
#[cold]
#[inline(never)]
fn egress_frame(ep: &Port, wi: usize, m: &FrameMeta, pkt: &mut PacketBuf) -> Option<usize> {
    egress(ep, wi, m, pkt)
}
