//! Harness for the namespace tests: hosts with the kernel's own TCP/IP stack in network
//! namespaces, joined by veth pairs to qbridge ports, and a `qbridge daemon` per test.
//!
//! A [`Lab`] owns everything a test creates — namespaces (which take their veths with them),
//! daemon processes, a temporary directory — and removes it in `Drop`, also when an assertion
//! panics; on a panic it prints the daemons' logs first. Names carry the test process's pid
//! (`qbt-ROLE-PID-N`), and a new lab deletes `qbt-*` namespaces left by processes that no
//! longer exist (a test killed with SIGKILL cannot clean up after itself).
//!
//! Hosts run at the kernel's defaults: MTU 1500, TSO and checksum offload on. Nothing here
//! sets an MTU. IPv6 is off on every interface the lab makes, so the only frames on the wire
//! are the ones a test sends (no router or neighbour solicitations in flood counts).
//!
//! Traffic: [`ping`] runs iputils `ping` in a host; [`tcp_transfer`] moves a deterministic
//! byte stream between kernel sockets in two hosts and verifies every byte; [`Capture`]
//! records the frames an interface receives with their whole tag stack (the AF_PACKET reader
//! of `qbridge-io` puts back the tag the kernel strips); [`inject`] sends hand-made frames.
//!
//! Tests in one binary share two CPU cores with everything else, so [`serial`] lets a test
//! file run its tests one at a time.
#![allow(dead_code)]

pub mod ovs;
pub mod tshark;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort, RingVersion};
use qbridge_io::netns::run_in_netns;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::{parse_headers, IpProtocol, Tpid};

pub type Result<T> = std::result::Result<T, String>;

// ----- skipping -----

/// `Some(reason)` when namespace tests cannot run here: not root, no `ip`, no `ip netns`, no
/// `ping`. With `QBRIDGE_REQUIRE_NETNS` set (scripts/test.sh sets it when run as root, so in
/// CI) a reason is a failure, not a skip: a test that cannot run must not pass.
pub fn skip_reason() -> Option<String> {
    let reason = env_skip_reason()?;
    if std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!(
            "namespace tests are required here (QBRIDGE_REQUIRE_NETNS) but cannot run: {reason}"
        );
    }
    Some(reason)
}

/// Why namespace tests cannot run here, if they cannot (see [`skip_reason`]).
pub fn env_skip_reason() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if uid != "0" {
        return Some(format!("not root (effective uid {uid})"));
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Some(format!(
                "`ip netns` unavailable: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => return Some(format!("the ip(8) command is not available: {e}")),
    }
    if Command::new("ping").arg("-V").output().is_err() {
        return Some("ping (iputils-ping) is not installed; scripts/test.sh installs it".into());
    }
    None
}

/// Returns from the test with a printed reason when [`skip_reason`] gives one.
#[macro_export]
macro_rules! skip_unless_netns {
    () => {
        if let Some(reason) = support::skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// The qbridge binary under test: `$QBRIDGE_BIN`, else the one Cargo built for this test.
pub fn qbridge_bin() -> PathBuf {
    std::env::var_os("QBRIDGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_qbridge")))
}

/// One test at a time in this binary (a poisoned lock from a failed test is taken anyway).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// ----- commands -----

/// Runs a command, returning its stdout, or an error with the command line and its stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{prog} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// `ip -n NS ARGS…`
pub fn ip_in(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["-n", ns];
    v.extend_from_slice(args);
    ip(&v)
}

/// `ip netns exec NS PROG ARGS…`
pub fn exec_in(ns: &str, prog: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["netns", "exec", ns, prog];
    v.extend_from_slice(args);
    ip(&v)
}

/// A counter of the kernel's network stack in namespace `ns`, as `nstat` reads it: `Section`
/// and `Name` of /proc/net/snmp or /proc/net/netstat (a row of names, then a row of values:
/// `Tcp` `RetransSegs`, `TcpExt` `TCPOFOQueue`, `Udp` `RcvbufErrors`), or a line of
/// /proc/net/snmp6 (section `Udp6`, name `InCsumErrors`). Panics when the kernel has no such
/// counter: a misspelt name must not read as 0.
pub fn kernel_counter(ns: &str, section: &str, name: &str) -> u64 {
    for file in ["/proc/net/snmp", "/proc/net/netstat"] {
        let text = exec_in(ns, "cat", &[file]).unwrap_or_default();
        let prefix = format!("{section}:");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
        if let [names, values] = rows[..] {
            if let Some(v) = names
                .split_whitespace()
                .zip(values.split_whitespace())
                .find(|(n, _)| *n == name)
            {
                return v
                    .1
                    .parse()
                    .unwrap_or_else(|e| panic!("{file} {section} {name}: {e}"));
            }
        }
    }
    let text = exec_in(ns, "cat", &["/proc/net/snmp6"]).unwrap_or_default();
    let key = format!("{section}{name}");
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(key.as_str())).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no kernel counter {section} {name} in {ns}"))
}

