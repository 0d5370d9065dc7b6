//! Transmit: one `sendmmsg(2)` per batch (each message a virtio-net header and the frame),
//! and [`settle`]: every frame counted once by the errno its send got, super-frames the
//! kernel refused to segment (qdisc bypass) handed back to the caller with their tag depth
//! remembered for [`REFUSAL_TICKS`] refreshes. Its `unsafe` is the `sendmmsg` call and the
//! scratch arrays' pointers, valid only during one call.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

use qbridge_packet::{Batch, BufPool};

use super::vnet::{meta_to_vnet, VNET_HDR_LEN};
use super::AfPacketPort;
use crate::port::{kernel_tag_depth, TxReport};
use crate::sys;
use crate::IoError;

/// Refreshes ([`AfPacketPort::refresh_offloads`], once a second in the daemon) during which a
/// tag depth whose super-frame the kernel refused stays marked in
/// [`DeviceOffloads::refused_tags`]; then the direct path is tried again, so a feature change
/// or a passing drop by a veth's busy peer (also `ENOBUFS`) does not pin that depth to
/// software segmentation for good.
pub const REFUSAL_TICKS: u8 = 10;

/// Scratch arrays for `sendmmsg`, kept between bursts so transmit does not allocate. They hold
/// pointers only during one `tx_burst` call.
#[derive(Default)]
pub(super) struct TxScratch {
    hdrs: Vec<[u8; VNET_HDR_LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
    /// Per frame of the burst: 0 sent, else the errno its send failed with.
    errnos: Vec<i32>,
}

impl std::fmt::Debug for TxScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxScratch")
            .field("capacity", &self.msgs.capacity())
            .finish()
    }
}

// SAFETY: the raw pointers in `iovs`/`msgs` are only meaningful inside one `tx_burst` call,
// which cleared and rebuilt them from buffers it borrows; between calls they are dead values.
unsafe impl Send for TxScratch {}

