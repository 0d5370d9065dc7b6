//! AF_XDP port on real veth pairs in namespaces the test creates (root only; skipped with a
//! printed reason otherwise, a failure with `QBRIDGE_REQUIRE_NETNS=1`). Every namespace is
//! deleted on drop, also when an assert fails, and with it every XDP program (a BPF link
//! detaches when its interface goes).
#![allow(unsafe_code)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{raw_send, tagged_frame, VethPair};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
use qbridge_io::afxdp::{AfXdpConfig, AfXdpPort, XdpMode, XdpProgram};
use qbridge_io::netns::run_in_netns;
use qbridge_io::{Port, TxOutcome};
use qbridge_packet::{Batch, BufPool, PacketBuf};

const MODES: [XdpMode; 2] = [XdpMode::Skb, XdpMode::Native];

fn cfg(ifname: &str, mode: XdpMode) -> AfXdpConfig {
    AfXdpConfig {
        mode,
        ..AfXdpConfig::new(ifname, 0)
    }
}

fn open_xdp(ns: &str, cfg: AfXdpConfig) -> AfXdpPort {
    run_in_netns(ns, move || AfXdpPort::open(cfg))
        .unwrap()
        .unwrap_or_else(|e| panic!("AfXdpPort::open: {e}"))
}

fn open_packet(ns: &str, ifname: &str) -> AfPacketPort {
    let cfg = AfPacketConfig::new(ifname);
    run_in_netns(ns, move || AfPacketPort::open(cfg))
        .unwrap()
        .unwrap()
}

/// Receives on `port` until `want` frames equal to one of `frames` showed up (in any order)
/// or 3 s pass; returns the matching frames received, in order.
fn receive<P: Port>(
    port: &mut P,
    wait: impl Fn(&P) -> bool,
    frames: &[Vec<u8>],
    want: usize,
) -> Vec<Vec<u8>> {
    let mut pool = BufPool::new(256);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < want && Instant::now() < deadline {
        wait(port);
        let mut batch = Batch::with_capacity(64);
        port.rx_burst(&mut batch, &mut pool, 64).unwrap();
        for p in batch.drain() {
            if frames.iter().any(|f| f[..] == *p.frame()) {
                got.push(p.frame().to_vec());
            }
            pool.put(p);
        }
    }
    got
}

fn xdp_wait(p: &AfXdpPort) -> bool {
    p.wait_readable(50).unwrap()
}

fn packet_wait(p: &AfPacketPort) -> bool {
    p.wait_readable(50).unwrap()
}

/// Frames with every kind of tag stack, sent by a raw AF_PACKET socket from the peer
/// namespace, reach the AF_XDP port byte for byte: XDP sees tags where the sender wrote them
/// (no stripping, nothing to restore).
fn receive_tag_stacks(mode: XdpMode) {
    let v = VethPair::new().unwrap();
    let mut port = open_xdp(&v.ns_a.name, cfg(&v.a, mode));
    let frames = vec![
        tagged_frame(&[], 46),
        tagged_frame(&[(0x8100, 10 | 3 << 13)], 60),
        tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 60),
        tagged_frame(&[(0x88a8, 100), (0x8100, 10), (0x8100, 20)], 200),
        tagged_frame(&[(0x9100, 7), (0x8100, 8)], 80),
        // A full-size frame with two tags: 1522 bytes (MTU 1500 + 14 + 8).
        tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 1500),
    ];
    // The receiving veth accepts MTU + 18 only; make room for the 1522-byte frame.
    v.ns_a.ip(&["link", "set", &v.a, "mtu", "1508"]).unwrap();
    v.ns_b.ip(&["link", "set", &v.b, "mtu", "1508"]).unwrap();
    let (b, fs) = (v.b.clone(), frames.clone());
    run_in_netns(&v.ns_b.name, move || {
        for f in &fs {
            raw_send(&b, f).unwrap();
        }
    })
    .unwrap();
    let got = receive(&mut port, xdp_wait, &frames, frames.len());
    assert_eq!(
        got, frames,
        "mode {mode}: frames not received byte-exact in order"
    );
    let s = port.stats();
    assert_eq!(s.rx_truncated, 0, "{s:?}");
    let k = port.read_kernel_stats().unwrap();
    assert_eq!(
        k.rx_dropped + k.rx_invalid_descs + k.rx_ring_full,
        0,
        "{k:?}"
    );
}

