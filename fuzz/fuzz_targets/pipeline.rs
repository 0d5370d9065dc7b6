//! The forwarding pipeline on arbitrary configuration and frames: the first bytes configure a
//! bridge and up to 6 ports (protocol, filtering, TPIDs, memberships, flags, MTU, envelope,
//! limits), the rest is a stream of frames with ingress ports and time steps. Nothing may panic,
//! every frame must be accounted for (received on a port or counted as unknown), and no frame
//! may leave on a port that is not a member of any VLAN on a filtering bridge.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qbridge_bridge::{
    BridgeSettings, Outputs, PcpMode, PortSettings, PvlanRole, Switch, VidList, VlanMode,
    VlanModeKind, VlanProtocol,
};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::Tpid;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u8();
    let filtering = flags & 1 != 0;
    let settings = BridgeSettings {
        vlan_filtering: filtering,
        vlan_protocol: if flags & 2 != 0 { VlanProtocol::Dot1Ad } else { VlanProtocol::Dot1Q },
        default_pvid: (b.u8() % 4) as u16,
        fdb_max_learned: (b.u8() % 8) as u32,
        fdb_max_entries: (b.u8() % 16) as u32 + 1,
        group_fwd_mask: b.u16() & !0x0007,
        // 0 (hub: nothing learned) or 1-4 s: the range the bridge accepts, short enough to age.
        ageing_time_ns: (b.u8() % 5) as u64 * 1_000_000_000,
        learn_inner_vid: flags & 4 != 0,
        // Spanning tree on: every port starts Discarding (the `stp_discarding` drops).
        stp: flags & 8 != 0,
    };
    let mut sw = Switch::new();
    let br = sw.add_bridge("br0", settings).expect("valid settings");
    let nports = (b.u8() % 6) as usize + 1;
    let mut ids = Vec::new();
    for i in 0..nports {
        let f = b.u8();
        let tpid = match b.u8() % 5 {
            0 => None,
            1 => Some(Tpid(0x8100)),
            2 => Some(Tpid(0x88a8)),
            3 => Some(Tpid(0x9100)),
            _ => Some(Tpid(0xffff)),
        };
        let ps = PortSettings {
            learning: f & 1 != 0,
            flood: f & 2 != 0,
            mcast_flood: f & 4 != 0,
            bcast_flood: f & 8 != 0,
            isolated: f & 16 != 0,
            hairpin: f & 32 != 0,
            up: f & 64 == 0,
            mtu: 68 + (b.u16() as u32 % 2000),
            envhdr_len: match b.u8() % 3 {
                0 => None,
                n => Some(n as u32 * 4),
            },
            tpid,
            fdb_max_learned: (b.u8() % 4) as u32,
            pcp_mode: match b.u8() % 4 {
                0 => PcpMode::Keep,
                1 => PcpMode::Copy,
                2 => PcpMode::Fixed(b.u8() % 8),
                _ => PcpMode::Map([7, 6, 5, 4, 3, 2, 1, 0]),
            },
            default_pcp: b.u8() % 8,
            locked: f & 128 != 0,
            mab: f & 128 != 0 && f & 1 != 0 && b.u8() % 2 == 0,
        };
        let id = sw.add_port(&format!("p{i}"), "fuzz", ps).expect("valid port");
        if b.u8() % 8 != 0 {
            sw.set_master(id, Some(br)).expect("attach");
            for _ in 0..(b.u8() % 4) {
                let vid = (b.u8() % 6) as u32 + 1;
                let m = b.u8();
                let _ = sw.vlan_add(id, vid, vid, m & 1 != 0, m & 2 != 0);
                // The provider features of docs/semantics.md §G-§K, now and then.
                match m >> 4 {
                    0 => {
                        let cvlans = VidList::new(vec![(0, 0), (vid as u16, vid as u16)]);
                        let _ = sw.set_vlan_mode(
                            id,
                            VlanMode {
                                mode: VlanModeKind::Dot1qTunnel,
                                tag: Some(vid as u16),
                                trunks: None,
                                cvlans: (m & 4 != 0).then_some(cvlans),
                            },
                        );
                    }
                    1 => {
                        let role = match m & 3 {
                            0 => PvlanRole::Isolated,
                            1 => PvlanRole::Promiscuous,
                            n => PvlanRole::Community(u16::from(n)),
                        };
                        let _ = sw.set_pvlan(id, vid, vid, Some(role));
                    }
                    2 => {
                        let _ = sw.vlan_map_add(id, (m % 6) as u16 + 1, vid as u16);
                    }
                    3 => {
                        // 2:1 and 2:2 maps of small VIDs, so the frames' tags hit them.
                        let map = qbridge_bridge::TagMap {
                            svid: (m % 4) as u16 + 1,
                            cvid: (m >> 2) as u16 % 4 + 1,
                            vid: vid as u16,
                            inner: (m & 2 != 0).then_some((m & 1) as u16 + 1),
                        };
                        let _ = sw.tag_map_add(id, map);
                    }
                    _ => {}
                }
            }
        }
        ids.push(id);
    }
    // A mirror session now and then (`docs/semantics.md` §M): p0 copied to the last port,
    // which then also sends copies whatever its VLANs.
    let mirror_dst = (flags & 8 != 0 && nports > 1).then(|| ids[nports - 1]);
    if mirror_dst.is_some() {
        let spec = qbridge_bridge::MirrorSpec {
            name: "m0".to_string(),
            src: vec!["p0".to_string()],
            direction: qbridge_bridge::MirrorDirection::Both,
            vids: (flags & 16 != 0).then(|| VidList::new(vec![(1, 2)])),
            dst: qbridge_bridge::MirrorDst::Port(format!("p{}", nports - 1)),
            rspan: (flags & 32 != 0).then_some(3),
        };
        let _ = sw.mirror_add(&spec);
    }
    let mut out = Outputs::new();
    let mut now = 0u64;
    let mut sent = 0u64;
    while !b.0.is_empty() {
        let mut batch = Batch::default();
        let n = (b.u8() % 40) as usize + 1;
        for _ in 0..n {
            let port = b.u8() % (nports as u8 + 1);
            let len = b.u8() as usize;
            let mut p = PacketBuf::from_frame(b.take(len));
            p.port = port as u16;
            batch.push(p);
            sent += 1;
        }
        now += b.u8() as u64 * 10_000_000;
        sw.process(now, &mut batch, &mut out);
        sw.age(now);
        for &e in &ids {
            let member_any = (1..=6).any(|v| sw.vlan_membership(e, v).is_some());
            for _ in out.batch_mut(e).drain() {
                assert!(
                    !filtering || member_any || mirror_dst == Some(e),
                    "frame left port {e:?} which is in no VLAN"
                );
            }
        }
    }
    let rx: u64 = ids.iter().map(|&p| sw.port_counters(p).rx_frames).sum();
    assert_eq!(rx + sw.unknown_port_drops(), sent);
});
