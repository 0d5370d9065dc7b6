//! The virtio-net header (bytes, in `qbridge_wire::virtio`) to and from [`OffloadMeta`] (what
//! the datapath carries beside a frame). Lives here because `qbridge-wire` must not depend on
//! `qbridge-packet`.
//!
//! The fields map one to one; `num_buffers` is receive-side bookkeeping of the device and is
//! not carried (written as 0, as a virtio driver does on transmit).

use crate::OffloadError;
use qbridge_packet::OffloadMeta;
use qbridge_wire::virtio::{Header, HeaderKind, Repr};

/// The metadata a virtio-net header carries.
pub fn meta_from_vnet(r: &Repr) -> OffloadMeta {
    OffloadMeta {
        flags: r.flags,
        gso_type: r.gso_type,
        hdr_len: r.hdr_len,
        gso_size: r.gso_size,
        csum_start: r.csum_start,
        csum_offset: r.csum_offset,
    }
}

/// A virtio-net header of `kind` carrying `m`.
pub fn vnet_from_meta(m: &OffloadMeta, kind: HeaderKind) -> Repr {
    Repr {
        kind,
        flags: m.flags,
        gso_type: m.gso_type,
        hdr_len: m.hdr_len,
        gso_size: m.gso_size,
        csum_start: m.csum_start,
        csum_offset: m.csum_offset,
        num_buffers: 0,
    }
}

/// Reads the header of `kind` at the front of `bytes` (what a TAP read returns); returns the
/// metadata and the header length, which is where the Ethernet frame starts.
pub fn read_vnet_header(
    bytes: &[u8],
    kind: HeaderKind,
) -> Result<(OffloadMeta, usize), OffloadError> {
    let need = kind.wire_len();
    let truncated = OffloadError::VnetHeaderTruncated {
        need,
        have: bytes.len(),
    };
    let h = Header::new_checked(bytes).map_err(|_| truncated)?;
    let r = Repr::parse(&h, kind).map_err(|_| truncated)?;
    Ok((meta_from_vnet(&r), need))
}

/// Writes `m` as a header of `kind` into the front of `out`; returns the bytes written.
pub fn write_vnet_header(
    m: &OffloadMeta,
    kind: HeaderKind,
    out: &mut [u8],
) -> Result<usize, OffloadError> {
    let r = vnet_from_meta(m, kind);
    r.emit(out).map_err(|_| OffloadError::VnetHeaderTruncated {
        need: kind.wire_len(),
        have: out.len(),
    })?;
    Ok(kind.wire_len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM, GSO_ECN};

    #[test]
    fn round_trip_both_kinds() {
        let m = OffloadMeta {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV6.raw() | GSO_ECN,
            hdr_len: 94,
            gso_size: 1428,
            csum_start: 62,
            csum_offset: 16,
        };
        for kind in [HeaderKind::Legacy, HeaderKind::MrgRxbuf] {
            let mut buf = [0xeeu8; 12];
            assert_eq!(
                write_vnet_header(&m, kind, &mut buf).unwrap(),
                kind.wire_len()
            );
            assert_eq!(read_vnet_header(&buf, kind).unwrap(), (m, kind.wire_len()));
            assert_eq!(meta_from_vnet(&vnet_from_meta(&m, kind)), m);
        }
        // Little-endian on the wire: hdr_len 94 = 0x5e, gso_size 1428 = 0x0594.
        let mut buf = [0u8; 10];
        write_vnet_header(&m, HeaderKind::Legacy, &mut buf).unwrap();
        assert_eq!(
            buf,
            [0x01, 0x84, 0x5e, 0x00, 0x94, 0x05, 0x3e, 0x00, 0x10, 0x00]
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(
            read_vnet_header(&[0u8; 11], HeaderKind::MrgRxbuf),
            Err(OffloadError::VnetHeaderTruncated { need: 12, have: 11 })
        );
        assert_eq!(
            write_vnet_header(&OffloadMeta::default(), HeaderKind::Legacy, &mut [0u8; 9]),
            Err(OffloadError::VnetHeaderTruncated { need: 10, have: 9 })
        );
    }
}
