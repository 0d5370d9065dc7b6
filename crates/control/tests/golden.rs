//! Golden tests of the command-line output (text and JSON) and of error messages.

use qbridge_control::{ControlError, Object, OutputOptions, Session};

const TEXT: OutputOptions = OutputOptions {
    json: false,
    stats: false,
    pretty: false,
    compress_vlans: false,
    details: false,
    brief: false,
};
const JSON: OutputOptions = OutputOptions {
    json: true,
    stats: false,
    pretty: false,
    compress_vlans: false,
    details: false,
    brief: false,
};

const SETUP: &str = "\
# a VLAN-aware bridge with an access port and a trunk
link add br0 type bridge vlan_filtering 1 ageing_time 1.5
link add p1 type pcap
link add p2 type afpacket dev eth1
link add p3 type tap ifname vm3 netns blue
link set dev p1 master br0
link set p2 master br0 learning off mtu 9000
link set dev p3 master br0 down tpid 0x9100 envhdr len 8

vlan add vid 10 dev p1 pvid untagged
vlan add vid 10-12 dev p2
vlan del vid 1 dev p2
vlan del vid 1 dev p1
fdb add 02:00:00:00:00:01 dev p1 vlan 10 static
fdb add 02:00:00:00:00:02 dev p2 vlan 11 static sticky
fdb add 02:00:00:00:00:03 dev p2 vlan 12
fdb add 02:00:00:00:00:04 dev p2 vlan 12 dynamic
";

fn session() -> Session {
    let mut s = Session::new();
    let out = s.execute_batch(SETUP, TEXT).expect("setup applies");
    assert_eq!(out, "");
    s
}

fn run(s: &mut Session, line: &str, out: OutputOptions) -> String {
    s.execute_line(line, out)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn fdb_show_text() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "fdb show", TEXT),
        "\
02:00:00:00:00:01 dev p1 vlan 10 master br0 static
02:00:00:00:00:02 dev p2 vlan 11 sticky master br0 static
02:00:00:00:00:03 dev p2 vlan 12 master br0 permanent
02:00:00:00:00:04 dev p2 vlan 12 master br0
"
    );
    assert_eq!(
        run(&mut s, "fdb show dev p2 vlan 12", TEXT),
        "02:00:00:00:00:03 dev p2 vlan 12 master br0 permanent\n\
         02:00:00:00:00:04 dev p2 vlan 12 master br0\n"
    );
    assert_eq!(run(&mut s, "fdb show br br0 vlan 99", TEXT), "");
}

#[test]
fn fdb_show_json() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "fdb show dev p2", JSON),
        r#"[{"mac":"02:00:00:00:00:02","ifname":"p2","vlan":11,"flags":["sticky"],"master":"br0","state":"static"},{"mac":"02:00:00:00:00:03","ifname":"p2","vlan":12,"flags":[],"master":"br0","state":"permanent"},{"mac":"02:00:00:00:00:04","ifname":"p2","vlan":12,"flags":[],"master":"br0","state":""}]"#
            .to_string()
            + "\n"
    );
}

#[test]
fn fdb_without_vlan_on_filtering_bridge_adds_vlan_0_and_each_vlan() {
    let mut s = session();
    run(&mut s, "fdb add 02:00:00:00:00:09 dev p1 static", TEXT);
    assert_eq!(
        run(&mut s, "fdb show dev p1", TEXT),
        "\
02:00:00:00:00:09 dev p1 master br0 static
02:00:00:00:00:01 dev p1 vlan 10 master br0 static
02:00:00:00:00:09 dev p1 vlan 10 master br0 static
"
    );
    run(&mut s, "fdb flush dev p1 static", TEXT);
    assert_eq!(run(&mut s, "fdb show dev p1", TEXT), "");
}

#[test]
fn vlan_show_text_and_json() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "vlan show", TEXT),
        "\
port              vlan-id
p1                10 PVID Egress Untagged
p2                10
                  11
                  12
p3                1 PVID Egress Untagged
"
    );
    assert_eq!(
        run(&mut s, "vlan show dev p1", JSON),
        "[{\"ifname\":\"p1\",\"vlans\":[{\"vlan\":10,\"flags\":[\"PVID\",\"Egress Untagged\"]}]}]\n"
    );
}

#[test]
fn vlan_show_stats() {
    let mut s = session();
    let stats = OutputOptions {
        stats: true,
        ..TEXT
    };
    assert_eq!(
        run(&mut s, "vlan show dev p1", stats),
        "\
port              vlan-id
br0               10
                    RX: 0 bytes 0 packets
                    TX: 0 bytes 0 packets
"
    );
    assert_eq!(
        run(
            &mut s,
            "vlan show dev br0",
            OutputOptions {
                stats: true,
                ..JSON
            }
        ),
        "[{\"ifname\":\"br0\",\"vlans\":[\
         {\"vid\":1,\"rx_bytes\":0,\"rx_packets\":0,\"tx_bytes\":0,\"tx_packets\":0},\
         {\"vid\":10,\"rx_bytes\":0,\"rx_packets\":0,\"tx_bytes\":0,\"tx_packets\":0},\
         {\"vid\":11,\"rx_bytes\":0,\"rx_packets\":0,\"tx_bytes\":0,\"tx_packets\":0},\
         {\"vid\":12,\"rx_bytes\":0,\"rx_packets\":0,\"tx_bytes\":0,\"tx_packets\":0}]}]\n"
    );
}

#[test]
fn link_show_text() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "link show", TEXT),
        "\
br0: bridge vlan_filtering 1 vlan_protocol 802.1Q vlan_default_pvid 1 ageing_time 1.5 fdb_max_learned 0 group_fwd_mask 0x0 fdb_max_entries 2097152
p1: pcap master br0 state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) max_frame 1518
    learning on flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0
p2: afpacket dev eth1 qdisc_bypass on master br0 state UP mtu 9000 envhdr len auto (4) tpid default (0x8100) max_frame 9018
    learning off flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0
p3: tap ifname vm3 netns blue master br0 state DOWN mtu 1500 envhdr len 8 tpid 0x9100 max_frame 1522
    learning on flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0
