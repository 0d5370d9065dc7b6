//! `qbridge trace live`: the next frames a port receives, each explained as it is forwarded.
//!
//! A session names a port, a filter (the words of a described frame), a count and a timeout.
//! While one runs, a worker looks at each batch before forwarding it: a frame of a traced port
//! that matches is walked through a sandbox of the switch as it is at that moment
//! ([`Switch::trace_packet`] of a configuration that shares the live FDB, so the sandbox copies
//! the FDB the frame meets); the batch is then forwarded as always, and what the pipeline did
//! with the frame (its drop reason, if any) is told beside the explanation. With no session, a
//! worker pays one relaxed load per batch ([`TraceLive::active`]).
//!
//! Frames the eBPF fast path forwards from its flow cache never reach a worker: while a
//! session watches a port the program serves, the port carries `PORT_TRACE` and the program
//! copies each hit, as received, to the trace device (the upcall veth's other end); the
//! control thread reads those copies ([`HitReader`]) and explains them the same way, as
//! hits. Frames the program sends up are misses, and say so.
//!
//! Lines go to the client with `try_send` (a full queue loses the line, counted in the end
//! line), so tracing never holds forwarding up; it costs a sandbox (a copy of the FDB) per
//! traced frame, which the count bounds.

use qbridge_bridge::{Forwarder, Switch};
use qbridge_control::trace::FastStage;
use qbridge_control::trace::{render_live, render_live_end, LiveFrame, LivePath};
use qbridge_control::trace_details::PortDetails;
use qbridge_control::{OutputOptions, TraceLiveSpec};
use qbridge_packet::PacketBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};

/// One `trace live` client.
#[derive(Debug)]
struct Session {
    id: u64,
    port: u16,
    tpid: u16,
    spec: TraceLiveSpec,
    out: OutputOptions,
    tx: SyncSender<String>,
    started_ns: u64,
    /// Frames claimed for tracing (at most `spec.count`), and told.
    claimed: u32,
    told: u32,
    /// Lines the client's queue had no room for.
    lost: u32,
    /// The configuration, sharing the switch's FDB ([`Switch::share_fdb`]); the engine
    /// replaces it after every change.
    switch: Arc<Mutex<Switch>>,
    /// The `fast` stage as of the session's start or the last change (`None`: no fast path in
    /// this daemon).
    fast: Option<Arc<dyn FastStage>>,
    /// The program serves the port (hits come through the trace device).
    served: bool,
    /// The VXLAN ports and bonds, for the `vxlan` and `bond` stages.
    details: PortDetails,
}

/// A frame claimed before its batch was forwarded: its explanation, told after.
#[derive(Debug)]
pub(crate) struct Claimed {
    session: u64,
    index: u32,
    frame: usize,
    trace: qbridge_bridge::Trace,
    after_ns: u64,
    /// A fast-path miss, and why.
    miss: Option<String>,
}

/// The sessions, shared by the control thread (which adds, refreshes and ends them) and the
/// workers (which claim and tell frames).
#[derive(Debug, Default)]
pub(crate) struct TraceLive {
    active: AtomicBool,
    sessions: Mutex<Vec<Session>>,
    next_id: std::sync::atomic::AtomicU64,
    /// A session on a port the program serves ended: the engine clears the port's flag.
    served_ended: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TraceLive {
    /// Whether any session runs (one relaxed load: a worker asks once per batch).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.active.load(Relaxed)
    }

