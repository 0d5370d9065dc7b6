//! Cheap readings and in-place edits of an Ethernet frame held as bytes (`&[u8]` /
//! `&mut [u8]`): the destination and source MAC as 48-bit integers, the tag at a given depth of
//! the tag stack (outermost = depth 0, right after the addresses), its TCI or VID set in place,
//! and the MAC address constants the forwarding core compares against. This is how the frame
//! path reads a frame's first bytes; `headers.rs` parses the whole header stack.
//!
//! Nothing here validates the frame as a whole or panics: a reading past the end of the frame
//! is `None`, an edit past it changes nothing and returns `None`. Every function is
//! `#[inline(always)]` and does one bounds check, so the fast path pays what a hand-written
//! slice would. Tags are read at a depth as they are, whatever their TPID: a caller that wants
//! only some TPIDs (the bridge's, 0x8100 for a C-tag) compares [`Tag::tpid`].

use crate::ethernet::ADDRS_LEN;
use crate::vlan::{Tag, Tci, Tpid, TAG_LEN};

/// The individual/group bit of a MAC address held as the low 48 bits of a u64 (bit 0 of its
/// first byte).
pub const MAC_GROUP_BIT: u64 = 1 << 40;

/// ff-ff-ff-ff-ff-ff as a 48-bit integer (also the mask of a MAC's 48 bits in a u64).
pub const MAC_BROADCAST: u64 = 0xffff_ffff_ffff;

/// 01-80-C2-00-00-00 as a 48-bit integer: the IEEE 802.1D reserved (link-local) groups are this
/// plus 0..=15 (`mac & !0xf == LINK_LOCAL_BASE`).
pub const LINK_LOCAL_BASE: u64 = 0x0180_c200_0000;

/// Byte offset of the tag at `depth` (0: the outer tag, right after the addresses).
#[inline(always)]
pub const fn tag_offset(depth: usize) -> usize {
    ADDRS_LEN + TAG_LEN * depth
}

/// The 6 bytes at `off` as a 48-bit integer.
#[inline(always)]
fn mac_u64_at(frame: &[u8], off: usize) -> Option<u64> {
    let m = frame.get(off..off + 6)?;
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(m);
    Some(u64::from_be_bytes(b))
}

/// The destination MAC as a 48-bit integer (`None`: fewer than 6 bytes).
#[inline(always)]
pub fn dst_u64(frame: &[u8]) -> Option<u64> {
    mac_u64_at(frame, 0)
}

/// The source MAC as a 48-bit integer (`None`: fewer than 12 bytes).
#[inline(always)]
pub fn src_u64(frame: &[u8]) -> Option<u64> {
    mac_u64_at(frame, 6)
}

/// The first 16 bytes of a frame as big-endian words: bytes 0..8 (the destination MAC is its
/// top 48 bits), bytes 4..12 (the source MAC is its low 48 bits) and bytes 12..16 (the outer
/// tag's TPID << 16 | TCI, or the EtherType and 2 payload bytes of an untagged frame). The
/// classification fast path reads a frame's addresses and outer tag this way, in three loads.
#[inline(always)]
pub fn header_words(h: &[u8; 16]) -> (u64, u64, u32) {
    let (a, rest) = h.split_at(8);
    let w0 = u64::from_be_bytes(a.try_into().unwrap_or_default());
    let w1 = u64::from_be_bytes(h[4..12].try_into().unwrap_or_default());
    let tag = u32::from_be_bytes(rest[4..8].try_into().unwrap_or_default());
    (w0, w1, tag)
}

/// The 4 bytes of the tag at `depth` as one word, TPID << 16 | TCI (`None`: the frame ends
/// before them).
#[inline(always)]
pub fn tag_word_at(frame: &[u8], depth: usize) -> Option<u32> {
    let at = tag_offset(depth);
    let t = frame.get(at..at + TAG_LEN)?;
    Some(u32::from_be_bytes([t[0], t[1], t[2], t[3]]))
}

/// The tag at `depth` (`None`: the frame ends before its 4 bytes).
#[inline(always)]
pub fn tag_at(frame: &[u8], depth: usize) -> Option<Tag> {
    let w = tag_word_at(frame, depth)?;
    Some(Tag::new(Tpid((w >> 16) as u16), Tci(w as u16)))
}

/// The tag at `depth` when the frame also holds the 2 bytes after it (the next TPID or the
/// EtherType), as a header parser requires of a tag (`None` otherwise).
#[inline(always)]
pub fn full_tag_at(frame: &[u8], depth: usize) -> Option<Tag> {
    if frame.len() < tag_offset(depth) + TAG_LEN + 2 {
        return None;
    }
    tag_at(frame, depth)
}

