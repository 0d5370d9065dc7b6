//! Receive: walking the ring (V3 blocks, V2 slots), taking each frame out of it into a pool
//! buffer (frames longer than a V2 slot from the socket queue, one `recv` each), dropping
//! what the port must not see (its own sends, unicast for other hosts its filter does not
//! accept; each counted), and putting back the outer VLAN tag the kernel moved into the
//! frame header. Reads of the ring go through [`RxRing`](super::ring::RxRing)'s checked
//! accessors; the `unsafe` here is the few raw reads of a frame inside a block the kernel
//! has handed over.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::RwLockReadGuard;

use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf, HEADROOM};

use super::ring::field;
use super::vnet::vnet_to_meta;
use super::{AfPacketPort, RingVersion, RxMode, VNET_HDR_LEN};
use crate::rxfilter::{mac_key, RxFilterHandle};
use crate::sys;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const TP_STATUS_COPY: u32 = 1 << 1;
const PACKET_OTHERHOST: u8 = 3;
const PACKET_OUTGOING: u8 = 4;
const TPID_8021Q: u16 = 0x8100;
/// Largest frame the socket queue can hand over: virtio-net header, 64 KB IP packet,
/// Ethernet header and tags.
pub(super) const COPY_BUF_BYTES: usize = VNET_HDR_LEN + 65_535 + 14 + 4 * 8;

/// [`PacketBuf::port`] of an upcalled frame that came without its port (not from the fast
/// path's program: counted and dropped by the caller).
pub const UPCALL_NO_PORT: u16 = u16::MAX;

/// V2: reads the frame of `wire_len` bytes (after a `vnet_len`-byte virtio-net header) waiting
/// in the socket queue of `fd` straight into `buf` after [`HEADROOM`] bytes, and makes it a
/// pool buffer by exchanging vectors ([`PacketBuf::swap_in_frame`]): the kernel's copy is the
/// only one (a 64 KB super-frame was copied a second time from a scratch buffer before).
/// `buf` keeps the pool buffer's old vector for the next frame. `None` when the queue did not
/// hold a frame of that length.
fn recv_queued(
    fd: RawFd,
    buf: &mut Vec<u8>,
    vnet_len: usize,
    wire_len: usize,
    pool: &mut BufPool,
) -> Option<PacketBuf> {
    // The virtio-net header lands in the headroom, right before the frame.
    let at = HEADROOM - vnet_len;
    // One byte more than expected, so that a longer frame shows as one.
    let want = vnet_len + wire_len + 1;
    // SAFETY: `recv` writes at most `len` bytes at `ptr` and returns the count (or -1).
    let n = unsafe {
        sys::read_at(buf, at, want, |ptr, len| {
            libc::recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT)
        })
    };
    if n < 0 || (n as usize) < vnet_len || n as usize - vnet_len != wire_len {
        return None;
    }
    let offload = if vnet_len != 0 {
        vnet_to_meta(&buf[at..HEADROOM])
    } else {
        OffloadMeta::default()
    };
    let mut p = pool.take();
    if !p.swap_in_frame(buf) {
        return None;
    }
    p.offload = offload;
    Some(p)
}

/// Per burst: how frames for other hosts (`PACKET_OTHERHOST`) are judged.
pub(super) enum Otherhost<'a> {
    /// Promiscuous: take them all.
    TakeAll,
    /// The port's own [`AfPacketConfig::unicast`] (no shared filter).
    Config,
    /// The shared filter's set, read-locked at the first such frame of the burst.
    Shared {
        handle: &'a RxFilterHandle,
        set: Option<RwLockReadGuard<'a, HashSet<u64>>>,
    },
}

