//! VXLAN decapsulation in the program (decision 77), through `BPF_PROG_TEST_RUN` (root;
//! skipped otherwise): a VXLAN frame from a known remote VTEP, to the port's address, port and
//! VNI, of a flow the pipeline made for the VXLAN port, leaves as the pipeline forwards the
//! inner frame the port's VTEP reads from it (`qbridge_io::vxlan::outer::decapsulate`): the
//! inner bytes, with the egress tags; the ports' counters add up. Everything else — an unknown
//! remote, VNI or port, a checksum the kernel would compute (a test run's skb is
//! CHECKSUM_NONE), a bad IP checksum, reserved VXLAN bits, inner group or non-IP frames, no
//! flow, a stale one, a source not learned on the port or not static on a learning port —
//! passes on untouched to the port's socket, with its reason counted.
//! Over an IPv6 outer (decision 82, `qb_vxd6_tunnels`) the same, with IPv6's own refusals (an
//! extension header, a zero UDP checksum on a port without `udp6zerocsumrx`).

mod common;

use common::{action, eth, ifindex, ip, key, own_netns, ports_l4};
use qbridge_fastpath::*;
use qbridge_io::vxlan::outer::{decapsulate, encapsulate, Outer};
use qbridge_wire::vxlan::Vni;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const REMOTE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 2);
const UNDERLAY_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 1];
const REMOTE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 2];
/// The VXLAN port's index, the output port's.
const VX: u32 = 3;
const OUT: u32 = 4;
const FID: u16 = 10;

/// A fresh namespace: underlay veth `ua`/`ub`, output veth `oa`/`ob`; the program loaded.
fn setup() -> Option<(FastPath, u32, u32)> {
    if !own_netns() {
        return None;
    }
    ip(&["link", "add", "ua", "type", "veth", "peer", "name", "ub"]);
    ip(&["link", "add", "oa", "type", "veth", "peer", "name", "ob"]);
    for d in ["ua", "ub", "oa", "ob"] {
        ip(&["link", "set", d, "up"]);
    }
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("ua"), ifindex("oa")))
}

fn tunnel_key(remote: Ipv4Addr, vni: u32) -> VxdKey {
    VxdKey {
        local: LOCAL.octets(),
        remote: remote.octets(),
        vni: Vni::new(vni).unwrap().word(),
        dstport: 4789u16.to_be_bytes(),
        pad: 0,
    }
}

/// The frame the remote VTEP sends for `inner`: outer Ethernet to the underlay, IPv4/UDP/VXLAN
/// as the userspace VTEP builds it (`zero_csum`: no UDP checksum).
fn outer(from: Ipv4Addr, vni: u32, inner: &[u8], zero_csum: bool) -> Vec<u8> {
    outer_ip(IpAddr::V4(from), IpAddr::V4(LOCAL), vni, inner, zero_csum)
}

/// [`outer`] over IPv6 (decision 82), to [`LOCAL6`].
fn outer6(from: Ipv6Addr, vni: u32, inner: &[u8], zero_csum: bool) -> Vec<u8> {
    outer_ip(IpAddr::V6(from), IpAddr::V6(LOCAL6), vni, inner, zero_csum)
}

fn outer_ip(from: IpAddr, to: IpAddr, vni: u32, inner: &[u8], zero_csum: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&UNDERLAY_MAC);
    f.extend_from_slice(&REMOTE_MAC);
    f.extend_from_slice(if from.is_ipv6() {
        &[0x86, 0xdd]
    } else {
        &[0x08, 0x00]
    });
    encapsulate(
        &Outer {
            src: from,
            dst: to,
            sport: 50_000,
            dport: 4789,
            hop_limit: 64,
            tos: 0,
            flow_label: 0,
            zero_csum,
        },
        Vni::new(vni).unwrap(),
        inner,
        &mut f,
    )
    .unwrap();
    f
}

/// The inner frame the port's VTEP reads from `frame` (the pipeline's input).
fn pipeline_inner(frame: &[u8]) -> Vec<u8> {
    decapsulate(&frame[14..], false).unwrap().inner.to_vec()
}

