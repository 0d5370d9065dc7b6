//! The renderers' JSON read back through `qbridge_control::json`, the structs qbridge-cni and
//! qbridge-evpn read it with: every key they need is where the structs look for it.

use qbridge_control::json::{objects, FdbEntry, Link, PortTunnels, PortVnis, Tunnel, VniRange};
use qbridge_control::{OutputOptions, Session};

const JSON: OutputOptions = OutputOptions {
    json: true,
    stats: false,
    pretty: false,
    compress_vlans: false,
    details: false,
    brief: false,
};

const SETUP: &str = "\
link add br0 type bridge vlan_filtering 1
link add br1 type bridge vlan_filtering 0
link add p1 type afpacket dev eth1
link add p2 type pcap
link add vx0 type vxlan id 100 local 192.0.2.1
link add vx1 type vxlan external vnifilter local 192.0.2.1 dstport 4790
link set dev p1 master br0 mtu 9000
link set dev p2 master br0 vlan_mode dot1q-tunnel tag 100 cvlans 0,10-20
link set dev vx0 master br0
link set dev vx1 master br1
vlan add vid 10 dev vx1
vlan add vid 20-21 dev vx1
vlan add vid 10 dev vx1 tunnel_info id 1000
vlan add vid 20-21 dev vx1 tunnel_info id 2000-2001
vni add dev vx1 vni 1000
vni add dev vx1 vni 2000-2001
vlan add vid 10 dev p1
fdb add 02:00:00:00:00:01 dev p1 vlan 10 static sticky
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 extern_learn
fdb add 02:00:00:00:00:02 dev vx1 dst 192.0.2.3 vni 1000
";

fn show(s: &mut Session, line: &str) -> String {
    s.execute_line(line, JSON)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn link_show_reads_back() {
    let mut s = Session::new();
    s.execute_batch(SETUP, OutputOptions::default())
        .expect("setup applies");
    let links: Vec<Link> = objects(&show(&mut s, "link show")).unwrap();
    let by = |n: &str| links.iter().find(|l| l.ifname == n).unwrap().clone();
    assert_eq!(links.len(), 6);
    let br0 = by("br0");
    assert_eq!(br0.kind, "bridge");
    assert!(br0.bridge.unwrap().vlan_filtering);
    assert!(!by("br1").bridge.unwrap().vlan_filtering);
    let p1 = by("p1");
    assert_eq!(p1.master.as_deref(), Some("br0"));
    assert_eq!(p1.mtu, Some(9000));
    assert_eq!(p1.backend.as_ref().unwrap().kind, "afpacket");
    assert_eq!(p1.backend.unwrap().dev.as_deref(), Some("eth1"));
    let port = p1.port.unwrap();
    assert!(port.up && port.link_up && port.vlan_mode.is_none());
    let mode = by("p2").port.unwrap().vlan_mode.unwrap();
    assert_eq!(
        mode.words(),
        "vlan_mode dot1q-tunnel tag 100 cvlans 0,10-20"
    );
    let vx0 = by("vx0").backend.unwrap();
    assert_eq!(
        (
            vx0.kind.as_str(),
            vx0.id,
            vx0.external,
            vx0.local.as_deref()
        ),
        ("vxlan", Some(100), false, Some("192.0.2.1"))
    );
    let vx1 = by("vx1").backend.unwrap();
    assert_eq!((vx1.id, vx1.external), (None, true));
    assert_eq!(by("vx1").master.as_deref(), Some("br1"));
    // One port (`dev NAME`) reads the same.
    let one: Vec<Link> = objects(&show(&mut s, "link show dev p2")).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].ifname, "p2");
}

#[test]
fn fdb_tunnels_and_vnis_read_back() {
    let mut s = Session::new();
    s.execute_batch(SETUP, OutputOptions::default())
        .expect("setup applies");
    let fdb: Vec<FdbEntry> = objects(&show(&mut s, "fdb show")).unwrap();
    let e = fdb
        .iter()
        .find(|e| e.mac == "02:00:00:00:00:01")
        .expect("p1's entry");
    assert_eq!(
        (
            e.ifname.as_str(),
            e.vlan,
            e.master.as_deref(),
            e.state.as_str()
        ),
        ("p1", Some(10), Some("br0"), "static")
    );
    assert!(e.has_flag("sticky") && !e.has_flag("extern_learn"));
    let flood = fdb
        .iter()
        .find(|e| e.ifname == "vx0" && e.mac == "00:00:00:00:00:00")
        .expect("vx0's flood entry");
    assert_eq!(flood.dst.as_deref(), Some("192.0.2.2"));
    assert_eq!(flood.vni, None);
    assert!(flood.has_flag("extern_learn") && flood.has_flag("self"));
    let remote = fdb.iter().find(|e| e.ifname == "vx1").expect("vx1's entry");
    assert_eq!(
        (remote.dst.as_deref(), remote.vni, remote.state.as_str()),
        (Some("192.0.2.3"), Some(1000), "permanent")
    );

    let tunnels: Vec<PortTunnels> = objects(&show(&mut s, "vlan tunnelshow")).unwrap();
    assert_eq!(tunnels.len(), 1);
    assert_eq!(tunnels[0].ifname, "vx1");
    assert_eq!(
        tunnels[0].tunnels,
        [
            Tunnel {
                vlan: 10,
                vlan_end: None,
                tunid: 1000,
                tunid_end: None
            },
            Tunnel {
                vlan: 20,
                vlan_end: Some(21),
                tunid: 2000,
                tunid_end: Some(2001)
            }
        ]
    );
    let vnis: Vec<PortVnis> = objects(&show(&mut s, "vni show")).unwrap();
    assert_eq!(vnis.len(), 1);
    assert_eq!(
        vnis[0].vnis,
        [
            VniRange {
                vni: 1000,
                vni_end: None
            },
            VniRange {
                vni: 2000,
                vni_end: Some(2001)
            }
        ]
    );
}
