//! Spanning tree on real loops (issue 19): three qbridge daemons in a triangle of veth
//! links, each in its own namespace with one host behind it. With `stp_state 1` the ring
//! converges with exactly one port discarding (on the bridge the priorities say), a
//! broadcast crosses the ring once (a loop would repeat it without end), pings work; pulling
//! a link on the active path moves traffic to the blocked one (the loss window is printed);
//! BPDU guard shuts an edge port that hears a BPDU and says so.
//!
//! Runs as root with `ip netns`; skipped (with the reason) otherwise.

mod support;

use std::time::{Duration, Instant};
use support::*;

/// Daemon `i`'s batch: bridge br0 (priority `prio`, fast timers), ring ports `r_a`/`r_b`
/// on veths `ra`/`rb`, host port `h` on veth `hv`.
fn ring_batch(prio: u32) -> String {
    format!(
        "link add br0 type bridge priority {prio} hello_time 1 forward_delay 4 max_age 6\n\
         link add r_a type afpacket dev ra\n\
         link add r_b type afpacket dev rb\n\
         link add h type afpacket dev hv\n\
         link set dev r_a master br0\n\
         link set dev r_b master br0\n\
         link set dev h master br0\n\
         link set dev h edge on\n\
         link set dev br0 type bridge stp_state 1\n"
    )
}

/// (role, state) of each port of daemon `c`'s br0, by port name.
fn roles(c: &Ctl) -> Vec<(String, String, String)> {
    let v = c.json(&["stp", "show", "dev", "br0"]).unwrap_or_default();
    v[0]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["port"].as_str().unwrap_or("").to_string(),
                p["role"].as_str().unwrap_or("").to_string(),
                p["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn ring_ports(ctls: &[Ctl]) -> Vec<(usize, String, String, String)> {
    ctls.iter()
        .enumerate()
        .flat_map(|(i, c)| {
            roles(c)
                .into_iter()
                .filter(|(p, _, _)| p.starts_with("r_"))
                .map(move |(p, r, s)| (i, p, r, s))
        })
        .collect()
}

/// A distinctive broadcast frame from `src`.
fn broadcast(src: &str, n: u16) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&parse_mac(src));
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    f.extend_from_slice(&n.to_be_bytes());
    f.resize(60, 0x5a);
    f
}

/// An RST BPDU from `src` (802.1D-2004 9.3.3; any content: BPDU guard acts on hearing one).
fn rst_bpdu(src: &str) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0];
    f.extend_from_slice(&parse_mac(src));
    f.extend_from_slice(&[0x00, 0x27, 0x42, 0x42, 0x03]); // 802.3 length 39, LLC
    f.extend_from_slice(&[0, 0, 2, 2, 0x3c]); // protocol 0, version 2, type RST, flags
    let id = [0x10, 0, 0x02, 0, 0, 0, 0, 0x99];
    f.extend_from_slice(&id); // root
    f.extend_from_slice(&[0, 0, 0, 0]); // root path cost
    f.extend_from_slice(&id); // bridge
    f.extend_from_slice(&[0x80, 0x01]); // port id
    for secs in [0u8, 20, 2, 15] {
        f.extend_from_slice(&[secs, 0]); // message age, max age, hello, forward delay (1/256 s)
    }
    f.push(0); // version 1 length
    f.resize(60, 0);
    f
}

