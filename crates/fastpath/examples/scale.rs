//! What one frame costs the fast path's program, against the size of its tables: VLANs in
//! use (1 → 4094) and MAC addresses in the FDB map (1 000 → 1 000 000), flows up to the flow
//! table's size. Each row fills the maps, then runs one hit frame (802.1Q tag in, the same
//! tag out) a million times through the program in the kernel (`BPF_PROG_TEST_RUN`, which
//! times the runs), and counts the instructions the process retired meanwhile
//! (`perf_event_open`, user and kernel; "n/a" where the machine has no counter). The frame is
//! the same every run, so its entries stay in cache: this shows the lookups' cost does not
//! grow with the tables (the seeds' O(1) lesson), not the cost of cache misses on a table
//! larger than the cache.
//!
//! `cargo run --release -p qbridge-fastpath --example scale` (root). docs/benchmarks-live.md.
//! `HOP_FLAGS=N`: the flows' hop flags (default 1, `HOP_LEARNING`; 0: no source check; 2:
//! `HOP_SRC`, a locked port that does not learn); `ROWS=N`: only the first N rows.

#![allow(unsafe_code)]

mod common;

use common::{loopback_port, mac, set_fdb, vlan_flow};
use qbridge_fastpath::*;
use std::time::Instant;

const RUNS: u32 = 1_000_000;

/// A counter of the instructions this thread retires (user and kernel), if the machine has one.
fn instructions() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    #[repr(C)]
    #[derive(Default)]
    struct Attr {
        ty: u32,
        size: u32,
        config: u64,
        sample: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        rest: [u64; 12],
    }
    let attr = Attr {
        ty: 0, // PERF_TYPE_HARDWARE
        size: std::mem::size_of::<Attr>() as u32,
        config: 1, // PERF_COUNT_HW_INSTRUCTIONS
        ..Attr::default()
    };
    // SAFETY: perf_event_open reads `attr` (its size in the struct); no other pointer.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            0,
            -1,
            -1,
            0,
        )
    };
    // SAFETY: a descriptor the call just returned, owned by nobody else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

fn read_counter(fd: &std::os::fd::OwnedFd) -> u64 {
    use std::os::fd::AsRawFd;
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    v
}

fn main() {
    if !FastPath::built() {
        eprintln!("built without clang: no program to measure");
        std::process::exit(1);
    }
    let mut fp = match FastPath::load() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot load the program (root?): {e}");
            std::process::exit(1);
        }
    };
    let lo = loopback_port(&mut fp);
    let w = fp.writer().unwrap();
    let counter = instructions();
    println!(
        "{:>6} {:>9} {:>7} {:>10} {:>10} {:>13}",
        "vlans", "macs", "flows", "ns/frame", "Mframes/s", "instr/frame"
    );
    let (mut have_macs, mut have_flows) = (0u32, 0u32);
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    let hop_flags = env("HOP_FLAGS").map_or(HOP_LEARNING, |f| f as u8);
    for (vlans, macs) in [
        (1u32, 1_000u32),
        (4094, 1_000),
        (4094, 100_000),
        (4094, 1_000_000),
    ]
    .into_iter()
    .take(env("ROWS").unwrap_or(4))
    {
        let t = Instant::now();
        // FDB entries: MAC i in VLAN (i mod vlans) + 1, on port 2 (port 1 for the source).
        for i in have_macs..macs {
            let vid = (i % vlans + 1) as u16;
            let port = if i == 1 { 1 } else { 2 };
            set_fdb(&w, vid, mac(i), port).unwrap();
        }
        have_macs = have_macs.max(macs);
        // A flow per MAC, up to the flow table's size (65 536).
        let flows = macs.min(65_536);
        for i in have_flows..flows {
            let vid = (i % vlans + 1) as u16;
            let (key, action) = vlan_flow(vid, mac(i), lo, hop_flags);
            w.insert_flow(&key, &action).unwrap();
        }
        have_flows = have_flows.max(flows);
        let fill = t.elapsed();
        // MAC 0 to MAC 1... the frame: destination MAC 0, source MAC 1, both in VLAN 1.
        let mut frame = Vec::with_capacity(64);
        frame.extend_from_slice(&mac(0));
        frame.extend_from_slice(&mac(1));
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x01, 0x08, 0x00]);
        frame.resize(64, 0);
        if vlans > 1 {
            // MAC 1 is in VLAN 2 when VLANs cycle: put the source where the frame's VLAN is.
            set_fdb(&w, 1, mac(1), 1).unwrap();
        }
        let before = counter.as_ref().map(read_counter);
        let r = fp.test_run_repeat(&frame, lo, RUNS).unwrap();
        let after = counter.as_ref().map(read_counter);
        assert!(matches!(r.verdict, Verdict::Hit { .. }), "{:?}", r.verdict);
        let instr = match (before, after) {
            (Some(b), Some(a)) if a > b => format!("{:.0}", (a - b) as f64 / f64::from(RUNS)),
            _ => "n/a".into(),
        };
        println!(
            "{vlans:>6} {macs:>9} {flows:>7} {:>10} {:>10.1} {instr:>13}   (maps filled in {:.1} s)",
            r.ns_per_run,
            1e3 / f64::from(r.ns_per_run.max(1)),
            fill.as_secs_f64()
        );
    }
}
