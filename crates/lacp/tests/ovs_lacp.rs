//! Open vSwitch `tests/lacp.at` timelines on a simulated clock (100 ms ticks, as OVS's
//! `time/warp 100`), plus the scenarios the standard adds: two switches, churn, passive
//! mode, `min_links`, fallback, the transmit limit, Marker.
//!
//! OVS's topology: bond0 (system aa:55:aa:55:00:00, ports 1 and 2, key 2) and bond1
//! (aa:66:aa:66:00:00, ports 3 and 4, key 4), fast rate, p1-p3 and p2-p4 wired. Differences
//! from OVS's expected text are the standard's: the operational key carries speed bits, and a
//! port with no partner is not "synchronized collecting distributing".

mod common;

use common::{bond, mac, Sim, WireState, UP};
use qbridge_lacp::{
    Event, Fallback, LacpActivity, Link, MarkerKind, MarkerPdu, MemberId, Mode, MuxState, OnOff,
    Output, PortState, RxState, Selected, Side,
};

fn ovs_pair(tweak0: impl FnOnce(&mut qbridge_lacp::BondConfig)) -> Sim {
    let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2], tweak0);
    let b1 = bond(0x66, Mode::Lacp, 4, &[3, 4], |_| {});
    let mut sim = Sim::new(vec![b0, b1]);
    sim.wire(0, 1, 1, 3);
    sim.wire(0, 2, 1, 4);
    sim
}

/// OVS: "Wait for up to 5 (simulated) seconds, until LACP negotiation finishes." Returns the
/// 100 ms ticks it took.
fn negotiate(sim: &mut Sim) -> u32 {
    sim.all_links(UP);
    let mut ticks = 0;
    while ![(0, 1), (0, 2), (1, 3), (1, 4)]
        .iter()
        .all(|&(b, m)| sim.distributing(b, m))
    {
        ticks += 1;
        assert!(ticks <= 50, "not negotiated after 5 s");
        sim.warp(100, 100);
    }
    ticks
}

fn words(s: PortState) -> String {
    s.words().join(" ")
}

#[test]
fn negotiation() {
    let mut sim = ovs_pair(|_| {});
    let ticks = negotiate(&mut sim);
    // Aggregate_Wait_Time (2 s) is the only wait: PDUs cross at once at link up.
    assert_eq!(ticks, 20, "negotiation took {ticks} ticks of 100 ms");
    for (b, m, peer_sys, peer_port) in [
        (0, 1, 0x66, 3),
        (0, 2, 0x66, 4),
        (1, 3, 0x55, 1),
        (1, 4, 0x55, 2),
    ] {
        let v = sim.bonds[b].member_view(MemberId(m)).unwrap();
        assert_eq!(
            words(v.actor.state),
            "activity timeout aggregation synchronized collecting distributing"
        );
        assert_eq!(
            words(v.partner.state),
            "activity timeout aggregation synchronized collecting distributing"
        );
        assert_eq!(v.partner.system, mac(peer_sys, 0));
        assert_eq!(v.partner.system_priority, 65534);
        assert_eq!(v.partner.port, peer_port);
        assert_eq!(v.partner.port_priority, 65535);
        assert_eq!(v.rx_state, RxState::Current);
        assert_eq!(v.selected, Selected::Selected);
    }
    let v0 = sim.bonds[0].view();
    assert_eq!(v0.carrier, OnOff::On);
    assert_eq!(v0.active_aggregator_id, Some(1));
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(1), MemberId(2)]
    );
    sim.assert_rate_limit();
}

