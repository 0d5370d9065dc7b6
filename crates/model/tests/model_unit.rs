//! The model on hand-written cases, checked against expectations written from the rules in
//! docs/semantics.md (not against the fast path).

mod common;

use common::{bridge_settings, frame, mac, tpid, S};
use qbridge_bridge::{BridgeSettings, DropReason, FdbKind, PortSettings, VlanProtocol};
use qbridge_model::{Frame, Meta, Model};
use qbridge_wire::MacAddr;

struct Rig {
    m: Model,
    now: u64,
}

impl Rig {
    fn new(settings: BridgeSettings, nports: usize) -> Rig {
        let mut m = Model::new();
        let b = m.add_bridge("br0", settings).unwrap();
        for i in 0..nports {
            let p = m
                .add_port(&format!("p{i}"), PortSettings::default())
                .unwrap();
            m.set_master(p, Some(b)).unwrap();
        }
        Rig { m, now: S }
    }

    fn set(&mut self, p: u16, f: impl FnOnce(&mut PortSettings)) {
        let mut s = PortSettings::default();
        f(&mut s);
        self.m.set_port(p, s).unwrap();
    }

    fn send_meta(&mut self, port: u16, bytes: Vec<u8>, meta: Meta) -> Vec<(u16, Vec<u8>)> {
        let out = self.m.process(self.now, vec![Frame { port, bytes, meta }]);
        let mut v: Vec<_> = out.into_iter().map(|f| (f.port, f.bytes)).collect();
        v.sort();
        v
    }

    fn send(&mut self, port: u16, bytes: Vec<u8>) -> Vec<(u16, Vec<u8>)> {
        self.send_meta(port, bytes, Meta::default())
    }

    fn drops(&self, p: u16, r: DropReason) -> u64 {
        self.m.counters(p).drops.get(&r).copied().unwrap_or(0)
    }

    fn fdb(&self) -> Vec<(MacAddr, u16, u16)> {
        self.m
            .fdb()
            .into_iter()
            .map(|r| (r.mac, r.vid, r.port))
            .collect()
    }
}

fn provider() -> Rig {
    // p0, p1: customer ports (S-VLAN 100 / 200, pvid untagged); p2: provider trunk.
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Ad), 3);
    for p in 0..3 {
        r.m.vlan_del(p, 1, 1).unwrap();
    }
    r.m.vlan_add(0, 100, 100, true, true).unwrap();
    r.m.vlan_add(1, 200, 200, true, true).unwrap();
    r.m.vlan_add(2, 100, 100, false, false).unwrap();
    r.m.vlan_add(2, 200, 200, false, false).unwrap();
    r
}

#[test]
fn qinq_push_s_tag_outside_c_tag_and_pop_only_the_s_tag() {
    let mut r = provider();
    let c_tagged = frame(mac(9), mac(1), &[(0x8100, 0x600a)], 64);
    let out = r.send(0, c_tagged.clone());
    // Pushed tag: PCP 0 (the C-tag's PCP is payload to an 802.1ad bridge).
    assert_eq!(
        out,
        vec![(
            2,
            frame(mac(9), mac(1), &[(0x88a8, 100), (0x8100, 0x600a)], 68)
        )]
    );
    let out = r.send(
        2,
        frame(mac(1), mac(9), &[(0x88a8, 0xa064), (0x8100, 0x600a)], 68),
    );
    assert_eq!(
        out,
        vec![(0, frame(mac(1), mac(9), &[(0x8100, 0x600a)], 64))]
    );
    // The same MAC in S-VLAN 200 is another FDB entry; the frame stays in VLAN 200.
    let out = r.send(1, frame(mac(1), mac(9), &[(0x8100, 0x000a)], 64));
    assert_eq!(
        out,
        vec![(
            2,
            frame(mac(1), mac(9), &[(0x88a8, 200), (0x8100, 0x000a)], 68)
        )]
    );
    assert_eq!(
        r.fdb(),
        vec![(mac(1), 100, 0), (mac(9), 200, 1), (mac(9), 100, 2)]
    );
    assert_eq!(r.m.counters(2).tx_frames, 2);
}

#[test]
fn auto_envelope_lets_a_double_tagged_full_size_frame_through() {
    let mut r = provider();
    // 1500-byte payload + C-tag from the customer: 1518 in, 1522 out on the trunk.
    let f = frame(mac(9), mac(1), &[(0x8100, 10)], 1518);
    assert_eq!(r.m.port_max_frame(0), 1518); // customer port: no tagged VLAN, one tag of slack
    assert_eq!(r.m.port_max_frame(2), 1522); // trunk: 802.1ad with tagged VLANs
    let out = r.send(0, f);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.len(), 1522);
    // One byte more is oversize at ingress, on the customer port.
    let out = r.send(0, frame(mac(9), mac(1), &[(0x8100, 10)], 1519));
    assert!(out.is_empty());
    assert_eq!(r.drops(0, DropReason::Oversize), 1);
}

