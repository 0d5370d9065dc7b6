//! The forwarding core of qbridge, sans-I/O: bridges, ports, compiled VLAN policy, the FDB,
//! the batch pipeline, drop reasons and counters.
//!
//! A [`Switch`] holds any number of bridges and ports. It never makes a syscall or reads a
//! clock: time is an argument (`now_ns`, nanoseconds on any monotonic clock the caller picks;
//! pcap replay uses capture timestamps). Frames go in as a [`Batch`](qbridge_packet::Batch) whose
//! buffers carry their ingress port id, and come out as one batch per egress port in
//! [`Outputs`].
//!
//! Configuration operations (`add_bridge`, `vlan_add`, `fdb_add`, …) validate fully before they
//! change anything: an `Err` leaves the switch as it was. `Switch` is `Clone`, which is how a
//! batch of commands is applied all-or-nothing.
//!
//! The semantics are those of the Linux bridge with `vlan_filtering 1`, IEEE 802.1Q where Linux
//! is silent; `docs/semantics.md` states them rule by rule.

pub mod cells;
pub mod config;
pub mod counters;
pub mod error;
pub mod fdb;
pub mod fdbwatch;
pub mod mirror;
mod pipeline;
pub mod stack;
pub mod switch;
pub mod tagmap;
pub mod vlanmode;
mod vlanset;

pub use config::{BridgeSettings, PcpMode, PortSettings, VlanProtocol};
pub use counters::{DropReason, PortCounters, VlanCounters};
pub use error::ConfigError;
pub use fdb::{FdbEntryView, FdbFilter, FdbFlushKind, FdbFlushMatch, FdbKind, FdbMove};
pub use fdbwatch::{FdbChange, FdbWatch};
pub use mirror::{MirrorCounters, MirrorDirection, MirrorDst, MirrorSpec, MirrorView, MAX_MIRRORS};
pub use stack::{MacvlanMode, Role};
pub use switch::{BridgeId, LinkView, Outputs, Plan, PortId, Switch, VlanView, Worker, MAX_PORTS};
pub use tagmap::TagMap;
pub use vlanmode::{PvlanRole, VidList, Violation, VlanMode, VlanModeKind};
pub use vlanset::VlanSet;
