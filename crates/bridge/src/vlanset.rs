//! A dense set of VIDs: 4096 bits, O(1) membership whatever the number of VLANs.

/// 4096-bit VID set (512 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct VlanSet {
    words: [u64; 64],
}

const _: () = assert!(core::mem::size_of::<VlanSet>() == 512);

impl Default for VlanSet {
    fn default() -> Self {
        VlanSet { words: [0; 64] }
    }
}

impl core::fmt::Debug for VlanSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl VlanSet {
    #[inline]
    pub fn contains(&self, vid: u16) -> bool {
        let v = (vid & 0x0fff) as usize;
        self.words[v >> 6] & (1u64 << (v & 63)) != 0
    }

    #[inline]
    pub fn insert(&mut self, vid: u16) {
        let v = (vid & 0x0fff) as usize;
        self.words[v >> 6] |= 1u64 << (v & 63);
    }

    #[inline]
    pub fn remove(&mut self, vid: u16) {
        let v = (vid & 0x0fff) as usize;
        self.words[v >> 6] &= !(1u64 << (v & 63));
    }

    /// Keeps only the VIDs that are also in `other` (intersection).
    pub fn retain(&mut self, other: &VlanSet) {
        for (w, o) in self.words.iter_mut().zip(other.words.iter()) {
            *w &= *o;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// VIDs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            core::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some((i as u32 * 64 + b) as u16)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ops() {
        let mut s = VlanSet::default();
        for v in [1, 63, 64, 4094, 4095] {
            s.insert(v);
        }
        assert!(s.contains(64) && !s.contains(65));
        s.remove(63);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 64, 4094, 4095]);
        assert_eq!(s.len(), 4);
    }
}
