//! `qbridge daemon`: the running switch and its control socket.
//!
//! Start-up order, so that "the socket exists and answers" means ready: take an exclusive
//! `flock` on `SOCKET.lock` (a second daemon on the same path stops there with a clear
//! message; the lock dies with the process, so a crash leaves nothing that blocks a restart),
//! apply the `-batch` file, bind the metrics listener, open every port (the engine), and only
//! then create the socket: bound under a temporary name, made mode 0600, and renamed over
//! `SOCKET` (a stale socket file of a crashed daemon is replaced; we hold the lock, so no live
//! daemon owns it).
//!
//! Threads (see `qbridge_datapath`): the main thread waits for SIGTERM/SIGINT; `--workers`
//! datapath worker threads; one control-plane thread that owns the configuration; one thread
//! accepting control connections and one per connection; one metrics thread. Requests go to
//! the control-plane thread over a channel; it hands each worker the new compiled plan, which
//! the worker adopts between two batches. On a signal: the socket file is removed, the workers
//! close every port (pcap files are flushed), and the process exits 0.

use crate::metrics;
use crate::read_batch;
use anyhow::{bail, Context};
use qbridge_control::{OutputOptions, Request, Response, Session};
use qbridge_datapath::state::StateFile;
use qbridge_datapath::{Engine, EngineConfig, Handle};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the CLI and the daemon meet unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/qbridge/qbridge.sock";
/// Environment variable that overrides [`DEFAULT_SOCKET`] (the `--socket` option wins).
pub const SOCKET_ENV: &str = "QBRIDGE_SOCKET";
/// Longest request line accepted (a batch file travels in one line).
const MAX_REQUEST_BYTES: u64 = 64 << 20;

pub const DAEMON_USAGE: &str = "\
Usage: qbridge daemon [-batch FILE] [--socket PATH] [--metrics ADDR:PORT [--metrics-public]]
                      [--pcap-dir DIR] [--workers N] [--state FILE]

Runs the switch in the foreground until SIGTERM or SIGINT; logs go to stderr (QBRIDGE_LOG=info
or debug for more). The control socket (mode 0600) is created once FILE is applied and every
port is open; 'qbridge OBJECT COMMAND' and 'qbridge -batch FILE' talk to it.

  -batch FILE          apply FILE (one command per line) before serving; '-' reads stdin
  --socket PATH        control socket (default: $QBRIDGE_SOCKET, else /run/qbridge/qbridge.sock)
  --metrics ADDR:PORT  serve Prometheus text format on http://ADDR:PORT/metrics
  --metrics-public     allow a non-loopback metrics address
  --pcap-dir DIR       accept pcap ports: each writes DIR/PORT.pcap and, if DIR/PORT.in.pcap
                       exists when the port opens, receives its frames once
  --workers N          datapath threads (default: the CPUs this process may run on, at most
                       64); frames of one flow stay on one thread, in order
  --state FILE         keep the configuration in FILE: restored at start (before -batch,
                       which is then applied as 'qbridge apply' does: what exists is kept),
                       rewritten atomically after every change (see docs/daemon.md)
";

/// The socket path: `--socket`, else `$QBRIDGE_SOCKET`, else the default.
pub fn socket_path(arg: Option<&str>) -> PathBuf {
    match arg {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os(SOCKET_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_SOCKET),
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
            "h" | "help" => return Ok(None),
            _ => bail!("unknown option \"{arg}\" (try \"qbridge daemon --help\")"),
        }
        i += 1;
    }
    Ok(Some(a))
}

/// Holds `SOCKET.lock` for the life of the daemon.
#[derive(Debug)]
struct Lock {
    _file: File,
}

fn lock(socket: &Path) -> anyhow::Result<Lock> {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open lock file {}", path.display()))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Lock { _file: file }),
        Err(rustix::io::Errno::WOULDBLOCK) => bail!(
            "another qbridge daemon is running on {} (it holds {}); stop it first or give \
             this one another --socket",
            socket.display(),
            path.display()
        ),
        Err(e) => bail!("cannot lock {}: {e}", path.display()),
    }
}

