//! TCP super-frames on devices that will not segment them (root only; docs/daemon.md,
//! "Offloads"). Hosts at their defaults (TSO on, MTU 1500) hand qbridge 64 KB super-frames;
//! qbridge's AF_PACKET sockets send with `PACKET_QDISC_BYPASS`, where the kernel drops a
//! super-frame it would have to segment in software. Two such devices carry the 802.1ad trunk:
//!
//! 1. The provider network (`examples/provider-network.batch`) with TSO turned off on the
//!    trunk veth `t1` while the daemon runs (`ethtool -K t1 tso off`, as Open vSwitch's docs
//!    recommend for veths): the daemon reads the change within a second and segments in
//!    software what leaves on `t1`.
//! 2. The trunk carried by a pair of kernel VXLAN devices in two namespaces (one daemon in
//!    each) over a veth underlay: a VXLAN device keeps TSO on but refuses it for frames with
//!    two tags, so the kernel refuses the first super-frame, the daemon segments it and every
//!    later one with two tags, and retries the direct path every 10 s. The device MTU that
//!    qbridge raises for the two tags (1508) needs room in the underlay: with the underlay at
//!    1500 the raise fails with a message that says so; at 1600 (as an operator sets it) it
//!    works.
//!
//! Each moves 20 MB of verified TCP across the trunk, and the trunk ports count no drop at
//! all: the software segmentation is counted as events (`tx_sw_gso`, `tx_gso_refused`). The
//! daemons run with `--fast-path off`: the pipeline's fallbacks are what is tested.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{assert_ping, exec_in, ip_in, tcp_transfer, wait_until, Ctl, Host, Lab};

const BYTES: u64 = 20 << 20;

