//! One pass over a frame's headers: the tag stack, then IPv4 or IPv6 (extension headers walked),
//! then TCP, UDP or ICMP. Offloads (checksum completion, GSO) and flow hashing read offsets from
//! here; nothing downstream computes "14 + 4".
//!
//! [`parse_headers`] validates every header it recognises with the module's `new_checked`, so
//! each offset it returns is a valid start for the matching view. It does not verify checksums
//! (offloaded frames carry partial ones). Cost: a few dozen byte reads; no allocation; total
//! (never panics) on any input.
//!
//! [`flow_hash`] is the receive-side spreading hash: it reads through *all* well-known VLAN
//! tags to the L3/L4 five-tuple, so Q-in-Q traffic spreads across workers like untagged traffic
//! (RSS/RPS that stop at the first tag put every flow of a service VLAN on one queue). It is not
//! symmetric and not Toeplitz; it is a fixed multiply-xorshift mix, stable across runs.

use crate::ethernet::{EtherType, Frame};
use crate::ip::{be16, Protocol};
use crate::vlan::{TagStack, Tpid};
use crate::{icmp, ipv4, ipv6, tcp, udp, Error, Result};

/// Whether the L3 packet is a fragment, and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Not fragmented.
    Whole,
    /// The first fragment: the L4 header is here, but L4 lengths cover the whole datagram.
    First,
    /// A later fragment: no L4 header.
    Later,
}

/// Where each header of a frame starts. Offsets count from the first byte of the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Headers {
    /// All tags `is_tag` accepted, outermost first.
    pub tags: TagStack,
    /// The EtherType after the tags: the L3 protocol.
    pub ethertype: EtherType,
    /// Start of the L3 header (14 + 4 per tag).
    pub l3_offset: usize,
    /// End of the L3 packet by its own length field (IPv4 total length, IPv6 payload length),
    /// so Ethernet padding is excluded; the frame length for non-IP frames.
    pub l3_end: usize,
    /// The upper-layer protocol for IPv4/IPv6 (after IPv6 extension headers); `None` otherwise.
    pub l4_proto: Option<Protocol>,
    /// Start of the L4 header, when it is in this frame (IP, not a later fragment, not
    /// "no next header").
    pub l4_offset: Option<usize>,
    /// Start of the L4 payload, for TCP, UDP, ICMP and ICMPv6 in unfragmented packets.
    pub payload_offset: Option<usize>,
    pub fragment: Fragment,
}

impl Headers {
    /// Bytes of all headers through L4: where the payload starts (GSO's `hdr_len`).
    pub fn header_len(&self) -> Option<usize> {
        self.payload_offset
    }

    pub fn is_ipv4(&self) -> bool {
        self.ethertype == EtherType::Ipv4
    }

    pub fn is_ipv6(&self) -> bool {
        self.ethertype == EtherType::Ipv6
    }
}

/// Walks the headers of `frame` (an Ethernet frame without FCS). `is_tag` decides which type
/// fields are VLAN tags (a port's TPID set, or [`Tpid::is_well_known`]).
///
/// Errors: `Truncated`/`TooManyTags` from the Ethernet header and tag stack; `Truncated` or
/// `Malformed` from an IPv4/IPv6 header, an IPv6 extension chain, or a TCP/UDP/ICMP header of an
/// unfragmented packet. Frames with other EtherTypes and IP packets with other protocols are
/// `Ok` with the offsets that are known.
pub fn parse_headers(frame: &[u8], is_tag: impl Fn(Tpid) -> bool) -> Result<Headers> {
    let eth = Frame::new_checked(frame)?;
    let (tags, ethertype, l3_offset) = eth.tags(is_tag)?;
    let ethertype = EtherType::from(ethertype);
    let mut h = Headers {
        tags,
        ethertype,
        l3_offset,
        l3_end: frame.len(),
        l4_proto: None,
        l4_offset: None,
        payload_offset: None,
        fragment: Fragment::Whole,
    };
    let l3 = frame.get(l3_offset..).ok_or(Error::Truncated)?;
    let (proto, l4_rel) = match ethertype {
        EtherType::Ipv4 => {
            let p = ipv4::Packet::new_checked(l3)?;
            h.l3_end = l3_offset + usize::from(p.total_len());
            h.fragment = match (p.frag_offset_bytes(), p.more_frags()) {
                (0, false) => Fragment::Whole,
                (0, true) => Fragment::First,
                _ => Fragment::Later,
            };
            let l4 = (h.fragment != Fragment::Later).then_some(p.header_len());
            (p.protocol(), l4)
        }
        EtherType::Ipv6 => {
            let p = ipv6::Packet::new_checked(l3)?;
            h.l3_end = l3_offset + ipv6::HEADER_LEN + usize::from(p.payload_len());
            let walk = p.extensions()?;
            h.fragment = match walk.fragment {
                None => Fragment::Whole,
                Some(f) if f.offset_bytes == 0 => Fragment::First,
                Some(_) => Fragment::Later,
            };
            let l4 = walk
                .has_upper_header()
                .then_some(ipv6::HEADER_LEN + walk.upper_offset);
            (walk.upper, l4)
        }
        _ => return Ok(h),
    };
    h.l4_proto = Some(proto);
    let Some(l4_rel) = l4_rel else {
        return Ok(h);
    };
    let l4_offset = l3_offset + l4_rel;
    h.l4_offset = Some(l4_offset);
    if h.fragment != Fragment::Whole {
        return Ok(h);
    }
    let l4 = frame.get(l4_offset..h.l3_end).ok_or(Error::Truncated)?;
    let l4_hdr_len = match (proto, ethertype) {
        (Protocol::Tcp, _) => tcp::Packet::new_checked(l4)?.header_len(),
        (Protocol::Udp, _) => {
            udp::Packet::new_checked(l4)?;
            udp::HEADER_LEN
        }
        (Protocol::Icmp, EtherType::Ipv4) | (Protocol::Icmpv6, EtherType::Ipv6) => {
            icmp::Packet::new_checked(l4)?;
            icmp::HEADER_LEN
        }
        _ => return Ok(h),
    };
    h.payload_offset = Some(l4_offset + l4_hdr_len);
    Ok(h)
}