#[test]
fn triangle_of_qbridge_daemons() {
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let _g = serial();
    let mut lab = Lab::new("stp3");
    let sw: Vec<String> = (1..=3)
        .map(|i| lab.netns(&format!("s{i}")).unwrap())
        .collect();
    // Ring: s1.rb - s2.ra, s2.rb - s3.ra, s3.rb - s1.ra.
    lab.veth(&sw[0], "rb", &sw[1], "ra").unwrap();
    lab.veth(&sw[1], "rb", &sw[2], "ra").unwrap();
    lab.veth(&sw[2], "rb", &sw[0], "ra").unwrap();
    let hosts: Vec<Host> = (0..3)
        .map(|i| {
            lab.host(
                &format!("h{}", i + 1),
                &format!("10.9.0.{}/24", i + 1),
                &sw[i],
                "hv",
            )
            .unwrap()
        })
        .collect();
    let start = Instant::now();
    // s1 is root (4096), s2 next (8192): s3's port towards s2 (its ra) is the alternate.
    let ctls: Vec<Ctl> = [4096, 8192, 32768]
        .iter()
        .enumerate()
        .map(|(i, p)| lab.daemon(&sw[i], &ring_batch(*p)).unwrap())
        .collect();
    let converged = wait_until(Duration::from_secs(30), || {
        let ports = ring_ports(&ctls);
        ports.len() == 6
            && ports.iter().filter(|p| p.3 == "forwarding").count() == 5
            && ports.iter().filter(|p| p.3 == "discarding").count() == 1
    });
    let ports = ring_ports(&ctls);
    assert!(converged, "no convergence: {ports:?}");
    eprintln!(
        "triangle: converged in {:.1} s after the daemons started",
        start.elapsed().as_secs_f64()
    );
    let blocked: Vec<_> = ports.iter().filter(|p| p.3 == "discarding").collect();
    assert_eq!(
        (blocked[0].0, blocked[0].1.as_str()),
        (2, "r_a"),
        "{ports:?}"
    );
    assert_eq!(blocked[0].2, "alternate", "{ports:?}");
    let s3 = ctls[2].cmd(&["stp", "show"]).unwrap();
    assert!(s3.contains("via r_b"), "{s3}");

    // Wait for the host ports (edge) and the FDBs, then: pings across the ring.
    assert!(wait_until(Duration::from_secs(10), || ping_ok(
        &hosts[0],
        &hosts[2].ip
    )));
    assert_ping(&hosts[0], &hosts[1], 20);
    assert_ping(&hosts[1], &hosts[2], 20);

    // A broadcast crosses the ring once: 100 frames from h1 reach h3 100 times (a loop
    // would deliver them again and again).
    let cap = Capture::start(&hosts[2].ns, "eth0", 0).unwrap();
    let frames: Vec<Vec<u8>> = (0..100).map(|n| broadcast(&hosts[0].mac, n)).collect();
    inject(&hosts[0].ns, "eth0", &frames).unwrap();
    // All 100 arrive (then `finish`'s grace would catch the copies a loop adds).
    assert!(cap.wait_from(&hosts[0].mac, 100, Duration::from_secs(10)));
    let got = cap.finish().unwrap();
    assert_eq!(got.count_from(&[&hosts[0].mac]), 100, "{}", got.summary());

    // Pull the active link s1-s3 (s1.ra - s3.rb) while h1 pings h3 every 10 ms.
    let (h1, h3ip) = (hosts[0].clone(), hosts[2].ip.clone());
    let pinger = std::thread::spawn(move || ping(&h1, &h3ip, 400));
    std::thread::sleep(Duration::from_millis(1000));
    ip_in(&sw[0], &["link", "set", "ra", "down"]).unwrap();
    let r = pinger.join().unwrap();
    let lost = r.transmitted.saturating_sub(r.received);
    eprintln!(
        "triangle: link pulled; {lost} of {} pings (10 ms apart) lost: a loss window of about {} ms",
        r.transmitted,
        lost * 10
    );
    assert!(r.received > 0 && r.transmitted >= 300, "{}", r.output);
    let after = ring_ports(&ctls);
    let s3_ra = after.iter().find(|p| p.0 == 2 && p.1 == "r_a").unwrap();
    assert_eq!(
        (s3_ra.2.as_str(), s3_ra.3.as_str()),
        ("root", "forwarding"),
        "{after:?}"
    );
    assert!(
        ping_ok(&hosts[0], &hosts[2].ip),
        "no path after the failover"
    );

    // BPDU guard: h2's port (edge) hears a BPDU and is shut, and says so.
    ctls[1]
        .cmd(&["link", "set", "dev", "h", "guard", "on"])
        .unwrap();
    inject(&hosts[1].ns, "eth0", &[rst_bpdu(&hosts[1].mac)]).unwrap();
    assert!(
        wait_until(Duration::from_secs(3), || {
            roles(&ctls[1])
                .iter()
                .any(|(p, r, s)| p == "h" && r == "disabled" && s == "discarding")
        }),
        "{:?}",
        roles(&ctls[1])
    );
    assert!(
        !ping_ok(&hosts[1], &hosts[0].ip),
        "a shut port still forwards"
    );
    assert!(
        lab.daemon_log(1).contains("BPDU guard shut h"),
        "{}",
        lab.daemon_log(1)
    );
    // `guard off` re-admits it.
    ctls[1]
        .cmd(&["link", "set", "dev", "h", "guard", "off"])
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || ping_ok(
        &hosts[1],
        &hosts[0].ip
    )));
    assert!(lab.stop_daemons(), "a daemon did not stop cleanly");
}

