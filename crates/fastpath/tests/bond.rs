//! Bonds in the program (decision 74), through `BPF_PROG_TEST_RUN` (root; skipped
//! otherwise): a flow to a bond goes to the member the pipeline's transmit hash picks —
//! `qbridge_lacp::flow_hash` of the frame as it leaves, under each policy, through zero, one
//! and two tags in and out, for TCP, UDP, ICMP, fragments, malformed IP headers, IPv6 and
//! non-IP frames — bit for bit; what the program leaves to the pipeline goes up as
//! `Miss::Bond`; a member's Slow Protocols frames pass to its socket and a member that does
//! not collect drops the rest, counted.

mod common;

use common::own_netns;
use qbridge_fastpath::*;
use qbridge_lacp::{flow_hash, HashPolicy};
use std::process::Command;

/// A namespace of this thread's own with veths `ba`/`bb`; the loaded program and `ba`'s
/// ifindex.
fn setup() -> Option<(FastPath, u32)> {
    if !own_netns() {
        return None;
    }
    let o = Command::new("ip")
        .args(["link", "add", "ba", "type", "veth", "peer", "name", "bb"])
        .output()
        .expect("ip");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new("ip")
        .args(["-o", "link", "show", "ba"])
        .output()
        .unwrap();
    let ifindex = String::from_utf8_lossy(&o.stdout)
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Some((FastPath::load().expect("load"), ifindex))
}

const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// The member of bucket `b` is "interface" `MEMBER0 + b` (a test run redirects nowhere).
const MEMBER0: u32 = 1000;
const IN_PORT: u32 = 1;
const BOND_PORT: u32 = 7;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Up to `n - 1` random bytes.
    fn some(&mut self, n: u64) -> Vec<u8> {
        let k = self.below(n) as usize;
        self.bytes(k)
    }
}

/// An L3 packet (after the tags) and its EtherType, of one of many shapes, some malformed.
fn l3(r: &mut Rng) -> (u16, Vec<u8>) {
    let l4 = |r: &mut Rng, proto: u8| -> Vec<u8> {
        match proto {
            6 => {
                let k = 20 + 4 * r.below(4) as usize;
                let mut t = r.bytes(k);
                // Data offset: mostly right, sometimes below 5 or beyond the segment.
                let doff = match r.below(8) {
                    0 => r.below(5) as u8,
                    1 => 15,
                    _ => (t.len() / 4) as u8,
                };
                t[12] = doff << 4;
                t.extend(r.some(40));
                t
            }
            17 => {
                let mut u = r.bytes(8);
                if r.below(4) == 0 {
                    u[2..4].copy_from_slice(&4789u16.to_be_bytes());
                }
                let body = r.some(40);
                let ulen = match r.below(8) {
                    0 => r.below(8) as u16,
                    1 => 8 + body.len() as u16 + 10,
                    _ => 8 + body.len() as u16,
                };
                u[4..6].copy_from_slice(&ulen.to_be_bytes());
                u.extend(body);
                u
            }
            _ => r.some(16),
        }
    };
    match r.below(10) {
        0..=4 => {
            let proto = [6u8, 17, 1, 4, 41, 47][r.below(6) as usize];
            let ihl = if r.below(10) == 0 {
                r.below(16) as u8
            } else {
                5 + r.below(2) as u8
            };
            let k = 4 * ihl.max(5) as usize;
            let mut ip = r.bytes(k);
            ip[0] = if r.below(20) == 0 { 0x65 } else { 0x40 } | ihl;
            ip[9] = proto;
            ip[6..8].copy_from_slice(
                &match r.below(6) {
                    0 => 0x2000u16, // first fragment
                    1 => 0x0010,    // a later one
                    _ => 0x4000,    // DF
                }
                .to_be_bytes(),
            );
            ip.extend(l4(r, proto));
            let total = match r.below(10) {
                0 => ip.len() as u16 + 8,
                1 => r.below(20) as u16,
                _ => ip.len() as u16,
            };
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            (0x0800, ip)
        }
        5..=7 => {
            let nh = [6u8, 17, 58, 59, 0, 43, 44, 41, 132][r.below(9) as usize];
            let mut ip = r.bytes(40);
            ip[0] = if r.below(20) == 0 { 0x45 } else { 0x60 };
            ip[6] = nh;
            let body = l4(r, nh);
            let plen = if r.below(10) == 0 {
                body.len() as u16 + 4
            } else {
                body.len() as u16
            };
            ip[4..6].copy_from_slice(&plen.to_be_bytes());
            ip.extend(body);
            (0x86dd, ip)
        }
        8 => (0x0806, r.bytes(28)),
        _ => (0x1234, r.some(50)),
    }
}

