//! [`MemPort`]: an in-memory port, the test double for every live backend.
//!
//! Frames to receive are queued with [`MemPort::inject`]; frames transmitted are copied into
//! [`MemPort::sent`] (frame bytes and offload metadata) and their buffers go back to the pool,
//! exactly as a live port would. A transmit capacity and a link-down switch let tests drive the
//! caller's `tx_queue_full` and link-loss paths; [`MemPort::refuse_super_frames`] plays a
//! kernel that refuses super-frames it would have to segment (an AF_PACKET qdisc-bypass socket
//! on a device without TSO for them), for the caller's fallback to software segmentation.
//! Allocates (it is a test tool); no unsafe.

use std::collections::VecDeque;

use qbridge_packet::{Batch, BufPool, OffloadMeta};

use crate::port::{recycle, Port, PortCaps, TxOutcome, TxReport};
use crate::IoError;

/// A frame as it entered or left a [`MemPort`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemFrame {
    pub data: Vec<u8>,
    pub offload: OffloadMeta,
    /// Receive timestamp handed to the caller (rx side only).
    pub time_ns: u64,
}

/// An in-memory port: a queue of frames in, a `Vec` of frames out.
#[derive(Debug)]
pub struct MemPort {
    name: String,
    caps: PortCaps,
    rx: VecDeque<MemFrame>,
    /// Everything transmitted, in order.
    pub sent: Vec<MemFrame>,
    /// Frames accepted per `tx_burst` before the rest count as `queue_full`; `None`: no limit.
    pub tx_capacity: Option<usize>,
    /// Super-frames are refused whole, as a qdisc-bypass AF_PACKET socket's kernel refuses
    /// those its device would have to segment: handed back by `tx_burst_report`, counted as
    /// dropped by the kernel by `tx_burst`. Counts how many were refused.
    pub refuse_super_frames: bool,
    pub refused_super_frames: u64,
    link_down: bool,
}

impl MemPort {
    /// A port that takes everything (virtio-net header, TSO, checksum offload, 64 KB frames).
    pub fn new(name: &str) -> MemPort {
        MemPort::with_caps(
            name,
            PortCaps {
                vnet_hdr: true,
                tso: true,
                csum: true,
                max_frame: 65_535 + 18,
                device: None,
            },
        )
    }

    pub fn with_caps(name: &str, caps: PortCaps) -> MemPort {
        MemPort {
            name: name.to_owned(),
            caps,
            rx: VecDeque::new(),
            sent: Vec::new(),
            tx_capacity: None,
            refuse_super_frames: false,
            refused_super_frames: 0,
            link_down: false,
        }
    }

    /// Queues a frame for a later `rx_burst`.
    pub fn inject(&mut self, frame: &[u8]) {
        self.rx.push_back(MemFrame {
            data: frame.to_vec(),
            ..MemFrame::default()
        });
    }

    /// Queues a frame with offload metadata and a timestamp.
    pub fn inject_frame(&mut self, frame: MemFrame) {
        self.rx.push_back(frame);
    }

    /// Frames still waiting to be received.
    pub fn pending_rx(&self) -> usize {
        self.rx.len()
    }

    /// Takes the transmitted frames, leaving `sent` empty.
    pub fn take_sent(&mut self) -> Vec<MemFrame> {
        std::mem::take(&mut self.sent)
    }

    /// While down, both bursts fail with [`IoError::LinkDown`], like a vanished interface.
    pub fn set_link_down(&mut self, down: bool) {
        self.link_down = down;
    }

    fn down_error(&self) -> IoError {
        IoError::LinkDown {
            ifname: self.name.clone(),
            source: std::io::Error::from_raw_os_error(libc::ENETDOWN),
        }
    }
}