#[test]
fn skb_mode_receives_tag_stacks_byte_exact() {
    skip_unless_root!();
    receive_tag_stacks(XdpMode::Skb);
}

#[test]
fn native_mode_receives_tag_stacks_byte_exact() {
    skip_unless_root!();
    receive_tag_stacks(XdpMode::Native);
}

/// A batch sent through the AF_XDP port arrives byte-exact at an AF_PACKET port on the peer
/// (which restores the tag its kernel strips), tags included; frames over `max_frame` are
/// counted as too long, not sent.
fn send_tag_stacks(mode: XdpMode) {
    let v = VethPair::new().unwrap();
    let mut tx = open_xdp(&v.ns_a.name, cfg(&v.a, mode));
    let mut rx = open_packet(&v.ns_b.name, &v.b);
    assert_eq!(tx.caps().max_frame, 1518);
    assert!(!tx.caps().tso && !tx.caps().csum && !tx.caps().vnet_hdr);
    let frames = vec![
        tagged_frame(&[], 46),
        tagged_frame(&[(0x8100, 10)], 60),
        tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 60),
        tagged_frame(&[(0x88a8, 100), (0x8100, 10), (0x8100, 20)], 300),
        tagged_frame(&[(0x88a8, 100)], 1500),
    ];
    let mut pool = BufPool::new(64);
    let mut batch = Batch::default();
    for f in &frames {
        batch.push(PacketBuf::from_frame(f));
    }
    batch.push(PacketBuf::from_frame(&tagged_frame(
        &[(0x88a8, 1), (0x8100, 2)],
        1500,
    )));
    let out = tx.tx_burst(&mut batch, &mut pool).unwrap();
    assert_eq!(
        out,
        TxOutcome {
            sent: 5,
            queue_full: 0,
            error: 1
        }
    );
    assert!(batch.is_empty());
    assert_eq!(tx.stats().tx_too_long, 1);
    let got = receive(&mut rx, packet_wait, &frames, frames.len());
    assert_eq!(
        got, frames,
        "mode {mode}: frames not delivered byte-exact in order"
    );
    // Every frame completes: the UMEM frames come back.
    let deadline = Instant::now() + Duration::from_secs(2);
    while tx.tx_in_flight() > 0 && Instant::now() < deadline {
        let mut empty = Batch::default();
        let _ = tx.tx_burst(&mut empty, &mut pool);
        batch.push(PacketBuf::from_frame(&frames[0]));
        let _ = tx.tx_burst(&mut batch, &mut pool);
        std::thread::sleep(Duration::from_millis(10));
    }
    let k = tx.read_kernel_stats().unwrap();
    assert_eq!(k.tx_invalid_descs, 0, "{k:?}");
}

#[test]
fn skb_mode_sends_tag_stacks_byte_exact() {
    skip_unless_root!();
    send_tag_stacks(XdpMode::Skb);
}

#[test]
fn native_mode_sends_tag_stacks_byte_exact() {
    skip_unless_root!();
    send_tag_stacks(XdpMode::Native);
}

