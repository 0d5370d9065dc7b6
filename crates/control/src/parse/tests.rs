//! The grammar's unit tests: each command's words, abbreviations, and the error messages.

use super::*;

fn p(s: &str) -> Result<Command, ControlError> {
    parse_line(s).map(|c| c.expect("a command"))
}

fn err(s: &str) -> String {
    p(s).unwrap_err().to_string()
}

#[test]
fn link_add_bridge_with_options() {
    let c = p(
        "link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad \
               vlan_default_pvid 0 ageing_time 1.5 group_fwd_mask 0x4000",
    )
    .unwrap();
    assert_eq!(
        c,
        Command::Link(LinkCommand::AddBridge {
            name: "br0".into(),
            opts: BridgeOptions {
                vlan_filtering: Some(true),
                vlan_protocol: Some(VlanProtocol::Dot1Ad),
                vlan_default_pvid: Some(0),
                ageing_time_ns: Some(1_500_000_000),
                group_fwd_mask: Some(0x4000),
                ..Default::default()
            }
        })
    );
}

#[test]
fn dev_may_be_omitted() {
    assert_eq!(
        p("link set p1 learning off").unwrap(),
        p("link set dev p1 learning off").unwrap()
    );
    assert_eq!(p("link del p1").unwrap(), p("link del dev p1").unwrap());
    assert_eq!(p("link show p1").unwrap(), p("link show dev p1").unwrap());
}

#[test]
fn port_options() {
    let c = p("link set dev p1 master br0 down hairpin on envhdr len auto tpid 0x9100 mtu 9000")
        .unwrap();
    let Command::Link(LinkCommand::SetPort { dev, opts }) = c else {
        panic!()
    };
    assert_eq!(dev, "p1");
    assert_eq!(opts.master, Some(MasterChange::Set("br0".into())));
    assert_eq!(opts.up, Some(false));
    assert_eq!(opts.hairpin, Some(true));
    assert_eq!(opts.envhdr_len, Some(None));
    assert_eq!(opts.tpid, Some(Some(Tpid(0x9100))));
    assert_eq!(opts.mtu, Some(9000));
}

#[test]
fn backends() {
    assert_eq!(
        p("link add p1 type afpacket dev eth0").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "p1".into(),
            spec: PortSpec::AfPacket {
                dev: "eth0".into(),
                qdisc_bypass: true,
                ring_frames: None
            },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        p("link add p1 type afpacket qdisc_bypass off dev eth0").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "p1".into(),
            spec: PortSpec::AfPacket {
                dev: "eth0".into(),
                qdisc_bypass: false,
                ring_frames: None
            },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        p("link add p2 type tap netns ns1").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "p2".into(),
            spec: PortSpec::Tap {
                ifname: None,
                netns: Some("ns1".into())
            },
            index: None,
            peer_index: None,
        })
    );
}

