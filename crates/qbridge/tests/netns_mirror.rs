//! Port mirroring with real kernel traffic (root only; `docs/semantics.md` §M).
//!
//! ```text
//!   h1: eth0 (10.83.0.1) ══ s1/p1 (access VLAN 10) ─ br0 ─ p2/s2 (VLAN 10 tagged) ══ eth0 ─ eth0.10 (10.83.0.2) :h2
//!                                                      │ mirror src p2 → p3/s3 ══ eth0 :h3 (capture only)
//!                                                      └ mirror src p2 → pcap file in --pcap-dir
//! ```
//!
//! h2's VLAN device is qbridge's (this kernel has no 8021q). Captures run on the receiving
//! side of each link: on s2 in the switch's namespace (what p2 receives), on h2's eth0 (what
//! p2 sends), on h3's eth0 (the copies), with every tag put back.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::{assert_ping, host_on, tcp_transfer, Capture, Captured, Lab};

const SW: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link add p3 type afpacket dev s3
link set dev p1 master br0
link set dev p2 master br0
vlan del vid 1 dev p1
vlan add vid 10 dev p1 pvid untagged
vlan add vid 10 dev p2
mirror add span src p2 direction both dst p3
mirror add file src p2 dst pcap span.pcap
";

/// ICMP frames of a capture, whole (ping's frames are shorter than the 128 bytes kept), as a
/// multiset.
fn icmp_frames(c: &Captured) -> BTreeMap<Vec<u8>, u32> {
    let mut m = BTreeMap::new();
    for f in c.kept_matching(|f| f.ip_proto == Some(1)) {
        assert!(
            f.len <= f.head.len(),
            "ICMP frame longer than kept: {}",
            f.describe()
        );
        *m.entry(f.head.clone()).or_default() += 1;
    }
    m
}

fn merged(a: BTreeMap<Vec<u8>, u32>, b: BTreeMap<Vec<u8>, u32>) -> BTreeMap<Vec<u8>, u32> {
    let mut m = a;
    for (k, n) in b {
        *m.entry(k).or_default() += n;
    }
    m
}

/// TCP frames per (source MAC, tag stack, length).
fn tcp_frames(c: &Captured) -> BTreeMap<(String, String, usize), u32> {
    let mut m = BTreeMap::new();
    for f in c.kept_matching(|f| f.is_tcp()) {
        let stack = f
            .tags
            .iter()
            .map(|(t, v)| format!("{t:04x}/{v}"))
            .collect::<Vec<_>>()
            .join(" ");
        *m.entry((support::fmt_mac(&f.src), stack, f.len))
            .or_default() += 1;
    }
    m
}

