// SPDX-License-Identifier: GPL-2.0 OR MIT
/* qbridge's fast path: a TC program on the ingress of every fast-path port (on the egress of
 * a TAP port's interface, where what the host sends it leaves the kernel). It parses up to
 * two 802.1Q/802.1ad tags, looks the frame up in the flow table the userspace pipeline fills,
 * and either executes the pipeline's cached decision (pop the tags, push the egress tags,
 * redirect to the egress interface; super-frames stay whole) or sends the frame up (a miss):
 * redirected to the upcall device's ingress with the ingress port index in an accelerated
 * tag. docs/fast-path-design.md. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "fastpath.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_MAX_PORTS);
	__type(key, __u32);		/* ifindex */
	__type(value, struct qb_port);
} qb_ports SEC(".maps");

struct {
#ifdef QB_STUDY_PLAIN_HASH	/* the per-VLAN cost study only (decision 84) */
	__uint(type, BPF_MAP_TYPE_HASH);
#else
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
#endif
#ifdef QB_STUDY_FLOWS		/* the per-VLAN cost study only: another table size */
	__uint(max_entries, QB_STUDY_FLOWS);
#else
	__uint(max_entries, QB_MAX_FLOWS);
#endif
	__type(key, struct qb_flow_key);
	__type(value, struct qb_flow_action);
} qb_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_MAX_FDB);
	__uint(map_flags, BPF_F_NO_PREALLOC);	/* a million MACs, memory as they come */
	__type(key, struct qb_fdb_key);
	__type(value, struct qb_fdb_entry);
} qb_fdb SEC(".maps");

/* The FDB entries flows rely on, densely (decision 71): a flow's hop remembers where its
 * source's and destination's entries are, and a frame reads those two array entries, a few
 * hundred kilobytes for thousands of VLANs, where the hash above spreads its buckets over
 * 16 MB (one TLB and cache miss per lookup once the VLANs in use outgrow the caches). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QB_MAX_FDB_SLOTS);
	__type(key, __u32);
	__type(value, struct qb_fdb_slot);
} qb_fdb_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qb_config);
} qb_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qb_owner);
} qb_owner SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct qb_port_stats);
} qb_port_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_MAX_VLAN_SLOTS);
	__type(key, __u32);
	__type(value, struct qb_vlan_stats);
} qb_vlan_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_MISS_MAX + 1);	/* the last: hits */
	__type(key, __u32);
	__type(value, __u64);
} qb_verdicts SEC(".maps");

/* skb->cb[]: the verdict, for BPF_PROG_TEST_RUN (ctx_out returns cb; cb is the TC scratch
 * area, nothing after this program reads it). cb[0]: the egress ifindex on a hit, else 0;
 * cb[1]: 1 + the miss reason, else 0; on a hit cb[2] and cb[3] hold the accelerated tag the
 * frame leaves with (the wire's outer tag, which the test run's output bytes lack): cb[2]
 * its TPID as __sk_buff has it, cb[3] 0x10000 | TCI, or 0 for none. */
#define QB_VERDICT_HIT 0
/* Ethernet and two tags: what the program reads in place. */
#define QB_L2_HEADERS (ETH_HLEN + 4 * QB_MAX_TAGS)
#define NS_PER_REFRESH 1000000000ULL

static __always_inline void count(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&qb_verdicts, &what);
	if (n)
		*n += 1;
}

/* Whether the daemon that loaded the program stopped renewing its lease (it died). */
static __always_inline int orphaned(__u64 now)
{
	__u32 zero = 0;
	struct qb_owner *o = bpf_map_lookup_elem(&qb_owner, &zero);

	return !o || now > o->deadline_ns;
}

/* The slot `slot`'s entry if it holds (bridge, fid, mac), else 0 (never filled, or reused
 * for another entry since: the caller looks the hash up). */
static __always_inline struct qb_fdb_slot *slot_for(__u16 slot, const __u8 *mac,
						    const struct qb_hop *h)
{
	__u32 i = slot;
	struct qb_fdb_slot *e;

	if (!i)
		return 0;
	e = bpf_map_lookup_elem(&qb_fdb_slots, &i);
	if (!e || e->bridge != h->bridge || e->fid != h->fid ||
	    ((e->mac[0] ^ mac[0]) | (e->mac[1] ^ mac[1]) | (e->mac[2] ^ mac[2]) |
	     (e->mac[3] ^ mac[3]) | (e->mac[4] ^ mac[4]) | (e->mac[5] ^ mac[5])))
		return 0;
	return e;
}

/* ---- The flow index (decision 79): a frame's flow from one array entry, the hash behind ---- */

/* Per CPU, densely: QB_FLOW_IX_SIZE copies of flows (entry cpu * QB_FLOW_IX_SIZE + n, taken
 * in turn), so the flows in use sit in few pages. The loader sizes both arrays for the CPUs it
 * serves: a CPU past the end uses the hash alone. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QB_FLOW_IX_SIZE);
	__type(key, __u32);
	__type(value, struct qb_flow_ix);
} qb_flow_ix SEC(".maps");

/* Per CPU, QB_FLOW_IX_TAGS words, each 1 + the n of the copy it names (0: none): 64 KB
 * addressed by the frame's VLAN (fix_slot; a VLAN's four words share a line), then 64 KB of
 * second tags (fix_slot2). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QB_FLOW_IX_TAGS);
	__type(key, __u32);
	__type(value, __u32);
} qb_flow_ix_tags SEC(".maps");

/* The next copy a CPU takes (in turn: the oldest goes). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} qb_flow_ix_next SEC(".maps");

/* The index's epoch: a copy made under another is not used (the loader bumps it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} qb_flow_epoch SEC(".maps");

#define QB_FIX_K 0x9e3779b97f4a7c15ULL

/* The key's tag in a CPU's part of the index (decision 93): addressed by the VLAN, not by a
 * hash of the whole key. Four words per VID (the outer one; with two tags the outer and the
 * inner mixed, an odd multiple of the inner VID, so the C-VLANs of one S-VLAN spread too),
 * the word among them picked by a multiply-xorshift of the rest of the key (port, TPIDs,
 * destination, ethertype); untagged frames by that hash alone. The VLANs a port carries
 * then take neighbouring tags, and their copies (taken in turn) neighbouring pages: the
 * seeds' VLAN_ARRAY, where a hash of every word put each VLAN's tag on another line
 * (decision 79) and left the per-VLAN cost where the flow hash had it. */
static __always_inline __u32 fix_slot(const struct qb_flow_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = ((__u64)w[0] << 32 | w[1]) * QB_FIX_K;
	__u32 vid;

	h = (h ^ (h >> 29) ^ ((__u64)w[3] << 32 | w[4])) * QB_FIX_K;
	h = (h ^ (h >> 29) ^ w[5]) * QB_FIX_K;
	vid = (bpf_ntohs(k->tci_be[0]) + 0x9e5 * bpf_ntohs(k->tci_be[1])) & 0xfff;
	if (!k->ntags)
		vid = (__u32)(h >> 32) & 0xfff;
	return (vid << 2 | (__u32)(h >> 62)) & (QB_FLOW_IX_VTAGS - 1);
}

/* A flow's second tag, for the flows of a VID past its four (decision 93): in the tags'
 * second half, placed by a multiply-xorshift of the key's six words (decision 79's tag). */
static __always_inline __u32 fix_slot2(const struct qb_flow_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = ((__u64)w[0] << 32 | w[1]) * QB_FIX_K;

	h = (h ^ (h >> 29) ^ ((__u64)w[2] << 32 | w[3])) * QB_FIX_K;
	h = (h ^ (h >> 29) ^ ((__u64)w[4] << 32 | w[5])) * QB_FIX_K;
	return QB_FLOW_IX_VTAGS + ((__u32)(h >> 40) & (QB_FLOW_IX_VTAGS - 1));
}

/* Whether a copy holding `k` belongs to tag `t` (the tag it was made through). */
static __always_inline int fix_owns(const struct qb_flow_key *k, __u32 t)
{
	return t < QB_FLOW_IX_VTAGS ? fix_slot(k) == t : fix_slot2(k) == t;
}

static __always_inline int fix_key_eq(const struct qb_flow_key *a, const struct qb_flow_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]) |
		 (x[5] ^ y[5]));
}

/* The flow of `key`: the copy its tag names if that holds the key under the current epoch
 * (its VLAN's tag, or when that serves another flow of the VLAN, its second tag), else the
 * hash's, then copied: into the copy the tag names if that is this key's or stale,
 * else (none, or taken since by a flow of another tag) into the CPU's next copy; a copy that
 * is current for another key of the same tag is left (that flow keeps it; this one uses the
 * hash). The epoch is read before the hash: a copy of what the hash held before a change is
 * tagged with the epoch before the loader's bump, and is never used after it (the atomic read
 * of the CPU's next copy orders the two reads on CPUs that would reorder them). `zero`: the
 * caller's 0 (its stack is full). */
static __always_inline struct qb_flow_action *fix_lookup(const struct qb_flow_key *key,
							 const __u32 *zero)
{
	__u32 i, cpu, t, tv, *tag;
	__u64 *next, n;
	__u64 *ep = bpf_map_lookup_elem(&qb_flow_epoch, zero);
	struct qb_flow_action *act;
	struct qb_flow_ix *e = 0;
	__u64 epoch;

	if (!ep || !*ep)
		return bpf_map_lookup_elem(&qb_flows, key);	/* epoch 0: no index */
	epoch = *ep;
	cpu = bpf_get_smp_processor_id();
	t = fix_slot(key);
	i = cpu * QB_FLOW_IX_TAGS + t;
	tag = bpf_map_lookup_elem(&qb_flow_ix_tags, &i);
	if (!tag)
		return bpf_map_lookup_elem(&qb_flows, key);
	tv = *tag;
	if (tv) {
		i = cpu * QB_FLOW_IX_SIZE + ((tv - 1) & (QB_FLOW_IX_SIZE - 1));
		e = bpf_map_lookup_elem(&qb_flow_ix, &i);
		if (e && e->epoch == epoch && epoch && fix_key_eq(&e->key, key))
			return &e->action;
	}
	/* The VLAN's tag serves another flow of its own: this one's second tag. */
	if (e && e->epoch == epoch && fix_slot(&e->key) == t) {
		t = fix_slot2(key);
		i = cpu * QB_FLOW_IX_TAGS + t;
		tag = bpf_map_lookup_elem(&qb_flow_ix_tags, &i);
		if (!tag)
			return bpf_map_lookup_elem(&qb_flows, key);
		tv = *tag;
		e = 0;
		if (tv) {
			i = cpu * QB_FLOW_IX_SIZE + ((tv - 1) & (QB_FLOW_IX_SIZE - 1));
			e = bpf_map_lookup_elem(&qb_flow_ix, &i);
			if (e && e->epoch == epoch && fix_key_eq(&e->key, key))
				return &e->action;
		}
	}
	next = bpf_map_lookup_elem(&qb_flow_ix_next, zero);
	if (!next)
		return bpf_map_lookup_elem(&qb_flows, key);
	n = __sync_fetch_and_or(next, 0);
	if (e && e->epoch == epoch && !fix_key_eq(&e->key, key)) {
		if (fix_owns(&e->key, t))
			return bpf_map_lookup_elem(&qb_flows, key);	/* its tag's: kept */
		e = 0;		/* taken by a flow of another tag */
	}
	act = bpf_map_lookup_elem(&qb_flows, key);
	if (!act || !epoch)
		return act;
	if (!e) {
		i = n & (QB_FLOW_IX_SIZE - 1);
		*next = i + 1;
		*tag = i + 1;
		i += cpu * QB_FLOW_IX_SIZE;
		e = bpf_map_lookup_elem(&qb_flow_ix, &i);
		if (!e)
			return act;
	}
	__builtin_memcpy(&e->key, key, sizeof(e->key));
	__builtin_memcpy(&e->action, act, sizeof(e->action));
	e->epoch = epoch;
	return &e->action;
}

static __always_inline int is_vlan_tpid(__u16 be)
{
	return be == bpf_htons(ETH_P_8021Q) || be == bpf_htons(ETH_P_8021AD);
}

static __always_inline int miss(struct __sk_buff *skb, __u32 reason, const struct qb_port *port)
{
	__u32 zero = 0;
	struct qb_config *cfg;

	count(reason);
	skb->cb[0] = 0;
	skb->cb[1] = reason + 1;
	if (!port || (port->flags & QB_PORT_EGRESS))
		return TC_ACT_OK;	/* not ours: the stack has it; a TAP's: to its reader */
	cfg = bpf_map_lookup_elem(&qb_config, &zero);
	if (!cfg || !cfg->upcall_ifindex)
		return TC_ACT_OK;
	/* The frame's own tags (an accelerated one included) go inline; the accelerated tag
	 * is now the metadata: its TCI is the ingress port index. */
	if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), (__u16)port->index))
		return TC_ACT_SHOT;
	return bpf_redirect(cfg->upcall_ifindex, BPF_F_INGRESS);
}

