//! AF_XDP ports in the daemon (issue 6 §4): two hosts (kernel TCP/IP) behind AF_XDP ports of
//! one 802.1Q bridge, in native and in skb (generic) mode on their veths; ping and 5 MB of
//! verified TCP, no drop counted. AF_XDP carries no offload metadata: a frame whose checksum
//! the sending host left to the device (`CHECKSUM_PARTIAL`, a veth's default) would leave
//! with a wrong checksum, so the hosts' transmit checksum offload is off (`ethtool -K eth0 tx
//! off`, which also turns TSO off), as for Open vSwitch's AF_XDP ports (docs/daemon.md).

mod support;

use std::time::Duration;
use support::{assert_ping, exec_in, skip_reason, tcp_transfer, Star};

fn run(mode: &str) {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new(&format!("xdp-{mode}"), &["10.95.0.1", "10.95.0.2"]).expect("lab");
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    for h in [&h1, &h2] {
        exec_in(&h.ns, "ethtool", &["-K", "eth0", "tx", "off"]).unwrap();
    }
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
         link add p1 type afxdp dev s1 mode {mode}\n\
         link add p2 type afxdp dev s2 mode {mode}\n\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n"
    );
    let ctl = star.daemon(&batch).expect("daemon");
    let shown = ctl.cmd(&["link", "show", "dev", "p1"]).unwrap();
    assert!(
        shown.contains(&format!("dev s1 queues 1 mode {mode} zerocopy off")),
        "{shown}"
    );
    assert_ping(&h1, &h2, 20);
    let r = tcp_transfer(&h1, &h2, 5 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP over AF_XDP ({mode}): {e}\n{}", ctl.stats_text()));
    eprintln!("AF_XDP {mode}: {:.2} Gbit/s", r.gbit_per_s());
    let stats = ctl.json(&["-s", "link", "show"]).unwrap();
    for l in stats.as_array().unwrap() {
        if let Some(d) = l["stats"]["drops"].as_object() {
            assert!(d.is_empty(), "{} counted drops: {d:?}", l["ifname"]);
        }
    }
}

#[test]
fn afxdp_ports_native_mode() {
    run("native");
}

#[test]
fn afxdp_ports_skb_mode() {
    run("skb");
}
