//! Hand-written forwarding scenarios: exact frames out of each port, FDB contents, counters.

mod common;

use common::{frame, mac};
use qbridge_bridge::{
    BridgeSettings, DropReason, FdbFilter, FdbFlushKind, FdbKind, Outputs, PortId, PortSettings,
    Switch, VlanProtocol,
};
use qbridge_packet::{Batch, OffloadMeta, PacketBuf};
use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM};
use qbridge_wire::{MacAddr, Tpid};

const S: u64 = 1_000_000_000;

struct Rig {
    sw: Switch,
    out: Outputs,
    now: u64,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            sw: Switch::new(),
            out: Outputs::new(),
            now: 0,
        }
    }

    fn bridge(&mut self, name: &str, protocol: VlanProtocol, filtering: bool) {
        let s = BridgeSettings {
            vlan_filtering: filtering,
            vlan_protocol: protocol,
            ..Default::default()
        };
        self.sw.add_bridge(name, s).unwrap();
    }

    fn port(&mut self, name: &str, br: &str) -> PortId {
        let id = self
            .sw
            .add_port(name, "mem", PortSettings::default())
            .unwrap();
        let b = self.sw.bridge_id(br).unwrap();
        self.sw.set_master(id, Some(b)).unwrap();
        id
    }

    fn set(&mut self, p: PortId, f: impl FnOnce(&mut PortSettings)) {
        let mut s = self.sw.port_settings(p).clone();
        f(&mut s);
        self.sw.set_port(p, s).unwrap();
    }

    /// Sends frames in one batch and returns what left each port, by port id.
    fn send_batch(&mut self, frames: &[(PortId, Vec<u8>)]) -> Vec<Vec<Vec<u8>>> {
        let mut b = Batch::default();
        for (p, f) in frames {
            let mut pkt = PacketBuf::from_frame(f);
            pkt.port = p.0;
            b.push(pkt);
        }
        self.sw.process(self.now, &mut b, &mut self.out);
        assert!(b.is_empty());
        self.drain()
    }

    fn send(&mut self, p: PortId, f: Vec<u8>) -> Vec<Vec<Vec<u8>>> {
        self.send_batch(&[(p, f)])
    }

    fn drain(&mut self) -> Vec<Vec<Vec<u8>>> {
        let n = self.sw.port_slots();
        (0..n)
            .map(|i| {
                let b = self.out.batch_mut(PortId(i as u16));
                b.drain()
                    .map(|p| {
                        assert_eq!(p.port as usize, i, "egress port id stamped");
                        p.frame().to_vec()
                    })
                    .collect()
            })
            .collect()
    }

    fn drops(&self, p: PortId, r: DropReason) -> u64 {
        self.sw.port_counters(p).dropped(r)
    }
}

/// Only these ports got frames, and exactly these.
fn expect(out: &[Vec<Vec<u8>>], want: &[(PortId, Vec<Vec<u8>>)]) {
    for (i, frames) in out.iter().enumerate() {
        let w = want
            .iter()
            .find(|(p, _)| p.0 as usize == i)
            .map(|(_, f)| f.clone())
            .unwrap_or_default();
        assert_eq!(frames, &w, "frames out of port {i}");
    }
}

fn provider_rig() -> (Rig, PortId, PortId, PortId) {
    let mut r = Rig::new();
    r.bridge("pe", VlanProtocol::Dot1Ad, true);
    let ca = r.port("cust-a", "pe");
    let cb = r.port("cust-b", "pe");
    let tr = r.port("trunk", "pe");
    r.sw.vlan_del(ca, 1, 1).unwrap();
    r.sw.vlan_del(cb, 1, 1).unwrap();
    r.sw.vlan_del(tr, 1, 1).unwrap();
    r.sw.vlan_add(ca, 100, 100, true, true).unwrap();
    r.sw.vlan_add(cb, 200, 200, true, true).unwrap();
    r.sw.vlan_add(tr, 100, 100, false, false).unwrap();
    r.sw.vlan_add(tr, 200, 200, false, false).unwrap();
    (r, ca, cb, tr)
}

