//! The typed command tree: what a parsed line means, before anything is executed.
//!
//! Every field is already syntactically valid (numbers are numbers, MACs are MACs, VIDs are in
//! 1-4094); semantic checks that need the switch's state (does the device exist, is the port
//! attached, is the MTU in range) are the [`Switch`](qbridge_bridge::Switch)'s job when the
//! command is executed. `Option` fields mean "not given on the command line: keep what is there".

use qbridge_bridge::{
    FdbFlushMatch, FdbKind, MacvlanMode, PcpMode, PvlanRole, VidList, Violation, VlanModeKind,
    VlanProtocol,
};
use qbridge_wire::{MacAddr, Tpid};

/// One command: `OBJECT COMMAND ARGS…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Link(LinkCommand),
    Vlan(VlanCommand),
    Fdb(FdbCommand),
    /// `show running-config`: the configuration as a batch file that recreates it.
    ShowRunningConfig,
    /// `show fast-path`: the eBPF fast path's state, flows and counters (daemon only).
    ShowFastPath,
    /// `help`, `OBJECT help`: the usage of every object, or of one.
    Help(Option<Object>),
    /// `mirror …`: port mirroring sessions.
    Mirror(MirrorCommand),
    /// `stp …`: the spanning tree of bridges with `stp_state 1`.
    Stp(StpCommand),
    /// `vni …`: the VNIs a `vnifilter` VXLAN port accepts (bridge(8)'s `vni` object).
    Vni(VniCommand),
    /// `trace dev PORT FRAME…`: one frame walked through the running configuration, each
    /// decision explained, without sending it (`crate::trace`).
    Trace(TraceSpec),
    /// `trace live dev PORT …`: the next frames received on a port, each explained as it is
    /// forwarded (a daemon's stream, `crate::trace::live`).
    TraceLive(TraceLiveSpec),
}

/// `trace live dev PORT [count N] [timeout SECONDS] [FILTER…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLiveSpec {
    pub dev: String,
    /// Frames to explain before the trace ends (1 ..= [`TraceLiveSpec::MAX_COUNT`]).
    pub count: u32,
    /// Seconds after which the trace ends with fewer frames (1 ..= 3600).
    pub timeout_s: u32,
    pub filter: LiveFilter,
}

impl TraceLiveSpec {
    pub const DEFAULT_COUNT: u32 = 10;
    pub const MAX_COUNT: u32 = 1000;
    pub const DEFAULT_TIMEOUT_S: u32 = 60;
    pub const MAX_TIMEOUT_S: u32 = 3600;
}

/// Which received frames `trace live` explains, in the words of a described frame: each
/// field given must match (`crate::trace::LiveFilter::matches`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveFilter {
    pub src: Option<MacAddr>,
    pub dst: Option<MacAddr>,
    /// The VIDs of the frame's tags as received, outermost first (a prefix of its stack).
    pub vids: Vec<u16>,
    /// The EtherType after the tags.
    pub ethertype: Option<u16>,
    /// 6 (`tcp`) or 17 (`udp`).
    pub ip_proto: Option<u8>,
    /// `port N`: the TCP or UDP source or destination port.
    pub l4_port: Option<u16>,
}

/// `trace dev PORT …`: the ingress port and the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    pub dev: String,
    pub frame: TraceFrameSpec,
}

/// The frame of a trace: its bytes, or described in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceFrameSpec {
    /// `hex HHHH…`: the whole frame, from the destination MAC on (no FCS).
    Hex(Vec<u8>),
    Described(DescribedFrame),
}

/// A frame in words (`crate::trace::build`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedFrame {
    pub src: MacAddr,
    pub dst: MacAddr,
    /// Outermost first.
    pub tags: Vec<TagSpec>,
    pub l3: L3Spec,
    pub l4: L4Spec,
    /// `len N`: the frame padded to N bytes (without FCS).
    pub len: Option<u16>,
}

