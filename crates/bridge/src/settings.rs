//! What can be configured, as plain values: per-bridge and per-port settings with the Linux
//! bridge's defaults, a port's role (device, host port, VLAN device, macvlan endpoint), and the
//! spec of a mirror session. A leaf of the crate (it imports nothing of it except the VID
//! list type): the configuration room (`crate::config`, which re-exports it) validates and
//! applies these values; the plan (`crate::plan`) keeps them in its records.

use crate::vlanmode::VidList;
use qbridge_wire::Tpid;
use serde::Serialize;

/// Which tag a bridge switches on: `vlan_protocol 802.1Q` (C-VLAN bridge, TPID 0x8100) or
/// `802.1ad` (provider bridge, S-tag TPID 0x88a8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum VlanProtocol {
    #[default]
    #[serde(rename = "802.1Q")]
    Dot1Q,
    #[serde(rename = "802.1ad")]
    Dot1Ad,
}

impl VlanProtocol {
    pub const fn tpid(self) -> Tpid {
        match self {
            VlanProtocol::Dot1Q => Tpid::DOT1Q,
            VlanProtocol::Dot1Ad => Tpid::DOT1AD,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            VlanProtocol::Dot1Q => "802.1Q",
            VlanProtocol::Dot1Ad => "802.1ad",
        }
    }
}

/// Link-local groups an 802.1ad bridge always forwards (Linux `BR_GROUPFWD_8021AD`): the
/// customer's STP (00), and 0B, 0C, 0D, 0F. Its own group is 01-80-C2-00-00-08.
pub const GROUP_FWD_8021AD: u16 = 0xb801;
/// Bits of `group_fwd_mask` that cannot be set (Linux `BR_GROUPFWD_RESTRICTED`: STP, MAC pause,
/// LACP).
pub const GROUP_FWD_RESTRICTED: u16 = 0x0007;

/// One bridge's settings (`ip link add NAME type bridge …`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BridgeSettings {
    /// 0: VLAN-unaware (tags are payload, one FDB). 1: 802.1Q filtering.
    pub vlan_filtering: bool,
    pub vlan_protocol: VlanProtocol,
    /// PVID (untagged) a port gets when it joins; 0 = none.
    pub default_pvid: u16,
    /// Dynamic FDB entries idle this long are removed. 0: every dynamic entry expires at once —
    /// nothing is learned, dynamic entries are not used, the bridge floods like a hub (Linux).
    pub ageing_time_ns: u64,
    /// Most dynamically learned FDB entries in the bridge; 0 = no limit.
    pub fdb_max_learned: u32,
    /// Link-local groups 01-80-C2-00-00-0X forwarded, bit X.
    pub group_fwd_mask: u16,
    /// Size of the FDB (all kinds of entries). A full table evicts the oldest learned entry of
    /// the port holding most learned entries (Open vSwitch's fair eviction). qbridge extension.
    pub fdb_max_entries: u32,
    /// Learn per (VID, inner C-VID) on a VLAN-filtering bridge: the FDB key includes the VID
    /// of the C-tag behind the bridge tag (`docs/semantics.md` §K7). qbridge extension.
    pub learn_inner_vid: bool,
    /// Spanning tree on (`stp_state 1`): each port's per-VID [`StpState`] applies to its
    /// frames, and 01-80-C2-00-00-00 is for the bridge itself. Off: every port forwards.
    pub stp: bool,
}

/// Default and largest `fdb_max_entries`.
pub const FDB_DEFAULT_MAX_ENTRIES: u32 = 1 << 21;
pub const FDB_LIMIT_MAX_ENTRIES: u32 = 1 << 24;

impl Default for BridgeSettings {
    fn default() -> Self {
        BridgeSettings {
            vlan_filtering: false,
            vlan_protocol: VlanProtocol::Dot1Q,
            default_pvid: 1,
            ageing_time_ns: 300 * 1_000_000_000,
            fdb_max_learned: 0,
            group_fwd_mask: 0,
            fdb_max_entries: FDB_DEFAULT_MAX_ENTRIES,
            learn_inner_vid: false,
            stp: false,
        }
    }
}

/// A bridge port's spanning-tree state in one VLAN (802.1Q 8.6.1/8.6.2, per MSTI; Linux's
/// blocking and listening are `Discarding`). Applies only while the port's bridge has
/// [`BridgeSettings::stp`] on (`docs/semantics.md` §STP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StpState {
    /// Receives nothing but link-local frames for the bridge, sends nothing, learns nothing.
    Discarding,
    /// Learns the sources of what it receives, then drops it; sends nothing.
    Learning,
    Forwarding,
}