#[test]
fn qinq_push_s_tag_outside_untouched_c_tag_and_pop_only_s_tag() {
    let (mut r, ca, cb, tr) = provider_rig();
    // C-tagged (0x8100 vid 10, PCP 3) frame from customer A: the C-tag is payload here.
    let f = frame(mac(9), mac(1), &[(0x8100, 0x600a)], 64);
    let out = r.send(ca, f.clone());
    let pushed = frame(mac(9), mac(1), &[(0x88a8, 100), (0x8100, 0x600a)], 68);
    expect(&out, &[(tr, vec![pushed])]);
    // The reply, S-tagged on the trunk: only the S-tag is popped, to customer A only.
    let reply = frame(mac(1), mac(9), &[(0x88a8, 100), (0x8100, 0x600a)], 68);
    let out = r.send(tr, reply);
    expect(
        &out,
        &[(ca, vec![frame(mac(1), mac(9), &[(0x8100, 0x600a)], 64)])],
    );
    // Customer B's frames with the same C-VLAN and MACs stay in S-VLAN 200.
    let out = r.send(cb, frame(mac(1), mac(9), &[(0x8100, 0x000a)], 64));
    expect(
        &out,
        &[(
            tr,
            vec![frame(
                mac(1),
                mac(9),
                &[(0x88a8, 200), (0x8100, 0x000a)],
                68,
            )],
        )],
    );
    let fdb = r.sw.fdb_entries(&FdbFilter::default()).unwrap();
    let got: Vec<_> = fdb
        .iter()
        .map(|e| (e.mac, e.vlan, e.ifname.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (mac(1), Some(100), "cust-a"),
            (mac(9), Some(200), "cust-b"),
            (mac(9), Some(100), "trunk")
        ]
    );
    assert_eq!(r.sw.port_counters(tr).tx_frames, 2);
    assert_eq!(r.sw.port_counters(ca).tx_bytes, 64);
}

#[test]
fn dot1q_access_to_trunk_and_vlan_isolation() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a10 = r.port("a10", "br0");
    let a20 = r.port("a20", "br0");
    let tr = r.port("trunk", "br0");
    for p in [a10, a20, tr] {
        r.sw.vlan_del(p, 1, 1).unwrap();
    }
    r.sw.vlan_add(a10, 10, 10, true, true).unwrap();
    r.sw.vlan_add(a20, 20, 20, true, true).unwrap();
    r.sw.vlan_add(tr, 10, 20, false, false).unwrap();
    // Broadcast from the VLAN 10 access port: tagged on the trunk, never to VLAN 20.
    let out = r.send(a10, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    expect(
        &out,
        &[(
            tr,
            vec![frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 10)], 64)],
        )],
    );
    // Tagged VLAN 20 from the trunk to a20 untagged.
    let out = r.send(tr, frame(MacAddr::BROADCAST, mac(2), &[(0x8100, 20)], 64));
    expect(
        &out,
        &[(a20, vec![frame(MacAddr::BROADCAST, mac(2), &[], 60)])],
    );
    // VLAN 30 on the trunk: not a member.
    let out = r.send(tr, frame(mac(1), mac(2), &[(0x8100, 30)], 64));
    expect(&out, &[]);
    assert_eq!(r.drops(tr, DropReason::VlanNotMember), 1);
    // A 0x88a8-tagged frame on an 802.1Q bridge is untagged: the trunk has no PVID.
    let out = r.send(tr, frame(mac(1), mac(2), &[(0x88a8, 10)], 64));
    expect(&out, &[]);
    assert_eq!(r.drops(tr, DropReason::NoPvid), 1);
    // Learned: mac 1 in VLAN 10 on a10. Known unicast from the trunk goes only there.
    let out = r.send(tr, frame(mac(1), mac(3), &[(0x8100, 10)], 64));
    expect(&out, &[(a10, vec![frame(mac(1), mac(3), &[], 60)])]);
    // Same MAC in VLAN 20 is unknown there: flooded in VLAN 20 only.
    let out = r.send(tr, frame(mac(1), mac(3), &[(0x8100, 20)], 64));
    expect(&out, &[(a20, vec![frame(mac(1), mac(3), &[], 60)])]);
    assert_eq!(
        r.sw.vlan_counters(r.sw.bridge_id("br0").unwrap(), 20)
            .tx_frames,
        2
    );
}

#[test]
fn priority_tag_takes_pvid_keeps_pcp_and_reserved_vid_drops() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let t = r.port("t", "br0");
    r.sw.vlan_add(t, 1, 1, false, false).unwrap(); // tagged on t
    let out = r.send(
        a,
        frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0xa000)], 64),
    );
    expect(
        &out,
        &[(
            t,
            vec![frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0xa001)], 64)],
        )],
    );
    let out = r.send(
        a,
        frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0x0fff)], 64),
    );
    expect(&out, &[]);
    assert_eq!(r.drops(a, DropReason::ReservedVid), 1);
    // No PVID: untagged and priority-tagged frames drop.
    r.sw.vlan_add(a, 1, 1, false, true).unwrap();
    r.send(a, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    r.send(
        a,
        frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 0x2000)], 64),
    );
    assert_eq!(r.drops(a, DropReason::NoPvid), 2);
}

