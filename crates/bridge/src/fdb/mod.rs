//! The forwarding database of one bridge.
//!
//! **Structure.** Open addressing with linear probing over a power-of-two array of 24-byte
//! slots. The key is one `u64`: the MAC address in the low 48 bits and the FID (the VID, or 0 on
//! a VLAN-unaware bridge) above it. Key 0 marks an empty slot; it cannot be a real key because
//! the all-zero MAC is never learned nor accepted by `fdb add`. Deletion leaves a tombstone (see
//! Threads). When entries and tombstones pass 5/8 of the slots the table is rebuilt at a size
//! that puts the load at most 5/16 (doubling as it fills, shrinking after mass removals), and
//! bulk removals (flush, ageing) rebuild a table that is more than a quarter tombstones; a
//! lookup of an absent key touches about two slots on average at 5/8 load.
//!
//! **Kinds.** `dynamic` entries are learned (or added by the user) and aged; `static` entries
//! never age but move when their MAC shows up on another port, as in Linux; `sticky` entries
//! never move; `permanent` entries are the bridge's own (local) addresses. `extern_learn`
//! entries (added by a control plane, Linux's `NTF_EXT_LEARNED`) are dynamic user entries that
//! never age, survive port down and `vlan del`, and are not learned ones (limits, eviction);
//! learning the address on another port takes the entry over (moved, no longer
//! `extern_learn`: then an ordinary dynamic user entry), as Linux's `br_fdb_update` does.
//!
//! **Ageing** is a sweep that takes `now` as an argument (`Fdb::age`) and runs off the fast path.
//! Learning only writes `seen_ns` in the slot it already read.
//!
//! **Limits.** `fdb_max_learned` (per bridge and per port) counts learned entries only, and
//! refuses new ones at the limit, as Linux does. `fdb_max_entries` bounds the table: when it is
//! full, learning a new address evicts the oldest learned entry of the port holding the most
//! learned entries (Open vSwitch's fair eviction), so a MAC flood on one port cannot push out
//! the addresses of the others. "Oldest" is by time learned; a per-port queue of (key, stamp) in
//! learning order finds that port's oldest in amortised O(1), skipping queue entries that no
//! longer match.
//!
//! **Costs to know.** The table grows inside `learn`, so the frame that crosses a power of two
//! pays a rebuild of the whole table once, under the lock (milliseconds at a million entries;
//! about 20 times in the life of a table that fills; other workers go on looking up in the old
//! table meanwhile).
//! A fair eviction scans the per-port learned counts (one u32 per port id) to find the port
//! holding most; ports are few, so this is short, but it is per eviction, not O(1).
//! On a bridge that learns per inner VID, a flush and each ageing pass walk the table once
//! more to give unused (S-VID, C-VID) pair FIDs back (`Fdb::reclaim_inner`).
//!
//! **Threads.** Shared by every datapath worker and the control plane. Lookups and the refresh
//! of an entry's last-seen time are lock-free: slots are three `AtomicU64`s (key, last seen,
//! port/flags/stamp), the writer stores an entry's key last (`Release`) and readers load it
//! first (`Acquire`) and again after the rest, so a reader sees a whole entry or none. Every
//! other change — a new entry, a move, a user entry, a removal, ageing, eviction, limits — takes
//! one mutex, so the limits and the fair eviction order are exact whatever the number of
//! workers. Removal leaves a tombstone (a probe passes over it, an insert may reuse it), never an
//! empty slot, so a probe that meets an empty slot may stop even while the writer works. Growth
//! and tombstone clean-up build a new table and publish it; a reader notices by comparing one
//! id per lookup ([`TableCache`]) and keeps the old table alive (an `Arc`) until then. A
//! refresh a reader writes into a table that was just replaced is lost: the entry's idle time
//! is then overstated until its next frame, never understated. Learning on one worker is seen
//! by all from their next lookup.
//!
//! **Files.** This one holds the public types, the key layout (`fdb_key`) and `Fdb` with its
//! operations; `table.rs` the lock-free table (slots, probing, the readers' `TableCache`);
//! `writer.rs` the state behind the lock and every change but a refresh; `inner.rs` the FIDs of
//! (S-VID, C-VID) pairs (`InnerFids`); `tests.rs` the unit tests.

