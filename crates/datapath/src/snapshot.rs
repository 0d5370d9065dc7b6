//! The engine's side of the counter snapshot ([`qbridge_control::Snapshot`]): the typed
//! record of every counter that `link show -s`, `stats.json` and `/metrics` render.
//!
//! The workers count into the switch's cells (forwarding, and the backends' drops by
//! [`DropReason`](qbridge_bridge::DropReason) name: `crate::worker` folds
//! [`BackendDrops`](qbridge_io::BackendDrops) and each [`TransmitReport`](crate::transmit::TransmitReport)'s
//! transmit failures in) and into each port's [`PortShared`] (the transmit stage's software GSO
//! and GRO, frames per worker). The control thread copies a port's `PortShared` into its
//! [`BackendCounters`] here ([`backend_counters`]) when it publishes the port's status, and
//! takes the whole snapshot here ([`take`]) for a scrape, adding what only it knows (link-down
//! events, worker threads, the state file). Control thread only; no lock but the port's
//! offload mutex, which this module does not take.

use crate::PortShared;
use qbridge_bridge::PortId;
use qbridge_control::{BackendCounters, Session, Snapshot};
use std::sync::atomic::Ordering;

/// The backend counters the workers keep in `shared`, as of now.
pub(crate) fn backend_counters(shared: &PortShared) -> BackendCounters {
    BackendCounters {
        tx_sw_gso: shared.tx_sw_gso.load(Ordering::Relaxed),
        tx_gso_refused: shared.tx_gso_refused.load(Ordering::Relaxed),
        tx_gro_frames: shared.tx_gro_frames.load(Ordering::Relaxed),
        tx_gro_segments: shared.tx_gro_segments.load(Ordering::Relaxed),
        rx_frames_by_worker: shared
            .rx_frames_by_worker
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect(),
    }
}

/// Every counter of `session` (whose ports' status the caller has just published), with each
/// port's link-down events from `link_downs`, `workers` worker threads and the state file's
/// `state_unsaved`.
pub(crate) fn take(
    session: &Session,
    link_downs: impl Fn(PortId) -> u64,
    workers: usize,
    state_unsaved: Option<bool>,
) -> Snapshot {
    let mut snap = session.snapshot();
    for p in &mut snap.ports {
        p.link_downs = link_downs(PortId(p.id));
    }
    snap.workers = workers;
    snap.state_unsaved = state_unsaved;
    snap
}
