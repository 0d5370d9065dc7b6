//! The layouts the program and the loader share, mirrored from `bpf/fastpath.h` (sizes
//! asserted at compile time; a change on one side without the other fails the build).
#![allow(unsafe_code)]

/// Ports the program knows (its `qb_ports` map's size).
pub const MAX_PORTS: u32 = 4096;
/// Per-VLAN counter slots: bridge index (below [`MAX_BRIDGES`]) << 12 | VID.
pub const MAX_VLAN_SLOTS: u32 = 65536;
/// Bridges whose ports the fast path serves (their index fits the VLAN slot).
pub const MAX_BRIDGES: u16 = 16;
/// The port id's bits of [`Port::index`]; the 4 above are its opening's generation.
pub const PORT_ID_MASK: u32 = 0xfff;
/// Tags the program parses and edits.
pub const MAX_TAGS: usize = 2;
/// Slots of `qb_fdb_slots`, the dense copies of the FDB map's entries (slot 0: none).
pub const MAX_FDB_SLOTS: u32 = 65536;
/// `QB_SLOT_FREE`: the port of a slot whose entry was removed.
pub const SLOT_FREE: u32 = u32::MAX;
/// Flows `qb_flows` holds (`QB_MAX_FLOWS`; an LRU hash: past it, inserts evict).
pub const MAX_FLOWS: u32 = 65536;
/// Copies in the flow index per CPU (`QB_FLOW_IX_SIZE`, decision 79).
pub const FLOW_IX_SIZE: u32 = 8192;
/// Tags naming them per CPU (`QB_FLOW_IX_TAGS`): four a VID, then as many placed by a hash of
/// the key for the flows of a VID past its four (decision 93).
pub const FLOW_IX_TAGS: u32 = 32768;

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
    Local,
    /// To a bond: no member distributes for the frame's hash bucket, the bond is not in
    /// `qb_bonds`, or a frame whose hash the program leaves to the pipeline (decision 74).
    Bond,
    /// To a VXLAN tunnel: no route or resolved neighbour for the remote VTEP, too long for
    /// the path, or a frame whose outer source port the program leaves to the pipeline
    /// (decision 73).
    Vxlan,
    /// `QB_MISS_ORDER`: a frame of a flow (to an IPv6 tunnel) whose earlier frame went up for
    /// a reason of its own less than the order window before: up behind it, not overtaking it
    /// (decision 91).
    Order,
}

