//! VXLAN over an IPv6 underlay in the eBPF fast path (decisions 78 and 82: encapsulation and
//! decapsulation), against the kernel's own VTEP at its defaults (root only; it refuses a zero
//! UDP checksum over IPv6):
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
//!
//! Decapsulation (decision 82; the underlay's offloads at their defaults, hb's TSO on): hb's
//! TCP to ha decapsulated by `qb_vxlan_in` (hits, verified bytes, no UDP6 checksum error),
//! nothing reaching ha after `link del vx0` or an external port's VNI map change answers; a
//! kernel VTEP sending zero UDP checksums: refused by a port without `udp6zerocsumrx` (the
//! socket's `Udp6InCsumErrors`), decapsulated by the program for one with it.

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::{exec_in, ip_in, tcp_transfer, tshark, Lab};

const LOCAL: &str = vxlan_rig::LOCAL6;
const REMOTE: &str = vxlan_rig::REMOTE6;

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The namespace's `Udp6InCsumErrors` (/proc/net/snmp6).
fn udp6_csum_errors(ns: &str) -> u64 {
    support::kernel_counter(ns, "Udp6", "InCsumErrors")
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

/// The picture above without qbridge ([`vxlan_rig::underlay6`]), hosts in 10.22.0.0/24.
fn underlay6(
    lab: &mut Lab,
    a: &str,
    b: &str,
) -> Option<(String, String, support::Host, support::Host)> {
    vxlan_rig::underlay6(lab, a, b, "10.22.0")
}

/// Packets `host`'s interface received.
fn host_rx(host: &support::Host) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/rx_packets", host.ifname);
    exec_in(&host.ns, "cat", &[&path])
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Pings `to` from `from` every 10 ms until the returned child is killed.
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

/// After `change` answers, `host` receives nothing more while the pinger runs on.
fn nothing_after(ctl: &support::Ctl, host: &support::Host, change: &[&str]) -> (u64, u64) {
    ctl.cmd(change).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let rx = host_rx(host);
    std::thread::sleep(Duration::from_millis(1000));
    (rx, host_rx(host))
}

/// Decapsulation over IPv6 (decision 82): hb's TCP to ha arrives from the kernel VTEP at its
/// defaults (UDP checksums computed, CHECKSUM_PARTIAL over the veth; hb's TSO on, so TCP
/// super-frames arrive whole) and is decapsulated by `qb_vxlan_in` on qbridge's underlay:
/// 32 MiB of bytes verified through real kernel TCP, the program's hits counted (vx0 learns
/// nothing and has no static entry: ha's answers are the pipeline's floods, every hit a
/// decapsulation), `Udp6InCsumErrors` unchanged on both sides. Then `link del vx0` while hb
/// pings ha every 10 ms: from the answer on, ha receives nothing more.
#[test]
fn tcp_over_ipv6_from_a_kernel_vtep_is_decapsulated_by_the_program() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6dec");
    let Some((a, b, ha, hb)) = underlay6(&mut lab, "vx6da", "vx6db") else {
        return;
    };
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local {LOCAL} dev ul dstport 4789 learning off
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE}
"
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let errors0 = (udp6_csum_errors(&a), udp6_csum_errors(&b));
    let hits0 = u(&fp()["hits"]);
    let r = tcp_transfer(&hb, &ha, 32 << 20, Duration::from_secs(40))
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
    assert_eq!(
        (udp6_csum_errors(&a), udp6_csum_errors(&b)),
        errors0,
        "UDP6 checksum errors counted"
    );

    // The port goes while hb pings ha: from the answer on, nothing reaches ha.
    let mut ping = pinger(&hb, &ha.ip);
    std::thread::sleep(Duration::from_millis(500));
    let hits1 = u(&fp()["hits"]);
    let (rx, rx_after) = nothing_after(&ctl, &ha, &["link", "del", "vx0"]);
    let _ = ping.kill();
    let _ = ping.wait();
    assert!(hits1 > hits0, "the pings were not on the fast path");
    assert_eq!(
        rx_after,
        rx,
        "frames reached ha after the port was deleted\n{}",
        ctl.stats_text()
    );
}

