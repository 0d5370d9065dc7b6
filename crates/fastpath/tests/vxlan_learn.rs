//! vxl_: learned VXLAN remotes in the program (decision 83), through `BPF_PROG_TEST_RUN`
//! (root; skipped otherwise). A flow to a learned remote's tunnel (`VX_LEARNED`) leaves with
//! exactly the outer headers the pipeline's VTEP sends while `qb_vxl_learned` has the
//! destination behind that remote and its deadline is ahead; moved, aged or gone, the frame
//! misses (`destination`) untouched. A learning port's frame whose inner source is learned
//! behind the outer source is decapsulated as the port's VTEP reads it
//! (`outer::decapsulate`), its last-seen time refreshed; a source learned behind another
//! remote passes to the socket as `moved`, an unknown one as `source`. The same over an IPv6
//! underlay: an IPv6 entry (`VXL_IPV6`) for a `VX_IPV6` tunnel and an IPv6 outer source.

mod common;

use common::{
    action, eth, from_vtep, ifindex, ip, key, neighbour, own_netns, port, ports_l4, vtep_sends,
};
use qbridge_fastpath::*;
use qbridge_io::vxlan::outer::{decapsulate, encapsulate, Outer};
use qbridge_wire::vxlan::{source_port, Vni};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 83, 0, 1);
const REMOTE: Ipv4Addr = Ipv4Addr::new(10, 83, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(10, 83, 0, 3);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x83, 0, 0, 0, 0, 1);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x83, 0, 0, 0, 0, 2);
const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x83, 0, 0, 0, 0, 3);
const VNI: u32 = 8300;
/// Port indexes: the access port, the VXLAN port.
const P: u32 = 1;
const VX: u32 = 2;
const FID: u16 = 10;

/// A fresh namespace: port veth `fa`/`fb`, underlay `fc`/`fd` (10.83.0.1/24 and
/// 2001:db8:83::1/64 on `fc`, the remotes permanent neighbours); the program loaded.
fn setup() -> Option<(FastPath, u32, u32)> {
    if !own_netns() {
        return None;
    }
    ip(&["link", "add", "fa", "type", "veth", "peer", "name", "fb"]);
    ip(&["link", "add", "fc", "type", "veth", "peer", "name", "fd"]);
    for d in ["fa", "fb", "fc", "fd"] {
        ip(&["link", "set", d, "up"]);
    }
    ip(&["addr", "add", "10.83.0.1/24", "dev", "fc"]);
    for (r, m) in [
        ("10.83.0.2", "02:00:00:00:83:02"),
        ("10.83.0.3", "02:00:00:00:83:03"),
    ] {
        ip(&[
            "neigh",
            "replace",
            r,
            "lladdr",
            m,
            "nud",
            "permanent",
            "dev",
            "fc",
        ]);
    }
    ip(&["addr", "add", "2001:db8:83::1/64", "dev", "fc", "nodad"]);
    neighbour("2001:db8:83::2", "02:00:00:00:83:02", "fc");
    neighbour("2001:db8:83::3", "02:00:00:00:83:03", "fc");
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("fa"), ifindex("fc")))
}

fn vkey(mac: [u8; 6]) -> VxdSrcKey {
    VxdSrcKey {
        port: VX,
        vni: Vni::new(VNI).unwrap().word(),
        mac,
        pad: 0,
    }
}

/// CLOCK_MONOTONIC now (the program's clock, give or take a tick).
fn mono() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn learned(remote: Ipv4Addr, deadline_ns: u64) -> VxlRemote {
    VxlRemote {
        remote: remote.octets(),
        deadline_ns,
        ..VxlRemote::default()
    }
}

/// An IPv6 learned entry (`VXL_IPV6`).
fn learned6(remote: Ipv6Addr, deadline_ns: u64) -> VxlRemote {
    VxlRemote {
        flags: VXL_IPV6,
        remote6: remote.octets(),
        deadline_ns,
        ..VxlRemote::default()
    }
}

fn fdb(fp: &mut FastPath, entries: &[([u8; 6], u32)]) {
    for &(m, p) in entries {
        fp.set_fdb(
            FdbKey {
                bridge: 0,
                fid: FID,
                mac: m,
                pad: 0,
            },
            FdbEntry {
                port: p,
                version: 7,
                last_seen_ns: 0,
            },
        )
        .unwrap();
    }
}

