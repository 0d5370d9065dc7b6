//! `qbridge daemon` on real interfaces (root only; skipped with a reason otherwise).
//!
//! Two hosts in their own network namespaces, each joined by a veth pair to an AF_PACKET port
//! of one 802.1Q bridge; the daemon runs in a third namespace. Checks with the kernel's ping:
//! forwarding works; `vlan del` on a running daemon cuts it and `vlan add` restores it, without
//! a restart; the device MTU is raised for envelope frames; deleting a veth takes the port
//! down (logged, counted) and recreating it brings traffic back. Every name is unique to this
//! process and a guard removes the namespaces (and so the veths) whatever happens. Traffic
//! stays between the namespaces the test made.

use serde_json::Value;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The namespaces and the daemon; dropping it kills the daemon and deletes the namespaces.
struct Lab {
    ns: Vec<String>,
    daemon: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.ns {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

impl Lab {
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "qbridge {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn port(&self, name: &str) -> Value {
        let v: Value =
            serde_json::from_str(&self.ok(&["-j", "-s", "link", "show", "dev", name])).unwrap();
        v[0].clone()
    }
}

/// One ping from `ns` to `ip`, 1 s timeout.
fn ping(ns: &str, ip: &str) -> bool {
    sh(&["ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", ip])
        .status
        .success()
}

/// Pings until one answer or `tries` attempts.
fn ping_ok(ns: &str, ip: &str, tries: usize) -> bool {
    (0..tries).any(|_| ping(ns, ip))
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn host_side(lab_ns_host: &str, lab_ns_sw: &str, host_if: &str, sw_if: &str, addr: &str) {
    must(&[
        "ip",
        "-n",
        lab_ns_sw,
        "link",
        "add",
        sw_if,
        "type",
        "veth",
        "peer",
        "name",
        host_if,
        "netns",
        lab_ns_host,
    ]);
    must(&["ip", "-n", lab_ns_sw, "link", "set", sw_if, "up"]);
    // A fixed MAC per host, so a recreated veth is the same host to its peer's ARP cache.
    let mac = if addr.starts_with("10.77.0.1/") {
        "02:77:00:00:00:01"
    } else {
        "02:77:00:00:00:02"
    };
    must(&[
        "ip",
        "-n",
        lab_ns_host,
        "link",
        "set",
        host_if,
        "address",
        mac,
    ]);
    must(&["ip", "-n", lab_ns_host, "addr", "add", addr, "dev", host_if]);
    must(&["ip", "-n", lab_ns_host, "link", "set", host_if, "up"]);
}

#[test]
fn live_vlan_changes_and_link_loss_on_veth() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces, veth, AF_PACKET)");
        return;
    }
    if !Path::new("/var/run/netns").exists() && !sh(&["ip", "netns", "list"]).status.success() {
        eprintln!("skipped: ip netns is not available");
        return;
    }
    let id = std::process::id() % 100_000;
    let (na, nb, nsw) = (
        format!("qbdA{id}"),
        format!("qbdB{id}"),
        format!("qbdS{id}"),
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("daemon-netns-{id}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut lab = Lab {
        ns: vec![],
        daemon: None,
        socket: dir.join("ctl.sock"),
        log: dir.join("daemon.log"),
    };
    for n in [&na, &nb, &nsw] {
        must(&["ip", "netns", "add", n]);
        lab.ns.push(n.clone());
        must(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    let (sa, sb) = (format!("qsa{id}"), format!("qsb{id}"));
    host_side(&na, &nsw, "eth0", &sa, "10.77.0.1/24");
    host_side(&nb, &nsw, "eth0", &sb, "10.77.0.2/24");

    let cfg = dir.join("cfg.batch");
    std::fs::write(
        &cfg,
        format!(
            "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
             link add pa type afpacket dev {sa}\n\
             link add pb type afpacket dev {sb}\n\
             link set dev pa master br0\n\
             link set dev pb master br0\n\
             vlan add vid 10 dev pa pvid untagged\n\
             vlan add vid 10 dev pb pvid untagged\n\
             vlan add vid 20 dev pb\n"
        ),
    )
    .unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &nsw, BIN, "daemon", "-batch"])
        .arg(&cfg)
        .arg("--socket")
        .arg(&lab.socket)
        .args(["--workers", "2"])
        .env("QBRIDGE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&lab.log).unwrap())
        .spawn()
        .unwrap();
    lab.daemon = Some(child);
    wait_for("daemon socket", 20, || {
        UnixStream::connect(&lab.socket).is_ok()
    });

    // Forwarding on vid 10.
    assert!(
        ping_ok(&na, "10.77.0.2", 5),
        "no ping A->B; log:\n{}",
        lab.log_text()
    );

    // Envelope sizing: pb carries tagged vid 20, so its largest frame is 1518 and the device
    // MTU of its veth is raised to 1504 (the kernel's slack is 4 bytes, 0x8100 only).
    let pb = lab.port("pb");
    assert_eq!(pb["runtime"]["device_mtu"], 1504, "{pb}");
    let link = String::from_utf8(sh(&["ip", "-n", &nsw, "link", "show", &sb]).stdout).unwrap();
    assert!(link.contains("mtu 1504"), "{link}");

    // vlan del on the running daemon cuts A from B; vlan add restores it.
    lab.ok(&["vlan", "del", "vid", "10", "dev", "pb"]);
    assert!(!ping(&na, "10.77.0.2"), "ping passed after vlan del");
    let pa = lab.port("pa");
    assert!(
        pa["stats"]["drops"]["no_destination"].as_u64().unwrap_or(0) > 0
            || pa["stats"]["drops"]["egress_not_member"]
                .as_u64()
                .unwrap_or(0)
                > 0,
        "{pa}"
    );
    lab.ok(&["vlan", "add", "vid", "10", "dev", "pb", "pvid", "untagged"]);
    assert!(ping_ok(&na, "10.77.0.2", 5), "no ping after vlan add");

    // Link loss: delete B's veth; the port goes down, logged and counted.
    must(&["ip", "-n", &nsw, "link", "del", &sb]);
    wait_for("pb down", 5, || lab.port("pb")["port"]["link_up"] == false);
    assert!(!ping(&na, "10.77.0.2"));
    assert!(
        lab.log_text().contains("port pb: link down"),
        "{}",
        lab.log_text()
    );
    let text = lab.ok(&["link", "show", "dev", "pb"]);
    assert!(text.contains("runtime: closed link down"), "{text}");

    // Recreate it: the daemon reopens the port by itself and traffic resumes.
    host_side(&nb, &nsw, "eth0", &sb, "10.77.0.2/24");
    wait_for("pb up", 10, || lab.port("pb")["port"]["link_up"] == true);
    assert!(
        ping_ok(&na, "10.77.0.2", 5),
        "no ping after the veth came back; log:\n{}",
        lab.log_text()
    );
    assert!(lab.log_text().contains("port pb: link up"));

    // Clean stop.
    let mut child = lab.daemon.take().unwrap();
    must(&["kill", "-TERM", &child.id().to_string()]);
    let st = child.wait().unwrap();
    assert!(st.success(), "daemon exit {st:?}");
    assert!(!lab.socket.exists());
}

/// Two daemons in two network namespaces (docs/across-hosts.md's two hosts), each started
/// with no `--socket` and no `$QBRIDGE_SOCKET`, as an operator starts them: each listens on
/// its namespace's default socket (`/run/qbridge/netns/NAME.sock`), and a command run in a
/// namespace — `ip netns exec NAME qbridge …` or `qbridge -n NAME …` — reaches that
/// namespace's daemon, never the other's. `-n` with a word that is no namespace (the old
/// meaning of `-n`, offline) is a clear error.
#[test]
fn each_namespace_has_its_own_default_socket() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let id = std::process::id() % 100_000;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("daemon-netns-sock-{id}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let names = [format!("qbdH1x{id}"), format!("qbdH2x{id}")];
    let mut labs = Vec::new();
    for (i, ns) in names.iter().enumerate() {
        let socket = PathBuf::from(format!("/run/qbridge/netns/{ns}.sock"));
        let mut lab = Lab {
            ns: vec![],
            daemon: None,
            socket: socket.clone(),
            log: dir.join(format!("daemon{i}.log")),
        };
        must(&["ip", "netns", "add", ns]);
        lab.ns.push(ns.clone());
        let cfg = dir.join(format!("cfg{i}.batch"));
        std::fs::write(&cfg, format!("link add br{i} type bridge\n")).unwrap();
        let log = std::fs::File::create(&lab.log).unwrap();
        lab.daemon = Some(
            Command::new("ip")
                .args(["netns", "exec", ns, BIN, "daemon", "-batch"])
                .arg(&cfg)
                .args(["--fast-path", "off"])
                .env_remove("QBRIDGE_SOCKET")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        wait_for(
            &format!("{} (daemon in {ns})", socket.display()),
            20,
            || UnixStream::connect(&socket).is_ok(),
        );
        labs.push(lab);
    }
    let run = |args: &[&str]| -> Output {
        Command::new(args[0])
            .args(&args[1..])
            .env_remove("QBRIDGE_SOCKET")
            .output()
            .unwrap()
    };
    let bridges = |o: &Output| -> String {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut names: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ifname"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names.join(" ")
    };
    for (i, ns) in names.iter().enumerate() {
        let want = format!("br{i}");
        let o = run(&["ip", "netns", "exec", ns, BIN, "-j", "link", "show"]);
        assert_eq!(bridges(&o), want, "ip netns exec {ns}");
        let o = run(&[BIN, "-n", ns, "-j", "link", "show"]);
        assert_eq!(bridges(&o), want, "qbridge -n {ns}");
        let o = run(&[BIN, "-netns", ns, "-j", "link", "show"]);
        assert_eq!(bridges(&o), want, "qbridge -netns {ns}");
    }
    let o = run(&[BIN, "-n", "link", "show"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "qbridge: no network namespace \"link\" (-n takes one, as ip -n does; to work without \
         a daemon, use -offline)\n"
    );
    for lab in &mut labs {
        let mut c = lab.daemon.take().unwrap();
        let _ = sh(&["kill", "-TERM", &c.id().to_string()]);
        let _ = c.wait();
        let _ = std::fs::remove_file(&lab.socket);
    }
}
