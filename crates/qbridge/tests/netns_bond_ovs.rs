//! Bonds on real namespaces (root only): an 802.3ad bond whose partner is Open vSwitch, and an
//! active-backup bond without a protocol.
//!
//! ```text
//!  A (10.9.0.1)        Q: qbridge daemon                      O: Open vSwitch (netdev)      B (10.9.0.2)
//!  eth0 ══ veth ══ ha ─ br0 ─ bo (bond 802.3ad, layer3+4) ─ m1 ══ veth ══ o1 ┐ bx (balance-tcp,
//!                                                          └ m2 ══ veth ══ o2 ┘ lacp active fast) ─ hb ══ eth0
//! ```
//!
//! LACP must reach collecting+distributing on both ends (qbridge's `link show -j`, OVS's
//! `lacp/show` and `bond/show`); 16 verified TCP streams from A to B must use both member links
//! (the kernel's byte counters of m1 and m2); then, with 8 streams running, the OVS end of the
//! link that carries A's ping flow is set down: no connection may be lost, every byte must
//! arrive, and the pings lost (one every 2 ms) give the loss window, printed. The link comes
//! back and rejoins the aggregate.
//!
//! Across the pull, A sends at most [`PULL_RATE`] (a `tbf` qdisc on its interface): OVS's
//! userspace datapath polls its veths from one thread and, on this shared 2-core machine,
//! drops 20-25 % of what qbridge hands it when 8 unpaced streams run (o1 + o2 received,
//! hb did not send; qbridge forwarded every frame: captures on A, `ha`, `o1`, `o2`, `hb`, B).
//! A stream whose retransmission OVS drops again and again backs off (the same 1448-byte
//! segment dropped 5 times in a row, RTO 6.6 s) until the 30 s stall of [`tcp_transfer`]
//! ends it while the others go on. Below OVS's rate the streams measure the failover, not
//! OVS's capacity; the phase prints what OVS forwarded.
//!
//! OVS runs privately (`support::ovs`), with `other_config:userspace-tso-enable=true` (the
//! hosts' TCP arrives as super-frames; see `netns_stacked_ovs.rs`); it is installed with
//! apt-get when missing, and the test prints why and skips when it cannot be had.
//!
//! `lacp_fallback on` against a far end without LACP (a kernel bridge) falls back to one member
//! after the expiry and carries verified TCP. A member whose interface is missing at start
//! joins when it appears.
//!
//! The active-backup test needs no peer protocol: qbridge's bond of two members to a kernel
//! bridge (no STP; the backup member drops what it receives, so the two links are no loop);
//! the active member's far end is set down mid-transfer and traffic moves to the other.

mod support;

use std::time::{Duration, Instant};

use support::ovs::{ovs_bins, Ovs};
use support::{ip_in, tcp_transfer, wait_until, Host, Lab};

const BATCH_LACP: &str = "\
link add br0 type bridge
link add ha type afpacket dev ha
link set dev ha master br0
link add bo type bond mode 802.3ad lacp_rate fast xmit_hash_policy layer3+4
link add m1 type afpacket dev m1
link add m2 type afpacket dev m2
link set dev m1 master bo
link set dev m2 master bo
link set dev bo master br0
";

const BATCH_AB: &str = "\
link add br0 type bridge
link add ha type afpacket dev ha
link set dev ha master br0
link add bo type bond mode active-backup miimon 50
link add m1 type afpacket dev m1
link add m2 type afpacket dev m2
link set dev m1 master bo
link set dev m2 master bo
link set dev bo master br0
";

/// What A may send across the pull (`tbf` rate): well under what OVS's userspace datapath
/// forwards here with the machine busy (about 0.7 Gbit/s with 20 % loss), so that its drops do
/// not stall a stream in TCP's backoff.
const PULL_RATE: &str = "200mbit";
/// Bytes each of the 8 streams sends across the pull: about 5 s at [`PULL_RATE`].
const PULL_STREAM_BYTES: u64 = 16 << 20;