/// `vlan VID [pcp N] [dei 0|1] [tpid T]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagSpec {
    /// 0-4095 (0: priority-tagged; 4095, reserved, is allowed so that its drop can be traced).
    pub vid: u16,
    pub pcp: u8,
    pub dei: bool,
    /// `None`: the ingress port's TPID for the outer tag, 0x8100 for the others.
    pub tpid: Option<Tpid>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3Spec {
    /// `ethertype 0xHHHH` (payload zeros), or nothing (IPv4 ethertype, empty payload).
    Ethertype(u16),
    /// `arp SENDER TARGET`: a request, who-has TARGET tell SENDER.
    Arp {
        sender: std::net::Ipv4Addr,
        target: std::net::Ipv4Addr,
    },
    Ipv4 {
        src: std::net::Ipv4Addr,
        dst: std::net::Ipv4Addr,
    },
    Ipv6 {
        src: std::net::Ipv6Addr,
        dst: std::net::Ipv6Addr,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Spec {
    /// An IP packet without `tcp`/`udp`: an ICMP (ICMPv6) echo request.
    Echo,
    Tcp {
        sport: u16,
        dport: u16,
    },
    Udp {
        sport: u16,
        dport: u16,
    },
}

/// `vni add|del dev NAME vni N[-M]`, `vni show [dev NAME]` (docs/semantics.md, "VLAN ↔ VNI").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VniCommand {
    Add { dev: String, vnis: (u32, u32) },
    Del { dev: String, vnis: (u32, u32) },
    Show { dev: Option<String> },
}

/// The objects of the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    Link,
    Vlan,
    Fdb,
    Mirror,
    Stp,
    Vni,
}

impl Object {
    pub fn name(self) -> &'static str {
        match self {
            Object::Link => "link",
            Object::Vlan => "vlan",
            Object::Fdb => "fdb",
            Object::Mirror => "mirror",
            Object::Stp => "stp",
            Object::Vni => "vni",
        }
    }
}

/// `link …` (ip-link(8)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCommand {
    /// `link add NAME type bridge [OPTIONS]`
    AddBridge { name: String, opts: BridgeOptions },
    /// `link add NAME type pcap|afpacket dev IF [qdisc_bypass on|off]|tap [ifname IF] [netns NS]`,
    /// `link add link LOWER name NAME type vlan|macvlan …`
    /// `index N` (ip-link(8)): the port id to take instead of the first free one;
    /// `peer_index`: the same for a patch link's other end (`peer NAME index M`).
    AddPort {
        name: String,
        spec: PortSpec,
        index: Option<u16>,
        peer_index: Option<u16>,
    },
    /// `link set dev BR type bridge [OPTIONS]`
    SetBridge { dev: String, opts: BridgeOptions },
    /// `link set dev BOND type bond [OPTIONS]` (a bond is added with `AddPort` and
    /// [`PortSpec::Bond`]).
    SetBond { dev: String, opts: BondOptions },
    /// `link set dev NAME [master BR|nomaster] [up|down] [learning on|off] …`
    SetPort { dev: String, opts: PortOptions },
    /// `link del dev NAME`
    Del { dev: String },
    /// `link show [dev NAME]`
    Show { dev: Option<String> },
}

