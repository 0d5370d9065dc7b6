//! FDB entries that are neither learned nor the usual user kinds: `extern_learn` entries
//! (a control plane's, Linux `NTF_EXT_LEARNED`) and the local entries of port addresses.
//! Exact frames out of each port, FDB contents, counters.

mod common;

use common::{frame, mac, only, Rig};
use qbridge_bridge::{BridgeSettings, DropReason, FdbEntryView, FdbFilter, FdbKind};

const S: u64 = 1_000_000_000;

fn entries(r: &Rig) -> Vec<FdbEntryView> {
    r.sw.fdb_entries(&FdbFilter::default()).unwrap()
}

/// `fdb add … extern_learn`: forwards like any entry, never ages, stays on port down, is
/// not a learned entry (outside `fdb_max_learned`), replaces an existing entry even with
/// `add`; learning the address on another port takes it over (moved, no longer
/// `extern_learn`, and then it ages), as Linux's `br_fdb_update`.
#[test]
fn extern_learn_entries() {
    let mut r = Rig::new();
    r.sw.add_bridge(
        "br0",
        BridgeSettings {
            vlan_filtering: true,
            fdb_max_learned: 1,
            ageing_time_ns: 10 * S,
            ..Default::default()
        },
    )
    .unwrap();
    let (a, b, c) = (r.device("a"), r.device("b"), r.device("c"));
    for p in [a, b, c] {
        r.enslave(p, "br0");
    }
    let x = mac(0x51);
    r.sw.fdb_add_extern(x, b, Some(1), None).unwrap();
    let e = entries(&r);
    assert_eq!(e.len(), 1);
    assert!(e[0].extern_learn && e[0].added_by_user && e[0].kind == FdbKind::Dynamic);
    let id = r.sw.bridge_id("br0").unwrap();
    assert_eq!(r.sw.fdb_len(id), (1, 0), "not a learned entry");
    // Forwarding, and learning still has its one place (fdb_max_learned 1).
    let to_x = frame(x, mac(1), &[], 80);
    assert_eq!(only(&r.send(&[(a, to_x.clone())]), b), vec![to_x.clone()]);
    assert_eq!(r.sw.fdb_len(id), (2, 1));
    assert_eq!(r.sw.port_counters(a).fdb_learn_refused, 0);
    // Never aged (mac 1, learned, is), kept on port down and vlan del's flush.
    assert_eq!(r.sw.age(1000 * S), 1);
    let mut s = r.sw.port_settings(b).clone();
    s.up = false;
    r.sw.set_port(b, s.clone()).unwrap();
    s.up = true;
    r.sw.set_port(b, s).unwrap();
    assert_eq!(entries(&r).len(), 1, "{:?}", entries(&r));
    // `add` replaces (Linux ignores NLM_F_EXCL for extern_learn): moved to c.
    r.sw.fdb_add_extern(x, c, Some(1), None).unwrap();
    assert_eq!(entries(&r)[0].ifname, "c");
    // A plain `fdb add` of the key is refused: it exists.
    assert!(r
        .sw
        .fdb_add(x, a, Some(1), FdbKind::Static, false, false)
        .is_err());
    // Taken over by learning on a: moved, no longer extern_learn, a dynamic user entry that
    // now ages.
    let from_x = frame(mac(2), x, &[], 80);
    r.send(&[(a, from_x)]);
    let e = entries(&r);
    let ex = e.iter().find(|e| e.mac == x).unwrap();
    assert_eq!(ex.ifname, "a");
    assert!(!ex.extern_learn && ex.added_by_user, "{ex:?}");
    assert_eq!(r.sw.age(2000 * S), 1);
    assert!(entries(&r).iter().all(|e| e.mac != x));
    // The bridge's own (permanent) entry is not replaced.
    r.sw.fdb_add(mac(0x52), a, Some(1), FdbKind::Permanent, false, false)
        .unwrap();
    assert!(r.sw.fdb_add_extern(mac(0x52), b, Some(1), None).is_err());
    assert_eq!(r.drops(a, DropReason::Local), 0);
}

