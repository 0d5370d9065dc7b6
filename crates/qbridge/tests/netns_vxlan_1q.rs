//! VLAN ↔ VNI on a VLAN-filtering bridge against the kernel's VXLAN (root only): the shape of
//! the kernel's `vxlan_bridge_1q.sh` and `q_in_vni.sh`, with qbridge as one VTEP and the
//! "traditional" kernel model as the other (this kernel has no 8021q and no bridge VLAN
//! filtering): one kernel vxlan device per VNI, each in its own VLAN-unaware kernel bridge.
//!
//! ```text
//!  a10 (10.30.0.1) ─ qa10 ┐ daemon A: br0 (vlan_filtering 1)   ┌ vx1000 (id 1000) ─ kbr1000 ─ kb10 ─ b10 (10.30.0.2)
//!  a20 (10.30.0.3) ─ qa20 ┤   p10 pvid 10, p20 pvid 20,        ├ vx2000 (id 2000) ─ kbr2000 ─ kb20 ─ b20 (10.30.0.4)
//!  a30 (10.30.0.5) ─ qa30 ┘   p30 pvid 30 (no VNI)             │  both nolearning, flood list 192.0.2.1
//!                             vx0 external: 10↔1000, 20↔2000   │
//!                             └── ul 192.0.2.1 ═══ veth (MTU 1550) ═══ ul 192.0.2.2
//! ```
//!
//! All five hosts share one IP subnet, so any frame crossing between VLANs would show as a
//! ping answered. Checked: pings per VLAN both ways; a host of VLAN 10 cannot reach VNI
//! 2000's host; VLAN 30, tagged on vx0 but with no VNI, leaves nowhere and is counted
//! `vxlan_unmapped_vlan`; a datagram of an unmapped VNI is counted `vxlan_unmapped_vni`;
//! tshark decodes VNI 1000 and 2000 with untagged inner frames and nothing malformed; a 100 MB
//! verified TCP transfer in VLAN 10; `fdb show` prints the learned remote with its VNI.
//!
//! A second test makes the port `vnifilter` with VNI 1000 listed: VLAN 20's VNI 2000 does
//! not cross (counted both ways) until `vni add dev vx0 vni 2000`, live.
//!
//! The third test is `q_in_vni.sh`'s: an 802.1ad bridge whose `dot1q-tunnel` customer port
//! puts the customer into S-VLAN 100, mapped to VNI 5000; the customer's C-tag 10 stays inside
//! the VXLAN payload, the far side gets it with the C-tag; 1500-byte pings inside C-VLAN 10
//! with the underlay's MTU raised (1600). The customer's VLAN devices on both ends are
//! qbridge's (no 8021q here).

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::{assert_ping, exec_in, host_on, ping, tcp_transfer, Capture, Ctl, Lab};
use vxlan_rig::{datagrams_of, kernel_vtep, start_dump, stop_dump, tshark_fields, underlay};

const A: &str = "\
link add br0 type bridge vlan_filtering 1
link add p10 type afpacket dev qa10
link add p20 type afpacket dev qa20
link add p30 type afpacket dev qa30
link add vx0 type vxlan external local 192.0.2.1 dstport 4789
link set dev p10 master br0
link set dev p20 master br0
link set dev p30 master br0
link set dev vx0 master br0
vlan add vid 10 dev p10 pvid untagged
vlan add vid 20 dev p20 pvid untagged
vlan add vid 30 dev p30 pvid untagged
vlan del vid 1 dev vx0
vlan add vid 10 dev vx0
vlan add vid 20 dev vx0
vlan add vid 30 dev vx0
vlan add vid 10 dev vx0 tunnel_info id 1000
vlan add vid 20 dev vx0 tunnel_info id 2000
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 1000
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 2000
";

fn drops(ctl: &Ctl, port: &str, reason: &str) -> u64 {
    let v = ctl.json(&["-s", "link", "show", "dev", port]).unwrap();
    v[0]["stats"]["drops"][reason].as_u64().unwrap_or(0)
}