/// Two AF_XDP ports on two veth pairs, joined by a forwarding loop: host A (namespace) —
/// veth — [port 1 <loop> port 2] — veth — host B. The kernels' own ping and TCP go through.
fn kernel_hosts_through_two_ports(mode: XdpMode) {
    use std::io::Write;
    let left = VethPair::new().unwrap();
    let right = VethPair::new().unwrap();
    // Host A is left.ns_b, host B is right.ns_b; the switch side is left.ns_a / right.ns_a.
    left.ns_b
        .ip(&["addr", "add", "10.79.0.1/24", "dev", &left.b])
        .unwrap();
    right
        .ns_b
        .ip(&["addr", "add", "10.79.0.2/24", "dev", &right.b])
        .unwrap();
    // AF_XDP carries no offload metadata: a host that leaves its TCP checksums to the device
    // (veth: tx checksum offload on by default) would send frames whose checksum nobody
    // completes. Hosts of AF_XDP ports compute their own (`tx off`, which turns TSO off too).
    for (ns, dev) in [(&left.ns_b, &left.b), (&right.ns_b, &right.b)] {
        ethtool_off(&ns.name, dev, &["tx"]);
    }
    let p1 = open_xdp(&left.ns_a.name, cfg(&left.a, mode));
    let p2 = open_xdp(&right.ns_a.name, cfg(&right.a, mode));
    let stop = Arc::new(AtomicBool::new(false));
    let fwd = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || forward(p1, p2, &stop))
    };
    let ping = std::process::Command::new("ip")
        .args(["netns", "exec", &left.ns_b.name])
        .args(["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.79.0.2"])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "mode {mode}: ping failed: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // A TCP stream of 2 MB, verified byte for byte.
    let listener = run_in_netns(&right.ns_b.name, || {
        std::net::TcpListener::bind("10.79.0.2:0")
    })
    .unwrap()
    .unwrap();
    let port = listener.local_addr().unwrap().port();
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sink = common::tcp_sink(listener, data.len());
    let d = data.clone();
    run_in_netns(&left.ns_b.name, move || {
        let mut s = std::net::TcpStream::connect(("10.79.0.2", port)).unwrap();
        s.write_all(&d).unwrap();
    })
    .unwrap();
    let got = sink.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (p1, p2) = fwd.join().unwrap();
    assert!(
        got == data,
        "mode {mode}: TCP stream corrupted or cut ({} bytes)",
        got.len()
    );
    // Full-size segments crossed (the hosts' TSO/GSO segments at the veth: MTU 1500).
    assert!(p1.stats().tx_too_long + p2.stats().tx_too_long == 0);
}

/// `ethtool -K DEV FEATURE off…` in namespace `ns`.
fn ethtool_off(ns: &str, dev: &str, features: &[&str]) {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns, "ethtool", "-K", dev]);
    for f in features {
        c.args([f, "off"]);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "ethtool -K {dev}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's whole switch: every frame of one port goes out of the other.
fn forward(mut p1: AfXdpPort, mut p2: AfXdpPort, stop: &AtomicBool) -> (AfXdpPort, AfXdpPort) {
    let mut pool = BufPool::new(512);
    let mut batch = Batch::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        if p1.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
            idle = false;
            let _ = p2.tx_burst(&mut batch, &mut pool).unwrap();
        }
        if p2.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
            idle = false;
            let _ = p1.tx_burst(&mut batch, &mut pool).unwrap();
        }
        if idle {
            // Both sockets in one poll would be the daemon's epoll; a short wait suffices.
            let mut fds = [p1.as_pollfd(), p2.as_pollfd()];
            // SAFETY: two live pollfds, matching the count.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 5) };
        }
    }
    (p1, p2)
}

trait AsPollFd {
    fn as_pollfd(&self) -> libc::pollfd;
}

impl AsPollFd for AfXdpPort {
    fn as_pollfd(&self) -> libc::pollfd {
        use std::os::fd::AsRawFd;
        libc::pollfd {
            fd: self.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }
    }
}

#[test]
fn skb_mode_forwards_kernel_ping_and_tcp() {
    skip_unless_root!();
    kernel_hosts_through_two_ports(XdpMode::Skb);
}

#[test]
fn native_mode_forwards_kernel_ping_and_tcp() {
    skip_unless_root!();
    kernel_hosts_through_two_ports(XdpMode::Native);
}

