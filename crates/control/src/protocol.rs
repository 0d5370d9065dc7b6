//! The control-socket protocol between `qbridge` (the CLI) and `qbridge daemon`, shared by both
//! ends so they cannot drift apart.
//!
//! Transport: a Unix stream socket. Each request is one JSON object on one line; the daemon
//! answers each with one JSON object on one line, in order, and a client may send several
//! requests on one connection. Every message carries `"v"` ([`PROTOCOL_VERSION`]); the version
//! moves when a field changes meaning or a required field is added. A daemon refuses a request
//! of another version with an error naming both.
//!
//! ```text
//! {"v":1,"args":["-j","fdb","show"]}                    one command, iproute2 words
//! {"v":1,"batch":"link add br0 type bridge\n…","opts":{"json":false,"stats":false,"pretty":false}}
//! {"v":1,"ok":true,"output":"…"}                        success: what the command printed
//! {"v":1,"ok":false,"error":"line 7: vid 4095 is reserved"}
//! ```
//!
//! A batch can also be streamed: a header line `{"v":1,"batch_len":N,"opts":{…}}` followed by
//! exactly N bytes of batch text (not JSON, any number of lines), answered with one response
//! line. This is what the CLI sends; the daemon holds at most [`MAX_BATCH_BYTES`] of it.
//!
//! `{"v":1,"monitor":["fdb","link","vlan"],"opts":{"json":false}}` turns the connection into a
//! stream: the daemon answers `{"v":1,"ok":true,"output":""}` and from then on sends one event
//! per line, exactly as `qbridge monitor` prints it (text, or one JSON object per line).
//!
//! `args` may start with the output options `-j`, `-s`, `-p` (long forms too), exactly as on the
//! command line. A response may carry `warnings` (things the daemon did or could not do that do
//! not make the command fail, e.g. an interface that does not exist yet).

use crate::command::OutputOptions;
use serde::{Deserialize, Serialize};

/// The version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line the daemon reads (a command, or a batch sent in one line).
pub const MAX_REQUEST_LINE_BYTES: usize = 1 << 20;

/// Largest streamed batch (`batch_len`). The CLI checks it too, so an over-long batch file is
/// refused with this message on both sides.
pub const MAX_BATCH_BYTES: u64 = 256 << 20;

/// The message for a batch of `len` bytes over [`MAX_BATCH_BYTES`].
pub fn batch_too_long(len: u64) -> String {
    format!(
        "batch of {len} bytes is over the limit of {MAX_BATCH_BYTES} bytes ({} MiB); split it",
        MAX_BATCH_BYTES >> 20
    )
}

fn version() -> u32 {
    PROTOCOL_VERSION
}

/// `"v"`: a whole number of at most `u32::MAX`. Read as its JSON text so an error quotes it as
/// sent (serde_json reads `99999999999999999999999` as the float `1e23`, and its own message
/// spoke of a floating point number nobody sent).
fn de_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
    let text = raw.get();
    text.parse::<u32>().map_err(|_| {
        serde::de::Error::custom(format!(
            "\"v\" must be a protocol version, a whole number from 0 to {}, not {text}",
            u32::MAX
        ))
    })
}

/// Output options as they travel in a `batch` request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WireOptions {
    pub json: bool,
    pub stats: bool,
    pub pretty: bool,
    /// Sent only when set, so that a line without `-c` reads the same to an older daemon.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compress_vlans: bool,
    /// `-d`; sent only when set, like `compress_vlans`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub details: bool,
    /// `-br`; sent only when set, like `compress_vlans`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub brief: bool,
}

impl From<OutputOptions> for WireOptions {
    fn from(o: OutputOptions) -> Self {
        WireOptions {
            json: o.json,
            stats: o.stats,
            pretty: o.pretty,
            compress_vlans: o.compress_vlans,
            details: o.details,
            brief: o.brief,
        }
    }
}

