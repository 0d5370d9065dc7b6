//! The engine's control side: one thread owns the [`Session`] (switch + configuration) and the
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
//! every worker.

use crate::backends::{
    default_ring_frames, describe_offloads, describe_spec, offload_status, open_afpacket_queues,
    open_afxdp_queues, ring_bytes,
};
use crate::mirror::{MirrorSink, Sinks};
use crate::monitor::{Monitor, Monitors, MONITOR_QUEUE_LINES};
use crate::patch::patch_link;
use crate::pcap::PcapPort;
use crate::queue::{distribute, Queues};
use crate::reaper::Reaper;
use crate::worker::{QueueEntry, ToWorker, Worker};
use qbridge_bridge::{DropReason, FdbFilter, FdbKind, MacvlanMode, Plan, PortId, Role};
use qbridge_control::{
    parse_words, BackendStatus, Command, ControlError, FdbCommand, LinkCommand, MirrorCommand,
    MonitorObject, Op, OutputOptions, PortSpec, Response, Session, Snapshot, VlanCommand,
};
use qbridge_io::afpacket::RxFilterHandle;
use qbridge_io::iflock::{self, IfaceLock, LockError};
use qbridge_io::netns::run_in_netns;
use qbridge_io::tap::{TapConfig, TapPort};
use qbridge_io::{sys, DeviceOffloads, IoError};
use rustix::event::{eventfd, EventfdFlags};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const NS_PER_SEC: u64 = 1_000_000_000;
/// FDB moves per second in one bridge from which a MAC address is reported as flapping.
pub const FLAP_MOVES_PER_SEC: u64 = 50;
/// Most unicast addresses an AF_PACKET port's receive filter holds; with more, the port goes
/// promiscuous (see `rx_filter`).
pub const UNICAST_FILTER_MAX: usize = 4096;
/// At most one flapping report per bridge in this long.
const FLAP_LOG_INTERVAL_NS: u64 = 10 * NS_PER_SEC;
/// How long a command waits for a worker to apply it before logging it as late.
const APPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a command waits for the visible closes it caused (TAP interfaces removed, pcap
/// files finished; `crate::reaper`) before answering anyway, with a log line: a bound, not a
/// figure to reach (1000 TAPs take ~6.5 s).
const VISIBLE_CLOSE_TIMEOUT: Duration = Duration::from_secs(25);

/// What the socket, metrics and worker threads send to the control thread.
#[derive(Debug)]
pub enum Ctl {
    Request {
        op: Op,
        reply: mpsc::Sender<Response>,
    },
    Metrics {
        reply: mpsc::Sender<Snapshot>,
    },
    /// A monitor connection: queue the events of `objects` on `events` from now on.
    Monitor {
        objects: Vec<MonitorObject>,
        out: OutputOptions,
        events: mpsc::SyncSender<String>,
    },
    /// A worker's queue failed with a link-down error (`token` names the port's opening).
    QueueFailed {
        token: u64,
        error: String,
    },
    Shutdown,
}

/// The other threads' way in.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: mpsc::Sender<Ctl>,
}

impl Handle {
    /// Runs one request on the control thread and waits for its answer.
    pub fn call(&self, op: Op) -> Response {
        let (reply, rx) = mpsc::channel();
        if self.tx.send(Ctl::Request { op, reply }).is_err() {
            return Response::err("the daemon is shutting down");
        }
        rx.recv()
            .unwrap_or_else(|_| Response::err("the daemon is shutting down"))
    }

    pub fn metrics(&self) -> Option<Snapshot> {
        let (reply, rx) = mpsc::channel();
        self.tx.send(Ctl::Metrics { reply }).ok()?;
        rx.recv().ok()
    }

    /// Starts a monitor (see [`crate::monitor`]): the event lines, text or JSON as `out`
    /// says, each ending in a newline. `None` when the engine has stopped.
    pub fn monitor(
        &self,
        objects: Vec<MonitorObject>,
        out: OutputOptions,
    ) -> Option<mpsc::Receiver<String>> {
        let (events, rx) = mpsc::sync_channel(MONITOR_QUEUE_LINES);
        self.tx
            .send(Ctl::Monitor {
                objects,
                out,
                events,
            })
            .ok()?;
        Some(rx)
    }

    pub fn shutdown(&self) {
        let _ = self.tx.send(Ctl::Shutdown);
    }
}

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
}

/// What the workers of one port share with the control thread: counters the control thread
/// reads for `link show` and metrics.
#[derive(Debug, Default)]
pub struct PortShared {
    pub tx_sw_gso: AtomicU64,
    pub tx_gso_refused: AtomicU64,
    /// GRO: super-frames made for the port, and the segments merged into them.
    pub tx_gro_frames: AtomicU64,
    pub tx_gro_segments: AtomicU64,
    /// Frames received on the port, per worker (written once per burst by that worker).
    pub rx_frames_by_worker: Box<[AtomicU64]>,
    /// AF_PACKET: the device's offloads as a worker last read them.
    offloads: Mutex<Option<DeviceOffloads>>,
}

impl PortShared {
    fn new(workers: usize) -> PortShared {
        PortShared {
            rx_frames_by_worker: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            ..PortShared::default()
        }
    }

    pub(crate) fn lock_offloads(&self) -> MutexGuard<'_, Option<DeviceOffloads>> {
        self.offloads.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Receive filter of an AF_PACKET port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RxFilter {
    pub promisc: bool,
    pub unicast: Vec<[u8; 6]>,
}

/// One port's backend as the control thread knows it; its queues live in the workers.
#[derive(Debug)]
struct Slot {
    name: String,
    spec: PortSpec,
    /// The workers hold queues of this port (false: closed, waiting for the interface).
    open: bool,
    /// `generation << 16 | port id` of the current opening.
    token: u64,
    /// The link as the engine last saw it; pushed into the switch (`set_link_state`).
    link_up: bool,
    link_downs: u64,
    /// AF_PACKET: the filter the open sockets have, and the handle that holds it (shared by
    /// the port's sockets, changed in place).
    filter: Option<RxFilter>,
    filter_handle: Option<Arc<RxFilterHandle>>,
    /// TAP-backed ports: the TAP's MTU as qbridge last set or read it; raised when the port's
    /// `mtu` grows above it (as at creation).
    tap_mtu: Option<u32>,
    status: BackendStatus,
    shared: Arc<PortShared>,
    /// Warnings given about this port, per condition (`"mtu"`, `"filter"`): a warning is given
    /// once, not again with every later command, until its text changes or the condition
    /// clears.
    warned: HashMap<&'static str, String>,
}

impl Slot {
    /// Adds `msg` to `warnings` unless it was given already for `condition`.
    fn warn_once(&mut self, condition: &'static str, msg: String, warnings: &mut Vec<String>) {
        if self.warned.get(condition) != Some(&msg) {
            self.warned.insert(condition, msg.clone());
            warnings.push(msg);
        }
    }

