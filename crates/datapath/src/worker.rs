//! A datapath worker: one thread that owns one queue of each port (or a share of a
//! single-queue port), and forwards what its queues receive with the plan it was last given.
//!
//! Loop: `epoll_wait` on its queues' descriptors and its wake-up eventfd (timeout 0 when a
//! queue without a descriptor has frames waiting, else at most 100 ms) → per ready queue one
//! `rx_burst` of up to [`BURST`] frames → the bridge's
//! [`Forwarder::process`](qbridge_bridge::Forwarder::process) → for each output batch the
//! [`transmit`] stage and one transmit burst on *this worker's* queue of the egress port → the
//! queue's backend drops, by name, into the switch's counters (this worker's block).
//!
//! Between loop turns the worker reads its mailbox: a new plan together with the queues it
//! brings and takes away (applied at once, so a worker never forwards with a plan whose ports
//! it has no queue for), a once-a-second tick, or stop. Frames of one flow reach one worker
//! (the fanout hash, or a single-queue port's one receiver), which forwards them in order.
//!
//! A queue that fails with a link-down error is reported to the control thread, which takes
//! the port down for every worker; the worker stops polling it at once.
//!
//! With the eBPF fast path on, the worker also polls its socket on the upcall device (the
//! program's misses); what is done with them — forwarded in order, a new flow's frame alone,
//! its flow installed — is the fast path's (`crate::fastpath::upcall`), which drives the
//! worker's pipeline and transmit through the worker's [`Host`] implementation.
//!
//! Queues the worker loses (a deleted or replaced port, a link gone down) leave its epoll set
//! and counters here and are closed by the reaper threads (`crate::reaper`): closing takes the
//! kernel milliseconds per socket, which must not stop forwarding on the other ports.
//!
//! **Flood fairness.** A flood costs a copy per target port: one broadcast on a bridge of 1000
//! TAPs is 999 copies and 999 writes, so ports that flood could take a worker from every
//! other port (1000 new TAPs sending router solicitations and MLD reports kept both workers
//! busy for 90 s and two existing hosts lost all traffic for 60 s). Each loop turn (a round:
//! one burst per ready queue) therefore has [`ROUND_FLOOD_COPIES`] of flood work, shared
//! equally by the ready queues as credit (deficit round robin): a queue's burst may flood
//! with the credit it has, kept across rounds up to [`max_flood_credit`], within what is
//! left of the round's; a flood it cannot pay for is dropped as `flood_rate` on its ingress
//! port. A round's flood work is bounded by [`ROUND_FLOOD_COPIES`], so every queue is served
//! again soon; frames to one port (known unicast) never use credit. With few ports flooding
//! nothing changes: a queue alone in its round may flood 16 384 copies per round.

use crate::dropwatch::{DropWatch, WatchScratch};
use crate::fastpath::upcall::{Egress, FastWorker, Host};
use crate::fastpath::FastShared;
use crate::mirror_sink::{write_sinks, Sinks};
use crate::queue::Queue;
use crate::reaper::ReaperHandle;
use crate::shared::{Ctl, PortShared, PuntGate};
use crate::tracelive::TraceLive;
use crate::transmit::{transmit, TransmitReport, TransmitScratch};
use qbridge_bridge::{DropReason, FastClass, Outputs, Plan, PortId};
use qbridge_io::{BackendDrops, IoError};
use qbridge_packet::Batch;
use qbridge_wire::Tpid;
use rustix::event::{epoll, Timespec};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// Most frames taken from one queue per receive.
pub const BURST: usize = 256;
/// Flood copies one round of the worker loop may make, shared equally by the queues served
/// in it (see the module documentation).
pub const ROUND_FLOOD_COPIES: u64 = 16_384;
/// Least credit a queue may keep: enough for one flood to this many ports, however many
/// queues share a round.
const MIN_FLOOD_CREDIT: u64 = 4096;

/// The most flood credit a queue keeps when `quantum` is its share of a round: two shares,
/// and at least [`MIN_FLOOD_CREDIT`] (so a flood to many ports is paid for after enough
/// rounds, and a queue that saved up cannot flood much more than its share at once).
pub fn max_flood_credit(quantum: u64) -> u64 {
    (2 * quantum).max(MIN_FLOOD_CREDIT)
}

