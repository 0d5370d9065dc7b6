//! `qbridge trace`: one frame walked through the running configuration, every decision
//! explained (Open vSwitch's `ofproto/trace`, for a VLAN bridge).
//!
//! Two halves, so that the answer is both exact and readable:
//!
//! - **What happens** comes from the real pipeline: the frame is forwarded by a *sandbox* of
//!   the switch ([`Switch::sandbox`]: the configuration and the FDB copied, every counter
//!   fresh), so the frames that leave each port, byte for byte, and the drop reasons (read off
//!   the sandbox's counters) are what the switch would do, and the switch itself is not
//!   touched: nothing is learned, no counter moves. A second sandbox without the mirror
//!   sessions tells forwarded frames from mirror copies.
//! - **Why** comes from `explain`: the stages of `docs/semantics.md` read from the same
//!   compiled records the pipeline reads (the port's mode, TPID, PVID and maps, the ingress
//!   filter, the spanning-tree state, the lock, learning, the FDB lookup, the flood set with
//!   each port's reason to be in or out of it, the egress rewrite). The explanation also
//!   predicts the verdict; a prediction that differs from the pipeline's is printed as such
//!   (and the differential tests assert it never is).
//!
//! Imports: `crate::config` (the switch), `crate::path` (the forwarder), `crate::plan`.

mod explain;

use crate::config::Switch;
use crate::counters::DropReason;
use crate::error::ConfigError;
use crate::path::Outputs;
use crate::plan::PortId;
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::summary;
use serde::Serialize;

/// A frame as the trace shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceFrame {
    /// One line: addresses, tags, payload, length ([`summary::describe`]).
    pub summary: String,
    pub len: usize,
    /// The bytes, as lowercase hex.
    pub hex: String,
}

impl TraceFrame {
    /// The frame's bytes again (from [`TraceFrame::hex`]).
    pub fn bytes(&self) -> Vec<u8> {
        (0..self.hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(self.hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect()
    }

    pub fn of(frame: &[u8], tpids: &[u16]) -> TraceFrame {
        TraceFrame {
            summary: summary::describe(frame, tpids),
            len: frame.len(),
            hex: summary::hex(frame),
        }
    }
}

/// One decision of the walk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// `port`, `size`, `source`, `group`, `vlan`, `filter`, `stp`, `locked`, `learn`,
    /// `lookup`, `unicast`, `flood`, `egress`, `mirror`, `stacked`, `note`.
    pub stage: &'static str,
    pub text: String,
}

/// Why a frame leaves a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Known unicast (or the bridge's own address, to its host port).
    Forward,
    /// One copy of a flood.
    Flood,
    /// A copy of a mirror session to its destination port.
    Mirror,
}

/// A frame that would leave a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceOutput {
    pub port: String,
    pub kind: OutputKind,
    pub frame: TraceFrame,
}

/// A drop the frame (or one copy of it) would meet, as the counters would show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceDrop {
    /// The port whose counter would count it.
    pub port: String,
    pub reason: DropReason,
    /// The reason in words.
    pub description: String,
    pub frames: u64,
}

/// A copy a mirror session would write to its pcap file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceSinkCopy {
    pub file: String,
    pub frame: TraceFrame,
}

/// The end of the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// To one port (known unicast, or the bridge's own address to its host port).
    Forwarded,
    /// To every port of the flood set that took a copy.
    Flooded,
    /// Nowhere (see [`Trace::drops`]).
    Dropped,
    /// A spanning-tree BPDU, for the bridge's own protocol (not forwarded).
    ControlPlane,
}

/// The whole answer of `trace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trace {
    pub in_port: String,
    /// The ingress port's bridge, if it has one.
    pub bridge: Option<String>,
    /// The VLAN the frame was classified into (0 on a VLAN-unaware bridge); `None` when it
    /// was dropped before classification.
    pub vlan: Option<u16>,
    pub frame: TraceFrame,
    pub steps: Vec<TraceStep>,
    pub verdict: Verdict,
    pub outputs: Vec<TraceOutput>,
    pub drops: Vec<TraceDrop>,
    pub mirror_files: Vec<TraceSinkCopy>,
    /// The explanation's own prediction agreed with the pipeline (false: see the `note` step).
    pub explained: bool,
    /// What classification made of the frame, as the fast path's flow install reads it
    /// (`None`: dropped before).
    #[serde(skip)]
    pub class: Option<crate::plan::fast::FastClass>,
    /// The sandbox's plan after the frame: its FDB as the frame's own learning left it, what a
    /// worker's flow install reads once it forwarded the frame.
    #[serde(skip)]
    pub after: Option<AfterPlan>,
}

