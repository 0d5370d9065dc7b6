/* The layouts shared by the fast-path program and its loader (crates/fastpath/src/maps.rs
 * mirrors each one with #[repr(C)] and asserts its size). Integers are host order unless
 * named _be (network order, as on the wire). */
#ifndef QB_FASTPATH_H
#define QB_FASTPATH_H

#include <linux/types.h>

#define QB_MAX_PORTS 4096
#define QB_MAX_VLAN_SLOTS 65536	/* bridge index (4 bits) << 12 | VID */
#define QB_MAX_FLOWS 65536
#define QB_MAX_FDB 1048576
/* Dense copies of the FDB entries flows rely on (qb_fdb_slots; slot 0: none), so that a
 * frame's source and destination checks read one small array entry each instead of two
 * hash lookups in a million-entry table (decision 71). */
#define QB_MAX_FDB_SLOTS 65536
#define QB_MAX_TAGS 2

/* Why a frame went up to the pipeline (counted per CPU; the loader names them). */
enum qb_miss {
	QB_MISS_NO_PORT = 0,	/* ingress interface is not a fast-path port */
	QB_MISS_MALFORMED,	/* shorter than an Ethernet header or a tag */
	QB_MISS_TAGS,		/* more tags than the fast path parses, or a TPID it does not */
	QB_MISS_GROUP,		/* destination is a group address (flood, link-local, multicast) */
	QB_MISS_NO_FLOW,	/* no flow for the key */
	QB_MISS_STALE,		/* the flow's generation is older than the configuration's */
	QB_MISS_SRC,		/* source not learned on the ingress port (new, moved, aged) */
	QB_MISS_DST,		/* destination's FDB entry changed since the flow was made */
	QB_MISS_SIZE,		/* longer than the egress port takes (the pipeline decides) */
	QB_MISS_ACTION,		/* a tag edit the kernel refused */
	QB_MISS_LOCAL,		/* to the port interface's own address: the host's too */
	QB_MISS_BOND,		/* to a bond: no member distributes, or a frame the program does not hash */
	QB_MISS_VXLAN,		/* to a VXLAN tunnel: no route or neighbour, too long for the path, or a
			 * frame whose outer source port the program does not compute */
	QB_MISS_ORDER,		/* vxo_: a frame of a flow whose earlier frame went up for a reason of its
			 * own within the order window: it must not overtake it (decision 91) */
	QB_MISS_MAX,
};

/* Per ingress interface (key: ifindex in the daemon's namespace). */
struct qb_port {
	/* qbridge's port id (low 12 bits: the counters' index) and its opening's generation
	 * (4 bits above): the flow key's in_port, the FDB entries' port, the upcall's TCI. */
	__u32 index;
	__u32 flags;		/* QB_PORT_* */
	/* TPIDs the port takes as tags besides 0x8100 and 0x88a8: a frame with one is a miss
	 * (the fast path parses and edits only those two). 0: none. */
	__u16 extra_tpid_be[2];
	/* The interface's own address: frames to it (and group frames) reach the host's stack
	 * as well as the pipeline, as they do with a packet socket, which only taps. */
	__u8 mac[6];
	__u16 pad;
};
#define QB_PORT_ENABLED 1
/* The program runs on the interface's egress: a TAP port, whose frames from the host leave
 * the kernel there for the daemon's file descriptor. A miss goes on to that descriptor (the
 * pipeline reads it), with no copy and no upcall. */
#define QB_PORT_EGRESS 2
/* `trace live` watches the port: a hit's frame, as received, is also copied to the trace
 * device (qb_config.trace_ifindex) with the port index in an accelerated tag. */
#define QB_PORT_TRACE 4
#define QB_PORT_ID_MASK 0xfff

/* The flow key: what the pipeline's decision for a known-unicast frame depends on, besides
 * the source's FDB state (checked in the FDB map). */
struct qb_flow_key {
	__u32 in_port;
	__u16 tpid_be[QB_MAX_TAGS];	/* as received, outer first; 0: absent */
	__u16 tci_be[QB_MAX_TAGS];
	__u8 dst[6];
	__u8 ntags;
	__u8 pad;
	__u16 ethertype_be;	/* after the tags */
	__u16 pad2;
};

