//! Frame formats only: MAC addresses, Ethernet with a stack of VLAN tags, IPv4 (with options),
//! IPv6 (with its extension-header chain), TCP (with options), UDP, ICMPv4/ICMPv6 views, the
//! Internet checksum, the virtio-net header, and a one-pass header walker with a flow hash.
//!
//! Two tiers per header, after smoltcp: a borrowed view (`Packet<T: AsRef<[u8]>>`, or
//! `Frame`/`Header`) with getters, and setters when `T: AsMut<[u8]>`, validated once by
//! `new_checked`; after validation no accessor can panic. Owned `Repr` types `parse` from views
//! and `emit` into byte slices of `buffer_len()` bytes. Field offsets live in a private
//! `mod field` per module. Number spaces the wire leaves open stay open
//! (`EtherType::Unknown`, `Protocol::Unknown`, ...).
//!
//! Module map: [`mac`], [`vlan`] and [`ethernet`] own layer 2 and the tag stack; [`ipv4`],
//! [`ipv6`] and [`ip`] own layer 3; [`tcp`], [`udp`] and [`icmp`] own layer 4; [`checksum`]
//! owns one's-complement arithmetic; [`virtio`] owns the virtio-net header's bytes; [`vxlan`]
//! the VXLAN header (RFC 7348) and the outer UDP source port from the inner flow hash;
//! [`headers`] owns the single walk from Ethernet to L4 payload and the flow hash.
//!
//! This crate does no I/O, never allocates, and has no `unsafe`.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod ethernet;
pub mod frame;
pub mod headers;
pub mod icmp;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mac;
pub mod summary;
pub mod tcp;
pub mod udp;
pub mod virtio;
pub mod vlan;
pub mod vxlan;

pub use ethernet::{EtherType, Frame as EthernetFrame};
pub use headers::{flow_hash, parse_headers, Fragment, Headers, Layout, Mixer};
pub use ip::Protocol as IpProtocol;
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
    /// A checksum did not verify (only when the caller asked for verification).
    BadChecksum,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated",
            Error::TooManyTags => "too many VLAN tags",
            Error::Malformed => "malformed",
            Error::BadChecksum => "bad checksum",
        })
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;
