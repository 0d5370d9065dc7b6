//! Spanning-tree port states (per port, per VID) in the frame path: exact frames out of each
//! port, FDB contents and `stp_discarding` counters. A triangle of ports in one bridge: one
//! Discarding, a broadcast leaves only the forwarding ones.

mod common;

use common::{frame, mac, nothing, only, Rig};
use qbridge_bridge::{BridgeSettings, ConfigError, DropReason, FdbKind, PortId, StpState, VlanSet};
use qbridge_wire::MacAddr;

const Q: u16 = 0x8100;

fn vids(list: &[u16]) -> VlanSet {
    let mut s = VlanSet::default();
    for &v in list {
        s.insert(v);
    }
    s
}

fn all_vids() -> VlanSet {
    let mut s = VlanSet::default();
    for v in 1..=4094 {
        s.insert(v);
    }
    s
}

/// br0 (VLAN filtering, `stp` as given) with ports a, b, c, members of VID 10 tagged (and
/// PVID 1).
fn triangle(stp: bool, filtering: bool) -> (Rig, [PortId; 3]) {
    let mut r = Rig::new();
    let s = BridgeSettings {
        vlan_filtering: filtering,
        stp,
        ..Default::default()
    };
    r.sw.add_bridge("br0", s).unwrap();
    let ports = [r.device("a"), r.device("b"), r.device("c")];
    for p in ports {
        r.enslave(p, "br0");
        if filtering {
            r.sw.vlan_add(p, 10, 10, false, false).unwrap();
        }
    }
    (r, ports)
}

fn fwd_all(r: &mut Rig, ports: &[PortId]) {
    for &p in ports {
        r.sw.set_stp_state(p, &all_vids(), StpState::Forwarding)
            .unwrap();
    }
}

fn lookup(r: &Rig, m: MacAddr, vid: u16) -> Option<(PortId, FdbKind)> {
    r.sw.fdb_lookup(r.sw.bridge_id("br0").unwrap(), m, vid)
}

#[test]
fn stp_off_every_port_forwards() {
    let (mut r, [a, b, c]) = triangle(false, true);
    assert_eq!(r.sw.stp_state(a, 10), StpState::Forwarding);
    let f = frame(MacAddr::BROADCAST, mac(1), &[(Q, 10)], 64);
    let out = r.send(&[(a, f.clone())]);
    assert_eq!(out[b.0 as usize], vec![f.clone()]);
    assert_eq!(out[c.0 as usize], vec![f]);
    // With stp off, a state cannot be set.
    assert_eq!(
        r.sw.set_stp_state(a, &vids(&[10]), StpState::Discarding),
        Err(ConfigError::StpOff("br0".into()))
    );
}

#[test]
fn new_port_starts_discarding() {
    let (mut r, [a, b, c]) = triangle(true, true);
    for p in [a, b, c] {
        assert_eq!(r.sw.stp_state(p, 10), StpState::Discarding);
        assert_eq!(r.sw.stp_state(p, 1), StpState::Discarding);
    }
    let f = frame(MacAddr::BROADCAST, mac(1), &[(Q, 10)], 64);
    nothing(&r.send(&[(a, f)]));
    assert_eq!(r.drops(a, DropReason::StpDiscarding), 1);
    assert_eq!(lookup(&r, mac(1), 10), None, "Discarding learns nothing");
}

#[test]
fn broadcast_leaves_only_forwarding_ports() {
    let (mut r, [a, b, c]) = triangle(true, true);
    fwd_all(&mut r, &[a, b]);
    // c stays Discarding in every VID.
    let f = frame(MacAddr::BROADCAST, mac(1), &[(Q, 10)], 64);
    let out = only(&r.send(&[(a, f.clone())]), b);
    assert_eq!(out, vec![f.clone()]);
    // From the Discarding port: nothing, not learned, counted on c.
    nothing(&r.send(&[(c, frame(MacAddr::BROADCAST, mac(3), &[(Q, 10)], 64))]));
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 1);
    assert_eq!(lookup(&r, mac(3), 10), None);
    // c forwarding in VID 10 only: a broadcast in 10 reaches b and c, one in 1 (untagged,
    // PVID 1) only b.
    r.sw.set_stp_state(c, &vids(&[10]), StpState::Forwarding)
        .unwrap();
    let out = r.send(&[(a, f.clone())]);
    assert_eq!(out[b.0 as usize], vec![f.clone()]);
    assert_eq!(out[c.0 as usize], vec![f]);
    let u = frame(MacAddr::BROADCAST, mac(1), &[], 64);
    assert_eq!(only(&r.send(&[(a, u.clone())]), b), vec![u]);
}

