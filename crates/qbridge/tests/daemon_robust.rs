//! A daemon that a local client cannot take down (no privileges: pcap ports, a socket in a
//! temporary directory). Each test attacks the daemon the way a hostile or broken local client
//! would — huge or malformed requests, hundreds of idle connections with file descriptors
//! exhausted, signals, slow metrics scrapes — and then checks that it still answers with the
//! exact messages of docs/daemon.md and still forwards frames. Also: `qbridge monitor`, the
//! socket group, and the systemd notifications.
//!
//! The harness is a small copy of daemon_cli.rs's (that file is shared with other work).

use qbridge_io::pcap::PcapWriter;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod local;

use local::BIN;

const CONFIG: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add p2 type pcap
link set dev p1 master br0
link set dev p2 master br0
";

fn tmp(name: &str) -> PathBuf {
    let d = local::tmp("robust", name);
    std::fs::create_dir_all(d.join("pcap")).unwrap();
    d
}

/// The shared daemon (`local::Daemon`: start, CLI, signals, stop), with the pcap ports this
/// file's probes use.
struct Daemon {
    d: local::Daemon,
    pcaps: PathBuf,
    /// Ports added by [`Daemon::forwards`].
    probes: u32,
}

impl std::ops::Deref for Daemon {
    type Target = local::Daemon;
    fn deref(&self) -> &local::Daemon {
        &self.d
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut local::Daemon {
        &mut self.d
    }
}

impl Daemon {
    /// Starts the daemon (through `wrap`, e.g. `sh -c 'ulimit -n 64; exec "$0" "$@"'`) with
    /// the default log level (no QBRIDGE_LOG) and waits for its socket.
    fn start_with(dir: &Path, wrap: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let cfg = dir.join("cfg.batch");
        std::fs::write(&cfg, CONFIG).unwrap();
        let socket = dir.join("ctl.sock");
        let log = dir.join("daemon.log");
        let pcaps = dir.join("pcap");
        let mut cmd = match wrap.split_first() {
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["daemon", "--workers", "1", "-batch"])
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .arg("--pcap-dir")
            .arg(&pcaps)
            .args(extra)
            .env_remove("QBRIDGE_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let d = local::Daemon::spawn(cmd, socket, log)
            .unwrap_or_else(|log| panic!("daemon not ready; log:\n{log}"));
        Daemon {
            d,
            pcaps,
            probes: 0,
        }
    }

    fn start(dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with(dir, &[], extra, &[])
    }

    fn tx_frames(&self, port: &str) -> u64 {
        let v: Value =
            serde_json::from_str(&self.ok(&["-j", "-s", "link", "show", "dev", port])).unwrap();
        v[0]["stats"]["tx_frames"].as_u64().unwrap()
    }

    /// The daemon still forwards: a new pcap port joins br0 with one broadcast frame waiting,
    /// and the frame leaves p2 (one more `tx_frames`).
    fn forwards(&mut self) {
        self.probes += 1;
        let name = format!("probe{}", self.probes);
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0x99, self.probes as u8]);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.resize(60, 0xab);
        let mut w = PcapWriter::create(&self.pcaps.join(format!("{name}.in.pcap"))).unwrap();
        w.write(1_700_000_000_000_000_000, &f).unwrap();
        w.finish().unwrap();
        let before = self.tx_frames("p2");
        let batch = self.pcaps.join(format!("{name}.batch"));
        std::fs::write(
            &batch,
            format!("link add {name} type pcap\nlink set dev {name} master br0\n"),
        )
        .unwrap();
        self.ok(&["-batch", batch.to_str().unwrap()]);
        eventually("a frame forwarded to p2", || {
            self.tx_frames("p2") == before + 1
        });
    }