/// The interfaces of `ns` whose names start with `prefix` (`qbc`: qbridge-cni's host ends).
pub fn links_named_from(ns: &str, prefix: &str) -> Vec<String> {
    ip_in(ns, &["-o", "link", "show"])
        .unwrap()
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// The MAC address of `ifname` in `ns`, as `aa:bb:cc:dd:ee:ff`.
pub fn mac_of(ns: &str, ifname: &str) -> Result<String> {
    let out = ip_in(ns, &["-j", "link", "show", "dev", ifname])?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    v[0]["address"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no address for {ifname} in {out}"))
}

pub fn parse_mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, p) in s.split(':').enumerate().take(6) {
        m[i] = u8::from_str_radix(p, 16).unwrap_or(0);
    }
    m
}

pub fn fmt_mac(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ----- the lab -----

static NEXT: AtomicU32 = AtomicU32::new(0);

fn next_id() -> u32 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Worker threads of every test daemon (see [`Lab::daemon_args`]).
pub const TEST_WORKERS: usize = 2;

/// A host: a namespace with one interface (`eth0`) and an IPv4 address.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub ns: String,
    pub ifname: String,
    pub ip: String,
    pub mac: String,
}

/// A running daemon's control socket; commands go through the CLI, as a user's would.
#[derive(Clone, Debug)]
pub struct Ctl {
    pub socket: PathBuf,
}

impl Ctl {
    /// `qbridge --socket PATH ARGS…`; stdout, or an error with stderr.
    pub fn cmd(&self, args: &[&str]) -> Result<String> {
        let sock = self.socket.to_string_lossy().into_owned();
        let mut v = vec!["--socket", sock.as_str()];
        v.extend_from_slice(args);
        run(&qbridge_bin().to_string_lossy(), &v)
    }

    /// `qbridge --socket PATH -j ARGS…`, parsed.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut v = vec!["-j"];
        v.extend_from_slice(args);
        let out = self.cmd(&v)?;
        if out.trim().is_empty() {
            return Ok(serde_json::Value::Array(vec![]));
        }
        serde_json::from_str(&out).map_err(|e| format!("bad JSON from {args:?}: {e}: {out}"))
    }

    /// FDB entries `(mac, port, vlan)` from `fdb show -j`.
    pub fn fdb(&self) -> Result<Vec<(String, String, Option<u64>)>> {
        let v = self.json(&["fdb", "show"])?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["mac"].as_str().unwrap_or("").to_owned(),
                    e["ifname"].as_str().unwrap_or("").to_owned(),
                    e["vlan"].as_u64(),
                )
            })
            .collect())
    }

    /// Whether the FDB holds `mac` (any VLAN) on `port`.
    pub fn fdb_has(&self, mac: &str, port: &str) -> Result<bool> {
        Ok(self
            .fdb()?
            .iter()
            .any(|(m, p, _)| m.eq_ignore_ascii_case(mac) && p == port))
    }

    /// `link show -s` as text, for failure messages and reports.
    pub fn stats_text(&self) -> String {
        self.cmd(&["-s", "link", "show"])
            .unwrap_or_else(|e| format!("(link show -s failed: {e})"))
    }
}

struct DaemonProc {
    child: Child,
    log: PathBuf,
    ns: String,
}

/// Everything one test made; removed on drop.
pub struct Lab {
    pub name: String,
    pub dir: PathBuf,
    netns: Vec<String>,
    daemons: Vec<DaemonProc>,
}

impl Lab {
    /// A new, empty lab for test `name` (used in the temporary directory's name).
    pub fn new(name: &str) -> Lab {
        sweep_stale();
        let dir =
            std::env::temp_dir().join(format!("qbt-{name}-{}-{}", std::process::id(), next_id()));
        let _ = std::fs::create_dir_all(&dir);
        Lab {
            name: name.to_owned(),
            dir,
            netns: Vec::new(),
            daemons: Vec::new(),
        }
    }

