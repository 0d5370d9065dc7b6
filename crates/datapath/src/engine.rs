//! The engine's control loop: one thread owns the [`Session`] (switch + configuration) and the
//! bookkeeping of every port's backend; N worker threads ([`crate::worker`]) own the queues and
//! forward.
//!
//! Control commands arrive over a channel from the socket and metrics threads and are executed
//! here, never on a worker: a command changes the session, then the backends are reconciled
//! with it (new ports opened — every queue of every new port before anything is closed; if one
//! cannot be opened the command is undone —, deleted ports closed, device MTUs raised for
//! envelope frames, receive filters following the bridge configuration), and then each worker
//! is sent the new compiled plan together with the queues it gains and loses, in one message
//! it applies between two batches. A worker therefore never forwards with half a command, and
//! frames of ports and VLANs a command does not touch are not disturbed. The command returns
//! once every worker applied it.
//!
//! Once a second: FDB ageing (the FDB is shared with the workers and safe to change under
//! them), the link watch (AF_PACKET ports whose interface went down are closed and retried),
//! and a tick to every worker (device offloads re-read, kernel drop statistics).
//!
//! A worker whose queue fails with a link-down error reports it here; the port goes down for
//! every worker. The kernel's link notifications run the link watch at once
//! ([`Ctl::LinkEvent`], `link.rs`). The spanning trees (`stp.rs`) tick once a second, take the
//! BPDUs the workers trap ([`Ctl::Bpdu`]) and follow every command and link change.
//!
//! The control thread's rooms, each an `impl Engine` of its own: this module (the loop,
//! commands and their undo, handing plans and queues to the workers, the state file, mirror
//! files, metrics); [`ports`] (the port lifecycle: reconcile, open, reopen, status);
//! [`link`] (link state, MTU, the link watch); [`rx_filter`] (AF_PACKET receive filters);
//! [`learn_watch`] (MAC flapping, learning limits). What the threads share is
//! `crate::shared`, which this module imports and never the other way round.

mod bond;
mod fast;
mod fdb_batch;
mod learn_watch;
mod link;
mod ports;
mod rx_filter;
mod stp;
mod trace;
mod vxlan;

