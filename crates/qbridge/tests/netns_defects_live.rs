//! Root, namespaces: defects of the live engine found by using qbridge as users would
//! (issue 17), each checked with a long-running daemon and real traffic.
//!
//! - A TAP port whose interface name differs from the port name (`link add G type tap ifname
//!   tg [netns NS]`, the VM and container attachment of docs/hosts.md) stays up and forwards
//!   for seconds, with and without `netns`, and is created again under its own name when
//!   deleted from outside.

mod support;

use std::time::Duration;
use support::{assert_ping, host_on, ip_in, ping, wait_until, Lab};

/// Pings for this many 10 ms intervals: 6 s, several link-watch ticks (one a second).
const LONG_PING: u32 = 600;

/// Item 1: `vm0` is TAP `tgn0` moved into a namespace, `vm1` is TAP `tgr1` in the daemon's
/// own namespace; both keep forwarding to a veth host for 6 s, the link watch never takes
/// them down, and `tgn0` deleted from outside comes back as `tgn0`. Before the fix the watch
/// asked the kernel for `vm0`/`vm1`: `vm0` went down for good after a second (100 % loss),
/// `vm1` flapped every two seconds.
#[test]
fn tap_named_unlike_its_port_stays_up() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("tapname");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.97.0.1/24", &sw, "s1").unwrap();
    let vm_ns = lab.netns("vm").unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n\
         link add p1 type afpacket dev s1\n\
         link add vm0 type tap ifname tgn0 netns {vm_ns}\n\
         link add vm1 type tap ifname tgr1\n\
         link set dev p1 master br0\n\
         link set dev vm0 master br0\n\
         link set dev vm1 master br0\n"
    );
    let ctl = lab.daemon(&sw, &batch).expect("daemon");
    let vm0 = host_on("vm0", &vm_ns, "tgn0", "10.97.0.2/24");
    let vm1 = host_on("vm1", &sw, "tgr1", "10.97.0.3/24");

    // Both at once, 6 s each, while the link watch runs.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| ping(&vm0, &h1.ip, LONG_PING));
        let b = s.spawn(|| ping(&vm1, &h1.ip, LONG_PING));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (who, r) in [("vm0 (netns)", &a), ("vm1", &b)] {
        eprintln!("{who} -> h1: {}/{} replies", r.received, r.transmitted);
    }
    for (who, r) in [("vm0 (netns)", &a), ("vm1", &b)] {
        assert!(
            r.received >= LONG_PING && r.received == r.transmitted,
            "{who} -> h1: {}/{} replies\n{}\n{}\nlog:\n{}",
            r.received,
            r.transmitted,
            r.output,
            ctl.stats_text(),
            lab.daemon_log(0)
        );
    }
    for port in ["vm0", "vm1"] {
        let v = ctl.json(&["link", "show", "dev", port]).unwrap();
        assert_eq!(v[0]["port"]["link_up"], true, "{port}: {v}");
    }
    let log = lab.daemon_log(0);
    assert!(
        !log.contains("was deleted") && !log.contains("link down"),
        "the link watch took a TAP down:\n{log}"
    );

    // Deleted from outside: created again under its interface name, in its namespace.
    ip_in(&vm_ns, &["link", "del", "tgn0"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            ip_in(&vm_ns, &["link", "show", "tgn0"]).is_ok()
        }),
        "tgn0 was not created again; log:\n{}",
        lab.daemon_log(0)
    );
    let vm0 = host_on("vm0", &vm_ns, "tgn0", "10.97.0.2/24");
    assert!(
        wait_until(Duration::from_secs(5), || {
            ctl.json(&["link", "show", "dev", "vm0"]).unwrap()[0]["port"]["link_up"] == true
        }),
        "vm0 not up again; log:\n{}",
        lab.daemon_log(0)
    );
    assert_ping(&vm0, &h1, 20);
    assert!(lab.stop_daemons(), "daemon exit");
}