    /// Creates namespace `qbt-ROLE-PID-N` with `lo` up and IPv6 off by default.
    pub fn netns(&mut self, role: &str) -> Result<String> {
        let name = format!("qbt-{role}-{}-{}", std::process::id(), next_id());
        ip(&["netns", "add", &name])?;
        self.netns.push(name.clone());
        for key in ["all", "default"] {
            let _ = exec_in(
                &name,
                "sysctl",
                &["-qw", &format!("net.ipv6.conf.{key}.disable_ipv6=1")],
            );
        }
        ip_in(&name, &["link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// A veth pair `a` (in `ns_a`) — `b` (in `ns_b`), both up, IPv6 off, MTU left alone.
    pub fn veth(&mut self, ns_a: &str, a: &str, ns_b: &str, b: &str) -> Result<()> {
        ip_in(
            ns_a,
            &[
                "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
            ],
        )?;
        for (ns, dev) in [(ns_a, a), (ns_b, b)] {
            let _ = exec_in(
                ns,
                "sysctl",
                &["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")],
            );
            ip_in(ns, &["link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// A host namespace whose `eth0` (address `cidr`, e.g. `10.1.0.1/24`) is joined by a veth
    /// to interface `sw_if` in namespace `sw_ns`.
    pub fn host(&mut self, name: &str, cidr: &str, sw_ns: &str, sw_if: &str) -> Result<Host> {
        let ns = self.netns(name)?;
        self.veth(&ns, "eth0", sw_ns, sw_if)?;
        ip_in(&ns, &["addr", "add", cidr, "dev", "eth0"])?;
        let mac = mac_of(&ns, "eth0")?;
        Ok(Host {
            name: name.to_owned(),
            ns,
            ifname: "eth0".into(),
            ip: cidr.split('/').next().unwrap_or(cidr).to_owned(),
            mac,
        })
    }

    /// Starts `qbridge daemon -batch FILE --socket PATH` inside `ns` and waits until the
    /// socket appears (the batch is applied and the ports are open). `batch` is the file's
    /// text.
    pub fn daemon(&mut self, ns: &str, batch: &str) -> Result<Ctl> {
        self.daemon_args(ns, batch, &[])
    }

    /// As [`Lab::daemon`], with extra daemon options (e.g. `--pcap-dir DIR`). Unless `extra`
    /// says otherwise, the daemon runs [`TEST_WORKERS`] worker threads, whatever the machine's
    /// CPU count, so every namespace test forwards across workers (ports are received by
    /// different workers, learning on one is used by another).
    pub fn daemon_args(&mut self, ns: &str, batch: &str, extra: &[&str]) -> Result<Ctl> {
        self.daemon_wrapped(ns, &[], batch, extra)
    }

    /// As [`Lab::daemon_args`], the daemon started through `wrapper` (a command that runs its
    /// arguments, e.g. `setpriv --reuid nobody …`) inside `ns`. With `QBRIDGE_FAST_PATH=VALUE`
    /// in the environment and no `--fast-path` in `extra`, the daemon gets
    /// `--fast-path VALUE`.
    pub fn daemon_wrapped(
        &mut self,
        ns: &str,
        wrapper: &[&str],
        batch: &str,
        extra: &[&str],
    ) -> Result<Ctl> {
        let workers = TEST_WORKERS.to_string();
        let default_workers: &[&str] = if extra.contains(&"--workers") {
            &[]
        } else {
            &["--workers", &workers]
        };
        // `QBRIDGE_FAST_PATH=on|off|auto` runs every test's daemons with that fast-path mode
        // (scripts/test.sh runs the namespace tests again with `on`); a test that chooses its
        // own mode in `extra` keeps it.
        let fast_path = std::env::var("QBRIDGE_FAST_PATH")
            .ok()
            .filter(|v| !v.is_empty());
        let default_fast_path: Vec<String> = match fast_path {
            Some(v) if !extra.iter().any(|a| a.starts_with("--fast-path")) => {
                vec!["--fast-path".into(), v]
            }
            _ => Vec::new(),
        };
        let n = self.daemons.len();
        let batch_path = self.dir.join(format!("d{n}.batch"));
        let socket = self.dir.join(format!("d{n}.sock"));
        let log = self.dir.join(format!("d{n}.log"));
        std::fs::write(&batch_path, batch).map_err(|e| e.to_string())?;
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let log_err = log_file.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(wrapper)
            .arg(qbridge_bin())
            .arg("daemon")
            .arg("-batch")
            .arg(&batch_path)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .args(default_workers)
            .args(&default_fast_path)
            .env(
                "QBRIDGE_LOG",
                std::env::var("QBRIDGE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot start qbridge daemon: {e}"))?;
        self.daemons.push(DaemonProc {
            child,
            log: log.clone(),
            ns: ns.to_owned(),
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if socket.exists() {
                return Ok(Ctl { socket });
            }
            let d = self.daemons.last_mut().expect("just pushed");
            if let Ok(Some(status)) = d.child.try_wait() {
                return Err(format!(
                    "qbridge daemon exited ({status}) before its socket appeared:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "qbridge daemon: no socket after 15 s:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log of daemon `n` (0 = first started) so far.
    pub fn daemon_log(&self, n: usize) -> String {
        self.daemons
            .get(n)
            .map(|d| std::fs::read_to_string(&d.log).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Daemons started so far (including any that exited).
    pub fn daemons(&self) -> usize {
        self.daemons.len()
    }

    /// Stops daemon `n` (0 = first started) with SIGTERM (SIGKILL after 5 s); returns
    /// whether it exited cleanly. The others keep their numbers.
    pub fn stop_daemon(&mut self, n: usize) -> bool {
        self.daemons
            .get_mut(n)
            .is_some_and(|d| stop_child(&mut d.child))
    }

    /// Kills daemon `n` with SIGKILL, as a crash or the OOM killer would: nothing of its own
    /// cleanup runs. Returns its pid.
    pub fn kill_daemon(&mut self, n: usize) -> Option<u32> {
        let d = self.daemons.get_mut(n)?;
        let pid = d.child.id();
        let _ = d.child.kill();
        let _ = d.child.wait();
        Some(pid)
    }

    /// Stops every daemon with SIGTERM (SIGKILL after 5 s); returns whether all exited
    /// cleanly (status 0) by themselves.
    pub fn stop_daemons(&mut self) -> bool {
        let mut clean = true;
        for d in &mut self.daemons {
            clean &= stop_child(&mut d.child);
        }
        self.daemons.clear();
        clean
    }
}

/// SIGTERM, then up to 5 s for the process to exit, then SIGKILL. True when it exited with 0.
fn stop_child(child: &mut Child) -> bool {
    if let Ok(Some(st)) = child.try_wait() {
        return st.success();
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return st.success();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, d) in self.daemons.iter().enumerate() {
                eprintln!(
                    "----- qbridge daemon {i} (netns {}) log -----\n{}",
                    d.ns,
                    std::fs::read_to_string(&d.log).unwrap_or_default()
                );
            }
        }
        for d in &mut self.daemons {
            stop_child(&mut d.child);
        }
        for ns in self.netns.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Deletes `qbt-ROLE-PID-N` namespaces whose creating process is gone.
fn sweep_stale() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(list) = ip(&["netns", "list"]) else {
            return;
        };
        for line in list.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let parts: Vec<&str> = name.split('-').collect();
            if parts.len() != 4 || parts[0] != "qbt" {
                continue;
            }
            let Ok(pid) = parts[2].parse::<u32>() else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", name]);
            }
        }
        kill_stale_daemons();
    });
}

/// Daemons a killed test process started outlive it (its namespaces are gone, the daemons run
/// on in them): each is found by the lab directory in its command line
/// (`…/qbt-NAME-PID-N/…`) whose PID no longer runs, and killed.
fn kill_stale_daemons() {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.iter().any(|a| a == "daemon") {
            continue;
        }
        let owner = args.iter().find_map(|a| {
            let dir = a.split('/').find(|c| c.starts_with("qbt-"))?;
            let parts: Vec<&str> = dir.rsplitn(3, '-').collect();
            parts.get(1)?.parse::<u32>().ok()
        });
        if let Some(owner) = owner {
            if owner != std::process::id() && !Path::new(&format!("/proc/{owner}")).exists() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

// ----- ping -----

/// What `ping -c N` reported.
#[derive(Clone, Debug)]
pub struct PingReport {
    pub transmitted: u32,
    pub received: u32,
    pub avg_rtt_ms: Option<f64>,
    pub output: String,
}

/// `ping -c COUNT -i 0.01 -W 1` from `from` to `to_ip` (bounded by a deadline of
/// COUNT/50 + 3 s).
pub fn ping(from: &Host, to_ip: &str, count: u32) -> PingReport {
    let count_s = count.to_string();
    let deadline = (count / 50 + 3).to_string();
    let out = Command::new("ip")
        .args([
            "netns", "exec", &from.ns, "ping", "-n", "-q", "-c", &count_s,
        ])
        .args(["-i", "0.01", "-W", "1", "-w", &deadline, to_ip])
        .output();
    let output = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("ping: {e}"),
    };
    let mut r = PingReport {
        transmitted: 0,
        received: 0,
        avg_rtt_ms: None,
        output: output.clone(),
    };
    for line in output.lines() {
        if line.contains("packets transmitted") {
            let nums: Vec<u32> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|s| s.parse().ok())
                .collect();
            r.transmitted = nums.first().copied().unwrap_or(0);
            r.received = nums.get(1).copied().unwrap_or(0);
        }
        if let Some(rest) = line.split(" = ").nth(1) {
            if line.starts_with("rtt") || line.starts_with("round-trip") {
                r.avg_rtt_ms = rest.split('/').nth(1).and_then(|s| s.parse().ok());
            }
        }
    }
    r
}

/// Gives `dev` in `ns` address `cidr` (the daemon made the TAP) and returns it as a host.
pub fn host_on(name: &str, ns: &str, dev: &str, cidr: &str) -> Host {
    ip_in(ns, &["addr", "add", cidr, "dev", dev]).unwrap();
    let _ = exec_in(
        ns,
        "sysctl",
        &["-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")],
    );
    Host {
        name: name.to_owned(),
        ns: ns.to_owned(),
        ifname: dev.to_owned(),
        ip: cidr.split('/').next().unwrap_or(cidr).to_owned(),
        mac: mac_of(ns, dev).unwrap(),
    }
}

/// Pings and asserts that every echo came back. With a deadline (`-w`) ping sends on until
/// COUNT replies arrived, so when the first replies are slow (ARP on fresh devices) it may send
/// more than COUNT: every one sent must come back, and at least COUNT.
pub fn assert_ping(from: &Host, to: &Host, count: u32) -> PingReport {
    let r = ping(from, &to.ip, count);
    assert!(
        r.received >= count && r.received == r.transmitted,
        "ping {} -> {} ({}): {}/{} replies\n{}",
        from.name,
        to.name,
        to.ip,
        r.received,
        r.transmitted,
        r.output
    );
    r
}

/// Whether a single ping (1 s wait) gets an answer.
pub fn ping_ok(from: &Host, to_ip: &str) -> bool {
    ping(from, to_ip, 1).received == 1
}

// ----- TCP -----

/// Byte `o` of the test stream: a splitmix64 of the 8-byte word index, so a lost, duplicated
/// or reordered segment shows up as a mismatch at a known offset.
fn pattern_word(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the stream bytes starting at offset `off`.
pub fn fill_pattern(off: u64, buf: &mut [u8]) {
    let mut o = off;
    let mut i = 0;
    while i < buf.len() {
        let word = pattern_word(o >> 3).to_le_bytes();
        let start = (o & 7) as usize;
        let n = (8 - start).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[start..start + n]);
        i += n;
        o += n as u64;
    }
}

/// What one verified TCP transfer did.
#[derive(Clone, Debug)]
pub struct TcpReport {
    pub bytes: u64,
    pub secs: f64,
}

impl TcpReport {
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs / 1e9
    }
}

/// The longest a [`tcp_transfer`] waits for its next bytes, either way.
const STALL: Duration = Duration::from_secs(30);

/// Moves `bytes` bytes from a kernel socket in `from` to one in `to` (listener on `to.ip`,
/// an ephemeral port) and checks every byte at the receiver. Errors name the first bad
/// offset, or the count received when the stream stopped short.
/// `n` verified TCP transfers of `each` bytes from `from` to `to` at once.
pub fn tcp_streams(
    from: &Host,
    to: &Host,
    n: usize,
    each: u64,
) -> Vec<std::thread::JoinHandle<Result<TcpReport>>> {
    (0..n)
        .map(|_| {
            let (f, t) = (from.clone(), to.clone());
            std::thread::spawn(move || tcp_transfer(&f, &t, each, Duration::from_secs(120)))
        })
        .collect()
}

/// Waits for every stream of [`tcp_streams`]; the total verified. A stream's failure panics
/// with `context()` (what the network did meanwhile).
pub fn join_streams(
    hs: Vec<std::thread::JoinHandle<Result<TcpReport>>>,
    what: &str,
    context: &dyn Fn() -> String,
) -> u64 {
    let mut total = 0;
    for (i, h) in hs.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(r)) => total += r.bytes,
            Ok(Err(e)) => panic!("{what}: stream {i}: {e}\n{}", context()),
            Err(_) => panic!("{what}: stream {i} panicked\n{}", context()),
        }
    }
    total
}

pub fn tcp_transfer(from: &Host, to: &Host, bytes: u64, timeout: Duration) -> Result<TcpReport> {
    let to_ip = to.ip.clone();
    let listener = run_in_netns(&to.ns, move || TcpListener::bind((to_ip.as_str(), 0)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("bind in {}: {e}", to.name))?;
    let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let receiver = std::thread::spawn(move || -> Result<u64> {
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("no connection arrived".into());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        // A stall this long ends the transfer. TCP's retransmission backoff after a link
        // is pulled can pass 10 s on a loaded machine (0.2+0.4+…+6.4 s), and the closed
        // socket then resets the sender ("Broken pipe"); the callers' own deadline and
        // their gap measurements judge the failover.
        s.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 18];
        let mut want = vec![0u8; 1 << 18];
        let mut got = 0u64;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(format!("read after {got} bytes: {e}")),
            };
            fill_pattern(got, &mut want[..n]);
            if buf[..n] != want[..n] {
                let i = (0..n).find(|&i| buf[i] != want[i]).unwrap_or(0);
                return Err(format!("byte {} differs", got + i as u64));
            }
            got += n as u64;
            if Instant::now() > deadline {
                return Err(format!("timeout after {got} bytes"));
            }
        }
        Ok(got)
    });
    let from_ns = from.ns.clone();
    let start = Instant::now();
    let sent = run_in_netns(&from_ns, move || -> Result<u64> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        s.set_write_timeout(Some(STALL))
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 18];
        let mut off = 0u64;
        while off < bytes {
            let n = ((bytes - off) as usize).min(buf.len());
            fill_pattern(off, &mut buf[..n]);
            s.write_all(&buf[..n])
                .map_err(|e| format!("write after {off} bytes: {e}"))?;
            off += n as u64;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        Ok(off)
    })
    .map_err(|e| e.to_string())?;
    let received = receiver
        .join()
        .map_err(|_| "receiver thread panicked".to_string())?;
    let secs = start.elapsed().as_secs_f64();
    // The receiver's error first: a sender's "Broken pipe" is usually its consequence.
    let (sent, received) = match (sent, received) {
        (Ok(s), Ok(r)) => (s, r),
        (Err(s), Err(r)) => return Err(format!("{s}; the receiver: {r}")),
        (Err(s), Ok(r)) => return Err(format!("{s} (the receiver read {r} bytes)")),
        (Ok(_), Err(r)) => return Err(format!("the receiver: {r}")),
    };
    if received != bytes || sent != bytes {
        return Err(format!("sent {sent}, received {received}, wanted {bytes}"));
    }
    Ok(TcpReport { bytes, secs })
}

/// Whether a TCP connection from `from` to `to` can be set up within `wait` (a listener
/// runs in `to`). For "must not reach" checks.
pub fn tcp_connects(from: &Host, to: &Host, wait: Duration) -> bool {
    tcp_transfer(from, to, 1000, wait).is_ok()
}

// ----- frames -----

/// A tag stack as (TPID, VID) pairs, outermost first.
pub type TagList = Vec<(u16, u16)>;

/// One captured frame, decoded once.
#[derive(Clone, Debug)]
pub struct FrameInfo {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// Every well-known tag, outermost first: (TPID, VID).
    pub tags: Vec<(u16, u16)>,
    /// The EtherType after the tags.
    pub ethertype: u16,
    pub len: usize,
    pub offload: OffloadMeta,
    /// IP protocol number when IPv4/IPv6.
    pub ip_proto: Option<u8>,
    /// Bytes of L3 packet per segment: the IP packet length of a plain frame, or the parsed
    /// L3+L4 headers + gso_size for a super-frame (what its segments are on the wire).
    pub l3_segment_len: Option<usize>,
    /// The first 128 bytes.
    pub head: Vec<u8>,
}

impl FrameInfo {
    pub fn parse(frame: &[u8], offload: OffloadMeta) -> FrameInfo {
        let mut f = FrameInfo {
            dst: [0; 6],
            src: [0; 6],
            tags: Vec::new(),
            ethertype: 0,
            len: frame.len(),
            offload,
            ip_proto: None,
            l3_segment_len: None,
            head: frame[..frame.len().min(128)].to_vec(),
        };
        if frame.len() < 14 {
            return f;
        }
        f.dst.copy_from_slice(&frame[0..6]);
        f.src.copy_from_slice(&frame[6..12]);
        let mut at = 12;
        while at + 4 <= frame.len() {
            let t = u16::from_be_bytes([frame[at], frame[at + 1]]);
            if !Tpid(t).is_well_known() {
                break;
            }
            let tci = u16::from_be_bytes([frame[at + 2], frame[at + 3]]);
            f.tags.push((t, tci & 0x0fff));
            at += 4;
        }
        if at + 2 <= frame.len() {
            f.ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
        }
        if let Ok(h) = parse_headers(frame, Tpid::is_well_known) {
            f.ip_proto = h.l4_proto.map(u8::from);
            let l3_len = h.l3_end.saturating_sub(h.l3_offset);
            // The kernel's `hdr_len` is only a hint (on receive it is the skb's linear length,
            // often the whole frame), so the headers are measured here.
            f.l3_segment_len = Some(match (offload.is_gso(), h.payload_offset) {
                (true, Some(payload)) => payload - h.l3_offset + usize::from(offload.gso_size),
                _ => l3_len,
            });
        }
        f
    }

