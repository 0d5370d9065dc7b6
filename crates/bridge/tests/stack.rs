//! Devices stacked on ports: VLAN sub-interfaces at any depth, a bridge's host port and its VLAN
//! devices, macvlan endpoints in each mode. Exact frames out of each queue, and counters.

mod common;

use common::{frame, mac, nothing, only, retag, Rig};
use qbridge_bridge::{
    BridgeSettings, ConfigError, DropReason, FdbFilter, MacvlanMode, PortId, VlanProtocol,
};
use qbridge_wire::{MacAddr, Tpid};

const BCAST: MacAddr = MacAddr([0xff; 6]);
const AD: Tpid = Tpid(0x88a8);
const Q: Tpid = Tpid(0x8100);

#[test]
fn stacked_vlan_devices_push_outermost_last_and_pop_on_receive() {
    let mut r = Rig::new();
    let eth0 = r.device("eth0");
    let s100 =
        r.sw.add_vlan_device("eth0.100", eth0, AD, 100, mac(0x10))
            .unwrap();
    let c10 =
        r.sw.add_vlan_device("eth0.100.10", s100, Q, 10, mac(0x11))
            .unwrap();

    // The host sends on eth0.100.10: both tags, S-tag outside.
    let host = frame(mac(1), mac(0x11), &[], 100);
    let out = r.send(&[(c10, host.clone())]);
    let wire = retag(&host, 0, &[(0x88a8, 100), (0x8100, 10)]);
    assert_eq!(only(&out, eth0), vec![wire.clone()]);

    // And back: both tags popped.
    let back = frame(mac(0x11), mac(1), &[(0x88a8, 100), (0x8100, 10)], 120);
    let out = r.send(&[(eth0, back.clone())]);
    assert_eq!(only(&out, c10), vec![retag(&back, 2, &[])]);

    // Only the S-tag: to eth0.100, its C-tag (of no device) kept.
    let s_only = frame(mac(0x10), mac(1), &[(0x88a8, 100), (0x8100, 20)], 80);
    let out = r.send(&[(eth0, s_only.clone())]);
    assert_eq!(only(&out, s100), vec![retag(&s_only, 1, &[])]);

    // A tag no device has (and the right VID with the wrong TPID) stays on eth0, which is in
    // no bridge: counted.
    let other = frame(mac(0x10), mac(1), &[(0x88a8, 200)], 80);
    let wrong_tpid = frame(mac(0x10), mac(1), &[(0x8100, 100)], 80);
    nothing(&r.send(&[(eth0, other), (eth0, wrong_tpid)]));
    assert_eq!(r.drops(eth0, DropReason::NoBridge), 2);

    // Linux's counters: a device counts what came up from its lower (rx) and what it sent
    // down (tx).
    let c = r.sw.port_counters(c10);
    assert_eq!((c.rx_frames, c.tx_frames), (1, 1));
    let s = r.sw.port_counters(s100);
    assert_eq!((s.rx_frames, s.tx_frames), (2, 1));
    let e = r.sw.port_counters(eth0);
    assert_eq!((e.rx_frames, e.tx_frames), (4, 1));
}

#[test]
fn four_deep_stack_with_0x9100_and_envelope_on_the_device() {
    let mut r = Rig::new();
    let eth0 = r.device("eth0");
    let a =
        r.sw.add_vlan_device("a", eth0, Tpid(0x9100), 7, mac(0x20))
            .unwrap();
    let b = r.sw.add_vlan_device("b", a, AD, 8, mac(0x21)).unwrap();
    let c = r.sw.add_vlan_device("c", b, Q, 9, mac(0x22)).unwrap();
    let d = r.sw.add_vlan_device("d", c, Q, 10, mac(0x23)).unwrap();
    // 4 tags below d: eth0 takes 1500-byte packets plus 16 bytes of tags (and Linux's 4 of
    // slack).
    assert_eq!(r.sw.port_max_frame(eth0), 14 + 1500 + 4 + 16);

    let host = frame(mac(1), mac(0x23), &[], 1514);
    let out = r.send(&[(d, host.clone())]);
    let wire = retag(
        &host,
        0,
        &[(0x9100, 7), (0x88a8, 8), (0x8100, 9), (0x8100, 10)],
    );
    assert_eq!(wire.len(), 1530);
    assert_eq!(only(&out, eth0), vec![wire.clone()]);
    let out = r.send(&[(eth0, wire)]);
    assert_eq!(only(&out, d), vec![host]);

    // Deleting the bottom VLAN device deletes everything above it, deepest first.
    let gone = r.sw.del_link("a").unwrap();
    assert_eq!(gone, vec!["d", "c", "b", "a"]);
    assert!(!r.sw.exists("c"));
    assert_eq!(r.sw.port_max_frame(eth0), 14 + 1500 + 4);
}

