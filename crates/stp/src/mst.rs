//! MST region identity (802.1Q-2022 13.8): the VID to MSTID table, the HMAC-MD5
//! configuration digest over it, the MST Configuration Identifier, and the "same region"
//! test a received BPDU is put to.
//!
//! MD5 (RFC 1321) and HMAC (RFC 2104) are written out here: 60 lines, no dependency, run
//! only when the table changes. The table is 4096 entries of u16 (8 KiB) per bridge.

use crate::bpdu::{Bpdu, MstConfigId};
use crate::types::TreeId;

/// The fixed HMAC key of 802.1Q table 13-1.
pub const DIGEST_KEY: [u8; 16] = [
    0x13, 0xac, 0x06, 0xa6, 0x2e, 0x47, 0xfd, 0x51, 0xf9, 0x5d, 0x2b, 0xa2, 0x43, 0xcd, 0x03, 0x46,
];

/// Errors in region configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// name longer than 32 bytes
    #[error("region name is {0} bytes, at most 32")]
    NameTooLong(usize),
    /// VID outside 1..=4094
    #[error("vid {0} is not in 1..4094")]
    BadVid(u16),
    /// MSTID outside 0..=4094
    #[error("mstid {0} is not in 0..4094")]
    BadMstid(u16),
}

/// A region: name, revision, and the VID to MSTID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    name: [u8; 32],
    revision: u16,
    table: Vec<u16>,
}

impl Default for Region {
    fn default() -> Self {
        Region {
            name: [0; 32],
            revision: 0,
            table: vec![0; 4096],
        }
    }
}

impl Region {
    /// A region named `name` (at most 32 bytes), everything on the CIST.
    pub fn new(name: &str, revision: u16) -> Result<Self, RegionError> {
        let mut r = Region::default();
        r.set_name(name)?;
        r.revision = revision;
        Ok(r)
    }
    /// Rename.
    pub fn set_name(&mut self, name: &str) -> Result<(), RegionError> {
        if name.len() > 32 {
            return Err(RegionError::NameTooLong(name.len()));
        }
        self.name = [0; 32];
        self.name[..name.len()].copy_from_slice(name.as_bytes());
        Ok(())
    }
    /// Set the revision level.
    pub fn set_revision(&mut self, revision: u16) {
        self.revision = revision;
    }
    /// Map `vid` to `mstid` (0 = CIST).
    pub fn map(&mut self, vid: u16, mstid: u16) -> Result<(), RegionError> {
        if !(1..=4094).contains(&vid) {
            return Err(RegionError::BadVid(vid));
        }
        if mstid > 4094 {
            return Err(RegionError::BadMstid(mstid));
        }
        self.table[usize::from(vid)] = mstid;
        Ok(())
    }
    /// The tree a VID belongs to.
    pub fn tree_of(&self, vid: u16) -> TreeId {
        TreeId(self.table.get(usize::from(vid)).copied().unwrap_or(0))
    }
    /// The MSTIs that have at least one VID, ascending.
    pub fn mstis(&self) -> Vec<TreeId> {
        let mut v: Vec<u16> = self.table.iter().copied().filter(|m| *m != 0).collect();
        v.sort_unstable();
        v.dedup();
        v.into_iter().map(TreeId).collect()
    }
    /// The configuration digest (13.8): HMAC-MD5 with [`DIGEST_KEY`] over the 4096
    /// big-endian MSTIDs of VIDs 0..=4095.
    pub fn digest(&self) -> [u8; 16] {
        digest_of_table(&self.table)
    }
    /// The MST Configuration Identifier this bridge sends.
    pub fn config_id(&self) -> MstConfigId {
        MstConfigId {
            format_selector: 0,
            name: self.name,
            revision: self.revision,
            digest: self.digest(),
        }
    }
}

/// The configuration digest of a VID to MSTID table (missing entries count as 0).
pub fn digest_of_table(table: &[u16]) -> [u8; 16] {
    let mut data = Vec::with_capacity(8192);
    for vid in 0..4096 {
        data.extend_from_slice(&table.get(vid).copied().unwrap_or(0).to_be_bytes());
    }
    hmac_md5(&DIGEST_KEY, &data)
}

/// Whether a received BPDU comes from the same region as `ours` (13.26.5 fromSameRegion):
/// an MST BPDU whose configuration identifier matches ours exactly.
pub fn from_same_region(bpdu: &Bpdu, ours: &MstConfigId) -> bool {
    matches!(bpdu, Bpdu::Mst(_, m) if m.config_id == *ours)
}

/// HMAC-MD5 (RFC 2104).
pub fn hmac_md5(key: &[u8], data: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..16].copy_from_slice(&md5(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(data);
    let mut outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&md5(&inner));
    md5(&outer)
}

const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// MD5 (RFC 1321).
pub fn md5(msg: &[u8]) -> [u8; 16] {
    let k: Vec<u32> = (0..64)
        .map(|i: i32| ((f64::from(i) + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut h: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut m = msg.to_vec();
    let bit_len = (msg.len() as u64).wrapping_mul(8);
    m.push(0x80);
    while m.len() % 64 != 56 {
        m.push(0);
    }
    m.extend_from_slice(&bit_len.to_le_bytes());
    for chunk in m.chunks_exact(64) {
        let w: Vec<u32> = chunk
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let t = d;
            d = c;
            c = b;
            b = b.wrapping_add(
                a.wrapping_add(f)
                    .wrapping_add(k[i])
                    .wrapping_add(w[g])
                    .rotate_left(S[i]),
            );
            a = t;
        }
        h = [
            h[0].wrapping_add(a),
            h[1].wrapping_add(b),
            h[2].wrapping_add(c),
            h[3].wrapping_add(d),
        ];
    }
    let mut out = [0u8; 16];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}
