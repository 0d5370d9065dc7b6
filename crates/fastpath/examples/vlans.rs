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
//! `cargo run --release -p qbridge-fastpath --example vlans` (root); `ORDER=random`: each
//! spread frame's VLAN drawn at random, not 1, 2, 3…; `DESTS=K`: K
//! destinations (flows) per VLAN, the one-VLAN pass cycling through VLAN 1's; `AB=1`: the
//! program with and without the flow index, alternated (decision 93); `FLOW_INDEX=0`: the flow
//! index off (decisions 79, 93: on by default, as the daemon loads it); `ROUNDS=` (default 20)
//! passes of 8192 frames each, one and spread interleaved; `VLANS=2,506,4093`.
//! docs/benchmarks-live.md ("Flat in VLAN count"). Pin it to one CPU (`taskset -c 0 …`) to
//! compare runs: a test run on another CPU than the last finds that CPU's per-CPU state cold,
//! and unpinned runs read 1.5-2x the ns (decision 93).
//!
//! `STUDY=1`: where the extra cost of spreading is (decision 84). Variants of the program,
//! built here with clang from `bpf/fastpath.c` and `QB_STUDY_*` defines, each leaving out one
//! per-VLAN access (the per-VLAN counters, the destination's slot; the source's slot by a
//! port that does not learn), one with all three left out (the flow lookup alone), the flow
//! table with 8192 or 16384 entries (its buckets 128 or 256 KB instead of 1 MB) or as a plain
//! (not LRU) hash, and one whose every frame takes VLAN 1's flow (nothing per VLAN: the
//! control), all loaded at once and run in turn within each round. Prints each variant's
//! extra ns per frame (spread minus one VLAN, paired within a round, median), and the base's
//! extra less the variant's: what the left-out access costs.

mod common;

use common::{loopback_port, mac, set_fdb, vlan_flow};
use qbridge_fastpath::*;

const SRC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];

/// Destinations per VLAN (`DESTS`, default 1): each its own flow.
fn dests() -> u8 {
    env_num("DESTS", 1).clamp(1, 255) as u8
}

/// The `j`th destination of VLAN `vid`.
fn dst(vid: u16, j: u8) -> [u8; 6] {
    [0x02, 0xbb, j, 0, (vid >> 8) as u8, vid as u8]
}

fn frame(vid: u16, j: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst(vid, j));
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

/// One frame per VLAN and destination, in VLAN order.
fn spread_frames(n: u16) -> Vec<Vec<u8>> {
    (1..=n)
        .flat_map(|v| (0..dests()).map(move |j| frame(v, j)))
        .collect()
}

/// Whether a spread pass draws each frame at random from them (`ORDER=random`) instead of
/// taking them in turn: nothing is then read in an order a prefetcher could follow, nor in the
/// order the flow index took its copies (real traffic does not arrive VLAN after VLAN).
fn random_order() -> bool {
    std::env::var("ORDER").as_deref() == Ok("random")
}

/// Where the random order's draws are (one sequence for the whole run).
static DRAWS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0x2545_f491_4f6c_dd1d);

/// The next of a xorshift sequence (the random order's draws; fixed seed, no dependency).
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// One flow, a source and a destination entry per VLAN (as the daemon installs them), then
/// `macs` other FDB entries.
fn setup(fp: &mut FastPath, n: u16, macs: u32, learn: bool) {
    let lo = loopback_port(fp);
    let w = fp.writer().unwrap();
    for vid in 1..=n {
        set_fdb(&w, vid, SRC, 1).unwrap();
        for j in 0..dests() {
            set_fdb(&w, vid, dst(vid, j), 2).unwrap();
            let flags = if learn { HOP_LEARNING } else { 0 };
            let (key, action) = vlan_flow(vid, dst(vid, j), lo, flags);
            w.insert_flow(&key, &action).unwrap();
        }
    }
    for i in 0..macs {
        if set_fdb(&w, (i % u32::from(n) + 1) as u16, mac(i), 2).is_err() {
            break; // the map is full
        }
    }
}

