//! `qbridge demo`: the provider network of the README, built live in network namespaces.
//!
//! ```text
//! hostA ─ CE1 (802.1Q, access 10) ─ PE1 (802.1ad, S-VLAN 100) ═╗         ╔═ PE2 ─ CE2 ─ hostB
//! hostC ─ CE3 (802.1Q, access 10) ─ PE1 (802.1ad, S-VLAN 200) ═╩═ trunk ═╩═ PE2 ─ CE4 ─ hostD
//!                                                               ╚═ trunk2 ═╝ (t5 = t6: a ring)
//!                                    PE1 ═ trunk t3 = t4 ─┬─ s100 (802.1ad 100) ─ s100.10 (802.1Q 10): hostE
//!                                                         └─ s200 (802.1ad 200) ─ s200.10 (802.1Q 10): hostF
//! ```
//!
//! PE1 and PE2 are joined twice (t1 = t2 and t5 = t6), a loop: they run RSTP (`stp_state 1`,
//! on the provider group address 01-80-C2-00-00-08 as 802.1ad bridges do), which blocks the
//! second trunk; the demo shows `stp show`, then pulls t1 in the middle of a TCP stream and
//! shows the stream carry on over t5 = t6 with every byte checked.
//!
//! Hosts E and F have only the stacked VLAN device qbridge gives them (a TAP in their
//! namespace, the seeds' `eth0.100.10`): one endpoint per customer, same address, kept apart by
//! the S-VLAN. E reaches customer 1's hostB, F customer 2's hostD.
//!
//! Six bridges in one `qbridge daemon` (this same executable) running in a switch namespace;
//! the hosts are namespaces with the kernel's own TCP/IP stack at its defaults (MTU 1500, TSO
//! and checksum offload on). The demo pings, moves a TCP stream for a few seconds (every byte
//! checked), captures the trunk, and prints the hosts, the tag stacks seen on the trunk, the
//! throughput, and the per-port counters. Everything it creates is named `qbdemo-PID-…` and
//! removed at the end by a guard — also on an error, and on SIGINT/SIGTERM, which set a flag
//! every step checks.
//!
//! Where it cannot run (not root, no `ip netns`), it says why and replays the shipped pcap
//! example through the same bridge code instead (`examples/provider-bridge`).

use anyhow::{anyhow, bail, Context};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort, RingVersion};
use qbridge_io::netns::run_in_netns;
use qbridge_io::pcap::PcapReader;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool, OffloadMeta};
use qbridge_wire::Tpid;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const USAGE: &str = "\
Usage: qbridge demo [--seconds N] [--examples DIR]

