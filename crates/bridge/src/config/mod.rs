//! The configuration room: the [`Switch`] (bridges, ports, their configuration operations, and
//! views for the control plane) and, re-exported from `crate::settings`, the settings types.
//!
//! Imports run one way: this room imports the plan (`crate::plan`: the records it changes and
//! the compile functions) and, only to hold worker 0 and forward for [`Switch::process`], the
//! frame path (`crate::path`). Neither imports this room. Operations live by subject: links and
//! stacked devices in `ports`, VLANs in `vlans`, FDB in `fdb`, views in `views`, mirror
//! sessions in `mirror`, spanning-tree port states in `stp`.
//!
//! Names share one namespace, as network devices do: a bridge and a port cannot have the same
//! name. Ports have stable ids ([`PortId`]) for as long as they exist; the I/O layer uses them to
//! tag received frames and to pick the backend for each output batch.
//!
//! Every operation validates before it changes anything. Dense forwarding state (per-port VID
//! bitmaps, the per-VID flood lists, per-port frame-size limits) is recompiled by the operation
//! that changes its inputs, never on the fast path.

mod fdb;
mod mirror;
mod ports;
mod stp;
mod views;
mod vlans;

pub use crate::settings::*;
pub use mirror::MirrorView;
pub use views::{tpid_name, LinkInfo, LinkInfoData, LinkView, PortView, VlanEntryView, VlanView};

use crate::cells::{CellSet, PortCounterSet, VlanCounterSet};
use crate::counters::{DropReason, PortCounters, VlanCounters};
use crate::error::{ConfigError, MirrorError};
use crate::fdb::{
    fdb_key, key_fid, key_mac, AddError, Fdb, FdbEntryView, FdbFilter, FdbFlushKind, FdbFlushMatch,
    FdbKind, FdbMove, FIRST_INNER_FID, F_EXTERN, F_LOCKED, F_PERMANENT, F_STATIC, F_STICKY, F_USER,
};
use crate::path::{Forwarder, Outputs};
use crate::plan::compile::Records;
use crate::plan::mirror::{Dst, MirrorCounterSet, MirrorSession};
use crate::plan::{Bridge, BridgeId, Plan, PortId, PortRecord, MAX_PORTS};
use crate::tagmap::{TagMap, TagMaps};
use crate::vlanmode::{violation_of, PvlanRole, Violation, VlanMode};
use crate::vlanset::VlanSet;
use qbridge_packet::Batch;
use qbridge_wire::{MacAddr, Tpid};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Longest `ageing_time`: 1,000,000 seconds.
pub const MAX_AGEING_NS: u64 = 1_000_000 * 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Bridge(u16),
    Port(u16),
}

/// Counter-block index of the control plane (configuration operations that count, such as
/// an eviction caused by `fdb add`): the last block of every counter set.
const CONTROL_WRITER: usize = usize::MAX;

/// Bridges, ports and their forwarding state: the control plane's object.
///
/// Configuration lives in `Arc`-shared per-port and per-bridge records; [`Switch::plan`]
/// publishes an immutable [`Plan`] of them (a vector of `Arc`s, O(ports + bridges) to make),
/// which any number of datapath workers forward with at once. A change copies only the records
/// it touches (copy-on-write); the FDB and the counters are shared, not copied.
/// [`Switch::process`] forwards on the calling thread as worker 0.
///
/// `clone` is a deep copy of the configuration *and* the FDB (what a batch of commands works
/// on before it is committed); counters stay shared.
#[derive(Debug)]
pub struct Switch {
    /// The per-port and per-bridge records and the published plan (`None` after a change).
    pub(crate) recs: Records,
    names: HashMap<String, Link>,
    /// The time of the latest `process` or `age` call, for entries added by commands.
    pub(crate) now_ns: u64,
    /// Datapath workers that will count (each gets a counter block; the control plane one more).
    workers: usize,
    /// Frames handed in with a port id that names no port (an I/O layer's mistake), per worker.
    pub(crate) unknown_port_drops: Arc<CellSet>,
    next_generation: u32,
    /// The slot the next port takes (`link add … index N`), instead of the first free one.
    next_index: Option<u16>,
    /// The datapath state of [`Switch::process`] (worker 0).
    worker: Forwarder,
    /// Port mirroring sessions, in creation order (`mirror`).
    pub(crate) mirrors: Vec<MirrorSession>,
}

impl Default for Switch {
    fn default() -> Self {
        Switch::with_workers(1)
    }
}

