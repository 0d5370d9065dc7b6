//! The per-port state machines of 802.1D-2004 clause 17 (with the 802.1Q-2022 clause 13
//! refinements noted inline): PRX (17.23), PPM (17.24), BDM (17.25), PTX (17.26), PIM
//! (17.27), PRT (17.29), PST (17.30) and TCM (17.31). PRS and the procedures they share are
//! in `select.rs`; PTI is `Stp::tick`.
//!
//! Each `step_*` function evaluates the transitions out of the port's current state (the
//! global ones first, as the figures' "BEGIN" and unconditioned arrows), enters at most one
//! new state, runs its entry actions, and reports whether it moved. `Stp::run` calls them
//! until a whole pass moves nothing (17.16: "re-run until no transition"), with an
//! iteration bound so no input can make it spin forever.

use crate::bpdu::{flags, Bpdu, WireRole};
use crate::engine::{Event, Output, Stp};
use crate::port::{Bdm, InfoIs, Pim, Ppm, Prt, Prx, Pst, Ptx, RcvdInfo, Tcm};
use crate::types::{PortRole, PortState, TreeId};

/// MigrateTime (17.13.9), seconds.
pub const MIGRATE_TIME: u16 = 3;

impl Stp {
    // ---- derived values (17.20) -------------------------------------------------------
    pub(crate) fn rstp_version(&self) -> bool {
        self.force_version() >= 2
    }
    fn fwd_delay(&self, p: usize) -> u16 {
        self.ports[p].designated_times.forward_delay
    }
    fn hello_time(&self, p: usize) -> u16 {
        self.ports[p].designated_times.hello_time.max(1)
    }
    fn max_age(&self, p: usize) -> u16 {
        self.ports[p].designated_times.max_age
    }
    fn forward_delay(&self, p: usize) -> u16 {
        if self.ports[p].send_rstp {
            self.hello_time(p)
        } else {
            self.fwd_delay(p)
        }
    }
    fn edge_delay(&self, p: usize) -> u16 {
        if self.ports[p].oper_p2p() {
            MIGRATE_TIME
        } else {
            self.max_age(p)
        }
    }
    /// allSynced as 802.1Q-2022 13.25.1 states it (2004's is looser).
    fn all_synced(&self, p: usize) -> bool {
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
    fn re_rooted(&self, p: usize) -> bool {
        self.ports.iter().enumerate().all(|(i, q)| i == p || q.rr_while == 0)
    }
    fn b(&self, p: usize) -> bool {
        self.begin || self.ports[p].begin
    }
    fn sel(&self, p: usize) -> bool {
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
            let send_rstp = self.ports[p].send_rstp;
            self.outputs.push(Output::Event(Event::ProtocolMigration { port: no, send_rstp }));
        }
        true
    }

