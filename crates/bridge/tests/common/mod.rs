//! Frame builders shared by the bridge's integration tests.
#![allow(dead_code)]

use qbridge_bridge::{
    BridgeSettings, DropReason, Outputs, PortId, PortSettings, Switch, VlanProtocol,
};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::MacAddr;

pub fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

/// An Ethernet frame: dst, src, tags (tpid, tci), ethertype 0x0800, payload padded to `len`.
pub fn frame(dst: MacAddr, src: MacAddr, tags: &[(u16, u16)], len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let mut i = 0u8;
    while f.len() < len {
        f.push(i);
        i = i.wrapping_add(1);
    }
    f
}

/// The same frame with its tags replaced (same payload).
pub fn retag(f: &[u8], old_tags: usize, tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = f[..12].to_vec();
    for &(tpid, tci) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&tci.to_be_bytes());
    }
    out.extend_from_slice(&f[12 + 4 * old_tags..]);
    out
}

pub struct Rig {
    pub sw: Switch,
    pub out: Outputs,
}

impl Rig {
    pub fn new() -> Rig {
        Rig {
            sw: Switch::new(),
            out: Outputs::new(),
        }
    }

    pub fn device(&mut self, name: &str) -> PortId {
        self.sw
            .add_port(name, "mem", PortSettings::default())
            .unwrap()
    }

    pub fn bridge(&mut self, name: &str, protocol: VlanProtocol) {
        let s = BridgeSettings {
            vlan_filtering: true,
            vlan_protocol: protocol,
            ..Default::default()
        };
        self.sw.add_bridge(name, s).unwrap();
    }

    pub fn enslave(&mut self, p: PortId, br: &str) {
        let b = self.sw.bridge_id(br).unwrap();
        self.sw.set_master(p, Some(b)).unwrap();
    }

    /// Frames in from the queues of `frames` (one batch); what left each queue, by port id.
    pub fn send(&mut self, frames: &[(PortId, Vec<u8>)]) -> Vec<Vec<Vec<u8>>> {
        let mut b = Batch::default();
        for (p, f) in frames {
            let mut pkt = PacketBuf::from_frame(f);
            pkt.port = p.0;
            b.push(pkt);
        }
        self.sw.process(1, &mut b, &mut self.out);
        let mut res = Vec::new();
        for (i, q) in self.out.ports.iter_mut().enumerate() {
            let frames: Vec<Vec<u8>> = q
                .drain()
                .map(|p| {
                    assert_eq!(p.port as usize, i, "buffer port is its queue");
                    p.frame().to_vec()
                })
                .collect();
            res.push(frames);
        }
        res
    }

    pub fn drops(&self, p: PortId, r: DropReason) -> u64 {
        self.sw.port_counters(p).drops[r as usize]
    }
}

pub fn only(out: &[Vec<Vec<u8>>], p: PortId) -> Vec<Vec<u8>> {
    for (i, q) in out.iter().enumerate() {
        if i != p.0 as usize {
            assert!(q.is_empty(), "unexpected frames on port {i}: {q:02x?}");
        }
    }
    out.get(p.0 as usize).cloned().unwrap_or_default()
}

pub fn nothing(out: &[Vec<Vec<u8>>]) {
    for (i, q) in out.iter().enumerate() {
        assert!(q.is_empty(), "unexpected frames on port {i}");
    }
}
