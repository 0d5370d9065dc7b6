//! VXLAN headers (RFC 7348 §5) and the outer UDP source port of an encapsulated frame.
//!
//! A VXLAN packet, as a UDP socket carries it, is the 8-byte VXLAN header followed by the
//! whole inner Ethernet frame (tags included, no FCS); the kernel builds the outer IP and UDP
//! headers. The header:
//!
//! ```text
//!  0               1               2               3
//! |R|R|R|R|I|R|R|R|            Reserved (24 bits)                 |
//! |            VXLAN Network Identifier (VNI, 24)  | Reserved (8) |
//! ```
//!
//! [`Packet::new_checked`] accepts a buffer of at least [`HEADER_LEN`] bytes whose I flag is
//! set; after that no accessor panics. Reserved bits are ignored on receipt, as RFC 7348 says
//! ("MUST be ignored on receipt"), and written as zero by [`Repr::emit`].
//!
//! [`source_port`] spreads flows over the underlay's ECMP and RSS (RFC 7348 §5: "a hash of
//! fields from the inner packet", in the dynamic range 49152-65535), from [`crate::flow_hash`],
//! which reads through every well-known VLAN tag, so two customer flows inside one S-VLAN get
//! different ports.
//!
//! [`inherited_tos`] is the outer TOS byte of `tos inherit`: the inner IPv4/IPv6 DSCP and ECN
//! (RFC 6040 normal mode), read through the same tags.
//!
//! No I/O, no allocation.

use crate::{Error, Result};

/// Bytes of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// Bytes the outer headers add to an inner frame over IPv4: IPv4 (20) + UDP (8) + VXLAN (8) +
/// the outer Ethernet header (14). A VXLAN port's inner frames must be this much smaller than
/// the underlay's frames; its inner MTU is the underlay's MTU minus 50.
pub const IPV4_OVERHEAD: usize = 20 + 8 + HEADER_LEN + 14;
/// Bytes the outer headers add over IPv6: IPv6 (40, no extension headers) + UDP (8) + VXLAN
/// (8) + the outer Ethernet header (14): 70; the inner MTU is the underlay's minus 70.
pub const IPV6_OVERHEAD: usize = 40 + 8 + HEADER_LEN + 14;
/// The IANA-assigned VXLAN UDP port.
pub const DEFAULT_PORT: u16 = 4789;
/// The first port of RFC 7348 §5's recommended source-port range (the dynamic ports).
pub const SOURCE_PORT_MIN: u16 = 49152;
/// The largest VNI (24 bits).
pub const VNI_MAX: u32 = 0x00ff_ffff;

/// The I flag: the VNI is valid. The only flag RFC 7348 defines.
const FLAG_I: u8 = 0x08;

mod field {
    use core::ops::Range;
    pub const FLAGS: usize = 0;
    pub const VNI: Range<usize> = 4..7;
}

/// A VXLAN Network Identifier: 24 bits, 0 to 16 777 215.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vni(u32);

impl Vni {
    /// `None` above [`VNI_MAX`].
    pub const fn new(vni: u32) -> Option<Vni> {
        if vni <= VNI_MAX {
            Some(Vni(vni))
        } else {
            None
        }
    }

    pub const fn get(self) -> u32 {
        self.0
    }

    /// The header's second word as on the wire: the VNI (24 bits, big-endian) and the
    /// reserved byte after it.
    pub const fn word(self) -> [u8; 4] {
        let b = self.0.to_be_bytes();
        [b[1], b[2], b[3], 0]
    }
}

impl core::fmt::Display for Vni {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A view of a VXLAN packet: header and inner frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// `Truncated` below [`HEADER_LEN`] bytes; `Malformed` when the I flag is clear (the VNI
    /// is not valid: RFC 7348 §5 has no use for such a packet).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::FLAGS] & FLAG_I == 0 {
            return Err(Error::Malformed);
        }
        Ok(Packet { buffer })
    }

    pub fn vni(&self) -> Vni {
        let b = &self.buffer.as_ref()[field::VNI];
        Vni(u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]))
    }

    /// The inner Ethernet frame.
    pub fn inner(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// An owned VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub vni: Vni,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { vni: p.vni() }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`; `Truncated` if `out` is
    /// shorter.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let h = out.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        h[..4].copy_from_slice(&[FLAG_I, 0, 0, 0]);
        h[4..].copy_from_slice(&self.vni.word());
        Ok(())
    }
}

/// The outer IPv4 TOS byte (DSCP and ECN) of a VXLAN port's datagrams: ip-link(8)'s `tos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterTos {
    /// One value for every datagram; its two ECN bits are zero (the kernel reads `tos 1` as
    /// `inherit`, so a value with ECN bits set has no one meaning).
    Fixed(u8),
    /// The inner IPv4 or IPv6 packet's DSCP and ECN ([`inner_tos`]), per frame; 0 for other
    /// frames (ARP, ...), as Linux's `tos inherit`.
    Inherit,
}

