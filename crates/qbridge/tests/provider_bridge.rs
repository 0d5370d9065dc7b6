//! Runs the `qbridge` binary: `replay` of the shipped 802.1ad provider-bridge example, checked
//! byte for byte, and the command-line contract (output, errors, exit codes).

use qbridge_io::pcap::PcapReader;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn qbridge(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run qbridge")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn read_pcap(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut r = PcapReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("readable pcap") {
        out.push((rec.ts_ns, rec.data));
    }
    out
}

fn out_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Inserts a 4-byte tag at byte 12 (outermost).
fn push(frame: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// Removes the outermost tag.
fn pop(frame: &[u8]) -> Vec<u8> {
    [&frame[..12], &frame[16..]].concat()
}

const T0: u64 = 1_700_000_000 * 1_000_000_000;
fn ms(n: u64) -> u64 {
    T0 + n * 1_000_000
}

#[test]
fn replay_provider_bridge_example() {
    let dir = out_dir("provider-bridge");
    let ex = repo().join("examples/provider-bridge");
    let o = qbridge(&[
        "replay",
        "-batch",
        "examples/provider-bridge.batch",
        "--in",
        "cust-a=examples/provider-bridge/cust-a.pcap",
        "--in",
        "cust-b=examples/provider-bridge/cust-b.pcap",
        "--in",
        "trunk=examples/provider-bridge/trunk.pcap",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "replay failed: {}", stderr(&o));
    let summary = stdout(&o);
    assert!(
        summary.starts_with("replayed 11 frames from 3 inputs in 8 batches"),
        "{summary}"
    );

    let in_a = read_pcap(&ex.join("cust-a.pcap"));
    let in_b = read_pcap(&ex.join("cust-b.pcap"));
    let in_t = read_pcap(&ex.join("trunk.pcap"));
    assert_eq!((in_a.len(), in_b.len(), in_t.len()), (5, 3, 3));

    // The trunk: S-tag 0x88a8 pushed outside the untouched C-tag (or alone, for the untagged
    // frame), in input order; the 1519-byte frame was dropped at cust-a.
    let trunk = read_pcap(&dir.join("trunk.pcap"));
    let expected_trunk = vec![
        (ms(1000), push(&in_a[0].1, 0x88a8, 100)),
        (ms(1000), push(&in_b[0].1, 0x88a8, 200)),
        (ms(2000), push(&in_a[1].1, 0x88a8, 100)),
        (ms(2000), push(&in_b[1].1, 0x88a8, 200)),
        (ms(2500), push(&in_a[2].1, 0x88a8, 100)),
        (ms(3000), push(&in_a[3].1, 0x88a8, 100)),
    ];
    assert_eq!(trunk, expected_trunk);
    // Spelled out for the first frame: broadcast ARP, S-tag vid 100, C-tag vid 10, ARP.
    assert_eq!(
        &trunk[0].1[..22],
        &[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x0a, 0x00, 0x01, 0x88, 0xa8,
            0x00, 0x64, 0x81, 0x00, 0x00, 0x0a, 0x08, 0x06
        ]
    );
    assert_eq!(trunk[0].1.len(), 68);
    // The untagged customer frame gets the S-tag only.
    assert_eq!(&trunk[4].1[12..18], &[0x88, 0xa8, 0x00, 0x64, 0x08, 0x00]);
    // A customer's full-size C-tagged frame leaves the trunk at 1522 bytes.
    assert_eq!(in_a[3].1.len(), 1518);
    assert_eq!(trunk[5].1.len(), 1522);

    // The customer ports: only the S-tag popped, the C-tag kept.
    let cust_a = read_pcap(&dir.join("cust-a.pcap"));
    assert_eq!(cust_a, vec![(ms(1500), pop(&in_t[0].1))]);
    assert_eq!(&cust_a[0].1[12..18], &[0x81, 0x00, 0x00, 0x0a, 0x08, 0x06]);
    assert_eq!(&cust_a[0].1[..6], &[0x02, 0x00, 0x00, 0x0a, 0x00, 0x01]);
    let cust_b = read_pcap(&dir.join("cust-b.pcap"));
    assert_eq!(cust_b, vec![(ms(1500), pop(&in_t[1].1))]);
    assert_eq!(&cust_b[0].1[12..18], &[0x81, 0x00, 0x00, 0x14, 0x08, 0x06]);

    let fdb: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("fdb.json")).unwrap()).unwrap();
    let entry = |mac: &str, port: &str, vlan: u16| json!({"mac": mac, "ifname": port, "vlan": vlan, "flags": [], "master": "pe", "state": ""});
    assert_eq!(
        fdb,
        json!([
            entry("02:00:00:0a:00:01", "cust-a", 100),
            entry("02:00:00:0b:00:01", "cust-b", 200),
            entry("02:00:00:0a:00:02", "trunk", 100),
            entry("02:00:00:0b:00:02", "trunk", 200),
        ])
    );

    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("stats.json")).unwrap()).unwrap();
    let drops = |port: &str| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = stats["ports"][port]["drops"]
            .as_object()
            .expect("drops by reason")
            .iter()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(drops("cust-a"), vec![("oversize".to_string(), 1)]);
    assert_eq!(drops("cust-b"), vec![("runt".to_string(), 1)]);
    assert_eq!(drops("trunk"), vec![("vlan_not_member".to_string(), 1)]);
    assert_eq!(stats["ports"]["cust-a"]["drops"]["runt"], 0);
    assert_eq!(stats["ports"]["trunk"]["rx_frames"], 3);
    assert_eq!(stats["ports"]["trunk"]["tx_frames"], 6);
    assert_eq!(stats["ports"]["cust-a"]["tx_frames"], 1);
    assert_eq!(stats["unknown_port_drops"], 0);
    let vlans = &stats["bridges"]["pe"]["vlans"];
    assert_eq!(vlans["100"]["tx_frames"], 5);
    assert_eq!(vlans["200"]["tx_frames"], 3);
}

