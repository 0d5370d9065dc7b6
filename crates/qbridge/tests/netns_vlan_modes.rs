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
//! no 8021q); the provider bridge runs in its own namespace. See `docs/semantics.md` §G, and §H
//! for the second test: the S-tag's priority from `pcp_mode`.

mod support;

use std::time::Duration;

use support::{assert_ping, host_on, ping, Capture, Ctl, Host, Lab};

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

/// The three namespaces, the daemons and the six addresses.
struct Net {
    lab: Lab,
    nc: String,
    nf: String,
    ctl_pe: Ctl,
    c0: Host,
    c10: Host,
    c20: Host,
    f0: Host,
    f10: Host,
    f20: Host,
}

fn build(name: &str, pe_batch: &str) -> Net {
    let mut lab = Lab::new(name);
    let pe = lab.netns("pe").unwrap();
    let nc = lab.netns("cust").unwrap();
    let nf = lab.netns("far").unwrap();
    lab.veth(&nc, "eth0", &pe, "c1").unwrap();
    lab.veth(&nf, "eth0", &pe, "t1").unwrap();
    let ctl_pe = lab.daemon(&pe, pe_batch).unwrap();
    lab.daemon(&nc, CUST).unwrap();
    lab.daemon(&nf, FAR).unwrap();
    Net {
        c0: host_on("cust/eth0", &nc, "eth0", "10.51.0.1/24"),
        c10: host_on("cust/eth0.10", &nc, "eth0.10", "10.52.0.1/24"),
        c20: host_on("cust/eth0.20", &nc, "eth0.20", "10.53.0.1/24"),
        f0: host_on("far/eth0.100", &nf, "eth0.100", "10.51.0.2/24"),
        f10: host_on("far/eth0.100.10", &nf, "eth0.100.10", "10.52.0.2/24"),
        f20: host_on("far/eth0.100.20", &nf, "eth0.100.20", "10.53.0.2/24"),
        lab,
        nc,
        nf,
        ctl_pe,
    }
}

#[test]
fn dot1q_tunnel_port_carries_a_customer_into_its_s_vlan() {
    skip_unless_netns!();
    let n = build("vlanmodes", PE);
    let Net {
        mut lab,
        nc,
        nf,
        ctl_pe,
        c0,
        c10,
        c20,
        f0,
        f10,
        f20,
    } = n;

    // Untagged (customer VLAN 0) and C-VLAN 10 cross, each with S-tag 100 on the trunk (seen
    // where the trunk arrives: a capture on t1 itself would not show what qbridge sends there
    // with qdisc bypass).
    let cap = Capture::start(&nf, "eth0", 0).unwrap();
    assert_ping(&c0, &f0, 5);
    assert_ping(&c10, &f10, 5);
    let got = cap.finish().unwrap();
    assert_eq!(
        got.stacks_from(&c0.mac),
        [vec![(0x88a8, 100)]],
        "{}",
        got.summary()
    );
    assert_eq!(
        got.stacks_from(&c10.mac),
        [vec![(0x88a8, 100), (0x8100, 10)]],
        "{}",
        got.summary()
    );

    // C-VLAN 20 is not in cvlans: nothing crosses, and the port says why.
    let before = drops(&ctl_pe, "c1", "cvlan_not_allowed");
    assert_eq!(ping(&c20, &f20.ip, 3).received, 0);
    // The kernel's last ARP retry may still be on its way as ping gives up.
    let mut after = before;
    support::wait_until(Duration::from_secs(5), || {
        after = drops(&ctl_pe, "c1", "cvlan_not_allowed");
        after >= before + 3
    });
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

/// `pcp_mode` on the tunnel port: untagged frames get `default_pcp`, C-tagged ones the mapped
/// priority of their C-tag (the C-tag itself untouched), and `fixed` overrides both, live. The
/// kernel's own pings; the priorities read off the wire where the trunk arrives.
#[test]
fn pcp_mode_sets_the_s_tag_priority() {
    skip_unless_netns!();
    let pe_batch = PE.replace(
        "vlan_mode dot1q-tunnel tag 100 cvlans 0,10",
        "vlan_mode dot1q-tunnel tag 100 pcp_mode map 0:6 default_pcp 2",
    );
    let Net {
        mut lab,
        nf,
        ctl_pe,
        c0,
        c10,
        f0,
        f10,
        ..
    } = build("pcp", &pe_batch);
    // (S-tag PCP, inner tags' PCPs) of the frames from `from` seen at the far end.
    let pcps = |cap: &support::Captured, from: &Host| -> Vec<(u16, Vec<u16>)> {
        let m = support::parse_mac(&from.mac);
        let mut v: Vec<(u16, Vec<u16>)> = cap
            .frames
            .iter()
            .filter(|f| f.src == m)
            .map(|f| {
                let tci = |at: usize| u16::from_be_bytes([f.head[at], f.head[at + 1]]) >> 13;
                let inner = (1..f.tags.len()).map(|i| tci(14 + 4 * i)).collect();
                (tci(14), inner)
            })
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let cap = Capture::start(&nf, "eth0", 500).unwrap();
    assert_ping(&c0, &f0, 3);
    assert_ping(&c10, &f10, 3);
    let got = cap.finish().unwrap();
    assert_eq!(pcps(&got, &c0), [(2, vec![])], "untagged: default_pcp");
    assert_eq!(pcps(&got, &c10), [(6, vec![0])], "C-tag PCP 0 mapped to 6");

    ctl_pe
        .cmd(&["link", "set", "dev", "c1", "pcp_mode", "fixed", "5"])
        .unwrap();
    let cap = Capture::start(&nf, "eth0", 500).unwrap();
    assert_ping(&c0, &f0, 3);
    assert_ping(&c10, &f10, 3);
    let got = cap.finish().unwrap();
    assert_eq!(pcps(&got, &c0), [(5, vec![])]);
    assert_eq!(pcps(&got, &c10), [(5, vec![0])]);
    // Counted by priority on the customer port.
    let v = ctl_pe.json(&["-s", "link", "show", "dev", "c1"]).unwrap();
    let rx = &v[0]["stats"]["rx_pcp"];
    for p in [2, 5, 6] {
        assert!(rx[p].as_u64().unwrap_or(0) >= 3, "rx_pcp[{p}] in {rx}");
    }
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}
