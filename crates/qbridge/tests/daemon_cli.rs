//! `qbridge daemon` without privileges: pcap ports (`--pcap-dir`), a socket in a temporary
//! directory, and the CLI against it. Checks the control protocol end to end (text and JSON
//! output, errors, all-or-nothing batches), live counters and learning from frames the daemon
//! forwarded, the single-daemon lock, the metrics endpoint, and a clean SIGTERM exit.

use qbridge_io::pcap::PcapWriter;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod local;

use local::{read_pcap, Daemon, BIN};

fn tmp(name: &str) -> PathBuf {
    local::tmp("daemon", name)
}

fn start(dir: &Path, batch: &str, extra: &[&str]) -> Daemon {
    local::start_daemon(dir, batch, extra)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An untagged Ethernet frame of 60 bytes.
fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.resize(60, 0xab);
    f
}

const A: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];
const BCAST: [u8; 6] = [0xff; 6];

const CONFIG: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add p2 type pcap
link add p3 type pcap
link set dev p1 master br0
link set dev p2 master br0
link set dev p3 master br0
vlan add vid 10 dev p1 pvid untagged
vlan add vid 10 dev p2
vlan del vid 1 dev p1
";

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::create(path).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(1_700_000_000_000_000_000 + i as u64 * 1000, f)
            .unwrap();
    }
    w.finish().unwrap();
}

