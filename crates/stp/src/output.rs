//! What the engine hands back: [`Output`]s (BPDU frames, per-(port, tree) states, FDB
//! flushes, events) and the [`RxError`] of a received frame that was not processed.

use crate::bpdu::BadBpdu;
use crate::types::{BridgeId, PortState, TreeId};
use serde::Serialize;

/// Something for the log or `monitor`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The root bridge (or this bridge's root port) changed.
    NewRoot {
        /// The new root bridge.
        root: BridgeId,
        /// The new root port, none when this bridge is root.
        root_port: Option<u16>,
    },
    /// A topology change was detected on (`notified: false`) or notified through a port.
    TopologyChange {
        /// Port number.
        port: u16,
        /// Detected here or learned from a neighbour.
        source: TcSource,
    },
    /// BPDU guard: an edge port heard a BPDU; the engine disabled it and the caller should
    /// shut it. `Stp::set_port_admin(port, OnOff::On)` re-admits it.
    BpduGuardShut {
        /// Port number.
        port: u16,
    },
    /// Root guard: superior information on a guarded port (kept discarding) or its end.
    RootInconsistent {
        /// Port number.
        port: u16,
        /// Entered or left.
        change: Inconsistency,
    },
    /// Loop guard: information aged out on a blocking port (kept discarding) or its end.
    LoopInconsistent {
        /// Port number.
        port: u16,
        /// Entered or left.
        change: Inconsistency,
    },
    /// Port Protocol Migration switched what the port sends.
    ProtocolMigration {
        /// Port number.
        port: u16,
        /// What the port sends from now on.
        now_sends: crate::types::SendProtocol,
    },
}

/// Where a topology change came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TcSource {
    /// A port of this bridge started forwarding (TCM DETECTED).
    Detected,
    /// A neighbour said so (TC flag or TCN BPDU; TCM NOTIFIED_TC).
    Notified,
}

/// A guard's inconsistency starting or ending.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Inconsistency {
    /// The guard now holds the port discarding.
    Entered,
    /// The guard released the port.
    Cleared,
}

/// What the caller must do.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Output {
    /// Send this whole frame (802.3/LLC, group destination, port MAC source) on `port`.
    Bpdu {
        /// Port number.
        port: u16,
        /// The frame.
        frame: Vec<u8>,
    },
    /// The port's state in `tree` is now `state`.
    PortState {
        /// Port number.
        port: u16,
        /// Spanning tree.
        tree: TreeId,
        /// New state.
        state: PortState,
    },
    /// Remove the dynamic FDB entries learned on `port` for the VLANs of `tree`.
    Flush {
        /// Port number.
        port: u16,
        /// Spanning tree.
        tree: TreeId,
    },
    /// Log / monitor.
    Event(Event),
}

/// Why a received frame was not processed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum RxError {
    /// unknown port
    #[error("no port {0}")]
    NoPort(u16),
    /// invalid BPDU (counted)
    #[error("bad BPDU: {0}")]
    Bad(BadBpdu),
    /// BPDU filter on (counted)
    #[error("BPDU filter is on")]
    Filtered,
    /// port disabled (counted)
    #[error("port is disabled")]
    PortDisabled,
    /// BPDU guard shut the port
    #[error("BPDU guard shut the port")]
    GuardShut,
}