fn ipv4(dst: [u8; 6], src: [u8; 6], l4: &[u8]) -> Vec<u8> {
    let mut f = eth(dst, src, 0x0800);
    let len = 20 + l4.len() as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0, 0, 64, 6, 0, 0, 192, 168, 1, 1, 192, 168, 1, 2]);
    f.extend_from_slice(l4);
    f
}

fn tunnel(ifindex: u32, remote: Ipv4Addr) -> Vxlan {
    let mut sport = [[0u8; 2]; VXLAN_SOCKETS];
    for (i, p) in sport.iter_mut().enumerate() {
        *p = (40_000 + 7 * i as u16).to_be_bytes();
    }
    Vxlan {
        local: LOCAL.octets(),
        remote: remote.octets(),
        vni: Vni::new(VNI).unwrap().word(),
        ifindex,
        sport,
        dstport: 4789u16.to_be_bytes(),
        ttl: 64,
        flags: VX_LEARNED,
        vxl_port: VX as u16,
        ..Vxlan::default()
    }
}

/// What the pipeline's VTEP sends for `inner` to `remote`, the UDP checksum 0 and the outer
/// Ethernet addresses left to `bpf_redirect_neigh` (0 in a test run).
fn expected(t: &Vxlan, remote: Ipv4Addr, inner: &[u8]) -> Vec<u8> {
    let sock = usize::from(source_port(inner)) % VXLAN_SOCKETS;
    let mut out = vec![0; 12];
    out.extend_from_slice(&[0x08, 0x00]);
    encapsulate(
        &Outer {
            src: IpAddr::V4(LOCAL),
            dst: IpAddr::V4(remote),
            sport: u16::from_be_bytes(t.sport[sock]),
            dport: 4789,
            hop_limit: 64,
            tos: 0,
            flow_label: 0,
            zero_csum: true,
        },
        Vni::new(VNI).unwrap(),
        inner,
        &mut out,
    )
    .unwrap();
    out
}

/// A flow from P to B through tunnel `t` (made in the program's table), and 16 frames of it
/// (TCP, one source port each: every send socket).
fn flow_to(fp: &mut FastPath, gen: u32, t: &Vxlan) -> Vec<Vec<u8>> {
    let idx = fp.writer().unwrap().tunnel(t).unwrap().unwrap();
    let mut a = action(gen, (P, 0), idx, VX, FID, &[]);
    a.flags = ACT_VXLAN;
    a.max_len = 1514;
    fp.insert_flow(key(P, B, &[]), a).unwrap();
    (0..16u16)
        .map(|p| ipv4(B, A, &ports_l4(true, 1000 + p, 80, 40)))
        .collect()
}

/// Each of `frames` run through the program as received on `fa`.
fn run_all(fp: &mut FastPath, fa: u32, frames: &[Vec<u8>]) -> Vec<TestRun> {
    frames
        .iter()
        .map(|f| fp.test_run(f, fa, None).unwrap())
        .collect()
}

/// Every frame a destination miss, gone up untouched.
fn all_miss_untouched(rs: &[TestRun], frames: &[Vec<u8>], why: &str) {
    for (r, f) in rs.iter().zip(frames) {
        assert_eq!(r.verdict, Verdict::Miss(Miss::Dst), "{why}");
        assert_eq!(&r.frame, f, "{why}: up untouched");
    }
}

#[test]
fn a_flow_to_a_learned_remote_is_used_while_the_table_has_it() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(P, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, &[(A, P), (B, VX)]);
    let vxl = fp.vxl_map().unwrap();
    let t = tunnel(fc, REMOTE);
    let frames = flow_to(&mut fp, gen, &t);
    let run = |fp: &mut FastPath| run_all(fp, fa, &frames);
    let all_miss = |rs: Vec<TestRun>, why: &str| all_miss_untouched(&rs, &frames, why);

    // Not (yet) in the map: the pipeline's.
    all_miss(run(&mut fp), "no entry");
    // Learned behind the tunnel's remote, unaged: the socket's bytes.
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(B), &learned(REMOTE, far)).unwrap();
    for (r, f) in run(&mut fp).iter().zip(&frames) {
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
        assert_eq!(r.frame, expected(&t, REMOTE, f), "{f:02x?}");
    }
    // Moved to another VTEP: the old tunnel's flow is not used.
    vxl.set(&vkey(B), &learned(OTHER, far)).unwrap();
    all_miss(run(&mut fp), "moved");
    // Aged (the deadline passed, by more than the coarse clock's tick): the pipeline floods.
    vxl.set(&vkey(B), &learned(REMOTE, mono() - 50_000_000))
        .unwrap();
    all_miss(run(&mut fp), "aged");
    // Back, then deleted or flushed (the entry removed).
    vxl.set(&vkey(B), &learned(REMOTE, far)).unwrap();
    assert_eq!(
        fp.test_run(&frames[0], fa, None).unwrap().verdict,
        Verdict::Hit { ifindex: fc }
    );
    vxl.remove(&vkey(B)).unwrap();
    all_miss(run(&mut fp), "removed");
    // Another VNI's or another port's entry is not this one's.
    let mut k = vkey(B);
    k.port = VX + 1;
    vxl.set(&k, &learned(REMOTE, far)).unwrap();
    all_miss(run(&mut fp), "another port's entry");
}

