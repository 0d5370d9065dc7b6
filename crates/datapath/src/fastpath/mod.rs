//! The eBPF fast path's flow cache in the daemon (docs/fast-path.md): one room for the
//! miss → flow path. The program (`qbridge_fastpath`, `bpf/fastpath.c`) forwards the frames
//! of cached flows and sends every other frame up; here the daemon
//!
//! - services the upcall device and forwards the misses with the worker's pipeline
//!   (`upcall`: a worker runs a `upcall::FastWorker` through what it lends of itself,
//!   `upcall::Host`, and stays receive → process → transmit);
//! - makes a flow of a frame forwarded alone (`flow`: [`flow_for`], a pure function of the
//!   plan, its FDB and the frames) and installs it (`install`);
//! - keeps the FDB map's mirrored entries in line with the pipeline's log of changes
//!   (`install::follow_plan`, the workers' and the engine's);
//! - holds what the engine and the workers share (`FastShared`).
//!
//! - runs the program for the control thread (`control::FastRt`: loading it, the upcall
//!   device, attaching to ports, the generation, the FDB map compared whole, the program's
//!   counters folded, `show fast-path`); the engine calls it with what it knows of its ports
//!   (`engine/fast.rs`, the glue), and reads the plan through `qbridge_bridge`'s
//!   `plan/fast.rs`.
//!
//! A flow is installed from a frame forwarded in a batch of its own: exactly one frame left, on
//! one port, with no mirror copy or trapped copy; classification put it in a bridge whose both
//! ports the fast path serves ([`Plan::fast_port`](qbridge_bridge::Plan::fast_port)); the FDB
//! has the destination on that port (forwarding to it) and, if the ingress port learns, the
//! source on the ingress port; and [`qbridge_fastpath::compile`] finds the output to be the
//! input with its tag stack replaced. The flow carries the configuration generation the
//! worker forwarded under; the engine bumps the program's before a changed configuration
//! reaches the workers, so a flow made under an older one is a miss from then on.

pub(crate) mod bond;
pub(crate) mod control;
pub(crate) mod decap;
mod flow;
mod install;
pub(crate) mod upcall;
pub(crate) mod vxlan;

pub use flow::{flow_for, split_copies, Crossing, FlowPlan, Forwarded, SeenCopy, PREFIX};
pub(crate) use install::{follow_plan, install};
pub use vxlan::{tunnel_for, VxlanEgress};

use qbridge_fastpath::{FdbKey, MapWriter};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Whether this build has the fast path's program (clang was there when it was built): a
/// binary without it forwards every frame in the pipeline, and says so in `-V`, in the
/// daemon's `ready` line and in `show fast-path`.
pub fn built() -> bool {
    qbridge_fastpath::FastPath::built()
}

/// `qbridge daemon --fast-path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FastPathMode {
    /// On where the kernel allows it, else off (said once).
    #[default]
    Auto,
    /// On, or the daemon does not start.
    On,
    Off,
}

impl FastPathMode {
    pub fn name(self) -> &'static str {
        match self {
            FastPathMode::Auto => "auto",
            FastPathMode::On => "on",
            FastPathMode::Off => "off",
        }
    }
}

impl std::str::FromStr for FastPathMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(FastPathMode::Auto),
            "on" => Ok(FastPathMode::On),
            "off" => Ok(FastPathMode::Off),
            _ => Err(format!(
                "invalid --fast-path \"{s}\" (expected auto, on or off)"
            )),
        }
    }
}

/// Why a worker did not install a flow for a frame it forwarded (counted, `show fast-path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not exactly one frame out on one port (a flood, a drop, a mirror or trapped copy).
    Outputs,
    /// A port the fast path does not serve (another backend, locked, stacked, …).
    Port,
    /// The FDB does not have the destination (or the source) where the frame went (came).
    Fdb,
    /// The output is not the input with its tags replaced, or more tags than the program edits.
    Rewrite,
    /// The kernel refused a map write.
    Map,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::Outputs,
        Refusal::Port,
        Refusal::Fdb,
        Refusal::Rewrite,
        Refusal::Map,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Refusal::Outputs => "outputs",
            Refusal::Port => "port",
            Refusal::Fdb => "fdb",
            Refusal::Rewrite => "rewrite",
            Refusal::Map => "map",
        }
    }
}

