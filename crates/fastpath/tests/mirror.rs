//! Mirror copies in the program (decision 80), through `BPF_PROG_TEST_RUN` (root; skipped
//! otherwise): a flow with `ACT_MIRROR` and its copies in `qb_mir_flows` is a hit only while
//! the copies' entry is there with the flow's generation, a frame whose copy is longer than
//! the destination takes misses (`size`), every hit's copies are counted per session and on
//! the destination port, a copy the kernel refuses as the session's `failed`. The bytes of
//! the clones are the differential's (`crates/model/tests/fastpath_exact.rs`, against the
//! pipeline's copies).
//!
//! `cargo test -p qbridge-fastpath --test mirror -- --ignored --nocapture` (root) prints the
//! cost of a copy: ns per test run of one frame with 0, 1 and 2 clones (each clone really
//! crosses a veth).

mod common;

use common::{action, ifindex, ip, key, own_netns, port};
use qbridge_fastpath::*;

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// A fresh network namespace for this thread with veths `mxa`/`mxb` (the ingress), `mxc`/`mxd`
/// (the egress) and `mxe`/`mxf` (a mirror destination), up; their ifindexes.
fn setup() -> Option<(FastPath, u32, u32, u32)> {
    if !own_netns() {
        return None;
    }
    for (a, b) in [("mxa", "mxb"), ("mxc", "mxd"), ("mxe", "mxf")] {
        ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
        ip(&["link", "set", a, "up"]);
        ip(&["link", "set", b, "up"]);
    }
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("mxa"), ifindex("mxc"), ifindex("mxe")))
}

fn frame(len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&B);
    f.extend_from_slice(&A);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut i = 0u8;
    while f.len() < len {
        f.push(i);
        i = i.wrapping_add(1);
    }
    f
}

fn learn(fp: &mut FastPath, mac: [u8; 6], port: u32, version: u32) {
    fp.set_fdb(
        FdbKey {
            fid: 1,
            mac,
            ..FdbKey::default()
        },
        FdbEntry {
            port,
            version,
            last_seen_ns: 0,
        },
    )
    .unwrap();
}

/// A flow from port 1 (`mxa`) to port 2 (`mxc`), untagged, with `copies` to port 3 (`mxe`): the
/// first an rx copy with an RSPAN tag, the second a tx copy; the destination takes `max` bytes.
fn install(fp: &mut FastPath, gen: u32, mc: u32, me: u32, copies: usize, max: u16) {
    let k = key(1, B, &[]);
    let mut a = action(gen, (1, 0), mc, 2, 1, &[]);
    if copies > 0 {
        a.flags |= ACT_MIRROR;
        let mut m = MirAction {
            generation: gen,
            n: copies as u8,
            ..MirAction::default()
        };
        for (i, c) in m.copies.iter_mut().take(copies).enumerate() {
            *c = MirCopy {
                ifindex: me,
                port: 3,
                max_len: max,
                rspan_tpid_be: if i == 0 { 0x8100u16.to_be() } else { 0 },
                rspan_tci_be: if i == 0 { 7u16.to_be() } else { 0 },
                session: i as u8,
                flags: if i == 1 { MIR_TX } else { 0 },
            };
        }
        fp.set_mirror(k, m).unwrap();
    }
    fp.insert_flow(k, a).unwrap();
}