impl StpState {
    pub fn as_str(self) -> &'static str {
        match self {
            StpState::Discarding => "discarding",
            StpState::Learning => "learning",
            StpState::Forwarding => "forwarding",
        }
    }
}

/// How a port sets the priority (PCP) and drop eligibility (DEI) of frames that enter it
/// untagged to the bridge, i.e. the tag pushed on them (`pcp_mode`, `docs/semantics.md` §H).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PcpMode {
    /// PCP `default_pcp`, DEI 0: nothing read from the frame (Linux's behaviour, with 0).
    #[default]
    Keep,
    /// PCP and DEI of the frame's own outer tag, if it has one; else `default_pcp`, DEI 0.
    Copy,
    /// Always this PCP, DEI 0.
    Fixed(u8),
    /// The outer tag's PCP through this table (DEI copied); untagged: `default_pcp`, DEI 0.
    Map([u8; 8]),
}

impl std::fmt::Display for PcpMode {
    /// The words of `pcp_mode …`: `keep`, `copy`, `fixed 5`, `map 0:1,5:5` (only the entries
    /// that are not the identity; `map` alone is the identity).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcpMode::Keep => f.write_str("keep"),
            PcpMode::Copy => f.write_str("copy"),
            PcpMode::Fixed(n) => write!(f, "fixed {n}"),
            PcpMode::Map(m) => {
                let pairs: Vec<String> = (0..8u8)
                    .filter(|&i| m[i as usize] != i)
                    .map(|i| format!("{i}:{}", m[i as usize]))
                    .collect();
                if pairs.is_empty() {
                    f.write_str("map 0:0")
                } else {
                    write!(f, "map {}", pairs.join(","))
                }
            }
        }
    }
}

impl Serialize for PcpMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One port's settings (`ip link set dev NAME …`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortSettings {
    pub learning: bool,
    /// Flood unknown unicast to this port.
    pub flood: bool,
    pub mcast_flood: bool,
    pub bcast_flood: bool,
    /// An isolated port never sends to another isolated port.
    pub isolated: bool,
    /// A hairpin port may send a frame back out of the port it came in on.
    pub hairpin: bool,
    /// L3 MTU; frames up to 14 + mtu + envhdr bytes (without FCS) pass.
    pub mtu: u32,
    /// Envelope allowance; `None`: automatic (4 bytes per tag the port's configuration can
    /// carry, see [`PortSettings::effective_envhdr`]).
    pub envhdr_len: Option<u32>,
    /// TPID of this port's bridge tag; `None`: the bridge's `vlan_protocol`.
    #[serde(serialize_with = "ser_tpid")]
    pub tpid: Option<Tpid>,
    /// Most dynamically learned FDB entries on this port; 0 = no limit.
    pub fdb_max_learned: u32,
    /// Administrative and link state; a down port neither receives nor sends.
    pub up: bool,
    /// PCP and DEI of frames entering untagged to the bridge (`pcp_mode`).
    pub pcp_mode: PcpMode,
    /// PCP of frames that carry no tag to read it from (0-7).
    pub default_pcp: u8,
    /// Forwards only frames whose source has an FDB entry on this port (802.1X-style port
    /// security, Linux's `locked`).
    pub locked: bool,
    /// MAC authentication bypass: on a locked port, an unknown source gets a `locked` FDB
    /// entry (shown, not forwarding) for an authoriser to replace with a static one.
    pub mab: bool,
}

impl Default for PortSettings {
    fn default() -> Self {
        PortSettings {
            learning: true,
            flood: true,
            mcast_flood: true,
            bcast_flood: true,
            isolated: false,
            hairpin: false,
            mtu: 1500,
            envhdr_len: None,
            tpid: None,
            fdb_max_learned: 0,
            up: true,
            pcp_mode: PcpMode::Keep,
            default_pcp: 0,
            locked: false,
            mab: false,
        }
    }
}

impl PortSettings {
    /// The envelope allowance in force. Automatic: one tag (4 bytes, the slack every Linux NIC
    /// gives) plus, on an 802.1ad bridge, 4 more when the port carries any tagged VLAN — a
    /// customer's C-tagged 1500-byte packet with an S-tag outside (1522 bytes) passes.
    pub fn effective_envhdr(&self, protocol: VlanProtocol, has_tagged_vlan: bool) -> u32 {
        match self.envhdr_len {
            Some(v) => v,
            None => {
                let provider = protocol == VlanProtocol::Dot1Ad && has_tagged_vlan;
                4 + if provider { 4 } else { 0 }
            }
        }
    }
}

