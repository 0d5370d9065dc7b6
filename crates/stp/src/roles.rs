//! Port Role Transitions (802.1D-2004 17.29, with the ROOT_SYNCED state and allSynced of
//! 802.1Q-2022 13.37) and Port State Transition (17.30): how a port's selected role
//! becomes learn/forward decisions, rapidly by proposal/agreement and sync, or by the
//! forward delay timer, and how those reach the caller as state changes.
use crate::engine::{Output, Stp};
use crate::port::{Prt, Pst};
use crate::types::{PortRole, PortState};

impl Stp {
    // ---- PRT: port role transitions ---------------------------------------------------
    pub(crate) fn step_prt(&mut self, p: usize) -> bool {
        let next = self.prt_next(p);
        let Some(next) = next else { return false };
        self.enter_prt(p, next);
        true
    }

    pub(crate) fn prt_next(&self, p: usize) -> Option<Prt> {
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
                PortRole::Designated => Prt::DesignatedPort,
                PortRole::Master => Prt::MasterPort,
                PortRole::Alternate | PortRole::Backup => Prt::BlockPort,
            });
        }
        let rstp = self.rstp_version();
        let fwd = self.fwd_delay(p);
        let fdelay = self.forward_delay(p);
        use Prt::*;
        match q.prt {
            DisablePort if !q.learning && !q.forwarding => Some(DisabledPort),
            DisabledPort if q.fd_while != self.max_age(p) || q.sync || q.re_root || !q.synced => {
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
            MasterProposed | MasterAgreed | MasterSynced | MasterRetired | MasterDiscard
            | MasterLearn | MasterForward => Some(MasterPort),
            // 802.1Q-2022 figure 13-23 (Master port role transitions).
            MasterPort => {
                let may_go = q.fd_while == 0 || self.all_synced(p);
                if q.proposed && !q.agree {
                    Some(MasterProposed)
                } else if (self.all_synced(p) && !q.agree) || (q.proposed && q.agree) {
                    Some(MasterAgreed)
                } else if (!q.learning && !q.forwarding && !q.synced)
                    || (q.agreed && !q.synced)
                    || (q.oper_edge && !q.synced)
                    || (q.sync && q.synced)
                {
                    Some(MasterSynced)
                } else if q.re_root && q.rr_while == 0 {
                    Some(MasterRetired)
                } else if ((q.sync && !q.synced) || (q.re_root && q.rr_while != 0) || q.disputed)
                    && !q.oper_edge
                    && (q.learn || q.forward)
                {
                    Some(MasterDiscard)
                } else if may_go && !q.learn {
                    Some(MasterLearn)
                } else if may_go && q.learn && !q.forward {
                    Some(MasterForward)
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

    pub(crate) fn enter_prt(&mut self, p: usize, next: Prt) {
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
            MasterProposed => {
                self.set_sync_tree();
                self.ports[p].proposed = false;
            }
            MasterAgreed => {
                q.proposed = false;
                q.sync = false;
                q.agree = true;
            }
            MasterSynced => {
                q.rr_while = 0;
                q.synced = true;
                q.sync = false;
            }
            MasterRetired => q.re_root = false,
            MasterDiscard => {
                q.learn = false;
                q.forward = false;
                q.disputed = false;
                q.fd_while = fdelay;
            }
            MasterLearn => {
                q.learn = true;
                q.fd_while = fdelay;
            }
            MasterForward => {
                q.forward = true;
                q.fd_while = 0;
                q.agreed = send_rstp;
            }
            MasterPort => q.role = PortRole::Master,
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
            let tree = self.cur_tree_id();
            self.outputs.push(Output::PortState { port, tree, state });
        }
        true
    }
}
