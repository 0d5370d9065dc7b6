//! What the offload tests share: an Internet checksum written out plainly (RFC 1071),
//! independent of `qbridge_wire::checksum`, so the tests do not check the code with itself;
//! and the TCP flag bits.
#![allow(dead_code)]

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const CWR: u8 = 0x80;

/// The 16-bit one's-complement sum of the concatenated `parts` (a valid checksummed region
/// sums to 0xffff).
pub fn ones_sum(parts: &[&[u8]]) -> u16 {
    let mut all = Vec::new();
    for p in parts {
        all.extend_from_slice(p);
    }
    if all.len() % 2 == 1 {
        all.push(0);
    }
    let mut s: u64 = 0;
    for w in all.chunks(2) {
        s += u64::from(w[0]) << 8 | u64::from(w[1]);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}
