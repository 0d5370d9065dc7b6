//! The eBPF fast path (issue 21, docs/fast-path-design.md) in the daemon, on real namespaces
//! (root only). Every daemon here runs with `--fast-path on`; when the daemon says the fast
//! path cannot run here (`show fast-path` state off under `auto`, e.g. a build without clang,
//! or a qbridge without the option), each test says so on one `SKIPPED:` line — a failure
//! instead with `QBRIDGE_FASTPATH_REQUIRE=1` (scripts/test.sh sets it where clang is).
//!
//! - [`plain_bridge_counts_what_the_hosts_sent`]: an 802.1Q bridge, two hosts on access ports
//!   of VLAN 10: 32 MiB of verified TCP each way, the fast path's hits and flows, and every
//!   port's frame counters equal to what the hosts' veths counted.
//! - [`provider_trunk_carries_both_tags`]: host — CE (access C-VLAN 10) — PE (802.1ad,
//!   S-VLAN 100) ═ trunk ═ PE — CE — host, one daemon per side: TCP both ways, both tags on
//!   the trunk.
//! - [`churn_never_delivers_what_it_must_not`]: sequence-numbered UDP while the receiver's
//!   VLAN is deleted and re-added, its port taken down and up, the FDB flushed and its MAC
//!   moved to another port: nothing twice, nothing that left the sender after a command
//!   took the receiver out, nothing in another VLAN, counters equal to the hosts'.
//! - [`administrators_tc_drop_comes_first`]: `tc filter … prio 1 matchall action drop` on a
//!   port's interface (a `bpf da` drop program on a kernel without matchall or gact) hides the
//!   host from the bridge (not learned, not forwarded) until it is removed.
//! - [`the_hosts_own_traffic_on_a_port_interface_still_arrives`]: the kernel's own untagged
//!   traffic on an AF_PACKET port's interface (a VLAN device stacked on the port) reaches the
//!   kernel with the fast path on, as it does with it off.
//! - [`on_refuses_to_start_without_bpf_and_auto_runs_without`]: as `nobody` with the shipped
//!   unit's two capabilities, `--fast-path on` fails the start with its reason and leaves
//!   nothing behind; `auto` runs with state off, a reason, and forwards.
//! - [`sources_the_program_forwards_do_not_age_and_silent_ones_do`]: with `ageing_time 2`,
//!   hosts whose frames only the program forwards stay in the FDB (`monitor fdb` shows no
//!   deletion) for 4 ageing times; silent, they age out.
//! - [`patch_links_fold_into_the_flows`]: the provider network with patch links between the
//!   CE and PE bridges of one daemon: TCP both ways, both tags on the trunk, every frame
//!   counted once on every port of its way, no flow refused for a patch link.
//! - [`frames_to_another_address_stay_out_of_the_hosts_stack`]: frames to an address a static
//!   FDB entry puts behind a host's port reach its interface and not its stack, also when
//!   the program forwards them (only frames to a veth peer's own address go straight to it),
//!   and also to an address the host has just given up (the peer's address is read again).
//! - [`a_daemon_killed_leaves_nothing_that_forwards`]: SIGKILL leaves the TC filters; a
//!   daemon started at once in its place (fast path off) delivers every ping once, a later
//!   one removes the dead one's upcall device and forwards by the program for longer than a
//!   lease (it renews it), and unreplaced it forwards nothing once its lease ended.
//!
//! `QBRIDGE_FASTPATH_TEST_MODE=off` runs the same tests with `--fast-path off` (with a
//! qbridge that predates the option: without it), the fast path's own checks left out: the
//! outcomes must be the same on both paths. The tc test needs the fast path and skips there.

mod support;

use support::neighbour;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qbridge_io::netns::run_in_netns;
use serde_json::Value;
use support::{exec_in, inject, ip_in, tcp_transfer, Capture, Ctl, Host, Lab};

// ----- the mode, and skipping -----

/// Whether these tests run the daemon with the fast path (`on`, the default) or without.
fn fast_path_on() -> bool {
    std::env::var("QBRIDGE_FASTPATH_TEST_MODE").map_or(true, |v| v != "off")
}

/// Whether this qbridge knows `--fast-path` (`qbridge daemon --help` lists it).
fn daemon_knows_fast_path() -> bool {
    let out = std::process::Command::new(support::qbridge_bin())
        .args(["daemon", "--help"])
        .output();
    out.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("--fast-path")
            || String::from_utf8_lossy(&o.stderr).contains("--fast-path")
    })
}

/// The daemon options of this run's mode.
fn mode_args() -> Vec<&'static str> {
    if fast_path_on() {
        vec!["--fast-path", "on"]
    } else if daemon_knows_fast_path() {
        vec!["--fast-path", "off"]
    } else {
        vec![]
    }
}

