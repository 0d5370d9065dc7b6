//! Ethernet II frames with a stack of VLAN tags.
//!
//! [`Frame::new_checked`] accepts any buffer of at least [`HDR_LEN`] bytes (14: two MACs and a
//! type field); after that every getter is total. The FCS is never part of the buffer.

use crate::mac::MacAddr;
use crate::vlan::{TagStack, Tpid, TAG_LEN};
use crate::{Error, Result};
use core::fmt;

/// Destination MAC, source MAC, EtherType: the header without tags.
pub const HDR_LEN: usize = 14;
/// Bytes of the two MAC addresses: where the first tag or the EtherType starts.
pub const ADDRS_LEN: usize = 12;
/// Shortest frame on the wire without FCS (64 - 4); shorter ones are padded by senders.
pub const MIN_FRAME_LEN: usize = 60;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const TYPE: Range<usize> = 12..14;
}

/// EtherType, an open number space.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EtherType {
    Ipv4,
    Arp,
    Ipv6,
    Dot1q,
    Dot1ad,
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Dot1q,
            0x88a8 => EtherType::Dot1ad,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Dot1q => 0x8100,
            EtherType::Dot1ad => 0x88a8,
            EtherType::Unknown(v) => v,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", u16::from(*self))
    }
}

/// A read/write view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer of at least [`HDR_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        if buffer.as_ref().len() < HDR_LEN {
            return Err(Error::Truncated);
        }
        Ok(Frame { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn dst(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DST])
    }

    pub fn src(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SRC])
    }

    /// The 16-bit field after the MACs: the outermost TPID of a tagged frame, else the EtherType.
    pub fn outer_type(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Parses the tag stack with `is_tag` deciding which type fields are tags; returns the stack,
    /// the inner EtherType and the offset of the payload (L3 header).
    pub fn tags(&self, is_tag: impl Fn(Tpid) -> bool) -> Result<(TagStack, u16, usize)> {
        let (stack, ethertype) = TagStack::parse(&self.buffer.as_ref()[ADDRS_LEN..], is_tag)?;
        Ok((stack, ethertype, HDR_LEN + stack.wire_len()))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac.0);
    }

    pub fn set_src(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac.0);
    }

    pub fn set_outer_type(&mut self, v: u16) {
        self.buffer.as_mut()[field::TYPE].copy_from_slice(&v.to_be_bytes());
    }
}

/// An owned Ethernet header: addresses, the whole tag stack (outermost first) and the inner
/// EtherType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub tags: TagStack,
    /// The EtherType after the last tag (the L3 protocol).
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the header; `is_tag` decides which type fields are tags (see [`TagStack::parse`]).
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>, is_tag: impl Fn(Tpid) -> bool) -> Result<Repr> {
        let (tags, ethertype, _) = frame.tags(is_tag)?;
        Ok(Repr {
            dst: frame.dst(),
            src: frame.src(),
            tags,
            ethertype: EtherType::from(ethertype),
        })
    }

    /// Header bytes: 14 plus 4 per tag. Also the offset of the L3 header.
    pub fn header_len(&self) -> usize {
        HDR_LEN + self.tags.wire_len()
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes addresses, tags and EtherType into the front of `buf`; `Truncated` if shorter
    /// than [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let Some(hdr) = buf.get_mut(..self.header_len()) else {
            return Err(Error::Truncated);
        };
        hdr[field::DST].copy_from_slice(&self.dst.0);
        hdr[field::SRC].copy_from_slice(&self.src.0);
        let mut at = ADDRS_LEN;
        for tag in self.tags.as_slice() {
            hdr[at..at + TAG_LEN].copy_from_slice(&tag.to_bytes());
            at += TAG_LEN;
        }
        hdr[at..at + 2].copy_from_slice(&u16::from(self.ethertype).to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlan::Tpid;

    #[test]
    fn view() {
        let mut b = [0u8; 22];
        b[0..6].copy_from_slice(&[0xff; 6]);
        b[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        b[12..14].copy_from_slice(&[0x81, 0x00]);
        b[14..16].copy_from_slice(&[0x00, 0x0a]);
        b[16..18].copy_from_slice(&[0x86, 0xdd]);
        let f = Frame::new_checked(&b[..]).unwrap();
        assert!(f.dst().is_broadcast());
        assert_eq!(f.src(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.outer_type(), 0x8100);
        let (s, et, off) = f.tags(Tpid::is_well_known).unwrap();
        assert_eq!((s.len(), et, off), (1, 0x86dd, 18));
        assert_eq!(Frame::new_checked(&b[..13]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn repr_round_trip_two_tags() {
        use crate::vlan::{Tag, Tci, Vid};
        let bytes = [
            0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, // dst, src
            0x88, 0xa8, 0x00, 0x64, // S-tag VID 100
            0x81, 0x00, 0x20, 0x0a, // C-tag PCP 1 VID 10
            0x08, 0x00, // IPv4
        ];
        let r = Repr::parse(
            &Frame::new_checked(&bytes[..]).unwrap(),
            Tpid::is_well_known,
        )
        .unwrap();
        assert_eq!(r.ethertype, EtherType::Ipv4);
        assert_eq!(r.tags.len(), 2);
        assert_eq!(
            r.tags.as_slice()[1],
            Tag::new(Tpid::DOT1Q, Tci::new(1, false, Vid::from_bits(10)))
        );
        assert_eq!(r.header_len(), 22);
        let mut out = [0u8; 22];
        r.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(r.emit(&mut [0u8; 21]), Err(Error::Truncated));
    }
}
