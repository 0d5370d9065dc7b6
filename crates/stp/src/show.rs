//! The `show` snapshot: bridge and per-port spanning-tree status and counters, plain data
//! serialisable with serde for `qbridge stp show -j`. Built on demand, O(ports).

use crate::config::Mode;
use crate::engine::Stp;
use crate::port::{InfoIs, Neighbour, PortCounters};
pub use crate::types::SendProtocol;
use crate::types::{BridgeId, PortId, PortRole, PortState, TreeId};
use serde::Serialize;

/// Whether this bridge is the root.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RootStatus {
    /// This bridge is the root bridge.
    Root,
    /// Another bridge is.
    NotRoot,
}

/// One port's status.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PortShow {
    /// Port number.
    pub port: u16,
    /// Port identifier.
    pub port_id: PortId,
    /// Tree (CIST only for now).
    pub tree: TreeId,
    /// Role.
    pub role: PortRole,
    /// State.
    pub state: PortState,
    /// Whether the port is enabled (link up and administratively up).
    pub enabled: bool,
    /// Port path cost in use.
    pub path_cost: u32,
    /// Designated root heard or sent on the port.
    pub designated_root: BridgeId,
    /// Designated cost.
    pub designated_cost: u32,
    /// Designated bridge on the port's LAN.
    pub designated_bridge: BridgeId,
    /// Designated port on the port's LAN.
    pub designated_port: PortId,
    /// Where the port's information came from.
    pub info: InfoIs,
    /// operEdge.
    pub edge: bool,
    /// operPointToPointMAC.
    pub point_to_point: bool,
    /// What the port sends.
    pub protocol: SendProtocol,
    /// Region of the last BPDU heard.
    pub neighbour: Neighbour,
    /// Root guard holds the port.
    pub root_inconsistent: bool,
    /// Loop guard holds the port.
    pub loop_inconsistent: bool,
    /// Role and state in each MSTI (MSTP mode), in `Stp::trees` order after the CIST.
    pub mstis: Vec<TreeShow>,
    /// Counters.
    pub counters: PortCounters,
}

/// A port's role and state in one MSTI.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TreeShow {
    /// The MSTI.
    pub tree: TreeId,
    /// Role.
    pub role: PortRole,
    /// State.
    pub state: PortState,
    /// MSTI regional root heard or sent on the port.
    pub designated_root: BridgeId,
    /// MSTI internal root path cost heard or sent on the port.
    pub designated_cost: u32,
    /// Where the port's MSTI information came from.
    pub info: InfoIs,
    /// Port path cost in this MSTI.
    pub path_cost: u32,
    /// Designated bridge for the MSTI on the port's LAN.
    pub designated_bridge: BridgeId,
}

/// The bridge's status.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Show {
    /// Protocol version.
    pub mode: Mode,
    /// This bridge.
    pub bridge_id: BridgeId,
    /// The root bridge.
    pub root_id: BridgeId,
    /// Root or not.
    pub root_status: RootStatus,
    /// Root port number.
    pub root_port: Option<u16>,
    /// Root path cost (MSTP: external root path cost).
    pub root_path_cost: u32,
    /// MSTP: the CIST regional root (this bridge outside MSTP).
    pub regional_root: BridgeId,
    /// MSTP: the CIST internal root path cost (0 outside MSTP).
    pub internal_root_path_cost: u32,
    /// Max Age, Forward Delay, Hello Time in use (from the root).
    pub max_age: u16,
    /// Forward Delay in use.
    pub forward_delay: u16,
    /// Hello Time configured.
    pub hello_time: u16,
    /// Topology changes seen.
    pub topology_changes: u64,
    /// Tick of the last one.
    pub last_topology_change_tick: Option<u64>,
    /// Ticks so far.
    pub now: u64,
    /// Ports in the order they were added.
    pub ports: Vec<PortShow>,
}

