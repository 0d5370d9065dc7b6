//! The per-port state machines of 802.1D-2004 clause 17 that face the wire: PRX (17.23),
//! PPM (17.24), BDM (17.25), PTX (17.26) and PIM (17.27), plus the derived values of 17.20
//! every machine reads. PRT and PST are in `roles.rs`, TCM in `topology.rs`, the
//! procedures in `procs.rs`, PRS in `select.rs`; PTI is `Stp::tick`.
//!
//! Each `step_*` function evaluates the transitions out of the port's current state (the
//! global ones first, as the figures' "BEGIN" and unconditioned arrows), enters at most one
//! new state, runs its entry actions, and reports whether it moved. `Stp::run` calls them
//! until a whole pass moves nothing (17.16: "re-run until no transition"), with an
//! iteration bound so no input can make it spin forever.

use crate::bpdu::Bpdu;
use crate::engine::{Event, Output, Stp};
use crate::port::{Bdm, InfoIs, Pim, Ppm, Prx, Ptx, RcvdInfo};
use crate::types::PortRole;

/// MigrateTime (17.13.9), seconds.
pub const MIGRATE_TIME: u16 = 3;

impl Stp {
    // ---- derived values (17.20) -------------------------------------------------------
    pub(crate) fn rstp_version(&self) -> bool {
        self.force_version() >= 2
    }
    pub(crate) fn fwd_delay(&self, p: usize) -> u16 {
        self.ports[p].designated_times.forward_delay
    }
    pub(crate) fn hello_time(&self, p: usize) -> u16 {
        self.ports[p].designated_times.hello_time.max(1)
    }
    pub(crate) fn max_age(&self, p: usize) -> u16 {
        self.ports[p].designated_times.max_age
    }
    pub(crate) fn forward_delay(&self, p: usize) -> u16 {
        if self.ports[p].send_rstp {
            self.hello_time(p)
        } else {
            self.fwd_delay(p)
        }
    }
    pub(crate) fn edge_delay(&self, p: usize) -> u16 {
        if self.ports[p].oper_p2p() {
            MIGRATE_TIME
        } else {
            self.max_age(p)
        }
    }
    /// allSynced as 802.1Q-2022 13.25.1 states it (2004's is looser).
    pub(crate) fn all_synced(&self, p: usize) -> bool {
        let role = self.ports[p].role;
        self.ports.iter().enumerate().all(|(i, q)| {
            if !q.selected || q.role != q.selected_role || q.updt_info {
                return false;
            }
            match role {
                PortRole::Root | PortRole::Alternate | PortRole::Backup => i == p || q.synced,
                PortRole::Designated | PortRole::Master => {
                    i == p || q.role == PortRole::Root || q.synced
                }
                PortRole::Disabled => false,
            }
        })
    }
    pub(crate) fn re_rooted(&self, p: usize) -> bool {
        self.ports
            .iter()
            .enumerate()
            .all(|(i, q)| i == p || q.rr_while == 0)
    }
    pub(crate) fn b(&self, p: usize) -> bool {
        self.begin || self.tree_begin || self.ports[p].begin
    }
    pub(crate) fn sel(&self, p: usize) -> bool {
        self.ports[p].selected && !self.ports[p].updt_info
    }

