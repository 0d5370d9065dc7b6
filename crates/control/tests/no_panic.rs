//! Property tests: no input line makes the parser or the session panic, and a failed batch
//! never changes the session.

use proptest::prelude::*;
use qbridge_control::{parse_words, OutputOptions, Session};

const WORDS: &[&str] = &[
    "link",
    "vlan",
    "fdb",
    "add",
    "set",
    "del",
    "show",
    "flush",
    "replace",
    "dev",
    "type",
    "bridge",
    "pcap",
    "afpacket",
    "tap",
    "ifname",
    "netns",
    "master",
    "nomaster",
    "br0",
    "p1",
    "p2",
    "vid",
    "pvid",
    "untagged",
    "10",
    "0",
    "4095",
    "4094",
    "1-4094",
    "20-10",
    "vlan_filtering",
    "1",
    "vlan_protocol",
    "802.1ad",
    "802.1Q",
    "ageing_time",
    "0.5",
    "1.5",
    "fdb_max_learned",
    "group_fwd_mask",
    "0x4000",
    "fdb_max_entries",
    "learning",
    "on",
    "off",
    "flood",
    "mtu",
    "9000",
    "envhdr",
    "len",
    "auto",
    "tpid",
    "0x88a8",
    "default",
    "static",
    "dynamic",
    "permanent",
    "sticky",
    "02:00:00:00:00:01",
    "ff:ff:ff:ff:ff:ff",
    "up",
    "down",
    "hairpin",
    "isolated",
    "br",
    "vlan_default_pvid",
    "#",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(str::to_string),
        1 => "[ -~]{0,12}",
    ]
}

fn line() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(word(), 0..10)
}

const SETUP: &str = "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
                     link add p2 type pcap\nlink set p1 master br0\nlink set p2 master br0\n";

proptest! {
    #[test]
    fn parser_never_panics(words in line()) {
        let _ = parse_words(&words);
    }

    #[test]
    fn session_never_panics_and_failed_batches_change_nothing(lines in proptest::collection::vec(line(), 1..8)) {
        let mut s = Session::new();
        s.execute_batch(SETUP, OutputOptions::default()).unwrap();
        let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
        let show = |s: &mut Session| -> String {
            let j = OutputOptions { json: true, stats: true, ..OutputOptions::default() };
            ["link show", "vlan show", "fdb show"]
                .iter()
                .map(|c| s.execute_line(c, j).unwrap())
                .collect()
        };
        let before = show(&mut s);
        match s.execute_batch(&text, OutputOptions::default()) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(e.line().is_some());
                prop_assert_eq!(show(&mut s), before);
            }
        }
    }
}
