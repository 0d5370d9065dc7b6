//! Port mirroring (`docs/semantics.md` §M): every copy exactly as it passed its source port,
//! where it goes, in which order, and what is counted.

mod common;

use common::{frame, mac, only, retag, Rig};
use qbridge_bridge::{
    DropReason, MirrorDirection as D, MirrorDst, MirrorSpec, PortId, PortSettings, VidList,
    VlanProtocol,
};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::Tpid;

const Q: Tpid = Tpid(0x8100);

fn spec(name: &str, src: &[&str], direction: D, dst: &str) -> MirrorSpec {
    MirrorSpec {
        name: name.to_string(),
        src: src.iter().map(|s| s.to_string()).collect(),
        direction,
        vids: None,
        dst: MirrorDst::Port(dst.to_string()),
        rspan: None,
    }
}

/// br0 (802.1Q): p1 access VLAN 10, p2 trunk with VLANs 10 and 20 (PVID 1 untagged kept),
/// p3 an analyser port in no bridge.
fn rig() -> (Rig, PortId, PortId, PortId) {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p1 = r.device("p1");
    let p2 = r.device("p2");
    let p3 = r.device("p3");
    r.enslave(p1, "br0");
    r.enslave(p2, "br0");
    r.sw.vlan_del(p1, 1, 1).unwrap();
    r.sw.vlan_add(p1, 10, 10, true, true).unwrap();
    r.sw.vlan_add(p2, 10, 10, false, false).unwrap();
    r.sw.vlan_add(p2, 20, 20, false, false).unwrap();
    (r, p1, p2, p3)
}

fn mirrored(r: &Rig, name: &str) -> (u64, u64) {
    let c = r.sw.mirror_counters(name).unwrap();
    (c.frames, c.bytes)
}

#[test]
fn rx_copies_are_the_frames_as_received() {
    let (mut r, p1, p2, p3) = rig();
    r.sw.mirror_add(&spec("m", &["p1"], D::Rx, "p3")).unwrap();
    let f = frame(mac(2), mac(1), &[], 100);
    let out = r.send(&[(p1, f.clone())]);
    // Flooded to the trunk tagged; the copy is the untagged frame p1 received.
    assert_eq!(out[p2.0 as usize], vec![retag(&f, 0, &[(0x8100, 10)])]);
    assert_eq!(out[p3.0 as usize], vec![f.clone()]);
    assert_eq!(mirrored(&r, "m"), (1, 100));
    // Counted as sent on the destination port, not in any VLAN.
    let c = r.sw.port_counters(p3);
    assert_eq!((c.rx_frames, c.tx_frames, c.tx_bytes), (0, 1, 100));
    // What p1 sends is not an rx copy.
    let back = frame(mac(1), mac(2), &[(0x8100, 10)], 90);
    let out = r.send(&[(p2, back.clone())]);
    assert_eq!(only(&out, p1), vec![retag(&back, 1, &[])]);
    assert_eq!(mirrored(&r, "m"), (1, 100));
}

#[test]
fn tx_copies_are_the_frames_as_sent() {
    let (mut r, p1, p2, p3) = rig();
    r.sw.mirror_add(&spec("m", &["p1"], D::Tx, "p3")).unwrap();
    let f = frame(mac(1), mac(2), &[(0x8100, 10)], 90);
    let out = r.send(&[(p2, f.clone())]);
    // p1 sends it untagged (its VLAN 10 is egress-untagged): so is the copy.
    let sent = retag(&f, 1, &[]);
    assert_eq!(out[p1.0 as usize], vec![sent.clone()]);
    assert_eq!(out[p3.0 as usize], vec![sent]);
    // Received on p1: not a tx copy.
    let out = r.send(&[(p1, frame(mac(2), mac(1), &[], 80))]);
    assert!(out[p3.0 as usize].is_empty());
    assert_eq!(mirrored(&r, "m"), (1, 86));
}