#[test]
fn expired_after_link_loss_at_fast_rate_then_defaulted() {
    let mut sim = ovs_pair(|_| {});
    negotiate(&mut sim);
    sim.warp(1000, 100);
    let last_rx = *sim.lacpdus(1, 3).last().unwrap();
    // OVS redirects the p0-p2 patch to null ports: frames lost, carrier kept.
    sim.set_wire(0, WireState::Cut);
    let expiry = last_rx + 3000;
    sim.warp(expiry - 1 - sim.now, 1);
    assert_eq!(
        sim.bonds[0].member_view(MemberId(1)).unwrap().rx_state,
        RxState::Current
    );
    assert!(sim.distributing(0, 1));
    sim.warp(1, 1);
    let v = sim.bonds[0].member_view(MemberId(1)).unwrap();
    assert_eq!(
        v.rx_state,
        RxState::Expired,
        "expired exactly 3 s after the last LACPDU"
    );
    assert!(!sim.distributing(0, 1));
    // OVS's expected partner state: sync cleared, the rest kept.
    assert_eq!(
        words(v.partner.state),
        "activity timeout aggregation collecting distributing"
    );
    assert!(v.actor.state.has(PortState::EXPIRED));
    assert_eq!(v.counters.expired, 1);
    assert!(sim.events_of(0).contains(&Event::Expired {
        member: MemberId(1)
    }));
    // The other member keeps all traffic; only the failed member's buckets moved.
    assert!(sim.distributing(0, 2));
    assert_eq!(sim.bonds[0].tx_table().members(), &[MemberId(2)]);
    assert_eq!(sim.bonds[0].view().carrier, OnOff::On);

    // "Wait 4 more simulated seconds. The LACP state should become defaulted."
    sim.warp(4100, 100);
    for (b, m) in [(0, 1), (1, 3)] {
        let v = sim.bonds[b].member_view(MemberId(m)).unwrap();
        assert_eq!(v.rx_state, RxState::Defaulted);
        assert_eq!(
            words(v.actor.state),
            "activity timeout aggregation defaulted"
        );
        assert_eq!(
            v.partner,
            qbridge_lacp::PortInfo::default(),
            "partner zeroed"
        );
        assert_ne!(v.selected, Selected::Selected);
        assert_eq!(v.counters.defaulted, 1);
    }
    assert!(sim.distributing(0, 2) && sim.distributing(1, 4));
    sim.assert_rate_limit();
}

/// OVS "liveness propagation": after defaulted, reconnecting renegotiates within 30 s
/// (LACP_SLOW_TIME_TX: a defaulted partner is presumed slow).
#[test]
fn reconnect_after_defaulted_renegotiates_within_slow_period() {
    let mut sim = ovs_pair(|_| {});
    negotiate(&mut sim);
    sim.set_wire(0, WireState::Cut);
    sim.warp(4100, 100);
    sim.warp(4100, 100);
    assert_eq!(
        sim.bonds[0].member_view(MemberId(1)).unwrap().rx_state,
        RxState::Defaulted
    );
    sim.set_wire(0, WireState::Connected);
    let start = sim.now;
    while !(sim.distributing(0, 1) && sim.distributing(1, 3)) {
        assert!(sim.now - start <= 30_100 + 2_100, "not renegotiated");
        sim.warp(100, 100);
    }
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(1), MemberId(2)]
    );
    sim.assert_rate_limit();
}

#[test]
fn unconnected_member_is_defaulted_and_carries_nothing() {
    // OVS "lacp - config": one member, no partner.
    let mut sim = Sim::new(vec![bond(0x55, Mode::Lacp, 1, &[1], |_| {})]);
    sim.link(0, 1, UP);
    let v = sim.bonds[0].member_view(MemberId(1)).unwrap();
    assert_eq!(v.rx_state, RxState::Expired);
    assert_eq!(words(v.partner.state), "timeout");
    sim.warp(3000, 100);
    let v = sim.bonds[0].member_view(MemberId(1)).unwrap();
    assert_eq!(v.rx_state, RxState::Defaulted);
    assert!(!sim.distributing(0, 1));
    assert_eq!(sim.bonds[0].member_for(7), None);
    // An active port keeps asking: slow periodic towards a defaulted (slow) partner.
    sim.warp(60_000, 1000);
    let times: Vec<_> = sim
        .lacpdus(0, 1)
        .into_iter()
        .filter(|&t| t > 5000)
        .collect();
    assert_eq!(
        times,
        vec![33_000, 63_000],
        "every 30 s from DEFAULTED at 3 s"
    );
}