/// Several queues of one interface share one program: the second port on the same queue is
/// refused, a port on another queue is taken by the program (bind fails on a one-queue veth,
/// with a message naming the queue), and the queue is free again once its port is dropped.
#[test]
fn one_program_per_interface_one_port_per_queue() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    for mode in MODES {
        let a = v.a.clone();
        run_in_netns(&v.ns_a.name, move || {
            let prog = XdpProgram::attach(&a, mode).unwrap();
            let c = cfg(&a, mode);
            let p0 = AfXdpPort::open_with(c.clone(), &prog).unwrap();
            let e = AfXdpPort::open_with(c.clone(), &prog).unwrap_err();
            assert!(e.to_string().contains("queue 0 has an AF_XDP port"), "{e}");
            let e = AfXdpPort::open_with(
                AfXdpConfig {
                    queue_id: 1,
                    ..c.clone()
                },
                &prog,
            )
            .unwrap_err();
            assert!(e.to_string().contains("queue 1"), "{e}");
            // A second program on the same interface is refused while the first is attached.
            let e = XdpProgram::attach(&a, mode).unwrap_err();
            assert!(e.to_string().contains("attached already"), "{e}");
            let other = match mode {
                XdpMode::Skb => XdpMode::Native,
                XdpMode::Native => XdpMode::Skb,
            };
            let e = AfXdpPort::open_with(
                AfXdpConfig {
                    mode: other,
                    ..c.clone()
                },
                &prog,
            )
            .unwrap_err();
            assert!(e.to_string().contains("mode"), "{e}");
            drop(p0);
            let p0 = AfXdpPort::open_with(c, &prog).unwrap();
            drop(p0);
            assert_eq!(Arc::strong_count(&prog), 1);
        })
        .unwrap();
    }
    // Every program is gone with its last port: a plain one attaches again.
    let a = v.a.clone();
    run_in_netns(&v.ns_a.name, move || {
        drop(XdpProgram::attach(&a, XdpMode::Skb).unwrap());
    })
    .unwrap();
}

/// Deleting the interface makes the port report a link-down error.
#[test]
fn interface_removal_is_link_down() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let mut port = open_xdp(&v.ns_a.name, cfg(&v.a, XdpMode::Skb));
    v.ns_a.ip(&["link", "del", &v.a]).unwrap();
    let mut pool = BufPool::new(16);
    let mut batch = Batch::default();
    let rx = port.rx_burst(&mut batch, &mut pool, 8);
    assert!(matches!(&rx, Err(e) if e.is_link_down()), "rx {rx:?}");
    assert!(port.link_state().is_err());
}

// ----- a tag that exists only as skb metadata -----