#[test]
fn both_directions_in_frame_order_rx_first() {
    let (mut r, p1, p2, p3) = rig();
    r.sw.mirror_add(&spec("m", &["p1", "p2"], D::Both, "p3"))
        .unwrap();
    let a = frame(mac(2), mac(1), &[], 70);
    let b = frame(mac(1), mac(2), &[(0x8100, 10)], 80);
    let out = r.send(&[(p1, a.clone()), (p2, b.clone())]);
    let a_out = retag(&a, 0, &[(0x8100, 10)]);
    let b_out = retag(&b, 1, &[]);
    assert_eq!(out[p2.0 as usize], vec![a_out.clone()]);
    assert_eq!(out[p1.0 as usize], vec![b_out.clone()]);
    // rx copies of the batch in frame order, then tx copies by source port id (p1, then p2).
    assert_eq!(out[p3.0 as usize], vec![a, b, b_out, a_out]);
    assert_eq!(mirrored(&r, "m").0, 4);
}

#[test]
fn vid_list_reads_the_outer_tag_or_the_pvid() {
    let (mut r, _p1, p2, p3) = rig();
    let mut s = spec("m", &["p2"], D::Rx, "p3");
    s.vids = Some(VidList::new(vec![(10, 10), (1, 1)]));
    r.sw.mirror_add(&s).unwrap();
    let t10 = frame(mac(9), mac(2), &[(0x8100, 10)], 80);
    let t20 = frame(mac(9), mac(2), &[(0x8100, 20)], 80);
    let untagged = frame(mac(9), mac(2), &[], 80);
    let prio = frame(mac(9), mac(2), &[(0x8100, 0x2000)], 80);
    let other_tpid = frame(mac(9), mac(2), &[(0x88a8, 20)], 80);
    let out = r.send(&[
        (p2, t10.clone()),
        (p2, t20),
        (p2, untagged.clone()),
        (p2, prio.clone()),
        (p2, other_tpid.clone()),
    ]);
    // VLAN 10 by its tag; untagged, priority-tagged and 0x88a8 frames by p2's PVID 1.
    assert_eq!(out[p3.0 as usize], vec![t10, untagged, prio, other_tpid]);
    // A port without a PVID: untagged frames match no list.
    r.sw.vlan_del(p2, 1, 1).unwrap();
    let out = r.send(&[(p2, frame(mac(9), mac(2), &[], 80))]);
    assert!(out[p3.0 as usize].is_empty());
}

#[test]
fn rspan_pushes_the_destination_ports_tag() {
    let mut r = Rig::new();
    r.bridge("pb", VlanProtocol::Dot1Ad);
    let c = r.device("c");
    let t = r.device("t");
    let a = r.device("a");
    r.enslave(c, "pb");
    r.enslave(t, "pb");
    r.enslave(a, "pb");
    r.sw.vlan_add(c, 100, 100, true, true).unwrap();
    r.sw.vlan_add(t, 100, 100, false, false).unwrap();
    // The analyser trunk carries the RSPAN VLAN 999 next to its own.
    r.sw.vlan_add(a, 999, 999, false, false).unwrap();
    let mut s = spec("m", &["c"], D::Rx, "a");
    s.rspan = Some(999);
    r.sw.mirror_add(&s).unwrap();
    let f = frame(mac(2), mac(1), &[(0x8100, 10)], 100);
    let out = r.send(&[(c, f.clone())]);
    assert_eq!(out[t.0 as usize], vec![retag(&f, 0, &[(0x88a8, 100)])]);
    // a's copy (a is not in VLAN 100, so gets no flood copy): the customer frame with its
    // C-tag, under the RSPAN S-tag, PCP 0.
    assert_eq!(out[a.0 as usize], vec![retag(&f, 0, &[(0x88a8, 999)])]);
    assert_eq!(mirrored(&r, "m"), (1, 104));
    // The destination port's own TPID, when it has one.
    let mut st = r.sw.port_settings(a).clone();
    st.tpid = Some(Tpid(0x9100));
    r.sw.set_port(a, st).unwrap();
    let out = r.send(&[(c, f.clone())]);
    assert_eq!(out[a.0 as usize], vec![retag(&f, 0, &[(0x9100, 999)])]);
}

