//! Port mirroring (`mirror add NAME src P1[,P2] [direction rx|tx|both] [vid LIST] dst PORT|pcap
//! FILE [rspan VID]`): a copy of the frames a port receives and/or sends, exactly as they
//! passed the port, to another port or to a pcap file. `docs/semantics.md` §M states the rules.
//!
//! **Configuration.** A [`Switch`] holds at most [`MAX_MIRRORS`] named sessions (Open vSwitch's
//! limit), in creation order, each with its own per-worker counters ([`MirrorCounterSet`],
//! shared by every copy of the configuration like a port's). Every operation validates before
//! it changes anything. Deleting a port takes it out of every session; a session left with no
//! source, or whose destination port is deleted, is deleted with it.
//!
//! **Compilation.** [`Switch::plan`] compiles the sessions into [`Mirrors`]: per port id a
//! 32-bit mask of the sessions that mirror what the port receives (`rx_mask`) and sends
//! (`tx_mask`). A plan without sessions has `mirrors: None`, and [`Plan::process`] pays one
//! test of that `Option` per batch.
//!
//! **Datapath** ([`Plan::process_mirrored`], wrapped around the whole forwarding path, flat or
//! stacked): before forwarding, every received frame whose port is an rx source is copied from
//! the pool as it arrived (also frames the bridge then drops); the length of each tx source's
//! output batch is noted; after forwarding, the frames appended to those batches (as they leave:
//! after the egress tag rewrite) are copied. Only then are the copies delivered — an RSPAN tag
//! pushed, the size checked against the destination port — and appended to the destination's
//! output batch, after its own frames of the batch: rx copies first (in frame order, sessions
//! in order), then tx copies (by source port id, then frame order, then session). Copies are
//! never mirrored (they are appended after every copy was taken) and never enter a bridge.
//! Cost when a session exists: one mask load per received frame and per tx-source port, and a
//! pool copy per mirrored frame; nothing allocates after warm-up.

use crate::cells::Cell;
use crate::counters::{ser_drops, DropReason};
use crate::error::ConfigError;
use crate::stack::Role;
use crate::switch::{Outputs, Plan, Port, PortId, Switch, Worker};
use crate::vlanmode::VidList;
use crate::vlanset::VlanSet;
use qbridge_packet::{Batch, PacketBuf};
use serde::Serialize;
use std::sync::Arc;

/// Most sessions in one switch: one bit each in the per-port masks (Open vSwitch's
/// `MAX_MIRRORS` is 32 too).
pub const MAX_MIRRORS: usize = 32;

/// Longest session name.
pub const MAX_MIRROR_NAME: usize = 32;

/// Longest pcap file name of a `dst pcap FILE` (a file name, not a path: NAME_MAX).
pub const MAX_PCAP_FILE: usize = 255;

/// Which frames of its source ports a session copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MirrorDirection {
    /// What the sources receive (as received, before any rewrite).
    Rx,
    /// What the sources send (as sent, after the egress rewrite).
    Tx,
    Both,
}

impl MirrorDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorDirection::Rx => "rx",
            MirrorDirection::Tx => "tx",
            MirrorDirection::Both => "both",
        }
    }

    pub fn rx(self) -> bool {
        self != MirrorDirection::Tx
    }

    pub fn tx(self) -> bool {
        self != MirrorDirection::Rx
    }
}

/// Where a session's copies go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorDst {
    /// A port of the switch (a device: AF_PACKET, TAP, AF_XDP, patch, pcap port).
    Port(String),
    /// A pcap file: a plain file name, written in the daemon's `--pcap-dir` (in `qbridge
    /// replay`, the `--out` directory). Never a path.
    Pcap(String),
}

/// A session as configured (`mirror add …`), names and all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorSpec {
    pub name: String,
    /// Source ports, in the order given.
    pub src: Vec<String>,
    pub direction: MirrorDirection,
    /// Only frames in these VLANs (see [`frame_vlan`]); `None`: every frame.
    pub vids: Option<VidList>,
    pub dst: MirrorDst,
    /// Push a tag with this VID (the destination port's bridge TPID, PCP 0) on every copy.
    pub rspan: Option<u16>,
}

