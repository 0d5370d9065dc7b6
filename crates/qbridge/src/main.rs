//! `qbridge`: the command-line front end. Wiring only: the grammar and its execution live in
//! `qbridge-control`, forwarding in `qbridge-bridge`, pcap files in `qbridge-io`.
//!
//! The top level is parsed by hand, iproute2 style (single-dash options such as `-j`,
//! `-batch FILE`); subcommands with their own flags (`replay`) use clap.

mod client;
mod control_socket;
mod daemon;
mod demo;
mod memlimit;
mod metrics;
mod replay;

use anyhow::{bail, Context};
use qbridge_control::{
    parse_words, usage, Command, OutputOptions, Request, Session, MAX_BATCH_BYTES,
};
use std::io::{Read, Write};
use std::process::ExitCode;

/// `qbridge --help`: this head, every object's commands ([`usage::commands`], the text
/// `qbridge OBJECT help` prints too), then [`USAGE_TAIL`].
const USAGE_HEAD: &str = "\
Usage: qbridge [OPTIONS] OBJECT COMMAND [ARGS...]
       qbridge [OPTIONS] -batch FILE
       qbridge [OPTIONS] apply FILE     (a batch that may be re-applied: what exists is kept)
       qbridge daemon [-batch FILE] [--socket PATH] [--metrics ADDR:PORT] [--pcap-dir DIR]
       qbridge replay -batch CONFIG --in PORT=FILE.pcap [--in ...] --out DIR
       qbridge demo [--seconds N] [--examples DIR]   (live Q-in-Q network in namespaces)
       qbridge [OBJECT] help

