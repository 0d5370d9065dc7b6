//! Pcap files of `mirror … dst pcap FILE` sessions in the daemon: `--pcap-dir DIR/FILE`.
//!
//! The core leaves each session's copies in `Outputs::mirror_sinks[k]` (k: the plan's sink
//! index, [`Plan::mirror_sinks`]); the worker that forwarded them writes them here, stamped with
//! the wall clock, under one mutex per file (one lock per batch, not per frame: a debugging
//! path, as the pcap port is). The control thread opens a file when a session asks for it
//! (refused without `--pcap-dir`; FILE is a plain name the switch checked, opened without
//! following a symbolic link), hands the workers the files by sink index with each new plan,
//! flushes every file once a second (so `tcpdump -r` sees the frames so far), and finishes a
//! file once no worker can write to it any more.

use qbridge_bridge::{Outputs, Plan};
use qbridge_io::pcap::{FileAccess, PcapWriter};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One open mirror file.
#[derive(Debug)]
pub(crate) struct MirrorSink {
    pub file: String,
    writer: Mutex<Option<PcapWriter>>,
}

/// The files of a plan's sinks, by sink index (`None`: not open, copies are counted as
/// `tx_error`).
pub(crate) type Sinks = Arc<[Option<Arc<MirrorSink>>]>;

impl MirrorSink {
    pub fn open(dir: &Path, file: &str, access: FileAccess) -> Result<MirrorSink, String> {
        let w = PcapWriter::create_in(dir, file, access)
            .map_err(|e| format!("mirror pcap {file}: {e}"))?;
        Ok(MirrorSink {
            file: file.to_owned(),
            writer: Mutex::new(Some(w)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PcapWriter>> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        if let Some(w) = self.lock().as_mut() {
            if let Err(e) = w.flush() {
                tracing::warn!("{e}");
            }
        }
    }

    /// Flushes and closes the file; later writes count as `tx_error`.
    pub fn finish(&self) {
        if let Some(w) = self.lock().take() {
            if let Err(e) = w.finish() {
                tracing::warn!("{e}");
            }
        }
    }
}

fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Writes the copies `out` holds for the plan's pcap sinks and returns their buffers to the
/// pool; copies that cannot be written are counted on their session as `tx_error`.
pub(crate) fn write_sinks(plan: &Plan, worker: usize, sinks: &Sinks, out: &mut Outputs) {
    let Outputs {
        mirror_sinks, pool, ..
    } = out;
    let mut now = None;
    for (k, batch) in mirror_sinks.iter_mut().enumerate() {
        if batch.is_empty() {
            continue;
        }
        let ts = *now.get_or_insert_with(wall_clock_ns);
        let mut failed = 0u64;
        match sinks.get(k).and_then(Option::as_ref) {
            Some(sink) => {
                let mut w = sink.lock();
                for pkt in batch.pkts.iter() {
                    let ok = match w.as_mut() {
                        Some(w) => w.write(ts, pkt.frame()).is_ok(),
                        None => false,
                    };
                    failed += u64::from(!ok);
                }
            }
            None => failed = batch.len() as u64,
        }
        if failed != 0 {
            plan.count_mirror_sink_error(k, worker, failed);
        }
        pool.put_all(batch);
    }
}
