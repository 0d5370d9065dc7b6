//! Port VLAN modes (`docs/semantics.md` §G): what each mode compiles into, and a
//! `dot1q-tunnel` port's frames exactly as they leave each port.

mod common;

use common::{frame, mac, nothing, only, retag, Rig};
use qbridge_bridge::{ConfigError, DropReason, VidList, VlanMode, VlanModeKind as K, VlanProtocol};

fn mode(
    m: K,
    tag: Option<u16>,
    trunks: Option<&[(u16, u16)]>,
    cvlans: Option<&[(u16, u16)]>,
) -> VlanMode {
    VlanMode {
        mode: m,
        tag,
        trunks: trunks.map(|r| VidList::new(r.to_vec())),
        cvlans: cvlans.map(|r| VidList::new(r.to_vec())),
    }
}

/// `(vid, pvid, untagged)` of every VLAN of port `name`.
fn vlans(r: &Rig, name: &str) -> Vec<(u16, bool, bool)> {
    let id = r.sw.port_id(name).unwrap();
    (1..=4094)
        .filter_map(|v| r.sw.vlan_membership(id, v).map(|(p, u)| (v, p, u)))
        .collect()
}

#[test]
fn modes_compile_into_membership() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p = r.device("p");
    r.enslave(p, "br0");
    r.sw.set_vlan_mode(p, mode(K::Access, Some(10), None, None))
        .unwrap();
    assert_eq!(vlans(&r, "p"), [(10, true, true)]);
    r.sw.set_vlan_mode(p, mode(K::NativeUntagged, Some(5), Some(&[(20, 21)]), None))
        .unwrap();
    assert_eq!(
        vlans(&r, "p"),
        [(5, true, true), (20, false, false), (21, false, false)]
    );
    r.sw.set_vlan_mode(p, mode(K::NativeTagged, Some(5), Some(&[(20, 20)]), None))
        .unwrap();
    assert_eq!(vlans(&r, "p"), [(5, true, false), (20, false, false)]);
    r.sw.set_vlan_mode(p, mode(K::Trunk, None, None, None))
        .unwrap();
    assert_eq!(vlans(&r, "p").len(), 4094);
    assert!(vlans(&r, "p").iter().all(|&(_, pv, u)| !pv && !u));
    // Refusals change nothing.
    let e =
        r.sw.set_vlan_mode(p, mode(K::Trunk, Some(3), None, None))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "vlan_mode trunk takes no \"tag\" (native-untagged or native-tagged give a trunk a native VLAN)"
    );
    let e =
        r.sw.set_vlan_mode(p, mode(K::Access, None, None, None))
            .unwrap_err();
    assert_eq!(e.to_string(), "vlan_mode access needs \"tag VID\"");
    let e =
        r.sw.set_vlan_mode(p, mode(K::Access, Some(3), None, Some(&[(0, 0)])))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "\"cvlans\" applies to vlan_mode dot1q-tunnel only, not access"
    );
    let e =
        r.sw.set_vlan_mode(p, mode(K::Trunk, None, Some(&[(30, 20)]), None))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "trunks: range 30-20 is reversed (write it 20-30)"
    );
    assert_eq!(vlans(&r, "p").len(), 4094);
    // A port in no bridge has no VLANs to set.
    let q = r.device("q");
    assert!(matches!(
        r.sw.set_vlan_mode(q, mode(K::Access, Some(3), None, None)),
        Err(ConfigError::NoMaster(_))
    ));
    // Leaving the bridge clears the mode.
    r.sw.set_master(p, None).unwrap();
    assert!(r.sw.port_vlan_mode(p).is_none());
}

