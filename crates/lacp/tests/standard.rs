//! 802.1AX details beyond the OVS timelines: keys from speed and duplex, Individual ports,
//! higher-version PDUs, bad-PDU counters, ip-link words.

mod common;

use common::{bond, mac, Sim, UP};
use qbridge_lacp::{
    parse_frame, Duplex, Event, LacpActivity, LacpRate, Link, MemberId, Mode, OnOff, Output,
    PortState, RxState, SlowPdu,
};

fn pair(ports0: &[u16], ports1: &[u16]) -> Sim {
    let mut sim = Sim::new(vec![
        bond(0x55, Mode::Lacp, 2, ports0, |_| {}),
        bond(0x66, Mode::Lacp, 4, ports1, |_| {}),
    ]);
    for (&a, &b) in ports0.iter().zip(ports1) {
        sim.wire(0, u32::from(a), 1, u32::from(b));
    }
    sim
}

#[test]
fn different_speeds_do_not_aggregate() {
    let mut sim = pair(&[1, 2], &[3, 4]);
    sim.all_links(UP);
    let slow = Link::Up {
        speed_mbps: 1000,
        duplex: Duplex::Full,
    };
    sim.link(0, 2, slow);
    sim.link(1, 4, slow);
    sim.warp(3000, 100);
    let k1 = sim.bonds[0].member_view(MemberId(1)).unwrap().actor.key;
    let k2 = sim.bonds[0].member_view(MemberId(2)).unwrap().actor.key;
    assert_ne!(k1, k2);
    assert_eq!(k1 >> 6, 2, "the administrative key is the high bits");
    // One aggregator per speed; the bond uses one of them.
    assert_eq!(sim.bonds[0].tx_table().members().len(), 1);
}

#[test]
fn half_duplex_is_lacp_disabled_and_individual() {
    let mut sim = pair(&[1, 2], &[3, 4]);
    sim.all_links(UP);
    let half = Link::Up {
        speed_mbps: 100,
        duplex: Duplex::Half,
    };
    sim.link(0, 2, half);
    sim.warp(3000, 100);
    let v = sim.bonds[0].member_view(MemberId(2)).unwrap();
    assert_eq!(v.rx_state, RxState::LacpDisabled);
    assert!(!v.actor.state.has(PortState::AGGREGATION));
    assert!(!sim.distributing(0, 2));
    assert!(sim.distributing(0, 1));
    // LACP_DISABLED sends nothing.
    let t = sim.now;
    sim.warp(5000, 100);
    assert!(sim.lacpdus(0, 2).iter().all(|&s| s < t));
}

#[test]
fn version_2_pdus_negotiate() {
    // No wire: the test carries frames, turning bond1's into version 2 PDUs with a Port
    // Algorithm TLV where a version 1 PDU has its Terminator.
    let mut b0 = bond(0x55, Mode::Lacp, 2, &[1], |_| {});
    let mut b1 = bond(0x66, Mode::Lacp, 4, &[3], |_| {});
    b0.set_link(0, MemberId(1), UP).unwrap();
    b1.set_link(0, MemberId(3), UP).unwrap();
    let mut v2_seen = 0;
    for now in (0..4000).step_by(100) {
        b0.poll(now);
        b1.poll(now);
        for _ in 0..10 {
            for out in b0.drain_outputs() {
                if let Output::Transmit { frame, .. } = out {
                    b1.receive(now, MemberId(3), &frame).unwrap();
                }
            }
            for out in b1.drain_outputs() {
                if let Output::Transmit { mut frame, .. } = out {
                    frame[15] = 2;
                    frame[14 + 58] = 4;
                    frame[14 + 59] = 6;
                    v2_seen += 1;
                    b0.receive(now, MemberId(1), &frame).unwrap();
                }
            }
        }
    }
    assert!(v2_seen > 0);
    let v = b0.member_view(MemberId(1)).unwrap();
    assert_eq!(v.rx_state, RxState::Current);
    assert_eq!((v.counters.rx_bad_tlv, v.counters.rx_lacpdu), (0, v2_seen));
    assert_eq!(v.distributing, OnOff::On);
    assert_eq!(b1.member_view(MemberId(3)).unwrap().distributing, OnOff::On);
}

