//! The frame path: what a worker does with a batch.
//!
//! [`Forwarder::process`] is the one dispatch per batch: with mirror sessions the batch is
//! copied around the forwarding (`mirror`: rx copies before, tx copies after); the
//! forwarding is the bridge pipeline alone (`pipeline`: classify → warm → decide → tag
//! rewrite → move/flood) when no device is stacked on any port, or the stacked path
//! (`stack`: up and down through VLAN devices, macvlans and host ports, with bridge passes of
//! the pipeline in between).
//!
//! The path reads the compiled [`Plan`] through `Path` and keeps its per-worker state in
//! [`Forwarder`] (counter-block index, flood scratch, FDB table caches, the batch's `FrameMeta`
//! array, stacked-path and mirroring scratch). Imports: `crate::plan` and the leaf modules;
//! never `crate::config`. No allocation after warm-up, no lock but the FDB writer's, no
//! syscall, no `dyn` call.

pub(crate) mod classify;
pub(crate) mod meta;
pub(crate) mod mirror;
pub(crate) mod pipeline;
mod rewrite;
mod stack;
mod trap;

use crate::fdb::TableCache;
use crate::plan::{Plan, PortId};
use qbridge_packet::{Batch, BufPool};

pub use stack::MAX_BRIDGE_PASSES;

/// The plan as the frame path reads it: every stage of the path is a method of `Path`, and
/// reads the plan's records through `Deref`.
#[derive(Clone, Copy)]
pub(crate) struct Path<'p>(pub &'p Plan);

impl std::ops::Deref for Path<'_> {
    type Target = Plan;

    #[inline(always)]
    fn deref(&self) -> &Plan {
        self.0
    }
}

impl Path<'_> {
    /// The forwarding of [`Forwarder::process`] without the mirror sessions (what `mirror`
    /// wraps): the bridge pipeline alone, or the stacked path when some port is a stacked
    /// device or a host port.
    #[inline]
    fn forward(self, w: &mut Forwarder, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        if self.stacked {
            self.process_stacked(w, now_ns, rx, out)
        } else {
            self.process_flat(w, now_ns, rx, out)
        }
    }
}

/// Frames leaving the core: one batch per port id, and the pool that flood copies come from and
/// dropped frames go back to.
#[derive(Debug)]
pub struct Outputs {
    pub ports: Vec<Batch>,
    pub pool: BufPool,
    /// Copies for the `dst pcap` mirror sessions, by sink index ([`Plan::mirror_sinks`]): the
    /// caller writes them to their files.
    pub mirror_sinks: Vec<Batch>,
    /// Copies of the BPDUs received on spanning-tree ports (`trap.rs`), each with its
    /// ingress port in `port`: the caller hands them to the control plane and gives the
    /// buffers back to `pool`.
    pub punt: Batch,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs::new()
    }
}

impl Outputs {
    pub fn new() -> Outputs {
        Outputs {
            ports: Vec::new(),
            pool: BufPool::new(8192),
            mirror_sinks: Vec::new(),
            punt: Batch::with_capacity(0),
        }
    }

    pub(crate) fn ensure(&mut self, nports: usize) {
        if self.ports.len() < nports {
            self.ports.resize_with(nports, || Batch::with_capacity(256));
        }
    }

    /// Output batch of `port` (empty if the port never received a frame).
    pub fn batch_mut(&mut self, port: PortId) -> &mut Batch {
        self.ensure(port.0 as usize + 1);
        &mut self.ports[port.0 as usize]
    }

    /// Frames queued for any port.
    pub fn pending(&self) -> usize {
        self.ports.iter().map(|b| b.len()).sum()
    }
}

/// One datapath worker's forwarding state: its counter-block index, scratch space (the batch's
/// `FrameMeta` array, flood targets, stacked-path and mirroring scratch) and its view of each
/// bridge's FDB table. Owned by the worker's thread: each datapath `Worker` thread forwards
/// through its own bridge `Forwarder`.
#[derive(Debug, Default)]
pub struct Forwarder {
    pub(crate) index: usize,
    /// Flood targets of the frame being forwarded; kept to avoid allocating per frame.
    pub(crate) scratch: Vec<u16>,
    /// FDB table per bridge id.
    pub(crate) tables: Vec<TableCache>,
    /// The batch's per-frame decisions (one per received frame), filled by the ingress
    /// stages and read by the transmit stage; kept to avoid allocating per batch.
    pub(crate) meta: Vec<meta::FrameMeta>,
    /// Scratch of the stacked path (taken while it runs).
    pub(crate) stack: Option<Box<stack::Scratch>>,
    /// Scratch of port mirroring (taken while it runs).
    pub(crate) mirror: Option<Box<mirror::MirrorScratch>>,
    /// Flood copies the frames of the next [`Forwarder::process`] may still make (`None`: no
    /// limit). See [`Forwarder::set_flood_credit`].
    pub(crate) flood_credit: Option<u64>,
    /// The last [`Forwarder::process`] filled `meta` index for index with its batch (not so on
    /// a plan with stacked devices, whose bridge passes see batches of their own).
    pub(crate) meta_is_rx: bool,
}