/// qbridge (namespace `q`: br0 at `prio`, ports p1, p2 on veths to `k1`, `k2` in the peer's
/// namespace, host hq behind port h) and a peer namespace with those two veth ends and a
/// host hk behind `kh`: a loop of two links between qbridge and the peer bridge.
struct PeerRing {
    lab: Lab,
    q: String,
    peer: String,
    hq: Host,
    hk: Host,
}

fn peer_ring(name: &str) -> PeerRing {
    let mut lab = Lab::new(name);
    let q = lab.netns("q").unwrap();
    let peer = lab.netns("peer").unwrap();
    lab.veth(&q, "qa", &peer, "k1").unwrap();
    lab.veth(&q, "qb", &peer, "k2").unwrap();
    let hq = lab.host("hq", "10.9.1.1/24", &q, "hv").unwrap();
    let hk = lab.host("hk", "10.9.1.2/24", &peer, "kh").unwrap();
    PeerRing {
        lab,
        q,
        peer,
        hq,
        hk,
    }
}

fn qbridge_ring_batch(prio: u32) -> String {
    format!(
        "link add br0 type bridge priority {prio} hello_time 1 forward_delay 4 max_age 6\n\
         link add p1 type afpacket dev qa\n\
         link add p2 type afpacket dev qb\n\
         link add h type afpacket dev hv\n\
         link set dev p1 master br0\n\
         link set dev p2 master br0\n\
         link set dev h master br0\n\
         link set dev h edge on\n\
         link set dev br0 type bridge stp_state 1\n"
    )
}

