//! The backends a live port can have, behind one enum so the runtime can do per-kind work
//! (reopen, device MTU, namespace) while the datapath calls the batch [`Port`] interface once
//! per burst.
//!
//! - AF_PACKET ([`AfPacketPort`]) on an interface of the daemon's network namespace.
//! - TAP ([`TapPort`]), created by the daemon, optionally moved into a namespace.
//! - pcap ([`PcapPort`]): only with `--pcap-dir DIR`; writes what the switch sends on the port
//!   to `DIR/PORT.pcap` and, if `DIR/PORT.in.pcap` exists when the port opens, receives its
//!   frames once, as fast as the loop takes them. For tests and recordings without privileges;
//!   it reads records into fresh vectors (one allocation per frame), unlike the live backends.

use qbridge_io::afpacket::AfPacketPort;
use qbridge_io::pcap::{PcapReader, PcapWriter};
use qbridge_io::tap::TapPort;
use qbridge_io::{IoError, Port, PortCaps, TxOutcome};
use qbridge_packet::{Batch, BufPool};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// An open backend.
#[derive(Debug)]
pub(crate) enum Live {
    AfPacket(Box<AfPacketPort>),
    Tap(Box<TapPort>),
    Pcap(Box<PcapPort>),
}

impl Live {
    /// Frames the backend itself dropped so far, cumulative since it was opened: truncated,
    /// filtered (not for this port), short reads.
    pub fn drops(&self) -> [u64; 3] {
        match self {
            Live::AfPacket(p) => {
                let s = p.stats();
                [s.rx_truncated, s.rx_otherhost_filtered, 0]
            }
            Live::Tap(p) => [0, 0, p.stats().rx_short],
            Live::Pcap(_) => [0; 3],
        }
    }

    pub fn port(&mut self) -> &mut dyn Port {
        match self {
            Live::AfPacket(p) => p.as_mut(),
            Live::Tap(p) => p.as_mut(),
            Live::Pcap(p) => p.as_mut(),
        }
    }

    pub fn caps(&self) -> PortCaps {
        match self {
            Live::AfPacket(p) => p.caps(),
            Live::Tap(p) => p.caps(),
            Live::Pcap(p) => p.caps(),
        }
    }

    /// The descriptor to wait on, if the backend has one (pcap input has none).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Live::AfPacket(p) => Some(p.as_fd()),
            Live::Tap(p) => Some(p.as_fd()),
            Live::Pcap(_) => None,
        }
    }

    /// Frames that can be received without waiting on a descriptor (pcap input).
    pub fn rx_pending(&self) -> bool {
        match self {
            Live::Pcap(p) => p.input.is_some(),
            _ => false,
        }
    }

    /// Closes the backend, reporting what closing a file can still fail with.
    pub fn close(self) -> Result<(), IoError> {
        match self {
            Live::Pcap(p) => p.writer.finish(),
            _ => Ok(()),
        }
    }
}

/// A pcap-file port (see the module documentation).
#[derive(Debug)]
pub(crate) struct PcapPort {
    name: String,
    writer: PcapWriter,
    input: Option<PcapReader>,
}

impl PcapPort {
    pub fn open(dir: &Path, name: &str) -> Result<PcapPort, IoError> {
        let writer = PcapWriter::create(&dir.join(format!("{name}.pcap")))?;
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
                    let mut p = pool.get();
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
}
