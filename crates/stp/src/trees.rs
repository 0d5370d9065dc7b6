//! Multiple trees (802.1Q-2022 clause 13): the MSTIs' per-port and per-bridge state, and
//! the context switch that lets one set of state machines serve every tree.
//!
//! The per-tree variables of a port (PIM/PRT/PST/TCM states, their timers, priority
//! vectors, flags, port priority and cost) live in the `Port` the machines read. For the
//! CIST they are `Stp::ports`; for MSTI k they are kept in `msti_ports[k - 1]`, and
//! `enter_tree(k)` swaps them (and the bridge-level tree variables) into place, so the
//! machines run unchanged for any tree; `enter_tree(k)` again swaps them back. Per-port
//! variables (PRX, PPM, BDM, PTX, edge, TCN and TC-ack flags, counters) stay in
//! `Stp::ports` and are never swapped. Cost: O(ports) per switch, twice per tree per pass.

use crate::bpdu::{Bpdu, MstiMsg};
use crate::engine::Stp;
use crate::port::Port;
use crate::types::{BridgeId, PriorityVector, TreeId};
use crate::vars::{Prs, TreeBridge};
use std::mem::swap;

/// Swap the per-tree fields of two ports.
fn swap_port(a: &mut Port, b: &mut Port) {
    swap(&mut a.priority, &mut b.priority);
    swap(&mut a.cost, &mut b.cost);
    swap(&mut a.pim, &mut b.pim);
    swap(&mut a.prt, &mut b.prt);
    swap(&mut a.pst, &mut b.pst);
    swap(&mut a.tcm, &mut b.tcm);
    swap(&mut a.fd_while, &mut b.fd_while);
    swap(&mut a.rb_while, &mut b.rb_while);
    swap(&mut a.rcvd_info_while, &mut b.rcvd_info_while);
    swap(&mut a.rr_while, &mut b.rr_while);
    swap(&mut a.tc_while, &mut b.tc_while);
    swap(&mut a.agree, &mut b.agree);
    swap(&mut a.agreed, &mut b.agreed);
    swap(&mut a.designated_priority, &mut b.designated_priority);
    swap(&mut a.designated_times, &mut b.designated_times);
    swap(&mut a.designated_hops, &mut b.designated_hops);
    swap(&mut a.disputed, &mut b.disputed);
    swap(&mut a.fdb_flush, &mut b.fdb_flush);
    swap(&mut a.forward, &mut b.forward);
    swap(&mut a.forwarding, &mut b.forwarding);
    swap(&mut a.info_is, &mut b.info_is);
    swap(&mut a.learn, &mut b.learn);
    swap(&mut a.learning, &mut b.learning);
    swap(&mut a.msg_priority, &mut b.msg_priority);
    swap(&mut a.msg_times, &mut b.msg_times);
    swap(&mut a.msg_hops, &mut b.msg_hops);
    swap(&mut a.port_priority, &mut b.port_priority);
    swap(&mut a.port_times, &mut b.port_times);
    swap(&mut a.port_hops, &mut b.port_hops);
    swap(&mut a.proposed, &mut b.proposed);
    swap(&mut a.proposing, &mut b.proposing);
    swap(&mut a.rcvd_info, &mut b.rcvd_info);
    swap(&mut a.rcvd_msg, &mut b.rcvd_msg);
    swap(&mut a.rcvd_tc, &mut b.rcvd_tc);
    swap(&mut a.re_root, &mut b.re_root);
    swap(&mut a.reselect, &mut b.reselect);
    swap(&mut a.role, &mut b.role);
    swap(&mut a.selected, &mut b.selected);
    swap(&mut a.selected_role, &mut b.selected_role);
    swap(&mut a.sync, &mut b.sync);
    swap(&mut a.synced, &mut b.synced);
    swap(&mut a.tc_prop, &mut b.tc_prop);
    swap(&mut a.updt_info, &mut b.updt_info);
    swap(&mut a.root_inconsistent, &mut b.root_inconsistent);
    swap(&mut a.loop_inconsistent, &mut b.loop_inconsistent);
    swap(&mut a.rcvd_msti, &mut b.rcvd_msti);
}

impl Stp {
    /// Switch the machines' context between the CIST (0) and MSTI index `k` (1-based):
    /// calling it twice with the same `k` restores the CIST context.
    pub(crate) fn enter_tree(&mut self, k: usize) {
        if k == 0 {
            return;
        }
        let store = &mut self.msti_ports[k - 1];
        for (a, b) in self.ports.iter_mut().zip(store.iter_mut()) {
            swap_port(a, b);
        }
        let tb = &mut self.msti_bridge[k - 1];
        swap(&mut self.bridge_id, &mut tb.bridge_id);
        swap(&mut self.root_priority, &mut tb.root_priority);
        swap(&mut self.root_port_id, &mut tb.root_port_id);
        swap(&mut self.root_times, &mut tb.root_times);
        swap(&mut self.root_hops, &mut tb.root_hops);
        swap(&mut self.prs, &mut tb.prs);
        swap(&mut self.tree_begin, &mut tb.tree_begin);
        self.cur_tree = if self.cur_tree == k { 0 } else { k };
    }