    pub fn is_tcp(&self) -> bool {
        self.ip_proto == Some(u8::from(IpProtocol::Tcp))
    }

    /// `88a8 vid 100 / 8100 vid 10 / IPv4 TCP len 1514`
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (tpid, vid) in &self.tags {
            let _ = write!(s, "{tpid:04x} vid {vid} / ");
        }
        let proto = match self.ip_proto {
            Some(6) => " TCP",
            Some(17) => " UDP",
            Some(1) => " ICMP",
            _ => "",
        };
        let l3 = match self.ethertype {
            0x0800 => "IPv4",
            0x0806 => "ARP",
            0x86dd => "IPv6",
            _ => "type",
        };
        let _ = write!(
            s,
            "{l3}{proto} {} > {} len {}",
            fmt_mac(&self.src),
            fmt_mac(&self.dst),
            self.len
        );
        if self.offload.is_gso() {
            let _ = write!(s, " (super-frame, gso_size {})", self.offload.gso_size);
        }
        s
    }
}

/// Frames an interface received while a [`Capture`] ran.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    /// Decoded frames, at most `keep` of them (the rest are only counted).
    pub frames: Vec<FrameInfo>,
    /// Every frame received, kept or not.
    pub total: u64,
    /// Frames per tag stack (TPID, VID list).
    pub by_stack: BTreeMap<TagList, u64>,
    /// Frames per source MAC.
    pub by_src: BTreeMap<[u8; 6], u64>,
    /// Frames per (source MAC, tag stack).
    pub by_src_stack: BTreeMap<([u8; 6], TagList), u64>,
    /// Largest L3 packet per segment seen in TCP frames.
    pub max_tcp_segment_l3: usize,
    /// TCP frames that were super-frames.
    pub tcp_super_frames: u64,
    pub tcp_frames: u64,
}

