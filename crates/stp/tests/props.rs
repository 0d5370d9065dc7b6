//! Property tests: the BPDU parser takes any bytes without panicking (and what it accepts
//! re-emits to bytes it parses the same way); the engine takes any sequence of events —
//! garbage and mutated BPDUs, ticks, link flaps, configuration changes — without panicking
//! or spinning, and two bridges wired together always agree on one root.

use proptest::prelude::*;
use qbridge_stp::{bpdu, BridgeConfig, Cost, Duplex, Link, Mode, OnOff, Output, PortFlag, Stp};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = bpdu::parse_frame(&bytes);
        if let Ok(b) = bpdu::parse(&bytes) {
            let again = bpdu::parse(&b.emit());
            prop_assert_eq!(again.map(|x| x.kind()), Ok(b.kind()));
        }
    }

    #[test]
    fn parser_on_mutated_valid_frames(flip in proptest::collection::vec((0usize..140, any::<u8>()), 1..6),
                                      cut in 0usize..140) {
        let mut f = bpdu::Bpdu::Rst(bpdu::ConfigBody {
            flags: 0x3c, root: qbridge_stp::BridgeId(1), root_path_cost: 5,
            bridge: qbridge_stp::BridgeId(2), port: qbridge_stp::PortId(0x8001),
            times: qbridge_stp::Times { message_age: 0, max_age: 20, hello_time: 2, forward_delay: 15 },
        }).emit_frame(bpdu::STP_GROUP_ADDRESS, [2, 0, 0, 0, 0, 1]);
        f.resize(140, 0);
        for (i, v) in flip { f[i] = v; }
        let _ = bpdu::parse_frame(&f[..cut]);
        let _ = bpdu::parse_frame(&f);
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Tick,
    Garbage(u16, Vec<u8>),
    Mutated(u16, usize, u8),
    Link(u16, bool, u32),
    Flag(u16, u8, bool),
    Cost(u16, u32),
    Prio(u16, u16),
    Mode(u8),
    Mcheck(u16),
    Region(u8),
    MstiPrio(u16, u16),
    RemovePort(u16),
    AddPort(u16),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => Just(Ev::Tick),
        1 => (1u16..5, proptest::collection::vec(any::<u8>(), 0..120)).prop_map(|(p, v)| Ev::Garbage(p, v)),
        3 => (1u16..5, 0usize..120, any::<u8>()).prop_map(|(p, i, v)| Ev::Mutated(p, i, v)),
        1 => (1u16..5, any::<bool>(), 0u32..100_000).prop_map(|(p, u, s)| Ev::Link(p, u, s)),
        1 => (1u16..5, 0u8..6, any::<bool>()).prop_map(|(p, f, o)| Ev::Flag(p, f, o)),
        1 => (1u16..5, 0u32..300_000_000).prop_map(|(p, c)| Ev::Cost(p, c)),
        1 => (1u16..5, 0u16..300).prop_map(|(p, c)| Ev::Prio(p, c)),
        1 => (0u8..3).prop_map(Ev::Mode),
        1 => (1u16..5).prop_map(Ev::Mcheck),
        1 => (0u8..4).prop_map(Ev::Region),
        1 => (0u16..4, 0u16..65_535).prop_map(|(t, p)| Ev::MstiPrio(t, p)),
        1 => (1u16..5).prop_map(Ev::RemovePort),
        1 => (1u16..5).prop_map(Ev::AddPort),
    ]
}

