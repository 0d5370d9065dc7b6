//! FIDs of (S-VID, C-VID) pairs for a bridge that learns per inner VID ([`InnerFids`]): the
//! lock-free pair lookup, the numbering behind its lock ([`Alloc`]) and the epoch scheme that
//! reclaims unused pair FIDs; and [`vlan_of`], which turns a key's FID back into its VLAN.

use super::key_fid;
use std::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The first FID of an (S-VID, C-VID) pair: FIDs below it are VIDs.
pub(crate) const FIRST_INNER_FID: u16 = 4096;
/// FIDs stop below bit 15 of the FID field, so that no key has bit 63 (the tombstone) set.
pub(super) const INNER_FIDS: usize = 0x8000 - FIRST_INNER_FID as usize;

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
///
/// [`Fdb::reclaim_inner`]: super::Fdb::reclaim_inner
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
    pub(super) full: AtomicBool,
    /// The current epoch (from 1).
    epoch: AtomicU64,
    /// By worker index: the epoch the worker's current run began in; 0: not in a run.
    active: Box<[AtomicU64]>,
    /// A worker with an index beyond `active` ran: retired FIDs are never freed.
    untracked: AtomicBool,
}

/// Workers whose runs [`InnerFids`] tracks (the daemon's `--workers` limit).
pub(super) const EPOCH_SLOTS: usize = 64;

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
    pub(super) fn new() -> InnerFids {
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
    pub(super) fn deep_copy(&self) -> InnerFids {
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
    pub(super) fn reclaim(&self, used: &[bool]) -> (usize, usize) {
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

/// The VLAN of `key` and its inner VID (0: none): a pair's FID through `inner`.
pub(super) fn vlan_of(inner: Option<&InnerFids>, key: u64) -> (u16, u16) {
    let fid = key_fid(key);
    match inner.and_then(|i| i.pair(fid)) {
        Some(p) => p,
        None => (fid & 0x0fff, 0),
    }
}
