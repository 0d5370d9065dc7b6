//! The cost of a configuration change with `--state FILE` and a large user FDB (issue 17,
//! item 7): an `fdb add` or `fdb del`, and a `vlan`, `link set` or `fdb flush` command, appends
//! a line to the state file rather than writing the whole configuration, and the file still
//! restores exactly. One test in this file: it
//! counts the process's written bytes (`/proc/self/io`), which other tests would disturb.

use qbridge_control::{Op, OutputOptions, Session};
use qbridge_datapath::state::StateFile;
use qbridge_datapath::{Engine, EngineConfig, Handle};
use std::fmt::Write;

fn call(h: &Handle, words: &str) -> String {
    let r = h.call(Op::Command {
        out: OutputOptions::default(),
        words: words.split_whitespace().map(str::to_owned).collect(),
    });
    assert!(r.ok, "{words}: {:?}", r.error);
    assert!(r.warnings.is_empty(), "{words}: {:?}", r.warnings);
    r.output.unwrap_or_default()
}

/// Bytes this process has written through `write(2)` and friends (`wchar`).
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

fn mac(i: u32) -> String {
    format!(
        "02:00:00:{:02x}:{:02x}:{:02x}",
        i >> 16,
        (i >> 8) & 255,
        i & 255
    )
}

#[test]
fn a_change_with_20k_user_fdb_entries_writes_the_change_not_the_configuration() {
    const ENTRIES: u32 = 20_000;
    const CHANGES: u32 = 20;
    let dir = std::env::temp_dir().join(format!("qbridge-state-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state");

    let mut batch = String::from(
        "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
         link add p2 type pcap\nlink set dev p1 master br0\nlink set dev p2 master br0\n",
    );
    for i in 0..ENTRIES {
        let _ = writeln!(batch, "fdb add {} dev p1 vlan 1 static", mac(i));
    }
    let mut session = Session::with_workers(1);
    session
        .execute_batch(&batch, OutputOptions::default())
        .unwrap();
    let mut state = StateFile::new(path.clone(), None);
    state.save(&session.running_config()).unwrap();
    let config_len = std::fs::metadata(&path).unwrap().len();
    let (engine, h, _) = Engine::new(
        session,
        EngineConfig {
            pcap_dir: Some(dir.clone()),
            state: Some(state),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let t = std::thread::spawn(move || engine.run());

    let w0 = written_bytes();
    let t0 = std::time::Instant::now();
    for i in 0..CHANGES {
        call(
            &h,
            &format!("fdb add {} dev p2 vlan 1 static sticky", mac(ENTRIES + i)),
        );
    }
    call(&h, &format!("fdb del {} dev p1 vlan 1", mac(0)));
    // A replaced entry (static to dynamic).
    call(&h, &format!("fdb replace {} dev p1 vlan 1 dynamic", mac(1)));
    let per_change = (written_bytes() - w0) / u64::from(CHANGES + 2);
    eprintln!(
        "{per_change} bytes written per change, the configuration being {config_len}; {:?} per \
         change",
        t0.elapsed() / (CHANGES + 2)
    );
    assert!(
        per_change < 1024,
        "{per_change} bytes written per change with {ENTRIES} user entries \
         (the configuration is {config_len} bytes)"
    );

    // Other single changes are appended too (their own words): O(the change), not
    // O(the 20 000 entries); `link add` still writes the whole configuration.
    let others = [
        "vlan add vid 20 dev p2",
        "vlan add vid 30-40 dev p1 untagged",
        "vlan del vid 35 dev p1",
        "vlan set vid 20 dev p2 fdb_max_learned 5",
        "link set dev p2 learning off flood off",
        "link set dev br0 type bridge ageing_time 100",
        "vlan add vid 7 dev p1 pvid",
        "fdb flush dev p2",
    ];
    let w1 = written_bytes();
    for words in others {
        call(&h, words);
    }
    let per_other = (written_bytes() - w1) / others.len() as u64;
    eprintln!("{per_other} bytes written per vlan/link set/fdb flush change");
    assert!(
        per_other < 1024,
        "{per_other} bytes written per change with {ENTRIES} user entries"
    );
    let w2 = written_bytes();
    call(&h, "link add p3 type pcap");
    assert!(
        written_bytes() - w2 > config_len / 2,
        "link add writes the whole configuration"
    );
    // Appending starts again after it.
    call(&h, "link set dev p3 master br0");

    // Every acknowledged change is in the file, and it restores the same configuration.
    let running = call(&h, "show running-config");
    h.shutdown();
    t.join().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut restored = Session::new();
    restored.restore(&text).unwrap();
    same_config(&restored.running_config(), &running);
    // A last line cut short is left out.
    let cut = format!("{text}fdb del {} dev p1", mac(2));
    let mut restored = Session::new();
    restored.restore(&cut).unwrap();
    same_config(&restored.running_config(), &running);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Fails naming the lines that differ (the configurations are 20 000 lines long).
fn same_config(restored: &str, running: &str) {
    if restored == running {
        return;
    }
    let (a, b): (Vec<_>, Vec<_>) = (restored.lines().collect(), running.lines().collect());
    let only_restored: Vec<_> = a.iter().filter(|l| !b.contains(l)).take(10).collect();
    let only_running: Vec<_> = b.iter().filter(|l| !a.contains(l)).take(10).collect();
    panic!(
        "restored configuration differs: only restored {only_restored:?}, only running \
         {only_running:?}"
    );
}
