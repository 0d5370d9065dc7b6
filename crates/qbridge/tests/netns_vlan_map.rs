//! 1:1 VLAN translation with real kernel traffic (root only; `docs/semantics.md` §K): one site
//! numbers its VLAN 10, the other 100; the switch between them translates.
//!
//! ```text
//!   h1: eth0.10 (10.81.0.1) ─ eth0 ══ s1/p1 [vlan map vid 10 translate 100] ─ br0 ─ p2/s2 ══ eth0 ─ eth0.100 (10.81.0.2) :h2
//! ```
//!
//! The hosts' VLAN devices are qbridge's (this kernel has no 8021q).

mod support;

use support::{assert_ping, host_on, Capture, Lab};

const SW: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link set dev p1 master br0
link set dev p2 master br0
vlan add vid 100 dev p1
vlan add vid 100 dev p2
vlan map add dev p1 vid 10 translate 100
";

#[test]
fn vlan_10_on_one_side_is_vlan_100_on_the_other() {
    skip_unless_netns!();
    let mut lab = Lab::new("vlanmap");
    let sw = lab.netns("sw").unwrap();
    let n1 = lab.netns("h1").unwrap();
    let n2 = lab.netns("h2").unwrap();
    lab.veth(&n1, "eth0", &sw, "s1").unwrap();
    lab.veth(&n2, "eth0", &sw, "s2").unwrap();
    let ctl = lab.daemon(&sw, SW).unwrap();
    lab.daemon(
        &n1,
        "link add eth0 type afpacket dev eth0\nlink add link eth0 name eth0.10 type vlan id 10\n",
    )
    .unwrap();
    lab.daemon(
        &n2,
        "link add eth0 type afpacket dev eth0\nlink add link eth0 name eth0.100 type vlan id 100\n",
    )
    .unwrap();
    let h1 = host_on("h1/eth0.10", &n1, "eth0.10", "10.81.0.1/24");
    let h2 = host_on("h2/eth0.100", &n2, "eth0.100", "10.81.0.2/24");

    // Tags as each side sees them: h1's frames reach h2 tagged 100, h2's reach h1 tagged 10.
    let at_h2 = Capture::start(&n2, "eth0", 0).unwrap();
    let at_h1 = Capture::start(&n1, "eth0", 0).unwrap();
    assert_ping(&h1, &h2, 5);
    let (c2, c1) = (at_h2.finish().unwrap(), at_h1.finish().unwrap());
    let from = |c: &support::Captured, mac: &str| -> Vec<Vec<(u16, u16)>> {
        let m = support::parse_mac(mac);
        c.by_src_stack
            .keys()
            .filter(|(s, _)| *s == m)
            .map(|(_, t)| t.clone())
            .collect()
    };
    assert_eq!(
        from(&c2, &h1.mac),
        [vec![(0x8100, 100)]],
        "{}",
        c2.summary()
    );
    assert_eq!(from(&c1, &h2.mac), [vec![(0x8100, 10)]], "{}", c1.summary());
    // The FDB knows both hosts in VLAN 100, the VLAN inside.
    let fdb = ctl.json(&["fdb", "show", "br", "br0"]).unwrap();
    for mac in [&h1.mac, &h2.mac] {
        let e = fdb
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"].as_str() == Some(&mac.to_lowercase()))
            .unwrap_or_else(|| panic!("{mac} not learned: {fdb}"));
        assert_eq!(e["vlan"], 100, "{e}");
    }
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}