"
    );
    assert_eq!(
        run(
            &mut s,
            "link show dev p1",
            OutputOptions {
                stats: true,
                ..TEXT
            }
        ),
        "\
p1: pcap master br0 state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) max_frame 1518
    learning on flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0
    RX: 0 bytes 0 packets
    TX: 0 bytes 0 packets
    drops: none
    fdb: learn_refused 0 evictions 0 moves 0
"
    );
}

#[test]
fn link_show_json() {
    let mut s = session();
    let v: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show", JSON)).expect("valid JSON");
    let links = v.as_array().expect("array");
    assert_eq!(links.len(), 4);
    assert_eq!(links[0]["ifname"], "br0");
    assert_eq!(links[0]["kind"], "bridge");
    assert_eq!(links[0]["bridge"]["vlan_filtering"], true);
    assert_eq!(links[0]["bridge"]["ageing_time_ns"], 1_500_000_000u64);
    assert_eq!(
        links[2]["backend"],
        serde_json::json!({"type": "afpacket", "dev": "eth1", "qdisc_bypass": true})
    );
    assert_eq!(
        links[3]["backend"],
        serde_json::json!({"type": "tap", "ifname": "vm3", "netns": "blue"})
    );
    assert_eq!(links[3]["master"], "br0");
    assert_eq!(links[3]["port"]["tpid"], "0x9100");
    assert_eq!(links[3]["port"]["up"], false);
}

#[test]
fn afpacket_without_qdisc_bypass() {
    let mut s = session();
    run(
        &mut s,
        "link add p4 type afpacket dev eth2 qdisc_bypass off",
        TEXT,
    );
    assert_eq!(
        run(&mut s, "link show dev p4", TEXT),
        "\
p4: afpacket dev eth2 qdisc_bypass off state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) max_frame 1518
    learning on flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0
"
    );
    let v: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev p4", JSON)).expect("valid JSON");
    assert_eq!(
        v[0]["backend"],
        serde_json::json!({"type": "afpacket", "dev": "eth2", "qdisc_bypass": false})
    );
}

#[test]
fn empty_session_shows_nothing() {
    let mut s = Session::new();
    assert_eq!(run(&mut s, "link show", TEXT), "");
    // bridge/vlan.c `vlan_show` prints its header before the dump, even an empty one.
    assert_eq!(
        run(&mut s, "vlan show", TEXT),
        "port              vlan-id\n"
    );
    assert_eq!(run(&mut s, "vlan show", JSON), "[]\n");
    assert_eq!(run(&mut s, "fdb show", TEXT), "");
    assert_eq!(run(&mut s, "link show", JSON), "[]\n");
    assert_eq!(run(&mut s, "fdb show", JSON), "[]\n");
}

fn batch_err(extra: &str) -> String {
    let mut s = Session::new();
    let text = format!("{SETUP}{extra}");
    s.execute_batch(&text, TEXT).unwrap_err().to_string()
}

#[test]
fn batch_errors_carry_line_numbers() {
    // SETUP is 17 lines; the extra text starts at line 18.
    assert_eq!(
        batch_err("vlan add vid 4095 dev p1\n"),
        "line 18: vid 4095 is reserved"
    );
    assert_eq!(
        batch_err("\n# comment\nvlan add vid 20-10 dev p1\n"),
        "line 20: range end 10 is below start 20"
    );
    assert_eq!(
        batch_err("link add p1 type pcap\n"),
        "line 18: device \"p1\" already exists"
    );
    assert_eq!(
        batch_err("link set dev nope up\n"),
        "line 18: device \"nope\" does not exist"
    );
    assert_eq!(
        batch_err("link set dev p1 mtu 10\n"),
        "line 18: mtu 10 is out of range (68-65535)"
    );
    assert_eq!(
        batch_err("vlan del vid 77 dev p1\n"),
        "line 18: vid 77 is not configured on device \"p1\""
    );
    assert_eq!(
        batch_err("fdb add 01:00:5e:00:00:01 dev p1 static\n"),
        "line 18: invalid MAC address 01:00:5e:00:00:01: multicast and all-zero addresses \
         cannot be FDB entries"
    );
    assert_eq!(
        batch_err("link set dev br0 type bridge group_fwd_mask 1\n"),
        "line 18: group_fwd_mask 0x0001 is invalid: bits 0-2 (STP, MAC pause, LACP) cannot be set"
    );
    assert_eq!(
        batch_err("link set dev p1 tpid 0x0800\n"),
        "line 18: tpid 0x0800 cannot be used: it is an EtherType of a network protocol"
    );
    assert_eq!(
        batch_err("vlan add vid 5 dev br0\n"),
        "line 18: \"br0\" is a bridge: its own VLANs need \"self\" (vlan add vid V dev br0 self)"
    );
    assert_eq!(
        batch_err("link set dev p1 type bridge vlan_filtering 0\n"),
        "line 18: device \"p1\" is not a bridge"
    );
    assert_eq!(
        batch_err("link add p9 type pcap\nvlan add vid 5 dev p9\n"),
        "line 19: device \"p9\" is not attached to a bridge"
    );
    assert_eq!(
        batch_err("fdb add 02:00:00:00:00:01 dev p1 vlan 10\n"),
        "line 18: FDB entry 02:00:00:00:00:01 vlan 10 exists on device \"p1\""
    );
    assert_eq!(
        batch_err("bridge fdb show\n"),
        "line 18: unknown object \"bridge\" (expected link, vlan, fdb, mirror, stp or vni)"
    );
    assert_eq!(
        batch_err("vlan show dev p1 extra\n"),
        "line 18: unexpected \"extra\" (expected dev or vid)"
    );
    let e = {
        let mut s = session();
        s.execute_batch("link show\nlink frob\n", TEXT).unwrap_err()
    };
    assert_eq!(e.line(), Some(2));
    assert!(matches!(e.root(), ControlError::UnknownCommand { .. }));
    assert_eq!(
        e.to_string(),
        "line 2: unknown command \"frob\" for link (expected add, set, del, show or help)"
    );
}