fn outer(from: Ipv4Addr, inner: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0x83, 1, 0x02, 0, 0, 0, 0x83, 2, 0x08, 0x00];
    encapsulate(
        &Outer {
            src: IpAddr::V4(from),
            dst: IpAddr::V4(LOCAL),
            sport: 50_000,
            dport: 4789,
            hop_limit: 64,
            tos: 0,
            flow_label: 0,
            zero_csum: true,
        },
        Vni::new(VNI).unwrap(),
        inner,
        &mut f,
    )
    .unwrap();
    f
}

#[test]
fn a_learned_source_behind_its_remote_is_decapsulated_and_refreshed() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    // A (behind the remote) learns on the VXLAN port, B is on the access port `fa`.
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, &[(A, VX), (B, P)]);
    let a = action(gen, (VX, 0), fa, P, FID, &[]);
    fp.insert_flow(key(VX, B, &[]), a).unwrap();
    let vxl = fp.vxl_map().unwrap();
    for remote in [REMOTE, OTHER] {
        fp.set_vxd_tunnel(
            VxdKey {
                local: LOCAL.octets(),
                remote: remote.octets(),
                vni: Vni::new(VNI).unwrap().word(),
                dstport: 4789u16.to_be_bytes(),
                pad: 0,
            },
            Vxd {
                port: VX,
                flags: VXD_LEARNING,
                ..Vxd::default()
            },
        )
        .unwrap();
    }
    let inner = ipv4(B, A, &ports_l4(true, 1000, 80, 40));
    let f = outer(REMOTE, &inner);
    let pass = |fp: &mut FastPath, f: &[u8], why: VxdVerdict| {
        let r = fp.test_run_decap(f, fc, 1).unwrap();
        assert_eq!(decap_pass_reason(&r), Some(why));
        assert_eq!(r.frame, f, "untouched");
    };
    // Unknown (not learned, or beyond the port's limit): the socket's.
    pass(&mut fp, &f, VxdVerdict::Src);
    // Learned behind this remote: the pipeline's inner frame, the last-seen time refreshed.
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(A), &learned(REMOTE, far)).unwrap();
    let before = mono();
    let r = fp.test_run_decap(&f, fc, 1).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
    assert_eq!(r.frame, decapsulate(&f[14..], false).unwrap().inner);
    assert_eq!(r.frame, inner);
    let e = vxl.get(&vkey(A)).unwrap().unwrap();
    // The coarse clock may be a tick behind.
    assert!(e.last_seen_ns + 20_000_000 >= before, "refreshed: {e:?}");
    assert_eq!((e.remote, e.deadline_ns), (REMOTE.octets(), far));
    // From another remote: a move, which the pipeline learns.
    pass(&mut fp, &outer(OTHER, &inner), VxdVerdict::Moved);
    // Gone from the table: up again.
    vxl.remove(&vkey(A)).unwrap();
    pass(&mut fp, &f, VxdVerdict::Src);
    let stats = fp.vxd_stats().unwrap();
    assert_eq!(stats[VxdVerdict::Hit as usize].1, 1);
    assert_eq!(stats[VxdVerdict::Moved as usize].1, 1);
    assert_eq!(stats[VxdVerdict::Src as usize].1, 2);
}