impl Clone for Switch {
    fn clone(&self) -> Switch {
        let mut s = self.share_fdb();
        for b in s.recs.bridges.iter_mut().flatten() {
            let mut copy = Bridge::clone(b);
            copy.fdb = Arc::new(Fdb::clone(&b.fdb));
            *b = Arc::new(copy);
        }
        s
    }
}

impl Switch {
    /// A copy of the configuration that shares this switch's FDB and counters instead of
    /// copying them: what `trace live` holds, so that each frame it traces is walked through a
    /// sandbox ([`Switch::trace_packet`]) of the FDB as it is when that frame arrives.
    pub fn share_fdb(&self) -> Switch {
        Switch {
            recs: Records {
                bridges: self.recs.bridges.clone(),
                ports: self.recs.ports.clone(),
                plan: None,
            },
            names: self.names.clone(),
            now_ns: self.now_ns,
            workers: self.workers,
            unknown_port_drops: self.unknown_port_drops.clone(),
            next_generation: self.next_generation,
            next_index: self.next_index,
            worker: Forwarder::new(0),
            mirrors: self.mirrors.clone(),
        }
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(ConfigError::BadName(name.to_string()))
    }
}

/// Checks a VID for membership: 1..=4094.
pub fn check_vid(vid: u32) -> Result<u16, ConfigError> {
    match vid {
        4095 => Err(ConfigError::ReservedVid(4095)),
        1..=4094 => Ok(vid as u16),
        _ => Err(ConfigError::VidOutOfRange(vid)),
    }
}

pub(crate) fn check_bridge_settings(s: &BridgeSettings) -> Result<(), ConfigError> {
    if s.default_pvid != 0 {
        check_vid(s.default_pvid as u32)?;
    }
    if s.group_fwd_mask & GROUP_FWD_RESTRICTED != 0 {
        return Err(ConfigError::RestrictedGroupFwdMask(s.group_fwd_mask));
    }
    if s.ageing_time_ns != 0 && !(1_000_000_000..=MAX_AGEING_NS).contains(&s.ageing_time_ns) {
        return Err(ConfigError::BadAgeingTime(format!(
            "{}",
            s.ageing_time_ns as f64 / 1e9
        )));
    }
    if s.fdb_max_entries == 0 || s.fdb_max_entries > FDB_LIMIT_MAX_ENTRIES {
        return Err(ConfigError::BadFdbMaxEntries(s.fdb_max_entries));
    }
    Ok(())
}

/// Sets entry `v` of a VID map (0 clears); the map goes away when empty.
pub(crate) fn set_map(map: &mut Option<Arc<[u16]>>, v: u16, to: u16) {
    if map.is_none() && to == 0 {
        return;
    }
    let mut t: Vec<u16> = match map {
        Some(t) => t.to_vec(),
        None => vec![0; 4096],
    };
    t[usize::from(v)] = to;
    *map = t.iter().any(|&x| x != 0).then(|| Arc::from(t));
}

/// A two-tag map in the words that add it (for messages).
pub(crate) fn tag_map_words(m: &TagMap) -> String {
    match m.inner {
        None => format!("svid {} cvid {} (translate {})", m.svid, m.cvid, m.vid),
        Some(c) => format!("svid {} cvid {} (translate {} {c})", m.svid, m.cvid, m.vid),
    }
}

/// Port `p`'s learning limit in `vid`, if it has one.
pub(crate) fn limit_of(p: &PortRecord, vid: u16) -> Option<(u32, Violation)> {
    let code = p.vlan_limits.as_ref()?[usize::from(vid & 0x0fff)];
    (code != 0).then(|| (code & 0x00ff_ffff, violation_of(code)))
}

/// Sets entries `start..=end` of a per-VID code table (0 clears); the table goes away when
/// every entry is 0.
pub(crate) fn set_codes(table: &mut Option<Arc<[u32]>>, start: u16, end: u16, code: u32) {
    if table.is_none() && code == 0 {
        return;
    }
    let mut t: Vec<u32> = match table {
        Some(t) => t.to_vec(),
        None => vec![0; 4096],
    };
    for v in start..=end {
        t[usize::from(v)] = code;
    }
    *table = t.iter().any(|&c| c != 0).then(|| Arc::from(t));
}

/// Sets the per-VLAN limit code of `start..=end` on `port` (0 clears).
pub(crate) fn set_limit_codes(port: &mut PortRecord, start: u16, end: u16, code: u32) {
    set_codes(&mut port.vlan_limits, start, end, code);
}

