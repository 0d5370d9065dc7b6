//! Bonds in the eBPF fast path (issue 31 item 2, decision 74), on real namespaces (root
//! only): two qbridge daemons, each with an 802.3ad bond of two members over the same two
//! veth pairs, both with `--fast-path on`.
//!
//! ```text
//!  A (10.9.4.1)      Q1: qbridge                                Q2: qbridge      B (10.9.4.2)
//!  eth0 ══ ha ─ br0 ─ bo (802.3ad, layer3+4) ─ m1 ══ n1 ─ bo (…) ─ br0 ─ hb ══ eth0
//!                                            └ m2 ══ n2 ┘
//! ```
//!
//! LACP reaches collecting+distributing on both ends (the LACPDUs pass the program to the
//! members' sockets); four verified TCP streams from A's kernel socket to B's go through the
//! program on both daemons: `show fast-path` lists the bonds among its ports, with flows and
//! hits, and the pipeline forwarded only the flows' first frames. Then, with four streams
//! running, one member link is pulled (`ip link set m1 down`): the daemons take it out of their
//! tables within `miimon`, the program sends to the other member, and every connection
//! completes with every byte. The link comes back and rejoins.

mod support;

use std::time::{Duration, Instant};

use support::{wait_until, Lab};

fn batch(host_port: &str, m1: &str, m2: &str) -> String {
    format!(
        "link add br0 type bridge
link add {host_port} type afpacket dev {host_port}
link set dev {host_port} master br0
link add bo type bond mode 802.3ad lacp_rate fast xmit_hash_policy layer3+4 miimon 20
link add {m1} type afpacket dev {m1}
link add {m2} type afpacket dev {m2}
link set dev {m1} master bo
link set dev {m2} master bo
link set dev bo master br0
"
    )
}