/// A device port's own interface address (reported by the I/O layer) is a local (permanent)
/// entry in VLAN 0 and each of its VLANs, as Linux's `br_fdb_add_local`: it replaces a learned
/// entry of that address on another port; frames to it are the bridge's (`local` without a
/// host port, up to the host port with one); it is not a learned entry; it follows the port's
/// VLANs, its address and its membership; another port with the same address keeps the
/// first port's entry.
#[test]
fn port_addresses_are_local_entries() {
    let mut r = Rig::new();
    r.sw.add_bridge(
        "br0",
        BridgeSettings {
            vlan_filtering: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (a, b, c) = (r.device("a"), r.device("b"), r.device("c"));
    for p in [a, b, c] {
        r.enslave(p, "br0");
    }
    let x = mac(0x61);
    // X learned on b first.
    r.send(&[(b, frame(mac(9), x, &[], 80))]);
    let to_x = frame(x, mac(1), &[], 80);
    r.sw.set_port_address(a, Some(x));
    assert_eq!(r.sw.port_address(a), Some(x));
    let local: Vec<(String, Option<u16>, FdbKind, bool)> = entries(&r)
        .into_iter()
        .filter(|e| e.mac == x)
        .map(|e| (e.ifname, e.vlan, e.kind, e.added_by_user))
        .collect();
    assert_eq!(
        local,
        [
            ("a".to_string(), None, FdbKind::Permanent, false),
            ("a".to_string(), Some(1), FdbKind::Permanent, false)
        ]
    );
    let id = r.sw.bridge_id("br0").unwrap();
    assert_eq!(
        r.sw.fdb_len(id),
        (2, 0),
        "X learned on b was replaced; locals not learned"
    );
    // To the port's address: the bridge's own, counted `local` (no host port).
    assert!(r.send(&[(c, to_x.clone())]).iter().all(|q| q.is_empty()));
    assert_eq!(r.drops(c, DropReason::Local), 1);
    // With a host port: up to the host.
    let host = r.sw.add_host_port(id, mac(0xb0)).unwrap();
    assert_eq!(
        only(&r.send(&[(c, to_x.clone())]), host),
        vec![to_x.clone()]
    );
    // Its VLANs: vlan add / del.
    r.sw.vlan_add(a, 10, 10, false, false).unwrap();
    let vlans = |r: &Rig| -> Vec<Option<u16>> {
        entries(r)
            .into_iter()
            .filter(|e| e.mac == x)
            .map(|e| e.vlan)
            .collect()
    };
    assert_eq!(vlans(&r), [None, Some(1), Some(10)]);
    r.sw.vlan_del(a, 10, 10).unwrap();
    assert_eq!(vlans(&r), [None, Some(1)]);
    // Another port with the same address: the first port's entries stay.
    r.sw.set_port_address(b, Some(x));
    assert!(entries(&r)
        .iter()
        .filter(|e| e.mac == x)
        .all(|e| e.ifname == "a"));
    // A new address moves them; the port leaving the bridge takes them along.
    let y = mac(0x62);
    r.sw.set_port_address(a, Some(y));
    assert!(entries(&r).iter().all(|e| e.mac != x || e.ifname != "a"));
    assert_eq!(
        entries(&r).iter().filter(|e| e.mac == y).count(),
        2,
        "{:?}",
        entries(&r)
    );
    r.sw.set_master(a, None).unwrap();
    assert!(entries(&r).iter().all(|e| e.mac != y));
    // Joining again brings them back.
    r.enslave(a, "br0");
    assert_eq!(entries(&r).iter().filter(|e| e.mac == y).count(), 2);
}

/// `learn_inner_vid`: the 28,672 pair FIDs come back after `fdb flush` (decision 35). All of
/// them numbered, then flushed: once the datapath has moved on (its next run) and the next
/// ageing pass ran, a pair never seen before learns per inner VID again, not in its S-VLAN's
/// shared FID as when FIDs stayed used for good.
#[test]
fn inner_vid_pair_fids_come_back_after_a_flush() {
    use qbridge_bridge::VlanProtocol;
    let mut r = Rig::new();
    r.sw.add_bridge(
        "pe",
        BridgeSettings {
            vlan_filtering: true,
            vlan_protocol: VlanProtocol::Dot1Ad,
            learn_inner_vid: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (a, b) = (r.device("a"), r.device("b"));
    for p in [a, b] {
        r.enslave(p, "pe");
        r.sw.vlan_add(p, 1, 8, false, false).unwrap();
    }
    let id = r.sw.bridge_id("pe").unwrap();
    let pairs = (1..=8u16).flat_map(|s| (1..=4094u16).map(move |c| (s, c)));
    let all: Vec<(u16, u16)> = pairs.take(28_672).collect();
    for chunk in all.chunks(32) {
        let batch: Vec<_> = chunk
            .iter()
            .map(|&(s, c)| (a, frame(mac(9), mac(1), &[(0x88a8, s), (0x8100, c)], 80)))
            .collect();
        r.send(&batch);
    }
    assert_eq!(r.sw.inner_fids_in_use(id), Some((28_672, 0)));
    let new_pair = |r: &mut Rig, c: u16| -> Option<u16> {
        r.send(&[(b, frame(mac(9), mac(2), &[(0x88a8, 8), (0x8100, c)], 80))]);
        entries(r)
            .iter()
            .find(|e| e.mac == mac(2) && e.vlan == Some(8))
            .map(|e| e.inner_vlan)
            .expect("learned")
    };
    // Full: a new pair learns in S-VLAN 8's own FID.
    assert_eq!(new_pair(&mut r, 4000), None);
    r.sw.fdb_flush("pe", None, qbridge_bridge::FdbFlushKind::All)
        .unwrap();
    // The datapath moves on (a run of the bridge), ageing reclaims: every FID is free.
    r.send(&[(a, frame(mac(9), mac(1), &[(0x88a8, 1), (0x8100, 1)], 80))]);
    r.sw.age(1);
    let (numbered, retired) = r.sw.inner_fids_in_use(id).unwrap();
    assert!(numbered <= 1 && retired <= 1, "{numbered} {retired}");
    assert_eq!(
        new_pair(&mut r, 4001),
        Some(4001),
        "learned per inner VID again"
    );
}
