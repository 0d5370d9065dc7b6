//! The eBPF fast path's runtime in the daemon (docs/fast-path.md): what the control thread
//! (`engine/fast.rs`) and the workers share, and the workers' half — receiving the upcall
//! device's frames (a miss of the program, the ingress port in the accelerated tag), forwarding
//! them with the pipeline, and installing a flow when the pipeline's decision for a frame is a
//! pure function of the flow's key.
//!
//! A flow is installed from a frame forwarded in a batch of its own: exactly one frame left, on
//! one port, with no mirror copy or trapped copy; classification put it in a bridge whose both
//! ports the fast path serves ([`Plan::fast_port`]); the FDB has the destination on that port
//! (forwarding to it) and, if the ingress port learns, the source on the ingress port; and
//! [`qbridge_fastpath::compile`] finds the output to be the input with its tag stack replaced.
//! The flow carries the configuration generation the worker forwarded under; the engine bumps
//! the program's before a changed configuration reaches the workers, so a flow made under an
//! older one is a miss from then on.

use qbridge_bridge::{FastChange, Plan, PortId};
use qbridge_fastpath::{FdbEntry, FdbKey, MapWriter, NotCached};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// An FDB change log overflowed: the engine compares the whole FDB map at its next tick.
    pub resync: std::sync::atomic::AtomicBool,
    /// Misses the kernel dropped because an upcall socket's ring was full (the workers fell
    /// behind): lost before any port could count them.
    pub upcall_ring_full: AtomicU64,
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
            resync: std::sync::atomic::AtomicBool::new(false),
            upcall_ring_full: AtomicU64::new(0),
        }
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

/// The FDB map's key.
pub fn fdb_key(bridge: u16, mac: [u8; 6], fid: u16) -> FdbKey {
    FdbKey {
        bridge,
        fid,
        mac,
        pad: 0,
    }
}

/// Brings the FDB map's mirrored entries in line with `changes` (entries that moved, changed or
/// went in the pipeline's FDB): an entry the map has is rewritten (its port now, its opening
/// from `index`) or removed; entries the map does not have stay out.
pub(crate) fn follow_changes(
    shared: &FastShared,
    changes: &[FastChange],
    index: impl Fn(u16) -> Option<u16>,
) {
    for (bridge, mac, fid, entry) in changes {
        let key = fdb_key(*bridge, mac.0, *fid);
        if !matches!(shared.writer.fdb(&key), Ok(Some(_))) {
            continue;
        }
        let now = entry
            .filter(|e| e.forwards)
            .and_then(|e| Some((index(e.port)?, e.seen_ns)));
        let r = match now {
            Some((port, seen)) => shared.writer.set_fdb(
                &key,
                &FdbEntry {
                    port: u32::from(port),
                    version: 0,
                    last_seen_ns: shared.mono_time(seen),
                },
            ),
            None => shared.writer.remove_fdb(&key),
        };
        if let Err(e) = r {
            tracing::debug!("fast path: FDB map: {e}");
        }
    }
}

/// What a worker knows of a frame it forwarded alone, to make a flow of it.
#[derive(Debug)]
pub struct Forwarded<'a> {
    pub plan: &'a Plan,
    pub in_id: u16,
    /// The program's index of the ingress port's opening ([`port_index`]).
    pub in_index: u16,
    /// The frame as received, its first [`PREFIX`] bytes (or more), and its whole length.
    pub input: &'a [u8],
    pub in_len: usize,
    /// [`qbridge_bridge::Forwarder::fast_class`] of the frame.
    pub class: Option<qbridge_bridge::FastClass>,
    /// The one output: port id, the program's index and ifindex of that port, the frame.
    pub out_id: u16,
    pub out_index: u16,
    pub out_ifindex: u32,
    pub output: &'a [u8],
    pub generation: u32,
}

/// Bytes of a frame a worker keeps to compare with what the pipeline sent: every tag and the
/// start of the payload (the pipeline edits tags only; `compile` checks the rest is equal).
pub const PREFIX: usize = 128;

/// A flow to install: its key and action, and the FDB map entries it relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPlan {
    pub key: qbridge_fastpath::FlowKey,
    pub action: qbridge_fastpath::FlowAction,
    /// The destination's entry, and the source's when the ingress port learns; last-seen
    /// times on the engine's clock.
    pub fdb: Vec<(FdbKey, FdbEntry)>,
}