impl<'a> Otherhost<'a> {
    pub(super) fn for_burst(promisc: bool, filter: Option<&'a RxFilterHandle>) -> Otherhost<'a> {
        match filter {
            Some(h) if h.promisc() => Otherhost::TakeAll,
            Some(h) => Otherhost::Shared {
                handle: h,
                set: None,
            },
            None if promisc => Otherhost::TakeAll,
            None => Otherhost::Config,
        }
    }

    pub(super) fn accepts(&mut self, dst: Option<[u8; 6]>, config: &[[u8; 6]]) -> bool {
        let Some(dst) = dst else { return false };
        match self {
            Otherhost::TakeAll => true,
            Otherhost::Config => config.contains(&dst),
            Otherhost::Shared { handle, set } => set
                .get_or_insert_with(|| handle.read_set())
                .contains(&mac_key(dst)),
        }
    }
}

impl AfPacketPort {
    /// Returns the current block to the kernel and moves to the next.
    fn release_block(&mut self) {
        self.ring
            .block_status(self.ring.block)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.ring.block = (self.ring.block + 1) % self.ring.block_count;
        self.ring.reading = false;
        self.ring.pkts_left = 0;
    }

    /// Copies the frame whose `tpacket3_hdr` starts at `pkt` (inside the current block) into
    /// a pooled buffer; `None` when the frame is skipped (counted).
    fn take_frame(
        &mut self,
        pkt: *const u8,
        room: usize,
        pool: &mut BufPool,
        otherhost: &mut Otherhost<'_>,
    ) -> Option<PacketBuf> {
        let r = &self.ring;
        // Offsets are ABI offsets within the packet header, which the kernel places inside the
        // block; `room` bounds the frame. (Pointer arithmetic only; reads are checked below.)
        let at = |off: usize| pkt.wrapping_add(off);
        if room < r.layout.hdr_min {
            self.stats.rx_truncated += 1;
            return None;
        }
        // SAFETY: see `at`; one byte inside the header.
        let pkttype = unsafe { *at(r.layout.pkttype) };
        if pkttype == PACKET_OUTGOING {
            self.stats.rx_outgoing_skipped += 1;
            return None;
        }
        if pkttype == PACKET_OTHERHOST && !matches!(otherhost, Otherhost::TakeAll) {
            // SAFETY: the header is in the block; the destination MAC is the frame's first 6
            // bytes, inside the frame when the kernel's snap length covers them.
            let dst = unsafe {
                let mac = r.read_u16(at(r.layout.mac)) as usize;
                let snap = r.read_u32(at(r.layout.snaplen)) as usize;
                (snap >= 6 && mac + 6 <= room)
                    .then(|| std::ptr::read_unaligned(at(mac) as *const [u8; 6]))
            };
            if !otherhost.accepts(dst, &self.cfg.unicast) {
                self.stats.rx_otherhost_filtered += 1;
                return None;
            }
        }
        let snaplen = r.read_u32(at(r.layout.snaplen)) as usize;
        let wire_len = r.read_u32(at(r.layout.len)) as usize;
        let status = r.read_u32(at(r.layout.status));
        let mac = r.read_u16(at(r.layout.mac)) as usize;
        let vnet_len = if self.cfg.vnet_hdr { VNET_HDR_LEN } else { 0 };
        let copied = r.version == RingVersion::V2 && status & TP_STATUS_COPY != 0;
        let mut p = if copied {
            // The slot holds the head of a frame longer than a slot; the whole frame (the
            // outer tag still in the slot's header) is next in the socket queue, which holds
            // nothing else: one skb per TP_STATUS_COPY slot, in ring order.
            let Some(p) = recv_queued(
                self.fd.as_raw_fd(),
                &mut self.copy_buf,
                vnet_len,
                wire_len,
                pool,
            ) else {
                self.stats.rx_truncated += 1;
                return None;
            };
            self.stats.rx_copied += 1;
            p
        } else {
            if snaplen < wire_len && r.version == RingVersion::V2 && mac + snaplen <= room {
                // Longer than a slot, and the kernel did not queue it whole (no
                // TP_STATUS_COPY): the socket's receive queue was full. The kernel dropped the
                // frame because this port did not keep up, as when the ring is full.
                self.stats.rx_copy_queue_full += 1;
                return None;
            }
            if snaplen < wire_len || mac < vnet_len || mac + snaplen > room {
                self.stats.rx_truncated += 1;
                return None;
            }
            // SAFETY: `mac - vnet_len .. mac + snaplen` lies inside the block (checked against
            // `room` above) and the kernel does not write a block while it is TP_STATUS_USER.
            let (vnet, data) = unsafe {
                (
                    std::slice::from_raw_parts(at(mac - vnet_len), vnet_len),
                    std::slice::from_raw_parts(at(mac), snaplen),
                )
            };
            let mut p = pool.take();
            // The copy first: `set_frame` resets the metadata.
            p.set_frame(data);
            if vnet_len != 0 {
                p.offload = vnet_to_meta(vnet);
            }
            p
        };
        p.time_ns = u64::from(r.read_u32(at(r.layout.sec))) * 1_000_000_000
            + u64::from(r.read_u32(at(r.layout.nsec)));
        if self.cfg.rx == RxMode::Upcall {
            // The accelerated tag is the ingress port (the fast path's upcall); the frame's
            // own tags are inline.
            p.port = if status & TP_STATUS_VLAN_VALID != 0 {
                r.read_tci(at(r.layout.vlan_tci))
            } else {
                UPCALL_NO_PORT
            };
        } else if status & TP_STATUS_VLAN_VALID != 0 && p.len() >= 12 {
            let tci = r.read_tci(at(r.layout.vlan_tci));
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                r.read_u16(at(r.layout.vlan_tpid))
            } else {
                TPID_8021Q
            };
            // One copy out of the ring, then the tag goes back into the headroom: the 12
            // address bytes move, the frame body does not (no zero-fill either).
            let [t0, t1] = tpid.to_be_bytes();
            let [c0, c1] = tci.to_be_bytes();
            p.insert_tag(12, [t0, t1, c0, c1]);
            p.offload.shift_headers(4);
            self.stats.rx_vlan_restored += 1;
        }
        Some(p)
    }

