//! Port Role Selection (802.1D-2004 17.28) and its procedures: updtRoleDisabledTree,
//! clearReselectTree, updtRolesTree (17.21.25) and setSelectedTree; plus the root guard
//! (802.1Q restrictedRole, 13.27.64) and loop guard decisions that live inside role
//! selection.
//!
//! Cost: O(ports) per selection; selection runs only when some port set `reselect`.

use crate::engine::Stp;
use crate::output::{Event, Inconsistency, Output};
use crate::port::InfoIs;
use crate::types::BridgeId;
use crate::types::{PortId, PortRole, PriorityVector};
use crate::vars::Prs;

impl Stp {
    /// The bridge priority vector (17.6): this bridge as root.
    pub(crate) fn bridge_priority(&self) -> PriorityVector {
        PriorityVector {
            root: self.bridge_id,
            root_path_cost: 0,
            regional_root: self.cist_regional_self(),
            internal_cost: 0,
            designated_bridge: self.bridge_id,
            designated_port: PortId(0),
            bridge_port: PortId(0),
        }
    }

    pub(crate) fn step_prs(&mut self) -> bool {
        if self.begin || self.tree_begin {
            self.prs = Prs::InitBridge;
            for q in &mut self.ports {
                q.selected_role = PortRole::Disabled; // updtRoleDisabledTree()
            }
            return true;
        }
        let go = self.prs == Prs::InitBridge || self.ports.iter().any(|q| q.reselect);
        if !go {
            return false;
        }
        self.prs = Prs::RoleSelection;
        for q in &mut self.ports {
            q.reselect = false; // clearReselectTree()
        }
        self.updt_roles_tree();
        if self.cur_tree == 0 {
            // MSTI roles of boundary ports follow the CIST's: let every MSTI reselect.
            for q in self.msti_ports.iter_mut().flatten() {
                q.reselect = true;
                q.selected = false;
            }
        }
        if self.ports.iter().all(|q| !q.reselect) {
            for q in &mut self.ports {
                q.selected = true; // setSelectedTree()
            }
        }
        true
    }

    /// The regional root component of this bridge's own vector: itself for the CIST, none
    /// (zero) for an MSTI, whose vectors have no regional components.
    pub(crate) fn cist_regional_self(&self) -> BridgeId {
        if self.cur_tree == 0 {
            self.bridge_id
        } else {
            BridgeId(0)
        }
    }

    /// The root path priority vector through port `i` (17.21.25 a, 802.1Q 13.10), or
    /// None when the port's information cannot lead to the root.
    fn root_path(&self, i: usize) -> Option<PriorityVector> {
        let q = &self.ports[i];
        if q.info_is != InfoIs::Received
            || q.port_priority.designated_bridge.address() == self.bridge_id.address()
        {
            return None;
        }
        let cost = q.path_cost();
        // MSTI information is only recorded from this region's BPDUs (setRcvdMsgs), but a
        // boundary port (its CIST information came from another region) never leads to
        // an MSTI's root: its MSTI role follows the CIST (13.27).
        let v = if self.cur_tree != 0 {
            if self.cist_port(i).info_is == InfoIs::Received && !q.info_internal {
                return None;
            }
            PriorityVector {
                root_path_cost: q.port_priority.root_path_cost.saturating_add(cost),
                bridge_port: q.port_id(),
                ..q.port_priority
            }
        } else if q.info_internal {
            PriorityVector {
                internal_cost: q.port_priority.internal_cost.saturating_add(cost),
                bridge_port: q.port_id(),
                ..q.port_priority
            }
        } else {
            PriorityVector {
                root_path_cost: q.port_priority.root_path_cost.saturating_add(cost),
                regional_root: self.bridge_id,
                internal_cost: 0,
                bridge_port: q.port_id(),
                ..q.port_priority
            }
        };
        Some(v)
    }