/// Attaches to `ifname` (calling thread's namespace) a tcx egress program that pushes an
/// 0x88a8 tag with VID 100 on every frame with `bpf_skb_vlan_push`: the kernel keeps a tag
/// pushed so as skb metadata (`vlan_tci`, "hardware accelerated") as long as the device
/// offers VLAN insertion, which veth does. This is how a host's own VLAN offload hands a veth
/// a tag: not in the frame bytes. Returns the link (detaches on drop).
fn attach_tcx_vlan_push(ifname: &str) -> std::os::fd::OwnedFd {
    use qbridge_io::afxdp::Insn;
    use std::os::fd::FromRawFd;
    let insns = [
        Insn::mov64_imm(2, i32::from(0x88a8u16.to_be())),
        Insn::mov64_imm(3, 100),
        Insn::call(18),        // bpf_skb_vlan_push(skb, proto, tci)
        Insn::mov64_imm(0, 0), // TCX_PASS
        Insn::exit(),
    ];
    let license = b"Dual MIT/GPL\0";
    // union bpf_attr for BPF_PROG_LOAD, as u32 words: prog_type SCHED_CLS (3), insn_cnt,
    // insns (u64), license (u64), then zeros up to expected_attach_type (word 17) =
    // BPF_TCX_EGRESS (47).
    let mut load = [0u32; 18];
    load[0] = 3;
    load[1] = insns.len() as u32;
    load[2..4].copy_from_slice(&split(insns.as_ptr() as u64));
    load[4..6].copy_from_slice(&split(license.as_ptr() as u64));
    load[17] = 47;
    let prog = bpf(5, &mut load).expect("BPF_PROG_LOAD tcx");
    let ifindex = qbridge_io::sys::ifindex(ifname).unwrap();
    // BPF_LINK_CREATE: prog_fd, target_ifindex, attach_type, flags, then tcx's zeros.
    let mut link = [0u32; 8];
    link[0] = prog as u32;
    link[1] = ifindex;
    link[2] = 47;
    let fd = bpf(28, &mut link).expect("BPF_LINK_CREATE tcx egress");
    // SAFETY: `prog` is a descriptor bpf() just returned to us; the link holds the program.
    unsafe { libc::close(prog) };
    // SAFETY: `fd` is a fresh descriptor bpf() returned, owned by nobody else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

fn split(v: u64) -> [u32; 2] {
    if cfg!(target_endian = "little") {
        [v as u32, (v >> 32) as u32]
    } else {
        [(v >> 32) as u32, v as u32]
    }
}

fn bpf(cmd: i32, attr: &mut [u32]) -> std::io::Result<i32> {
    // SAFETY: `attr` is a live, zero-padded prefix of union bpf_attr of the size passed;
    // the pointers in it point to arrays the caller keeps alive across the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc as i32)
}

/// The frame is sent with an inline 0x8100 tag; the sender's egress pushes an 0x88a8 tag as
/// metadata. AF_PACKET on the receiver sees both (the backend writes the metadata tag back);
/// XDP, in skb and in native mode, sees only the bytes: the 0x88a8 tag is lost. With VLAN
/// insertion turned off on the sending veth (`txvlan off`, `tx-vlan-stag-hw-insert off`) the
/// kernel writes the tag into the frame before the veth, and XDP sees both.
#[test]
fn metadata_only_tag_is_lost_on_xdp_paths_unless_sender_inserts_it() {
    skip_unless_root!();
    let inner = tagged_frame(&[(0x8100, 10)], 60);
    let full = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 60);
    let cases = [
        (None, true, "both tags"),
        (Some(XdpMode::Skb), true, "inner tag only"),
        (Some(XdpMode::Native), true, "inner tag only"),
        (Some(XdpMode::Skb), false, "both tags"),
        (Some(XdpMode::Native), false, "both tags"),
    ];
    for (backend, txvlan, want) in cases {
        let v = VethPair::new().unwrap();
        if !txvlan {
            ethtool_off(&v.ns_b.name, &v.b, &["txvlan", "tx-vlan-stag-hw-insert"]);
        }
        let b = v.b.clone();
        let _link = run_in_netns(&v.ns_b.name, move || attach_tcx_vlan_push(&b)).unwrap();
        let send = |v: &VethPair| {
            let (b, f) = (v.b.clone(), inner.clone());
            run_in_netns(&v.ns_b.name, move || raw_send(&b, &f))
                .unwrap()
                .unwrap();
        };
        let frames = [inner.clone(), full.clone()];
        let got = match backend {
            None => {
                let mut p = open_packet(&v.ns_a.name, &v.a);
                send(&v);
                receive(&mut p, packet_wait, &frames, 1)
            }
            Some(mode) => {
                let mut p = open_xdp(&v.ns_a.name, cfg(&v.a, mode));
                send(&v);
                receive(&mut p, xdp_wait, &frames, 1)
            }
        };
        let seen = match got.first() {
            Some(f) if *f == full => "both tags",
            Some(f) if *f == inner => "inner tag only",
            _ => "nothing",
        };
        let who = backend.map_or("af_packet".to_string(), |m| format!("af_xdp {m}"));
        assert_eq!(seen, want, "{who}, sender txvlan {txvlan}");
    }
}

