//! VXLAN over an IPv6 underlay in the program (decision 78), through `BPF_PROG_TEST_RUN`
//! (root; skipped otherwise): a flow to an IPv6 tunnel leaves with exactly the bytes the
//! pipeline's VTEP sends (`qbridge_io::vxlan::outer::encapsulate` with its UDP checksum: the
//! socket's arithmetic in the open): the traffic class fixed or inherited, the tunnel's flow
//! label for the socket the pipeline picks (`source_port` % the sockets), the hop limit, and a
//! valid UDP checksum over the IPv6 pseudo-header, for inner TCP, UDP (odd lengths included),
//! ICMP, fragments, IPv6 and Ethernet padding; a super-frame goes up as it came (its segments
//! would all carry one checksum). A test run's frame has no checksum left to offload: the
//! program sums it whole; the offload case (CHECKSUM_PARTIAL) is the live test's
//! (`crates/qbridge/tests/netns_vxlan6_fast.rs`).

mod common;

use common::{
    action, arp, fdb, ifindex, ip, key, neighbour, own_netns, port, quartiles, tagged, veths,
    vtep_sends,
};
use qbridge_fastpath::*;
use qbridge_io::vxlan::outer::decapsulate;
use qbridge_wire::vxlan::source_port;
use std::net::Ipv6Addr;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x73, 0, 0, 0, 0, 1);
const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x73, 0, 0, 0, 0xbeef, 2);

/// A fresh namespace: port veth `fa`/`fb`, underlay `fc`/`fd` (LOCAL/64 on `fc`, the remote a
/// permanent neighbour).
fn setup() -> Option<(FastPath, u32, u32)> {
    if !own_netns() {
        return None;
    }
    veths(&[("fa", "fb"), ("fc", "fd")]);
    // The underlay takes jumbo frames (the program checks its MTU as it is).
    ip(&["link", "set", "fc", "mtu", "9000"]);
    ip(&["addr", "add", "2001:db8:73::1/64", "dev", "fc", "nodad"]);
    neighbour("2001:db8:73::beef:2", "02:00:00:00:73:02", "fc");
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("fa"), ifindex("fc")))
}

/// An IPv6 tunnel: socket i on port 40000 + 7i with flow label 0x1234i (the top bit of the
/// 20 set on the last, to see the label's every bit).
fn tunnel(ifindex: u32, vni: u32, tos: u8, flags: u8) -> Vxlan {
    let mut sport = [[0u8; 2]; VXLAN_SOCKETS];
    let mut flow_label = [[0u8; 4]; VXLAN_SOCKETS];
    for i in 0..VXLAN_SOCKETS {
        sport[i] = (40_000 + 7 * i as u16).to_be_bytes();
        flow_label[i] = ((0x1_2340 + i as u32) | if i == 7 { 0x8_0000 } else { 0 }).to_be_bytes();
    }
    let v = vni.to_be_bytes();
    Vxlan {
        vni: [v[1], v[2], v[3], 0],
        ifindex,
        sport,
        dstport: 4789u16.to_be_bytes(),
        ttl: 61,
        tos,
        flags: flags | VX_IPV6,
        local6: LOCAL.octets(),
        remote6: REMOTE.octets(),
        flow_label,
        ..Vxlan::default()
    }
}

/// What the pipeline's VTEP sends for `inner` (the UDP checksum computed, as the IPv6 socket
/// does).
fn expected(t: &Vxlan, inner: &[u8], tos: u8) -> Vec<u8> {
    vtep_sends(t, inner, tos)
}

/// IPv4 of protocol `proto` with `l4` after its header; `frag`: the flags and offset word.
/// The Ethernet padding is 0xee, for the checksum to leave it out.
fn ipv4(tos: u8, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    common::ipv4(B, A, tos, proto, frag, l4, 0xee)
}

fn ports_l4(tcp: bool, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    if tcp {
        l4.extend_from_slice(&[
            0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0x12, 0x34, 0, 0,
        ]);
    } else {
        l4.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        l4.extend_from_slice(&[0xab, 0xcd]);
    }
    l4.extend((0..payload).map(|i| (i * 7 + 3) as u8));
    l4
}

fn ipv6(tclass: u8, next: u8, l4: &[u8]) -> Vec<u8> {
    common::ipv6(B, A, tclass, next, l4)
}