#[test]
fn oversize_after_the_push_is_counted_on_the_device() {
    let mut r = Rig::new();
    let eth0 = r.device("eth0");
    let mut s = r.sw.port_settings(eth0).clone();
    s.envhdr_len = Some(4);
    r.sw.set_port(eth0, s).unwrap();
    let v = r.sw.add_vlan_device("v", eth0, AD, 5, mac(0x30)).unwrap();
    let w = r.sw.add_vlan_device("w", v, Q, 6, mac(0x31)).unwrap();
    // 1514 + 8 = 1522 > 1518 (envhdr pinned at 4).
    nothing(&r.send(&[(w, frame(mac(1), mac(0x31), &[], 1514))]));
    assert_eq!(r.drops(eth0, DropReason::Oversize), 1);
    // 1510 + 8 = 1518 passes.
    let out = r.send(&[(w, frame(mac(1), mac(0x31), &[], 1510))]);
    assert_eq!(only(&out, eth0).len(), 1);
}

#[test]
fn refusals_name_the_problem_and_change_nothing() {
    let mut r = Rig::new();
    let eth0 = r.device("eth0");
    r.sw.add_vlan_device("eth0.100", eth0, AD, 100, mac(0x10))
        .unwrap();
    let e =
        r.sw.add_vlan_device("x", eth0, AD, 100, mac(0x12))
            .unwrap_err();
    assert!(matches!(e, ConfigError::VlanDeviceExists { .. }), "{e}");
    assert!(e.to_string().contains("eth0.100"), "{e}");
    // Same VID, other protocol: a different device.
    r.sw.add_vlan_device("eth0.q100", eth0, Q, 100, mac(0x13))
        .unwrap();
    let e =
        r.sw.add_vlan_device("y", eth0, Q, 4095, mac(0x14))
            .unwrap_err();
    assert_eq!(e, ConfigError::ReservedVid(4095));
    let e =
        r.sw.add_vlan_device("y", eth0, Tpid(0x0800), 5, mac(0x14))
            .unwrap_err();
    assert_eq!(e, ConfigError::BadTpid(0x0800));
    let e = r.sw.add_vlan_device("y", eth0, Q, 5, BCAST).unwrap_err();
    assert_eq!(e, ConfigError::BadDeviceMac(BCAST));
    assert!(!r.sw.exists("y"));

    // Eight devices deep at most.
    let mut lower = eth0;
    for i in 0..8u8 {
        lower =
            r.sw.add_vlan_device(&format!("d{i}"), lower, Q, 10 + i as u32, mac(0x40 + i))
                .unwrap();
    }
    let e =
        r.sw.add_vlan_device("d8", lower, Q, 99, mac(0x50))
            .unwrap_err();
    assert!(matches!(e, ConfigError::StackTooDeep { max: 8, .. }), "{e}");

    // Macvlans: not on a bridge port, one passthru alone, addresses unique.
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p = r.device("p");
    r.enslave(p, "br0");
    let e =
        r.sw.add_macvlan("m", p, MacvlanMode::Bridge, mac(0x60))
            .unwrap_err();
    assert!(matches!(e, ConfigError::MacvlanLowerBusy(_)), "{e}");
    let up = r.device("up");
    r.sw.add_macvlan("m1", up, MacvlanMode::Bridge, mac(0x61))
        .unwrap();
    let e =
        r.sw.add_macvlan("m2", up, MacvlanMode::Vepa, mac(0x61))
            .unwrap_err();
    assert!(matches!(e, ConfigError::MacvlanAddressInUse { .. }), "{e}");
    let e =
        r.sw.add_macvlan("m3", up, MacvlanMode::Passthru, mac(0x62))
            .unwrap_err();
    assert!(matches!(e, ConfigError::PassthruBusy(_)), "{e}");
    let e =
        r.sw.set_master(up, Some(r.sw.bridge_id("br0").unwrap()))
            .unwrap_err();
    assert!(matches!(e, ConfigError::MacvlanLowerBusy(_)), "{e}");
    let solo = r.device("solo");
    r.sw.add_macvlan("pt", solo, MacvlanMode::Passthru, mac(0x63))
        .unwrap();
    let e =
        r.sw.add_macvlan("m4", solo, MacvlanMode::Private, mac(0x64))
            .unwrap_err();
    assert!(matches!(e, ConfigError::PassthruBusy(_)), "{e}");
    let e =
        r.sw.add_vlan_device("v4", solo, Q, 4, mac(0x65))
            .unwrap_err();
    assert!(matches!(e, ConfigError::PassthruBusy(_)), "{e}");
}