/// A veth with 4 queues served by 4 ports from [`AfXdpPort::open_queues`] (one program):
/// every frame the peer sends arrives exactly once, on whichever queue the kernel chose.
#[test]
fn four_queues_share_one_program() {
    skip_unless_root!();
    for mode in MODES {
        let ns_a = common::Netns::new().unwrap();
        let ns_b = common::Netns::new().unwrap();
        let (a, b) = (common::unique("qa"), common::unique("qb"));
        ns_a.ip(&[
            "link",
            "add",
            &a,
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            &b,
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "netns",
            &ns_b.name,
        ])
        .unwrap();
        ns_a.ip(&["link", "set", &a, "up"]).unwrap();
        ns_b.ip(&["link", "set", &b, "up"]).unwrap();
        let a2 = a.clone();
        let mut ports = run_in_netns(&ns_a.name, move || {
            AfXdpPort::open_queues(&cfg(&a2, mode), 4)
        })
        .unwrap()
        .unwrap();
        assert_eq!(ports.len(), 4);
        assert_eq!(Arc::strong_count(ports[0].program()), 4);
        // Distinct frames: the payload's first two bytes number them.
        let frames: Vec<Vec<u8>> = (0..200u16)
            .map(|i| {
                let mut f = tagged_frame(&[(0x88a8, 100), (0x8100, 10)], 60);
                f[22..24].copy_from_slice(&i.to_be_bytes());
                f
            })
            .collect();
        let (b2, fs) = (b.clone(), frames.clone());
        run_in_netns(&ns_b.name, move || {
            for f in &fs {
                raw_send(&b2, f).unwrap();
            }
        })
        .unwrap();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut per_queue = [0usize; 4];
        let mut pool = BufPool::new(256);
        let deadline = Instant::now() + Duration::from_secs(3);
        while got.len() < frames.len() && Instant::now() < deadline {
            for (q, p) in ports.iter_mut().enumerate() {
                let mut batch = Batch::default();
                p.rx_burst(&mut batch, &mut pool, 64).unwrap();
                for f in batch.drain() {
                    if frames.iter().any(|x| x[..] == *f.frame()) {
                        per_queue[q] += 1;
                        got.push(f.frame().to_vec());
                    }
                    pool.put(f);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        got.sort();
        got.dedup();
        assert_eq!(
            got.len(),
            frames.len(),
            "mode {mode}: per queue {per_queue:?}"
        );
        assert_eq!(per_queue.iter().sum::<usize>(), frames.len());
        eprintln!("mode {mode}: frames per queue {per_queue:?}");
    }
}

/// Drops by name, at the edges of the rings: a burst longer than the TX ring sends what fits
/// (batch sizes N-1, N, N+1 of an 8-entry ring) and counts the rest as queue-full; a received
/// frame longer than a UMEM frame's room (2048 - 256 bytes) is dropped by the kernel and
/// counted in its `rx_dropped`, and the frames around it arrive.
#[test]
fn ring_and_umem_limits_are_counted() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    for dev in [(&v.ns_a, &v.a), (&v.ns_b, &v.b)] {
        dev.0.ip(&["link", "set", dev.1, "mtu", "2000"]).unwrap();
    }
    let small = AfXdpConfig {
        frame_count: 16,
        rx_ring_size: 8,
        tx_ring_size: 8,
        ..cfg(&v.a, XdpMode::Skb)
    };
    let mut port = open_xdp(&v.ns_a.name, small);
    assert_eq!(port.caps().max_frame, 2048 - 256);
    let mut pool = BufPool::new(64);
    let frame = tagged_frame(&[(0x8100, 5)], 60);
    for (n, sent) in [(7usize, 7usize), (8, 8), (9, 8)] {
        // Let the previous burst complete so all 8 UMEM frames are free again.
        std::thread::sleep(Duration::from_millis(50));
        let mut batch = Batch::default();
        let _ = port.tx_burst(&mut batch, &mut pool);
        for _ in 0..n {
            batch.push(PacketBuf::from_frame(&frame));
        }
        let before = port.stats().tx_queue_full;
        let out = port.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((out.sent, out.queue_full), (sent, n - sent), "burst of {n}");
        assert_eq!(port.stats().tx_queue_full - before, (n - sent) as u64);
    }

    let frames = [
        tagged_frame(&[], 100),
        tagged_frame(&[(0x88a8, 1), (0x8100, 2)], 1900),
        tagged_frame(&[], 101),
    ];
    let (b, fs) = (v.b.clone(), frames.to_vec());
    run_in_netns(&v.ns_b.name, move || {
        for f in &fs {
            raw_send(&b, f).unwrap();
        }
    })
    .unwrap();
    let want = [frames[0].clone(), frames[2].clone()];
    let got = receive(&mut port, xdp_wait, &frames, 2);
    assert_eq!(got, want);
    let k = port.read_kernel_stats().unwrap();
    assert_eq!(k.rx_dropped, 1, "{k:?}");
}

/// veth has no AF_XDP zero-copy: asking for it fails at open with a message that says so,
/// and leaves the queue free for a copy-mode port.
#[test]
fn zerocopy_on_veth_is_refused_clearly() {
    skip_unless_root!();
    let v = VethPair::new().unwrap();
    let a = v.a.clone();
    run_in_netns(&v.ns_a.name, move || {
        let prog = XdpProgram::attach(&a, XdpMode::Native).unwrap();
        let zc = AfXdpConfig {
            zerocopy: true,
            ..cfg(&a, XdpMode::Native)
        };
        let e = AfXdpPort::open_with(zc, &prog).unwrap_err();
        assert!(e.to_string().contains("zero-copy"), "{e}");
        AfXdpPort::open_with(cfg(&a, XdpMode::Native), &prog).unwrap();
    })
    .unwrap();
}