fn tags(r: &mut Rng) -> Vec<(u16, u16)> {
    (0..r.below(3))
        .map(|_| {
            (
                [0x8100, 0x88a8][r.below(2) as usize],
                r.below(0x10000) as u16,
            )
        })
        .collect()
}

fn frame(src: [u8; 6], tags: &[(u16, u16)], ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = DST.to_vec();
    f.extend_from_slice(&src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    // Ethernet padding, as a short frame has on the wire.
    while f.len() < 60 + 4 * tags.len() {
        f.push(0);
    }
    f
}

const POLICIES: [(HashPolicy, u32); 4] = [
    (HashPolicy::Layer2, HASH_L2),
    (HashPolicy::Layer2Vlan, HASH_L2_VLAN),
    (HashPolicy::Layer34, HASH_L34),
    (HashPolicy::InnerLayer34, HASH_INNER_L34),
];

/// Whether the program may leave `out` (as it leaves) to the pipeline under `policy`: IPv6
/// extension headers (the pipeline walks them) and, for inner-layer3+4, the encapsulations
/// it reads through.
fn may_go_up(out: &[u8], ntags: usize, policy: HashPolicy) -> bool {
    let l3 = &out[14 + 4 * ntags..];
    let et = u16::from_be_bytes([out[12 + 4 * ntags], out[13 + 4 * ntags]]);
    if et == 0x86dd && l3.len() >= 40 && l3[0] >> 4 == 6 && [0, 43, 44, 51, 60].contains(&l3[6]) {
        return true;
    }
    if policy != HashPolicy::InnerLayer34 {
        return false;
    }
    // Encapsulated: a whole IP packet of protocol 4 or 41, or UDP to 4789.
    let Ok(h) = qbridge_wire::parse_headers(out, qbridge_wire::Tpid::is_well_known) else {
        return false;
    };
    let (Some(p), Some(l4), qbridge_wire::Fragment::Whole) = (h.l4_proto, h.l4_offset, h.fragment)
    else {
        return false;
    };
    match u8::from(p) {
        4 | 41 => true,
        17 => out.get(l4 + 2..l4 + 4) == Some(&4789u16.to_be_bytes()[..]),
        _ => false,
    }
}

#[test]
fn the_member_is_the_pipelines_for_every_policy_and_tag_stack() {
    let Some((mut fp, ifindex)) = setup() else {
        return;
    };
    let mut p = common::port(IN_PORT, 0);
    p.index = IN_PORT;
    fp.set_port(ifindex, p).unwrap();
    let gen = fp.bump_generation().unwrap();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut hits, mut up, mut refused) = (0u32, 0u32, 0u32);
    let mut buckets = std::collections::BTreeSet::new();
    let mut sent = [0u64; 16];
    for (policy, code) in POLICIES {
        let mut bond = Bond {
            policy: code,
            ..Bond::default()
        };
        for (b, m) in bond.member_ifindex.iter_mut().enumerate() {
            *m = MEMBER0 + b as u32;
            bond.member_pos[b] = (b % 16) as u8;
        }
        fp.set_bond(BOND_PORT, &bond).unwrap();
        for _ in 0..1500 {
            let mut src = r.bytes(6);
            src[0] = src[0] & 0xfe | 0x02;
            let src: [u8; 6] = src.try_into().unwrap();
            let (tin, tout) = (tags(&mut r), tags(&mut r));
            let (et, l3) = l3(&mut r);
            let input = frame(src, &tin, et, &l3);
            let mut out = frame(src, &tout, et, &l3);
            out.truncate(input.len() - 4 * tin.len() + 4 * tout.len());
            let mut key = common::key(IN_PORT, DST, &tin);
            key.ethertype_be = et.to_be();
            let mut act = common::action(gen, (IN_PORT, tin.len()), 0, BOND_PORT, 10, &tout);
            act.flags = ACT_BOND;
            act.min_len = 14;
            act.max_len = u16::MAX;
            act.hops[0].flags = 0;
            fp.insert_flow(key, act).unwrap();
            fp.set_fdb(
                FdbKey {
                    fid: 10,
                    mac: DST,
                    ..FdbKey::default()
                },
                FdbEntry {
                    port: BOND_PORT,
                    version: 7,
                    last_seen_ns: 0,
                },
            )
            .unwrap();
            // The kernel's test run refuses frames shorter than their network header.
            let Ok(run) = fp.test_run(&input, ifindex, None) else {
                refused += 1;
                continue;
            };
            let want = (flow_hash(&out, policy) & 0xff) as u32;
            match run.verdict {
                Verdict::Hit { ifindex: m } => {
                    assert_eq!(
                        m - MEMBER0,
                        want,
                        "{policy:?}: member of {out:02x?} (in with tags {tin:x?})"
                    );
                    hits += 1;
                    buckets.insert(want);
                    sent[(want % 16) as usize] += 1;
                }
                Verdict::Miss(Miss::Bond) => {
                    assert!(
                        may_go_up(&out, tout.len(), policy),
                        "{policy:?}: the program left {out:02x?} to the pipeline"
                    );
                    up += 1;
                }
                v => panic!("{policy:?}: {v:?} for {input:02x?}"),
            }
        }
    }
    eprintln!("{hits} hits, {up} left to the pipeline, {refused} refused by the test run");
    for (pos, n) in sent.iter().enumerate() {
        assert_eq!(
            fp.member_stats(0, pos as u32).unwrap().tx_frames,
            *n,
            "frames counted on member {pos}"
        );
    }
    assert!(hits > 4000, "{hits} hits");
    assert!(
        buckets.len() > 200,
        "the hash spreads: {} buckets",
        buckets.len()
    );

    // No member for the bucket, or no bond: up, counted.
    let bond = Bond::default();
    fp.set_bond(BOND_PORT, &bond).unwrap();
    let input = frame([0x02, 0, 0, 0, 0, 1], &[], 0x1234, &[0; 46]);
    let key = common::key(IN_PORT, DST, &[]);
    let mut key = key;
    key.ethertype_be = 0x1234u16.to_be();
    let mut act = common::action(gen, (IN_PORT, 0), 0, BOND_PORT, 10, &[]);
    act.flags = ACT_BOND;
    act.hops[0].flags = 0;
    fp.insert_flow(key, act).unwrap();
    assert_eq!(
        fp.test_run(&input, ifindex, None).unwrap().verdict,
        Verdict::Miss(Miss::Bond)
    );
    fp.remove_bond(BOND_PORT).unwrap();
    assert_eq!(
        fp.test_run(&input, ifindex, None).unwrap().verdict,
        Verdict::Miss(Miss::Bond)
    );
    let (_, misses) = fp.verdicts().unwrap();
    assert!(misses.contains(&(Miss::Bond, u64::from(up) + 2)));
}

