//! A port's queues: one receive/transmit path of a port per worker, each a boxed
//! [`Port`] ([`Queue`]) that one worker thread owns.
//!
//! A port has one queue per worker when its backend can spread receive work (AF_PACKET sockets
//! joined in one fanout group, TAP queues, AF_XDP sockets on device queues, patch links), or
//! fewer queues than workers, each shared by several workers: one of them receives on it and
//! every one of them transmits through it ([`SharedQueue`]: pcap, a one-queue TAP, fewer
//! AF_XDP queues than workers). [`distribute`] makes that assignment.
//!
//! What a worker needs from a queue beyond the bursts — how to wait for it, its backend drops,
//! the once-a-second tick, start and close — is [`Port`]'s own (its default methods; see
//! `qbridge_io::port`, which also states buffer ownership). Every queue is called through one
//! `dyn` call per burst, never per frame. This module imports only `qbridge_io`.

use qbridge_io::{BackendDrops, IoError, Port, PortCaps, Tick, TxOutcome, TxReport};
use qbridge_packet::{Batch, BufPool};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

/// One receive/transmit path of a port, owned by one worker: any backend behind the one port
/// trait.
pub type Queue = Box<dyn Port + Send>;

/// A port's queues, one per worker, in worker order.
pub type Queues = Vec<Queue>;

/// A port's freshly opened queues, one per worker, not yet handed over to the workers.
pub(crate) type Opened = Queues;

/// A queue handle and the worker it is for.
pub type WorkerQueue = (usize, Queue);

/// A backend queue shared by several workers: the worker chosen to receive polls it, every
/// one of them transmits through it. A mutex serialises the bursts (taken once per burst,
/// never per frame); for backends with fewer queues than workers (pcap, a TAP opened with one
/// queue). Each worker's handle is a [`Port`] whose every call takes the lock.
#[derive(Debug)]
pub struct SharedQueue {
    inner: Arc<Mutex<Queue>>,
    /// This worker receives on the queue: a duplicate of the backend's descriptor to wait on.
    rx_fd: Option<OwnedFd>,
    receives: bool,
    name: String,
}

fn lock(q: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // A worker that panicked while holding the lock left a queue whose state is still a valid
    // socket or file: keep using it.
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl Port for SharedQueue {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        if !self.receives {
            return Ok(0);
        }
        lock(&self.inner).rx_burst(batch, pool, max)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        lock(&self.inner).tx_burst(batch, pool)
    }

    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        lock(&self.inner).tx_burst_report(batch, pool, refused)
    }

    fn caps(&self) -> PortCaps {
        lock(&self.inner).caps()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.rx_fd.as_ref().map(|f| f.as_fd())
    }

    fn rx_pending(&self) -> bool {
        self.receives && lock(&self.inner).rx_pending()
    }

    fn drops(&self) -> BackendDrops {
        if self.receives {
            lock(&self.inner).drops()
        } else {
            BackendDrops::default()
        }
    }

    fn tick(&mut self) -> Result<Tick, IoError> {
        if self.receives {
            lock(&self.inner).tick()
        } else {
            Ok(Tick::default())
        }
    }

    fn visible_close(&self) -> bool {
        lock(&self.inner).visible_close()
    }

    fn close(self: Box<Self>) -> Result<(), IoError> {
        let SharedQueue { inner, .. } = *self;
        // The last handle closes the backend.
        match Arc::try_unwrap(inner) {
            Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()).close(),
            Err(_) => Ok(()),
        }
    }
}

