//! The outer headers of a VXLAN packet as they are on the underlay's wire: IPv4 (20 bytes) or
//! IPv6 (40, no extension headers), UDP (8), VXLAN (8), then the inner frame. A [`VxlanPort`]
//! lets the kernel's UDP socket build them; this codec is the same arithmetic in the open, for
//! what has no socket to lean on (an encapsulation built in place, as the fast path's will be)
//! and for reading what a port sent from a capture (`tests/netns_vxlan6.rs`).
//!
//! The UDP checksum: over IPv6 it is mandatory (RFC 8200 §8.1) and a receiver drops a zero
//! one unless it opted in (RFC 6935/6936: the kernel's `udp6zerocsumrx`, a socket's
//! `UDP_NO_CHECK6_RX`), so [`encapsulate`] computes it unless asked for zero
//! (`udp6zerocsumtx`) and [`decapsulate`] refuses a zero one unless told to accept it. Over
//! IPv4 a zero checksum means "none" (RFC 768) and is always accepted; [`encapsulate`]
//! computes one there too unless asked for zero (the kernel vxlan device's IPv4 default,
//! `noudpcsum`, is zero).
//!
//! Lengths: the outer IP and UDP lengths are 16 bits; an inner frame that does not fit is
//! refused ([`OuterError::TooLong`]), never truncated. No allocation beyond the output vector.
//!
//! [`VxlanPort`]: super::VxlanPort

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use qbridge_wire::checksum;
use qbridge_wire::vxlan::{self, Vni};
use qbridge_wire::IpProtocol;

/// Bytes of the outer IPv4 header (no options).
pub const IPV4_HDR: usize = 20;
/// Bytes of the outer IPv6 header (no extension headers).
pub const IPV6_HDR: usize = 40;
/// Bytes of the UDP header.
pub const UDP_HDR: usize = 8;

/// The outer headers' fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outer {
    /// The local VTEP; of the same family as `dst`.
    pub src: IpAddr,
    /// The remote VTEP.
    pub dst: IpAddr,
    /// The UDP source port (from the inner flow: [`vxlan::source_port`]).
    pub sport: u16,
    /// The UDP destination port (4789).
    pub dport: u16,
    /// The TTL (IPv4) or hop limit (IPv6).
    pub hop_limit: u8,
    /// The TOS (IPv4) or traffic class (IPv6) byte.
    pub tos: u8,
    /// IPv6: the flow label (20 bits; more is refused). IPv4: unused.
    pub flow_label: u32,
    /// Write a zero UDP checksum (`udp6zerocsumtx` over IPv6, `noudpcsum` over IPv4).
    pub zero_csum: bool,
}

/// What [`decapsulate`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decapsulated<'a> {
    pub outer: Outer,
    pub vni: Vni,
    /// The UDP checksum as it was on the wire (0: none).
    pub udp_checksum: u16,
    pub inner: &'a [u8],
}

/// Why a packet could not be built or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterError {
    /// `src` and `dst` of different families.
    MixedFamilies,
    /// A flow label above 20 bits.
    BadFlowLabel,
    /// The inner frame does not fit the outer 16-bit lengths.
    TooLong,
    /// Shorter than the headers, or than the lengths they state.
    Truncated,
    /// Not IPv4 or IPv6, IPv4 with options or fragmented, IPv6 with extension headers,
    /// or a bad IPv4 header checksum.
    BadIp,
    /// Not UDP.
    NotUdp,
    /// A UDP checksum that does not verify.
    BadChecksum,
    /// A zero UDP checksum over IPv6, not accepted (RFC 6935; `udp6zerocsumrx` accepts it).
    ZeroChecksum6,
    /// Not a VXLAN header (the I flag clear).
    NotVxlan,
}

impl std::fmt::Display for OuterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OuterError::MixedFamilies => "outer source and destination of different families",
            OuterError::BadFlowLabel => "flow label above 20 bits",
            OuterError::TooLong => "inner frame too long for the outer lengths",
            OuterError::Truncated => "truncated",
            OuterError::BadIp => "not a plain IPv4 or IPv6 header",
            OuterError::NotUdp => "not UDP",
            OuterError::BadChecksum => "bad UDP checksum",
            OuterError::ZeroChecksum6 => "zero UDP checksum over IPv6 (not accepted)",
            OuterError::NotVxlan => "not VXLAN",
        })
    }
}

impl std::error::Error for OuterError {}