#[test]
fn learning_learns_then_drops() {
    let (mut r, [a, b, c]) = triangle(true, true);
    fwd_all(&mut r, &[a, b]);
    r.sw.set_stp_state(c, &vids(&[10]), StpState::Learning)
        .unwrap();
    assert_eq!(r.sw.stp_state(c, 10), StpState::Learning);
    assert_eq!(r.sw.stp_state(c, 11), StpState::Discarding);
    let f = frame(mac(1), mac(3), &[(Q, 10)], 64);
    nothing(&r.send(&[(c, f)]));
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 1);
    assert_eq!(lookup(&r, mac(3), 10), Some((c, FdbKind::Dynamic)));
    // Known unicast to c (Learning, not Forwarding): dropped, counted on c (the egress port).
    nothing(&r.send(&[(a, frame(mac(3), mac(1), &[(Q, 10)], 64))]));
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 2);
    assert_eq!(r.drops(a, DropReason::StpDiscarding), 0);
    // Forwarding: the same frame goes to c, and c's frames are forwarded.
    r.sw.set_stp_state(c, &vids(&[10]), StpState::Forwarding)
        .unwrap();
    let u = frame(mac(3), mac(1), &[(Q, 10)], 64);
    assert_eq!(only(&r.send(&[(a, u.clone())]), c), vec![u]);
    let back = frame(mac(1), mac(3), &[(Q, 10)], 64);
    assert_eq!(only(&r.send(&[(c, back.clone())]), a), vec![back]);
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 2);
}

#[test]
fn unicast_in_one_batch_across_vids() {
    // One batch, the same destination in two VIDs: c forwards in 10, not in 20 (the per-run
    // route memory must check the VID again).
    let (mut r, [a, b, c]) = triangle(true, true);
    for p in [a, b, c] {
        r.sw.vlan_add(p, 20, 20, false, false).unwrap();
    }
    fwd_all(&mut r, &[a, b]);
    r.sw.set_stp_state(c, &vids(&[10, 20]), StpState::Forwarding)
        .unwrap();
    r.send(&[
        (c, frame(mac(1), mac(3), &[(Q, 10)], 64)),
        (c, frame(mac(1), mac(3), &[(Q, 20)], 64)),
    ]);
    r.sw.set_stp_state(c, &vids(&[20]), StpState::Discarding)
        .unwrap();
    let f10 = frame(mac(3), mac(1), &[(Q, 10)], 64);
    let f20 = frame(mac(3), mac(1), &[(Q, 20)], 64);
    let out = r.send(&[(a, f10.clone()), (a, f20)]);
    assert_eq!(only(&out, c), vec![f10]);
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 1);
}

#[test]
fn link_local_for_the_bridge_is_not_subject_to_the_state() {
    let (mut r, [a, _b, _c]) = triangle(true, true);
    // Port a Discarding; a BPDU (01-80-C2-00-00-00) is the bridge's own with stp on: counted
    // link_local, not stp_discarding, and a copy goes to the control plane (Outputs::punt).
    let bpdu = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0]), mac(1), &[], 64);
    nothing(&r.send(&[(a, bpdu.clone())]));
    assert_eq!(r.drops(a, DropReason::LinkLocal), 1);
    assert_eq!(r.drops(a, DropReason::StpDiscarding), 0);
    let punted: Vec<(u16, Vec<u8>)> = r
        .out
        .punt
        .drain()
        .map(|p| (p.port, p.frame().to_vec()))
        .collect();
    assert_eq!(punted, vec![(a.0, bpdu)]);
    // Other link-local groups are not trapped.
    let lldp = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0x0e]), mac(1), &[], 64);
    nothing(&r.send(&[(a, lldp)]));
    assert!(r.out.punt.is_empty());
}

