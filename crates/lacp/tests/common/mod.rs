//! The simulated harness: LACP systems (bonds) whose members are wired member to member,
//! a simulated clock advanced in ticks, every transmitted frame logged, wires that can be cut
//! silently (frames lost, carrier kept: Open vSwitch's patch-port redirect in `lacp.at`).
#![allow(dead_code)]

use qbridge_lacp::{
    parse_frame, Bond, BondConfig, Duplex, Event, LacpRate, Link, MemberConfig, MemberId, Millis,
    Mode, MuxState, OnOff, Output, SlowPdu,
};
use qbridge_wire::MacAddr;

pub const UP: Link = Link::Up {
    speed_mbps: 10_000,
    duplex: Duplex::Full,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireState {
    Connected,
    Cut,
}

#[derive(Clone, Copy, Debug)]
pub struct Wire {
    pub a: (usize, MemberId),
    pub b: (usize, MemberId),
    pub state: WireState,
}

#[derive(Debug, Default)]
pub struct Sim {
    pub now: Millis,
    pub bonds: Vec<Bond>,
    pub wires: Vec<Wire>,
    /// (time, bond, member, frame) of every transmission.
    pub sent: Vec<(Millis, usize, MemberId, Vec<u8>)>,
    pub events: Vec<(Millis, usize, Event)>,
    pub state_changes: Vec<(Millis, usize, MemberId, OnOff)>,
}

pub fn mac(a: u8, b: u8) -> MacAddr {
    MacAddr([0xaa, a, 0xaa, a, 0, b])
}

/// A bond in `mode` with system `aa:S:aa:S:00:00`, fast rate, and `ports` members whose ids
/// and LACP port numbers are the given numbers.
pub fn bond(
    system: u8,
    mode: Mode,
    key: u16,
    ports: &[u16],
    tweak: impl FnOnce(&mut BondConfig),
) -> Bond {
    let mut cfg = BondConfig::new(mode, mac(system, 0));
    cfg.lacp_rate = LacpRate::Fast;
    cfg.system_priority = 65534;
    cfg.key = key;
    tweak(&mut cfg);
    let mut b = Bond::new(cfg).unwrap();
    for &p in ports {
        let mc = MemberConfig {
            mac: mac(system, p as u8),
            port_number: p,
            port_priority: 65535,
        };
        b.add_member(0, MemberId(u32::from(p)), mc).unwrap();
    }
    b
}

impl Sim {
    pub fn new(bonds: Vec<Bond>) -> Sim {
        Sim {
            bonds,
            ..Sim::default()
        }
    }

    /// Wires bond `a`'s member `ma` to bond `b`'s member `mb`.
    pub fn wire(&mut self, a: usize, ma: u32, b: usize, mb: u32) {
        self.wires.push(Wire {
            a: (a, MemberId(ma)),
            b: (b, MemberId(mb)),
            state: WireState::Connected,
        });
    }

    pub fn set_wire(&mut self, i: usize, state: WireState) {
        self.wires[i].state = state;
    }

    /// Carrier up (or down) on both ends of every wire.
    pub fn all_links(&mut self, link: Link) {
        for w in self.wires.clone() {
            for (b, m) in [w.a, w.b] {
                self.bonds[b].set_link(self.now, m, link).unwrap();
            }
        }
        self.deliver();
    }

    pub fn link(&mut self, b: usize, m: u32, link: Link) {
        self.bonds[b].set_link(self.now, MemberId(m), link).unwrap();
        self.deliver();
    }

    fn peer(&self, b: usize, m: MemberId) -> Option<(usize, MemberId)> {
        self.wires.iter().find_map(|w| match w.state {
            WireState::Cut => None,
            WireState::Connected if w.a == (b, m) => Some(w.b),
            WireState::Connected if w.b == (b, m) => Some(w.a),
            WireState::Connected => None,
        })
    }

    /// Moves frames until no bond has output left.
    pub fn deliver(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            for b in 0..self.bonds.len() {
                for out in self.bonds[b].drain_outputs() {
                    any = true;
                    match out {
                        Output::Transmit { member, frame } => {
                            self.sent.push((self.now, b, member, frame.clone()));
                            if let Some((pb, pm)) = self.peer(b, member) {
                                self.bonds[pb].receive(self.now, pm, &frame).unwrap();
                            }
                        }
                        Output::MemberState {
                            member,
                            distributing,
                            ..
                        } => {
                            self.state_changes.push((self.now, b, member, distributing));
                        }
                        Output::Event(e) => self.events.push((self.now, b, e)),
                    }
                }
            }
            if !any {
                return;
            }
        }
        panic!("frames still moving after 1000 rounds");
    }

    /// Advances the clock by `ms` in `tick`-ms steps, polling every bond at every tick.
    pub fn warp(&mut self, ms: Millis, tick: Millis) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + tick).min(end);
            for b in &mut self.bonds {
                b.poll(self.now);
            }
            self.deliver();
        }
    }

    pub fn mux(&self, b: usize, m: u32) -> MuxState {
        self.bonds[b].member_view(MemberId(m)).unwrap().mux_state
    }

    pub fn distributing(&self, b: usize, m: u32) -> bool {
        self.bonds[b].member_view(MemberId(m)).unwrap().distributing == OnOff::On
    }

    /// LACPDUs `b`'s member `m` sent, with their times.
    pub fn lacpdus(&self, b: usize, m: u32) -> Vec<Millis> {
        self.sent
            .iter()
            .filter(|(_, sb, sm, f)| {
                *sb == b && *sm == MemberId(m) && matches!(parse_frame(f), Ok(SlowPdu::Lacp(_)))
            })
            .map(|(t, ..)| *t)
            .collect()
    }

    /// Asserts no member of any bond sent more than 3 LACPDUs within any 1000 ms.
    pub fn assert_rate_limit(&self) {
        let mut per: std::collections::BTreeMap<(usize, MemberId), Vec<Millis>> =
            Default::default();
        for (t, b, m, f) in &self.sent {
            if matches!(parse_frame(f), Ok(SlowPdu::Lacp(_))) {
                per.entry((*b, *m)).or_default().push(*t);
            }
        }
        for ((b, m), times) in per {
            for w in times.windows(4) {
                assert!(
                    w[3] - w[0] >= 1000,
                    "bond {b} {m}: 4 LACPDUs within 1 s: {w:?}"
                );
            }
        }
    }

    pub fn events_of(&self, b: usize) -> Vec<Event> {
        self.events
            .iter()
            .filter(|(_, eb, _)| *eb == b)
            .map(|(_, _, e)| *e)
            .collect()
    }
}
