//! The spanning tree in the session, on a simulated clock: three sessions (three switches,
//! one bridge each) wired in a triangle by handing each BPDU a session sends on a port to
//! the session at the other end of that "wire" (`Session::stp_receive`), one second
//! (`Session::stp_tick`) at a time. What is asserted is what the switch does with the
//! protocol's answers: exactly one port of the triangle stops forwarding, on the bridge the
//! standard says, the FDB is flushed on a topology change, the commands and `stp show` say
//! the same, and the running configuration keeps it all.

use qbridge_bridge::{PortId, StpState};
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

/// A session with bridge br0 (`stp_state 1`, `priority`) and pcap ports `a`, `b` in it.
fn bridge(priority: u32, mac_tail: u8) -> Session {
    let mut s = Session::new();
    let batch = format!(
        "link add br0 type bridge vlan_filtering 1 priority {priority} forward_delay 4 max_age 6 hello_time 1\n\
         link set dev br0 up address 02:00:00:00:00:{mac_tail:02x}\n\
         link add a type pcap\nlink add b type pcap\n\
         link set dev a master br0\nlink set dev b master br0\n\
         link set dev br0 type bridge stp_state 1\n"
    );
    s.execute_batch(&batch, TEXT).unwrap();
    s
}

/// (session, port name) at each end of a wire.
type Wire = ((usize, &'static str), (usize, &'static str));

/// Runs `secs` seconds: every BPDU sent on a wired port is received at the far end.
fn run(net: &mut [Session], wires: &[Wire], secs: u32) {
    for _ in 0..secs {
        for s in net.iter_mut() {
            s.stp_tick();
        }
        // Deliver until quiet (BPDUs answer BPDUs within a second).
        for _ in 0..50 {
            let mut any = false;
            for i in 0..net.len() {
                for (port, frame) in net[i].stp_take_bpdus() {
                    let name = net[i].switch().port_name(port).unwrap().to_string();
                    for &((x, xp), (y, yp)) in wires {
                        let far = if (x, xp) == (i, name.as_str()) {
                            Some((y, yp))
                        } else if (y, yp) == (i, name.as_str()) {
                            Some((x, xp))
                        } else {
                            None
                        };
                        if let Some((j, jp)) = far {
                            let id = net[j].switch().port_id(jp).unwrap();
                            assert!(net[j].stp_receive(id, &frame));
                            any = true;
                        }
                    }
                }
            }
            if !any {
                break;
            }
        }
    }
}

fn state(s: &Session, port: &str) -> StpState {
    s.switch().stp_state(s.switch().port_id(port).unwrap(), 10)
}

fn triangle() -> (Vec<Session>, Vec<Wire>) {
    // br0 of session 0 is root (priority 4096); session 2 has the worst priority, so its
    // port towards session 1 (a designated port of 1) is the alternate that blocks.
    let net = vec![bridge(4096, 1), bridge(8192, 2), bridge(32768, 3)];
    let wires = vec![
        ((0, "a"), (1, "a")),
        ((1, "b"), (2, "a")),
        ((2, "b"), (0, "b")),
    ];
    (net, wires)
}

#[test]
fn triangle_blocks_exactly_one_port() {
    let (mut net, wires) = triangle();
    // Before the protocol speaks every port discards.
    for s in &net {
        assert_eq!(state(s, "a"), StpState::Discarding);
        assert_eq!(state(s, "b"), StpState::Discarding);
    }
    run(&mut net, &wires, 20);
    let states: Vec<(usize, &str, StpState)> = (0..3)
        .flat_map(|i| ["a", "b"].map(|p| (i, p, state(&net[i], p))))
        .collect();
    let blocked: Vec<_> = states
        .iter()
        .filter(|(_, _, st)| *st != StpState::Forwarding)
        .collect();
    assert_eq!(blocked.len(), 1, "{states:?}");
    // Session 2's port a (towards session 1, the worse path to the root) is the alternate.
    assert_eq!((blocked[0].0, blocked[0].1), (2, "a"), "{states:?}");
    // stp show says the same.
    let text = net[2].execute_line("stp show dev br0", TEXT).unwrap();
    assert!(text.contains("root 1000.020000000001 via b"), "{text}");
    let line_a = text
        .lines()
        .find(|l| l.trim_start().starts_with("a "))
        .unwrap();
    assert!(
        line_a.contains("alternate") && line_a.contains("discarding"),
        "{text}"
    );
    let root = net[0].execute_line("stp show", JSON).unwrap();
    let v: serde_json::Value = serde_json::from_str(&root).unwrap();
    assert_eq!(v[0]["root"], true, "{root}");
    assert_eq!(v[0]["bridge_id"], "1000.020000000001", "{root}");
    assert_eq!(v[0]["ports"][0]["role"], "designated", "{root}");
}