#[test]
fn source_with_a_stacked_vlan_device_is_mirrored_on_its_wire() {
    let mut r = Rig::new();
    let eth0 = r.device("eth0");
    let dev =
        r.sw.add_vlan_device("eth0.100", eth0, Q, 100, mac(0x10))
            .unwrap();
    let cap = r.device("cap");
    r.sw.mirror_add(&spec("m", &["eth0"], D::Both, "cap"))
        .unwrap();
    // Received on eth0 with tag 100: popped to eth0.100; the copy keeps the tag.
    let f = frame(mac(0x10), mac(1), &[(0x8100, 100)], 80);
    let out = r.send(&[(eth0, f.clone())]);
    assert_eq!(out[dev.0 as usize], vec![retag(&f, 1, &[])]);
    assert_eq!(out[cap.0 as usize], vec![f]);
    // Sent by the host on eth0.100: leaves eth0 tagged, and so does the copy.
    let h = frame(mac(1), mac(0x10), &[], 80);
    let out = r.send(&[(dev, h.clone())]);
    let wire = retag(&h, 0, &[(0x8100, 100)]);
    assert_eq!(out[eth0.0 as usize], vec![wire.clone()]);
    assert_eq!(out[cap.0 as usize], vec![wire]);
    // The device itself cannot be a source or a destination.
    let e =
        r.sw.mirror_add(&spec("n", &["eth0.100"], D::Both, "cap"))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "mirror \"n\": \"eth0.100\" is a vlan device: only ports with a wire of their own \
         (afpacket, afxdp, tap, patch, pcap) can be mirrored or be a mirror's destination"
    );
}

#[test]
fn every_flooded_copy_is_a_tx_copy() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let ports: Vec<PortId> = (1..=4).map(|i| r.device(&format!("p{i}"))).collect();
    for &p in &ports[..3] {
        r.enslave(p, "br0");
    }
    let cap = ports[3];
    r.sw.mirror_add(&spec("m", &["p2", "p3"], D::Tx, "p4"))
        .unwrap();
    let f = frame(qbridge_wire::MacAddr::BROADCAST, mac(1), &[], 64);
    let out = r.send(&[(ports[0], f.clone())]);
    assert_eq!(out[cap.0 as usize], vec![f.clone(), f]);
}

#[test]
fn frames_the_bridge_drops_are_mirrored_runts_are_counted() {
    let (mut r, p1, _p2, p3) = rig();
    r.sw.mirror_add(&spec("m", &["p1"], D::Rx, "p3")).unwrap();
    // VLAN 20 is not p1's: dropped by the bridge, mirrored all the same.
    let f = frame(mac(2), mac(1), &[(0x8100, 20)], 80);
    let out = r.send(&[(p1, f.clone()), (p1, vec![1, 2, 3])]);
    assert_eq!(only(&out, p3), vec![f]);
    assert_eq!(r.drops(p1, DropReason::VlanNotMember), 1);
    let c = r.sw.mirror_counters("m").unwrap();
    assert_eq!((c.frames, c.dropped(DropReason::Runt)), (1, 1));
    // A source that is down receives nothing, so nothing is mirrored.
    let mut s = r.sw.port_settings(p1).clone();
    s.up = false;
    r.sw.set_port(p1, s).unwrap();
    let out = r.send(&[(p1, frame(mac(2), mac(1), &[], 80))]);
    assert!(out[p3.0 as usize].is_empty());
}

