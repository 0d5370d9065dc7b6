//! AF_PACKET port on real veth pairs in namespaces the test creates (root only; skipped with a
//! printed reason otherwise). Every namespace is deleted on drop, also when an assert fails.
#![allow(unsafe_code)]

mod common;

use std::time::{Duration, Instant};

use common::{raw_send, tagged_frame, VethPair};
use qbridge_io::afpacket::{
    AfPacketConfig, AfPacketPort, RingVersion, DEFAULT_RING_FRAMES, V2_SUPER_SLOT_BYTES,
};
use qbridge_io::netns::run_in_netns;
use qbridge_io::{Port, TxOutcome};
use qbridge_packet::{Batch, BufPool, PacketBuf};

/// Receives on `port` until a frame equal to `want` shows up or 3 s pass; returns it.
fn receive_matching(port: &mut AfPacketPort, want: &[u8]) -> Option<PacketBuf> {
    let mut pool = BufPool::new(256);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        port.wait_readable(50).unwrap();
        let mut batch = Batch::with_capacity(64);
        port.rx_burst(&mut batch, &mut pool, 64).unwrap();
        let found = batch.drain().find(|p| p.frame() == want);
        if found.is_some() {
            return found;
        }
    }
    None
}

fn open_in(ns: &str, cfg: AfPacketConfig) -> AfPacketPort {
    run_in_netns(ns, move || AfPacketPort::open(cfg))
        .unwrap()
        .unwrap()
}

/// An 802.1ad + 802.1Q double-tagged frame sent by a raw socket in one namespace arrives at the
/// port in the other with both tags intact and in order: the tag the kernel strips (0x88a8)
/// is put back with its own TPID, not 0x8100.
#[test]
fn receives_double_tagged_frame_with_both_tags() {
    skip_unless_root!();
    double_tagged_receive(RingVersion::V3);
}

#[test]
fn receives_double_tagged_frame_with_both_tags_v2_ring() {
    skip_unless_root!();
    double_tagged_receive(RingVersion::V2);
}

fn ring_cfg(ifname: &str, ring: RingVersion) -> AfPacketConfig {
    let mut cfg = AfPacketConfig::new(ifname);
    cfg.ring = ring;
    cfg
}

fn double_tagged_receive(ring: RingVersion) {
    let v = VethPair::new().unwrap();
    let mut port = open_in(&v.ns_a.name, ring_cfg(&v.a, ring));
    let frame = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 60);
    let b = v.b.clone();
    let f = frame.clone();
    run_in_netns(&v.ns_b.name, move || raw_send(&b, &f))
        .unwrap()
        .unwrap();
    let got = receive_matching(&mut port, &frame);
    let got = got.unwrap_or_else(|| panic!("frame with tags 88a8/100, 8100/10 not received"));
    assert_eq!(
        &got.frame()[12..20],
        &[0x88, 0xa8, 0, 100, 0x81, 0x00, 0, 10]
    );
    assert!(port.stats().rx_vlan_restored >= 1, "{:?}", port.stats());
    assert!(got.time_ns > 0);
}

/// A single 0x8100 tag is restored too (the kernel strips it the same way).
#[test]
fn receives_single_8021q_tag() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    let frame = tagged_frame(&[(0x8100, 42 | 5 << 13)], 80);
    let (b, f) = (v.b.clone(), frame.clone());
    run_in_netns(&v.ns_b.name, move || raw_send(&b, &f))
        .unwrap()
        .unwrap();
    assert!(receive_matching(&mut port, &frame).is_some());
}

