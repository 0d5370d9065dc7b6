//! VXLAN encapsulation in the program (decision 73), through `BPF_PROG_TEST_RUN` (root;
//! skipped otherwise): a flow to a VXLAN tunnel leaves with exactly the outer headers the
//! pipeline's VTEP sends (`qbridge_io::vxlan::outer::encapsulate`, the socket's arithmetic in
//! the open: DF, id 0, its TTL and TOS) from the send socket the pipeline picks
//! (`qbridge_wire::vxlan::source_port` % the sockets), redirected to the underlay with its
//! neighbour (`bpf_redirect_neigh`); the outer UDP checksum is 0 (the program's one
//! difference, RFC 7348 §5); frames whose outer source port the program does not compute go
//! up as they came.

mod common;

use common::{
    action, arp, fdb, ifindex, ip, ipv6, key, neighbour, own_netns, port, ports_l4, quartiles,
    tagged, veths, vtep_sends,
};
use qbridge_fastpath::*;
use qbridge_wire::vxlan::source_port;
use std::net::Ipv4Addr;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 73, 0, 1);
const REMOTE: Ipv4Addr = Ipv4Addr::new(10, 73, 0, 2);

/// A fresh namespace: port veth `fa`/`fb`, underlay `fc`/`fd` (10.73.0.1/24 on `fc`, the
/// remote 10.73.0.2 a permanent neighbour).
fn setup() -> Option<(FastPath, u32, u32)> {
    if !own_netns() {
        return None;
    }
    veths(&[("fa", "fb"), ("fc", "fd")]);
    // The underlay takes jumbo frames (the program checks its MTU as it is).
    ip(&["link", "set", "fc", "mtu", "9000"]);
    ip(&["addr", "add", "10.73.0.1/24", "dev", "fc"]);
    neighbour("10.73.0.2", "02:00:00:00:73:02", "fc");
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("fa"), ifindex("fc")))
}

fn tunnel(ifindex: u32, vni: u32, tos: u8, flags: u8) -> Vxlan {
    let mut sport = [[0u8; 2]; VXLAN_SOCKETS];
    for (i, p) in sport.iter_mut().enumerate() {
        *p = (40_000 + 7 * i as u16).to_be_bytes();
    }
    let v = vni.to_be_bytes();
    Vxlan {
        local: LOCAL.octets(),
        remote: REMOTE.octets(),
        vni: [v[1], v[2], v[3], 0],
        ifindex,
        sport,
        dstport: 4789u16.to_be_bytes(),
        ttl: 64,
        tos,
        flags,
        ..Vxlan::default()
    }
}

/// What the pipeline's VTEP sends for `inner`, but with the outer UDP checksum 0.
fn expected(t: &Vxlan, inner: &[u8], tos: u8) -> Vec<u8> {
    vtep_sends(t, inner, tos)
}

/// IPv4 of protocol `proto` with `l4` after its header; `frag`: the flags and offset word.
fn ipv4(tos: u8, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    common::ipv4(B, A, tos, proto, frag, l4, 0)
}

