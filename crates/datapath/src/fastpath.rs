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

/// One bridge a frame crossed, as the worker that forwarded it alone saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub in_id: u16,
    /// The program's index of the ingress port's opening ([`port_index`]).
    pub in_index: u16,
    /// The frame's whole length as it entered.
    pub in_len: usize,
    /// [`qbridge_bridge::Forwarder::fast_class`] of the frame in this bridge.
    pub class: Option<qbridge_bridge::FastClass>,
    /// The one output: port id and the program's index of that port.
    pub out_id: u16,
    pub out_index: u16,
    /// The output's whole length.
    pub out_len: usize,
}

/// What a worker knows of a frame it forwarded alone, to make a flow of it: every bridge it
/// crossed (more than one when patch links joined them) and the frames on the way.
#[derive(Debug)]
pub struct Forwarded<'a> {
    pub plan: &'a Plan,
    pub hops: &'a [Crossing],
    /// `frames[i]`: the frame entering hop `i`, its first [`PREFIX`] bytes (or more);
    /// `frames[hops.len()]`: as it left the last.
    pub frames: &'a [&'a [u8]],
    /// The egress interface (the last hop's output port's).
    pub out_ifindex: u32,
    /// The egress interface is a veth whose peer, in another namespace, has this address: a
    /// frame to it is redirected to the peer directly ([`qbridge_fastpath::ACT_PEER`]).
    pub out_peer_mac: Option<[u8; 6]>,
    /// The egress port is a TAP: the frame is delivered into its receive
    /// ([`qbridge_fastpath::ACT_INGRESS`]).
    pub out_into_host: bool,
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
    /// Per hop, the destination's entry, and the source's when the ingress port learns;
    /// last-seen times on the engine's clock.
    pub fdb: Vec<(FdbKey, FdbEntry)>,
}

