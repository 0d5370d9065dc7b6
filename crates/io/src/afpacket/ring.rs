//! The receive ring of an AF_PACKET socket: its setup (`PACKET_VERSION`, `PACKET_RX_RING`,
//! the V2 copy queue, `mmap`), the ABI layouts of its block and frame headers, and
//! [`RxRing`], the mapping with bounds-checked reads of what the kernel writes into it and
//! the status words shared with the kernel. Owns the ring's `unsafe` (pointer arithmetic
//! inside the mapping, the unmap); every read of kernel-written offsets is checked against
//! the mapping first.
#![allow(unsafe_code)]

use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use super::config::{AfPacketConfig, RingVersion};
use crate::sys;
use crate::IoError;

const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const PACKET_COPY_THRESH: libc::c_int = 7;

/// Receive buffer asked for (`SO_RCVBUFFORCE`, else `SO_RCVBUF` up to `rmem_max`) so frames
/// longer than a V2 slot can wait in the socket queue: about 480 64 KB super-frames, what the
/// ring of 64.5 KiB slots held before (memory is taken only while frames wait). With 4 MiB
/// (60 super-frames) 16 TCP streams through one port overflowed it (measured: 53 566
/// retransmits in 3 s, `scripts/bench-live.sh`, qb-plain).
const COPY_QUEUE_BYTES: libc::c_int = 32 << 20;

/// Byte offsets in the ring's structures (`struct tpacket_block_desc`, `struct tpacket3_hdr`,
/// `struct tpacket2_hdr`, `struct sockaddr_ll`), which the kernel fixes by ABI.
pub(super) mod field {
    pub const BLK_STATUS: usize = 8;
    pub const BLK_NUM_PKTS: usize = 12;
    pub const BLK_FIRST_PKT: usize = 16;
    /// `tp_next_offset` of a `tpacket3_hdr`.
    pub const V3_NEXT: usize = 0;
    /// `tp_status` of a `tpacket2_hdr`: the per-frame ownership word of a V2 ring.
    pub const V2_STATUS: usize = 0;
}

/// Where a ring version keeps each per-frame field (offsets from the frame header).
#[derive(Clone, Copy, Debug)]
pub(super) struct PktLayout {
    pub(super) sec: usize,
    pub(super) nsec: usize,
    pub(super) snaplen: usize,
    pub(super) len: usize,
    pub(super) status: usize,
    pub(super) mac: usize,
    pub(super) vlan_tci: usize,
    pub(super) vlan_tpid: usize,
    /// `sll_pkttype`: the `sockaddr_ll` follows the TPACKET_ALIGN'ed header, +10.
    pub(super) pkttype: usize,
    /// Smallest header the kernel writes before a frame (header + sockaddr_ll).
    pub(super) hdr_min: usize,
}

const V3_LAYOUT: PktLayout = PktLayout {
    sec: 4,
    nsec: 8,
    snaplen: 12,
    len: 16,
    status: 20,
    mac: 24,
    vlan_tci: 32,
    vlan_tpid: 36,
    pkttype: 48 + 10,
    hdr_min: 48 + 20,
};

const V2_LAYOUT: PktLayout = PktLayout {
    status: 0,
    len: 4,
    snaplen: 8,
    mac: 12,
    sec: 16,
    nsec: 20,
    vlan_tci: 24,
    vlan_tpid: 26,
    pkttype: 32 + 10,
    hdr_min: 32 + 20,
};

/// The mmap'ed receive ring (V3 blocks or V2 slots).
#[derive(Debug)]
pub(super) struct RxRing {
    pub(super) version: RingVersion,
    pub(super) layout: PktLayout,
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
    pub(super) block_bytes: usize,
    pub(super) block_count: usize,
    /// V2: slot size, slots per block, total slots, and the next slot to read.
    pub(super) slot_bytes: usize,
    pub(super) slots_per_block: usize,
    pub(super) slot_count: usize,
    pub(super) slot: usize,
    /// V3: block being read, and where in it.
    pub(super) block: usize,
    pub(super) pkts_left: u32,
    pub(super) pkt_off: usize,
    pub(super) reading: bool,
}

// SAFETY: the mapping is owned by exactly one `RxRing` and only touched through `&mut self`;
// moving it to another thread moves that exclusive access with it.
unsafe impl Send for RxRing {}

impl RxRing {
    pub(super) fn block_ptr(&self, block: usize) -> *mut u8 {
        debug_assert!(block < self.block_count);
        // SAFETY: `block * block_bytes < len`, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(block * self.block_bytes) }
    }

