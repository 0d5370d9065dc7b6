//! `show running-config` recreates the configuration; `apply` re-applies a batch as a no-op;
//! a host interface is a port once.

use proptest::prelude::*;
use qbridge_control::{OutputOptions, Session};

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

/// The three views a restored switch must reproduce exactly.
fn views(s: &mut Session) -> [String; 3] {
    ["link show", "vlan show", "fdb show"].map(|c| s.execute_line(c, JSON).expect(c))
}

/// Feeds `s`'s running configuration to a fresh session and checks the views match and that
/// the restored session saves the same text (a fixpoint).
fn assert_round_trip(s: &mut Session) {
    let text = s.running_config();
    let mut fresh = Session::new();
    fresh
        .execute_batch(&text, TEXT)
        .unwrap_or_else(|e| panic!("{e}\n--- running-config ---\n{text}"));
    let (a, b) = (views(s), views(&mut fresh));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "\n--- running-config ---\n{text}");
    }
    assert_eq!(fresh.running_config(), text);
}

const RICH: &str = "\
link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad ageing_time 1.5 group_fwd_mask 0x4000
link add br1 type bridge vlan_default_pvid 0 fdb_max_learned 100 learn_inner_vid on
link add p0 type pcap
link add p1 type afpacket dev veth1 ring_frames 256 qdisc_bypass off
link add p2 type tap ifname tapx netns ns1
link add x1 type afxdp dev veth9 queues 2 mode skb
link del dev p0
link add link p1 name p1.10 type vlan protocol 802.1Q id 10
link add link p1.10 name p1.10.20 type vlan protocol 0x9100 id 20 address 02:00:00:00:10:20
link add pa type patch peer pb
link set dev p1 master br0 learning off
link set dev p2 master br0 hairpin on mtu 9000 envhdr len 8 tpid 0x9100
link set dev pa master br1 down isolated on
link set dev p1.10.20 master br1
vlan add vid 10-20 dev p1
vlan add vid 30 dev p1 pvid untagged
vlan del vid 1 dev p2
vlan add vid 100 dev p2 untagged
vlan add vid 200-300 dev p2
vlan del vid 250 dev p2
link set dev br0 up address 02:00:00:00:00:01 mtu 1400
vlan add vid 10 dev br0 self
link add link br0 name br0.10 type vlan id 10
link add m1 type tap
link del dev x1
link add link m1 name mv1 type macvlan mode bridge
fdb add 02:00:00:00:00:aa dev p1 vlan 10 static sticky
fdb add 02:00:00:00:00:bb dev p2 static
fdb del 02:00:00:00:00:bb dev p2 vlan 100
fdb add 02:00:00:00:00:cc dev pa dynamic
fdb add 02:00:00:00:00:dd dev br0 vlan 10 permanent
fdb add 02:00:00:00:00:ee dev p1 vlan 10 extern_learn
fdb add 02:00:00:00:00:ef dev p1 static extern_learn
";

#[test]
fn running_config_recreates_a_rich_configuration() {
    let mut s = Session::new();
    s.execute_batch(RICH, TEXT).unwrap();
    assert_round_trip(&mut s);
    let text = s.running_config();
    // Slots were reused (p0 and x1 deleted): ids are kept with `index`.
    assert!(
        text.contains(
            "link add link p1 name p1.10 index 0 type vlan protocol 802.1Q id 10 address "
        ),
        "{text}"
    );
    assert!(
        text.contains("link add pa index 5 type patch peer pb index 6\n"),
        "{text}"
    );
    // The VLAN-0 entry alone survives the deletion of its VLAN-100 twin.
    assert!(
        text.contains("fdb add 02:00:00:00:00:bb dev p2 vlan 0 static\n"),
        "{text}"
    );
    assert!(
        !text.contains("02:00:00:00:00:bb dev p2 vlan 100 "),
        "{text}"
    );
    // Learned entries and a host port's own address are not configuration.
    assert!(!text.contains("fdb add 02:00:00:00:00:01 "), "{text}");
    assert!(text.contains("vlan add vid 200-249 dev p2\nvlan add vid 251-300 dev p2\n"));
}