/// An 802.1ad provider bridge: a customer port in `dot1q-tunnel` for S-VLAN 100 and a trunk.
/// Untagged, C-tagged and even S-tagged customer frames all get S-tag 100 on the trunk; on the
/// way back exactly one tag comes off. `cvlans 0,10` admits untagged frames and C-VLAN 10 only.
#[test]
fn dot1q_tunnel_pushes_on_every_frame_and_filters_cvlans() {
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad);
    let cust = r.device("cust");
    let trunk = r.device("trunk");
    r.enslave(cust, "pe");
    r.enslave(trunk, "pe");
    r.sw.set_vlan_mode(
        cust,
        mode(K::Dot1qTunnel, Some(100), None, Some(&[(0, 0), (10, 10)])),
    )
    .unwrap();
    r.sw.set_vlan_mode(trunk, mode(K::Trunk, None, Some(&[(100, 100)]), None))
        .unwrap();

    let dst = mac(0x20);
    for tags in [
        vec![],
        vec![(0x8100, 10)],
        vec![(0x8100, 0x2000 | 10), (0x8100, 7)],
    ] {
        let f = frame(dst, mac(1), &tags, 90);
        let out = r.send(&[(cust, f.clone())]);
        let mut want_tags = vec![(0x88a8, 100)];
        want_tags.extend(&tags);
        assert_eq!(
            only(&out, trunk),
            vec![retag(&f, tags.len(), &want_tags)],
            "{tags:x?}"
        );
    }
    // C-VLAN 20 is not admitted, nor a frame whose outer tag is an S-tag (its customer VLAN
    // is 0 only when untagged or not C-tagged: 0x88a8 outside counts as 0, admitted here).
    let f = frame(dst, mac(1), &[(0x8100, 20)], 90);
    nothing(&r.send(&[(cust, f)]));
    assert_eq!(r.drops(cust, DropReason::CvlanNotAllowed), 1);
    let f = frame(dst, mac(1), &[(0x88a8, 555)], 90);
    let out = r.send(&[(cust, f.clone())]);
    assert_eq!(
        only(&out, trunk),
        vec![retag(&f, 1, &[(0x88a8, 100), (0x88a8, 555)])],
        "an S-tagged customer frame is tunnelled too"
    );

    // Back from the trunk: S-tag 100 off, the customer's tags untouched.
    let back = frame(mac(1), dst, &[(0x88a8, 100), (0x8100, 10)], 100);
    let out = r.send(&[(trunk, back.clone())]);
    assert_eq!(only(&out, cust), vec![retag(&back, 1, &[])]);
    // Other S-VLANs do not reach the tunnel port.
    let other = frame(mac(1), dst, &[(0x88a8, 200)], 100);
    nothing(&r.send(&[(trunk, other)]));
    assert_eq!(r.drops(trunk, DropReason::VlanNotMember), 1);
}

/// Access and trunk modes on an 802.1Q bridge: untagged on the access port, tagged on the
/// trunk; the trunk drops untagged frames (`no_pvid`), the access port tagged ones of another
/// VID (`vlan_not_member`); a native-untagged trunk takes untagged frames into its native VLAN.
#[test]
fn access_trunk_and_native_vlans() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let acc = r.device("acc");
    let tr = r.device("tr");
    let nat = r.device("nat");
    for p in [acc, tr, nat] {
        r.enslave(p, "br0");
    }
    r.sw.set_vlan_mode(acc, mode(K::Access, Some(10), None, None))
        .unwrap();
    r.sw.set_vlan_mode(tr, mode(K::Trunk, None, Some(&[(10, 20)]), None))
        .unwrap();
    r.sw.set_vlan_mode(
        nat,
        mode(K::NativeUntagged, Some(10), Some(&[(30, 30)]), None),
    )
    .unwrap();

    let bc = qbridge_wire::MacAddr([0xff; 6]);
    let f = frame(bc, mac(1), &[], 80);
    let out = r.send(&[(acc, f.clone())]);
    assert_eq!(out[tr.0 as usize], vec![retag(&f, 0, &[(0x8100, 10)])]);
    assert_eq!(
        out[nat.0 as usize],
        vec![f.clone()],
        "native VLAN leaves untagged"
    );

    nothing(&r.send(&[(tr, frame(bc, mac(2), &[], 80))]));
    assert_eq!(r.drops(tr, DropReason::NoPvid), 1);
    nothing(&r.send(&[(acc, frame(bc, mac(1), &[(0x8100, 11)], 80))]));
    assert_eq!(r.drops(acc, DropReason::VlanNotMember), 1);

    let u = frame(bc, mac(3), &[], 80);
    let out = r.send(&[(nat, u.clone())]);
    assert_eq!(out[acc.0 as usize], vec![u.clone()]);
    assert_eq!(out[tr.0 as usize], vec![retag(&u, 0, &[(0x8100, 10)])]);
}

