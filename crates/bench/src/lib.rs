//! In-memory benchmark of the forwarding core: no I/O, just `Switch::process` on batches.
//!
//! Each scenario builds a switch, learns `macs` addresses on the destination side, then drives
//! a ring of pre-built frames through the core in batches. A measured iteration is what a port
//! loop does per batch: copy each frame into a pool buffer (the receive copy), `process`, and
//! hand every output buffer back to the pool (the transmit). Figures are wall-clock; for
//! instruction counts run one case under callgrind (see `scripts/bench-instructions.sh`), which
//! is repeatable where timings on a shared 2-core machine are not.

use qbridge_bridge::{BridgeSettings, Outputs, PortId, PortSettings, Switch, VlanProtocol};
use qbridge_packet::{Batch, BufPool};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The forwarding cases of issue 2 section 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// 802.1Q bridge: untagged frames in on an access port, out tagged on a trunk.
    AccessToTrunk,
    /// 802.1ad bridge: C-tagged frames in on a customer port, out with an S-tag pushed.
    CustomerToProvider,
    /// 802.1ad bridge: S+C-tagged frames in on the provider port, S-tag popped to the customer.
    ProviderToCustomer,
    /// 802.1Q bridge: tagged frames across all configured VLANs, trunk to trunk (tag rewrite).
    TrunkToTrunk,
    /// 802.1Q bridge: broadcast from one port to 8 others.
    Broadcast8,
}

impl Case {
    pub const ALL: [Case; 5] = [
        Case::AccessToTrunk,
        Case::CustomerToProvider,
        Case::ProviderToCustomer,
        Case::TrunkToTrunk,
        Case::Broadcast8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::AccessToTrunk => "access-to-trunk",
            Case::CustomerToProvider => "customer-to-provider",
            Case::ProviderToCustomer => "provider-to-customer",
            Case::TrunkToTrunk => "trunk-to-trunk",
            Case::Broadcast8 => "broadcast-8",
        }
    }

    pub fn from_name(s: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One benchmark configuration.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Params {
    pub case: Case,
    /// VLANs configured on the trunk ports (1 or up to 4094).
    pub vlans: u16,
    /// Addresses learned before measuring.
    pub macs: u32,
    pub batch: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    #[serde(flatten)]
    pub params: Params,
    pub frames_in: u64,
    pub frames_out: u64,
    pub seconds: f64,
    pub frames_per_sec: f64,
    pub ns_per_frame: f64,
    /// Ingress frame size in bytes.
    pub frame_len: usize,
}

const RING: usize = 4096;
const FRAME_LEN: usize = 64;

fn mac_of(i: u32, side: u8) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, side, b[0], b[1], b[2], b[3]]
}

fn frame(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_LEN + 8);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    f.resize(FRAME_LEN, 0x5a);
    f
}

/// A built scenario: the switch, the ingress port and the ring of frames to send.
pub struct Scenario {
    pub switch: Switch,
    pub ingress: PortId,
    pub frames: Vec<Vec<u8>>,
    pub params: Params,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("params", &self.params)
            .finish()
    }
}

fn vid_of(i: usize, vlans: u16) -> u16 {
    (i % vlans as usize) as u16 + 1
}

