//! The switch: bridges, ports, their configuration operations, and views for the control plane.
//!
//! Names share one namespace, as network devices do: a bridge and a port cannot have the same
//! name. Ports have stable ids ([`PortId`]) for as long as they exist; the I/O layer uses them to
//! tag received frames and to pick the backend for each output batch.
//!
//! Every operation validates before it changes anything. Dense forwarding state (per-port VID
//! bitmaps, the per-VID flood lists, per-port frame-size limits) is recompiled by the operation
//! that changes its inputs, never on the fast path.

use crate::cells::{CellSet, PortCounterSet, VlanCounterSet};
use crate::config::{
    BridgeSettings, PcpMode, PortSettings, VlanProtocol, FDB_LIMIT_MAX_ENTRIES,
    GROUP_FWD_RESTRICTED, MAX_ENVELOPE_FRAME,
};
use crate::counters::{DropReason, PortCounters, VlanCounters};
use crate::error::ConfigError;
use crate::fdb::{
    fdb_key, key_fid, key_mac, AddError, Fdb, FdbEntryView, FdbFilter, FdbFlushKind, FdbFlushMatch,
    FdbKind, FdbMove, TableCache, FIRST_INNER_FID, F_EXTERN, F_LOCKED, F_PERMANENT, F_STATIC,
    F_STICKY, F_USER,
};
use crate::stack::{MacvlanMode, Role, Uppers, MAX_STACK_DEPTH};
use crate::tagmap::{TagMap, TagMaps};
use crate::vlanmode::{PvlanRole, Violation, VlanMode};
use crate::vlanset::VlanSet;
use qbridge_packet::{Batch, BufPool};
use qbridge_wire::{MacAddr, Tpid};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Index of a port in the switch; stable while the port exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PortId(pub u16);

/// Index of a bridge in the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BridgeId(pub u16);

/// Longest `ageing_time`: 1,000,000 seconds.
pub const MAX_AGEING_NS: u64 = 1_000_000 * 1_000_000_000;

/// Most ports in one switch.
pub const MAX_PORTS: usize = 4096;

/// A bridge as the datapath sees it. Shared (`Arc`) between the switch and every published
/// [`Plan`]; a change copies it first (copy-on-write), except the FDB and the counters, which
/// are shared by every copy.
#[derive(Clone, Debug)]
pub(crate) struct Bridge {
    pub name: String,
    pub settings: BridgeSettings,
    pub fdb: Arc<Fdb>,
    /// Ports attached, in attach order.
    pub ports: Vec<u16>,
    /// Compiled: the ports that are members of each VID, in attach order; index 0 lists every
    /// port (VLAN-unaware flooding). One list per VID, so a change recompiles only the VIDs it
    /// touches.
    pub flood: Box<[Arc<[u16]>]>,
    pub vlan_counters: Arc<VlanCounterSet>,
    /// The bridge's host port (its own interface, `link set dev BR up`), if it has one.
    pub host: Option<u16>,
}

/// A port as the datapath sees it; shared like [`Bridge`].
#[derive(Clone, Debug)]
pub(crate) struct Port {
    pub name: String,
    pub kind: String,
    pub master: Option<u16>,
    pub settings: PortSettings,
    pub member: VlanSet,
    pub untagged: VlanSet,
    /// 0 = none.
    pub pvid: u16,
    /// Compiled: TPID of the bridge tag on this port.
    pub tpid: u16,
    /// Compiled: longest frame (without FCS) accepted or sent, per segment.
    pub max_frame: u32,
    /// The backend's link is up (set by the I/O layer; true for ports without a link).
    pub link_up: bool,
    /// Compiled: admin up and link up. A port that is not running neither receives nor sends.
    pub running: bool,
    /// Distinguishes this port from earlier ports that had the same id.
    pub generation: u32,
    pub counters: Arc<PortCounterSet>,
    /// What the port is: a device, a bridge's host port, or a device stacked on another port.
    pub role: Role,
    /// The host-side MAC address of a stacked device or host port (48-bit integer; 0: none).
    pub mac: u64,
    /// A device port's own interface address, as the I/O layer reports it when it opens the
    /// backend ([`Switch::set_port_address`]; 48-bit integer; 0: none or not known — pcap and
    /// in-memory ports have none). In a bridge it is a local (permanent) FDB entry.
    pub if_mac: u64,
    /// Compiled: the devices stacked on this port, for the receive path.
    pub uppers: Option<Arc<Uppers>>,
    /// `link set dev P vlan_mode …` as configured (cleared when the port leaves its bridge).
    pub vlan_mode: Option<VlanMode>,
    /// Compiled: `vlan_mode dot1q-tunnel`: every frame entering is untagged to the bridge.
    pub tunnel: bool,
    /// Compiled: the customer VLANs a tunnel port admits (VID 0: untagged); `None`: all.
    pub cvlans: Option<Box<VlanSet>>,
    /// Compiled `pcp_mode`: whether a frame untagged to the bridge takes its PCP and DEI from
    /// its own outer tag (through `pcp_table`, indexed by that tag's PCP and DEI bits).
    pub pcp_inner: bool,
    /// Compiled `pcp_mode`: the PCP/DEI bits (TCI bits 12-15) of a frame untagged to the bridge
    /// that has no tag to read them from (or whose mode reads none).
    pub pcp_untagged: u16,
    pub pcp_table: [u16; 16],
    /// Private-VLAN roles by VID ([`PvlanRole::code`]); `None`: no role in any VLAN.
    pub pvlan: Option<Arc<[u32]>>,
    /// `vlan map … translate` (1:1), by VID: the VID inside the bridge of a wire VID
    /// (`vid_in`) and the wire VID of a VID inside (`vid_out`); 0: the same. `None`: no map.
    pub vid_in: Option<Arc<[u16]>>,
    pub vid_out: Option<Arc<[u16]>>,
    /// `vlan set … fdb_max_learned N violation V`, by VID: `V << 24 | N` (0: no limit).
    pub vlan_limits: Option<Arc<[u32]>>,
    /// `vlan map … cvid C svid S` (selective Q-in-Q), by C-VID: the S-VLAN (0: none).
    pub cvid_in: Option<Arc<[u16]>>,
    /// `vlan map … svid S cvid C translate …` (2:1 and 2:2); `None`: none.
    pub tag2: Option<Arc<TagMaps>>,
    /// Compiled ([`Switch::plan`], from the fields above): frames entering this port need none
    /// of the provider features of its ingress (no tunnel, no `cvlans`, `pcp_mode` keep with
    /// default PCP 0, no VLAN map in, no selective Q-in-Q, not locked). The pipeline tests it once per run.
    pub plain: bool,
}

impl Port {
    /// What [`Port::plain`] should be.
    fn is_plain(&self) -> bool {
        !self.tunnel
            && self.cvlans.is_none()
            && !self.pcp_inner
            && self.pcp_untagged == 0
            && self.vid_in.is_none()
            && self.cvid_in.is_none()
            && self.tag2.is_none()
            && !self.settings.locked
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Bridge(u16),
    Port(u16),
}

/// Frames leaving the core: one batch per port id, and the pool that flood copies come from and
/// dropped frames go back to.
#[derive(Debug)]
pub struct Outputs {
    pub ports: Vec<Batch>,
    pub pool: BufPool,
    /// Copies for the `dst pcap` mirror sessions, by sink index ([`Plan::mirror_sinks`]): the
    /// caller writes them to their files.
    pub mirror_sinks: Vec<Batch>,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs::new()
    }
}

impl Outputs {
    pub fn new() -> Outputs {
        Outputs {
            ports: Vec::new(),
            pool: BufPool::new(8192),
            mirror_sinks: Vec::new(),
        }
    }

    pub(crate) fn ensure(&mut self, nports: usize) {
        if self.ports.len() < nports {
            self.ports.resize_with(nports, || Batch::with_capacity(256));
        }
    }

    /// Output batch of `port` (empty if the port never received a frame).
    pub fn batch_mut(&mut self, port: PortId) -> &mut Batch {
        self.ensure(port.0 as usize + 1);
        &mut self.ports[port.0 as usize]
    }

    /// Frames queued for any port.
    pub fn pending(&self) -> usize {
        self.ports.iter().map(|b| b.len()).sum()
    }
}

/// A link as `link show` presents it.
#[derive(Debug, Clone, Serialize)]
pub struct LinkView {
    pub ifname: String,
    /// "bridge" or the port's backend kind ("pcap", "afpacket", "tap", …).
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// The lower port of a stacked device (`ip link`'s `eth0.100@eth0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The host-side MAC address of a stacked device or of a bridge's host port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// As `ip -j -d link show`: `{"info_kind":"vlan","info_data":{"protocol":"802.1ad","id":100}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linkinfo: Option<LinkInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<PortView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<PortCounters>,
}

/// A stacked device's kind and data, named as `ip -j -d link show` names them.
#[derive(Debug, Clone, Serialize)]
pub struct LinkInfo {
    pub info_kind: &'static str,
    pub info_data: LinkInfoData,
}

#[derive(Debug, Clone, Serialize)]
pub struct LinkInfoData {
    /// VLAN devices: "802.1Q", "802.1ad", or the TPID in hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// VLAN devices: the VID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u16>,
    /// Macvlan endpoints: the mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
}

/// A TPID as ip-link(8) names a VLAN protocol.
pub fn tpid_name(tpid: u16) -> String {
    match tpid {
        0x8100 => "802.1Q".to_string(),
        0x88a8 => "802.1ad".to_string(),
        t => format!("0x{t:04x}"),
    }
}

/// Port settings with the values in force.
#[derive(Debug, Clone, Serialize)]
pub struct PortView {
    pub id: u16,
    #[serde(flatten)]
    pub settings: PortSettings,
    pub envhdr_effective: u32,
    pub tpid_effective: String,
    pub max_frame: u32,
    /// The backend's link (carrier) state.
    pub link_up: bool,
    /// `vlan_mode` as configured, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan_mode: Option<VlanMode>,
}