fn install(fp: &mut FastPath, gen: u32, ethertype: u16, idx: u32, ntags: &[(u16, u16)]) {
    let mut a = action(gen, (1, ntags.len()), idx, 2, 10, &[]);
    a.flags = ACT_VXLAN;
    a.max_len = 9000;
    let mut k = key(1, B, ntags);
    k.ethertype_be = ethertype.to_be();
    fp.insert_flow(k, a).unwrap();
}

/// A test run of `f` that must be a hit to `fc`: redirected (TC_ACT_REDIRECT) there, the hit
/// counted.
fn run_hit(fp: &mut FastPath, f: &[u8], fa: u32, fc: u32) -> TestRun {
    let hits = fp.verdicts().unwrap().0;
    let r = fp.test_run(f, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "{f:02x?}");
    assert_eq!(r.retval, 7, "TC_ACT_REDIRECT: {f:02x?}");
    assert_eq!(fp.verdicts().unwrap().0, hits + 1, "a hit: {f:02x?}");
    r
}

#[test]
fn a_flow_to_an_ipv6_tunnel_leaves_as_the_pipelines_vtep_sends_it() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    let t = tunnel(fc, 100, 0, 0);
    let idx = w.tunnel(&t).unwrap().unwrap();
    for e in [0x0800, 0x86dd, 0x0806] {
        install(&mut fp, gen, e, idx, &[]);
    }

    // TCP, UDP (many ports: every socket; odd lengths), ICMP, fragments, IPv6 TCP/UDP/ICMPv6,
    // short frames with Ethernet padding, frames of several bpf_csum_diff chunks.
    let mut frames = Vec::new();
    for p in 0..32u16 {
        frames.push(ipv4(
            0,
            6,
            0,
            &ports_l4(true, 1000 + p, 80, 40 + p as usize),
        ));
        frames.push(ipv4(
            0,
            17,
            0,
            &ports_l4(false, 5000, 2000 + 13 * p, 3 + p as usize),
        ));
    }
    frames.push(ipv4(0, 1, 0, &[8, 0, 0x12, 0x34, 0, 1, 0, 1, 9, 9]));
    frames.push(ipv4(0, 6, 0x2000, &ports_l4(true, 1, 2, 40)));
    frames.push(ipv4(0, 6, 0x0010, &[7; 41]));
    frames.push(ipv4(0, 6, 0, &ports_l4(true, 4321, 80, 1460)));
    frames.push(ipv4(0, 17, 0, &ports_l4(false, 4321, 53, 1023)));
    frames.push(ipv4(0, 17, 0, &ports_l4(false, 4321, 53, 3001)));
    frames.push(ipv6(0, 6, &ports_l4(true, 333, 22, 30)));
    frames.push(ipv6(0, 17, &ports_l4(false, 333, 4444, 511)));
    frames.push(ipv6(0, 58, &[128, 0, 0x55, 0x66, 0, 1, 0, 2, 1, 2, 3]));
    let mut socks = std::collections::BTreeSet::new();
    for f in &frames {
        let r = run_hit(&mut fp, f, fa, fc);
        let want = expected(&t, f, 0);
        assert_eq!(r.frame, want, "{} bytes: {f:02x?}", f.len());
        // The codec reads it back with its checksum verified, never zero.
        let d = decapsulate(&r.frame[14..], false).unwrap();
        assert_ne!(d.udp_checksum, 0);
        assert_eq!(d.inner, &f[..]);
        socks.insert(source_port(f) % 8);
    }
    assert_eq!(socks.len(), 8, "the frames spread over every socket");

    // A super-frame: up, untouched (SKB_GSO_UDP_TUNNEL without _CSUM: every segment would
    // carry this checksum).
    let big = ipv4(0, 6, 0, &ports_l4(true, 1234, 80, 2000));
    let r = fp.test_run(&big, fa, Some((1000, 2))).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, big);
    // Not IP: up.
    let r = fp.test_run(&arp(B, A), fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));

    // A fixed traffic class; `tos inherit` (CE leaves as ECT(0)), from IPv4 and IPv6.
    let t2 = tunnel(fc, 100, 0x28, 0);
    let i2 = w.tunnel(&t2).unwrap().unwrap();
    assert_ne!(i2, idx);
    install(&mut fp, gen, 0x0800, i2, &[]);
    let f = ipv4(0xbb, 6, 0, &ports_l4(true, 9, 9, 10));
    let r = run_hit(&mut fp, &f, fa, fc);
    assert_eq!(r.frame, expected(&t2, &f, 0x28));
    let t3 = tunnel(fc, 100, 0, VX_INHERIT_TOS);
    let i3 = w.tunnel(&t3).unwrap().unwrap();
    install(&mut fp, gen, 0x0800, i3, &[]);
    install(&mut fp, gen, 0x86dd, i3, &[]);
    let r = run_hit(&mut fp, &f, fa, fc);
    assert_eq!(r.frame, expected(&t3, &f, 0xba));
    let f6 = ipv6(0xb7, 17, &ports_l4(false, 7, 7, 17));
    let r = run_hit(&mut fp, &f6, fa, fc);
    assert_eq!(r.frame, expected(&t3, &f6, 0xb6));

    // Another VNI, and a C-tag the flow pops (an external port's VLAN → VNI map).
    let t4 = tunnel(fc, 0x123456, 0, 0);
    let i4 = w.tunnel(&t4).unwrap().unwrap();
    install(&mut fp, gen, 0x0800, i4, &[(0x8100, 10)]);
    let r = run_hit(&mut fp, &tagged(&f, &[(0x8100, 10)]), fa, fc);
    assert_eq!(r.frame, expected(&t4, &f, 0));

    // The underlay's MTU as it is now: an outer packet one byte over it goes up (the socket
    // would refuse it), one that fits leaves.
    ip(&["link", "set", "fc", "mtu", "1500"]);
    let fits = ipv4(0, 17, 0, &ports_l4(false, 1, 2, 1500 - 56 - 14 - 20 - 8));
    assert_eq!(fits.len() + 56, 1500);
    run_hit(&mut fp, &fits, fa, fc);
    let over = ipv4(
        0,
        17,
        0,
        &ports_l4(false, 1, 2, 1500 - 56 - 14 - 20 - 8 + 1),
    );
    let r = fp.test_run(&over, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, over);
}