impl Captured {
    /// Frames whose source MAC is one of `macs`.
    pub fn count_from(&self, macs: &[&str]) -> u64 {
        macs.iter()
            .map(|m| self.by_src.get(&parse_mac(m)).copied().unwrap_or(0))
            .sum()
    }

    /// The `Captured` restricted to frames (of the kept ones) matching `f`.
    pub fn kept_matching(&self, f: impl Fn(&FrameInfo) -> bool) -> Vec<&FrameInfo> {
        self.frames.iter().filter(|x| f(x)).collect()
    }

    pub fn summary(&self) -> String {
        let mut s = format!("{} frames;", self.total);
        for (stack, n) in &self.by_stack {
            let st: Vec<String> = stack.iter().map(|(t, v)| format!("{t:04x}/{v}")).collect();
            let _ = write!(s, " [{}]: {n}", st.join(" "));
        }
        s
    }
}

/// A receive capture on one interface, on its own thread, with the full tag stack of every
/// frame (the tag the kernel strips is put back with its TPID by the AF_PACKET reader).
/// Frames the interface sends are not seen: capture on the receiving end.
pub struct Capture {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<Captured>>>,
    /// Frames seen so far by source MAC, for [`Capture::wait_from`].
    seen: Arc<Mutex<BTreeMap<[u8; 6], u64>>>,
}