/* Most bridges one flow crosses: its ingress port's, and those behind patch links (a patch
 * link joins two ports of the daemon; the flow folds the frame's way through it). */
#define QB_MAX_HOPS 4

/* One bridge a flow crosses: the frame enters it on in_port with in_tags tags, leaves it on
 * out_port with out_tags (the next hop's in_tags). */
struct qb_hop {
	__u32 in_port;		/* qbridge port index (counters: low 12 bits; the FDB's port) */
	__u32 out_port;
	__u16 dst_version;	/* the destination's FDB entry version when made */
	/* The program's: where it last found the destination's and the source's entries in
	 * qb_fdb_slots (0: not yet; the loader writes 0). Checked against the slot's key on
	 * every use, so a slot reused for another entry is never taken for this one. */
	__u16 dst_slot;
	__u16 bridge;		/* the bridge's index (the FDB map's key) */
	__u16 fid;		/* the VLAN (FDB id) the frame was classified into */
	__u16 vlan_slot;	/* per-VLAN counters' index */
	__u8 rx_pcp;		/* the priority the pipeline counted the frame under; 8: none */
	__u8 flags;		/* QB_HOP_* */
	__u8 in_tags;
	__u8 out_tags;
	__u16 src_slot;
};
/* The hop's ingress port learns: a hit needs the source learned on it (else the source is
 * not checked, as the pipeline learns nothing there). */
#define QB_HOP_LEARNING 1
/* The hop's ingress port is locked (decision 75): a hit needs the source's entry on it, as
 * for a learning port, but the program refreshes its last-seen time only if the port also
 * learns (QB_HOP_LEARNING), as the pipeline does. */
#define QB_HOP_SRC 2

/* What the pipeline decided for that key, compiled: pop the frame's ntags tags, push
 * push_n tags (outer first in the arrays), redirect to out_ifindex; the checks and counters
 * of every bridge on the way (hops). */
struct qb_flow_action {
	__u32 generation;	/* configuration generation the flow was made under */
	__u32 out_ifindex;
	__u16 min_len;		/* shortest frame (as received) the pipeline forwards alike */
	__u16 max_len;		/* longest frame (no FCS, as sent) every port on the way takes */
	__u8 push_n;
	__u8 n_hops;		/* 1 ..= QB_MAX_HOPS */
	__u8 flags;		/* QB_ACT_* */
	__u8 pad;
	__u16 push_tpid_be[QB_MAX_TAGS];
	__u16 push_tci_be[QB_MAX_TAGS];
	struct qb_hop hops[QB_MAX_HOPS];
};
/* Redirect to the egress interface's peer (bpf_redirect_peer): a veth whose other end is in
 * another namespace, the frame addressed to that end (docs/fast-path-design.md). */
#define QB_ACT_PEER 1
/* Deliver into the egress interface's own receive (bpf_redirect BPF_F_INGRESS): a TAP port,
 * where what the daemon writes to its descriptor is what the host's stack receives. */
#define QB_ACT_INGRESS 2

/* The flow index (decision 79): per CPU, QB_FLOW_IX_SIZE dense copies of flows the program
 * found in qb_flows, each valid while its epoch is qb_flow_epoch's, and QB_FLOW_IX_TAGS tags
 * naming them, addressed by the frame's VLAN (decision 93). A frame whose key its tag's copy holds
 * reads a word and that copy (two cache lines) instead of the hash's bucket and element and
 * the kernel's jhash of the key. Only the CPU that owns a copy writes it (the program, after
 * a lookup in the hash); the loader bumps the epoch after every change a copy could outlive
 * (a flow replaced or removed, an insert that may evict), so a copy is never used past its
 * flow. */
#define QB_FLOW_IX_SIZE 8192
#define QB_FLOW_IX_TAGS 32768	/* the VLANs' tags, then the second tags */
#define QB_FLOW_IX_VTAGS 16384	/* four a VID (decision 93) */
struct qb_flow_ix {
	__u64 epoch;		/* qb_flow_epoch's value when copied; 0: empty */
	struct qb_flow_key key;
	struct qb_flow_action action;
};

struct qb_fdb_key {
	__u16 bridge;
	__u16 fid;
	__u8 mac[6];
	__u16 pad;
};

