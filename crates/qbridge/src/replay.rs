//! `qbridge replay`: runs pcap captures through a switch configured by a batch file.
//!
//! The capture timestamps are the clock. Frames from all inputs are merged by timestamp (ties
//! go to the input named first); consecutive frames with the same timestamp are handed to the
//! switch as one batch of at most [`BATCH_MAX`], never reordered. Before the first frame of each
//! new whole second of capture time (which covers any jump in time) the switch ages its FDB at
//! that frame's time. Every frame the switch sends on a pcap port is written to `DIR/PORT.pcap`
//! stamped with the time of the frame that caused it; frames for ports of other kinds are
//! counted and discarded. A mirror session with `dst pcap FILE` writes `DIR/FILE` the same
//! way (FILE is a plain file name: the switch refuses paths). A `violation shutdown` drop
//! (`mac_limit_shutdown`) takes its port down right after the batch that counted it, at that
//! batch's capture time, as the daemon does within a second (`link set dev P down`), so the
//! rest of the capture meets a port that neither receives nor sends and lost its entries.
//! Bridges with `stp_state 1` run their spanning tree on the capture clock too: a tick at
//! each new second, the BPDUs the capture brings are received, the ones the bridge sends are
//! written to their ports' files (or cross patch links) like any frame.

use crate::read_batch;
use anyhow::{anyhow, bail, Context};
use clap::Parser;
use qbridge_bridge::counters::drop_words;
use qbridge_bridge::{DropReason, Outputs, PortId};
use qbridge_control::{OutputOptions, PortSpec, Session};
use qbridge_io::pcap::{FileAccess, PcapReader, PcapRecord, PcapWriter};
use qbridge_packet::Batch;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most frames handed to the switch at once.
const BATCH_MAX: usize = 32;
const NS_PER_SEC: u64 = 1_000_000_000;
/// Output captures hold traffic: readable by their owner only (decision 30), and created
/// afresh, never written through a link planted in `--out`.
const OUT_ACCESS: FileAccess = FileAccess { group: None };

/// Replay pcap files through a switch configured by a batch file (no live interfaces).
///
/// Every pcap port of the configuration gets DIR/PORT.pcap (classic pcap, Ethernet) with the
/// frames the switch sent on it; DIR/fdb.json is `fdb show -j` at the end, DIR/stats.json the
/// per-port counters with drops by reason, per-VLAN counters per bridge and unknown_port_drops.
/// Capture timestamps are the clock: FDB ageing follows them, and a `violation shutdown` takes
/// its port down at the capture time of the frame that caused it.
#[derive(Debug, Parser)]
#[command(
    name = "qbridge replay",
    version,
    override_usage = "qbridge replay -batch CONFIG --in PORT=FILE.pcap [--in PORT=FILE.pcap ...] --out DIR"
)]
struct Args {
    /// Batch file that configures the switch (the same commands as `qbridge -batch`).
    #[arg(long = "batch", short_alias = 'b', value_name = "CONFIG")]
    batch: String,
    /// Input capture for a pcap port; repeat for more ports. Ties in time go to the input
    /// named first.
    #[arg(long = "in", value_name = "PORT=FILE.pcap", required = true, value_parser = parse_input)]
    inputs: Vec<(String, PathBuf)>,
    /// Directory for the output captures, fdb.json and stats.json (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((port, file)) if !port.is_empty() && !file.is_empty() => {
            Ok((port.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("\"{s}\" is not PORT=FILE.pcap")),
    }
}

/// Entry point; `args` are the words after `replay`. iproute2-style `-batch` is accepted.
pub fn main(args: &[String]) -> anyhow::Result<ExitCode> {
    let argv =
        std::iter::once("qbridge replay".to_string()).chain(args.iter().map(
            |a| match a.as_str() {
                "-batch" => "--batch".to_string(),
                "-in" => "--in".to_string(),
                "-out" => "--out".to_string(),
                _ => a.clone(),
            },
        ));
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            // Help and version go to stdout with success; usage errors to stderr.
            let _ = e.print();
            return Ok(if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            });
        }
    };
    let summary = replay(&args)?;
    print!("{summary}");
    Ok(ExitCode::SUCCESS)
}

struct Input {
    port: PortId,
    reader: PcapReader,
    head: Option<PcapRecord>,
    frames: u64,
}

/// Output capture of one pcap port.
struct Output {
    name: String,
    writer: PcapWriter,
    frames: u64,
}

