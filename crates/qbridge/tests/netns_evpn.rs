//! EVPN (RFC 7432/8365) between qbridge VTEPs and FRR (root only): qbridge-evpn drives a
//! gobgpd per qbridge VTEP over its gRPC API; FRR 8.4 (zebra + bgpd, `advertise-all-vni`)
//! with a kernel bridge and vxlan device is the peer operators run.
//!
//! ```text
//!  ha ─ qa ┐                           ┌ kb1 ─ hb          hc ─ qc ┐
//!   A: daemon br0: p1 (qa), vx0          B: kernel kbr: kb1, vx100     C: daemon br0: p1, vx0
//!      vx0 vxlan id 100 local .1            vx100 id 100 local .2         vx0 id 100 local .3
//!      gobgpd (AS 65000) + qbridge-evpn     zebra + bgpd (AS 65000)       gobgpd + qbridge-evpn
//!        └── ul 192.0.2.1 ──┐                 └── ul 192.0.2.2 ──┐          └── ul 192.0.2.3 ─┐
//!                           └──────── namespace U: kernel bridge ubr ───────────────────────┘
//! ```
//!
//! iBGP full mesh, AS 65000, timers 1/3 s. No flood list and no MAC entry is configured on
//! any VTEP. Checked: B's type-3 route fills A's flood list (`extern_learn` entries in `fdb
//! show -j`); A's learned MAC is a type-2 route in FRR (`show bgp l2vpn evpn route`) and an
//! `extern_learn` entry of B's kernel vxlan device; pings and a verified TCP transfer cross;
//! a MAC moving from A to B is withdrawn by A and advertised by FRR with sequence number 1,
//! and moving back A advertises it with 2 (RFC 7432 §15, FRR's `show evpn mac`); gobgpd
//! restarted (the BGP session with it) keeps the operator's static entries and re-converges;
//! the daemon restarted, the adapter reconnects and re-installs; the adapter restarted, it
//! takes over and changes nothing;
//! a second qbridge VTEP C joins and every VTEP's flood list names the other two.
//!
//! A second test (`evpn_external_port_with_frr`) does the same for an `external` VXLAN port
//! whose VLANs 10 and 20 are VNIs 1000 and 2000, against FRR with one kernel vxlan device per
//! VNI: per-VNI flood lists and type-2 routes, nothing between VLANs, a map removed and added
//! back live.
//!
//! A third (`evpn_follows_the_watch`) checks the adapter's event path against an injector
//! gobgpd; a fourth (`evpn_over_ipv6`) runs EVPN over an IPv6 underlay (IPv6 VTEPs, BGP
//! sessions and next hops) between two qbridge VTEPs and the kernel's VTEP at its defaults —
//! not FRR, which has no IPv6 VTEPs in 8.4 (docs/decisions.md 81).
//!
//! As FRR recommends for EVPN, the bridges do not learn on their VXLAN ports (`learning
//! off`): remote MACs come from routes, so a moved MAC keeps its local entry until the
//! winning route says otherwise.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{exec_in, ip_in, ping, tcp_transfer, Host, Lab};

const VTEP_A: &str = "192.0.2.1";
const VTEP_B: &str = "192.0.2.2";
const VTEP_C: &str = "192.0.2.3";

/// A qbridge VTEP's batch: a bridge, the host's port, a VXLAN port with nothing else.
const QBRIDGE_VTEP: &str = "\
link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local LOCAL dstport 4789 nolearning
link set dev p1 master br0
link set dev vx0 master br0
link set dev vx0 learning off
";

/// The processes the test starts besides the daemons; killed when dropped.
struct Procs {
    children: Vec<(String, Child)>,
    pid_files: Vec<PathBuf>,
}

impl Procs {
    fn spawn(&mut self, name: &str, ns: &str, prog: &str, args: &[&str], log: &Path) {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{prog}: {e}"));
        self.children.push((name.to_string(), child));
    }

