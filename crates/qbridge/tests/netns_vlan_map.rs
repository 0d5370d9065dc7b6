//! 1:1 VLAN translation with real kernel traffic (root only; `docs/semantics.md` §K): one site
//! numbers its VLAN 10, the other 100; the switch between them translates.
//!
//! ```text
//!   h1: eth0.10 (10.81.0.1) ─ eth0 ══ s1/p1 [vlan map vid 10 translate 100] ─ br0 ─ p2/s2 ══ eth0 ─ eth0.100 (10.81.0.2) :h2
//! ```
//!
//! The hosts' VLAN devices are qbridge's (this kernel has no 8021q).

mod support;

use std::time::Duration;
use support::{assert_ping, host_on, tcp_transfer, Capture, Lab};

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
    assert_eq!(
        c2.stacks_from(&h1.mac),
        [vec![(0x8100, 100)]],
        "{}",
        c2.summary()
    );
    assert_eq!(
        c1.stacks_from(&h2.mac),
        [vec![(0x8100, 10)]],
        "{}",
        c1.summary()
    );
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

/// Selective Q-in-Q with kernel pings (§K5): the customer's C-VLAN 10 goes into S-VLAN 100 and
/// C-VLAN 20 into S-VLAN 200 on an 802.1ad trunk; the far end has a stacked device per pair.
#[test]
fn selective_qinq_puts_each_c_vlan_in_its_s_vlan() {
    skip_unless_netns!();
    let mut lab = Lab::new("selqinq");
    let pe = lab.netns("pe").unwrap();
    let nc = lab.netns("cust").unwrap();
    let nf = lab.netns("far").unwrap();
    lab.veth(&nc, "eth0", &pe, "c1").unwrap();
    lab.veth(&nf, "eth0", &pe, "t1").unwrap();
    lab.daemon(
        &pe,
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad\n\
         link add c1 type afpacket dev c1\nlink add t1 type afpacket dev t1\n\
         link set dev c1 master pe\nlink set dev t1 master pe\n\
         vlan add vid 100 dev c1\nvlan add vid 200 dev c1\n\
         vlan add vid 100 dev t1\nvlan add vid 200 dev t1\n\
         vlan map add dev c1 cvid 10 svid 100\nvlan map add dev c1 cvid 20 svid 200\n",
    )
    .unwrap();
    lab.daemon(
        &nc,
        "link add eth0 type afpacket dev eth0\n\
         link add link eth0 name eth0.10 type vlan id 10\n\
         link add link eth0 name eth0.20 type vlan id 20\n",
    )
    .unwrap();
    lab.daemon(
        &nf,
        "link add eth0 type afpacket dev eth0\n\
         link add link eth0 name s100 type vlan protocol 802.1ad id 100\n\
         link add link s100 name s100.10 type vlan id 10\n\
         link add link eth0 name s200 type vlan protocol 802.1ad id 200\n\
         link add link s200 name s200.20 type vlan id 20\n",
    )
    .unwrap();
    let c10 = host_on("cust/eth0.10", &nc, "eth0.10", "10.82.10.1/24");
    let c20 = host_on("cust/eth0.20", &nc, "eth0.20", "10.82.20.1/24");
    let f10 = host_on("far/s100.10", &nf, "s100.10", "10.82.10.2/24");
    let f20 = host_on("far/s200.20", &nf, "s200.20", "10.82.20.2/24");
    let at_far = Capture::start(&nf, "eth0", 0).unwrap();
    let at_cust = Capture::start(&nc, "eth0", 0).unwrap();
    assert_ping(&c10, &f10, 3);
    assert_ping(&c20, &f20, 3);
    let (cf, cc) = (at_far.finish().unwrap(), at_cust.finish().unwrap());
    assert_eq!(
        cf.stacks_from(&c10.mac),
        [vec![(0x88a8, 100), (0x8100, 10)]],
        "{}",
        cf.summary()
    );
    assert_eq!(
        cf.stacks_from(&c20.mac),
        [vec![(0x88a8, 200), (0x8100, 20)]],
        "{}",
        cf.summary()
    );
    // The replies reach the customer with the S-tag removed, the C-tag kept.
    assert_eq!(
        cc.stacks_from(&f10.mac),
        [vec![(0x8100, 10)]],
        "{}",
        cc.summary()
    );
    assert_eq!(
        cc.stacks_from(&f20.mac),
        [vec![(0x8100, 20)]],
        "{}",
        cc.summary()
    );
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}