#[test]
fn a_flow_to_a_tunnel_leaves_as_the_pipelines_vtep_sends_it() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    let t = tunnel(fc, 100, 0, 0);
    let idx = w.tunnel(&t).unwrap().unwrap();
    assert_eq!(w.tunnel(&t).unwrap(), Some(idx), "one entry per tunnel");
    let install = |fp: &mut FastPath, ethertype: u16, idx: u32, ntags: &[(u16, u16)]| {
        let mut a = action(gen, (1, ntags.len()), idx, 2, 10, &[]);
        a.flags = ACT_VXLAN;
        a.max_len = 1514;
        let mut k = key(1, B, ntags);
        k.ethertype_be = ethertype.to_be();
        fp.insert_flow(k, a).unwrap();
    };
    install(&mut fp, 0x0800, idx, &[]);
    install(&mut fp, 0x86dd, idx, &[]);
    install(&mut fp, 0x0806, idx, &[]);

    // TCP, UDP (many ports: every socket), ICMP, a fragment: the pipeline's socket each time.
    let mut frames = Vec::new();
    for p in 0..32u16 {
        frames.push(ipv4(0, 6, 0, &ports_l4(true, 1000 + p, 80, 40)));
        frames.push(ipv4(0, 17, 0, &ports_l4(false, 5000, 2000 + 13 * p, 20)));
    }
    frames.push(ipv4(0, 1, 0, &[8, 0, 0, 0, 0, 1, 0, 1, 9, 9]));
    frames.push(ipv4(0, 6, 0x2000, &ports_l4(true, 1, 2, 40)));
    frames.push(ipv4(0, 6, 0x0010, &[7; 40]));
    frames.push(ipv6(B, A, 0, 6, &ports_l4(true, 333, 22, 30)));
    let mut socks = std::collections::BTreeSet::new();
    for f in &frames {
        let r = fp.test_run(f, fa, None).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "{f:02x?}");
        assert_eq!(r.retval, 7, "TC_ACT_REDIRECT");
        assert_eq!(r.frame, expected(&t, f, 0), "{f:02x?}");
        socks.insert(source_port(f) % 8);
    }
    assert_eq!(socks.len(), 8, "the frames spread over every socket");

    // A frame whose hash the program leaves to the pipeline (its parser refuses the TCP
    // header: the pipeline hashes the addresses alone): up, untouched.
    let bad = ipv4(0, 6, 0, &[0; 12]);
    let r = fp.test_run(&bad, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, bad, "up as it came");
    // Not IP (the kernel encapsulates IP frames only): up.
    let r = fp.test_run(&arp(B, A), fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));

    // A super-frame the kernel will not encapsulate (a test run's has no GSO type, which
    // bpf_skb_adjust_room wants to be TCP's): up, untouched. Real TCP super-frames are
    // encapsulated whole (the netns test moves them).
    let big = ipv4(0, 6, 0, &ports_l4(true, 1234, 80, 2000));
    let r = fp.test_run(&big, fa, Some((1000, 2))).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, big);

    // A fixed TOS; `tos inherit` (CE leaves as ECT(0)).
    let t2 = tunnel(fc, 100, 0x28, 0);
    let i2 = w.tunnel(&t2).unwrap().unwrap();
    assert_ne!(i2, idx);
    install(&mut fp, 0x0800, i2, &[]);
    let f = ipv4(0xbb, 6, 0, &ports_l4(true, 9, 9, 10));
    let r = fp.test_run(&f, fa, None).unwrap();
    assert_eq!(r.frame, expected(&t2, &f, 0x28));
    let t3 = tunnel(fc, 100, 0, VX_INHERIT_TOS);
    let i3 = w.tunnel(&t3).unwrap().unwrap();
    install(&mut fp, 0x0800, i3, &[]);
    let r = fp.test_run(&f, fa, None).unwrap();
    assert_eq!(r.frame, expected(&t3, &f, 0xba));

    // Another VNI, and a C-tag the flow pops (an external port's VLAN → VNI map).
    let t4 = tunnel(fc, 0x123456, 0, 0);
    let i4 = w.tunnel(&t4).unwrap().unwrap();
    install(&mut fp, 0x0800, i4, &[(0x8100, 10)]);
    let r = fp.test_run(&tagged(&f, &[(0x8100, 10)]), fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert_eq!(r.frame, expected(&t4, &f, 0));
}

/// The program's cost per frame, encapsulating against forwarding plainly (`cargo test -p
/// qbridge-fastpath --test vxlan -- --ignored --nocapture`; root): a 1514-byte TCP frame,
/// `BPF_PROG_TEST_RUN` once per call, 20 000 calls each, interleaved; quartiles. Prints.
#[test]
#[ignore]
fn cost_per_frame() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fdb(
        &mut fp,
        10,
        &[(A, 1), (B, 2), ([0x02, 0, 0, 0, 0, 0x0c], 3)],
    );
    let w = fp.writer().unwrap();
    let idx = w.tunnel(&tunnel(fc, 100, 0, 0)).unwrap().unwrap();
    let mut a = action(gen, (1, 0), idx, 2, 10, &[]);
    a.flags = ACT_VXLAN;
    a.max_len = 1514;
    fp.insert_flow(key(1, B, &[]), a).unwrap();
    let mut plain = action(gen, (1, 0), fc, 3, 10, &[]);
    plain.max_len = 1514;
    let c = [0x02, 0, 0, 0, 0, 0x0c];
    fp.insert_flow(key(1, c, &[]), plain).unwrap();
    let vx = ipv4(0, 6, 0, &ports_l4(true, 1234, 80, 1460));
    let mut pl = vx.clone();
    pl[..6].copy_from_slice(&c);
    let hit = |fp: &mut FastPath, f: &[u8]| fp.test_run_repeat(f, fa, 1).unwrap().verdict;
    assert_eq!(hit(&mut fp, &vx), Verdict::Hit { ifindex: fc });
    assert_eq!(hit(&mut fp, &pl), Verdict::Hit { ifindex: fc });
    // One run per call: a repeated run would run the program again on the frame it already
    // encapsulated (the kernel does not restore the input between repetitions).
    let (mut v, mut p) = (Vec::new(), Vec::new());
    for _ in 0..20_000 {
        v.push(fp.test_run_repeat(&vx, fa, 1).unwrap().ns_per_run);
        p.push(fp.test_run_repeat(&pl, fa, 1).unwrap().ns_per_run);
    }
    eprintln!(
        "ns per frame (quartiles of 20 000 single runs): vxlan {:?}, plain {:?}",
        quartiles(&mut v),
        quartiles(&mut p)
    );
}
