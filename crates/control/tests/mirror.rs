//! `mirror add|del|show`: golden output (text, `-s`, JSON), errors, the running configuration
//! round trip and `apply`'s may-exist meaning.

use qbridge_control::{OutputOptions, Session};

const TEXT: OutputOptions = OutputOptions {
    json: false,
    stats: false,
    pretty: false,
    compress_vlans: false,
    details: false,
    brief: false,
};
const JSON: OutputOptions = OutputOptions { json: true, ..TEXT };
const STATS: OutputOptions = OutputOptions {
    stats: true,
    ..TEXT
};

const SETUP: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add p2 type pcap
link add p3 type pcap
link add pcap type pcap
link set dev p1 master br0
link set dev p2 master br0
vlan add vid 10 dev p1 pvid untagged
vlan add vid 10 dev p2
mirror add span src p1,p2 dst p3
mirror add rx10 src p2 direction rx vid 10,20-30 dst dev pcap rspan 999
mirror add cap src p1 dir tx dst pcap p1-tx.pcap
";

fn session() -> Session {
    let mut s = Session::new();
    assert_eq!(s.execute_batch(SETUP, TEXT).expect("setup applies"), "");
    s
}

fn run(s: &mut Session, line: &str, out: OutputOptions) -> String {
    s.execute_line(line, out)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn err(s: &mut Session, line: &str) -> String {
    s.execute_line(line, TEXT).unwrap_err().to_string()
}

#[test]
fn mirror_show_text() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "mirror show", TEXT),
        "\
span src p1,p2 direction both dst p3
rx10 src p2 direction rx vid 10,20-30 dst dev pcap rspan 999
cap src p1 direction tx dst pcap p1-tx.pcap
"
    );
    assert_eq!(
        run(&mut s, "mirror show cap", TEXT),
        "cap src p1 direction tx dst pcap p1-tx.pcap\n"
    );
}

#[test]
fn mirror_show_stats_and_json() {
    let mut s = session();
    // One frame received on p1 (VLAN 10, flooded to p2 tagged).
    let sw = s.switch_mut();
    let p1 = sw.port_id("p1").unwrap();
    let mut b = qbridge_packet::Batch::default();
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    f.resize(60, 0);
    let mut pkt = qbridge_packet::PacketBuf::from_frame(&f);
    pkt.port = p1.0;
    b.push(pkt);
    let mut out = qbridge_bridge::Outputs::new();
    sw.process(1, &mut b, &mut out);
    assert_eq!(
        run(&mut s, "mirror show", STATS),
        "\
span src p1,p2 direction both dst p3
    TX: 124 bytes 2 packets
    drops: none
rx10 src p2 direction rx vid 10,20-30 dst dev pcap rspan 999
    TX: 0 bytes 0 packets
    drops: none
cap src p1 direction tx dst pcap p1-tx.pcap
    TX: 0 bytes 0 packets
    drops: none
"
    );
    assert_eq!(
        run(&mut s, "mirror show", JSON),
        "[{\"name\":\"span\",\"src\":[\"p1\",\"p2\"],\"direction\":\"both\",\"dst\":\"p3\"},\
         {\"name\":\"rx10\",\"src\":[\"p2\"],\"direction\":\"rx\",\"vid\":\"10,20-30\",\
         \"dst\":\"pcap\",\"rspan\":999},\
         {\"name\":\"cap\",\"src\":[\"p1\"],\"direction\":\"tx\",\"pcap\":\"p1-tx.pcap\"}]\n"
    );
    let j = run(
        &mut s,
        "mirror show span",
        OutputOptions {
            json: true,
            stats: true,
            ..TEXT
        },
    );
    assert_eq!(
        j,
        "[{\"name\":\"span\",\"src\":[\"p1\",\"p2\"],\"direction\":\"both\",\"dst\":\"p3\",\
         \"stats\":{\"frames\":2,\"bytes\":124,\"drops\":{}}}]\n"
    );
}

#[test]
fn mirror_errors() {
    let mut s = session();
    assert_eq!(
        err(&mut s, "mirror add span src p1 dst p3"),
        "mirror \"span\" already exists"
    );
    assert_eq!(
        err(&mut s, "mirror add x src p1 dst p1"),
        "mirror \"x\": destination \"p1\" is also a source (a mirror never sends to a port it \
         watches)"
    );
    assert_eq!(
        err(&mut s, "mirror add x src p1 dst pcap ../../etc/passwd"),
        "mirror \"x\": invalid pcap file \"../../etc/passwd\" (a plain file name in the pcap \
         directory: no '/', not starting with '.', at most 255 bytes, not NAME.in.pcap)"
    );
    assert_eq!(
        err(&mut s, "mirror add x src p1 dst p9"),
        "device \"p9\" does not exist"
    );
    assert_eq!(err(&mut s, "mirror del x"), "mirror \"x\" does not exist");
    assert_eq!(err(&mut s, "mirror show x"), "mirror \"x\" does not exist");
    // A batch with a bad line changes nothing.
    let e = s
        .execute_batch("mirror del span\nmirror add y src p1 dst nope\n", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "line 2: device \"nope\" does not exist");
    assert_eq!(run(&mut s, "mirror show", TEXT).lines().count(), 3);
}

#[test]
fn running_config_round_trips_mirrors() {
    let mut s = session();
    let text = s.running_config();
    assert!(
        text.ends_with(
            "mirror add span src p1,p2 direction both dst p3\n\
             mirror add rx10 src p2 direction rx vid 10,20-30 dst dev pcap rspan 999\n\
             mirror add cap src p1 direction tx dst pcap p1-tx.pcap\n"
        ),
        "{text}"
    );
    let mut fresh = Session::new();
    fresh.execute_batch(&text, TEXT).expect("restores");
    assert_eq!(
        run(&mut fresh, "mirror show", JSON),
        run(&mut s, "mirror show", JSON)
    );
    assert_eq!(fresh.running_config(), text);
}

#[test]
fn deleting_a_port_shows_in_the_sessions() {
    let mut s = session();
    run(&mut s, "link del dev p2", TEXT);
    assert_eq!(
        run(&mut s, "mirror show", TEXT),
        "\
span src p1 direction both dst p3
cap src p1 direction tx dst pcap p1-tx.pcap
"
    );
}

#[test]
fn apply_keeps_identical_sessions_and_names_different_ones() {
    let mut s = session();
    s.apply_batch(SETUP, TEXT).expect("re-applies");
    s.apply_batch("mirror del nothing-here\n", TEXT)
        .expect("absent is fine");
    let e = s
        .apply_batch("mirror add span src p1 dst p3\n", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 1: mirror \"span\" exists as \"span src p1,p2 direction both dst p3\", not \
         \"span src p1 direction both dst p3\": delete it first (mirror del span)"
    );
}

#[test]
fn mirror_help() {
    let mut s = Session::new();
    let h = run(&mut s, "mirror help", TEXT);
    assert!(h.starts_with("Usage: qbridge [OPTIONS] mirror COMMAND [ARGS...]\n  mirror add NAME"));
    assert!(run(&mut s, "help", TEXT).contains("mirror del NAME"));
}