#[test]
fn failing_batch_leaves_session_unchanged() {
    let mut s = session();
    let before = (
        run(&mut s, "link show", JSON),
        run(&mut s, "vlan show", JSON),
        run(&mut s, "fdb show", JSON),
    );
    let bad = "\
link add br1 type bridge
link add q1 type pcap
link set dev q1 master br1
vlan add vid 5 dev p1
fdb flush dev br0
link del dev p2
link set dev p1 nomaster
vlan add vid 4095 dev q1
";
    let e = s.execute_batch(bad, TEXT).unwrap_err();
    assert_eq!(e.to_string(), "line 8: vid 4095 is reserved");
    let after = (
        run(&mut s, "link show", JSON),
        run(&mut s, "vlan show", JSON),
        run(&mut s, "fdb show", JSON),
    );
    assert_eq!(before, after);
    assert!(s.port_spec("q1").is_none());
    assert!(s.port_spec("p2").is_some());
}

#[test]
fn batch_output_collects_show_commands() {
    let mut s = Session::new();
    let out = s
        .execute_batch(
            "link add br0 type bridge\nlink show\nlink add p1 type pcap\nfdb show\n",
            TEXT,
        )
        .unwrap();
    assert_eq!(
        out,
        "br0: bridge vlan_filtering 0 vlan_protocol 802.1Q vlan_default_pvid 1 ageing_time 300 \
         fdb_max_learned 0 group_fwd_mask 0x0 fdb_max_entries 2097152\n"
    );
}

#[test]
fn single_failing_command_changes_nothing() {
    let mut s = session();
    let before = run(&mut s, "link show", JSON);
    // mtu is refused by the switch after the bridge name was resolved: master must not change.
    let e = s
        .execute_line("link set dev p1 nomaster mtu 20", TEXT)
        .unwrap_err();
    assert_eq!(e.to_string(), "mtu 20 is out of range (68-65535)");
    let e = s
        .execute_line("link set dev p1 master nobr learning off", TEXT)
        .unwrap_err();
    assert_eq!(e.to_string(), "device \"nobr\" does not exist");
    assert_eq!(run(&mut s, "link show", JSON), before);
}

#[test]
fn link_del_and_nomaster() {
    let mut s = session();
    run(&mut s, "link set p1 nomaster", TEXT);
    assert_eq!(run(&mut s, "fdb show dev p1", TEXT), "");
    run(&mut s, "link del br0", TEXT);
    run(&mut s, "link del dev p2", TEXT);
    assert!(s.port_spec("p2").is_none());
    assert_eq!(
        run(&mut s, "link show p1", TEXT),
        "p1: pcap state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) max_frame 1518\n    \
         learning on flood on mcast_flood on bcast_flood on isolated off hairpin off fdb_max_learned 0\n"
    );
}

const STACK: &str = "\
link add eth0 type afpacket dev veth0
link add link eth0 name eth0.100 type vlan protocol 802.1ad id 100 address 02:00:00:00:01:00
link add link eth0.100 name eth0.100.10 type vlan id 10 netns h1 address 02:00:00:00:01:10
link add brh type bridge vlan_filtering 1
link set dev brh up address 02:00:00:00:0b:00
vlan add vid 10 dev brh self
link add link brh name brh.10 type vlan id 10 address 02:00:00:00:0b:10
link add up0 type afpacket dev veth1
link add link up0 name mv0 type macvlan mode vepa address 02:00:00:00:0a:01
";

fn stack_session() -> Session {
    let mut s = Session::new();
    s.execute_batch(STACK, TEXT).expect("stack applies");
    s
}

#[test]
fn stacked_devices_in_link_show() {
    let mut s = stack_session();
    assert_eq!(
        run(&mut s, "link show dev eth0.100.10", TEXT)
            .lines()
            .next()
            .unwrap(),
        "eth0.100.10: vlan link eth0.100 protocol 802.1Q id 10 netns h1 \
         address 02:00:00:00:01:10 state UP mtu 1500 envhdr len auto (4) tpid default (0x8100) \
         max_frame 1518"
    );
    // eth0 carries two tags of the devices above it: 8 more bytes of envelope.
    assert!(
        run(&mut s, "link show dev eth0", TEXT).contains("envhdr len auto (12)"),
        "{}",
        run(&mut s, "link show dev eth0", TEXT)
    );
    assert_eq!(
        run(&mut s, "link show dev mv0", TEXT)
            .lines()
            .next()
            .unwrap(),
        "mv0: macvlan link up0 mode vepa address 02:00:00:00:0a:01 state UP mtu 1500 \
         envhdr len auto (4) tpid default (0x8100) max_frame 1518"
    );
    let br = run(&mut s, "link show dev brh", TEXT);
    assert!(
        br.contains("\n    host port: ifname brh address 02:00:00:00:0b:00 state UP"),
        "{br}"
    );
    // As `ip -j -d link show`: the lower device and linkinfo.info_data.
    let j: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev eth0.100", JSON)).unwrap();
    assert_eq!(j[0]["link"], "eth0");
    assert_eq!(j[0]["linkinfo"]["info_kind"], "vlan");
    assert_eq!(j[0]["linkinfo"]["info_data"]["protocol"], "802.1ad");
    assert_eq!(j[0]["linkinfo"]["info_data"]["id"], 100);
    assert_eq!(j[0]["address"], "02:00:00:00:01:00");
    assert_eq!(j[0]["backend"]["type"], "tap");
    assert_eq!(j[0]["backend"]["ifname"], "eth0.100");
    // The host port's VLANs show under the bridge's name; the bridge's address is local in each.
    let v = run(&mut s, "vlan show dev brh", TEXT);
    assert!(v.contains("brh") && v.contains("10"), "{v}");
    let f = run(&mut s, "fdb show br brh", TEXT);
    assert!(
        f.contains("02:00:00:00:0b:00 dev brh vlan 10 master brh permanent"),
        "{f}"
    );
}

#[test]
fn deleting_a_lower_device_deletes_what_is_stacked_on_it() {
    let mut s = stack_session();
    run(&mut s, "link del dev eth0.100", TEXT);
    assert!(s.port_spec("eth0.100.10").is_none());
    let e = s
        .execute_line("link show dev eth0.100.10", TEXT)
        .unwrap_err();
    assert_eq!(e.to_string(), "device \"eth0.100.10\" does not exist");
    run(&mut s, "link del dev brh", TEXT);
    assert!(s.port_spec("brh.10").is_none() && s.port_spec("brh").is_none());
}

