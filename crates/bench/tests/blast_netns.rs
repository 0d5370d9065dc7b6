//! qbridge-blast on a real veth pair in a network namespace of its own: every frame it says it
//! sent reached the other end or was counted as that end's ring being full, paced runs stay
//! within their rate, and a bad interface name is a clear error. Needs root (a namespace, an
//! XDP test run); skipped otherwise, unless QBRIDGE_REQUIRE_NETNS=1 (the test command as root).

use std::process::Command;

const BLAST: &str = env!("CARGO_BIN_EXE_qbridge-blast");

fn root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root && std::env::var_os("QBRIDGE_REQUIRE_NETNS").is_some_and(|v| v == "1") {
        panic!("QBRIDGE_REQUIRE_NETNS=1 but not root");
    }
    root
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace with veth `blasta` - `blastb`, both up, `blastb` with NAPI on (GRO); removed
/// on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Ns {
        let name = format!("qbblast-{}-{tag}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        let ns = Ns(name);
        // no IPv6: the kernel's own neighbour discovery frames would add to the counts
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
        ns.ip(&[
            "link", "add", "blasta", "type", "veth", "peer", "name", "blastb",
        ]);
        ns.ip(&["link", "set", "blasta", "up"]);
        ns.ip(&["link", "set", "blastb", "up"]);
        ns.exec(&["ethtool", "-K", "blastb", "gro", "on"]);
        ns
    }
    fn ip(&self, args: &[&str]) {
        let mut v = vec!["ip", "-n", &self.0];
        v.extend_from_slice(args);
        sh(&v);
    }
    fn exec(&self, args: &[&str]) {
        let mut v = vec!["ip", "netns", "exec", &self.0];
        v.extend_from_slice(args);
        sh(&v);
    }
    fn counter(&self, dev: &str, c: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "cat"])
            .arg(format!("/sys/class/net/{dev}/statistics/{c}"))
            .output()
            .expect("cat");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a counter")
    }
    /// Runs the blaster; (frames it reports sent, seconds it reports).
    fn blast(&self, extra: &[&str]) -> Result<(u64, f64), String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, BLAST, "--dev", "blasta"])
            .args(["--dst-mac", "02:00:00:00:00:02"])
            .args(extra)
            .output()
            .expect("run qbridge-blast");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        // "sent N frames in S s: R frames/s (interface counters)"
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let w: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(w[0], "sent", "{text}");
        Ok((w[1].parse().expect("N"), w[4].parse().expect("S")))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

#[test]
fn every_frame_sent_arrives_or_is_counted_and_a_paced_run_keeps_its_rate() {
    if !root() {
        eprintln!("skipped: not root");
        return;
    }
    let ns = Ns::new("count");
    let (rx0, drop0) = (
        ns.counter("blastb", "rx_packets"),
        ns.counter("blasta", "tx_dropped"),
    );
    let (sent, secs) = ns
        .blast(&["--rate", "20000", "--seconds", "1"])
        .expect("blast");
    let rx = ns.counter("blastb", "rx_packets") - rx0;
    let dropped = ns.counter("blasta", "tx_dropped") - drop0;
    assert!(sent > 0, "nothing sent");
    assert_eq!(sent, rx + dropped, "sent = received by b + b's ring full");
    // the token bucket lets out at most one frame per 50 us plus its burst of 32 (the bound
    // holds however slow the machine is; only a faster run than asked could break it)
    assert!(
        sent as f64 <= 20_000.0 * secs + 32.0 + 64.0,
        "{sent} frames in {secs} s at 20 000/s"
    );
    // the frames are 60 bytes (64 with the FCS the counters leave out)
    let bytes = ns.counter("blastb", "rx_bytes");
    assert_eq!(
        bytes,
        60 * ns.counter("blastb", "rx_packets"),
        "60-byte frames"
    );
}

#[test]
fn an_interface_that_is_not_there_and_a_bad_duration_are_clear_errors() {
    if !root() {
        eprintln!("skipped: not root");
        return;
    }
    let ns = Ns::new("bad");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, BLAST, "--dev", "nosuch0"])
        .args(["--dst-mac", "02:00:00:00:00:02", "--seconds", "0.1"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no interface \"nosuch0\""), "{err}");
    // and a duration that is none
    let err = ns
        .blast(&["--seconds=-1"])
        .expect_err("a negative duration is refused");
    assert!(err.contains("--seconds -1: not a duration"), "{err}");
}