mod inner;
mod table;
#[cfg(test)]
mod tests;
mod writer;

pub(crate) use inner::{InnerFids, FIRST_INNER_FID};
pub(crate) use table::{Slot, Table, TableCache, TableView};
pub(crate) use writer::SlotChange;

use inner::{vlan_of, INNER_FIDS};
use qbridge_wire::MacAddr;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, Release},
};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use table::{copy_table, MIN_SLOTS};
use writer::Writer;

/// Kind of an FDB entry, as `bridge fdb` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FdbKind {
    Dynamic,
    Static,
    Permanent,
}

/// Which entries `fdb flush` removes. Permanent (local) entries are never flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FdbFlushKind {
    /// Dynamic and static: the default.
    #[default]
    All,
    /// Dynamic entries (learned or added as `dynamic`) only.
    Dynamic,
    /// Static entries (including sticky ones) only.
    Static,
}

/// Which entries `fdb flush` removes, as bridge-fdb(8)'s `[no]permanent`, `[no]static`,
/// `[no]dynamic`, `[no]sticky` and `[no]added_by_user`: an entry goes when its kind is one of
/// those selected and each flag given matches. [`FdbFlushKind`] is the common subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbFlushMatch {
    pub dynamic: bool,
    pub static_: bool,
    pub permanent: bool,
    pub sticky: Option<bool>,
    pub added_by_user: Option<bool>,
    pub extern_learn: Option<bool>,
}

impl From<FdbFlushKind> for FdbFlushMatch {
    fn from(k: FdbFlushKind) -> Self {
        FdbFlushMatch {
            dynamic: k != FdbFlushKind::Static,
            static_: k != FdbFlushKind::Dynamic,
            permanent: false,
            sticky: None,
            added_by_user: None,
            extern_learn: None,
        }
    }
}

impl FdbFlushMatch {
    pub(crate) fn selects(&self, s: &Slot) -> bool {
        let kind_ok = match s.kind() {
            FdbKind::Dynamic => self.dynamic,
            FdbKind::Static => self.static_,
            FdbKind::Permanent => self.permanent,
        };
        kind_ok
            && self.sticky.is_none_or(|v| (s.flags & F_STICKY != 0) == v)
            && self
                .added_by_user
                .is_none_or(|v| (s.flags & F_USER != 0) == v)
            && self
                .extern_learn
                .is_none_or(|v| (s.flags & F_EXTERN != 0) == v)
    }
}

/// An FDB entry as shown to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FdbEntryView {
    pub mac: MacAddr,
    /// The VID (FID); `None` on a VLAN-unaware bridge.
    pub vlan: Option<u16>,
    /// With `learn_inner_vid`: the inner C-VID the entry was learned in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_vlan: Option<u16>,
    pub ifname: String,
    pub master: String,
    pub kind: FdbKind,
    pub sticky: bool,
    /// Learned on a locked port with `mab on`: not used for forwarding.
    pub locked: bool,
    /// Added with `fdb add` rather than learned.
    pub added_by_user: bool,
    /// Added with `fdb add … extern_learn` (by a control plane): never aged.
    pub extern_learn: bool,
    /// Nanoseconds since the entry was last refreshed (dynamic entries).
    pub idle_ns: u64,
}

/// Selects entries for `fdb show`.
#[derive(Debug, Clone, Default)]
pub struct FdbFilter {
    pub bridge: Option<String>,
    pub dev: Option<String>,
    pub vlan: Option<u16>,
}

