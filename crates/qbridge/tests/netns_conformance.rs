//! Conformance with the Linux bridge on real namespaces: the topologies of the kernel's
//! forwarding selftests (`tools/testing/selftests/net/forwarding/bridge_*.sh`) — hosts in
//! network namespaces with their own TCP/IP stacks, joined by veth pairs to AF_PACKET ports of
//! a `qbridge daemon` — checked with ICMP and TCP between kernel sockets, frames captured on
//! the wire with their tag stacks, and the FDB read through the control socket.
//!
//! Root only (skipped with a printed reason otherwise); every namespace, veth and daemon is
//! removed when a test ends, also on failure. `docs/conformance.md` maps each test to its
//! selftest. Tests run one at a time ([`support::serial`]).

mod support;

use std::time::Duration;

use support::{
    assert_ping, frame, inject, ping_ok, tcp_transfer, wait_until, Capture, Ctl, Lab, Star,
};

const ADDRS2: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
const ADDRS3: [&str; 3] = ["192.0.2.1", "192.0.2.2", "192.0.2.3"];
const ADDRS4: [&str; 4] = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"];

/// A MAC no host has, for injected frames (locally administered).
const MAC_X: &str = "02:00:5e:00:13:37";
const MAC_Y: &str = "02:00:5e:00:13:38";
const UNKNOWN_DST: &str = "02:00:5e:00:99:99";

fn fdb_has_vlan(ctl: &Ctl, mac: &str, port: &str, vlan: Option<u64>) -> bool {
    ctl.fdb()
        .unwrap()
        .iter()
        .any(|(m, p, v)| m.eq_ignore_ascii_case(mac) && p == port && *v == vlan)
}

/// Control for the harness itself: the kernel bridge (no VLANs) between two hosts passes
/// ping and a verified TCP stream, and a capture sees the peer's frames. If this fails, the
/// machine, not qbridge, is the problem.
#[test]
fn harness_kernel_bridge_baseline() {
    if let Some(reason) = support::skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let _g = support::serial();
    let star = Star::new("kbr", &ADDRS2).unwrap();
    let sw = &star.sw;
    support::ip_in(sw, &["link", "add", "br0", "type", "bridge"]).unwrap();
    for dev in ["s1", "s2"] {
        support::ip_in(sw, &["link", "set", dev, "master", "br0"]).unwrap();
    }
    support::ip_in(sw, &["link", "set", "br0", "up"]).unwrap();
    let (h1, h2) = (star.h(1), star.h(2));
    let cap = Capture::start(&h2.ns, "eth0", 64).unwrap();
    assert_ping(h1, h2, 5);
    let r = tcp_transfer(h1, h2, 8 << 20, Duration::from_secs(30)).unwrap();
    let c = cap.finish().unwrap();
    assert!(c.count_from(&[&h1.mac]) > 0, "{}", c.summary());
    eprintln!(
        "kernel bridge: {:.2} Gbit/s; {}",
        r.gbit_per_s(),
        c.summary()
    );
}

/// bridge_vlan_aware.sh `ping_ipv4` with two VLANs: hosts in the same VLAN reach each other
/// (ICMP and a verified TCP stream); hosts in the same IP subnet but another VLAN do not, and
/// none of their frames (ARP broadcasts included) leak into the other VLAN.
#[test]
fn vlan_aware_forwarding_and_isolation_between_vlans() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("vaware", &ADDRS4).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         link set dev p3 master br0\nlink set dev p4 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n\
         vlan add vid 20 dev p3 pvid untagged\nvlan add vid 20 dev p4 pvid untagged\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2, h3, h4) = (star.h(1), star.h(2), star.h(3), star.h(4));
    let cap3 = Capture::start(&h3.ns, "eth0", 0).unwrap();
    let cap4 = Capture::start(&h4.ns, "eth0", 0).unwrap();
    assert_ping(h1, h2, 10);
    tcp_transfer(h1, h2, 8 << 20, Duration::from_secs(60)).unwrap();
    assert!(!ping_ok(h1, &h3.ip), "h1 (VLAN 10) reached h3 (VLAN 20)");
    assert!(!ping_ok(h2, &h4.ip), "h2 (VLAN 10) reached h4 (VLAN 20)");
    let (c3, c4) = (cap3.finish().unwrap(), cap4.finish().unwrap());
    assert_eq!(
        c3.count_from(&[&h1.mac, &h2.mac]),
        0,
        "h3 saw VLAN 10: {}",
        c3.summary()
    );
    assert_eq!(
        c4.count_from(&[&h1.mac, &h2.mac]),
        0,
        "h4 saw VLAN 10: {}",
        c4.summary()
    );
    assert_ping(h3, h4, 10);
    // Learning happens in the VLAN the frame was classified into.
    assert!(
        fdb_has_vlan(&ctl, &h1.mac, "p1", Some(10)),
        "{:?}",
        ctl.fdb()
    );
    assert!(
        fdb_has_vlan(&ctl, &h3.mac, "p3", Some(20)),
        "{:?}",
        ctl.fdb()
    );
}

