//! The transmit selection table: 256 buckets, each naming one member, read by
//! [`TxTable::member_for`]`(hash)` (bucket = low 8 bits of the flow hash).
//!
//! Invariants: with a non-empty member set every bucket names a member of the set, and bucket
//! counts per member differ by at most one. [`TxTable::set_members`] keeps that with minimal
//! disruption: a bucket whose member stays keeps it unless its member holds more than its fair
//! share; the buckets of a member that left go to the members with the fewest buckets. So a
//! failure moves only the failed member's buckets, and a member joining takes buckets only
//! from members above their new share. Cost: O(256 × members) per change, nothing per frame
//! (one array read). The table is a plain value: the integration copies it into each worker's
//! plan.

use crate::MemberId;

/// Buckets in the table.
pub const BUCKETS: usize = 256;

/// Hash bucket → member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxTable {
    buckets: [Option<MemberId>; BUCKETS],
    members: Vec<MemberId>,
    generation: u64,
}

impl Default for TxTable {
    fn default() -> Self {
        TxTable {
            buckets: [None; BUCKETS],
            members: Vec::new(),
            generation: 0,
        }
    }
}

impl TxTable {
    /// The member that carries frames with flow hash `hash`, or `None` when no member
    /// distributes (the bond is down for transmission).
    pub fn member_for(&self, hash: u32) -> Option<MemberId> {
        self.buckets[(hash & 0xff) as usize]
    }

    /// The distributing members, in ascending order.
    pub fn members(&self) -> &[MemberId] {
        &self.members
    }

    /// Moves by one each time the member set changes: the integration republishes the table
    /// to the workers when it differs from the one they hold.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The member of each bucket.
    pub fn buckets(&self) -> &[Option<MemberId>; BUCKETS] {
        &self.buckets
    }

    /// Makes `members` (any order, duplicates ignored) the distributing set. Returns how many
    /// buckets changed member.
    pub fn set_members(&mut self, members: &[MemberId]) -> usize {
        let mut set: Vec<MemberId> = members.to_vec();
        set.sort_unstable();
        set.dedup();
        if set == self.members {
            return 0;
        }
        let before = self.buckets;
        self.members = set;
        self.generation = self.generation.wrapping_add(1);
        if self.members.is_empty() {
            self.buckets = [None; BUCKETS];
            return before.iter().filter(|b| b.is_some()).count();
        }
        let n = self.members.len();
        // Fair shares: the first `BUCKETS % n` members (in order) may hold one more.
        let share = |i: usize| BUCKETS / n + usize::from(i < BUCKETS % n);
        let mut held = vec![0usize; n];
        let index = |m: Option<MemberId>, members: &[MemberId]| {
            m.and_then(|m| members.binary_search(&m).ok())
        };
        // Keep buckets of staying members up to their share; free the rest.
        for b in self.buckets.iter_mut() {
            match index(*b, &self.members) {
                Some(i) if held[i] < share(i) => held[i] += 1,
                _ => *b = None,
            }
        }
        // Hand the free buckets to the members furthest below their share.
        for b in self.buckets.iter_mut().filter(|b| b.is_none()) {
            let i = (0..n).max_by_key(|&i| (share(i) as isize - held[i] as isize, usize::MAX - i));
            if let Some(i) = i {
                held[i] += 1;
                *b = Some(self.members[i]);
            }
        }
        before
            .iter()
            .zip(self.buckets.iter())
            .filter(|(a, b)| a != b)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(t: &TxTable) -> Vec<usize> {
        t.members()
            .iter()
            .map(|m| t.buckets().iter().filter(|b| **b == Some(*m)).count())
            .collect()
    }

    #[test]
    fn balanced_and_minimal() {
        let mut t = TxTable::default();
        assert_eq!(t.member_for(7), None);
        t.set_members(&[MemberId(1), MemberId(2), MemberId(3)]);
        assert_eq!(counts(&t), vec![86, 85, 85]);
        let before = t.clone();
        let moved = t.set_members(&[MemberId(1), MemberId(3)]);
        assert_eq!(moved, 85);
        for (a, b) in before.buckets().iter().zip(t.buckets()) {
            if *a != Some(MemberId(2)) {
                assert_eq!(a, b, "a surviving member's bucket moved");
            }
        }
        assert_eq!(counts(&t), vec![128, 128]);
        let moved = t.set_members(&[MemberId(1), MemberId(2), MemberId(3)]);
        assert_eq!(moved, 85);
        assert_eq!(counts(&t), vec![86, 85, 85]);
        assert_eq!(t.generation(), 3);
        assert_eq!(t.set_members(&[MemberId(3), MemberId(1), MemberId(2)]), 0);
        assert_eq!(t.generation(), 3, "same set, same table");
        assert_eq!(t.set_members(&[]), 256);
    }
}
