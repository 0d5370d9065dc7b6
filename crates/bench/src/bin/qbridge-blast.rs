//! `qbridge-blast`: a traffic generator that costs the sending CPU almost nothing, so that a
//! switch under test, not the sender, is what limits a 64-byte benchmark.
//!
//! It hands one frame to the kernel's XDP "live frames" test run (`BPF_PROG_TEST_RUN` with
//! `BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18+): an XDP program (`bpf/blast.c`, compiled by
//! clang, loaded with aya) answers `XDP_TX` for the copies that go out, and the kernel
//! transmits each out of `--dev` through the driver's `ndo_xdp_xmit`, from a page pool,
//! without building a socket buffer. On a veth the frames land in the peer's receive ring and
//! are received by the peer's NAPI (the peer needs NAPI: `ethtool -K PEER gro on`, or an XDP
//! program on it); frames that find the ring full are counted as the veth's `tx_dropped` (the
//! peer's `peer_tq_xdp_xmit_err`), like a NIC's receive ring overflowing. This is what xdp-trafficgen (xdp-tools 1.3+) does; the Debian 12
//! build of it no longer loads on kernels without the `xdp_redirect_map_err` tracepoint.
//!
//! `--rate` paces the sender: the program lets one copy out per 1/rate seconds and drops the
//! others unsent (a token bucket in the program: a test run call costs the kernel an RCU grace
//! period, ~20 ms, so pacing by the size of each call cannot be smooth). A benchmark can then
//! search the highest rate a switch carries without loss (RFC 2544 throughput). What went out
//! is read from the interface's counters (`tx_packets` + `tx_dropped`).
#![allow(unsafe_code)]

use clap::Parser;
use std::io;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Send 60-byte UDP frames out of a veth or NIC at a paced rate, through XDP live frames (needs root)"
)]
struct Args {
    /// Interface to send from (in the current network namespace).
    #[arg(long)]
    dev: String,
    /// Destination MAC address (aa:bb:cc:dd:ee:ff).
    #[arg(long)]
    dst_mac: String,
    /// Source MAC address (default: the interface's own).
    #[arg(long)]
    src_mac: Option<String>,
    /// IPv4 source and destination of the UDP frame (port 9 to port 9).
    #[arg(long, default_value = "10.77.0.1")]
    src_ip: std::net::Ipv4Addr,
    #[arg(long, default_value = "10.77.0.2")]
    dst_ip: std::net::Ipv4Addr,
    /// Frames per second; 0 sends as fast as the kernel takes them.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Frames per XDP batch (the kernel's flush unit, 1-256).
    #[arg(long, default_value_t = 64)]
    batch: u32,
    /// Tag the frames (802.1Q, still 60 bytes) and spread them over this many VLANs in turn,
    /// from --vid: each frame's VID the next, its destination MAC's last two bytes the VID
    /// (one destination per VLAN). 0: untagged, one destination.
    #[arg(long, default_value_t = 0)]
    vlans: u32,
    /// The first VID of --vlans (1-4094).
    #[arg(long, default_value_t = 1)]
    vid: u32,
    /// With --vlans: each frame's VLAN drawn at random from the range, not the next in turn
    /// (traffic that reaches the switch's per-VLAN state in no order).
    #[arg(long)]
    random_vlans: bool,
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok((sent, secs)) => {
            println!(
                "sent {sent} frames in {secs:.3} s: {:.0} frames/s (interface counters)",
                sent as f64 / secs
            );
        }
        Err(e) => {
            eprintln!("qbridge-blast: {e}");
            std::process::exit(1);
        }
    }
}

fn parse_mac(s: &str) -> io::Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad MAC address {s:?}"),
        )
    };
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

fn own_mac(dev: &str) -> io::Result<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))?;
    parse_mac(s.trim())
}

fn ifindex(dev: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(dev)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: a valid NUL-terminated string; the call reads it only.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {dev:?} in this network namespace"),
        ));
    }
    Ok(i)
}

/// A 60-byte Ethernet + IPv4 + UDP frame (64 on the wire with the FCS), checksums right.
fn frame(dst: [u8; 6], src: [u8; 6], sip: std::net::Ipv4Addr, dip: std::net::Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let payload = 60 - 14 - 20 - 8;
    let ip_len = (20 + 8 + payload) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip.extend_from_slice(&sip.octets());
    ip.extend_from_slice(&dip.octets());
    let sum = qbridge_wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4 allows it)
    f.resize(60, 0x42);
    f
}

// ----- bpf(2) -----

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/blast.o"));

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// `BPF_PROG_TEST_RUN`'s member.
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// `struct xdp_md`.
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The interface's transmitted plus transmit-dropped frames (a veth counts the frames its
/// other end's ring had no room for as `tx_dropped`).
fn tx_frames(dev: &str) -> io::Result<u64> {
    let read = |c: &str| -> io::Result<u64> {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{c}"))?
            .trim()
            .parse::<u64>()
            .map_err(other)
    };
    Ok(read("tx_packets")? + read("tx_dropped")?)
}