#[test]
fn stacked_devices() {
    let Command::Link(LinkCommand::AddPort { name, spec, .. }) =
        p("link add link eth0.100 name eth0.100.10 type vlan protocol 802.1Q id 10").unwrap()
    else {
        panic!("not a port")
    };
    assert_eq!(name, "eth0.100.10");
    assert_eq!(
        spec,
        PortSpec::Vlan {
            link: "eth0.100".into(),
            protocol: Tpid(0x8100),
            id: 10,
            netns: None,
            address: None,
        }
    );
    // ip-link(8) word orders: name before link, `name` omitted, 802.1ad, a raw TPID.
    for line in [
        "link add eth0.100 link eth0 type vlan protocol 802.1ad id 100",
        "link add link eth0 eth0.100 type vlan protocol 802.1ad id 100",
    ] {
        let Command::Link(LinkCommand::AddPort { name, spec, .. }) = p(line).unwrap() else {
            panic!("{line}")
        };
        assert_eq!(name, "eth0.100", "{line}");
        assert!(matches!(
            spec,
            PortSpec::Vlan {
                protocol: Tpid(0x88a8),
                id: 100,
                ..
            }
        ));
    }
    let Command::Link(LinkCommand::AddPort { spec, .. }) =
        p("link add link eth0 name x type vlan protocol 0x9100 id 7 netns h1 address 02:00:00:00:00:09")
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        spec,
        PortSpec::Vlan {
            link: "eth0".into(),
            protocol: Tpid(0x9100),
            id: 7,
            netns: Some("h1".into()),
            address: Some("02:00:00:00:00:09".parse().unwrap()),
        }
    );
    let Command::Link(LinkCommand::AddPort { spec, .. }) =
        p("link add link eth0 name mv1 type macvlan mode vepa").unwrap()
    else {
        panic!()
    };
    assert!(matches!(
        spec,
        PortSpec::Macvlan {
            mode: MacvlanMode::Vepa,
            ..
        }
    ));
    assert_eq!(
        err("link add link eth0 name x type vlan"),
        "missing \"id VID\" for type vlan"
    );
    assert_eq!(
        err("link add link eth0 name x type macvlan mode hub"),
        "invalid macvlan mode \"hub\" (expected private, vepa, bridge or passthru)"
    );
    assert_eq!(
        err("link add link eth0 name x type vlan id 10 mode vepa"),
        "unexpected \"mode\" (expected protocol, id, netns or address)"
    );
    assert_eq!(
        err("link add x type vlan id 10"),
        "missing \"link LOWER\" (the device to stack on) before the name"
    );
    assert_eq!(
        err("link add link eth0 name x type tap"),
        "invalid link type with \"link LOWER\" \"tap\" (expected vlan or macvlan)"
    );
    assert_eq!(
        err("link add link eth0 name x type vlan protocol default id 3"),
        "invalid protocol \"default\" (expected 802.1Q, 802.1ad or 0xHHHH)"
    );
    let Command::Link(LinkCommand::SetPort { dev, opts }) =
        p("link set dev br0 up ifname br0h netns h1").unwrap()
    else {
        panic!()
    };
    assert_eq!(dev, "br0");
    assert_eq!(opts.up, Some(true));
    assert_eq!(opts.ifname.as_deref(), Some("br0h"));
    assert_eq!(opts.netns.as_deref(), Some("h1"));
}

#[test]
fn vlan_and_fdb() {
    assert_eq!(
        p("vlan add dev p1 vid 10-20 untagged").unwrap(),
        Command::Vlan(VlanCommand::Add {
            dev: "p1".into(),
            vids: VidRange { start: 10, end: 20 },
            pvid: false,
            untagged: true,
            self_: false,
        })
    );
    assert_eq!(
        p("vlan add vid 10 dev br0 self pvid").unwrap(),
        Command::Vlan(VlanCommand::Add {
            dev: "br0".into(),
            vids: VidRange { start: 10, end: 10 },
            pvid: true,
            untagged: false,
            self_: true,
        })
    );
    let Command::Fdb(FdbCommand::Add {
        kind,
        sticky,
        replace,
        vlan,
        ..
    }) = p("fdb add 02:00:00:00:00:01 dev p1 vlan 10 sticky").unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (kind, sticky, replace, vlan),
        (FdbKind::Permanent, true, false, Some(10))
    );
}

#[test]
fn comments_and_blank_lines() {
    assert_eq!(parse_line("   # nothing").unwrap(), None);
    assert_eq!(parse_line("").unwrap(), None);
    assert!(parse_line("link show # all").unwrap().is_some());
}

#[test]
fn ageing_time_forms() {
    assert_eq!(parse_ageing_time("300").unwrap(), 300_000_000_000);
    assert_eq!(parse_ageing_time("0").unwrap(), 0);
    assert_eq!(parse_ageing_time("1.000000001").unwrap(), 1_000_000_001);
    assert!(parse_ageing_time("0.5").is_err());
    assert!(parse_ageing_time("1.").is_err());
    assert!(parse_ageing_time("-1").is_err());
    assert!(parse_ageing_time("1000001").is_err());
}