/// The checks every ring with a peer makes once the peer is root: one of qbridge's p1, p2
/// is root port and forwards, the other is the alternate and discards (which one follows the
/// peer's port identifiers); pings cross; 100 broadcasts from hq reach hk 100 times. Returns
/// the seconds convergence took and the root port's name.
fn check_peer_is_root(r: &PeerRing, c: &Ctl, started: Instant, sends: &str) -> (f64, String) {
    let speaks = |c: &Ctl| {
        let j = c.json(&["stp", "show"]).unwrap_or_default();
        j[0]["ports"].as_array().is_some_and(|ports| {
            ports
                .iter()
                .filter(|p| p["port"] == "p1" || p["port"] == "p2")
                .all(|p| p["sends"] == sends)
        })
    };
    // A legacy neighbour is recognised once the migration delay (3 s) has passed.
    let has = |ro: &[(String, String, String)], port: &str, role: &str, state: &str| {
        ro.iter()
            .any(|(p, r, s)| p == port && r == role && s == state)
    };
    let ok = wait_until(Duration::from_secs(40), || {
        let ro = roles(c);
        let a = has(&ro, "p1", "root", "forwarding") && has(&ro, "p2", "alternate", "discarding");
        let b = has(&ro, "p2", "root", "forwarding") && has(&ro, "p1", "alternate", "discarding");
        (a || b) && speaks(c)
    });
    let secs = started.elapsed().as_secs_f64();
    let show = c.cmd(&["stp", "show"]).unwrap_or_default();
    assert!(ok, "qbridge did not take the peer as root:\n{show}");
    let j = c.json(&["stp", "show"]).unwrap();
    for p in j[0]["ports"].as_array().unwrap() {
        if p["port"] == "p1" || p["port"] == "p2" {
            assert_eq!(p["sends"], sends, "{show}");
        }
    }
    assert_eq!(j[0]["root"], false, "{show}");
    assert!(
        wait_until(Duration::from_secs(15), || ping_ok(&r.hq, &r.hk.ip)),
        "{show}"
    );
    eprintln!(
        "  qbridge's ports settled {secs:.1} s after it started; first ping through at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_ping(&r.hq, &r.hk, 20);
    let cap = Capture::start(&r.hk.ns, "eth0", 0).unwrap();
    let frames: Vec<Vec<u8>> = (0..100).map(|n| broadcast(&r.hq.mac, n)).collect();
    inject(&r.hq.ns, "eth0", &frames).unwrap();
    assert!(cap.wait_from(&r.hq.mac, 100, Duration::from_secs(10)));
    let got = cap.finish().unwrap();
    assert_eq!(got.count_from(&[&r.hq.mac]), 100, "{}", got.summary());
    let root = j[0]["root_port"].as_str().unwrap().to_string();
    (secs, root)
}

/// Pulls the link of `active` (the root port) while hq pings hk every 10 ms; the other port
/// must become root port and forward. Returns the pings lost.
fn pull_active_link(r: &PeerRing, c: &Ctl, active: &str, pings: u32) -> u32 {
    let (veth, other) = if active == "p1" {
        ("qa", "p2")
    } else {
        ("qb", "p1")
    };
    let (h, ip) = (r.hq.clone(), r.hk.ip.clone());
    let pinger = std::thread::spawn(move || ping(&h, &ip, pings));
    std::thread::sleep(Duration::from_millis(1000));
    ip_in(&r.q, &["link", "set", veth, "down"]).unwrap();
    let rep = pinger.join().unwrap();
    assert!(rep.received > 0, "{}", rep.output);
    assert!(
        wait_until(Duration::from_secs(40), || roles(c)
            .iter()
            .any(|(p, r, s)| p == other && r == "root" && s == "forwarding")),
        "{:?}",
        roles(c)
    );
    assert!(wait_until(Duration::from_secs(40), || ping_ok(
        &r.hq, &r.hk.ip
    )));
    rep.transmitted.saturating_sub(rep.received)
}

/// A kernel bridge at `stp_state 1` (legacy 802.1D) as root of the ring: qbridge speaks
/// 802.1D to it on both ports (RSTP's Port Protocol Migration), blocks its alternate.
#[test]
fn ring_with_a_kernel_bridge_running_802_1d() {
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let _g = serial();
    let r = peer_ring("stpk");
    // Kernel times are in centiseconds: forward delay 4 s, hello 1 s, max age 6 s.
    ip_in(
        &r.peer,
        &[
            "link",
            "add",
            "kbr",
            "type",
            "bridge",
            "stp_state",
            "1",
            "priority",
            "4096",
            "forward_delay",
            "400",
            "hello_time",
            "100",
            "max_age",
            "600",
        ],
    )
    .unwrap();
    for dev in ["k1", "k2", "kh"] {
        ip_in(&r.peer, &["link", "set", dev, "master", "kbr"]).unwrap();
    }
    ip_in(&r.peer, &["link", "set", "kbr", "up"]).unwrap();
    let started = Instant::now();
    let mut lab = r.lab;
    let c = lab.daemon(&r.q, &qbridge_ring_batch(32768)).unwrap();
    let r = PeerRing { lab, ..r };
    let (secs, active) = check_peer_is_root(&r, &c, started, "stp");
    eprintln!(
        "kernel bridge ring: qbridge converged in {secs:.1} s (802.1D peer, forward delay 4 s)"
    );
    // The kernel's view: both its ring ports forward (designated); no port blocks on its side.
    let kstate = exec_in(&r.peer, "bridge", &["link", "show"]).unwrap();
    for dev in ["k1", "k2"] {
        let line = kstate
            .lines()
            .find(|l| l.contains(&format!(" {dev}@")) || l.contains(&format!(" {dev}:")))
            .unwrap_or_else(|| panic!("no {dev} in bridge link show:\n{kstate}"));
        assert!(line.contains("state forwarding"), "{kstate}");
    }
    let lost = pull_active_link(&r, &c, &active, 1200);
    eprintln!(
        "kernel bridge ring: {active} pulled; {lost} pings (10 ms apart) lost: a loss window of about {} ms",
        lost * 10
    );
}

/// Open vSwitch (userspace datapath, `rstp_enable=true`) as root of the ring: RSTP on both
/// sides, qbridge's alternate blocks; pulling the active link fails over in RSTP time.
#[test]
fn ring_with_open_vswitch_rstp() {
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let _g = serial();
    let bins = match support::ovs::ovs_bins() {
        Ok(b) => b,
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
    let r = peer_ring("stpo");
    let ovs = match support::ovs::Ovs::start(
        bins,
        &r.peer,
        r.lab.dir.join("ovs"),
        &["other_config:vlan-limit=2"],
    ) {
        Ok(o) => o,
        Err(reason) => {
            eprintln!("SKIPPED: Open vSwitch cannot be started here: {reason}");
            return;
        }
    };
    ovs.vsctl(&[
        "add-br",
        "obr",
        "--",
        "set",
        "bridge",
        "obr",
        "datapath_type=netdev",
        "rstp_enable=true",
        "other_config:rstp-priority=4096",
        "other_config:rstp-hello-time=1",
        "other_config:rstp-forward-delay=4",
        "other_config:rstp-max-age=6",
        "--",
        "add-port",
        "obr",
        "k1",
        "--",
        "add-port",
        "obr",
        "k2",
        "--",
        "add-port",
        "obr",
        "kh",
    ])
    .unwrap();
    let started = Instant::now();
    let mut lab = r.lab;
    let c = lab.daemon(&r.q, &qbridge_ring_batch(32768)).unwrap();
    let r = PeerRing { lab, ..r };
    let (secs, active) = check_peer_is_root(&r, &c, started, "rstp");
    eprintln!("Open vSwitch ring: qbridge converged in {secs:.1} s (RSTP)");
    let show = ovs.appctl(&["rstp/show"]).unwrap();
    assert!(show.contains("This bridge is the root"), "{show}");
    let lost = pull_active_link(&r, &c, &active, 400);
    eprintln!(
        "Open vSwitch ring: {active} pulled; {lost} pings (10 ms apart) lost: a loss window of about {} ms",
        lost * 10
    );
    drop(ovs);
}

/// Veths set up just before the daemon starts read "no carrier" in their flags for up to a
/// second (the kernel's linkwatch publishes the operational state late) while their carrier
/// is on: the link watch, which the kernel's link notifications now wake at once, must not
/// take such a port down (it did: a second without the port at every start).
#[test]
fn fresh_veths_are_not_taken_down_at_start() {
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let _g = serial();
    let mut lab = Lab::new("stpfresh");
    let sw = lab.netns("sw").unwrap();
    let a = lab.host("ha", "10.9.2.1/24", &sw, "va").unwrap();
    let b = lab.host("hb", "10.9.2.2/24", &sw, "vb").unwrap();
    let c = lab
        .daemon(
            &sw,
            "link add br0 type bridge\nlink add pa type afpacket dev va\n\
             link add pb type afpacket dev vb\nlink set dev pa master br0\n\
             link set dev pb master br0\nlink set dev br0 type bridge stp_state 1\n\
             link set dev pa edge on\nlink set dev pb edge on\n",
        )
        .unwrap();
    let r = ping(&a, &b.ip, 20);
    assert_eq!(r.received, 20, "{}\n{}", r.output, lab.daemon_log(0));
    std::thread::sleep(Duration::from_millis(1500));
    let log = lab.daemon_log(0);
    assert!(!log.contains("link down"), "{log}");
    let _ = c;
}

/// The trap and the inject path through a TAP (not AF_PACKET), whose interface is named
/// unlike its port and lives in another namespace, where a kernel bridge at `stp_state 1`
/// enslaves it: the kernel takes qbridge's bridge as root (BPDUs written into the TAP reach
/// it) and qbridge hears the kernel's 802.1D BPDUs (read from the TAP) and answers in kind.
#[test]
fn bpdus_cross_a_tap_in_another_namespace() {
    if let Some(r) = skip_reason() {
        eprintln!("skipped: {r}");
        return;
    }
    let _g = serial();
    let mut lab = Lab::new("stptap");
    let sw = lab.netns("sw").unwrap();
    let k = lab.netns("k").unwrap();
    let c = lab
        .daemon(
            &sw,
            &format!(
                "link add br0 type bridge priority 4096 hello_time 1 forward_delay 4 max_age 6\n\
                 link add p1 type tap ifname qbt-kt0 netns {k}\n\
                 link set dev p1 master br0\n\
                 link set dev br0 type bridge stp_state 1\n"
            ),
        )
        .unwrap();
    ip_in(
        &k,
        &[
            "link",
            "add",
            "kbr",
            "type",
            "bridge",
            "stp_state",
            "1",
            "forward_delay",
            "400",
            "hello_time",
            "100",
            "max_age",
            "600",
        ],
    )
    .unwrap();
    ip_in(&k, &["link", "set", "qbt-kt0", "master", "kbr"]).unwrap();
    ip_in(&k, &["link", "set", "kbr", "up"]).unwrap();
    // The kernel's bridge has a root port (its one port, the TAP): it took qbridge's
    // superior information (priority 4096 against its 32768) from the BPDUs written into the
    // TAP. (Its `root_id` attribute reads back its own id on this kernel, so the root port
    // and path cost are what is checked.)
    let kernel_root_port = || {
        exec_in(&k, "ip", &["-d", "-j", "link", "show", "kbr"])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|v| {
                let d = &v[0]["linkinfo"]["info_data"];
                (
                    d["root_port"].as_u64().unwrap_or(0),
                    d["root_path_cost"].as_u64().unwrap_or(0),
                )
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(15), || kernel_root_port() == (1, 2)),
        "the kernel's (root port, root path cost) is {:?}",
        kernel_root_port()
    );
    let j = c.json(&["stp", "show"]).unwrap();
    assert_eq!(j[0]["root"], true, "{j}");
    // qbridge heard the kernel's BPDUs through the TAP and speaks 802.1D to it.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let j = c.json(&["stp", "show"]).unwrap_or_default();
            let p = &j[0]["ports"][0];
            p["port"] == "p1"
                && p["sends"] == "stp"
                && p["counters"]["rx_config"].as_u64().unwrap_or(0) > 0
        }),
        "{}",
        c.cmd(&["-j", "stp", "show"]).unwrap_or_default()
    );
    // The BPDUs p1 sent are in its transmit counters (it sends nothing else: br0 has no
    // other port to forward from), as a device counts what it sends.
    let j = c.json(&["stp", "show"]).unwrap();
    let k = &j[0]["ports"][0]["counters"];
    let sent = ["tx_config", "tx_tcn", "tx_rst", "tx_mst"]
        .iter()
        .map(|f| k[f].as_u64().unwrap_or(0))
        .sum::<u64>();
    let l = c.json(&["-s", "link", "show", "dev", "p1"]).unwrap();
    let tx = l[0]["stats"]["tx_frames"].as_u64().unwrap_or(0);
    assert!(sent > 0, "{j}");
    // (A hello may go out between the two reads.)
    assert!(
        tx >= sent && tx <= sent + 2,
        "p1 sent {tx} frames, {sent} BPDUs: {l}"
    );
    assert!(lab.stop_daemons(), "the daemon did not stop cleanly");
}
