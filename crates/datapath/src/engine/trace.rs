//! The engine's glue to `trace live` (`crate::tracelive`): sessions started for the socket,
//! their configuration kept current, the ports whose fast-path hits the program copies up,
//! and the thread that reads those copies.

use super::Engine;
use crate::fastpath::upcall::Egress;
use crate::fastpath::{flow_for, Crossing, Forwarded, Refusal, PREFIX};
use crate::tracelive::HitReader;
use qbridge_control::trace::FastStage;
use qbridge_control::{OutputOptions, TraceLiveSpec};
use std::collections::HashMap;
use std::sync::mpsc::SyncSender;

impl Engine {
    /// Starts a `trace live` session; `Err`: no such port.
    pub(super) fn trace_live(
        &mut self,
        spec: TraceLiveSpec,
        out: OutputOptions,
        events: SyncSender<String>,
    ) -> Result<(), String> {
        self.publish_all();
        let sw = self.session.switch();
        let port = sw.port_id(&spec.dev).map_err(|e| e.to_string())?;
        let tpid = sw.port_tpid(port).0;
        let served = self
            .fast
            .as_ref()
            // A VXLAN port the program decapsulates for too (decision 77: it then leaves the
            // port's frames to the socket).
            .is_some_and(|f| f.ports().any(|p| p == port.0) || f.decap_serves(port.0));
        let fast = self.fast_oracle();
        let now = self.now_ns();
        self.session.switch_mut().set_time(now);
        let shared = self.session.switch().share_fdb();
        let details = self.session.port_details();
        self.trace.add(
            port.0, tpid, spec, out, events, now, shared, fast, served, details,
        );
        if served {
            self.trace_ports();
        }
        Ok(())
    }

    /// The configuration (or the fast path's state) changed: sessions trace with the new.
    pub(super) fn trace_refresh(&mut self) {
        if !self.trace.active() {
            return;
        }
        let fast = self.fast_oracle();
        let details = self.session.port_details();
        self.trace.refresh(self.session.switch(), fast, &details);
    }

    /// The program copies the hits of the served ports some session watches, and the trace
    /// device is read while there are any.
    pub(super) fn trace_ports(&mut self) {
        let ports = self.trace.traced_ports();
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        rt.set_traced(&ports);
        if ports.is_empty() {
            // Stops the reader.
            self.hit_reader = None;
            return;
        }
        if self.hit_reader.as_ref().is_some_and(HitReader::running) {
            return;
        }
        match HitReader::start(
            &rt.trace_device(),
            self.trace.clone(),
            self.epoch,
            rt.shared(),
        ) {
            Ok(r) => self.hit_reader = Some(r),
            Err(e) => tracing::warn!("trace live: {e}; fast-path hits are not shown"),
        }
    }
}

/// The `fast` stage of `trace` in a daemon whose fast path runs: the fast path's state says
/// what the outputs do (`qbridge_control::trace::fast_stage`); for a frame the pipeline
/// forwards to one port, the flow install's own checks ([`flow_for`]: both ports served, the
/// FDB, the tag rewrite, a VXLAN tunnel, a bond) run on the traced frame and its output, as
/// a worker runs them on the first such frame.
#[derive(Debug)]
pub(crate) struct FastOracle {
    status: qbridge_control::FastPathStatus,
    plan: std::sync::Arc<qbridge_bridge::Plan>,
    /// Each open port as an output (by port id).
    egress: HashMap<u16, Egress>,
    generation: u32,
}

