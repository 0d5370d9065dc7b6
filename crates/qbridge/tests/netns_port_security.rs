//! Port security with real kernel traffic (root only): a locked port with MAC authentication
//! bypass (`docs/semantics.md` §I).
//!
//! ```text
//!   h1 (10.61.0.1) ─ s1/p1 (locked on mab on) ─ br0 ─ s2/p2 ─ h2 (10.61.0.2)
//! ```
//!
//! h1 cannot reach h2 until its address, which the bridge holds as a `locked` entry, is
//! authorised with a static one; a second, unauthorised address behind the same port stays
//! out; `locked off` opens the port.

mod support;

use support::{assert_ping, ping, Lab};

const BATCH: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link set dev p1 master br0 locked on mab on
link set dev p2 master br0
";

#[test]
fn locked_port_admits_only_authorised_sources() {
    skip_unless_netns!();
    let mut lab = Lab::new("portsec");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.61.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.61.0.2/24", &sw, "s2").unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();

    // Locked out; MAB records h1 as a locked entry.
    assert_eq!(ping(&h1, &h2.ip, 3).received, 0);
    let fdb = ctl.cmd(&["fdb", "show", "dev", "p1"]).unwrap();
    let want = format!(
        "{} dev p1 vlan 1 locked master br0\n",
        h1.mac.to_lowercase()
    );
    assert!(fdb.contains(&want), "no locked entry for h1:\n{fdb}");
    let drops = |ctl: &support::Ctl| -> u64 {
        let v = ctl.json(&["-s", "link", "show", "dev", "p1"]).unwrap();
        v[0]["stats"]["drops"]["port_locked"].as_u64().unwrap_or(0)
    };
    assert!(drops(&ctl) >= 3, "port_locked {}", drops(&ctl));

    // The authoriser: a static entry replaces the locked one; pings cross.
    ctl.cmd(&[
        "fdb", "replace", &h1.mac, "dev", "p1", "vlan", "1", "static",
    ])
    .unwrap();
    support::ip_in(&h1.ns, &["neigh", "flush", "dev", "eth0"]).unwrap();
    assert_ping(&h1, &h2, 5);

    // Another address behind the locked port (a second IP on h1 with its own MAC, a macvlan
    // of the kernel) is not authorised: it stays out, recorded as locked.
    support::ip_in(
        &h1.ns,
        &[
            "link", "add", "link", "eth0", "name", "mv0", "type", "macvlan", "mode", "bridge",
        ],
    )
    .unwrap();
    support::ip_in(&h1.ns, &["addr", "add", "10.61.0.11/24", "dev", "mv0"]).unwrap();
    support::ip_in(&h1.ns, &["link", "set", "mv0", "up"]).unwrap();
    let mv_mac = support::mac_of(&h1.ns, "mv0").unwrap();
    let out = support::exec_in(
        &h1.ns,
        "ping",
        &[
            "-n", "-q", "-c", "3", "-i", "0.2", "-W", "1", "-I", "mv0", &h2.ip,
        ],
    );
    assert!(
        out.is_err() || out.as_ref().is_ok_and(|o| o.contains(" 0 received")),
        "{out:?}"
    );
    let fdb = ctl.cmd(&["fdb", "show", "dev", "p1"]).unwrap();
    assert!(
        fdb.contains(&format!(
            "{} dev p1 vlan 1 locked master br0\n",
            mv_mac.to_lowercase()
        )),
        "{fdb}"
    );

    // Unlocked, everything passes (the locked entry is learned over and unlocked).
    ctl.cmd(&["link", "set", "dev", "p1", "locked", "off", "mab", "off"])
        .unwrap();
    support::ip_in(&h1.ns, &["neigh", "flush", "dev", "mv0"]).unwrap();
    let out = support::exec_in(
        &h1.ns,
        "ping",
        &[
            "-n", "-q", "-c", "3", "-i", "0.2", "-W", "1", "-I", "mv0", &h2.ip,
        ],
    )
    .unwrap();
    assert!(out.contains("3 received"), "{out}");
    assert!(lab.stop_daemons(), "the daemon did not exit cleanly");
}

/// A per-VLAN learning limit with `violation shutdown` (`docs/semantics.md` §L): one address
/// behind the port is fine; a second takes the port down (the daemon logs why) until `link
/// set dev p1 up`.
#[test]
fn a_second_address_over_the_vlan_limit_shuts_the_port() {
    skip_unless_netns!();
    let mut lab = Lab::new("maclimit");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.62.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.62.0.2/24", &sw, "s2").unwrap();
    let ctl = lab
        .daemon(
            &sw,
            "link add br0 type bridge vlan_filtering 1\n\
             link add p1 type afpacket dev s1\nlink add p2 type afpacket dev s2\n\
             link set dev p1 master br0\nlink set dev p2 master br0\n\
             vlan set vid 1 dev p1 fdb_max_learned 1 violation shutdown\n",
        )
        .unwrap();
    assert_ping(&h1, &h2, 3);
    // A second address behind p1 (a kernel macvlan on h1's eth0).
    support::ip_in(
        &h1.ns,
        &[
            "link", "add", "link", "eth0", "name", "mv0", "type", "macvlan", "mode", "bridge",
        ],
    )
    .unwrap();
    support::ip_in(&h1.ns, &["addr", "add", "10.62.0.11/24", "dev", "mv0"]).unwrap();
    support::ip_in(&h1.ns, &["link", "set", "mv0", "up"]).unwrap();
    let _ = support::exec_in(
        &h1.ns,
        "ping",
        &[
            "-n", "-q", "-c", "2", "-i", "0.2", "-W", "1", "-I", "mv0", &h2.ip,
        ],
    );
    let down = support::wait_until(std::time::Duration::from_secs(5), || {
        let v = ctl.json(&["link", "show", "dev", "p1"]).unwrap();
        v[0]["port"]["up"] == false
    });
    assert!(down, "p1 was not shut down:\n{}", ctl.stats_text());
    let v = ctl.json(&["-s", "link", "show", "dev", "p1"]).unwrap();
    assert!(
        v[0]["stats"]["drops"]["mac_limit_shutdown"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "{v}"
    );
    assert_eq!(
        ping(&h1, &h2.ip, 2).received,
        0,
        "a shut port forwards nothing"
    );
    // The operator brings it back; the first address works again.
    ctl.cmd(&["link", "set", "dev", "p1", "up"]).unwrap();
    support::ip_in(&h1.ns, &["link", "set", "mv0", "down"]).unwrap();
    assert_ping(&h1, &h2, 3);
    let log = lab.daemon_log(0);
    assert!(log.contains("violation shutdown"), "{log}");
    assert!(lab.stop_daemons(), "the daemon did not exit cleanly");
}