Builds an 802.1ad provider network in network namespaces (root), runs ping and a TCP
transfer through it, shows the tag stacks on the provider trunk, the throughput and the
per-port counters, and removes everything it made. Without root or network namespaces it
replays the pcap example in DIR/provider-bridge instead (default: the repository's examples/).
  --seconds N     length of the TCP transfer (default 3)
  --examples DIR  where provider-bridge.batch and provider-bridge/*.pcap are
";

/// The daemon's configuration: see the module doc for the picture. Interface names in the
/// switch namespace: `a0`..`d0` face the hosts, `t1`-`t2` is the trunk; each CE's uplink is a
/// patch link to its PE's customer port, inside the daemon.
const BATCH: &str = include_str!("../../../examples/provider-network.batch");

/// Host name, address, the switch-side interface, and what it is.
const HOSTS: [(&str, &str, &str, &str); 4] = [
    ("hostA", "10.10.0.1/24", "a0", "customer 1, site 1"),
    ("hostB", "10.10.0.2/24", "b0", "customer 1, site 2"),
    (
        "hostC",
        "10.10.0.1/24",
        "c0",
        "customer 2, site 1 (same addresses, same C-VLAN)",
    ),
    ("hostD", "10.10.0.2/24", "d0", "customer 2, site 2"),
];

/// Switch-internal veth links: the trunk, the second PE1 trunk, the ring's second trunk
/// (CE-PE links are patch links in the daemon).
const LINKS: [(&str, &str); 3] = [("t1", "t2"), ("t3", "t4"), ("t5", "t6")];

/// The ring: a second trunk between PE1 and PE2, and RSTP on both provider bridges (PE1 the
/// root). Ports that face no bridge are edge ports: they forward at once.
const RING: &str = "
# The ring: a second PE1-PE2 trunk (t5 = t6) and RSTP on the provider bridges, which blocks
# one trunk (PE2's end of t5 = t6: PE1 is root, and t1 = t2 joined first).
link add pe1-trunkb type afpacket dev t5
link add pe2-trunkb type afpacket dev t6
link set dev pe1-trunkb master pe1
link set dev pe2-trunkb master pe2
vlan add vid 100 dev pe1-trunkb
vlan add vid 200 dev pe1-trunkb
vlan add vid 100 dev pe2-trunkb
vlan add vid 200 dev pe2-trunkb
link set dev pe1 type bridge priority 4096
link set dev pe1-cust1 edge on
link set dev pe1-cust2 edge on
link set dev pe1-trunk2 edge on
link set dev pe2-cust1 edge on
link set dev pe2-cust2 edge on
link set dev pe1 type bridge stp_state 1
link set dev pe2 type bridge stp_state 1
";

/// Hosts E and F have no interface of their own: each gets a stacked VLAN device made by
/// qbridge (a TAP in its namespace), C-VLAN 10 inside its customer's S-VLAN, on the far end of
/// a second PE1 trunk (`t3` = `t4`). Same address for both: the S-VLAN keeps them apart.
/// (name, address, TAP, S-VLAN, what it reaches)
const STACKED_HOSTS: [(&str, &str, &str, u16, usize); 2] = [
    ("hostE", "10.10.0.5/24", "s100.10", 100, 1),
    ("hostF", "10.10.0.5/24", "s200.10", 200, 3),
];

/// The lines that give hosts E and F their stacked devices (`NS_E`, `NS_F`: their namespaces).
fn stacked_batch(ns_e: &str, ns_f: &str) -> String {
    format!(
        "
# Hosts E and F: PE1's second trunk t3 carries both S-VLANs to t4, where qbridge stacks a
# VLAN device per customer (802.1ad S-VLAN) and on it one for C-VLAN 10, a TAP in the host.
link add pe1-trunk2 type afpacket dev t3
link set dev pe1-trunk2 master pe1
vlan add vid 100 dev pe1-trunk2
vlan add vid 200 dev pe1-trunk2
link add far-trunk type afpacket dev t4
link add link far-trunk name s100 type vlan protocol 802.1ad id 100
link add link s100 name s100.10 type vlan protocol 802.1Q id 10 netns {ns_e}
link add link far-trunk name s200 type vlan protocol 802.1ad id 200
link add link s200 name s200.10 type vlan protocol 802.1Q id 10 netns {ns_f}
"
    )
}

#[derive(Debug)]
struct Args {
    seconds: f64,
    examples: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> anyhow::Result<Option<Args>> {
    let mut a = Args {
        seconds: 3.0,
        examples: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.trim_start_matches('-') {
            "seconds" => {
                let v = it.next().context("--seconds needs a number")?;
                a.seconds = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && *s <= 600.0)
                    .with_context(|| format!("--seconds {v}: want a number in (0, 600]"))?;
            }
            "examples" => {
                a.examples = Some(PathBuf::from(it.next().context("--examples needs a DIR")?));
            }
            "h" | "help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            _ => bail!("qbridge demo: unknown argument \"{arg}\"\n{USAGE}"),
        }
    }
    Ok(Some(a))
}

/// Entry point; `args` are the words after `demo`.
pub fn main(args: &[String]) -> anyhow::Result<ExitCode> {
    let Some(args) = parse_args(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(reason) = why_not_live() {
        println!("qbridge demo: cannot build the live network here: {reason}.");
        println!("Falling back to the pcap replay of the same provider bridge.\n");
        return replay_fallback(args.examples.as_deref());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .with_context(|| format!("cannot install a handler for signal {sig}"))?;
    }
    let mut lab = Lab::new(stop);
    let result = live(&mut lab, &args);
    let interrupted = lab.stopped();
    lab.cleanup();
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(_) if interrupted => {
            eprintln!("qbridge demo: interrupted; everything it created is removed");
            Ok(ExitCode::from(130))
        }
        Err(e) => Err(e.context("qbridge demo failed; everything it created is removed")),
    }
}

/// Why the live demo cannot run here, if it cannot.
fn why_not_live() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if uid != "0" {
        return Some(format!(
            "it needs root to create network namespaces (effective uid {uid})"
        ));
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns` does not work: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("the ip(8) command is not available ({e})")),
    }
}

// ----- what the demo creates, and its removal -----

struct Lab {
    prefix: String,
    dir: PathBuf,
    netns: Vec<String>,
    daemon: Option<Child>,
    stop: Arc<AtomicBool>,
}

impl Lab {
    fn new(stop: Arc<AtomicBool>) -> Lab {
        let prefix = format!("qbdemo-{}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        Lab {
            prefix,
            dir,
            netns: Vec::new(),
            daemon: None,
            stop,
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// `Err` once SIGINT or SIGTERM arrived.
    fn check(&self) -> anyhow::Result<()> {
        if self.stopped() {
            bail!("interrupted");
        }
        Ok(())
    }

    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    fn add_netns(&mut self, role: &str) -> anyhow::Result<String> {
        let name = self.ns(role);
        ip(&["netns", "add", &name])?;
        self.netns.push(name.clone());
        for key in ["all", "default"] {
            let _ = Command::new("ip")
                .args(["netns", "exec", &name, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{key}.disable_ipv6=1"))
                .output();
        }
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 5 s), deletes the namespaces (and with
    /// them every veth) and the temporary directory. Idempotent.
    fn cleanup(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            if !matches!(child.try_wait(), Ok(Some(_))) {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .stderr(Stdio::null())
                    .status();
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for ns in self.netns.drain(..).rev() {
            let _ = ip(&["netns", "del", &ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    run("ip", args)
}

fn run(prog: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {prog}"))?;
    if !out.status.success() {
        bail!(
            "`{prog} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Host {
    name: &'static str,
    ns: String,
    ip: String,
}

// ----- the live demo -----

fn live(lab: &mut Lab, args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&lab.dir)
        .with_context(|| format!("cannot create {}", lab.dir.display()))?;
    println!(
        "== building the provider network in network namespaces {}-*",
        lab.prefix
    );
    let sw = lab.add_netns("sw")?;
    let mut hosts = Vec::new();
    for (name, cidr, sw_if, what) in HOSTS {
        lab.check()?;
        let ns = lab.add_netns(name)?;
        veth(&ns, "eth0", &sw, sw_if)?;
        ip(&["-n", &ns, "addr", "add", cidr, "dev", "eth0"])?;
        let mac = mac_of(&ns, "eth0")?;
        let addr = cidr.split('/').next().unwrap_or(cidr).to_owned();
        println!("   {name}  {cidr:<13} {mac}  netns {ns:<24} {what}");
        hosts.push(Host { name, ns, ip: addr });
    }
    let mut stacked = Vec::new();
    for (name, cidr, tap, svid, _) in STACKED_HOSTS {
        lab.check()?;
        let ns = lab.add_netns(name)?;
        let addr = cidr.split('/').next().unwrap_or(cidr).to_owned();
        println!(
            "   {name}  {cidr:<13} TAP {tap:<9} netns {ns:<24} customer {}: C-VLAN 10 in \
             S-VLAN {svid}, a stacked VLAN device qbridge made",
            svid / 100
        );
        stacked.push(Host { name, ns, ip: addr });
    }
    for (a, b) in LINKS {
        veth(&sw, a, &sw, b)?;
    }
    println!("   hosts keep the kernel defaults: MTU 1500, TSO and checksum offload on");
    println!(
        "   switch namespace {sw}: 6 bridges, 8 AF_PACKET ports, 4 patch links (CE uplink = PE \
         customer port), trunks t1 = t2 and t5 = t6 (a ring: RSTP), second PE1 trunk t3 = t4 \
         with 4 VLAN devices\n"
    );

    lab.check()?;
    let batch = lab.dir.join("provider.batch");
    let socket = lab.dir.join("qbridge.sock");
    let log = lab.dir.join("daemon.log");
    let text = format!(
        "{BATCH}{}{RING}",
        stacked_batch(&stacked[0].ns, &stacked[1].ns)
    );
    std::fs::write(&batch, text).context("cannot write the batch file")?;
    let exe = std::env::current_exe().context("cannot find the qbridge executable")?;
    let log_file = std::fs::File::create(&log).context("cannot create the daemon log")?;
    let child = Command::new("ip")
        .args(["netns", "exec", &sw])
        .arg(&exe)
        .arg("daemon")
        .arg("-batch")
        .arg(&batch)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .context("cannot start qbridge daemon")?;
    lab.daemon = Some(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !socket.exists() {
        lab.check()?;
        if let Some(Ok(Some(st))) = lab.daemon.as_mut().map(|c| c.try_wait()) {
            bail!(
                "qbridge daemon exited ({st}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!("qbridge daemon: no control socket after 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ctl = |words: &[&str]| -> anyhow::Result<String> {
        let sock = socket.to_string_lossy().into_owned();
        let mut v = vec!["--socket", sock.as_str()];
        v.extend_from_slice(words);
        run(&exe.to_string_lossy(), &v)
    };
    println!(
        "== qbridge daemon running (socket {}); trunk device MTU raised by qbridge to {} \
         (hosts: 1500)\n",
        socket.display(),
        mtu_of(&sw, "t1").unwrap_or(0)
    );

    println!("== RSTP on the ring PE1 = PE2 (t1 = t2, t5 = t6)");
    let t0 = Instant::now();
    let blocked = |ctl: &dyn Fn(&[&str]) -> anyhow::Result<String>| -> bool {
        let pe1_root = ctl(&["-j", "stp", "show", "dev", "pe1"])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v[0]["root"] == true);
        pe1_root
            && ctl(&["-j", "stp", "show", "dev", "pe2"])
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| {
                    v[0]["ports"].as_array().is_some_and(|ports| {
                        ports
                            .iter()
                            .any(|p| p["port"] == "pe2-trunkb" && p["state"] == "discarding")
                            && ports
                                .iter()
                                .all(|p| p["port"] == "pe2-trunkb" || p["state"] == "forwarding")
                    })
                })
    };
    while !blocked(&ctl) {
        lab.check()?;
        if t0.elapsed() > Duration::from_secs(30) {
            bail!(
                "RSTP did not converge within 30 s:\n{}",
                ctl(&["stp", "show"]).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "   converged in {:.1} s: one trunk blocked, the loop is broken",
        t0.elapsed().as_secs_f64()
    );
    for line in ctl(&["stp", "show"])?.lines() {
        println!("   {line}");
    }
    println!();

    let cap1 = TrunkCapture::start(&sw, "t1", lab.stop.clone())?;
    let cap2 = TrunkCapture::start(&sw, "t2", lab.stop.clone())?;
    let (a, b, c, d) = (&hosts[0], &hosts[1], &hosts[2], &hosts[3]);

    for ((_, cidr, tap, _, _), h) in STACKED_HOSTS.iter().zip(&stacked) {
        ip(&["-n", &h.ns, "addr", "add", cidr, "dev", tap])?;
    }

    println!("== ping");
    for (x, y) in [(a, b), (c, d)] {
        lab.check()?;
        println!("   {} -> {} ({}): {}", x.name, y.name, y.ip, ping(x, &y.ip));
    }
    for ((_, _, tap, _, reach), x) in STACKED_HOSTS.iter().zip(&stacked) {
        lab.check()?;
        let y = &hosts[*reach];
        println!(
            "   {} -> {} ({}) over its stacked device {tap}: {}",
            x.name,
            y.name,
            y.ip,
            ping(x, &y.ip)
        );
    }
    lab.check()?;
    println!(
        "\n== TCP {} -> {} for {:.0} s (kernel sockets, every byte checked)",
        a.name, b.name, args.seconds
    );
    let secs = Duration::from_secs_f64(args.seconds);
    let (r1, r2) = std::thread::scope(|s| {
        let stop = &lab.stop;
        let t1 = s.spawn(move || tcp_stream(a, b, secs, stop));
        let t2 = s.spawn(move || tcp_stream(c, d, secs, stop));
        (t1.join(), t2.join())
    });
    lab.check()?;
    let r1 = r1.map_err(|_| anyhow!("TCP thread panicked"))??;
    let r2 = r2.map_err(|_| anyhow!("TCP thread panicked"))??;
    for (x, y, (bytes, dt)) in [(a, b, r1), (c, d, r2)] {
        println!(
            "   {} -> {}: {:.1} MB in {:.2} s = {:.2} Gbit/s, all bytes verified",
            x.name,
            y.name,
            bytes as f64 / 1e6,
            dt,
            bytes as f64 * 8.0 / dt / 1e9
        );
    }

    println!("\n== which path the frames took (qbridge show fast-path)");
    for line in fast_path_summary(&ctl(&["-j", "show", "fast-path"])?) {
        println!("   {line}");
    }

    let t1 = cap1.finish()?;
    let t2 = cap2.finish()?;
    println!("\n== on the 802.1ad trunk (frames received by each end, full tag stacks)");
    for (name, t) in [("t1 (from PE2)", &t1), ("t2 (from PE1)", &t2)] {
        println!("   {name}: {} frames", t.total);
        for (stack, n) in &t.by_stack {
            println!("      {n:>7} x {}", stack_text(stack));
        }
    }
    println!("   a few of them:");
    for f in t2.samples.iter().chain(t1.samples.iter()).take(8) {
        println!("      {f}");
    }

    lab.check()?;
    println!(
        "\n== failover: t1 pulled 1 s into a {:.0} s TCP stream {} -> {}",
        args.seconds.max(2.0),
        a.name,
        b.name
    );
    let secs = Duration::from_secs_f64(args.seconds.max(2.0));
    let (r, pulled) = std::thread::scope(|s| {
        let stop = &lab.stop;
        let t = s.spawn(move || tcp_stream(a, b, secs, stop));
        std::thread::sleep(Duration::from_secs(1));
        let pulled = ip(&["-n", &sw, "link", "set", "t1", "down"]);
        (t.join(), pulled)
    });
    pulled?;
    let (bytes, dt) = r.map_err(|_| anyhow!("TCP thread panicked"))??;
    println!(
        "   {} -> {}: {:.1} MB in {:.2} s = {:.2} Gbit/s, all bytes verified, the connection \
         never broke",
        a.name,
        b.name,
        bytes as f64 / 1e6,
        dt,
        bytes as f64 * 8.0 / dt / 1e9
    );
    for line in ctl(&["stp", "show", "dev", "pe2"])?.lines() {
        println!("   {line}");
    }

    println!("\n== per-port counters (from `qbridge -s link show`)");
    print!("{}", compact_counters(&ctl(&["-s", "link", "show"])?));
    println!("\n== FDB (qbridge fdb show)");
    for line in ctl(&["fdb", "show"])?.lines() {
        println!("   {line}");
    }
    println!("\n== removing the namespaces, veths and the daemon");
    Ok(())
}

/// What `show fast-path -j` says of the frames so far, for a person: how many the eBPF program
/// forwarded in the kernel (hits) and how many went up to the pipeline (misses, by reason), or
/// why the fast path is off — the figure the demo's throughput depends on.
fn fast_path_summary(json: &str) -> Vec<String> {
    let st: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return vec![format!("(show fast-path -j gave no JSON: {e})")],
    };
    let n = |k: &str| st[k].as_u64().unwrap_or(0);
    if st["state"] != "on" {
        let why = st["reason"]
            .as_str()
            .unwrap_or("turned off (--fast-path off)");
        return vec![
            format!("fast path OFF: {why}"),
            "every frame went through the userspace pipeline: about 0.6x the kernel bridge's \
             TCP here, 0.3x in this provider network (docs/decisions.md 65)"
                .to_string(),
        ];
    }
    let misses: Vec<(String, u64)> = st["misses"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .filter(|(_, v)| *v > 0)
                .collect()
        })
        .unwrap_or_default();
    let missed: u64 = misses.iter().map(|(_, v)| v).sum();
    let (hits, all) = (n("hits"), n("hits") + missed);
    let share = if all == 0 {
        0.0
    } else {
        hits as f64 * 100.0 / all as f64
    };
    let ports = st["ports"].as_array().map_or(0, Vec::len);
    let reasons = misses
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        format!(
            "fast path ON: the eBPF program on {ports} ports holds {} flows ({} installed so far)",
            n("flows"),
            n("installed")
        ),
        format!(
            "{hits} frames forwarded in the kernel by the program (hits), {missed} sent up to the \
             pipeline (misses{}{reasons}): {share:.1} % of the frames took the fast path",
            if reasons.is_empty() { "" } else { ": " }
        ),
    ]
}

/// One line per port out of `link show -s`: name, device, RX and TX packets and bytes, drops.
fn compact_counters(stats: &str) -> String {
    let mut out = String::new();
    let mut row = String::new();
    for line in stats.lines() {
        let t = line.trim();
        if !line.starts_with(' ') {
            if !row.is_empty() {
                let _ = writeln!(out, "{row}");
            }
            row.clear();
            if let Some((name, rest)) = t.split_once(": afpacket dev ") {
                let dev = rest.split_whitespace().next().unwrap_or("?");
                let _ = write!(row, "   {name:<10} ({dev:<3})");
            }
        } else if row.is_empty() {
            continue;
        } else if let Some(v) = t.strip_prefix("RX: ").or_else(|| t.strip_prefix("TX: ")) {
            let w: Vec<&str> = v.split_whitespace().collect();
            let (bytes, pkts) = (
                w.first().copied().unwrap_or("?"),
                w.get(2).copied().unwrap_or("?"),
            );
            let _ = write!(row, "  {} {pkts:>6} pkts {bytes:>10} B", &t[..2]);
        } else if let Some(d) = t.strip_prefix("drops: ") {
            let _ = write!(row, "  drops: {d}");
        }
    }
    if !row.is_empty() {
        let _ = writeln!(out, "{row}");
    }
    out
}

fn veth(ns_a: &str, a: &str, ns_b: &str, b: &str) -> anyhow::Result<()> {
    ip(&[
        "-n", ns_a, "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ])?;
    for (ns, dev) in [(ns_a, a), (ns_b, b)] {
        let _ = Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .arg(format!("net.ipv6.conf.{dev}.disable_ipv6=1"))
            .output();
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(())
}

fn link_json(ns: &str, dev: &str) -> anyhow::Result<serde_json::Value> {
    let out = ip(&["-n", ns, "-j", "link", "show", "dev", dev])?;
    serde_json::from_str(&out).context("ip -j link show: bad JSON")
}

fn mac_of(ns: &str, dev: &str) -> anyhow::Result<String> {
    let v = link_json(ns, dev)?;
    v[0]["address"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no MAC address for {dev}"))
}

fn mtu_of(ns: &str, dev: &str) -> anyhow::Result<u64> {
    let v = link_json(ns, dev)?;
    v[0]["mtu"]
        .as_u64()
        .ok_or_else(|| anyhow!("no MTU for {dev}"))
}

/// Five pings at 0.2 s; "5/5 replies, avg 0.123 ms", or why not.
fn ping(from: &Host, to: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &from.ns, "ping", "-n", "-q", "-c", "5"])
        .args(["-i", "0.2", "-W", "1", "-w", "5", to])
        .output();
    let out = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => return format!("ping not available ({e})"),
    };
    let mut received = "?".to_string();
    let mut avg = String::new();
    for line in out.lines() {
        if line.contains("packets transmitted") {
            received = line
                .split(", ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .unwrap_or("?")
                .to_string();
        }
        if line.starts_with("rtt") {
            if let Some(v) = line.split(" = ").nth(1).and_then(|r| r.split('/').nth(1)) {
                avg = format!(", avg RTT {v} ms");
            }
        }
    }
    format!("{received}/5 replies{avg}")
}

// ----- TCP -----

/// Byte stream pattern: splitmix64 of the 8-byte word index, so a lost, duplicated or
/// reordered segment is a mismatch.
fn pattern(off: u64, buf: &mut [u8]) {
    for (o, b) in (off..).zip(buf.iter_mut()) {
        let mut z = (o >> 3).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        *b = z.to_le_bytes()[(o & 7) as usize];
    }
}

/// Sends from `from` to `to` for `dur`, the receiver checking every byte; returns bytes and
/// seconds.
fn tcp_stream(
    from: &Host,
    to: &Host,
    dur: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<(u64, f64)> {
    let bind_ip = to.ip.clone();
    let listener = run_in_netns(&to.ns, move || TcpListener::bind((bind_ip.as_str(), 0)))?
        .with_context(|| format!("cannot listen in {}", to.name))?;
    let addr: SocketAddr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    let (sent, got) = std::thread::scope(|scope| {
        let receiver = scope.spawn(|| -> anyhow::Result<u64> {
            let mut s = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if is_timeout(&e) => {
                        if stop.load(Ordering::Relaxed) || start.elapsed() > STALL {
                            bail!("no connection from {}", from.name);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e).context("accept"),
                }
            };
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(POLL))?;
            let mut buf = vec![0u8; 1 << 18];
            let mut want = vec![0u8; 1 << 18];
            let mut got = 0u64;
            let mut last = Instant::now();
            loop {
                let n = match s.read(&mut buf) {
                    Ok(0) => return Ok(got),
                    Ok(n) => n,
                    Err(e) if is_timeout(&e) => {
                        if stop.load(Ordering::Relaxed) {
                            bail!("interrupted");
                        }
                        if last.elapsed() > STALL {
                            bail!("no data for {} s after {got} bytes", STALL.as_secs());
                        }
                        continue;
                    }
                    Err(e) => return Err(e).context(format!("read after {got} bytes")),
                };
                last = Instant::now();
                pattern(got, &mut want[..n]);
                if buf[..n] != want[..n] {
                    bail!("byte stream corrupted near offset {got}");
                }
                got += n as u64;
            }
        });
        let sent = send(from, addr, dur, stop);
        (sent, receiver.join())
    });
    let sent = sent?;
    let got = got.map_err(|_| anyhow!("receiver panicked"))??;
    if got != sent {
        bail!("sent {sent} bytes, received {got}");
    }
    Ok((got, start.elapsed().as_secs_f64()))
}

/// How often blocked socket calls wake up to look at the stop flag, and how long a stream may
/// stall before the demo gives up.
const POLL: Duration = Duration::from_millis(200);
const STALL: Duration = Duration::from_secs(10);

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The sending side of [`tcp_stream`]: writes the pattern for `dur`; returns the bytes sent.
fn send(from: &Host, addr: SocketAddr, dur: Duration, stop: &AtomicBool) -> anyhow::Result<u64> {
    let start = Instant::now();
    run_in_netns(&from.ns, || -> anyhow::Result<u64> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("cannot connect to {addr}"))?;
        s.set_write_timeout(Some(POLL))?;
        let mut buf = vec![0u8; 1 << 18];
        let mut off = 0u64;
        let mut last = Instant::now();
        while start.elapsed() < dur {
            pattern(off, &mut buf);
            let mut pos = 0;
            while pos < buf.len() {
                match s.write(&buf[pos..]) {
                    Ok(n) => {
                        pos += n;
                        last = Instant::now();
                    }
                    Err(e) if is_timeout(&e) => {
                        if stop.load(Ordering::Relaxed) {
                            bail!("interrupted");
                        }
                        if last.elapsed() > STALL {
                            bail!("stream stalled for {} s after {off} bytes", STALL.as_secs());
                        }
                    }
                    Err(e) => return Err(e).context(format!("write after {off} bytes")),
                }
            }
            off += buf.len() as u64;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        Ok(off)
    })?
}

// ----- trunk capture and frame decoding -----

#[derive(Debug, Default)]
struct TrunkSeen {
    total: u64,
    by_stack: std::collections::BTreeMap<Vec<(u16, u16)>, u64>,
    samples: Vec<String>,
}

struct TrunkCapture {
    done: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<anyhow::Result<TrunkSeen>>>,
}

impl TrunkCapture {
    fn start(ns: &str, dev: &str, stop: Arc<AtomicBool>) -> anyhow::Result<TrunkCapture> {
        let mut cfg = AfPacketConfig::new(dev);
        cfg.ring = RingVersion::V3;
        cfg.block_count = 16;
        let mut port = run_in_netns(ns, move || AfPacketPort::open(cfg))?
            .with_context(|| format!("cannot capture on {dev}"))?;
        let done = Arc::new(AtomicBool::new(false));
        let done2 = done.clone();
        let handle = std::thread::spawn(move || -> anyhow::Result<TrunkSeen> {
            let mut seen = TrunkSeen::default();
            let mut pool = BufPool::new(512);
            let mut batch = Batch::with_capacity(256);
            let (mut big_samples, mut small_samples) = (0, 0);
            loop {
                let finishing = done2.load(Ordering::Acquire) || stop.load(Ordering::Relaxed);
                port.wait_readable(20)?;
                while port.rx_burst(&mut batch, &mut pool, 256)? > 0 {
                    for p in batch.drain() {
                        let stack = tags(p.frame());
                        seen.total += 1;
                        *seen.by_stack.entry(stack).or_default() += 1;
                        // Samples: the first two large TCP frames (data), and the first
                        // three others (ARP, ICMP, handshake).
                        let big = p.len() > 1000;
                        let slot = if big {
                            &mut big_samples
                        } else {
                            &mut small_samples
                        };
                        if *slot < if big { 2 } else { 3 } {
                            *slot += 1;
                            seen.samples.push(describe(p.frame(), &p.offload));
                        }
                        pool.put(p);
                    }
                }
                if finishing {
                    return Ok(seen);
                }
            }
        });
        Ok(TrunkCapture {
            done,
            handle: Some(handle),
        })
    }

    fn finish(mut self) -> anyhow::Result<TrunkSeen> {
        std::thread::sleep(Duration::from_millis(100));
        self.done.store(true, Ordering::Release);
        self.handle
            .take()
            .context("capture already finished")?
            .join()
            .map_err(|_| anyhow!("capture thread panicked"))?
    }
}

impl Drop for TrunkCapture {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The well-known tags of `frame`, outermost first: (TPID, VID).
fn tags(frame: &[u8]) -> Vec<(u16, u16)> {
    let mut v = Vec::new();
    let mut at = 12;
    while let Some(b) = frame.get(at..at + 4) {
        let tpid = u16::from_be_bytes([b[0], b[1]]);
        if !Tpid(tpid).is_well_known() {
            break;
        }
        v.push((tpid, u16::from_be_bytes([b[2], b[3]]) & 0x0fff));
        at += 4;
    }
    v
}

fn stack_text(stack: &[(u16, u16)]) -> String {
    if stack.is_empty() {
        return "untagged".into();
    }
    stack
        .iter()
        .map(|(t, v)| format!("{t:04x} vid {v}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `88a8 vid 100 / 8100 vid 10 / IPv4 TCP 10.10.0.1:40000 > 10.10.0.2:41000, 65226 bytes
/// (super-frame: 45 segments of 1448)`.
fn describe(frame: &[u8], offload: &OffloadMeta) -> String {
    use qbridge_wire::summary;
    let mut s = format!(
        "{} / {}, {} bytes",
        summary::tags(frame, &[]),
        summary::payload(frame, &[]),
        frame.len()
    );
    if offload.is_gso() && offload.gso_size > 0 {
        let payload = frame.len().saturating_sub(usize::from(offload.hdr_len));
        let segs = payload.div_ceil(usize::from(offload.gso_size));
        let _ = write!(s, " (super-frame: {segs} segments of {})", offload.gso_size);
    }
    s
}

// ----- fallback: the pcap replay -----

/// Where the shipped examples are: `--examples DIR`, else `examples/` next to the
/// executable's repository (`target/*/qbridge` → `../../examples`), else `./examples`.
fn find_examples(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let ok = |d: &Path| d.join("provider-bridge.batch").is_file();
    if let Some(d) = given {
        if ok(d) {
            return Ok(d.to_path_buf());
        }
        bail!("{} has no provider-bridge.batch", d.display());
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        for up in exe.ancestors().skip(1).take(4) {
            candidates.push(up.join("examples"));
        }
    }
    candidates.push(PathBuf::from("examples"));
    candidates
        .into_iter()
        .find(|d| ok(d))
        .ok_or_else(|| anyhow!("cannot find the examples directory; give --examples DIR"))
}

fn replay_fallback(examples: Option<&Path>) -> anyhow::Result<ExitCode> {
    let dir = find_examples(examples)?;
    let pcaps = dir.join("provider-bridge");
    let out = std::env::temp_dir().join(format!("qbridge-demo-replay-{}", std::process::id()));
    println!(
        "== replaying {} through {}",
        pcaps.display(),
        dir.join("provider-bridge.batch").display()
    );
    let words: Vec<String> = [
        "-batch".to_string(),
        dir.join("provider-bridge.batch")
            .to_string_lossy()
            .into_owned(),
        "--in".into(),
        format!("cust-a={}", pcaps.join("cust-a.pcap").display()),
        "--in".into(),
        format!("cust-b={}", pcaps.join("cust-b.pcap").display()),
        "--in".into(),
        format!("trunk={}", pcaps.join("trunk.pcap").display()),
        "--out".into(),
        out.to_string_lossy().into_owned(),
    ]
    .into();
    let code = crate::replay::main(&words)?;
    for port in ["trunk", "cust-a", "cust-b"] {
        let path = out.join(format!("{port}.pcap"));
        println!("\n== frames the switch sent on {port} ({})", path.display());
        let mut r = PcapReader::open(&path)?;
        while let Some(rec) = r.next_record()? {
            println!("   {}", describe(&rec.data, &OffloadMeta::default()));
        }
    }
    println!(
        "\nOutput kept in {} (pcaps, fdb.json, stats.json).",
        out.display()
    );
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 802.1ad/802.1Q-tagged IPv4 TCP frame: 10.10.0.1:40000 > 10.10.0.2:41000.
    fn qinq_tcp() -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10, 0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 10, 0, 1, 10, 10, 0, 2,
        ];
        ip.extend_from_slice(&40000u16.to_be_bytes());
        ip.extend_from_slice(&41000u16.to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn the_fast_path_summary_gives_hits_misses_and_why_off() {
        let on = r#"{"mode":"auto","state":"on","reason":null,"upcall":"qbfp1","ports":["a","b"],
            "flows":4,"hits":900,"misses":{"no_flow":90,"stale":10,"flood":0},"installed":6,
            "not_cached":{},"stale_upcalls":0,"upcall_ring_full":0}"#;
        let s = fast_path_summary(on).join("\n");
        assert!(
            s.contains("fast path ON: the eBPF program on 2 ports holds 4 flows"),
            "{s}"
        );
        assert!(s.contains("900 frames forwarded in the kernel"), "{s}");
        assert!(
            s.contains("100 sent up to the pipeline (misses: no_flow 90, stale 10)"),
            "{s}"
        );
        assert!(s.contains("90.0 % of the frames took the fast path"), "{s}");
        let off = r#"{"mode":"auto","state":"off","reason":"this qbridge was built without the eBPF fast path (clang was missing at build time)"}"#;
        let s = fast_path_summary(off).join("\n");
        assert!(
            s.starts_with("fast path OFF: this qbridge was built without the eBPF fast path"),
            "{s}"
        );
        assert!(fast_path_summary("garbage")[0].contains("gave no JSON"));
    }

    #[test]
    fn describe_names_the_tags_addresses_and_ports() {
        let f = qinq_tcp();
        assert_eq!(
            describe(&f, &OffloadMeta::default()),
            "88a8 vid 100 / 8100 vid 10 / IPv4 TCP 10.10.0.1:40000 > 10.10.0.2:41000, 62 bytes"
        );
        // Cut inside the TCP header: addresses still, no ports.
        assert_eq!(
            describe(&f[..50], &OffloadMeta::default()),
            "88a8 vid 100 / 8100 vid 10 / unparsed, 50 bytes"
        );
    }
}
