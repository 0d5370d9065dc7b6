//! Property tests: random bytes to the parser and the hash, random call sequences to a bond
//! (never a panic; outputs well formed; the rate limit; the table names only members that
//! carry traffic), and random link trouble between two bonds that must still converge.

mod common;

use std::collections::BTreeMap;

use common::{bond, Sim, WireState, UP};
use proptest::prelude::*;
use qbridge_lacp::{
    flow_hash, parse_frame, Bond, BondConfig, Duplex, Fallback, HashPolicy, LacpActivity, LacpRate,
    Lacpdu, Link, MarkerKind, MarkerPdu, MemberConfig, MemberId, Mode, OnOff, Output, PortInfo,
    PortState, SlowPdu,
};
use qbridge_wire::MacAddr;

proptest! {
    #[test]
    fn parser_and_hash_are_total(bytes in proptest::collection::vec(any::<u8>(), 0..200), prefix in any::<bool>()) {
        let mut f = bytes;
        if prefix && f.len() >= 16 {
            // Give the parser a Slow Protocols header so it reaches the TLVs.
            f[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0, 0, 2]);
            f[12..14].copy_from_slice(&[0x88, 0x09]);
            f[14] %= 3;
        }
        if let Ok(SlowPdu::Lacp(p)) = parse_frame(&f) {
            // What parses re-emits to a frame that parses to the same PDU (as version 1).
            let again = parse_frame(&p.to_frame(MacAddr([2, 0, 0, 0, 0, 1])));
            prop_assert_eq!(again, Ok(SlowPdu::Lacp(Lacpdu { version: 1, ..p })));
        }
        for policy in [HashPolicy::Layer2, HashPolicy::Layer2Vlan, HashPolicy::Layer34, HashPolicy::InnerLayer34] {
            let _ = flow_hash(&f, policy);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(u8, u16),
    Remove(u8),
    Link(u8, u8),
    Bytes(u8, Vec<u8>),
    Pdu(u8, [u16; 4], u8, [u16; 4], u8, u8),
    Marker(u8, u32),
    Advance(u16),
    Back(u16),
    /// Near the end of the clock: timers must saturate, not overflow.
    Jump,
    Config(u8, u8, u8, u8, u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, 0u16..8).prop_map(|(i, p)| Op::Add(i, p)),
        (0u8..6).prop_map(Op::Remove),
        (0u8..6, 0u8..4).prop_map(|(i, l)| Op::Link(i, l)),
        (0u8..6, proptest::collection::vec(any::<u8>(), 0..140)).prop_map(|(i, b)| Op::Bytes(i, b)),
        (
            0u8..6,
            any::<[u16; 4]>(),
            any::<u8>(),
            any::<[u16; 4]>(),
            any::<u8>(),
            0u8..3
        )
            .prop_map(|(i, a, sa, p, sp, sys)| Op::Pdu(i, a, sa, p, sp, sys)),
        (0u8..6, any::<u32>()).prop_map(|(i, t)| Op::Marker(i, t)),
        (0u16..6000).prop_map(Op::Advance),
        (0u16..3000).prop_map(Op::Back),
        Just(Op::Jump),
        (0u8..3, 0u8..2, 0u8..2, 0u8..4, 0u16..1100)
            .prop_map(|(m, r, a, f, k)| Op::Config(m, r, a, f, k)),
    ]
}

