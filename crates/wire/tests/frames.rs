//! Byte-vector tests over whole frames, both ways: parse captured-style bytes (checksums
//! computed independently, outside this crate) and emit the same bytes from reprs.

use core::net::{Ipv4Addr, Ipv6Addr};
use qbridge_wire::checksum::{self, Policy};
use qbridge_wire::ethernet::{self, EtherType};
use qbridge_wire::ip::Protocol;
use qbridge_wire::tcp::{self, Flags, OptionsIter, TcpOption};
use qbridge_wire::{flow_hash, ipv4, ipv6, parse_headers, udp, Fragment, Tpid};

/// A Linux TCP SYN 10.0.0.1:40000 -> 10.0.0.2:80 inside an S-tag (0x88a8, VID 100) and a C-tag
/// (0x8100, PCP 1, VID 10). IPv4 checksum 0x0a74, TCP checksum 0x63c2.
const QINQ_SYN: [u8; 82] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0xa8, 0x00, 0x64,
    0x81, 0x00, 0x20, 0x0a, 0x08, 0x00, 0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06,
    0x0a, 0x74, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x9c, 0x40, 0x00, 0x50, 0x1a, 0x2b,
    0x3c, 0x4d, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0x63, 0xc2, 0x00, 0x00, 0x02, 0x04,
    0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x01, 0xe2, 0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03,
    0x03, 0x07,
];

#[test]
fn qinq_syn_parses() {
    let h = parse_headers(&QINQ_SYN, Tpid::is_well_known).unwrap();
    assert_eq!(h.tags.len(), 2);
    assert_eq!(h.tags.as_slice()[0].tpid, Tpid::DOT1AD);
    assert_eq!(h.tags.as_slice()[0].tci.vid().get(), 100);
    assert_eq!(h.tags.as_slice()[1].tci.vid().get(), 10);
    assert_eq!(h.ethertype, EtherType::Ipv4);
    assert_eq!(h.l3_offset, 22);
    assert_eq!(h.l3_end, 82);
    assert_eq!(h.l4_proto, Some(Protocol::Tcp));
    assert_eq!(h.l4_offset, Some(42));
    assert_eq!(h.payload_offset, Some(82));
    assert_eq!(h.fragment, Fragment::Whole);

    let ip = ipv4::Packet::new_checked(&QINQ_SYN[h.l3_offset..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(ip.ident(), 0x1c46);
    let t = tcp::Packet::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum(ip.pseudo_header_sum()));
    assert_eq!(t.flags(), Flags::SYN);
    assert_eq!((t.src_port(), t.dst_port()), (40000, 80));
    let mss = OptionsIter::new(t.options()).find_map(|o| match o {
        Ok(TcpOption::MaxSegmentSize(m)) => Some(m),
        _ => None,
    });
    assert_eq!(mss, Some(1460));

    // Only the S-tag is a tag to an 802.1ad-only reader: the C-tag is payload.
    let h = parse_headers(&QINQ_SYN, |t| t == Tpid::DOT1AD).unwrap();
    assert_eq!(
        (h.tags.len(), h.ethertype, h.l3_offset),
        (1, EtherType::Dot1q, 18)
    );
    assert_eq!(h.l4_offset, None);
}

#[test]
fn qinq_syn_emits_byte_exact() {
    let f = ethernet::Frame::new_checked(&QINQ_SYN[..]).unwrap();
    let eth = ethernet::Repr::parse(&f, Tpid::is_well_known).unwrap();
    let ip_bytes = &QINQ_SYN[eth.header_len()..];
    let ip = ipv4::Repr::parse(
        &ipv4::Packet::new_checked(ip_bytes).unwrap(),
        Policy::Verify,
    )
    .unwrap();
    let pseudo = checksum::pseudo_header_v4(
        ip.src_addr,
        ip.dst_addr,
        Protocol::Tcp,
        ip.payload_len as u32,
    );
    let tcp_view = tcp::Packet::new_checked(&ip_bytes[ip.buffer_len()..]).unwrap();
    let t = tcp::Repr::parse(&tcp_view, pseudo, Policy::Verify).unwrap();

    let mut out = [0u8; 82];
    eth.emit(&mut out).unwrap();
    let l3 = eth.buffer_len();
    ip.emit(&mut out[l3..]).unwrap();
    let l4 = l3 + ip.buffer_len();
    t.emit(&mut out[l4..]).unwrap();
    tcp::Packet::new_checked(&mut out[l4..])
        .unwrap()
        .fill_checksum(pseudo);
    assert_eq!(out, QINQ_SYN);
}

/// UDP over IPv6 with hop-by-hop and a fragment header (first fragment), inside one 0x8100 tag.
fn v6_frame(frag_offset_field: u16) -> Vec<u8> {
    let mut f = vec![
        2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0x00, 0x05, 0x86, 0xdd,
    ];
    let payload_len: u16 = 8 + 8 + 16;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&payload_len.to_be_bytes());
    f.extend_from_slice(&[0, 64]);
    f.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // HBH -> Fragment
    f.extend_from_slice(&[17, 0]);
    f.extend_from_slice(&frag_offset_field.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 7]);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0x04, 0x00, 0, 0]); // UDP, length 1024
    f.extend_from_slice(&[0xaa; 8]);
    f
}