pub(crate) const F_STATIC: u8 = 1;
pub(crate) const F_PERMANENT: u8 = 2;
pub(crate) const F_STICKY: u8 = 4;
pub(crate) const F_USER: u8 = 8;
/// Learned on a locked port with `mab on` from an unknown source: shown, not used for
/// forwarding, until a command replaces it (`docs/semantics.md` §I).
pub(crate) const F_LOCKED: u8 = 16;
/// Added with `fdb add … extern_learn`: never aged, kept on port down and `vlan del`; cleared
/// when learning moves the entry to another port.
pub(crate) const F_EXTERN: u8 = 32;

/// Builds the table key from a MAC and a FID (a VID, or a [`FIRST_INNER_FID`].. FID).
#[inline]
pub fn fdb_key(mac: MacAddr, fid: u16) -> u64 {
    mac.to_u64() | ((fid as u64 & 0x7fff) << 48)
}

#[inline]
pub(crate) fn key_mac(key: u64) -> MacAddr {
    MacAddr::from_u64(key & 0xffff_ffff_ffff)
}

/// The FID of a key: a VID, or a FID of an (S-VID, C-VID) pair (see [`InnerFids`]).
#[inline]
pub(crate) fn key_fid(key: u64) -> u16 {
    (key >> 48) as u16 & 0x7fff
}

/// What learning a source address did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Learned {
    /// Already there on this port (refreshed), or an entry that must not change (permanent,
    /// sticky elsewhere).
    Kept,
    New,
    /// Moved from another port.
    Moved,
    /// A `fdb_max_learned` limit refused it.
    Refused,
    /// The port's `fdb_max_learned` in this VLAN (`vlan set … fdb_max_learned`) refused it: the
    /// frame is dropped (`docs/semantics.md` §L).
    RefusedVlan,
    /// New, after evicting the oldest learned entry of `port` (table full).
    NewEvicting {
        port: u16,
    },
}

/// A learned address that moved from one port to another: what the MAC-flapping watch logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbMove {
    pub mac: MacAddr,
    pub vid: u16,
    pub from: u16,
    pub to: u16,
}

/// The forwarding database of one bridge: lock-free lookups and refreshes, one lock for every
/// other change. See the module documentation.
#[derive(Debug)]
pub(crate) struct Fdb {
    /// The table readers use, and its id (readers compare ids, see [`TableCache`]).
    current: Mutex<Arc<Table>>,
    current_id: AtomicU64,
    w: Mutex<Writer>,
    /// FIDs of (S-VID, C-VID) pairs, made when the bridge first learns per inner VID.
    inner: OnceLock<Arc<InnerFids>>,
}

impl Clone for Fdb {
    /// A deep copy: a new table with the same entries (what a batch of commands works on
    /// before it is committed).
    fn clone(&self) -> Fdb {
        let w = self.lock();
        let mut copy = w.clone();
        copy.table = Arc::new(copy_table(&w.table, w.table.slots.len()));
        copy.tombs = 0;
        let inner = self.inner.get().map(|i| Arc::new(i.deep_copy()));
        copy.inner = inner.clone();
        let f = Fdb::from_writer(copy);
        // The copy numbers pairs, and reclaims them, on its own.
        if let Some(i) = inner {
            let _ = f.inner.set(i);
        }
        f
    }
}

impl Fdb {
    pub fn new(max_entries: usize) -> Fdb {
        Fdb::from_writer(Writer {
            table: Arc::new(Table::new(MIN_SLOTS)),
            len: 0,
            tombs: 0,
            learned: 0,
            port_learned: Vec::new(),
            vlan_learned: HashMap::new(),
            port_queue: Vec::new(),
            next_stamp: 1,
            max_entries,
            moves: 0,
            last_move: None,
            inner: None,
            log: None,
            fast_log: None,
            fast_lost: false,
            closed: Default::default(),
        })
    }