use crate::mirror_sink::{MirrorSink, Sinks};
use crate::monitor::{Monitor, Monitors};
use crate::queue::Opened;
use crate::reaper::Reaper;
use crate::shared::{Ctl, Handle, PuntGate};
use crate::worker::{QueueEntry, ToWorker, Worker};
use ports::Slot;
use qbridge_bridge::Plan;
use qbridge_control::{
    parse_words, Command, ControlError, FdbCommand, LinkCommand, MirrorCommand, Op, OutputOptions,
    PortSpec, Response, Session, Snapshot, VlanCommand,
};
use qbridge_io::iflock::IfaceLock;
use rustix::event::{eventfd, EventfdFlags};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const NS_PER_SEC: u64 = 1_000_000_000;
/// How long a command waits for a worker to apply it before logging it as late.
const APPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a command waits for the visible closes it caused (TAP interfaces removed, pcap
/// files finished; `crate::reaper`) before answering anyway, with a log line: a bound, not a
/// figure to reach (1000 TAPs take ~6.5 s).
const VISIBLE_CLOSE_TIMEOUT: Duration = Duration::from_secs(25);

/// Options of the engine that do not come from commands.
#[derive(Debug, Default)]
pub struct EngineConfig {
    /// Where pcap ports write (`--pcap-dir`); without it pcap ports are refused.
    pub pcap_dir: Option<PathBuf>,
    /// Who may read the pcap and mirror files the daemon creates in `pcap_dir` (0600, or
    /// 0640 with the `--socket-group` group).
    pub file_access: qbridge_io::pcap::FileAccess,
    /// `--state FILE`: the running configuration is written there after each change.
    pub state: Option<crate::state::StateFile>,
    /// `--fast-path`: the eBPF fast path (`crate::fastpath`).
    pub fast_path: crate::fastpath::FastPathMode,
}

#[derive(Debug)]
struct WorkerLink {
    mailbox: mpsc::Sender<ToWorker>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// The control thread's state. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    session: Session,
    slots: Vec<Option<Slot>>,
    cfg: EngineConfig,
    ctl: mpsc::Receiver<Ctl>,
    workers: Vec<WorkerLink>,
    epoch: Instant,
    last_tick_ns: u64,
    generation: u64,
    /// Queues opened during this reconciliation, waiting to be handed to the workers.
    attach: Vec<(u16, Opened)>,
    /// Ports whose queues the workers must close.
    detach: Vec<u16>,
    /// The far end's queues of a patch link whose first end was opened in this reconciliation.
    patch_peers: HashMap<String, Opened>,
    /// Per bridge id: FDB moves counted at the last tick, and when flapping was last logged.
    flaps: HashMap<u16, (u64, u64)>,
    /// Per port name: `mac_limit_restrict` and `mac_limit_shutdown` drops seen at the last tick,
    /// and when a restrict event was last logged.
    mac_limits: HashMap<String, (u64, u64, u64)>,
    /// The plan the workers forward with.
    published: Option<Arc<Plan>>,
    /// Host interfaces the ports hold (AF_PACKET, AF_XDP), locked against other daemons.
    iface_locks: HashMap<String, IfaceLock>,
    /// The lock directory could not be used (warned once; interfaces go unlocked).
    locks_unavailable: bool,
    /// `qbridge monitor` connections.
    monitors: Monitors,
    /// Open files of `mirror … dst pcap FILE` sessions, by file name (`crate::mirror_sink`).
    mirror_files: HashMap<String, Arc<MirrorSink>>,
    /// Files of deleted sessions, finished once the workers have the plan without them.
    mirror_closing: Vec<Arc<MirrorSink>>,
    /// The set of mirror files changed: the workers need them with the next plan.
    mirror_dirty: bool,
    /// fdb89: what the last command changed in the VXLAN ports' tables (`fdb_batch.rs`).
    fdb89_vx: fdb_batch::VxChanges,
    /// Threads that close the queues the workers lose (`crate::reaper`).
    reaper: Reaper,
    /// The bound on BPDUs in flight from the workers ([`Ctl::Bpdu`]).
    punt: Arc<PuntGate>,
    /// `monitor drops`: the watchers the workers tell (`crate::dropwatch`).
    drops: Arc<crate::dropwatch::DropWatch>,
    /// `trace live`: the sessions the workers tell (`crate::tracelive`), and the reader of
    /// the fast path's copies of hits while a session watches a port it serves.
    trace: Arc<crate::tracelive::TraceLive>,
    hit_reader: Option<crate::tracelive::HitReader>,
    /// The kernel's link notifications (`link.rs`), when they can be had.
    link_events: Option<link::LinkNotifier>,
    /// Per port name: the opening (token) whose link speed the session has (`stp.rs`).
    speeds_read: HashMap<String, u64>,
    /// Bonds' runtime state, by name (`bond.rs`).
    bonds: HashMap<String, bond::BondRt>,
    /// The control channel, for the bonds' queues to hand Slow Protocols frames up.
    ctl_tx: mpsc::Sender<Ctl>,
    /// The eBPF fast path while it runs (`fast.rs`), and what `show fast-path` says of it.
    fast: Option<fast::FastRt>,
    fast_state: fast::FastState,
}

fn io_err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Engine {
    /// Starts the workers (as many as the session's switch counts for, see
    /// [`Session::with_workers`]) and opens the backends of every port of `session`. Fails
    /// (and opens nothing) when one cannot be opened for a reason other than its interface
    /// being absent or down; returns the warnings for ports left waiting.
    pub fn new(
        session: Session,
        cfg: EngineConfig,
    ) -> Result<(Engine, Handle, Vec<String>), String> {
        let (tx, ctl) = mpsc::channel();
        let epoch = Instant::now();
        let mut session = session;
        let plan = session.switch_mut().plan();
        let n = session.switch().workers();
        let reaper = Reaper::start().map_err(|e| io_err("cannot start a reaper thread", e))?;
        let punt = Arc::new(PuntGate::default());
        let drops = Arc::new(crate::dropwatch::DropWatch::default());
        let trace = Arc::new(crate::tracelive::TraceLive::default());
        let mut workers = Vec::with_capacity(n);
        for index in 0..n {
            let wake = Arc::new(
                eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                    .map_err(|e| io_err("eventfd", e))?,
            );
            let (mtx, mrx) = mpsc::channel();
            let w = Worker::new(
                index,
                plan.clone(),
                wake.clone(),
                mrx,
                tx.clone(),
                epoch,
                reaper.handle(),
                punt.clone(),
                drops.clone(),
                trace.clone(),
            )
            .map_err(|e| io_err("epoll", e))?;
            let thread = std::thread::Builder::new()
                .name(format!("qbridge-worker{index}"))
                .spawn(move || w.run())
                .map_err(|e| io_err("cannot start a worker thread", e))?;
            workers.push(WorkerLink {
                mailbox: mtx,
                wake,
                thread: Some(thread),
            });
        }
        let mut engine = Engine {
            session,
            slots: Vec::new(),
            cfg,
            ctl,
            workers,
            epoch,
            last_tick_ns: 0,
            generation: 0,
            attach: Vec::new(),
            detach: Vec::new(),
            patch_peers: HashMap::new(),
            flaps: HashMap::new(),
            mac_limits: HashMap::new(),
            published: Some(plan),
            iface_locks: HashMap::new(),
            locks_unavailable: false,
            monitors: Monitors::default(),
            mirror_files: HashMap::new(),
            mirror_closing: Vec::new(),
            mirror_dirty: false,
            fdb89_vx: fdb_batch::VxChanges::default(),
            reaper,
            punt,
            drops,
            trace,
            hit_reader: None,
            link_events: link::LinkNotifier::start(tx.clone()),
            speeds_read: HashMap::new(),
            bonds: HashMap::new(),
            ctl_tx: tx.clone(),
            fast: None,
            fast_state: fast::FastState::default(),
        };
        let mode = engine.cfg.fast_path;
        if let Err(e) = engine.fast_start(mode) {
            engine.stop_workers();
            return Err(e);
        }
        match engine.reconcile() {
            Ok(warnings) => {
                engine.log_rings();
                engine.publish();
                Ok((engine, Handle { tx }, warnings))
            }
            Err(e) => {
                engine.stop_workers();
                Err(e)
            }
        }
    }

    /// Datapath worker threads.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Whether the eBPF fast path runs (`--fast-path`; docs/fast-path.md).
    pub fn fast_path_on(&self) -> bool {
        self.fast.is_some()
    }

    /// Why the fast path does not run under `--fast-path auto` (not built, not permitted, …);
    /// `None` when it runs or was turned off.
    pub fn fast_path_off_reason(&self) -> Option<&str> {
        if self.fast_state.mode == crate::FastPathMode::Off {
            return None;
        }
        self.fast_state.reason.as_deref()
    }

    /// Monotonic nanoseconds since the engine started (never 0).
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Runs until [`Ctl::Shutdown`] (or every handle is gone), then stops the workers, which
    /// close every queue.
    pub fn run(mut self) {
        tracing::debug!("control thread running, {} workers", self.workers.len());
        let mut last_carrier = Instant::now();
        loop {
            let since = self.now_ns().saturating_sub(self.last_tick_ns);
            let mut wait = NS_PER_SEC
                .saturating_sub(since)
                .max(1_000_000)
                .min(self.bond_wait_ns());
            if self.session.spanning_tree().running() {
                wait = wait.min(stp::CARRIER_POLL.as_nanos() as u64);
            }
            match self.ctl.recv_timeout(Duration::from_nanos(wait)) {
                Ok(Ctl::BondPdu {
                    bond,
                    member,
                    frame,
                }) => self.bond_pdu(&bond, member, &frame),
                Ok(Ctl::Request { op, reply }) => {
                    let r = self.execute(op);
                    let _ = reply.send(r);
                    self.monitors.notify(&self.session);
                }
                Ok(Ctl::Monitor {
                    objects,
                    out,
                    events,
                }) => {
                    if objects.contains(&qbridge_control::MonitorObject::Drops) {
                        self.drops.add(events.clone(), out);
                    }
                    self.monitors
                        .add(&self.session, Monitor::new(objects, out, events));
                }
                Ok(Ctl::TraceLive {
                    spec,
                    out,
                    events,
                    reply,
                }) => {
                    let _ = reply.send(self.trace_live(spec, out, events));
                }
                Ok(Ctl::Metrics { reply }) => {
                    self.publish_all();
                    let mut snap = self.metrics();
                    if self.fast.is_some() {
                        snap.fast_path = Some(self.fast_status(false));
                    }
                    let _ = reply.send(snap);
                }
                Ok(Ctl::QueueFailed { token, error }) => {
                    let id = self
                        .slots
                        .iter()
                        .flatten()
                        .find(|s| s.token == token && s.open)
                        .map(|_| (token & 0xffff) as u16);
                    if let Some(id) = id {
                        self.link_down(id, &error);
                        self.stp_sync();
                        self.publish();
                        self.monitors.notify(&self.session);
                    }
                }
                Ok(Ctl::LinkEvent) => {
                    self.link_event();
                    self.publish();
                    self.monitors.notify(&self.session);
                }
                Ok(Ctl::Bpdu { port, frame }) => {
                    self.stp_bpdu(port, &frame);
                    self.publish();
                }
                Ok(Ctl::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.stop_workers();
                    tracing::info!("datapath stopped; every port closed");
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if last_carrier.elapsed() >= stp::CARRIER_POLL {
                last_carrier = Instant::now();
                if self.carrier_watch() {
                    self.publish();
                    self.monitors.notify(&self.session);
                }
            }
            self.bond_run();
            let now = self.now_ns();
            if now.saturating_sub(self.last_tick_ns) >= NS_PER_SEC {
                self.last_tick_ns = now;
                self.drops.tick(now);
                if self.trace.tick(now) {
                    self.trace_ports();
                }
                self.fast_peers();
                self.fast_sweep();
                let aged = self.fast_age(now);
                self.fast_vxl_age();
                self.fast_follow();
                self.fast_fold();
                if aged > 0 {
                    tracing::debug!("aged out {aged} FDB entries");
                }
                self.link_watch();
                self.stp_tick();
                self.retry_state();
                self.flap_watch(now);
                self.mac_limit_watch(now);
                self.publish();
                self.monitors.notify(&self.session);
                for w in &self.workers {
                    send(w, ToWorker::Tick);
                }
                for f in self.mirror_files.values() {
                    f.flush();
                }
            }
        }
    }

    fn stop_workers(&mut self) {
        self.link_events = None;
        for w in &self.workers {
            send(w, ToWorker::Stop);
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                if t.join().is_err() {
                    tracing::error!("a worker thread panicked");
                }
            }
        }
        // The workers handed every queue to the reaper; it closes them and ends.
        self.reaper.stop();
        if let Some(mut rt) = self.fast.take() {
            rt.stop();
        }
    }

    // ----- handing changes to the workers -----

    /// Sends every worker the current plan with the queues opened and closed since the last
    /// call, and waits until each has applied it. Does nothing when neither the plan nor any
    /// queue changed.
    fn publish(&mut self) {
        let plan = self.session.switch_mut().plan();
        let same_plan = self
            .published
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &plan));
        let fast_dirty = self.fast.as_ref().is_some_and(|f| f.dirty);
        if same_plan
            && self.attach.is_empty()
            && self.detach.is_empty()
            && !self.mirror_dirty
            && !fast_dirty
        {
            return;
        }
        // Flows made under the old plan are stale before any worker forwards with the new.
        let fast_gen = self.fast_publish(&plan, !same_plan);
        // The copies the program sent under the old plan's session numbering are that plan's
        // sessions' (decision 80): folded now that its flows are stale.
        if !same_plan {
            if let (Some(rt), Some(old)) = (self.fast.as_mut(), self.published.as_ref()) {
                rt.fold_mirrors(old);
            }
        }
        self.mirror_dirty = false;
        let sinks: Sinks = plan
            .mirror_sinks()
            .iter()
            .map(|f| self.mirror_files.get(f).cloned())
            .collect();
        self.published = Some(plan.clone());
        let attach = std::mem::take(&mut self.attach);
        let detach = std::mem::take(&mut self.detach);
        let mut per_worker: Vec<Vec<(u16, QueueEntry)>> =
            (0..self.workers.len()).map(|_| Vec::new()).collect();
        for (id, queues) in attach {
            let Some(Some(slot)) = self.slots.get(id as usize) else {
                for q in queues {
                    let _ = q.close();
                }
                continue;
            };
            for (w, q) in queues.into_iter().enumerate() {
                per_worker[w % self.workers.len()].push((
                    id,
                    QueueEntry {
                        queue: q,
                        token: slot.token,
                        shared: slot.shared.clone(),
                    },
                ));
            }
        }
        let (done_tx, done_rx) = mpsc::channel();
        for (w, attach) in self.workers.iter().zip(per_worker) {
            send(
                w,
                ToWorker::Update {
                    plan: plan.clone(),
                    attach,
                    detach: detach.clone(),
                    done: done_tx.clone(),
                    sinks: sinks.clone(),
                    fast_gen,
                },
            );
        }
        drop(done_tx);
        for _ in 0..self.workers.len() {
            if done_rx.recv_timeout(APPLY_TIMEOUT).is_err() {
                tracing::warn!("a worker did not apply a change within {APPLY_TIMEOUT:?}");
                break;
            }
        }
        // TAP interfaces of deleted ports gone, pcap files finished, before the answer.
        if !self.reaper.wait_visible(VISIBLE_CLOSE_TIMEOUT) {
            tracing::warn!(
                "closing the ports a change removed took more than {VISIBLE_CLOSE_TIMEOUT:?};                  it goes on in the background"
            );
        }
        self.finish_mirror_files();
        self.trace_refresh();
    }

    /// Waits until every worker has finished what it was doing and answered (a worker takes
    /// messages between bursts): after an FDB-only command, every install that read an entry
    /// before the command has checked it again, and the flows the workers refused for the
    /// configuration may be tried again (decision 85).
    fn workers_barrier(&mut self) {
        let (done_tx, done_rx) = mpsc::channel();
        for w in &self.workers {
            send(
                w,
                ToWorker::FdbBarrier {
                    done: done_tx.clone(),
                },
            );
        }
        drop(done_tx);
        for _ in 0..self.workers.len() {
            if done_rx.recv_timeout(APPLY_TIMEOUT).is_err() {
                tracing::warn!("a worker did not answer within {APPLY_TIMEOUT:?}");
                break;
            }
        }
    }

    // ----- control -----

    fn execute(&mut self, op: Op) -> Response {
        self.publish_all();
        // `show fast-path` and `trace` (its `fast` stage) read the fast path's state now.
        let reads_fast = match &op {
            Op::Command { words, .. } => parse_words(words)
                .is_ok_and(|c| matches!(c, Command::ShowFastPath | Command::Trace(_))),
            _ => false,
        };
        if reads_fast {
            let st = self.fast_status(true);
            self.session.set_fast_path(st);
            if let Some(o) = self.fast_oracle() {
                self.session.set_fast_stage(o);
            }
        }
        let now = self.now_ns();
        self.session.switch_mut().set_time(now);
        // A way back is needed only when reconciling can fail hard, which is when a new port's
        // backend cannot be opened. For one command it is the command that deletes what it
        // added; only a batch is undone by a copy of the session taken before it (copying
        // every FDB costs milliseconds on a large table: 8 ms per `link add` with 100 000
        // entries, when it was taken for single commands too).
        let changing = changes(&op);
        // A bridge-FDB-only command changes the fast path's FDB map, not its generation
        // (decision 85).
        let fdb_entries = fdb_only(&op);
        let fdb_only = self.fast.is_some() && fdb_entries;
        // fdb89: the plan before, to tell a batch done on the live FDB from one taken whole.
        let plan_before = fdb_only.then(|| self.session.switch_mut().plan());
        let before = match &op {
            Op::Command { words, .. } => parse_words(words)
                .ok()
                .and_then(|c| undo_command(&c))
                .map(|c| Undo::Command(Box::new(c))),
            _ => None,
        }
        .or_else(|| {
            // fdb89: a batch of FDB entries opens no port (and copying the FDBs is its cost).
            ((may_open_ports(&op) && !fdb_entries) || self.bond_membership_change(&op))
                .then(|| Undo::Session(Box::new(self.session.clone())))
        });
        // A change the state file can take as one appended line (`fdb add`, `vlan add`, …),
        // unless it made or removed a port (`link set dev BR up` makes the host port, with a
        // random address a replayed line would not give again).
        let ports_before = self.session.switch().port_ids().count();
        let mut change_line = match &op {
            Op::Command { words, .. } if self.cfg.state.is_some() => parse_words(words)
                .ok()
                .and_then(|c| qbridge_control::running::change_line(&c, words)),
            _ => None,
        };
        let r = match op {
            Op::Command { out, words } => {
                parse_words(&words).and_then(|cmd| self.session.execute(&cmd, out))
            }
            Op::Batch { out, text } => self.session.execute_batch(&text, out),
            Op::Apply { out, text } => self.session.apply_batch(&text, out),
        };
        if !changing {
            return match r {
                Ok(output) => Response::ok(output, Vec::new()),
                Err(e) => Response::err(e.to_string()),
            };
        }
        if self.session.switch().port_ids().count() != ports_before {
            change_line = None;
        }
        // fdb89: a batch taken whole replaced the FDBs (a new plan): every flow goes stale.
        let fdb_only = fdb_only
            && plan_before.is_some_and(|p| Arc::ptr_eq(&p, &self.session.switch_mut().plan()));
        // fdb89: what the VXLAN tables' writes change is noted only for such a request.
        self.fdb89_vx.armed = fdb_only;
        if let Some(f) = self.fast.as_mut().filter(|_| !fdb_only) {
            // Commands that change no plan (a VXLAN port's table, a flush, a batch of FDB
            // commands): the flows must not outlive them either.
            f.dirty = true;
        }
        let mut resp = self.commit(r, before);
        self.stp_sync();
        if fdb_only {
            // fdb89: a VXLAN port's remotes changed: the decapsulation's tunnels follow, and
            // a change there still bumps (decision 77's reason; `publish` does it).
            self.fdb89_decap();
        }
        self.publish();
        if fdb_only {
            self.fast_fdb_command();
        }
        self.fdb89_forget();
        if resp.ok {
            self.save_state(&mut resp, change_line.as_deref());
        }
        resp
    }

    /// `--state FILE`: writes the running configuration if a command changed it, or appends
    /// `change_line` when there is one and the file takes it (`crate::state`: O(the change)).
    /// A failed write does not undo the change (it is in force); the reply says it was not
    /// saved.
    fn save_state(&mut self, resp: &mut Response, change_line: Option<&str>) {
        let Some(state) = &mut self.cfg.state else {
            return;
        };
        if let Some(line) = change_line {
            match state.append(line) {
                Ok(true) => return,
                Ok(false) => {}
                // The whole configuration is tried below; its error, if any, is the reply's.
                Err(e) => tracing::warn!(
                    "cannot append to the state file {}: {e}",
                    state.path().display()
                ),
            }
        }
        let text = self.session.running_config();
        if let Err(e) = state.save(&text) {
            let w = format!(
                "the change is in force but was not saved to {}: {e}",
                state.path().display()
            );
            tracing::error!("{w}");
            resp.warnings.push(w);
        }
    }

    /// Once a second while the `--state` file is not up to date (a write failed, e.g. a full
    /// disk): tries again, so the file follows as soon as there is room, without waiting for
    /// the next change.
    fn retry_state(&mut self) {
        let Some(state) = &mut self.cfg.state else {
            return;
        };
        if state.is_saved() {
            return;
        }
        match state.save(&self.session.running_config()) {
            Ok(_) => tracing::info!(
                "the configuration is saved to {} again",
                state.path().display()
            ),
            Err(e) => tracing::debug!("{}: still not saved: {e}", state.path().display()),
        }
    }

    /// After a command that may have changed the configuration: reconcile the backends, or
    /// undo the command when a backend cannot be opened.
    fn commit(&mut self, r: Result<String, ControlError>, before: Option<Undo>) -> Response {
        match r {
            Err(e) => Response::err(e.to_string()),
            Ok(output) => match self.reconcile() {
                Ok(warnings) => {
                    for w in &warnings {
                        tracing::warn!("{w}");
                    }
                    Response::ok(output, warnings)
                }
                Err(e) => match before {
                    Some(before) => {
                        match before {
                            Undo::Session(s) => self.session = *s,
                            Undo::Command(c) => {
                                if let Err(e2) = self.session.execute(&c, OutputOptions::default())
                                {
                                    tracing::error!("cannot undo a failed command: {e2}");
                                }
                            }
                        }
                        if let Err(e2) = self.reconcile() {
                            tracing::error!(
                                "cannot restore the backends after a failed command: {e2}"
                            );
                        }
                        Response::err(e)
                    }
                    // Not expected: only opening a new port fails hard.
                    None => {
                        Response::err(format!("{e} (the configuration change itself was applied)"))
                    }
                },
            },
        }
    }

    /// The counter snapshot for a scrape (`crate::snapshot`), after [`Engine::publish_all`].
    fn metrics(&self) -> Snapshot {
        let link_downs = |id: qbridge_bridge::PortId| {
            self.slots
                .get(id.0 as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.link_downs)
        };
        let unsaved = self.cfg.state.as_ref().map(|s| !s.is_saved());
        crate::snapshot::take(&self.session, link_downs, self.workers.len(), unsaved)
    }
}