/// The bond's members as `link show -j` shows them: (name, collecting, distributing).
fn members(ctl: &support::Ctl) -> Vec<(String, bool, bool)> {
    let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap_or_default();
    v[0]["bond"]["members"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_string(),
                        m["collecting"] == "On",
                        m["distributing"] == "On",
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn all_distributing(ctl: &support::Ctl) -> bool {
    let ms = members(ctl);
    ms.len() == 2 && ms.iter().all(|(_, c, d)| *c && *d)
}

/// A kernel counter of `dev` in `ns` (`/sys/class/net/DEV/statistics/WHAT`).
fn counter(ns: &str, dev: &str, what: &str) -> u64 {
    support::exec_in(
        ns,
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/{what}")],
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// Frames qbridge sent on bond member `member` (`link show -j`: the program's and the
/// pipeline's).
fn member_tx_frames(ctl: &support::Ctl, member: &str) -> u64 {
    let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap_or_default();
    v[0]["runtime"]["bond_members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == member))
        .map_or(0, |m| u(&m["tx_frames"]))
}

/// Frames qbridge received on bond member `member` (`link show -j`).
fn member_rx_frames(ctl: &support::Ctl, member: &str) -> u64 {
    let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap_or_default();
    v[0]["runtime"]["bond_members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == member))
        .map_or(0, |m| u(&m["rx_frames"]))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[test]
fn bonds_in_the_fast_path_carry_tcp_and_survive_a_pulled_member() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qbb-bond-fp");
    let q1 = lab.netns("qbf1").unwrap();
    let q2 = lab.netns("qbf2").unwrap();
    let a = lab.host("qbfa", "10.9.4.1/24", &q1, "ha").unwrap();
    let b = lab.host("qbfb", "10.9.4.2/24", &q2, "hb").unwrap();
    lab.veth(&q1, "m1", &q2, "n1").unwrap();
    lab.veth(&q1, "m2", &q2, "n2").unwrap();
    let c1 = lab
        .daemon_args(&q1, &batch("ha", "m1", "m2"), &["--fast-path", "on"])
        .unwrap();
    let c2 = lab
        .daemon_args(&q2, &batch("hb", "n1", "n2"), &["--fast-path", "on"])
        .unwrap();
    let fp = |c: &support::Ctl| c.json(&["show", "fast-path"]).unwrap_or_default();
    let context = |lab: &Lab| {
        format!(
            "q1: {:?}\n{}\nq2: {:?}\n{}\nlog q1:\n{}\nlog q2:\n{}",
            members(&c1),
            fp(&c1),
            members(&c2),
            fp(&c2),
            lab.daemon_log(0),
            lab.daemon_log(1)
        )
    };
    for c in [&c1, &c2] {
        let f = fp(c);
        assert_eq!(f["state"], "on", "{f}");
        assert_eq!(
            f["ports"],
            serde_json::json!(["bo", if std::ptr::eq(c, &c1) { "ha" } else { "hb" }]),
            "{f}"
        );
    }

    // LACP through the program: the PDUs reach the members' sockets on both ends.
    assert!(
        wait_until(Duration::from_secs(20), || all_distributing(&c1)
            && all_distributing(&c2)),
        "LACP did not converge\n{}",
        context(&lab)
    );

    // Four verified streams; the fast path carries them on both daemons.
    let before = (u(&fp(&c1)["hits"]), u(&fp(&c2)["hits"]));
    let total = support::join_streams(
        support::tcp_streams(&a, &b, 4, 32 << 20),
        "streams",
        &|| context(&lab),
    );
    assert_eq!(total, 4 * (32 << 20));
    let (f1, f2) = (fp(&c1), fp(&c2));
    for (f, hits0, name) in [(&f1, before.0, "q1"), (&f2, before.1, "q2")] {
        assert!(
            u(&f["flows"]) >= 2,
            "{name}: flows to and from the bond: {f}"
        );
        // A 32 MiB stream is thousands of frames each way (super-frames or not).
        assert!(
            u(&f["hits"]) - hits0 > 2000,
            "{name}: the program forwarded little: {f}"
        );
    }
    // The trace of such a frame names the member the bond's table gives its hash, and its
    // fast stage says the program forwards it (issue 32).
    let t = c1
        .cmd(&[
            "trace", "dev", "ha", "src", &a.mac, "dst", &b.mac, "ipv4", &a.ip, &b.ip, "tcp",
            "40000", "5201",
        ])
        .unwrap();
    assert!(
        t.contains("  bond     bo: member m1 (xmit_hash_policy layer3+4: hash ")
            || t.contains("  bond     bo: member m2 (xmit_hash_policy layer3+4: hash "),
        "{t}"
    );
    assert!(
        t.contains("  fast     cacheable: the install's checks pass on this frame"),
        "{t}"
    );
    // trace live on the bond: b's pings enter q1 on a member and hit the cached flow; the
    // program copies them up as the bond's (issue 32).
    let mut cmd = std::process::Command::new(support::qbridge_bin());
    cmd.arg("--socket").arg(&c1.socket).args([
        "-j", "trace", "live", "dev", "bo", "count", "1", "timeout", "20", "ipv4",
    ]);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(support::ping_ok(&b, &a.ip));
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let frames: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["object"] == "trace")
        .collect();
    assert_eq!(frames.len(), 1, "{text}");
    for f in &frames {
        assert_eq!(f["path"], "fast_hit", "{f}");
        assert_eq!(f["trace"]["in_port"], "bo", "{f}");
        assert_eq!(f["trace"]["outputs"][0]["port"], "ha", "{f}");
    }
    // qbridge's member counters hold the program's frames: each member's count is at least
    // the kernel's (which also has the LACPDUs), and they sum to what the bond carried.
    let own = member_tx_frames(&c1, "m1") + member_tx_frames(&c1, "m2");
    let kernel = counter(&q1, "m1", "tx_packets") + counter(&q1, "m2", "tx_packets");
    assert!(
        own > 1000 && own <= kernel,
        "q1's member counters: {own} frames, the kernel's {kernel}\n{}",
        context(&lab)
    );
    let m = |ns: &str, d: &str| counter(ns, d, "tx_bytes");
    eprintln!(
        "members' transmit bytes after 4 streams: q1 m1 {} m2 {}, q2 n1 {} n2 {}",
        m(&q1, "m1"),
        m(&q1, "m2"),
        m(&q2, "n1"),
        m(&q2, "n2")
    );

    // A member pulled mid-transfer: no connection lost, every byte there.
    let hs = support::tcp_streams(&a, &b, 4, 48 << 20);
    std::thread::sleep(Duration::from_millis(400));
    let running = hs.iter().filter(|h| !h.is_finished()).count();
    support::ip_in(&q1, &["link", "set", "m1", "down"]).unwrap();
    let pulled = Instant::now();
    let known = wait_until(Duration::from_secs(5), || {
        members(&c1).iter().any(|(n, c, d)| n == "m1" && !*c && !*d)
    });
    let known_after = pulled.elapsed();
    // From the moment the daemon says m1 is out, not one frame more is sent on it, by the
    // program or the pipeline (LACPDUs are counted apart).
    let m1_sent = member_tx_frames(&c1, "m1");
    let total = support::join_streams(hs, "streams across the pull", &|| context(&lab));
    assert_eq!(
        member_tx_frames(&c1, "m1"),
        m1_sent,
        "frames sent on m1 after q1 took it out\n{}",
        context(&lab)
    );
    assert_eq!(total, 4 * (48 << 20));
    assert_eq!(
        running, 4,
        "the streams ended before the pull: make them longer"
    );
    assert!(known, "q1 still has m1 in its aggregate\n{}", context(&lab));
    eprintln!("q1 took m1 out {known_after:?} after the pull");
    let f = fp(&c1);
    assert!(u(&f["hits"]) > 0, "{f}");

    // Back: m1 rejoins, and the streams run through the program again.
    support::ip_in(&q1, &["link", "set", "m1", "up"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || all_distributing(&c1)
            && all_distributing(&c2)),
        "m1 did not rejoin\n{}",
        context(&lab)
    );
    let hits0 = u(&fp(&c1)["hits"]);
    let total = support::join_streams(
        support::tcp_streams(&a, &b, 2, 8 << 20),
        "streams after",
        &|| context(&lab),
    );
    assert_eq!(total, 2 * (8 << 20));
    assert!(u(&fp(&c1)["hits"]) > hits0, "{}", fp(&c1));

    // An interface that leaves the bond (a port of its own meanwhile) and comes back is
    // served as a member again: both members receive, through the program, their share of
    // 8 + 8 connections both ways (q2's hash puts some on each, but for 1 in 65 536).
    c1.cmd(&["link", "set", "dev", "m2", "nomaster"]).unwrap();
    c1.cmd(&["link", "set", "dev", "m2", "master", "bo"])
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || all_distributing(&c1)
            && all_distributing(&c2)),
        "m2 did not rejoin\n{}",
        context(&lab)
    );
    let rx0 = [member_rx_frames(&c1, "m1"), member_rx_frames(&c1, "m2")];
    let mut hs = support::tcp_streams(&a, &b, 8, 4 << 20);
    hs.extend(support::tcp_streams(&b, &a, 8, 4 << 20));
    let total = support::join_streams(hs, "streams both ways", &|| context(&lab));
    assert_eq!(total, 16 * (4 << 20));
    let rx1 = [member_rx_frames(&c1, "m1"), member_rx_frames(&c1, "m2")];
    assert!(
        rx1[0] > rx0[0] + 100 && rx1[1] > rx0[1] + 100,
        "frames received on m1, m2: {rx0:?} -> {rx1:?}\n{}",
        context(&lab)
    );
}