/* A copy up to the pipeline (the ingress port in the copy's accelerated tag); the frame
 * itself goes on to the host's stack, as a packet socket's frames do. The tag pushed for the
 * copy is popped again: a tag the frame had inline may come back accelerated, which the stack
 * takes alike. */
static __always_inline int miss_and_pass(struct __sk_buff *skb, __u32 reason,
					 const struct qb_port *port)
{
	__u32 zero = 0;
	struct qb_config *cfg;

	count(reason);
	skb->cb[0] = 0;
	skb->cb[1] = reason + 1;
	if (port->flags & QB_PORT_EGRESS)
		return TC_ACT_OK;	/* a TAP's: its reader is the pipeline */
	cfg = bpf_map_lookup_elem(&qb_config, &zero);
	if (!cfg || !cfg->upcall_ifindex)
		return TC_ACT_OK;
	if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), (__u16)port->index))
		return TC_ACT_OK;
	bpf_clone_redirect(skb, cfg->upcall_ifindex, BPF_F_INGRESS);
	bpf_skb_vlan_pop(skb);
	return TC_ACT_OK;
}

/* A hit on a port `trace live` watches: a copy of the frame as received to the trace device,
 * the port index in the copy's accelerated tag (as an upcall's); the frame goes on. The tag
 * pushed for the copy is popped again, as in miss_and_pass. Packet pointers are stale after
 * this. */
static __always_inline void trace_copy(struct __sk_buff *skb, const struct qb_port *port)
{
	__u32 zero = 0;
	struct qb_config *cfg = bpf_map_lookup_elem(&qb_config, &zero);

	if (!cfg || !cfg->trace_ifindex)
		return;
	if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), (__u16)port->index))
		return;
	bpf_clone_redirect(skb, cfg->trace_ifindex, BPF_F_INGRESS);
	bpf_skb_vlan_pop(skb);
}

/* Length of the IP and TCP/UDP headers at `off` (for a super-frame's segment size), or 0
 * when the fast path does not know them, and then the frame is judged whole. As the pipeline
 * (qbridge_wire::parse_headers) finds them or more: an IPv4 packet that is a fragment, whose
 * version, header or total length is not sound, or that does not fit in the frame's `len`
 * bytes from `off`, or a TCP/UDP header that does not fit in the IP packet, is not measured
 * (the pipeline judges those whole too: a smaller measure would let through a frame it drops
 * as oversize). IPv6 with extension headers is not measured (the pipeline's measure is then
 * larger than this would be, never smaller). */
static __always_inline __u32 l34_len(struct __sk_buff *skb, __u32 off, __u16 proto_be,
				     __u32 len)
{
	__u32 l3, l3_len, l4_proto;

	/* Copied out (bpf_skb_load_bytes), not read in place: a super-frame a local socket
	 * sent has only its headers in the linear part, and pulling more in would copy its
	 * head (TCP keeps a clone of every segment it sends) — see the pull in qb_ingress. */
	if (proto_be == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)))
			return 0;
		if (ip.version != 4 || (ip.frag_off & bpf_htons(0x3fff)))
			return 0;
		l3 = ip.ihl * 4;
		l3_len = bpf_ntohs(ip.tot_len);
		l4_proto = ip.protocol;
	} else if (proto_be == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)))
			return 0;
		if (ip6.version != 6)
			return 0;
		l3 = sizeof(ip6);
		l3_len = sizeof(ip6) + bpf_ntohs(ip6.payload_len);
		l4_proto = ip6.nexthdr;
	} else {
		return 0;
	}
	if (l3 < 20 || l3 > 60 || l3_len < l3 || off + l3_len > len)
		return 0;
	if (l4_proto == IPPROTO_UDP) {
		__u16 udp[4];	/* ports, length, checksum */
		__u32 ulen;
		if (bpf_skb_load_bytes(skb, off + l3, udp, sizeof(udp)))
			return 0;
		ulen = bpf_ntohs(udp[2]);
		if (ulen < 8 || l3 + ulen > l3_len)
			return 0;
		return l3 + 8;
	}
	if (l4_proto == IPPROTO_TCP) {
		struct tcphdr tcp;
		__u32 l4;
		if (bpf_skb_load_bytes(skb, off + l3, &tcp, sizeof(tcp)))
			return 0;
		l4 = tcp.doff * 4;
		if (l4 < 20 || l3 + l4 > l3_len)
			return 0;
		return l3 + l4;
	}
	return 0;
}

/* ---- Bonds (decision 74): the member a bond's queues would pick, and a member's input ---- */

/* A bond's transmit table, by the bond's port id (the daemon writes it with the table it
 * publishes to the bond's queues). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_MAX_BONDS);
	__type(key, __u32);
	__type(value, struct qb_bond);
} qb_bonds SEC(".maps");

/* Each member's frames through the program; key: the bond's slot << 4 | the member's
 * position. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_MAX_BONDS * QB_BOND_MEMBERS);
	__type(key, __u32);
	__type(value, struct qb_member_stats);
} qb_member_stats SEC(".maps");

/* qbridge_wire::Mixer with qbridge_lacp::flow_hash's seed: a multiply-xorshift word mix and
 * murmur3's finaliser, bit for bit. */
#define QB_MIX_K 0x9e3779b97f4a7c15ULL
#define QB_BOND_SEED 0x2545f4914f6cdd1dULL

static __always_inline __u64 bond_mix(__u64 h, __u64 v)
{
	return (((h << 5) | (h >> 59)) ^ v) * QB_MIX_K;
}

static __always_inline __u64 bond_be64(const __u8 *b)
{
	return (__u64)b[0] << 56 | (__u64)b[1] << 48 | (__u64)b[2] << 40 | (__u64)b[3] << 32 |
	       (__u64)b[4] << 24 | (__u64)b[5] << 16 | (__u64)b[6] << 8 | (__u64)b[7];
}

static __always_inline __u32 bond_finish(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (__u32)x;
}

/* What qbridge_wire::parse_headers finds of a frame's L3/L4 (from `off`, after the tags), as
 * the bond's hash reads it. */
struct qb_l34 {
	__u8 addrs[32];		/* source and destination: 8 bytes (IPv4) or 32 (IPv6) */
	__u32 ports;		/* TCP/UDP source << 16 | destination */
	__u8 ok;		/* parse_headers returns Ok */
	__u8 ip;		/* IPv4 or IPv6: addrs and proto hold */
	__u8 v6;
	__u8 proto;
	__u8 has_ports;		/* a whole TCP/UDP packet */
	__u8 encap;		/* VXLAN (UDP 4789), IP-in-IP or IPv6-in-IP: inner-layer3+4 reads on */
};

/* Fills `o` as parse_headers would judge the frame; -1 when the program cannot tell (IPv6
 * extension headers, which the pipeline walks), and the frame goes up. The checks are the
 * wire crate's new_checked ones, in its order. */
static __always_inline int bond_parse(struct __sk_buff *skb, __u32 off, __u16 proto_be,
				      struct qb_l34 *o)
{
	__u32 len = skb->len, l3len, hl, total, l4, l4len;
	__u16 frag;

	o->ok = 0;
	if (off > len)
		return 0;
	l3len = len - off;
	if (proto_be == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (l3len < 20)
			return 0;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)))
			return -1;
		hl = ip.ihl * 4;
		total = bpf_ntohs(ip.tot_len);
		if (ip.version != 4 || hl < 20 || l3len < hl || total < hl || l3len < total)
			return 0;
		o->ok = 1;
		o->ip = 1;
		o->proto = ip.protocol;
		__builtin_memcpy(o->addrs, &ip.saddr, 8);
		frag = bpf_ntohs(ip.frag_off);
		if (frag & 0x3fff)
			return 0;	/* a fragment: no L4 header checked, no ports */
		l4 = off + hl;
		l4len = total - hl;
		if (ip.protocol == IPPROTO_ICMP)
			o->ok = l4len >= 8;
	} else if (proto_be == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		__u8 nh;

		if (l3len < 40)
			return 0;
		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)))
			return -1;
		if (ip6.version != 6 || l3len < 40 + (__u32)bpf_ntohs(ip6.payload_len))
			return 0;
		nh = ip6.nexthdr;
		/* Hop-by-hop, routing, fragment, AH, destination options: walked by the pipeline. */
		if (nh == 0 || nh == 43 || nh == 44 || nh == 51 || nh == 60)
			return -1;
		o->ok = 1;
		o->ip = 1;
		o->v6 = 1;
		o->proto = nh;
		__builtin_memcpy(o->addrs, &ip6.saddr, 32);
		if (nh == 59)
			return 0;	/* no next header: no L4 */
		l4 = off + 40;
		l4len = bpf_ntohs(ip6.payload_len);
		if (nh == 58)
			o->ok = l4len >= 8;
	} else {
		o->ok = 1;
		return 0;
	}
	if (o->proto == 4 || o->proto == 41)
		o->encap = 1;
	if (o->proto == IPPROTO_TCP) {
		__u8 tcp[13];

		if (l4len < 20) {
			o->ok = 0;
			return 0;
		}
		if (bpf_skb_load_bytes(skb, l4, tcp, sizeof(tcp)))
			return -1;
		if ((tcp[12] >> 4) < 5 || l4len < (__u32)(tcp[12] >> 4) * 4) {
			o->ok = 0;
			return 0;
		}
		o->ports = (__u32)tcp[0] << 24 | (__u32)tcp[1] << 16 | (__u32)tcp[2] << 8 | tcp[3];
		o->has_ports = 1;
	} else if (o->proto == IPPROTO_UDP) {
		__u8 udp[6];
		__u32 ulen;

		if (l4len < 8) {
			o->ok = 0;
			return 0;
		}
		if (bpf_skb_load_bytes(skb, l4, udp, sizeof(udp)))
			return -1;
		ulen = (__u32)udp[4] << 8 | udp[5];
		if (ulen < 8 || l4len < ulen) {
			o->ok = 0;
			return 0;
		}
		o->ports = (__u32)udp[0] << 24 | (__u32)udp[1] << 16 | (__u32)udp[2] << 8 | udp[3];
		o->has_ports = 1;
		if ((o->ports & 0xffff) == 4789)
			o->encap = 1;
	}
	return 0;
}

/* qbridge_lacp::flow_hash(frame as it leaves, policy) for a frame whose L3 starts at `off`,
 * leaving with the action's tags; -1: the program leaves it to the pipeline. */
static __always_inline int bond_hash(struct __sk_buff *skb, const struct ethhdr *eth,
				     const struct qb_flow_key *key,
				     const struct qb_flow_action *act, __u32 off, __u32 policy,
				     __u32 *out)
{
	struct qb_l34 l = {};
	__u64 h = QB_BOND_SEED;
	const __u8 *m = eth->h_dest;
	int i;

	/* layer2 of an untagged frame reads the same EtherType whether its headers parse or
	 * not: no need to read them. */
	if ((policy != QB_HASH_L2 && policy != QB_HASH_L2_VLAN) || act->push_n) {
		if (bond_parse(skb, off, key->ethertype_be, &l))
			return -1;
	} else {
		l.ok = 1;
	}
	if ((policy == QB_HASH_L34 || policy == QB_HASH_INNER_L34) && l.ok && l.ip) {
		if (policy == QB_HASH_INNER_L34 && l.encap)
			return -1;
		if (l.v6) {
#pragma unroll
			for (i = 0; i < 4; i++)
				h = bond_mix(h, bond_be64(&l.addrs[8 * i]));
		} else {
			h = bond_mix(h, bond_be64(l.addrs));
		}
		h = bond_mix(h, 0);	/* add_bytes' empty tail */
		h = bond_mix(h, l.proto);
		if (l.has_ports)
			h = bond_mix(h, l.ports);
		*out = bond_finish(h);
		return 0;
	}
	/* layer2 (and layer3+4's fallback): the MACs, then the EtherType after the tags, or the
	 * frame's bytes 12-13 when its headers do not parse; layer2+vlan adds the outer VID. */
	h = bond_mix(h, bond_be64(m));
	h = bond_mix(h, ((__u64)m[8] << 56 | (__u64)m[9] << 48 | (__u64)m[10] << 40 |
			 (__u64)m[11] << 32) ^ (4ULL << 56));
	if (l.ok) {
		h = bond_mix(h, bpf_ntohs(key->ethertype_be));
		if (policy == QB_HASH_L2_VLAN && act->push_n)
			h = bond_mix(h, (bpf_ntohs(act->push_tci_be[0]) & 0xfff) | 1 << 16);
	} else {
		h = bond_mix(h, bpf_ntohs(act->push_n ? act->push_tpid_be[0] : key->ethertype_be));
	}
	*out = bond_finish(h);
	return 0;
}

/* The member of the flow's bond (its last hop's egress port) for this frame, or 0 (a miss);
 * the frame (`len` bytes as it leaves) is counted on it. */