/// The backend of a port, recorded by `link add` and opened by the I/O layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// Frames come from and go to pcap files (`qbridge replay`).
    Pcap,
    /// An AF_PACKET socket bound to host interface `dev`. `qdisc_bypass` (default on): send
    /// straight to the driver (`PACKET_QDISC_BYPASS`), skipping the qdisc and the taps, so
    /// `tcpdump` on `dev` does not see what qbridge sends; off: through the qdisc.
    /// `ring_frames`: receive ring slots per socket (the daemon opens one socket per worker);
    /// `None`: the daemon's default for its worker count.
    AfPacket {
        dev: String,
        qdisc_bypass: bool,
        ring_frames: Option<u32>,
    },
    /// A TAP device named `ifname` (default: the port's name), moved into network namespace
    /// `netns` if given.
    Tap {
        ifname: Option<String>,
        netns: Option<String>,
    },
    /// AF_XDP sockets on host interface `dev`: one per device queue `0..queues`, spread over
    /// the datapath workers, fed by an XDP program attached in `mode`.
    AfXdp {
        dev: String,
        queues: u32,
        mode: XdpAttach,
        zerocopy: bool,
    },
    /// One end of a patch link (Open vSwitch's patch ports): frames sent on this port are
    /// received on port `peer`, inside the daemon, with no syscall and no copy. `link add A
    /// type patch peer B` creates both ends (as `ip link add … type veth peer name …` does);
    /// deleting either end deletes both.
    Patch { peer: String },
    /// A VLAN sub-interface of port (or VLAN device, or bridge host port) `link`, as ip-link(8)
    /// `type vlan`: a TAP named after the port (in `netns` if given) whose frames leave `link`
    /// with the tag `protocol`/`id` pushed outermost, and which receives `link`'s frames that
    /// carry that outer tag, with the tag removed. `address`: the TAP's MAC (default: a random
    /// locally administered one, fixed at creation).
    Vlan {
        link: String,
        protocol: Tpid,
        id: u16,
        netns: Option<String>,
        address: Option<MacAddr>,
    },
    /// A macvlan endpoint on port `link` (ip-link(8) `type macvlan mode …`): a TAP named after
    /// the port (in `netns` if given) that receives `link`'s frames for its address.
    Macvlan {
        link: String,
        mode: MacvlanMode,
        netns: Option<String>,
        address: Option<MacAddr>,
    },
    /// A bridge's own interface (`link set dev BR up [ifname IF] [netns NS] [address MAC]`): a
    /// TAP named `ifname` (default: the bridge's name). Not a `link add` kind.
    Host {
        ifname: Option<String>,
        netns: Option<String>,
        address: Option<MacAddr>,
    },
    /// A bond (`link add NAME type bond mode …`): one port of the switch over its members,
    /// each a port's backend moved here by `link set dev P master BOND`.
    Bond(Box<BondSpec>),
    /// A VXLAN port (`link add NAME type vxlan id VNI local ADDR …`): a UDP socket on
    /// `local:dstport` (docs/semantics.md, "VXLAN ports").
    Vxlan(Box<crate::vxlan::VxlanSpec>),
}

/// A bond's configuration and members (docs/semantics.md, "Bonds and LACP").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BondSpec {
    /// The engine's configuration; `system` is the bond's MAC (all zeros in a parsed `link
    /// add` without `address`: the session picks a random one).
    pub config: qbridge_lacp::BondConfig,
    /// In order of enslavement (active-backup's failover order).
    pub members: Vec<BondMember>,
}

/// A member of a bond: the port it was, with its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BondMember {
    pub name: String,
    pub spec: PortSpec,
    /// The LACP port number (1-based, unique in the bond); the engine's `MemberId`.
    pub port_number: u16,
}

/// Options of `link add|set … type bond` (ip-link(8)'s bond words); `None`: not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BondOptions {
    pub mode: Option<qbridge_lacp::Mode>,
    pub xmit_hash_policy: Option<qbridge_lacp::HashPolicy>,
    pub lacp_rate: Option<qbridge_lacp::LacpRate>,
    pub lacp_active: Option<qbridge_lacp::LacpActivity>,
    pub min_links: Option<u16>,
    pub miimon: Option<u32>,
    pub lacp_fallback: Option<bool>,
    pub address: Option<MacAddr>,
}

impl BondOptions {
    /// `cfg` with the options given.
    pub fn merge(&self, mut cfg: qbridge_lacp::BondConfig) -> qbridge_lacp::BondConfig {
        if let Some(v) = self.mode {
            cfg.mode = v;
        }
        if let Some(v) = self.xmit_hash_policy {
            cfg.hash_policy = v;
        }
        if let Some(v) = self.lacp_rate {
            cfg.lacp_rate = v;
        }
        if let Some(v) = self.lacp_active {
            cfg.lacp_activity = v;
        }
        if let Some(v) = self.min_links {
            cfg.min_links = v;
        }
        if let Some(v) = self.miimon {
            cfg.miimon_ms = v;
        }
        if let Some(v) = self.lacp_fallback {
            cfg.fallback = if v {
                qbridge_lacp::Fallback::ActiveBackup
            } else {
                qbridge_lacp::Fallback::Off
            };
        }
        if let Some(v) = self.address {
            cfg.system = v;
        }
        cfg
    }
}