/// A locked port (`docs/semantics.md` §I): only sources with an entry on it pass; with `mab`
/// an unknown source gets a `locked` entry that does not forward (frames to it flood), until a
/// static entry replaces it; learning elsewhere unlocks it.
#[test]
fn locked_port_and_mab() {
    use qbridge_bridge::{FdbFilter, FdbKind, PortSettings};
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let lp = r.device("lp");
    let a = r.device("a");
    let b = r.device("b");
    for p in [lp, a, b] {
        r.enslave(p, "br0");
    }
    let locked = PortSettings {
        locked: true,
        ..Default::default()
    };
    r.sw.set_port(lp, locked.clone()).unwrap();
    let host = mac(0x31);
    let f = frame(mac(0x41), host, &[], 80);
    nothing(&r.send(&[(lp, f.clone())]));
    assert_eq!(r.drops(lp, DropReason::PortLocked), 1);
    assert!(
        r.sw.fdb_entries(&FdbFilter::default()).unwrap().is_empty(),
        "no learning"
    );

    // MAB: the unknown source becomes a locked entry; frames to it are flooded, not sent.
    r.sw.set_port(
        lp,
        PortSettings {
            mab: true,
            ..locked.clone()
        },
    )
    .unwrap();
    nothing(&r.send(&[(lp, f.clone())]));
    let e = r.sw.fdb_entries(&FdbFilter::default()).unwrap();
    assert_eq!(e.len(), 1);
    assert!(
        e[0].locked && !e[0].added_by_user && e[0].ifname == "lp",
        "{e:?}"
    );
    let to_host = frame(host, mac(0x41), &[], 80);
    let out = r.send(&[(a, to_host.clone())]);
    assert_eq!(
        out[b.0 as usize],
        vec![to_host.clone()],
        "flooded: the locked entry is unused"
    );
    assert_eq!(out[lp.0 as usize], vec![to_host.clone()]);

    // The authoriser's static entry replaces it: the host's frames pass, frames to it are
    // sent to it alone.
    r.sw.fdb_add(host, lp, Some(1), FdbKind::Static, false, true)
        .unwrap();
    // (mac 0x41 was learned on `a` from the frame above.)
    assert_eq!(only(&r.send(&[(lp, f.clone())]), a), vec![f.clone()]);
    assert_eq!(
        only(&r.send(&[(a, to_host.clone())]), lp),
        vec![to_host.clone()]
    );
    // An entry on another port does not admit the source on the locked one.
    let other = mac(0x32);
    r.send(&[(a, frame(mac(0x41), other, &[], 80))]);
    nothing(&r.send(&[(lp, frame(mac(0x41), other, &[], 80))]));
    assert_eq!(r.drops(lp, DropReason::PortLocked), 3);

    // Refusals, as Linux: mab without locked, mab without learning.
    let e =
        r.sw.set_port(
            lp,
            PortSettings {
                mab: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "mab needs a locked port (locked on), as in Linux"
    );
    let e =
        r.sw.set_port(
            lp,
            PortSettings {
                mab: true,
                learning: false,
                ..locked
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "mab needs learning on (it learns locked entries), as in Linux"
    );
}

/// 1:1 VLAN translation (`docs/semantics.md` §K): VID 10 on `cust`'s wire is VLAN 100 inside;
/// frames leave the trunk tagged 100 and come back to `cust` tagged 10; an untranslated VID
/// on `cust` is its own VLAN.
#[test]
fn vlan_translation_both_ways() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let cust = r.device("cust");
    let trunk = r.device("trunk");
    r.enslave(cust, "br0");
    r.enslave(trunk, "br0");
    for p in [cust, trunk] {
        r.sw.vlan_add(p, 100, 100, false, false).unwrap();
    }
    r.sw.vlan_map_add(cust, 10, 100).unwrap();
    let f = frame(mac(0x50), mac(1), &[(0x8100, 0x6000 | 10)], 80);
    assert_eq!(
        only(&r.send(&[(cust, f.clone())]), trunk),
        vec![retag(&f, 1, &[(0x8100, 0x6000 | 100)])],
        "VID 10 in, VLAN 100 out, PCP kept"
    );
    let back = frame(mac(1), mac(0x50), &[(0x8100, 100)], 80);
    assert_eq!(
        only(&r.send(&[(trunk, back.clone())]), cust),
        vec![retag(&back, 1, &[(0x8100, 10)])]
    );
    // VID 100 itself on cust's wire: VLAN 100 leaves cust as 10, so it is not taken
    // untranslated from it (dropped, named).
    let raw = frame(mac(0x50), mac(2), &[(0x8100, 100)], 80);
    nothing(&r.send(&[(cust, raw)]));
    assert_eq!(r.drops(cust, DropReason::TranslatedVid), 1);
    assert_eq!(r.sw.vlan_maps(cust), [(10, 100)]);
    r.sw.vlan_map_del(cust, 10).unwrap();
    let f = frame(mac(0x50), mac(3), &[(0x8100, 10)], 80);
    nothing(&r.send(&[(cust, f)]));
    assert_eq!(r.drops(cust, DropReason::VlanNotMember), 1);
}

/// A learning limit per (port, VLAN) (`docs/semantics.md` §L): the first sources are learned
/// and forwarded, a new one beyond the limit is dropped under its violation's name; known
/// sources and other VLANs go on.
#[test]
fn per_vlan_learning_limit() {
    use qbridge_bridge::Violation;
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p = r.device("p");
    let q = r.device("q");
    r.enslave(p, "br0");
    r.enslave(q, "br0");
    for x in [p, q] {
        r.sw.vlan_add(x, 10, 10, false, false).unwrap();
    }
    r.sw.set_vlan_limit(p, 10, 10, 2, Violation::Restrict)
        .unwrap();
    assert_eq!(r.sw.port_vlan_limit(p, 10), Some((2, Violation::Restrict)));
    let bc = qbridge_wire::MacAddr([0xff; 6]);
    let from = |n: u8, vid: u16| frame(bc, mac(n), &[(0x8100, vid)], 70);
    for n in [1, 2] {
        assert_eq!(only(&r.send(&[(p, from(n, 10))]), q).len(), 1);
    }
    nothing(&r.send(&[(p, from(3, 10))]));
    assert_eq!(r.drops(p, DropReason::MacLimitRestrict), 1);
    // Known sources pass; VLAN 1 (untagged, no limit) takes new sources.
    assert_eq!(only(&r.send(&[(p, from(1, 10))]), q).len(), 1);
    let untagged = frame(bc, mac(3), &[], 70);
    assert_eq!(only(&r.send(&[(p, untagged)]), q).len(), 1);
    // Ageing frees room: the limit counts learned entries, not sources ever seen.
    r.sw.age(400_000_000_000);
    assert_eq!(only(&r.send(&[(p, from(3, 10))]), q).len(), 1);
    // `0` removes the limit; a VLAN the port does not carry is refused.
    r.sw.set_vlan_limit(p, 10, 10, 0, Violation::Protect)
        .unwrap();
    assert_eq!(r.sw.port_vlan_limit(p, 10), None);
    assert!(r
        .sw
        .set_vlan_limit(p, 20, 20, 1, Violation::Protect)
        .is_err());
}

/// Selective Q-in-Q (`docs/semantics.md` §K): on an 802.1ad bridge, a customer port maps
/// C-VLANs 10-11 into S-VLAN 100 and C-VLAN 20 into S-VLAN 200; other C-VLANs follow the
/// port's PVID. C-tags are kept; frames come back with exactly the S-tag removed.
#[test]
fn selective_qinq_maps_c_vlans_into_s_vlans() {
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad);
    let cust = r.device("cust");
    let trunk = r.device("trunk");
    r.enslave(cust, "pe");
    r.enslave(trunk, "pe");
    for (p, v) in [
        (cust, 100),
        (cust, 200),
        (trunk, 100),
        (trunk, 200),
        (trunk, 300),
    ] {
        r.sw.vlan_add(p, v, v, false, false).unwrap();
    }
    r.sw.vlan_add(cust, 300, 300, true, true).unwrap(); // PVID for the rest
    r.sw.cvid_map_add(cust, 10, 11, 100).unwrap();
    r.sw.cvid_map_add(cust, 20, 20, 200).unwrap();
    let e =
        r.sw.cvid_map_add(cust, 11, 12, 300)
            .unwrap_err()
            .to_string();
    assert_eq!(e, "cvid 11 on cust is mapped to svid 100 already");
    assert_eq!(r.sw.cvid_maps(cust), [(10, 11, 100), (20, 20, 200)]);

    let dst = mac(0x60);
    for (c, s) in [(10, 100), (11, 100), (20, 200), (30, 300)] {
        let f = frame(dst, mac(1), &[(0x8100, c)], 80);
        assert_eq!(
            only(&r.send(&[(cust, f.clone())]), trunk),
            vec![retag(&f, 0, &[(0x88a8, s)])],
            "C-VLAN {c} into S-VLAN {s}"
        );
    }
    // Back: S-tag removed when the C-VID is mapped to that S-VLAN, kept otherwise.
    let back = frame(mac(1), dst, &[(0x88a8, 100), (0x8100, 11)], 90);
    assert_eq!(
        only(&r.send(&[(trunk, back.clone())]), cust),
        vec![retag(&back, 1, &[])]
    );
    let odd = frame(mac(1), dst, &[(0x88a8, 100), (0x8100, 20)], 90);
    assert_eq!(
        only(&r.send(&[(trunk, odd.clone())]), cust),
        vec![odd],
        "C-VLAN 20 belongs to S-VLAN 200: S-tag 100 stays"
    );
    r.sw.cvid_map_del(cust, 10, 11).unwrap();
    assert!(r.sw.cvid_map_del(cust, 10, 10).is_err());
}

