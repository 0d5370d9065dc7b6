//! Measures AF_PACKET transmit and receive rates through the qbridge-io ports on a veth pair
//! between two namespaces it creates (and removes): 64-byte frames, for several batch sizes,
//! with and without `PACKET_QDISC_BYPASS`. Prints a table; asserts nothing.
//!
//! `cargo run --release -p qbridge-io --example afpacket_burst [FRAMES]` (as root).
#![allow(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    let frames: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    println!(
        "{:>6} {:>7} {:>5} {:>12} {:>12} {:>9}",
        "batch", "bypass", "ring", "tx frames/s", "rx frames/s", "rx lost"
    );
    let mut runs = Vec::new();
    for (bypass, ring) in [
        (true, RingVersion::V3),
        (true, RingVersion::V2),
        (false, RingVersion::V3),
    ] {
        for batch_size in [1usize, 32, 256] {
            runs.push((bypass, ring, batch_size));
        }
    }
    {
        for (bypass, ring, batch_size) in runs {
            let v = common::VethPair::new().expect("veth pair");
            let mut cfg = AfPacketConfig::new(&v.b);
            cfg.qdisc_bypass = bypass;
            let mut tx = run_in_netns(&v.ns_b.name, || AfPacketPort::open(cfg))
                .unwrap()
                .unwrap();
            let mut rx = run_in_netns(&v.ns_a.name, || {
                AfPacketPort::open({
                    let mut c = AfPacketConfig::new(&v.a);
                    c.ring = ring;
                    c
                })
            })
            .unwrap()
            .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let stop_rx = stop.clone();
            let receiver = std::thread::spawn(move || {
                let mut pool = BufPool::new(1024);
                let mut batch = Batch::with_capacity(256);
                let mut n = 0usize;
                let mut last = Instant::now();
                while !stop_rx.load(Ordering::Relaxed) {
                    let k = rx.rx_burst(&mut batch, &mut pool, 256).unwrap();
                    if k == 0 {
                        rx.wait_readable(2).unwrap();
                        continue;
                    }
                    n += k;
                    last = Instant::now();
                    for p in batch.drain() {
                        pool.put(p);
                    }
                }
                (n, last)
            });
            let frame = common::tagged_frame(&[], 46);
            let mut pool = BufPool::new(1024);
            let mut batch = Batch::with_capacity(batch_size);
            let mut sent = 0usize;
            let t0 = Instant::now();
            while sent < frames {
                for _ in 0..batch_size.min(frames - sent) {
                    let mut p = pool.get();
                    p.set_frame(&frame);
                    batch.push(p);
                }
                let out = tx.tx_burst(&mut batch, &mut pool).unwrap();
                sent += out.total();
            }
            let tx_secs = t0.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            let (received, last) = receiver.join().unwrap();
            let rx_secs = (last - t0).as_secs_f64();
            println!(
                "{batch_size:>6} {bypass:>7} {:>5} {:>12.0} {:>12.0} {:>9}",
                format!("{ring:?}"),
                frames as f64 / tx_secs,
                received as f64 / rx_secs,
                frames - received.min(frames)
            );
        }
    }
}
