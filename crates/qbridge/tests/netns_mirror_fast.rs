//! Mirror copies cloned by the eBPF fast path (decision 80), on real namespaces with kernel
//! hosts (root only; the daemon with `--fast-path auto`; a `SKIPPED:` line when the fast path
//! cannot run here, a failure instead with `QBRIDGE_FASTPATH_REQUIRE=1`).
//!
//! [`tcp_through_a_copied_port_is_cached_and_every_frame_copied`]: a session copies both
//! directions of p4 to p3 with an RSPAN tag (p3 a port of the bridge in another VLAN: the
//! program clones only to interfaces it serves). TCP from h1 to h4 crosses the copied port at
//! fast-path speed (hits counted, its flows installed with their copies); every frame p4
//! received or sent was copied (the session's `frames` equal p4's rx (with its rx drops) plus
//! tx); the destination's host captured exactly the session's copies, each with the RSPAN tag
//! outermost and the bytes the session counted; the session's counters are the destination
//! port's tx counters. Then, with the transfer running again, `mirror del`: once it answered,
//! h3 receives nothing more.

mod support;

use support::neighbour;

use std::time::Duration;

use serde_json::Value;
use support::{inject, Capture, Ctl};

/// Prints why the test does nothing; a failure with `QBRIDGE_FASTPATH_REQUIRE=1`.
fn skip(why: &str) {
    if std::env::var_os("QBRIDGE_FASTPATH_REQUIRE").is_some_and(|v| v == "1") {
        panic!("the fast path must run here (QBRIDGE_FASTPATH_REQUIRE=1) but: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// A kernel counter of interface `dev` in namespace `ns`.
fn dev_counter(ns: &str, dev: &str, what: &str) -> u64 {
    support::exec_in(
        ns,
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/{what}")],
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or_else(|| panic!("{ns} {dev} {what}"))
}

/// `-s link show dev PORT`'s stats.
fn port_stats(ctl: &Ctl, port: &str) -> Value {
    let v = ctl
        .json(&["-s", "link", "show", "dev", port])
        .unwrap_or_else(|e| panic!("link show -s dev {port}: {e}"));
    v[0]["stats"].clone()
}

fn drops_sum(st: &Value, prefix: &str) -> u64 {
    st["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, n)| n.as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn tcp_through_a_copied_port_is_cached_and_every_frame_copied() {
    let _g = support::serial();
    if let Some(reason) = support::skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let mut star = support::Star::new(
        "mirfast",
        &["10.80.0.1", "10.80.0.2", "10.80.0.3", "10.80.0.4"],
    )
    .unwrap();
    let (h1, h3, h4) = (star.h(1).clone(), star.h(3).clone(), star.h(4).clone());
    neighbour(&h1, &h4.ip, &h4.mac);
    neighbour(&h4, &h1.ip, &h1.mac);
    let sw = star.sw.clone();
    let batch = star.port_lines()
        + "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
           link set dev p1 master br0\n\
           link set dev p2 master br0\n\
           link set dev p3 master br0\n\
           link set dev p4 master br0\n\
           vlan add vid 10 dev p1 pvid untagged\n\
           vlan add vid 10 dev p2 pvid untagged\n\
           vlan add vid 10 dev p4 pvid untagged\n\
           vlan add vid 20 dev p3 pvid untagged\n\
           mirror add m0 src p4 direction both dst p3 rspan 99\n";
    let ctl = star
        .lab
        .daemon_args(&sw, &batch, &["--fast-path", "auto"])
        .unwrap_or_else(|e| panic!("daemon: {e}"));
    let fast = || ctl.json(&["show", "fast-path"]).unwrap();
    if fast()["state"] != "on" {
        skip(&format!(
            "the daemon runs without the fast path here: {}",
            fast()
        ));
        return;
    }
    for (h, p, to) in [(&h1, "p1", &h4), (&h4, "p4", &h1)] {
        let hello = support::frame(&to.mac, &h.mac, &[], 0x88b5, 46);
        inject(&h.ns, "eth0", &[hello]).unwrap();
        assert!(
            support::wait_until(Duration::from_secs(5), || ctl
                .fdb_has(&h.mac, p)
                .unwrap_or(false)),
            "{} not learned: {:?}",
            h.name,
            ctl.fdb()
        );
    }
    // The session's counters hold every copy (both paths) once the daemon folded them: the
    // copies of every frame p4 received (dropped or not) and sent.
    let session = || {
        let v = ctl.json(&["-s", "mirror", "show", "m0"]).unwrap();
        v[0]["stats"].clone()
    };
    let mut last = (0, 0);
    let mut settle = || {
        support::wait_until(Duration::from_secs(10), || {
            let s = session();
            let p4 = port_stats(&ctl, "p4");
            let want = num(&p4, "rx_frames") + drops_sum(&p4, "rx_") + num(&p4, "tx_frames");
            last = (num(&s, "frames"), want);
            last.0 == last.1
        })
    };
    assert!(settle(), "the hellos' copies: {last:?}");
    let base = session();
    let cap = Capture::start(&h3.ns, "eth0", 1 << 16).unwrap();
    let before = fast();
    let r = support::tcp_transfer(&h1, &h4, 64 << 20, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("TCP through the copied port: {e}"));
    let after = fast();
    let hits = num(&after, "hits") - num(&before, "hits");
    eprintln!(
        "TCP h1 -> h4: {:.2} Gbit/s; fast path before {before}, after {after}",
        r.gbit_per_s()
    );
    let settled = settle();
    let s = session();
    let p3 = port_stats(&ctl, "p3");
    let p4 = port_stats(&ctl, "p4");
    assert!(
        settled,
        "the session copied {} frames, p4 received and sent {}: {s} / p4 {p4}",
        last.0, last.1
    );
    assert!(
        hits > 1000,
        "TCP through the copied port was not cached: {hits} hits ({after})"
    );
    // The destination port's tx counters are the session's copies.
    assert_eq!(
        (num(&p3, "tx_frames"), num(&p3, "tx_bytes")),
        (num(&s, "frames"), num(&s, "bytes")),
        "p3 {p3} / session {s}"
    );
    // h3 received exactly those copies (the veth dropped none), each with the RSPAN tag.
    let lost = dev_counter(&sw, "s3", "tx_dropped");
    let got = cap.finish().unwrap();
    let untagged: Vec<_> = got
        .frames
        .iter()
        .filter(|f| f.tags.first() != Some(&(0x8100, 99)))
        .map(|f| f.describe())
        .take(5)
        .collect();
    eprintln!(
        "h3 captured {} frames ({} kept), {lost} dropped by the veth; session {s}",
        got.total,
        got.frames.len()
    );
    assert_eq!(
        got.total + lost,
        num(&s, "frames") - num(&base, "frames"),
        "h3's copies differ from the session's count: {}",
        got.summary()
    );
    assert!(
        untagged.is_empty(),
        "copies without the RSPAN tag: {untagged:?}"
    );
    let bytes: u64 = got.frames.iter().map(|f| f.len as u64).sum();
    if got.frames.len() as u64 == got.total && lost == 0 {
        assert_eq!(
            bytes,
            num(&s, "bytes") - num(&base, "bytes"),
            "the copies' bytes at h3"
        );
    }

    // Under load: `mirror del` invalidates the copies before it answers.
    let (a, b) = (h1.clone(), h4.clone());
    let t = std::thread::spawn(move || {
        support::tcp_transfer(&a, &b, 256 << 20, Duration::from_secs(30))
    });
    // Copies flowing first (the transfer's start takes a while: a fixed wait raced it).
    let start = dev_counter(&h3.ns, "eth0", "rx_packets");
    let flowing = support::wait_until(Duration::from_secs(10), || {
        dev_counter(&h3.ns, "eth0", "rx_packets") > start + 100
    });
    let mid = dev_counter(&h3.ns, "eth0", "rx_packets");
    ctl.cmd(&["mirror", "del", "m0"])
        .unwrap_or_else(|e| panic!("mirror del: {e}"));
    let answered = dev_counter(&h3.ns, "eth0", "rx_packets");
    let r = t.join().unwrap().unwrap_or_else(|e| panic!("TCP: {e}"));
    let end = dev_counter(&h3.ns, "eth0", "rx_packets");
    eprintln!(
        "second transfer {:.2} Gbit/s; h3 rx_packets {mid} before mirror del, {answered} when \
         it answered, {end} at the end",
        r.gbit_per_s()
    );
    assert!(
        flowing,
        "no copies while the second transfer ran: h3 rx_packets {start} at its start"
    );
    assert_eq!(end, answered, "h3 got copies after `mirror del` answered");
}
