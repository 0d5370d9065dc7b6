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
    parse_words, BackendStatus, Command, ControlError, DeviceOffloadStatus, FdbCommand,
    LinkCommand, Op, PortSpec, Response, Session, VlanCommand,
};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort};
use qbridge_io::tap::{TapConfig, TapPort};
use qbridge_io::{sys, DeviceOffloads, IoError, Port, PortCaps, TxReport};
use qbridge_packet::{Batch, BufPool};
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
    /// Super-frames segmented in software for the port, and of those, refused by the kernel.
    pub tx_sw_gso: u64,
    pub tx_gso_refused: u64,
    /// AF_PACKET: the device's offloads as last read.
    pub offloads: Option<DeviceOffloadStatus>,
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
    /// Super-frames a port handed back to be segmented ([`egress`]).
    refused: Batch,
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
            refused: Batch::with_capacity(BURST),
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
                        self.publish_all();
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

    /// The egress stage of port `j`: see [`egress`]; counts what happened into the switch's
    /// drop counters and the port's software-segmentation counters.
    fn tx_port(&mut self, j: usize) {
        let Runtime {
            session,
            slots,
            outputs,
            fix,
            refused,
            ..
        } = self;
        let sw = session.switch_mut();
        let id = PortId(j as u16);
        let batch = &mut outputs.ports[j];
        let slot = match slots.get_mut(j) {
            Some(Some(s)) if s.link_up && s.live.is_some() => s,
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
        let Some(live) = slot.live.as_mut() else {
            return;
        };
        let tpid = sw.port_tpid(id);
        let is_tag = |t: Tpid| t == tpid || t.is_well_known();
        let caps = live.caps();
        let (r, failed) = egress(
            live.port(),
            caps,
            &is_tag,
            batch,
            &mut outputs.pool,
            fix,
            refused,
        );
        let counts = [
            (DropReason::TxQueueFull, r.tx.queue_full),
            (DropReason::TxKernelDrop, r.tx.kernel_drop),
            (DropReason::TxTooLong, r.tx.too_long),
            (DropReason::TxError, r.tx.error + r.fixup_errors),
        ];
        for (reason, n) in counts {
            if n != 0 {
                sw.count_port_drop(id, 0, reason, n as u64);
            }
        }
        slot.status.tx_sw_gso += r.sw_gso;
        slot.status.tx_gso_refused += r.gso_refused;
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
                (PortSpec::AfPacket { dev, .. }, true) => {
                    let state = match &slot.live {
                        Some(Live::AfPacket(p)) => p.link_state(),
                        _ => sys::link_state(dev),
                    };
                    match state {
                        Ok(sys::LinkState::Up) => self.refresh_offloads(id),
                        Ok(s) => self.link_down(id, &format!("interface {dev}: {s:?}")),
                        Err(e) => self.link_down(id, &e.to_string()),
                    }
                }
                (PortSpec::AfPacket { dev, .. }, false) => {
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

    /// Reads an AF_PACKET port's device offloads again (`ethtool -K` changes them at any
    /// time) and ages the tag depths whose super-frames the kernel refused; logs a change.
    fn refresh_offloads(&mut self, id: u16) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some(Live::AfPacket(p)) = slot.live.as_mut() else {
            return;
        };
        match p.refresh_offloads() {
            Ok(changed) => {
                let now = offload_status(p.device_offloads());
                let before = slot.status.offloads.as_ref();
                let newly: Vec<u8> = now
                    .refused_tag_depths
                    .iter()
                    .copied()
                    .filter(|d| before.is_none_or(|b| !b.refused_tag_depths.contains(d)))
                    .collect();
                if !newly.is_empty() {
                    tracing::info!(
                        "port {}: the kernel refused super-frames with {newly:?} tags on {} (its \
                         device would not segment them); they are segmented in software, the \
                         direct path is tried again every {} s",
                        slot.name,
                        p.name(),
                        qbridge_io::afpacket::REFUSAL_TICKS
                    );
                }
                if changed {
                    tracing::info!(
                        "port {}: device offloads of {} now {} (were {})",
                        slot.name,
                        p.name(),
                        describe_offloads(&now),
                        slot.status
                            .offloads
                            .as_ref()
                            .map_or_else(|| "unknown".to_owned(), describe_offloads)
                    );
                }
                slot.status.offloads = Some(now);
            }
            Err(e) => tracing::debug!("port {}: cannot read device offloads: {e}", slot.name),
        }
    }

    /// Copies every port's runtime status (its counters move with every batch) into the
    /// session, for a show command or a metrics scrape.
    fn publish_all(&mut self) {
        for i in 0..self.slots.len() {
            self.publish_status(i as u16);
        }
    }

    // ----- control -----

    fn execute(&mut self, op: Op) -> Response {
        self.publish_all();
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
            PortSpec::AfPacket { dev, qdisc_bypass } => {
                let filter = self.rx_filter(id);
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                slot.status.qdisc_bypass = Some(*qdisc_bypass);
                match open_afpacket_port(name, dev, *qdisc_bypass, &filter, want_mtu) {
                    Ok((p, mtu)) => {
                        let offloads = offload_status(p.device_offloads());
                        tracing::info!(
                            "port {name}: AF_PACKET on {dev} (device mtu {mtu}, {}, qdisc \
                             bypass {}, device offloads {})",
                            if filter.promisc {
                                "promiscuous"
                            } else {
                                "unicast filter"
                            },
                            if *qdisc_bypass { "on" } else { "off" },
                            describe_offloads(&offloads)
                        );
                        slot.live = Some(Live::AfPacket(Box::new(p)));
                        slot.filter = Some(filter.clone());
                        slot.status.open = true;
                        slot.status.device_mtu = Some(mtu);
                        slot.status.promisc = Some(filter.promisc);
                        slot.status.offloads = Some(offloads);
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
        let bypass = match self.slots.get(id as usize) {
            Some(Some(Slot {
                spec: PortSpec::AfPacket { qdisc_bypass, .. },
                ..
            })) => *qdisc_bypass,
            _ => true,
        };
        let (p, mtu) = open_afpacket_port(&name, dev, bypass, &filter, want_mtu)?;
        let offloads = offload_status(p.device_offloads());
        let mut slot = self.slots[id as usize].take().expect("slot exists");
        slot.status.offloads = Some(offloads);
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
        if let (PortSpec::AfPacket { dev, .. }, true) = (&slot.spec, slot.live.is_some()) {
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
                    tx_sw_gso: slot.map_or(0, |s| s.status.tx_sw_gso),
                    tx_gso_refused: slot.map_or(0, |s| s.status.tx_gso_refused),
                    offloads: slot.and_then(|s| s.status.offloads.clone()),
                }
            })
            .collect();
        MetricsSnapshot {
            stats: self.session.stats_json(),
            ports,
        }
    }
}

/// What [`egress`] did with one port's batch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct EgressReport {
    /// The port's transmit results, summed over both passes.
    tx: TxReport,
    /// Super-frames segmented in software (the port or its device could not take them, or the
    /// kernel refused them).
    sw_gso: u64,
    /// Of `sw_gso`: super-frames the kernel refused whole first.
    gso_refused: u64,
    /// Frames that could not be segmented or checksummed (dropped, `tx_error`).
    fixup_errors: usize,
}

/// The egress stage of one port, on a batch the switch produced for it:
///
/// 1. offload fix-up: a TCP super-frame the port cannot take whole (no TSO, or its device
///    lacks TSO for the frame's IP version or tag depth, see [`PortCaps::takes_super_frame`])
///    is segmented in software, at any tag depth; a frame left to checksum (`NEEDS_CSUM`) for
///    a port without checksum offload gets its checksum completed;
/// 2. one [`Port::tx_burst_report`];
/// 3. super-frames the kernel refused whole anyway (see [`TxReport::refused`]) are segmented
///    and sent at once, in a second burst: never dropped.
///
/// `batch` is drained; `fix` and `refused` are scratch batches (empty on entry and on
/// return). The error is the port's failure, if it failed (its frames are counted as
/// `error`).
fn egress(
    port: &mut dyn Port,
    caps: PortCaps,
    is_tag: &dyn Fn(Tpid) -> bool,
    batch: &mut Batch,
    pool: &mut BufPool,
    fix: &mut Batch,
    refused: &mut Batch,
) -> (EgressReport, Option<IoError>) {
    let mut r = EgressReport::default();
    if !caps.takes_everything() {
        for mut p in batch.pkts.drain(..) {
            if !caps.takes_super_frame(p.frame(), &p.offload) {
                match qbridge_offload::segment(&p, is_tag, pool, &mut fix.pkts) {
                    Ok(_) => r.sw_gso += 1,
                    Err(e) => {
                        tracing::debug!("port {}: cannot segment a frame: {e}", port.name());
                        r.fixup_errors += 1;
                    }
                }
                pool.put(p);
                continue;
            }
            if p.offload.needs_csum() && !caps.csum {
                if let Err(e) = qbridge_offload::complete_checksum(&mut p, is_tag) {
                    tracing::debug!("port {}: cannot complete a checksum: {e}", port.name());
                    r.fixup_errors += 1;
                    pool.put(p);
                    continue;
                }
            }
            fix.push(p);
        }
        std::mem::swap(batch, fix);
    }
    for pass in 0..2 {
        let n = batch.len();
        match port.tx_burst_report(batch, pool, refused) {
            Ok(t) => add_report(&mut r.tx, &t),
            Err(e) => {
                r.tx.error += n;
                for p in refused.drain() {
                    pool.put(p);
                }
                return (r, Some(e));
            }
        }
        if refused.is_empty() {
            break;
        }
        if pass == 1 {
            // Segments are not super-frames; a port that refuses them anyway drops them.
            r.tx.kernel_drop += refused.len();
            for p in refused.drain() {
                pool.put(p);
            }
            break;
        }
        for p in refused.drain() {
            match qbridge_offload::segment(&p, is_tag, pool, &mut batch.pkts) {
                Ok(_) => {
                    r.sw_gso += 1;
                    r.gso_refused += 1;
                }
                Err(e) => {
                    tracing::debug!("port {}: cannot segment a frame: {e}", port.name());
                    r.fixup_errors += 1;
                }
            }
            pool.put(p);
        }
    }
    (r, None)
}

fn add_report(sum: &mut TxReport, t: &TxReport) {
    sum.sent += t.sent;
    sum.queue_full += t.queue_full;
    sum.kernel_drop += t.kernel_drop;
    sum.too_long += t.too_long;
    sum.error += t.error;
    sum.refused += t.refused;
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
    qdisc_bypass: bool,
    filter: &RxFilter,
    want_mtu: u32,
) -> Result<(AfPacketPort, u32), IoError> {
    let before = sys::get_mtu(dev)?;
    let mut cfg = AfPacketConfig::new(dev);
    cfg.qdisc_bypass = qdisc_bypass;
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

/// A device's offloads as `link show` and the metrics report them.
fn offload_status(d: DeviceOffloads) -> DeviceOffloadStatus {
    DeviceOffloadStatus {
        tso4: d.tso4,
        tso6: d.tso6,
        tso_ecn: d.tso_ecn,
        sg: d.sg,
        csum4: d.csum4,
        csum6: d.csum6,
        refused_tag_depths: (0..8u8)
            .filter(|&i| d.refused_tags & (1 << i) != 0)
            .collect(),
    }
}

/// `tso4 on tso6 off …` for the log.
fn describe_offloads(o: &DeviceOffloadStatus) -> String {
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "tso4 {} tso6 {} tso_ecn {} sg {} csum4 {} csum6 {}",
        on(o.tso4),
        on(o.tso6),
        on(o.tso_ecn),
        on(o.sg),
        on(o.csum4),
        on(o.csum6)
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use qbridge_io::MemPort;
    use qbridge_packet::{OffloadMeta, PacketBuf};
    use qbridge_wire::{checksum, ipv4, parse_headers, tcp, IpProtocol};

    const PAYLOAD: usize = 20_000;
    const MSS: u16 = 1448;

    /// A TCP/IPv4 super-frame as a kernel hands it over: C-tag and S-tag, `NEEDS_CSUM`, the
    /// TCP checksum field holding the pseudo-header sum.
    fn super_frame() -> PacketBuf {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend([0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10, 0x08, 0x00]);
        let l3 = f.len();
        let ip = ipv4::Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            protocol: IpProtocol::Tcp,
            payload_len: 20 + PAYLOAD,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
            more_frags: false,
            frag_offset_bytes: 0,
            options: Default::default(),
        };
        f.resize(l3 + 40 + PAYLOAD, 0);
        ip.emit(&mut f[l3..]).unwrap();
        let l4 = l3 + 20;
        f[l4 + 12] = 0x50;
        f[l4 + 13] = 0x18;
        for (i, b) in f[l4 + 20..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let pseudo = checksum::pseudo_header_v4(
            ip.src_addr,
            ip.dst_addr,
            IpProtocol::Tcp,
            (20 + PAYLOAD) as u32,
        );
        let off = l4 + tcp::CHECKSUM_OFFSET;
        f[off..off + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let mut p = PacketBuf::from_frame(&f);
        p.offload = OffloadMeta {
            flags: OffloadMeta::F_NEEDS_CSUM,
            gso_type: OffloadMeta::GSO_TCPV4,
            hdr_len: (l4 + 20) as u16,
            gso_size: MSS,
            csum_start: l4 as u16,
            csum_offset: tcp::CHECKSUM_OFFSET as u16,
        };
        p
    }

    fn vnet_caps(device: Option<DeviceOffloads>) -> PortCaps {
        PortCaps {
            vnet_hdr: true,
            tso: true,
            csum: true,
            max_frame: 1522,
            device,
        }
    }

    const ALL: DeviceOffloads = DeviceOffloads {
        tso4: true,
        tso6: true,
        tso_ecn: true,
        sg: true,
        csum4: true,
        csum6: true,
        refused_tags: 0,
    };

    /// Runs one batch of one super-frame and two plain frames through [`egress`]; returns the
    /// report and what the port sent.
    fn run(port: &mut MemPort) -> (EgressReport, Vec<qbridge_io::MemFrame>) {
        let mut pool = BufPool::new(64);
        let (mut fix, mut refused) = (Batch::default(), Batch::default());
        let mut batch = Batch::default();
        batch.push(PacketBuf::from_frame(&[0u8; 60]));
        batch.push(super_frame());
        batch.push(PacketBuf::from_frame(&[1u8; 60]));
        let caps = port.caps();
        let is_tag = |t: Tpid| t.is_well_known();
        let (r, err) = egress(
            port,
            caps,
            &is_tag,
            &mut batch,
            &mut pool,
            &mut fix,
            &mut refused,
        );
        assert!(err.is_none());
        assert!(batch.is_empty() && fix.is_empty() && refused.is_empty());
        (r, port.take_sent())
    }

    /// Every TCP segment sent is at most MSS, carries both tags and valid checksums, and the
    /// payloads are the super-frame's, in order.
    fn assert_segments(sent: &[qbridge_io::MemFrame]) {
        let mut data = Vec::new();
        let mut segments = 0;
        for f in sent {
            let Ok(h) = parse_headers(&f.data, Tpid::is_well_known) else {
                continue;
            };
            if h.l4_proto != Some(IpProtocol::Tcp) {
                continue;
            }
            assert!(!f.offload.is_gso(), "a super-frame was sent");
            assert_eq!(h.tags.as_slice().len(), 2);
            let ip = ipv4::Packet::new_checked(&f.data[h.l3_offset..h.l3_end]).unwrap();
            assert!(ip.verify_checksum());
            let t = tcp::Packet::new_checked(ip.payload()).unwrap();
            let pseudo = checksum::pseudo_header_v4(
                ip.src_addr(),
                ip.dst_addr(),
                IpProtocol::Tcp,
                ip.payload().len() as u32,
            );
            assert!(t.verify_checksum(pseudo), "segment {segments}");
            assert!(t.payload().len() <= usize::from(MSS));
            data.extend_from_slice(t.payload());
            segments += 1;
        }
        assert_eq!(segments, PAYLOAD.div_ceil(usize::from(MSS)));
        let want: Vec<u8> = (0..PAYLOAD).map(|i| (i % 251) as u8).collect();
        assert!(
            data == want,
            "segment payloads differ from the super-frame's"
        );
    }

    /// ENOBUFS on a super-frame (here the in-memory port playing a qdisc-bypass kernel whose
    /// device will not segment two tags) leads to software segmentation and an immediate
    /// resend: nothing dropped, one refusal and one software GSO counted, the plain frames of
    /// the batch sent as well.
    #[test]
    fn refused_super_frame_is_segmented_and_resent() {
        let mut port = MemPort::with_caps("m0", vnet_caps(Some(ALL)));
        port.refuse_super_frames = true;
        let (r, sent) = run(&mut port);
        assert_eq!(r.tx.dropped(), 0, "{r:?}");
        assert_eq!(r.fixup_errors, 0);
        assert_eq!((r.sw_gso, r.gso_refused, r.tx.refused), (1, 1, 1));
        assert_eq!(r.tx.sent, 2 + 14);
        assert_eq!(sent.len(), 16);
        assert_segments(&sent);
    }

    /// A device without TSO for the frame (TSO off, or a refused tag depth remembered):
    /// segmented before the send, no refusal; with TSO the super-frame goes out whole.
    #[test]
    fn device_features_decide_before_the_send() {
        for device in [
            DeviceOffloads { tso4: false, ..ALL },
            DeviceOffloads { sg: false, ..ALL },
            DeviceOffloads {
                refused_tags: qbridge_io::port::depth_bit(2),
                ..ALL
            },
        ] {
            let mut port = MemPort::with_caps("m0", vnet_caps(Some(device)));
            port.refuse_super_frames = true;
            let (r, sent) = run(&mut port);
            assert_eq!((r.sw_gso, r.gso_refused, r.tx.dropped()), (1, 0, 0));
            assert_segments(&sent);
            assert_eq!(port.refused_super_frames, 0, "{device:?}");
        }
        for device in [None, Some(ALL), Some(DeviceOffloads { tso6: false, ..ALL })] {
            let mut port = MemPort::with_caps("m0", vnet_caps(device));
            let (r, sent) = run(&mut port);
            assert_eq!((r.sw_gso, r.tx.sent, r.tx.dropped()), (0, 3, 0));
            assert!(sent[1].offload.is_gso());
        }
    }
}
