//! What the live VXLAN rigs against a kernel VTEP share (`mod vxlan_rig;` after `mod
//! support;`): a kernel VTEP of the traditional model (one vxlan device per VNI in its own
//! kernel bridge), the underlay's datagrams captured and decoded field by field with tshark,
//! and an interface's received packets.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{exec_in, ip_in, ping_ok, wait_until, Ctl, Host, Lab};

/// A JSON number as u64 (0 when absent).
pub fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Packets interface `dev` in namespace `ns` received.
pub fn rx_packets(ns: &str, dev: &str) -> u64 {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", dev])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    u(&v[0]["stats64"]["rx"]["packets"])
}

/// The underlay: a veth `ul` between namespaces `a` (192.0.2.1/24) and `b` (192.0.2.2/24),
/// MTU `mtu` on both ends.
pub fn underlay(lab: &mut Lab, a: &str, b: &str, mtu: &str) {
    lab.veth(a, "ul", b, "ul").unwrap();
    for (ns, addr) in [(a, "192.0.2.1/24"), (b, "192.0.2.2/24")] {
        ip_in(ns, &["addr", "add", addr, "dev", "ul"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", mtu]).unwrap();
    }
}

/// The IPv6 underlay's addresses: qbridge's VTEP (on `a`) and the kernel's (on `b`).
pub const LOCAL6: &str = "2001:db8:102::1";
pub const REMOTE6: &str = "2001:db8:102::2";

/// An IPv6 underlay without qbridge: namespaces `a` and `b` (made here) joined by the veth `ul`
/// ([`LOCAL6`], [`REMOTE6`], MTU 1570), host ha (`{net}.1/24`) on a's `qa`, host hb
/// (`{net}.2/24`) behind b's kernel VTEP (`support::kernel_vtep`: bridge kbr with kb1 and vx0)
/// at its defaults. None, after saying why, when the kernel VTEP cannot be made.
pub fn underlay6(
    lab: &mut Lab,
    a: &str,
    b: &str,
    net: &str,
) -> Option<(String, String, Host, Host)> {
    let a = lab.netns(a).unwrap();
    let b = lab.netns(b).unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, LOCAL6), (&b, REMOTE6)] {
        exec_in(ns, "sysctl", &["-qw", "net.ipv6.conf.ul.disable_ipv6=0"]).unwrap();
        let cidr = format!("{addr}/64");
        ip_in(ns, &["-6", "addr", "add", &cidr, "dev", "ul", "nodad"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", "1570"]).unwrap();
    }
    let ha = lab.host("ha", &format!("{net}.1/24"), &a, "qa").unwrap();
    let hb = lab.host("hb", &format!("{net}.2/24"), &b, "kb1").unwrap();
    if let Err(e) = crate::support::kernel_vtep(&b, REMOTE6, LOCAL6, "kb1", Some("ul")) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return None;
    }
    Some((a, b, ha, hb))
}

/// qbridge on `a` (fast path on) bridging ha's `qa` and vx0 over [`underlay6`], the kernel
/// VTEP in vx0's flood list and hb's MAC a static remote on it; a ping from ha to hb through.
pub fn static_remote6(lab: &mut Lab, a: &str, ha: &Host, hb: &Host) -> Ctl {
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local {LOCAL6} dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE6}
fdb add {} dev vx0 dst {REMOTE6}
",
        hb.mac
    );
    let ctl = lab.daemon_args(a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || ping_ok(ha, &hb.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    ctl
}

/// A kernel VTEP of the traditional model in `ns`: vxlan device `dev` (id `vni`, local
/// 192.0.2.2, `nolearning`, flood list 192.0.2.1, MTU 1500, checksums and offloads at their
/// defaults) in its own kernel bridge `br` with `port`. `Err` when the kernel has no VXLAN.
pub fn kernel_vtep(ns: &str, dev: &str, vni: &str, br: &str, port: &str) -> Result<(), String> {
    ip_in(
        ns,
        &[
            "link",
            "add",
            dev,
            "type",
            "vxlan",
            "id",
            vni,
            "local",
            "192.0.2.2",
            "dstport",
            "4789",
            "nolearning",
        ],
    )?;
    ip_in(ns, &["link", "set", dev, "mtu", "1500"])?;
    ip_in(ns, &["link", "add", br, "type", "bridge"])?;
    for d in [dev, port] {
        ip_in(ns, &["link", "set", d, "master", br])?;
    }
    exec_in(
        ns,
        "bridge",
        &[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            dev,
            "dst",
            "192.0.2.1",
        ],
    )?;
    for d in [dev, br] {
        ip_in(ns, &["link", "set", d, "up"])?;
    }
    Ok(())
}

/// tcpdump writing the VXLAN datagrams of `ns`'s underlay `ul` to `file` until stopped
/// ([`stop_dump`]); `opts` go before the filter (e.g. `-c 400`). `None` without tcpdump.
pub fn start_dump(ns: &str, file: &Path, opts: &[&str]) -> Option<Child> {
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "tcpdump", "-n", "-U", "-i", "ul", "-w"])
        .arg(file)
        .args(opts)
        .args(["udp", "port", "4789"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(700));
    Some(child)
}

/// Stops a [`start_dump`]: `-U` wrote each packet as it came, so stopping it loses nothing.
pub fn stop_dump(mut dump: Child) {
    std::thread::sleep(Duration::from_millis(300));
    let _ = dump.kill();
    let _ = dump.wait();
}

/// tshark's decode of `file`: per datagram its `fields` separated by `|` (each layer's value
/// comma-separated, outer first). `None` without tshark or when it fails.
pub fn tshark_fields(file: &Path, fields: &[&str]) -> Option<Vec<String>> {
    let mut args = vec!["-T", "fields", "-E", "separator=|"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(file)
        .args(args)
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    })
}

/// The decoded datagrams ([`tshark_fields`]) that name `mac` (any case), split into their
/// fields.
pub fn datagrams_of(lines: &[String], mac: &str) -> Vec<Vec<String>> {
    lines
        .iter()
        .filter(|l| l.to_lowercase().contains(&mac.to_lowercase()))
        .map(|l| l.split('|').map(str::to_owned).collect())
        .collect()
}