/// Why a `mirror` command was refused. Each message names the session and the bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    #[error("invalid mirror name \"{0}\" (1 to 32 letters, digits, '_', '-' or '.', not starting with '-')")]
    BadName(String),
    #[error("mirror \"{0}\" already exists")]
    Exists(String),
    #[error("mirror \"{0}\" does not exist")]
    NoSuchMirror(String),
    #[error("too many mirrors (limit {0})")]
    TooMany(usize),
    #[error("mirror \"{0}\" needs at least one source port")]
    NoSource(String),
    #[error("mirror \"{name}\": source \"{port}\" is given twice")]
    DuplicateSource { name: String, port: String },
    #[error("mirror \"{name}\": \"{port}\" is a {what}: only ports with a wire of their own (afpacket, afxdp, tap, patch, pcap) can be mirrored or be a mirror's destination")]
    NotADevice {
        name: String,
        port: String,
        what: &'static str,
    },
    #[error("mirror \"{name}\": destination \"{port}\" is also a source (a mirror never sends to a port it watches)")]
    DstIsSource { name: String, port: String },
    #[error("mirror \"{name}\": invalid pcap file \"{file}\" (a plain file name in the pcap directory: no '/', not starting with '.', at most 255 bytes, not NAME.in.pcap)")]
    BadPcapFile { name: String, file: String },
    #[error("mirror \"{name}\": pcap file \"{file}\" is written by mirror \"{other}\"")]
    PcapFileBusy {
        name: String,
        file: String,
        other: String,
    },
    #[error(
        "mirror \"{0}\": rspan needs a destination port (a pcap file gets the copies as they are)"
    )]
    RspanToPcap(String),
}

/// A session's counters, summed over the workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MirrorCounters {
    /// Copies delivered to the destination.
    pub frames: u64,
    /// Their bytes, as delivered (with the RSPAN tag).
    pub bytes: u64,
    /// Copies not delivered, by reason: `oversize` (longer than the destination port's
    /// `max_frame`), `port_down` (destination not running), `runt` (a received frame shorter
    /// than an Ethernet header), `tx_error` (a pcap file could not be written).
    #[serde(serialize_with = "ser_drops")]
    pub drops: [u64; DropReason::COUNT],
}

impl Default for MirrorCounters {
    fn default() -> Self {
        MirrorCounters {
            frames: 0,
            bytes: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

impl MirrorCounters {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }
}

/// One writer's counters of one session (see `crate::cells`).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct MirrorCells {
    pub frames: Cell,
    pub bytes: Cell,
    pub drops: [Cell; DropReason::COUNT],
}

impl Default for MirrorCells {
    fn default() -> Self {
        MirrorCells {
            frames: Cell::default(),
            bytes: Cell::default(),
            drops: crate::cells::drop_cells(),
        }
    }
}

/// A session's counters: one block per datapath worker and one for the control plane.
#[derive(Debug)]
pub(crate) struct MirrorCounterSet(Box<[MirrorCells]>);

impl MirrorCounterSet {
    fn new(writers: usize) -> Arc<MirrorCounterSet> {
        Arc::new(MirrorCounterSet(
            (0..writers.max(1))
                .map(|_| MirrorCells::default())
                .collect(),
        ))
    }

    #[inline(always)]
    fn writer(&self, w: usize) -> &MirrorCells {
        &self.0[w.min(self.0.len() - 1)]
    }

    fn sum(&self) -> MirrorCounters {
        let mut c = MirrorCounters::default();
        for b in self.0.iter() {
            c.frames += b.frames.get();
            c.bytes += b.bytes.get();
            for (d, cell) in c.drops.iter_mut().zip(&b.drops) {
                *d += cell.get();
            }
        }
        c
    }
}

/// A session's destination, by port id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dst {
    Port(u16),
    Pcap(String),
}

/// A session as the switch keeps it: ports by id.
#[derive(Clone, Debug)]
pub(crate) struct MirrorSession {
    name: String,
    src: Vec<u16>,
    direction: MirrorDirection,
    vids: Option<VidList>,
    dst: Dst,
    rspan: Option<u16>,
    counters: Arc<MirrorCounterSet>,
}

