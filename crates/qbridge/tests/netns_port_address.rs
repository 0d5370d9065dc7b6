//! A bridge port's own interface address is a local (permanent) FDB entry (root only;
//! `docs/semantics.md` rule 9c), as Linux adds one for every port (`br_fdb_add_local`): the
//! daemon reads an AF_PACKET port's device address when it opens the port. Frames to it are
//! the bridge's: without a host port they are counted `local` and go nowhere (before: unknown
//! unicast, flooded out of every port).
//!
//! ```text
//!   h1 (10.9.0.1) ─ s1 ┐
//!                      br0 (p1, p2)
//!   h2 (10.9.0.2) ─ s2 ┘
//! ```

mod support;

use support::{ip_in, mac_of, ping, Lab};

fn drops(ctl: &support::Ctl, port: &str, reason: &str) -> u64 {
    let v = ctl.json(&["-s", "link", "show", "dev", port]).unwrap();
    v[0]["stats"]["drops"][reason].as_u64().unwrap_or(0)
}

fn tx_frames(ctl: &support::Ctl, port: &str) -> u64 {
    let v = ctl.json(&["-s", "link", "show", "dev", port]).unwrap();
    v[0]["stats"]["tx_frames"].as_u64().unwrap_or(0)
}

#[test]
fn port_address_is_a_local_entry() {
    skip_unless_netns!();
    let mut lab = Lab::new("portaddr");
    let sw = lab.netns("sw").unwrap();
    let _h1 = lab.host("h1", "10.9.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.9.0.2/24", &sw, "s2").unwrap();
    let ctl = lab
        .daemon(
            &sw,
            "link add br0 type bridge vlan_filtering 1\n\
             link add p1 type afpacket dev s1\nlink add p2 type afpacket dev s2\n\
             link set dev p1 master br0\nlink set dev p2 master br0\n",
        )
        .unwrap();
    let s1 = mac_of(&sw, "s1").unwrap();
    let fdb = ctl.json(&["fdb", "show", "dev", "p1"]).unwrap();
    let local: Vec<Option<u64>> = fdb
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mac"] == s1.as_str() && e["state"] == "permanent")
        .map(|e| e["vlan"].as_u64())
        .collect();
    assert_eq!(local, [None, Some(1)], "{fdb}");
    let saved = ctl.cmd(&["show", "running-config"]).unwrap();
    assert!(!saved.contains(&s1), "not a configured entry: {saved}");

    // h2 sends to s1's address (a static neighbour): the bridge's own, dropped as `local`.
    ip_in(
        &h2.ns,
        &[
            "neigh",
            "replace",
            "10.9.0.99",
            "lladdr",
            &s1,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    )
    .unwrap();
    let tx_before = tx_frames(&ctl, "p1");
    let r = ping(&h2, "10.9.0.99", 5);
    assert_eq!(r.received, 0);
    // (`ping -w` keeps sending until its deadline when nothing answers.)
    assert!(r.transmitted >= 5, "{}", r.output);
    assert_eq!(
        drops(&ctl, "p2", "local"),
        u64::from(r.transmitted),
        "{}",
        ctl.stats_text()
    );
    assert_eq!(tx_frames(&ctl, "p1"), tx_before, "{}", ctl.stats_text());
}

/// The permanent entries of `port` with address `mac`, by VLAN (`None`: VLAN 0).
fn local_entries(ctl: &support::Ctl, port: &str, mac: &str) -> Vec<Option<u64>> {
    let fdb = ctl.json(&["fdb", "show", "dev", port]).unwrap();
    fdb.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mac"] == mac && e["state"] == "permanent")
        .map(|e| e["vlan"].as_u64())
        .collect()
}

/// An interface whose address changes moves its port's local entries to the new address, as
/// Linux follows `NETDEV_CHANGEADDR` (`br_fdb_changeaddr`): for an AF_PACKET port changed
/// before it joins a bridge (in one go, the command right after `ip link set … address`), and
/// for an AF_XDP port changed while it is in one. Frames to the new address are the bridge's
/// (`local`); frames to the old one are unknown unicast again, flooded. (The kernel's
/// `bridge_fdb_learning_limit.sh` counts on this for its "local" entries.)
#[test]
fn a_changed_interface_address_moves_the_local_entries() {
    skip_unless_netns!();
    let mut lab = Lab::new("portaddr-change");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.9.1.1/24", &sw, "s1").unwrap();
    let _h2 = lab.host("h2", "10.9.1.2/24", &sw, "s2").unwrap();
    let ctl = lab
        .daemon(
            &sw,
            "link add br0 type bridge vlan_filtering 1\n\
             link add p1 type afpacket dev s1\nlink add p2 type afxdp dev s2 mode skb\n\
             link set dev p2 master br0\n",
        )
        .unwrap();
    let old1 = mac_of(&sw, "s1").unwrap();
    let new1 = "02:00:00:00:00:aa";
    ip_in(&sw, &["link", "set", "dev", "s1", "address", new1]).unwrap();
    ctl.cmd(&["link", "set", "dev", "p1", "master", "br0"])
        .unwrap();
    assert_eq!(local_entries(&ctl, "p1", new1), [None, Some(1)]);
    assert_eq!(local_entries(&ctl, "p1", &old1), []);

    let old2 = mac_of(&sw, "s2").unwrap();
    assert_eq!(local_entries(&ctl, "p2", &old2), [None, Some(1)]);
    let new2 = "02:00:00:00:00:bb";
    ip_in(&sw, &["link", "set", "dev", "s2", "address", new2]).unwrap();
    let moved = support::wait_until(std::time::Duration::from_secs(3), || {
        local_entries(&ctl, "p2", new2) == [None, Some(1)]
    });
    assert!(moved, "{}", ctl.cmd(&["fdb", "show"]).unwrap());
    assert_eq!(local_entries(&ctl, "p2", &old2), []);
    let log = lab.daemon_log(0);
    assert!(
        log.contains(&format!("interface s2 now has address {new2}")),
        "{log}"
    );

    // h1 sends to both addresses (static neighbours): the new one is the bridge's own
    // (dropped as `local` on p1, nothing out of p2); the old one is nobody's, flooded to p2.
    for (ip, mac) in [("10.9.1.98", new2), ("10.9.1.99", old2.as_str())] {
        ip_in(
            &h1.ns,
            &[
                "neigh",
                "replace",
                ip,
                "lladdr",
                mac,
                "dev",
                "eth0",
                "nud",
                "permanent",
            ],
        )
        .unwrap();
    }
    let (local0, tx0) = (drops(&ctl, "p1", "local"), tx_frames(&ctl, "p2"));
    let r = ping(&h1, "10.9.1.98", 3);
    assert_eq!(r.received, 0);
    assert_eq!(
        drops(&ctl, "p1", "local") - local0,
        u64::from(r.transmitted),
        "{}",
        ctl.stats_text()
    );
    assert_eq!(tx_frames(&ctl, "p2"), tx0, "{}", ctl.stats_text());
    let to_local = u64::from(r.transmitted);
    let r = ping(&h1, "10.9.1.99", 3);
    assert_eq!(
        drops(&ctl, "p1", "local") - local0,
        to_local,
        "{}",
        ctl.stats_text()
    );
    assert_eq!(
        tx_frames(&ctl, "p2") - tx0,
        u64::from(r.transmitted),
        "{}",
        ctl.stats_text()
    );
}
