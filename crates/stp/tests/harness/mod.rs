//! A simulated network for the engine: bridges (each an `Stp`), LANs `a`..`z` (a LAN hands
//! every BPDU sent on it to every other port attached to it), a clock of whole seconds, and
//! a parser for the topology language of Open vSwitch's `tests/test-stp.c` and
//! `tests/test-rstp.c` (our own implementation of the language, not their code):
//!
//! ```text
//! bridge N 0xID[^PRIO] = lanA[:cost][^portprio] 0 X _ ...   # create / reconfigure
//! bridge N ^ PRIO                                            # bridge priority
//! run N                                                      # 180 s, delivering until quiet
//! check N = [rootid:0xID[^PRIO]] root | F:cost F Di B Li Le D _ ...
//! ```
//!
//! `0` is a port on no LAN, `X` a port whose link is down, `_` leaves a port alone. A
//! check token names a port state (`F`, `Le`, `Di`/`B`/`Li` = discarding, `D` = disabled
//! role); `F:cost` also says "this is the root port and the root path cost is cost". Ports
//! a check does not mention must be disabled, as in the originals.

#![allow(dead_code)]

use qbridge_stp::{
    BridgeConfig, Cost, Duplex, Event, Link, Mode, Output, PointToPoint, PortRole, PortState,
    RootStatus, Stp,
};
use std::collections::VecDeque;

/// One simulated bridge.
pub struct SimBridge {
    pub stp: Stp,
    /// LAN index per port (port k at k-1); None = port on no LAN.
    pub lans: Vec<Option<usize>>,
    pub events: Vec<Event>,
    pub flushes: Vec<(u16, u16)>,
    pub sent: Vec<(u16, Vec<u8>)>,
}

/// The network.
pub struct Sim {
    pub mode: Mode,
    /// Region given to bridges created from now on (MSTP).
    pub region: Option<qbridge_stp::mst::Region>,
    pub default_cost: u32,
    pub bridges: Vec<SimBridge>,
    queue: VecDeque<(usize, u16, Vec<u8>)>,
    pub ticks: u64,
    pub delivered: u64,
}

fn mac_of(id: u64) -> [u8; 6] {
    let b = id.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Tokenizer of test-stp.c: runs of letters, numbers (0x hex too), or single characters.
fn tokens(line: &str) -> Vec<String> {
    let line = line.split('#').next().unwrap_or("");
    let c: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_whitespace() {
            i += 1;
            continue;
        }
        let s = i;
        if c[i].is_ascii_alphabetic() {
            while i < c.len() && c[i].is_ascii_alphabetic() {
                i += 1;
            }
        } else if c[i].is_ascii_digit() {
            if c[i] == '0' && i + 1 < c.len() && (c[i + 1] == 'x' || c[i + 1] == 'X') {
                i += 2;
                while i < c.len() && c[i].is_ascii_hexdigit() {
                    i += 1;
                }
            } else {
                while i < c.len() && c[i].is_ascii_digit() {
                    i += 1;
                }
            }
        } else {
            i += 1;
        }
        out.push(c[s..i].iter().collect());
    }
    out
}

fn int(t: &str) -> Result<u64, String> {
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).map_err(|e| format!("{t}: {e}"))
    } else {
        t.parse().map_err(|e| format!("{t}: {e}"))
    }
}

struct Toks {
    t: Vec<String>,
    i: usize,
}
impl Toks {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(|s| s.as_str())
    }
    fn eat(&mut self, want: &str) -> bool {
        if self.peek() == Some(want) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn int(&mut self) -> Result<u64, String> {
        let t = self.peek().ok_or("expected integer")?.to_string();
        if !t.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("expected integer, got {t}"));
        }
        self.i += 1;
        int(&t)
    }
}

impl Sim {
    pub fn new(mode: Mode, default_cost: u32) -> Self {
        Sim {
            mode,
            region: None,
            default_cost,
            bridges: Vec::new(),
            queue: VecDeque::new(),
            ticks: 0,
            delivered: 0,
        }
    }

    pub fn add_bridge(&mut self, id: u64) -> usize {
        let cfg = BridgeConfig {
            mode: self.mode,
            ..BridgeConfig::default()
        };
        let mut stp = Stp::new(mac_of(id), cfg).expect("valid config");
        if let Some(r) = &self.region {
            stp.set_region(r.clone());
        }
        self.bridges.push(SimBridge {
            stp,
            lans: Vec::new(),
            events: vec![],
            flushes: vec![],
            sent: vec![],
        });
        self.pump();
        self.bridges.len() - 1
    }