/// The kernel refuses a 1522-byte double-tagged frame at MTU 1500 (one tag of slack, 0x8100
/// only); after the port raised the device MTU by 8 it is sent, and arrives intact at a port
/// on the peer (whose MTU was raised the same way).
#[test]
fn sends_1522_byte_double_tagged_frame_after_mtu_raise() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let frame = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 1500);
    assert_eq!(frame.len(), 1522);
    let mut pool = BufPool::new(16);

    let mut tx = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    assert_eq!(tx.caps().max_frame, 1514);
    let mut batch = Batch::default();
    batch.push(PacketBuf::from_frame(&frame));
    let out = tx.tx_burst(&mut batch, &mut pool).unwrap();
    assert_eq!(
        out,
        TxOutcome {
            sent: 0,
            queue_full: 0,
            error: 1
        },
        "EMSGSIZE expected at MTU 1500"
    );
    assert!(batch.is_empty());

    let mut cfg = AfPacketConfig::new(&v.a);
    cfg.device_mtu = Some(1508);
    let mut tx = open_in(&v.ns_a.name, cfg);
    assert_eq!(tx.caps().max_frame, 1522);
    let mut rx_cfg = AfPacketConfig::new(&v.b);
    rx_cfg.device_mtu = Some(1508);
    let mut rx = open_in(&v.ns_b.name, rx_cfg);

    // A batch: the big frame between two small ones; one sendmmsg.
    let small = tagged_frame(&[(0x88a8, 100)], 50);
    for f in [&small, &frame, &small] {
        batch.push(PacketBuf::from_frame(f));
    }
    let out = tx.tx_burst(&mut batch, &mut pool).unwrap();
    assert_eq!(
        out,
        TxOutcome {
            sent: 3,
            queue_full: 0,
            error: 0
        }
    );
    assert_eq!(pool.available(), 4);
    let got = receive_matching(&mut rx, &frame).expect("1522-byte frame not received");
    assert_eq!(got.len(), 1522);
    // The port never sees its own transmissions.
    let mut batch = Batch::default();
    std::thread::sleep(Duration::from_millis(20));
    tx.rx_burst(&mut batch, &mut pool, 64).unwrap();
    assert!(
        batch.iter().all(|p| p.frame() != &frame[..]),
        "own frame looped back"
    );
}

/// Deleting the interface makes the port report a link-down error, and reopen fails with an
/// error the caller also treats as link down until the interface is back.
#[test]
fn interface_removal_is_link_down() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    v.ns_a.ip(&["link", "del", &v.a]).unwrap();
    let mut pool = BufPool::new(16);
    let mut batch = Batch::default();
    batch.push(PacketBuf::from_frame(&tagged_frame(&[], 50)));
    let tx = port.tx_burst(&mut batch, &mut pool);
    let rx = port.rx_burst(&mut batch, &mut pool, 8);
    let down =
        matches!(&tx, Err(e) if e.is_link_down()) || matches!(&rx, Err(e) if e.is_link_down());
    assert!(down, "tx {tx:?} rx {rx:?}");
    let ns = v.ns_a.name.clone();
    let e = run_in_netns(&ns, || port.reopen()).unwrap().unwrap_err();
    assert!(e.is_link_down(), "{e}");
}

/// A TCP stream between the two namespaces' kernels (TSO on, MTU 1500, as hosts run by
/// default) reaches the port as super-frames with their virtio-net metadata: `gso_type` TCPv4,
/// `gso_size` one MSS, frames longer than the MTU, and only the peer's frames (the port does not
/// see what its own namespace sends).
#[test]
fn receives_tcp_super_frames_with_vnet_metadata() {
    skip_unless_root!();
    use std::io::{Read, Write};
    let v = VethPair::new().unwrap();
    v.ns_a
        .ip(&["addr", "add", "10.78.0.1/24", "dev", &v.a])
        .unwrap();
    v.ns_b
        .ip(&["addr", "add", "10.78.0.2/24", "dev", &v.b])
        .unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    let listener = run_in_netns(&v.ns_a.name, || std::net::TcpListener::bind("10.78.0.1:0"))
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let ns_b = v.ns_b.name.clone();
    let client = std::thread::spawn(move || {
        let mut c = run_in_netns(&ns_b, || std::net::TcpStream::connect(addr))
            .unwrap()
            .unwrap();
        let chunk = vec![0x5a; 1 << 16];
        for _ in 0..64 {
            c.write_all(&chunk).unwrap();
        }
    });

    let mut pool = BufPool::new(512);
    let mut longest = 0;
    let mut gso_frames = 0;
    // Super-frames longer than a slot; a GSO frame of one or two short segments can fit in
    // one and come through the ring.
    let mut over_slot = 0u64;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && !(client.is_finished() && gso_frames > 0) {
        port.wait_readable(20).unwrap();
        let mut batch = Batch::with_capacity(64);
        port.rx_burst(&mut batch, &mut pool, 64).unwrap();
        for p in batch.drain() {
            // Nothing the port's own namespace sent (its ACKs come from 10.78.0.1).
            let f = p.frame();
            if f[12..14] == [0x08, 0x00] {
                assert_ne!(f[26..30], [10, 78, 0, 1], "outgoing frame received");
            }
            if p.offload.is_gso() {
                gso_frames += 1;
                if p.len() > 2048 {
                    over_slot += 1;
                }
                longest = longest.max(p.len());
                assert_eq!(p.offload.gso_type & !0x80, 1, "{:?}", p.offload);
                assert!(
                    p.offload.gso_size >= 1000 && p.offload.gso_size <= 1460,
                    "{:?}",
                    p.offload
                );
            }
            pool.put(p);
        }
    }
    client.join().unwrap();
    assert_eq!(server.join().unwrap(), 64 << 16);
    eprintln!(
        "{gso_frames} super-frames, longest {longest} bytes; {:?}",
        port.stats()
    );
    // The default V2 slot (2 KiB) is shorter than a super-frame: they came whole through the
    // socket queue.
    assert!(
        port.stats().rx_copied >= over_slot,
        "{over_slot} super-frames over 2 KiB"
    );
    assert_eq!(port.stats().rx_truncated, 0);
    assert!(
        gso_frames > 0 && longest > 1514,
        "no super-frames: {gso_frames}, longest {longest}"
    );
}