    /// Resident memory, from /proc.
    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// CPU time (user + system) in clock ticks, from /proc.
    fn cpu_ticks(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_reply(s: &UnixStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = String::new();
    if let Err(e) = BufReader::new(s).read_line(&mut line) {
        return format!("(read error: {e})");
    }
    line
}

fn err_line(msg: &str) -> String {
    format!("{{\"v\":1,\"ok\":false,\"error\":{}}}\n", Value::from(msg))
}

#[test]
fn malformed_and_huge_requests_get_answers() {
    let dir = tmp("requests");
    let mut d = Daemon::start(&dir, &[]);

    // Invalid UTF-8: an error reply, logged; the connection goes on.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"{\"args\":[\"link\",\"sh\xffow\"]}\n")
        .unwrap();
    assert_eq!(
        read_reply(&s),
        err_line("malformed request: not valid UTF-8 (at byte 19 of the line)")
    );
    s.write_all(b"{\"args\":[\"vlan\",\"show\"]}\n").unwrap();
    assert!(read_reply(&s).starts_with("{\"v\":1,\"ok\":true"));
    assert!(d
        .log_text()
        .contains("WARN control socket: request not valid UTF-8 (byte 19)"));

    // A line over 1 MiB: refused as it arrives, not buffered.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    let junk = vec![b'x'; 2 << 20];
    let _ = s.write_all(&junk);
    assert_eq!(
        read_reply(&s),
        err_line(
            "request line longer than 1048576 bytes (send a large batch streamed, with \
             \"batch_len\"); closing the connection"
        )
    );

    // A streamed batch over the limit: the daemon's message, before any of it is read.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"{\"v\":1,\"batch_len\":268435457}\n").unwrap();
    assert_eq!(
        read_reply(&s),
        err_line(
            "batch of 268435457 bytes is over the limit of 268435456 bytes (256 MiB); split it"
        )
    );

    // The CLI checks the same limit (a sparse file: no disk used) and says the same.
    let big = dir.join("big.batch");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(268_435_457)
        .unwrap();
    let o = d.cli(&["-batch", big.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "qbridge: batch of 268435457 bytes is over the limit of 268435456 bytes (256 MiB); \
         split it\n"
    );
    std::fs::remove_file(&big).unwrap();

    // A 70 MiB batch (more than the old 64 MiB line limit) streams and applies.
    let mut text = String::with_capacity(71 << 20);
    let comment = format!("# {}\n", "c".repeat(1000));
    while text.len() < 70 << 20 {
        text.push_str(&comment);
    }
    text.push_str("vlan add vid 77 dev p2\nvlan show dev p2\n");
    std::fs::write(&big, &text).unwrap();
    drop(text);
    let out = d.ok(&["-batch", big.to_str().unwrap()]);
    std::fs::remove_file(&big).unwrap();
    assert!(out.ends_with("                  77\n"), "{out}");
    // An error in such a batch names its line; nothing is applied.
    let bad = dir.join("bad.batch");
    std::fs::write(
        &bad,
        format!("{comment}{comment}vlan add vid 78 dev p2\nvlan add vid 4095 dev p2\n"),
    )
    .unwrap();
    let o = d.cli(&["-batch", bad.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "qbridge: line 4: vid 4095 is reserved\n"
    );
    assert!(!d.ok(&["vlan", "show", "dev", "p2"]).contains("78"));

    d.forwards();
    assert!(d.stop().success());
}

#[test]
fn many_large_requests_hold_bounded_memory() {
    let dir = tmp("memory");
    let mut d = Daemon::start(&dir, &[]);
    let rss_before = d.rss_kib();
    // 20 connections each send 1000 KiB of an unfinished line, 20 more a 200 MiB batch
    // header and 1 MiB of it; they all stall.
    let mut held = Vec::new();
    for i in 0..40 {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        if i % 2 == 0 {
            s.write_all(&vec![b'{'; 1000 << 10]).unwrap();
        } else {
            s.write_all(b"{\"v\":1,\"batch_len\":209715200}\n").unwrap();
            let line = "# xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n";
            let chunk = line.repeat((1 << 20) / line.len());
            let _ = s.write_all(chunk.as_bytes());
        }
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_during = d.rss_kib();
    eprintln!("daemon RSS: {rss_before} KiB before, {rss_during} KiB with 40 stalled requests");
    assert!(
        rss_during < rss_before + 100 * 1024,
        "RSS grew from {rss_before} to {rss_during} KiB"
    );
    // Only one 200 MiB batch fits the budget: the others were told so.
    let busy = held
        .iter()
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut line = String::new();
            BufReader::new(*s).read_line(&mut line).is_ok()
                && line.contains("bytes of batches on other connections")
        })
        .count();
    assert_eq!(busy, 19);
    // Commands are answered meanwhile, and frames forwarded.
    assert!(d.ok(&["link", "show"]).contains("p2: pcap"));
    d.forwards();
    drop(held);
    assert!(d.stop().success());
}

#[test]
fn idle_connections_and_exhausted_file_descriptors() {
    // 1. At the connection limit (64), a new connection takes the place of the idle one.
    let dir = tmp("limit");
    let mut d = Daemon::start(&dir, &[]);
    let conns: Vec<UnixStream> = (0..70)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    assert_eq!(
        read_reply(&conns[0]),
        err_line(
            "closing this idle connection to admit another (the daemon keeps at most 64 or \
             ran out of file descriptors)"
        )
    );
    assert!(d.ok(&["link", "show"]).contains("p1: pcap"));
    drop(conns);
    d.forwards();
    assert!(d.stop().success());

    // 2. Only 64 descriptors: 300 idle connections exhaust them. The accept loop backs off
    // (no spinning, a handful of warnings) and commands are still answered.
    let dir = tmp("emfile");
    let mut d = Daemon::start_with(
        &dir,
        &["sh", "-c", "ulimit -n 64 && exec \"$0\" \"$@\""],
        &[],
        &[],
    );
    let cpu0 = d.cpu_ticks();
    let t0 = Instant::now();
    let conns: Vec<UnixStream> = (0..300)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let answered = d.ok(&["link", "show"]);
    assert!(answered.contains("p1: pcap"));
    let ticks = d.cpu_ticks() - cpu0;
    let secs = t0.elapsed().as_secs_f64();
    let log = d.log_text();
    let warnings = log.matches("control socket: cannot accept").count();
    eprintln!(
        "fds exhausted: {ticks} CPU ticks in {secs:.1} s, {warnings} accept warnings, {} \
         connections",
        conns.len()
    );
    assert!(
        log.contains("Too many open files"),
        "no EMFILE seen; log:\n{log}"
    );
    assert!(warnings <= 2, "{warnings} accept warnings:\n{log}");
    assert!(ticks < 100, "{ticks} ticks of CPU in {secs:.1} s");
    drop(conns);
    d.forwards();
    assert!(d.stop().success());

    // 3. A connection without a request for --idle-timeout is closed with a message.
    let dir = tmp("idle");
    let mut d = Daemon::start(&dir, &["--idle-timeout", "0.5"]);
    let s = UnixStream::connect(&d.socket).unwrap();
    assert_eq!(
        read_reply(&s),
        err_line("no request for 0.5 s; closing the connection")
    );
    assert!(d.stop().success());
}

#[test]
fn signals_are_handled_and_systemd_is_told() {
    let dir = tmp("signals");
    let name = format!("qbt-notify-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let notify = UnixDatagram::bind_addr(&addr).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let at = format!("@{name}");
    let mut d = Daemon::start_with(&dir, &[], &[], &[("NOTIFY_SOCKET", &at)]);
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
    // The ready line at the default log level (info for the daemon), without colours.
    let log = d.log_text();
    // The fast path is on where the kernel allows it (`--fast-path auto`), and said so.
    let ready = |fast: &str| {
        format!(
            "INFO qbridge daemon ready: control socket {}, 2 ports (p1 p2), 1 datapath workers, \
             fast path {fast}\n",
            d.socket.display()
        )
    };
    assert!(
        log.contains(&ready("on")) || log.contains(&ready("off")),
        "{log}"
    );
    assert!(!log.contains('\x1b'), "colours in a log file: {log:?}");

    for sig in ["HUP", "USR1", "USR2", "PIPE"] {
        d.signal(sig);
    }
    eventually("signals logged", || {
        d.log_text().contains("SIGUSR2: ignored")
    });
    assert!(d.ok(&["link", "show"]).contains("p2: pcap"));
    d.forwards();
    let log = d.log_text();
    // SIGHUP re-applies the -batch file as `qbridge apply` does: unchanged here, a no-op.
    let hup = format!(
        "INFO SIGHUP: re-applied {}\n",
        dir.join("cfg.batch").display()
    );
    assert!(log.contains(&hup), "no {hup:?} in:\n{log}");
    for line in [
        "INFO SIGUSR1: counters of 2 ports\n",
        "INFO SIGUSR1: port p1: rx 0 frames 0 bytes, tx 0 frames 0 bytes, 0 drops, link up\n",
        "INFO SIGUSR2: ignored\n",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    assert!(d.stop().success());
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
}

#[test]
fn socket_group_gives_mode_0660() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // A group other than root's; as non-root, chown to a foreign group is refused.
    let groups = std::fs::read_to_string("/etc/group").unwrap();
    let Some((group, gid)) = groups.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let gid: u32 = f.get(2)?.parse().ok()?;
        (gid != 0).then(|| (f[0].to_owned(), gid))
    }) else {
        eprintln!("SKIPPED: no group but root's in /etc/group");
        return;
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    if !status.lines().any(|l| l.starts_with("Uid:\t0\t")) {
        eprintln!("SKIPPED: not root");
        return;
    }
    let dir = tmp("group");
    let mut d = Daemon::start(&dir, &["--socket-group", &group]);
    let m = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o660);
    assert_eq!(m.gid(), gid);
    assert!(d.stop().success());
    // Default: 0600.
    let mut d = Daemon::start(&dir, &[]);
    let m = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    assert!(d.stop().success());
    let o = Command::new(BIN)
        .args(["daemon", "--socket-group", "no-such-group-qbt", "--socket"])
        .arg(dir.join("x.sock"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "qbridge: --socket-group: no group named \"no-such-group-qbt\" in /etc/group\n"
    );
}

#[test]
fn slow_metrics_clients_do_not_delay_scrapes() {
    let dir = tmp("metrics");
    let port = 20000 + (std::process::id() % 20000) as u16 + 7;
    let addr = format!("127.0.0.1:{port}");
    let mut d = Daemon::start(&dir, &["--metrics", &addr]);
    // Ten clients that send half a request and wait.
    let slow: Vec<std::net::TcpStream> = (0..10)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.write_all(b"GET /met").unwrap();
            c
        })
        .collect();
    let t0 = Instant::now();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    let took = t0.elapsed();
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
    assert!(took < Duration::from_secs(1), "a scrape took {took:?}");
    // The slow ones are closed at their deadline (5 s), unanswered.
    let mut s = &slow[0];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let t1 = Instant::now();
    let _ = s.read_to_end(&mut rest);
    assert!(t1.elapsed() < Duration::from_secs(6));
    d.forwards();
    assert!(d.stop().success());
}

/// The lines a monitor prints, as they come.
fn monitor_reader(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line + "\n").is_err() {
                return;
            }
        }
    });
    rx
}

