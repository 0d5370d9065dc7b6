//! The transmit stage, the datapath's egress side (the bridge's egress tag rewrite is another
//! thing, in `qbridge_bridge`): what happens to one port's output batch between the switch and
//! the port's transmit call. Receive coalescing (GRO) for a port that takes super-frames,
//! offload fix-up (software segmentation of super-frames the port or its device cannot take,
//! checksum completion), the burst itself, and super-frames the kernel refused whole segmented
//! and resent at once: never dropped.

use qbridge_io::{IoError, Port, PortCaps, TxReport};
use qbridge_offload::{Gro, GroLimits};
use qbridge_packet::{Batch, BufPool};
use qbridge_wire::Tpid;

/// A worker's reusable state for [`transmit`]: scratch batches and the GRO table. After
/// warm-up nothing in it allocates.
#[derive(Debug, Default)]
pub struct TransmitScratch {
    fix: Batch,
    refused: Batch,
    gro: Gro,
}

/// What [`transmit`] did with one port's batch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransmitReport {
    /// The port's transmit results, summed over both passes.
    pub tx: TxReport,
    /// Super-frames segmented in software (the port or its device could not take them, or the
    /// kernel refused them).
    pub sw_gso: u64,
    /// Of `sw_gso`: super-frames the kernel refused whole first.
    pub gso_refused: u64,
    /// Frames that could not be segmented or checksummed (dropped, `tx_error`).
    pub fixup_errors: usize,
    /// GRO: super-frames made, and the segments merged into them.
    pub gro_frames: u64,
    pub gro_segments: u64,
}

/// The transmit stage of one port, on a batch the switch produced for it:
///
/// 0. receive coalescing: for a port that takes every super-frame whole and leaves checksums
///    to the kernel ([`PortCaps::takes_everything`]: a TAP, an AF_PACKET socket whose device
///    has TSO), consecutive TCP segments of one flow in the batch are merged into super-frames
///    ([`Gro`], any tag depth, checksums verified), so a segmented sender still reaches the
///    host as super-frames;
/// 1. offload fix-up: a TCP super-frame the port cannot take whole (no TSO, or its device
///    lacks TSO for the frame's IP version or tag depth, see [`PortCaps::takes_super_frame`])
///    is segmented in software, at any tag depth; a frame left to checksum (`NEEDS_CSUM`) for
///    a port without checksum offload gets its checksum completed;
/// 2. one [`Port::tx_burst_report`];
/// 3. super-frames the kernel refused whole anyway (see [`TxReport::refused`]) are segmented
///    and sent at once, in a second burst: never dropped.
///
/// `batch` is drained. The error is the port's failure, if it failed (its frames are counted
/// as `error`).
pub fn transmit(
    port: &mut dyn Port,
    caps: PortCaps,
    is_tag: &dyn Fn(Tpid) -> bool,
    batch: &mut Batch,
    pool: &mut BufPool,
    scratch: &mut TransmitScratch,
) -> (TransmitReport, Option<IoError>) {
    let TransmitScratch { fix, refused, gro } = scratch;
    let mut r = TransmitReport::default();
    if caps.takes_everything() {
        // Nothing to coalesce unless two frames are not super-frames already (a TSO sender's
        // stream is all super-frames): a look at the metadata, not the headers.
        let plain = batch
            .pkts
            .iter()
            .filter(|p| !p.offload.is_gso())
            .take(2)
            .count();
        if plain == 2 {
            let g = gro.coalesce(batch, pool, is_tag, GroLimits::default());
            r.gro_frames = g.super_frames;
            r.gro_segments = g.segments_merged;
        }
    } else {
        for mut p in batch.pkts.drain(..) {
            if !caps.takes_super_frame(p.frame(), &p.offload) {
                match qbridge_offload::segment(&p, is_tag, pool, &mut fix.pkts) {
                    Ok(_) => r.sw_gso += 1,
                    Err(e) => {
                        tracing::debug!("port {}: cannot segment a frame: {e}", port.name());
                        r.fixup_errors += 1;
                    }
                }
                pool.put(p);
                continue;
            }
            if p.offload.needs_csum() && !caps.csum {
                if let Err(e) = qbridge_offload::complete_checksum(&mut p, is_tag) {
                    tracing::debug!("port {}: cannot complete a checksum: {e}", port.name());
                    r.fixup_errors += 1;
                    pool.put(p);
                    continue;
                }
            }
            fix.push(p);
        }
        std::mem::swap(batch, fix);
    }
    for pass in 0..2 {
        let n = batch.len();
        match port.tx_burst_report(batch, pool, refused) {
            Ok(t) => add_report(&mut r.tx, &t),
            Err(e) => {
                r.tx.error += n;
                pool.put_all(refused);
                return (r, Some(e));
            }
        }
        if refused.is_empty() {
            break;
        }
        if pass == 1 {
            // Segments are not super-frames; a port that refuses them anyway drops them.
            r.tx.kernel_drop += refused.len();
            pool.put_all(refused);
            break;
        }
        for p in refused.drain() {
            match qbridge_offload::segment(&p, is_tag, pool, &mut batch.pkts) {
                Ok(_) => {
                    r.sw_gso += 1;
                    r.gso_refused += 1;
                }
                Err(e) => {
                    tracing::debug!("port {}: cannot segment a frame: {e}", port.name());
                    r.fixup_errors += 1;
                }
            }
            pool.put(p);
        }
    }
    (r, None)
}