#[test]
fn error_messages_name_the_word() {
    assert_eq!(err("vlan add vid 4095 dev p1"), "vid 4095 is reserved");
    assert_eq!(
        err("vlan add vid 0 dev p1"),
        "vid 0 is out of range (1-4094)"
    );
    assert_eq!(
        err("route show"),
        "unknown object \"route\" (expected link, vlan, fdb, mirror, stp or vni)"
    );
    // "learnin" abbreviates learning now (iproute2's matches()); a word that is no
    // keyword still lists them.
    assert_eq!(
        err("link set dev p1 frob off"),
        "unexpected \"frob\" (expected master, nomaster, up, down, learning, flood, \
         mcast_flood, bcast_flood, isolated, hairpin, mtu, envhdr, tpid, fdb_max_learned, \
         ifname, netns, address, index, vlan_mode, tag, trunks, cvlans, pcp_mode, \
         default_pcp, locked, mab, cost, priority, guard, root_block, bpdu_filter, loop_guard, \
         edge, auto_edge or p2p)"
    );
    assert_eq!(
        err("link set dev p1 flood maybe"),
        "invalid flood \"maybe\" (expected on or off)"
    );
    assert_eq!(
        err("link set dev p1 mtu"),
        "\"mtu\" needs a value (a number of bytes)"
    );
    assert_eq!(err("vlan add vid 10"), "missing \"dev NAME\"");
    assert_eq!(
        err("link add p1 type afpacket dev eth0 qdisc_bypass maybe"),
        "invalid qdisc_bypass \"maybe\" (expected on or off)"
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 qdisc_bypass"),
        "\"qdisc_bypass\" needs a value (on or off)"
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 qdisc_bypass on qdisc_bypass off"),
        "\"qdisc_bypass\" given twice"
    );
    assert_eq!(
        p("link add p1 type afpacket dev eth0 ring_frames 4096").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "p1".into(),
            spec: PortSpec::AfPacket {
                dev: "eth0".into(),
                qdisc_bypass: true,
                ring_frames: Some(4096)
            },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 ring_frames 10"),
        "ring_frames 10 is out of range (64-1048576 frames)"
    );
    assert_eq!(
        p("link add x1 type afxdp dev eth0 queues 2 mode skb zerocopy off").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "x1".into(),
            spec: PortSpec::AfXdp {
                dev: "eth0".into(),
                queues: 2,
                mode: XdpAttach::Skb,
                zerocopy: false
            },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        p("link add x1 type afxdp dev eth0").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "x1".into(),
            spec: PortSpec::AfXdp {
                dev: "eth0".into(),
                queues: 1,
                mode: XdpAttach::Native,
                zerocopy: false
            },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        err("link add x1 type afxdp dev eth0 queues 0"),
        "queues 0 is out of range (1-64)"
    );
    assert_eq!(
        err("link add x1 type afxdp dev eth0 mode fast"),
        "invalid mode \"fast\" (expected native or skb)"
    );
    assert_eq!(
        err("link add x1 type afxdp queues 2"),
        "missing \"dev IFNAME\" for type afxdp"
    );
    assert_eq!(
        p("link add pa type patch peer name pb").unwrap(),
        Command::Link(LinkCommand::AddPort {
            name: "pa".into(),
            spec: PortSpec::Patch { peer: "pb".into() },
            index: None,
            peer_index: None,
        })
    );
    assert_eq!(
        err("link add pa type patch"),
        "missing \"peer NAME\" for type patch"
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 bypass off"),
        "unexpected \"bypass\" (expected dev, qdisc_bypass or ring_frames)"
    );
    assert_eq!(
        err("link add x type veth"),
        "invalid link type \"veth\" (expected bridge, bond, pcap, afpacket, afxdp, tap, patch, vlan, macvlan or vxlan)"
    );
    assert_eq!(
        err("fdb add 02:00:00:00:00:0g dev p1"),
        "invalid MAC address \"02:00:00:00:00:0g\" (expected six hex bytes like 02:00:00:00:00:01)"
    );
    assert_eq!(err("link set p1 up down"), "\"up/down\" given twice");
    assert_eq!(
        err("link add br0 type bridge ageing_time 2000000"),
        "ageing_time 2000000 is out of range (0 or 1-1000000 seconds)"
    );
    assert_eq!(
        err("fdb"),
        "missing command after \"fdb\" (expected add, append, replace, del, show, flush or help)"
    );
}

