//! VXLAN in the eBPF fast path (issue 31 item 1, decision 73), against the kernel's own VTEP at
//! its defaults (root only): encapsulation (decision 73) and decapsulation (decision 77).
//!
//! ```text
//!  ha (10.21.0.1) ─ qa ┐                                   ┌ kb1 ─ hb (10.21.0.2)
//!     qbridge --fast-path on: br0: p1 (qa), vx0             kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 192.0.2.1 dev ul         vx0: kernel vxlan id 100
//!       fdb add HB dev vx0 dst 192.0.2.2 (static)
//!                  └── ul 192.0.2.1 ═══ veth (MTU 1550) ═══ ul 192.0.2.2 ──┘
//! ```
//!
//! ha's TCP to hb leaves qbridge encapsulated by the program (the flow's first frames by the
//! pipeline's socket): verified bytes both ways through real kernel TCP sockets, `show
//! fast-path` with the VXLAN flow and its hits. Then the remote moves (`fdb replace HB dev vx0
//! dst 192.0.2.3`) while ha pings hb every 10 ms: from the answer on, nothing more reaches the
//! kernel VTEP at 192.0.2.2.

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::{tcp_transfer, Lab};
use vxlan_rig::{rx_packets, u};

/// The picture above without qbridge: namespaces A and B joined by the underlay `ul` (MTU
/// 1550), host ha on A's `qa`, host hb behind B's kernel VTEP (bridge kbr with kb1 and vx0).
/// None, after saying why, when the kernel VTEP cannot be made.
fn underlay(
    lab: &mut Lab,
    a: &str,
    b: &str,
) -> Option<(String, String, support::Host, support::Host)> {
    let a = lab.netns(a).unwrap();
    let b = lab.netns(b).unwrap();
    vxlan_rig::underlay(lab, &a, &b, "1550");
    let ha = lab.host("ha", "10.21.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.21.0.2/24", &b, "kb1").unwrap();
    if let Err(e) = support::kernel_vtep(&b, "192.0.2.2", "192.0.2.1", "kb1", None) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return None;
    }
    Some((a, b, ha, hb))
}

