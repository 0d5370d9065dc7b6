//! Checksum completion for frames with `NEEDS_CSUM` (Linux `CHECKSUM_PARTIAL`).
//!
//! The sender has put the pseudo-header sum (folded, not complemented) in the checksum field;
//! completing it means summing from `csum_start` to the end of the L4 data and storing the
//! complement at `csum_start + csum_offset`. The end is the IP packet's end by its own length
//! field when the frame parses as IP (so Ethernet padding stays out of the sum), otherwise the
//! frame's end, as the kernel does. A UDP result of 0 is sent as 0xffff (0 means "no checksum").
//! [`complete_checksum`] reads the headers from the buffer ([`PacketBuf::headers`]: its layout,
//! or one parse that records it); [`complete_checksum_in_place`], on bare bytes, parses them.
//! Cost: one pass over the L4 bytes; no allocation.

use crate::OffloadError;
use qbridge_packet::{OffloadMeta, PacketBuf};
use qbridge_wire::virtio::{F_DATA_VALID, F_NEEDS_CSUM};
use qbridge_wire::{checksum, parse_headers, Headers, IpProtocol, Tpid};

/// Completes the checksum of `pkt` if its metadata says `NEEDS_CSUM`, then clears that flag and
/// sets `DATA_VALID`. A frame without `NEEDS_CSUM` is left alone. `is_tag` names the TPIDs of
/// tags in front of L3 (a port's set, or `Tpid::is_well_known`).
pub fn complete_checksum(
    pkt: &mut PacketBuf,
    is_tag: impl Fn(Tpid) -> bool,
) -> Result<(), OffloadError> {
    let meta = pkt.offload;
    if !meta.needs_csum() {
        return Ok(());
    }
    if meta.is_gso() {
        return Err(OffloadError::CsumOnGsoFrame(meta.gso_type));
    }
    // The headers from the frame's layout (parsed at most once); writing the checksum field
    // leaves the layout true.
    let parsed = pkt.headers(is_tag).ok();
    complete_with(pkt.frame_mut(), &meta, parsed)?;
    pkt.offload.flags = (meta.flags & !F_NEEDS_CSUM) | F_DATA_VALID;
    Ok(())
}

/// Completes the checksum described by `meta` in `frame` (regardless of the `NEEDS_CSUM`
/// flag). Refuses GSO super-frames, whose checksums belong to their segments.
pub fn complete_checksum_in_place(
    frame: &mut [u8],
    meta: &OffloadMeta,
    is_tag: impl Fn(Tpid) -> bool,
) -> Result<(), OffloadError> {
    if meta.is_gso() {
        return Err(OffloadError::CsumOnGsoFrame(meta.gso_type));
    }
    let parsed = parse_headers(frame, is_tag).ok();
    complete_with(frame, meta, parsed)
}

