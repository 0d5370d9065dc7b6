//! Multi-worker forwarding (issue 6 §2), on a daemon with 2 workers: 32 UDP flows from h1 to
//! h2 (each datagram numbered within its flow). Every flow arrives in order (no datagram
//! overtakes an earlier one of its flow); every datagram is accounted for (received by h2's
//! socket, or counted by h2's kernel as a receive-buffer overflow: the switch loses none);
//! and the port facing h1 was received by both workers: the fanout spread the flows, and
//! each flow stayed on one worker.

mod support;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};
use support::{assert_ping, skip_reason, Host, Star};

use qbridge_io::netns::run_in_netns;

const FLOWS: u16 = 32;
const PER_FLOW: u32 = 300;

/// Sends `PER_FLOW` datagrams on each of `FLOWS` sockets (distinct source ports), round
/// robin, a short pause every 64; the receiver counts per flow and checks the order.
/// Returns (received, reordered).
fn udp_flows(from: &Host, to: &Host) -> (u64, u64) {
    let to_ip = to.ip.clone();
    let rx = run_in_netns(&to.ns, move || UdpSocket::bind((to_ip.as_str(), 0)))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let dst = rx.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut last: HashMap<u16, u32> = HashMap::new();
        let (mut got, mut reordered) = (0u64, 0u64);
        let mut buf = [0u8; 64];
        while let Ok(n) = rx.recv(&mut buf) {
            if n < 6 {
                continue;
            }
            let flow = u16::from_be_bytes([buf[0], buf[1]]);
            let seq = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]);
            got += 1;
            if let Some(&prev) = last.get(&flow) {
                if seq <= prev {
                    reordered += 1;
                }
            }
            last.insert(flow, seq);
        }
        (got, reordered)
    });
    let from_ip = from.ip.clone();
    run_in_netns(&from.ns, move || {
        let socks: Vec<UdpSocket> = (0..FLOWS)
            .map(|_| UdpSocket::bind((from_ip.as_str(), 0)).unwrap())
            .collect();
        let mut k = 0u32;
        for seq in 0..PER_FLOW {
            for (f, s) in socks.iter().enumerate() {
                let mut msg = [0u8; 32];
                msg[..2].copy_from_slice(&(f as u16).to_be_bytes());
                msg[2..6].copy_from_slice(&seq.to_be_bytes());
                s.send_to(&msg, dst).unwrap();
                k += 1;
                if k % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
        }
    })
    .unwrap();
    receiver.join().unwrap()
}

/// `Udp: … RcvbufErrors` of the kernel in namespace `ns` (/proc/net/snmp).
fn udp_rcvbuf_errors(ns: &str) -> u64 {
    support::kernel_counter(ns, "Udp", "RcvbufErrors")
}

#[test]
fn flows_stay_in_order_and_spread_over_workers() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new("workers", &["10.96.0.1", "10.96.0.2"]).expect("lab");
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n{}\
         link set dev p1 master br0\nlink set dev p2 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n",
        star.port_lines()
    );
    // The workers' share of a port's frames is what is tested: with the fast path the
    // program forwards the flows and the workers see only their first frames.
    let sw = star.sw.clone();
    let ctl = star
        .lab
        .daemon_args(&sw, &batch, &["--fast-path", "off"])
        .expect("daemon");
    assert_ping(&h1, &h2, 3);
    let t0 = Instant::now();
    let overflow_before = udp_rcvbuf_errors(&h2.ns);
    let (got, reordered) = udp_flows(&h1, &h2);
    let overflow = udp_rcvbuf_errors(&h2.ns) - overflow_before;
    let sent = u64::from(FLOWS) * u64::from(PER_FLOW);
    let p1 = ctl.json(&["-s", "link", "show", "dev", "p1"]).unwrap()[0].clone();
    let by_worker: Vec<u64> = p1["runtime"]["rx_frames_by_worker"]
        .as_array()
        .expect("rx_frames_by_worker")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    eprintln!(
        "{got}/{sent} datagrams in {:.2} s ({overflow} overflowed h2's socket buffer), \
         {reordered} out of order; p1 received by worker: {by_worker:?}",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(reordered, 0, "datagrams overtook others of their flow");
    assert_eq!(
        got + overflow,
        sent,
        "datagrams lost on the way (not by h2's socket buffer)\n{}",
        ctl.stats_text()
    );
    assert!(
        got * 2 >= sent,
        "only {got} of {sent} arrived\n{}",
        ctl.stats_text()
    );
    assert_eq!(by_worker.len(), 2);
    // The default ring: 16 384 frames per port, shared over the 2 workers' sockets.
    assert_eq!(p1["runtime"]["ring_frames"], 8192, "{p1}");
    assert!(
        by_worker.iter().all(|&n| n > u64::from(PER_FLOW)),
        "the flows were not spread over both workers: {by_worker:?}"
    );
}

/// A TAP port on a 2-worker daemon has a queue per worker (`IFF_MULTI_QUEUE`): a host behind
/// the TAP (in its own namespace) opens 16 TCP connections to a host behind an AF_PACKET port;
/// every byte arrives, and both workers received from the TAP.
#[test]
fn tap_queues_spread_over_workers() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut lab = support::Lab::new("tapmq");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.97.0.1/24", &sw, "s1").unwrap();
    let tap_ns = lab.netns("vm").unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n\
         link add p1 type afpacket dev s1\n\
         link add vm0 type tap ifname qbtap0 netns {tap_ns}\n\
         link set dev p1 master br0\nlink set dev vm0 master br0\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev vm0 pvid untagged\n"
    );
    let ctl = lab.daemon(&sw, &batch).expect("daemon");
    support::ip_in(&tap_ns, &["addr", "add", "10.97.0.2/24", "dev", "qbtap0"]).unwrap();
    support::ip_in(&tap_ns, &["link", "set", "qbtap0", "up"]).unwrap();
    let vm = Host {
        name: "vm".into(),
        ns: tap_ns.clone(),
        ifname: "qbtap0".into(),
        ip: "10.97.0.2".into(),
        mac: support::mac_of(&tap_ns, "qbtap0").unwrap(),
    };
    assert_ping(&vm, &h1, 3);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (vm, h1) = (vm.clone(), h1.clone());
            std::thread::spawn(move || {
                support::tcp_transfer(&vm, &h1, 1 << 20, Duration::from_secs(60))
            })
        })
        .collect();
    for t in threads {
        t.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("TCP from behind the TAP: {e}"));
    }
    let vm0 = ctl.json(&["-s", "link", "show", "dev", "vm0"]).unwrap()[0].clone();
    let by_worker: Vec<u64> = vm0["runtime"]["rx_frames_by_worker"]
        .as_array()
        .expect("rx_frames_by_worker")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    eprintln!("TAP vm0 received by worker: {by_worker:?}");
    assert!(
        by_worker.len() == 2 && by_worker.iter().all(|&n| n > 0),
        "the TAP's queues were not read by both workers: {by_worker:?}"
    );
}
