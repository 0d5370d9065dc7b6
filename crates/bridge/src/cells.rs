//! Counters that many threads write and any thread reads, without a lock or a read-modify-write
//! instruction on the fast path.
//!
//! Every counter exists once per *writer*: one block per datapath worker plus one for the
//! control plane (configuration operations count evictions, for example). A writer only ever
//! touches its own block, so an increment is a plain load and store of an `AtomicU64`
//! (`Relaxed`): on x86-64 the same two `mov`s as a `u64 += 1`, with no `lock` prefix and no
//! cache line shared between workers (blocks are 64-byte aligned). Readers sum the blocks; a sum
//! taken while workers run is a consistent-enough snapshot (each cell is read atomically; cells
//! are not read at one instant, as with Linux's per-CPU counters).
//!
//! Counter blocks belong to the object they count (a port, a bridge) and are shared through an
//! `Arc` by every copy of that object's compiled state, so copy-on-write of the configuration
//! never resets or forks a counter.

use crate::counters::{DropReason, PortCounters, VlanCounters};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One counter with one writer (see the module documentation).
#[derive(Debug, Default)]
pub struct Cell(AtomicU64);

impl Cell {
    /// Adds `n`. Only the block's owner calls this.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Takes back `n` of what this block's owner added (never more: a block never goes
    /// below zero).
    #[inline(always)]
    pub fn sub(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_sub(n), Relaxed);
    }

    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

