//! The program, frame by frame, through `BPF_PROG_TEST_RUN` (root; skipped otherwise): what
//! it forwards, with the exact bytes that leave, and why it sends the rest up.

mod common;

use common::{action, ip, key, own_netns, port};
use qbridge_fastpath::*;
use std::process::Command;

/// A fresh network namespace for this thread, with veths `fa`/`fb` and `fc`/`fd`; their
/// ifindexes. None when not root or the fast path is not built.
fn setup() -> Option<(FastPath, u32, u32, u32)> {
    if !own_netns() {
        return None;
    }
    ip(&["link", "add", "fa", "type", "veth", "peer", "name", "fb"]);
    ip(&["link", "add", "fc", "type", "veth", "peer", "name", "fd"]);
    let idx = |n: &str| -> u32 {
        std::fs::read_to_string(format!("/sys/class/net/{n}/ifindex"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| {
                // /sys shows the namespace it was mounted in; ask ip.
                let o = Command::new("ip")
                    .args(["-o", "link", "show", n])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&o.stdout)
                    .split(':')
                    .next()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap()
            })
    };
    let fp = FastPath::load().expect("load");
    Some((fp, idx("fa"), idx("fc"), idx("fb")))
}

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn frame(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    // The payload is the same whatever the tags: `len` counts it as an untagged frame.
    let mut i = 0u8;
    while f.len() < len + 4 * tags.len() {
        f.push(i);
        i = i.wrapping_add(1);
    }
    f
}

