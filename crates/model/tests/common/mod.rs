//! Scenario description and the harness that runs one scenario through both the fast path
//! (`qbridge_bridge::Switch`) and the reference model, comparing after every step.

#![allow(dead_code)]

use qbridge_bridge::{
    BridgeId, BridgeSettings, DropReason, FdbFilter, FdbFlushKind, FdbKind, Forwarder, Outputs,
    PortId, PortSettings, Switch, VlanProtocol,
};
use qbridge_model::{FdbRow, Flush, Frame, Meta, Model};
use qbridge_packet::{Batch, OffloadMeta, PacketBuf};
use qbridge_wire::{MacAddr, Tpid};
use std::fmt;

pub const S: u64 = 1_000_000_000;
/// Most VLANs a generated port can be a member of (an `fdb add` without `vlan` adds one
/// entry per VLAN, plus VLAN 0).
pub const NVID_MAX: usize = 12;

/// Bytes printed as hex in scenario dumps.
#[derive(Clone, PartialEq, Eq)]
pub struct Hex(pub Vec<u8>);

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}B ", self.0.len())?;
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 && (i == 6 || i == 12 || (i >= 12 && (i - 12) % 4 == 0 && i < 28)) {
                write!(f, " ")?;
            }
            if i >= 40 {
                write!(f, "…")?;
                break;
            }
            write!(f, "{b:02x}")?;
        }
        write!(f, "]")
    }
}

#[derive(Debug, Clone)]
pub struct PortSpec {
    /// Index of the bridge it joins; `None`: left unattached.
    pub bridge: Option<usize>,
    pub settings: PortSettings,
}

#[derive(Debug, Clone)]
pub enum Op {
    /// Frames sent as one batch.
    Batch(Vec<FrameSpec>),
    /// The clock moves on by this many ns.
    Advance(u64),
    Age,
    VlanAdd {
        port: usize,
        start: u32,
        end: u32,
        pvid: bool,
        untagged: bool,
    },
    VlanDel {
        port: usize,
        start: u32,
        end: u32,
    },
    FdbAdd {
        mac: MacAddr,
        port: usize,
        vlan: Option<u32>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
    },
    FdbDel {
        mac: MacAddr,
        port: usize,
        vlan: Option<u32>,
    },
    /// `fdb add MAC dev P [vlan V [inner_vlan C]] extern_learn` (rule 9b).
    FdbExtern {
        mac: MacAddr,
        port: usize,
        vlan: Option<u32>,
        inner: Option<u32>,
    },
    /// `fdb add|replace|del MAC dev P vlan V inner_vlan C …` (§K7); `kind` `None`: del.
    FdbInner {
        mac: MacAddr,
        port: usize,
        vlan: u32,
        inner: u32,
        kind: Option<FdbKind>,
        sticky: bool,
        replace: bool,
    },
    /// `dev` indexes bridges first, then ports.
    FdbFlush {
        dev: usize,
        vlan: Option<u32>,
        which: u8,
    },
    /// New settings for a port (the `up` flag is kept, see the model's port-down rule).
    SetPort {
        port: usize,
        settings: PortSettings,
    },
    SetMaster {
        port: usize,
        bridge: Option<usize>,
    },
    /// `link set dev BR type bridge fdb_max_entries N` (raising or lowering the bound).
    SetMaxEntries {
        bridge: usize,
        max: u32,
    },
    /// `vlan set dev P vid S-E fdb_max_learned N violation V` (§L).
    VlanLimit {
        port: usize,
        start: u32,
        end: u32,
        limit: u32,
        violation: qbridge_bridge::Violation,
    },
    /// `vlan map add|del dev P cvid C-C2 [svid S]` (§K).
    CvidMap {
        port: usize,
        start: u16,
        end: u16,
        svid: Option<u16>,
    },
    /// `vlan map add|del dev P vid A [translate B]` (§K).
    VlanMap {
        port: usize,
        wire: u16,
        inside: Option<u16>,
    },
    /// `vlan map add|del dev P svid S cvid C [translate V [C2]]` (§K, 2:1 and 2:2).
    TagMap {
        port: usize,
        svid: u16,
        cvid: u16,
        to: Option<(u16, Option<u16>)>,
    },
    /// Spanning-tree state of port P in VIDs S-E (§STP; no command yet).
    Stp {
        port: usize,
        start: u32,
        end: u32,
        state: qbridge_bridge::StpState,
    },
    /// `vlan set dev P vid S-E pvlan …` (§J).
    Pvlan {
        port: usize,
        start: u32,
        end: u32,
        role: Option<qbridge_bridge::PvlanRole>,
    },
    /// `link set dev P vlan_mode …` (§G).
    VlanMode {
        port: usize,
        mode: qbridge_bridge::VlanMode,
    },
    /// `mirror add mN src … dst …` (§M); ports by index.
    MirrorAdd {
        name: u8,
        src: Vec<usize>,
        direction: qbridge_bridge::MirrorDirection,
        vids: Option<qbridge_bridge::VidList>,
        dst: usize,
        rspan: Option<u16>,
    },
    /// `mirror del mN` (§M).
    MirrorDel {
        name: u8,
    },
}