/// One port's VLAN configuration, for `vlan show`.
#[derive(Debug, Clone, Serialize)]
pub struct VlanView {
    pub ifname: String,
    pub vlans: Vec<VlanEntryView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VlanEntryView {
    pub vlan: u16,
    pub flags: Vec<&'static str>,
    /// The port's private-VLAN role in this VLAN (`vlan set … pvlan`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvlan: Option<String>,
    /// The port's learning limit in this VLAN (`vlan set … fdb_max_learned`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_max_learned: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
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
    pub(crate) bridges: Vec<Option<Arc<Bridge>>>,
    pub(crate) ports: Vec<Option<Arc<Port>>>,
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
    /// The published plan, `None` after a change.
    plan: Option<Arc<Plan>>,
    /// The datapath state of [`Switch::process`] (worker 0).
    worker: Worker,
    /// Port mirroring sessions, in creation order (`crate::mirror`).
    pub(crate) mirrors: Vec<crate::mirror::MirrorSession>,
}

impl Default for Switch {
    fn default() -> Self {
        Switch::with_workers(1)
    }
}

impl Clone for Switch {
    fn clone(&self) -> Switch {
        let bridges = self
            .bridges
            .iter()
            .map(|b| {
                b.as_ref().map(|b| {
                    let mut copy = Bridge::clone(b);
                    copy.fdb = Arc::new(Fdb::clone(&b.fdb));
                    Arc::new(copy)
                })
            })
            .collect();
        Switch {
            bridges,
            ports: self.ports.clone(),
            names: self.names.clone(),
            now_ns: self.now_ns,
            workers: self.workers,
            unknown_port_drops: self.unknown_port_drops.clone(),
            next_generation: self.next_generation,
            next_index: self.next_index,
            plan: None,
            worker: Worker::new(0),
            mirrors: self.mirrors.clone(),
        }
    }
}

/// The compiled forwarding state at one moment: what datapath workers forward with. Immutable;
/// the switch publishes a new one after each change ([`Switch::plan`]).
#[derive(Debug, Default)]
pub struct Plan {
    pub(crate) bridges: Vec<Option<Arc<Bridge>>>,
    pub(crate) ports: Vec<Option<Arc<Port>>>,
    pub(crate) unknown_port_drops: Option<Arc<CellSet>>,
    /// Some port is a stacked device or a host port: frames take the stacked path.
    pub(crate) stacked: bool,
    /// Port mirroring sessions, compiled; `None` without any (`crate::mirror`).
    pub(crate) mirrors: Option<Arc<crate::mirror::Mirrors>>,
}

impl Plan {
    /// Highest port id + 1: the size an output table needs.
    pub fn port_slots(&self) -> usize {
        self.ports.len()
    }

    fn port(&self, id: PortId) -> Option<&Port> {
        self.ports.get(id.0 as usize)?.as_deref()
    }

    /// The generation of port `id` in this plan (`None`: no such port).
    pub fn port_generation(&self, id: PortId) -> Option<u32> {
        self.port(id).map(|p| p.generation)
    }

    /// Whether port `id` is admin up and its link up.
    pub fn port_running(&self, id: PortId) -> bool {
        self.port(id).is_some_and(|p| p.running)
    }

    /// The TPID of the bridge tag on port `id` (0x8100 for an unknown port).
    pub fn port_tpid(&self, id: PortId) -> Tpid {
        Tpid(self.port(id).map_or(0x8100, |p| p.tpid))
    }

    /// Longest frame port `id` accepts and sends (0 for an unknown port).
    pub fn port_max_frame(&self, id: PortId) -> u32 {
        self.port(id).map_or(0, |p| p.max_frame)
    }