/// Sends a worker a message and wakes it.
fn send(w: &WorkerLink, msg: ToWorker) {
    if w.mailbox.send(msg).is_ok() {
        let _ = rustix::io::write(&*w.wake, &1u64.to_ne_bytes());
    }
}

/// Whether a request changes only FDB entries: one `fdb add|append|replace|del` of a bridge
/// entry (decision 85), of a VXLAN port's remote or `fdb flush`, or a batch of only those
/// (decision 89: checked on a copy, then done on the live FDB): what changes in the fast path
/// is then the entries it changes. A batch the live session took whole after all (a line
/// it refused) changed the plan, and `Engine::execute` bumps after all.
fn fdb_only(op: &Op) -> bool {
    // fdb89: a VXLAN port's remotes, `fdb flush` and batches of those too (decision 89).
    match op {
        Op::Command { words, .. } => {
            parse_words(words).is_ok_and(|c| qbridge_control::session::fdb_entries_only(&c))
        }
        Op::Batch { text, .. } | Op::Apply { text, .. } => {
            qbridge_control::session::batch_fdb_entries_only(text)
        }
    }
}

/// Whether a request may change the configuration.
fn changes(op: &Op) -> bool {
    match op {
        Op::Command { words, .. } => parse_words(words).is_ok_and(|c| !is_show(&c)),
        Op::Batch { .. } | Op::Apply { .. } => true,
    }
}

