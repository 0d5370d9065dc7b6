//! VXLAN ports against the kernel's own VXLAN (root only), the topology of the kernel's
//! `vxlan_bridge_1d.sh` cut to two VTEPs:
//!
//! ```text
//!  ha (10.20.0.1) ─ qa ┐                                   ┌ kb1 ─ hb (10.20.0.2)
//!     daemon A: br0 (vlan_filtering 0): p1 (qa), vx0        kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 192.0.2.1 dev ul         vx0: kernel vxlan id 100
//!            tos inherit
//!                  └── ul 192.0.2.1 ═══ veth (MTU 1550) ═══ ul 192.0.2.2 ──┘  nolearning
//! ```
//!
//! Each side's flood list names the other VTEP; nothing else is configured. Checked: ARP
//! floods and pings both ways; a 1500-byte ping with DF (the underlay MTU raised by the 50
//! bytes of outer headers, as the kernel's selftests do); 100 MiB of verified TCP each way;
//! qbridge's FDB learns hb's MAC on vx0 and `fdb show` prints its VTEP (`dst 192.0.2.2`);
//! tcpdump on the underlay decodes VXLAN (flags I, VNI 100) with the inner frame, and
//! tshark decodes a capture of the ARP, pings and a short TCP exchange (outer IPv4/UDP 4789,
//! VNI 100, inner ARP/ICMP/TCP from both hosts) with nothing malformed and no bad IPv4,
//! UDP, TCP or ICMP checksum, and `tos inherit` giving EF pings an EF outer header
//! ([`check_capture`]);
//! `dev` bound to the underlay, a missing `dev` refused with its reason; datagrams
//! of another VNI and non-VXLAN datagrams are counted drops, not frames. The kernel VTEP is at
//! its defaults: its transmit checksum offload and TSO on, so over the veth underlay its inner
//! checksums arrive partial and its super-frames whole, which qbridge's port restores
//! (docs/semantics.md §R.5; before, TCP from hb never got through without `ethtool -K vx0 tx
//! off`).

mod support;

use std::time::Duration;
use support::{exec_in, ip_in, ping, tcp_transfer, tshark, Host, Lab};

const A: &str = "\
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789 tos inherit
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
";

