//! `Switch::trace`: the outputs it names are the pipeline's, nothing is learned or counted, and
//! each stage names the rule that decided.

mod common;

use common::*;
use qbridge_bridge::{DropReason, FdbKind, OutputKind, PortSettings, Verdict, VlanProtocol};

/// br0 (802.1Q, filtering): p1 trunk (VLANs 10, 20 tagged), p2 access VLAN 10 (PVID,
/// untagged), p3 access VLAN 20.
fn rig() -> (Rig, [qbridge_bridge::PortId; 3]) {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p = [r.device("p1"), r.device("p2"), r.device("p3")];
    for &x in &p {
        r.enslave(x, "br0");
        r.sw.vlan_del(x, 1, 1).unwrap();
    }
    r.sw.vlan_add(p[0], 10, 10, false, false).unwrap();
    r.sw.vlan_add(p[0], 20, 20, false, false).unwrap();
    r.sw.vlan_add(p[1], 10, 10, true, true).unwrap();
    r.sw.vlan_add(p[2], 20, 20, true, true).unwrap();
    (r, p)
}

fn stage<'a>(t: &'a qbridge_bridge::Trace, stage: &str) -> Vec<&'a str> {
    t.steps
        .iter()
        .filter(|s| s.stage == stage)
        .map(|s| s.text.as_str())
        .collect()
}

#[test]
fn an_unknown_unicast_is_flooded_with_each_ports_reason_and_nothing_is_learned() {
    let (mut r, p) = rig();
    let f = frame(mac(2), mac(1), &[(0x8100, 10)], 64);
    let t = r.sw.trace(p[0], &f).unwrap();
    assert_eq!(t.verdict, Verdict::Flooded);
    assert_eq!(t.vlan, Some(10));
    assert!(t.explained, "{:#?}", t.steps);
    // The only member of VLAN 10 besides p1 is p2, untagged.
    assert_eq!(t.outputs.len(), 1);
    assert_eq!(t.outputs[0].port, "p2");
    assert_eq!(t.outputs[0].kind, OutputKind::Flood);
    let untagged = retag(&f, 1, &[]);
    assert_eq!(
        t.outputs[0].frame.hex,
        qbridge_wire::summary::hex(&untagged)
    );
    let flood = stage(&t, "flood");
    assert_eq!(flood.len(), 1);
    assert!(
        flood[0].contains("- p1 (the ingress port, hairpin off)"),
        "{flood:?}"
    );
    assert!(flood[0].contains("+ p2"), "{flood:?}");
    assert!(
        flood[0].contains("- p3 (not a member of VLAN 10)"),
        "{flood:?}"
    );
    assert!(stage(&t, "learn")[0].starts_with("would learn 02:00:00:00:00:01 in VLAN 10 on p1"));
    assert!(stage(&t, "egress")[0].contains("tags 8100 vid 10 → untagged"));
    // Nothing learned, nothing counted.
    assert_eq!(r.sw.fdb_len(r.sw.bridge_id("br0").unwrap()).0, 0);
    assert_eq!(r.sw.port_counters(p[0]).rx_frames, 0);
    assert_eq!(r.sw.port_counters(p[1]).tx_frames, 0);
    // The same frame sent for real does what the trace said.
    let out = r.send(&[(p[0], f)]);
    assert_eq!(only(&out, p[1]), vec![untagged]);
}

#[test]
fn a_known_unicast_names_its_entry_and_the_egress_rewrite() {
    let (mut r, p) = rig();
    // p2's host is learned (frame from it), then traced to from the trunk.
    r.send(&[(p[1], frame(mac(9), mac(2), &[], 64))]);
    let f = frame(mac(2), mac(1), &[(0x8100, 0x600a)], 64);
    let t = r.sw.trace(p[0], &f).unwrap();
    assert_eq!(t.verdict, Verdict::Forwarded);
    assert_eq!(t.outputs.len(), 1);
    assert_eq!(t.outputs[0].kind, OutputKind::Forward);
    let lookup = stage(&t, "lookup");
    assert!(
        lookup[0].starts_with("02:00:00:00:00:02 in VLAN 10: hit, a learned entry on p2"),
        "{lookup:?}"
    );
    assert!(stage(&t, "vlan")[0].contains("tagged, VID 10, PCP 3"));
    assert!(stage(&t, "unicast")[0].starts_with("to p2"));
    // A static entry is named as such.
    r.sw.fdb_add(mac(2), p[1], Some(10), FdbKind::Static, false, true)
        .unwrap();
    let t = r.sw.trace(p[0], &f).unwrap();
    assert!(stage(&t, "lookup")[0].contains("a static entry on p2"));
}