#[test]
fn provider_bridge_traps_its_own_group_and_forwards_the_customers() {
    // 802.1ad: the bridge's BPDUs go to 01-80-C2-00-00-08 (trapped); 01-80-C2-00-00-00 is
    // the customers' (802.1Q table 8-1/8-2), forwarded as data.
    let mut r = Rig::new();
    r.bridge("br0", qbridge_bridge::VlanProtocol::Dot1Ad);
    let br = r.sw.bridge_id("br0").unwrap();
    let mut s = r.sw.bridge_settings(br).clone();
    s.stp = true;
    r.sw.set_bridge(br, s).unwrap();
    let (a, b) = (r.device("a"), r.device("b"));
    for p in [a, b] {
        r.enslave(p, "br0");
        r.sw.set_stp_state(p, &all_vids(), StpState::Forwarding)
            .unwrap();
    }
    let provider = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 8]), mac(1), &[], 64);
    nothing(&r.send(&[(a, provider.clone())]));
    assert_eq!(
        r.out.punt.drain().map(|p| p.port).collect::<Vec<_>>(),
        vec![a.0]
    );
    let customer = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0]), mac(1), &[], 64);
    let out = r.send(&[(a, customer.clone())]);
    assert!(
        r.out.punt.is_empty(),
        "a customer BPDU is data on a provider bridge"
    );
    assert_eq!(out[b.0 as usize].len(), 1, "forwarded to b");
}

#[test]
fn leaving_and_stp_off_clear_the_state() {
    let (mut r, [a, b, c]) = triangle(true, true);
    fwd_all(&mut r, &[a, b, c]);
    r.sw.set_master(c, None).unwrap();
    assert_eq!(
        r.sw.stp_state(c, 10),
        StpState::Forwarding,
        "no bridge: no state"
    );
    r.enslave(c, "br0");
    assert_eq!(
        r.sw.stp_state(c, 1),
        StpState::Discarding,
        "rejoined: Discarding"
    );
    // stp off: every port forwards; on again: every port starts Discarding.
    let br = r.sw.bridge_id("br0").unwrap();
    let mut s = r.sw.bridge_settings(br).clone();
    s.stp = false;
    r.sw.set_bridge(br, s.clone()).unwrap();
    assert_eq!(r.sw.stp_state(c, 1), StpState::Forwarding);
    let f = frame(MacAddr::BROADCAST, mac(1), &[], 64);
    let out = r.send(&[(a, f.clone())]);
    assert_eq!(out[b.0 as usize], vec![f.clone()]);
    assert_eq!(out[c.0 as usize], vec![f.clone()]);
    s.stp = true;
    r.sw.set_bridge(br, s).unwrap();
    for p in [a, b, c] {
        assert_eq!(r.sw.stp_state(p, 1), StpState::Discarding);
    }
    nothing(&r.send(&[(a, f)]));
}

#[test]
fn vlan_unaware_bridge_uses_the_least_state() {
    let (mut r, [a, b, c]) = triangle(true, false);
    fwd_all(&mut r, &[a, b, c]);
    let f = frame(MacAddr::BROADCAST, mac(1), &[], 64);
    let out = r.send(&[(a, f.clone())]);
    assert_eq!(out[b.0 as usize], vec![f.clone()]);
    assert_eq!(out[c.0 as usize], vec![f.clone()]);
    // c Discarding in one VID: an unaware bridge cannot tell the trees apart, c is blocked.
    r.sw.set_stp_state(c, &vids(&[7]), StpState::Discarding)
        .unwrap();
    assert_eq!(r.sw.stp_state(c, 0), StpState::Discarding);
    assert_eq!(only(&r.send(&[(a, f.clone())]), b), vec![f]);
    nothing(&r.send(&[(c, frame(mac(1), mac(3), &[], 64))]));
    assert_eq!(r.drops(c, DropReason::StpDiscarding), 1);
}

#[test]
fn errors_change_nothing() {
    let (mut r, [a, _b, _c]) = triangle(true, true);
    let lone = r.device("lone");
    assert_eq!(
        r.sw.set_stp_state(lone, &vids(&[10]), StpState::Forwarding),
        Err(ConfigError::NoMaster("lone".into()))
    );
    assert_eq!(
        r.sw.set_stp_state(a, &vids(&[10, 4095]), StpState::Forwarding),
        Err(ConfigError::ReservedVid(4095))
    );
    assert_eq!(
        r.sw.set_stp_state(a, &vids(&[0]), StpState::Forwarding),
        Err(ConfigError::VidOutOfRange(0))
    );
    assert_eq!(
        r.sw.set_stp_state_ranges(a, &[(20, 10)], StpState::Forwarding),
        Err(ConfigError::BadRange { start: 20, end: 10 })
    );
    assert_eq!(r.sw.stp_state(a, 10), StpState::Discarding);
    r.sw.set_stp_state_ranges(a, &[(5, 10), (100, 100)], StpState::Learning)
        .unwrap();
    assert_eq!(r.sw.stp_state(a, 5), StpState::Learning);
    assert_eq!(r.sw.stp_state(a, 100), StpState::Learning);
    assert_eq!(r.sw.stp_state(a, 11), StpState::Discarding);
}