#[test]
fn copies_too_long_or_to_a_down_port_are_counted() {
    let (mut r, p1, _p2, p3) = rig();
    let mut s = spec("m", &["p1"], D::Rx, "p3");
    s.rspan = Some(5);
    r.sw.mirror_add(&s).unwrap();
    // p3 takes 1518 bytes: a 1514-byte frame fits only without the RSPAN tag.
    let ok = frame(mac(2), mac(1), &[], 1510);
    let big = frame(mac(2), mac(1), &[], 1515);
    let out = r.send(&[(p1, ok.clone()), (p1, big)]);
    assert_eq!(out[p3.0 as usize], vec![retag(&ok, 0, &[(0x8100, 5)])]);
    let c = r.sw.mirror_counters("m").unwrap();
    assert_eq!((c.frames, c.dropped(DropReason::Oversize)), (1, 1));
    // Nothing was counted on the port itself.
    assert_eq!(r.sw.port_counters(p3).total_drops(), 0);
    let mut st = PortSettings {
        up: false,
        ..PortSettings::default()
    };
    r.sw.set_port(p3, st.clone()).unwrap();
    let out = r.send(&[(p1, ok.clone())]);
    assert!(out[p3.0 as usize].is_empty());
    let c = r.sw.mirror_counters("m").unwrap();
    assert_eq!(c.dropped(DropReason::PortDown), 1);
    st.up = true;
    r.sw.set_port(p3, st).unwrap();
    let out = r.send(&[(p1, ok)]);
    assert_eq!(out[p3.0 as usize].len(), 1);
}

#[test]
fn copies_are_never_mirrored_again() {
    // Two sessions watching each other's destinations: each frame is copied once per
    // observation point, and the copies themselves are never copied.
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q);
    let p1 = r.device("p1");
    let p2 = r.device("p2");
    let p3 = r.device("p3");
    r.enslave(p1, "br0");
    r.enslave(p2, "br0");
    r.sw.mirror_add(&spec("a", &["p1"], D::Both, "p3")).unwrap();
    r.sw.mirror_add(&spec("b", &["p3"], D::Both, "p1")).unwrap();
    let f = frame(mac(2), mac(1), &[], 64);
    let out = r.send(&[(p1, f.clone())]);
    assert_eq!(out[p2.0 as usize], vec![f.clone()]);
    assert_eq!(out[p3.0 as usize], vec![f.clone()]);
    assert!(out[p1.0 as usize].is_empty());
    assert_eq!(mirrored(&r, "a").0, 1);
    assert_eq!(mirrored(&r, "b").0, 0);
    // A frame received on p3 (in no bridge: dropped) is mirrored to p1 by b, once.
    let out = r.send(&[(p3, f.clone())]);
    assert_eq!(only(&out, p1), vec![f]);
    assert_eq!(mirrored(&r, "a").0, 1);
    assert_eq!(mirrored(&r, "b").0, 1);
}

#[test]
fn deleting_ports_shrinks_or_deletes_sessions() {
    let (mut r, _p1, _p2, _p3) = rig();
    r.device("p4");
    r.sw.mirror_add(&spec("two", &["p1", "p2"], D::Both, "p3"))
        .unwrap();
    r.sw.mirror_add(&spec("one", &["p2"], D::Rx, "p4")).unwrap();
    r.sw.mirror_add(&spec("to4", &["p1"], D::Rx, "p4")).unwrap();
    r.sw.del_link("p2").unwrap();
    let names: Vec<String> = r.sw.mirrors(false).into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["two", "to4"]);
    assert_eq!(r.sw.mirror_spec("two").unwrap().src, ["p1"]);
    r.sw.del_link("p4").unwrap();
    let names: Vec<String> = r.sw.mirrors(false).into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["two"]);
    // A new port that takes p2's id is not a source.
    let p5 = r.device("p5");
    let out = r.send(&[(p5, frame(mac(2), mac(1), &[], 64))]);
    assert!(out.iter().all(|q| q.is_empty()));
}

