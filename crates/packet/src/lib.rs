//! Packet buffers and batches: what ports hand to the bridge core and the core hands back.
//!
//! A [`PacketBuf`] owns a byte vector with *headroom* in front of the frame so that pushing a
//! VLAN tag is a 12-byte move into the headroom, not a shift of the whole frame. Buffers are
//! recycled through a [`BufPool`]; a buffer keeps its capacity, so after warm-up the datapath
//! does not allocate (a 64 KB super-frame grows its buffer once, then that buffer stays large).
//!
//! Ownership: a buffer belongs to whoever holds it. `rx_burst` fills a [`Batch`] the caller
//! owns; the bridge core moves each buffer into exactly one output batch, or returns it to the
//! pool when it drops the frame; `tx_burst` drains the batch it is given.
//!
//! A buffer also carries the frame's header [`Layout`]: the one parse of its headers, done
//! the first time something needs them ([`PacketBuf::headers`]), and read by every later
//! reader instead of parsing again (egress sizing, software GSO, checksum completion, GRO). Tag
//! pushes and pops leave it true (it is kept relative to the buffer, and they never move the
//! L3 header); everything that replaces the frame, changes its length or moves its L3 header
//! drops it.
//!
//! No locks, no I/O, no unsafe. One file: the buffer, its batch and its pool are one type's
//! life cycle (the tests make up the second half).
#![forbid(unsafe_code)]

use core::cell::Cell;

use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM, GSO_ECN};
use qbridge_wire::vlan::TAG_LEN;
use qbridge_wire::{parse_headers, Headers, Layout, Tpid};

/// Bytes kept free in front of a freshly reset buffer: room for this many tag pushes without a
/// shift.
pub const HEADROOM: usize = 64;

/// The largest frame start a tag can be popped from (the start stays a `u16`).
const START_MAX: usize = u16::MAX as usize - TAG_LEN;

/// [`PacketBuf::set_frame`] copies a frame of `SMALL_COPY..=4 * SMALL_COPY` bytes (minimum-size
/// frames, with or without tags and FCS, up to small TCP segments) as two fixed-size pieces.
const SMALL_COPY: usize = 32;

/// Copies `src` into `dst` (same length, `N..=2 * N` bytes) as its first and its last `N`
/// bytes, which overlap: two fixed-size copies the compiler turns into vector moves.
#[inline(always)]
fn copy_ends<const N: usize>(dst: &mut [u8], src: &[u8]) {
    let len = src.len();
    dst[..N].copy_from_slice(&src[..N]);
    dst[len - N..].copy_from_slice(&src[len - N..]);
}

/// Offload metadata, the virtio-net header's fields (`struct virtio_net_hdr`), carried beside
/// the frame. All offsets count from the first byte of the Ethernet frame. The values of
/// `flags` and `gso_type` are `qbridge_wire::virtio`'s ([`F_NEEDS_CSUM`],
/// [`F_DATA_VALID`](qbridge_wire::virtio::F_DATA_VALID), [`GsoType`], [`GSO_ECN`]): one
/// vocabulary, the wire's; [`OffloadMeta::gso`] reads the type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadMeta {
    /// `VIRTIO_NET_HDR_F_*` bits: `NEEDS_CSUM` (1), `DATA_VALID` (2).
    pub flags: u8,
    /// The raw `VIRTIO_NET_HDR_GSO_*` byte: a [`GsoType`] or-ed with [`GSO_ECN`]
    /// (unknown values kept as they came).
    pub gso_type: u8,
    /// Bytes of headers (Ethernet + tags + L3 + L4) in a GSO frame.
    pub hdr_len: u16,
    /// Payload bytes per segment of a GSO frame.
    pub gso_size: u16,
    /// Where the checksum computation starts (with `NEEDS_CSUM`).
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum is stored.
    pub csum_offset: u16,
}

impl OffloadMeta {
    /// The GSO type, ECN bit aside.
    pub fn gso(&self) -> GsoType {
        GsoType::from_raw(self.gso_type)
    }

    /// The ECN bit of `gso_type` ([`GSO_ECN`]): the sender set CWR on the super-frame.
    pub const fn gso_ecn(&self) -> bool {
        self.gso_type & GSO_ECN != 0
    }

    /// Whether this is a GSO super-frame (a type other than [`GsoType::None`]).
    pub const fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GsoType::None.raw()
    }

    pub const fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    /// Shifts the header offsets after `delta` bytes were inserted (positive) or removed
    /// (negative) inside the Ethernet header, e.g. 4 per VLAN tag pushed or popped.
    pub fn shift_headers(&mut self, delta: isize) {
        let shift = |v: &mut u16| {
            if *v != 0 {
                *v = (*v as isize + delta).clamp(0, u16::MAX as isize) as u16;
            }
        };
        if self.needs_csum() {
            shift(&mut self.csum_start);
        }
        if self.is_gso() {
            shift(&mut self.hdr_len);
        }
    }
}

