//! TCP headers (RFC 9293) with options.
//!
//! [`Packet::new_checked`] accepts a buffer holding the whole header as its data offset says
//! (20..=60 bytes); the buffer is the TCP segment, so the payload is everything after the header
//! and the checksum covers the whole buffer. After that no accessor panics. Options are kept as
//! wire bytes ([`OptionBytes`]) and read through [`OptionsIter`], which stops (never panics) at
//! a malformed option.

use crate::checksum;
use crate::ip::{be16, be32, OptionBytes};
use crate::{Error, Result};

/// Bytes of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header: data offset 15.
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (3), NS/AE (1), then the 8 classic flag bits.
    pub const FLAGS: Range<usize> = 12..14;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// Where the checksum sits from the start of the TCP header (virtio `csum_offset` for TCP).
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// The nine TCP flag bits (NS/AE through FIN) as one value; a plain bit set because the wire
/// allows any combination.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct Flags(pub u16);

impl Flags {
    pub const FIN: Flags = Flags(0x001);
    pub const SYN: Flags = Flags(0x002);
    pub const RST: Flags = Flags(0x004);
    pub const PSH: Flags = Flags(0x008);
    pub const ACK: Flags = Flags(0x010);
    pub const URG: Flags = Flags(0x020);
    pub const ECE: Flags = Flags(0x040);
    pub const CWR: Flags = Flags(0x080);
    pub const NS: Flags = Flags(0x100);
    const MASK: u16 = 0x1ff;

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if the buffer is shorter than the header its data offset declares;
    /// `Malformed` if the data offset is below 5.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[field::FLAGS.start] >> 4) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }

    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS.start] >> 4) * 4
    }

    pub fn flags(&self) -> Flags {
        Flags(be16(self.buffer.as_ref(), field::FLAGS.start) & Flags::MASK)
    }

    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WIN_SIZE.start)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }

    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// True if the checksum over the whole segment plus `pseudo_sum` (from
    /// [`checksum::pseudo_header_v4`]/[`checksum::pseudo_header_v6`]) is correct.
    pub fn verify_checksum(&self, pseudo_sum: u32) -> bool {
        checksum::fold(checksum::combine(
            pseudo_sum,
            checksum::sum(self.buffer.as_ref()),
        )) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the data offset from a header length in bytes (multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::FLAGS.start];
        *b = (*b & 0x0f) | (((len / 4) as u8) << 4);
    }

    /// Sets the nine flag bits, keeping the data offset and reserved bits.
    pub fn set_flags(&mut self, f: Flags) {
        let b = self.buffer.as_mut();
        let old = be16(b, field::FLAGS.start);
        let v = (old & !Flags::MASK) | (f.0 & Flags::MASK);
        b[field::FLAGS].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_window_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::WIN_SIZE].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_urgent_at(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }

    /// Computes the checksum over the whole segment with `pseudo_sum` and stores it.
    pub fn fill_checksum(&mut self, pseudo_sum: u32) {
        self.set_checksum(0);
        let s = checksum::combine(pseudo_sum, checksum::sum(self.buffer.as_ref()));
        self.set_checksum(checksum::finish(s));
    }
}

/// One TCP option as read by [`OptionsIter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    EndOfList,
    NoOperation,
    MaxSegmentSize(u16),
    WindowScale(u8),
    SackPermitted,
    /// Up to four SACK blocks (left, right); the raw block bytes.
    Sack(&'a [u8]),
    Timestamp {
        tsval: u32,
        tsecr: u32,
    },
    /// Any other kind, with its data (after kind and length).
    Unknown {
        kind: u8,
        data: &'a [u8],
    },
}

/// Iterates over option bytes; ends at End of Option List, at the end of the bytes, or at the
/// first option whose length is impossible (then yields `Err(Malformed)` once).
#[derive(Clone, Debug)]
pub struct OptionsIter<'a> {
    rest: &'a [u8],
}

impl<'a> OptionsIter<'a> {
    pub fn new(options: &'a [u8]) -> OptionsIter<'a> {
        OptionsIter { rest: options }
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        match kind {
            0 => {
                self.rest = &[];
                return Some(Ok(TcpOption::EndOfList));
            }
            1 => {
                self.rest = after;
                return Some(Ok(TcpOption::NoOperation));
            }
            _ => {}
        }
        let len = match after.first() {
            Some(&l) if usize::from(l) >= 2 && usize::from(l) <= self.rest.len() => usize::from(l),
            _ => {
                self.rest = &[];
                return Some(Err(Error::Malformed));
            }
        };
        let data = &self.rest[2..len];
        self.rest = &self.rest[len..];
        let opt = match (kind, data.len()) {
            (2, 2) => TcpOption::MaxSegmentSize(be16(data, 0)),
            (3, 1) => TcpOption::WindowScale(data[0]),
            (4, 0) => TcpOption::SackPermitted,
            (5, _) => TcpOption::Sack(data),
            (8, 8) => TcpOption::Timestamp {
                tsval: be32(data, 0),
                tsecr: be32(data, 4),
            },
            _ => TcpOption::Unknown { kind, data },
        };
        Some(Ok(opt))
    }
}

/// An owned TCP header (the payload stays with the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq_number: u32,
    pub ack_number: u32,
    pub flags: Flags,
    pub window_len: u16,
    pub urgent_at: u16,
    pub options: OptionBytes,
}