#[test]
fn refusals_name_the_problem_and_change_nothing() {
    let (mut r, ..) = rig();
    r.sw.mirror_add(&spec("m", &["p1"], D::Rx, "p3")).unwrap();
    let err = |r: &mut Rig, s: MirrorSpec| r.sw.mirror_add(&s).unwrap_err().to_string();
    assert_eq!(
        err(&mut r, spec("m", &["p2"], D::Rx, "p3")),
        "mirror \"m\" already exists"
    );
    assert_eq!(
        err(&mut r, spec("bad name", &["p2"], D::Rx, "p3")),
        "invalid mirror name \"bad name\" (1 to 32 letters, digits, '_', '-' or '.', not \
         starting with '-')"
    );
    assert_eq!(
        err(&mut r, spec("n", &["nope"], D::Rx, "p3")),
        "device \"nope\" does not exist"
    );
    assert_eq!(
        err(&mut r, spec("n", &["br0"], D::Rx, "p3")),
        "device \"br0\" is a bridge, not a port"
    );
    assert_eq!(
        err(&mut r, spec("n", &["p1", "p2"], D::Rx, "p2")),
        "mirror \"n\": destination \"p2\" is also a source (a mirror never sends to a port it \
         watches)"
    );
    assert_eq!(
        err(&mut r, spec("n", &["p1", "p1"], D::Rx, "p3")),
        "mirror \"n\": source \"p1\" is given twice"
    );
    assert_eq!(
        err(&mut r, spec("n", &[], D::Rx, "p3")),
        "mirror \"n\" needs at least one source port"
    );
    let mut s = spec("n", &["p1"], D::Rx, "p3");
    s.rspan = Some(4095);
    assert_eq!(err(&mut r, s.clone()), "vid 4095 is reserved");
    s.rspan = None;
    s.vids = Some(VidList::new(vec![(0, 3)]));
    assert_eq!(err(&mut r, s.clone()), "vid 0 is out of range (1-4094)");
    for bad in ["../x.pcap", "/tmp/x", ".hidden", "", "p1.in.pcap", "a/b"] {
        let mut s = spec("n", &["p1"], D::Rx, "p3");
        s.dst = MirrorDst::Pcap(bad.to_string());
        assert_eq!(
            err(&mut r, s),
            format!(
                "mirror \"n\": invalid pcap file \"{bad}\" (a plain file name in the pcap \
                 directory: no '/', not starting with '.', at most 255 bytes, not NAME.in.pcap)"
            )
        );
    }
    let mut s = spec("n", &["p1"], D::Rx, "p3");
    s.dst = MirrorDst::Pcap("m.pcap".to_string());
    s.rspan = Some(5);
    assert_eq!(
        err(&mut r, s.clone()),
        "mirror \"n\": rspan needs a destination port (a pcap file gets the copies as they are)"
    );
    s.rspan = None;
    r.sw.mirror_add(&s).unwrap();
    s.name = "o".to_string();
    assert_eq!(
        err(&mut r, s),
        "mirror \"o\": pcap file \"m.pcap\" is written by mirror \"n\""
    );
    for i in 0..30 {
        r.sw.mirror_add(&spec(&format!("x{i}"), &["p1"], D::Rx, "p3"))
            .unwrap();
    }
    assert_eq!(
        err(&mut r, spec("y", &["p1"], D::Rx, "p3")),
        "too many mirrors (limit 32)"
    );
    assert_eq!(
        r.sw.mirror_del("zz").unwrap_err().to_string(),
        "mirror \"zz\" does not exist"
    );
    assert_eq!(r.sw.mirrors(false).len(), 32);
}

#[test]
fn pcap_destination_copies_wait_in_their_sink() {
    let (mut r, p1, _p2, _p3) = rig();
    let mut s = spec("m", &["p1"], D::Rx, "p3");
    s.dst = MirrorDst::Pcap("m.pcap".to_string());
    r.sw.mirror_add(&s).unwrap();
    assert_eq!(r.sw.plan().mirror_sinks(), ["m.pcap"]);
    let f = frame(mac(2), mac(1), &[], 64);
    let mut b = Batch::default();
    let mut pkt = PacketBuf::from_frame(&f);
    pkt.port = p1.0;
    b.push(pkt);
    r.sw.process(1, &mut b, &mut r.out);
    let sink: Vec<Vec<u8>> = r.out.mirror_sinks[0]
        .drain()
        .map(|p| p.frame().to_vec())
        .collect();
    assert_eq!(sink, vec![f]);
    assert_eq!(mirrored(&r, "m"), (1, 64));
    r.sw.mirror_del("m").unwrap();
    assert!(r.sw.plan().mirror_sinks().is_empty());
}