/// A frame in a buffer with headroom, plus the metadata the datapath carries with it.
///
/// `repr(C)`, fields in this order: the metadata a copy takes from its source (`time_ns`,
/// `offload`, `layout`, `port`) is one contiguous run, which the compiler moves in two wide
/// moves rather than field by field (a flood copy per target).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct PacketBuf {
    data: Vec<u8>,
    /// Receive time in nanoseconds, on the clock the core was handed.
    pub time_ns: u64,
    pub offload: OffloadMeta,
    /// Where the frame's headers are, once parsed (see [`PacketBuf::headers`]). A `Cell` so
    /// that a reader holding `&PacketBuf` (the bridge's classify, software GSO) records it.
    layout: Cell<Layout>,
    /// Ingress port (set by the receiving port) or egress port (set by the core).
    pub port: u16,
    /// Offset of the frame's first byte in `data` (u16: keeps the struct at 48 bytes, which
    /// every move of a buffer between batches and pools copies; [`PacketBuf::remove_tag`]
    /// moves the frame back to [`HEADROOM`] rather than let it pass `u16::MAX`).
    start: u16,
}

const _: () = assert!(core::mem::size_of::<PacketBuf>() == 48);
const _: () = assert!(HEADROOM <= u16::MAX as usize);

impl Default for PacketBuf {
    fn default() -> Self {
        PacketBuf::new()
    }
}

impl PacketBuf {
    /// An empty buffer with [`HEADROOM`] and room for a 1518-byte frame.
    pub fn new() -> PacketBuf {
        PacketBuf::with_capacity(2048)
    }

    pub fn with_capacity(frame_cap: usize) -> PacketBuf {
        let mut data = Vec::with_capacity(HEADROOM + frame_cap);
        data.resize(HEADROOM, 0);
        PacketBuf {
            data,
            start: HEADROOM as u16,
            layout: Cell::new(Layout::UNKNOWN),
            port: 0,
            time_ns: 0,
            offload: OffloadMeta::default(),
        }
    }

    /// A buffer holding a copy of `frame`.
    pub fn from_frame(frame: &[u8]) -> PacketBuf {
        let mut p = PacketBuf::with_capacity(frame.len());
        p.set_frame(frame);
        p
    }

    /// Empties the buffer and restores the headroom, keeping the allocation.
    pub fn reset(&mut self) {
        self.restore_headroom();
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.port = 0;
        self.time_ns = 0;
        self.offload = OffloadMeta::default();
    }

    /// This buffer's allocation as a [`reset`](PacketBuf::reset) buffer, built as a new value
    /// rather than field by field (a pool's `get` writes it straight into its destination).
    #[inline(always)]
    fn recycled(self) -> PacketBuf {
        let mut data = self.data;
        if data.len() >= HEADROOM {
            data.truncate(HEADROOM);
        } else {
            data.resize(HEADROOM, 0);
        }
        PacketBuf {
            data,
            start: HEADROOM as u16,
            layout: Cell::new(Layout::UNKNOWN),
            port: 0,
            time_ns: 0,
            offload: OffloadMeta::default(),
        }
    }

    /// Makes this buffer a freshly received `frame`: a copy of it after [`HEADROOM`], with
    /// `port`, `time_ns` and `offload` reset (a receive path sets those it knows afterwards).
    /// Whatever the buffer held before (a frame sent, a pool's stale buffer) is gone.
    #[inline]
    pub fn set_frame(&mut self, frame: &[u8]) {
        self.port = 0;
        self.time_ns = 0;
        self.offload = OffloadMeta::default();
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.copy_frame(frame);
    }

    /// Makes `data[HEADROOM..]` this buffer's frame by exchanging vectors, with the metadata
    /// reset as by [`PacketBuf::set_frame`]: for a receive path that read the frame straight
    /// into a vector after [`HEADROOM`] bytes (what precedes it there is headroom, never
    /// read), so no copy follows the kernel's. `data` gets this buffer's old vector. Returns
    /// false, changing nothing, when `data` is shorter than [`HEADROOM`].
    pub fn swap_in_frame(&mut self, data: &mut Vec<u8>) -> bool {
        if data.len() < HEADROOM {
            return false;
        }
        std::mem::swap(&mut self.data, data);
        self.start = HEADROOM as u16;
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.port = 0;
        self.time_ns = 0;
        self.offload = OffloadMeta::default();
        true
    }

    /// Replaces the frame with a copy of `frame` after [`HEADROOM`]; metadata untouched.
    #[inline]
    fn copy_frame(&mut self, frame: &[u8]) {
        self.copy_frame_at(frame, HEADROOM as u16);
    }

    /// Replaces the frame with a copy of `frame` starting at offset `start` of the buffer;
    /// metadata untouched.
    #[inline(always)]
    fn copy_frame_at(&mut self, frame: &[u8], start: u16) {
        self.start = start;
        let at = usize::from(start);
        let len = frame.len();
        let end = at + len;
        // A small frame into a buffer that held one at least as long (a recycled buffer, in
        // steady state): two overlapping fixed-size copies, which compile to a few vector
        // moves instead of a `memcpy` call; the bytes in between are written by both.
        if (SMALL_COPY..=4 * SMALL_COPY).contains(&len) && self.data.len() >= end {
            self.data.truncate(end);
            let dst = &mut self.data[at..];
            if len <= 2 * SMALL_COPY {
                copy_ends::<SMALL_COPY>(dst, frame);
            } else {
                copy_ends::<{ 2 * SMALL_COPY }>(dst, frame);
            }
            return;
        }
        if self.data.len() >= at {
            self.data.truncate(at);
        } else {
            self.data.resize(at, 0);
        }
        self.data.extend_from_slice(frame);
    }

    /// Empties the frame and puts the start back at [`HEADROOM`]. Headroom bytes are never
    /// read, so they are not cleared: no memset per reuse.
    #[inline]
    fn restore_headroom(&mut self) {
        if self.data.len() >= HEADROOM {
            self.data.truncate(HEADROOM);
        } else {
            self.data.resize(HEADROOM, 0);
        }
        self.start = HEADROOM as u16;
    }