fn learn(fp: &mut FastPath, fid: u16, mac: [u8; 6], port: u32, version: u32) {
    fp.set_fdb(
        FdbKey {
            fid,
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

#[test]
fn forwards_cached_decisions_with_the_exact_tags_and_sends_the_rest_up() {
    let Some((mut fp, fa, fc, unknown)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0x9100)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    // Removing what is not there is not an error (the engine removes without looking first).
    fp.remove_flow(&key(9, [9; 6], &[])).unwrap();
    fp.remove_port(0x7fff_fff0).unwrap();
    fp.remove_fdb(&FdbKey::default()).unwrap();
    let run = |fp: &mut FastPath, f: &[u8], on: u32| fp.test_run(f, on, None).unwrap();

    // Not a fast-path interface: passed to the stack untouched.
    let r = run(&mut fp, &frame(B, A, &[], 60), unknown);
    assert_eq!(r.verdict, Verdict::Miss(Miss::NoPort));
    assert_eq!(r.retval, 0, "TC_ACT_OK");
    // Group destination; no flow yet. It goes on to the host's stack too (a copy goes up).
    let r = run(&mut fp, &frame([0xff; 6], A, &[], 60), fa);
    assert_eq!(r.verdict, Verdict::Miss(Miss::Group));
    assert_eq!(
        r.retval, 0,
        "TC_ACT_OK: the stack gets group frames as with a packet socket"
    );
    // To the interface's own address: the host's as well (no flow is ever looked up).
    fp.set_port(
        fa,
        Port {
            index: 1,
            flags: PORT_ENABLED,
            extra_tpid_be: [0x9100u16.to_be(), 0],
            mac: [0x02, 0, 0, 0, 0xaa, 0x01],
            pad: 0,
        },
    )
    .unwrap();
    let r = run(&mut fp, &frame([0x02, 0, 0, 0, 0xaa, 0x01], A, &[], 60), fa);
    assert_eq!(r.verdict, Verdict::Miss(Miss::Local));
    assert_eq!(r.retval, 0, "TC_ACT_OK");
    assert_eq!(
        r.frame,
        frame([0x02, 0, 0, 0, 0xaa, 0x01], A, &[], 60),
        "untouched"
    );
    let access = frame(B, A, &[], 60);
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Miss(Miss::NoFlow)
    );

    // Access port 1 (untagged, VLAN 10) to trunk port 2 (C-tag 10 in S-tag 100).
    fp.insert_flow(
        key(1, B, &[]),
        action(
            gen,
            (1, 0),
            fc,
            2,
            10,
            &[(0x88a8, 100), (0x8100, 0x2000 | 10)],
        ),
    )
    .unwrap();
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Miss(Miss::Src),
        "A not learned"
    );
    learn(&mut fp, 10, A, 1, 1);
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Miss(Miss::Dst),
        "B not known"
    );
    learn(&mut fp, 10, B, 2, 6);
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Miss(Miss::Dst),
        "B's entry changed since"
    );
    learn(&mut fp, 10, B, 2, 7);
    let r = run(&mut fp, &access, fa);
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert_eq!(r.retval, 7, "TC_ACT_REDIRECT");
    assert_eq!(
        r.frame,
        frame(B, A, &[(0x88a8, 100), (0x8100, 0x2000 | 10)], 60)
    );
    // The source's last-seen time is refreshed.
    assert!(
        fp.fdb(&FdbKey {
            fid: 10,
            mac: A,
            ..FdbKey::default()
        })
        .unwrap()
        .unwrap()
        .last_seen_ns
            > 0
    );
    // The way back: two tags in, none out.
    fp.insert_flow(
        key(2, A, &[(0x88a8, 100), (0x8100, 10)]),
        action(gen, (2, 2), fa, 1, 10, &[]),
    )
    .unwrap();
    let mut back = action(gen, (2, 2), fa, 1, 10, &[]);
    back.hops[0].dst_version = 1;
    fp.insert_flow(key(2, A, &[(0x88a8, 100), (0x8100, 10)]), back)
        .unwrap();
    let r = run(
        &mut fp,
        &frame(A, B, &[(0x88a8, 100), (0x8100, 10)], 60),
        fc,
    );
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
    assert_eq!(r.frame, frame(A, B, &[], 60));
    // One tag rewritten (VLAN translation): 20 in, 30 out.
    let mut xlate = action(gen, (2, 1), fa, 1, 10, &[(0x8100, 30)]);
    xlate.hops[0].dst_version = 1;
    fp.insert_flow(key(2, A, &[(0x8100, 20)]), xlate).unwrap();
    let r = run(&mut fp, &frame(A, B, &[(0x8100, 20)], 60), fc);
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
    assert_eq!(r.frame, frame(A, B, &[(0x8100, 30)], 60));

    // Three tags, or a TPID the port takes that the fast path does not edit: up.
    assert_eq!(
        run(
            &mut fp,
            &frame(A, B, &[(0x88a8, 1), (0x8100, 2), (0x8100, 3)], 60),
            fc
        )
        .verdict,
        Verdict::Miss(Miss::Tags)
    );
    let mut f9100 = frame(B, A, &[], 60);
    f9100[12..14].copy_from_slice(&0x9100u16.to_be_bytes());
    assert_eq!(run(&mut fp, &f9100, fa).verdict, Verdict::Miss(Miss::Tags));

    // Sizes: a runt and an oversize frame go up; so does a super-frame whose segments would
    // be too long, not one whose segments fit.
    assert_eq!(
        run(&mut fp, &frame(B, A, &[], 59), fa).verdict,
        Verdict::Miss(Miss::Size)
    );
    assert_eq!(
        run(&mut fp, &frame(B, A, &[], 1515), fa).verdict,
        Verdict::Miss(Miss::Size)
    );
    assert_eq!(
        run(&mut fp, &frame(B, A, &[], 1514), fa).verdict,
        Verdict::Hit { ifindex: fc }
    );

    // A source learned on another port (moved): up.
    learn(&mut fp, 10, A, 2, 2);
    assert_eq!(run(&mut fp, &access, fa).verdict, Verdict::Miss(Miss::Src));
    learn(&mut fp, 10, A, 1, 3);
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Hit { ifindex: fc }
    );

    // A configuration change makes every flow stale.
    fp.bump_generation().unwrap();
    assert_eq!(
        run(&mut fp, &access, fa).verdict,
        Verdict::Miss(Miss::Stale)
    );

    // The counters add up: every run above was counted once, by its verdict.
    let (hits, misses) = fp.verdicts().unwrap();
    assert_eq!(hits, 5);
    let get = |m: Miss| misses.iter().find(|(x, _)| *x == m).unwrap().1;
    assert_eq!(get(Miss::NoPort), 1);
    assert_eq!(get(Miss::Group), 1);
    assert_eq!(get(Miss::Local), 1);
    assert_eq!(get(Miss::NoFlow), 1);
    assert_eq!(get(Miss::Src), 2);
    assert_eq!(get(Miss::Dst), 2);
    assert_eq!(get(Miss::Tags), 2);
    assert_eq!(get(Miss::Size), 2);
    assert_eq!(get(Miss::Stale), 1);
    let p1 = fp.port_stats(1).unwrap();
    let p2 = fp.port_stats(2).unwrap();
    assert_eq!((p1.rx_frames, p1.tx_frames), (3, 2));
    assert_eq!((p2.rx_frames, p2.tx_frames), (2, 3));
    // Bytes as on the wire, received before the edit and sent after it (an accelerated tag
    // the edit leaves counts): port 1 received 60 + 1514 + 60 and sent them with two tags
    // more; port 2 received 68 (two tags) + 64 (one) and sent 60 + 64.
    assert_eq!((p1.rx_bytes, p2.tx_bytes), (1634, 1658));
    assert_eq!((p2.rx_bytes, p1.tx_bytes), (132, 124));
    let v = fp.vlan_stats(10).unwrap();
    assert_eq!((v.rx_frames, v.rx_bytes), (5, 1634 + 132));
    assert_eq!((v.tx_frames, v.tx_bytes), (5, 1658 + 124));
}

