//! Configuration errors, all in one place: [`ConfigError`] for every configuration operation
//! and [`MirrorError`] for the `mirror` commands (carried inside `ConfigError::Mirror`). Each
//! message names the bad input. Imports nothing of the crate.

use qbridge_wire::MacAddr;

/// Why a configuration operation was refused. The switch is unchanged after any of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("device \"{0}\" does not exist")]
    NoSuchDevice(String),
    #[error("device \"{0}\" already exists")]
    DeviceExists(String),
    #[error("invalid device name \"{0}\" (1 to 15 bytes, no '/', whitespace or ':')")]
    BadName(String),
    #[error("device \"{0}\" is not a bridge")]
    NotABridge(String),
    #[error("device \"{0}\" is a bridge, not a port")]
    NotAPort(String),
    #[error("device \"{0}\" is not attached to a bridge")]
    NoMaster(String),
    #[error("bridge \"{0}\" has spanning tree off (stp_state 0): its ports have no STP state")]
    StpOff(String),
    #[error("device \"{0}\" is a bridge's own port: it has no STP state")]
    StpHostPort(String),
    #[error("vid {0} is reserved")]
    ReservedVid(u16),
    #[error("vid {0} is out of range (1-4094)")]
    VidOutOfRange(u32),
    #[error("range end {end} is below start {start}")]
    BadRange { start: u16, end: u16 },
    #[error("pvid can only be set for a single vid, not a range")]
    PvidRange,
    #[error("vid {vid} is not configured on device \"{dev}\"")]
    VlanNotConfigured { dev: String, vid: u16 },
    #[error("mtu {0} is out of range (68-65535)")]
    BadMtu(u32),
    #[error("envhdr len {0} is out of range (0-482: envelope frames are at most 2000 bytes)")]
    BadEnvhdr(u32),
    #[error("tpid 0x{0:04x} cannot be used: it is an EtherType of a network protocol")]
    BadTpid(u16),
    #[error("group_fwd_mask 0x{0:04x} is invalid: bits 0-2 (STP, MAC pause, LACP) cannot be set")]
    RestrictedGroupFwdMask(u16),
    #[error("ageing_time {0} is out of range (0 or 1-1000000 seconds)")]
    BadAgeingTime(String),
    #[error("invalid MAC address {0}: multicast and all-zero addresses cannot be FDB entries")]
    BadFdbMac(MacAddr),
    #[error("FDB entry {mac} vlan {vid} does not exist on device \"{dev}\"")]
    NoSuchFdbEntry { mac: MacAddr, vid: u16, dev: String },
    #[error("FDB entry {mac} vlan {vid} exists on device \"{dev}\"")]
    FdbEntryExists { mac: MacAddr, vid: u16, dev: String },
    #[error("FDB entry {mac} vlan {vid} inner_vlan {inner} does not exist on device \"{dev}\"")]
    NoSuchInnerFdbEntry {
        mac: MacAddr,
        vid: u16,
        inner: u16,
        dev: String,
    },
    #[error("FDB entry {mac} vlan {vid} inner_vlan {inner} exists on device \"{dev}\"")]
    InnerFdbEntryExists {
        mac: MacAddr,
        vid: u16,
        inner: u16,
        dev: String,
    },
    #[error("inner_vlan needs learn_inner_vid on (and vlan_filtering 1) on bridge \"{0}\"")]
    InnerVlanOff(String),
    #[error("bridge \"{0}\" has numbered all the (VID, inner VID) pairs it can (28672)")]
    InnerFidsFull(String),
    #[error("FDB is full ({0} entries)")]
    FdbFull(usize),
    #[error("fdb_max_entries {0} is out of range (1-16777216)")]
    BadFdbMaxEntries(u32),
    #[error("too many ports (limit {0})")]
    TooManyPorts(usize),
    #[error("{0}")]
    BadVlanMode(String),
    #[error("PCP {0} is out of range (0-7)")]
    BadPcp(u8),
    #[error("{0}")]
    VlanMapConflict(String),
    #[error("fdb_max_learned {0} is out of range (0-16777215)")]
    BadVlanLimit(u32),
    #[error("no vlan map of vid {vid} on {dev}")]
    NoVlanMap { dev: String, vid: u16 },
    #[error("no vlan map of svid {svid} cvid {cvid} on {dev}")]
    NoTagMap { dev: String, svid: u16, cvid: u16 },
    #[error("mab needs a locked port (locked on), as in Linux")]
    MabNeedsLocked,
    #[error("mab needs learning on (it learns locked entries), as in Linux")]
    MabNeedsLearning,
    #[error("index {index} is out of range (0-{max})")]
    BadPortIndex { index: u16, max: usize },
    #[error("index {index} is taken by \"{dev}\"")]
    PortIndexBusy { index: u16, dev: String },
    #[error("\"{0}\" is its bridge's own interface: it cannot join another bridge")]
    HostPortMaster(String),
    #[error("\"{dev}\" is stacked on bridge \"{bridge}\"'s own interface: it cannot be a port of {bridge} (a loop; Linux refuses it too)")]
    StackedOnOwnBridge { dev: String, bridge: String },
    #[error("device \"{0}\" is busy: a macvlan's lower device cannot be a bridge port, nor a bridge port carry macvlans (as on Linux)")]
    MacvlanLowerBusy(String),
    #[error("device \"{0}\" is busy: a passthru macvlan takes its lower device whole, alone")]
    PassthruBusy(String),
    #[error("address {mac} is in use by macvlan \"{dev}\" on the same lower device")]
    MacvlanAddressInUse { mac: MacAddr, dev: String },
    #[error("invalid MAC address {0}: a device address must be unicast and not all-zero")]
    BadDeviceMac(MacAddr),
    #[error("too many stacked devices on \"{dev}\" (at most {max})")]
    StackTooDeep { dev: String, max: usize },
    #[error("VLAN {vid} (protocol 0x{tpid:04x}) already exists on \"{lower}\" as \"{dev}\"")]
    VlanDeviceExists {
        lower: String,
        tpid: u16,
        vid: u16,
        dev: String,
    },
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