    /// Makes the frame `len` bytes long, zero-filled, and returns it for a receiver to fill.
    pub fn frame_mut_with_len(&mut self, len: usize) -> &mut [u8] {
        self.restore_headroom();
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.data.resize(HEADROOM + len, 0);
        &mut self.data[HEADROOM..]
    }

    /// Offset of the frame in `data`.
    #[inline(always)]
    fn off(&self) -> usize {
        self.start as usize
    }

    pub fn len(&self) -> usize {
        self.data.len() - self.off()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn headroom(&self) -> usize {
        self.off()
    }

    pub fn frame(&self) -> &[u8] {
        &self.data[self.off()..]
    }

    /// The frame's bytes to change in place. A writer that changes anything from the L3
    /// header on other than a checksum field calls [`PacketBuf::clear_layout`] (tag rewrites
    /// and checksum completion do not need to).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        let s = self.off();
        &mut self.data[s..]
    }

    /// Inserts `tag` (4 wire bytes) at byte offset `at` of the frame (12 for the outermost
    /// position): the `at` bytes before it move 4 bytes into the headroom. `at` must be at most
    /// the frame length; returns false (frame unchanged) otherwise. The L3 header does not
    /// move, so the recorded [`Layout`] stays true (a tag inserted behind L3's EtherType drops
    /// it).
    #[inline]
    pub fn insert_tag(&mut self, at: usize, tag: [u8; TAG_LEN]) -> bool {
        if at == 12 && self.off() >= TAG_LEN {
            // The common case, outermost tag: a fixed 12-byte move the compiler keeps in
            // registers instead of a memmove call, on one slice (one bounds check).
            let s = self.off() - TAG_LEN;
            if let Some(w) = self.data.get_mut(s..s + 16) {
                let mut addrs = [0u8; 12];
                addrs.copy_from_slice(&w[4..16]);
                w[..12].copy_from_slice(&addrs);
                w[12..].copy_from_slice(&tag);
                self.start = s as u16;
                return true;
            }
        }
        self.insert_tag_slow(at, tag)
    }

    fn insert_tag_slow(&mut self, at: usize, tag: [u8; TAG_LEN]) -> bool {
        if at > self.len() {
            return false;
        }
        self.keep_layout_if_before_l3(at);
        if self.off() < TAG_LEN {
            // Out of headroom: one shift of the whole frame restores it.
            let len = self.len();
            let old = self.off();
            self.data.resize(HEADROOM + len, 0);
            self.data.copy_within(old..old + len, HEADROOM);
            self.start = HEADROOM as u16;
            *self.layout.get_mut() = Layout::UNKNOWN;
        }
        let s = self.off();
        self.data.copy_within(s..s + at, s - TAG_LEN);
        self.start = (s - TAG_LEN) as u16;
        let s = self.off();
        self.data[s + at..s + at + TAG_LEN].copy_from_slice(&tag);
        true
    }

    /// Removes the 4 bytes at offset `at` of the frame by moving the `at` bytes before them
    /// forward. Returns false (frame unchanged) if the frame is shorter than `at + 4`. The L3
    /// header does not move, so the recorded [`Layout`] stays true when the 4 bytes are a tag
    /// in front of L3's EtherType, as every caller's are (a tag it read at `at`); removed
    /// bytes elsewhere than at 12 drop it when they reach the EtherType.
    #[inline]
    pub fn remove_tag(&mut self, at: usize) -> bool {
        let s = self.off();
        if at == 12 && s <= START_MAX {
            // The common case, outermost tag: a fixed 12-byte move on one slice, whose bounds
            // check is the length check (a frame shorter than 16 bytes is left alone).
            return match self.data.get_mut(s..s + 16) {
                Some(w) => {
                    let mut addrs = [0u8; 12];
                    addrs.copy_from_slice(&w[..12]);
                    w[TAG_LEN..].copy_from_slice(&addrs);
                    self.start = (s + TAG_LEN) as u16;
                    true
                }
                None => false,
            };
        }
        self.remove_tag_slow(at)
    }

    #[inline(never)]
    fn remove_tag_slow(&mut self, at: usize) -> bool {
        if at + TAG_LEN > self.len() {
            return false;
        }
        let mut s = self.off();
        if s > START_MAX {
            s = self.rebase();
        }
        self.keep_layout_if_before_l3(at + TAG_LEN);
        self.data.copy_within(s..s + at, s + TAG_LEN);
        self.start = (s + TAG_LEN) as u16;
        true
    }

    /// Drops the layout unless frame offset `end` (the end of bytes about to be inserted in
    /// front of, or removed) lies at or before L3's EtherType.
    fn keep_layout_if_before_l3(&mut self, end: usize) {
        if let Some(l3) = self.layout.get().l3_in_buffer() {
            if self.off() + end + 2 > l3 {
                *self.layout.get_mut() = Layout::UNKNOWN;
            }
        }
    }

    /// Moves the frame back to [`HEADROOM`] (its L3 header moves: the layout is dropped);
    /// returns the new start. For a start about to pass `u16::MAX`, which takes thousands of
    /// tags popped from one buffer.
    #[cold]
    #[inline(never)]
    fn rebase(&mut self) -> usize {
        let (old, len) = (self.off(), self.len());
        self.data.copy_within(old..old + len, HEADROOM);
        self.data.truncate(HEADROOM + len);
        self.start = HEADROOM as u16;
        *self.layout.get_mut() = Layout::UNKNOWN;
        HEADROOM
    }

