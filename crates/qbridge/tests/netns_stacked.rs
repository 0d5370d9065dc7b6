//! The seeds' stacked VLAN device on real namespaces (root only): host A's `eth0.100.10`
//! (802.1Q C-VLAN 10 on 802.1ad S-VLAN 100 on `eth0`), made by a qbridge daemon in host A,
//! talks to host B across a qbridge 802.1ad provider bridge:
//!
//! ```text
//! hostA: eth0.100.10 ─ eth0.100 ─ eth0 ══ a0 ─ [pb: 802.1ad, S-VLAN 100] ─ b0 ══ eth0 ─ eth0.10 :hostB
//!        (qbridge in hostA: TAPs)      trunk     a0 tagged, b0 customer port      (qbridge in hostB)
//! ```
//!
//! Every link is a veth at MTU 1500; nobody sets an MTU by hand (each daemon raises its own
//! device's MTU for the tags it pushes). On the trunk every frame carries both tags; host A's
//! kernel TCP uses TSO on its TAP, and the super-frames cross to B whole (no software
//! segmentation anywhere) because the veths segment two tags themselves.

mod support;

use std::time::Duration;

use support::{assert_ping, host_on, ping, tcp_transfer, Capture, Ctl, Host, Lab};

struct Stack {
    _lab: Lab,
    pb: String,
    a: Host,
    b: Host,
    ctl_a: Ctl,
    ctl_b: Ctl,
    ctl_pb: Ctl,
}

const PB: &str = "\
link add pb type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add a0 type afpacket dev a0
link add b0 type afpacket dev b0
link set dev a0 master pb
link set dev b0 master pb
vlan add vid 100 dev a0
vlan del vid 1 dev a0
vlan add vid 100 dev b0 pvid untagged
vlan del vid 1 dev b0
";

const HOST_A: &str = "\
link add eth0 type afpacket dev eth0
link add link eth0 name eth0.100 type vlan protocol 802.1ad id 100
link add link eth0.100 name eth0.100.10 type vlan protocol 802.1Q id 10
";

const HOST_B: &str = "\
link add eth0 type afpacket dev eth0
link add link eth0 name eth0.10 type vlan id 10
";

fn build() -> Stack {
    let mut lab = Lab::new("stacked");
    let pb = lab.netns("pb").unwrap();
    let na = lab.netns("hostA").unwrap();
    let nb = lab.netns("hostB").unwrap();
    lab.veth(&na, "eth0", &pb, "a0").unwrap();
    lab.veth(&nb, "eth0", &pb, "b0").unwrap();
    let ctl_pb = lab.daemon(&pb, PB).unwrap();
    let ctl_a = lab.daemon(&na, HOST_A).unwrap();
    let ctl_b = lab.daemon(&nb, HOST_B).unwrap();
    let a = host_on("hostA", &na, "eth0.100.10", "10.20.0.1/24");
    let b = host_on("hostB", &nb, "eth0.10", "10.20.0.2/24");
    Stack {
        _lab: lab,
        pb,
        a,
        b,
        ctl_a,
        ctl_b,
        ctl_pb,
    }
}

