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

//!
//! The crate is three rooms with every import running one way:
//! - [`config`]: the [`Switch`], its operations and views, and the settings types
//!   (re-exported from `settings`);
//! - [`plan`]: the compiled [`Plan`] (per-port and per-bridge records, flood lists, compiled
//!   mirror sessions) and the functions that compile it;
//! - [`path`]: the frame path, run by a [`Forwarder`]: process → classify → decide → tag rewrite →
//!   flood, stacked devices and mirroring.
//!
//! `config` and `path` import `plan`; `plan` imports neither; `config` imports `path` only to
//! hold worker 0 and call its `process` ([`Switch::process`]). The leaf modules (settings,
//! error, FDB, cells, counters, VLAN sets, modes and maps) import none of the three.

pub mod cells;
pub mod config;
pub mod counters;
pub mod error;
pub mod fdb;
pub mod fdbwatch;
pub mod path;
pub mod plan;
pub mod settings;
pub mod tagmap;
pub mod trace;
pub mod vlanmode;
mod vlanset;

pub use config::{
    check_vid, tpid_name, LinkView, MirrorView, PortView, Switch, VlanEntryView, VlanView,
};
pub use config::{LinkInfo, LinkInfoData};
pub use counters::{DropReason, PortCounters, VlanCounters};
pub use error::{ConfigError, MirrorError};
pub use fdb::{FdbEntryView, FdbFilter, FdbFlushKind, FdbFlushMatch, FdbKind, FdbMove};
pub use fdbwatch::{FdbChange, FdbWatch};
pub use path::{Forwarder, Outputs};
pub use plan::fast::{FastChange, FastClass, FastCopy, FastEntry, FastPort};
pub use plan::mirror::MirrorCounters;
pub use plan::{BridgeId, Plan, PortId, MAX_PORTS};
pub use settings::{
    BridgeSettings, MacvlanMode, MirrorDirection, MirrorDst, MirrorSpec, PcpMode, PortSettings,
    Role, StpState, VlanProtocol, MAX_MIRRORS,
};
pub use tagmap::TagMap;
pub use trace::{
    AfterPlan, OutputKind, Trace, TraceDrop, TraceFrame, TraceOutput, TraceStep, Verdict,
};
pub use vlanmode::{PvlanRole, VidList, Violation, VlanMode, VlanModeKind};
pub use vlanset::VlanSet;