    fn kill(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut c) = self.children.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for f in &self.pid_files {
            if let Ok(pid) = std::fs::read_to_string(f) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
}

fn missing_tool(what: &str) -> bool {
    let msg = format!("SKIPPED: {what} is not installed (scripts/test.sh installs it)");
    if std::env::var_os("QBRIDGE_REQUIRE_NETNS").is_some() {
        panic!("{msg}");
    }
    eprintln!("{msg}");
    true
}

/// The adapter, built beside the daemon (`cargo test --workspace` builds it; alone: `cargo
/// build -p qbridge-evpn`), or `$QBRIDGE_EVPN_BIN`.
fn evpn_bin() -> PathBuf {
    std::env::var_os("QBRIDGE_EVPN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::qbridge_bin().with_file_name("qbridge-evpn"))
}

/// gobgpd's router id for a VTEP: its address when IPv4; for the IPv6 VTEPs of
/// `evpn_over_ipv6` (`2001:db8:e6::N`) 192.0.2.N (a router id is 32 bits: BGP's, and the
/// RD of an IPv6 VTEP's routes).
fn router_id(local: &str) -> String {
    if local.contains(':') {
        format!("192.0.2.{}", local.rsplit(':').next().unwrap_or("0"))
    } else {
        local.to_string()
    }
}

fn gobgpd_config(local: &str, peers: &[&str]) -> String {
    let rid = router_id(local);
    let mut s = format!(
        "[global.config]\n  as = 65000\n  router-id = \"{rid}\"\n  \
         local-address-list = [\"{local}\"]\n"
    );
    for p in peers {
        s.push_str(&format!(
            "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{p}\"\n    \
             peer-as = 65000\n  [neighbors.timers.config]\n    connect-retry = 1\n    \
             hold-time = 3\n    keepalive-interval = 1\n  [[neighbors.afi-safis]]\n    \
             [neighbors.afi-safis.config]\n      afi-safi-name = \"l2vpn-evpn\"\n"
        ));
    }
    s
}

fn frr_bgpd_config(log: &Path, peers: &[&str]) -> String {
    let mut s = format!(
        "hostname b\nlog file {}\nrouter bgp 65000\n bgp router-id {VTEP_B}\n \
         no bgp default ipv4-unicast\n timers bgp 1 3\n",
        log.display()
    );
    for p in peers {
        s.push_str(&format!(
            " neighbor {p} remote-as 65000\n neighbor {p} timers connect 1\n \
             neighbor {p} advertisement-interval 0\n"
        ));
    }
    s.push_str(" address-family l2vpn evpn\n");
    for p in peers {
        s.push_str(&format!("  neighbor {p} activate\n"));
    }
    s.push_str("  advertise-all-vni\n exit-address-family\n");
    s
}

/// FRR's zebra and bgpd in `ns` (VTEP B, `advertise-all-vni`, iBGP to `peers`), their files
/// in `LAB/frr`; the directory (vtysh's `--vty_socket`).
fn start_frr(lab: &Lab, procs: &mut Procs, b: &str, peers: &[&str]) -> PathBuf {
    let frr = lab.dir.join("frr");
    std::fs::create_dir_all(&frr).unwrap();
    exec_in(b, "chown", &["frr:frr", frr.to_str().unwrap()]).unwrap();
    std::fs::write(frr.join("zebra.conf"), "hostname b\n").unwrap();
    std::fs::write(
        frr.join("bgpd.conf"),
        frr_bgpd_config(&frr.join("bgpd.log"), peers),
    )
    .unwrap();
    for d in ["zebra", "bgpd"] {
        let f = |x: &str| frr.join(x).to_string_lossy().into_owned();
        procs.pid_files.push(frr.join(format!("{d}.pid")));
        exec_in(
            b,
            &format!("/usr/lib/frr/{d}"),
            &[
                "-d",
                "-f",
                &f(&format!("{d}.conf")),
                "-i",
                &f(&format!("{d}.pid")),
                "-z",
                &f("zserv.api"),
                "--vty_socket",
                &f(""),
                "--log",
                &format!("file:{}", f(&format!("{d}.log"))),
            ],
        )
        .unwrap_or_else(|e| panic!("{d}: {e}"));
        if d == "zebra" {
            assert!(support::wait_until(Duration::from_secs(5), || frr
                .join("zserv.api")
                .exists()));
        }
    }

    frr
}

/// A qbridge VTEP: daemon, gobgpd, adapter, in `ns`, host `hx` on `qa`.
struct Vtep {
    ns: String,
    ctl: support::Ctl,
    host: Host,
}

fn qbridge_vtep(
    lab: &mut Lab,
    procs: &mut Procs,
    ns: &str,
    name: &str,
    local: &str,
    host_ip: &str,
    peers: &[&str],
) -> Vtep {
    let host = lab.host(name, host_ip, ns, "qa").unwrap();
    let ctl = lab
        .daemon(ns, &QBRIDGE_VTEP.replace("LOCAL", local))
        .unwrap();
    let cfg = lab.dir.join(format!("gobgpd-{local}.toml"));
    std::fs::write(&cfg, gobgpd_config(local, peers)).unwrap();
    start_gobgpd(lab, procs, ns, local);
    // The adapter reaches the daemon through a link, re-pointed when the daemon restarts.
    let link = lab.dir.join(format!("evpn-{local}.sock"));
    std::os::unix::fs::symlink(&ctl.socket, &link).unwrap();
    start_evpn(lab, procs, ns, local);
    Vtep {
        ns: ns.to_string(),
        ctl,
        host,
    }
}

/// The adapter of the VTEP at `local`, through the socket link `evpn-LOCAL.sock`.
fn start_evpn(lab: &Lab, procs: &mut Procs, ns: &str, local: &str) {
    start_evpn_every(lab, procs, ns, local, "1000");
}

/// The adapter, its whole passes every `interval_ms`.
fn start_evpn_every(lab: &Lab, procs: &mut Procs, ns: &str, local: &str, interval_ms: &str) {
    let socket = lab.dir.join(format!("evpn-{local}.sock"));
    let bin = evpn_bin();
    procs.spawn(
        &format!("evpn-{local}"),
        ns,
        bin.to_str().unwrap(),
        &[
            "--socket",
            socket.to_str().unwrap(),
            "--interval-ms",
            interval_ms,
        ],
        &lab.dir.join(format!("evpn-{local}.log")),
    );
}

fn start_gobgpd(lab: &Lab, procs: &mut Procs, ns: &str, local: &str) {
    let cfg = lab.dir.join(format!("gobgpd-{local}.toml"));
    procs.spawn(
        &format!("gobgpd-{local}"),
        ns,
        "gobgpd",
        &[
            "-f",
            cfg.to_str().unwrap(),
            "--api-hosts",
            "127.0.0.1:50051",
        ],
        &lab.dir.join(format!("gobgpd-{local}.log")),
    );
}

/// The `extern_learn` flood-list VTEPs of a qbridge VTEP's vx0 (`fdb show -j`).
fn flood_list(ctl: &support::Ctl) -> Vec<String> {
    let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
    let mut v: Vec<String> = j
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["mac"] == "00:00:00:00:00:00"
                && e["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "extern_learn"))
        })
        .filter_map(|e| e["dst"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn vtysh(ns: &str, dir: &Path, cmd: &str) -> String {
    exec_in(
        ns,
        "vtysh",
        &["--vty_socket", dir.to_str().unwrap(), "-c", cmd],
    )
    .unwrap_or_else(|e| e.to_string())
}

/// FRR's line for `mac` in `show evpn mac vni 100` (type, VTEP or port, "local/remote" seq).
fn frr_mac(ns: &str, dir: &Path, mac: &str) -> String {
    vtysh(ns, dir, "show evpn mac vni 100")
        .lines()
        .find(|l| l.starts_with(mac))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn logs(lab: &Lab) -> String {
    let mut s = String::new();
    for f in [
        "evpn-192.0.2.1.log",
        "gobgpd-192.0.2.1.log",
        "evpn-192.0.2.3.log",
    ] {
        let t = std::fs::read_to_string(lab.dir.join(f)).unwrap_or_default();
        let tail: Vec<&str> = t.lines().rev().take(30).collect();
        s.push_str(&format!("----- {f} -----\n"));
        for l in tail.into_iter().rev() {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

#[test]
fn evpn_with_frr_and_gobgpd() {
    skip_unless_netns!();
    let _serial = support::serial();
    for (tool, path) in [("gobgpd", "/usr/bin/gobgpd"), ("frr", "/usr/lib/frr/zebra")] {
        if !Path::new(path).exists() && missing_tool(tool) {
            return;
        }
    }
    assert!(
        evpn_bin().exists(),
        "{} is not built: cargo build -p qbridge-evpn (cargo test --workspace builds it)",
        evpn_bin().display()
    );
    let mut lab = Lab::new("evpn");
    let mut procs = Procs {
        children: Vec::new(),
        pid_files: Vec::new(),
    };
    let u = lab.netns("evu").unwrap();
    let a = lab.netns("eva").unwrap();
    let b = lab.netns("evb").unwrap();
    let c = lab.netns("evc").unwrap();
    ip_in(&u, &["link", "add", "ubr", "type", "bridge"]).unwrap();
    ip_in(&u, &["link", "set", "ubr", "up"]).unwrap();
    for (ns, port, addr) in [(&a, "ua", VTEP_A), (&b, "ub", VTEP_B), (&c, "uc", VTEP_C)] {
        lab.veth(ns, "ul", &u, port).unwrap();
        ip_in(&u, &["link", "set", port, "master", "ubr"]).unwrap();
        ip_in(ns, &["addr", "add", &format!("{addr}/24"), "dev", "ul"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
        ip_in(&u, &["link", "set", port, "mtu", "1550"]).unwrap();
    }

    // B: FRR with a kernel bridge and vxlan device, as an operator runs it.
    let hb = lab.host("hb", "10.30.0.2/24", &b, "kb1").unwrap();
    kernel_vni(&b, VTEP_B, "vx100", "100", "kbr", "kb1");
    let frr = start_frr(&lab, &mut procs, &b, &[VTEP_A, VTEP_C]);

    // A: qbridge, gobgpd, the adapter.
    let mut va = qbridge_vtep(
        &mut lab,
        &mut procs,
        &a,
        "ha",
        VTEP_A,
        "10.30.0.1/24",
        &[VTEP_B, VTEP_C],
    );
    let ha = va.host.clone();

    // B's type-3 route fills A's flood list; nothing else put it there.
    let ok = support::wait_until(Duration::from_secs(30), || flood_list(&va.ctl) == [VTEP_B]);
    assert!(
        ok,
        "A's flood list: {:?}\n{}\n{}",
        flood_list(&va.ctl),
        vtysh(&b, &frr, "show bgp l2vpn evpn summary"),
        logs(&lab)
    );
    let show = va.ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains("00:00:00:00:00:00 dev vx0 dst 192.0.2.2 self extern_learn"),
        "{show}"
    );

    // Pings cross; A learns ha and advertises it: FRR's table and B's kernel FDB have it.
    let r = ping(&ha, &hb.ip, 5);
    assert!(r.received >= 3, "ha -> hb: {}\n{}", r.output, logs(&lab));
    let mac_a = ha.mac.to_lowercase();
    let ok = support::wait_until(Duration::from_secs(10), || {
        let fdb = exec_in(&b, "bridge", &["fdb", "show", "dev", "vx100"]).unwrap_or_default();
        fdb.contains(&format!("{mac_a} dst {VTEP_A} self extern_learn"))
    });
    let routes = vtysh(&b, &frr, "show bgp l2vpn evpn route");
    assert!(
        ok && routes.contains(&format!("[2]:[0]:[48]:[{mac_a}]")),
        "{routes}\n{}\n{}",
        exec_in(&b, "bridge", &["fdb", "show", "dev", "vx100"]).unwrap_or_default(),
        logs(&lab)
    );
    assert!(frr_mac(&b, &frr, &mac_a).contains(&format!("remote {VTEP_A}")));
    // And hb as a type-2 route from FRR: A's vx0 sends to it by unicast.
    let mac_b = hb.mac.to_lowercase();
    assert!(support::wait_until(Duration::from_secs(10), || va
        .ctl
        .cmd(&["fdb", "show", "dev", "vx0"])
        .unwrap_or_default()
        .contains(&format!(
            "{mac_b} dev vx0 dst {VTEP_B} self extern_learn"
        ))));
    let t = tcp_transfer(&ha, &hb, 8 << 20, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", va.ctl.stats_text()));
    assert_eq!(t.bytes, 8 << 20);

    // The operator's static entries, and gobgpd restarted: they stay, the routes return.
    va.ctl
        .cmd(&[
            "fdb",
            "add",
            "02:00:00:00:00:99",
            "dev",
            "vx0",
            "dst",
            "192.0.2.99",
        ])
        .unwrap();
    procs.kill("gobgpd-192.0.2.1");
    // FRR sees the session go (its routes from A withdrawn) before gobgpd is back.
    assert!(support::wait_until(Duration::from_secs(10), || !vtysh(
        &b,
        &frr,
        "show bgp l2vpn evpn route"
    )
    .contains(&format!("[2]:[0]:[48]:[{mac_a}]"))));
    start_gobgpd(&lab, &mut procs, &a, VTEP_A);
    let mut running = String::new();
    let ok = support::wait_until(Duration::from_secs(30), || {
        running = va.ctl.cmd(&["show", "running-config"]).unwrap_or_default();
        flood_list(&va.ctl) == [VTEP_B]
            && vtysh(&b, &frr, "show bgp l2vpn evpn route")
                .contains(&format!("[2]:[0]:[48]:[{mac_a}]"))
            && running.contains("fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 extern_learn\n")
    });
    assert!(ok, "after gobgpd's restart\n{running}\n{}", logs(&lab));
    // The operator's entry stayed through it all.
    assert!(
        running.contains("fdb add 02:00:00:00:00:99 dev vx0 dst 192.0.2.99\n"),
        "{running}"
    );
    let r = ping(&ha, &hb.ip, 3);
    assert!(r.received >= 2, "after the restart: {}", r.output);

    // The daemon restarted (its batch only): the adapter reconnects, re-installs the peers'
    // routes, and re-advertises ha once it is learned again.
    assert!(lab.stop_daemon(0), "daemon A did not stop cleanly");
    va.ctl = lab
        .daemon(&a, &QBRIDGE_VTEP.replace("LOCAL", VTEP_A))
        .unwrap();
    let link = lab.dir.join(format!("evpn-{VTEP_A}.sock"));
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&va.ctl.socket, &link).unwrap();
    let ok = support::wait_until(Duration::from_secs(20), || flood_list(&va.ctl) == [VTEP_B]);
    assert!(
        ok,
        "after the daemon's restart: {:?}\n{}",
        flood_list(&va.ctl),
        logs(&lab)
    );
    let r = ping(&ha, &hb.ip, 3);
    assert!(r.received >= 2, "after the daemon's restart: {}", r.output);
    assert!(support::wait_until(Duration::from_secs(10), || vtysh(
        &b,
        &frr,
        "show bgp l2vpn evpn route"
    )
    .contains(&format!("[2]:[0]:[48]:[{mac_a}]"))));

    // MAC mobility: ha's MAC moves to a host behind B (ha takes another MAC). FRR learns it
    // locally over A's route: sequence number 1; A withdraws and points it at B.
    let moved_ip = "10.30.0.3/24";
    ip_in(
        &ha.ns,
        &["link", "set", "eth0", "address", "02:00:00:00:aa:01"],
    )
    .unwrap();
    let hm = lab.host("hm", moved_ip, &b, "kb2").unwrap();
    ip_in(&hm.ns, &["link", "set", "eth0", "address", &mac_a]).unwrap();
    ip_in(&b, &["link", "set", "kb2", "master", "kbr"]).unwrap();
    let hm = Host {
        mac: mac_a.clone(),
        ..hm
    };
    let _ = ping(&hm, &hb.ip, 2);
    let ok = support::wait_until(Duration::from_secs(10), || {
        frr_mac(&b, &frr, &mac_a).contains("local kb2 1/0")
            && va
                .ctl
                .cmd(&["fdb", "show", "dev", "vx0"])
                .unwrap_or_default()
                .contains(&format!("{mac_a} dev vx0 dst {VTEP_B} self extern_learn"))
    });
    assert!(
        ok,
        "FRR: {}\nA: {}\n{}",
        frr_mac(&b, &frr, &mac_a),
        va.ctl.cmd(&["fdb", "show"]).unwrap_or_default(),
        logs(&lab)
    );
    // A's own route is gone: FRR's only path for the MAC is its own (the withdrawal may
    // still be on its way: FRR lists a path it is removing with status R).
    let mut routes = String::new();
    let gone = support::wait_until(Duration::from_secs(10), || {
        routes = vtysh(&b, &frr, "show bgp l2vpn evpn route");
        routes
            .split(&format!("[{mac_a}]"))
            .skip(1)
            .filter(|s| s.lines().nth(1).is_some_and(|l| l.contains(VTEP_A)))
            .count()
            == 0
    });
    assert!(
        gone,
        "A's path for {mac_a} is still in FRR's table:\n{routes}"
    );
    // ha (its new MAC) reaches the moved host across the tunnel.
    let r = ping(&ha, &hm.ip, 3);
    assert!(r.received >= 2, "ha -> moved host: {}", r.output);

    // And back: the moved host takes another MAC, ha its own again: A advertises it with
    // sequence number 2, which FRR takes over its own 1.
    ip_in(
        &hm.ns,
        &["link", "set", "eth0", "address", "02:00:00:00:bb:01"],
    )
    .unwrap();
    ip_in(&ha.ns, &["link", "set", "eth0", "address", &mac_a]).unwrap();
    let _ = ping(&ha, &hb.ip, 2);
    let ok = support::wait_until(Duration::from_secs(10), || {
        let l = frr_mac(&b, &frr, &mac_a);
        l.contains(&format!("remote {VTEP_A}")) && l.ends_with("/2")
    });
    assert!(ok, "FRR: {}\n{}", frr_mac(&b, &frr, &mac_a), logs(&lab));
    assert!(vtysh(&b, &frr, "show bgp l2vpn evpn route").contains("MM:2"));

    // C joins: every VTEP's flood list has the other two.
    let vc = qbridge_vtep(
        &mut lab,
        &mut procs,
        &c,
        "hc",
        VTEP_C,
        "10.30.0.4/24",
        &[VTEP_A, VTEP_B],
    );
    let ok = support::wait_until(Duration::from_secs(30), || {
        let kb = exec_in(&b, "bridge", &["fdb", "show", "dev", "vx100"]).unwrap_or_default();
        flood_list(&va.ctl) == [VTEP_B, VTEP_C]
            && flood_list(&vc.ctl) == [VTEP_A, VTEP_B]
            && kb.contains(&format!("00:00:00:00:00:00 dst {VTEP_A} self"))
            && kb.contains(&format!("00:00:00:00:00:00 dst {VTEP_C} self"))
    });
    assert!(
        ok,
        "A: {:?} C: {:?}\nB: {}\n{}",
        flood_list(&va.ctl),
        flood_list(&vc.ctl),
        exec_in(&b, "bridge", &["fdb", "show", "dev", "vx100"]).unwrap_or_default(),
        logs(&lab)
    );
    let r = ping(&vc.host, &ha.ip, 3);
    assert!(r.received >= 2, "hc -> ha: {}", r.output);

    // The adapter restarted: it takes over what gobgpd holds and the daemon has, and
    // changes nothing (its log shows no action). First A has converged on hc's route.
    let mac_c = vc.host.mac.to_lowercase();
    assert!(support::wait_until(Duration::from_secs(10), || va
        .ctl
        .cmd(&["fdb", "show", "dev", "vx0"])
        .unwrap_or_default()
        .contains(&format!(
            "{mac_c} dev vx0 dst {VTEP_C} self extern_learn"
        ))));
    std::thread::sleep(Duration::from_secs(1));
    procs.kill("evpn-192.0.2.1");
    let before = std::fs::read_to_string(lab.dir.join("evpn-192.0.2.1.log")).unwrap();
    assert!(
        before.contains("fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3"),
        "{before}"
    );
    start_evpn(&lab, &mut procs, &a, VTEP_A);
    assert!(support::wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(lab.dir.join("evpn-192.0.2.1.log"))
            .unwrap_or_default()
            .contains("connected to gobgpd")
    }));
    std::thread::sleep(Duration::from_secs(2));
    let after = std::fs::read_to_string(lab.dir.join("evpn-192.0.2.1.log")).unwrap();
    assert!(
        !after.contains("advertise") && !after.contains("withdraw") && !after.contains("fdb "),
        "{after}"
    );
    assert_eq!(flood_list(&va.ctl), [VTEP_B, VTEP_C]);
    let r = ping(&vc.host, &hb.ip, 3);
    assert!(r.received >= 2, "hc -> hb: {}", r.output);
    let _ = (&va.ns, &vc.ns);
    drop(procs);
}

/// VTEP A's batch for the external test: VLANs 10 and 20 mapped to VNIs 1000 and 2000 on an
/// `external` port; VLAN 30 crosses vx0 tagged with no VNI.
const QBRIDGE_EXTERNAL: &str = "\
link add br0 type bridge vlan_filtering 1
link add p10 type afpacket dev qa10
link add p20 type afpacket dev qa20
link add p30 type afpacket dev qa30
link add vx0 type vxlan external local 192.0.2.1 dstport 4789 nolearning
link set dev p10 master br0
link set dev p20 master br0
link set dev p30 master br0
link set dev vx0 master br0
link set dev vx0 learning off
vlan add vid 10 dev p10 pvid untagged
vlan add vid 20 dev p20 pvid untagged
vlan add vid 30 dev p30 pvid untagged
vlan del vid 1 dev vx0
vlan add vid 10 dev vx0
vlan add vid 20 dev vx0
vlan add vid 30 dev vx0
vlan add vid 10 dev vx0 tunnel_info id 1000
vlan add vid 20 dev vx0 tunnel_info id 2000
";

/// The `extern_learn` flood-list VTEPs of VNI `vni` on a qbridge VTEP's external vx0.
fn flood_list_vni(ctl: &support::Ctl, vni: u64) -> Vec<String> {
    let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
    let mut v: Vec<String> = j
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["mac"] == "00:00:00:00:00:00"
                && e["vni"].as_u64() == Some(vni)
                && e["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "extern_learn"))
        })
        .filter_map(|e| e["dst"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

/// A kernel VTEP of the traditional model in `ns`: vxlan device `dev` (id `vni`, address
/// `local` (IPv4 or IPv6), `nolearning`, bridge learning off, otherwise at the kernel's
/// defaults) in its own kernel bridge `br` with `port`; no flood list (EVPN fills it).
fn kernel_vni(ns: &str, local: &str, dev: &str, vni: &str, br: &str, port: &str) {
    for args in [
        &["link", "add", br, "type", "bridge"][..],
        &[
            "link",
            "add",
            dev,
            "type",
            "vxlan",
            "id",
            vni,
            "local",
            local,
            "dstport",
            "4789",
            "nolearning",
        ],
        &["link", "set", dev, "master", br],
        &["link", "set", port, "master", br],
        &["link", "set", dev, "up"],
        &["link", "set", br, "up"],
    ] {
        ip_in(ns, args).unwrap();
    }
    exec_in(
        ns,
        "bridge",
        &["link", "set", "dev", dev, "learning", "off"],
    )
    .unwrap();
}

/// An external VXLAN port (VLAN ↔ VNI) through EVPN: qbridge VTEP A maps VLAN 10 → VNI 1000
/// and 20 → 2000 on one `external` port; FRR VTEP B has a kernel vxlan device per VNI, each in
/// its own kernel bridge with a host (`advertise-all-vni` serves both). All hosts share one
/// IP subnet, so a frame crossing between VLANs would show as a ping answered.
///
/// ```text
///  ha10 ─ qa10 (pvid 10) ┐ A: br0 (vlan_filtering 1)   ┌ vx1000 ─ kbr1000 ─ kb10 ─ hb10
///  ha20 ─ qa20 (pvid 20) ┤   vx0 external 10↔1000,     ├ vx2000 ─ kbr2000 ─ kb20 ─ hb20
///  ha30 ─ qa30 (pvid 30) ┘   20↔2000, 30 unmapped      │ B: zebra + bgpd
///                            └── ul 192.0.2.1 ═══ veth ═══ ul 192.0.2.2
/// ```
///
/// Checked: A's flood list of each VNI comes from B's type-3 route of that VNI; A's MACs are
/// type-2 routes of the right VNI in FRR and `extern_learn` entries of the right kernel vxlan
/// device only; B's MACs are installed on vx0 with their VNI and in the bridge with their VLAN;
/// pings cross per VLAN and not between them; VLAN 30's MAC is never advertised.
#[test]
fn evpn_external_port_with_frr() {
    skip_unless_netns!();
    let _serial = support::serial();
    for (tool, path) in [("gobgpd", "/usr/bin/gobgpd"), ("frr", "/usr/lib/frr/zebra")] {
        if !Path::new(path).exists() && missing_tool(tool) {
            return;
        }
    }
    assert!(evpn_bin().exists(), "{} is not built", evpn_bin().display());
    let mut lab = Lab::new("evpnx");
    let mut procs = Procs {
        children: Vec::new(),
        pid_files: Vec::new(),
    };
    let a = lab.netns("exa").unwrap();
    let b = lab.netns("exb").unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    for (ns, addr) in [(&a, VTEP_A), (&b, VTEP_B)] {
        ip_in(ns, &["addr", "add", &format!("{addr}/24"), "dev", "ul"]).unwrap();
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
    }

    // B: FRR with one kernel bridge and vxlan device per VNI.
    let hb10 = lab.host("hb10", "10.40.0.2/24", &b, "kb10").unwrap();
    let hb20 = lab.host("hb20", "10.40.0.4/24", &b, "kb20").unwrap();
    kernel_vni(&b, VTEP_B, "vx1000", "1000", "kbr1000", "kb10");
    kernel_vni(&b, VTEP_B, "vx2000", "2000", "kbr2000", "kb20");
    let frr = start_frr(&lab, &mut procs, &b, &[VTEP_A]);

    // A: qbridge with the external port, gobgpd, the adapter.
    let ha10 = lab.host("ha10", "10.40.0.1/24", &a, "qa10").unwrap();
    let ha20 = lab.host("ha20", "10.40.0.3/24", &a, "qa20").unwrap();
    let ha30 = lab.host("ha30", "10.40.0.5/24", &a, "qa30").unwrap();
    let ctl = lab.daemon(&a, QBRIDGE_EXTERNAL).unwrap();
    std::fs::write(
        lab.dir.join(format!("gobgpd-{VTEP_A}.toml")),
        gobgpd_config(VTEP_A, &[VTEP_B]),
    )
    .unwrap();
    start_gobgpd(&lab, &mut procs, &a, VTEP_A);
    std::os::unix::fs::symlink(&ctl.socket, lab.dir.join(format!("evpn-{VTEP_A}.sock"))).unwrap();
    start_evpn(&lab, &mut procs, &a, VTEP_A);

    // Each VNI's flood list from B's type-3 route of that VNI; nothing else put them there.
    let ok = support::wait_until(Duration::from_secs(30), || {
        flood_list_vni(&ctl, 1000) == [VTEP_B] && flood_list_vni(&ctl, 2000) == [VTEP_B]
    });
    let show = ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
    assert!(
        ok,
        "A's flood lists:\n{show}\n{}\n{}",
        vtysh(&b, &frr, "show bgp l2vpn evpn route"),
        logs(&lab)
    );
    for vni in ["1000", "2000"] {
        assert!(
            show.contains(&format!(
                "00:00:00:00:00:00 dev vx0 dst {VTEP_B} vni {vni} self extern_learn"
            )),
            "{show}"
        );
    }

    // Pings cross per VLAN; then A's MACs are type-2 routes of their own VNI in FRR and
    // entries of the right kernel vxlan device.
    let r = ping(&ha10, &hb10.ip, 5);
    assert!(
        r.received >= 3,
        "ha10 -> hb10: {}\n{}",
        r.output,
        logs(&lab)
    );
    let r = ping(&ha20, &hb20.ip, 5);
    assert!(
        r.received >= 3,
        "ha20 -> hb20: {}\n{}",
        r.output,
        logs(&lab)
    );
    let (m10, m20, m30) = (
        ha10.mac.to_lowercase(),
        ha20.mac.to_lowercase(),
        ha30.mac.to_lowercase(),
    );
    let kfdb = |dev: &str| exec_in(&b, "bridge", &["fdb", "show", "dev", dev]).unwrap_or_default();
    let route = |m: &str| format!("[2]:[0]:[48]:[{m}]");
    let ok = support::wait_until(Duration::from_secs(10), || {
        kfdb("vx1000").contains(&format!("{m10} dst {VTEP_A} self extern_learn"))
            && kfdb("vx2000").contains(&format!("{m20} dst {VTEP_A} self extern_learn"))
    });
    let (r1000, r2000) = (
        vtysh(&b, &frr, "show bgp l2vpn evpn route vni 1000"),
        vtysh(&b, &frr, "show bgp l2vpn evpn route vni 2000"),
    );
    assert!(
        ok && r1000.contains(&route(&m10)) && r2000.contains(&route(&m20)),
        "VNI 1000:\n{r1000}\nVNI 2000:\n{r2000}\nvx1000: {}\nvx2000: {}\n{}",
        kfdb("vx1000"),
        kfdb("vx2000"),
        logs(&lab)
    );
    // Not in the other VNI, in FRR's tables or the kernel's.
    assert!(!r1000.contains(&route(&m20)) && !r2000.contains(&route(&m10)));
    assert!(!kfdb("vx1000").contains(&m20) && !kfdb("vx2000").contains(&m10));
    assert!(frr_mac_vni(&b, &frr, "1000", &m10).contains(&format!("remote {VTEP_A}")));
    assert!(frr_mac_vni(&b, &frr, "2000", &m20).contains(&format!("remote {VTEP_A}")));

    // B's MACs on A: vx0's entry of the VNI, the bridge's entry of the VLAN.
    for (h, vni, vlan) in [(&hb10, 1000, 10), (&hb20, 2000, 20)] {
        let m = h.mac.to_lowercase();
        let ok = support::wait_until(Duration::from_secs(10), || {
            let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
            let has = |f: &dyn Fn(&serde_json::Value) -> bool| {
                j.as_array().into_iter().flatten().any(|e| {
                    e["mac"] == m.as_str()
                        && e["flags"]
                            .as_array()
                            .is_some_and(|f| f.iter().any(|x| x == "extern_learn"))
                        && f(e)
                })
            };
            has(&|e| e["dst"] == VTEP_B && e["vni"] == vni)
                && has(&|e| e["dst"].is_null() && e["vlan"] == vlan)
        });
        assert!(
            ok,
            "{m} (VNI {vni}, VLAN {vlan}) on A:\n{}\n{}",
            ctl.cmd(&["fdb", "show"]).unwrap_or_default(),
            logs(&lab)
        );
    }

    // Nothing between VLANs, and VLAN 30 (no VNI) reaches neither; its MAC is not advertised.
    for (from, to) in [
        (&ha10, &hb20),
        (&ha20, &hb10),
        (&ha30, &hb10),
        (&ha30, &hb20),
    ] {
        let r = ping(from, &to.ip, 2);
        assert_eq!(r.received, 0, "{} -> {}: {}", from.name, to.name, r.output);
    }
    let all = vtysh(&b, &frr, "show bgp l2vpn evpn route");
    assert!(!all.contains(&route(&m30)), "{all}");
    assert!(!kfdb("vx1000").contains(&m30) && !kfdb("vx2000").contains(&m30));
    // Both VLANs still cross after all that.
    let r = ping(&ha10, &hb10.ip, 2);
    assert!(r.received >= 1, "ha10 -> hb10: {}", r.output);
    let r = ping(&ha20, &hb20.ip, 2);
    assert!(r.received >= 1, "ha20 -> hb20: {}", r.output);

    // VLAN 20's map removed live: the domain goes — VNI 2000's routes withdrawn (B's kernel
    // flood list and FDB lose A), its entries on A deleted; VNI 1000 is untouched. Mapped
    // again, it comes back.
    ctl.cmd(&["vlan", "del", "vid", "20", "dev", "vx0", "tunnel_info"])
        .unwrap();
    let gone = || {
        let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
        let a_clean = !j.as_array().into_iter().flatten().any(|e| {
            (e["vni"] == 2000 || e["vlan"] == 20)
                && e["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "extern_learn"))
        });
        a_clean && !kfdb("vx2000").contains(VTEP_A) && flood_list_vni(&ctl, 1000) == [VTEP_B]
    };
    assert!(
        support::wait_until(Duration::from_secs(10), gone),
        "after vlan del … tunnel_info:\nA: {}\nvx2000: {}\n{}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap_or_default(),
        kfdb("vx2000"),
        logs(&lab)
    );
    assert!(!vtysh(&b, &frr, "show bgp l2vpn evpn route vni 2000").contains(&route(&m20)));
    assert!(kfdb("vx1000").contains(&format!("{m10} dst {VTEP_A} self extern_learn")));
    ctl.cmd(&[
        "vlan",
        "add",
        "vid",
        "20",
        "dev",
        "vx0",
        "tunnel_info",
        "id",
        "2000",
    ])
    .unwrap();
    assert!(
        support::wait_until(Duration::from_secs(10), || flood_list_vni(&ctl, 2000)
            == [VTEP_B]
            && kfdb("vx2000").contains(&format!("00:00:00:00:00:00 dst {VTEP_A} self"))),
        "after vlan add … tunnel_info:\nA: {}\nvx2000: {}\n{}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap_or_default(),
        kfdb("vx2000"),
        logs(&lab)
    );
    let r = ping(&ha20, &hb20.ip, 3);
    assert!(r.received >= 2, "ha20 -> hb20 mapped again: {}", r.output);
    drop(procs);
}

/// FRR's line for `mac` in `show evpn mac vni VNI`.
fn frr_mac_vni(ns: &str, dir: &Path, vni: &str, mac: &str) -> String {
    vtysh(ns, dir, &format!("show evpn mac vni {vni}"))
        .lines()
        .find(|l| l.starts_with(mac))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The remote MACs of A's vx0 (`extern_learn` entries with a VTEP), sorted: (MAC, VTEP).
fn remote_macs(ctl: &support::Ctl) -> Vec<(String, String)> {
    let j = ctl.json(&["fdb", "show", "dev", "vx0"]).unwrap_or_default();
    let mut v: Vec<(String, String)> = j
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["mac"] != "00:00:00:00:00:00"
                && e["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "extern_learn"))
        })
        .filter_map(|e| Some((e["mac"].as_str()?.into(), e["dst"].as_str()?.into())))
        .collect();
    v.sort();
    v
}

/// The adapter follows gobgpd's watch (docs/decisions.md 76): with its whole passes a
/// minute apart, a burst of 1000 type-2 routes from 50 VTEPs (injected through an injector
/// gobgpd's API by qbridge-evpn-bench) leaves A's FDB equal to the routes, MAC for MAC; a
/// route withdrawn and added again through the injector's API (gobgp CLI) is removed and
/// installed again within a bounded time, the other entries untouched, with no whole pass
/// (the adapter logs each).
#[test]
fn evpn_follows_the_watch() {
    skip_unless_netns!();
    let _serial = support::serial();
    if !Path::new("/usr/bin/gobgpd").exists() && missing_tool("gobgpd") {
        return;
    }
    let bench = evpn_bin().with_file_name("qbridge-evpn-bench");
    assert!(
        evpn_bin().exists() && bench.exists(),
        "qbridge-evpn is not built: cargo build -p qbridge-evpn"
    );
    let mut lab = Lab::new("evpnw");
    let mut procs = Procs {
        children: Vec::new(),
        pid_files: Vec::new(),
    };
    let u = lab.netns("ewu").unwrap();
    let a = lab.netns("ewa").unwrap();
    let i = lab.netns("ewi").unwrap();
    const INJ: &str = "192.0.2.100";
    ip_in(&u, &["link", "add", "ubr", "type", "bridge"]).unwrap();
    ip_in(&u, &["link", "set", "ubr", "up"]).unwrap();
    for (ns, port, addr) in [(&a, "ua", VTEP_A), (&i, "ui", INJ)] {
        lab.veth(ns, "ul", &u, port).unwrap();
        ip_in(&u, &["link", "set", port, "master", "ubr"]).unwrap();
        ip_in(ns, &["addr", "add", &format!("{addr}/24"), "dev", "ul"]).unwrap();
    }
    std::fs::write(
        lab.dir.join(format!("gobgpd-{INJ}.toml")),
        gobgpd_config(INJ, &[VTEP_A]),
    )
    .unwrap();
    start_gobgpd(&lab, &mut procs, &i, INJ);
    let host = lab.host("ha", "10.31.0.1/24", &a, "qa").unwrap();
    let _ = host;
    let ctl = lab
        .daemon(&a, &QBRIDGE_VTEP.replace("LOCAL", VTEP_A))
        .unwrap();
    std::fs::write(
        lab.dir.join(format!("gobgpd-{VTEP_A}.toml")),
        gobgpd_config(VTEP_A, &[INJ]),
    )
    .unwrap();
    start_gobgpd(&lab, &mut procs, &a, VTEP_A);
    std::os::unix::fs::symlink(&ctl.socket, lab.dir.join(format!("evpn-{VTEP_A}.sock"))).unwrap();
    start_evpn_every(&lab, &mut procs, &a, VTEP_A, "600000");
    let log = lab.dir.join(format!("evpn-{VTEP_A}.log"));
    let wholes = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("whole pass")
            .count()
    };
    let up = support::wait_until(Duration::from_secs(30), || {
        exec_in(&i, "gobgp", &["neighbor"])
            .unwrap_or_default()
            .contains("Establ")
    });
    assert!(up, "the session did not come up\n{}", logs(&lab));
    // The adapter watches (its whole pass after gobgpd's watch started).
    let ok = support::wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("gobgpd's watch started")
    });
    assert!(ok, "{}", logs(&lab));

    // A burst: 1000 routes from 50 VTEPs, installed.
    let out = exec_in(
        &i,
        bench.to_str().unwrap(),
        &[
            "--inject",
            "127.0.0.1:50051",
            "--routes",
            "1000",
            "--vteps",
            "50",
            "--socket",
            ctl.socket.to_str().unwrap(),
            "--timeout-s",
            "40",
            "--withdraw",
            "no",
        ],
    )
    .unwrap();
    assert!(!out.contains("INCOMPLETE"), "{out}\n{}", logs(&lab));
    let want: Vec<(String, String)> = {
        let mut v: Vec<_> = (0u32..1000)
            .map(|n| {
                let b = n.to_be_bytes();
                (
                    format!("02:be:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3]),
                    format!("10.100.0.{}", 1 + n % 50),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(remote_macs(&ctl), want, "{}", logs(&lab));
    let flood: Vec<String> = {
        let mut v: Vec<_> = (1..=50).map(|n| format!("10.100.0.{n}")).collect();
        v.sort();
        v
    };
    assert_eq!(flood_list(&ctl), flood);
    let whole_before = wholes();

    // One route withdrawn, then added again, through the API.
    let mac = "02:cc:00:00:00:01";
    let route = [
        "global",
        "rib",
        "-a",
        "evpn",
        "add",
        "macadv",
        mac,
        "0.0.0.0",
        "etag",
        "0",
        "label",
        "100",
        "rd",
        "10.100.0.7:100",
        "rt",
        "65000:100",
        "encap",
        "vxlan",
        "nexthop",
        "10.100.0.7",
    ];
    let has = |ctl: &support::Ctl| {
        remote_macs(ctl)
            .iter()
            .any(|(m, d)| m == mac && d == "10.100.0.7")
    };
    for round in 0..2 {
        exec_in(&i, "gobgp", &route).unwrap();
        let ok = support::wait_until(Duration::from_secs(10), || has(&ctl));
        assert!(ok, "round {round}: {mac} not installed\n{}", logs(&lab));
        let mut del = route;
        del[4] = "del";
        exec_in(&i, "gobgp", &del).unwrap();
        let ok = support::wait_until(Duration::from_secs(10), || !has(&ctl));
        assert!(ok, "round {round}: {mac} not removed\n{}", logs(&lab));
        // Exactly it went: the burst's entries are all there.
        assert_eq!(remote_macs(&ctl), want, "{}", logs(&lab));
    }
    exec_in(&i, "gobgp", &route).unwrap();
    assert!(support::wait_until(Duration::from_secs(10), || has(&ctl)));
    assert_eq!(
        wholes(),
        whole_before,
        "a whole pass ran: the watch path did not do it\n{}",
        logs(&lab)
    );
    procs.kill(&format!("evpn-{VTEP_A}"));
}

const VTEP6_A: &str = "2001:db8:e6::1";
const VTEP6_B: &str = "2001:db8:e6::2";
const VTEP6_C: &str = "2001:db8:e6::3";

/// The last lines of the adapters' and gobgpds' logs of the VTEPs at `locals`.
fn logs_of(lab: &Lab, locals: &[&str]) -> String {
    let mut s = String::new();
    for l in locals {
        for f in [format!("evpn-{l}.log"), format!("gobgpd-{l}.log")] {
            let t = std::fs::read_to_string(lab.dir.join(&f)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(30).collect();
            s.push_str(&format!("----- {f} -----\n"));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
    }
    s
}

/// `gobgp ARGS` against the gobgpd of namespace `ns`.
fn gobgp(ns: &str, args: &[&str]) -> String {
    exec_in(ns, "gobgp", args).unwrap_or_else(|e| e.to_string())
}

/// EVPN over an IPv6 underlay (docs/evpn.md, docs/decisions.md 81): every VTEP address, BGP
/// session and next hop is IPv6; the overlay is IPv4 hosts.
///
/// ```text
///  ha ─ qa ┐                        ┌ kb1 ─ hb              hc ─ qa ┐
///   A: daemon br0: p1, vx0          B: kernel kbr: kb1, vx100      C: daemon br0: p1, vx0
///      vx0 id 100 local …::1           vx100 id 100 local …::2        vx0 id 100 local …::3
///      gobgpd + qbridge-evpn           (kernel defaults) + gobgpd      gobgpd + qbridge-evpn
///        └── ul 2001:db8:e6::1 ──┐       └── ul …::2 ──┐                └── ul …::3 ──┐
///                                └──────────── namespace U: kernel bridge ubr ─────────┘
/// ```
///
/// FRR 8.4 (Debian 12's) cannot be B here: its zebra reads no IPv6 `local` of a kernel vxlan
/// device (`show evpn vni`: "Local VTEP IP: 0.0.0.0"; bgpd then originates for its IPv4
/// router id), and its bgpd answers a type-3 route whose PMSI tunnel endpoint is IPv6 (21
/// bytes) with a NOTIFICATION (update, attribute length error), so the session with an IPv6
/// VTEP never stays up (FRR has IPv6 VTEPs from 10.6). B is therefore the kernel's VTEP at its
/// defaults with a gobgpd speaking for it: its routes are added through gobgpd's API (`gobgp
/// global rib add`), and its kernel FDB is written from the routes it received, as zebra
/// would. It also sends what FRR 8.4 would: a type-3 route for its IPv4 router id.
///
/// Checked: the BGP sessions over IPv6 come up; each qbridge VTEP's flood list is the other
/// two VTEPs' IPv6 addresses, from their type-3 routes (originator and PMSI endpoint 128
/// bits); the IPv4 VTEP's route is ignored (logged, nothing refused); learned MACs are type-2
/// routes with IPv6 next hops both ways and `fdb … dst <v6>` entries; pings and verified TCP
/// transfers cross between the qbridge VTEPs and to the kernel VTEP (no checksum option set
/// anywhere: the kernel computes and checks UDP checksums over IPv6, so does qbridge); a MAC
/// moving from A to C and back carries sequence numbers 1 and 2 (RFC 7432 §15).
#[test]
fn evpn_over_ipv6() {
    skip_unless_netns!();
    let _serial = support::serial();
    if !Path::new("/usr/bin/gobgpd").exists() && missing_tool("gobgpd") {
        return;
    }
    assert!(evpn_bin().exists(), "{} is not built", evpn_bin().display());
    let mut lab = Lab::new("evpn6");
    let mut procs = Procs {
        children: Vec::new(),
        pid_files: Vec::new(),
    };
    let u = lab.netns("e6u").unwrap();
    let a = lab.netns("e6a").unwrap();
    let b = lab.netns("e6b").unwrap();
    let c = lab.netns("e6c").unwrap();
    ip_in(&u, &["link", "add", "ubr", "type", "bridge"]).unwrap();
    ip_in(&u, &["link", "set", "ubr", "up"]).unwrap();
    for (ns, port, addr) in [
        (&a, "ua", VTEP6_A),
        (&b, "ub", VTEP6_B),
        (&c, "uc", VTEP6_C),
    ] {
        lab.veth(ns, "ul", &u, port).unwrap();
        ip_in(&u, &["link", "set", port, "master", "ubr"]).unwrap();
        // The lab turns IPv6 off on its devices; the underlay needs it.
        exec_in(ns, "sysctl", &["-qw", "net.ipv6.conf.ul.disable_ipv6=0"]).unwrap();
        ip_in(
            ns,
            &[
                "-6",
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                "ul",
                "nodad",
            ],
        )
        .unwrap();
        // 70 bytes of outer headers over IPv6 on top of a 1500-byte inner MTU.
        ip_in(ns, &["link", "set", "ul", "mtu", "1570"]).unwrap();
        ip_in(&u, &["link", "set", port, "mtu", "1570"]).unwrap();
    }

    // B: a kernel bridge and vxlan device whose `local` is IPv6, at the kernel's defaults,
    // and a gobgpd speaking for it.
    let hb = lab.host("hb", "10.50.0.2/24", &b, "kb1").unwrap();
    kernel_vni(&b, VTEP6_B, "vx100", "100", "kbr", "kb1");
    std::fs::write(
        lab.dir.join(format!("gobgpd-{VTEP6_B}.toml")),
        gobgpd_config(VTEP6_B, &[VTEP6_A, VTEP6_C]),
    )
    .unwrap();
    start_gobgpd(&lab, &mut procs, &b, VTEP6_B);

    // A and C: qbridge, gobgpd, the adapter.
    let va = qbridge_vtep(
        &mut lab,
        &mut procs,
        &a,
        "ha",
        VTEP6_A,
        "10.50.0.1/24",
        &[VTEP6_B, VTEP6_C],
    );
    let vc = qbridge_vtep(
        &mut lab,
        &mut procs,
        &c,
        "hc",
        VTEP6_C,
        "10.50.0.3/24",
        &[VTEP6_A, VTEP6_B],
    );
    let (ha, hc) = (va.host.clone(), vc.host.clone());
    let all = [VTEP6_A, VTEP6_C, VTEP6_B];
    let (mac_a, mac_b) = (ha.mac.to_lowercase(), hb.mac.to_lowercase());

    // B's routes through its speaker's API: type 3 and hb's type 2, next hop and PMSI
    // endpoint B's IPv6 VTEP; and a type-3 route for its IPv4 router id, as FRR 8.4 sends.
    let ok = support::wait_until(Duration::from_secs(10), || {
        exec_in(&b, "gobgp", &["global"]).is_ok()
    });
    assert!(ok, "B's gobgpd: {}", logs_of(&lab, &all));
    for route in [
        &[
            "multicast",
            VTEP6_B,
            "etag",
            "0",
            "rd",
            "192.0.2.2:100",
            "rt",
            "65000:100",
            "encap",
            "vxlan",
            "pmsi",
            "ingress-repl",
            "100",
            VTEP6_B,
            "nexthop",
            VTEP6_B,
        ][..],
        &[
            "macadv",
            &mac_b,
            "0.0.0.0",
            "etag",
            "0",
            "label",
            "100",
            "rd",
            "192.0.2.2:100",
            "rt",
            "65000:100",
            "encap",
            "vxlan",
            "nexthop",
            VTEP6_B,
        ],
        &[
            "multicast",
            "192.0.2.2",
            "etag",
            "0",
            "rd",
            "192.0.2.2:2",
            "rt",
            "65000:100",
            "encap",
            "vxlan",
            "pmsi",
            "ingress-repl",
            "100",
            "192.0.2.2",
            "nexthop",
            "192.0.2.2",
        ],
    ] {
        let mut args = vec!["global", "rib", "-a", "evpn", "add"];
        args.extend_from_slice(route);
        exec_in(&b, "gobgp", &args).unwrap();
    }

    // The BGP sessions over IPv6 come up, and each qbridge VTEP's flood list is the other
    // two VTEPs' IPv6 addresses, from their type-3 routes.
    let ok = support::wait_until(Duration::from_secs(30), || {
        flood_list(&va.ctl) == [VTEP6_B, VTEP6_C] && flood_list(&vc.ctl) == [VTEP6_A, VTEP6_B]
    });
    assert!(
        ok,
        "A: {:?} C: {:?}\n{}\n{}\n{}",
        flood_list(&va.ctl),
        flood_list(&vc.ctl),
        gobgp(&a, &["neighbor"]),
        gobgp(&a, &["global", "rib", "-a", "evpn"]),
        logs_of(&lab, &all)
    );
    let neighbors = gobgp(&a, &["neighbor"]);
    for peer in [VTEP6_B, VTEP6_C] {
        assert!(
            neighbors
                .lines()
                .any(|l| l.starts_with(peer) && l.contains("Establ")),
            "{neighbors}"
        );
    }
    let show = va.ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap();
    assert!(
        show.contains(&format!(
            "00:00:00:00:00:00 dev vx0 dst {VTEP6_B} self extern_learn"
        )) && show.contains(&format!("{mac_b} dev vx0 dst {VTEP6_B} self extern_learn")),
        "{show}\n{}",
        logs_of(&lab, &all)
    );
    // B's route for its IPv4 router id is ignored, and said so; nothing was refused.
    let log_a = std::fs::read_to_string(lab.dir.join(format!("evpn-{VTEP6_A}.log"))).unwrap();
    assert!(
        log_a.contains(&format!(
            "ignored type-3 rd 192.0.2.2:2 origin 192.0.2.2 on vx0 (vni 100): VTEP 192.0.2.2 \
             is IPv4, the port's local {VTEP6_A} is IPv6"
        )),
        "{log_a}"
    );
    assert!(
        !log_a.contains("192.0.2.2 extern_learn") && !log_a.contains("refused"),
        "{log_a}"
    );
    // A's own type-3 route as the others receive it: originator, next hop and PMSI
    // endpoint its IPv6 address; the RD its router id's.
    let rib_b = gobgp(&b, &["global", "rib", "-a", "evpn"]);
    assert!(
        rib_b.lines().any(|l| l.contains(&format!(
            "[type:multicast][rd:192.0.2.1:100][etag:0][ip:{VTEP6_A}]"
        )) && l.contains(&format!("tunnel-id: {VTEP6_A}"))
            && l.split_whitespace().nth(2) == Some(VTEP6_A)),
        "{rib_b}"
    );

    // Pings between the qbridge VTEPs: each learns its host and advertises it with its IPv6
    // next hop; the other installs it.
    let r = ping(&ha, &hc.ip, 5);
    assert!(
        r.received >= 3,
        "ha -> hc: {}\n{}",
        r.output,
        logs_of(&lab, &all)
    );
    let mac_c = hc.mac.to_lowercase();
    let ok = support::wait_until(Duration::from_secs(10), || {
        let fa = va
            .ctl
            .cmd(&["fdb", "show", "dev", "vx0"])
            .unwrap_or_default();
        let fc = vc
            .ctl
            .cmd(&["fdb", "show", "dev", "vx0"])
            .unwrap_or_default();
        fa.contains(&format!("{mac_c} dev vx0 dst {VTEP6_C} self extern_learn"))
            && fc.contains(&format!("{mac_a} dev vx0 dst {VTEP6_A} self extern_learn"))
    });
    assert!(ok, "{}", logs_of(&lab, &all));
    let t = tcp_transfer(&ha, &hc, 8 << 20, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("TCP ha -> hc: {e}\n{}", va.ctl.stats_text()));
    assert_eq!(t.bytes, 8 << 20);

    // B received A's routes with IPv6 next hops; its kernel device gets from them what
    // zebra would install (flood list and ha's MAC).
    let rib_b = gobgp(&b, &["global", "rib", "-a", "evpn"]);
    assert!(
        rib_b.lines().any(|l| l.contains(&format!("[mac:{mac_a}]"))
            && l.contains("[rd:192.0.2.1:100]")
            && l.contains(VTEP6_A)),
        "{rib_b}"
    );
    for args in [
        &[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "vx100",
            "dst",
            VTEP6_A,
        ][..],
        &[
            "fdb",
            "append",
            "00:00:00:00:00:00",
            "dev",
            "vx100",
            "dst",
            VTEP6_C,
        ],
        &["fdb", "add", &mac_a, "dev", "vx100", "dst", VTEP6_A],
    ] {
        exec_in(&b, "bridge", args).unwrap();
    }
    let r = ping(&ha, &hb.ip, 5);
    assert!(
        r.received >= 3,
        "ha -> hb (kernel VTEP): {}\n{}",
        r.output,
        logs_of(&lab, &all)
    );
    let t = tcp_transfer(&ha, &hb, 8 << 20, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", va.ctl.stats_text()));
    assert_eq!(t.bytes, 8 << 20);
    let r = ping(&hc, &hb.ip, 3);
    assert!(r.received >= 2, "hc -> hb: {}", r.output);

    // MAC mobility: ha's MAC moves behind C (hc takes it, ha another): C advertises it with
    // sequence number 1, A withdraws its route and points the MAC at C.
    ip_in(
        &ha.ns,
        &["link", "set", "eth0", "address", "02:00:00:00:e6:01"],
    )
    .unwrap();
    ip_in(&hc.ns, &["link", "set", "eth0", "address", &mac_a]).unwrap();
    let (ha2, hc2) = (
        Host {
            mac: "02:00:00:00:e6:01".into(),
            ..ha.clone()
        },
        Host {
            mac: mac_a.clone(),
            ..hc.clone()
        },
    );
    let _ = ping(&hc2, &ha2.ip, 2);
    let ok = support::wait_until(Duration::from_secs(10), || {
        va.ctl
            .cmd(&["fdb", "show", "dev", "vx0"])
            .unwrap_or_default()
            .contains(&format!("{mac_a} dev vx0 dst {VTEP6_C} self extern_learn"))
    });
    let log_c = std::fs::read_to_string(lab.dir.join(format!("evpn-{VTEP6_C}.log"))).unwrap();
    assert!(
        ok && log_c.contains(&format!(
            "advertise type-2 rd 192.0.2.3:100 mac {mac_a} vni 100 next-hop {VTEP6_C} rt \
             65000:100 encap vxlan mac-mobility seq 1"
        )),
        "A: {}\n{}",
        va.ctl.cmd(&["fdb", "show"]).unwrap_or_default(),
        logs_of(&lab, &all)
    );
    let r = ping(&hc2, &ha2.ip, 3);
    assert!(r.received >= 2, "moved hc -> ha: {}", r.output);

    // And back: A advertises it with sequence number 2, which C takes.
    ip_in(
        &hc.ns,
        &["link", "set", "eth0", "address", "02:00:00:00:e6:03"],
    )
    .unwrap();
    ip_in(&ha.ns, &["link", "set", "eth0", "address", &mac_a]).unwrap();
    let _ = ping(&ha, &hc.ip, 2);
    let ok = support::wait_until(Duration::from_secs(10), || {
        vc.ctl
            .cmd(&["fdb", "show", "dev", "vx0"])
            .unwrap_or_default()
            .contains(&format!("{mac_a} dev vx0 dst {VTEP6_A} self extern_learn"))
    });
    let log_a = std::fs::read_to_string(lab.dir.join(format!("evpn-{VTEP6_A}.log"))).unwrap();
    assert!(
        ok && log_a.contains(&format!(
            "advertise type-2 rd 192.0.2.1:100 mac {mac_a} vni 100 next-hop {VTEP6_A} rt \
             65000:100 encap vxlan mac-mobility seq 2"
        )),
        "C: {}\n{}",
        vc.ctl.cmd(&["fdb", "show"]).unwrap_or_default(),
        logs_of(&lab, &all)
    );
    let r = ping(&ha, &hc.ip, 3);
    assert!(
        r.received >= 2,
        "ha -> hc after the move back: {}",
        r.output
    );
    drop(procs);
}
