//! GSO of synthetic 64 KB TCP super-frames with 0, 1 and 2 tags, IPv4 and IPv6: every segment
//! parses, its checksums verify by an independent implementation below, the payload
//! concatenates back to the original and the sequence numbers are contiguous.

use proptest::prelude::*;
use qbridge_offload::{segment, segment_into_batch, OffloadError, MAX_SEGMENTS};
use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM};
use qbridge_wire::{parse_headers, EtherType, Tpid};

mod common;
use common::{ones_sum, ACK, CWR, FIN, PSH};

const TCP_FLAGS_AT: usize = 13;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

struct Super {
    pkt: PacketBuf,
    payload: Vec<u8>,
    seq: u32,
}

/// A super-frame as a Linux guest hands it over with TSO: tags, IPv4 (with a 4-byte option)
/// or IPv6 (with a destination-options header), TCP with timestamps, `payload_len` bytes,
/// `NEEDS_CSUM` with the pseudo-header sum in the TCP checksum field.
fn super_frame(tags: &[u16], v6: bool, payload_len: usize, mss: u16) -> Super {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa];
    for (i, tpid) in tags.iter().enumerate() {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    let l3 = f.len() + 2;
    let tcp_hdr = 32;
    let (ext, ip_hdr) = if v6 { (8, 40) } else { (0, 24) };
    let l4 = l3 + ip_hdr + ext;
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend_from_slice(&[0x60, 0x01, 0x23, 0x45]);
        f.extend_from_slice(&((ext + tcp_hdr + payload_len) as u16).to_be_bytes());
        f.extend_from_slice(&[60, 64]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x46, 0x00]);
        f.extend_from_slice(&((ip_hdr + tcp_hdr + payload_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0xff, 0xf0, 0x40, 0x00, 64, 6, 0, 0]); // id 0xfff0 (wraps), DF
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0x94, 0x04, 0x00, 0x00]); // router alert
    }
    assert_eq!(f.len(), l4);
    let seq = 0xffff_f000u32; // wraps within the frame
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    f.extend_from_slice(&[0x80, ACK | PSH | FIN | CWR, 0x01, 0xf5, 0, 0, 0, 0]);
    f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    let payload: Vec<u8> = (0..payload_len).map(|i| (i * 31 + i / 256) as u8).collect();
    f.extend_from_slice(&payload);
    let mut pkt = PacketBuf::from_frame(&f);
    pkt.port = 3;
    pkt.time_ns = 42;
    pkt.offload = OffloadMeta {
        flags: F_NEEDS_CSUM,
        gso_type: if v6 {
            GsoType::TcpV6.raw()
        } else {
            GsoType::TcpV4.raw()
        },
        hdr_len: (l4 + tcp_hdr) as u16,
        gso_size: mss,
        csum_start: l4 as u16,
        csum_offset: 16,
    };
    Super { pkt, payload, seq }
}

/// Checks everything about the segments of `s`; returns how many there were.
fn check_segments(s: &Super, segs: &[PacketBuf], mss: usize) {
    let orig = parse_headers(s.pkt.frame(), Tpid::is_well_known).unwrap();
    let hdr_len = orig.payload_offset.unwrap();
    assert_eq!(segs.len(), s.payload.len().div_ceil(mss).max(1));
    let mut joined = Vec::new();
    let mut next_seq = s.seq;
    for (i, seg) in segs.iter().enumerate() {
        let f = seg.frame();
        let h = parse_headers(f, Tpid::is_well_known).unwrap();
        assert_eq!(h.tags, orig.tags);
        assert_eq!(
            (h.l3_offset, h.l4_offset, h.payload_offset),
            (orig.l3_offset, orig.l4_offset, Some(hdr_len))
        );
        assert_eq!(h.l3_end, f.len(), "segment {i} has exact lengths");
        assert!(f.len() - hdr_len <= mss);
        assert_eq!(&f[..12], &s.pkt.frame()[..12]);
        let l3 = h.l3_offset;
        let l4 = h.l4_offset.unwrap();
        let tcp = &f[l4..];
        let pseudo: Vec<u8> = if h.ethertype == EtherType::Ipv4 {
            assert_eq!(usize::from(be16(f, l3 + 2)), f.len() - l3);
            assert_eq!(be16(f, l3 + 4), 0xfff0u16.wrapping_add(i as u16), "IPv4 id");
            assert_eq!(ones_sum(&[&f[l3..l3 + 24]]), 0xffff, "IPv4 header checksum");
            let mut p = f[l3 + 12..l3 + 20].to_vec();
            p.extend_from_slice(&[0, 6]);
            p.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            p
        } else {
            assert_eq!(usize::from(be16(f, l3 + 4)), f.len() - l3 - 40);
            let mut p = f[l3 + 8..l3 + 40].to_vec();
            p.extend_from_slice(&(tcp.len() as u32).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 6]);
            p
        };
        assert_eq!(
            ones_sum(&[&pseudo, tcp]),
            0xffff,
            "TCP checksum of segment {i}"
        );
        assert_eq!(be32(tcp, 4), next_seq, "segment {i} sequence");
        let flags = tcp[TCP_FLAGS_AT];
        let last = i + 1 == segs.len();
        assert_eq!(flags & ACK, ACK);
        assert_eq!(flags & (FIN | PSH) != 0, last, "FIN/PSH on last only ({i})");
        assert_eq!(flags & CWR != 0, i == 0, "CWR on first only ({i})");
        assert_eq!(seg.port, 3);
        assert_eq!(seg.time_ns, 42);
        assert!(!seg.offload.is_gso() && !seg.offload.needs_csum());
        let data = &f[hdr_len..];
        next_seq = next_seq.wrapping_add(data.len() as u32);
        joined.extend_from_slice(data);
    }
    assert_eq!(joined, s.payload);
}

