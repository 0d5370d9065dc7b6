//! Q-in-VNI in the program (decision 86), through `BPF_PROG_TEST_RUN` (root; skipped
//! otherwise): a flow to a VXLAN tunnel whose inner frame keeps tags (an 802.1ad bridge's
//! S-VLAN mapped to a VNI, the customer's C-tag inside) leaves with exactly the bytes the
//! pipeline's VTEP sends (`qbridge_io::vxlan::outer::encapsulate` of the inner frame with its
//! tags, from the send socket `qbridge_wire::vxlan::source_port` picks through the tags), over
//! an IPv4 underlay (outer UDP checksum 0, the program's one difference) and an IPv6 one (the
//! checksum the socket computes, tags included); one and two inner tags, whatever tags the
//! frame came with.

mod common;

use common::{
    action, arp, fdb, from_vtep, ifindex, ip, key, neighbour, own_netns, port, ports_l4, quartiles,
    tagged, veths, vtep_sends, vxd_key,
};
use qbridge_fastpath::*;
use qbridge_wire::vxlan::{source_port, Vni};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 86, 0, 1);
const REMOTE: Ipv4Addr = Ipv4Addr::new(10, 86, 0, 2);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x86, 0, 0, 0, 0, 1);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x86, 0, 0, 0, 0xbeef, 2);

/// A fresh namespace: port veth `fa`/`fb`, IPv4 underlay `fc`/`fd`, IPv6 underlay `fe`/`ff`,
/// each remote a permanent neighbour.
fn setup() -> Option<(FastPath, u32, u32, u32)> {
    if !own_netns() {
        return None;
    }
    veths(&[("fa", "fb"), ("fc", "fd"), ("fe", "ff")]);
    ip(&["link", "set", "fc", "mtu", "9000"]);
    ip(&["link", "set", "fe", "mtu", "9000"]);
    ip(&["addr", "add", "10.86.0.1/24", "dev", "fc"]);
    ip(&["addr", "add", "2001:db8:86::1/64", "dev", "fe", "nodad"]);
    neighbour("10.86.0.2", "02:00:00:00:86:02", "fc");
    neighbour("2001:db8:86::beef:2", "02:00:00:00:86:02", "fe");
    let fp = FastPath::load().expect("load");
    Some((fp, ifindex("fa"), ifindex("fc"), ifindex("fe")))
}

fn tunnel(ifindex: u32, vni: u32, v6: bool) -> Vxlan {
    let mut sport = [[0u8; 2]; VXLAN_SOCKETS];
    let mut flow_label = [[0u8; 4]; VXLAN_SOCKETS];
    for i in 0..VXLAN_SOCKETS {
        sport[i] = (40_000 + 7 * i as u16).to_be_bytes();
        if v6 {
            flow_label[i] = (0x1_2340 + i as u32).to_be_bytes();
        }
    }
    let v = vni.to_be_bytes();
    let mut t = Vxlan {
        vni: [v[1], v[2], v[3], 0],
        ifindex,
        sport,
        dstport: 4789u16.to_be_bytes(),
        ttl: 64,
        flags: VX_INHERIT_TOS,
        flow_label,
        ..Vxlan::default()
    };
    if v6 {
        t.flags |= VX_IPV6;
        t.local6 = LOCAL6.octets();
        t.remote6 = REMOTE6.octets();
    } else {
        t.local = LOCAL.octets();
        t.remote = REMOTE.octets();
    }
    t
}

/// What the pipeline's VTEP sends for `inner` (its tags inside), the outer UDP checksum 0
/// over IPv4, the TOS inherited.
fn expected(t: &Vxlan, inner: &[u8]) -> Vec<u8> {
    vtep_sends(t, inner, qbridge_wire::vxlan::inherited_tos(inner))
}

/// IPv4 from A to B, DF set.
fn ipv4(tos: u8, proto: u8, l4: &[u8]) -> Vec<u8> {
    common::ipv4(B, A, tos, proto, 0x4000, l4, 0)
}

