//! Drops inside a port backend reach the switch's named counters. A bridge whose ports neither
//! learn nor flood runs them non-promiscuous, subscribed only to the unicast addresses of the
//! static FDB entries on the other ports (docs/daemon.md). A veth delivers every frame anyway,
//! so the AF_PACKET port drops frames for other hosts itself — counted as `rx_filtered` on that
//! port, visible in `link show -s`, not lost silently — while the hosts still reach each other.

mod support;

use std::time::Duration;
use support::{assert_ping, frame, inject, skip_reason, Star};

#[test]
fn frames_filtered_by_a_non_promiscuous_port_are_counted() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new("bdrop", &["10.92.0.1", "10.92.0.2"]).expect("lab");
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         link set dev p1 learning off flood off mcast_flood on bcast_flood on\n\
         link set dev p2 learning off flood off mcast_flood on bcast_flood on\n\
         fdb add {} dev p1 vlan 1 static\nfdb add {} dev p2 vlan 1 static\n",
        star.port_lines(),
        h1.mac,
        h2.mac
    );
    let ctl = star.daemon(&batch).expect("daemon");
    assert_ping(&h1, &h2, 3);
    let stranger = frame("02:00:00:00:00:99", &h1.mac, &[], 0x0800, 46);
    inject(&h1.ns, &h1.ifname, &vec![stranger; 5]).expect("inject");
    let filtered = || -> u64 {
        let links = ctl.json(&["-s", "link", "show"]).unwrap_or_default();
        links
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["ifname"] == "p1")
            .filter_map(|l| l["stats"]["drops"]["rx_filtered"].as_u64())
            .sum()
    };
    let counted = support::wait_until(Duration::from_secs(5), || filtered() >= 5);
    assert!(
        counted,
        "rx_filtered on p1 = {}:\n{}",
        filtered(),
        ctl.stats_text()
    );
    assert_ping(&h1, &h2, 2);
}
