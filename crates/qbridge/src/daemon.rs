//! `qbridge daemon`: the running switch and its control socket.
//!
//! Start-up order, so that "the socket exists and answers" means ready: take an exclusive
//! `flock` on `SOCKET.lock` (a second daemon on the same path stops there with a clear
//! message; the lock dies with the process, so a crash leaves nothing that blocks a restart),
//! apply the `-batch` file, bind the metrics listener, open every port (the engine), and only
//! then create the socket: bound under a temporary name, made mode 0600 (0660 and the group
//! of `--socket-group`), and renamed over `SOCKET` (a stale socket file of a crashed daemon is
//! replaced; we hold the lock, so no live daemon owns it). Then one `ready` line at info (the
//! daemon's default level) and `READY=1` to systemd when `NOTIFY_SOCKET` is set.
//!
//! Threads (see `qbridge_datapath`): the main thread waits for signals; `--workers` datapath
//! worker threads; one control-plane thread that owns the configuration; the control socket's
//! threads ([`crate::control_socket`]: limits on connections, memory and idle time); the
//! metrics threads. Requests go to the control-plane thread over a channel; it hands each
//! worker the new compiled plan, which the worker adopts between two batches.
//!
//! Signals (read by a `qbridge-signals` thread and handed to the main thread; a SIGTERM or
//! SIGINT during start-up is acted on once ready, or ends a start-up stuck for 5 s with exit
//! status 1: [`forward_signals`]): SIGTERM or SIGINT: `STOPPING=1` to systemd, the socket file is removed, the workers
//! close every port (pcap files are flushed), and the process exits 0. SIGHUP: [`on_sighup`]
//! re-applies the `-batch` file as `qbridge apply` does (logs go to stderr, so there is no log
//! file to reopen). SIGUSR1:
//! every port's counters to the log. SIGUSR2: logged and ignored. SIGPIPE is ignored (Rust's
//! runtime does so before `main`): a client that goes away is an `EPIPE` on its connection.

use crate::control_socket::{self, SocketConfig};
use crate::metrics;
use crate::read_batch;
use anyhow::{bail, Context};
use qbridge_control::{Op, OutputOptions, Session};
use qbridge_datapath::state::StateFile;
use qbridge_datapath::{Engine, EngineConfig, Handle};
use qbridge_io::netns::OwnNetns;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Environment variable that overrides the default socket (the `--socket` option wins).
pub const SOCKET_ENV: &str = "QBRIDGE_SOCKET";
pub const DAEMON_USAGE: &str = "\
Usage: qbridge daemon [-batch FILE] [--socket PATH] [--socket-group GROUP]
                      [--metrics ADDR:PORT [--metrics-public]] [--pcap-dir DIR] [--workers N]
                      [--idle-timeout SECONDS] [--state FILE] [--fast-path auto|on|off]

Runs the switch in the foreground until SIGTERM or SIGINT; logs go to stderr, at info by
default (QBRIDGE_LOG=warn for less, debug for more), one 'ready' line once it serves. The
control socket (mode 0600) is created once FILE is applied and every port is open;
'qbridge OBJECT COMMAND' and 'qbridge -batch FILE' talk to it. Started by systemd
(NOTIFY_SOCKET set, Type=notify) it sends READY=1 then, and STOPPING=1 on SIGTERM/SIGINT.
SIGHUP: re-applies the -batch file as 'qbridge apply' does. SIGUSR1: every port's counters to the log.
SIGUSR2, SIGPIPE: ignored.

  -batch FILE          apply FILE (one command per line) before serving; '-' reads stdin
  --socket PATH        control socket (default: $QBRIDGE_SOCKET, else, in the host's network
                       namespace /run/qbridge/qbridge.sock, in another one
                       /run/qbridge/netns/NAME.sock: one daemon per namespace by default)
  --socket-group GROUP the control socket belongs to GROUP (a name or number) with mode 0660,
                       so its members may use qbridge without root
  --idle-timeout SECONDS  close a control connection without a request for this long
                       (default 60); at most 64 connections, 16 of them monitors
  --metrics ADDR:PORT  serve Prometheus text format on http://ADDR:PORT/metrics
  --metrics-public     allow a non-loopback metrics address
  --pcap-dir DIR       accept pcap ports: each writes DIR/PORT.pcap and, if DIR/PORT.in.pcap
                       exists when the port opens, receives its frames once; files made
                       afresh, mode 0600 (0640 and GROUP with --socket-group)
  --workers N          datapath threads (default: the CPUs this process may run on, at most
                       64); frames of one flow stay on one thread, in order
  --state FILE         keep the configuration in FILE: restored at start (before -batch,
                       which is then applied as 'qbridge apply' does: what exists is kept),
                       saved after every change: rewritten atomically, or a line
                       appended for a single fdb, vlan or link set command; a regular
                       file of at most 256 MiB (see docs/operating.md)
  --fast-path auto|on|off  the eBPF fast path (docs/fast-path.md): a TC program on the
                       ports' interfaces forwards the frames whose decision the pipeline
                       cached as a flow, and sends the others up. auto (the default): on
                       where the kernel allows it (BPF, clsact), else off, said once at
                       start; on: the daemon does not start without it; off: every frame
                       through the pipeline. 'qbridge show fast-path' shows it.