/// [`Trace::after`]: auxiliary, not part of the answer (equal to any other).
#[derive(Debug, Clone)]
pub struct AfterPlan(pub std::sync::Arc<crate::plan::Plan>);

impl PartialEq for AfterPlan {
    fn eq(&self, _: &AfterPlan) -> bool {
        true
    }
}

impl Eq for AfterPlan {}

/// What one sandbox run did.
struct Run {
    /// By port id: the frames that left it.
    outputs: Vec<(PortId, Vec<Vec<u8>>)>,
    drops: Vec<(PortId, DropReason, u64)>,
    sinks: Vec<(String, Vec<u8>)>,
    punted: bool,
    class: Option<crate::plan::fast::FastClass>,
    /// The sandbox after the frame: its FDB is what the lookup saw (learning comes first, and
    /// may have moved or evicted the destination's entry), its counters what learning did
    /// (refused for a limit, an eviction).
    after: Switch,
}

impl Switch {
    /// A copy that forwards without touching this switch: the configuration and the FDB copied
    /// (as `clone`), every counter fresh, one worker. What `trace` forwards its frame with.
    pub(crate) fn sandbox(&self) -> Switch {
        use crate::cells::{CellSet, PortCounterSet, VlanCounterSet};
        use crate::plan::mirror::MirrorCounterSet;
        use std::sync::Arc;
        let mut s = self.clone();
        // One block: every writer (worker 0, the control plane) clamps to it.
        let blocks = 1;
        for p in s.recs.ports.iter_mut().flatten() {
            let mut r = crate::plan::PortRecord::clone(p);
            r.counters = PortCounterSet::new(blocks);
            *p = Arc::new(r);
        }
        for b in s.recs.bridges.iter_mut().flatten() {
            let mut r = crate::plan::Bridge::clone(b);
            r.vlan_counters = VlanCounterSet::new(blocks);
            *b = Arc::new(r);
        }
        for m in &mut s.mirrors {
            m.counters = MirrorCounterSet::new(blocks);
        }
        s.unknown_port_drops = CellSet::new(blocks);
        s.recs.plan = None;
        s
    }

    /// Walks `frame`, received on port `port`, through the running configuration at the
    /// switch's current time, without sending it and without learning: what would leave each
    /// port, what would be dropped and why, every stage's decision on the way (see the module
    /// documentation).
    pub fn trace(&self, port: PortId, frame: &[u8]) -> Result<Trace, ConfigError> {
        let mut pkt = PacketBuf::from_frame(frame);
        pkt.port = port.0;
        self.trace_packet(&pkt)
    }