#[test]
fn mirror_copies_kernel_traffic_to_a_port_and_a_pcap_file() {
    skip_unless_netns!();
    let mut lab = Lab::new("mirror");
    let sw = lab.netns("sw").unwrap();
    let n2 = lab.netns("h2").unwrap();
    let n3 = lab.netns("h3").unwrap();
    let h1 = lab.host("h1", "10.83.0.1/24", &sw, "s1").unwrap();
    lab.veth(&n2, "eth0", &sw, "s2").unwrap();
    lab.veth(&n3, "eth0", &sw, "s3").unwrap();
    let pcap_dir = lab.dir.join("pcap");
    std::fs::create_dir_all(&pcap_dir).unwrap();
    let ctl = lab
        .daemon_args(&sw, SW, &["--pcap-dir", pcap_dir.to_str().unwrap()])
        .unwrap();
    lab.daemon(
        &n2,
        "link add eth0 type afpacket dev eth0\nlink add link eth0 name eth0.10 type vlan id 10\n",
    )
    .unwrap();
    let h2 = host_on("h2/eth0.10", &n2, "eth0.10", "10.83.0.2/24");

    // 1. Ping and TCP: every frame p2 received and sent, once each, at h3, tags and all.
    let at_s2 = Capture::start(&sw, "s2", 100_000).unwrap();
    let at_h2 = Capture::start(&n2, "eth0", 100_000).unwrap();
    let at_h3 = Capture::start(&n3, "eth0", 200_000).unwrap();
    assert_ping(&h1, &h2, 5);
    let report = tcp_transfer(&h1, &h2, 4 << 20, Duration::from_secs(30)).unwrap();
    let (rx, tx, copies) = (
        at_s2.finish().unwrap(),
        at_h2.finish().unwrap(),
        at_h3.finish().unwrap(),
    );
    let want = merged(icmp_frames(&rx), icmp_frames(&tx));
    assert!(want.values().sum::<u32>() >= 10, "{}", rx.summary());
    assert_eq!(icmp_frames(&copies), want, "copies: {}", copies.summary());
    // Every copy carries the tag it had on p2's wire.
    for mac in [&h1.mac, &h2.mac] {
        assert_eq!(
            copies.stacks_from(mac),
            [vec![(0x8100, 10)]],
            "{}",
            copies.summary()
        );
    }
    let stats = ctl.json(&["-s", "mirror", "show", "span"]).unwrap();
    let s = &stats[0]["stats"];
    let p3_drops =
        ctl.json(&["-s", "link", "show", "dev", "p3"]).unwrap()[0]["stats"]["drops"].clone();
    eprintln!(
        "TCP {} bytes; mirror span: {s}; p3 drops {p3_drops}; copies {}",
        report.bytes,
        copies.summary()
    );
    assert_eq!(s["drops"], serde_json::json!({}), "{stats}");
    // The TCP frames too, frame for frame, unless p3's socket refused some under load
    // (counted as p3's tx drops, and said so).
    let want_tcp = {
        let mut m = tcp_frames(&rx);
        for (k, n) in tcp_frames(&tx) {
            *m.entry(k).or_default() += n;
        }
        m
    };
    let got_tcp = tcp_frames(&copies);
    assert!(!want_tcp.is_empty());
    if p3_drops == serde_json::json!({}) {
        assert_eq!(got_tcp, want_tcp, "TCP copies differ from p2's frames");
    } else {
        let (g, w): (u32, u32) = (got_tcp.values().sum(), want_tcp.values().sum());
        assert!(g <= w && g > 0, "{g} TCP copies for {w} frames");
    }

    // 2. RSPAN: the copies of what p2 receives, under a tag of VLAN 999 (p3's TPID, 0x8100,
    // PCP 0), outside the tag they came with.
    ctl.cmd(&["mirror", "del", "span"]).unwrap();
    ctl.cmd(&[
        "mirror",
        "add",
        "span",
        "src",
        "p2",
        "direction",
        "rx",
        "dst",
        "p3",
        "rspan",
        "999",
    ])
    .unwrap();
    let at_s2 = Capture::start(&sw, "s2", 10_000).unwrap();
    let at_h3 = Capture::start(&n3, "eth0", 10_000).unwrap();
    assert_ping(&h1, &h2, 3);
    let (rx, copies) = (at_s2.finish().unwrap(), at_h3.finish().unwrap());
    let want: BTreeMap<Vec<u8>, u32> = icmp_frames(&rx)
        .into_iter()
        .map(|(f, n)| ([&f[..12], &[0x81, 0x00, 0x03, 0xe7], &f[12..]].concat(), n))
        .collect();
    assert!(want.values().sum::<u32>() >= 3);
    assert_eq!(icmp_frames(&copies), want, "copies: {}", copies.summary());
    assert_eq!(
        copies.stacks_from(&h2.mac),
        [vec![(0x8100, 999), (0x8100, 10)]],
        "{}",
        copies.summary()
    );
    assert!(copies.stacks_from(&h1.mac).is_empty(), "rx only");

    // 3. The pcap file: deleting the session finishes it; tcpdump shows the tags.
    let file = pcap_dir.join("span.pcap");
    let counted = ctl.json(&["-s", "mirror", "show", "file"]).unwrap()[0]["stats"]["frames"]
        .as_u64()
        .unwrap();
    ctl.cmd(&["mirror", "del", "file"]).unwrap();
    let mut r = qbridge_io::pcap::PcapReader::open(&file).unwrap();
    let mut frames = 0u64;
    let mut tagged = 0u64;
    while let Some(rec) = r.next_record().unwrap() {
        frames += 1;
        tagged += u64::from(rec.data.get(12..16) == Some(&[0x81, 0x00, 0x00, 0x0a][..]));
    }
    assert_eq!(frames, counted);
    assert_eq!(tagged, frames, "every frame of p2 is tagged 10 on its wire");
    // A path outside the directory is refused, and nothing is written there.
    let e = ctl
        .cmd(&[
            "mirror",
            "add",
            "x",
            "src",
            "p2",
            "dst",
            "pcap",
            "../x.pcap",
        ])
        .unwrap_err();
    assert!(e.contains("invalid pcap file \"../x.pcap\""), "{e}");
    assert!(!lab.dir.join("x.pcap").exists());
    match std::process::Command::new("tcpdump")
        .args(["-e", "-nn", "-r"])
        .arg(&file)
        .output()
    {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len() as u64, frames, "{text}");
            assert!(
                lines
                    .iter()
                    .all(|l| l.contains("ethertype 802.1Q (0x8100)") && l.contains("vlan 10")),
                "{text}"
            );
            assert!(
                lines.iter().any(|l| l.contains("ICMP echo request")),
                "{text}"
            );
            assert!(lines.iter().any(|l| l.contains("10.83.0.1.")), "{text}");
        }
        other => {
            let required =
                std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0");
            assert!(
                !required,
                "tcpdump is required here (scripts/test.sh installs it): {other:?}"
            );
            eprintln!(
                "tcpdump not available ({other:?}): the file was checked by qbridge's reader"
            );
        }
    }
    assert!(lab.stop_daemons(), "a daemon did not exit cleanly");
}
