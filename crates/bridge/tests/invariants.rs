//! Properties that must hold for any configuration and any bytes:
//! - `process` never panics and every input buffer ends up exactly once in an output or a drop
//!   counter;
//! - on a VLAN-filtering bridge no frame leaves on a port that is not a member of the frame's
//!   VLAN, and it leaves untagged exactly when the VLAN is egress-untagged on that port, else
//!   with exactly one bridge tag of that port's TPID carrying the VID.

use proptest::prelude::*;
use qbridge_bridge::{BridgeSettings, Outputs, PortId, PortSettings, Switch, VlanProtocol};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::Tpid;

#[derive(Debug, Clone)]
struct PortCfg {
    tpid: Option<u16>,
    vlans: Vec<(u16, bool, bool)>, // vid, pvid, untagged
    hairpin: bool,
    mtu: u32,
}

fn port_cfg() -> impl Strategy<Value = PortCfg> {
    (
        prop_oneof![
            Just(None),
            Just(Some(0x8100u16)),
            Just(Some(0x88a8)),
            Just(Some(0x9100))
        ],
        prop::collection::vec((1u16..6, any::<bool>(), any::<bool>()), 0..4),
        any::<bool>(),
        prop_oneof![Just(1500u32), Just(68), Just(9000)],
    )
        .prop_map(|(tpid, vlans, hairpin, mtu)| PortCfg {
            tpid,
            vlans,
            hairpin,
            mtu,
        })
}

fn frame_bytes() -> impl Strategy<Value = Vec<u8>> {
    let mac = prop_oneof![
        Just([0xffu8; 6]),
        (0u8..4).prop_map(|n| [2, 0, 0, 0, 0, n]),
        Just([1, 0x80, 0xc2, 0, 0, 0]),
        any::<[u8; 6]>(),
    ];
    let tag = prop_oneof![
        (Just(0x8100u16), 0u16..8),
        (Just(0x88a8u16), 0u16..8),
        (Just(0x9100u16), 0u16..8),
        (Just(0x8100u16), Just(0x0fffu16)),
    ];
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        (
            mac.clone(),
            mac,
            prop::collection::vec(tag, 0..3),
            0usize..80
        )
            .prop_map(|(d, s, tags, pad)| {
                let mut f = Vec::new();
                f.extend_from_slice(&d);
                f.extend_from_slice(&s);
                for (t, tci) in tags {
                    f.extend_from_slice(&t.to_be_bytes());
                    f.extend_from_slice(&tci.to_be_bytes());
                }
                f.extend_from_slice(&[0x08, 0x00]);
                f.resize(f.len() + pad, 0xab);
                f
            }),
    ]
}

/// The VID the bridge classifies `f` into on a port with `tpid` and `pvid`, if admitted.
fn ingress_vid(f: &[u8], tpid: u16, pvid: Option<u16>) -> Option<u16> {
    if f.len() < 14 {
        return None;
    }
    let outer = u16::from_be_bytes([f[12], f[13]]);
    if outer == tpid {
        if f.len() < 18 {
            return None;
        }
        match u16::from_be_bytes([f[14], f[15]]) & 0xfff {
            0 => pvid,
            0xfff => None,
            v => Some(v),
        }
    } else {
        pvid
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_frame_on_a_non_member_port(
        protocol in prop_oneof![Just(VlanProtocol::Dot1Q), Just(VlanProtocol::Dot1Ad)],
        cfgs in prop::collection::vec(port_cfg(), 2..5),
        frames in prop::collection::vec((0usize..5, frame_bytes()), 1..40),
    ) {
        let mut sw = Switch::new();
        let s = BridgeSettings { vlan_filtering: true, vlan_protocol: protocol, default_pvid: 0, ..Default::default() };
        let br = sw.add_bridge("br0", s).unwrap();
        let mut ids = Vec::new();
        for (i, c) in cfgs.iter().enumerate() {
            let ps = PortSettings { tpid: c.tpid.map(Tpid), hairpin: c.hairpin, mtu: c.mtu, ..Default::default() };
            let id = sw.add_port(&format!("p{i}"), "mem", ps).unwrap();
            sw.set_master(id, Some(br)).unwrap();
            for &(vid, pvid, untagged) in &c.vlans {
                sw.vlan_add(id, vid as u32, vid as u32, pvid, untagged).unwrap();
            }
            ids.push(id);
        }
        let mut out = Outputs::new();
        for (i, f) in frames {
            let in_id = ids[i % ids.len()];
            let mut b = Batch::default();
            let mut p = PacketBuf::from_frame(&f);
            p.port = in_id.0;
            b.push(p);
            let drops_before: u64 = ids.iter().map(|&p| sw.port_counters(p).total_drops()).sum();
            sw.process(0, &mut b, &mut out);
            let pvid = (1..4095).find(|&v| sw.vlan_membership(in_id, v).is_some_and(|m| m.0));
            let vid = ingress_vid(&f, sw.port_tpid(in_id).0, pvid);
            let mut sent = 0u64;
            for &e in &ids {
                for pkt in out.batch_mut(e).drain() {
                    sent += 1;
                    let vid = vid.expect("a frame left although it has no VLAN");
                    let (_, untagged) = sw.vlan_membership(e, vid).expect("left on a non-member port");
                    let g = pkt.frame();
                    let tpid = sw.port_tpid(e).0;
                    let was_tagged = ingress_tagged(&f, sw.port_tpid(in_id).0);
                    if untagged {
                        prop_assert_eq!(g.len() + 4 * was_tagged as usize, f.len());
                    } else {
                        prop_assert_eq!(g.len(), f.len() + 4 * (!was_tagged) as usize);
                        prop_assert_eq!(u16::from_be_bytes([g[12], g[13]]), tpid);
                        prop_assert_eq!(u16::from_be_bytes([g[14], g[15]]) & 0xfff, vid);
                    }
                    prop_assert_eq!(&g[..12], &f[..12]);
                }
            }
            let drops_after: u64 = ids.iter().map(|&p| sw.port_counters(p).total_drops()).sum();
            // Every frame is either sent (at least once) or dropped with a counted reason;
            // flood copies may also be dropped (egress oversize) while others go out.
            prop_assert!(sent > 0 || drops_after > drops_before, "frame vanished without a counted drop");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        filtering in any::<bool>(),
        frames in prop::collection::vec((0u16..4, prop::collection::vec(any::<u8>(), 0..100)), 1..64),
    ) {
        let mut sw = Switch::new();
        let s = BridgeSettings { vlan_filtering: filtering, ..Default::default() };
        let br = sw.add_bridge("br0", s).unwrap();
        for i in 0..3 {
            let id = sw.add_port(&format!("p{i}"), "mem", PortSettings::default()).unwrap();
            sw.set_master(id, Some(br)).unwrap();
        }
        let mut out = Outputs::new();
        let mut b = Batch::default();
        let n = frames.len() as u64;
        for (port, f) in frames {
            let mut p = PacketBuf::from_frame(&f);
            p.port = port; // port 3 does not exist: counted as unknown_port_drops
            b.push(p);
        }
        sw.process(1, &mut b, &mut out);
        let rx: u64 = (0..3).map(|i| sw.port_counters(PortId(i)).rx_frames).sum();
        prop_assert_eq!(rx + sw.unknown_port_drops(), n);
    }
}

fn ingress_tagged(f: &[u8], tpid: u16) -> bool {
    f.len() >= 18 && u16::from_be_bytes([f[12], f[13]]) == tpid
}