/// Polls `f` until it returns true or 5 s pass.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn daemon_serves_commands_forwards_and_stops_cleanly() {
    let dir = tmp("serve");
    let pcaps = dir.join("pcap");
    std::fs::create_dir_all(&pcaps).unwrap();
    // p1 (access, vid 10 untagged): A broadcasts; p2 (trunk, tagged 10): B answers A, tagged.
    write_pcap(&pcaps.join("p1.in.pcap"), &[frame(BCAST, A)]);
    let mut b_to_a = frame(A, B);
    b_to_a.splice(12..12, [0x81, 0x00, 0x00, 0x0a]);
    write_pcap(&pcaps.join("p2.in.pcap"), &[b_to_a]);
    let metrics_port = 20000 + (std::process::id() % 20000) as u16;
    let maddr = format!("127.0.0.1:{metrics_port}");
    let mut d = start(
        &dir,
        CONFIG,
        &["--pcap-dir", pcaps.to_str().unwrap(), "--metrics", &maddr],
    );

    // The socket is private to the daemon's user.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Learning from the frames the daemon forwarded.
    eventually("both addresses learned", || {
        let v: Value = serde_json::from_str(&d.ok(&["-j", "fdb", "show"])).unwrap();
        v.as_array().unwrap().len() == 2
    });
    let fdb: Value = serde_json::from_str(&d.ok(&["-j", "fdb", "show"])).unwrap();
    assert_eq!(
        fdb,
        serde_json::json!([
            {"mac":"02:00:00:00:00:0a","ifname":"p1","vlan":10,"flags":[],"master":"br0","state":""},
            {"mac":"02:00:00:00:00:0b","ifname":"p2","vlan":10,"flags":[],"master":"br0","state":""}
        ])
    );
    let text = d.ok(&["fdb", "show", "dev", "p1"]);
    assert_eq!(text, "02:00:00:00:00:0a dev p1 vlan 10 master br0\n");

    // Counters, live.
    let links: Value = serde_json::from_str(&d.ok(&["-j", "-s", "link", "show"])).unwrap();
    let p1 = links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ifname"] == "p1")
        .unwrap();
    assert_eq!(p1["stats"]["rx_frames"], 1);
    assert_eq!(p1["stats"]["tx_frames"], 1, "B's answer went to p1");
    assert_eq!(p1["runtime"]["open"], true);
    let s = d.ok(&["-s", "link", "show", "dev", "p2"]);
    assert!(s.contains("    RX: 64 bytes 1 packets\n"), "{s}");
    assert!(s.contains("    runtime: open link up\n"), "{s}");
    // The lines the counter tables place (crates/control/src/stats.rs), in their order.
    assert!(
        s.contains("    fdb: learn_refused 0 evictions 0 moves 0\n"),
        "{s}"
    );
    assert!(
        s.contains("    gso: tx_sw_gso 0 tx_gso_refused 0 tx_gro_frames 0 tx_gro_segments 0\n"),
        "{s}"
    );
    let vs = d.ok(&["-s", "vlan", "show"]);
    assert!(
        vs.contains("                  10\n                    RX: 124 bytes 2 packets\n"),
        "{vs}"
    );

    // Errors come back with the daemon's message and exit 1; nothing changes.
    let o = d.cli(&["vlan", "add", "vid", "4095", "dev", "p1"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "qbridge: vid 4095 is reserved\n");
    let bad = dir.join("bad.batch");
    std::fs::write(&bad, "vlan add vid 20 dev p3\nvlan add vid 4095 dev p3\n").unwrap();
    let o = d.cli(&["-batch", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "qbridge: line 2: vid 4095 is reserved\n");
    assert!(!d.ok(&["vlan", "show", "dev", "p3"]).contains("20"));

    // A batch applies live and prints its show output.
    let good = dir.join("good.batch");
    std::fs::write(&good, "vlan add vid 20 dev p3\nvlan show dev p3\n").unwrap();
    let out = d.ok(&["-batch", good.to_str().unwrap()]);
    assert_eq!(
        out,
        "port              vlan-id\np3                1 PVID Egress Untagged\n                  20\n"
    );

    // New ports open at once; pcap ports need --pcap-dir (given here).
    d.ok(&["link", "add", "p4", "type", "pcap"]);
    assert!(pcaps.join("p4.pcap").exists());
    d.ok(&["link", "del", "dev", "p4"]);

    // The wire protocol, raw.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"{\"v\":1,\"args\":[\"-j\",\"vlan\",\"show\",\"dev\",\"p2\"]}\n{\"v\":9,\"args\":[\"link\",\"show\"]}\n")
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["v"], 1);
    assert_eq!(v["ok"], true);
    assert!(v["output"].as_str().unwrap().contains("\"vlan\":10"));
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(
        line,
        "{\"v\":1,\"ok\":false,\"error\":\"protocol version 9 is not supported (this daemon speaks 1)\"}\n"
    );
    drop(s);

    // A second daemon on the same socket refuses to start.
    let o = Command::new(BIN)
        .args(["daemon", "--socket"])
        .arg(&d.socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("another qbridge daemon is running on"),
        "{}",
        stderr(&o)
    );
    // … naming the holder, from the lock file.
    assert!(stderr(&o).contains(".lock: pid "), "{}", stderr(&o));

    // Metrics.
    let mut c = std::net::TcpStream::connect(&maddr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
    assert!(
        body.contains("qbridge_port_rx_frames_total{port=\"p1\"} 1\n"),
        "{body}"
    );
    assert!(body.contains("qbridge_port_drops_total{port=\"p3\",reason=\"vlan_not_member\"} 0\n"));
    assert!(body.contains("qbridge_vlan_rx_frames_total{bridge=\"br0\",vlan=\"10\"} 2\n"));
    assert!(body.contains("qbridge_fdb_entries{bridge=\"br0\"} 2\n"));
    assert!(body.contains("qbridge_port_up{port=\"p1\"} 1\n"));

    // SIGTERM: exit 0, socket gone, pcap files complete.
    let st = d.stop();
    assert!(st.success(), "exit {st:?}; log:\n{}", d.log_text());
    assert!(!d.socket.exists(), "socket left behind");
    let mut lock = d.socket.as_os_str().to_owned();
    lock.push(".lock");
    assert!(!Path::new(&lock).exists(), "lock file left behind");
    let p1_out = read_pcap(&pcaps.join("p1.pcap"));
    assert_eq!(p1_out, vec![frame(A, B)], "B's answer leaves p1 untagged");
    let p2_out = read_pcap(&pcaps.join("p2.pcap"));
    let mut bcast_tagged = frame(BCAST, A);
    bcast_tagged.splice(12..12, [0x81, 0x00, 0x00, 0x0a]);
    assert_eq!(
        p2_out,
        vec![bcast_tagged],
        "A's broadcast leaves p2 tagged 10"
    );
    assert!(
        read_pcap(&pcaps.join("p3.pcap")).is_empty(),
        "p3 is not in vid 10"
    );
    let log = d.log_text();
    assert!(log.contains("shutting down"), "{log}");

    // Without a daemon the CLI says so.
    let o = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["link", "show"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "qbridge: no daemon at {} (start one with 'qbridge daemon')\n",
            d.socket.display()
        )
    );
}