#[test]
fn super_frames_are_forwarded_when_their_segments_fit() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fp.insert_flow(
        key(1, B, &[]),
        action(gen, (1, 0), fc, 2, 10, &[(0x8100, 10)]),
    )
    .unwrap();
    learn(&mut fp, 10, A, 1, 1);
    learn(&mut fp, 10, B, 2, 7);
    // IPv4 (20) + TCP (32 with timestamps): 14 + 4 + 52 + 1448 = 1518 <= 1522.
    // (A test run takes at most about a page: two segments.)
    let ipv4_tcp = |len: usize| {
        let mut f = frame(B, A, &[], len);
        f[14] = 0x45; // IPv4, IHL 5
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes()); // total length
        f[20..22].copy_from_slice(&[0x40, 0]); // don't fragment, offset 0
        f[14 + 9] = 6; // TCP
        f[14 + 20 + 12] = 8 << 4; // data offset 8 words
        f
    };
    let f = ipv4_tcp(14 + 52 + 2 * 1448);
    let r = fp.test_run(&f, fa, Some((1448, 2))).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    let r = fp.test_run(&f, fa, Some((1460, 2))).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Size), "1530-byte segments");
    // As the pipeline judges it (wire_len): a segment is never longer than the whole frame,
    // and a super-frame whose headers are not TCP/UDP over IP is judged whole.
    let mut short = ipv4_tcp(14 + 52 + 100);
    let r = fp.test_run(&short, fa, Some((1460, 1))).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "170 bytes out");
    short[14 + 9] = 1; // ICMP
    let r = fp.test_run(&short, fa, Some((1460, 1))).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "judged whole");
    // Headers the pipeline's parser does not take are not measured either: the frame is
    // judged whole (2966 bytes out), too long.
    type Quirk = fn(&mut [u8]);
    let quirks: [(&str, Quirk); 6] = [
        ("ICMP", |f| f[14 + 9] = 1),
        ("more fragments", |f| f[20] = 0x20),
        ("fragment offset", |f| f[21] = 0x10),
        ("total length past the frame", |f| f[16] = 0x20),
        ("total length inside the TCP header", |f| {
            f[16..18].copy_from_slice(&40u16.to_be_bytes())
        }),
        ("TCP data offset 4 words", |f| f[14 + 20 + 12] = 4 << 4),
    ];
    for (what, quirk) in quirks {
        let mut long = f.clone();
        quirk(&mut long);
        let r = fp.test_run(&long, fa, Some((1448, 2))).unwrap();
        assert_eq!(r.verdict, Verdict::Miss(Miss::Size), "{what}");
    }
}