/// The VID of the tag at `depth` if that tag's TPID is `tpid` (`None`: another TPID, or the
/// frame ends before the tag).
#[inline(always)]
pub fn vid_at(frame: &[u8], depth: usize, tpid: Tpid) -> Option<u16> {
    let t = tag_at(frame, depth)?;
    (t.tpid == tpid).then_some(t.tci.vid().get())
}

/// Overwrites the 4 bytes of the tag at `depth` with `word` (TPID << 16 | TCI). `None`, and
/// the frame unchanged, when it ends before them.
#[inline(always)]
pub fn set_tag_word_at(frame: &mut [u8], depth: usize, word: u32) -> Option<()> {
    let at = tag_offset(depth);
    frame
        .get_mut(at..at + TAG_LEN)?
        .copy_from_slice(&word.to_be_bytes());
    Some(())
}

/// Overwrites the tag at `depth` with `tag` (see [`set_tag_word_at`]).
#[inline(always)]
pub fn set_tag_at(frame: &mut [u8], depth: usize, tag: Tag) -> Option<()> {
    set_tag_word_at(frame, depth, tag_word(tag))
}

/// Sets the VID of the tag at `depth` in place, keeping its TPID, PCP and DEI. `None`, and the
/// frame unchanged, when it ends before the tag.
#[inline(always)]
pub fn set_vid_at(frame: &mut [u8], depth: usize, vid: u16) -> Option<()> {
    let at = tag_offset(depth) + 2;
    let t = frame.get_mut(at..at + 2)?;
    let tci = u16::from_be_bytes([t[0], t[1]]) & 0xf000 | (vid & 0x0fff);
    t.copy_from_slice(&tci.to_be_bytes());
    Some(())
}

/// A tag as one word, TPID << 16 | TCI.
#[inline(always)]
pub const fn tag_word(tag: Tag) -> u32 {
    (tag.tpid.0 as u32) << 16 | tag.tci.0 as u32
}

/// A tag's 4 wire bytes, through [`tag_word`] (one byte swap of a u32; cheaper on the fast
/// path than assembling the two halves).
#[inline(always)]
pub const fn tag_bytes(tag: Tag) -> [u8; TAG_LEN] {
    tag_word(tag).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Vec<u8> {
        let mut f = vec![
            0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e, // dst
            0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
            0x88, 0xa8, 0x20, 0x64, // S-tag: PCP 1, VID 100
            0x81, 0x00, 0xe0, 0x0a, // C-tag: PCP 7, VID 10
            0x08, 0x00, // IPv4
        ];
        f.resize(64, 0);
        f
    }

    #[test]
    fn reads_addresses_and_tags() {
        let f = frame();
        assert_eq!(dst_u64(&f), Some(LINK_LOCAL_BASE | 0x0e));
        assert_eq!(src_u64(&f), Some(0x0200_0000_0001));
        assert_eq!(src_u64(&f[..11]), None);
        assert_eq!(tag_word_at(&f, 0), Some(0x88a8_2064));
        let c = tag_at(&f, 1).unwrap();
        assert_eq!(
            (c.tpid, c.tci.vid().get(), c.tci.pcp()),
            (Tpid::DOT1Q, 10, 7)
        );
        assert_eq!(vid_at(&f, 0, Tpid::DOT1AD), Some(100));
        assert_eq!(vid_at(&f, 0, Tpid::DOT1Q), None);
        assert_eq!(tag_at(&f[..19], 1), None);
        assert_eq!(full_tag_at(&f[..21], 1), None);
        assert!(full_tag_at(&f[..22], 1).is_some());
        let mut h = [0u8; 16];
        h.copy_from_slice(&f[..16]);
        let (w0, w1, tag) = header_words(&h);
        assert_eq!(
            (w0 >> 16, w1 & MAC_BROADCAST, tag),
            (LINK_LOCAL_BASE | 0x0e, 0x0200_0000_0001, 0x88a8_2064)
        );
        assert_ne!(w0 >> 16 & MAC_GROUP_BIT, 0);
    }

    #[test]
    fn edits_in_place() {
        let mut f = frame();
        set_vid_at(&mut f, 1, 0x123).unwrap();
        assert_eq!(tag_word_at(&f, 1), Some(0x8100_e123));
        set_tag_at(&mut f, 0, Tag::new(Tpid::DOT1Q, Tci(5))).unwrap();
        assert_eq!(tag_word_at(&f, 0), Some(0x8100_0005));
        let mut short = f[..14].to_vec();
        assert_eq!(set_tag_word_at(&mut short, 0, 1), None);
        assert_eq!(set_vid_at(&mut short, 0, 1), None);
        assert_eq!(short, f[..14]);
        assert_eq!(tag_offset(2), 20);
        let t = Tag::new(Tpid::DOT1AD, Tci(0x2064));
        assert_eq!(tag_bytes(t), t.to_bytes());
    }
}
