//! The virtio-net header (`struct virtio_net_hdr`, virtio spec 5.1.6) that TAP devices with
//! `IFF_VNET_HDR` and AF_PACKET sockets with `PACKET_VNET_HDR` put in front of each frame.
//!
//! Two sizes: the 10-byte legacy header and the 12-byte form with `num_buffers`
//! (`virtio_net_hdr_mrg_rxbuf`, also the virtio 1.0 layout). Multi-byte fields are
//! little-endian: virtio 1.0 mandates it, and the kernel's legacy (native-endian) header is
//! little-endian on the x86 and arm64 hosts qbridge runs on. [`Header::new_checked`] needs 10
//! bytes; after that no accessor panics (`num_buffers` is an `Option` because the legacy header
//! lacks it). This module only moves bytes; what the fields mean for a frame is
//! `qbridge-offload`'s business.

use crate::ip::enum_with_unknown;
use crate::{Error, Result};

/// Bytes of the legacy header.
pub const LEGACY_LEN: usize = 10;
/// Bytes of the header with `num_buffers`.
pub const MRG_RXBUF_LEN: usize = 12;

mod field {
    use core::ops::Range;
    pub const FLAGS: usize = 0;
    pub const GSO_TYPE: usize = 1;
    pub const HDR_LEN: Range<usize> = 2..4;
    pub const GSO_SIZE: Range<usize> = 4..6;
    pub const CSUM_START: Range<usize> = 6..8;
    pub const CSUM_OFFSET: Range<usize> = 8..10;
    pub const NUM_BUFFERS: Range<usize> = 10..12;
}

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` must be completed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the receiver may trust the checksums.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_ECN`: or-ed into `gso_type`; the sender set CWR on the super-frame.
pub const GSO_ECN: u8 = 0x80;

enum_with_unknown! {
    /// `gso_type` without the ECN bit.
    pub enum GsoType(u8) {
        None = 0,
        TcpV4 = 1,
        /// UFO: IPv4/IPv6 UDP fragmentation offload.
        Udp = 3,
        TcpV6 = 4,
        /// USO: UDP segmentation (each segment a datagram).
        UdpL4 = 5,
    }
}

impl GsoType {
    /// The type of a raw `gso_type` byte, ECN bit ignored.
    pub fn from_raw(gso_type: u8) -> GsoType {
        GsoType::from(gso_type & !GSO_ECN)
    }

    /// The raw `gso_type` byte of this type, without the ECN bit (`u8::from`, usable in
    /// constants).
    pub const fn raw(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
            GsoType::Unknown(v) => v,
        }
    }
}

/// Which header layout a device uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    /// `struct virtio_net_hdr`, 10 bytes.
    Legacy,
    /// `struct virtio_net_hdr_mrg_rxbuf` / virtio 1.0, 12 bytes.
    MrgRxbuf,
}

impl HeaderKind {
    /// Bytes of this header on the wire.
    pub const fn wire_len(self) -> usize {
        match self {
            HeaderKind::Legacy => LEGACY_LEN,
            HeaderKind::MrgRxbuf => MRG_RXBUF_LEN,
        }
    }

    /// The kind whose length is `len` bytes (what `TUNSETVNETHDRSZ` was given), if any.
    pub const fn from_len(len: usize) -> Option<HeaderKind> {
        match len {
            LEGACY_LEN => Some(HeaderKind::Legacy),
            MRG_RXBUF_LEN => Some(HeaderKind::MrgRxbuf),
            _ => None,
        }
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// A view of a virtio-net header at the front of a buffer.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// `Truncated` if shorter than the 10-byte legacy header.
    pub fn new_checked(buffer: T) -> Result<Header<T>> {
        if buffer.as_ref().len() < LEGACY_LEN {
            return Err(Error::Truncated);
        }
        Ok(Header { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The raw `gso_type` byte, ECN bit included.
    pub fn gso_type(&self) -> u8 {
        self.buffer.as_ref()[field::GSO_TYPE]
    }

    pub fn hdr_len(&self) -> u16 {
        le16(self.buffer.as_ref(), field::HDR_LEN.start)
    }

    pub fn gso_size(&self) -> u16 {
        le16(self.buffer.as_ref(), field::GSO_SIZE.start)
    }

    pub fn csum_start(&self) -> u16 {
        le16(self.buffer.as_ref(), field::CSUM_START.start)
    }

    pub fn csum_offset(&self) -> u16 {
        le16(self.buffer.as_ref(), field::CSUM_OFFSET.start)
    }

    /// `num_buffers` if the buffer is long enough to hold it (12-byte header).
    pub fn num_buffers(&self) -> Option<u16> {
        let b = self.buffer.as_ref().get(field::NUM_BUFFERS)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    pub fn set_gso_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::GSO_TYPE] = v;
    }

    pub fn set_hdr_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::HDR_LEN].copy_from_slice(&v.to_le_bytes());
    }

    pub fn set_gso_size(&mut self, v: u16) {
        self.buffer.as_mut()[field::GSO_SIZE].copy_from_slice(&v.to_le_bytes());
    }

    pub fn set_csum_start(&mut self, v: u16) {
        self.buffer.as_mut()[field::CSUM_START].copy_from_slice(&v.to_le_bytes());
    }

    pub fn set_csum_offset(&mut self, v: u16) {
        self.buffer.as_mut()[field::CSUM_OFFSET].copy_from_slice(&v.to_le_bytes());
    }

    /// Writes `num_buffers`; returns false (nothing written) on a 10-byte buffer.
    pub fn set_num_buffers(&mut self, v: u16) -> bool {
        match self.buffer.as_mut().get_mut(field::NUM_BUFFERS) {
            Some(b) => {
                b.copy_from_slice(&v.to_le_bytes());
                true
            }
            None => false,
        }
    }
}

/// An owned virtio-net header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    pub kind: HeaderKind,
    pub flags: u8,
    /// Raw `gso_type`, ECN bit included.
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
    /// Only on the wire for [`HeaderKind::MrgRxbuf`]; 0 and ignored for `Legacy`.
    pub num_buffers: u16,
}