#[test]
fn stacked_device_errors() {
    let mut s = stack_session();
    let err = |s: &mut Session, line: &str| s.execute_line(line, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(
            &mut s,
            "link add link eth0 name dup type vlan protocol 802.1ad id 100"
        ),
        "VLAN 100 (protocol 0x88a8) already exists on \"eth0\" as \"eth0.100\""
    );
    assert_eq!(
        err(&mut s, "link add link nope name x type vlan id 5"),
        "device \"nope\" does not exist"
    );
    s.execute_line("link add br9 type bridge", TEXT).unwrap();
    assert_eq!(
        err(&mut s, "link add link br9 name br9.5 type vlan id 5"),
        "bridge \"br9\" has no host port (\"link set dev br9 up\" gives it one)"
    );
    assert_eq!(
        err(&mut s, "vlan add vid 5 dev br9"),
        "\"br9\" is a bridge: its own VLANs need \"self\" (vlan add vid V dev br9 self)"
    );
    assert_eq!(
        err(&mut s, "vlan add vid 5 dev br9 self"),
        "bridge \"br9\" has no host port (\"link set dev br9 up\" gives it one)"
    );
    assert_eq!(
        err(&mut s, "link set dev eth0 ifname x"),
        "ifname, netns, address and index only apply to a bridge's host port (link set dev BR up …)"
    );
    assert_eq!(
        err(&mut s, "link set dev brh ifname other"),
        "the host port of \"brh\" exists: its ifname, netns, address and index are fixed at creation"
    );
    assert_eq!(
        err(&mut s, "link set dev brh master br9"),
        "\"master\" does not apply to bridge \"brh\"'s host port"
    );
    assert_eq!(
        err(
            &mut s,
            "link add link up0 name mv1 type macvlan mode bridge address 02:00:00:00:0a:01"
        ),
        "address 02:00:00:00:0a:01 is in use by macvlan \"mv0\" on the same lower device"
    );
    s.execute_line("link set dev eth0 master brh", TEXT)
        .unwrap();
    assert_eq!(
        err(&mut s, "link add link eth0 name mv9 type macvlan mode private"),
        "device \"eth0\" is busy: a macvlan's lower device cannot be a bridge port, nor a bridge port carry macvlans (as on Linux)"
    );
    // A down host port stays; `down` on a bridge without one says so.
    s.execute_line("link set dev brh down", TEXT).unwrap();
    assert!(run(&mut s, "link show dev brh", TEXT)
        .contains("host port: ifname brh address 02:00:00:00:0b:00 state DOWN"));
    assert_eq!(
        err(&mut s, "link set dev br9 down"),
        "bridge \"br9\" has no host port (\"link set dev br9 up\" gives it one)"
    );
}

const COMPRESS: OutputOptions = OutputOptions {
    compress_vlans: true,
    ..TEXT
};

/// bridge/vlan.c `print_vlan_info` with `-c`: runs of VIDs with the same flags as
/// `START-END` (lib/json_print.c `print_range`: `vlan` and `vlanEnd` in JSON); `flags` left out
/// when a VID has none (lib/bridge.c `bridge_print_vlan_flags`).
#[test]
fn vlan_show_compressed_and_by_vid() {
    let mut s = session();
    run(&mut s, "vlan add vid 20-30 dev p1", TEXT);
    run(&mut s, "vlan add vid 31 dev p1 untagged", TEXT);
    assert_eq!(
        run(&mut s, "vlan show", COMPRESS),
        "\
port              vlan-id
p1                10 PVID Egress Untagged
                  20-30
                  31 Egress Untagged
p2                10-12
p3                1 PVID Egress Untagged
"
    );
    assert_eq!(
        run(
            &mut s,
            "vlan show dev p1",
            OutputOptions {
                compress_vlans: true,
                ..JSON
            }
        ),
        "[{\"ifname\":\"p1\",\"vlans\":[\
         {\"vlan\":10,\"flags\":[\"PVID\",\"Egress Untagged\"]},\
         {\"vlan\":20,\"vlanEnd\":30},\
         {\"vlan\":31,\"flags\":[\"Egress Untagged\"]}]}]\n"
    );
    // Without -c: one VID per entry, no `flags` key where there are none.
    assert_eq!(
        run(&mut s, "vlan show dev p2", JSON),
        "[{\"ifname\":\"p2\",\"vlans\":[{\"vlan\":10},{\"vlan\":11},{\"vlan\":12}]}]\n"
    );
    // `vid V` (bridge/vlan.c `filter_vlan_check`): the entry holding V, the whole range
    // with -c; ports without it are left out.
    assert_eq!(
        run(&mut s, "vlan show vid 11", TEXT),
        "port              vlan-id\np2                11\n"
    );
    assert_eq!(
        run(&mut s, "vlan show vid 25", COMPRESS),
        "port              vlan-id\np1                20-30\n"
    );
    assert_eq!(
        run(&mut s, "vlan show vid 99", TEXT),
        "port              vlan-id\n"
    );
    assert_eq!(run(&mut s, "vlan show vid 99", JSON), "[]\n");
    let stats = OutputOptions {
        stats: true,
        ..TEXT
    };
    assert_eq!(
        run(&mut s, "vlan show vid 12", stats),
        "\
port              vlan-id
br0               12
                    RX: 0 bytes 0 packets
                    TX: 0 bytes 0 packets
"
    );
}

/// bridge/fdb.c `print_fdb` with `-s`: `used` and `updated` (`fdb_print_stats`) after the
/// VLAN and before `flags`.
#[test]
fn fdb_show_json_stats() {
    let mut s = session();
    assert_eq!(
        run(
            &mut s,
            "fdb show dev p1",
            OutputOptions {
                stats: true,
                ..JSON
            }
        ),
        "[{\"mac\":\"02:00:00:00:00:01\",\"ifname\":\"p1\",\"vlan\":10,\"used\":0,\"updated\":0,\
         \"flags\":[],\"master\":\"br0\",\"state\":\"static\"}]\n"
    );
}