/// A session for `mirror show`: its configuration and, if asked for, its counters.
#[derive(Clone, Debug, Serialize)]
pub struct MirrorView {
    pub name: String,
    pub src: Vec<String>,
    pub direction: MirrorDirection,
    #[serde(rename = "vid", skip_serializing_if = "Option::is_none")]
    pub vids: Option<VidList>,
    /// The destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// The destination pcap file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rspan: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<MirrorCounters>,
}

/// The sessions compiled for the datapath (see the module documentation).
#[derive(Debug)]
pub(crate) struct Mirrors {
    sessions: Vec<Compiled>,
    /// By port id: the sessions (bit = index) that copy what the port receives / sends.
    rx_mask: Vec<u32>,
    tx_mask: Vec<u32>,
    /// The ports with a non-zero `tx_mask`, ascending.
    tx_ports: Vec<u16>,
    /// The pcap file of each sink index.
    sinks: Vec<String>,
}

#[derive(Debug)]
struct Compiled {
    dst: CompiledDst,
    /// 0: no RSPAN tag.
    rspan: u16,
    vids: Option<Box<VlanSet>>,
    counters: Arc<MirrorCounterSet>,
}

#[derive(Clone, Copy, Debug)]
enum CompiledDst {
    Port(u16),
    /// Index into [`Outputs::mirror_sinks`] and [`Mirrors::sinks`].
    Sink(u16),
}

/// A worker's scratch for mirroring; kept between batches to avoid allocating.
#[derive(Debug, Default)]
pub(crate) struct MirrorScratch {
    /// Copies taken in this batch, with their session index, in delivery order.
    copies: Vec<(u8, PacketBuf)>,
    /// Each tx source port and the length of its output batch before forwarding.
    marks: Vec<(u16, usize)>,
}

/// The VLAN a mirror's `vid LIST` judges a frame by, on port `p` (where it was received or is
/// being sent): the VID of its outer tag when that tag's TPID is `p`'s bridge TPID and the VID
/// is not 0; otherwise (untagged, priority-tagged, another TPID) `p`'s PVID, 0 when it has
/// none (matches no list). It reads the frame as it is on the port's wire, not the bridge's
/// classification (VLAN maps, tunnel ports and the like are not applied).
#[inline]
pub(crate) fn frame_vlan(tpid: u16, pvid: u16, frame: &[u8]) -> u16 {
    if let Some(h) = frame.get(12..16) {
        if u16::from_be_bytes([h[0], h[1]]) == tpid && frame.len() >= 18 {
            let vid = u16::from_be_bytes([h[2], h[3]]) & 0x0fff;
            if vid != 0 {
                return vid;
            }
        }
    }
    pvid
}

fn check_name(name: &str) -> Result<(), MirrorError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_MIRROR_NAME
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(MirrorError::BadName(name.to_string()))
    }
}

/// Whether `file` is a plain file name the daemon may create in its pcap directory: no path
/// separator, no NUL, not hidden (so neither `.` nor `..`), at most [`MAX_PCAP_FILE`] bytes,
/// and not the input file of a pcap port (`NAME.in.pcap`, which the daemon reads).
pub fn valid_pcap_file(file: &str) -> bool {
    !file.is_empty()
        && file.len() <= MAX_PCAP_FILE
        && !file.starts_with('.')
        && !file.contains(['/', '\0', '\\'])
        && !file.chars().any(char::is_control)
        && !file.ends_with(".in.pcap")
}

