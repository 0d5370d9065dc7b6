//! The daemon's control socket (crates/control/src/protocol.rs): one request line with the
//! command's words, one response line. The plugin is a client like `qbridge` itself.

use crate::CniError;
use qbridge_control::json::{self, Link};
use qbridge_control::protocol::{Request, Response, PROTOCOL_VERSION};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// What a command came back with.
#[derive(Debug)]
pub enum Answer {
    Ok(String),
    /// The daemon refused the command; its message.
    Refused(String),
}

/// Sends one command (iproute2 words, `-j` first for JSON) to the daemon at `socket`. An
/// unreachable daemon is error 11 ("try again later"), as the runtime may retry.
pub fn call(socket: &Path, words: &[&str]) -> Result<Answer, CniError> {
    let unreachable = |e: std::io::Error| {
        CniError::new(
            11,
            format!(
                "cannot reach the qbridge daemon at {}: {e}",
                socket.display()
            ),
        )
    };
    let mut s = UnixStream::connect(socket).map_err(unreachable)?;
    let req = Request {
        v: PROTOCOL_VERSION,
        args: Some(words.iter().map(|w| (*w).to_owned()).collect()),
        batch: None,
        opts: None,
        apply: false,
        batch_len: None,
        monitor: None,
    };
    let mut line = serde_json::to_string(&req)
        .map_err(|e| CniError::new(5, format!("cannot encode a request: {e}")))?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut r = BufReader::new(s);
    let mut resp = String::new();
    r.read_line(&mut resp).map_err(unreachable)?;
    if resp.is_empty() {
        return Err(CniError::new(
            11,
            format!(
                "the qbridge daemon at {} closed the connection",
                socket.display()
            ),
        ));
    }
    let resp: Response = serde_json::from_str(&resp)
        .map_err(|e| CniError::new(5, format!("bad answer from the qbridge daemon: {e}")))?;
    Ok(if resp.ok {
        Answer::Ok(resp.output.unwrap_or_default())
    } else {
        Answer::Refused(resp.error.unwrap_or_default())
    })
}

/// As [`call`], a refusal being an error naming the command.
pub fn must(socket: &Path, words: &[&str]) -> Result<String, CniError> {
    match call(socket, words)? {
        Answer::Ok(out) => Ok(out),
        Answer::Refused(m) => Err(CniError::new(
            5,
            format!("qbridge {}: {m}", words.join(" ")),
        )),
    }
}

/// `link show -j`'s objects, typed (`qbridge_control::json`, the structs tested against the
/// daemon's renderer); objects that do not read are left out.
pub fn links(out: &str) -> Result<Vec<Link>, CniError> {
    json::objects(out)
        .map_err(|e| CniError::new(5, format!("bad JSON from qbridge link show: {e}")))
}

/// The port's `link show -j` object, `None` when the daemon has no such port.
pub fn port(socket: &Path, name: &str) -> Result<Option<Link>, CniError> {
    match call(socket, &["-j", "link", "show", "dev", name])? {
        Answer::Ok(out) => Ok(links(&out)?.into_iter().next()),
        Answer::Refused(m) if m.contains("does not exist") => Ok(None),
        Answer::Refused(m) => Err(CniError::new(
            5,
            format!("qbridge link show dev {name}: {m}"),
        )),
    }
}