/// The same over an IPv6 underlay: a flow to a learned IPv6 remote's tunnel leaves as the
/// pipeline's VTEP sends it while an IPv6 entry names that remote, unaged; moved (to another
/// IPv6 remote, or an IPv4 entry with the same bytes), aged or gone, it misses untouched.
#[test]
fn a_flow_to_a_learned_ipv6_remote_is_used_while_the_table_has_it() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    fp.set_port(fa, port(P, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, &[(A, P), (B, VX)]);
    let vxl = fp.vxl_map().unwrap();
    let t = Vxlan {
        local: [0; 4],
        remote: [0; 4],
        flags: VX_LEARNED | VX_IPV6,
        local6: LOCAL6.octets(),
        remote6: REMOTE6.octets(),
        ..tunnel(fc, REMOTE)
    };
    let frames = flow_to(&mut fp, gen, &t);
    let run = |fp: &mut FastPath| run_all(fp, fa, &frames);
    let all_miss = |rs: Vec<TestRun>, why: &str| all_miss_untouched(&rs, &frames, why);

    all_miss(run(&mut fp), "no entry");
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(B), &learned6(REMOTE6, far)).unwrap();
    for (r, f) in run(&mut fp).iter().zip(&frames) {
        assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
        assert_eq!(r.frame, vtep_sends(&t, f, 0), "{f:02x?}");
    }
    vxl.set(&vkey(B), &learned6(OTHER6, far)).unwrap();
    all_miss(run(&mut fp), "moved");
    // An IPv4 entry is not an IPv6 tunnel's, whatever its bytes.
    let mut v4 = learned(REMOTE, far);
    v4.remote6 = REMOTE6.octets();
    vxl.set(&vkey(B), &v4).unwrap();
    all_miss(run(&mut fp), "an IPv4 entry");
    vxl.set(&vkey(B), &learned6(REMOTE6, mono() - 50_000_000))
        .unwrap();
    all_miss(run(&mut fp), "aged");
    vxl.set(&vkey(B), &learned6(REMOTE6, far)).unwrap();
    assert_eq!(
        fp.test_run(&frames[0], fa, None).unwrap().verdict,
        Verdict::Hit { ifindex: fc }
    );
    vxl.remove(&vkey(B)).unwrap();
    all_miss(run(&mut fp), "removed");
}

/// The same over an IPv6 outer (qb_vxd6_tunnels): a source learned behind the outer IPv6
/// source is decapsulated and refreshed; from another IPv6 remote it is a move; an IPv4
/// entry is not an IPv6 outer's (a move too); unknown, `source`.
#[test]
fn a_learned_source_behind_its_ipv6_remote_is_decapsulated_and_refreshed() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, &[(A, VX), (B, P)]);
    let a = action(gen, (VX, 0), fa, P, FID, &[]);
    fp.insert_flow(key(VX, B, &[]), a).unwrap();
    let vxl = fp.vxl_map().unwrap();
    for remote in [REMOTE6, OTHER6] {
        fp.set_vxd6_tunnel(
            Vxd6Key {
                local: LOCAL6.octets(),
                remote: remote.octets(),
                vni: Vni::new(VNI).unwrap().word(),
                dstport: 4789u16.to_be_bytes(),
                pad: 0,
            },
            Vxd {
                port: VX,
                // A test run's frame has no checksum state (CHECKSUM_NONE): a zero UDP
                // checksum, taken, lets the program judge the rest.
                flags: VXD_LEARNING | VXD_ZERO6RX,
                ..Vxd::default()
            },
        )
        .unwrap();
    }
    let inner = ipv4(B, A, &ports_l4(true, 1000, 80, 40));
    let macs = ([0x02, 0, 0, 0, 0x83, 1], [0x02, 0, 0, 0, 0x83, 2]);
    let from = |r: Ipv6Addr| from_vtep(macs, IpAddr::V6(r), IpAddr::V6(LOCAL6), VNI, &inner, true);
    let f = from(REMOTE6);
    let pass = |fp: &mut FastPath, f: &[u8], why: VxdVerdict| {
        let r = fp.test_run_decap(f, fc, 1).unwrap();
        assert_eq!(decap_pass_reason(&r), Some(why));
        assert_eq!(r.frame, f, "untouched");
    };
    pass(&mut fp, &f, VxdVerdict::Src);
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(A), &learned6(REMOTE6, far)).unwrap();
    let before = mono();
    let r = fp.test_run_decap(&f, fc, 1).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
    assert_eq!(r.frame, inner);
    let e = vxl.get(&vkey(A)).unwrap().unwrap();
    assert!(e.last_seen_ns + 20_000_000 >= before, "refreshed: {e:?}");
    assert_eq!(
        (e.remote6, e.flags, e.deadline_ns),
        (REMOTE6.octets(), VXL_IPV6, far)
    );
    pass(&mut fp, &from(OTHER6), VxdVerdict::Moved);
    vxl.set(&vkey(A), &learned(REMOTE, far)).unwrap();
    pass(&mut fp, &f, VxdVerdict::Moved);
    vxl.remove(&vkey(A)).unwrap();
    pass(&mut fp, &f, VxdVerdict::Src);
    let stats = fp.vxd_stats().unwrap();
    assert_eq!(stats[VxdVerdict::Hit as usize].1, 1);
    assert_eq!(stats[VxdVerdict::Moved as usize].1, 2);
    assert_eq!(stats[VxdVerdict::Src as usize].1, 2);
}