    // ---- PRX: port receive ------------------------------------------------------------
    pub(crate) fn step_prx(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let next = if self.b(p)
            || ((q.rcvd_bpdu || q.edge_delay_while != MIGRATE_TIME) && !q.port_enabled)
        {
            Some(Prx::Discard)
        } else {
            match q.prx {
                Prx::Discard if q.rcvd_bpdu && q.port_enabled => Some(Prx::Receive),
                Prx::Receive if q.rcvd_bpdu && q.port_enabled && !q.rcvd_msg => Some(Prx::Receive),
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        let q = &mut self.ports[p];
        q.prx = next;
        match next {
            Prx::Discard => {
                q.rcvd_bpdu = false;
                q.rcvd_rstp = false;
                q.rcvd_stp = false;
                q.rcvd_msg = false;
                q.edge_delay_while = MIGRATE_TIME;
            }
            Prx::Receive => {
                // updtBPDUVersion()
                match q.rcvd {
                    Some(Bpdu::Config(_)) | Some(Bpdu::Tcn) => q.rcvd_stp = true,
                    Some(Bpdu::Rst(_)) | Some(Bpdu::Mst(..)) => q.rcvd_rstp = true,
                    None => {}
                }
                q.oper_edge = false;
                q.rcvd_bpdu = false;
                q.rcvd_msg = true;
                q.edge_delay_while = MIGRATE_TIME;
                self.set_rcvd_msgs(p);
            }
        }
        true
    }

    // ---- PPM: port protocol migration -------------------------------------------------
    pub(crate) fn step_ppm(&mut self, p: usize) -> bool {
        let rstp = self.rstp_version();
        let q = &self.ports[p];
        let next = if self.b(p) {
            Some(Ppm::CheckingRstp)
        } else {
            match q.ppm {
                Ppm::CheckingRstp if q.mdelay_while == 0 => Some(Ppm::Sensing),
                Ppm::CheckingRstp if q.mdelay_while != MIGRATE_TIME && !q.port_enabled => {
                    Some(Ppm::CheckingRstp)
                }
                Ppm::SelectingStp if q.mdelay_while == 0 || !q.port_enabled || q.mcheck => {
                    Some(Ppm::Sensing)
                }
                Ppm::Sensing
                    if !q.port_enabled || q.mcheck || (rstp && !q.send_rstp && q.rcvd_rstp) =>
                {
                    Some(Ppm::CheckingRstp)
                }
                Ppm::Sensing if q.send_rstp && q.rcvd_stp => Some(Ppm::SelectingStp),
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        let no = q.no;
        let was = q.send_rstp;
        let q = &mut self.ports[p];
        q.ppm = next;
        match next {
            Ppm::CheckingRstp => {
                q.mcheck = false;
                q.send_rstp = rstp;
                q.mdelay_while = MIGRATE_TIME;
            }
            Ppm::SelectingStp => {
                q.send_rstp = false;
                q.mdelay_while = MIGRATE_TIME;
            }
            Ppm::Sensing => {
                q.rcvd_rstp = false;
                q.rcvd_stp = false;
            }
        }
        if !self.b(p) && was != self.ports[p].send_rstp {
            let now_sends = if self.ports[p].send_rstp {
                crate::types::SendProtocol::Rstp
            } else {
                crate::types::SendProtocol::Stp
            };
            self.outputs.push(Output::Event(Event::ProtocolMigration {
                port: no,
                now_sends,
            }));
        }
        true
    }

    // ---- BDM: bridge detection --------------------------------------------------------
    pub(crate) fn step_bdm(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let next = if self.b(p) {
            Some(if q.admin_edge {
                Bdm::Edge
            } else {
                Bdm::NotEdge
            })
        } else {
            match q.bdm {
                Bdm::Edge if (!q.port_enabled && !q.admin_edge) || !q.oper_edge => {
                    Some(Bdm::NotEdge)
                }
                Bdm::NotEdge
                    if (!q.port_enabled && q.admin_edge)
                        || (q.edge_delay_while == 0
                            && q.auto_edge
                            && q.send_rstp
                            && q.proposing) =>
                {
                    Some(Bdm::Edge)
                }
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        let q = &mut self.ports[p];
        q.bdm = next;
        q.oper_edge = next == Bdm::Edge;
        true
    }

    // ---- PTX: port transmit -----------------------------------------------------------
    pub(crate) fn step_ptx(&mut self, p: usize) -> bool {
        let hold = self.tx_hold_count();
        let q = &self.ports[p];
        let next = if self.b(p) {
            Some(Ptx::Init)
        } else {
            match q.ptx {
                Ptx::Init | Ptx::Periodic | Ptx::Config | Ptx::Tcn | Ptx::Rstp => Some(Ptx::Idle),
                Ptx::Idle if !(q.port_enabled && self.sel(p)) || q.bpdu_filter => None,
                Ptx::Idle if q.hello_when == 0 => Some(Ptx::Periodic),
                Ptx::Idle if q.new_info && q.tx_count < hold => {
                    if q.send_rstp {
                        Some(Ptx::Rstp)
                    } else if q.role == PortRole::Root {
                        Some(Ptx::Tcn)
                    } else if q.role == PortRole::Designated {
                        Some(Ptx::Config)
                    } else {
                        None
                    }
                }
                Ptx::Idle => None,
            }
        };
        let Some(next) = next else { return false };
        let hello = self.hello_time(p);
        self.ports[p].ptx = next;
        match next {
            Ptx::Init => {
                self.ports[p].new_info = true;
                self.ports[p].tx_count = 0;
            }
            Ptx::Periodic => {
                let wants = |q: &crate::port::Port| {
                    matches!(q.role, PortRole::Designated | PortRole::Master)
                        || (q.role == PortRole::Root && q.tc_while != 0)
                };
                let msti = self.msti_ports.iter().any(|t| wants(&t[p]));
                let q = &mut self.ports[p];
                q.new_info = q.new_info || wants(q) || msti;
            }
            Ptx::Config | Ptx::Tcn | Ptx::Rstp => {
                self.ports[p].new_info = false;
                self.transmit(p, next);
                let q = &mut self.ports[p];
                q.tx_count = q.tx_count.saturating_add(1);
                if next != Ptx::Tcn {
                    q.tc_ack = false;
                }
            }
            Ptx::Idle => self.ports[p].hello_when = hello,
        }
        true
    }

    // ---- PIM: port information --------------------------------------------------------
    pub(crate) fn step_pim(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let next = if self.b(p) || (!q.port_enabled && q.info_is != InfoIs::Disabled) {
            Some(Pim::Disabled)
        } else {
            match q.pim {
                Pim::Disabled if q.rcvd_msg => Some(Pim::Disabled),
                Pim::Disabled if q.port_enabled => Some(Pim::Aged),
                Pim::Aged if q.selected && q.updt_info => Some(Pim::Update),
                Pim::Update
                | Pim::SuperiorDesignated
                | Pim::RepeatedDesignated
                | Pim::InferiorDesignated
                | Pim::NotDesignated
                | Pim::Other => Some(Pim::Current),
                Pim::Current if q.selected && q.updt_info => Some(Pim::Update),
                Pim::Current
                    if q.info_is == InfoIs::Received
                        && q.rcvd_info_while == 0
                        && !q.updt_info
                        && !q.rcvd_msg =>
                {
                    Some(Pim::Aged)
                }
                // An MSTI's message waits until the CIST has taken the BPDU's CIST part.
                Pim::Current
                    if q.rcvd_msg
                        && !q.updt_info
                        && (self.cur_tree == 0 || !self.cist_port(p).rcvd_msg) =>
                {
                    Some(Pim::Receive)
                }
                Pim::Receive => Some(match q.rcvd_info {
                    RcvdInfo::SuperiorDesignated => Pim::SuperiorDesignated,
                    RcvdInfo::RepeatedDesignated => Pim::RepeatedDesignated,
                    RcvdInfo::InferiorDesignated => Pim::InferiorDesignated,
                    RcvdInfo::InferiorRootAlternate => Pim::NotDesignated,
                    RcvdInfo::Other => Pim::Other,
                }),
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        if next == Pim::Aged && self.ports[p].pim == Pim::Current {
            self.on_info_aged(p);
        }
        self.ports[p].pim = next;
        match next {
            Pim::Disabled => {
                let q = &mut self.ports[p];
                q.rcvd_msg = false;
                q.proposing = false;
                q.proposed = false;
                q.agree = false;
                q.agreed = false;
                q.rcvd_info_while = 0;
                q.info_is = InfoIs::Disabled;
                q.reselect = true;
                q.selected = false;
            }
            Pim::Aged => {
                let q = &mut self.ports[p];
                q.info_is = InfoIs::Aged;
                q.reselect = true;
                q.selected = false;
            }
            Pim::Update => {
                let better_or_same = self.betterorsame_info(p, InfoIs::Mine);
                let q = &mut self.ports[p];
                q.proposing = false;
                q.proposed = false;
                q.agreed = q.agreed && better_or_same;
                q.synced = q.synced && q.agreed;
                q.port_priority = q.designated_priority;
                q.port_times = q.designated_times;
                q.port_hops = q.designated_hops;
                q.updt_info = false;
                q.info_is = InfoIs::Mine;
                q.new_info = true;
            }
            Pim::Current => {}
            Pim::Receive => {
                let info = self.rcv_info(p);
                self.ports[p].rcvd_info = info;
            }
            Pim::SuperiorDesignated => {
                self.ports[p].agreed = false;
                self.ports[p].proposing = false;
                self.record_proposal(p);
                self.set_tc_flags(p);
                let bs = self.betterorsame_info(p, InfoIs::Received);
                let q = &mut self.ports[p];
                q.agree = q.agree && bs;
                q.port_priority = q.msg_priority; // recordPriority()
                q.port_times = q.msg_times; // recordTimes()
                q.port_times.hello_time = q.port_times.hello_time.max(1);
                q.port_hops = q.msg_hops;
                if self.cur_tree == 0 {
                    q.info_internal = q.rcvd_internal; // 802.1Q 13.35 SUPERIOR_DESIGNATED
                }
                self.updt_rcvd_info_while(p);
                let q = &mut self.ports[p];
                q.info_is = InfoIs::Received;
                q.reselect = true;
                q.selected = false;
                q.rcvd_msg = false;
            }
            Pim::RepeatedDesignated => {
                self.record_proposal(p);
                self.set_tc_flags(p);
                self.updt_rcvd_info_while(p);
                self.ports[p].rcvd_msg = false;
            }
            Pim::InferiorDesignated => {
                self.record_dispute(p);
                self.ports[p].rcvd_msg = false;
            }
            Pim::NotDesignated => {
                self.record_agreement(p);
                self.set_tc_flags(p);
                self.ports[p].rcvd_msg = false;
            }
            Pim::Other => {
                // A TCN carries no priority vector: it is "other" information, but
                // 17.21.17 asks for rcvdTcn; the 2004 figure never reaches setTcFlags
                // for it, so it is recorded here.
                if self.cur_tree == 0 && matches!(self.ports[p].rcvd, Some(Bpdu::Tcn)) {
                    self.ports[p].rcvd_tcn = true;
                }
                self.ports[p].rcvd_msg = false;
            }
        }
        true
    }

    /// Loop guard: received information on a root/alternate/backup port aged out. The
    /// port keeps a blocking role until a BPDU is heard again.
    pub(crate) fn on_info_aged(&mut self, p: usize) {
        let q = &mut self.ports[p];
        if q.loop_guard
            && !q.oper_edge
            && matches!(
                q.role,
                PortRole::Root | PortRole::Alternate | PortRole::Backup
            )
            && !q.loop_inconsistent
        {
            q.loop_inconsistent = true;
            let port = q.no;
            self.outputs.push(Output::Event(Event::LoopInconsistent {
                port,
                change: crate::engine::Inconsistency::Entered,
            }));
        }
    }
}