fn ipv4(src: [u8; 6], proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(B, src, 0x0800);
    let len = 20 + l4.len() as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 1]);
    f.extend_from_slice(&frag.to_be_bytes());
    f.extend_from_slice(&[64, proto, 0, 0, 192, 168, 1, 1, 192, 168, 1, 2]);
    f.extend_from_slice(l4);
    f.resize(f.len().max(60), 0);
    f
}

fn ipv6_tcp() -> Vec<u8> {
    let mut f = eth(B, A, 0x86dd);
    let l4 = ports_l4(true, 333, 22, 30);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[6, 64]);
    f.extend_from_slice(&[0xfd; 16]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(&l4);
    f
}

/// A learns on the VXLAN port, B is on the output port (version 7, as `common::action`).
fn fdb(fp: &mut FastPath) {
    for (m, p) in [(A, VX), (B, OUT)] {
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

fn install(fp: &mut FastPath, gen: u32, out: u32, tag: Option<u16>, push: &[(u16, u16)]) {
    let tags: Vec<(u16, u16)> = tag.map(|v| (0x8100, v)).into_iter().collect();
    for ethertype in [0x0800u16, 0x86dd] {
        let a = action(gen, (VX, tags.len()), out, OUT, FID, push);
        let mut k = key(VX, B, &tags);
        k.ethertype_be = ethertype.to_be();
        fp.insert_flow(k, a).unwrap();
    }
}

fn inner_frames() -> Vec<Vec<u8>> {
    vec![
        ipv4(A, 6, 0, &ports_l4(true, 1000, 80, 40)),
        ipv4(A, 17, 0, &ports_l4(false, 5000, 2000, 300)),
        ipv4(A, 1, 0, &[8, 0, 0, 0, 0, 1, 0, 1, 9, 9]),
        ipv4(A, 6, 0x2000, &ports_l4(true, 1, 2, 40)),
        ipv6_tcp(),
    ]
}

#[test]
fn a_known_tunnels_frame_of_a_flow_leaves_as_the_pipeline_forwards_its_inner_frame() {
    let Some((mut fp, ua, oa)) = setup() else {
        return;
    };
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp);
    install(&mut fp, gen, oa, None, &[]);
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 5000),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();

    let mut bytes = 0;
    let frames = inner_frames();
    for inner in &frames {
        let f = outer(REMOTE, 5000, inner, true);
        let want = pipeline_inner(&f);
        assert_eq!(&want, inner);
        let r = fp.test_run_decap(&f, ua, 1).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: oa }, "{inner:02x?}");
        assert_eq!(r.retval, 7, "TC_ACT_REDIRECT");
        assert_eq!(r.frame, want, "the pipeline's inner frame");
        bytes += want.len() as u64;
    }
    let n = frames.len() as u64;
    let rx = fp.port_stats(VX).unwrap();
    let tx = fp.port_stats(OUT).unwrap();
    assert_eq!(
        (rx.rx_frames, rx.rx_bytes),
        (n, bytes),
        "rx on the VXLAN port"
    );
    assert_eq!((tx.tx_frames, tx.tx_bytes), (n, bytes), "tx on the output");
    let v = fp.vlan_stats(u32::from(FID)).unwrap();
    assert_eq!((v.rx_frames, v.tx_frames), (n, n));
    let stats = fp.vxd_stats().unwrap();
    assert_eq!(stats[VxdVerdict::Hit as usize], (VxdVerdict::Hit, n));

    // Tagged on the way out (a trunk): the egress tag, accelerated as it leaves.
    let gen = fp.bump_generation().unwrap();
    install(&mut fp, gen, oa, None, &[(0x8100, 20)]);
    let inner = &frames[0];
    let r = fp
        .test_run_decap(&outer(REMOTE, 5000, inner, true), ua, 1)
        .unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: oa });
    let mut want = inner.clone();
    want.splice(12..12, [0x81, 0x00, 0x00, 20]);
    assert_eq!(r.frame, want);
}