    /// The frame's headers under `is_tag` (the TPIDs that count as tags in front of L3), as
    /// [`parse_headers`] returns them: from the recorded [`Layout`] when it holds (a walk over
    /// the tags, no IP or transport header parsed), else parsed, and the layout recorded for
    /// the next reader. Errors are `parse_headers`' (such frames record nothing).
    #[inline]
    pub fn headers(&self, is_tag: impl Fn(Tpid) -> bool) -> Result<Headers, qbridge_wire::Error> {
        let base = self.off();
        if let Some(h) = self.layout.get().resolve(self.frame(), base, &is_tag) {
            return Ok(h);
        }
        self.parse_and_record(is_tag)
    }

    #[inline(never)]
    fn parse_and_record(
        &self,
        is_tag: impl Fn(Tpid) -> bool,
    ) -> Result<Headers, qbridge_wire::Error> {
        let h = parse_headers(self.frame(), is_tag)?;
        self.layout.set(Layout::record(&h, self.off()));
        Ok(h)
    }

    /// The recorded header layout ([`Layout::UNKNOWN`] until something parsed the headers).
    pub fn layout(&self) -> Layout {
        self.layout.get()
    }

    /// Forgets the recorded layout: for a writer that changed the headers from L3 on (other
    /// than a checksum field) through [`PacketBuf::frame_mut`].
    pub fn clear_layout(&mut self) {
        *self.layout.get_mut() = Layout::UNKNOWN;
    }

    /// Truncates the frame to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.data.truncate(self.off() + len);
    }

    /// Appends bytes at the end of the frame.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        *self.layout.get_mut() = Layout::UNKNOWN;
        self.data.extend_from_slice(bytes);
    }

    /// Makes this buffer a copy of `other` (frame and metadata, the header layout included),
    /// reusing this allocation. The frame lies at the same offset as in `other` (so the
    /// layout, kept relative to the buffer, carries over as it is).
    #[inline]
    pub fn copy_from(&mut self, other: &PacketBuf) {
        self.copy_frame_at(other.frame(), other.start);
        self.port = other.port;
        self.time_ns = other.time_ns;
        self.offload = other.offload;
        *self.layout.get_mut() = other.layout.get();
    }
}

/// A batch of frames. The datapath's unit of work.
#[derive(Debug, Default)]
pub struct Batch {
    pub pkts: Vec<PacketBuf>,
}

impl Batch {
    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            pkts: Vec::with_capacity(n),
        }
    }
    pub fn len(&self) -> usize {
        self.pkts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }
    pub fn push(&mut self, p: PacketBuf) {
        self.pkts.push(p);
    }
    pub fn iter(&self) -> impl Iterator<Item = &PacketBuf> {
        self.pkts.iter()
    }
    pub fn drain(&mut self) -> std::vec::Drain<'_, PacketBuf> {
        self.pkts.drain(..)
    }
}

/// A free list of buffers. `get` reuses a returned buffer when one is there.
///
/// A batch returned whole ([`BufPool::put_all`]) is kept whole: its vector goes on a stack of
/// batches and the caller's batch gets an empty vector in exchange, and a receive path that
/// asks for buffers into an empty batch ([`BufPool::get_into`]) gets the vector back (with
/// buffers added or taken off to make the count). At full load buffers then go round as
/// vectors (VPP's buffer vectors), not one 48-byte move each way. A vector is only allocated
/// when a whole batch comes back and no spare empty vector is at hand, which stops once as
/// many go round as the port loops use (the pool keeps a spare for every whole batch it can
/// hold).
#[derive(Debug, Default)]
pub struct BufPool {
    /// Buffers returned one by one, and those of batches taken apart.
    free: Vec<PacketBuf>,
    /// Batches returned whole, never empty, the last returned on top.
    stacks: Vec<Vec<PacketBuf>>,
    /// Buffers in `stacks`.
    stacked: usize,
    /// Empty vectors, with their capacity, to hand to batches whose vector is kept.
    spare: Vec<Vec<PacketBuf>>,
    /// Most buffers kept; extra returned buffers are freed.
    limit: usize,
}

/// [`BufPool::put_all`] keeps a batch of at least this many buffers whole.
const WHOLE_MIN: usize = 8;

impl BufPool {
    pub fn new(limit: usize) -> BufPool {
        BufPool {
            free: Vec::with_capacity(limit.min(4096)),
            stacks: Vec::new(),
            stacked: 0,
            spare: Vec::new(),
            limit,
        }
    }

    /// A free buffer as it was returned, if there is one.
    #[inline(always)]
    fn pop(&mut self) -> Option<PacketBuf> {
        if self.free.is_empty() {
            self.unstack();
        }
        self.free.pop()
    }

    /// Takes the top batch apart into the loose buffers (its vector becomes a spare).
    #[inline(never)]
    fn unstack(&mut self) {
        if let Some(mut v) = self.stacks.pop() {
            self.stacked -= v.len();
            self.free.append(&mut v);
            self.keep_spare(v);
        }
    }

    /// Keeps an empty vector for a later [`BufPool::put_all`]: as many as the pool can hold
    /// whole batches, so that no vector is freed only to be allocated again.
    fn keep_spare(&mut self, v: Vec<PacketBuf>) {
        if v.capacity() > 0 && self.spare.len() <= self.limit / WHOLE_MIN {
            self.spare.push(v);
        }
    }