#[test]
fn link_loss_unblocks_the_alternate_within_seconds() {
    let (mut net, wires) = triangle();
    run(&mut net, &wires, 20);
    assert_eq!(state(&net[2], "a"), StpState::Discarding);
    // Entries on session 1's port a (towards the root): one dynamic, one static.
    net[1]
        .execute_line("fdb add 02:00:00:00:00:99 dev a vlan 1 dynamic", TEXT)
        .unwrap();
    net[1]
        .execute_line("fdb add 02:00:00:00:00:98 dev a vlan 1 static", TEXT)
        .unwrap();
    let fdb = |s: &mut Session| s.execute_line("fdb show", TEXT).unwrap();
    assert!(fdb(&mut net[1]).contains("02:00:00:00:00:99"));
    // The wire between session 2 and the root goes down at both ends.
    for (i, p) in [(2, "b"), (0, "b")] {
        let id: PortId = net[i].switch().port_id(p).unwrap();
        net[i].switch_mut().set_link_state(id, false);
        net[i].stp_sync();
    }
    let live: Vec<Wire> = wires[..2].to_vec();
    // RSTP: the alternate becomes root port and forwards at once (no forward delay).
    run(&mut net, &live, 1);
    assert_eq!(state(&net[2], "a"), StpState::Forwarding);
    assert_eq!(state(&net[2], "b"), StpState::Discarding);
    // The topology change reached session 1 through its port b: the learned entries of its
    // other port are flushed (802.1D-2004 17.29), the static one stays.
    let after = fdb(&mut net[1]);
    assert!(!after.contains("02:00:00:00:00:99"), "{after}");
    assert!(after.contains("02:00:00:00:00:98"), "{after}");
}