    pub(super) fn slot_ptr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.slot_count);
        let (b, i) = (slot / self.slots_per_block, slot % self.slots_per_block);
        // SAFETY: `i * slot_bytes + slot_bytes <= block_bytes`, so the slot is inside block `b`.
        unsafe { self.block_ptr(b).add(i * self.slot_bytes) }
    }

    /// Whether the `n` bytes at `at` lie inside the mapping. The ring's own offsets (status
    /// words) are inside by construction; offsets the kernel writes into the ring (`tp_mac`,
    /// `tp_snaplen`, V3's next-frame offset) are checked here before anything is read.
    pub(super) fn inside(&self, at: *const u8, n: usize) -> bool {
        let off = (at as usize).wrapping_sub(self.base.as_ptr() as usize);
        off <= self.len && n <= self.len - off
    }

    /// A status word shared with the kernel, at `at` (4-byte aligned, inside the mapping).
    pub(super) fn status_word(&self, at: *mut u8) -> &AtomicU32 {
        // Only the ring's own offsets come here (block and slot headers), never kernel data.
        assert!(
            self.inside(at, 4) && (at as usize) % 4 == 0,
            "ring status word outside the mapping"
        );
        // SAFETY: `at` is a 4-byte aligned u32 inside the mapping (checked above); it is shared
        // with the kernel, hence atomic; the mapping outlives the reference (tied to `&self`).
        unsafe { &*(at as *const AtomicU32) }
    }

    pub(super) fn block_status(&self, block: usize) -> &AtomicU32 {
        self.status_word(self.block_ptr(block).wrapping_add(field::BLK_STATUS))
    }

    /// The u32 at `at`; 0 if those bytes are not inside the mapping.
    pub(super) fn read_u32(&self, at: *const u8) -> u32 {
        if !self.inside(at, 4) {
            return 0;
        }
        // SAFETY: the 4 bytes are inside the mapping (checked above), which lives as long as
        // `&self`; the read is unaligned-safe. Callers read only blocks or slots the kernel has
        // handed to user space (status TP_STATUS_USER, acquired).
        unsafe { std::ptr::read_unaligned(at as *const u32) }
    }

    /// `tp_vlan_tci`: a u32 in V3's header, a u16 in V2's.
    pub(super) fn read_tci(&self, at: *const u8) -> u16 {
        match self.version {
            RingVersion::V3 => self.read_u32(at) as u16,
            RingVersion::V2 => self.read_u16(at),
        }
    }

    /// The u16 at `at`; 0 if those bytes are not inside the mapping.
    pub(super) fn read_u16(&self, at: *const u8) -> u16 {
        if !self.inside(at, 2) {
            return 0;
        }
        // SAFETY: as for `read_u32`: 2 bytes inside the mapping, checked above.
        unsafe { std::ptr::read_unaligned(at as *const u16) }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `open`, unmapped once, here.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl RxRing {
    /// Sets up the receive ring of socket `s` as `cfg` asks (version, blocks, V2 slots; for V2
    /// also the socket queue that takes frames longer than a slot) and maps it. After
    /// `PACKET_VNET_HDR`, before `bind`: the kernel fixes the ring's frame layout then.
    pub(super) fn setup(s: RawFd, cfg: &AfPacketConfig, name: &str) -> Result<RxRing, IoError> {
        let opt = |lvl, opt, v, what| {
            sys::setsockopt_int(s, lvl, opt, v).map_err(|e| sys::sys_err(what, name, e))
        };
        let slots_per_block = (cfg.block_bytes / cfg.slot_bytes.max(1)) as usize;
        match cfg.ring {
            RingVersion::V3 => {
                opt(
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    TPACKET_V3,
                    "PACKET_VERSION",
                )?;
                let req = libc::tpacket_req3 {
                    tp_block_size: cfg.block_bytes,
                    tp_block_nr: cfg.block_count,
                    tp_frame_size: 2048,
                    tp_frame_nr: cfg.block_bytes / 2048 * cfg.block_count,
                    tp_retire_blk_tov: cfg.block_timeout_ms,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                sys::setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| sys::sys_err("PACKET_RX_RING", name, e))?;
            }
            RingVersion::V2 => {
                opt(
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    TPACKET_V2,
                    "PACKET_VERSION",
                )?;
                let req = libc::tpacket_req {
                    tp_block_size: cfg.block_bytes,
                    tp_block_nr: cfg.block_count,
                    tp_frame_size: cfg.slot_bytes,
                    tp_frame_nr: slots_per_block as u32 * cfg.block_count,
                };
                sys::setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| sys::sys_err("PACKET_RX_RING", name, e))?;
                // Frames longer than a slot: queued whole on the socket too (any non-zero
                // threshold turns it on), with room for them in the receive buffer.
                opt(
                    libc::SOL_PACKET,
                    PACKET_COPY_THRESH,
                    1,
                    "PACKET_COPY_THRESH",
                )?;
                if sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, COPY_QUEUE_BYTES)
                    .is_err()
                {
                    // Without CAP_NET_ADMIN: as much as rmem_max allows.
                    let _ =
                        sys::setsockopt_int(s, libc::SOL_SOCKET, libc::SO_RCVBUF, COPY_QUEUE_BYTES);
                }
            }
        }
        let len = cfg.block_bytes as usize * cfg.block_count as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket; no existing memory
        // is affected, and the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                s,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(super::errno_err("mmap(rx ring)", name));
        }
        let ring = RxRing {
            version: cfg.ring,
            layout: match cfg.ring {
                RingVersion::V3 => V3_LAYOUT,
                RingVersion::V2 => V2_LAYOUT,
            },
            slot_bytes: cfg.slot_bytes as usize,
            slots_per_block,
            slot_count: slots_per_block * cfg.block_count as usize,
            slot: 0,
            base: NonNull::new(p.cast())
                .ok_or_else(|| IoError::Invalid("mmap returned NULL".into()))?,
            len,
            block_bytes: cfg.block_bytes as usize,
            block_count: cfg.block_count as usize,
            block: 0,
            pkts_left: 0,
            pkt_off: 0,
            reading: false,
        };
        Ok(ring)
    }
}