#[test]
fn per_port_tpid_custom_value() {
    let (mut r, ca, _cb, tr) = provider_rig();
    r.set(tr, |s| s.tpid = Some(Tpid(0x9100)));
    let out = r.send(ca, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    expect(
        &out,
        &[(
            tr,
            vec![frame(MacAddr::BROADCAST, mac(1), &[(0x9100, 100)], 64)],
        )],
    );
    // 0x88a8 is now payload on the trunk: untagged, and the trunk has no PVID.
    r.send(tr, frame(MacAddr::BROADCAST, mac(2), &[(0x88a8, 100)], 64));
    assert_eq!(r.drops(tr, DropReason::NoPvid), 1);
    let out = r.send(tr, frame(MacAddr::BROADCAST, mac(2), &[(0x9100, 100)], 64));
    expect(
        &out,
        &[(ca, vec![frame(MacAddr::BROADCAST, mac(2), &[], 60)])],
    );
}

#[test]
fn frame_size_envelope_defaults_and_oversize_counted() {
    let (mut r, ca, _cb, tr) = provider_rig();
    assert_eq!(r.sw.port_max_frame(ca), 1518);
    assert_eq!(r.sw.port_max_frame(tr), 1522);
    // A customer's full 1500-byte packet with its C-tag: 1518 in, 1522 out on the trunk.
    let out = r.send(ca, frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 10)], 1518));
    assert_eq!(out[tr.0 as usize].len(), 1);
    assert_eq!(out[tr.0 as usize][0].len(), 1522);
    r.send(ca, frame(MacAddr::BROADCAST, mac(1), &[(0x8100, 10)], 1519));
    assert_eq!(r.drops(ca, DropReason::Oversize), 1);
    // envhdr 0 on the trunk: the pushed S-tag makes the copy oversize, counted at egress.
    r.set(tr, |s| s.envhdr_len = Some(0));
    let out = r.send(ca, frame(MacAddr::BROADCAST, mac(1), &[], 1514));
    expect(&out, &[]);
    assert_eq!(r.drops(tr, DropReason::Oversize), 1);
    // GSO super-frames are judged per segment: parsed headers (here C-tag + IPv4 + TCP = 58
    // bytes) plus gso_size, whatever hdr_len says (Linux reports the skb's linear length).
    r.set(tr, |s| s.envhdr_len = None);
    let gso = |gso_size: u16, hdr_len: u16| {
        let mut p = PacketBuf::from_frame(&tcp_frame(60000, &[(0x8100, 10)]));
        p.port = ca.0;
        p.offload = OffloadMeta {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4.raw(),
            hdr_len,
            gso_size,
            csum_start: 38,
            csum_offset: 16,
        };
        let mut b = Batch::default();
        b.push(p);
        b
    };
    // 58 + 1460 = 1518 at ingress, 1522 with the S-tag on the trunk: both fit.
    r.sw.process(0, &mut gso(1460, 4000), &mut r.out);
    let got = r.out.batch_mut(tr).drain().collect::<Vec<_>>();
    assert_eq!(got.len(), 1, "a lying hdr_len must not make it oversize");
    assert_eq!(
        (got[0].offload.hdr_len, got[0].offload.csum_start),
        (4004, 42)
    );
    // One byte more per segment: oversize at ingress.
    let before = r.drops(ca, DropReason::Oversize);
    r.sw.process(0, &mut gso(1461, 58), &mut r.out);
    assert_eq!(r.drops(ca, DropReason::Oversize), before + 1);
}

