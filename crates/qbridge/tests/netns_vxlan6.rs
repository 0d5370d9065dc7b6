//! A VXLAN port over an IPv6 underlay against the kernel's own vxlan device (root only);
//! `netns_vxlan.rs`'s topology with IPv6 VTEP addresses:
//!
//! ```text
//!  ha (10.20.0.1) ─ qa ┐                                      ┌ kb1 ─ hb (10.20.0.2)
//!     daemon A: br0: p1 (qa), vx0                               kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 2001:db8:100::1 dev ul       vx0: kernel vxlan id 100
//!                  └── ul 2001:db8:100::1 ═══ veth (MTU 1570) ═══ ul 2001:db8:100::2 ──┘
//! ```
//!
//! Both VTEPs at their defaults: the kernel's with its checksum offload and TSO on, its UDP
//! checksum over IPv6 computed (`noudp6zerocsumtx`) and a zero one refused
//! (`noudp6zerocsumrx`); qbridge's the same (the socket computes it). Each side's flood list
//! names the other VTEP (`fdb append 00:00:00:00:00:00 … dst 2001:db8:100::2`). Checked:
//! ARP floods and pings both ways; a 1500-byte ping with DF both ways (the underlay raised by
//! the 70 bytes of IPv6 outer headers); 64 MiB of verified TCP each way through real kernel
//! sockets; the learned remote VTEP's IPv6 address in `fdb show` and `-j`; a static `fdb replace
//! MAC … dst IPV6` carrying the unicast with the flood list gone; an IPv4 `dst` refused on an
//! IPv6 port; the 70 bytes of overhead exactly (an underlay one byte short refuses a
//! 1500-byte inner packet as `tx_too_long` and passes a 1499-byte one); and a capture of the underlay decoded by tshark (outer IPv6/UDP 4789/VXLAN VNI
//! 100, inner ARP/ICMP/TCP of both hosts, nothing malformed, no bad checksum) and by
//! `qbridge_io::vxlan::outer::decapsulate` (every datagram's UDP checksum verified over the
//! IPv6 pseudo-header, none zero, qbridge's with a flow label).

mod support;

use std::time::Duration;
use support::{exec_in, ip_in, ping, tcp_transfer, tshark, Host, Lab};

const LOCAL: &str = "2001:db8:100::1";
const REMOTE: &str = "2001:db8:100::2";

fn batch() -> String {
    format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local {LOCAL} dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE}
"
    )
}

/// Namespaces `a` (qbridge's side) and `b` (the kernel's), the IPv6 underlay between them
/// (addresses without duplicate address detection, MTU 1570), hosts ha and hb, the kernel
/// VTEP in `b`. `None` when the kernel has no VXLAN.
fn lab_with_kernel_vtep(lab: &mut Lab) -> Option<(String, String, Host, Host)> {
    let a = lab.netns("vx6a").unwrap();
    let b = lab.netns("vx6b").unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, LOCAL), (&b, REMOTE)] {
        // The lab turns IPv6 off on its devices (no router solicitations); the underlay
        // needs it.
        exec_in(ns, "sysctl", &["-qw", "net.ipv6.conf.ul.disable_ipv6=0"]).unwrap();
        ip_in(
            ns,
            &[
                "-6",
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                "ul",
                "nodad",
            ],
        )
        .unwrap();
        // The 70 bytes of outer headers over IPv6 on top of a 1500-byte inner MTU.
        ip_in(ns, &["link", "set", "ul", "mtu", "1570"]).unwrap();
    }
    let ha = lab.host("ha", "10.20.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.20.0.2/24", &b, "kb1").unwrap();
    if let Err(e) = support::kernel_vtep(&b, REMOTE, LOCAL, "kb1", Some("ul")) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return None;
    }
    Some((a, b, ha, hb))
}

