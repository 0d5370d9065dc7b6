//! One bridge port's configuration, the per-port variables and timers of 802.1D-2004 17.17
//! and 17.19 (names kept close to the standard's so the machines read like its figures), the
//! states of its eight per-port machines, and its counters.
//!
//! Plain data: the machines in `machines.rs` are the only writers of the protocol variables;
//! the engine (`engine.rs`) writes configuration and link state and then re-runs them.

use crate::bpdu::{BadBpdu, Bpdu};
use crate::types::{auto_path_cost, Mac, PortId, PortRole, PriorityVector, Times};
use serde::Serialize;

/// On or off, for the per-port features and guards.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    /// Disabled.
    Off,
    /// Enabled.
    On,
}

impl OnOff {
    pub(crate) fn on(self) -> bool {
        self == OnOff::On
    }
}

/// Administrative point-to-point setting (adminPointToPointMAC, 6.6.3 of 802.1D).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PointToPoint {
    /// From the duplex: full duplex is point-to-point.
    Auto,
    /// Always point-to-point.
    Yes,
    /// Never (a shared segment).
    No,
}

/// Link duplex, for `PointToPoint::Auto`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Duplex {
    /// Half duplex (shared medium).
    Half,
    /// Full duplex.
    Full,
}

/// Port path cost setting.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    /// From the link speed, table 17-3.
    Auto,
    /// A fixed value, 1..=200 000 000.
    Fixed(u32),
}

/// A per-port feature switched by [`OnOff`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortFlag {
    /// AdminEdge: the port starts as an edge port.
    AdminEdge,
    /// AutoEdge: a port hearing no BPDU becomes an edge port (17.19.3).
    AutoEdge,
    /// BPDU guard: an edge port hearing a BPDU is shut.
    BpduGuard,
    /// BPDU filter: neither send nor process BPDUs.
    BpduFilter,
    /// Root guard (restrictedRole): never root port.
    RootGuard,
    /// Loop guard: info ageing out does not make the port designated.
    LoopGuard,
}

