//! Port VLAN modes with real kernel traffic (root only): a `dot1q-tunnel` customer port of an
//! 802.1ad provider bridge carries a customer's untagged and C-tagged traffic into S-VLAN 100,
//! admits only the customer VLANs in `cvlans`, and takes its S-tag off on the way back.
//!
//! ```text
//!  cust: eth0 10.51.0.1 (untagged, the kernel's own)      far: eth0.100       10.51.0.2
//!        eth0.10 10.52.0.1 (C-VLAN 10)                         eth0.100.10    10.52.0.2
//!        eth0.20 10.53.0.1 (C-VLAN 20)                         eth0.100.20    10.53.0.2
//!        eth0 ══ c1 ─ [pe: 802.1ad; c1 dot1q-tunnel tag 100 cvlans 0,10;
//!                      t1 trunk trunks 100] ─ t1 ══ eth0
//! ```
//!
//! The customer's VLAN devices and the far end's stacked devices are qbridge's (this kernel has
//! no 8021q); the provider bridge runs in its own namespace. See `docs/semantics.md` §G.

mod support;

use support::{assert_ping, host_on, ping, Capture, Host, Lab};

const PE: &str = "\
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add c1 type afpacket dev c1
link add t1 type afpacket dev t1
link set dev c1 master pe vlan_mode dot1q-tunnel tag 100 cvlans 0,10
link set dev t1 master pe vlan_mode trunk trunks 100
";

const CUST: &str = "\
link add eth0 type afpacket dev eth0
link add link eth0 name eth0.10 type vlan id 10
link add link eth0 name eth0.20 type vlan id 20
";

const FAR: &str = "\
link add eth0 type afpacket dev eth0
link add link eth0 name eth0.100 type vlan protocol 802.1ad id 100
link add link eth0.100 name eth0.100.10 type vlan id 10
link add link eth0.100 name eth0.100.20 type vlan id 20
";

#[test]
fn dot1q_tunnel_port_carries_a_customer_into_its_s_vlan() {
    skip_unless_netns!();
    let mut lab = Lab::new("vlanmodes");
    let pe = lab.netns("pe").unwrap();
    let nc = lab.netns("cust").unwrap();
    let nf = lab.netns("far").unwrap();
    lab.veth(&nc, "eth0", &pe, "c1").unwrap();
    lab.veth(&nf, "eth0", &pe, "t1").unwrap();
    let ctl_pe = lab.daemon(&pe, PE).unwrap();
    let _ctl_c = lab.daemon(&nc, CUST).unwrap();
    let _ctl_f = lab.daemon(&nf, FAR).unwrap();
    let c0 = host_on("cust/eth0", &nc, "eth0", "10.51.0.1/24");
    let c10 = host_on("cust/eth0.10", &nc, "eth0.10", "10.52.0.1/24");
    let c20 = host_on("cust/eth0.20", &nc, "eth0.20", "10.53.0.1/24");
    let f0 = host_on("far/eth0.100", &nf, "eth0.100", "10.51.0.2/24");
    let f10 = host_on("far/eth0.100.10", &nf, "eth0.100.10", "10.52.0.2/24");
    let f20: Host = host_on("far/eth0.100.20", &nf, "eth0.100.20", "10.53.0.2/24");

    // Untagged (customer VLAN 0) and C-VLAN 10 cross, each with S-tag 100 on the trunk (seen
    // where the trunk arrives: a capture on t1 itself would not show what qbridge sends there
    // with qdisc bypass).
    let cap = Capture::start(&nf, "eth0", 0).unwrap();
    assert_ping(&c0, &f0, 5);
    assert_ping(&c10, &f10, 5);
    let got = cap.finish().unwrap();
    let tags_from = |mac: &str| -> Vec<Vec<(u16, u16)>> {
        let m = support::parse_mac(mac);
        got.by_src_stack
            .keys()
            .filter(|(src, _)| *src == m)
            .map(|(_, t)| t.clone())
            .collect()
    };
    assert_eq!(
        tags_from(&c0.mac),
        [vec![(0x88a8, 100)]],
        "{}",
        got.summary()
    );
    assert_eq!(
        tags_from(&c10.mac),
        [vec![(0x88a8, 100), (0x8100, 10)]],
        "{}",
        got.summary()
    );

    // C-VLAN 20 is not in cvlans: nothing crosses, and the port says why.
    let before = drops(&ctl_pe, "c1", "cvlan_not_allowed");
    assert_eq!(ping(&c20, &f20.ip, 3).received, 0);
    let after = drops(&ctl_pe, "c1", "cvlan_not_allowed");
    assert!(after >= before + 3, "cvlan_not_allowed {before} -> {after}");

    // Admitting every customer VLAN, live: C-VLAN 20 crosses now.
    ctl_pe
        .cmd(&[
            "link",
            "set",
            "dev",
            "c1",
            "vlan_mode",
            "dot1q-tunnel",
            "tag",
            "100",
        ])
        .unwrap();
    // (The refused ARP requests left a FAILED neighbour entry behind: start afresh.)
    support::ip_in(&nc, &["neigh", "flush", "dev", "eth0.20"]).unwrap();
    assert_ping(&c20, &f20, 5);
    let v = ctl_pe.json(&["vlan", "show", "dev", "c1"]).unwrap();
    assert_eq!(v[0]["vlans"][0]["vlan"], 100, "{v}");
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}

fn drops(ctl: &support::Ctl, port: &str, reason: &str) -> u64 {
    let v = ctl.json(&["-s", "link", "show", "dev", port]).unwrap();
    v[0]["stats"]["drops"][reason].as_u64().unwrap_or(0)
}