/// Completes the checksum described by `meta` in `frame`, whose headers are `parsed` (`None`:
/// they do not parse).
fn complete_with(
    frame: &mut [u8],
    meta: &OffloadMeta,
    parsed: Option<Headers>,
) -> Result<(), OffloadError> {
    let start = usize::from(meta.csum_start);
    let field = start + usize::from(meta.csum_offset);
    let (data_end, is_udp) = match parsed {
        Some(h) if h.l4_proto.is_some() && start >= h.l3_offset => (
            h.l3_end,
            h.l4_proto == Some(IpProtocol::Udp) && h.l4_offset == Some(start),
        ),
        _ => (frame.len(), false),
    };
    if field + 2 > data_end || data_end > frame.len() {
        return Err(OffloadError::CsumOutOfRange {
            csum_start: meta.csum_start,
            csum_offset: meta.csum_offset,
            data_end,
        });
    }
    let mut c = checksum::finish(checksum::sum(&frame[start..data_end]));
    if is_udp && c == 0 {
        c = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// The checksum a sender's offload left for someone else to complete, found in a frame that
/// arrived without its metadata: `Some` with `NEEDS_CSUM`, `csum_start` and `csum_offset` when
/// `frame` is an unfragmented TCP or UDP packet over IPv4 or IPv6 (through the tags `is_tag`
/// accepts) whose checksum field holds exactly the folded pseudo-header sum — what Linux puts
/// there for `CHECKSUM_PARTIAL` — and whose checksum does not verify. A packet whose checksum
/// verifies is never marked (so no correct checksum is ever rewritten), and one whose field
/// holds anything else is left as it is (a corrupt packet stays corrupt for its receiver).
///
/// A TCP packet with a partial checksum whose L3 packet is longer than `l3_mtu` is a
/// super-frame the sender's TSO made: it is marked GSO too (`TcpV4`/`TcpV6`, `hdr_len`, and
/// a `gso_size` that makes every segment's L3 packet at most `l3_mtu` long).
///
/// Why: a VXLAN datagram from a VTEP on the same host (a kernel vxlan device across a veth,
/// every container lab) carries its inner TCP/UDP checksum partial — the kernel keeps
/// `CHECKSUM_PARTIAL` across a veth and the inner header is the VTEP's to leave so — and a UDP
/// socket hands the payload over without that state; a TSO super-frame even crosses whole, one
/// 64 KB "datagram" (the kernel segments a tunnel GSO packet only where a device or a tunnel
/// endpoint needs it, and a plain UDP socket is neither). Marking it restores the state: the
/// egress port passes it on (a TAP, AF_PACKET with a virtio-net header) or completes and
/// segments it ([`complete_checksum`], [`crate::segment`]), as a NIC would have. Cost: the
/// pseudo-header sum (36 or 72 bytes) per TCP/UDP packet; the whole-packet sum only for the
/// packets that match it.
pub fn find_partial_checksum(
    frame: &[u8],
    is_tag: impl Fn(Tpid) -> bool,
    l3_mtu: usize,
) -> Option<OffloadMeta> {
    use qbridge_wire::virtio::GsoType;
    use qbridge_wire::{ipv4, ipv6, tcp, udp, EtherType, Fragment};
    let h = parse_headers(frame, is_tag).ok()?;
    let (Some(l4), Fragment::Whole) = (h.l4_offset, h.fragment) else {
        return None;
    };
    let off = match h.l4_proto? {
        IpProtocol::Tcp => tcp::CHECKSUM_OFFSET,
        IpProtocol::Udp => udp::CHECKSUM_OFFSET,
        _ => return None,
    };
    if h.l3_end > frame.len() || l4 + off + 2 > h.l3_end {
        return None;
    }
    let proto = h.l4_proto?;
    let l4_len = u32::try_from(h.l3_end - l4).ok()?;
    let l3 = &frame[h.l3_offset..h.l3_end];
    let pseudo = match h.ethertype {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(l3).ok()?;
            checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), proto, l4_len)
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(l3).ok()?;
            checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), proto, l4_len)
        }
        _ => return None,
    };
    let field = u16::from_be_bytes([frame[l4 + off], frame[l4 + off + 1]]);
    // A UDP checksum of 0 is "none": nothing to complete.
    if field != checksum::fold(pseudo) || (proto == IpProtocol::Udp && field == 0) {
        return None;
    }
    if checksum::finish(checksum::combine(
        pseudo,
        checksum::sum(&frame[l4..h.l3_end]),
    )) == 0
    {
        return None;
    }
    let mut meta = OffloadMeta {
        flags: F_NEEDS_CSUM,
        csum_start: u16::try_from(l4).ok()?,
        csum_offset: off as u16,
        ..OffloadMeta::default()
    };
    if h.l3_end - h.l3_offset > l3_mtu && proto == IpProtocol::Tcp {
        let hdrs = h.payload_offset?;
        let per_segment = l3_mtu.checked_sub(hdrs - h.l3_offset).filter(|n| *n > 0)?;
        meta.gso_type = match h.ethertype {
            EtherType::Ipv4 => GsoType::TcpV4,
            _ => GsoType::TcpV6,
        }
        .raw();
        meta.hdr_len = u16::try_from(hdrs).ok()?;
        meta.gso_size = u16::try_from(per_segment).ok()?;
    }
    Some(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use qbridge_wire::virtio::GsoType;
    use qbridge_wire::{ipv4, tcp, udp};

    /// Untagged/tagged IPv4 + TCP (or UDP) with `n` payload bytes, the L4 checksum field
    /// holding the pseudo-header sum as a sender with `NEEDS_CSUM` leaves it.
    fn partial_frame(tags: usize, proto: IpProtocol, n: usize) -> (Vec<u8>, OffloadMeta) {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for _ in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let l3 = f.len();
        let l4_len = if proto == IpProtocol::Tcp { 20 } else { 8 } + n;
        let ip = ipv4::Repr {
            src_addr: Ipv4Addr::new(192, 0, 2, 1),
            dst_addr: Ipv4Addr::new(198, 51, 100, 7),
            protocol: proto,
            payload_len: l4_len,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: true,
            more_frags: false,
            frag_offset_bytes: 0,
            options: Default::default(),
        };
        f.resize(l3 + 20 + l4_len, 0);
        ip.emit(&mut f[l3..]).unwrap();
        let l4 = l3 + 20;
        for (i, b) in f[l4..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let pseudo = checksum::pseudo_header_v4(ip.src_addr, ip.dst_addr, proto, l4_len as u32);
        let off = if proto == IpProtocol::Tcp {
            f[l4 + 12] = 0x50;
            tcp::CHECKSUM_OFFSET
        } else {
            f[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            udp::CHECKSUM_OFFSET
        };
        f[l4 + off..l4 + off + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let meta = OffloadMeta {
            flags: F_NEEDS_CSUM,
            csum_start: l4 as u16,
            csum_offset: off as u16,
            ..Default::default()
        };
        (f, meta)
    }

    #[test]
    fn completes_tcp_at_any_depth() {
        for tags in 0..3 {
            let (f, meta) = partial_frame(tags, IpProtocol::Tcp, 333);
            let mut p = PacketBuf::from_frame(&f);
            p.offload = meta;
            complete_checksum(&mut p, Tpid::is_well_known).unwrap();
            assert!(!p.offload.needs_csum());
            let ip = ipv4::Packet::new_checked(&p.frame()[14 + 4 * tags..]).unwrap();
            let t = tcp::Packet::new_checked(ip.payload()).unwrap();
            assert!(t.verify_checksum(ip.pseudo_header_sum()), "{tags} tags");
        }
    }

    #[test]
    fn a_partial_checksum_is_found_and_a_complete_or_corrupt_one_is_not() {
        for proto in [IpProtocol::Tcp, IpProtocol::Udp] {
            for tags in 0..3 {
                let (mut f, meta) = partial_frame(tags, proto, 333);
                assert_eq!(
                    find_partial_checksum(&f, Tpid::is_well_known, 1500),
                    Some(meta),
                    "{proto:?} {tags} tags"
                );
                // Completed: nothing to find, whatever its value.
                complete_checksum_in_place(&mut f, &meta, Tpid::is_well_known).unwrap();
                assert_eq!(find_partial_checksum(&f, Tpid::is_well_known, 1500), None);
                // Corrupt (a payload byte changed): its field is not the pseudo-header sum, so
                // it is left for the receiver to refuse.
                let last = f.len() - 1;
                f[last] ^= 0x5a;
                assert_eq!(find_partial_checksum(&f, Tpid::is_well_known, 1500), None);
            }
        }
        // Fragments, non-IP frames and short frames: nothing.
        let (mut f, _) = partial_frame(0, IpProtocol::Tcp, 40);
        f[14 + 6] = 0x20; // more fragments
        assert_eq!(find_partial_checksum(&f, Tpid::is_well_known, 1500), None);
        assert_eq!(
            find_partial_checksum(&[0u8; 10], Tpid::is_well_known, 1500),
            None
        );
        let (f, _) = partial_frame(0, IpProtocol::Tcp, 40);
        assert_eq!(
            find_partial_checksum(&f[..40], Tpid::is_well_known, 1500),
            None
        );
    }

    #[test]
    fn a_partial_tcp_packet_longer_than_the_mtu_is_a_super_frame() {
        for tags in 0..2 {
            // 20 + 20 + 4000 bytes of IPv4 and TCP: longer than 1500.
            let (f, meta) = partial_frame(tags, IpProtocol::Tcp, 4000);
            let m = find_partial_checksum(&f, Tpid::is_well_known, 1500).unwrap();
            let hdrs = 14 + 4 * tags + 40;
            assert_eq!(
                m,
                OffloadMeta {
                    gso_type: GsoType::TcpV4.raw(),
                    hdr_len: hdrs as u16,
                    gso_size: 1460,
                    ..meta
                }
            );
            // Segmented: three segments of at most 1500 bytes of IPv4, each with a checksum
            // that verifies.
            let mut p = PacketBuf::from_frame(&f);
            p.offload = m;
            let mut pool = qbridge_packet::BufPool::new(8);
            let mut out = Vec::new();
            assert_eq!(
                crate::segment(&p, Tpid::is_well_known, &mut pool, &mut out).unwrap(),
                3
            );
            for s in &out {
                let ip = ipv4::Packet::new_checked(&s.frame()[14 + 4 * tags..]).unwrap();
                assert!(usize::from(ip.total_len()) <= 1500);
                let t = tcp::Packet::new_checked(ip.payload()).unwrap();
                assert!(t.verify_checksum(ip.pseudo_header_sum()));
            }
            // Within the MTU, or UDP: the checksum alone.
            let (f, meta) = partial_frame(tags, IpProtocol::Tcp, 1000);
            assert_eq!(
                find_partial_checksum(&f, Tpid::is_well_known, 1500),
                Some(meta)
            );
            let (f, meta) = partial_frame(tags, IpProtocol::Udp, 4000);
            assert_eq!(
                find_partial_checksum(&f, Tpid::is_well_known, 1500),
                Some(meta)
            );
        }
    }

    #[test]
    fn a_correct_checksum_equal_to_the_pseudo_header_sum_is_left_alone() {
        // Search a payload byte for which the complete checksum equals the pseudo-header sum
        // (one in 65 536): such a packet is correct and must not be marked.
        let (f, meta) = partial_frame(0, IpProtocol::Udp, 64);
        let l4 = usize::from(meta.csum_start);
        let field = l4 + usize::from(meta.csum_offset);
        let want = [f[field], f[field + 1]];
        let mut found = false;
        'search: for a in 0..=255u8 {
            for b in 0..=255u8 {
                let mut g = f.clone();
                let n = g.len();
                g[n - 2] = a;
                g[n - 1] = b;
                g[field..field + 2].copy_from_slice(&want);
                complete_checksum_in_place(&mut g, &meta, Tpid::is_well_known).unwrap();
                if g[field..field + 2] == want {
                    assert_eq!(find_partial_checksum(&g, Tpid::is_well_known, 1500), None);
                    found = true;
                    break 'search;
                }
            }
        }
        assert!(found, "no payload gave that checksum");
    }

    #[test]
    fn padding_is_not_summed() {
        let (mut f, meta) = partial_frame(1, IpProtocol::Udp, 1);
        f.extend_from_slice(&[0x55; 20]); // Ethernet padding after the IP packet
        complete_checksum_in_place(&mut f, &meta, Tpid::is_well_known).unwrap();
        let ip = ipv4::Packet::new_checked(&f[18..]).unwrap();
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(u.verify_checksum(ip.pseudo_header_sum()));
        assert_ne!(u.checksum(), 0);
    }

    #[test]
    fn out_of_range_and_gso_refused() {
        let (mut f, mut meta) = partial_frame(0, IpProtocol::Tcp, 0);
        let len = f.len();
        meta.csum_offset = 100;
        assert!(matches!(
            complete_checksum_in_place(&mut f, &meta, Tpid::is_well_known),
            Err(OffloadError::CsumOutOfRange {
                csum_offset: 100,
                ..
            })
        ));
        meta.csum_start = u16::MAX;
        meta.csum_offset = u16::MAX;
        assert!(complete_checksum_in_place(&mut f, &meta, Tpid::is_well_known).is_err());
        meta.gso_type = GsoType::TcpV4.raw();
        assert_eq!(
            complete_checksum_in_place(&mut f, &meta, Tpid::is_well_known),
            Err(OffloadError::CsumOnGsoFrame(1))
        );
        assert_eq!(f.len(), len);
        let mut p = PacketBuf::from_frame(&f);
        assert_eq!(complete_checksum(&mut p, Tpid::is_well_known), Ok(()));
        assert_eq!(p.frame(), &f[..]);
    }
}