impl FastStage for FastOracle {
    fn stage(&self, t: &qbridge_bridge::Trace, input: &[u8]) -> String {
        let base = qbridge_control::trace::fast_stage(t, &self.status);
        let [out] = t.outputs.as_slice() else {
            return base;
        };
        if self.status.state != "on"
            || t.verdict != qbridge_bridge::Verdict::Forwarded
            || out.kind != qbridge_bridge::OutputKind::Forward
            || !t.mirror_files.is_empty()
        {
            return base;
        }
        let id = |name: &str| {
            (0..self.plan.port_slots() as u16)
                .find(|&i| self.plan.port_name(qbridge_bridge::PortId(i)) == Some(name))
        };
        let (Some(in_id), Some(out_id)) = (id(&t.in_port), id(&out.port)) else {
            return base;
        };
        let served = |e: &Egress| e.ifindex != 0 || e.vxlan.is_some();
        let (Some(ie), Some(oe)) = (self.egress.get(&in_id), self.egress.get(&out_id)) else {
            return base;
        };
        if !served(ie) {
            return format!(
                "{} is not served by the fast path: its frames take the pipeline",
                t.in_port
            );
        }
        if let Some(peer) = oe.patch_peer {
            let far = self
                .plan
                .port_name(qbridge_bridge::PortId(peer))
                .unwrap_or("?");
            return format!(
                "to patch link {}: a flow folds the bridge behind it (its other end {far}; \
                 up to 4 bridges), whose checks are that bridge's: trace the frame leaving {} \
                 on {far}",
                out.port, out.port
            );
        }
        let output = out.frame.bytes();
        let cut = |f: &[u8]| f[..f.len().min(PREFIX)].to_vec();
        let frames = [cut(input), cut(&output)];
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let hop = Crossing {
            in_id,
            in_index: ie.index,
            in_len: input.len(),
            class: t.class,
            out_id,
            out_index: oe.index,
            out_len: output.len(),
        };
        // The FDB as the frame's own learning leaves it (a worker installs after forwarding).
        let plan = t.after.as_ref().map_or(&self.plan, |a| &a.0);
        let f = Forwarded {
            plan,
            hops: std::slice::from_ref(&hop),
            frames: &frames,
            out_ifindex: oe.ifindex,
            out_peer_mac: oe.peer_mac,
            out_into_host: oe.into_host,
            out_vxlan: oe.vxlan.as_deref(),
            copies: &[],
            generation: self.generation,
        };
        match flow_for(&f) {
            Ok(p) => {
                let how = if p.tunnel.is_some() {
                    "encapsulated in the program"
                } else if oe.peer_mac.is_some() {
                    "to the veth's peer"
                } else if oe.into_host {
                    "into the TAP's receive"
                } else {
                    "redirected"
                };
                format!(
                    "cacheable: the install's checks pass on this frame (both ports served, \
                     the FDB, the tag rewrite: {} tag{} popped, {} pushed; {how}); the first \
                     such frame the pipeline forwards installs the flow and the program \
                     forwards the rest",
                    p.key.ntags,
                    if p.key.ntags == 1 { "" } else { "s" },
                    p.action.push_n
                )
            }
            Err(r) => format!(
                "not cached ({}): {}; such frames go up, every one",
                r.name(),
                match r {
                    Refusal::Outputs => "not exactly one frame to one port",
                    Refusal::Port =>
                        "a port on the way is not one the program serves (or locked \
                         without an entry, stacked, …)",
                    Refusal::Fdb =>
                        "the FDB does not have the destination on that port, or the \
                         source on the ingress port, as the flow would check",
                    Refusal::Rewrite =>
                        "the frame that leaves is not the frame that came in \
                         with its tag stack replaced, or it has more tags than the program \
                         edits",
                    Refusal::Map => "the kernel refused the map write",
                }
            ),
        }
    }
}

impl Engine {
    /// The `fast` stage of traces made now (`None`: no fast path in this daemon).
    pub(super) fn fast_oracle(&mut self) -> Option<std::sync::Arc<dyn FastStage>> {
        self.fast.as_ref()?;
        let status = self.fast_status(false);
        let generation = self.fast.as_ref().map_or(0, |f| f.generation());
        let plan = self.session.switch_mut().plan();
        let egress = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref().filter(|s| s.open)?;
                Some((i as u16, Egress::of(s.token, &s.shared)))
            })
            .collect();
        Some(std::sync::Arc::new(FastOracle {
            status,
            plan,
            egress,
            generation,
        }))
    }
}