impl Captured {
    /// The tag stacks of the frames from source `mac` (as text, any case).
    pub fn stacks_from(&self, mac: &str) -> Vec<TagList> {
        let m = parse_mac(mac);
        self.by_src_stack
            .keys()
            .filter(|(s, _)| *s == m)
            .map(|(_, t)| t.clone())
            .collect()
    }
}

impl Capture {
    /// Starts capturing on `ifname` in `ns`; returns once the socket is open. Keeps up to
    /// `keep` decoded frames.
    pub fn start(ns: &str, ifname: &str, keep: usize) -> Result<Capture> {
        let mut cfg = AfPacketConfig::new(ifname);
        cfg.promisc = true;
        cfg.vnet_hdr = true;
        cfg.ring = RingVersion::V3;
        cfg.block_count = 16;
        let mut port = run_in_netns(ns, move || AfPacketPort::open(cfg))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("capture on {ifname} in {ns}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let seen2 = seen.clone();
        let (tx, rx) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || -> Result<Captured> {
            let mut c = Captured::default();
            let mut pool = BufPool::new(512);
            let mut batch = Batch::with_capacity(256);
            let _ = tx.send(());
            loop {
                let stopping = stop2.load(Ordering::Acquire);
                let _ = port.wait_readable(20);
                loop {
                    let n = port
                        .rx_burst(&mut batch, &mut pool, 256)
                        .map_err(|e| e.to_string())?;
                    for p in batch.drain() {
                        record(&mut c, &p, keep);
                        if let (Some(src), Ok(mut m)) = (p.frame().get(6..12), seen2.lock()) {
                            let mut mac = [0u8; 6];
                            mac.copy_from_slice(src);
                            *m.entry(mac).or_default() += 1;
                        }
                        pool.put(p);
                    }
                    if n == 0 {
                        break;
                    }
                }
                if stopping {
                    return Ok(c);
                }
            }
        });
        let _ = rx.recv_timeout(Duration::from_secs(5));
        Ok(Capture {
            stop,
            handle: Some(handle),
            seen,
        })
    }

