//! Property tests: no view, walker or hash panics on any bytes; emit∘parse is the identity on
//! reprs; emitted packets' checksums verify.

use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;
use qbridge_wire::checksum::{self, Policy};
use qbridge_wire::ip::{OptionBytes, Protocol};
use qbridge_wire::tcp::{Flags, OptionsIter};
use qbridge_wire::vlan::{Tag, TagStack, Tci, Tpid};
use qbridge_wire::{ethernet, icmp, ipv4, ipv6, tcp, udp, virtio, EtherType, MacAddr};
use qbridge_wire::{flow_hash, parse_headers};

/// Reads every getter of every view over `b`; any panic fails the property.
fn touch_all_views(b: &[u8]) {
    if let Ok(f) = ethernet::Frame::new_checked(b) {
        let _ = (
            f.dst(),
            f.src(),
            f.outer_type(),
            f.tags(Tpid::is_well_known),
        );
        let _ = ethernet::Repr::parse(&f, |_| true);
    }
    if let Ok(p) = ipv4::Packet::new_checked(b) {
        let _ = (
            p.header_len(),
            p.total_len(),
            p.ident(),
            p.frag_offset_bytes(),
            p.protocol(),
        );
        let _ = (
            p.options(),
            p.payload(),
            p.verify_checksum(),
            p.pseudo_header_sum(),
        );
        let _ = ipv4::Repr::parse(&p, Policy::Verify);
    }
    if let Ok(p) = ipv6::Packet::new_checked(b) {
        let _ = (
            p.traffic_class(),
            p.flow_label(),
            p.payload(),
            p.extensions(),
        );
        let _ = ipv6::Repr::parse(&p);
    }
    if let Ok(p) = tcp::Packet::new_checked(b) {
        let _ = (
            p.seq_number(),
            p.flags(),
            p.options(),
            p.payload(),
            p.verify_checksum(7),
        );
        let _ = OptionsIter::new(p.options()).count();
        let _ = tcp::Repr::parse(&p, 0, Policy::Verify);
    }
    if let Ok(p) = udp::Packet::new_checked(b) {
        let _ = (p.len(), p.payload(), p.verify_checksum(0));
        let _ = udp::Repr::parse(&p, 0, Policy::Verify);
    }
    if let Ok(p) = icmp::Packet::new_checked(b) {
        let _ = (
            p.msg_type(),
            p.rest_of_header(),
            p.payload(),
            p.verify_checksum(0),
        );
        let _ = icmp::Repr::parse(&p, 0, Policy::Verify);
    }
    if let Ok(h) = virtio::Header::new_checked(b) {
        let _ = (h.hdr_len(), h.gso_size(), h.num_buffers());
        let _ = virtio::Repr::parse(&h, virtio::HeaderKind::MrgRxbuf);
    }
    let _ = ipv6::walk_extensions(Protocol::HopByHop, b);
    let _ = OptionsIter::new(b).count();
    let _ = checksum::sum(b);
}

fn tagged_frame_prefix() -> impl Strategy<Value = Vec<u8>> {
    // Headers that get past the tag stack more often than uniform bytes would.
    (
        prop::collection::vec(prop_oneof![Just(0x8100u16), Just(0x88a8u16)], 0..4),
        any::<bool>(),
    )
        .prop_map(|(tpids, v6)| {
            let mut f = vec![0u8; 12];
            for t in tpids {
                f.extend_from_slice(&t.to_be_bytes());
                f.extend_from_slice(&[0, 1]);
            }
            f.extend_from_slice(if v6 {
                &[0x86, 0xdd, 0x60]
            } else {
                &[0x08, 0x00, 0x45]
            });
            f
        })
}

