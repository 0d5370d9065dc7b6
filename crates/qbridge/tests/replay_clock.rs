//! `qbridge replay`: capture timestamps are the clock (FDB ageing follows them), and batching
//! never reorders frames.

use qbridge_io::pcap::{PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");
const SEC: u64 = 1_000_000_000;

const X: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const Y: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn frame(dst: [u8; 6], src: [u8; 6], marker: u8) -> Vec<u8> {
    let mut f = [dst, src].concat();
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f.resize(60, marker);
    f
}

fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let mut w = PcapWriter::create(path).unwrap();
    for (ts, f) in frames {
        w.write(*ts, f).unwrap();
    }
    w.finish().unwrap();
}

fn read_pcap(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut r = PcapReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.ts_ns, rec.data));
    }
    out
}

/// Three pcap ports on a VLAN-unaware bridge with the given ageing time; returns the output
/// directory and the summary.
fn replay(
    d: &Path,
    ageing: &str,
    p1: &[(u64, Vec<u8>)],
    p2: &[(u64, Vec<u8>)],
) -> (PathBuf, String) {
    let config = d.join("config.batch");
    std::fs::write(
        &config,
        format!(
            "link add br0 type bridge ageing_time {ageing}\n\
             link add p1 type pcap\nlink add p2 type pcap\nlink add p3 type pcap\n\
             link set p1 master br0\nlink set p2 master br0\nlink set p3 master br0\n"
        ),
    )
    .unwrap();
    write_pcap(&d.join("in1.pcap"), p1);
    write_pcap(&d.join("in2.pcap"), p2);
    let out = d.join("out");
    let o = Command::new(BIN)
        .arg("replay")
        .arg("-batch")
        .arg(&config)
        .arg("--in")
        .arg(format!("p1={}", d.join("in1.pcap").display()))
        .arg("--in")
        .arg(format!("p2={}", d.join("in2.pcap").display()))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (out, String::from_utf8(o.stdout).unwrap())
}

#[test]
fn fdb_ages_on_capture_time() {
    let t = 100 * SEC;
    let p1 = vec![(t, frame(Y, X, 1))];
    let p2 = vec![(t + SEC / 2, frame(X, Y, 2)), (t + 3 * SEC, frame(X, Y, 3))];

    // Ageing time 1 s: X (learned at t) is gone by t + 3 s, so the last frame floods.
    let d = dir("ageing-1s");
    let (out, _) = replay(&d, "1", &p1, &p2);
    let p3: Vec<u8> = read_pcap(&out.join("p3.pcap"))
        .iter()
        .map(|(_, f)| f[59])
        .collect();
    assert_eq!(
        p3,
        vec![1, 3],
        "unknown unicast floods to p3 once X aged out"
    );
    let p1_out = read_pcap(&out.join("p1.pcap"));
    assert_eq!(
        p1_out,
        vec![(t + SEC / 2, frame(X, Y, 2)), (t + 3 * SEC, frame(X, Y, 3))]
    );
    let fdb = std::fs::read_to_string(out.join("fdb.json")).unwrap();
    assert!(!fdb.contains("02:00:00:00:00:0a"), "X aged out: {fdb}");
    assert!(
        fdb.contains("02:00:00:00:00:0b"),
        "Y learned at t + 3 s: {fdb}"
    );

    // Ageing time 300 s: X is still known, the last frame goes to p1 only.
    let d = dir("ageing-300s");
    let (out, _) = replay(&d, "300", &p1, &p2);
    let p3: Vec<u8> = read_pcap(&out.join("p3.pcap"))
        .iter()
        .map(|(_, f)| f[59])
        .collect();
    assert_eq!(p3, vec![1]);
}