/// Largest envelope frame (IEEE 802.3as), without FCS: 2000 - 4.
pub const MAX_ENVELOPE_FRAME: u32 = 1996;

fn ser_tpid<S: serde::Serializer>(t: &Option<Tpid>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.collect_str(t),
        None => s.serialize_none(),
    }
}

/// Most devices stacked on one another above a device (`eth0.1.2.3.4.5.6.7.8`).
pub const MAX_STACK_DEPTH: usize = 8;

/// A macvlan endpoint's mode (ip-link(8) `type macvlan mode …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MacvlanMode {
    /// No frame passes between endpoints of one lower port, not even through a hairpin of the
    /// external switch.
    Private,
    /// Everything goes out of the lower port; endpoints reach each other only through the
    /// external switch (which must hairpin, 802.1Qbg VEPA).
    Vepa,
    /// Endpoints in bridge mode reach each other directly (their addresses are static: no
    /// learning); everything else goes out of the lower port.
    Bridge,
    /// One endpoint takes the lower port whole: every frame, any address, any VLAN.
    Passthru,
}

impl MacvlanMode {
    pub fn as_str(self) -> &'static str {
        match self {
            MacvlanMode::Private => "private",
            MacvlanMode::Vepa => "vepa",
            MacvlanMode::Bridge => "bridge",
            MacvlanMode::Passthru => "passthru",
        }
    }
}

/// What a port is (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A device of its own (AF_PACKET, AF_XDP, a VM's TAP, a patch link, pcap).
    Device,
    /// The host's interface of bridge `bridge` (`br0`), a port of that bridge.
    Host { bridge: u16 },
    /// A VLAN sub-interface of port `lower`: tag `tpid`/`vid`.
    Vlan { lower: u16, tpid: u16, vid: u16 },
    /// A macvlan endpoint on port `lower`.
    Macvlan { lower: u16, mode: MacvlanMode },
}

impl Role {
    /// The lower port of a stacked device.
    pub fn lower(self) -> Option<u16> {
        match self {
            Role::Vlan { lower, .. } | Role::Macvlan { lower, .. } => Some(lower),
            Role::Device | Role::Host { .. } => None,
        }
    }
}

/// Most sessions in one switch: one bit each in the per-port masks (Open vSwitch's
/// `MAX_MIRRORS` is 32 too).
pub const MAX_MIRRORS: usize = 32;

/// Longest session name.
pub const MAX_MIRROR_NAME: usize = 32;

/// Longest pcap file name of a `dst pcap FILE` (a file name, not a path: NAME_MAX).
pub const MAX_PCAP_FILE: usize = 255;

/// Which frames of its source ports a session copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MirrorDirection {
    /// What the sources receive (as received, before any rewrite).
    Rx,
    /// What the sources send (as sent, after the egress rewrite).
    Tx,
    Both,
}

impl MirrorDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorDirection::Rx => "rx",
            MirrorDirection::Tx => "tx",
            MirrorDirection::Both => "both",
        }
    }

    pub fn rx(self) -> bool {
        self != MirrorDirection::Tx
    }

    pub fn tx(self) -> bool {
        self != MirrorDirection::Rx
    }
}

/// Where a session's copies go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorDst {
    /// A port of the switch (a device: AF_PACKET, TAP, AF_XDP, patch, pcap port).
    Port(String),
    /// A pcap file: a plain file name, written in the daemon's `--pcap-dir` (in `qbridge
    /// replay`, the `--out` directory). Never a path.
    Pcap(String),
}

/// A session as configured (`mirror add …`), names and all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorSpec {
    pub name: String,
    /// Source ports, in the order given.
    pub src: Vec<String>,
    pub direction: MirrorDirection,
    /// Only frames in these VLANs (see `path::mirror::frame_vlan`); `None`: every frame.
    pub vids: Option<VidList>,
    pub dst: MirrorDst,
    /// Push a tag with this VID (the destination port's bridge TPID, PCP 0) on every copy.
    pub rspan: Option<u16>,
}

/// Whether `file` is a plain file name the daemon may create in its pcap directory: no path
/// separator, no NUL, not hidden (so neither `.` nor `..`), at most [`MAX_PCAP_FILE`] bytes,
/// and not the input file of a pcap port (`NAME.in.pcap`, which the daemon reads).
pub fn valid_pcap_file(file: &str) -> bool {
    !file.is_empty()
        && file.len() <= MAX_PCAP_FILE
        && !file.starts_with('.')
        && !file.contains(['/', '\0', '\\'])
        && !file.chars().any(char::is_control)
        && !file.ends_with(".in.pcap")
}