/// Protocol machine states, one enum per machine (figure numbers of 802.1D-2004).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Prx {
    Discard,
    Receive,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ppm {
    CheckingRstp,
    SelectingStp,
    Sensing,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Bdm {
    Edge,
    NotEdge,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ptx {
    Init,
    Periodic,
    Config,
    Tcn,
    Rstp,
    Idle,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pim {
    Disabled,
    Aged,
    Update,
    Current,
    Receive,
    SuperiorDesignated,
    RepeatedDesignated,
    InferiorDesignated,
    NotDesignated,
    Other,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Prt {
    InitPort,
    DisablePort,
    DisabledPort,
    RootProposed,
    RootAgreed,
    RootSynced,
    Reroot,
    RootForward,
    RootLearn,
    Rerooted,
    RootPort,
    DesignatedPropose,
    DesignatedSynced,
    DesignatedRetired,
    DesignatedDiscard,
    DesignatedLearn,
    DesignatedForward,
    DesignatedPort,
    MasterProposed,
    MasterAgreed,
    MasterSynced,
    MasterRetired,
    MasterDiscard,
    MasterLearn,
    MasterForward,
    MasterPort,
    BlockPort,
    AlternateProposed,
    AlternateAgreed,
    BackupPort,
    AlternatePort,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Pst {
    Discarding,
    Learning,
    Forwarding,
}
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Tcm {
    Inactive,
    Learning,
    Detected,
    Active,
    NotifiedTcn,
    NotifiedTc,
    Propagating,
    Acknowledged,
}

/// infoIs (17.19.10).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InfoIs {
    /// Port disabled.
    Disabled,
    /// Received information aged out (or none yet).
    Aged,
    /// Information from this bridge (designated).
    Mine,
    /// Information received from the LAN.
    Received,
}

/// rcvdInfo (17.19.22).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RcvdInfo {
    SuperiorDesignated,
    RepeatedDesignated,
    InferiorDesignated,
    InferiorRootAlternate,
    Other,
}

/// Per-port counters.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortCounters {
    /// Configuration BPDUs sent.
    pub tx_config: u64,
    /// TCN BPDUs sent.
    pub tx_tcn: u64,
    /// RST BPDUs sent.
    pub tx_rst: u64,
    /// MST BPDUs sent.
    pub tx_mst: u64,
    /// Configuration BPDUs received and processed.
    pub rx_config: u64,
    /// TCN BPDUs received and processed.
    pub rx_tcn: u64,
    /// RST BPDUs received and processed.
    pub rx_rst: u64,
    /// MST BPDUs received and processed.
    pub rx_mst: u64,
    /// Bad BPDUs by reason (serialised as a map from reason to count).
    pub rx_bad: BadCounts,
    /// Frames ignored because BPDU filter is on.
    pub rx_filtered: u64,
    /// Frames ignored because the port is disabled.
    pub rx_port_disabled: u64,
    /// Topology changes detected on or notified through this port.
    pub topology_changes: u64,
    /// Tick of the last one.
    pub last_topology_change_tick: Option<u64>,
}

impl PortCounters {
    /// Count of bad BPDUs for one reason.
    pub fn bad(&self, reason: BadBpdu) -> u64 {
        self.rx_bad.0[reason.index()]
    }
}

/// Bad BPDU counts, one per [`BadBpdu`] reason, indexed as [`BadBpdu::ALL`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadCounts(pub [u64; BadBpdu::ALL.len()]);

impl BadCounts {
    /// Count one.
    pub fn bump(&mut self, reason: BadBpdu) {
        self.0[reason.index()] += 1;
    }
}

impl Serialize for BadCounts {
    /// `{"too_short": 1, ...}`, every reason present.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(BadBpdu::ALL.len()))?;
        for r in BadBpdu::ALL {
            m.serialize_entry(&r, &self.0[r.index()])?;
        }
        m.end()
    }
}

/// A port: configuration, link, protocol variables, machine states, counters.
#[derive(Clone, Debug)]
pub(crate) struct Port {
    pub no: u16,
    pub mac: Mac,
    /// BEGIN for this port's machines (set when the port is added or re-initialised).
    pub begin: bool,
    // Configuration.
    pub priority: u8,
    pub cost: Cost,
    pub admin_edge: bool,
    pub auto_edge: bool,
    pub admin_p2p: PointToPoint,
    pub bpdu_guard: bool,
    pub bpdu_filter: bool,
    pub root_guard: bool,
    pub loop_guard: bool,
    // Link and administrative state.
    pub link_up: bool,
    pub speed_mbps: u32,
    pub duplex: Duplex,
    pub admin_up: bool,
    // Machine states.
    pub prx: Prx,
    pub ppm: Ppm,
    pub bdm: Bdm,
    pub ptx: Ptx,
    pub pim: Pim,
    pub prt: Prt,
    pub pst: Pst,
    pub tcm: Tcm,
    // Timers (17.17), seconds.
    pub edge_delay_while: u16,
    pub fd_while: u16,
    pub hello_when: u16,
    pub mdelay_while: u16,
    pub rb_while: u16,
    pub rcvd_info_while: u16,
    pub rr_while: u16,
    pub tc_while: u16,
    // Variables (17.19).
    pub agree: bool,
    pub agreed: bool,
    pub designated_priority: PriorityVector,
    pub designated_times: Times,
    pub disputed: bool,
    pub fdb_flush: bool,
    pub forward: bool,
    pub forwarding: bool,
    pub info_is: InfoIs,
    pub learn: bool,
    pub learning: bool,
    pub mcheck: bool,
    pub msg_priority: PriorityVector,
    pub msg_times: Times,
    pub new_info: bool,
    pub oper_edge: bool,
    pub port_enabled: bool,
    pub port_priority: PriorityVector,
    pub port_times: Times,
    pub proposed: bool,
    pub proposing: bool,
    pub rcvd_bpdu: bool,
    pub rcvd_info: RcvdInfo,
    pub rcvd_msg: bool,
    pub rcvd_rstp: bool,
    pub rcvd_stp: bool,
    pub rcvd_tc: bool,
    pub rcvd_tc_ack: bool,
    pub rcvd_tcn: bool,
    pub re_root: bool,
    pub reselect: bool,
    pub role: PortRole,
    pub selected: bool,
    pub selected_role: PortRole,
    pub send_rstp: bool,
    pub sync: bool,
    pub synced: bool,
    pub tc_ack: bool,
    pub tc_prop: bool,
    pub tx_count: u16,
    pub updt_info: bool,
    /// The BPDU being processed (rcvdBpdu's content).
    pub rcvd: Option<Bpdu>,
    /// MSTP remaining hops of msgTimes, portTimes, designatedTimes (13.26.x).
    pub msg_hops: u8,
    pub port_hops: u8,
    pub designated_hops: u8,
    /// Per tree: this MSTI's message from the BPDU being processed.
    pub rcvd_msti: Option<crate::bpdu::MstiMsg>,
    /// rcvdInternal: the BPDU being processed comes from this bridge's region.
    pub rcvd_internal: bool,
    /// Per-tree copy: its cost was set for the MSTI, not inherited from the CIST.
    pub cost_overridden: bool,
    /// infoInternal: the CIST port priority vector came from this region.
    pub info_internal: bool,
    // Guards.
    pub root_inconsistent: bool,
    pub loop_inconsistent: bool,
    /// Region of the last BPDU heard (show only: every port is a boundary port for now).
    pub neighbour: Neighbour,
    pub counters: PortCounters,
}

/// Where the last BPDU heard on a port came from, relative to this bridge's MST region.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Neighbour {
    /// No BPDU heard yet.
    Unknown,
    /// An MST BPDU with this bridge's MST Configuration Identifier.
    SameRegion,
    /// Any other BPDU (another region, an RSTP or STP bridge).
    OtherRegion,
}