/// Names of the mirror sessions scenarios use (`m0`…`m3`).
pub const MIRROR_NAMES: u8 = 4;

#[derive(Clone)]
pub struct FrameSpec {
    pub port: usize,
    pub bytes: Hex,
    pub meta: OffloadMeta,
}

impl fmt::Debug for FrameSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{} {:?}", self.port, self.bytes)?;
        if self.meta != OffloadMeta::default() {
            let m = &self.meta;
            write!(
                f,
                " meta(flags {} gso {} hdr_len {} gso_size {} csum_start {})",
                m.flags, m.gso_type, m.hdr_len, m.gso_size, m.csum_start
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub bridges: Vec<BridgeSettings>,
    pub ports: Vec<PortSpec>,
    /// Setup operations (VLANs, FDB entries), then the run.
    pub setup: Vec<Op>,
    pub run: Vec<Op>,
}

fn meta_to_model(m: &OffloadMeta) -> Meta {
    Meta {
        flags: m.flags,
        gso_type: m.gso_type,
        hdr_len: m.hdr_len,
        gso_size: m.gso_size,
        csum_start: m.csum_start,
        csum_offset: m.csum_offset,
    }
}

/// Both implementations side by side.
pub struct Pair {
    pub sw: Switch,
    pub out: Outputs,
    pub model: Model,
    pub now: u64,
    pub bridge_names: Vec<String>,
    pub port_names: Vec<String>,
    pub log: Vec<String>,
    /// More than one: each batch is spread over this many datapath workers by the flow hash
    /// (as the live engine spreads received frames) and the workers forward their shares one
    /// after the other with one shared plan and FDB; the model sees the frames in that order.
    pub workers: Vec<Forwarder>,
}

impl Pair {
    pub fn new() -> Pair {
        Pair {
            sw: Switch::new(),
            out: Outputs::new(),
            model: Model::new(),
            now: S,
            bridge_names: Vec::new(),
            port_names: Vec::new(),
            log: Vec::new(),
            workers: Vec::new(),
        }
    }

    /// A pair whose fast path forwards with `n` workers (see [`Pair::workers`]).
    pub fn with_workers(n: usize) -> Pair {
        let mut p = Pair::new();
        p.sw = Switch::with_workers(n);
        p.workers = (0..n).map(Forwarder::new).collect();
        p
    }

    fn same_outcome<A, B, E1: fmt::Debug, E2: fmt::Debug>(
        &self,
        what: &str,
        a: Result<A, E1>,
        b: Result<B, E2>,
    ) -> Result<(), String> {
        if a.is_ok() != b.is_ok() {
            return Err(format!(
                "{what}: fast path {:?} but model {:?}",
                a.err(),
                b.err()
            ));
        }
        Ok(())
    }

    pub fn build(&mut self, sc: &Scenario) -> Result<(), String> {
        for (i, s) in sc.bridges.iter().enumerate() {
            let name = format!("br{i}");
            let a = self.sw.add_bridge(&name, s.clone()).map(|b| b.0);
            let b = self.model.add_bridge(&name, s.clone());
            if a.as_ref().ok() != b.as_ref().ok() {
                return Err(format!("add_bridge {name}: {a:?} vs {b:?}"));
            }
            self.bridge_names.push(name);
        }
        for (i, p) in sc.ports.iter().enumerate() {
            let name = format!("p{i}");
            let a = self
                .sw
                .add_port(&name, "mem", p.settings.clone())
                .map(|p| p.0);
            let b = self.model.add_port(&name, p.settings.clone());
            if a.as_ref().ok() != b.as_ref().ok() || a.is_err() {
                return Err(format!("add_port {name}: {a:?} vs {b:?}"));
            }
            self.port_names.push(name);
            if let Some(bi) = p.bridge {
                self.apply(&Op::SetMaster {
                    port: i,
                    bridge: Some(bi),
                })?;
            }
        }
        for op in &sc.setup {
            self.apply(op)?;
        }
        self.compare("setup")
    }

    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        let pid = |p: usize| PortId(p as u16);
        match op {
            Op::Batch(frames) => return self.batch(frames),
            Op::Advance(dt) => self.now += dt,
            Op::Age => {
                let a = self.sw.age(self.now);
                let b = self.model.age(self.now);
                if a != b {
                    return Err(format!("age removed {a} in fast path, {b} in model"));
                }
            }
            &Op::VlanAdd {
                port,
                start,
                end,
                pvid,
                untagged,
            } => {
                let a = self.sw.vlan_add(pid(port), start, end, pvid, untagged);
                let b = self.model.vlan_add(port as u16, start, end, pvid, untagged);
                self.same_outcome("vlan add", a, b)?;
            }
            &Op::VlanLimit {
                port,
                start,
                end,
                limit,
                violation,
            } => {
                let a = self
                    .sw
                    .set_vlan_limit(pid(port), start, end, limit, violation);
                let b = self
                    .model
                    .set_vlan_limit(port as u16, start, end, limit, violation);
                self.same_outcome("vlan limit", a, b)?;
            }
            &Op::CvidMap {
                port,
                start,
                end,
                svid,
            } => {
                let (a, b) = match svid {
                    Some(sv) => (
                        self.sw.cvid_map_add(pid(port), start, end, sv),
                        self.model.cvid_map_add(port as u16, start, end, sv),
                    ),
                    None => (
                        self.sw.cvid_map_del(pid(port), start, end),
                        self.model.cvid_map_del(port as u16, start, end),
                    ),
                };
                self.same_outcome("cvid map", a, b)?;
            }
            &Op::VlanMap { port, wire, inside } => {
                let (a, b) = match inside {
                    Some(i) => (
                        self.sw.vlan_map_add(pid(port), wire, i),
                        self.model.vlan_map_add(port as u16, wire, i),
                    ),
                    None => (
                        self.sw.vlan_map_del(pid(port), wire),
                        self.model.vlan_map_del(port as u16, wire),
                    ),
                };
                self.same_outcome("vlan map", a, b)?;
            }
            &Op::TagMap {
                port,
                svid,
                cvid,
                to,
            } => {
                let (a, b) = match to {
                    Some((vid, inner)) => {
                        let m = qbridge_bridge::TagMap {
                            svid,
                            cvid,
                            vid,
                            inner,
                        };
                        (
                            self.sw.tag_map_add(pid(port), m),
                            self.model.tag_map_add(port as u16, m),
                        )
                    }
                    None => (
                        self.sw.tag_map_del(pid(port), svid, cvid),
                        self.model.tag_map_del(port as u16, svid, cvid),
                    ),
                };
                self.same_outcome("tag map", a, b)?;
            }
            &Op::Pvlan {
                port,
                start,
                end,
                role,
            } => {
                let a = self.sw.set_pvlan(pid(port), start, end, role);
                let b = self.model.set_pvlan(port as u16, start, end, role);
                self.same_outcome("pvlan", a, b)?;
            }
            &Op::Stp {
                port,
                start,
                end,
                state,
            } => {
                let a = self
                    .sw
                    .set_stp_state_ranges(pid(port), &[(start, end)], state);
                let b = self.model.set_stp_state(port as u16, start, end, state);
                self.same_outcome("stp state", a, b)?;
            }
            Op::VlanMode { port, mode } => {
                let a = self.sw.set_vlan_mode(pid(*port), mode.clone());
                let b = self.model.set_vlan_mode(*port as u16, mode);
                self.same_outcome("vlan_mode", a, b)?;
            }
            &Op::VlanDel { port, start, end } => {
                let a = self.sw.vlan_del(pid(port), start, end);
                let b = self.model.vlan_del(port as u16, start, end);
                self.same_outcome("vlan del", a, b)?;
            }
            &Op::FdbAdd {
                mac,
                port,
                vlan,
                kind,
                sticky,
                replace,
            } => {
                let a = self.sw.fdb_add(mac, pid(port), vlan, kind, sticky, replace);
                let b = self
                    .model
                    .fdb_add(mac, port as u16, vlan, kind, sticky, replace);
                self.same_outcome("fdb add", a, b)?;
            }
            &Op::FdbExtern {
                mac,
                port,
                vlan,
                inner,
            } => {
                let a = self.sw.fdb_add_extern(mac, pid(port), vlan, inner);
                let b = self.model.fdb_add_extern(mac, port as u16, vlan, inner);
                self.same_outcome("fdb add extern_learn", a, b)?;
            }
            &Op::FdbInner {
                mac,
                port,
                vlan,
                inner,
                kind,
                sticky,
                replace,
            } => {
                let (a, b) = match kind {
                    Some(k) => (
                        self.sw
                            .fdb_add_inner(mac, pid(port), vlan, inner, k, sticky, replace),
                        self.model
                            .fdb_add_inner(mac, port as u16, vlan, inner, k, sticky, replace),
                    ),
                    None => (
                        self.sw.fdb_del_inner(mac, pid(port), vlan, inner),
                        self.model.fdb_del_inner(mac, port as u16, vlan, inner),
                    ),
                };
                self.same_outcome("fdb inner", a, b)?;
            }
            &Op::FdbDel { mac, port, vlan } => {
                let a = self.sw.fdb_del(mac, pid(port), vlan);
                let b = self.model.fdb_del(mac, port as u16, vlan);
                self.same_outcome("fdb del", a, b)?;
            }
            &Op::FdbFlush { dev, vlan, which } => {
                let name = if dev < self.bridge_names.len() {
                    self.bridge_names[dev].clone()
                } else {
                    self.port_names[(dev - self.bridge_names.len()) % self.port_names.len()].clone()
                };
                let (k1, k2) = match which % 3 {
                    0 => (FdbFlushKind::All, Flush::All),
                    1 => (FdbFlushKind::Dynamic, Flush::Dynamic),
                    _ => (FdbFlushKind::Static, Flush::Static),
                };
                let a = self.sw.fdb_flush(&name, vlan, k1);
                let b = self.model.fdb_flush(&name, vlan, k2);
                if a.as_ref().ok() != b.as_ref().ok() {
                    return Err(format!("fdb flush {name}: {a:?} vs {b:?}"));
                }
            }
            Op::MirrorAdd {
                name,
                src,
                direction,
                vids,
                dst,
                rspan,
            } => {
                let spec = qbridge_bridge::MirrorSpec {
                    name: format!("m{name}"),
                    src: src.iter().map(|&p| self.port_names[p].clone()).collect(),
                    direction: *direction,
                    vids: vids.clone(),
                    dst: qbridge_bridge::MirrorDst::Port(self.port_names[*dst].clone()),
                    rspan: *rspan,
                };
                let a = self.sw.mirror_add(&spec);
                let b = self.model.mirror_add(&spec);
                self.same_outcome("mirror_add", a, b)?;
            }
            Op::MirrorDel { name } => {
                let a = self.sw.mirror_del(&format!("m{name}"));
                let b = self.model.mirror_del(&format!("m{name}"));
                self.same_outcome("mirror_del", a, b)?;
            }
            Op::SetPort { port, settings } => {
                let a = self.sw.set_port(pid(*port), settings.clone());
                let b = self.model.set_port(*port as u16, settings.clone());
                self.same_outcome("set_port", a, b)?;
            }
            &Op::SetMaxEntries { bridge, max } => {
                let bid = BridgeId(bridge as u16);
                let mut s = self.sw.bridge_settings(bid).clone();
                s.fdb_max_entries = max;
                let a = self.sw.set_bridge(bid, s);
                let b = self.model.set_fdb_max_entries(bridge as u16, max);
                self.same_outcome("fdb_max_entries", a, b)?;
            }
            &Op::SetMaster { port, bridge } => {
                let a = self
                    .sw
                    .set_master(pid(port), bridge.map(|b| BridgeId(b as u16)));
                let b = self.model.set_master(port as u16, bridge.map(|b| b as u16));
                self.same_outcome("set_master", a, b)?;
            }
        }
        self.sw.set_time(self.now);
        self.model.set_time(self.now);
        Ok(())
    }

    fn batch(&mut self, frames: &[FrameSpec]) -> Result<(), String> {
        if self.workers.len() > 1 {
            return self.batch_workers(frames);
        }
        let mut b = Batch::default();
        let mut mframes = Vec::new();
        for f in frames {
            let mut pkt = PacketBuf::from_frame(&f.bytes.0);
            pkt.port = f.port as u16;
            pkt.offload = f.meta;
            b.push(pkt);
            mframes.push(Frame {
                port: f.port as u16,
                bytes: f.bytes.0.clone(),
                meta: meta_to_model(&f.meta),
            });
        }
        self.sw.process(self.now, &mut b, &mut self.out);
        let got_model = self.model.process(self.now, mframes);
        self.compare_outputs(&got_model)
    }

    fn batch_workers(&mut self, frames: &[FrameSpec]) -> Result<(), String> {
        let n = self.workers.len();
        let mut shares: Vec<Vec<&FrameSpec>> = vec![Vec::new(); n];
        for f in frames {
            shares[qbridge_wire::flow_hash(&f.bytes.0) as usize % n].push(f);
        }
        let plan = self.sw.plan();
        let mut got_model = Vec::new();
        for (w, share) in self.workers.iter_mut().zip(&shares) {
            // The model takes each worker's share as one batch, as that worker does (mirror
            // copies follow the output of their own batch).
            let mut mframes = Vec::new();
            let mut b = Batch::default();
            for f in share {
                let mut pkt = PacketBuf::from_frame(&f.bytes.0);
                pkt.port = f.port as u16;
                pkt.offload = f.meta;
                b.push(pkt);
                mframes.push(Frame {
                    port: f.port as u16,
                    bytes: f.bytes.0.clone(),
                    meta: meta_to_model(&f.meta),
                });
            }
            w.process(&plan, self.now, &mut b, &mut self.out);
            got_model.extend(self.model.process(self.now, mframes));
        }
        self.sw.set_time(self.now);
        self.compare_outputs(&got_model)
    }

    /// Replays a batch frame by frame from the state before it, to name the first frame whose
    /// outcome differs.
    fn first_diverging_frame(&self, frames: &[FrameSpec]) -> String {
        let (mut sw, mut model) = (self.sw.clone(), self.model.clone());
        let mut out = Outputs::new();
        for (i, f) in frames.iter().enumerate() {
            let mut b = Batch::default();
            let mut pkt = PacketBuf::from_frame(&f.bytes.0);
            pkt.port = f.port as u16;
            pkt.offload = f.meta;
            b.push(pkt);
            let fdb_before = (fdb_rows(&sw), model.fdb());
            sw.process(self.now, &mut b, &mut out);
            let mf = Frame {
                port: f.port as u16,
                bytes: f.bytes.0.clone(),
                meta: meta_to_model(&f.meta),
            };
            let got = model.process(self.now, vec![mf]);
            let mut fast: Vec<(u16, Hex)> = Vec::new();
            for p in 0..sw.port_slots() {
                for pkt in out.batch_mut(PortId(p as u16)).drain() {
                    fast.push((p as u16, Hex(pkt.frame().to_vec())));
                }
            }
            let mut m: Vec<(u16, Hex)> = got.into_iter().map(|f| (f.port, Hex(f.bytes))).collect();
            m.sort_by_key(|x| x.0);
            let drops = |p: usize| -> Vec<String> {
                let c = sw.port_counters(PortId(p as u16));
                DropReason::ALL
                    .iter()
                    .filter(|r| c.dropped(**r) > 0)
                    .map(|r| format!("{}={}", r.name(), c.dropped(*r)))
                    .collect()
            };
            if fast != m {
                let (fa, fb) = fdb_before;
                let only_fast: Vec<_> = fa.iter().filter(|r| !fb.contains(r)).collect();
                let only_model: Vec<_> = fb.iter().filter(|r| !fa.contains(r)).collect();
                return format!(
                    "FDB before it: only in fast path {only_fast:?}\n  only in model {only_model:?}\n\
                    first diverging frame: #{i} {f:?}\n  fast path sent {fast:?}\n  model sent     {m:?}\n  fast path drops on the ingress port now: {:?}\n  model drops there: {:?}",
                    drops(f.port),
                    model.counters(f.port as u16).drops
                );
            }
        }
        "no single frame diverges when the batch is replayed one by one: batching matters"
            .to_string()
    }

    fn compare_outputs(&mut self, got_model: &[Frame]) -> Result<(), String> {
        for p in 0..self.port_names.len() {
            let fast: Vec<(Hex, Meta)> = self
                .out
                .batch_mut(PortId(p as u16))
                .drain()
                .map(|pkt| {
                    assert_eq!(pkt.port as usize, p, "egress port stamped");
                    (Hex(pkt.frame().to_vec()), meta_to_model(&pkt.offload))
                })
                .collect();
            let model: Vec<(Hex, Meta)> = got_model
                .iter()
                .filter(|f| f.port as usize == p)
                .map(|f| (Hex(f.bytes.clone()), f.meta))
                .collect();
            if fast != model {
                return Err(format!(
                    "frames out of p{p} differ\n  fast path: {fast:?}\n  model:     {model:?}"
                ));
            }
        }
        Ok(())
    }

    pub fn fast_fdb(&self) -> Vec<FdbRow> {
        fdb_rows(&self.sw)
    }
}