#[test]
fn running_config_is_a_command() {
    let mut s = Session::new();
    s.execute_batch("link add br0 type bridge\nlink add p1 type pcap\n", TEXT)
        .unwrap();
    let out = s.execute_line("show running-config", TEXT).unwrap();
    assert_eq!(
        out.lines().skip(1).collect::<Vec<_>>(),
        [
            "link add br0 type bridge vlan_filtering 0 vlan_protocol 802.1Q vlan_default_pvid 1 \
             ageing_time 300 fdb_max_learned 0 group_fwd_mask 0 fdb_max_entries 2097152",
            "link add p1 index 0 type pcap",
            "link set dev p1 up learning on flood on mcast_flood on bcast_flood on isolated off \
             hairpin off mtu 1500 envhdr len auto tpid default fdb_max_learned 0 pcp_mode keep \
             default_pcp 0 locked off mab off",
        ]
    );
    assert!(out.starts_with("# qbridge "));
    let e = s
        .execute_line("show running", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "unexpected \"running\" (expected running-config or fast-path)"
    );
}

#[test]
fn apply_twice_is_a_no_op() {
    let mut s = Session::new();
    s.apply_batch(RICH, TEXT).unwrap();
    let before = s.running_config();
    let views_before = views(&mut s);
    s.apply_batch(RICH, TEXT)
        .unwrap_or_else(|e| panic!("second apply: {e}"));
    assert_eq!(s.running_config(), before);
    assert_eq!(views(&mut s), views_before);
    // And the running configuration itself applies over itself.
    s.apply_batch(&before, TEXT).unwrap();
    assert_eq!(s.running_config(), before);
    // A plain batch is iproute2-strict: the same file again is an error.
    let e = s.execute_batch(RICH, TEXT).unwrap_err().to_string();
    assert_eq!(e, "line 1: device \"br0\" already exists");
}

#[test]
fn apply_names_what_differs() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge\nlink add p1 type afpacket dev eth1\n",
        TEXT,
    )
    .unwrap();
    let e = s
        .apply_batch("link add p1 type afpacket dev eth2\n", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 1: \"p1\" exists as an afpacket port on eth1, not an afpacket port on eth2: \
         delete it first (link del dev p1)"
    );
    // Same kind and device, another option: the message names the option (it said "an
    // afpacket port on eth1, not an afpacket port on eth1").
    let e = s
        .apply_batch(
            "link add p1 type afpacket dev eth1 qdisc_bypass off\n",
            TEXT,
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 1: \"p1\" exists as an afpacket port on eth1 with qdisc_bypass on, not \
         qdisc_bypass off: delete it first (link del dev p1)"
    );
    let e = s
        .apply_batch(
            "link add p1 type afpacket dev eth1 qdisc_bypass off ring_frames 512\n",
            TEXT,
        )
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 1: \"p1\" exists as an afpacket port on eth1 with qdisc_bypass on, ring_frames \
         (default), not qdisc_bypass off, ring_frames 512: delete it first (link del dev p1)"
    );
    let e = s
        .apply_batch("link add br0 type pcap\n", TEXT)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 1: \"br0\" exists as a bridge, not a pcap port: delete it first (link del dev br0)"
    );
    // A bridge that exists takes the options given; what is absent is not an error to delete.
    s.apply_batch(
        "link add br0 type bridge vlan_filtering 1\nlink del dev nothere\n",
        TEXT,
    )
    .unwrap();
    assert!(s
        .running_config()
        .contains("link add br0 type bridge vlan_filtering 1 "));
}