impl MemPort {
    fn send(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: Option<&mut Batch>,
    ) -> Result<TxReport, IoError> {
        if self.link_down {
            recycle(batch, pool);
            return Err(self.down_error());
        }
        let mut out = TxReport::default();
        let room = self.tx_capacity.unwrap_or(usize::MAX);
        // Frames handed back to the caller (by index), moved out after the pass; every other
        // buffer goes back to the pool at once, as the live backends do.
        let mut handed_back = Vec::new();
        for (i, p) in batch.iter().enumerate() {
            if out.sent >= room {
                out.queue_full += 1;
            } else if p.offload.is_gso() && self.refuse_super_frames {
                self.refused_super_frames += 1;
                if refused.is_some() {
                    out.refused += 1;
                    handed_back.push(i);
                    continue;
                }
                out.kernel_drop += 1;
            } else if (p.offload.is_gso() && !self.caps.tso)
                || (!p.offload.is_gso() && self.caps.max_frame < p.len())
            {
                // A port with TSO takes a super-frame whole; the core already judged its
                // segments' size from the parsed headers.
                out.error += 1;
            } else {
                self.sent.push(MemFrame {
                    data: p.frame().to_vec(),
                    offload: p.offload,
                    time_ns: 0,
                });
                out.sent += 1;
            }
        }
        if let Some(r) = refused.filter(|_| !handed_back.is_empty()) {
            for (i, p) in batch.drain().enumerate() {
                if handed_back.contains(&i) {
                    r.push(p);
                } else {
                    pool.put(p);
                }
            }
        }
        pool.put_all(batch);
        Ok(out)
    }
}