fn mtu(ns: &str, dev: &str) -> u64 {
    let out = support::ip_in(ns, &["-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["mtu"].as_u64().unwrap_or(0)
}

/// Ping, a 1500-byte DF ping, and 100 MB of verified TCP through `eth0.100.10`; both tags on
/// every frame of the trunk; super-frames whole; the devices and their chain in `link show`.
#[test]
fn stacked_vlan_device_across_a_provider_bridge() {
    skip_unless_netns!();
    let s = build();
    // `ip link` shows the daemon's TAPs at MTU 1500, and the trunk end raised for two tags.
    assert_eq!(mtu(&s.a.ns, "eth0.100.10"), 1500);
    assert!(
        mtu(&s.a.ns, "eth0") >= 1508,
        "eth0 mtu {}",
        mtu(&s.a.ns, "eth0")
    );

    let cap = Capture::start(&s.pb, "a0", 0).unwrap();
    assert_ping(&s.a, &s.b, 10);
    // A full 1500-byte IP packet with DF: 1522 bytes on the trunk.
    let out = support::exec_in(
        &s.a.ns,
        "ping",
        &[
            "-n", "-q", "-c", "3", "-i", "0.1", "-W", "1", "-M", "do", "-s", "1472", &s.b.ip,
        ],
    )
    .unwrap_or_else(|e| panic!("1500-byte DF ping failed: {e}\n{}", s.ctl_a.stats_text()));
    assert!(out.contains("3 received"), "{out}");

    let r = tcp_transfer(&s.a, &s.b, 100 << 20, Duration::from_secs(120)).unwrap_or_else(|e| {
        panic!(
            "TCP through eth0.100.10: {e}\nhost A:\n{}\nprovider bridge:\n{}",
            s.ctl_a.stats_text(),
            s.ctl_pb.stats_text()
        )
    });
    eprintln!(
        "TCP through eth0.100.10: {} bytes in {:.2} s ({:.2} Gbit/s)",
        r.bytes,
        r.secs,
        r.gbit_per_s()
    );
    let c = cap.finish().unwrap();
    eprintln!("trunk a0 received: {}", c.summary());

    // Every frame from host A's stacked device on the trunk: S-tag 100 outside, C-tag 10.
    let a_mac = support::parse_mac(&s.a.mac);
    let from_a: Vec<_> = c
        .by_src_stack
        .iter()
        .filter(|((src, _), _)| *src == a_mac)
        .collect();
    assert!(!from_a.is_empty(), "no frame from host A on the trunk");
    for ((_, tags), n) in &from_a {
        assert_eq!(
            tags.as_slice(),
            &[(0x88a8, 100), (0x8100, 10)],
            "{n} frames from host A with tags {tags:x?}"
        );
    }
    // Super-frames crossed whole: the veth takes two tags with TSO, so nobody segmented.
    assert!(
        c.tcp_super_frames > 0,
        "no super-frame on the trunk: {}",
        c.summary()
    );
    let a_eth0 = s.ctl_a.json(&["link", "show", "dev", "eth0"]).unwrap();
    assert_eq!(a_eth0[0]["runtime"]["tx_sw_gso"], 0, "{a_eth0}");

    // Nothing dropped for size or refused anywhere on the path.
    for ctl in [&s.ctl_a, &s.ctl_pb, &s.ctl_b] {
        let v = ctl.json(&["-s", "link", "show"]).unwrap();
        for l in v.as_array().unwrap() {
            let drops = &l["stats"]["drops"];
            for r in ["oversize", "tx_too_long", "tx_error", "stack_loop"] {
                assert!(drops[r].is_null(), "{}: {r} {}", l["ifname"], drops[r]);
            }
        }
    }

    // The chain, as `ip -d link` would show it.
    let v = s
        .ctl_a
        .json(&["link", "show", "dev", "eth0.100.10"])
        .unwrap();
    assert_eq!(v[0]["link"], "eth0.100");
    assert_eq!(v[0]["linkinfo"]["info_data"]["protocol"], "802.1Q");
    assert_eq!(v[0]["linkinfo"]["info_data"]["id"], 10);
    assert_eq!(v[0]["address"], s.a.mac.to_lowercase());
    // The lower device is not promiscuous: it takes only its devices' addresses.
    let v = s.ctl_a.json(&["link", "show", "dev", "eth0"]).unwrap();
    assert_eq!(v[0]["runtime"]["promisc"], false, "{v}");

    // Deleting eth0.100 takes eth0.100.10 with it: its TAP goes, host A is cut off.
    s.ctl_a.cmd(&["link", "del", "dev", "eth0.100"]).unwrap();
    let gone = support::wait_until(Duration::from_secs(5), || {
        support::ip_in(&s.a.ns, &["link", "show", "dev", "eth0.100.10"]).is_err()
    });
    assert!(gone, "the TAP eth0.100.10 is still there");
    assert_eq!(ping(&s.b, &s.a.ip, 2).received, 0);
}
