//! `trace` tells what a VXLAN port and a bond do with the frames the bridge sends them (issue
//! 32: "VXLAN/bond output (VNI, VTEP, member by hash)"): the VNI (the port's, or its VLAN's
//! `tunnel_info` on an `external` port), the UDP source port, the remote VTEP (static entry,
//! else the flood list, else none), and the bond's member or why there is none.

use qbridge_control::{OutputOptions, Session};

const A: &str = "02:00:00:00:00:0a";
const B: &str = "02:00:00:00:00:0b";

fn session(batch: &str) -> Session {
    let mut s = Session::new();
    s.execute_batch(batch, OutputOptions::default())
        .unwrap_or_else(|e| panic!("config: {e}"));
    s
}

fn trace(s: &mut Session, line: &str) -> String {
    s.execute_line(line, OutputOptions::default())
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn json(s: &mut Session, line: &str) -> serde_json::Value {
    let out = OutputOptions {
        json: true,
        ..Default::default()
    };
    serde_json::from_str(
        &s.execute_line(line, out)
            .unwrap_or_else(|e| panic!("{line}: {e}")),
    )
    .unwrap()
}

fn stage<'a>(t: &'a str, name: &str) -> Vec<&'a str> {
    t.lines()
        .filter_map(|l| l.trim_start().strip_prefix(name))
        .map(str::trim)
        .collect()
}

#[test]
fn a_vxlan_port_with_one_vni_names_the_vtep_or_the_flood_list() {
    let mut s = session(
        "link add br0 type bridge
link add p1 type pcap
link add vx0 type vxlan id 100 local 192.0.2.1
link set dev p1 master br0
link set dev vx0 master br0
fdb add 02:00:00:00:00:0b dev vx0 master static
fdb add 02:00:00:00:00:0b dev vx0 dst 192.0.2.2
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.4
",
    );
    let t = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst {B} ipv4 10.0.0.1 10.0.0.2 udp 1000 2000"),
    );
    let v = stage(&t, "vxlan");
    assert_eq!(v.len(), 1, "{t}");
    assert!(
        v[0].starts_with("vx0: VNI 100 (the port's id), from 192.0.2.1 UDP "),
        "{t}"
    );
    assert!(
        v[0].ends_with(&format!(
            "to VTEP 192.0.2.2 port 4789 (its static entry for {B})"
        )),
        "{t}"
    );
    // A broadcast goes to the VNI's flood list.
    let t = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst ff:ff:ff:ff:ff:ff arp 10.0.0.1 10.0.0.2"),
    );
    let v = stage(&t, "vxlan");
    assert_eq!(v.len(), 1, "{t}");
    assert!(
        v[0].ends_with("to the flood list of VNI 100, 2 VTEPs (192.0.2.3, 192.0.2.4), port 4789"),
        "{t}"
    );
    // The UDP source port is the inner flow's (the same frame, the same port).
    let a = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst {B} ipv4 10.0.0.1 10.0.0.2 udp 1000 2000"),
    );
    assert_eq!(
        stage(&a, "vxlan"),
        stage(
            &trace(
                &mut s,
                &format!("trace dev p1 src {A} dst {B} ipv4 10.0.0.1 10.0.0.2 udp 1000 2000")
            ),
            "vxlan"
        )
    );
    // JSON carries the stage too.
    let j = json(&mut s, &format!("trace dev p1 src {A} dst {B}"));
    assert!(
        j["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|st| st["stage"] == "vxlan"),
        "{j:#}"
    );
}