/// Sets the private-VLAN code of `start..=end` on `port` (0 clears).
pub(crate) fn set_pvlan_codes(port: &mut PortRecord, start: u16, end: u16, code: u32) {
    set_codes(&mut port.pvlan, start, end, code);
}

/// `pcp_mode` and `default_pcp` as the classifier reads them: (read the frame's own tag,
/// TCI bits 12-15 for a frame with none, TCI bits 12-15 by the frame's tag's bits 12-15).
pub(crate) fn check_port_settings(s: &PortSettings) -> Result<(), ConfigError> {
    // As Linux's `br_setport`: MAB needs a locked port that learns.
    if s.mab && !s.locked {
        return Err(ConfigError::MabNeedsLocked);
    }
    if s.mab && !s.learning {
        return Err(ConfigError::MabNeedsLearning);
    }
    let bad_pcp = |n: u8| n > 7;
    match s.pcp_mode {
        PcpMode::Fixed(n) if bad_pcp(n) => return Err(ConfigError::BadPcp(n)),
        PcpMode::Map(m) => {
            if let Some(&n) = m.iter().find(|&&n| bad_pcp(n)) {
                return Err(ConfigError::BadPcp(n));
            }
        }
        _ => {}
    }
    if bad_pcp(s.default_pcp) {
        return Err(ConfigError::BadPcp(s.default_pcp));
    }
    if !(68..=65535).contains(&s.mtu) {
        return Err(ConfigError::BadMtu(s.mtu));
    }
    if let Some(e) = s.envhdr_len {
        if e > MAX_ENVELOPE_FRAME - 1514 {
            return Err(ConfigError::BadEnvhdr(e));
        }
    }
    if let Some(t) = s.tpid {
        check_tpid(t)?;
    }
    Ok(())
}

/// TPIDs that would make ordinary traffic look tagged are refused.
pub fn check_tpid(t: Tpid) -> Result<(), ConfigError> {
    // IPv4, ARP, IPv6, and values below 0x0600 (802.3 lengths, not EtherTypes).
    if matches!(t.0, 0x0800 | 0x0806 | 0x86dd) || t.0 < 0x0600 {
        return Err(ConfigError::BadTpid(t.0));
    }
    Ok(())
}

impl Switch {
    pub fn new() -> Switch {
        Switch::default()
    }

    /// A switch whose counters have a block for each of `workers` datapath workers (numbered
    /// from 0) and one for the control plane.
    pub fn with_workers(workers: usize) -> Switch {
        let workers = workers.max(1);
        Switch {
            recs: Records::default(),
            names: HashMap::new(),
            now_ns: 0,
            workers,
            unknown_port_drops: CellSet::new(workers + 1),
            next_generation: 1,
            next_index: None,
            worker: Forwarder::new(0),
            mirrors: Vec::new(),
        }
    }

    /// Datapath workers the counters have blocks for.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The compiled state as of now, for datapath workers. Cheap when nothing changed since
    /// the last call (an `Arc` clone); otherwise O(ports + bridges) `Arc` clones.
    pub fn plan(&mut self) -> Arc<Plan> {
        if let Some(p) = &self.recs.plan {
            return p.clone();
        }
        let mirrors = crate::plan::mirror::compile(&self.mirrors, self.port_slots());
        self.recs.publish(&self.unknown_port_drops, mirrors)
    }

    /// Forwards every frame of `rx` (each buffer's `port` is its ingress port id) at time
    /// `now_ns` on the calling thread, as worker 0, appending what leaves to
    /// `out.ports[egress]`. `rx` is left empty.
    pub fn process(&mut self, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        if now_ns > self.now_ns {
            self.now_ns = now_ns;
        }
        let plan = self.plan();
        self.worker.process(&plan, now_ns, rx, out);
    }

    /// [`Forwarder::dropped`] of worker 0's last [`Switch::process`].
    pub fn dropped(&self, i: usize) -> Option<DropReason> {
        self.worker.dropped(i)
    }

    /// What worker 0's last [`Switch::process`] made of its first frame, dropped or not
    /// (`trace`).
    pub(crate) fn worker_class(&self) -> Option<crate::plan::fast::FastClass> {
        self.worker.class_of(0)
    }

    // ----- lookups -----

