//! The control thread's part of the spanning tree: the engines live in the session
//! (`qbridge_control::SpanningTree`, pure); this room feeds them what only the runtime
//! knows — the trapped BPDUs ([`Ctl::Bpdu`](crate::shared::Ctl)), the one-second tick, the
//! ports' links after the link watch and each reconciliation — and sends the BPDUs they
//! want sent through worker 0 (`ToWorker::Inject`: out of the port as they are, whatever
//! the port's state). Their port states and flushes are already in the switch; the next
//! publish hands the workers the plan with them.

use super::{send, Engine};
use std::time::Duration;

/// How often [`Engine::carrier_watch`] looks while a bridge runs the spanning tree.
pub(super) const CARRIER_POLL: Duration = Duration::from_millis(50);
use crate::worker::ToWorker;
use qbridge_bridge::PortId;
use qbridge_control::PortSpec;

impl Engine {
    /// The trees follow the ports and links (after a command, the link watch, a failed queue).
    pub(super) fn stp_sync(&mut self) {
        self.stp_speeds();
        self.session.stp_sync();
        self.stp_send();
    }

    /// One second passed.
    pub(super) fn stp_tick(&mut self) {
        self.stp_speeds();
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

    /// Every [`CARRIER_POLL`] while a bridge runs the tree: an AF_PACKET or AF_XDP port of
    /// such a bridge whose device lost carrier goes down now. The kernel announces a lost
    /// carrier (the link watch's notification, its `IFF_RUNNING`) only when its linkwatch
    /// runs, up to a second later; the driver's carrier (ETHTOOL_GLINK) knows at once, and a
    /// second of a ring port forwarding into nothing is a second of loss the spanning tree
    /// could have saved. Returns whether a port went down.
    pub(super) fn carrier_watch(&mut self) -> bool {
        if !self.session.spanning_tree().running() {
            return false;
        }
        let sw = self.session.switch();
        let lost: Vec<(u16, String)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u16, s.as_ref()?)))
            .filter(|(_, s)| s.link_up)
            .filter(|(i, _)| {
                sw.port_master(PortId(*i))
                    .is_some_and(|b| sw.bridge_settings(b).stp)
            })
            .filter_map(|(i, s)| match &s.spec {
                PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => {
                    (qbridge_io::sys::carrier(dev) == Some(false)).then(|| (i, dev.clone()))
                }
                _ => None,
            })
            .collect();
        for (id, dev) in &lost {
            self.link_down(*id, &format!("interface {dev}: no carrier"));
        }
        if !lost.is_empty() {
            self.stp_sync();
        }
        !lost.is_empty()
    }

    /// Tells the session the speed of each AF_PACKET and AF_XDP port whose link is up (for
    /// `cost auto`), read once per opening of the port; only while a bridge runs the tree.
    fn stp_speeds(&mut self) {
        if !self.session.spanning_tree().running() {
            return;
        }
        let mut learned = Vec::new();
        for slot in self.slots.iter().flatten() {
            let (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }) = &slot.spec else {
                continue;
            };
            if !slot.link_up || self.speeds_read.get(&slot.name) == Some(&slot.token) {
                continue;
            }
            learned.push((
                slot.name.clone(),
                slot.token,
                qbridge_io::sys::link_speed(dev).unwrap_or(0),
            ));
        }
        for (name, token, mbps) in learned {
            self.session.set_link_speed(&name, mbps);
            self.speeds_read.insert(name, token);
        }
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
