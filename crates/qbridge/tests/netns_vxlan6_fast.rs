//! VXLAN over an IPv6 underlay in the eBPF fast path (decision 78), against the kernel's own
//! VTEP at its defaults (root only; it refuses a zero UDP checksum over IPv6):
//!
//! ```text
//!  ha (10.22.0.1) ─ qa ┐                                       ┌ kb1 ─ hb (10.22.0.2)
//!     qbridge --fast-path on: br0: p1 (qa), vx0                  kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 2001:db8:102::1 dev ul        vx0: kernel vxlan id 100
//!       fdb add HB dev vx0 dst 2001:db8:102::2 (static)
//!                  └── ul 2001:db8:102::1 ═══ veth (MTU 1570) ═══ ul 2001:db8:102::2 ──┘
//! ```
//!
//! The underlay has no transmit checksum offload, so every checksum is complete on the wire
//! and the kernel VTEP verifies each outer UDP checksum itself (a veth would otherwise
//! pass the inner one as still to be done, and the receiver trusts such a packet). ha sends
//! without TSO: its TCP segments reach the program one by one, their inner checksums left to
//! offload (the program's "local checksum offload" sum); pings of 1500 bytes are summed whole.
//! Checked: 8 MiB of verified TCP each way, the program's hits, the kernel's UDP6 checksum
//! errors still 0; with TSO on again, super-frames go up (`misses: vxlan`) and TCP still
//! verifies; a capture on the kernel's side read by the io crate's codec (every checksum
//! verified over the IPv6 pseudo-header; the program's datagrams, flow label 0, among the
//! socket's, labelled by the kernel) and by tshark (no bad checksum).

mod support;

use std::time::Duration;
use support::{exec_in, ip_in, tcp_transfer, tshark, Lab};

const LOCAL: &str = "2001:db8:102::1";
const REMOTE: &str = "2001:db8:102::2";

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The namespace's `Udp6InCsumErrors` (/proc/net/snmp6).
fn udp6_csum_errors(ns: &str) -> u64 {
    exec_in(ns, "cat", &["/proc/net/snmp6"])
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Udp6InCsumErrors"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The frames of a classic pcap file (Ethernet).
fn pcap_frames(pcap: &std::path::Path) -> Vec<Vec<u8>> {
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
        frames.push(data[at + 16..(at + 16 + caplen).min(data.len())].to_vec());
        at += 16 + caplen;
    }
    frames
}

/// The `misses: vxlan` count of `show fast-path -j`.
fn vxlan_misses(f: &serde_json::Value) -> u64 {
    u(&f["misses"]["vxlan"])
}

