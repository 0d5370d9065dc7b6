//! Identifiers, priority vectors, timer sets, roles and states (and which BPDUs a port
//! sends, [`SendProtocol`]) shared by the codec, the outputs and the state machines (802.1D-2004 17.2-17.7, 802.1Q-2022 13.9-13.11).
//!
//! Every comparison of spanning-tree information goes through [`PriorityVector`]'s derived
//! `Ord`: "better" is "numerically smaller", component by component, exactly the ordering of
//! 802.1D-2004 17.6. Times are whole seconds (the wire carries 1/256 s; see `bpdu.rs`).

use serde::Serialize;

/// A 48-bit MAC address.
pub type Mac = [u8; 6];

/// Bridge identifier: 16-bit priority field (4-bit priority + 12-bit system id extension,
/// which carries the MSTID for MSTP) then the 48-bit bridge address (802.1D-2004 9.2.5).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct BridgeId(pub u64);

impl BridgeId {
    /// A bridge id from its 16-bit priority field and its address.
    pub fn new(priority: u16, mac: Mac) -> Self {
        let mut v = u64::from(priority) << 48;
        for (i, b) in mac.iter().enumerate() {
            v |= u64::from(*b) << (8 * (5 - i));
        }
        BridgeId(v)
    }
    /// The 16-bit priority field (priority and system id extension).
    pub fn priority(self) -> u16 {
        (self.0 >> 48) as u16
    }
    /// The 48-bit bridge address as an integer.
    pub fn address(self) -> u64 {
        self.0 & 0xffff_ffff_ffff
    }
    /// Big-endian wire bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }
}

impl std::fmt::Debug for BridgeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl std::fmt::Display for BridgeId {
    /// The usual `8000.001122334455` form.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04x}.{:012x}", self.priority(), self.address())
    }
}

/// Port identifier: 4-bit priority (in the top nibble) and 12-bit port number (9.2.7).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct PortId(pub u16);

impl PortId {
    /// A port id from a port priority (0..=240, multiple of 16) and a port number (1..=4095).
    pub fn new(priority: u8, number: u16) -> Self {
        PortId((u16::from(priority & 0xf0) << 8) | (number & 0x0fff))
    }
    /// The port number component.
    pub fn number(self) -> u16 {
        self.0 & 0x0fff
    }
}

impl std::fmt::Debug for PortId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04x}", self.0)
    }
}

/// A spanning-tree priority vector (17.6, and 802.1Q 13.9's CIST vector): root bridge,
/// (external) root path cost, regional root, internal root path cost, designated bridge,
/// designated port, and the port on which it was received (or this port, for designated
/// vectors). Smaller is better. Outside MSTP the regional root is the designated bridge
/// and the internal cost 0, which orders exactly as 802.1D's five-component vector; an
/// MSTI vector uses `root` for the regional root and `root_path_cost` for the internal
/// cost, with the two regional fields left zero.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default, Serialize)]
pub struct PriorityVector {
    /// Root bridge identifier (MSTI: regional root).
    pub root: BridgeId,
    /// Root path cost (CIST: external root path cost; MSTI: internal root path cost).
    pub root_path_cost: u32,
    /// CIST regional root identifier.
    pub regional_root: BridgeId,
    /// CIST internal root path cost.
    pub internal_cost: u32,
    /// Designated bridge identifier.
    pub designated_bridge: BridgeId,
    /// Designated port identifier.
    pub designated_port: PortId,
    /// Receiving (or own) port identifier: the last tie-breaker.
    pub bridge_port: PortId,
}

impl PriorityVector {
    /// Every component but the receiving port: what a BPDU carries.
    fn key4(&self) -> (BridgeId, u32, BridgeId, u32, BridgeId, PortId) {
        (
            self.root,
            self.root_path_cost,
            self.regional_root,
            self.internal_cost,
            self.designated_bridge,
            self.designated_port,
        )
    }
    /// Strictly better on the transmitted components.
    pub fn better4(&self, other: &Self) -> bool {
        self.key4() < other.key4()
    }
    /// Same on the transmitted components.
    pub fn same4(&self, other: &Self) -> bool {
        self.key4() == other.key4()
    }
    /// "Superior" of 17.6: better, or sent by the same designated bridge address and port
    /// number (that port's newer information replaces its older, even if worse).
    pub fn superior_to(&self, other: &Self) -> bool {
        self.better4(other)
            || (self.designated_bridge.address() == other.designated_bridge.address()
                && self.designated_port.number() == other.designated_port.number()
                && !self.same4(other))
    }
}

/// The four timer parameters carried with spanning-tree information (17.19.22), seconds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize)]
pub struct Times {
    /// Message Age.
    pub message_age: u16,
    /// Max Age.
    pub max_age: u16,
    /// Hello Time.
    pub hello_time: u16,
    /// Forward Delay.
    pub forward_delay: u16,
}

/// A port's role (17.7).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortRole {
    /// Not taking part (port down or administratively disabled).
    Disabled,
    /// The port towards the root bridge.
    Root,
    /// The port that forwards for its LAN.
    Designated,
    /// An alternate path to the root (blocked).
    Alternate,
    /// A backup for a designated port of this bridge on the same LAN (blocked).
    Backup,
    /// MSTP: the port that connects an MSTI's region to the CIST root.
    Master,
}

/// A port's forwarding state (17.4), per tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortState {
    /// Neither learns nor forwards.
    Discarding,
    /// Learns source addresses, does not forward.
    Learning,
    /// Learns and forwards.
    Forwarding,
}

/// Which spanning tree: 0 is the CIST (the only tree of RSTP/STP), 1..=4094 an MSTI.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize)]
pub struct TreeId(pub u16);

impl TreeId {
    /// The Common and Internal Spanning Tree.
    pub const CIST: TreeId = TreeId(0);
}

/// Port path cost recommended by 802.1D-2004 table 17-3 for a link speed in Mb/s
/// (20 000 000 / speed, clamped to 1..=200 000 000); 0 Mb/s (unknown) gives the 100 Mb/s
/// value.
pub fn auto_path_cost(speed_mbps: u32) -> u32 {
    if speed_mbps == 0 {
        return 200_000;
    }
    (20_000_000 / speed_mbps).clamp(1, 200_000_000)
}

/// Which BPDUs a port sends (after Port Protocol Migration).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProtocol {
    /// Configuration and TCN BPDUs.
    Stp,
    /// RST (or MST) BPDUs.
    Rstp,
}
