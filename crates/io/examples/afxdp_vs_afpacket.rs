//! Receive rate of one port, AF_XDP (skb and native mode) against AF_PACKET, on a veth pair
//! between two namespaces it creates (and removes): an AF_PACKET sender blasts 64-byte
//! frames (`sendmmsg`, 256 per call, qdisc bypass) into one end for SECS seconds, and the
//! port under test on the other end receives them in bursts of 256, sleeping in poll(2) when
//! idle, as a daemon worker does. Prints frames/s sent and received, the receiving thread's
//! CPU time per received frame (user + system: the syscalls and copies of the backend; the
//! veth's own softirq work mostly runs on the sender's CPU and is not in it), and the
//! receiver's kernel-side drops. TAGS (0, 1 or 2) puts that many VLAN tags (0x88a8, 0x8100) on every
//! frame. Asserts nothing.
//!
//! `cargo run --release -p qbridge-io --example afxdp_vs_afpacket [SECS] [TAGS]` (as root).
#![allow(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
use qbridge_io::afxdp::{AfXdpConfig, AfXdpPort, XdpMode};
use qbridge_io::netns::run_in_netns;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool};

#[derive(Clone, Copy, Debug)]
enum Backend {
    AfPacket,
    AfXdp(XdpMode),
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::AfPacket => f.write_str("af_packet"),
            Backend::AfXdp(m) => write!(f, "af_xdp {m}"),
        }
    }
}

/// The receiving port, whichever backend.
enum Rx {
    Packet(Box<AfPacketPort>),
    Xdp(Box<AfXdpPort>),
}

impl Rx {
    fn burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> usize {
        match self {
            Rx::Packet(p) => p.rx_burst(batch, pool, 256).unwrap(),
            Rx::Xdp(p) => p.rx_burst(batch, pool, 256).unwrap(),
        }
    }

    fn wait(&self) {
        match self {
            Rx::Packet(p) => p.wait_readable(2).unwrap(),
            Rx::Xdp(p) => p.wait_readable(2).unwrap(),
        };
    }

    /// Drops the receiver's kernel reported (AF_XDP: ring full, fill ring empty, dropped).
    fn kernel_drops(&mut self) -> String {
        match self {
            Rx::Packet(_) => "-".into(),
            Rx::Xdp(p) => {
                let k = p.read_kernel_stats().unwrap();
                format!(
                    "ring_full {} fill_empty {} dropped {} (fill-ring kicks {})",
                    k.rx_ring_full,
                    k.rx_fill_ring_empty_descs,
                    k.rx_dropped,
                    p.stats().rx_kicks
                )
            }
        }
    }
}

/// CPU time of the calling thread (user + system), nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call fills in.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    if let Some(reason) = common::skip_reason() {
        eprintln!("cannot run: {reason}");
        return;
    }
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let tags: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let tag_list = [(0x88a8u16, 100u16), (0x8100, 10)];
    // 64 bytes on the wire without FCS is 60; keep 60 whatever the tag count.
    let frame = common::tagged_frame(&tag_list[..tags.min(2)], 46 - 4 * tags.min(2));
    assert_eq!(frame.len(), 60);
    println!(
        "{:>14} {:>11} {:>11} {:>6} {:>8}  receiver kernel drops",
        "backend", "sent/s", "received/s", "rx %", "rx ns/f"
    );
    for backend in [
        Backend::AfPacket,
        Backend::AfXdp(XdpMode::Skb),
        Backend::AfXdp(XdpMode::Native),
    ] {
        run(backend, &frame, secs);
    }
}

fn run(backend: Backend, frame: &[u8], secs: f64) {
    let v = common::VethPair::new().expect("veth pair");
    let a = v.a.clone();
    let mut rx = run_in_netns(&v.ns_a.name, move || match backend {
        Backend::AfPacket => {
            AfPacketPort::open(AfPacketConfig::new(&a)).map(|p| Rx::Packet(Box::new(p)))
        }
        Backend::AfXdp(mode) => AfXdpPort::open(AfXdpConfig {
            mode,
            ..AfXdpConfig::new(&a, 0)
        })
        .map(|p| Rx::Xdp(Box::new(p))),
    })
    .unwrap()
    .unwrap();
    let b = v.b.clone();
    let mut tx = run_in_netns(&v.ns_b.name, move || {
        AfPacketPort::open(AfPacketConfig::new(&b))
    })
    .unwrap()
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let stop_rx = Arc::clone(&stop);
    let receiver = std::thread::spawn(move || {
        let cpu0 = thread_cpu_ns();
        let mut pool = BufPool::new(1024);
        let mut batch = Batch::with_capacity(256);
        let mut n = 0u64;
        while !stop_rx.load(Ordering::Relaxed) {
            let k = rx.burst(&mut batch, &mut pool);
            if k == 0 {
                rx.wait();
                continue;
            }
            n += k as u64;
            for p in batch.drain() {
                pool.put(p);
            }
        }
        // Whatever is still queued arrived within the window too.
        loop {
            let k = rx.burst(&mut batch, &mut pool);
            if k == 0 {
                break;
            }
            n += k as u64;
            for p in batch.drain() {
                pool.put(p);
            }
        }
        let drops = rx.kernel_drops();
        (n, drops, thread_cpu_ns() - cpu0)
    });

    let mut pool = BufPool::new(1024);
    let mut batch = Batch::with_capacity(256);
    let mut sent = 0u64;
    let start = Instant::now();
    let window = Duration::from_secs_f64(secs);
    while start.elapsed() < window {
        for _ in 0..256 {
            let mut p = pool.get();
            p.set_frame(frame);
            batch.push(p);
        }
        sent += tx.tx_burst(&mut batch, &mut pool).unwrap().sent as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (received, drops, cpu_ns) = receiver.join().unwrap();
    println!(
        "{:>14} {:>11.0} {:>11.0} {:>5.1}% {:>8.0}  {drops}",
        backend.to_string(),
        sent as f64 / elapsed,
        received as f64 / elapsed,
        100.0 * received as f64 / sent.max(1) as f64,
        cpu_ns as f64 / received.max(1) as f64
    );
}