    /// Starts a session on port `port` (whose TPID is `tpid`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &self,
        port: u16,
        tpid: u16,
        spec: TraceLiveSpec,
        out: OutputOptions,
        tx: SyncSender<String>,
        now_ns: u64,
        switch: Switch,
        fast: Option<Arc<dyn FastStage>>,
        served: bool,
        details: PortDetails,
    ) {
        let mut s = lock(&self.sessions);
        s.push(Session {
            id: self.next_id.fetch_add(1, Relaxed),
            port,
            tpid,
            spec,
            out,
            tx,
            started_ns: now_ns,
            claimed: 0,
            told: 0,
            lost: 0,
            switch: Arc::new(Mutex::new(switch)),
            fast,
            served,
            details,
        });
        self.active.store(true, Relaxed);
    }

    /// The configuration changed: every session traces with the new one.
    pub(crate) fn refresh(
        &self,
        switch: &Switch,
        fast: Option<Arc<dyn FastStage>>,
        details: &PortDetails,
    ) {
        let mut s = lock(&self.sessions);
        for x in s.iter_mut() {
            *lock(&x.switch) = switch.share_fdb();
            x.fast = fast.clone();
            x.details = details.clone();
        }
    }

    /// Ports the program must copy hits of (served ports some session watches).
    pub(crate) fn traced_ports(&self) -> Vec<u16> {
        let s = lock(&self.sessions);
        let mut v: Vec<u16> = s.iter().filter(|x| x.served).map(|x| x.port).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Before a batch is forwarded: the frames of `pkts` some session wants, each explained
    /// with the switch as it is now. `miss`: the batch came from the fast path's upcall.
    pub(crate) fn claim(
        &self,
        pkts: &[PacketBuf],
        now_ns: u64,
        miss: Option<&Misses<'_>>,
    ) -> Vec<Claimed> {
        let mut out = Vec::new();
        let mut ss = lock(&self.sessions);
        for (i, p) in pkts.iter().enumerate() {
            for s in ss.iter_mut() {
                if s.port != p.port
                    || s.claimed >= s.spec.count
                    || !s.spec.filter.matches(p.frame(), s.tpid)
                {
                    continue;
                }
                let Some(trace) = explain(s, p, now_ns) else {
                    continue;
                };
                s.claimed += 1;
                out.push(Claimed {
                    session: s.id,
                    index: s.claimed,
                    frame: i,
                    trace,
                    after_ns: now_ns.saturating_sub(s.started_ns),
                    miss: miss.map(|m| m.why(p.port, p.frame())),
                });
            }
        }
        out
    }

    /// After the batch was forwarded: tells each claimed frame with what `core` did with it.
    pub(crate) fn tell(&self, claimed: Vec<Claimed>, core: &Forwarder) {
        if claimed.is_empty() {
            return;
        }
        let mut ss = lock(&self.sessions);
        for c in claimed {
            let Some(s) = ss.iter_mut().find(|s| s.id == c.session) else {
                continue;
            };
            let path = match c.miss {
                Some(why) => LivePath::Miss(why),
                None => LivePath::Pipeline,
            };
            let f = LiveFrame {
                index: c.index,
                count: s.spec.count,
                after_ns: c.after_ns,
                path,
                trace: &c.trace,
                dropped: core.dropped(c.frame),
                followed: core.tells_frames(),
            };
            send(s, render_live(&f, s.out));
        }
        self.finish(&mut ss, None);
    }

    /// A copy of a frame the fast path forwarded from its flow, received on port `id`; `flow`
    /// names the flow.
    pub(crate) fn tell_hit(&self, id: u16, frame: &[u8], now_ns: u64, flow: &str) {
        let mut ss = lock(&self.sessions);
        for s in ss.iter_mut() {
            if s.port != id || s.claimed >= s.spec.count || !s.spec.filter.matches(frame, s.tpid) {
                continue;
            }
            let mut p = PacketBuf::from_frame(frame);
            p.port = id;
            let Some(trace) = explain(s, &p, now_ns) else {
                continue;
            };
            s.claimed += 1;
            let f = LiveFrame {
                index: s.claimed,
                count: s.spec.count,
                after_ns: now_ns.saturating_sub(s.started_ns),
                path: LivePath::Hit(flow.to_string()),
                trace: &trace,
                dropped: None,
                followed: true,
            };
            let line = render_live(&f, s.out);
            send(s, line);
        }
        self.finish(&mut ss, None);
    }

    /// Once a second from the control thread: ends the sessions whose time is up and lets go
    /// of those whose client is gone. True when a session on a served port ended since the
    /// last tick (the traced ports changed).
    pub(crate) fn tick(&self, now_ns: u64) -> bool {
        let mut ss = lock(&self.sessions);
        if !ss.is_empty() {
            self.finish(&mut ss, Some(now_ns));
        }
        self.served_ended.swap(false, Relaxed)
    }

    /// Ends the sessions that told every frame (or, with `now_ns`, whose timeout passed, or
    /// whose client left).
    fn finish(&self, ss: &mut Vec<Session>, now_ns: Option<u64>) {
        let before = ss.iter().filter(|s| s.served).count();
        ss.retain_mut(|s| {
            let timed_out = now_ns.is_some_and(|now| {
                now.saturating_sub(s.started_ns) >= u64::from(s.spec.timeout_s) * 1_000_000_000
            });
            if s.told >= s.spec.count || timed_out {
                let end = render_live_end(
                    s.told,
                    s.spec.count,
                    (s.told < s.spec.count).then_some(s.spec.timeout_s),
                    s.lost,
                    s.out,
                );
                // Sent if the client's queue has room (never waited for); the stream closes
                // after it either way, which is what ends the client.
                let _ = s.tx.try_send(end);
                return false;
            }
            // An empty line writes nothing: a probe for a client that is gone.
            now_ns.is_none()
                || !matches!(
                    s.tx.try_send(String::new()),
                    Err(TrySendError::Disconnected(_))
                )
        });
        if ss.iter().filter(|s| s.served).count() != before {
            self.served_ended.store(true, Relaxed);
        }
        self.active.store(!ss.is_empty(), Relaxed);
    }
}