impl Miss {
    pub const ALL: [Miss; 14] = [
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
        Miss::Local,
        Miss::Bond,
        Miss::Vxlan,
        Miss::Order,
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
            Miss::Local => "local",
            Miss::Bond => "bond",
            Miss::Vxlan => "vxlan",
            Miss::Order => "order",
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
/// `QB_PORT_EGRESS`: the program runs on the interface's egress (a TAP port); a miss goes on
/// to the TAP's reader.
pub const PORT_EGRESS: u32 = 2;
/// `QB_PORT_TRACE`: `trace live` watches the port; a hit's frame is also copied, as
/// received, to [`Config::trace_ifindex`] with the port index in its accelerated tag.
pub const PORT_TRACE: u32 = 4;

/// `QB_PORT_BOND_MEMBER`: the interface is a bond's member; [`Port::index`] is the bond's
/// (decision 74).
pub const PORT_BOND_MEMBER: u32 = 0x40;
/// `QB_PORT_COLLECTING`: the member collects (its frames are the bond's; else dropped).
pub const PORT_COLLECTING: u32 = 0x80;
/// `QB_PORT_MEMBER_SHIFT`: the member's position in its bond, in [`Port::flags`] (4 bits),
/// and the bond's [`Bond::slot`] above it (8 bits).
pub const PORT_MEMBER_SHIFT: u32 = 16;
/// `QB_ACT_BOND`: the egress port is a bond; the program picks its member by the pipeline's
/// transmit hash from the bond's entry in `qb_bonds`.
pub const ACT_BOND: u8 = 0x40;
/// `QB_MAX_BONDS`: entries of `qb_bonds`.
pub const MAX_BONDS: u32 = 256;
/// `QB_BOND_BUCKETS`: a bond's transmit table (`qbridge_lacp::BUCKETS`).
pub const BOND_BUCKETS: usize = 256;
/// `QB_BOND_MEMBERS`: member positions counted in `qb_member_stats` per bond.
pub const BOND_MEMBERS: u32 = 16;

/// `enum qb_bond_hash`: a bond's transmit hash policy, as the program knows it.
pub const HASH_L2: u32 = 0;
pub const HASH_L2_VLAN: u32 = 1;
pub const HASH_L34: u32 = 2;
pub const HASH_INNER_L34: u32 = 3;

/// `struct qb_bond`: a bond's transmit table as the program reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Bond {
    /// [`HASH_L2`] ..= [`HASH_INNER_L34`].
    pub policy: u32,
    /// Below [`MAX_BONDS`]: its members' counters are `slot << 4 | position` in
    /// `qb_member_stats` (and a member's [`Port::flags`] carry it above the position).
    pub slot: u32,
    /// The member's interface by hash bucket (0: no member).
    pub member_ifindex: [u32; BOND_BUCKETS],
    /// That member's position in the bond (its counters in `qb_member_stats`).
    pub member_pos: [u8; BOND_BUCKETS],
}

impl Default for Bond {
    fn default() -> Bond {
        Bond {
            policy: HASH_L2,
            slot: 0,
            member_ifindex: [0; BOND_BUCKETS],
            member_pos: [0; BOND_BUCKETS],
        }
    }
}

/// `struct qb_member_stats`: a bond member's frames through the program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MemberStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Dropped: received while the member did not collect.
    pub rx_not_collecting: u64,
}

/// `struct qb_port`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Port {
    /// Port id (low 12 bits) and its opening's generation (4 bits above).
    pub index: u32,
    pub flags: u32,
    /// TPIDs (network order) the port takes as tags besides 0x8100/0x88a8.
    pub extra_tpid_be: [u16; 2],
    /// The interface's own address: frames to it and group frames reach the host's stack
    /// too (a copy goes up).
    pub mac: [u8; 6],
    pub pad: u16,
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

/// `QB_MAX_HOPS`: most bridges one flow crosses (its ingress port's and those behind patch
/// links).
pub const MAX_HOPS: usize = 4;

/// `QB_HOP_LEARNING`: the hop's ingress port learns; a hit needs the source learned on it.
pub const HOP_LEARNING: u8 = 1;

/// `QB_HOP_SRC`: the hop's ingress port is locked (decision 75); a hit needs the source's
/// entry on it, refreshed only when [`HOP_LEARNING`] is set too.
pub const HOP_SRC: u8 = 2;

/// `struct qb_hop`: one bridge a flow crosses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Hop {
    /// The ports' indexes (counters: the low 12 bits; the FDB map's port).
    pub in_port: u32,
    pub out_port: u32,
    /// The destination's FDB entry version when made: its low 16 bits (the program compares
    /// those with the entry's). The high 16 bits are the program's (`dst_slot`: where it last
    /// found the entry in `qb_fdb_slots`); the loader writes them 0 and reads them as 0.
    pub dst_version: u32,
    /// The bridge's index (the FDB map's key).
    pub bridge: u16,
    /// The FDB id the frame was classified into.
    pub fid: u16,
    /// Per-VLAN counters' index.
    pub vlan_slot: u16,
    /// The priority the pipeline counted the frame under in the ingress port's `rx_pcp`
    /// (8: none, a bridge that does not filter VLANs).
    pub rx_pcp: u8,
    /// [`HOP_LEARNING`], [`HOP_SRC`].
    pub flags: u8,
    /// Tags the frame has entering the bridge and leaving it (its lengths there).
    pub in_tags: u8,
    pub out_tags: u8,
    /// The program's (`src_slot`: where it last found the source's entry in
    /// `qb_fdb_slots`); the loader writes it 0 and reads it as 0.
    pub pad: u16,
}