#[test]
fn vxlan_port_talks_to_a_kernel_vtep() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxlan");
    let a = lab.netns("vxa").unwrap();
    let b = lab.netns("vxb").unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, "192.0.2.1/24"), (&b, "192.0.2.2/24")] {
        ip_in(ns, &["addr", "add", addr, "dev", "ul"]).unwrap();
        // The 50 bytes of outer headers on top of a 1500-byte inner MTU.
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
    }
    let ha = lab.host("ha", "10.20.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.20.0.2/24", &b, "kb1").unwrap();
    // The far VTEP: a kernel vxlan device in a kernel bridge.
    if let Err(e) = support::kernel_vtep(&b, "192.0.2.2", "192.0.2.1", "kb1", None) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    let ctl = lab.daemon(&a, A).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&ha, &hb.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );

    // 100 MiB of verified TCP both ways.
    let t = tcp_transfer(&ha, &hb, 100 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let u = tcp_transfer(&hb, &ha, 100 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "VXLAN qbridge <-> kernel VTEP: ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s",
        t.gbit_per_s(),
        u.gbit_per_s()
    );

    // The underlay as tshark sees it, from ARP to a short TCP exchange. From here on the
    // underlay devices have no transmit checksum offload: every outer UDP checksum is
    // complete on the wire, for tshark to judge (a veth completes none), and each datagram
    // is captured alone (qbridge's port stops using `UDP_SEGMENT`, which needs the offload;
    // the 100 MiB above used it). The hosts forget each other, so ARP runs again.
    for ns in [&a, &b] {
        exec_in(ns, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    }
    for h in [&ha, &hb] {
        ip_in(&h.ns, &["neigh", "flush", "dev", "eth0"]).unwrap();
    }
    let capture = tshark::have_tshark().then(|| {
        tshark::PcapCapture::start(
            &b,
            "ul",
            &lab.dir.join("underlay.pcap"),
            &["udp", "port", "4789"],
        )
        .unwrap()
    });
    // And as tcpdump prints it while the first pings cross.
    let dump = std::process::Command::new("ip")
        .args([
            "netns", "exec", &b, "tcpdump", "-nn", "-e", "-v", "-l", "-i", "ul", "-c", "8",
        ])
        .args(["udp", "port", "4789"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    std::thread::sleep(Duration::from_millis(700));

    // Flood (ARP) and ping, both ways.
    let r = ping(&ha, &hb.ip, 3);
    assert!(
        r.received >= 2,
        "ha -> hb over VXLAN: {}\n{}",
        r.output,
        ctl.stats_text()
    );
    let r = ping(&hb, &ha.ip, 3);
    assert!(
        r.received >= 2,
        "hb -> ha over VXLAN: {}\n{}",
        r.output,
        ctl.stats_text()
    );

    if let Ok(mut child) = dump {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while child.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let out = child
            .wait_with_output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&out);
        // Outer UDP to 4789, VXLAN with the I flag and VNI 100, an inner frame of one of the
        // hosts, in both directions.
        assert!(text.contains("VXLAN, flags [I] (0x08), vni 100"), "{text}");
        // qbridge sends from the ports of its send sockets (by inner flow), to 4789.
        assert!(text.contains(" > 192.0.2.2.4789: VXLAN"), "{text}");
        assert!(text.contains(" > 192.0.2.1.4789: VXLAN"), "{text}");
        assert!(text.contains(&ha.mac.to_lowercase()), "{text}");
        assert!(!text.to_lowercase().contains("malformed"), "{text}");
    }

    // A 1500-byte IP packet inside, DF set: the tunnel carries a full inner MTU.
    let out = exec_in(
        &ha.ns,
        "ping",
        &["-c", "2", "-W", "2", "-M", "do", "-s", "1472", &hb.ip],
    );
    assert!(
        out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
        "1500-byte ping: {out:?}\n{}",
        ctl.stats_text()
    );
    let out = exec_in(
        &hb.ns,
        "ping",
        &["-c", "2", "-W", "2", "-M", "do", "-s", "1472", &ha.ip],
    );
    assert!(
        out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
        "1500-byte ping back: {out:?}"
    );

    // `tos inherit`: an EF-marked ping's datagrams carry DSCP EF outside too.
    let out = exec_in(
        &ha.ns,
        "ping",
        &["-c", "2", "-W", "2", "-Q", "0xb8", &hb.ip],
    );
    assert!(
        out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
        "{out:?}"
    );
    // A short verified TCP exchange inside the capture, then tshark's reading of it.
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
    if let Some(cap) = capture {
        check_capture(&cap.stop(), &ha, &hb);
    } else {
        eprintln!("tshark is not installed (scripts/test.sh installs it): capture not decoded");
    }

    // qbridge learned hb behind vx0, and its VTEP.
    assert!(ctl.fdb_has(&hb.mac, "vx0").unwrap(), "{:?}", ctl.fdb());
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains("00:00:00:00:00:00 dev vx0 dst 192.0.2.2 self permanent"),
        "{show}"
    );
    assert!(
        show.contains(&format!(
            "{} dev vx0 dst 192.0.2.2 self\n",
            hb.mac.to_lowercase()
        )),
        "{show}"
    );

    let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        j.as_array().into_iter().flatten().any(|e| e["mac"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(&hb.mac))
            && e["dst"] == "192.0.2.2"
            && e["flags"][0] == "self"),
        "{j}"
    );

    // `dev` names a device of the namespace, or the port is refused with the reason.
    let e = ctl
        .cmd(&[
            "link",
            "add",
            "vx1",
            "type",
            "vxlan",
            "id",
            "5",
            "local",
            "192.0.2.1",
            "dstport",
            "4790",
            "dev",
            "nosuch0",
        ])
        .unwrap_err();
    assert!(
        e.contains("dev nosuch0") && e.contains("no such device in this namespace"),
        "{e}"
    );
    assert!(ctl.cmd(&["link", "show", "dev", "vx1"]).is_err());
    let j = ctl.json(&["link", "show", "dev", "vx0"]).unwrap();
    assert_eq!(j[0]["backend"]["link"], "ul", "{j}");
    assert_eq!(j[0]["backend"]["tos"], "inherit", "{j}");

    // Another VNI and a datagram that is not VXLAN: counted drops, nothing forwarded.
    let send = "import socket,sys\n\
                s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                f=bytes.fromhex('ffffffffffff020000000009'+'88b5')+bytes(46)\n\
                s.sendto(bytes([8,0,0,0,0,0,101,0])+f,('192.0.2.1',4789))\n\
                s.sendto(bytes(5),('192.0.2.1',4789))\n\
                s.sendto(bytes([0,0,0,0,0,0,100,0])+f,('192.0.2.1',4789))\n";
    if exec_in(&b, "python3", &["-c", send]).is_ok() {
        let ok = support::wait_until(Duration::from_secs(3), || {
            let s = ctl.stats_text();
            s.contains("vxlan_wrong_vni 1") && s.contains("vxlan_malformed 2")
        });
        assert!(ok, "{}", ctl.stats_text());
        assert!(
            !ctl.fdb_has("02:00:00:00:00:09", "vx0").unwrap(),
            "a dropped datagram's source was learned"
        );
    }
}