/// Two AF_PACKET ports in a middle namespace, with a loop that moves every received batch to
/// the other port, join two hosts' kernels: a 16 MB TCP transfer arrives complete and
/// byte-exact with TSO and checksum offload on and MTU 1500 everywhere, so super-frames with
/// partial checksums are transmitted intact (virtio-net header on `sendmmsg`), not only received.
#[test]
fn two_ports_carry_a_verified_tcp_stream() {
    skip_unless_root!();
    forward_tcp_stream(RingVersion::V3);
}

#[test]
fn two_ports_carry_a_verified_tcp_stream_v2_ring() {
    skip_unless_root!();
    forward_tcp_stream(RingVersion::V2);
}

#[test]
fn two_ports_carry_a_verified_tcp_stream_v2_super_slots() {
    skip_unless_root!();
    forward_tcp_stream_with(RingVersion::V2, V2_SUPER_SLOT_BYTES);
}

fn forward_tcp_stream(ring: RingVersion) {
    forward_tcp_stream_with(ring, qbridge_io::afpacket::V2_SLOT_BYTES);
}

/// `slot_bytes`: V2 slot size (2 KiB: super-frames through the socket queue; 64.5 KiB: in
/// the ring).
fn forward_tcp_stream_with(ring: RingVersion, slot_bytes: u32) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let left = VethPair::new().unwrap(); // hostA (ns_a) -- middle side (ns_b)
    let right = VethPair::new().unwrap(); // middle side (ns_a) -- hostB (ns_b)
                                          // Put right.a into left's ns_b, the middle namespace.
    right
        .ns_a
        .ip(&["link", "set", &right.a, "netns", &left.ns_b.name])
        .unwrap();
    let mid = &left.ns_b;
    mid.ip(&["link", "set", &right.a, "up"]).unwrap();
    left.ns_a
        .ip(&["addr", "add", "10.79.0.1/24", "dev", &left.a])
        .unwrap();
    right
        .ns_b
        .ip(&["addr", "add", "10.79.0.2/24", "dev", &right.b])
        .unwrap();
    let cfg = |ifname: &str| {
        let mut c = ring_cfg(ifname, ring);
        c.slot_bytes = slot_bytes;
        c
    };
    let p1 = open_in(&mid.name, cfg(&left.b));
    let p2 = open_in(&mid.name, cfg(&right.a));

    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let fwd = std::thread::spawn(move || {
        let mut ports = [p1, p2];
        let mut pool = BufPool::new(1024);
        let mut batch = Batch::with_capacity(64);
        let (mut frames, mut gso, mut dropped) = (0usize, 0usize, 0usize);
        while !stop2.load(Ordering::Relaxed) {
            let mut idle = true;
            for dir in 0..2 {
                let [a, b] = &mut ports;
                let (rx, tx) = if dir == 0 { (a, b) } else { (b, a) };
                if rx.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
                    idle = false;
                    frames += batch.len();
                    gso += batch.iter().filter(|p| p.offload.is_gso()).count();
                    let out = tx.tx_burst(&mut batch, &mut pool).unwrap();
                    dropped += out.dropped();
                }
            }
            if idle {
                ports[0].wait_readable(1).unwrap();
            }
        }
        (frames, gso, dropped)
    });

    const TOTAL: usize = 16 << 20;
    let listener = run_in_netns(&right.ns_b.name, || {
        std::net::TcpListener::bind("10.79.0.2:0")
    })
    .unwrap()
    .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = common::tcp_sink(listener, TOTAL);
    let pattern: Vec<u8> = (0..TOTAL)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let t0 = Instant::now();
    let mut c = run_in_netns(&left.ns_a.name, || std::net::TcpStream::connect(addr))
        .unwrap()
        .unwrap();
    c.write_all(&pattern).unwrap();
    drop(c);
    let got = server.join().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (frames, gso, dropped) = fwd.join().unwrap();
    eprintln!(
        "{ring:?} (V2 slots {slot_bytes} B): 16 MB in {secs:.3} s ({:.2} Gbit/s, {} build); {frames} frames forwarded, {gso} super-frames, {dropped} dropped",
        TOTAL as f64 * 8.0 / secs / 1e9,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    assert_eq!(got.len(), TOTAL);
    assert!(got == pattern, "stream corrupted");
    assert!(gso > 0, "no super-frames crossed");
}