    /// Waits until at least `n` frames from source `mac` were captured (`false` after
    /// `timeout`): a test that counts frames waits on the count, not a guessed time.
    pub fn wait_from(&self, mac: &str, n: u64, timeout: Duration) -> bool {
        let m = parse_mac(mac);
        wait_until(timeout, || {
            self.seen
                .lock()
                .map(|s| s.get(&m).copied().unwrap_or(0) >= n)
                .unwrap_or(false)
        })
    }

    /// Stops (after draining what is queued, with a 100 ms grace for frames in flight) and
    /// returns what was seen.
    pub fn finish(mut self) -> Result<Captured> {
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .expect("finish once")
            .join()
            .map_err(|_| "capture thread panicked".to_string())?
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn record(c: &mut Captured, p: &PacketBuf, keep: usize) {
    let f = FrameInfo::parse(p.frame(), p.offload);
    c.total += 1;
    *c.by_stack.entry(f.tags.clone()).or_default() += 1;
    *c.by_src.entry(f.src).or_default() += 1;
    *c.by_src_stack.entry((f.src, f.tags.clone())).or_default() += 1;
    if f.is_tcp() {
        c.tcp_frames += 1;
        if f.offload.is_gso() {
            c.tcp_super_frames += 1;
        }
        c.max_tcp_segment_l3 = c.max_tcp_segment_l3.max(f.l3_segment_len.unwrap_or(0));
    }
    if c.frames.len() < keep {
        c.frames.push(f);
    }
}

/// Sends hand-made frames out of `ifname` in `ns` (an AF_PACKET socket without offloads).
pub fn inject(ns: &str, ifname: &str, frames: &[Vec<u8>]) -> Result<()> {
    let mut cfg = AfPacketConfig::new(ifname);
    cfg.promisc = false;
    cfg.vnet_hdr = false;
    cfg.block_bytes = 128 * 1024;
    cfg.block_count = 2;
    let mut port = run_in_netns(ns, move || AfPacketPort::open(cfg))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("inject on {ifname} in {ns}: {e}"))?;
    let mut pool = BufPool::new(frames.len() + 1);
    let mut batch = Batch::with_capacity(frames.len());
    for f in frames {
        batch.push(PacketBuf::from_frame(f));
    }
    let out = port
        .tx_burst(&mut batch, &mut pool)
        .map_err(|e| e.to_string())?;
    if out.sent != frames.len() {
        return Err(format!("inject on {ifname}: {out:?}"));
    }
    Ok(())
}

/// An Ethernet frame `dst`, `src`, the given tags (TPID, TCI), EtherType `ethertype`, and
/// `payload_len` bytes of a fixed pattern.
pub fn frame(
    dst: &str,
    src: &str,
    tags: &[(u16, u16)],
    ethertype: u16,
    payload_len: usize,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 4 * tags.len() + payload_len);
    f.extend(parse_mac(dst));
    f.extend(parse_mac(src));
    for (tpid, tci) in tags {
        f.extend(tpid.to_be_bytes());
        f.extend(tci.to_be_bytes());
    }
    f.extend(ethertype.to_be_bytes());
    f.extend((0..payload_len).map(|i| (i % 251) as u8));
    f
}