/// `ip -j -d link show` (ip/ipaddress.c `print_linkinfo`): ifname, mtu, master, operstate,
/// then `linkinfo` — a bridge's `info_data` as ip/iplink_bridge.c `bridge_print_opt`
/// (ageing_time in centiseconds, vlan_filtering 0/1, group_fwd_mask a `%#llx` string), a
/// port's `info_slave_data` as ip/iplink_bridge_slave.c `bridge_slave_print_opt` (booleans).
#[test]
fn link_show_json_as_ip_d() {
    let mut s = session();
    run(
        &mut s,
        "link set dev br0 type bridge group_fwd_mask 0x4000 fdb_max_learned 7",
        TEXT,
    );
    let v: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show", JSON)).expect("valid JSON");
    assert_eq!(
        v[0]["linkinfo"],
        serde_json::json!({
            "info_kind": "bridge",
            "info_data": {
                "ageing_time": 150,
                "vlan_filtering": 1,
                "vlan_protocol": "802.1Q",
                "fdb_n_learned": 0,
                "fdb_max_learned": 7,
                "vlan_default_pvid": 1,
                "group_fwd_mask": "0x4000",
                "fdb_max_entries": 2097152
            }
        })
    );
    assert!(v[0].get("mtu").is_none() && v[0].get("operstate").is_none());
    let p3 = &v[3];
    assert_eq!(p3["ifname"], "p3");
    assert_eq!(p3["mtu"], 1500);
    assert_eq!(p3["master"], "br0");
    assert_eq!(p3["operstate"], "DOWN");
    assert_eq!(
        p3["linkinfo"],
        serde_json::json!({
            "info_slave_kind": "bridge",
            "info_slave_data": {
                "hairpin": false,
                "learning": true,
                "flood": true,
                "mcast_flood": true,
                "bcast_flood": true,
                "isolated": false
            }
        })
    );
    // Key order as ip prints it, qbridge's own keys after.
    let text = run(&mut s, "link show dev p2", JSON);
    assert!(
        text.starts_with(
            "[{\"ifname\":\"p2\",\"mtu\":9000,\"master\":\"br0\",\"operstate\":\"UP\",\
             \"linkinfo\":{\"info_slave_kind\":\"bridge\",\"info_slave_data\":{\"hairpin\":false,\
             \"learning\":false,"
        ),
        "{text}"
    );
    run(
        &mut s,
        "link set dev br0 type bridge group_fwd_mask 0",
        TEXT,
    );
    let v: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev br0", JSON)).unwrap();
    assert_eq!(v[0]["linkinfo"]["info_data"]["group_fwd_mask"], "0");
    // A stacked device keeps its kind and data, and is a bridge port as well.
    let mut s = stack_session();
    run(&mut s, "link set dev eth0.100 master brh", TEXT);
    let v: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev eth0.100", JSON)).unwrap();
    assert_eq!(v[0]["linkinfo"]["info_kind"], "vlan");
    assert_eq!(v[0]["linkinfo"]["info_data"]["id"], 100);
    assert_eq!(v[0]["linkinfo"]["info_slave_kind"], "bridge");
}

/// bridge-fdb(8) `flush … [no]permanent [no]static [no]dynamic [no]sticky`.
#[test]
fn fdb_flush_kinds() {
    let mut s = session();
    run(&mut s, "fdb flush dev br0", TEXT);
    assert_eq!(
        run(&mut s, "fdb show", TEXT),
        "02:00:00:00:00:03 dev p2 vlan 12 master br0 permanent\n"
    );
    run(&mut s, "fdb flush dev p2 permanent", TEXT);
    assert_eq!(run(&mut s, "fdb show", TEXT), "");

    let mut s = session();
    run(&mut s, "fdb flush dev p2 nodynamic nosticky", TEXT);
    assert_eq!(
        run(&mut s, "fdb show", TEXT),
        "\
02:00:00:00:00:01 dev p1 vlan 10 master br0 static
02:00:00:00:00:02 dev p2 vlan 11 sticky master br0 static
02:00:00:00:00:04 dev p2 vlan 12 master br0
"
    );
    run(&mut s, "fdb flush dev br0 vlan 12 nostatic", TEXT);
    assert_eq!(
        run(&mut s, "fdb show", TEXT),
        "\
02:00:00:00:00:01 dev p1 vlan 10 master br0 static
02:00:00:00:00:02 dev p2 vlan 11 sticky master br0 static
"
    );
}

#[test]
fn abbreviated_commands_run() {
    let mut s = session();
    assert_eq!(
        run(&mut s, "f s dev p1", TEXT),
        run(&mut s, "fdb show dev p1", TEXT)
    );
    assert_eq!(run(&mut s, "v s", TEXT), run(&mut s, "vlan show", TEXT));
    assert_eq!(
        run(&mut s, "l sh p2", TEXT),
        run(&mut s, "link show dev p2", TEXT)
    );
    run(&mut s, "l s p2 le on", TEXT);
    assert!(run(&mut s, "link show dev p2", TEXT).contains("learning on"));
}

#[test]
fn help_comes_from_the_usage_source() {
    let mut s = Session::new();
    let h = run(&mut s, "vlan help", TEXT);
    assert!(
        h.starts_with("Usage: qbridge [OPTIONS] vlan COMMAND [ARGS...]\n  vlan add vid"),
        "{h}"
    );
    assert!(h.contains("  vlan show [dev NAME] [vid V]"), "{h}");
    assert!(!h.contains("fdb add"), "{h}");
    let all = run(&mut s, "help", TEXT);
    for o in [Object::Link, Object::Vlan, Object::Fdb] {
        let body = qbridge_control::usage::object(o);
        let commands = body.split_once('\n').unwrap().1;
        let commands = commands.split("'dev' may be omitted").next().unwrap();
        assert!(
            all.contains(commands),
            "{o:?} help is not in the full usage"
        );
    }
}

