//! VLAN tags: TPID, TCI (PCP, DEI, VID) and a fixed-capacity stack of tags.
//!
//! A tag is 4 bytes on the wire: TPID (2) then TCI (2). Which TPIDs count as tags is a policy of
//! the reader (a bridge port's TPID set, or [`Tpid::is_well_known`]), so parsing takes a predicate.
//! The stack holds at most [`MAX_TAGS`]; a frame with more is refused with
//! [`Error::TooManyTags`](crate::Error::TooManyTags), never truncated silently.

use core::fmt;

/// Most tags a [`TagStack`] holds. Deeper frames are refused as `TooManyTags`.
pub const MAX_TAGS: usize = 8;

/// Bytes of one tag on the wire.
pub const TAG_LEN: usize = 4;

/// A Tag Protocol Identifier: the EtherType value that introduces a VLAN tag.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tpid(pub u16);

impl Tpid {
    /// IEEE 802.1Q customer tag (C-tag).
    pub const DOT1Q: Tpid = Tpid(0x8100);
    /// IEEE 802.1ad service tag (S-tag).
    pub const DOT1AD: Tpid = Tpid(0x88a8);
    /// Pre-standard Q-in-Q TPIDs still met in the field.
    pub const QINQ_9100: Tpid = Tpid(0x9100);
    pub const QINQ_9200: Tpid = Tpid(0x9200);
    pub const QINQ_9300: Tpid = Tpid(0x9300);

    /// The TPIDs the kernel takes as VLAN tags (`eth_type_vlan`): 802.1Q and 802.1ad. The
    /// eBPF fast path's program parses and edits these and no other.
    pub const KERNEL: [Tpid; 2] = [Tpid::DOT1Q, Tpid::DOT1AD];

    /// The TPIDs any stack parser recognises without configuration: the kernel's, then the
    /// pre-standard Q-in-Q ones. The one list (the pipeline, the bond hash, the fast path's
    /// compiler read it; the fast path's C program, which cannot, names the same five).
    pub const WELL_KNOWN: [Tpid; 5] = [
        Tpid::DOT1Q,
        Tpid::DOT1AD,
        Tpid::QINQ_9100,
        Tpid::QINQ_9200,
        Tpid::QINQ_9300,
    ];

    /// Whether this TPID is one of [`Tpid::WELL_KNOWN`].
    #[inline]
    pub const fn is_well_known(self) -> bool {
        Self::listed(&Self::WELL_KNOWN, self)
    }

    /// Whether this TPID is one of [`Tpid::KERNEL`].
    #[inline]
    pub const fn is_kernel(self) -> bool {
        Self::listed(&Self::KERNEL, self)
    }

    #[inline(always)]
    const fn listed(list: &[Tpid], t: Tpid) -> bool {
        let mut i = 0;
        while i < list.len() {
            if list[i].0 == t.0 {
                return true;
            }
            i += 1;
        }
        false
    }
}

impl fmt::Display for Tpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

impl fmt::Debug for Tpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A 12-bit VLAN identifier, 0..=4095. 0 means "priority tag", 4095 is reserved.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Vid(u16);

impl Vid {
    pub const MAX_USABLE: u16 = 4094;
    pub const PRIORITY: Vid = Vid(0);
    pub const RESERVED: Vid = Vid(4095);

    /// The low 12 bits of `v`.
    pub const fn from_bits(v: u16) -> Vid {
        Vid(v & 0x0fff)
    }

    /// A VID usable for membership: 1..=4094.
    pub const fn new_usable(v: u16) -> Option<Vid> {
        if v >= 1 && v <= Self::MAX_USABLE {
            Some(Vid(v))
        } else {
            None
        }
    }

    pub const fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Vid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Priority Code Point, 0..=7.
pub type Pcp = u8;

/// Tag Control Information: PCP (3 bits), DEI (1 bit), VID (12 bits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct Tci(pub u16);

impl Tci {
    pub const fn new(pcp: Pcp, dei: bool, vid: Vid) -> Tci {
        Tci(((pcp as u16 & 7) << 13) | ((dei as u16) << 12) | vid.0)
    }
    pub const fn vid(self) -> Vid {
        Vid(self.0 & 0x0fff)
    }
    pub const fn pcp(self) -> Pcp {
        (self.0 >> 13) as u8
    }
    pub const fn dei(self) -> bool {
        self.0 & 0x1000 != 0
    }
    /// The same PCP and DEI with another VID.
    pub const fn with_vid(self, vid: Vid) -> Tci {
        Tci((self.0 & 0xf000) | vid.0)
    }
}

/// One VLAN tag.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct Tag {
    pub tpid: Tpid,
    pub tci: Tci,
}

impl Tag {
    pub const fn new(tpid: Tpid, tci: Tci) -> Tag {
        Tag { tpid, tci }
    }

    /// The 4 wire bytes.
    pub const fn to_bytes(self) -> [u8; TAG_LEN] {
        let t = self.tpid.0.to_be_bytes();
        let c = self.tci.0.to_be_bytes();
        [t[0], t[1], c[0], c[1]]
    }

