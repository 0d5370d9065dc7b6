//! The order keeper (decision 91, `vxo_`), through `BPF_PROG_TEST_RUN` (root; skipped
//! otherwise): a super-frame of a flow to an IPv6 tunnel goes up (`vxlan`: the program does not
//! encapsulate it over IPv6, decision 78); the flow's next single frames, which the program
//! would encapsulate at once and so send ahead of it, go up behind it (`order`) while the
//! window lasts, each moving it on; a frame of another flow is encapsulated; once the window
//! passed (the test forgets the deadlines instead of waiting: the window is an hour here) the
//! flow's single frames are encapsulated again. A flow to an IPv4 tunnel (whose super-frames
//! the program encapsulates) is not held.

mod common;

use common::{action, fdb, ifindex, ip, key, neighbour, own_netns, port, veths, vtep_sends};
use qbridge_fastpath::*;
use std::net::Ipv6Addr;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x91, 0, 0, 0, 0, 1);
const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x91, 0, 0, 0, 0xbeef, 2);
const HOUR_NS: u64 = 3_600_000_000_000;

fn tunnel(ifindex: u32, v6: bool) -> Vxlan {
    let mut sport = [[0u8; 2]; VXLAN_SOCKETS];
    for (i, s) in sport.iter_mut().enumerate() {
        *s = (40_000 + 7 * i as u16).to_be_bytes();
    }
    let mut t = Vxlan {
        vni: [0, 0, 100, 0],
        ifindex,
        sport,
        dstport: 4789u16.to_be_bytes(),
        ttl: 64,
        ..Vxlan::default()
    };
    if v6 {
        t.flags = VX_IPV6;
        t.local6 = LOCAL.octets();
        t.remote6 = REMOTE.octets();
    } else {
        t.local = [10, 91, 0, 1];
        t.remote = [10, 91, 0, 2];
    }
    t
}

fn tcp(sport: u16, payload: usize) -> Vec<u8> {
    common::ipv4(
        B,
        A,
        0,
        6,
        0,
        &common::ports_l4(true, sport, 80, payload),
        0xee,
    )
}

fn count(fp: &mut FastPath, m: Miss) -> u64 {
    let (_, misses) = fp.verdicts().unwrap();
    misses.iter().find(|(x, _)| *x == m).unwrap().1
}