impl PortSpec {
    /// The kind word of `link add NAME type KIND`.
    pub fn kind(&self) -> &'static str {
        match self {
            PortSpec::Pcap => "pcap",
            PortSpec::AfPacket { .. } => "afpacket",
            PortSpec::Tap { .. } => "tap",
            PortSpec::Patch { .. } => "patch",
            PortSpec::AfXdp { .. } => "afxdp",
            PortSpec::Vlan { .. } => "vlan",
            PortSpec::Macvlan { .. } => "macvlan",
            PortSpec::Host { .. } => "host",
            PortSpec::Bond(_) => "bond",
            PortSpec::Vxlan(_) => "vxlan",
        }
    }

    /// The TAP the port's backend makes, any kind (a `type tap` port's, a stacked device's, a
    /// host port's): its interface name (`ifname`, else the port's name) and namespace. The
    /// link watch and reopening ask the kernel about this name, never the port's.
    pub fn tap<'a>(&'a self, port: &'a str) -> Option<(&'a str, Option<&'a str>)> {
        match self {
            PortSpec::Tap { ifname, netns } => {
                Some((ifname.as_deref().unwrap_or(port), netns.as_deref()))
            }
            spec => spec.host_tap(port),
        }
    }

    /// The TAP a stacked device or host port shows the host: its name and namespace.
    pub fn host_tap<'a>(&'a self, port: &'a str) -> Option<(&'a str, Option<&'a str>)> {
        match self {
            PortSpec::Vlan { netns, .. } | PortSpec::Macvlan { netns, .. } => {
                Some((port, netns.as_deref()))
            }
            PortSpec::Host { ifname, netns, .. } => {
                Some((ifname.as_deref().unwrap_or(port), netns.as_deref()))
            }
            _ => None,
        }
    }
}

/// Where an AF_XDP port's XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// In the driver (`XDP_FLAGS_DRV_MODE`): veth and drivers with XDP support.
    Native,
    /// After the kernel built its socket buffer (`XDP_FLAGS_SKB_MODE`, generic XDP): any
    /// device, slower.
    Skb,
}

impl XdpAttach {
    pub fn as_str(self) -> &'static str {
        match self {
            XdpAttach::Native => "native",
            XdpAttach::Skb => "skb",
        }
    }
}

/// Options of `link add|set … type bridge`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeOptions {
    pub vlan_filtering: Option<bool>,
    pub vlan_protocol: Option<VlanProtocol>,
    /// 0 = ports join without a PVID.
    pub vlan_default_pvid: Option<u16>,
    /// Given in seconds (decimals allowed) on the command line.
    pub ageing_time_ns: Option<u64>,
    pub fdb_max_learned: Option<u32>,
    pub group_fwd_mask: Option<u16>,
    pub fdb_max_entries: Option<u32>,
    /// qbridge's: learn per (VID, inner C-VID).
    pub learn_inner_vid: Option<bool>,
    /// `stp_state 0|1`: the spanning tree on or off.
    pub stp_state: Option<bool>,
    /// The spanning tree's parameters (kept while `stp_state` is 0 too).
    pub stp: StpBridgeOptions,
}

/// Spanning-tree parameters of `link add|set … type bridge` (802.1D-2004 17.13, 802.1Q
/// 13.26): times in seconds; the ranges are checked when parsed, the timer relation of
/// 17.14 when executed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StpBridgeOptions {
    /// `stp_mode stp|rstp|mstp`.
    pub mode: Option<qbridge_stp::Mode>,
    /// `priority N`: a multiple of 4096 up to 61440.
    pub priority: Option<u16>,
    pub hello_time: Option<u16>,
    pub max_age: Option<u16>,
    pub forward_delay: Option<u16>,
    pub tx_hold_count: Option<u16>,
    pub max_hops: Option<u8>,
    /// `mst_name NAME` (up to 32 bytes).
    pub mst_name: Option<String>,
    pub mst_revision: Option<u16>,
}

impl StpBridgeOptions {
    pub fn is_empty(&self) -> bool {
        *self == StpBridgeOptions::default()
    }
}

/// Spanning-tree options of `link set dev PORT` (bridge-link(8)'s `cost`, `priority`,
/// `guard`, `root_block`; mstpctl's edge, point-to-point, BPDU filter; loop guard).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StpPortOptions {
    /// `cost N|auto`.
    pub cost: Option<qbridge_stp::Cost>,
    /// `priority N`: a multiple of 16 up to 240.
    pub priority: Option<u16>,
    /// `guard on|off`: BPDU guard.
    pub guard: Option<bool>,
    /// `root_block on|off`: root guard.
    pub root_block: Option<bool>,
    pub bpdu_filter: Option<bool>,
    pub loop_guard: Option<bool>,
    /// `edge on|off`: admin edge.
    pub edge: Option<bool>,
    pub auto_edge: Option<bool>,
    /// `p2p yes|no|auto`.
    pub p2p: Option<qbridge_stp::PointToPoint>,
}