fn apply(stp: &mut Stp, e: &Ev, sample: &[Vec<u8>]) {
    match e {
        Ev::Tick => stp.tick(),
        Ev::Garbage(p, v) => {
            let _ = stp.receive(*p, v);
        }
        Ev::Mutated(p, i, v) => {
            if let Some(f) = sample.get(*i % sample.len().max(1)) {
                let mut f = f.clone();
                let at = *i % f.len().max(1);
                if let Some(b) = f.get_mut(at) {
                    *b = *v;
                }
                let _ = stp.receive(*p, &f);
            }
        }
        Ev::Link(p, up, s) => {
            let l = if *up {
                Link::Up {
                    speed_mbps: *s,
                    duplex: Duplex::Full,
                }
            } else {
                Link::Down
            };
            let _ = stp.set_link(*p, l);
        }
        Ev::Flag(p, f, o) => {
            let flag = [
                PortFlag::AdminEdge,
                PortFlag::AutoEdge,
                PortFlag::BpduGuard,
                PortFlag::BpduFilter,
                PortFlag::RootGuard,
                PortFlag::LoopGuard,
            ][usize::from(*f)];
            let _ = stp.set_port_flag(*p, flag, if *o { OnOff::On } else { OnOff::Off });
        }
        Ev::Cost(p, c) => {
            let _ = stp.set_port_cost(*p, Cost::Fixed(*c));
        }
        Ev::Prio(p, c) => {
            let _ = stp.set_port_priority(*p, *c);
        }
        Ev::Mode(m) => {
            let mode = [Mode::Stp, Mode::Rstp, Mode::Mstp][usize::from(*m)];
            let cfg = BridgeConfig {
                mode,
                ..stp.config().clone()
            };
            let _ = stp.set_config(cfg);
        }
        Ev::Mcheck(p) => {
            let _ = stp.mcheck(*p);
        }
        Ev::Region(n) => {
            let mut r = qbridge_stp::mst::Region::new("r", 1).unwrap();
            for m in 0..u16::from(*n) {
                r.map(10 + m, m + 1).unwrap();
            }
            stp.set_region(r);
        }
        Ev::MstiPrio(t, p) => {
            let _ = stp.set_msti_priority(qbridge_stp::TreeId(*t), *p);
            let _ = stp.set_msti_port(
                1,
                qbridge_stp::TreeId(*t),
                32,
                Cost::Fixed(u32::from(*p) + 1),
            );
        }
        Ev::RemovePort(p) => {
            let _ = stp.remove_port(*p);
        }
        Ev::AddPort(p) => {
            if stp.add_port(*p, [2, 0, 0, 0, *p as u8, 1]).is_ok() {
                let _ = stp.set_link(
                    *p,
                    Link::Up {
                        speed_mbps: 1000,
                        duplex: Duplex::Full,
                    },
                );
            }
        }
    }
}

fn bridge(mac_last: u8) -> Stp {
    let mut s = Stp::new([2, 0, 0, 0, 0, mac_last], BridgeConfig::default()).unwrap();
    for p in 1..=3 {
        s.add_port(p, [2, 0, 0, 0, p as u8, mac_last]).unwrap();
        s.set_link(
            p,
            Link::Up {
                speed_mbps: 1000,
                duplex: Duplex::Full,
            },
        )
        .unwrap();
    }
    s
}

fn frames(outs: &[Output]) -> Vec<Vec<u8>> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Bpdu { frame, .. } => Some(frame.clone()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn engine_survives_any_event_sequence(events in proptest::collection::vec(ev(), 0..80)) {
        let mut peer = bridge(9);
        // A peer in MSTP with the region Ev::Region(2) builds, so mutated MST BPDUs with
        // MSTI messages reach the bridge under test too.
        let cfg = BridgeConfig { mode: Mode::Mstp, ..BridgeConfig::default() };
        peer.set_config(cfg).unwrap();
        let mut r = qbridge_stp::mst::Region::new("r", 1).unwrap();
        r.map(10, 1).unwrap();
        r.map(11, 2).unwrap();
        peer.set_region(r);
        let mut sample = frames(&peer.take_outputs());
        for _ in 0..3 { peer.tick(); sample.extend(frames(&peer.take_outputs())); }
        let mut stp = bridge(1);
        for e in &events {
            apply(&mut stp, e, &sample);
            let _ = stp.take_outputs();
        }
        prop_assert_eq!(stp.runaway_runs(), 0);
        let _ = stp.show();
    }

    /// Two bridges on one point-to-point link, with random priorities: after a random
    /// prefix of ticks and settle time, both agree on the better bridge as root.
    #[test]
    fn two_bridges_agree_on_the_root(pa in 0u16..16, pb in 0u16..16, warm in 0u32..10) {
        let mk = |prio: u16, last: u8| {
            let cfg = BridgeConfig { priority: prio * 4096, ..BridgeConfig::default() };
            let mut s = Stp::new([2, 0, 0, 0, 0, last], cfg).unwrap();
            s.add_port(1, [2, 0, 0, 0, 1, last]).unwrap();
            s
        };
        let (mut a, mut b) = (mk(pa, 1), mk(pb, 2));
        for _ in 0..warm { a.tick(); b.tick(); }
        a.set_link(1, Link::Up { speed_mbps: 1000, duplex: Duplex::Full }).unwrap();
        b.set_link(1, Link::Up { speed_mbps: 1000, duplex: Duplex::Full }).unwrap();
        for _ in 0..30 {
            for _ in 0..50 {
                let fa = frames(&a.take_outputs());
                let fb = frames(&b.take_outputs());
                if fa.is_empty() && fb.is_empty() { break; }
                for f in fa { let _ = b.receive(1, &f); }
                for f in fb { let _ = a.receive(1, &f); }
            }
            a.tick(); b.tick();
        }
        let best = a.bridge_id().min(b.bridge_id());
        prop_assert_eq!(a.show().root_id, best);
        prop_assert_eq!(b.show().root_id, best);
    }
}