";

/// The socket path: `--socket`, else `$QBRIDGE_SOCKET`, else the default of the caller's
/// network namespace (`/run/qbridge/qbridge.sock` in the host's; decision 66).
pub fn socket_path(arg: Option<&str>) -> PathBuf {
    match arg {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os(SOCKET_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => OwnNetns::current().default_socket(),
        },
    }
}

#[derive(Debug, Default)]
struct Args {
    batch: Option<String>,
    socket: Option<String>,
    metrics: Option<String>,
    metrics_public: bool,
    pcap_dir: Option<PathBuf>,
    workers: Option<usize>,
    state: Option<PathBuf>,
    socket_group: Option<String>,
    idle_timeout: Option<Duration>,
    fast_path: qbridge_datapath::FastPathMode,
}

/// Most datapath threads `--workers` accepts.
const MAX_WORKERS: usize = 64;

fn parse_args(args: &[String]) -> anyhow::Result<Option<Args>> {
    let mut a = Args::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let opt = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .with_context(|| format!("unexpected \"{arg}\" (try \"qbridge daemon --help\")"))?;
        let mut value = |what: &str| -> anyhow::Result<String> {
            i += 1;
            args.get(i)
                .cloned()
                .with_context(|| format!("option {arg} needs {what}"))
        };
        match opt {
            "b" | "batch" => a.batch = Some(value("a FILE")?),
            "socket" => a.socket = Some(value("a PATH")?),
            "metrics" => a.metrics = Some(value("ADDR:PORT")?),
            "metrics-public" => a.metrics_public = true,
            "pcap-dir" => a.pcap_dir = Some(PathBuf::from(value("a DIR")?)),
            "state" => a.state = Some(PathBuf::from(value("a FILE")?)),
            "socket-group" => a.socket_group = Some(value("a GROUP")?),
            "idle-timeout" => {
                let v = value("a number of seconds")?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .with_context(|| {
                        format!("invalid --idle-timeout \"{v}\" (expected seconds, 0 to 86400)")
                    })?;
                a.idle_timeout = Some(Duration::from_secs_f64(secs));
            }
            "workers" => {
                let v = value("a number of threads")?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_WORKERS).contains(n))
                    .with_context(|| {
                        format!("invalid --workers \"{v}\" (expected 1 to {MAX_WORKERS})")
                    })?;
                a.workers = Some(n);
            }
            "fast-path" => {
                let v = value("auto, on or off")?;
                a.fast_path = v.parse().map_err(anyhow::Error::msg)?;
            }
            "h" | "help" => return Ok(None),
            _ => bail!("unknown option \"{arg}\" (try \"qbridge daemon --help\")"),
        }
        i += 1;
    }
    Ok(Some(a))
}

/// Holds `SOCKET.lock` for the life of the daemon; the file goes with it (removed under the
/// lock, as the interface locks are: `qbridge_io::iflock`).
#[derive(Debug)]
struct Lock {
    _file: qbridge_io::iflock::LockedFile,
}

fn lock(socket: &Path) -> anyhow::Result<Lock> {
    use qbridge_io::iflock::{lock_file, LockFileError};
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    match lock_file(&path, 0o600, &format!("pid {}\n", std::process::id())) {
        Ok(file) => Ok(Lock { _file: file }),
        Err(LockFileError::Busy(holder)) => bail!(
            "another qbridge daemon is running on {} (it holds {}{}); stop it first or give \
             this one another --socket",
            socket.display(),
            path.display(),
            if holder.is_empty() {
                String::new()
            } else {
                format!(": {holder}")
            }
        ),
        Err(LockFileError::Unavailable(e)) => {
            bail!("cannot open lock file {}: {e}", path.display())
        }
        Err(LockFileError::Unstable) => bail!(
            "cannot lock {}: it was removed or replaced while being locked, again and again",
            path.display()
        ),
    }
}