impl StpPortOptions {
    pub fn is_empty(&self) -> bool {
        *self == StpPortOptions::default()
    }

    /// `self` with what `o` gives on top.
    pub fn merged(&self, o: &StpPortOptions) -> StpPortOptions {
        StpPortOptions {
            cost: o.cost.or(self.cost),
            priority: o.priority.or(self.priority),
            guard: o.guard.or(self.guard),
            root_block: o.root_block.or(self.root_block),
            bpdu_filter: o.bpdu_filter.or(self.bpdu_filter),
            loop_guard: o.loop_guard.or(self.loop_guard),
            edge: o.edge.or(self.edge),
            auto_edge: o.auto_edge.or(self.auto_edge),
            p2p: o.p2p.or(self.p2p),
        }
    }
}

/// `stp …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StpCommand {
    /// `stp show [dev BR]`
    Show { dev: Option<String> },
    /// `stp msti set dev BR vid V[-V2] msti M` (iproute2: `bridge vlan global set … msti M`):
    /// the region's VID to MSTI table; MSTI 0 is the CIST.
    MstiMap {
        dev: String,
        vids: VidRange,
        msti: u16,
    },
    /// `stp msti priority dev BR msti M priority P`: the bridge's priority in an MSTI.
    MstiPriority {
        dev: String,
        msti: u16,
        priority: u16,
    },
    /// `stp msti port dev PORT msti M [priority P] [cost C|auto]`: a port's priority and
    /// path cost in an MSTI (mstpctl's settreeportprio, settreeportcost); what is not given
    /// stays.
    MstiPort {
        dev: String,
        msti: u16,
        priority: Option<u16>,
        cost: Option<qbridge_stp::Cost>,
    },
}

/// `master BR` or `nomaster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterChange {
    Set(String),
    Unset,
}

/// Options of `link set dev PORT …`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortOptions {
    pub master: Option<MasterChange>,
    pub up: Option<bool>,
    pub learning: Option<bool>,
    pub flood: Option<bool>,
    pub mcast_flood: Option<bool>,
    pub bcast_flood: Option<bool>,
    pub isolated: Option<bool>,
    pub hairpin: Option<bool>,
    pub mtu: Option<u32>,
    /// `Some(None)`: `envhdr len auto`.
    pub envhdr_len: Option<Option<u32>>,
    /// `Some(None)`: `tpid default` (the bridge's `vlan_protocol`).
    pub tpid: Option<Option<Tpid>>,
    pub fdb_max_learned: Option<u32>,
    /// A bridge's host port only (`link set dev BR up ifname IF netns NS address MAC`).
    pub ifname: Option<String>,
    pub netns: Option<String>,
    pub address: Option<MacAddr>,
    /// A bridge's host port only, when `up` creates it: the port id to take.
    pub index: Option<u16>,
    /// `vlan_mode MODE [tag V] [trunks LIST] [cvlans LIST]` (Open vSwitch's port modes).
    pub vlan_mode: Option<VlanModeKind>,
    pub tag: Option<u16>,
    pub trunks: Option<VidList>,
    pub cvlans: Option<VidList>,
    /// `pcp_mode keep|copy|fixed N|map LIST`, `default_pcp N`.
    pub pcp_mode: Option<PcpMode>,
    pub default_pcp: Option<u8>,
    /// `locked on|off`, `mab on|off` (Linux's port security).
    pub locked: Option<bool>,
    pub mab: Option<bool>,
    /// Spanning-tree port options.
    pub stp: StpPortOptions,
}

impl PortOptions {
    /// True when only `master`/`nomaster` (or nothing) was given.
    pub fn only_master(&self) -> bool {
        PortOptions {
            master: None,
            ..self.clone()
        } == PortOptions::default()
    }
}