#[test]
fn egress_oversize_after_push_is_counted_on_the_egress_port() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    r.m.vlan_add(1, 1, 1, true, false).unwrap(); // p1: VLAN 1 tagged
    r.set(1, |s| s.envhdr_len = Some(0));
    let out = r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 1514));
    assert!(out.is_empty());
    assert_eq!(r.drops(1, DropReason::Oversize), 1);
    assert_eq!(r.drops(0, DropReason::Oversize), 0);
    // GSO: the segment (parsed headers + gso_size) is judged, not the super-frame, and not
    // hdr_len (a sender's linear length).
    let meta = Meta {
        gso_type: 1,
        hdr_len: 9000,
        gso_size: 1400,
        ..Meta::default()
    };
    let mut f = frame(MacAddr::BROADCAST, mac(1), &[], 14);
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&(20000u16 - 14).to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = vec![0u8; 20];
    tcp[12] = 5 << 4;
    f.extend_from_slice(&tcp);
    f.resize(20000, 0x61);
    let out = r.send_meta(0, f.clone(), meta);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.len(), 20004);
    // Not a transport payload: judged whole.
    let out = r.send_meta(0, frame(MacAddr::BROADCAST, mac(1), &[], 20000), meta);
    assert!(out.is_empty());
}

#[test]
fn priority_tag_takes_the_pvid_and_keeps_pcp_and_dei() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 3);
    r.m.vlan_add(0, 10, 10, true, true).unwrap();
    r.m.vlan_add(1, 10, 10, false, false).unwrap();
    r.m.vlan_add(2, 10, 10, false, true).unwrap();
    let out = r.send(
        0,
        frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0xb000)], 64),
    );
    assert_eq!(
        out,
        vec![
            (
                1,
                frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0xb00a)], 64)
            ),
            (2, frame(MacAddr::BROADCAST, mac(1), &[], 60)),
        ]
    );
    // Untagged in: pushed with PCP 0.
    let out = r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    assert_eq!(
        out[0],
        (1, frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 10)], 64))
    );
}

#[test]
fn classification_drops() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    let bc = MacAddr::BROADCAST;
    r.send(0, frame(bc, mac(1), &[(0x8100, 0x0fff)], 64));
    assert_eq!(r.drops(0, DropReason::ReservedVid), 1);
    r.send(0, frame(bc, mac(1), &[(0x8100, 7)], 64));
    assert_eq!(r.drops(0, DropReason::VlanNotMember), 1);
    let mut runt = frame(bc, mac(1), &[(0x8100, 1)], 64);
    runt.truncate(17);
    r.send(0, runt);
    runt = frame(bc, mac(1), &[], 64);
    runt.truncate(13);
    r.send(0, runt);
    assert_eq!(r.drops(0, DropReason::Runt), 2);
    r.send(0, frame(bc, MacAddr([1, 0, 0x5e, 0, 0, 1]), &[], 64));
    r.send(0, frame(bc, MacAddr::ZERO, &[], 64));
    assert_eq!(r.drops(0, DropReason::InvalidSrcMac), 2);
    // Untagged and priority-tagged frames on a port without PVID.
    r.m.vlan_add(0, 1, 1, false, false).unwrap();
    r.send(0, frame(bc, mac(1), &[], 64));
    r.send(0, frame(bc, mac(1), &[(0x8100, 0x2000)], 64));
    assert_eq!(r.drops(0, DropReason::NoPvid), 2);
    // Nothing dropped before the ingress filter was learned.
    assert!(r.fdb().is_empty());
    // Another TPID is payload: the 0x88a8-tagged frame is untagged to this 802.1Q bridge.
    r.m.vlan_add(0, 1, 1, true, true).unwrap();
    let f = frame(bc, mac(1), &[(0x88a8, 5)], 64);
    assert_eq!(r.send(0, f.clone()), vec![(1, f)]);
}

#[test]
fn per_port_tpid_rewrites_the_tag() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    r.m.vlan_add(0, 5, 5, false, false).unwrap();
    r.m.vlan_add(1, 5, 5, false, false).unwrap();
    r.set(0, |s| s.tpid = tpid(0x9100));
    let out = r.send(
        0,
        frame(
            MacAddr::BROADCAST,
            mac(1),
            &[(0x9100, 0x3005), (0x8100, 9)],
            64,
        ),
    );
    assert_eq!(
        out,
        vec![(
            1,
            frame(
                MacAddr::BROADCAST,
                mac(1),
                &[(0x8100, 0x3005), (0x8100, 9)],
                64
            )
        )]
    );
}

