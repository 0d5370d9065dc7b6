//! `qbridge daemon --state FILE`, `show running-config` and `qbridge apply` against a live
//! daemon, without privileges (pcap ports, a socket in a temporary directory): the state
//! survives a restart exactly, a SIGKILL in the middle of a stream of changes leaves the old
//! or the new state and never a torn file, and re-applying a batch is a no-op.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod local;

use local::{Daemon, BIN};

fn tmp(name: &str) -> PathBuf {
    local::tmp("state", name)
}

/// Starts `qbridge daemon --state DIR/state [-batch BATCH]` (pcap ports, one worker);
/// `Err(log)` if it exits first.
fn start(dir: &Path, batch: Option<&str>) -> Result<Daemon, String> {
    let socket = dir.join("ctl.sock");
    let log = dir.join("daemon.log");
    let mut cmd = Command::new(BIN);
    cmd.args(["daemon", "--workers", "1", "--socket"])
        .arg(&socket)
        .arg("--pcap-dir")
        .arg(dir.join("pcap"))
        .arg("--state")
        .arg(dir.join("state"));
    if let Some(b) = batch {
        let f = dir.join("cfg.batch");
        std::fs::write(&f, b).unwrap();
        cmd.arg("-batch").arg(f);
    }
    cmd.env("QBRIDGE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    Daemon::spawn(cmd, socket, log)
}

/// `link show -j`, `vlan show -j`, `fdb show -j`.
fn views(d: &Daemon) -> Vec<Value> {
    ["link", "vlan", "fdb"]
        .iter()
        .map(|o| serde_json::from_str(&d.ok(&["-j", o, "show"])).unwrap())
        .collect()
}

/// SIGTERM; the daemon must exit 0.
fn stop(mut d: Daemon) {
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}: {}", d.log_text());
}

const BASE: &str = "\
link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad ageing_time 42
link add p1 type pcap
link add p2 type pcap
link add p3 type pcap
link set dev p1 master br0
link set dev p2 master br0 learning off
vlan add vid 100-110 dev p2
";

#[test]
fn state_survives_a_restart_exactly() {
    let dir = tmp("restart");
    let d = start(&dir, Some(BASE)).unwrap();
    // Changes at run time, slot reuse included (p1 deleted, q1 takes its id). No TAPs (host
    // ports, VLAN devices): this test runs without privileges; the control crate's tests
    // cover them.
    for c in [
        "link del dev p1",
        "link add q1 type pcap",
        "link add pa type patch peer pb",
        "link set dev q1 master br0 hairpin on mtu 9000",
        "vlan add vid 100 dev q1 pvid untagged",
        "vlan del vid 1 dev q1",
        "fdb add 02:00:00:00:00:01 dev q1 vlan 100 static sticky",
        "fdb add 02:00:00:00:00:02 dev p2 vlan 105 static",
        "fdb add 02:00:00:00:00:03 dev p2 vlan 0 permanent",
    ] {
        d.ok(&c.split(' ').collect::<Vec<_>>());
    }
    let before = views(&d);
    let running = d.ok(&["show", "running-config"]);
    // The changes after the last `link add` (a `link set`, two `vlan` and three `fdb`
    // commands) were appended to the configuration written before them.
    let saved = std::fs::read_to_string(dir.join("state")).unwrap();
    let (config, changes) = saved
        .split_once(qbridge_control::running::CHANGES_MARKER)
        .unwrap();
    assert!(
        running.starts_with(config.lines().next().unwrap()),
        "{saved}"
    );
    assert_eq!(changes.lines().count(), 6, "{saved}");
    stop(d);

    // A fresh daemon, the state file only: the same switch, and the file is the running
    // configuration again.
    let d = start(&dir, None).unwrap();
    assert_eq!(views(&d), before);
    assert_eq!(d.ok(&["show", "running-config"]), running);
    assert_eq!(std::fs::read_to_string(dir.join("state")).unwrap(), running);
    stop(d);

    // With the same -batch again: applied over the state, what exists is kept (not an error,
    // and it does not undo the run-time changes).
    let d = start(&dir, Some(BASE)).unwrap();
    let after = views(&d);
    // BASE adds p1 again (it was deleted at run time): everything else is as it was.
    let names: Vec<&str> = after[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"p1") && names.contains(&"q1"), "{names:?}");
    assert_eq!(after[2], before[2], "FDB kept");
    stop(d);
}