    // ---- BDM: bridge detection --------------------------------------------------------
    pub(crate) fn step_bdm(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let next = if self.b(p) {
            Some(if q.admin_edge { Bdm::Edge } else { Bdm::NotEdge })
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
                let q = &mut self.ports[p];
                q.new_info = q.new_info
                    || q.role == PortRole::Designated
                    || (q.role == PortRole::Root && q.tc_while != 0);
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
                Pim::Current if q.rcvd_msg && !q.updt_info => Some(Pim::Receive),
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
                if matches!(self.ports[p].rcvd, Some(Bpdu::Tcn)) {
                    self.ports[p].rcvd_tcn = true;
                }
                self.ports[p].rcvd_msg = false;
            }
        }
        true
    }

    /// Loop guard: received information on a root/alternate/backup port aged out. The
    /// port keeps a blocking role until a BPDU is heard again.
    fn on_info_aged(&mut self, p: usize) {
        let q = &mut self.ports[p];
        if q.loop_guard
            && !q.oper_edge
            && matches!(q.role, PortRole::Root | PortRole::Alternate | PortRole::Backup)
            && !q.loop_inconsistent
        {
            q.loop_inconsistent = true;
            let port = q.no;
            self.outputs.push(Output::Event(Event::LoopInconsistent { port, active: true }));
        }
    }

    // ---- PRT: port role transitions ---------------------------------------------------
    pub(crate) fn step_prt(&mut self, p: usize) -> bool {
        let next = self.prt_next(p);
        let Some(next) = next else { return false };
        self.enter_prt(p, next);
        true
    }

    fn prt_next(&self, p: usize) -> Option<Prt> {
        if self.b(p) {
            return Some(Prt::InitPort);
        }
        let q = &self.ports[p];
        if q.prt == Prt::InitPort {
            return Some(Prt::DisablePort);
        }
        if !self.sel(p) {
            return None;
        }
        if q.role != q.selected_role {
            return Some(match q.selected_role {
                PortRole::Disabled => Prt::DisablePort,
                PortRole::Root => Prt::RootPort,
                PortRole::Designated | PortRole::Master => Prt::DesignatedPort,
                PortRole::Alternate | PortRole::Backup => Prt::BlockPort,
            });
        }
        let rstp = self.rstp_version();
        let fwd = self.fwd_delay(p);
        let fdelay = self.forward_delay(p);
        use Prt::*;
        match q.prt {
            DisablePort if !q.learning && !q.forwarding => Some(DisabledPort),
            DisabledPort
                if q.fd_while != self.max_age(p) || q.sync || q.re_root || !q.synced =>
            {
                Some(DisabledPort)
            }
            RootProposed | RootAgreed | RootSynced | Reroot | RootForward | RootLearn
            | Rerooted => Some(RootPort),
            RootPort => {
                if q.proposed && !q.agree {
                    Some(RootProposed)
                } else if (self.all_synced(p) && !q.agree) || (q.proposed && q.agree) {
                    Some(RootAgreed)
                } else if (q.agreed && !q.synced) || (q.sync && q.synced) {
                    Some(RootSynced)
                } else if !q.forward && !q.re_root {
                    Some(Reroot)
                } else if q.re_root && q.forward {
                    Some(Rerooted)
                } else if q.rr_while != fwd {
                    Some(RootPort)
                } else if (q.fd_while == 0 || (self.re_rooted(p) && q.rb_while == 0 && rstp))
                    && !q.learn
                {
                    Some(RootLearn)
                } else if (q.fd_while == 0 || (self.re_rooted(p) && q.rb_while == 0 && rstp))
                    && q.learn
                    && !q.forward
                {
                    Some(RootForward)
                } else {
                    None
                }
            }
            DesignatedPropose | DesignatedSynced | DesignatedRetired | DesignatedDiscard
            | DesignatedLearn | DesignatedForward => Some(DesignatedPort),
            DesignatedPort => {
                let may_go = (q.fd_while == 0 || q.agreed || q.oper_edge)
                    && (q.rr_while == 0 || !q.re_root)
                    && !q.sync;
                if !q.forward && !q.agreed && !q.proposing && !q.oper_edge {
                    Some(DesignatedPropose)
                } else if (!q.learning && !q.forwarding && !q.synced)
                    || (q.agreed && !q.synced)
                    || (q.oper_edge && !q.synced)
                    || (q.sync && q.synced)
                {
                    Some(DesignatedSynced)
                } else if q.rr_while == 0 && q.re_root {
                    Some(DesignatedRetired)
                } else if ((q.sync && !q.synced) || (q.re_root && q.rr_while != 0) || q.disputed)
                    && !q.oper_edge
                    && (q.learn || q.forward)
                {
                    Some(DesignatedDiscard)
                } else if may_go && !q.learn {
                    Some(DesignatedLearn)
                } else if may_go && q.learn && !q.forward {
                    Some(DesignatedForward)
                } else {
                    None
                }
            }
            BlockPort if !q.learning && !q.forwarding => Some(AlternatePort),
            AlternateProposed | AlternateAgreed | BackupPort => Some(AlternatePort),
            AlternatePort => {
                if q.proposed && !q.agree {
                    Some(AlternateProposed)
                } else if (self.all_synced(p) && !q.agree) || (q.proposed && q.agree) {
                    Some(AlternateAgreed)
                } else if q.role == PortRole::Backup && q.rb_while != 2 * self.hello_time(p) {
                    Some(BackupPort)
                } else if q.fd_while != fdelay || q.sync || q.re_root || !q.synced {
                    Some(AlternatePort)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    fn enter_prt(&mut self, p: usize, next: Prt) {
        let fwd = self.fwd_delay(p);
        let max_age = self.max_age(p);
        let fdelay = self.forward_delay(p);
        let edge_delay = self.edge_delay(p);
        let hello = self.hello_time(p);
        let send_rstp = self.ports[p].send_rstp;
        self.ports[p].prt = next;
        let q = &mut self.ports[p];
        use Prt::*;
        match next {
            InitPort => {
                q.role = PortRole::Disabled;
                q.learn = false;
                q.forward = false;
                q.synced = false;
                q.sync = true;
                q.re_root = true;
                q.rr_while = fwd;
                q.fd_while = max_age;
                q.rb_while = 0;
            }
            DisablePort => {
                q.role = PortRole::Disabled;
                q.learn = false;
                q.forward = false;
            }
            DisabledPort => {
                q.fd_while = max_age;
                q.synced = true;
                q.rr_while = 0;
                q.sync = false;
                q.re_root = false;
            }
            RootProposed => {
                self.set_sync_tree();
                self.ports[p].proposed = false;
            }
            RootAgreed => {
                q.proposed = false;
                q.sync = false;
                q.agree = true;
                q.new_info = true;
            }
            RootSynced => {
                q.synced = true;
                q.sync = false;
            }
            Reroot => self.set_re_root_tree(),
            RootForward => {
                q.fd_while = 0;
                q.forward = true;
            }
            RootLearn => {
                q.fd_while = fdelay;
                q.learn = true;
            }
            Rerooted => q.re_root = false,
            RootPort => {
                q.role = PortRole::Root;
                q.rr_while = fwd;
            }
            DesignatedPropose => {
                q.proposing = true;
                q.edge_delay_while = edge_delay;
                q.new_info = true;
            }
            DesignatedSynced => {
                q.rr_while = 0;
                q.synced = true;
                q.sync = false;
            }
            DesignatedRetired => q.re_root = false,
            DesignatedDiscard => {
                q.learn = false;
                q.forward = false;
                q.disputed = false;
                q.fd_while = fdelay;
            }
            DesignatedLearn => {
                q.learn = true;
                q.fd_while = fdelay;
            }
            DesignatedForward => {
                q.forward = true;
                q.fd_while = 0;
                q.agreed = send_rstp;
            }
            DesignatedPort => q.role = PortRole::Designated,
            BlockPort => {
                q.role = q.selected_role;
                q.learn = false;
                q.forward = false;
            }
            AlternateProposed => {
                self.set_sync_tree();
                self.ports[p].proposed = false;
            }
            AlternateAgreed => {
                q.proposed = false;
                q.agree = true;
                q.new_info = true;
            }
            BackupPort => q.rb_while = 2 * hello,
            AlternatePort => {
                q.fd_while = fdelay;
                q.synced = true;
                q.rr_while = 0;
                q.sync = false;
                q.re_root = false;
            }
        }
    }

    // ---- PST: port state transition ---------------------------------------------------
    pub(crate) fn step_pst(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let next = if self.b(p) {
            Some(Pst::Discarding)
        } else {
            match q.pst {
                Pst::Discarding if q.learn => Some(Pst::Learning),
                Pst::Learning if q.forward => Some(Pst::Forwarding),
                Pst::Learning if !q.learn => Some(Pst::Discarding),
                Pst::Forwarding if !q.forward => Some(Pst::Discarding),
                _ => None,
            }
        };
        let Some(next) = next else { return false };
        let (port, before) = (q.no, q.pst);
        let q = &mut self.ports[p];
        q.pst = next;
        q.learning = next != Pst::Discarding;
        q.forwarding = next == Pst::Forwarding;
        if before != next || self.b(p) {
            let state = match next {
                Pst::Discarding => PortState::Discarding,
                Pst::Learning => PortState::Learning,
                Pst::Forwarding => PortState::Forwarding,
            };
            self.outputs.push(Output::PortState { port, tree: TreeId::CIST, state });
        }
        true
    }

    // ---- TCM: topology change ---------------------------------------------------------
    pub(crate) fn step_tcm(&mut self, p: usize) -> bool {
        let q = &self.ports[p];
        let root_or_desig = matches!(q.role, PortRole::Root | PortRole::Designated);
        let next = if self.b(p) {
            Some(Tcm::Inactive)
        } else {
            match q.tcm {
                Tcm::Inactive if q.learn && !q.fdb_flush => Some(Tcm::Learning),
                Tcm::Learning if root_or_desig && q.forward && !q.oper_edge => Some(Tcm::Detected),
                Tcm::Learning if q.rcvd_tc || q.rcvd_tcn || q.rcvd_tc_ack || q.tc_prop => {
                    Some(Tcm::Learning)
                }
                Tcm::Learning
                    if !root_or_desig
                        && !(q.learn || q.learning)
                        && !(q.rcvd_tc || q.rcvd_tcn || q.rcvd_tc_ack || q.tc_prop) =>
                {
                    Some(Tcm::Inactive)
                }
                Tcm::Detected
                | Tcm::NotifiedTc
                | Tcm::Propagating
                | Tcm::Acknowledged => Some(Tcm::Active),
                Tcm::NotifiedTcn => Some(Tcm::NotifiedTc),
                Tcm::Active if !root_or_desig || q.oper_edge => Some(Tcm::Learning),
                Tcm::Active if q.rcvd_tcn => Some(Tcm::NotifiedTcn),
                Tcm::Active if q.rcvd_tc => Some(Tcm::NotifiedTc),
                Tcm::Active if q.tc_prop && !q.oper_edge => Some(Tcm::Propagating),
                Tcm::Active if q.rcvd_tc_ack => Some(Tcm::Acknowledged),
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
                q.rcvd_tcn = false;
                q.rcvd_tc_ack = false;
                q.tc_prop = false;
            }
            Tcm::Detected => {
                self.new_tc_while(p);
                self.set_tc_prop_tree(p);
                self.ports[p].new_info = true;
                self.count_topology_change(p, false);
            }
            Tcm::Active => {}
            Tcm::NotifiedTcn => self.new_tc_while(p),
            Tcm::NotifiedTc => {
                let q = &mut self.ports[p];
                q.rcvd_tcn = false;
                q.rcvd_tc = false;
                if q.role == PortRole::Designated {
                    q.tc_ack = true;
                }
                self.set_tc_prop_tree(p);
                self.count_topology_change(p, true);
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
    fn fdb_flush(&mut self, p: usize) {
        let port = self.ports[p].no;
        self.outputs.push(Output::Flush { port, tree: TreeId::CIST });
        self.ports[p].fdb_flush = false;
    }

    /// newTcWhile() (17.21.7).
    fn new_tc_while(&mut self, p: usize) {
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

    // ---- procedures on received information (17.21) -----------------------------------
    fn betterorsame_info(&self, p: usize, new_info_is: InfoIs) -> bool {
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

    fn wire_role(&self, p: usize) -> Option<WireRole> {
        match &self.ports[p].rcvd {
            Some(Bpdu::Config(_)) => Some(WireRole::Designated),
            Some(b @ (Bpdu::Rst(_) | Bpdu::Mst(..))) => b.body().map(|c| WireRole::from_flags(c.flags)),
            _ => None,
        }
    }

    fn rcvd_flags(&self, p: usize) -> u8 {
        self.ports[p].rcvd.as_ref().and_then(|b| b.body()).map_or(0, |c| c.flags)
    }

    /// rcvInfo() (17.21.8).
    fn rcv_info(&mut self, p: usize) -> RcvdInfo {
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

    fn is_designated_msg(&self, p: usize) -> bool {
        self.wire_role(p) == Some(WireRole::Designated)
    }

    fn is_rst(&self, p: usize) -> bool {
        matches!(self.ports[p].rcvd, Some(Bpdu::Rst(_) | Bpdu::Mst(..)))
    }

    /// recordProposal() (17.21.11).
    fn record_proposal(&mut self, p: usize) {
        if self.is_designated_msg(p) && self.rcvd_flags(p) & flags::PROPOSAL != 0 {
            self.ports[p].proposed = true;
        }
    }

    /// recordAgreement() (17.21.9).
    fn record_agreement(&mut self, p: usize) {
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
    fn record_dispute(&mut self, p: usize) {
        if self.is_rst(p) && self.rcvd_flags(p) & flags::LEARNING != 0 {
            let q = &mut self.ports[p];
            q.disputed = true;
            q.agreed = false;
        }
    }

    /// setTcFlags() (17.21.17).
    fn set_tc_flags(&mut self, p: usize) {
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
    fn updt_rcvd_info_while(&mut self, p: usize) {
        let q = &mut self.ports[p];
        let t = q.port_times;
        q.rcvd_info_while = if t.message_age + 1 <= t.max_age { 3 * t.hello_time.max(1) } else { 0 };
    }

    fn set_sync_tree(&mut self) {
        for q in &mut self.ports {
            q.sync = true;
        }
    }
    fn set_re_root_tree(&mut self) {
        for q in &mut self.ports {
            q.re_root = true;
        }
    }
    fn set_tc_prop_tree(&mut self, p: usize) {
        for (i, q) in self.ports.iter_mut().enumerate() {
            if i != p {
                q.tc_prop = true;
            }
        }
    }

    fn count_topology_change(&mut self, p: usize, notified: bool) {
        let now = self.now;
        let q = &mut self.ports[p];
        q.counters.topology_changes += 1;
        q.counters.last_topology_change_tick = Some(now);
        let port = q.no;
        self.topology_changes += 1;
        self.last_topology_change = Some(now);
        self.outputs.push(Output::Event(Event::TopologyChange { port, notified }));
    }
}