static __always_inline __u32 bond_out(struct __sk_buff *skb, const struct ethhdr *eth,
				      const struct qb_flow_key *key,
				      const struct qb_flow_action *act, __u32 off, __u32 len)
{
	__u32 id = act->hops[(act->n_hops - 1) & (QB_MAX_HOPS - 1)].out_port & QB_PORT_ID_MASK;
	struct qb_bond *b = bpf_map_lookup_elem(&qb_bonds, &id);
	struct qb_member_stats *ms;
	__u32 hash, k, ifindex;

	if (!b || bond_hash(skb, eth, key, act, off, b->policy, &hash))
		return 0;
	hash &= QB_BOND_BUCKETS - 1;
	ifindex = b->member_ifindex[hash];
	k = (b->slot & (QB_MAX_BONDS - 1)) << 4 | (b->member_pos[hash] & 0xf);
	ms = bpf_map_lookup_elem(&qb_member_stats, &k);
	if (ms && ifindex) {
		ms->tx_frames += 1;
		ms->tx_bytes += len;
	}
	return ifindex;
}

/* A frame on a bond member's interface: -1 when it goes on as the bond's frame, else the TC
 * verdict. Slow Protocols frames (untagged, to 01:80:c2:00:00:02, EtherType 0x8809) pass to
 * the member's socket; a member that does not collect drops the rest. */
static __always_inline int bond_member_in(struct __sk_buff *skb, const struct qb_port *port,
					  const struct ethhdr *eth)
{
	__u32 k;
	struct qb_member_stats *ms;

	skb->cb[0] = 0;
	skb->cb[1] = 0;
	if (!skb->vlan_present && eth->h_proto == bpf_htons(0x8809) &&
	    eth->h_dest[0] == 0x01 && eth->h_dest[1] == 0x80 && eth->h_dest[2] == 0xc2 &&
	    eth->h_dest[3] == 0 && eth->h_dest[4] == 0 && eth->h_dest[5] == 0x02)
		return TC_ACT_OK;
	k = (port->flags >> QB_PORT_MEMBER_SHIFT) & 0xfff;	/* slot << 4 | position */
	ms = bpf_map_lookup_elem(&qb_member_stats, &k);
	if (port->flags & QB_PORT_COLLECTING) {
		/* The bond's frame from here (forwarded by the program or sent up). */
		if (ms) {
			ms->rx_frames += 1;
			ms->rx_bytes += skb->len + (skb->vlan_present ? 4 : 0);
		}
		return -1;
	}
	if (ms)
		ms->rx_not_collecting += 1;
	return TC_ACT_SHOT;
}

/* ---- VXLAN encapsulation (decision 73; docs/fast-path.md, "VXLAN") ----
 * A flow to a VXLAN port leaves the way the port's userspace VTEP sends it: the inner frame
 * (untagged: the flow's tag edit left it so) in a VXLAN header of the tunnel's VNI, UDP from
 * the send socket the inner flow hash selects, IPv4 with DF, id 0, the socket's TTL and TOS
 * (or the inner packet's, `tos inherit`), to the neighbour of the route to the remote VTEP.
 * The outer UDP checksum is 0 (RFC 7348 §5; the userspace socket computes one): a
 * super-frame stays whole (SKB_GSO_UDP_TUNNEL), which a checksum would forbid from here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QB_MAX_TUNNELS);
	__type(key, __u32);
	__type(value, struct qb_vxlan);
} qb_vxlan SEC(".maps");

/* vxl_: learned remotes (decision 83; fastpath.h, struct qb_vxl_remote). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_VXL_MAX);
	__type(key, struct qb_vxd_src_key);
	__type(value, struct qb_vxl_remote);
} qb_vxl_learned SEC(".maps");

/* vxl_: two IPv6 addresses (8-aligned: a map value's, a tunnel's) equal. */
static __always_inline int vxl_same6(const __u8 *a, const __u8 *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1];
}

/* A flow through a learned remote's tunnel t: whether the port's table still has the frame's
 * destination behind that remote, unaged. */
static __always_inline int vxl_remote_ok(struct __sk_buff *skb, const struct qb_vxlan *t)
{
	struct qb_vxd_src_key k = {};
	struct qb_vxl_remote *r;

	k.port = t->vxl_port;
	k.vni_be = t->vni_be;
	if (bpf_skb_load_bytes(skb, 0, k.mac, 6))
		return 0;
	r = bpf_map_lookup_elem(&qb_vxl_learned, &k);
	if (!r || bpf_ktime_get_coarse_ns() >= r->deadline_ns)
		return 0;
	/* An IPv6 underlay's tunnel: the entry an IPv6 one naming remote6. */
	if (t->flags & QB_VX_IPV6)
		return (r->flags & QB_VXL_IPV6) && vxl_same6(r->remote6, t->remote6);
	return !(r->flags & QB_VXL_IPV6) && r->remote_be == t->remote_be;
}

/* A learning port's frame whose inner source k is not static: 0 if the table has it behind
 * the outer source (IPv4's, or an IPv6 outer's against an IPv6 entry; its last-seen time
 * refreshed), else why it goes up. */
static __always_inline __u32 vxl_src(struct __sk_buff *skb, const struct qb_vxd_src_key *k,
				     __u64 now)
{
	struct qb_vxl_remote *r = bpf_map_lookup_elem(&qb_vxl_learned, k);
	__u64 src6[2];
	__u32 remote_be;

	if (!r)
		return QB_VXD_SRC;
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 8, src6, 16))
			return QB_VXD_SRC;
		if (!(r->flags & QB_VXL_IPV6) || !vxl_same6(r->remote6, (const __u8 *)src6))
			return QB_VXD_MOVED;
	} else {
		if (skb->protocol != bpf_htons(ETH_P_IP) ||
		    bpf_skb_load_bytes(skb, ETH_HLEN + 12, &remote_be, 4))
			return QB_VXD_SRC;
		if ((r->flags & QB_VXL_IPV6) || r->remote_be != remote_be)
			return QB_VXD_MOVED;
	}
	if (now > r->last_seen_ns && now - r->last_seen_ns > NS_PER_REFRESH)
		r->last_seen_ns = now;
	return 0;
}

/* qbridge_wire::Mixer: the flow hash's accumulator and its finaliser. */
static __always_inline __u64 vx_mix(__u64 s, __u64 v)
{
	return (((s << 5) | (s >> 59)) ^ v) * 0x9e3779b97f4a7c15ULL;
}

static __always_inline __u32 vx_finish(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (__u32)x;
}

static __always_inline __u64 vx_be64(const __u8 *b)
{
	return ((__u64)b[0] << 56) | ((__u64)b[1] << 48) | ((__u64)b[2] << 40) |
	       ((__u64)b[3] << 32) | ((__u64)b[4] << 24) | ((__u64)b[5] << 16) |
	       ((__u64)b[6] << 8) | (__u64)b[7];
}

/* The inner frame's flow hash as qbridge_wire::flow_hash computes it on the frame the
 * userspace VTEP sends (untagged, its L3 header at `off` here, `avail` bytes from there),
 * and its TOS for `tos inherit` (qbridge_wire::vxlan::inherited_tos). Returns 0, or -1 for a
 * frame whose hash the program leaves to the pipeline (a header the pipeline's parser would
 * refuse, IPv6 extension headers): such a frame goes up. */
static __always_inline int vx_hash(struct __sk_buff *skb, __u32 off, __u16 proto_be,
				   __u32 avail, __u32 *hash, __u8 *tos, __u8 *b, __u64 seed)
{
	__u64 m = seed;	/* vxq_seed: the hash's seed, the inner tags' VIDs mixed in */
	__u32 l4 = 0, l4_len = 0, l4_proto;
	int whole = 1;

	*tos = 0;
	if (proto_be == bpf_htons(ETH_P_IP)) {
		__u32 hl, tot;
		__u16 frag;

		if (avail < 20 || bpf_skb_load_bytes(skb, off, b, 20))
			return -1;
		hl = (b[0] & 0xf) * 4;
		tot = ((__u32)b[2] << 8) | b[3];
		if ((b[0] >> 4) != 4 || hl < 20 || avail < hl || tot < hl || avail < tot)
			return -1;
		*tos = b[1];
		frag = ((__u16)b[6] << 8) | b[7];
		whole = !(frag & 0x3fff);
		l4_proto = b[9];
		l4 = off + hl;
		l4_len = tot - hl;
		m = vx_mix(m, vx_be64(b + 12));
		m = vx_mix(m, 0);
	} else if (proto_be == bpf_htons(ETH_P_IPV6)) {
		__u32 plen;

		if (avail < 40 || bpf_skb_load_bytes(skb, off, b, 40))
			return -1;
		plen = ((__u32)b[4] << 8) | b[5];
		if ((b[0] >> 4) != 6 || avail < 40 + plen)
			return -1;
		*tos = (b[0] << 4) | (b[1] >> 4);
		l4_proto = b[6];
		if (l4_proto != IPPROTO_TCP && l4_proto != IPPROTO_UDP && l4_proto != 58)
			return -1;	/* extension headers: the pipeline walks them */
		l4 = off + 40;
		l4_len = plen;
		m = vx_mix(m, vx_be64(b + 8));
		m = vx_mix(m, vx_be64(b + 16));
		m = vx_mix(m, vx_be64(b + 24));
		m = vx_mix(m, vx_be64(b + 32));
		m = vx_mix(m, 0);
	} else {
		/* Not IP: the addresses and the EtherType. */
		if (bpf_skb_load_bytes(skb, 0, b, 12))
			return -1;
		m = vx_mix(m, vx_be64(b));
		m = vx_mix(m, (((__u64)b[8] << 56) | ((__u64)b[9] << 48) | ((__u64)b[10] << 40) |
			       ((__u64)b[11] << 32)) ^ (4ULL << 56));
		m = vx_mix(m, bpf_ntohs(proto_be));
		*hash = vx_finish(m);
		return 0;
	}
	m = vx_mix(m, l4_proto);
	if (whole && (l4_proto == IPPROTO_TCP || l4_proto == IPPROTO_UDP)) {
		__u32 hl;

		if (bpf_skb_load_bytes(skb, l4, b, 20 < l4_len ? 20 : 8))
			return -1;
		if (l4_proto == IPPROTO_TCP) {
			hl = (b[12] >> 4) * 4;
			if (l4_len < 20 || hl < 20 || l4_len < hl)
				return -1;
		} else {
			hl = ((__u32)b[4] << 8) | b[5];
			if (l4_len < 8 || hl < 8 || l4_len < hl)
				return -1;
		}
		m = vx_mix(m, ((__u64)b[0] << 24) | ((__u64)b[1] << 16) | ((__u64)b[2] << 8) |
			      (__u64)b[3]);
	} else if (whole && (l4_proto == IPPROTO_ICMP || l4_proto == 58) && l4_len < 8) {
		return -1;	/* the pipeline's parser refuses it: its hash is another */
	}
	*hash = vx_finish(m);
	return 0;
}

/* The outer headers of a flow to tunnel `t`, built before the frame is touched (so that a
 * frame the program cannot send goes up as it came): the source port, the TOS, the lengths.
 * The outer Ethernet addresses are the neighbour's, filled in by bpf_redirect_neigh (the
 * route to the remote looked up on the tunnel's underlay interface; an unresolved
 * neighbour is resolved as for the host's own packets). `len`: the whole inner frame's
 * length. Returns 0 or a miss reason + 1. */
struct qb_vx_out {
	__u32 ifindex;
	__u32 pad;
	__u8 hdr[64];	/* outer Ethernet, IPv4, UDP, VXLAN; the inner Ethernet header */
	__u8 b[40];	/* the inner headers, copied out */
	__u32 v6;	/* the outer headers are hdr6 (decision 78) */
	__u8 hdr6[88];	/* outer Ethernet, IPv6, UDP, VXLAN; the inner Ethernet header */
	__u8 chunk[516];	/* vx6_csum's bytes, */
	__u32 s_from, s_left, s_acc;	/* and its state */
	/* Q-in-VNI (decision 86): the inner frame's tags (vxq_prepare), 0 ..= QB_MAX_TAGS, as
	 * bytes (outer first), and the outer headers with the inner Ethernet header and tags. */
	__u32 qn;
	__u8 q[4 * QB_MAX_TAGS];
	__u8 hdrq[72 + 14 + 4 * QB_MAX_TAGS];
};

/* The scratch of one frame's encapsulation (per CPU: the stack is the other paths'). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qb_vx_out);
} qb_vx_scratch SEC(".maps");

/* ---- VXLAN over IPv6 underlays (decision 78) ----
 * A tunnel with QB_VX_IPV6 leaves as the port's IPv6 send socket sends it: outer IPv6 with
 * the socket's traffic class (fixed, or the inner packet's: `tos inherit`), the tunnel's flow
 * label for that socket, its hop limit; UDP from the socket's port with a valid checksum (a
 * peer at its defaults refuses a zero one over IPv6, RFC 6935). The checksum is computed here
 * without segmenting: a frame whose inner TCP/UDP checksum is still to be completed by offload
 * (CHECKSUM_PARTIAL) sums, once completed, to the complement of its checksum field as it is
 * now (the kernel's local checksum offload, lco_csum), so only the headers before it are
 * read; any other frame is summed whole, as the socket would (bpf_csum_diff, 512 bytes at a
 * time). A super-frame goes up: bpf_skb_adjust_room marks it SKB_GSO_UDP_TUNNEL without
 * _CSUM, so its segments would all carry the checksum written here (docs/fast-path.md). */
