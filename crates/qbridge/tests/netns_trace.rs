//! `qbridge trace` and `qbridge monitor drops` on a live daemon with kernel hosts (root only;
//! issue 32). Run with the eBPF fast path on (the default) and off by the test command.
//!
//! ```text
//!   h1 (10.72.0.1) ─ p1 ┐ br0: p1, p2 access VLAN 10; p3 access VLAN 20
//!   h2 (10.72.0.2) ─ p2 ┤
//!   h3 (10.72.0.3) ─ p3 ┘   (h3 is alone in its VLAN: "one VLAN works, another does not")
//! ```
//!
//! The trace of h1 → h2 names the entry h2's traffic taught the bridge and the untagged frame
//! that leaves p2; the trace of h3 → h1 names the flood set that is empty and why; the drop
//! watch shows h3's ARP requests dropped as `no_destination`, and, once p1 and p2 are both
//! isolated (the fast path had cached the flow), h1's frames to h2 dropped as `isolated`:
//! drops the pipeline decides for both paths.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::{assert_ping, ping, qbridge_bin, Lab};

const BATCH: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link add p3 type afpacket dev s3
link set dev p1 master br0 vlan_mode access tag 10
link set dev p2 master br0 vlan_mode access tag 10
link set dev p3 master br0 vlan_mode access tag 20
";

/// `qbridge monitor ARGS…` as a child, its lines on a channel.
struct Watch {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(ctl: &support::Ctl, args: &[&str]) -> Watch {
        let mut cmd = Command::new(qbridge_bin());
        cmd.arg("--socket").arg(&ctl.socket).args(args);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("qbridge monitor starts");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Watch { child, lines }
    }

