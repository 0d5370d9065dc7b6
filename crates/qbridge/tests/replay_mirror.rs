//! `qbridge replay` with mirror sessions: a `dst pcap FILE` session writes `--out DIR/FILE`
//! with the copies exactly as they passed their port (tags and all), read back here and, when
//! tcpdump is installed, decoded by `tcpdump -e -nn -r`; a port destination gets the RSPAN tag.

use qbridge_io::pcap::{PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An IPv4/UDP frame from `src` to `dst` behind `tags` (TPID, TCI).
fn frame(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], marker: u8) -> Vec<u8> {
    let mut f = [dst, src].concat();
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let ip = [
        0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 26, 0, 0]);
    f.resize(f.len() + 18, marker);
    f
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec.data);
    }
    out
}

fn run_replay(d: &Path, config: &str, inputs: &[(&str, Vec<Vec<u8>>)]) -> std::process::Output {
    let cfg = d.join("config.batch");
    std::fs::write(&cfg, config).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("replay").arg("-batch").arg(&cfg);
    for (port, frames) in inputs {
        let path = d.join(format!("in-{port}.pcap"));
        let mut w = PcapWriter::create(&path).unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.write(1_000_000_000 + i as u64 * 1000, f).unwrap();
        }
        w.finish().unwrap();
        cmd.arg("--in").arg(format!("{port}={}", path.display()));
    }
    cmd.arg("--out").arg(d.join("out")).output().unwrap()
}

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

const CONFIG: &str = "\
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add cust type pcap
link add trunk type pcap
link add ana type pcap
link set dev cust master pe
link set dev trunk master pe
link set dev ana master pe
vlan del vid 1 dev cust
vlan del vid 1 dev trunk
vlan del vid 1 dev ana
vlan add vid 100 dev cust pvid untagged
vlan add vid 100 dev trunk
vlan add vid 999 dev ana
mirror add cap src cust,trunk direction both dst pcap provider.pcap
mirror add rspan src cust direction rx dst ana rspan 999
";

#[test]
fn mirror_to_a_pcap_file_and_to_an_rspan_port() {
    let d = dir("replay-mirror");
    let c_tagged = frame(B, A, &[(0x8100, 10)], 1);
    let back = frame(A, B, &[(0x88a8, 100), (0x8100, 10)], 2);
    let o = run_replay(
        &d,
        CONFIG,
        &[
            ("cust", vec![c_tagged.clone()]),
            ("trunk", vec![back.clone()]),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("provider.pcap (4)"), "{summary}");
    let out = d.join("out");
    // One batch (same capture time): the rx copies in frame order — the customer's frame as
    // received (C-tag only), the trunk's (both tags) —, then the tx copies by port: to the
    // customer (S-tag popped), to the trunk (S-tag pushed).
    let on_trunk = [&c_tagged[..12], &[0x88, 0xa8, 0, 100], &c_tagged[12..]].concat();
    assert_eq!(
        read_pcap(&out.join("provider.pcap")),
        vec![c_tagged.clone(), back.clone(), c_tagged_of(&back), on_trunk]
    );
    // The RSPAN copy on the analyser port: the customer frame under S-tag 999.
    let rspan = [&c_tagged[..12], &[0x88, 0xa8, 0x03, 0xe7], &c_tagged[12..]].concat();
    assert_eq!(read_pcap(&out.join("ana.pcap")), vec![rspan]);
    // Counted in stats.json as sent on the analyser port.
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["ports"]["ana"]["tx_frames"], 1);

    // tcpdump decodes the file with the tags (when it is installed; scripts/test.sh installs it).
    let td = Command::new("tcpdump")
        .args(["-e", "-nn", "-r"])
        .arg(out.join("provider.pcap"))
        .output();
    match td {
        Ok(t) if t.status.success() => {
            let text = String::from_utf8_lossy(&t.stdout);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 4, "{text}");
            assert!(
                lines[0].contains("ethertype 802.1Q (0x8100)") && lines[0].contains("vlan 10"),
                "{text}"
            );
            assert!(
                lines[1].contains("ethertype 802.1Q-QinQ (0x88a8)")
                    && lines[1].contains("vlan 100")
                    && lines[1].contains("vlan 10"),
                "{text}"
            );
        }
        _ => eprintln!("tcpdump not available: the file was checked byte by byte only"),
    }
}

/// `back` without its S-tag (as the customer port sends it).
fn c_tagged_of(back: &[u8]) -> Vec<u8> {
    [&back[..12], &back[16..]].concat()
}

#[test]
fn a_mirror_file_cannot_take_a_file_replay_writes() {
    let d = dir("replay-mirror-clash");
    let config = "link add p1 type pcap\nlink add p2 type pcap\n\
                  mirror add m src p1 dst pcap p2.pcap\n";
    let o = run_replay(&d, config, &[("p1", vec![frame(B, A, &[], 1)])]);
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "qbridge: mirror to pcap p2.pcap: replay writes that file itself; pick another name"
    );
    let config = "link add p1 type pcap\nlink add p2 type pcap\n\
                  mirror add m src p1 dst pcap ../escape.pcap\n";
    let o = run_replay(&d, config, &[("p1", vec![frame(B, A, &[], 1)])]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("invalid pcap file \"../escape.pcap\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!d.join("escape.pcap").exists());
}

/// Issue 17 item 13 (replay's side): links planted in `--out` at every name replay writes
/// (port captures, the mirror file, fdb.json, stats.json) are replaced, never written
/// through; the outputs are the owner's only (0600).
#[test]
fn replay_never_writes_through_links_in_its_output_directory() {
    use std::os::unix::fs::PermissionsExt;
    let d = dir("replay-links");
    let out = d.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let names = [
        "cust.pcap",
        "trunk.pcap",
        "ana.pcap",
        "provider.pcap",
        "fdb.json",
        "stats.json",
    ];
    for (i, name) in names.iter().enumerate() {
        let victim = d.join(format!("victim-{i}"));
        std::fs::write(&victim, b"precious").unwrap();
        if i % 2 == 0 {
            std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        } else {
            std::fs::hard_link(&victim, out.join(name)).unwrap();
        }
    }
    let c_tagged = frame(B, A, &[(0x8100, 10)], 1);
    let o = run_replay(&d, CONFIG, &[("cust", vec![c_tagged])]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (i, name) in names.iter().enumerate() {
        let victim = d.join(format!("victim-{i}"));
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"precious",
            "{name} written through"
        );
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is not a new plain file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
    }
    assert_eq!(read_pcap(&out.join("provider.pcap")).len(), 2);
}