impl Repr {
    /// Reads the header. With [`checksum::Policy::Verify`] the segment must check against
    /// `pseudo_sum`.
    pub fn parse<T: AsRef<[u8]>>(
        p: &Packet<T>,
        pseudo_sum: u32,
        policy: checksum::Policy,
    ) -> Result<Repr> {
        p.check_len()?;
        if policy == checksum::Policy::Verify && !p.verify_checksum(pseudo_sum) {
            return Err(Error::BadChecksum);
        }
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
            urgent_at: p.urgent_at(),
            options: OptionBytes::from_slice(p.options())?,
        })
    }

    /// Header bytes, options padded to 4.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.padded_len()
    }

    /// Header bytes; the payload is not part of the repr.
    pub fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header into the front of `segment` (checksum zero). Fill the checksum with
    /// [`Packet::fill_checksum`] once the payload is in place. `Truncated` if `segment` is
    /// shorter than the header.
    pub fn emit(&self, segment: &mut [u8]) -> Result<()> {
        let hl = self.header_len();
        let Some(hdr) = segment.get_mut(..hl) else {
            return Err(Error::Truncated);
        };
        let mut p = Packet::new_unchecked(hdr);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.buffer[field::FLAGS].copy_from_slice(&(self.flags.0 & Flags::MASK).to_be_bytes());
        p.set_header_len(hl);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(self.urgent_at);
        self.options.write_padded(&mut p.buffer[HEADER_LEN..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    /// A Linux SYN 10.0.0.1:40000 -> 10.0.0.2:80: MSS 1460, SACK permitted, timestamps,
    /// window scale 7.
    pub(crate) const SYN: [u8; 40] = [
        0x9c, 0x40, 0x00, 0x50, 0x1a, 0x2b, 0x3c, 0x4d, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x01,
        0xe2, 0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    fn pseudo() -> u32 {
        checksum::pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            crate::ip::Protocol::Tcp,
            40,
        )
    }

    #[test]
    fn syn_fields_and_options() {
        let p = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (40000, 80));
        assert_eq!(p.seq_number(), 0x1a2b3c4d);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.flags(), Flags::SYN);
        assert_eq!(p.window_len(), 64240);
        let opts: Vec<_> = OptionsIter::new(p.options()).map(|o| o.unwrap()).collect();
        assert_eq!(
            opts,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamp {
                    tsval: 123456,
                    tsecr: 0
                },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        assert!(p.payload().is_empty());
    }

    #[test]
    fn checksum_fill_and_verify() {
        let mut b = SYN;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(pseudo());
        assert!(p.verify_checksum(pseudo()));
        let c = p.checksum();
        assert_ne!(c, 0);
        assert!(!Packet::new_checked(&b[..])
            .unwrap()
            .verify_checksum(pseudo() + 1));
    }

    #[test]
    fn repr_round_trip() {
        let r = Repr::parse(
            &Packet::new_checked(&SYN[..]).unwrap(),
            0,
            checksum::Policy::Ignore,
        )
        .unwrap();
        assert_eq!(r.header_len(), 40);
        let mut out = [0u8; 40];
        r.emit(&mut out).unwrap();
        assert_eq!(out, SYN);
        assert_eq!(r.emit(&mut [0u8; 39]), Err(Error::Truncated));
    }

    #[test]
    fn malformed_options_stop_the_iterator() {
        let bad = [2u8, 9, 0, 0];
        let mut it = OptionsIter::new(&bad);
        assert_eq!(it.next(), Some(Err(Error::Malformed)));
        assert_eq!(it.next(), None);
        let zero_len = [8u8, 0];
        assert_eq!(
            OptionsIter::new(&zero_len).next(),
            Some(Err(Error::Malformed))
        );
        let lone_kind = [3u8];
        assert_eq!(
            OptionsIter::new(&lone_kind).next(),
            Some(Err(Error::Malformed))
        );
    }

    #[test]
    fn check_len() {
        assert_eq!(
            Packet::new_checked(&SYN[..39]).unwrap_err(),
            Error::Truncated
        );
        let mut b = SYN;
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
    }
}
