//! IPv6 headers (RFC 8200) and a bounded walk over the common extension headers.
//!
//! [`Packet::new_checked`] accepts a buffer holding the 40-byte fixed header with version 6 and
//! the whole payload length; after that no accessor panics. [`walk_extensions`] follows
//! hop-by-hop, routing, fragment, destination-options and AH headers, at most
//! [`MAX_EXT_HEADERS`] of them (more is `Malformed`: a chain that long is an attack, not
//! traffic), and reports where the upper-layer header starts. Jumbograms (payload length 0 with
//! a jumbo option) are not supported: their payload is empty to this view.

use crate::checksum;
use crate::ip::{be16, be32, Protocol};
use crate::{Error, Result};
use core::net::Ipv6Addr;

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Most extension headers [`walk_extensions`] follows before refusing the packet.
pub const MAX_EXT_HEADERS: usize = 8;
/// Bytes of a fragment extension header.
pub const FRAG_HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks; accessors may panic until [`Packet::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if the buffer is shorter than 40 bytes plus the payload length; `Malformed`
    /// if the version is not 6.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + usize::from(be16(b, field::LENGTH.start)) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    pub fn traffic_class(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) >> 20) as u8
    }

    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) & 0x000f_ffff
    }

    /// Bytes after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    pub fn next_header(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The payload (extension headers and upper layer), padding excluded.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Walks the extension headers of the payload; see [`walk_extensions`].
    pub fn extensions(&self) -> Result<ExtWalk> {
        walk_extensions(self.next_header(), self.payload())
    }

    /// The pseudo-header sum for an upper-layer header of `upper_len` bytes.
    pub fn pseudo_header_sum(&self, proto: Protocol, upper_len: u32) -> u32 {
        checksum::pseudo_header_v6(self.src_addr(), self.dst_addr(), proto, upper_len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes version 6, the traffic class and the 20-bit flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_next_header(&mut self, v: Protocol) {
        self.buffer.as_mut()[field::NXT_HDR] = v.into();
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// An owned IPv6 fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_addr: Ipv6Addr,
    pub dst_addr: Ipv6Addr,
    /// The first next-header value (an extension header or the upper layer).
    pub next_header: Protocol,
    /// Bytes after the fixed header.
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header into the front of `buf`. `Truncated` if shorter than 40 bytes;
    /// `Malformed` if the payload length exceeds 65535.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Malformed)?;
        let Some(hdr) = buf.get_mut(..HEADER_LEN) else {
            return Err(Error::Truncated);
        };
        let mut p = Packet::new_unchecked(hdr);
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

/// What a fragment header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Offset of this fragment's data in bytes.
    pub offset_bytes: u16,
    pub more_frags: bool,
    pub ident: u32,
}

/// Where [`walk_extensions`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExtWalk {
    /// The upper-layer protocol (or `Ipv6NoNxt`, or the next header of a non-first fragment).
    pub upper: Protocol,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    pub upper_offset: usize,
    /// Extension headers passed.
    pub count: usize,
    /// The fragment header, if one was passed.
    pub fragment: Option<FragmentInfo>,
}

impl ExtWalk {
    /// True when the upper-layer header is in this packet: not a non-first fragment and not
    /// "no next header".
    pub fn has_upper_header(&self) -> bool {
        self.upper != Protocol::Ipv6NoNxt && self.fragment.is_none_or(|f| f.offset_bytes == 0)
    }
}

/// Follows the extension-header chain of an IPv6 payload that begins with `first`.
///
/// Stops at the first protocol that is not an extension header, at `Ipv6NoNxt`, or after a
/// fragment header with a non-zero offset (the rest is not a header). `Truncated` if a header
/// runs past `payload`; `Malformed` past [`MAX_EXT_HEADERS`] headers or for a hop-by-hop
/// header anywhere but first.
pub fn walk_extensions(first: Protocol, payload: &[u8]) -> Result<ExtWalk> {
    let mut walk = ExtWalk {
        upper: first,
        upper_offset: 0,
        count: 0,
        fragment: None,
    };
    loop {
        let at = walk.upper_offset;
        let kind = walk.upper;
        let len = match kind {
            Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Opts => {
                if kind == Protocol::HopByHop && walk.count != 0 {
                    return Err(Error::Malformed);
                }
                let b = payload.get(at..at + 2).ok_or(Error::Truncated)?;
                (usize::from(b[1]) + 1) * 8
            }
            Protocol::Ah => {
                let b = payload.get(at..at + 2).ok_or(Error::Truncated)?;
                (usize::from(b[1]) + 2) * 4
            }
            Protocol::Ipv6Frag => FRAG_HEADER_LEN,
            _ => return Ok(walk),
        };
        if walk.count == MAX_EXT_HEADERS {
            return Err(Error::Malformed);
        }
        let hdr = payload.get(at..at + len).ok_or(Error::Truncated)?;
        walk.count += 1;
        walk.upper = Protocol::from(hdr[0]);
        walk.upper_offset = at + len;
        if kind == Protocol::Ipv6Frag {
            let off_flags = be16(hdr, 2);
            let info = FragmentInfo {
                offset_bytes: off_flags & 0xfff8,
                more_frags: off_flags & 1 != 0,
                ident: be32(hdr, 4),
            };
            walk.fragment = Some(info);
            if info.offset_bytes != 0 {
                return Ok(walk);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TCP SYN 2001:db8::1 -> 2001:db8::2 behind hop-by-hop (PadN) and destination options.
    fn packet_with_ext() -> Vec<u8> {
        let mut v = vec![
            0x60, 0x00, 0x00, 0x00, // version, TC, flow
            0x00, 0x24, 0x00, 0x40, // payload len 36, next HBH, hop limit 64
        ];
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // HBH -> DestOpts, PadN
        v.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // DestOpts -> TCP
        v.extend_from_slice(&[0u8; 20]); // TCP header (contents irrelevant here)
        v
    }

    #[test]
    fn view_and_walk() {
        let b = packet_with_ext();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.payload_len(), 36);
        assert_eq!(p.next_header(), Protocol::HopByHop);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        let w = p.extensions().unwrap();
        assert_eq!((w.upper, w.upper_offset, w.count), (Protocol::Tcp, 16, 2));
        assert!(w.has_upper_header());
        assert_eq!(
            Packet::new_checked(&b[..b.len() - 1]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn fragments() {
        // Fragment header -> UDP, offset 0, M=1.
        let first = [
            17u8, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let w = walk_extensions(Protocol::Ipv6Frag, &first).unwrap();
        assert_eq!(w.upper, Protocol::Udp);
        assert_eq!(
            w.fragment,
            Some(FragmentInfo {
                offset_bytes: 0,
                more_frags: true,
                ident: 0xdeadbeef
            })
        );
        assert!(w.has_upper_header());
        // Offset 1448: no upper header here.
        let later = [17u8, 0, 0x05, 0xa8, 0, 0, 0, 1];
        let w = walk_extensions(Protocol::Ipv6Frag, &later).unwrap();
        assert_eq!(w.fragment.unwrap().offset_bytes, 1448);
        assert!(!w.has_upper_header());
    }

    #[test]
    fn walk_is_bounded() {
        let mut chain = Vec::new();
        for _ in 0..=MAX_EXT_HEADERS {
            chain.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        }
        assert_eq!(
            walk_extensions(Protocol::Ipv6Opts, &chain),
            Err(Error::Malformed)
        );
        assert_eq!(
            walk_extensions(Protocol::Ipv6Opts, &chain[..12]),
            Err(Error::Truncated)
        );
        let hbh_late = [0u8, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0];
        assert_eq!(
            walk_extensions(Protocol::Ipv6Opts, &hbh_late),
            Err(Error::Malformed)
        );
        assert_eq!(walk_extensions(Protocol::Tcp, &[]).unwrap().upper_offset, 0);
    }

    #[test]
    fn repr_round_trip() {
        let b = packet_with_ext();
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.payload_len, 36);
        let mut out = [0u8; 40];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &b[..40]);
        let mut r2 = r;
        r2.traffic_class = 0xb8;
        r2.flow_label = 0xabcde;
        r2.emit(&mut out).unwrap();
        let p = Packet::new_unchecked(&out[..]);
        assert_eq!((p.traffic_class(), p.flow_label()), (0xb8, 0xabcde));
    }
}