#[test]
fn invalid_sources_go_up_on_a_port_that_does_not_learn() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(
        fa,
        Port {
            index: 1,
            flags: PORT_ENABLED,
            extra_tpid_be: [0, 0],
            ..Port::default()
        },
    )
    .unwrap();
    let gen = fp.bump_generation().unwrap();
    // The pipeline learns nothing on port 1: the flow checks no source.
    let mut a = action(gen, (1, 0), fc, 2, 10, &[]);
    a.hops[0].flags = 0;
    fp.insert_flow(key(1, B, &[]), a).unwrap();
    learn(&mut fp, 10, B, 2, 7);
    let run = |fp: &mut FastPath, src: [u8; 6]| fp.test_run(&frame(B, src, &[], 60), fa, None);
    assert_eq!(
        run(&mut fp, A).unwrap().verdict,
        Verdict::Hit { ifindex: fc }
    );
    // The pipeline drops these (invalid_src_mac); no FDB entry is looked up for them here.
    assert_eq!(
        run(&mut fp, [0; 6]).unwrap().verdict,
        Verdict::Miss(Miss::Src)
    );
    assert_eq!(
        run(&mut fp, [1, 0, 0x5e, 0, 0, 1]).unwrap().verdict,
        Verdict::Miss(Miss::Src)
    );
}

/// A flow through a patch link (a customer bridge, then a provider bridge): the source and
/// destination are checked in both bridges, and every port and VLAN on the way counts the
/// frame with its tags there.
#[test]
fn a_flow_through_a_patch_link_checks_and_counts_every_bridge() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let input = frame(B, A, &[], 60);
    let output = frame(B, A, &[(0x88a8, 100), (0x8100, 10)], 60);
    // Bridge 0: port 1 (access VLAN 10) to patch end 5 (C-tag 10); bridge 1: the other end,
    // 6 (S-VLAN 100 untagged), to trunk port 2 (both tags).
    let hops = [
        Hop {
            in_port: 1,
            out_port: 5,
            bridge: 0,
            fid: 10,
            vlan_slot: 10,
            flags: HOP_LEARNING,
            out_tags: 1,
            ..Hop::default()
        },
        Hop {
            in_port: 6,
            out_port: 2,
            bridge: 1,
            fid: 100,
            vlan_slot: 1 << 12 | 100,
            flags: HOP_LEARNING,
            in_tags: 1,
            ..Hop::default()
        },
    ];
    let (k, a) = compile(&Decision {
        in_extra_tpids: [0, 0],
        input: &input,
        output: &output,
        out_ifindex: fc,
        hops: &hops,
        flags: 0,
        generation: gen,
        min_len: 14,
        max_len: 1522,
    })
    .unwrap();
    fp.insert_flow(k, a).unwrap();
    let at = |fp: &mut FastPath, bridge: u16, fid: u16, mac: [u8; 6], port: u32| {
        fp.set_fdb(
            FdbKey {
                bridge,
                fid,
                mac,
                ..FdbKey::default()
            },
            FdbEntry {
                port,
                version: 0,
                last_seen_ns: 0,
            },
        )
        .unwrap();
    };
    at(&mut fp, 0, 10, B, 5);
    at(&mut fp, 0, 10, A, 1);
    at(&mut fp, 1, 100, B, 2);
    // The source is not learned in the provider bridge yet: up (the pipeline learns it).
    let r = fp.test_run(&input, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Src));
    at(&mut fp, 1, 100, A, 6);
    let r = fp.test_run(&input, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert_eq!(r.frame, output);
    // Every port and VLAN of the way, with the frame's length there: 60, 64, 68.
    let mut p = |i| fp.port_stats(i).unwrap();
    let (p1, p5, p6, p2) = (p(1), p(5), p(6), p(2));
    assert_eq!((p1.rx_frames, p1.rx_bytes, p1.tx_frames), (1, 60, 0));
    assert_eq!((p5.tx_frames, p5.tx_bytes, p5.rx_frames), (1, 64, 0));
    assert_eq!((p6.rx_frames, p6.rx_bytes, p6.tx_frames), (1, 64, 0));
    assert_eq!((p2.tx_frames, p2.tx_bytes, p2.rx_frames), (1, 68, 0));
    let c = fp.vlan_stats(10).unwrap();
    assert_eq!((c.rx_bytes, c.tx_bytes), (60, 64));
    let s = fp.vlan_stats(1 << 12 | 100).unwrap();
    assert_eq!((s.rx_bytes, s.tx_bytes), (64, 68));
    // The destination moved in the provider bridge: up.
    at(&mut fp, 1, 100, B, 6);
    let r = fp.test_run(&input, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Dst));
}

