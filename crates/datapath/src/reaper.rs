//! Closing queues off the workers: the reaper threads.
//!
//! Closing a backend is slow in the kernel, not in qbridge: an AF_PACKET socket waits for RCU
//! grace periods when it releases its fanout group and ring (`synchronize_net`: ~20 ms per
//! socket, 44 s for 2000), a TAP queue for one more and, with its last queue, for the interface's
//! unregistration. A worker that closed the queues of deleted ports itself stopped forwarding
//! for all that time — 1000 AF_PACKET ports deleted in one batch stalled every other port for
//! ~44 s (issue 17, item 5). So a worker only takes a queue out of its loop (epoll, counters)
//! and hands it here; [`REAPER_THREADS`] threads close sockets, several at once (their grace
//! periods overlap), and as many more close what others can see (below), so that a command
//! never waits behind sockets. Measured (2 workers, debug build): 1000 AF_PACKET ports
//! deleted in one batch answer in 0.14 s with pings between two other ports all answered;
//! 1000 TAP ports in 6.5 s with four threads for TAPs (19.6 s with one), every TAP gone by
//! then (before: 9 s of 88.8 % loss on the other ports, TAPs still there 10 s after the answer).
//!
//! Closes that others can see — a TAP interface that goes away, a pcap file that is finished
//! ([`Port::visible_close`](qbridge_io::Port::visible_close)) — are counted while pending, and
//! the control thread waits for them ([`Reaper::wait_visible`]) before it answers the
//! command: when `link del dev T` has answered, interface `T` is gone and `link add T type
//! tap` works. Invisible closes (sockets) are not waited for.
//!
//! Threads: the reaper threads, fed by every worker through two channels (visible closes,
//! the rest); the counter of pending visible closes is read by the control thread.

use crate::queue::Queue;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Threads closing sockets, and threads closing what others see. Each close mostly waits (for
/// grace periods, an interface's unregistration), so a few threads cut the time of a mass
/// deletion without using CPU.
pub const REAPER_THREADS: usize = 4;

/// Visible closes handed over and not finished yet.
#[derive(Debug, Default)]
struct Pending {
    count: Mutex<usize>,
    done: Condvar,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A worker's way to hand queues over (cloned per worker).
#[derive(Debug, Clone)]
pub(crate) struct ReaperHandle {
    /// Visible closes, to their own thread: the command waits for them, not for the sockets
    /// queued before them.
    visible: mpsc::Sender<Queue>,
    other: mpsc::Sender<Queue>,
    pending: Arc<Pending>,
}

impl ReaperHandle {
    /// Closes `queue` on a reaper thread. A visible close is counted before this returns, so
    /// a [`Reaper::wait_visible`] that starts after it waits for it too.
    pub(crate) fn close(&self, queue: Queue) {
        let visible = queue.visible_close();
        if visible {
            *self.pending.lock() += 1;
        }
        let tx = if visible { &self.visible } else { &self.other };
        if let Err(mpsc::SendError(q)) = tx.send(queue) {
            // The reaper is gone (shutting down): close here.
            close_now(q, visible, &self.pending);
        }
    }
}

/// The reaper threads (see the module documentation).
#[derive(Debug)]
pub(crate) struct Reaper {
    handle: Option<ReaperHandle>,
    threads: Vec<JoinHandle<()>>,
}

fn close_now(q: Queue, visible: bool, pending: &Pending) {
    let name = q.name().to_owned();
    if let Err(e) = q.close() {
        tracing::warn!("port {name}: {e}");
    }
    if visible {
        let mut n = pending.lock();
        *n = n.saturating_sub(1);
        if *n == 0 {
            pending.done.notify_all();
        }
    }
}

impl Reaper {
    /// [`REAPER_THREADS`] threads for visible closes, as many for the rest.
    pub(crate) fn start() -> Result<Reaper, std::io::Error> {
        let (visible, visible_rx) = mpsc::channel::<Queue>();
        let (other, other_rx) = mpsc::channel::<Queue>();
        let pending = Arc::new(Pending::default());
        let mut threads = Vec::with_capacity(2 * REAPER_THREADS);
        let visible_rx = Arc::new(Mutex::new(visible_rx));
        let other_rx = Arc::new(Mutex::new(other_rx));
        for i in 0..2 * REAPER_THREADS {
            let rx = if i < REAPER_THREADS {
                visible_rx.clone()
            } else {
                other_rx.clone()
            };
            let pending = pending.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("qbridge-reaper{i}"))
                    .spawn(move || loop {
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(q) = next else { return };
                        let visible = q.visible_close();
                        close_now(q, visible, &pending);
                    })?,
            );
        }
        Ok(Reaper {
            handle: Some(ReaperHandle {
                visible,
                other,
                pending,
            }),
            threads,
        })
    }

    pub(crate) fn handle(&self) -> ReaperHandle {
        self.handle.clone().expect("the reaper runs until stopped")
    }

    /// Waits until every visible close handed over so far is done, at most `limit`; returns
    /// whether they all are.
    pub(crate) fn wait_visible(&self, limit: Duration) -> bool {
        let Some(h) = &self.handle else { return true };
        let deadline = Instant::now() + limit;
        let mut n = h.pending.lock();
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = h
                .pending
                .done
                .wait_timeout(n, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Closes what is still queued and ends the threads (after the workers stopped: they hold
    /// handles, and the threads end when the last handle is gone).
    pub(crate) fn stop(&mut self) {
        self.handle = None;
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("a reaper thread panicked");
            }
        }
    }
}
