//! UDP headers (RFC 768).
//!
//! [`Packet::new_checked`] accepts a buffer of at least 8 bytes whose length field is at least 8
//! and fits in the buffer; after that no accessor panics. [`Packet::payload`] ends at the length
//! field. A zero checksum means "none" over IPv4 and is refused over IPv6 by the caller's policy;
//! [`Packet::fill_checksum`] writes 0xffff for a computed zero, as RFC 768 requires.

use crate::checksum;
use crate::ip::be16;
use crate::{Error, Result};

pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Where the checksum sits from the start of the UDP header (virtio `csum_offset` for UDP).
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// A view of a UDP datagram.
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

    /// `Truncated` if shorter than 8 bytes or than the length field; `Malformed` if the length
    /// field is below 8.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(be16(b, field::LENGTH.start));
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < len {
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

    /// Header plus payload, in bytes.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Never true after `new_checked` (the length is at least 8); here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// True if the checksum is correct with `pseudo_sum`, or is zero (none sent; only legal
    /// over IPv4 — the caller judges that).
    pub fn verify_checksum(&self, pseudo_sum: u32) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let seg = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::fold(checksum::combine(pseudo_sum, checksum::sum(seg))) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    /// Computes the checksum over the datagram (length field's worth) with `pseudo_sum`.
    pub fn fill_checksum(&mut self, pseudo_sum: u32) {
        self.set_checksum(0);
        let len = usize::from(self.len());
        let s = checksum::combine(pseudo_sum, checksum::sum(&self.buffer.as_ref()[..len]));
        let c = checksum::finish(s);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

/// An owned UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Payload bytes (the length field minus 8).
    pub payload_len: usize,
}

impl Repr {
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
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (checksum zero) into the front of `buf`. `Truncated` if shorter than
    /// 8 bytes; `Malformed` if the length would exceed 65535.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        let Some(hdr) = buf.get_mut(..HEADER_LEN) else {
            return Err(Error::Truncated);
        };
        let mut p = Packet::new_unchecked(hdr);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::Protocol;
    use core::net::Ipv4Addr;

    /// DNS query 10.0.0.1:53000 -> 10.0.0.53:53, 4 bytes of payload.
    const DGRAM: [u8; 12] = [
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parse_emit_and_checksum() {
        let p = Packet::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53000, 53, 12));
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let r = Repr::parse(&p, 0, checksum::Policy::Verify).unwrap();
        assert_eq!(r.payload_len, 4);
        let mut out = DGRAM;
        out[..8].fill(0);
        r.emit(&mut out).unwrap();
        assert_eq!(out, DGRAM);
        let ps = checksum::pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 53),
            Protocol::Udp,
            12,
        );
        let mut q = Packet::new_checked(&mut out[..]).unwrap();
        q.fill_checksum(ps);
        assert!(q.verify_checksum(ps));
        assert_ne!(q.checksum(), 0);
        assert_eq!(
            Repr::parse(&q, ps.wrapping_add(1), checksum::Policy::Verify),
            Err(Error::BadChecksum)
        );
    }

    #[test]
    fn check_len() {
        assert_eq!(
            Packet::new_checked(&DGRAM[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&DGRAM[..11]).unwrap_err(),
            Error::Truncated
        );
        let mut b = DGRAM;
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
    }
}