/// An IPv4/TCP frame of `len` bytes with `tags`: real headers (20-byte IP, 20-byte TCP), so
/// GSO segment sizes can be judged from them.
fn tcp_frame(len: usize, tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = frame(mac(9), mac(1), tags, 14 + 4 * tags.len());
    let ip_len = (len - f.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = vec![0u8; 20];
    tcp[12] = 5 << 4;
    f.extend_from_slice(&tcp);
    f.resize(len, 0x61);
    f
}

#[test]
fn learning_flags_flooding_hairpin_isolation() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let p: Vec<PortId> = (0..4).map(|i| r.port(&format!("p{i}"), "br0")).collect();
    let bc = frame(MacAddr::BROADCAST, mac(1), &[], 60);
    let out = r.send(p[0], bc.clone());
    expect(
        &out,
        &[
            (p[1], vec![bc.clone()]),
            (p[2], vec![bc.clone()]),
            (p[3], vec![bc.clone()]),
        ],
    );
    // Flags: p1 no unknown-unicast flood, p2 no broadcast, p3 no multicast.
    r.set(p[1], |s| s.flood = false);
    r.set(p[2], |s| s.bcast_flood = false);
    r.set(p[3], |s| s.mcast_flood = false);
    let uu = frame(mac(50), mac(1), &[], 60);
    expect(
        &r.send(p[0], uu.clone()),
        &[(p[2], vec![uu.clone()]), (p[3], vec![uu.clone()])],
    );
    expect(
        &r.send(p[0], bc.clone()),
        &[(p[1], vec![bc.clone()]), (p[3], vec![bc.clone()])],
    );
    let mc = frame(MacAddr([0x01, 0, 0x5e, 0, 0, 1]), mac(1), &[], 60);
    expect(
        &r.send(p[0], mc.clone()),
        &[(p[1], vec![mc.clone()]), (p[2], vec![mc.clone()])],
    );
    // Known unicast back to the ingress port: dropped unless hairpin.
    r.send(p[1], frame(MacAddr::BROADCAST, mac(2), &[], 60));
    let back = frame(mac(2), mac(3), &[], 60);
    expect(&r.send(p[1], back.clone()), &[]);
    assert_eq!(r.drops(p[1], DropReason::SamePort), 1);
    r.set(p[1], |s| s.hairpin = true);
    expect(&r.send(p[1], back.clone()), &[(p[1], vec![back.clone()])]);
    // mac 3 moved? No: it was learned on p1 both times. Now it appears on p2: a move.
    r.send(p[2], frame(mac(2), mac(3), &[], 60));
    assert_eq!(r.sw.port_counters(p[2]).fdb_moves, 1);
    // Isolation: p0 and p2 isolated never talk; p3 still reachable.
    r.set(p[0], |s| s.isolated = true);
    r.set(p[2], |s| s.isolated = true);
    expect(&r.send(p[0], frame(mac(3), mac(1), &[], 60)), &[]);
    assert_eq!(r.drops(p[0], DropReason::Isolated), 1);
    let bc2 = frame(MacAddr::BROADCAST, mac(1), &[], 60);
    expect(
        &r.send(p[0], bc2.clone()),
        &[(p[1], vec![bc2.clone()]), (p[3], vec![bc2.clone()])],
    );
    // Learning off: a new source is not learned.
    r.set(p[3], |s| s.learning = false);
    r.send(p[3], frame(MacAddr::BROADCAST, mac(7), &[], 60));
    assert!(r
        .sw
        .fdb_lookup(r.sw.bridge_id("br0").unwrap(), mac(7), 1)
        .is_none());
    // Nowhere to flood: counted.
    for &q in &p[..3] {
        r.set(q, |s| s.flood = false);
    }
    expect(&r.send(p[3], frame(mac(60), mac(8), &[], 60)), &[]);
    assert_eq!(r.drops(p[3], DropReason::NoDestination), 1);
}

#[test]
fn bad_sources_link_local_and_runts() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    r.send(a, frame(mac(1), MacAddr([1, 0, 0, 0, 0, 1]), &[], 60));
    r.send(a, frame(mac(1), MacAddr::ZERO, &[], 60));
    assert_eq!(r.drops(a, DropReason::InvalidSrcMac), 2);
    assert_eq!(r.sw.fdb_len(r.sw.bridge_id("br0").unwrap()), (0, 0));
    r.send(a, vec![0u8; 13]);
    r.send(
        a,
        frame(mac(1), mac(2), &[], 14)[..12]
            .iter()
            .copied()
            .chain([0x81, 0, 0])
            .collect(),
    );
    assert_eq!(r.drops(a, DropReason::Runt), 2);
    // STP group is forwarded (no STP), LLDP is not unless masked, pause never.
    let stp = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0]), mac(1), &[], 60);
    expect(&r.send(a, stp.clone()), &[(b, vec![stp])]);
    let lldp = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0x0e]), mac(1), &[], 60);
    expect(&r.send(a, lldp.clone()), &[]);
    r.send(a, frame(MacAddr([1, 0x80, 0xc2, 0, 0, 1]), mac(1), &[], 60));
    assert_eq!(r.drops(a, DropReason::LinkLocal), 2);
    let br = r.sw.bridge_id("br0").unwrap();
    let mut s = r.sw.bridge_settings(br).clone();
    s.group_fwd_mask = 1 << 0x0e;
    r.sw.set_bridge(br, s.clone()).unwrap();
    expect(&r.send(a, lldp.clone()), &[(b, vec![lldp])]);
    s.group_fwd_mask = 0x0002;
    assert!(r.sw.set_bridge(br, s).is_err());
}