/// `vlan …` (bridge-vlan(8)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanCommand {
    /// `vlan add vid V[-V2] dev NAME [pvid] [untagged] [self|master]`; `self` with a bridge's
    /// name: its host port.
    Add {
        dev: String,
        vids: VidRange,
        pvid: bool,
        untagged: bool,
        self_: bool,
    },
    /// `vlan del vid V[-V2] dev NAME [self|master]`
    Del {
        dev: String,
        vids: VidRange,
        self_: bool,
    },
    /// `vlan set vid V[-V2] dev NAME pvlan promiscuous|isolated|community N|none [self]`
    /// `… fdb_max_learned N [violation protect|restrict|shutdown]`; `pvlan` and the limit are
    /// each optional, one is required. `pvlan: Some(None)`: `pvlan none`.
    Set {
        dev: String,
        vids: VidRange,
        pvlan: Option<Option<PvlanRole>>,
        limit: Option<(u32, Violation)>,
        self_: bool,
    },
    /// `vlan map add dev NAME vid A translate B`
    MapAdd { dev: String, wire: u16, inside: u16 },
    /// `vlan map del dev NAME vid A`
    MapDel { dev: String, wire: u16 },
    /// `vlan map add dev NAME cvid C[-C2] svid S` (selective Q-in-Q)
    CvidMapAdd {
        dev: String,
        cvids: VidRange,
        svid: u16,
    },
    /// `vlan map del dev NAME cvid C[-C2]`
    CvidMapDel { dev: String, cvids: VidRange },
    /// `vlan map add dev NAME svid S cvid C translate V` (2:1) or `… translate S2 C2` (2:2)
    TagMapAdd {
        dev: String,
        map: qbridge_bridge::TagMap,
    },
    /// `vlan map del dev NAME svid S cvid C`
    TagMapDel { dev: String, svid: u16, cvid: u16 },
    /// `vlan map show [dev NAME]`
    MapShow { dev: Option<String> },
    /// `vlan show [dev NAME] [vid V]`
    Show {
        dev: Option<String>,
        vid: Option<u16>,
    },
    /// `vlan add vid V[-V2] dev NAME tunnel_info id VNI[-VNI2]`: an external VXLAN port's
    /// VLAN ↔ VNI map (docs/semantics.md, "VLAN ↔ VNI").
    TunnelAdd {
        dev: String,
        vids: VidRange,
        vnis: (u32, u32),
    },
    /// `vlan del vid V[-V2] dev NAME tunnel_info [id VNI[-VNI2]]`
    TunnelDel {
        dev: String,
        vids: VidRange,
        vnis: Option<(u32, u32)>,
    },
    /// `vlan tunnelshow [dev NAME]`
    TunnelShow { dev: Option<String> },
}

/// `V` or `V-V2`; both ends in 1-4094. The order of the ends is checked by the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VidRange {
    pub start: u16,
    pub end: u16,
}

/// `fdb …` (bridge-fdb(8)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdbCommand {
    /// `fdb add|replace MAC dev NAME [vlan V] [static|dynamic|permanent] [sticky]
    /// [extern_learn]`. The kind defaults to permanent, as in iproute2.
    Add {
        mac: MacAddr,
        dev: String,
        vlan: Option<u16>,
        /// qbridge's `inner_vlan C` (with `vlan V`): the entry of the pair (V, C).
        inner_vlan: Option<u16>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
        /// `extern_learn` (Linux `NTF_EXT_LEARNED`): a control plane's entry; `kind` and
        /// `sticky` are then ignored, as the kernel ignores them.
        extern_learn: bool,
    },
    /// `fdb del MAC dev NAME [vlan V [inner_vlan C]]` (kind words are accepted and ignored,
    /// as in iproute2).
    Del {
        mac: MacAddr,
        dev: String,
        vlan: Option<u16>,
        inner_vlan: Option<u16>,
        /// vxl88: `self` (bridge-fdb(8)): on a VXLAN port its own entry, static or learned
        /// (decision 88).
        self_: bool,
        /// vxl88: `master`: the bridge's entry only. Neither word on a VXLAN port: both.
        master: bool,
        /// vxl88: `vni N` (`src_vni N`) of a VXLAN port's own entry; `None`: the port's `id`,
        /// or every VNI of an external port.
        vni: Option<u32>,
    },
    /// `fdb show [br BR] [dev NAME] [vlan V]`
    Show {
        br: Option<String>,
        dev: Option<String>,
        vlan: Option<u16>,
    },
    /// `fdb add|append|replace|del MAC dev NAME dst IP` on a VXLAN port: its remote VTEPs
    /// (all-zeros MAC: the flood list).
    Vxlan {
        op: crate::vxlan::VxlanFdbOp,
        mac: MacAddr,
        dev: String,
        /// IPv4 or IPv6, of the port's `local`'s family.
        dst: std::net::IpAddr,
        /// `extern_learn`: a control plane's entry (EVPN), not configuration.
        origin: crate::vxlan::RemoteOrigin,
        /// `vni N` (`src_vni N`): the VNI the entry belongs to; `None`: the port's `id`.
        vni: Option<u32>,
    },
    /// `fdb flush dev NAME [vlan V] [[no]permanent] [[no]static] [[no]dynamic] [[no]sticky]
    /// [[no]added_by_user]`
    Flush {
        dev: String,
        vlan: Option<u16>,
        which: FdbFlushMatch,
        /// vxl88: `self`: a VXLAN port's own entries (learned, static, flood lists) by the
        /// kind words as the kernel's vxlan reads them; with `master` too, both (decision 88).
        self_: bool,
        /// vxl88: `master`: the bridge's entries only.
        master: bool,
        /// vxl88: whether the kind words select permanent entries as a vxlan device reads
        /// them (its static entries and flood lists are permanent; no kind word: all).
        self_permanent: bool,
    },
}