#[test]
fn vlan_modes_show_and_refuse() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad\n\
         link add c1 type pcap\nlink add t1 type pcap\n\
         link set dev c1 master pe vlan_mode dot1q-tunnel tag 100 cvlans 0,10-20\n\
         link set dev t1 master pe vlan_mode native-tagged tag 5 trunks 100-101\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "vlan show", TEXT),
        "port              vlan-id\nc1                100 PVID Egress Untagged\n\
         t1                5 PVID\n                  100\n                  101\n"
    );
    let j: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev c1", JSON)).unwrap();
    assert_eq!(
        j[0]["port"]["vlan_mode"],
        serde_json::json!({"mode": "dot1q-tunnel", "tag": 100, "cvlans": "0,10-20"})
    );
    assert!(run(&mut s, "link show dev t1", TEXT)
        .contains("\n    vlan_mode native-tagged tag 5 trunks 100-101\n"));
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "link set dev c1 tag 5"),
        "tag, trunks and cvlans go with vlan_mode (link set dev P vlan_mode access tag 10)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 vlan_mode accss tag 5"),
        "invalid vlan_mode \"accss\" (expected access, trunk, native-untagged, native-tagged or dot1q-tunnel)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 vlan_mode trunk trunks 0-5"),
        "invalid trunks \"0-5\" (expected VIDs 1 to 4094 and ranges, e.g. 10,20-30)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 vlan_mode trunk trunks 30-20"),
        "invalid trunks \"30-20\" (expected ranges written low-high, e.g. 10,20-30)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 vlan_mode access tag 7 cvlans 3"),
        "\"cvlans\" applies to vlan_mode dot1q-tunnel only, not access"
    );
    // A refused mode with `master` in the same line changes nothing, the master included.
    s.execute_line("link add x type pcap", TEXT).unwrap();
    err(&mut s, "link set dev x master pe vlan_mode trunk tag 4");
    let j: serde_json::Value = serde_json::from_str(&run(&mut s, "link show dev x", JSON)).unwrap();
    assert!(j[0].get("master").is_none(), "{j}");
}

#[test]
fn pcp_mode_words_show_and_count() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1\nlink add c1 type pcap\n\
         link set dev c1 master pe pcp_mode map 0:1,5:6 default_pcp 3\n",
        TEXT,
    )
    .unwrap();
    assert!(run(&mut s, "link show dev c1", TEXT)
        .contains("\n    pcp_mode map 0:1,5:6 default_pcp 3\n"));
    let j: serde_json::Value =
        serde_json::from_str(&run(&mut s, "link show dev c1", JSON)).unwrap();
    assert_eq!(j[0]["port"]["pcp_mode"], "map 0:1,5:6");
    assert_eq!(j[0]["port"]["default_pcp"], 3);
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "link set dev c1 pcp_mode fixed 8"),
        "PCP 8 is out of range (0-7)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 pcp_mode map 1-2"),
        "invalid pcp map \"1-2\" (expected FROM:TO pairs of PCPs, e.g. 0:1,5:5)"
    );
    assert_eq!(
        err(&mut s, "link set dev c1 pcp_mode fancy"),
        "invalid pcp_mode \"fancy\" (expected keep, copy, fixed N or map LIST)"
    );
    s.execute_line("link set dev c1 pcp_mode keep default_pcp 0", TEXT)
        .unwrap();
    assert!(!run(&mut s, "link show dev c1", TEXT).contains("pcp_mode"));
}

#[test]
fn pvlan_roles_show_and_refuse() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
         link set dev p1 master br0\nvlan add vid 10-12 dev p1\n\
         vlan set vid 10-11 dev p1 pvlan community 7\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "vlan show dev p1", TEXT),
        "port              vlan-id\np1                1 PVID Egress Untagged\n\
         \x20                 10 pvlan community 7\n                  11 pvlan community 7\n\
         \x20                 12\n"
    );
    let j: serde_json::Value =
        serde_json::from_str(&run(&mut s, "vlan show dev p1", JSON)).unwrap();
    assert_eq!(j[0]["vlans"][1]["pvlan"], "community 7");
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "vlan set vid 20 dev p1 pvlan isolated"),
        "vid 20 is not configured on device \"p1\""
    );
    assert_eq!(
        err(&mut s, "vlan set vid 10 dev p1 pvlan secluded"),
        "invalid pvlan \"secluded\" (expected promiscuous, isolated, community N or none)"
    );
    s.execute_line("vlan set vid 10-11 dev p1 pvlan none", TEXT)
        .unwrap();
    assert!(!run(&mut s, "vlan show dev p1", TEXT).contains("pvlan"));
}

#[test]
fn vlan_maps_show_and_refuse() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
         link set dev p1 master br0\nvlan add vid 100 dev p1\n\
         vlan map add dev p1 vid 10 translate 100\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "vlan map show", TEXT),
        "p1 vid 10 translate 100\n"
    );
    assert_eq!(
        run(&mut s, "vlan map show dev p1", JSON),
        "[{\"ifname\":\"p1\",\"translate\":100,\"vid\":10}]\n"
    );
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "vlan map add dev p1 vid 10 translate 200"),
        "vid 10 on p1 is translated to 100 already (vlan map del dev p1 vid 10 first)"
    );
    assert_eq!(
        err(&mut s, "vlan map add dev p1 vid 20 translate 100"),
        "100 on p1 is already the translation of vid 10"
    );
    assert_eq!(
        err(&mut s, "vlan map del dev p1 vid 20"),
        "no vlan map of vid 20 on p1"
    );
    s.execute_line("vlan map del dev p1 vid 10", TEXT).unwrap();
    assert_eq!(run(&mut s, "vlan map show", TEXT), "");
}

#[test]
fn vlan_limits_show_and_refuse() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge vlan_filtering 1\nlink add p1 type pcap\n\
         link set dev p1 master br0\nvlan add vid 10-11 dev p1\n\
         vlan set vid 10-11 dev p1 fdb_max_learned 4 violation shutdown\n",
        TEXT,
    )
    .unwrap();
    assert!(run(&mut s, "vlan show dev p1", TEXT)
        .contains("\n                  10 fdb_max_learned 4 violation shutdown\n"));
    let j: serde_json::Value =
        serde_json::from_str(&run(&mut s, "vlan show dev p1", JSON)).unwrap();
    assert_eq!(j[0]["vlans"][1]["fdb_max_learned"], 4);
    assert_eq!(j[0]["vlans"][1]["violation"], "shutdown");
    assert!(s
        .running_config()
        .contains("vlan set vid 11 dev p1 fdb_max_learned 4 violation shutdown\n"));
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "vlan set vid 10 dev p1 violation protect"),
        "missing \"fdb_max_learned N\" with \"violation\""
    );
    assert_eq!(
        err(&mut s, "vlan set vid 10 dev p1"),
        "missing \"pvlan ROLE\" or \"fdb_max_learned N\""
    );
    assert_eq!(
        err(
            &mut s,
            "vlan set vid 10 dev p1 fdb_max_learned 2 violation loud"
        ),
        "invalid violation \"loud\" (expected protect, restrict or shutdown)"
    );
    // Default violation: protect.
    s.execute_line("vlan set vid 10 dev p1 fdb_max_learned 2", TEXT)
        .unwrap();
    assert!(
        run(&mut s, "vlan show dev p1", TEXT).contains(" 10 fdb_max_learned 2 violation protect")
    );
}