    fn clear_warning(&mut self, condition: &'static str) {
        self.warned.remove(condition);
    }
}

/// A port's freshly opened queues, one per worker, not yet handed over.
pub(crate) type Opened = Queues;

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
    /// Open files of `mirror … dst pcap FILE` sessions, by file name (`crate::mirror`).
    mirror_files: HashMap<String, Arc<MirrorSink>>,
    /// Files of deleted sessions, finished once the workers have the plan without them.
    mirror_closing: Vec<Arc<MirrorSink>>,
    /// The set of mirror files changed: the workers need them with the next plan.
    mirror_dirty: bool,
    /// Threads that close the queues the workers lose (`crate::reaper`).
    reaper: Reaper,
}

/// `12.5 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
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
            reaper,
        };
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

    /// AF_PACKET ports in the configuration: what the default ring sizes are shared over
    /// ([`default_ring_frames`]).
    fn afpacket_ports(&self) -> usize {
        self.session
            .ports()
            .into_iter()
            .filter(|(_, _, spec)| matches!(spec, PortSpec::AfPacket { .. }))
            .count()
    }

    /// At start: what the AF_PACKET ports' receive rings pin in the kernel, in total.
    fn log_rings(&self) {
        let n = self.workers.len() as u64;
        let (mut ports, mut bytes, mut frames) = (0u64, 0u64, Vec::new());
        for s in self.slots.iter().flatten() {
            if let (PortSpec::AfPacket { .. }, Some(r)) = (&s.spec, s.status.ring_frames) {
                ports += 1;
                bytes += ring_bytes(r) * n;
                frames.push(r);
            }
        }
        if ports == 0 {
            return;
        }
        frames.sort_unstable();
        frames.dedup();
        tracing::info!(
            "AF_PACKET receive rings: {ports} ports x {n} sockets, {} frames per socket, {} \
             in total (pinned in the kernel; 'ring_frames N' sizes a port)",
            frames
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("/"),
            mib(bytes)
        );
    }

    /// Monotonic nanoseconds since the engine started (never 0).
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Runs until [`Ctl::Shutdown`] (or every handle is gone), then stops the workers, which
    /// close every queue.
    pub fn run(mut self) {
        tracing::debug!("control thread running, {} workers", self.workers.len());
        loop {
            let since = self.now_ns().saturating_sub(self.last_tick_ns);
            let wait = NS_PER_SEC.saturating_sub(since).max(1_000_000);
            match self.ctl.recv_timeout(Duration::from_nanos(wait)) {
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
                    self.monitors
                        .add(&self.session, Monitor::new(objects, out, events));
                }
                Ok(Ctl::Metrics { reply }) => {
                    self.publish_all();
                    let _ = reply.send(self.metrics());
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
                        self.publish();
                        self.monitors.notify(&self.session);
                    }
                }
                Ok(Ctl::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.stop_workers();
                    tracing::info!("datapath stopped; every port closed");
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            let now = self.now_ns();
            if now.saturating_sub(self.last_tick_ns) >= NS_PER_SEC {
                self.last_tick_ns = now;
                let aged = self.session.switch_mut().age(now);
                if aged > 0 {
                    tracing::debug!("aged out {aged} FDB entries");
                }
                self.housekeeping();
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
        if same_plan && self.attach.is_empty() && self.detach.is_empty() && !self.mirror_dirty {
            return;
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
    }

    // ----- control -----

    fn execute(&mut self, op: Op) -> Response {
        self.publish_all();
        let now = self.now_ns();
        self.session.switch_mut().set_time(now);
        // A way back is needed only when reconciling can fail hard, which is when a new port's
        // backend cannot be opened. For one command it is the command that deletes what it
        // added; only a batch is undone by a copy of the session taken before it (copying
        // every FDB costs milliseconds on a large table: 8 ms per `link add` with 100 000
        // entries, when it was taken for single commands too).
        let changing = changes(&op);
        let before = match &op {
            Op::Command { words, .. } => parse_words(words)
                .ok()
                .and_then(|c| undo_command(&c))
                .map(Undo::Command),
            _ => None,
        }
        .or_else(|| may_open_ports(&op).then(|| Undo::Session(Box::new(self.session.clone()))));
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
        let mut resp = self.commit(r, before);
        self.publish();
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

    /// Brings the backends in line with the session. Opens every new port first; if one
    /// fails hard, closes what it opened and returns the error with nothing else changed.
    /// The queues opened and the ports closed are handed to the workers by the next
    /// [`Engine::publish`].
    fn reconcile(&mut self) -> Result<Vec<String>, String> {
        self.sync_mirror_files()?;
        let mut warnings = Vec::new();
        let wanted: Vec<(PortId, String, PortSpec)> = self
            .session
            .ports()
            .into_iter()
            .map(|(id, n, s)| (id, n.to_owned(), s.clone()))
            .collect();
        // Phase 1: open what is new or changed.
        let mut opened: Vec<(u16, Slot, Option<Opened>)> = Vec::new();
        for (id, name, spec) in &wanted {
            let same = matches!(self.slots.get(id.0 as usize),
                Some(Some(s)) if s.name == *name && s.spec == *spec);
            if same {
                continue;
            }
            match self.open_slot(*id, name, spec) {
                Ok((slot, queues, warning)) => {
                    warnings.extend(warning);
                    opened.push((id.0, slot, queues));
                }
                Err(e) => {
                    for (_, _, queues) in opened {
                        close_queues(queues.unwrap_or_default());
                    }
                    for (_, queues) in self.patch_peers.drain() {
                        close_queues(queues);
                    }
                    let slots = &self.slots;
                    self.iface_locks.retain(|dev, _| {
                        slots
                            .iter()
                            .flatten()
                            .any(|s| device_of(&s.spec) == Some(dev.as_str()))
                    });
                    return Err(e);
                }
            }
        }
        for (_, queues) in self.patch_peers.drain() {
            close_queues(queues);
        }
        // Interfaces no port uses any more are free for another daemon.
        self.iface_locks.retain(|dev, _| {
            wanted
                .iter()
                .any(|(_, _, sp)| device_of(sp) == Some(dev.as_str()))
        });
        // Phase 2: close what is gone or replaced, install the new.
        for i in 0..self.slots.len() {
            let keep = matches!(&self.slots[i], Some(s)
                if wanted.iter().any(|(id, n, sp)| id.0 as usize == i && *n == s.name && *sp == s.spec));
            if !keep {
                if let Some(s) = self.slots[i].take() {
                    tracing::info!("port {}: closed", s.name);
                    if s.open {
                        self.detach.push(i as u16);
                    }
                }
            }
        }
        for (id, mut slot, queues) in opened {
            let i = id as usize;
            if self.slots.len() <= i {
                self.slots.resize_with(i + 1, || None);
            }
            self.generation += 1;
            slot.token = (self.generation << 16) | u64::from(id);
            self.detach.retain(|&d| d != id);
            if let Some(q) = queues {
                self.attach.push((id, q));
            }
            self.slots[i] = Some(slot);
        }
        // Phase 3: link state, device MTU and receive filters follow the configuration.
        for (id, _, _) in &wanted {
            self.sync_port(id.0, &mut warnings);
        }
        Ok(warnings)
    }

    fn open_slot(
        &mut self,
        id: PortId,
        name: &str,
        spec: &PortSpec,
    ) -> Result<(Slot, Option<Opened>, Option<String>), String> {
        let mut slot = Slot {
            name: name.to_owned(),
            spec: spec.clone(),
            open: false,
            token: 0,
            link_up: true,
            link_downs: 0,
            filter: None,
            filter_handle: None,
            tap_mtu: None,
            status: BackendStatus::default(),
            shared: Arc::new(PortShared::new(self.workers.len())),
            warned: HashMap::new(),
        };
        let n = self.workers.len();
        let mut warning = None;
        if let Some(dev) = device_of(spec) {
            self.lock_interface(dev, name)?;
        }
        let queues = match spec {
            PortSpec::Pcap => {
                let Some(dir) = &self.cfg.pcap_dir else {
                    return Err(format!(
                        "pcap port {name} needs a directory: start the daemon with --pcap-dir DIR \
                         (or use 'qbridge replay' for pcap files)"
                    ));
                };
                if self.mirror_files.contains_key(&format!("{name}.pcap")) {
                    return Err(format!(
                        "pcap port {name}: {}/{name}.pcap is written by a mirror session",
                        dir.display()
                    ));
                }
                let p = PcapPort::open(dir, name, self.cfg.file_access)
                    .map_err(|e| format!("port {name}: {e}"))?;
                tracing::info!("port {name}: pcap, writing {}/{name}.pcap", dir.display());
                Some(
                    distribute(vec![Box::new(p)], n, id.0 as usize)
                        .map_err(|e| format!("port {name}: {e}"))?,
                )
            }
            PortSpec::AfPacket {
                dev,
                qdisc_bypass,
                ring_frames,
            } => {
                let ring =
                    ring_frames.unwrap_or_else(|| default_ring_frames(n, self.afpacket_ports()));
                slot.status.ring_frames = Some(ring);
                let filter = self.rx_filter(id);
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                slot.status.qdisc_bypass = Some(*qdisc_bypass);
                match open_afpacket_queues(name, dev, *qdisc_bypass, ring, &filter, want_mtu, n) {
                    Ok((queues, handle, mtu, offloads)) => {
                        slot.filter_handle = Some(handle);
                        let offloads = offload_status(offloads);
                        tracing::info!(
                            "port {name}: AF_PACKET on {dev} (device mtu {mtu}, {}, qdisc \
                             bypass {}, device offloads {}, receive rings {ring} frames x {n} \
                             sockets = {})",
                            if filter.promisc {
                                "promiscuous"
                            } else {
                                "unicast filter"
                            },
                            if *qdisc_bypass { "on" } else { "off" },
                            describe_offloads(&offloads),
                            mib(ring_bytes(ring) * n as u64)
                        );
                        slot.filter = Some(filter.clone());
                        slot.status.device_mtu = Some(mtu);
                        slot.status.promisc = Some(filter.promisc);
                        slot.status.offloads = Some(offloads);
                        Some(queues)
                    }
                    Err(e @ IoError::MtuAboveMax { .. }) => {
                        return Err(self.mtu_error(id, dev, want_mtu, &e));
                    }
                    Err(e) => {
                        warning = Some(open_failed(&mut slot, dev, e)?);
                        None
                    }
                }
            }
            PortSpec::Tap { ifname, netns } => {
                let ifname = ifname.as_deref().unwrap_or(name);
                let (queues, tap_name, mtu) =
                    self.open_tap(id, name, ifname, netns.as_deref(), None)?;
                slot.tap_mtu = Some(mtu);
                if tap_name != ifname {
                    slot.status.ifname = Some(tap_name);
                }
                Some(queues)
            }
            PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
                let (ifname, netns) = spec.host_tap(name).unwrap_or((name, None));
                let mac = self.session.switch().port_mac(id).map(|m| m.0);
                let (queues, _, mtu) = self.open_tap(id, name, ifname, netns, mac)?;
                slot.tap_mtu = Some(mtu);
                Some(queues)
            }
            PortSpec::AfXdp { dev, .. } => {
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                match open_afxdp_queues(spec, want_mtu, n, id.0 as usize) {
                    Ok(queues) => {
                        tracing::info!("port {name}: AF_XDP on {dev} ({})", describe_spec(spec));
                        slot.status.device_mtu = sys::get_mtu(dev).ok();
                        Some(queues)
                    }
                    Err(e) => {
                        warning = Some(open_failed(&mut slot, dev, e)?);
                        None
                    }
                }
            }
            PortSpec::Patch { peer } => {
                let queues = match self.patch_peers.remove(name) {
                    Some(q) => q,
                    None => {
                        let (mine, theirs) = patch_link(name, peer, n);
                        self.patch_peers.insert(peer.clone(), theirs);
                        tracing::info!("port {name}: patch link to {peer}");
                        mine
                    }
                };
                Some(queues)
            }
        };
        slot.open = queues.is_some();
        slot.status.open = slot.open;
        if slot.open {
            // The interface's own address is a local FDB entry of its bridge (Linux
            // `br_fdb_add_local`); pcap ports and patch links have none.
            let mac = own_interface(spec)
                .and_then(|i| sys::get_mac(i).ok())
                .map(qbridge_wire::MacAddr);
            self.session.switch_mut().set_port_address(id, mac);
        }
        Ok((slot, queues, warning))
    }

    /// Takes host interface `dev`'s lock for port `name` unless a port of this daemon holds it.
    /// Another daemon holding it is an error; a lock directory that cannot be used is a
    /// warning (once), and the interface goes unlocked.
    fn lock_interface(&mut self, dev: &str, name: &str) -> Result<(), String> {
        if self.iface_locks.contains_key(dev) {
            return Ok(());
        }
        match iflock::lock_interface(dev, name) {
            Ok(l) => {
                self.iface_locks.insert(dev.to_owned(), l);
                Ok(())
            }
            Err(e @ LockError::Busy { .. }) => Err(format!("port {name}: {e}")),
            Err(e @ LockError::Unavailable(_)) => {
                if !self.locks_unavailable {
                    self.locks_unavailable = true;
                    tracing::warn!(
                        "{e}; interfaces are not protected against a second daemon \
                         (set QBRIDGE_LOCK_DIR to a writable directory)"
                    );
                }
                Ok(())
            }
        }
    }

    /// Whether a port of this daemon owns the TAP `ifname` in `netns` (then it is ours to
    /// reopen, not someone else's interface).
    fn owns_tap(&self, ifname: &str, netns: Option<&str>) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|s| s.spec.tap(&s.name) == Some((ifname, netns)))
    }

    /// Creates TAP `ifname` (in `netns`) with one queue per worker for port `id`; returns the
    /// queues, the TAP's name and its MTU. `mac`: the address to give it (stacked devices, host
    /// ports).
    fn open_tap(
        &self,
        id: PortId,
        name: &str,
        ifname: &str,
        netns: Option<&str>,
        mac: Option<[u8; 6]>,
    ) -> Result<(Opened, String, u32), String> {
        // TUNSETIFF on an existing name would join someone else's TAP (or fail on another
        // kind of device): qbridge creates its TAPs itself.
        if !ifname.contains('%') && !self.owns_tap(ifname, netns) {
            let exists = match netns {
                None => sys::ifindex(ifname).is_ok(),
                Some(ns) => run_in_netns(ns, || sys::ifindex(ifname).is_ok()).unwrap_or(false),
            };
            if exists {
                return Err(format!(
                    "port {name}: interface {ifname} already exists{}; qbridge creates its TAP \
                     itself (delete that interface or choose another name)",
                    netns.map(|n| format!(" in netns {n}")).unwrap_or_default()
                ));
            }
        }
        let n = self.workers.len();
        let mut cfg = TapConfig::new(Some(ifname));
        cfg.netns = netns.map(str::to_owned);
        // One queue per worker (IFF_MULTI_QUEUE): the kernel picks a queue per flow for what
        // it sends into the TAP, so each worker reads its own.
        cfg.queues = n;
        // Always multi-queue, also with one worker: a port that replaces another on the same
        // TAP in one batch attaches its queues to the existing device, which the old port's
        // queues leave afterwards (a single-queue TAP refuses a second queue: EBUSY).
        cfg.multi_queue = true;
        cfg.mac = mac;
        let mtu = self.session.switch().port_settings(id).mtu;
        if mtu != 1500 {
            cfg.device_mtu = Some(mtu);
        }
        let ports = TapPort::open_queues(cfg).map_err(|e| format!("port {name}: {e}"))?;
        let tap_name = ports
            .first()
            .map(|p| p.ifname().to_owned())
            .unwrap_or_default();
        let tap_mtu = ports.first().map_or(mtu, TapPort::device_mtu);
        tracing::info!(
            "port {name}: TAP {tap_name}{} with {} queues",
            netns.map(|n| format!(" in netns {n}")).unwrap_or_default(),
            ports.len()
        );
        let queues: Queues = ports
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn crate::queue::Queue>)
            .collect();
        let opened =
            distribute(queues, n, id.0 as usize).map_err(|e| format!("port {name}: {e}"))?;
        Ok((opened, tap_name, tap_mtu))
    }

    /// (Re)opens the queues of device port `id` (AF_PACKET, AF_XDP) as the configuration asks
    /// for now; the new queues replace the old ones in the workers at the next publish.
    fn reopen_device(&mut self, id: u16, dev: &str) -> Result<(), IoError> {
        let spec = match self.slots.get(id as usize) {
            Some(Some(s)) => s.spec.clone(),
            _ => return Ok(()),
        };
        // A device that came back may have another address: its local FDB entries follow.
        let mac = sys::get_mac(dev).ok().map(qbridge_wire::MacAddr);
        self.session.switch_mut().set_port_address(PortId(id), mac);
        if let PortSpec::AfXdp { .. } = spec {
            let want_mtu = self
                .session
                .switch()
                .port_max_frame(PortId(id))
                .saturating_sub(14);
            let queues = open_afxdp_queues(&spec, want_mtu, self.workers.len(), id as usize)?;
            let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
                return Ok(());
            };
            slot.open = true;
            slot.status.open = true;
            slot.status.device_mtu = sys::get_mtu(dev).ok();
            self.generation += 1;
            slot.token = (self.generation << 16) | u64::from(id);
            self.detach.retain(|&d| d != id);
            self.attach.retain(|(a, _)| *a != id);
            self.attach.push((id, queues));
            self.publish_status(id);
            return Ok(());
        }
        self.open_afpacket(id, dev)
    }

    /// (Re)opens the AF_PACKET sockets of port `id` with the filter and MTU the configuration
    /// asks for now; the new queues replace the old ones in the workers at the next publish.
    fn open_afpacket(&mut self, id: u16, dev: &str) -> Result<(), IoError> {
        let pid = PortId(id);
        let filter = self.rx_filter(pid);
        let want_mtu = self.session.switch().port_max_frame(pid).saturating_sub(14);
        let n = self.workers.len();
        let ports = self.afpacket_ports();
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return Ok(());
        };
        // A reopened port keeps the ring it had.
        let had = slot.status.ring_frames;
        let (bypass, ring) = match &slot.spec {
            PortSpec::AfPacket {
                qdisc_bypass,
                ring_frames,
                ..
            } => (
                *qdisc_bypass,
                ring_frames
                    .or(had)
                    .unwrap_or_else(|| default_ring_frames(n, ports)),
            ),
            _ => (true, had.unwrap_or_else(|| default_ring_frames(n, ports))),
        };
        let (queues, handle, mtu, offloads) =
            open_afpacket_queues(&slot.name, dev, bypass, ring, &filter, want_mtu, n)?;
        slot.status.ring_frames = Some(ring);
        slot.filter_handle = Some(handle);
        slot.status.offloads = Some(offload_status(offloads));
        *slot.shared.lock_offloads() = Some(offloads);
        slot.open = true;
        slot.status.open = true;
        slot.status.device_mtu = Some(mtu);
        slot.status.promisc = Some(filter.promisc);
        slot.filter = Some(filter);
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id);
        self.detach.retain(|&d| d != id);
        self.attach.retain(|(a, _)| *a != id);
        self.attach.push((id, queues));
        self.publish_status(id);
        Ok(())
    }

    /// Marks port `id` down (once): the switch stops using it and forgets its learned
    /// addresses; AF_PACKET sockets are closed and reopened by the link watch.
    fn link_down(&mut self, id: u16, why: &str) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        if !slot.link_up {
            return;
        }
        slot.link_up = false;
        slot.link_downs += 1;
        if let PortSpec::AfPacket { .. } | PortSpec::AfXdp { .. } = slot.spec {
            if slot.open {
                self.detach.push(id);
            }
            slot.open = false;
            slot.status.open = false;
            slot.filter = None;
            slot.filter_handle = None;
        }
        slot.status.error = Some(why.to_owned());
        tracing::warn!(
            "port {}: link down ({why}); retrying every second",
            slot.name
        );
        self.session.switch_mut().set_link_state(PortId(id), false);
        self.publish_status(id);
    }

    fn link_up(&mut self, id: u16) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        if slot.link_up {
            return;
        }
        slot.link_up = true;
        slot.status.error = None;
        tracing::info!("port {}: link up; forwarding resumes", slot.name);
        self.session.switch_mut().set_link_state(PortId(id), true);
        self.publish_status(id);
    }

    /// Why port `pid` needs a device MTU of `want`: `mtu 1500 + 8 bytes for two VLAN tags,
    /// envhdr len auto`.
    fn mtu_need(&self, pid: PortId, want: u32) -> String {
        let sw = self.session.switch();
        let st = sw.port_settings(pid);
        let extra = want.saturating_sub(st.mtu);
        let what = match (extra, extra % 4) {
            (0, _) => "no VLAN tag".to_string(),
            (4, _) => "one VLAN tag".to_string(),
            (8, _) => "two VLAN tags".to_string(),
            (n, 0) => format!("{} VLAN tags", n / 4),
            _ => "the envelope".to_string(),
        };
        let envhdr = match st.envhdr_len {
            Some(n) => format!("envhdr len {n}"),
            None => "envhdr len auto".to_string(),
        };
        format!("mtu {} + {extra} bytes for {what}, {envhdr}", st.mtu)
    }

    /// The message for a device MTU port `pid` could not get: which MTU, why it is needed, and
    /// the device's maximum when the kernel tells it.
    fn mtu_error(&self, pid: PortId, dev: &str, want: u32, e: &IoError) -> String {
        let name = self.session.switch().port_name(pid).unwrap_or("?");
        let need = self.mtu_need(pid, want);
        match e {
            IoError::MtuAboveMax { .. } => {
                let why = match sys::mtu_limit(dev) {
                    Ok(l) => match (l.kind.as_deref(), &l.lower, l.max()) {
                        (Some("vxlan"), Some((ul, ul_mtu)), Some(max)) => format!(
                            "max {max} (underlay {ul}'s MTU {ul_mtu} less {} bytes of VXLAN \
                             encapsulation: raise {ul}'s MTU to {} first, or lower the port's \
                             mtu)",
                            l.vxlan_overhead(),
                            want + l.vxlan_overhead()
                        ),
                        (_, Some((lower, lower_mtu)), _) => format!(
                            "above what {dev} takes over its lower device {lower} (MTU \
                             {lower_mtu}): raise {lower}'s MTU first, or lower the port's mtu"
                        ),
                        (_, None, Some(max)) => format!("max {max}"),
                        _ => "above the device's maximum".to_string(),
                    },
                    Err(_) => "above the device's maximum (for a tunnel device: its underlay's \
                               MTU less the encapsulation)"
                        .to_string(),
                };
                format!("port {name}: cannot raise {dev}'s MTU to {want} ({need}): {why}")
            }
            e => format!("port {name}: cannot raise {dev}'s MTU to {want} ({need}): {e}"),
        }
    }

    /// Creates again the TAP of port `id` (a TAP port, a VLAN device, a macvlan endpoint, a
    /// host port) after its interface was deleted from outside, as it was first made (name,
    /// namespace, MAC address, MTU); its new queues replace the old ones at the next publish.
    fn reopen_tap(&mut self, id: u16) -> Result<(), String> {
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return Ok(());
        };
        let (name, spec) = (slot.name.clone(), slot.spec.clone());
        let pid = PortId(id);
        let (queues, tap_name, mtu) = match &spec {
            PortSpec::Tap { ifname, netns } => self.open_tap(
                pid,
                &name,
                ifname.as_deref().unwrap_or(&name),
                netns.as_deref(),
                None,
            )?,
            PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
                let (ifname, netns) = spec.host_tap(&name).unwrap_or((&name, None));
                let mac = self.session.switch().port_mac(pid).map(|m| m.0);
                self.open_tap(pid, &name, ifname, netns, mac)?
            }
            _ => return Ok(()),
        };
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            close_queues(queues);
            return Ok(());
        };
        slot.open = true;
        slot.status.open = true;
        slot.tap_mtu = Some(mtu);
        // A `tap%d` name may come back as another number.
        if let PortSpec::Tap { ifname, .. } = &spec {
            slot.status.ifname =
                (Some(tap_name.as_str()) != ifname.as_deref().or(Some(&name))).then_some(tap_name);
        }
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id);
        self.detach.retain(|&d| d != id);
        self.attach.retain(|(a, _)| *a != id);
        self.attach.push((id, queues));
        tracing::info!("port {name}: its TAP was deleted; created it again");
        Ok(())
    }

    fn publish_status(&mut self, id: u16) {
        if let Some(Some(slot)) = self.slots.get_mut(id as usize) {
            slot.status.counters = crate::snapshot::backend_counters(&slot.shared);
            if let Some(o) = *slot.shared.lock_offloads() {
                slot.status.offloads = Some(offload_status(o));
            }
            let st = slot.status.clone();
            let name = slot.name.clone();
            self.session.set_backend_status(&name, st);
        }
    }

    // ----- link watch -----

    /// Once a second: AF_PACKET ports whose interface is not up (gone, admin down, no carrier)
    /// go down; ports that are down are reopened when their interface is up again.
    fn housekeeping(&mut self) {
        for i in 0..self.slots.len() {
            let Some(slot) = &self.slots[i] else {
                continue;
            };
            let id = i as u16;
            match (&slot.spec, slot.link_up) {
                (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, true) => {
                    match sys::link_state(dev) {
                        Ok(sys::LinkState::Up) => {}
                        Ok(s) => self.link_down(id, &format!("interface {dev}: {s:?}")),
                        Err(e) => self.link_down(id, &e.to_string()),
                    }
                }
                (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, false) => {
                    if matches!(sys::link_state(dev), Ok(sys::LinkState::Up)) {
                        let dev = dev.clone();
                        match self.reopen_device(id, &dev) {
                            Ok(()) => self.link_up(id),
                            Err(e) => tracing::debug!("port {id}: reopen failed: {e}"),
                        }
                    }
                }
                (
                    PortSpec::Tap { netns, .. }
                    | PortSpec::Vlan { netns, .. }
                    | PortSpec::Macvlan { netns, .. }
                    | PortSpec::Host { netns, .. },
                    up,
                ) => {
                    let ifname = tap_ifname(slot);
                    let state = match netns {
                        Some(ns) => {
                            let n = ifname.clone();
                            qbridge_io::netns::run_in_netns(ns, move || sys::link_state(&n))
                                .and_then(|r| r)
                        }
                        None => sys::link_state(&ifname),
                    };
                    let gone = matches!(state, Err(IoError::NoSuchInterface { .. }));
                    if up {
                        // Workers see a deleted TAP too (EBADFD), but only if they poll it.
                        if gone {
                            self.link_down(id, &format!("TAP {ifname} was deleted"));
                        }
                    } else if gone {
                        match self.reopen_tap(id) {
                            Ok(()) => self.link_up(id),
                            Err(e) => tracing::debug!("port {id}: cannot create its TAP: {e}"),
                        }
                    } else if matches!(state, Ok(sys::LinkState::Up | sys::LinkState::NoCarrier)) {
                        self.link_up(id);
                    }
                }
                _ => {}
            }
        }
    }

    /// Once a second: a bridge whose learned addresses moved between ports more than
    /// [`FLAP_MOVES_PER_SEC`] times in the last second has a MAC address flapping — most
    /// likely a forwarding loop (qbridge has no STP). Logged, naming the address, VLAN and
    /// ports of the latest move, at most once per bridge every 10 s.
    fn flap_watch(&mut self, now: u64) {
        let sw = self.session.switch();
        for (bid, bname) in sw.bridge_ids() {
            let (moves, last) = sw.fdb_moves(bid);
            let st = self.flaps.entry(bid.0).or_insert((moves, 0));
            let delta = moves.saturating_sub(st.0);
            st.0 = moves;
            if delta < FLAP_MOVES_PER_SEC || (st.1 != 0 && now - st.1 < FLAP_LOG_INTERVAL_NS) {
                continue;
            }
            st.1 = now;
            if let Some((m, from, to)) = last {
                tracing::warn!(
                    "bridge {bname}: MAC {} in VLAN {} is flapping between ports {from} and \
                     {to} ({delta} address moves in the last second): a forwarding loop? \
                     (qbridge runs no STP)",
                    m.mac,
                    m.vid
                );
            }
        }
    }

    /// Per-VLAN learning limits (`docs/semantics.md` §L): `violation restrict` drops are
    /// logged at most once per 10 s per port; a `violation shutdown` drop takes the port down
    /// (`link set dev P down`, as an operator would), until `link set dev P up`.
    fn mac_limit_watch(&mut self, now: u64) {
        let sw = self.session.switch();
        let mut shut = Vec::new();
        for (id, name) in sw.port_ids() {
            let c = sw.port_counters(id);
            let restrict = c.drops[DropReason::MacLimitRestrict as usize];
            let shutdown = c.drops[DropReason::MacLimitShutdown as usize];
            let st = self
                .mac_limits
                .entry(name.to_owned())
                .or_insert((restrict, shutdown, 0));
            // A port deleted and made again under the same name starts from zero.
            if restrict < st.0 || shutdown < st.1 {
                *st = (restrict, shutdown, 0);
            }
            if restrict > st.0 && (st.2 == 0 || now - st.2 >= FLAP_LOG_INTERVAL_NS) {
                tracing::warn!(
                    "port {name}: {} frames from new sources over its fdb_max_learned in a VLAN \
                     dropped (violation restrict; mac_limit_restrict {restrict})",
                    restrict - st.0
                );
                st.0 = restrict;
                st.2 = now;
            }
            if shutdown > st.1 {
                st.1 = shutdown;
                if sw.port_settings(id).up {
                    shut.push(name.to_owned());
                }
            }
        }
        self.mac_limits.retain(|n, _| sw.port_id(n).is_ok());
        for name in shut {
            tracing::warn!(
                "port {name}: a new source over its fdb_max_learned in a VLAN (violation \
                 shutdown): port taken down; 'link set dev {name} up' brings it back"
            );
            let op = Op::Command {
                out: OutputOptions::default(),
                words: vec![
                    "link".into(),
                    "set".into(),
                    "dev".into(),
                    name,
                    "down".into(),
                ],
            };
            let r = self.execute(op);
            if let Some(e) = r.error {
                tracing::error!("violation shutdown: {e}");
            }
        }
    }

    /// Copies every port's runtime status (its counters move with every batch) into the
    /// session, for a show command or a metrics scrape.
    fn publish_all(&mut self) {
        for i in 0..self.slots.len() {
            self.publish_status(i as u16);
        }
    }

    /// After a command: push the link state into the switch, raise the device MTU if the
    /// port's largest frame grew (AF_PACKET, AF_XDP), and change an AF_PACKET port's receive
    /// filter in place if it must change.
    fn sync_port(&mut self, id: u16, warnings: &mut Vec<String>) {
        let pid = PortId(id);
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let link_up = slot.link_up;
        if self.session.switch().port_link_up(pid) != link_up {
            self.session.switch_mut().set_link_state(pid, link_up);
        }
        let want_tap_mtu = self.session.switch().port_settings(pid).mtu;
        if slot.open && slot.tap_mtu.is_some_and(|m| m < want_tap_mtu) {
            self.raise_tap_mtu(id, want_tap_mtu, warnings);
        }
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let device = match (&slot.spec, slot.open) {
            (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, true) => Some(dev),
            _ => None,
        };
        if let Some(dev) = device {
            let is_afpacket = matches!(slot.spec, PortSpec::AfPacket { .. });
            let dev = dev.clone();
            let name = slot.name.clone();
            let max_frame = self.session.switch().port_max_frame(pid);
            let want = max_frame.saturating_sub(14);
            let have = slot.status.device_mtu.unwrap_or(0);
            let filter_now = slot.filter.clone();
            if want > have {
                match sys::raise_mtu(&dev, want) {
                    Ok(m) => {
                        tracing::info!(
                            "port {name}: device MTU of {dev} raised from {have} to {m} \
                             (largest frame {max_frame} bytes)"
                        );
                        if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                            s.status.device_mtu = Some(m);
                            s.clear_warning("mtu");
                        }
                    }
                    Err(e) => {
                        let msg = self.mtu_error(pid, &dev, want, &e);
                        if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                            s.warn_once("mtu", msg, warnings);
                        }
                    }
                }
            } else if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                s.clear_warning("mtu");
            }
            let filter = self.rx_filter(pid);
            if is_afpacket && filter_now.as_ref() != Some(&filter) {
                self.change_filter(id, filter, warnings);
            }
        }
        self.publish_status(id);
    }

    /// Raises the MTU of TAP-backed port `id`'s TAP to the port's `mtu` (in the TAP's
    /// namespace), as creating it does: `link set dev vm0 mtu 9000` is the TAP's MTU too, so
    /// the host behind it can send what the port forwards. Never lowered (creation does not
    /// lower it either: the host may keep a larger MTU).
    fn raise_tap_mtu(&mut self, id: u16, mtu: u32, warnings: &mut Vec<String>) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let ifname = tap_ifname(slot);
        let netns = match &slot.spec {
            PortSpec::Tap { netns, .. }
            | PortSpec::Vlan { netns, .. }
            | PortSpec::Macvlan { netns, .. }
            | PortSpec::Host { netns, .. } => netns.clone(),
            _ => None,
        };
        let r = match &netns {
            Some(ns) => {
                let n = ifname.clone();
                run_in_netns(ns, move || sys::raise_mtu(&n, mtu)).and_then(|r| r)
            }
            None => sys::raise_mtu(&ifname, mtu),
        };
        match r {
            Ok(m) => {
                tracing::info!(
                    "port {}: MTU of TAP {ifname} raised from {} to {m}",
                    slot.name,
                    slot.tap_mtu.unwrap_or(0)
                );
                slot.tap_mtu = Some(m);
                slot.clear_warning("tap_mtu");
            }
            Err(e) => {
                let msg = format!(
                    "port {}: cannot raise the MTU of TAP {ifname} to {mtu}: {e}",
                    slot.name
                );
                slot.warn_once("tap_mtu", msg, warnings);
            }
        }
    }

    /// Changes AF_PACKET port `id`'s receive filter in place: promiscuous mode on or off, and
    /// one membership added or dropped per changed unicast address, through the handle its
    /// sockets share — nothing is reopened, no frame is lost.
    fn change_filter(&mut self, id: u16, filter: RxFilter, warnings: &mut Vec<String>) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some(h) = slot.filter_handle.clone() else {
            return;
        };
        let unicast: &[[u8; 6]] = if filter.promisc { &[] } else { &filter.unicast };
        // Promiscuous first when turning it on, last when turning it off: the port never
        // accepts less than either filter in between.
        let r = if filter.promisc {
            h.set_promisc(true).and_then(|()| h.set_unicast(unicast))
        } else {
            h.set_unicast(unicast)
                .and_then(|c| h.set_promisc(false).map(|()| c))
        };
        match r {
            Ok((added, removed)) => {
                slot.clear_warning("filter");
                tracing::debug!(
                    "port {}: receive filter now {} ({added} unicast addresses added, {removed} \
                     removed)",
                    slot.name,
                    if filter.promisc {
                        "promiscuous".to_string()
                    } else {
                        format!("{} unicast addresses", filter.unicast.len())
                    }
                );
                slot.status.promisc = Some(filter.promisc);
                slot.filter = Some(filter);
            }
            Err(e) => {
                let msg = format!("port {}: cannot change the receive filter: {e}", slot.name);
                slot.warn_once("filter", msg, warnings);
                // Known state unknown: make the next command try again.
                slot.filter = None;
            }
        }
    }

    /// What port `id` must receive. Promiscuous when it learns or floods, or when another
    /// port of its bridge learns or floods (then frames for addresses behind that port, or for
    /// unknown addresses, must come in here); otherwise only the unicast addresses of the
    /// bridge's FDB entries on other ports (besides broadcast, multicast and the interface's
    /// own address, which the kernel always delivers) — up to [`UNICAST_FILTER_MAX`] of them,
    /// promiscuous beyond.
    ///
    /// Devices stacked on the port add their host-side addresses (a VLAN device's, a macvlan
    /// endpoint's: seeds S6, no promiscuous mode for sub-interfaces); one that is a bridge port,
    /// or a passthru macvlan, makes the port promiscuous.
    fn rx_filter(&self, id: PortId) -> RxFilter {
        let mut f = self.bridge_rx_filter(id);
        let sw = self.session.switch();
        if f.promisc || !sw.has_stacked(id) {
            return f;
        }
        let mut todo = sw.stacked_on(id);
        while let Some(u) = todo.pop() {
            let passthru = matches!(
                sw.port_role(u),
                Role::Macvlan {
                    mode: MacvlanMode::Passthru,
                    ..
                }
            );
            if passthru || sw.port_master(u).is_some() {
                return RxFilter {
                    promisc: true,
                    unicast: Vec::new(),
                };
            }
            if let Some(m) = sw.port_mac(u) {
                f.unicast.push(m.0);
            }
            todo.extend(sw.stacked_on(u));
        }
        f.unicast.sort_unstable();
        f.unicast.dedup();
        if f.unicast.len() > UNICAST_FILTER_MAX {
            f = RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        f
    }

    /// [`Engine::rx_filter`] for the port's own bridge.
    fn bridge_rx_filter(&self, id: PortId) -> RxFilter {
        let sw = self.session.switch();
        let Some(bid) = sw.port_master(id) else {
            return RxFilter {
                promisc: false,
                unicast: Vec::new(),
            };
        };
        let me = sw.port_settings(id);
        let needs = me.learning
            || me.flood
            || sw.bridge_ports(bid).any(|p| {
                let s = sw.port_settings(p);
                p != id && (s.learning || s.flood)
            });
        if needs {
            return RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        let filter = FdbFilter {
            bridge: Some(sw.bridge_name(bid).to_owned()),
            dev: None,
            vlan: None,
        };
        let my_name = sw.port_name(id).unwrap_or_default();
        let mut unicast: Vec<[u8; 6]> = sw
            .fdb_entries(&filter)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.ifname != my_name && e.kind != FdbKind::Permanent)
            .map(|e| e.mac.0)
            .collect();
        unicast.sort_unstable();
        unicast.dedup();
        if unicast.len() > UNICAST_FILTER_MAX {
            // As a NIC whose unicast filter overflows: every address costs the kernel a walk
            // of the device's address list, so past this many the port takes everything and
            // the bridge sorts it out (frames for nobody are dropped by the bridge then,
            // counted there, instead of as `rx_filtered`).
            return RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        RxFilter {
            promisc: false,
            unicast,
        }
    }

    /// The counter snapshot for a scrape (`crate::snapshot`), after [`Engine::publish_all`].
    fn metrics(&self) -> Snapshot {
        let link_downs = |id: PortId| {
            self.slots
                .get(id.0 as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.link_downs)
        };
        let unsaved = self.cfg.state.as_ref().map(|s| !s.is_saved());
        crate::snapshot::take(&self.session, link_downs, self.workers.len(), unsaved)
    }
}

/// A device port that could not be opened: if its interface is only absent or down, the port
/// stays down (link watch) and the warning says so; any other failure is the command's error.
fn open_failed(slot: &mut Slot, dev: &str, e: IoError) -> Result<String, String> {
    if !e.is_link_down() {
        return Err(format!("port {}: {e}", slot.name));
    }
    slot.link_up = false;
    slot.status.error = Some(e.to_string());
    Ok(format!(
        "port {}: {e}; the port stays down and is opened when {dev} is up",
        slot.name
    ))
}

/// Sends a worker a message and wakes it.
fn send(w: &WorkerLink, msg: ToWorker) {
    if w.mailbox.send(msg).is_ok() {
        let _ = rustix::io::write(&*w.wake, &1u64.to_ne_bytes());
    }
}

fn close_queues(queues: Opened) {
    for q in queues {
        let name = q.name().to_owned();
        if let Err(e) = q.close() {
            tracing::warn!("port {name}: {e}");
        }
    }
}

/// The interface name of a TAP-backed port (a TAP port, a VLAN device, a macvlan endpoint, a
/// host port): the name the kernel gave it (a `tap%d` pattern), else the `ifname` asked for,
/// else the port's name. The link watch asks the kernel about this name, never the port's own
/// name: `link add G type tap ifname tg` is interface `tg`.
fn tap_ifname(slot: &Slot) -> String {
    if let Some(n) = &slot.status.ifname {
        return n.clone();
    }
    slot.spec
        .tap(&slot.name)
        .map_or_else(|| slot.name.clone(), |(i, _)| i.to_owned())
}

/// The host interface a port's backend binds to (AF_PACKET, AF_XDP).
fn device_of(spec: &PortSpec) -> Option<&str> {
    match spec {
        PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => Some(dev),
        _ => None,
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
    Command(Command),
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
            | Command::Mirror(MirrorCommand::Show { .. })
            | Command::ShowRunningConfig
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

/// The interface whose address is a port's own (the bridge side of its wire): an AF_PACKET or
/// AF_XDP port's device. A TAP's interface is the far end of the wire (the host or VM behind
/// the port, whose address is learned like any host's), stacked devices and host ports have
/// addresses the switch knows, pcap ports and patch links have none.
fn own_interface(spec: &PortSpec) -> Option<&str> {
    match spec {
        PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => Some(dev),
        _ => None,
    }
}