impl Port {
    pub fn new(no: u16, mac: Mac) -> Self {
        Port {
            no,
            mac,
            begin: true,
            priority: 128,
            cost: Cost::Auto,
            admin_edge: false,
            auto_edge: true,
            admin_p2p: PointToPoint::Auto,
            bpdu_guard: false,
            bpdu_filter: false,
            root_guard: false,
            loop_guard: false,
            link_up: false,
            speed_mbps: 0,
            duplex: Duplex::Full,
            admin_up: true,
            prx: Prx::Discard,
            ppm: Ppm::CheckingRstp,
            bdm: Bdm::NotEdge,
            ptx: Ptx::Init,
            pim: Pim::Disabled,
            prt: Prt::InitPort,
            pst: Pst::Discarding,
            tcm: Tcm::Inactive,
            edge_delay_while: 0,
            fd_while: 0,
            hello_when: 0,
            mdelay_while: 0,
            rb_while: 0,
            rcvd_info_while: 0,
            rr_while: 0,
            tc_while: 0,
            agree: false,
            agreed: false,
            designated_priority: PriorityVector::default(),
            designated_times: Times::default(),
            disputed: false,
            fdb_flush: false,
            forward: false,
            forwarding: false,
            info_is: InfoIs::Disabled,
            learn: false,
            learning: false,
            mcheck: false,
            msg_priority: PriorityVector::default(),
            msg_times: Times::default(),
            new_info: false,
            oper_edge: false,
            port_enabled: false,
            port_priority: PriorityVector::default(),
            port_times: Times::default(),
            proposed: false,
            proposing: false,
            rcvd_bpdu: false,
            rcvd_info: RcvdInfo::Other,
            rcvd_msg: false,
            rcvd_rstp: false,
            rcvd_stp: false,
            rcvd_tc: false,
            rcvd_tc_ack: false,
            rcvd_tcn: false,
            re_root: false,
            reselect: false,
            role: PortRole::Disabled,
            selected: false,
            selected_role: PortRole::Disabled,
            send_rstp: false,
            sync: false,
            synced: false,
            tc_ack: false,
            tc_prop: false,
            tx_count: 0,
            updt_info: false,
            rcvd: None,
            msg_hops: 0,
            port_hops: 0,
            designated_hops: 0,
            rcvd_msti: None,
            rcvd_internal: false,
            cost_overridden: false,
            info_internal: false,
            root_inconsistent: false,
            loop_inconsistent: false,
            neighbour: Neighbour::Unknown,
            counters: PortCounters::default(),
        }
    }

    /// This port's identifier.
    pub fn port_id(&self) -> PortId {
        PortId::new(self.priority, self.no)
    }

    /// PortPathCost in use.
    pub fn path_cost(&self) -> u32 {
        match self.cost {
            Cost::Auto => auto_path_cost(self.speed_mbps),
            Cost::Fixed(c) => c,
        }
    }

    /// PortPathCost of this (per-tree) copy, with the link speed of the real port.
    pub fn path_cost_with(&self, speed_mbps: u32) -> u32 {
        match self.cost {
            Cost::Auto => auto_path_cost(speed_mbps),
            Cost::Fixed(c) => c,
        }
    }

    /// operPointToPointMAC.
    pub fn oper_p2p(&self) -> bool {
        match self.admin_p2p {
            PointToPoint::Auto => self.duplex == Duplex::Full,
            PointToPoint::Yes => true,
            PointToPoint::No => false,
        }
    }

    /// The forwarding state the PST machine is in.
    pub fn state(&self) -> crate::types::PortState {
        use crate::types::PortState;
        match self.pst {
            Pst::Discarding => PortState::Discarding,
            Pst::Learning => PortState::Learning,
            Pst::Forwarding => PortState::Forwarding,
        }
    }

    /// What portEnabled should be (MAC_Operational and administratively enabled).
    pub fn should_be_enabled(&self) -> bool {
        self.link_up && self.admin_up
    }
}