#[test]
fn provider_bridge_forwards_customer_bpdus_and_keeps_its_own_group() {
    let (mut r, ca, _cb, tr) = provider_rig();
    let cust_gvrp = frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0x0d]), mac(1), &[], 60);
    let out = r.send(ca, cust_gvrp.clone());
    expect(
        &out,
        &[(
            tr,
            vec![frame(
                MacAddr([1, 0x80, 0xc2, 0, 0, 0x0d]),
                mac(1),
                &[(0x88a8, 100)],
                64,
            )],
        )],
    );
    r.send(
        ca,
        frame(MacAddr([1, 0x80, 0xc2, 0, 0, 0x08]), mac(1), &[], 60),
    );
    assert_eq!(r.drops(ca, DropReason::LinkLocal), 1);
}

#[test]
fn vlan_unaware_bridge_forwards_regardless_of_tags() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, false);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    for tags in [
        &[][..],
        &[(0x8100, 4095)][..],
        &[(0x88a8, 7), (0x8100, 8)][..],
    ] {
        let f = frame(MacAddr::BROADCAST, mac(1), tags, 80);
        expect(&r.send(a, f.clone()), &[(b, vec![f])]);
    }
    let fdb = r.sw.fdb_entries(&FdbFilter::default()).unwrap();
    assert_eq!(fdb.len(), 1);
    assert_eq!(fdb[0].vlan, None);
}

#[test]
fn fdb_kinds_static_moves_sticky_stays_permanent_is_local() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    r.sw.fdb_add(mac(10), a, Some(1), FdbKind::Static, false, false)
        .unwrap();
    r.sw.fdb_add(mac(11), a, Some(1), FdbKind::Static, true, false)
        .unwrap();
    r.sw.fdb_add(mac(12), a, Some(1), FdbKind::Permanent, false, false)
        .unwrap();
    assert!(r
        .sw
        .fdb_add(mac(10), b, Some(1), FdbKind::Static, false, false)
        .is_err());
    assert!(r
        .sw
        .fdb_add(
            MacAddr::BROADCAST,
            b,
            Some(1),
            FdbKind::Static,
            false,
            false
        )
        .is_err());
    r.send(b, frame(MacAddr::BROADCAST, mac(10), &[], 60));
    r.send(b, frame(MacAddr::BROADCAST, mac(11), &[], 60));
    r.send(b, frame(MacAddr::BROADCAST, mac(12), &[], 60));
    let br = r.sw.bridge_id("br0").unwrap();
    assert_eq!(r.sw.fdb_lookup(br, mac(10), 1), Some((b, FdbKind::Static)));
    assert_eq!(r.sw.fdb_lookup(br, mac(11), 1), Some((a, FdbKind::Static)));
    assert_eq!(
        r.sw.fdb_lookup(br, mac(12), 1),
        Some((a, FdbKind::Permanent))
    );
    expect(&r.send(b, frame(mac(12), mac(5), &[], 60)), &[]);
    assert_eq!(r.drops(b, DropReason::Local), 1);
    // Static entries never age; learned ones do.
    r.now = 301 * S;
    r.sw.age(r.now);
    assert!(r.sw.fdb_lookup(br, mac(5), 1).is_none());
    assert!(r.sw.fdb_lookup(br, mac(10), 1).is_some());
    // Flush: static ones go with "static", permanent never.
    assert_eq!(
        r.sw.fdb_flush("br0", None, FdbFlushKind::Static).unwrap(),
        2
    );
    assert_eq!(r.sw.fdb_entries(&FdbFilter::default()).unwrap().len(), 1);
    // Without a VLAN: entry for VLAN 0 and every VLAN of the port, as Linux.
    r.sw.vlan_add(a, 5, 6, false, false).unwrap();
    r.sw.fdb_add(mac(20), a, None, FdbKind::Static, false, false)
        .unwrap();
    let vlans: Vec<_> =
        r.sw.fdb_entries(&FdbFilter {
            vlan: None,
            dev: None,
            bridge: None,
        })
        .unwrap()
        .into_iter()
        .filter(|e| e.mac == mac(20))
        .map(|e| e.vlan)
        .collect();
    assert_eq!(vlans, vec![None, Some(1), Some(5), Some(6)]);
}

