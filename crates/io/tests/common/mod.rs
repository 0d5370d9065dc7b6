//! Shared helpers for the root tests: namespaces the test creates and always removes, and a
//! reason to skip when the machine cannot run them.
#![allow(dead_code, unsafe_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// `Some(reason)` when namespace tests cannot run here. With `QBRIDGE_REQUIRE_NETNS` set
/// (scripts/test.sh sets it when run as root, so in CI) a reason is a failure, not a skip.
pub fn skip_reason() -> Option<String> {
    let reason = why_not()?;
    if std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!(
            "namespace tests are required here (QBRIDGE_REQUIRE_NETNS) but cannot run: {reason}"
        );
    }
    Some(reason)
}

fn why_not() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        _ => return Some("the ip(8) command is not available".into()),
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// Skips (returns from) the test with a printed reason.
#[macro_export]
macro_rules! skip_unless_root {
    () => {
        if let Some(reason) = common::skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// A name unique to this process and call, short enough for an interface (<= 15 bytes).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A network namespace, deleted (with everything in it, veths included) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Result<Netns, String> {
        let name = unique("qbio");
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip -n NAME ARGS…`
    pub fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut v = vec!["-n", &self.name];
        v.extend_from_slice(args);
        ip(&v)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Two namespaces joined by a veth pair `a` (in `ns_a`) — `b` (in `ns_b`), both up, IPv6 off
/// so the kernel stays quiet.
pub struct VethPair {
    pub ns_a: Netns,
    pub ns_b: Netns,
    pub a: String,
    pub b: String,
}

impl VethPair {
    pub fn new() -> Result<VethPair, String> {
        let ns_a = Netns::new()?;
        let ns_b = Netns::new()?;
        let a = unique("qa");
        let b = unique("qb");
        ns_a.ip(&[
            "link", "add", &a, "type", "veth", "peer", "name", &b, "netns", &ns_b.name,
        ])?;
        for (ns, dev) in [(&ns_a, &a), (&ns_b, &b)] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "exec", &ns.name, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{dev}.disable_ipv6=1"))
                .output();
            ns.ip(&["link", "set", dev, "up"])?;
        }
        Ok(VethPair { ns_a, ns_b, a, b })
    }
}

/// Sends `frame` on `ifname` through a plain AF_PACKET socket (no ring, no vnet header), in the
/// calling thread's namespace. Returns the errno on failure.
pub fn raw_send(ifname: &str, frame: &[u8]) -> Result<(), std::io::Error> {
    let idx = qbridge_io::sys::ifindex(ifname).map_err(std::io::Error::other)?;
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = idx as i32;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: `frame` and `sll` are live for the call, lengths match.
    let rc = unsafe {
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(err);
    }
    Ok(())
}

/// A frame: dst, src, then the given tags (TPID, TCI), EtherType 0x0800 and `payload_len`
/// bytes of pattern.
pub fn tagged_frame(tags: &[(u16, u16)], payload_len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    for (tpid, tci) in tags {
        f.extend(tpid.to_be_bytes());
        f.extend(tci.to_be_bytes());
    }
    f.extend([0x08, 0x00]);
    f.extend((0..payload_len).map(|i| (i % 251) as u8));
    f
}

/// Accepts one connection on `listener` and returns, from a thread, every byte read until the
/// peer closes (10 s read timeout): the receiving end of a byte-verified TCP stream.
pub fn tcp_sink(
    listener: std::net::TcpListener,
    expect: usize,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        use std::io::Read;
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::with_capacity(expect);
        s.read_to_end(&mut got).unwrap();
        got
    })
}

/// Sends every frame on `ifname` through one plain AF_PACKET socket, in the calling thread's
/// namespace; returns how many were sent (stops at the first error).
pub fn raw_send_all(ifname: &str, frames: &[Vec<u8>]) -> Result<usize, std::io::Error> {
    let idx = qbridge_io::sys::ifindex(ifname).map_err(std::io::Error::other)?;
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = idx as i32;
    sll.sll_halen = 6;
    let mut sent = 0;
    let mut err = None;
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
        if rc < 0 {
            err = Some(std::io::Error::last_os_error());
            break;
        }
        sent += 1;
    }
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    match err {
        Some(e) => Err(e),
        None => Ok(sent),
    }
}
