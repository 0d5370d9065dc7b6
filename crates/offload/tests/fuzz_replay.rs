//! Replays the `gso` and `gro` fuzz targets' seeds and regressions (`fuzz/seeds/<target>`,
//! `fuzz/regressions/<target>`) on stable, with the same oracles as the targets (`gro`'s is
//! the target's own code, included).

use qbridge_offload::{complete_checksum, read_vnet_header, segment};
use qbridge_packet::{BufPool, PacketBuf};
use qbridge_wire::{ipv4, ipv6, parse_headers, tcp, virtio::HeaderKind, EtherType, Tpid};
use std::path::Path;

/// The fuzz target's body; returns the number of segments on success.
fn run(data: &[u8]) -> Option<usize> {
    let (meta, hdr_len) = read_vnet_header(data, HeaderKind::Legacy).ok()?;
    let mut pkt = PacketBuf::from_frame(&data[hdr_len..]);
    pkt.offload = meta;
    let mut out = Vec::new();
    let result = segment(&pkt, Tpid::is_well_known, &mut BufPool::new(16), &mut out).ok();
    for seg in &out {
        let f = seg.frame();
        let h = parse_headers(f, Tpid::is_well_known).expect("segment parses");
        let l4 = h.l4_offset.expect("segment has TCP");
        let payload = h.payload_offset.expect("TCP payload offset");
        assert!(f.len() - payload <= usize::from(meta.gso_size));
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
        assert!(tcp::Packet::new_checked(&f[l4..h.l3_end])
            .unwrap()
            .verify_checksum(pseudo));
    }
    let _ = complete_checksum(&mut pkt, Tpid::is_well_known);
    let _ = complete_checksum(&mut pkt, |_| true);
    result
}

fn files(dir: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(dir);
    let Ok(rd) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn seeds_segment_and_verify() {
    let seeds = files("seeds/gso");
    assert!(!seeds.is_empty(), "fuzz/seeds/gso is missing");
    for (name, data) in seeds {
        // Seeds are valid super-frames: 700 bytes at gso_size 200 is 4 segments.
        assert_eq!(run(&data), Some(4), "seed {name}");
    }
}

#[test]
fn regressions_do_not_panic() {
    for (_name, data) in files("regressions/gso") {
        let _ = run(&data);
    }
}

mod gro {
    use qbridge_offload::{read_vnet_header, segment, Gro, GroLimits};
    use qbridge_packet::{Batch, BufPool, PacketBuf};
    use qbridge_wire::{ipv4, ipv6, parse_headers, tcp, virtio::HeaderKind, EtherType, Tpid};

    include!("../../../fuzz/fuzz_targets/gro_oracle.rs");

    #[test]
    fn seeds_coalesce_and_verify() {
        let seeds = super::files("seeds/gro");
        assert!(!seeds.is_empty(), "fuzz/seeds/gro is missing");
        for (name, data) in seeds {
            // Seeds are segment trains of valid super-frames: each makes super-frames.
            let made = run(&data).unwrap_or(0);
            assert!(made >= 1, "seed {name}: {made} super-frames");
        }
    }

    #[test]
    fn regressions_do_not_panic() {
        for (_name, data) in super::files("regressions/gro") {
            let _ = run(&data);
        }
    }
}