fn add_report(sum: &mut TxReport, t: &TxReport) {
    sum.sent += t.sent;
    sum.queue_full += t.queue_full;
    sum.kernel_drop += t.kernel_drop;
    sum.too_long += t.too_long;
    sum.error += t.error;
    sum.refused += t.refused;
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use qbridge_io::{DeviceOffloads, MemPort};
    use qbridge_packet::{OffloadMeta, PacketBuf};
    use qbridge_wire::virtio::{GsoType, F_NEEDS_CSUM};
    use qbridge_wire::{checksum, ipv4, parse_headers, tcp, IpProtocol};

    const PAYLOAD: usize = 20_000;
    const MSS: u16 = 1448;

    /// A TCP/IPv4 super-frame as a kernel hands it over: C-tag and S-tag, `NEEDS_CSUM`, the
    /// TCP checksum field holding the pseudo-header sum.
    fn super_frame() -> PacketBuf {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend([0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 10, 0x08, 0x00]);
        let l3 = f.len();
        let ip = ipv4::Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            protocol: IpProtocol::Tcp,
            payload_len: 20 + PAYLOAD,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
            more_frags: false,
            frag_offset_bytes: 0,
            options: Default::default(),
        };
        f.resize(l3 + 40 + PAYLOAD, 0);
        ip.emit(&mut f[l3..]).unwrap();
        let l4 = l3 + 20;
        f[l4 + 12] = 0x50;
        f[l4 + 13] = 0x18;
        for (i, b) in f[l4 + 20..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let pseudo = checksum::pseudo_header_v4(
            ip.src_addr,
            ip.dst_addr,
            IpProtocol::Tcp,
            (20 + PAYLOAD) as u32,
        );
        let off = l4 + tcp::CHECKSUM_OFFSET;
        f[off..off + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let mut p = PacketBuf::from_frame(&f);
        p.offload = OffloadMeta {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4.raw(),
            hdr_len: (l4 + 20) as u16,
            gso_size: MSS,
            csum_start: l4 as u16,
            csum_offset: tcp::CHECKSUM_OFFSET as u16,
        };
        p
    }

    fn vnet_caps(device: Option<DeviceOffloads>) -> PortCaps {
        PortCaps {
            vnet_hdr: true,
            tso: true,
            csum: true,
            max_frame: 1522,
            device,
        }
    }

    const ALL: DeviceOffloads = DeviceOffloads {
        tso4: true,
        tso6: true,
        tso_ecn: true,
        sg: true,
        csum4: true,
        csum6: true,
        refused_tags: 0,
    };

    /// Runs one batch of one super-frame and two plain frames through [`transmit`]; returns the
    /// report and what the port sent.
    fn run(port: &mut MemPort) -> (TransmitReport, Vec<qbridge_io::MemFrame>) {
        let mut pool = BufPool::new(64);
        let mut scratch = TransmitScratch::default();
        let mut batch = Batch::default();
        batch.push(PacketBuf::from_frame(&[0u8; 60]));
        batch.push(super_frame());
        batch.push(PacketBuf::from_frame(&[1u8; 60]));
        let caps = port.caps();
        let is_tag = |t: Tpid| t.is_well_known();
        let (r, err) = transmit(port, caps, &is_tag, &mut batch, &mut pool, &mut scratch);
        assert!(err.is_none());
        assert!(batch.is_empty() && scratch.fix.is_empty() && scratch.refused.is_empty());
        (r, port.take_sent())
    }

    /// Every TCP segment sent is at most MSS, carries both tags and valid checksums, and the
    /// payloads are the super-frame's, in order.
    fn assert_segments(sent: &[qbridge_io::MemFrame]) {
        let mut data = Vec::new();
        let mut segments = 0;
        for f in sent {
            let Ok(h) = parse_headers(&f.data, Tpid::is_well_known) else {
                continue;
            };
            if h.l4_proto != Some(IpProtocol::Tcp) {
                continue;
            }
            assert!(!f.offload.is_gso(), "a super-frame was sent");
            assert_eq!(h.tags.as_slice().len(), 2);
            let ip = ipv4::Packet::new_checked(&f.data[h.l3_offset..h.l3_end]).unwrap();
            assert!(ip.verify_checksum());
            let t = tcp::Packet::new_checked(ip.payload()).unwrap();
            let pseudo = checksum::pseudo_header_v4(
                ip.src_addr(),
                ip.dst_addr(),
                IpProtocol::Tcp,
                ip.payload().len() as u32,
            );
            assert!(t.verify_checksum(pseudo), "segment {segments}");
            assert!(t.payload().len() <= usize::from(MSS));
            data.extend_from_slice(t.payload());
            segments += 1;
        }
        assert_eq!(segments, PAYLOAD.div_ceil(usize::from(MSS)));
        let want: Vec<u8> = (0..PAYLOAD).map(|i| (i % 251) as u8).collect();
        assert!(
            data == want,
            "segment payloads differ from the super-frame's"
        );
    }

    /// ENOBUFS on a super-frame (here the in-memory port playing a qdisc-bypass kernel whose
    /// device will not segment two tags) leads to software segmentation and an immediate
    /// resend: nothing dropped, one refusal and one software GSO counted, the plain frames of
    /// the batch sent as well.
    #[test]
    fn refused_super_frame_is_segmented_and_resent() {
        let mut port = MemPort::with_caps("m0", vnet_caps(Some(ALL)));
        port.refuse_super_frames = true;
        let (r, sent) = run(&mut port);
        assert_eq!(r.tx.dropped(), 0, "{r:?}");
        assert_eq!(r.fixup_errors, 0);
        assert_eq!((r.sw_gso, r.gso_refused, r.tx.refused), (1, 1, 1));
        assert_eq!(r.tx.sent, 2 + 14);
        assert_eq!(sent.len(), 16);
        assert_segments(&sent);
    }

    /// A device without TSO for the frame (TSO off, or a refused tag depth remembered):
    /// segmented before the send, no refusal; with TSO the super-frame goes out whole.
    #[test]
    fn device_features_decide_before_the_send() {
        for device in [
            DeviceOffloads { tso4: false, ..ALL },
            DeviceOffloads { sg: false, ..ALL },
            DeviceOffloads {
                refused_tags: qbridge_io::port::depth_bit(2),
                ..ALL
            },
        ] {
            let mut port = MemPort::with_caps("m0", vnet_caps(Some(device)));
            port.refuse_super_frames = true;
            let (r, sent) = run(&mut port);
            assert_eq!((r.sw_gso, r.gso_refused, r.tx.dropped()), (1, 0, 0));
            assert_segments(&sent);
            assert_eq!(port.refused_super_frames, 0, "{device:?}");
        }
        for device in [None, Some(ALL), Some(DeviceOffloads { tso6: false, ..ALL })] {
            let mut port = MemPort::with_caps("m0", vnet_caps(device));
            let (r, sent) = run(&mut port);
            assert_eq!((r.sw_gso, r.tx.sent, r.tx.dropped()), (0, 3, 0));
            assert!(sent[1].offload.is_gso());
        }
    }
}
