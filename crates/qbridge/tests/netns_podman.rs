//! `qbridge-cni` under a real container runtime (root only): Debian 12's podman 4 with its CNI
//! backend (`network_backend = "cni"`) and runc runs busybox containers on two qbridge VLANs.
//!
//! ```text
//!   podman run --network qbn10 ─┐
//!   podman run --network qbn10 ─┼─ qbc… veths ─ [qbridge daemon: br0, vlan_filtering 1]
//!   podman run --network qbn20 ─┘     all in one lab namespace (podman entered with nsenter)
//! ```
//!
//! Podman is private to the test: its own `--root`, `--runroot` and `--tmpdir` under the lab's
//! directory, a `containers.conf` (`CONTAINERS_CONF`: the CNI backend, plugin directories =
//! the directory of the `qbridge-cni` Cargo built + /usr/lib/cni for host-local, the network
//! directory holding the test's conflists, runc, the ulimits this sandbox needs, file locks
//! instead of the host's shared-memory lock segment, no events journal, image copies in its
//! own temporary directory), its own `storage.conf` (vfs: no overlay mounts) and an empty
//! `registries.conf`. The image is `podman import` of a rootfs the test makes from
//! busybox-static: no registry is asked. Podman, its plugins and the daemon run in the lab's
//! namespace (`nsenter --net`, which leaves the mount namespace alone, so every podman call
//! sees the same storage), so the host veths are there and go with it. A runtime's
//! environment is not the test's (a service's would differ): the conflists carry
//! `socket_file` and `dataDir`.
//!
//! [`Podman`]'s `Drop` removes every container (`rm -af`: CNI DEL while the daemon still
//! runs), then `system reset` and any mount left under its root, also when an assertion
//! panics; the [`Lab`] then stops the daemon and deletes the namespace. A run killed with
//! SIGKILL is cleaned up by the next ([`sweep_stale`]).
//!
//! Needs podman (with CNI: version 4), runc, busybox-static and containernetworking-plugins
//! (`scripts/deps.sh`, group `tests`). Missing, the test is skipped, unless
//! `QBRIDGE_REQUIRE_NETNS` is set: then it fails.

mod support;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;
use support::{Ctl, Lab};

const IMAGE: &str = "localhost/qbt-busybox";
const SW: &str = "link add br0 type bridge vlan_filtering 1\n";
/// Each podman call is bounded (a hung runtime fails the test instead of hanging it).
const PODMAN_TIMEOUT_S: &str = "90";

fn required() -> bool {
    std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Why podman cannot run containers here, if it cannot.
fn podman_missing() -> Option<String> {
    let version = match Command::new("podman").arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => return Some("podman is not installed (apt-get install podman)".into()),
    };
    // Podman 5 dropped the CNI backend (netavark only).
    let major = version
        .split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    if major.is_some_and(|m| m >= 5) {
        return Some(format!(
            "{} has no CNI backend (podman 4 has)",
            version.trim()
        ));
    }
    if Command::new("runc").arg("--version").output().is_err() {
        return Some("runc is not installed (apt-get install runc)".into());
    }
    if !Path::new("/usr/lib/cni/host-local").exists() {
        return Some(
            "/usr/lib/cni/host-local missing (apt-get install containernetworking-plugins)".into(),
        );
    }
    // A dynamic busybox cannot run in a rootfs without its libraries.
    let dynamic = Command::new("ldd")
        .arg("/bin/busybox")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(true);
    if !Path::new("/bin/busybox").exists() || dynamic {
        return Some("no static /bin/busybox (apt-get install busybox-static)".into());
    }
    None
}