/// Shapes `h`'s transmit to `rate` with a `tbf` qdisc on its interface (`None`: removes it).
/// The sender's own qdisc queues (TCP's small queues keep it short): nothing is dropped.
fn shape(h: &Host, rate: Option<&str>) {
    let args: Vec<&str> = match rate {
        Some(r) => vec![
            "qdisc", "replace", "dev", &h.ifname, "root", "tbf", "rate", r, "burst", "256kb",
            "latency", "200ms",
        ],
        None => vec!["qdisc", "del", "dev", &h.ifname, "root"],
    };
    support::exec_in(&h.ns, "tc", &args).unwrap_or_else(|e| panic!("tc in {}: {e}", h.name));
}

/// A kernel frame counter of `dev` in `ns` (`/sys/class/net/DEV/statistics/WHAT`).
fn frames(ns: &str, dev: &str, what: &str) -> u64 {
    support::exec_in(
        ns,
        "cat",
        &[&format!("/sys/class/net/{dev}/statistics/{what}")],
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// Frames OVS received from qbridge (o1 and o2) and sent to B (hb): what the peer forwarded.
fn ovs_frames(o_ns: &str) -> (u64, u64) {
    (
        frames(o_ns, "o1", "rx_packets") + frames(o_ns, "o2", "rx_packets"),
        frames(o_ns, "hb", "tx_packets"),
    )
}

/// The kernel's byte counters of `dev` in `ns`: (rx, tx).
fn bytes(ns: &str, dev: &str) -> (u64, u64) {
    let out = ip_in(ns, &["-s", "-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v[0]["stats64"];
    (
        s["rx"]["bytes"].as_u64().unwrap_or(0),
        s["tx"]["bytes"].as_u64().unwrap_or(0),
    )
}

fn tx_bytes(ns: &str, devs: &[&str]) -> Vec<u64> {
    devs.iter().map(|d| bytes(ns, d).1).collect()
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

fn all_distributing(ctl: &support::Ctl, n: usize) -> bool {
    let ms = members(ctl);
    ms.len() == n && ms.iter().all(|(_, c, d)| *c && *d)
}

/// What a ping run saw: packets sent, and each reply's sequence number and receive time
/// (`ping -D`, seconds).
struct PingRun {
    sent: u32,
    replies: Vec<(u32, f64)>,
}

impl PingRun {
    fn received(&self) -> u32 {
        self.replies.len() as u32
    }

    /// The longest run of lost pings: (pings lost in a row, milliseconds between the replies
    /// around it, less one interval: the time nothing came through).
    fn longest_gap(&self, interval_ms: f64) -> (u32, f64) {
        let mut r = self.replies.clone();
        r.sort_by_key(|x| x.0);
        let mut best = (0u32, 0.0f64);
        for w in r.windows(2) {
            let lost = w[1].0 - w[0].0 - 1;
            if lost > best.0 {
                best = (lost, (w[1].1 - w[0].1) * 1000.0 - interval_ms);
            }
        }
        best
    }
}

/// Pings `count` times every `interval_ms` from `from` to `to` (iputils, root: intervals
/// under 200 ms).
fn ping_run(from: &Host, to: &Host, count: u32, interval_ms: u32) -> PingRun {
    let out = support::exec_in(
        &from.ns,
        "ping",
        &[
            "-n",
            "-D",
            "-c",
            &count.to_string(),
            "-i",
            &format!("0.{interval_ms:03}"),
            "-W",
            "1",
            &to.ip,
        ],
    )
    .unwrap_or_else(|e| e);
    let mut replies = Vec::new();
    for l in out.lines() {
        let ts = l
            .strip_prefix('[')
            .and_then(|r| r.split(']').next())
            .and_then(|t| t.parse::<f64>().ok());
        let seq = l
            .split("icmp_seq=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<u32>().ok());
        if let (Some(ts), Some(seq)) = (ts, seq) {
            replies.push((seq, ts));
        }
    }
    let sent = out
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    PingRun { sent, replies }
}

/// Which of `devs` (in `ns`) carries the ping flow from `from` to `to`: the one whose
/// transmit bytes grow by 200 pings' worth.
fn ping_member(ns: &str, devs: &[&str], from: &Host, to: &Host) -> usize {
    let before = tx_bytes(ns, devs);
    let rx = ping_run(from, to, 200, 2).received();
    assert!(rx >= 190, "pings before the pull: {rx}/200");
    let after = tx_bytes(ns, devs);
    let grew: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    (0..devs.len()).max_by_key(|&i| grew[i]).unwrap_or(0)
}

#[test]
fn lacp_bond_with_open_vswitch_balances_and_fails_over() {
    skip_unless_netns!();
    let _serial = support::serial();
    let bins = match ovs_bins() {
        Ok(b) => b,
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
    let mut lab = Lab::new("qbb-bond-ovs");
    let q_ns = lab.netns("qbbq").unwrap();
    let o_ns = lab.netns("qbbo").unwrap();
    let a = lab.host("qbba", "10.9.0.1/24", &q_ns, "ha").unwrap();
    let b = lab.host("qbbb", "10.9.0.2/24", &o_ns, "hb").unwrap();
    lab.veth(&q_ns, "m1", &o_ns, "o1").unwrap();
    lab.veth(&q_ns, "m2", &o_ns, "o2").unwrap();
    let ovs = match Ovs::start(
        bins,
        &o_ns,
        lab.dir.join("ovs"),
        &["other_config:userspace-tso-enable=true"],
    ) {
        Ok(o) => o,
        Err(reason) => {
            eprintln!("SKIPPED: Open vSwitch cannot be started here: {reason}");
            return;
        }
    };
    ovs.vsctl(&[
        "add-br",
        "bx",
        "--",
        "set",
        "bridge",
        "bx",
        "datapath_type=netdev",
        "--",
        "add-bond",
        "bx",
        "bond0",
        "o1",
        "o2",
        "bond_mode=balance-tcp",
        "lacp=active",
        "other_config:lacp-time=fast",
        "--",
        "add-port",
        "bx",
        "hb",
    ])
    .unwrap();
    let ctl = lab.daemon(&q_ns, BATCH_LACP).unwrap();

    // LACP: collecting and distributing on both ends (the 2 s aggregate wait, fast PDUs).
    let ovs_ready = || {
        let lacp = ovs.appctl(&["lacp/show", "bond0"]).unwrap_or_default();
        let bond = ovs.appctl(&["bond/show", "bond0"]).unwrap_or_default();
        lacp.contains("status: active negotiated")
            && lacp
                .matches("partner state: activity timeout aggregation synchronized collecting distributing")
                .count()
                == 2
            && bond.contains("member o1: enabled")
            && bond.contains("member o2: enabled")
    };
    let started = Instant::now();
    let negotiated = wait_until(Duration::from_secs(15), || {
        all_distributing(&ctl, 2) && ovs_ready()
    });
    let t_lacp = started.elapsed();
    assert!(
        negotiated,
        "LACP did not converge:\n{}\n{}\n{}",
        ctl.cmd(&["-d", "link", "show", "dev", "bo"])
            .unwrap_or_default(),
        ovs.appctl(&["lacp/show", "bond0"]).unwrap_or_default(),
        ovs.appctl(&["bond/show", "bond0"]).unwrap_or_default()
    );
    eprintln!("LACP collecting+distributing on both ends after {t_lacp:.2?}");
    let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap();
    let bond = &v[0]["bond"];
    assert_eq!(bond["mode"], "802.3ad");
    assert_eq!(bond["xmit_hash_policy"], "layer3+4");
    assert_eq!(bond["carrier"], "On");
    for m in bond["members"].as_array().unwrap() {
        let words: Vec<&str> = m["partner_state"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w.as_str())
            .collect();
        assert_eq!(
            words,
            [
                "activity",
                "timeout",
                "aggregation",
                "synchronized",
                "collecting",
                "distributing"
            ],
            "partner state of {}",
            m["name"]
        );
        assert_eq!(m["mux_state"], "CollectingDistributing");
    }
    support::assert_ping(&a, &b, 5);

    // 16 streams use both links. The members are picked by each stream's hash (ports chosen by
    // the kernel), so the test can only make an uneven split unlikely: with 8 streams all on one
    // member 1 run in 128 (seen once in CI); with 16, 1 in 32 768.
    let devs = ["m1", "m2"];
    let before = tx_bytes(&q_ns, &devs);
    let t0 = Instant::now();
    let ovs_before = ovs_frames(&o_ns);
    let ovs_said = |before: (u64, u64)| {
        let (rx, tx) = ovs_frames(&o_ns);
        format!(
            "OVS received {} frames from qbridge (o1 + o2) and sent {} to B (hb)",
            rx - before.0,
            tx - before.1
        )
    };
    let total = support::join_streams(
        support::tcp_streams(&a, &b, 16, 16 << 20),
        "16 streams A -> B",
        &|| ovs_said(ovs_before),
    );
    let secs = t0.elapsed().as_secs_f64();
    let after = tx_bytes(&q_ns, &devs);
    let per: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
    eprintln!(
        "16 streams, {total} bytes verified in {secs:.2} s ({:.2} Gbit/s); member tx bytes: m1 {} \
         m2 {}",
        total as f64 * 8.0 / secs / 1e9,
        per[0],
        per[1]
    );
    for (d, n) in devs.iter().zip(&per) {
        assert!(
            *n > total / 20,
            "member {d} carried {n} of {total} bytes: the flows did not spread"
        );
    }
    assert!(
        per[0] + per[1] >= total,
        "members carried less than the data"
    );
    // qbridge's own per-member counters agree: each member sent its share.
    let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap();
    let own: Vec<u64> = v[0]["runtime"]["bond_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tx_bytes"].as_u64().unwrap_or(0))
        .collect();
    eprintln!(
        "qbridge's member counters: tx bytes m1 {} m2 {}",
        own[0], own[1]
    );
    for (d, n) in devs.iter().zip(&own) {
        assert!(*n > total / 20, "qbridge counted {n} bytes on {d}");
    }

    // Pull the link that carries the ping flow, mid-transfer.
    let k = ping_member(&q_ns, &devs, &a, &b);
    let (pulled, far) = (devs[k], ["o1", "o2"][k]);
    eprintln!(
        "ping flow on {pulled}: pulling {far} (OVS end) mid-transfer, A sending at most \
         {PULL_RATE}"
    );
    shape(&a, Some(PULL_RATE));
    let ovs_before = ovs_frames(&o_ns);
    let hs = support::tcp_streams(&a, &b, 8, PULL_STREAM_BYTES);
    let pinger = {
        let (f, t) = (a.clone(), b.clone());
        std::thread::spawn(move || ping_run(&f, &t, 1500, 2))
    };
    std::thread::sleep(Duration::from_millis(700));
    let running = hs.iter().filter(|h| !h.is_finished()).count();
    ip_in(&o_ns, &["link", "set", far, "down"]).unwrap();
    let total = support::join_streams(hs, "8 streams across the pull", &|| ovs_said(ovs_before));
    eprintln!("across the pull: {}", ovs_said(ovs_before));
    shape(&a, None);
    let run = pinger.join().unwrap();
    let (sent, got) = (run.sent, run.received());
    let (gap, gap_ms) = run.longest_gap(2.0);
    eprintln!(
        "{running} of 8 streams were running at the pull; all 8 verified ({total} bytes); \
         pings every 2 ms: {got}/{sent} answered; longest run lost: {gap} pings (~{} ms of \
         sends), {gap_ms:.0} ms between the replies around it (the loss window lies between; \
         the second includes ping's own stalls under load)",
        gap * 2
    );
    assert_eq!(
        running, 8,
        "the streams ended before the pull: make them longer"
    );
    assert!(sent >= 1000, "ping sent only {sent}");
    let ms = members(&ctl);
    let m = ms.iter().find(|(n, _, _)| n == pulled).unwrap();
    assert!(!m.1 && !m.2, "{pulled} still carries traffic: {ms:?}");
    let bond = ovs.appctl(&["bond/show", "bond0"]).unwrap_or_default();
    assert!(bond.contains(&format!("member {far}: disabled")), "{bond}");
    // With the eBPF fast path on, the program serves the bond too (decision 74): its members'
    // frames enter as the bond's, flows to the bond pick their member by the pipeline's hash,
    // and the failover moved them with the bond's table.
    let fp = ctl.json(&["show", "fast-path"]).unwrap();
    if fp["state"] == "on" {
        assert_eq!(
            fp["ports"],
            serde_json::json!(["bo", "ha"]),
            "show fast-path: {fp}"
        );
        assert!(
            fp["installed"].as_u64().unwrap_or(0) > 0 && fp["hits"].as_u64().unwrap_or(0) > 0,
            "no flow to or from the bond was made and hit: {fp}"
        );
    }
    assert!(
        gap * 2 <= 500,
        "{gap} pings lost in a row: a loss window above 500 ms"
    );

    // The link comes back and rejoins.
    ip_in(&o_ns, &["link", "set", far, "up"]).unwrap();
    let t1 = Instant::now();
    assert!(
        wait_until(Duration::from_secs(15), || all_distributing(&ctl, 2)
            && ovs_ready()),
        "{pulled} did not rejoin:\n{}",
        ctl.cmd(&["-d", "link", "show", "dev", "bo"])
            .unwrap_or_default()
    );
    eprintln!(
        "{pulled} rejoined the aggregate {:.2?} after its link came back",
        t1.elapsed()
    );
    support::assert_ping(&a, &b, 5);

    // Two C-VLANs inside one S-VLAN over the bond: qbridge's own stacked devices on the bond
    // (bo.100: 802.1ad 100, bo.100.10 and bo.100.20: 802.1Q 10 and 20) send 64 UDP flows each;
    // each C-VLAN's flows leave by both members (the hash reads through both tags).
    for line in [
        "link add link bo name bo.100 type vlan protocol 802.1ad id 100",
        "link add link bo.100 name bo.100.10 type vlan id 10",
        "link add link bo.100 name bo.100.20 type vlan id 20",
    ] {
        let words: Vec<&str> = line.split(' ').collect();
        ctl.cmd(&words).unwrap();
    }
    for (dev, me, peer, mac) in [
        (
            "bo.100.10",
            "10.10.0.1/24",
            "10.10.0.2",
            "02:00:00:00:10:02",
        ),
        (
            "bo.100.20",
            "10.20.0.1/24",
            "10.20.0.2",
            "02:00:00:00:20:02",
        ),
    ] {
        ip_in(&q_ns, &["addr", "add", me, "dev", dev]).unwrap();
        ip_in(
            &q_ns,
            &[
                "neigh",
                "replace",
                peer,
                "lladdr",
                mac,
                "dev",
                dev,
                "nud",
                "permanent",
            ],
        )
        .unwrap();
    }
    // Two tags on the bond: its members' device MTUs grow with its envelope (1500 + 8).
    for d in devs {
        let out = ip_in(&q_ns, &["-j", "link", "show", "dev", d]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let mtu = v[0]["mtu"].as_u64().unwrap_or(0);
        assert!(
            mtu >= 1508,
            "member {d}: device MTU {mtu} after two tags on the bond"
        );
    }
    let far = ["o1", "o2"];
    for (cvid, src, dst) in [
        (10, "10.10.0.1", "10.10.0.2"),
        (20, "10.20.0.1", "10.20.0.2"),
    ] {
        let before: Vec<u64> = far.iter().map(|d| bytes(&o_ns, d).0).collect();
        let (s, d) = (src.to_string(), dst.to_string());
        qbridge_io::netns::run_in_netns(&q_ns, move || {
            let sock = std::net::UdpSocket::bind((s.as_str(), 0)).unwrap();
            for round in 0..20u8 {
                for port in 0..64u16 {
                    let _ = sock.send_to(&[round; 1000], (d.as_str(), 6000 + port));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let got: Vec<u64> = far
            .iter()
            .zip(&before)
            .map(|(d, b)| bytes(&o_ns, d).0 - b)
            .collect();
        eprintln!(
            "C-VLAN {cvid} in S-VLAN 100, 64 UDP flows x 20: OVS received {} bytes on o1, {} on o2",
            got[0], got[1]
        );
        let all = got[0] + got[1];
        assert!(all >= 64 * 20 * 1000, "the flows did not arrive: {got:?}");
        for (d, n) in far.iter().zip(&got) {
            assert!(
                *n * 5 >= all,
                "{d} got {n} of {all} bytes: C-VLAN {cvid}'s flows did not spread over the members"
            );
        }
    }
    drop(ovs);
}

#[test]
fn active_backup_bond_fails_over_without_a_protocol() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qbb-bond-ab");
    let q_ns = lab.netns("qbbq").unwrap();
    let f_ns = lab.netns("qbbf").unwrap();
    let a = lab.host("qbba", "10.9.1.1/24", &q_ns, "ha").unwrap();
    let b = lab.host("qbbb", "10.9.1.2/24", &f_ns, "hb").unwrap();
    lab.veth(&q_ns, "m1", &f_ns, "p1").unwrap();
    lab.veth(&q_ns, "m2", &f_ns, "p2").unwrap();
    // The far end: a kernel bridge (no STP) over p1, p2 and B's link.
    ip_in(
        &f_ns,
        &["link", "add", "kbr", "type", "bridge", "stp_state", "0"],
    )
    .unwrap();
    for d in ["p1", "p2", "hb"] {
        ip_in(&f_ns, &["link", "set", d, "master", "kbr"]).unwrap();
    }
    ip_in(&f_ns, &["link", "set", "kbr", "up"]).unwrap();
    let ctl = lab.daemon(&q_ns, BATCH_AB).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || {
            let ms = members(&ctl);
            ms.len() == 2 && ms[0].1 && !ms[1].1
        }),
        "m1 is not the active member: {:?}",
        members(&ctl)
    );
    support::assert_ping(&a, &b, 5);
    let devs = ["m1", "m2"];
    let before = tx_bytes(&q_ns, &devs);
    let hs = support::tcp_streams(&a, &b, 8, 64 << 20);
    let pinger = {
        let (f, t) = (a.clone(), b.clone());
        std::thread::spawn(move || ping_run(&f, &t, 1000, 2))
    };
    std::thread::sleep(Duration::from_millis(500));
    let running = hs.iter().filter(|h| !h.is_finished()).count();
    let at_pull = tx_bytes(&q_ns, &devs);
    ip_in(&f_ns, &["link", "set", "p1", "down"]).unwrap();
    let total = support::join_streams(hs, "8 streams across the failover", &String::new);
    let after = tx_bytes(&q_ns, &devs);
    let m1 = at_pull[0] - before[0];
    let m2 = after[1] - at_pull[1];
    eprintln!(
        "{running} of 8 streams running at the pull; {total} bytes verified; m1 carried {m1} \
         bytes before, m2 {m2} after"
    );
    let run = pinger.join().unwrap();
    let (gap, gap_ms) = run.longest_gap(2.0);
    eprintln!(
        "pings every 2 ms: {}/{} answered; longest run lost: {gap} pings (~{} ms of sends), \
         {gap_ms:.0} ms between the replies around it (miimon 50)",
        run.received(),
        run.sent,
        gap * 2
    );
    assert!(
        gap * 2 <= 500,
        "{gap} pings lost in a row: a loss window above 500 ms"
    );
    assert_eq!(running, 8, "the streams ended before the pull");
    assert!(m1 > 1 << 20, "m1 carried {m1} bytes before the pull");
    assert!(m2 > 1 << 20, "m2 carried {m2} bytes after the pull");
    let ms = members(&ctl);
    assert!(!ms[0].1 && ms[1].1 && ms[1].2, "after failover: {ms:?}");
    support::assert_ping(&a, &b, 5);
}

const BATCH_FALLBACK: &str = "\
link add br0 type bridge
link add ha type afpacket dev ha
link set dev ha master br0
link add bo type bond mode 802.3ad lacp_rate fast lacp_fallback on
link add m1 type afpacket dev m1
link add m2 type afpacket dev m2
link set dev m1 master bo
link set dev m2 master bo
link set dev bo master br0
";

/// An 802.3ad bond whose far end speaks no LACP (a kernel bridge): without `lacp_fallback`
/// nothing would pass; with it, once a member has waited out the expiry (3 s at the fast
/// rate) the bond carries traffic on one member, as Open vSwitch's `lacp-fallback-ab`.
#[test]
fn lacp_fallback_carries_traffic_without_a_partner() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qbb-bond-fb");
    let q_ns = lab.netns("qbbq").unwrap();
    let f_ns = lab.netns("qbbf").unwrap();
    let a = lab.host("qbba", "10.9.2.1/24", &q_ns, "ha").unwrap();
    let b = lab.host("qbbb", "10.9.2.2/24", &f_ns, "hb").unwrap();
    lab.veth(&q_ns, "m1", &f_ns, "p1").unwrap();
    lab.veth(&q_ns, "m2", &f_ns, "p2").unwrap();
    ip_in(
        &f_ns,
        &["link", "add", "kbr", "type", "bridge", "stp_state", "0"],
    )
    .unwrap();
    for d in ["p1", "p2", "hb"] {
        ip_in(&f_ns, &["link", "set", d, "master", "kbr"]).unwrap();
    }
    ip_in(&f_ns, &["link", "set", "kbr", "up"]).unwrap();
    let ctl = lab.daemon(&q_ns, BATCH_FALLBACK).unwrap();
    let started = Instant::now();
    let fell_back = wait_until(Duration::from_secs(10), || {
        let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap_or_default();
        v[0]["bond"]["fallback_active"] == "On" && v[0]["bond"]["carrier"] == "On"
    });
    let ms = members(&ctl);
    assert!(
        fell_back,
        "no fallback: {}",
        ctl.cmd(&["-d", "link", "show", "dev", "bo"])
            .unwrap_or_default()
    );
    eprintln!(
        "fallback to active-backup {:.2?} after start; members {ms:?}",
        started.elapsed()
    );
    assert_eq!(
        ms.iter().filter(|(_, c, d)| *c && *d).count(),
        1,
        "fallback carries on one member: {ms:?}"
    );
    support::assert_ping(&a, &b, 5);
    let r = tcp_transfer(&a, &b, 16 << 20, Duration::from_secs(30)).unwrap();
    eprintln!("{} bytes verified over the fallback member", r.bytes);
}

/// A member whose interface does not exist yet (a daemon restored at boot) does not keep the
/// daemon from starting: the bond runs on the other member, and takes the missing one in
/// when its interface appears; then a failover to it works.
#[test]
fn a_missing_member_joins_when_its_interface_appears() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qbb-bond-late");
    let q_ns = lab.netns("qbbq").unwrap();
    let f_ns = lab.netns("qbbf").unwrap();
    let a = lab.host("qbba", "10.9.3.1/24", &q_ns, "ha").unwrap();
    let b = lab.host("qbbb", "10.9.3.2/24", &f_ns, "hb").unwrap();
    lab.veth(&q_ns, "m1", &f_ns, "p1").unwrap();
    ip_in(
        &f_ns,
        &["link", "add", "kbr", "type", "bridge", "stp_state", "0"],
    )
    .unwrap();
    for d in ["p1", "hb"] {
        ip_in(&f_ns, &["link", "set", d, "master", "kbr"]).unwrap();
    }
    ip_in(&f_ns, &["link", "set", "kbr", "up"]).unwrap();
    let ctl = lab.daemon(&q_ns, BATCH_AB).unwrap();
    support::assert_ping(&a, &b, 3);
    let link_of = |name: &str| {
        let v = ctl.json(&["link", "show", "dev", "bo"]).unwrap_or_default();
        v[0]["bond"]["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == name).cloned())
            .map(|m| m["link"].clone())
            .unwrap_or_default()
    };
    assert_eq!(link_of("m2"), "Down");
    lab.veth(&q_ns, "m2", &f_ns, "p2").unwrap();
    ip_in(&f_ns, &["link", "set", "p2", "master", "kbr"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || link_of("m2") != "Down"),
        "m2 did not come up: {}",
        ctl.cmd(&["-d", "link", "show", "dev", "bo"])
            .unwrap_or_default()
    );
    ip_in(&f_ns, &["link", "set", "p1", "down"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || {
            let ms = members(&ctl);
            ms.len() == 2 && !ms[0].1 && ms[1].1
        }),
        "no failover to m2: {:?}",
        members(&ctl)
    );
    support::assert_ping(&a, &b, 3);
}