/// Longest wait in `epoll_wait`.
const POLL_TIMEOUT_MS: i64 = 100;
/// epoll token of the wake-up eventfd; queue tokens are `generation << 16 | port id`.
const WAKE_TOKEN: u64 = u64::MAX;
/// epoll token of the fast path's upcall queue.
const UPCALL_TOKEN: u64 = u64::MAX - 1;

/// A queue handed to a worker, with the port's shared counters.
#[derive(Debug)]
pub(crate) struct QueueEntry {
    pub queue: Queue,
    /// `generation << 16 | port id`: tells this opening of the port from any other.
    pub token: u64,
    pub shared: Arc<PortShared>,
}

/// What the control thread sends a worker.
#[derive(Debug)]
pub(crate) enum ToWorker {
    /// Forward with `plan` from now on; first install the `attach` queues (replacing the
    /// port's queue if it had one) and close the queues of the `detach` ports. `done` is
    /// answered once applied.
    Update {
        plan: Arc<Plan>,
        attach: Vec<(u16, QueueEntry)>,
        detach: Vec<u16>,
        done: mpsc::Sender<()>,
        /// The files of the plan's `dst pcap` mirror sessions, by sink index.
        sinks: Sinks,
        /// The fast path's configuration generation of this plan (0 without a fast path).
        fast_gen: u32,
    },
    /// After a bridge-FDB command (decision 85): answered once the worker has finished what
    /// it was doing (every install it had begun has checked its FDB entries again); the
    /// flows it refused for the configuration may be made again.
    FdbBarrier { done: mpsc::Sender<()> },
    /// The fast path is on: this worker's socket on the upcall device, and what the engine
    /// shares with the workers (`crate::fastpath`).
    Upcall {
        queue: Queue,
        shared: Arc<FastShared>,
    },
    /// Once a second: every queue's [`Port::tick`](qbridge_io::Port::tick).
    Tick,
    /// Send `frame` out of port `port` as it is (a BPDU of the spanning tree): no forwarding
    /// state applies. Sent to worker 0, which holds queue 0 of every port.
    Inject { port: u16, frame: Vec<u8> },
    /// Close every queue and end the thread.
    Stop,
}

#[derive(Debug)]
struct Entry {
    queue: Queue,
    token: u64,
    shared: Arc<PortShared>,
    /// Backend drops already counted into the switch.
    seen: BackendDrops,
    /// Reported failed: not polled until the control thread replaces or removes it.
    failed: bool,
    /// Flood copies this queue's bursts may still make (see the module documentation).
    flood_credit: u64,
}

/// One worker's state; see the module documentation.
#[derive(Debug)]
pub(crate) struct Worker {
    index: usize,
    plan: Arc<Plan>,
    core: qbridge_bridge::Forwarder,
    epoll: OwnedFd,
    wake: Arc<OwnedFd>,
    mailbox: mpsc::Receiver<ToWorker>,
    control: mpsc::Sender<Ctl>,
    queues: Vec<Option<Entry>>,
    ready: Vec<u16>,
    outputs: Outputs,
    rx: Batch,
    scratch: TransmitScratch,
    epoch: Instant,
    /// Files of the plan's `dst pcap` mirror sessions (`crate::mirror_sink`).
    sinks: Sinks,
    /// Where queues the worker loses are closed, off its loop (`crate::reaper`).
    reaper: ReaperHandle,
    /// The bound on trapped BPDUs in flight to the control thread.
    punt: Arc<PuntGate>,
    /// The eBPF fast path's upcalls and flow installs, when it is on (`crate::fastpath`).
    fast: Option<Box<FastWorker>>,
    /// `monitor drops` (`crate::dropwatch`), and the heads of the batch being forwarded while
    /// someone watches.
    drops: Arc<DropWatch>,
    watch: WatchScratch,
    /// `trace live` (`crate::tracelive`), and whether the batch being forwarded is the fast
    /// path's misses.
    trace: Arc<TraceLive>,
    in_upcall: bool,
    /// The fast path's shared state while it runs (a traced miss's reason reads its flows;
    /// `fast` is lent out while the upcall is serviced).
    fast_shared: Option<Arc<FastShared>>,
}