/* An FDB entry the fast path relies on (the pipeline's FDB is the truth; this mirrors the
 * entries that flows use). last_seen_ns is written by the program (bpf_ktime_get_coarse_ns)
 * when a frame from this source is forwarded; the ager reads it (the later of this and the
 * slot's). slot: the entry's copy in qb_fdb_slots (0: none, the slots were all taken). */
struct qb_fdb_entry {
	__u32 port;
	__u16 version;
	__u16 slot;
	__u64 last_seen_ns;
};

/* qb_fdb_slots: an FDB entry's dense copy, with its key (the program compares it with what it
 * looks for: a slot is reused once its entry goes). The loader writes it with the hash
 * entry; a removed entry's slot has port QB_SLOT_FREE until it is reused. */
struct qb_fdb_slot {
	__u8 mac[6];
	__u16 bridge;
	__u16 fid;
	__u16 version;
	__u32 port;
	__u64 last_seen_ns;
};
#define QB_SLOT_FREE 0xffffffff

struct qb_config {
	__u32 generation;
	__u32 upcall_ifindex;	/* misses are redirected to this device's ingress; 0: passed */
	__u32 trace_ifindex;	/* hits of QB_PORT_TRACE ports are copied to its ingress; 0: none */
};

/* The daemon that loaded the program, in qb_owner: it moves deadline_ns (CLOCK_MONOTONIC) a
 * lease ahead every second while it runs. Past the deadline the program is an orphan — its
 * daemon died without removing its filters (classic clsact filters outlive their process) —
 * and claims nothing: every frame goes on as if the filter were not there. netns_ino (the
 * inode of the daemon's /proc/self/ns/net) and upcall_ifindex let a later daemon find, and
 * remove, what an orphan left in its namespace. docs/fast-path.md, "When the daemon dies". */
struct qb_owner {
	__u64 deadline_ns;
	__u64 netns_ino;
	__u32 upcall_ifindex;
	__u32 pad;
};

struct qb_port_stats {
	__u64 rx_frames, rx_bytes, tx_frames, tx_bytes;
	__u64 rx_pcp[8];	/* received frames by the priority the pipeline gives them */
};

struct qb_vlan_stats {
	__u64 rx_frames, rx_bytes, tx_frames, tx_bytes;
};

/* Bonds (decision 74). A flow whose egress port is a bond has QB_ACT_BOND: the program picks
 * the member as the bond's queues do, member_ifindex[flow_hash(frame, policy) & 0xff] of the
 * bond's entry in qb_bonds (key: the bond's port id, the last hop's out_port & 0xfff), the
 * hash being the pipeline's (qbridge_lacp::flow_hash) computed on the frame as it leaves. The
 * daemon writes the entry whenever it publishes a transmit table to the bond's queues (a
 * member's link or LACP state changed, the member list or the policy changed). */
#define QB_ACT_BOND 0x40
/* The interface is a member of a bond: index is the bond's port index; frames that are not
 * Slow Protocols frames are the bond's only while the member collects (QB_PORT_COLLECTING),
 * else dropped (counted in qb_member_stats). Slow Protocols frames (LACPDUs, markers) pass to
 * the member's own socket (bound to ETH_P_SLOW, after TC ingress). The member's position in
 * its bond: flags bits 16-19; the bond's slot (qb_bond.slot): bits 20-27. */
#define QB_PORT_BOND_MEMBER 0x40
#define QB_PORT_COLLECTING 0x80
#define QB_PORT_MEMBER_SHIFT 16
#define QB_MAX_BONDS 256
#define QB_BOND_BUCKETS 256
#define QB_BOND_MEMBERS 16
enum qb_bond_hash {
	QB_HASH_L2 = 0,		/* layer2 */
	QB_HASH_L2_VLAN,	/* layer2+vlan */
	QB_HASH_L34,		/* layer3+4 */
	QB_HASH_INNER_L34,	/* inner-layer3+4 (encapsulated frames go up) */
};
struct qb_bond {
	__u32 policy;		/* enum qb_bond_hash */
	__u32 slot;		/* below QB_MAX_BONDS: its members' counters, slot << 4 | position */
	__u32 member_ifindex[QB_BOND_BUCKETS];	/* by hash bucket; 0: no member */
	__u8 member_pos[QB_BOND_BUCKETS];	/* that member's position (its counters) */
};
/* A member's traffic through the program (qb_member_stats, key: the bond's slot << 4 | the
 * member's position), added to the bond's queues' own per-member counters. */