#[test]
fn hairpin() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    r.send(0, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    assert!(r.send(0, frame(mac(2), mac(1), &[], 60)).is_empty());
    assert_eq!(r.drops(0, DropReason::SamePort), 1);
    r.set(0, |s| s.hairpin = true);
    let f = frame(mac(2), mac(1), &[], 60);
    assert_eq!(r.send(0, f.clone()), vec![(0, f)]);
    let b = frame(MacAddr::BROADCAST, mac(1), &[], 60);
    assert_eq!(r.send(0, b.clone()), vec![(0, b.clone()), (1, b)]);
}

#[test]
fn isolation() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 3);
    r.set(0, |s| s.isolated = true);
    r.set(1, |s| s.isolated = true);
    let b = |src| frame(MacAddr::BROADCAST, mac(src), &[], 60);
    assert_eq!(r.send(0, b(1)), vec![(2, b(1))]);
    assert_eq!(r.send(2, b(3)), vec![(0, b(3)), (1, b(3))]);
    assert_eq!(r.send(1, b(2)), vec![(2, b(2))]);
    assert!(r.send(0, frame(mac(2), mac(1), &[], 60)).is_empty());
    assert_eq!(r.drops(0, DropReason::Isolated), 1);
    // Only isolated ports flooded to from an isolated one: nowhere to go.
    r.set(2, |s| s.bcast_flood = false);
    assert!(r.send(0, b(1)).is_empty());
    assert_eq!(r.drops(0, DropReason::NoDestination), 1);
}

#[test]
fn link_local_groups() {
    let ll = |g| MacAddr([0x01, 0x80, 0xc2, 0, 0, g]);
    let mut q = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    assert_eq!(q.send(0, frame(ll(0), mac(1), &[], 60)).len(), 1); // no STP: forwarded
    assert!(q.send(0, frame(ll(1), mac(1), &[], 60)).is_empty()); // pause: never
    assert!(q.send(0, frame(ll(0x0e), mac(1), &[], 60)).is_empty());
    assert_eq!(q.drops(0, DropReason::LinkLocal), 2);
    let mut ad = Rig::new(bridge_settings(true, VlanProtocol::Dot1Ad), 2);
    assert_eq!(ad.send(0, frame(ll(0x0b), mac(1), &[], 60)).len(), 1);
    assert!(ad.send(0, frame(ll(0x08), mac(1), &[], 60)).is_empty());
    let mut masked = Rig::new(
        BridgeSettings {
            group_fwd_mask: 1 << 0x0e,
            ..Default::default()
        },
        2,
    );
    assert_eq!(masked.send(0, frame(ll(0x0e), mac(1), &[], 60)).len(), 1);
}

#[test]
fn permanent_is_local_static_moves_sticky_does_not() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 3);
    r.m.fdb_add(mac(7), 2, Some(1), FdbKind::Permanent, false, false)
        .unwrap();
    r.m.fdb_add(mac(8), 2, Some(1), FdbKind::Static, false, false)
        .unwrap();
    r.m.fdb_add(mac(9), 2, Some(1), FdbKind::Static, true, false)
        .unwrap();
    assert!(r.send(0, frame(mac(7), mac(1), &[], 60)).is_empty());
    assert_eq!(r.drops(0, DropReason::Local), 1);
    for src in [7, 8, 9] {
        r.send(0, frame(MacAddr::BROADCAST, mac(src), &[], 60));
    }
    assert_eq!(
        r.fdb(),
        vec![
            (mac(1), 1, 0),
            (mac(8), 1, 0),
            (mac(7), 1, 2),
            (mac(9), 1, 2)
        ]
    );
    assert_eq!(r.m.counters(0).fdb_moves, 1);
}