/// 2:1 and 2:2 maps with kernel traffic (§K6): on the provider side a pair S 100 + C 10 is a
/// single VLAN 500 on the local side (2:1), and S 100 + C 11 is S 200 + C 21 (2:2). Pings and
/// a verified TCP transfer each way of the 2:1 map; the tags as each side sees them.
#[test]
fn two_tag_maps_carry_pairs_to_one_vlan_and_to_another_pair() {
    skip_unless_netns!();
    let mut lab = Lab::new("tagmap");
    let pe = lab.netns("pe").unwrap();
    let nn = lab.netns("nni").unwrap();
    let nl = lab.netns("lan").unwrap();
    lab.veth(&nn, "eth0", &pe, "n1").unwrap();
    lab.veth(&nl, "eth0", &pe, "l1").unwrap();
    lab.daemon(
        &pe,
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad\n\
         link add n1 type afpacket dev n1\nlink add l1 type afpacket dev l1\n\
         link set dev n1 master pe\nlink set dev l1 master pe\n\
         vlan add vid 500 dev n1\nvlan add vid 200 dev n1\n\
         vlan add vid 500 dev l1\nvlan add vid 200 dev l1\n\
         vlan map add dev n1 svid 100 cvid 10 translate 500\n\
         vlan map add dev n1 svid 100 cvid 11 translate 200 21\n",
    )
    .unwrap();
    lab.daemon(
        &nn,
        "link add eth0 type afpacket dev eth0\n\
         link add link eth0 name s100 type vlan protocol 802.1ad id 100\n\
         link add link s100 name s100.10 type vlan id 10\n\
         link add link s100 name s100.11 type vlan id 11\n",
    )
    .unwrap();
    lab.daemon(
        &nl,
        "link add eth0 type afpacket dev eth0\n\
         link add link eth0 name s500 type vlan protocol 802.1ad id 500\n\
         link add link eth0 name s200 type vlan protocol 802.1ad id 200\n\
         link add link s200 name s200.21 type vlan id 21\n",
    )
    .unwrap();
    let n10 = host_on("nni/s100.10", &nn, "s100.10", "10.83.10.1/24");
    let n11 = host_on("nni/s100.11", &nn, "s100.11", "10.83.11.1/24");
    let l500 = host_on("lan/s500", &nl, "s500", "10.83.10.2/24");
    let l21 = host_on("lan/s200.21", &nl, "s200.21", "10.83.11.2/24");
    let at_lan = Capture::start(&nl, "eth0", 0).unwrap();
    let at_nni = Capture::start(&nn, "eth0", 0).unwrap();
    assert_ping(&n10, &l500, 3);
    assert_ping(&n11, &l21, 3);
    let (cl, cn) = (at_lan.finish().unwrap(), at_nni.finish().unwrap());
    assert_eq!(
        cl.stacks_from(&n10.mac),
        [vec![(0x88a8, 500)]],
        "{}",
        cl.summary()
    );
    assert_eq!(
        cl.stacks_from(&n11.mac),
        [vec![(0x88a8, 200), (0x8100, 21)]],
        "{}",
        cl.summary()
    );
    assert_eq!(
        cn.stacks_from(&l500.mac),
        [vec![(0x88a8, 100), (0x8100, 10)]],
        "{}",
        cn.summary()
    );
    assert_eq!(
        cn.stacks_from(&l21.mac),
        [vec![(0x88a8, 100), (0x8100, 11)]],
        "{}",
        cn.summary()
    );
    for (a, b) in [(&n10, &l500), (&l500, &n10)] {
        tcp_transfer(a, b, 4 << 20, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{} → {}: {e}", a.name, b.name));
    }
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}
