//! `PACKET_FANOUT_HASH` on a veth, checked before the multi-worker engine relies on it (root
//! only; skipped with a printed reason otherwise, a failure with `QBRIDGE_REQUIRE_NETNS=1`).
//!
//! The question: does the kernel's fanout hash read through an 802.1ad S-tag *and* an 802.1Q
//! C-tag to the L3 addresses and L4 ports? The S-tag is stripped into metadata before the
//! packet taps run, the C-tag stays in the data; a hash that stopped at either would send all
//! of a customer VLAN's flows to one worker (the RSS problem of seeds/000). So 64 flows that
//! differ only in their L4 source port (and, separately, only in their IP addresses) are sent
//! from a namespace into a veth whose peer has 2 and then 4 AF_PACKET sockets in one fanout
//! group; every flow must land on exactly one socket, complete and in order, and the flows must
//! use every socket.
#![allow(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::VethPair;
use qbridge_io::afpacket::{fanout_group_for, AfPacketConfig, AfPacketPort, Fanout, FanoutMode};
use qbridge_io::netns::run_in_netns;
use qbridge_io::Port;
use qbridge_packet::{Batch, BufPool};

const FLOWS: u16 = 64;
const FRAMES_PER_FLOW: u32 = 8;
const MAGIC: [u8; 4] = *b"QBFO";

#[derive(Clone, Copy, Debug)]
enum L4 {
    Ipv4Tcp,
    Ipv6Udp,
}

/// What differs between the flows of one run.
#[derive(Clone, Copy, Debug)]
enum Vary {
    SourcePort,
    Addresses,
}

/// A frame of flow `flow`: the given tags, then IPv4/TCP or IPv6/UDP, then MAGIC, the flow
/// number and the sequence number.
fn flow_frame(tags: &[(u16, u16)], l4: L4, vary: Vary, flow: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    for (tpid, tci) in tags {
        f.extend(tpid.to_be_bytes());
        f.extend(tci.to_be_bytes());
    }
    let (sport, host) = match vary {
        Vary::SourcePort => (10_000 + flow, 0),
        Vary::Addresses => (10_000, flow),
    };
    let mut payload = MAGIC.to_vec();
    payload.extend(flow.to_be_bytes());
    payload.extend(seq.to_be_bytes());
    payload.resize(32, 0xa5);
    match l4 {
        L4::Ipv4Tcp => {
            f.extend([0x08, 0x00]);
            let total = (20 + 20 + payload.len()) as u16;
            f.extend([0x45, 0]);
            f.extend(total.to_be_bytes());
            f.extend([0, 0, 0x40, 0, 64, 6, 0, 0]); // id, DF, ttl, TCP, checksum 0
            f.extend([10, 1, (host >> 8) as u8, host as u8]);
            f.extend([10, 2, (host >> 8) as u8, host as u8]);
            f.extend(sport.to_be_bytes());
            f.extend(80u16.to_be_bytes());
            f.extend(seq.to_be_bytes()); // TCP sequence number
            f.extend([0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        }
        L4::Ipv6Udp => {
            f.extend([0x86, 0xdd]);
            f.extend([0x60, 0, 0, 0]); // flow label 0
            f.extend(((8 + payload.len()) as u16).to_be_bytes());
            f.extend([17, 64]);
            let addr = |net: u8| {
                let mut a = [0u8; 16];
                a[..2].copy_from_slice(&[0xfd, net]);
                a[14..].copy_from_slice(&host.to_be_bytes());
                a
            };
            f.extend(addr(1));
            f.extend(addr(2));
            f.extend(sport.to_be_bytes());
            f.extend(53u16.to_be_bytes());
            f.extend(((8 + payload.len()) as u16).to_be_bytes());
            f.extend([0, 0]);
        }
    }
    f.extend(payload);
    f
}

/// (flow, seq) of a frame built by [`flow_frame`], found by its magic.
fn flow_of(frame: &[u8]) -> Option<(u16, u32)> {
    let at = frame.windows(4).position(|w| w == MAGIC)?;
    let b = frame.get(at + 4..at + 10)?;
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
    ))
}