#[test]
fn ipv6_extension_chain_and_fragments() {
    let first = v6_frame(0x0001);
    let h = parse_headers(&first, Tpid::is_well_known).unwrap();
    assert_eq!(h.l3_offset, 18);
    assert_eq!(h.l4_proto, Some(Protocol::Udp));
    assert_eq!(h.l4_offset, Some(18 + 40 + 16));
    assert_eq!(h.fragment, Fragment::First);
    // The UDP length (1024) covers the whole datagram, so it is not judged here.
    assert_eq!(h.payload_offset, None);

    let later = v6_frame(0x0058); // offset 88 bytes
    let h = parse_headers(&later, Tpid::is_well_known).unwrap();
    assert_eq!((h.fragment, h.l4_offset), (Fragment::Later, None));
    assert_eq!(h.l4_proto, Some(Protocol::Udp));

    // Fragments of one datagram hash alike (no ports), whatever the offset.
    assert_eq!(flow_hash(&first), flow_hash(&later));
}

#[test]
fn ipv6_repr_and_udp_checksum() {
    let src: Ipv6Addr = "fe80::1".parse().unwrap();
    let dst: Ipv6Addr = "ff02::1".parse().unwrap();
    let ip = ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: Protocol::Udp,
        payload_len: 12,
        hop_limit: 255,
        traffic_class: 0,
        flow_label: 0x12345,
    };
    let u = udp::Repr {
        src_port: 546,
        dst_port: 547,
        payload_len: 4,
    };
    let mut buf = [0u8; 52];
    ip.emit(&mut buf).unwrap();
    u.emit(&mut buf[40..]).unwrap();
    buf[48..].copy_from_slice(b"ping");
    let pseudo = checksum::pseudo_header_v6(src, dst, Protocol::Udp, 12);
    udp::Packet::new_checked(&mut buf[40..])
        .unwrap()
        .fill_checksum(pseudo);

    let p = ipv6::Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&p).unwrap(), ip);
    let up = udp::Packet::new_checked(p.payload()).unwrap();
    assert_eq!(udp::Repr::parse(&up, pseudo, Policy::Verify).unwrap(), u);
    assert_eq!(up.payload(), b"ping");
}

#[test]
fn flow_hash_reads_through_tags() {
    // Same outer tags, different inner TCP source ports: the hash must differ (it would not if
    // it stopped at the first tag).
    let mut other = QINQ_SYN;
    other[42] = 0x9c;
    other[43] = 0x41;
    assert_ne!(flow_hash(&QINQ_SYN), flow_hash(&other));
    let mut other_ip = QINQ_SYN;
    other_ip[37] = 9;
    assert_ne!(flow_hash(&QINQ_SYN), flow_hash(&other_ip));
    // Stable across calls and independent of the payload bytes.
    assert_eq!(flow_hash(&QINQ_SYN), flow_hash(&QINQ_SYN));
    // Malformed or short frames still hash without panicking.
    let _ = flow_hash(&QINQ_SYN[..30]);
    let _ = flow_hash(&[]);
}

#[test]
fn ports_vary_across_many_flows() {
    // Spread check: 4096 flows under two tags land in all 16 buckets, none holding over 2x
    // its share.
    let mut buckets = [0u32; 16];
    for port in 0..4096u16 {
        let mut f = QINQ_SYN;
        f[42..44].copy_from_slice(&(10000 + port).to_be_bytes());
        buckets[(flow_hash(&f) % 16) as usize] += 1;
    }
    assert!(buckets.iter().all(|&n| n > 0 && n < 512), "{buckets:?}");
}