fn replay(args: &Args) -> anyhow::Result<String> {
    let text = read_batch(&args.batch)?;
    let mut session = Session::new();
    let shown = session.execute_batch(&text, OutputOptions::default())?;

    let mut inputs = Vec::new();
    for (name, file) in &args.inputs {
        let port = session
            .switch()
            .port_id(name)
            .map_err(|e| anyhow!("--in {name}: {e}"))?;
        match session.port_spec(name) {
            Some(PortSpec::Pcap) => {}
            Some(other) => bail!("--in {name}: port is of type {}, not pcap", other.kind()),
            None => bail!("--in {name}: port has no backend"),
        }
        let mut reader = PcapReader::open(file)?;
        let head = reader.next_record()?;
        inputs.push(Input {
            port,
            reader,
            head,
            frames: 0,
        });
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create directory {}", args.out.display()))?;
    let mut outputs: Vec<Option<Output>> = Vec::new();
    outputs.resize_with(session.switch().port_slots(), || None);
    for (id, name, spec) in session.ports() {
        if *spec == PortSpec::Pcap {
            let writer = PcapWriter::create_in(&args.out, &format!("{name}.pcap"), OUT_ACCESS)?;
            outputs[id.0 as usize] = Some(Output {
                name: name.to_string(),
                writer,
                frames: 0,
            });
        }
    }

    // Patch links: what leaves one end enters the switch again on the other, in the same batch
    // time.
    let mut patch_peer: Vec<Option<u16>> = vec![None; session.switch().port_slots()];
    for (id, _, spec) in session.ports() {
        if let PortSpec::Patch { peer } = spec {
            patch_peer[id.0 as usize] = Some(session.switch().port_id(peer)?.0);
        }
    }
    // Mirror sessions to pcap files: DIR/FILE each, by the plan's sink index.
    let mut sinks = Vec::new();
    for file in session.switch_mut().plan().mirror_sinks() {
        let taken = ["fdb.json", "stats.json"].contains(&file.as_str())
            || session
                .ports()
                .iter()
                .any(|(_, n, spec)| **spec == PortSpec::Pcap && format!("{n}.pcap") == *file);
        if taken {
            bail!("mirror to pcap {file}: replay writes that file itself; pick another name");
        }
        sinks.push(Output {
            name: file.clone(),
            writer: PcapWriter::create_in(&args.out, file, OUT_ACCESS)?,
            frames: 0,
        });
    }
    let mut run = Run {
        sinks: &mut sinks,
        session: &mut session,
        outputs: &mut outputs,
        patch_peer,
        patched: Batch::with_capacity(BATCH_MAX),
        out: Outputs::new(),
        batch: Batch::with_capacity(BATCH_MAX),
        batch_ts: 0,
        discarded: 0,
        batches: 0,
        shutdown_seen: Vec::new(),
        shut: Vec::new(),
    };
    let mut aged_sec: Option<u64> = None;
    let (mut first_ts, mut last_ts, mut total) = (None, 0u64, 0u64);
    while let Some(i) = next_input(&inputs) {
        let input = &mut inputs[i];
        let rec = input
            .head
            .take()
            .expect("next_input picks an input with a record");
        input.head = input.reader.next_record()?;
        input.frames += 1;
        let ts = rec.ts_ns;
        if !run.batch.is_empty() && (ts != run.batch_ts || run.batch.len() == BATCH_MAX) {
            run.flush()?;
        }
        let sec = ts / NS_PER_SEC;
        if aged_sec.is_none_or(|s| sec > s) {
            let removed = run.session.switch_mut().age(ts);
            tracing::debug!(ts_ns = ts, removed, "aged the FDB");
            // The spanning trees' seconds (at most an hour of them across a gap).
            if run.session.spanning_tree().running() {
                let ticks = aged_sec.map_or(1, |s| (sec - s).min(3600));
                for _ in 0..ticks {
                    run.session.stp_tick();
                }
                run.batch_ts = ts;
                run.flush()?;
            }
            aged_sec = Some(sec);
        }
        let mut pkt = run.out.pool.take();
        pkt.set_frame(&rec.data);
        pkt.port = input.port.0;
        pkt.time_ns = ts;
        run.batch.push(pkt);
        run.batch_ts = ts;
        first_ts.get_or_insert(ts);
        last_ts = last_ts.max(ts);
        total += 1;
    }
    if !run.batch.is_empty() {
        run.flush()?;
    }
    let (discarded, batches) = (run.discarded, run.batches);
    let shut = std::mem::take(&mut run.shut);

    let mut written = Vec::new();
    for o in outputs.into_iter().flatten() {
        written.push((format!("{}.pcap", o.name), o.frames));
        o.writer.finish()?;
    }
    for o in sinks {
        written.push((o.name, o.frames));
        o.writer.finish()?;
    }
    let fdb_path = args.out.join("fdb.json");
    let fdb = session.execute_line(
        "fdb show",
        OutputOptions {
            json: true,
            pretty: true,
            ..OutputOptions::default()
        },
    )?;
    write_afresh(&fdb_path, fdb.as_bytes())
        .with_context(|| format!("cannot write {}", fdb_path.display()))?;
    let stats_path = args.out.join("stats.json");
    let mut stats = serde_json::to_string_pretty(&session.stats_json()).expect("stats serialize");
    stats.push('\n');
    write_afresh(&stats_path, stats.as_bytes())
        .with_context(|| format!("cannot write {}", stats_path.display()))?;

    Ok(summary(&SummaryInput {
        session: &session,
        shown: &shown,
        inputs: &inputs,
        args,
        total,
        span: first_ts.map(|f| (f, last_ts)),
        batches,
        written: &written,
        discarded,
        shut: &shut,
    }))
}

/// The input whose next record is earliest; ties go to the input named first.
fn next_input(inputs: &[Input]) -> Option<usize> {
    inputs
        .iter()
        .enumerate()
        .filter_map(|(i, inp)| inp.head.as_ref().map(|r| (r.ts_ns, i)))
        .min()
        .map(|(_, i)| i)
}

struct Run<'a> {
    session: &'a mut Session,
    /// Files of the `dst pcap` mirror sessions, by sink index.
    sinks: &'a mut Vec<Output>,
    outputs: &'a mut Vec<Option<Output>>,
    out: Outputs,
    batch: Batch,
    batch_ts: u64,
    /// Per port id: the other end, for a patch port.
    patch_peer: Vec<Option<u16>>,
    /// Frames crossing a patch link, to be processed again.
    patched: Batch,
    /// Frames sent on ports that are neither pcap nor patch ports (nowhere to write them), or
    /// still crossing patch links after [`PATCH_ROUNDS`] rounds (a loop).
    discarded: u64,
    batches: u64,
    /// Per port id: the `mac_limit_shutdown` drops already acted on.
    shutdown_seen: Vec<u64>,
    /// Ports taken down by `violation shutdown`, with the capture time.
    shut: Vec<(String, u64)>,
}