    /// A buffer for a receive path to fill, as [`BufPool::get_into`] hands them out: holding
    /// whatever it held when it was returned, until [`PacketBuf::set_frame`] or
    /// [`PacketBuf::swap_in_frame`] (which reset the metadata) fills it — without the reset
    /// [`BufPool::get`] does, which those would do again.
    #[inline]
    pub fn take(&mut self) -> PacketBuf {
        self.pop().unwrap_or_default()
    }

    pub fn get(&mut self) -> PacketBuf {
        match self.pop() {
            Some(p) => p.recycled(),
            None => PacketBuf::new(),
        }
    }

    /// A buffer holding a copy of `src` (frame and metadata): what [`BufPool::get`] followed by
    /// [`PacketBuf::copy_from`] gives, without resetting fields the copy overwrites.
    #[inline(always)]
    pub fn get_copy(&mut self, src: &PacketBuf) -> PacketBuf {
        let mut p = self.pop().unwrap_or_default();
        p.copy_from(src);
        p
    }

    pub fn put(&mut self, p: PacketBuf) {
        if self.available() < self.limit {
            self.free.push(p);
        }
    }

    /// Returns every buffer of `batch` to the pool, leaving it empty: what [`BufPool::put`] of
    /// each buffer in order does (those beyond the pool's limit are freed), without one push
    /// per buffer: a batch of [`WHOLE_MIN`] or more that fits is kept as it is, `batch` getting
    /// an empty vector with at least its capacity in exchange (a spare one when the pool has
    /// one). A transmit path calls it once its frames are sent.
    #[inline]
    pub fn put_all(&mut self, batch: &mut Batch) {
        let n = batch.pkts.len();
        if n == 0 {
            return;
        }
        let room = self.limit.saturating_sub(self.available());
        if n < WHOLE_MIN || n > room {
            self.put_loose(batch, room);
            return;
        }
        let cap = batch.pkts.capacity();
        let mut empty = self.spare.pop().unwrap_or_default();
        // Exactly the capacity the batch had: `reserve` would round up, and capacities going
        // round could then double at every exchange.
        empty.reserve_exact(cap);
        let whole = std::mem::replace(&mut batch.pkts, empty);
        self.stacked += n;
        self.stacks.push(whole);
    }

    /// [`BufPool::put_all`] of a short batch, or of one the pool has no room for whole.
    #[inline(never)]
    fn put_loose(&mut self, batch: &mut Batch, room: usize) {
        batch.pkts.truncate(room);
        self.free.append(&mut batch.pkts);
    }

    /// Appends `n` buffers to `batch` for a receive path to fill: each holds whatever it held
    /// when it was returned (frame and metadata), so the caller fills every one it keeps with
    /// [`PacketBuf::set_frame`] (which resets the metadata) and returns the others. Which free
    /// buffer goes where is unspecified. An empty batch asking for [`WHOLE_MIN`] or more takes
    /// the vector of the last batch returned whole (its own empty one kept for a later
    /// [`BufPool::put_all`]), then gives back what it has too many or tops up what it lacks
    /// one buffer at a time; the rest is the free buffers' tail, moved in one pass.
    #[inline]
    pub fn get_into(&mut self, batch: &mut Batch, mut n: usize) {
        if n >= WHOLE_MIN && batch.pkts.is_empty() && !self.stacks.is_empty() {
            if let Some(whole) = self.stacks.pop() {
                let have = whole.len();
                self.stacked -= have;
                let empty = std::mem::replace(&mut batch.pkts, whole);
                self.keep_spare(empty);
                if have >= n {
                    if have > n {
                        self.free.extend(batch.pkts.drain(n..));
                    }
                    return;
                }
                n -= have;
                // Exactly: a vector grown by doubling here would go round doubled.
                batch.pkts.reserve_exact(n);
            }
        }
        if n == 1 {
            // One frame ready (a lightly loaded port): a pop, without the drain's set-up.
            let p = self.take();
            batch.pkts.push(p);
            return;
        }
        // Batches taken apart until the loose buffers are enough.
        while self.free.len() < n && !self.stacks.is_empty() {
            self.unstack();
        }
        let take = n.min(self.free.len());
        let from = self.free.len() - take;
        batch.pkts.extend(self.free.drain(from..));
        for _ in take..n {
            batch.pkts.push(PacketBuf::new());
        }
    }