/// Decapsulation over IPv6 for an external port (decision 82): VNI 100 is VLAN 10, hb's pings
/// to ha are decapsulated by the program (its hits grow); `vlan del vid 10 dev vx0
/// tunnel_info` while hb pings every 10 ms: from the answer on, nothing reaches ha.
#[test]
fn an_ipv6_vni_map_change_stops_the_programs_decapsulation_before_it_answers() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6dem");
    let Some((a, _b, ha, hb)) = underlay6(&mut lab, "vx6ea", "vx6eb") else {
        return;
    };
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev qa
link add vx0 type vxlan external local {LOCAL} dev ul dstport 4789 learning off
link set dev p1 master br0
link set dev vx0 master br0
vlan add vid 10 dev p1 pvid untagged
vlan del vid 1 dev vx0
vlan add vid 10 dev vx0
vlan add vid 10 dev vx0 tunnel_info id 100
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE} vni 100
"
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping over VXLAN/IPv6\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits0 = u(&fp()["hits"]);
    let mut ping = pinger(&hb, &ha.ip);
    std::thread::sleep(Duration::from_millis(800));
    let hits1 = u(&fp()["hits"]);
    let change = ["vlan", "del", "vid", "10", "dev", "vx0", "tunnel_info"];
    let (rx, rx_after) = nothing_after(&ctl, &ha, &change);
    let _ = ping.kill();
    let _ = ping.wait();
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

/// A zero UDP checksum over IPv6 (decision 82): the kernel VTEP sends with `udp6zerocsumtx`.
/// To a port without `udp6zerocsumrx` the program passes every frame (`decap-checksum`) and
/// the port's socket drops it, counting `Udp6InCsumErrors`, as with the fast path off: hb
/// cannot ping ha. The port made again with `udp6zerocsumrx`: the pings pass, hb's unicast
/// decapsulated by the program (hits).
#[test]
fn a_zero_udp_checksum_over_ipv6_is_taken_only_where_the_port_takes_it() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6zero");
    let Some((a, b, ha, hb)) = underlay6(&mut lab, "vx6za", "vx6zb") else {
        return;
    };
    // b's VTEP again, sending zero checksums.
    ip_in(&b, &["link", "del", "vx0"]).unwrap();
    ip_in(
        &b,
        &[
            "link",
            "add",
            "vx0",
            "type",
            "vxlan",
            "id",
            "100",
            "local",
            REMOTE,
            "dev",
            "ul",
            "dstport",
            "4789",
            "nolearning",
            "udp6zerocsumtx",
        ],
    )
    .unwrap();
    ip_in(&b, &["link", "set", "vx0", "mtu", "1500"]).unwrap();
    ip_in(&b, &["link", "set", "vx0", "master", "kbr"]).unwrap();
    ip_in(&b, &["link", "set", "vx0", "up"]).unwrap();
    exec_in(
        &b,
        "bridge",
        &[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "vx0",
            "dst",
            LOCAL,
        ],
    )
    .unwrap();
    let port = |rx: &str| {
        format!(
            "link add vx0 type vxlan id 100 local {LOCAL} dev ul dstport 4789 learning off{rx}
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst {REMOTE}
"
        )
    };
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link set dev p1 master br0
{}",
        port("")
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    // hb knows ha's MAC: its pings are unicast from the first (a broadcast ARP would pass as
    // `decap-inner` before the checksum is looked at).
    support::neighbour(&hb, &ha.ip, &ha.mac);
    let errors0 = udp6_csum_errors(&a);
    let p = support::ping(&hb, &ha.ip, 20);
    let f = fp();
    assert_eq!(p.received, 0, "a zero checksum went through: {}", p.output);
    assert!(
        udp6_csum_errors(&a) > errors0,
        "the port's socket counted no Udp6InCsumErrors: {f}"
    );
    assert!(
        u(&f["misses"]["decap-checksum"]) > 0,
        "the program did not pass them as decap-checksum: {f}"
    );

    ctl.cmd(&["link", "del", "vx0"]).unwrap();
    let again = port(" udp6zerocsumrx");
    for line in again.lines() {
        let args: Vec<&str> = line.split_whitespace().collect();
        ctl.cmd(&args).unwrap();
    }
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&hb, &ha.ip)),
        "no ping with udp6zerocsumrx\n{}",
        ctl.stats_text()
    );
    let hits0 = u(&fp()["hits"]);
    let p = support::ping(&hb, &ha.ip, 50);
    let f = fp();
    assert_eq!(p.received, 50, "{}", p.output);
    assert!(
        u(&f["hits"]) - hits0 >= 40,
        "hb's zero-checksum pings were not decapsulated by the program: {f}"
    );
}

