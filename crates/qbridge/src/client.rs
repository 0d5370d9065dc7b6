//! The CLI's side of the control socket: send one request, print the answer.

use anyhow::{bail, Context};
use qbridge_control::{Request, Response};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

/// Sends `req` to the daemon at `socket`; prints its output to stdout and its warnings to
/// stderr. A refused command is an `Err` with the daemon's message.
pub fn run(socket: &Path, req: &Request) -> anyhow::Result<ExitCode> {
    let resp = call(socket, req)?;
    for w in &resp.warnings {
        eprintln!("qbridge: warning: {w}");
    }
    if !resp.ok {
        bail!("{}", resp.error.unwrap_or_else(|| "failed".into()));
    }
    crate::print_stdout(&resp.output.unwrap_or_default())
}

/// One request, one response.
pub fn call(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    let stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            bail!(
                "no daemon at {} (start one with 'qbridge daemon')",
                socket.display()
            )
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => bail!(
            "cannot connect to {}: permission denied (the socket is mode 0600: run as the \
             daemon's user)",
            socket.display()
        ),
        Err(e) => bail!("cannot connect to {}: {e}", socket.display()),
    };
    let mut w = stream.try_clone().context("socket")?;
    w.write_all(req.to_line().as_bytes())
        .with_context(|| format!("cannot send to {}", socket.display()))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("cannot read from {}", socket.display()))?;
    if line.is_empty() {
        bail!("the daemon at {} closed the connection", socket.display());
    }
    Response::parse(line.trim_end()).map_err(anyhow::Error::msg)
}