/// Prints why the test does nothing; a failure with `QBRIDGE_FASTPATH_REQUIRE=1`.
fn skip(why: &str) {
    if std::env::var_os("QBRIDGE_FASTPATH_REQUIRE").is_some_and(|v| v == "1") {
        panic!("the fast path must run here (QBRIDGE_FASTPATH_REQUIRE=1) but: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// `Some(reason)` when the fast path cannot run here, as the daemon says: a daemon with
/// `--fast-path auto` and one port (a veth in a scratch namespace) reports `state` off.
/// `None` in off mode.
fn fast_path_unavailable() -> Option<String> {
    static PROBE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_fast_path).clone()
}

fn probe_fast_path() -> Option<String> {
    if !fast_path_on() {
        return None;
    }
    if !daemon_knows_fast_path() {
        return Some(format!(
            "{} has no --fast-path option (built before the fast path's wiring)",
            support::qbridge_bin().display()
        ));
    }
    let mut lab = Lab::new("fp-probe");
    let ns = lab.netns("fpprobe").expect("probe namespace");
    lab.veth(&ns, "probe0", &ns, "probe1").expect("probe veth");
    let ctl = match lab.daemon_args(
        &ns,
        "link add br0 type bridge vlan_filtering 1\n\
         link add probe type afpacket dev probe0\n\
         link set dev probe master br0\n",
        &["--fast-path", "auto"],
    ) {
        Ok(c) => c,
        Err(e) => panic!("a daemon with --fast-path auto did not start: {e}"),
    };
    let v = ctl
        .json(&["show", "fast-path"])
        .unwrap_or_else(|e| panic!("show fast-path: {e}"));
    if v["state"] == "on" {
        None
    } else {
        Some(format!(
            "the daemon runs without the fast path here (--fast-path auto: state {}, reason {})",
            v["state"], v["reason"]
        ))
    }
}

/// Returns from the test (after one `SKIPPED:` line) when namespaces or the fast path are
/// unavailable.
macro_rules! skip_unless_fast_path {
    () => {
        skip_unless_netns!();
        if let Some(why) = fast_path_unavailable() {
            skip(&why);
            return;
        }
    };
}

/// Starts a daemon in `ns` with this run's mode; with the fast path on, checks that
/// `show fast-path` says on and serves `ports`.
fn start(lab: &mut Lab, ns: &str, batch: &str, ports: &[&str]) -> Ctl {
    let ctl = lab
        .daemon_args(ns, batch, &mode_args())
        .unwrap_or_else(|e| panic!("daemon with {:?}: {e}", mode_args()));
    if fast_path_on() {
        let text = ctl
            .cmd(&["show", "fast-path"])
            .unwrap_or_else(|e| panic!("show fast-path: {e}"));
        assert!(text.starts_with("fast-path on"), "show fast-path: {text}");
        let v = show_fast_path(&ctl);
        assert_eq!(v["mode"], "on", "show fast-path: {v}");
        assert_eq!(v["state"], "on", "--fast-path on, yet: {v}");
        let served: Vec<&str> = v["ports"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for p in ports {
            assert!(
                served.contains(p),
                "port {p} not served by the fast path: {v}"
            );
        }
    }
    ctl
}

/// `qbridge -j show fast-path`.
fn show_fast_path(ctl: &Ctl) -> Value {
    ctl.json(&["show", "fast-path"])
        .unwrap_or_else(|e| panic!("-j show fast-path: {e}"))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

// ----- counters -----

/// A host interface's kernel counters: (rx_packets, tx_packets).
fn host_counts(h: &Host) -> (u64, u64) {
    let read = |what: &str| -> u64 {
        exec_in(
            &h.ns,
            "cat",
            &[&format!("/sys/class/net/{}/statistics/{what}", h.ifname)],
        )
        .unwrap_or_else(|e| panic!("{} {what}: {e}", h.name))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{} {what}: {e}", h.name))
    };
    (read("rx_packets"), read("tx_packets"))
}

/// A port's counters from `link show -s`: (rx_frames, tx_frames, drops by reason, tx_sw_gso,
/// tx_gro_segments).
#[derive(Debug, Clone, PartialEq)]
struct PortCounts {
    rx: u64,
    tx: u64,
    drops: BTreeMap<String, u64>,
    tx_sw_gso: u64,
    /// Frames the transmit stage's GRO merged into an earlier frame of the same batch
    /// (docs/daemon.md, "Receive coalescing"): counted in `tx` as the switch forwarded them,
    /// never on the wire as frames of their own.
    tx_gro_segments: u64,
}

impl PortCounts {
    /// Frames a backend refused to send (counted in `tx`, never on the wire).
    fn tx_refused(&self) -> u64 {
        self.drops
            .iter()
            .filter(|(k, _)| k.starts_with("tx_"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Frames the kernel or a backend dropped before the switch saw them (not in `rx`).
    fn rx_lost(&self) -> u64 {
        self.drops
            .iter()
            .filter(|(k, _)| k.starts_with("rx_"))
            .map(|(_, n)| n)
            .sum()
    }
}

fn port_counts(ctl: &Ctl, port: &str) -> PortCounts {
    let v = ctl
        .json(&["-s", "link", "show", "dev", port])
        .unwrap_or_else(|e| panic!("link show -s dev {port}: {e}"));
    let p = &v[0];
    let s = &p["stats"];
    PortCounts {
        rx: num(s, "rx_frames"),
        tx: num(s, "tx_frames"),
        drops: s["drops"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
            .collect(),
        tx_sw_gso: num(&p["runtime"], "tx_sw_gso"),
        tx_gro_segments: num(&p["runtime"], "tx_gro_segments"),
    }
}

/// A kernel counter of interface `dev` in namespace `ns` (`/sys/class/net/DEV/statistics/`).
fn dev_counter(ns: &str, dev: &str, what: &str) -> u64 {
    exec_in(
        ns,
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/{what}")],
    )
    .unwrap_or_else(|e| panic!("{dev} {what} in {ns}: {e}"))
    .trim()
    .parse()
    .unwrap_or_else(|e| panic!("{dev} {what} in {ns}: {e}"))
}

/// One port, the host behind it and the port's interface (`sw_if` in `sw_ns`), with the
/// host's counters and the interface's transmit drops when the daemon started.
struct Pair<'a> {
    port: &'a str,
    host: &'a Host,
    sw_ns: &'a str,
    sw_if: &'a str,
    base: (u64, u64),
    base_sw_tx_dropped: u64,
}

impl<'a> Pair<'a> {
    fn new(port: &'a str, host: &'a Host, sw_ns: &'a str, sw_if: &'a str) -> Pair<'a> {
        Pair {
            port,
            host,
            sw_ns,
            sw_if,
            base: host_counts(host),
            base_sw_tx_dropped: dev_counter(sw_ns, sw_if, "tx_dropped"),
        }
    }

    /// What the host's interface counted since: (received, sent).
    fn host_delta(&self) -> (u64, u64) {
        let (rx, tx) = host_counts(self.host);
        (rx - self.base.0, tx - self.base.1)
    }

    /// Frames the kernel dropped since between the port's interface and the host (a veth's
    /// transmit that found the peer's backlog full): the switch sent them, the host never
    /// received them.
    fn sw_tx_dropped(&self) -> u64 {
        dev_counter(self.sw_ns, self.sw_if, "tx_dropped") - self.base_sw_tx_dropped
    }

    /// Empty when the port's counters equal the host's: rx = frames the host sent (less the
    /// ones the kernel dropped before the switch, counted as `rx_*` drops), tx less the
    /// frames the backend refused, less the frames the kernel dropped on the veth to the host,
    /// less the frames the transmit stage's GRO merged into another (two small segments of a
    /// flow in one batch leave as one frame) = frames the host received. Otherwise the
    /// difference.
    fn mismatch(&self, ctl: &Ctl) -> String {
        let c = port_counts(ctl, self.port);
        let (h_rx, h_tx) = self.host_delta();
        let lost_to_host = self.sw_tx_dropped();
        let mut m = String::new();
        if c.rx + c.rx_lost() != h_tx {
            m += &format!(
                "{}: port rx {} (+ {} lost before the switch), {} sent {}; ",
                self.port,
                c.rx,
                c.rx_lost(),
                self.host.name,
                h_tx
            );
        }
        if c.tx - c.tx_refused() - lost_to_host - c.tx_gro_segments != h_rx {
            m += &format!(
                "{}: port tx {} (- {} refused by the backend, - {} dropped by {}'s transmit, \
                 - {} merged by GRO; tx_sw_gso {}), {} received {} (rx_dropped {}; {} \
                 tx_packets {}); ",
                self.port,
                c.tx,
                c.tx_refused(),
                lost_to_host,
                self.sw_if,
                c.tx_gro_segments,
                c.tx_sw_gso,
                self.host.name,
                h_rx,
                dev_counter(&self.host.ns, &self.host.ifname, "rx_dropped"),
                self.sw_if,
                dev_counter(self.sw_ns, self.sw_if, "tx_packets")
            );
        }
        m
    }
}

/// Waits (up to 10 s, for frames still in flight after the traffic stopped) until every
/// pair's counters agree, then asserts that they do.
fn assert_counts_agree(ctl: &Ctl, pairs: &[Pair]) {
    let all = || pairs.iter().map(|p| p.mismatch(ctl)).collect::<String>();
    support::wait_until(Duration::from_secs(10), || all().is_empty());
    let m = all();
    assert!(
        m.is_empty(),
        "the ports' counters differ from the hosts': {m}\n{}",
        ctl.stats_text()
    );
}

/// Static neighbour entries both ways, so that no ARP is on the wire: every frame a host
/// sends is one the test made it send.
fn static_neighbours(a: &Host, b: &Host) {
    neighbour(a, &b.ip, &b.mac);
    neighbour(b, &a.ip, &a.mac);
}

/// Two hosts (`ips`) behind interfaces s1 and s2 of a switch namespace, static neighbours,
/// and this run's daemon there with `batch` (`ports`: the ones the fast path must serve).
fn two_hosts(
    test: &str,
    ips: [&str; 2],
    batch: &str,
    ports: &[&str],
) -> (support::Star, Host, Host, Ctl) {
    let mut star = support::Star::new(test, &ips).unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    static_neighbours(&h1, &h2);
    let sw = star.sw.clone();
    let ctl = start(&mut star.lab, &sw, batch, ports);
    (star, h1, h2, ctl)
}

const MIB32: u64 = 32 << 20;

/// 32 MiB of verified TCP from `a` to `b`, then back; `stats` says what the switch counted
/// when one fails.
fn tcp_each_way(a: &Host, b: &Host, stats: &dyn Fn() -> String) {
    for (from, to) in [(a, b), (b, a)] {
        let r = tcp_transfer(from, to, MIB32, Duration::from_secs(180))
            .unwrap_or_else(|e| panic!("TCP {} -> {}: {e}\n{}", from.name, to.name, stats()));
        eprintln!(
            "{} -> {}: {} bytes in {:.2} s ({:.2} Gbit/s)",
            from.name,
            to.name,
            r.bytes,
            r.secs,
            r.gbit_per_s()
        );
    }
}

// ----- a: a plain 802.1Q bridge -----

/// Two hosts on access ports of VLAN 10 (ports `left` and `right` on interfaces `s1`, `s2`):
/// 32 MiB of verified TCP each way; then the fast path has flows and hits, every port's
/// rx/tx frames are exactly what its host's veth sent and received (static neighbours: no
/// ARP, IPv6 off: nothing else on the wire; tx less the segments the transmit stage's GRO
/// merged, which the switch counted as it forwarded them), and VLAN 10's counters are the
/// ports' sums.
#[test]
fn plain_bridge_counts_what_the_hosts_sent() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let (star, h1, h2, ctl) = two_hosts(
        "fp-plain",
        ["10.21.10.1", "10.21.10.2"],
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
         link add left type afpacket dev s1\n\
         link add right type afpacket dev s2\n\
         link set dev left master br0\n\
         link set dev right master br0\n\
         vlan add vid 10 dev left pvid untagged\n\
         vlan add vid 10 dev right pvid untagged\n",
        &["left", "right"],
    );
    let pairs = [
        Pair::new("left", &h1, &star.sw, "s1"),
        Pair::new("right", &h2, &star.sw, "s2"),
    ];

    tcp_each_way(&h1, &h2, &|| ctl.stats_text());

    // Right after the traffic, before any other command; again after the counters were read.
    let right_after = fast_path_on().then(|| show_fast_path(&ctl));
    assert_counts_agree(&ctl, &pairs);
    let mut ports_rx_tx = (0, 0);
    for p in ["left", "right"] {
        let c = port_counts(&ctl, p);
        assert!(c.drops.is_empty(), "{p} dropped frames: {:?}", c.drops);
        eprintln!(
            "{p}: rx {} tx {} tx_sw_gso {} tx_gro_segments {}",
            c.rx, c.tx, c.tx_sw_gso, c.tx_gro_segments
        );
        ports_rx_tx.0 += c.rx;
        ports_rx_tx.1 += c.tx;
    }
    // VLAN 10's counters (`vlan show -s`) hold every frame of both ports, whichever path
    // took it.
    let vlans = ctl.json(&["-s", "vlan", "show"]).unwrap();
    let v10 = vlans
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["ifname"] == "br0")
        .flat_map(|b| b["vlans"].as_array().cloned().unwrap_or_default())
        .find(|v| v["vid"] == 10)
        .unwrap_or_else(|| panic!("no VLAN 10 in vlan show -s: {vlans}"));
    assert_eq!(
        (num(&v10, "rx_packets"), num(&v10, "tx_packets")),
        ports_rx_tx,
        "VLAN 10's rx/tx packets against the ports' rx/tx frames: {v10}"
    );
    if let Some(first) = right_after {
        let v = show_fast_path(&ctl);
        eprintln!("show fast-path right after the traffic: {first}\nand after the counters: {v}");
        assert!(num(&first, "hits") > 0, "no fast-path hits: {first}");
        assert!(
            num(&first, "flows") >= 2,
            "fewer than 2 flows right after the traffic: {first}"
        );
        assert!(
            num(&v, "flows") >= 2,
            "fewer than 2 flows after read-only commands (-j show fast-path, link show -s) and \
             no traffic: {v}; right after the traffic: {first}"
        );
    }
}

// ----- b: the provider network -----

/// One side of the provider network, for namespace `sw` and host interface `h0`: CE (802.1Q:
/// `ce-host` access C-VLAN 10, `ce-up` tagged) — veth `ce0`/`pe0` — PE (802.1ad:
/// `pe-cust` PVID 100 untagged, `pe-trunk` tagged on `t0`).
const PROVIDER_SIDE: &str = "\
link add ce type bridge vlan_filtering 1 vlan_default_pvid 0
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad vlan_default_pvid 0
link add ce-host type afpacket dev h0
link add ce-up type afpacket dev ce0
link add pe-cust type afpacket dev pe0
link add pe-trunk type afpacket dev t0
link set dev ce-host master ce
link set dev ce-up master ce
link set dev pe-cust master pe
link set dev pe-trunk master pe
vlan add vid 10 dev ce-host pvid untagged
vlan add vid 10 dev ce-up
vlan add vid 100 dev pe-cust pvid untagged
vlan add vid 100 dev pe-trunk
";

const PROVIDER_PORTS: [&str; 4] = ["ce-host", "ce-up", "pe-cust", "pe-trunk"];

const S100_C10: [(u16, u16); 2] = [(0x88a8, 100), (0x8100, 10)];

/// hostA — side A ═ trunk `t0`–`t0` ═ side B — hostB, one daemon per side (every link a
/// veth, so every port can be served by the fast path): 32 MiB of verified TCP each way;
/// every frame from a host on the trunk carries S-tag 100 over C-tag 10, both ways; both
/// daemons' fast paths hit.
#[test]
fn provider_trunk_carries_both_tags() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut lab = Lab::new("fp-provider");
    let swa = lab.netns("fpswa").unwrap();
    let swb = lab.netns("fpswb").unwrap();
    let ha = lab.host("hostA", "10.21.20.1/24", &swa, "h0").unwrap();
    let hb = lab.host("hostB", "10.21.20.2/24", &swb, "h0").unwrap();
    for sw in [&swa, &swb] {
        lab.veth(sw, "ce0", sw, "pe0").unwrap();
    }
    lab.veth(&swa, "t0", &swb, "t0").unwrap();
    let ctl_a = start(&mut lab, &swa, PROVIDER_SIDE, &PROVIDER_PORTS);
    let ctl_b = start(&mut lab, &swb, PROVIDER_SIDE, &PROVIDER_PORTS);

    // Each capture sees what its end of the trunk receives: t0 in B, A's frames.
    let cap_b = Capture::start(&swb, "t0", 0).unwrap();
    let cap_a = Capture::start(&swa, "t0", 0).unwrap();
    let stats = || format!("A:\n{}\nB:\n{}", ctl_a.stats_text(), ctl_b.stats_text());
    tcp_each_way(&ha, &hb, &stats);
    // Each daemon's first command after the traffic.
    let right_after = fast_path_on().then(|| (show_fast_path(&ctl_a), show_fast_path(&ctl_b)));
    let at_b = cap_b.finish().unwrap();
    let at_a = cap_a.finish().unwrap();
    eprintln!(
        "trunk into B: {} ({} TCP frames, {} super-frames)\ntrunk into A: {} ({} TCP, {} super)",
        at_b.summary(),
        at_b.tcp_frames,
        at_b.tcp_super_frames,
        at_a.summary(),
        at_a.tcp_frames,
        at_a.tcp_super_frames
    );
    for (cap, host, end) in [(&at_b, &ha, "B"), (&at_a, &hb, "A")] {
        let stacks = cap.stacks_from(&host.mac);
        assert_eq!(
            stacks,
            vec![S100_C10.to_vec()],
            "frames from {} arriving at {end}'s trunk end: {}",
            host.name,
            cap.summary()
        );
        let from_host = cap.count_from(&[&host.mac]);
        assert_eq!(
            from_host,
            cap.total,
            "frames from nobody's host on the trunk: {}",
            cap.summary()
        );
        assert!(cap.tcp_frames > 0, "no TCP on the trunk: {}", cap.summary());
    }
    if let Some((a, b)) = right_after {
        for (side, v) in [("A", &a), ("B", &b)] {
            eprintln!("side {side}: show fast-path: {v}");
            assert!(num(v, "hits") > 0, "side {side}: no hits: {v}");
            assert!(num(v, "flows") >= 2, "side {side}: fewer than 2 flows: {v}");
        }
    }
}

// ----- c: churn -----

const UDP_PORT: u16 = 40_021;

/// A datagram: sequence number, then the phase the sender read just before sending it.
fn datagram(seq: u64, phase: u32) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    d[8..12].copy_from_slice(&phase.to_le_bytes());
    d
}

/// Datagrams received by one host: (sequence number, phase), in arrival order.
type Received = Arc<Mutex<Vec<(u64, u32)>>>;

/// A UDP receiver on `h` (its address, [`UDP_PORT`]) until `stop`.
fn receiver(h: &Host, stop: Arc<AtomicBool>) -> (Received, std::thread::JoinHandle<()>) {
    let ip = h.ip.clone();
    let sock = run_in_netns(&h.ns, move || UdpSocket::bind((ip.as_str(), UDP_PORT)))
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .unwrap_or_else(|e| panic!("bind in {}: {e}", h.name));
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let got: Received = Arc::default();
    let got2 = got.clone();
    let handle = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while !stop.load(Ordering::Acquire) {
            if let Ok(n) = sock.recv(&mut buf) {
                if n >= 12 {
                    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    let phase = u32::from_le_bytes(buf[8..12].try_into().unwrap());
                    got2.lock().unwrap().push((seq, phase));
                }
            }
        }
    });
    (got, handle)
}