/// `QB_ACT_PEER`: redirect to the egress interface's peer (`bpf_redirect_peer`).
pub const ACT_PEER: u8 = 1;
/// `QB_ACT_INGRESS`: deliver into the egress interface's receive (a TAP port's host side).
pub const ACT_INGRESS: u8 = 2;

/// `struct qb_flow_action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlowAction {
    pub generation: u32,
    pub out_ifindex: u32,
    /// Shortest frame (as received) the pipeline forwards alike.
    pub min_len: u16,
    /// Longest frame (no FCS, as sent) every port on the way takes.
    pub max_len: u16,
    pub push_n: u8,
    /// Hops used, 1 ..= [`MAX_HOPS`].
    pub n_hops: u8,
    /// [`ACT_PEER`], [`ACT_INGRESS`].
    pub flags: u8,
    pub pad: u8,
    pub push_tpid_be: [u16; MAX_TAGS],
    pub push_tci_be: [u16; MAX_TAGS],
    pub hops: [Hop; MAX_HOPS],
}

impl FlowAction {
    /// The hops used.
    pub fn hops(&self) -> &[Hop] {
        &self.hops[..(self.n_hops as usize).min(MAX_HOPS)]
    }

    /// The egress port's index (the last hop's).
    pub fn out_port(&self) -> u32 {
        self.hops().last().map_or(0, |h| h.out_port)
    }
}

/// `struct qb_flow_ix`: a flow the program copied into its flow index (decision 79), valid
/// while `epoch` is `qb_flow_epoch`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlowIx {
    pub epoch: u64,
    pub key: FlowKey,
    pub action: FlowAction,
}

/// `struct qb_fdb_key`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct FdbKey {
    pub bridge: u16,
    pub fid: u16,
    pub mac: [u8; 6],
    pub pad: u16,
}

/// `struct qb_fdb_entry`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FdbEntry {
    pub port: u32,
    /// The entry's version: its low 16 bits (a flow's hop names the version it expects). In
    /// the map the high 16 bits are the entry's slot in `qb_fdb_slots` (`slot`), which the
    /// loader sets and hides ([`crate::MapWriter::set_fdb`], [`crate::MapWriter::fdb`]).
    pub version: u32,
    pub last_seen_ns: u64,
}

/// `struct qb_fdb_slot`: an FDB map entry's dense copy, with its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FdbSlot {
    pub mac: [u8; 6],
    pub bridge: u16,
    pub fid: u16,
    pub version: u16,
    /// [`SLOT_FREE`] once the entry was removed.
    pub port: u32,
    pub last_seen_ns: u64,
}

/// `struct qb_config`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Config {
    pub generation: u32,
    pub upcall_ifindex: u32,
    /// Hits of [`PORT_TRACE`] ports are copied to this device's ingress (0: none).
    pub trace_ifindex: u32,
}

/// `struct qb_owner`: the daemon that loaded the program and until when it is alive
/// ([`crate::FastPath::lease`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Owner {
    /// CLOCK_MONOTONIC nanoseconds; past it the program claims no frame.
    pub deadline_ns: u64,
    /// The inode of the owner's `/proc/self/ns/net`.
    pub netns_ino: u64,
    pub upcall_ifindex: u32,
    pub pad: u32,
}