/// bridge_vlan_aware.sh `vlan`/PVID behaviour plus trunk tagging: two bridges in one daemon
/// joined by a veth trunk (VLAN 10 tagged). Hosts on access ports (PVID 10, egress untagged)
/// send and receive untagged frames; every frame on the trunk carries exactly one 0x8100 tag
/// with VID 10; ping and a verified TCP stream cross; and a frame arriving at an access port
/// leaves it untagged.
#[test]
fn pvid_untagged_egress_and_trunk_tagging() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut lab = Lab::new("trunk");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "192.0.2.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "192.0.2.2/24", &sw, "s2").unwrap();
    lab.veth(&sw, "t1", &sw, "t2").unwrap();
    let batch = "\
link add br1 type bridge vlan_filtering 1 vlan_default_pvid 0
link add br2 type bridge vlan_filtering 1 vlan_default_pvid 0
link add a1 type afpacket dev s1
link add tr1 type afpacket dev t1
link add tr2 type afpacket dev t2
link add a2 type afpacket dev s2
link set dev a1 master br1
link set dev tr1 master br1
link set dev tr2 master br2
link set dev a2 master br2
vlan add vid 10 dev a1 pvid untagged
vlan add vid 10 dev tr1
vlan add vid 10 dev tr2
vlan add vid 10 dev a2 pvid untagged
";
    let _ctl = lab.daemon(&sw, batch).unwrap();
    let cap_t1 = Capture::start(&sw, "t1", 100_000).unwrap();
    let cap_t2 = Capture::start(&sw, "t2", 100_000).unwrap();
    let cap_h2 = Capture::start(&h2.ns, "eth0", 100_000).unwrap();
    assert_ping(&h1, &h2, 10);
    tcp_transfer(&h1, &h2, 8 << 20, Duration::from_secs(60)).unwrap();
    let (t1, t2, c2) = (
        cap_t1.finish().unwrap(),
        cap_t2.finish().unwrap(),
        cap_h2.finish().unwrap(),
    );
    for (name, c) in [("t1", &t1), ("t2", &t2)] {
        assert!(c.total > 0, "nothing on trunk end {name}");
        let bad: Vec<String> = c
            .frames
            .iter()
            .filter(|f| f.tags != [(0x8100, 10)])
            .take(5)
            .map(|f| f.describe())
            .collect();
        assert!(
            bad.is_empty(),
            "trunk {name}: frames without tag 8100/10: {bad:?}"
        );
    }
    assert!(
        c2.frames.iter().all(|f| f.tags.is_empty()),
        "tagged frame at access host: {}",
        c2.summary()
    );
    assert!(c2.count_from(&[&h1.mac]) > 0);
}

/// bridge_vlan_aware.sh `other_tpid`: on an 802.1Q bridge, a frame whose outer tag is 0x88a8
/// (VID 3, then 0x8100 VID 5) is untagged to the bridge: it is learned and forwarded in the
/// ingress port's PVID (1, not 3 or 5), leaves untouched (both tags) on a port where VLAN 1 is
/// egress-untagged, and once the PVID is removed from the ingress port it is dropped.
#[test]
fn other_tpid_frames_are_untagged() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("otpid", &ADDRS2).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2) = (star.h(1), star.h(2));
    let f = frame(UNKNOWN_DST, MAC_X, &[(0x88a8, 3), (0x8100, 5)], 0x0800, 46);
    let cap = Capture::start(&h2.ns, "eth0", 100).unwrap();
    inject(&h1.ns, "eth0", std::slice::from_ref(&f)).unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || fdb_has_vlan(
            &ctl,
            MAC_X,
            "p1",
            Some(1)
        )),
        "not learned in PVID 1: {:?}",
        ctl.fdb()
    );
    let c = cap.finish().unwrap();
    let got = c.kept_matching(|x| x.src == support::parse_mac(MAC_X));
    assert_eq!(got.len(), 1, "{}", c.summary());
    assert_eq!(got[0].tags, vec![(0x88a8, 3), (0x8100, 5)]);
    assert_eq!(got[0].head[..], f[..got[0].head.len()]);

    ctl.cmd(&["vlan", "del", "vid", "1", "dev", "p1"]).unwrap();
    let cap = Capture::start(&h2.ns, "eth0", 100).unwrap();
    inject(&h1.ns, "eth0", &[f]).unwrap();
    let c = cap.finish().unwrap();
    assert_eq!(c.count_from(&[MAC_X]), 0, "forwarded without a PVID");
}