#[test]
fn every_early_drop_is_named_with_its_rule() {
    let (mut r, p) = rig();
    let cases: Vec<(Vec<u8>, DropReason, &str, &str)> = vec![
        (
            frame(mac(2), mac(1), &[(0x8100, 30)], 64),
            DropReason::VlanNotMember,
            "filter",
            "is not a member of VLAN 30",
        ),
        (
            frame(mac(2), mac(1), &[(0x8100, 0x0fff)], 64),
            DropReason::ReservedVid,
            "vlan",
            "VID 4095 is reserved",
        ),
        (
            frame(mac(2), MacAddr([1, 0, 0, 0, 0, 1]), &[(0x8100, 10)], 64),
            DropReason::InvalidSrcMac,
            "source",
            "group or all-zero",
        ),
        (
            frame(MacAddr([1, 0x80, 0xc2, 0, 0, 2]), mac(1), &[], 64),
            DropReason::LinkLocal,
            "group",
            "link-local",
        ),
        (
            frame(mac(2), mac(1), &[], 64),
            DropReason::NoPvid,
            "vlan",
            "has no PVID",
        ),
        (
            frame(mac(2), mac(1), &[(0x8100, 10)], 1600),
            DropReason::Oversize,
            "size",
            "the largest frame p1 accepts",
        ),
    ];
    for (f, reason, st, words) in cases {
        let t = r.sw.trace(p[0], &f).unwrap();
        assert_eq!(t.verdict, Verdict::Dropped, "{reason:?}");
        assert!(t.explained, "{reason:?}: {:#?}", t.steps);
        assert_eq!(t.drops.len(), 1, "{reason:?}: {:?}", t.drops);
        assert_eq!(t.drops[0].reason, reason);
        assert_eq!(t.drops[0].port, "p1");
        assert!(!t.drops[0].description.is_empty());
        let texts = stage(&t, st);
        assert!(
            texts.iter().any(|s| s.contains(words)),
            "{reason:?}: {st} {texts:?}"
        );
        assert!(t.outputs.is_empty());
        // Dropped on the way in: no port's egress is spoken of.
        assert!(stage(&t, "egress").is_empty(), "{reason:?}: {:#?}", t.steps);
    }
    // A port taken down.
    let s = PortSettings {
        up: false,
        ..r.sw.port_settings(p[0]).clone()
    };
    r.sw.set_port(p[0], s).unwrap();
    let t =
        r.sw.trace(p[0], &frame(mac(2), mac(1), &[(0x8100, 10)], 64))
            .unwrap();
    assert_eq!(t.drops[0].reason, DropReason::PortDown);
    assert!(stage(&t, "port")[0].contains("admin down"));
}

#[test]
fn unicast_checks_isolation_and_same_port() {
    let (mut r, p) = rig();
    r.send(&[(p[1], frame(mac(9), mac(2), &[], 64))]);
    // From p2 to its own address: same_port.
    let t = r.sw.trace(p[1], &frame(mac(2), mac(3), &[], 64)).unwrap();
    assert_eq!(t.drops[0].reason, DropReason::SamePort);
    assert!(stage(&t, "unicast")[0].contains("hairpin is off"));
    assert!(t.explained);
    // Both isolated.
    for x in [p[0], p[1]] {
        let mut s = r.sw.port_settings(x).clone();
        s.isolated = true;
        r.sw.set_port(x, s).unwrap();
    }
    let t =
        r.sw.trace(p[0], &frame(mac(2), mac(1), &[(0x8100, 10)], 64))
            .unwrap();
    assert_eq!(t.drops[0].reason, DropReason::Isolated);
    assert!(t.explained, "{:#?}", t.steps);
}

use qbridge_wire::MacAddr;