    /// Counts `n` frames dropped for `reason` on port `id` by worker `worker` (for I/O layers:
    /// transmit failures, receive-side drops).
    pub fn count_drop(&self, id: PortId, worker: usize, reason: DropReason, n: u64) {
        if let Some(p) = self.port(id) {
            p.counters.writer(worker).drops[reason as usize].add(n);
        }
    }
}

/// One datapath worker's private state: its counter-block index, scratch space and its view of
/// each bridge's FDB table. Owned by the worker's thread.
#[derive(Debug, Default)]
pub struct Worker {
    pub(crate) index: usize,
    /// Flood targets of the frame being forwarded; kept to avoid allocating per frame.
    pub(crate) scratch: Vec<u16>,
    /// FDB table per bridge id.
    pub(crate) tables: Vec<TableCache>,
    /// The batch's per-frame decisions (one per received frame), filled by the ingress
    /// stages and read by the egress stage; kept to avoid allocating per batch.
    pub(crate) meta: Vec<crate::pipeline::FrameMeta>,
    /// Scratch of the stacked path (taken while it runs).
    pub(crate) stack: Option<Box<crate::stack::Scratch>>,
    /// Scratch of port mirroring (taken while it runs).
    pub(crate) mirror: Option<Box<crate::mirror::MirrorScratch>>,
    /// Flood copies the frames of the next [`Plan::process`] may still make (`None`: no
    /// limit). See [`Worker::set_flood_credit`].
    pub(crate) flood_credit: Option<u64>,
}

impl Worker {
    /// Worker number `index` (0-based; its counters go to block `index`).
    pub fn new(index: usize) -> Worker {
        Worker {
            index,
            scratch: Vec::new(),
            tables: Vec::new(),
            meta: Vec::new(),
            stack: None,
            mirror: None,
            flood_credit: None,
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// Bounds the flood copies of the next [`Plan::process`] calls: a flood (unknown unicast,
    /// broadcast, multicast) to `k` ports is sent when at least `k` copies of credit are left,
    /// and takes them; else it is dropped as `flood_rate`, counted on its ingress port. A frame
    /// to one port (known unicast) never uses credit nor is dropped for it. `None` (the
    /// default): no bound, as replay and the tests forward. The daemon's worker gives each
    /// port's burst its fair share of a round's flood work (`docs/semantics.md`, "Flood
    /// fairness").
    pub fn set_flood_credit(&mut self, credit: Option<u64>) {
        self.flood_credit = credit;
    }

    /// The credit left (see [`Worker::set_flood_credit`]).
    pub fn flood_credit(&self) -> Option<u64> {
        self.flood_credit
    }
}

fn check_name(name: &str) -> Result<(), ConfigError> {
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

fn check_bridge_settings(s: &BridgeSettings) -> Result<(), ConfigError> {
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
fn set_map(map: &mut Option<Arc<[u16]>>, v: u16, to: u16) {
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
fn tag_map_words(m: &TagMap) -> String {
    match m.inner {
        None => format!("svid {} cvid {} (translate {})", m.svid, m.cvid, m.vid),
        Some(c) => format!("svid {} cvid {} (translate {} {c})", m.svid, m.cvid, m.vid),
    }
}

/// Port `p`'s learning limit in `vid`, if it has one.
fn limit_of(p: &Port, vid: u16) -> Option<(u32, Violation)> {
    let code = p.vlan_limits.as_ref()?[usize::from(vid & 0x0fff)];
    (code != 0).then(|| (code & 0x00ff_ffff, violation_of(code)))
}

/// The violation mode of a per-VLAN limit code.
pub(crate) fn violation_of(code: u32) -> Violation {
    match code >> 24 {
        0 => Violation::Protect,
        1 => Violation::Restrict,
        _ => Violation::Shutdown,
    }
}

/// Sets entries `start..=end` of a per-VID code table (0 clears); the table goes away when
/// every entry is 0.
fn set_codes(table: &mut Option<Arc<[u32]>>, start: u16, end: u16, code: u32) {
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
fn set_limit_codes(port: &mut Port, start: u16, end: u16, code: u32) {
    set_codes(&mut port.vlan_limits, start, end, code);
}

/// Sets the private-VLAN code of `start..=end` on `port` (0 clears).
fn set_pvlan_codes(port: &mut Port, start: u16, end: u16, code: u32) {
    set_codes(&mut port.pvlan, start, end, code);
}

/// `pcp_mode` and `default_pcp` as the classifier reads them: (read the frame's own tag,
/// TCI bits 12-15 for a frame with none, TCI bits 12-15 by the frame's tag's bits 12-15).
fn compile_pcp(mode: PcpMode, default_pcp: u8) -> (bool, u16, [u16; 16]) {
    let untagged = u16::from(default_pcp) << 13;
    let mut table = [0u16; 16];
    for (i, t) in table.iter_mut().enumerate() {
        let (pcp, dei) = ((i >> 1) as u16, (i & 1) as u16);
        *t = match mode {
            PcpMode::Map(m) => u16::from(m[pcp as usize]) << 13 | dei << 12,
            _ => pcp << 13 | dei << 12,
        };
    }
    match mode {
        PcpMode::Keep => (false, untagged, table),
        PcpMode::Fixed(n) => (false, u16::from(n) << 13, table),
        PcpMode::Copy | PcpMode::Map(_) => (true, untagged, table),
    }
}

fn check_port_settings(s: &PortSettings) -> Result<(), ConfigError> {
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
            bridges: Vec::new(),
            ports: Vec::new(),
            names: HashMap::new(),
            now_ns: 0,
            workers,
            unknown_port_drops: CellSet::new(workers + 1),
            next_generation: 1,
            next_index: None,
            plan: None,
            worker: Worker::new(0),
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
        if let Some(p) = &self.plan {
            return p.clone();
        }
        self.publish()
    }

    /// [`Switch::plan`] after a change: compiles [`Port::plain`] and publishes a new plan.
    #[cold]
    #[inline(never)]
    fn publish(&mut self) -> Arc<Plan> {
        // Every change to a port went through `port_mut` (or made a new port) and cleared the
        // plan, so a port whose flag is stale is not shared with a published plan: no copy.
        let inner: Vec<bool> = self
            .bridges
            .iter()
            .map(|b| b.as_ref().is_some_and(|b| b.settings.learn_inner_vid))
            .collect();
        for p in self.ports.iter_mut().flatten() {
            // A bridge that learns per inner VID reads every frame's C-tag: not plain.
            let inner_learning = p
                .master
                .is_some_and(|b| inner.get(usize::from(b)) == Some(&true));
            let plain = p.is_plain() && !inner_learning;
            if p.plain != plain {
                Arc::make_mut(p).plain = plain;
            }
        }
        let p = Arc::new(Plan {
            bridges: self.bridges.clone(),
            ports: self.ports.clone(),
            unknown_port_drops: Some(self.unknown_port_drops.clone()),
            stacked: self.ports.iter().flatten().any(|p| p.role != Role::Device),
            mirrors: self.compile_mirrors(),
        });
        self.plan = Some(p.clone());
        p
    }

    /// Forwards every frame of `rx` (each buffer's `port` is its ingress port id) at time
    /// `now_ns` on the calling thread, as worker 0, appending what leaves to
    /// `out.ports[egress]`. `rx` is left empty.
    pub fn process(&mut self, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        if now_ns > self.now_ns {
            self.now_ns = now_ns;
        }
        let plan = self.plan();
        plan.process(&mut self.worker, now_ns, rx, out);
    }

    // ----- lookups -----

    fn link(&self, name: &str) -> Result<Link, ConfigError> {
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

    pub(crate) fn port(&self, id: PortId) -> &Port {
        self.ports[id.0 as usize].as_ref().expect("live port id")
    }

    /// Port `id` for a change: copied first if a published plan still shares it.
    fn port_mut(&mut self, id: PortId) -> &mut Port {
        self.plan = None;
        Arc::make_mut(self.ports[id.0 as usize].as_mut().expect("live port id"))
    }

    /// Bridge `id`'s FDB table (`crate::fdbwatch`).
    pub(crate) fn bridge_fdb(&self, id: BridgeId) -> &Arc<Fdb> {
        &self.bridge(id).fdb
    }

    fn bridge(&self, id: BridgeId) -> &Bridge {
        self.bridges[id.0 as usize]
            .as_ref()
            .expect("live bridge id")
    }

    /// Bridge `id` for a change, copied like [`Switch::port_mut`] (its FDB and counters stay
    /// shared).
    fn bridge_mut(&mut self, id: BridgeId) -> &mut Bridge {
        self.plan = None;
        Arc::make_mut(
            self.bridges[id.0 as usize]
                .as_mut()
                .expect("live bridge id"),
        )
    }

    /// Counts on port `id` in the control plane's counter block.
    fn control_counters(&self, id: u16) -> Option<&crate::cells::PortCells> {
        self.ports
            .get(id as usize)?
            .as_ref()
            .map(|p| p.counters.writer(CONTROL_WRITER))
    }

    pub fn port_name(&self, id: PortId) -> Option<&str> {
        self.ports
            .get(id.0 as usize)?
            .as_ref()
            .map(|p| p.name.as_str())
    }

    pub fn port_kind(&self, id: PortId) -> Option<&str> {
        self.ports
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
        self.ports.len()
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
        self.bridges
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
        if let Some(Some(p)) = self.ports.get(id.0 as usize) {
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

    // ----- links -----

    /// `link add NAME type bridge …`
    pub fn add_bridge(
        &mut self,
        name: &str,
        settings: BridgeSettings,
    ) -> Result<BridgeId, ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        check_bridge_settings(&settings)?;
        let idx = match self.bridges.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.bridges.push(None);
                self.bridges.len() - 1
            }
        };
        let fdb = Arc::new(Fdb::new(settings.fdb_max_entries as usize));
        let empty: Arc<[u16]> = Arc::from(Vec::new());
        self.plan = None;
        self.bridges[idx] = Some(Arc::new(Bridge {
            name: name.to_string(),
            settings,
            fdb,
            ports: Vec::new(),
            flood: (0..4096).map(|_| empty.clone()).collect(),
            vlan_counters: VlanCounterSet::new(self.workers + 1),
            host: None,
        }));
        self.names
            .insert(name.to_string(), Link::Bridge(idx as u16));
        Ok(BridgeId(idx as u16))
    }

    /// `link set dev BR type bridge …`: replaces the settings, with Linux's side effects
    /// (a new `default_pvid` moves ports that still use the old default).
    pub fn set_bridge(
        &mut self,
        id: BridgeId,
        settings: BridgeSettings,
    ) -> Result<(), ConfigError> {
        check_bridge_settings(&settings)?;
        let old = self.bridge(id).settings.clone();
        if old.default_pvid != settings.default_pvid {
            self.change_default_pvid(id, old.default_pvid, settings.default_pvid);
        }
        let victims = self
            .bridge(id)
            .fdb
            .set_max_entries(settings.fdb_max_entries as usize);
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
        let inner_before = old.vlan_filtering && old.learn_inner_vid;
        if inner_before && !(settings.vlan_filtering && settings.learn_inner_vid) {
            // Entries learned per inner VID go with the rule that made them.
            let fdb = &self.bridge(id).fdb;
            fdb.remove_where(|s| key_fid(s.key) >= FIRST_INNER_FID);
            fdb.reclaim_inner();
        }
        self.bridge_mut(id).settings = settings;
        self.recompile_bridge(id);
        Ok(())
    }

    fn change_default_pvid(&mut self, id: BridgeId, old: u16, new: u16) {
        let ports = self.bridge(id).ports.clone();
        for p in ports {
            let port = self.port_mut(PortId(p));
            let old_is_default = old != 0 && port.pvid == old && port.untagged.contains(old);
            if old != 0 && !old_is_default {
                continue;
            }
            if new != 0 && port.member.contains(new) {
                continue;
            }
            if old != 0 {
                port.member.remove(old);
                port.untagged.remove(old);
                port.pvid = 0;
            }
            if new != 0 {
                port.member.insert(new);
                port.untagged.insert(new);
                port.pvid = new;
            }
            if old != 0 {
                self.flush_port_vlans(PortId(p), old, old);
            }
        }
    }

    /// `link add NAME type KIND`: a port, not yet attached to a bridge.
    pub fn add_port(
        &mut self,
        name: &str,
        kind: &str,
        settings: PortSettings,
    ) -> Result<PortId, ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        check_port_settings(&settings)?;
        let id = self.new_port(name, kind, settings, Role::Device, 0)?;
        let idx = id.0 as usize;
        self.names.insert(name.to_string(), Link::Port(idx as u16));
        self.recompile_port(PortId(idx as u16));
        Ok(PortId(idx as u16))
    }

    /// `link add … index N`: the next port created takes id `index` (as ip-link(8)'s `index`
    /// asks for an ifindex), so a saved configuration restores every port under its id. Fails
    /// if the id is taken or out of range; the reservation is used by the next port created.
    pub fn reserve_port_index(&mut self, index: u16) -> Result<(), ConfigError> {
        let i = usize::from(index);
        if i >= MAX_PORTS {
            return Err(ConfigError::BadPortIndex {
                index,
                max: MAX_PORTS - 1,
            });
        }
        if let Some(Some(p)) = self.ports.get(i) {
            return Err(ConfigError::PortIndexBusy {
                index,
                dev: p.name.clone(),
            });
        }
        self.next_index = Some(index);
        Ok(())
    }

    /// A new port record in the first free slot, or the one [`Switch::reserve_port_index`]
    /// reserved (not named in `names`, not compiled).
    fn new_port(
        &mut self,
        name: &str,
        kind: &str,
        settings: PortSettings,
        role: Role,
        mac: u64,
    ) -> Result<PortId, ConfigError> {
        let idx = match self.next_index.take() {
            Some(i) => {
                let i = usize::from(i);
                if self.ports.len() <= i {
                    self.ports.resize_with(i + 1, || None);
                }
                i
            }
            None => match self.ports.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    if self.ports.len() >= MAX_PORTS {
                        return Err(ConfigError::TooManyPorts(MAX_PORTS));
                    }
                    self.ports.push(None);
                    self.ports.len() - 1
                }
            },
        };
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        self.plan = None;
        self.ports[idx] = Some(Arc::new(Port {
            name: name.to_string(),
            kind: kind.to_string(),
            master: None,
            settings,
            member: VlanSet::default(),
            untagged: VlanSet::default(),
            pvid: 0,
            tpid: 0x8100,
            max_frame: 0,
            link_up: true,
            running: true,
            generation,
            counters: PortCounterSet::new(self.workers + 1),
            role,
            mac,
            if_mac: 0,
            uppers: None,
            vlan_mode: None,
            tunnel: false,
            cvlans: None,
            pcp_inner: false,
            pcp_untagged: 0,
            pcp_table: [0; 16],
            pvlan: None,
            vid_in: None,
            vid_out: None,
            vlan_limits: None,
            cvid_in: None,
            tag2: None,
            plain: false,
        }));
        Ok(PortId(idx as u16))
    }

    /// `link set dev NAME …` on a port. Turning `mab` off removes the port's `locked`
    /// entries, as Linux's `br_setport` flushes them (`BR_FDB_LOCKED`).
    pub fn set_port(&mut self, id: PortId, settings: PortSettings) -> Result<(), ConfigError> {
        check_port_settings(&settings)?;
        let mab_off = self.port(id).settings.mab && !settings.mab;
        self.port_mut(id).settings = settings;
        self.recompile_port(id);
        if mab_off {
            if let Some(b) = self.port(id).master {
                self.bridge(BridgeId(b))
                    .fdb
                    .remove_where(|s| s.port == id.0 && s.flags & F_LOCKED != 0);
            }
        }
        Ok(())
    }

    /// The I/O layer reports the port's link (carrier) going down or coming back. A port that
    /// stops running loses its dynamic FDB entries, as a Linux bridge port does on carrier loss.
    pub fn set_link_state(&mut self, id: PortId, up: bool) {
        self.port_mut(id).link_up = up;
        self.recompile_port(id);
    }

    /// Admin up and link up.
    pub fn port_running(&self, id: PortId) -> bool {
        self.port(id).running
    }

    pub fn port_link_up(&self, id: PortId) -> bool {
        self.port(id).link_up
    }

    /// `link set dev NAME master BR` (or `nomaster` with `None`).
    pub fn set_master(&mut self, id: PortId, master: Option<BridgeId>) -> Result<(), ConfigError> {
        let current = self.port(id).master;
        if current == master.map(|b| b.0) {
            return Ok(());
        }
        if let Role::Host { .. } = self.port(id).role {
            return Err(ConfigError::HostPortMaster(self.port(id).name.clone()));
        }
        if master.is_some() && self.has_macvlans(id) {
            return Err(ConfigError::MacvlanLowerBusy(self.port(id).name.clone()));
        }
        if let Some(b) = master {
            if self.stacked_on_host_of(id, b) {
                return Err(ConfigError::StackedOnOwnBridge {
                    dev: self.port(id).name.clone(),
                    bridge: self.bridge(b).name.clone(),
                });
            }
        }
        if let Some(b) = current {
            self.detach(id, BridgeId(b));
        }
        if let Some(b) = master {
            self.set_master_unchecked(id, b);
        }
        Ok(())
    }

    /// Attaches port `id` (in no bridge) to bridge `b` with the bridge's default PVID.
    fn set_master_unchecked(&mut self, id: PortId, b: BridgeId) {
        let pvid = self.bridge(b).settings.default_pvid;
        let port = self.port_mut(id);
        port.master = Some(b.0);
        port.member = VlanSet::default();
        port.untagged = VlanSet::default();
        port.pvid = 0;
        if pvid != 0 {
            port.member.insert(pvid);
            port.untagged.insert(pvid);
            port.pvid = pvid;
        }
        self.bridge_mut(b).ports.push(id.0);
        self.recompile_port(id);
        let vids: Vec<u16> = std::iter::once(0)
            .chain(self.port(id).member.iter())
            .collect();
        self.recompile_flood(b, vids);
        self.sync_local_fdb(id);
    }

    fn detach(&mut self, id: PortId, b: BridgeId) {
        let vids: Vec<u16> = std::iter::once(0)
            .chain(self.port(id).member.iter())
            .collect();
        self.bridge_mut(b).ports.retain(|&p| p != id.0);
        self.bridge(b).fdb.remove_where(|s| s.port == id.0);
        let port = self.port_mut(id);
        port.master = None;
        port.member = VlanSet::default();
        port.untagged = VlanSet::default();
        port.pvid = 0;
        port.vlan_mode = None;
        port.tunnel = false;
        port.cvlans = None;
        port.pvlan = None;
        port.vlan_limits = None;
        self.recompile_flood(b, vids);
        self.recompile_port(id);
    }

    /// `link del dev NAME`. Deleting a bridge detaches its ports and deletes its host port;
    /// deleting a port deletes the devices stacked on it (as unregistering `eth0` deletes
    /// `eth0.100`). Returns the names of the ports deleted, the stacked ones first.
    pub fn del_link(&mut self, name: &str) -> Result<Vec<String>, ConfigError> {
        let mut gone = Vec::new();
        match self.link(name)? {
            Link::Port(p) => {
                if let Role::Host { .. } = self.port(PortId(p)).role {
                    return Err(ConfigError::NotAPort(name.to_string()));
                }
                self.del_port(PortId(p), &mut gone);
            }
            Link::Bridge(b) => {
                if let Some(h) = self.bridge(BridgeId(b)).host {
                    self.del_port(PortId(h), &mut gone);
                }
                for p in self.bridge(BridgeId(b)).ports.clone() {
                    self.detach(PortId(p), BridgeId(b));
                }
                self.plan = None;
                self.bridges[b as usize] = None;
                self.names.remove(name);
            }
        }
        Ok(gone)
    }

    /// Deletes port `id` and, first, every device stacked on it.
    fn del_port(&mut self, id: PortId, gone: &mut Vec<String>) {
        for up in self.stacked_on(id) {
            self.del_port(up, gone);
        }
        let port = self.port(id);
        let (name, role) = (port.name.clone(), port.role);
        if let Some(b) = port.master {
            self.detach(id, BridgeId(b));
        }
        self.plan = None;
        self.ports[id.0 as usize] = None;
        match role {
            Role::Host { bridge } => {
                if let Some(Some(b)) = self.bridges.get_mut(bridge as usize) {
                    Arc::make_mut(b).host = None;
                }
            }
            _ => {
                self.names.remove(&name);
            }
        }
        if let Some(lower) = role.lower() {
            self.recompile_uppers(PortId(lower));
        }
        gone.push(name);
        self.mirror_port_gone(id);
    }

    // ----- stacked devices -----

    /// The ports stacked directly on port `id` (VLAN devices, macvlan endpoints), in id order.
    pub fn stacked_on(&self, id: PortId) -> Vec<PortId> {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_deref()?;
                (p.role.lower() == Some(id.0)).then_some(PortId(i as u16))
            })
            .collect()
    }

