//! Writes the input captures of the 802.1ad provider-bridge example
//! (`examples/provider-bridge.batch`) into `examples/provider-bridge/` (or the directory given
//! as the first argument):
//!
//! - `cust-a.pcap`: customer A's site behind port `cust-a` (S-VLAN 100). A broadcast ARP
//!   request with C-tag 10, a C-tagged and an untagged unicast to the remote site, a full-size
//!   C-tagged frame (1518 bytes: 1522 with the S-tag, which the trunk must accept), and one
//!   oversize frame (1519 bytes) that `cust-a` must drop.
//! - `cust-b.pcap`: customer B behind `cust-b` (S-VLAN 200): a broadcast ARP request with
//!   C-tag 20 at the same instant as customer A's (the tie goes to the input named first), a
//!   C-tagged unicast, and a 10-byte runt.
//! - `trunk.pcap`: the provider network: ARP replies from both remote sites with S-tag and
//!   C-tag, and one frame with S-tag 300, a VLAN the trunk does not carry.
//!
//! Run: `cargo run -p qbridge --example gen_provider_pcaps`. The output is deterministic.

use qbridge_io::pcap::PcapWriter;
use qbridge_wire::checksum::checksum;
use std::path::PathBuf;

const S_TPID: u16 = 0x88a8;
const C_TPID: u16 = 0x8100;
const ETH_ARP: u16 = 0x0806;
const ETH_IPV4: u16 = 0x0800;

/// Capture time of the first frame: 2023-11-14 22:13:20 UTC.
const T0_NS: u64 = 1_700_000_000 * 1_000_000_000;

const A1: [u8; 6] = [0x02, 0, 0, 0x0a, 0, 0x01];
const A2: [u8; 6] = [0x02, 0, 0, 0x0a, 0, 0x02];
const B1: [u8; 6] = [0x02, 0, 0, 0x0b, 0, 0x01];
const B2: [u8; 6] = [0x02, 0, 0, 0x0b, 0, 0x02];
const BROADCAST: [u8; 6] = [0xff; 6];

fn ms(n: u64) -> u64 {
    T0_NS + n * 1_000_000
}

/// An Ethernet frame: addresses, tags (TPID, VID; PCP 0) outermost first, EtherType and
/// payload; the payload is padded so the frame without tags is at least 60 bytes.
fn frame(
    dst: [u8; 6],
    src: [u8; 6],
    tags: &[(u16, u16)],
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for &(tpid, vid) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    let min = 60 + 4 * tags.len();
    if f.len() < min {
        f.resize(min, 0);
    }
    f
}

/// An ARP request (`op` 1) or reply (2) for IPv4 over Ethernet.
fn arp(op: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4]) -> Vec<u8> {
    let mut p = vec![0x00, 0x01, 0x08, 0x00, 6, 4];
    p.extend_from_slice(&op.to_be_bytes());
    p.extend_from_slice(&sha);
    p.extend_from_slice(&spa);
    p.extend_from_slice(&tha);
    p.extend_from_slice(&tpa);
    p
}

/// An IPv4/UDP datagram (UDP checksum 0: none) whose UDP payload is `len` bytes of a counting
/// pattern.
fn udp(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
    let total = 20 + 8 + len;
    let mut p = vec![0x45, 0x00];
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0x00, 0x01, 0x40, 0x00, 64, 17, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&5000u16.to_be_bytes());
    p.extend_from_slice(&5001u16.to_be_bytes());
    p.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend((0..len).map(|i| i as u8));
    p
}

fn write(
    dir: &std::path::Path,
    name: &str,
    frames: &[(u64, Vec<u8>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let path = dir.join(name);
    let mut w = PcapWriter::create(&path)?;
    for (ts, f) in frames {
        w.write(*ts, f)?;
    }
    w.finish()?;
    println!("wrote {} ({} frames)", path.display(), frames.len());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args_os().nth(1) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/provider-bridge"),
    };
    std::fs::create_dir_all(&dir)?;

    let (a1_ip, a2_ip) = ([10, 0, 10, 1], [10, 0, 10, 2]);
    let (b1_ip, b2_ip) = ([10, 0, 20, 1], [10, 0, 20, 2]);
    let c10 = [(C_TPID, 10)];
    let c20 = [(C_TPID, 20)];

    let cust_a = vec![
        (
            ms(1000),
            frame(
                BROADCAST,
                A1,
                &c10,
                ETH_ARP,
                &arp(1, A1, a1_ip, [0; 6], a2_ip),
            ),
        ),
        (
            ms(2000),
            frame(A2, A1, &c10, ETH_IPV4, &udp(a1_ip, a2_ip, 32)),
        ),
        (
            ms(2500),
            frame(A2, A1, &[], ETH_IPV4, &udp(a1_ip, a2_ip, 32)),
        ),
        // 14 + 4 + 1500: a customer's full-size C-tagged packet.
        (
            ms(3000),
            frame(A2, A1, &c10, ETH_IPV4, &udp(a1_ip, a2_ip, 1500 - 28)),
        ),
        // One byte more than cust-a accepts (14 + mtu 1500 + envhdr 4).
        (
            ms(3500),
            frame(A2, A1, &c10, ETH_IPV4, &udp(a1_ip, a2_ip, 1501 - 28)),
        ),
    ];
    let cust_b = vec![
        (
            ms(1000),
            frame(
                BROADCAST,
                B1,
                &c20,
                ETH_ARP,
                &arp(1, B1, b1_ip, [0; 6], b2_ip),
            ),
        ),
        (
            ms(2000),
            frame(B2, B1, &c20, ETH_IPV4, &udp(b1_ip, b2_ip, 32)),
        ),
        // A runt: shorter than an Ethernet header.
        (
            ms(4000),
            vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x0b],
        ),
    ];
    let trunk = vec![
        (
            ms(1500),
            frame(
                A1,
                A2,
                &[(S_TPID, 100), (C_TPID, 10)],
                ETH_ARP,
                &arp(2, A2, a2_ip, A1, a1_ip),
            ),
        ),
        (
            ms(1500),
            frame(
                B1,
                B2,
                &[(S_TPID, 200), (C_TPID, 20)],
                ETH_ARP,
                &arp(2, B2, b2_ip, B1, b1_ip),
            ),
        ),
        // S-VLAN 300 is not carried by the trunk: dropped as vlan_not_member.
        (
            ms(4500),
            frame(
                A1,
                A2,
                &[(S_TPID, 300), (C_TPID, 10)],
                ETH_IPV4,
                &udp(a2_ip, a1_ip, 32),
            ),
        ),
    ];

    write(&dir, "cust-a.pcap", &cust_a)?;
    write(&dir, "cust-b.pcap", &cust_b)?;
    write(&dir, "trunk.pcap", &trunk)?;
    Ok(())
}