#[test]
fn apply_twice_is_a_no_op_and_a_plain_batch_is_strict() {
    let dir = tmp("apply");
    let d = start(&dir, None).unwrap();
    let file = dir.join("site.batch");
    std::fs::write(&file, BASE).unwrap();
    let f = file.to_str().unwrap();
    d.ok(&["apply", f]);
    let state1 = std::fs::read(dir.join("state")).unwrap();
    let mtime1 = std::fs::metadata(dir.join("state"))
        .unwrap()
        .modified()
        .unwrap();
    let views1 = views(&d);
    std::thread::sleep(Duration::from_millis(20));
    d.ok(&["apply", f]);
    assert_eq!(views(&d), views1);
    assert_eq!(std::fs::read(dir.join("state")).unwrap(), state1);
    assert_eq!(
        std::fs::metadata(dir.join("state"))
            .unwrap()
            .modified()
            .unwrap(),
        mtime1,
        "an unchanged configuration is not rewritten"
    );
    let e = d.try_ok(&["-batch", f]).unwrap_err();
    assert_eq!(e, "qbridge: line 1: device \"br0\" already exists\n");
    stop(d);
}

#[test]
fn a_bad_state_file_stops_the_daemon_with_the_reason() {
    let dir = tmp("bad");
    std::fs::write(
        dir.join("state"),
        "link add br0 type bridge\nvlan add vid 5 dev nope\n",
    )
    .unwrap();
    let log = match start(&dir, None) {
        Ok(_) => panic!("the daemon started with a state file that does not apply"),
        Err(log) => log,
    };
    let want = format!(
        "qbridge: state file {} does not apply; fix it or move it away to start empty: line 2: \
         device \"nope\" does not exist",
        dir.join("state").display()
    );
    assert!(log.contains(&want), "{log}");
}

#[test]
fn sigkill_during_changes_leaves_the_old_or_the_new_state() {
    let dir = tmp("kill");
    for round in 0..3u64 {
        let d = start(&dir, (round == 0).then_some(BASE)).unwrap();
        let start = entries(&std::fs::read_to_string(dir.join("state")).unwrap());
        // A stream of changes on one connection-less CLI loop; the daemon is killed while it
        // runs, at a different moment each round.
        let socket = d.socket.clone();
        let stop_at = Instant::now() + Duration::from_millis(150 + 170 * round);
        // Changes acknowledged so far: the kill waits for the first (on a loaded machine the
        // first CLI round trip can outlast the round's delay), so it always falls among them.
        let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let first_w = first.clone();
        let writer = std::thread::spawn(move || {
            let mut acked = 0u64;
            for i in 0.. {
                if Instant::now() > stop_at + Duration::from_secs(5) {
                    break;
                }
                let mac = format!("02:00:00:{:02x}:{:02x}:{:02x}", round, i / 256, i % 256);
                let ok = Command::new(BIN)
                    .arg("--socket")
                    .arg(&socket)
                    .args(["fdb", "add", &mac, "dev", "p2", "vlan", "100", "static"])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    break;
                }
                acked += 1;
                first_w.store(true, std::sync::atomic::Ordering::Release);
            }
            acked
        });
        let give_up = stop_at + Duration::from_secs(4);
        while Instant::now() < give_up
            && (Instant::now() < stop_at || !first.load(std::sync::atomic::Ordering::Acquire))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut d = d;
        d.kill9();
        let acked = writer.join().unwrap();
        let text = std::fs::read_to_string(dir.join("state")).unwrap();
        // Whole: it applies to a fresh offline switch…
        let out = Command::new(BIN)
            .args(["-offline", "-batch"])
            .arg(dir.join("state"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: torn state file: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        // …and holds every acknowledged change, plus at most the one in flight.
        let n = entries(&text);
        eprintln!("round {round}: {acked} changes acknowledged, {n} entries saved");
        assert!(
            n == start + acked || n == start + acked + 1,
            "round {round}: {n} entries saved, {start} before and {acked} acknowledged"
        );
        assert!(
            acked > 0,
            "round {round}: no change went through before the kill"
        );
    }
}

/// FDB lines in a saved configuration.
fn entries(text: &str) -> u64 {
    text.lines().filter(|l| l.starts_with("fdb add ")).count() as u64
}