/// lib.sh `learning_test` (bridge_vlan_aware.sh, bridge_vlan_unaware.sh `learning`): with
/// learning on, a source MAC is learned on its ingress port and unicast to it goes only there
/// (a third host sees none of it); with `learning off` no entry appears.
#[test]
fn learning_per_port_flag() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("learn", &ADDRS3).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\nlink set dev p3 master br0\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2, h3) = (star.h(1), star.h(2), star.h(3));
    inject(
        &h1.ns,
        "eth0",
        &[frame("ff:ff:ff:ff:ff:ff", MAC_X, &[], 0x0800, 46)],
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || fdb_has_vlan(
            &ctl,
            MAC_X,
            "p1",
            Some(1)
        )),
        "{:?}",
        ctl.fdb()
    );
    // Known unicast to MAC_X goes to p1 only.
    let cap1 = Capture::start(&h1.ns, "eth0", 10).unwrap();
    let cap3 = Capture::start(&h3.ns, "eth0", 10).unwrap();
    inject(&h2.ns, "eth0", &[frame(MAC_X, MAC_Y, &[], 0x0800, 46)]).unwrap();
    let (c1, c3) = (cap1.finish().unwrap(), cap3.finish().unwrap());
    assert_eq!(c1.count_from(&[MAC_Y]), 1, "{}", c1.summary());
    assert_eq!(c3.count_from(&[MAC_Y]), 0, "known unicast flooded");
    // Real hosts: learned where they are.
    assert_ping(h1, h3, 3);
    assert!(fdb_has_vlan(&ctl, &h1.mac, "p1", Some(1)));
    assert!(fdb_has_vlan(&ctl, &h3.mac, "p3", Some(1)));

    ctl.cmd(&["link", "set", "dev", "p2", "learning", "off"])
        .unwrap();
    ctl.cmd(&["fdb", "flush", "dev", "p2"]).unwrap();
    inject(
        &h2.ns,
        "eth0",
        &[frame("ff:ff:ff:ff:ff:ff", MAC_Y, &[], 0x0800, 46)],
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let fdb = ctl.fdb().unwrap();
    assert!(
        !fdb.iter().any(|(m, _, _)| m.eq_ignore_ascii_case(MAC_Y)),
        "learned with learning off: {fdb:?}"
    );
}

/// lib.sh `flood_test` (`flood_unicast_test`, `flood_multicast_test`, broadcast): unknown
/// unicast, multicast and broadcast reach a port with the matching flag on and not one with
/// it off; turning the flag back on restores delivery.
#[test]
fn flooding_per_port_flags() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("flood", &ADDRS3).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\nlink set dev p3 master br0\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2, h3) = (star.h(1), star.h(2), star.h(3));
    let cases = [
        ("flood", UNKNOWN_DST),
        ("mcast_flood", "01:00:5e:01:02:03"),
        ("bcast_flood", "ff:ff:ff:ff:ff:ff"),
    ];
    for (flag, dst) in cases {
        let f = frame(dst, MAC_X, &[], 0x0800, 46);
        ctl.cmd(&["link", "set", "dev", "p3", flag, "off"]).unwrap();
        let cap2 = Capture::start(&h2.ns, "eth0", 0).unwrap();
        let cap3 = Capture::start(&h3.ns, "eth0", 0).unwrap();
        inject(&h1.ns, "eth0", std::slice::from_ref(&f)).unwrap();
        let (c2, c3) = (cap2.finish().unwrap(), cap3.finish().unwrap());
        assert_eq!(
            c2.count_from(&[MAC_X]),
            1,
            "{flag} on: not delivered to {dst}"
        );
        assert_eq!(c3.count_from(&[MAC_X]), 0, "{flag} off: delivered to {dst}");

        ctl.cmd(&["link", "set", "dev", "p3", flag, "on"]).unwrap();
        let cap3 = Capture::start(&h3.ns, "eth0", 0).unwrap();
        inject(&h1.ns, "eth0", &[f]).unwrap();
        let c3 = cap3.finish().unwrap();
        assert_eq!(
            c3.count_from(&[MAC_X]),
            1,
            "{flag} back on: {dst} not delivered"
        );
    }
}

