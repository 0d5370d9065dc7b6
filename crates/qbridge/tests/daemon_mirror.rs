//! Mirror sessions in a `qbridge daemon` without privileges (pcap ports, `--pcap-dir`): a
//! `dst pcap FILE` session writes `DIR/FILE` from the workers, flushed while it runs and
//! complete after `mirror del`; without `--pcap-dir` the session is refused and nothing
//! changes; `mirror show -s` counts.

use qbridge_io::pcap::{PcapReader, PcapWriter};
use std::path::Path;
use std::time::{Duration, Instant};

mod local;

use local::{read_pcap, start_daemon};

fn frame(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = [dst, src].concat();
    for &(t, c) in tags {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&c.to_be_bytes());
    }
    f.extend_from_slice(&[0x88, 0xb5]);
    f.resize(64, 0xab);
    f
}

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const BCAST: [u8; 6] = [0xff; 6];

const BATCH: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add p2 type pcap
link add p3 type pcap
link set dev p1 master br0
link set dev p2 master br0
link set dev p3 master br0
vlan add vid 10 dev p1
vlan add vid 10 dev p2
vlan add vid 10 dev p3 pvid untagged
mirror add m src p1 direction both dst pcap m.pcap
";

#[test]
fn mirror_to_a_file_in_the_pcap_dir() {
    let dir = local::tmp("mirror", "file");
    let pcaps = dir.join("pcaps");
    std::fs::create_dir_all(&pcaps).unwrap();
    let tagged = frame(BCAST, A, &[(0x8100, 10)]);
    let mut w = PcapWriter::create(&pcaps.join("p1.in.pcap")).unwrap();
    w.write(1_700_000_000_000_000_000, &tagged).unwrap();
    w.finish().unwrap();
    // p1 reads p1.in.pcap once it is open; the mirror is in the same batch.
    let mut d = start_daemon(
        &dir,
        BATCH,
        &["--workers", "2", "--pcap-dir", pcaps.to_str().unwrap()],
    );
    let t0 = Instant::now();
    loop {
        let s = d.ok(&["-j", "-s", "mirror", "show", "m"]);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        if v[0]["stats"]["frames"] == 1 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no copy counted: {s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Flushed within a second while the session runs.
    let t0 = Instant::now();
    let flushed = |p: &Path| {
        PcapReader::open(p).is_ok_and(|mut r| r.next_record().is_ok_and(|x| x.is_some()))
    };
    while !flushed(&pcaps.join("m.pcap")) {
        assert!(t0.elapsed() < Duration::from_secs(5), "m.pcap not flushed");
        std::thread::sleep(Duration::from_millis(50));
    }
    d.ok(&["mirror", "del", "m"]);
    // The rx copy as received on p1, tagged.
    assert_eq!(read_pcap(&pcaps.join("m.pcap")), vec![tagged.clone()]);
    // A name that would leave the directory is refused; so is a pcap port's own file.
    let o = d.cli(&[
        "mirror",
        "add",
        "x",
        "src",
        "p1",
        "dst",
        "pcap",
        "../x.pcap",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid pcap file \"../x.pcap\""));
    let o = d.cli(&["mirror", "add", "x", "src", "p1", "dst", "pcap", "p2.pcap"]);
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        format!(
            "qbridge: mirror to pcap p2.pcap: pcap port p2 writes {}/p2.pcap",
            pcaps.display()
        )
    );
    assert_eq!(d.ok(&["mirror", "show"]), "");
    assert!(d.stop().success(), "{}", d.log_text());
    // The frame itself was flooded to p2, tagged, as if nothing watched.
    assert_eq!(read_pcap(&pcaps.join("p2.pcap")), vec![tagged]);
}

#[test]
fn mirror_to_a_file_needs_the_pcap_dir() {
    let dir = local::tmp("mirror", "nodir");
    let mut d = start_daemon(
        &dir,
        "link add p1 type patch peer p2\n",
        &["--workers", "2"],
    );
    let o = d.cli(&["mirror", "add", "m", "src", "p1", "dst", "pcap", "m.pcap"]);
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "qbridge: mirror to pcap m.pcap needs a directory: start the daemon with --pcap-dir DIR \
         (or use 'qbridge replay' for pcap files)"
    );
    // Nothing changed; a port destination works without it.
    assert_eq!(d.ok(&["mirror", "show"]), "");
    d.ok(&["mirror", "add", "m", "src", "p1", "dst", "p2"]);
    assert_eq!(
        d.ok(&["mirror", "show"]),
        "m src p1 direction both dst p2\n"
    );
    assert!(d.stop().success(), "{}", d.log_text());
}
