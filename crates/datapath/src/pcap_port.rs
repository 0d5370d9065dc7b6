//! The daemon's pcap-file port (the file format itself is `qbridge_io::pcap`): only with
//! `--pcap-dir DIR`. It writes what the switch sends on the port to `DIR/PORT.pcap` and, if
//! `DIR/PORT.in.pcap` exists when the port opens, receives its frames once, as fast as the
//! worker takes them. `DIR/PORT.pcap` is created afresh (`O_EXCL | O_NOFOLLOW`, mode 0600 or
//! 0640 with `--socket-group`), never written through a link someone planted. For tests and
//! recordings without privileges; it reads records into fresh vectors (one allocation per
//! frame), unlike the live backends. One queue, shared by the workers
//! ([`crate::queue::SharedQueue`]).

use qbridge_io::pcap::{FileAccess, PcapReader, PcapWriter};
use qbridge_io::{IoError, Port, PortCaps, TxOutcome};
use qbridge_packet::{Batch, BufPool};
use std::path::Path;

/// A pcap-file port (see the module documentation).
#[derive(Debug)]
pub struct PcapPort {
    name: String,
    writer: PcapWriter,
    input: Option<PcapReader>,
}

impl PcapPort {
    /// `access`: who may read `DIR/PORT.pcap` (created afresh, never through a link).
    pub fn open(dir: &Path, name: &str, access: FileAccess) -> Result<PcapPort, IoError> {
        let writer = PcapWriter::create_in(dir, &format!("{name}.pcap"), access)?;
        let in_path = dir.join(format!("{name}.in.pcap"));
        let input = if in_path.exists() {
            Some(PcapReader::open(&in_path)?)
        } else {
            None
        };
        Ok(PcapPort {
            name: name.to_owned(),
            writer,
            input,
        })
    }
}

fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Port for PcapPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        let Some(reader) = self.input.as_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        while n < max {
            match reader.next_record() {
                Ok(Some(rec)) => {
                    let mut p = pool.take();
                    p.set_frame(&rec.data);
                    p.time_ns = rec.ts_ns;
                    batch.push(p);
                    n += 1;
                }
                Ok(None) => {
                    tracing::info!("pcap port {}: input file done", self.name);
                    self.input = None;
                    break;
                }
                Err(e) => {
                    self.input = None;
                    if n == 0 {
                        return Err(e);
                    }
                    tracing::warn!("pcap port {}: input stops: {e}", self.name);
                    break;
                }
            }
        }
        Ok(n)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        let mut out = TxOutcome::default();
        let now = wall_clock_ns();
        for p in batch.drain() {
            match self.writer.write(now, p.frame()) {
                Ok(()) => out.sent += 1,
                Err(IoError::FrameTooLong { .. }) => out.error += 1,
                Err(e) => {
                    tracing::warn!("pcap port {}: {e}", self.name);
                    out.error += 1;
                }
            }
            pool.put(p);
        }
        Ok(out)
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            vnet_hdr: false,
            tso: false,
            csum: false,
            max_frame: 262_144,
            device: None,
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn rx_pending(&self) -> bool {
        self.input.is_some()
    }

    /// The file is complete when the command that closed the port answers.
    fn visible_close(&self) -> bool {
        true
    }

    fn close(self: Box<Self>) -> Result<(), IoError> {
        self.writer.finish()
    }
}
