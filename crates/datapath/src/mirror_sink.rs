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
//!
//! **A failing file costs nothing.** When a write fails (a full disk, an I/O error), the sink
//! is marked failing: workers then count its copies as the session's `tx_error` (not in its
//! `frames`/`bytes`) after one relaxed load, without taking the lock or making a system call,
//! and the frames they forward are not slowed by the file. The control thread's once-a-second
//! flush is the retry: when it writes the buffer out, the sink is writable again. One warning
//! per failure and one line when it recovers. The file keeps whole records (the pcap writer
//! buffers a record whole or not at all); the copies in between are missing from it.

use qbridge_bridge::{Outputs, Plan};
use qbridge_io::pcap::{FileAccess, PcapWriter};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// One open mirror file.
#[derive(Debug)]
pub(crate) struct MirrorSink {
    pub file: String,
    writer: Mutex<Option<PcapWriter>>,
    /// A write failed and the once-a-second flush has not succeeded since: copies are not
    /// written (see the module documentation).
    failing: AtomicBool,
}

/// The files of a plan's sinks, by sink index (`None`: not open, copies are counted as
/// `tx_error`).
pub(crate) type Sinks = Arc<[Option<Arc<MirrorSink>>]>;

impl MirrorSink {
    pub fn open(dir: &Path, file: &str, access: FileAccess) -> Result<MirrorSink, String> {
        let w = PcapWriter::create_in(dir, file, access)
            .map_err(|e| format!("mirror pcap {file}: {e}"))?;
        Ok(MirrorSink::with_writer(file, w))
    }

    fn with_writer(file: &str, w: PcapWriter) -> MirrorSink {
        MirrorSink {
            file: file.to_owned(),
            writer: Mutex::new(Some(w)),
            failing: AtomicBool::new(false),
        }
    }

    /// Whether the sink is failing (writes stopped until a flush succeeds).
    pub fn failing(&self) -> bool {
        self.failing.load(Relaxed)
    }

