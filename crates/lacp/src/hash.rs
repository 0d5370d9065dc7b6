//! The transmit flow hash of a bond: [`flow_hash`]`(frame, policy)`, ip-link's
//! `xmit_hash_policy` words.
//!
//! Every policy reads through the whole VLAN tag stack (any well-known TPID: 0x8100, 0x88a8,
//! 0x9100, 0x9200, 0x9300; up to `qbridge_wire::MAX_TAGS` tags, the pipeline's limit) with
//! `qbridge_wire::parse_headers`, so the flows of one C-VLAN carried inside one S-VLAN spread
//! over the members like untagged flows. What each policy mixes:
//!
//! - `layer2`: destination and source MAC and the EtherType after the tags;
//! - `layer2+vlan`: those and the outer VID;
//! - `layer3+4`: IPv4/IPv6 source and destination, the protocol, and for TCP/UDP in an
//!   unfragmented packet the two ports (fragments hash on addresses only, so all pieces of a
//!   datagram take one member); non-IP frames fall back to `layer2`;
//! - `inner-layer3+4`: as `layer3+4`, but through one level of encapsulation first: VXLAN
//!   (UDP port 4789: the inner Ethernet frame, its tags included) and IP-in-IP / IPv6-in-IP
//!   (protocol 4 / 41); otherwise as `layer3+4`.
//!
//! A flow (same headers) always hashes to the same value, across runs and machines: the mix
//! is a fixed multiply-xorshift with a murmur3 finaliser. Total on any input: a truncated or
//! malformed header falls back to the fields read so far (at worst the MACs, at worst of all
//! nothing: the hash of no fields). Cost: one header walk, no allocation.

use qbridge_wire::{parse_headers, EtherType, Fragment, IpProtocol, Mixer, Tpid};
use serde::Serialize;

/// ip-link(8)'s `xmit_hash_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub enum HashPolicy {
    #[default]
    Layer2,
    Layer2Vlan,
    Layer34,
    InnerLayer34,
}

impl HashPolicy {
    /// The ip-link word.
    pub const fn word(self) -> &'static str {
        match self {
            HashPolicy::Layer2 => "layer2",
            HashPolicy::Layer2Vlan => "layer2+vlan",
            HashPolicy::Layer34 => "layer3+4",
            HashPolicy::InnerLayer34 => "inner-layer3+4",
        }
    }

    /// Parses an ip-link word.
    pub fn from_word(word: &str) -> Option<HashPolicy> {
        [
            HashPolicy::Layer2,
            HashPolicy::Layer2Vlan,
            HashPolicy::Layer34,
            HashPolicy::InnerLayer34,
        ]
        .into_iter()
        .find(|p| p.word() == word)
    }
}

const VXLAN_PORT: u16 = 4789;
const VXLAN_HDR_LEN: usize = 8;

/// The 32-bit transmit hash of `frame` (Ethernet, no FCS) under `policy`.
pub fn flow_hash(frame: &[u8], policy: HashPolicy) -> u32 {
    // A seed of its own: bond member choice spreads independently of the worker hash.
    let mut m = Mixer::with_seed(0x2545_f491_4f6c_dd1d);
    match policy {
        HashPolicy::Layer2 => mix_l2(frame, VlanWord::Without, &mut m),
        HashPolicy::Layer2Vlan => mix_l2(frame, VlanWord::OuterVid, &mut m),
        HashPolicy::Layer34 => mix_l34(frame, Encap::Outer, &mut m),
        HashPolicy::InnerLayer34 => mix_l34(frame, Encap::Inner, &mut m),
    }
    m.finish()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum VlanWord {
    Without,
    OuterVid,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encap {
    Outer,
    Inner,
}

fn mix_l2(frame: &[u8], vlan: VlanWord, m: &mut Mixer) {
    if let Some(macs) = frame.get(..12) {
        m.add_bytes(macs);
    }
    if let Ok(h) = parse_headers(frame, Tpid::is_well_known) {
        m.add(u64::from(u16::from(h.ethertype)));
        if vlan == VlanWord::OuterVid {
            if let Some(tag) = h.tags.outer() {
                m.add(u64::from(tag.tci.vid().get()) | 1 << 16);
            }
        }
    } else if let Some(t) = frame.get(12..14) {
        m.add(u64::from(u16::from_be_bytes([t[0], t[1]])));
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]))
}

fn mix_l34(frame: &[u8], encap: Encap, m: &mut Mixer) {
    let h = match parse_headers(frame, Tpid::is_well_known) {
        Ok(h) => h,
        Err(_) => return mix_l2(frame, VlanWord::Without, m),
    };
    let l3 = frame.get(h.l3_offset..).unwrap_or_default();
    let addrs = match h.ethertype {
        EtherType::Ipv4 => l3.get(12..20),
        EtherType::Ipv6 => l3.get(8..40),
        _ => None,
    };
    let (Some(addrs), Some(proto)) = (addrs, h.l4_proto) else {
        return mix_l2(frame, VlanWord::Without, m);
    };
    if encap == Encap::Inner && h.fragment == Fragment::Whole {
        if let Some(l4) = h.l4_offset {
            match proto {
                IpProtocol::Udp if be16(frame, l4 + 2) == Some(VXLAN_PORT) => {
                    if let Some(inner) = h
                        .payload_offset
                        .and_then(|p| frame.get(p + VXLAN_HDR_LEN..h.l3_end))
                    {
                        if inner.len() >= 14 {
                            return mix_l34(inner, Encap::Outer, m);
                        }
                    }
                }
                _ => {
                    let inner = frame.get(l4..h.l3_end).unwrap_or_default();
                    match u8::from(proto) {
                        4 if mix_raw_ip(inner, RawIp::V4, m) => return,
                        41 if mix_raw_ip(inner, RawIp::V6, m) => return,
                        _ => {}
                    }
                }
            }
        }
    }
    m.add_bytes(addrs);
    m.add(u64::from(u8::from(proto)));
    if h.fragment == Fragment::Whole && matches!(proto, IpProtocol::Tcp | IpProtocol::Udp) {
        if let Some(ports) = h.l4_offset.and_then(|o| frame.get(o..o + 4)) {
            m.add(u64::from(u32::from_be_bytes([
                ports[0], ports[1], ports[2], ports[3],
            ])));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RawIp {
    V4,
    V6,
}

/// Mixes the 5-tuple of an IP packet that starts at `ip[0]` (the inner packet of IP-in-IP).
/// IPv6 extension headers are not walked: the ports are read only when the next header is
/// TCP or UDP itself. Returns false, mixing nothing, when the header is not there.
fn mix_raw_ip(ip: &[u8], version: RawIp, m: &mut Mixer) -> bool {
    let (addrs, proto, l4, whole) = match version {
        RawIp::V4 => {
            let Some(&vihl) = ip.first() else {
                return false;
            };
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return false;
            }
            let frag = be16(ip, 6).unwrap_or(0);
            (ip.get(12..20), ip.get(9).copied(), ihl, frag & 0x3fff == 0)
        }
        RawIp::V6 => {
            if ip.first().map(|b| b >> 4) != Some(6) {
                return false;
            }
            (ip.get(8..40), ip.get(6).copied(), 40, true)
        }
    };
    let (Some(addrs), Some(proto)) = (addrs, proto) else {
        return false;
    };
    m.add_bytes(addrs);
    m.add(u64::from(proto));
    if whole && matches!(proto, 6 | 17) {
        if let Some(p) = ip.get(l4..l4 + 4) {
            m.add(u64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]])));
        }
    }
    true
}