impl Switch {
    /// `mirror add …`: a new session, after checking everything (see [`MirrorError`]).
    pub fn mirror_add(&mut self, spec: &MirrorSpec) -> Result<(), ConfigError> {
        let name = &spec.name;
        check_name(name)?;
        if self.mirrors.iter().any(|m| m.name == *name) {
            return Err(MirrorError::Exists(name.clone()).into());
        }
        if self.mirrors.len() >= MAX_MIRRORS {
            return Err(MirrorError::TooMany(MAX_MIRRORS).into());
        }
        if spec.src.is_empty() {
            return Err(MirrorError::NoSource(name.clone()).into());
        }
        let mut src = Vec::with_capacity(spec.src.len());
        for p in &spec.src {
            let id = self.mirror_port(name, p)?;
            if src.contains(&id) {
                return Err(MirrorError::DuplicateSource {
                    name: name.clone(),
                    port: p.clone(),
                }
                .into());
            }
            src.push(id);
        }
        let dst = match &spec.dst {
            MirrorDst::Port(p) => {
                let id = self.mirror_port(name, p)?;
                if src.contains(&id) {
                    return Err(MirrorError::DstIsSource {
                        name: name.clone(),
                        port: p.clone(),
                    }
                    .into());
                }
                Dst::Port(id)
            }
            MirrorDst::Pcap(file) => {
                if !valid_pcap_file(file) {
                    return Err(MirrorError::BadPcapFile {
                        name: name.clone(),
                        file: file.clone(),
                    }
                    .into());
                }
                if let Some(other) = self
                    .mirrors
                    .iter()
                    .find(|m| m.dst == Dst::Pcap(file.clone()))
                {
                    return Err(MirrorError::PcapFileBusy {
                        name: name.clone(),
                        file: file.clone(),
                        other: other.name.clone(),
                    }
                    .into());
                }
                if spec.rspan.is_some() {
                    return Err(MirrorError::RspanToPcap(name.clone()).into());
                }
                Dst::Pcap(file.clone())
            }
        };
        if let Some(v) = spec.rspan {
            crate::switch::check_vid(v.into())?;
        }
        if let Some(list) = &spec.vids {
            for &(a, z) in list.ranges() {
                crate::switch::check_vid(a.into())?;
                crate::switch::check_vid(z.into())?;
                if z < a {
                    return Err(ConfigError::BadRange { start: a, end: z });
                }
            }
        }
        self.mirrors.push(MirrorSession {
            name: name.clone(),
            src,
            direction: spec.direction,
            vids: spec.vids.clone(),
            dst,
            rspan: spec.rspan,
            counters: MirrorCounterSet::new(self.workers() + 1),
        });
        self.mirrors_changed();
        Ok(())
    }

    /// `mirror del NAME`.
    pub fn mirror_del(&mut self, name: &str) -> Result<(), ConfigError> {
        let Some(i) = self.mirrors.iter().position(|m| m.name == name) else {
            return Err(MirrorError::NoSuchMirror(name.to_string()).into());
        };
        self.mirrors.remove(i);
        self.mirrors_changed();
        Ok(())
    }

    /// Session `name` as configured, with names (what `mirror add` was given, normalised).
    pub fn mirror_spec(&self, name: &str) -> Option<MirrorSpec> {
        let m = self.mirrors.iter().find(|m| m.name == name)?;
        Some(MirrorSpec {
            name: m.name.clone(),
            src: m.src.iter().map(|&p| self.port_name_of(p)).collect(),
            direction: m.direction,
            vids: m.vids.clone(),
            dst: match &m.dst {
                Dst::Port(p) => MirrorDst::Port(self.port_name_of(*p)),
                Dst::Pcap(f) => MirrorDst::Pcap(f.clone()),
            },
            rspan: m.rspan,
        })
    }

    /// Every session, in creation order, for `mirror show` (with counters if `with_stats`).
    pub fn mirrors(&self, with_stats: bool) -> Vec<MirrorView> {
        self.mirrors
            .iter()
            .map(|m| MirrorView {
                name: m.name.clone(),
                src: m.src.iter().map(|&p| self.port_name_of(p)).collect(),
                direction: m.direction,
                vids: m.vids.clone(),
                dst: match m.dst {
                    Dst::Port(p) => Some(self.port_name_of(p)),
                    Dst::Pcap(_) => None,
                },
                pcap: match &m.dst {
                    Dst::Pcap(f) => Some(f.clone()),
                    Dst::Port(_) => None,
                },
                rspan: m.rspan,
                stats: with_stats.then(|| m.counters.sum()),
            })
            .collect()
    }

    /// Counters of session `name`, summed over the workers.
    pub fn mirror_counters(&self, name: &str) -> Option<MirrorCounters> {
        let m = self.mirrors.iter().find(|m| m.name == name)?;
        Some(m.counters.sum())
    }

