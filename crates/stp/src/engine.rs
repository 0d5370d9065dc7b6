//! The engine: one bridge's spanning-tree protocol entity. Owns the bridge configuration,
//! its ports, the bridge-wide protocol variables (rootPriority, rootTimes, rootPortId), the
//! clock (ticks of one second, advanced only by [`Stp::tick`]) and the queue of outputs.
//!
//! Sans-I/O: every input is a method call (a received frame, a tick, a link or
//! configuration change); each call runs the state machines to quiescence and leaves
//! [`Output`]s (BPDU frames to send, port state changes, FDB flush requests, events) for
//! the caller to take with [`Stp::take_outputs`]. No threads, no clock, no allocation
//! beyond the output frames and the port table; no input can make it panic.

use crate::bpdu::{self, flags, BadBpdu, Bpdu, ConfigBody, MstPart, MstiMsg, WireRole};
pub(crate) use crate::config::range;
pub use crate::config::{BridgeConfig, ConfigError, GroupAddress, Link, Mode};
use crate::mst::Region;
pub use crate::output::{Event, Inconsistency, Output, RxError, TcSource};
use crate::port::{Cost, OnOff, PointToPoint, Port, PortFlag, Ptx};
use crate::types::{BridgeId, Mac, PortRole, PriorityVector, Times, TreeId};
use crate::vars::{Prs, TreeBridge};

/// A bridge's spanning-tree protocol entity.
#[derive(Debug, Clone)]
pub struct Stp {
    pub(crate) config: BridgeConfig,
    pub(crate) mac: Mac,
    pub(crate) bridge_id: BridgeId,
    pub(crate) region: Region,
    pub(crate) ports: Vec<Port>,
    pub(crate) root_priority: PriorityVector,
    pub(crate) root_port_id: Option<crate::types::PortId>,
    pub(crate) root_times: Times,
    pub(crate) prs: Prs,
    pub(crate) root_hops: u8,
    /// BEGIN for the tree in context only (a new MSTI).
    pub(crate) tree_begin: bool,
    /// Index into `tree_ids` of the tree whose variables are in `ports` (0 = CIST).
    pub(crate) cur_tree: usize,
    /// CIST then the MSTIs of the region (MSTP mode).
    pub(crate) tree_ids: Vec<TreeId>,
    /// Per MSTI, per port: the per-tree variables while out of context.
    pub(crate) msti_ports: Vec<Vec<Port>>,
    /// Per MSTI: bridge-level variables while out of context.
    pub(crate) msti_bridge: Vec<TreeBridge>,
    /// Per MSTID bridge priority (default: the CIST's).
    pub(crate) msti_priority: std::collections::BTreeMap<u16, u16>,
    pub(crate) begin: bool,
    pub(crate) now: u64,
    pub(crate) outputs: Vec<Output>,
    pub(crate) topology_changes: u64,
    pub(crate) last_topology_change: Option<u64>,
    last_root: Option<(BridgeId, Option<u16>)>,
    /// Passes of `run` that hit the iteration bound (should stay 0).
    pub(crate) runaway_runs: u64,
}

/// Bound on passes per `run`: far above what any real sequence needs.
const MAX_PASSES: usize = 1000;

impl Stp {
    /// A bridge with address `mac`, no ports yet.
    pub fn new(mac: Mac, config: BridgeConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let bridge_id = BridgeId::new(config.priority, mac);
        let mut s = Stp {
            config,
            mac,
            bridge_id,
            region: Region::default(),
            ports: Vec::new(),
            root_priority: PriorityVector::default(),
            root_port_id: None,
            root_times: Times::default(),
            prs: Prs::InitBridge,
            root_hops: 0,
            tree_begin: false,
            cur_tree: 0,
            tree_ids: vec![TreeId::CIST],
            msti_ports: Vec::new(),
            msti_bridge: Vec::new(),
            msti_priority: std::collections::BTreeMap::new(),
            begin: true,
            now: 0,
            outputs: Vec::new(),
            topology_changes: 0,
            last_topology_change: None,
            last_root: None,
            runaway_runs: 0,
        };
        s.root_priority = s.bridge_priority();
        s.root_times = s.bridge_times();
        s.root_hops = s.config.max_hops;
        s.rebuild_trees();
        s.run();
        Ok(s)
    }