#define QB_VX6_HDR 84		/* outer Ethernet 14, IPv6 40, UDP 8, VXLAN 8; inner Ethernet 14 */
#define QB_VX6_CHUNK 512	/* bpf_csum_diff's most bytes a call */
#define QB_VX6_CHUNKS 18	/* frames up to 9216 bytes are summed; longer ones go up */

/* The skb's checksum state, asked through the helpers that read it: 1 when its L4 checksum
 * is left to offload (CHECKSUM_PARTIAL), else 0 (NONE, UNNECESSARY, COMPLETE). NONE is told
 * from PARTIAL by raising the level (NONE becomes UNNECESSARY, PARTIAL stays) and put back. */
static __always_inline int vx6_partial(struct __sk_buff *skb)
{
	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) >= 0)
		return 0;
	if (bpf_csum_update(skb, 0) >= 0)
		return 0;
	bpf_csum_level(skb, BPF_CSUM_LEVEL_INC);
	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) >= 0) {
		bpf_csum_level(skb, BPF_CSUM_LEVEL_RESET);
		return 0;
	}
	return 1;
}

/* The one's complement sum (as bpf_csum_diff keeps it) of the skb's bytes [from, to), `from`
 * even, added to `seed`: QB_VX6_CHUNK bytes a bpf_csum_diff, the last zero-padded to a multiple
 * of 4; -1 when longer than QB_VX6_CHUNKS chunks or unreadable. A global function: the
 * verifier checks it once, on its own, instead of its loop once per path of the caller; its
 * state is kept in the scratch (`o`), the caller's stack leaving it little. */
__attribute__((noinline)) long vx6_csum(struct __sk_buff *skb, __u32 from, __u32 to, __u32 seed,
				       struct qb_vx_out *o)
{
	__u32 i, n;
	__s64 r;

	if (!skb || !o || to < from || to - from > QB_VX6_CHUNK * QB_VX6_CHUNKS)
		return -1;
	o->s_from = from;
	o->s_left = to - from;
	o->s_acc = seed;
	for (i = 0; i < QB_VX6_CHUNKS && o->s_left; i++) {
		/* 1 ..= 512, as the verifier sees it (clang drops a plain clamp's mask). */
		n = o->s_left < QB_VX6_CHUNK ? o->s_left : QB_VX6_CHUNK;
		n -= 1;
		asm volatile("%0 &= 511" : "+r"(n));
		n += 1;
		if (bpf_skb_load_bytes(skb, o->s_from, o->chunk, n))
			break;
		/* Zeros to the next multiple of 4: they add nothing. */
		o->chunk[n] = 0;
		o->chunk[n + 1] = 0;
		o->chunk[n + 2] = 0;
		o->s_from += n;
		o->s_left -= n;
		r = bpf_csum_diff(0, 0, (__be32 *)o->chunk, (n + 3) & ~3U, o->s_acc);
		if (r < 0) {
			o->s_left = 1;
			break;
		}
		o->s_acc = r;
	}
	return o->s_left ? -1 : (long)o->s_acc;
}

/* The outer headers of `o` (o->hdr6) for IPv6 tunnel `t`: `len` the inner frame's length,
 * `sock` the send socket the inner flow picks, `tos` the traffic class. The UDP checksum over
 * the pseudo-header, UDP, VXLAN, the inner Ethernet header (the frame's addresses, untagged)
 * and the inner packet from `off`. Returns 0 or a miss reason + 1. */
static __always_inline int vx6_prepare(struct __sk_buff *skb, const struct qb_vxlan *t,
				       __u32 off, __u16 proto_be, __u32 len, struct qb_vx_out *o,
				       __u32 sock, __u8 tos)
{
	__u8 *h = o->hdr6, *buf = o->chunk;
	__u32 plen = len + 16, label, l3, l4 = 0, field = 0;
	__s64 acc;
	__u64 s;
	__u16 c;

	if (plen > 0xffff || skb->gso_size || skb->len <= off)
		return QB_MISS_VXLAN + 1;
	o->v6 = 1;
	o->ifindex = t->ifindex;
	label = bpf_ntohl(t->flow_label_be[sock & (QB_VXLAN_SOCKETS - 1)]) & 0xfffff;
	/* Outer Ethernet: the addresses are bpf_redirect_neigh's to fill. */
	__builtin_memset(h, 0, 12);
	h[12] = 0x86;
	h[13] = 0xdd;
	h[14] = 0x60 | (tos >> 4);
	h[15] = (tos << 4) | (label >> 16);
	h[16] = label >> 8;
	h[17] = label;
	h[18] = plen >> 8;
	h[19] = plen;
	h[20] = IPPROTO_UDP;
	h[21] = t->ttl;
	__builtin_memcpy(h + 22, t->local6, 16);
	__builtin_memcpy(h + 38, t->remote6, 16);
	/* UDP: the socket's port, the VTEP's, the length; the checksum below. */
	__builtin_memcpy(h + 54, &t->sport_be[sock & (QB_VXLAN_SOCKETS - 1)], 2);
	__builtin_memcpy(h + 56, &t->dstport_be, 2);
	h[58] = plen >> 8;
	h[59] = plen;
	h[60] = 0;
	h[61] = 0;
	/* VXLAN: flags I, the VNI. */
	h[62] = 0x08;
	h[63] = 0;
	h[64] = 0;
	h[65] = 0;
	__builtin_memcpy(h + 66, &t->vni_be, 4);
	/* The inner Ethernet header as it will leave (vx6_encap copies it again, untagged). */
	if (bpf_skb_load_bytes(skb, 0, h + 70, 12))
		return QB_MISS_VXLAN + 1;
	__builtin_memcpy(h + 82, &proto_be, 2);
	h[84] = 0;
	h[85] = 0;

	/* Where the inner packet's own checksum is left to offload: TCP or UDP, its header
	 * right after an IPv4 header or a plain IPv6 one, nothing after the IP packet. */
	l3 = 0;
	if (vx6_partial(skb)) {
		__u8 *b = o->b;

		if (proto_be == bpf_htons(ETH_P_IP)) {
			if (bpf_skb_load_bytes(skb, off, b, 20))
				return QB_MISS_VXLAN + 1;
			l3 = (b[0] & 0xf) * 4;
			if (off + (((__u32)b[2] << 8) | b[3]) != skb->len || (b[6] & 0x3f) || b[7])
				return QB_MISS_VXLAN + 1;
		} else {
			if (bpf_skb_load_bytes(skb, off, b, 8))
				return QB_MISS_VXLAN + 1;
			l3 = 40;
			b[9] = b[6];
			if (off + 40 + (((__u32)b[4] << 8) | b[5]) != skb->len)
				return QB_MISS_VXLAN + 1;
		}
		if (l3 < 20 || l3 > 60)
			return QB_MISS_VXLAN + 1;
		l4 = off + l3;
		if (b[9] == IPPROTO_TCP)
			field = l4 + 16;
		else if (b[9] == IPPROTO_UDP)
			field = l4 + 6;
		else
			return QB_MISS_VXLAN + 1;
	}

	/* The pseudo-header: the addresses, the UDP length, the next header. */
	acc = bpf_csum_diff(0, 0, (__be32 *)(h + 22), 32, 0);
	buf[0] = 0;
	buf[1] = 0;
	buf[2] = plen >> 8;
	buf[3] = plen;
	buf[4] = 0;
	buf[5] = 0;
	buf[6] = 0;
	buf[7] = IPPROTO_UDP;
	if (acc < 0)
		return QB_MISS_VXLAN + 1;
	acc = bpf_csum_diff(0, 0, (__be32 *)buf, 8, (__wsum)acc);
	/* UDP (checksum 0), VXLAN, the inner Ethernet header, two zeros. */
	if (acc >= 0)
		acc = bpf_csum_diff(0, 0, (__be32 *)(h + 54), 32, (__wsum)acc);
	/* vxq_: the inner tags (between the addresses and the EtherType: even offsets, so
	 * their words sum alike here). */
	if (acc >= 0 && o->qn)
		acc = bpf_csum_diff(0, 0, (__be32 *)o->q, o->qn > 1 ? 8 : 4, (__wsum)acc);
	if (acc < 0)
		return QB_MISS_VXLAN + 1;
	if (field) {
		/* The inner IP header, then what the completed L4 segment sums to (the field
		 * read into the scratch: the stack is the caller's). */
		acc = vx6_csum(skb, off, l4, (__u32)acc, o);
		if (acc < 0 || bpf_skb_load_bytes(skb, field, o->b, 2))
			return QB_MISS_VXLAN + 1;
		s = (__u64)(__u32)acc + (__u16)~*(__u16 *)o->b;
	} else {
		acc = vx6_csum(skb, off, skb->len, (__u32)acc, o);
		if (acc < 0)
			return QB_MISS_VXLAN + 1;
		s = (__u32)acc;
	}
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	c = ~(__u16)s;
	if (!c)
		c = 0xffff;	/* a computed 0 is sent as all ones (RFC 8200 §8.1) */
	*(__u16 *)(h + 60) = c;	/* (one's complement sums keep memory order) */
	return 0;
}

/* ---- Q-in-VNI: tagged inner frames (decision 86; docs/fast-path.md, "VXLAN") ----
 * A flow to a VXLAN port whose inner frame keeps tags (an 802.1ad bridge's S-VLAN mapped to a
 * VNI: the customer's C-tag rides inside) pushes them inside the tunnel, not on the skb: its
 * tags are all popped first (an accelerated tag at the redirect would be the OUTER frame's,
 * and bpf_skb_adjust_room encapsulates only an skb whose protocol is IP), then the room made
 * in front of the inner L3 header takes the outer headers and the inner tags, the inner L2
 * length (BPF_F_ADJ_ROOM_ENCAP_L2) counting them, so that segmentation finds the inner IP
 * header (skb_mac_gso_segment walks the tags from the inner MAC length). The outer source
 * port is the socket's: qbridge_wire::flow_hash mixes each tag's VID before the addresses. */

/* The flow's pushed tags as the inner frame's (o->q, o->qn), and the flow hash's seed with
 * their VIDs mixed in, outer first (qbridge_wire::flow_hash). */
static __always_inline __u64 vxq_prepare(const struct qb_flow_action *act, struct qb_vx_out *o)
{
	__u64 m = 0x517cc1b727220aULL;
	__u32 i;

	o->qn = 0;
#pragma unroll
	for (i = 0; i < QB_MAX_TAGS; i++) {
		if (i >= act->push_n)
			break;
		__builtin_memcpy(o->q + 4 * i, &act->push_tpid_be[i], 2);
		__builtin_memcpy(o->q + 4 * i + 2, &act->push_tci_be[i], 2);
		m = vx_mix(m, bpf_ntohs(act->push_tci_be[i]) & 0xfff);
		o->qn = i + 1;
	}
	return m;
}

/* The outer headers `outer` (`olen` bytes), the inner addresses, `n` tags and EtherType: room
 * of olen + 4n bytes in front of the (untagged) frame's L3 header, then olen + 14 + 4n bytes
 * written at its start. Returns 0, 1 when refused before the frame changed, -1 after. */
static __always_inline int vxq_put(struct __sk_buff *skb, struct qb_vx_out *o,
				   const __u8 *outer, __u32 olen, __u64 l3, __u32 n)
{
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | l3 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
		      BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN + 4 * n);
	__u8 *h = o->hdrq;

	__builtin_memcpy(h, outer, olen);
	if (bpf_skb_load_bytes(skb, 0, h + olen, ETH_HLEN))
		return 1;
	/* The EtherType after the tags. */
	h[olen + 12 + 4 * n] = h[olen + 12];
	h[olen + 13 + 4 * n] = h[olen + 13];
	__builtin_memcpy(h + olen + 12, o->q, 4 * n);
	if (bpf_skb_adjust_room(skb, olen + 4 * n, BPF_ADJ_ROOM_MAC, flags))
		return 1;
	return bpf_skb_store_bytes(skb, 0, h, olen + ETH_HLEN + 4 * n, BPF_F_INVALIDATE_HASH) ?
		       -1 : 0;
}

static __always_inline int vxq_encap(struct __sk_buff *skb, struct qb_vx_out *o)
{
	if (o->v6) {
		if (o->qn > 1)
			return vxq_put(skb, o, o->hdr6, 70, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, 2);
		return vxq_put(skb, o, o->hdr6, 70, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, 1);
	}
	if (o->qn > 1)
		return vxq_put(skb, o, o->hdr, 50, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, 2);
	return vxq_put(skb, o, o->hdr, 50, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, 1);
}

/* vx_encap over IPv6: 70 bytes of room before the inner frame's L3 header, then the 84
 * bytes of o->hdr6 at the start (the inner Ethernet header reread as it is now). */
static __always_inline int vx6_encap(struct __sk_buff *skb, struct qb_vx_out *o)
{
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 |
		      BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		      BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN);

	if (o->qn)
		return vxq_encap(skb, o);
	if (bpf_skb_load_bytes(skb, 0, o->hdr6 + 70, ETH_HLEN))
		return 1;
	if (bpf_skb_adjust_room(skb, 70, BPF_ADJ_ROOM_MAC, flags))
		return 1;
	return bpf_skb_store_bytes(skb, 0, o->hdr6, QB_VX6_HDR, BPF_F_INVALIDATE_HASH) ? -1 : 0;
}