/// `--state FILE`: restores the configuration FILE holds (a missing file is an empty state: the
/// first start). A file that does not apply stops the daemon: starting without the saved
/// configuration would silently forward with another one.
fn restore_state(session: &mut Session, path: &Path) -> anyhow::Result<StateFile> {
    let text = match qbridge_datapath::state::read_state(path) {
        Ok(Some(t)) => t,
        Ok(None) => {
            tracing::info!(
                "state file {} does not exist yet: starting empty",
                path.display()
            );
            return Ok(StateFile::new(path.to_path_buf(), None));
        }
        Err(e) => bail!("cannot read the state file {}: {e}", path.display()),
    };
    session.restore(&text).with_context(|| {
        format!(
            "state file {} does not apply; fix it or move it away to start empty",
            path.display()
        )
    })?;
    tracing::info!("restored the configuration from {}", path.display());
    Ok(StateFile::new(path.to_path_buf(), Some(text)))
}

/// The group id of `group`: a number, or a name in /etc/group.
fn resolve_group(group: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group").context("cannot read /etc/group")?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid = f.nth(1)?.parse::<u32>().ok()?;
            Some((name, gid))
        })
        .find(|(name, _)| *name == group)
        .map(|(_, gid)| gid)
        .with_context(|| format!("--socket-group: no group named \"{group}\" in /etc/group"))
}

/// Creates directory `dir` (and its parents) if missing: the last one with `mode` and group
/// `gid`, whatever the umask; parents 0755. An existing directory is left as it is.
fn create_dir(dir: &Path, mode: u32, gid: Option<u32>) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        // Made meanwhile by someone else: theirs, left as it is.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    if let Some(gid) = gid {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .with_context(|| format!("cannot give {} group {gid}", dir.display()))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", dir.display()))
}

/// Binds the control socket under a temporary name, gives it its group and mode (0600, or
/// 0660 with `--socket-group`) and renames it into place.
fn bind_socket(path: &Path, gid: Option<u32>) -> anyhow::Result<UnixListener> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)
        .with_context(|| format!("cannot create the control socket {}", tmp.display()))?;
    let mode = if let Some(gid) = gid {
        std::os::unix::fs::chown(&tmp, None, Some(gid)).with_context(|| {
            let _ = std::fs::remove_file(&tmp);
            format!("--socket-group: cannot give {} group {gid}", tmp.display())
        })?;
        0o660
    } else {
        0o600
    };
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", tmp.display()))?;
    if path.exists() {
        tracing::info!("replacing stale socket {}", path.display());
    }
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot move the control socket to {}", path.display())
    })?;
    Ok(listener)
}

