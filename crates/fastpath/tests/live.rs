//! The program on real interfaces (root; skipped otherwise): two switch namespaces joined by
//! a trunk veth, the fast path attached to all four ports with flows put in by hand, a
//! kernel TCP stream from one host namespace to the other. Checks that super-frames cross
//! whole with two tags pushed and popped, the counters, and the upcall device: a miss
//! arrives there with the ingress port index in its accelerated tag.

mod common;

use common::{action, ip, key, port, skip};
use qbridge_fastpath::*;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::Command;

/// Named namespaces, deleted on drop.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Moves the calling thread into namespace `name`.
fn enter(name: &str) {
    let f = std::fs::File::open(format!("/run/netns/{name}")).expect("netns file");
    // SAFETY: setns(2) on a descriptor we own, for this thread only; no memory passed.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {name}: {}", std::io::Error::last_os_error());
}

fn ifindex(ns: &str, dev: &str) -> u32 {
    let o = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn mac(ns: &str, dev: &str) -> [u8; 6] {
    let o = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", dev])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    let m = s
        .split("link/ether ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let mut out = [0u8; 6];
    for (i, b) in m.split(':').enumerate() {
        out[i] = u8::from_str_radix(b, 16).unwrap();
    }
    out
}

/// One switch namespace: access port `acc` (index 1) and trunk port `trunk` (index 2);
/// host A's frames get C-tag 10 in S-tag 100 on the trunk, and lose them the other way.
fn switch(ns: &str, acc: &str, trunk: &str, local: [u8; 6], remote: [u8; 6]) -> FastPath {
    enter(ns);
    let mut fp = FastPath::load().expect("load");
    let (ia, it) = (ifindex(ns, acc), ifindex(ns, trunk));
    fp.set_port(ia, port(1, 0)).unwrap();
    fp.set_port(it, port(2, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    let q = [(0x88a8, 100), (0x8100, 10)];
    // Every frame of the stream qualifies (pure ACKs are 54-66 bytes on a veth, unpadded);
    // the FDB entries below are version 1.
    let act = |gen, out, port, push: &[(u16, u16)]| {
        // Access (port 1, untagged) to trunk (port 2, two tags) and back.
        let in_tags = if push.is_empty() { 2 } else { 0 };
        let mut a = action(gen, (3 - port, in_tags), out, port, 10, push);
        a.min_len = 14;
        a.hops[0].dst_version = 1;
        a
    };
    fp.insert_flow(key(1, remote, &[]), act(gen, it, 2, &q))
        .unwrap();
    fp.insert_flow(key(2, local, &q), act(gen, ia, 1, &[]))
        .unwrap();
    for (m, p) in [(local, 1), (remote, 2)] {
        fp.set_fdb(
            FdbKey {
                fid: 10,
                mac: m,
                ..FdbKey::default()
            },
            FdbEntry {
                port: p,
                version: 1,
                last_seen_ns: 0,
            },
        )
        .unwrap();
    }
    fp.attach(acc).expect("attach access");
    fp.attach(trunk).expect("attach trunk");
    fp
}

#[test]
fn a_tcp_stream_crosses_two_tags_whole_and_misses_go_up_with_their_port() {
    if !FastPath::built() || !nix_root() {
        skip("needs root and a build with clang");
        return;
    }
    let tag = format!("fp{}", std::process::id() % 100000);
    let n = |s: &str| format!("{tag}{s}");
    let names = Namespaces(vec![n("a"), n("b"), n("s1"), n("s2")]);
    for ns in &names.0 {
        ip(&["netns", "add", ns]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    ip(&[
        "link",
        "add",
        "eth0",
        "netns",
        &n("a"),
        "type",
        "veth",
        "peer",
        "name",
        "pa",
        "netns",
        &n("s1"),
    ]);
    ip(&[
        "link",
        "add",
        "eth0",
        "netns",
        &n("b"),
        "type",
        "veth",
        "peer",
        "name",
        "pb",
        "netns",
        &n("s2"),
    ]);
    ip(&[
        "link",
        "add",
        "t1",
        "netns",
        &n("s1"),
        "type",
        "veth",
        "peer",
        "name",
        "t2",
        "netns",
        &n("s2"),
    ]);
    ip(&[
        "link",
        "add",
        "qbup0",
        "netns",
        &n("s1"),
        "type",
        "veth",
        "peer",
        "name",
        "qbup1",
        "netns",
        &n("s1"),
    ]);
    ip(&["-n", &n("a"), "addr", "add", "10.78.0.1/24", "dev", "eth0"]);
    ip(&["-n", &n("b"), "addr", "add", "10.78.0.2/24", "dev", "eth0"]);
    for (ns, dev) in [
        ("a", "eth0"),
        ("b", "eth0"),
        ("s1", "pa"),
        ("s1", "t1"),
        ("s2", "pb"),
        ("s2", "t2"),
        ("s1", "qbup0"),
        ("s1", "qbup1"),
    ] {
        ip(&["-n", &n(ns), "link", "set", dev, "up"]);
    }
    let (ma, mb) = (mac(&n("a"), "eth0"), mac(&n("b"), "eth0"));
    let fmt = |m: [u8; 6]| m.map(|b| format!("{b:02x}")).join(":");
    ip(&[
        "-n",
        &n("a"),
        "neigh",
        "add",
        "10.78.0.2",
        "lladdr",
        &fmt(mb),
        "dev",
        "eth0",
    ]);
    ip(&[
        "-n",
        &n("b"),
        "neigh",
        "add",
        "10.78.0.1",
        "lladdr",
        &fmt(ma),
        "dev",
        "eth0",
    ]);

    let mut s1 = switch(&n("s1"), "pa", "t1", ma, mb);
    let mut s2 = switch(&n("s2"), "pb", "t2", mb, ma);

    // 32 MiB from A to B through both switches, every byte checked.
    const LEN: usize = 32 << 20;
    let nb = n("b");
    let server = std::thread::spawn(move || {
        enter(&nb);
        let l = std::net::TcpListener::bind("10.78.0.2:5201").unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let (mut got, mut bad) = (0usize, 0usize);
        loop {
            let k = c.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            for (i, b) in buf[..k].iter().enumerate() {
                if *b != ((got + i) % 251) as u8 {
                    bad += 1;
                }
            }
            got += k;
        }
        (got, bad)
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let na = n("a");
    let client = std::thread::spawn(move || {
        enter(&na);
        let mut c = std::net::TcpStream::connect("10.78.0.2:5201").unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        c.write_all(&data).unwrap();
    });
    client.join().unwrap();
    let (got, bad) = server.join().unwrap();
    assert_eq!((got, bad), (LEN, 0));

    // The data went A→B on the fast path, as super-frames (bytes per frame over a segment).
    let (hits1, misses1) = s1.verdicts().unwrap();
    let (hits2, _) = s2.verdicts().unwrap();
    assert!(
        hits1 > 0 && hits2 > 0,
        "hits {hits1} {hits2}; misses {misses1:?}"
    );
    let p = s1.port_stats(1).unwrap();
    assert!(p.rx_bytes >= LEN as u64, "{p:?}");
    assert!(p.rx_bytes / p.rx_frames > 1514, "no super-frames: {p:?}");
    let t = s2.port_stats(2).unwrap();
    assert_eq!(t.rx_frames, s2.port_stats(1).unwrap().tx_frames);

    // A miss (a broadcast) with the upcall device set goes there, tagged with its port.
    enter(&n("s1"));
    let up = ifindex(&n("s1"), "qbup0");
    let mut c = s1.config().unwrap();
    c.upcall_ifindex = up;
    s1.set_config(c).unwrap();
    let sock = upcall_socket(up);
    // (No answer comes: the exit status does not matter.)
    let _ = Command::new("ip")
        .args([
            "netns",
            "exec",
            &n("a"),
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "-b",
            "10.78.0.255",
        ])
        .output();
    let (tci, frame) = recv_with_tag(&sock).expect("an upcall");
    assert_eq!(tci, 1, "port index of pa");
    assert_eq!(&frame[0..6], &[0xff; 6]);
    assert_eq!(&frame[6..12], &ma);
}

fn nix_root() -> bool {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::geteuid() };
    uid == 0
}

/// An AF_PACKET socket on `ifindex` with PACKET_AUXDATA, 2 s receive timeout.
fn upcall_socket(ifindex: u32) -> std::os::fd::OwnedFd {
    #[allow(unsafe_code)]
    // SAFETY: plain socket calls on a descriptor we own; the structs passed are initialised
    // and their sizes given.
    unsafe {
        use std::os::fd::FromRawFd;
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        );
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            &one as *const _ as *const libc::c_void,
            4,
        );
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as u32,
        );
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        assert_eq!(
            libc::bind(
                fd,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32
            ),
            0
        );
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }
}

/// The next frame with an accelerated tag: (TCI, frame).
fn recv_with_tag(fd: &std::os::fd::OwnedFd) -> Option<(u16, Vec<u8>)> {
    for _ in 0..16 {
        let mut buf = vec![0u8; 2048];
        let mut ctl = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        #[allow(unsafe_code)]
        // SAFETY: recvmsg(2) into buffers we own, of the lengths given; the control messages
        // are read within `ctl` by the CMSG macros.
        let got = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctl.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&ctl);
            let n = libc::recvmsg(fd.as_raw_fd(), &mut msg, 0);
            if n < 0 {
                return None;
            }
            let mut tci = None;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                    let aux = &*(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata);
                    if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                        tci = Some(aux.tp_vlan_tci);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            tci.map(|t| (t, n as usize))
        };
        if let Some((tci, n)) = got {
            buf.truncate(n);
            return Some((tci, buf));
        }
    }
    None
}