/// `QB_ACT_VXLAN`: the egress port is a VXLAN port; [`FlowAction::out_ifindex`] is the
/// index of the tunnel in `qb_vxlan` (decision 73).
pub const ACT_VXLAN: u8 = 0x20;
/// `QB_MAX_TUNNELS`: entries of `qb_vxlan`.
pub const MAX_TUNNELS: u32 = 4096;
/// `QB_VXLAN_SOCKETS`: the userspace VTEP's send sockets (`qbridge_io::vxlan::TX_SOCKETS`).
pub const VXLAN_SOCKETS: usize = 8;
/// `QB_VX_INHERIT_TOS`: `tos inherit`.
pub const VX_INHERIT_TOS: u8 = 1;
/// `QB_VX_IPV6`: an IPv6 underlay (decision 78): [`Vxlan::local6`], [`Vxlan::remote6`] and
/// [`Vxlan::flow_label`] are the outer header's, [`Vxlan::local`] and [`Vxlan::remote`] unused.
pub const VX_IPV6: u8 = 2;

/// `struct qb_vxlan`: a tunnel as the program encapsulates to it — IPv4 addresses and ports
/// in network order (as their bytes on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Vxlan {
    pub local: [u8; 4],
    pub remote: [u8; 4],
    /// The VXLAN header's second word: the VNI's three bytes, then 0.
    pub vni: [u8; 4],
    /// The underlay interface the route and neighbour are looked up on.
    pub ifindex: u32,
    /// The send sockets' ports (network order), by `source_port % VXLAN_SOCKETS`.
    pub sport: [[u8; 2]; VXLAN_SOCKETS],
    pub dstport: [u8; 2],
    pub ttl: u8,
    /// A fixed TOS (0: none).
    pub tos: u8,
    /// [`VX_INHERIT_TOS`], [`VX_IPV6`].
    pub flags: u8,
    pub pad: u8,
    /// [`VX_LEARNED`]: the VXLAN port's index (`qb_vxl_learned`'s key, decision 83).
    pub vxl_port: u16,
    /// [`VX_IPV6`]: the IPv6 addresses.
    pub local6: [u8; 16],
    pub remote6: [u8; 16],
    /// [`VX_IPV6`]: the outer flow label by send socket (its 20 bits in a word, network
    /// order).
    pub flow_label: [[u8; 4]; VXLAN_SOCKETS],
}

/// `struct qb_port_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PortStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Received frames by the priority the pipeline gives them.
    pub rx_pcp: [u64; 8],
}

/// `struct qb_vlan_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct VlanStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
}

/// `QB_ACT_MIRROR`: the flow's mirror copies are in `qb_mir_flows` (decision 80).
pub const ACT_MIRROR: u8 = 0x80;
/// `QB_MIR_COPIES`: most copies one flow makes.
pub const MIR_COPIES: usize = 4;
/// `QB_MAX_MIRRORS`: entries of `qb_mir_stats` (sessions, by index).
pub const MAX_MIRRORS: u32 = 32;
/// `QB_MIR_TX`: a copy of the frame as it leaves (after the tag edit); else as received.
pub const MIR_TX: u8 = 1;

/// `struct qb_mir_copy`: one mirror copy of a flow's frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MirCopy {
    /// The destination port's interface.
    pub ifindex: u32,
    /// The destination port's index (its tx counters).
    pub port: u32,
    /// Longest copy the destination takes (no FCS, as sent, RSPAN tag included).
    pub max_len: u16,
    /// The RSPAN tag's TPID and TCI (network order); TPID 0: none.
    pub rspan_tpid_be: u16,
    pub rspan_tci_be: u16,
    /// The session's index (`qb_mir_stats`).
    pub session: u8,
    /// [`MIR_TX`].
    pub flags: u8,
}

/// `struct qb_mir_action`: a flow's copies, in the pipeline's delivery order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MirAction {
    /// The flow's generation (a copy list of an older flow of the key is not used).
    pub generation: u32,
    pub n: u8,
    pub pad: [u8; 3],
    pub copies: [MirCopy; MIR_COPIES],
}

impl MirAction {
    /// The copies used.
    pub fn copies(&self) -> &[MirCopy] {
        &self.copies[..(self.n as usize).min(MIR_COPIES)]
    }
}