fn arb_options() -> impl Strategy<Value = OptionBytes> {
    prop::collection::vec(any::<u8>(), 0..=40).prop_map(|v| {
        // Reprs carry padded option bytes (what parse returns), so round to 4.
        let n = v.len() & !3;
        OptionBytes::from_slice(&v[..n]).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn nothing_panics_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..200)) {
        touch_all_views(&b);
        let _ = parse_headers(&b, Tpid::is_well_known);
        let _ = parse_headers(&b, |_| true);
        let _ = flow_hash(&b);
    }

    #[test]
    fn nothing_panics_on_plausible_frames(
        prefix in tagged_frame_prefix(),
        rest in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut b = prefix;
        b.extend_from_slice(&rest);
        for start in [0usize, 14, 18, 22] {
            if let Some(tail) = b.get(start..) {
                touch_all_views(tail);
            }
        }
        if let Ok(h) = parse_headers(&b, Tpid::is_well_known) {
            // Every offset the walker reports is inside the frame and ordered.
            prop_assert!(h.l3_offset <= h.l3_end && h.l3_end <= b.len());
            if let Some(l4) = h.l4_offset {
                prop_assert!(h.l3_offset < l4 && l4 <= h.l3_end);
                if let Some(p) = h.payload_offset {
                    prop_assert!(l4 < p && p <= h.l3_end);
                }
            }
        }
        let _ = flow_hash(&b);
    }

    #[test]
    fn ethernet_repr_round_trip(
        dst in any::<[u8; 6]>(), src in any::<[u8; 6]>(),
        tags in prop::collection::vec((prop_oneof![Just(0x8100u16), Just(0x88a8), Just(0x9100)], any::<u16>()), 0..=8),
        et in any::<u16>().prop_filter("not a TPID", |t| !Tpid(*t).is_well_known()),
    ) {
        let mut stack = TagStack::new();
        for (tpid, tci) in tags {
            stack.push_inner(Tag::new(Tpid(tpid), Tci(tci))).unwrap();
        }
        let r = ethernet::Repr { dst: MacAddr(dst), src: MacAddr(src), tags: stack, ethertype: EtherType::from(et) };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        let f = ethernet::Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ethernet::Repr::parse(&f, Tpid::is_well_known).unwrap(), r);
    }

    #[test]
    fn ipv4_repr_round_trip_and_checksum(
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), proto in any::<u8>(),
        payload_len in 0usize..1400, ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4,
        ident in any::<u16>(), df in any::<bool>(), mf in any::<bool>(), off in 0u16..8192,
        options in arb_options(),
    ) {
        let r = ipv4::Repr {
            src_addr: Ipv4Addr::from(src), dst_addr: Ipv4Addr::from(dst),
            protocol: Protocol::from(proto), payload_len, ttl, dscp, ecn, ident,
            dont_frag: df, more_frags: mf, frag_offset_bytes: off << 3, options,
        };
        let mut buf = vec![0u8; r.buffer_len() + payload_len];
        r.emit(&mut buf).unwrap();
        let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(ipv4::Repr::parse(&p, Policy::Verify).unwrap(), r);
    }

    #[test]
    fn ipv6_repr_round_trip(
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), nh in any::<u8>(),
        payload_len in 0usize..600, hop in any::<u8>(), tc in any::<u8>(), fl in 0u32..(1 << 20),
    ) {
        let r = ipv6::Repr {
            src_addr: Ipv6Addr::from(src), dst_addr: Ipv6Addr::from(dst),
            next_header: Protocol::from(nh), payload_len, hop_limit: hop, traffic_class: tc,
            flow_label: fl,
        };
        let mut buf = vec![0u8; 40 + payload_len];
        r.emit(&mut buf).unwrap();
        prop_assert_eq!(ipv6::Repr::parse(&ipv6::Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn tcp_repr_round_trip_and_checksum(
        sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
        flags in 0u16..0x200, win in any::<u16>(), urg in any::<u16>(), options in arb_options(),
        payload in prop::collection::vec(any::<u8>(), 0..300),
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), v6 in any::<[u8; 32]>(), use_v6 in any::<bool>(),
    ) {
        let r = tcp::Repr {
            src_port: sp, dst_port: dp, seq_number: seq, ack_number: ack, flags: Flags(flags),
            window_len: win, urgent_at: urg, options,
        };
        let len = r.buffer_len() + payload.len();
        let pseudo = if use_v6 {
            let (a, b) = v6.split_at(16);
            checksum::pseudo_header_v6(
                Ipv6Addr::from(<[u8; 16]>::try_from(a).unwrap()),
                Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap()),
                Protocol::Tcp, len as u32)
        } else {
            checksum::pseudo_header_v4(Ipv4Addr::from(src), Ipv4Addr::from(dst), Protocol::Tcp, len as u32)
        };
        let mut buf = vec![0u8; len];
        r.emit(&mut buf).unwrap();
        buf[r.buffer_len()..].copy_from_slice(&payload);
        let mut p = tcp::Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(pseudo);
        let p = tcp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum(pseudo));
        prop_assert_eq!(tcp::Repr::parse(&p, pseudo, Policy::Verify).unwrap(), r);
        prop_assert_eq!(p.payload(), &payload[..]);
    }

    #[test]
    fn udp_icmp_round_trip_and_checksum(
        sp in any::<u16>(), dp in any::<u16>(), payload in prop::collection::vec(any::<u8>(), 0..300),
        pseudo in any::<u32>(), ty in any::<u8>(), code in any::<u8>(), rest in any::<[u8; 4]>(),
    ) {
        let pseudo = pseudo & 0x1ffff;
        let u = udp::Repr { src_port: sp, dst_port: dp, payload_len: payload.len() };
        let mut buf = vec![0u8; 8 + payload.len()];
        u.emit(&mut buf).unwrap();
        buf[8..].copy_from_slice(&payload);
        udp::Packet::new_checked(&mut buf[..]).unwrap().fill_checksum(pseudo);
        let p = udp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.checksum() != 0);
        prop_assert_eq!(udp::Repr::parse(&p, pseudo, Policy::Verify).unwrap(), u);

        let i = icmp::Repr { msg_type: ty, msg_code: code, rest_of_header: rest };
        i.emit(&mut buf).unwrap();
        icmp::Packet::new_checked(&mut buf[..]).unwrap().fill_checksum(pseudo);
        let p = icmp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(icmp::Repr::parse(&p, pseudo, Policy::Verify).unwrap(), i);
    }

    #[test]
    fn virtio_repr_round_trip(
        flags in any::<u8>(), gso in any::<u8>(), a in any::<u16>(), b in any::<u16>(),
        c in any::<u16>(), d in any::<u16>(), n in any::<u16>(), mrg in any::<bool>(),
    ) {
        let kind = if mrg { virtio::HeaderKind::MrgRxbuf } else { virtio::HeaderKind::Legacy };
        let r = virtio::Repr {
            kind, flags, gso_type: gso, hdr_len: a, gso_size: b, csum_start: c, csum_offset: d,
            num_buffers: if mrg { n } else { 0 },
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        prop_assert_eq!(virtio::Repr::parse(&virtio::Header::new_checked(&buf[..]).unwrap(), kind).unwrap(), r);
    }

    #[test]
    fn incremental_update_matches_full_recompute(
        data in prop::collection::vec(any::<u8>(), 2..200).prop_map(|mut v| { if v.len() % 2 == 1 { v.pop(); } v }),
        idx in any::<prop::sample::Index>(), new in any::<u16>(),
    ) {
        let i = idx.index(data.len() / 2) * 2;
        let old = u16::from_be_bytes([data[i], data[i + 1]]);
        let c = checksum::checksum(&data);
        let mut d2 = data.clone();
        d2[i..i + 2].copy_from_slice(&new.to_be_bytes());
        let inc = checksum::update_u16(c, old, new);
        // One's complement has two zeros; compare as sums.
        prop_assert_eq!(checksum::fold(u32::from(!inc)) % 0xffff, checksum::fold(checksum::sum(&d2)) % 0xffff);
    }
}