/// bridge_port_isolation.sh: isolated ports do not talk to each other, both still talk to a
/// non-isolated port (ICMP), and broadcast from an isolated port does not reach the other.
#[test]
fn port_isolation() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("isol", &ADDRS3).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}\
         link set dev p1 master br0 isolated on\nlink set dev p2 master br0 isolated on\n\
         link set dev p3 master br0\n",
        star.port_lines()
    );
    let _ctl = star.daemon(&batch).unwrap();
    let (h1, h2, h3) = (star.h(1), star.h(2), star.h(3));
    assert_ping(h1, h3, 5);
    assert_ping(h2, h3, 5);
    let cap2 = Capture::start(&h2.ns, "eth0", 0).unwrap();
    assert!(!ping_ok(h1, &h2.ip), "isolated h1 reached isolated h2");
    let c2 = cap2.finish().unwrap();
    assert_eq!(c2.count_from(&[&h1.mac]), 0, "{}", c2.summary());
}

/// bridge_vlan_aware.sh `learning` with `ageing_time $LOW_AGEING_TIME`: a learned entry
/// disappears once idle longer than the ageing time, and an entry kept busy stays.
#[test]
fn ageing_removes_idle_entries() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("age", &ADDRS2).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 ageing_time 2\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2) = (star.h(1), star.h(2));
    let bcast = |src| frame("ff:ff:ff:ff:ff:ff", src, &[], 0x0800, 46);
    inject(&h1.ns, "eth0", &[bcast(MAC_X)]).unwrap();
    inject(&h2.ns, "eth0", &[bcast(MAC_Y)]).unwrap();
    assert!(wait_until(Duration::from_secs(2), || ctl
        .fdb_has(MAC_X, "p1")
        .unwrap()));
    // Keep MAC_Y busy for 4 s while MAC_X idles.
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(500));
        inject(&h2.ns, "eth0", &[bcast(MAC_Y)]).unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(4), || !ctl
            .fdb_has(MAC_X, "p1")
            .unwrap()),
        "idle entry did not age out: {:?}",
        ctl.fdb()
    );
    assert!(ctl.fdb_has(MAC_Y, "p2").unwrap(), "busy entry aged out");
    let _ = h1;
}

/// bridge_vlan_aware.sh `vlan_deletion`: removing the VLAN from a port at run time removes
/// the port's entries in it and stops traffic; adding it back restores traffic. The daemon
/// applies both without a restart.
#[test]
fn vlan_deletion_at_run_time() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("vdel", &ADDRS2).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2) = (star.h(1), star.h(2));
    assert_ping(h1, h2, 3);
    assert!(fdb_has_vlan(&ctl, &h2.mac, "p2", Some(10)));
    ctl.cmd(&["vlan", "del", "vid", "10", "dev", "p2"]).unwrap();
    assert!(!ctl.fdb_has(&h2.mac, "p2").unwrap(), "{:?}", ctl.fdb());
    assert!(!ping_ok(h1, &h2.ip), "ping crossed after vlan del");
    ctl.cmd(&["vlan", "add", "vid", "10", "dev", "p2", "pvid", "untagged"])
        .unwrap();
    assert_ping(h1, h2, 3);
}

/// bridge_vlan_unaware.sh `ping_ipv4`, `learning`: a bridge without VLAN filtering forwards
/// every frame whatever its tags, unchanged (a 0x8100 VID 77 frame arrives with its tag), and
/// learns in FID 0.
#[test]
fn vlan_unaware_bridge_passes_tags_unchanged() {
    skip_unless_netns!();
    let _g = support::serial();
    let mut star = Star::new("vunaw", &ADDRS2).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).unwrap();
    let (h1, h2) = (star.h(1), star.h(2));
    assert_ping(h1, h2, 5);
    tcp_transfer(h1, h2, 4 << 20, Duration::from_secs(60)).unwrap();
    let cap = Capture::start(&h2.ns, "eth0", 10).unwrap();
    let f = frame(UNKNOWN_DST, MAC_X, &[(0x8100, 77)], 0x0800, 46);
    inject(&h1.ns, "eth0", &[f]).unwrap();
    let c = cap.finish().unwrap();
    let got = c.kept_matching(|x| x.src == support::parse_mac(MAC_X));
    assert_eq!(got.len(), 1, "{}", c.summary());
    assert_eq!(got[0].tags, vec![(0x8100, 77)]);
    assert!(ctl.fdb_has(MAC_X, "p1").unwrap(), "{:?}", ctl.fdb());
}