struct qb_member_stats {
	__u64 rx_frames, rx_bytes, tx_frames, tx_bytes;
	__u64 rx_not_collecting;	/* dropped: received while the member did not collect */
};

/* VXLAN (decision 73). A flow whose egress port is a VXLAN port has QB_ACT_VXLAN: the program
 * encapsulates the frame (left untagged by the flow's tag edit) in IPv4/UDP/VXLAN as the
 * port's userspace VTEP sends it, and redirects it to the underlay interface with the
 * neighbour's address (bpf_fib_lookup). out_ifindex is then the index of the tunnel in
 * qb_vxlan, written by the daemon with the flow: (port, VNI, remote VTEP) and the port's
 * underlay settings. */
#define QB_ACT_VXLAN 0x20
#define QB_MAX_TUNNELS 4096
/* The UDP socket's source ports: the userspace VTEP sends a frame from socket
 * source_port(frame) % QB_VXLAN_SOCKETS (qbridge_io::vxlan::TX_SOCKETS). */
#define QB_VXLAN_SOCKETS 8
#define QB_VXLAN_SPORT_MIN 49152	/* qbridge_wire::vxlan::SOURCE_PORT_MIN */
/* tos inherit: the outer TOS is the inner packet's (CE leaves as ECT(0)). */
#define QB_VX_INHERIT_TOS 1
/* An IPv6 underlay (decision 78): local6/remote6 and the flow labels, not local/remote. */
#define QB_VX_IPV6 2
struct qb_vxlan {
	__u32 local_be;		/* IPv4 source address */
	__u32 remote_be;	/* the remote VTEP */
	__u32 vni_be;		/* the VXLAN header's second word: VNI << 8, network order */
	__u32 ifindex;		/* the underlay interface (route and neighbour looked up there) */
	__u16 sport_be[QB_VXLAN_SOCKETS];
	__u16 dstport_be;
	__u8 ttl;
	__u8 tos;		/* a fixed TOS (0: none) */
	__u8 flags;		/* QB_VX_* */
	__u8 pad;
	__u16 vxl_port;		/* QB_VX_LEARNED: the VXLAN port's index (qb_vxl_learned's key) */
	/* QB_VX_IPV6: the addresses, and per send socket the outer flow label (its 20 bits in
	 * a word, network order). */
	__u8 local6[16];
	__u8 remote6[16];
	__u32 flow_label_be[QB_VXLAN_SOCKETS];
};

/* Mirror copies (decision 80). A flow with QB_ACT_MIRROR has its copies in qb_mir_flows
 * (same key, same generation): each a bpf_clone_redirect to a session's destination port,
 * the frame as received (rx, before the tag edit) or as it leaves (QB_MIR_TX, after it),
 * with the session's RSPAN tag pushed on the copy only. A frame whose copy is longer than
 * the destination takes (max_len) misses (the pipeline counts the session's oversize). The
 * copies are counted in qb_mir_stats (per CPU, by session index) and in the destination
 * port's tx counters; a copy the kernel refuses in the session's `failed` (decision 85). */
#define QB_ACT_MIRROR 0x80
#define QB_MIR_COPIES 4
#define QB_MAX_MIRRORS 32
#define QB_MIR_TX 1
struct qb_mir_copy {
	__u32 ifindex;		/* the destination's interface */
	__u32 port;		/* the destination's port index (counters: low 12 bits) */
	__u16 max_len;		/* longest copy (no FCS, as sent, RSPAN tag included) */
	__u16 rspan_tpid_be;	/* 0: no RSPAN tag */
	__u16 rspan_tci_be;
	__u8 session;		/* qb_mir_stats' index */
	__u8 flags;		/* QB_MIR_* */
};
struct qb_mir_action {
	__u32 generation;	/* the flow's */
	__u8 n;			/* copies, in the order the pipeline delivers them */
	__u8 pad[3];
	struct qb_mir_copy copies[QB_MIR_COPIES];
};
struct qb_mir_stats {
	__u64 frames, bytes;
	__u64 failed;		/* copies the kernel refused (clone or RSPAN push; decision 85) */
};