impl Worker {
    // Each argument is a separate link of the worker to the engine; a struct bundling them
    // would only be built here.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        plan: Arc<Plan>,
        wake: Arc<OwnedFd>,
        mailbox: mpsc::Receiver<ToWorker>,
        control: mpsc::Sender<Ctl>,
        epoch: Instant,
        reaper: ReaperHandle,
        punt: Arc<PuntGate>,
        drops: Arc<DropWatch>,
        trace: Arc<TraceLive>,
    ) -> Result<Worker, rustix::io::Errno> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &ep,
            &*wake,
            epoll::EventData::new_u64(WAKE_TOKEN),
            epoll::EventFlags::IN,
        )?;
        Ok(Worker {
            index,
            plan,
            core: qbridge_bridge::Forwarder::new(index),
            epoll: ep,
            wake,
            mailbox,
            control,
            queues: Vec::new(),
            ready: Vec::with_capacity(64),
            outputs: Outputs::new(),
            rx: Batch::with_capacity(BURST),
            scratch: TransmitScratch::default(),
            epoch,
            sinks: Arc::from(Vec::new()),
            reaper,
            punt,
            fast: None,
            drops,
            watch: WatchScratch::default(),
            trace,
            in_upcall: false,
            fast_shared: None,
        })
    }

    /// Monotonic nanoseconds since the engine started (never 0), the clock of every worker.
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Runs until [`ToWorker::Stop`] (or the control thread is gone).
    pub fn run(mut self) {
        tracing::debug!("worker {} running", self.index);
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            let pending = self
                .queues
                .iter()
                .flatten()
                .any(|e| !e.failed && e.queue.rx_pending());
            let timeout = Timespec {
                tv_sec: 0,
                tv_nsec: if pending {
                    0
                } else {
                    POLL_TIMEOUT_MS * 1_000_000
                },
            };
            events.clear();
            if let Err(e) = epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                if e != rustix::io::Errno::INTR {
                    tracing::error!("worker {}: epoll_wait: {e}", self.index);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            self.ready.clear();
            let mut woken = false;
            let mut upcalls = false;
            for ev in &events {
                let token = ev.data.u64();
                if token == WAKE_TOKEN {
                    woken = true;
                    continue;
                }
                if token == UPCALL_TOKEN {
                    upcalls = true;
                    continue;
                }
                let id = (token & 0xffff) as u16;
                if let Some(Some(e)) = self.queues.get(id as usize) {
                    if e.token == token && !e.failed {
                        self.ready.push(id);
                    }
                }
            }
            if pending {
                for (i, e) in self.queues.iter().enumerate() {
                    if let Some(e) = e {
                        if !e.failed && e.queue.rx_pending() && !self.ready.contains(&(i as u16)) {
                            self.ready.push(i as u16);
                        }
                    }
                }
            }
            let quantum = ROUND_FLOOD_COPIES / (self.ready.len().max(1) as u64);
            let mut round_left = ROUND_FLOOD_COPIES;
            for i in 0..self.ready.len() {
                let id = self.ready[i];
                self.service_rx(id, quantum, &mut round_left);
            }
            if upcalls || self.fast.as_ref().is_some_and(|f| f.rx_pending()) {
                self.service_upcall();
            }
            if woken {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&*self.wake, &mut buf);
            }
            loop {
                match self.mailbox.try_recv() {
                    Ok(ToWorker::Update {
                        plan,
                        attach,
                        detach,
                        done,
                        sinks,
                        fast_gen,
                    }) => {
                        self.update(plan, attach, detach);
                        self.sinks = sinks;
                        if let Some(f) = self.fast.as_mut() {
                            f.follow_plan(fast_gen);
                        }
                        let _ = done.send(());
                    }
                    Ok(ToWorker::FdbBarrier { done }) => {
                        if let Some(f) = self.fast.as_mut() {
                            f.forget_refusals();
                        }
                        let _ = done.send(());
                    }
                    Ok(ToWorker::Upcall { queue, shared }) => self.start_upcall(queue, shared),
                    Ok(ToWorker::Tick) => self.tick(),
                    Ok(ToWorker::Inject { port, frame }) => self.inject(port, &frame),
                    Ok(ToWorker::Stop) | Err(mpsc::TryRecvError::Disconnected) => {
                        self.close_all();
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
        }
    }

    fn update(&mut self, plan: Arc<Plan>, attach: Vec<(u16, QueueEntry)>, detach: Vec<u16>) {
        for id in detach {
            if let Some(e) = self.queues.get_mut(id as usize).and_then(Option::take) {
                self.close_entry(e);
            }
        }
        for (id, mut q) in attach {
            let i = id as usize;
            // Sockets opened paused start receiving now, as the old queue leaves.
            if let Err(e) = q.queue.start() {
                tracing::warn!("port {}: {e}", q.queue.name());
            }
            if self.queues.len() <= i {
                self.queues.resize_with(i + 1, || None);
            }
            if let Some(old) = self.queues[i].take() {
                self.close_entry(old);
            }
            if let Some(fd) = q.queue.fd() {
                if let Err(e) = epoll::add(
                    &self.epoll,
                    fd,
                    epoll::EventData::new_u64(q.token),
                    epoll::EventFlags::IN,
                ) {
                    tracing::error!("worker {}: epoll_ctl for port {id}: {e}", self.index);
                }
            }
            self.queues[i] = Some(Entry {
                queue: q.queue,
                token: q.token,
                shared: q.shared,
                seen: BackendDrops::default(),
                failed: false,
                flood_credit: 0,
            });
        }
        self.plan = plan;
    }

    fn close_entry(&mut self, mut e: Entry) {
        // Count what the backend dropped since the last burst before it goes.
        fold_drops(&self.plan, self.index, &mut e);
        if let Some(fd) = e.queue.fd() {
            let _ = epoll::delete(&self.epoll, fd);
        }
        // Closing waits for the kernel (grace periods, an interface's unregistration): not
        // here, where it would stop every other port's forwarding.
        self.reaper.close(e.queue);
    }

    fn close_all(&mut self) {
        let entries: Vec<Entry> = self.queues.iter_mut().filter_map(Option::take).collect();
        for e in entries {
            self.close_entry(e);
        }
        tracing::debug!("worker {} stopped", self.index);
    }

    fn tick(&mut self) {
        if let Some(f) = self.fast.as_mut() {
            f.tick();
        }
        for i in 0..self.queues.len() {
            let Some(Some(e)) = self.queues.get_mut(i) else {
                continue;
            };
            if e.failed {
                continue;
            }
            match e.queue.tick() {
                Ok(t) => {
                    if let Some(now) = t.offloads {
                        let mut o = e.shared.lock_offloads();
                        let before = *o;
                        *o = Some(now);
                        drop(o);
                        let newly = now.refused_tags & !before.map_or(0, |b| b.refused_tags);
                        if newly != 0 {
                            tracing::info!(
                                "port {}: the kernel refused super-frames with tag depths \
                                 {:?} (its device would not segment them); they are segmented \
                                 in software, the direct path is tried again every {} s",
                                e.queue.name(),
                                depths(newly),
                                qbridge_io::afpacket::REFUSAL_TICKS
                            );
                        }
                        // Once, by the first worker to see it (the state is shared).
                        if t.offloads_changed && before != Some(now) {
                            let on = |b: bool| if b { "on" } else { "off" };
                            tracing::info!(
                                "interface {}: device offloads now tso4 {} tso6 {} tso_ecn {} \
                                 sg {} csum4 {} csum6 {}",
                                e.queue.name(),
                                on(now.tso4),
                                on(now.tso6),
                                on(now.tso_ecn),
                                on(now.sg),
                                on(now.csum4),
                                on(now.csum6)
                            );
                        }
                    }
                }
                Err(err) => tracing::debug!("port {}: tick: {err}", e.queue.name()),
            }
            fold_drops(&self.plan, self.index, e);
        }
    }

    /// One receive burst on queue `id`, forwarded and transmitted; `quantum` is the queue's
    /// share of the round's flood work, `round_left` what is left of the round's (the burst
    /// may use the queue's credit up to that).
    fn service_rx(&mut self, id: u16, quantum: u64, round_left: &mut u64) {
        let Some(Some(e)) = self.queues.get_mut(id as usize) else {
            return;
        };
        e.flood_credit = (e.flood_credit + quantum).min(max_flood_credit(quantum));
        let usable = e.flood_credit.min(*round_left);
        self.core.set_flood_credit(Some(usable));
        debug_assert!(self.rx.is_empty());
        let received = e
            .queue
            .rx_burst(&mut self.rx, &mut self.outputs.pool, BURST);
        fold_drops(&self.plan, self.index, e);
        match received {
            Ok(0) => return,
            Ok(n) => {
                if let Some(c) = e.shared.rx_frames_by_worker.get(self.index) {
                    c.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Err(err) => {
                self.outputs.pool.put_all(&mut self.rx);
                self.failed(id, &err);
                return;
            }
        }
        let fast_tap = crate::fastpath::upcall::reads_misses(&e.shared);
        let token = e.token;
        match self.fast.take() {
            // A TAP port the fast path serves: what it reads are the program's misses.
            Some(mut f) if fast_tap => {
                f.forward_tap(self, token);
                self.fast = Some(f);
            }
            fast => {
                self.fast = fast;
                for p in self.rx.pkts.iter_mut() {
                    p.port = id;
                }
                let now = self.now_ns();
                self.forward(now);
            }
        }
        let used = usable - self.core.flood_credit().unwrap_or(0).min(usable);
        *round_left -= used;
        if let Some(Some(e)) = self.queues.get_mut(id as usize) {
            e.flood_credit -= used.min(e.flood_credit);
        }
        self.send_outputs();
    }

    /// Writes the mirror copies, hands up the trapped frames and transmits every output
    /// batch of the last [`Forwarder::process`](qbridge_bridge::Forwarder::process).
    fn send_outputs(&mut self) {
        if !self.outputs.mirror_sinks.is_empty() {
            write_sinks(&self.plan, self.index, &self.sinks, &mut self.outputs);
        }
        if !self.outputs.punt.is_empty() {
            self.punt();
        }
        for j in 0..self.outputs.ports.len() {
            if !self.outputs.ports[j].is_empty() {
                self.tx_port(j);
            }
        }
    }

    fn start_upcall(&mut self, queue: Queue, shared: Arc<FastShared>) {
        self.fast_shared = Some(shared.clone());
        let f = FastWorker::new(queue, shared, BURST);
        if let Some(fd) = f.fd() {
            if let Err(e) = epoll::add(
                &self.epoll,
                fd,
                epoll::EventData::new_u64(UPCALL_TOKEN),
                epoll::EventFlags::IN,
            ) {
                tracing::error!(
                    "worker {}: epoll_ctl for the upcall socket: {e}",
                    self.index
                );
            }
        }
        self.fast = Some(Box::new(f));
    }

    /// One burst of the fast path's misses (`crate::fastpath::upcall`).
    fn service_upcall(&mut self) {
        if let Some(mut f) = self.fast.take() {
            f.service(self, BURST, ROUND_FLOOD_COPIES);
            self.fast = Some(f);
        }
    }

    /// Counts `n` frames this worker received for port `id` (`link show -s`'s per-worker
    /// receive counts).
    fn count_worker_rx(&self, id: u16, n: u64) {
        if let Some(Some(e)) = self.queues.get(id as usize) {
            if let Some(c) = e.shared.rx_frames_by_worker.get(self.index) {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Forwards the frames patch link end `id` has waiting on this worker (an earlier turn's
    /// sends through the link), as its receive would.
    fn drain_patch(&mut self, id: u16) {
        debug_assert!(self.rx.is_empty());
        loop {
            let Some(Some(e)) = self.queues.get_mut(id as usize) else {
                return;
            };
            if e.failed || !e.queue.rx_pending() {
                return;
            }
            let n = match e
                .queue
                .rx_burst(&mut self.rx, &mut self.outputs.pool, BURST)
            {
                Ok(n) => n,
                Err(err) => {
                    self.outputs.pool.put_all(&mut self.rx);
                    self.failed(id, &err);
                    return;
                }
            };
            if n == 0 {
                return;
            }
            self.count_worker_rx(id, n as u64);
            for p in self.rx.pkts.iter_mut() {
                p.port = id;
            }
            let now = self.now_ns();
            self.forward(now);
            self.send_outputs();
        }
    }

    /// Hands the trapped BPDUs of the last batch to the control thread (at most
    /// [`crate::shared::PUNT_MAX_IN_FLIGHT`] in flight; beyond, counted and dropped).
    #[cold]
    #[inline(never)]
    fn punt(&mut self) {
        for pkt in self.outputs.punt.pkts.drain(..) {
            if self.punt.enter() {
                let msg = Ctl::Bpdu {
                    port: pkt.port,
                    frame: pkt.frame().to_vec(),
                };
                if self.control.send(msg).is_err() {
                    self.punt.leave();
                }
            }
            self.outputs.pool.put(pkt);
        }
    }

    /// Sends `frame` out of port `port` now, through the transmit stage of this worker's
    /// queue of it (a BPDU: no forwarding state applies), counted in the port's transmit
    /// counters. A port this worker has no queue of (gone since) drops it, counted
    /// `tx_error`.
    fn inject(&mut self, port: u16, frame: &[u8]) {
        let mut pkt = self.outputs.pool.get();
        pkt.extend_from_slice(frame);
        pkt.port = port;
        // Counted sent as the frame path counts its frames: before the transmit stage, whose
        // failures are drops.
        self.plan
            .count_tx(PortId(port), self.index, 1, frame.len() as u64);
        self.outputs.batch_mut(PortId(port)).push(pkt);
        self.tx_port(port as usize);
    }

    /// The transmit stage of port `j` on this worker's queue of it.
    fn tx_port(&mut self, j: usize) {
        let id = PortId(j as u16);
        let batch = &mut self.outputs.ports[j];
        let entry = match self.queues.get_mut(j) {
            Some(Some(e)) if !e.failed => e,
            _ => {
                // The plan forwards only to running ports, and a worker gets a port's queue
                // with the plan that starts using it; a frame here means the queue failed
                // within this batch.
                let n = batch.len() as u64;
                self.plan.count_drop(id, self.index, DropReason::TxError, n);
                self.outputs.pool.put_all(batch);
                return;
            }
        };
        let tpid = self.plan.port_tpid(id);
        let is_tag = |t: Tpid| t == tpid || t.is_well_known();
        let caps = entry.queue.caps();
        let (r, failed) = transmit(
            &mut *entry.queue,
            caps,
            &is_tag,
            batch,
            &mut self.outputs.pool,
            &mut self.scratch,
        );
        count_transmit(&self.plan, id, self.index, &r);
        if r.gro_frames != 0 {
            entry
                .shared
                .tx_gro_frames
                .fetch_add(r.gro_frames, Ordering::Relaxed);
            entry
                .shared
                .tx_gro_segments
                .fetch_add(r.gro_segments, Ordering::Relaxed);
        }
        if r.sw_gso != 0 {
            entry
                .shared
                .tx_sw_gso
                .fetch_add(r.sw_gso, Ordering::Relaxed);
            entry
                .shared
                .tx_gso_refused
                .fetch_add(r.gso_refused, Ordering::Relaxed);
        }
        if let Some(err) = failed {
            self.failed(j as u16, &err);
        }
    }

    /// A burst failed. A link-down error is reported to the control thread (which takes the
    /// port down on every worker) and the queue is not polled any more; anything else is
    /// logged and the queue stays.
    fn failed(&mut self, id: u16, err: &IoError) {
        let Some(Some(e)) = self.queues.get_mut(id as usize) else {
            return;
        };
        if err.is_link_down() {
            e.failed = true;
            if let Some(fd) = e.queue.fd() {
                let _ = epoll::delete(&self.epoll, fd);
            }
            let _ = self.control.send(Ctl::QueueFailed {
                token: e.token,
                error: err.to_string(),
            });
        } else {
            tracing::warn!("port {}: {err}", e.queue.name());
        }
    }
}

/// What the fast path drives of a worker (`crate::fastpath::upcall`).
impl Worker {
    /// Forwards the batch in `rx` through the pipeline; while someone watches drops, tells
    /// them of the frames it dropped (`crate::dropwatch`: one relaxed load per batch when no
    /// one does).
    /// While `trace live` runs, the frames it wants are explained before the batch is
    /// forwarded and told with what the pipeline did after (`crate::tracelive`).
    fn forward(&mut self, now: u64) {
        let watching = self.drops.active();
        if !(watching | self.trace.active()) {
            self.core
                .process(&self.plan, now, &mut self.rx, &mut self.outputs);
            return;
        }
        let claimed = if self.trace.active() {
            // A miss's reason, read from the program's flow table before the pipeline may
            // install the frame's flow.
            let miss = match (&self.fast_shared, self.in_upcall) {
                (Some(f), true) => Some(crate::tracelive::Misses {
                    fast: f,
                    index: &|id| Host::port_index(self, id),
                }),
                _ => None,
            };
            self.trace.claim(&self.rx.pkts, now, miss.as_ref())
        } else {
            Vec::new()
        };
        if watching {
            self.watch.capture(&self.rx);
        }
        self.core
            .process(&self.plan, now, &mut self.rx, &mut self.outputs);
        if watching {
            self.watch.report(&self.drops, &self.core, &self.plan, now);
        }
        self.trace.tell(claimed, &self.core);
    }
}

impl Host for Worker {
    fn port_index(&self, id: u16) -> Option<u16> {
        match self.queues.get(id as usize) {
            Some(Some(e)) if !e.failed => Some(crate::fastpath::port_index(e.token)),
            _ => None,
        }
    }

    fn egress(&self, id: u16) -> Option<Egress> {
        let e = self
            .queues
            .get(id as usize)?
            .as_ref()
            .filter(|e| !e.failed)?;
        Some(Egress::of(e.token, &e.shared))
    }

    fn count_worker_rx(&self, id: u16, n: u64) {
        Worker::count_worker_rx(self, id, n);
    }

    fn rx(&mut self) -> &mut Batch {
        &mut self.rx
    }

    fn outputs(&mut self) -> &mut Outputs {
        &mut self.outputs
    }

    fn outputs_ref(&self) -> &Outputs {
        &self.outputs
    }

    fn process(&mut self) {
        let now = self.now_ns();
        self.in_upcall = true;
        self.forward(now);
        self.in_upcall = false;
    }

    fn send_outputs(&mut self) {
        Worker::send_outputs(self);
    }

    fn fast_class(&self, i: usize) -> Option<FastClass> {
        self.core.fast_class(i)
    }

    fn drain_patch(&mut self, id: u16) {
        Worker::drain_patch(self, id);
    }

    fn set_flood_credit(&mut self, credit: Option<u64>) {
        self.core.set_flood_credit(credit);
    }

    fn plan(&self) -> &Plan {
        &self.plan
    }
}

/// Counts the queue's new backend drops into the switch (worker `worker`'s counter block).
fn fold_drops(plan: &Plan, worker: usize, e: &mut Entry) {
    let now = e.queue.drops();
    if now == e.seen {
        return;
    }
    let id = PortId((e.token & 0xffff) as u16);
    let before = by_reason(&e.seen);
    for (k, (reason, n)) in by_reason(&now).into_iter().enumerate() {
        let delta = n.saturating_sub(before[k].1);
        if delta != 0 {
            plan.count_drop(id, worker, reason, delta);
        }
    }
    e.seen = now;
}

/// Each backend drop count with the switch drop reason it is counted under.
fn by_reason(d: &BackendDrops) -> [(DropReason, u64); 9] {
    [
        (DropReason::RxTruncated, d.rx_truncated),
        (DropReason::RxFiltered, d.rx_filtered),
        (DropReason::RxShort, d.rx_short),
        (DropReason::RxRingFull, d.rx_ring_full),
        (DropReason::VxlanMalformed, d.vxlan_malformed),
        (DropReason::VxlanWrongVni, d.vxlan_wrong_vni),
        (DropReason::VxlanNoRemote, d.vxlan_no_remote),
        (DropReason::VxlanUnmappedVlan, d.vxlan_unmapped_vlan),
        (DropReason::VxlanUnmappedVni, d.vxlan_unmapped_vni),
    ]
}

/// Counts a transmit report's drops into the switch.
fn count_transmit(plan: &Plan, id: PortId, worker: usize, r: &TransmitReport) {
    let counts = [
        (DropReason::TxQueueFull, r.tx.queue_full),
        (DropReason::TxKernelDrop, r.tx.kernel_drop),
        (DropReason::TxTooLong, r.tx.too_long),
        (DropReason::TxError, r.tx.error + r.fixup_errors),
    ];
    for (reason, n) in counts {
        if n != 0 {
            plan.count_drop(id, worker, reason, n as u64);
        }
    }
}

fn depths(mask: u8) -> Vec<u8> {
    (0..8u8).filter(|&i| mask & (1 << i) != 0).collect()
}
