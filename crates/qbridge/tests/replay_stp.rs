//! `qbridge replay` runs the spanning tree on the capture clock: two bridges joined by two
//! patch links (a loop) converge with one patch port discarding, and a broadcast sent into
//! the capture after that leaves the far bridge's pcap port exactly once. The same loop with
//! `stp_state 0` repeats the broadcast (the replay's patch-round bound stops it), which is
//! what shows that the test can fail.

use qbridge_io::pcap::{PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");
const SEC: u64 = 1_000_000_000;
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn broadcast(marker: u8) -> Vec<u8> {
    let mut f = [[0xff; 6], SRC].concat();
    f.extend_from_slice(&[0x88, 0xb5]);
    f.resize(60, marker);
    f
}

/// Replays `frames` into port a1 of the loop; returns the frames written on port b_host
/// with marker 0x77, and the run's summary.
fn run(d: &Path, stp: u8) -> (usize, String) {
    let config = d.join("config.batch");
    std::fs::write(
        &config,
        format!(
            "link add A type bridge priority 4096 hello_time 1 forward_delay 4 max_age 6\n\
             link add B type bridge hello_time 1 forward_delay 4 max_age 6\n\
             link add a1 type pcap\nlink add b_host type pcap\n\
             link add x1 type patch peer y1\nlink add x2 type patch peer y2\n\
             link set dev a1 master A\nlink set dev x1 master A\nlink set dev x2 master A\n\
             link set dev b_host master B\nlink set dev y1 master B\nlink set dev y2 master B\n\
             link set dev a1 edge on\nlink set dev b_host edge on\n\
             link set dev A type bridge stp_state {stp}\n\
             link set dev B type bridge stp_state {stp}\n"
        ),
    )
    .unwrap();
    // One filler frame a second for 12 s (the clock), then the broadcast.
    let input = d.join("in.pcap");
    let mut w = PcapWriter::create(&input).unwrap();
    for s in 0..12u64 {
        w.write(s * SEC, &broadcast(s as u8)).unwrap();
    }
    w.write(12 * SEC + 1, &broadcast(0x77)).unwrap();
    w.finish().unwrap();
    let out = d.join("out");
    let o = Command::new(BIN)
        .args(["replay", "-batch"])
        .arg(&config)
        .arg("--in")
        .arg(format!("a1={}", input.display()))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut r = PcapReader::open(&out.join("b_host.pcap")).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        if rec.data.len() >= 20 && rec.data[6..12] == SRC && rec.data[14] == 0x77 {
            n += 1;
        }
    }
    (n, String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn a_loop_of_patch_links_converges_and_a_broadcast_crosses_once() {
    let d = dir("replay-stp-on");
    let (n, summary) = run(&d, 1);
    assert_eq!(n, 1, "{summary}");
    let d = dir("replay-stp-off");
    let (n, summary) = run(&d, 0);
    assert!(
        n > 1,
        "without the spanning tree the loop should repeat it: {n}\n{summary}"
    );
}