    /// Whether any device is stacked on port `id` (compiled: no scan).
    pub fn has_stacked(&self, id: PortId) -> bool {
        self.port(id).uppers.is_some()
    }

    fn has_macvlans(&self, id: PortId) -> bool {
        self.ports
            .iter()
            .flatten()
            .any(|p| matches!(p.role, Role::Macvlan { lower, .. } if lower == id.0))
    }

    /// Whether port `id` is a device stacked (at any depth) on bridge `b`'s host port: as a
    /// port of `b` it would be a loop (Linux: an upper device of its own master, `EBUSY`).
    fn stacked_on_host_of(&self, id: PortId, b: BridgeId) -> bool {
        let mut cur = self.port(id).role;
        for _ in 0..=MAX_STACK_DEPTH {
            match cur.lower() {
                Some(l) => cur = self.port(PortId(l)).role,
                None => break,
            }
            if cur == (Role::Host { bridge: b.0 }) {
                return true;
            }
        }
        false
    }

    /// Devices between port `id` and the device at the bottom of its stack (0 for a device).
    fn stack_depth(&self, id: PortId) -> usize {
        let mut depth = 0;
        let mut cur = self.port(id).role;
        while let Some(l) = cur.lower() {
            depth += 1;
            cur = self.port(PortId(l)).role;
            if depth > MAX_STACK_DEPTH {
                break;
            }
        }
        depth
    }

    /// Tags the deepest chain of VLAN devices stacked on port `id` pushes on the way down.
    fn tags_above(&self, id: PortId) -> u32 {
        self.stacked_on(id)
            .into_iter()
            .map(|u| {
                let own = matches!(self.port(u).role, Role::Vlan { .. }) as u32;
                own + self.tags_above(u)
            })
            .max()
            .unwrap_or(0)
    }

    /// What port `id` is: a device, a host port, or a device stacked on another port.
    pub fn port_role(&self, id: PortId) -> Role {
        self.port(id).role
    }

    /// The host-side MAC address of a stacked device or host port.
    pub fn port_mac(&self, id: PortId) -> Option<MacAddr> {
        let m = self.port(id).mac;
        (m != 0).then(|| {
            let b = m.to_be_bytes();
            MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
        })
    }

    /// The host port of bridge `b`, if it has one.
    pub fn host_port(&self, b: BridgeId) -> Option<PortId> {
        self.bridge(b).host.map(PortId)
    }