#[test]
fn ageing_vlan_removal_and_detach_flush() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let _b = r.port("b", "br0");
    let br = r.sw.bridge_id("br0").unwrap();
    r.sw.vlan_add(a, 7, 7, false, false).unwrap();
    r.send(a, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    r.send(a, frame(MacAddr::BROADCAST, mac(2), &[(0x8100, 7)], 64));
    r.now = 200 * S;
    r.send(a, frame(MacAddr::BROADCAST, mac(1), &[], 60)); // refresh
    r.now = 350 * S;
    assert_eq!(r.sw.age(r.now), 1); // mac 2 idle 350 s > 300 s
    assert!(r.sw.fdb_lookup(br, mac(1), 1).is_some());
    r.send(a, frame(MacAddr::BROADCAST, mac(2), &[(0x8100, 7)], 64));
    r.sw.vlan_del(a, 7, 7).unwrap();
    assert!(r.sw.fdb_lookup(br, mac(2), 7).is_none());
    r.sw.set_master(a, None).unwrap();
    assert_eq!(r.sw.fdb_len(br), (0, 0));
    // Unattached port: frames counted as no_bridge.
    r.send(a, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    assert_eq!(r.drops(a, DropReason::NoBridge), 1);
}

#[test]
fn limits_refuse_and_full_table_evicts_fairly() {
    let mut r = Rig::new();
    let s = BridgeSettings {
        vlan_filtering: true,
        fdb_max_learned: 3,
        ..Default::default()
    };
    r.sw.add_bridge("br0", s).unwrap();
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    r.set(b, |s| s.fdb_max_learned = 1);
    r.send(b, frame(MacAddr::BROADCAST, mac(1), &[], 60));
    r.send(b, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    assert_eq!(r.sw.port_counters(b).fdb_learn_refused, 1);
    for n in 3..6 {
        r.send(a, frame(MacAddr::BROADCAST, mac(n), &[], 60));
    }
    assert_eq!(r.sw.port_counters(a).fdb_learn_refused, 1);
    let br = r.sw.bridge_id("br0").unwrap();
    assert_eq!(r.sw.fdb_len(br), (3, 3));
    // A 4-entry table: flooding port a loses its oldest, port b keeps its one.
    let mut s = r.sw.bridge_settings(br).clone();
    s.fdb_max_learned = 0;
    s.fdb_max_entries = 4;
    r.sw.set_bridge(br, s).unwrap();
    let c = r.port("c", "br0");
    for n in 10..14 {
        r.send(a, frame(MacAddr::BROADCAST, mac(n), &[], 60));
    }
    r.send(c, frame(MacAddr::BROADCAST, mac(30), &[], 60));
    assert_eq!(r.sw.fdb_len(br).0, 4);
    assert!(
        r.sw.fdb_lookup(br, mac(1), 1).is_some(),
        "port b's entry survives"
    );
    assert!(r.sw.fdb_lookup(br, mac(30), 1).is_some());
    assert!(r.sw.fdb_lookup(br, mac(13), 1).is_some());
    assert!(
        r.sw.fdb_lookup(br, mac(3), 1).is_none(),
        "oldest of port a evicted first"
    );
    assert!(r.sw.port_counters(a).fdb_evictions >= 2);
}

#[test]
fn default_pvid_follows_linux() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    assert_eq!(r.sw.vlan_membership(a, 1), Some((true, true)));
    r.sw.vlan_add(b, 1, 1, false, false).unwrap(); // b: VLAN 1 tagged, no longer default
    let br = r.sw.bridge_id("br0").unwrap();
    let mut s = r.sw.bridge_settings(br).clone();
    s.default_pvid = 5;
    r.sw.set_bridge(br, s).unwrap();
    assert_eq!(r.sw.vlan_membership(a, 1), None);
    assert_eq!(r.sw.vlan_membership(a, 5), Some((true, true)));
    assert_eq!(r.sw.vlan_membership(b, 1), Some((false, false)));
    assert_eq!(r.sw.vlan_membership(b, 5), None);
}

#[test]
fn config_errors_leave_switch_unchanged() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    assert_eq!(
        r.sw.vlan_add(a, 4095, 4095, false, false)
            .unwrap_err()
            .to_string(),
        "vid 4095 is reserved"
    );
    assert_eq!(
        r.sw.vlan_add(a, 20, 10, false, false)
            .unwrap_err()
            .to_string(),
        "range end 10 is below start 20"
    );
    assert!(r.sw.vlan_add(a, 10, 20, true, false).is_err());
    assert!(r.sw.vlan_del(a, 1, 2).is_err());
    assert_eq!(r.sw.vlan_membership(a, 1), Some((true, true)));
    assert!(r.sw.add_bridge("a", BridgeSettings::default()).is_err());
    assert!(r
        .sw
        .add_port("bad/name", "mem", PortSettings::default())
        .is_err());
    let bad = PortSettings {
        mtu: 10,
        ..Default::default()
    };
    assert!(r.sw.set_port(a, bad).is_err());
    assert_eq!(r.sw.port_settings(a).mtu, 1500);
}