    /// Reads a tag from 4 bytes; `None` if fewer.
    pub fn from_bytes(b: &[u8]) -> Option<Tag> {
        if b.len() < TAG_LEN {
            return None;
        }
        Some(Tag {
            tpid: Tpid(u16::from_be_bytes([b[0], b[1]])),
            tci: Tci(u16::from_be_bytes([b[2], b[3]])),
        })
    }
}

/// Up to [`MAX_TAGS`] tags, outermost first.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct TagStack {
    tags: [Tag; MAX_TAGS],
    len: u8,
}

impl TagStack {
    pub const fn new() -> TagStack {
        TagStack {
            tags: [Tag {
                tpid: Tpid(0),
                tci: Tci(0),
            }; MAX_TAGS],
            len: 0,
        }
    }

    pub const fn len(&self) -> usize {
        self.len as usize
    }

    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[Tag] {
        &self.tags[..self.len as usize]
    }

    pub fn outer(&self) -> Option<Tag> {
        self.as_slice().first().copied()
    }

    /// Appends an inner tag; `Err(TooManyTags)` when full.
    pub fn push_inner(&mut self, tag: Tag) -> crate::Result<()> {
        if self.len as usize == MAX_TAGS {
            return Err(crate::Error::TooManyTags);
        }
        self.tags[self.len as usize] = tag;
        self.len += 1;
        Ok(())
    }

    /// Bytes the stack takes on the wire.
    pub const fn wire_len(&self) -> usize {
        self.len as usize * TAG_LEN
    }

    /// Parses tags from `bytes`, which start at the first TPID/EtherType field (offset 12 of an
    /// Ethernet frame). A 2-byte field is a tag when `is_tag` accepts it. Returns the stack and
    /// the inner EtherType. `Truncated` if a tag or the EtherType is cut short; `TooManyTags`
    /// past [`MAX_TAGS`].
    pub fn parse(bytes: &[u8], is_tag: impl Fn(Tpid) -> bool) -> crate::Result<(TagStack, u16)> {
        let mut stack = TagStack::new();
        let mut at = 0usize;
        loop {
            let Some(field) = bytes.get(at..at + 2) else {
                return Err(crate::Error::Truncated);
            };
            let value = u16::from_be_bytes([field[0], field[1]]);
            if !is_tag(Tpid(value)) {
                return Ok((stack, value));
            }
            let tag = Tag::from_bytes(&bytes[at..]).ok_or(crate::Error::Truncated)?;
            stack.push_inner(tag)?;
            at += TAG_LEN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tci_fields() {
        let t = Tci::new(5, true, Vid::from_bits(100));
        assert_eq!(t.0, 0xb064);
        assert_eq!((t.pcp(), t.dei(), t.vid().get()), (5, true, 100));
        assert_eq!(t.with_vid(Vid::from_bits(7)).0, 0xb007);
    }

    #[test]
    fn the_tpid_lists() {
        let known: Vec<u16> = (0..=u16::MAX)
            .filter(|&t| Tpid(t).is_well_known())
            .collect();
        assert_eq!(known, [0x8100, 0x88a8, 0x9100, 0x9200, 0x9300]);
        let kernel: Vec<u16> = (0..=u16::MAX).filter(|&t| Tpid(t).is_kernel()).collect();
        assert_eq!(kernel, [0x8100, 0x88a8]);
        assert!(Tpid::KERNEL.iter().all(|t| t.is_well_known()));
    }

    #[test]
    fn parse_double_tag() {
        let bytes = [0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x0a, 0x08, 0x00];
        let (s, et) = TagStack::parse(&bytes, Tpid::is_well_known).unwrap();
        assert_eq!(et, 0x0800);
        assert_eq!(s.len(), 2);
        assert_eq!(s.as_slice()[0], Tag::new(Tpid::DOT1AD, Tci(0x0064)));
        assert_eq!(s.as_slice()[1].tci.vid().get(), 10);
        assert_eq!(s.as_slice()[1].tci.pcp(), 1);
        // Only 0x88a8 counts: the C-tag is payload.
        let (s, et) = TagStack::parse(&bytes, |t| t == Tpid::DOT1AD).unwrap();
        assert_eq!((s.len(), et), (1, 0x8100));
    }

    #[test]
    fn parse_limits() {
        let mut deep = Vec::new();
        for _ in 0..MAX_TAGS + 1 {
            deep.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        deep.extend_from_slice(&[0x08, 0x00]);
        assert_eq!(
            TagStack::parse(&deep, Tpid::is_well_known),
            Err(crate::Error::TooManyTags)
        );
        assert_eq!(
            TagStack::parse(&deep[4..], Tpid::is_well_known)
                .unwrap()
                .0
                .len(),
            MAX_TAGS
        );
        assert_eq!(
            TagStack::parse(&[0x81, 0x00, 0x00], Tpid::is_well_known),
            Err(crate::Error::Truncated)
        );
        assert_eq!(
            TagStack::parse(&[0x81], Tpid::is_well_known),
            Err(crate::Error::Truncated)
        );
    }
}