    /// The first line `pred` accepts within `secs` seconds.
    fn wait(&self, secs: u64, pred: impl Fn(&str) -> bool) -> Option<String> {
        let end = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if pred(&l) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn trace_explains_and_the_drop_watch_shows_the_drops() {
    skip_unless_netns!();
    let mut lab = Lab::new("trace");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.72.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.72.0.2/24", &sw, "s2").unwrap();
    let h3 = lab.host("h3", "10.72.0.3/24", &sw, "s3").unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();
    assert_ping(&h1, &h2, 3);

    // h1 → h2: known unicast, the entry h2's answers taught, out untagged on p2.
    let words = [
        "trace", "dev", "p1", "src", &h1.mac, "dst", &h2.mac, "ipv4", &h1.ip, &h2.ip, "tcp",
        "40000", "80",
    ];
    let text = ctl.cmd(&words).unwrap();
    assert!(
        text.contains(&format!(
            "{} in VLAN 10: hit, a learned entry on p2",
            h2.mac
        )),
        "{text}"
    );
    assert!(
        text.contains("verdict: forwarded in VLAN 10 of br0"),
        "{text}"
    );
    // The fast path's stage agrees with `show fast-path`.
    let fp = ctl.json(&["show", "fast-path"]).unwrap();
    if fp["state"] == "on" {
        // The install's own checks ran on the traced frame.
        assert!(
            text.contains("  fast     cacheable: the install's checks pass on this frame"),
            "{text}"
        );
        // A source the switch has not learned yet: the frame's own learning puts it in the
        // FDB before a worker would install, so the flow is cacheable all the same.
        let t = ctl
            .cmd(&[
                "trace",
                "dev",
                "p1",
                "src",
                "02:00:00:00:77:77",
                "dst",
                &h2.mac,
                "ipv4",
                &h1.ip,
                &h2.ip,
            ])
            .unwrap();
        assert!(t.contains("(a new entry)"), "{t}");
        assert!(
            t.contains("  fast     cacheable: the install's checks pass on this frame"),
            "{t}"
        );
        // Three tags in, two out: forwarded by the pipeline, but more tags than the program
        // parses, so the install refuses it (rewrite).
        let t = ctl
            .cmd(&[
                "trace", "dev", "p1", "src", &h1.mac, "dst", &h2.mac, "vlan", "10", "vlan", "20",
                "vlan", "30",
            ])
            .unwrap();
        eprintln!("{t}");
        assert!(t.contains("verdict: forwarded"), "{t}");
        assert!(t.contains("  fast     not cached (rewrite): "), "{t}");
    } else {
        assert!(text.contains("  fast     the fast path is off"), "{text}");
    }
    let mut j = vec!["-j"];
    j.extend_from_slice(&words);
    let t: serde_json::Value = serde_json::from_str(&ctl.cmd(&j).unwrap()).unwrap();
    assert_eq!(t["verdict"], "forwarded");
    assert_eq!(t["vlan"], 10);
    assert_eq!(t["explained"], true);
    let out = t["outputs"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{t}");
    assert_eq!(out[0]["port"], "p2");
    assert_eq!(out[0]["kind"], "forward");
    assert_eq!(
        out[0]["frame"]["summary"],
        format!(
            "{} > {}, untagged / IPv4 TCP {}:40000 > {}:80, 60 bytes",
            h1.mac, h2.mac, h1.ip, h2.ip
        )
    );
    // Nothing was sent or learned by the trace: the counters of p2 did not move.
    let tx = |ctl: &support::Ctl| {
        ctl.json(&["-s", "link", "show", "dev", "p2"]).unwrap()[0]["stats"]["tx_frames"]
            .as_u64()
            .unwrap()
    };
    let before = tx(&ctl);
    ctl.cmd(&words).unwrap();
    assert_eq!(tx(&ctl), before);

    // h3 → h1: "one VLAN works and another does not". h3 is in VLAN 20, alone.
    let t = ctl
        .cmd(&[
            "trace",
            "p3",
            "src",
            &h3.mac,
            "dst",
            "ff:ff:ff:ff:ff:ff",
            "arp",
            &h3.ip,
            &h1.ip,
        ])
        .unwrap();
    assert!(
        t.contains("vlan     untagged (vlan_mode access): in the PVID of p3, VLAN 20"),
        "{t}"
    );
    assert!(
        t.contains("flood set: no port: - p1 (not a member of VLAN 20), - p2 (not a member of VLAN 20), - p3 (the ingress port, hairpin off)"),
        "{t}"
    );
    assert!(t.contains("drop on p3: no_destination"), "{t}");
    if fp["state"] == "on" {
        assert!(t.contains("  fast     not cached (outputs): drops"), "{t}");
    }

    // The drop watch: h3's ARP requests, by name.
    let watch = Watch::start(&ctl, &["monitor", "drops"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ping(&h3, &h1.ip, 2).received, 0);
    let line = watch
        .wait(10, |l| l.starts_with("p3 vlan 20 drop no_destination"))
        .expect("h3's ARP request in the drop watch");
    assert!(
        line.contains(&format!("ARP request who-has {} tell {}", h1.ip, h3.ip)),
        "{line}"
    );

    // A flow the fast path forwards, then refused: p1 and p2 isolated. Every frame now goes
    // up and is dropped by the pipeline, which the watch tells.
    let jw = Watch::start(&ctl, &["-j", "monitor", "drops"]);
    std::thread::sleep(Duration::from_millis(300));
    support::ip_in(
        &h1.ns,
        &["neigh", "replace", &h2.ip, "lladdr", &h2.mac, "dev", "eth0"],
    )
    .unwrap();
    assert_ping(&h1, &h2, 2);
    ctl.cmd(&["link", "set", "dev", "p1", "isolated", "on"])
        .unwrap();
    ctl.cmd(&["link", "set", "dev", "p2", "isolated", "on"])
        .unwrap();
    assert_eq!(ping(&h1, &h2.ip, 3).received, 0);
    let line = jw
        .wait(10, |l| l.contains("\"isolated\""))
        .expect("h1's frames to h2 in the JSON drop watch");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["object"], "drops");
    assert_eq!(v["port"], "p1");
    assert_eq!(v["vlan"], 10);
    assert!(
        v["frame"].as_str().unwrap().contains("ICMP echo request"),
        "{v}"
    );
    // The trace agrees.
    let t = ctl.cmd(&words).unwrap();
    assert!(t.contains("p1 and p2 are both isolated"), "{t}");
    assert!(t.contains("drop on p1: isolated"), "{t}");
    drop(watch);
    drop(jw);
    assert!(lab.stop_daemons(), "the daemon did not exit cleanly");
}

/// The lines of one `qbridge ARGS…` run that ends by itself (a `trace live`), within `secs`.
fn run_to_end(ctl: &support::Ctl, args: &[&str], secs: u64, during: impl FnOnce()) -> Vec<String> {
    let w = Watch::start(ctl, args);
    std::thread::sleep(Duration::from_millis(400));
    during();
    let mut lines = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match w.lines.recv_timeout(left) {
            Ok(l) => lines.push(l),
            // The daemon closed the stream: the trace is over.
            Err(_) => break,
        }
    }
    lines
}

#[test]
fn trace_live_explains_the_next_frames_of_both_paths() {
    skip_unless_netns!();
    let mut lab = Lab::new("tlive");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.73.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.73.0.2/24", &sw, "s2").unwrap();
    let h3 = lab.host("h3", "10.73.0.3/24", &sw, "s3").unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();
    for (a, b) in [(&h1, &h2), (&h2, &h1)] {
        support::ip_in(
            &a.ns,
            &["neigh", "replace", &b.ip, "lladdr", &b.mac, "dev", "eth0"],
        )
        .unwrap();
    }
    assert_ping(&h1, &h2, 3);
    let fast_on = ctl.json(&["show", "fast-path"]).unwrap()["state"] == "on";
    eprintln!(
        "trace live with the fast path {}",
        if fast_on { "on" } else { "off" }
    );
    if fast_on {
        // The flow h1 → h2 is in the program's cache: the traced pings are its hits.
        let fp = ctl.json(&["show", "fast-path"]).unwrap();
        assert!(fp["flows"].as_u64().unwrap_or(0) > 0, "{fp}");
    }

    // Three echo requests from h1, as JSON: each explained, each forwarded to p2 untagged.
    let src = h1.mac.clone();
    let lines = run_to_end(
        &ctl,
        &[
            "-j", "trace", "live", "dev", "p1", "count", "3", "timeout", "20", "src", &src, "ipv4",
        ],
        25,
        || {
            assert_ping(&h1, &h2, 3);
        },
    );
    let objs: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let frames: Vec<&serde_json::Value> = objs.iter().filter(|v| v["object"] == "trace").collect();
    assert_eq!(frames.len(), 3, "{lines:#?}");
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["index"], i + 1, "{f}");
        assert_eq!(f["count"], 3);
        assert_eq!(f["agrees"], true, "{f}");
        assert_eq!(f["trace"]["verdict"], "forwarded", "{f}");
        assert_eq!(f["trace"]["in_port"], "p1");
        assert_eq!(f["trace"]["outputs"][0]["port"], "p2", "{f}");
        assert!(
            f["trace"]["frame"]["summary"]
                .as_str()
                .unwrap()
                .contains("ICMP echo request"),
            "{f}"
        );
        // With the flow cached, the program forwarded them: the trace says it was a hit.
        let want = if fast_on { "fast_hit" } else { "pipeline" };
        assert_eq!(f["path"], want, "{f}");
        if fast_on {
            // Which flow, and since when.
            let fast = f["fast"].as_str().unwrap();
            assert!(
                fast.starts_with(&format!(
                    "its flow for untagged frames, dst {}, ethertype 0x0800 (installed ",
                    h2.mac
                )),
                "{fast}"
            );
            assert!(fast.contains(" s ago, configuration generation "), "{fast}");
        }
    }
    let end = objs.last().unwrap();
    assert_eq!(end["object"], "trace_end", "{lines:#?}");
    assert_eq!(end["traced"], 3);