    /// updtRolesTree() (17.21.25, 802.1Q 13.27.x), with root guard excluding a port from
    /// root selection and, for an MSTI, boundary ports taking their role from the CIST.
    fn updt_roles_tree(&mut self) {
        let own = self.bridge_id;
        let mut best = self.bridge_priority();
        let mut root_port: Option<usize> = None;
        let mut guarded_best: Vec<(usize, PriorityVector)> = Vec::new();
        for i in 0..self.ports.len() {
            let Some(v) = self.root_path(i) else { continue };
            if self.ports[i].root_guard {
                guarded_best.push((i, v));
                continue;
            }
            if v < best {
                best = v;
                root_port = Some(i);
            }
        }
        self.root_priority = best;
        self.root_port_id = root_port.map(|i| self.ports[i].port_id());

        let (root_times, root_hops) = match root_port {
            Some(i) => {
                let q = &self.ports[i];
                let mut t = q.port_times;
                if self.cur_tree == 0 && !q.info_internal {
                    t.message_age = t.message_age.saturating_add(1);
                    (t, self.config.max_hops)
                } else {
                    (t, q.port_hops.saturating_sub(1))
                }
            }
            None => (self.bridge_times(), self.config.max_hops),
        };
        self.root_times = root_times;
        self.root_hops = root_hops;
        let hello = self.config.hello_time;
        for (i, v) in guarded_best {
            let now_bad = v < best;
            let q = &mut self.ports[i];
            if now_bad != q.root_inconsistent {
                q.root_inconsistent = now_bad;
                let port = q.no;
                let change = if now_bad {
                    Inconsistency::Entered
                } else {
                    Inconsistency::Cleared
                };
                self.outputs
                    .push(Output::Event(Event::RootInconsistent { port, change }));
            }
        }
        // For an MSTI: the CIST's selected role and infoInternal of each port.
        let cist: Vec<(PortRole, bool, InfoIs)> = (0..self.ports.len())
            .map(|i| {
                let c = self.cist_port(i);
                (c.selected_role, self.ports[i].info_internal, c.info_is)
            })
            .collect();
        let msti = self.cur_tree != 0;
        for (i, q) in self.ports.iter_mut().enumerate() {
            let pid = q.port_id();
            q.designated_priority = PriorityVector {
                root: best.root,
                root_path_cost: best.root_path_cost,
                regional_root: best.regional_root,
                internal_cost: best.internal_cost,
                designated_bridge: own,
                designated_port: pid,
                bridge_port: pid,
            };
            q.designated_times = root_times;
            q.designated_times.hello_time = hello;
            q.designated_hops = root_hops;
            if q.info_is != InfoIs::Received && q.root_inconsistent {
                q.root_inconsistent = false;
                let port = q.no;
                let change = Inconsistency::Cleared;
                self.outputs
                    .push(Output::Event(Event::RootInconsistent { port, change }));
            }
            let differs = q.port_priority != q.designated_priority
                || q.port_times != q.designated_times
                || q.port_hops != q.designated_hops;
            let (cist_role, internal, cist_info) = cist[i];
            let boundary = msti && cist_info == InfoIs::Received && !internal;
            let (role, updt) = match q.info_is {
                InfoIs::Disabled => (PortRole::Disabled, false),
                _ if boundary && cist_role == PortRole::Root => (PortRole::Master, differs),
                _ if boundary && matches!(cist_role, PortRole::Alternate | PortRole::Backup) => {
                    (cist_role, differs)
                }
                InfoIs::Aged | InfoIs::Mine if q.loop_inconsistent => {
                    (PortRole::Alternate, q.info_is == InfoIs::Aged)
                }
                InfoIs::Aged => (PortRole::Designated, true),
                InfoIs::Mine => (PortRole::Designated, differs),
                InfoIs::Received if root_port == Some(i) => (PortRole::Root, false),
                InfoIs::Received if !q.designated_priority.better4(&q.port_priority) => {
                    if q.port_priority.designated_bridge.address() != own.address() {
                        (PortRole::Alternate, false)
                    } else {
                        (PortRole::Backup, false)
                    }
                }
                InfoIs::Received => (PortRole::Designated, true),
            };
            q.selected_role = role;
            if updt {
                q.updt_info = true;
            } else if q.info_is == InfoIs::Received || q.info_is == InfoIs::Disabled {
                q.updt_info = false;
            }
        }
    }
}