#[test]
fn limits_refuse_and_a_full_table_evicts_fairly() {
    let mut r = Rig::new(
        BridgeSettings {
            vlan_filtering: true,
            fdb_max_learned: 3,
            fdb_max_entries: 100,
            ..Default::default()
        },
        3,
    );
    let hello = |src| frame(MacAddr::BROADCAST, mac(src), &[], 60);
    r.set(0, |s| s.fdb_max_learned = 1);
    r.send(0, hello(1));
    r.send(0, hello(2));
    assert_eq!(r.m.counters(0).fdb_learn_refused, 1);
    r.send(1, hello(3));
    r.send(1, hello(4));
    r.send(2, hello(5));
    assert_eq!(r.m.counters(2).fdb_learn_refused, 1);
    assert_eq!(r.fdb().len(), 3);

    // Table of 4: p1 holds most learned entries; ties go to the lowest port id.
    let mut r = Rig::new(
        BridgeSettings {
            vlan_filtering: true,
            fdb_max_entries: 4,
            ..Default::default()
        },
        3,
    );
    for (p, src) in [(1, 1), (1, 2), (0, 3), (0, 4)] {
        r.send(p, hello(src));
    }
    r.send(2, hello(5));
    assert_eq!(r.m.counters(0).fdb_evictions, 1);
    assert_eq!(
        r.fdb(),
        vec![
            (mac(4), 1, 0),
            (mac(1), 1, 1),
            (mac(2), 1, 1),
            (mac(5), 1, 2)
        ]
    );
    // An entry that moves back to a port is the newest there: mac 1 moves to p0 and back to
    // p1, so p1's oldest is now mac 2.
    r.send(0, hello(1));
    r.send(1, hello(1));
    r.send(2, hello(6));
    assert_eq!(
        r.fdb(),
        vec![
            (mac(4), 1, 0),
            (mac(1), 1, 1),
            (mac(5), 1, 2),
            (mac(6), 1, 2)
        ]
    );
    assert_eq!(r.m.counters(1).fdb_evictions, 1);
}

#[test]
fn ageing_follows_linux() {
    let mut r = Rig::new(
        BridgeSettings {
            vlan_filtering: true,
            ageing_time_ns: 10 * S,
            ..Default::default()
        },
        2,
    );
    r.m.fdb_add(mac(9), 1, None, FdbKind::Static, false, false)
        .unwrap();
    r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    assert_eq!(r.m.age(r.now + 10 * S - 1), 0);
    assert_eq!(r.m.age(r.now + 10 * S), 1); // idle == ageing_time: aged, as Linux
    assert_eq!(r.fdb().len(), 2); // static entries (VLAN 0 and 1) stay

    let mut r = Rig::new(
        BridgeSettings {
            vlan_filtering: true,
            ageing_time_ns: 0,
            ..Default::default()
        },
        2,
    );
    r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    assert!(r.fdb().is_empty()); // ageing_time 0: nothing learned
}

#[test]
fn port_down_drops_and_flushes_dynamic_entries() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 3);
    r.send(1, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    r.m.fdb_add(mac(3), 1, Some(1), FdbKind::Static, false, false)
        .unwrap();
    r.set(1, |s| s.up = false);
    assert_eq!(r.fdb(), vec![(mac(3), 1, 1)]);
    // Learned entry gone: flooded to the ports that are up. Static entry: egress down.
    let f = frame(mac(2), mac(1), &[], 60);
    assert_eq!(r.send(0, f.clone()), vec![(2, f)]);
    assert!(r.send(0, frame(mac(3), mac(1), &[], 60)).is_empty());
    assert_eq!(r.drops(0, DropReason::EgressDown), 1);
    r.send(1, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    assert_eq!(r.drops(1, DropReason::PortDown), 1);
}

#[test]
fn vlan_unaware_bridge_leaves_tags_alone() {
    let mut r = Rig::new(bridge_settings(false, VlanProtocol::Dot1Q), 2);
    let f = frame(
        MacAddr::BROADCAST,
        mac(1),
        &[(0x8100, 0x0fff), (0x88a8, 3)],
        64,
    );
    assert_eq!(r.send(0, f.clone()), vec![(1, f)]);
    assert_eq!(r.fdb(), vec![(mac(1), 0, 0)]);
    assert_eq!(r.m.vlan_counters(0, 0).rx_frames, 1);
}

#[test]
fn vlan_del_flushes_only_dynamic_entries_of_that_vlan() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    r.m.vlan_add(0, 2, 2, false, false).unwrap();
    r.send(0, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    r.send(0, frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 2)], 64));
    r.m.fdb_add(mac(5), 0, Some(2), FdbKind::Static, false, false)
        .unwrap();
    r.m.vlan_del(0, 2, 2).unwrap();
    assert_eq!(r.fdb(), vec![(mac(1), 1, 0), (mac(5), 2, 0)]);
    assert!(r.m.vlan_del(0, 2, 2).is_err());
}

#[test]
fn offload_offsets_move_with_the_tag() {
    let mut r = Rig::new(bridge_settings(true, VlanProtocol::Dot1Q), 2);
    r.m.vlan_add(1, 1, 1, false, false).unwrap();
    let meta = Meta {
        flags: 1,
        csum_start: 34,
        csum_offset: 16,
        gso_type: 1,
        hdr_len: 54,
        gso_size: 100,
    };
    let out = r.m.process(
        r.now,
        vec![Frame {
            port: 0,
            bytes: frame(MacAddr::BROADCAST, mac(1), &[], 200),
            meta,
        }],
    );
    assert_eq!(
        out[0].meta,
        Meta {
            csum_start: 38,
            hdr_len: 58,
            ..meta
        }
    );
}
