//! Root, namespaces: the daemon recovers what is done to its ports from outside, and says
//! once, precisely, what it cannot do.
//!
//! - a TAP deleted with `ip link del` is created again by the link watch, and traffic through
//!   it flows again;
//! - a VXLAN trunk whose device MTU cannot be raised gets one warning naming the MTU needed,
//!   why, and the device's maximum; later commands about other ports do not repeat it.

mod support;

use std::process::Command;
use std::time::Duration;
use support::{assert_ping, ip_in, skip_reason, Host};

#[test]
fn deleted_tap_is_created_again() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut lab = support::Lab::new("tapdel");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.96.0.1/24", &sw, "s1").unwrap();
    let tap_ns = lab.netns("vm").unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n\
         link add p1 type afpacket dev s1\n\
         link add vm0 type tap ifname qbtap1 netns {tap_ns}\n\
         link set dev p1 master br0\nlink set dev vm0 master br0\n"
    );
    let ctl = lab.daemon(&sw, &batch).expect("daemon");
    let vm_up = || {
        ip_in(&tap_ns, &["addr", "add", "10.96.0.2/24", "dev", "qbtap1"]).unwrap();
        ip_in(&tap_ns, &["link", "set", "qbtap1", "up"]).unwrap();
        Host {
            name: "vm".into(),
            ns: tap_ns.clone(),
            ifname: "qbtap1".into(),
            ip: "10.96.0.2".into(),
            mac: support::mac_of(&tap_ns, "qbtap1").unwrap(),
        }
    };
    let vm = vm_up();
    assert_ping(&vm, &h1, 2);

    ip_in(&tap_ns, &["link", "del", "qbtap1"]).unwrap();
    // The link watch notices within a second and makes the TAP again (without the host's
    // address, which is the host's business).
    assert!(
        support::wait_until(Duration::from_secs(5), || {
            ip_in(&tap_ns, &["link", "show", "qbtap1"]).is_ok()
        }),
        "the TAP was not created again; log:\n{}",
        lab.daemon_log(0)
    );
    let vm = vm_up();
    assert!(
        support::wait_until(Duration::from_secs(5), || {
            ctl.json(&["link", "show", "dev", "vm0"]).unwrap()[0]["port"]["link_up"] == true
        }),
        "vm0 not up again"
    );
    assert_ping(&vm, &h1, 2);
    let log = lab.daemon_log(0);
    for line in [
        "port vm0: link down (",
        "port vm0: its TAP was deleted; created it again",
        "port vm0: link up; forwarding resumes",
    ] {
        assert!(log.contains(line), "no {line:?} in the log:\n{log}");
    }
    assert!(lab.stop_daemons(), "daemon exit");
}

#[test]
fn mtu_warning_is_precise_and_given_once() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut lab = support::Lab::new("mtuonce");
    let sw = lab.netns("sw").unwrap();
    // A VXLAN device over a veth underlay of MTU 1500: its maximum is 1450.
    lab.veth(&sw, "ul", &sw, "ul2").unwrap();
    ip_in(&sw, &["addr", "add", "10.95.0.1/24", "dev", "ul"]).unwrap();
    ip_in(
        &sw,
        &[
            "link",
            "add",
            "vx0",
            "type",
            "vxlan",
            "id",
            "42",
            "local",
            "10.95.0.1",
            "remote",
            "10.95.0.2",
            "dstport",
            "4789",
            "dev",
            "ul",
        ],
    )
    .unwrap();
    ip_in(&sw, &["link", "set", "vx0", "up"]).unwrap();
    lab.veth(&sw, "d1", &sw, "d2").unwrap();
    // An 802.1ad trunk on the VXLAN device, its mtu first small enough for 1450.
    let ctl = lab
        .daemon(
            &sw,
            "link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad\n\
             link add t1 type afpacket dev vx0\nlink set dev t1 master br0 mtu 1442\n\
             link add p1 type afpacket dev d1\nlink set dev p1 master br0\n",
        )
        .expect("daemon");
    let cli = |args: &[&str]| {
        let o = Command::new(support::qbridge_bin())
            .arg("--socket")
            .arg(&ctl.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let warning = |mtu: u32, tags: &str| {
        let extra = mtu - 1500;
        format!(
            "qbridge: warning: port t1: cannot raise vx0's MTU to {mtu} (mtu 1500 + {extra} \
             bytes for {tags}, envhdr len auto): max 1450 (underlay ul's MTU 1500 less 50 bytes of \
             VXLAN encapsulation: raise ul's MTU to {} first, or lower the port's mtu)\n",
            mtu + 50
        )
    };
    // The bridge tag of the 802.1ad trunk: 1504.
    assert_eq!(
        cli(&["link", "set", "dev", "t1", "mtu", "1500"]),
        warning(1504, "one VLAN tag")
    );
    // Commands about other ports do not repeat it.
    assert_eq!(cli(&["vlan", "add", "vid", "11", "dev", "p1"]), "");
    assert_eq!(
        cli(&["fdb", "add", "02:00:00:00:00:01", "dev", "p1", "static"]),
        ""
    );
    // A tagged VLAN on the trunk: the need changed, so a new warning, once.
    assert_eq!(
        cli(&["vlan", "add", "vid", "10", "dev", "t1"]),
        warning(1508, "two VLAN tags")
    );
    assert_eq!(cli(&["vlan", "add", "vid", "12", "dev", "p1"]), "");
    assert_eq!(
        lab.daemon_log(0).matches("cannot raise vx0's MTU").count(),
        2
    );
    assert!(lab.stop_daemons(), "daemon exit");
}