/* ---- vxo_: the order of a flow's frames when some go up (decision 91) ----
 * A frame of an installed flow that goes up for a reason of its own (to an IPv6 tunnel: a
 * super-frame, too long or unsummable in vx6_prepare) is queued in the daemon; the flow's next
 * frames, taken by the program at once, would overtake it (802.1Q keeps the order of a flow's
 * frames; TCP reads overtaking as loss). So such a frame notes, in the slot of its inner flow
 * hash (the one that picks the socket), a deadline: now + the window; a frame of the flow that
 * finds its deadline not passed goes up too (QB_MISS_ORDER) and moves it on. The flow's frames
 * come back to the program once none went up for a window: the daemon's queue has drained. A
 * collision of two flows in a slot only sends more frames up. */
#define QB_ORDER_SLOTS 4096
/* The daemon's queueing delay, with room: docs/decisions.md, decision 91. */
#define QB_ORDER_WINDOW_NS (20ULL * 1000 * 1000)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QB_ORDER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} qb_order SEC(".maps");

/* The window in ns: 0 for QB_ORDER_WINDOW_NS, all ones for none (the keeper off); the tests'
 * and measurements' knob. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} qb_order_window SEC(".maps");

/* Whether the frame of inner flow hash `hash` through tunnel `tunnel` must go up behind an
 * earlier one (its deadline then moved on); `up`: the frame goes up for its own reason (the
 * deadline set). A global function: verified once, one call on the caller's path. */
__attribute__((noinline)) int vxo_order(__u32 hash, __u32 tunnel, __u32 up)
{
	__u32 i = (hash ^ (tunnel * 0x9e3779b1U)) & (QB_ORDER_SLOTS - 1), zero = 0;
	__u64 *until = bpf_map_lookup_elem(&qb_order, &i), *w, now;

	if (!until || (!up && !*until))
		return 0;
	now = bpf_ktime_get_coarse_ns();
	if (!up && now >= *until)
		return 0;
	w = bpf_map_lookup_elem(&qb_order_window, &zero);
	if (w && *w == ~0ULL)
		return 0;	/* the keeper off (measurements) */
	*until = now + (w && *w ? *w : QB_ORDER_WINDOW_NS);
	return 1;
}

/* vx6_prepare's verdict `r`, the flow's deadline set when it sends the frame up. */
static __always_inline int vxo_up(int r, __u32 hash, __u32 tunnel)
{
	if (r)
		vxo_order(hash, tunnel, 1);
	return r;
}

static __always_inline int vx_prepare(struct __sk_buff *skb, const struct qb_flow_action *act,
				      __u32 off, __u16 proto_be, __u32 len, struct qb_vx_out *o)
{
	__u32 idx = act->out_ifindex, hash, sum, i;
	struct qb_vxlan *t = bpf_map_lookup_elem(&qb_vxlan, &idx);
	__u8 tos, *h = o->hdr;
	__u16 sport;

	o->v6 = 0;

	/* Only IP frames: bpf_skb_adjust_room encapsulates those alone. The inner frame's tags
	 * (Q-in-VNI, decision 86) are the flow's pushed tags, written inside (vxq_encap). */
	if (!t || act->push_n > QB_MAX_TAGS || len + 36 > 0xffff || skb->len < off ||
	    (proto_be != bpf_htons(ETH_P_IP) && proto_be != bpf_htons(ETH_P_IPV6)))
		return QB_MISS_VXLAN + 1;
	/* vxl_: a learned remote, while the port's table has it (else: the pipeline's). */
	if ((t->flags & QB_VX_LEARNED) && !vxl_remote_ok(skb, t))
		return QB_MISS_DST + 1;
	if (vx_hash(skb, off, proto_be, skb->len - off, &hash, &tos, o->b, vxq_prepare(act, o)))
		return QB_MISS_VXLAN + 1;
	if (t->flags & QB_VX_INHERIT_TOS) {
		if ((tos & 3) == 3)
			tos = (tos & ~3) | 2;
	} else {
		tos = t->tos;
	}
	sport = t->sport_be[(hash ^ (hash >> 16)) & (QB_VXLAN_SOCKETS - 1)];
	/* The underlay's MTU as it is now (the flow's max_len holds the one read when the port
	 * opened): a longer outer packet goes up, where the socket refuses it (tx_too_long).
	 * The outer IP length in the scratch (the stack is full); super-frames are judged by
	 * max_len alone. */
	if (!skb->gso_size) {
		o->s_left = len + (t->flags & QB_VX_IPV6 ? 56 : 36);
		if (bpf_check_mtu(skb, t->ifindex, &o->s_left, 0, 0))
			return QB_MISS_VXLAN + 1;
	}
	if (t->flags & QB_VX_IPV6) {
		/* vxo_: behind a frame of the flow that went up, up too (decision 91); a
		 * super-frame goes up anyway, counted as such (vx6_prepare). */
		if (!skb->gso_size && vxo_order(hash, idx, 0))
			return QB_MISS_ORDER + 1;
		return vxo_up(vx6_prepare(skb, t, off, proto_be, len, o, hash ^ (hash >> 16), tos),
			      hash, idx);
	}
	o->ifindex = t->ifindex;
	/* Outer Ethernet: the addresses are bpf_redirect_neigh's to fill. */
	__builtin_memset(h, 0, 12);
	h[12] = 0x08;
	h[13] = 0x00;
	/* IPv4: no options, DF, id 0 (an unconnected socket's with DF), protocol UDP. */
	h[14] = 0x45;
	h[15] = tos;
	h[16] = (len + 36) >> 8;
	h[17] = (len + 36) & 0xff;
	h[18] = 0;
	h[19] = 0;
	h[20] = 0x40;
	h[21] = 0;
	h[22] = t->ttl;
	h[23] = IPPROTO_UDP;
	h[24] = 0;
	h[25] = 0;
	__builtin_memcpy(h + 26, &t->local_be, 4);
	__builtin_memcpy(h + 30, &t->remote_be, 4);
	sum = 0;
#pragma unroll
	for (i = 0; i < 10; i++)
		sum += ((__u32)h[14 + 2 * i] << 8) | h[15 + 2 * i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum & 0xffff;
	h[24] = sum >> 8;
	h[25] = sum & 0xff;
	/* UDP: the socket's port, the VTEP's port, the length; checksum 0. */
	__builtin_memcpy(h + 34, &sport, 2);
	__builtin_memcpy(h + 36, &t->dstport_be, 2);
	h[38] = (len + 16) >> 8;
	h[39] = (len + 16) & 0xff;
	h[40] = 0;
	h[41] = 0;
	/* VXLAN: flags I, the VNI. */
	h[42] = 0x08;
	h[43] = 0;
	h[44] = 0;
	h[45] = 0;
	__builtin_memcpy(h + 46, &t->vni_be, 4);
	return 0;
}

/* Puts the outer headers of `o` before the (now untagged) IP frame, in room made in front of
 * its L3 header (bpf_skb_adjust_room, marking it encapsulated: a super-frame stays one,
 * segmented by the underlay's device or taken whole by a GRO-aware receiver); the 64 bytes
 * at the start are then the outer headers and the inner Ethernet header. Returns 0, 1 when
 * refused before the frame changed, -1 after. */
static __always_inline int vx_encap(struct __sk_buff *skb, struct qb_vx_out *o)
{
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
		      BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		      BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN);

	if (o->v6)
		return vx6_encap(skb, o);
	if (o->qn)
		return vxq_encap(skb, o);
	if (bpf_skb_load_bytes(skb, 0, o->hdr + 50, ETH_HLEN))
		return 1;
	if (bpf_skb_adjust_room(skb, 50, BPF_ADJ_ROOM_MAC, flags))
		return 1;
	return bpf_skb_store_bytes(skb, 0, o->hdr, sizeof(o->hdr), BPF_F_INVALIDATE_HASH) ? -1 : 0;
}

/* ---- Mirror copies (decision 80): clones to a session's destination port ---- */

/* A flow's copies (key: the flow's key; QB_ACT_MIRROR in its action says to look). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, QB_MAX_FLOWS);
	__type(key, struct qb_flow_key);
	__type(value, struct qb_mir_action);
} qb_mir_flows SEC(".maps");

/* Each session's copies sent by the program (key: the session's index in the plan). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_MAX_MIRRORS);
	__type(key, __u32);
	__type(value, struct qb_mir_stats);
} qb_mir_stats SEC(".maps");

/* The copies of the flow of `key` made under generation `gen`, or 0 (gone, or written for
 * an older flow of the key: the frame goes up). */
static __always_inline struct qb_mir_action *mir_lookup(const struct qb_flow_key *key,
							__u32 gen)
{
	struct qb_mir_action *m = bpf_map_lookup_elem(&qb_mir_flows, key);

	if (!m || m->generation != gen || m->n > QB_MIR_COPIES)
		return 0;
	return m;
}

/* Whether every copy fits its destination, measured as the pipeline measures it (wire_len:
 * a super-frame's largest segment): the frame as received (`in_len` whole, `ntags` tags
 * before the L3 header at `off`) for an rx copy, `tx_len` (the flow's output, measured so
 * already) for a tx copy; an RSPAN tag counts. */
static __always_inline int mir_fits(struct __sk_buff *skb, const struct qb_mir_action *m,
				    __u32 off, __u16 proto, __u32 ntags, __u32 in_len,
				    __u32 tx_len)
{
	__u32 rx_len = in_len;
	int i;

	if (skb->gso_size) {
		__u32 l34 = l34_len(skb, off, proto, skb->len);
		__u32 seg = ETH_HLEN + 4 * ntags + l34 + skb->gso_size;

		if (l34 && seg < rx_len)
			rx_len = seg;
	}
#pragma unroll
	for (i = 0; i < QB_MIR_COPIES; i++) {
		const struct qb_mir_copy *c = &m->copies[i];
		__u32 len;

		if (i >= m->n)
			break;
		len = ((c->flags & QB_MIR_TX) ? tx_len : rx_len) + (c->rspan_tpid_be ? 4 : 0);
		if (len > c->max_len)
			return 0;
	}
	return 1;
}

/* Sends the copies of direction `tx` (0: rx, QB_MIR_TX) of the frame as it is now, `len`
 * bytes on the wire: the RSPAN tag pushed for the copy and popped again (a tag the frame had
 * inline may come back accelerated: the same frame on the wire), counted in the session's
 * and the destination port's counters (a refused copy: the session's `failed`). -1: the frame
 * could not be given back its own tags
 * (it must not go on). Packet pointers are stale after this. */
static __always_inline int mir_copies(struct __sk_buff *skb, const struct qb_mir_action *m,
				      __u8 tx, __u32 len)
{
	int i;

#pragma unroll
	for (i = 0; i < QB_MIR_COPIES; i++) {
		const struct qb_mir_copy *c = &m->copies[i];
		struct qb_mir_stats *st;
		struct qb_port_stats *ps;
		__u32 k, n = len;
		long r;

		if (i >= m->n)
			break;
		if ((c->flags & QB_MIR_TX) != tx)
			continue;
		k = c->session;
		st = bpf_map_lookup_elem(&qb_mir_stats, &k);
		/* A copy the kernel refused (the RSPAN push, or the clone: a destination gone or
		 * down) is counted as the session's failed (decision 85), never skipped silently. */
		if (c->rspan_tpid_be) {
			if (bpf_skb_vlan_push(skb, c->rspan_tpid_be, bpf_ntohs(c->rspan_tci_be))) {
				if (st)
					st->failed += 1;
				continue;
			}
			n += 4;
		}
		r = bpf_clone_redirect(skb, c->ifindex, 0);
		if (c->rspan_tpid_be && bpf_skb_vlan_pop(skb))
			return -1;
		if (r) {
			if (st)
				st->failed += 1;
			continue;
		}
		if (st) {
			st->frames += 1;
			st->bytes += n;
		}
		k = c->port & QB_PORT_ID_MASK;
		ps = bpf_map_lookup_elem(&qb_port_stats, &k);
		if (ps) {
			ps->tx_frames += 1;
			ps->tx_bytes += n;
		}
	}
	return 0;
}

/* The counters of every port and VLAN a flow's hops pass, with the frame's length at each
 * (`base`, the frame without tags, plus 4 bytes a tag it carries there: as on the wire). */