/// The flow of `f`, or why there is none: what the worker installs (a pure function of the
/// plan, its FDB and the frames; the exactness tests call it too).
pub fn flow_for(f: &Forwarded<'_>) -> Result<FlowPlan, Refusal> {
    let (first, last) = match (f.hops.first(), f.hops.last()) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(Refusal::Outputs),
    };
    if f.hops.len() > qbridge_fastpath::MAX_HOPS || f.frames.len() != f.hops.len() + 1 {
        return Err(Refusal::Port);
    }
    if f.out_ifindex == 0 {
        return Err(Refusal::Port);
    }
    let input = f.frames[0];
    if input.len() < 14 {
        return Err(Refusal::Rewrite);
    }
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&input[..6]);
    src.copy_from_slice(&input[6..12]);
    let mac = qbridge_wire::MacAddr;
    let entry = |port: u16, seen: u64| FdbEntry {
        port: u32::from(port),
        version: 0,
        last_seen_ns: seen,
    };
    // Tags entering each hop, from the lengths (the program counts bytes so): the kernel's
    // TPIDs ([`qbridge_wire::Tpid::KERNEL`]), the program's.
    let tags0 = qbridge_io::port::kernel_tag_depth(input) as isize;
    let mut hops = Vec::with_capacity(f.hops.len());
    let mut fdb = Vec::with_capacity(2 * f.hops.len());
    let mut payload_max = i64::MAX;
    let mut extra = [0, 0];
    for (i, h) in f.hops.iter().enumerate() {
        let class = h.class.ok_or(Refusal::Outputs)?;
        let fin = f.plan.fast_port(PortId(h.in_id)).ok_or(Refusal::Port)?;
        let fout = f.plan.fast_port(PortId(h.out_id)).ok_or(Refusal::Port)?;
        if fin.bridge != class.bridge
            || fout.bridge != class.bridge
            || class.bridge >= qbridge_fastpath::MAX_BRIDGES
        {
            return Err(Refusal::Port);
        }
        if i == 0 && !qbridge_wire::Tpid(fin.tpid).is_kernel() {
            extra = [fin.tpid, 0];
        }
        // Every hop changes whole tags and nothing else (`compile` checks the ends).
        let (d_in, d_out) = (
            h.in_len as isize - first.in_len as isize,
            h.out_len as isize - first.in_len as isize,
        );
        if d_in % 4 != 0 || d_out % 4 != 0 {
            return Err(Refusal::Rewrite);
        }
        let (in_tags, out_tags) = (tags0 + d_in / 4, tags0 + d_out / 4);
        let most = qbridge_fastpath::maps::MAX_TAGS as isize;
        if !(0..=most).contains(&in_tags) || !(0..=most).contains(&out_tags) {
            return Err(Refusal::Rewrite);
        }
        if i > 0 && f.hops[i - 1].out_len != h.in_len {
            return Err(Refusal::Rewrite);
        }
        let d = f
            .plan
            .fdb_entry(class.bridge, mac(dst), class.fid)
            .filter(|e| e.forwards && e.port == h.out_id)
            .ok_or(Refusal::Fdb)?;
        fdb.push((
            fdb_key(class.bridge, dst, class.fid),
            entry(h.out_index, d.seen_ns),
        ));
        if fin.learning {
            let s = f
                .plan
                .fdb_entry(class.bridge, mac(src), class.fid)
                .filter(|e| e.port == h.in_id)
                .ok_or(Refusal::Fdb)?;
            fdb.push((
                fdb_key(class.bridge, src, class.fid),
                entry(h.in_index, s.seen_ns),
            ));
        }
        // The pipeline's size checks (each port's, with the frame's tags there) as one on
        // the frame without tags.
        payload_max = payload_max
            .min(fin.max_frame as i64 - 4 * in_tags as i64)
            .min(fout.max_frame as i64 - 4 * out_tags as i64);
        hops.push(qbridge_fastpath::Hop {
            in_port: u32::from(h.in_index),
            out_port: u32::from(h.out_index),
            dst_version: 0,
            bridge: class.bridge,
            fid: class.fid,
            vlan_slot: class.bridge << 12 | (class.vid & 0xfff),
            rx_pcp: class.pcp,
            flags: if fin.learning {
                qbridge_fastpath::HOP_LEARNING
            } else {
                0
            },
            in_tags: in_tags as u8,
            out_tags: out_tags as u8,
            pad: 0,
        });
    }
    let output = f.frames[f.hops.len()];
    // The lengths differ by whole tags; compare the same span of payload.
    let delta = last.out_len as isize - first.in_len as isize;
    let out_prefix = (input.len() as isize + delta).clamp(0, output.len() as isize) as usize;
    let out_tags = hops.last().map_or(0, |h| h.out_tags);
    let max_len = (payload_max + 4 * i64::from(out_tags)).clamp(0, u16::MAX as i64) as u16;
    let flags = match f.out_peer_mac {
        _ if f.out_into_host => qbridge_fastpath::ACT_INGRESS,
        Some(m) if m == dst => qbridge_fastpath::ACT_PEER,
        _ => 0,
    };
    let (key, action) = qbridge_fastpath::compile(&qbridge_fastpath::Decision {
        in_extra_tpids: extra,
        input,
        output: &output[..out_prefix],
        out_ifindex: f.out_ifindex,
        hops: &hops,
        flags,
        generation: f.generation,
        min_len: 14,
        max_len,
    })
    .map_err(|e| match e {
        NotCached::Short | NotCached::Tags | NotCached::Rewrite => Refusal::Rewrite,
        NotCached::Group => Refusal::Outputs,
    })?;
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
        slots.extend(p.action.hops().iter().map(|h| h.vlan_slot));
    }
    if let Ok(mut ports) = shared.counted_ports.lock() {
        for h in p.action.hops() {
            ports.insert((h.in_port & qbridge_fastpath::PORT_ID_MASK) as u16);
            ports.insert((h.out_port & qbridge_fastpath::PORT_ID_MASK) as u16);
        }
    }
    shared.installed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
