//! What the live VXLAN rigs against a kernel VTEP share (`mod vxlan_rig;` after `mod
//! support;`): a kernel VTEP of the traditional model (one vxlan device per VNI in its own
//! kernel bridge), the underlay's datagrams captured and decoded field by field with tshark,
//! and an interface's received packets.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{exec_in, ip_in, Lab};

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