impl Repr {
    /// Reads a header of `kind`. `Truncated` if the buffer is shorter than `kind.wire_len()`.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>, kind: HeaderKind) -> Result<Repr> {
        if h.buffer.as_ref().len() < kind.wire_len() {
            return Err(Error::Truncated);
        }
        Ok(Repr {
            kind,
            flags: h.flags(),
            gso_type: h.gso_type(),
            hdr_len: h.hdr_len(),
            gso_size: h.gso_size(),
            csum_start: h.csum_start(),
            csum_offset: h.csum_offset(),
            num_buffers: match kind {
                HeaderKind::Legacy => 0,
                HeaderKind::MrgRxbuf => h.num_buffers().unwrap_or(0),
            },
        })
    }

    pub const fn buffer_len(&self) -> usize {
        self.kind.wire_len()
    }

    /// Writes the header into the front of `buf`; `Truncated` if shorter than
    /// [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let Some(hdr) = buf.get_mut(..self.kind.wire_len()) else {
            return Err(Error::Truncated);
        };
        let mut h = Header::new_unchecked(hdr);
        h.set_flags(self.flags);
        h.set_gso_type(self.gso_type);
        h.set_hdr_len(self.hdr_len);
        h.set_gso_size(self.gso_size);
        h.set_csum_start(self.csum_start);
        h.set_csum_offset(self.csum_offset);
        if self.kind == HeaderKind::MrgRxbuf {
            h.set_num_buffers(self.num_buffers);
        }
        Ok(())
    }

    pub fn gso(&self) -> GsoType {
        GsoType::from_raw(self.gso_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a Linux guest's TSO send looks like: NEEDS_CSUM, TCPv4, hdr_len 66, MSS 1448,
    /// csum_start 34, csum_offset 16, num_buffers 1.
    const TSO4: [u8; 12] = [0x01, 0x01, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 1, 0];

    #[test]
    fn parse_both_kinds() {
        let h = Header::new_checked(&TSO4[..]).unwrap();
        let r = Repr::parse(&h, HeaderKind::MrgRxbuf).unwrap();
        assert_eq!(
            r,
            Repr {
                kind: HeaderKind::MrgRxbuf,
                flags: F_NEEDS_CSUM,
                gso_type: 1,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
                num_buffers: 1,
            }
        );
        assert_eq!(r.gso(), GsoType::TcpV4);
        let legacy = Repr::parse(
            &Header::new_checked(&TSO4[..10]).unwrap(),
            HeaderKind::Legacy,
        )
        .unwrap();
        assert_eq!(legacy.num_buffers, 0);
        assert_eq!(
            Repr::parse(
                &Header::new_checked(&TSO4[..10]).unwrap(),
                HeaderKind::MrgRxbuf
            ),
            Err(Error::Truncated)
        );
        assert_eq!(
            Header::new_checked(&TSO4[..9]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn emit_round_trip() {
        let r = Repr::parse(&Header::new_unchecked(&TSO4[..]), HeaderKind::MrgRxbuf).unwrap();
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, TSO4);
        let mut short = [0xffu8; 12];
        Repr {
            kind: HeaderKind::Legacy,
            ..r
        }
        .emit(&mut short)
        .unwrap();
        assert_eq!(&short[..10], &TSO4[..10]);
        assert_eq!(&short[10..], &[0xff, 0xff]);
        assert_eq!(r.emit(&mut [0u8; 11]), Err(Error::Truncated));
        assert_eq!(GsoType::from_raw(0x84), GsoType::TcpV6);
        for raw in 0..=0x7fu8 {
            assert_eq!(GsoType::from(raw).raw(), raw);
            assert_eq!(GsoType::from(raw).raw(), u8::from(GsoType::from(raw)));
        }
        assert_eq!(HeaderKind::from_len(12), Some(HeaderKind::MrgRxbuf));
    }
}