#[test]
fn stale_socket_is_replaced_and_env_names_the_socket() {
    let dir = tmp("stale");
    let socket = dir.join("ctl.sock");
    // A leftover from a crashed daemon: a socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let mut d = start(&dir, "link add br0 type bridge\n", &[]);
    let o = Command::new(BIN)
        .env("QBRIDGE_SOCKET", &socket)
        .args(["link", "show"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("br0: bridge"));
    // pcap ports need --pcap-dir; the command is refused and leaves nothing behind.
    let o = d.cli(&["link", "add", "p1", "type", "pcap"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("needs a directory: start the daemon with --pcap-dir DIR"));
    assert!(!d.ok(&["link", "show"]).contains("p1"));
    assert!(d.stop().success());
}

#[test]
fn bad_batch_stops_the_start_before_the_socket_exists() {
    let dir = tmp("badstart");
    let cfg = dir.join("cfg.batch");
    std::fs::write(&cfg, "link add br0 type bridge\nvlan add vid 4095 dev x\n").unwrap();
    let socket = dir.join("ctl.sock");
    let o = Command::new(BIN)
        .args(["daemon", "-batch", cfg.to_str().unwrap(), "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("line 2: vid 4095 is reserved"),
        "{}",
        stderr(&o)
    );
    assert!(!socket.exists());
    let o = Command::new(BIN)
        .args(["daemon", "--metrics", "0.0.0.0:9", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("add --metrics-public"),
        "{}",
        stderr(&o)
    );
}

/// Runs qbridge with `stdin` on its standard input.
fn run_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run qbridge");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs qbridge with its stdout a pipe whose reader is gone (`qbridge … | head -0`).
fn run_into_closed_pipe(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run qbridge");
    drop(child.stdout.take());
    let mut input = child.stdin.take().unwrap();
    // The batch may be refused half-read if qbridge is already gone: that is not the test.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().unwrap()
}

/// More output than a pipe holds (64 KiB), so that writing it must meet the closed pipe.
fn long_batch() -> String {
    let mut b = String::from("link add br0 type bridge vlan_filtering 1\n");
    for i in 0..40 {
        b.push_str(&format!(
            "link add p{i} type pcap\nlink set p{i} master br0\n"
        ));
    }
    for _ in 0..60 {
        b.push_str("link show\n");
    }
    b
}

#[test]
fn help_version_and_messages_without_a_daemon() {
    let no_daemon = tmp("nodaemon").join("none.sock");
    let ok = |args: &[&str]| {
        let o = Command::new(BIN)
            .arg("--socket")
            .arg(&no_daemon)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    // Help at every level, on stdout, exit 0, no daemon needed.
    let all = ok(&["help"]);
    assert!(
        all.starts_with("Usage: qbridge [OPTIONS] OBJECT COMMAND [ARGS...]\n"),
        "{all}"
    );
    assert_eq!(ok(&["-h"]), all);
    assert_eq!(ok(&["--help"]), all);
    for (o, words) in [
        (qbridge_control::Object::Link, ["link", "help"]),
        (qbridge_control::Object::Vlan, ["vlan", "help"]),
        (qbridge_control::Object::Fdb, ["f", "h"]),
    ] {
        let text = ok(&words);
        assert_eq!(text, qbridge_control::usage::object(o));
        assert!(all.contains(text.lines().nth(1).unwrap()), "{text}");
    }
    // The version, and whether the build has the eBPF fast path (the test command builds
    // with QBRIDGE_FASTPATH_REQUIRE=1 where clang is installed: then it must say so).
    let fast_path = if qbridge_datapath::fastpath::built() {
        "(eBPF fast path built in)\n".to_string()
    } else {
        "(built WITHOUT the eBPF fast path (clang was missing at build time: install clang, \
         llvm and libbpf-dev and build again))\n"
            .to_string()
    };
    let version = format!("qbridge {} {fast_path}", env!("CARGO_PKG_VERSION"));
    for v in ["-V", "--version", "-Version", "-Ver"] {
        assert_eq!(ok(&[v]), version, "{v}");
    }
    if std::env::var("QBRIDGE_FASTPATH_REQUIRE").is_ok_and(|v| v == "1") {
        assert!(version.contains("fast path built in"), "{version}");
    }
    // Grammar errors, the same with and without -offline.
    for offline in [true, false] {
        let err = |args: &[&str]| {
            let mut c = Command::new(BIN);
            c.arg("--socket").arg(&no_daemon);
            if offline {
                c.arg("-offline");
            }
            let o = c.args(args).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{args:?}");
            stderr(&o)
        };
        assert_eq!(
            err(&["link", "shwo"]),
            "qbridge: unknown command \"shwo\" for link (did you mean \"show\"?)\n"
        );
        assert_eq!(
            err(&["link", "add", "br0", "type", "bridge", "vlan_filtring", "1"]),
            "qbridge: unexpected \"vlan_filtring\" (did you mean \"vlan_filtering\"?)\n"
        );
        assert_eq!(
            err(&["vlan", "add", "vid", "99999999999999999999", "dev", "p1"]),
            "qbridge: vid 99999999999999999999 is out of range (1-4094)\n"
        );
        assert_eq!(
            err(&["vlan", "add", "vid", "-1", "dev", "p1"]),
            "qbridge: invalid vid \"-1\" (expected V or V-V2, numbers from 1 to 4094)\n"
        );
    }
    let o = Command::new(BIN)
        .args([
            "-offline",
            "link",
            "add",
            "abcdefghijklmnop",
            "type",
            "pcap",
        ])
        .output()
        .unwrap();
    assert_eq!(
        stderr(&o),
        "qbridge: invalid device name \"abcdefghijklmnop\" (1 to 15 bytes, no '/', whitespace or ':')\n"
    );
    // 8 two-byte characters are 16 bytes: too long, though 8 characters.
    let o = Command::new(BIN)
        .args(["-offline", "link", "add", "éééééééé", "type", "pcap"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("1 to 15 bytes"), "{}", stderr(&o));
    // vlan show prints its header with nothing under it.
    assert_eq!(
        String::from_utf8(
            Command::new(BIN)
                .args(["-offline", "vlan", "show"])
                .output()
                .unwrap()
                .stdout
        )
        .unwrap(),
        "port              vlan-id\n"
    );
    // -c / -compressvlans, offline.
    let batch = "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
                 link set p1 master br0\nvlan add vid 10-20 dev p1\nv s\n";
    for c in ["-c", "-compressvlans", "--com"] {
        let o = run_with_stdin(&["-offline", c, "-batch", "-"], batch);
        assert!(o.status.success(), "{c}: {}", stderr(&o));
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            "port              vlan-id\np1                1 PVID Egress Untagged\n                  10-20\n",
            "{c}"
        );
    }
}

#[test]
fn closed_stdout_is_quiet() {
    let batch = long_batch();
    let o = run_into_closed_pipe(&["-offline", "-batch", "-"], &batch);
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(&o));
    assert_eq!(stderr(&o), "");
    let o = run_into_closed_pipe(&["-h"], "");
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(&o));
    assert_eq!(stderr(&o), "");

    // The same through the daemon.
    let dir = tmp("pipe");
    let pcaps = dir.join("pcap");
    std::fs::create_dir_all(&pcaps).unwrap();
    let mut d = start(
        &dir,
        &batch.replace("link show\n", ""),
        &["--pcap-dir", pcaps.to_str().unwrap()],
    );
    let o = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["-s", "-j", "-p", "link", "show"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|mut c| {
            drop(c.stdout.take());
            c.wait_with_output().unwrap()
        })
        .unwrap();
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(&o));
    assert_eq!(stderr(&o), "");
    // -c and abbreviations reach the daemon.
    d.ok(&["vlan", "add", "vid", "10-20", "dev", "p1"]);
    assert_eq!(
        d.ok(&["-c", "v", "s", "dev", "p1"]),
        "port              vlan-id\np1                1 PVID Egress Untagged\n                  10-20\n"
    );
    assert_eq!(
        d.ok(&["-com", "-j", "vlan", "show", "vid", "15"]),
        "[{\"ifname\":\"p1\",\"vlans\":[{\"vlan\":10,\"vlanEnd\":20}]}]\n"
    );
    assert!(d.stop().success());
}