impl Stp {
    /// A snapshot of the status.
    pub fn show(&self) -> Show {
        let root_status = if self.root_priority.root == self.bridge_id {
            RootStatus::Root
        } else {
            RootStatus::NotRoot
        };
        Show {
            mode: self.config.mode,
            bridge_id: self.bridge_id,
            root_id: self.root_priority.root,
            root_status,
            root_port: self.root_port_id.map(|p| p.number()),
            root_path_cost: self.root_priority.root_path_cost,
            regional_root: self.root_priority.regional_root,
            internal_root_path_cost: self.root_priority.internal_cost,
            max_age: self.root_times.max_age,
            forward_delay: self.root_times.forward_delay,
            hello_time: self.config.hello_time,
            topology_changes: self.topology_changes,
            last_topology_change_tick: self.last_topology_change,
            now: self.now,
            ports: self
                .ports
                .iter()
                .enumerate()
                .map(|(i, q)| PortShow {
                    port: q.no,
                    port_id: q.port_id(),
                    tree: TreeId::CIST,
                    role: q.role,
                    state: if q.forwarding {
                        PortState::Forwarding
                    } else if q.learning {
                        PortState::Learning
                    } else {
                        PortState::Discarding
                    },
                    enabled: q.port_enabled,
                    path_cost: q.path_cost(),
                    designated_root: q.port_priority.root,
                    designated_cost: q.port_priority.root_path_cost,
                    designated_bridge: q.port_priority.designated_bridge,
                    designated_port: q.port_priority.designated_port,
                    info: q.info_is,
                    edge: q.oper_edge,
                    point_to_point: q.oper_p2p(),
                    protocol: if q.send_rstp {
                        SendProtocol::Rstp
                    } else {
                        SendProtocol::Stp
                    },
                    neighbour: q.neighbour,
                    root_inconsistent: q.root_inconsistent,
                    loop_inconsistent: q.loop_inconsistent,
                    mstis: self
                        .msti_ports
                        .iter()
                        .zip(self.tree_ids.iter().skip(1))
                        .map(|(t, id)| TreeShow {
                            tree: *id,
                            role: t[i].role,
                            state: t[i].state(),
                            designated_root: t[i].port_priority.root,
                            designated_cost: t[i].port_priority.root_path_cost,
                            info: t[i].info_is,
                            path_cost: t[i].path_cost_with(q.speed_mbps),
                            designated_bridge: t[i].port_priority.designated_bridge,
                        })
                        .collect(),
                    counters: q.counters.clone(),
                })
                .collect(),
        }
    }

    /// A port's state in a tree: None for an unknown port or a tree the engine does not
    /// run (see [`Stp::trees`]).
    pub fn port_state(&self, port: u16, tree: TreeId) -> Option<PortState> {
        let k = self.tree_ids.iter().position(|t| *t == tree)?;
        let i = self.ports.iter().position(|q| q.no == port)?;
        Some(if k == 0 {
            self.ports[i].state()
        } else {
            self.msti_ports[k - 1][i].state()
        })
    }

    /// This bridge's identifier in an MSTI.
    pub fn bridge_id_in(&self, tree: TreeId) -> Option<BridgeId> {
        let k = self
            .tree_ids
            .iter()
            .position(|t| *t == tree)
            .filter(|k| *k > 0)?;
        Some(self.msti_bridge[k - 1].bridge_id)
    }

    /// The regional root of an MSTI as this bridge sees it.
    pub fn msti_root(&self, tree: TreeId) -> Option<BridgeId> {
        let k = self
            .tree_ids
            .iter()
            .position(|t| *t == tree)
            .filter(|k| *k > 0)?;
        Some(self.msti_bridge[k - 1].root_priority.root)
    }

    /// Times `run` hit its iteration bound (a bug indicator; 0 expected).
    pub fn runaway_runs(&self) -> u64 {
        self.runaway_runs
    }
}