fn ipv6(tclass: u8, next: u8, l4: &[u8]) -> Vec<u8> {
    common::ipv6(B, A, tclass, next, l4)
}

const S: u16 = 0x88a8;
const C: u16 = 0x8100;

#[test]
fn tagged_inner_frames_leave_as_the_pipelines_vtep_sends_them() {
    let Some((mut fp, fa, fc, fe)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let w = fp.writer().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    // The frame's tags as it enters, and the inner frame's as the flow pushes them: a
    // provider trunk's S+C (the S-tag goes, the C-tag rides inside); a customer port's C
    // kept; an untagged frame given a C-tag; two tags inside (an `id N` port).
    type Tags<'a> = &'a [(u16, u16)];
    let cases: [(Tags, Tags); 4] = [
        (&[(S, 100), (C, 7)], &[(C, 7)]),
        (&[(C, 0x2007)], &[(C, 0x2007)]),
        (&[], &[(C, 9)]),
        (&[(C, 5)], &[(S, 300), (C, 0xe005)]),
    ];
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for p in 0..16u16 {
        frames.push(ipv4(0, 6, &ports_l4(true, 1000 + p, 80, 40)));
        frames.push(ipv4(0xbb, 17, &ports_l4(false, 5000, 2000 + 13 * p, 20)));
    }
    frames.push(ipv4(0x10, 1, &[8, 0, 0, 0, 0, 1, 0, 1, 9, 9]));
    frames.push(ipv6(0x2a, 6, &ports_l4(true, 333, 22, 30)));
    frames.push(ipv6(0, 17, &ports_l4(false, 53, 5353, 31)));
    frames.push(ipv6(0, 58, &[128, 0, 0, 0, 0, 1, 0, 1, 7, 7, 7]));
    for (underlay, v6) in [(fc, false), (fe, true)] {
        let t = tunnel(underlay, 0x12_3456, v6);
        let idx = w.tunnel(&t).unwrap().unwrap();
        for (in_tags, push) in cases {
            for et in [0x0800u16, 0x86dd] {
                let mut a = action(gen, (1, in_tags.len()), idx, 2, 10, push);
                a.flags = ACT_VXLAN;
                a.max_len = 1514 + 8;
                let mut k = key(1, B, in_tags);
                k.ethertype_be = et.to_be();
                fp.insert_flow(k, a).unwrap();
            }
            let mut socks = std::collections::BTreeSet::new();
            for f in &frames {
                let input = tagged(f, in_tags);
                let inner = tagged(f, push);
                let r = fp.test_run(&input, fa, None).unwrap();
                let what = format!("v6 {v6} {in_tags:x?} -> {push:x?}: {input:02x?}");
                assert_eq!(r.verdict, Verdict::Hit { ifindex: underlay }, "{what}");
                assert_eq!(r.frame, expected(&t, &inner), "{what}");
                socks.insert(source_port(&inner) % 8);
            }
            assert_eq!(socks.len(), 8, "the frames spread over every socket");
        }
    }
    // Not IP inside the tags (the kernel encapsulates IP alone): up as it came.
    let arp = arp(B, A);
    let t = tunnel(fc, 0x12_3456, false);
    let idx = w.tunnel(&t).unwrap().unwrap();
    let mut a = action(gen, (1, 1), idx, 2, 10, &[(C, 7)]);
    a.flags = ACT_VXLAN;
    let mut k = key(1, B, &[(C, 7)]);
    k.ethertype_be = 0x0806u16.to_be();
    fp.insert_flow(k, a).unwrap();
    let input = tagged(&arp, &[(C, 7)]);
    let r = fp.test_run(&input, fa, None).unwrap();
    assert_eq!(r.verdict, Verdict::Miss(Miss::Vxlan));
    assert_eq!(r.frame, input, "up as it came");
}

/// The frame a remote VTEP sends for `inner`: outer Ethernet, IPv4/UDP/VXLAN as the
/// userspace VTEP builds it (no UDP checksum), to [`LOCAL`] from [`REMOTE`].
fn from_remote(vni: u32, inner: &[u8]) -> Vec<u8> {
    from_remote_ip(IpAddr::V4(REMOTE), IpAddr::V4(LOCAL), vni, inner)
}

/// [`from_remote`] over IPv6 (decision 82's outer; a zero UDP checksum, which the tunnel
/// takes with `VXD_ZERO6RX`: a test run's skb has no checksum state to check one against).
fn from_remote6(vni: u32, inner: &[u8]) -> Vec<u8> {
    from_remote_ip(IpAddr::V6(REMOTE6), IpAddr::V6(LOCAL6), vni, inner)
}

fn from_remote_ip(src: IpAddr, dst: IpAddr, vni: u32, inner: &[u8]) -> Vec<u8> {
    let macs = ([0x02, 0, 0, 0, 0x86, 1], [0x02, 0, 0, 0, 0x86, 2]);
    from_vtep(macs, src, dst, vni, inner, true)
}

/// Decapsulation (decision 86): an inner frame with its C-tag(s) takes the flow the pipeline
/// made for the frame the port hands it (an external port's VNI tag pushed outside them) and
/// leaves as the pipeline forwards it (`outer::decapsulate`, then the flow's tags): to a
/// customer port with the C-tag, to a provider trunk with both, to an access port with none;
/// an `id N` port's inner S+C; over IPv4 and IPv6 outers; counted with the tags the pipeline
/// saw. More tags than the
/// program parses, or no IP inside them, go to the socket.
#[test]
fn tagged_inner_frames_decapsulate_as_the_pipeline_forwards_them() {
    use qbridge_io::vxlan::outer::decapsulate;
    const VX: u32 = 3;
    const OUT: u32 = 4;
    let Some((mut fp, _fa, fc, _fe)) = setup() else {
        return;
    };
    let out = ifindex("fa");
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, 20, &[(A, VX), (B, OUT)]);
    // VNI 0x86 is S-VLAN 20 of an 802.1ad bridge's external port; VNI 0x87 an `id N` port.
    fp.set_vxd_tunnel(
        vxd_key(LOCAL, REMOTE, 0x86),
        Vxd {
            port: VX,
            tag_tpid: S.to_be_bytes(),
            tag_tci: 20u16.to_be_bytes(),
            flags: 0,
        },
    )
    .unwrap();
    fp.set_vxd_tunnel(
        vxd_key(LOCAL, REMOTE, 0x87),
        Vxd {
            port: VX,
            ..Vxd::default()
        },
    )
    .unwrap();
    let mut frames: Vec<Vec<u8>> = vec![
        ipv4(0, 6, &ports_l4(true, 1000, 80, 40)),
        ipv4(0, 17, &ports_l4(false, 5000, 2000, 300)),
        ipv4(0, 1, &[8, 0, 0, 0, 0, 1, 0, 1, 9, 9]),
        ipv6(0, 6, &ports_l4(true, 333, 22, 30)),
    ];
    for f in frames.iter_mut() {
        // From A (learned on the VXLAN port).
        f[6..12].copy_from_slice(&A);
    }
    // (VNI, the inner frame's tags, the pipeline's key tags, the flow's egress tags)
    type Case<'a> = (u32, &'a [(u16, u16)], &'a [(u16, u16)], &'a [(u16, u16)]);
    let cases: [Case; 4] = [
        (0x86, &[(C, 7)], &[(S, 20), (C, 7)], &[(C, 7)]),
        (0x86, &[(C, 7)], &[(S, 20), (C, 7)], &[(S, 20), (C, 7)]),
        (0x86, &[(C, 0xa007)], &[(S, 20), (C, 0xa007)], &[]),
        (0x87, &[(S, 30), (C, 7)], &[(S, 30), (C, 7)], &[(C, 7)]),
    ];
    // The same S-VLAN's VNI over an IPv6 outer (decision 82): vxq_inner is shared.
    fp.set_vxd6_tunnel(
        Vxd6Key {
            local: LOCAL6.octets(),
            remote: REMOTE6.octets(),
            vni: Vni::new(0x86).unwrap().word(),
            dstport: 4789u16.to_be_bytes(),
            pad: 0,
        },
        Vxd {
            port: VX,
            tag_tpid: S.to_be_bytes(),
            tag_tci: 20u16.to_be_bytes(),
            flags: VXD_ZERO6RX,
        },
    )
    .unwrap();
    let (mut n, mut rx_bytes) = (0u64, 0u64);
    for (vni, inner_tags, key_tags, push) in cases {
        for et in [0x0800u16, 0x86dd] {
            let mut a = action(gen, (VX, key_tags.len()), out, OUT, 20, push);
            a.min_len = 14;
            let mut k = key(VX, B, key_tags);
            k.ethertype_be = et.to_be();
            fp.insert_flow(k, a).unwrap();
        }
        for f in &frames {
            let inner = tagged(f, inner_tags);
            let wire = from_remote(vni, &inner);
            let got = decapsulate(&wire[14..], false).unwrap().inner.to_vec();
            assert_eq!(
                got, inner,
                "the port's VTEP reads the inner frame, tags and all"
            );
            let r = fp.test_run_decap(&wire, fc, 1).unwrap();
            let what = format!("{vni:x} {inner_tags:x?} -> {push:x?}: {inner:02x?}");
            assert_eq!(r.verdict, Verdict::Hit { ifindex: out }, "{what}");
            assert_eq!(r.frame, tagged(f, push), "{what}");
            n += 1;
            rx_bytes += (f.len() + 4 * key_tags.len()) as u64;
            if vni == 0x86 {
                let wire6 = from_remote6(vni, &inner);
                let r = fp.test_run_decap(&wire6, fc, 1).unwrap();
                assert_eq!(r.verdict, Verdict::Hit { ifindex: out }, "IPv6 {what}");
                assert_eq!(r.frame, tagged(f, push), "IPv6 {what}");
                n += 1;
                rx_bytes += (f.len() + 4 * key_tags.len()) as u64;
            }
        }
    }
    let rx = fp.port_stats(VX).unwrap();
    assert_eq!(
        (rx.rx_frames, rx.rx_bytes),
        (n, rx_bytes),
        "the VXLAN port counts the frame as the pipeline got it: the S-tag and C-tag"
    );
    let stats = fp.vxd_stats().unwrap();
    assert_eq!(stats[VxdVerdict::Hit as usize], (VxdVerdict::Hit, n));

    // Three tags in all (the VNI's and two inside), a third TPID, no IP after the tag: to
    // the socket, untouched.
    let f = &frames[0];
    let arp = arp(B, A);
    for (vni, inner) in [
        (0x86, tagged(f, &[(S, 30), (C, 7)])),
        (0x87, tagged(f, &[(0x9100, 30), (C, 7)])),
        (0x86, tagged(&arp, &[(C, 7)])),
    ] {
        let wire = from_remote(vni, &inner);
        let r = fp.test_run_decap(&wire, fc, 1).unwrap();
        assert_eq!(
            decap_pass_reason(&r),
            Some(VxdVerdict::Inner),
            "{inner:02x?}"
        );
        assert_eq!(r.frame, wire, "untouched");
    }
}