/// Without promiscuous mode the port takes the unicast addresses it was given, broadcast, and
/// nothing else, even on a veth that delivers every frame: frames for another host are dropped
/// and counted.
#[test]
fn non_promiscuous_port_takes_only_its_unicast_addresses() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let ours = [0x02, 0, 0, 0, 0x11, 0x11];
    let mut cfg = AfPacketConfig::new(&v.a);
    cfg.promisc = false;
    cfg.unicast = vec![ours];
    let mut port = open_in(&v.ns_a.name, cfg);
    let mut to_ours = tagged_frame(&[(0x88a8, 5)], 50);
    to_ours[..6].copy_from_slice(&ours);
    let mut to_other = to_ours.clone();
    to_other[5] = 0x22;
    let mut to_bcast = to_ours.clone();
    to_bcast[..6].copy_from_slice(&[0xff; 6]);
    let (b, frames) = (
        v.b.clone(),
        [to_other.clone(), to_ours.clone(), to_bcast.clone()],
    );
    run_in_netns(&v.ns_b.name, move || {
        for f in &frames {
            raw_send(&b, f).unwrap();
        }
    })
    .unwrap();
    let mut pool = BufPool::new(64);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        port.wait_readable(20).unwrap();
        let mut batch = Batch::default();
        port.rx_burst(&mut batch, &mut pool, 64).unwrap();
        seen.extend(batch.drain().map(|p| p.frame().to_vec()));
    }
    assert!(
        seen.contains(&to_ours),
        "frame to our unicast address not received"
    );
    assert!(seen.contains(&to_bcast), "broadcast not received");
    assert!(!seen.contains(&to_other), "frame for another host received");
    assert!(port.stats().rx_otherhost_filtered >= 1);
}

/// Setting the interface down makes transmit report link down and `link_state` say so; after
/// it is set up again the same port transmits without a reopen.
#[test]
fn interface_down_and_up() {
    skip_unless_root!();
    use qbridge_io::sys::LinkState;
    let v = VethPair::new().unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    let mut pool = BufPool::new(16);
    let frame = tagged_frame(&[], 50);
    v.ns_a.ip(&["link", "set", &v.a, "down"]).unwrap();
    assert_eq!(port.link_state().unwrap(), LinkState::AdminDown);
    let mut batch = Batch::default();
    batch.push(PacketBuf::from_frame(&frame));
    let e = port.tx_burst(&mut batch, &mut pool).unwrap_err();
    assert!(e.is_link_down(), "{e}");
    assert!(batch.is_empty() && pool.available() == 1);
    // The kernel also flagged the socket; the next idle receive reports it (once).
    let rx = port.rx_burst(&mut batch, &mut pool, 8);
    assert!(matches!(&rx, Err(e) if e.is_link_down()), "{rx:?}");
    v.ns_a.ip(&["link", "set", &v.a, "up"]).unwrap();
    // Carrier (IFF_RUNNING) follows a moment after IFF_UP.
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.link_state().unwrap() != LinkState::Up && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(port.link_state().unwrap(), LinkState::Up);
    batch.push(PacketBuf::from_frame(&frame));
    let out = port.tx_burst(&mut batch, &mut pool).unwrap();
    assert_eq!(out.sent, 1);
}

