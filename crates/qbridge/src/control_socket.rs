//! The daemon's side of the control socket: the accept loop, one thread per connection, and
//! the limits that keep a local client from taking the daemon down.
//!
//! Limits (docs/daemon.md, "Control socket limits"):
//! - at most [`MAX_CONNECTIONS`] connections at once. A new one over the limit takes the place
//!   of an idle connection or of one whose request is still arriving (it gets an error line
//!   and is closed): of the client (peer process, by `SO_PEERCRED`) that holds the most
//!   connections, the one idle or reading longest — so one client holding every connection
//!   idle or with partial requests cannot lock the others out (decision 28). Only when every
//!   connection is a complete request being answered or a monitor is the new one refused (an
//!   error line, closed).
//! - at most [`MAX_MONITORS`] of them monitors (they are never idle, so never evicted).
//! - a connection idle (no request) for `--idle-timeout` (60 s) is closed with an error line.
//! - a request must arrive whole within [`REQUEST_DEADLINE`] of its first byte.
//! - a request line holds at most [`MAX_REQUEST_LINE_BYTES`]; a batch larger than a line is
//!   streamed (`batch_len`), at most [`MAX_BATCH_BYTES`], and all connections together hold at
//!   most [`MAX_BATCH_BYTES`] of batch text at once. Buffers grow with `try_reserve`: a request
//!   that cannot be held is answered with an error, never an abort.
//! - out of file descriptors (`EMFILE`, `ENFILE`): the accept loop closes the connection idle
//!   longest, or backs off (10 ms doubling to 1 s) when there is none; its warnings are
//!   rate-limited (one per 10 s, with the count of those suppressed).
//!
//! Threads: the accept loop (`qbridge-control`) and one `qbridge-conn` per connection (256 KiB
//! stacks). A connection thread parses a request and hands it to the control-plane thread
//! ([`Handle::call`]), waits for the answer and writes it back; a monitor connection's thread
//! copies the event lines the control plane queues for it.

use qbridge_control::{
    batch_too_long, Incoming, Op, Request, Response, MAX_BATCH_BYTES, MAX_REQUEST_LINE_BYTES,
};
use qbridge_datapath::Handle;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Most control connections at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Most of them that may be monitors.
pub const MAX_MONITORS: usize = 16;
/// A connection without a request for this long is closed (`--idle-timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A request (a line, or a streamed batch) must arrive whole within this time of its first
/// byte; a reply must be taken within it too.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// A monitor client that takes nothing for this long is disconnected.
const MONITOR_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// The answer on a connection closed while its request was arriving (see
/// [`Table::evict_for_new`]).
const EVICTED_PARTIAL: &str = "closing this connection: its request was not complete and the \
     daemon needed room for another (at most 64 connections; the client holding the most \
     gives one up)";