#[test]
fn abbreviations_as_iproute2() {
    // Objects and commands: ip/ip.c, bridge/bridge.c, do_iplink, do_vlan, do_fdb.
    assert_eq!(p("l sh p1").unwrap(), p("link show dev p1").unwrap());
    assert_eq!(p("l ls").unwrap(), p("link show").unwrap());
    assert_eq!(
        p("l s p1 le off").unwrap(),
        p("link set dev p1 learning off").unwrap()
    );
    assert_eq!(p("l d p1").unwrap(), p("link del dev p1").unwrap());
    assert_eq!(p("v s").unwrap(), p("vlan show").unwrap());
    assert_eq!(
        p("v a vid 10 dev p1").unwrap(),
        p("vlan add vid 10 dev p1").unwrap()
    );
    assert_eq!(p("f s").unwrap(), p("fdb show").unwrap());
    assert_eq!(
        p("f r 02:00:00:00:00:01 dev p1 st sti").unwrap(),
        p("fdb replace 02:00:00:00:00:01 dev p1 static sticky").unwrap()
    );
    // Keywords by matches(): link add, type bridge options, bridge_slave options.
    assert_eq!(
        p("link add br0 ty bridge v 1 vlan_p 802.1ad vlan_d 0 a 10 g 0x4000").unwrap(),
        p(
            "link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad \
           vlan_default_pvid 0 ageing_time 10 group_fwd_mask 0x4000"
        )
        .unwrap()
    );
    assert_eq!(
        p("link set p1 ma br0 fl off mc off b off i on h on").unwrap(),
        p(
            "link set p1 master br0 flood off mcast_flood off bcast_flood off isolated on \
           hairpin on"
        )
        .unwrap()
    );
    assert_eq!(
        p("link set br0 ty bridge vlan_f 0").unwrap(),
        p("link set dev br0 type bridge vlan_filtering 0").unwrap()
    );
    assert_eq!(
        // `t` is txqueuelen in iproute2, so `type` needs `ty`.
        p("link add l eth0 name eth0.5 t vlan p 802.1ad i 5")
            .unwrap_err()
            .to_string(),
        "unexpected \"t\" (expected type)"
    );
    assert_eq!(
        p("link add l eth0 eth0.5 ty vlan p 802.1ad i 5").unwrap(),
        p("link add link eth0 name eth0.5 type vlan protocol 802.1ad id 5").unwrap()
    );
    // strcmp words are whole words only: fdb flush, mtu, vlan add's keywords.
    assert_eq!(
        err("fdb fl dev br0"),
        "unknown command \"fl\" for fdb (expected add, append, replace, del, show, flush or help)"
    );
    assert_eq!(
        err("link set p1 mt 9000"),
        "unexpected \"mt\" (did you mean \"mtu\"?)"
    );
    assert_eq!(
        err("vlan add vi 10 dev p1"),
        "unexpected \"vi\" (did you mean \"vid\"?)"
    );
    // Two chains with no order between them: an error naming both.
    assert_eq!(
        err("link set p1 m br0"),
        "ambiguous \"m\" (could be master or mcast_flood)"
    );
    // Not a prefix, or longer than the word.
    assert_eq!(
        err("link showx"),
        "unknown command \"showx\" for link (did you mean \"show\"?)"
    );
}

