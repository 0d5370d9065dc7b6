//! The CLI's side of the control socket: send one request, print the answer; or, for
//! `qbridge monitor`, print the daemon's event stream.
//!
//! A batch is streamed (a `batch_len` header line, then the text as it is), so its size is
//! bounded only by [`MAX_BATCH_BYTES`], checked here too. If the daemon refuses a request
//! before taking all of it (it answers and closes), writing fails with `EPIPE`; the answer is
//! then read anyway and shown instead of the write error.

use anyhow::{bail, Context};
use qbridge_control::{
    batch_too_long, MonitorObject, OutputOptions, Request, Response, MAX_BATCH_BYTES,
};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

/// Sends `req` to the daemon at `socket`; prints its output to stdout and its warnings to
/// stderr. A refused command is an `Err` with the daemon's message.
pub fn run(socket: &Path, req: &Request) -> anyhow::Result<ExitCode> {
    let resp = call(socket, req)?;
    for w in &resp.warnings {
        eprintln!("qbridge: warning: {}", crate::terminal_safe(w));
    }
    if !resp.ok {
        bail!("{}", resp.error.unwrap_or_else(|| "failed".into()));
    }
    crate::print_stdout(&resp.output.unwrap_or_default())
}

fn connect(socket: &Path) -> anyhow::Result<UnixStream> {
    match UnixStream::connect(socket) {
        Ok(s) => Ok(s),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            bail!(
                "no daemon at {} (start one with 'qbridge daemon')",
                socket.display()
            )
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => bail!(
            "cannot connect to {}: permission denied (the socket is mode 0600, or 0660 with \
             the daemon's --socket-group: run as the daemon's user or a member of that group)",
            socket.display()
        ),
        Err(e) => bail!("cannot connect to {}: {e}", socket.display()),
    }
}

/// One request, one response. A batch (`req.batch`) is streamed.
pub fn call(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    let stream = connect(socket)?;
    let mut w = &stream;
    let mut r = BufReader::new(&stream);
    let sent = match &req.batch {
        Some(text) => {
            let len = text.len() as u64;
            if len > MAX_BATCH_BYTES {
                bail!("{}", batch_too_long(len));
            }
            let out: OutputOptions = req.opts.unwrap_or_default().into();
            w.write_all(
                Request::batch_stream(len, out, req.apply)
                    .to_line()
                    .as_bytes(),
            )
            .and_then(|()| w.write_all(text.as_bytes()))
        }
        None => w.write_all(req.to_line().as_bytes()),
    };
    let resp = read_response(&mut r, socket);
    match (sent, resp) {
        (_, Ok(resp)) => Ok(resp),
        // The daemon's answer, if there is one, says more than the write error.
        (Err(e), Err(_)) => Err(e).with_context(|| format!("cannot send to {}", socket.display())),
        (Ok(()), Err(e)) => Err(e),
    }
}

fn read_response(r: &mut impl BufRead, socket: &Path) -> anyhow::Result<Response> {
    let mut line = String::new();
    r.read_line(&mut line)
        .with_context(|| format!("cannot read from {}", socket.display()))?;
    if line.is_empty() {
        bail!("the daemon at {} closed the connection", socket.display());
    }
    Response::parse(line.trim_end()).map_err(anyhow::Error::msg)
}

/// `qbridge [-j] monitor [link|fdb|vlan|mirror|all]…`: prints each event line the daemon sends until
/// the daemon goes away (exit 1) or stdout is closed (exit 0).
pub fn monitor(socket: &Path, out: OutputOptions, words: &[String]) -> anyhow::Result<ExitCode> {
    let objects = MonitorObject::parse_words(words).map_err(anyhow::Error::msg)?;
    stream(socket, &Request::monitor(&objects, out), false)
}

/// Sends `req` and prints the lines the daemon streams back until it closes the connection:
/// a monitor (where the close is an error) or `trace live` (`ends`: where it is the end).
pub fn stream(socket: &Path, req: &Request, ends: bool) -> anyhow::Result<ExitCode> {
    let stream = connect(socket)?;
    (&stream)
        .write_all(req.to_line().as_bytes())
        .with_context(|| format!("cannot send to {}", socket.display()))?;
    let mut r = BufReader::new(&stream);
    let resp = read_response(&mut r, socket)?;
    if !resp.ok {
        bail!("{}", resp.error.unwrap_or_else(|| "failed".into()));
    }
    let mut stdout = std::io::stdout().lock();
    let mut line = String::new();
    loop {
        line.clear();
        let n = r
            .read_line(&mut line)
            .with_context(|| format!("cannot read from {}", socket.display()))?;
        if n == 0 {
            if ends {
                return Ok(ExitCode::SUCCESS);
            }
            bail!("the daemon at {} closed the connection", socket.display());
        }
        // Each line at once: a monitor is read by people and by pipelines as it happens.
        if stdout
            .write_all(line.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