thread_local! {
    /// The reason of the latest drop this thread counted ([`PortCells::drop`]), plus one (0:
    /// none yet): how the frame path tells the drop watch why a frame it marked dropped was
    /// dropped, at no cost to frames that are not (`crate::path::meta`).
    static LAST_DROP: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// [`LAST_DROP`]: the reason of the latest drop this thread counted, plus one (0: none).
#[inline]
pub(crate) fn last_drop() -> u8 {
    LAST_DROP.with(|c| c.get())
}

/// One writer's counters of one port.
#[derive(Debug)]
#[repr(align(64))]
pub struct PortCells {
    pub rx_frames: Cell,
    pub rx_bytes: Cell,
    pub tx_frames: Cell,
    pub tx_bytes: Cell,
    pub fdb_learn_refused: Cell,
    pub fdb_evictions: Cell,
    pub fdb_moves: Cell,
    pub drops: [Cell; DropReason::COUNT],
    pub rx_pcp: [Cell; 8],
}

/// One cell per drop reason (more than 32: arrays that long derive no `Default`).
pub fn drop_cells() -> [Cell; DropReason::COUNT] {
    std::array::from_fn(|_| Cell::default())
}

impl Default for PortCells {
    fn default() -> Self {
        PortCells {
            rx_frames: Cell::default(),
            rx_bytes: Cell::default(),
            tx_frames: Cell::default(),
            tx_bytes: Cell::default(),
            fdb_learn_refused: Cell::default(),
            fdb_evictions: Cell::default(),
            fdb_moves: Cell::default(),
            drops: drop_cells(),
            rx_pcp: Default::default(),
        }
    }
}

impl PortCells {
    #[inline(always)]
    pub fn drop(&self, reason: DropReason) {
        self.drops[reason as usize].add(1);
        LAST_DROP.with(|c| c.set(reason as u8 + 1));
    }

    fn add_to(&self, c: &mut PortCounters) {
        c.rx_frames += self.rx_frames.get();
        c.rx_bytes += self.rx_bytes.get();
        c.tx_frames += self.tx_frames.get();
        c.tx_bytes += self.tx_bytes.get();
        c.fdb_learn_refused += self.fdb_learn_refused.get();
        c.fdb_evictions += self.fdb_evictions.get();
        c.fdb_moves += self.fdb_moves.get();
        for (d, cell) in c.drops.iter_mut().zip(&self.drops) {
            *d += cell.get();
        }
        for (d, cell) in c.rx_pcp.iter_mut().zip(&self.rx_pcp) {
            *d += cell.get();
        }
    }
}

/// A port's counters: one [`PortCells`] per writer.
#[derive(Debug)]
pub struct PortCounterSet(Box<[PortCells]>);

impl PortCounterSet {
    pub fn new(writers: usize) -> Arc<PortCounterSet> {
        Arc::new(PortCounterSet(
            (0..writers.max(1)).map(|_| PortCells::default()).collect(),
        ))
    }

    /// The block of writer `w` (clamped to the last block, the control plane's).
    #[inline(always)]
    pub fn writer(&self, w: usize) -> &PortCells {
        &self.0[w.min(self.0.len() - 1)]
    }

    /// The sum over every writer.
    pub fn sum(&self) -> PortCounters {
        let mut c = PortCounters::default();
        for b in self.0.iter() {
            b.add_to(&mut c);
        }
        c
    }
}

/// A single counter with one cell per writer.
#[derive(Debug)]
pub struct CellSet(Box<[PaddedCell]>);

#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCell(Cell);

impl CellSet {
    pub fn new(writers: usize) -> Arc<CellSet> {
        Arc::new(CellSet(
            (0..writers.max(1)).map(|_| PaddedCell::default()).collect(),
        ))
    }

    /// The cell of writer `w` (clamped as in [`PortCounterSet::writer`]).
    #[inline(always)]
    pub fn writer(&self, w: usize) -> &Cell {
        &self.0[w.min(self.0.len() - 1)].0
    }

    pub fn sum(&self) -> u64 {
        self.0.iter().map(|c| c.0.get()).sum()
    }
}

/// One writer's counters of one VID of one bridge.
#[derive(Debug, Default)]
pub struct VlanCells {
    pub rx_frames: Cell,
    pub rx_bytes: Cell,
    pub tx_frames: Cell,
    pub tx_bytes: Cell,
}

/// A bridge's per-VID counters: 4096 [`VlanCells`] per writer, one array per writer, so
/// finding a cell is the writer's array and the VID masked into it (no second bounds check).
#[derive(Debug)]
pub struct VlanCounterSet {
    cells: Box<[[VlanCells; 4096]]>,
}

impl VlanCounterSet {
    pub fn new(writers: usize) -> Arc<VlanCounterSet> {
        Arc::new(VlanCounterSet {
            cells: (0..writers.max(1))
                .map(|_| std::array::from_fn(|_| VlanCells::default()))
                .collect(),
        })
    }

    /// The cells of `vid` for writer `w` (clamped as in [`PortCounterSet::writer`]).
    #[inline(always)]
    pub fn writer(&self, w: usize, vid: u16) -> &VlanCells {
        &self.cells[w.min(self.cells.len() - 1)][vid as usize & 0x0fff]
    }

    pub fn sum(&self, vid: u16) -> VlanCounters {
        let mut c = VlanCounters::default();
        for b in self.cells.iter() {
            let v = &b[vid as usize & 0x0fff];
            c.rx_frames += v.rx_frames.get();
            c.rx_bytes += v.rx_bytes.get();
            c.tx_frames += v.tx_frames.get();
            c.tx_bytes += v.tx_bytes.get();
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_sum() {
        let s = PortCounterSet::new(3);
        s.writer(0).rx_frames.add(2);
        s.writer(1).rx_frames.add(3);
        s.writer(9).drop(DropReason::Runt);
        let c = s.sum();
        assert_eq!(c.rx_frames, 5);
        assert_eq!(c.dropped(DropReason::Runt), 1);
        assert_eq!(s.writer(2).drops[DropReason::Runt as usize].get(), 1);
        let v = VlanCounterSet::new(2);
        v.writer(0, 10).tx_bytes.add(100);
        v.writer(1, 10).tx_bytes.add(20);
        assert_eq!(v.sum(10).tx_bytes, 120);
        assert_eq!(v.sum(11).tx_bytes, 0);
    }
}