#[test]
fn vlan_device_as_a_bridge_port() {
    // eth0.100 (S-VLAN 100 of trunk eth0) is a port of a customer bridge with access port p.
    let mut r = Rig::new();
    r.bridge("br1", VlanProtocol::Dot1Q);
    let eth0 = r.device("eth0");
    let v =
        r.sw.add_vlan_device("eth0.100", eth0, AD, 100, mac(0x10))
            .unwrap();
    r.enslave(v, "br1");
    let p = r.device("p");
    r.enslave(p, "br1");

    let from_p = frame(mac(2), mac(1), &[], 100);
    let out = r.send(&[(p, from_p.clone())]);
    assert_eq!(only(&out, eth0), vec![retag(&from_p, 0, &[(0x88a8, 100)])]);

    let from_wire = frame(mac(1), mac(2), &[(0x88a8, 100)], 100);
    let out = r.send(&[(eth0, from_wire.clone())]);
    assert_eq!(only(&out, p), vec![retag(&from_wire, 1, &[])]);
    // Learned on the VLAN device.
    let fdb = r.sw.fdb_entries(&FdbFilter::default()).unwrap();
    assert!(fdb
        .iter()
        .any(|e| e.mac == mac(2) && e.ifname == "eth0.100"));
    assert_eq!(r.sw.port_counters(v).rx_frames, 1);
    assert_eq!(r.sw.port_counters(v).tx_frames, 1);
    assert_eq!(r.sw.port_counters(eth0).tx_frames, 1);
}

/// br0 (802.1Q, VLAN-filtering) with trunk p1 (VLAN 10 tagged, PVID 1 untagged), its host
/// port up, and br0.10 on the host port.
fn host_rig() -> (Rig, PortId, PortId, PortId) {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p1 = r.device("p1");
    r.enslave(p1, "br0");
    r.sw.vlan_add(p1, 10, 10, false, false).unwrap();
    let b = r.sw.bridge_id("br0").unwrap();
    let host = r.sw.add_host_port(b, mac(0xb0)).unwrap();
    r.sw.vlan_add(host, 10, 10, false, false).unwrap();
    let v10 =
        r.sw.add_vlan_device("br0.10", host, Q, 10, mac(0xb1))
            .unwrap();
    (r, p1, host, v10)
}

