//! A `qbridge daemon` that an unprivileged test starts (pcap ports, a socket in a temporary
//! directory), shared by `daemon_cli.rs`, `daemon_mirror.rs`, `daemon_robust.rs` and `daemon_state.rs`: start and
//! wait for the socket, run the CLI against it, signal, stop, kill on drop.
#![allow(dead_code)]

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

/// An empty directory `PREFIX-NAME` under Cargo's temporary directory for tests.
pub fn tmp(prefix: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `qbridge daemon -batch BATCH --socket DIR/ctl.sock EXTRA…` (BATCH written to
/// DIR/cfg.batch), logging at info to DIR/daemon.log; ready when it returns.
pub fn start_daemon(dir: &Path, batch: &str, extra: &[&str]) -> Daemon {
    let cfg = dir.join("cfg.batch");
    std::fs::write(&cfg, batch).unwrap();
    let socket = dir.join("ctl.sock");
    let log = dir.join("daemon.log");
    let mut cmd = Command::new(BIN);
    cmd.args(["daemon", "-batch", cfg.to_str().unwrap(), "--socket"])
        .arg(&socket)
        .args(extra)
        .env("QBRIDGE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    Daemon::spawn(cmd, socket, log).unwrap_or_else(|log| panic!("daemon not ready; log:\n{log}"))
}

/// Every record of pcap file `path`.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    qbridge_io::pcap::PcapReader::open(path)
        .unwrap()
        .map(|r| r.unwrap().data)
        .collect()
}

/// A daemon child, killed on drop if the test did not stop it.
#[derive(Debug)]
pub struct Daemon {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Spawns `cmd` (a daemon command line whose control socket is `socket`; its output
    /// already directed, stderr to `log`) and waits until the socket answers. `Err` with the
    /// log when the daemon exits first or has no socket after 20 s.
    pub fn spawn(mut cmd: Command, socket: PathBuf, log: PathBuf) -> Result<Daemon, String> {
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the daemon: {e}"))?;
        let read_log = |log: &Path| std::fs::read_to_string(log).unwrap_or_default();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if UnixStream::connect(&socket).is_ok() {
                return Ok(Daemon {
                    child: Some(child),
                    socket,
                    log,
                });
            }
            if let Ok(Some(_)) = child.try_wait() {
                return Err(read_log(&log));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!("no socket after 20 s: {}", read_log(&log)))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `qbridge --socket SOCKET ARGS…`.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run qbridge")
    }

    /// [`Daemon::cli`]: stdout, or `Err(stderr)`.
    pub fn try_ok(&self, args: &[&str]) -> Result<String, String> {
        let o = self.cli(args);
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }

    /// [`Daemon::cli`], which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.try_ok(args)
            .unwrap_or_else(|e| panic!("qbridge {args:?}: {e}\nlog:\n{}", self.log_text()))
    }

    /// `kill -SIG PID`.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill -{sig}");
    }

    /// SIGTERM, then the exit status (at most 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        self.signal("TERM");
        let mut child = self.child.take().expect("running");
        let t0 = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the daemon did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and the child reaped.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}