/// Frames the kernel drops because the receive ring is full are counted exactly: a small ring
/// that nobody reads is flooded, then `rx_ring_full` equals the frames sent minus the frames
/// the ring holds; a second poll adds nothing (the kernel's counters reset on read).
#[test]
fn ring_full_drops_are_counted_exactly() {
    skip_unless_root!();
    for ring in [RingVersion::V2, RingVersion::V3] {
        let v = VethPair::new().unwrap();
        let mut cfg = ring_cfg(&v.a, ring);
        cfg.block_bytes = 128 * 1024;
        cfg.block_count = 2;
        let mut port = open_in(&v.ns_a.name, cfg);
        const SENT: usize = 3000;
        let frames: Vec<Vec<u8>> = (0..SENT)
            .map(|i| {
                let mut f = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 46);
                f[30..34].copy_from_slice(&(i as u32).to_be_bytes());
                f
            })
            .collect();
        let b = v.b.clone();
        let sent = run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
            .unwrap()
            .unwrap();
        assert_eq!(sent, SENT);
        // V3: let the block timer hand over the last, partly filled block.
        std::thread::sleep(Duration::from_millis(50));
        port.poll_kernel_stats().unwrap();
        let mut pool = BufPool::new(4096);
        let mut received = 0;
        loop {
            let mut batch = Batch::with_capacity(256);
            let n = port.rx_burst(&mut batch, &mut pool, 256).unwrap();
            received += n;
            for p in batch.drain() {
                pool.put(p);
            }
            if n == 0 {
                break;
            }
        }
        let st = port.stats();
        eprintln!(
            "{ring:?} ring of 2 x 128 KiB, unread: {SENT} sent, {received} in the ring, \
             rx_ring_full {}, rx_ring_frozen {}",
            st.rx_ring_full, st.rx_ring_frozen
        );
        assert!(received > 0 && received < SENT);
        assert_eq!(st.rx_ring_full, (SENT - received) as u64, "{st:?}");
        port.poll_kernel_stats().unwrap();
        assert_eq!(port.stats().rx_ring_full, st.rx_ring_full);
    }
}