/// vxl_: what the learned entry's check costs per frame (`BPF_PROG_TEST_RUN`; `cargo test -p
/// qbridge-fastpath --test vxlan_learn cost -- --ignored --nocapture`): a flow to a learned
/// remote against one to a static remote, a learned source's decapsulation against a static
/// one's, interleaved in rounds of 1 000 single runs (the machine is shared), medians.
#[test]
#[ignore]
fn cost_per_frame() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    const C: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
    const A2: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa2];
    fp.set_port(fa, port(P, 0)).unwrap();
    fdb(&mut fp, &[(A, P), (B, VX), (C, VX)]);
    let w = fp.writer().unwrap();
    let vxl = fp.vxl_map().unwrap();
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(B), &learned(REMOTE, far)).unwrap();
    let learned_t = tunnel(fc, REMOTE);
    let static_t = Vxlan {
        flags: 0,
        vxl_port: 0,
        ..learned_t
    };
    let enc = [
        (
            "encap, learned remote",
            ipv4(B, A, &ports_l4(true, 1000, 80, 1400)),
        ),
        (
            "encap, static remote",
            ipv4(C, A, &ports_l4(true, 1000, 80, 1400)),
        ),
    ];
    // Decapsulation: B behind the access port; A static, A2 learned behind the remote.
    let mut fp2 = fp;
    fdb(&mut fp2, &[(B, P), (A, VX), (A2, VX)]);
    let gen = fp2.bump_generation().unwrap();
    fp2.insert_flow(key(VX, B, &[]), action(gen, (VX, 0), fa, P, FID, &[]))
        .unwrap();
    fp2.set_vxd_tunnel(
        VxdKey {
            local: LOCAL.octets(),
            remote: REMOTE.octets(),
            vni: Vni::new(VNI).unwrap().word(),
            dstport: 4789u16.to_be_bytes(),
            pad: 0,
        },
        Vxd {
            port: VX,
            flags: VXD_LEARNING,
            ..Vxd::default()
        },
    )
    .unwrap();
    fp2.set_vxd_src(vkey(A)).unwrap();
    vxl.set(&vkey(A2), &learned(REMOTE, far)).unwrap();
    let dec = [
        (
            "decap, learned source",
            outer(REMOTE, &ipv4(B, A2, &ports_l4(true, 1000, 80, 1400))),
        ),
        (
            "decap, static source",
            outer(REMOTE, &ipv4(B, A, &ports_l4(true, 1000, 80, 1400))),
        ),
    ];
    let mut ns: Vec<Vec<u32>> = vec![Vec::new(); 4];
    for (dst, t) in [(B, learned_t), (C, static_t)] {
        let idx = w.tunnel(&t).unwrap().unwrap();
        let mut a = action(gen, (P, 0), idx, VX, FID, &[]);
        a.flags = ACT_VXLAN;
        a.max_len = 1514;
        fp2.insert_flow(key(P, dst, &[]), a).unwrap();
    }
    fdb(&mut fp2, &[(A, P), (B, VX), (C, VX)]);
    for _round in 0..20 {
        for (i, (_, f)) in enc.iter().enumerate() {
            for _ in 0..1000 {
                let r = fp2.test_run(f, fa, None).unwrap();
                assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
                ns[i].push(r.ns_per_run);
            }
        }
    }
    fdb(&mut fp2, &[(B, P), (A, VX), (A2, VX)]);
    for _round in 0..20 {
        for (i, (_, f)) in dec.iter().enumerate() {
            for _ in 0..1000 {
                let r = fp2.test_run_decap(f, fc, 1).unwrap();
                assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
                ns[2 + i].push(r.ns_per_run);
            }
        }
    }
    for (i, what) in enc.iter().chain(dec.iter()).map(|(w, _)| w).enumerate() {
        let v = &mut ns[i];
        v.sort_unstable();
        println!(
            "{what}, 1454-byte inner frame: median {} ns/run, p10 {} p90 {} (20 000 runs of 1)",
            v[v.len() / 2],
            v[v.len() / 10],
            v[v.len() * 9 / 10]
        );
    }
}

