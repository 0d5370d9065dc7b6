//! The compiled plan: what the frame path forwards with.
//!
//! A [`Plan`] is an immutable snapshot of the switch's forwarding state: a vector of `Arc`'d
//! per-port records (`PortRecord`: VLAN member and untagged sets, PVID, TPID, largest frame,
//! provider features, spanning-tree states (`StpSets`), the receive table of the devices stacked on it) and per-bridge records
//! (`Bridge`: settings, the shared FDB, per-VID flood lists, VLAN counters), plus the
//! compiled mirror sessions (`mirror`). The configuration room changes the records
//! copy-on-write and recompiles their derived fields through `compile::Records`; the frame
//! path (`crate::path`) only reads them. Any number of worker threads read one plan at once.
//!
//! This room owns every `impl Plan`. Imports run one way: `crate::config` and `crate::path`
//! import the plan; the plan imports neither (only the leaf modules: settings, FDB, cells,
//! counters, VLAN sets and maps).

pub(crate) mod compile;
pub mod fast;
pub(crate) mod mirror;

use crate::cells::{CellSet, PortCounterSet, VlanCounterSet};
use crate::counters::DropReason;
use crate::fdb::Fdb;
use crate::settings::{BridgeSettings, MacvlanMode, PortSettings, Role, StpState};
use crate::tagmap::TagMaps;
use crate::vlanmode::VlanMode;
use crate::vlanset::VlanSet;
use mirror::CompiledDst;
use qbridge_wire::Tpid;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// Index of a port in the switch; stable while the port exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PortId(pub u16);

/// Index of a bridge in the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BridgeId(pub u16);

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

/// A port's record as the datapath sees it (not `io::Port`, the backend); shared like
/// [`Bridge`].
#[derive(Clone, Debug)]
pub(crate) struct PortRecord {
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
    /// A device port's own interface address, as the I/O layer reports it when it opens the backend
    /// ([`Switch::set_port_address`](crate::Switch::set_port_address); 48-bit integer; 0: none or
    /// not known — pcap and in-memory ports have none). In a bridge it is a local (permanent) FDB
    /// entry.
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
    /// Spanning-tree state by VID, while the port's bridge has `stp` on (`None`: the bridge
    /// has it off, or the port is the bridge's host port: no restriction). Configured by
    /// [`Switch::set_stp_state`](crate::Switch::set_stp_state); the flood lists leave out the
    /// VIDs a port does not forward in.
    pub stp: Option<Arc<StpSets>>,
    /// Compiled (at publish): the VIDs known unicast may leave this port in: its members (and
    /// VID 0, a VLAN-unaware bridge's) that it forwards in (spanning tree). The egress filter
    /// of the route memory (the same port in another VID) is one test of it.
    pub tx_member: VlanSet,
    /// Compiled (at publish): running, with no spanning-tree state: known unicast to it needs
    /// neither check (one test for both).
    pub sends: bool,
    /// Compiled ([`Switch::plan`](crate::Switch::plan), from the fields above): frames entering
    /// this port need none of the provider features of its ingress (no tunnel, no `cvlans`,
    /// `pcp_mode` keep with default PCP 0, no VLAN map in, no selective Q-in-Q, not locked, no
    /// spanning-tree state). The pipeline tests it once per run.
    pub plain: bool,
}

impl PortRecord {
    /// What [`PortRecord::plain`] should be.
    pub(crate) fn is_plain(&self) -> bool {
        !self.tunnel
            && self.cvlans.is_none()
            && !self.pcp_inner
            && self.pcp_untagged == 0
            && self.vid_in.is_none()
            && self.cvid_in.is_none()
            && self.tag2.is_none()
            && !self.settings.locked
            && self.stp.is_none()
    }
}

/// A port's spanning-tree states over the VIDs, as two sets: the VIDs it forwards in and the
/// VIDs it learns in (Learning or Forwarding; a superset). VID 0, the one VLAN of a
/// VLAN-unaware bridge, is in a set only when every VID 1-4094 is (the port's least state:
/// an unaware bridge cannot tell the trees apart, so it must not loop in any of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StpSets {
    pub fwd: VlanSet,
    pub learn: VlanSet,
}

impl StpSets {
    /// Every VID Discarding: a port joining a bridge with spanning tree on (802.1D: blocked
    /// until the protocol says otherwise).
    pub fn discarding() -> StpSets {
        StpSets {
            fwd: VlanSet::default(),
            learn: VlanSet::default(),
        }
    }

    pub fn state(&self, vid: u16) -> StpState {
        if self.fwd.contains(vid) {
            StpState::Forwarding
        } else if self.learn.contains(vid) {
            StpState::Learning
        } else {
            StpState::Discarding
        }
    }