#[test]
fn segments_64k_super_frames_at_every_depth() {
    let stacks: [&[u16]; 3] = [&[], &[0x8100], &[0x88a8, 0x8100]];
    for tags in stacks {
        for v6 in [false, true] {
            let mss = 1448u16;
            // The largest frame each family allows: IP length 65535.
            let payload_len = if v6 { 65535 - 8 - 32 } else { 65535 - 24 - 32 };
            let s = super_frame(tags, v6, payload_len, mss);
            let mut pool = BufPool::new(64);
            let mut out = Vec::new();
            let n = segment(&s.pkt, Tpid::is_well_known, &mut pool, &mut out)
                .unwrap_or_else(|e| panic!("tags {tags:x?} v6 {v6}: {e}"));
            assert_eq!(n, out.len());
            check_segments(&s, &out, usize::from(mss));
        }
    }
}

#[test]
fn pool_buffers_are_reused() {
    let s = super_frame(&[0x88a8], false, 20_000, 1400);
    let mut pool = BufPool::new(64);
    let mut batch = Batch::with_capacity(32);
    let n = segment_into_batch(&s.pkt, Tpid::is_well_known, &mut pool, &mut batch).unwrap();
    assert_eq!(n, 15);
    for p in batch.drain() {
        pool.put(p);
    }
    assert_eq!(pool.available(), 15);
    segment_into_batch(&s.pkt, Tpid::is_well_known, &mut pool, &mut batch).unwrap();
    assert_eq!(pool.available(), 0);
    check_segments(&s, &batch.pkts, 1400);
}

#[test]
fn small_and_exact_payloads() {
    for (len, mss) in [
        (0usize, 1448u16),
        (1, 1448),
        (1448, 1448),
        (1449, 1448),
        (2896, 1448),
    ] {
        let s = super_frame(&[0x8100], true, len, mss);
        let mut out = Vec::new();
        segment(&s.pkt, Tpid::is_well_known, &mut BufPool::new(8), &mut out).unwrap();
        check_segments(&s, &out, usize::from(mss));
    }
}

#[test]
fn refusals_are_named_and_leave_out_untouched() {
    let mut pool = BufPool::new(8);
    let mut out = Vec::new();
    let s = super_frame(&[0x8100], false, 3000, 1000);
    let run = |meta: OffloadMeta, pool: &mut BufPool, out: &mut Vec<PacketBuf>| {
        let mut p = s.pkt.clone();
        p.offload = meta;
        segment(&p, Tpid::is_well_known, pool, out)
    };
    let m = s.pkt.offload;
    assert_eq!(
        run(OffloadMeta { gso_type: 0, ..m }, &mut pool, &mut out),
        Err(OffloadError::NotGso)
    );
    assert_eq!(
        run(OffloadMeta { gso_type: 3, ..m }, &mut pool, &mut out),
        Err(OffloadError::UfoUnsupported)
    );
    assert_eq!(
        run(OffloadMeta { gso_type: 5, ..m }, &mut pool, &mut out),
        Err(OffloadError::UnsupportedGsoType(5))
    );
    assert_eq!(
        run(OffloadMeta { gso_size: 0, ..m }, &mut pool, &mut out),
        Err(OffloadError::ZeroGsoSize)
    );
    assert_eq!(
        run(OffloadMeta { gso_type: 4, ..m }, &mut pool, &mut out),
        Err(OffloadError::L3Mismatch {
            gso_type: 4,
            ethertype: EtherType::Ipv4
        })
    );
    assert!(matches!(
        run(OffloadMeta { gso_size: 1, ..m }, &mut pool, &mut out),
        Err(OffloadError::TooManySegments { segments: 3000, .. })
    ));
    // Only the S-tag TPID is a tag to this reader: L3 is not IP.
    assert!(matches!(
        segment(&s.pkt, |t| t == Tpid::DOT1AD, &mut pool, &mut out),
        Err(OffloadError::L3Mismatch { .. })
    ));
    let mut cut = s.pkt.clone();
    cut.truncate(60);
    assert!(matches!(
        segment(&cut, Tpid::is_well_known, &mut pool, &mut out),
        Err(OffloadError::Headers(_))
    ));
    assert!(out.is_empty());
    assert_eq!(pool.available(), 0);
    // ECN bit set: still TCPv4.
    assert_eq!(
        run(
            OffloadMeta {
                gso_type: 0x81,
                ..m
            },
            &mut pool,
            &mut out
        ),
        Ok(3)
    );
    const { assert!(MAX_SEGMENTS >= 123) };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_size_any_depth_segments_correctly(
        ntags in 0usize..4, v6 in any::<bool>(), len in 0usize..9000, mss in 64u16..3000,
    ) {
        let tags = vec![0x8100u16; ntags];
        let s = super_frame(&tags, v6, len, mss);
        let mut out = Vec::new();
        let n = segment(&s.pkt, Tpid::is_well_known, &mut BufPool::new(8), &mut out).unwrap();
        prop_assert_eq!(n, out.len());
        check_segments(&s, &out, usize::from(mss));
    }

    #[test]
    fn random_meta_and_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        flags in any::<u8>(), gso_type in any::<u8>(), hdr_len in any::<u16>(),
        gso_size in any::<u16>(), csum_start in any::<u16>(), csum_offset in any::<u16>(),
    ) {
        let mut p = PacketBuf::from_frame(&bytes);
        p.offload = OffloadMeta { flags, gso_type, hdr_len, gso_size, csum_start, csum_offset };
        let mut out = Vec::new();
        let _ = segment(&p, Tpid::is_well_known, &mut BufPool::new(8), &mut out);
        let _ = qbridge_offload::complete_checksum(&mut p, Tpid::is_well_known);
    }
}