    /// Starts logging changes (`reset`: from an empty log; else an existing log is kept, as a
    /// batch's copy of the table carries the original's).
    pub(crate) fn watch(&self, reset: bool) {
        let mut w = self.lock();
        if reset || w.log.is_none() {
            w.log = Some(Box::default());
        }
    }

    /// Whether changes are logged.
    pub(crate) fn watched(&self) -> bool {
        self.lock().log.is_some()
    }

    /// Stops logging changes.
    pub(crate) fn unwatch(&self) {
        self.lock().log = None;
    }

    /// Moves `key`'s last-seen time up to `seen_ns` (never back): the eBPF fast path forwarded
    /// frames from it.
    pub(crate) fn seen(&self, key: u64, seen_ns: u64) {
        let w = self.lock();
        if let Some((i, s)) = w.table.find(key) {
            if s.seen_ns < seen_ns {
                w.table.refresh(i, seen_ns);
            }
        }
    }

    /// Starts (or stops) logging, for the eBPF fast path, the keys whose entries move to
    /// another port, change flags or go.
    pub(crate) fn log_fast(&self, on: bool) {
        let mut w = self.lock();
        match (on, w.fast_log.is_some()) {
            (true, false) => w.fast_log = Some(Vec::new()),
            (false, true) => w.fast_log = None,
            _ => {}
        }
    }

    /// The keys [`Fdb::log_fast`] logged since the last call, each with its entry now; true
    /// when the log overflowed meanwhile (some changes are not in `out`).
    pub(crate) fn take_fast_changes(&self, out: &mut Vec<(u64, Option<Slot>)>) -> bool {
        let mut w = self.lock();
        let lost = std::mem::take(&mut w.fast_lost);
        let Some(log) = w.fast_log.as_mut() else {
            return lost;
        };
        if log.is_empty() {
            return lost;
        }
        let keys = std::mem::take(log);
        for key in keys {
            out.push((key, w.table.find(key).map(|(_, s)| s)));
        }
        lost
    }

    /// [`Fdb::take_fast_changes`], each key handed to `f` with its entry now while the
    /// writer's lock is held, so that what `f` writes elsewhere (the fast path's FDB map) is
    /// in the order of the table's own changes, whichever thread follows the log (decision
    /// 85). True when the log overflowed meanwhile.
    pub(crate) fn follow_fast_changes(&self, mut f: impl FnMut(u64, Option<Slot>)) -> bool {
        let mut w = self.lock();
        let lost = std::mem::take(&mut w.fast_lost);
        let Some(log) = w.fast_log.as_mut() else {
            return lost;
        };
        if log.is_empty() {
            return lost;
        }
        let keys = std::mem::take(log);
        for key in keys {
            f(key, w.table.find(key).map(|(_, s)| s));
        }
        lost
    }

    /// `key`'s entry handed to `f` while the writer's lock is held (decision 85: a write of
    /// the fast path's map checked against the table, in order with its changes).
    pub(crate) fn with_entry_locked<R>(&self, key: u64, f: impl FnOnce(Option<Slot>) -> R) -> R {
        let w = self.lock();
        f(w.table.find(key).map(|(_, s)| s))
    }

    /// The changes logged since the last call, each key with its entry before and now (a
    /// writer-consistent read), and the changes not logged; the log starts again empty.
    pub(crate) fn take_changes(&self) -> (Vec<SlotChange>, u64) {
        let mut w = self.lock();
        let Some(log) = w.log.as_mut() else {
            return (Vec::new(), 0);
        };
        let log = std::mem::take(&mut **log);
        let changes = log
            .before
            .into_iter()
            .map(|(key, before)| (before, w.table.find(key).map(|(_, s)| s)))
            .collect();
        (changes, log.lost)
    }

    fn from_writer(w: Writer) -> Fdb {
        Fdb {
            current: Mutex::new(w.table.clone()),
            current_id: AtomicU64::new(w.table.id),
            w: Mutex::new(w),
            inner: OnceLock::new(),
        }
    }