    /// [`Switch::trace`] of a received buffer (its `port`, and its offload metadata: a GSO
    /// super-frame is judged per segment, as the pipeline judges it).
    pub fn trace_packet(&self, pkt: &PacketBuf) -> Result<Trace, ConfigError> {
        let port = PortId(pkt.port);
        let frame = pkt.frame();
        let name = self
            .port_name(port)
            .ok_or_else(|| ConfigError::NoSuchDevice(format!("port {}", port.0)))?
            .to_string();
        let now = self.now_ns;
        let full = self.sandbox();
        let has_mirrors = !self.mirrors.is_empty();
        let plain = if has_mirrors {
            // Shares `full`'s counters, which are read before this one runs.
            let mut s = full.clone();
            s.mirrors.clear();
            Some(s)
        } else {
            None
        };
        let mut run = run(full, pkt, now);
        let after = AfterPlan(run.after.plan());
        let forwarded = match plain {
            Some(s) => run_outputs(s, pkt, now),
            None => run.outputs.clone(),
        };

        // Outputs: forwarded frames first, then what the mirror sessions added on the same
        // ports (the multiset difference).
        let mut outputs = Vec::new();
        for (p, frames) in &forwarded {
            let tpids = self.trace_tpids(*p);
            for f in frames {
                outputs.push(TraceOutput {
                    port: self.port_name(*p).unwrap_or("?").to_string(),
                    // `explain` says which (it knows whether the lookup flooded).
                    kind: OutputKind::Forward,
                    frame: TraceFrame::of(f, &tpids),
                });
            }
        }
        for (p, frames) in &run.outputs {
            let mut rest: Vec<&Vec<u8>> = frames.iter().collect();
            if let Some((_, fw)) = forwarded.iter().find(|(q, _)| q == p) {
                for f in fw {
                    if let Some(i) = rest.iter().position(|r| *r == f) {
                        rest.remove(i);
                    }
                }
            }
            let tpids = self.trace_tpids(*p);
            for f in rest {
                outputs.push(TraceOutput {
                    port: self.port_name(*p).unwrap_or("?").to_string(),
                    kind: OutputKind::Mirror,
                    frame: TraceFrame::of(f, &tpids),
                });
            }
        }
        let drops: Vec<TraceDrop> = run
            .drops
            .iter()
            .map(|&(p, reason, frames)| TraceDrop {
                port: self.port_name(p).unwrap_or("?").to_string(),
                reason,
                description: reason.describe(),
                frames,
            })
            .collect();
        let forwarded_n: usize = forwarded.iter().map(|(_, f)| f.len()).sum();
        let verdict = if run.punted && forwarded_n == 0 {
            Verdict::ControlPlane
        } else if forwarded_n == 0 {
            Verdict::Dropped
        } else if forwarded_n > 1 {
            Verdict::Flooded
        } else {
            // One frame out: `explain` tells a flood to one port from known unicast.
            Verdict::Forwarded
        };
        let in_tpids = self.trace_tpids(port);
        let bridge = self
            .recs
            .ports
            .get(usize::from(port.0))
            .and_then(|p| p.as_ref())
            .and_then(|p| p.master)
            .map(|b| self.bridge_name(crate::plan::BridgeId(b)).to_string());
        let mut trace = Trace {
            in_port: name,
            bridge,
            // `explain` sets it once classification is done.
            vlan: None,
            frame: TraceFrame::of(frame, &in_tpids),
            steps: Vec::new(),
            verdict,
            outputs,
            drops,
            mirror_files: run
                .sinks
                .iter()
                .map(|(file, f)| TraceSinkCopy {
                    file: file.clone(),
                    frame: TraceFrame::of(f, &in_tpids),
                })
                .collect(),
            explained: true,
            class: run.class,
            after: Some(after),
        };
        explain::explain(self, pkt, now, &run, &forwarded, &mut trace);
        if let (Some(v), Some(c)) = (trace.vlan, run.class) {
            debug_assert_eq!(v, c.vid, "the explanation's VLAN is the pipeline's");
        }
        Ok(trace)
    }

    /// The TPIDs a port's frames are shown with: the well-known ones and its own.
    fn trace_tpids(&self, p: PortId) -> Vec<u16> {
        match self
            .recs
            .ports
            .get(usize::from(p.0))
            .and_then(|r| r.as_ref())
        {
            Some(r) => vec![r.tpid],
            None => Vec::new(),
        }
    }
}

/// Forwards `frame` through sandbox `s` and reads back what it did.
fn run(mut s: Switch, pkt: &PacketBuf, now: u64) -> Run {
    let mut rx = Batch::with_capacity(1);
    let mut copy = PacketBuf::from_frame(pkt.frame());
    copy.port = pkt.port;
    copy.offload = pkt.offload;
    rx.push(copy);
    let mut out = Outputs::new();
    s.process(now, &mut rx, &mut out);
    let class = s.worker_class();
    let outputs = out
        .ports
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.pkts.is_empty())
        .map(|(i, b)| {
            (
                PortId(i as u16),
                b.pkts.iter().map(|p| p.frame().to_vec()).collect(),
            )
        })
        .collect();
    let mut drops = Vec::new();
    for (id, _) in s.port_ids() {
        let c = s.port_counters(id);
        for r in DropReason::ALL {
            let n = c.drops[*r as usize];
            if n != 0 {
                drops.push((id, *r, n));
            }
        }
    }
    let plan = s.plan();
    let sinks = out
        .mirror_sinks
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let file = plan.mirror_sinks().get(i).cloned().unwrap_or_default();
            b.pkts
                .iter()
                .map(move |p| (file.clone(), p.frame().to_vec()))
                .collect::<Vec<_>>()
        })
        .collect();
    Run {
        outputs,
        drops,
        sinks,
        punted: !out.punt.pkts.is_empty(),
        class,
        after: s,
    }
}

fn run_outputs(s: Switch, pkt: &PacketBuf, now: u64) -> Vec<(PortId, Vec<Vec<u8>>)> {
    run(s, pkt, now).outputs
}