impl Forwarder {
    /// Forwarder of worker number `index` (0-based; its counters go to block `index`).
    pub fn new(index: usize) -> Forwarder {
        Forwarder {
            index,
            scratch: Vec::new(),
            tables: Vec::new(),
            meta: Vec::new(),
            stack: None,
            mirror: None,
            flood_credit: None,
            meta_is_rx: false,
        }
    }

    /// Forwards every frame of `rx` (each buffer's `port` is the port whose queue it came
    /// from) with `plan` at time `now_ns`, appending what leaves to `out.ports[port]`. `rx`
    /// is left empty. Any number of workers may forward with one plan at once, each with its
    /// own `Forwarder` and [`Outputs`].
    pub fn process(&mut self, plan: &Plan, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        let path = Path(plan);
        self.meta_is_rx = !plan.stacked;
        if plan.trap_bpdu {
            path.trap_bpdus(rx, out);
        }
        match &plan.mirrors {
            Some(m) => path.process_mirrored(m, self, now_ns, rx, out),
            None => path.forward(self, now_ns, rx, out),
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// Bounds the flood copies of the next [`Forwarder::process`] calls: a flood (unknown unicast,
    /// broadcast, multicast) to `k` ports is sent when at least `k` copies of credit are left,
    /// and takes them; else it is dropped as `flood_rate`, counted on its ingress port. A frame
    /// to one port (known unicast) never uses credit nor is dropped for it. `None` (the
    /// default): no bound, as replay and the tests forward. The daemon's worker gives each
    /// port's burst its fair share of a round's flood work (`docs/semantics.md`, "Flood
    /// fairness").
    pub fn set_flood_credit(&mut self, credit: Option<u64>) {
        self.flood_credit = credit;
    }

    /// What classification made of frame `i` of the last [`Forwarder::process`] call (`None`
    /// when it was dropped before reaching a bridge's decision). For the eBPF fast path
    /// (`crate::plan::fast`).
    pub fn fast_class(&self, i: usize) -> Option<crate::plan::fast::FastClass> {
        let m = self.meta.get(i)?;
        if m.dest == meta::DEST_DROP {
            return None;
        }
        Some(crate::plan::fast::FastClass {
            bridge: m.bridge,
            vid: m.vid,
            fid: m.fid(),
            pcp: if m.filtering {
                (m.tci_hi >> 13) as u8
            } else {
                8
            },
        })
    }

    /// What classification made of frame `i` of the last [`Forwarder::process`] call, also
    /// when it was dropped afterwards (`trace`: its FID for the learning it did). Zeros when it
    /// was dropped before classification.
    pub(crate) fn class_of(&self, i: usize) -> Option<crate::plan::fast::FastClass> {
        let m = self.meta.get(i)?;
        Some(crate::plan::fast::FastClass {
            bridge: m.bridge,
            vid: m.vid,
            fid: m.fid(),
            pcp: 8,
        })
    }

    /// Why frame `i` of the last [`Forwarder::process`] call was dropped: whole (it left no
    /// port), or its last flood copy at that copy's port. `None` when it was not, or when the
    /// plan has stacked devices (whose frames are counted, not told one by one). What the drop
    /// watch reports; the reason is written only where a frame is dropped.
    pub fn dropped(&self, i: usize) -> Option<crate::DropReason> {
        self.told(i)
    }

    /// Whether [`Forwarder::dropped`] tells each frame of the last call (false: the plan has
    /// stacked devices).
    pub fn tells_frames(&self) -> bool {
        self.meta_is_rx
    }

    fn told(&self, i: usize) -> Option<crate::DropReason> {
        if !self.meta_is_rx {
            return None;
        }
        let m = self.meta.get(i)?;
        if m.why == 0 || !(m.dest == meta::DEST_DROP || m.dest == meta::DEST_FLOOD) {
            return None;
        }
        crate::DropReason::ALL.get(usize::from(m.why - 1)).copied()
    }

    /// The VLAN frame `i` of the last [`Forwarder::process`] call was classified into, also
    /// when it was dropped afterwards (`None`: not classified, or a VLAN-unaware bridge's).
    pub fn classified_vid(&self, i: usize) -> Option<u16> {
        if !self.meta_is_rx {
            return None;
        }
        self.meta.get(i).map(|m| m.vid).filter(|v| *v != 0)
    }

    /// The credit left (see [`Forwarder::set_flood_credit`]).
    pub fn flood_credit(&self) -> Option<u64> {
        self.flood_credit
    }
}