/// One shared receive filter for two sockets of a port (a fanout group, as two workers would
/// have): 20 000 unicast addresses added one at a time, then one removed and one added,
/// without reopening either socket. Frames to an accepted address arrive; frames to the
/// removed address and to an address never added are dropped and counted; `set_unicast`
/// drops the rest in one call, and promiscuous mode takes everything. Timings are printed.
#[test]
fn shared_filter_changes_without_reopen() {
    skip_unless_root!();
    use qbridge_io::afpacket::{fanout_group_for, Fanout, FanoutMode, RxFilterHandle};
    let v = VethPair::new().unwrap();
    let a = v.a.clone();
    let filter = run_in_netns(&v.ns_a.name, || RxFilterHandle::open(&a))
        .unwrap()
        .unwrap();
    let mut ports: Vec<AfPacketPort> = (0..2)
        .map(|_| {
            let mut cfg = AfPacketConfig::new(&v.a);
            cfg.filter = Some(filter.clone());
            cfg.block_count = 4;
            cfg.fanout = Some(Fanout::new(fanout_group_for(1), FanoutMode::Hash));
            open_in(&v.ns_a.name, cfg)
        })
        .collect();
    let mac = |i: u32| [0x02, 0xaa, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8];
    const N: u32 = 20_000;
    let t0 = Instant::now();
    for i in 0..N {
        assert!(filter.add_unicast(mac(i)).unwrap());
    }
    let add_all = t0.elapsed();
    let t1 = Instant::now();
    assert!(filter.del_unicast(mac(1)).unwrap());
    let del_one = t1.elapsed();
    let t2 = Instant::now();
    assert!(filter.add_unicast(mac(N)).unwrap());
    let add_one = t2.elapsed();
    assert_eq!(filter.unicast_len(), N as usize);
    eprintln!(
        "{N} unicast addresses added one by one in {:.3} s ({:.1} µs each); then one removed in \
         {} µs, one added in {} µs",
        add_all.as_secs_f64(),
        add_all.as_secs_f64() * 1e6 / f64::from(N),
        del_one.as_micros(),
        add_one.as_micros()
    );

    let frame_to = |dst: [u8; 6], n: u8| {
        let mut f = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 50);
        f[..6].copy_from_slice(&dst);
        f[30] = n;
        f
    };
    let other = [0x02, 0xbb, 0, 0, 0, 1];
    let send_and_collect = |ports: &mut [AfPacketPort], frames: Vec<Vec<u8>>| {
        let b = v.b.clone();
        run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
            .unwrap()
            .unwrap();
        let mut pool = BufPool::new(64);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            ports[0].wait_readable(10).unwrap();
            for p in ports.iter_mut() {
                let mut batch = Batch::default();
                p.rx_burst(&mut batch, &mut pool, 64).unwrap();
                seen.extend(batch.drain().map(|p| p.frame().to_vec()));
            }
        }
        seen
    };
    let filtered = |ports: &[AfPacketPort]| -> u64 {
        ports.iter().map(|p| p.stats().rx_otherhost_filtered).sum()
    };
    let (kept, removed, added, never) = (
        frame_to(mac(0), 1),
        frame_to(mac(1), 2),
        frame_to(mac(N), 3),
        frame_to(other, 4),
    );
    let seen = send_and_collect(
        &mut ports,
        vec![kept.clone(), removed.clone(), added.clone(), never.clone()],
    );
    assert!(seen.contains(&kept), "frame to an accepted address lost");
    assert!(
        seen.contains(&added),
        "frame to the address added last lost"
    );
    assert!(
        !seen.contains(&removed),
        "frame to the removed address received"
    );
    assert!(!seen.contains(&never), "frame to another host received");
    assert_eq!(filtered(&ports), 2);

    // Back to one address: the difference only.
    let t3 = Instant::now();
    assert_eq!(filter.set_unicast(&[mac(0)]).unwrap(), (0, N as usize - 1));
    eprintln!(
        "set_unicast down to 1 address: {:.3} s",
        t3.elapsed().as_secs_f64()
    );
    let seen = send_and_collect(&mut ports, vec![kept.clone(), added.clone()]);
    assert!(seen.contains(&kept) && !seen.contains(&added));
    assert_eq!(filtered(&ports), 3);

    // Promiscuous: everything, with no socket reopened.
    filter.set_promisc(true).unwrap();
    let seen = send_and_collect(&mut ports, vec![never.clone()]);
    assert!(seen.contains(&never), "promiscuous port missed a frame");
    filter.set_promisc(false).unwrap();
    let seen = send_and_collect(&mut ports, vec![never.clone()]);
    assert!(!seen.contains(&never));
    assert_eq!(filtered(&ports), 4);
}

/// Sends `n` 64-byte frames from the peer into a port nobody reads, then reads what the ring
/// kept: (received, rx_ring_full).
fn unread_flood(v: &VethPair, port: &mut AfPacketPort, n: usize) -> (usize, u64) {
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut f = tagged_frame(&[(0x8100, 10)], 46);
            f[20..24].copy_from_slice(&(i as u32).to_be_bytes());
            f
        })
        .collect();
    let b = v.b.clone();
    let sent = run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
        .unwrap()
        .unwrap();
    assert_eq!(sent, n);
    std::thread::sleep(Duration::from_millis(50));
    port.poll_kernel_stats().unwrap();
    let mut pool = BufPool::new(512);
    let mut received = 0;
    loop {
        let mut batch = Batch::with_capacity(256);
        let got = port.rx_burst(&mut batch, &mut pool, 256).unwrap();
        received += got;
        for p in batch.drain() {
            pool.put(p);
        }
        if got == 0 {
            break;
        }
    }
    (received, port.stats().rx_ring_full)
}

