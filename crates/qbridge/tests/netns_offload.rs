//! Offloads across the switch, with hosts at their default settings (TSO and checksum offload
//! on, MTU 1500): TCP super-frames from a kernel arrive on an AF_PACKET port with their
//! virtio-net header; a port that cannot take them — here a pcap port, tagged — must get
//! correctly segmented and checksummed frames, while a port that can gets them intact.
//!
//! h1 sends a verified TCP stream to h2. h2's port does not learn, so every frame to h2 is an
//! unknown unicast and is flooded to h2 *and* to the pcap port `cap` (VLAN 1 tagged, so every
//! segment carries a 0x8100 tag: segmentation at tag depth 1). The capture must then hold only
//! frames that fit 1500-byte MTU plus the tag, with valid IPv4 and TCP checksums, whose payloads
//! are exactly the sender's bytes at their sequence offsets.

mod support;

use qbridge_io::pcap::PcapReader;
use qbridge_wire::checksum::pseudo_header_v4;
use qbridge_wire::ip::Protocol;
use qbridge_wire::tcp::Flags;
use qbridge_wire::{ipv4, parse_headers, tcp, EtherType, Tpid};
use std::time::Duration;
use support::{fill_pattern, skip_reason, tcp_transfer, Star};

const BYTES: u64 = 16 << 20;

#[test]
fn super_frames_are_segmented_for_a_port_without_tso() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new("offload", &["10.91.0.1", "10.91.0.2"]).expect("lab");
    let pcap_dir = star.lab.dir.join("pcap");
    std::fs::create_dir_all(&pcap_dir).unwrap();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1\n{}link add cap type pcap\n\
         link set dev p1 master br0\nlink set dev p2 master br0\nlink set dev cap master br0\n\
         link set dev p2 learning off\nvlan add vid 1 dev cap\n",
        star.port_lines()
    );
    let sw = star.sw.clone();
    let ctl = star
        .lab
        .daemon_args(&sw, &batch, &["--pcap-dir", pcap_dir.to_str().unwrap()])
        .expect("daemon");
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    let report = tcp_transfer(&h1, &h2, BYTES, Duration::from_secs(60)).expect("verified TCP");
    assert_eq!(report.bytes, BYTES);
    let stats = ctl.stats_text();
    assert!(star.lab.stop_daemons(), "daemon exits cleanly");

    let mut r = PcapReader::open(&pcap_dir.join("cap.pcap")).expect("capture written");
    let mut frames = 0u64;
    let mut data = 0u64;
    let mut isn = None;
    let mut biggest = 0usize;
    while let Some(rec) = r.next_record().expect("pcap record") {
        let f = rec.data;
        frames += 1;
        biggest = biggest.max(f.len());
        assert!(
            f.len() <= 1518,
            "frame of {} bytes on a port without TSO",
            f.len()
        );
        let h = parse_headers(&f, Tpid::is_well_known).expect("segment parses");
        let tags: Vec<_> = h
            .tags
            .as_slice()
            .iter()
            .map(|t| (t.tpid.0, t.tci.vid().get()))
            .collect();
        assert_eq!(tags, vec![(0x8100, 1)], "one bridge tag, VLAN 1");
        if h.ethertype != EtherType::Ipv4 {
            continue; // ARP
        }
        let ip = ipv4::Packet::new_checked(&f[h.l3_offset..h.l3_end]).expect("IPv4");
        if ip.protocol() != Protocol::Tcp {
            continue;
        }
        assert!(ip.verify_checksum(), "IPv4 header checksum");
        let l4 = &f[h.l4_offset.unwrap()..h.l3_end];
        let seg = tcp::Packet::new_checked(l4).expect("TCP");
        let pseudo = pseudo_header_v4(ip.src_addr(), ip.dst_addr(), Protocol::Tcp, l4.len() as u32);
        assert!(
            seg.verify_checksum(pseudo),
            "TCP checksum of frame {frames}"
        );
        if ip.src_addr().to_string() != h1.ip {
            continue;
        }
        if seg.flags().contains(Flags::SYN) {
            isn = Some(seg.seq_number().wrapping_add(1));
            continue;
        }
        let payload = seg.payload();
        if payload.is_empty() {
            continue;
        }
        let base = isn.expect("the SYN was flooded to the capture first");
        let off = seg.seq_number().wrapping_sub(base) as u64;
        let mut want = vec![0u8; payload.len()];
        fill_pattern(off, &mut want);
        assert!(
            payload == &want[..],
            "payload at stream offset {off} differs from what h1 sent"
        );
        data += payload.len() as u64;
    }
    eprintln!("{frames} frames captured, largest {biggest} bytes, {data} payload bytes\n{stats}");
    assert!(data >= BYTES, "captured {data} of {BYTES} stream bytes");
    assert!(biggest > 1400, "full-size segments were produced");
    assert!(
        !stats.contains("tx_error"),
        "no segmentation errors:\n{stats}"
    );
}