/// Returns from the test with a printed reason when podman cannot run here; a failure
/// instead when `QBRIDGE_REQUIRE_NETNS` is set.
macro_rules! skip_unless_podman {
    () => {
        if let Some(reason) = podman_missing() {
            assert!(
                !required(),
                "tests/netns_podman.rs is required here (QBRIDGE_REQUIRE_NETNS) but cannot run: {reason}"
            );
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// A private podman whose every file is under `dir`, run inside namespace `ns` (`None`: the
/// caller's, for [`sweep_stale`]).
struct Podman {
    dir: PathBuf,
    ns: Option<String>,
    /// Whether /var/lib/cni did not exist before this podman ran.
    made_cni_dir: bool,
    /// Whether no cgroup hierarchy had `libpod_parent` (the parent of the containers'
    /// cgroups with the cgroupfs manager) before this podman ran.
    made_cgroup_parent: bool,
}

impl Podman {
    /// Writes the configuration and the conflists (`nets`: name → the qbridge-cni plugin's
    /// object), and imports the busybox image.
    fn new(dir: &Path, ns: &str, nets: &[(&str, Value)]) -> Podman {
        let p = Podman {
            dir: dir.to_owned(),
            ns: Some(ns.to_owned()),
            // libcni makes /var/lib/cni/results for its cache (emptied again by DEL): if
            // this test makes it, `Drop` removes it.
            made_cni_dir: !Path::new("/var/lib/cni").exists(),
            made_cgroup_parent: cgroup_parents().is_empty(),
        };
        for d in ["root", "runroot", "tmp", "net", "rootfs"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let plugin_dir = Path::new(env!("CARGO_BIN_EXE_qbridge-cni"))
            .parent()
            .unwrap()
            .to_owned();
        let d = |s: &str| dir.join(s).to_string_lossy().into_owned();
        let conf = format!(
            r#"[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[network]
network_backend = "cni"
cni_plugin_dirs = ["{}", "/usr/lib/cni"]
network_config_dir = "{}"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
lock_type = "file"
tmp_dir = "{}"
image_copy_tmp_dir = "{}"
"#,
            plugin_dir.display(),
            d("net"),
            d("tmp"),
            d("tmp")
        );
        std::fs::write(dir.join("containers.conf"), conf).unwrap();
        let storage = format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            d("root"),
            d("runroot")
        );
        std::fs::write(dir.join("storage.conf"), storage).unwrap();
        std::fs::write(dir.join("registries.conf"), "").unwrap();
        for (name, plugin) in nets {
            let list = serde_json::json!({
                "cniVersion": "1.0.0", "name": name, "plugins": [plugin],
            });
            std::fs::write(
                dir.join("net").join(format!("{name}.conflist")),
                list.to_string(),
            )
            .unwrap();
        }
        // The image: busybox-static and the applets the test runs, imported from a tarball.
        let rootfs = dir.join("rootfs");
        for sub in ["bin", "etc", "proc", "sys", "dev", "tmp", "run"] {
            std::fs::create_dir_all(rootfs.join(sub)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for applet in ["sh", "ping", "sleep", "ip"] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        let tar = dir.join("rootfs.tar");
        support::run(
            "tar",
            &["-C", &d("rootfs"), "-cf", &tar.to_string_lossy(), "."],
        )
        .unwrap();
        // Podman 4.3 keeps a blob cache in /var/lib/containers/cache whatever `--root` says:
        // the import runs in a mount namespace of its own where that is a tmpfs.
        let import = p.command(&["import", &tar.to_string_lossy(), IMAGE]);
        let prog = import.get_program().to_owned();
        let args: Vec<_> = import.get_args().map(|a| a.to_owned()).collect();
        let over = if Path::new("/var/lib/containers").is_dir() {
            "/var/lib/containers"
        } else {
            "/var/lib"
        };
        let o = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!("mount -t tmpfs qbt-podman {over} && exec \"$@\""))
            .arg("sh")
            .arg(prog)
            .args(args)
            .envs(import.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdin(Stdio::null())
            .output()
            .expect("run unshare");
        assert!(
            o.status.success(),
            "podman import: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        p
    }

    fn command(&self, args: &[&str]) -> Command {
        let d = |s: &str| self.dir.join(s).to_string_lossy().into_owned();
        let mut c = Command::new("timeout");
        c.args(["-k", "5", PODMAN_TIMEOUT_S]);
        if let Some(ns) = &self.ns {
            c.arg("nsenter").arg(format!("--net=/run/netns/{ns}"));
        }
        c.args(["podman", "--root", &d("root"), "--runroot", &d("runroot")])
            .args(["--tmpdir", &d("tmp"), "--storage-driver", "vfs"])
            .args(args)
            .env("CONTAINERS_CONF", d("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", d("storage.conf"))
            .env("CONTAINERS_REGISTRIES_CONF", d("registries.conf"))
            .stdin(Stdio::null());
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run podman")
    }

    /// Runs podman; its stdout, or a panic quoting the command and its stderr.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.output(args);
        assert!(
            o.status.success(),
            "podman {} failed ({}): {}{}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    /// `podman run -d [EXTRA…]` on `net`: the container's full id.
    fn start(&self, name: &str, net: &str, extra: &[&str]) -> String {
        let mut args = vec!["run", "-d", "--name", name, "--network", net];
        args.extend_from_slice(extra);
        args.extend(["--cap-add", "NET_RAW", IMAGE, "sleep", "600"]);
        self.ok(&args)
    }

    /// The container's address on `net`, and its namespace path.
    fn addr(&self, name: &str, net: &str) -> (String, String) {
        let f = format!(
            "{{{{.NetworkSettings.Networks.{net}.IPAddress}}}} {{{{.NetworkSettings.SandboxKey}}}}"
        );
        let out = self.ok(&["inspect", "-f", &f, name]);
        let mut w = out.split_whitespace();
        (
            w.next().unwrap_or_default().to_owned(),
            w.next().unwrap_or_default().to_owned(),
        )
    }

    /// `podman run --rm --network NET … ping -c 2 IP` (within `deadline_s` seconds): whether
    /// every echo came back.
    fn ping_from_new(&self, net: &str, ip: &str, deadline_s: &str) -> bool {
        self.output(&[
            "run",
            "--rm",
            "--network",
            net,
            "--cap-add",
            "NET_RAW",
            IMAGE,
            "ping",
            "-c",
            "2",
            "-W",
            "1",
            "-w",
            deadline_s,
            ip,
        ])
        .status
        .success()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // rm first, while the daemon runs: CNI DEL takes the ports away.
        let _ = self.output(&["rm", "-af", "-t", "0"]);
        // Each container's conmon exits a moment after `rm`: wait for them (their command
        // lines name this podman's directories) so none outlives the test.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !processes_naming(&self.dir).is_empty() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.output(&["system", "reset", "-f"]);
        if let Ok(m) = support::run("findmnt", &["-rn", "-o", "TARGET"]) {
            let root = self.dir.to_string_lossy().into_owned();
            for t in m.lines().rev().filter(|t| t.starts_with(&root)) {
                let _ = support::run("umount", &["-l", t]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.made_cni_dir {
            // Only if empty: another user's files stay.
            let _ = std::fs::remove_dir("/var/lib/cni/results");
            let _ = std::fs::remove_dir("/var/lib/cni");
        }
        if self.made_cgroup_parent {
            // Empty once every container and its conmon are gone (conmon exits a moment
            // after `rm`; rmdir of a cgroup in use fails, and another podman's stays).
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            for d in cgroup_parents() {
                let conmon = d.join("conmon");
                while conmon.exists()
                    && std::fs::remove_dir(&conmon).is_err()
                    && Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// Pids of the processes whose command line names `dir` (this podman's conmons).
fn processes_naming(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| *pid != me)
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `/sys/fs/cgroup/…/libpod_parent` of every hierarchy that has one (v1 and hybrid; the
/// top level on a pure v2 system).
fn cgroup_parents() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("libpod_parent"))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    let unified = PathBuf::from("/sys/fs/cgroup/libpod_parent");
    if unified.is_dir() {
        v.push(unified);
    }
    v
}

/// Removes what a killed run of this test left (a panic cleans up in `Drop`; SIGKILL cannot):
/// for each `qbt-podman-PID-N` directory whose process is gone, its containers (`rm -af`,
/// which ends their conmon and namespaces), storage and mounts, then the directory. Runs
/// before the lab is made, so a daemon the killed run left still answers the plugin's DEL.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("qbt-podman-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path().join("podman");
        if dir.join("containers.conf").exists() {
            eprintln!("removing what a killed run left in {}", dir.display());
            drop(Podman {
                dir,
                ns: None,
                made_cni_dir: false,
                made_cgroup_parent: false,
            });
        }
        let _ = std::fs::remove_dir_all(e.path());
    }
}

/// The qbridge-cni plugin object of a conflist: `vlan` on br0, host-local in `range`.
fn qbridge_net(ctl: &Ctl, lab: &Lab, vlan: u16, range: (&str, &str)) -> Value {
    serde_json::json!({
        "type": "qbridge-cni", "bridge": "br0", "vlan": vlan,
        "socket_file": ctl.socket, "dataDir": lab.dir.join("cni"),
        "ipam": {"type": "host-local", "dataDir": lab.dir.join("ipam"),
                 "ranges": [[{"subnet": "10.89.10.0/24",
                              "rangeStart": range.0, "rangeEnd": range.1}]]},
    })
}

/// The daemon's `qbc…` ports, their `link show -j` objects.
fn qbc_ports(ctl: &Ctl) -> Vec<Value> {
    let v = ctl.json(&["link", "show"]).unwrap();
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["ifname"].as_str().is_some_and(|n| n.starts_with("qbc")))
        .cloned()
        .collect()
}

/// The port of container `id` on `net`, from qbridge-cni's attachment record
/// (`dataDir/NET/PORT` holding `CONTAINERID eth0`).
fn port_of(lab: &Lab, net: &str, id: &str) -> String {
    let records = lab.dir.join("cni").join(net);
    files(&records, "qbc")
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(records.join(p)).is_ok_and(|t| t.trim() == format!("{id} eth0"))
        })
        .unwrap_or_else(|| panic!("no attachment record for container {id}"))
}

/// Files of `dir` whose names start with `prefix` (host-local: one per reserved address;
/// qbridge-cni: one record per attachment).
fn files(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Nothing of any container is left: no container, no qbridge port, no host veth, no
/// reserved address, no attachment record, none of the namespaces in `sandboxes`.
fn assert_nothing_left(pm: &Podman, ctl: &Ctl, lab: &Lab, sw: &str, sandboxes: &[String]) {
    assert_eq!(pm.ok(&["ps", "-aq"]), "", "containers left");
    let ports: Vec<String> = qbc_ports(ctl)
        .iter()
        .map(|p| p["ifname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ports, Vec::<String>::new(), "qbridge ports left");
    assert_eq!(
        support::links_named_from(sw, "qbc"),
        Vec::<String>::new(),
        "host veths left"
    );
    for net in ["qbn10", "qbn20", "qbnbad"] {
        assert_eq!(
            files(&lab.dir.join("ipam").join(net), "10."),
            Vec::<String>::new(),
            "addresses of {net} still reserved"
        );
        assert_eq!(
            files(&lab.dir.join("cni").join(net), "qbc"),
            Vec::<String>::new(),
            "attachment records of {net} left"
        );
    }
    for s in sandboxes {
        assert!(!Path::new(s).exists(), "network namespace {s} left");
    }
}

#[test]
fn podman_containers_on_qbridge_vlans() {
    skip_unless_netns!();
    skip_unless_podman!();
    let _g = support::serial();
    let t0 = Instant::now();
    sweep_stale();
    let mut lab = Lab::new("podman");
    let sw = lab.netns("pmsw").unwrap();
    let ctl = lab.daemon(&sw, SW).unwrap();
    // VLANs 10 and 20 share one subnet (disjoint ranges): only the VLAN keeps them apart.
    let mut bad = qbridge_net(&ctl, &lab, 30, ("10.89.10.240", "10.89.10.250"));
    bad["ipMasq"] = Value::Bool(true);
    let nets = [
        (
            "qbn10",
            qbridge_net(&ctl, &lab, 10, ("10.89.10.10", "10.89.10.99")),
        ),
        (
            "qbn20",
            qbridge_net(&ctl, &lab, 20, ("10.89.10.100", "10.89.10.199")),
        ),
        ("qbnbad", bad),
    ];
    let pm = Podman::new(&lab.dir.join("podman"), &sw, &nets);

    // Two containers on VLAN 10, one on VLAN 20, all in 10.89.10.0/24.
    // a's MAC from the runtime (podman passes --mac-address as CNI_ARGS MAC=).
    let a_mac = "02:00:00:0a:00:0a";
    let a_id = pm.start("a", "qbn10", &["--mac-address", a_mac]);
    pm.start("b", "qbn10", &[]);
    pm.start("c", "qbn20", &[]);
    let (a, sa) = pm.addr("a", "qbn10");
    let (b, sb) = pm.addr("b", "qbn10");
    let (c, sc) = pm.addr("c", "qbn20");
    assert!(
        a.starts_with("10.89.10.") && b.starts_with("10.89.10."),
        "{a} {b}"
    );
    assert_eq!(qbc_ports(&ctl).len(), 3);
    let tags: BTreeSet<u64> = qbc_ports(&ctl)
        .iter()
        .filter_map(|p| p["port"]["vlan_mode"]["tag"].as_u64())
        .collect();
    assert_eq!(tags, BTreeSet::from([10, 20]));
    // a → b inside VLAN 10 (podman exec), a new container on VLAN 10 → a and b, one on
    // VLAN 20 → c; nothing from VLAN 20 reaches VLAN 10 or back.
    // Reached: within 4 s; not reached: nothing within 2 s (ARP is not answered).
    let exec_ping = |from: &str, ip: &str, deadline_s: &str| {
        pm.output(&[
            "exec", from, "ping", "-c", "2", "-W", "1", "-w", deadline_s, ip,
        ])
        .status
        .success()
    };
    assert!(exec_ping("a", &b, "4"), "a → b in VLAN 10");
    assert!(pm.ping_from_new("qbn10", &a, "4"), "new → a in VLAN 10");
    assert!(pm.ping_from_new("qbn20", &c, "4"), "new → c in VLAN 20");
    assert!(!exec_ping("c", &a, "2"), "c (VLAN 20) reached a (VLAN 10)");
    assert!(
        !pm.ping_from_new("qbn20", &b, "2"),
        "VLAN 20 reached b (VLAN 10)"
    );
    assert!(!exec_ping("a", &c, "2"), "a (VLAN 10) reached c (VLAN 20)");
    assert!(pm
        .ok(&["exec", "a", "ip", "link", "show", "eth0"])
        .contains(a_mac));
    assert!(ctl.fdb_has(a_mac, &port_of(&lab, "qbn10", &a_id)).unwrap());

    // A network whose configuration asks for what qbridge-cni refuses: podman run fails
    // with the plugin's message naming the key, and nothing of it is made.
    let o = pm.output(&["run", "--rm", "--network", "qbnbad", IMAGE, "true"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("ipMasq: true is not supported"), "{err}");
    assert_eq!(qbc_ports(&ctl).len(), 3);
    assert_eq!(support::links_named_from(&sw, "qbc").len(), 3);

    // podman rm -f: no port, veth, address, record or namespace is left.
    pm.ok(&["rm", "-f", "-t", "0", "a", "b", "c"]);
    assert_nothing_left(&pm, &ctl, &lab, &sw, &[sa, sb, sc]);
    eprintln!("three containers, pings, rm: {:?}", t0.elapsed());

    // 20 containers started at once: 20 distinct addresses, 20 ports in VLAN 10.
    let t1 = Instant::now();
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..20)
            .map(|i| {
                let pm = &pm;
                s.spawn(move || pm.start(&format!("p{i}"), "qbn10", &[]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("20 containers started in parallel: {:?}", t1.elapsed());
    let mut addrs = BTreeSet::new();
    let mut sandboxes = Vec::new();
    for i in 0..20 {
        let (ip, sbx) = pm.addr(&format!("p{i}"), "qbn10");
        assert!(ip.starts_with("10.89.10."), "p{i}: {ip}");
        addrs.insert(ip);
        sandboxes.push(sbx);
    }
    assert_eq!(addrs.len(), 20, "addresses: {addrs:?}");
    // Each container has its port: the attachment record names it (CONTAINERID eth0), and
    // the daemon has it in br0, VLAN 10.
    let ports = qbc_ports(&ctl);
    assert_eq!(ports.len(), 20);
    for id in &ids {
        let port = port_of(&lab, "qbn10", id);
        let p = ports
            .iter()
            .find(|p| p["ifname"] == port.as_str())
            .unwrap_or_else(|| panic!("container {id}: no port {port}"));
        assert_eq!(p["master"], "br0");
        assert_eq!(p["port"]["vlan_mode"]["tag"], 10);
    }
    let names: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let mut rm = vec!["rm", "-f", "-t", "0"];
    rm.extend(names.iter().map(String::as_str));
    pm.ok(&rm);
    assert_nothing_left(&pm, &ctl, &lab, &sw, &sandboxes);
    drop(pm);
    let left = processes_naming(&lab.dir.join("podman"));
    assert!(
        left.is_empty(),
        "processes of the test's podman left: {left:?}"
    );
    eprintln!(
        "20 in parallel and removed: {:?}; whole test {:?}",
        t1.elapsed(),
        t0.elapsed()
    );
}