/// The default ring holds a burst of 8000 minimum-size frames that nobody reads yet (the old
/// ring of 64.5 KiB slots kept 480 of them), in half the memory.
#[test]
fn default_ring_absorbs_a_burst_of_small_frames() {
    skip_unless_root!();
    const BURST: usize = 8000;
    let v = VethPair::new().unwrap();
    let cfg = AfPacketConfig::new(&v.a);
    assert_eq!(cfg.ring_frames(), DEFAULT_RING_FRAMES);
    let bytes = cfg.ring_bytes();
    let mut port = open_in(&v.ns_a.name, cfg);
    let (received, full) = unread_flood(&v, &mut port, BURST);
    eprintln!(
        "default ring ({} frames, {} MiB): {BURST} sent, {received} kept, {full} dropped",
        DEFAULT_RING_FRAMES,
        bytes >> 20
    );
    assert_eq!((received, full), (BURST, 0));
    drop(port);

    let mut old = AfPacketConfig::new(&v.a);
    old.slot_bytes = V2_SUPER_SLOT_BYTES;
    old.block_count = 32;
    let bytes = old.ring_bytes();
    let slots = old.ring_frames();
    let mut port = open_in(&v.ns_a.name, old);
    let (received, full) = unread_flood(&v, &mut port, BURST);
    eprintln!(
        "old ring ({slots} slots of 64.5 KiB, {} MiB): {BURST} sent, {received} kept, {full} dropped",
        bytes >> 20
    );
    assert_eq!(received, slots as usize);
    assert_eq!(full, (BURST - received) as u64);
}

/// A frame longer than a V2 slot (4012 bytes, S-tag and C-tag, device MTU 4000) arrives whole
/// through the socket queue, with both tags; a frame that fits stays on the ring.
#[test]
fn frames_longer_than_a_slot_arrive_whole() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    v.ns_a.ip(&["link", "set", &v.a, "mtu", "4000"]).unwrap();
    v.ns_b.ip(&["link", "set", &v.b, "mtu", "4000"]).unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
    let big = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 3990);
    let small = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 1900);
    assert_eq!(big.len(), 4012);
    let (b, frames) = (v.b.clone(), vec![small.clone(), big.clone(), small.clone()]);
    run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
        .unwrap()
        .unwrap();
    let mut pool = BufPool::new(64);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while seen.len() < 3 && Instant::now() < deadline {
        port.wait_readable(20).unwrap();
        let mut batch = Batch::default();
        port.rx_burst(&mut batch, &mut pool, 64).unwrap();
        seen.extend(batch.drain().map(|p| p.frame().to_vec()));
    }
    assert_eq!(seen, vec![small.clone(), big, small], "{:?}", port.stats());
    assert_eq!(port.stats().rx_copied, 1);
    assert_eq!(port.stats().rx_truncated, 0);
}

/// Kibibytes of the process's memory resident in the mappings of the socket behind `fd`
/// (`/proc/self/smaps`: a packet ring is mapped from its socket, `socket:[INODE]`).
fn ring_rss_kib(fd: std::os::fd::RawFd) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .ino();
    let name = format!("socket:[{ino}]");
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut inside, mut kib) = (false, 0);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: `start-end perms offset dev inode [name]`.
            inside = line.ends_with(&name);
        } else if let (true, Some(v)) = (inside, line.strip_prefix("Rss:")) {
            kib += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap();
        }
    }
    kib
}