/// 2:1 and 2:2 maps (`docs/semantics.md` §K, rule K3) on the provider-facing port of an
/// 802.1ad bridge: the exact frames each way, unmatched pairs left alone, and every
/// contradictory map refused naming the one in the way.
#[test]
fn two_tag_maps_both_ways() {
    use qbridge_bridge::TagMap;
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad);
    let nni = r.device("nni");
    let lan = r.device("lan");
    r.enslave(nni, "pe");
    r.enslave(lan, "pe");
    for p in [nni, lan] {
        for v in [100, 200, 500] {
            r.sw.vlan_add(p, v, v, false, false).unwrap();
        }
    }
    let map = |svid, cvid, vid, inner| TagMap {
        svid,
        cvid,
        vid,
        inner,
    };
    r.sw.tag_map_add(nni, map(100, 10, 500, None)).unwrap();
    r.sw.tag_map_add(nni, map(100, 11, 200, Some(21))).unwrap();
    assert_eq!(
        r.sw.tag_maps(nni),
        [map(100, 10, 500, None), map(100, 11, 200, Some(21))]
    );
    // Two tags of slack for the frames that leave with two.
    assert_eq!(r.sw.port_max_frame(nni), 14 + 1500 + 8);

    let dst = mac(0x60);
    // 2:1: S 100 + C 10 is VLAN 500 with one tag, PCP and DEI of the S-tag kept.
    let f = frame(
        dst,
        mac(1),
        &[(0x88a8, 0xa000 | 100), (0x8100, 0x2000 | 10)],
        90,
    );
    assert_eq!(
        only(&r.send(&[(nni, f.clone())]), lan),
        vec![retag(&f, 2, &[(0x88a8, 0xa000 | 500)])]
    );
    // … and back: S-tag 100 and a C-tag 10 with the S-tag's PCP.
    let back = frame(mac(1), dst, &[(0x88a8, 0x6000 | 500)], 90);
    assert_eq!(
        only(&r.send(&[(lan, back.clone())]), nni),
        vec![retag(
            &back,
            1,
            &[(0x88a8, 0x6000 | 100), (0x8100, 0x6000 | 10)]
        )]
    );
    // 2:2: S 100 + C 11 is S-VLAN 200 with C-tag 21 (the C-tag's own PCP kept), both ways.
    let f = frame(dst, mac(2), &[(0x88a8, 100), (0x8100, 0xe000 | 11)], 90);
    assert_eq!(
        only(&r.send(&[(nni, f.clone())]), lan),
        vec![retag(&f, 2, &[(0x88a8, 200), (0x8100, 0xe000 | 21)])]
    );
    let back = frame(mac(2), dst, &[(0x88a8, 200), (0x8100, 0x2000 | 21)], 90);
    assert_eq!(
        only(&r.send(&[(lan, back.clone())]), nni),
        vec![retag(&back, 2, &[(0x88a8, 100), (0x8100, 0x2000 | 11)])]
    );
    // Unmatched pairs follow the port's normal rules.
    let other = frame(mac(3), dst, &[(0x88a8, 200), (0x8100, 22)], 90);
    assert_eq!(only(&r.send(&[(lan, other.clone())]), nni), vec![other]);
    let other = frame(dst, mac(3), &[(0x88a8, 100), (0x8100, 12)], 90);
    assert_eq!(only(&r.send(&[(nni, other.clone())]), lan), vec![other]);
    // What the maps send translated is not taken untranslated: VLAN 500 and S 200 + C 21.
    for tags in [
        &[(0x88a8, 500)][..],
        &[(0x88a8, 500), (0x8100, 7)],
        &[(0x88a8, 200), (0x8100, 21)],
    ] {
        nothing(&r.send(&[(nni, frame(dst, mac(4), tags, 90))]));
    }
    assert_eq!(r.drops(nni, DropReason::TranslatedVid), 3);
    // S 200 with another C-tag is not a map's: S-VLAN 200 as usual.
    let other = frame(dst, mac(4), &[(0x88a8, 200), (0x8100, 22)], 90);
    assert_eq!(only(&r.send(&[(nni, other.clone())]), lan), vec![other]);

    // Contradictions, each named.
    let err = |r: &mut Rig, m| r.sw.tag_map_add(nni, m).unwrap_err().to_string();
    assert_eq!(
        err(&mut r, map(100, 10, 200, None)),
        "svid 100 cvid 10 on nni is mapped already (svid 100 cvid 10 (translate 500))"
    );
    assert_eq!(
        err(&mut r, map(101, 10, 500, None)),
        "500 on nni is already the translation of svid 100 cvid 10 (translate 500)"
    );
    assert_eq!(
        err(&mut r, map(101, 10, 200, Some(21))),
        "svid 200 cvid 21 on nni is already the translation of svid 100 cvid 11 (translate 200 21)"
    );
    assert_eq!(
        r.sw.vlan_map_add(nni, 7, 500).unwrap_err().to_string(),
        "500 on nni is already the translation of svid 100 cvid 10 (translate 500)"
    );
    assert_eq!(
        r.sw.cvid_map_add(nni, 20, 21, 200).unwrap_err().to_string(),
        "svid 200 cvid 21 on nni is already the translation of svid 100 cvid 11 (translate 200 21)"
    );
    r.sw.vlan_map_add(nni, 7, 100).unwrap();
    assert_eq!(
        err(&mut r, map(101, 10, 100, None)),
        "100 on nni is already the translation of vid 7"
    );
    r.sw.tag_map_del(nni, 100, 10).unwrap();
    assert_eq!(
        r.sw.tag_map_del(nni, 100, 10).unwrap_err().to_string(),
        "no vlan map of svid 100 cvid 10 on nni"
    );
    r.sw.tag_map_del(nni, 100, 11).unwrap();
    assert!(r.sw.tag_maps(nni).is_empty());
    assert_eq!(
        r.sw.port_max_frame(nni),
        14 + 1500 + 8,
        "tagged members of an 802.1ad bridge"
    );
}