/// `n` lines from a monitor, or what came within 10 s.
fn monitor_lines(rx: &std::sync::mpsc::Receiver<String>, n: usize) -> Vec<String> {
    let t0 = Instant::now();
    let mut v = Vec::new();
    while v.len() < n {
        let left = Duration::from_secs(10).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => v.push(l),
            Err(_) => break,
        }
    }
    v
}

#[test]
fn monitor_streams_changes() {
    let dir = tmp("monitor");
    let mut d = Daemon::start(&dir, &[]);
    let spawn = |args: &[&str]| {
        let mut c = Command::new(BIN)
            .arg("--socket")
            .arg(&d.socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = monitor_reader(c.stdout.take().unwrap());
        (c, out)
    };
    let (mut all, all_out) = spawn(&["monitor"]);
    let (mut fdb, fdb_out) = spawn(&["-j", "monitor", "fdb"]);
    // Both are registered once a command's events reach them.
    std::thread::sleep(Duration::from_millis(300));

    d.ok(&["vlan", "add", "vid", "10", "dev", "p2"]);
    d.ok(&[
        "fdb",
        "add",
        "02:00:00:00:00:01",
        "dev",
        "p2",
        "vlan",
        "10",
        "static",
    ]);
    d.forwards(); // probe1 joins br0; its frame's source is learned on it
    d.ok(&["fdb", "flush", "dev", "probe1"]);
    d.ok(&["fdb", "del", "02:00:00:00:00:01", "dev", "p2", "vlan", "10"]);
    d.ok(&["link", "del", "dev", "probe1"]);

    let expected = [
        "p2 10\n",
        "02:00:00:00:00:01 dev p2 vlan 10 master br0 static\n",
        "probe1: pcap master br0 state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) \
         max_frame 1518 link up\n",
        "probe1 1 PVID Egress Untagged\n",
        "02:00:00:00:99:01 dev probe1 vlan 1 master br0\n",
        "Deleted 02:00:00:00:99:01 dev probe1 vlan 1 master br0\n",
        "Deleted 02:00:00:00:00:01 dev p2 vlan 10 master br0 static\n",
        "Deleted probe1 1 PVID Egress Untagged\n",
        "Deleted probe1: pcap master br0 state UP mtu 1500 envhdr len auto (4) tpid default \
         (0x8100) max_frame 1518 link up\n",
    ];
    let got = monitor_lines(&all_out, expected.len());
    assert_eq!(got, expected, "log:\n{}", d.log_text());
    let got = monitor_lines(&fdb_out, 4);
    let j = |s: &str| serde_json::from_str::<Value>(s).unwrap();
    let got: Vec<Value> = got.iter().map(|l| j(l)).collect();
    assert_eq!(
        got,
        vec![
            serde_json::json!({"object":"fdb","mac":"02:00:00:00:00:01","ifname":"p2","vlan":10,"flags":[],"master":"br0","state":"static"}),
            serde_json::json!({"object":"fdb","mac":"02:00:00:00:99:01","ifname":"probe1","vlan":1,"flags":[],"master":"br0","state":""}),
            serde_json::json!({"object":"fdb","deleted":true,"mac":"02:00:00:00:99:01","ifname":"probe1","vlan":1,"flags":[],"master":"br0","state":""}),
            serde_json::json!({"object":"fdb","deleted":true,"mac":"02:00:00:00:00:01","ifname":"p2","vlan":10,"flags":[],"master":"br0","state":"static"}),
        ]
    );
    assert!(d.stop().success());
    // The daemon going away ends the monitors with a message and exit 1.
    for c in [&mut all, &mut fdb] {
        assert_eq!(c.wait().unwrap().code(), Some(1));
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert_eq!(
            err,
            format!(
                "qbridge: the daemon at {} closed the connection\n",
                d.socket.display()
            )
        );
    }
}
