//! A VXLAN port against Open vSwitch's userspace (netdev) VXLAN, the second peer of issue 20
//! (root only):
//!
//! ```text
//!  ha (10.21.0.1) ─ qa ┐                               O: ovs-vswitchd, datapath_type=netdev
//!     daemon A: br0 (vlan_filtering 0): p1 (qa), vx0     br-int: kb1, vx0 (type=vxlan
//!       vx0: type vxlan id 100 local 192.0.2.1             options:remote_ip=192.0.2.1
//!                  │                                        options:key=100)  ┌ kb1 ─ hb (10.21.0.2)
//!                  │                                     br-phy (192.0.2.2/24, MTU 1550): ul
//!                  └── ul 192.0.2.1 ═══ veth (MTU 1550) ═══ ul ──┘
//! ```
//!
//! OVS's userspace tunnel is the "userspace-tunneling" setup of its documentation: the
//! underlay address lives on the internal port of a netdev bridge `br-phy` that holds the
//! physical port (`ul`); OVS's tunnel routing table caches the namespace's kernel routes
//! (`ovs/route/show` lists 192.0.2.0/24 on br-phy, so no `ovs/route/add` is needed) and its
//! neighbour table snoops ARP on br-phy (`tnl/neigh/show`). qbridge's flood list names
//! 192.0.2.2; OVS's port names 192.0.2.1 — nothing else is configured.
//!
//! Checked: ARP floods and pings both ways; 1500-byte pings with DF (underlay MTU 1550);
//! verified TCP both ways; qbridge learns hb's MAC on vx0 with `dst 192.0.2.2`, OVS learns
//! ha's on its vx0 (`fdb/show`); OVS dropped no tunnel packet (`coverage/show`:
//! `datapath_drop_tunnel_pop_error` never hit); tshark decodes the underlay capture (outer
//! IPv4/UDP 4789, VNI 100, inner ARP/ICMP/TCP) with every IPv4, UDP, TCP and ICMP checksum
//! good and nothing malformed.
//!
//! Two checksum facts of a veth underlay, both about partial checksums (CHECKSUM_PARTIAL: the
//! sender leaves the sum to a NIC, and a veth has none), neither about VXLAN:
//! - OVS's netdev datapath reads its ports through AF_PACKET, which hands over a veth's
//!   frames as they are; its `tnl_pop` checks a non-zero outer UDP checksum in software and
//!   drops a partial one (`datapath_drop_tunnel_pop_error`). The kernel fills qbridge's UDP
//!   checksums only if A's `ul` has no transmit checksum offload: `ethtool -K ul tx off` (which
//!   also turns the port's segmented sends into datagram-by-datagram ones: `UDP_SEGMENT`
//!   needs the offload). OVS itself sends a zero UDP checksum (unless `options:csum=true`),
//!   as RFC 7348 §5 advises.
//! - Without `userspace-tso-enable` OVS reads hb's port without the virtio-net header: hb's
//!   TSO super-frames never reach the tunnel (checked: with hb at its defaults, 983 of 1024
//!   KiB of TCP hb -> ha arrived at qbridge's vx0, none dropped there, and the stream
//!   stalled), as OVS's documentation says for veths on its userspace datapath, so hb's
//!   `eth0` has `tx off` — OVS's requirement, not qbridge's: the partial inner checksums OVS
//!   forwards unfinished are restored by qbridge's port (docs/semantics.md §R.5), and the
//!   kernel VTEP of `netns_vxlan.rs` runs at its defaults.
//!
//! On a real wire both are moot: the NIC completes the checksums it was left.

mod support;

use std::time::Duration;
use support::ovs::{ovs_bins, Ovs};
use support::{exec_in, ip_in, ping, tcp_transfer, tshark, Lab};

const A: &str = "\
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
";

/// The OVS VTEP in `ns`: netdev bridges `br-phy` (with `ul`, address `local`, MTU 1550) and
/// `br-int` (with `port` and a VXLAN port `vx0` to `remote`, key 100).
fn ovs_vtep(ovs: &Ovs, ns: &str, local: &str, remote: &str, port: &str) -> Result<(), String> {
    ovs.vsctl(&[
        "add-br",
        "br-phy",
        "--",
        "set",
        "bridge",
        "br-phy",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br-phy",
        "ul",
    ])?;
    ovs.vsctl(&[
        "add-br",
        "br-int",
        "--",
        "set",
        "bridge",
        "br-int",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br-int",
        port,
        "--",
        "add-port",
        "br-int",
        "vx0",
        "--",
        "set",
        "interface",
        "vx0",
        "type=vxlan",
        &format!("options:remote_ip={remote}"),
        "options:key=100",
    ])?;
    ip_in(
        ns,
        &["addr", "add", &format!("{local}/24"), "dev", "br-phy"],
    )?;
    ip_in(ns, &["link", "set", "br-phy", "mtu", "1550"])?;
    for dev in ["br-phy", "br-int"] {
        ip_in(ns, &["link", "set", dev, "up"])?;
    }
    Ok(())
}