    if fast_on {
        // A client that leaves mid-trace: its session ends within a second or two, and the
        // program stops copying the port's hits to the daemon (the trace device's receive
        // count stays put while the flow keeps hitting).
        let dev = support::links_named_from(&sw, "qbfp")
            .into_iter()
            .find(|n| n.ends_with('p'))
            .expect("the daemon's trace device");
        // Echo requests seen on the trace device by tcpdump while `during` runs.
        let seen = |during: &dyn Fn()| -> usize {
            let mut td = Command::new("ip")
                .args([
                    "netns", "exec", &sw, "tcpdump", "-nn", "-l", "-p", "-i", &dev,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("tcpdump (scripts/test.sh installs it)");
            std::thread::sleep(Duration::from_millis(800));
            during();
            std::thread::sleep(Duration::from_millis(300));
            let _ = td.kill();
            let out = td.wait_with_output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("ICMP echo request"))
                .count()
        };
        let w = Watch::start(
            &ctl,
            &["trace", "live", "dev", "p1", "count", "1000", "ipv4"],
        );
        std::thread::sleep(Duration::from_millis(400));
        let during = seen(&|| {
            assert_ping(&h1, &h2, 3);
        });
        assert!(w.wait(10, |l| l.contains("a fast-path hit")).is_some());
        assert!(during >= 3, "{during} copies seen while tracing");
        drop(w);
        std::thread::sleep(Duration::from_millis(2500));
        let after = seen(&|| {
            assert_ping(&h1, &h2, 3);
        });
        assert_eq!(after, 0, "hits still copied after the client left");
    }

    // h3's ARP requests, dropped by the pipeline: the text names what happened.
    let lines = run_to_end(
        &ctl,
        &[
            "trace", "live", "dev", "p3", "count", "1", "timeout", "20", "arp",
        ],
        25,
        || assert_eq!(ping(&h3, &h1.ip, 1).received, 0),
    );
    let text = lines.join("\n");
    eprintln!("{text}");
    assert!(text.contains("frame 1/1 on p3"), "{text}");
    assert!(text.contains("drop on p3: no_destination"), "{text}");
    assert!(text.contains("happened: dropped: no_destination"), "{text}");
    assert!(text.ends_with("trace live: 1 frame"), "{text}");
    assert!(
        text.contains("a fast-path miss (a group destination") || !fast_on,
        "{text}"
    );

    if fast_on {
        // Misses, with the program's reason: a destination nobody learned (no flow for its
        // key), then a cached flow after an unrelated change (made under an older
        // configuration generation).
        support::ip_in(
            &h1.ns,
            &[
                "neigh",
                "replace",
                "10.73.0.99",
                "lladdr",
                "02:00:00:00:99:99",
                "dev",
                "eth0",
            ],
        )
        .unwrap();
        let lines = run_to_end(
            &ctl,
            &[
                "-j",
                "trace",
                "live",
                "dev",
                "p1",
                "count",
                "1",
                "timeout",
                "20",
                "dst",
                "02:00:00:00:99:99",
            ],
            25,
            || {
                ping(&h1, "10.73.0.99", 1);
            },
        );
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["path"], "fast_miss", "{v}");
        assert!(
            v["fast"]
                .as_str()
                .unwrap()
                .starts_with("no flow for its key yet"),
            "{v}"
        );
        assert_eq!(v["trace"]["verdict"], "flooded", "{v}");
        // The flow h1 → h2 cached again.
        assert_ping(&h1, &h2, 2);
        ctl.cmd(&["link", "set", "dev", "p3", "learning", "off"])
            .unwrap();
        let lines = run_to_end(
            &ctl,
            &[
                "-j", "trace", "live", "dev", "p1", "count", "1", "timeout", "20", "src", &src,
                "ipv4",
            ],
            25,
            || {
                assert_ping(&h1, &h2, 1);
            },
        );
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["path"], "fast_miss", "{v}");
        assert!(
            v["fast"]
                .as_str()
                .unwrap()
                .starts_with("its flow was made under configuration generation"),
            "{v}"
        );
    }

    // Nothing matches: the trace ends at its timeout and says so.
    let lines = run_to_end(
        &ctl,
        &[
            "trace",
            "live",
            "dev",
            "p2",
            "count",
            "5",
            "timeout",
            "1",
            "src",
            "02:00:00:00:99:99",
        ],
        10,
        || {},
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("trace live: 0 of 5 frames in 1 s (timeout)"),
        "{lines:#?}"
    );

    // An unknown port is the daemon's clear error.
    let out = Command::new(qbridge_bin())
        .arg("--socket")
        .arg(&ctl.socket)
        .args(["trace", "live", "dev", "nosuch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nosuch"), "{err}");

    assert!(lab.stop_daemons(), "the daemon did not exit cleanly");
}