/// Most times one batch's frames cross patch links before the rest is discarded.
const PATCH_ROUNDS: usize = 16;

impl Run<'_> {
    /// Writes the copies the mirror sessions left for their pcap files.
    fn write_sinks(&mut self, ts: u64) -> anyhow::Result<()> {
        let Outputs {
            mirror_sinks, pool, ..
        } = &mut self.out;
        for (k, batch) in mirror_sinks.iter_mut().enumerate() {
            for pkt in batch.drain() {
                if let Some(o) = self.sinks.get_mut(k) {
                    o.writer.write(ts, pkt.frame())?;
                    o.frames += 1;
                }
                pool.put(pkt);
            }
        }
        Ok(())
    }

    /// The spanning trees on the capture clock: the BPDUs the switch trapped go to the
    /// session, the BPDUs the session sends join the frames leaving their ports.
    fn stp_io(&mut self) {
        let Outputs {
            punt, pool, ports, ..
        } = &mut self.out;
        for pkt in punt.drain() {
            self.session.stp_receive(PortId(pkt.port), pkt.frame());
            pool.put(pkt);
        }
        for (id, frame) in self.session.stp_take_bpdus() {
            let mut pkt = pool.take();
            pkt.set_frame(&frame);
            pkt.port = id.0;
            let i = usize::from(id.0);
            if ports.len() <= i {
                ports.resize_with(i + 1, || Batch::with_capacity(256));
            }
            ports[i].push(pkt);
        }
    }

    /// Hands the pending batch to the switch and writes what comes out.
    fn flush(&mut self) -> anyhow::Result<()> {
        let ts = self.batch_ts;
        if !self.batch.is_empty() {
            self.session
                .switch_mut()
                .process(ts, &mut self.batch, &mut self.out);
            self.batches += 1;
        }
        for round in 0..=PATCH_ROUNDS {
            self.stp_io();
            self.write_sinks(ts)?;
            let Outputs { ports, pool, .. } = &mut self.out;
            for (port, batch) in ports.iter_mut().enumerate() {
                for mut pkt in batch.drain() {
                    if let Some(Some(peer)) = self.patch_peer.get(port) {
                        if round < PATCH_ROUNDS {
                            pkt.port = *peer;
                            self.patched.push(pkt);
                            continue;
                        }
                    }
                    match self.outputs.get_mut(port).and_then(Option::as_mut) {
                        Some(o) => {
                            o.writer.write(ts, pkt.frame())?;
                            o.frames += 1;
                        }
                        None => self.discarded += 1,
                    }
                    pool.put(pkt);
                }
            }
            if self.patched.is_empty() {
                break;
            }
            self.session
                .switch_mut()
                .process(ts, &mut self.patched, &mut self.out);
        }
        self.shutdown_violators(ts)
    }

    /// `violation shutdown` on the capture clock: a port that counted a new
    /// `mac_limit_shutdown` drop in this batch is taken down (`link set dev P down`, as the
    /// daemon's watch does), unless it is down already.
    fn shutdown_violators(&mut self, ts: u64) -> anyhow::Result<()> {
        let sw = self.session.switch();
        let mut shut = Vec::new();
        for (id, name) in sw.port_ids() {
            let n = sw.port_counters(id).drops[DropReason::MacLimitShutdown as usize];
            let i = usize::from(id.0);
            if self.shutdown_seen.len() <= i {
                self.shutdown_seen.resize(i + 1, 0);
            }
            if n > self.shutdown_seen[i] {
                self.shutdown_seen[i] = n;
                if sw.port_settings(id).up {
                    shut.push(name.to_owned());
                }
            }
        }
        for name in shut {
            self.session
                .execute_line(
                    &format!("link set dev {name} down"),
                    OutputOptions::default(),
                )
                .with_context(|| format!("violation shutdown of {name}"))?;
            self.shut.push((name, ts));
        }
        Ok(())
    }
}