/// `--state FILE`: restores the configuration FILE holds (a missing file is an empty state: the
/// first start). A file that does not apply stops the daemon: starting without the saved
/// configuration would silently forward with another one.
fn restore_state(session: &mut Session, path: &Path) -> anyhow::Result<StateFile> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(
                "state file {} does not exist yet: starting empty",
                path.display()
            );
            return Ok(StateFile::new(path.to_path_buf(), None));
        }
        Err(e) => bail!("cannot read the state file {}: {e}", path.display()),
    };
    session
        .execute_batch(&text, OutputOptions::default())
        .with_context(|| {
            format!(
                "state file {} does not apply; fix it or move it away to start empty",
                path.display()
            )
        })?;
    tracing::info!("restored the configuration from {}", path.display());
    Ok(StateFile::new(path.to_path_buf(), Some(text)))
}

/// Binds the control socket under a temporary name, makes it 0600 and renames it into place.
fn bind_socket(path: &Path) -> anyhow::Result<UnixListener> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)
        .with_context(|| format!("cannot create the control socket {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
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
    let mut signals = Signals::new([SIGTERM, SIGINT]).context("cannot install signal handlers")?;
    let socket = socket_path(args.socket.as_deref());
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
    let metrics_listener = match &args.metrics {
        Some(a) => Some(metrics::bind(metrics::resolve(a, args.metrics_public)?)?),
        None => None,
    };
    if let Some(d) = &args.pcap_dir {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    if let Some(st) = &mut state {
        // The batch may have changed the restored state; the file follows at once.
        st.save(&session.running_config())
            .with_context(|| format!("cannot write the state file {}", st.path().display()))?;
    }
    let cfg = EngineConfig {
        pcap_dir: args.pcap_dir.clone(),
        state,
    };
    let (engine, handle, warnings) = Engine::new(session, cfg).map_err(anyhow::Error::msg)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    tracing::info!("{} datapath worker threads", engine.workers());
    let datapath = std::thread::Builder::new()
        .name("qbridge-control-plane".into())
        .spawn(move || engine.run())
        .context("cannot start the control-plane thread")?;

    if let Some(l) = metrics_listener {
        let h = handle.clone();
        tracing::info!("metrics on http://{}/metrics", l.local_addr()?);
        std::thread::Builder::new()
            .name("qbridge-metrics".into())
            .spawn(move || metrics::serve(l, h))
            .context("cannot start the metrics thread")?;
    }

    let listener = bind_socket(&socket)?;
    let h = handle.clone();
    std::thread::Builder::new()
        .name("qbridge-control".into())
        .spawn(move || accept_loop(listener, h))
        .context("cannot start the control thread")?;
    tracing::info!("qbridge daemon ready; control socket {}", socket.display());

    let sig = signals.forever().next();
    tracing::info!(
        "signal {}: shutting down",
        match sig {
            Some(SIGTERM) => "SIGTERM",
            Some(SIGINT) => "SIGINT",
            _ => "?",
        }
    );
    let _ = std::fs::remove_file(&socket);
    handle.shutdown();
    if datapath.join().is_err() {
        tracing::error!("the control-plane thread panicked");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn accept_loop(listener: UnixListener, handle: Handle) {
    for conn in listener.incoming() {
        match conn {
            Ok(c) => {
                let h = handle.clone();
                let r = std::thread::Builder::new()
                    .name("qbridge-conn".into())
                    .spawn(move || {
                        if let Err(e) = serve_conn(c, &h) {
                            tracing::debug!("control connection: {e}");
                        }
                    });
                if let Err(e) = r {
                    tracing::warn!("cannot start a connection thread: {e}");
                }
            }
            Err(e) => tracing::warn!("control socket accept: {e}"),
        }
    }
}

/// Answers each request line of one connection, in order, until the client closes it.
fn serve_conn(conn: UnixStream, handle: &Handle) -> std::io::Result<()> {
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        let n = Read::take(&mut r, MAX_REQUEST_BYTES).read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        let resp = if !line.ends_with('\n') && n as u64 >= MAX_REQUEST_BYTES {
            Response::err(format!(
                "request longer than {MAX_REQUEST_BYTES} bytes; closing the connection"
            ))
        } else {
            match Request::parse(line.trim_end()) {
                Ok(op) => {
                    tracing::debug!("request: {op:?}");
                    handle.call(op)
                }
                Err(e) => Response::err(e),
            }
        };
        w.write_all(resp.to_line().as_bytes())?;
        if n as u64 >= MAX_REQUEST_BYTES {
            return Ok(());
        }
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
