//! Software GSO and checksum completion on arbitrary offload metadata and bytes: nothing may
//! panic, and every segment produced must parse with a verifying TCP checksum and carry at most
//! `gso_size` payload bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qbridge_offload::{complete_checksum, read_vnet_header, segment};
use qbridge_packet::{BufPool, PacketBuf};
use qbridge_wire::{ipv4, ipv6, parse_headers, tcp, virtio::HeaderKind, EtherType, Tpid};

fuzz_target!(|data: &[u8]| {
    // A TAP read: virtio-net header, then the frame.
    let Ok((meta, hdr_len)) = read_vnet_header(data, HeaderKind::Legacy) else {
        return;
    };
    let mut pkt = PacketBuf::from_frame(&data[hdr_len..]);
    pkt.offload = meta;
    let mut pool = BufPool::new(16);
    let mut out = Vec::new();
    if let Ok(n) = segment(&pkt, Tpid::is_well_known, &mut pool, &mut out) {
        assert_eq!(n, out.len());
        for seg in &out {
            let f = seg.frame();
            let h = parse_headers(f, Tpid::is_well_known).expect("segment parses");
            let l4 = h.l4_offset.expect("segment has TCP");
            let payload = h.payload_offset.expect("segment has a TCP payload offset");
            assert!(f.len() - payload <= usize::from(meta.gso_size));
            let pseudo = match h.ethertype {
                EtherType::Ipv4 => {
                    let ip = ipv4::Packet::new_checked(&f[h.l3_offset..]).unwrap();
                    assert!(ip.verify_checksum());
                    ip.pseudo_header_sum()
                }
                _ => {
                    let ip = ipv6::Packet::new_checked(&f[h.l3_offset..]).unwrap();
                    ip.pseudo_header_sum(qbridge_wire::IpProtocol::Tcp, (h.l3_end - l4) as u32)
                }
            };
            let t = tcp::Packet::new_checked(&f[l4..h.l3_end]).unwrap();
            assert!(t.verify_checksum(pseudo), "segment TCP checksum");
        }
    }
    let _ = complete_checksum(&mut pkt, Tpid::is_well_known);
    let _ = complete_checksum(&mut pkt, |_| true);
});