/// Stops the dump and decodes it with tshark: per datagram `VNI|eth.src…|vlan.id…|malformed`
/// (the fields of every layer, comma-separated: outer first). `None` without tshark.
fn decode(dump: std::process::Child, file: &std::path::Path) -> Option<Vec<String>> {
    stop_dump(dump);
    tshark_fields(file, &["vxlan.vni", "eth.src", "vlan.id", "_ws.malformed"])
}

#[test]
fn vlans_map_to_vnis_against_kernel_vteps() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx1q");
    let a = lab.netns("vx1qa").unwrap();
    let b = lab.netns("vx1qb").unwrap();
    underlay(&mut lab, &a, &b, "1550");
    let a10 = lab.host("a10", "10.30.0.1/24", &a, "qa10").unwrap();
    let a20 = lab.host("a20", "10.30.0.3/24", &a, "qa20").unwrap();
    let a30 = lab.host("a30", "10.30.0.5/24", &a, "qa30").unwrap();
    let b10 = lab.host("b10", "10.30.0.2/24", &b, "kb10").unwrap();
    let b20 = lab.host("b20", "10.30.0.4/24", &b, "kb20").unwrap();
    for (dev, vni, br, port) in [
        ("vx1000", "1000", "kbr1000", "kb10"),
        ("vx2000", "2000", "kbr2000", "kb20"),
    ] {
        if let Err(e) = kernel_vtep(&b, dev, vni, br, port) {
            eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
            return;
        }
    }
    let ctl = lab.daemon(&a, A).unwrap();
    let pcap = lab.dir.join("ul.pcap");
    let dump = start_dump(&b, &pcap, &[]);

    // Each VLAN reaches its VNI's host, both ways.
    assert_ping(&a10, &b10, 3);
    assert_ping(&b10, &a10, 3);
    assert_ping(&a20, &b20, 3);
    assert_ping(&b20, &a20, 3);
    // Nothing crosses between VLANs: one subnet, but VLAN 10 does not reach VNI 2000's
    // host, nor VNI 1000's host VLAN 20's.
    assert_eq!(
        ping(&a10, &b20.ip, 2).received,
        0,
        "VLAN 10 reached VNI 2000"
    );
    assert_eq!(
        ping(&b10, &a20.ip, 2).received,
        0,
        "VNI 1000 reached VLAN 20"
    );
    // VLAN 30 is tagged on vx0 but has no VNI: its frames (ARP) leave nowhere, counted.
    let before = drops(&ctl, "vx0", "vxlan_unmapped_vlan");
    assert_eq!(ping(&a30, &b10.ip, 3).received, 0, "VLAN 30 crossed");
    // The kernel's last ARP retry can leave a30 as ping gives up: wait for it to be counted.
    let mut after = before;
    support::wait_until(Duration::from_secs(5), || {
        after = drops(&ctl, "vx0", "vxlan_unmapped_vlan");
        after >= before + 3
    });
    assert!(
        after >= before + 3,
        "vxlan_unmapped_vlan {before} -> {after}\n{}",
        ctl.stats_text()
    );

    if let Some(dump) = dump {
        if let Some(lines) = decode(dump, &pcap) {
            // VNI 1000 carries a10's frames, VNI 2000 a20's, untagged inside (no vlan.id),
            // nothing malformed; a30's never left.
            let l10 = datagrams_of(&lines, &a10.mac);
            let l20 = datagrams_of(&lines, &a20.mac);
            assert!(!l10.is_empty() && !l20.is_empty(), "{lines:?}");
            for (f, vni) in l10
                .iter()
                .map(|f| (f, "1000"))
                .chain(l20.iter().map(|f| (f, "2000")))
            {
                assert_eq!(f.first().map(String::as_str), Some(vni), "{f:?}");
                assert_eq!(f.get(2).map_or("", String::as_str), "", "inner tag: {f:?}");
            }
            assert!(datagrams_of(&lines, &a30.mac).is_empty(), "{lines:?}");
            assert!(
                lines
                    .iter()
                    .all(|l| l.split('|').nth(3).unwrap_or("").is_empty()),
                "malformed: {lines:?}"
            );
        } else {
            eprintln!("(no tshark decode: tshark missing or failed)");
        }
    }

    // The remote VTEP learned per VNI, shown with its VNI.
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains("00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 1000 self permanent"),
        "{show}"
    );
    assert!(
        show.contains(&format!(
            "{} dev vx0 dst 192.0.2.2 vni 1000 self\n",
            b10.mac.to_lowercase()
        )),
        "{show}"
    );
    assert!(
        show.contains(&format!(
            "{} dev vx0 dst 192.0.2.2 vni 2000 self\n",
            b20.mac.to_lowercase()
        )),
        "{show}"
    );
    let tun = ctl.cmd(&["vlan", "tunnelshow"]).unwrap();
    assert!(tun.contains("vx0               10           1000"), "{tun}");

    // 100 MB, verified, in VLAN 10.
    let t = tcp_transfer(&a10, &b10, 100 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP a10 -> b10: {e}\n{}", ctl.stats_text()));
    eprintln!("VLAN 10 over VNI 1000: {:.2} Gbit/s", t.gbit_per_s());

    // A datagram of a VNI mapped to no VLAN: counted, not forwarded.
    let before = drops(&ctl, "vx0", "vxlan_unmapped_vni");
    let send = "import socket\n\
                s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                f=bytes.fromhex('ffffffffffff020000000009'+'88b5')+bytes(46)\n\
                s.sendto(bytes([8,0,0,0,0,0x0b,0xb8,0])+f,('192.0.2.1',4789))\n";
    if exec_in(&b, "python3", &["-c", send]).is_ok() {
        assert!(
            support::wait_until(Duration::from_secs(3), || drops(
                &ctl,
                "vx0",
                "vxlan_unmapped_vni"
            ) > before),
            "{}",
            ctl.stats_text()
        );
        assert!(!ctl.fdb_has("02:00:00:00:00:09", "vx0").unwrap());
    }

    // `fdb flush dev vx0` empties the learned VTEPs (the flood lists stay), and learned ones
    // age with the bridge's ageing_time.
    let learned = |ctl: &Ctl| {
        let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
        show.lines()
            .filter(|l| l.contains(" dst ") && l.ends_with(" self"))
            .count()
    };
    assert_ping(&a10, &b10, 1);
    assert!(learned(&ctl) >= 1);
    ctl.cmd(&["fdb", "flush", "dev", "vx0"]).unwrap();
    assert_eq!(learned(&ctl), 0);
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains("dst 192.0.2.2 vni 1000 self permanent"),
        "{show}"
    );
    ctl.cmd(&[
        "link",
        "set",
        "dev",
        "br0",
        "type",
        "bridge",
        "ageing_time",
        "1",
    ])
    .unwrap();
    assert_ping(&a10, &b10, 1);
    assert!(
        support::wait_until(Duration::from_secs(5), || learned(&ctl) == 0),
        "learned VTEPs did not age in 1 s: {}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap()
    );
}