    pub(crate) fn link(&self, name: &str) -> Result<Link, ConfigError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| ConfigError::NoSuchDevice(name.to_string()))
    }

    /// The id of port `name`.
    pub fn port_id(&self, name: &str) -> Result<PortId, ConfigError> {
        match self.link(name)? {
            Link::Port(p) => Ok(PortId(p)),
            Link::Bridge(_) => Err(ConfigError::NotAPort(name.to_string())),
        }
    }

    /// The id of bridge `name`.
    pub fn bridge_id(&self, name: &str) -> Result<BridgeId, ConfigError> {
        match self.link(name)? {
            Link::Bridge(b) => Ok(BridgeId(b)),
            Link::Port(_) => Err(ConfigError::NotABridge(name.to_string())),
        }
    }

    pub fn is_bridge(&self, name: &str) -> bool {
        matches!(self.names.get(name), Some(Link::Bridge(_)))
    }

    pub fn exists(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    pub(crate) fn port(&self, id: PortId) -> &PortRecord {
        self.recs.port(id)
    }

    /// Port `id` for a change: copied first if a published plan still shares it.
    pub(crate) fn port_mut(&mut self, id: PortId) -> &mut PortRecord {
        self.recs.port_mut(id)
    }

    /// Bridge `id`'s FDB table (`crate::fdbwatch`).
    pub(crate) fn bridge_fdb(&self, id: BridgeId) -> &Arc<Fdb> {
        &self.bridge(id).fdb
    }

    pub(crate) fn bridge(&self, id: BridgeId) -> &Bridge {
        self.recs.bridge(id)
    }

    /// Bridge `id` for a change, copied like [`Switch::port_mut`] (its FDB and counters stay
    /// shared).
    pub(crate) fn bridge_mut(&mut self, id: BridgeId) -> &mut Bridge {
        self.recs.bridge_mut(id)
    }

    /// Counts on port `id` in the control plane's counter block.
    pub(crate) fn control_counters(&self, id: u16) -> Option<&crate::cells::PortCells> {
        self.recs
            .ports
            .get(id as usize)?
            .as_ref()
            .map(|p| p.counters.writer(CONTROL_WRITER))
    }

    pub fn port_name(&self, id: PortId) -> Option<&str> {
        self.recs
            .ports
            .get(id.0 as usize)?
            .as_ref()
            .map(|p| p.name.as_str())
    }

    pub fn port_kind(&self, id: PortId) -> Option<&str> {
        self.recs
            .ports
            .get(id.0 as usize)?
            .as_ref()
            .map(|p| p.kind.as_str())
    }

    /// Ids and names of all ports, in the order they were created (as Linux lists devices by
    /// ifindex; ids are slots and are reused, so id order is not creation order). Creation
    /// order puts every stacked device after its lower device, and a saved configuration
    /// replayed into a fresh switch lists its ports in the same order.
    pub fn port_ids(&self) -> impl Iterator<Item = (PortId, &str)> {
        let mut ids: Vec<(u32, PortId, &str)> = self
            .recs
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_ref()
                    .map(|p| (p.generation, PortId(i as u16), p.name.as_str()))
            })
            .collect();
        ids.sort_unstable_by_key(|&(g, ..)| g);
        ids.into_iter().map(|(_, id, name)| (id, name))
    }

    /// Highest port id + 1: the size an output table needs.
    pub fn port_slots(&self) -> usize {
        self.recs.ports.len()
    }

    pub fn port_settings(&self, id: PortId) -> &PortSettings {
        &self.port(id).settings
    }

    pub fn port_master(&self, id: PortId) -> Option<BridgeId> {
        self.port(id).master.map(BridgeId)
    }

    pub fn bridge_settings(&self, id: BridgeId) -> &BridgeSettings {
        &self.bridge(id).settings
    }

    pub fn bridge_name(&self, id: BridgeId) -> &str {
        &self.bridge(id).name
    }

    pub fn bridge_ids(&self) -> impl Iterator<Item = (BridgeId, &str)> {
        self.recs
            .bridges
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().map(|b| (BridgeId(i as u16), b.name.as_str())))
    }

    /// The ports attached to bridge `b`, in the order they joined (no scan of every port).
    pub fn bridge_ports(&self, b: BridgeId) -> impl Iterator<Item = PortId> + '_ {
        self.bridge(b).ports.iter().map(|&p| PortId(p))
    }

    /// Longest frame port `id` accepts and sends (without FCS).
    pub fn port_max_frame(&self, id: PortId) -> u32 {
        self.port(id).max_frame
    }

    /// The TPID of the bridge tag on port `id`.
    pub fn port_tpid(&self, id: PortId) -> Tpid {
        Tpid(self.port(id).tpid)
    }

    /// Counters of port `id`, summed over every worker and the control plane.
    pub fn port_counters(&self, id: PortId) -> PortCounters {
        self.port(id).counters.sum()
    }

    /// Counts `n` frames dropped for `reason` on port `id`, in worker `worker`'s block (for I/O
    /// layers: transmit failures, receive-side drops).
    pub fn count_port_drop(&self, id: PortId, worker: usize, reason: DropReason, n: u64) {
        if let Some(Some(p)) = self.recs.ports.get(id.0 as usize) {
            p.counters.writer(worker).drops[reason as usize].add(n);
        }
    }

    /// The generation of port `id`: different for every port ever created with that id.
    pub fn port_generation(&self, id: PortId) -> u32 {
        self.port(id).generation
    }

    pub fn vlan_counters(&self, id: BridgeId, vid: u16) -> VlanCounters {
        self.bridge(id).vlan_counters.sum(vid)
    }

    /// Moves of learned FDB entries between ports of bridge `id` so far (a MAC address seen on
    /// another port than its entry's), and the latest move with its ports' names.
    pub fn fdb_moves(&self, id: BridgeId) -> (u64, Option<(FdbMove, String, String)>) {
        let (n, last) = self.bridge(id).fdb.moves();
        let named = last.map(|m| {
            let name = |p: u16| {
                self.port_name(PortId(p))
                    .map_or_else(|| format!("#{p}"), str::to_owned)
            };
            (m, name(m.from), name(m.to))
        });
        (n, named)
    }

    /// Number of FDB entries in bridge `id`, and how many of them were learned.
    pub fn fdb_len(&self, id: BridgeId) -> (usize, usize) {
        let b = self.bridge(id);
        (b.fdb.len(), b.fdb.learned())
    }

    /// Removes dynamic entries idle longer than each bridge's `ageing_time`. Call it off the
    /// fast path, about once a second. Returns the number removed.
    pub fn age(&mut self, now_ns: u64) -> usize {
        self.now_ns = self.now_ns.max(now_ns);
        let mut n = 0;
        for b in self.recs.bridges.iter().flatten() {
            n += b.fdb.age(now_ns, b.settings.ageing_time_ns);
            // Pairs whose entries aged out (or went with a port, a VLAN) give their FIDs back.
            b.fdb.reclaim_inner();
        }
        n
    }

    /// [`Switch::age`], asking `seen(bridge, mac, fid)` first of each entry that would age (the
    /// eBPF fast path's last-seen time of that source, on this clock): a later time keeps it.
    pub fn age_with(
        &mut self,
        now_ns: u64,
        mut seen: impl FnMut(u16, MacAddr, u16) -> Option<u64>,
    ) -> usize {
        self.now_ns = self.now_ns.max(now_ns);
        let mut n = 0;
        for (i, b) in self.recs.bridges.iter().enumerate() {
            let Some(b) = b else { continue };
            n += b.fdb.age_with(now_ns, b.settings.ageing_time_ns, |key| {
                seen(i as u16, crate::fdb::key_mac(key), crate::fdb::key_fid(key))
            });
            b.fdb.reclaim_inner();
        }
        n
    }

    /// `learn_inner_vid`: (S-VID, C-VID) pairs of bridge `id` that hold a FID now, and FIDs
    /// given back but not yet free (a datapath worker may still be using them); `None`:
    /// the bridge never learned per inner VID.
    pub fn inner_fids_in_use(&self, id: BridgeId) -> Option<(usize, usize)> {
        self.bridge(id).fdb.inner().map(|i| i.in_use())
    }

    /// Sets the clock used for entries added by commands and for idle times.
    pub fn set_time(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Frames received with a port id that names no port.
    pub fn unknown_port_drops(&self) -> u64 {
        self.unknown_port_drops.sum()
    }
}

pub(crate) fn check_range(start: u32, end: u32) -> Result<(u16, u16), ConfigError> {
    let s = check_vid(start)?;
    let e = check_vid(end)?;
    if e < s {
        return Err(ConfigError::BadRange { start: s, end: e });
    }
    Ok((s, e))
}

impl Switch {
    /// A change to the mirror sessions: the next plan is compiled anew.
    pub(crate) fn mirrors_changed(&mut self) {
        self.recs.plan = None;
    }
}