/// Polls `f` every 100 ms until it returns true or `timeout` passes; returns the last result.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ----- the common topology -----

/// A switch namespace `sw` and hosts `h1..hN`, host `hI`'s `eth0` joined to `sI` in `sw`.
/// Hosts get the addresses given, in one /24.
pub struct Star {
    pub lab: Lab,
    pub sw: String,
    pub hosts: Vec<Host>,
}

impl Star {
    /// `addrs[i]` is host i+1's address (`192.0.2.1`); prefix /24.
    pub fn new(test: &str, addrs: &[&str]) -> Result<Star> {
        let mut lab = Lab::new(test);
        let sw = lab.netns("sw")?;
        let mut hosts = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let n = i + 1;
            hosts.push(lab.host(&format!("h{n}"), &format!("{a}/24"), &sw, &format!("s{n}"))?);
        }
        Ok(Star { lab, sw, hosts })
    }

    /// `link add pI type afpacket dev sI` for every host, as batch lines.
    pub fn port_lines(&self) -> String {
        (1..=self.hosts.len())
            .map(|n| format!("link add p{n} type afpacket dev s{n}\n"))
            .collect()
    }

    /// Starts the daemon in the switch namespace with `batch`.
    pub fn daemon(&mut self, batch: &str) -> Result<Ctl> {
        let sw = self.sw.clone();
        self.lab.daemon(&sw, batch)
    }

    pub fn h(&self, n: usize) -> &Host {
        &self.hosts[n - 1]
    }
}

/// A kernel VTEP in `ns`: vxlan device `vx0` (id 100, `local`, flood list `remote`,
/// `nolearning`, MTU 1500, checksums and offloads at their defaults; over `underlay` when
/// given, which an IPv6 `local` needs) in kernel bridge `kbr` with `port` (the host's veth
/// end). `Err` when the kernel has no VXLAN.
pub fn kernel_vtep(
    ns: &str,
    local: &str,
    remote: &str,
    port: &str,
    underlay: Option<&str>,
) -> Result<()> {
    let mut add = vec![
        "link", "add", "vx0", "type", "vxlan", "id", "100", "local", local,
    ];
    if let Some(dev) = underlay {
        add.extend(["dev", dev]);
    }
    add.extend(["dstport", "4789", "nolearning"]);
    ip_in(ns, &add)?;
    ip_in(ns, &["link", "set", "vx0", "mtu", "1500"])?;
    ip_in(ns, &["link", "add", "kbr", "type", "bridge"])?;
    for dev in ["vx0", port] {
        ip_in(ns, &["link", "set", dev, "master", "kbr"])?;
    }
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
            remote,
        ],
    )?;
    for dev in ["vx0", "kbr"] {
        ip_in(ns, &["link", "set", dev, "up"])?;
    }
    Ok(())
}

/// A permanent neighbour entry on `x`'s interface: `ip` is at `mac` (no ARP before the
/// traffic a test measures).
pub fn neighbour(x: &Host, ip: &str, mac: &str) {
    ip_in(
        &x.ns,
        &[
            "neigh",
            "replace",
            ip,
            "lladdr",
            mac,
            "dev",
            &x.ifname,
            "nud",
            "permanent",
        ],
    )
    .unwrap();
}