#[test]
fn a_last_seen_time_ahead_of_the_programs_clock_is_left_alone() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fp.insert_flow(key(1, B, &[]), action(gen, (1, 0), fc, 2, 10, &[]))
        .unwrap();
    learn(&mut fp, 10, B, 2, 7); // the version `action` expects
    let a_key = FdbKey {
        fid: 10,
        mac: A,
        ..FdbKey::default()
    };
    let seen = |fp: &mut FastPath| fp.fdb(&a_key).unwrap().unwrap().last_seen_ns;
    let access = frame(B, A, &[], 60);
    // Learned long ago: the hit refreshes it.
    learn(&mut fp, 10, A, 1, 1);
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    let refreshed = seen(&mut fp);
    assert!(refreshed > 0);
    // The program reads the coarse clock, the engine writes from the fine one: a time ahead
    // of the program's stays as it is (an older one is never written over a newer one).
    let ahead = u64::MAX / 2;
    fp.set_fdb(
        a_key,
        FdbEntry {
            port: 1,
            version: 1,
            last_seen_ns: ahead,
        },
    )
    .unwrap();
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert_eq!(seen(&mut fp), ahead);
}

/// A program whose daemon died (its lease ended; its filters stay, as classic `clsact` filters
/// outlive their process) claims no frame — `TC_ACT_UNSPEC`, as if it were not attached — and
/// is found as an orphan in its namespace with the interfaces it was on; removing its filters
/// leaves none. While the lease runs it forwards, and it is not an orphan.
#[test]
fn an_orphan_claims_nothing_and_is_found_with_its_interfaces() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fp.insert_flow(key(1, B, &[]), action(gen, (1, 0), fc, 2, 10, &[]))
        .unwrap();
    learn(&mut fp, 10, B, 2, 7);
    learn(&mut fp, 10, A, 1, 1);
    fp.attach("fa").unwrap();
    let access = frame(B, A, &[], 60);
    let upcall = fc; // any interface: only its index is recorded
    fp.lease(upcall).unwrap();
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc }, "leased: forwards");
    assert_eq!(orphans(None).unwrap(), vec![], "a live lease is no orphan");

    fp.end_lease().unwrap();
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.retval, u32::MAX, "TC_ACT_UNSPEC: as if not attached");
    assert_eq!(r.frame, access, "untouched");
    let own = fp.owner_map_id().unwrap();
    assert_eq!(
        orphans(Some(own)).unwrap(),
        vec![],
        "the caller's own program is never an orphan"
    );
    let found = orphans(None).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].owner_map, own);
    assert_eq!(found[0].upcall_ifindex, upcall);
    let mut ports = found[0].ports.clone();
    ports.sort_unstable();
    assert_eq!(ports, vec![fa.min(fc), fa.max(fc)]);
    assert_eq!(remove_filters("fa"), 1, "the orphan's filter on fa");
    assert_eq!(remove_filters("fa"), 0, "and no other");
}

