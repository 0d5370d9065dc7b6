//! Frame builders shared by the bridge's integration tests.
#![allow(dead_code)]

use qbridge_wire::MacAddr;

pub fn mac(n: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, n])
}

/// An Ethernet frame: dst, src, tags (tpid, tci), ethertype 0x0800, payload padded to `len`.
pub fn frame(dst: MacAddr, src: MacAddr, tags: &[(u16, u16)], len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let mut i = 0u8;
    while f.len() < len {
        f.push(i);
        i = i.wrapping_add(1);
    }
    f
}