static __always_inline void count_hops(const struct qb_flow_action *act, __u32 n_hops, __u32 base)
{
	__u32 i;

#pragma unroll
	for (i = 0; i < QB_MAX_HOPS; i++) {
		const struct qb_hop *h = &act->hops[i];
		__u32 in, out, slot, rx_len, tx_len;
		struct qb_port_stats *ps;
		struct qb_vlan_stats *vs;

		if (i >= n_hops)
			break;
		in = h->in_port & QB_PORT_ID_MASK;
		out = h->out_port & QB_PORT_ID_MASK;
		slot = h->vlan_slot;
		rx_len = base + 4 * h->in_tags;
		tx_len = base + 4 * h->out_tags;
		ps = bpf_map_lookup_elem(&qb_port_stats, &in);
		if (ps) {
			ps->rx_frames += 1;
			ps->rx_bytes += rx_len;
			if (h->rx_pcp < 8)
				ps->rx_pcp[h->rx_pcp & 7] += 1;
		}
		ps = bpf_map_lookup_elem(&qb_port_stats, &out);
		if (ps) {
			ps->tx_frames += 1;
			ps->tx_bytes += tx_len;
		}
		vs = bpf_map_lookup_elem(&qb_vlan_stats, &slot);
#ifdef QB_STUDY_NO_VLAN_STATS	/* the per-VLAN cost study only (decision 84) */
		vs = 0;
#endif
		if (vs) {
			vs->rx_frames += 1;
			vs->rx_bytes += rx_len;
			vs->tx_frames += 1;
			vs->tx_bytes += tx_len;
		}
	}
}

SEC("classifier")
int qb_ingress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct qb_port *port = bpf_map_lookup_elem(&qb_ports, &ifindex);
	struct qb_flow_key key = {};
	struct qb_flow_action *act;
	struct qb_fdb_key fk = {};
	struct qb_fdb_entry *src, *dst;
	struct qb_fdb_slot *ss, *ds;
	struct qb_config *cfg;
	__u32 zero = 0, off = ETH_HLEN, in_len, out_len, n_hops;
	__u32 out_ifindex;
	struct qb_vx_out *vx = 0;
	struct qb_mir_action *mir = 0;
	__u64 now;
	__u16 proto;
	void *data, *end;
	struct ethhdr *eth;
	int i;

	/* An orphan's filter is as if it were not there: the next filter, or the stack. */
	now = bpf_ktime_get_coarse_ns();
	if (orphaned(now))
		return TC_ACT_UNSPEC;
	if (!port || !(port->flags & QB_PORT_ENABLED))
		return miss(skb, QB_MISS_NO_PORT, 0);
	/* The Ethernet header and the tags, read in place: in the linear part (they are but
	 * for an odd driver; a short frame that is all linear has nothing to pull). Only they
	 * are pulled: a super-frame a local socket sent carries just its headers there (66
	 * bytes for TCP over IPv4 with timestamps), and pulling more would copy its head, TCP
	 * keeping a clone of it — measured as the fast path's extra cost per byte against a tc
	 * redirect when the program pulled 142 bytes. The L3/L4 headers are copied out. */
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	if (data + QB_L2_HEADERS > end && end - data < skb->len) {
		bpf_skb_pull_data(skb, skb->len < QB_L2_HEADERS ? skb->len : QB_L2_HEADERS);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	eth = data;
	if ((void *)(eth + 1) > end)
		return miss(skb, QB_MISS_MALFORMED, port);
	if (port->flags & QB_PORT_BOND_MEMBER) {
		int v = bond_member_in(skb, port, eth);

		if (v >= 0)
			return v;
	}
	if (eth->h_dest[0] & 1)
		return miss_and_pass(skb, QB_MISS_GROUP, port);
	if (eth->h_dest[0] == port->mac[0] && eth->h_dest[1] == port->mac[1] &&
	    eth->h_dest[2] == port->mac[2] && eth->h_dest[3] == port->mac[3] &&
	    eth->h_dest[4] == port->mac[4] && eth->h_dest[5] == port->mac[5])
		return miss_and_pass(skb, QB_MISS_LOCAL, port);
	__builtin_memcpy(key.dst, eth->h_dest, 6);
	key.in_port = port->index;
	if (skb->vlan_present) {
		key.tpid_be[0] = (__u16)skb->vlan_proto;
		key.tci_be[0] = bpf_htons((__u16)skb->vlan_tci);
		key.ntags = 1;
	}
	proto = eth->h_proto;
#pragma unroll
	for (i = 0; i < QB_MAX_TAGS; i++) {
		__u16 *tag;

		if (!is_vlan_tpid(proto))
			break;
		if (key.ntags >= QB_MAX_TAGS)
			return miss(skb, QB_MISS_TAGS, port);
		tag = data + off;
		if ((void *)(tag + 2) > end)
			return miss(skb, QB_MISS_MALFORMED, port);
		key.tpid_be[key.ntags & 1] = proto;
		key.tci_be[key.ntags & 1] = tag[0];
		key.ntags++;
		proto = tag[1];
		off += 4;
	}
	/* A third tag, a tag of a TPID the port takes, or one of the other TPIDs the pipeline
	 * knows (0x9100, 0x9200, 0x9300: it may read that tag, e.g. the PCP a port copies into
	 * the tag it pushes, and its TCI is not in the key): up. */
	if (is_vlan_tpid(proto) || proto == bpf_htons(0x9100) || proto == bpf_htons(0x9200) ||
	    proto == bpf_htons(0x9300) ||
	    (port->extra_tpid_be[0] && proto == port->extra_tpid_be[0]) ||
	    (port->extra_tpid_be[1] && proto == port->extra_tpid_be[1]))
		return miss(skb, QB_MISS_TAGS, port);
	key.ethertype_be = proto;
#ifdef QB_STUDY_ONE_FLOW
	/* The per-VLAN cost study only (decision 84; examples/vlans' frames): every frame takes
	 * VLAN 1's flow, so the frame alone differs from the one-VLAN run. */
	key.tci_be[0] = bpf_htons(1);
	key.dst[4] = 0;
	key.dst[5] = 1;
#endif

	act = fix_lookup(&key, &zero);
	if (!act)
		return miss(skb, QB_MISS_NO_FLOW, port);
	cfg = bpf_map_lookup_elem(&qb_config, &zero);
	if (!cfg || act->generation != cfg->generation)
		return miss(skb, QB_MISS_STALE, port);

	/* A group or all-zero source is invalid: the pipeline drops it (a port that does not
	 * learn would otherwise forward it, no FDB entry being looked up). */
	if ((eth->h_source[0] & 1) ||
	    !(eth->h_source[0] | eth->h_source[1] | eth->h_source[2] | eth->h_source[3] |
	      eth->h_source[4] | eth->h_source[5]))
		return miss(skb, QB_MISS_SRC, port);
	n_hops = act->n_hops;
	if (n_hops < 1 || n_hops > QB_MAX_HOPS)
		return miss(skb, QB_MISS_ACTION, port);

	/* Sizes, as on the wire: skb->len does not count an accelerated tag. A frame the
	 * pipeline would treat otherwise (runt, oversize) goes up. */
	in_len = skb->len + (skb->vlan_present ? 4 : 0);
	if (in_len < act->min_len)
		return miss(skb, QB_MISS_SIZE, port);
	out_len = in_len - 4 * key.ntags + 4 * act->push_n;
	if (skb->gso_size) {
		/* A super-frame as the pipeline judges it (wire_len): its largest segment, the
		 * headers and gso_size but never more than the whole; the whole when its headers
		 * are not TCP or UDP over IP. */
		__u32 l34 = l34_len(skb, off, proto, skb->len);
		__u32 seg = ETH_HLEN + 4 * act->push_n + l34 + skb->gso_size;
		if (l34 && seg < out_len)
			out_len = seg;
	}
	if (out_len > act->max_len)
		return miss(skb, QB_MISS_SIZE, port);
	/* Mirror copies (decision 80): the flow's, each fitting its destination (else the
	 * pipeline counts the session's oversize). */
	if (act->flags & QB_ACT_MIRROR) {
		mir = mir_lookup(&key, act->generation);
		if (!mir)
			return miss(skb, QB_MISS_STALE, port);
		if (!mir_fits(skb, mir, off, proto, key.ntags, in_len, out_len))
			return miss(skb, QB_MISS_SIZE, port);
	}

	/* In every bridge on the way: the source learned on the hop's ingress port (if it
	 * learns), the destination where the flow says. Sources seen are refreshed at most
	 * once a second (the ager's granularity), from the coarse clock read at the start (CLOCK_MONOTONIC_COARSE,
	 * a tick behind CLOCK_MONOTONIC at most, without the clock source read: 246 -> 229 ns a
	 * test run in the scale example); a time the engine wrote from the fine clock can be
	 * ahead of it, and is left alone until the coarse clock passes it (the ager takes only
	 * newer times). */
	/* Each entry is read from its slot, where the hop says it was last found (one small
	 * array entry, its key compared); only when the slot does not hold it (the flow's
	 * first frames, another source using the flow, a slot reused) from the hash, and the
	 * hop then remembers the slot the hash entry names (decision 71). */
#pragma unroll
	for (i = 0; i < QB_MAX_HOPS; i++) {
		struct qb_hop *h = &act->hops[i];

		if (i >= n_hops)
			break;
		fk.bridge = h->bridge;
		fk.fid = h->fid;
		if (h->flags & (QB_HOP_LEARNING | QB_HOP_SRC)) {
			ss = slot_for(h->src_slot, eth->h_source, h);
			if (ss) {
				if (ss->port != h->in_port)
					return miss(skb, QB_MISS_SRC, port);
				if ((h->flags & QB_HOP_LEARNING) && now > ss->last_seen_ns &&
				    now - ss->last_seen_ns > NS_PER_REFRESH)
					ss->last_seen_ns = now;
			} else {
				__builtin_memcpy(fk.mac, eth->h_source, 6);
				src = bpf_map_lookup_elem(&qb_fdb, &fk);
				if (!src || src->port != h->in_port)
					return miss(skb, QB_MISS_SRC, port);
				if ((h->flags & QB_HOP_LEARNING) && now > src->last_seen_ns &&
				    now - src->last_seen_ns > NS_PER_REFRESH)
					src->last_seen_ns = now;
				if (src->slot != h->src_slot)
					h->src_slot = src->slot;
			}
		}
#ifdef QB_STUDY_NO_DST	/* the per-VLAN cost study only (decision 84): no destination check */
		continue;
#endif
		ds = slot_for(h->dst_slot, key.dst, h);
		if (ds) {
			if (ds->port != h->out_port || ds->version != h->dst_version)
				return miss(skb, QB_MISS_DST, port);
		} else {
			__builtin_memcpy(fk.mac, key.dst, 6);
			dst = bpf_map_lookup_elem(&qb_fdb, &fk);
			if (!dst || dst->port != h->out_port || dst->version != h->dst_version)
				return miss(skb, QB_MISS_DST, port);
			if (dst->slot != h->dst_slot)
				h->dst_slot = dst->slot;
		}
	}

	/* A bond's member, by the pipeline's transmit hash (read before anything moves the
	 * packet's pointers). */
	out_ifindex = act->out_ifindex;
	if (act->flags & QB_ACT_BOND) {
		out_ifindex = bond_out(skb, eth, &key, act, off,
				       in_len - 4 * key.ntags + 4 * act->push_n);
		if (!out_ifindex)
			return miss(skb, QB_MISS_BOND, port);
	}
	/* A VXLAN tunnel: its outer headers and underlay, before the frame is touched. */
	if (act->flags & QB_ACT_VXLAN) {
		int r;

		vx = bpf_map_lookup_elem(&qb_vx_scratch, &zero);
		if (!vx)
			return miss(skb, QB_MISS_VXLAN, port);
		r = vx_prepare(skb, act, off, proto, in_len - 4 * key.ntags + 4 * act->push_n, vx);
		if (r)
			return miss(skb, r - 1, port);
		out_ifindex = vx->ifindex;
	}

	if (port->flags & QB_PORT_TRACE)
		trace_copy(skb, port);
	/* Mirror rx copies: the frame as received, before the tag edit. */
	if (mir && mir_copies(skb, mir, 0, in_len)) {
		count(QB_MISS_ACTION);
		return TC_ACT_SHOT;
	}

	/* The tag edit: nothing when the tags stay; else pop all, push the egress ones. To a
	 * tunnel all go, and its inner tags are written inside (vxq_encap). */
	if (vx || !(key.ntags == act->push_n &&
	      (key.ntags < 1 || (key.tpid_be[0] == act->push_tpid_be[0] &&
				 key.tci_be[0] == act->push_tci_be[0])) &&
	      (key.ntags < 2 || (key.tpid_be[1] == act->push_tpid_be[1] &&
				 key.tci_be[1] == act->push_tci_be[1])))) {
		for (i = 0; i < QB_MAX_TAGS; i++) {
			if (i >= key.ntags)
				break;
			if (bpf_skb_vlan_pop(skb))
				return miss(skb, QB_MISS_ACTION, port);
		}
		if (!vx && act->push_n >= 2 &&
		    bpf_skb_vlan_push(skb, act->push_tpid_be[1], bpf_ntohs(act->push_tci_be[1])))
			return miss(skb, QB_MISS_ACTION, port);
		if (!vx && act->push_n >= 1 &&
		    bpf_skb_vlan_push(skb, act->push_tpid_be[0], bpf_ntohs(act->push_tci_be[0])))
			return miss(skb, QB_MISS_ACTION, port);
	}
	/* Mirror tx copies: the frame as it leaves, after the tag edit. */
	if (mir && mir_copies(skb, mir, QB_MIR_TX, in_len - 4 * key.ntags + 4 * act->push_n)) {
		count(QB_MISS_ACTION);
		return TC_ACT_SHOT;
	}
	if (vx) {
		int r = vx_encap(skb, vx);

		/* Refused before the frame changed (and no tag edit): up as it came. */
		if (r == 1 && !key.ntags)
			return miss(skb, QB_MISS_VXLAN, port);
		if (r) {
			count(QB_MISS_VXLAN);
			return TC_ACT_SHOT;
		}
	}

	/* Counters of every port and VLAN on the way, with the frame's length there (as on
	 * the wire: its tags then). */
	count_hops(act, n_hops, in_len - 4 * key.ntags);
	count(QB_MISS_MAX);
	skb->cb[0] = out_ifindex;
	skb->cb[1] = 0;
	skb->cb[2] = skb->vlan_present ? skb->vlan_proto : 0;
	skb->cb[3] = skb->vlan_present ? 0x10000 | skb->vlan_tci : 0;
	if (vx)
		return bpf_redirect_neigh(out_ifindex, 0, 0, 0);
	if (act->flags & QB_ACT_INGRESS)
		return bpf_redirect(out_ifindex, BPF_F_INGRESS);
	/* (The peer's way exists only from an ingress hook.) */
	if ((act->flags & QB_ACT_PEER) && !(port->flags & QB_PORT_EGRESS))
		return bpf_redirect_peer(out_ifindex, 0);
	return bpf_redirect(out_ifindex, 0);
}