impl From<WireOptions> for OutputOptions {
    fn from(o: WireOptions) -> Self {
        OutputOptions {
            json: o.json,
            stats: o.stats,
            pretty: o.pretty,
            compress_vlans: o.compress_vlans,
            details: o.details,
            brief: o.brief,
        }
    }
}

/// One request line. Exactly one of `args` and `batch` is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    #[serde(default = "version", deserialize_with = "de_version")]
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opts: Option<WireOptions>,
    /// With `batch`: apply it as `qbridge apply` does (re-applying changes nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apply: bool,
    /// A streamed batch: this many bytes of batch text follow the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_len: Option<u64>,
    /// Turn the connection into an event stream of these objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<Vec<MonitorObject>>,
}

/// What `qbridge monitor` can watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MonitorObject {
    Link,
    Fdb,
    Vlan,
    Mirror,
    Stp,
    /// Each dropped frame (`monitor drops`; not part of `all`: a drop storm is many lines).
    Drops,
}

impl MonitorObject {
    pub const ALL: [MonitorObject; 5] = [
        MonitorObject::Link,
        MonitorObject::Fdb,
        MonitorObject::Vlan,
        MonitorObject::Mirror,
        MonitorObject::Stp,
    ];

    /// `link`, `fdb`, `vlan`, `mirror`, `stp`, `drops`; `all` is every one but `drops`.
    pub fn parse_words(words: &[String]) -> Result<Vec<MonitorObject>, String> {
        if words.is_empty() {
            return Ok(MonitorObject::ALL.to_vec());
        }
        let mut v = Vec::new();
        for w in words {
            match w.as_str() {
                "link" => v.push(MonitorObject::Link),
                "fdb" => v.push(MonitorObject::Fdb),
                "vlan" => v.push(MonitorObject::Vlan),
                "mirror" => v.push(MonitorObject::Mirror),
                "stp" => v.push(MonitorObject::Stp),
                "drops" => v.push(MonitorObject::Drops),
                "all" => v.extend(MonitorObject::ALL),
                _ => {
                    return Err(format!(
                        "monitor: unknown object \"{w}\" (expected link, fdb, vlan, mirror, stp, \
                         drops or all)"
                    ))
                }
            }
        }
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }
}

/// A request line as the daemon's socket reads it: an operation the control plane runs, or
/// one that needs the connection itself (a streamed batch, a monitor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Op(Op),
    /// `len` bytes of batch text follow the header line.
    BatchStream {
        out: OutputOptions,
        len: u64,
        /// Applied as `qbridge apply` does.
        apply: bool,
    },
    Monitor {
        out: OutputOptions,
        objects: Vec<MonitorObject>,
    },
    /// `trace live …` (sent as `args`): the connection streams the traced frames and closes
    /// when the trace ends.
    TraceLive {
        out: OutputOptions,
        spec: crate::command::TraceLiveSpec,
    },
}

/// What a valid request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One command: output options and the command's words.
    Command {
        out: OutputOptions,
        words: Vec<String>,
    },
    /// A batch, all-or-nothing.
    Batch { out: OutputOptions, text: String },
    /// A batch applied idempotently (`qbridge apply`, [`crate::Session::apply_batch`]).
    Apply { out: OutputOptions, text: String },
}

