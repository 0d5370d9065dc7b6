//! The forwarding database of one bridge.
//!
//! **Structure.** Open addressing with linear probing over a power-of-two array of 24-byte
//! slots. The key is one `u64`: the MAC address in the low 48 bits and the FID (the VID, or 0 on
//! a VLAN-unaware bridge) above it. Key 0 marks an empty slot; it cannot be a real key because
//! the all-zero MAC is never learned nor accepted by `fdb add`. Deletion shifts the following
//! cluster back (no tombstones), so lookups never degrade. The table doubles when it passes
//! 5/8 load; a lookup of an absent key touches about two slots on average at that load.
//!
//! **Kinds.** `dynamic` entries are learned (or added by the user) and aged; `static` entries
//! never age but move when their MAC shows up on another port, as in Linux; `sticky` entries
//! never move; `permanent` entries are the bridge's own (local) addresses.
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
//! **Costs to know.** The table grows by doubling inside `learn`, so the frame that crosses a
//! power of two pays a rehash of the whole table once (milliseconds at a million entries; the
//! table never shrinks, so it happens about 20 times in the life of a table that fills).
//! A fair eviction scans the per-port learned counts (one u32 per port id) to find the port
//! holding most; ports are few, so this is short, but it is per eviction, not O(1).
//!
//! **Threads.** Owned by the datapath that uses it; no locks.

use qbridge_wire::MacAddr;
use serde::Serialize;
use std::collections::VecDeque;

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

/// An FDB entry as shown to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FdbEntryView {
    pub mac: MacAddr,
    /// The VID (FID); `None` on a VLAN-unaware bridge.
    pub vlan: Option<u16>,
    pub ifname: String,
    pub master: String,
    pub kind: FdbKind,
    pub sticky: bool,
    /// Added with `fdb add` rather than learned.
    pub added_by_user: bool,
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

    /// Counted against `fdb_max_learned` and a candidate for fair eviction.
    pub fn is_learned(&self) -> bool {
        self.flags == 0
    }

    pub fn ages(&self) -> bool {
        self.flags & (F_STATIC | F_PERMANENT) == 0
    }
}

/// Builds the table key from a MAC and a FID.
#[inline]
pub fn fdb_key(mac: MacAddr, fid: u16) -> u64 {
    mac.to_u64() | ((fid as u64 & 0x0fff) << 48)
}

#[inline]
pub(crate) fn key_mac(key: u64) -> MacAddr {
    MacAddr::from_u64(key & 0xffff_ffff_ffff)
}

#[inline]
pub(crate) fn key_fid(key: u64) -> u16 {
    (key >> 48) as u16 & 0x0fff
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
    /// New, after evicting the oldest learned entry of `port` (table full).
    NewEvicting {
        port: u16,
    },
}

const MIN_SLOTS: usize = 64;