/* On the upcall device's ingress: the frames redirected there were seen by the daemon's
 * packet socket (taps run before TC ingress); the host stack never sees them. */
SEC("classifier")
int qb_sink(struct __sk_buff *skb)
{
	return orphaned(bpf_ktime_get_coarse_ns()) ? TC_ACT_UNSPEC : TC_ACT_SHOT;
}

/* ---- VXLAN decapsulation (decision 77; docs/fast-path.md, "VXLAN") ----
 * qb_vxlan_in runs on the ingress of a VXLAN port's underlay interface. A frame it takes is
 * exactly one the port's socket would receive and the pipeline forward by a cached flow: IPv4
 * without options or fragmentation, a sound IP header, UDP to the port's address and port
 * from a remote VTEP the port knows (qb_vxd_tunnels, with the VNI the port serves), the plain
 * VXLAN flags (I, nothing reserved), an outer UDP checksum the kernel's UDP receive would take
 * (0, or CHECKSUM_UNNECESSARY / CHECKSUM_PARTIAL, or CHECKSUM_COMPLETE's sum checked here),
 * an untagged IP inner frame to a unicast address from a valid source. Its flow is looked up
 * as the pipeline made it for the VXLAN port (its key: the port, the VNI's tag of an external
 * port, the inner destination and EtherType), with the same source, destination, size and
 * generation checks as qb_ingress; then the outer headers go (bpf_skb_adjust_room in front
 * of the inner IP header, the inner Ethernet header written over the outer one), the egress
 * tags are pushed, the counters added and the frame redirected. Every other frame passes on
 * untouched (TC_ACT_UNSPEC: to the next filter, then the stack and the port's socket). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_MAX_TUNNELS);
	__type(key, struct qb_vxd_key);
	__type(value, struct qb_vxd);
} qb_vxd_tunnels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_VXD_MAX_SRCS);
	__type(key, struct qb_vxd_src_key);
	__type(value, __u32);
} qb_vxd_srcs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QB_VXD_MAX);
	__type(key, __u32);
	__type(value, __u64);
} qb_vxd_stats SEC(".maps");

/* bpf_skb_adjust_room's decapsulation flags (uapi enum values; Debian 12's headers lack
 * them): the inner L3 protocol (6.3), and the UDP tunnel's GSO state cleared (newer kernels;
 * 6.18 refuses it, and a super-frame keeps SKB_GSO_UDP_TUNNEL[_CSUM] and encapsulation). */
#define QB_VXD_F_DECAP_L3_IPV4 (1ULL << 7)
#define QB_VXD_F_DECAP_L3_IPV6 (1ULL << 8)
#define QB_VXD_F_DECAP_L4_UDP (1ULL << 10)
/* Outer Ethernet, IPv4, UDP, VXLAN, inner Ethernet. */
#define QB_VXD_HDRS 64
#define QB_VXD_OUTER 50

/* Passes the frame on untouched, counted; cb[4] holds 1 + the reason (test runs). */
static __always_inline int vxd_pass(struct __sk_buff *skb, __u32 why)
{
	__u64 *n = bpf_map_lookup_elem(&qb_vxd_stats, &why);

	if (n)
		*n += 1;
	skb->cb[0] = 0;
	skb->cb[1] = 0;
	skb->cb[4] = why + 1;
	return TC_ACT_UNSPEC;
}

static __always_inline __u32 vxd_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (s & 0xffff) + (s >> 16);
}

/* The ones' complement sum of the IPv4 header in h (20 bytes from offset 14), folded. */
static __always_inline __u32 vxd_ip_sum(const __u8 *h)
{
	__u64 s = 0;
	int i;

#pragma unroll
	for (i = 0; i < 10; i++)
		s += ((__u32)h[14 + 2 * i] << 8) | h[15 + 2 * i];
	return vxd_fold(s);
}

/* Whether the kernel's UDP receive takes the outer UDP checksum as valid: zero (`csum0`) if
 * `zero_ok` (IPv4: none; IPv6: udp6zerocsumrx, the socket's UDP_NO_CHECK6_RX — without it the
 * socket drops it, counted in Udp6InCsumErrors); CHECKSUM_UNNECESSARY (bpf_csum_level
 * answers); CHECKSUM_COMPLETE (bpf_csum_update of 0 answers skb->csum, the sum from the outer
 * IP header on: `adj` added to it must fold to 0xffff — IPv4: the pseudo header, the IP
 * header summing to 0xffff itself; IPv6: its header's words other than the addresses and
 * the payload length subtracted, the protocol added, as the addresses and the length are
 * the pseudo header's too); CHECKSUM_PARTIAL (a same-host sender's: skb_csum_unnecessary).
 * CHECKSUM_NONE, which the kernel would compute, goes to the socket: told from PARTIAL by
 * BPF_CSUM_LEVEL_INC, which makes NONE UNNECESSARY and leaves PARTIAL alone (undone at once
 * by BPF_CSUM_LEVEL_DEC). */
static __always_inline int vxd_csum_ok(struct __sk_buff *skb, int csum0, int zero_ok, __u64 adj)
{
	long c;

	if (csum0)
		return zero_ok;
	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) >= 0)
		return 1;
	c = bpf_csum_update(skb, 0);
	if (c >= 0)
		return vxd_fold((__u32)c + adj) == 0xffff;
	bpf_csum_level(skb, BPF_CSUM_LEVEL_INC);
	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) >= 0) {
		bpf_csum_level(skb, BPF_CSUM_LEVEL_DEC);
		return 0;
	}
	return 1;
}

/* Q-in-VNI decapsulation (decision 86): the inner frame's tags, appended to `key` after the
 * VNI's tag of an external port (the pipeline's frame: the port pushes that tag outside
 * them), the key's EtherType then the one after them. `at`: the skb offset of the first
 * tag's TCI (the inner Ethernet header's end). The kernel's TPIDs only, QB_MAX_TAGS in all,
 * then IP or IPv6: else -1 (the frame goes to the socket). Returns how many. Shared by both
 * outer families (vxd_take). */
static __always_inline int vxq_inner(struct __sk_buff *skb, __u32 at, struct qb_flow_key *key)
{
	__u16 proto = key->ethertype_be;
	__u8 b[4];
	int n = 0, i;

#pragma unroll
	for (i = 0; i < QB_MAX_TAGS; i++) {
		if (!is_vlan_tpid(proto))
			break;
		if (key->ntags >= QB_MAX_TAGS || bpf_skb_load_bytes(skb, at + 4 * i, b, 4))
			return -1;
		/* (Constant indexes: the verifier refuses the arithmetic clang makes of a
		 * computed one on this pointer.) */
		if (key->ntags) {
			key->tpid_be[1] = proto;
			__builtin_memcpy(&key->tci_be[1], b, 2);
		} else {
			key->tpid_be[0] = proto;
			__builtin_memcpy(&key->tci_be[0], b, 2);
		}
		key->ntags++;
		__builtin_memcpy(&proto, b + 2, 2);
		n++;
	}
	if (proto != bpf_htons(ETH_P_IP) && proto != bpf_htons(ETH_P_IPV6))
		return -1;
	key->ethertype_be = proto;
	return n;
}

/* The part of qb_vxlan_in both outer families share, from the inner frame on: `t` the tunnel
 * (with `vni_be`), `ie` the inner Ethernet header (a copy), `outer` the bytes in front of the
 * inner IP header that go (outer IP, UDP, VXLAN, inner Ethernet), `csum0`/`zero_ok`/`adj`
 * the outer UDP checksum's (vxd_csum_ok). */