impl Request {
    pub fn command(args: &[String]) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            args: Some(args.to_vec()),
            batch: None,
            opts: None,
            apply: false,
            batch_len: None,
            monitor: None,
        }
    }

    /// The header of a streamed batch of `len` bytes; `apply`: applied as `qbridge apply`.
    pub fn batch_stream(len: u64, out: OutputOptions, apply: bool) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            args: None,
            batch: None,
            opts: Some(out.into()),
            apply,
            batch_len: Some(len),
            monitor: None,
        }
    }

    pub fn monitor(objects: &[MonitorObject], out: OutputOptions) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            args: None,
            batch: None,
            opts: Some(out.into()),
            apply: false,
            batch_len: None,
            monitor: Some(objects.to_vec()),
        }
    }

    pub fn batch(text: &str, out: OutputOptions) -> Request {
        Request {
            v: PROTOCOL_VERSION,
            args: None,
            batch: Some(text.to_owned()),
            opts: Some(out.into()),
            apply: false,
            batch_len: None,
            monitor: None,
        }
    }

    /// `qbridge apply FILE`: `text` applied idempotently.
    pub fn apply(text: &str, out: OutputOptions) -> Request {
        Request {
            apply: true,
            ..Request::batch(text, out)
        }
    }

    /// One line of JSON with its newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("requests serialize");
        s.push('\n');
        s
    }

    /// Parses one request line and checks version and shape; refuses the forms that need the
    /// connection (a streamed batch, a monitor; see [`Request::parse_incoming`]).
    pub fn parse(line: &str) -> Result<Op, String> {
        match Request::parse_incoming(line)? {
            Incoming::Op(op) => Ok(op),
            Incoming::TraceLive { .. } => {
                Err("trace live streams its frames: it needs the daemon's socket".into())
            }
            Incoming::BatchStream { .. } | Incoming::Monitor { .. } => {
                Err("malformed request: \"batch_len\" and \"monitor\" need a connection".into())
            }
        }
    }

    /// Parses one request line as the daemon's socket reads it.
    pub fn parse_incoming(line: &str) -> Result<Incoming, String> {
        let r: Request =
            serde_json::from_str(line).map_err(|e| format!("malformed request: {e}"))?;
        if r.v != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {} is not supported (this daemon speaks {PROTOCOL_VERSION})",
                r.v
            ));
        }
        let out: OutputOptions = r.opts.unwrap_or_default().into();
        match (r.batch_len, r.monitor.clone()) {
            (Some(_), Some(_)) => {
                return Err("malformed request: give only one of \"batch_len\" and \"monitor\"".into())
            }
            (Some(_), None) | (None, Some(_)) if r.args.is_some() || r.batch.is_some() => {
                return Err(
                    "malformed request: \"batch_len\" and \"monitor\" go without \"args\" and \"batch\""
                        .into(),
                )
            }
            (Some(len), None) => {
                return Ok(Incoming::BatchStream {
                    out,
                    len,
                    apply: r.apply,
                })
            }
            (None, Some(objects)) => {
                let objects = if objects.is_empty() {
                    MonitorObject::ALL.to_vec()
                } else {
                    objects
                };
                return Ok(Incoming::Monitor { out, objects });
            }
            (None, None) => {}
        }
        let op = Request::parse_op(r)?;
        if let Op::Command { out, words } = &op {
            if let Ok(crate::Command::TraceLive(spec)) = crate::parse_words(words) {
                return Ok(Incoming::TraceLive { out: *out, spec });
            }
        }
        Ok(Incoming::Op(op))
    }

    fn parse_op(r: Request) -> Result<Op, String> {
        match (r.args, r.batch) {
            (Some(_), None) if r.apply => {
                Err("malformed request: \"apply\" goes with \"batch\"".into())
            }
            (Some(args), None) => {
                if r.opts.is_some() {
                    return Err(
                        "malformed request: \"opts\" goes with \"batch\"; put -j/-s/-p in \"args\""
                            .into(),
                    );
                }
                let (out, words) = split_output_options(&args)?;
                if words.is_empty() {
                    return Err("malformed request: \"args\" has no command".into());
                }
                Ok(Op::Command {
                    out,
                    words: words.to_vec(),
                })
            }
            (None, Some(text)) if r.apply => Ok(Op::Apply {
                out: r.opts.unwrap_or_default().into(),
                text,
            }),
            (None, Some(text)) => Ok(Op::Batch {
                out: r.opts.unwrap_or_default().into(),
                text,
            }),
            _ => Err("malformed request: give exactly one of \"args\" and \"batch\"".into()),
        }
    }
}