/// Builds the switch and frame ring for `p`.
pub fn build(p: Params) -> Scenario {
    let vlans = p.vlans.clamp(1, 4094);
    let protocol = match p.case {
        Case::CustomerToProvider | Case::ProviderToCustomer => VlanProtocol::Dot1Ad,
        _ => VlanProtocol::Dot1Q,
    };
    let mut sw = Switch::new();
    let settings = BridgeSettings {
        vlan_filtering: true,
        vlan_protocol: protocol,
        default_pvid: 0,
        fdb_max_entries: p
            .macs
            .saturating_mul(2)
            .clamp(1 << 16, qbridge_bridge::config::FDB_LIMIT_MAX_ENTRIES),
        ..Default::default()
    };
    let br = sw.add_bridge("br0", settings).expect("bridge");
    let nports = if p.case == Case::Broadcast8 { 9 } else { 2 };
    let ports: Vec<PortId> = (0..nports)
        .map(|i| {
            let id = sw
                .add_port(&format!("p{i}"), "mem", PortSettings::default())
                .expect("port");
            sw.set_master(id, Some(br)).expect("attach");
            id
        })
        .collect();
    // Port 0 is where measured frames enter; port 1 (or 1..=8) where they leave. The access or
    // customer side is pvid 1 (access-to-trunk, customer) or a trunk, per case.
    let access_side = match p.case {
        Case::AccessToTrunk | Case::CustomerToProvider => Some(ports[0]),
        Case::ProviderToCustomer => Some(ports[1]),
        Case::TrunkToTrunk | Case::Broadcast8 => None,
    };
    let trunks: Vec<PortId> = ports
        .iter()
        .copied()
        .filter(|&q| Some(q) != access_side)
        .collect();
    for &t in &trunks {
        sw.vlan_add(t, 1, vlans as u32, false, false)
            .expect("trunk vlans");
    }
    if let Some(a) = access_side {
        sw.vlan_add(a, 1, 1, true, true).expect("access vlan");
    }

    // Learn `macs` addresses on the egress side, spread over the configured VLANs where the
    // egress side is a trunk carrying them all.
    let mut out = Outputs::new();
    let egress = ports[1];
    let spread = matches!(p.case, Case::TrunkToTrunk);
    let mut batch = Batch::with_capacity(256);
    let mut pool = BufPool::new(512);
    for chunk in (0..p.macs).collect::<Vec<_>>().chunks(256) {
        for &i in chunk {
            let vid = if spread { vid_of(i as usize, vlans) } else { 1 };
            let src = mac_of(i, 0xee);
            let f = if access_side == Some(egress) {
                frame([0xff; 6], src, &[])
            } else {
                frame([0xff; 6], src, &[(protocol.tpid().0, vid)])
            };
            let mut b = pool.get();
            b.set_frame(&f);
            b.port = egress.0;
            batch.push(b);
        }
        sw.process(0, &mut batch, &mut out);
        for b in out.ports.iter_mut() {
            for pkt in b.drain() {
                pool.put(pkt);
            }
        }
    }

    let frames = (0..RING)
        .map(|i| {
            let dst_i = if p.macs == 0 {
                0
            } else {
                (i as u64 * 2_654_435_761 % p.macs as u64) as u32
            };
            let src = mac_of(i as u32 % 64, 0x11);
            match p.case {
                Case::AccessToTrunk => frame(mac_of(dst_i, 0xee), src, &[]),
                Case::CustomerToProvider => frame(mac_of(dst_i, 0xee), src, &[(0x8100, 10)]),
                Case::ProviderToCustomer => {
                    frame(mac_of(dst_i, 0xee), src, &[(0x88a8, 1), (0x8100, 10)])
                }
                Case::TrunkToTrunk => {
                    let vid = vid_of(dst_i as usize, vlans);
                    frame(mac_of(dst_i, 0xee), src, &[(0x8100, vid)])
                }
                Case::Broadcast8 => frame([0xff; 6], src, &[(0x8100, vid_of(i, vlans))]),
            }
        })
        .collect();
    Scenario {
        switch: sw,
        ingress: ports[0],
        frames,
        params: p,
    }
}

/// Runs `frames` frames of the scenario (rounded up to whole batches); returns frames out.
pub fn drive(s: &mut Scenario, out: &mut Outputs, batch: &mut Batch, frames: u64) -> (u64, u64) {
    let bs = s.params.batch.max(1);
    let mut sent = 0u64;
    let mut got = 0u64;
    let mut ring = 0usize;
    let mut now = 1_000_000u64;
    while sent < frames {
        out.pool.get_into(batch, bs);
        for b in batch.pkts.iter_mut() {
            b.set_frame(&s.frames[ring]);
            b.port = s.ingress.0;
            ring = (ring + 1) & (RING - 1);
        }
        now += 1000;
        s.switch.process(now, batch, out);
        sent += bs as u64;
        for port in out.ports.iter_mut() {
            got += port.len() as u64;
            out.pool.put_all(port);
        }
    }
    (sent, got)
}

/// Builds and measures one configuration for about `duration`.
pub fn run(p: Params, duration: Duration) -> Figures {
    let mut s = build(p);
    let mut out = Outputs::new();
    let mut batch = Batch::with_capacity(p.batch.max(1));
    // Warm up: fill the pool, fault in the table, settle the caches.
    drive(&mut s, &mut out, &mut batch, 200_000);
    let mut total_in = 0;
    let mut total_out = 0;
    let start = Instant::now();
    let mut elapsed = Duration::ZERO;
    while elapsed < duration {
        let (i, o) = drive(&mut s, &mut out, &mut batch, 100_000);
        total_in += i;
        total_out += o;
        elapsed = start.elapsed();
    }
    let secs = elapsed.as_secs_f64();
    Figures {
        params: p,
        frames_in: total_in,
        frames_out: total_out,
        seconds: secs,
        frames_per_sec: total_in as f64 / secs,
        ns_per_frame: secs * 1e9 / total_in as f64,
        frame_len: s.frames[0].len(),
    }
}
