//! The seeds' VLAN experiment against the program alone (FreeBSD's VLAN_ARRAY: a hashed VLAN
//! lookup fell from 440 to 278 kpps as VLANs grew to 506; an array stayed flat): N VLANs
//! configured (one flow, one source and one destination per VLAN, as the daemon installs
//! them), then frames either all on one VLAN or spread over all N, one `BPF_PROG_TEST_RUN` per
//! frame, cycling through the VLANs so that each frame's entries are as cold as in a stream
//! spread over them. Prints the kernel's mean ns per run (the program's own time: the test
//! run's clock brackets the program, not the system call) for each, and the ratio spread/one.
//! `MACS=1000000` then fills the FDB map with that many other entries (a million MACs in the
//! FDB map; they spread over the N VLANs; those past the dense slots have none). `indexed`:
//! the flows the program serves from its flow index (decision 79) after the runs, on any CPU
//! (a flow whose index entry another flow holds uses the hash).
//!
//! `cargo run --release -p qbridge-fastpath --example vlans` (root); `FLOW_INDEX=1`: the flow
//! index on (decision 79); `ROUNDS=` (default 20)
//! passes of 8192 frames each, one and spread interleaved; `VLANS=2,506,4093`.
//! docs/benchmarks-live.md ("Flat in VLAN count").

use qbridge_fastpath::*;

fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

const SRC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];

fn dst(vid: u16) -> [u8; 6] {
    [0x02, 0xbb, 0, 0, (vid >> 8) as u8, vid as u8]
}

fn frame(vid: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst(vid));
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&[0x81, 0x00]);
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&[0x08, 0x00]);
    f.resize(60, 0);
    f
}

fn env_num(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !FastPath::built() {
        eprintln!("built without clang: no program to measure");
        std::process::exit(1);
    }
    let rounds = env_num("ROUNDS", 20).max(1);
    let macs = env_num("MACS", 0);
    let vlans: Vec<u16> = std::env::var("VLANS")
        .unwrap_or_else(|_| "2,506,4093".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|&v| (1..=4094).contains(&v))
        .collect();
    // LEARN=0: the ingress port does not learn (no source lookup), to tell the lookups apart.
    let learn = env_num("LEARN", 1) != 0;
    let lo = 1; // the loopback interface: the test runs only need an ifindex
    println!(
        "{:>6} {:>9} {:>12} {:>12} {:>8} {:>8}   (median of {rounds} passes of 8192 frames; ns per test run)",
        "vlans", "fdb macs", "one VLAN", "spread", "ratio", "indexed"
    );
    for &n in &vlans {
        // A fresh program per row: its maps hold exactly this row's entries.
        let mut fp = match FastPath::load() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("cannot load the program (root?): {e}");
                std::process::exit(1);
            }
        };
        // FLOW_INDEX=1: with the flow index (decision 79; off by default).
        fp.set_flow_index(env_num("FLOW_INDEX", 0) == 1).unwrap();
        fp.set_port(
            lo,
            Port {
                index: 1,
                flags: PORT_ENABLED,
                ..Port::default()
            },
        )
        .unwrap();
        fp.set_config(Config {
            generation: 1,
            upcall_ifindex: 0,
            trace_ifindex: 0,
        })
        .unwrap();
        let w = fp.writer().unwrap();
        for vid in 1..=n {
            let fdb = |m: [u8; 6], port: u32| {
                w.set_fdb(
                    &FdbKey {
                        bridge: 0,
                        fid: vid,
                        mac: m,
                        pad: 0,
                    },
                    &FdbEntry {
                        port,
                        version: 0,
                        last_seen_ns: 0,
                    },
                )
                .unwrap()
            };
            fdb(SRC, 1);
            fdb(dst(vid), 2);
            let key = FlowKey {
                in_port: 1,
                tpid_be: [0x8100u16.to_be(), 0],
                tci_be: [vid.to_be(), 0],
                dst: dst(vid),
                ntags: 1,
                ethertype_be: 0x0800u16.to_be(),
                ..FlowKey::default()
            };
            let mut action = FlowAction {
                generation: 1,
                out_ifindex: lo,
                min_len: 14,
                max_len: 1522,
                push_n: 1,
                n_hops: 1,
                push_tpid_be: [0x8100u16.to_be(), 0],
                push_tci_be: [vid.to_be(), 0],
                ..FlowAction::default()
            };
            action.hops[0] = Hop {
                in_port: 1,
                out_port: 2,
                fid: vid,
                vlan_slot: vid,
                rx_pcp: 0,
                flags: if learn { HOP_LEARNING } else { 0 },
                in_tags: 1,
                out_tags: 1,
                ..Hop::default()
            };
            w.insert_flow(&key, &action).unwrap();
        }
        for i in 0..macs {
            let key = FdbKey {
                bridge: 0,
                fid: (i % u32::from(n) + 1) as u16,
                mac: mac(i),
                pad: 0,
            };
            let e = FdbEntry {
                port: 2,
                version: 0,
                last_seen_ns: 0,
            };
            if w.set_fdb(&key, &e).is_err() {
                break; // the map is full
            }
        }
        let frames: Vec<Vec<u8>> = (1..=n).map(frame).collect();
        let one = frame(1);
        let pass = |fp: &mut FastPath, spread: bool| -> f64 {
            let mut total = 0u64;
            for i in 0..8192usize {
                let f = if spread {
                    &frames[i % frames.len()]
                } else {
                    &one
                };
                let r = fp.test_run_repeat(f, lo, 1).unwrap();
                assert!(matches!(r.verdict, Verdict::Hit { .. }), "{:?}", r.verdict);
                total += u64::from(r.ns_per_run);
            }
            total as f64 / 8192.0
        };
        // Warm both once (the first run of each entry fills its last-seen time).
        pass(&mut fp, true);
        pass(&mut fp, false);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(pass(&mut fp, false));
            b.push(pass(&mut fp, true));
        }
        let (a, b) = (median(&mut a), median(&mut b));
        let mut indexed: Vec<FlowKey> = fp
            .flow_index()
            .map(|v| v.into_iter().map(|(_, e)| e.key).collect())
            .unwrap_or_default();
        indexed.sort_by_key(|k| (k.tci_be, k.dst));
        indexed.dedup();
        println!(
            "{n:>6} {macs:>9} {a:>12.1} {b:>12.1} {:>8.2} {:>8}",
            a / b.max(1e-9),
            indexed.len()
        );
    }
}