/// vxl_ over IPv6: what the IPv6 entry's check costs (`cargo test -p qbridge-fastpath --test
/// vxlan_learn cost6 -- --ignored --nocapture`): a flow to a learned IPv6 remote against one
/// to a static IPv6 remote (single frames), a learned source under an IPv6 outer against a
/// static one, interleaved in rounds of 1 000 single runs, medians.
#[test]
#[ignore]
fn cost6_per_frame() {
    let Some((mut fp, fa, fc)) = setup() else {
        return;
    };
    const C: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
    const A2: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa2];
    fp.set_port(fa, port(P, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    let vxl = fp.vxl_map().unwrap();
    let far = mono() + 300_000_000_000;
    vxl.set(&vkey(B), &learned6(REMOTE6, far)).unwrap();
    vxl.set(&vkey(A2), &learned6(REMOTE6, far)).unwrap();
    let learned_t = Vxlan {
        local: [0; 4],
        remote: [0; 4],
        flags: VX_LEARNED | VX_IPV6,
        local6: LOCAL6.octets(),
        remote6: REMOTE6.octets(),
        ..tunnel(fc, REMOTE)
    };
    let static_t = Vxlan {
        flags: VX_IPV6,
        vxl_port: 0,
        ..learned_t
    };
    for (dst, t) in [(B, learned_t), (C, static_t)] {
        let idx = w.tunnel(&t).unwrap().unwrap();
        let mut a = action(gen, (P, 0), idx, VX, FID, &[]);
        a.flags = ACT_VXLAN;
        a.max_len = 1514;
        fp.insert_flow(key(P, dst, &[]), a).unwrap();
    }
    fp.insert_flow(key(VX, B, &[]), action(gen, (VX, 0), fa, P, FID, &[]))
        .unwrap();
    fp.set_vxd6_tunnel(
        Vxd6Key {
            local: LOCAL6.octets(),
            remote: REMOTE6.octets(),
            vni: Vni::new(VNI).unwrap().word(),
            dstport: 4789u16.to_be_bytes(),
            pad: 0,
        },
        Vxd {
            port: VX,
            flags: VXD_LEARNING | VXD_ZERO6RX,
            ..Vxd::default()
        },
    )
    .unwrap();
    fp.set_vxd_src(vkey(A)).unwrap();
    let macs = ([0x02, 0, 0, 0, 0x83, 1], [0x02, 0, 0, 0, 0x83, 2]);
    let from = |src: [u8; 6]| {
        let inner = ipv4(B, src, &ports_l4(true, 1000, 80, 1300));
        from_vtep(
            macs,
            IpAddr::V6(REMOTE6),
            IpAddr::V6(LOCAL6),
            VNI,
            &inner,
            true,
        )
    };
    let enc = [
        (
            "encap6, learned remote",
            ipv4(B, A, &ports_l4(true, 1000, 80, 1300)),
        ),
        (
            "encap6, static remote",
            ipv4(C, A, &ports_l4(true, 1000, 80, 1300)),
        ),
    ];
    let dec = [
        ("decap6, learned source", from(A2)),
        ("decap6, static source", from(A)),
    ];
    let mut ns: Vec<Vec<u32>> = vec![Vec::new(); 4];
    for _round in 0..20 {
        fdb(&mut fp, &[(A, P), (B, VX), (C, VX)]);
        for (i, (_, f)) in enc.iter().enumerate() {
            for _ in 0..1000 {
                let r = fp.test_run(f, fa, None).unwrap();
                assert_eq!(r.verdict, Verdict::Hit { ifindex: fc });
                ns[i].push(r.ns_per_run);
            }
        }
        fdb(&mut fp, &[(B, P), (A, VX), (A2, VX)]);
        for (i, (_, f)) in dec.iter().enumerate() {
            for _ in 0..1000 {
                let r = fp.test_run_decap(f, fc, 1).unwrap();
                assert_eq!(r.verdict, Verdict::Hit { ifindex: fa });
                ns[2 + i].push(r.ns_per_run);
            }
        }
    }
    for (i, what) in enc.iter().chain(dec.iter()).map(|(w, _)| w).enumerate() {
        let v = &mut ns[i];
        v.sort_unstable();
        println!(
            "{what}, 1354-byte inner frame (the underlay's MTU 1500): median {} ns/run, p10 {} p90 {} (20 000 runs of 1)",
            v[v.len() / 2],
            v[v.len() / 10],
            v[v.len() * 9 / 10]
        );
    }
}
