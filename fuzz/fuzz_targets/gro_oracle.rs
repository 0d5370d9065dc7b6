// The body of the `gro` fuzz target (fuzz/fuzz_targets/gro.rs), shared by `include!` with
// its stable replay (crates/offload/tests/fuzz_replay.rs); not a target of its own. The
// including file imports what it uses.

/// Runs one input (format in fuzz/fuzz_targets/gro.rs) and checks the oracle; returns the
/// number of super-frames made, or `None` for an input too short to have a header.
fn run(data: &[u8]) -> Option<u64> {
    let (&max_segments, rest) = data.split_first()?;
    let (&opts, mut rest) = rest.split_first()?;
    let dot1q_only = opts & 1 != 0;
    let is_tag = move |t: Tpid| {
        if dot1q_only {
            t == Tpid::DOT1Q
        } else {
            t.is_well_known()
        }
    };
    let mut pool = BufPool::new(1024);
    let mut batch = Batch::default();
    while rest.len() >= 3 && batch.len() < 512 {
        let kind = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let bytes = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let flags = kind & 3;
        if kind & 4 != 0 {
            let Ok((meta, hdr)) = read_vnet_header(bytes, HeaderKind::Legacy) else {
                continue;
            };
            let mut sup = PacketBuf::from_frame(&bytes[hdr..]);
            sup.offload = meta;
            let mut segs = Vec::new();
            if segment(&sup, is_tag, &mut pool, &mut segs).is_ok() {
                for mut s in segs {
                    s.offload.flags = flags;
                    batch.push(s);
                }
            }
            continue;
        }
        let mut p = PacketBuf::from_frame(bytes);
        p.offload.flags = flags;
        if kind & 8 != 0 {
            if let Some(l4) = parse_headers(bytes, is_tag).ok().and_then(|h| h.l4_offset) {
                p.offload.csum_start = l4 as u16;
                p.offload.csum_offset = tcp::CHECKSUM_OFFSET as u16;
            }
        }
        batch.push(p);
    }
    let limits = GroLimits {
        max_segments: if max_segments == 0 {
            64
        } else {
            u16::from(max_segments)
        },
        ..GroLimits::default()
    };
    let n_in = batch.len() as u64;
    let st = Gro::new().coalesce(&mut batch, &mut pool, is_tag, limits);
    assert_eq!(st.frames_in, n_in);
    assert_eq!(st.frames_out, batch.len() as u64);
    assert_eq!(st.frames_in, st.frames_out + st.segments_merged);
    assert_eq!(
        st.frames_out,
        st.super_frames + st.passed.iter().sum::<u64>()
    );
    let mut supers = 0;
    for p in batch.iter().filter(|p| p.offload.is_gso()) {
        supers += 1;
        let f = p.frame();
        let h = parse_headers(f, is_tag).expect("super-frame parses");
        assert_eq!(h.l3_end, f.len());
        assert!(h.l3_end - h.l3_offset <= 65_535);
        assert_eq!(Some(usize::from(p.offload.csum_start)), h.l4_offset);
        assert_eq!(Some(usize::from(p.offload.hdr_len)), h.payload_offset);
        let mut segs = Vec::new();
        let n = segment(p, is_tag, &mut pool, &mut segs).expect("super-frame cuts");
        assert!(n >= 2 && n <= usize::from(limits.max_segments));
        for s in &segs {
            let f = s.frame();
            let h = parse_headers(f, is_tag).expect("segment parses");
            let l4 = h.l4_offset.expect("segment has TCP");
            let pseudo = match h.ethertype {
                EtherType::Ipv4 => {
                    let ip = ipv4::Packet::new_checked(&f[h.l3_offset..]).unwrap();
                    assert!(ip.verify_checksum());
                    ip.pseudo_header_sum()
                }
                _ => ipv6::Packet::new_checked(&f[h.l3_offset..])
                    .unwrap()
                    .pseudo_header_sum(qbridge_wire::IpProtocol::Tcp, (h.l3_end - l4) as u32),
            };
            let t = tcp::Packet::new_checked(&f[l4..h.l3_end]).unwrap();
            assert!(t.verify_checksum(pseudo), "segment TCP checksum");
        }
    }
    assert_eq!(supers, st.super_frames);
    Some(st.super_frames)
}