pub fn main(args: &[String]) -> anyhow::Result<ExitCode> {
    let Some(args) = parse_args(args)? else {
        print!("{DAEMON_USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    // Before anything else, so a signal during start-up is not fatal halfway.
    let signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])
        .context("cannot install signal handlers")?;
    let ready = Arc::new(AtomicBool::new(false));
    let signals = forward_signals(signals, ready.clone())?;
    raise_fd_limit();
    let socket = socket_path(args.socket.as_deref());
    let gid = args
        .socket_group
        .as_deref()
        .map(resolve_group)
        .transpose()?;
    // Nothing the daemon creates is writable by others, whatever umask it was started with
    // (every file also gets an explicit mode; this covers the socket between its bind and
    // its chmod, and directories).
    let old_umask = rustix::process::umask(rustix::fs::Mode::empty());
    rustix::process::umask(old_umask | rustix::fs::Mode::from_raw_mode(0o022));
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_dir(dir, 0o755, None)?;
    }
    let _lock = lock(&socket)?;

    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_WORKERS)
    });
    let mut session = Session::with_workers(workers);
    let mut state = match &args.state {
        Some(path) => Some(restore_state(&mut session, path)?),
        None => None,
    };
    if let Some(file) = &args.batch {
        let text = read_batch(file)?;
        let o = OutputOptions::default();
        // With a state file the batch re-applies over the restored state: what exists is kept.
        let out = if state.is_some() {
            session.apply_batch(&text, o)
        } else {
            session.execute_batch(&text, o)
        }
        .with_context(|| format!("batch file {file}"))?;
        std::io::stdout().write_all(out.as_bytes())?;
    }
    let ports: Vec<String> = session
        .ports()
        .into_iter()
        .map(|(_, name, _)| name.to_owned())
        .collect();
    let metrics_listener = match &args.metrics {
        Some(a) => Some(metrics::bind(metrics::resolve(a, args.metrics_public)?)?),
        None => None,
    };
    let file_access = qbridge_io::pcap::FileAccess { group: gid };
    if let Some(d) = &args.pcap_dir {
        // Captured traffic: the directory qbridge creates is its owner's (and the group's).
        create_dir(d, if gid.is_some() { 0o750 } else { 0o700 }, gid)?;
    }
    if let Some(st) = &mut state {
        // The batch may have changed the restored state; the file follows at once. A failed
        // write is what it is at run time (decision 27): the daemon serves, the old file
        // stays, the next change tries again, metrics say `qbridge_state_unsaved 1`.
        if let Err(e) = st.save(&session.running_config()) {
            tracing::error!(
                "the configuration is in force but was not saved to {}: {e}; the file keeps \
                 the previous configuration until a later change is saved",
                st.path().display()
            );
        }
    }
    let cfg = EngineConfig {
        pcap_dir: args.pcap_dir.clone(),
        file_access,
        state,
        fast_path: args.fast_path,
    };
    let (engine, handle, warnings) = Engine::new(session, cfg).map_err(anyhow::Error::msg)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let workers = engine.workers();
    let fast_path = match (engine.fast_path_on(), engine.fast_path_off_reason()) {
        (true, _) => "on".to_string(),
        (false, Some(why)) => format!("off ({why})"),
        (false, None) => "off".to_string(),
    };
    let datapath = std::thread::Builder::new()
        .name("qbridge-control-plane".into())
        .spawn(move || engine.run())
        .context("cannot start the control-plane thread")?;

    let mut metrics_note = String::new();
    if let Some(l) = metrics_listener {
        let h = handle.clone();
        metrics_note = format!(", metrics on http://{}/metrics", l.local_addr()?);
        std::thread::Builder::new()
            .name("qbridge-metrics".into())
            .spawn(move || metrics::serve(l, h))
            .context("cannot start the metrics thread")?;
    }

    let listener = bind_socket(&socket, gid)?;
    let h = handle.clone();
    let socket_cfg = SocketConfig {
        idle_timeout: args
            .idle_timeout
            .unwrap_or(control_socket::DEFAULT_IDLE_TIMEOUT),
    };
    std::thread::Builder::new()
        .name("qbridge-control".into())
        .spawn(move || control_socket::accept_loop(listener, h, socket_cfg))
        .context("cannot start the control thread")?;
    tracing::info!(
        "qbridge daemon ready: control socket {}, {} ports ({}), {workers} datapath workers, \
         fast path {}{}",
        socket.display(),
        ports.len(),
        if ports.is_empty() {
            "none".to_string()
        } else {
            ports.join(" ")
        },
        fast_path,
        metrics_note
    );
    ready.store(true, Ordering::Release);
    sd_notify("READY=1\nSTATUS=serving");

    let name = loop {
        match signals.recv().ok() {
            Some(SIGHUP) => on_sighup(&handle, args.batch.as_deref()),
            Some(SIGUSR1) => log_counters(&handle),
            Some(SIGUSR2) => tracing::info!("SIGUSR2: ignored"),
            Some(SIGTERM) => break "SIGTERM",
            Some(SIGINT) => break "SIGINT",
            Some(_) => {}
            None => break "?",
        }
    };
    tracing::info!("signal {name}: shutting down");
    sd_notify("STOPPING=1");
    let _ = std::fs::remove_file(&socket);
    handle.shutdown();
    if datapath.join().is_err() {
        tracing::error!("the control-plane thread panicked");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// How long a start-up may go on after SIGTERM or SIGINT before the process exits without
/// finishing it (a `-batch` FIFO nobody writes, an interface that never answers).
const START_STOP_GRACE: Duration = Duration::from_secs(5);

/// Hands the signals to the main thread through a channel, from a thread of their own. A
/// SIGTERM or SIGINT that comes before the daemon is ready is acted on once it is (a clean
/// stop); if start-up has not finished [`START_STOP_GRACE`] later, it is stuck, and the
/// process exits with status 1 rather than ignoring the signal.
fn forward_signals(
    mut signals: Signals,
    ready: Arc<AtomicBool>,
) -> anyhow::Result<std::sync::mpsc::Receiver<i32>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("qbridge-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let stop = matches!(sig, SIGTERM | SIGINT);
                if stop && !ready.load(Ordering::Acquire) {
                    let ready = ready.clone();
                    // Another thread, so a second signal is still forwarded meanwhile.
                    let _ = std::thread::Builder::new()
                        .name("qbridge-stop".into())
                        .spawn(move || {
                            let t0 = std::time::Instant::now();
                            while t0.elapsed() < START_STOP_GRACE {
                                if ready.load(Ordering::Acquire) {
                                    return;
                                }
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            eprintln!(
                                "qbridge: signal {sig} during start-up, which has not finished \
                                 {} s later; exiting",
                                START_STOP_GRACE.as_secs()
                            );
                            std::process::exit(1);
                        });
                }
                if tx.send(sig).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(rx)
}

/// SIGHUP (`systemctl reload`): re-applies the `-batch` file as `qbridge apply` does, so an
/// edited file takes effect without a restart; a file that does not apply changes nothing
/// (logged). Logs go to stderr, so there is no log file to reopen.
fn on_sighup(handle: &Handle, batch: Option<&str>) {
    match batch {
        None => tracing::info!("SIGHUP: no -batch file to re-apply"),
        Some("-") => tracing::warn!("SIGHUP: the -batch file was stdin; nothing to re-read"),
        Some(file) => match read_batch(file) {
            Err(e) => tracing::error!("SIGHUP: {e:#}; nothing changed"),
            Ok(text) => {
                let r = handle.call(Op::Apply {
                    out: OutputOptions::default(),
                    text,
                });
                for w in &r.warnings {
                    tracing::warn!("SIGHUP: {w}");
                }
                match r.error {
                    None => tracing::info!("SIGHUP: re-applied {file}"),
                    Some(e) => tracing::error!("SIGHUP: {file}: {e}; nothing changed"),
                }
            }
        },
    }
}

/// SIGUSR1: one log line per port with its frame counters, drops and link state.
fn log_counters(handle: &Handle) {
    let Some(snap) = handle.metrics() else {
        return;
    };
    tracing::info!("SIGUSR1: counters of {} ports", snap.ports.len());
    for p in &snap.ports {
        let c = &p.counters;
        tracing::info!(
            "SIGUSR1: port {}: rx {} frames {} bytes, tx {} frames {} bytes, {} drops, link {}",
            p.name,
            c.rx_frames,
            c.rx_bytes,
            c.tx_frames,
            c.tx_bytes,
            c.total_drops(),
            if p.link_up { "up" } else { "down" }
        );
    }
}

/// Raises the soft limit of open files to the hard limit (each port queue, connection and
/// metrics scrape takes one).
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        let from = l.current;
        l.current = l.maximum;
        match setrlimit(Resource::Nofile, l) {
            Ok(()) => tracing::debug!("open files limit raised from {from:?} to {:?}", l.maximum),
            Err(e) => tracing::debug!("cannot raise the open files limit: {e}"),
        }
    }
}

/// Tells systemd (`Type=notify`) about the daemon's state: one datagram to `$NOTIFY_SOCKET`
/// (a path, or `@name` in the abstract namespace). Nothing when it is not set.
fn sd_notify(state: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else {
        return;
    };
    let r = UnixDatagram::unbound().and_then(|sock| {
        let addr = match path.as_bytes().strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(&path)?,
        };
        sock.send_to_addr(state.as_bytes(), &addr)
    });
    if let Err(e) = r {
        tracing::warn!("cannot notify systemd at {}: {e}", path.to_string_lossy());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn args() {
        let a = parse_args(&v(&[
            "-batch",
            "f",
            "--socket",
            "/tmp/s",
            "--metrics",
            "127.0.0.1:1",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.batch.as_deref(), Some("f"));
        assert_eq!(a.socket.as_deref(), Some("/tmp/s"));
        assert!(parse_args(&v(&["--help"])).unwrap().is_none());
        assert!(parse_args(&v(&["--socket"])).is_err());
        assert!(parse_args(&v(&["x"])).is_err());
    }
}
