//! The whole engine without privileges: pcap ports and patch links, two worker threads, and
//! commands through the engine's handle while it runs.

use qbridge_control::{Op, OutputOptions, Session};
use qbridge_datapath::{Engine, EngineConfig, Handle};
use qbridge_io::pcap::{PcapReader, PcapWriter};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FRAMES: usize = 500;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qbridge-engine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An untagged IPv4/UDP frame from host A to host B whose payload carries `seq`.
fn customer_frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa, 0x08, 0x00];
    f.extend([0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend([10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend([0x30, 0x39, 0x30, 0x39, 0, 12, 0, 0]);
    f.extend(seq.to_be_bytes());
    f.resize(60, 0);
    f
}

fn call(h: &Handle, words: &str) -> String {
    let r = h.call(Op::Command {
        out: OutputOptions {
            json: true,
            stats: true,
            ..OutputOptions::default()
        },
        words: words.split_whitespace().map(str::to_owned).collect(),
    });
    assert!(r.ok, "{words}: {:?}", r.error);
    r.output.unwrap_or_default()
}

fn rx_frames(h: &Handle, port: &str) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&call(h, &format!("link show dev {port}"))).unwrap();
    v[0]["stats"]["rx_frames"].as_u64().unwrap_or(0)
}

fn read_all(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec.data);
    }
    out
}