    /// Free buffers held.
    pub fn available(&self) -> usize {
        self.free.len() + self.stacked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Vec<u8> {
        (0u8..30).collect()
    }

    #[test]
    fn push_and_pop_tag() {
        let mut p = PacketBuf::from_frame(&frame());
        assert!(p.insert_tag(12, [0x88, 0xa8, 0, 100]));
        assert_eq!(p.len(), 34);
        assert_eq!(&p.frame()[..12], &frame()[..12]);
        assert_eq!(&p.frame()[12..16], &[0x88, 0xa8, 0, 100]);
        assert_eq!(&p.frame()[16..], &frame()[12..]);
        assert!(p.remove_tag(12));
        assert_eq!(p.frame(), &frame()[..]);
        assert!(!p.remove_tag(28));
        assert!(!p.insert_tag(31, [0; 4]));
    }

    #[test]
    fn headroom_exhaustion_shifts_once() {
        let mut p = PacketBuf::from_frame(&frame());
        let mut expect = frame();
        for i in 0..(HEADROOM / 4 + 3) {
            assert!(p.insert_tag(12, [0x81, 0, 0, i as u8]));
            expect.splice(12..12, [0x81, 0, 0, i as u8]);
        }
        assert_eq!(p.frame(), &expect[..]);
    }

    #[test]
    fn pool_copy_is_a_fresh_copy() {
        let mut pool = BufPool::new(4);
        let mut used = PacketBuf::from_frame(&frame());
        assert!(used.insert_tag(12, [0x81, 0, 0, 1]));
        used.port = 3;
        used.time_ns = 9;
        used.offload.gso_type = GsoType::TcpV4.raw();
        pool.put(used);
        let src = PacketBuf::from_frame(&[7u8; 20]);
        let c = pool.get_copy(&src);
        assert_eq!(c.frame(), src.frame());
        assert_eq!(
            (c.port, c.time_ns, c.offload),
            (0, 0, OffloadMeta::default())
        );
        assert_eq!(c.headroom(), HEADROOM);
    }

    #[test]
    fn bulk_put_and_get_match_one_by_one() {
        for (limit, held, n) in [(4, 0, 3), (4, 2, 3), (4, 4, 2), (8, 3, 0), (2, 1, 5)] {
            let mut bulk = BufPool::new(limit);
            let mut single = BufPool::new(limit);
            for _ in 0..held {
                bulk.put(PacketBuf::new());
                single.put(PacketBuf::new());
            }
            let mut b = Batch::with_capacity(n);
            for i in 0..n {
                let mut p = PacketBuf::from_frame(&frame());
                assert!(p.insert_tag(12, [0x81, 0, 0, i as u8]));
                p.port = 7;
                b.push(p.clone());
                single.put(p);
            }
            bulk.put_all(&mut b);
            assert!(b.is_empty());
            assert_eq!(bulk.available(), single.available());

            // Buffers come from the pool while it has some, then new ones; `set_frame`
            // makes each a fresh frame whatever it held.
            let want = bulk.available() + 2;
            bulk.get_into(&mut b, want);
            assert_eq!(b.len(), want);
            assert_eq!(bulk.available(), 0);
            for p in b.pkts.iter_mut() {
                p.set_frame(&[5u8; 60]);
                assert_eq!(
                    (p.frame(), p.headroom(), p.port),
                    (&[5u8; 60][..], HEADROOM, 0)
                );
                assert_eq!((p.time_ns, p.offload), (0, OffloadMeta::default()));
            }
        }
    }

    /// A buffer that has been sent: a frame of `len` bytes with a tag pushed and metadata set.
    fn used(len: usize) -> PacketBuf {
        let mut p = PacketBuf::from_frame(&vec![0xeeu8; len]);
        if len >= 12 {
            assert!(p.insert_tag(12, [0x88, 0xa8, 0, 1]));
        }
        p.port = 9;
        p.time_ns = 77;
        p.offload.gso_type = GsoType::TcpV4.raw();
        p
    }

    #[test]
    fn set_frame_over_any_buffer() {
        // Every length across the small-copy ranges' edges, into buffers that held shorter,
        // equal and longer frames (and an empty one).
        for held in [0usize, 14, 31, 60, 64, 100, 128, 200, 1500] {
            for len in 0..300usize {
                let f: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let mut p = if held == 0 {
                    PacketBuf::new()
                } else {
                    used(held)
                };
                p.set_frame(&f);
                assert_eq!(p.frame(), &f[..], "held {held}, len {len}");
                assert_eq!((p.headroom(), p.port, p.time_ns), (HEADROOM, 0, 0));
                assert_eq!(p.offload, OffloadMeta::default());
            }
        }
    }

    #[test]
    fn whole_batches_go_round_as_vectors() {
        let mut pool = BufPool::new(100);
        let mut b = Batch::with_capacity(32);
        for i in 0..32 {
            b.push(used(60 + i));
        }
        let addrs: Vec<*const u8> = b.iter().map(|p| p.frame().as_ptr()).collect();
        let vector = b.pkts.as_ptr();
        pool.put_all(&mut b);
        assert_eq!((b.len(), pool.available()), (0, 32));
        assert!(b.pkts.capacity() >= 32, "the batch keeps room for a batch");
        // Asked for exactly that many into an empty batch: the same vector, same buffers.
        let mut rx = Batch::with_capacity(32);
        pool.get_into(&mut rx, 32);
        assert_eq!((rx.len(), pool.available()), (32, 0));
        assert_eq!(rx.pkts.as_ptr(), vector);
        let again: Vec<*const u8> = rx.iter().map(|p| p.frame().as_ptr()).collect();
        assert_eq!(again, addrs);
        // The receive batch's own empty vector is now the spare a later put_all hands out.
        pool.put_all(&mut rx);
        assert!(rx.pkts.capacity() >= 32);
        assert_eq!(pool.available(), 32);

        // Fewer than the batch: the vector, its extra buffers given back loose.
        let mut rx = Batch::default();
        pool.get_into(&mut rx, 20);
        assert_eq!(rx.pkts.as_ptr(), vector);
        assert_eq!((rx.len(), pool.available()), (20, 12));
        // More than the batches: one whole, the loose ones, then new buffers.
        let mut more = Batch::default();
        for i in 0..10 {
            more.push(used(60 + i));
        }
        pool.put_all(&mut more);
        assert_eq!(pool.available(), 22);
        let mut rx2 = Batch::default();
        pool.get_into(&mut rx2, 40);
        assert_eq!((rx2.len(), pool.available()), (40, 0));
        let mut seen: Vec<*const u8> = rx
            .iter()
            .chain(rx2.iter())
            .map(|p| p.frame().as_ptr())
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 60, "no buffer handed out twice");
    }

