//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) headers: type, code, checksum and the 4-byte
//! rest-of-header word. Message bodies are payload to this module.
//!
//! [`Packet::new_checked`] accepts any buffer of at least [`HEADER_LEN`] bytes; after that no
//! accessor panics. The buffer is the whole message: the checksum covers all of it (plus, for
//! ICMPv6, the IPv6 pseudo-header passed in as a sum; ICMPv4 passes 0).

use crate::checksum;
use crate::ip::{be16, enum_with_unknown};
use crate::{Error, Result};

pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
}

enum_with_unknown! {
    /// ICMPv4 message types.
    pub enum Icmpv4Message(u8) {
        EchoReply = 0,
        DstUnreachable = 3,
        Redirect = 5,
        EchoRequest = 8,
        TimeExceeded = 11,
        ParamProblem = 12,
    }
}

enum_with_unknown! {
    /// ICMPv6 message types.
    pub enum Icmpv6Message(u8) {
        DstUnreachable = 1,
        PacketTooBig = 2,
        TimeExceeded = 3,
        ParamProblem = 4,
        EchoRequest = 128,
        EchoReply = 129,
        RouterSolicit = 133,
        RouterAdvert = 134,
        NeighborSolicit = 135,
        NeighborAdvert = 136,
        Redirect = 137,
    }
}

/// A view of an ICMPv4 or ICMPv6 message (the formats share the first 8 bytes).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// `Truncated` if shorter than 8 bytes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw type byte; convert with `Icmpv4Message::from` or `Icmpv6Message::from`.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The rest-of-header word (echo identifier and sequence, MTU, pointer ...).
    pub fn rest_of_header(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::REST];
        [b[0], b[1], b[2], b[3]]
    }

    /// Echo identifier (first half of the rest of header).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REST.start)
    }

    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REST.start + 2)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True if the checksum over the message plus `pseudo_sum` (0 for ICMPv4) is correct.
    pub fn verify_checksum(&self, pseudo_sum: u32) -> bool {
        checksum::fold(checksum::combine(
            pseudo_sum,
            checksum::sum(self.buffer.as_ref()),
        )) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and stores the checksum over the whole buffer plus `pseudo_sum`.
    pub fn fill_checksum(&mut self, pseudo_sum: u32) {
        self.set_checksum(0);
        let s = checksum::combine(pseudo_sum, checksum::sum(self.buffer.as_ref()));
        self.set_checksum(checksum::finish(s));
    }
}

/// An owned ICMP header (either version; the type byte is interpreted by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub msg_type: u8,
    pub msg_code: u8,
    pub rest_of_header: [u8; 4],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(
        p: &Packet<T>,
        pseudo_sum: u32,
        policy: checksum::Policy,
    ) -> Result<Repr> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if policy == checksum::Policy::Verify && !p.verify_checksum(pseudo_sum) {
            return Err(Error::BadChecksum);
        }
        Ok(Repr {
            msg_type: p.msg_type(),
            msg_code: p.msg_code(),
            rest_of_header: p.rest_of_header(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (checksum zero) into the front of `buf`; fill the checksum once the
    /// body is in place.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let Some(hdr) = buf.get_mut(..HEADER_LEN) else {
            return Err(Error::Truncated);
        };
        let mut p = Packet::new_unchecked(hdr);
        p.set_msg_type(self.msg_type);
        p.set_msg_code(self.msg_code);
        p.set_checksum(0);
        p.set_rest_of_header(self.rest_of_header);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ping` echo request, id 0x1c46, seq 1, 8 bytes of data, checksum left zero.
    const ECHO: [u8; 16] = [
        0x08, 0x00, 0x00, 0x00, 0x1c, 0x46, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    #[test]
    fn echo_request() {
        let mut b = ECHO;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(0);
        assert!(p.verify_checksum(0));
        assert_eq!(
            Icmpv4Message::from(p.msg_type()),
            Icmpv4Message::EchoRequest
        );
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1c46, 1));
        let r = Repr::parse(&p, 0, checksum::Policy::Verify).unwrap();
        let mut out = [0u8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..2], &ECHO[..2]);
        assert_eq!(&out[4..], &ECHO[4..8]);
        assert_eq!(Icmpv6Message::from(135), Icmpv6Message::NeighborSolicit);
        assert_eq!(u8::from(Icmpv6Message::Unknown(200)), 200);
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
    }
}