/// Ring memory per socket is what the configuration says: each socket's ring, mapped with
/// MAP_POPULATE, is resident in full in this process (its `socket:[INODE]` mapping in
/// `/proc/self/smaps`, exact whatever other processes do), for the default ring (8192 x 2
/// KiB: 16 MiB), the old one (480 x 64.5 KiB in 32 blocks of 1 MiB) and a bigger one. The
/// machine's MemAvailable drop is printed beside it (other processes move that one too).
#[test]
fn ring_memory_per_socket() {
    skip_unless_root!();
    fn available_kib() -> i64 {
        let m = std::fs::read_to_string("/proc/meminfo").unwrap();
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
    use std::os::fd::AsRawFd;
    let v = VethPair::new().unwrap();
    const SOCKETS: i64 = 2;
    let mut old = AfPacketConfig::new(&v.a);
    old.slot_bytes = V2_SUPER_SLOT_BYTES;
    old.block_count = 32;
    for (what, cfg, mib) in [
        ("default V2 (8192 x 2 KiB)", AfPacketConfig::new(&v.a), 16),
        ("old V2 (480 x 64.5 KiB)", old, 32),
        (
            "V2 with_ring_frames(32768)",
            AfPacketConfig::new(&v.a).with_ring_frames(32_768),
            64,
        ),
    ] {
        assert_eq!(cfg.ring_bytes(), mib << 20, "{what}");
        let before = available_kib();
        let ports: Vec<AfPacketPort> = (0..SOCKETS)
            .map(|_| open_in(&v.ns_a.name, cfg.clone()))
            .collect();
        let after = available_kib();
        for p in &ports {
            assert_eq!(
                ring_rss_kib(p.as_raw_fd()),
                cfg.ring_bytes() / 1024,
                "{what}: the ring is resident, all of it and no more"
            );
        }
        eprintln!(
            "{what}: {} frames, {} MiB per socket, resident; MemAvailable fell {:.1} MiB \
             per socket",
            cfg.ring_frames(),
            cfg.ring_bytes() >> 20,
            (before - after) as f64 / SOCKETS as f64 / 1024.0
        );
        drop(ports);
    }
}

/// The device's promiscuity count (`ip -d link show`): a veth has no unicast filter, so a
/// unicast membership makes it promiscuous (one count), as does `PACKET_MR_PROMISC`.
fn promiscuity(ns: &str, dev: &str) -> u32 {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "promiscuity" {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no promiscuity in {text}")
}

/// A shared filter's memberships live on the device: dropping the handle removes them, and
/// after the interface was deleted and recreated `reattach` makes them again (with the port's
/// `reopen`), so the filter keeps working.
#[test]
fn shared_filter_reattaches_after_interface_recreation() {
    skip_unless_root!();
    use qbridge_io::afpacket::RxFilterHandle;
    let v = VethPair::new().unwrap();
    let (ns_a, a) = (v.ns_a.name.clone(), v.a.clone());
    let filter = run_in_netns(&ns_a, || RxFilterHandle::open(&a))
        .unwrap()
        .unwrap();
    let ours = [0x02, 0xaa, 0, 0, 0, 7];
    filter.add_unicast(ours).unwrap();
    assert_eq!(
        promiscuity(&ns_a, &a),
        1,
        "unicast membership not on the device"
    );
    filter.set_promisc(true).unwrap();
    assert_eq!(promiscuity(&ns_a, &a), 2);
    filter.set_promisc(false).unwrap();
    let mut cfg = AfPacketConfig::new(&v.a);
    cfg.filter = Some(filter.clone());
    let mut port = open_in(&ns_a, cfg);

    v.ns_a.ip(&["link", "del", &v.a]).unwrap();
    v.ns_a
        .ip(&[
            "link",
            "add",
            &v.a,
            "type",
            "veth",
            "peer",
            "name",
            &v.b,
            "netns",
            &v.ns_b.name,
        ])
        .unwrap();
    v.ns_a.ip(&["link", "set", &v.a, "up"]).unwrap();
    v.ns_b.ip(&["link", "set", &v.b, "up"]).unwrap();
    assert_eq!(promiscuity(&ns_a, &a), 0);
    run_in_netns(&ns_a, || port.reopen()).unwrap().unwrap();
    run_in_netns(&ns_a, || filter.reattach()).unwrap().unwrap();
    assert_eq!(promiscuity(&ns_a, &a), 1, "membership not made again");

    let mut to_ours = tagged_frame(&[(0x88a8, 5)], 50);
    to_ours[..6].copy_from_slice(&ours);
    let mut to_other = to_ours.clone();
    to_other[5] = 8;
    let (b, frames) = (v.b.clone(), vec![to_other.clone(), to_ours.clone()]);
    run_in_netns(&v.ns_b.name, move || common::raw_send_all(&b, &frames))
        .unwrap()
        .unwrap();
    let got = receive_matching(&mut port, &to_ours);
    assert!(got.is_some(), "frame to the accepted address lost");
    assert!(port.stats().rx_otherhost_filtered >= 1);

    drop(port);
    drop(filter);
    assert_eq!(promiscuity(&ns_a, &a), 0, "memberships outlived the filter");
}
