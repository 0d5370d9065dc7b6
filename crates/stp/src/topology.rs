//! Topology Change state machine (802.1D-2004 17.31): detection on ports that start
//! forwarding, notification through TC flags and TCN BPDUs, propagation to the other ports
//! of the tree, and the FDB flush requests (per port and tree) it produces.
use crate::engine::{Output, Stp};
use crate::port::Tcm;
use crate::types::PortRole;

impl Stp {
    // ---- TCM: topology change ---------------------------------------------------------
    pub(crate) fn step_tcm(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let root_or_desig = matches!(
            q.role,
            PortRole::Root | PortRole::Designated | PortRole::Master
        );
        // TCN and TC-Ack are CIST matters (a TCN reaches the MSTIs as rcvdTc).
        let cist = self.cur_tree == 0;
        let (rcvd_tcn, rcvd_tc_ack) = (cist && q.rcvd_tcn, cist && q.rcvd_tc_ack);
        let next = if self.b(p) {
            Some(Tcm::Inactive)
        } else {
            match q.tcm {
                Tcm::Inactive if q.learn && !q.fdb_flush => Some(Tcm::Learning),
                Tcm::Learning if root_or_desig && q.forward && !q.oper_edge => Some(Tcm::Detected),
                Tcm::Learning if q.rcvd_tc || rcvd_tcn || rcvd_tc_ack || q.tc_prop => {
                    Some(Tcm::Learning)
                }
                Tcm::Learning if !root_or_desig && !q.learn && !q.learning => {
                    // (the rcvdTc/rcvdTcn/rcvdTcAck/tcProp half of 17.31's condition is
                    // false here: the arm above took those cases)
                    Some(Tcm::Inactive)
                }
                Tcm::Detected | Tcm::NotifiedTc | Tcm::Propagating | Tcm::Acknowledged => {
                    Some(Tcm::Active)
                }
                Tcm::NotifiedTcn => Some(Tcm::NotifiedTc),
                Tcm::Active if !root_or_desig || q.oper_edge => Some(Tcm::Learning),
                Tcm::Active if rcvd_tcn => Some(Tcm::NotifiedTcn),
                Tcm::Active if q.rcvd_tc => Some(Tcm::NotifiedTc),
                Tcm::Active if q.tc_prop && !q.oper_edge => Some(Tcm::Propagating),
                Tcm::Active if rcvd_tc_ack => Some(Tcm::Acknowledged),
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        self.ports[p].tcm = next;
        match next {
            Tcm::Inactive => {
                self.fdb_flush(p);
                let q = &mut self.ports[p];
                q.tc_while = 0;
                q.tc_ack = false;
            }
            Tcm::Learning => {
                let q = &mut self.ports[p];
                q.rcvd_tc = false;
                if cist {
                    q.rcvd_tcn = false;
                    q.rcvd_tc_ack = false;
                }
                q.tc_prop = false;
            }
            Tcm::Detected => {
                self.new_tc_while(p);
                self.set_tc_prop_tree(p);
                self.ports[p].new_info = true;
                self.count_topology_change(p, crate::engine::TcSource::Detected);
            }
            Tcm::Active => {}
            Tcm::NotifiedTcn => self.new_tc_while(p),
            Tcm::NotifiedTc => {
                let q = &mut self.ports[p];
                if cist {
                    q.rcvd_tcn = false;
                }
                q.rcvd_tc = false;
                if cist && q.role == PortRole::Designated {
                    q.tc_ack = true;
                }
                self.set_tc_prop_tree(p);
                self.count_topology_change(p, crate::engine::TcSource::Notified);
            }
            Tcm::Propagating => {
                self.new_tc_while(p);
                self.fdb_flush(p);
                self.ports[p].tc_prop = false;
            }
            Tcm::Acknowledged => {
                self.ports[p].tc_while = 0;
                self.ports[p].rcvd_tc_ack = false;
            }
        }
        true
    }

    /// fdbFlush = TRUE: the caller removes the port's entries at once, so the flag is
    /// cleared as soon as the request is out.
    pub(crate) fn fdb_flush(&mut self, p: usize) {
        let port = self.ports[p].no;
        let tree = self.cur_tree_id();
        self.outputs.push(Output::Flush { port, tree });
        self.ports[p].fdb_flush = false;
    }

    /// newTcWhile() (17.21.7).
    pub(crate) fn new_tc_while(&mut self, p: usize) {
        let hello = self.hello_time(p);
        let root_times = self.root_times;
        let q = &mut self.ports[p];
        if q.tc_while == 0 {
            if q.send_rstp {
                q.tc_while = hello + 1;
                q.new_info = true;
            } else {
                q.tc_while = root_times.max_age + root_times.forward_delay;
            }
        }
    }
}
