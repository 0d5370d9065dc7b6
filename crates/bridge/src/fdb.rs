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

use qbridge_wire::MacAddr;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

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

/// The first FID of an (S-VID, C-VID) pair: FIDs below it are VIDs.
pub(crate) const FIRST_INNER_FID: u16 = 4096;
/// FIDs stop below bit 15 of the FID field, so that no key has bit 63 (the tombstone) set.
const INNER_FIDS: usize = 0x8000 - FIRST_INNER_FID as usize;

/// FIDs of (S-VID, C-VID) pairs, for a bridge that learns per inner VID (`learn_inner_vid`,
/// `docs/semantics.md` §K7): a pair gets a free FID the first time a frame of it is
/// classified. Lookups are lock-free (the datapath); a new pair takes `alloc`'s lock. At most
/// 28,672 pairs at once; frames of further pairs learn in their S-VLAN's own FID (shared
/// learning), which is still correct forwarding.
///
/// **Reclaiming** (decision 35). A pair's FID goes back to use once no FDB entry has it
/// ([`Fdb::reclaim_inner`]: after a flush, each ageing pass, `learn_inner_vid off`), by an
/// epoch scheme that keeps the per-frame path lock-free and exact. A datapath worker uses a
/// pair's FID only within one run of frames (classify, learn, look up), and marks that run
/// in its slot of `active` with the epoch it started in ([`InnerFids::enter`], `exit`: three
/// atomic operations per run of a port that is not plain, none per frame). Reclaiming unmaps
/// the pair at once (its next frame numbers it anew) and *retires* its FID in the current
/// epoch, then starts a new one; a retired FID is free again once no worker is in a run that
/// began in that epoch or before, and no entry appeared under it meanwhile (a frame
/// classified just before the unmapping). Until then `pair` still names the pair, so
/// `fdb show` stays right.
#[derive(Debug)]
pub(crate) struct InnerFids {
    /// By S-VID: FID by C-VID (0: none yet); a table is made on a pair's first frame.
    by_svid: Box<[OnceLock<Box<[AtomicU16]>>]>,
    /// By FID − [`FIRST_INNER_FID`]: `svid << 12 | cvid` (0: unused).
    pairs: Box<[AtomicU32]>,
    /// Numbering state.
    alloc: Mutex<Alloc>,
    /// Every FID is taken: a new pair no longer takes `alloc`'s lock (per frame, under a
    /// flood of new C-VIDs) to learn so. Cleared when FIDs are freed.
    full: AtomicBool,
    /// The current epoch (from 1).
    epoch: AtomicU64,
    /// By worker index: the epoch the worker's current run began in; 0: not in a run.
    active: Box<[AtomicU64]>,
    /// A worker with an index beyond `active` ran: retired FIDs are never freed.
    untracked: AtomicBool,
}

/// Workers whose runs [`InnerFids`] tracks (the daemon's `--workers` limit).
const EPOCH_SLOTS: usize = 64;

/// [`InnerFids`]'s numbering state, behind its lock.
#[derive(Debug, Default)]
struct Alloc {
    /// FIDs numbered so far from the start (the next never-used one is `next`).
    next: usize,
    /// FIDs free again (reclaimed), used before new ones.
    free: Vec<u16>,
    /// FIDs retired, with the epoch they were retired in.
    retired: Vec<(u64, Vec<u16>)>,
}