#[test]
fn a_member_passes_slow_protocols_and_drops_what_it_does_not_collect() {
    let Some((mut fp, ifindex)) = setup() else {
        return;
    };
    // Member at position 3 of the bond of port 7 (opening 2), the bond's slot 5.
    let index = 2 << 12 | BOND_PORT;
    let member = |collecting: bool| Port {
        index,
        flags: PORT_ENABLED
            | PORT_BOND_MEMBER
            | 3 << PORT_MEMBER_SHIFT
            | 5 << (PORT_MEMBER_SHIFT + 4)
            | if collecting { PORT_COLLECTING } else { 0 },
        ..Port::default()
    };
    fp.set_port(ifindex, member(false)).unwrap();
    fp.bump_generation().unwrap();
    let mut lacpdu = vec![
        0x01, 0x80, 0xc2, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 9, 0x88, 0x09, 1, 1,
    ];
    lacpdu.resize(124, 0);
    let data = frame([0x02, 0, 0, 0, 0, 9], &[], 0x1234, &[0; 46]);
    let r = fp.test_run(&lacpdu, ifindex, None).unwrap();
    assert_eq!(
        (r.retval, r.frame.clone()),
        (0, lacpdu.clone()),
        "TC_ACT_OK, untouched"
    );
    let r = fp.test_run(&data, ifindex, None).unwrap();
    assert_eq!(r.retval, 2, "TC_ACT_SHOT: not collecting");
    assert_eq!(fp.member_stats(5, 3).unwrap().rx_not_collecting, 1);
    assert_eq!(fp.member_stats(5, 2).unwrap().rx_not_collecting, 0);
    // Collecting: the frame is the bond's (a miss with the bond's index, here no flow).
    fp.set_port(ifindex, member(true)).unwrap();
    let r = fp.test_run(&data, ifindex, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::NoFlow));
    let r = fp.test_run(&lacpdu, ifindex, None).unwrap();
    assert_eq!(r.retval, 0, "LACPDUs still pass to the member's socket");
    let st = fp.member_stats(5, 3).unwrap();
    assert_eq!(
        (st.rx_frames, st.rx_bytes),
        (1, data.len() as u64),
        "the collecting member's frame counted on it"
    );
    assert_eq!(fp.member_stats(5, 3).unwrap().rx_not_collecting, 1);
}