/// The FDB entries' dense copies (decision 71): after a flow's first frame the program reads
/// the source's and destination's entries from their slots, and still sees every change the
/// loader writes: a destination that moves, a source that moves, an entry removed and its
/// slot reused for another, two sources taking turns on one flow; the source's last-seen
/// time it refreshes in the slot is the one the ager reads.
#[test]
fn slots_follow_every_fdb_change() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fp.insert_flow(key(1, B, &[]), action(gen, (1, 0), fc, 2, 10, &[]))
        .unwrap();
    learn(&mut fp, 10, A, 1, 1);
    learn(&mut fp, 10, B, 2, 7);
    let access = frame(B, A, &[], 60);
    let run = |fp: &mut FastPath, f: &[u8]| fp.test_run(f, fa, None).unwrap().verdict;
    let hit = Verdict::Hit { ifindex: fc };
    // The first frame finds the entries in the hash, the next ones in their slots.
    for _ in 0..3 {
        assert_eq!(run(&mut fp, &access), hit);
    }
    // The program's slots stay its own: the flow reads back as inserted.
    assert_eq!(
        fp.flows().unwrap(),
        vec![(key(1, B, &[]), action(gen, (1, 0), fc, 2, 10, &[]))]
    );
    let a_key = FdbKey {
        fid: 10,
        mac: A,
        ..FdbKey::default()
    };
    let b_key = FdbKey {
        fid: 10,
        mac: B,
        ..FdbKey::default()
    };
    assert_eq!(fp.fdb(&b_key).unwrap().map(|e| e.version), Some(7));
    // Seen: refreshed in the slot, read through the hash entry.
    assert!(fp.fdb(&a_key).unwrap().unwrap().last_seen_ns > 0);
    // The destination moves, and back; a new version.
    learn(&mut fp, 10, B, 3, 7);
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Dst));
    learn(&mut fp, 10, B, 2, 7);
    assert_eq!(run(&mut fp, &access), hit);
    learn(&mut fp, 10, B, 2, 8);
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Dst));
    learn(&mut fp, 10, B, 2, 7);
    assert_eq!(run(&mut fp, &access), hit);
    // The source moves.
    learn(&mut fp, 10, A, 4, 1);
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Src));
    learn(&mut fp, 10, A, 1, 1);
    assert_eq!(run(&mut fp, &access), hit);
    // The destination removed; its slot taken by another entry (the same MAC in another
    // FID, on the flow's port): the flow does not take that entry for its own.
    fp.remove_fdb(&b_key).unwrap();
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Dst));
    learn(&mut fp, 11, B, 2, 7);
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Dst));
    learn(&mut fp, 10, B, 2, 7);
    assert_eq!(run(&mut fp, &access), hit);
    assert_eq!(run(&mut fp, &access), hit);
    // The source removed; another source on the same port, then both in turns.
    fp.remove_fdb(&a_key).unwrap();
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Src));
    let c = [0x02, 0, 0, 0, 0, 0x0c];
    learn(&mut fp, 10, c, 1, 1);
    let from_c = frame(B, c, &[], 60);
    assert_eq!(run(&mut fp, &from_c), hit);
    learn(&mut fp, 10, A, 1, 1);
    for _ in 0..3 {
        assert_eq!(run(&mut fp, &access), hit);
        assert_eq!(run(&mut fp, &from_c), hit);
    }
    // C moves while A holds the flow's source slot, and the other way round.
    learn(&mut fp, 10, c, 5, 1);
    assert_eq!(run(&mut fp, &access), hit);
    assert_eq!(run(&mut fp, &from_c), Verdict::Miss(Miss::Src));
    assert_eq!(run(&mut fp, &from_c), Verdict::Miss(Miss::Src));
    learn(&mut fp, 10, A, 5, 1);
    assert_eq!(run(&mut fp, &access), Verdict::Miss(Miss::Src));
    // The map's entries read without their slots.
    let mut versions: Vec<u32> = fp
        .fdb_entries()
        .unwrap()
        .iter()
        .map(|(_, e)| e.version)
        .collect();
    versions.sort();
    assert_eq!(versions, vec![1, 1, 7, 7]);
}

