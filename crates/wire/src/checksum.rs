//! The Internet checksum (RFC 1071): one's-complement sums over byte slices, the IPv4 and IPv6
//! pseudo-header sums that TCP, UDP and ICMPv6 fold in, and incremental update (RFC 1624).
//!
//! Sums are carried unfolded in a `u32` so that pieces (pseudo-header, header, payload) can be
//! added with [`combine`] and folded once with [`fold`]. A piece must start at an even offset
//! of the checksummed region; [`sum`] treats an odd trailing byte as padded with zero, so only the
//! last piece may have odd length. Cost: one pass over the bytes, four at a time. Total
//! functions, no panics, no allocation.

use crate::ip::Protocol;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Whether a `Repr::parse` checks checksums. Frames with offload metadata (`NEEDS_CSUM`)
/// carry a partial checksum, so the caller decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// A wrong checksum is [`Error::BadChecksum`](crate::Error::BadChecksum).
    Verify,
    /// The checksum field is read but not judged.
    Ignore,
}

/// The one's-complement sum of `data` as 16-bit big-endian words, not yet folded to 16 bits.
/// An odd trailing byte counts as the high byte of a final word.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc += u64::from(u32::from_be_bytes(tail));
    // Fold 64 -> 32 bits keeping the one's-complement value mod 0xffff.
    let folded = (acc & 0xffff_ffff) + (acc >> 32);
    let folded = (folded & 0xffff_ffff) + (folded >> 32);
    fold32(folded as u32)
}

/// Folds a 32-bit sum into 17 bits without losing carries (helper for [`sum`] and [`combine`]).
const fn fold32(s: u32) -> u32 {
    (s & 0xffff) + (s >> 16)
}

/// Adds two unfolded sums.
pub const fn combine(a: u32, b: u32) -> u32 {
    let s = a as u64 + b as u64;
    let s = (s & 0xffff_ffff) + (s >> 32);
    fold32(s as u32)
}

/// Folds an unfolded sum to 16 bits (the one's-complement sum, not its complement).
pub const fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The checksum to store for a region whose sum is `s`: the complement of the folded sum.
pub const fn finish(s: u32) -> u16 {
    !fold(s)
}

/// The checksum of `data` alone (IPv4 header, ICMPv4).
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// True if `data`, checksum field included, sums to 0xffff (the field is correct).
pub fn verify(data: &[u8]) -> bool {
    fold(sum(data)) == 0xffff
}

/// The IPv4 pseudo-header sum: addresses, protocol and the L4 length in bytes.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: Protocol, l4_len: u32) -> u32 {
    let s = sum(&src.octets());
    let s = combine(s, sum(&dst.octets()));
    let s = combine(s, u32::from(u8::from(proto)));
    combine(s, (l4_len & 0xffff) + (l4_len >> 16))
}

/// The IPv6 pseudo-header sum (RFC 8200 8.1): addresses, upper-layer length, next header.
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: Protocol, l4_len: u32) -> u32 {
    let s = sum(&src.octets());
    let s = combine(s, sum(&dst.octets()));
    let s = combine(s, u32::from(u8::from(proto)));
    combine(s, (l4_len & 0xffff) + (l4_len >> 16))
}

/// RFC 1624 eqn. 3: the checksum after a 16-bit word of the covered data changed from `old`
/// to `new`, without touching the rest: `HC' = ~(~HC + ~m + m')`.
pub const fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    let s = (!csum) as u32 + (!old) as u32 + new as u32;
    !fold(s)
}

/// [`update_u16`] for a 32-bit field (an IPv4 address, a TCP sequence number).
pub const fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(csum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn ipv4_header_known_value() {
        // A classic example header (Wikipedia "IPv4 header checksum"), checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(verify(&h));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xb861);
    }

    #[test]
    fn incremental_matches_recompute() {
        let mut h = [
            0x45u8, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let old_csum = u16::from_be_bytes([h[10], h[11]]);
        // TTL 64 -> 63 changes the word at offset 8.
        let old = u16::from_be_bytes([h[8], h[9]]);
        h[8] = 63;
        let new = u16::from_be_bytes([h[8], h[9]]);
        let inc = update_u16(old_csum, old, new);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(inc, checksum(&h));
        let inc32 = update_u32(inc, 0xc0a8_0001, 0x0a00_0001);
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(inc32, checksum(&h));
    }

    #[test]
    fn combine_is_sum_of_pieces() {
        let d: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let whole = fold(sum(&d));
        let pieces = combine(
            sum(&d[..1000]),
            combine(sum(&d[1000..2002]), sum(&d[2002..])),
        );
        assert_eq!(fold(pieces), whole);
    }
}