#[test]
fn tcp_to_a_kernel_vtep_is_encapsulated_by_the_program() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxfast");
    let Some((a, b, ha, hb)) = underlay(&mut lab, "vxfa", "vxfb") else {
        return;
    };
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
fdb add {} dev vx0 dst 192.0.2.2
",
        hb.mac
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&ha, &hb.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits0 = u(&fp()["hits"]);

    // Verified TCP both ways (hb → ha carries ha's ACKs through the program).
    let t = tcp_transfer(&ha, &hb, 64 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let r = tcp_transfer(&hb, &ha, 16 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    let f = fp();
    eprintln!(
        "ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s; show fast-path: {f}",
        t.gbit_per_s(),
        r.gbit_per_s()
    );
    assert!(u(&f["flows"]) >= 1, "no flow: {f}");
    assert!(
        u(&f["hits"]) - hits0 > 500,
        "ha's TCP did not take the program: {f}\n{}",
        ctl.stats_text()
    );
    let text = ctl.cmd(&["show", "fast-path"]).unwrap();
    assert!(text.contains("vxlan"), "{text}");
    // The trace of such a frame names the VNI and the VTEP, and the install's own checks
    // say the program encapsulates it (issue 32).
    let t = ctl
        .cmd(&[
            "trace", "dev", "p1", "src", &ha.mac, "dst", &hb.mac, "ipv4", &ha.ip, &hb.ip, "tcp",
            "40000", "5201",
        ])
        .unwrap();
    assert!(
        t.contains("  vxlan    vx0: VNI 100 (the port's id), from 192.0.2.1 UDP "),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "to VTEP 192.0.2.2 port 4789 (its static entry for {})",
            hb.mac
        )),
        "{t}"
    );
    assert!(
        t.contains("  fast     cacheable: the install's checks pass on this frame")
            && t.contains("encapsulated in the program"),
        "{t}"
    );

    // The remote moves while ha pings hb: from the answer on, the kernel VTEP at 192.0.2.2
    // receives nothing more (the pipeline sends to 192.0.2.3, which nobody answers).
    let mut pinger = std::process::Command::new("ip")
        .args([
            "netns", "exec", &ha.ns, "ping", "-q", "-i", "0.01", "-W", "1", &hb.ip,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let hits1 = u(&fp()["hits"]);
    ctl.cmd(&["fdb", "replace", &hb.mac, "dev", "vx0", "dst", "192.0.2.3"])
        .unwrap();
    // (Frames already handed to the underlay at the answer arrive within microseconds.)
    std::thread::sleep(Duration::from_millis(50));
    let rx = rx_packets(&b, "vx0");
    std::thread::sleep(Duration::from_millis(1000));
    let rx_after = rx_packets(&b, "vx0");
    let _ = pinger.kill();
    let _ = pinger.wait();
    assert!(hits1 > hits0, "the pings were not on the fast path");
    assert_eq!(
        rx_after,
        rx,
        "frames reached the old remote after the answer\n{}",
        ctl.stats_text()
    );
}

/// Decapsulation (decision 77): hb's TCP to ha arrives from the kernel VTEP at its defaults (a
/// UDP checksum, CHECKSUM_PARTIAL over the veth; TCP super-frames whole) and is decapsulated by
/// `qb_vxlan_in` on qbridge's underlay: verified bytes through real kernel TCP, the program's
/// hits counted (vx0 learns nothing and has no static entry, so ha's answers are the
/// pipeline's: every hit is a decapsulation). Then `link del vx0` while hb pings ha every
/// 10 ms: from the answer on, ha receives nothing more.
#[test]
fn tcp_from_a_kernel_vtep_is_decapsulated_by_the_program() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxdec");
    let Some((a, _b, ha, hb)) = underlay(&mut lab, "vxda", "vxdb") else {
        return;
    };
    let batch = "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789 learning off
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
";
    let ctl = lab.daemon_args(&a, batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits0 = u(&fp()["hits"]);
    let r = tcp_transfer(&hb, &ha, 64 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    let f = fp();
    eprintln!("hb->ha {:.2} Gbit/s; show fast-path: {f}", r.gbit_per_s());
    assert!(
        u(&f["hits"]) - hits0 > 500,
        "hb's TCP was not decapsulated by the program: {f}\n{}",
        ctl.stats_text()
    );
    assert!(
        f["misses"].to_string().contains("decap-"),
        "no decapsulation counters: {f}"
    );

    // The port goes while hb pings ha: from the answer on, nothing reaches ha.
    let mut pinger = std::process::Command::new("ip")
        .args([
            "netns", "exec", &hb.ns, "ping", "-q", "-i", "0.01", "-W", "1", &ha.ip,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let hits1 = u(&fp()["hits"]);
    ctl.cmd(&["link", "del", "vx0"]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let rx = rx_packets(&ha.ns, &ha.ifname);
    std::thread::sleep(Duration::from_millis(1000));
    let rx_after = rx_packets(&ha.ns, &ha.ifname);
    let hits2 = u(&fp()["hits"]);
    let _ = pinger.kill();
    let _ = pinger.wait();
    assert!(hits1 > hits0, "the pings were not on the fast path");
    assert_eq!(
        rx_after,
        rx,
        "frames reached ha after the port was deleted (hits {hits1} -> {hits2})\n{}",
        ctl.stats_text()
    );
}

/// Decapsulation for an external port (decision 77): VNI 100 is VLAN 10 (`tunnel_info`), hb's
/// pings to ha are decapsulated by the program (its hits grow); `vlan del vid 10 dev vx0
/// tunnel_info` while hb pings every 10 ms: from the answer on, nothing reaches ha (the
/// pipeline drops an unmapped VNI, and the program no longer takes it). `trace live dev vx0`
/// meanwhile traces one of them: a watched port's frames are all left to its socket.
#[test]
fn a_vni_map_change_stops_the_programs_decapsulation_before_it_answers() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxdem");
    let Some((a, _b, ha, hb)) = underlay(&mut lab, "vxea", "vxeb") else {
        return;
    };
    let batch = "link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev qa
link add vx0 type vxlan external local 192.0.2.1 dev ul dstport 4789 learning off
link set dev p1 master br0
link set dev vx0 master br0
vlan add vid 10 dev p1 pvid untagged
vlan del vid 1 dev vx0
vlan add vid 10 dev vx0
vlan add vid 10 dev vx0 tunnel_info id 100
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 100
";
    let ctl = lab.daemon_args(&a, batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits0 = u(&fp()["hits"]);
    let mut pinger = std::process::Command::new("ip")
        .args([
            "netns", "exec", &hb.ns, "ping", "-q", "-i", "0.01", "-W", "1", &ha.ip,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let hits1 = u(&fp()["hits"]);
    // trace live on vx0: the program leaves a watched port's frames to its socket, where the
    // pipeline traces them.
    let out = std::process::Command::new(support::qbridge_bin())
        .arg("--socket")
        .arg(&ctl.socket)
        .args([
            "-j", "trace", "live", "dev", "vx0", "count", "1", "timeout", "5", "ipv4",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let traced: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["object"] == "trace")
        .collect();
    assert_eq!(traced.len(), 1, "trace live on vx0: {text}");
    assert_eq!(traced[0]["trace"]["in_port"], "vx0", "{text}");
    ctl.cmd(&["vlan", "del", "vid", "10", "dev", "vx0", "tunnel_info"])
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let rx = rx_packets(&ha.ns, &ha.ifname);
    std::thread::sleep(Duration::from_millis(1000));
    let rx_after = rx_packets(&ha.ns, &ha.ifname);
    let _ = pinger.kill();
    let _ = pinger.wait();
    let f = fp();
    assert!(
        hits1 > hits0 + 20,
        "hb's pings were not decapsulated by the program: {f}\n{}",
        ctl.stats_text()
    );
    assert_eq!(
        rx_after,
        rx,
        "frames reached ha after the VNI map changed: {f}\n{}",
        ctl.stats_text()
    );
}