/// A frame from `src` (MAC) to `dst` of an EtherType nobody listens to (local experimental
/// 0x88b5): the bridge learns `src` on the port it enters; the receiving host drops it.
fn hello(src: &str, dst: &str) -> Vec<u8> {
    support::frame(dst, src, &[], 0x88b5, 46)
}

/// The churn's phases: the sender stamps every datagram with the phase it read before
/// sending, so "sent after the command returned" is exact, not a matter of timing.
mod ph {
    pub const START: u32 = 0;
    /// After `vlan del` returned, before `vlan add` is issued: the receiver's port is out.
    pub const VLAN_OUT: u32 = 1;
    pub const VLAN_ADDING: u32 = 2;
    pub const VLAN_BACK: u32 = 3;
    pub const DOWN_ISSUING: u32 = 4;
    /// After `link set down` returned, before `up` is issued.
    pub const PORT_DOWN: u32 = 5;
    pub const PORT_UPPING: u32 = 6;
    pub const PORT_UP: u32 = 7;
    pub const FLUSHING: u32 = 8;
    pub const FLUSHED: u32 = 9;
    pub const RELEARNED: u32 = 10;
    pub const MOVING: u32 = 11;
    /// After the FDB showed the receiver's MAC on the third port: only that port's host.
    pub const MOVED: u32 = 12;
}