/// The cost of the member choice, `BPF_PROG_TEST_RUN` ns per frame (not a test: prints;
/// `cargo test -p qbridge-fastpath --test bond -- --ignored --nocapture`): a 1514-byte TCP
/// frame on a flow to a plain port, and on flows to a bond under each policy, interleaved,
/// the median of 7 rounds of 200 000 runs each.
#[test]
#[ignore]
fn cost_of_the_member_choice() {
    let Some((mut fp, ifindex)) = setup() else {
        return;
    };
    fp.set_port(ifindex, common::port(IN_PORT, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let mut tcp = vec![
        0x45, 0, 0x05, 0xdc, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    let mut l4 = vec![0u8; 20];
    l4[..4].copy_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    l4[12] = 5 << 4;
    tcp.extend(l4);
    tcp.resize(1500, 0xab);
    let input = frame([0x02, 0, 0, 0, 0, 1], &[], 0x0800, &tcp);
    fp.set_fdb(
        FdbKey {
            fid: 10,
            mac: DST,
            ..FdbKey::default()
        },
        FdbEntry {
            port: BOND_PORT,
            version: 7,
            last_seen_ns: 0,
        },
    )
    .unwrap();
    let key = common::key(IN_PORT, DST, &[]);
    let mut plain = common::action(gen, (IN_PORT, 0), 4242, BOND_PORT, 10, &[]);
    plain.hops[0].flags = 0;
    plain.max_len = u16::MAX;
    let mut bonded = plain;
    bonded.flags = ACT_BOND;
    bonded.out_ifindex = 0;
    let mut bond = Bond::default();
    for (b, m) in bond.member_ifindex.iter_mut().enumerate() {
        *m = MEMBER0 + b as u32;
    }
    let cases: Vec<(&str, FlowAction, u32)> = vec![
        ("plain port", plain, 0),
        ("bond layer2", bonded, HASH_L2),
        ("bond layer2+vlan", bonded, HASH_L2_VLAN),
        ("bond layer3+4", bonded, HASH_L34),
    ];
    let mut ns: Vec<Vec<u32>> = vec![Vec::new(); cases.len()];
    for _ in 0..7 {
        for (i, (_, act, policy)) in cases.iter().enumerate() {
            fp.insert_flow(key, *act).unwrap();
            bond.policy = *policy;
            fp.set_bond(BOND_PORT, &bond).unwrap();
            let r = fp.test_run_repeat(&input, ifindex, 200_000).unwrap();
            assert!(matches!(r.verdict, Verdict::Hit { .. }), "{:?}", r.verdict);
            ns[i].push(r.ns_per_run);
        }
    }
    for ((name, _, _), mut v) in cases.iter().zip(ns) {
        v.sort();
        eprintln!("{name:18} {} ns/run (median of 7; all {v:?})", v[3]);
    }
}