#[test]
fn an_external_ports_vni_enters_tagged_with_its_vlan() {
    let Some((mut fp, ua, oa)) = setup() else {
        return;
    };
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp);
    // VNI 7010 is VLAN 10 on the external port: the flow's key has the tag; to an access port
    // the frame leaves untagged, to a trunk with it.
    install(&mut fp, gen, oa, Some(10), &[]);
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 7010),
        Vxd {
            port: VX,
            tag_tpid: 0x8100u16.to_be_bytes(),
            tag_tci: 10u16.to_be_bytes(),
            flags: 0,
        },
    )
    .unwrap();
    let inner = ipv4(A, 6, 0, &ports_l4(true, 1000, 80, 40));
    let f = outer(REMOTE, 7010, &inner, true);
    let r = fp.test_run_decap(&f, ua, 1).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: oa });
    assert_eq!(r.frame, inner);
    let rx = fp.port_stats(VX).unwrap();
    assert_eq!(
        rx.rx_bytes,
        inner.len() as u64 + 4,
        "counted with the VNI's tag"
    );

    install(&mut fp, gen, oa, Some(10), &[(0x8100, 10)]);
    let r = fp.test_run_decap(&f, ua, 1).unwrap();
    let mut want = inner.clone();
    want.splice(12..12, [0x81, 0x00, 0x00, 10]);
    assert_eq!(r.frame, want);
    // Another VNI of the port that the program was not told of: to the socket.
    let r = fp
        .test_run_decap(&outer(REMOTE, 7011, &inner, true), ua, 1)
        .unwrap();
    assert_eq!(decap_pass_reason(&r), Some(VxdVerdict::Other));
}