/// The flow of `f`, or why there is none: what the worker installs (a pure function of the
/// plan, its FDB and the two frames; the exactness tests call it too).
pub fn flow_for(f: &Forwarded<'_>) -> Result<FlowPlan, Refusal> {
    let class = f.class.ok_or(Refusal::Outputs)?;
    let fin = f.plan.fast_port(PortId(f.in_id)).ok_or(Refusal::Port)?;
    let fout = f.plan.fast_port(PortId(f.out_id)).ok_or(Refusal::Port)?;
    if fin.bridge != class.bridge
        || fout.bridge != class.bridge
        || class.bridge >= qbridge_fastpath::MAX_BRIDGES
        || f.out_ifindex == 0
    {
        return Err(Refusal::Port);
    }
    if f.input.len() < 14 {
        return Err(Refusal::Rewrite);
    }
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&f.input[..6]);
    src.copy_from_slice(&f.input[6..12]);
    let mac = qbridge_wire::MacAddr;
    let d = f
        .plan
        .fdb_entry(class.bridge, mac(dst), class.fid)
        .filter(|e| e.forwards && e.port == f.out_id)
        .ok_or(Refusal::Fdb)?;
    let s = if fin.learning {
        Some(
            f.plan
                .fdb_entry(class.bridge, mac(src), class.fid)
                .filter(|e| e.port == f.in_id)
                .ok_or(Refusal::Fdb)?,
        )
    } else {
        None
    };
    // The lengths differ by whole tags; compare the same span of payload.
    let delta = f.output.len() as isize - f.in_len as isize;
    if delta % 4 != 0 || delta.abs() > 8 {
        return Err(Refusal::Rewrite);
    }
    let out_prefix = (f.input.len() as isize + delta).clamp(0, f.output.len() as isize) as usize;
    let extra = if fin.tpid == 0x8100 || fin.tpid == 0x88a8 {
        [0, 0]
    } else {
        [fin.tpid, 0]
    };
    // The pipeline's two size checks as one on the output: the ingress port's (before the
    // edit) and the egress port's.
    let max_len = (fout.max_frame as i64)
        .min(fin.max_frame as i64 + delta as i64)
        .clamp(0, u16::MAX as i64) as u16;
    let (key, action) = qbridge_fastpath::compile(&qbridge_fastpath::Decision {
        in_port: u32::from(f.in_index),
        in_extra_tpids: extra,
        input: f.input,
        output: &f.output[..out_prefix],
        out_ifindex: f.out_ifindex,
        out_port: u32::from(f.out_index),
        bridge: class.bridge,
        fid: class.fid,
        dst_version: 0,
        vlan_slot: class.bridge << 12 | (class.vid & 0xfff),
        rx_pcp: class.pcp,
        generation: f.generation,
        min_len: 14,
        max_len,
    })
    .map_err(|e| match e {
        NotCached::Short | NotCached::Tags | NotCached::Rewrite => Refusal::Rewrite,
        NotCached::Group => Refusal::Outputs,
    })?;
    let entry = |port: u16, seen: u64| FdbEntry {
        port: u32::from(port),
        version: 0,
        last_seen_ns: seen,
    };
    let mut fdb = vec![(
        fdb_key(class.bridge, dst, class.fid),
        entry(f.out_index, d.seen_ns),
    )];
    if let Some(s) = s {
        fdb.push((
            fdb_key(class.bridge, src, class.fid),
            entry(f.in_index, s.seen_ns),
        ));
    }
    Ok(FlowPlan { key, action, fdb })
}

/// Installs the flow of `f`, or says why not.
pub(crate) fn install(shared: &FastShared, f: &Forwarded<'_>) -> Result<(), Refusal> {
    let p = flow_for(f)?;
    let w = &shared.writer;
    let mut r = Ok(());
    for (k, mut e) in p.fdb {
        e.last_seen_ns = shared.mono_time(e.last_seen_ns);
        r = r.and_then(|()| w.set_fdb(&k, &e));
    }
    r.and_then(|()| w.insert_flow(&p.key, &p.action))
        .map_err(|e| {
            tracing::debug!("fast path: installing a flow: {e}");
            Refusal::Map
        })?;
    if let Ok(mut slots) = shared.vlan_slots.lock() {
        slots.insert(p.action.vlan_slot);
    }
    shared.installed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
