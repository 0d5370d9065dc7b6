//! The procedures of 802.1D-2004 17.21 that the Port Information machine applies to a
//! received BPDU (rcvInfo, recordProposal, recordAgreement, recordDispute, setTcFlags,
//! updtRcvdInfoWhile, betterorsameInfo) and the tree-wide setters (setSyncTree,
//! setReRootTree, setTcPropTree), plus the topology-change counters.
use crate::bpdu::{flags, Bpdu, WireRole};
use crate::engine::{Event, Output, Stp};
use crate::port::{InfoIs, RcvdInfo};
use crate::types::{BridgeId, PortId, PriorityVector, Times};

impl Stp {
    // ---- procedures on received information (17.21) -----------------------------------
    pub(crate) fn betterorsame_info(&self, p: usize, new_info_is: InfoIs) -> bool {
        let q = &self.ports[p];
        match new_info_is {
            InfoIs::Received => {
                q.info_is == InfoIs::Received && !q.port_priority.better4(&q.msg_priority)
            }
            InfoIs::Mine => {
                q.info_is == InfoIs::Mine && !q.port_priority.better4(&q.designated_priority)
            }
            _ => false,
        }
    }

    pub(crate) fn wire_role(&self, p: usize) -> Option<WireRole> {
        if self.cur_tree != 0 {
            return self.ports[p]
                .rcvd_msti
                .map(|m| WireRole::from_flags(m.flags));
        }
        match &self.ports[p].rcvd {
            Some(Bpdu::Config(_)) => Some(WireRole::Designated),
            Some(b @ (Bpdu::Rst(_) | Bpdu::Mst(..))) => {
                b.body().map(|c| WireRole::from_flags(c.flags))
            }
            _ => None,
        }
    }

    /// The flags of the message for the tree in context.
    pub(crate) fn rcvd_flags(&self, p: usize) -> u8 {
        if self.cur_tree != 0 {
            return self.ports[p].rcvd_msti.map_or(0, |m| m.flags);
        }
        self.ports[p]
            .rcvd
            .as_ref()
            .and_then(|b| b.body())
            .map_or(0, |c| c.flags)
    }

    /// The message priority vector, times and hops of the BPDU being processed, for the
    /// tree in context (802.1Q 13.29.x; an RST/STP BPDU or another region's MST BPDU has
    /// regional root = designated bridge = its bridge field, internal cost 0).
    fn decode_msg(&self, p: usize) -> Option<(PriorityVector, Times, u8)> {
        let q = &self.ports[p];
        let own_id = q.port_id();
        let body = q.rcvd.as_ref().and_then(|b| b.body()).copied()?;
        let max_hops = self.config.max_hops;
        if self.cur_tree != 0 {
            let m = q.rcvd_msti?;
            let Some(Bpdu::Mst(_, mst)) = &q.rcvd else {
                return None;
            };
            let mstid = self.cur_tree_id().0;
            let designated_bridge = BridgeId(
                (mst.cist_bridge.0 & 0x0000_ffff_ffff_ffff)
                    | (u64::from((u16::from(m.bridge_priority & 0xf0) << 8) | (mstid & 0x0fff))
                        << 48),
            );
            let v = PriorityVector {
                root: m.regional_root,
                root_path_cost: m.internal_root_path_cost,
                regional_root: BridgeId(0),
                internal_cost: 0,
                designated_bridge,
                designated_port: PortId::new(m.port_priority, body.port.number()),
                bridge_port: own_id,
            };
            return Some((v, body.times, m.remaining_hops));
        }
        let v = match &q.rcvd {
            Some(Bpdu::Mst(_, mst)) if q.rcvd_internal => PriorityVector {
                root: body.root,
                root_path_cost: body.root_path_cost,
                regional_root: body.bridge,
                internal_cost: mst.internal_root_path_cost,
                designated_bridge: mst.cist_bridge,
                designated_port: body.port,
                bridge_port: own_id,
            },
            _ => PriorityVector {
                root: body.root,
                root_path_cost: body.root_path_cost,
                regional_root: body.bridge,
                internal_cost: 0,
                designated_bridge: body.bridge,
                designated_port: body.port,
                bridge_port: own_id,
            },
        };
        let hops = match &q.rcvd {
            Some(Bpdu::Mst(_, mst)) if q.rcvd_internal => mst.remaining_hops,
            _ => max_hops,
        };
        Some((v, body.times, hops))
    }

    /// rcvInfo() (17.21.8, 802.1Q 13.29.x).
    pub(crate) fn rcv_info(&mut self, p: usize) -> RcvdInfo {
        let role = self.wire_role(p);
        let Some((msg, times, hops)) = self.decode_msg(p) else {
            return RcvdInfo::Other;
        };
        let q = &mut self.ports[p];
        q.msg_priority = msg;
        q.msg_times = times;
        q.msg_hops = hops;
        let port = q.port_priority;
        let times_differ = q.msg_times != q.port_times || q.msg_hops != q.port_hops;
        match role {
            Some(WireRole::Designated) => {
                if msg.superior_to(&port) || (msg.same4(&port) && times_differ) {
                    RcvdInfo::SuperiorDesignated
                } else if msg.same4(&port) && !times_differ {
                    RcvdInfo::RepeatedDesignated
                } else {
                    RcvdInfo::InferiorDesignated
                }
            }
            Some(WireRole::Root | WireRole::AlternateOrBackup) if !msg.better4(&port) => {
                RcvdInfo::InferiorRootAlternate
            }
            _ => RcvdInfo::Other,
        }
    }

