//! Commands take effect on a running switch without disturbing traffic in other VLANs and
//! ports (issue 3, daemon and control): h1 and h2 ping each other in VLAN 10, 400 echoes at
//! 10 ms, while the control socket rewrites VLAN 20 and its ports over and over — VLAN removal
//! and re-adding, port flags, static FDB entries, a batch. Every echo must come back, the VLAN
//! 10 ports must count no drop, and the VLAN 20 changes must really take effect (h3 cannot
//! reach h4 while VLAN 20 is gone from p3, and can again afterwards).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{assert_ping, ping, ping_ok, skip_reason, Star};

#[test]
fn reconfiguring_one_vlan_does_not_disturb_another() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new(
        "live",
        &["10.93.0.1", "10.93.0.2", "10.93.0.3", "10.93.0.4"],
    )
    .expect("lab");
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         link set dev p3 master br0\nlink set dev p4 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n\
         vlan add vid 20 dev p3 pvid untagged\nvlan add vid 20 dev p4 pvid untagged\n",
        star.port_lines()
    );
    let ctl = star.daemon(&batch).expect("daemon");
    let (h1, h2, h3, h4) = (
        star.h(1).clone(),
        star.h(2).clone(),
        star.h(3).clone(),
        star.h(4).clone(),
    );
    assert_ping(&h1, &h2, 3);
    assert_ping(&h3, &h4, 3);

    // The storm: commands on VLAN 20 and ports p3/p4 only, until the pings are done.
    let done = Arc::new(AtomicBool::new(false));
    let storm = {
        let (ctl, done, h3, h4) = (ctl.clone(), done.clone(), h3.clone(), h4.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u32;
            let mut cut_seen = false;
            while !done.load(Ordering::Relaxed) {
                ctl.cmd(&["vlan", "del", "vid", "20", "dev", "p3"]).unwrap();
                if rounds == 0 {
                    // Took effect: with VLAN 20 gone from p3, h3 cannot reach h4.
                    cut_seen = !ping_ok(&h3, &h4.ip);
                }
                ctl.cmd(&["vlan", "add", "vid", "20", "dev", "p3", "pvid", "untagged"])
                    .unwrap();
                ctl.cmd(&[
                    "link", "set", "dev", "p4", "learning", "off", "flood", "off",
                ])
                .unwrap();
                ctl.cmd(&["link", "set", "dev", "p4", "learning", "on", "flood", "on"])
                    .unwrap();
                ctl.cmd(&[
                    "fdb",
                    "add",
                    "02:00:00:00:20:01",
                    "dev",
                    "p3",
                    "vlan",
                    "20",
                    "static",
                ])
                .unwrap();
                ctl.cmd(&["fdb", "del", "02:00:00:00:20:01", "dev", "p3", "vlan", "20"])
                    .unwrap();
                ctl.cmd(&["fdb", "flush", "dev", "p4", "vlan", "20"])
                    .unwrap();
                rounds += 1;
            }
            (rounds, cut_seen)
        })
    };
    let report = ping(&h1, &h2.ip, 400);
    done.store(true, Ordering::Relaxed);
    let (rounds, cut_seen) = storm.join().expect("storm thread");

    assert_eq!(
        (report.transmitted, report.received),
        (400, 400),
        "VLAN 10 lost echoes while VLAN 20 was reconfigured {rounds} times:\n{}\n{}",
        report.output,
        ctl.stats_text()
    );
    assert!(
        rounds >= 5,
        "only {rounds} reconfiguration rounds ran during the pings"
    );
    assert!(cut_seen, "vlan del on p3 did not cut h3 from h4");
    let stats = ctl.json(&["-s", "link", "show"]).expect("link show -s");
    for port in ["p1", "p2"] {
        let drops = stats
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == port)
            .map(|l| l["stats"]["drops"].clone())
            .expect("port listed");
        assert!(
            drops.as_object().is_none_or(|d| d.is_empty()),
            "{port} counted drops: {drops}"
        );
    }
    // And VLAN 20 works again after the last re-add.
    assert!(
        support::wait_until(Duration::from_secs(3), || ping_ok(&h3, &h4.ip)),
        "h3 cannot reach h4 after the storm"
    );
}
