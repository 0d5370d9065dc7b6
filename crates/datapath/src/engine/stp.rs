//! The control thread's part of the spanning tree: the engines live in the session
//! (`qbridge_control::SpanningTree`, pure); this room feeds them what only the runtime
//! knows — the trapped BPDUs ([`Ctl::Bpdu`](crate::shared::Ctl)), the one-second tick, the
//! ports' links after the link watch and each reconciliation — and sends the BPDUs they
//! want sent through worker 0 (`ToWorker::Inject`: out of the port as they are, whatever
//! the port's state). Their port states and flushes are already in the switch; the next
//! publish hands the workers the plan with them.

use super::{send, Engine};
use crate::worker::ToWorker;
use qbridge_bridge::PortId;

impl Engine {
    /// The trees follow the ports and links (after a command, the link watch, a failed queue).
    pub(super) fn stp_sync(&mut self) {
        self.session.stp_sync();
        self.stp_send();
    }

    /// One second passed.
    pub(super) fn stp_tick(&mut self) {
        self.session.stp_sync();
        self.session.stp_tick();
        self.stp_send();
    }

    /// A BPDU a worker trapped on port `port`.
    pub(super) fn stp_bpdu(&mut self, port: u16, frame: &[u8]) {
        self.punt.leave();
        if !self.session.stp_receive(PortId(port), frame) {
            tracing::debug!("a BPDU from port {port}, whose bridge runs no spanning tree now");
        }
        self.stp_send();
    }

    /// Sends the BPDUs the trees produced, hands their events to the monitors.
    fn stp_send(&mut self) {
        let bpdus = self.session.stp_take_bpdus();
        if let Some(w0) = self.workers.first() {
            for (id, frame) in bpdus {
                send(w0, ToWorker::Inject { port: id.0, frame });
            }
        }
        for (bridge, text, ev) in self.session.stp_take_events() {
            self.monitors.stp_event(&bridge, &text, &ev);
        }
    }
}
