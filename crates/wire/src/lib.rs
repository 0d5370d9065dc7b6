//! Frame formats only: MAC addresses, Ethernet with a stack of VLAN tags, IPv4/IPv6/TCP/UDP/ICMP
//! views, the Internet checksum and the virtio-net header.
//!
//! Two tiers per header, after smoltcp: a borrowed view (`Frame<T: AsRef<[u8]>>`) with getters,
//! and setters when `T: AsMut<[u8]>`, validated once by `new_checked`; after validation no
//! accessor can panic. Owned `Repr` types parse from and emit into views.
//!
//! This crate does no I/O and never allocates.
#![forbid(unsafe_code)]

pub mod ethernet;
pub mod mac;
pub mod vlan;

pub use ethernet::{EtherType, Frame as EthernetFrame};
pub use mac::MacAddr;
pub use vlan::{Pcp, Tag, TagStack, Tci, Tpid, Vid, MAX_TAGS};

/// Why bytes were refused by a `new_checked` or `parse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// Fewer bytes than the header (or a length field) requires.
    Truncated,
    /// More stacked VLAN tags than [`MAX_TAGS`].
    TooManyTags,
    /// A field holds a value the format forbids.
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated",
            Error::TooManyTags => "too many VLAN tags",
            Error::Malformed => "malformed",
        })
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;