    /// The bridge's (S-VID, C-VID) FIDs, made on first use (`learn_inner_vid on`).
    pub fn inner_fids(&self) -> &InnerFids {
        self.inner.get_or_init(|| {
            let i = Arc::new(InnerFids::new());
            self.lock().inner = Some(i.clone());
            i
        })
    }

    /// The (S-VID, C-VID) FIDs, if the bridge ever learned per inner VID.
    #[inline(always)]
    pub fn inner(&self) -> Option<&InnerFids> {
        self.inner.get().map(|a| &**a)
    }

    /// Gives FIDs of (S-VID, C-VID) pairs that no entry uses back (see [`InnerFids`]): one
    /// walk of the table, under the writer's lock; nothing for a bridge that never learned
    /// per inner VID. Returns (pairs unmapped, FIDs freed).
    pub fn reclaim_inner(&self) -> (usize, usize) {
        let Some(inner) = self.inner() else {
            return (0, 0);
        };
        let w = self.lock();
        let mut used = vec![false; INNER_FIDS];
        for s in w.table.entries() {
            if let Some(i) = key_fid(s.key).checked_sub(FIRST_INNER_FID) {
                used[usize::from(i)] = true;
            }
        }
        inner.reclaim(&used)
    }

    /// The VLAN of `key` (its S-VLAN for a pair's FID) and its inner VID (0: none).
    pub fn key_vlan(&self, key: u64) -> (u16, u16) {
        vlan_of(self.inner(), key)
    }