#[test]
fn options_validate_and_persist() {
    let mut s = bridge(4096, 1);
    // The timer relation of 802.1D-2004 17.14: max_age 6 with forward_delay 4 is fine, 7 is not.
    let e = s
        .execute_line("link set dev br0 type bridge max_age 7", TEXT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("max age 7"), "{e}");
    assert!(s
        .execute_line("link set dev br0 type bridge priority 4097", TEXT)
        .is_err());
    assert!(s.execute_line("link set dev a priority 17", TEXT).is_err());
    s.execute_line("link set dev a cost 100 priority 32 guard on p2p yes", TEXT)
        .unwrap();
    let e = s
        .execute_line("link set dev br0 cost 5", TEXT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("host port"), "{e}");
    s.execute_line("link add c type pcap", TEXT).unwrap();
    let e = s
        .execute_line("link set dev c cost 5", TEXT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("in no bridge"), "{e}");
    s.execute_line("stp msti set dev br0 vid 10-20 msti 3", TEXT)
        .unwrap();
    let text = s.running_config();
    for line in [
        "link set dev br0 type bridge stp_mode rstp priority 4096 hello_time 1 max_age 6 forward_delay 4 tx_hold_count 6 max_hops 20",
        "stp msti set dev br0 vid 10-20 msti 3",
        "link set dev a cost 100 priority 32 guard on p2p yes",
        "link set dev br0 type bridge stp_state 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
    let mut fresh = Session::new();
    fresh.execute_batch(&text, TEXT).unwrap();
    assert_eq!(fresh.running_config(), text);
    // stp_state 0: no engine, no port states; the configuration stays.
    s.execute_line("link set dev br0 type bridge stp_state 0", TEXT)
        .unwrap();
    assert_eq!(state(&s, "a"), StpState::Forwarding);
    assert!(s.execute_line("stp show dev br0", TEXT).is_err());
    assert!(s.running_config().contains("link set dev a cost 100"));
}

#[test]
fn bpdu_guard_shuts_an_edge_port() {
    let (mut net, wires) = triangle();
    net[1]
        .execute_line("link set dev a edge on guard on", TEXT)
        .unwrap();
    run(&mut net, &wires, 4);
    let text = net[1].execute_line("stp show dev br0 ", TEXT).unwrap();
    let a = text
        .lines()
        .find(|l| l.trim_start().starts_with("a "))
        .unwrap();
    assert!(a.contains("disabled"), "{text}");
    assert_ne!(state(&net[1], "a"), StpState::Forwarding);
    let j = net[1].execute_line("stp show dev br0", JSON).unwrap();
    assert!(j.contains("\"bpdu_guard_shut\""), "{j}");
}

/// MSTP: two bridges, two links, VLAN 10 in MSTI 1 (session 0 its regional root) and VLAN
/// 20 in MSTI 2 (session 1 its root): each MSTI blocks link b on its non-root bridge, so the
/// per-VID states differ per tree.
#[test]
fn mstp_blocks_per_msti() {
    let mk = |tail: u8, p1: u32, p2: u32| {
        let mut s = Session::new();
        let batch = format!(
            "link add br0 type bridge vlan_filtering 1 stp_mode mstp mst_name lab mst_revision 3 \
             hello_time 1 forward_delay 4 max_age 6\n\
             link set dev br0 up address 02:00:00:00:00:{tail:02x}\n\
             link add a type pcap\nlink add b type pcap\n\
             link set dev a master br0\nlink set dev b master br0\n\
             vlan add vid 10 dev a\nvlan add vid 20 dev a\nvlan add vid 10 dev b\nvlan add vid 20 dev b\n\
             stp msti set dev br0 vid 10 msti 1\nstp msti set dev br0 vid 20 msti 2\n\
             stp msti priority dev br0 msti 1 priority {p1}\n\
             stp msti priority dev br0 msti 2 priority {p2}\n\
             link set dev br0 type bridge stp_state 1\n"
        );
        s.execute_batch(&batch, TEXT).unwrap();
        s
    };
    let mut net = vec![mk(1, 4096, 32768), mk(2, 32768, 4096)];
    let wires = vec![((0, "a"), (1, "a")), ((0, "b"), (1, "b"))];
    run(&mut net, &wires, 20);
    let st =
        |s: &Session, p: &str, vid: u16| s.switch().stp_state(s.switch().port_id(p).unwrap(), vid);
    assert_eq!(st(&net[1], "b", 10), StpState::Discarding);
    assert_eq!(st(&net[1], "b", 20), StpState::Forwarding);
    assert_eq!(st(&net[0], "b", 20), StpState::Discarding);
    assert_eq!(st(&net[0], "b", 10), StpState::Forwarding);
    for s in &net {
        assert_eq!(st(s, "a", 10), StpState::Forwarding);
        assert_eq!(st(s, "a", 20), StpState::Forwarding);
    }
    let j = net[0].execute_line("stp show", JSON).unwrap();
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v[0]["mode"], "mstp", "{j}");
    assert_eq!(v[0]["region"]["name"], "lab", "{j}");
    assert_eq!(v[0]["region"]["revision"], 3, "{j}");
    let b = &v[0]["ports"][1];
    assert_eq!(b["mstis"][1]["msti"], 2, "{j}");
    assert_eq!(b["mstis"][1]["state"], "discarding", "{j}");
    // VID 30 is in the CIST, where session 0 is root and forwards on b; moved into MSTI 2
    // (session 1 its root) on both bridges, it takes MSTI 2's state: discarding on session 0's b.
    assert_eq!(st(&net[0], "b", 30), StpState::Forwarding);
    for s in net.iter_mut() {
        s.execute_line("stp msti set dev br0 vid 30 msti 2", TEXT)
            .unwrap();
    }
    run(&mut net, &wires, 10);
    assert_eq!(st(&net[0], "b", 30), StpState::Discarding);
    assert_eq!(st(&net[0], "b", 10), StpState::Forwarding);
    // The configuration round-trips.
    let text = net[0].running_config();
    let mut fresh = Session::new();
    fresh.execute_batch(&text, TEXT).unwrap();
    assert_eq!(fresh.running_config(), text);
}

