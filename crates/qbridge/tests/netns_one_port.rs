//! A host interface is a port once (root only): not twice in one daemon, not in two daemons,
//! and an interface that exists is never taken as a TAP.
//!
//! ```text
//!   h1 (10.7.0.1) ─ s1 ┐                   ┌ s2 ─ h2 (10.7.0.2)
//!                      daemon A: p1, p2 (br0)
//!                      daemon B: the same namespace, another socket
//! ```
//!
//! Before this check, a second port on `s1` (in either daemon) received every frame again and
//! h2 saw each echo request twice (`ping` reported `+N duplicates`).

mod support;

use support::{ping, Lab};

const A: &str = "\
link add br0 type bridge
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link add t1 type tap ifname qbt-a0
link set dev p1 master br0
link set dev p2 master br0
";

#[test]
fn an_interface_is_a_port_of_one_switch_once() {
    skip_unless_netns!();
    let mut lab = Lab::new("oneport");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.7.0.1/24", &sw, "s1").unwrap();
    let _h2 = lab.host("h2", "10.7.0.2/24", &sw, "s2").unwrap();
    let a = lab.daemon(&sw, A).unwrap();

    // In one daemon: refused at once, nothing changed.
    let e = a
        .cmd(&["link", "add", "p3", "type", "afpacket", "dev", "s1"])
        .unwrap_err();
    assert!(
        e.contains("interface \"s1\" is already used by port \"p1\" (a device can be a port once)"),
        "{e}"
    );

    // A second daemon whose batch takes s1: it does not start, and says who holds s1.
    let e = lab
        .daemon(&sw, "link add q1 type afpacket dev s1\n")
        .unwrap_err();
    assert!(
        e.contains("port q1: interface s1 is already a port of another qbridge daemon (pid ")
            && e.contains(" port p1); a device can be a port of one switch only"),
        "{e}"
    );

    // A second daemon with free interfaces starts; the same refusals come as command errors.
    let b = lab
        .daemon(&sw, "link add l0 type tap ifname qbt-b0\n")
        .unwrap();
    let e = b
        .cmd(&["link", "add", "q1", "type", "afxdp", "dev", "s2"])
        .unwrap_err();
    assert!(
        e.contains("interface s2 is already a port of another qbridge daemon"),
        "{e}"
    );
    // TAP names: daemon A's TAP, and a veth that is not a TAP at all.
    for (args, ifname) in [
        (
            vec!["link", "add", "t2", "type", "tap", "ifname", "qbt-a0"],
            "qbt-a0",
        ),
        (
            vec!["link", "add", "t3", "type", "tap", "ifname", "s2"],
            "s2",
        ),
        (
            vec![
                "link", "add", "link", "l0", "name", "s1", "type", "vlan", "id", "5",
            ],
            "s1",
        ),
    ] {
        let e = b.cmd(&args).unwrap_err();
        assert!(
            e.contains(&format!(
                "interface {ifname} already exists; qbridge creates its TAP itself"
            )),
            "{args:?}: {e}"
        );
    }
    // Refused commands left nothing behind in B.
    let links = b.json(&["link", "show"]).unwrap();
    assert_eq!(links.as_array().unwrap().len(), 1, "{links}");

    // Forwarding through A is single: no duplicate echo replies.
    let r = ping(&h1, "10.7.0.2", 20);
    assert_eq!(r.received, 20, "{}", r.output);
    assert!(!r.output.contains("duplicates"), "{}", r.output);

    // Once A is gone, s1 is free for B.
    drop(a);
    assert!(lab.stop_daemon(0), "daemon A did not exit cleanly");
    b.cmd(&["link", "add", "q1", "type", "afpacket", "dev", "s1"])
        .unwrap();
    // Daemon 1 is the one that refused to start.
    assert!(lab.stop_daemon(2), "daemon B did not exit cleanly");
}

/// A bond's member interfaces are held like ports' interfaces: a second daemon cannot take
/// one (the bond's spec carries its members' backends; the lock bookkeeping once looked at
/// top-level ports only).
#[test]
fn a_bond_member_is_a_port_of_one_switch_once() {
    skip_unless_netns!();
    let mut lab = Lab::new("oneportbond");
    let sw = lab.netns("sw").unwrap();
    let _h1 = lab.host("h1", "10.7.1.1/24", &sw, "m1").unwrap();
    let _h2 = lab.host("h2", "10.7.1.2/24", &sw, "m2").unwrap();
    let a = lab
        .daemon(
            &sw,
            "link add bo type bond mode active-backup\n\
             link add x1 type afpacket dev m1\nlink add x2 type afpacket dev m2\n\
             link set dev x1 master bo\nlink set dev x2 master bo\n",
        )
        .unwrap();
    let e = lab
        .daemon(&sw, "link add q1 type afpacket dev m2\n")
        .unwrap_err();
    assert!(
        e.contains("port q1: interface m2 is already a port of another qbridge daemon"),
        "{e}"
    );
    // Leaving the bond, the member keeps its interface (now as its own port).
    a.cmd(&["link", "set", "dev", "x2", "nomaster"]).unwrap();
    let e = lab
        .daemon(&sw, "link add q1 type afpacket dev m2\n")
        .unwrap_err();
    assert!(
        e.contains("already a port of another qbridge daemon"),
        "{e}"
    );
    // Deleted: free for another daemon.
    a.cmd(&["link", "del", "dev", "x2"]).unwrap();
    lab.daemon(&sw, "link add q1 type afpacket dev m2\n")
        .unwrap();
}