/// `learn_inner_vid` (§K7): on an 802.1ad bridge, one MAC behind two ports in two C-VLANs of
/// one S-VLAN is two entries, and each C-VLAN's frames reach their own port; an entry a user
/// added in the S-VLAN serves every C-VLAN; turning the rule off removes what it learned.
#[test]
fn learning_per_inner_vid() {
    use qbridge_bridge::{FdbFilter, FdbKind};
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad);
    let b = r.sw.bridge_id("pe").unwrap();
    let mut s = r.sw.bridge_settings(b).clone();
    s.learn_inner_vid = true;
    r.sw.set_bridge(b, s.clone()).unwrap();
    let (t, x, y) = (r.device("t"), r.device("x"), r.device("y"));
    for p in [t, x, y] {
        r.enslave(p, "pe");
        r.sw.vlan_add(p, 100, 100, false, false).unwrap();
    }
    let m = mac(0x77);
    let bc = qbridge_wire::MacAddr([0xff; 6]);
    // The same source behind x in C-VLAN 10 and behind y in C-VLAN 20.
    r.send(&[(x, frame(bc, m, &[(0x88a8, 100), (0x8100, 10)], 80))]);
    r.send(&[(y, frame(bc, m, &[(0x88a8, 100), (0x8100, 20)], 80))]);
    let rows: Vec<_> =
        r.sw.fdb_entries(&FdbFilter::default())
            .unwrap()
            .into_iter()
            .map(|e| (e.ifname, e.vlan, e.inner_vlan))
            .collect();
    assert_eq!(
        rows,
        [
            ("x".to_string(), Some(100), Some(10)),
            ("y".to_string(), Some(100), Some(20)),
        ]
    );
    for (c, to) in [(10, x), (20, y)] {
        let f = frame(m, mac(1), &[(0x88a8, 100), (0x8100, c)], 80);
        assert_eq!(only(&r.send(&[(t, f.clone())]), to), vec![f], "C-VLAN {c}");
    }
    // A user's entry in S-VLAN 100 itself serves every C-VLAN without an entry of its own.
    let u = mac(0x55);
    r.sw.fdb_add(u, y, Some(100), FdbKind::Static, false, false)
        .unwrap();
    let f = frame(u, mac(2), &[(0x88a8, 100), (0x8100, 30)], 80);
    assert_eq!(only(&r.send(&[(t, f.clone())]), y), vec![f]);
    // A user's entry for one pair wins over the VLAN's for that pair only.
    r.sw.fdb_add_inner(u, x, 100, 40, FdbKind::Static, false, false)
        .unwrap();
    let f = frame(u, mac(2), &[(0x88a8, 100), (0x8100, 40)], 80);
    assert_eq!(only(&r.send(&[(t, f.clone())]), x), vec![f]);
    let f = frame(u, mac(2), &[(0x88a8, 100), (0x8100, 41)], 80);
    assert_eq!(only(&r.send(&[(t, f.clone())]), y), vec![f]);
    assert_eq!(
        r.sw.fdb_add_inner(u, x, 100, 40, FdbKind::Static, false, false)
            .unwrap_err()
            .to_string(),
        format!("FDB entry {u} vlan 100 inner_vlan 40 exists on device \"x\"")
    );
    r.sw.fdb_del_inner(u, x, 100, 40).unwrap();
    assert!(r.sw.fdb_del_inner(u, x, 100, 40).is_err());
    // Per-VLAN counts and flushes see the entries in their S-VLAN.
    assert_eq!(
        r.sw.fdb_flush("x", Some(100), Default::default()).unwrap(),
        1
    );
    // Off: the entries learned per inner VID go; the user's stays.
    s.learn_inner_vid = false;
    r.sw.set_bridge(b, s).unwrap();
    let rows: Vec<_> =
        r.sw.fdb_entries(&FdbFilter::default())
            .unwrap()
            .into_iter()
            .map(|e| (e.mac, e.inner_vlan))
            .collect();
    assert_eq!(rows, [(u, None)]);
    assert_eq!(
        r.sw.fdb_add_inner(u, x, 100, 40, FdbKind::Static, false, false)
            .unwrap_err()
            .to_string(),
        "inner_vlan needs learn_inner_vid on (and vlan_filtering 1) on bridge \"pe\""
    );
    // Now one FID per S-VLAN: the source moves between ports as on any bridge.
    r.send(&[(x, frame(bc, m, &[(0x88a8, 100), (0x8100, 10)], 80))]);
    r.send(&[(y, frame(bc, m, &[(0x88a8, 100), (0x8100, 20)], 80))]);
    let f = frame(m, mac(1), &[(0x88a8, 100), (0x8100, 10)], 80);
    assert_eq!(only(&r.send(&[(t, f.clone())]), y), vec![f]);
}