#[test]
fn a_host_interface_is_a_port_once() {
    let mut s = Session::new();
    s.execute_batch(
        "link add p1 type afpacket dev eth1\nlink add t1 type tap ifname vm1 netns blue\n\
         link add br0 type bridge\n",
        TEXT,
    )
    .unwrap();
    let err = |s: &mut Session, line: &str| s.execute_line(line, TEXT).unwrap_err().to_string();
    assert_eq!(
        err(&mut s, "link add p2 type afpacket dev eth1"),
        "interface \"eth1\" is already used by port \"p1\" (a device can be a port once)"
    );
    assert_eq!(
        err(&mut s, "link add x2 type afxdp dev eth1"),
        "interface \"eth1\" is already used by port \"p1\" (a device can be a port once)"
    );
    assert_eq!(
        err(&mut s, "link add t2 type tap ifname vm1 netns blue"),
        "interface \"vm1\" in netns blue is already used by port \"t1\" (a device can be a port once)"
    );
    // The same TAP name in another namespace is another interface.
    s.execute_line("link add t3 type tap ifname vm1", TEXT)
        .unwrap();
    // A VLAN device's TAP is named after it.
    assert_eq!(
        err(&mut s, "link add link p1 name vm1 type vlan id 5"),
        "interface \"vm1\" is already used by port \"t3\" (a device can be a port once)"
    );
    assert_eq!(
        err(&mut s, "link set dev br0 up ifname eth1"),
        "interface \"eth1\" is already used by port \"p1\" (a device can be a port once)"
    );
    // Patch peers are names in the switch, checked as such.
    s.execute_line("link add pa type patch peer pb", TEXT)
        .unwrap();
    assert_eq!(
        err(&mut s, "link add pc type patch peer pb"),
        "device \"pb\" already exists"
    );
    // `index` takes a free id or says who holds it.
    assert_eq!(
        err(&mut s, "link add p9 index 0 type pcap"),
        "index 0 is taken by \"p1\""
    );
    assert_eq!(
        err(&mut s, "link add p9 index 4096 type pcap"),
        "index 4096 is out of range (0-4095)"
    );
    s.execute_line("link add p9 index 100 type pcap", TEXT)
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&s.execute_line("link show p9", JSON).unwrap()).unwrap();
    assert_eq!(j[0]["port"]["id"], 100);
}