fn explain(s: &Session, p: &PacketBuf, now_ns: u64) -> Option<qbridge_bridge::Trace> {
    let mut sw = lock(&s.switch);
    sw.set_time(now_ns);
    let mut t = sw.trace_packet(p).ok()?;
    s.details.add_steps(&mut t);
    if let Some(f) = &s.fast {
        qbridge_control::trace::add_fast_stage(&mut t, p.frame(), &**f);
    }
    Some(t)
}

/// A hit's flow in words: its key, how long ago it was installed, the generation it serves.
fn hit_flow(fast: &crate::fastpath::FastShared, index: u16, frame: &[u8]) -> String {
    let generation = fast.generation.load(Relaxed);
    let Some(key) = qbridge_fastpath::key_of(frame, u32::from(index), [0, 0]) else {
        return format!(
            "forwarded in the kernel from a cached flow, configuration generation {generation}"
        );
    };
    let tags: Vec<String> = (0..usize::from(key.ntags).min(key.tpid_be.len()))
        .map(|i| {
            format!(
                "{:04x} vid {}",
                u16::from_be(key.tpid_be[i]),
                u16::from_be(key.tci_be[i]) & 0x0fff
            )
        })
        .collect();
    let age = match fast.installed_ago(&key) {
        Some(d) => format!("installed {:.1} s ago", d.as_secs_f64()),
        None => "installed before this daemon kept install times".to_string(),
    };
    format!(
        "its flow for {}, dst {}, ethertype {:#06x} ({age}, configuration generation \
         {generation}) forwarded it in the kernel",
        if tags.is_empty() {
            "untagged frames".to_string()
        } else {
            format!("tags {}", tags.join(" / "))
        },
        qbridge_wire::MacAddr(key.dst),
        u16::from_be(key.ethertype_be)
    )
}

/// What a worker lends to tell why the program sent a batch's frames up.
pub(crate) struct Misses<'a> {
    pub fast: &'a crate::fastpath::FastShared,
    /// The program's index of a port's opening (the flow key's `in_port`).
    pub index: &'a dyn Fn(u16) -> Option<u16>,
}

