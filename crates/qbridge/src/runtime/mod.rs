//! The live runtime: one datapath thread owns the [`Session`] (switch + configuration) and every
//! open port backend, and is the only thread that touches either.
//!
//! Loop: `epoll_wait` on every port descriptor and an eventfd for control (timeout at most
//! 100 ms) → for each readable port one `rx_burst` of up to [`BURST`] frames →
//! [`Switch::process`](qbridge_bridge::Switch::process) at the monotonic clock → for each
//! output batch: software GSO / checksum completion where the egress port's caps lack TSO /
//! checksum offload, then one `tx_burst` per port, counting `tx_queue_full` / `tx_error` into
//! the switch's port counters. Once a second: FDB ageing and the link watch (ports whose
//! interface went down are closed and retried; see [`Runtime::housekeeping`]).
//!
//! Control commands arrive over a channel from the socket threads and are executed between
//! batches, so a change is atomic with respect to forwarding: no frame ever sees half a
//! command, and frames of ports and VLANs a command does not touch are not disturbed (nothing
//! is flushed or reopened but what the command changes). After each changing command the
//! backends are reconciled with the session: new ports are opened (all of them before anything
//! is closed; if one cannot be opened the command is undone), deleted ports are closed, device
//! MTUs are raised for envelope frames and receive filters (promiscuous or unicast list)
//! follow the bridge configuration.
//!
//! Allocation: batches, the output batches and the segmentation scratch batch are reused; after
//! warm-up the per-frame path allocates nothing (pcap input ports aside, see [`backend`]).

pub(crate) mod backend;

use backend::{Live, PcapPort};
use qbridge_bridge::{DropReason, FdbFilter, FdbKind, Outputs, PortId};
use qbridge_control::{
    parse_words, BackendStatus, Command, ControlError, FdbCommand, LinkCommand, Op, PortSpec,
    Response, Session, VlanCommand,
};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
use qbridge_io::tap::{TapConfig, TapPort};
use qbridge_io::{sys, IoError};
use qbridge_packet::Batch;
use qbridge_wire::Tpid;
use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most frames taken from one port per receive.
pub(crate) const BURST: usize = 256;
/// Longest wait in `epoll_wait`.
const POLL_TIMEOUT_MS: u64 = 100;
const NS_PER_SEC: u64 = 1_000_000_000;
/// epoll token of the control eventfd; port tokens are `generation << 16 | port id`.
const CTL_TOKEN: u64 = u64::MAX;

/// What the socket and metrics threads send to the datapath thread.
#[derive(Debug)]
pub(crate) enum Ctl {
    Request {
        op: Op,
        reply: mpsc::Sender<Response>,
    },
    Metrics {
        reply: mpsc::Sender<MetricsSnapshot>,
    },
    Shutdown,
}

/// Per-port runtime facts for the metrics endpoint.
#[derive(Debug, Clone)]
pub(crate) struct PortRuntime {
    pub name: String,
    pub running: bool,
    pub link_up: bool,
    pub link_downs: u64,
    pub device_mtu: Option<u32>,
}

/// Everything `/metrics` shows, taken between two batches.
#[derive(Debug, Clone)]
pub(crate) struct MetricsSnapshot {
    pub stats: serde_json::Value,
    pub ports: Vec<PortRuntime>,
}

/// The other threads' way in: a channel plus the eventfd that wakes the loop.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    tx: mpsc::Sender<Ctl>,
    wake: Arc<OwnedFd>,
}

impl Handle {
    fn send(&self, msg: Ctl) -> bool {
        if self.tx.send(msg).is_err() {
            return false;
        }
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
        true
    }

    /// Runs one request on the datapath thread and waits for its answer.
    pub fn call(&self, op: Op) -> Response {
        let (reply, rx) = mpsc::channel();
        if !self.send(Ctl::Request { op, reply }) {
            return Response::err("the daemon is shutting down");
        }
        rx.recv()
            .unwrap_or_else(|_| Response::err("the daemon is shutting down"))
    }

    pub fn metrics(&self) -> Option<MetricsSnapshot> {
        let (reply, rx) = mpsc::channel();
        if !self.send(Ctl::Metrics { reply }) {
            return None;
        }
        rx.recv().ok()
    }