#[test]
fn did_you_mean() {
    assert_eq!(
        err("link shwo"),
        "unknown command \"shwo\" for link (did you mean \"show\"?)"
    );
    assert_eq!(
        err("lnik show"),
        "unknown object \"lnik\" (did you mean \"link\"?)"
    );
    assert_eq!(
        err("link add br0 type bridge vlan_filtring 1"),
        "unexpected \"vlan_filtring\" (did you mean \"vlan_filtering\"?)"
    );
    assert_eq!(
        err("fdb flush dev br0 dynamc"),
        "unexpected \"dynamc\" (did you mean \"dynamic\"?)"
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 qdisc_bypas on"),
        "unexpected \"qdisc_bypas\" (did you mean \"qdisc_bypass\"?)"
    );
}

#[test]
fn help_words() {
    assert_eq!(p("help").unwrap(), Command::Help(None));
    assert_eq!(p("h").unwrap(), Command::Help(None));
    assert_eq!(p("help vlan").unwrap(), Command::Help(Some(Object::Vlan)));
    assert_eq!(p("link help").unwrap(), Command::Help(Some(Object::Link)));
    assert_eq!(p("vlan he").unwrap(), Command::Help(Some(Object::Vlan)));
    assert_eq!(p("fdb help").unwrap(), Command::Help(Some(Object::Fdb)));
    assert_eq!(
        err("fdb help me"),
        "unexpected \"me\" (expected nothing after \"help\")"
    );
}

#[test]
fn numbers_are_reported_as_typed() {
    assert_eq!(
        err("vlan add vid 99999999999999999999 dev p1"),
        "vid 99999999999999999999 is out of range (1-4094)"
    );
    assert_eq!(
        err("vlan add vid 4294967296 dev p1"),
        "vid 4294967296 is out of range (1-4094)"
    );
    assert_eq!(
        err("vlan add vid 5000 dev p1"),
        "vid 5000 is out of range (1-4094)"
    );
    assert_eq!(
        err("vlan add vid -1 dev p1"),
        "invalid vid \"-1\" (expected V or V-V2, numbers from 1 to 4094)"
    );
    assert_eq!(
        err("vlan add vid 10- dev p1"),
        "invalid vid \"10-\" (expected V or V-V2, numbers from 1 to 4094)"
    );
    assert_eq!(
        err("vlan add vid 1-2-3 dev p1"),
        "invalid vid \"1-2-3\" (expected V or V-V2, numbers from 1 to 4094)"
    );
    assert_eq!(
        err("vlan add vid 10-99999999999 dev p1"),
        "vid 99999999999 is out of range (1-4094)"
    );
    assert_eq!(
        err("fdb show vlan 99999999999999999999"),
        "vid 99999999999999999999 is out of range (1-4094)"
    );
    assert_eq!(
        err("link set p1 mtu 99999999999999999999"),
        "mtu 99999999999999999999 is out of range (68-65535)"
    );
    assert_eq!(
        err("link set p1 mtu 0x1ffffffff"),
        "mtu 0x1ffffffff is out of range (68-65535)"
    );
    assert_eq!(
        err("link set p1 envhdr len 4294967296"),
        "envhdr len 4294967296 is out of range (0-482)"
    );
    assert_eq!(
        err("link set p1 fdb_max_learned 4294967296"),
        "fdb_max_learned 4294967296 is out of range (0-4294967295)"
    );
    assert_eq!(
        err("link set br0 type bridge fdb_max_entries 99999999999"),
        "fdb_max_entries 99999999999 is out of range (1-16777216)"
    );
    assert_eq!(
        err("link set br0 type bridge group_fwd_mask 0x10000"),
        "group_fwd_mask 0x10000 is out of range (0-0xffff)"
    );
    assert_eq!(
        err("link add p1 type afpacket dev eth0 ring_frames 99999999999999999999"),
        "ring_frames 99999999999999999999 is out of range (64-1048576 frames)"
    );
    assert_eq!(
        err("link add x1 type afxdp dev eth0 queues 65536"),
        "queues 65536 is out of range (1-64)"
    );
    assert_eq!(
        err("link add link eth0 name x type vlan id 99999999999"),
        "vid 99999999999 is out of range (1-4094)"
    );
    assert_eq!(
        err("link set p1 mtu -5"),
        "invalid mtu \"-5\" (expected a number, decimal or 0x hexadecimal)"
    );
    assert_eq!(
        err("link add br0 type bridge ageing_time 99999999999999999999"),
        "ageing_time 99999999999999999999 is out of range (0 or 1-1000000 seconds)"
    );
}