#[test]
fn fallback_to_active_backup_without_partner_and_back() {
    // bond0 falls back; its wires lead to a static balance-xor bond (no LACP).
    let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2], |c| {
        c.fallback = Fallback::ActiveBackup
    });
    let b1 = bond(0x66, Mode::BalanceXor, 4, &[3, 4], |_| {});
    let mut sim = Sim::new(vec![b0, b1]);
    sim.wire(0, 1, 1, 3);
    sim.wire(0, 2, 1, 4);
    sim.all_links(UP);
    sim.warp(2900, 100);
    assert!(
        !sim.distributing(0, 1) && !sim.distributing(0, 2),
        "no fallback before expiry"
    );
    sim.warp(100, 100);
    assert!(
        sim.distributing(0, 1) && !sim.distributing(0, 2),
        "fallback: one member"
    );
    assert_eq!(sim.bonds[0].view().fallback_active, OnOff::On);
    assert!(sim.events_of(0).contains(&Event::Fallback {
        state: OnOff::On,
        member: Some(MemberId(1))
    }));
    assert!(sim.bonds[0]
        .tx_table()
        .buckets()
        .iter()
        .all(|b| *b == Some(MemberId(1))));
    // Active-backup failover inside fallback.
    sim.link(0, 1, Link::Down);
    assert!(sim.distributing(0, 2));
    sim.link(0, 1, UP);
    assert!(
        sim.distributing(0, 2) && !sim.distributing(0, 1),
        "no preemption"
    );
    // The partner starts LACP: fallback ends, negotiation takes over.
    let mut cfg = *sim.bonds[1].config();
    cfg.mode = Mode::Lacp;
    sim.bonds[1].set_config(sim.now, cfg).unwrap();
    sim.deliver();
    assert_eq!(sim.bonds[0].view().fallback_active, OnOff::Off);
    sim.warp(3000, 100);
    assert!(sim.distributing(0, 1) && sim.distributing(0, 2));
    sim.assert_rate_limit();
}

#[test]
fn member_to_another_switch_is_not_aggregated_and_churns() {
    // bond0 p1, p2 to switch A (bond1), p5 to switch B (bond2).
    let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2, 5], |_| {});
    let b1 = bond(0x66, Mode::Lacp, 4, &[3, 4], |_| {});
    let b2 = bond(0x77, Mode::Lacp, 4, &[6], |_| {});
    let mut sim = Sim::new(vec![b0, b1, b2]);
    sim.wire(0, 1, 1, 3);
    sim.wire(0, 2, 1, 4);
    sim.wire(0, 5, 2, 6);
    sim.all_links(UP);
    sim.warp(3000, 100);
    assert!(sim.distributing(0, 1) && sim.distributing(0, 2));
    assert!(!sim.distributing(0, 5));
    let v = sim.bonds[0].member_view(MemberId(5)).unwrap();
    assert_eq!(v.selected, Selected::Standby);
    assert_eq!(v.mux_state, MuxState::Waiting);
    assert!(!v.actor.state.has(PortState::SYNCHRONIZATION));
    assert_ne!(v.aggregator_id, sim.bonds[0].view().active_aggregator_id);
    // Switch B's port is attached, waiting for a partner that never syncs.
    assert_eq!(sim.mux(2, 6), MuxState::Attached);
    assert!(!sim.distributing(2, 6));
    // Churn: 60 s without synchronization.
    sim.warp(56_000, 1000);
    assert!(!sim
        .events_of(0)
        .iter()
        .any(|e| matches!(e, Event::Churn { .. })));
    sim.warp(1000, 1000);
    assert!(sim.events_of(0).contains(&Event::Churn {
        member: MemberId(5),
        side: Side::Actor,
        state: OnOff::On
    }));
    assert!(sim.events_of(2).contains(&Event::Churn {
        member: MemberId(6),
        side: Side::Partner,
        state: OnOff::On
    }));
    assert!(
        !sim.events_of(1)
            .iter()
            .any(|e| matches!(e, Event::Churn { .. })),
        "the good links never churn"
    );
    let v = sim.bonds[0].member_view(MemberId(5)).unwrap();
    assert_eq!(
        (v.counters.actor_churn, v.actor_churn),
        (1, qbridge_lacp::ChurnState::Churn)
    );
    // The view serialises for `link show -j`.
    let json = serde_json::to_string(&sim.bonds[0].view()).unwrap();
    assert!(json.contains("\"actor_churn\":\"Churn\""), "{json}");
    sim.assert_rate_limit();
}

