//! The procedures of 802.1D-2004 17.21 that the Port Information machine applies to a
//! received BPDU (rcvInfo, recordProposal, recordAgreement, recordDispute, setTcFlags,
//! updtRcvdInfoWhile, betterorsameInfo) and the tree-wide setters (setSyncTree,
//! setReRootTree, setTcPropTree), plus the topology-change counters.
use crate::bpdu::{flags, Bpdu, WireRole};
use crate::engine::{Event, Output, Stp};
use crate::port::{InfoIs, RcvdInfo};

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
        match &self.ports[p].rcvd {
            Some(Bpdu::Config(_)) => Some(WireRole::Designated),
            Some(b @ (Bpdu::Rst(_) | Bpdu::Mst(..))) => {
                b.body().map(|c| WireRole::from_flags(c.flags))
            }
            _ => None,
        }
    }

    pub(crate) fn rcvd_flags(&self, p: usize) -> u8 {
        self.ports[p]
            .rcvd
            .as_ref()
            .and_then(|b| b.body())
            .map_or(0, |c| c.flags)
    }

    /// rcvInfo() (17.21.8).
    pub(crate) fn rcv_info(&mut self, p: usize) -> RcvdInfo {
        let role = self.wire_role(p);
        let own_id = self.ports[p].port_id();
        let Some(body) = self.ports[p].rcvd.as_ref().and_then(|b| b.body()).copied() else {
            return RcvdInfo::Other;
        };
        let q = &mut self.ports[p];
        q.msg_priority = crate::types::PriorityVector {
            root: body.root,
            root_path_cost: body.root_path_cost,
            designated_bridge: body.bridge,
            designated_port: body.port,
            bridge_port: own_id,
        };
        q.msg_times = body.times;
        let (msg, port) = (q.msg_priority, q.port_priority);
        match role {
            Some(WireRole::Designated) => {
                if msg.superior_to(&port) || (msg.same4(&port) && q.msg_times != q.port_times) {
                    RcvdInfo::SuperiorDesignated
                } else if msg.same4(&port) && q.msg_times == q.port_times {
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
        matches!(self.ports[p].rcvd, Some(Bpdu::Rst(_) | Bpdu::Mst(..)))
    }

    /// recordProposal() (17.21.11).
    pub(crate) fn record_proposal(&mut self, p: usize) {
        if self.is_designated_msg(p) && self.rcvd_flags(p) & flags::PROPOSAL != 0 {
            self.ports[p].proposed = true;
        }
    }

    /// recordAgreement() (17.21.9).
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

    /// setTcFlags() (17.21.17).
    pub(crate) fn set_tc_flags(&mut self, p: usize) {
        let f = self.rcvd_flags(p);
        let config = matches!(self.ports[p].rcvd, Some(Bpdu::Config(_)));
        let q = &mut self.ports[p];
        if f & flags::TC != 0 {
            q.rcvd_tc = true;
        }
        if config && f & flags::TC_ACK != 0 {
            q.rcvd_tc_ack = true;
        }
    }

    /// updtRcvdInfoWhile() (17.21.23).
    pub(crate) fn updt_rcvd_info_while(&mut self, p: usize) {
        let q = &mut self.ports[p];
        let t = q.port_times;
        q.rcvd_info_while = if t.message_age < t.max_age {
            3 * t.hello_time.max(1)
        } else {
            0
        };
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