/// `struct qb_mir_stats`: a session's copies sent by the program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MirStats {
    pub frames: u64,
    pub bytes: u64,
    /// Copies the kernel refused (`bpf_clone_redirect` failed: the destination's interface
    /// gone or down; or the RSPAN tag's push), not sent (decision 85).
    pub failed: u64,
}

const _: () = {
    assert!(std::mem::size_of::<Port>() == 20);
    assert!(std::mem::size_of::<FlowKey>() == 24);
    assert!(std::mem::size_of::<Hop>() == 24);
    assert!(std::mem::size_of::<FlowAction>() == 24 + 24 * MAX_HOPS);
    assert!(std::mem::size_of::<FlowIx>() == 8 + 24 + 24 + 24 * MAX_HOPS);
    assert!(std::mem::size_of::<FdbKey>() == 12);
    assert!(std::mem::size_of::<FdbEntry>() == 16);
    assert!(std::mem::size_of::<FdbSlot>() == 24);
    assert!(std::mem::size_of::<Config>() == 12);
    assert!(std::mem::size_of::<Owner>() == 24);
    assert!(std::mem::size_of::<PortStats>() == 96);
    assert!(std::mem::size_of::<VlanStats>() == 32);
    assert!(std::mem::size_of::<Bond>() == 8 + 5 * BOND_BUCKETS);
    assert!(std::mem::size_of::<MemberStats>() == 40);
    assert!(std::mem::size_of::<Vxlan>() == 104);
    assert!(std::mem::size_of::<MirCopy>() == 16);
    assert!(std::mem::size_of::<MirAction>() == 8 + 16 * MIR_COPIES);
    assert!(std::mem::size_of::<MirStats>() == 24);
};

// SAFETY: each type is #[repr(C)], made of integers and integer arrays only, with its padding
// named as fields, so every bit pattern is a valid value and no byte is uninitialised.
unsafe impl aya::Pod for Port {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowAction {}
// SAFETY: as above (the key and action are such types; no padding: 8 + 24 + 192 bytes).
unsafe impl aya::Pod for FlowIx {}
// SAFETY: as above.
unsafe impl aya::Pod for FdbKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FdbEntry {}
// SAFETY: as above.
unsafe impl aya::Pod for FdbSlot {}
// SAFETY: as above.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for Owner {}
// SAFETY: as above.
unsafe impl aya::Pod for PortStats {}
// SAFETY: as above.
unsafe impl aya::Pod for VlanStats {}
// SAFETY: as above.
unsafe impl aya::Pod for Bond {}
// SAFETY: as above.
unsafe impl aya::Pod for MemberStats {}
// SAFETY: as above.
unsafe impl aya::Pod for Vxlan {}
// SAFETY: as above.
unsafe impl aya::Pod for MirCopy {}
// SAFETY: as above.
unsafe impl aya::Pod for MirAction {}
// SAFETY: as above.
unsafe impl aya::Pod for MirStats {}

/// Raw `bpf(2)` map operations on a descriptor, for [`crate::MapWriter`] (datapath workers
/// write flows and FDB entries without the loader's object).
pub(crate) mod raw {
    use std::os::fd::RawFd;

    const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;

    /// `union bpf_attr`'s map-element member.
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }

    fn call<K, V>(
        cmd: libc::c_long,
        fd: RawFd,
        key: &K,
        value: Option<*mut V>,
    ) -> std::io::Result<()> {
        call_ix_flags(cmd, fd, key, value, 0)
    }

    /// `BPF_NOEXIST`: an update that only inserts (EEXIST when the key is there).
    pub const NOEXIST: u64 = 1;