    pub(crate) fn force_version(&self) -> u8 {
        match self.config.mode {
            Mode::Stp => 0,
            Mode::Rstp => 2,
            Mode::Mstp => 3,
        }
    }
    pub(crate) fn tx_hold_count(&self) -> u16 {
        self.config.tx_hold_count
    }
    pub(crate) fn bridge_times(&self) -> Times {
        Times {
            message_age: 0,
            max_age: self.config.max_age,
            hello_time: self.config.hello_time,
            forward_delay: self.config.forward_delay,
        }
    }

    /// This bridge's identifier.
    pub fn bridge_id(&self) -> BridgeId {
        self.bridge_id
    }
    /// The current configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }
    /// The tick counter (seconds since creation, as far as the caller's ticks go).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Take every output produced since the last call, in order.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    fn idx(&self, port: u16) -> Result<usize, ConfigError> {
        self.ports
            .iter()
            .position(|q| q.no == port)
            .ok_or(ConfigError::NoPort(port))
    }

    /// Add port `port` (1..=4095) with source MAC `mac`; it starts with its link down.
    pub fn add_port(&mut self, port: u16, mac: Mac) -> Result<(), ConfigError> {
        if !(1..=4095).contains(&port) || self.idx(port).is_ok() {
            return Err(ConfigError::PortNumber(port));
        }
        let mut q = Port::new(port, mac);
        q.designated_times = self.bridge_times();
        self.ports.push(q);
        self.add_port_to_trees(self.ports.len() - 1);
        self.run();
        Ok(())
    }

    /// Remove a port; the others reselect.
    pub fn remove_port(&mut self, port: u16) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        self.ports.remove(i);
        for t in &mut self.msti_ports {
            t.remove(i);
            for q in t.iter_mut() {
                q.reselect = true;
                q.selected = false;
            }
        }
        for q in &mut self.ports {
            q.reselect = true;
            q.selected = false;
        }
        self.run();
        Ok(())
    }

    /// Link up with speed (Mb/s, 0 if unknown) and duplex, or down.
    pub fn set_link(&mut self, port: u16, link: Link) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        let q = &mut self.ports[i];
        match link {
            Link::Up { speed_mbps, duplex } => {
                q.link_up = true;
                let cost_before = q.path_cost();
                q.speed_mbps = speed_mbps;
                q.duplex = duplex;
                if cost_before != q.path_cost() {
                    q.reselect = true;
                    q.selected = false;
                }
            }
            Link::Down => q.link_up = false,
        }
        self.sync_enabled(i);
        self.run();
        Ok(())
    }

    /// Administratively enable or disable a port (BPDU guard disables; this re-admits).
    pub fn set_port_admin(&mut self, port: u16, on: OnOff) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        self.ports[i].admin_up = on.on();
        self.sync_enabled(i);
        self.run();
        Ok(())
    }

    fn sync_enabled(&mut self, i: usize) {
        let q = &mut self.ports[i];
        let en = q.should_be_enabled();
        if en != q.port_enabled {
            q.port_enabled = en;
            if !en && q.loop_inconsistent {
                q.loop_inconsistent = false;
                let port = q.no;
                self.outputs.push(Output::Event(Event::LoopInconsistent {
                    port,
                    change: Inconsistency::Cleared,
                }));
            }
        }
    }

    /// Port priority (multiple of 16, 0..=240).
    pub fn set_port_priority(&mut self, port: u16, priority: u16) -> Result<(), ConfigError> {
        if priority % 16 != 0 || priority > 240 {
            return Err(ConfigError::PortPriority(priority));
        }
        let i = self.idx(port)?;
        self.ports[i].priority = priority as u8;
        self.reselect_all();
        Ok(())
    }

    /// Port path cost.
    pub fn set_port_cost(&mut self, port: u16, cost: Cost) -> Result<(), ConfigError> {
        if let Cost::Fixed(c) = cost {
            range("port path cost", c, 1, 200_000_000)?;
        }
        let i = self.idx(port)?;
        self.ports[i].cost = cost;
        // MSTIs use the same cost unless `set_msti_port` gave them their own.
        for t in self.msti_ports.iter_mut() {
            if !t[i].cost_overridden {
                t[i].cost = cost;
            }
            for q in t.iter_mut() {
                q.reselect = true;
                q.selected = false;
            }
        }
        self.reselect_all();
        Ok(())
    }

    /// adminPointToPointMAC.
    pub fn set_port_p2p(&mut self, port: u16, p2p: PointToPoint) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        self.ports[i].admin_p2p = p2p;
        self.run();
        Ok(())
    }

    /// Switch a per-port feature or guard. Edge settings re-initialise the port's machines.
    pub fn set_port_flag(
        &mut self,
        port: u16,
        flag: PortFlag,
        on: OnOff,
    ) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        let q = &mut self.ports[i];
        let v = on.on();
        match flag {
            PortFlag::AdminEdge => {
                q.admin_edge = v;
                q.begin = true;
            }
            PortFlag::AutoEdge => q.auto_edge = v,
            PortFlag::BpduGuard => q.bpdu_guard = v,
            PortFlag::BpduFilter => q.bpdu_filter = v,
            PortFlag::RootGuard => {
                q.root_guard = v;
                q.reselect = true;
                q.selected = false;
            }
            PortFlag::LoopGuard => {
                q.loop_guard = v;
                if !v && q.loop_inconsistent {
                    q.loop_inconsistent = false;
                    q.reselect = true;
                    q.selected = false;
                }
            }
        }
        self.run();
        Ok(())
    }

    /// Force a Port Protocol Migration check (mcheck, 17.19.13): send RST BPDUs again.
    pub fn mcheck(&mut self, port: u16) -> Result<(), ConfigError> {
        let i = self.idx(port)?;
        if self.rstp_version() {
            self.ports[i].mcheck = true;
        }
        self.run();
        Ok(())
    }

    /// Replace the bridge configuration. Priority and timers reselect; a mode change
    /// re-initialises every machine (BEGIN).
    pub fn set_config(&mut self, config: BridgeConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let mode_changed = config.mode != self.config.mode;
        self.config = config;
        self.bridge_id = BridgeId::new(self.config.priority, self.mac);
        if mode_changed {
            self.rebuild_trees();
            self.begin = true;
            self.run();
        } else {
            // MSTIs keep running; those without their own priority follow the new one.
            self.refresh_msti_ids();
            self.reselect_all();
        }
        Ok(())
    }

    /// The MST region (name, revision, VID to MSTID table). The MSTIs of the new table
    /// start from BEGIN (their ports discarding until they converge).
    pub fn set_region(&mut self, region: Region) {
        self.region = region;
        self.rebuild_trees();
        self.run();
    }

    /// The trees whose port states and flushes the engine reports: the CIST, and in
    /// `Mode::Mstp` every MSTI of the region's table.
    pub fn trees(&self) -> Vec<TreeId> {
        self.tree_ids.clone()
    }

    /// Bridge priority of one MSTI (a multiple of 4096 up to 61440). A priority for an
    /// MSTID not (yet) in the table is kept for when it appears.
    pub fn set_msti_priority(&mut self, tree: TreeId, priority: u16) -> Result<(), ConfigError> {
        if priority % 4096 != 0 || priority > 61440 {
            return Err(ConfigError::BridgePriority(priority));
        }
        self.msti_priority.insert(tree.0, priority);
        self.refresh_msti_ids();
        self.run();
        Ok(())
    }

    /// Port priority and internal path cost of `port` in one MSTI.
    pub fn set_msti_port(
        &mut self,
        port: u16,
        tree: TreeId,
        priority: u16,
        cost: Cost,
    ) -> Result<(), ConfigError> {
        if priority % 16 != 0 || priority > 240 {
            return Err(ConfigError::PortPriority(priority));
        }
        if let Cost::Fixed(c) = cost {
            range("port path cost", c, 1, 200_000_000)?;
        }
        let i = self.idx(port)?;
        let Some(k) = self
            .tree_ids
            .iter()
            .position(|t| *t == tree)
            .filter(|k| *k > 0)
        else {
            return Err(ConfigError::NoTree(tree.0));
        };
        for q in self.msti_ports[k - 1].iter_mut() {
            q.reselect = true;
            q.selected = false;
        }
        let t = &mut self.msti_ports[k - 1][i];
        t.priority = priority as u8;
        t.cost = cost;
        t.cost_overridden = true;
        self.run();
        Ok(())
    }

    /// The MST region in use.
    pub fn region(&self) -> &Region {
        &self.region
    }

    fn reselect_all(&mut self) {
        for q in &mut self.ports {
            q.reselect = true;
            q.selected = false;
        }
        self.run();
    }

    /// One second passes (the Port Timers state machine, 17.22).
    pub fn tick(&mut self) {
        self.now += 1;
        for q in &mut self.ports {
            for t in [
                &mut q.edge_delay_while,
                &mut q.fd_while,
                &mut q.hello_when,
                &mut q.mdelay_while,
                &mut q.rb_while,
                &mut q.rcvd_info_while,
                &mut q.rr_while,
                &mut q.tc_while,
                &mut q.tx_count,
            ] {
                *t = t.saturating_sub(1);
            }
        }
        for q in self.msti_ports.iter_mut().flatten() {
            for t in [
                &mut q.fd_while,
                &mut q.rb_while,
                &mut q.rcvd_info_while,
                &mut q.rr_while,
                &mut q.tc_while,
            ] {
                *t = t.saturating_sub(1);
            }
        }
        self.run();
    }

    /// A frame received on `port` addressed to the bridge group address (destination MAC
    /// first). Bad BPDUs are counted by reason and otherwise ignored.
    pub fn receive(&mut self, port: u16, frame: &[u8]) -> Result<(), RxError> {
        let i = self.idx(port).map_err(|_| RxError::NoPort(port))?;
        if self.ports[i].bpdu_filter {
            self.ports[i].counters.rx_filtered += 1;
            return Err(RxError::Filtered);
        }
        if !self.ports[i].port_enabled {
            self.ports[i].counters.rx_port_disabled += 1;
            return Err(RxError::PortDisabled);
        }
        // 9.3.4: our own BPDU looped back. An MST BPDU names its sender in the CIST
        // Bridge Identifier (its Bridge Identifier field is the regional root).
        let own_port = self.ports[i].port_id();
        let parsed = bpdu::parse_frame(frame).and_then(|b| {
            let sender = match &b {
                Bpdu::Mst(c, m) => Some((m.cist_bridge, c.port)),
                other => other.body().map(|c| (c.bridge, c.port)),
            };
            if sender == Some((self.bridge_id, own_port)) {
                Err(BadBpdu::OwnBpdu)
            } else {
                Ok(b)
            }
        });
        let b = match parsed {
            Ok(b) => b,
            Err(reason) => {
                self.ports[i].counters.rx_bad.bump(reason);
                return Err(RxError::Bad(reason));
            }
        };
        let q = &mut self.ports[i];
        match b.kind() {
            bpdu::BpduKind::Config => q.counters.rx_config += 1,
            bpdu::BpduKind::Tcn => q.counters.rx_tcn += 1,
            bpdu::BpduKind::Rst => q.counters.rx_rst += 1,
            bpdu::BpduKind::Mst => q.counters.rx_mst += 1,
        }
        if q.bpdu_guard && (q.oper_edge || q.admin_edge) {
            q.admin_up = false;
            self.outputs
                .push(Output::Event(Event::BpduGuardShut { port }));
            self.sync_enabled(i);
            self.run();
            return Err(RxError::GuardShut);
        }
        if q.loop_inconsistent {
            q.loop_inconsistent = false;
            q.reselect = true;
            q.selected = false;
            self.outputs.push(Output::Event(Event::LoopInconsistent {
                port,
                change: Inconsistency::Cleared,
            }));
        }
        let q = &mut self.ports[i];
        let same = crate::mst::from_same_region(&b, &self.region.config_id());
        q.neighbour = if same {
            crate::port::Neighbour::SameRegion
        } else {
            crate::port::Neighbour::OtherRegion
        };
        q.rcvd_internal = same && self.config.mode == Mode::Mstp;
        q.rcvd = Some(b);
        q.rcvd_bpdu = true;
        self.run();
        self.ports[i].rcvd = None;
        Ok(())
    }

    /// Run every state machine until none moves (17.16): the per-port machines in the
    /// CIST context, the per-tree machines once per tree (see `trees.rs`).
    pub(crate) fn run(&mut self) {
        let n = self.ports.len();
        let trees = self.tree_ids.len();
        let mut settled = false;
        for _ in 0..MAX_PASSES {
            let mut moved = false;
            for p in 0..n {
                moved |= self.step_prx(p);
                moved |= self.step_ppm(p);
                moved |= self.step_bdm(p);
            }
            for k in 0..trees {
                self.enter_tree(k);
                for p in 0..n {
                    moved |= self.step_pim(p);
                }
                moved |= self.step_prs();
                for p in 0..n {
                    moved |= self.step_prt(p);
                    moved |= self.step_pst(p);
                    moved |= self.step_tcm(p);
                }
                self.tree_begin = false;
                self.enter_tree(k);
            }
            for p in 0..n {
                moved |= self.step_ptx(p);
            }
            if self.begin || self.ports.iter().any(|q| q.begin) {
                self.begin = false;
                for q in &mut self.ports {
                    q.begin = false;
                }
                continue;
            }
            if !moved {
                settled = true;
                break;
            }
        }
        if !settled {
            self.runaway_runs += 1;
        }
        let root = (
            self.root_priority.root,
            self.root_port_id.map(|p| p.number()),
        );
        if self.last_root != Some(root) {
            self.last_root = Some(root);
            self.outputs.push(Output::Event(Event::NewRoot {
                root: root.0,
                root_port: root.1,
            }));
        }
    }

    /// The MST BPDU's MSTI configuration messages for port `p` (CIST context).
    fn msti_messages(&self, p: usize) -> Vec<MstiMsg> {
        (1..self.tree_ids.len())
            .map(|k| {
                let t = &self.msti_ports[k - 1][p];
                let tb = &self.msti_bridge[k - 1];
                let mut f = 0u8;
                if t.tc_while != 0 {
                    f |= flags::TC;
                }
                if t.proposing {
                    f |= flags::PROPOSAL;
                }
                if t.learning {
                    f |= flags::LEARNING;
                }
                if t.forwarding {
                    f |= flags::FORWARDING;
                }
                if t.agree {
                    f |= flags::AGREEMENT;
                }
                f |= role_bits(t.role);
                if t.role == PortRole::Master {
                    f |= flags::TC_ACK; // the Master flag
                }
                MstiMsg {
                    flags: f,
                    regional_root: t.designated_priority.root,
                    internal_root_path_cost: t.designated_priority.root_path_cost,
                    bridge_priority: ((tb.bridge_id.priority() >> 8) as u8) & 0xf0,
                    port_priority: t.priority & 0xf0,
                    remaining_hops: t.designated_hops,
                }
            })
            .collect()
    }

    /// txConfig / txTcn / txRstp (17.21.19-21).
    pub(crate) fn transmit(&mut self, p: usize, what: Ptx) {
        let q = &self.ports[p];
        let mut f = 0u8;
        if q.tc_while != 0 {
            f |= flags::TC;
        }
        let body = |f: u8| ConfigBody {
            flags: f,
            root: q.designated_priority.root,
            root_path_cost: q.designated_priority.root_path_cost,
            bridge: q.designated_priority.designated_bridge,
            port: q.designated_priority.designated_port,
            times: q.designated_times,
        };
        let bpdu = match what {
            Ptx::Tcn => Bpdu::Tcn,
            Ptx::Config => {
                if q.tc_ack {
                    f |= flags::TC_ACK;
                }
                Bpdu::Config(body(f))
            }
            _ => {
                if q.proposing {
                    f |= flags::PROPOSAL;
                }
                if q.learning {
                    f |= flags::LEARNING;
                }
                if q.forwarding {
                    f |= flags::FORWARDING;
                }
                if q.agree {
                    f |= flags::AGREEMENT;
                }
                f |= role_bits(q.role);
                if self.config.mode == Mode::Mstp {
                    Bpdu::Mst(
                        ConfigBody {
                            bridge: q.designated_priority.regional_root,
                            ..body(f)
                        },
                        Box::new(MstPart {
                            config_id: self.region.config_id(),
                            internal_root_path_cost: q.designated_priority.internal_cost,
                            cist_bridge: self.bridge_id,
                            remaining_hops: q.designated_hops,
                            mstis: self.msti_messages(p),
                        }),
                    )
                } else {
                    Bpdu::Rst(body(f))
                }
            }
        };
        let dst = match self.config.group_address {
            GroupAddress::Customer => bpdu::STP_GROUP_ADDRESS,
            GroupAddress::Provider => bpdu::PROVIDER_GROUP_ADDRESS,
        };
        let frame = bpdu.emit_frame(dst, q.mac);
        let port = q.no;
        let c = &mut self.ports[p].counters;
        match bpdu.kind() {
            bpdu::BpduKind::Config => c.tx_config += 1,
            bpdu::BpduKind::Tcn => c.tx_tcn += 1,
            bpdu::BpduKind::Rst => c.tx_rst += 1,
            bpdu::BpduKind::Mst => c.tx_mst += 1,
        }
        self.outputs.push(Output::Bpdu { port, frame });
    }
}

/// The role bits of a flags octet (Master is 0 in MSTI messages).
fn role_bits(role: PortRole) -> u8 {
    match role {
        PortRole::Root => WireRole::Root,
        PortRole::Designated => WireRole::Designated,
        PortRole::Alternate | PortRole::Backup => WireRole::AlternateOrBackup,
        PortRole::Disabled | PortRole::Master => WireRole::Unknown,
    }
    .to_flags()
}