#[test]
fn every_other_frame_passes_to_the_socket_untouched() {
    let Some((mut fp, ua, oa)) = setup() else {
        return;
    };
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp);
    install(&mut fp, gen, oa, None, &[]);
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 5000),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();
    let inner = ipv4(A, 6, 0, &ports_l4(true, 1000, 80, 40));
    let good = outer(REMOTE, 5000, &inner, true);
    let check = |fp: &mut FastPath, f: &[u8], why: VxdVerdict| {
        let r = fp.test_run_decap(f, ua, 1).unwrap();
        assert_eq!(decap_pass_reason(&r), Some(why), "{f:02x?}");
        assert_eq!(r.retval, u32::MAX, "TC_ACT_UNSPEC");
        assert_eq!(r.frame, f, "untouched");
    };
    check(
        &mut fp,
        &outer(Ipv4Addr::new(10, 77, 0, 9), 5000, &inner, true),
        VxdVerdict::Other,
    );
    check(
        &mut fp,
        &outer(REMOTE, 5001, &inner, true),
        VxdVerdict::Other,
    );
    let mut f = good.clone();
    f[36..38].copy_from_slice(&4790u16.to_be_bytes());
    check(&mut fp, &f, VxdVerdict::Other);
    // A UDP checksum (valid): a test run's skb is CHECKSUM_NONE, which the kernel computes.
    check(
        &mut fp,
        &outer(REMOTE, 5000, &inner, false),
        VxdVerdict::Csum,
    );
    let mut f = good.clone();
    f[24] ^= 1; // the IP checksum
    check(&mut fp, &f, VxdVerdict::Header);
    let mut f = good.clone();
    f[43] = 1; // a reserved VXLAN bit
    check(&mut fp, &f, VxdVerdict::Header);
    let mut f = good.clone();
    f[20] = 0x20; // more fragments
    f[24..26].copy_from_slice(&[0, 0]);
    let c = !ip_sum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    check(&mut fp, &f, VxdVerdict::Header);
    // Inner: a flood, ARP, a group source.
    let mut flood = inner.clone();
    flood[..6].copy_from_slice(&[0xff; 6]);
    check(
        &mut fp,
        &outer(REMOTE, 5000, &flood, true),
        VxdVerdict::Inner,
    );
    let mut arp = eth(B, A, 0x0806);
    arp.resize(60, 0);
    check(&mut fp, &outer(REMOTE, 5000, &arp, true), VxdVerdict::Inner);
    let mut bad_src = inner.clone();
    bad_src[6] = 1;
    check(
        &mut fp,
        &outer(REMOTE, 5000, &bad_src, true),
        VxdVerdict::Inner,
    );
    // No flow (another destination), a source not learned on the port.
    let mut other = inner.clone();
    other[5] = 0x0c;
    check(
        &mut fp,
        &outer(REMOTE, 5000, &other, true),
        VxdVerdict::NoFlow,
    );
    let stranger = ipv4([0x02, 0, 0, 0, 0, 0x0e], 6, 0, &ports_l4(true, 1, 2, 40));
    check(
        &mut fp,
        &outer(REMOTE, 5000, &stranger, true),
        VxdVerdict::Src,
    );
    // A learning port: only sources of static entries.
    let learning = Vxd {
        port: VX,
        flags: VXD_LEARNING,
        ..Vxd::default()
    };
    fp.set_vxd_tunnel(tunnel_key(REMOTE, 5000), learning)
        .unwrap();
    check(&mut fp, &good, VxdVerdict::Src);
    let sk = VxdSrcKey {
        port: VX,
        vni: Vni::new(5000).unwrap().word(),
        mac: A,
        pad: 0,
    };
    fp.set_vxd_src(sk).unwrap();
    let r = fp.test_run_decap(&good, ua, 1).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: oa });
    fp.remove_vxd_src(&sk).unwrap();
    check(&mut fp, &good, VxdVerdict::Src);
    // Traced: the pipeline sees it all.
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 5000),
        Vxd {
            port: VX,
            flags: VXD_TRACE,
            ..Vxd::default()
        },
    )
    .unwrap();
    check(&mut fp, &good, VxdVerdict::Traced);
    // Stale: the configuration changed since the flow was made.
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 5000),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();
    fp.bump_generation().unwrap();
    check(&mut fp, &good, VxdVerdict::Stale);
    // The tunnel gone (port deleted): to the socket.
    fp.remove_vxd_tunnel(&tunnel_key(REMOTE, 5000)).unwrap();
    check(&mut fp, &good, VxdVerdict::Other);
}

fn tunnel_key6(remote: Ipv6Addr, vni: u32) -> Vxd6Key {
    Vxd6Key {
        local: LOCAL6.octets(),
        remote: remote.octets(),
        vni: Vni::new(vni).unwrap().word(),
        dstport: 4789u16.to_be_bytes(),
        pad: 0,
    }
}

/// An IPv6-underlay port that accepts zero UDP checksums (`udp6zerocsumrx`), VNI 5000 from
/// [`REMOTE6`], with the flows of [`install`]: a test run's skb is CHECKSUM_NONE, so a
/// non-zero checksum is one the program sums itself (decision 87).
fn setup6() -> Option<(FastPath, u32, u32)> {
    let (mut fp, ua, oa) = setup()?;
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp);
    install(&mut fp, gen, oa, None, &[]);
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            flags: VXD_ZERO6RX,
            ..Vxd::default()
        },
    )
    .unwrap();
    Some((fp, ua, oa))
}