impl InnerFids {
    fn new() -> InnerFids {
        InnerFids {
            by_svid: (0..4096).map(|_| OnceLock::new()).collect(),
            pairs: (0..INNER_FIDS).map(|_| AtomicU32::new(0)).collect(),
            alloc: Mutex::new(Alloc::default()),
            full: AtomicBool::new(false),
            epoch: AtomicU64::new(1),
            active: (0..EPOCH_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            untracked: AtomicBool::new(false),
        }
    }

    /// A copy with the same numbering (what a batch of commands works on; no worker uses it
    /// yet).
    fn deep_copy(&self) -> InnerFids {
        let a = self.lock_alloc();
        let c = InnerFids::new();
        for (s, t) in self.by_svid.iter().enumerate() {
            if let Some(t) = t.get() {
                let copy: Box<[AtomicU16]> =
                    t.iter().map(|f| AtomicU16::new(f.load(Acquire))).collect();
                let _ = c.by_svid[s].set(copy);
            }
        }
        for (d, p) in c.pairs.iter().zip(self.pairs.iter()) {
            d.store(p.load(Acquire), Relaxed);
        }
        {
            let mut ca = c.lock_alloc();
            ca.next = a.next;
            ca.free = a.free.clone();
            let retired: Vec<u16> = a.retired.iter().flat_map(|(_, f)| f.clone()).collect();
            if !retired.is_empty() {
                ca.retired.push((0, retired));
            }
        }
        c.full.store(self.full.load(Relaxed), Relaxed);
        c.untracked.store(self.untracked.load(Relaxed), Relaxed);
        c
    }

    /// Worker `wi` starts a run that may classify frames by pair: it is in the current epoch
    /// until [`InnerFids::exit`]. The epoch is read again after the slot is written, so a
    /// reclaim either sees the slot or the worker sees the new epoch (and what it unmapped).
    #[inline]
    pub fn enter(&self, wi: usize) {
        let Some(slot) = self.active.get(wi) else {
            self.untracked.store(true, Relaxed);
            return;
        };
        let mut e = self.epoch.load(SeqCst);
        loop {
            slot.store(e, SeqCst);
            let now = self.epoch.load(SeqCst);
            if now == e {
                break;
            }
            e = now;
        }
    }

    /// Worker `wi`'s run is over: it holds no pair FID any more.
    #[inline]
    pub fn exit(&self, wi: usize) {
        if let Some(slot) = self.active.get(wi) {
            slot.store(0, Release);
        }
    }

    fn lock_alloc(&self) -> MutexGuard<'_, Alloc> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The FID of (`svid`, `cvid`), numbering the pair if it is new; `svid` itself when
    /// every FID is taken.
    pub fn fid(&self, svid: u16, cvid: u16) -> u16 {
        let (s, c) = (usize::from(svid & 0x0fff), usize::from(cvid & 0x0fff));
        if let Some(t) = self.by_svid[s].get() {
            let f = t[c].load(Acquire);
            if f != 0 {
                return f;
            }
        }
        if self.full.load(Relaxed) {
            return svid;
        }
        self.number(s, c).unwrap_or(svid)
    }

    #[cold]
    #[inline(never)]
    fn number(&self, s: usize, c: usize) -> Option<u16> {
        let mut a = self.lock_alloc();
        let t = self.by_svid[s].get_or_init(|| (0..4096).map(|_| AtomicU16::new(0)).collect());
        let f = t[c].load(Acquire);
        if f != 0 {
            return Some(f);
        }
        let f = match a.free.pop() {
            Some(f) => f,
            None if a.next < INNER_FIDS => {
                a.next += 1;
                FIRST_INNER_FID + (a.next - 1) as u16
            }
            None => {
                self.full.store(true, Relaxed);
                return None;
            }
        };
        self.pairs[usize::from(f - FIRST_INNER_FID)].store((s << 12 | c) as u32, Release);
        t[c].store(f, Release);
        Some(f)
    }

    /// The (S-VID, C-VID) of FID `fid`, if it is a pair's (a retired one's too).
    pub fn pair(&self, fid: u16) -> Option<(u16, u16)> {
        let i = usize::from(fid.checked_sub(FIRST_INNER_FID)?);
        let p = self.pairs.get(i)?.load(Acquire);
        (p != 0).then_some(((p >> 12) as u16, (p & 0x0fff) as u16))
    }

    /// Pairs numbered now (mapped to a FID), and FIDs retired but not yet free.
    pub fn in_use(&self) -> (usize, usize) {
        let a = self.lock_alloc();
        let retired: usize = a.retired.iter().map(|(_, f)| f.len()).sum();
        (a.next - a.free.len() - retired, retired)
    }

    /// Unmaps every mapped pair whose FID `used` does not hold (retiring the FIDs in the
    /// current epoch, and starting a new one), and frees retired FIDs that no worker's run
    /// can still use and `used` does not hold. Returns (pairs unmapped, FIDs freed). Called
    /// with the FDB writer's lock held (so `used` stays true).
    fn reclaim(&self, used: &[bool]) -> (usize, usize) {
        let mut a = self.lock_alloc();
        let mut retire = Vec::new();
        let free_now: std::collections::HashSet<u16> = a.free.iter().copied().collect();
        let retired_now: std::collections::HashSet<u16> = a
            .retired
            .iter()
            .flat_map(|(_, f)| f.iter().copied())
            .collect();
        for (i, &in_use) in used.iter().enumerate().take(a.next) {
            let f = FIRST_INNER_FID + i as u16;
            if in_use || free_now.contains(&f) || retired_now.contains(&f) {
                continue;
            }
            let p = self.pairs[i].load(Acquire);
            if p == 0 {
                continue;
            }
            let (s, c) = ((p >> 12) as usize, (p & 0x0fff) as usize);
            if let Some(t) = self.by_svid[s].get() {
                if t[c].load(Acquire) == f {
                    t[c].store(0, Release);
                }
            }
            retire.push(f);
        }
        let unmapped = retire.len();
        if !retire.is_empty() {
            // Runs that begin from now on see the pairs unmapped.
            let e = self.epoch.fetch_add(1, SeqCst);
            a.retired.push((e, retire));
        }
        // The oldest epoch a worker's run is in (u64::MAX: none is in a run).
        let oldest = self
            .active
            .iter()
            .map(|s| s.load(SeqCst))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX);
        let mut freed = 0;
        if !self.untracked.load(Relaxed) {
            let mut keep = Vec::new();
            for (e, fids) in std::mem::take(&mut a.retired) {
                if e >= oldest {
                    keep.push((e, fids));
                    continue;
                }
                let (gone, stay): (Vec<u16>, Vec<u16>) = fids
                    .into_iter()
                    .partition(|&f| !used[usize::from(f - FIRST_INNER_FID)]);
                for &f in &gone {
                    self.pairs[usize::from(f - FIRST_INNER_FID)].store(0, Release);
                }
                freed += gone.len();
                a.free.extend(gone);
                if !stay.is_empty() {
                    // Entries appeared under them (a frame classified before the unmapping):
                    // they wait for those entries to go.
                    keep.push((e, stay));
                }
            }
            a.retired = keep;
        }
        if freed > 0 {
            self.full.store(false, Relaxed);
        }
        (unmapped, freed)
    }
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

const MIN_SLOTS: usize = 64;

/// The VLAN of `key` and its inner VID (0: none): a pair's FID through `inner`.
fn vlan_of(inner: Option<&InnerFids>, key: u64) -> (u16, u16) {
    let fid = key_fid(key);
    match inner.and_then(|i| i.pair(fid)) {
        Some(p) => p,
        None => (fid & 0x0fff, 0),
    }
}

/// Key of a deleted slot (a tombstone): probes pass over it, inserts may reuse it. No real key
/// has bit 63 set (48 MAC bits and 15 FID bits).
const TOMBSTONE: u64 = 1 << 63;

/// Source of table ids: every table ever built gets a new one, so a cached table can be checked
/// against the current one with a single integer compare.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// One slot as stored: the key, the last time the entry was seen, and `port | flags << 16 |
/// stamp << 32`. Written by the writer (under [`Fdb`]'s lock) except `seen_ns`, which readers
/// refresh.
#[derive(Debug, Default)]
struct AtomicSlot {
    key: AtomicU64,
    seen_ns: AtomicU64,
    meta: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<AtomicSlot>() == 24);

#[inline(always)]
fn pack(port: u16, flags: u8, stamp: u32) -> u64 {
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
    slots: Box<[AtomicSlot]>,
    id: u64,
    /// 64 - log2(slots): the shift that turns a hashed key into a home slot.
    shift: u32,
}

impl Table {
    fn new(cap: usize) -> Table {
        debug_assert!(cap.is_power_of_two() && cap > 1);
        Table {
            slots: (0..cap).map(|_| AtomicSlot::default()).collect(),
            id: NEXT_TABLE_ID.fetch_add(1, Relaxed),
            shift: 64 - cap.trailing_zeros(),
        }
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Home slot of `key`.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
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
    fn find_at(self, key: u64) -> Option<(usize, &'a AtomicSlot, Slot)> {
        self.find_at_with::<true>(key)
    }

    /// [`TableView::find_at`]; `SEEN`: read `seen_ns` (else 0).
    #[inline(always)]
    fn find_at_with<const SEEN: bool>(self, key: u64) -> Option<(usize, &'a AtomicSlot, Slot)> {
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

    fn get_slot(&self, i: usize) -> Option<Slot> {
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

    fn entries(&self) -> impl Iterator<Item = Slot> + '_ {
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

/// Everything the writer changes, behind [`Fdb`]'s lock.
#[derive(Debug, Clone)]
struct Writer {
    table: Arc<Table>,
    len: usize,
    /// Tombstones in `table`.
    tombs: usize,
    learned: usize,
    /// Learned entries per port id.
    port_learned: Vec<u32>,
    /// Learned entries per (port id, FID), for the per-VLAN limits.
    vlan_learned: HashMap<(u16, u16), u32>,
    /// Learned keys per port id in learning order, with the stamp they were learned with.
    port_queue: Vec<VecDeque<(u64, u32)>>,
    next_stamp: u32,
    max_entries: usize,
    /// Learned entries that moved to another port, ever (see [`Fdb::moves`]).
    moves: u64,
    /// The latest of those moves.
    last_move: Option<FdbMove>,
    /// The bridge's pairs, once it learns per inner VID (shared with [`Fdb::inner`]).
    inner: Option<Arc<InnerFids>>,
    /// While a monitor watches: what changed since it last looked (`crate::fdbwatch`).
    log: Option<Box<ChangeLog>>,
}

/// The keys whose entries changed (added, moved, flags changed, removed) since the log was
/// last taken, each with its entry before the first of those changes: what `monitor`
/// compares, instead of a copy of the table (`crate::fdbwatch`). Bounded: past
/// [`CHANGE_LOG_KEYS`] keys, further changes are only counted.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChangeLog {
    pub before: HashMap<u64, Option<Slot>>,
    /// Changes of keys not in `before` once it was full.
    pub lost: u64,
}

/// One key's entry before and now ([`Fdb::take_changes`]).
pub(crate) type SlotChange = (Option<Slot>, Option<Slot>);

/// Most keys a [`ChangeLog`] holds (1.5 MB or so).
pub(crate) const CHANGE_LOG_KEYS: usize = 1 << 16;

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

/// A new table of `cap` slots holding `t`'s entries (tombstones dropped).
fn copy_table(t: &Table, cap: usize) -> Table {
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

impl Writer {
    fn port_learned(&self, port: u16) -> u32 {
        self.port_learned.get(port as usize).copied().unwrap_or(0)
    }

    /// Notes a change of `key`, whose entry was `before` (see [`ChangeLog`]).
    fn note(&mut self, key: u64, before: Option<Slot>) {
        if let Some(log) = self.log.as_mut() {
            if log.before.len() >= CHANGE_LOG_KEYS && !log.before.contains_key(&key) {
                log.lost += 1;
            } else {
                log.before.entry(key).or_insert(before);
            }
        }
    }

    fn ensure_port(&mut self, port: u16) {
        let n = port as usize + 1;
        if self.port_learned.len() < n {
            self.port_learned.resize(n, 0);
            self.port_queue.resize_with(n, VecDeque::new);
        }
    }

    fn next_stamp(&mut self) -> u32 {
        let stamp = self.next_stamp;
        self.next_stamp = self.next_stamp.wrapping_add(1).max(1);
        stamp
    }

    /// A new table sized for the entries (load at most 5/16 after it), without tombstones.
    /// Readers keep the old one until they next look at the FDB's current id.
    fn rebuild(&mut self) {
        let mut cap = MIN_SLOTS;
        while (self.len + 1) * 16 > cap * 5 {
            cap *= 2;
        }
        self.table = Arc::new(copy_table(&self.table, cap));
        self.tombs = 0;
    }

    /// Inserts a new key (the caller checked it is absent and that there is room), reusing
    /// the first tombstone on its probe path.
    fn insert_new(&mut self, key: u64, port: u16, flags: u8, now_ns: u64) {
        self.note(key, None);
        if (self.len + self.tombs + 1) * 8 > self.table.slots.len() * 5 {
            self.rebuild();
        }
        let stamp = self.next_stamp();
        let t = &self.table;
        let mut i = t.home(key);
        loop {
            let k = t.slots[i].key.load(Relaxed);
            if k == 0 || k == TOMBSTONE {
                if k == TOMBSTONE {
                    self.tombs -= 1;
                }
                break;
            }
            i = (i + 1) & t.mask();
        }
        let s = &t.slots[i];
        s.seen_ns.store(now_ns, Relaxed);
        s.meta.store(pack(port, flags, stamp), Relaxed);
        s.key.store(key, Release);
        self.len += 1;
        if flags & !F_LOCKED == 0 {
            self.count_learned(port, stamp, key);
        }
    }

    fn set_meta(&mut self, i: usize, port: u16, flags: u8, stamp: u32) {
        if self.log.is_some() {
            if let Some(old) = self.table.get_slot(i) {
                self.note(old.key, Some(old));
            }
        }
        self.table.slots[i]
            .meta
            .store(pack(port, flags, stamp), Release);
    }

    fn count_learned(&mut self, port: u16, stamp: u32, key: u64) {
        self.ensure_port(port);
        self.learned += 1;
        self.port_learned[port as usize] += 1;
        let vlan = vlan_of(self.inner.as_deref(), key).0;
        *self.vlan_learned.entry((port, vlan)).or_insert(0) += 1;
        let q = &mut self.port_queue[port as usize];
        q.push_back((key, stamp));
        // Drop stale queue entries now and then so the queue stays O(live entries).
        if q.len() > 2 * self.port_learned[port as usize] as usize + 64 {
            let t = &self.table;
            q.retain(|&(k, st)| {
                t.find(k)
                    .is_some_and(|(_, s)| s.stamp == st && s.port == port && s.is_learned())
            });
        }
    }

    fn uncount_learned(&mut self, port: u16, key: u64) {
        self.learned -= 1;
        self.port_learned[port as usize] -= 1;
        let vlan = vlan_of(self.inner.as_deref(), key).0;
        if let Some(n) = self.vlan_learned.get_mut(&(port, vlan)) {
            *n -= 1;
            if *n == 0 {
                self.vlan_learned.remove(&(port, vlan));
            }
        }
    }

    /// Removes the entry in slot `i` (a tombstone takes its place).
    fn remove_at(&mut self, i: usize) -> Slot {
        let removed = self.table.get_slot(i).expect("slot in use");
        self.note(removed.key, Some(removed));
        if removed.is_learned() {
            self.uncount_learned(removed.port, removed.key);
        }
        self.table.slots[i].key.store(TOMBSTONE, Release);
        self.len -= 1;
        self.tombs += 1;
        removed
    }

    fn learn(
        &mut self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
        vlan_limit: u32,
    ) -> Learned {
        let Some((i, s)) = self.table.find(key) else {
            let limits = (bridge_limit, port_limit, vlan_limit);
            return self.learn_new_with(key, port, 0, now_ns, limits);
        };
        if s.flags & F_PERMANENT != 0 {
            return Learned::Kept;
        }
        self.table.refresh(i, now_ns);
        // Learned from a port (unlocked, or a locked port that admitted the source): a locked
        // entry becomes an ordinary one, as Linux's `br_fdb_update` clears `locked`.
        let flags = s.flags & !F_LOCKED;
        if s.port == port || s.flags & F_STICKY != 0 {
            if flags != s.flags && s.port == port {
                self.set_meta(i, s.port, flags, s.stamp);
            }
            return Learned::Kept;
        }
        // Moving: an externally learned entry is taken over (Linux `br_fdb_update` clears
        // `BR_FDB_ADDED_BY_EXT_LEARN`); it stays a user entry, and now ages.
        let flags = flags & !F_EXTERN;
        let mut stamp = s.stamp;
        if s.is_learned() {
            // A fresh stamp: on its new port the entry is the youngest, whatever its age on a
            // port it was learned on before (its old queue place there is now stale).
            stamp = self.next_stamp();
            self.uncount_learned(s.port, key);
            self.count_learned(port, stamp, key);
        }
        self.set_meta(i, port, flags, stamp);
        self.moves += 1;
        self.last_move = Some(FdbMove {
            mac: key_mac(key),
            vid: vlan_of(self.inner.as_deref(), key).0,
            from: s.port,
            to: port,
        });
        Learned::Moved
    }

    /// A new learned entry within the limits `(bridge, port, port in this VLAN)` (0: none).
    /// The per-VLAN limit is checked first: it drops the frame, the others only refuse.
    fn learn_new_with(
        &mut self,
        key: u64,
        port: u16,
        flags: u8,
        now_ns: u64,
        (bridge_limit, port_limit, vlan_limit): (u32, u32, u32),
    ) -> Learned {
        if vlan_limit != 0
            && self
                .vlan_learned
                .get(&(port, vlan_of(self.inner.as_deref(), key).0))
                .is_some_and(|&n| n >= vlan_limit)
        {
            return Learned::RefusedVlan;
        }
        if bridge_limit != 0 && self.learned >= bridge_limit as usize {
            return Learned::Refused;
        }
        if port_limit != 0 && self.port_learned(port) >= port_limit {
            return Learned::Refused;
        }
        let mut outcome = Learned::New;
        if self.len >= self.max_entries {
            match self.evict_fair() {
                Some(victim) => outcome = Learned::NewEvicting { port: victim },
                None => return Learned::Refused,
            }
        }
        self.insert_new(key, port, flags, now_ns);
        outcome
    }

    /// Evicts the oldest learned entry of the port with the most learned entries.
    fn evict_fair(&mut self) -> Option<u16> {
        let (victim, count) = self
            .port_learned
            .iter()
            .enumerate()
            .max_by_key(|&(i, &n)| (n, std::cmp::Reverse(i)))
            .map(|(i, &n)| (i as u16, n))?;
        if count == 0 {
            return None;
        }
        while let Some((key, stamp)) = self.port_queue[victim as usize].pop_front() {
            if let Some((i, s)) = self.table.find(key) {
                if s.stamp == stamp && s.port == victim && s.is_learned() {
                    self.remove_at(i);
                    return Some(victim);
                }
            }
        }
        None
    }

    fn add_user(
        &mut self,
        key: u64,
        port: u16,
        flags: u8,
        now_ns: u64,
        replace: bool,
    ) -> Result<Option<u16>, AddError> {
        let flags = flags | F_USER;
        if let Some((i, old)) = self.table.find(key) {
            if !replace {
                return Err(AddError::Exists(old.port));
            }
            if old.is_learned() {
                self.uncount_learned(old.port, key);
            }
            self.table.slots[i].seen_ns.store(now_ns, Relaxed);
            self.set_meta(i, port, flags, old.stamp);
            return Ok(None);
        }
        let mut victim = None;
        if self.len >= self.max_entries {
            victim = Some(self.evict_fair().ok_or(AddError::Full)?);
        }
        self.insert_new(key, port, flags, now_ns);
        Ok(victim)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddError {
    Exists(u16),
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u64) -> u64 {
        fdb_key(MacAddr::from_u64(0x0200_0000_0000 | n), 1)
    }

    fn learn(f: &Fdb, key: u64, port: u16, now: u64, bl: u32, pl: u32) -> Learned {
        let mut c = TableCache::default();
        f.learn(c.get(f), key, port, now, bl, pl)
    }

    #[test]
    fn inner_fids_number_pairs_until_full() {
        let f = InnerFids::new();
        let first = f.fid(100, 10);
        assert_eq!(first, FIRST_INNER_FID);
        assert_eq!(f.fid(100, 10), first, "a pair keeps its FID");
        assert_eq!(f.pair(first), Some((100, 10)));
        let mut n = 1;
        'fill: for s in 1..4095u16 {
            for c in 1..4095u16 {
                if n == INNER_FIDS {
                    break 'fill;
                }
                if (s, c) != (100, 10) {
                    assert!(f.fid(s, c) >= FIRST_INNER_FID);
                    n += 1;
                }
            }
        }
        // Full: a new pair learns in its VLAN; numbered pairs keep their FIDs.
        assert_eq!(f.fid(4000, 4000), 4000);
        assert!(f.full.load(Relaxed));
        assert_eq!(f.fid(100, 10), first);
        assert_eq!(f.pair(4000), None);
    }

    /// Reclaiming pair FIDs (decision 35): a pair without entries is unmapped at once; its
    /// FID is free again only when no worker is in a run that began before, and never while an
    /// entry uses it.
    #[test]
    fn inner_fids_reclaim_after_workers_move_on() {
        let f = Fdb::new(1000);
        let inner = f.inner_fids();
        let f1 = inner.fid(1, 10);
        // Worker 1 is in a run (it may hold f1 for a frame of (1, 10)).
        inner.enter(1);
        assert_eq!(f.reclaim_inner(), (1, 0), "unmapped, not freed");
        assert_eq!(inner.pair(f1), Some((1, 10)), "still named while retired");
        let f2 = inner.fid(1, 10);
        assert_ne!(f2, f1, "numbered anew, not with the retired FID");
        assert_eq!(inner.in_use(), (1, 1));
        // An entry under the new FID keeps it; worker 1 still holds f1 back.
        let mut c = TableCache::default();
        let key = fdb_key(MacAddr::from_u64(0x0200_0000_0001), f2);
        assert_eq!(f.learn(c.get(&f), key, 1, 5, 0, 0), Learned::New);
        assert_eq!(f.reclaim_inner(), (0, 0));
        // A run that began after the reclaim does not hold f1 back.
        inner.enter(2);
        inner.exit(1);
        assert_eq!(f.reclaim_inner(), (0, 1));
        inner.exit(2);
        assert_eq!(inner.pair(f1), None);
        assert_eq!(inner.fid(2, 20), f1, "the freed FID is taken first");
        assert_eq!(inner.in_use(), (2, 0));
        // No run in progress: unmapped and freed at once.
        f.remove(key);
        assert_eq!(f.reclaim_inner(), (2, 2));
        assert_eq!(inner.in_use(), (0, 0));
        // A worker beyond the tracked slots: nothing is ever freed again.
        inner.fid(3, 30);
        inner.enter(EPOCH_SLOTS);
        assert_eq!(f.reclaim_inner(), (1, 0));
    }

    #[test]
    fn learn_move_sticky_static() {
        let f = Fdb::new(1000);
        assert_eq!(learn(&f, k(1), 1, 10, 0, 0), Learned::New);
        assert_eq!(learn(&f, k(1), 1, 20, 0, 0), Learned::Kept);
        assert_eq!(f.get(k(1)).unwrap().seen_ns, 20);
        assert_eq!(learn(&f, k(1), 2, 30, 0, 0), Learned::Moved);
        assert_eq!(
            (f.port_learned(1), f.port_learned(2), f.learned()),
            (0, 1, 1)
        );
        f.add_user(k(2), 3, F_STICKY | F_STATIC, 0, false).unwrap();
        assert_eq!(learn(&f, k(2), 4, 1, 0, 0), Learned::Kept);
        assert_eq!(f.get(k(2)).unwrap().port, 3);
        f.add_user(k(3), 3, F_STATIC, 0, false).unwrap();
        assert_eq!(learn(&f, k(3), 4, 1, 0, 0), Learned::Moved);
        assert_eq!(f.get(k(3)).unwrap().kind(), FdbKind::Static);
        assert_eq!(
            f.add_user(k(3), 3, F_STATIC, 0, false),
            Err(AddError::Exists(4))
        );
        assert_eq!(f.learned(), 1);
    }

    #[test]
    fn limits_refuse() {
        let f = Fdb::new(1000);
        assert_eq!(learn(&f, k(1), 1, 0, 2, 0), Learned::New);
        assert_eq!(learn(&f, k(2), 2, 0, 2, 0), Learned::New);
        assert_eq!(learn(&f, k(3), 2, 0, 2, 0), Learned::Refused);
        assert_eq!(learn(&f, k(3), 1, 0, 0, 1), Learned::Refused);
        assert_eq!(learn(&f, k(3), 3, 0, 0, 1), Learned::New);
    }

    #[test]
    fn fair_eviction_takes_oldest_of_largest_port() {
        let f = Fdb::new(6);
        learn(&f, k(100), 1, 0, 0, 0);
        for n in 0..5 {
            learn(&f, k(n), 2, n, 0, 0);
        }
        assert_eq!(
            learn(&f, k(50), 3, 9, 0, 0),
            Learned::NewEvicting { port: 2 }
        );
        assert!(f.get(k(0)).is_none());
        assert!(f.get(k(100)).is_some() && f.get(k(1)).is_some());
        assert_eq!(f.len(), 6);
    }

    #[test]
    fn delete_keeps_all_other_keys_reachable() {
        let f = Fdb::new(1 << 20);
        for n in 0..5000 {
            learn(&f, k(n), (n % 7) as u16, n, 0, 0);
        }
        for n in (0..5000).step_by(3) {
            assert!(f.remove(k(n)).is_some());
        }
        for n in 0..5000 {
            assert_eq!(f.get(k(n)).is_some(), n % 3 != 0, "key {n}");
        }
        assert_eq!(f.age(10_000, 4000), 3333);
        learn(&f, k(1), 1, 100, 0, 0);
        assert_eq!(f.age(199, 100), 0, "idle 99 < 100 kept");
        assert_eq!(
            f.age(200, 100),
            1,
            "idle exactly ageing_time expires (Linux)"
        );
        learn(&f, k(2), 1, 5, 0, 0);
        assert_eq!(
            f.age(5, 0),
            1,
            "ageing_time 0: every dynamic entry is expired"
        );
        assert_eq!((f.len(), f.learned()), (0, 0));
    }

    #[test]
    fn tombstones_are_reused_and_rebuilt_away() {
        let f = Fdb::new(1 << 20);
        for round in 0..20u64 {
            for n in 0..1000 {
                learn(&f, k(n), 1, round, 0, 0);
            }
            assert_eq!(f.remove_where(|_| true), 1000);
        }
        let w = f.lock();
        assert_eq!((w.len, w.learned), (0, 0));
        assert!(w.table.slots.len() <= 4096, "{}", w.table.slots.len());
    }

    #[test]
    fn lowering_max_entries_evicts_fairly() {
        let f = Fdb::new(100);
        for n in 0..10 {
            learn(&f, k(n), 1, n, 0, 0);
        }
        for n in 10..13 {
            learn(&f, k(n), 2, n, 0, 0);
        }
        f.add_user(k(99), 3, F_STATIC, 0, false).unwrap();
        // 14 entries into 8: port 1 holds most until it is down to 4 (port 2 has 3).
        assert_eq!(f.set_max_entries(8), vec![1; 6]);
        assert_eq!(f.len(), 8);
        assert!(f.get(k(5)).is_none() && f.get(k(6)).is_some());
        assert_eq!(f.set_max_entries(0).len(), 7, "user entries stay");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn readers_see_whole_entries_while_a_writer_works() {
        use std::sync::atomic::AtomicBool;
        let f = Arc::new(Fdb::new(1 << 20));
        for n in 0..64 {
            learn(&f, k(n), 7, 1, 0, 0);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut cache = TableCache::default();
                let mut seen = 0u64;
                while !stop.load(Relaxed) {
                    let t = cache.get(&f);
                    for n in 0..64 {
                        // Moved back and forth between ports 7 and 8 only, never torn or lost.
                        let (_, s) = t.find(k(n)).expect("key stays reachable");
                        assert!(s.port == 7 || s.port == 8, "port {}", s.port);
                        assert_eq!(s.key, k(n));
                        seen += 1;
                    }
                }
                seen
            })
        };
        for round in 0..2000u64 {
            let port = 7 + (round % 2) as u16;
            for n in 0..64 {
                learn(&f, k(n), port, round, 0, 0);
            }
            // Growth and churn on other keys: rebuilds publish new tables.
            for n in 0..50 {
                learn(&f, k(1000 + round * 50 + n), 9, round, 0, 0);
            }
            f.remove_where(|s| s.port == 9);
        }
        stop.store(true, Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}
