//! Patch links: two ports of one daemon joined inside it (Open vSwitch's patch ports), so a
//! CE bridge and a PE bridge on one host exchange frames with no syscall and no copy.
//!
//! Each end has one queue per worker, and the two ends' queues of one worker share a pair of
//! mailboxes: a frame that worker `w` sends on end A is moved (the buffer itself, never its
//! bytes) into A→B mailbox `w`, and worker `w` receives it on end B in its next loop turn.
//! A frame therefore stays on the worker that received it from the outside, in order, and
//! the mailboxes' locks are only ever taken by that one worker (uncontended, once per burst).
//! Buffers go back to the same worker's pool. Offload metadata crosses intact: a TCP
//! super-frame stays one frame through any number of patch links.
//!
//! A mailbox holds at most [`MAILBOX_FRAMES`] frames; past that a send counts
//! `tx_queue_full` (a forwarding loop through patch links cannot eat the memory).

use crate::queue::Queues;
use qbridge_io::{IoError, Port, PortCaps, TxOutcome};
use qbridge_packet::{Batch, BufPool};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Most frames waiting in one direction of one worker's patch link.
pub const MAILBOX_FRAMES: usize = 4096;

#[derive(Debug, Default)]
struct Mailbox {
    frames: Mutex<Batch>,
    /// Frames waiting, kept beside the batch so that the worker's every-turn "anything
    /// waiting?" question takes no lock.
    waiting: AtomicUsize,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One end of a patch link on one worker.
#[derive(Debug)]
pub struct PatchQueue {
    name: String,
    /// What the other end sent: received here.
    inbox: Arc<Mailbox>,
    /// Where this end's sends go.
    outbox: Arc<Mailbox>,
}

/// Makes the queues of a patch link between ports `a` and `b` for `workers` workers: the
/// queues of `a` and those of `b`, each in worker order.
pub fn patch_link(a: &str, b: &str, workers: usize) -> (Queues, Queues) {
    let (mut qa, mut qb) = (Queues::new(), Queues::new());
    for _ in 0..workers.max(1) {
        let (ab, ba) = (Arc::new(Mailbox::default()), Arc::new(Mailbox::default()));
        qa.push(Box::new(PatchQueue {
            name: a.to_owned(),
            inbox: ba.clone(),
            outbox: ab.clone(),
        }));
        qb.push(Box::new(PatchQueue {
            name: b.to_owned(),
            inbox: ab,
            outbox: ba,
        }));
    }
    (qa, qb)
}

impl Port for PatchQueue {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        _pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        let mut inbox = self.inbox.lock();
        let n = inbox.len().min(max);
        batch.pkts.extend(inbox.pkts.drain(..n));
        self.inbox.waiting.store(inbox.len(), Ordering::Relaxed);
        Ok(n)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        let mut out = TxOutcome::default();
        let mut outbox = self.outbox.lock();
        let room = MAILBOX_FRAMES.saturating_sub(outbox.len());
        let n = batch.len().min(room);
        outbox.pkts.extend(batch.pkts.drain(..n));
        self.outbox.waiting.store(outbox.len(), Ordering::Relaxed);
        out.sent = n;
        out.queue_full = batch.len();
        pool.put_all(batch);
        Ok(out)
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            vnet_hdr: true,
            tso: true,
            csum: true,
            max_frame: 262_144,
            device: None,
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn rx_pending(&self) -> bool {
        // Both ends' queues of a worker live on that worker's thread: no other thread writes
        // the count, so a relaxed load is exact here.
        self.inbox.waiting.load(Ordering::Relaxed) != 0
    }

    fn close(self: Box<Self>) -> Result<(), IoError> {
        // Frames still in the mailboxes are freed with them (the worker's pool loses those
        // buffers; it allocates new ones when it needs them).
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_packet::PacketBuf;

    #[test]
    fn frames_cross_per_worker_in_order_and_a_full_mailbox_counts() {
        let (mut a, mut b) = patch_link("pa", "pb", 2);
        let mut pool = BufPool::new(8);
        let mut batch = Batch::default();
        for i in 0..3u8 {
            batch.push(PacketBuf::from_frame(&[i; 60]));
        }
        let o = a[1].tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((o.sent, o.dropped()), (3, 0));
        assert!(batch.is_empty());
        assert!(!b[0].rx_pending() && b[1].rx_pending() && !a[1].rx_pending());
        let mut rx = Batch::default();
        assert_eq!(b[0].rx_burst(&mut rx, &mut pool, 32).unwrap(), 0);
        assert_eq!(b[1].rx_burst(&mut rx, &mut pool, 2).unwrap(), 2);
        assert_eq!(b[1].rx_burst(&mut rx, &mut pool, 32).unwrap(), 1);
        let firsts: Vec<u8> = rx.pkts.iter().map(|p| p.frame()[0]).collect();
        assert_eq!(firsts, [0, 1, 2]);
        // Full: MAILBOX_FRAMES accepted, the rest counted.
        for _ in 0..MAILBOX_FRAMES + 5 {
            batch.push(PacketBuf::from_frame(&[9; 60]));
        }
        let o = b[0].tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((o.sent, o.queue_full), (MAILBOX_FRAMES, 5));
        assert!(a[0].rx_pending());
    }
}