    pub fn shutdown(&self) {
        self.send(Ctl::Shutdown);
    }
}

/// Options of the runtime that do not come from commands.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuntimeConfig {
    /// Where pcap ports write (`--pcap-dir`); without it pcap ports are refused.
    pub pcap_dir: Option<PathBuf>,
}

/// Receive filter of an AF_PACKET port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RxFilter {
    promisc: bool,
    unicast: Vec<[u8; 6]>,
}

/// One port's backend and what the runtime knows about it.
#[derive(Debug)]
struct Slot {
    name: String,
    spec: PortSpec,
    /// `None`: closed, waiting for the interface (AF_PACKET) to come back.
    live: Option<Live>,
    /// epoll token of the current descriptor.
    token: u64,
    /// The link as the runtime last saw it; pushed into the switch (`set_link_state`).
    link_up: bool,
    link_downs: u64,
    /// AF_PACKET: the filter the open socket has.
    filter: Option<RxFilter>,
    status: BackendStatus,
    /// The backend's own drop counts last folded into the switch's counters (see
    /// [`Live::drops`]).
    seen_drops: [u64; 3],
}

/// The datapath thread's state. See the module documentation.
#[derive(Debug)]
pub(crate) struct Runtime {
    session: Session,
    slots: Vec<Option<Slot>>,
    cfg: RuntimeConfig,
    epoll: OwnedFd,
    wake: Arc<OwnedFd>,
    ctl: mpsc::Receiver<Ctl>,
    ready: Vec<u16>,
    outputs: Outputs,
    rx: Batch,
    fix: Batch,
    epoch: Instant,
    last_tick_ns: u64,
    generation: u64,
}

fn io_err(what: &str, e: rustix::io::Errno) -> String {
    format!("{what}: {e}")
}

