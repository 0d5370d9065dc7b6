//! Measures the one-way latency of a single frame from one AF_PACKET port to another across a
//! veth pair, at low rate (one frame at a time): the cost of the TPACKET_V3 block timeout,
//! since a block that is not full is handed over only when its timer fires, against a
//! TPACKET_V2 ring. Prints the median and the maximum; asserts nothing.
//!
//! `cargo run --release -p qbridge-io --example afpacket_latency` (as root).
#![allow(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort, RingVersion};
use qbridge_io::netns::run_in_netns;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool};

fn main() {
    if let Some(reason) = common::skip_reason() {
        eprintln!("cannot run: {reason}");
        return;
    }
    println!("{:>14} {:>12} {:>12}", "ring", "median µs", "max µs");
    let rings = [
        (RingVersion::V3, 1u32),
        (RingVersion::V3, 2),
        (RingVersion::V3, 8),
        (RingVersion::V2, 0),
    ];
    for (ring, tov) in rings {
        let v = common::VethPair::new().expect("veth pair");
        let mut tx = run_in_netns(&v.ns_b.name, || {
            AfPacketPort::open(AfPacketConfig::new(&v.b))
        })
        .unwrap()
        .unwrap();
        let mut cfg = AfPacketConfig::new(&v.a);
        cfg.ring = ring;
        cfg.block_timeout_ms = tov;
        let mut rx = run_in_netns(&v.ns_a.name, || AfPacketPort::open(cfg))
            .unwrap()
            .unwrap();
        let frame = common::tagged_frame(&[(0x8100, 7)], 46);
        let mut pool = BufPool::new(64);
        let mut lat = Vec::new();
        for _ in 0..60 {
            let mut batch = Batch::default();
            let mut p = pool.get();
            p.set_frame(&frame);
            batch.push(p);
            let t0 = Instant::now();
            let _ = tx.tx_burst(&mut batch, &mut pool).unwrap();
            let deadline = t0 + Duration::from_millis(200);
            'wait: while Instant::now() < deadline {
                rx.wait_readable(50).unwrap();
                rx.rx_burst(&mut batch, &mut pool, 64).unwrap();
                for p in batch.drain() {
                    let hit = p.frame() == &frame[..];
                    pool.put(p);
                    if hit {
                        lat.push(t0.elapsed().as_micros() as u64);
                        break 'wait;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        lat.sort_unstable();
        let label = match ring {
            RingVersion::V3 => format!("V3 tov {tov} ms"),
            RingVersion::V2 => "V2".to_owned(),
        };
        println!(
            "{label:>14} {:>12} {:>12}",
            lat[lat.len() / 2],
            lat[lat.len() - 1]
        );
    }
}