pub fn fdb_rows(sw: &Switch) -> Vec<FdbRow> {
    {
        let mut rows: Vec<FdbRow> = sw
            .fdb_entries(&FdbFilter::default())
            .expect("fdb show")
            .into_iter()
            .map(|e| FdbRow {
                bridge: e.master.clone(),
                port: sw.port_id(&e.ifname).expect("port").0,
                vid: e.vlan.unwrap_or(0),
                inner: e.inner_vlan.unwrap_or(0),
                mac: e.mac,
                kind: e.kind.into(),
                sticky: e.sticky,
                locked: e.locked,
                added_by_user: e.added_by_user,
                extern_learn: e.extern_learn,
                idle_ns: e.idle_ns,
            })
            .collect();
        rows.sort();
        rows
    }
}

impl Pair {
    /// FDB, port counters and VLAN counters must agree.
    pub fn compare(&self, when: &str) -> Result<(), String> {
        let (a, b) = (self.fast_fdb(), self.model.fdb());
        if a != b {
            let only_fast: Vec<_> = a.iter().filter(|r| !b.contains(r)).collect();
            let only_model: Vec<_> = b.iter().filter(|r| !a.contains(r)).collect();
            return Err(format!(
                "FDB differs {when}\n  only in fast path: {only_fast:#?}\n  only in model: {only_model:#?}"
            ));
        }
        let mut errs = String::new();
        for p in 0..self.port_names.len() {
            let f = self.sw.port_counters(PortId(p as u16));
            let m = self.model.counters(p as u16);
            let fast = (
                f.rx_frames,
                f.rx_bytes,
                f.tx_frames,
                f.tx_bytes,
                f.fdb_learn_refused,
                f.fdb_evictions,
                f.fdb_moves,
                f.rx_pcp,
            );
            let model = (
                m.rx_frames,
                m.rx_bytes,
                m.tx_frames,
                m.tx_bytes,
                m.fdb_learn_refused,
                m.fdb_evictions,
                m.fdb_moves,
                m.rx_pcp,
            );
            if fast != model {
                errs += &format!(
                    "p{p} counters differ {when} (rx_frames, rx_bytes, tx_frames, tx_bytes, \
                     refused, evictions, moves, rx_pcp)\n  fast path: {fast:?}\n  model:     {model:?}\n"
                );
            }
            for &r in DropReason::ALL {
                let (x, y) = (f.dropped(r), m.drops.get(&r).copied().unwrap_or(0));
                if x != y {
                    errs += &format!(
                        "p{p} drops {} differ {when}: fast path {x}, model {y}\n",
                        r.name()
                    );
                }
            }
        }
        for n in 0..MIRROR_NAMES {
            let name = format!("m{n}");
            let (f, m) = (
                self.sw.mirror_counters(&name),
                self.model.mirror_counters(&name),
            );
            if f != m {
                errs += &format!(
                    "mirror {name} counters differ {when}\n  fast path: {f:?}\n  model:     {m:?}\n"
                );
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }

    /// A pair in the state before step `step` of the run.
    fn replay_until(sc: &Scenario, step: usize) -> Result<Pair, String> {
        let mut pair = Pair::new();
        pair.build(sc)?;
        for op in &sc.run[..step] {
            pair.apply(op)?;
        }
        Ok(pair)
    }

    pub fn compare_vlan_counters(&self) -> Result<(), String> {
        for b in 0..self.bridge_names.len() {
            for vid in 0..4096u16 {
                let f = self.sw.vlan_counters(BridgeId(b as u16), vid);
                let m = self.model.vlan_counters(b as u16, vid);
                let f = (f.rx_frames, f.rx_bytes, f.tx_frames, f.tx_bytes);
                let m = (m.rx_frames, m.rx_bytes, m.tx_frames, m.tx_bytes);
                if f != m {
                    return Err(format!(
                        "br{b} vlan {vid} counters differ: fast path {f:?}, model {m:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs the whole scenario; the error names the step and shows the difference.
    pub fn run(sc: &Scenario) -> Result<(), String> {
        Pair::run_with_workers(sc, 1)
    }

    /// [`Pair::run`] with the fast path forwarding on `workers` workers.
    pub fn run_with_workers(sc: &Scenario, workers: usize) -> Result<(), String> {
        let mut pair = if workers > 1 {
            Pair::with_workers(workers)
        } else {
            Pair::new()
        };
        pair.build(sc)?;
        for (i, op) in sc.run.iter().enumerate() {
            if let Err(e) = pair.apply(op).and_then(|()| pair.compare("after the step")) {
                let also = pair.compare("after the step").err().unwrap_or_default();
                let detail = match op {
                    Op::Batch(frames) => Pair::replay_until(sc, i)?.first_diverging_frame(frames),
                    _ => String::new(),
                };
                return Err(format!("step {i} ({}): {e}\n{also}\n{detail}", short(op)));
            }
        }
        pair.compare_vlan_counters()
    }
}

impl Pair {
    /// `trace` against the pipeline over a whole scenario: before each frame is forwarded (one
    /// at a time, by the switch alone), it is traced; the trace must name exactly the frames
    /// that then leave each port and the drops the counters then show, its explanation must
    /// agree with them, and tracing must change nothing (the FDB and counters are compared
    /// before and after).
    pub fn run_traced(sc: &Scenario) -> Result<(), String> {
        let mut pair = Pair::new();
        pair.build(sc)?;
        for (i, op) in sc.run.iter().enumerate() {
            let Op::Batch(frames) = op else {
                pair.apply(op)?;
                continue;
            };
            for (j, f) in frames.iter().enumerate() {
                let mut pkt = PacketBuf::from_frame(&f.bytes.0);
                pkt.port = f.port as u16;
                pkt.offload = f.meta;
                let sw = &mut pair.sw;
                sw.set_time(pair.now);
                let before = (fdb_rows(sw), all_counters(sw));
                let t = sw
                    .trace_packet(&pkt)
                    .map_err(|e| format!("step {i} frame {j}: trace failed: {e}"))?;
                if (fdb_rows(sw), all_counters(sw)) != before {
                    return Err(format!("step {i} frame {j}: the trace changed the switch"));
                }
                let mut b = Batch::default();
                b.push(pkt);
                sw.process(pair.now, &mut b, &mut pair.out);
                // The model follows, so that the steps that compare with it still can.
                pair.model.process(
                    pair.now,
                    vec![Frame {
                        port: f.port as u16,
                        bytes: f.bytes.0.clone(),
                        meta: meta_to_model(&f.meta),
                    }],
                );
                let mut got: Vec<(String, String)> = Vec::new();
                for p in 0..sw.port_slots() {
                    for q in pair.out.batch_mut(PortId(p as u16)).drain() {
                        let name = sw.port_name(PortId(p as u16)).unwrap_or("?").to_string();
                        got.push((name, qbridge_wire::summary::hex(q.frame())));
                    }
                }
                let mut want: Vec<(String, String)> = t
                    .outputs
                    .iter()
                    .map(|o| (o.port.clone(), o.frame.hex.clone()))
                    .collect();
                got.sort();
                want.sort();
                let after = all_counters(sw);
                let mut drops: Vec<(String, DropReason, u64)> = Vec::new();
                for (p, (a, b)) in after.iter().zip(&before.1).enumerate() {
                    for r in DropReason::ALL {
                        let n = a.1.drops[*r as usize] - b.1.drops[*r as usize];
                        if n != 0 {
                            let _ = p;
                            drops.push((a.0.clone(), *r, n));
                        }
                    }
                }
                let mut traced: Vec<(String, DropReason, u64)> = t
                    .drops
                    .iter()
                    .map(|d| (d.port.clone(), d.reason, d.frames))
                    .collect();
                drops.sort();
                traced.sort();
                // The drop watch's reason for the frame (`Forwarder::dropped`) is the
                // counted one: the only drop when nothing left, else a copy's.
                let why = sw.dropped(0);
                let why_ok = match (&why, traced.as_slice()) {
                    (None, []) => true,
                    (None, _) => !got.is_empty(),
                    (Some(r), ds) => ds.iter().any(|d| d.1 == *r),
                };
                if !why_ok || (got.is_empty() && traced.len() == 1 && why != Some(traced[0].1)) {
                    return Err(format!(
                        "step {i} frame {j}: the drop watch's reason {why:?}, the counters' \
                         {traced:?}"
                    ));
                }
                if got != want || drops != traced || !t.explained {
                    return Err(format!(
                        "step {i} frame {j} ({:?} on p{}): trace said {want:?} and drops                          {traced:?}, the pipeline sent {got:?} and dropped {drops:?}\n{}",
                        Hex(f.bytes.0.clone()),
                        f.port,
                        t.steps
                            .iter()
                            .map(|s| format!("  {}: {}", s.stage, s.text))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Every port's counters, by name.
fn all_counters(sw: &Switch) -> Vec<(String, qbridge_bridge::PortCounters)> {
    sw.port_ids()
        .map(|(id, n)| (n.to_string(), sw.port_counters(id)))
        .collect()
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

fn short(op: &Op) -> String {
    match op {
        Op::Batch(f) => format!("batch of {}", f.len()),
        other => format!("{other:?}"),
    }
}

// ----- frame building, shared by the unit tests -----

pub fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

/// dst, src, tags (tpid, tci), EtherType 0x0800, payload counting up to `len` bytes in all.
pub fn frame(dst: MacAddr, src: MacAddr, tags: &[(u16, u16)], len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let mut i = 0u8;
    while f.len() < len {
        f.push(i);
        i = i.wrapping_add(1);
    }
    f
}

pub fn bridge_settings(filtering: bool, protocol: VlanProtocol) -> BridgeSettings {
    BridgeSettings {
        vlan_filtering: filtering,
        vlan_protocol: protocol,
        ..Default::default()
    }
}

pub fn tpid(t: u16) -> Option<Tpid> {
    Some(Tpid(t))
}