    /// Marks the sink failing after `e`; warns once per failure.
    fn fail(&self, e: &dyn std::fmt::Display) {
        if !self.failing.swap(true, Relaxed) {
            tracing::warn!(
                "mirror pcap {}: {e}; its copies are counted as tx_error until a write succeeds \
                 (retried once a second)",
                self.file
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PcapWriter>> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes out what is buffered.
    /// The retry of a failing sink.
    pub fn flush(&self) {
        if let Some(w) = self.lock().as_mut() {
            match w.flush() {
                Ok(()) => {
                    if self.failing.swap(false, Relaxed) {
                        tracing::info!("mirror pcap {}: writable again", self.file);
                    }
                }
                Err(e) => self.fail(&e),
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
/// pool; copies that cannot be written, or that go to a failing sink, are counted on their
/// session as `tx_error` instead of `frames`/`bytes`.
pub(crate) fn write_sinks(plan: &Plan, worker: usize, sinks: &Sinks, out: &mut Outputs) {
    let Outputs {
        mirror_sinks, pool, ..
    } = out;
    let mut now = None;
    for (k, batch) in mirror_sinks.iter_mut().enumerate() {
        if batch.is_empty() {
            continue;
        }
        let mut written = 0usize;
        match sinks.get(k).and_then(Option::as_ref) {
            Some(sink) if !sink.failing() => {
                let ts = *now.get_or_insert_with(wall_clock_ns);
                let mut w = sink.lock();
                for pkt in batch.pkts.iter() {
                    let r = match w.as_mut() {
                        Some(w) => w.write(ts, pkt.frame()),
                        None => break,
                    };
                    if let Err(e) = r {
                        sink.fail(&e);
                        break;
                    }
                    written += 1;
                }
            }
            _ => {}
        }
        if written < batch.len() {
            let failed = &batch.pkts[written..];
            let bytes = failed.iter().map(|p| p.len() as u64).sum();
            plan.count_mirror_sink_error(k, worker, failed.len() as u64, bytes);
        }
        pool.put_all(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_bridge::DropReason;
    use qbridge_control::{OutputOptions, Session};
    use qbridge_packet::{Batch, PacketBuf};

    /// A frame from port p1 (id 0), 60 bytes.
    fn frame() -> PacketBuf {
        let mut f = vec![0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa, 0x08, 0x00];
        f.resize(60, 0);
        let mut p = PacketBuf::default();
        p.set_frame(&f);
        p
    }

    /// Write system calls this thread made (`syscw` of `/proc/thread-self/io`).
    fn write_syscalls() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("syscw: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }

    /// A sink whose disk is full (`/dev/full`: every write fails with `ENOSPC`): after the
    /// first failed write no worker touches the file again until the once-a-second flush (the
    /// retry), and every copy is `tx_error`, none counted as sent.
    #[test]
    fn a_full_sink_stops_writing_and_counts_copies_as_tx_error() {
        let mut s = Session::new();
        s.execute_batch(
            "link add p1 type pcap\nlink add p2 type pcap\n\
             mirror add m src p1 direction rx dst pcap m.pcap\n",
            OutputOptions::default(),
        )
        .unwrap();
        let plan = s.switch_mut().plan();
        let w = PcapWriter::create(Path::new("/dev/full")).unwrap();
        let sink = Arc::new(MirrorSink::with_writer("m.pcap", w));
        let sinks: Sinks = vec![Some(sink.clone())].into();
        let mut worker = qbridge_bridge::Forwarder::new(0);
        let mut out = Outputs::new();
        let syscalls0 = write_syscalls();
        const BATCHES: u64 = 2000;
        const BATCH: u64 = 32;
        for _ in 0..BATCHES {
            let mut rx = Batch::default();
            for _ in 0..BATCH {
                rx.push(frame());
            }
            worker.process(&plan, 1, &mut rx, &mut out);
            write_sinks(&plan, 0, &sinks, &mut out);
            for b in out.ports.iter_mut() {
                let mut b = std::mem::take(b);
                out.pool.put_all(&mut b);
            }
        }
        let syscalls = write_syscalls() - syscalls0;
        assert!(sink.failing());
        let c = s.switch().mirror_counters("m").unwrap();
        // Sent: only the copies the writer's buffer took (its 256 KiB, 76 bytes a record,
        // waiting for the retry); the rest are tx_error.
        let buffered = (256 * 1024 + 16) / 76;
        assert!(c.frames <= buffered, "failed copies are not sent: {c:?}");
        assert_eq!(c.bytes, c.frames * 60, "{c:?}");
        assert_eq!(
            c.drops[DropReason::TxError as usize] + c.frames,
            BATCHES * BATCH,
            "{c:?}"
        );
        // The writes that fill the buffer cost none; then one failed write, and no more.
        eprintln!(
            "{syscalls} write system calls for {} copies",
            BATCHES * BATCH
        );
        assert!(syscalls <= 2, "{syscalls} write system calls");
        sink.flush();
        assert!(sink.failing(), "/dev/full stays full");
    }

    /// A real full disk (a 512 KiB tmpfs mounted for the test; root only): the sink stops at
    /// the first failed write, the once-a-second flush that finds room again makes it
    /// writable, and the file then holds whole records only, exactly the copies counted as
    /// sent.
    #[test]
    fn a_sink_on_a_full_disk_recovers_when_there_is_room_again() {
        let dir = std::env::temp_dir().join(format!("qbridge-mirror-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            if std::env::var("QBRIDGE_REQUIRE_NETNS").is_ok_and(|v| !v.is_empty() && v != "0") {
                panic!("cannot mount a tmpfs (QBRIDGE_REQUIRE_NETNS is set)");
            }
            eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
            return;
        }
        struct Unmount(std::path::PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
                let _ = std::fs::remove_dir(&self.0);
            }
        }
        let _guard = Unmount(dir.clone());
        // Three quarters of the disk taken by something else.
        std::fs::write(dir.join("filler"), vec![0u8; 384 * 1024]).unwrap();

        let mut s = Session::new();
        s.execute_batch(
            "link add p1 type pcap\nlink add p2 type pcap\n\
             mirror add m src p1 direction rx dst pcap m.pcap\n",
            OutputOptions::default(),
        )
        .unwrap();
        let plan = s.switch_mut().plan();
        let sink = Arc::new(MirrorSink::open(&dir, "m.pcap", FileAccess::default()).unwrap());
        let sinks: Sinks = vec![Some(sink.clone())].into();
        let mut worker = qbridge_bridge::Forwarder::new(0);
        let mut out = Outputs::new();
        let mut send = |batches: usize| {
            for _ in 0..batches {
                let mut rx = Batch::default();
                for _ in 0..32 {
                    rx.push(frame());
                }
                worker.process(&plan, 1, &mut rx, &mut out);
                write_sinks(&plan, 0, &sinks, &mut out);
                for b in out.ports.iter_mut() {
                    let mut b = std::mem::take(b);
                    out.pool.put_all(&mut b);
                }
            }
        };
        // 8000 copies of 76 bytes: 600 KB, more than the disk has.
        send(250);
        assert!(sink.failing(), "the disk did not fill");
        sink.flush();
        assert!(sink.failing(), "still full");
        std::fs::remove_file(dir.join("filler")).unwrap();
        sink.flush();
        assert!(!sink.failing(), "room again: writable");
        send(10);
        sink.finish();
        let c = s.switch().mirror_counters("m").unwrap();
        assert_eq!(
            c.frames + c.drops[DropReason::TxError as usize],
            260 * 32,
            "{c:?}"
        );
        let mut r = qbridge_io::pcap::PcapReader::open(&dir.join("m.pcap")).unwrap();
        let mut records = 0u64;
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(rec.data.len(), 60);
            records += 1;
        }
        eprintln!("{records} records written, {c:?}");
        assert_eq!(
            records, c.frames,
            "every copy counted as sent is in the file, whole"
        );
    }
}