    fn call_ix_flags<K, V>(
        cmd: libc::c_long,
        fd: RawFd,
        key: &K,
        value: Option<*mut V>,
        ix_flags: u64,
    ) -> std::io::Result<()> {
        let attr = ElemAttr {
            map_fd: fd as u32,
            _pad: 0,
            key: key as *const K as u64,
            value: value.map_or(0, |v| v as u64),
            flags: ix_flags,
        };
        // SAFETY: `attr` is a valid bpf_attr prefix for the command; `key` and `value` point
        // to live values of the map's key and value sizes (the callers' types are the maps'
        // #[repr(C)] layouts, size-checked above).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                &attr as *const ElemAttr,
                std::mem::size_of::<ElemAttr>(),
            )
        };
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn update<K, V>(fd: RawFd, key: &K, value: &V) -> std::io::Result<()> {
        call(
            BPF_MAP_UPDATE_ELEM,
            fd,
            key,
            Some(value as *const V as *mut V),
        )
    }

    /// An update with `BPF_*` flags (the flow index's insert: [`NOEXIST`]).
    pub fn update_ix_flags<K, V>(
        fd: RawFd,
        key: &K,
        value: &V,
        ix_flags: u64,
    ) -> std::io::Result<()> {
        call_ix_flags(
            BPF_MAP_UPDATE_ELEM,
            fd,
            key,
            Some(value as *const V as *mut V),
            ix_flags,
        )
    }

    pub fn lookup<K, V: Default>(fd: RawFd, key: &K) -> std::io::Result<Option<V>> {
        let mut v = V::default();
        match call(BPF_MAP_LOOKUP_ELEM, fd, key, Some(&mut v as *mut V)) {
            Ok(()) => Ok(Some(v)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn delete<K>(fd: RawFd, key: &K) -> std::io::Result<()> {
        match call::<K, u8>(BPF_MAP_DELETE_ELEM, fd, key, None) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }
}

// ---- VXLAN decapsulation (decision 77): `qb_vxlan_in`'s maps ----

/// `struct qb_vxd_key`: a tunnel whose frames `qb_vxlan_in` takes — the port's local address,
/// a remote VTEP it knows, the VNI word and the port's UDP port, in network order (as their
/// bytes on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct VxdKey {
    pub local: [u8; 4],
    pub remote: [u8; 4],
    /// The VXLAN header's second word: the VNI's three bytes, then 0.
    pub vni: [u8; 4],
    pub dstport: [u8; 2],
    pub pad: u16,
}

/// `struct qb_vxd`: the VXLAN port a tunnel's frames enter (the flow key's `in_port`), the
/// tag an external port gives the VNI's frames (network order; TPID 0: none), [`VXD_LEARNING`]
/// and [`VXD_TRACE`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Vxd {
    pub port: u32,
    pub tag_tpid: [u8; 2],
    pub tag_tci: [u8; 2],
    pub flags: u32,
}

/// `QB_VXD_LEARNING`: the port learns remotes; a frame is taken only if its source is in
/// `qb_vxd_srcs` (a static entry, which learning leaves alone).
pub const VXD_LEARNING: u32 = 1;
/// `QB_VXD_TRACE`: `trace live` watches the port; its frames all go to the socket.
pub const VXD_TRACE: u32 = 2;
/// `QB_VXD_ZERO6RX` (decision 82): the port accepts a zero UDP checksum over IPv6
/// (`udp6zerocsumrx`); without it such a frame goes to the socket, which drops and counts it.
pub const VXD_ZERO6RX: u32 = 4;

/// `struct qb_vxd6_key` (decision 82): a tunnel of an IPv6 underlay whose frames `qb_vxlan_in`
/// takes (`qb_vxd6_tunnels`; the value a [`Vxd`]) — [`VxdKey`] with 128-bit addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Vxd6Key {
    pub local: [u8; 16],
    pub remote: [u8; 16],
    /// The VXLAN header's second word: the VNI's three bytes, then 0.
    pub vni: [u8; 4],
    pub dstport: [u8; 2],
    pub pad: u16,
}

/// `QB_VXD_MAX_SRCS`: entries of `qb_vxd_srcs`.
pub const VXD_MAX_SRCS: u32 = 65536;

/// `struct qb_vxd_src_key`: a static entry's (port, VNI word, MAC) of a learning port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct VxdSrcKey {
    pub port: u32,
    pub vni: [u8; 4],
    pub mac: [u8; 6],
    pub pad: u16,
}