/// One's complement addition of two 16-bit words (RFC 1071).
fn add1(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// Checksums of zero (decision 87). An inner TCP segment whose checksum is zero leaves as it
/// came, 0x0000 as a sender computes it or 0xffff as the kernel's `skb_checksum_help`
/// completes it (CSUM_MANGLED_0, what a live segment left to offload gets about once in
/// 65 536 on an underlay without checksum offload): both are zero to one's complement
/// arithmetic, so the outer checksum is the socket's and the same for both. An outer UDP
/// checksum that computes to 0 leaves as 0xffff (RFC 8200 §8.1), as the socket sends it.
#[test]
fn checksums_of_zero_leave_as_the_socket_sends_them() {
    use qbridge_wire::checksum::{combine, finish, pseudo_header_v4, sum};
    use qbridge_wire::IpProtocol;
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    let t = tunnel(fc, 100, 0, 0);
    let idx = w.tunnel(&t).unwrap().unwrap();
    install(&mut fp, gen, 0x0800, idx, &[]);
    let ucsum = |f: &[u8]| u16::from_be_bytes([f[60], f[61]]);

    // TCP (its header at 34, the checksum at 50, 60 bytes): a payload word raised by the
    // segment's checksum makes it 0.
    let mut f = ipv4(0, 6, 0, &ports_l4(true, 1000, 80, 40));
    f[50..52].copy_from_slice(&[0, 0]);
    let pseudo = pseudo_header_v4(
        [192, 168, 1, 1].into(),
        [192, 168, 1, 2].into(),
        IpProtocol::Tcp,
        60,
    );
    let c = finish(combine(pseudo, sum(&f[34..94])));
    let word = add1(u16::from_be_bytes([f[54], f[55]]), c);
    f[54..56].copy_from_slice(&word.to_be_bytes());
    assert_eq!(finish(combine(pseudo, sum(&f[34..94]))), 0);
    let mut mangled = f.clone();
    mangled[50..52].copy_from_slice(&[0xff, 0xff]);
    let r0 = run_hit(&mut fp, &f, fa, fc);
    assert_eq!(r0.frame, expected(&t, &f, 0));
    let r1 = run_hit(&mut fp, &mangled, fa, fc);
    assert_eq!(r1.frame, expected(&t, &mangled, 0));
    assert_eq!(&r1.frame[70..], &mangled[..], "the inner frame as it came");
    assert_eq!(ucsum(&r0.frame), ucsum(&r1.frame), "±0: one outer checksum");

    // UDP (its payload at 42 in the inner frame, an even offset in the datagram): a payload
    // word raised by the outer checksum makes the outer sum 0.
    let g = ipv4(0, 17, 0, &ports_l4(false, 5000, 2000, 64));
    let c = ucsum(&expected(&t, &g, 0));
    assert_ne!(c, 0xffff);
    let mut g0 = g.clone();
    let word = add1(u16::from_be_bytes([g[42], g[43]]), c);
    g0[42..44].copy_from_slice(&word.to_be_bytes());
    let want = expected(&t, &g0, 0);
    assert_eq!(ucsum(&want), 0xffff, "a computed 0 is sent as 0xffff");
    let r = run_hit(&mut fp, &g0, fa, fc);
    assert_eq!(r.frame, want);
    let d = decapsulate(&r.frame[14..], false).unwrap();
    assert_eq!(d.inner, &g0[..]);
}

/// The program's cost per frame over IPv6 against IPv4 and plain forwarding (`cargo test -p
/// qbridge-fastpath --test vxlan6 -- --ignored --nocapture`; root): TCP frames of 1514 and 74
/// bytes, `BPF_PROG_TEST_RUN` once per call (a repeated run would encapsulate its own
/// output), 20 000 calls each, interleaved; quartiles. A test run's frame is summed whole (no
/// offload left to complete): the IPv6 figure is the checksum's worst case. Prints.
#[test]
#[ignore]
fn cost_per_frame() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    let (c, d) = ([0x02, 0, 0, 0, 0, 0x0c], [0x02, 0, 0, 0, 0, 0x0d]);
    fdb(&mut fp, 10, &[(c, 3), (d, 4)]);
    ip(&["addr", "add", "10.73.0.1/24", "dev", "fc"]);
    neighbour("10.73.0.2", "02:00:00:00:73:02", "fc");
    let w = fp.writer().unwrap();
    let i6 = w.tunnel(&tunnel(fc, 100, 0, 0)).unwrap().unwrap();
    let mut t4 = tunnel(fc, 100, 0, 0);
    t4.flags = 0;
    t4.local = [10, 73, 0, 1];
    t4.remote = [10, 73, 0, 2];
    let i4 = w.tunnel(&t4).unwrap().unwrap();
    install(&mut fp, gen, 0x0800, i6, &[]);
    let mut a = action(gen, (1, 0), i4, 4, 10, &[]);
    a.flags = ACT_VXLAN;
    a.max_len = 9000;
    fp.insert_flow(key(1, d, &[]), a).unwrap();
    let mut plain = action(gen, (1, 0), fc, 3, 10, &[]);
    plain.max_len = 9000;
    fp.insert_flow(key(1, c, &[]), plain).unwrap();
    for payload in [1460, 20] {
        let v6 = ipv4(0, 6, 0, &ports_l4(true, 1234, 80, payload));
        let mut v4 = v6.clone();
        v4[..6].copy_from_slice(&d);
        let mut pl = v6.clone();
        pl[..6].copy_from_slice(&c);
        for f in [&v6, &v4, &pl] {
            let hits = fp.verdicts().unwrap().0;
            assert_eq!(fp.test_run_repeat(f, fa, 1).unwrap().retval, 7);
            assert_eq!(fp.verdicts().unwrap().0, hits + 1, "a hit");
        }
        let (mut a6, mut a4, mut p) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..20_000 {
            a6.push(fp.test_run_repeat(&v6, fa, 1).unwrap().ns_per_run);
            a4.push(fp.test_run_repeat(&v4, fa, 1).unwrap().ns_per_run);
            p.push(fp.test_run_repeat(&pl, fa, 1).unwrap().ns_per_run);
        }
        eprintln!(
            "{} bytes, ns per frame (quartiles of 20 000 single runs): vxlan over IPv6 {:?}, \
             over IPv4 {:?}, plain {:?}",
            v6.len(),
            quartiles(&mut a6),
            quartiles(&mut a4),
            quartiles(&mut p)
        );
    }
}
