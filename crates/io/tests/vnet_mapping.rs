//! The live backends' virtio-net header functions (`afpacket::{vnet_to_meta, meta_to_vnet}`,
//! used by AF_PACKET and TAP) call the project's one codec, the one the fuzz targets and the
//! offload tests exercise (`qbridge_offload::{read_vnet_header, write_vnet_header}`, via
//! `qbridge_wire::virtio`); this checks the wrappers add nothing, for every header and every
//! metadata value (the byte layout itself is checked in `afpacket`'s unit tests).

use proptest::prelude::*;
use qbridge_io::afpacket::{meta_to_vnet, vnet_to_meta, VNET_HDR_LEN};
use qbridge_offload::{read_vnet_header, write_vnet_header};
use qbridge_packet::OffloadMeta;
use qbridge_wire::virtio::HeaderKind;

proptest! {
    #[test]
    fn read_matches(bytes in any::<[u8; VNET_HDR_LEN]>()) {
        let (meta, len) = read_vnet_header(&bytes, HeaderKind::Legacy).unwrap();
        prop_assert_eq!(len, VNET_HDR_LEN);
        prop_assert_eq!(vnet_to_meta(&bytes), meta);
    }

    #[test]
    fn write_matches(
        flags in any::<u8>(), gso_type in any::<u8>(), hdr_len in any::<u16>(),
        gso_size in any::<u16>(), csum_start in any::<u16>(), csum_offset in any::<u16>(),
    ) {
        let m = OffloadMeta { flags, gso_type, hdr_len, gso_size, csum_start, csum_offset };
        let mut out = [0u8; VNET_HDR_LEN];
        write_vnet_header(&m, HeaderKind::Legacy, &mut out).unwrap();
        prop_assert_eq!(meta_to_vnet(&m), out);
    }
}
