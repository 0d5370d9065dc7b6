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
