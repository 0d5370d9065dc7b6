//! The FDB's writer: every change but a lookup's refresh ([`Writer`], behind
//! [`Fdb`](super::Fdb)'s mutex): inserts, moves, removals, rebuilds, the learning limits and fair
//! eviction, and the change log a monitor reads ([`ChangeLog`]).

use super::inner::{vlan_of, InnerFids};
use super::table::{copy_table, pack, Slot, Table, MIN_SLOTS, TOMBSTONE};
use super::{
    key_mac, AddError, FdbMove, Learned, F_EXTERN, F_LOCKED, F_PERMANENT, F_STICKY, F_USER,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::Arc;

/// Everything the writer changes, behind [`Fdb`](super::Fdb)'s lock.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    pub(super) table: Arc<Table>,
    pub(super) len: usize,
    /// Tombstones in `table`.
    pub(super) tombs: usize,
    pub(super) learned: usize,
    /// Learned entries per port id.
    pub(super) port_learned: Vec<u32>,
    /// Learned entries per (port id, FID), for the per-VLAN limits.
    pub(super) vlan_learned: HashMap<(u16, u16), u32>,
    /// Learned keys per port id in learning order, with the stamp they were learned with.
    pub(super) port_queue: Vec<VecDeque<(u64, u32)>>,
    pub(super) next_stamp: u32,
    pub(super) max_entries: usize,
    /// Learned entries that moved to another port, ever (see [`Fdb::moves`](super::Fdb::moves)).
    pub(super) moves: u64,
    /// The latest of those moves.
    pub(super) last_move: Option<FdbMove>,
    /// The bridge's pairs, once it learns per inner VID (shared with
    /// [`Fdb::inner`](super::Fdb::inner)).
    pub(super) inner: Option<Arc<InnerFids>>,
    /// While a monitor watches: what changed since it last looked (`crate::fdbwatch`).
    pub(super) log: Option<Box<ChangeLog>>,
    /// While the eBPF fast path mirrors entries: keys whose entry moved to another port or
    /// went ([`Fdb::take_fast_changes`](super::Fdb::take_fast_changes)); bounded by
    /// [`CHANGE_LOG_KEYS`] (beyond, the engine's once-a-second sync catches up).
    pub(super) fast_log: Option<Vec<u64>>,
    /// Keys `fast_log` could not hold since it was last taken.
    pub(super) fast_lost: bool,
    /// Ports detached from the bridge ([`Fdb::close_port`](super::Fdb::close_port)): nothing
    /// is learned on them until they are attached again. A datapath worker still holding the
    /// plan from before the detach can pass a frame of such a port to learning after its
    /// entries were flushed; refused here, no entry outlives its port.
    pub(super) closed: HashSet<u16>,
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

/// One key's entry before and now ([`Fdb::take_changes`](super::Fdb::take_changes)).
pub(crate) type SlotChange = (Option<Slot>, Option<Slot>);

/// Most keys a [`ChangeLog`] holds (1.5 MB or so).
pub(crate) const CHANGE_LOG_KEYS: usize = 1 << 16;

impl Writer {
    pub(super) fn port_learned(&self, port: u16) -> u32 {
        self.port_learned.get(port as usize).copied().unwrap_or(0)
    }

    /// Notes for the fast path that `key`'s entry moved or went.
    fn note_fast(&mut self, key: u64) {
        if let Some(l) = self.fast_log.as_mut() {
            if l.len() < CHANGE_LOG_KEYS {
                l.push(key);
            } else {
                self.fast_lost = true;
            }
        }
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
    pub(super) fn rebuild(&mut self) {
        let mut cap = MIN_SLOTS;
        while (self.len + 1) * 16 > cap * 5 {
            cap *= 2;
        }
        self.table = Arc::new(copy_table(&self.table, cap));
        self.tombs = 0;
    }

    /// Inserts a new key (the caller checked it is absent and that there is room), reusing
    /// the first tombstone on its probe path.
    pub(super) fn insert_new(&mut self, key: u64, port: u16, flags: u8, now_ns: u64) {
        // Key 0 (the zero MAC in FID 0) is the empty slot's marker: never stored. Commands
        // refuse the zero MAC and learning refuses the key before this.
        if key == 0 {
            return;
        }
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
        if self.fast_log.is_some() {
            if let Some(old) = self.table.get_slot(i) {
                if old.port != port || old.flags != flags {
                    self.note_fast(old.key);
                }
            }
        }
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
    pub(super) fn remove_at(&mut self, i: usize) -> Slot {
        let removed = self.table.get_slot(i).expect("slot in use");
        self.note(removed.key, Some(removed));
        self.note_fast(removed.key);
        if removed.is_learned() {
            self.uncount_learned(removed.port, removed.key);
        }
        self.table.slots[i].key.store(TOMBSTONE, Release);
        self.len -= 1;
        self.tombs += 1;
        removed
    }

    pub(super) fn learn(
        &mut self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
        vlan_limit: u32,
    ) -> Learned {
        if self.closed.contains(&port) {
            return Learned::Refused;
        }
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
    pub(super) fn learn_new_with(
        &mut self,
        key: u64,
        port: u16,
        flags: u8,
        now_ns: u64,
        (bridge_limit, port_limit, vlan_limit): (u32, u32, u32),
    ) -> Learned {
        if key == 0 || self.closed.contains(&port) {
            return Learned::Refused;
        }
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
    pub(super) fn evict_fair(&mut self) -> Option<u16> {
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

    pub(super) fn add_user(
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
