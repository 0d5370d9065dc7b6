//! Measures `Gro::coalesce`: segments coalesced per second, in the loop a port runs per batch
//! (copy each segment into a pool buffer, coalesce, hand every output buffer back to the
//! pool). The same loop without `coalesce` is measured too; the difference is GRO's cost.
//!
//! ```text
//! cargo run --release -p qbridge-offload --example gro_bench [-- --seconds 2]
//! ```
//!
//! `--case N --rounds R [--no-gro]` runs case N (from 0, in the order printed) for exactly R
//! batches and prints nothing: run it under callgrind with two values of R and divide the
//! difference by the segments to get instructions per segment (docs/benchmarks.md).

use qbridge_offload::{segment, Gro, GroLimits};
use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::virtio::{GsoType, F_DATA_VALID, F_NEEDS_CSUM};
use qbridge_wire::Tpid;
use std::time::{Duration, Instant};

const BATCH: usize = 64;

/// `n` segments of `mss` payload bytes of one TCP flow (source address byte `id`), behind an
/// S-tag and a C-tag, with the TCP timestamp option; checksums complete.
fn flow_segments(v6: bool, id: u8, mss: u16, n: usize) -> Vec<Vec<u8>> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend([0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10]);
    let payload = usize::from(mss) * n;
    let tcp_len = 32 + payload;
    if v6 {
        f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend((tcp_len as u16).to_be_bytes());
        f.extend([6, 64]);
        f.extend([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, id]);
        f.extend([
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe,
        ]);
    } else {
        f.extend([0x08, 0x00, 0x45, 0]);
        f.extend(((20 + tcp_len) as u16).to_be_bytes());
        f.extend([0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, id, 10, 0, 0, 0xfe]);
    }
    let l4 = f.len();
    f.extend([
        0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 1, 0x80, 0x10, 1, 0, 0, 0, 0, 0,
    ]);
    f.extend([1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    f.extend((0..payload).map(|i| (i * 7) as u8));
    let mut p = PacketBuf::from_frame(&f);
    p.offload = OffloadMeta {
        flags: F_NEEDS_CSUM,
        gso_type: if v6 {
            GsoType::TcpV6.raw()
        } else {
            GsoType::TcpV4.raw()
        },
        hdr_len: (l4 + 32) as u16,
        gso_size: mss,
        csum_start: l4 as u16,
        csum_offset: 16,
    };
    let mut segs = Vec::new();
    segment(&p, Tpid::is_well_known, &mut BufPool::new(64), &mut segs).expect("segments");
    segs.iter().map(|s| s.frame().to_vec()).collect()
}

/// `flows` flows of `BATCH / flows` segments each, round robin.
fn batch_frames(v6: bool, flows: usize, mss: u16) -> Vec<Vec<u8>> {
    let per: Vec<Vec<Vec<u8>>> = (0..flows)
        .map(|i| flow_segments(v6, i as u8 + 1, mss, BATCH / flows))
        .collect();
    (0..BATCH / flows)
        .flat_map(|j| per.iter().map(move |f| f[j].clone()))
        .collect()
}

/// How long to run: for a time, or for a number of batches.
#[derive(Clone, Copy)]
enum Stop {
    After(Duration),
    Rounds(u64),
}

/// Runs the port loop; returns (segments per second, frames out per batch).
fn measure(frames: &[Vec<u8>], meta_flags: u8, with_gro: bool, stop: Stop) -> (f64, f64) {
    let mut gro = Gro::new();
    let mut pool = BufPool::new(4 * BATCH);
    let mut batch = Batch::with_capacity(BATCH);
    let mut segs = 0u64;
    let mut rounds = 0u64;
    let mut outs = 0u64;
    let start = Instant::now();
    loop {
        let n = match stop {
            Stop::After(_) => 64,
            Stop::Rounds(r) => r,
        };
        for _ in 0..n {
            for f in frames {
                let mut p = pool.get();
                p.set_frame(f);
                p.offload.flags = meta_flags;
                batch.push(p);
            }
            if with_gro {
                gro.coalesce(
                    &mut batch,
                    &mut pool,
                    Tpid::is_well_known,
                    GroLimits::default(),
                );
            }
            outs += batch.len() as u64;
            for p in batch.drain() {
                pool.put(p);
            }
            segs += frames.len() as u64;
            rounds += 1;
        }
        match stop {
            Stop::After(limit) if start.elapsed() < limit => {}
            _ => break,
        }
    }
    let t = start.elapsed().as_secs_f64();
    (segs as f64 / t, outs as f64 / rounds as f64)
}

fn main() {
    let mut secs = 1.0;
    let mut case = 0;
    let mut rounds: Option<u64> = None;
    let mut with_gro = true;
    let mut args = std::env::args().skip(1);
    let number = |v: Option<String>, what: &str| -> f64 {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what} takes a number"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => secs = number(args.next(), "--seconds"),
            "--case" => case = number(args.next(), "--case") as usize,
            "--rounds" => rounds = Some(number(args.next(), "--rounds") as u64),
            "--no-gro" => with_gro = false,
            "-h" | "--help" => {
                println!(
                    "gro_bench [--seconds S] | [--case N --rounds R [--no-gro]]: \
                     segments/s through Gro::coalesce, batch {BATCH}"
                );
                return;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let cases: [(&str, bool, usize, u16, u8); 6] = [
        (
            "IPv4, 2 flows, MSS 1448, checksums summed",
            false,
            2,
            1448,
            0,
        ),
        (
            "IPv4, 2 flows, MSS 1448, DATA_VALID",
            false,
            2,
            1448,
            F_DATA_VALID,
        ),
        (
            "IPv6, 2 flows, MSS 1428, checksums summed",
            true,
            2,
            1428,
            0,
        ),
        (
            "IPv4, 8 flows, MSS 1448, checksums summed",
            false,
            8,
            1448,
            0,
        ),
        ("IPv4, 2 flows, MSS 536, checksums summed", false, 2, 536, 0),
        ("IPv4, 64 flows (nothing to merge)", false, 64, 1448, 0),
    ];
    if let Some(rounds) = rounds {
        let (_, v6, flows, mss, meta) = cases[case];
        measure(
            &batch_frames(v6, flows, mss),
            meta,
            with_gro,
            Stop::Rounds(rounds),
        );
        return;
    }
    println!("batch {BATCH}, S+C tags, TCP timestamps; {secs} s per row");
    println!(
        "{:<44} {:>12} {:>12} {:>10} {:>11}",
        "case", "Mseg/s", "ns/seg", "out/batch", "GRO ns/seg"
    );
    for (name, v6, flows, mss, meta) in cases {
        let frames = batch_frames(v6, flows, mss);
        let stop = Stop::After(Duration::from_secs_f64(secs));
        let (base, _) = measure(&frames, meta, false, stop);
        let (rate, outs) = measure(&frames, meta, true, stop);
        let gro_ns = 1e9 / rate - 1e9 / base;
        println!(
            "{name:<44} {:>12.2} {:>12.1} {:>10.1} {:>11.1}",
            rate / 1e6,
            1e9 / rate,
            outs,
            gro_ns
        );
    }
}