/// Known unicast frames in one batch whose FDB entries share a port but not the VID or the
/// entry's kind: each frame gets its own checks (the pipeline remembers the last port, flags and
/// VID that passed them), and the counters add up per port and per VID.
#[test]
fn one_batch_same_port_other_vid_or_entry_kind() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    let c = r.port("c", "br0");
    r.sw.vlan_add(a, 10, 30, false, false).unwrap();
    r.sw.vlan_add(b, 10, 20, false, false).unwrap();
    r.sw.vlan_add(c, 10, 20, false, false).unwrap();
    // mac 9 on b in VLANs 10 and 20, mac 8 on c, mac 7 the bridge's own address on b (no host
    // port: dropped as local), mac 6 learned on b in VLAN 10.
    for vid in [10, 20] {
        r.sw.fdb_add(mac(9), b, Some(vid), FdbKind::Static, false, false)
            .unwrap();
        r.sw.fdb_add(mac(8), c, Some(vid), FdbKind::Static, false, false)
            .unwrap();
    }
    r.sw.fdb_add(mac(7), b, Some(10), FdbKind::Permanent, false, false)
        .unwrap();
    r.send(b, frame(MacAddr::BROADCAST, mac(6), &[(0x8100, 10)], 64));
    // b leaves VLAN 20; its static entry there stays (only learned entries are flushed).
    r.sw.vlan_del(b, 20, 20).unwrap();
    let br = r.sw.bridge_id("br0").unwrap();
    assert_eq!(r.sw.fdb_lookup(br, mac(9), 20), Some((b, FdbKind::Static)));
    let to = |dst: u8, vid: u16| frame(mac(dst), mac(1), &[(0x8100, vid)], 64);
    let sent = [
        (9, 10),
        (9, 20),
        (9, 10),
        (7, 10),
        (6, 10),
        (8, 20),
        (8, 10),
        (9, 10),
    ];
    let batch: Vec<_> = sent.iter().map(|&(d, v)| (a, to(d, v))).collect();
    let out = r.send_batch(&batch);
    expect(
        &out,
        &[
            (b, vec![to(9, 10), to(9, 10), to(6, 10), to(9, 10)]),
            (c, vec![to(8, 20), to(8, 10)]),
        ],
    );
    assert_eq!(r.drops(a, DropReason::EgressNotMember), 1);
    assert_eq!(r.drops(a, DropReason::Local), 1);
    assert_eq!(r.sw.port_counters(b).tx_frames, 4);
    assert_eq!(r.sw.port_counters(b).tx_bytes, 4 * 64);
    // c and VLAN 10 also count the broadcast that taught mac 6 (to a and c).
    assert_eq!(r.sw.port_counters(c).tx_frames, 1 + 2);
    assert_eq!(r.sw.vlan_counters(br, 10).tx_frames, 5 + 2);
    assert_eq!(r.sw.vlan_counters(br, 20).tx_frames, 1);
    assert_eq!(r.sw.vlan_counters(br, 20).tx_bytes, 64);
}

#[test]
fn batch_sizes_keep_per_port_order() {
    for n in [1usize, 31, 32, 33, 255, 256, 257] {
        let (mut r, ca, _cb, tr) = provider_rig();
        let frames: Vec<(PortId, Vec<u8>)> = (0..n)
            .map(|i| {
                (
                    ca,
                    frame(
                        mac(200),
                        mac(1),
                        &[(0x8100, (i % 4000) as u16 + 1)],
                        64 + i % 100,
                    ),
                )
            })
            .collect();
        let out = r.send_batch(&frames);
        let want: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                frame(
                    mac(200),
                    mac(1),
                    &[(0x88a8, 100), (0x8100, (i % 4000) as u16 + 1)],
                    68 + i % 100,
                )
            })
            .collect();
        expect(&out, &[(tr, want)]);
        assert_eq!(r.sw.port_counters(ca).rx_frames, n as u64);
    }
}