/// One random command of a small vocabulary over few names, so that commands meet each other
/// (most fail; the ones that apply build odd configurations, slot reuse included).
fn command() -> impl Strategy<Value = String> {
    let port = prop::sample::select(vec!["p1", "p2", "p3", "v1", "v2", "m1", "pa", "pb"]);
    let bridge = prop::sample::select(vec!["br0", "br1"]);
    let dev = prop::sample::select(vec!["p1", "p2", "p3", "v1", "v2", "m1", "pa", "br0", "br1"]);
    let mac = (1u8..6).prop_map(|m| format!("02:00:00:00:00:{m:02x}"));
    let vid = 1u16..8;
    prop_oneof![
        (bridge.clone(), any::<bool>(), 0u16..3, any::<bool>()).prop_map(|(b, f, pvid, ad)| {
            format!(
                "link add {b} type bridge vlan_filtering {} vlan_default_pvid {pvid} vlan_protocol {}",
                u8::from(f),
                if ad { "802.1ad" } else { "802.1Q" }
            )
        }),
        port.clone().prop_map(|p| format!("link add {p} type pcap")),
        (bridge.clone(), any::<bool>()).prop_map(|(b, on)| format!(
            "link set dev {b} type bridge learn_inner_vid {}",
            if on { "on" } else { "off" }
        )),
        (mac.clone(), port.clone(), vid.clone(), vid.clone())
            .prop_map(|(m, p, v, c)| format!("fdb add {m} dev {p} vlan {v} inner_vlan {c} static")),
        (port.clone(), port.clone()).prop_map(|(p, l)| format!("link add link {l} name {p} type vlan id 5")),
        (port.clone(), dev.clone()).prop_map(|(p, l)| format!("link add link {l} name {p} type macvlan mode vepa")),
        Just("link add pa type patch peer pb".to_string()),
        dev.clone().prop_map(|p| format!("link del dev {p}")),
        (port.clone(), bridge.clone()).prop_map(|(p, b)| format!("link set dev {p} master {b}")),
        (port.clone(), any::<bool>(), 1000u32..1600).prop_map(|(p, l, mtu)| format!(
            "link set dev {p} learning {} mtu {mtu}",
            if l { "on" } else { "off" }
        )),
        (port.clone(), prop::sample::select(vec!["keep", "copy", "fixed 5", "map 0:1,5:5,7:0"]), 0u8..8)
            .prop_map(|(p, m, d)| format!("link set dev {p} pcp_mode {m} default_pcp {d}")),
        (port.clone(), vid.clone(), prop::sample::select(vec![
            "isolated", "promiscuous", "community 2", "community 3", "none",
        ]))
            .prop_map(|(p, v, r)| format!("vlan set vid {v}-{} dev {p} pvlan {r}", v + 1)),
        (port.clone(), vid.clone(), vid.clone())
            .prop_map(|(p, a, b)| format!("vlan map add dev {p} vid {a} translate {}", b + 10)),
        (port.clone(), vid.clone(), vid.clone())
            .prop_map(|(p, c, s)| format!("vlan map add dev {p} cvid {c}-{} svid {s}", c + 1)),
        (port.clone(), vid.clone(), vid.clone(), vid.clone(), prop::option::of(vid.clone()))
            .prop_map(|(p, s, c, v, c2)| format!(
                "vlan map add dev {p} svid {s} cvid {c} translate {v}{}",
                c2.map(|c| format!(" {c}")).unwrap_or_default()
            )),
        (port.clone(), vid.clone(), 0u32..4, prop::sample::select(vec!["protect", "restrict", "shutdown"]))
            .prop_map(|(p, v, n, m)| format!("vlan set vid {v} dev {p} fdb_max_learned {n} violation {m}")),
        (port.clone(), any::<bool>(), any::<bool>()).prop_map(|(p, l, m)| format!(
            "link set dev {p} locked {} mab {}",
            if l { "on" } else { "off" },
            if m { "on" } else { "off" }
        )),
        (port.clone(), prop::sample::select(vec![
            "access tag 3",
            "trunk trunks 2-5",
            "native-untagged tag 2 trunks 4,6",
            "native-tagged tag 7",
            "dot1q-tunnel tag 4 cvlans 0,2-3",
            "dot1q-tunnel tag 5",
        ]))
            .prop_map(|(p, m)| format!("link set dev {p} vlan_mode {m}")),
        bridge.clone().prop_map(|b| format!("link set dev {b} up")),
        (port.clone(), vid.clone(), vid.clone(), any::<bool>(), any::<bool>()).prop_map(
            |(p, a, z, pvid, u)| {
                let (a, z) = (a.min(z), a.max(z));
                let pv = if pvid && a == z { " pvid" } else { "" };
                let un = if u { " untagged" } else { "" };
                format!("vlan add vid {a}-{z} dev {p}{pv}{un}")
            }
        ),
        (port.clone(), vid.clone()).prop_map(|(p, v)| format!("vlan del vid {v} dev {p}")),
        (bridge.clone(), vid.clone()).prop_map(|(b, v)| format!("vlan add vid {v} dev {b} self")),
        (mac.clone(), port.clone(), prop::option::of(vid.clone()), 0u8..3, any::<bool>()).prop_map(
            |(m, p, v, k, sticky)| {
                let v = v.map(|v| format!(" vlan {v}")).unwrap_or_default();
                let k = ["static", "dynamic", "permanent"][k as usize];
                let st = if sticky { " sticky" } else { "" };
                format!("fdb add {m} dev {p}{v} {k}{st}")
            }
        ),
        (mac.clone(), port.clone(), prop::option::of(vid.clone())).prop_map(|(m, p, v)| {
            let v = v.map(|v| format!(" vlan {v}")).unwrap_or_default();
            format!("fdb add {m} dev {p}{v} extern_learn")
        }),
        (mac, port, vid).prop_map(|(m, p, v)| format!("fdb del {m} dev {p} vlan {v}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a sequence of commands built, its running configuration rebuilds it exactly,
    /// and applying that configuration over the switch changes nothing.
    #[test]
    fn any_configuration_round_trips(cmds in prop::collection::vec(command(), 1..40)) {
        let mut s = Session::new();
        for c in &cmds {
            let _ = s.execute_line(c, TEXT);
        }
        assert_round_trip(&mut s);
        let text = s.running_config();
        s.apply_batch(&text, TEXT).unwrap_or_else(|e| panic!("{e}\n{text}"));
        prop_assert_eq!(s.running_config(), text);
    }
}