/// Decision 82: over an IPv6 outer, the program's output is the inner frame the port's own
/// receive reads (`decapsulate`, zero checksums accepted as the port does), with the flow's
/// egress tags, for TCP, UDP, ICMP, a fragment and IPv6 inner frames; the counters add up as
/// over IPv4. Decision 87: with their UDP checksums computed too (CHECKSUM_NONE in a test
/// run, summed by the program), an odd length among them.
#[test]
fn an_ipv6_tunnels_frame_leaves_as_the_pipeline_forwards_its_inner_frame() {
    let Some((mut fp, ua, oa)) = setup6() else {
        return;
    };
    let mut bytes = 0;
    let frames = inner_frames();
    let mut odd = frames.clone();
    odd.push(ipv4(A, 17, 0, &ports_l4(false, 5000, 2000, 301)));
    assert_eq!(odd[odd.len() - 1].len() % 2, 1);
    for (zero_csum, list) in [(true, &frames), (false, &odd)] {
        for inner in list {
            let f = outer6(REMOTE6, 5000, inner, zero_csum);
            let want = decapsulate(&f[14..], zero_csum).unwrap().inner.to_vec();
            assert_eq!(&want, inner);
            let r = fp.test_run_decap(&f, ua, 1).unwrap();
            assert_eq!(r.verdict, Verdict::Hit { ifindex: oa }, "{inner:02x?}");
            assert_eq!(r.retval, 7, "TC_ACT_REDIRECT");
            assert_eq!(r.frame, want, "the pipeline's inner frame");
            bytes += want.len() as u64;
        }
    }
    let n = (frames.len() + odd.len()) as u64;
    let rx = fp.port_stats(VX).unwrap();
    let tx = fp.port_stats(OUT).unwrap();
    assert_eq!(
        (rx.rx_frames, rx.rx_bytes),
        (n, bytes),
        "rx on the VXLAN port"
    );
    assert_eq!((tx.tx_frames, tx.tx_bytes), (n, bytes), "tx on the output");
    let stats = fp.vxd_stats().unwrap();
    assert_eq!(stats[VxdVerdict::Hit as usize], (VxdVerdict::Hit, n));

    // Tagged on the way out; an external port's VNI enters with its VLAN.
    let gen = fp.bump_generation().unwrap();
    install(&mut fp, gen, oa, None, &[(0x8100, 20)]);
    let inner = &frames[0];
    let r = fp
        .test_run_decap(&outer6(REMOTE6, 5000, inner, true), ua, 1)
        .unwrap();
    let mut want = inner.clone();
    want.splice(12..12, [0x81, 0x00, 0x00, 20]);
    assert_eq!((r.verdict, r.frame), (Verdict::Hit { ifindex: oa }, want));
    install(&mut fp, gen, oa, Some(10), &[]);
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 7010),
        Vxd {
            port: VX,
            tag_tpid: 0x8100u16.to_be_bytes(),
            tag_tci: 10u16.to_be_bytes(),
            flags: VXD_ZERO6RX,
        },
    )
    .unwrap();
    let before = fp.port_stats(VX).unwrap().rx_bytes;
    let r = fp
        .test_run_decap(&outer6(REMOTE6, 7010, inner, true), ua, 1)
        .unwrap();
    assert_eq!((r.verdict, &r.frame), (Verdict::Hit { ifindex: oa }, inner));
    assert_eq!(
        fp.port_stats(VX).unwrap().rx_bytes - before,
        inner.len() as u64 + 4,
        "counted with the VNI's tag"
    );
}