/// tshark's reading of the underlay capture `pcap` (datagrams to and from 4789): every frame
/// is outer Ethernet/IPv4/UDP to 4789 with VXLAN VNI 100 and an inner Ethernet frame; ARP,
/// ICMP and TCP inside, from both hosts behind their VTEPs; nothing malformed, no bad IPv4,
/// UDP, TCP or ICMP checksum, inner or outer (the underlays have `tx off` meanwhile: with the
/// offload, both VTEPs leave the outer UDP checksum partial, which a veth never completes and
/// the receiving kernel accepts as it is; a NIC would fill it in).
fn check_capture(pcap: &std::path::Path, ha: &Host, hb: &Host) {
    let d = tshark::decode(pcap, &["ip", "udp", "tcp"]).unwrap();
    tshark::check_vxlan(
        &d,
        100,
        &[(&ha.mac, "192.0.2.1"), (&hb.mac, "192.0.2.2")],
        100,
    );
    // `tos inherit` on qbridge's side: the outer TOS is the inner one (EF pings: 0xb8);
    // the kernel VTEP's default (`tos 0`) sends 0.
    for f in &d.frames {
        if f.protocols.ends_with(":ip:icmp:data")
            && f.ip_src.first().map(String::as_str) == Some("192.0.2.1")
        {
            assert_eq!(f.dsfield.len(), 2, "{f:?}");
            assert_eq!(
                f.dsfield[0], f.dsfield[1],
                "outer TOS is not the inner one: {f:?}"
            );
        }
    }
    assert!(
        d.frames.iter().any(
            |f| f.ip_src.first().map(String::as_str) == Some("192.0.2.1")
                && f.dsfield == [0xb8, 0xb8]
        ),
        "no EF datagram from qbridge"
    );
    // Each datagram was captured alone (no super-packet of which tshark would read only the
    // first datagram): at most the underlay's MTU and its Ethernet header.
    let longest = d.frames.iter().map(|f| f.len).max().unwrap_or(0);
    assert!(longest <= 1550 + 14, "a {longest}-byte packet was captured");
    eprintln!(
        "tshark: {} VXLAN frames decoded, none malformed, no bad checksum; longest {longest} bytes",
        d.frames.len()
    );
}

/// Throughput of one TCP stream, 200 MB verified each way, through a qbridge VTEP ↔ kernel
/// VTEP pair and through a kernel ↔ kernel pair on the same kind of underlay (veth, MTU 1550),
/// one after the other. A measurement, not a check: run it on a quiet machine, release
/// build, as docs/benchmarks-live.md says:
/// `cargo test --release --locked -p qbridge --test netns_vxlan -- --ignored --nocapture`.
#[test]
#[ignore]
fn vxlan_throughput_against_the_kernel_pair() {
    skip_unless_netns!();
    let _serial = support::serial();
    let bytes = 200u64 << 20;
    let mut results = Vec::new();
    for qbridge_side in [true, false] {
        let mut lab = Lab::new("vxbench");
        let a = lab.netns("vxa").unwrap();
        let b = lab.netns("vxb").unwrap();
        lab.veth(&a, "ul", &b, "ul").unwrap();
        for (ns, addr) in [(&a, "192.0.2.1/24"), (&b, "192.0.2.2/24")] {
            ip_in(ns, &["addr", "add", addr, "dev", "ul"]).unwrap();
            ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
        }
        let ha = lab.host("ha", "10.20.0.1/24", &a, "qa").unwrap();
        let hb = lab.host("hb", "10.20.0.2/24", &b, "kb1").unwrap();
        if let Err(e) = support::kernel_vtep(&b, "192.0.2.2", "192.0.2.1", "kb1", None) {
            eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
            return;
        }
        let _ctl = if qbridge_side {
            Some(lab.daemon(&a, A).unwrap())
        } else {
            support::kernel_vtep(&a, "192.0.2.1", "192.0.2.2", "qa", None).unwrap();
            None
        };
        assert!(support::wait_until(Duration::from_secs(5), || {
            support::ping_ok(&ha, &hb.ip)
        }));
        let t = tcp_transfer(&ha, &hb, bytes, Duration::from_secs(120)).unwrap();
        let u = tcp_transfer(&hb, &ha, bytes, Duration::from_secs(120)).unwrap();
        results.push((qbridge_side, t.gbit_per_s(), u.gbit_per_s()));
    }
    for (q, t, u) in results {
        eprintln!(
            "{}: A->B {t:.2} Gbit/s, B->A {u:.2} Gbit/s",
            if q {
                "qbridge VTEP <-> kernel VTEP"
            } else {
                "kernel VTEP <-> kernel VTEP"
            }
        );
    }
}