/* VXLAN decapsulation (decision 77). qb_vxlan_in, on the ingress of a VXLAN port's underlay
 * interface, takes an IPv4/UDP/VXLAN frame to one of qb_vxd_tunnels' (local address, remote
 * VTEP, VNI, UDP port) and forwards its inner frame by the flow the pipeline made for it
 * (key: in_port the VXLAN port, the VNI's VLAN tag of an external port as the frame's tag),
 * as if the port's socket had received it; every other frame passes on to the socket. */
struct qb_vxd_key {
	__u32 local_be;		/* the port's local address (the outer destination) */
	__u32 remote_be;	/* a remote VTEP the port knows (the outer source) */
	__u32 vni_be;		/* the VXLAN header's second word: VNI << 8, network order */
	__u16 dstport_be;	/* the port's UDP port */
	__u16 pad;
};
struct qb_vxd {
	__u32 port;		/* the VXLAN port's index (the flow key's in_port) */
	__u16 tag_tpid_be;	/* an external port's tag for the VNI (the frame enters with it); 0 */
	__u16 tag_tci_be;
	__u32 flags;		/* QB_VXD_* */
};
/* The port learns remotes from received frames: a source is taken only if qb_vxd_srcs has it
 * (a static entry of the port's table, which learning leaves alone). */
#define QB_VXD_LEARNING 1
/* `trace live` watches the port: its frames all go to the socket (the pipeline traces them). */
#define QB_VXD_TRACE 2
/* qb_vxd_srcs: (port, VNI, inner source) of the static entries of a learning port. */
struct qb_vxd_src_key {
	__u32 port;
	__u32 vni_be;
	__u8 mac[6];
	__u16 pad;
};
#define QB_VXD_MAX_SRCS 65536
/* VXLAN decapsulation over IPv6 (decision 82): qb_vxd6_tunnels' key, the 128-bit addresses of
 * an IPv6 underlay (the value a struct qb_vxd as over IPv4). */
struct qb_vxd6_key {
	__u8 local[16];		/* the port's local address (the outer destination) */
	__u8 remote[16];	/* a remote VTEP the port knows (the outer source) */
	__u32 vni_be;		/* the VXLAN header's second word */
	__u16 dstport_be;	/* the port's UDP port */
	__u16 pad;
};
/* The port accepts a zero UDP checksum over IPv6 (udp6zerocsumrx, its socket's
 * UDP_NO_CHECK6_RX): without it such a frame goes to the socket, which drops and counts it. */
#define QB_VXD_ZERO6RX 4
/* What qb_vxlan_in did with a frame (qb_vxd_stats, per CPU; the loader names them). */
enum qb_vxd_verdict {
	QB_VXD_HIT = 0,		/* decapsulated and forwarded */
	QB_VXD_OTHER,		/* not IPv4/UDP/VXLAN to a tunnel of qb_vxd_tunnels */
	QB_VXD_HEADER,		/* IP options or fragment, lengths, IP checksum, VXLAN flags */
	QB_VXD_CSUM,		/* an outer UDP checksum the kernel would compute (CHECKSUM_NONE) or bad */
	QB_VXD_INNER,		/* inner frame: group or invalid source, tagged, not IP */
	QB_VXD_SRC,		/* source not in qb_vxd_srcs (learning port) or not learned on the port */
	QB_VXD_NO_FLOW,
	QB_VXD_STALE,
	QB_VXD_DST,
	QB_VXD_SIZE,
	QB_VXD_ACTION,		/* an action the decapsulating program does not run, or a helper refused */
	QB_VXD_TRACED,
	QB_VXD_MOVED,		/* vxl_: the source is learned behind another remote (a move) */
	QB_VXD_MAX,
};