impl AfPacketPort {
    /// One `sendmmsg` pass over `batch` (more calls only after a frame fails), then every
    /// frame settled by its result (see [`settle`]). A frame that fails does not stop the
    /// ones after it, except `EAGAIN` (the socket buffer is full: the rest would fail the
    /// same way) and a link error.
    pub(super) fn send(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: Option<&mut Batch>,
    ) -> Result<TxReport, IoError> {
        let n = batch.len();
        if n == 0 {
            return Ok(TxReport::default());
        }
        let vnet = self.cfg.vnet_hdr;
        let tx = &mut self.tx;
        tx.hdrs.clear();
        tx.iovs.clear();
        tx.msgs.clear();
        tx.errnos.clear();
        tx.errnos.resize(n, 0);
        for p in batch.iter() {
            tx.hdrs.push(meta_to_vnet(&p.offload));
        }
        for (p, h) in batch.iter().zip(&tx.hdrs) {
            let hdr_iov = libc::iovec {
                iov_base: h.as_ptr() as *mut _,
                iov_len: VNET_HDR_LEN,
            };
            let frame = p.frame();
            let frame_iov = libc::iovec {
                iov_base: frame.as_ptr() as *mut _,
                iov_len: frame.len(),
            };
            tx.iovs.push(if vnet {
                [hdr_iov, frame_iov]
            } else {
                [frame_iov, frame_iov]
            });
        }
        for iov in tx.iovs.iter_mut() {
            // SAFETY: msghdr is plain old data; all-zero is a valid (empty) value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = if vnet { 2 } else { 1 };
            tx.msgs.push(m);
        }
        let fd = self.fd.as_raw_fd();
        let mut i = 0;
        let mut link_err = None;
        while i < n {
            // SAFETY: `msgs[i..]` are initialised mmsghdrs whose iovecs point into `hdrs` and
            // into the frames of `batch`, all alive and unmoved until this loop ends; the
            // kernel only reads them (and writes `msg_len`).
            let rc = unsafe {
                libc::sendmmsg(fd, tx.msgs.as_mut_ptr().add(i), (n - i) as libc::c_uint, 0)
            };
            if rc > 0 {
                i += rc as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            if code == libc::EINTR {
                continue;
            }
            if code == libc::EAGAIN || sys::is_link_errno(&e) {
                tx.errnos[i..].fill(code);
                if code != libc::EAGAIN {
                    link_err = Some(e);
                }
                break;
            }
            // ENOBUFS, EMSGSIZE, EINVAL, ...: this frame only; go on with the next.
            tx.errnos[i] = code;
            i += 1;
        }
        tx.msgs.clear();
        tx.iovs.clear();
        // Only a qdisc-bypass socket's ENOBUFS on a super-frame means "segment it yourself";
        // through the qdisc the kernel segments, and ENOBUFS is a drop.
        let bypass = self.cfg.qdisc_bypass && vnet;
        let report = settle(
            batch,
            &tx.errnos,
            pool,
            bypass.then_some(&mut self.refused_ticks),
            refused,
        );
        if report.refused > 0 || (bypass && self.refused_mask() != self.offloads.refused_tags) {
            self.update_caps();
        }
        match link_err {
            Some(source) => Err(IoError::LinkDown {
                ifname: self.cfg.ifname.clone(),
                source,
            }),
            None => Ok(report),
        }
    }
}

/// Drains a sent batch: frame `i` was sent when `errnos[i]` is 0, else its send failed with
/// that errno. Every buffer goes back to `pool`, except refused super-frames (below), and
/// every frame is counted once in the report.
///
/// `refusals` is given for a qdisc-bypass socket with virtio-net headers: there `ENOBUFS` on
/// a super-frame is the kernel refusing to segment it in software, so its tag depth is marked
/// for [`REFUSAL_TICKS`] refreshes, and the frame moves to `refused` when the caller takes
/// refused frames back (else it is counted as dropped by the kernel). `ENOBUFS` on any other
/// frame is a drop by the device or its peer.
fn settle(
    batch: &mut Batch,
    errnos: &[i32],
    pool: &mut BufPool,
    mut refusals: Option<&mut [u8; 8]>,
    refused: Option<&mut Batch>,
) -> TxReport {
    let mut r = TxReport::default();
    let code = |i: usize| errnos.get(i).copied().unwrap_or(libc::EIO);
    let takes_refused = refusals.is_some() && refused.is_some();
    for (i, p) in batch.iter().enumerate() {
        match code(i) {
            0 => r.sent += 1,
            libc::EAGAIN => r.queue_full += 1,
            libc::ENOBUFS if p.offload.is_gso() && refusals.is_some() => {
                if let Some(ticks) = refusals.as_deref_mut() {
                    ticks[kernel_tag_depth(p.frame()).min(7)] = REFUSAL_TICKS;
                }
                if takes_refused {
                    r.refused += 1;
                } else {
                    r.kernel_drop += 1;
                }
            }
            libc::ENOBUFS => r.kernel_drop += 1,
            libc::EMSGSIZE => r.too_long += 1,
            _ => r.error += 1,
        }
    }
    match refused {
        // Refused super-frames move to the caller, in order; every other buffer goes back.
        Some(out) if r.refused > 0 => {
            for (i, p) in batch.drain().enumerate() {
                if code(i) == libc::ENOBUFS && p.offload.is_gso() {
                    out.push(p);
                } else {
                    pool.put(p);
                }
            }
        }
        _ => pool.put_all(batch),
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_packet::PacketBuf;
    use qbridge_wire::virtio::GsoType;

    fn gso_frame(tags: &[u16]) -> PacketBuf {
        let mut f = vec![0u8; 12];
        for t in tags {
            f.extend(t.to_be_bytes());
            f.extend([0, 7]);
        }
        f.extend([0x08, 0x00]);
        f.resize(f.len() + 3000, 0);
        let mut p = PacketBuf::from_frame(&f);
        p.offload.gso_type = GsoType::TcpV4.raw();
        p.offload.gso_size = 1448;
        p
    }

    /// The seam between the syscall and the accounting: ENOBUFS on a super-frame of a
    /// qdisc-bypass socket hands the frame back and marks its depth; on a plain frame, or
    /// without bypass, it is a drop; nothing stops the frames after it.
    #[test]
    fn settle_hands_back_refused_super_frames() {
        let mut pool = BufPool::new(16);
        let make = || {
            let mut b = Batch::default();
            b.push(gso_frame(&[0x88a8, 0x8100]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b.push(gso_frame(&[0x8100]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b.push(PacketBuf::from_frame(&[0u8; 60]));
            b
        };
        let errnos = [
            libc::ENOBUFS,
            libc::ENOBUFS,
            0,
            libc::EMSGSIZE,
            libc::EAGAIN,
        ];
        let mut ticks = [0u8; 8];
        let mut refused = Batch::default();
        let mut batch = make();
        let r = settle(
            &mut batch,
            &errnos,
            &mut pool,
            Some(&mut ticks),
            Some(&mut refused),
        );
        assert_eq!(
            r,
            TxReport {
                sent: 1,
                queue_full: 1,
                kernel_drop: 1,
                too_long: 1,
                error: 0,
                refused: 1,
            }
        );
        assert!(batch.is_empty());
        assert_eq!(refused.len(), 1);
        assert_eq!(kernel_tag_depth(refused.pkts[0].frame()), 2);
        assert_eq!(ticks, [0, 0, REFUSAL_TICKS, 0, 0, 0, 0, 0]);
        assert_eq!(r.outcome().total(), 5);

        // A caller that takes nothing back (plain tx_burst): counted as a kernel drop, depth
        // still remembered.
        let mut ticks = [0u8; 8];
        let mut batch = make();
        let r = settle(&mut batch, &errnos, &mut pool, Some(&mut ticks), None);
        assert_eq!((r.refused, r.kernel_drop), (0, 2));
        assert_eq!(ticks[2], REFUSAL_TICKS);

        // Without qdisc bypass the kernel segments itself: ENOBUFS is a drop.
        let mut batch = make();
        let mut refused = Batch::default();
        let r = settle(&mut batch, &errnos, &mut pool, None, Some(&mut refused));
        assert_eq!((r.refused, r.kernel_drop), (0, 2));
        assert!(refused.is_empty());
    }
}