#[test]
fn tcp_over_ipv6_to_a_kernel_vtep_is_encapsulated_by_the_program() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6fast");
    let a = lab.netns("vx6fa").unwrap();
    let b = lab.netns("vx6fb").unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, LOCAL), (&b, REMOTE)] {
        exec_in(ns, "sysctl", &["-qw", "net.ipv6.conf.ul.disable_ipv6=0"]).unwrap();
        let cidr = format!("{addr}/64");
        ip_in(ns, &["-6", "addr", "add", &cidr, "dev", "ul", "nodad"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", "1570"]).unwrap();
    }
    let ha = lab.host("ha", "10.22.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.22.0.2/24", &b, "kb1").unwrap();
    if let Err(e) = support::kernel_vtep(&b, REMOTE, LOCAL, "kb1", Some("ul")) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    for ns in [&a, &b] {
        exec_in(ns, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    }
    exec_in(
        &ha.ns,
        "ethtool",
        &["-K", "eth0", "tso", "off", "gso", "off"],
    )
    .unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local {LOCAL} dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE}
fdb add {} dev vx0 dst {REMOTE}
",
        hb.mac
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&ha, &hb.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let errors0 = udp6_csum_errors(&b);
    let pcap = lab.dir.join("underlay6fast.pcap");
    let capture = tshark::PcapCapture::start(&b, "ul", &pcap, &["udp", "port", "4789"]).unwrap();
    let hits0 = u(&fp()["hits"]);

    // 1500-byte pings (ICMP: the program sums them whole), then TCP both ways.
    let out = exec_in(
        &ha.ns,
        "ping",
        &[
            "-c", "5", "-i", "0.05", "-W", "2", "-M", "do", "-s", "1472", &hb.ip,
        ],
    );
    assert!(
        out.as_ref().is_ok_and(|o| o.contains(" 0% packet loss")),
        "1500-byte ping: {out:?}\n{} {} udp6 csum errors\n{}",
        fp(),
        udp6_csum_errors(&b),
        ctl.stats_text()
    );
    let t = tcp_transfer(&ha, &hb, 8 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    let r = tcp_transfer(&hb, &ha, 8 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    let f = fp();
    eprintln!(
        "ha->hb {:.2} Gbit/s, hb->ha {:.2} Gbit/s; show fast-path: {f}",
        t.gbit_per_s(),
        r.gbit_per_s()
    );
    assert!(u(&f["flows"]) >= 1, "no flow: {f}");
    let hits = u(&f["hits"]) - hits0;
    assert!(
        hits > 2000,
        "ha's TCP did not take the program ({hits} hits): {f}\n{}",
        ctl.stats_text()
    );
    assert_eq!(
        udp6_csum_errors(&b),
        errors0,
        "the kernel VTEP counted bad UDP checksums"
    );

    // Super-frames (ha's TSO back on) go up and still arrive whole and verified.
    exec_in(&ha.ns, "ethtool", &["-K", "eth0", "tso", "on", "gso", "on"]).unwrap();
    let m0 = vxlan_misses(&fp());
    tcp_transfer(&ha, &hb, 4 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP ha -> hb with TSO: {e}\n{}", ctl.stats_text()));
    let f = fp();
    assert!(vxlan_misses(&f) > m0, "no super-frame went up: {f}");
    assert_eq!(udp6_csum_errors(&b), errors0);
    let pcap = capture.stop();

    // The capture: every datagram's checksum verified; the program's (flow label 0) and the
    // socket's (the kernel's label) both there.
    let (mut program, mut socket) = (0, 0);
    for frame in pcap_frames(&pcap) {
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        let d = qbridge_io::vxlan::outer::decapsulate(&frame[14..], false)
            .unwrap_or_else(|e| panic!("{e}: {:02x?}", &frame[..frame.len().min(80)]));
        assert_ne!(d.udp_checksum, 0);
        if d.outer.src.to_string() == LOCAL {
            if d.outer.flow_label == 0 {
                program += 1;
            } else {
                socket += 1;
            }
        }
    }
    eprintln!("capture: {program} datagrams from the program, {socket} from the socket");
    assert!(program > 1000 && socket > 0, "{program} / {socket}");
    if tshark::have_tshark() {
        // tshark's own verification: every outer UDP checksum of the program's datagrams
        // good (flow label 0 from LOCAL), no UDP checksum bad anywhere, no inner TCP one bad
        // in the program's datagrams.
        let lines = |filter: &str| {
            let out = std::process::Command::new("tshark")
                .arg("-r")
                .arg(&pcap)
                .args([
                    "-o",
                    "udp.check_checksum:TRUE",
                    "-o",
                    "tcp.check_checksum:TRUE",
                ])
                .args(["-o", "ip.check_checksum:TRUE", "-Y", filter, "-T", "fields"])
                .args(["-e", "frame.number", "-e", "ipv6.src", "-e", "ipv6.flow"])
                .args(["-e", "frame.protocols", "-e", "tcp.flags"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let count = |filter: &str| lines(filter).lines().count();
        let good = count(&format!(
            "ipv6.src == {LOCAL} && ipv6.flow == 0 && udp.checksum.status == 1"
        ));
        let bad = count(&format!(
            "udp.checksum.status == 0 || (ipv6.src == {LOCAL} && ipv6.flow == 0 && \
             tcp.checksum.status == 0)"
        ));
        eprintln!("tshark: {good} of the program's datagrams with a good UDP checksum, {bad} bad");
        assert_eq!(
            (good, bad),
            (program, 0),
            "{}",
            lines("udp.checksum.status == 0 || tcp.checksum.status == 0")
        );
    } else {
        eprintln!("tshark is not installed (scripts/test.sh installs it): capture not decoded");
    }
}
