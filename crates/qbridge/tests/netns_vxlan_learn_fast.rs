//! Learned VXLAN remotes in the eBPF fast path (issue 31 item 1, decision 83), against the
//! kernel's VTEP at its defaults (root only). qbridge's vx0 is at ITS defaults too: it learns
//! hb's remote from received frames, and only the flood list is configured.
//!
//! ```text
//!  ha (10.83.0.1) ─ qa ┐                                   ┌ kb1 ─ hb (10.83.0.2)
//!     qbridge --fast-path on: br0: p1 (qa), vx0             kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 192.0.2.1 dev ul         vx0: kernel vxlan id 100
//!       fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2      local 192.0.2.2 (then .3)
//!                  └── ul 192.0.2.1 ═══ veth ═══ ul 192.0.2.2, 192.0.2.3 ──┘
//! ```
//!
//! Verified TCP both ways with the program's hits growing in both directions (encapsulation
//! to the learned remote, decapsulation from the learned source); then the kernel VTEP's
//! address changes to 192.0.2.3 while ha pings hb every 10 ms: once qbridge learned the move,
//! no frame goes to 192.0.2.2 (an iptables counter in B). Ageing: with `ageing_time 4`, pings
//! for 10 s keep the learned entry (the program's decapsulations refresh it); silent, it ages
//! out, and the next frame to hb floods to the flood list. Over an IPv6 underlay
//! (2001:db8:83::1 ═══ ::2, the kernel VTEP at its defaults, qbridge learning it): verified
//! TCP both ways, and one-way UDP each way taken by the program (encapsulated to the learned
//! IPv6 remote, single frames; decapsulated from the learned IPv6 source), again after the
//! kernel VTEP moves to an address in no flood list (a learned decapsulation tunnel).

mod support;

use std::time::Duration;
use support::{exec_in, ip_in, tcp_transfer, Lab};

