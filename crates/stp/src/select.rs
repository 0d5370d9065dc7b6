//! Port Role Selection (802.1D-2004 17.28) and its procedures: updtRoleDisabledTree,
//! clearReselectTree, updtRolesTree (17.21.25) and setSelectedTree; plus the root guard
//! (802.1Q restrictedRole, 13.27.64) and loop guard decisions that live inside role
//! selection.
//!
//! Cost: O(ports) per selection; selection runs only when some port set `reselect`.

use crate::engine::{Event, Inconsistency, Output, Stp};
use crate::port::InfoIs;
use crate::types::{PortId, PortRole, PriorityVector};

/// PRS states.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Prs {
    InitBridge,
    RoleSelection,
}

impl Stp {
    /// The bridge priority vector (17.6): this bridge as root.
    pub(crate) fn bridge_priority(&self) -> PriorityVector {
        PriorityVector {
            root: self.bridge_id,
            root_path_cost: 0,
            designated_bridge: self.bridge_id,
            designated_port: PortId(0),
            bridge_port: PortId(0),
        }
    }

    pub(crate) fn step_prs(&mut self) -> bool {
        if self.begin {
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
        if self.ports.iter().all(|q| !q.reselect) {
            for q in &mut self.ports {
                q.selected = true; // setSelectedTree()
            }
        }
        true
    }

    /// updtRolesTree() (17.21.25), with root guard excluding a port from root selection.
    fn updt_roles_tree(&mut self) {
        let own = self.bridge_id;
        let mut best = self.bridge_priority();
        let mut root_port: Option<usize> = None;
        let mut guarded_best: Vec<(usize, PriorityVector)> = Vec::new();
        for (i, q) in self.ports.iter().enumerate() {
            if q.info_is != InfoIs::Received
                || q.port_priority.designated_bridge.address() == own.address()
            {
                continue;
            }
            let v = PriorityVector {
                root_path_cost: q.port_priority.root_path_cost.saturating_add(q.path_cost()),
                bridge_port: q.port_id(),
                ..q.port_priority
            };
            if q.root_guard {
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
        self.root_times = match root_port {
            Some(i) => {
                let mut t = self.ports[i].port_times;
                t.message_age = t.message_age.saturating_add(1);
                t
            }
            None => self.bridge_times(),
        };
        let hello = self.config.hello_time;
        let root_times = self.root_times;
        // Root guard: a guarded port whose information would have won is inconsistent.
        for (i, v) in guarded_best {
            let now_bad = v < best;
            let q = &mut self.ports[i];
            if now_bad != q.root_inconsistent {
                q.root_inconsistent = now_bad;
                let port = q.no;
                self.outputs.push(Output::Event(Event::RootInconsistent {
                    port,
                    change: if now_bad {
                        Inconsistency::Entered
                    } else {
                        Inconsistency::Cleared
                    },
                }));
            }
        }
        for (i, q) in self.ports.iter_mut().enumerate() {
            let pid = q.port_id();
            q.designated_priority = PriorityVector {
                root: best.root,
                root_path_cost: best.root_path_cost,
                designated_bridge: own,
                designated_port: pid,
                bridge_port: pid,
            };
            q.designated_times = root_times;
            q.designated_times.hello_time = hello;
            if q.info_is != InfoIs::Received && q.root_inconsistent {
                q.root_inconsistent = false;
                let port = q.no;
                self.outputs.push(Output::Event(Event::RootInconsistent {
                    port,
                    change: Inconsistency::Cleared,
                }));
            }
            let (role, updt) = match q.info_is {
                InfoIs::Disabled => (PortRole::Disabled, false),
                InfoIs::Aged | InfoIs::Mine if q.loop_inconsistent => {
                    (PortRole::Alternate, q.info_is == InfoIs::Aged)
                }
                InfoIs::Aged => (PortRole::Designated, true),
                InfoIs::Mine => (
                    PortRole::Designated,
                    q.port_priority != q.designated_priority || q.port_times != q.designated_times,
                ),
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