static __always_inline int vxd_take(struct __sk_buff *skb, const struct qb_vxd *t, __u32 vni_be,
				    const __u8 *ie, __u32 outer, int csum0, int zero_ok, __u64 adj,
				    __u64 now)
{
	struct qb_vxd_src_key sk = {};
	struct qb_flow_key key = {};
	struct qb_flow_action *act;
	struct qb_fdb_key fk = {};
	struct qb_fdb_entry *src, *dst;
	struct qb_fdb_slot *ss, *ds;
	struct qb_config *cfg;
	const __u8 *smac = ie + 6;
	__u32 zero = 0, len = skb->len, inner_len, in_len, out_len, n_hops;
	__u64 flags;
	__u16 proto;
	int i, qn = 0;	/* vxq_: the inner frame's tags */

	/* The inner frame: unicast, a valid source, IP, or tags then IP (Q-in-VNI: vxq_inner). */
	proto = (__u16)ie[13] << 8 | ie[12];
	if ((ie[0] & 1) || (smac[0] & 1) ||
	    !(smac[0] | smac[1] | smac[2] | smac[3] | smac[4] | smac[5]) ||
	    (proto != bpf_htons(ETH_P_IP) && proto != bpf_htons(ETH_P_IPV6) &&
	     !is_vlan_tpid(proto)))
		return vxd_pass(skb, QB_VXD_INNER);
	/* Checked after the cheap refusals: it may touch the skb's checksum state (undone). */
	if (!vxd_csum_ok(skb, csum0, zero_ok, adj))
		return vxd_pass(skb, QB_VXD_CSUM);
	/* A learning port learns the source's remote, unless a static entry holds it. */
	if (t->flags & QB_VXD_LEARNING) {
		sk.port = t->port;
		sk.vni_be = vni_be;
		__builtin_memcpy(sk.mac, smac, 6);
		if (!bpf_map_lookup_elem(&qb_vxd_srcs, &sk)) {
			/* vxl_: a learned source, behind this remote. */
			__u32 why = vxl_src(skb, &sk, now);

			if (why)
				return vxd_pass(skb, why);
		}
	}

	key.in_port = t->port;
	__builtin_memcpy(key.dst, ie, 6);
	if (t->tag_tpid_be) {
		key.tpid_be[0] = t->tag_tpid_be;
		key.tci_be[0] = t->tag_tci_be;
		key.ntags = 1;
	}
	key.ethertype_be = proto;
	if (is_vlan_tpid(proto)) {
		qn = vxq_inner(skb, outer + ETH_HLEN, &key);
		if (qn < 0)
			return vxd_pass(skb, QB_VXD_INNER);
		proto = key.ethertype_be;
	}
	act = bpf_map_lookup_elem(&qb_flows, &key);
	if (!act)
		return vxd_pass(skb, QB_VXD_NO_FLOW);
	cfg = bpf_map_lookup_elem(&qb_config, &zero);
	if (!cfg || act->generation != cfg->generation)
		return vxd_pass(skb, QB_VXD_STALE);
	n_hops = act->n_hops;
	if ((act->flags & (QB_ACT_BOND | QB_ACT_VXLAN | QB_ACT_MIRROR)) || n_hops < 1 ||
	    n_hops > QB_MAX_HOPS || act->push_n > QB_MAX_TAGS)
		return vxd_pass(skb, QB_VXD_ACTION);
	/* Sizes as the pipeline measures the frame the socket hands it: the inner frame, the
	 * VNI's tag included; a super-frame by its largest segment. */
	inner_len = len - outer;
	in_len = inner_len + 4 * (key.ntags - qn);
	if (in_len < act->min_len)
		return vxd_pass(skb, QB_VXD_SIZE);
	/* vxq_: the inner tags go with the outer headers; inner_len is without them from here. */
	inner_len -= 4 * qn;
	out_len = inner_len + 4 * act->push_n;
	if (skb->gso_size) {
		__u32 l34 = l34_len(skb, outer + ETH_HLEN + 4 * qn, proto, len);
		__u32 seg = ETH_HLEN + 4 * act->push_n + l34 + skb->gso_size;

		if (l34 && seg < out_len)
			out_len = seg;
	}
	if (out_len > act->max_len)
		return vxd_pass(skb, QB_VXD_SIZE);

	/* The source learned on each hop's ingress port (refreshed), the destination where the
	 * flow says: qb_ingress's checks. */
#pragma unroll
	for (i = 0; i < QB_MAX_HOPS; i++) {
		struct qb_hop *hp = &act->hops[i];

		if (i >= n_hops)
			break;
		fk.bridge = hp->bridge;
		fk.fid = hp->fid;
		if (hp->flags & (QB_HOP_LEARNING | QB_HOP_SRC)) {
			ss = slot_for(hp->src_slot, smac, hp);
			if (ss) {
				if (ss->port != hp->in_port)
					return vxd_pass(skb, QB_VXD_SRC);
				if ((hp->flags & QB_HOP_LEARNING) && now > ss->last_seen_ns &&
				    now - ss->last_seen_ns > NS_PER_REFRESH)
					ss->last_seen_ns = now;
			} else {
				__builtin_memcpy(fk.mac, smac, 6);
				src = bpf_map_lookup_elem(&qb_fdb, &fk);
				if (!src || src->port != hp->in_port)
					return vxd_pass(skb, QB_VXD_SRC);
				if ((hp->flags & QB_HOP_LEARNING) && now > src->last_seen_ns &&
				    now - src->last_seen_ns > NS_PER_REFRESH)
					src->last_seen_ns = now;
				if (src->slot != hp->src_slot)
					hp->src_slot = src->slot;
			}
		}
		ds = slot_for(hp->dst_slot, key.dst, hp);
		if (ds) {
			if (ds->port != hp->out_port || ds->version != hp->dst_version)
				return vxd_pass(skb, QB_VXD_DST);
		} else {
			__builtin_memcpy(fk.mac, key.dst, 6);
			dst = bpf_map_lookup_elem(&qb_fdb, &fk);
			if (!dst || dst->port != hp->out_port || dst->version != hp->dst_version)
				return vxd_pass(skb, QB_VXD_DST);
			if (dst->slot != hp->dst_slot)
				hp->dst_slot = dst->slot;
		}
	}

	/* The outer headers and the inner Ethernet header go from in front of the inner IP
	 * header (the skb's checksum state kept: the outer UDP checksum is consumed below, as
	 * the UDP receive does), the inner Ethernet header is written where the outer was. A
	 * refusal (the flag check, an skb that cannot be uncloned) leaves the frame as it was. */
	flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_NO_CSUM_RESET |
		(proto == bpf_htons(ETH_P_IPV6) ? QB_VXD_F_DECAP_L3_IPV6 : QB_VXD_F_DECAP_L3_IPV4);
	if (bpf_skb_adjust_room(skb, -(__s32)(outer + 4 * qn), BPF_ADJ_ROOM_MAC,
				flags | QB_VXD_F_DECAP_L4_UDP) &&
	    bpf_skb_adjust_room(skb, -(__s32)(outer + 4 * qn), BPF_ADJ_ROOM_MAC, flags))
		return vxd_pass(skb, QB_VXD_ACTION);
	if (bpf_skb_store_bytes(skb, 0, ie, ETH_HLEN, BPF_F_INVALIDATE_HASH))
		goto shot;
	/* vxq_: the inner tags went with the outer headers (the flow pushes the frame's own). */
	if (qn && bpf_skb_store_bytes(skb, 12, &proto, 2, BPF_F_INVALIDATE_HASH))
		goto shot;
	bpf_csum_level(skb, BPF_CSUM_LEVEL_DEC);
	if (act->push_n >= 2 &&
	    bpf_skb_vlan_push(skb, act->push_tpid_be[1], bpf_ntohs(act->push_tci_be[1])))
		goto shot;
	if (act->push_n >= 1 &&
	    bpf_skb_vlan_push(skb, act->push_tpid_be[0], bpf_ntohs(act->push_tci_be[0])))
		goto shot;

	/* Counters of every port and VLAN on the way, as qb_ingress counts them. */
	count_hops(act, n_hops, inner_len);
	{
		__u32 hit = QB_VXD_HIT;
		__u64 *n = bpf_map_lookup_elem(&qb_vxd_stats, &hit);

		if (n)
			*n += 1;
	}
	skb->cb[0] = act->out_ifindex;
	skb->cb[1] = 0;
	skb->cb[2] = skb->vlan_present ? skb->vlan_proto : 0;
	skb->cb[3] = skb->vlan_present ? 0x10000 | skb->vlan_tci : 0;
	if (act->flags & QB_ACT_INGRESS)
		return bpf_redirect(act->out_ifindex, BPF_F_INGRESS);
	if (act->flags & QB_ACT_PEER)
		return bpf_redirect_peer(act->out_ifindex, 0);
	return bpf_redirect(act->out_ifindex, 0);
shot:
	{
		__u32 why = QB_VXD_ACTION;
		__u64 *n = bpf_map_lookup_elem(&qb_vxd_stats, &why);

		if (n)
			*n += 1;
	}
	return TC_ACT_SHOT;
}

/* ---- VXLAN decapsulation over IPv6 (decision 82) ----
 * An IPv6 outer: no extension header (next header UDP; one of hop-by-hop, routing, fragment,
 * destination options is a `header` pass whatever follows it: the program does not walk
 * them), the payload length exact, UDP's length the payload's, to one of qb_vxd6_tunnels'
 * (local, remote, VNI word, UDP port), VXLAN's flags I only; then vxd_take as over IPv4. A
 * zero UDP checksum is taken only from a port with udp6zerocsumrx (QB_VXD_ZERO6RX), as its
 * socket would. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QB_MAX_TUNNELS);
	__type(key, struct qb_vxd6_key);
	__type(value, struct qb_vxd);
} qb_vxd6_tunnels SEC(".maps");

/* Outer Ethernet, IPv6, UDP, VXLAN, inner Ethernet. */
#define QB_VXD6_HDRS 84
#define QB_VXD6_OUTER 70

/* An outer checksum the kernel would compute (CHECKSUM_NONE: a sender without transmit
 * checksum offload, across a veth), computed here as the port's UDP receive would (decision
 * 87): the pseudo-header (the addresses of `h`, the payload length `plen`, which is UDP's,
 * checked; UDP) and the datagram summed whole by vx6_csum (up to 9216 bytes). One that
 * verifies leaves the skb CHECKSUM_UNNECESSARY (level 0, what BPF_CSUM_LEVEL_INC makes of
 * NONE): vxd_csum_ok takes it, the decapsulation consumes it (BPF_CSUM_LEVEL_DEC: NONE
 * again, the inner checksums the receiver's to verify), and a frame that goes up after all
 * reaches the socket verified. Anything else leaves the state as it came (NONE for the socket
 * to compute and judge; UNNECESSARY, COMPLETE, PARTIAL for vxd_csum_ok). */
static __always_inline void vxd6_none(struct __sk_buff *skb, const __u8 *h, __u32 plen)
{
	struct qb_vx_out *o;
	__u32 zero = 0;
	__s64 acc;
	__u8 *b;

	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) >= 0 || bpf_csum_update(skb, 0) >= 0)
		return;
	bpf_csum_level(skb, BPF_CSUM_LEVEL_INC);
	if (bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) < 0)
		return;	/* PARTIAL, untouched by the raise */
	o = bpf_map_lookup_elem(&qb_vx_scratch, &zero);
	if (!o)
		goto none;
	b = o->b;
	b[0] = 0;
	b[1] = 0;
	b[2] = plen >> 8;
	b[3] = plen;
	b[4] = 0;
	b[5] = 0;
	b[6] = 0;
	b[7] = IPPROTO_UDP;
	acc = bpf_csum_diff(0, 0, (__be32 *)(h + 22), 32, 0);
	if (acc >= 0)
		acc = bpf_csum_diff(0, 0, (__be32 *)b, 8, (__wsum)acc);
	if (acc >= 0)
		acc = vx6_csum(skb, ETH_HLEN + 40, skb->len, (__u32)acc, o);
	if (acc >= 0 && vxd_fold((__u32)acc) == 0xffff)
		return;
none:
	bpf_csum_level(skb, BPF_CSUM_LEVEL_DEC);
}

static __always_inline int vxd6_in(struct __sk_buff *skb, __u64 now)
{
	struct qb_vxd6_key tk = {};
	struct qb_vxd *t;
	__u8 h[QB_VXD6_HDRS];
	__u32 len = skb->len, plen;
	__u64 adj;

	if (skb->vlan_present || len < QB_VXD6_HDRS || bpf_skb_load_bytes(skb, 0, h, QB_VXD6_HDRS))
		return vxd_pass(skb, QB_VXD_OTHER);
	if (h[12] != 0x86 || h[13] != 0xdd || (h[14] >> 4) != 6)
		return vxd_pass(skb, QB_VXD_OTHER);
	if (h[20] == 0 || h[20] == 43 || h[20] == 44 || h[20] == 60)
		return vxd_pass(skb, QB_VXD_HEADER);
	if (h[20] != IPPROTO_UDP)
		return vxd_pass(skb, QB_VXD_OTHER);
	__builtin_memcpy(tk.remote, h + 22, 16);
	__builtin_memcpy(tk.local, h + 38, 16);
	__builtin_memcpy(&tk.dstport_be, h + 56, 2);
	__builtin_memcpy(&tk.vni_be, h + 66, 4);
	t = bpf_map_lookup_elem(&qb_vxd6_tunnels, &tk);
	if (!t)
		return vxd_pass(skb, QB_VXD_OTHER);
	plen = (__u32)h[18] << 8 | h[19];
	if (plen != len - ETH_HLEN - 40 || ((__u32)h[58] << 8 | h[59]) != plen ||
	    h[62] != 0x08 || (h[63] | h[64] | h[65] | h[69]))
		return vxd_pass(skb, QB_VXD_HEADER);
	if (t->flags & QB_VXD_TRACE)
		return vxd_pass(skb, QB_VXD_TRACED);
	if (h[60] | h[61])
		vxd6_none(skb, h, plen);
	/* skb->csum less the IPv6 header's words that are not the pseudo header's (version,
	 * class and label; next header and hop limit), plus the protocol: the payload length is
	 * UDP's (checked), the addresses are in both. */
	adj = (0xffff ^ ((__u32)h[14] << 8 | h[15])) + (0xffff ^ ((__u32)h[16] << 8 | h[17])) +
	      (0xffff ^ ((__u32)h[20] << 8 | h[21])) + IPPROTO_UDP;
	return vxd_take(skb, t, tk.vni_be, h + QB_VXD6_OUTER, QB_VXD6_OUTER, !h[60] && !h[61],
			!!(t->flags & QB_VXD_ZERO6RX), adj, now);
}

SEC("classifier")
int qb_vxlan_in(struct __sk_buff *skb)
{
	struct qb_vxd_key tk = {};
	struct qb_vxd *t;
	__u8 h[QB_VXD_HDRS];
	__u32 len, tot;
	__u64 now, adj;

	now = bpf_ktime_get_coarse_ns();
	if (orphaned(now))
		return TC_ACT_UNSPEC;
	skb->cb[4] = 0;
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return vxd6_in(skb, now);
	len = skb->len;
	if (skb->protocol != bpf_htons(ETH_P_IP) || skb->vlan_present || len < QB_VXD_HDRS ||
	    bpf_skb_load_bytes(skb, 0, h, QB_VXD_HDRS))
		return vxd_pass(skb, QB_VXD_OTHER);
	if (h[12] != 0x08 || h[13] != 0 || h[23] != IPPROTO_UDP)
		return vxd_pass(skb, QB_VXD_OTHER);
	__builtin_memcpy(&tk.remote_be, h + 26, 4);
	__builtin_memcpy(&tk.local_be, h + 30, 4);
	__builtin_memcpy(&tk.dstport_be, h + 36, 2);
	__builtin_memcpy(&tk.vni_be, h + 46, 4);
	t = bpf_map_lookup_elem(&qb_vxd_tunnels, &tk);
	if (!t)
		return vxd_pass(skb, QB_VXD_OTHER);
	/* No options, not a fragment (DF is fine), the lengths exact (no padding: the frame is
	 * longer than Ethernet's minimum), a valid IP checksum, VXLAN's flags I only. */
	tot = (__u32)h[16] << 8 | h[17];
	if (h[14] != 0x45 || (h[20] & 0x3f) || h[21] || tot != len - ETH_HLEN ||
	    ((__u32)h[38] << 8 | h[39]) != tot - 20 || vxd_ip_sum(h) != 0xffff ||
	    h[42] != 0x08 || (h[43] | h[44] | h[45] | h[49]))
		return vxd_pass(skb, QB_VXD_HEADER);
	if (t->flags & QB_VXD_TRACE)
		return vxd_pass(skb, QB_VXD_TRACED);
	/* The pseudo header: the IP header sums to 0xffff (checked). */
	adj = ((__u32)h[26] << 8 | h[27]) + ((__u32)h[28] << 8 | h[29]) +
	      ((__u32)h[30] << 8 | h[31]) + ((__u32)h[32] << 8 | h[33]) + IPPROTO_UDP +
	      ((__u32)h[38] << 8 | h[39]);
	return vxd_take(skb, t, tk.vni_be, h + QB_VXD_OUTER, QB_VXD_OUTER, !h[40] && !h[41], 1,
			adj, now);
}

char _license[] SEC("license") = "Dual MIT/GPL";