const LOCAL6: &str = "2001:db8:83::1";
const REMOTE6: &str = "2001:db8:83::2";
/// The kernel VTEP's address after the move (in no flood list).
const MOVED6: &str = "2001:db8:83::3";

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Packets B's INPUT took for UDP to `dst` port 4789 (the rule added by [`count_to`]).
fn counted(ns: &str, dst: &str) -> u64 {
    let out = std::process::Command::new("ip")
        .args([
            "netns", "exec", ns, "iptables", "-L", "INPUT", "-v", "-x", "-n",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains(dst) && l.contains("dpt:4789"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count_to(ns: &str, dst: &str) -> bool {
    exec_in(
        ns,
        "iptables",
        &["-A", "INPUT", "-p", "udp", "-d", dst, "--dport", "4789"],
    )
    .is_ok()
}

/// The kernel VTEP at its defaults (learning on) in `ns`: vx0 with `local`, flooding to
/// qbridge's 192.0.2.1 (or [`LOCAL6`] for an IPv6 `local`), in bridge kbr with kb1 (made once).
fn kernel_vtep(ns: &str, local: &str) -> support::Result<()> {
    let flood = if local.contains(':') {
        LOCAL6
    } else {
        "192.0.2.1"
    };
    let _ = ip_in(ns, &["link", "del", "vx0"]);
    ip_in(
        ns,
        &[
            "link", "add", "vx0", "type", "vxlan", "id", "100", "local", local, "dev", "ul",
            "dstport", "4789",
        ],
    )?;
    ip_in(ns, &["link", "set", "vx0", "mtu", "1500"])?;
    if ip_in(ns, &["link", "show", "kbr"]).is_err() {
        ip_in(ns, &["link", "add", "kbr", "type", "bridge"])?;
        ip_in(ns, &["link", "set", "kb1", "master", "kbr"])?;
        ip_in(ns, &["link", "set", "kbr", "up"])?;
    }
    ip_in(ns, &["link", "set", "vx0", "master", "kbr"])?;
    exec_in(
        ns,
        "bridge",
        &[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "vx0",
            "dst",
            flood,
        ],
    )?;
    ip_in(ns, &["link", "set", "vx0", "up"]).map(drop)
}

/// qbridge's learned entry for `mac` on vx0: its remote.
fn learned_dst(ctl: &support::Ctl, mac: &str) -> Option<String> {
    let v = ctl.json(&["fdb", "show", "dev", "vx0"]).ok()?;
    v.as_array()?
        .iter()
        .find(|e| {
            e["mac"]
                .as_str()
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
                && e["state"] != "permanent"
                && e["dst"].is_string()
        })
        .and_then(|e| e["dst"].as_str().map(str::to_string))
}

/// The picture above; None (after saying why) when the kernel VTEP or iptables cannot be had.
fn lab(
    name: &str,
    ageing: &str,
) -> Option<(
    Lab,
    String,
    String,
    support::Host,
    support::Host,
    support::Ctl,
)> {
    let mut lab = Lab::new(name);
    let a = lab.netns(&format!("{name}a")).unwrap();
    let b = lab.netns(&format!("{name}b")).unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    ip_in(&a, &["addr", "add", "192.0.2.1/24", "dev", "ul"]).unwrap();
    for addr in ["192.0.2.2/24", "192.0.2.3/24"] {
        ip_in(&b, &["addr", "add", addr, "dev", "ul"]).unwrap();
    }
    for ns in [&a, &b] {
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
    }
    let ha = lab.host("ha", "10.83.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.83.0.2/24", &b, "kb1").unwrap();
    if let Err(e) = kernel_vtep(&b, "192.0.2.2") {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return None;
    }
    if !(count_to(&b, "192.0.2.2") && count_to(&b, "192.0.2.3")) {
        eprintln!("SKIPPED: no iptables in the namespace");
        return None;
    }
    // No ARP broadcast (a flood) while the test counts frames.
    support::neighbour(&ha, &hb.ip, &hb.mac);
    support::neighbour(&hb, &ha.ip, &ha.mac);
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0 ageing_time {ageing}
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
"
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );
    assert_eq!(
        learned_dst(&ctl, &hb.mac).as_deref(),
        Some("192.0.2.2"),
        "vx0 did not learn hb: {}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap_or_default()
    );
    Some((lab, a, b, ha, hb, ctl))
}

/// `n` UDP datagrams from `from` to `to` port 9.
fn blast(from: &support::Host, to: &str, n: u32) {
    let script = format!("for i in $(seq {n}); do echo x > /dev/udp/{to}/9; done");
    exec_in(&from.ns, "bash", &["-c", &script]).unwrap();
}

fn pinger(from: &support::Host, to: &str) -> std::process::Child {
    std::process::Command::new("ip")
        .args([
            "netns", "exec", &from.ns, "ping", "-q", "-i", "0.01", "-W", "1", to,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn tcp_through_a_learned_remote_takes_the_program_both_ways_and_follows_a_move() {
    skip_unless_netns!();
    let _serial = support::serial();
    let Some((_lab, _a, b, ha, hb, ctl)) = lab("vxl", "300") else {
        return;
    };
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits = || u(&fp()["hits"]);

    // Verified TCP both ways through real kernel sockets.
    let t = tcp_transfer(&ha, &hb, 32 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let r = tcp_transfer(&hb, &ha, 32 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s; show fast-path: {}",
        t.gbit_per_s(),
        r.gbit_per_s(),
        fp()
    );
    // Each direction alone (UDP the receiver drops silently, so nothing comes back): the
    // program's hits grow by the datagrams, encapsulated to the learned remote one way,
    // decapsulated from the learned source the other.
    for (from, to, what) in [
        (&ha, &hb, "encapsulated to the learned remote"),
        (&hb, &ha, "decapsulated from the learned source"),
    ] {
        exec_in(
            &to.ns,
            "iptables",
            &["-A", "INPUT", "-p", "udp", "--dport", "9", "-j", "DROP"],
        )
        .unwrap();
        let h0 = hits();
        blast(from, &to.ip, 300);
        let n = hits() - h0;
        assert!(
            n >= 290,
            "{} -> {}: {n} of 300 datagrams {what} by the program: {}\n{}",
            from.name,
            to.name,
            fp(),
            ctl.stats_text()
        );
    }

    // The remote's address changes while ha pings hb: once vx0 learned hb behind 192.0.2.3,
    // nothing more goes to 192.0.2.2.
    let mut p = pinger(&ha, &hb.ip);
    std::thread::sleep(Duration::from_millis(500));
    let before = counted(&b, "192.0.2.2");
    kernel_vtep(&b, "192.0.2.3").unwrap();
    let moved = support::wait_until(Duration::from_secs(5), || {
        learned_dst(&ctl, &hb.mac).as_deref() == Some("192.0.2.3")
    });
    std::thread::sleep(Duration::from_millis(50));
    let at_move = counted(&b, "192.0.2.2");
    let to3 = counted(&b, "192.0.2.3");
    std::thread::sleep(Duration::from_millis(1000));
    let after = counted(&b, "192.0.2.2");
    let to3_after = counted(&b, "192.0.2.3");
    let _ = p.kill();
    let _ = p.wait();
    assert!(moved, "vx0 did not learn the move\n{}", ctl.stats_text());
    assert!(at_move > before, "the pings did not reach 192.0.2.2 before");
    assert_eq!(
        after,
        at_move,
        "frames went to the old remote after the move was learned\n{}",
        ctl.stats_text()
    );
    assert!(to3_after > to3 + 50, "the pings did not follow the move");
    assert!(support::ping_ok(&ha, &hb.ip));
    // The new remote (in no flood list) gets a decapsulation tunnel within the engine's
    // second: hb's datagrams from 192.0.2.3 are the program's again.
    std::thread::sleep(Duration::from_millis(1500));
    let h0 = hits();
    blast(&hb, &ha.ip, 300);
    let n = hits() - h0;
    assert!(
        n >= 290,
        "{n} of 300 datagrams from the learned remote 192.0.2.3 decapsulated by the program: {}\n{}",
        fp(),
        ctl.stats_text()
    );
}

#[test]
fn a_learned_remote_lives_while_the_program_decapsulates_and_ages_when_silent() {
    skip_unless_netns!();
    let _serial = support::serial();
    let Some((_lab, _a, b, ha, hb, ctl)) = lab("vxa", "4") else {
        return;
    };
    // A second flood-list VTEP (192.0.2.3, counted, nobody's): a flood reaches it.
    ctl.cmd(&[
        "fdb",
        "append",
        "00:00:00:00:00:00",
        "dev",
        "vx0",
        "dst",
        "192.0.2.3",
    ])
    .unwrap();
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let f0 = fp();
    // 10 s of pings (hb -> ha: decapsulated, the answers encapsulated), 2.5 ageing times:
    // the learned entry stays, no frame floods.
    let flood0 = counted(&b, "192.0.2.3");
    let rep = support::ping(&hb, &ha.ip, 1000);
    let f1 = fp();
    assert_eq!(rep.received, 1000, "pings lost\n{}", ctl.stats_text());
    assert!(
        u(&f1["hits"]) - u(&f0["hits"]) > 1500,
        "the pings did not take the program both ways: {f1}\n{}",
        ctl.stats_text()
    );
    assert_eq!(
        learned_dst(&ctl, &hb.mac).as_deref(),
        Some("192.0.2.2"),
        "the learned entry aged while the program decapsulated hb's frames"
    );
    assert_eq!(counted(&b, "192.0.2.3"), flood0, "frames flooded");
    // Silent: the entry ages out (4 s, the ager's second), then a frame to hb floods.
    assert!(
        support::wait_until(Duration::from_secs(8), || learned_dst(&ctl, &hb.mac)
            .is_none()),
        "the learned entry did not age out"
    );
    assert!(support::ping_ok(&ha, &hb.ip));
    assert!(
        counted(&b, "192.0.2.3") > flood0,
        "the frame to hb did not flood to the flood list"
    );
}

/// Over an IPv6 underlay (decision 83's IPv6 addendum): vx0 learns hb behind the kernel
/// VTEP's IPv6 address; verified TCP both ways; one-way UDP each way, the program's hits
/// growing by the datagrams (encapsulated to the learned IPv6 remote; decapsulated from the
/// learned IPv6 source); then the kernel VTEP moves to an address in no flood list, and the
/// same again (decapsulated through the learned remote's own `qb_vxd6_tunnels` entry).
#[test]
fn tcp_through_a_learned_ipv6_remote_takes_the_program_both_ways() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vxl6");
    let a = lab.netns("vxl6a").unwrap();
    let b = lab.netns("vxl6b").unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, LOCAL6), (&b, REMOTE6), (&b, MOVED6)] {
        exec_in(ns, "sysctl", &["-qw", "net.ipv6.conf.ul.disable_ipv6=0"]).unwrap();
        let cidr = format!("{addr}/64");
        ip_in(ns, &["-6", "addr", "add", &cidr, "dev", "ul", "nodad"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", "1570"]).unwrap();
    }
    // B (the kernel VTEP) stays at its defaults. A's underlay sends with its checksums
    // complete (tx off), so the kernel VTEP verifies every checksum the program wrote
    // instead of trusting a partial one over the veth (decision 78): a stricter test, not
    // an offload a peer needs.
    exec_in(&a, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    let ha = lab.host("ha", "10.83.6.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.83.6.2/24", &b, "kb1").unwrap();
    // Single frames from ha (super-frames to an IPv6 underlay go up, decision 78).
    exec_in(
        &ha.ns,
        "ethtool",
        &["-K", "eth0", "tso", "off", "gso", "off"],
    )
    .unwrap();
    if let Err(e) = kernel_vtep(&b, REMOTE6) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    support::neighbour(&ha, &hb.ip, &hb.mac);
    support::neighbour(&hb, &ha.ip, &ha.mac);
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local {LOCAL6} dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE6}
"
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    assert_eq!(
        learned_dst(&ctl, &hb.mac).as_deref(),
        Some(REMOTE6),
        "vx0 did not learn hb: {}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap_or_default()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits = || u(&fp()["hits"]);
    let t = tcp_transfer(&ha, &hb, 8 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let r = tcp_transfer(&hb, &ha, 8 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s; show fast-path: {}",
        t.gbit_per_s(),
        r.gbit_per_s(),
        fp()
    );
    for (from, to, what) in [
        (&ha, &hb, "encapsulated to the learned IPv6 remote"),
        (&hb, &ha, "decapsulated from the learned IPv6 source"),
    ] {
        exec_in(
            &to.ns,
            "iptables",
            &["-A", "INPUT", "-p", "udp", "--dport", "9", "-j", "DROP"],
        )
        .unwrap();
        let h0 = hits();
        blast(from, &to.ip, 300);
        let n = hits() - h0;
        assert!(
            n >= 290,
            "{} -> {}: {n} of 300 datagrams {what} by the program: {}\n{}",
            from.name,
            to.name,
            fp(),
            ctl.stats_text()
        );
    }
    // The kernel VTEP moves to an address in no flood list: vx0 learns hb behind it, and
    // within the engine's second its learned qb_vxd6_tunnels entry is there — hb's datagrams
    // from it are the program's, as are ha's to it.
    kernel_vtep(&b, MOVED6).unwrap();
    let moved = support::wait_until(Duration::from_secs(5), || {
        support::ping_ok(&hb, &ha.ip) && learned_dst(&ctl, &hb.mac).as_deref() == Some(MOVED6)
    });
    assert!(moved, "vx0 did not learn the move\n{}", ctl.stats_text());
    std::thread::sleep(Duration::from_millis(1500));
    for (from, to, what) in [
        (&ha, &hb, "encapsulated to the moved IPv6 remote"),
        (
            &hb,
            &ha,
            "decapsulated from the moved IPv6 source (a learned tunnel)",
        ),
    ] {
        let h0 = hits();
        blast(from, &to.ip, 300);
        let n = hits() - h0;
        assert!(
            n >= 290,
            "{} -> {}: {n} of 300 datagrams {what} by the program: {}\n{}",
            from.name,
            to.name,
            fp(),
            ctl.stats_text()
        );
    }
}
