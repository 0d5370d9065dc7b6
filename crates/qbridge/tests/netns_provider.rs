//! The provider network end to end, on real namespaces (root only):
//!
//! ```text
//! hostA ─ CE1 (802.1Q: access 10 → trunk) ─ PE1 (802.1ad: customer port PVID 100) ═╗
//! hostC ─ CE3 (802.1Q: access 10 → trunk) ─ PE1 (802.1ad: customer port PVID 200) ═╣ trunk
//! hostB ─ CE2 (802.1Q) ─ PE2 (802.1ad: PVID 100) ══════════════════════════════════╣ t1 ═ t2
//! hostD ─ CE4 (802.1Q) ─ PE2 (802.1ad: PVID 200) ══════════════════════════════════╝
//! ```
//!
//! Six qbridge bridges in one daemon; every link is a veth pair with MTU 1500 and no MTU set
//! by hand (qbridge raises the device MTU of the interfaces it attaches to for envelope frames
//! by itself). Customer 2 (hostC, hostD) reuses customer 1's C-VLAN 10 and IP addresses.
//! See `docs/conformance.md`.

mod support;

use std::time::Duration;

use support::{assert_ping, tcp_transfer, Capture, Captured, Ctl, Host, Lab};

/// Customer 1's and customer 2's hosts, the switch namespace, and the daemon.
struct Provider {
    lab: Lab,
    sw: String,
    a: Host,
    b: Host,
    c: Host,
    d: Host,
    ctl: Ctl,
}

/// The daemon's configuration. Interface names (in the switch namespace): `a0`, `b0`, `c0`,
/// `d0` face the hosts; `t1`-`t2` is the 802.1ad trunk; each CE joins its PE by a patch link.
const BATCH: &str = include_str!("../../../examples/provider-network.batch");

fn build() -> Provider {
    let mut lab = Lab::new("provider");
    let sw = lab.netns("sw").unwrap();
    let a = lab.host("hostA", "10.10.0.1/24", &sw, "a0").unwrap();
    let b = lab.host("hostB", "10.10.0.2/24", &sw, "b0").unwrap();
    let c = lab.host("hostC", "10.10.0.1/24", &sw, "c0").unwrap();
    let d = lab.host("hostD", "10.10.0.2/24", &sw, "d0").unwrap();
    // CE uplinks and PE customer ports are patch links inside the daemon; the trunk is a veth.
    lab.veth(&sw, "t1", &sw, "t2").unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();
    Provider {
        lab,
        sw,
        a,
        b,
        c,
        d,
        ctl,
    }
}