/// Turning `mab` off removes the port's `locked` entries (Linux `br_setport` flushes them with
/// `BR_FDB_LOCKED`; selftest `bridge_locked_port.sh`, `locked_port_mab_flush`); other entries
/// of the port and locked entries of other ports stay.
#[test]
fn mab_off_flushes_locked_entries() {
    use qbridge_bridge::{FdbFilter, FdbKind, PortSettings};
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let lp = r.device("lp");
    let lp2 = r.device("lp2");
    let a = r.device("a");
    for p in [lp, lp2, a] {
        r.enslave(p, "br0");
    }
    let mab = PortSettings {
        locked: true,
        mab: true,
        ..Default::default()
    };
    r.sw.set_port(lp, mab.clone()).unwrap();
    r.sw.set_port(lp2, mab.clone()).unwrap();
    r.send(&[(lp, frame(mac(0x41), mac(0x31), &[], 80))]);
    r.send(&[(lp, frame(mac(0x41), mac(0x32), &[], 80))]);
    r.send(&[(lp2, frame(mac(0x41), mac(0x33), &[], 80))]);
    r.sw.fdb_add(mac(0x34), lp, Some(1), FdbKind::Static, false, false)
        .unwrap();
    let locked_on = |r: &Rig, dev: &str| {
        r.sw.fdb_entries(&FdbFilter::default())
            .unwrap()
            .iter()
            .filter(|e| e.locked && e.ifname == dev)
            .count()
    };
    assert_eq!((locked_on(&r, "lp"), locked_on(&r, "lp2")), (2, 1));
    // `mab off` (the port stays locked).
    r.sw.set_port(
        lp,
        PortSettings {
            mab: false,
            ..mab.clone()
        },
    )
    .unwrap();
    assert_eq!((locked_on(&r, "lp"), locked_on(&r, "lp2")), (0, 1));
    let left: Vec<_> =
        r.sw.fdb_entries(&FdbFilter {
            dev: Some("lp".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(left.len(), 1, "the static entry stays: {left:?}");
    assert_eq!(left[0].mac, mac(0x34));
    // Setting other options with `mab` still on keeps the locked entries.
    r.sw.set_port(
        lp2,
        PortSettings {
            hairpin: true,
            ..mab
        },
    )
    .unwrap();
    assert_eq!(locked_on(&r, "lp2"), 1);
}

/// `cvlans` applies on egress too (`docs/semantics.md` §G.3): a `dot1q-tunnel` port with
/// `cvlans 100,200` never sends a frame of another customer VLAN (nor an untagged one, 0 not
/// listed), flooded or known unicast; each refused copy counts `egress_cvlan_not_allowed` on
/// that port. A tunnel port without `cvlans` gets everything; with 0 listed, untagged frames.
#[test]
fn dot1q_tunnel_cvlans_apply_on_egress() {
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad);
    let c1 = r.device("c1");
    let c2 = r.device("c2");
    let c3 = r.device("c3");
    let trunk = r.device("trunk");
    for p in [c1, c2, c3, trunk] {
        r.enslave(p, "pe");
    }
    let tunnel = |cv: Option<&[(u16, u16)]>| mode(K::Dot1qTunnel, Some(4094), None, cv);
    r.sw.set_vlan_mode(c1, tunnel(Some(&[(100, 100), (200, 200)])))
        .unwrap();
    r.sw.set_vlan_mode(c2, tunnel(None)).unwrap();
    r.sw.set_vlan_mode(c3, tunnel(Some(&[(0, 0), (100, 100)])))
        .unwrap();
    r.sw.set_vlan_mode(trunk, mode(K::Trunk, None, Some(&[(4094, 4094)]), None))
        .unwrap();
    let bcast = qbridge_wire::MacAddr([0xff; 6]);

    // Flooded from the trunk: C-VLAN 300, untagged, C-VLAN 100.
    let c300 = frame(bcast, mac(9), &[(0x88a8, 4094), (0x8100, 300)], 90);
    let out = r.send(&[(trunk, c300.clone())]);
    assert!(out[c1.0 as usize].is_empty(), "C-VLAN 300 is not c1's");
    assert_eq!(out[c2.0 as usize], vec![retag(&c300, 1, &[])]);
    assert!(out[c3.0 as usize].is_empty());
    let untagged = frame(bcast, mac(9), &[(0x88a8, 4094)], 90);
    let out = r.send(&[(trunk, untagged.clone())]);
    assert!(
        out[c1.0 as usize].is_empty(),
        "untagged is not c1's (0 not listed)"
    );
    assert_eq!(out[c2.0 as usize], vec![retag(&untagged, 1, &[])]);
    assert_eq!(out[c3.0 as usize], vec![retag(&untagged, 1, &[])]);
    let c100 = frame(bcast, mac(9), &[(0x88a8, 4094), (0x8100, 100)], 90);
    let out = r.send(&[(trunk, c100.clone())]);
    for p in [c1, c2, c3] {
        assert_eq!(out[p.0 as usize], vec![retag(&c100, 1, &[])]);
    }
    assert_eq!(r.drops(c1, DropReason::EgressCvlanNotAllowed), 2);
    assert_eq!(r.drops(c3, DropReason::EgressCvlanNotAllowed), 1);

    // Known unicast to a host behind c1: C-VLAN 200 passes, C-VLAN 300 does not.
    let host = mac(0x41);
    r.send(&[(c1, frame(mac(9), host, &[(0x8100, 100)], 90))]);
    let to200 = frame(host, mac(9), &[(0x88a8, 4094), (0x8100, 200)], 90);
    let to300 = frame(host, mac(9), &[(0x88a8, 4094), (0x8100, 300)], 90);
    let out = r.send(&[
        (trunk, to200.clone()),
        (trunk, to300.clone()),
        (trunk, to200.clone()),
    ]);
    assert_eq!(
        only(&out, c1),
        vec![retag(&to200, 1, &[]), retag(&to200, 1, &[])]
    );
    assert_eq!(r.drops(c1, DropReason::EgressCvlanNotAllowed), 3);
    let c = r.sw.port_counters(c1);
    assert_eq!(c.tx_frames, 3, "C-VLAN 100 flood + two C-VLAN 200 frames");
}