struct SummaryInput<'a> {
    session: &'a Session,
    shown: &'a str,
    inputs: &'a [Input],
    args: &'a Args,
    total: u64,
    span: Option<(u64, u64)>,
    batches: u64,
    written: &'a [(String, u64)],
    discarded: u64,
    /// Ports taken down by `violation shutdown`, with the capture time.
    shut: &'a [(String, u64)],
}

/// Writes `bytes` to a new file at `path` (mode 0600): whatever lies at the name (a file, a
/// symbolic or hard link) is unlinked first and the file is created with `O_EXCL` and
/// `O_NOFOLLOW`, so a link planted in the output directory is never written through
/// (decision 30, as the daemon's files).
fn write_afresh(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

fn secs(ns: u64) -> String {
    format!("{}.{:06}", ns / NS_PER_SEC, (ns % NS_PER_SEC) / 1000)
}

fn summary(s: &SummaryInput<'_>) -> String {
    use std::fmt::Write;
    let sw = s.session.switch();
    let mut out = String::from(s.shown);
    let span = match s.span {
        Some((a, b)) => format!(", capture time {} to {}", secs(a), secs(b)),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "replayed {} frames from {} inputs in {} batches{span}",
        s.total,
        s.inputs.len(),
        s.batches
    );
    let _ = writeln!(
        out,
        "{:<16}{:>10}{:>10}{:>10}  drops",
        "port", "in", "rx", "tx"
    );
    for (id, name) in sw.port_ids() {
        let c = sw.port_counters(id);
        let fed: u64 = s
            .inputs
            .iter()
            .filter(|i| i.port == id)
            .map(|i| i.frames)
            .sum();
        let drops = drop_words(&c.drops);
        let drops = if drops.is_empty() {
            "-".to_string()
        } else {
            drops.join(", ")
        };
        let _ = writeln!(
            out,
            "{name:<16}{fed:>10}{:>10}{:>10}  {drops}",
            c.rx_frames, c.tx_frames
        );
    }
    if sw.unknown_port_drops() != 0 {
        let _ = writeln!(out, "unknown_port_drops {}", sw.unknown_port_drops());
    }
    for (name, ts) in s.shut {
        let _ = writeln!(
            out,
            "port {name} taken down at {} (violation shutdown: a new source over its \
             fdb_max_learned in a VLAN)",
            secs(*ts)
        );
    }
    if s.discarded != 0 {
        let _ = writeln!(
            out,
            "{} frames for non-pcap ports were discarded",
            s.discarded
        );
    }
    let dir = &s.args.out;
    let files: Vec<String> = s
        .written
        .iter()
        .map(|(n, f)| format!("{n} ({f})"))
        .collect();
    let _ = writeln!(
        out,
        "wrote {}: {}, fdb.json, stats.json",
        show_dir(dir),
        files.join(", ")
    );
    out
}

fn show_dir(p: &Path) -> String {
    let s = p.display().to_string();
    if s.ends_with('/') {
        s
    } else {
        s + "/"
    }
}
