//! The daemon without full root (root only, to set it up): user `nobody` with exactly
//! `CAP_NET_RAW` and `CAP_NET_ADMIN` — the capabilities the shipped systemd unit gives
//! (`dist/qbridge.service`, `docs/operating.md`) — runs AF_PACKET ports and a TAP, and hosts
//! ping each other through it. Without `CAP_NET_RAW` it does not start, and says which
//! capability is missing.
//!
//! ```text
//!   h1 (10.9.0.1) ─ s1 ┐                 ┌ s2 ─ h2 (10.9.0.2)
//!                      qbridge as nobody: p1, p2, tap t1 (br0)
//! ```

mod support;

use std::os::unix::fs::PermissionsExt;
use support::{assert_ping, ip_in, Lab};

const BATCH: &str = "\
link add br0 type bridge
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link add t1 type tap ifname qbcap0
link set dev p1 master br0
link set dev p2 master br0
link set dev t1 master br0
";

/// `env QBRIDGE_LOCK_DIR=… setpriv` as `nobody` with capabilities `caps` (`+net_raw,…`) only.
/// `tun_0666`: first give the daemon's mount namespace (`ip netns exec` makes a private one) a
/// `/dev/net/tun` of mode 0666, as most distributions ship it (containers often have 0600).
fn as_nobody(lock_dir: &str, caps: &str, tun_0666: bool) -> Vec<String> {
    let mut w: Vec<String> = Vec::new();
    if tun_0666 {
        let node = format!("{lock_dir}/tun");
        w.extend([
            "sh".into(),
            "-c".into(),
            format!(
                "rm -f {node} && mknod -m 0666 {node} c 10 200 && mount --bind {node} \
                 /dev/net/tun && exec \"$@\""
            ),
            "sh".into(),
        ]);
    }
    w.extend([
        "env".to_string(),
        format!("QBRIDGE_LOCK_DIR={lock_dir}"),
        "setpriv".into(),
        "--reuid=nobody".into(),
        "--regid=nogroup".into(),
        "--clear-groups".into(),
        format!("--inh-caps=-all,{caps}"),
        format!("--ambient-caps=-all,{caps}"),
        format!("--bounding-set=-all,{caps}"),
    ]);
    w
}

#[test]
fn the_daemon_runs_with_net_raw_and_net_admin_only() {
    skip_unless_netns!();
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("setpriv (util-linux) is needed for this test");
    }
    let mut lab = Lab::new("caps");
    // The daemon's user must be able to create its socket and lock files.
    let nobody = |p: &std::path::Path| {
        std::process::Command::new("chown")
            .args(["nobody:nogroup", &p.to_string_lossy()])
            .status()
            .unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    nobody(&lab.dir);
    let locks = lab.dir.join("locks");
    std::fs::create_dir_all(&locks).unwrap();
    nobody(&locks);
    let locks = locks.to_string_lossy().into_owned();

    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.9.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.9.0.2/24", &sw, "s2").unwrap();

    // Without CAP_NET_RAW: no AF_PACKET socket, and the message says why.
    let wrapper = as_nobody(&locks, "+net_admin", true);
    let w: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let e = lab.daemon_wrapped(&sw, &w, BATCH, &[]).unwrap_err();
    assert!(
        e.contains("port p1: socket(AF_PACKET)")
            && e.contains(
                " on s1: Operation not permitted (os error 1) (needs CAP_NET_RAW; see \
                           docs/operating.md)"
            ),
        "{e}"
    );

    // A /dev/net/tun only root may open (as in many containers): the TAP port says so.
    let tun_mode = std::fs::metadata("/dev/net/tun")
        .unwrap()
        .permissions()
        .mode();
    if tun_mode & 0o006 != 0o006 {
        let wrapper = as_nobody(&locks, "+net_raw,+net_admin", false);
        let w: Vec<&str> = wrapper.iter().map(String::as_str).collect();
        let e = lab.daemon_wrapped(&sw, &w, BATCH, &[]).unwrap_err();
        assert!(
            e.contains(
                "port t1: /dev/net/tun: Permission denied (os error 13): TAP ports need \
                        read and write access to /dev/net/tun (mode 0666 on most \
                        distributions) and CAP_NET_ADMIN; see docs/operating.md"
            ),
            "{e}"
        );
    }

    // With CAP_NET_RAW and CAP_NET_ADMIN: it runs, forwards, creates its TAP.
    let wrapper = as_nobody(&locks, "+net_raw,+net_admin", true);
    let w: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let ctl = lab.daemon_wrapped(&sw, &w, BATCH, &[]).unwrap();
    assert_ping(&h1, &h2, 10);
    ip_in(&sw, &["link", "show", "qbcap0"]).unwrap();
    // The daemon process runs as nobody with those two capabilities and no others.
    let links = ctl.json(&["link", "show"]).unwrap();
    assert_eq!(links.as_array().unwrap().len(), 4, "{links}");
    let status = daemon_status(&sw);
    assert!(
        status.contains("Uid:\t65534\t65534\t65534\t65534"),
        "{status}"
    );
    assert!(status.contains("CapEff:\t0000000000003000"), "{status}");
    // Its interface locks are in the directory it was given.
    let held: Vec<String> = std::fs::read_dir(&locks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(held.iter().any(|n| n.ends_with("-s1.lock")), "{held:?}");
    // The last one started is the one that runs.
    assert!(
        lab.stop_daemon(lab.daemons() - 1),
        "the daemon did not exit cleanly"
    );
}

/// `/proc/PID/status` of the qbridge daemon running in namespace `ns`.
fn daemon_status(ns: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "qbridge" {
            return std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        }
    }
    String::new()
}