impl OuterTos {
    /// The two ECN bits of a TOS byte.
    pub const ECN_MASK: u8 = 0x03;

    /// A fixed TOS; `None` when its ECN bits are not zero.
    pub const fn fixed(tos: u8) -> Option<OuterTos> {
        if tos & Self::ECN_MASK == 0 {
            Some(OuterTos::Fixed(tos))
        } else {
            None
        }
    }
}

/// The DSCP and ECN byte of the IPv4 or IPv6 packet in inner frame `frame`, read through
/// every well-known VLAN tag (IPv4's TOS, IPv6's Traffic Class); 0 for any other frame or a
/// frame too short to tell. Total on any input.
pub fn inner_tos(frame: &[u8]) -> u8 {
    let mut at = crate::ethernet::ADDRS_LEN;
    // At most 8 tags, as the header parser reads (a longer stack is not IP to us).
    for _ in 0..=8 {
        let Some(t) = frame.get(at..at + 2) else {
            return 0;
        };
        let ethertype = u16::from_be_bytes([t[0], t[1]]);
        if crate::Tpid(ethertype).is_well_known() {
            at += 4;
            continue;
        }
        let l3 = frame.get(at + 2..at + 4).unwrap_or_default();
        return match (ethertype, l3) {
            (0x0800, [vihl, tos]) if vihl >> 4 == 4 => *tos,
            (0x86dd, [v_tc, tc_fl]) if v_tc >> 4 == 6 => (v_tc << 4) | (tc_fl >> 4),
            _ => 0,
        };
    }
    0
}

/// The outer TOS byte `tos inherit` gives inner frame `frame` (as Linux's
/// `ip_tunnel_ecn_encap`): the inner DSCP, and the inner ECN field by RFC 6040 §4.1's normal
/// mode — copied, except CE, which leaves as ECT(0) (congestion marked on the way in is not
/// the underlay's to report again).
pub fn inherited_tos(frame: &[u8]) -> u8 {
    let inner = inner_tos(frame);
    if inner & OuterTos::ECN_MASK == OuterTos::ECN_MASK {
        (inner & !OuterTos::ECN_MASK) | 0x02
    } else {
        inner
    }
}

/// The outer UDP source port for inner frame `frame` (RFC 7348 §5): its flow hash folded into
/// `SOURCE_PORT_MIN..=65535`. Frames of one flow always get one port; total on any input.
pub fn source_port(frame: &[u8]) -> u16 {
    source_port_of_hash(crate::flow_hash(frame))
}

