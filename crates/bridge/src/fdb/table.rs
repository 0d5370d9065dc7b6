//! The FDB's table: a lock-free open-addressing array of atomic slots ([`Table`]), read through a
//! copyable [`TableView`] and cached per worker by [`TableCache`]; the plain [`Slot`] a read
//! returns; and [`copy_table`], which a rebuild or a deep copy uses. Probing, tombstones and the
//! memory ordering are stated in the module header (`fdb/mod.rs`).

use super::{Fdb, FdbKind, F_EXTERN, F_LOCKED, F_PERMANENT, F_STATIC};
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::Arc;

/// One slot of the table.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    pub key: u64,
    pub seen_ns: u64,
    pub stamp: u32,
    pub port: u16,
    pub flags: u8,
}

const _: () = assert!(core::mem::size_of::<Slot>() == 24);

impl Slot {
    pub fn kind(&self) -> FdbKind {
        if self.flags & F_PERMANENT != 0 {
            FdbKind::Permanent
        } else if self.flags & F_STATIC != 0 {
            FdbKind::Static
        } else {
            FdbKind::Dynamic
        }
    }

    /// Counted against `fdb_max_learned` and a candidate for fair eviction (locked entries
    /// are learned ones).
    pub fn is_learned(&self) -> bool {
        self.flags & !F_LOCKED == 0
    }

    pub fn ages(&self) -> bool {
        self.flags & (F_STATIC | F_PERMANENT | F_EXTERN) == 0
    }
}

pub(super) const MIN_SLOTS: usize = 64;

/// Key of a deleted slot (a tombstone): probes pass over it, inserts may reuse it. No real key
/// has bit 63 set (48 MAC bits and 15 FID bits).
pub(super) const TOMBSTONE: u64 = 1 << 63;

/// Source of table ids: every table ever built gets a new one, so a cached table can be checked
/// against the current one with a single integer compare.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// One slot as stored: the key, the last time the entry was seen, and `port | flags << 16 |
/// stamp << 32`. Written by the writer (under [`Fdb`]'s lock) except `seen_ns`, which readers
/// refresh.
#[derive(Debug, Default)]
pub(super) struct AtomicSlot {
    pub(super) key: AtomicU64,
    pub(super) seen_ns: AtomicU64,
    pub(super) meta: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<AtomicSlot>() == 24);

#[inline(always)]
pub(super) fn pack(port: u16, flags: u8, stamp: u32) -> u64 {
    port as u64 | (flags as u64) << 16 | (stamp as u64) << 32
}

/// Home slot of `key` in a table of `1 << (64 - shift)` slots. Fibonacci hashing: the top bits
/// of the product are well mixed.
#[inline(always)]
fn home(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize
}

/// One power-of-two array of slots. Readers hold it through an `Arc` (see [`TableCache`]); a
/// slot only ever goes from empty to used and from used to tombstone or to another used state,
/// never back to empty, so a probe that meets an empty slot may stop. A rebuild makes a new
/// table.
#[derive(Debug)]
pub(crate) struct Table {
    pub(super) slots: Box<[AtomicSlot]>,
    pub(super) id: u64,
    /// 64 - log2(slots): the shift that turns a hashed key into a home slot.
    shift: u32,
}

impl Table {
    pub(super) fn new(cap: usize) -> Table {
        debug_assert!(cap.is_power_of_two() && cap > 1);
        Table {
            slots: (0..cap).map(|_| AtomicSlot::default()).collect(),
            id: NEXT_TABLE_ID.fetch_add(1, Relaxed),
            shift: 64 - cap.trailing_zeros(),
        }
    }

    #[inline(always)]
    pub(super) fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Home slot of `key`.
    #[inline(always)]
    pub(super) fn home(&self, key: u64) -> usize {
        home(key, self.shift)
    }

    /// The entry of `key`, if present, and its slot index. A reader racing with the writer
    /// sees the entry before or after the change, never a mix: `meta` is read between two
    /// reads of the key that agree.
    #[inline(always)]
    pub fn find(&self, key: u64) -> Option<(usize, Slot)> {
        self.view().find(key)
    }

    /// The slots and the shift of this table, as a copyable value: a worker takes it once per
    /// batch (and again when learning replaced the table), so its lookups keep them in locals
    /// instead of reloading them through the table.
    #[inline(always)]
    pub fn view(&self) -> TableView<'_> {
        TableView {
            slots: &self.slots,
            shift: self.shift,
        }
    }
}

/// A [`Table`]'s slots and shift (see [`Table::view`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableView<'a> {
    slots: &'a [AtomicSlot],
    shift: u32,
}