/// Decision 82: every IPv6 frame the program does not take passes on untouched with its
/// reason — an extension header, a zero checksum on a port without `udp6zerocsumrx` (the
/// socket drops it: `decapsulate` refuses it too), a bad checksum (summed by the program from
/// a test run's CHECKSUM_NONE, decision 87), wrong lengths, reserved VXLAN bits, an unknown remote, VNI or
/// port, and the inner-frame and flow reasons as over IPv4; IPv4 tunnels and IPv6 ones are
/// apart. (A short unpadded inner packet is taken.)
#[test]
fn every_other_ipv6_frame_passes_to_the_socket_untouched() {
    let Some((mut fp, ua, oa)) = setup6() else {
        return;
    };
    let inner = ipv4(A, 6, 0, &ports_l4(true, 1000, 80, 40));
    let good = outer6(REMOTE6, 5000, &inner, true);
    let check = |fp: &mut FastPath, f: &[u8], why: VxdVerdict| {
        let r = fp.test_run_decap(f, ua, 1).unwrap();
        assert_eq!(decap_pass_reason(&r), Some(why), "{f:02x?}");
        assert_eq!(r.retval, u32::MAX, "TC_ACT_UNSPEC");
        assert_eq!(r.frame, f, "untouched");
    };
    let other = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 9);
    check(
        &mut fp,
        &outer6(other, 5000, &inner, true),
        VxdVerdict::Other,
    );
    check(
        &mut fp,
        &outer6(REMOTE6, 5001, &inner, true),
        VxdVerdict::Other,
    );
    let mut f = good.clone();
    f[56..58].copy_from_slice(&4790u16.to_be_bytes());
    check(&mut fp, &f, VxdVerdict::Other);
    // The same addresses' bytes as an IPv4 tunnel's: not an IPv6 one.
    check(
        &mut fp,
        &outer(REMOTE, 5000, &inner, true),
        VxdVerdict::Other,
    );

    // A destination options header in front of UDP (the datagram as it was).
    let mut f = good.clone();
    f[20] = 60;
    f.splice(54..54, [17, 0, 1, 4, 0, 0, 0, 0]);
    let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    check(&mut fp, &f, VxdVerdict::Header);
    // Lengths: Ethernet padding after the datagram, a UDP length short of the payload.
    let mut f = good.clone();
    f.extend_from_slice(&[0; 4]);
    check(&mut fp, &f, VxdVerdict::Header);
    let mut f = good.clone();
    f[59] -= 1;
    check(&mut fp, &f, VxdVerdict::Header);
    let mut f = good.clone();
    f[63] = 1; // a reserved VXLAN bit
    check(&mut fp, &f, VxdVerdict::Header);

    // Checksums (CHECKSUM_NONE here: the program sums the datagram, decision 87): a valid
    // one is taken, a bad one in the field or the payload passes.
    let summed = outer6(REMOTE6, 5000, &inner, false);
    assert!(decapsulate(&summed[14..], false).is_ok());
    let r = fp.test_run_decap(&summed, ua, 1).unwrap();
    assert_eq!(
        (r.verdict, &r.frame),
        (Verdict::Hit { ifindex: oa }, &inner)
    );
    let mut f = summed.clone();
    f[60] ^= 0x55;
    assert!(decapsulate(&f[14..], false).is_err());
    check(&mut fp, &f, VxdVerdict::Csum);
    let mut f = summed.clone();
    let last = f.len() - 1;
    f[last] ^= 1;
    assert!(decapsulate(&f[14..], false).is_err());
    check(&mut fp, &f, VxdVerdict::Csum);
    // A zero one on a port without udp6zerocsumrx: its socket drops (and counts) it.
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();
    assert!(decapsulate(&good[14..], false).is_err());
    check(&mut fp, &good, VxdVerdict::Csum);
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            flags: VXD_ZERO6RX,
            ..Vxd::default()
        },
    )
    .unwrap();
    assert!(matches!(
        fp.test_run_decap(&good, ua, 1).unwrap().verdict,
        Verdict::Hit { .. }
    ));

    // The inner frame and the flow, as over IPv4.
    let mut flood = inner.clone();
    flood[..6].copy_from_slice(&[0xff; 6]);
    check(
        &mut fp,
        &outer6(REMOTE6, 5000, &flood, true),
        VxdVerdict::Inner,
    );
    let mut nf = inner.clone();
    nf[5] = 0x0c;
    check(
        &mut fp,
        &outer6(REMOTE6, 5000, &nf, true),
        VxdVerdict::NoFlow,
    );
    let stranger = ipv4([0x02, 0, 0, 0, 0, 0x0e], 6, 0, &ports_l4(true, 1, 2, 40));
    check(
        &mut fp,
        &outer6(REMOTE6, 5000, &stranger, true),
        VxdVerdict::Src,
    );
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            flags: VXD_ZERO6RX | VXD_TRACE,
            ..Vxd::default()
        },
    )
    .unwrap();
    check(&mut fp, &good, VxdVerdict::Traced);
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            flags: VXD_ZERO6RX,
            ..Vxd::default()
        },
    )
    .unwrap();
    fp.bump_generation().unwrap();
    check(&mut fp, &good, VxdVerdict::Stale);
    // An unpadded inner packet of 28 bytes (the daemon's flows take frames from 14 bytes
    // on): under an IPv6 header's 40, yet bpf_skb_adjust_room keeps the inner family's
    // base header (DECAP_L3_IPV4), so it is taken, exactly as the socket reads it.
    let gen = fp.bump_generation().unwrap();
    let mut a = action(gen, (VX, 0), oa, OUT, FID, &[]);
    a.min_len = 14;
    let mut k = key(VX, B, &[]);
    k.ethertype_be = 0x0800u16.to_be();
    fp.insert_flow(k, a).unwrap();
    let mut short = ipv4(A, 17, 0, &ports_l4(false, 5000, 2000, 0));
    short.truncate(14 + 28);
    short[16..18].copy_from_slice(&28u16.to_be_bytes());
    let f = outer6(REMOTE6, 5000, &short, true);
    let r = fp.test_run_decap(&f, ua, 1).unwrap();
    assert_eq!(r.verdict, Verdict::Hit { ifindex: oa });
    assert_eq!(r.frame, decapsulate(&f[14..], true).unwrap().inner);
    fp.remove_vxd6_tunnel(&tunnel_key6(REMOTE6, 5000)).unwrap();
    check(&mut fp, &good, VxdVerdict::Other);
}