    /// Checks what every stacked device needs: a name, a lower port that can take it, a MAC.
    fn check_stacked(&self, name: &str, lower: PortId, mac: MacAddr) -> Result<(), ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadDeviceMac(mac));
        }
        if self.stack_depth(lower) + 1 > MAX_STACK_DEPTH {
            return Err(ConfigError::StackTooDeep {
                dev: self.port(lower).name.clone(),
                max: MAX_STACK_DEPTH,
            });
        }
        if let Some(Role::Macvlan {
            mode: MacvlanMode::Passthru,
            ..
        }) = self.stacked_on(lower).first().map(|&u| self.port(u).role)
        {
            return Err(ConfigError::PassthruBusy(self.port(lower).name.clone()));
        }
        Ok(())
    }

    /// `link add link LOWER name NAME type vlan [protocol P] id VID`: a VLAN sub-interface of
    /// port `lower` (any role: a device, a host port, another VLAN device) with the tag
    /// `tpid`/`vid`, whose host side has address `mac`.
    pub fn add_vlan_device(
        &mut self,
        name: &str,
        lower: PortId,
        tpid: Tpid,
        vid: u32,
        mac: MacAddr,
    ) -> Result<PortId, ConfigError> {
        let vid = check_vid(vid)?;
        check_tpid(tpid)?;
        self.check_stacked(name, lower, mac)?;
        let key = (tpid.0 as u32) << 16 | vid as u32;
        if let Some(&other) = self
            .port(lower)
            .uppers
            .as_ref()
            .and_then(|u| u.vlans.get(&key))
        {
            return Err(ConfigError::VlanDeviceExists {
                lower: self.port(lower).name.clone(),
                tpid: tpid.0,
                vid,
                dev: self.port(PortId(other)).name.clone(),
            });
        }
        let id = self.add_port(name, "vlan", PortSettings::default())?;
        self.set_role(
            id,
            Role::Vlan {
                lower: lower.0,
                tpid: tpid.0,
                vid,
            },
            mac,
        );
        Ok(id)
    }

    /// `link add link LOWER name NAME type macvlan mode MODE`: a macvlan endpoint on port
    /// `lower` with address `mac`. Refused on a bridge port and next to a passthru endpoint
    /// (as Linux does), for a passthru endpoint next to any other, and for an address another
    /// endpoint of `lower` has.
    pub fn add_macvlan(
        &mut self,
        name: &str,
        lower: PortId,
        mode: MacvlanMode,
        mac: MacAddr,
    ) -> Result<PortId, ConfigError> {
        self.check_stacked(name, lower, mac)?;
        if self.port(lower).master.is_some() {
            return Err(ConfigError::MacvlanLowerBusy(self.port(lower).name.clone()));
        }
        let siblings = self.stacked_on(lower);
        let key = mac_u64(mac);
        for &u in &siblings {
            let p = self.port(u);
            if matches!(p.role, Role::Macvlan { .. }) {
                if mode == MacvlanMode::Passthru {
                    return Err(ConfigError::PassthruBusy(self.port(lower).name.clone()));
                }
                if p.mac == key {
                    return Err(ConfigError::MacvlanAddressInUse {
                        mac,
                        dev: p.name.clone(),
                    });
                }
            }
        }
        let id = self.add_port(name, "macvlan", PortSettings::default())?;
        self.set_role(
            id,
            Role::Macvlan {
                lower: lower.0,
                mode,
            },
            mac,
        );
        Ok(id)
    }

    /// `link set dev BR up`: gives bridge `b` its host port (the bridge's own interface, whose
    /// host side has address `mac`), joined with the bridge's default PVID, and installs `mac`
    /// as a permanent (local) FDB entry in each of its VLANs, as Linux does for `br0`. Returns
    /// the existing host port if there is one.
    pub fn add_host_port(&mut self, b: BridgeId, mac: MacAddr) -> Result<PortId, ConfigError> {
        if let Some(h) = self.bridge(b).host {
            return Ok(PortId(h));
        }
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadDeviceMac(mac));
        }
        let name = self.bridge(b).name.clone();
        let settings = PortSettings::default();
        let id = self.new_port(
            &name,
            "host",
            settings,
            Role::Host { bridge: b.0 },
            mac_u64(mac),
        )?;
        self.bridge_mut(b).host = Some(id.0);
        self.recompile_port(id);
        self.set_master_unchecked(id, b);
        self.sync_host_fdb(id);
        Ok(id)
    }

    fn set_role(&mut self, id: PortId, role: Role, mac: MacAddr) {
        let p = self.port_mut(id);
        p.role = role;
        p.mac = mac_u64(mac);
        if let Some(l) = role.lower() {
            self.recompile_uppers(PortId(l));
        }
    }

    /// Rebuilds the receive table of the devices stacked on `lower`, and the frame size of
    /// every port below (a VLAN device adds a tag's envelope allowance to each).
    fn recompile_uppers(&mut self, lower: PortId) {
        let mut up = Uppers::default();
        for u in self.stacked_on(lower) {
            let p = self.port(u);
            match p.role {
                Role::Vlan { tpid, vid, .. } => {
                    up.vlans.insert((tpid as u32) << 16 | vid as u32, u.0);
                }
                Role::Macvlan { mode, .. } => up.macvlans.push((p.mac, u.0, mode)),
                Role::Device | Role::Host { .. } => {}
            }
        }
        let empty = up.vlans.is_empty() && up.macvlans.is_empty();
        self.port_mut(lower).uppers = (!empty).then(|| Arc::new(up));
        let mut cur = Some(lower);
        while let Some(id) = cur {
            self.recompile_port(id);
            cur = self.port(id).role.lower().map(PortId);
        }
    }

    /// `port`'s address as Linux gives a bridge port's address a local entry: the host port's
    /// (`mac`) or a device's interface address (`if_mac`); 0: none.
    fn local_mac(p: &Port) -> u64 {
        match p.role {
            Role::Host { .. } => p.mac,
            Role::Device => p.if_mac,
            Role::Vlan { .. } | Role::Macvlan { .. } => 0,
        }
    }

    /// The I/O layer tells the switch device port `id`'s own interface address (AF_PACKET,
    /// AF_XDP: the device's; a TAP's interface is the far end of the wire), or none (`None`).
    /// In a bridge the address is a local (permanent) FDB entry in VLAN 0 and each VLAN of
    /// the port, as Linux adds one for every port (`br_fdb_add_local`): it replaces a learned
    /// entry of that address elsewhere, frames to it go up to the host port (or count as
    /// `local`), and it is not a learned entry. A changed address moves the entries. Ports
    /// of other roles keep their own addresses; this changes nothing for them.
    pub fn set_port_address(&mut self, id: PortId, mac: Option<MacAddr>) {
        let new = mac
            .filter(|m| !m.is_multicast() && !m.is_zero())
            .map_or(0, mac_u64);
        let p = self.port(id);
        if p.role != Role::Device || p.if_mac == new {
            return;
        }
        let old = p.if_mac;
        if let (Some(b), true) = (p.master, old != 0) {
            self.bridge(BridgeId(b)).fdb.remove_where(|s| {
                s.port == id.0
                    && s.key & 0xffff_ffff_ffff == old
                    && s.flags & (F_PERMANENT | F_USER) == F_PERMANENT
            });
        }
        self.port_mut(id).if_mac = new;
        self.sync_local_fdb(id);
    }

    /// The address the I/O layer reported for device port `id` ([`Switch::set_port_address`]).
    pub fn port_address(&self, id: PortId) -> Option<MacAddr> {
        let m = self.port(id).if_mac;
        (m != 0).then(|| {
            let b = m.to_be_bytes();
            MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
        })
    }

    /// A device port's interface address as a local entry in VLAN 0 and each of its VLANs
    /// (those it has already are kept).
    fn sync_local_fdb(&mut self, id: PortId) {
        let p = self.port(id);
        let (Some(b), Role::Device, mac) = (p.master, p.role, p.if_mac) else {
            return;
        };
        if mac == 0 {
            return;
        }
        let b = BridgeId(b);
        let Ok(vids) = self.fdb_vids(id, b, None) else {
            return;
        };
        let now = self.now_ns;
        let mut victims = Vec::new();
        let fdb = &self.bridge(b).fdb;
        for vid in vids {
            let key = mac | (u64::from(vid) << 48);
            if fdb
                .get(key)
                .is_some_and(|s| s.port == id.0 && s.kind() == FdbKind::Permanent)
            {
                continue;
            }
            victims.extend(fdb.add_local(key, id.0, now).1);
        }
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
    }

    /// The host port's address as a permanent entry in each of its VLANs (and VLAN 0).
    fn sync_host_fdb(&mut self, id: PortId) {
        let Some(mac) = self.port_mac(id) else {
            return;
        };
        if self.port(id).master.is_none() {
            return;
        }
        // Cannot fail for lack of room: permanent entries evict learned ones, and a full table
        // of user entries only refuses (the host port still learns its address then).
        let _ = self.fdb_add(mac, id, None, FdbKind::Permanent, false, true);
    }

    // ----- VLANs -----

    fn attached(&self, id: PortId) -> Result<BridgeId, ConfigError> {
        self.port(id)
            .master
            .map(BridgeId)
            .ok_or_else(|| ConfigError::NoMaster(self.port(id).name.clone()))
    }

    /// `vlan add vid V[-V2] dev NAME [pvid] [untagged]`. Re-adding a VID replaces its flags, as
    /// in Linux: without `untagged` it becomes tagged; without `pvid` it stops being the PVID.
    pub fn vlan_add(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        if pvid && start != end {
            return Err(ConfigError::PvidRange);
        }
        let b = self.attached(id)?;
        let port = self.port_mut(id);
        for vid in start..=end {
            port.member.insert(vid);
            if untagged {
                port.untagged.insert(vid);
            } else {
                port.untagged.remove(vid);
            }
            if pvid {
                port.pvid = vid;
            } else if port.pvid == vid {
                port.pvid = 0;
            }
        }
        self.recompile_port(id);
        self.recompile_flood(b, start..=end);
        if let Role::Host { .. } = self.port(id).role {
            self.sync_host_fdb(id);
        }
        self.sync_local_fdb(id);
        Ok(())
    }

    /// `vlan del vid V[-V2] dev NAME`: also flushes the port's dynamic entries in those VLANs
    /// (on a host port, its own address's permanent entries in them too).
    pub fn vlan_del(&mut self, id: PortId, start: u32, end: u32) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        let b = self.attached(id)?;
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let port = self.port_mut(id);
        for vid in start..=end {
            port.member.remove(vid);
            port.untagged.remove(vid);
            if port.pvid == vid {
                port.pvid = 0;
            }
        }
        set_pvlan_codes(port, start, end, 0);
        set_limit_codes(port, start, end, 0);
        self.flush_port_vlans(id, start, end);
        let (mac, host) = (
            Self::local_mac(self.port(id)),
            matches!(self.port(id).role, Role::Host { .. }),
        );
        if mac != 0 {
            // Its own address's local entries in those VLANs (Linux
            // `br_fdb_find_delete_local`).
            let fdb = &self.bridge(b).fdb;
            fdb.remove_where(|s| {
                s.port == id.0
                    && s.key & 0xffff_ffff_ffff == mac
                    && (host || s.flags & F_PERMANENT != 0)
                    && (start..=end).contains(&fdb.key_vlan(s.key).0)
            });
        }
        self.recompile_port(id);
        self.recompile_flood(b, start..=end);
        Ok(())
    }

    /// `link set dev P vlan_mode MODE [tag V] [trunks LIST] [cvlans LIST]`: replaces the
    /// port's membership, untagged set and PVID with what the mode compiles into (see
    /// [`VlanMode`]), and makes it a tunnel port or not. VLANs the port leaves lose its
    /// dynamic entries, as with `vlan del`. The port must be in a bridge.
    pub fn set_vlan_mode(&mut self, id: PortId, mode: VlanMode) -> Result<(), ConfigError> {
        mode.check().map_err(ConfigError::BadVlanMode)?;
        let b = self.attached(id)?;
        let c = mode.compile();
        let old = self.port(id).member.clone();
        let port = self.port_mut(id);
        port.member = c.member;
        port.untagged = c.untagged;
        port.pvid = c.pvid;
        port.tunnel = c.tunnel.is_some();
        port.cvlans = c.tunnel.flatten().map(Box::new);
        port.vlan_mode = Some(mode);
        let new = self.port(id).member.clone();
        let gone: Vec<u16> = old.iter().filter(|&v| !new.contains(v)).collect();
        for &v in &gone {
            set_pvlan_codes(self.port_mut(id), v, v, 0);
            set_limit_codes(self.port_mut(id), v, v, 0);
        }
        let changed: BTreeSet<u16> = old.iter().chain(new.iter()).collect();
        if !gone.is_empty() {
            let mac = Self::local_mac(self.port(id));
            let host = matches!(self.port(id).role, Role::Host { .. });
            let gone_set: BTreeSet<u16> = gone.iter().copied().collect();
            let fdb = &self.bridge(b).fdb;
            fdb.remove_where(|s| {
                s.port == id.0
                    && gone_set.contains(&fdb.key_vlan(s.key).0)
                    && (s.ages()
                        || (mac != 0
                            && s.key & 0xffff_ffff_ffff == mac
                            && (host || s.flags & F_PERMANENT != 0)))
            });
        }
        self.recompile_port(id);
        self.recompile_flood(b, changed);
        if let Role::Host { .. } = self.port(id).role {
            self.sync_host_fdb(id);
        }
        self.sync_local_fdb(id);
        Ok(())
    }

    /// `vlan set dev P vid V[-V2] pvlan ROLE|none`: P's private-VLAN role in those VLANs,
    /// which P must carry.
    pub fn set_pvlan(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        role: Option<PvlanRole>,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        self.attached(id)?;
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let code = role.map_or(0, PvlanRole::code);
        set_pvlan_codes(self.port_mut(id), start, end, code);
        Ok(())
    }

    /// `vlan map add dev P vid A translate B`: frames tagged A on P's wire are in VLAN B inside
    /// the bridge, and frames of VLAN B leave P tagged A. One map per wire VID and per VID
    /// inside: a map that would reuse either is refused naming the one in the way. Maps stay
    /// when the port leaves its bridge (they are the port's, like its settings).
    pub fn vlan_map_add(&mut self, id: PortId, wire: u16, inside: u16) -> Result<(), ConfigError> {
        let wire = check_vid(wire.into())?;
        let inside = check_vid(inside.into())?;
        let p = self.port(id);
        let get = |t: &Option<Arc<[u16]>>, v: u16| t.as_ref().map_or(0, |t| t[usize::from(v)]);
        let taken_in = get(&p.vid_in, wire);
        if taken_in != 0 {
            return Err(ConfigError::VlanMapConflict(format!(
                "vid {wire} on {} is translated to {taken_in} already (vlan map del dev {} vid {wire} first)",
                p.name, p.name
            )));
        }
        let taken_out = get(&p.vid_out, inside);
        if taken_out != 0 {
            return Err(ConfigError::VlanMapConflict(format!(
                "{inside} on {} is already the translation of vid {taken_out}",
                p.name
            )));
        }
        if let Some(m) = p.tag2.as_ref().and_then(|t| t.by_inside(inside, 0)) {
            return Err(ConfigError::VlanMapConflict(format!(
                "{inside} on {} is already the translation of {}",
                p.name,
                tag_map_words(m)
            )));
        }
        let port = self.port_mut(id);
        set_map(&mut port.vid_in, wire, inside);
        set_map(&mut port.vid_out, inside, wire);
        Ok(())
    }

    /// `vlan map del dev P vid A`: removes the map of wire VID A.
    pub fn vlan_map_del(&mut self, id: PortId, wire: u16) -> Result<(), ConfigError> {
        let p = self.port(id);
        let inside = p
            .vid_in
            .as_ref()
            .map_or(0, |t| t[usize::from(wire & 0x0fff)]);
        if inside == 0 {
            return Err(ConfigError::NoVlanMap {
                dev: p.name.clone(),
                vid: wire,
            });
        }
        let port = self.port_mut(id);
        set_map(&mut port.vid_in, wire, 0);
        set_map(&mut port.vid_out, inside, 0);
        Ok(())
    }

    /// `vlan map add dev P cvid C[-C2] svid S` (selective Q-in-Q): a frame entering P whose
    /// outer tag is a C-tag (0x8100) with VID in C..C2 is in S-VLAN S, its C-tag kept; a frame
    /// of S leaving P whose inner C-tag has such a VID loses the S-tag. A C-VID mapped already
    /// is refused naming its S-VLAN.
    pub fn cvid_map_add(
        &mut self,
        id: PortId,
        start: u16,
        end: u16,
        svid: u16,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start.into(), end.into())?;
        let svid = check_vid(svid.into())?;
        let p = self.port(id);
        if let Some(t) = &p.cvid_in {
            if let Some(c) = (start..=end).find(|&c| t[usize::from(c)] != 0) {
                return Err(ConfigError::VlanMapConflict(format!(
                    "cvid {c} on {} is mapped to svid {} already",
                    p.name,
                    t[usize::from(c)]
                )));
            }
        }
        if let Some(m) = p
            .tag2
            .as_ref()
            .and_then(|t| (start..=end).find_map(|c| t.by_inside(svid, c)))
        {
            return Err(ConfigError::VlanMapConflict(format!(
                "svid {svid} cvid {} on {} is already the translation of {}",
                m.inner.unwrap_or(0),
                p.name,
                tag_map_words(m)
            )));
        }
        let port = self.port_mut(id);
        for c in start..=end {
            set_map(&mut port.cvid_in, c, svid);
        }
        Ok(())
    }

    /// `vlan map del dev P cvid C[-C2]`: every C-VID must be mapped.
    pub fn cvid_map_del(&mut self, id: PortId, start: u16, end: u16) -> Result<(), ConfigError> {
        let (start, end) = check_range(start.into(), end.into())?;
        let p = self.port(id);
        let mapped = |c: u16| p.cvid_in.as_ref().is_some_and(|t| t[usize::from(c)] != 0);
        if let Some(c) = (start..=end).find(|&c| !mapped(c)) {
            return Err(ConfigError::NoVlanMap {
                dev: p.name.clone(),
                vid: c,
            });
        }
        let port = self.port_mut(id);
        for c in start..=end {
            set_map(&mut port.cvid_in, c, 0);
        }
        Ok(())
    }

    /// `vlan map add dev P svid S cvid C translate V` (2:1, `inner` `None`) or `… translate S2
    /// C2` (2:2): an S-tag S with the C-tag C right behind it on P's wire is VLAN V (one tag
    /// inside), or S-VLAN S2 with C-tag C2, both ways. Refused naming the map in the way: a
    /// second map of (S, C); a second way out for VLAN V (a 2:1 map or a 1:1 `translate V`);
    /// a second way out for (S2, C2) (a 2:2 map or selective Q-in-Q `cvid C2 svid S2`).
    pub fn tag_map_add(&mut self, id: PortId, map: TagMap) -> Result<(), ConfigError> {
        let map = TagMap {
            svid: check_vid(map.svid.into())?,
            cvid: check_vid(map.cvid.into())?,
            vid: check_vid(map.vid.into())?,
            inner: map.inner.map(|c| check_vid(c.into())).transpose()?,
        };
        let p = self.port(id);
        let conflict = |what: String| Err(ConfigError::VlanMapConflict(what));
        let maps = p.tag2.as_ref();
        if let Some(m) = maps.and_then(|t| t.by_wire(map.svid, map.cvid)) {
            return conflict(format!(
                "svid {} cvid {} on {} is mapped already ({})",
                map.svid,
                map.cvid,
                p.name,
                tag_map_words(m)
            ));
        }
        match map.inner {
            None => {
                if let Some(m) = maps.and_then(|t| t.by_inside(map.vid, 0)) {
                    return conflict(format!(
                        "{} on {} is already the translation of {}",
                        map.vid,
                        p.name,
                        tag_map_words(m)
                    ));
                }
                let wire = p.vid_out.as_ref().map_or(0, |t| t[usize::from(map.vid)]);
                if wire != 0 {
                    return conflict(format!(
                        "{} on {} is already the translation of vid {wire}",
                        map.vid, p.name
                    ));
                }
            }
            Some(c2) => {
                if let Some(m) = maps.and_then(|t| t.by_inside(map.vid, c2)) {
                    return conflict(format!(
                        "svid {} cvid {c2} on {} is already the translation of {}",
                        map.vid,
                        p.name,
                        tag_map_words(m)
                    ));
                }
                if p.cvid_in
                    .as_ref()
                    .is_some_and(|t| t[usize::from(c2)] == map.vid)
                {
                    return conflict(format!(
                        "cvid {c2} svid {} on {} is selective Q-in-Q already (vlan map cvid {c2} svid {})",
                        map.vid, p.name, map.vid
                    ));
                }
            }
        }
        let mut all = maps.map_or_else(Vec::new, |t| t.maps.clone());
        all.push(map);
        self.port_mut(id).tag2 = Some(Arc::new(TagMaps::from_maps(all)));
        self.recompile_port(id);
        Ok(())
    }

    /// `vlan map del dev P svid S cvid C`: removes the 2:1 or 2:2 map of (S, C).
    pub fn tag_map_del(&mut self, id: PortId, svid: u16, cvid: u16) -> Result<(), ConfigError> {
        let p = self.port(id);
        let Some(maps) = p.tag2.as_ref().filter(|t| t.by_wire(svid, cvid).is_some()) else {
            return Err(ConfigError::NoTagMap {
                dev: p.name.clone(),
                svid,
                cvid,
            });
        };
        let rest: Vec<TagMap> = maps
            .maps
            .iter()
            .filter(|m| (m.svid, m.cvid) != (svid, cvid))
            .copied()
            .collect();
        self.port_mut(id).tag2 = (!rest.is_empty()).then(|| Arc::new(TagMaps::from_maps(rest)));
        self.recompile_port(id);
        Ok(())
    }

    /// Port `id`'s 2:1 and 2:2 maps, by (S-VID, C-VID).
    pub fn tag_maps(&self, id: PortId) -> Vec<TagMap> {
        self.port(id)
            .tag2
            .as_ref()
            .map_or_else(Vec::new, |t| t.maps.clone())
    }

    /// Port `id`'s selective Q-in-Q maps as runs: (C-VID first, last, S-VID).
    pub fn cvid_maps(&self, id: PortId) -> Vec<(u16, u16, u16)> {
        let Some(t) = self.port(id).cvid_in.as_ref() else {
            return Vec::new();
        };
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for c in 1..4095u16 {
            let s = t[usize::from(c)];
            if s == 0 {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 + 1 == c && last.2 == s => last.1 = c,
                _ => out.push((c, c, s)),
            }
        }
        out
    }

    /// Port `id`'s 1:1 maps: (wire VID, VID inside), by wire VID.
    pub fn vlan_maps(&self, id: PortId) -> Vec<(u16, u16)> {
        let Some(t) = self.port(id).vid_in.as_ref() else {
            return Vec::new();
        };
        (1..4095u16)
            .filter(|&v| t[usize::from(v)] != 0)
            .map(|v| (v, t[usize::from(v)]))
            .collect()
    }

    /// `vlan set vid V[-V2] dev P fdb_max_learned N [violation V]`: at most N learned entries
    /// of P in each of those VLANs (0: no limit); a new source beyond it is dropped as the
    /// violation mode says. The VLANs must be configured on P.
    pub fn set_vlan_limit(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        limit: u32,
        violation: Violation,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        self.attached(id)?;
        if limit > 0x00ff_ffff {
            return Err(ConfigError::BadVlanLimit(limit));
        }
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let code = if limit == 0 {
            0
        } else {
            (violation as u32) << 24 | limit
        };
        set_limit_codes(self.port_mut(id), start, end, code);
        Ok(())
    }

    /// Port `id`'s learning limit in `vid`, if it has one.
    pub fn port_vlan_limit(&self, id: PortId, vid: u16) -> Option<(u32, Violation)> {
        limit_of(self.port(id), vid)
    }

    /// Port `id`'s private-VLAN role in `vid`.
    pub fn port_pvlan(&self, id: PortId, vid: u16) -> Option<PvlanRole> {
        let t = self.port(id).pvlan.as_ref()?;
        PvlanRole::from_code(t[usize::from(vid & 0x0fff)])
    }

    /// Removes the port's dynamic entries in VIDs `start..=end` (one walk of the table).
    fn flush_port_vlans(&mut self, id: PortId, start: u16, end: u16) {
        if let Some(b) = self.port(id).master {
            let fdb = &self.bridge(BridgeId(b)).fdb;
            fdb.remove_where(|s| {
                s.port == id.0 && (start..=end).contains(&fdb.key_vlan(s.key).0) && s.ages()
            });
        }
    }

    /// VLAN configuration of every attached port (or of `dev` only), for `vlan show`.
    pub fn vlans(&self, dev: Option<&str>) -> Result<Vec<VlanView>, ConfigError> {
        let only = match dev {
            // A bridge's own VLANs are its host port's.
            Some(d) => match self.link(d)? {
                Link::Bridge(b) => match self.bridge(BridgeId(b)).host {
                    Some(h) => Some(PortId(h)),
                    None => return Err(ConfigError::NotAPort(d.to_string())),
                },
                Link::Port(p) => Some(PortId(p)),
            },
            None => None,
        };
        let mut out = Vec::new();
        for (id, name) in self.port_ids() {
            if only.is_some_and(|o| o != id) {
                continue;
            }
            let p = self.port(id);
            if p.master.is_none() {
                continue;
            }
            let vlans = p
                .member
                .iter()
                .map(|vid| {
                    let mut flags = Vec::new();
                    if p.pvid == vid {
                        flags.push("PVID");
                    }
                    if p.untagged.contains(vid) {
                        flags.push("Egress Untagged");
                    }
                    VlanEntryView {
                        vlan: vid,
                        flags,
                        pvlan: p
                            .pvlan
                            .as_ref()
                            .and_then(|t| PvlanRole::from_code(t[usize::from(vid)]))
                            .map(|r| r.to_string()),
                        fdb_max_learned: limit_of(p, vid).map(|(n, _)| n),
                        violation: limit_of(p, vid).map(|(_, v)| v),
                    }
                })
                .collect();
            out.push(VlanView {
                ifname: name.to_string(),
                vlans,
            });
        }
        Ok(out)
    }

    /// The `vlan_mode` port `id` was given, if any (cleared when it leaves its bridge).
    pub fn port_vlan_mode(&self, id: PortId) -> Option<&VlanMode> {
        self.port(id).vlan_mode.as_ref()
    }

    /// Membership of `vid` on port `id`: `None` if not a member, else `(is_pvid, untagged)`.
    pub fn vlan_membership(&self, id: PortId, vid: u16) -> Option<(bool, bool)> {
        let p = self.port(id);
        p.member
            .contains(vid)
            .then(|| (p.pvid == vid, p.untagged.contains(vid)))
    }

    // ----- FDB -----

    /// `fdb add|replace MAC dev NAME [vlan V] [static|dynamic|permanent] [sticky]`. Without a
    /// VLAN on a VLAN-filtering bridge the entry is added for VLAN 0 and for every VLAN of the
    /// port, as Linux does.
    pub fn fdb_add(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let b = self.attached(id)?;
        let vids = self.fdb_vids(id, b, vlan)?;
        self.fdb_add_fids(mac, id, b, vids, kind, sticky, replace, false)
    }

    /// `fdb add|replace MAC dev NAME [vlan V [inner_vlan C]] extern_learn`: an entry a control
    /// plane learned (Linux `NTF_EXT_LEARNED`): dynamic, added by the user, never aged, kept
    /// on port down and `vlan del`, not a learned entry (limits, eviction); learning the
    /// address on another port takes it over. As Linux, it replaces an existing entry of the
    /// key whatever the command (`add` included), except the bridge's own (permanent) ones.
    pub fn fdb_add_extern(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
        inner: Option<u32>,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let (b, vids) = match (vlan, inner) {
            (Some(v), Some(c)) => {
                let (b, _, _, fid) = self.inner_fid_of(id, v, c)?;
                (b, vec![fid])
            }
            _ => {
                let b = self.attached(id)?;
                (b, self.fdb_vids(id, b, vlan)?)
            }
        };
        let fdb = &self.bridge(b).fdb;
        if let Some(&fid) = vids.iter().find(|&&v| {
            fdb.get(fdb_key(mac, v))
                .is_some_and(|s| s.kind() == FdbKind::Permanent)
        }) {
            let (vid, _) = fdb.key_vlan(fdb_key(mac, fid));
            return Err(ConfigError::FdbEntryExists {
                mac,
                vid,
                dev: self.port(id).name.clone(),
            });
        }
        self.fdb_add_fids(mac, id, b, vids, FdbKind::Dynamic, false, true, true)
    }

    /// `fdb add|replace MAC dev NAME vlan V inner_vlan C …`: an entry for the pair (V, C) on a
    /// bridge with `learn_inner_vid on` (`docs/semantics.md` §K7), used before the VLAN's own.
    #[allow(clippy::too_many_arguments)]
    pub fn fdb_add_inner(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: u32,
        inner: u32,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let (b, vid, inner, fid) = self.inner_fid_of(id, vlan, inner)?;
        if !replace && self.bridge(b).fdb.get(fdb_key(mac, fid)).is_some() {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::InnerFdbEntryExists {
                mac,
                vid,
                inner,
                dev,
            });
        }
        self.fdb_add_fids(mac, id, b, vec![fid], kind, sticky, replace, false)
    }

    /// `fdb del MAC dev NAME vlan V inner_vlan C`.
    pub fn fdb_del_inner(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: u32,
        inner: u32,
    ) -> Result<(), ConfigError> {
        let (b, vid, inner, fid) = self.inner_fid_of(id, vlan, inner)?;
        let fdb = &self.bridge(b).fdb;
        let key = fdb_key(mac, fid);
        if fdb.get(key).is_none_or(|s| s.port != id.0) {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::NoSuchInnerFdbEntry {
                mac,
                vid,
                inner,
                dev,
            });
        }
        fdb.remove(key);
        Ok(())
    }

    /// The bridge, VID, inner VID and FID of `vlan V inner_vlan C` on port `id`: the bridge
    /// learns per inner VID, the port carries V, and the pair has (or gets) a FID.
    fn inner_fid_of(
        &self,
        id: PortId,
        vlan: u32,
        inner: u32,
    ) -> Result<(BridgeId, u16, u16, u16), ConfigError> {
        let b = self.attached(id)?;
        let s = &self.bridge(b).settings;
        if !(s.learn_inner_vid && s.vlan_filtering) {
            return Err(ConfigError::InnerVlanOff(self.bridge(b).name.clone()));
        }
        let vid = check_vid(vlan)?;
        let inner = check_vid(inner)?;
        if !self.port(id).member.contains(vid) {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::VlanNotConfigured { dev, vid });
        }
        let fid = self.bridge(b).fdb.inner_fids().fid(vid, inner);
        if fid == vid {
            return Err(ConfigError::InnerFidsFull(self.bridge(b).name.clone()));
        }
        Ok((b, vid, inner, fid))
    }

    /// Adds (or with `replace` replaces) the user entry of `mac` on port `id` in each of
    /// `vids` (FIDs) of bridge `b`, all or none; `extern_learn`: marked so.
    #[allow(clippy::too_many_arguments)]
    fn fdb_add_fids(
        &mut self,
        mac: MacAddr,
        id: PortId,
        b: BridgeId,
        vids: Vec<u16>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
        extern_learn: bool,
    ) -> Result<(), ConfigError> {
        let flags = match kind {
            FdbKind::Dynamic => 0,
            FdbKind::Static => F_STATIC,
            FdbKind::Permanent => F_PERMANENT,
        } | if sticky { F_STICKY } else { 0 }
            | if extern_learn { F_EXTERN } else { 0 };
        let now = self.now_ns;
        let name = self.port(id).name.clone();
        let fdb = &self.bridge(b).fdb;
        if !replace {
            for &vid in &vids {
                if fdb.get(fdb_key(mac, vid)).is_some() {
                    return Err(ConfigError::FdbEntryExists {
                        mac,
                        vid,
                        dev: name,
                    });
                }
            }
        }
        // Existing keys are replaced first (they need no room, and once user entries they
        // cannot be evicted); new keys then take room, evicting learned entries fairly. Room is
        // checked for all of them before anything changes: nothing is half-applied.
        let (existing, fresh): (Vec<u16>, Vec<u16>) = vids
            .iter()
            .partition(|&&v| fdb.get(fdb_key(mac, v)).is_some());
        let replaced_learned = existing
            .iter()
            .filter(|&&v| fdb.get(fdb_key(mac, v)).is_some_and(|s| s.is_learned()))
            .count();
        let evictable = fdb.learned() - replaced_learned;
        let needed = (fdb.len() + fresh.len()).saturating_sub(fdb.max_entries());
        if needed > evictable {
            return Err(ConfigError::FdbFull(fdb.max_entries()));
        }
        let mut victims = Vec::new();
        for &vid in existing.iter().chain(&fresh) {
            match fdb.add_user(fdb_key(mac, vid), id.0, flags, now, replace) {
                Ok(Some(victim)) => victims.push(victim),
                Ok(None) => {}
                Err(AddError::Exists(_)) => unreachable!("checked above"),
                // Not expected after the room check; an error, never a panic, if it happens.
                Err(AddError::Full) => return Err(ConfigError::FdbFull(fdb.max_entries())),
            }
        }
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
        Ok(())
    }

    fn fdb_vids(
        &self,
        id: PortId,
        b: BridgeId,
        vlan: Option<u32>,
    ) -> Result<Vec<u16>, ConfigError> {
        Ok(match vlan {
            // `vlan 0`: the VLAN-0 entry alone (a qbridge extension; Linux refuses vlan 0 and
            // has no way to name that entry on a VLAN-filtering bridge).
            Some(0) => vec![0],
            Some(v) => {
                let vid = check_vid(v)?;
                // Linux refuses an entry in a VLAN the port does not carry ("unconfigured vlan"),
                // with or without vlan_filtering: ports keep their VLANs either way.
                if !self.port(id).member.contains(vid) {
                    let dev = self.port(id).name.clone();
                    return Err(ConfigError::VlanNotConfigured { dev, vid });
                }
                vec![vid]
            }
            None if self.bridge(b).settings.vlan_filtering => std::iter::once(0)
                .chain(self.port(id).member.iter())
                .collect(),
            None => vec![0],
        })
    }

    /// `fdb del MAC dev NAME [vlan V]`.
    pub fn fdb_del(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
    ) -> Result<(), ConfigError> {
        let b = self.attached(id)?;
        let vids = self.fdb_vids(id, b, vlan)?;
        let name = self.port(id).name.clone();
        let fdb = &self.bridge(b).fdb;
        let present: Vec<u16> = vids
            .iter()
            .copied()
            .filter(|&v| fdb.get(fdb_key(mac, v)).is_some_and(|s| s.port == id.0))
            .collect();
        if present.is_empty() || (vlan.is_some() && present.len() != vids.len()) {
            return Err(ConfigError::NoSuchFdbEntry {
                mac,
                vid: vids[0],
                dev: name,
            });
        }
        for vid in present {
            fdb.remove(fdb_key(mac, vid));
        }
        Ok(())
    }

    /// `fdb flush dev NAME [vlan V] [dynamic|static]`: NAME is a bridge (whole table) or a
    /// port. Permanent entries stay. Returns the number of entries removed.
    pub fn fdb_flush(
        &mut self,
        dev: &str,
        vlan: Option<u32>,
        which: FdbFlushKind,
    ) -> Result<usize, ConfigError> {
        self.fdb_flush_matching(dev, vlan, which.into())
    }

    /// `fdb flush dev DEV [vlan V]` with bridge-fdb(8)'s kind and flag words: removes the
    /// entries `which` selects (permanent ones only when it selects them).
    pub fn fdb_flush_matching(
        &mut self,
        dev: &str,
        vlan: Option<u32>,
        which: FdbFlushMatch,
    ) -> Result<usize, ConfigError> {
        let vid = vlan.map(check_vid).transpose()?;
        let (b, port) = match self.link(dev)? {
            Link::Bridge(b) => (BridgeId(b), None),
            Link::Port(p) => (self.attached(PortId(p))?, Some(p)),
        };
        let fdb = &self.bridge(b).fdb;
        let n = fdb.remove_where(|s| {
            which.selects(s)
                && port.is_none_or(|p| s.port == p)
                && vid.is_none_or(|v| fdb.key_vlan(s.key).0 == v)
        });
        // (S-VID, C-VID) pairs left without entries give their FIDs back.
        fdb.reclaim_inner();
        Ok(n)
    }

    /// FDB entries matching `filter`, sorted by bridge, port (in creation order, as
    /// [`Switch::port_ids`]), VLAN and MAC.
    pub fn fdb_entries(&self, filter: &FdbFilter) -> Result<Vec<FdbEntryView>, ConfigError> {
        let only_bridge = filter
            .bridge
            .as_deref()
            .map(|n| self.bridge_id(n))
            .transpose()?;
        let only_port = filter.dev.as_deref().map(|n| self.port_id(n)).transpose()?;
        // Sort keys carry the ids, so ordering needs no name lookups.
        let mut keyed = Vec::new();
        for (bid, bname) in self.bridge_ids() {
            if only_bridge.is_some_and(|b| b != bid) {
                continue;
            }
            let b = self.bridge(bid);
            for s in b.fdb.entries() {
                if only_port.is_some_and(|p| p.0 != s.port) {
                    continue;
                }
                let (fid, inner) = b.fdb.key_vlan(s.key);
                if filter.vlan.is_some_and(|v| v != fid) {
                    continue;
                }
                let view = b.fdb.view(
                    &s,
                    self.port(PortId(s.port)).name.clone(),
                    bname.to_string(),
                    self.now_ns.saturating_sub(s.seen_ns),
                );
                let created = self.port(PortId(s.port)).generation;
                keyed.push(((bid.0, created, fid, inner, key_mac(s.key)), view));
            }
        }
        keyed.sort_unstable_by_key(|k| k.0);
        let out = keyed.into_iter().map(|(_, v)| v).collect();
        Ok(out)
    }

    /// Looks up `mac` in VLAN `vid` (0 on a VLAN-unaware bridge) of bridge `b`.
    pub fn fdb_lookup(&self, b: BridgeId, mac: MacAddr, vid: u16) -> Option<(PortId, FdbKind)> {
        self.bridge(b)
            .fdb
            .get(fdb_key(mac, vid))
            .map(|s| (PortId(s.port), s.kind()))
    }

    /// Removes dynamic entries idle longer than each bridge's `ageing_time`. Call it off the
    /// fast path, about once a second. Returns the number removed.
    pub fn age(&mut self, now_ns: u64) -> usize {
        self.now_ns = self.now_ns.max(now_ns);
        let mut n = 0;
        for b in self.bridges.iter().flatten() {
            n += b.fdb.age(now_ns, b.settings.ageing_time_ns);
            // Pairs whose entries aged out (or went with a port, a VLAN) give their FIDs back.
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

    // ----- views -----

    /// All links (bridges first, then ports), for `link show`. A bridge's host port shows
    /// in the bridge's entry.
    pub fn links(&self, with_stats: bool) -> Vec<LinkView> {
        let mut out = Vec::new();
        for (bid, name) in self.bridge_ids() {
            let b = self.bridge(bid);
            let host = b.host.map(PortId);
            out.push(LinkView {
                ifname: name.to_string(),
                kind: "bridge".to_string(),
                master: None,
                link: None,
                address: host.and_then(|h| self.port_mac(h)).map(|m| m.to_string()),
                linkinfo: None,
                bridge: Some(b.settings.clone()),
                port: host.map(|h| self.port_view(h)),
                stats: with_stats
                    .then(|| host.map(|h| self.port(h).counters.sum()))
                    .flatten(),
            });
        }
        for (id, name) in self.port_ids() {
            let p = self.port(id);
            if let Role::Host { .. } = p.role {
                continue;
            }
            let linkinfo = match p.role {
                Role::Vlan { tpid, vid, .. } => Some(LinkInfo {
                    info_kind: "vlan",
                    info_data: LinkInfoData {
                        protocol: Some(tpid_name(tpid)),
                        id: Some(vid),
                        mode: None,
                    },
                }),
                Role::Macvlan { mode, .. } => Some(LinkInfo {
                    info_kind: "macvlan",
                    info_data: LinkInfoData {
                        protocol: None,
                        id: None,
                        mode: Some(mode.as_str()),
                    },
                }),
                Role::Device | Role::Host { .. } => None,
            };
            out.push(LinkView {
                ifname: name.to_string(),
                kind: p.kind.clone(),
                master: p.master.map(|b| self.bridge(BridgeId(b)).name.clone()),
                link: p.role.lower().map(|l| self.port(PortId(l)).name.clone()),
                address: self.port_mac(id).map(|m| m.to_string()),
                linkinfo,
                bridge: None,
                port: Some(self.port_view(id)),
                stats: with_stats.then(|| p.counters.sum()),
            });
        }
        out
    }

    fn port_view(&self, id: PortId) -> PortView {
        let p = self.port(id);
        PortView {
            id: id.0,
            settings: p.settings.clone(),
            envhdr_effective: self.envhdr(id),
            tpid_effective: format!("0x{:04x}", p.tpid),
            max_frame: p.max_frame,
            link_up: p.link_up,
            vlan_mode: p.vlan_mode.clone(),
        }
    }

    // ----- compilation -----

    /// Recompiles port `id`'s own compiled fields (TPID, largest frame, running); the port is
    /// copied only if one of them changes. A port that stops running loses its dynamic entries.
    /// The envelope allowance in force on port `id`: its `envhdr len`, or automatically the
    /// bridge's rule ([`PortSettings::effective_envhdr`]) plus 4 bytes per tag the VLAN devices
    /// stacked on it push (so `eth0.100.10`'s 1500-byte packets leave `eth0` as 1522 bytes).
    fn envhdr(&self, id: PortId) -> u32 {
        let p = self.port(id);
        let protocol = match p.master {
            Some(b) => self.bridge(BridgeId(b)).settings.vlan_protocol,
            None => VlanProtocol::Dot1Q,
        };
        let base = p.settings.effective_envhdr(protocol, has_tagged(p));
        // Two-tag maps send frames with two tags.
        let base = match (p.settings.envhdr_len, &p.tag2) {
            (None, Some(_)) => base.max(8),
            _ => base,
        };
        match (p.settings.envhdr_len, &p.uppers) {
            (None, Some(_)) => base + 4 * self.tags_above(id),
            _ => base,
        }
    }

    fn recompile_port(&mut self, id: PortId) {
        let p = self.port(id);
        let protocol = match p.master {
            Some(b) => self.bridge(BridgeId(b)).settings.vlan_protocol,
            None => VlanProtocol::Dot1Q,
        };
        let tpid = p.settings.tpid.unwrap_or(protocol.tpid()).0;
        let envhdr = self.envhdr(id);
        let max_frame = 14 + p.settings.mtu + envhdr;
        let running = p.settings.up && p.link_up;
        let was_running = p.running;
        let master = p.master;
        let (pcp_inner, pcp_untagged, pcp_table) =
            compile_pcp(p.settings.pcp_mode, p.settings.default_pcp);
        if (p.tpid, p.max_frame, p.running) != (tpid, max_frame, running)
            || (p.pcp_inner, p.pcp_untagged, p.pcp_table) != (pcp_inner, pcp_untagged, pcp_table)
        {
            let p = self.port_mut(id);
            p.tpid = tpid;
            p.max_frame = max_frame;
            p.running = running;
            p.pcp_inner = pcp_inner;
            p.pcp_untagged = pcp_untagged;
            p.pcp_table = pcp_table;
        }
        if was_running && !running {
            if let Some(b) = master {
                self.bridge(BridgeId(b))
                    .fdb
                    .remove_where(|s| s.port == id.0 && s.ages());
            }
        }
    }

    /// Recompiles bridge `b` whole: every port and every flood list (after a change of the
    /// bridge's settings).
    fn recompile_bridge(&mut self, b: BridgeId) {
        for p in self.bridge(b).ports.clone() {
            self.recompile_port(PortId(p));
        }
        self.recompile_flood(b, 0..=4095);
    }

    /// Rebuilds the flood lists of `vids` in bridge `b` (VID 0: every port), keeping lists
    /// that come out the same. O(ports of the bridge) per VID.
    fn recompile_flood(&mut self, b: BridgeId, vids: impl IntoIterator<Item = u16>) {
        let mut changed: Vec<(u16, Arc<[u16]>)> = Vec::new();
        let mut list = Vec::new();
        {
            let br = self.bridge(b);
            for vid in vids {
                list.clear();
                list.extend(
                    br.ports
                        .iter()
                        .copied()
                        .filter(|&p| vid == 0 || self.port(PortId(p)).member.contains(vid)),
                );
                let cur = &br.flood[vid as usize & 0x0fff];
                if cur[..] != list[..] {
                    changed.push((vid, Arc::from(&list[..])));
                }
            }
        }
        if !changed.is_empty() {
            let br = self.bridge_mut(b);
            for (vid, l) in changed {
                br.flood[vid as usize & 0x0fff] = l;
            }
        }
    }
}

fn mac_u64(mac: MacAddr) -> u64 {
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&mac.0);
    u64::from_be_bytes(b)
}

fn has_tagged(p: &Port) -> bool {
    p.member.iter().any(|v| !p.untagged.contains(v))
}

fn check_range(start: u32, end: u32) -> Result<(u16, u16), ConfigError> {
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
        self.plan = None;
    }
}