/// Splits leading output options (`-j[son]`, `-s[tats]`, `-statistics`, `-p[retty]`, also with
/// two dashes) from the command words.
pub fn split_output_options(args: &[String]) -> Result<(OutputOptions, &[String]), String> {
    let mut out = OutputOptions::default();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let Some(opt) = a.strip_prefix('-') else {
            break;
        };
        let opt = opt.strip_prefix('-').unwrap_or(opt);
        if !out.set(opt) {
            return Err(format!("unknown option \"{a}\""));
        }
        i += 1;
    }
    Ok((out, &args[i..]))
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    #[serde(default = "version", deserialize_with = "de_version")]
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Response {
    pub fn ok(output: String, warnings: Vec<String>) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: true,
            output: Some(output),
            error: None,
            warnings,
        }
    }

    pub fn err(error: impl Into<String>) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: false,
            output: None,
            error: Some(error.into()),
            warnings: Vec::new(),
        }
    }

    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("responses serialize");
        s.push('\n');
        s
    }

    pub fn parse(line: &str) -> Result<Response, String> {
        let r: Response =
            serde_json::from_str(line).map_err(|e| format!("malformed response: {e}"))?;
        if r.v != PROTOCOL_VERSION {
            return Err(format!(
                "daemon speaks protocol version {} (this client speaks {PROTOCOL_VERSION})",
                r.v
            ));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_request_round_trip() {
        let args: Vec<String> = ["-j", "fdb", "show"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let line = Request::command(&args).to_line();
        assert_eq!(line, "{\"v\":1,\"args\":[\"-j\",\"fdb\",\"show\"]}\n");
        let op = Request::parse(&line).unwrap();
        assert_eq!(
            op,
            Op::Command {
                out: OutputOptions {
                    json: true,
                    ..Default::default()
                },
                words: vec!["fdb".into(), "show".into()],
            }
        );
    }

    #[test]
    fn version_defaults_to_1_and_others_are_refused() {
        assert!(Request::parse("{\"args\":[\"link\",\"show\"]}").is_ok());
        let e = Request::parse("{\"v\":2,\"args\":[\"link\",\"show\"]}").unwrap_err();
        assert_eq!(
            e,
            "protocol version 2 is not supported (this daemon speaks 1)"
        );
    }

    /// Issue 17 item 16: a version too large for an integer was reported as "invalid type:
    /// floating point `1e23`, expected u32".
    #[test]
    fn an_out_of_range_version_is_quoted_as_sent() {
        for (v, col) in [
            ("99999999999999999999999", 29),
            ("4294967296", 16),
            ("-1", 8),
        ] {
            let e = Request::parse(&format!("{{\"v\":{v}}}")).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "malformed request: \"v\" must be a protocol version, a whole number from 0 \
                     to 4294967295, not {v} at line 1 column {col}"
                )
            );
        }
        let e = Request::parse("{\"v\":1.5}").unwrap_err();
        assert!(e.contains("not 1.5 at"), "{e}");
        let e = Response::parse("{\"v\":1e3,\"ok\":true}").unwrap_err();
        assert!(e.contains("not 1e3 at"), "{e}");
        assert!(Response::parse("{\"v\":1,\"ok\":true}").is_ok());
    }

    #[test]
    fn batch_request_and_shape_errors() {
        let line = Request::batch("vlan show\n", OutputOptions::default()).to_line();
        assert_eq!(
            Request::parse(&line).unwrap(),
            Op::Batch {
                out: OutputOptions::default(),
                text: "vlan show\n".into()
            }
        );
        assert!(Request::parse("{\"v\":1}")
            .unwrap_err()
            .contains("exactly one"));
        assert!(Request::parse("{\"v\":1,\"args\":[\"-x\",\"link\"]}")
            .unwrap_err()
            .contains("unknown option \"-x\""));
        assert!(Request::parse("not json")
            .unwrap_err()
            .starts_with("malformed request"));
    }

    #[test]
    fn compress_vlans_travels_only_when_set() {
        let plain = Request::batch("vlan show\n", OutputOptions::default()).to_line();
        assert!(!plain.contains("compress"), "{plain}");
        let out = OutputOptions {
            compress_vlans: true,
            ..OutputOptions::default()
        };
        let line = Request::batch("vlan show\n", out).to_line();
        assert!(line.contains("\"compress_vlans\":true"), "{line}");
        assert!(matches!(Request::parse(&line), Ok(Op::Batch { out: o, .. }) if o == out));
        let args: Vec<String> = ["-c", "vlan", "show"].map(String::from).to_vec();
        assert!(matches!(
            Request::parse(&Request::command(&args).to_line()),
            Ok(Op::Command { out: o, .. }) if o.compress_vlans
        ));
    }

    #[test]
    fn brief_travels_only_when_set_and_b_stays_batch() {
        let plain = Request::batch("link show\n", OutputOptions::default()).to_line();
        assert!(!plain.contains("brief"), "{plain}");
        let out = OutputOptions {
            brief: true,
            ..OutputOptions::default()
        };
        assert_eq!(out.words(), ["-br"]);
        let line = Request::batch("link show\n", out).to_line();
        assert!(line.contains("\"brief\":true"), "{line}");
        assert!(matches!(Request::parse(&line), Ok(Op::Batch { out: o, .. }) if o == out));
        for w in ["-br", "-bri", "--brief"] {
            let args: Vec<String> = [w, "link", "show"].map(String::from).to_vec();
            assert!(matches!(
                Request::parse(&Request::command(&args).to_line()),
                Ok(Op::Command { out: o, .. }) if o.brief
            ));
        }
        // `-b` is `-batch` (ip/ip.c tests it first): not an output option.
        assert!(!OutputOptions::default().set("b"));
        assert!(!OutputOptions::default().set("ba"));
    }

    #[test]
    fn response_lines() {
        let r = Response::err("line 7: vid 4095 is reserved");
        assert_eq!(
            r.to_line(),
            "{\"v\":1,\"ok\":false,\"error\":\"line 7: vid 4095 is reserved\"}\n"
        );
        let ok = Response::ok("x\n".into(), vec![]);
        assert_eq!(Response::parse(&ok.to_line()).unwrap(), ok);
    }

    #[test]
    fn stream_and_monitor_requests() {
        let line = Request::batch_stream(42, OutputOptions::default(), false).to_line();
        assert_eq!(
            line,
            "{\"v\":1,\"opts\":{\"json\":false,\"stats\":false,\"pretty\":false},\"batch_len\":42}\n"
        );
        assert_eq!(
            Request::parse_incoming(&line).unwrap(),
            Incoming::BatchStream {
                out: OutputOptions::default(),
                len: 42,
                apply: false,
            }
        );
        let line = Request::batch_stream(7, OutputOptions::default(), true).to_line();
        assert_eq!(
            Request::parse_incoming(&line).unwrap(),
            Incoming::BatchStream {
                out: OutputOptions::default(),
                len: 7,
                apply: true,
            }
        );
        assert!(Request::parse(&line)
            .unwrap_err()
            .contains("need a connection"));
        let m = Request::monitor(&[MonitorObject::Fdb], OutputOptions::default()).to_line();
        assert!(m.contains("\"monitor\":[\"fdb\"]"), "{m}");
        assert_eq!(
            Request::parse_incoming("{\"monitor\":[]}").unwrap(),
            Incoming::Monitor {
                out: OutputOptions::default(),
                objects: MonitorObject::ALL.to_vec()
            }
        );
        assert!(Request::parse_incoming("{\"monitor\":[\"x\"]}").is_err());
        assert!(
            Request::parse_incoming("{\"monitor\":[\"fdb\"],\"args\":[\"link\",\"show\"]}")
                .is_err()
        );
        let w: Vec<String> = ["fdb", "all"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            MonitorObject::parse_words(&w).unwrap(),
            MonitorObject::ALL.to_vec()
        );
    }
}