/// Mean ns per test run over 8192 frames, all on VLAN 1 (cycling through its destinations)
/// or cycling through `frames`.
fn pass(fp: &mut FastPath, frames: &[Vec<u8>], spread: bool) -> f64 {
    let one: Vec<Vec<u8>> = (0..dests()).map(|j| frame(1, j)).collect();
    let random = random_order();
    // The draws go on from pass to pass (a fresh sequence each pass, not the same 8192).
    let mut x = DRAWS.load(std::sync::atomic::Ordering::Relaxed);
    let mut total = 0u64;
    for i in 0..8192usize {
        let f = match (spread, random) {
            (true, false) => &frames[i % frames.len()],
            (true, true) => &frames[(xorshift(&mut x) % frames.len() as u64) as usize],
            (false, _) => &one[i % one.len()],
        };
        let r = fp.test_run_repeat(f, 1, 1).unwrap();
        DRAWS.store(x, std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(r.verdict, Verdict::Hit { .. }), "{:?}", r.verdict);
        total += u64::from(r.ns_per_run);
    }
    total as f64 / 8192.0
}

/// A variant of the program: its name, its `QB_STUDY_*` defines, whether the port learns.
struct Variant {
    name: &'static str,
    defines: &'static [&'static str],
    learn: bool,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "base",
        defines: &[],
        learn: true,
    },
    Variant {
        name: "no vlan stats",
        defines: &["QB_STUDY_NO_VLAN_STATS"],
        learn: true,
    },
    Variant {
        name: "no src slot",
        defines: &[],
        learn: false,
    },
    Variant {
        name: "no dst slot",
        defines: &["QB_STUDY_NO_DST"],
        learn: true,
    },
    Variant {
        name: "flow only",
        defines: &["QB_STUDY_NO_VLAN_STATS", "QB_STUDY_NO_DST"],
        learn: false,
    },
    Variant {
        name: "flows 8192",
        defines: &["QB_STUDY_FLOWS=8192"],
        learn: true,
    },
    Variant {
        name: "flows 16384",
        defines: &["QB_STUDY_FLOWS=16384"],
        learn: true,
    },
    Variant {
        name: "plain hash",
        defines: &["QB_STUDY_PLAIN_HASH"],
        learn: true,
    },
    Variant {
        name: "one flow",
        defines: &["QB_STUDY_ONE_FLOW"],
        learn: true,
    },
];

/// Builds a variant's object with clang (as build.rs builds the program).
fn build(v: &Variant) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf");
    let out = std::env::temp_dir().join(format!(
        "qb-vlans-study-{}-{}.o",
        std::process::id(),
        v.name.replace(' ', "-")
    ));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut cmd = std::process::Command::new(clang);
    cmd.args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!(
            "-I/usr/include/{}-linux-gnu",
            std::env::consts::ARCH
        ))
        .args(v.defines.iter().map(|d| format!("-D{d}")))
        .arg("-c")
        .arg(format!("{dir}/fastpath.c"))
        .arg("-o")
        .arg(&out);
    let o = cmd.output().expect("run clang");
    assert!(
        o.status.success(),
        "clang {}: {}",
        v.name,
        String::from_utf8_lossy(&o.stderr)
    );
    let b = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    b
}