#[test]
fn a_flows_frames_follow_its_super_frame_up_while_the_window_lasts() {
    if !own_netns() {
        return;
    }
    veths(&[("fa", "fb"), ("fc", "fd")]);
    ip(&["link", "set", "fc", "mtu", "9000"]);
    ip(&["addr", "add", "2001:db8:91::1/64", "dev", "fc", "nodad"]);
    ip(&["addr", "add", "10.91.0.1/24", "dev", "fc"]);
    neighbour("2001:db8:91::beef:2", "02:00:00:00:91:02", "fc");
    neighbour("10.91.0.2", "02:00:00:00:91:02", "fc");
    let (fa, fc) = (ifindex("fa"), ifindex("fc"));
    let mut fp = FastPath::load().expect("load");
    fp.set_order_window(HOUR_NS).unwrap();
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    let t6 = tunnel(fc, true);
    let idx = w.tunnel(&t6).unwrap().unwrap();
    let mut a = action(gen, (1, 0), idx, 2, 10, &[]);
    a.flags = ACT_VXLAN;
    a.max_len = 9000;
    let mut k = key(1, B, &[]);
    k.ethertype_be = 0x0800u16.to_be();
    fp.insert_flow(k, a).unwrap();

    let single = tcp(1234, 100);
    let other = tcp(1235, 100);
    let big = tcp(1234, 2000);
    let hit = |fp: &mut FastPath, f: &[u8]| {
        let r = fp.test_run(f, fa, None).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "{f:02x?}");
        assert_eq!(r.frame, vtep_sends(&t6, f, 0));
    };

    // Before: the flow's single frame is encapsulated.
    hit(&mut fp, &single);
    assert_eq!(count(&mut fp, Miss::Order), 0);
    // Its super-frame goes up (decision 78)...
    let r = fp.test_run(&big, fa, Some((1000, 2))).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, big);
    // ...and the single frames after it follow it up, as they came.
    for n in 1..=3 {
        let r = fp.test_run(&single, fa, None).unwrap();
        assert_eq!(r.verdict, Verdict::Miss(Miss::Order), "frame {n}");
        assert_eq!(r.frame, single);
        assert_eq!(count(&mut fp, Miss::Order), n);
    }
    // Another flow (another TCP connection between the same hosts) is not held.
    hit(&mut fp, &other);
    // The window passed: the flow's frames are the program's again.
    fp.clear_order().unwrap();
    hit(&mut fp, &single);
    hit(&mut fp, &single);
    assert_eq!(count(&mut fp, Miss::Order), 3);

    // A frame too long for the underlay goes up to be refused there (not forwarded: nothing
    // to overtake), and holds nothing back.
    ip(&["link", "set", "fc", "mtu", "1500"]);
    let over = tcp(1234, 1500 - 56 - 14 - 20 - 20 + 1);
    let r = fp.test_run(&over, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    hit(&mut fp, &single);
    ip(&["link", "set", "fc", "mtu", "9000"]);

    // To an IPv4 tunnel the program encapsulates super-frames itself (live; a test run's
    // skb has no GSO type, so bpf_skb_adjust_room refuses it here): nothing is held.
    let t4 = tunnel(fc, false);
    let idx4 = w.tunnel(&t4).unwrap().unwrap();
    let mut a4 = action(gen, (1, 0), idx4, 2, 10, &[]);
    a4.flags = ACT_VXLAN;
    a4.max_len = 9000;
    fp.insert_flow(k, a4).unwrap();
    fp.test_run(&big, fa, Some((1000, 2))).unwrap();
    let r = fp.test_run(&single, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert_eq!(count(&mut fp, Miss::Order), 3);
}

/// The keeper's cost on the hit path (ignored; `QB_ORDER_BASELINE=OBJECT`: the program built
/// from `bpf/fastpath.c` without it): a short TCP frame to an IPv6 tunnel, encapsulated by
/// both, `BPF_PROG_TEST_RUN` ns per single run, interleaved, quartiles printed.
#[test]
#[ignore]
fn cost_per_frame() {
    let Some(base) = std::env::var_os("QB_ORDER_BASELINE") else {
        eprintln!("QB_ORDER_BASELINE is not set");
        return;
    };
    if !own_netns() {
        return;
    }
    veths(&[("fa", "fb"), ("fc", "fd")]);
    ip(&["link", "set", "fc", "mtu", "9000"]);
    ip(&["addr", "add", "2001:db8:91::1/64", "dev", "fc", "nodad"]);
    neighbour("2001:db8:91::beef:2", "02:00:00:00:91:02", "fc");
    let (fa, fc) = (ifindex("fa"), ifindex("fc"));
    let object = std::fs::read(base).unwrap();
    let mut fps = [
        FastPath::load_object(&object, false).expect("load the baseline"),
        FastPath::load().expect("load"),
    ];
    let single = tcp(1234, 100);
    for fp in fps.iter_mut() {
        fp.set_port(fa, port(1, 0)).unwrap();
        let gen = fp.bump_generation().unwrap();
        let w = fp.writer().unwrap();
        fdb(fp, 10, &[(A, 1), (B, 2)]);
        let idx = w.tunnel(&tunnel(fc, true)).unwrap().unwrap();
        let mut a = action(gen, (1, 0), idx, 2, 10, &[]);
        a.flags = ACT_VXLAN;
        a.max_len = 9000;
        let mut k = key(1, B, &[]);
        k.ethertype_be = 0x0800u16.to_be();
        fp.insert_flow(k, a).unwrap();
        let r = fp.test_run(&single, fa, None).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    }
    // Single runs (a repeated run would take the encapsulated skb again), interleaved.
    let mut ns = [Vec::new(), Vec::new()];
    for _ in 0..20_000 {
        for (fp, v) in fps.iter_mut().zip(ns.iter_mut()) {
            let r = fp.test_run_repeat(&single, fa, 1).unwrap();
            assert_eq!(r.retval, 7, "TC_ACT_REDIRECT");
            v.push(r.ns_per_run);
        }
    }
    let [mut b, mut k] = ns;
    eprintln!(
        "{} bytes, ns per frame (quartiles of 20 000 single runs): without the keeper {:?}, \
         with it {:?}",
        single.len(),
        common::quartiles(&mut b),
        common::quartiles(&mut k)
    );
}
