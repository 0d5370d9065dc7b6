//! Software GSO: cut a TCP super-frame (IPv4 or IPv6, any number of VLAN tags before L3) into
//! segments of at most `gso_size` payload bytes each, with complete headers and checksums.
//!
//! Per segment, as the kernel's `tcp_gso_segment`/`inet_gso_segment` do: the headers (Ethernet,
//! all tags, IP with options or extension headers, TCP with options) are copied; IPv4 gets its
//! total length, an identifier incremented per segment and a fresh header checksum; IPv6 gets
//! its payload length; TCP gets its sequence number advanced by the bytes before it, FIN and PSH
//! only on the last segment, CWR only on the first, and a full checksum (the super-frame's
//! partial checksum is not reused). Segments carry `DATA_VALID` and no GSO metadata.
//!
//! Offsets come from [`PacketBuf::headers`] (the frame's recorded layout, or
//! [`qbridge_wire::parse_headers`] once); `hdr_len` and `csum_start` in the metadata are hints
//! a guest may get wrong and are not used. Validation happens before any output, so an error
//! leaves `out` untouched. Cost: one copy and one checksum pass over the payload; buffers come
//! from the caller's pool, nothing else is allocated (beyond `out` growing past its capacity).
//! The IPv6 pseudo-header uses the fixed header's destination; routing headers that change the
//! final destination are not honoured.

use crate::OffloadError;
use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::tcp::Flags;
use qbridge_wire::virtio::{GsoType, F_DATA_VALID};
use qbridge_wire::{checksum, ipv4, ipv6, tcp, EtherType, Fragment};
use qbridge_wire::{IpProtocol, Tpid};

/// Most segments one super-frame may produce. A 64 KB frame at the smallest MSS Linux sends
/// (536 bytes) makes 123; a `gso_size` so small it needs more is refused rather than let a
/// guest drain the buffer pool with one frame.
pub const MAX_SEGMENTS: usize = 512;

/// Segments `pkt` into `out`, taking buffers from `pool`; returns the number of segments.
/// `pkt` is only read: the caller keeps it (and usually returns it to the pool).
/// `is_tag` names the TPIDs of tags in front of L3.
pub fn segment(
    pkt: &PacketBuf,
    is_tag: impl Fn(Tpid) -> bool,
    pool: &mut BufPool,
    out: &mut Vec<PacketBuf>,
) -> Result<usize, OffloadError> {
    let meta = pkt.offload;
    let frame = pkt.frame();
    let want = match meta.gso() {
        GsoType::TcpV4 => EtherType::Ipv4,
        GsoType::TcpV6 => EtherType::Ipv6,
        GsoType::None => return Err(OffloadError::NotGso),
        GsoType::Udp => return Err(OffloadError::UfoUnsupported),
        GsoType::UdpL4 | GsoType::Unknown(_) => {
            return Err(OffloadError::UnsupportedGsoType(meta.gso_type))
        }
    };
    if meta.gso_size == 0 {
        return Err(OffloadError::ZeroGsoSize);
    }
    let h = pkt.headers(is_tag)?;
    if h.ethertype != want {
        return Err(OffloadError::L3Mismatch {
            gso_type: meta.gso_type,
            ethertype: h.ethertype,
        });
    }
    if h.fragment != Fragment::Whole {
        return Err(OffloadError::Fragmented);
    }
    let (Some(IpProtocol::Tcp), Some(l4), Some(hdr_len)) =
        (h.l4_proto, h.l4_offset, h.payload_offset)
    else {
        return Err(OffloadError::NotTcp(h.l4_proto));
    };
    let l3 = h.l3_offset;
    let payload = &frame[hdr_len..h.l3_end];
    let mss = usize::from(meta.gso_size);
    let segments = payload.len().div_ceil(mss).max(1);
    if segments > MAX_SEGMENTS {
        return Err(OffloadError::TooManySegments {
            segments,
            gso_size: meta.gso_size,
        });
    }

    let orig_tcp = tcp::Packet::new_checked(&frame[l4..h.l3_end])?;
    let (seq0, flags0) = (orig_tcp.seq_number(), orig_tcp.flags());
    let ident0 = match want {
        EtherType::Ipv4 => ipv4::Packet::new_checked(&frame[l3..])?.ident(),
        _ => 0,
    };

    out.reserve(segments);
    for (i, chunk) in payload
        .chunks(mss)
        .chain(payload.is_empty().then_some(payload))
        .enumerate()
    {
        let last = i + 1 == segments;
        let mut seg = pool.get();
        seg.port = pkt.port;
        seg.time_ns = pkt.time_ns;
        seg.offload = OffloadMeta {
            flags: F_DATA_VALID,
            ..OffloadMeta::default()
        };
        let buf = seg.frame_mut_with_len(hdr_len + chunk.len());
        buf[..hdr_len].copy_from_slice(&frame[..hdr_len]);
        buf[hdr_len..].copy_from_slice(chunk);

        // Each segment's L3 length field is at most the super-frame's, so it fits in u16. For
        // IPv6 that field is the payload length (the fixed header excluded), which can be 65535
        // while header + payload is not representable: compute each in its own terms.
        let l3_len = hdr_len - l3 + chunk.len();
        let l4_len = (hdr_len - l4 + chunk.len()) as u32;
        let pseudo = if want == EtherType::Ipv4 {
            let mut ip = ipv4::Packet::new_unchecked(&mut buf[l3..]);
            ip.set_total_len(l3_len as u16);
            ip.set_ident(ident0.wrapping_add(i as u16));
            ip.fill_checksum();
            checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), IpProtocol::Tcp, l4_len)
        } else {
            let mut ip = ipv6::Packet::new_unchecked(&mut buf[l3..]);
            ip.set_payload_len((l3_len - ipv6::HEADER_LEN) as u16);
            checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), IpProtocol::Tcp, l4_len)
        };

        let mut t = tcp::Packet::new_unchecked(&mut buf[l4..]);
        t.set_seq_number(seq0.wrapping_add((i * mss) as u32));
        let mut flags = flags0;
        if !last {
            flags = flags.without(Flags::FIN.union(Flags::PSH));
        }
        if i != 0 {
            flags = flags.without(Flags::CWR);
        }
        t.set_flags(flags);
        t.fill_checksum(pseudo);
        out.push(seg);
    }
    Ok(segments)
}

/// [`segment`] into a [`Batch`].
pub fn segment_into_batch(
    pkt: &PacketBuf,
    is_tag: impl Fn(Tpid) -> bool,
    pool: &mut BufPool,
    out: &mut Batch,
) -> Result<usize, OffloadError> {
    segment(pkt, is_tag, pool, &mut out.pkts)
}