#[test]
fn batches_hold_at_most_32_frames_of_one_timestamp_in_order() {
    let t = 7 * SEC;
    // 33 frames at t on p1, then one on p2 at the same time (a tie: p1 is named first), then
    // one more on p1 later.
    let mut p1: Vec<(u64, Vec<u8>)> = (0..33).map(|i| (t, frame([0xff; 6], X, i))).collect();
    p1.push((t + SEC / 1000, frame([0xff; 6], X, 200)));
    let p2 = vec![(t, frame([0xff; 6], Y, 100))];
    let d = dir("batching");
    let (out, summary) = replay(&d, "300", &p1, &p2);
    // 32 + (1 from p1, 1 from p2) + 1 later.
    assert!(
        summary.starts_with("replayed 35 frames from 2 inputs in 3 batches"),
        "{summary}"
    );
    let p3 = read_pcap(&out.join("p3.pcap"));
    let markers: Vec<u8> = p3.iter().map(|(_, f)| f[59]).collect();
    let mut expected: Vec<u8> = (0..33).collect();
    expected.extend([100, 200]);
    assert_eq!(markers, expected);
    assert!(p3[..34].iter().all(|(ts, _)| *ts == t));
    // Stamped with the time of the frame that caused it.
    assert_eq!(p3[34].0, t + SEC / 1000);
    let p2_out = read_pcap(&out.join("p2.pcap"));
    assert_eq!(p2_out.len(), 34);
}

/// `violation shutdown` runs on the capture clock too: the frame from a second source over
/// p1's `fdb_max_learned 1` is dropped (`mac_limit_shutdown`) and p1 goes down right after
/// its batch, at its capture time, so 2 s later p1 neither receives nor sends and its
/// entries are gone (as the daemon does within a second).
#[test]
fn violation_shutdown_takes_the_port_down_on_capture_time() {
    let d = dir("violation-shutdown");
    let config = d.join("config.batch");
    std::fs::write(
        &config,
        "link add br0 type bridge vlan_filtering 1\n\
         link add p1 type pcap\nlink add p2 type pcap\n\
         link set p1 master br0\nlink set p2 master br0\n\
         vlan set vid 1 dev p1 fdb_max_learned 1 violation shutdown\n",
    )
    .unwrap();
    const Z: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
    let t = 50 * SEC;
    let p1 = vec![
        (t, frame(Y, X, 1)),
        (t + SEC, frame(Y, Z, 2)),
        (t + 3 * SEC, frame(Y, X, 3)),
    ];
    let p2 = vec![(t + 4 * SEC, frame(X, Y, 4))];
    write_pcap(&d.join("in1.pcap"), &p1);
    write_pcap(&d.join("in2.pcap"), &p2);
    let out = d.join("out");
    let o = Command::new(BIN)
        .arg("replay")
        .arg("-batch")
        .arg(&config)
        .arg("--in")
        .arg(format!("p1={}", d.join("in1.pcap").display()))
        .arg("--in")
        .arg(format!("p2={}", d.join("in2.pcap").display()))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = String::from_utf8(o.stdout).unwrap();
    let markers =
        |f: &str| -> Vec<u8> { read_pcap(&out.join(f)).iter().map(|(_, f)| f[59]).collect() };
    assert_eq!(
        markers("p2.pcap"),
        vec![1],
        "only the frame before the shutdown"
    );
    assert_eq!(
        markers("p1.pcap"),
        Vec::<u8>::new(),
        "p1 is down: nothing sent"
    );
    let fdb = std::fs::read_to_string(out.join("fdb.json")).unwrap();
    assert!(
        !fdb.contains("02:00:00:00:00:0a"),
        "p1's entries went: {fdb}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("stats.json")).unwrap()).unwrap();
    let p1_drops = &stats["ports"]["p1"]["drops"];
    assert_eq!(p1_drops["mac_limit_shutdown"], 1, "{stats}");
    assert_eq!(p1_drops["port_down"], 1, "{stats}");
    assert!(
        summary.contains("port p1 taken down at 51.000000 (violation shutdown"),
        "{summary}"
    );
}