impl Misses<'_> {
    /// Why the program sent `frame` of port `id` up: what the frame and the program's flow
    /// table say now (before the pipeline forwards it; the program counts every miss by
    /// reason in `show fast-path`).
    fn why(&self, id: u16, frame: &[u8]) -> String {
        if frame.first().is_some_and(|b| b & 1 == 1) {
            return "a group destination: floods and multicast always go up".into();
        }
        let Some(index) = (self.index)(id) else {
            return "a port this worker no longer holds".into();
        };
        let Some(key) = qbridge_fastpath::key_of(frame, u32::from(index), [0, 0]) else {
            return "tags the program leaves to the pipeline (more than two, or a TPID other \
                    than 0x8100 and 0x88a8)"
                .into();
        };
        let now = self.fast.generation.load(Relaxed);
        match self.fast.writer.flow(&key) {
            Ok(None) => "no flow for its key yet: the pipeline forwards it, and installs the \
                         flow when its decision allows"
                .into(),
            Ok(Some(a)) if a.generation != now => format!(
                "its flow was made under configuration generation {}, the program's is {now} \
                 (stale: a change since)",
                a.generation
            ),
            Ok(Some(_)) => "its flow's checks failed: the source new, moved or aged on the \
                            ingress port, the destination's entry changed, or a length the \
                            flow does not cover"
                .into(),
            Err(e) => format!("the flow table could not be read ({e})"),
        }
    }
}

fn send(s: &mut Session, line: String) {
    s.told += 1;
    if let Err(TrySendError::Full(_)) = s.tx.try_send(line) {
        s.lost += 1;
    }
}

/// The control thread's reader of the trace device: the copies of the hits the program made
/// for traced ports, explained as hits. Runs on its own thread while sessions watch ports
/// the program serves; the engine stops it when none is left (dropping it does).
#[derive(Debug)]
pub(crate) struct HitReader {
    thread: std::thread::JoinHandle<()>,
    stop: Arc<AtomicBool>,
}

impl HitReader {
    /// Starts reading `dev` for `live`; `fast`: the fast path's shared state (its
    /// configuration generation is told with each hit), `epoch` the engine's clock.
    pub(crate) fn start(
        dev: &str,
        live: Arc<TraceLive>,
        epoch: std::time::Instant,
        fast: Arc<crate::fastpath::FastShared>,
    ) -> Result<HitReader, String> {
        use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort, RxMode};
        use qbridge_io::Port;
        let mut cfg = AfPacketConfig::new(dev).with_ring_frames(1024);
        cfg.rx = RxMode::Upcall;
        let mut q = AfPacketPort::open(cfg).map_err(|e| format!("trace device {dev}: {e}"))?;
        q.start().map_err(|e| format!("trace device {dev}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("qbridge-trace".into())
            .spawn(move || read_hits(q, &live, epoch, &fast, &flag))
            .map_err(|e| format!("cannot start the trace thread: {e}"))?;
        Ok(HitReader { thread, stop })
    }

    /// Whether the thread still runs.
    pub(crate) fn running(&self) -> bool {
        !self.thread.is_finished()
    }
}

impl Drop for HitReader {
    /// The thread ends within its poll interval (not waited for: it holds only shared state).
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

fn read_hits(
    mut q: qbridge_io::afpacket::AfPacketPort,
    live: &TraceLive,
    epoch: std::time::Instant,
    fast: &crate::fastpath::FastShared,
    stop: &AtomicBool,
) {
    use qbridge_io::Port;
    use qbridge_packet::{Batch, BufPool};
    let mut pool = BufPool::new(256);
    let mut batch = Batch::with_capacity(64);
    while !stop.load(Relaxed) {
        let ready = q.fd().map(|fd| {
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let wait = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 200_000_000,
            };
            rustix::event::poll(&mut fds, Some(&wait)).unwrap_or(0)
        });
        if ready == Some(0) {
            continue;
        }
        if let Err(e) = q.rx_burst(&mut batch, &mut pool, 64) {
            tracing::warn!("trace device: {e}");
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        let now = epoch.elapsed().as_nanos() as u64 + 1;
        for p in &batch.pkts {
            if p.port == qbridge_io::afpacket::UPCALL_NO_PORT {
                continue;
            }
            let id = p.port & 0x0fff;
            let flow = hit_flow(fast, p.port, p.frame());
            live.tell_hit(id, p.frame(), now, &flow);
        }
        pool.put_all(&mut batch);
    }
}