#[test]
fn host_port_gets_frames_for_the_bridge_and_sends_into_it() {
    let (mut r, p1, host, _) = host_rig();
    // The bridge's address is local in each of the host port's VLANs (as br0's is on Linux).
    let fdb = r.sw.fdb_entries(&FdbFilter::default()).unwrap();
    let local: Vec<u16> = fdb
        .iter()
        .filter(|e| e.mac == mac(0xb0))
        .map(|e| e.vlan.unwrap_or(0))
        .collect();
    assert!(local.contains(&1) && local.contains(&10), "{local:?}");

    // To the bridge's own address, untagged in VLAN 1: up to the host, untagged.
    let to_br = frame(mac(0xb0), mac(1), &[], 90);
    let out = r.send(&[(p1, to_br.clone())]);
    assert_eq!(only(&out, host), vec![to_br]);
    assert_eq!(r.drops(p1, DropReason::Local), 0);

    // The host answers: into the bridge, out of p1 (learned).
    let reply = frame(mac(1), mac(0xb0), &[], 90);
    let out = r.send(&[(host, reply.clone())]);
    assert_eq!(only(&out, p1), vec![reply]);

    // Link-local frames the bridge does not forward (LLDP) go to the host as received.
    let lldp = frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]), mac(1), &[], 60);
    let out = r.send(&[(p1, lldp.clone())]);
    assert_eq!(only(&out, host), vec![lldp]);
    assert_eq!(r.drops(p1, DropReason::LinkLocal), 0);

    // Broadcast floods to the host port too.
    let arp = frame(BCAST, mac(1), &[], 60);
    let out = r.send(&[(p1, arp.clone())]);
    assert_eq!(only(&out, host), vec![arp]);

    // The host port cannot join a bridge or be deleted alone; deleting the bridge deletes it.
    let e = r.sw.set_master(host, None).unwrap_err();
    assert!(matches!(e, ConfigError::HostPortMaster(_)), "{e}");
    let gone = r.sw.del_link("br0").unwrap();
    assert_eq!(gone, vec!["br0.10", "br0"]);
    assert!(!r.sw.exists("br0.10"));
}

#[test]
fn without_a_host_port_frames_for_the_bridge_are_counted() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p1 = r.device("p1");
    r.enslave(p1, "br0");
    r.sw.fdb_add(
        mac(0xb0),
        p1,
        None,
        qbridge_bridge::FdbKind::Permanent,
        false,
        false,
    )
    .unwrap();
    let lldp = frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]), mac(1), &[], 60);
    nothing(&r.send(&[(p1, frame(mac(0xb0), mac(1), &[], 90)), (p1, lldp)]));
    assert_eq!(r.drops(p1, DropReason::Local), 1);
    assert_eq!(r.drops(p1, DropReason::LinkLocal), 1);
}

#[test]
fn host_vlan_device_on_the_bridge() {
    let (mut r, p1, host, v10) = host_rig();
    // The host sends on br0.10: tagged 10 into the bridge from the host port, out of trunk p1
    // tagged.
    let ping = frame(mac(1), mac(0xb1), &[], 98);
    let out = r.send(&[(v10, ping.clone())]);
    assert_eq!(only(&out, p1), vec![retag(&ping, 0, &[(0x8100, 10)])]);
    // The reply, tagged 10 on p1, reaches br0.10 untagged (its address was learned on the host
    // port in VLAN 10).
    let reply = frame(mac(0xb1), mac(1), &[(0x8100, 10)], 98);
    let out = r.send(&[(p1, reply.clone())]);
    assert_eq!(only(&out, v10), vec![retag(&reply, 1, &[])]);
    // A broadcast in VLAN 10 reaches br0.10, not br0 itself (its tag is br0.10's).
    let arp = frame(BCAST, mac(1), &[(0x8100, 10)], 60);
    let out = r.send(&[(p1, arp.clone())]);
    assert_eq!(only(&out, v10), vec![retag(&arp, 1, &[])]);
    // VLAN 1 (untagged on the host port) stays on br0.
    let arp1 = frame(BCAST, mac(1), &[], 60);
    let out = r.send(&[(p1, arp1.clone())]);
    assert_eq!(only(&out, host), vec![arp1]);
    let c = r.sw.port_counters(v10);
    assert_eq!((c.rx_frames, c.tx_frames), (2, 1));
}

