//! Every drop reason the bridge pipeline decides is named by `trace` (issue 32), with the stage
//! that decided it, through the command words a user types; and the frame, once forwarded for
//! real, is dropped for that reason. Reasons set by the I/O layers (receive and transmit
//! errors, VXLAN's) and the flood credit of the daemon's workers are not the pipeline's
//! decision about a frame and are not traced.

use qbridge_bridge::{DropReason, PortId};
use qbridge_control::{OutputOptions, Session};
use qbridge_packet::{Batch, PacketBuf};
use serde_json::Value;

const BASE: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type pcap
link add p2 type pcap
link add p3 type pcap
link set dev p1 master br0
link set dev p2 master br0
link set dev p3 master br0
vlan add dev p1 vid 10
vlan del dev p1 vid 1
vlan add dev p2 vid 10 pvid untagged
vlan add dev p3 vid 20 pvid untagged
";

const A: &str = "02:00:00:00:00:0a";
const B: &str = "02:00:00:00:00:0b";

fn json() -> OutputOptions {
    OutputOptions {
        json: true,
        ..Default::default()
    }
}

/// Runs `extra` after [`BASE`], traces `line`, forwards the same frame, and checks both name
/// `reason` (and that the stage `stage` of the trace says `words`).
fn case(extra: &str, line: &str, reason: DropReason, stage: &str, words: &str) {
    let mut s = Session::new();
    s.execute_batch(&format!("{BASE}{extra}"), OutputOptions::default())
        .unwrap_or_else(|e| panic!("{reason:?}: config: {e}"));
    let out = s
        .execute_line(line, json())
        .unwrap_or_else(|e| panic!("{reason:?}: {line}: {e}"));
    let t: Value = serde_json::from_str(&out).unwrap();
    let drops = t["drops"].as_array().unwrap();
    assert!(
        drops.iter().any(|d| d["reason"] == reason.name()),
        "{reason:?}: {line}\n{t:#}"
    );
    assert_eq!(t["explained"], true, "{reason:?}: {t:#}");
    let texts: Vec<&str> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| st["stage"] == stage)
        .map(|st| st["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.iter().any(|x| x.contains(words)),
        "{reason:?}: stage {stage} should say {words:?}: {texts:?}\n{t:#}"
    );
    // The real pipeline agrees.
    let port = s.switch().port_id(t["in_port"].as_str().unwrap()).unwrap();
    let bytes: Vec<u8> = {
        let h = t["frame"]["hex"].as_str().unwrap();
        (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    };
    let before = total(&s, reason);
    let mut b = Batch::default();
    let mut p = PacketBuf::from_frame(&bytes);
    p.port = port.0;
    b.push(p);
    let mut out = qbridge_bridge::Outputs::new();
    s.switch_mut().process(1, &mut b, &mut out);
    assert_eq!(
        total(&s, reason),
        before + 1,
        "{reason:?}: the pipeline's count"
    );
}

fn total(s: &Session, reason: DropReason) -> u64 {
    s.switch()
        .port_ids()
        .map(|(id, _)| s.switch().port_counters(id).drops[reason as usize])
        .sum()
}

fn tr(rest: &str) -> String {
    format!("trace dev p1 src {A} dst {B} {rest}")
}

#[test]
fn every_pipeline_drop_reason_is_named_with_its_stage() {
    case(
        "",
        "trace dev p1 hex 020000000002020000000001",
        DropReason::Runt,
        "size",
        "shorter than an Ethernet header",
    );
    case(
        "",
        &tr("vlan 10 len 1600"),
        DropReason::Oversize,
        "size",
        "> 1518, the largest frame p1 accepts",
    );
    case(
        "",
        &format!("trace dev p1 src 01:00:00:00:00:01 dst {B} vlan 10"),
        DropReason::InvalidSrcMac,
        "source",
        "group or all-zero",
    );
    case(
        "",
        &format!("trace dev p1 src {A} dst 01:80:c2:00:00:02 vlan 10"),
        DropReason::LinkLocal,
        "group",
        "link-local",
    );
    case(
        "",
        &tr("vlan 4095"),
        DropReason::ReservedVid,
        "vlan",
        "VID 4095 is reserved",
    );
    case("", &tr(""), DropReason::NoPvid, "vlan", "p1 has no PVID");
    case(
        "",
        &tr("vlan 30"),
        DropReason::VlanNotMember,
        "filter",
        "p1 is not a member of VLAN 30",
    );
    case(
        "",
        &format!("trace dev p3 src {A} dst ff:ff:ff:ff:ff:ff"),
        DropReason::NoDestination,
        "flood",
        "flood set: no port",
    );
    case(
        "link set dev p1 down\n",
        &tr("vlan 10"),
        DropReason::PortDown,
        "port",
        "admin down",
    );
    case(
        "link add p9 type pcap\n",
        &format!("trace dev p9 src {A} dst {B}"),
        DropReason::NoBridge,
        "port",
        "in no bridge",
    );

    // A customer port (dot1q-tunnel, cvlans 10) and a trunk carrying its S-VLAN 100.
    let tunnel = "link add c1 type pcap\nlink add t1 type pcap\nlink set dev c1 master br0 vlan_mode dot1q-tunnel tag 100 cvlans 10\nlink set dev t1 master br0\nvlan add dev t1 vid 100\n";
    case(
        tunnel,
        &format!("trace dev c1 src {A} dst {B} vlan 20"),
        DropReason::CvlanNotAllowed,
        "vlan",
        "cvlans do not include the frame's customer VLAN 20",
    );
    case(
        tunnel,
        &format!("trace dev t1 src {A} dst {B} vlan 100 vlan 20"),
        DropReason::EgressCvlanNotAllowed,
        "egress",
        "customer VLAN is not in its cvlans",
    );

    // 1:1 translation: wire VLAN 200 is VLAN 300 inside; 300 on the wire is refused.
    let map = "link add m1 type pcap\nlink set dev m1 master br0\nvlan add dev m1 vid 300\nvlan map add dev m1 vid 200 translate 300\n";
    case(
        map,
        &format!("trace dev m1 src {A} dst {B} vlan 300"),
        DropReason::TranslatedVid,
        "vlan",
        "sends translated",
    );

    case(
        "link set dev p1 locked on\n",
        &tr("vlan 10"),
        DropReason::PortLocked,
        "locked",
        "p1 is locked and 02:00:00:00:00:0a has no entry on it",
    );

    // Known unicast refused on the way to its port.
    let to_p2 = format!("fdb add {B} dev p2 vlan 10 static\n");
    case(
        &format!("{to_p2}link set dev p1 isolated on\nlink set dev p2 isolated on\n"),
        &tr("vlan 10"),
        DropReason::Isolated,
        "unicast",
        "p1 and p2 are both isolated",
    );
    case(
        &format!(
            "{to_p2}vlan set vid 10 dev p1 pvlan isolated\nvlan set vid 10 dev p2 pvlan isolated\n"
        ),
        &tr("vlan 10"),
        DropReason::Pvlan,
        "unicast",
        "does not talk to p2",
    );
    case(
        &format!("{to_p2}link set dev p2 down\n"),
        &tr("vlan 10"),
        DropReason::EgressDown,
        "unicast",
        "p2 is admin down",
    );
    case(
        &format!("fdb add {B} dev p1 vlan 10 static\n"),
        &tr("vlan 10"),
        DropReason::SamePort,
        "unicast",
        "hairpin is off",
    );
    case(
        &format!("fdb add {B} dev p1 vlan 10\n"),
        &tr("vlan 10"),
        DropReason::Local,
        "unicast",
        "has no host port",
    );
    case(
        &format!("{to_p2}link set dev p2 vlan_mode access tag 20\n"),
        &tr("vlan 10"),
        DropReason::EgressNotMember,
        "unicast",
        "egress filter: p2 is not a member of VLAN 10",
    );

    // The spanning tree: every port starts discarding.
    case(
        "link set dev br0 type bridge stp_state 1\n",
        &tr("vlan 10"),
        DropReason::StpDiscarding,
        "stp",
        "p1 is discarding in VLAN 10's spanning tree",
    );
}

#[test]
fn learning_limits_are_named_with_their_violation_mode() {
    for (mode, reason) in [
        ("protect", DropReason::MacLimit),
        ("restrict", DropReason::MacLimitRestrict),
        ("shutdown", DropReason::MacLimitShutdown),
    ] {
        let mut s = Session::new();
        s.execute_batch(
            &format!("{BASE}vlan set vid 10 dev p1 fdb_max_learned 1 violation {mode}\n"),
            OutputOptions::default(),
        )
        .unwrap();
        // One source learned on p1 fills its limit.
        let f = |src: u8| {
            let mut b = Batch::default();
            let mut p = PacketBuf::from_frame(&[
                2, 0, 0, 0, 0, 0x0b, 2, 0, 0, 0, 0, src, 0x81, 0, 0, 10, 0x88, 0xb5, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
            ]);
            p.port = PortId(0).0;
            b.push(p);
            b
        };
        let mut out = qbridge_bridge::Outputs::new();
        s.switch_mut().process(1, &mut f(1), &mut out);
        let t: Value =
            serde_json::from_str(&s.execute_line(&tr("vlan 10"), json()).unwrap()).unwrap();
        assert_eq!(t["drops"][0]["reason"], reason.name(), "{t:#}");
        let learn = t["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["stage"] == "learn")
            .unwrap();
        assert!(
            learn["text"]
                .as_str()
                .unwrap()
                .contains(&format!("violation {mode}")),
            "{learn}"
        );
        let before = total(&s, reason);
        s.switch_mut().process(2, &mut f(0x0a), &mut out);
        assert_eq!(total(&s, reason), before + 1);
    }
}
