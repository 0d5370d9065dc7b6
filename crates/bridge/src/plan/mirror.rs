//! Port mirroring, compiled: the sessions as the switch keeps them ([`MirrorSession`], ports
//! by id) and as the plan carries them ([`Mirrors`]: per-port session masks, destinations,
//! sink indexes), with the per-worker session counters both share. `crate::config::mirror`
//! changes the sessions; `crate::path::mirror` takes and delivers the copies;
//! docs/semantics.md §M has the rules.
//!
//! Imports: leaf modules only (settings, cells, counters, VLAN sets); never `crate::config`
//! nor `crate::path`.

use crate::cells::Cell;
use crate::counters::{ser_drops, DropReason};
use crate::settings::MirrorDirection;
use crate::vlanmode::VidList;
use crate::vlanset::VlanSet;
use serde::Serialize;
use std::sync::Arc;

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
    pub fn new(writers: usize) -> Arc<MirrorCounterSet> {
        Arc::new(MirrorCounterSet(
            (0..writers.max(1))
                .map(|_| MirrorCells::default())
                .collect(),
        ))
    }

    #[inline(always)]
    pub fn writer(&self, w: usize) -> &MirrorCells {
        &self.0[w.min(self.0.len() - 1)]
    }

    pub fn sum(&self) -> MirrorCounters {
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
    pub name: String,
    pub src: Vec<u16>,
    pub direction: MirrorDirection,
    pub vids: Option<VidList>,
    pub dst: Dst,
    pub rspan: Option<u16>,
    pub counters: Arc<MirrorCounterSet>,
}

/// The sessions compiled for the datapath (see the module documentation).
#[derive(Debug)]
pub(crate) struct Mirrors {
    pub sessions: Vec<Compiled>,
    /// By port id: the sessions (bit = index) that copy what the port receives / sends.
    pub rx_mask: Vec<u32>,
    pub tx_mask: Vec<u32>,
    /// The ports with a non-zero `tx_mask`, ascending.
    pub tx_ports: Vec<u16>,
    /// The pcap file of each sink index.
    pub sinks: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct Compiled {
    pub dst: CompiledDst,
    /// 0: no RSPAN tag.
    pub rspan: u16,
    pub vids: Option<Box<VlanSet>>,
    pub counters: Arc<MirrorCounterSet>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum CompiledDst {
    Port(u16),
    /// Index into [`Outputs::mirror_sinks`] and [`Mirrors::sinks`].
    Sink(u16),
}
/// The compiled sessions for a new plan over `n` port slots (`None` without sessions).
pub(crate) fn compile(mirrors: &[MirrorSession], n: usize) -> Option<Arc<Mirrors>> {
    if mirrors.is_empty() {
        return None;
    }
    let mut rx_mask = vec![0u32; n];
    let mut tx_mask = vec![0u32; n];
    let mut sinks = Vec::new();
    let mut sessions = Vec::with_capacity(mirrors.len());
    for (i, m) in mirrors.iter().enumerate() {
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