/// A locked port's hop (`HOP_SRC`, decision 75): a hit needs the source's entry on the
/// ingress port (missing or on another port: up, `source`), and the program leaves its
/// last-seen time alone unless the port also learns (`HOP_LEARNING`).
#[test]
fn a_locked_hop_checks_its_source_and_refreshes_it_only_when_learning() {
    let Some((mut fp, fa, fc, _)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let flow = |fp: &mut FastPath, flags: u8| {
        let mut a = action(gen, (1, 0), fc, 2, 10, &[]);
        a.hops[0].flags = flags;
        fp.insert_flow(key(1, B, &[]), a).unwrap();
    };
    flow(&mut fp, HOP_SRC);
    learn(&mut fp, 10, B, 2, 7); // the version `action` expects
    let a_key = FdbKey {
        fid: 10,
        mac: A,
        ..FdbKey::default()
    };
    let seen = |fp: &mut FastPath| fp.fdb(&a_key).unwrap().map(|e| e.last_seen_ns);
    let access = frame(B, A, &[], 60);
    // No entry for the source: up.
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Src));
    // On another port: up.
    learn(&mut fp, 10, A, 3, 1);
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Src));
    // On the ingress port: forwarded, its last-seen time untouched (the port does not learn).
    learn(&mut fp, 10, A, 1, 1);
    for _ in 0..2 {
        let r = fp.test_run(&access, fa, None).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
        assert_eq!(r.frame, access);
    }
    assert_eq!(seen(&mut fp), Some(0));
    // A locked port that learns: refreshed.
    flow(&mut fp, HOP_SRC | HOP_LEARNING);
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
    assert!(seen(&mut fp).is_some_and(|t| t > 0));
    // The entry gone (`fdb del`): up again.
    fp.remove_fdb(&a_key).unwrap();
    let r = fp.test_run(&access, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Src));
}