/// A streamed batch may take at most this fraction (1/N) of the memory the process's cgroup
/// has left ([`crate::memlimit`]).
const BATCH_SHARE_OF_HEADROOM: u64 = 2;
/// Stack of a connection thread (its buffers are on the heap).
const CONN_STACK_BYTES: usize = 256 << 10;
/// Between two warnings of one kind.
const LOG_INTERVAL: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One warning of a kind per interval; the next one says how many were left out.
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    pub const fn new(interval: Duration) -> RateLimit {
        RateLimit {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(suppressed)` when a message may be logged now (`suppressed`: how many were not
    /// since the last one), `None` when it must be counted and left out.
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|l| now.duration_since(l) < self.interval)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// ` (N similar warnings suppressed)`, or nothing.
fn suppressed_note(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} similar warnings suppressed since the last one)")
    }
}

/// Logs `msg` at warn through `limit`.
fn warn_limited(limit: &Mutex<RateLimit>, msg: impl FnOnce() -> String) {
    let allowed = lock(limit).check(Instant::now());
    if let Some(n) = allowed {
        tracing::warn!("{}{}", msg(), suppressed_note(n));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request: may be closed to admit another connection.
    Idle,
    /// A request has begun to arrive and is not complete: may be closed to admit another
    /// connection (see [`Table::evict_for_new`]).
    Reading,
    /// Waiting for the control plane, or writing the answer.
    Busy,
    Monitor,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    stream: Arc<UnixStream>,
    state: State,
    /// When the connection last became idle (or was accepted), or began reading a request.
    since: Instant,
    evicted: bool,
    /// The client's process (`SO_PEERCRED`), if the kernel says.
    peer: Option<i32>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    conns: Vec<Entry>,
}

impl Table {
    /// Makes room for a new connection: closes the read side of an idle connection or of one
    /// whose request is still arriving (its thread answers with an error line and exits),
    /// taken from the client (peer process) holding the most connections, the one idle or
    /// reading longest (so a connection just accepted, not read yet, is the last to go). False
    /// when every connection is a complete request being answered, or a monitor.
    fn evict_for_new(&mut self) -> bool {
        let held = |peer: Option<i32>| {
            self.conns
                .iter()
                .filter(|e| !e.evicted && peer.is_some() && e.peer == peer)
                .count()
        };
        let Some(victim) = self
            .conns
            .iter()
            .filter(|e| matches!(e.state, State::Idle | State::Reading) && !e.evicted)
            .max_by_key(|e| (held(e.peer), std::cmp::Reverse(e.since)))
            .map(|e| e.id)
        else {
            return false;
        };
        let Some(e) = self.entry(victim) else {
            return false;
        };
        e.evicted = true;
        let _ = e.stream.shutdown(Shutdown::Read);
        true
    }

    fn entry(&mut self, id: u64) -> Option<&mut Entry> {
        self.conns.iter_mut().find(|e| e.id == id)
    }
}

/// Options of the control socket (`qbridge daemon` flags).
#[derive(Debug, Clone, Copy)]
pub struct SocketConfig {
    pub idle_timeout: Duration,
}

impl Default for SocketConfig {
    fn default() -> SocketConfig {
        SocketConfig {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// What the accept loop and the connection threads share.
#[derive(Debug)]
struct Server {
    handle: Handle,
    cfg: SocketConfig,
    table: Mutex<Table>,
    /// Bytes of streamed batch text held by all connections.
    batch_bytes: AtomicU64,
    accept_log: Mutex<RateLimit>,
    request_log: Mutex<RateLimit>,
}

impl Server {
    fn set_state(&self, id: u64, state: State) {
        let mut t = lock(&self.table);
        if let Some(e) = t.entry(id) {
            // Idle since the end of its last request, or since it was accepted; reading since
            // the request's first byte.
            if matches!(state, State::Idle | State::Reading) && e.state != state {
                e.since = Instant::now();
            }
            e.state = state;
        }
    }

    fn evicted(&self, id: u64) -> bool {
        lock(&self.table).entry(id).is_some_and(|e| e.evicted)
    }

    fn remove(&self, id: u64) {
        lock(&self.table).conns.retain(|e| e.id != id);
    }

    fn open_connections(&self) -> usize {
        lock(&self.table).conns.len()
    }

    /// Registers a new connection and starts its thread, or refuses it.
    fn admit(self: &Arc<Self>, stream: UnixStream) {
        let peer = rustix::net::sockopt::socket_peercred(&stream)
            .ok()
            .map(|c| c.pid.as_raw_nonzero().get());
        let stream = Arc::new(stream);
        let id = {
            let mut t = lock(&self.table);
            let live = t.conns.iter().filter(|e| !e.evicted).count();
            if live >= MAX_CONNECTIONS && !t.evict_for_new() {
                drop(t);
                warn_limited(&self.accept_log, || {
                    format!(
                        "control socket: {MAX_CONNECTIONS} connections open, all answering a \
                         request or monitors; a new one is refused"
                    )
                });
                refuse(
                    &stream,
                    &format!(
                        "the daemon has {MAX_CONNECTIONS} control connections open, each \
                         answering a request or a monitor; try again"
                    ),
                );
                return;
            }
            t.next_id += 1;
            let id = t.next_id;
            t.conns.push(Entry {
                id,
                stream: stream.clone(),
                state: State::Idle,
                since: Instant::now(),
                evicted: false,
                peer,
            });
            id
        };
        let server = self.clone();
        let s = stream.clone();
        let r = std::thread::Builder::new()
            .name("qbridge-conn".into())
            .stack_size(CONN_STACK_BYTES)
            .spawn(move || {
                if let Err(e) = server.serve(id, &s) {
                    tracing::debug!("control connection: {e}");
                }
                server.remove(id);
            });
        if let Err(e) = r {
            self.remove(id);
            warn_limited(&self.accept_log, || {
                format!("control socket: cannot start a connection thread: {e}")
            });
            refuse(&stream, &format!("the daemon cannot start a thread: {e}"));
        }
    }

    /// Answers each request of one connection, in order, until the client closes it, it is
    /// idle too long, or it is evicted.
    fn serve(&self, id: u64, stream: &Arc<UnixStream>) -> std::io::Result<()> {
        stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
        let mut r = BufReader::with_capacity(
            64 << 10,
            DeadlineReader {
                stream: stream.clone(),
                deadline: Instant::now(),
            },
        );
        let mut line: Vec<u8> = Vec::new();
        loop {
            self.set_state(id, State::Idle);
            r.get_mut().deadline = Instant::now() + self.cfg.idle_timeout;
            match r.fill_buf() {
                Ok([]) => {
                    if self.evicted(id) {
                        reply(
                            stream,
                            &Response::err(format!(
                                "closing this idle connection to admit another (the daemon \
                                 keeps at most {MAX_CONNECTIONS} or ran out of file \
                                 descriptors)"
                            )),
                        )?;
                    }
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    return reply(
                        stream,
                        &Response::err(format!(
                            "no request for {} s; closing the connection",
                            self.cfg.idle_timeout.as_secs_f64()
                        )),
                    );
                }
                Err(e) => return Err(e),
            }
            self.set_state(id, State::Reading);
            r.get_mut().deadline = Instant::now() + REQUEST_DEADLINE;
            line.clear();
            let got = read_line(&mut r, &mut line, MAX_REQUEST_LINE_BYTES);
            if self.evicted(id) {
                return reply(stream, &Response::err(EVICTED_PARTIAL));
            }
            match got {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Eof) => return Ok(()),
                Ok(LineRead::TooLong) => {
                    self.log_bad(|| {
                        format!("request line longer than {MAX_REQUEST_LINE_BYTES} bytes")
                    });
                    return reply(
                        stream,
                        &Response::err(format!(
                            "request line longer than {MAX_REQUEST_LINE_BYTES} bytes (send a \
                             large batch streamed, with \"batch_len\"); closing the connection"
                        )),
                    );
                }
                Ok(LineRead::NoMemory) => {
                    self.log_bad(|| "out of memory for a request line".into());
                    return reply(
                        stream,
                        &Response::err("the daemon cannot hold this request (out of memory)"),
                    );
                }
                Err(e) if is_timeout(&e) => {
                    return reply(
                        stream,
                        &Response::err(format!(
                            "request not complete within {} s; closing the connection",
                            REQUEST_DEADLINE.as_secs()
                        )),
                    );
                }
                Err(e) => return Err(e),
            }
            let text = match std::str::from_utf8(&line) {
                Ok(t) => t.trim_end(),
                Err(e) => {
                    let at = e.valid_up_to();
                    self.log_bad(|| format!("request not valid UTF-8 (byte {at})"));
                    reply(
                        stream,
                        &Response::err(format!(
                            "malformed request: not valid UTF-8 (at byte {at} of the line)"
                        )),
                    )?;
                    continue;
                }
            };
            let incoming = match Request::parse_incoming(text) {
                Ok(i) => i,
                Err(e) => {
                    tracing::debug!("bad request: {e}");
                    reply(stream, &Response::err(e))?;
                    continue;
                }
            };
            match incoming {
                Incoming::Op(op) => {
                    self.set_state(id, State::Busy);
                    tracing::debug!("request: {op:?}");
                    let resp = self.handle.call(op);
                    reply(stream, &resp)?;
                }
                Incoming::BatchStream { out, len, apply } => match self.read_batch(&mut r, len) {
                    _ if self.evicted(id) => {
                        return reply(stream, &Response::err(EVICTED_PARTIAL));
                    }
                    Ok(mut held) => {
                        self.set_state(id, State::Busy);
                        // `held` keeps the bytes counted until the control plane is done.
                        let text = std::mem::take(&mut held.text);
                        let op = if apply {
                            Op::Apply { out, text }
                        } else {
                            Op::Batch { out, text }
                        };
                        let resp = self.handle.call(op);
                        drop(held);
                        reply(stream, &resp)?;
                    }
                    Err(BatchError::Reply(msg)) => {
                        // The rest of the batch is not read: the connection cannot go on.
                        return reply(stream, &Response::err(msg));
                    }
                    Err(BatchError::Io(e)) if is_timeout(&e) => {
                        return reply(
                            stream,
                            &Response::err(format!(
                                "batch not complete within {} s; closing the connection",
                                REQUEST_DEADLINE.as_secs()
                            )),
                        );
                    }
                    Err(BatchError::Io(e)) => return Err(e),
                },
                Incoming::Monitor { out, objects } => {
                    return self.monitor(id, stream, out, Stream::Monitor(objects));
                }
                Incoming::TraceLive { out, spec } => {
                    return self.monitor(id, stream, out, Stream::TraceLive(spec));
                }
            }
        }
    }

    fn log_bad(&self, msg: impl FnOnce() -> String) {
        warn_limited(&self.request_log, || format!("control socket: {}", msg()));
    }

    /// Reads the `len` bytes of a streamed batch, holding them against the daemon-wide budget.
    fn read_batch(
        &self,
        r: &mut BufReader<DeadlineReader>,
        len: u64,
    ) -> Result<BatchText<'_>, BatchError> {
        if len > MAX_BATCH_BYTES {
            self.log_bad(|| format!("batch of {len} bytes refused (over the limit)"));
            return Err(BatchError::Reply(batch_too_long(len)));
        }
        // The memory cgroup's limit, if any: a batch may take half of what is left (the text,
        // then the configuration it builds; measured: a 100 MB batch of comments peaks at
        // 107 MB of RSS, one of `fdb add` lines at 232 MB), so it is refused before it is
        // read rather than getting the daemon OOM-killed (decision 29).
        if let Some(h) = crate::memlimit::headroom() {
            // Batches other connections are receiving count as used already (they may not
            // be in the cgroup's usage yet: their bytes are still arriving).
            let others = self.batch_bytes.load(Ordering::Acquire);
            let room = h.bytes.saturating_sub(others) / BATCH_SHARE_OF_HEADROOM;
            if len > room {
                self.log_bad(|| {
                    format!(
                        "batch of {len} bytes refused: {} allows {} bytes, {} in use",
                        h.file.display(),
                        h.limit,
                        h.usage
                    )
                });
                return Err(BatchError::Reply(format!(
                    "batch of {len} bytes is more than the daemon can hold now: its memory \
                     limit ({} bytes, {}) has {} bytes left{}, and a batch may take at most \
                     1/{BATCH_SHARE_OF_HEADROOM} of that ({room} bytes); split it",
                    h.limit,
                    h.file.display(),
                    h.bytes,
                    if others > 0 {
                        format!(", less {others} for batches arriving on other connections")
                    } else {
                        String::new()
                    }
                )));
            }
        }
        let held = self
            .batch_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur + len <= MAX_BATCH_BYTES).then_some(cur + len)
            });
        if let Err(cur) = held {
            self.log_bad(|| format!("batch of {len} bytes refused: {cur} bytes already held"));
            return Err(BatchError::Reply(format!(
                "the daemon is receiving {cur} bytes of batches on other connections (at most \
                 {MAX_BATCH_BYTES} at once); try again"
            )));
        }
        let mut text = BatchText {
            text: String::new(),
            budget: &self.batch_bytes,
            len,
        };
        let mut buf: Vec<u8> = Vec::new();
        if buf.try_reserve_exact(len as usize).is_err() {
            self.log_bad(|| format!("out of memory for a batch of {len} bytes"));
            return Err(BatchError::Reply(format!(
                "the daemon cannot hold a batch of {len} bytes (out of memory)"
            )));
        }
        let got = r.by_ref().take(len).read_to_end(&mut buf)?;
        if (got as u64) < len {
            return Err(BatchError::Reply(format!(
                "batch ended after {got} of {len} bytes"
            )));
        }
        text.text = String::from_utf8(buf).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            self.log_bad(|| format!("batch not valid UTF-8 (line {line})"));
            BatchError::Reply(format!("line {line}: not valid UTF-8"))
        })?;
        Ok(text)
    }

    /// Streams events to a monitor client until it goes away.
    /// A monitor or `trace live`: the connection streams lines until the client leaves (or,
    /// for a trace, until it ends). Both count against [`MAX_MONITORS`].
    fn monitor(
        &self,
        id: u64,
        stream: &Arc<UnixStream>,
        out: qbridge_control::OutputOptions,
        what: Stream,
    ) -> std::io::Result<()> {
        {
            let mut t = lock(&self.table);
            let monitors = t.conns.iter().filter(|e| e.state == State::Monitor).count();
            if monitors >= MAX_MONITORS {
                drop(t);
                return reply(
                    stream,
                    &Response::err(format!(
                        "the daemon already serves {MAX_MONITORS} monitors; try again later"
                    )),
                );
            }
            if let Some(e) = t.entry(id) {
                e.state = State::Monitor;
            }
        }
        let events = match what {
            Stream::Monitor(objects) => match self.handle.monitor(objects, out) {
                Some(e) => e,
                None => return reply(stream, &Response::err("the daemon is shutting down")),
            },
            Stream::TraceLive(spec) => match self.handle.trace_live(spec, out) {
                Ok(e) => e,
                Err(e) => return reply(stream, &Response::err(e)),
            },
        };
        reply(stream, &Response::ok(String::new(), Vec::new()))?;
        stream.set_write_timeout(Some(MONITOR_WRITE_TIMEOUT))?;
        let mut w = &**stream;
        loop {
            match events.recv_timeout(Duration::from_secs(1)) {
                Ok(line) => {
                    let mut text = line;
                    // Whatever else is queued goes in the same write.
                    while let Ok(more) = events.try_recv() {
                        text.push_str(&more);
                    }
                    // Only the engine's probes (empty lines, once a second): they write
                    // nothing, so a client that left is found here, not by a write error
                    // (a timeout may never come while probes arrive).
                    if text.is_empty() {
                        if peer_closed(stream) {
                            return Ok(());
                        }
                        continue;
                    }
                    w.write_all(text.as_bytes())?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if peer_closed(stream) {
                        return Ok(());
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }
}

/// What a streaming connection streams.
enum Stream {
    Monitor(Vec<qbridge_control::MonitorObject>),
    TraceLive(qbridge_control::TraceLiveSpec),
}

/// A streamed batch's text, counted against the daemon-wide budget until dropped.
#[derive(Debug)]
struct BatchText<'a> {
    text: String,
    budget: &'a AtomicU64,
    len: u64,
}

impl Drop for BatchText<'_> {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.len, Ordering::AcqRel);
    }
}

#[derive(Debug)]
enum BatchError {
    /// Answer this and close the connection.
    Reply(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for BatchError {
    fn from(e: std::io::Error) -> Self {
        BatchError::Io(e)
    }
}

/// Whether the client of a monitor closed its end (what it sends is read and ignored).
fn peer_closed(stream: &UnixStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(0) => false,
        Ok(_) => {
            let mut scratch = [0u8; 512];
            matches!((&*stream).read(&mut scratch), Ok(0) | Err(_))
        }
        Err(_) => true,
    }
}

/// Reads from the stream with the read timeout set to what is left until `deadline`.
#[derive(Debug)]
struct DeadlineReader {
    stream: Arc<UnixStream>,
    deadline: Instant,
}

impl Read for DeadlineReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&*self.stream).read(buf)
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock)
}

enum LineRead {
    Line,
    Eof,
    TooLong,
    NoMemory,
}

/// Reads one line (its newline included, if any) into `line`, at most `max` bytes, growing
/// `line` with `try_reserve`.
fn read_line(r: &mut impl BufRead, line: &mut Vec<u8>, max: usize) -> std::io::Result<LineRead> {
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(if line.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        if line.len() + take > max {
            return Ok(LineRead::TooLong);
        }
        if line.try_reserve(take).is_err() {
            return Ok(LineRead::NoMemory);
        }
        line.extend_from_slice(&avail[..take]);
        r.consume(take);
        if done {
            return Ok(LineRead::Line);
        }
    }
}

fn reply(stream: &UnixStream, resp: &Response) -> std::io::Result<()> {
    let mut w = stream;
    w.write_all(resp.to_line().as_bytes())
}

/// Answers a connection that is not admitted, without waiting for it.
fn refuse(stream: &UnixStream, msg: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = reply(stream, &Response::err(msg));
}

/// Accepts control connections until the process ends. See the module documentation.
pub fn accept_loop(listener: UnixListener, handle: Handle, cfg: SocketConfig) {
    let server = Arc::new(Server {
        handle,
        cfg,
        table: Mutex::new(Table::default()),
        batch_bytes: AtomicU64::new(0),
        accept_log: Mutex::new(RateLimit::new(LOG_INTERVAL)),
        request_log: Mutex::new(RateLimit::new(LOG_INTERVAL)),
    });
    let mut backoff = BACKOFF_MIN;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                backoff = BACKOFF_MIN;
                server.admit(stream);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                let errno = rustix::io::Errno::from_io_error(&e);
                let out_of_fds = matches!(
                    errno,
                    Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                );
                warn_limited(&server.accept_log, || {
                    format!(
                        "control socket: cannot accept a connection: {e} ({} connections \
                         open){}",
                        server.open_connections(),
                        if out_of_fds {
                            "; closing the connection idle longest, or waiting"
                        } else {
                            "; waiting"
                        }
                    )
                });
                if out_of_fds && lock(&server.table).evict_for_new() {
                    // Its thread closes it; give it a moment.
                    std::thread::sleep(BACKOFF_MIN);
                    continue;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_counts_what_it_leaves_out() {
        let mut l = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(l.check(t0), Some(0));
        assert_eq!(l.check(t0 + Duration::from_secs(1)), None);
        assert_eq!(l.check(t0 + Duration::from_secs(2)), None);
        assert_eq!(l.check(t0 + Duration::from_secs(11)), Some(2));
        assert_eq!(l.check(t0 + Duration::from_secs(12)), None);
    }

    #[test]
    fn the_client_holding_most_connections_makes_room() {
        let mut t = Table::default();
        let now = Instant::now();
        let mut keep = Vec::new();
        // (peer, state, seconds ago)
        let conns = [
            (Some(1), State::Reading, 50), // 0: a slow batch of client 1, oldest
            (Some(2), State::Reading, 10), // 1
            (Some(2), State::Reading, 20), // 2: client 2 holds most: its oldest goes first
            (Some(2), State::Busy, 30),    // 3: a complete request: never
            (None, State::Reading, 40),    // 4: unknown client: last
            (Some(3), State::Monitor, 60), // 5: a monitor: never
            (Some(4), State::Idle, 5),     // 6: newer than client 1's partial request
        ];
        for (i, (peer, state, ago)) in conns.into_iter().enumerate() {
            let (a, b) = UnixStream::pair().unwrap();
            keep.push(b);
            t.conns.push(Entry {
                id: i as u64,
                stream: Arc::new(a),
                state,
                since: now - Duration::from_secs(ago),
                evicted: false,
                peer,
            });
        }
        let mut order = Vec::new();
        while t.evict_for_new() {
            let last = t
                .conns
                .iter()
                .filter(|e| e.evicted && !order.contains(&e.id))
                .map(|e| e.id)
                .collect::<Vec<_>>();
            assert_eq!(last.len(), 1);
            order.push(last[0]);
        }
        assert_eq!(order, vec![2, 1, 0, 6, 4]);
    }

    #[test]
    fn lines_are_bounded() {
        let mut line = Vec::new();
        let mut r = std::io::Cursor::new(b"abc\ndefgh\nxy".to_vec());
        assert!(matches!(
            read_line(&mut r, &mut line, 8),
            Ok(LineRead::Line)
        ));
        assert_eq!(line, b"abc\n");
        line.clear();
        assert!(matches!(
            read_line(&mut r, &mut line, 4),
            Ok(LineRead::TooLong)
        ));
        line.clear();
        let mut r = std::io::Cursor::new(b"xy".to_vec());
        assert!(matches!(
            read_line(&mut r, &mut line, 8),
            Ok(LineRead::Line)
        ));
        line.clear();
        assert!(matches!(read_line(&mut r, &mut line, 8), Ok(LineRead::Eof)));
    }
}
