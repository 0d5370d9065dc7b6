//! IPv4 headers (RFC 791) with options.
//!
//! [`Packet::new_checked`] accepts a buffer only if it holds the whole header (IHL, 20..=60
//! bytes), the version is 4, and the total length covers the header and fits in the buffer
//! (bytes after the total length, such as Ethernet padding, are allowed and ignored by
//! [`Packet::payload`]). After that no accessor panics. The header checksum is verified or
//! filled on request, never silently. [`Repr`] is the owned form; it keeps the options verbatim.

use crate::checksum;
use crate::ip::{be16, OptionBytes, Protocol};
use crate::{Error, Result};
use core::net::Ipv4Addr;

/// Bytes of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header: IHL 15.
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checks; accessors may panic until [`Packet::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if the buffer is shorter than the header or the total length; `Malformed`
    /// if the version is not 4, IHL < 5 or the total length is below the header length.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::Malformed);
        }
        let hl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        let total = usize::from(be16(b, field::LENGTH.start));
        if total < hl {
            return Err(Error::Malformed);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length in bytes: header plus payload.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    pub fn frag_offset_bytes(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF.start) & OFFSET_MASK) << 3
    }

    /// True for any fragment: MF set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & (FLAG_MF | OFFSET_MASK) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The option bytes between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload: from the end of the header to the total length (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.header())
    }

    /// The IPv4 pseudo-header sum for this packet's payload (its protocol and length).
    pub fn pseudo_header_sum(&self) -> u32 {
        checksum::pseudo_header_v4(
            self.src_addr(),
            self.dst_addr(),
            self.protocol(),
            self.payload().len() as u32,
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and IHL from `len` bytes (a multiple of 4 in 20..=60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }

    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets DF, MF and the fragment offset in bytes (rounded down to 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset_bytes: u16) {
        let mut v = (offset_bytes >> 3) & OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    pub fn set_protocol(&mut self, v: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = v.into();
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }
}

/// An owned IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    pub protocol: Protocol,
    /// Bytes after the header (total length minus header length).
    pub payload_len: usize,
    pub ttl: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset_bytes: u16,
    pub options: OptionBytes,
}

impl Repr {
    /// Reads the header. With [`checksum::Policy::Verify`] a wrong header checksum is
    /// `BadChecksum`.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, policy: checksum::Policy) -> Result<Repr> {
        p.check_len()?;
        if policy == checksum::Policy::Verify && !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.payload().len(),
            ttl: p.ttl(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset_bytes: p.frag_offset_bytes(),
            options: OptionBytes::from_slice(p.options())?,
        })
    }

    /// Header bytes, options padded to 4.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.options.padded_len()
    }

    /// Writes the header (with its checksum) into the front of `buf`. `Truncated` if `buf`
    /// is shorter than [`Repr::buffer_len`]; `Malformed` if the total length exceeds 65535.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let hl = self.buffer_len();
        let total = u16::try_from(hl + self.payload_len).map_err(|_| Error::Malformed)?;
        let Some(hdr) = buf.get_mut(..hl) else {
            return Err(Error::Truncated);
        };
        let mut p = Packet::new_unchecked(hdr);
        p.set_version_and_header_len(hl);
        p.set_dscp_ecn(self.dscp, self.ecn);
        p.set_total_len(total);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset_bytes);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        self.options.write_padded(&mut p.buffer[HEADER_LEN..]);
        p.set_checksum(0);
        let c = checksum::checksum(&p.buffer[..hl]);
        p.set_checksum(c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A UDP datagram 192.168.0.1 -> 192.168.0.199, DF, TTL 64, header checksum 0xb861.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(0x73, 0xab);
        v
    }

    #[test]
    fn view_reads_fields() {
        let b = packet();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 0x73);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), Protocol::Udp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 0x73 - 20);
    }

    #[test]
    fn check_len_refuses() {
        let b = packet();
        assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&b[..0x72]).unwrap_err(),
            Error::Truncated
        );
        let mut v6 = b.clone();
        v6[0] = 0x65;
        assert_eq!(Packet::new_checked(&v6[..]).unwrap_err(), Error::Malformed);
        let mut ihl4 = b.clone();
        ihl4[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&ihl4[..]).unwrap_err(),
            Error::Malformed
        );
        let mut short_total = b.clone();
        short_total[2..4].copy_from_slice(&[0, 19]);
        assert_eq!(
            Packet::new_checked(&short_total[..]).unwrap_err(),
            Error::Malformed
        );
        let mut padded = b.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(
            Packet::new_checked(&padded[..]).unwrap().payload().len(),
            0x73 - 20
        );
    }

    #[test]
    fn repr_round_trip_with_options() {
        let b = packet();
        let mut r = Repr::parse(
            &Packet::new_checked(&b[..]).unwrap(),
            checksum::Policy::Verify,
        )
        .unwrap();
        assert_eq!(r.buffer_len(), 20);
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, HDR);
        // Router alert option (RFC 2113): 94 04 00 00.
        r.options = OptionBytes::from_slice(&[0x94, 0x04, 0x00, 0x00]).unwrap();
        r.payload_len = 8;
        let mut out = [0u8; 32];
        r.emit(&mut out).unwrap();
        let p = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[0x94, 0x04, 0, 0]);
        assert!(p.verify_checksum());
        assert_eq!(Repr::parse(&p, checksum::Policy::Verify).unwrap(), r);
        let mut bad = out;
        bad[8] ^= 1;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, checksum::Policy::Verify),
            Err(Error::BadChecksum)
        );
        assert!(Repr::parse(&p, checksum::Policy::Ignore).is_ok());
        assert_eq!(r.emit(&mut [0u8; 23]), Err(Error::Truncated));
    }

    #[test]
    fn setters() {
        let mut b = packet();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_frag(false, true, 1480);
        p.set_ident(0x1234);
        p.fill_checksum();
        assert!(p.more_frags() && p.is_fragment() && !p.dont_frag());
        assert_eq!(p.frag_offset_bytes(), 1480);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.verify_checksum());
    }
}
