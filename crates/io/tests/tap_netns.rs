//! TAP port with the interface moved into a namespace the test creates (root only; skipped
//! with a printed reason otherwise): a ping from the namespace's kernel is seen as frames on the
//! port, and the echo reply the test writes back reaches the namespace's kernel.
#![allow(unsafe_code)]

mod common;

use std::time::{Duration, Instant};

use common::Netns;
use qbridge_io::netns::run_in_netns;
use qbridge_io::tap::{TapConfig, TapPort};
use qbridge_io::{Port, TxOutcome};
use qbridge_packet::{Batch, BufPool, PacketBuf};

const HOST_IP: [u8; 4] = [10, 77, 0, 1];
const PEER_IP: [u8; 4] = [10, 77, 0, 2];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x77, 0x02];
const ECHO_ID: u16 = 0x5142;

fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// In the namespace: sends an ICMP echo request to PEER_IP through a raw socket and waits up
/// to 3 s for the echo reply. Returns whether it came.
fn ping_from_namespace() -> bool {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    assert!(
        fd >= 0,
        "raw ICMP socket: {}",
        std::io::Error::last_os_error()
    );
    let mut icmp = vec![8u8, 0, 0, 0];
    icmp.extend(ECHO_ID.to_be_bytes());
    icmp.extend(1u16.to_be_bytes());
    icmp.extend(b"qbridge tap ping payload");
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(PEER_IP),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `icmp` and `addr` are live for the call with the lengths given.
    let rc = unsafe {
        libc::sendto(
            fd,
            icmp.as_ptr().cast(),
            icmp.len(),
            0,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    assert!(rc > 0, "sendto: {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut got = false;
    let mut buf = [0u8; 2048];
    while !got && Instant::now() < deadline {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
            continue;
        }
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 28 {
            let ihl = usize::from(buf[0] & 0xf) * 4;
            let icmp = &buf[ihl..n as usize];
            got = icmp[0] == 0 && icmp[4..6] == ECHO_ID.to_be_bytes() && buf[12..16] == PEER_IP;
        }
    }
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(fd) };
    got
}

/// Turns an echo request frame into the reply the peer would send.
fn echo_reply(req: &[u8]) -> Vec<u8> {
    let mut f = req.to_vec();
    f[0..6].copy_from_slice(&req[6..12]);
    f[6..12].copy_from_slice(&PEER_MAC);
    let ip = 14;
    let ihl = usize::from(f[ip] & 0xf) * 4;
    f[ip + 12..ip + 16].copy_from_slice(&PEER_IP);
    f[ip + 16..ip + 20].copy_from_slice(&HOST_IP);
    f[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let c = checksum(&f[ip..ip + ihl]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let icmp = ip + ihl;
    f[icmp] = 0;
    f[icmp + 2..icmp + 4].copy_from_slice(&[0, 0]);
    let c = checksum(&f[icmp..]);
    f[icmp + 2..icmp + 4].copy_from_slice(&c.to_be_bytes());
    f
}

fn is_echo_request(f: &[u8]) -> bool {
    f.len() >= 42
        && f[12..14] == [0x08, 0x00]
        && f[14 + 9] == 1
        && f[14 + 16..14 + 20] == PEER_IP
        && f[14 + usize::from(f[14] & 0xf) * 4] == 8
}

#[test]
fn namespace_ping_crosses_the_tap() {
    skip_unless_root!();
    let ns = Netns::new().unwrap();
    let name = common::unique("qt");
    let mut cfg = TapConfig::new(Some(&name));
    cfg.netns = Some(ns.name.clone());
    let mut tap = TapPort::open(cfg).unwrap();
    assert_eq!(tap.ifname(), name);
    let caps = tap.caps();
    assert!(caps.vnet_hdr && caps.tso && caps.csum, "{caps:?}");
    ns.ip(&["addr", "add", "10.77.0.1/24", "dev", &name])
        .unwrap();
    let mac = PEER_MAC.map(|b| format!("{b:02x}")).join(":");
    ns.ip(&["neigh", "add", "10.77.0.2", "lladdr", &mac, "dev", &name])
        .unwrap();

    let ns_name = ns.name.clone();
    let pinger = std::thread::spawn(move || run_in_netns(&ns_name, ping_from_namespace).unwrap());

    let mut pool = BufPool::new(64);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut request = None;
    while request.is_none() && Instant::now() < deadline {
        tap.wait_readable(50).unwrap();
        let mut batch = Batch::with_capacity(32);
        tap.rx_burst(&mut batch, &mut pool, 32).unwrap();
        request = batch.drain().find(|p| is_echo_request(p.frame()));
    }
    let request: PacketBuf = request.expect("no ICMP echo request seen on the TAP");
    assert_eq!(&request.frame()[0..6], &PEER_MAC);

    let mut batch = Batch::default();
    batch.push(PacketBuf::from_frame(&echo_reply(request.frame())));
    let out = tap.tx_burst(&mut batch, &mut pool).unwrap();
    assert_eq!(
        out,
        TxOutcome {
            sent: 1,
            queue_full: 0,
            error: 0
        }
    );
    assert!(
        pinger.join().unwrap(),
        "echo reply written to the TAP did not reach the namespace"
    );
}

/// A TAP (host A's interface, in its own namespace) and an AF_PACKET port (on a veth to host
/// B) joined by a loop that moves every batch to the other port: an 8 MB TCP stream from A to
/// B arrives byte-exact. Host A's kernel hands TCP super-frames with partial checksums to the
/// TAP (TSO/checksum offload negotiated), and they leave through AF_PACKET with their
/// virtio-net header: offload metadata survives the crossing between backends.
#[test]
fn tap_and_afpacket_ports_carry_a_verified_tcp_stream() {
    skip_unless_root!();
    use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let host_a = Netns::new().unwrap();
    let v = common::VethPair::new().unwrap(); // middle (ns_a) -- host B (ns_b)
    let name = common::unique("qt");
    let mut cfg = TapConfig::new(Some(&name));
    cfg.netns = Some(host_a.name.clone());
    let tap = TapPort::open(cfg).unwrap();
    host_a
        .ip(&["addr", "add", "10.80.0.1/24", "dev", &name])
        .unwrap();
    v.ns_b
        .ip(&["addr", "add", "10.80.0.2/24", "dev", &v.b])
        .unwrap();
    let af = run_in_netns(&v.ns_a.name, || {
        AfPacketPort::open(AfPacketConfig::new(&v.a))
    })
    .unwrap()
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let fwd = std::thread::spawn(move || {
        let mut ports: [Box<dyn Port + Send>; 2] = [Box::new(tap), Box::new(af)];
        let mut pool = BufPool::new(1024);
        let mut batch = Batch::with_capacity(64);
        let (mut gso_from_tap, mut csum_from_tap, mut dropped) = (0usize, 0usize, 0usize);
        while !stop2.load(Ordering::Relaxed) {
            let mut idle = true;
            for dir in 0..2 {
                let [a, b] = &mut ports;
                let (rx, tx) = if dir == 0 { (a, b) } else { (b, a) };
                if rx.rx_burst(&mut batch, &mut pool, 64).unwrap() > 0 {
                    idle = false;
                    if dir == 0 {
                        gso_from_tap += batch.iter().filter(|p| p.offload.is_gso()).count();
                        csum_from_tap += batch.iter().filter(|p| p.offload.needs_csum()).count();
                    }
                    dropped += tx.tx_burst(&mut batch, &mut pool).unwrap().dropped();
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        (gso_from_tap, csum_from_tap, dropped)
    });

    const TOTAL: usize = 8 << 20;
    let listener = run_in_netns(&v.ns_b.name, || std::net::TcpListener::bind("10.80.0.2:0"))
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = common::tcp_sink(listener, TOTAL);
    let pattern: Vec<u8> = (0..TOTAL)
        .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    let mut c = run_in_netns(&host_a.name, || std::net::TcpStream::connect(addr))
        .unwrap()
        .unwrap();
    c.write_all(&pattern).unwrap();
    drop(c);
    let got = server.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (gso, csum, dropped) = fwd.join().unwrap();
    eprintln!("from the TAP: {gso} super-frames, {csum} with partial checksum; {dropped} dropped");
    assert_eq!(got.len(), TOTAL);
    assert!(got == pattern, "stream corrupted");
    assert!(gso > 0, "the TAP handed over no super-frames");
    assert!(csum > 0, "the TAP handed over no partial-checksum frames");
}

/// A TAP that is set down refuses writes; the port reports link down.
#[test]
fn tap_down_is_link_down() {
    skip_unless_root!();
    let ns = Netns::new().unwrap();
    let name = common::unique("qt");
    let mut cfg = TapConfig::new(Some(&name));
    cfg.netns = Some(ns.name.clone());
    let mut tap = TapPort::open(cfg).unwrap();
    ns.ip(&["link", "set", &name, "down"]).unwrap();
    let mut pool = BufPool::new(8);
    let mut batch = Batch::default();
    batch.push(PacketBuf::from_frame(&[0xff; 60]));
    let e = tap.tx_burst(&mut batch, &mut pool).unwrap_err();
    assert!(e.is_link_down(), "{e}");
    assert!(batch.is_empty());
}

/// `sys::tun_queues` counts the queues attached to a TAP (what the daemon compares with its
/// own to refuse a qemu attached to qbridge's end): 3 opened, 3 counted; one closed, 2.
#[test]
fn tun_queues_counts_the_attached_queues() {
    skip_unless_root!();
    let ns = Netns::new().unwrap();
    let name = common::unique("qt");
    let mut cfg = TapConfig::new(Some(&name));
    cfg.netns = Some(ns.name.clone());
    cfg.queues = 3;
    let mut queues = TapPort::open_queues(cfg).unwrap();
    let count = |n: &str| {
        let n = n.to_owned();
        run_in_netns(&ns.name, move || qbridge_io::sys::tun_queues(&n))
            .unwrap()
            .unwrap()
    };
    assert_eq!(count(&name), Some(3));
    drop(queues.pop());
    assert_eq!(count(&name), Some(2));
    assert_eq!(count("lo"), None);
}

/// A TAP with 2 queues (host A's interface, moved into its own namespace after both queues
/// were attached) joined to an AF_PACKET port on a veth to host B: 8 TCP connections from A
/// to B arrive byte-exact. Host A's kernel spreads its frames over both queues (by flow),
/// and the frames coming back from B are written alternately on queue 0 and queue 1, so
/// every connection's ACKs cross both queues into A's kernel.
#[test]
fn multiqueue_tap_carries_tcp_on_both_queues() {
    skip_unless_root!();
    use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let host_a = Netns::new().unwrap();
    let v = common::VethPair::new().unwrap(); // middle (ns_a) -- host B (ns_b)
    let name = common::unique("qt");
    let mut cfg = TapConfig::new(Some(&name));
    cfg.netns = Some(host_a.name.clone());
    cfg.queues = 2;
    let queues = TapPort::open_queues(cfg).unwrap();
    assert_eq!(queues.len(), 2);
    assert!(queues.iter().all(|q| q.ifname() == name));
    assert_eq!(
        (queues[0].queue(), queues[1].queue()),
        (0, 1),
        "queue numbers"
    );
    host_a
        .ip(&["addr", "add", "10.81.0.1/24", "dev", &name])
        .unwrap();
    v.ns_b
        .ip(&["addr", "add", "10.81.0.2/24", "dev", &v.b])
        .unwrap();
    let af = run_in_netns(&v.ns_a.name, || {
        AfPacketPort::open(AfPacketConfig::new(&v.a))
    })
    .unwrap()
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let fwd = std::thread::spawn(move || {
        let mut taps = queues;
        let mut af = af;
        let mut pool = BufPool::new(1024);
        let mut batch = Batch::with_capacity(64);
        let mut from_queue = [0usize; 2];
        let mut to_queue = [0usize; 2];
        let mut dropped = 0;
        let mut next = 0;
        while !stop2.load(Ordering::Relaxed) {
            let mut idle = true;
            for (q, tap) in taps.iter_mut().enumerate() {
                let n = tap.rx_burst(&mut batch, &mut pool, 64).unwrap();
                if n > 0 {
                    idle = false;
                    from_queue[q] += n;
                    dropped += af.tx_burst(&mut batch, &mut pool).unwrap().dropped();
                }
            }
            let n = af.rx_burst(&mut batch, &mut pool, 64).unwrap();
            if n > 0 {
                idle = false;
                to_queue[next] += n;
                dropped += taps[next]
                    .tx_burst(&mut batch, &mut pool)
                    .unwrap()
                    .dropped();
                next ^= 1;
            }
            if idle {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        (from_queue, to_queue, dropped)
    });

    const CONNS: usize = 8;
    const EACH: usize = 1 << 20;
    let listener = run_in_netns(&v.ns_b.name, || std::net::TcpListener::bind("10.81.0.2:0"))
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let sinks: Vec<_> = (0..CONNS)
            .map(|_| {
                let (mut s, _) = listener.accept().unwrap();
                std::thread::spawn(move || {
                    use std::io::Read;
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut got = Vec::with_capacity(EACH);
                    s.read_to_end(&mut got).unwrap();
                    got
                })
            })
            .collect();
        sinks
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let pattern = |c: usize| -> Vec<u8> {
        (0..EACH)
            .map(|i| (i.wrapping_mul(40503).wrapping_add(c * 7919) >> 7) as u8)
            .collect()
    };
    let ns_a = host_a.name.clone();
    let clients: Vec<_> = (0..CONNS)
        .map(|c| {
            let ns = ns_a.clone();
            std::thread::spawn(move || {
                let mut s = run_in_netns(&ns, || std::net::TcpStream::connect(addr))
                    .unwrap()
                    .unwrap();
                // The first 8 bytes name the connection, for the check on B's side.
                s.write_all(&(c as u64).to_be_bytes()).unwrap();
                s.write_all(&pattern(c)).unwrap();
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let got = server.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (from_queue, to_queue, dropped) = fwd.join().unwrap();
    eprintln!(
        "{CONNS} connections of {EACH} bytes: frames from queue 0/1 {from_queue:?}, written to \
         queue 0/1 {to_queue:?}, {dropped} dropped"
    );
    assert_eq!(got.len(), CONNS);
    let mut seen = [false; CONNS];
    for g in &got {
        assert_eq!(g.len(), 8 + EACH);
        let c = u64::from_be_bytes(g[..8].try_into().unwrap()) as usize;
        assert!(c < CONNS && !seen[c], "connection {c} twice");
        seen[c] = true;
        assert!(g[8..] == pattern(c)[..], "connection {c} corrupted");
    }
    assert!(
        from_queue.iter().all(|&n| n > 0),
        "the kernel used only one queue: {from_queue:?}"
    );
    assert!(to_queue.iter().all(|&n| n > 0), "{to_queue:?}");
}

/// `TapPort::open` stays single-queue; `open_queues` refuses 0 and more than 256 queues.
#[test]
fn tap_queue_counts_are_checked() {
    let mut cfg = TapConfig::new(Some("qbnever0"));
    cfg.queues = 2;
    assert!(TapPort::open(cfg.clone()).is_err());
    cfg.queues = 0;
    assert!(TapPort::open_queues(cfg.clone()).is_err());
    cfg.queues = 257;
    assert!(TapPort::open_queues(cfg).is_err());
}