/// [`source_port`] from a flow hash already computed.
pub fn source_port_of_hash(hash: u32) -> u16 {
    let span = u32::from(u16::MAX - SOURCE_PORT_MIN) + 1;
    // Fold the high bits in: the low bits of some hashes vary less.
    let h = hash ^ (hash >> 16);
    SOURCE_PORT_MIN + (h % span) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_tos_reads_ipv4_and_ipv6_through_tags() {
        let macs = [0u8; 12];
        // IPv4, TOS 0xb8 (EF) with ECT(0) (0x02): 0xba.
        let v4 = [&macs[..], &[0x08, 0x00, 0x45, 0xba, 0, 20][..]].concat();
        assert_eq!(inner_tos(&v4), 0xba);
        assert_eq!(inherited_tos(&v4), 0xba);
        // CE (0x03) leaves as ECT(0) (RFC 6040 normal mode); Not-ECT stays Not-ECT.
        let ce = [&macs[..], &[0x08, 0x00, 0x45, 0xbb, 0, 20][..]].concat();
        assert_eq!((inner_tos(&ce), inherited_tos(&ce)), (0xbb, 0xba));
        let not_ect = [&macs[..], &[0x08, 0x00, 0x45, 0x28, 0, 20][..]].concat();
        assert_eq!(inherited_tos(&not_ect), 0x28);
        // The same inside an S-tag and a C-tag.
        let qinq = [
            &macs[..],
            &[0x88, 0xa8, 0, 10, 0x81, 0x00, 0, 20, 0x08, 0x00, 0x45, 0xba][..],
        ]
        .concat();
        assert_eq!(inner_tos(&qinq), 0xba);
        // IPv6, Traffic Class 0x2a (AF11 0x28 with ECT(0) 0x02): nibbles 6 2, a 0.
        let v6 = [&macs[..], &[0x86, 0xdd, 0x62, 0xa0, 0, 0][..]].concat();
        assert_eq!(inner_tos(&v6), 0x2a);
        // ARP, truncated frames, a wrong IP version: 0.
        let arp = [&macs[..], &[0x08, 0x06, 0, 1][..]].concat();
        assert_eq!(inner_tos(&arp), 0);
        assert_eq!(inner_tos(&v4[..15]), 0);
        assert_eq!(inner_tos(&[]), 0);
        let bad = [&macs[..], &[0x08, 0x00, 0x65, 0xba][..]].concat();
        assert_eq!(inner_tos(&bad), 0);
        // A stack of tags only: 0, no panic.
        let tags: Vec<u8> = macs
            .iter()
            .copied()
            .chain([0x81, 0x00, 0, 1].iter().copied().cycle().take(40))
            .collect();
        assert_eq!(inner_tos(&tags), 0);
    }

    #[test]
    fn fixed_tos_refuses_ecn_bits() {
        assert_eq!(OuterTos::fixed(0x28), Some(OuterTos::Fixed(0x28)));
        assert_eq!(OuterTos::fixed(0x29), None);
        assert_eq!(OuterTos::fixed(1), None);
    }

    /// RFC 7348 §5's layout, VNI 100 (0x000064): flags 0x08, three reserved bytes, the VNI in
    /// network order, one reserved byte. The bytes a kernel vxlan device sends (tshark:
    /// "Flags: 0x0800, VXLAN Network ID (VNI)", "VXLAN Network Identifier (VNI): 100").
    const VNI_100: [u8; 8] = [0x08, 0, 0, 0, 0x00, 0x00, 0x64, 0];

    #[test]
    fn emits_rfc7348_bytes() {
        let mut out = [0xffu8; 8];
        Repr {
            vni: Vni::new(100).unwrap(),
        }
        .emit(&mut out)
        .unwrap();
        assert_eq!(out, VNI_100);
        let mut out = [0u8; 8];
        Repr {
            vni: Vni::new(0x12_3456).unwrap(),
        }
        .emit(&mut out)
        .unwrap();
        assert_eq!(out, [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        assert_eq!(
            Repr {
                vni: Vni::new(1).unwrap()
            }
            .emit(&mut [0u8; 7]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn parses_and_ignores_reserved_bits() {
        let mut pkt = VNI_100.to_vec();
        pkt.extend_from_slice(&[0xaa; 14]);
        let p = Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.vni().get(), 100);
        assert_eq!(p.inner(), &[0xaa; 14]);
        // Reserved bits set: ignored on receipt.
        let mut r = pkt.clone();
        r[0] = 0xff;
        r[1] = 0xff;
        r[7] = 0xff;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&r[..]).unwrap()).vni.get(),
            100
        );
        // The I flag clear: malformed; short: truncated.
        let mut bad = pkt.clone();
        bad[0] = 0;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        assert_eq!(
            Packet::new_checked(&pkt[..7]).unwrap_err(),
            Error::Truncated
        );
        // A header and no inner frame parses; the caller judges the frame.
        assert!(Packet::new_checked(&pkt[..8]).unwrap().inner().is_empty());
    }

    #[test]
    fn vni_is_24_bits() {
        assert_eq!(Vni::new(VNI_MAX).unwrap().get(), 0xff_ffff);
        assert_eq!(Vni::new(VNI_MAX + 1), None);
        assert_eq!(Vni::new(0).unwrap().to_string(), "0");
    }

    /// A frame with an 802.1ad and an 802.1Q tag, IPv4 UDP from `sport`.
    fn tagged_udp(cvid: u16, sport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a]);
        f.extend_from_slice(&[0x81, 0x00, (cvid >> 8) as u8, cvid as u8]);
        f.extend_from_slice(&[0x08, 0x00]);
        let ip = [
            0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[(sport >> 8) as u8, sport as u8, 0, 53, 0, 8, 0, 0]);
        f
    }

    #[test]
    fn source_port_is_in_range_and_follows_the_inner_flow() {
        let a = tagged_udp(20, 1000);
        assert_eq!(source_port(&a), source_port(&a.clone()));
        for h in [0, 1, 0xffff, 0x1_0000, u32::MAX, 0xdead_beef] {
            assert!(source_port_of_hash(h) >= SOURCE_PORT_MIN);
        }
        // Flows differing only in the customer VLAN inside the S-tag, or in the L4 port,
        // spread: over 64 flows, many distinct ports.
        let mut ports: Vec<u16> = (0..32)
            .map(|c| source_port(&tagged_udp(c + 1, 1000)))
            .chain((0..32).map(|p| source_port(&tagged_udp(20, 2000 + p))))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert!(ports.len() > 48, "{} distinct ports of 64", ports.len());
        // Total on garbage.
        let _ = source_port(&[]);
        let _ = source_port(&[0x81; 5]);
    }
}
