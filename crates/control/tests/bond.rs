//! Bonds in the control plane: the words of `link add|set … type bond`, `master BOND` /
//! `nomaster` (a port's backend moves under the bond and back), the refusals, `link show`
//! (`-d`, `-j`) and `show running-config` (exact text, and a round trip).

use qbridge_control::{parse_line, Command, LinkCommand, OutputOptions, PortSpec, Session};

const TEXT: OutputOptions = OutputOptions {
    json: false,
    stats: false,
    pretty: false,
    compress_vlans: false,
    details: false,
    brief: false,
};
const DETAILS: OutputOptions = OutputOptions {
    details: true,
    ..TEXT
};
const JSON: OutputOptions = OutputOptions { json: true, ..TEXT };

fn run(s: &mut Session, line: &str) -> String {
    s.execute_line(line, TEXT)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn err(s: &mut Session, line: &str) -> String {
    match s.execute_line(line, TEXT) {
        Ok(out) => panic!("{line}: accepted ({out})"),
        Err(e) => e.to_string(),
    }
}

const SETUP: &str = "\
link add br0 type bridge
link add bo type bond mode 802.3ad xmit_hash_policy layer3+4 lacp_rate fast address 02:00:00:00:0b:01
link add m1 type afpacket dev veth1
link add m2 type afpacket dev veth2 qdisc_bypass off
link set dev m1 master bo
link set dev m2 master bo
link set dev bo master br0
";

fn session() -> Session {
    let mut s = Session::new();
    s.execute_batch(SETUP, TEXT).unwrap();
    s
}

#[test]
fn bond_words_parse() {
    let Some(Command::Link(LinkCommand::AddPort {
        name,
        spec: PortSpec::Bond(b),
        ..
    })) = parse_line(
        "link add bo type bond mode balance-xor xmit_hash_policy inner-layer3+4 lacp_rate fast \
         lacp_active off min_links 2 miimon 50 lacp_fallback on",
    )
    .unwrap()
    else {
        panic!("not a bond");
    };
    assert_eq!(name, "bo");
    let c = b.config;
    assert_eq!(c.mode, qbridge_lacp::Mode::BalanceXor);
    assert_eq!(c.hash_policy, qbridge_lacp::HashPolicy::InnerLayer34);
    assert_eq!(c.lacp_rate, qbridge_lacp::LacpRate::Fast);
    assert_eq!(c.lacp_activity, qbridge_lacp::LacpActivity::Passive);
    assert_eq!((c.min_links, c.miimon_ms), (2, 50));
    assert_eq!(c.fallback, qbridge_lacp::Fallback::ActiveBackup);
    assert!(b.members.is_empty());
    // Defaults: active-backup, layer2, slow, active, miimon 100.
    let Some(Command::Link(LinkCommand::AddPort {
        spec: PortSpec::Bond(b),
        ..
    })) = parse_line("link add bo type bond").unwrap()
    else {
        panic!("not a bond");
    };
    assert_eq!(b.config.mode, qbridge_lacp::Mode::ActiveBackup);
    assert_eq!(b.config.hash_policy, qbridge_lacp::HashPolicy::Layer2);
    assert_eq!(b.config.miimon_ms, 100);
    let e = |l: &str| parse_line(l).unwrap_err().to_string();
    assert_eq!(
        e("link add bo type bond mode balance-rr"),
        "invalid bond mode \"balance-rr\" (expected active-backup, balance-xor or 802.3ad)"
    );
    assert_eq!(
        e("link add bo type bond xmit_hash_policy layer3"),
        "invalid xmit_hash_policy \"layer3\" (expected layer2, layer2+vlan, layer3+4 or \
         inner-layer3+4)"
    );
    assert_eq!(
        e("link add bo type bond lacp_rate medium"),
        "invalid lacp_rate \"medium\" (expected slow or fast)"
    );
    assert_eq!(
        e("link add bo type bond miimon 70000"),
        "miimon 70000 is out of range (0-60000 ms)"
    );
    assert_eq!(
        e("link add bo type bond address 01:00:5e:00:00:01"),
        "invalid bond address \"01:00:5e:00:00:01\" (expected a unicast MAC address, not all zeros)"
    );
    assert!(matches!(
        parse_line("link set dev bo type bond lacp_rate slow").unwrap(),
        Some(Command::Link(LinkCommand::SetBond { .. }))
    ));
}

#[test]
fn members_leave_the_port_table_and_come_back() {
    let mut s = session();
    let names: Vec<String> = s.switch().port_ids().map(|(_, n)| n.to_string()).collect();
    assert_eq!(names, ["bo"]);
    // nomaster gives the port back, with its backend.
    run(&mut s, "link set dev m2 nomaster");
    assert_eq!(
        s.port_spec("m2"),
        Some(&PortSpec::AfPacket {
            dev: "veth2".into(),
            qdisc_bypass: false,
            ring_frames: None
        })
    );
    assert!(s.bond_of_member("m2").is_none());
    run(&mut s, "link set dev m2 master bo");
    // Deleting the bond frees its members, as Linux does.
    run(&mut s, "link del dev bo");
    let mut names: Vec<String> = s.switch().port_ids().map(|(_, n)| n.to_string()).collect();
    names.sort();
    assert_eq!(names, ["m1", "m2"]);
    assert!(s.bond("bo").is_none());
    // Deleting a member deletes it.
    let mut s = session();
    run(&mut s, "link del dev m1");
    assert!(s.bond_of_member("m1").is_none() && !s.switch().exists("m1"));
    assert_eq!(s.bond("bo").unwrap().view().members.len(), 1);
}

#[test]
fn bond_refusals_name_the_reason() {
    let mut s = session();
    run(&mut s, "link add p3 type afpacket dev veth3");
    run(&mut s, "link set dev p3 master br0");
    assert_eq!(
        err(&mut s, "link set dev p3 master bo"),
        "p3 is a port of bridge br0: \"link set dev p3 nomaster\" first (a bond member is not \
         a port of the switch)"
    );
    run(&mut s, "link add t1 type tap");
    assert_eq!(
        err(&mut s, "link set dev t1 master bo"),
        "t1 is tap port: only afpacket ports can join a bond"
    );
    run(&mut s, "link add p4 type afpacket dev veth4");
    run(&mut s, "link add link p4 name p4.10 type vlan id 10");
    assert_eq!(
        err(&mut s, "link set dev p4 master bo"),
        "p4 has devices stacked on it (p4.10): delete them first"
    );
    assert_eq!(
        err(&mut s, "link set dev m1 learning off"),
        "m1 is a member of bond bo: only \"nomaster\" applies to it (set port options on bo)"
    );
    assert_eq!(
        err(&mut s, "link add m1 type tap"),
        "device \"m1\" already exists"
    );
    assert_eq!(
        err(&mut s, "link add x type afpacket dev veth1"),
        "interface \"veth1\" is already used by m1, a member of bond bo (a device can be a port \
         once)"
    );
    assert_eq!(
        err(&mut s, "link set dev br0 type bond mode 802.3ad"),
        "br0 is not a bond"
    );
    // A refused batch leaves the bond as it was.
    let before = s.running_config();
    assert!(s
        .execute_batch(
            "link set dev m1 nomaster\nlink set dev nope master bo\n",
            TEXT
        )
        .is_err());
    assert_eq!(s.running_config(), before);
}

#[test]
fn link_show_and_running_config() {
    let mut s = session();
    run(
        &mut s,
        "link set dev bo type bond min_links 1 lacp_fallback on",
    );
    let text = s.execute_line("link show dev bo", TEXT).unwrap();
    assert_eq!(
        text.lines().next().unwrap(),
        "bo: bond mode 802.3ad xmit_hash_policy layer3+4 lacp_rate fast lacp_active on \
         min_links 1 miimon 100 lacp_fallback on address 02:00:00:00:0b:01 master br0 state UP \
         mtu 1500 envhdr len auto (4) tpid default (0x8100) max_frame 1518"
    );
    assert!(!text.contains("member m1"));
    let d = s.execute_line("link show dev bo", DETAILS).unwrap();
    let tail: Vec<&str> = d.lines().skip(2).collect();
    assert_eq!(
        tail.join("\n"),
        "    bond: carrier off fallback_active off active_aggregator none members 2
    member m1 port 1 link down rx PortDisabled mux Detached Unselected aggregator none collecting off distributing off
      actor system 65535,02:00:00:00:0b:01 key 1 port 255,1 state activity,timeout,defaulted
      partner system 0,00:00:00:00:00:00 key 0 port 0,0 state none
      lacpdu rx 0 tx 0 ignored 0 bad 0 marker rx 0 tx 0 expired 0 defaulted 0 churn actor 0 partner 0 link_down 0
    member m2 port 2 link down rx PortDisabled mux Detached Unselected aggregator none collecting off distributing off
      actor system 65535,02:00:00:00:0b:01 key 1 port 255,2 state activity,timeout,defaulted
      partner system 0,00:00:00:00:00:00 key 0 port 0,0 state none
      lacpdu rx 0 tx 0 ignored 0 bad 0 marker rx 0 tx 0 expired 0 defaulted 0 churn actor 0 partner 0 link_down 0"
    );
    let j: serde_json::Value =
        serde_json::from_str(&s.execute_line("link show dev bo", JSON).unwrap()).unwrap();
    let b = &j[0]["bond"];
    assert_eq!(b["mode"], "802.3ad");
    assert_eq!(b["lacp_fallback"], true);
    assert_eq!(b["members"][0]["name"], "m1");
    assert_eq!(b["members"][1]["config"]["port_number"], 2);
    assert_eq!(j[0]["backend"]["type"], "bond");
    assert_eq!(j[0]["backend"]["members"], serde_json::json!(["m1", "m2"]));
    let rc = s.running_config();
    let lines: Vec<&str> = rc
        .lines()
        .filter(|l| l.contains("bo") || l.contains("m1") || l.contains("m2"))
        .collect();
    assert_eq!(
        lines[..5],
        [
            "link add bo index 0 type bond mode 802.3ad xmit_hash_policy layer3+4 lacp_rate fast \
             lacp_active on min_links 1 miimon 100 lacp_fallback on address 02:00:00:00:0b:01",
            "link add m1 type afpacket dev veth1 qdisc_bypass on",
            "link set dev m1 master bo",
            "link add m2 type afpacket dev veth2 qdisc_bypass off",
            "link set dev m2 master bo",
        ]
    );
    // The text recreates the same configuration.
    let mut fresh = Session::new();
    fresh
        .execute_batch(&rc, TEXT)
        .unwrap_or_else(|e| panic!("{e}\n{rc}"));
    assert_eq!(fresh.running_config(), rc);
    // apply of the same batch is a no-op.
    let mut again = session();
    again.apply_batch(SETUP, TEXT).unwrap();
    assert_eq!(again.running_config(), session().running_config());
}