fn mtu(ns: &str, dev: &str) -> u64 {
    let out = support::ip_in(ns, &["-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["mtu"].as_u64().unwrap_or(0)
}

const S100_C10: [(u16, u16); 2] = [(0x88a8, 100), (0x8100, 10)];
const S200_C10: [(u16, u16); 2] = [(0x88a8, 200), (0x8100, 10)];

/// Every frame on the trunk from `macs` carries exactly `stack`; returns how many there were.
fn assert_trunk_stack(c: &Captured, macs: &[&str], stack: &[(u16, u16)]) -> u64 {
    let mut n = 0;
    for ((src, tags), count) in &c.by_src_stack {
        if macs.iter().any(|m| support::parse_mac(m) == *src) {
            assert_eq!(
                tags,
                stack,
                "{count} frames from {} with tags {tags:x?}; trunk: {}",
                support::fmt_mac(src),
                c.summary()
            );
            n += count;
        }
    }
    n
}

/// hostA and hostB ping and move 100 MB (every byte verified) across CE1-PE1-trunk-PE2-CE2
/// while customer 2 does the same with the same C-VLAN and addresses; every frame on the
/// trunk carries 88a8/100 + 8100/10 (customer 1) or 88a8/200 + 8100/10 (customer 2); the TCP
/// segments are full size (1500-byte IP packets) with MTU 1500 on every host; customer 2's
/// hosts receive no frame from customer 1's; no frame is dropped as oversize.
#[test]
fn provider_network_end_to_end() {
    skip_unless_netns!();
    let p = build();
    let sw = p.sw.clone();
    let trunk_mtu = (mtu(&sw, "t1"), mtu(&sw, "t2"));
    let cap_t1 = Capture::start(&sw, "t1", 0).unwrap();
    let cap_t2 = Capture::start(&sw, "t2", 0).unwrap();
    let cap_b = Capture::start(&p.b.ns, "eth0", 0).unwrap();
    let cap_c = Capture::start(&p.c.ns, "eth0", 0).unwrap();
    let cap_d = Capture::start(&p.d.ns, "eth0", 0).unwrap();

    assert_ping(&p.a, &p.b, 20);
    assert_ping(&p.c, &p.d, 20);
    let (r1, r2) = std::thread::scope(|s| {
        let t1 = s.spawn(|| tcp_transfer(&p.a, &p.b, 100 << 20, Duration::from_secs(240)));
        let t2 = s.spawn(|| tcp_transfer(&p.c, &p.d, 20 << 20, Duration::from_secs(240)));
        (t1.join().unwrap(), t2.join().unwrap())
    });
    let stats = p.ctl.stats_text();
    let r1 = r1.unwrap_or_else(|e| panic!("customer 1 TCP: {e}\n{stats}"));
    let r2 = r2.unwrap_or_else(|e| panic!("customer 2 TCP: {e}\n{stats}"));
    eprintln!(
        "customer 1: {} bytes in {:.2} s ({:.2} Gbit/s); customer 2: {} bytes ({:.2} Gbit/s)",
        r1.bytes,
        r1.secs,
        r1.gbit_per_s(),
        r2.bytes,
        r2.gbit_per_s()
    );
    assert_ping(&p.a, &p.b, 5);

    let t1 = cap_t1.finish().unwrap();
    let t2 = cap_t2.finish().unwrap();
    let hb = cap_b.finish().unwrap();
    let hc = cap_c.finish().unwrap();
    let hd = cap_d.finish().unwrap();
    eprintln!(
        "trunk t1 received: {}\ntrunk t2 received: {}",
        t1.summary(),
        t2.summary()
    );
    eprintln!("hostB received: {}", hb.summary());
    eprintln!("{stats}");

    // Tag stacks on the trunk, both directions.
    let cust1 = [p.a.mac.as_str(), p.b.mac.as_str()];
    let cust2 = [p.c.mac.as_str(), p.d.mac.as_str()];
    for t in [&t1, &t2] {
        let n1 = assert_trunk_stack(t, &cust1, &S100_C10);
        let n2 = assert_trunk_stack(t, &cust2, &S200_C10);
        assert_eq!(
            n1 + n2,
            t.total,
            "frames from nobody's hosts: {}",
            t.summary()
        );
        assert!(n1 > 0 && n2 > 0, "{}", t.summary());
    }
    // Customer 1's data went A -> B: it is on t2's receive side.
    assert!(
        t2.tcp_frames > 0 && t2.max_tcp_segment_l3 == 1500,
        "trunk TCP segments: largest L3 {} bytes in {} frames ({} super-frames)",
        t2.max_tcp_segment_l3,
        t2.tcp_frames,
        t2.tcp_super_frames
    );
    assert_eq!(
        hb.max_tcp_segment_l3, 1500,
        "hostB: largest TCP segment L3 {} bytes",
        hb.max_tcp_segment_l3
    );
    // Customer separation.
    assert_eq!(
        hc.count_from(&cust1),
        0,
        "hostC saw customer 1: {}",
        hc.summary()
    );
    assert_eq!(
        hd.count_from(&cust1),
        0,
        "hostD saw customer 1: {}",
        hd.summary()
    );
    assert!(hd.count_from(&[&p.c.mac]) > 0);
    // Hosts keep MTU 1500; the trunk was raised by qbridge, not by us.
    for h in [&p.a, &p.b, &p.c, &p.d] {
        assert_eq!(mtu(&h.ns, "eth0"), 1500, "{} MTU changed", h.name);
    }
    eprintln!(
        "trunk device MTU set by qbridge: t1 {} t2 {}",
        trunk_mtu.0, trunk_mtu.1
    );
    assert!(!stats.contains("oversize"), "oversize drops:\n{stats}");
    let _ = &p.lab;
}