/// host ─ CE (802.1Q) ─patch─ PE (802.1ad) ─ trunk, on two workers: every customer frame
/// leaves the trunk once, in order, with S-tag 100 outside C-tag 10; then deleting one end
/// of the patch link deletes both.
#[test]
fn provider_path_through_a_patch_link_on_two_workers() {
    let d = dir("patch");
    let mut w = PcapWriter::create(&d.join("host.in.pcap")).unwrap();
    for seq in 0..FRAMES as u32 {
        w.write(u64::from(seq) * 1000, &customer_frame(seq))
            .unwrap();
    }
    w.finish().unwrap();

    let mut session = Session::with_workers(2);
    session
        .execute_batch(
            "link add ce type bridge vlan_filtering 1 vlan_default_pvid 0\n\
             link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad vlan_default_pvid 0\n\
             link add trunk type pcap\n\
             link add ce-up type patch peer pe-cust\n\
             link set dev ce-up master ce\n\
             link set dev pe-cust master pe\n\
             link set dev trunk master pe\n\
             vlan add vid 10 dev ce-up\n\
             vlan add vid 100 dev pe-cust pvid untagged\n\
             vlan add vid 100 dev trunk\n",
            OutputOptions::default(),
        )
        .unwrap();
    let (engine, h, warnings) = Engine::new(
        session,
        EngineConfig {
            pcap_dir: Some(d.clone()),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(engine.workers(), 2);
    let t = std::thread::spawn(move || engine.run());

    // The host port joins while the engine runs (one batch: its input file is read as soon
    // as it opens).
    let r = h.call(Op::Batch {
        out: OutputOptions::default(),
        text: "link add host type pcap\n\
               link set dev host master ce\n\
               vlan add vid 10 dev host pvid untagged\n"
            .into(),
    });
    assert!(r.ok, "{:?}", r.error);
    let t0 = Instant::now();
    while rx_frames(&h, "pe-cust") < FRAMES as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "frames did not cross: {}",
            call(&h, "link show")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let links: serde_json::Value = serde_json::from_str(&call(&h, "link show")).unwrap();
    let show = links.to_string();
    assert!(
        show.contains("\"peer\":\"pe-cust\"") && show.contains("\"peer\":\"ce-up\""),
        "{show}"
    );
    assert_eq!(rx_frames(&h, "host"), FRAMES as u64);
    assert_eq!(rx_frames(&h, "pe-cust"), FRAMES as u64);

    call(&h, "link del ce-up");
    let links = call(&h, "link show");
    assert!(
        !links.contains("ce-up") && !links.contains("pe-cust"),
        "{links}"
    );
    h.shutdown();
    t.join().unwrap();

    let out = read_all(&d.join("trunk.pcap"));
    assert_eq!(out.len(), FRAMES, "frames on the trunk");
    for (seq, f) in out.iter().enumerate() {
        let inner = customer_frame(seq as u32);
        let mut want = inner[..12].to_vec();
        want.extend([0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10]);
        want.extend(&inner[12..]);
        assert_eq!(f, &want, "frame {seq}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A patch port cannot name itself or an existing device, and a refused second end leaves
/// no first end behind.
#[test]
fn patch_ports_are_created_and_refused_as_pairs() {
    let mut s = Session::new();
    let o = OutputOptions::default();
    let e = s
        .execute_line("link add a type patch peer a", o)
        .unwrap_err();
    assert_eq!(e.to_string(), "patch port \"a\" cannot be its own peer");
    s.execute_line("link add br0 type bridge", o).unwrap();
    let e = s
        .execute_line("link add a type patch peer br0", o)
        .unwrap_err();
    assert_eq!(e.to_string(), "device \"br0\" already exists");
    let e = s
        .execute_line("link add a type patch peer bad/name", o)
        .unwrap_err();
    assert!(e.to_string().contains("invalid device name"), "{e}");
    assert!(!s.switch().exists("a"), "half a patch link was left");
    s.execute_line("link add a type patch peer name b", o)
        .unwrap();
    assert!(s.switch().exists("b"));
    s.execute_line("link del b", o).unwrap();
    assert!(!s.switch().exists("a") && !s.switch().exists("b"));
}

/// Learning on one worker is used by another: port `a` (id 0, received by worker 0) sends
/// from MAC A; then port `b` (id 3, received by worker 1) sends to MAC A, which must leave on
/// `a` only — not be flooded to `c` and `d`.
#[test]
fn an_address_learned_on_one_worker_is_known_to_the_other() {
    let d = dir("learn");
    let mac_a = [0x02, 0, 0, 0, 0, 0xa];
    let mac_b = [0x02, 0, 0, 0, 0, 0xb];
    let frame = |dst: [u8; 6], src: [u8; 6], tag: u8| {
        let mut f = dst.to_vec();
        f.extend(src);
        f.extend([0x88, 0xb5, tag]);
        f.resize(60, 0);
        f
    };
    let mut w = PcapWriter::create(&d.join("a.in.pcap")).unwrap();
    w.write(1, &frame([0xff; 6], mac_a, 1)).unwrap();
    w.finish().unwrap();
    let mut w = PcapWriter::create(&d.join("b.in.pcap")).unwrap();
    for i in 0..10 {
        w.write(2 + i, &frame(mac_a, mac_b, 2)).unwrap();
    }
    w.finish().unwrap();

    let mut session = Session::with_workers(2);
    session
        .execute_batch(
            "link add br0 type bridge\n\
             link add a type pcap\nlink add c type pcap\nlink add d type pcap\n\
             link set dev a master br0\nlink set dev c master br0\nlink set dev d master br0\n",
            OutputOptions::default(),
        )
        .unwrap();
    let (engine, h, _) = Engine::new(
        session,
        EngineConfig {
            pcap_dir: Some(d.clone()),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let t = std::thread::spawn(move || engine.run());
    let t0 = Instant::now();
    while !call(&h, "fdb show").contains("02:00:00:00:00:0a") {
        assert!(t0.elapsed() < Duration::from_secs(10), "A was not learned");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = h.call(Op::Batch {
        out: OutputOptions::default(),
        text: "link add b type pcap\nlink set dev b master br0\n".into(),
    });
    assert!(r.ok, "{:?}", r.error);
    let links: serde_json::Value = serde_json::from_str(&call(&h, "link show dev b")).unwrap();
    assert_eq!(links[0]["port"]["id"], 3, "b must be port 3 (worker 1)");
    while rx_frames(&h, "b") < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "b's frames did not arrive"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let by_worker = |port: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&call(&h, &format!("link show dev {port}"))).unwrap();
        v[0]["runtime"]["rx_frames_by_worker"].clone()
    };
    assert_eq!(by_worker("a"), serde_json::json!([1, 0]));
    assert_eq!(by_worker("b"), serde_json::json!([0, 10]));
    h.shutdown();
    t.join().unwrap();
    let a_out = read_all(&d.join("a.pcap"));
    assert_eq!(a_out.len(), 10, "every frame to A leaves on a");
    assert!(a_out.iter().all(|f| f == &frame(mac_a, mac_b, 2)));
    for port in ["c", "d"] {
        let out = read_all(&d.join(format!("{port}.pcap")));
        assert_eq!(out.len(), 1, "{port} saw only A's broadcast: {out:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Flood fairness (issue 17, item 6): 100 ports that each flood 32 broadcasts to the 101
/// others must not take the worker from host A, whose 1000 frames go to B (a known unicast
/// address). Every port floods to B too, so B's output file shows, in the worker's order, how
/// much flood work was done before A's last frame got through: before, every queued broadcast
/// (3200) went first; now each round's flood work is shared (100 went first), and what a port
/// cannot pay for is dropped as `flood_rate` on it. A's frames are never dropped.
#[test]
fn floods_of_many_ports_do_not_hold_up_known_unicast() {
    const FLOODERS: usize = 100;
    const FLOODS: usize = 32;
    const UNICAST: usize = 1000;
    let d = dir("fair");
    let mac_a = [0x02, 0, 0, 0, 0, 0xa];
    let mac_b = [0x02, 0, 0, 0, 0, 0xb];
    let frame = |dst: [u8; 6], src: [u8; 6], seq: u32| {
        let mut f = dst.to_vec();
        f.extend(src);
        f.extend([0x88, 0xb5]);
        f.extend(seq.to_be_bytes());
        f.resize(60, 0);
        f
    };
    let mut batch = String::from(
        "link add br0 type bridge\nlink add a type pcap\nlink add b type pcap\n\
         link set dev a master br0\nlink set dev b master br0\n\
         fdb add 02:00:00:00:00:0b dev b static\n",
    );
    let mut w = PcapWriter::create(&d.join("a.in.pcap")).unwrap();
    for seq in 0..UNICAST as u32 {
        w.write(1, &frame(mac_b, mac_a, seq)).unwrap();
    }
    w.finish().unwrap();
    for i in 0..FLOODERS {
        let name = format!("f{i}");
        batch.push_str(&format!(
            "link add {name} type pcap\nlink set dev {name} master br0\n"
        ));
        let mut w = PcapWriter::create(&d.join(format!("{name}.in.pcap"))).unwrap();
        for seq in 0..FLOODS as u32 {
            w.write(1, &frame([0xff; 6], [0x02, 0, 0, 1, 0, i as u8], seq))
                .unwrap();
        }
        w.finish().unwrap();
    }
    let mut session = Session::with_workers(1);
    session
        .execute_batch(&batch, OutputOptions::default())
        .unwrap();
    let (engine, h, _) = Engine::new(
        session,
        EngineConfig {
            pcap_dir: Some(d.clone()),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let t = std::thread::spawn(move || engine.run());
    let t0 = Instant::now();
    let total = (UNICAST + FLOODERS * FLOODS) as u64;
    let received = |h: &Handle| {
        let v: serde_json::Value = serde_json::from_str(&call(h, "link show")).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l["stats"]["rx_frames"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    while received(&h) < total {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the input files were not read"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let links: serde_json::Value = serde_json::from_str(&call(&h, "link show")).unwrap();
    h.shutdown();
    t.join().unwrap();
    let drops = |name: &str, reason: &str| {
        links
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["ifname"] == name)
            .map_or(0, |l| l["stats"]["drops"][reason].as_u64().unwrap_or(0))
    };
    let b_out = read_all(&d.join("b.pcap"));
    let unicast: Vec<&Vec<u8>> = b_out.iter().filter(|f| f[..6] == mac_b).collect();
    assert_eq!(unicast.len(), UNICAST, "every frame of A reaches B");
    assert_eq!(drops("a", "flood_rate"), 0);
    let last_a = b_out.iter().rposition(|f| f[..6] == mac_b).unwrap();
    let floods_first = b_out[..last_a].iter().filter(|f| f[0] == 0xff).count();
    let floods = b_out.iter().filter(|f| f[0] == 0xff).count();
    let flood_rate: u64 = (0..FLOODERS)
        .map(|i| drops(&format!("f{i}"), "flood_rate"))
        .sum();
    eprintln!(
        "{floods_first} broadcasts reached B before A's last frame; {floods} in all, \
         {flood_rate} dropped as flood_rate"
    );
    assert_eq!(floods as u64 + flood_rate, (FLOODERS * FLOODS) as u64);
    // Each port got its share: at least one broadcast through.
    for i in 0..FLOODERS {
        let src = [0x02, 0, 0, 1, 0, i as u8];
        assert!(
            b_out.iter().any(|f| f[0] == 0xff && f[6..12] == src),
            "no broadcast of f{i} got through"
        );
    }
    assert!(
        floods_first <= (FLOODERS * FLOODS) / 4,
        "{floods_first} broadcasts went before A's last frame"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 17, item 7: a `link add` no longer copies the session (every FDB entry) twice, once
/// to undo it if its backend cannot be opened and once in the session (44.7 ms per command
/// with 100 000 user entries, 0.56 ms with 2, debug build); `vlan set … pvlan` alone no
/// longer works on a copy (30.7 ms before, 0.44 ms with 2). The per-command time with
/// 100 000 entries stays within a loose factor of the time with 2. (`link set … vlan_mode`
/// still walks the FDB to flush the port's entries: decision 7.)
#[test]
fn link_add_costs_the_same_with_a_large_fdb() {
    let per_command = |entries: u32| {
        let d = dir(&format!("linkadd{entries}"));
        let mut batch = String::from(
            "link add br0 type bridge vlan_filtering 1\nlink add p1 type patch peer p2\n\
             link set dev p1 master br0\n",
        );
        for i in 0..entries {
            batch.push_str(&format!(
                "fdb add 02:00:00:{:02x}:{:02x}:{:02x} dev p1 vlan 1 static\n",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            ));
        }
        let mut session = Session::with_workers(1);
        session
            .execute_batch(&batch, OutputOptions::default())
            .unwrap();
        let (engine, h, _) = Engine::new(
            session,
            EngineConfig {
                pcap_dir: Some(d.clone()),
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let t = std::thread::spawn(move || engine.run());
        let mut per = Vec::new();
        for cmd in [
            "link add q{} type pcap",
            "link set dev q{} master br0",
            "vlan set vid 1 dev q{} pvlan isolated",
        ] {
            let t0 = Instant::now();
            for i in 0..10 {
                call(&h, &cmd.replace("{}", &i.to_string()));
            }
            per.push(t0.elapsed() / 10);
        }
        // A backend that cannot be opened undoes the command: `mirror add` of a file that
        // cannot be made (a directory is in the way).
        std::fs::create_dir_all(d.join("m.pcap")).unwrap();
        let r = h.call(Op::Command {
            out: OutputOptions::default(),
            words: "mirror add m src q0 dst pcap m.pcap"
                .split(' ')
                .map(str::to_owned)
                .collect(),
        });
        assert!(!r.ok);
        assert!(!r.ok, "{:?}", r.output);
        eprintln!("{:?}", r.error);
        assert_eq!(call(&h, "mirror show").trim(), "[]");
        h.shutdown();
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(&d);
        per
    };
    let small = per_command(2);
    let large = per_command(100_000);
    for (i, what) in ["link add", "master", "vlan set pvlan"].iter().enumerate() {
        let (small, large) = (small[i], large[i]);
        eprintln!("{what}: {small:?} with 2 FDB entries, {large:?} with 100000");
        assert!(
            large < small * 8 + Duration::from_millis(5),
            "{what}: {small:?} with 2 FDB entries, {large:?} with 100000"
        );
    }
}