#[test]
fn an_external_vxlan_port_takes_the_vni_of_the_frames_vlan() {
    let mut s = session(
        "link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add vx0 type vxlan external local 2001:db8::1
link set dev p1 master br0
link set dev vx0 master br0
vlan add dev p1 vid 10 pvid untagged
vlan add dev p1 vid 30
vlan add dev vx0 vid 10
vlan add dev vx0 vid 30
vlan add dev vx0 vid 10 tunnel_info id 1010
fdb append 00:00:00:00:00:00 dev vx0 dst 2001:db8::2 vni 1010
",
    );
    let t = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst ff:ff:ff:ff:ff:ff"),
    );
    let v = stage(&t, "vxlan");
    assert_eq!(v.len(), 1, "{t}");
    assert!(
        v[0].starts_with(
            "vx0: VNI 1010 (VLAN 10's tunnel_info, its tag removed), from 2001:db8::1"
        ),
        "{t}"
    );
    assert!(
        v[0].ends_with("to the flood list of VNI 1010, 1 VTEP (2001:db8::2), port 4789"),
        "{t}"
    );
    // VLAN 30 crosses the bridge but has no VNI: the port drops it.
    let t = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst ff:ff:ff:ff:ff:ff vlan 30"),
    );
    let v = stage(&t, "vxlan");
    assert_eq!(
        v,
        vec!["vx0: external: VLAN 30 has no tunnel_info id: dropped (unmapped_vlan)"],
        "{t}"
    );
}

#[test]
fn a_bond_names_its_member_or_why_there_is_none() {
    let mut s = session(
        "link add br0 type bridge
link add p1 type pcap
link add bond0 type bond mode 802.3ad xmit_hash_policy layer3+4
link add m1 type afpacket dev eth-m1
link add m2 type afpacket dev eth-m2
link set dev m1 master bond0
link set dev m2 master bond0
link set dev p1 master br0
link set dev bond0 master br0
",
    );
    // Offline no member has a link: none distributes.
    let t = trace(
        &mut s,
        &format!("trace dev p1 src {A} dst ff:ff:ff:ff:ff:ff"),
    );
    assert_eq!(
        stage(&t, "bond"),
        vec!["bond0: no member distributes: dropped (tx_no_member)"],
        "{t}"
    );
}

#[test]
fn a_balance_xor_bond_names_the_member_its_table_picks() {
    use qbridge_lacp::{Duplex, Link, MemberId};
    let mut s = session(
        "link add br0 type bridge
link add p1 type pcap
link add bond0 type bond mode balance-xor xmit_hash_policy layer3+4
link add m1 type afpacket dev eth-m1
link add m2 type afpacket dev eth-m2
link set dev m1 master bond0
link set dev m2 master bond0
link set dev p1 master br0
link set dev bond0 master br0
",
    );
    let up = Link::Up {
        speed_mbps: 10_000,
        duplex: Duplex::Full,
    };
    let b = s.bond_mut("bond0").unwrap();
    for id in [1, 2] {
        b.set_link(1, MemberId(id), up).unwrap();
    }
    // Many flows: each named member is the one the bond's own table gives the frame's hash,
    // and both members carry some.
    let mut seen = std::collections::BTreeSet::new();
    for sport in 1000..1032u16 {
        let line = format!("trace dev p1 src {A} dst {B} ipv4 10.0.0.1 10.0.0.2 tcp {sport} 80");
        let j = json(&mut s, &line);
        let out = &j["outputs"][0];
        assert_eq!(out["port"], "bond0", "{j:#}");
        let frame = qbridge_bridge::TraceFrame {
            summary: String::new(),
            len: 0,
            hex: out["frame"]["hex"].as_str().unwrap().to_string(),
        }
        .bytes();
        let hash = qbridge_lacp::flow_hash(&frame, qbridge_lacp::HashPolicy::Layer34);
        let want = match s.bond("bond0").unwrap().member_for(hash) {
            Some(MemberId(1)) => "m1",
            Some(MemberId(2)) => "m2",
            other => panic!("{other:?}"),
        };
        let text = j["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["stage"] == "bond")
            .and_then(|st| st["text"].as_str())
            .unwrap_or_else(|| panic!("{j:#}"))
            .to_string();
        assert!(
            text.starts_with(&format!(
                "bond0: member {want} (xmit_hash_policy layer3+4: hash "
            )),
            "{text}"
        );
        seen.insert(want);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}