#[test]
fn replay_refuses_unknown_input_port() {
    let dir = out_dir("bad-input");
    let o = qbridge(&[
        "replay",
        "-batch",
        "examples/provider-bridge.batch",
        "--in",
        "nope=examples/provider-bridge/cust-a.pcap",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "qbridge: --in nope: device \"nope\" does not exist\n"
    );
}

#[test]
fn offline_command_runs_against_an_empty_session() {
    let o = qbridge(&["-offline", "link", "show"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "");
    let o = qbridge(&["-offline", "-j", "fdb", "show"]);
    assert_eq!(stdout(&o), "[]\n");
    let o = qbridge(&["-offline", "vlan", "add", "vid", "4095", "dev", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "qbridge: vid 4095 is reserved\n");
    assert_eq!(stdout(&o), "");
    // Syntax errors are found by the CLI itself, daemon or not.
    let o = qbridge(&["link", "set", "dev", "p1", "lerning", "off"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "qbridge: unexpected \"lerning\" (did you mean \"learning\"?)\n"
    );
    let o = qbridge(&["link", "set", "dev", "p1", "frob", "off"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("qbridge: unexpected \"frob\" (expected master, nomaster"));
}

#[test]
fn batch_prints_show_output_and_errors_with_line_numbers() {
    let dir = out_dir("batch");
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.batch");
    std::fs::write(
        &good,
        "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
         link set p1 master br0\n# show it\nvlan show\n",
    )
    .unwrap();
    let o = qbridge(&["-offline", "-batch", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "port              vlan-id\np1                1 PVID Egress Untagged\n"
    );
    let o = qbridge(&["-offline", "-j", "-batch", good.to_str().unwrap()]);
    assert_eq!(
        stdout(&o),
        "[{\"ifname\":\"p1\",\"vlans\":[{\"vlan\":1,\"flags\":[\"PVID\",\"Egress Untagged\"]}]}]\n"
    );

    let bad = dir.join("bad.batch");
    std::fs::write(
        &bad,
        "link add br0 type bridge\nvlan show\nvlan add vid 4095 dev p1\n",
    )
    .unwrap();
    let o = qbridge(&["-offline", "-batch", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "qbridge: line 3: vid 4095 is reserved\n");
    assert_eq!(
        stdout(&o),
        "",
        "nothing is shown from a batch that was not applied"
    );

    let o = qbridge(&["-batch", "/nonexistent/x.batch"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("qbridge: cannot read batch file /nonexistent/x.batch: "));
}

#[test]
fn help_documents_the_daemon_and_offline_mode() {
    let o = qbridge(&["-help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("qbridge daemon [-batch FILE]"));
    assert!(stdout(&o).contains("-offline  no daemon"));
    assert!(stdout(&o).contains("-n[etns] NETNS  run in network namespace NETNS"));
    let o = qbridge(&[]);
    assert_eq!(o.status.code(), Some(2));
}