/// What the engine and the workers share.
#[derive(Debug)]
pub(crate) struct FastShared {
    pub writer: MapWriter,
    /// The configuration generation the program holds (the engine bumps it; a worker installs
    /// flows only while it forwards with the plan of that generation).
    pub generation: AtomicU32,
    pub installed: AtomicU64,
    pub refused: [AtomicU64; Refusal::ALL.len()],
    /// Upcalled frames of a port that is no longer open as it was (closed or reopened since):
    /// dropped, never given to another port.
    pub stale_upcalls: AtomicU64,
    /// `CLOCK_MONOTONIC` (the program's `bpf_ktime_get_ns`) at the engine's epoch, minus 1:
    /// engine time + this = the program's time.
    pub mono_offset: u64,
    /// Per-VLAN counter slots the flows use (`bridge << 12 | VID`): the engine folds those.
    pub vlan_slots: Mutex<BTreeSet<u16>>,
    /// Ports the flows count (the ports the program receives on, and the patch link ends
    /// flows cross): the engine folds those.
    pub counted_ports: Mutex<BTreeSet<u16>>,
    /// An FDB change log overflowed: the engine compares the whole FDB map at its next tick.
    pub resync: std::sync::atomic::AtomicBool,
    /// Misses the kernel dropped because an upcall socket's ring was full (the workers fell
    /// behind): lost before any port could count them.
    pub upcall_ring_full: AtomicU64,
    /// When each flow was last installed, by key (`trace live` tells a hit's flow's age; at
    /// most twice the program's table, then started afresh).
    pub installed_at:
        Mutex<std::collections::HashMap<qbridge_fastpath::FlowKey, std::time::Instant>>,
}

impl FastShared {
    pub fn new(writer: MapWriter, mono_offset: u64) -> FastShared {
        FastShared {
            writer,
            generation: AtomicU32::new(0),
            installed: AtomicU64::new(0),
            refused: Default::default(),
            stale_upcalls: AtomicU64::new(0),
            mono_offset,
            vlan_slots: Mutex::new(BTreeSet::new()),
            counted_ports: Mutex::new(BTreeSet::new()),
            resync: std::sync::atomic::AtomicBool::new(false),
            upcall_ring_full: AtomicU64::new(0),
            installed_at: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Flow `key` was installed now.
    pub fn note_installed(&self, key: qbridge_fastpath::FlowKey) {
        let Ok(mut m) = self.installed_at.lock() else {
            return;
        };
        if m.len() >= 2 * 65_536 {
            m.clear();
        }
        m.insert(key, std::time::Instant::now());
    }

    /// How long ago flow `key` was installed, if this daemon remembers.
    pub fn installed_ago(&self, key: &qbridge_fastpath::FlowKey) -> Option<std::time::Duration> {
        self.installed_at.lock().ok()?.get(key).map(|t| t.elapsed())
    }

    pub fn refuse(&self, r: Refusal) {
        self.refused[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Engine time (ns since its epoch, never 0) → the program's clock.
    pub fn mono_time(&self, engine_ns: u64) -> u64 {
        engine_ns.saturating_add(self.mono_offset)
    }

    /// The program's clock → engine time.
    pub fn engine_time(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_sub(self.mono_offset)
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
pub(crate) fn mono_now() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The program's index of a port opening (`token` = `generation << 16 | id`): the id in the
/// low 12 bits, 4 bits of the opening's generation above (an upcall of an earlier opening of a
/// reused id is told apart).
pub fn port_index(token: u64) -> u16 {
    (token & 0xfff) as u16 | (((token >> 16) & 0xf) as u16) << 12
}

/// Whether the program may receive for port `id`: ids below 4095 (the index of id 4095's
/// sixteenth opening would be 0xffff, an upcall's "no port").
pub(crate) fn servable(id: u16) -> bool {
    u32::from(id) < qbridge_fastpath::MAX_PORTS - 1
}

/// The FDB map's key.
pub fn fdb_key(bridge: u16, mac: [u8; 6], fid: u16) -> FdbKey {
    FdbKey {
        bridge,
        fid,
        mac,
        pad: 0,
    }
}