fn run(args: &Args) -> io::Result<(u64, f64)> {
    if OBJECT.is_empty() {
        return Err(other(
            "built without its XDP program (clang was missing at build time; Debian: apt-get install clang libbpf-dev)",
        ));
    }
    let stop = Duration::try_from_secs_f64(args.seconds).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--seconds {}: not a duration", args.seconds),
        )
    })?;
    let index = ifindex(&args.dev)?;
    let dst = parse_mac(&args.dst_mac)?;
    let src = match &args.src_mac {
        Some(s) => parse_mac(s)?,
        None => own_mac(&args.dev)?,
    };
    if args.vlans > 0 && (args.vid == 0 || args.vid.saturating_add(args.vlans - 1) > 4094) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--vid {} --vlans {}: VIDs beyond 1-4094",
                args.vid, args.vlans
            ),
        ));
    }
    let mut data = frame(dst, src, args.src_ip, args.dst_ip);
    let mut addrs = [0u8; 12];
    addrs.copy_from_slice(&data[..12]);
    if args.vlans > 0 {
        // The tag after the addresses; the payload 4 bytes shorter (60 bytes still).
        data.splice(12..12, [0x81, 0x00, 0, 0]);
        data.truncate(60);
        let ip_len = (60 - 18) as u16;
        data[18 + 2..18 + 4].copy_from_slice(&ip_len.to_be_bytes());
        data[18 + 10..18 + 12].copy_from_slice(&[0, 0]);
        let sum = qbridge_wire::checksum::checksum(&data[18..38]);
        data[18 + 10..18 + 12].copy_from_slice(&sum.to_be_bytes());
        data[18 + 24..18 + 26].copy_from_slice(&((ip_len - 20).to_be_bytes()));
    }
    // 0: no pacing (the program sends every copy)
    let gap_ns: u64 = 1_000_000_000u64
        .checked_div(args.rate)
        .map_or(0, |g| g.max(1));
    let mut ebpf = aya::EbpfLoader::new()
        .set_global("gap_ns", &gap_ns, true)
        .set_global("vlans", &args.vlans, true)
        .set_global("vid_first", &args.vid, true)
        .set_global("random_vlans", &u32::from(args.random_vlans), true)
        .set_global("addrs", &addrs, true)
        .load(OBJECT)
        .map_err(other)?;
    let prog: &mut aya::programs::Xdp = ebpf
        .program_mut("qb_blast")
        .ok_or_else(|| other("no program qb_blast in the object"))?
        .try_into()
        .map_err(other)?;
    prog.load()
        .map_err(|e| other(format!("loading the XDP program: {e}")))?;
    let fd = {
        use std::os::fd::{AsFd, AsRawFd};
        prog.fd().map_err(other)?.as_fd().as_raw_fd()
    };
    let batch = args.batch.clamp(1, 256);
    let ctx = XdpMd {
        data_end: data.len() as u32,
        ingress_ifindex: index,
        ..XdpMd::default()
    };
    let fire = |n: u32| -> io::Result<()> {
        let mut attr = TestAttr {
            prog_fd: fd as u32,
            data_size_in: data.len() as u32,
            data_in: data.as_ptr() as u64,
            repeat: n,
            ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
            ctx_in: &ctx as *const XdpMd as u64,
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size: batch,
            ..TestAttr::default()
        };
        // SAFETY: `attr` is the test-run member of `union bpf_attr`, of the size passed; the
        // frame and context it points to outlive the call, and live mode writes neither back.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestAttr,
                std::mem::size_of::<TestAttr>() as u32,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("XDP live-frames test run on {}: {e}", args.dev),
            ));
        }
        Ok(())
    };
    let before = tx_frames(&args.dev)?;
    let start = Instant::now();
    // Calls of about a second each (the loop's speed measured on the first, short call): a
    // call's fixed cost (~20 ms) is then a pause of 2 %, and the end comes within a second.
    let mut n: u64 = 1_000_000;
    loop {
        let left = stop.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        let t = Instant::now();
        fire(n.min(u64::from(u32::MAX)) as u32)?;
        let per = t.elapsed().as_secs_f64() / n as f64;
        let left = stop.saturating_sub(start.elapsed()).as_secs_f64();
        n = ((left.min(1.0) / per.max(1e-9)) as u64).max(1);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((tx_frames(&args.dev)?.saturating_sub(before), secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_60_bytes_of_udp_with_a_valid_ipv4_header() {
        let f = frame(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            "10.77.0.1".parse().unwrap(),
            "10.77.0.2".parse().unwrap(),
        );
        assert_eq!(f.len(), 60);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        assert!(qbridge_wire::checksum::verify(ip), "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 46, "IPv4 total length");
        assert_eq!(ip[9], 17, "UDP");
        assert_eq!(&ip[12..16], &[10, 77, 0, 1]);
        assert_eq!(&ip[16..20], &[10, 77, 0, 2]);
        assert_eq!(
            &f[34..40],
            &[0, 9, 0, 9, 0, 26],
            "ports 9 to 9, UDP length 26"
        );
    }

    #[test]
    fn mac_addresses_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_mac("aa:bb:cc:00:11:f2").unwrap(),
            [0xaa, 0xbb, 0xcc, 0, 0x11, 0xf2]
        );
        for bad in [
            "aa:bb:cc:00:11",
            "aa:bb:cc:00:11:f2:00",
            "zz:bb:cc:00:11:f2",
            "",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad:?}");
        }
    }
}