    /// Walks V3 blocks: frames of a block the kernel handed over, the block returned once read.
    pub(super) fn rx_v3(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
        otherhost: &mut Otherhost<'_>,
    ) -> usize {
        let mut n = 0;
        while n < max {
            if !self.ring.reading {
                let status = self
                    .ring
                    .block_status(self.ring.block)
                    .load(Ordering::Acquire);
                if status & TP_STATUS_USER == 0 {
                    break;
                }
                let b = self.ring.block_ptr(self.ring.block);
                // SAFETY: header fields at fixed offsets of a block we now own.
                let (num, first) = unsafe {
                    (
                        self.ring.read_u32(b.add(field::BLK_NUM_PKTS)),
                        self.ring.read_u32(b.add(field::BLK_FIRST_PKT)) as usize,
                    )
                };
                self.ring.reading = true;
                self.ring.pkts_left = num;
                self.ring.pkt_off = first;
                if num == 0 || first >= self.ring.block_bytes {
                    self.release_block();
                    continue;
                }
            }
            let off = self.ring.pkt_off;
            let room = self.ring.block_bytes - off;
            // SAFETY: `off < block_bytes`, checked when it was set.
            let pkt = unsafe { self.ring.block_ptr(self.ring.block).add(off) };
            let next = if room >= 4 {
                self.ring.read_u32(pkt.wrapping_add(field::V3_NEXT)) as usize
            } else {
                0
            };
            if let Some(p) = self.take_frame(pkt, room, pool, otherhost) {
                batch.push(p);
                n += 1;
            }
            self.ring.pkts_left -= 1;
            if self.ring.pkts_left == 0 || next == 0 || off + next >= self.ring.block_bytes {
                self.release_block();
            } else {
                self.ring.pkt_off = off + next;
            }
        }
        n
    }

    /// Walks V2 slots: each slot is handed over, read and returned on its own.
    pub(super) fn rx_v2(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
        otherhost: &mut Otherhost<'_>,
    ) -> usize {
        let mut n = 0;
        while n < max {
            let pkt = self.ring.slot_ptr(self.ring.slot);
            let status_at = pkt.wrapping_add(field::V2_STATUS);
            if self.ring.status_word(status_at).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            if let Some(p) = self.take_frame(pkt, self.ring.slot_bytes, pool, otherhost) {
                batch.push(p);
                n += 1;
            }
            self.ring
                .status_word(status_at)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.ring.slot = (self.ring.slot + 1) % self.ring.slot_count;
        }
        n
    }
}