/// Output flags: `-j` JSON, `-s` statistics, `-p` pretty JSON, `-c` compressed VLAN ranges,
/// `-d` details, `-br` brief.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputOptions {
    pub json: bool,
    pub stats: bool,
    pub pretty: bool,
    /// `vlan show` prints runs of VIDs with the same flags as one range (`10-20`).
    pub compress_vlans: bool,
    /// `-d`: details (`link show`: a bond's LACP state per member).
    pub details: bool,
    /// `-br[ief]`, as `ip -br`: `link show` and `vlan show` print one line per link or port
    /// (name, state, master, VLANs as ranges); other show commands ignore it, as ip does.
    pub brief: bool,
}

impl OutputOptions {
    /// Sets the flag named by `opt` (an option word without its dashes); false if `opt` is not
    /// an output option. As bridge/bridge.c `main`, any prefix of `json`, `stats`,
    /// `statistics` and `pretty` names it, and `compressvlans` from `com`; `c` is
    /// `compressvlans` too (iproute2 reads it as `-color`, which qbridge does not have).
    /// `brief` from `br`, as ip/ip.c (`-b` alone is `-batch`, which the caller handles).
    pub fn set(&mut self, opt: &str) -> bool {
        let abbreviates = |word: &str, min: usize| opt.len() >= min && word.starts_with(opt);
        if abbreviates("json", 1) {
            self.json = true;
        } else if abbreviates("stats", 1) || abbreviates("statistics", 1) {
            self.stats = true;
        } else if abbreviates("pretty", 1) {
            self.pretty = true;
        } else if opt == "c" || abbreviates("compressvlans", 3) {
            self.compress_vlans = true;
        } else if abbreviates("details", 1) {
            self.details = true;
        } else if abbreviates("brief", 2) {
            self.brief = true;
        } else {
            return false;
        }
        true
    }

    /// The options as command-line words (`-j`, `-s`, `-p`, `-c`, `-d`, `-br`), to send to
    /// the daemon.
    pub fn words(&self) -> Vec<String> {
        let flags = [
            (self.json, "-j"),
            (self.stats, "-s"),
            (self.pretty, "-p"),
            (self.compress_vlans, "-c"),
            (self.details, "-d"),
            (self.brief, "-br"),
        ];
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, w)| w.to_string())
            .collect()
    }
}

/// `mirror …` (qbridge's own object; Open vSwitch's mirrors, Cisco's SPAN/RSPAN sessions):
/// `docs/semantics.md` §M.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorCommand {
    /// `mirror add NAME src P1[,P2…] [direction rx|tx|both] [vid LIST] dst PORT|pcap FILE
    /// [rspan VID]`; the direction defaults to `both`.
    Add(qbridge_bridge::MirrorSpec),
    /// `mirror del NAME`
    Del { name: String },
    /// `mirror show [NAME]`
    Show { name: Option<String> },
}