#[test]
fn rate_limit_holds_under_config_flapping() {
    let mut sim = ovs_pair(|_| {});
    negotiate(&mut sim);
    // Flip the activity every 10 ms: each flip sets NTT.
    for i in 0..300 {
        let mut cfg = *sim.bonds[0].config();
        cfg.lacp_activity = if i % 2 == 0 {
            LacpActivity::Passive
        } else {
            LacpActivity::Active
        };
        sim.bonds[0].set_config(sim.now, cfg).unwrap();
        sim.warp(10, 10);
    }
    sim.assert_rate_limit();
    let c = sim.bonds[0].member_view(MemberId(1)).unwrap().counters;
    assert!(c.tx_rate_limited > 0);
    let n = sim.lacpdus(0, 1).iter().filter(|&&t| t > 2000).count();
    assert!(n <= 3 * 3 + 3, "{n} LACPDUs in 3 s");
    sim.warp(3000, 100);
    assert!(sim.distributing(0, 1) && sim.distributing(1, 3));
}

#[test]
fn passive_sends_only_to_an_active_partner() {
    let mut sim = ovs_pair(|c| c.lacp_activity = LacpActivity::Passive);
    let mut cfg = *sim.bonds[1].config();
    cfg.lacp_activity = LacpActivity::Passive;
    sim.bonds[1].set_config(0, cfg).unwrap();
    sim.all_links(UP);
    sim.warp(10_000, 100);
    assert!(sim.sent.is_empty(), "two passive ends never speak");
    cfg.lacp_activity = LacpActivity::Active;
    sim.bonds[1].set_config(sim.now, cfg).unwrap();
    sim.deliver();
    sim.warp(3000, 100);
    assert!(sim.distributing(0, 1) && sim.distributing(0, 2));
    assert!(!sim.lacpdus(0, 1).is_empty());
}

#[test]
fn min_links_takes_the_bond_down() {
    let mut sim = ovs_pair(|c| c.min_links = 2);
    negotiate(&mut sim);
    assert_eq!(sim.bonds[0].view().carrier, OnOff::On);
    sim.link(0, 1, Link::Down);
    assert_eq!(sim.bonds[0].view().carrier, OnOff::Off);
    assert!(!sim.distributing(0, 2));
    assert_eq!(sim.bonds[0].member_for(0), None);
    assert!(sim
        .events_of(0)
        .contains(&Event::Carrier { state: OnOff::Off }));
}

#[test]
fn link_down_moves_only_that_members_buckets() {
    let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2, 3], |_| {});
    let b1 = bond(0x66, Mode::Lacp, 4, &[4, 5, 6], |_| {});
    let mut sim = Sim::new(vec![b0, b1]);
    for i in 1..=3 {
        sim.wire(0, i, 1, i + 3);
    }
    sim.all_links(UP);
    sim.warp(3000, 100);
    let before = *sim.bonds[0].tx_table().buckets();
    sim.link(0, 2, Link::Down);
    let after = *sim.bonds[0].tx_table().buckets();
    for (a, b) in before.iter().zip(after.iter()) {
        if *a != Some(MemberId(2)) {
            assert_eq!(a, b);
        } else {
            assert_ne!(*b, Some(MemberId(2)));
        }
    }
    assert_eq!(
        sim.bonds[0]
            .member_view(MemberId(2))
            .unwrap()
            .counters
            .link_down,
        1
    );
}