/// A port's cost in one MSTI moves that MSTI's root port, and no other tree's: session 1's
/// port a costs 500000 in MSTI 1, so VLAN 10 reaches the root through b while VLAN 20 (MSTI
/// 2, session 1 its root) is unchanged.
#[test]
fn msti_port_cost_moves_one_tree() {
    let mk = |tail: u8, p1: u32| {
        let mut s = Session::new();
        let batch = format!(
            "link add br0 type bridge vlan_filtering 1 stp_mode mstp mst_name lab \
             hello_time 1 forward_delay 4 max_age 6\n\
             link set dev br0 up address 02:00:00:00:00:{tail:02x}\n\
             link add a type pcap\nlink add b type pcap\n\
             link set dev a master br0\nlink set dev b master br0\n\
             vlan add vid 10 dev a\nvlan add vid 10 dev b\n\
             stp msti set dev br0 vid 10 msti 1\n\
             stp msti priority dev br0 msti 1 priority {p1}\n\
             link set dev br0 type bridge stp_state 1\n"
        );
        s.execute_batch(&batch, TEXT).unwrap();
        s
    };
    let mut net = vec![mk(1, 4096), mk(2, 32768)];
    net[1]
        .execute_line("stp msti port dev a msti 1 cost 500000", TEXT)
        .unwrap();
    assert!(net[1]
        .execute_line("stp msti port dev a msti 1 priority 17", TEXT)
        .is_err());
    assert!(net[1]
        .execute_line("stp msti port dev a msti 0 cost 5", TEXT)
        .is_err());
    let wires = vec![((0, "a"), (1, "a")), ((0, "b"), (1, "b"))];
    run(&mut net, &wires, 20);
    let st =
        |s: &Session, p: &str, vid: u16| s.switch().stp_state(s.switch().port_id(p).unwrap(), vid);
    assert_eq!(st(&net[1], "a", 10), StpState::Discarding);
    assert_eq!(st(&net[1], "b", 10), StpState::Forwarding);
    // The CIST (every other VID) still uses a, the lower port id.
    assert_eq!(st(&net[1], "a", 30), StpState::Forwarding);
    assert_eq!(st(&net[1], "b", 30), StpState::Discarding);
    let text = net[1].running_config();
    assert!(
        text.lines()
            .any(|l| l == "stp msti port dev a msti 1 priority 128 cost 500000"),
        "{text}"
    );
    let mut fresh = Session::new();
    fresh.execute_batch(&text, TEXT).unwrap();
    assert_eq!(fresh.running_config(), text);
}

/// The bridge address comes from the ports' interface addresses, which a daemon learns only
/// once the ports are open: the engine then starts again, and the BPDUs the first engine
/// queued (with a bridge id that no longer exists) are not sent.
#[test]
fn a_new_bridge_address_restarts_the_engine_and_drops_its_queued_bpdus() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge\nlink add a type pcap\nlink add b type pcap\n\
         link set dev a master br0\nlink set dev b master br0\n\
         link set dev br0 type bridge stp_state 1\n",
        TEXT,
    )
    .unwrap();
    let a = s.switch().port_id("a").unwrap();
    let b = s.switch().port_id("b").unwrap();
    let mac = qbridge_wire::MacAddr([0x02, 0, 0, 0, 0x42, 0x01]);
    s.switch_mut()
        .set_port_address(b, Some(qbridge_wire::MacAddr([0x02, 0, 0, 0, 0x42, 0x02])));
    s.switch_mut().set_port_address(a, Some(mac));
    s.stp_sync();
    let bpdus = s.stp_take_bpdus();
    assert!(!bpdus.is_empty());
    for (_, f) in &bpdus {
        // RST BPDU: bridge identifier at bytes 34..42 (priority, then the address).
        assert_eq!(&f[36..42], &mac.0, "a BPDU of the old engine: {f:02x?}");
    }
    let j = s.execute_line("stp show", JSON).unwrap();
    assert!(j.contains("\"bridge_id\":\"8000.020000004201\""), "{j}");
}
