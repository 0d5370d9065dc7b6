//! Flood fairness with real TAPs (issue 17, item 6): 200 TAP ports whose hosts each send 100
//! broadcasts at once (each a flood to the 201 other ports: 4 million copies in all) must not
//! take the worker from two existing hosts pinging each other through AF_PACKET ports. Before,
//! every flood was forwarded at once and the pings waited behind them (slowest reply 17.5 s,
//! debug build); now each worker round shares a bounded amount of flood work among its queues
//! and the floods a port cannot pay for are dropped as `flood_rate` on it (slowest reply
//! 0.53 s, most of it reading the 20 000 frames; docs/daemon.md, "Flood fairness").

mod support;

use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
use qbridge_io::netns::run_in_netns;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool, PacketBuf};
use std::process::Command;
use std::time::Duration;
use support::{skip_reason, Host, Star};

const TAPS: usize = 200;
const FLOODS: usize = 100;

/// The slowest reply of `ping -c COUNT -i 0.01` from `from` to `to`, in ms, and the replies.
fn ping_max_rtt(from: &Host, to: &Host, count: u32) -> (f64, u32, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &from.ns, "ping", "-n", "-q", "-c"])
        .arg(count.to_string())
        .args(["-i", "0.01", "-W", "10", "-w", "30", &to.ip])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let received = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let max = text
        .lines()
        .find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))
        .and_then(|l| l.split(" = ").nth(1))
        .and_then(|v| v.split('/').nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::INFINITY);
    (max, received, text)
}

#[test]
fn floods_of_200_taps_do_not_starve_existing_hosts() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new("fairtap", &["10.98.0.1", "10.98.0.2"]).unwrap();
    let tap_ns = star.lab.netns("taps").unwrap();
    let mut batch = String::from("link add br0 type bridge\n");
    batch.push_str(&star.port_lines());
    batch.push_str("link set dev p1 master br0\nlink set dev p2 master br0\n");
    for i in 0..TAPS {
        batch.push_str(&format!(
            "link add t{i} type tap ifname qbf{i} netns {tap_ns}\nlink set dev t{i} master br0\n"
        ));
    }
    // One worker: the TAPs' queues and the hosts' ports share it (with two, the floods of
    // one burst source land on one worker and the pings may ride on the other).
    let sw = star.sw.clone();
    let ctl = star
        .lab
        .daemon_args(&sw, &batch, &["--workers", "1"])
        .expect("daemon");
    let up: String = (0..TAPS).map(|i| format!("link set qbf{i} up\n")).collect();
    let file = std::env::temp_dir().join(format!("qbt-fairtap-{}.ip", std::process::id()));
    std::fs::write(&file, up).unwrap();
    let r = support::ip_in(&tap_ns, &["-batch", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    r.unwrap();
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    support::assert_ping(&h1, &h2, 3);

    // The TAPs' hosts flood all at once (a socket on each TAP opened first), while h1 pings
    // h2.
    let ns = tap_ns.clone();
    let flooder = std::thread::spawn(move || {
        let mut ports: Vec<AfPacketPort> = (0..TAPS)
            .map(|i| {
                let mut cfg = AfPacketConfig::new(&format!("qbf{i}"));
                cfg.promisc = false;
                cfg.vnet_hdr = false;
                cfg.block_bytes = 128 * 1024;
                cfg.block_count = 2;
                run_in_netns(&ns, move || AfPacketPort::open(cfg))
                    .unwrap()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut pool = BufPool::new(FLOODS + 1);
        let mut sent = 0;
        for (i, port) in ports.iter_mut().enumerate() {
            let src = format!("02:fa:00:00:{:02x}:{:02x}", i >> 8, i & 255);
            let mut batch = Batch::with_capacity(FLOODS);
            for _ in 0..FLOODS {
                let f = support::frame("ff:ff:ff:ff:ff:ff", &src, &[], 0x88b5, 46);
                batch.push(PacketBuf::from_frame(&f));
            }
            sent += port.tx_burst(&mut batch, &mut pool).unwrap().sent;
        }
        sent
    });
    let (max_ms, received, text) = ping_max_rtt(&h1, &h2, 300);
    let sent = flooder.join().unwrap();
    eprintln!("the TAPs' hosts sent {sent} broadcasts");
    let links = ctl.json(&["-s", "link", "show"]).unwrap();
    let links = links.as_array().unwrap();
    let mut drops = std::collections::BTreeMap::new();
    for l in links {
        for (k, v) in l["stats"]["drops"].as_object().into_iter().flatten() {
            *drops.entry(k.clone()).or_insert(0u64) += v.as_u64().unwrap_or(0);
        }
    }
    let down: Vec<&str> = links
        .iter()
        .filter(|l| l["port"]["link_up"] == false)
        .filter_map(|l| l["ifname"].as_str())
        .collect();
    eprintln!(
        "ping during the floods: {received}/300 replies, slowest {max_ms} ms; drops {drops:?}\n\
         {text}"
    );
    // The link watch looks for each TAP under its own name (`ifname`), in its namespace.
    assert!(down.is_empty(), "ports down: {down:?}");
    assert!(received >= 300, "{text}");
    assert!(
        max_ms < 5000.0,
        "the floods held the pings up for {max_ms} ms\n{text}"
    );
    let flood_rate = |name: &str| {
        links.iter().find(|l| l["ifname"] == name).map_or(0, |l| {
            l["stats"]["drops"]["flood_rate"].as_u64().unwrap_or(0)
        })
    };
    assert_eq!(flood_rate("p1") + flood_rate("p2"), 0);
    assert!(drops.get("flood_rate").is_some_and(|&n| n > 0), "{drops:?}");
}
