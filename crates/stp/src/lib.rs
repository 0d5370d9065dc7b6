//! qbridge-stp: the spanning-tree engine of issue 19, sans I/O.
//!
//! One [`Stp`] value is one bridge's spanning-tree protocol entity: RSTP as 802.1D-2004
//! clause 17 specifies it (with legacy STP, ForceVersion 0, and per-port fallback to STP
//! BPDUs by Port Protocol Migration), plus the parts of MSTP (802.1Q-2022 clause 13) listed
//! below. The caller feeds it received frames, one-second ticks, link and configuration
//! changes; it answers with [`Output`]s: BPDU frames to send, per-(port, tree) state changes,
//! FDB flush requests and events. It never reads a clock, opens a socket or spawns a thread,
//! so the whole protocol runs deterministically in unit tests (`tests/sim.rs` simulates
//! networks of bridges and LANs in the language of Open vSwitch's `test-stp`/`test-rstp`).
//!
//! Files: `types.rs` (ids, priority vectors, roles), `bpdu.rs` (codec), `mst.rs` (region,
//! digest), `port.rs` (per-port variables), `machines.rs` (PRX, PPM, BDM, PTX, PIM),
//! `roles.rs` (PRT, PST), `topology.rs` (TCM), `procs.rs` (17.21 procedures), `select.rs`
//! (PRS), `trees.rs` (MSTIs: per-tree state and the context switch), `config.rs` (bridge
//! configuration), `output.rs` (outputs, events), `vars.rs` (bridge-level machine state the
//! engine holds: the PRS state, an MSTI's variables out of context), `engine.rs` (the
//! [`Stp`] struct and the API), `show.rs` (status snapshot).
//!
//! Imports run one way: `types`, then `bpdu`, `port`, `config`, `mst`, `output`, `vars`,
//! then `engine`, then the files that add `impl Stp` blocks (`machines`, `roles`,
//! `topology`, `procs`, `select`, `trees`, `show`), which import the engine; the engine
//! imports none of them and calls their methods through `self`.
//!
//! Design notes and deviations:
//! - Times are whole seconds; the caller calls [`Stp::tick`] once per second.
//! - fdbFlush is immediate: the engine emits [`Output::Flush`] and the caller flushes
//!   before it delivers the next input.
//! - A received TCN sets rcvdTcn in the PIM's OTHER state (the 2004 figures never reach
//!   setTcFlags for a TCN); recordDispute, allSynced and the ROOT_SYNCED state follow
//!   802.1Q-2022, which corrected 802.1D-2004 there.
//! - MSTP (`Mode::Mstp`): the CIST priority vector carries the regional root and the
//!   internal root path cost (802.1Q 13.9); BPDUs from this region (same MST Configuration
//!   Identifier, `mst.rs`) are internal, anything else makes a boundary port; every MSTI of
//!   the region's VID table runs the same PIM/PRS/PRT/PST/TCM machines over its own
//!   per-port variables (`trees.rs` swaps them in), with MSTI messages in the MST BPDU,
//!   remaining hops, Master ports and boundary ports whose MSTI roles follow the CIST.
//!   Not done: the master/mastered flags and allTransmitReady, per-MSTI TC propagation
//!   into the CIST across a boundary (a boundary TC reaches every MSTI, not back), and the
//!   "MSTI information from a different regional root is ignored" refinement; see
//!   `docs/stp.md`.
//! - One set of machines serves every tree: `trees.rs` swaps a tree's per-port and
//!   per-bridge variables into the fields the machines read, runs them, and swaps them
//!   back. The alternative, indexing every variable by (port, tree), would have rewritten
//!   every line of the clause 17 machines and made them harder to check against the
//!   figures; the swap is O(ports) per tree per pass, negligible at bridge port counts.

pub mod bpdu;
mod config;
mod engine;
mod machines;
pub mod mst;
mod output;
mod port;
mod procs;
mod roles;
mod select;
mod show;
mod topology;
mod trees;
pub mod types;
mod vars;

pub use engine::{
    BridgeConfig, ConfigError, Event, GroupAddress, Inconsistency, Link, Mode, Output, RxError,
    Stp, TcSource,
};
pub use port::{
    BadCounts, Cost, Duplex, InfoIs, Neighbour, OnOff, PointToPoint, PortCounters, PortFlag,
};
pub use show::{PortShow, RootStatus, Show, TreeShow};
pub use types::{
    BridgeId, Mac, PortId, PortRole, PortState, PriorityVector, SendProtocol, Times, TreeId,
};