#[test]
fn link_down_port_stops_and_loses_dynamic_entries() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, true);
    let a = r.port("a", "br0");
    let b = r.port("b", "br0");
    let br = r.sw.bridge_id("br0").unwrap();
    r.send(b, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    r.sw.fdb_add(mac(3), b, Some(1), FdbKind::Static, false, false)
        .unwrap();
    r.sw.set_link_state(b, false);
    assert!(!r.sw.port_running(b));
    assert!(
        r.sw.fdb_lookup(br, mac(2), 1).is_none(),
        "dynamic entry flushed on link loss"
    );
    assert!(
        r.sw.fdb_lookup(br, mac(3), 1).is_some(),
        "static entry kept"
    );
    expect(&r.send(a, frame(mac(3), mac(1), &[], 60)), &[]);
    assert_eq!(r.drops(a, DropReason::EgressDown), 1);
    expect(&r.send(a, frame(MacAddr::BROADCAST, mac(1), &[], 60)), &[]);
    assert_eq!(r.drops(a, DropReason::NoDestination), 1);
    r.send(b, frame(MacAddr::BROADCAST, mac(2), &[], 60));
    assert_eq!(r.drops(b, DropReason::PortDown), 1);
    r.sw.set_link_state(b, true);
    let f = frame(mac(3), mac(1), &[], 60);
    expect(&r.send(a, f.clone()), &[(b, vec![f])]);
    assert!(
        r.sw.port_settings(b).up,
        "admin state untouched by link state"
    );
}

/// The staged pipeline: a frame's lookup sees what earlier frames of the same batch learned and
/// nothing later frames learn; a batch that all goes to one port queues behind frames already
/// waiting there; a mixed batch keeps each port's arrival order.
#[test]
fn staged_batch_keeps_frame_order_semantics() {
    let (mut r, ca, _cb, tr) = provider_rig();
    let cc = r.port("cust-c", "pe");
    r.sw.vlan_del(cc, 1, 1).unwrap();
    r.sw.vlan_add(cc, 100, 100, true, true).unwrap();
    let s_tag = |f: Vec<u8>| {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x88, 0xa8, 0, 100]);
        t.extend_from_slice(&f[12..]);
        t
    };

    // Frame 1 (80 -> 81, unknown) floods to the trunk and cust-c although frame 2 teaches 81
    // on the trunk; frame 3 (80 -> 81 again) then goes to the trunk alone.
    let f1 = frame(mac(81), mac(80), &[], 64);
    let f2 = s_tag(frame(mac(80), mac(81), &[], 64));
    let f3 = frame(mac(81), mac(80), &[], 65);
    let out = r.send_batch(&[(ca, f1.clone()), (tr, f2.clone()), (ca, f3.clone())]);
    let mut f2_out = f2.clone();
    f2_out.drain(12..16);
    expect(
        &out,
        &[
            (tr, vec![s_tag(f1.clone()), s_tag(f3.clone())]),
            (cc, vec![f1.clone()]),
            (ca, vec![f2_out]),
        ],
    );

    // Two batches bound for the trunk without draining in between: the second is appended.
    let mut all = Vec::new();
    for round in 0..2 {
        let mut b = Batch::default();
        for i in 0..3 {
            let f = frame(mac(81), mac(80), &[], 70 + round * 3 + i);
            all.push(s_tag(f.clone()));
            let mut pkt = PacketBuf::from_frame(&f);
            pkt.port = ca.0;
            b.push(pkt);
        }
        r.sw.process(r.now, &mut b, &mut r.out);
        assert!(b.is_empty());
    }
    let out = r.drain();
    expect(&out, &[(tr, all)]);
    assert_eq!(r.sw.port_counters(tr).tx_frames, 2 + 6);
}

/// A frame to 00:00:00:00:00:00 on a bridge without VLAN filtering (FID 0: its FDB key is 0,
/// the FDB table's empty-slot marker) is unknown unicast and floods; `fdb del` of the zero
/// MAC is an error, not a panic.
#[test]
fn a_frame_to_the_zero_mac_floods_without_vlan_filtering() {
    let mut r = Rig::new();
    r.bridge("br0", VlanProtocol::Dot1Q, false);
    let p0 = r.port("p0", "br0");
    let p1 = r.port("p1", "br0");
    let p2 = r.port("p2", "br0");
    let zero = MacAddr([0; 6]);
    let f = frame(zero, mac(1), &[], 64);
    let out = r.send(p1, f.clone());
    expect(&out, &[(p0, vec![f.clone()]), (p2, vec![f.clone()])]);
    let f2 = frame(zero, mac(2), &[], 64);
    let out = r.send(p0, f2.clone());
    expect(&out, &[(p1, vec![f2.clone()]), (p2, vec![f2])]);
    assert!(r.sw.fdb_del(zero, p0, None).is_err());
}