/// Ports `p1` (h1, sender, VLAN 10), `p2` (h2, receiver, VLAN 10), `p3` (h3, VLAN 10: takes
/// h2's MAC and address at the end), `p4` (h4, VLAN 20: must receive nothing). h1 sends a
/// datagram to h2's address every millisecond while, in order: `vlan del`/`vlan add` of VLAN
/// 10 on p2, `link set dev p2 down`/`up`, `fdb flush`, and h2's MAC moving to p3. After each
/// step h2 (then h3) sends one frame so the bridge learns it again, and the test waits for a
/// datagram of the new phase. Checks: no sequence number twice (across h2 and h3); h2 gets
/// nothing sent while p2 was out of VLAN 10 or down, nor after the move; h3 nothing before
/// it took the MAC; h4 and p4 nothing at all; every port's counters equal its host's.
#[test]
fn churn_never_delivers_what_it_must_not() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut star = support::Star::new(
        "fp-churn",
        &["10.21.30.1", "10.21.30.2", "10.21.30.3", "10.21.30.4"],
    )
    .unwrap();
    let mut hs: Vec<Host> = (1..=4).map(|n| star.h(n).clone()).collect();
    hs[2].ip = hs[1].ip.clone();
    let (h1, h2, h3, h4) = (&hs[0], &hs[1], &hs[2], &hs[3]);
    // h3 answers to h2's address (in its own namespace): it is h2 once it has h2's MAC too.
    ip_in(&h3.ns, &["addr", "flush", "dev", "eth0"]).unwrap();
    ip_in(&h3.ns, &["addr", "add", "10.21.30.2/24", "dev", "eth0"]).unwrap();
    static_neighbours(h1, h2);
    let sw = star.sw.clone();
    let lines = star.port_lines();
    let ctl = start(
        &mut star.lab,
        &sw,
        &(lines
            + "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
               link set dev p1 master br0\n\
               link set dev p2 master br0\n\
               link set dev p3 master br0\n\
               link set dev p4 master br0\n\
               vlan add vid 10 dev p1 pvid untagged\n\
               vlan add vid 10 dev p2 pvid untagged\n\
               vlan add vid 10 dev p3 pvid untagged\n\
               vlan add vid 20 dev p4 pvid untagged\n"),
        &["p1", "p2", "p3", "p4"],
    );
    let pairs = [
        Pair::new("p1", h1, &sw, "s1"),
        Pair::new("p2", h2, &sw, "s2"),
        Pair::new("p3", h3, &sw, "s3"),
        Pair::new("p4", h4, &sw, "s4"),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let (got2, rx2) = receiver(h2, stop.clone());
    let (got3, rx3) = receiver(h3, stop.clone());

    // The bridge learns h2 on p2 before the traffic starts.
    inject(&h2.ns, "eth0", &[hello(&h2.mac, &h1.mac)]).unwrap();
    let fdb_on = |mac: &str, port: &str| {
        support::wait_until(Duration::from_secs(5), || {
            ctl.fdb_has(mac, port).unwrap_or(false)
        })
    };
    assert!(
        fdb_on(&h2.mac, "p2"),
        "h2 not learned on p2: {:?}",
        ctl.fdb()
    );

    let stamp = Arc::new(AtomicU32::new(ph::START));
    let sock = {
        let ip = h1.ip.clone();
        run_in_netns(&h1.ns, move || UdpSocket::bind((ip.as_str(), 0)))
            .unwrap()
            .unwrap()
    };
    let to = format!("{}:{UDP_PORT}", h2.ip);
    let sender = {
        let (stop, stamp) = (stop.clone(), stamp.clone());
        std::thread::spawn(move || -> (u64, u64) {
            let (mut seq, mut errors) = (0u64, 0u64);
            while !stop.load(Ordering::Acquire) {
                let p = stamp.load(Ordering::Acquire);
                if sock.send_to(&datagram(seq, p), to.as_str()).is_err() {
                    errors += 1;
                }
                seq += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            (seq, errors)
        })
    };
    let cmd = |args: &[&str]| {
        ctl.cmd(args)
            .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
    };
    // Waits until `got` holds a datagram of phase `p` (traffic flows again).
    let wait_phase = |got: &Received, who: &str, p: u32| {
        let ok = support::wait_until(Duration::from_secs(10), || {
            got.lock().unwrap().iter().any(|&(_, q)| q == p)
        });
        assert!(
            ok,
            "{who} received no datagram of phase {p}\n{}\nfdb: {:?}",
            ctl.stats_text(),
            ctl.fdb()
        );
    };
    // While the receiver is out, datagrams go on being sent: a few hundred of them.
    let dwell = || std::thread::sleep(Duration::from_millis(300));
    let relearn = |h: &Host, port: &str| {
        inject(&h.ns, "eth0", &[hello(&h2.mac, &h1.mac)]).unwrap();
        assert!(
            fdb_on(&h2.mac, port),
            "h2's MAC not learned on {port}: {:?}",
            ctl.fdb()
        );
    };

    wait_phase(&got2, "h2", ph::START);

    // 1. VLAN 10 leaves p2, and comes back.
    cmd(&["vlan", "del", "vid", "10", "dev", "p2"]);
    stamp.store(ph::VLAN_OUT, Ordering::Release);
    dwell();
    stamp.store(ph::VLAN_ADDING, Ordering::Release);
    cmd(&["vlan", "add", "vid", "10", "dev", "p2", "pvid", "untagged"]);
    stamp.store(ph::VLAN_BACK, Ordering::Release);
    relearn(h2, "p2");
    wait_phase(&got2, "h2", ph::VLAN_BACK);

    // 2. p2 down, and up.
    stamp.store(ph::DOWN_ISSUING, Ordering::Release);
    cmd(&["link", "set", "dev", "p2", "down"]);
    stamp.store(ph::PORT_DOWN, Ordering::Release);
    dwell();
    stamp.store(ph::PORT_UPPING, Ordering::Release);
    cmd(&["link", "set", "dev", "p2", "up"]);
    stamp.store(ph::PORT_UP, Ordering::Release);
    relearn(h2, "p2");
    wait_phase(&got2, "h2", ph::PORT_UP);

    // 3. The FDB flushed: flooded to p2 (and p3, whose host drops them: another MAC) until
    //    h2 is learned again.
    stamp.store(ph::FLUSHING, Ordering::Release);
    cmd(&["fdb", "flush", "dev", "br0"]);
    stamp.store(ph::FLUSHED, Ordering::Release);
    wait_phase(&got2, "h2", ph::FLUSHED);
    relearn(h2, "p2");
    stamp.store(ph::RELEARNED, Ordering::Release);
    wait_phase(&got2, "h2", ph::RELEARNED);

    // 4. h2's MAC moves to p3: h3 takes it and says hello; h2 stays up, silent.
    stamp.store(ph::MOVING, Ordering::Release);
    ip_in(&h3.ns, &["link", "set", "dev", "eth0", "address", &h2.mac]).unwrap();
    relearn(h3, "p3");
    stamp.store(ph::MOVED, Ordering::Release);
    wait_phase(&got3, "h3", ph::MOVED);
    dwell();

    stop.store(true, Ordering::Release);
    let (sent, send_errors) = sender.join().unwrap();
    // Frames in flight reach the receivers before they stop reading.
    std::thread::sleep(Duration::from_millis(200));
    rx2.join().unwrap();
    rx3.join().unwrap();
    let got2 = got2.lock().unwrap().clone();
    let got3 = got3.lock().unwrap().clone();

    let by_phase = |g: &[(u64, u32)]| {
        let mut m = BTreeMap::<u32, u64>::new();
        for &(_, p) in g {
            *m.entry(p).or_default() += 1;
        }
        m
    };
    eprintln!(
        "sent {sent} datagrams ({send_errors} send errors); h2 received {} by phase {:?}; \
         h3 received {} by phase {:?}",
        got2.len(),
        by_phase(&got2),
        got3.len(),
        by_phase(&got3)
    );
    let mut seen = BTreeMap::<u64, &str>::new();
    for (who, g) in [("h2", &got2), ("h3", &got3)] {
        for &(seq, _) in g.iter() {
            if let Some(first) = seen.insert(seq, who) {
                panic!("datagram {seq} received twice: by {first} and by {who}");
            }
        }
    }
    let forbidden2: Vec<_> = got2
        .iter()
        .filter(|(_, p)| [ph::VLAN_OUT, ph::PORT_DOWN, ph::MOVED].contains(p))
        .collect();
    assert!(
        forbidden2.is_empty(),
        "h2 received datagrams sent while p2 was out of VLAN 10 (phase 1), down (5) or after \
         its MAC moved to p3 (12): {forbidden2:?}"
    );
    let early3: Vec<_> = got3.iter().filter(|(_, p)| *p < ph::MOVING).collect();
    assert!(
        early3.is_empty(),
        "h3 received datagrams before it had h2's MAC: {early3:?}"
    );

    // VLAN 20 saw nothing; every port counted what its host sent and received.
    let h4_rx = pairs[3].host_delta().0;
    assert_eq!(h4_rx, 0, "h4 (VLAN 20) received {h4_rx} frames");
    assert_counts_agree(&ctl, &pairs);
    let c1 = port_counts(&ctl, "p1");
    let (_, h1_sent) = pairs[0].host_delta();
    // h1 sent the datagrams and nothing else (static neighbours, no ICMP back to it).
    assert_eq!(
        h1_sent,
        sent - send_errors,
        "h1 sent other frames than the datagrams (p1 rx {})",
        c1.rx
    );
    eprintln!("p1: {c1:?}");
    // To h1: the five hellos of h2 and h3 (start, after each of the four steps), nothing else.
    assert_eq!(c1.tx, 5, "p1 sent other frames than the 5 hellos: {c1:?}");
    // To h2: datagrams only, and its socket got every one the bridge sent (and the kernel
    // did not drop on the veth).
    let c2 = port_counts(&ctl, "p2");
    let lost_to_h2 = pairs[1].sw_tx_dropped();
    assert_eq!(
        c2.tx - lost_to_h2,
        got2.len() as u64,
        "p2 sent {} frames ({lost_to_h2} dropped by s2's transmit), h2's socket got {} datagrams",
        c2.tx,
        got2.len()
    );
    if fast_path_on() {
        let v = show_fast_path(&ctl);
        eprintln!("show fast-path: {v}");
        assert!(num(&v, "hits") > 0, "no fast-path hits: {v}");
    }
    for (p, h) in [("p2", h2), ("p3", h3)] {
        eprintln!("{p} ({}): {:?}", h.mac, port_counts(&ctl, p));
    }
}

// ----- d: the administrator's tc rule -----

/// Adds a priority-1 ingress filter on `dev` (in `ns`) that drops every frame:
/// `matchall action drop`, or, on a kernel without the matchall classifier or the gact action
/// (this one has neither), `bpf da` with a program that returns `TC_ACT_SHOT` (compiled by
/// clang into the lab's directory). Returns the filter's words.
fn admin_drop(lab: &Lab, ns: &str, dev: &str) -> Result<String, String> {
    let base = ["filter", "add", "dev", dev, "ingress", "prio", "1"];
    let matchall = ["matchall", "action", "drop"];
    let e1 = match exec_in(ns, "tc", &[&base[..], &matchall[..]].concat()) {
        Ok(_) => return Ok(matchall.join(" ")),
        Err(e) => e,
    };
    let src = lab.dir.join("admin_drop.c");
    let obj = lab.dir.join("admin_drop.o");
    std::fs::write(
        &src,
        "__attribute__((section(\"tc\"), used)) int drop_all(void *skb) { return 2; }\n\
         char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
    )
    .map_err(|e| e.to_string())?;
    let (src, obj) = (src.to_string_lossy(), obj.to_string_lossy());
    support::run("clang", &["-O2", "-target", "bpf", "-c", &src, "-o", &obj])
        .map_err(|e2| format!("{e1}; and no clang for a bpf drop program: {e2}"))?;
    let bpf = ["bpf", "da", "obj", &obj, "sec", "tc"];
    exec_in(ns, "tc", &[&base[..], &bpf[..]].concat()).map_err(|e2| format!("{e1}; {e2}"))?;
    Ok(format!("{} (matchall refused: {e1})", bpf.join(" ")))
}

/// With `tc filter add dev s1 ingress prio 1 matchall action drop` (ahead of qbridge's own
/// filter), nothing h1 sends reaches the bridge: 20 frames injected and a ping, yet the FDB
/// has no entry for h1's MAC, h2 receives nothing, p1 counts nothing. Once the filter is
/// deleted, h1 is learned on p1 and TCP works.
#[test]
fn administrators_tc_drop_comes_first() {
    let _g = support::serial();
    skip_unless_fast_path!();
    if !fast_path_on() {
        eprintln!("SKIPPED: without the fast path the AF_PACKET tap sees frames before tc ingress");
        return;
    }
    let mut star = support::Star::new("fp-tc", &["10.21.40.1", "10.21.40.2"]).unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    static_neighbours(&h1, &h2);
    let sw = star.sw.clone();
    let lines = star.port_lines();
    let ctl = start(
        &mut star.lab,
        &sw,
        &(lines
            + "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
               link set dev p1 master br0\n\
               link set dev p2 master br0\n\
               vlan add vid 10 dev p1 pvid untagged\n\
               vlan add vid 10 dev p2 pvid untagged\n"),
        &["p1", "p2"],
    );
    let pairs = [
        Pair::new("p1", &h1, &sw, "s1"),
        Pair::new("p2", &h2, &sw, "s2"),
    ];
    let tc = |args: &[&str]| exec_in(&sw, "tc", args);
    // qbridge's clsact is there already; an administrator would add it otherwise.
    let _ = tc(&["qdisc", "add", "dev", "s1", "clsact"]);
    let rule = match admin_drop(&star.lab, &sw, "s1") {
        Ok(rule) => rule,
        Err(why) => {
            eprintln!("SKIPPED: no tc drop rule can be added on this kernel: {why}");
            return;
        }
    };
    eprintln!("the administrator's rule: tc filter add dev s1 ingress prio 1 {rule}");
    eprintln!(
        "tc filters on s1:\n{}",
        tc(&["filter", "show", "dev", "s1", "ingress"]).unwrap_or_default()
    );

    let frames: Vec<Vec<u8>> = (0..20).map(|_| hello(&h1.mac, &h2.mac)).collect();
    inject(&h1.ns, "eth0", &frames).unwrap();
    let r = support::ping(&h1, &h2.ip, 3);
    assert_eq!(
        r.received, 0,
        "ping through a dropping filter: {}",
        r.output
    );
    std::thread::sleep(Duration::from_millis(300));
    let fdb = ctl.fdb().unwrap();
    assert!(
        !fdb.iter().any(|(m, _, _)| m.eq_ignore_ascii_case(&h1.mac)),
        "h1 ({}) learned behind the administrator's drop: {fdb:?}",
        h1.mac
    );
    let (h2_rx, _) = pairs[1].host_delta();
    assert_eq!(h2_rx, 0, "h2 received {h2_rx} frames from behind the drop");
    let c1 = port_counts(&ctl, "p1");
    assert_eq!(c1.rx, 0, "p1 counted frames the filter dropped: {c1:?}");
    let (_, h1_sent) = pairs[0].host_delta();
    assert!(h1_sent >= 20, "h1 sent {h1_sent} frames");

    tc(&["filter", "del", "dev", "s1", "ingress", "prio", "1"]).unwrap();
    support::assert_ping(&h1, &h2, 5);
    assert!(
        ctl.fdb_has(&h1.mac, "p1").unwrap(),
        "h1 not learned once the filter went: {:?}",
        ctl.fdb()
    );
    tcp_transfer(&h1, &h2, 1 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP once the filter went: {e}\n{}", ctl.stats_text()));
    let v = show_fast_path(&ctl);
    eprintln!("show fast-path: {v}");
    assert!(
        num(&v, "hits") > 0,
        "no fast-path hits after the filter went: {v}"
    );
}

// ----- e: the host's own traffic on a port's interface -----

/// A port's interface that the host uses itself: `eth0` in namespace `h` is an AF_PACKET
/// port of the daemon there (with a VLAN device `eth0.10` stacked on it, qbridge's TAP) and
/// also has the kernel's own address; `eth0` in `p` is plain kernel. The kernel's untagged
/// traffic on that interface must reach it with the fast path on as with it off (an
/// AF_PACKET port only taps what the kernel receives), and so must the stacked device's.
#[test]
fn the_hosts_own_traffic_on_a_port_interface_still_arrives() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut lab = Lab::new("fp-own");
    let h = lab.netns("fpownh").unwrap();
    let p = lab.netns("fpownp").unwrap();
    lab.veth(&h, "eth0", &p, "eth0").unwrap();
    // The far side's VLAN 10 device is a second daemon's (this kernel has no 8021q), without
    // the fast path: only `h`'s daemon is under test.
    let vlan_batch = "link add eth0 type afpacket dev eth0\n\
                      link add link eth0 name eth0.10 type vlan id 10\n";
    // Served or not (a port with a unicast receive filter is received by AF_PACKET), the
    // kernel must get its frames.
    let ctl = start(&mut lab, &h, vlan_batch, &[]);
    if fast_path_on() {
        eprintln!("show fast-path: {}", show_fast_path(&ctl));
    }
    lab.daemon_args(&p, vlan_batch, &["--fast-path", "off"])
        .or_else(|_| lab.daemon(&p, vlan_batch))
        .unwrap();
    let own_h = support::host_on("h/eth0", &h, "eth0", "10.21.50.1/24");
    let own_p = support::host_on("p/eth0", &p, "eth0", "10.21.50.2/24");
    let v10_h = support::host_on("h/eth0.10", &h, "eth0.10", "10.21.51.1/24");
    let v10_p = support::host_on("p/eth0.10", &p, "eth0.10", "10.21.51.2/24");
    support::assert_ping(&v10_h, &v10_p, 3);
    support::assert_ping(&own_h, &own_p, 3);
    support::assert_ping(&own_p, &own_h, 3);
    tcp_transfer(&own_p, &own_h, 1 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP to h's own address on eth0: {e}"));
}

// ----- f: without the privileges BPF needs -----

/// The daemon as `nobody` with `CAP_NET_RAW` and `CAP_NET_ADMIN` only (the shipped unit's
/// capabilities, `dist/qbridge.service`): no BPF program can be loaded. `--fast-path on` does
/// not start, says why, and leaves nothing behind (no upcall device, no tc filter on the
/// ports' interfaces); `--fast-path auto` starts without the fast path (`show fast-path`: mode
/// auto, state off, a reason) and forwards through AF_PACKET.
#[test]
fn on_refuses_to_start_without_bpf_and_auto_runs_without() {
    let _g = support::serial();
    skip_unless_fast_path!();
    if !fast_path_on() {
        eprintln!("SKIPPED: a test of --fast-path on and auto");
        return;
    }
    if support::run("setpriv", &["--version"]).is_err() {
        panic!("setpriv (util-linux) is needed for this test");
    }
    let mut star = support::Star::new("fp-caps", &["10.21.60.1", "10.21.60.2"]).unwrap();
    // The daemon's user must be able to create its socket and lock files.
    let locks = star.lab.dir.join("locks");
    std::fs::create_dir_all(&locks).unwrap();
    for d in [&star.lab.dir, &locks] {
        support::run("chown", &["nobody:nogroup", &d.to_string_lossy()]).unwrap();
        support::run("chmod", &["0755", &d.to_string_lossy()]).unwrap();
    }
    let caps = "+net_raw,+net_admin";
    let wrapper = [
        "env".to_string(),
        format!("QBRIDGE_LOCK_DIR={}", locks.display()),
        "setpriv".into(),
        "--reuid=nobody".into(),
        "--regid=nogroup".into(),
        "--clear-groups".into(),
        format!("--inh-caps=-all,{caps}"),
        format!("--ambient-caps=-all,{caps}"),
        format!("--bounding-set=-all,{caps}"),
    ];
    let w: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let sw = star.sw.clone();
    let batch = star.port_lines()
        + "link add br0 type bridge\n\
           link set dev p1 master br0\n\
           link set dev p2 master br0\n";

    let e = star
        .lab
        .daemon_wrapped(&sw, &w, &batch, &["--fast-path", "on"])
        .expect_err("--fast-path on started without the privileges BPF needs");
    eprintln!("--fast-path on, as nobody with {caps}: {e}");
    assert!(e.contains("--fast-path on"), "{e}");
    let links = ip_in(&sw, &["-o", "link", "show"]).unwrap();
    assert!(
        !links.contains("qbfp"),
        "the failed start left its upcall device: {links}"
    );
    for dev in ["s1", "s2"] {
        let filters =
            exec_in(&sw, "tc", &["filter", "show", "dev", dev, "ingress"]).unwrap_or_default();
        assert!(
            filters.trim().is_empty(),
            "the failed start left a filter on {dev}: {filters}"
        );
    }

    let ctl = star
        .lab
        .daemon_wrapped(&sw, &w, &batch, &["--fast-path", "auto"])
        .unwrap_or_else(|e| panic!("--fast-path auto as nobody with {caps}: {e}"));
    let v = show_fast_path(&ctl);
    eprintln!("--fast-path auto, as nobody with {caps}: {v}");
    assert_eq!(
        (v["mode"].as_str(), v["state"].as_str()),
        (Some("auto"), Some("off")),
        "{v}"
    );
    assert!(
        v["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "no reason: {v}"
    );
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    support::assert_ping(&h1, &h2, 5);
    tcp_transfer(&h1, &h2, 4 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP without the fast path: {e}\n{}", ctl.stats_text()));
}

// ----- g: ageing of what the program forwards -----

/// A bridge with `ageing_time 2`: h1 sends a datagram to h2 every 5 ms and h2 a hello to h1
/// every 500 ms for 8 s (4 ageing times), so after the first frames both are forwarded by the
/// program and their sources refreshed in its FDB map only. `monitor fdb` must show no
/// deletion of either entry while they talk; once they stop, both age out (ageing still
/// works: silent hosts go).
#[test]
fn sources_the_program_forwards_do_not_age_and_silent_ones_do() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut star = support::Star::new("fp-age", &["10.21.70.1", "10.21.70.2"]).unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    static_neighbours(&h1, &h2);
    let sw = star.sw.clone();
    let lines = star.port_lines();
    let ctl = start(
        &mut star.lab,
        &sw,
        &(lines
            + "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0 ageing_time 2\n\
               link set dev p1 master br0\n\
               link set dev p2 master br0\n\
               vlan add vid 10 dev p1 pvid untagged\n\
               vlan add vid 10 dev p2 pvid untagged\n"),
        &["p1", "p2"],
    );
    // `monitor fdb`, its lines collected by a thread.
    let mut mon = std::process::Command::new(support::qbridge_bin())
        .args(["--socket", &ctl.socket.to_string_lossy(), "monitor", "fdb"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("qbridge monitor fdb");
    let out = mon.stdout.take().unwrap();
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let reader = {
        let events = events.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                events.lock().unwrap().push(line);
            }
        })
    };
    // h2 drains the datagrams (no ICMP back: h2 sends only its hellos).
    let stop = Arc::new(AtomicBool::new(false));
    let (_got, rx) = receiver(&h2, stop.clone());
    let sock = {
        let ip = h1.ip.clone();
        run_in_netns(&h1.ns, move || UdpSocket::bind((ip.as_str(), 0)))
            .unwrap()
            .unwrap()
    };
    let to = format!("{}:{UDP_PORT}", h2.ip);
    let start_at = std::time::Instant::now();
    let mut seq = 0u64;
    let mut next_hello = start_at;
    while start_at.elapsed() < Duration::from_secs(8) {
        if std::time::Instant::now() >= next_hello {
            inject(&h2.ns, "eth0", &[hello(&h2.mac, &h1.mac)]).unwrap();
            next_hello += Duration::from_millis(500);
        }
        let _ = sock.send_to(&datagram(seq, 0), to.as_str());
        seq += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let talking = events.lock().unwrap().clone();
    let v = if fast_path_on() {
        Some(show_fast_path(&ctl))
    } else {
        None
    };
    // Silent now: both entries age out.
    let gone = |mac: &str| {
        let mac = mac.to_ascii_lowercase();
        move |e: &String| e.starts_with("Deleted ") && e.to_ascii_lowercase().contains(&mac)
    };
    let aged = support::wait_until(Duration::from_secs(10), || {
        let ev = events.lock().unwrap();
        ev.iter().any(gone(&h1.mac)) && ev.iter().any(gone(&h2.mac))
    });
    stop.store(true, Ordering::Release);
    rx.join().unwrap();
    let _ = mon.kill();
    let _ = mon.wait();
    let _ = reader.join();
    eprintln!(
        "{seq} datagrams; monitor while talking: {talking:?}; show fast-path: {}",
        v.as_ref().map_or("-".into(), |v| v.to_string())
    );
    let deleted: Vec<&String> = talking
        .iter()
        .filter(|e| gone(&h1.mac)(e) || gone(&h2.mac)(e))
        .collect();
    assert!(
        deleted.is_empty(),
        "entries of hosts that talked all along were deleted (aged) while they talked: \
         {deleted:?}"
    );
    if let Some(v) = v {
        assert!(
            num(&v, "hits") > seq / 2,
            "most datagrams were not hits: {v}"
        );
    }
    assert!(
        aged,
        "h1's and h2's entries did not age out once silent: {:?}\n{:?}",
        events.lock().unwrap(),
        ctl.fdb()
    );
}

// ----- patch links folded into flows -----

/// Host 1 — CE1 (access C-VLAN 10) ═patch═ PE1 (802.1ad, S-VLAN 100) — t1 ═veth═ t2 — PE2
/// ═patch═ CE2 — host 2, in one daemon: the provider network of
/// `scripts/provider-network.batch`, one customer.
const PATCHED: &str = "\
link add ce1 type bridge vlan_filtering 1 vlan_default_pvid 0
link add ce2 type bridge vlan_filtering 1 vlan_default_pvid 0
link add pe1 type bridge vlan_filtering 1 vlan_protocol 802.1ad vlan_default_pvid 0
link add pe2 type bridge vlan_filtering 1 vlan_protocol 802.1ad vlan_default_pvid 0
link add ce1-host type afpacket dev s1
link add ce2-host type afpacket dev s2
link add pe1-trunk type afpacket dev t1
link add pe2-trunk type afpacket dev t2
link add ce1-up type patch peer pe1-cust
link add ce2-up type patch peer pe2-cust
link set dev ce1-host master ce1
link set dev ce1-up master ce1
link set dev ce2-host master ce2
link set dev ce2-up master ce2
link set dev pe1-cust master pe1
link set dev pe1-trunk master pe1
link set dev pe2-cust master pe2
link set dev pe2-trunk master pe2
vlan add vid 10 dev ce1-host pvid untagged
vlan add vid 10 dev ce1-up
vlan add vid 10 dev ce2-host pvid untagged
vlan add vid 10 dev ce2-up
vlan add vid 100 dev pe1-cust pvid untagged
vlan add vid 100 dev pe1-trunk
vlan add vid 100 dev pe2-cust pvid untagged
vlan add vid 100 dev pe2-trunk
";

/// The provider network with patch links between CE and PE bridges: 32 MiB of verified TCP
/// each way; both tags on the trunk; every frame a host sent counted once on every port of
/// its way (host ports equal the hosts' veths; each patch link end's tx equals the other
/// end's rx; the host port's rx equals its patch end's tx: static neighbours and IPv6 off
/// leave nothing but the TCP on the wire), on both paths alike. With the fast path: hits,
/// and no frame refused a flow for its ports (a patch link is folded into the flow of the
/// port before it, not a port the fast path cannot serve).
#[test]
fn patch_links_fold_into_the_flows() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut star = support::Star::new("fp-patch", &["10.21.30.1", "10.21.30.2"]).unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    static_neighbours(&h1, &h2);
    let sw = star.sw.clone();
    star.lab.veth(&sw, "t1", &sw, "t2").unwrap();
    let ctl = start(
        &mut star.lab,
        &sw,
        PATCHED,
        &["ce1-host", "ce2-host", "pe1-trunk", "pe2-trunk"],
    );
    let pairs = [
        Pair::new("ce1-host", &h1, &sw, "s1"),
        Pair::new("ce2-host", &h2, &sw, "s2"),
    ];
    let cap = Capture::start(&sw, "t2", 0).unwrap();
    tcp_each_way(&h1, &h2, &|| ctl.stats_text());
    let right_after = fast_path_on().then(|| show_fast_path(&ctl));
    let at_t2 = cap.finish().unwrap();
    assert_eq!(
        at_t2.stacks_from(&h1.mac),
        vec![S100_C10.to_vec()],
        "host 1's frames on the trunk: {}",
        at_t2.summary()
    );
    assert!(
        at_t2.tcp_frames > 0,
        "no TCP on the trunk: {}",
        at_t2.summary()
    );
    assert_counts_agree(&ctl, &pairs);
    let chain = || {
        let c = |p: &str| port_counts(&ctl, p);
        let mut m = String::new();
        for (host, up, cust) in [
            ("ce1-host", "ce1-up", "pe1-cust"),
            ("ce2-host", "ce2-up", "pe2-cust"),
        ] {
            let (h, u, p) = (c(host), c(up), c(cust));
            if u.tx != p.rx || p.tx != u.rx {
                m += &format!(
                    "{up} tx {} rx {}, {cust} rx {} tx {}; ",
                    u.tx, u.rx, p.rx, p.tx
                );
            }
            if h.rx != u.tx {
                m += &format!("{host} rx {} but {up} tx {}; ", h.rx, u.tx);
            }
        }
        m
    };
    support::wait_until(Duration::from_secs(10), || chain().is_empty());
    let m = chain();
    assert!(
        m.is_empty(),
        "frames counted differently along the patch links: {m}\n{}",
        ctl.stats_text()
    );
    if let Some(v) = right_after {
        eprintln!("show fast-path: {v}");
        assert!(num(&v, "hits") > 0, "no hits: {v}");
        assert!(num(&v, "flows") >= 4, "fewer than 4 flows: {v}");
        assert_eq!(
            v["not_cached"]["port"].as_u64(),
            Some(0),
            "flows refused for their ports: {v}"
        );
    }
}

// ----- a frame to another address than the host's -----

/// Host 2's port has a static FDB entry for an address that is not host 2's, and host 1
/// sends its pings to that address: the bridge delivers them to host 2's interface, whose
/// stack drops them (not its address: PACKET_OTHERHOST), as with the kernel bridge — also
/// after the fast path cached the flow (it redirects straight to a veth's peer only frames
/// to the peer's own address, which that stack takes as its own). Pings to host 2's own
/// address are answered, through the fast path.
#[test]
fn frames_to_another_address_stay_out_of_the_hosts_stack() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let (_star, h1, h2, ctl) = two_hosts(
        "fp-other",
        ["10.21.40.1", "10.21.40.2"],
        "link add br0 type bridge\n\
         link add left type afpacket dev s1\n\
         link add right type afpacket dev s2\n\
         link set dev left master br0\n\
         link set dev right master br0\n\
         fdb add 02:99:00:00:00:99 dev right master static\n",
        &["left", "right"],
    );
    let r = support::ping(&h1, &h2.ip, 10);
    assert_eq!(
        r.received, 10,
        "pings to host 2's own address: {}",
        r.output
    );
    let hits_before = fast_path_on().then(|| num(&show_fast_path(&ctl), "hits"));
    neighbour(&h1, &h2.ip, "02:99:00:00:00:99");
    let before = port_counts(&ctl, "right").tx;
    let r = support::ping(&h1, &h2.ip, 10);
    assert_eq!(
        r.received, 0,
        "host 2 answered pings to an address not its own: {}",
        r.output
    );
    // Unanswered, ping sends until its deadline.
    let sent = port_counts(&ctl, "right").tx - before;
    assert_eq!(
        sent,
        u64::from(r.transmitted),
        "frames to 02:99:00:00:00:99 sent on right: {}",
        r.output
    );
    if let Some(b) = hits_before {
        let v = show_fast_path(&ctl);
        assert!(
            num(&v, "hits") >= b + u64::from(r.transmitted) - 2,
            "the pings to the static address were not forwarded by the program: {v}"
        );
    }

    // Host 2 takes another address while the flow to its old one is cached (and the FDB
    // still has the old one on right): after the engine's next look at the peer (once a
    // second), frames to the old address are not host 2's any more.
    neighbour(&h1, &h2.ip, &h2.mac);
    let r = support::ping(&h1, &h2.ip, 5);
    assert_eq!(r.received, 5, "pings to host 2's address: {}", r.output);
    ip_in(
        &h2.ns,
        &["link", "set", &h2.ifname, "address", "02:98:00:00:00:98"],
    )
    .unwrap();
    // The engine's peer check has run when the cached flows went stale (the change bumps the
    // generation); without the fast path there is nothing to wait for.
    assert!(
        support::wait_until(Duration::from_secs(10), || !fast_path_on()
            || num(&show_fast_path(&ctl), "flows") == 0),
        "the flows to host 2's old address stayed: {}",
        show_fast_path(&ctl)
    );
    let r = support::ping(&h1, &h2.ip, 10);
    assert_eq!(
        r.received, 0,
        "host 2 answered pings to the address it gave up: {}",
        r.output
    );
}

// ----- a TAP port -----

/// A TAP port in the daemon's namespace, whose host is that namespace's own stack, and a
/// host behind a veth: 32 MiB of verified TCP each way. With the fast path, the program on
/// the TAP's egress forwards what the stack sends (hits, the TAP among the ports served) and
/// its misses reach the pipeline through the TAP as before; the veth port's counters equal
/// its host's.
#[test]
fn a_tap_ports_host_sends_through_the_fast_path() {
    let _g = support::serial();
    skip_unless_fast_path!();
    let mut star = support::Star::new("fp-tap", &["10.21.50.1"]).unwrap();
    let h1 = star.h(1).clone();
    let sw = star.sw.clone();
    let ctl = start(
        &mut star.lab,
        &sw,
        "link add br0 type bridge\n\
         link add p1 type afpacket dev s1\n\
         link add vm type tap ifname qbfptap\n\
         link set dev p1 master br0\n\
         link set dev vm master br0\n",
        &["p1", "vm"],
    );
    exec_in(
        &sw,
        "sysctl",
        &["-qw", "net.ipv6.conf.qbfptap.disable_ipv6=1"],
    )
    .unwrap();
    ip_in(&sw, &["addr", "add", "10.21.50.9/24", "dev", "qbfptap"]).unwrap();
    ip_in(&sw, &["link", "set", "qbfptap", "up"]).unwrap();
    let mac = exec_in(&sw, "cat", &["/sys/class/net/qbfptap/address"])
        .unwrap()
        .trim()
        .to_owned();
    let tap = support::Host {
        name: "the switch namespace's stack".into(),
        ns: sw.clone(),
        ifname: "qbfptap".into(),
        ip: "10.21.50.9".into(),
        mac,
    };
    static_neighbours(&h1, &tap);
    let pairs = [Pair::new("p1", &h1, &sw, "s1")];
    tcp_each_way(&tap, &h1, &|| ctl.stats_text());
    let right_after = fast_path_on().then(|| show_fast_path(&ctl));
    assert_counts_agree(&ctl, &pairs);
    if let Some(v) = right_after {
        eprintln!("show fast-path: {v}");
        assert!(num(&v, "hits") > 0, "no hits: {v}");
        assert!(num(&v, "flows") >= 1, "no flow: {v}");
    }
}

// ----- a daemon that dies -----

/// How long a daemon's program claims frames after its last renewal (docs/fast-path.md,
/// "When the daemon dies").
const LEASE: Duration = Duration::from_secs(5);

/// Whether `dev` in `ns` has a filter of qbridge's program on its ingress.
fn has_qb_filter(ns: &str, dev: &str) -> bool {
    exec_in(ns, "tc", &["filter", "show", "dev", dev, "ingress"])
        .unwrap_or_default()
        .contains("qb_ingress")
}

/// A daemon killed with SIGKILL (a crash, the OOM killer) cannot remove its TC filters, and
/// classic `clsact` filters outlive their process. What it left must not forward: a daemon
/// started in its place at once — with the fast path off, its packet sockets receiving every
/// frame — delivers each ping exactly once (the dead one's filters on its interfaces are
/// removed when it opens them); a daemon started after the dead one's lease (5 s) removes its
/// upcall device; and a dead daemon that nobody replaces forwards nothing once its lease
/// ended (its flows are the config of a switch that no longer runs: no learning, no ageing,
/// no commands).
#[test]
fn a_daemon_killed_leaves_nothing_that_forwards() {
    let _g = support::serial();
    skip_unless_fast_path!();
    if !fast_path_on() {
        eprintln!("SKIPPED: without the fast path a daemon leaves no TC filters");
        return;
    }
    let mut star = support::Star::new("fp-kill", &["10.21.60.1", "10.21.60.2"]).unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    let sw = star.sw.clone();
    let batch = star.port_lines()
        + "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
           link set dev p1 master br0\n\
           link set dev p2 master br0\n\
           vlan add vid 10 dev p1 pvid untagged\n\
           vlan add vid 10 dev p2 pvid untagged\n";
    let once = |what: &str| {
        let r = support::ping(&h1, &h2.ip, 5);
        assert!(
            r.received >= 5 && r.transmitted == r.received && !r.output.contains("duplicates"),
            "{what}: every ping once, none twice:\n{}",
            r.output
        );
    };
    let upcall_of = |ctl: &Ctl| -> String {
        show_fast_path(ctl)["upcall"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let dev_exists = |dev: &str| ip_in(&sw, &["link", "show", dev]).is_ok();

    // 1. A daemon with the fast path forwards; it is killed.
    let ctl = start(&mut star.lab, &sw, &batch, &["p1", "p2"]);
    once("through the fast path");
    assert!(num(&show_fast_path(&ctl), "hits") > 0);
    let first_upcall = upcall_of(&ctl);
    star.lab.kill_daemon(0).unwrap();
    assert!(has_qb_filter(&sw, "s1") && dev_exists(&first_upcall));

    // 2. At once, a daemon with the fast path off: the filters go as it opens the ports.
    star.lab
        .daemon_args(&sw, &batch, &["--fast-path", "off"])
        .unwrap();
    assert!(!has_qb_filter(&sw, "s1") && !has_qb_filter(&sw, "s2"));
    once("packet sockets only, right after the kill");
    assert!(
        star.lab
            .daemon_log(1)
            .contains("removed from s1 the fast-path program"),
        "{}",
        star.lab.daemon_log(1)
    );
    assert!(star.lab.stop_daemon(1));

    // 3. After the dead daemon's lease: a new daemon removes its upcall device.
    std::thread::sleep(LEASE + Duration::from_secs(1));
    let ctl = start(&mut star.lab, &sw, &batch, &["p1", "p2"]);
    assert!(
        !dev_exists(&first_upcall),
        "{first_upcall} is still there:\n{}",
        star.lab.daemon_log(2)
    );
    once("through the new daemon's fast path");
    let second_upcall = upcall_of(&ctl);
    // Running longer than a lease, it renews it: the program still forwards.
    let hits = num(&show_fast_path(&ctl), "hits");
    std::thread::sleep(LEASE + Duration::from_secs(1));
    once("through the fast path after more than a lease");
    let later = num(&show_fast_path(&ctl), "hits");
    assert!(
        later > hits,
        "the program stopped forwarding after a lease: hits {hits} -> {later}"
    );

    // 4. Killed and not replaced: within the lease its flows may still forward; after it,
    //    nothing does.
    star.lab.kill_daemon(2).unwrap();
    std::thread::sleep(LEASE + Duration::from_secs(1));
    assert!(has_qb_filter(&sw, "s1") && dev_exists(&second_upcall));
    let r = support::ping(&h1, &h2.ip, 3);
    assert_eq!(
        r.received, 0,
        "a dead daemon's filters forwarded after its lease:\n{}",
        r.output
    );
}