#[test]
fn selective_qinq_maps_show_and_refuse() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad\nlink add c1 type pcap\n\
         link set dev c1 master pe\nvlan add vid 100 dev c1\n\
         vlan map add dev c1 cvid 10-11 svid 100\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "vlan map show", TEXT),
        "c1 cvid 10-11 svid 100\n"
    );
    assert!(s
        .running_config()
        .contains("vlan map add dev c1 cvid 10-11 svid 100\n"));
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "vlan map add dev c1 cvid 11-12 svid 200"),
        "cvid 11 on c1 is mapped to svid 100 already"
    );
    assert_eq!(
        err(&mut s, "vlan map add dev c1 cvid 5"),
        "missing \"svid S\""
    );
    assert_eq!(
        err(&mut s, "vlan map add dev c1 cvid 5 svid 7 vid 3"),
        "unexpected \"cvid\" (expected either vid A translate B or cvid C svid S)"
    );
    s.execute_line("vlan map del dev c1 cvid 10-11", TEXT)
        .unwrap();
    assert_eq!(run(&mut s, "vlan map show", TEXT), "");
}

#[test]
fn two_tag_maps_show_refuse_and_round_trip() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad\nlink add n1 type pcap\n\
         link set dev n1 master pe\nvlan add vid 200 dev n1\nvlan add vid 500 dev n1\n\
         vlan map add dev n1 svid 100 cvid 10 translate 500\n\
         vlan map add dev n1 svid 100 cvid 11 translate 200 21\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "vlan map show", TEXT),
        "n1 svid 100 cvid 10 translate 500\nn1 svid 100 cvid 11 translate 200 21\n"
    );
    assert_eq!(
        run(&mut s, "vlan map show dev n1", JSON),
        "[{\"cvid\":10,\"ifname\":\"n1\",\"svid\":100,\"translate\":500},{\"cvid\":11,\"ifname\":\"n1\",\"svid\":100,\"translate\":200,\"translate_cvid\":21}]\n"
    );
    let rc = s.running_config();
    assert!(rc.contains("vlan map add dev n1 svid 100 cvid 10 translate 500\n"));
    assert!(rc.contains("vlan map add dev n1 svid 100 cvid 11 translate 200 21\n"));
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "vlan map add dev n1 svid 100 cvid 10-12 translate 5"),
        "invalid cvid \"10-12\" (expected one C-VID (ranges are for selective Q-in-Q: cvid C-C2 svid S))"
    );
    assert_eq!(
        err(&mut s, "vlan map add dev n1 svid 100 cvid 10 translate 5 6 7"),
        "unexpected \"7\" (expected dev, vid and translate, cvid and svid, or svid, cvid and translate)"
    );
    assert_eq!(
        err(&mut s, "vlan map add dev n1 svid 101 cvid 10 translate 500"),
        "500 on n1 is already the translation of svid 100 cvid 10 (translate 500)"
    );
    assert_eq!(
        err(&mut s, "vlan map del dev n1 svid 100 cvid 12"),
        "no vlan map of svid 100 cvid 12 on n1"
    );
    s.execute_line("vlan map del dev n1 svid 100 cvid 10", TEXT)
        .unwrap();
    s.execute_line("vlan map del dev n1 svid 100 cvid 11", TEXT)
        .unwrap();
    assert_eq!(run(&mut s, "vlan map show", TEXT), "");
}

#[test]
fn learn_inner_vid_shows_in_link_and_fdb() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad learn_inner_vid on\n",
        TEXT,
    )
    .unwrap();
    assert!(run(&mut s, "link show dev pe", TEXT)
        .contains(" fdb_max_entries 2097152 learn_inner_vid on\n"));
    assert!(run(&mut s, "link show dev pe", JSON).contains("\"learn_inner_vid\":true"));
    assert!(s
        .running_config()
        .contains("link set dev pe type bridge learn_inner_vid on\n"));
    s.execute_line("link set dev pe type bridge learn_inner_vid off", TEXT)
        .unwrap();
    assert!(!run(&mut s, "link show dev pe", TEXT).contains("learn_inner_vid"));
    let err = s
        .execute_line("link set dev pe type bridge learn_inner_vid maybe", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid learn_inner_vid \"maybe\" (expected on or off)"
    );
}

#[test]
fn fdb_entries_per_inner_vlan() {
    let mut s = Session::new();
    s.execute_batch(
        "link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad learn_inner_vid on\n\
         link add p1 type pcap\nlink set dev p1 master pe\nvlan add vid 100 dev p1\n\
         fdb add 02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 10 static\n",
        TEXT,
    )
    .unwrap();
    assert_eq!(
        run(&mut s, "fdb show dev p1 vlan 100", TEXT),
        "02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 10 master pe static\n"
    );
    assert!(run(&mut s, "fdb show dev p1", JSON).contains("\"vlan\":100,\"inner_vlan\":10,"));
    assert!(s
        .running_config()
        .contains("fdb add 02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 10 static\n"));
    let err = |s: &mut Session, l: &str| s.execute_line(l, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "fdb add 02:00:00:00:00:06 dev p1 inner_vlan 10"),
        "missing \"vlan V\" (1-4094) with \"inner_vlan\""
    );
    assert_eq!(
        err(
            &mut s,
            "fdb add 02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 10 static"
        ),
        "FDB entry 02:00:00:00:00:05 vlan 100 inner_vlan 10 exists on device \"p1\""
    );
    assert_eq!(
        err(
            &mut s,
            "fdb del 02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 11"
        ),
        "FDB entry 02:00:00:00:00:05 vlan 100 inner_vlan 11 does not exist on device \"p1\""
    );
    s.execute_line(
        "fdb del 02:00:00:00:00:05 dev p1 vlan 100 inner_vlan 10",
        TEXT,
    )
    .unwrap();
    assert_eq!(run(&mut s, "fdb show dev p1 vlan 100", TEXT), "");
}