#[test]
fn vxlan_port_over_ipv6_talks_to_a_kernel_vtep() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxlan6");
    let Some((a, b, ha, hb)) = lab_with_kernel_vtep(&mut lab) else {
        return;
    };
    let ctl = lab.daemon(&a, &batch()).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&ha, &hb.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    for (from, to) in [(&ha, &hb), (&hb, &ha)] {
        let r = ping(from, &to.ip, 3);
        assert!(
            r.received >= 2,
            "{} -> {} over VXLAN/IPv6: {}\n{}",
            from.name,
            to.name,
            r.output,
            ctl.stats_text()
        );
        // A 1500-byte IP packet inside, DF set: the tunnel carries a full inner MTU.
        let out = exec_in(
            &from.ns,
            "ping",
            &["-c", "2", "-W", "2", "-M", "do", "-s", "1472", &to.ip],
        );
        assert!(
            out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
            "1500-byte ping {} -> {}: {out:?}\n{}",
            from.name,
            to.name,
            ctl.stats_text()
        );
    }

    // 64 MiB of verified TCP both ways (the kernel VTEP's offloads on: partial inner
    // checksums and TSO super-frames arrive, as over IPv4).
    let t = tcp_transfer(&ha, &hb, 64 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let u = tcp_transfer(&hb, &ha, 64 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "VXLAN/IPv6 qbridge <-> kernel VTEP: ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s",
        t.gbit_per_s(),
        u.gbit_per_s()
    );

    // qbridge learned hb behind vx0, with its VTEP's IPv6 address.
    let hb_mac = hb.mac.to_lowercase();
    assert!(ctl.fdb_has(&hb.mac, "vx0").unwrap(), "{:?}", ctl.fdb());
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains(&format!(
            "00:00:00:00:00:00 dev vx0 dst {REMOTE} self permanent\n"
        )),
        "{show}"
    );
    assert!(
        show.contains(&format!("{hb_mac} dev vx0 dst {REMOTE} self\n")),
        "{show}"
    );
    let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        j.as_array().into_iter().flatten().any(|e| e["mac"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(&hb.mac))
            && e["dst"] == REMOTE
            && e["flags"][0] == "self"),
        "{j}"
    );
    let j = ctl.json(&["link", "show", "dev", "vx0"]).unwrap();
    assert_eq!(j[0]["backend"]["local"], LOCAL, "{j}");

    // One family per port, as the kernel: an IPv4 VTEP is refused with the reason.
    let e = ctl
        .cmd(&[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "vx0",
            "dst",
            "192.0.2.9",
        ])
        .unwrap_err();
    assert!(
        e.contains("is IPv4 but local 2001:db8:100::1 is IPv6"),
        "{e}"
    );

    // A static `fdb replace MAC … dst IPV6`, the flood list and the learned entries gone: the
    // unicast to hb still crosses, by the static entry alone (the hosts' ARP entries pinned,
    // as nothing floods any more).
    ip_in(
        &ha.ns,
        &["neigh", "replace", &hb.ip, "lladdr", &hb_mac, "dev", "eth0"],
    )
    .unwrap();
    ip_in(
        &hb.ns,
        &[
            "neigh",
            "replace",
            &ha.ip,
            "lladdr",
            &ha.mac.to_lowercase(),
            "dev",
            "eth0",
        ],
    )
    .unwrap();
    for c in [
        // `replace`: vx0 has learned hb's MAC, and `add` of a learned MAC is refused, as the
        // kernel's vxlan refuses it (decision 88); `replace` makes it static.
        vec![
            "fdb",
            "replace",
            hb_mac.as_str(),
            "dev",
            "vx0",
            "dst",
            REMOTE,
        ],
        vec![
            "fdb",
            "del",
            "00:00:00:00:00:00",
            "dev",
            "vx0",
            "dst",
            REMOTE,
        ],
        vec!["fdb", "flush", "dev", "vx0"],
    ] {
        ctl.cmd(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains(&format!("{hb_mac} dev vx0 dst {REMOTE} self permanent\n"))
            && !show.contains("00:00:00:00:00:00 dev vx0"),
        "{show}"
    );
    let r = ping(&ha, &hb.ip, 3);
    assert!(
        r.received >= 2,
        "by the static entry: {}\n{}",
        r.output,
        ctl.stats_text()
    );
    // The running configuration keeps it, in IPv6.
    let rc = ctl.cmd(&["show", "running-config"]).unwrap();
    assert!(
        rc.contains(&format!("local {LOCAL} dev ul dstport 4789"))
            && rc.contains(&format!("fdb add {hb_mac} dev vx0 dst {REMOTE}")),
        "{rc}"
    );
    // The MTU arithmetic, 70 bytes of outer headers: with qbridge's underlay at 1569, a
    // 1500-byte inner IP packet is one byte too long (refused by the socket, counted
    // `tx_too_long`: nothing is fragmented), a 1499-byte one crosses.
    ip_in(&a, &["link", "set", "ul", "mtu", "1569"]).unwrap();
    let too_long = || {
        let v = ctl.json(&["-s", "link", "show", "dev", "vx0"]).unwrap();
        v[0]["stats"]["drops"]["tx_too_long"].as_u64().unwrap_or(0)
    };
    let before = too_long();
    let out = exec_in(
        &ha.ns,
        "ping",
        &["-c", "2", "-W", "1", "-M", "do", "-s", "1472", &hb.ip],
    )
    .unwrap_or_else(|e| e);
    assert!(out.contains(" 100% packet loss"), "{out}");
    assert!(too_long() >= before + 2, "{}", ctl.stats_text());
    let out = exec_in(
        &ha.ns,
        "ping",
        &["-c", "2", "-W", "2", "-M", "do", "-s", "1471", &hb.ip],
    );
    assert!(
        out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
        "1499-byte ping: {out:?}\n{}",
        ctl.stats_text()
    );
    ip_in(&a, &["link", "set", "ul", "mtu", "1570"]).unwrap();

    ctl.cmd(&[
        "fdb",
        "append",
        "00:00:00:00:00:00",
        "dev",
        "vx0",
        "dst",
        REMOTE,
    ])
    .unwrap();
    ctl.cmd(&["fdb", "del", &hb_mac, "dev", "vx0", "dst", REMOTE])
        .unwrap();

    // The underlay as tshark and the io crate's codec read it, from ARP to a short TCP
    // exchange. From here on the underlay devices have no transmit checksum offload: every
    // outer UDP checksum is complete on the wire (a veth completes none), each datagram
    // captured alone. The hosts forget each other, so ARP runs again.
    for ns in [&a, &b] {
        exec_in(ns, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    }
    for (h, other) in [(&ha, &hb), (&hb, &ha)] {
        // The pinned entries go first (a flush leaves permanent ones).
        ip_in(&h.ns, &["neigh", "del", &other.ip, "dev", "eth0"]).unwrap();
        ip_in(&h.ns, &["neigh", "flush", "dev", "eth0"]).unwrap();
    }
    let pcap = lab.dir.join("underlay6.pcap");
    let capture = tshark::PcapCapture::start(&b, "ul", &pcap, &["udp", "port", "4789"]).unwrap();
    for (from, to) in [(&ha, &hb), (&hb, &ha)] {
        let r = ping(from, &to.ip, 3);
        assert!(r.received >= 2, "{}\n{}", r.output, ctl.stats_text());
    }
    for (from, to) in [(&ha, &hb), (&hb, &ha)] {
        tcp_transfer(from, to, 1 << 20, Duration::from_secs(30)).unwrap_or_else(|e| {
            panic!(
                "TCP {} -> {}: {e}\n{}",
                from.name,
                to.name,
                ctl.stats_text()
            )
        });
    }
    let pcap = capture.stop();
    check_with_codec(&pcap, &ha, &hb);
    if tshark::have_tshark() {
        check_with_tshark(&pcap, &ha, &hb);
    } else {
        eprintln!("tshark is not installed (scripts/test.sh installs it): capture not decoded");
    }
}

/// Every frame of `pcap` (classic pcap, Ethernet) read by the io crate's codec: outer IPv6
/// between the two VTEPs, UDP to 4789, its checksum verified over the IPv6 pseudo-header and
/// never zero (both sides at their defaults), VNI 100; ARP, ICMP and TCP inside from both
/// hosts; qbridge's datagrams with a flow label (the kernel's automatic one, per send socket).
fn check_with_codec(pcap: &std::path::Path, ha: &Host, hb: &Host) {
    use qbridge_io::vxlan::outer::decapsulate;
    let data = std::fs::read(pcap).unwrap();
    assert!(data.len() >= 24, "no pcap header");
    let le = data[..4] == [0xd4, 0xc3, 0xb2, 0xa1];
    let u32_at = |o: usize| {
        let b = [data[o], data[o + 1], data[o + 2], data[o + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32_at(20), 1, "not an Ethernet capture");
    let (mut at, mut frames) = (24, Vec::new());
    while at + 16 <= data.len() {
        let caplen = u32_at(at + 8) as usize;
        let f = &data[at + 16..(at + 16 + caplen).min(data.len())];
        frames.push(f.to_vec());
        at += 16 + caplen;
    }
    let mac = |m: &str| m.to_lowercase();
    let (mut from_q, mut from_k, mut inner_macs) = (0, 0, Vec::new());
    let mut labels = Vec::new();
    for f in &frames {
        assert_eq!(&f[12..14], &[0x86, 0xdd], "not outer IPv6: {f:02x?}");
        let d = decapsulate(&f[14..], false)
            .unwrap_or_else(|e| panic!("{e}: {:02x?}", &f[..f.len().min(80)]));
        assert_ne!(d.udp_checksum, 0, "a zero UDP checksum over IPv6");
        assert_eq!((d.vni.get(), d.outer.dport), (100, 4789));
        let (src, dst) = (d.outer.src.to_string(), d.outer.dst.to_string());
        match src.as_str() {
            LOCAL => {
                assert_eq!(dst, REMOTE);
                from_q += 1;
                labels.push(d.outer.flow_label);
            }
            REMOTE => {
                assert_eq!(dst, LOCAL);
                from_k += 1;
            }
            other => panic!("outer source {other}"),
        }
        let src_mac = d.inner[6..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        inner_macs.push((src, src_mac, u16::from_be_bytes([d.inner[12], d.inner[13]])));
    }
    assert!(
        from_q >= 8 && from_k >= 8,
        "{from_q} from qbridge, {from_k} from the kernel"
    );
    for (vtep, m) in [(LOCAL, mac(&ha.mac)), (REMOTE, mac(&hb.mac))] {
        for ethertype in [0x0806, 0x0800] {
            assert!(
                inner_macs
                    .iter()
                    .any(|(s, im, t)| s == vtep && *im == m && *t == ethertype),
                "no {ethertype:#06x} frame of {m} from {vtep}"
            );
        }
    }
    assert!(
        labels.iter().any(|l| *l != 0),
        "qbridge's datagrams carry no flow label"
    );
    eprintln!(
        "codec: {} datagrams ({from_q} from qbridge, {from_k} from the kernel), every UDP \
         checksum verified over IPv6",
        frames.len()
    );
}

/// tshark's reading: every frame outer Ethernet/IPv6/UDP to 4789 with VXLAN VNI 100 and an
/// inner Ethernet frame (ARP, ICMP, TCP from both hosts); nothing malformed, no bad IPv6-UDP,
/// inner IPv4, TCP or ICMP checksum.
fn check_with_tshark(pcap: &std::path::Path, ha: &Host, hb: &Host) {
    let d = tshark::decode(pcap, &["ip", "udp", "tcp"]).unwrap();
    let vx = "eth:ethertype:ipv6:udp:vxlan:eth:ethertype:";
    assert!(d.count(&format!("{vx}arp")) >= 2, "{:#?}", d.frames);
    assert!(d.count(&format!("{vx}ip:icmp")) >= 8, "{:#?}", d.frames);
    assert!(
        d.count(&format!("{vx}ip:tcp")) >= 50,
        "{} frames",
        d.frames.len()
    );
    for f in &d.frames {
        assert!(f.protocols.starts_with(vx), "{f:?}");
        assert_eq!(f.vni, [100], "{f:?}");
        assert_eq!(f.udp_dstport.first(), Some(&4789), "{f:?}");
    }
    for (m, inner_ip) in [(&ha.mac, &ha.ip), (&hb.mac, &hb.ip)] {
        assert!(
            d.frames.iter().any(
                |f| f.eth_src.get(1).is_some_and(|x| x.eq_ignore_ascii_case(m))
                    && f.ip_src.first() == Some(inner_ip)
            ),
            "no frame of {m}"
        );
    }
    assert!(
        d.errors.is_empty(),
        "tshark: malformed or bad checksums:\n{}",
        d.errors.join("\n")
    );
    let longest = d.frames.iter().map(|f| f.len).max().unwrap_or(0);
    assert!(longest <= 1570 + 14, "a {longest}-byte packet was captured");
    eprintln!(
        "tshark: {} VXLAN/IPv6 frames decoded, none malformed, no bad checksum",
        d.frames.len()
    );
}

/// Throughput of TCP over an IPv6 underlay, qbridge VTEP ↔ kernel VTEP and kernel ↔ kernel
/// (the same as `netns_vxlan.rs`'s, IPv6). A measurement, not a check; see
/// `scripts/bench-vxlan.sh` for the interleaved one.
#[test]
#[ignore]
fn vxlan6_throughput_against_the_kernel_pair() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut results = Vec::new();
    for qbridge_side in [true, false] {
        let mut lab = Lab::new("vx6bench");
        let Some((a, _b, ha, hb)) = lab_with_kernel_vtep(&mut lab) else {
            return;
        };
        let _ctl = if qbridge_side {
            Some(lab.daemon(&a, &batch()).unwrap())
        } else {
            support::kernel_vtep(&a, LOCAL, REMOTE, "qa", Some("ul")).unwrap();
            None
        };
        assert!(support::wait_until(Duration::from_secs(5), || {
            support::ping_ok(&ha, &hb.ip)
        }));
        let t = tcp_transfer(&ha, &hb, 200 << 20, Duration::from_secs(120)).unwrap();
        let u = tcp_transfer(&hb, &ha, 200 << 20, Duration::from_secs(120)).unwrap();
        results.push((qbridge_side, t.gbit_per_s(), u.gbit_per_s()));
    }
    for (q, t, u) in results {
        eprintln!(
            "{}: A->B {t:.2} Gbit/s, B->A {u:.2} Gbit/s",
            if q {
                "qbridge VTEP <-> kernel VTEP (IPv6)"
            } else {
                "kernel VTEP <-> kernel VTEP (IPv6)"
            }
        );
    }
}
