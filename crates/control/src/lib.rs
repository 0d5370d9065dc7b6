//! The control plane of qbridge: the command grammar of ip-link(8) and bridge(8), batch files,
//! and the execution of commands against a [`Switch`](qbridge_bridge::Switch).
//!
//! The modules, each importing only modules listed after it (imports run one way):
//! - [`session`] ([`Session`]): executes commands against the switch and records each port's
//!   backend ([`PortSpec`]) and, in a daemon, its status ([`BackendStatus`]); batches are
//!   all-or-nothing. The one module that calls the others;
//! - output, from a [`Switch`](qbridge_bridge::Switch) and a [`Backends`] lookup (the
//!   session is one), never the session: [`running`] (`show running-config`), [`render`]
//!   (the show commands' text and JSON), [`mirror`] (the `mirror` object: execution on a
//!   switch, and its output);
//! - [`stats`]: the typed counter [`Snapshot`] that `link show -s`, `stats.json` and the
//!   daemon's Prometheus endpoint render;
//! - [`status`]: a port's backend status in a daemon and the [`Backends`] lookup;
//! - [`parse`]: words to a typed [`Command`] (syntax only; no switch needed), with [`words`]
//!   (iproute2's abbreviation rules and "did you mean");
//! - [`usage`] (the help texts), [`protocol`] (the control-socket messages between the CLI
//!   and the daemon), [`command`] (the typed commands), [`vxlan`] (a VXLAN port's spec, its
//!   `fdb … dst` operations and their output lines), [`error`], [`json`] (the show commands'
//!   JSON as another program reads it: typed, deserializable, for qbridge-cni and
//!   qbridge-evpn).
//!
//! Semantics (what a VLAN, an FDB kind or a port flag does, and which values the switch
//! accepts) live in `qbridge-bridge`; this crate only names them. Where iproute2 differs:
//! `ageing_time` is in seconds here (iproute2: centiseconds), and `fdb add` without `static`
//! or `dynamic` adds a `permanent` (local) entry, exactly as iproute2 does — frames to a
//! permanent address are for the bridge itself and are dropped as `local`; use `static` for a
//! forwarding entry.
//!
//! Output notes: `vlan show` lists one VID per line (with `-c`, ranges) and leaves out
//! ports with no VLAN; `vlan show -s` shows the per-VLAN counters of each bridge (qbridge
//! counts per bridge and VID, not per port); `fdb show -s` adds `updated N` (seconds since the
//! entry was added or last refreshed; iproute2 prints `used N/M`, and qbridge does not track
//! use). `link set dev NAME type bridge_slave …` is accepted as a synonym of
//! `link set dev NAME …`; `fdb add … master` is accepted and ignored (every qbridge entry is a
//! bridge entry, except a VXLAN port's `… dst IP` entries: the port's own, bridge-fdb's
//! `self`), as are kind words on `fdb del`.

pub mod command;
pub mod error;
pub mod json;
pub mod mirror;
pub mod parse;
pub mod protocol;
pub mod render;
pub mod running;
pub mod session;
pub mod stats;
pub mod status;
pub mod trace;
pub mod trace_details;
pub mod usage;
pub mod vxlan;
pub mod words;

pub use command::{
    BondMember, BondOptions, BondSpec, BridgeOptions, Command, FdbCommand, LinkCommand, LiveFilter,
    MasterChange, MirrorCommand, Object, OutputOptions, PortOptions, PortSpec, StpBridgeOptions,
    StpCommand, StpPortOptions, TraceLiveSpec, VidRange, VlanCommand, XdpAttach,
};
pub use error::ControlError;
pub use parse::{parse_line, parse_words, split_words};
pub use protocol::{
    batch_too_long, Incoming, MonitorObject, Op, Request, Response, WireOptions, MAX_BATCH_BYTES,
    MAX_REQUEST_LINE_BYTES, PROTOCOL_VERSION,
};
pub use session::{Session, MAX_BOND_MEMBERS};
pub use stats::{BondMemberStats, PortStats, Snapshot};
pub use status::{
    BackendCounters, BackendStatus, Backends, BondDrops, BondMemberTraffic, DeviceOffloadStatus,
    FastPathStatus,
};
