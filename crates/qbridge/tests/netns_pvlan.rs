//! Private VLANs with real kernel traffic (root only; `docs/semantics.md` §J): in VLAN 10 a
//! gateway on a promiscuous port, two isolated hosts and a community of two.
//!
//! ```text
//!   gw (10.71.0.1, promiscuous) ┐
//!   i1 (.11, isolated)          ├─ br0, VLAN 10 untagged on every port
//!   i2 (.12, isolated)          │
//!   c1 (.21, community 7)       │
//!   c2 (.22, community 7)       ┘
//! ```

mod support;

use support::{assert_ping, ping, Lab};

const BATCH: &str = "\
link add br0 type bridge vlan_filtering 1
link add gw type afpacket dev sgw
link add i1 type afpacket dev si1
link add i2 type afpacket dev si2
link add c1 type afpacket dev sc1
link add c2 type afpacket dev sc2
link set dev gw master br0 vlan_mode access tag 10
link set dev i1 master br0 vlan_mode access tag 10
link set dev i2 master br0 vlan_mode access tag 10
link set dev c1 master br0 vlan_mode access tag 10
link set dev c2 master br0 vlan_mode access tag 10
vlan set vid 10 dev gw pvlan promiscuous
vlan set vid 10 dev i1 pvlan isolated
vlan set vid 10 dev i2 pvlan isolated
vlan set vid 10 dev c1 pvlan community 7
vlan set vid 10 dev c2 pvlan community 7
";

#[test]
fn isolated_and_community_ports_reach_whom_they_may() {
    skip_unless_netns!();
    let mut lab = Lab::new("pvlan");
    let sw = lab.netns("sw").unwrap();
    let gw = lab.host("gw", "10.71.0.1/24", &sw, "sgw").unwrap();
    let i1 = lab.host("i1", "10.71.0.11/24", &sw, "si1").unwrap();
    let i2 = lab.host("i2", "10.71.0.12/24", &sw, "si2").unwrap();
    let c1 = lab.host("c1", "10.71.0.21/24", &sw, "sc1").unwrap();
    let c2 = lab.host("c2", "10.71.0.22/24", &sw, "sc2").unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();

    // Everyone reaches the promiscuous gateway; the community reaches itself.
    for h in [&i1, &i2, &c1, &c2] {
        assert_ping(h, &gw, 3);
    }
    assert_ping(&c1, &c2, 3);
    // Isolated hosts reach nobody else, nor do communities reach isolated hosts.
    assert_eq!(ping(&i1, &i2.ip, 2).received, 0, "isolated to isolated");
    assert_eq!(ping(&i1, &c1.ip, 2).received, 0, "isolated to community");
    assert_eq!(ping(&c2, &i2.ip, 2).received, 0, "community to isolated");

    // i1's ARP requests for i2 were broadcasts, flooded to the gateway only. Given i2's
    // address by hand, i1 sends unicast to a MAC the bridge knows (i2 pinged the gateway):
    // refused by name, `pvlan` on i1.
    support::ip_in(
        &i1.ns,
        &["neigh", "replace", &i2.ip, "lladdr", &i2.mac, "dev", "eth0"],
    )
    .unwrap();
    let before = drops(&ctl, "i1");
    assert_eq!(ping(&i1, &i2.ip, 3).received, 0);
    assert!(drops(&ctl, "i1") >= before + 3, "pvlan drops on i1");

    // Without roles the VLAN is one broadcast domain again.
    ctl.cmd(&["vlan", "set", "vid", "10", "dev", "i1", "pvlan", "none"])
        .unwrap();
    ctl.cmd(&["vlan", "set", "vid", "10", "dev", "i2", "pvlan", "none"])
        .unwrap();
    assert_ping(&i1, &i2, 3);
    assert!(lab.stop_daemons(), "the daemon did not exit cleanly");
}

fn drops(ctl: &support::Ctl, port: &str) -> u64 {
    let v = ctl.json(&["-s", "link", "show", "dev", port]).unwrap();
    v[0]["stats"]["drops"]["pvlan"].as_u64().unwrap_or(0)
}