    /// The tree in context.
    pub(crate) fn cur_tree_id(&self) -> TreeId {
        self.tree_ids
            .get(self.cur_tree)
            .copied()
            .unwrap_or(TreeId::CIST)
    }

    /// The CIST's copy of port `p`'s per-tree variables, whatever the context.
    pub(crate) fn cist_port(&self, p: usize) -> &Port {
        if self.cur_tree == 0 {
            &self.ports[p]
        } else {
            &self.msti_ports[self.cur_tree - 1][p]
        }
    }

    /// MSTI `k`'s (1-based) copy of port `p`'s per-tree variables, from the CIST context.
    pub(crate) fn msti_port_mut(&mut self, k: usize, p: usize) -> &mut Port {
        &mut self.msti_ports[k - 1][p]
    }

    /// The bridge identifier of MSTI `mstid`: its priority and the MSTID as system id.
    pub(crate) fn msti_bridge_id(&self, mstid: u16) -> BridgeId {
        let prio = self
            .msti_priority
            .get(&mstid)
            .copied()
            .unwrap_or(self.config.priority);
        BridgeId::new((prio & 0xf000) | (mstid & 0x0fff), self.mac)
    }

    /// A fresh per-tree copy of port `p` for a new MSTI.
    fn fresh_tree_port(&self, p: usize) -> Port {
        let q = &self.ports[p];
        let mut t = Port::new(q.no, q.mac);
        t.designated_times = self.bridge_times();
        t.cost = q.cost;
        t
    }

    /// Rebuild the MSTI set from the region's table (MSTP mode only); new and kept
    /// MSTIs restart from BEGIN.
    pub(crate) fn rebuild_trees(&mut self) {
        // Back to the CIST context is guaranteed outside `run`.
        let mstis = if self.config.mode == crate::config::Mode::Mstp {
            self.region.mstis()
        } else {
            Vec::new()
        };
        self.tree_ids = std::iter::once(TreeId::CIST)
            .chain(mstis.iter().copied())
            .collect();
        self.msti_ports = mstis
            .iter()
            .map(|_| {
                (0..self.ports.len())
                    .map(|p| self.fresh_tree_port(p))
                    .collect()
            })
            .collect();
        self.msti_bridge = mstis
            .iter()
            .map(|m| {
                let id = self.msti_bridge_id(m.0);
                TreeBridge {
                    bridge_id: id,
                    root_priority: PriorityVector {
                        root: id,
                        designated_bridge: id,
                        ..PriorityVector::default()
                    },
                    root_port_id: None,
                    root_times: self.bridge_times(),
                    root_hops: self.config.max_hops,
                    prs: Prs::InitBridge,
                    tree_begin: true,
                }
            })
            .collect();
    }

    /// Recompute every MSTI's bridge identifier (after a priority change) and make its
    /// ports reselect, without restarting the tree.
    pub(crate) fn refresh_msti_ids(&mut self) {
        for k in 1..self.tree_ids.len() {
            let id = self.msti_bridge_id(self.tree_ids[k].0);
            self.msti_bridge[k - 1].bridge_id = id;
            for q in self.msti_ports[k - 1].iter_mut() {
                q.reselect = true;
                q.selected = false;
            }
        }
    }

    /// Add a port's per-tree copies to every MSTI.
    pub(crate) fn add_port_to_trees(&mut self, p: usize) {
        for k in 0..self.msti_ports.len() {
            let t = self.fresh_tree_port(p);
            self.msti_ports[k].push(t);
        }
    }

    /// setRcvdMsgs (13.27.x): an MST BPDU from this region carries a message per MSTI.
    pub(crate) fn set_rcvd_msgs(&mut self, p: usize) {
        let Some(Bpdu::Mst(_, m)) = self.ports[p].rcvd.clone() else {
            return;
        };
        if !self.ports[p].rcvd_internal {
            return;
        }
        for k in 1..self.tree_ids.len() {
            let mstid = self.tree_ids[k].0;
            let msg: Option<MstiMsg> = m
                .mstis
                .iter()
                .find(|x| x.regional_root.priority() & 0x0fff == mstid)
                .copied();
            if let Some(msg) = msg {
                let t = self.msti_port_mut(k, p);
                t.rcvd_msti = Some(msg);
                t.rcvd_msg = true;
            }
        }
    }
}