#[test]
fn vlan_show_vid_and_fdb_flush_words() {
    assert_eq!(
        p("vlan show dev p1 vid 10").unwrap(),
        Command::Vlan(VlanCommand::Show {
            dev: Some("p1".into()),
            vid: Some(10)
        })
    );
    let flush = |line: &str| match p(line).unwrap() {
        Command::Fdb(FdbCommand::Flush { which, .. }) => which,
        c => panic!("{c:?}"),
    };
    let kinds = |m: FdbFlushMatch| (m.dynamic, m.static_, m.permanent);
    assert_eq!(kinds(flush("fdb flush dev br0")), (true, true, false));
    assert_eq!(
        kinds(flush("fdb flush dev br0 permanent")),
        (false, false, true)
    );
    assert_eq!(
        kinds(flush("fdb flush dev br0 nostatic")),
        (true, false, true)
    );
    assert_eq!(
        kinds(flush("fdb flush dev br0 nodynamic nopermanent")),
        (false, true, false)
    );
    assert_eq!(
        kinds(flush("fdb flush dev br0 dynamic")),
        (true, false, false)
    );
    let m = flush("fdb flush dev p1 vlan 10 master nosticky added_by_user");
    assert_eq!((m.sticky, m.added_by_user), (Some(false), Some(true)));
    assert_eq!(
        err("fdb flush dev br0 static dynamic"),
        "\"dynamic\" contradicts \"static\": together they select no entries"
    );
    assert_eq!(
        err("fdb flush dev br0 static static"),
        "\"static\" given twice"
    );
    assert_eq!(
        err("fdb flush dev br0 sticky nosticky"),
        "\"[no]sticky\" given twice"
    );
    assert_eq!(
        err("fdb flush dev br0 offloaded"),
        "\"offloaded\" is not supported by qbridge (its FDB entries have no such \
         attribute)"
    );
    assert_eq!(err("fdb flush permanent"), "missing \"dev NAME\"");
}

#[test]
fn trace_words() {
    let t = |l: &str| match parse_line(l) {
        Ok(Some(Command::Trace(spec))) => spec,
        other => panic!("{l}: {other:?}"),
    };
    let s = t("trace dev p1 src 02:00:00:00:00:01 dst ff:ff:ff:ff:ff:ff vlan 100 tpid 802.1ad pcp 5 vlan 10 dei 1 ipv4 10.0.0.1 10.0.0.2 udp 1 2 len 128");
    assert_eq!(s.dev, "p1");
    let TraceFrameSpec::Described(d) = s.frame else {
        panic!("described")
    };
    assert_eq!(d.tags.len(), 2);
    assert_eq!(d.tags[0].tpid, Some(Tpid(0x88a8)));
    assert_eq!((d.tags[0].vid, d.tags[0].pcp), (100, 5));
    assert_eq!(
        (d.tags[1].vid, d.tags[1].dei, d.tags[1].tpid),
        (10, true, None)
    );
    assert_eq!(d.l4, L4Spec::Udp { sport: 1, dport: 2 });
    assert_eq!(d.len, Some(128));
    // `in_port` and no keyword at all name the port too; hex frames.
    assert_eq!(t("trace in_port p2 hex 02:00:00:00:00:01").dev, "p2");
    assert_eq!(
        t("trace p3 hex 0x0200000000010200").frame,
        TraceFrameSpec::Hex(vec![2, 0, 0, 0, 0, 1, 2, 0])
    );
    // Errors name the word.
    let e = |l: &str| parse_line(l).unwrap_err().to_string();
    assert!(
        e("trace").contains("the port the frame enters"),
        "{}",
        e("trace")
    );
    assert!(e("trace dev p1 src 02:00:00:00:00:01").contains("src MAC and dst MAC"));
    assert!(e("trace dev p1 src nope dst 02:00:00:00:00:02").contains("\"nope\""));
    assert!(e("trace dev p1 pcp 3").contains("vlan VID before pcp"));
    assert!(
        e("trace dev p1 src 02:00:00:00:00:01 dst 02:00:00:00:00:02 vlan 4096").contains("4096")
    );
    assert!(
        e("trace dev p1 src 02:00:00:00:00:01 dst 02:00:00:00:00:02 tcp 1 2")
            .contains("ipv4 SRC DST")
    );
    assert!(e("trace dev p1 hex 0g").contains("hex digits"));
    let many = format!(
        "trace dev p1 src 02:00:00:00:00:01 dst 02:00:00:00:00:02{}",
        " vlan 1".repeat(17)
    );
    assert!(e(&many).contains("at most 16 tags"), "{}", e(&many));
    assert!(e("trace dev p1 hex ééééééééééééééééééééééééééééééééééééééééééé").contains("hex"));
    assert!(e("trace dev p1 src 02:00:00:00:00:01 dst 02:00:00:00:00:02 bogus").contains("bogus"));
}