/// Endpoints m1, m2 (and m3 if given) on device `up`, all in `mode`.
fn macvlan_rig(mode: MacvlanMode) -> (Rig, PortId, PortId, PortId) {
    let mut r = Rig::new();
    let up = r.device("up");
    let m1 = r.sw.add_macvlan("m1", up, mode, mac(0xa1)).unwrap();
    let m2 = r.sw.add_macvlan("m2", up, mode, mac(0xa2)).unwrap();
    (r, up, m1, m2)
}

#[test]
fn macvlan_bridge_mode_delivers_between_endpoints_directly() {
    let (mut r, up, m1, m2) = macvlan_rig(MacvlanMode::Bridge);
    let f = frame(mac(0xa2), mac(0xa1), &[], 90);
    let out = r.send(&[(m1, f.clone())]);
    assert_eq!(only(&out, m2), vec![f]);
    // To the outside: out of the lower device.
    let f = frame(mac(9), mac(0xa1), &[], 90);
    let out = r.send(&[(m1, f.clone())]);
    assert_eq!(only(&out, up), vec![f]);
    // A broadcast from m1: to m2 directly and out.
    let b = frame(BCAST, mac(0xa1), &[], 60);
    let out = r.send(&[(m1, b.clone())]);
    assert_eq!(out[m2.0 as usize], vec![b.clone()]);
    assert_eq!(out[up.0 as usize], vec![b.clone()]);
    assert!(out[m1.0 as usize].is_empty());
    // From outside: by destination; broadcast to every endpoint; others stay on the device.
    let f = frame(mac(0xa1), mac(9), &[], 90);
    assert_eq!(only(&r.send(&[(up, f.clone())]), m1), vec![f]);
    let b = frame(BCAST, mac(9), &[], 60);
    let out = r.send(&[(up, b.clone())]);
    assert_eq!(out[m1.0 as usize], vec![b.clone()]);
    assert_eq!(out[m2.0 as usize], vec![b]);
    nothing(&r.send(&[(up, frame(mac(0x77), mac(9), &[], 60))]));
    assert_eq!(r.drops(up, DropReason::NoBridge), 2);
}

#[test]
fn macvlan_vepa_sends_everything_out_and_takes_the_hairpin_back() {
    let (mut r, up, m1, m2) = macvlan_rig(MacvlanMode::Vepa);
    let f = frame(mac(0xa2), mac(0xa1), &[], 90);
    let out = r.send(&[(m1, f.clone())]);
    assert_eq!(only(&out, up), vec![f.clone()]);
    // The external switch hairpins it back: delivered to m2.
    assert_eq!(
        only(&r.send(&[(up, f)]), m2),
        vec![frame(mac(0xa2), mac(0xa1), &[], 90)]
    );
    // A broadcast from m1 comes back too: to m2, not m1.
    let b = frame(BCAST, mac(0xa1), &[], 60);
    assert_eq!(only(&r.send(&[(m1, b.clone())]), up), vec![b.clone()]);
    let out = r.send(&[(up, b.clone())]);
    assert_eq!(out[m2.0 as usize], vec![b]);
    assert!(out[m1.0 as usize].is_empty());
}

#[test]
fn macvlan_private_isolates_even_through_a_hairpin() {
    let (mut r, up, m1, m2) = macvlan_rig(MacvlanMode::Private);
    let f = frame(mac(0xa2), mac(0xa1), &[], 90);
    assert_eq!(only(&r.send(&[(m1, f.clone())]), up), vec![f.clone()]);
    nothing(&r.send(&[(up, f)]));
    assert_eq!(r.drops(m2, DropReason::Isolated), 1);
    let b = frame(BCAST, mac(0xa1), &[], 60);
    nothing(&r.send(&[(up, b)]));
    // The outside still reaches each endpoint.
    let f = frame(mac(0xa2), mac(9), &[], 90);
    assert_eq!(only(&r.send(&[(up, f.clone())]), m2), vec![f]);
    let b = frame(BCAST, mac(9), &[], 60);
    let out = r.send(&[(up, b.clone())]);
    assert_eq!(out[m1.0 as usize], vec![b.clone()]);
    assert_eq!(out[m2.0 as usize], vec![b]);
}