fn ip_sum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(c[1]))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The program's cost per decapsulated frame (`BPF_PROG_TEST_RUN`), printed for the benchmark
/// notes (`cargo test -p qbridge-fastpath --test vxlan_decap -- --ignored --nocapture`). A
/// test run's repeats run on one skb, which the first decapsulates: each run is a test run of
/// its own (the kernel's time for that one run), the median of many.
#[test]
#[ignore]
fn cost_per_frame() {
    let Some((mut fp, ua, oa)) = setup() else {
        return;
    };
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp);
    install(&mut fp, gen, oa, None, &[]);
    fp.set_vxd_tunnel(
        tunnel_key(REMOTE, 5000),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();
    // Over IPv6 too (decision 82): a zero checksum, which a udp6zerocsumrx port takes, and a
    // computed one, which the program sums itself (decision 87: a test run's skb is
    // CHECKSUM_NONE, as from a sender without checksum offload).
    fp.set_vxd6_tunnel(
        tunnel_key6(REMOTE6, 5000),
        Vxd {
            port: VX,
            flags: VXD_ZERO6RX,
            ..Vxd::default()
        },
    )
    .unwrap();
    let cases: Vec<(String, Vec<u8>)> = [
        (6, 4, true),
        (1400, 4, true),
        (6, 6, true),
        (1400, 6, true),
        (6, 6, false),
        (1400, 6, false),
    ]
    .into_iter()
    .map(|(payload, family, zero)| {
        let inner = ipv4(A, 6, 0, &ports_l4(true, 1000, 80, payload));
        let f = if family == 6 {
            outer6(REMOTE6, 5000, &inner, zero)
        } else {
            outer(REMOTE, 5000, &inner, zero)
        };
        let csum = if zero {
            "zero checksum"
        } else {
            "summed checksum"
        };
        (format!("IPv{family}, {} bytes, {csum}", f.len()), f)
    })
    .collect();
    // Interleaved: one run of each case in turn.
    let mut ns = vec![Vec::new(); cases.len()];
    for _ in 0..20_000 {
        for (i, (_, f)) in cases.iter().enumerate() {
            let r = fp.test_run_decap(f, ua, 1).unwrap();
            assert_eq!(r.verdict, Verdict::Hit { ifindex: oa });
            ns[i].push(r.ns_per_run);
        }
    }
    for ((name, _), mut ns) in cases.into_iter().zip(ns) {
        ns.sort_unstable();
        println!(
            "decap over {name}: median {} ns/run, p10 {} p90 {} (20 000 runs of 1, interleaved)",
            ns[ns.len() / 2],
            ns[ns.len() / 10],
            ns[ns.len() * 9 / 10]
        );
    }
}