    /// Entry `s` as users see it (`fdb show`, `monitor fdb`): on port `ifname` of bridge
    /// `master`, refreshed `idle_ns` ago.
    pub(crate) fn view(
        &self,
        s: &Slot,
        ifname: String,
        master: String,
        idle_ns: u64,
    ) -> FdbEntryView {
        let (fid, inner) = self.key_vlan(s.key);
        FdbEntryView {
            mac: key_mac(s.key),
            vlan: (fid != 0).then_some(fid),
            inner_vlan: (inner != 0).then_some(inner),
            ifname,
            master,
            kind: s.kind(),
            sticky: s.flags & F_STICKY != 0,
            locked: s.flags & F_LOCKED != 0,
            // Local entries of port addresses are neither learned nor the user's.
            added_by_user: s.flags & F_USER != 0,
            extern_learn: s.flags & F_EXTERN != 0,
            idle_ns,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        // A panic while holding the lock cannot leave the table inconsistent for readers (every
        // store is a complete slot state); carry on with what is there.
        self.w.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves of learned entries so far, and the latest one (for the MAC-flapping watch; takes
    /// the writer's lock, call it about once a second).
    pub fn moves(&self) -> (u64, Option<FdbMove>) {
        let w = self.lock();
        (w.moves, w.last_move)
    }

    pub fn len(&self) -> usize {
        self.lock().len
    }

    pub fn learned(&self) -> usize {
        self.lock().learned
    }

    pub fn max_entries(&self) -> usize {
        self.lock().max_entries
    }

    #[cfg(test)]
    pub fn port_learned(&self, port: u16) -> u32 {
        self.lock().port_learned(port)
    }

    /// The entry of `key` (a writer-consistent read, for the control plane).
    pub fn get(&self, key: u64) -> Option<Slot> {
        let w = self.lock();
        w.table.find(key).map(|(_, s)| s)
    }

    /// Every entry, in table order (for views).
    pub fn entries(&self) -> Vec<Slot> {
        let w = self.lock();
        w.table.entries().collect()
    }

    /// Learns `key` on `port` at `now_ns`, from a datapath worker holding `table` (its cached
    /// current table). The common cases — the entry is there on this port, or must not change
    /// — take no lock; a new entry or a move takes the writer's lock.
    #[cfg(test)]
    pub fn learn(
        &self,
        table: &Table,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
    ) -> Learned {
        if Fdb::learn_kept(table.view(), key, port, now_ns) {
            return Learned::Kept;
        }
        self.learn_locked(key, port, now_ns, bridge_limit, port_limit, 0)
    }

    /// The lock-free half of learning `key` on `port` at `now_ns` in `table` (a worker's
    /// cached current table): true when the entry is there on this port (refreshed) or must
    /// not change (permanent), which is [`Learned::Kept`]; false when the writer must act, by
    /// [`Fdb::learn_locked`] with the limits (read only then, off the per-frame path).
    #[inline(always)]
    pub fn learn_kept(table: TableView<'_>, key: u64, port: u16, now_ns: u64) -> bool {
        if let Some((_, slot, s)) = table.find_at(key) {
            // This port's entry, neither permanent nor locked (the common case): one compare of
            // the port and those two flags.
            const MASK: u32 = 0xffff | ((F_PERMANENT | F_LOCKED) as u32) << 16;
            if (s.port as u32 | (s.flags as u32) << 16) & MASK == port as u32 {
                // A reader's refresh, as `Table::refresh`.
                if s.seen_ns != now_ns {
                    slot.seen_ns.store(now_ns, Relaxed);
                }
                return true;
            }
            return s.flags & F_PERMANENT != 0;
        }
        false
    }

    /// Learning that [`Fdb::learn_kept`] could not finish: a new entry or a move, under the
    /// writer's lock, with the `fdb_max_learned` limits of the bridge and the port.
    #[cold]
    #[inline(never)]
    pub fn learn_locked(
        &self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
        vlan_limit: u32,
    ) -> Learned {
        let mut w = self.lock();
        let r = w.learn(key, port, now_ns, bridge_limit, port_limit, vlan_limit);
        self.publish(&w);
        r
    }

    /// A locked port with `mab on` saw `key` from a source it does not admit: a new source
    /// gets a locked entry (within the learning limits); a locked entry of this port is
    /// refreshed; anything else is left alone. Takes the writer's lock (a slow path).
    #[cold]
    #[inline(never)]
    pub fn learn_mab(
        &self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
        vlan_limit: u32,
    ) -> Learned {
        let mut w = self.lock();
        let limits = (bridge_limit, port_limit, vlan_limit);
        let r = match w.table.find(key) {
            None => w.learn_new_with(key, port, F_LOCKED, now_ns, limits),
            Some((i, s)) => {
                if s.port == port && s.flags & F_LOCKED != 0 {
                    w.table.refresh(i, now_ns);
                }
                Learned::Kept
            }
        };
        self.publish(&w);
        r
    }

    /// Adds or replaces a user entry. `replace == false` refuses an existing key. Returns the
    /// port whose oldest learned entry was evicted to make room, if one was.
    pub fn add_user(
        &self,
        key: u64,
        port: u16,
        flags: u8,
        now_ns: u64,
        replace: bool,
    ) -> Result<Option<u16>, AddError> {
        let mut w = self.lock();
        let r = w.add_user(key, port, flags, now_ns, replace);
        self.publish(&w);
        r
    }

    pub fn remove(&self, key: u64) -> Option<Slot> {
        let mut w = self.lock();
        let r = w.table.find(key).map(|(i, _)| w.remove_at(i));
        self.tidy(&mut w);
        r
    }

    /// Port `port` leaves the bridge: its entries go, and nothing is learned on it until
    /// [`Fdb::open_port`] (a worker may still pass it a frame of the port under the plan from
    /// before). Returns how many entries went.
    pub fn close_port(&self, port: u16) -> usize {
        self.lock().closed.insert(port);
        self.remove_where(|s| s.port == port)
    }

    /// Port `port` joins the bridge: it learns again.
    pub fn open_port(&self, port: u16) {
        self.lock().closed.remove(&port);
    }

    /// Removes every entry `pred` selects; returns how many.
    pub fn remove_where(&self, mut pred: impl FnMut(&Slot) -> bool) -> usize {
        let mut w = self.lock();
        let mut n = 0;
        for i in 0..w.table.slots.len() {
            if let Some(s) = w.table.get_slot(i) {
                if pred(&s) {
                    w.remove_at(i);
                    n += 1;
                }
            }
        }
        self.tidy(&mut w);
        n
    }

    /// The local entry of a port's own address (`key`) on `port`, as Linux's `fdb_add_local`:
    /// permanent, not added by the user (`fdb show` says `permanent`; the running
    /// configuration leaves it out); it replaces any other entry of the key — a learned one
    /// elsewhere included — but not a permanent one (the first local entry of an address
    /// stays). Takes room like a learned entry, evicting fairly, and is added even when nothing
    /// can be evicted (one per port and VLAN). Returns whether it was added, and the port of
    /// an evicted entry.
    pub fn add_local(&self, key: u64, port: u16, now_ns: u64) -> (bool, Option<u16>) {
        if key == 0 {
            return (false, None);
        }
        let mut w = self.lock();
        if let Some((i, s)) = w.table.find(key) {
            if s.flags & F_PERMANENT != 0 {
                return (false, None);
            }
            w.remove_at(i);
        }
        let victim = if w.len >= w.max_entries {
            w.evict_fair()
        } else {
            None
        };
        w.insert_new(key, port, F_PERMANENT, now_ns);
        self.tidy(&mut w);
        (true, victim)
    }

    /// Removes dynamic entries idle for `ageing_ns` or more at `now_ns` (Linux: expired when
    /// `updated + ageing_time <= now`). With `ageing_ns == 0` every dynamic entry is expired.
    pub fn age(&self, now_ns: u64, ageing_ns: u64) -> usize {
        self.remove_where(|s| s.ages() && now_ns.saturating_sub(s.seen_ns) >= ageing_ns)
    }

    /// [`Fdb::age`], asking `seen(key)` first of each entry that would age: a later time it
    /// gives (the eBPF fast path forwarded frames from that source) keeps the entry, with that
    /// time. One question per entry that would go, none for the others.
    pub fn age_with(
        &self,
        now_ns: u64,
        ageing_ns: u64,
        mut seen: impl FnMut(u64) -> Option<u64>,
    ) -> usize {
        let mut kept = Vec::new();
        let n = self.remove_where(|s| {
            if !(s.ages() && now_ns.saturating_sub(s.seen_ns) >= ageing_ns) {
                return false;
            }
            match seen(s.key) {
                Some(t) if t > s.seen_ns && now_ns.saturating_sub(t) < ageing_ns => {
                    kept.push((s.key, t));
                    false
                }
                _ => true,
            }
        });
        for (key, t) in kept {
            self.seen(key, t);
        }
        n
    }

    /// Sets the table bound. Lowering it below the number of entries evicts learned entries
    /// fairly (the port holding most loses its oldest first) until the table fits or only user
    /// entries are left. Returns the ports of the evicted entries, one per entry.
    pub fn set_max_entries(&self, max_entries: usize) -> Vec<u16> {
        let mut w = self.lock();
        w.max_entries = max_entries;
        let mut victims = Vec::new();
        while w.len > w.max_entries {
            match w.evict_fair() {
                Some(p) => victims.push(p),
                None => break,
            }
        }
        self.tidy(&mut w);
        victims
    }

    /// After bulk removals: rebuild a table that is mostly tombstones (control-plane cost,
    /// off the datapath's learning path).
    fn tidy(&self, w: &mut Writer) {
        if w.tombs > w.table.slots.len() / 4 {
            w.rebuild();
        }
        self.publish(w);
    }

    /// Makes the writer's table the one readers use, if a rebuild replaced it.
    fn publish(&self, w: &Writer) {
        if self.current_id.load(Relaxed) != w.table.id {
            *self.current.lock().unwrap_or_else(|e| e.into_inner()) = w.table.clone();
            self.current_id.store(w.table.id, Release);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddError {
    Exists(u16),
    Full,
}