/// How a command whose backend could not be opened is undone (see `Engine::execute`).
enum Undo {
    /// The session as it was before (a batch).
    Session(Box<Session>),
    /// The command that deletes what a single command added (`link del`, `mirror del`).
    Command(Box<Command>),
}

/// For a single command that can open a backend, the command that undoes it: `link add` of a
/// port by `link del` (a patch link goes whole), `mirror add` by `mirror del`.
fn undo_command(cmd: &Command) -> Option<Command> {
    match cmd {
        Command::Link(LinkCommand::AddPort { name, .. }) => {
            Some(Command::Link(LinkCommand::Del { dev: name.clone() }))
        }
        Command::Mirror(MirrorCommand::Add(spec)) => Some(Command::Mirror(MirrorCommand::Del {
            name: spec.name.clone(),
        })),
        _ => None,
    }
}

/// Commands that can open a backend: adding a port, or a batch (which may add ports).
fn may_open_ports(op: &Op) -> bool {
    match op {
        Op::Command { words, .. } => parse_words(words).is_ok_and(|c| {
            matches!(
                c,
                Command::Link(LinkCommand::AddPort { .. }) | Command::Mirror(MirrorCommand::Add(_))
            )
        }),
        Op::Batch { .. } | Op::Apply { .. } => true,
    }
}

