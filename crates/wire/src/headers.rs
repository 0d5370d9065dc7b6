//! One pass over a frame's headers: the tag stack, then IPv4 or IPv6 (extension headers walked),
//! then TCP, UDP or ICMP. Offloads (checksum completion, GSO) and flow hashing read offsets from
//! here; nothing downstream computes "14 + 4".
//!
//! [`parse_headers`] validates every header it recognises with the module's `new_checked`, so
//! each offset it returns is a valid start for the matching view. It does not verify checksums
//! (offloaded frames carry partial ones). Cost: a few dozen byte reads; no allocation; total
//! (never panics) on any input.
//!
//! [`Layout`] is what one such pass learnt, in two bytes a packet buffer carries beside the
//! frame (`qbridge_packet::PacketBuf` keeps one): where L3 starts, where L4 starts and which
//! IP and transport protocols they are, for the frames offloads care about (unfragmented TCP
//! or UDP over IPv4/IPv6). [`Layout::resolve`] turns it back into the [`Headers`]
//! `parse_headers` would return, reading only the tag TPIDs (the reader's tag set may differ
//! from the one the layout was recorded with) and three length fields, never validating an IP
//! or L4 header again.
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

/// Where a frame's headers are, packed into two bytes for carrying beside the frame, so a frame
/// is parsed once and every later reader gets its [`Headers`] from here ([`Layout::resolve`]).
///
/// Recorded ([`Layout::record`]) only for what offloads read: IPv4 or IPv6, not a fragment,
/// TCP or UDP, with L3 within 255 bytes of the buffer's start and L4 within 252 bytes of L3;
/// any other frame has [`Layout::UNKNOWN`] and is parsed by whoever needs it.
///
/// Offsets are kept relative to the *buffer* the frame lies in (`base` is the frame's offset
/// in it), not to the frame's first byte: pushing or popping a VLAN tag moves the bytes in
/// front of the tag and never the L3 header, so a layout stays true through every tag push
/// and pop in front of L3 without being touched (the tag depth is where L3 is, less 14, over
/// 4). Whoever moves the L3 header in the buffer, or changes a byte from L3 on other than a
/// checksum field, or the frame's length, must drop the layout; `PacketBuf` does.
///
/// Bits: 0-7 L3's offset in the buffer (0: unknown), 8-13 L4's distance from L3 in 4-byte
/// words, 14 UDP (else TCP), 15 IPv6 (else IPv4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Layout(u16);

impl Layout {
    /// Nothing recorded: the frame has to be parsed.
    pub const UNKNOWN: Layout = Layout(0);
    const UDP: u16 = 1 << 14;
    const IPV6: u16 = 1 << 15;

    /// The layout of a frame at offset `base` of its buffer whose headers are `h`, or
    /// [`Layout::UNKNOWN`] if it is not one a layout describes (see the type's doc).
    pub fn record(h: &Headers, base: usize) -> Layout {
        let family = match h.ethertype {
            EtherType::Ipv4 => 0,
            EtherType::Ipv6 => Self::IPV6,
            _ => return Layout::UNKNOWN,
        };
        let proto = match h.l4_proto {
            Some(Protocol::Tcp) => 0,
            Some(Protocol::Udp) => Self::UDP,
            _ => return Layout::UNKNOWN,
        };
        let (Some(l4), Some(_), Fragment::Whole) = (h.l4_offset, h.payload_offset, h.fragment)
        else {
            return Layout::UNKNOWN;
        };
        let l3 = base + h.l3_offset;
        let words = (l4 - h.l3_offset) / 4;
        if l3 > 0xff || (l4 - h.l3_offset) % 4 != 0 || words > 0x3f {
            return Layout::UNKNOWN;
        }
        Layout(family | proto | (words as u16) << 8 | l3 as u16)
    }

    pub const fn is_known(self) -> bool {
        self.0 != 0
    }

    /// L3's offset in the buffer, when known.
    pub const fn l3_in_buffer(self) -> Option<usize> {
        match self.0 & 0xff {
            0 => None,
            l3 => Some(l3 as usize),
        }
    }