OPTIONS: -j[son]  JSON output      -s[tats]  add counters      -p[retty]  indented JSON
         -c, -com[pressvlans]  vlan show: runs of VIDs as ranges (10-20)
         -d[etails]  link show: a bond's LACP state per member
         -br[ief]  link show, vlan show: one line per port (as ip -br)
         -b[atch] FILE  apply FILE (one command per line, # comments; '-' reads stdin)
         --socket PATH  the daemon's control socket     -offline  no daemon (see below)
         -n[etns] NETNS  run in network namespace NETNS (as ip -n): its daemon, by default
         -h[elp]  -V[ersion]      (options may be abbreviated, and take one or two dashes)

OBJECT COMMAND (the words of ip-link(8) and bridge(8)):
";

const USAGE_TAIL: &str = "
Differences from iproute2: ageing_time is in seconds (decimals allowed), not centiseconds.
As in iproute2, 'fdb add' without static or dynamic adds a permanent (local) entry: frames
to it are for the bridge itself and are dropped; use 'static' for a forwarding entry.

Commands go to the running daemon ('qbridge daemon', see 'qbridge daemon --help') over its
control socket: --socket PATH, else $QBRIDGE_SOCKET, else the default of the network
namespace qbridge runs in: /run/qbridge/qbridge.sock in the host's, /run/qbridge/netns/NAME.sock
in namespace NAME (so 'ip netns exec NAME qbridge …' and 'qbridge -n NAME …' reach the
daemon of NAME, never another's). Every command takes effect at once, between two batches of
frames; a batch file is applied all-or-nothing. With no daemon there: 'qbridge: no daemon at
PATH (start one with ...)'.
  -offline      work on a fresh, empty, in-process switch instead (no daemon needed): check
                the syntax and errors of a command, or preview a batch file (its show output).
  -n NETNS      as ip -n: everything runs in network namespace NETNS (/var/run/netns/NETNS),
                'qbridge -n NETNS daemon …' too.
  'qbridge replay' applies a batch file and then runs pcap files through the switch
  (see 'qbridge replay --help').
Errors go to stderr as 'qbridge: line 7: vid 4095 is reserved'; the exit code is 1.
Logs go to stderr; set QBRIDGE_LOG (e.g. QBRIDGE_LOG=debug) to see more.
";

/// `qbridge -V`: the version, and whether this build has the eBPF fast path (a build made
/// without clang forwards every frame in the pipeline, at a fraction of the speed).
fn version_text() -> String {
    let fast_path = if qbridge_datapath::fastpath::built() {
        "eBPF fast path built in"
    } else {
        "built WITHOUT the eBPF fast path (clang was missing at build time: install clang, \
         llvm and libbpf-dev and build again)"
    };
    format!("qbridge {} ({fast_path})\n", env!("CARGO_PKG_VERSION"))
}

fn usage_text() -> String {
    format!("{USAGE_HEAD}{}{USAGE_TAIL}", usage::commands())
}

/// Writes `text` to stdout. A reader that went away (`qbridge fdb show | head -1`) is not an
/// error: iproute2 dies of SIGPIPE without a word, qbridge exits quietly with success.
pub(crate) fn print_stdout(text: &str) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// An option word (without its dashes) abbreviates `word` as iproute2's `matches()` allows.
fn abbreviates(opt: &str, word: &str) -> bool {
    !opt.is_empty() && word.starts_with(opt)
}

fn main() -> ExitCode {
    let args = match utf8_args(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("qbridge: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("qbridge: {}", terminal_safe(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// The arguments as strings; one that is not valid UTF-8 is an error naming it (with its bytes
/// escaped), where `std::env::args` would panic.
fn utf8_args(args: impl Iterator<Item = std::ffi::OsString>) -> anyhow::Result<Vec<String>> {
    args.enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                anyhow::anyhow!(
                    "argument {} is not valid UTF-8: {a:?} (names and words are UTF-8 text)",
                    i + 1
                )
            })
        })
        .collect()
}

/// `text` with control characters other than newline and tab escaped (`\u{1b}`), for
/// messages that echo what a user or a daemon sent: an escape sequence in a device name must
/// not reach the terminal as one.
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Logs to stderr at `$QBRIDGE_LOG`, else `default` (the daemon: info; the rest: warn);
/// colours only on a terminal.
fn init_tracing(default: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("QBRIDGE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

fn run(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let mut out = OutputOptions::default();
    let mut batch: Option<String> = None;
    let mut offline = false;
    let mut socket: Option<String> = None;
    let mut netns: Option<String> = None;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let Some(opt) = arg.strip_prefix('-') else {
            break;
        };
        // iproute2 accepts "--json" as well as "-json".
        let opt = opt.strip_prefix('-').unwrap_or(opt);
        if out.set(opt) {
            i += 1;
            continue;
        }
        // In bridge/bridge.c `main`'s order: -help, -Version, …, -batch.
        match opt {
            "offline" => offline = true,
            o if o == "n" || abbreviates(o, "netns") && o.len() >= 2 => {
                i += 1;
                let name = args
                    .get(i)
                    .context("option -n (-netns) needs a network namespace NAME (as ip -n)")?;
                netns = Some(name.clone());
            }
            "socket" => {
                i += 1;
                let path = args.get(i).context("option --socket needs a PATH")?;
                socket = Some(path.clone());
            }
            o if abbreviates(o, "help") => return print_stdout(&usage_text()),
            o if abbreviates(o, "Version") || o == "version" => {
                return print_stdout(&version_text());
            }
            o if abbreviates(o, "batch") => {
                i += 1;
                let file = args.get(i).context("option -batch needs a FILE")?;
                batch = Some(file.clone());
            }
            _ => bail!("unknown option \"{arg}\" (try \"qbridge -help\")"),
        }
        i += 1;
    }
    let rest = &args[i..];
    if let Some(name) = &netns {
        // Before any thread starts: every thread qbridge starts later is in the namespace.
        if !qbridge_io::netns::netns_path(name).is_ok_and(|p| p.exists()) {
            // `qbridge -n link show` was "offline" before -n meant what it means to ip.
            bail!(
                "no network namespace \"{name}\" (-n takes one, as ip -n does; to work \
                 without a daemon, use -offline)"
            );
        }
        qbridge_io::netns::enter_netns(name).with_context(|| format!("-n {name}"))?;
    }
    init_tracing(if rest.first().is_some_and(|w| w == "daemon") {
        "info"
    } else {
        "warn"
    });

    if let Some(first) = rest.first() {
        match first.as_str() {
            "daemon" => {
                if batch.is_some() || out != OutputOptions::default() || offline {
                    bail!("options go after \"daemon\": qbridge daemon -batch FILE …");
                }
                let mut dargs = rest[1..].to_vec();
                if let Some(s) = socket {
                    dargs.extend(["--socket".to_string(), s]);
                }
                return daemon::main(&dargs);
            }
            "replay" => {
                if batch.is_some() || out != OutputOptions::default() {
                    bail!("options go after \"replay\": qbridge replay -batch CONFIG …");
                }
                return replay::main(&rest[1..]);
            }
            "demo" => {
                if batch.is_some() || out != OutputOptions::default() {
                    bail!("options go after \"demo\": qbridge demo [--seconds N]");
                }
                return demo::main(&rest[1..]);
            }
            "monitor" if offline => {
                bail!("monitor streams a running daemon's changes: it cannot run with -offline")
            }
            "monitor" => {
                if batch.is_some() {
                    bail!("-batch FILE cannot be combined with monitor");
                }
                let socket = daemon::socket_path(socket.as_deref());
                return client::monitor(&socket, out, &rest[1..]);
            }
            "apply" => {
                let [_, file] = rest else {
                    bail!(
                        "usage: qbridge [-offline] [-n NETNS] [--socket PATH] apply FILE \
                         ('-' reads stdin)"
                    );
                };
                if batch.is_some() {
                    bail!("apply takes its FILE itself: qbridge apply FILE");
                }
                let text = read_batch(file)?;
                if !offline {
                    let socket = daemon::socket_path(socket.as_deref());
                    return client::run(&socket, &Request::apply(&text, out));
                }
                let output = Session::new().apply_batch(&text, out)?;
                return print_stdout(&output);
            }
            _ => {}
        }
    }

    if !offline && (batch.is_some() || !rest.is_empty()) {
        let socket = daemon::socket_path(socket.as_deref());
        let req = match (batch, rest.is_empty()) {
            (Some(file), true) => Request::batch(&read_batch(&file)?, out),
            (Some(_), false) => bail!(
                "-batch FILE cannot be combined with a command ({})",
                rest[0]
            ),
            (None, _) => {
                // Syntax errors are reported here, without a round trip; help needs no daemon.
                let rest = &trace_pcap(rest)?;
                let cmd = parse_words(rest)?;
                if let Command::Help(topic) = cmd {
                    return print_help(topic);
                }
                let mut words = out.words();
                words.extend(rest.iter().cloned());
                if let Command::TraceLive(_) = cmd {
                    // The daemon streams the traced frames and closes when the trace ends.
                    return client::stream(&socket, &Request::command(&words), true);
                }
                Request::command(&words)
            }
        };
        return client::run(&socket, &req);
    }

    let mut session = Session::new();
    let output = match (batch, rest.is_empty()) {
        (Some(file), true) => {
            let text = read_batch(&file)?;
            session.execute_batch(&text, out)?
        }
        (Some(_), false) => bail!(
            "-batch FILE cannot be combined with a command ({})",
            rest[0]
        ),
        (None, true) => {
            eprint!("{}", usage_text());
            return Ok(ExitCode::from(2));
        }
        (None, false) => {
            tracing::debug!("offline: running against an empty in-process session");
            let cmd = parse_words(&trace_pcap(rest)?)?;
            if let Command::Help(topic) = cmd {
                return print_help(topic);
            }
            session.execute(&cmd, out)?
        }
    };
    print_stdout(&output)
}

/// `trace dev PORT pcap FILE [index N]`: the client reads frame N (1-based, as Wireshark
/// numbers them; default 1) of a pcap file here, where the file is, and sends it as `hex …`.
fn trace_pcap(words: &[String]) -> anyhow::Result<Vec<String>> {
    if words.first().map(String::as_str) != Some("trace") {
        return Ok(words.to_vec());
    }
    // The keyword, not a port named `pcap` (`trace pcap …`, `trace dev pcap …`).
    let port_at = match words.get(1).map(String::as_str) {
        Some("dev" | "in_port") => 2,
        _ => 1,
    };
    let Some(at) = words
        .iter()
        .enumerate()
        .position(|(i, w)| i > port_at && w == "pcap")
    else {
        return Ok(words.to_vec());
    };
    let Some(file) = words.get(at + 1) else {
        bail!("trace … pcap FILE: the file is missing");
    };
    let mut end = at + 2;
    let index = match words.get(at + 2).map(String::as_str) {
        Some("index") => {
            end += 2;
            let v = words
                .get(at + 3)
                .ok_or_else(|| anyhow::anyhow!("trace … pcap FILE index N: N is missing"))?;
            match v.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => bail!("trace … pcap FILE index {v}: the index is a frame number from 1"),
            }
        }
        _ => 1,
    };
    if let Some(extra) = words.get(end) {
        bail!("trace … pcap FILE [index N]: nothing else describes the frame (got {extra})");
    }
    let mut r = qbridge_io::pcap::PcapReader::open(std::path::Path::new(file))
        .map_err(|e| anyhow::anyhow!("trace: {file}: {e}"))?;
    let mut n = 0;
    while let Some(rec) = r
        .next_record()
        .map_err(|e| anyhow::anyhow!("trace: {file}: {e}"))?
    {
        n += 1;
        if n == index {
            let mut out = words[..at].to_vec();
            out.push("hex".into());
            out.push(qbridge_wire::summary::hex(&rec.data));
            return Ok(out);
        }
    }
    bail!("trace: {file} has {n} frames, not {index}")
}

/// `qbridge help` (the whole usage) or `qbridge OBJECT help`.
fn print_help(topic: Option<qbridge_control::Object>) -> anyhow::Result<ExitCode> {
    match topic {
        Some(o) => print_stdout(&usage::object(o)),
        None => print_stdout(&usage_text()),
    }
}

/// The text of a batch file; `-` is standard input. At most [`MAX_BATCH_BYTES`] (what the
/// daemon takes; `/dev/zero` is refused, not read until memory runs out); text that is not
/// UTF-8 is refused with the line it is on.
pub(crate) fn read_batch(file: &str) -> anyhow::Result<String> {
    let what = if file == "-" {
        "the batch from stdin".to_string()
    } else {
        format!("batch file {file}")
    };
    let mut buf = Vec::new();
    let r = if file == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_BATCH_BYTES + 1)
            .read_to_end(&mut buf)
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("cannot read {what}"))?;
        match f.metadata() {
            Ok(m) if m.is_file() && m.len() > MAX_BATCH_BYTES => {
                bail!("{}", qbridge_control::batch_too_long(m.len()))
            }
            _ => {}
        }
        f.take(MAX_BATCH_BYTES + 1).read_to_end(&mut buf)
    };
    r.with_context(|| format!("cannot read {what}"))?;
    if buf.len() as u64 > MAX_BATCH_BYTES {
        bail!(
            "cannot read {what}: over the limit of {MAX_BATCH_BYTES} bytes ({} MiB); split it",
            MAX_BATCH_BYTES >> 20
        );
    }
    String::from_utf8(buf).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!("cannot read {what}: line {line}: not valid UTF-8")
    })
}

