//! The layouts the program and the loader share, mirrored from `bpf/fastpath.h` (sizes
//! asserted at compile time; a change on one side without the other fails the build).
#![allow(unsafe_code)]

/// Ports the program knows (its `qb_ports` map's size).
pub const MAX_PORTS: u32 = 4096;
/// Per-VLAN counter slots.
pub const MAX_VLAN_SLOTS: u32 = 16384;
/// Tags the program parses and edits.
pub const MAX_TAGS: usize = 2;

/// Why a frame went up (`enum qb_miss`), in the order of the program's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Miss {
    NoPort = 0,
    Malformed,
    Tags,
    Group,
    NoFlow,
    Stale,
    Src,
    Dst,
    Size,
    Action,
}

impl Miss {
    pub const ALL: [Miss; 10] = [
        Miss::NoPort,
        Miss::Malformed,
        Miss::Tags,
        Miss::Group,
        Miss::NoFlow,
        Miss::Stale,
        Miss::Src,
        Miss::Dst,
        Miss::Size,
        Miss::Action,
    ];

    /// The counter's name (`link show -d`, metrics).
    pub fn name(self) -> &'static str {
        match self {
            Miss::NoPort => "no_port",
            Miss::Malformed => "malformed",
            Miss::Tags => "tags",
            Miss::Group => "group",
            Miss::NoFlow => "no_flow",
            Miss::Stale => "stale",
            Miss::Src => "source",
            Miss::Dst => "destination",
            Miss::Size => "size",
            Miss::Action => "action",
        }
    }

    pub fn from_index(i: u32) -> Option<Miss> {
        Miss::ALL.get(i as usize).copied()
    }
}

/// Index of the hit counter in `qb_verdicts` (after the misses).
pub const HIT_INDEX: u32 = Miss::ALL.len() as u32;

/// `QB_PORT_ENABLED`.
pub const PORT_ENABLED: u32 = 1;

/// `struct qb_port`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Port {
    pub index: u32,
    pub flags: u32,
    /// TPIDs (network order) the port takes as tags besides 0x8100/0x88a8.
    pub extra_tpid_be: [u16; 2],
}

/// `struct qb_flow_key`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct FlowKey {
    pub in_port: u32,
    pub tpid_be: [u16; MAX_TAGS],
    pub tci_be: [u16; MAX_TAGS],
    pub dst: [u8; 6],
    pub ntags: u8,
    pub pad: u8,
    pub ethertype_be: u16,
    pub pad2: u16,
}

/// `struct qb_flow_action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlowAction {
    pub generation: u32,
    pub out_ifindex: u32,
    pub out_port: u32,
    pub dst_version: u32,
    pub fid: u16,
    pub vlan_slot: u16,
    pub min_len: u16,
    pub max_len: u16,
    pub push_n: u8,
    pub pad: [u8; 3],
    pub push_tpid_be: [u16; MAX_TAGS],
    pub push_tci_be: [u16; MAX_TAGS],
}

/// `struct qb_fdb_key`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct FdbKey {
    pub fid: u16,
    pub mac: [u8; 6],
}

/// `struct qb_fdb_entry`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FdbEntry {
    pub port: u32,
    pub version: u32,
    pub last_seen_ns: u64,
}

/// `struct qb_config`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Config {
    pub generation: u32,
    pub upcall_ifindex: u32,
}

/// `struct qb_port_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
}

/// `struct qb_vlan_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct VlanStats {
    pub frames: u64,
    pub bytes: u64,
}

const _: () = {
    assert!(std::mem::size_of::<Port>() == 12);
    assert!(std::mem::size_of::<FlowKey>() == 24);
    assert!(std::mem::size_of::<FlowAction>() == 36);
    assert!(std::mem::size_of::<FdbKey>() == 8);
    assert!(std::mem::size_of::<FdbEntry>() == 16);
    assert!(std::mem::size_of::<Config>() == 8);
    assert!(std::mem::size_of::<PortStats>() == 32);
    assert!(std::mem::size_of::<VlanStats>() == 16);
};

// SAFETY: each type is #[repr(C)], made of integers and integer arrays only, with its padding
// named as fields, so every bit pattern is a valid value and no byte is uninitialised.
unsafe impl aya::Pod for Port {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowAction {}
// SAFETY: as above.
unsafe impl aya::Pod for FdbKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FdbEntry {}
// SAFETY: as above.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for PortStats {}
// SAFETY: as above.
unsafe impl aya::Pod for VlanStats {}
