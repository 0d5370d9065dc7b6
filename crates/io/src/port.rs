//! The batch port interface every backend implements.
//!
//! A port moves frames between the outside world and [`Batch`]es of pooled [`PacketBuf`](qbridge_packet::PacketBuf)s.
//! The contract, in the manner of Open vSwitch's `netdev-provider.h`, is about who owns each
//! buffer when:
//!
//! * [`Port::rx_burst`] takes buffers from the caller's [`BufPool`], fills them, and *appends*
//!   them to the caller's batch (frames already in the batch stay untouched). When it returns,
//!   the caller owns every appended buffer. Each buffer holds one whole Ethernet frame with all
//!   its VLAN tags on the wire (a backend whose kernel strips a tag puts it back), its
//!   [`OffloadMeta`](qbridge_packet::OffloadMeta) taken from the virtio-net header when the
//!   port has one (else zero), and `time_ns` the backend's receive timestamp when it has one
//!   (else 0; the caller may overwrite it with its own clock). `port` is left 0: the caller
//!   knows the port's id, the backend does not. On `Err`, nothing was appended.
//! * [`Port::tx_burst`] takes every buffer out of the batch (it is empty on return, whatever
//!   happens) and gives each buffer back to the pool once the frame is sent or dropped. The
//!   caller keeps nothing. [`TxOutcome`] says how many frames were sent and why the others
//!   were dropped, so the caller can count `tx_queue_full` and `tx_error` per port. `Err` means
//!   the port itself failed (see [`IoError::is_link_down`]); the batch is still drained and its
//!   buffers still returned, and the frames count as dropped.
//!
//! Ports are single-threaded objects (`&mut self`); a worker thread owns the ports it polls.
//! No call allocates after warm-up, and a backend makes a bounded number of syscalls per burst
//! (one kick per transmitted batch), never one per frame where the kernel offers better.

use qbridge_packet::{Batch, BufPool};

use crate::IoError;

/// What a port can take, for the egress stage's offload decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCaps {
    /// Frames cross this port with a virtio-net header (offload metadata is honoured on tx and
    /// filled on rx).
    pub vnet_hdr: bool,
    /// Accepts TCP super-frames (GSO) for transmission; without it the caller must segment.
    pub tso: bool,
    /// Accepts frames whose checksum is left to do (`NEEDS_CSUM`); without it the caller must
    /// complete checksums.
    pub csum: bool,
    /// Largest frame (without FCS, all tags included) the port can send, not counting GSO
    /// super-frames when `tso` is set (those are judged per segment).
    pub max_frame: usize,
}

/// What happened to the frames of one [`Port::tx_burst`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct TxOutcome {
    /// Frames handed to the kernel or the medium.
    pub sent: usize,
    /// Frames dropped because the transmit queue or ring was full (`EAGAIN`, `ENOBUFS`).
    pub queue_full: usize,
    /// Frames dropped because the kernel refused them (`EMSGSIZE`, `EINVAL`, ...) or the port
    /// could not represent them.
    pub error: usize,
}

impl TxOutcome {
    pub fn dropped(&self) -> usize {
        self.queue_full + self.error
    }

    pub fn total(&self) -> usize {
        self.sent + self.dropped()
    }
}

/// A port backend. See the module documentation for buffer ownership.
pub trait Port {
    /// Receives up to `max` frames without blocking, appending them to `batch` with buffers
    /// from `pool`. Returns how many were appended (0 when nothing is waiting).
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError>;

    /// Transmits every frame of `batch` with one kick, draining it and returning every buffer
    /// to `pool`.
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError>;

    /// What the port can take.
    fn caps(&self) -> PortCaps;

    /// A name for logs and errors (the interface name for live ports).
    fn name(&self) -> &str;
}

/// Returns every buffer of `batch` to `pool`; for the error paths of `tx_burst`.
pub(crate) fn recycle(batch: &mut Batch, pool: &mut BufPool) -> usize {
    let n = batch.len();
    for p in batch.drain() {
        pool.put(p);
    }
    n
}