    /// The [`Headers`] of `frame` (at offset `base` of its buffer) under `is_tag`, as
    /// [`parse_headers`] would return them, when the layout holds: the tags `is_tag` accepts
    /// end where the recorded L3 starts, before the recorded IP version. `None` otherwise
    /// (unknown layout, or a reader whose tag set stops elsewhere): parse the frame.
    ///
    /// Cost: the tag walk (one TPID compare per tag) and three length fields read; the IP
    /// and transport headers are not validated again (they were when the layout was recorded,
    /// and nothing but a checksum field has changed in them since).
    pub fn resolve(
        self,
        frame: &[u8],
        base: usize,
        is_tag: impl Fn(Tpid) -> bool,
    ) -> Option<Headers> {
        let l3_abs = self.l3_in_buffer()?;
        let eth = Frame::new_checked(frame).ok()?;
        let (tags, ethertype, l3) = eth.tags(is_tag).ok()?;
        let ethertype = EtherType::from(ethertype);
        let want = if self.0 & Self::IPV6 != 0 {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        };
        if base + l3 != l3_abs || ethertype != want {
            return None;
        }
        let l4 = l3 + usize::from(self.0 >> 8 & 0x3f) * 4;
        let l3_end = match ethertype {
            EtherType::Ipv4 => l3 + usize::from(be16(frame.get(l3 + 2..l3 + 4)?, 0)),
            _ => l3 + ipv6::HEADER_LEN + usize::from(be16(frame.get(l3 + 4..l3 + 6)?, 0)),
        };
        let (proto, l4_hdr) = if self.0 & Self::UDP != 0 {
            (Protocol::Udp, udp::HEADER_LEN)
        } else {
            (Protocol::Tcp, usize::from(frame.get(l4 + 12)? >> 4) * 4)
        };
        let payload = l4 + l4_hdr;
        if payload > l3_end || l3_end > frame.len() {
            return None;
        }
        Some(Headers {
            tags,
            ethertype,
            l3_offset: l3,
            l3_end,
            l4_proto: Some(proto),
            l4_offset: Some(l4),
            payload_offset: Some(payload),
            fragment: Fragment::Whole,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 802.1ad + 802.1Q, IPv4 (20 bytes), TCP (20 bytes), 4 bytes of payload.
    fn qinq_tcp(proto: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&[0x88, 0xa8, 0, 100, 0x81, 0x00, 0, 10, 0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 44, 0, 1, 0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let mut l4 = [0u8; 20];
        l4[12] = 0x50;
        if proto == 17 {
            l4[4..6].copy_from_slice(&24u16.to_be_bytes());
        }
        f.extend_from_slice(&l4);
        f.extend_from_slice(&[1, 2, 3, 4]);
        f
    }

    #[test]
    fn layout_records_and_resolves() {
        let f = qinq_tcp(6);
        let h = parse_headers(&f, Tpid::is_well_known).unwrap();
        let l = Layout::record(&h, 64);
        assert_eq!(l.l3_in_buffer(), Some(64 + 22));
        assert_eq!(l.resolve(&f, 64, Tpid::is_well_known), Some(h));
        // Another tag set that stops at the 802.1Q tag: not this layout's frame.
        assert_eq!(l.resolve(&f, 64, |t| t == Tpid::DOT1AD), None);
        // The frame 4 bytes further on in its buffer (a tag pushed in front): L3 moved.
        assert_eq!(l.resolve(&f, 68, Tpid::is_well_known), None);
        // The outer tag popped, the frame 4 bytes further on: L3 where it was.
        let mut popped = f.clone();
        popped.drain(12..16);
        assert_eq!(
            l.resolve(&popped, 68, Tpid::is_well_known),
            Some(parse_headers(&popped, Tpid::is_well_known).unwrap())
        );
        // UDP too; ICMP, other protocols, non-IP and far-off L3 are not recorded.
        let u = qinq_tcp(17);
        let hu = parse_headers(&u, Tpid::is_well_known).unwrap();
        assert_eq!(
            Layout::record(&hu, 0).resolve(&u, 0, Tpid::is_well_known),
            Some(hu)
        );
        let icmp = qinq_tcp(1);
        let hi = parse_headers(&icmp, Tpid::is_well_known).unwrap();
        assert_eq!(Layout::record(&hi, 0), Layout::UNKNOWN);
        let other = parse_headers(&f, |_| false).unwrap();
        assert_eq!(Layout::record(&other, 0), Layout::UNKNOWN);
        assert_eq!(Layout::record(&h, 240), Layout::UNKNOWN);
        assert_eq!(Layout::UNKNOWN.resolve(&f, 64, Tpid::is_well_known), None);
    }
}
