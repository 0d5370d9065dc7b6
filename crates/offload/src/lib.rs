//! Offloads done in software where a port cannot do them: checksum completion for frames that
//! carry `NEEDS_CSUM`, TCP segmentation (GSO) of super-frames, and its inverse, coalescing of
//! TCP segments into super-frames (GRO) for ports that take them, at any VLAN tag depth. Also
//! the mapping between the virtio-net header's bytes and [`OffloadMeta`].
//!
//! Every offset comes from [`PacketBuf::headers`] (the buffer's recorded header layout, or one
//! [`qbridge_wire::parse_headers`] that records it, so a frame's IP and transport headers are
//! parsed once however many offloads read them); the metadata's `csum_start` and `hdr_len` are
//! checked against the frame, never trusted to index it. GSO types and flags are
//! `qbridge_wire::virtio`'s ([`OffloadMeta::gso`]). Must not import `qbridge-bridge` or
//! `qbridge-io` (they sit above). Per-frame work allocates
//! nothing except the segment buffers it takes from the caller's [`BufPool`] (and a buffer that
//! must grow once to hold a segment larger than its capacity). No `unsafe`, no I/O, no locks.
//!
//! [`OffloadMeta`]: qbridge_packet::OffloadMeta
//! [`OffloadMeta::gso`]: qbridge_packet::OffloadMeta::gso
//! [`PacketBuf::headers`]: qbridge_packet::PacketBuf::headers
//! [`BufPool`]: qbridge_packet::BufPool
#![forbid(unsafe_code)]

pub mod csum;
pub mod gro;
pub mod gso;
pub mod vnet;

pub use csum::{complete_checksum, complete_checksum_in_place, find_partial_checksum};
pub use gro::{EndReason, Gro, GroLimits, GroStats, PassReason, MAX_OPEN_FLOWS};
pub use gso::{segment, segment_into_batch, MAX_SEGMENTS};
pub use vnet::{meta_from_vnet, read_vnet_header, vnet_from_meta, write_vnet_header};

use qbridge_wire::{EtherType, IpProtocol};

/// Why an offload could not be done. The frame is unchanged and nothing was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// The frame's headers do not parse (bad tag stack, IP or TCP header).
    #[error("frame headers do not parse: {0}")]
    Headers(#[from] qbridge_wire::Error),
    /// The virtio-net header is shorter than its kind.
    #[error("virtio-net header needs {need} bytes, buffer has {have}")]
    VnetHeaderTruncated { need: usize, have: usize },
    /// `csum_start + csum_offset + 2` is past the end of the checksummed data.
    #[error("checksum field at csum_start {csum_start} + csum_offset {csum_offset} is past the end of the data ({data_end} bytes)")]
    CsumOutOfRange {
        csum_start: u16,
        csum_offset: u16,
        data_end: usize,
    },
    /// Checksum completion was asked of a GSO super-frame; segment it instead.
    #[error(
        "frame is a GSO super-frame (gso_type {0:#04x}); segment it, do not complete its checksum"
    )]
    CsumOnGsoFrame(u8),
    /// Segmentation was asked of a frame without a GSO type.
    #[error("frame is not a GSO frame (gso_type 0)")]
    NotGso,
    /// `gso_type` 3: UDP fragmentation offload is not implemented.
    #[error("UDP fragmentation offload (gso_type 3, UFO) is not implemented")]
    UfoUnsupported,
    /// Any other `gso_type` than TCPv4 (1), UDP (3) or TCPv6 (4), ECN bit aside.
    #[error("gso_type {0:#04x} is not supported (TCPv4 1 and TCPv6 4 are)")]
    UnsupportedGsoType(u8),
    #[error("gso_size 0: segments would carry no payload")]
    ZeroGsoSize,
    /// The L3 protocol in the frame is not the one `gso_type` names.
    #[error("gso_type {gso_type:#04x} does not match the frame's L3 protocol {ethertype}")]
    L3Mismatch { gso_type: u8, ethertype: EtherType },
    /// The frame's L4 protocol is not TCP.
    #[error("GSO frame carries {0:?}, not TCP")]
    NotTcp(Option<IpProtocol>),
    /// GSO of an IP fragment.
    #[error("GSO frame is an IP fragment")]
    Fragmented,
    #[error("{segments} segments of gso_size {gso_size} exceed the limit of {limit}", limit = MAX_SEGMENTS)]
    TooManySegments { segments: usize, gso_size: u16 },
}