#[test]
fn copies_follow_their_flow_fit_their_destination_and_are_counted() {
    let Some((mut fp, ma, mc, me)) = setup() else {
        return;
    };
    fp.set_port(ma, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    learn(&mut fp, B, 2, 7);
    learn(&mut fp, A, 1, 0);
    install(&mut fp, gen, mc, me, 2, 1518);
    let f = frame(100);
    let r = fp.test_run(&f, ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
    assert_eq!(r.frame, f, "the frame itself leaves as it came");
    // Session 0: the rx copy with its RSPAN tag (104 bytes); session 1: the tx copy.
    let s0 = fp.mir_stats(0).unwrap();
    let s1 = fp.mir_stats(1).unwrap();
    assert_eq!((s0.frames, s0.bytes, s1.frames, s1.bytes), (1, 104, 1, 100));
    let p3 = fp.port_stats(3).unwrap();
    assert_eq!((p3.tx_frames, p3.tx_bytes), (2, 204));

    // A copy longer than its destination takes: the frame goes up (the pipeline counts the
    // session's oversize); 1414 + 4 fits 1418, 1415 + 4 does not.
    install(&mut fp, gen, mc, me, 2, 1418);
    let r = fp.test_run(&frame(1414), ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
    let r = fp.test_run(&frame(1415), ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Size));
    assert_eq!(fp.mir_stats(0).unwrap().frames, 2, "no copy of a miss");

    // The flow names copies that are not there (or are an older flow's): up, as stale.
    let old = fp.bump_generation().unwrap();
    install(&mut fp, old, mc, me, 1, 1518);
    let k = key(1, B, &[]);
    let mut newer = action(old + 1, (1, 0), mc, 2, 1, &[]);
    newer.flags |= ACT_MIRROR;
    fp.insert_flow(k, newer).unwrap();
    fp.bump_generation().unwrap();
    let r = fp.test_run(&f, ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Stale));
    assert_eq!(fp.mir_stats(0).unwrap().frames, 2);
}

/// A copy the kernel refuses (`bpf_clone_redirect` to an interface that does not exist, or
/// that is down) is counted as the session's `failed` (decision 85), not as sent, and not on
/// the destination port; the frame itself is still forwarded.
#[test]
fn a_refused_copy_is_counted_as_failed() {
    let Some((mut fp, ma, mc, me)) = setup() else {
        return;
    };
    fp.set_port(ma, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    learn(&mut fp, B, 2, 7);
    learn(&mut fp, A, 1, 0);
    let f = frame(100);
    // Session 0 (rx, RSPAN-tagged) and 1 (tx) to an ifindex no interface has.
    install(&mut fp, gen, mc, 0x7fff_fff0, 2, 1518);
    let r = fp.test_run(&f, ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
    assert_eq!(r.frame, f, "the RSPAN tag is off the frame again");
    let (s0, s1) = (fp.mir_stats(0).unwrap(), fp.mir_stats(1).unwrap());
    assert_eq!((s0.frames, s0.bytes, s0.failed), (0, 0, 1));
    assert_eq!((s1.frames, s1.bytes, s1.failed), (0, 0, 1));
    assert_eq!(fp.port_stats(3).unwrap().tx_frames, 0);

    // The destination down: refused too (-ENETDOWN); up again: sent.
    install(&mut fp, gen, mc, me, 2, 1518);
    ip(&["link", "set", "mxe", "down"]);
    let r = fp.test_run(&f, ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
    let (s0, s1) = (fp.mir_stats(0).unwrap(), fp.mir_stats(1).unwrap());
    assert_eq!((s0.frames, s0.failed, s1.frames, s1.failed), (0, 2, 0, 2));
    ip(&["link", "set", "mxe", "up"]);
    let r = fp.test_run(&f, ma, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
    let (s0, s1) = (fp.mir_stats(0).unwrap(), fp.mir_stats(1).unwrap());
    assert_eq!((s0.frames, s0.failed, s1.frames, s1.failed), (1, 2, 1, 2));
    let p3 = fp.port_stats(3).unwrap();
    assert_eq!((p3.tx_frames, p3.tx_bytes), (2, 204));
}

/// The cost of the copies: ns per frame through `BPF_PROG_TEST_RUN` (100 000 repeats, the
/// clones really sent through a veth), 0, 1 and 2 copies alternated seven times; medians.
#[test]
#[ignore]
fn cost_of_a_copy() {
    let Some((mut fp, ma, mc, me)) = setup() else {
        return;
    };
    fp.set_port(ma, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    learn(&mut fp, B, 2, 7);
    learn(&mut fp, A, 1, 0);
    let f = frame(100);
    let mut ns: [Vec<u32>; 3] = Default::default();
    for _ in 0..7 {
        for (n, v) in ns.iter_mut().enumerate() {
            install(&mut fp, gen, mc, me, n, 1518);
            let r = fp.test_run_repeat(&f, ma, 100_000).unwrap();
            assert_eq!(r.verdict, Verdict::Hit { ifindex: mc });
            v.push(r.ns_per_run);
        }
    }
    for (n, v) in ns.iter_mut().enumerate() {
        v.sort_unstable();
        eprintln!("{n} copies: ns per frame {v:?}, median {}", v[v.len() / 2]);
    }
}