/// Sends every frame on `ifname` through one raw AF_PACKET socket, in the calling thread's
/// namespace.
fn send_all(ifname: &str, frames: &[Vec<u8>]) {
    let idx = qbridge_io::sys::ifindex(ifname).unwrap();
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = idx as i32;
    sll.sll_halen = 6;
    for f in frames {
        // SAFETY: `f` and `sll` are live for the call, lengths match.
        let rc = unsafe {
            libc::sendto(
                fd,
                f.as_ptr().cast(),
                f.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(
            rc as usize,
            f.len(),
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(fd) };
}

/// Opens `n` ports on `v.a` in one hash fanout group.
fn open_group(v: &VethPair, n: usize, group: u16) -> Vec<AfPacketPort> {
    (0..n)
        .map(|_| {
            // The default ring (480 slots) holds all 512 frames of a run if the hash were to
            // send every flow to one socket: a lost frame is then a fanout fault, not a full ring.
            let mut cfg = AfPacketConfig::new(&v.a);
            cfg.fanout = Some(Fanout::new(group, FanoutMode::Hash));
            run_in_netns(&v.ns_a.name, move || AfPacketPort::open(cfg))
                .unwrap()
                .unwrap()
        })
        .collect()
}

/// Sends FLOWS x FRAMES_PER_FLOW frames (the flows interleaved) from the peer and checks
/// that each flow lands whole and in order on one socket. Returns the number of flows per
/// socket.
fn run(
    v: &VethPair,
    ports: &mut [AfPacketPort],
    tags: &[(u16, u16)],
    l4: L4,
    vary: Vary,
) -> Vec<usize> {
    let frames: Vec<Vec<u8>> = (0..FRAMES_PER_FLOW)
        .flat_map(|seq| (0..FLOWS).map(move |flow| flow_frame(tags, l4, vary, flow, seq)))
        .collect();
    let total = frames.len();
    let (b, ns) = (v.b.clone(), v.ns_b.name.clone());
    let sender = std::thread::spawn(move || run_in_netns(&ns, || send_all(&b, &frames)).unwrap());
    // Per socket, the (flow, seq) pairs in arrival order.
    let mut seen: Vec<Vec<(u16, u32)>> = vec![Vec::new(); ports.len()];
    let mut pool = BufPool::new(256);
    let mut batch = Batch::with_capacity(64);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = 0;
    while got < total && Instant::now() < deadline {
        let mut idle = true;
        for (i, p) in ports.iter_mut().enumerate() {
            if p.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
                idle = false;
            }
            for f in batch.drain() {
                if let Some(id) = flow_of(f.frame()) {
                    seen[i].push(id);
                    got += 1;
                }
                pool.put(f);
            }
        }
        if idle {
            ports[0].wait_readable(1).unwrap();
        }
    }
    sender.join().unwrap();
    let what = format!(
        "tags {tags:x?} {l4:?}, flows differ by {vary:?}, {} sockets",
        ports.len()
    );
    assert_eq!(got, total, "{what}: frames received");
    let mut home: BTreeMap<u16, usize> = BTreeMap::new();
    for (i, s) in seen.iter().enumerate() {
        for &(flow, _) in s {
            let h = *home.entry(flow).or_insert(i);
            assert_eq!(h, i, "{what}: flow {flow} on sockets {h} and {i}");
        }
    }
    for (flow, &i) in &home {
        let seqs: Vec<u32> = seen[i]
            .iter()
            .filter(|&&(f, _)| f == *flow)
            .map(|&(_, s)| s)
            .collect();
        let want: Vec<u32> = (0..FRAMES_PER_FLOW).collect();
        assert_eq!(seqs, want, "{what}: flow {flow} out of order or incomplete");
    }
    let per_socket: Vec<usize> = (0..ports.len())
        .map(|i| home.values().filter(|&&h| h == i).count())
        .collect();
    eprintln!("{what}: flows per socket {per_socket:?}");
    for p in ports.iter() {
        assert_eq!(p.stats().rx_truncated, 0);
    }
    per_socket
}

fn check_all_shapes(sockets: usize) {
    let v = VethPair::new().unwrap();
    let mut ports = open_group(&v, sockets, fanout_group_for(sockets as u32));
    let qinq = [(0x88a8, 100), (0x8100, 10)];
    for (tags, l4) in [
        (&qinq[..], L4::Ipv4Tcp),
        (&qinq[..], L4::Ipv6Udp),
        (&qinq[1..], L4::Ipv4Tcp),
        (&qinq[1..], L4::Ipv6Udp),
        (&[][..], L4::Ipv4Tcp),
        (&[][..], L4::Ipv6Udp),
    ] {
        for vary in [Vary::SourcePort, Vary::Addresses] {
            let per_socket = run(&v, &mut ports, tags, l4, vary);
            assert!(
                per_socket.iter().all(|&n| n > 0),
                "tags {tags:x?} {l4:?}, flows differ by {vary:?}: the hash put all {FLOWS} \
                 flows on {} of {sockets} sockets: {per_socket:?}",
                per_socket.iter().filter(|&&n| n > 0).count(),
            );
        }
    }
}

/// Where the kernel's hash stops, recorded rather than relied on: a third 0x8100 tag, and an
/// outer TPID the kernel does not know as a VLAN tag (0x9100). Flows still stay whole and in
/// order on one socket each; the spread is printed (docs/decisions.md 17 has the result).
#[test]
fn fanout_hash_beyond_two_tags_and_unknown_tpids() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let mut ports = open_group(&v, 2, fanout_group_for(7));
    let triple = [(0x88a8, 100), (0x8100, 10), (0x8100, 20)];
    let unknown = [(0x9100, 100), (0x8100, 10)];
    for tags in [&triple[..], &unknown[..]] {
        run(&v, &mut ports, tags, L4::Ipv4Tcp, Vary::SourcePort);
        run(&v, &mut ports, tags, L4::Ipv4Tcp, Vary::Addresses);
    }
}

#[test]
fn fanout_hash_reads_through_qinq_to_l4_two_sockets() {
    skip_unless_root!();
    check_all_shapes(2);
}

#[test]
fn fanout_hash_reads_through_qinq_to_l4_four_sockets() {
    skip_unless_root!();
    check_all_shapes(4);
}

/// The helper's group ids: distinct for distinct ports of one process.
#[test]
fn fanout_group_ids_are_distinct_per_port() {
    let ids: std::collections::BTreeSet<u16> = (0..1000).map(fanout_group_for).collect();
    assert_eq!(ids.len(), 1000);
    let f = Fanout::new(0x1234, FanoutMode::Cpu);
    assert_eq!(f.option_value(), 0x0002_1234);
}

/// Sockets joining a group while frames flow never receive a frame that another member got
/// too: until a socket has joined, a drop-all filter keeps its ring empty. (Frames hashed to it
/// in the microseconds between joining and dropping the filter are lost; counted here.) The
/// window without the filter is two syscalls wide: with the filter removed this test did not
/// catch a duplicate in 3 runs here, so it guards the property more than it proves the need.
#[test]
fn joining_a_busy_group_duplicates_nothing() {
    skip_unless_root!();
    const FRAMES: u32 = 200;
    let v = VethPair::new().unwrap();
    let group = fanout_group_for(9);
    let mut ports = open_group(&v, 1, group);
    let frames: Vec<Vec<u8>> = (0..FRAMES)
        .flat_map(|seq| {
            (0..FLOWS).map(move |flow| flow_frame(&[], L4::Ipv4Tcp, Vary::SourcePort, flow, seq))
        })
        .collect();
    let total = frames.len();
    let (b, ns) = (v.b.clone(), v.ns_b.name.clone());
    let sender = std::thread::spawn(move || run_in_netns(&ns, || send_all(&b, &frames)).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let (a, ns_a) = (v.a.clone(), v.ns_a.name.clone());
    let joiner = std::thread::spawn(move || {
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(2));
            let mut cfg = AfPacketConfig::new(&a);
            cfg.fanout = Some(Fanout::new(group, FanoutMode::Hash));
            let p = run_in_netns(&ns_a, move || AfPacketPort::open(cfg))
                .unwrap()
                .unwrap();
            tx.send(p).unwrap();
        }
    });
    let mut seen = std::collections::HashSet::new();
    let mut dups = 0;
    let mut pool = BufPool::new(256);
    let mut batch = Batch::with_capacity(64);
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(300) {
        while let Ok(p) = rx.try_recv() {
            ports.push(p);
        }
        let mut any = false;
        for p in ports.iter_mut() {
            if p.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
                any = true;
            }
            for f in batch.drain() {
                if let Some(id) = flow_of(f.frame()) {
                    if !seen.insert(id) {
                        dups += 1;
                    }
                }
                pool.put(f);
            }
        }
        if any || !sender.is_finished() || !joiner.is_finished() {
            quiet_since = Instant::now();
        }
        if !any {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    sender.join().unwrap();
    joiner.join().unwrap();
    let mut full = 0;
    for p in ports.iter_mut() {
        p.poll_kernel_stats().unwrap();
        full += p.stats().rx_ring_full;
    }
    eprintln!(
        "{total} frames sent while 3 sockets joined a group of 1: {} received once, {dups} \
         twice, {full} dropped on full rings, {} lost while joining",
        seen.len(),
        total as u64 - seen.len() as u64 - full
    );
    assert_eq!(ports.len(), 4);
    assert_eq!(dups, 0, "frames delivered twice");
}

/// The other modes join and deliver every frame exactly once; a socket asking for an id that
/// a group of another mode holds is refused with an error naming the group.
#[test]
fn other_fanout_modes_deliver_each_frame_once() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    for (i, mode) in [
        FanoutMode::Cpu,
        FanoutMode::LoadBalance,
        FanoutMode::QueueMapping,
    ]
    .into_iter()
    .enumerate()
    {
        let group = fanout_group_for(20 + i as u32);
        let mut ports: Vec<AfPacketPort> = (0..2)
            .map(|_| {
                let mut cfg = AfPacketConfig::new(&v.a);
                cfg.fanout = Some(Fanout::new(group, mode));
                run_in_netns(&v.ns_a.name, move || AfPacketPort::open(cfg))
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let frames: Vec<Vec<u8>> = (0..FLOWS)
            .map(|flow| flow_frame(&[(0x88a8, 1)], L4::Ipv4Tcp, Vary::SourcePort, flow, 0))
            .collect();
        let (b, ns) = (v.b.clone(), v.ns_b.name.clone());
        run_in_netns(&ns, || send_all(&b, &frames)).unwrap();
        let mut seen = Vec::new();
        let mut pool = BufPool::new(256);
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut per_socket = [0usize; 2];
        while Instant::now() < deadline && seen.len() < frames.len() {
            for (k, p) in ports.iter_mut().enumerate() {
                let mut batch = Batch::with_capacity(64);
                per_socket[k] += p.rx_burst(&mut batch, &mut pool, 64).unwrap();
                seen.extend(batch.drain().filter_map(|f| flow_of(f.frame())));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        seen.sort();
        let want: Vec<(u16, u32)> = (0..FLOWS).map(|f| (f, 0)).collect();
        assert_eq!(seen, want, "{mode:?}");
        eprintln!("{mode:?}: frames per socket {per_socket:?}");
        if mode == FanoutMode::LoadBalance {
            assert!(per_socket.iter().all(|&n| n > 0), "{per_socket:?}");
        }
        // The same id with another mode: refused, naming the group.
        let mut cfg = AfPacketConfig::new(&v.a);
        cfg.fanout = Some(Fanout::new(group, FanoutMode::Hash));
        let e = run_in_netns(&v.ns_a.name, move || AfPacketPort::open(cfg))
            .unwrap()
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("PACKET_FANOUT") && msg.contains(&format!("group {group}")),
            "{msg}"
        );
    }
}

/// `Fanout::unique`: the kernel picks an id no live group holds, the port's other sockets join
/// it, and a group of another device never blocks it — where a fixed id that a live group on
/// another device holds fails with `EINVAL` (a port deleted and another added in one batch:
/// the old sockets still live when the new ones join; issue 17, item 4).
#[test]
fn unique_fanout_ids_never_meet_a_live_group() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let (c, d) = (common::unique("qc"), common::unique("qd"));
    v.ns_a
        .ip(&["link", "add", &c, "type", "veth", "peer", "name", &d])
        .unwrap();
    v.ns_a.ip(&["link", "set", &c, "up"]).unwrap();
    v.ns_a.ip(&["link", "set", &d, "up"]).unwrap();
    let ns = v.ns_a.name.clone();
    let open = |dev: &str, f: Fanout| {
        let mut cfg = AfPacketConfig::new(dev).with_ring_frames(64);
        cfg.fanout = Some(f);
        run_in_netns(&ns, move || AfPacketPort::open(cfg)).unwrap()
    };
    let first = open(&v.a, Fanout::unique(FanoutMode::Hash)).unwrap();
    let group = first.fanout().expect("joined a group");
    assert!(
        !group.unique_id,
        "the port reports the id it got: {group:?}"
    );
    let second = open(&v.a, group).expect("a second socket joins the kernel's id");
    assert_eq!(second.fanout(), Some(group));

    // The old way: that id, fixed, on another device while the group lives.
    let clash = open(&c, Fanout::new(group.group, FanoutMode::Hash)).unwrap_err();
    assert!(clash.to_string().contains("Invalid argument"), "{clash}");
    // A unique id on the other device, and a second group on the same one, while it lives.
    let other = open(&c, Fanout::unique(FanoutMode::Hash)).unwrap();
    let again = open(&v.a, Fanout::unique(FanoutMode::Hash)).unwrap();
    let ids = [
        group.group,
        other.fanout().unwrap().group,
        again.fanout().unwrap().group,
    ];
    assert!(
        ids[0] != ids[1] && ids[0] != ids[2] && ids[1] != ids[2],
        "ids {ids:?}"
    );
    assert_eq!(
        Fanout::unique(FanoutMode::Hash).option_value(),
        0x2000_0000,
        "UNIQUEID flag, id 0"
    );
}

/// Frames `run` sends from the peer and the number each port of `ports` then receives.
fn count_received(v: &VethPair, ports: &mut [&mut AfPacketPort], n: usize) -> Vec<usize> {
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| flow_frame(&[], L4::Ipv4Tcp, Vary::SourcePort, i as u16, 0))
        .collect();
    let b = v.b.clone();
    run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
        .unwrap()
        .unwrap();
    let mut pool = BufPool::new(64);
    let mut got = vec![0; ports.len()];
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        for (k, p) in ports.iter_mut().enumerate() {
            let mut batch = Batch::default();
            got[k] += p.rx_burst(&mut batch, &mut pool, 64).unwrap();
            pool.put_all(&mut batch);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

/// A socket opened `paused` (the replacement of a port's sockets, docs/decisions.md 27)
/// receives nothing while the old group still forwards, so no frame is taken twice; after
/// `resume` it receives.
#[test]
fn paused_socket_receives_nothing_until_resumed() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let ns = v.ns_a.name.clone();
    let open = |paused: bool| {
        let mut cfg = AfPacketConfig::new(&v.a).with_ring_frames(256);
        cfg.fanout = Some(Fanout::unique(FanoutMode::Hash));
        cfg.paused = paused;
        run_in_netns(&ns, move || AfPacketPort::open(cfg))
            .unwrap()
            .unwrap()
    };
    let mut old = open(false);
    let mut new = open(true);
    assert_ne!(old.fanout().unwrap().group, new.fanout().unwrap().group);
    let got = count_received(&v, &mut [&mut old, &mut new], 40);
    assert_eq!(got, [40, 0], "old and paused new socket");
    new.resume().unwrap();
    drop(old);
    let got = count_received(&v, &mut [&mut new], 40);
    assert_eq!(got, [40], "resumed socket");
}
