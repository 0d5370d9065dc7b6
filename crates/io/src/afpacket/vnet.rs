//! The virtio-net header an AF_PACKET socket (and a TAP) exchanges with every frame under
//! `PACKET_VNET_HDR`, to and from [`OffloadMeta`], through the project's one codec.

use qbridge_packet::OffloadMeta;
use qbridge_wire::virtio::HeaderKind;

/// Length of `struct virtio_net_hdr` (no `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;

/// `struct virtio_net_hdr` (10 bytes, little-endian fields) to [`OffloadMeta`], through the one
/// codec of the project (`qbridge_offload::read_vnet_header`, the one the fuzz targets and the
/// offload tests exercise). `h` is at least [`VNET_HDR_LEN`] bytes wherever it is called (a
/// ring slot's header, a TAP read checked for length); a shorter one reads as no metadata.
pub fn vnet_to_meta(h: &[u8]) -> OffloadMeta {
    match qbridge_offload::read_vnet_header(h, HeaderKind::Legacy) {
        Ok((m, _)) => m,
        Err(_) => {
            debug_assert!(false, "virtio-net header of {} bytes", h.len());
            OffloadMeta::default()
        }
    }
}

/// [`OffloadMeta`] to `struct virtio_net_hdr`, through the same codec
/// (`qbridge_offload::write_vnet_header`).
pub fn meta_to_vnet(m: &OffloadMeta) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    // Cannot fail: the buffer is exactly the legacy header's length.
    let _ = qbridge_offload::write_vnet_header(m, HeaderKind::Legacy, &mut h);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnet_header_round_trip() {
        let m = OffloadMeta {
            flags: 1,
            gso_type: 4,
            hdr_len: 0x1234,
            gso_size: 1448,
            csum_start: 58,
            csum_offset: 16,
        };
        let h = meta_to_vnet(&m);
        assert_eq!(h, [1, 4, 0x34, 0x12, 0xa8, 0x05, 58, 0, 16, 0]);
        assert_eq!(vnet_to_meta(&h), m);
    }
}