#[cfg(test)]
mod tests {
    use super::trace_pcap;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn trace_pcap_reads_the_frame_and_leaves_a_port_named_pcap_alone() {
        let dir = std::env::temp_dir().join(format!("qb-trace-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.pcap");
        let mut w = qbridge_io::pcap::PcapWriter::create(&file).unwrap();
        w.write(1, &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5])
            .unwrap();
        w.write(2, &[2, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 1, 0x88, 0xb5])
            .unwrap();
        w.finish().unwrap();
        let f = file.display();
        assert_eq!(
            trace_pcap(&words(&format!("trace dev p1 pcap {f} index 2"))).unwrap(),
            words("trace dev p1 hex 02000000000302000000000188b5")
        );
        assert_eq!(
            trace_pcap(&words(&format!("trace pcap pcap {f}"))).unwrap(),
            words("trace pcap hex 02000000000202000000000188b5")
        );
        // A port named pcap, described in words: untouched.
        let w = words("trace dev pcap src 02:00:00:00:00:01 dst 02:00:00:00:00:02");
        assert_eq!(trace_pcap(&w).unwrap(), w);
        assert!(
            trace_pcap(&words(&format!("trace dev p1 pcap {f} index 3")))
                .unwrap_err()
                .to_string()
                .contains("has 2 frames, not 3")
        );
        assert!(
            trace_pcap(&words(&format!("trace dev p1 pcap {f} index 0")))
                .unwrap_err()
                .to_string()
                .contains("a frame number from 1")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
