//! Learning per (S-VID, C-VID) with real kernel traffic (root only; `docs/semantics.md` §K7):
//! two customer sites use the same MAC address in C-VLANs 10 and 20 of one S-VLAN behind two
//! ports of an 802.1ad bridge. With `learn_inner_vid on` each C-VLAN's traffic reaches its own
//! site while both talk at once; the FDB holds one entry per C-VLAN.
//!
//! ```text
//!   a: eth0 ─ s100 (88a8/100) ─ s100.10 (10.84.10.1, MAC X) ══ a1 ┐
//!   b: eth0 ─ s100 (88a8/100) ─ s100.20 (10.84.20.1, MAC X) ══ b1 ┼ pe (802.1ad, learn_inner_vid on)
//!   t: eth0 ─ s100 ─ s100.10 (10.84.10.2), s100.20 (10.84.20.2) ══ t1 ┘
//! ```

mod support;

use std::time::Duration;
use support::{assert_ping, host_on, tcp_transfer, Capture, Lab};

const SAME_MAC: &str = "02:00:5e:84:00:01";

#[test]
fn one_mac_in_two_c_vlans_of_one_s_vlan() {
    skip_unless_netns!();
    let mut lab = Lab::new("innerlrn");
    let pe = lab.netns("pe").unwrap();
    let na = lab.netns("a").unwrap();
    let nb = lab.netns("b").unwrap();
    let nt = lab.netns("t").unwrap();
    lab.veth(&na, "eth0", &pe, "a1").unwrap();
    lab.veth(&nb, "eth0", &pe, "b1").unwrap();
    lab.veth(&nt, "eth0", &pe, "t1").unwrap();
    let ctl = lab
        .daemon(
            &pe,
            "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad learn_inner_vid on\n\
             link add a1 type afpacket dev a1\nlink add b1 type afpacket dev b1\n\
             link add t1 type afpacket dev t1\n\
             link set dev a1 master pe\nlink set dev b1 master pe\nlink set dev t1 master pe\n\
             vlan add vid 100 dev a1\nvlan add vid 100 dev b1\nvlan add vid 100 dev t1\n",
        )
        .unwrap();
    for (ns, c) in [(&na, 10), (&nb, 20)] {
        lab.daemon(
            ns,
            &format!(
                "link add eth0 type afpacket dev eth0\n\
                 link add link eth0 name s100 type vlan protocol 802.1ad id 100\n\
                 link add link s100 name s100.{c} type vlan id {c} address {SAME_MAC}\n"
            ),
        )
        .unwrap();
    }
    lab.daemon(
        &nt,
        "link add eth0 type afpacket dev eth0\n\
         link add link eth0 name s100 type vlan protocol 802.1ad id 100\n\
         link add link s100 name s100.10 type vlan id 10\n\
         link add link s100 name s100.20 type vlan id 20\n",
    )
    .unwrap();
    let a = host_on("a/s100.10", &na, "s100.10", "10.84.10.1/24");
    let b = host_on("b/s100.20", &nb, "s100.20", "10.84.20.1/24");
    let ta = host_on("t/s100.10", &nt, "s100.10", "10.84.10.2/24");
    let tb = host_on("t/s100.20", &nt, "s100.20", "10.84.20.2/24");
    assert_eq!(a.mac.to_lowercase(), SAME_MAC);
    assert_eq!(b.mac.to_lowercase(), SAME_MAC);
    assert_ping(&ta, &a, 2);
    assert_ping(&tb, &b, 2);

    // Both sites busy at once: a TCP transfer to a while b pings; nothing of C-VLAN 10 that
    // is addressed to X may reach b's wire.
    let at_b = Capture::start(&nb, "eth0", 20_000).unwrap();
    let pinger = {
        let (tb, b) = (tb.clone(), b.clone());
        std::thread::spawn(move || assert_ping(&b, &tb, 20))
    };
    tcp_transfer(&ta, &a, 8 << 20, Duration::from_secs(60)).expect("TCP to site a");
    pinger.join().expect("pings from site b");
    let cb = at_b.finish().unwrap();
    let misdelivered = cb.kept_matching(|f| {
        f.dst == support::parse_mac(SAME_MAC) && f.tags == [(0x88a8, 100), (0x8100, 10)]
    });
    assert!(
        misdelivered.is_empty(),
        "{} frames of C-VLAN 10 for X reached site b: {}",
        misdelivered.len(),
        cb.summary()
    );
    assert!(
        cb.stacks_from(&tb.mac)
            .contains(&vec![(0x88a8, 100), (0x8100, 20)]),
        "b's replies came: {}",
        cb.summary()
    );

    // The FDB: X twice in S-VLAN 100, once per C-VLAN, on its own port.
    let fdb = ctl.json(&["fdb", "show", "br", "pe"]).unwrap();
    let mut x: Vec<(String, u64, u64)> = fdb
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mac"].as_str() == Some(SAME_MAC))
        .map(|e| {
            (
                e["ifname"].as_str().unwrap_or("").to_string(),
                e["vlan"].as_u64().unwrap_or(0),
                e["inner_vlan"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    x.sort();
    assert_eq!(
        x,
        [("a1".to_string(), 100, 10), ("b1".to_string(), 100, 20)],
        "{fdb}"
    );
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}
