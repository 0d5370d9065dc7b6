//! GRO allocates nothing per frame after warm-up, in a receive-coalesce-transmit loop that
//! recycles its buffers through one pool, as a port loop does. Without `unsafe` (it stays in
//! `crates/io`) there is no counting allocator here, so the test watches what an allocation
//! would change: a buffer that grows moves (its frame pointer is new), and the batch's vector
//! (swapped with `Gro`'s scratch every call) keeps its capacity.

use qbridge_offload::{segment, Gro, GroLimits};
use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM};
use qbridge_wire::Tpid;
use std::collections::HashSet;

/// 32 segments of 1448 bytes each of two flows (tags 0x88a8/0x8100, IPv4), interleaved.
fn segments() -> Vec<Vec<u8>> {
    let mut flows = Vec::new();
    for id in [1u8, 2] {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend([0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10, 0x08, 0x00]);
        let payload = 32 * 1448;
        f.extend([
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, id, 10, 0, 0, 9,
        ]);
        let total = (20 + 20 + payload) as u16;
        f[24..26].copy_from_slice(&total.to_be_bytes());
        f.extend([
            0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 1, 0, 0, 0, 0, 0,
        ]);
        f.extend((0..payload).map(|i| i as u8));
        let mut p = PacketBuf::from_frame(&f);
        p.offload = OffloadMeta {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4.raw(),
            hdr_len: 62,
            gso_size: 1448,
            csum_start: 42,
            csum_offset: 16,
        };
        let mut segs = Vec::new();
        segment(&p, Tpid::is_well_known, &mut BufPool::new(64), &mut segs).unwrap();
        flows.push(segs);
    }
    let mut out = Vec::new();
    for i in 0..32 {
        for f in &flows {
            let mut frame = f[i].frame().to_vec();
            frame.shrink_to_fit();
            out.push(frame);
        }
    }
    out
}

#[test]
fn no_allocation_after_warm_up() {
    let segs = segments();
    let mut gro = Gro::new();
    let mut pool = BufPool::new(256);
    let mut batch = Batch::with_capacity(64);
    // Warm-up of the buffers: each has held a 64 KB super-frame once, as on a port that has
    // carried them. (A buffer heading its first run grows by doubling; gro.rs says so.)
    let mut seen: HashSet<*const u8> = HashSet::new();
    let big = vec![0u8; 66_000];
    for _ in 0..segs.len() {
        let mut p = PacketBuf::new();
        p.set_frame(&big);
        seen.insert(p.frame().as_ptr());
        pool.put(p);
    }
    let mut capacity = 0;
    let mut bufs: Vec<PacketBuf> = Vec::new();
    for round in 0..64 {
        // Rotate which buffer gets which frame, so that heads change from round to round.
        bufs.extend((0..segs.len()).map(|_| pool.get()));
        bufs.rotate_left(round % segs.len());
        for (s, mut p) in segs.iter().zip(bufs.drain(..)) {
            p.set_frame(s);
            batch.push(p); // flags 0: every merged segment's checksum is summed
        }
        let st = gro.coalesce(
            &mut batch,
            &mut pool,
            Tpid::is_well_known,
            GroLimits::default(),
        );
        assert_eq!((st.super_frames, batch.len()), (2, 2));
        // Gro's scratch vector is swapped with the batch's: both reach 64 in the first call.
        if round >= 1 {
            assert_eq!(batch.pkts.capacity(), capacity, "round {round}");
        }
        capacity = batch.pkts.capacity();
        for p in batch.drain() {
            assert!(
                !seen.insert(p.frame().as_ptr()),
                "round {round}: a buffer moved (grew)"
            );
            pool.put(p);
        }
    }
    assert_eq!(pool.available(), segs.len());
}