    pub(crate) fn is_designated_msg(&self, p: usize) -> bool {
        self.wire_role(p) == Some(WireRole::Designated)
    }

    pub(crate) fn is_rst(&self, p: usize) -> bool {
        self.cur_tree != 0 || matches!(self.ports[p].rcvd, Some(Bpdu::Rst(_) | Bpdu::Mst(..)))
    }

    /// A CIST message from outside the region speaks for every MSTI too (802.1Q 13.29).
    fn boundary_msg(&self, p: usize) -> bool {
        self.cur_tree == 0 && !self.ports[p].rcvd_internal && !self.msti_ports.is_empty()
    }

    /// recordProposal() (17.21.11).
    pub(crate) fn record_proposal(&mut self, p: usize) {
        if self.is_designated_msg(p) && self.rcvd_flags(p) & flags::PROPOSAL != 0 {
            self.ports[p].proposed = true;
            if self.boundary_msg(p) {
                for k in 1..self.tree_ids.len() {
                    self.msti_port_mut(k, p).proposed = true;
                }
            }
        }
    }

    /// recordAgreement() (17.21.9; 802.1Q 13.29.10 copies a boundary CIST agreement to
    /// every MSTI).
    pub(crate) fn record_agreement(&mut self, p: usize) {
        let yes = self.rstp_version()
            && self.ports[p].oper_p2p()
            && self.is_rst(p)
            && self.rcvd_flags(p) & flags::AGREEMENT != 0;
        let q = &mut self.ports[p];
        if yes {
            q.agreed = true;
            q.proposing = false;
        } else {
            q.agreed = false;
        }
        if self.boundary_msg(p) {
            let (agreed, proposing) = (self.ports[p].agreed, self.ports[p].proposing);
            for k in 1..self.tree_ids.len() {
                let t = self.msti_port_mut(k, p);
                t.agreed = agreed;
                t.proposing = proposing;
            }
        }
    }

    /// recordDispute() as 802.1Q-2022 13.29.13 reads it: an inferior designated message
    /// with the learning flag means the sender does not hear us: discard.
    pub(crate) fn record_dispute(&mut self, p: usize) {
        if self.is_rst(p) && self.rcvd_flags(p) & flags::LEARNING != 0 {
            let q = &mut self.ports[p];
            q.disputed = true;
            q.agreed = false;
        }
    }

    /// setTcFlags() (17.21.17; a boundary CIST TC is a TC for every MSTI).
    pub(crate) fn set_tc_flags(&mut self, p: usize) {
        let f = self.rcvd_flags(p);
        let config = self.cur_tree == 0 && matches!(self.ports[p].rcvd, Some(Bpdu::Config(_)));
        let q = &mut self.ports[p];
        if f & flags::TC != 0 {
            q.rcvd_tc = true;
            if self.boundary_msg(p) {
                for k in 1..self.tree_ids.len() {
                    self.msti_port_mut(k, p).rcvd_tc = true;
                }
            }
        }
        if config && f & flags::TC_ACK != 0 {
            self.ports[p].rcvd_tc_ack = true;
        }
    }

    /// updtRcvdInfoWhile() (17.21.23; inside a region the remaining hops must be > 1).
    pub(crate) fn updt_rcvd_info_while(&mut self, p: usize) {
        let internal = self.cur_tree != 0 || self.ports[p].rcvd_internal;
        let q = &mut self.ports[p];
        let t = q.port_times;
        let ok = t.message_age < t.max_age && (!internal || q.port_hops > 1);
        q.rcvd_info_while = if ok { 3 * t.hello_time.max(1) } else { 0 };
    }

    pub(crate) fn set_sync_tree(&mut self) {
        for q in &mut self.ports {
            q.sync = true;
        }
    }
    pub(crate) fn set_re_root_tree(&mut self) {
        for q in &mut self.ports {
            q.re_root = true;
        }
    }
    pub(crate) fn set_tc_prop_tree(&mut self, p: usize) {
        for (i, q) in self.ports.iter_mut().enumerate() {
            if i != p {
                q.tc_prop = true;
            }
        }
    }

    pub(crate) fn count_topology_change(&mut self, p: usize, source: crate::engine::TcSource) {
        let now = self.now;
        let q = &mut self.ports[p];
        q.counters.topology_changes += 1;
        q.counters.last_topology_change_tick = Some(now);
        let port = q.no;
        self.topology_changes += 1;
        self.last_topology_change = Some(now);
        self.outputs
            .push(Output::Event(Event::TopologyChange { port, source }));
    }
}