    pub fn set_bridge_priority(&mut self, b: usize, prio: u64) {
        let mut cfg = self.bridges[b].stp.config().clone();
        cfg.priority = ((prio.min(61440) as u16) / 4096) * 4096;
        self.bridges[b].stp.set_config(cfg).expect("valid priority");
        self.pump();
    }

    /// Attach or re-attach port `port` (1-based) of bridge `b` to `lan` (None = no LAN),
    /// link up with `cost`; creates the port if it is the next one.
    pub fn connect(&mut self, b: usize, port: u16, lan: Option<usize>, cost: u32) {
        let br = &mut self.bridges[b];
        let idx = usize::from(port) - 1;
        if idx == br.lans.len() {
            let m = [0x02, 0, (b >> 8) as u8, b as u8, 0, port as u8];
            br.stp.add_port(port, m).expect("new port");
            br.lans.push(lan);
        } else {
            br.stp.set_link(port, Link::Down).expect("port");
            br.lans[idx] = lan;
        }
        br.stp.set_port_cost(port, Cost::Fixed(cost)).expect("cost");
        br.stp
            .set_link(
                port,
                Link::Up {
                    speed_mbps: 100,
                    duplex: Duplex::Full,
                },
            )
            .expect("port");
        self.fix_p2p();
        self.pump();
    }

    pub fn disconnect(&mut self, b: usize, port: u16) {
        let br = &mut self.bridges[b];
        let idx = usize::from(port) - 1;
        if idx < br.lans.len() {
            br.stp.set_link(port, Link::Down).expect("port");
            br.lans[idx] = None;
        }
        self.fix_p2p();
        self.pump();
    }

    /// A LAN with exactly two ports on it is point-to-point; more is a shared segment.
    fn fix_p2p(&mut self) {
        let mut count = [0usize; 26];
        for br in &self.bridges {
            for l in br.lans.iter().flatten() {
                count[*l] += 1;
            }
        }
        for br in &mut self.bridges {
            for (i, l) in br.lans.iter().enumerate() {
                let p2p = match l {
                    Some(l) if count[*l] > 2 => PointToPoint::No,
                    _ => PointToPoint::Yes,
                };
                let _ = br.stp.set_port_p2p(i as u16 + 1, p2p);
            }
        }
    }

    /// Move every output to its LAN and deliver until nothing is left.
    pub fn pump(&mut self) {
        for _round in 0..100_000 {
            for b in 0..self.bridges.len() {
                let outs = self.bridges[b].stp.take_outputs();
                for o in outs {
                    match o {
                        Output::Bpdu { port, frame } => {
                            let lan = self.bridges[b]
                                .lans
                                .get(usize::from(port) - 1)
                                .copied()
                                .flatten();
                            self.bridges[b].sent.push((port, frame.clone()));
                            let Some(lan) = lan else { continue };
                            for (ob, obr) in self.bridges.iter().enumerate() {
                                for (op, ol) in obr.lans.iter().enumerate() {
                                    if *ol == Some(lan) && !(ob == b && op + 1 == usize::from(port))
                                    {
                                        self.queue.push_back((ob, op as u16 + 1, frame.clone()));
                                    }
                                }
                            }
                        }
                        Output::Event(e) => self.bridges[b].events.push(e),
                        Output::Flush { port, tree } => {
                            self.bridges[b].flushes.push((port, tree.0))
                        }
                        Output::PortState { .. } => {}
                    }
                }
            }
            let Some((b, port, frame)) = self.queue.pop_front() else {
                return;
            };
            self.delivered += 1;
            let _ = self.bridges[b].stp.receive(port, &frame);
        }
        panic!("network never went quiet");
    }

    pub fn tick(&mut self) {
        self.ticks += 1;
        for br in &mut self.bridges {
            br.stp.tick();
        }
        self.pump();
    }

    pub fn run(&mut self, seconds: u32) {
        for _ in 0..seconds {
            self.tick();
        }
    }