/// `fdb add … extern_learn` (Linux `NTF_EXT_LEARNED`): shown as bridge(8) shows it (the flag
/// before `master`, no state word: a dynamic entry; JSON flag), never aged, its kind and
/// `sticky` words ignored as the kernel ignores them, saved in the running configuration.
#[test]
fn fdb_extern_learn_shows_and_saves() {
    let mut s = session();
    run(
        &mut s,
        "fdb add 02:00:00:00:00:0e dev p1 vlan 10 extern_learn",
        TEXT,
    );
    run(
        &mut s,
        "fdb add 02:00:00:00:00:0f dev p1 vlan 10 static sticky ext",
        TEXT,
    );
    assert_eq!(
        run(&mut s, "fdb show dev p1", TEXT),
        "\
02:00:00:00:00:01 dev p1 vlan 10 master br0 static
02:00:00:00:00:0e dev p1 vlan 10 extern_learn master br0
02:00:00:00:00:0f dev p1 vlan 10 extern_learn master br0
"
    );
    assert_eq!(
        run(&mut s, "fdb show dev p1 vlan 10", JSON)
            .lines()
            .next()
            .unwrap(),
        r#"[{"mac":"02:00:00:00:00:01","ifname":"p1","vlan":10,"flags":[],"master":"br0","state":"static"},{"mac":"02:00:00:00:00:0e","ifname":"p1","vlan":10,"flags":["extern_learn"],"master":"br0","state":""},{"mac":"02:00:00:00:00:0f","ifname":"p1","vlan":10,"flags":["extern_learn"],"master":"br0","state":""}]"#
    );
    // `add` of an existing key replaces it (as Linux): moved to p2.
    run(
        &mut s,
        "fdb add 02:00:00:00:00:0e dev p2 vlan 10 extern_learn",
        TEXT,
    );
    // Never aged.
    s.switch_mut().age(1_000_000 * 1_000_000_000);
    assert_eq!(
        run(&mut s, "fdb show vlan 10", TEXT)
            .lines()
            .filter(|l| l.contains("extern_learn"))
            .collect::<Vec<_>>(),
        [
            "02:00:00:00:00:0f dev p1 vlan 10 extern_learn master br0",
            "02:00:00:00:00:0e dev p2 vlan 10 extern_learn master br0"
        ]
    );
    let saved = s.running_config();
    assert!(
        saved.contains("fdb add 02:00:00:00:00:0e dev p2 vlan 10 extern_learn\n"),
        "{saved}"
    );
    // `fdb flush … [no]extern_learn` selects by the flag.
    run(&mut s, "fdb flush dev br0 noextern_learn", TEXT);
    assert_eq!(run(&mut s, "fdb show", TEXT).lines().count(), 3);
    run(&mut s, "fdb flush dev br0 extern_learn", TEXT);
    assert_eq!(
        run(&mut s, "fdb show", TEXT),
        "02:00:00:00:00:03 dev p2 vlan 12 master br0 permanent\n"
    );
    // Not a group address.
    let e = s
        .execute_line(
            "fdb add 01:00:5e:00:00:01 dev p1 vlan 10 extern_learn",
            TEXT,
        )
        .unwrap_err();
    assert!(e.to_string().contains("01:00:5e:00:00:01"), "{e}");
}

const BRIEF: OutputOptions = OutputOptions {
    brief: true,
    ..TEXT
};

#[test]
fn brief_link_and_vlan_show() {
    let mut s = session();
    run(&mut s, "link set dev br0 up ifname br0", TEXT);
    run(&mut s, "link add link p1 name p1.20 type vlan id 20", TEXT);
    run(&mut s, "link add p4 type pcap", TEXT);
    let p1 = s.switch().port_id("p1").unwrap();
    s.switch_mut().set_link_state(p1, false);
    // p1: set up, no carrier; p3: set down; br0: its host port, in VLAN 1 (the default).
    assert_eq!(
        run(&mut s, "link show", BRIEF),
        "\
br0              UP                              pvid 1 untagged 1
p1               LOWERLAYERDOWN br0              pvid 10 untagged 10
p2               UP             br0              tagged 10-12
p3               DOWN           br0              pvid 1 untagged 1
p1.20@p1         UP
p4               UP
"
    );
    assert_eq!(
        run(&mut s, "link show dev p2", BRIEF),
        "p2               UP             br0              tagged 10-12\n"
    );
    run(&mut s, "vlan add vid 30 dev p2 untagged", TEXT);
    run(&mut s, "vlan add vid 14 dev p2", TEXT);
    assert_eq!(
        run(&mut s, "vlan show", BRIEF),
        "\
p1               pvid 10 untagged 10
p2               untagged 30 tagged 10-12,14
p3               pvid 1 untagged 1
br0              pvid 1 untagged 1
"
    );
    assert_eq!(
        run(&mut s, "vlan show vid 30", BRIEF),
        "p2               untagged 30 tagged 10-12,14\n"
    );
    assert_eq!(
        run(&mut s, "link show dev p1", OutputOptions { json: true, ..BRIEF }),
        r#"[{"ifname":"p1","operstate":"LOWERLAYERDOWN","master":"br0","vlans":[{"vlan":10,"flags":["PVID","Egress Untagged"]}]}]"#
            .to_string()
            + "\n"
    );
    assert_eq!(
        run(
            &mut s,
            "link show dev p1.20",
            OutputOptions {
                json: true,
                ..BRIEF
            }
        ),
        "[{\"ifname\":\"p1.20\",\"link\":\"p1\",\"operstate\":\"UP\"}]\n"
    );
    assert_eq!(
        run(&mut s, "vlan show dev p2", OutputOptions { json: true, ..BRIEF }),
        r#"[{"ifname":"p2","vlans":[{"vlan":10,"vlanEnd":12},{"vlan":14},{"vlan":30,"flags":["Egress Untagged"]}]}]"#
            .to_string()
            + "\n"
    );
    // Commands without a brief form print as they do without -br (as ip does).
    assert_eq!(
        run(&mut s, "fdb show dev p1", BRIEF),
        run(&mut s, "fdb show dev p1", TEXT)
    );
}