impl Port for MemPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        if self.link_down {
            return Err(self.down_error());
        }
        let n = max.min(self.rx.len());
        let base = batch.len();
        pool.get_into(batch, n);
        for (p, f) in batch.pkts[base..].iter_mut().zip(self.rx.drain(..n)) {
            p.set_frame(&f.data);
            p.offload = f.offload;
            p.time_ns = f.time_ns;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        self.send(batch, pool, None).map(|r| r.outcome())
    }

    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        self.send(batch, pool, Some(refused))
    }

    fn caps(&self) -> PortCaps {
        self.caps
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn rx_pending(&self) -> bool {
        self.pending_rx() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::BackendDrops;
    use qbridge_packet::PacketBuf;
    use qbridge_wire::virtio::GsoType;

    /// What a poll loop asks of a boxed port beyond the bursts: the in-memory port has frames
    /// pending without a descriptor, and takes every other default.
    #[test]
    fn a_boxed_port_answers_the_poll_loop_with_its_defaults() {
        let mut m = MemPort::new("m0");
        let mut b: Box<dyn Port + Send> = Box::new(MemPort::new("m1"));
        assert_eq!(format!("{b:?}"), "Port { name: \"m1\", .. }");
        assert!(b.fd().is_none() && !b.rx_pending() && !b.visible_close());
        assert_eq!(b.drops(), BackendDrops::default());
        assert_eq!(b.tick().unwrap(), crate::port::Tick::default());
        b.start().unwrap();
        b.close().unwrap();
        m.inject(&[1u8; 60]);
        assert!(m.rx_pending());
    }

    fn frame(n: u8) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([2, 0, 0, 0, 0, n, 0x08, 0x00]);
        f.resize(60, n);
        f
    }

    #[test]
    fn rx_respects_max_and_appends() {
        // Batch sizes 1, N-1, N, N+1 against 4 queued frames.
        for max in [1usize, 3, 4, 5] {
            let mut port = MemPort::new("m0");
            for i in 0..4 {
                port.inject(&frame(i));
            }
            let mut pool = BufPool::new(64);
            let mut batch = Batch::with_capacity(8);
            batch.push(PacketBuf::from_frame(&frame(99)));
            let n = port.rx_burst(&mut batch, &mut pool, max).unwrap();
            assert_eq!(n, max.min(4));
            assert_eq!(batch.len(), 1 + n);
            assert_eq!(batch.pkts[0].frame(), &frame(99)[..]);
            for (i, p) in batch.pkts[1..].iter().enumerate() {
                assert_eq!(p.frame(), &frame(i as u8)[..]);
            }
            assert_eq!(port.pending_rx(), 4 - n);
        }
    }

    #[test]
    fn tx_drains_batch_and_returns_buffers() {
        let mut port = MemPort::new("m0");
        let mut pool = BufPool::new(64);
        let mut batch = Batch::with_capacity(8);
        for i in 0..5 {
            let mut p = pool.get();
            p.set_frame(&frame(i));
            batch.push(p);
        }
        port.tx_capacity = Some(3);
        let out = port.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!(
            out,
            TxOutcome {
                sent: 3,
                queue_full: 2,
                error: 0
            }
        );
        assert!(batch.is_empty());
        assert_eq!(pool.available(), 5);
        let sent = port.take_sent();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[2].data, frame(2));
    }

    #[test]
    fn tx_refuses_oversize_and_gso_without_tso() {
        let caps = PortCaps {
            vnet_hdr: false,
            tso: false,
            csum: false,
            max_frame: 1518,
            device: None,
        };
        let mut port = MemPort::with_caps("m1", caps);
        let mut pool = BufPool::new(8);
        let mut batch = Batch::default();
        batch.push(PacketBuf::from_frame(&vec![0; 1519]));
        let mut gso = PacketBuf::from_frame(&[0; 200]);
        gso.offload.gso_type = GsoType::TcpV4.raw();
        gso.offload.hdr_len = 54;
        gso.offload.gso_size = 100;
        batch.push(gso);
        batch.push(PacketBuf::from_frame(&vec![0; 1518]));
        let out = port.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!(
            out,
            TxOutcome {
                sent: 1,
                queue_full: 0,
                error: 2
            }
        );
    }

    #[test]
    fn link_down_is_reported_and_batch_still_drained() {
        let mut port = MemPort::new("m0");
        let mut pool = BufPool::new(8);
        let mut batch = Batch::default();
        batch.push(PacketBuf::from_frame(&frame(1)));
        port.set_link_down(true);
        let e = port.tx_burst(&mut batch, &mut pool).unwrap_err();
        assert!(e.is_link_down(), "{e}");
        assert!(batch.is_empty());
        assert_eq!(pool.available(), 1);
        assert!(port
            .rx_burst(&mut batch, &mut pool, 32)
            .unwrap_err()
            .is_link_down());
        port.set_link_down(false);
        port.inject(&frame(2));
        assert_eq!(port.rx_burst(&mut batch, &mut pool, 32).unwrap(), 1);
    }

    #[test]
    fn refused_super_frames_are_handed_back() {
        let mut port = MemPort::new("m2");
        port.refuse_super_frames = true;
        let mut pool = BufPool::new(8);
        let mut gso = PacketBuf::from_frame(&[0; 200]);
        gso.offload.gso_type = GsoType::TcpV4.raw();
        gso.offload.gso_size = 100;
        let mut batch = Batch::default();
        batch.push(gso.clone());
        batch.push(PacketBuf::from_frame(&frame(1)));
        let mut refused = Batch::default();
        let r = port
            .tx_burst_report(&mut batch, &mut pool, &mut refused)
            .unwrap();
        assert_eq!((r.sent, r.refused, r.dropped()), (1, 1, 0));
        assert_eq!(refused.len(), 1);
        batch.push(gso);
        let o = port.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((o.sent, o.queue_full), (0, 1));
        assert_eq!(port.refused_super_frames, 2);
    }

    #[test]
    fn offload_metadata_crosses() {
        let mut port = MemPort::new("m0");
        let meta = OffloadMeta {
            flags: 1,
            gso_type: 1,
            hdr_len: 58,
            gso_size: 1448,
            csum_start: 38,
            csum_offset: 16,
        };
        port.inject_frame(MemFrame {
            data: frame(1),
            offload: meta,
            time_ns: 42,
        });
        let mut pool = BufPool::new(8);
        let mut batch = Batch::default();
        port.rx_burst(&mut batch, &mut pool, 8).unwrap();
        assert_eq!((batch.pkts[0].offload, batch.pkts[0].time_ns), (meta, 42));
        let _ = port.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!(port.sent[0].offload, meta);
    }
}