/// Spreads a port's backend queues over `workers` workers, returning one queue per worker in
/// worker order. As many queues as workers: worker `i` owns queue `i`. Fewer: queue `i` is
/// shared ([`SharedQueue`]) by workers `i`, `i + n`, `i + 2n`, …, and received by the first of
/// them — except a single queue, received by worker `rotate % workers`, so that single-queue
/// ports of different ids land on different workers. More queues than workers is refused.
pub fn distribute(queues: Queues, workers: usize, rotate: usize) -> Result<Queues, IoError> {
    let workers = workers.max(1);
    let n = queues.len();
    if n == workers {
        return Ok(queues);
    }
    if n == 0 || n > workers {
        return Err(IoError::Invalid(format!(
            "{n} queues cannot be spread over {workers} workers (1 to {workers})"
        )));
    }
    let mut slots: Vec<Option<Queue>> = (0..workers).map(|_| None).collect();
    for (i, q) in queues.into_iter().enumerate() {
        let sharers: Vec<usize> = (i..workers).step_by(n).collect();
        let receiver = if n == 1 { rotate % workers } else { i };
        for (w, handle) in SharedQueue::split_among(q, &sharers, receiver)? {
            slots[w] = Some(handle);
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

impl SharedQueue {
    /// Shares `queue` among `workers` workers; worker `receiver` receives on it. Returns one
    /// handle per worker, in worker order.
    pub fn split(queue: Queue, workers: usize, receiver: usize) -> Result<Queues, IoError> {
        let all: Vec<usize> = (0..workers.max(1)).collect();
        Ok(Self::split_among(queue, &all, receiver)?
            .into_iter()
            .map(|(_, q)| q)
            .collect())
    }

    /// Shares `queue` among the workers `sharers`; worker `receiver` (one of them) receives on
    /// it. Returns (worker, handle) pairs.
    pub fn split_among(
        queue: Queue,
        sharers: &[usize],
        receiver: usize,
    ) -> Result<Vec<WorkerQueue>, IoError> {
        let name = queue.name().to_owned();
        let mut fd = queue
            .fd()
            .map(|f| f.try_clone_to_owned())
            .transpose()
            .map_err(|source| IoError::Sys {
                op: "dup",
                ifname: name.clone(),
                source,
            })?;
        let inner = Arc::new(Mutex::new(queue));
        let mut out: Vec<WorkerQueue> = Vec::with_capacity(sharers.len());
        for &w in sharers {
            let receives = w == receiver;
            out.push((
                w,
                Box::new(SharedQueue {
                    inner: inner.clone(),
                    rx_fd: if receives { fd.take() } else { None },
                    receives,
                    name: name.clone(),
                }),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_io::MemPort;
    use qbridge_packet::PacketBuf;

    fn mem(name: &str) -> Queue {
        let mut m = MemPort::new(name);
        m.inject(&[1u8; 60]);
        Box::new(m)
    }

    /// Sends one frame on worker `w`'s handle; returns the sent count.
    fn send(q: &mut [Queue], w: usize) -> usize {
        let mut pool = BufPool::new(4);
        let mut b = Batch::default();
        b.push(PacketBuf::from_frame(&[2u8; 60]));
        q[w].tx_burst(&mut b, &mut pool).unwrap().sent
    }

    #[test]
    fn queues_spread_over_workers() {
        // As many queues as workers: each its own.
        let q = distribute(vec![mem("a"), mem("b")], 2, 0).unwrap();
        assert_eq!((q[0].name(), q[1].name()), ("a", "b"));
        assert!(q[0].rx_pending() && q[1].rx_pending());

        // One queue, four workers: every worker transmits, worker rotate % 4 receives.
        let mut q = distribute(vec![mem("one")], 4, 6).unwrap();
        let receivers: Vec<bool> = q.iter().map(|h| h.rx_pending()).collect();
        assert_eq!(receivers, [false, false, true, false]);
        for w in 0..4 {
            assert_eq!(send(&mut q, w), 1);
        }
        let mut rx = Batch::default();
        let mut pool = BufPool::new(4);
        assert_eq!(q[0].rx_burst(&mut rx, &mut pool, 8).unwrap(), 0);
        assert_eq!(q[2].rx_burst(&mut rx, &mut pool, 8).unwrap(), 1);

        // Two queues, four workers: q0 shared by workers 0 and 2, q1 by 1 and 3.
        let q = distribute(vec![mem("q0"), mem("q1")], 4, 0).unwrap();
        let names: Vec<&str> = q.iter().map(|h| h.name()).collect();
        assert_eq!(names, ["q0", "q1", "q0", "q1"]);
        let receivers: Vec<bool> = q.iter().map(|h| h.rx_pending()).collect();
        assert_eq!(receivers, [true, true, false, false]);

        let e = distribute(vec![mem("a"), mem("b"), mem("c")], 2, 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("3 queues cannot be spread over 2 workers"),
            "{e}"
        );
    }
}