/* vxl_: learned remotes (decision 83). qb_vxl_learned, keyed as qb_vxd_srcs (VXLAN port,
 * VNI word, MAC): the remote VTEP a learning port's own table has the MAC behind. The table
 * writes it under its lock whenever it learns a MAC, moves it to another remote or forgets it
 * (aged, deleted, flushed, a static entry replacing it), so the pipeline never forwards with a
 * remote the map does not hold. A flow to a learned remote (its tunnel QB_VX_LEARNED, with
 * vxl_port) is used only while the entry names the tunnel's remote and deadline_ns (when the
 * pipeline ages the entry, less a margin for the coarse clock) is ahead; qb_vxlan_in takes a
 * frame of a learning port whose inner source has an entry naming the outer source, and
 * refreshes last_seen_ns, which the engine's ager reads before it ages the entry. */
struct qb_vxl_remote {
	__u32 remote_be;	/* the learned remote VTEP (IPv4; 0 with QB_VXL_IPV6) */
	__u32 flags;		/* QB_VXL_* */
	__u64 deadline_ns;	/* CLOCK_MONOTONIC: the entry is not used from then on */
	__u64 last_seen_ns;	/* written by qb_vxlan_in (at most once a second) */
	__u8 remote6[16];	/* QB_VXL_IPV6: the learned remote VTEP (IPv6) */
};
/* vxl_: the learned remote is IPv6 (remote6; an IPv6 underlay's port). */
#define QB_VXL_IPV6 1
#define QB_VXL_MAX 65536
/* The tunnel's remote is a learned one: flows through it check qb_vxl_learned. */
#define QB_VX_LEARNED 0x80

/* The sizes crates/fastpath/src/maps.rs asserts of its #[repr(C)] mirrors: a layout changed on
 * one side only fails the build of that side. */
_Static_assert(sizeof(struct qb_port) == 20, "qb_port: maps.rs Port");
_Static_assert(sizeof(struct qb_flow_key) == 24, "qb_flow_key: maps.rs FlowKey");
_Static_assert(sizeof(struct qb_hop) == 24, "qb_hop: maps.rs Hop");
_Static_assert(sizeof(struct qb_flow_action) == 24 + 24 * QB_MAX_HOPS,
	       "qb_flow_action: maps.rs FlowAction");
_Static_assert(sizeof(struct qb_flow_ix) == 8 + 24 + 24 + 24 * QB_MAX_HOPS,
	       "qb_flow_ix: maps.rs FlowIx");
_Static_assert(sizeof(struct qb_fdb_key) == 12, "qb_fdb_key: maps.rs FdbKey");
_Static_assert(sizeof(struct qb_fdb_entry) == 16, "qb_fdb_entry: maps.rs FdbEntry");
_Static_assert(sizeof(struct qb_config) == 12, "qb_config: maps.rs Config");
_Static_assert(sizeof(struct qb_owner) == 24, "qb_owner: maps.rs Owner");
_Static_assert(sizeof(struct qb_port_stats) == 96, "qb_port_stats: maps.rs PortStats");
_Static_assert(sizeof(struct qb_vlan_stats) == 32, "qb_vlan_stats: maps.rs VlanStats");
_Static_assert(sizeof(struct qb_vxlan) == 104, "qb_vxlan: maps.rs Vxlan");
_Static_assert(sizeof(struct qb_bond) == 8 + 5 * QB_BOND_BUCKETS, "qb_bond: maps.rs Bond");
_Static_assert(sizeof(struct qb_member_stats) == 40, "qb_member_stats: maps.rs MemberStats");
_Static_assert(sizeof(struct qb_mir_copy) == 16, "qb_mir_copy: maps.rs MirCopy");
_Static_assert(sizeof(struct qb_mir_action) == 8 + 16 * QB_MIR_COPIES, "qb_mir_action: maps.rs MirAction");
_Static_assert(sizeof(struct qb_mir_stats) == 24, "qb_mir_stats: maps.rs MirStats");
_Static_assert(sizeof(struct qb_vxd_key) == 16, "qb_vxd_key: maps.rs VxdKey");
_Static_assert(sizeof(struct qb_vxd) == 12, "qb_vxd: maps.rs Vxd");
_Static_assert(sizeof(struct qb_vxd_src_key) == 16, "qb_vxd_src_key: maps.rs VxdSrcKey");
_Static_assert(sizeof(struct qb_vxl_remote) == 40, "qb_vxl_remote: maps.rs VxlRemote");
_Static_assert(sizeof(struct qb_vxd6_key) == 40, "qb_vxd6_key: maps.rs Vxd6Key");

#endif