/// Bytes of the outer IP, UDP and VXLAN headers: 36 over IPv4, 56 over IPv6 (plus the outer
/// Ethernet header's 14 on the wire: [`vxlan::IPV4_OVERHEAD`], [`vxlan::IPV6_OVERHEAD`]).
pub const fn headers_len(ipv6: bool) -> usize {
    (if ipv6 { IPV6_HDR } else { IPV4_HDR }) + UDP_HDR + vxlan::HEADER_LEN
}

/// The UDP checksum of `udp` (header with a zero checksum field, and payload) between `src`
/// and `dst`; 0 computed is sent as 0xffff (RFC 768, RFC 8200 §8.1).
pub fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> Result<u16, OuterError> {
    let len = udp.len() as u32;
    let pseudo = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_header_v4(s, d, IpProtocol::Udp, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_header_v6(s, d, IpProtocol::Udp, len),
        _ => return Err(OuterError::MixedFamilies),
    };
    let c = checksum::finish(checksum::combine(pseudo, checksum::sum(udp)));
    Ok(if c == 0 { 0xffff } else { c })
}

/// Appends the outer IP, UDP and VXLAN headers of `o` and `vni`, then `inner`, to `out`.
pub fn encapsulate(o: &Outer, vni: Vni, inner: &[u8], out: &mut Vec<u8>) -> Result<(), OuterError> {
    let v6 = match (o.src, o.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err(OuterError::MixedFamilies),
    };
    if o.flow_label > 0x000f_ffff {
        return Err(OuterError::BadFlowLabel);
    }
    let udp_len = UDP_HDR + vxlan::HEADER_LEN + inner.len();
    let ip_hdr = if v6 { IPV6_HDR } else { IPV4_HDR };
    // IPv4: the total length counts the IP header; IPv6: the payload length does not.
    let ip_len = if v6 { udp_len } else { ip_hdr + udp_len };
    if ip_len > usize::from(u16::MAX) {
        return Err(OuterError::TooLong);
    }
    let start = out.len();
    match (o.src, o.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = [0u8; IPV4_HDR];
            h[0] = 0x45;
            h[1] = o.tos;
            h[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            h[6] = 0x40; // DF: a VTEP never fragments (docs/semantics.md §U)
            h[8] = o.hop_limit;
            h[9] = u8::from(IpProtocol::Udp);
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&h);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let first = (6u32 << 28) | (u32::from(o.tos) << 20) | o.flow_label;
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&(ip_len as u16).to_be_bytes());
            out.push(u8::from(IpProtocol::Udp));
            out.push(o.hop_limit);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        _ => unreachable!("families checked above"),
    }
    let udp_at = out.len();
    out.extend_from_slice(&o.sport.to_be_bytes());
    out.extend_from_slice(&o.dport.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    let mut h = [0u8; vxlan::HEADER_LEN];
    // Cannot fail: the buffer is a header's length.
    let _ = vxlan::Repr { vni }.emit(&mut h);
    out.extend_from_slice(&h);
    out.extend_from_slice(inner);
    if !o.zero_csum {
        let c = udp_checksum(o.src, o.dst, &out[udp_at..])?;
        out[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
    }
    debug_assert_eq!(out.len() - start, ip_hdr + udp_len);
    Ok(())
}

/// Reads an outer IPv4 or IPv6 packet (from its first byte) carrying UDP and VXLAN: the
/// headers checked (the IPv4 header checksum, the UDP checksum when there is one; a zero one
/// over IPv6 only with `accept_zero_csum6`), the lengths the headers state honoured (bytes
/// beyond them, Ethernet padding, ignored).
pub fn decapsulate(pkt: &[u8], accept_zero_csum6: bool) -> Result<Decapsulated<'_>, OuterError> {
    let first = *pkt.first().ok_or(OuterError::Truncated)?;
    let (src, dst, tos, hop_limit, flow_label, udp) = match first >> 4 {
        4 => {
            if first != 0x45 {
                return Err(OuterError::BadIp);
            }
            let h = pkt.get(..IPV4_HDR).ok_or(OuterError::Truncated)?;
            if !checksum::verify(h) {
                return Err(OuterError::BadIp);
            }
            // More fragments, or an offset: not a whole datagram.
            if u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                return Err(OuterError::BadIp);
            }
            if h[9] != u8::from(IpProtocol::Udp) {
                return Err(OuterError::NotUdp);
            }
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let body = pkt
                .get(IPV4_HDR..total.max(IPV4_HDR))
                .ok_or(OuterError::Truncated)?;
            let a = |o: usize| IpAddr::V4(Ipv4Addr::new(h[o], h[o + 1], h[o + 2], h[o + 3]));
            (a(12), a(16), h[1], h[8], 0, body)
        }
        6 => {
            let h = pkt.get(..IPV6_HDR).ok_or(OuterError::Truncated)?;
            if h[6] != u8::from(IpProtocol::Udp) {
                return Err(OuterError::NotUdp);
            }
            let w = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let body = pkt
                .get(IPV6_HDR..IPV6_HDR + payload)
                .ok_or(OuterError::Truncated)?;
            let a = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&h[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            };
            (a(8), a(24), (w >> 20) as u8, h[7], w & 0x000f_ffff, body)
        }
        _ => return Err(OuterError::BadIp),
    };
    let uh = udp.get(..UDP_HDR).ok_or(OuterError::Truncated)?;
    let udp_len = usize::from(u16::from_be_bytes([uh[4], uh[5]]));
    if udp_len < UDP_HDR {
        return Err(OuterError::Truncated);
    }
    let udp = udp.get(..udp_len).ok_or(OuterError::Truncated)?;
    let sum = u16::from_be_bytes([uh[6], uh[7]]);
    if sum == 0 {
        if src.is_ipv6() && !accept_zero_csum6 {
            return Err(OuterError::ZeroChecksum6);
        }
    } else {
        let pseudo = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                checksum::pseudo_header_v4(s, d, IpProtocol::Udp, udp_len as u32)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                checksum::pseudo_header_v6(s, d, IpProtocol::Udp, udp_len as u32)
            }
            _ => return Err(OuterError::MixedFamilies),
        };
        if checksum::fold(checksum::combine(pseudo, checksum::sum(udp))) != 0xffff {
            return Err(OuterError::BadChecksum);
        }
    }
    let pkt = vxlan::Packet::new_checked(&udp[UDP_HDR..]).map_err(|_| OuterError::NotVxlan)?;
    Ok(Decapsulated {
        outer: Outer {
            src,
            dst,
            sport: u16::from_be_bytes([uh[0], uh[1]]),
            dport: u16::from_be_bytes([uh[2], uh[3]]),
            hop_limit,
            tos,
            flow_label,
            zero_csum: sum == 0,
        },
        vni: pkt.vni(),
        udp_checksum: sum,
        inner: &udp[UDP_HDR + vxlan::HEADER_LEN..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5];
        f.extend((0..len - 14).map(|i| i as u8));
        f
    }

    fn outer6() -> Outer {
        Outer {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            sport: 50_000,
            dport: 4789,
            hop_limit: 64,
            tos: 0xb8,
            flow_label: 0x12345,
            zero_csum: false,
        }
    }

    /// A known IPv6 packet, byte by byte: header fields, lengths, and the checksum the
    /// pseudo-header gives (checked independently: the whole UDP datagram with the
    /// pseudo-header sums to 0xffff).
    #[test]
    fn ipv6_outer_headers_and_checksum_byte_by_byte() {
        let vni = Vni::new(600).unwrap();
        let inner = frame(60);
        let mut out = Vec::new();
        encapsulate(&outer6(), vni, &inner, &mut out).unwrap();
        assert_eq!(out.len(), 40 + 8 + 8 + 60);
        assert_eq!(headers_len(true), 56);
        assert_eq!(
            &out[..8],
            &[0x6b, 0x81, 0x23, 0x45, 0, 76, 17, 64],
            "version 6, TC 0xb8, flow label 0x12345, payload 76, UDP, hop limit 64"
        );
        assert_eq!(
            &out[8..24],
            &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(
            &out[24..40],
            &"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(&out[40..46], &[0xc3, 0x50, 0x12, 0xb5, 0, 76]);
        assert_ne!(&out[46..48], &[0, 0], "the checksum is computed over IPv6");
        assert_eq!(&out[48..56], &[0x08, 0, 0, 0, 0, 0x02, 0x58, 0]);
        assert_eq!(&out[56..], &inner[..]);
        // Independently: pseudo-header (src, dst, length as 32 bits, next header) + datagram.
        let mut p = out[8..40].to_vec();
        p.extend_from_slice(&76u32.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 17]);
        p.extend_from_slice(&out[40..]);
        assert!(checksum::verify(&p));
        let d = decapsulate(&out, false).unwrap();
        assert_eq!(d.outer, outer6());
        assert_eq!((d.vni, d.inner), (vni, &inner[..]));
        // Ethernet padding after the stated length is ignored.
        let mut padded = out.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(decapsulate(&padded, false).unwrap().inner, &inner[..]);
    }

    /// A zero checksum over IPv6: written only when asked, refused on receipt unless
    /// accepted; a corrupted byte fails the checksum; truncations and other protocols are
    /// named errors, never a panic.
    #[test]
    fn ipv6_zero_checksum_is_refused_unless_accepted() {
        let vni = Vni::new(600).unwrap();
        let inner = frame(100);
        let mut z = Vec::new();
        encapsulate(
            &Outer {
                zero_csum: true,
                ..outer6()
            },
            vni,
            &inner,
            &mut z,
        )
        .unwrap();
        assert_eq!(&z[46..48], &[0, 0]);
        assert_eq!(decapsulate(&z, false), Err(OuterError::ZeroChecksum6));
        let d = decapsulate(&z, true).unwrap();
        assert!(d.outer.zero_csum && d.udp_checksum == 0 && d.inner == &inner[..]);
        let mut good = Vec::new();
        encapsulate(&outer6(), vni, &inner, &mut good).unwrap();
        for at in [10, 45, 60, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert_eq!(
                decapsulate(&bad, false),
                Err(OuterError::BadChecksum),
                "{at}"
            );
        }
        for n in 0..56 {
            assert!(decapsulate(&good[..n], true).is_err(), "{n}");
        }
        let mut tcp = good.clone();
        tcp[6] = 6;
        assert_eq!(decapsulate(&tcp, false), Err(OuterError::NotUdp));
        let mut novx = good.clone();
        novx[48] = 0;
        // The checksum is checked first: fix it for the changed byte.
        novx[46..48].copy_from_slice(&[0, 0]);
        let c = udp_checksum(outer6().src, outer6().dst, &novx[40..]).unwrap();
        novx[46..48].copy_from_slice(&c.to_be_bytes());
        assert_eq!(decapsulate(&novx, false), Err(OuterError::NotVxlan));
        // Mixed families and a flow label above 20 bits: refused.
        let mut o = Vec::new();
        let mixed = Outer {
            dst: "10.0.0.2".parse().unwrap(),
            ..outer6()
        };
        assert_eq!(
            encapsulate(&mixed, vni, &inner, &mut o),
            Err(OuterError::MixedFamilies)
        );
        let big = Outer {
            flow_label: 1 << 20,
            ..outer6()
        };
        assert_eq!(
            encapsulate(&big, vni, &inner, &mut o),
            Err(OuterError::BadFlowLabel)
        );
        assert_eq!(
            encapsulate(&outer6(), vni, &vec![0; 65_535], &mut o),
            Err(OuterError::TooLong)
        );
        assert!(o.is_empty(), "nothing written when refused");
    }

    /// IPv4 as the kernel sends it: DF, a valid header checksum; a zero UDP checksum is
    /// "none" and always accepted.
    #[test]
    fn ipv4_outer_headers_round_trip() {
        let vni = Vni::new(100).unwrap();
        let inner = frame(64);
        let o = Outer {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            sport: 49_200,
            dport: 4789,
            hop_limit: 9,
            tos: 0x28,
            flow_label: 0,
            zero_csum: true,
        };
        let mut out = Vec::new();
        encapsulate(&o, vni, &inner, &mut out).unwrap();
        assert_eq!(out.len(), headers_len(false) + 64);
        assert_eq!(&out[..4], &[0x45, 0x28, 0, 100]);
        assert_eq!(out[6], 0x40, "DF");
        assert!(checksum::verify(&out[..20]));
        assert_eq!(&out[26..28], &[0, 0]);
        assert_eq!(decapsulate(&out, false).unwrap().outer, o);
        let mut c = Vec::new();
        let oc = Outer {
            zero_csum: false,
            ..o
        };
        encapsulate(&oc, vni, &inner, &mut c).unwrap();
        assert_ne!(&c[26..28], &[0, 0]);
        assert_eq!(decapsulate(&c, false).unwrap().inner, &inner[..]);
        c[30] ^= 1;
        assert_eq!(decapsulate(&c, false), Err(OuterError::BadChecksum));
    }
}