/// A 32-bit flow hash of `frame`, reading through all well-known VLAN tags (see the module
/// doc). Mixes, when present: the VIDs of the tags, the IP addresses and protocol, and the
/// TCP/UDP ports (not for fragments, whose later pieces lack them). Frames that are not IP, or
/// whose headers fail to parse, hash their MAC addresses and inner EtherType instead. Total on
/// any input.
pub fn flow_hash(frame: &[u8]) -> u32 {
    let mut m = Mixer::new();
    let h = match parse_headers(frame, Tpid::is_well_known) {
        Ok(h) => h,
        Err(_) => {
            // Still spread by addresses: a malformed frame must not pin one worker.
            if let Some(macs) = frame.get(..crate::ethernet::ADDRS_LEN) {
                m.add_bytes(macs);
            }
            return m.finish();
        }
    };
    for tag in h.tags.as_slice() {
        m.add(u64::from(tag.tci.vid().get()));
    }
    let l3 = frame.get(h.l3_offset..).unwrap_or_default();
    let addrs = match h.ethertype {
        EtherType::Ipv4 => l3.get(12..20),
        EtherType::Ipv6 => l3.get(8..40),
        _ => None,
    };
    let (Some(addrs), Some(proto)) = (addrs, h.l4_proto) else {
        m.add_bytes(frame.get(..crate::ethernet::ADDRS_LEN).unwrap_or_default());
        m.add(u64::from(u16::from(h.ethertype)));
        return m.finish();
    };
    m.add_bytes(addrs);
    m.add(u64::from(u8::from(proto)));
    if h.fragment == Fragment::Whole && matches!(proto, Protocol::Tcp | Protocol::Udp) {
        if let Some(ports) = h.l4_offset.and_then(|o| frame.get(o..o + 4)) {
            m.add(u64::from(be16(ports, 0)) << 16 | u64::from(be16(ports, 2)));
        }
    }
    m.finish()
}

/// A small multiply-xorshift accumulator (the mix of FxHash with a murmur3 finaliser): the
/// flow hashes of [`flow_hash`] and of link aggregation (`qbridge-lacp`) are built with it.
#[derive(Debug, Clone, Copy)]
pub struct Mixer(u64);

impl Mixer {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    /// The seed [`flow_hash`] starts from.
    pub fn new() -> Mixer {
        Mixer::with_seed(0x51_7cc1_b727_220a)
    }

    /// A mixer of its own seed (another hash over the same fields spreads independently).
    pub fn with_seed(seed: u64) -> Mixer {
        Mixer(seed)
    }

    /// Mixes in one 64-bit word.
    pub fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(Self::K);
    }

    /// Mixes in `b` as big-endian words, its length with the last one.
    pub fn add_bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_be_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_be_bytes(tail) ^ (rest.len() as u64) << 56);
    }

    /// The 32-bit hash (murmur3's finaliser).
    pub fn finish(self) -> u32 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x as u32
    }
}

impl Default for Mixer {
    fn default() -> Self {
        Mixer::new()
    }
}