/// Home slot of `key` in a power-of-two table. Fibonacci hashing: the top bits of the product
/// are well mixed.
#[inline(always)]
fn home_in(slots: &[Slot], key: u64) -> usize {
    let bits = slots.len().trailing_zeros();
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

/// Index of `key`'s slot, if present: linear probing from its home to the first empty slot.
#[inline(always)]
fn find_in(slots: &[Slot], key: u64) -> Option<usize> {
    let mask = slots.len() - 1;
    let mut i = home_in(slots, key);
    loop {
        let k = slots[i].key;
        if k == key {
            return Some(i);
        }
        if k == 0 {
            return None;
        }
        i = (i + 1) & mask;
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Fdb {
    slots: Vec<Slot>,
    len: usize,
    learned: usize,
    /// Learned entries per port id.
    port_learned: Vec<u32>,
    /// Learned keys per port id in learning order, with the stamp they were learned with.
    port_queue: Vec<VecDeque<(u64, u32)>>,
    next_stamp: u32,
    pub max_entries: usize,
}

impl Fdb {
    pub fn new(max_entries: usize) -> Fdb {
        Fdb {
            slots: vec![Slot::default(); MIN_SLOTS],
            len: 0,
            learned: 0,
            port_learned: Vec::new(),
            port_queue: Vec::new(),
            next_stamp: 1,
            max_entries,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn learned(&self) -> usize {
        self.learned
    }

    pub fn port_learned(&self, port: u16) -> u32 {
        self.port_learned.get(port as usize).copied().unwrap_or(0)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        home_in(&self.slots, key)
    }

    /// Index of `key`'s slot, if present.
    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        find_in(&self.slots, key)
    }

    /// Reads the home slot of `key` and returns its key: a load the caller issues early, for
    /// many keys at once, so that the cache misses overlap instead of stalling one by one (a
    /// software prefetch without `unsafe`).
    #[inline(always)]
    pub fn touch(&self, key: u64) -> u64 {
        self.slots[self.home(key)].key
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<&Slot> {
        self.find(key).map(|i| &self.slots[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.key != 0)
    }

    fn ensure_port(&mut self, port: u16) {
        let n = port as usize + 1;
        if self.port_learned.len() < n {
            self.port_learned.resize(n, 0);
            self.port_queue.resize_with(n, VecDeque::new);
        }
    }

    fn grow_if_needed(&mut self) {
        if (self.len + 1) * 8 <= self.slots.len() * 5 {
            return;
        }
        let doubled = vec![Slot::default(); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for s in old.into_iter().filter(|s| s.key != 0) {
            let i = self.free_slot_for(s.key);
            self.slots[i] = s;
        }
    }

    fn free_slot_for(&self, key: u64) -> usize {
        let mask = self.mask();
        let mut i = self.home(key);
        while self.slots[i].key != 0 {
            i = (i + 1) & mask;
        }
        i
    }

    /// Inserts a new key (the caller checked it is absent and that there is room).
    fn insert_new(&mut self, key: u64, port: u16, flags: u8, now_ns: u64) {
        self.grow_if_needed();
        let stamp = self.next_stamp;
        self.next_stamp = self.next_stamp.wrapping_add(1).max(1);
        let i = self.free_slot_for(key);
        self.slots[i] = Slot {
            key,
            seen_ns: now_ns,
            stamp,
            port,
            flags,
        };
        self.len += 1;
        if flags == 0 {
            self.count_learned(port, stamp, key);
        }
    }

    fn count_learned(&mut self, port: u16, stamp: u32, key: u64) {
        self.ensure_port(port);
        self.learned += 1;
        self.port_learned[port as usize] += 1;
        let q = &mut self.port_queue[port as usize];
        q.push_back((key, stamp));
        // Drop stale queue entries now and then so the queue stays O(live entries).
        if q.len() > 2 * self.port_learned[port as usize] as usize + 64 {
            let slots = &self.slots;
            q.retain(|&(k, st)| {
                find_in(slots, k).is_some_and(|i| {
                    slots[i].stamp == st && slots[i].port == port && slots[i].flags == 0
                })
            });
        }
    }

    fn uncount_learned(&mut self, port: u16) {
        self.learned -= 1;
        self.port_learned[port as usize] -= 1;
    }

    /// Removes the entry in slot `i`, shifting its cluster back.
    pub fn remove_at(&mut self, mut i: usize) -> Slot {
        let removed = self.slots[i];
        if removed.is_learned() {
            self.uncount_learned(removed.port);
        }
        self.len -= 1;
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].key;
            if k == 0 {
                break;
            }
            let h = self.home(k);
            // Move j back to i if its home is not in the cyclic range (i, j].
            let in_range = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !in_range {
                self.slots[i] = self.slots[j];
                i = j;
            }
        }
        self.slots[i] = Slot::default();
        removed
    }

    pub fn remove(&mut self, key: u64) -> Option<Slot> {
        self.find(key).map(|i| self.remove_at(i))
    }

    /// Learns `key` on `port` at `now_ns`.
    #[inline]
    pub fn learn(
        &mut self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
    ) -> Learned {
        if let Some(i) = self.find(key) {
            let s = &mut self.slots[i];
            if s.flags & F_PERMANENT != 0 {
                return Learned::Kept;
            }
            if s.port == port {
                // Refresh; skip the store when nothing changed (same batch, same clock).
                if s.seen_ns != now_ns {
                    s.seen_ns = now_ns;
                }
                return Learned::Kept;
            }
            s.seen_ns = now_ns;
            if s.flags & F_STICKY != 0 {
                return Learned::Kept;
            }
            let from = s.port;
            s.port = port;
            if s.flags == 0 {
                // A fresh stamp: on its new port the entry is the youngest, whatever its age on
                // a port it was learned on before (its old queue place there is now stale).
                let stamp = self.next_stamp;
                self.next_stamp = self.next_stamp.wrapping_add(1).max(1);
                self.slots[i].stamp = stamp;
                self.uncount_learned(from);
                self.count_learned(port, stamp, key);
            }
            return Learned::Moved;
        }
        self.learn_new(key, port, now_ns, bridge_limit, port_limit)
    }

    #[cold]
    fn learn_new(
        &mut self,
        key: u64,
        port: u16,
        now_ns: u64,
        bridge_limit: u32,
        port_limit: u32,
    ) -> Learned {
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
        self.insert_new(key, port, 0, now_ns);
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
            if let Some(i) = self.find(key) {
                let s = self.slots[i];
                if s.stamp == stamp && s.port == victim && s.is_learned() {
                    self.remove_at(i);
                    return Some(victim);
                }
            }
        }
        None
    }

    /// Adds or replaces a user entry. `replace == false` refuses an existing key. Returns the
    /// port whose oldest learned entry was evicted to make room, if one was.
    pub fn add_user(
        &mut self,
        key: u64,
        port: u16,
        flags: u8,
        now_ns: u64,
        replace: bool,
    ) -> Result<Option<u16>, AddError> {
        let flags = flags | F_USER;
        if let Some(i) = self.find(key) {
            if !replace {
                return Err(AddError::Exists(self.slots[i].port));
            }
            let old = self.slots[i];
            if old.is_learned() {
                self.uncount_learned(old.port);
            }
            self.slots[i] = Slot {
                key,
                seen_ns: now_ns,
                stamp: old.stamp,
                port,
                flags,
            };
            return Ok(None);
        }
        let mut victim = None;
        if self.len >= self.max_entries {
            victim = Some(self.evict_fair().ok_or(AddError::Full)?);
        }
        self.insert_new(key, port, flags, now_ns);
        Ok(victim)
    }

    /// Removes every entry `pred` selects; returns how many.
    pub fn remove_where(&mut self, mut pred: impl FnMut(&Slot) -> bool) -> usize {
        let keys: Vec<u64> = self.iter().filter(|s| pred(s)).map(|s| s.key).collect();
        for k in &keys {
            self.remove(*k);
        }
        keys.len()
    }

    /// Removes dynamic entries idle for `ageing_ns` or more at `now_ns` (Linux: expired when
    /// `updated + ageing_time <= now`). With `ageing_ns == 0` every dynamic entry is expired.
    pub fn age(&mut self, now_ns: u64, ageing_ns: u64) -> usize {
        self.remove_where(|s| s.ages() && now_ns.saturating_sub(s.seen_ns) >= ageing_ns)
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

    #[test]
    fn learn_move_sticky_static() {
        let mut f = Fdb::new(1000);
        assert_eq!(f.learn(k(1), 1, 10, 0, 0), Learned::New);
        assert_eq!(f.learn(k(1), 1, 20, 0, 0), Learned::Kept);
        assert_eq!(f.get(k(1)).unwrap().seen_ns, 20);
        assert_eq!(f.learn(k(1), 2, 30, 0, 0), Learned::Moved);
        assert_eq!(
            (f.port_learned(1), f.port_learned(2), f.learned()),
            (0, 1, 1)
        );
        f.add_user(k(2), 3, F_STICKY | F_STATIC, 0, false).unwrap();
        assert_eq!(f.learn(k(2), 4, 1, 0, 0), Learned::Kept);
        assert_eq!(f.get(k(2)).unwrap().port, 3);
        f.add_user(k(3), 3, F_STATIC, 0, false).unwrap();
        assert_eq!(f.learn(k(3), 4, 1, 0, 0), Learned::Moved);
        assert_eq!(f.get(k(3)).unwrap().kind(), FdbKind::Static);
        assert_eq!(
            f.add_user(k(3), 3, F_STATIC, 0, false),
            Err(AddError::Exists(4))
        );
        assert_eq!(f.learned(), 1);
    }

    #[test]
    fn limits_refuse() {
        let mut f = Fdb::new(1000);
        assert_eq!(f.learn(k(1), 1, 0, 2, 0), Learned::New);
        assert_eq!(f.learn(k(2), 2, 0, 2, 0), Learned::New);
        assert_eq!(f.learn(k(3), 2, 0, 2, 0), Learned::Refused);
        assert_eq!(f.learn(k(3), 1, 0, 0, 1), Learned::Refused);
        assert_eq!(f.learn(k(3), 3, 0, 0, 1), Learned::New);
    }

    #[test]
    fn fair_eviction_takes_oldest_of_largest_port() {
        let mut f = Fdb::new(6);
        f.learn(k(100), 1, 0, 0, 0);
        for n in 0..5 {
            f.learn(k(n), 2, n, 0, 0);
        }
        assert_eq!(f.learn(k(50), 3, 9, 0, 0), Learned::NewEvicting { port: 2 });
        assert!(f.get(k(0)).is_none());
        assert!(f.get(k(100)).is_some() && f.get(k(1)).is_some());
        assert_eq!(f.len(), 6);
    }

    #[test]
    fn delete_keeps_all_other_keys_reachable() {
        let mut f = Fdb::new(1 << 20);
        for n in 0..5000 {
            f.learn(k(n), (n % 7) as u16, n, 0, 0);
        }
        for n in (0..5000).step_by(3) {
            assert!(f.remove(k(n)).is_some());
        }
        for n in 0..5000 {
            assert_eq!(f.get(k(n)).is_some(), n % 3 != 0, "key {n}");
        }
        assert_eq!(f.age(10_000, 4000), 3333);
        f.learn(k(1), 1, 100, 0, 0);
        assert_eq!(f.age(199, 100), 0, "idle 99 < 100 kept");
        assert_eq!(
            f.age(200, 100),
            1,
            "idle exactly ageing_time expires (Linux)"
        );
        f.learn(k(2), 1, 5, 0, 0);
        assert_eq!(
            f.age(5, 0),
            1,
            "ageing_time 0: every dynamic entry is expired"
        );
        assert_eq!((f.len(), f.learned()), (0, 0));
    }
}