#[test]
fn bad_pdus_are_counted_by_reason() {
    let mut sim = pair(&[1], &[3]);
    sim.all_links(UP);
    let good = sim.sent[0].3.clone();
    let b = &mut sim.bonds[0];
    let m = MemberId(1);
    b.receive(0, m, &good[..100]).unwrap();
    let mut f = good.clone();
    f[14] = 3;
    b.receive(0, m, &f).unwrap();
    let mut f = good.clone();
    f[14 + 2] = 9;
    b.receive(0, m, &f).unwrap();
    let mut f = good;
    f[15] = 0;
    b.receive(0, m, &f).unwrap();
    let c = b.member_view(m).unwrap().counters;
    assert_eq!(
        (
            c.rx_bad_length,
            c.rx_unknown_subtype,
            c.rx_bad_tlv,
            c.rx_bad_version
        ),
        (1, 1, 1, 1)
    );
    let bad = b
        .drain_outputs()
        .iter()
        .filter(|o| matches!(o, Output::Event(Event::BadPdu { .. })))
        .count();
    assert_eq!(bad, 4);
    assert!(b.receive(0, MemberId(9), &[]).is_err(), "unknown member");
}

#[test]
fn emitted_lacpdu_carries_the_standard_fields() {
    let mut sim = pair(&[1], &[3]);
    sim.all_links(UP);
    sim.warp(3000, 100);
    let (_, _, _, f) = sim.sent.iter().rev().find(|(_, b, ..)| *b == 0).unwrap();
    assert_eq!(&f[..6], &[0x01, 0x80, 0xc2, 0, 0, 2]);
    assert_eq!(&f[6..12], mac(0x55, 1).as_bytes());
    assert_eq!(&f[12..16], &[0x88, 0x09, 1, 1]);
    let Ok(SlowPdu::Lacp(p)) = parse_frame(f) else {
        panic!("not a LACPDU")
    };
    assert_eq!(p.actor.system, mac(0x55, 0));
    assert_eq!(p.actor.port, 1);
    assert_eq!(p.partner.system, mac(0x66, 0));
    assert_eq!(p.partner.port, 3);
}

#[test]
fn slow_rate_expires_after_90_seconds() {
    let mut sim = Sim::new(vec![
        bond(0x55, Mode::Lacp, 2, &[1], |c| c.lacp_rate = LacpRate::Slow),
        bond(0x66, Mode::Lacp, 4, &[3], |c| c.lacp_rate = LacpRate::Slow),
    ]);
    sim.wire(0, 1, 1, 3);
    sim.all_links(UP);
    sim.warp(5000, 100);
    assert!(sim.distributing(0, 1));
    let last = *sim.lacpdus(1, 3).last().unwrap();
    sim.set_wire(0, common::WireState::Cut);
    sim.warp(last + 89_999 - sim.now, 1000);
    assert_eq!(
        sim.bonds[0].member_view(MemberId(1)).unwrap().rx_state,
        RxState::Current
    );
    sim.warp(1, 1);
    assert_eq!(
        sim.bonds[0].member_view(MemberId(1)).unwrap().rx_state,
        RxState::Expired
    );
    assert_eq!(sim.bonds[0].view().carrier, OnOff::Off);
}

#[test]
fn ip_link_words() {
    for m in [Mode::ActiveBackup, Mode::BalanceXor, Mode::Lacp] {
        assert_eq!(Mode::from_word(m.word()), Some(m));
    }
    assert_eq!(LacpRate::from_word("fast"), Some(LacpRate::Fast));
    assert_eq!(LacpActivity::from_word("off"), Some(LacpActivity::Passive));
    assert_eq!(Mode::from_word("balance-rr"), None);
}

fn dual_homed() -> Sim {
    let mut sim = Sim::new(vec![
        bond(0x55, Mode::Lacp, 2, &[1, 2, 5], |_| {}),
        bond(0x66, Mode::Lacp, 4, &[3, 4], |_| {}),
        bond(0x77, Mode::Lacp, 4, &[6], |_| {}),
    ]);
    sim.wire(0, 1, 1, 3);
    sim.wire(0, 2, 1, 4);
    sim.wire(0, 5, 2, 6);
    sim
}

#[test]
fn larger_aggregator_wins_when_links_come_up_within_the_wait() {
    let mut sim = dual_homed();
    sim.link(0, 5, UP);
    sim.link(2, 6, UP);
    sim.warp(1500, 100);
    for (b, m) in [(0, 1), (0, 2), (1, 3), (1, 4)] {
        sim.link(b, m, UP);
    }
    sim.warp(3000, 100);
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(1), MemberId(2)]
    );
    assert!(!sim.distributing(0, 5));
}

#[test]
fn attached_aggregator_stays_when_a_larger_one_appears_later() {
    let mut sim = dual_homed();
    sim.link(0, 5, UP);
    sim.link(2, 6, UP);
    sim.warp(3000, 100);
    assert_eq!(sim.bonds[0].tx_table().members(), &[MemberId(5)]);
    for (b, m) in [(0, 1), (0, 2), (1, 3), (1, 4)] {
        sim.link(b, m, UP);
    }
    sim.warp(3000, 100);
    assert_eq!(
        sim.bonds[0].tx_table().members(),
        &[MemberId(5)],
        "ad_select stable"
    );
}