/// `vnifilter`: only listed VNIs cross, and `vni add` takes effect live. VLAN 20 maps to VNI
/// 2000, which is not listed at first: its frames are `vxlan_unmapped_vlan`, and b20's
/// datagrams `vxlan_wrong_vni`; after `vni add dev vx0 vni 2000` a20 reaches b20.
#[test]
fn vnifilter_admits_listed_vnis_live() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxvf");
    let a = lab.netns("vxvfa").unwrap();
    let b = lab.netns("vxvfb").unwrap();
    underlay(&mut lab, &a, &b, "1550");
    let a10 = lab.host("a10", "10.30.0.1/24", &a, "qa10").unwrap();
    let a20 = lab.host("a20", "10.30.0.3/24", &a, "qa20").unwrap();
    let b10 = lab.host("b10", "10.30.0.2/24", &b, "kb10").unwrap();
    let b20 = lab.host("b20", "10.30.0.4/24", &b, "kb20").unwrap();
    for (dev, vni, br, port) in [
        ("vx1000", "1000", "kbr1000", "kb10"),
        ("vx2000", "2000", "kbr2000", "kb20"),
    ] {
        if let Err(e) = kernel_vtep(&b, dev, vni, br, port) {
            eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
            return;
        }
    }
    let batch: String = A
        .replace("type vxlan external", "type vxlan vnifilter")
        .lines()
        .filter(|l| !l.contains("p30"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        + "vni add dev vx0 vni 1000\n";
    let ctl = lab.daemon(&a, &batch).unwrap();
    assert_ping(&a10, &b10, 2);
    let (vlan0, vni0) = (
        drops(&ctl, "vx0", "vxlan_unmapped_vlan"),
        drops(&ctl, "vx0", "vxlan_wrong_vni"),
    );
    assert_eq!(
        ping(&a20, &b20.ip, 2).received,
        0,
        "VNI 2000 crossed unlisted"
    );
    assert_eq!(
        ping(&b20, &a20.ip, 2).received,
        0,
        "VNI 2000 crossed unlisted"
    );
    let (vlan1, vni1) = (
        drops(&ctl, "vx0", "vxlan_unmapped_vlan"),
        drops(&ctl, "vx0", "vxlan_wrong_vni"),
    );
    assert!(
        vlan1 > vlan0 && vni1 > vni0,
        "unmapped_vlan {vlan0} -> {vlan1}, wrong_vni {vni0} -> {vni1}\n{}",
        ctl.stats_text()
    );
    ctl.cmd(&["vni", "add", "dev", "vx0", "vni", "2000"])
        .unwrap();
    assert_eq!(
        ctl.cmd(&["vni", "show"]).unwrap(),
        "dev               vni\nvx0               1000\n                  2000\n"
    );
    assert_ping(&a20, &b20, 2);
    assert_ping(&b20, &a20, 2);
    assert_eq!(
        ping(&a10, &b20.ip, 2).received,
        0,
        "VLAN 10 reached VNI 2000"
    );
}

const PE: &str = "\
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add c1 type afpacket dev c1
link add vx0 type vxlan external local 192.0.2.1 dstport 4789
link set dev c1 master pe vlan_mode dot1q-tunnel tag 100
link set dev vx0 master pe
vlan del vid 1 dev vx0
vlan add vid 100 dev vx0
vlan add vid 100 dev vx0 tunnel_info id 5000
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 5000
";

/// A customer end: the kernel's own eth0 (untagged) and qbridge's VLAN device eth0.10.
const CUST: &str = "\
link add eth0 type afpacket dev eth0
link add link eth0 name eth0.10 type vlan id 10
";

#[test]
fn q_in_vni_keeps_the_customer_tag_inside() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qinvni");
    let pe = lab.netns("qvpe").unwrap();
    let far = lab.netns("qvfar").unwrap();
    let nc = lab.netns("qvcust").unwrap();
    let nf = lab.netns("qvfh").unwrap();
    // The inner frame is 1518 bytes with its C-tag: 1554 bytes of outer IP.
    underlay(&mut lab, &pe, &far, "1600");
    lab.veth(&nc, "eth0", &pe, "c1").unwrap();
    lab.veth(&nf, "eth0", &far, "kb1").unwrap();
    if let Err(e) = kernel_vtep(&far, "vx5000", "5000", "kbr", "kb1") {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    let ctl = lab.daemon(&pe, PE).unwrap();
    lab.daemon(&nc, CUST).unwrap();
    lab.daemon(&nf, CUST).unwrap();
    let c0 = host_on("cust/eth0", &nc, "eth0", "10.61.0.1/24");
    let c10 = host_on("cust/eth0.10", &nc, "eth0.10", "10.62.0.1/24");
    let f0 = host_on("far/eth0", &nf, "eth0", "10.61.0.2/24");
    let f10 = host_on("far/eth0.10", &nf, "eth0.10", "10.62.0.2/24");

    let pcap = lab.dir.join("ul.pcap");
    let dump = start_dump(&far, &pcap, &[]);
    let cap = Capture::start(&nf, "eth0", 0).unwrap();
    assert_ping(&c0, &f0, 3);
    assert_ping(&c10, &f10, 3);
    assert_ping(&f10, &c10, 3);
    let got = cap.finish().unwrap();
    // The far host gets the customer's frames as sent: C-VLAN 10 with its C-tag, untagged
    // without one (the S-tag became the VNI).
    assert_eq!(
        got.stacks_from(&c10.mac),
        [vec![(0x8100, 10)]],
        "{}",
        got.summary()
    );
    assert_eq!(got.stacks_from(&c0.mac), [vec![]], "{}", got.summary());

    // 1500-byte IP packets with DF inside C-VLAN 10, both ways.
    for (from, to) in [(&c10, &f10), (&f10, &c10)] {
        let out = exec_in(
            &from.ns,
            "ping",
            &[
                "-I",
                &from.ifname,
                "-c",
                "2",
                "-W",
                "2",
                "-M",
                "do",
                "-s",
                "1472",
                &to.ip,
            ],
        );
        assert!(
            out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
            "1500-byte ping {} -> {}: {out:?}\n{}",
            from.name,
            to.name,
            ctl.stats_text()
        );
    }

    if let Some(dump) = dump {
        if let Some(lines) = decode(dump, &pcap) {
            // In VNI 5000: c10's frames carry C-tag 10 (and no S-tag), c0's none.
            let of = |mac: &str| datagrams_of(&lines, mac);
            let l10 = of(&c10.mac);
            assert!(!l10.is_empty(), "{lines:?}");
            for f in &l10 {
                assert_eq!((f[0].as_str(), f[2].as_str()), ("5000", "10"), "{f:?}");
            }
            for f in of(&c0.mac) {
                assert_eq!((f[0].as_str(), f[2].as_str()), ("5000", ""), "{f:?}");
            }
            assert!(
                lines
                    .iter()
                    .all(|l| l.split('|').nth(3).unwrap_or("").is_empty()),
                "malformed: {lines:?}"
            );
        } else {
            eprintln!("(no tshark decode: tshark missing or failed)");
        }
    }
}

/// Throughput of one TCP stream, 200 MiB verified each way, between a host in VLAN 10 of a
/// qbridge VTEP and a host behind a kernel VTEP (VNI 1000), with qbridge's port `external`
/// (VLAN 10 ↔ VNI 1000: a tag removed per frame sent, one pushed per frame received) and then
/// with one VNI (`id 1000` on a VLAN-unaware bridge), in the same run. A measurement, not a
/// check (docs/benchmarks-live.md):
/// `cargo test --release --locked -p qbridge --test netns_vxlan_1q -- --ignored --nocapture`.
#[test]
#[ignore]
fn vlan_to_vni_throughput_against_one_vni() {
    skip_unless_netns!();
    let _serial = support::serial();
    let bytes = 200u64 << 20;
    let one_vni = "\
link add br0 type bridge vlan_filtering 0
link add p10 type afpacket dev qa10
link add vx0 type vxlan id 1000 local 192.0.2.1 dstport 4789
link set dev p10 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
";
    let mut results = Vec::new();
    for (mode, batch) in [("external, VLAN 10 <-> VNI 1000", A), ("id 1000", one_vni)] {
        let mut lab = Lab::new("vx1qbench");
        let a = lab.netns("vx1qa").unwrap();
        let b = lab.netns("vx1qb").unwrap();
        underlay(&mut lab, &a, &b, "1550");
        let a10 = lab.host("a10", "10.30.0.1/24", &a, "qa10").unwrap();
        let b10 = lab.host("b10", "10.30.0.2/24", &b, "kb10").unwrap();
        if let Err(e) = kernel_vtep(&b, "vx1000", "1000", "kbr1000", "kb10") {
            eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
            return;
        }
        // The external batch names ports whose interfaces this lab lacks: only what is used.
        let batch: String = batch
            .lines()
            .filter(|l| !l.contains("p20") && !l.contains("p30"))
            .map(|l| format!("{l}\n"))
            .collect();
        let _ctl = lab.daemon(&a, &batch).unwrap();
        assert!(support::wait_until(Duration::from_secs(5), || {
            support::ping_ok(&a10, &b10.ip)
        }));
        let t = tcp_transfer(&a10, &b10, bytes, Duration::from_secs(120)).unwrap();
        let u = tcp_transfer(&b10, &a10, bytes, Duration::from_secs(120)).unwrap();
        results.push((mode, t.gbit_per_s(), u.gbit_per_s()));
    }
    for (mode, t, u) in results {
        eprintln!("qbridge {mode} <-> kernel VTEP: A->B {t:.2} Gbit/s, B->A {u:.2} Gbit/s");
    }
}