    #[test]
    fn swap_in_frame_takes_the_vector() {
        let mut p = used(100);
        let mut v = vec![0xaau8; HEADROOM];
        v.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        let at = v.as_ptr();
        assert!(p.swap_in_frame(&mut v));
        assert_eq!(p.frame(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        assert_eq!(p.frame().as_ptr(), at.wrapping_add(HEADROOM), "no copy");
        assert_eq!((p.headroom(), p.port, p.time_ns), (HEADROOM, 0, 0));
        assert_eq!(p.offload, OffloadMeta::default());
        assert!(v.len() >= 100, "the old vector comes back");
        assert!(p.insert_tag(12, [0x81, 0, 0, 5]));
        assert_eq!(&p.frame()[12..16], &[0x81, 0, 0, 5]);
        let mut short = vec![0u8; HEADROOM - 1];
        let before = p.frame().to_vec();
        assert!(!p.swap_in_frame(&mut short));
        assert_eq!(p.frame(), &before[..]);
    }

    #[test]
    fn vector_capacities_stay_bounded() {
        // Batches of every capacity and fill exchanging vectors with the pool for a long
        // while: no capacity outgrows the largest a batch asked for (they once doubled at
        // every exchange and overflowed).
        let mut pool = BufPool::new(4096);
        let mut seed = 12345u64;
        let mut next = |m: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % m
        };
        let mut kept: Vec<Batch> = Vec::new();
        for _ in 0..20_000 {
            let mut b = Batch::with_capacity(8 + next(300));
            let n = next(b.pkts.capacity() + 1);
            pool.get_into(&mut b, n);
            assert_eq!(b.len(), n);
            assert!(b.pkts.capacity() <= 308, "capacity {}", b.pkts.capacity());
            if next(4) == 0 {
                kept.push(b);
            } else {
                pool.put_all(&mut b);
                assert!(b.pkts.capacity() <= 308, "capacity {}", b.pkts.capacity());
            }
            if kept.len() > 8 {
                for mut k in kept.drain(..) {
                    pool.put_all(&mut k);
                }
            }
            assert!(pool.available() <= 4096);
        }
        for v in pool.stacks.iter().chain(pool.spare.iter()) {
            assert!(v.capacity() <= 308, "capacity {}", v.capacity());
        }
    }

    #[test]
    fn whole_batches_taken_apart_and_limit() {
        let mut pool = BufPool::new(40);
        let mut b = Batch::default();
        for _ in 0..3 {
            for i in 0..16 {
                b.push(used(60 + i));
            }
            pool.put_all(&mut b);
        }
        // 48 returned, the limit keeps 40 (16 + 16 + 8).
        assert_eq!(pool.available(), 40);
        pool.put(used(60));
        assert_eq!(pool.available(), 40);
        // Other sizes take batches apart; get and get_copy reach buffers held in batches.
        let mut rx = Batch::default();
        pool.get_into(&mut rx, 20);
        assert_eq!((rx.len(), pool.available()), (20, 20));
        let g = pool.get();
        assert_eq!(
            (g.len(), g.headroom(), g.port, g.time_ns),
            (0, HEADROOM, 0, 0)
        );
        let c = pool.get_copy(&PacketBuf::from_frame(&[1, 2, 3]));
        assert_eq!(c.frame(), &[1, 2, 3]);
        let mut t = pool.take();
        t.set_frame(&[4, 5]);
        assert_eq!(
            (t.frame(), t.port, t.offload),
            (&[4u8, 5][..], 0, OffloadMeta::default())
        );
        assert_eq!(pool.available(), 17);
        pool.put(t);
        for _ in 0..18 {
            let _ = pool.get();
        }
        assert_eq!(pool.available(), 0);
        pool.get_into(&mut rx, 5);
        assert_eq!(rx.len(), 25);
        // A batch below the whole-batch size goes in loose.
        let mut small = Batch::default();
        small.push(used(60));
        pool.put_all(&mut small);
        assert_eq!((small.len(), pool.available()), (0, 1));
    }

    #[test]
    fn get_into_one_buffer() {
        let mut pool = BufPool::new(4);
        let mut used = PacketBuf::from_frame(&frame());
        used.port = 3;
        used.offload.gso_type = GsoType::TcpV4.raw();
        pool.put(used);
        let mut b = Batch::with_capacity(2);
        // From the pool, then (pool empty) a new buffer.
        pool.get_into(&mut b, 1);
        assert_eq!(pool.available(), 0);
        pool.get_into(&mut b, 1);
        assert_eq!(b.len(), 2);
        assert_eq!(b.pkts[1].len(), 0);
    }

    /// A small deterministic generator (the tests here take no dependencies).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, m: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as usize % m
        }
    }

    const TPIDS: [u16; 5] = [0x8100, 0x88a8, 0x9100, 0x9abc, 0x0800];

    /// A frame with up to 3 tags (TPIDs from [`TPIDS`]), then IPv4 or IPv6 (with a
    /// hop-by-hop header or not, a fragment or not), TCP (with options or not), UDP or ICMP,
    /// some payload and maybe padding; sometimes a non-IP EtherType or a truncated header.
    fn random_frame(r: &mut Lcg) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for _ in 0..r.next(4) {
            f.extend_from_slice(&TPIDS[r.next(4)].to_be_bytes());
            f.extend_from_slice(&[0, 7]);
        }
        let v6 = r.next(2) == 1;
        let et: u16 = match r.next(8) {
            0 => 0x0806,
            _ if v6 => 0x86dd,
            _ => 0x0800,
        };
        f.extend_from_slice(&et.to_be_bytes());
        let payload = r.next(40);
        let (proto, mut l4) = match r.next(3) {
            0 => {
                let opts = r.next(2) == 1;
                let mut t = vec![0u8; if opts { 24 } else { 20 }];
                t[12] = if opts { 0x60 } else { 0x50 };
                t[13] = 0x10;
                (6u8, t)
            }
            1 => {
                let mut u = vec![0u8; 8];
                u[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
                (17, u)
            }
            _ => (if v6 { 58 } else { 1 }, vec![8u8, 0, 0, 0, 0, 0, 0, 0]),
        };
        l4.extend((0..payload).map(|i| i as u8));
        let frag = r.next(6) == 0;
        if v6 {
            let ext = r.next(2) == 1;
            let mut chain = Vec::new();
            let mut next = proto;
            if frag {
                chain.extend_from_slice(&[next, 0, 0, 8, 0, 0, 0, 1]);
                next = 44;
            }
            if ext {
                let mut hbh = vec![next, 0, 1, 4, 0, 0, 0, 0];
                hbh.extend_from_slice(&chain);
                chain = hbh;
                next = 0;
            }
            let plen = (chain.len() + l4.len()) as u16;
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&plen.to_be_bytes());
            f.extend_from_slice(&[next, 64]);
            f.extend_from_slice(&[0x20; 32]);
            f.extend_from_slice(&chain);
        } else {
            let total = (20 + l4.len()) as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 1]);
            f.extend_from_slice(if frag { &[0x20, 0] } else { &[0x40, 0] });
            f.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        }
        f.extend_from_slice(&l4);
        if r.next(4) == 0 {
            f.extend_from_slice(&[0x55; 9]); // Ethernet padding
        }
        if r.next(10) == 0 {
            let cut = r.next(f.len());
            f.truncate(cut);
        }
        f
    }

    /// Whatever was pushed, popped, copied or cut, and whichever tag set reads it, a buffer's
    /// headers are exactly what parsing its frame gives (so the recorded layout never lies),
    /// and the layout is recorded for the frames offloads read.
    #[test]
    fn headers_from_the_layout_are_the_parsed_ones() {
        let preds: [&dyn Fn(Tpid) -> bool; 5] = [
            &|t: Tpid| t.is_well_known(),
            &|t: Tpid| t.is_well_known() || t.0 == 0x9abc,
            &|t: Tpid| t == Tpid::DOT1AD,
            &|t: Tpid| t.0 != 0x9100,
            &|_| true,
        ];
        let mut r = Lcg(7);
        let mut pool = BufPool::new(8);
        let mut recorded = 0;
        for _ in 0..4000 {
            let f = random_frame(&mut r);
            let mut p = pool.take();
            p.set_frame(&f);
            for _ in 0..6 {
                for pred in preds.iter().take(1 + r.next(5)) {
                    let want = parse_headers(p.frame(), pred);
                    assert_eq!(p.headers(pred), want, "{:02x?}", p.frame());
                    // Asked again: the same (now from the layout when one was recorded).
                    assert_eq!(p.headers(pred), want, "{:02x?}", p.frame());
                    recorded += usize::from(p.layout().is_known());
                }
                let tag = |r: &mut Lcg| {
                    let t = TPIDS[r.next(4)].to_be_bytes();
                    [t[0], t[1], 0, 9]
                };
                match r.next(7) {
                    0 => {
                        let _ = p.insert_tag(12, tag(&mut r));
                    }
                    1 => {
                        let _ = p.remove_tag(12);
                    }
                    2 => {
                        let at = r.next(p.len() + 1);
                        let _ = p.insert_tag(at, tag(&mut r));
                    }
                    3 => {
                        let _ = p.remove_tag(r.next(p.len() + 1));
                    }
                    4 => {
                        let c = pool.get_copy(&p);
                        pool.put(std::mem::replace(&mut p, c));
                    }
                    5 => {
                        let n = p.len();
                        p.truncate(n.saturating_sub(r.next(3)));
                    }
                    _ => {
                        if let Some(b) = p.frame_mut().get_mut(12) {
                            *b ^= 0x01; // a TPID rewritten in place
                        }
                    }
                }
            }
            pool.put(p);
        }
        assert!(recorded > 1000, "layouts recorded: {recorded}");
    }

    #[test]
    fn a_start_near_u16_max_moves_back() {
        let mut f = vec![0u8; 70_000];
        for i in 0..(70_000 - 12) / 4 {
            f[12 + 4 * i..14 + 4 * i].copy_from_slice(&[0x81, 0x00]);
        }
        let mut p = PacketBuf::from_frame(&f);
        let mut len = f.len();
        while p.remove_tag(12) {
            len -= 4;
            assert_eq!(p.len(), len);
            assert!(p.headroom() <= u16::MAX as usize);
        }
        assert!(len < 16);
    }

    #[test]
    fn offload_shift() {
        let mut m = OffloadMeta {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4.raw(),
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        m.shift_headers(4);
        assert_eq!((m.hdr_len, m.csum_start, m.csum_offset), (70, 38, 16));
        m.shift_headers(-8);
        assert_eq!((m.hdr_len, m.csum_start), (62, 30));
    }
}
