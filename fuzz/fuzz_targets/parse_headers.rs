//! Every wire view, `parse_headers` and `flow_hash` on arbitrary bytes: nothing may panic, and
//! every offset `parse_headers` reports must be accepted by the matching view's `new_checked`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qbridge_wire::checksum::Policy;
use qbridge_wire::ip::Protocol;
use qbridge_wire::tcp::OptionsIter;
use qbridge_wire::{ethernet, icmp, ipv4, ipv6, tcp, udp, virtio};
use qbridge_wire::{flow_hash, parse_headers, EtherType, Fragment, Tpid};

fn touch_views(b: &[u8]) {
    if let Ok(f) = ethernet::Frame::new_checked(b) {
        let _ = (f.dst(), f.src(), f.outer_type(), f.tags(Tpid::is_well_known));
        let _ = ethernet::Repr::parse(&f, |_| true);
    }
    if let Ok(p) = ipv4::Packet::new_checked(b) {
        let _ = (p.options(), p.payload(), p.verify_checksum(), p.pseudo_header_sum());
        let _ = (p.frag_offset_bytes(), p.is_fragment(), p.dscp(), p.ecn());
        let _ = ipv4::Repr::parse(&p, Policy::Verify);
    }
    if let Ok(p) = ipv6::Packet::new_checked(b) {
        let _ = (p.flow_label(), p.payload(), p.extensions(), ipv6::Repr::parse(&p));
    }
    if let Ok(p) = tcp::Packet::new_checked(b) {
        let _ = (p.payload(), p.verify_checksum(0), tcp::Repr::parse(&p, 0, Policy::Verify));
        for _ in OptionsIter::new(p.options()) {}
    }
    if let Ok(p) = udp::Packet::new_checked(b) {
        let _ = (p.payload(), p.verify_checksum(0), udp::Repr::parse(&p, 0, Policy::Verify));
    }
    if let Ok(p) = icmp::Packet::new_checked(b) {
        let _ = (p.payload(), p.rest_of_header(), icmp::Repr::parse(&p, 0, Policy::Verify));
    }
    if let Ok(h) = virtio::Header::new_checked(b) {
        let _ = (h.num_buffers(), virtio::Repr::parse(&h, virtio::HeaderKind::MrgRxbuf));
    }
    let _ = ipv6::walk_extensions(Protocol::HopByHop, b);
}

fuzz_target!(|data: &[u8]| {
    touch_views(data);
    for start in [14usize, 18, 22] {
        if let Some(tail) = data.get(start..) {
            touch_views(tail);
        }
    }
    let _ = flow_hash(data);
    let _ = parse_headers(data, |_| true);
    let Ok(h) = parse_headers(data, Tpid::is_well_known) else {
        return;
    };
    assert!(h.l3_offset <= h.l3_end && h.l3_end <= data.len());
    let l3 = &data[h.l3_offset..];
    match h.ethertype {
        EtherType::Ipv4 => assert!(ipv4::Packet::new_checked(l3).is_ok()),
        EtherType::Ipv6 => assert!(ipv6::Packet::new_checked(l3).is_ok()),
        _ => assert!(h.l4_offset.is_none()),
    }
    if let (Some(l4), Some(payload)) = (h.l4_offset, h.payload_offset) {
        assert_eq!(h.fragment, Fragment::Whole);
        assert!(h.l3_offset < l4 && l4 < payload && payload <= h.l3_end);
        let seg = &data[l4..h.l3_end];
        match h.l4_proto {
            Some(Protocol::Tcp) => {
                assert_eq!(l4 + tcp::Packet::new_checked(seg).unwrap().header_len(), payload)
            }
            Some(Protocol::Udp) => assert!(udp::Packet::new_checked(seg).is_ok()),
            _ => assert!(icmp::Packet::new_checked(seg).is_ok()),
        }
    }
});