    /// Sets `vid` (1-4094) to `state`; call [`StpSets::fix_vid0`] after a change.
    pub fn set(&mut self, vid: u16, state: StpState) {
        match state {
            StpState::Forwarding => {
                self.fwd.insert(vid);
                self.learn.insert(vid);
            }
            StpState::Learning => {
                self.fwd.remove(vid);
                self.learn.insert(vid);
            }
            StpState::Discarding => {
                self.fwd.remove(vid);
                self.learn.remove(vid);
            }
        }
    }

    /// Recompiles VID 0 (see the type's documentation).
    pub fn fix_vid0(&mut self) {
        for set in [&mut self.fwd, &mut self.learn] {
            set.remove(0);
            if (1..=4094).all(|v| set.contains(v)) {
                set.insert(0);
            }
        }
    }
}

/// The devices stacked on one port, compiled for the receive path.
#[derive(Clone, Debug, Default)]
pub(crate) struct Uppers {
    /// VLAN devices by `tpid << 16 | vid`.
    pub vlans: HashMap<u32, u16>,
    /// Macvlan endpoints: MAC (48-bit integer), port id, mode; in creation order.
    pub macvlans: Vec<(u64, u16, MacvlanMode)>,
}

impl Uppers {
    pub fn macvlan(&self, mac: u64) -> Option<(u16, MacvlanMode)> {
        self.macvlans
            .iter()
            .find(|(m, _, _)| *m == mac)
            .map(|&(_, p, mode)| (p, mode))
    }

    pub fn passthru(&self) -> Option<u16> {
        match self.macvlans.first() {
            Some(&(_, p, MacvlanMode::Passthru)) => Some(p),
            _ => None,
        }
    }
}

/// The compiled forwarding state at one moment: what datapath workers forward with. Immutable;
/// the switch publishes a new one after each change ([`Switch::plan`](crate::Switch::plan)).
#[derive(Debug, Default)]
pub struct Plan {
    pub(crate) bridges: Vec<Option<Arc<Bridge>>>,
    pub(crate) ports: Vec<Option<Arc<PortRecord>>>,
    pub(crate) unknown_port_drops: Option<Arc<CellSet>>,
    /// Some port is a stacked device or a host port: frames take the stacked path.
    pub(crate) stacked: bool,
    /// Port mirroring sessions, compiled; `None` without any (`mirror`).
    pub(crate) mirrors: Option<Arc<mirror::Mirrors>>,
    /// Some port has a spanning-tree state: BPDUs are copied to the control plane
    /// (`path/trap.rs`).
    pub(crate) trap_bpdu: bool,
}

impl Plan {
    /// Highest port id + 1: the size an output table needs.
    pub fn port_slots(&self) -> usize {
        self.ports.len()
    }

    pub(crate) fn port(&self, id: PortId) -> Option<&PortRecord> {
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

    /// Counts `n` frames (`bytes` bytes) sent on port `id` by worker `worker` outside the
    /// frame path (the spanning tree's BPDUs), so a port's transmit counters hold everything
    /// it sent, as a device's do.
    pub fn count_tx(&self, id: PortId, worker: usize, n: u64, bytes: u64) {
        if let Some(p) = self.port(id) {
            let w = p.counters.writer(worker);
            w.tx_frames.add(n);
            w.tx_bytes.add(bytes);
        }
    }

    /// The pcap files of the plan's `dst pcap` sessions, by sink index: the copies for sink
    /// `i` are left in `Outputs::mirror_sinks[i]` for the caller to write.
    /// The name of port `id` (`None`: no such port).
    pub fn port_name(&self, id: PortId) -> Option<&str> {
        self.port(id).map(|p| p.name.as_str())
    }

    pub fn mirror_sinks(&self) -> &[String] {
        match &self.mirrors {
            Some(m) => &m.sinks,
            None => &[],
        }
    }

    /// Counts `n` copies (`bytes` bytes) for sink `sink` that could not be written: moved from
    /// the session's `frames`/`bytes` (counted when the copy was handed to the sink, by this
    /// worker) to `tx_error`, in worker `worker`'s block of the session's counters.
    pub fn count_mirror_sink_error(&self, sink: usize, worker: usize, n: u64, bytes: u64) {
        let Some(m) = &self.mirrors else {
            return;
        };
        for s in &m.sessions {
            if let CompiledDst::Sink(k) = s.dst {
                if k as usize == sink {
                    let c = s.counters.writer(worker);
                    c.frames.sub(n);
                    c.bytes.sub(bytes);
                    c.drops[DropReason::TxError as usize].add(n);
                }
            }
        }
    }
}