/// `enum qb_vxd_verdict`: what `qb_vxlan_in` did with a frame (`qb_vxd_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VxdVerdict {
    Hit = 0,
    Other,
    Header,
    Csum,
    Inner,
    Src,
    NoFlow,
    Stale,
    Dst,
    Size,
    Action,
    Traced,
    /// vxl_: the source is learned behind another remote (a move; decision 83).
    Moved,
}

impl VxdVerdict {
    pub const ALL: [VxdVerdict; 13] = [
        VxdVerdict::Hit,
        VxdVerdict::Other,
        VxdVerdict::Header,
        VxdVerdict::Csum,
        VxdVerdict::Inner,
        VxdVerdict::Src,
        VxdVerdict::NoFlow,
        VxdVerdict::Stale,
        VxdVerdict::Dst,
        VxdVerdict::Size,
        VxdVerdict::Action,
        VxdVerdict::Traced,
        VxdVerdict::Moved,
    ];

    pub fn name(self) -> &'static str {
        match self {
            VxdVerdict::Hit => "hit",
            VxdVerdict::Other => "other",
            VxdVerdict::Header => "header",
            VxdVerdict::Csum => "checksum",
            VxdVerdict::Inner => "inner",
            VxdVerdict::Src => "source",
            VxdVerdict::NoFlow => "no-flow",
            VxdVerdict::Stale => "stale",
            VxdVerdict::Dst => "destination",
            VxdVerdict::Size => "size",
            VxdVerdict::Action => "action",
            VxdVerdict::Traced => "traced",
            VxdVerdict::Moved => "moved",
        }
    }

    pub fn from_index(i: u32) -> Option<VxdVerdict> {
        VxdVerdict::ALL.get(i as usize).copied()
    }
}

const _: () = {
    assert!(std::mem::size_of::<VxdKey>() == 16);
    assert!(std::mem::size_of::<Vxd>() == 12);
    assert!(std::mem::size_of::<VxdSrcKey>() == 16);
    assert!(std::mem::size_of::<Vxd6Key>() == 40);
};

// SAFETY: #[repr(C)], integers and integer arrays only, padding named: every bit pattern is
// valid, no byte uninitialised.
unsafe impl aya::Pod for VxdKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Vxd {}
// SAFETY: as above.
unsafe impl aya::Pod for VxdSrcKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Vxd6Key {}

// ---- vxl_: learned remotes (decision 83) ----

/// `QB_VX_LEARNED`: the tunnel's remote is a learned one; its flows are used only while
/// `qb_vxl_learned` has the destination behind it, unaged.
pub const VX_LEARNED: u8 = 0x80;
/// `QB_VXL_MAX`: entries of `qb_vxl_learned`.
pub const VXL_MAX: u32 = 65536;

/// `struct qb_vxl_remote`: a learned (VXLAN port, VNI, MAC)'s remote VTEP (its key a
/// [`VxdSrcKey`]), when the pipeline ages it (CLOCK_MONOTONIC, less a margin) and the last
/// time `qb_vxlan_in` took a frame from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct VxlRemote {
    /// The IPv4 remote (0 with [`VXL_IPV6`]).
    pub remote: [u8; 4],
    /// `QB_VXL_*`.
    pub flags: u32,
    pub deadline_ns: u64,
    pub last_seen_ns: u64,
    /// [`VXL_IPV6`]: the IPv6 remote (an IPv6 underlay's port).
    pub remote6: [u8; 16],
}

/// `QB_VXL_IPV6`: the learned remote is [`VxlRemote::remote6`].
pub const VXL_IPV6: u32 = 1;

const _: () = assert!(std::mem::size_of::<VxlRemote>() == 40);

// SAFETY: #[repr(C)], integers and integer arrays only, padding named.
unsafe impl aya::Pod for VxlRemote {}