/// OVS's coverage counter `name` (total), 0 when never hit.
fn coverage(ovs: &Ovs, name: &str) -> u64 {
    let text = ovs.appctl(&["coverage/show"]).unwrap_or_default();
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.rsplit("total:").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn vxlan_port_talks_to_open_vswitch_netdev_vxlan() {
    skip_unless_netns!();
    let _serial = support::serial();
    let bins = match ovs_bins() {
        Ok(b) => b,
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
    let mut lab = Lab::new("vxlan-ovs");
    let a = lab.netns("vxoa").unwrap();
    let o = lab.netns("vxoo").unwrap();
    lab.veth(&a, "ul", &o, "ul").unwrap();
    ip_in(&a, &["addr", "add", "192.0.2.1/24", "dev", "ul"]).unwrap();
    for ns in [&a, &o] {
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
    }
    // Full UDP checksums from qbridge's sockets (module doc: OVS checks them in software).
    exec_in(&a, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    let ha = lab.host("ha", "10.21.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.21.0.2/24", &o, "kb1").unwrap();
    // OVS's own requirement for a host on a veth of its userspace datapath (module doc).
    exec_in(&hb.ns, "ethtool", &["-K", "eth0", "tx", "off"]).unwrap();
    // Without userspace TSO (the default, said here): OVS reads its ports without the
    // virtio-net header (module doc).
    let ovs = match Ovs::start(
        bins,
        &o,
        lab.dir.join("ovs"),
        &["other_config:userspace-tso-enable=false"],
    ) {
        Ok(ovs) => ovs,
        Err(reason) => {
            eprintln!("SKIPPED: Open vSwitch cannot be started here: {reason}");
            return;
        }
    };
    ovs_vtep(&ovs, &o, "192.0.2.2", "192.0.2.1", "kb1").unwrap();
    // OVS's tunnel routing table caches the namespace's route to the underlay.
    assert!(
        support::wait_until(Duration::from_secs(5), || ovs
            .appctl(&["ovs/route/show"])
            .is_ok_and(|r| r.contains("192.0.2.0/24 dev br-phy"))),
        "{:?}",
        ovs.appctl(&["ovs/route/show"])
    );
    let ctl = lab.daemon(&a, A).unwrap();

    let capture = tshark::have_tshark().then(|| {
        tshark::PcapCapture::start(
            &o,
            "ul",
            &lab.dir.join("underlay.pcap"),
            &["udp", "port", "4789"],
        )
        .unwrap()
    });

    // Flood (ARP) and pings, both ways.
    let r = ping(&ha, &hb.ip, 3);
    assert!(
        r.received >= 2,
        "ha -> hb over VXLAN to OVS: {}\n{}\n{}",
        r.output,
        ctl.stats_text(),
        ovs.appctl(&["coverage/show"]).unwrap_or_default()
    );
    let r = ping(&hb, &ha.ip, 3);
    assert!(
        r.received >= 2,
        "hb -> ha over VXLAN from OVS: {}\n{}",
        r.output,
        ctl.stats_text()
    );
    // OVS resolved qbridge's VTEP by snooping ARP on br-phy.
    let neigh = ovs.appctl(&["tnl/neigh/show"]).unwrap_or_default();
    assert!(neigh.contains("192.0.2.1"), "{neigh}");

    // 1500-byte IP packets inside, DF set, both ways.
    for (from, to) in [(&ha, &hb), (&hb, &ha)] {
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

    // A short verified TCP exchange inside the capture.
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

    // tshark: the outer and inner headers as the field's dissectors read them.
    if let Some(cap) = capture {
        let pcap = cap.stop();
        let d = tshark::decode(&pcap, &["ip", "udp", "tcp"]).unwrap();
        tshark::check_vxlan(
            &d,
            100,
            &[(&ha.mac, "192.0.2.1"), (&hb.mac, "192.0.2.2")],
            200,
        );
        eprintln!(
            "tshark: {} VXLAN frames decoded, none malformed, every checksum good",
            d.frames.len()
        );
    } else {
        eprintln!("tshark is not installed (scripts/test.sh installs it): capture not decoded");
    }

    // Verified TCP both ways.
    let t = tcp_transfer(&ha, &hb, 20 << 20, Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let u = tcp_transfer(&hb, &ha, 20 << 20, Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "VXLAN qbridge <-> OVS netdev VTEP: ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s",
        t.gbit_per_s(),
        u.gbit_per_s()
    );

    // qbridge learned hb behind vx0 with its VTEP; OVS learned ha behind its vx0.
    assert!(ctl.fdb_has(&hb.mac, "vx0").unwrap(), "{:?}", ctl.fdb());
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains(&format!(
            "{} dev vx0 dst 192.0.2.2 self\n",
            hb.mac.to_lowercase()
        )),
        "{show}"
    );
    let vx_ofport = ovs
        .vsctl(&["get", "interface", "vx0", "ofport"])
        .unwrap()
        .trim()
        .to_owned();
    let ovs_fdb = ovs.appctl(&["fdb/show", "br-int"]).unwrap();
    assert!(
        ovs_fdb.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 3 && w[0] == vx_ofport && w[2].eq_ignore_ascii_case(&ha.mac)
        }),
        "OVS did not learn {} on vx0 (ofport {vx_ofport}):\n{ovs_fdb}",
        ha.mac
    );
    // Nothing of qbridge's was refused by OVS's decapsulation.
    assert_eq!(
        coverage(&ovs, "datapath_drop_tunnel_pop_error"),
        0,
        "{}",
        ovs.appctl(&["coverage/show"]).unwrap_or_default()
    );
    let stats = ctl.stats_text();
    assert!(!stats.contains("vxlan_malformed"), "{stats}");
}