    fn port_name_of(&self, id: u16) -> String {
        self.port_name(PortId(id))
            .map_or_else(|| format!("#{id}"), str::to_owned)
    }

    /// Port `port` as an end of session `name`: it must exist and be a device.
    fn mirror_port(&self, name: &str, port: &str) -> Result<u16, ConfigError> {
        let id = self.port_id(port)?;
        let what = match self.port_role(id) {
            Role::Device => return Ok(id.0),
            Role::Host { .. } => "bridge's host port",
            Role::Vlan { .. } => "vlan device",
            Role::Macvlan { .. } => "macvlan endpoint",
        };
        Err(MirrorError::NotADevice {
            name: name.to_string(),
            port: port.to_string(),
            what,
        }
        .into())
    }

    /// Port `id` is being deleted: it leaves every session's sources; a session left without
    /// a source, or whose destination it is, is deleted (its pcap file, if any, is closed).
    /// Returns the names of the sessions deleted.
    pub(crate) fn mirror_port_gone(&mut self, id: PortId) -> Vec<String> {
        if self.mirrors.is_empty() {
            return Vec::new();
        }
        let mut gone = Vec::new();
        self.mirrors.retain_mut(|m| {
            m.src.retain(|&p| p != id.0);
            let keep = !m.src.is_empty() && m.dst != Dst::Port(id.0);
            if !keep {
                gone.push(m.name.clone());
            }
            keep
        });
        self.mirrors_changed();
        gone
    }

    /// The compiled sessions for a new plan (`None` without sessions).
    pub(crate) fn compile_mirrors(&self) -> Option<Arc<Mirrors>> {
        if self.mirrors.is_empty() {
            return None;
        }
        let n = self.port_slots();
        let mut rx_mask = vec![0u32; n];
        let mut tx_mask = vec![0u32; n];
        let mut sinks = Vec::new();
        let mut sessions = Vec::with_capacity(self.mirrors.len());
        for (i, m) in self.mirrors.iter().enumerate() {
            let bit = 1u32 << i;
            for &p in &m.src {
                if m.direction.rx() {
                    rx_mask[p as usize] |= bit;
                }
                if m.direction.tx() {
                    tx_mask[p as usize] |= bit;
                }
            }
            let dst = match &m.dst {
                Dst::Port(p) => CompiledDst::Port(*p),
                Dst::Pcap(f) => {
                    sinks.push(f.clone());
                    CompiledDst::Sink((sinks.len() - 1) as u16)
                }
            };
            sessions.push(Compiled {
                dst,
                rspan: m.rspan.unwrap_or(0),
                vids: m.vids.as_ref().map(|l| Box::new(l.to_set())),
                counters: m.counters.clone(),
            });
        }
        let tx_ports = (0..n as u16)
            .filter(|&p| tx_mask[p as usize] != 0)
            .collect();
        Some(Arc::new(Mirrors {
            sessions,
            rx_mask,
            tx_mask,
            tx_ports,
            sinks,
        }))
    }
}

impl Plan {
    /// The pcap files of the plan's `dst pcap` sessions, by sink index: the copies for sink
    /// `i` are left in `Outputs::mirror_sinks[i]` for the caller to write.
    pub fn mirror_sinks(&self) -> &[String] {
        match &self.mirrors {
            Some(m) => &m.sinks,
            None => &[],
        }
    }

    /// Counts `n` copies (`bytes` bytes) for sink `sink` that could not be written: moved from
    /// the session's `frames`/`bytes` (counted when the copy was handed to the sink, by this
    /// worker) to `tx_error`, in worker `worker`'s block of the session's counters.
    pub fn count_mirror_sink_error(&self, sink: usize, worker: usize, n: u64, bytes: u64) {
        let Some(m) = &self.mirrors else {
            return;
        };
        for s in &m.sessions {
            if let CompiledDst::Sink(k) = s.dst {
                if k as usize == sink {
                    let c = s.counters.writer(worker);
                    c.frames.sub(n);
                    c.bytes.sub(bytes);
                    c.drops[DropReason::TxError as usize].add(n);
                }
            }
        }
    }