/// The encapsulation rig: the underlay without transmit checksum offload on both sides, ha's
/// TSO and GSO off, qbridge on `a` with vx0 to the kernel VTEP (hb's MAC static on it), a ping
/// through. None after saying why when the kernel VTEP cannot be made.
fn encap_rig(
    lab: &mut Lab,
    a: &str,
    b: &str,
) -> Option<(String, String, support::Host, support::Host, support::Ctl)> {
    let (a, b, ha, hb) = underlay6(lab, a, b)?;
    for ns in [&a, &b] {
        exec_in(ns, "ethtool", &["-K", "ul", "tx", "off"]).unwrap();
    }
    exec_in(
        &ha.ns,
        "ethtool",
        &["-K", "eth0", "tso", "off", "gso", "off"],
    )
    .unwrap();
    let ctl = vxlan_rig::static_remote6(lab, &a, &ha, &hb);
    Some((a, b, ha, hb, ctl))
}

/// The namespace's TCP `InCsumErrors` (/proc/net/snmp): segments its TCP dropped for a bad
/// checksum.
fn tcp_csum_errors(ns: &str) -> u64 {
    support::kernel_counter(ns, "Tcp", "InCsumErrors")
}

/// The program's inner TCP checksums over many segments left to offload (decision 87; ignored:
/// ~15 s): `QB_VX6_ROUNDS` (default 40) transfers of 1 MiB ha -> hb, the underlay captured.
/// No segment of the program's may carry a bad inner checksum (tshark) nor be refused by hb's
/// TCP (`InCsumErrors`); the segments whose checksum is 0 and that the kernel's completion
/// wrote as 0xffff (RFC 1624's warning, ~1 in 65 536, so ~0.4 a run) are listed. The capture
/// is kept as `$QB_VX6_KEEP` when set.
#[test]
#[ignore]
fn many_segments_left_to_offload_keep_good_inner_checksums() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6rep");
    let Some((_a, b, ha, hb, ctl)) = encap_rig(&mut lab, "vx6ra", "vx6rb") else {
        return;
    };
    let rounds: u32 = std::env::var("QB_VX6_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let pcap = lab.dir.join("repro.pcap");
    let capture = tshark::PcapCapture::start(&b, "ul", &pcap, &["udp", "port", "4789"]).unwrap();
    let errors0 = tcp_csum_errors(&hb.ns);
    for _ in 0..rounds {
        tcp_transfer(&ha, &hb, 1 << 20, Duration::from_secs(40))
            .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
    }
    let errors = tcp_csum_errors(&hb.ns) - errors0;
    let pcap = capture.stop();
    let f = ctl.json(&["show", "fast-path"]).unwrap_or_default();
    if let Ok(keep) = std::env::var("QB_VX6_KEEP") {
        let _ = std::fs::copy(&pcap, keep);
    }
    if !tshark::have_tshark() {
        eprintln!("tshark is not installed: capture not decoded");
        return;
    }
    let lines = |filter: &str| {
        let out = std::process::Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-o", "tcp.check_checksum:TRUE"])
            .args(["-o", "udp.check_checksum:TRUE"])
            .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
            .args(["-e", "frame.time_relative", "-e", "ip.id"])
            .args(["-e", "tcp.stream"])
            .args(["-e", "tcp.seq", "-e", "tcp.len", "-e", "tcp.checksum"])
            .args(["-e", "udp.checksum.status", "-e", "_ws.expert.message"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let program = format!("ipv6.src == {LOCAL} && ipv6.flow == 0");
    let n = lines(&program).lines().count();
    let bad = lines(&format!(
        "udp.checksum.status == 0 || ({program} && tcp.checksum.status == 0 && \
         !tcp.checksum.ffff)"
    ));
    let zero = lines(&format!("{program} && tcp.checksum.ffff"));
    eprintln!(
        "{rounds} rounds, {n} datagrams of the program's: {} bad, {} with 0xffff for 0; \
         hb's TcpInCsumErrors +{errors}\n{zero}{bad}{f}",
        bad.lines().count(),
        zero.lines().count()
    );
    assert!(n > 1000, "{n} datagrams of the program's: {f}");
    assert_eq!((bad.lines().count(), errors), (0, 0), "{bad}");
}

#[test]
fn tcp_over_ipv6_to_a_kernel_vtep_is_encapsulated_by_the_program() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6fast");
    let Some((_a, b, ha, hb, ctl)) = encap_rig(&mut lab, "vx6fa", "vx6fb") else {
        return;
    };
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let errors0 = udp6_csum_errors(&b);
    let tcp_errors0 = (tcp_csum_errors(&ha.ns), tcp_csum_errors(&hb.ns));
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
    // hb's segments arrive CHECKSUM_NONE (b's underlay computes every checksum): the program
    // sums each datagram itself and decapsulates it (decision 87), none passes for its
    // checksum.
    let (decap_csum0, hits1) = (u(&fp()["misses"]["decap-checksum"]), u(&fp()["hits"]));
    let r = tcp_transfer(&hb, &ha, 8 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP hb -> ha: {e}\n{}", ctl.stats_text()));
    let f = fp();
    assert_eq!(
        u(&f["misses"]["decap-checksum"]),
        decap_csum0,
        "hb's datagrams passed for their checksum: {f}"
    );
    assert!(
        u(&f["hits"]) - hits1 > 2000,
        "hb's TCP was not decapsulated by the program: {f}"
    );
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
    // Both hosts' TCP took every segment's checksum (decision 87).
    assert_eq!(
        (tcp_csum_errors(&ha.ns), tcp_csum_errors(&hb.ns)),
        tcp_errors0,
        "TCP checksum errors (InCsumErrors) counted by ha, hb"
    );
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
        // in the program's datagrams. A TCP checksum of 0xffff where 0x0000 is computed is
        // zero too (one's complement; the receiver's TCP takes it, checked above): the
        // kernel's skb_checksum_help writes it for a segment left to offload whose checksum
        // is 0, ~1 in 65 536 (decision 87). tshark calls it bad (RFC 1624's warning,
        // tcp.checksum.ffff); those are counted apart.
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
                .args(["-e", "frame.protocols", "-e", "tcp.flags", "-e", "tcp.seq"])
                .args(["-e", "tcp.len", "-e", "tcp.checksum"])
                .args(["-e", "_ws.expert.message"])
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
             tcp.checksum.status == 0 && !tcp.checksum.ffff)"
        ));
        let zero = count(&format!(
            "ipv6.src == {LOCAL} && ipv6.flow == 0 && tcp.checksum.ffff"
        ));
        eprintln!(
            "tshark: {good} of the program's datagrams with a good UDP checksum, {bad} bad; \
             {zero} inner TCP checksums 0xffff for 0 (RFC 1624, the kernel's completion)"
        );
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