#[test]
fn active_backup_and_balance_xor_need_no_protocol() {
    let mut ab = bond(0x55, Mode::ActiveBackup, 0, &[1, 2], |_| {});
    ab.set_link(0, MemberId(2), UP).unwrap();
    ab.set_link(0, MemberId(1), UP).unwrap();
    assert_eq!(ab.member_for(1), Some(MemberId(2)), "first up member, kept");
    ab.set_link(1, MemberId(2), Link::Down).unwrap();
    assert_eq!(ab.member_for(1), Some(MemberId(1)));
    assert!(!ab
        .drain_outputs()
        .iter()
        .any(|o| matches!(o, Output::Transmit { .. })));
    let mut x = bond(0x55, Mode::BalanceXor, 0, &[1, 2], |_| {});
    x.set_link(0, MemberId(1), UP).unwrap();
    x.set_link(0, MemberId(2), UP).unwrap();
    assert_eq!(x.tx_table().members(), &[MemberId(1), MemberId(2)]);
    assert_eq!(x.next_deadline(), None);
}

#[test]
fn marker_information_is_answered() {
    let mut sim = ovs_pair(|_| {});
    negotiate(&mut sim);
    let info = MarkerPdu {
        kind: MarkerKind::Information,
        requester_port: 3,
        requester_system: mac(0x66, 0),
        transaction_id: 42,
    };
    sim.bonds[0]
        .receive(sim.now, MemberId(1), &info.to_frame(mac(0x66, 3)))
        .unwrap();
    let out = sim.bonds[0].drain_outputs();
    let reply = MarkerPdu {
        kind: MarkerKind::Response,
        ..info
    }
    .to_frame(mac(0x55, 1));
    assert!(out.contains(&Output::Transmit {
        member: MemberId(1),
        frame: reply
    }));
    // A flood of Marker Information: at most 7 responses a second (10 Slow Protocols
    // frames with the 3 LACPDUs).
    for i in 0..50 {
        let m = MarkerPdu {
            transaction_id: i,
            ..info
        };
        sim.bonds[0]
            .receive(sim.now, MemberId(1), &m.to_frame(mac(0x66, 3)))
            .unwrap();
    }
    let replies = sim.bonds[0]
        .drain_outputs()
        .iter()
        .filter(|o| matches!(o, Output::Transmit { frame, .. } if frame[16] == 2))
        .count();
    assert_eq!(replies, 6);
    let c = sim.bonds[0].member_view(MemberId(1)).unwrap().counters;
    assert_eq!((c.tx_marker_response, c.tx_marker_rate_limited), (7, 44));
}

#[test]
fn next_deadline_is_enough_to_drive_the_engine() {
    // Poll only at next_deadline: the same negotiation as with ticks.
    let mut sim = ovs_pair(|_| {});
    sim.all_links(UP);
    for _ in 0..200 {
        let next = sim
            .bonds
            .iter()
            .filter_map(|b| b.next_deadline())
            .min()
            .unwrap();
        if next > 3000 {
            break;
        }
        sim.warp(
            next.max(sim.now + 1) - sim.now,
            next.max(sim.now + 1) - sim.now,
        );
    }
    assert!(sim.distributing(0, 1) && sim.distributing(1, 4));
}