fn info(v: [u16; 4], state: u8, sys: u8) -> PortInfo {
    PortInfo {
        system_priority: v[0],
        system: MacAddr([2, 0, 0, 0, 0, sys]),
        key: v[1],
        port_priority: v[2],
        port: v[3],
        state: PortState(state),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn random_calls_never_panic_and_keep_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut cfg = BondConfig::new(Mode::Lacp, MacAddr([2, 0, 0, 0, 0, 0xee]));
        cfg.lacp_rate = LacpRate::Fast;
        let mut b = Bond::new(cfg).unwrap();
        let mut now: u64 = 1_000_000;
        let mut tx: BTreeMap<MemberId, Vec<u64>> = BTreeMap::new();
        let mut carrying: BTreeMap<MemberId, OnOff> = BTreeMap::new();
        for op in ops {
            let id = |i: u8| MemberId(u32::from(i));
            match op {
                Op::Add(i, p) => {
                    let mc = MemberConfig { mac: MacAddr([2, 0, 0, 0, 1, i]), port_number: p, port_priority: 1 };
                    let _ = b.add_member(now, id(i), mc);
                }
                Op::Remove(i) => {
                    if b.remove_member(now, id(i)).is_ok() {
                        tx.remove(&id(i));
                    }
                }
                Op::Link(i, l) => {
                    let link = match l {
                        0 => Link::Down,
                        1 => Link::Up { speed_mbps: 1000, duplex: Duplex::Full },
                        2 => Link::Up { speed_mbps: 10_000, duplex: Duplex::Full },
                        _ => Link::Up { speed_mbps: 100, duplex: Duplex::Half },
                    };
                    let _ = b.set_link(now, id(i), link);
                }
                Op::Bytes(i, bytes) => { let _ = b.receive(now, id(i), &bytes); }
                Op::Pdu(i, a, sa, p, sp, sys) => {
                    let pdu = Lacpdu { version: 1 + sys % 2, actor: info(a, sa, sys), partner: info(p, sp, 0xee), collector_max_delay: 0 };
                    let _ = b.receive(now, id(i), &pdu.to_frame(MacAddr([2, 0, 0, 0, 2, i])));
                }
                Op::Marker(i, t) => {
                    let m = MarkerPdu { kind: MarkerKind::Information, requester_port: 1, requester_system: MacAddr([2, 0, 0, 0, 3, 0]), transaction_id: t };
                    let _ = b.receive(now, id(i), &m.to_frame(MacAddr([2, 0, 0, 0, 3, 0])));
                }
                Op::Advance(ms) => {
                    now = now.saturating_add(u64::from(ms));
                    b.poll(now);
                }
                Op::Back(ms) => b.poll(now - u64::from(ms)),
                Op::Jump => {
                    now = now.max(u64::MAX - 5000);
                    b.poll(now);
                }
                Op::Config(m, r, a, f, k) => {
                    let mut c = *b.config();
                    c.mode = [Mode::Lacp, Mode::ActiveBackup, Mode::BalanceXor][usize::from(m)];
                    c.lacp_rate = if r == 0 { LacpRate::Fast } else { LacpRate::Slow };
                    c.lacp_activity = if a == 0 { LacpActivity::Active } else { LacpActivity::Passive };
                    c.fallback = if f % 2 == 0 { Fallback::Off } else { Fallback::ActiveBackup };
                    c.min_links = u16::from(f);
                    c.key = k;
                    let _ = b.set_config(now, c);
                }
            }
            for out in b.drain_outputs() {
                match out {
                    Output::Transmit { member, frame } => {
                        match parse_frame(&frame) {
                            Ok(SlowPdu::Lacp(_)) => {
                                prop_assert_eq!(b.config().mode, Mode::Lacp);
                                let t = tx.entry(member).or_default();
                                t.push(now);
                                if t.len() >= 4 {
                                    let w = &t[t.len() - 4..];
                                    prop_assert!(w[3] - w[0] >= 1000, "rate limit broken: {:?}", w);
                                }
                            }
                            Ok(SlowPdu::Marker(m)) => prop_assert_eq!(m.kind, MarkerKind::Response),
                            Err(e) => prop_assert!(false, "emitted a bad frame: {}", e),
                        }
                    }
                    Output::MemberState { member, distributing, .. } => { carrying.insert(member, distributing); }
                    Output::Event(_) => {}
                }
            }
            for m in b.tx_table().members() {
                prop_assert_eq!(carrying.get(m), Some(&OnOff::On));
                prop_assert_eq!(b.member_view(*m).map(|v| v.distributing), Some(OnOff::On));
            }
            let view = b.view();
            let n = b.tx_table().members().len();
            if b.config().mode == Mode::ActiveBackup || view.fallback_active == OnOff::On {
                prop_assert!(n <= 1, "active-backup with {} members", n);
            } else if b.config().mode == Mode::Lacp && n > 0 {
                prop_assert!(n >= usize::from(b.config().min_links), "below min_links");
            }
            prop_assert_eq!(view.carrier == OnOff::On, n > 0);
            if let Some(d) = b.next_deadline() {
                prop_assert!(d <= now.saturating_add(100_000));
            }
            let _ = b.view();
        }
    }
}

/// `cases` random histories from a fixed seed, so the test command is repeatable (a history that
/// fails is a finding in the engine, kept in `properties.proptest-regressions`); set
/// `PROPTEST_RNG_SEED` (any number) to explore others.
fn fixed_seed(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::with_cases(cases);
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = proptest::test_runner::RngSeed::Fixed(0x8021_a302);
    }
    c
}

proptest! {
    #![proptest_config(fixed_seed(48))]
    #[test]
    fn two_bonds_converge_after_any_trouble(trouble in proptest::collection::vec((0usize..3, 0u8..4, 1u16..4000), 0..25)) {
        let b0 = bond(0x55, Mode::Lacp, 2, &[1, 2, 3], |_| {});
        let b1 = bond(0x66, Mode::Lacp, 4, &[4, 5, 6], |c| c.lacp_rate = LacpRate::Slow);
        let mut sim = Sim::new(vec![b0, b1]);
        for i in 1..=3 {
            sim.wire(0, i, 1, i + 3);
        }
        sim.all_links(UP);
        for (w, what, ms) in trouble {
            let wire = sim.wires[w];
            match what {
                0 => sim.set_wire(w, WireState::Cut),
                1 => sim.set_wire(w, WireState::Connected),
                2 => sim.link(wire.a.0, wire.a.1 .0, Link::Down),
                _ => sim.link(wire.a.0, wire.a.1 .0, UP),
            }
            sim.warp(u64::from(ms), 100);
        }
        for w in 0..3 {
            sim.set_wire(w, WireState::Connected);
        }
        sim.all_links(UP);
        // Slow side: up to 30 s until a PDU, then the 2 s wait.
        sim.warp(35_000, 500);
        for (b, m) in [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6)] {
            prop_assert!(sim.distributing(b, m), "bond {} member {} not distributing", b, m);
        }
        sim.assert_rate_limit();
    }
}