#[test]
fn trace_live_words() {
    use crate::command::{LiveFilter, TraceLiveSpec};
    let t = |l: &str| match parse_line(l) {
        Ok(Some(Command::TraceLive(spec))) => spec,
        other => panic!("{l}: {other:?}"),
    };
    let s = t("trace live dev p1");
    assert_eq!(s.dev, "p1");
    assert_eq!(
        (s.count, s.timeout_s),
        (
            TraceLiveSpec::DEFAULT_COUNT,
            TraceLiveSpec::DEFAULT_TIMEOUT_S
        )
    );
    assert_eq!(s.filter, LiveFilter::default());
    let s = t("trace live in_port p2 count 5 timeout 9 src 02:00:00:00:00:01 dst 02:00:00:00:00:02 vlan 100 vlan 10 ipv6 udp port 53");
    assert_eq!((s.dev.as_str(), s.count, s.timeout_s), ("p2", 5, 9));
    assert_eq!(s.filter.vids, vec![100, 10]);
    assert_eq!(s.filter.ethertype, Some(0x86dd));
    assert_eq!((s.filter.ip_proto, s.filter.l4_port), (Some(17), Some(53)));
    assert_eq!(t("trace live dev p1 arp").filter.ethertype, Some(0x0806));
    // A port named `live` is traced with `dev`; `trace live` alone asks for the port.
    assert!(matches!(
        parse_line("trace dev live hex 0200000000010200"),
        Ok(Some(Command::Trace(_)))
    ));
    assert!(matches!(
        parse_line("trace live src 02:00:00:00:00:01 dst 02:00:00:00:00:02"),
        Ok(Some(Command::Trace(_)))
    ));
    let e = |l: &str| parse_line(l).unwrap_err().to_string();
    assert!(
        e("trace live").contains("trace live dev PORT"),
        "{}",
        e("trace live")
    );
    assert_eq!(
        e("trace live dev p1 count 0"),
        "count 0 is out of range (1-1000)"
    );
    assert_eq!(
        e("trace live dev p1 timeout 0"),
        "timeout 0 is out of range (1-3600)"
    );
    assert!(e("trace live dev p1 count 1001").contains("1001"));
    assert!(e("trace live dev p1 timeout 3601").contains("3601"));
    assert!(e("trace live dev p1 port 80").contains("tcp or udp before port"));
    assert!(e("trace live dev p1 arp tcp").contains("ipv4 or ipv6"));
    assert!(e("trace live dev p1 count 2 count 3").contains("given twice"));
    assert!(e("trace live dev p1 bogus").contains("bogus"));
}