/// OVS "lacp - multi port config": system id and priority, port ids and priorities, key
/// appear as configured in what the bond sends (keys are 10 bits here, as in Linux: OVS's
/// 3333 is refused).
#[test]
fn multi_port_config() {
    use qbridge_lacp::{Bond, BondConfig, ConfigError, MemberConfig, SlowPdu};
    use qbridge_wire::MacAddr;
    // OVS uses 11:22:33:44:55:66, a group address, which Linux's ad_actor_system refuses
    // and so does this engine.
    let group = MacAddr([0x11, 0x22, 0x33, 0x44, 0x55, 0x66]);
    let refused = Bond::new(BondConfig::new(Mode::Lacp, group)).unwrap_err();
    assert_eq!(refused, ConfigError::GroupSystemId(group));
    let system = MacAddr([0x10, 0x22, 0x33, 0x44, 0x55, 0x66]);
    let mut cfg = BondConfig::new(Mode::Lacp, system);
    cfg.system_priority = 54321;
    cfg.key = 3333;
    assert_eq!(Bond::new(cfg).unwrap_err(), ConfigError::KeyTooLarge(3333));
    cfg.key = 333;
    let mut b = Bond::new(cfg).unwrap();
    for (id, port, prio) in [(1, 11, 111), (2, 22, 222)] {
        let mc = MemberConfig {
            mac: mac(0x11, id as u8),
            port_number: port,
            port_priority: prio,
        };
        b.add_member(0, MemberId(id), mc).unwrap();
        b.set_link(0, MemberId(id), UP).unwrap();
    }
    let dup = MemberConfig {
        mac: mac(0x11, 3),
        port_number: 22,
        port_priority: 1,
    };
    assert_eq!(
        b.add_member(0, MemberId(3), dup),
        Err(ConfigError::DuplicatePortNumber {
            port: 22,
            by: MemberId(2)
        })
    );
    let sent: Vec<_> = b
        .drain_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::Transmit { member, frame } => Some((member, frame)),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 2);
    for (member, frame) in sent {
        let Ok(SlowPdu::Lacp(p)) = qbridge_lacp::parse_frame(&frame) else {
            panic!()
        };
        let (port, prio) = if member == MemberId(1) {
            (11, 111)
        } else {
            (22, 222)
        };
        assert_eq!((p.actor.system, p.actor.system_priority), (system, 54321));
        assert_eq!(
            (p.actor.port, p.actor.port_priority, p.actor.key >> 6),
            (port, prio, 333)
        );
        assert_eq!(
            words(p.actor.state),
            "activity aggregation defaulted expired",
            "slow rate, no partner yet"
        );
        assert_eq!(
            p.partner,
            qbridge_lacp::PortInfo {
                state: PortState(PortState::TIMEOUT),
                ..Default::default()
            }
        );
    }
}

/// Dual homing: when every link to switch A loses its partner, the bond moves to the
/// aggregator of switch B (and stays there when A comes back: `ad_select stable`).
#[test]
fn active_aggregator_moves_when_its_partner_is_gone() {
    let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2, 5], |_| {});
    let b1 = bond(0x66, Mode::Lacp, 4, &[3, 4], |_| {});
    let b2 = bond(0x77, Mode::Lacp, 4, &[6], |_| {});
    let mut sim = Sim::new(vec![b0, b1, b2]);
    sim.wire(0, 1, 1, 3);
    sim.wire(0, 2, 1, 4);
    sim.wire(0, 5, 2, 6);
    sim.all_links(UP);
    sim.warp(3000, 100);
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(1), MemberId(2)]
    );
    sim.set_wire(0, WireState::Cut);
    sim.set_wire(1, WireState::Cut);
    // Expired after 3 s (partner kept: still the active aggregator, nothing carries), then
    // defaulted after 3 s more: switch B's aggregator takes over after its 2 s wait.
    sim.warp(3000, 100);
    assert_eq!(sim.bonds[0].carrier(), OnOff::Off);
    sim.warp(3000 + 2100, 100);
    assert_eq!(sim.bonds[0].tx_table().members(), &[MemberId(5)]);
    assert!(sim.distributing(2, 6));
    sim.set_wire(0, WireState::Connected);
    sim.set_wire(1, WireState::Connected);
    sim.warp(35_000, 500);
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(5)],
        "stable selection"
    );
    assert_eq!(sim.mux(0, 1), MuxState::Waiting);
    sim.assert_rate_limit();
}