/// The program's cost per frame, Q-in-VNI against plain VXLAN (`cargo test -p
/// qbridge-fastpath --test vxlan_qinvni -- --ignored --nocapture`; root): a 1514-byte TCP
/// frame (1518 with its C-tag), `BPF_PROG_TEST_RUN` once per call, 20 000 calls of each kind,
/// interleaved; quartiles. Encapsulation: untagged in and out, against an S+C-tagged frame
/// leaving with its C-tag inside; decapsulation: an untagged inner frame against a C-tagged
/// one into an 802.1ad port (its S-tag pushed). Prints.
#[test]
#[ignore]
fn cost_per_frame() {
    use qbridge_fastpath::FastPath as Fp;
    const VX: u32 = 3;
    let Some((mut fp, fa, fc, _fe)) = setup() else {
        return;
    };
    fp.set_port(fa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    fdb(&mut fp, 10, &[(A, 1), (B, 2)]);
    fdb(&mut fp, 20, &[(A, VX), (B, 4)]);
    let w = fp.writer().unwrap();
    let idx = w.tunnel(&tunnel(fc, 100, false)).unwrap().unwrap();
    for (in_tags, push) in [(&[][..], &[][..]), (&[(S, 100), (C, 7)][..], &[(C, 7)][..])] {
        let mut a = action(gen, (1, in_tags.len()), idx, 2, 10, push);
        a.flags = ACT_VXLAN;
        a.max_len = 1522;
        fp.insert_flow(key(1, B, in_tags), a).unwrap();
    }
    let out = ifindex("fa");
    for tags in [&[][..], &[(S, 20), (C, 7)][..]] {
        let mut a = action(gen, (VX, tags.len()), out, 4, 20, &[]);
        a.min_len = 14;
        fp.insert_flow(key(VX, B, tags), a).unwrap();
    }
    for (vni, tag) in [(0x86u32, Some(20u16)), (0x87, None)] {
        fp.set_vxd_tunnel(
            vxd_key(LOCAL, REMOTE, vni),
            Vxd {
                port: VX,
                tag_tpid: if tag.is_some() {
                    S.to_be_bytes()
                } else {
                    [0; 2]
                },
                tag_tci: tag.unwrap_or(0).to_be_bytes(),
                flags: 0,
            },
        )
        .unwrap();
    }
    let plain = ipv4(0, 6, &ports_l4(true, 1234, 80, 1460));
    let qinvni = tagged(&plain, &[(S, 100), (C, 7)]);
    let mut from_a = plain.clone();
    from_a[6..12].copy_from_slice(&A);
    let d_plain = from_remote(0x87, &from_a);
    let d_q = from_remote(0x86, &tagged(&from_a, &[(C, 7)]));
    let hit = |fp: &mut Fp, f: &[u8]| fp.test_run_repeat(f, fa, 1).unwrap().verdict;
    assert_eq!(hit(&mut fp, &plain), Verdict::Hit { ifindex: fc });
    assert_eq!(hit(&mut fp, &qinvni), Verdict::Hit { ifindex: fc });
    for f in [&d_plain, &d_q] {
        let r = fp.test_run_decap(f, fc, 1).unwrap();
        assert_eq!(r.verdict, Verdict::Hit { ifindex: out });
    }
    // One run per call: a repeated run would run the program on its own output.
    let mut t: [Vec<u32>; 4] = Default::default();
    for _ in 0..20_000 {
        t[0].push(fp.test_run_repeat(&plain, fa, 1).unwrap().ns_per_run);
        t[1].push(fp.test_run_repeat(&qinvni, fa, 1).unwrap().ns_per_run);
        t[2].push(fp.test_run_decap(&d_plain, fc, 1).unwrap().ns_per_run);
        t[3].push(fp.test_run_decap(&d_q, fc, 1).unwrap().ns_per_run);
    }
    let [q0, q1, q2, q3] = t.each_mut().map(|x| quartiles(x));
    eprintln!(
        "ns per frame (quartiles of 20 000 single runs): encap plain {q0:?}, Q-in-VNI {q1:?}; \
         decap plain {q2:?}, Q-in-VNI {q3:?}"
    );
}