    /// [`Plan::process`] with mirror sessions (see the module documentation).
    #[cold]
    #[inline(never)]
    pub(crate) fn process_mirrored(
        &self,
        m: &Mirrors,
        w: &mut Worker,
        now_ns: u64,
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        out.ensure(self.ports.len());
        let wi = w.index;
        let mut s = w.mirror.take().unwrap_or_default();
        let Outputs { ports, pool, .. } = out;
        for pkt in &rx.pkts {
            let p = pkt.port as usize;
            let mask = m.rx_mask.get(p).copied().unwrap_or(0);
            if mask == 0 {
                continue;
            }
            let Some(Some(port)) = self.ports.get(p) else {
                continue;
            };
            if !port.running {
                continue;
            }
            self.take_copies(m, port, mask, wi, pkt, pool, &mut s.copies);
        }
        s.marks.clear();
        s.marks
            .extend(m.tx_ports.iter().map(|&p| (p, ports[p as usize].len())));
        self.process_unmirrored(w, now_ns, rx, out);
        let Outputs { ports, pool, .. } = out;
        for &(p, before) in &s.marks {
            let Some(Some(port)) = self.ports.get(p as usize) else {
                continue;
            };
            let mask = m.tx_mask[p as usize];
            for pkt in ports[p as usize].pkts.get(before..).unwrap_or(&[]) {
                self.take_copies(m, port, mask, wi, pkt, pool, &mut s.copies);
            }
        }
        for (si, copy) in s.copies.drain(..) {
            self.deliver(&m.sessions[si as usize], wi, copy, out);
        }
        w.mirror = Some(s);
    }

    /// Copies `pkt` (seen on `port`) for every session of `mask` whose VLAN filter admits it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn take_copies(
        &self,
        m: &Mirrors,
        port: &Port,
        mut mask: u32,
        wi: usize,
        pkt: &PacketBuf,
        pool: &mut qbridge_packet::BufPool,
        copies: &mut Vec<(u8, PacketBuf)>,
    ) {
        let frame = pkt.frame();
        let vlan = frame_vlan(port.tpid, port.pvid, frame);
        while mask != 0 {
            let si = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let sess = &m.sessions[si];
            if frame.len() < 14 {
                sess.counters.writer(wi).drops[DropReason::Runt as usize].add(1);
                continue;
            }
            if let Some(v) = &sess.vids {
                if !v.contains(vlan) {
                    continue;
                }
            }
            copies.push((si as u8, pool.get_copy(pkt)));
        }
    }

    /// Sends one copy to its session's destination: the RSPAN tag, the size and state checks,
    /// the counters.
    fn deliver(&self, sess: &Compiled, wi: usize, mut copy: PacketBuf, out: &mut Outputs) {
        let c = sess.counters.writer(wi);
        match sess.dst {
            CompiledDst::Port(d) => {
                let Some(Some(dp)) = self.ports.get(d as usize) else {
                    // The plan compiles sessions only with live ports.
                    return out.pool.put(copy);
                };
                if !dp.running {
                    c.drops[DropReason::PortDown as usize].add(1);
                    return out.pool.put(copy);
                }
                if sess.rspan != 0 {
                    let tag = ((dp.tpid as u32) << 16 | sess.rspan as u32).to_be_bytes();
                    copy.insert_tag(12, tag);
                    copy.offload.shift_headers(4);
                }
                if crate::pipeline::wire_len(&copy, dp.tpid) > dp.max_frame as usize {
                    c.drops[DropReason::Oversize as usize].add(1);
                    return out.pool.put(copy);
                }
                let len = copy.len() as u64;
                c.frames.add(1);
                c.bytes.add(len);
                let pc = dp.counters.writer(wi);
                pc.tx_frames.add(1);
                pc.tx_bytes.add(len);
                copy.port = d;
                out.ports[d as usize].push(copy);
            }
            CompiledDst::Sink(k) => {
                c.frames.add(1);
                c.bytes.add(copy.len() as u64);
                let k = k as usize;
                if out.mirror_sinks.len() <= k {
                    out.mirror_sinks.resize_with(k + 1, Batch::default);
                }
                out.mirror_sinks[k].push(copy);
            }
        }
    }
}