/// Whether tests that cannot run here must fail (scripts/test.sh as root) rather than skip.
fn required() -> bool {
    std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Skips (or, when required, fails) without `ethtool`, which scripts/test.sh installs.
fn ethtool_missing() -> bool {
    if Command::new("ethtool").arg("--version").output().is_ok() {
        return false;
    }
    let why = "ethtool is not installed; scripts/test.sh installs it";
    assert!(!required(), "namespace tests are required here but {why}");
    eprintln!("SKIPPED: {why}");
    true
}

/// One port of `link show -s -j`.
fn port(ctl: &Ctl, name: &str) -> Value {
    let v = ctl.json(&["-s", "link", "show"]).expect("link show");
    v.as_array()
        .into_iter()
        .flatten()
        .find(|l| l["ifname"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no port {name} in {v}"))
}

/// The port's drop counters (only non-zero reasons are listed) must be empty.
fn assert_no_drops(ctl: &Ctl, name: &str, stats: &str) {
    let p = port(ctl, name);
    let drops = &p["stats"]["drops"];
    assert!(
        drops.as_object().is_some_and(|m| m.is_empty()),
        "port {name} counted drops {drops}:\n{stats}"
    );
}

fn counter(p: &Value, key: &str) -> u64 {
    p["runtime"][key].as_u64().unwrap_or(0)
}

/// The provider network of `examples/provider-network.batch` in a fresh lab: four hosts, the
/// trunk veth `t1`-`t2` (CE uplinks and PE customer ports are patch links inside the daemon),
/// the daemon running. Returns the lab, the switch namespace, hostA, hostB and the daemon.
fn provider_network(name: &str) -> (Lab, String, Host, Host, Ctl) {
    let mut lab = Lab::new(name);
    let sw = lab.netns("sw").unwrap();
    let a = lab.host("hostA", "10.10.0.1/24", &sw, "a0").unwrap();
    let b = lab.host("hostB", "10.10.0.2/24", &sw, "b0").unwrap();
    lab.host("hostC", "10.10.0.1/24", &sw, "c0").unwrap();
    lab.host("hostD", "10.10.0.2/24", &sw, "d0").unwrap();
    lab.veth(&sw, "t1", &sw, "t2").unwrap();
    // The pipeline's software segmentation and coalescing are what is tested: with the fast
    // path, flows carry the frames from port to port through the patch links, the kernel
    // segments a super-frame for a device without TSO itself, and nothing coalesces
    // (tests/netns_fastpath.rs covers that path through this network).
    let ctl = lab
        .daemon_args(
            &sw,
            include_str!("../../../examples/provider-network.batch"),
            &["--fast-path", "off"],
        )
        .unwrap();
    (lab, sw, a, b, ctl)
}

/// Customer 1 of the provider network over a trunk veth without TSO.
#[test]
fn provider_trunk_without_tso() {
    skip_unless_netns!();
    if ethtool_missing() {
        return;
    }
    let _serial = support::serial();
    let (mut lab, sw, a, b, ctl) = provider_network("gso-tso-off");
    let before = port(&ctl, "pe1-trunk");
    assert_eq!(
        before["runtime"]["offloads"]["tso4"], true,
        "a veth has TSO by default: {before}"
    );
    assert_eq!(before["runtime"]["qdisc_bypass"], true);

    // Changed under the running daemon, as an operator would; read within a second or two.
    exec_in(&sw, "ethtool", &["-K", "t1", "tso", "off"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || {
            port(&ctl, "pe1-trunk")["runtime"]["offloads"]["tso4"] == false
        }),
        "the daemon did not see TSO go off on t1: {}",
        port(&ctl, "pe1-trunk")
    );

    assert_ping(&a, &b, 3);
    let r = tcp_transfer(&a, &b, BYTES, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP over a trunk without TSO: {e}\n{}", ctl.stats_text()));
    let stats = ctl.stats_text();
    eprintln!(
        "trunk without TSO: {} bytes in {:.2} s ({:.2} Gbit/s)\n{stats}",
        r.bytes,
        r.secs,
        r.gbit_per_s()
    );
    for trunk in ["pe1-trunk", "pe2-trunk"] {
        assert_no_drops(&ctl, trunk, &stats);
    }
    let t1 = port(&ctl, "pe1-trunk");
    assert!(
        counter(&t1, "tx_sw_gso") > 0,
        "super-frames to t1 must be segmented in software: {t1}"
    );
    assert!(stats.contains("qdisc_bypass on"), "{stats}");
    assert!(lab.stop_daemons(), "daemons exit cleanly");
}

/// GRO (issue 6 §3): a sender with TSO and GSO off hands qbridge 1514-byte segments. The first
/// egress port on their way that takes super-frames — the patch link from CE1 to PE1 —
/// coalesces consecutive segments of the flow into super-frames, which then cross PE1, the
/// 802.1ad trunk (two tags) and the rest whole. 20 MB of verified TCP, segments counted as
/// merged, far fewer frames than segments on the trunk, no drop anywhere on the path.
#[test]
fn segmented_sender_is_coalesced_towards_a_tso_trunk() {
    skip_unless_netns!();
    if ethtool_missing() {
        return;
    }
    let _serial = support::serial();
    let (mut lab, _sw, a, b, ctl) = provider_network("gro");
    exec_in(
        &a.ns,
        "ethtool",
        &["-K", "eth0", "tso", "off", "gso", "off"],
    )
    .unwrap();
    assert_ping(&a, &b, 3);
    let r = tcp_transfer(&a, &b, BYTES, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP from a segmenting sender: {e}\n{}", ctl.stats_text()));
    let stats = ctl.stats_text();
    eprintln!(
        "segmented sender: {} bytes in {:.2} s ({:.2} Gbit/s)\n{stats}",
        r.bytes,
        r.secs,
        r.gbit_per_s()
    );
    let host_in = port(&ctl, "ce1-host");
    assert_eq!(
        counter(&host_in, "tx_gro_frames"),
        0,
        "nothing to coalesce towards hostA (it only sends ACKs)"
    );
    let up = port(&ctl, "ce1-up");
    let (frames, segments) = (
        counter(&up, "tx_gro_frames"),
        counter(&up, "tx_gro_segments"),
    );
    assert!(
        frames > 0 && segments > frames,
        "segments to PE1 must be coalesced: {up}"
    );
    let mss_segments = BYTES / 1448;
    let t1 = port(&ctl, "pe1-trunk");
    let trunk_frames = t1["stats"]["tx_frames"].as_u64().unwrap_or(0);
    assert!(
        trunk_frames < mss_segments / 4,
        "the trunk carried {trunk_frames} frames for {mss_segments} segments: {t1}"
    );
    for p in ["ce1-host", "pe1-trunk", "pe2-trunk", "ce2-host"] {
        assert_no_drops(&ctl, p, &stats);
    }
    assert!(lab.stop_daemons(), "daemons exit cleanly");
}

/// One provider edge of the VXLAN trunk: customer port `host_if` (access VLAN 10), CE
/// uplink `ce_up` joined by a veth to PE customer port `pe_cust` (S-VLAN 100), and the trunk
/// `trunk_dev`.
fn edge_batch(n: u8, host_if: &str, ce_up: &str, pe_cust: &str, trunk_dev: &str) -> String {
    format!(
        "link add ce{n} type bridge vlan_filtering 1 vlan_default_pvid 0\n\
         link add pe{n} type bridge vlan_filtering 1 vlan_protocol 802.1ad vlan_default_pvid 0\n\
         link add ce{n}-host type afpacket dev {host_if}\n\
         link add ce{n}-up type afpacket dev {ce_up}\n\
         link add pe{n}-cust1 type afpacket dev {pe_cust}\n\
         link add pe{n}-trunk type afpacket dev {trunk_dev}\n\
         link set dev ce{n}-host master ce{n}\n\
         link set dev ce{n}-up master ce{n}\n\
         link set dev pe{n}-cust1 master pe{n}\n\
         link set dev pe{n}-trunk master pe{n}\n\
         vlan add vid 10 dev ce{n}-host pvid untagged\n\
         vlan add vid 10 dev ce{n}-up\n\
         vlan add vid 100 dev pe{n}-cust1 pvid untagged\n\
         vlan add vid 100 dev pe{n}-trunk\n"
    )
}

struct VxlanLab {
    lab: Lab,
    s1: String,
    s2: String,
    a: Host,
    b: Host,
}

/// hostA ─ [s1: ce1, pe1] ─ t1 (VXLAN) ≈≈ underlay u1─u2 ≈≈ t2 (VXLAN) ─ [s2: pe2, ce2] ─ hostB.
/// The underlay starts at MTU 1500, so the VXLAN devices at 1450. `None` when VXLAN devices
/// cannot be made here (and that is allowed).
fn vxlan_lab(test: &str) -> Option<VxlanLab> {
    let mut lab = Lab::new(test);
    let s1 = lab.netns("pe1").unwrap();
    let s2 = lab.netns("pe2").unwrap();
    let a = lab.host("hostA", "10.20.0.1/24", &s1, "a0").unwrap();
    let b = lab.host("hostB", "10.20.0.2/24", &s2, "b0").unwrap();
    lab.veth(&s1, "c1u", &s1, "p1c").unwrap();
    lab.veth(&s2, "p2c", &s2, "c2u").unwrap();
    lab.veth(&s1, "u1", &s2, "u2").unwrap();
    ip_in(&s1, &["addr", "add", "192.168.200.1/24", "dev", "u1"]).unwrap();
    ip_in(&s2, &["addr", "add", "192.168.200.2/24", "dev", "u2"]).unwrap();
    for (ns, dev, local, remote, under) in [
        (&s1, "t1", "192.168.200.1", "192.168.200.2", "u1"),
        (&s2, "t2", "192.168.200.2", "192.168.200.1", "u2"),
    ] {
        let made = ip_in(
            ns,
            &[
                "link", "add", dev, "type", "vxlan", "id", "100", "local", local, "remote", remote,
                "dstport", "4789", "dev", under,
            ],
        );
        if let Err(e) = made {
            assert!(!required(), "cannot make a VXLAN device: {e}");
            eprintln!("SKIPPED: cannot make a VXLAN device: {e}");
            return None;
        }
        let _ = exec_in(
            ns,
            "sysctl",
            &["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")],
        );
        ip_in(ns, &["link", "set", dev, "up"]).unwrap();
    }
    Some(VxlanLab { lab, s1, s2, a, b })
}

fn mtu(ns: &str, dev: &str) -> u64 {
    let out = ip_in(ns, &["-j", "link", "show", "dev", dev]).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    v[0]["mtu"].as_u64().unwrap_or(0)
}

/// The 802.1ad trunk over two kernel VXLAN devices: the kernel refuses TSO for two tags.
#[test]
fn provider_trunk_over_vxlan() {
    skip_unless_netns!();
    let _serial = support::serial();
    let Some(VxlanLab {
        mut lab,
        s1,
        s2,
        a,
        b,
    }) = vxlan_lab("gso-vxlan")
    else {
        return;
    };
    let batch1 = edge_batch(1, "a0", "c1u", "p1c", "t1");
    let batch2 = edge_batch(2, "b0", "c2u", "p2c", "t2");

    // Underlay at 1500: a VXLAN device over it takes at most 1450, so the trunk's 1508 cannot
    // be set, and the daemon says why instead of starting.
    let e = match lab.daemon(&s1, &batch1) {
        Err(e) => e,
        Ok(_) => panic!("the daemon started with t1 unable to take 1508-byte frames"),
    };
    assert!(
        e.contains("cannot raise t1's MTU to 1508")
            && e.contains("max 1450")
            && e.contains("underlay"),
        "unclear error: {e}"
    );
    lab.stop_daemons();

    // The operator raises the underlay's MTU; qbridge raises the VXLAN devices' by itself.
    for (ns, dev) in [(&s1, "u1"), (&s2, "u2")] {
        ip_in(ns, &["link", "set", dev, "mtu", "1600"]).unwrap();
    }
    // The pipeline's transmit fallback is what is tested: with the fast path the kernel
    // carries the super-frames from port to port and segments them itself.
    let off = ["--fast-path", "off"];
    let ctl1 = lab.daemon_args(&s1, &batch1, &off).expect("daemon pe1");
    let ctl2 = lab.daemon_args(&s2, &batch2, &off).expect("daemon pe2");
    assert_eq!((mtu(&s1, "t1"), mtu(&s2, "t2")), (1508, 1508));
    let t1 = port(&ctl1, "pe1-trunk");
    assert_eq!(
        t1["runtime"]["offloads"]["tso4"], true,
        "a VXLAN device announces TSO: {t1}"
    );

    assert_ping(&a, &b, 3);
    let stats = || format!("{}\n{}", ctl1.stats_text(), ctl2.stats_text());
    let ab = tcp_transfer(&a, &b, BYTES, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP A to B over VXLAN: {e}\n{}", stats()));
    let ba = tcp_transfer(&b, &a, BYTES, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP B to A over VXLAN: {e}\n{}", stats()));
    let text = stats();
    eprintln!(
        "VXLAN trunk: A to B {:.2} Gbit/s ({:.2} s), B to A {:.2} Gbit/s ({:.2} s)\n{text}",
        ab.gbit_per_s(),
        ab.secs,
        ba.gbit_per_s(),
        ba.secs
    );
    assert_no_drops(&ctl1, "pe1-trunk", &text);
    assert_no_drops(&ctl2, "pe2-trunk", &text);
    for (ctl, trunk) in [(&ctl1, "pe1-trunk"), (&ctl2, "pe2-trunk")] {
        let p = port(ctl, trunk);
        assert!(
            counter(&p, "tx_gso_refused") >= 1 && counter(&p, "tx_sw_gso") > 0,
            "{trunk}: the kernel refuses two-tag super-frames on VXLAN; they must have been \
             segmented in software: {p}"
        );
    }
    assert!(lab.stop_daemons(), "daemons exit cleanly");
}