impl Runtime {
    /// Opens the backends of every port of `session`. Fails (and opens nothing) when one
    /// cannot be opened for a reason other than its interface being absent or down; returns
    /// the warnings for ports left waiting.
    pub fn new(
        session: Session,
        cfg: RuntimeConfig,
    ) -> Result<(Runtime, Handle, Vec<String>), String> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| io_err("epoll", e))?;
        let wake = Arc::new(
            eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                .map_err(|e| io_err("eventfd", e))?,
        );
        epoll::add(
            &ep,
            &*wake,
            epoll::EventData::new_u64(CTL_TOKEN),
            epoll::EventFlags::IN,
        )
        .map_err(|e| io_err("epoll_ctl", e))?;
        let (tx, ctl) = mpsc::channel();
        let mut rt = Runtime {
            session,
            slots: Vec::new(),
            cfg,
            epoll: ep,
            wake: wake.clone(),
            ctl,
            ready: Vec::with_capacity(64),
            outputs: Outputs::new(),
            rx: Batch::with_capacity(BURST),
            fix: Batch::with_capacity(BURST),
            epoch: Instant::now(),
            last_tick_ns: 0,
            generation: 0,
        };
        let warnings = rt.reconcile()?;
        Ok((rt, Handle { tx, wake }, warnings))
    }

    /// Monotonic nanoseconds since the runtime started (never 0).
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Runs until [`Ctl::Shutdown`] (or every handle is gone), then closes every backend.
    pub fn run(mut self) {
        tracing::debug!("datapath thread running");
        // Local: epoll events hold a pointer-sized union and are not Send.
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            let any_pending = self
                .slots
                .iter()
                .flatten()
                .any(|s| s.link_up && s.live.as_ref().is_some_and(Live::rx_pending));
            let timeout = if any_pending {
                Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                }
            } else {
                let since = self.now_ns().saturating_sub(self.last_tick_ns);
                let to_tick = NS_PER_SEC.saturating_sub(since);
                let ns = to_tick.clamp(1_000_000, POLL_TIMEOUT_MS * 1_000_000);
                Timespec {
                    tv_sec: 0,
                    tv_nsec: ns as _,
                }
            };
            events.clear();
            if let Err(e) = epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                if e != rustix::io::Errno::INTR {
                    tracing::error!("epoll_wait: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            self.ready.clear();
            let mut ctl = false;
            for ev in &events {
                let token = ev.data.u64();
                if token == CTL_TOKEN {
                    ctl = true;
                    continue;
                }
                let id = (token & 0xffff) as u16;
                if let Some(Some(s)) = self.slots.get(id as usize) {
                    if s.token == token && s.live.is_some() {
                        self.ready.push(id);
                    }
                }
            }
            for (i, s) in self.slots.iter().enumerate() {
                if let Some(s) = s {
                    if s.link_up && s.live.as_ref().is_some_and(Live::rx_pending) {
                        self.ready.push(i as u16);
                    }
                }
            }
            for i in 0..self.ready.len() {
                let id = self.ready[i];
                self.service_rx(id);
            }
            if ctl {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&*self.wake, &mut buf);
            }
            loop {
                match self.ctl.try_recv() {
                    Ok(Ctl::Request { op, reply }) => {
                        let r = self.execute(op);
                        let _ = reply.send(r);
                    }
                    Ok(Ctl::Metrics { reply }) => {
                        let _ = reply.send(self.metrics());
                    }
                    Ok(Ctl::Shutdown) | Err(mpsc::TryRecvError::Disconnected) => {
                        self.close_all();
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let now = self.now_ns();
            if now.saturating_sub(self.last_tick_ns) >= NS_PER_SEC {
                self.last_tick_ns = now;
                let aged = self.session.switch_mut().age(now);
                if aged > 0 {
                    tracing::debug!("aged out {aged} FDB entries");
                }
                self.housekeeping();
            }
        }
    }

    fn close_all(&mut self) {
        for s in self.slots.iter_mut().filter_map(Option::take) {
            close_slot(s);
        }
        tracing::info!("datapath stopped; every port closed");
    }

    // ----- datapath -----

    /// One receive burst on port `id`, forwarded and transmitted.
    fn service_rx(&mut self, id: u16) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some(live) = slot.live.as_mut() else {
            return;
        };
        debug_assert!(self.rx.is_empty());
        let received = live
            .port()
            .rx_burst(&mut self.rx, &mut self.outputs.pool, BURST);
        // Frames the backend dropped before they reached the switch, as named drops. A reopened
        // backend starts its counts again at 0.
        let drops = live.drops();
        if drops != slot.seen_drops {
            let sw = self.session.switch();
            let reasons = [
                DropReason::RxTruncated,
                DropReason::RxFiltered,
                DropReason::RxShort,
            ];
            for k in 0..3 {
                let seen = slot.seen_drops[k];
                let new = if drops[k] >= seen {
                    drops[k] - seen
                } else {
                    drops[k]
                };
                sw.count_port_drop(PortId(id), 0, reasons[k], new);
            }
            slot.seen_drops = drops;
        }
        match received {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                for p in self.rx.drain() {
                    self.outputs.pool.put(p);
                }
                self.port_failed(id, &e);
                return;
            }
        }
        for p in self.rx.pkts.iter_mut() {
            p.port = id;
        }
        let now = self.now_ns();
        self.session
            .switch_mut()
            .process(now, &mut self.rx, &mut self.outputs);
        self.flush();
    }

    /// Transmits every non-empty output batch: once per port.
    fn flush(&mut self) {
        for j in 0..self.outputs.ports.len() {
            if !self.outputs.ports[j].is_empty() {
                self.tx_port(j);
            }
        }
    }

    fn tx_port(&mut self, j: usize) {
        let Runtime {
            session,
            slots,
            outputs,
            fix,
            ..
        } = self;
        let sw = session.switch_mut();
        let id = PortId(j as u16);
        let batch = &mut outputs.ports[j];
        let live = match slots.get_mut(j) {
            Some(Some(Slot {
                live: Some(l),
                link_up: true,
                ..
            })) => l,
            _ => {
                // The switch forwards only to running ports; a frame here means the backend
                // vanished within this batch.
                let n = batch.len() as u64;
                sw.count_port_drop(id, 0, DropReason::TxError, n);
                for p in batch.drain() {
                    outputs.pool.put(p);
                }
                return;
            }
        };
        let caps = live.caps();
        if !(caps.tso && caps.csum) {
            let tpid = sw.port_tpid(id);
            let is_tag = |t: Tpid| t == tpid || t.is_well_known();
            let mut errors = 0u64;
            for mut p in batch.pkts.drain(..) {
                if p.offload.is_gso() && !caps.tso {
                    match qbridge_offload::segment(&p, is_tag, &mut outputs.pool, &mut fix.pkts) {
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!("port {j}: cannot segment a frame: {e}");
                            errors += 1;
                        }
                    }
                    outputs.pool.put(p);
                    continue;
                }
                if p.offload.needs_csum() && !caps.csum {
                    if let Err(e) = qbridge_offload::complete_checksum(&mut p, is_tag) {
                        tracing::debug!("port {j}: cannot complete a checksum: {e}");
                        errors += 1;
                        outputs.pool.put(p);
                        continue;
                    }
                }
                fix.push(p);
            }
            std::mem::swap(batch, fix);
            sw.count_port_drop(id, 0, DropReason::TxError, errors);
        }
        let n = batch.len();
        let result = live.port().tx_burst(batch, &mut outputs.pool);
        let failed = match result {
            Ok(o) => {
                sw.count_port_drop(id, 0, DropReason::TxQueueFull, o.queue_full as u64);
                sw.count_port_drop(id, 0, DropReason::TxError, o.error as u64);
                None
            }
            Err(e) => {
                sw.count_port_drop(id, 0, DropReason::TxError, n as u64);
                Some(e)
            }
        };
        if let Some(e) = failed {
            self.port_failed(j as u16, &e);
        }
    }

    /// A burst failed. A link-down error takes the port down until the link watch sees the
    /// interface again; anything else is logged and the port stays.
    fn port_failed(&mut self, id: u16, e: &IoError) {
        if e.is_link_down() {
            self.link_down(id, &e.to_string());
        } else {
            let name = self.slot_name(id);
            tracing::warn!("port {name}: {e}");
        }
    }

    fn slot_name(&self, id: u16) -> String {
        match self.slots.get(id as usize) {
            Some(Some(s)) => s.name.clone(),
            _ => format!("#{id}"),
        }
    }

    /// Marks port `id` down (once): the switch stops using it and forgets its learned
    /// addresses; an AF_PACKET socket is closed and reopened by the link watch.
    fn link_down(&mut self, id: u16, why: &str) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        if !slot.link_up {
            return;
        }
        slot.link_up = false;
        slot.link_downs += 1;
        if let PortSpec::AfPacket { .. } = slot.spec {
            if let Some(l) = slot.live.take() {
                let _ = l.close();
            }
            slot.status.open = false;
            slot.filter = None;
        }
        slot.status.error = Some(why.to_owned());
        tracing::warn!(
            "port {}: link down ({why}); retrying every second",
            slot.name
        );
        let sw = self.session.switch_mut();
        sw.set_link_state(PortId(id), false);
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

    fn publish_status(&mut self, id: u16) {
        if let Some(Some(slot)) = self.slots.get(id as usize) {
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
                (PortSpec::AfPacket { dev }, true) => {
                    let state = match &slot.live {
                        Some(Live::AfPacket(p)) => p.link_state(),
                        _ => sys::link_state(dev),
                    };
                    match state {
                        Ok(sys::LinkState::Up) => {}
                        Ok(s) => self.link_down(id, &format!("interface {dev}: {s:?}")),
                        Err(e) => self.link_down(id, &e.to_string()),
                    }
                }
                (PortSpec::AfPacket { dev }, false) => {
                    if matches!(sys::link_state(dev), Ok(sys::LinkState::Up)) {
                        let dev = dev.clone();
                        match self.open_afpacket(id, &dev) {
                            Ok(()) => self.link_up(id),
                            Err(e) => tracing::debug!("port {id}: reopen failed: {e}"),
                        }
                    }
                }
                (PortSpec::Tap { netns, .. }, false) => {
                    let ifname = slot
                        .status
                        .ifname
                        .clone()
                        .unwrap_or_else(|| slot.name.clone());
                    let state = match netns {
                        Some(ns) => {
                            let n = ifname.clone();
                            qbridge_io::netns::run_in_netns(ns, move || sys::link_state(&n))
                                .and_then(|r| r)
                        }
                        None => sys::link_state(&ifname),
                    };
                    if matches!(state, Ok(sys::LinkState::Up | sys::LinkState::NoCarrier)) {
                        self.link_up(id);
                    }
                }
                _ => {}
            }
        }
    }

    // ----- control -----

    fn execute(&mut self, op: Op) -> Response {
        let now = self.now_ns();
        self.session.switch_mut().set_time(now);
        // A copy to roll back to is needed only when reconciling can fail hard, which is when a
        // new port's backend cannot be opened; copying the session (every FDB) before each
        // `fdb add` would stall forwarding for milliseconds on a large table.
        let changing = changes(&op);
        let before = may_open_ports(&op).then(|| self.session.clone());
        let r = match op {
            Op::Command { out, words } => {
                parse_words(&words).and_then(|cmd| self.session.execute(&cmd, out))
            }
            Op::Batch { out, text } => self.session.execute_batch(&text, out),
        };
        if !changing {
            return match r {
                Ok(output) => Response::ok(output, Vec::new()),
                Err(e) => Response::err(e.to_string()),
            };
        }
        self.commit(r, before)
    }

    /// After a command that may have changed the configuration: reconcile the backends, or
    /// undo the command when a backend cannot be opened.
    fn commit(&mut self, r: Result<String, ControlError>, before: Option<Session>) -> Response {
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
                        self.session = before;
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
    fn reconcile(&mut self) -> Result<Vec<String>, String> {
        let mut warnings = Vec::new();
        let wanted: Vec<(PortId, String, PortSpec)> = self
            .session
            .ports()
            .into_iter()
            .map(|(id, n, s)| (id, n.to_owned(), s.clone()))
            .collect();
        // Phase 1: open what is new or changed.
        let mut opened: Vec<(u16, Slot)> = Vec::new();
        for (id, name, spec) in &wanted {
            let same = matches!(self.slots.get(id.0 as usize),
                Some(Some(s)) if s.name == *name && s.spec == *spec);
            if same {
                continue;
            }
            match self.open_slot(*id, name, spec) {
                Ok((slot, warning)) => {
                    warnings.extend(warning);
                    opened.push((id.0, slot));
                }
                Err(e) => {
                    for (_, s) in opened {
                        close_slot(s);
                    }
                    return Err(e);
                }
            }
        }
        // Phase 2: close what is gone or replaced, install the new.
        for i in 0..self.slots.len() {
            let keep = matches!(&self.slots[i], Some(s)
                if wanted.iter().any(|(id, n, sp)| id.0 as usize == i && *n == s.name && *sp == s.spec));
            if !keep {
                if let Some(s) = self.slots[i].take() {
                    tracing::info!("port {}: closed", s.name);
                    close_slot(s);
                }
            }
        }
        for (id, mut slot) in opened {
            let i = id as usize;
            if self.slots.len() <= i {
                self.slots.resize_with(i + 1, || None);
            }
            self.register(&mut slot, id);
            self.slots[i] = Some(slot);
        }
        // Phase 3: link state, device MTU and receive filters follow the configuration.
        for (id, _, _) in &wanted {
            self.sync_port(id.0, &mut warnings);
        }
        Ok(warnings)
    }

    /// Adds the slot's descriptor to the epoll set under a fresh token.
    fn register(&mut self, slot: &mut Slot, id: u16) {
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id);
        if let Some(live) = &slot.live {
            if let Some(fd) = live.fd() {
                let r = epoll::add(
                    &self.epoll,
                    fd,
                    epoll::EventData::new_u64(slot.token),
                    epoll::EventFlags::IN,
                );
                if let Err(e) = r {
                    tracing::error!("port {}: epoll_ctl: {e}", slot.name);
                }
            }
        }
    }

    fn open_slot(
        &mut self,
        id: PortId,
        name: &str,
        spec: &PortSpec,
    ) -> Result<(Slot, Option<String>), String> {
        let mut slot = Slot {
            name: name.to_owned(),
            spec: spec.clone(),
            live: None,
            token: 0,
            link_up: true,
            link_downs: 0,
            filter: None,
            status: BackendStatus::default(),
            seen_drops: [0; 3],
        };
        let mut warning = None;
        match spec {
            PortSpec::Pcap => {
                let Some(dir) = &self.cfg.pcap_dir else {
                    return Err(format!(
                        "pcap port {name} needs a directory: start the daemon with --pcap-dir DIR \
                         (or use 'qbridge replay' for pcap files)"
                    ));
                };
                let p = PcapPort::open(dir, name).map_err(|e| format!("port {name}: {e}"))?;
                slot.live = Some(Live::Pcap(Box::new(p)));
                slot.status.open = true;
                tracing::info!("port {name}: pcap, writing {}/{name}.pcap", dir.display());
            }
            PortSpec::AfPacket { dev } => {
                let filter = self.rx_filter(id);
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                match open_afpacket_port(name, dev, &filter, want_mtu) {
                    Ok((p, mtu)) => {
                        slot.live = Some(Live::AfPacket(Box::new(p)));
                        slot.filter = Some(filter.clone());
                        slot.status.open = true;
                        slot.status.device_mtu = Some(mtu);
                        slot.status.promisc = Some(filter.promisc);
                        tracing::info!(
                            "port {name}: AF_PACKET on {dev} (device mtu {mtu}, {})",
                            if filter.promisc {
                                "promiscuous"
                            } else {
                                "unicast filter"
                            }
                        );
                    }
                    Err(e) if e.is_link_down() => {
                        slot.link_up = false;
                        slot.status.error = Some(e.to_string());
                        warning = Some(format!(
                            "port {name}: {e}; the port stays down and is opened when {dev} is up"
                        ));
                    }
                    Err(e) => return Err(format!("port {name}: {e}")),
                }
            }
            PortSpec::Tap { ifname, netns } => {
                let mut cfg = TapConfig::new(Some(ifname.as_deref().unwrap_or(name)));
                cfg.netns = netns.clone();
                let mtu = self.session.switch().port_settings(id).mtu;
                if mtu != 1500 {
                    cfg.device_mtu = Some(mtu);
                }
                let p = TapPort::open(cfg).map_err(|e| format!("port {name}: {e}"))?;
                if Some(p.ifname()) != ifname.as_deref() {
                    slot.status.ifname = Some(p.ifname().to_owned());
                }
                tracing::info!(
                    "port {name}: TAP {}{}",
                    p.ifname(),
                    netns
                        .as_deref()
                        .map(|n| format!(" in netns {n}"))
                        .unwrap_or_default()
                );
                slot.live = Some(Live::Tap(Box::new(p)));
                slot.status.open = true;
            }
        }
        Ok((slot, warning))
    }

    /// (Re)opens the AF_PACKET socket of port `id` with the filter and MTU the configuration
    /// asks for now; the new socket replaces the old one only once it is open.
    fn open_afpacket(&mut self, id: u16, dev: &str) -> Result<(), IoError> {
        let pid = PortId(id);
        let filter = self.rx_filter(pid);
        let want_mtu = self.session.switch().port_max_frame(pid).saturating_sub(14);
        let name = self.slot_name(id);
        let (p, mtu) = open_afpacket_port(&name, dev, &filter, want_mtu)?;
        let mut slot = self.slots[id as usize].take().expect("slot exists");
        if let Some(old) = slot.live.replace(Live::AfPacket(Box::new(p))) {
            let _ = old.close();
        }
        slot.status.open = true;
        slot.status.device_mtu = Some(mtu);
        slot.status.promisc = Some(filter.promisc);
        slot.filter = Some(filter);
        self.register(&mut slot, id);
        self.slots[id as usize] = Some(slot);
        self.publish_status(id);
        Ok(())
    }

    /// After a command: push the link state into the switch, raise the device MTU if the
    /// port's largest frame grew, and reopen an AF_PACKET socket whose receive filter changed.
    fn sync_port(&mut self, id: u16, warnings: &mut Vec<String>) {
        let pid = PortId(id);
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let link_up = slot.link_up;
        if self.session.switch().port_link_up(pid) != link_up {
            self.session.switch_mut().set_link_state(pid, link_up);
        }
        if let (PortSpec::AfPacket { dev }, true) = (&slot.spec, slot.live.is_some()) {
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
                        }
                    }
                    Err(e) => warnings.push(format!(
                        "port {name}: cannot raise the MTU of {dev} to {want}: {e}"
                    )),
                }
            }
            let filter = self.rx_filter(pid);
            if filter_now.as_ref() != Some(&filter) {
                tracing::info!(
                    "port {name}: receive filter now {}; reopening the socket",
                    if filter.promisc {
                        "promiscuous".to_string()
                    } else {
                        format!("{} unicast addresses", filter.unicast.len())
                    }
                );
                if let Err(e) = self.open_afpacket(id, &dev) {
                    warnings.push(format!("port {name}: cannot reopen on {dev}: {e}"));
                }
            }
        }
        self.publish_status(id);
    }

    /// What port `id` must receive. Promiscuous when it learns or floods, or when another
    /// port of its bridge learns or floods (then frames for addresses behind that port, or for
    /// unknown addresses, must come in here); otherwise only the unicast addresses of the
    /// bridge's FDB entries on other ports (besides broadcast, multicast and the interface's
    /// own address, which the kernel always delivers).
    fn rx_filter(&self, id: PortId) -> RxFilter {
        let sw = self.session.switch();
        let Some(bid) = sw.port_master(id) else {
            return RxFilter {
                promisc: false,
                unicast: Vec::new(),
            };
        };
        let members: Vec<PortId> = sw
            .port_ids()
            .map(|(p, _)| p)
            .filter(|&p| sw.port_master(p) == Some(bid))
            .collect();
        let me = sw.port_settings(id);
        let needs = me.learning
            || me.flood
            || members.iter().any(|&p| {
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
        RxFilter {
            promisc: false,
            unicast,
        }
    }

    fn metrics(&self) -> MetricsSnapshot {
        let sw = self.session.switch();
        let ports = sw
            .port_ids()
            .map(|(id, name)| {
                let slot = self.slots.get(id.0 as usize).and_then(Option::as_ref);
                PortRuntime {
                    name: name.to_owned(),
                    running: sw.port_running(id),
                    link_up: sw.port_link_up(id),
                    link_downs: slot.map_or(0, |s| s.link_downs),
                    device_mtu: slot.and_then(|s| s.status.device_mtu),
                }
            })
            .collect();
        MetricsSnapshot {
            stats: self.session.stats_json(),
            ports,
        }
    }
}

fn close_slot(s: Slot) {
    if let Some(l) = s.live {
        if let Err(e) = l.close() {
            tracing::warn!("port {}: {e}", s.name);
        }
    }
}

/// Opens an AF_PACKET port on `dev`, raising the device MTU to `want_mtu` (never lowering
/// it). Returns the port and the device MTU now in force.
fn open_afpacket_port(
    name: &str,
    dev: &str,
    filter: &RxFilter,
    want_mtu: u32,
) -> Result<(AfPacketPort, u32), IoError> {
    let before = sys::get_mtu(dev)?;
    let mut cfg = AfPacketConfig::new(dev);
    cfg.promisc = filter.promisc;
    cfg.unicast = filter.unicast.clone();
    cfg.device_mtu = Some(want_mtu);
    let p = AfPacketPort::open(cfg)?;
    let after = sys::get_mtu(dev).unwrap_or(before.max(want_mtu));
    if after != before {
        tracing::info!(
            "port {name}: device MTU of {dev} raised from {before} to {after} for envelope \
             frames (the kernel allows only 4 bytes of slack, for 0x8100 only)"
        );
    }
    Ok((p, after))
}

/// Whether a request may change the configuration (then the runtime keeps a copy of the
/// session to restore if the backends cannot follow).
fn changes(op: &Op) -> bool {
    match op {
        Op::Command { words, .. } => parse_words(words).is_ok_and(|c| !is_show(&c)),
        Op::Batch { .. } => true,
    }
}

/// Commands that can open a backend: adding a port, or a batch (which may add ports).
fn may_open_ports(op: &Op) -> bool {
    match op {
        Op::Command { words, .. } => parse_words(words)
            .is_ok_and(|c| matches!(c, Command::Link(LinkCommand::AddPort { .. }))),
        Op::Batch { .. } => true,
    }
}

/// Commands that only read.
fn is_show(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Link(LinkCommand::Show { .. })
            | Command::Vlan(VlanCommand::Show { .. })
            | Command::Fdb(FdbCommand::Show { .. })
    )
}