impl<'a> TableView<'a> {
    /// Number of slots.
    #[inline(always)]
    pub fn capacity(self) -> usize {
        self.slots.len()
    }

    /// [`Table::find`].
    #[inline(always)]
    pub fn find(self, key: u64) -> Option<(usize, Slot)> {
        self.find_at(key).map(|(i, _, s)| (i, s))
    }

    /// Reads the home slot of `key` and returns its key: a load the caller issues early, for
    /// many keys at once, so that the cache misses overlap instead of stalling one by one (a
    /// software prefetch without `unsafe`).
    #[inline(always)]
    pub fn touch(self, key: u64) -> u64 {
        self.slots[home(key, self.shift)].key.load(Relaxed)
    }

    /// [`TableView::find`] for a forwarding decision, which does not look at the entry's age:
    /// the returned [`Slot::seen_ns`] is 0 (not read).
    #[inline(always)]
    pub fn find_entry(self, key: u64) -> Option<Slot> {
        self.find_at_with::<false>(key).map(|(_, _, s)| s)
    }

    /// [`Table::find`], also handing back the slot itself (for a refresh without a second
    /// index).
    #[inline(always)]
    pub(super) fn find_at(self, key: u64) -> Option<(usize, &'a AtomicSlot, Slot)> {
        self.find_at_with::<true>(key)
    }

    /// [`TableView::find_at`]; `SEEN`: read `seen_ns` (else 0).
    #[inline(always)]
    fn find_at_with<const SEEN: bool>(self, key: u64) -> Option<(usize, &'a AtomicSlot, Slot)> {
        // Key 0 (the zero MAC in FID 0) is the empty slot's marker, never stored: the probe
        // below would take the first empty slot for it.
        if key == 0 {
            return None;
        }
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = home(key, self.shift);
        loop {
            let s = &self.slots[i];
            let k = s.key.load(Acquire);
            if k == key {
                let meta = s.meta.load(Acquire);
                let seen_ns = if SEEN { s.seen_ns.load(Relaxed) } else { 0 };
                if s.key.load(Acquire) == key {
                    return Some((
                        i,
                        s,
                        Slot {
                            key,
                            seen_ns,
                            stamp: (meta >> 32) as u32,
                            port: meta as u16,
                            flags: (meta >> 16) as u8,
                        },
                    ));
                }
            } else if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }
}

impl Table {
    /// Refreshes the last-seen time of slot `i` (a reader's write; skipped when unchanged so a
    /// busy entry's cache line is not written once per frame).
    #[inline(always)]
    pub fn refresh(&self, i: usize, now_ns: u64) {
        let s = &self.slots[i].seen_ns;
        if s.load(Relaxed) != now_ns {
            s.store(now_ns, Relaxed);
        }
    }

    pub(super) fn get_slot(&self, i: usize) -> Option<Slot> {
        let s = &self.slots[i];
        let key = s.key.load(Acquire);
        if key == 0 || key == TOMBSTONE {
            return None;
        }
        let meta = s.meta.load(Acquire);
        Some(Slot {
            key,
            seen_ns: s.seen_ns.load(Relaxed),
            stamp: (meta >> 32) as u32,
            port: meta as u16,
            flags: (meta >> 16) as u8,
        })
    }

    pub(super) fn entries(&self) -> impl Iterator<Item = Slot> + '_ {
        (0..self.slots.len()).filter_map(|i| self.get_slot(i))
    }
}

/// A reader's handle on the current table of one FDB: an `Arc` and the table's id, checked
/// against the FDB's current id with one load per use and refreshed when a rebuild replaced
/// the table. Each datapath worker keeps one per bridge.
#[derive(Debug, Default)]
pub(crate) struct TableCache {
    table: Option<Arc<Table>>,
}

impl TableCache {
    /// The current table of `fdb`.
    #[inline(always)]
    pub fn get<'a>(&'a mut self, fdb: &Fdb) -> &'a Table {
        let current = fdb.current_id.load(Acquire);
        if self.table.as_ref().is_none_or(|t| t.id != current) {
            self.table = Some(
                fdb.current
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            );
        }
        self.table.as_deref().expect("just set")
    }
}

/// A new table of `cap` slots holding `t`'s entries (tombstones dropped).
pub(super) fn copy_table(t: &Table, cap: usize) -> Table {
    let new = Table::new(cap);
    for s in t.entries() {
        let mut i = new.home(s.key);
        while new.slots[i].key.load(Relaxed) != 0 {
            i = (i + 1) & new.mask();
        }
        let d = &new.slots[i];
        d.seen_ns.store(s.seen_ns, Relaxed);
        d.meta.store(pack(s.port, s.flags, s.stamp), Relaxed);
        d.key.store(s.key, Relaxed);
    }
    new
}