/// The flow index (decision 79): a flow's frames are served from the program's per-CPU copy,
/// and a copy never outlives its flow — replaced, removed, stale by the generation rule or
/// evicted by the LRU hash, the next frame gets what the hash says.
/// Runs the test's thread on CPU 0 only: the flow index's copies are per CPU, and a run
/// elsewhere would not find this one's.
fn on_cpu0() {
    // SAFETY: sched_setaffinity(2) on this thread with a CPU set on the stack.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// [`setup`] on CPU 0, the program loaded with the flow index on, `fa` port 1 and `fc` port
/// 2: the program, its generation, and the ifindexes of `fa`, `fc`, `fb`.
fn indexed_on_cpu0() -> Option<(FastPath, u32, u32, u32, u32)> {
    let (first, fa, fc, fb) = setup()?;
    on_cpu0();
    let mut fp = FastPath::load_with_flow_index(true).expect("load");
    drop(first);
    fp.set_flow_index(true).unwrap();
    fp.set_port(fa, port(1, 0)).unwrap();
    fp.set_port(fc, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    Some((fp, gen, fa, fc, fb))
}

/// Decision 93: the index's tags are addressed by VLAN, four a VID. A VLAN with more flows in
/// use than that serves the rest through their second tags (placed by a hash of the key), not
/// from the hash: 16 destinations on one VLAN are all copied, and every frame still leaves by
/// its own flow (even destinations behind one port, odd behind another, so a frame served
/// from another flow's copy would leave the wrong way).
#[test]
fn a_vlan_with_many_flows_keeps_them_all_in_the_index() {
    let Some((mut fp, gen, fa, fc, fb)) = indexed_on_cpu0() else {
        return;
    };
    learn(&mut fp, 10, A, 1, 1);
    let dsts: Vec<[u8; 6]> = (0..16u8).map(|i| [0x02, 0x10, 0, 0, 0, i]).collect();
    let out = |i: usize| {
        if i.is_multiple_of(2) {
            (fc, 2)
        } else {
            (fb, 3)
        }
    };
    for (i, d) in dsts.iter().enumerate() {
        let (ifindex, p) = out(i);
        let tag = [(0x8100, 10)];
        fp.insert_flow(key(1, *d, &tag), action(gen, (1, 1), ifindex, p, 10, &tag))
            .unwrap();
        learn(&mut fp, 10, *d, p, 7);
    }
    for round in 0..3 {
        for (i, d) in dsts.iter().enumerate() {
            let f = frame(*d, A, &[(0x8100, 10)], 60);
            assert_eq!(
                fp.test_run(&f, fa, None).unwrap().verdict,
                Verdict::Hit { ifindex: out(i).0 },
                "destination {i}, round {round}"
            );
        }
    }
    let mut copied: Vec<[u8; 6]> = fp
        .flow_index()
        .unwrap()
        .into_iter()
        .filter(|(i, _)| *i < FLOW_IX_SIZE)
        .map(|(_, e)| e.key.dst)
        .collect();
    copied.sort_unstable();
    copied.dedup();
    assert_eq!(copied, dsts, "the flows served from copies on CPU 0");
}

#[test]
fn a_flow_index_copy_never_outlives_its_flow() {
    let Some((mut fp, gen, fa, fc, fb)) = indexed_on_cpu0() else {
        return;
    };
    // Loaded without it, the index is not allocated and cannot be turned on (decision 84).
    assert!(FastPath::load_with_flow_index(false)
        .expect("load")
        .set_flow_index(true)
        .is_err());
    let k = key(1, B, &[]);
    fp.insert_flow(k, action(gen, (1, 0), fc, 2, 10, &[]))
        .unwrap();
    learn(&mut fp, 10, A, 1, 1);
    learn(&mut fp, 10, B, 2, 7);
    let access = frame(B, A, &[], 60);
    let run = |fp: &mut FastPath| fp.test_run(&access, fa, None).unwrap().verdict;
    // The keys copied under the epoch now (once each: the runs may move between CPUs).
    let copies = |fp: &mut FastPath| -> Vec<FlowKey> {
        let mut v: Vec<FlowKey> = fp
            .flow_index()
            .unwrap()
            .into_iter()
            .map(|(_, e)| e.key)
            .collect();
        v.dedup();
        v
    };
    assert!(copies(&mut fp).is_empty());
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fc });
    // The first frame copied the flow; the next ones are served from the copy.
    assert_eq!(copies(&mut fp), vec![k]);
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fc });
    // Replaced (the destination moved to port 3 on fb): the copy is stale at once.
    let epoch = fp.writer().unwrap().flow_epoch();
    fp.insert_flow(k, action(gen, (1, 0), fb, 3, 10, &[]))
        .unwrap();
    learn(&mut fp, 10, B, 3, 7);
    assert!(fp.writer().unwrap().flow_epoch() > epoch);
    assert!(copies(&mut fp).is_empty());
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(copies(&mut fp), vec![k]);
    // Removed: the copy is still in the array, under the old epoch, and not used.
    fp.remove_flow(&k).unwrap();
    assert_eq!(run(&mut fp), Verdict::Miss(Miss::NoFlow));
    assert!(copies(&mut fp).is_empty());
    // The generation rule: a copy carries its flow's generation and is stale with it.
    fp.insert_flow(k, action(gen, (1, 0), fb, 3, 10, &[]))
        .unwrap();
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(copies(&mut fp), vec![k]);
    let gen2 = fp.bump_generation().unwrap();
    assert_eq!(run(&mut fp), Verdict::Miss(Miss::Stale));
    fp.insert_flow(k, action(gen2, (1, 0), fb, 3, 10, &[]))
        .unwrap();
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(copies(&mut fp), vec![k]);
    // Evicted: twice the hash's capacity of other flows, each used by a frame (as the
    // program uses it, so the LRU hash ages the flow served from its copy as the oldest),
    // push the flow out of the hash; the copy made before goes with it.
    let w = fp.writer().unwrap();
    for i in 0..2 * MAX_FLOWS {
        let b = i.to_be_bytes();
        let d = [0x02, 0x77, b[0], b[1], b[2], b[3]];
        w.insert_flow(&key(1, d, &[]), &action(gen2, (1, 0), fb, 3, 10, &[]))
            .unwrap();
        // No FDB entry for the destination: found, then sent up.
        let f = frame(d, A, &[], 60);
        assert_eq!(
            fp.test_run(&f, fa, None).unwrap().verdict,
            Verdict::Miss(Miss::Dst)
        );
    }
    assert_eq!(w.flow(&k).unwrap(), None, "the LRU hash kept the flow");
    assert_eq!(run(&mut fp), Verdict::Miss(Miss::NoFlow));
    // Installed again: copied again, under the epoch now.
    fp.insert_flow(k, action(gen2, (1, 0), fb, 3, 10, &[]))
        .unwrap();
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(run(&mut fp), Verdict::Hit { ifindex: fb });
    assert_eq!(copies(&mut fp), vec![k]);
}