/// Commands that only read.
fn is_show(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Link(LinkCommand::Show { .. })
            | Command::Vlan(VlanCommand::Show { .. })
            | Command::Fdb(FdbCommand::Show { .. })
            | Command::Vlan(VlanCommand::MapShow { .. })
            | Command::Vlan(VlanCommand::TunnelShow { .. })
            | Command::Vni(qbridge_control::command::VniCommand::Show { .. })
            | Command::Mirror(MirrorCommand::Show { .. })
            | Command::Stp(qbridge_control::StpCommand::Show { .. })
            | Command::ShowRunningConfig
            | Command::ShowFastPath
            | Command::Trace(_)
            | Command::Help(_)
    )
}

impl Engine {
    /// Opens the files of the `dst pcap` mirror sessions that are new and sets aside those of
    /// sessions that are gone (finished after the next publish). A file that cannot be opened
    /// — no `--pcap-dir`, a pcap port's own file, an error — fails the command, with nothing
    /// changed.
    fn sync_mirror_files(&mut self) -> Result<(), String> {
        let wanted: Vec<String> = self.session.switch_mut().plan().mirror_sinks().to_vec();
        let mut opened = Vec::new();
        for file in &wanted {
            if self.mirror_files.contains_key(file) {
                continue;
            }
            let Some(dir) = &self.cfg.pcap_dir else {
                return Err(format!(
                    "mirror to pcap {file} needs a directory: start the daemon with --pcap-dir \
                     DIR (or use 'qbridge replay' for pcap files)"
                ));
            };
            let port_file = self
                .session
                .ports()
                .into_iter()
                .find(|(_, n, spec)| **spec == PortSpec::Pcap && format!("{n}.pcap") == *file);
            if let Some((_, port, _)) = port_file {
                return Err(format!(
                    "mirror to pcap {file}: pcap port {port} writes {}/{file}",
                    dir.display()
                ));
            }
            let sink = MirrorSink::open(dir, file, self.cfg.file_access)?;
            tracing::info!("mirror: writing {}/{file}", dir.display());
            opened.push(Arc::new(sink));
        }
        for sink in opened {
            self.mirror_files.insert(sink.file.clone(), sink);
            self.mirror_dirty = true;
        }
        let gone: Vec<String> = self
            .mirror_files
            .keys()
            .filter(|f| !wanted.contains(f))
            .cloned()
            .collect();
        for f in gone {
            if let Some(sink) = self.mirror_files.remove(&f) {
                self.mirror_closing.push(sink);
                self.mirror_dirty = true;
            }
        }
        Ok(())
    }

    /// Finishes the files of deleted mirror sessions (the workers no longer write them).
    fn finish_mirror_files(&mut self) {
        for sink in self.mirror_closing.drain(..) {
            sink.finish();
            tracing::info!("mirror: {} closed", sink.file);
        }
    }
}
