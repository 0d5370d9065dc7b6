//! The engine's glue to `trace live` (`crate::tracelive`): sessions started for the socket,
//! their configuration kept current, the ports whose fast-path hits the program copies up,
//! and the thread that reads those copies.

use super::Engine;
use crate::tracelive::HitReader;
use qbridge_control::trace::FastStage;
use qbridge_control::{OutputOptions, TraceLiveSpec};
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
            .is_some_and(|f| f.ports().any(|p| p == port.0));
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

impl Engine {
    /// The `fast` stage of traces made now (`None`: no fast path in this daemon).
    pub(super) fn fast_oracle(&mut self) -> Option<std::sync::Arc<dyn FastStage>> {
        self.fast.as_ref()?;
        Some(std::sync::Arc::new(self.fast_status(false)))
    }
}
