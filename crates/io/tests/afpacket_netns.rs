//! AF_PACKET port on real veth pairs in namespaces the test creates (root only; skipped with a
//! printed reason otherwise). Every namespace is deleted on drop, also when an assert fails.
#![allow(unsafe_code)]

mod common;

use std::time::{Duration, Instant};

use common::{raw_send, tagged_frame, VethPair};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
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
    let v = VethPair::new().unwrap();
    let mut port = open_in(&v.ns_a.name, AfPacketConfig::new(&v.a));
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