    /// Run one script; Err lists every failed check.
    pub fn script(&mut self, text: &str) -> Result<(), String> {
        let mut warnings = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let mut t = Toks {
                t: tokens(line),
                i: 0,
            };
            if t.peek().is_none() {
                continue;
            }
            let r = if t.eat("bridge") {
                self.bridge_line(&mut t)
            } else if t.eat("run") {
                t.int().map(|_| self.run(180))
            } else if t.eat("check") {
                self.check_line(&mut t, &mut warnings)
            } else {
                Err(format!("unknown command {:?}", t.peek()))
            };
            r.map_err(|e| format!("line {}: {e}: {line}", n + 1))?;
            if t.peek().is_some() {
                return Err(format!("line {}: trailing garbage: {line}", n + 1));
            }
            if !warnings.is_empty() {
                return Err(format!("line {}: {line}\n{}", n + 1, warnings.join("\n")));
            }
        }
        Ok(())
    }

    fn bridge_line(&mut self, t: &mut Toks) -> Result<(), String> {
        let n = t.int()? as usize;
        let b = if n < self.bridges.len() {
            n
        } else if n == self.bridges.len() {
            let id = t.int()?;
            self.add_bridge(id)
        } else {
            return Err("bridges must be numbered consecutively".into());
        };
        if t.eat("^") {
            let p = t.int()?;
            self.set_bridge_priority(b, p);
        }
        if !t.eat("=") {
            return Ok(());
        }
        let existing = self.bridges[b].lans.len();
        let mut port = 1u16;
        while port <= 9 {
            match t.peek() {
                None | Some("X") => {
                    if t.peek().is_some() {
                        t.i += 1;
                    }
                    if usize::from(port) <= existing {
                        self.disconnect(b, port);
                    } else if t.peek().is_none() {
                        break;
                    }
                }
                Some("_") => t.i += 1,
                Some(tok) => {
                    let lan = if tok == "0" {
                        None
                    } else if tok.len() == 1 && tok.as_bytes()[0].is_ascii_lowercase() {
                        Some(usize::from(tok.as_bytes()[0] - b'a'))
                    } else {
                        return Err(format!("{tok} is not a LAN name"));
                    };
                    t.i += 1;
                    let cost = if t.eat(":") {
                        t.int()? as u32
                    } else {
                        self.default_cost
                    };
                    if usize::from(port) > self.bridges[b].lans.len() + 1 {
                        return Err("ports must be numbered consecutively".into());
                    }
                    self.connect(b, port, lan, cost);
                    if t.eat("^") {
                        let prio = t.int()? as u16;
                        self.bridges[b]
                            .stp
                            .set_port_priority(port, prio)
                            .map_err(|e| e.to_string())?;
                        self.pump();
                    }
                }
            }
            port += 1;
        }
        Ok(())
    }

    fn check_line(&mut self, t: &mut Toks, warnings: &mut Vec<String>) -> Result<(), String> {
        let b = t.int()? as usize;
        let show = self.bridges.get(b).ok_or("no such bridge")?.stp.show();
        if !t.eat("=") {
            return Err("expected =".into());
        }
        let name = format!("bridge {b} ({})", show.bridge_id);
        if t.eat("rootid") {
            t.eat(":");
            let id = t.int()?;
            let prio = if t.eat("^") { t.int()? } else { 0x8000 };
            let want = (prio << 48) | id;
            if show.root_id.0 != want {
                warnings.push(format!("{name}: root {}, not {want:x}", show.root_id));
            }
        }
        if t.eat("root") {
            if show.root_status != RootStatus::Root || show.root_path_cost != 0 {
                warnings.push(format!(
                    "{name}: not root (root {} cost {})",
                    show.root_id, show.root_path_cost
                ));
            }
            for p in &show.ports {
                if p.role != PortRole::Disabled && p.state != PortState::Forwarding {
                    warnings.push(format!("{name}: root's port {} is {:?}", p.port, p.state));
                }
            }
            return Ok(());
        }
        for p in &show.ports {
            let tok = t.peek().map(str::to_string);
            if tok.is_some() {
                t.i += 1;
            }
            let want = match tok.as_deref() {
                None | Some("D") => {
                    if p.role != PortRole::Disabled {
                        warnings.push(format!(
                            "{name} port {}: {:?}/{:?}, want disabled",
                            p.port, p.role, p.state
                        ));
                    }
                    continue;
                }
                Some("_") => continue,
                Some("Di" | "B" | "Li") => PortState::Discarding,
                Some("Le") => PortState::Learning,
                Some("F") => PortState::Forwarding,
                Some(x) => return Err(format!("unknown port state {x}")),
            };
            if p.state != want || p.role == PortRole::Disabled {
                warnings.push(format!(
                    "{name} port {}: {:?}/{:?}, want {want:?}",
                    p.port, p.role, p.state
                ));
            }
            if want == PortState::Forwarding {
                if t.eat(":") {
                    let cost = t.int()? as u32;
                    if show.root_port != Some(p.port) {
                        warnings.push(format!(
                            "{name}: port {} is not the root port ({:?} is)",
                            p.port, show.root_port
                        ));
                    } else if show.root_path_cost != cost {
                        warnings.push(format!(
                            "{name}: root path cost {}, want {cost}",
                            show.root_path_cost
                        ));
                    }
                } else if show.root_port == Some(p.port) {
                    warnings.push(format!(
                        "{name}: port {} is the root port, not expected",
                        p.port
                    ));
                }
            }
        }
        Ok(())
    }
}