fn study(vlans: &[u16], rounds: u32, macs: u32) {
    let objects: Vec<Vec<u8>> = VARIANTS.iter().map(build).collect();
    println!(
        "{:>6} {:>9} {:>14} {:>10} {:>10} {:>10} {:>12}   (ns per test run; medians of {rounds} rounds, the variants in turn within each)",
        "vlans", "fdb macs", "variant", "one", "spread", "extra", "base - this"
    );
    for &n in vlans {
        let frames = spread_frames(n);
        let mut fps: Vec<FastPath> = VARIANTS
            .iter()
            .zip(&objects)
            .map(|(v, o)| {
                let mut fp = FastPath::load_object(o, false).expect("load (root?)");
                setup(&mut fp, n, macs, v.learn);
                pass(&mut fp, &frames, true);
                pass(&mut fp, &frames, false);
                fp
            })
            .collect();
        let mut one = vec![Vec::new(); fps.len()];
        let mut spread = vec![Vec::new(); fps.len()];
        let mut extra = vec![Vec::new(); fps.len()];
        for _ in 0..rounds {
            for (i, fp) in fps.iter_mut().enumerate() {
                let a = pass(fp, &frames, false);
                let b = pass(fp, &frames, true);
                one[i].push(a);
                spread[i].push(b);
                extra[i].push(b - a);
            }
        }
        let base_extra = median(&mut extra[0].clone());
        for (i, v) in VARIANTS.iter().enumerate() {
            let e = median(&mut extra[i]);
            println!(
                "{n:>6} {macs:>9} {:>14} {:>10.1} {:>10.1} {e:>10.1} {:>12.1}",
                v.name,
                median(&mut one[i]),
                median(&mut spread[i]),
                base_extra - e
            );
        }
    }
}

/// `AB=1`: the program with the flow index and without it (decision 93), both loaded, their
/// passes alternated within each round: ns per test run, one VLAN and spread, and the index's
/// saving (medians of the paired differences).
fn index_on_off(vlans: &[u16], rounds: u32, macs: u32) {
    println!(
        "{:>6} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}   (ns per test run, medians of {rounds} rounds)",
        "vlans", "dests", "fdb macs", "one on", "one off", "spread on", "spread off", "one: off-on", "spread: off-on"
    );
    for &n in vlans {
        let frames = spread_frames(n);
        let mut fps: Vec<FastPath> = [true, false]
            .iter()
            .map(|&on| {
                let mut fp = FastPath::load_with_flow_index(on).expect("load (root?)");
                fp.set_flow_index(on).unwrap();
                setup(&mut fp, n, macs, true);
                pass(&mut fp, &frames, true);
                pass(&mut fp, &frames, false);
                fp
            })
            .collect();
        let mut v: [Vec<f64>; 6] = Default::default();
        for _ in 0..rounds {
            let mut r = [0.0; 4];
            for (i, fp) in fps.iter_mut().enumerate() {
                r[i] = pass(fp, &frames, false);
                r[2 + i] = pass(fp, &frames, true);
            }
            for (i, x) in r.iter().enumerate() {
                v[i].push(*x);
            }
            v[4].push(r[1] - r[0]);
            v[5].push(r[3] - r[2]);
        }
        let m: Vec<f64> = v.iter_mut().map(|x| median(x)).collect();
        println!(
            "{n:>6} {:>6} {macs:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            dests(),
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5]
        );
    }
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
    if env_num("STUDY", 0) == 1 {
        study(&vlans, rounds, macs);
        return;
    }
    if env_num("AB", 0) == 1 {
        index_on_off(&vlans, rounds, macs);
        return;
    }
    // LEARN=0: the ingress port does not learn (no source lookup), to tell the lookups apart.
    let learn = env_num("LEARN", 1) != 0;
    println!(
        "{:>6} {:>9} {:>12} {:>12} {:>8} {:>8}   (median of {rounds} passes of 8192 frames; ns per test run)",
        "vlans", "fdb macs", "one VLAN", "spread", "ratio", "indexed"
    );
    for &n in &vlans {
        // A fresh program per row: its maps hold exactly this row's entries. FLOW_INDEX=0:
        // without the flow index (decisions 79, 93; on by default, as the daemon loads it).
        let index = env_num("FLOW_INDEX", 1) == 1;
        let mut fp = match FastPath::load_with_flow_index(index) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("cannot load the program (root?): {e}");
                std::process::exit(1);
            }
        };
        fp.set_flow_index(index).unwrap();
        setup(&mut fp, n, macs, learn);
        let frames = spread_frames(n);
        let pass = |fp: &mut FastPath, spread: bool| pass(fp, &frames, spread);
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