/// Why a `mirror` command was refused. Each message names the session and the bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    #[error("invalid mirror name \"{0}\" (1 to 32 letters, digits, '_', '-' or '.', not starting with '-')")]
    BadName(String),
    #[error("mirror \"{0}\" already exists")]
    Exists(String),
    #[error("mirror \"{0}\" does not exist")]
    NoSuchMirror(String),
    #[error("too many mirrors (limit {0})")]
    TooMany(usize),
    #[error("mirror \"{0}\" needs at least one source port")]
    NoSource(String),
    #[error("mirror \"{name}\": source \"{port}\" is given twice")]
    DuplicateSource { name: String, port: String },
    #[error("mirror \"{name}\": \"{port}\" is a {what}: only ports with a wire of their own (afpacket, afxdp, tap, patch, pcap) can be mirrored or be a mirror's destination")]
    NotADevice {
        name: String,
        port: String,
        what: &'static str,
    },
    #[error("mirror \"{name}\": destination \"{port}\" is also a source (a mirror never sends to a port it watches)")]
    DstIsSource { name: String, port: String },
    #[error("mirror \"{name}\": invalid pcap file \"{file}\" (a plain file name in the pcap directory: no '/', not starting with '.', at most 255 bytes, not NAME.in.pcap)")]
    BadPcapFile { name: String, file: String },
    #[error("mirror \"{name}\": pcap file \"{file}\" is written by mirror \"{other}\"")]
    PcapFileBusy {
        name: String,
        file: String,
        other: String,
    },
    #[error(
        "mirror \"{0}\": rspan needs a destination port (a pcap file gets the copies as they are)"
    )]
    RspanToPcap(String),
}