#[test]
fn macvlan_passthru_takes_every_frame() {
    let mut r = Rig::new();
    let up = r.device("up");
    let m =
        r.sw.add_macvlan("m", up, MacvlanMode::Passthru, mac(0xa1))
            .unwrap();
    let any = frame(mac(0x77), mac(9), &[(0x8100, 33)], 90);
    let mine = frame(mac(0xa1), mac(9), &[], 90);
    let out = r.send(&[(up, any.clone()), (up, mine.clone())]);
    assert_eq!(only(&out, m), vec![any, mine]);
    let f = frame(mac(9), mac(0x55), &[(0x88a8, 7)], 90);
    assert_eq!(only(&r.send(&[(m, f.clone())]), up), vec![f]);
}

#[test]
fn a_loop_through_host_ports_is_cut_and_counted() {
    // br1's host port carries v1 (VLAN 5), a port of br2; br2's host port carries v2 (VLAN 5),
    // a port of br1: a broadcast would circle forever, growing a tag per turn.
    let mut r = Rig::new();
    for b in ["br1", "br2"] {
        let s = BridgeSettings {
            vlan_filtering: false,
            ..Default::default()
        };
        r.sw.add_bridge(b, s).unwrap();
    }
    let h1 =
        r.sw.add_host_port(r.sw.bridge_id("br1").unwrap(), mac(0xc1))
            .unwrap();
    let h2 =
        r.sw.add_host_port(r.sw.bridge_id("br2").unwrap(), mac(0xc2))
            .unwrap();
    let v1 = r.sw.add_vlan_device("v1", h1, Q, 5, mac(0xc3)).unwrap();
    let v2 = r.sw.add_vlan_device("v2", h2, Q, 5, mac(0xc4)).unwrap();
    r.enslave(v1, "br2");
    r.enslave(v2, "br1");
    let p = r.device("p");
    r.enslave(p, "br1");
    let mut s = r.sw.port_settings(p).clone();
    s.mtu = 9000;
    r.sw.set_port(p, s).unwrap();
    let out = r.send(&[(p, frame(BCAST, mac(1), &[], 60))]);
    let total: usize = out.iter().map(|q| q.len()).sum();
    assert!(total > 0);
    let loops: u64 = [h1, h2, v1, v2, p]
        .iter()
        .map(|&x| r.drops(x, DropReason::StackLoop))
        .sum();
    assert!(loops > 0, "the loop was not cut");
}

/// A device stacked on a bridge's own interface (br0.10 on br0's host port, at any depth)
/// cannot be a port of that bridge (Linux refuses it: an upper device of its own master);
/// it can be a port of another bridge.
#[test]
fn vlan_device_of_the_host_port_cannot_join_its_bridge() {
    let (mut r, _p1, _host, v10) = host_rig();
    let br0 = r.sw.bridge_id("br0").unwrap();
    let e = r.sw.set_master(v10, Some(br0)).unwrap_err();
    assert!(matches!(e, ConfigError::StackedOnOwnBridge { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "\"br0.10\" is stacked on bridge \"br0\"'s own interface: it cannot be a port of br0 \
         (a loop; Linux refuses it too)"
    );
    assert_eq!(r.sw.port_master(v10), None, "nothing changed");
    // Two deep: br0.10.20.
    let v20 =
        r.sw.add_vlan_device("br0.10.20", v10, Q, 20, mac(0xb2))
            .unwrap();
    assert!(r.sw.set_master(v20, Some(br0)).is_err());
    // Another bridge takes it.
    r.bridge("br9", VlanProtocol::Dot1Q);
    let br9 = r.sw.bridge_id("br9").unwrap();
    r.sw.set_master(v10, Some(br9)).unwrap();
    assert_eq!(r.sw.port_master(v10), Some(br9));
}
