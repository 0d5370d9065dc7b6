//! A worker's half of the fast path: its socket on the upcall device (the program's misses,
//! the ingress port's index in the accelerated tag), the misses forwarded in order with the
//! worker's pipeline, and a flow installed when the pipeline's decision for a frame forwarded
//! alone allows (`super::install`). The worker runs this through [`Host`], what it lends of
//! itself (its queues, its pipeline, its transmit); it knows nothing of flows.

use super::{install, port_index, Crossing, FastShared, Forwarded, Refusal, SeenCopy, PREFIX};
use crate::queue::Queue;
use qbridge_bridge::{FastClass, Outputs, Plan};
use qbridge_io::BackendDrops;
use qbridge_packet::{Batch, PacketBuf};
use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Port `id` as an output of a flow, as the worker holding its queue sees it.
#[derive(Debug, Clone)]
pub(crate) struct Egress {
    /// The program's index of the opening ([`port_index`]).
    pub index: u16,
    /// The interface the program redirects to (0: the fast path does not serve the port).
    pub ifindex: u32,
    /// The interface is a veth whose peer, in another namespace, has this address.
    pub peer_mac: Option<[u8; 6]>,
    /// The port is a TAP (the frame is delivered into its receive).
    pub into_host: bool,
    /// The port is a patch link end; its peer's id.
    pub patch_peer: Option<u16>,
    /// A VXLAN port the program encapsulates for (decision 73).
    pub vxlan: Option<std::sync::Arc<super::VxlanEgress>>,
}

impl Egress {
    /// Port opening `token` as an output, from what its workers and the engine share.
    pub(crate) fn of(token: u64, s: &crate::shared::PortShared) -> Egress {
        Egress {
            index: super::port_index(token),
            ifindex: s.fast_ifindex.load(Ordering::Relaxed),
            peer_mac: crate::shared::decode_peer_mac(s.fast_peer_mac.load(Ordering::Relaxed)),
            into_host: s.fast_into_host.load(Ordering::Relaxed),
            patch_peer: u16::try_from(s.patch_peer.load(Ordering::Relaxed)).ok(),
            vxlan: s
                .fast_vxlan
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// What the fast path needs of the worker it runs in. The worker's receive burst, pipeline
/// and transmit stay the worker's; this is how the fast path drives them.
pub(crate) trait Host {
    /// The program's index of port `id`'s opening this worker holds (`None`: no such queue,
    /// or a failed one).
    fn port_index(&self, id: u16) -> Option<u16>;
    /// Port `id` as an output (`None`: no such queue, or a failed one).
    fn egress(&self, id: u16) -> Option<Egress>;
    /// Counts `n` frames received for port `id` (the per-worker receive counts).
    fn count_worker_rx(&self, id: u16, n: u64);
    /// The batch the pipeline forwards next (frames with their ingress port id in `port`).
    fn rx(&mut self) -> &mut Batch;
    /// The pipeline's outputs (and the buffer pool).
    fn outputs(&mut self) -> &mut Outputs;
    fn outputs_ref(&self) -> &Outputs;
    /// Forwards [`Host::rx`] with the pipeline, leaving the outputs unsent.
    fn process(&mut self);
    /// Sends the outputs of the last [`Host::process`].
    fn send_outputs(&mut self);
    /// Classification of frame `i` of the last [`Host::process`]
    /// ([`qbridge_bridge::Forwarder::fast_class`]).
    fn fast_class(&self, i: usize) -> Option<FastClass>;
    /// Forwards (and sends) what patch link end `id` has waiting on this worker.
    fn drain_patch(&mut self, id: u16);
    /// The flood work the next [`Host::process`] may do.
    fn set_flood_credit(&mut self, credit: Option<u64>);
    fn plan(&self) -> &Plan;
}

/// Whether what port `shared` reads are the program's misses: a TAP port the fast path
/// serves (the program on its egress sends the misses on to the daemon's descriptor); its
/// bursts go to [`FastWorker::forward_tap`].
pub(crate) fn reads_misses(shared: &crate::shared::PortShared) -> bool {
    (shared.fast_into_host.load(Ordering::Relaxed)
        && shared.fast_ifindex.load(Ordering::Relaxed) != 0)
        // A VXLAN port the program decapsulates for (decision 77).
        || shared.fast_decap.load(Ordering::Relaxed)
}

/// The fast path in one worker.
#[derive(Debug)]
pub(crate) struct FastWorker {
    upcall: Queue,
    shared: Arc<FastShared>,
    /// The generation of the plan this worker forwards with.
    generation: u32,
    /// The upcall burst (frames of many ports).
    batch: Batch,
    /// (ingress index, destination) pairs whose flow was refused for a reason of the
    /// configuration, under `generation`: their frames are forwarded in bursts, not alone.
    refused: HashSet<(u16, [u8; 6])>,
    /// Pairs installed from this burst (their later frames in it are no news).
    installed: Vec<(u16, [u8; 6])>,
    /// The frame forwarded alone: the bridges it crossed, and its first bytes entering
    /// each and leaving the last.
    hops: Vec<Crossing>,
    frames: Vec<Vec<u8>>,
    /// The upcall socket's drops already counted into `FastShared::upcall_ring_full`.
    seen_drops: BackendDrops,
}

impl FastWorker {
    /// The worker's socket on the upcall device, started; the worker polls [`FastWorker::fd`].
    pub fn new(mut upcall: Queue, shared: Arc<FastShared>, burst: usize) -> FastWorker {
        if let Err(e) = upcall.start() {
            tracing::warn!("fast path: upcall socket: {e}");
        }
        let generation = shared.generation.load(Ordering::Acquire);
        FastWorker {
            upcall,
            shared,
            generation,
            batch: Batch::with_capacity(burst),
            refused: HashSet::new(),
            installed: Vec::new(),
            hops: Vec::with_capacity(qbridge_fastpath::MAX_HOPS),
            frames: (0..=qbridge_fastpath::MAX_HOPS)
                .map(|_| Vec::with_capacity(PREFIX))
                .collect(),
            seen_drops: BackendDrops::default(),
        }
    }

    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.upcall.fd()
    }

    /// Misses wait on the upcall socket without a wake-up.
    pub fn rx_pending(&self) -> bool {
        self.upcall.rx_pending()
    }

    /// The worker forwards with a new plan, of the fast path's generation `generation`.
    pub fn follow_plan(&mut self, generation: u32) {
        if self.generation != generation {
            self.refused.clear();
        }
        self.generation = generation;
    }

    /// The pairs refused for a reason of the configuration may be tried again: an FDB
    /// command (decision 85) may have moved their destination, without a new generation.
    pub fn forget_refusals(&mut self) {
        self.refused.clear();
    }

    /// Once a second: the upcall socket's kernel drops (a ring the workers did not empty in
    /// time) counted.
    pub fn tick(&mut self) {
        if let Err(e) = self.upcall.tick() {
            tracing::debug!("fast path: upcall socket: {e}");
        }
        let now = self.upcall.drops();
        let lost = (now.rx_ring_full + now.rx_truncated)
            .saturating_sub(self.seen_drops.rx_ring_full + self.seen_drops.rx_truncated);
        if lost != 0 {
            self.shared
                .upcall_ring_full
                .fetch_add(lost, Ordering::Relaxed);
        }
        self.seen_drops = now;
    }

    /// One burst of the upcall socket: each frame given to its ingress port, forwarded in
    /// order ([`FastWorker::forward_misses`]). `round`: the flood work of a worker's round
    /// (the misses of every fast-path port share one queue: a round's at most, as a queue
    /// alone in its round).
    pub fn service(&mut self, host: &mut impl Host, burst: usize, round: u64) {
        let received = self
            .upcall
            .rx_burst(&mut self.batch, &mut host.outputs().pool, burst);
        if let Err(e) = received {
            tracing::warn!("fast path: upcall socket: {e}");
            host.outputs().pool.put_all(&mut self.batch);
            return;
        }
        if self.batch.is_empty() {
            return;
        }
        host.set_flood_credit(Some(round));
        let mut pkts = std::mem::take(&mut self.batch.pkts);
        self.forward_misses(host, &mut pkts, true);
        self.batch.pkts = pkts;
    }

    /// A TAP port the fast path serves read a burst into [`Host::rx`] (counted as read): the
    /// program's misses on its egress, forwarded as the upcall's are. `token`: the port's
    /// opening.
    pub fn forward_tap(&mut self, host: &mut impl Host, token: u64) {
        let index = port_index(token);
        std::mem::swap(&mut host.rx().pkts, &mut self.batch.pkts);
        let mut pkts = std::mem::take(&mut self.batch.pkts);
        for p in pkts.iter_mut() {
            p.port = index;
        }
        self.forward_misses(host, &mut pkts, false);
        self.batch.pkts = pkts;
    }

    /// Forwards the fast path's misses `pkts` (each with its ingress port's index in `port`),
    /// in order; a unicast frame whose flow may be new is forwarded alone and its flow
    /// installed when the pipeline's decision allows (`super::install`). `count_rx`: count
    /// them in the ports' per-worker receive counts (the upcall's; a TAP port's burst was
    /// counted as read).
    fn forward_misses(&mut self, host: &mut impl Host, pkts: &mut Vec<PacketBuf>, count_rx: bool) {
        // Flows are made only under the generation of the plan in hand: a change published
        // but not yet taken makes them stale at once, so none is made.
        let install = self.shared.generation.load(Ordering::Acquire) == self.generation;
        if self.refused.len() > 65_536 {
            self.refused.clear();
        }
        self.installed.clear();
        let mut stale = 0u64;
        // Frames per ingress port for `rx_frames_by_worker`, counted per run of one port (one
        // atomic add per run, not per frame).
        let mut run: Option<(u16, u64)> = None;
        for mut pkt in pkts.drain(..) {
            let tci = pkt.port;
            let id = tci & 0x0fff;
            let index = host.port_index(id);
            if tci == qbridge_io::afpacket::UPCALL_NO_PORT || index != Some(tci) {
                stale += 1;
                host.outputs().pool.put(pkt);
                continue;
            }
            pkt.port = id;
            match &mut run {
                _ if !count_rx => {}
                Some((p, n)) if *p == id => *n += 1,
                _ => {
                    if let Some((p, n)) = run.replace((id, 1)) {
                        host.count_worker_rx(p, n);
                    }
                }
            }
            let frame = pkt.frame();
            let pair = match frame.get(..6) {
                Some(d) if install && d[0] & 1 == 0 => {
                    let mut dst = [0u8; 6];
                    dst.copy_from_slice(d);
                    let pair = (tci, dst);
                    (!self.refused.contains(&pair) && !self.installed.contains(&pair))
                        .then_some(pair)
                }
                _ => None,
            };
            let Some(pair) = pair else {
                host.rx().push(pkt);
                continue;
            };
            if !host.rx().is_empty() {
                host.process();
                host.send_outputs();
            }
            self.frames[0].clear();
            self.frames[0].extend_from_slice(&frame[..frame.len().min(PREFIX)]);
            let in_len = pkt.len();
            host.rx().push(pkt);
            host.process();
            match self.install_from_outputs(host, id, tci, in_len) {
                Ok(()) => self.installed.push(pair),
                Err(r) => {
                    self.shared.refuse(r);
                    if matches!(r, Refusal::Port | Refusal::Rewrite) {
                        self.refused.insert(pair);
                    }
                }
            }
            host.send_outputs();
        }
        if let Some((p, n)) = run {
            host.count_worker_rx(p, n);
        }
        if !host.rx().is_empty() {
            host.process();
            host.send_outputs();
        }
        if stale != 0 {
            self.shared
                .stale_upcalls
                .fetch_add(stale, Ordering::Relaxed);
        }
        // Entries the pipeline moved or removed meanwhile: the map follows at once, each
        // written under its FDB's lock, in order with the engine's and other workers' writes
        // (decision 85).
        let h = &*host;
        if super::follow_plan(&self.shared, h.plan(), |p| h.port_index(p)) {
            self.shared.resync.store(true, Ordering::Relaxed);
        }
    }

    /// After a frame of port `in_id` (index `in_index`) was forwarded alone: installs its flow
    /// when the outputs and the FDB allow. An output on a patch link is received by the other
    /// end at once (after the frames the link already held, which go first), so that the
    /// flow folds the bridges behind it; the outputs left are the caller's to send.
    fn install_from_outputs(
        &mut self,
        host: &mut impl Host,
        in_id: u16,
        in_index: u16,
        in_len: usize,
    ) -> Result<(), Refusal> {
        self.hops.clear();
        let (mut in_id, mut in_index, mut in_len) = (in_id, in_index, in_len);
        let mut copies: Vec<(u16, usize)>;
        let out = loop {
            let n = self.hops.len();
            let (out_id, seen) =
                split_outputs(host.outputs_ref(), host.plan(), in_id, &self.frames[n])?;
            if !seen.is_empty() && n > 0 {
                return Err(Refusal::Port);
            }
            copies = seen;
            let out = host.egress(out_id).ok_or(Refusal::Port)?;
            let frame = &host.outputs_ref().ports[out_id as usize].pkts[0];
            self.hops.push(Crossing {
                in_id,
                in_index,
                in_len,
                class: host.fast_class(0),
                out_id,
                out_index: out.index,
                out_len: frame.len(),
            });
            let bytes = frame.frame();
            self.frames[n + 1].clear();
            self.frames[n + 1].extend_from_slice(&bytes[..bytes.len().min(PREFIX)]);
            let peer = out.patch_peer.and_then(|p| Some((p, host.port_index(p)?)));
            let (Some((peer, peer_index)), true) = (peer, n + 1 < qbridge_fastpath::MAX_HOPS)
            else {
                break out;
            };
            if !copies.is_empty() {
                return Err(Refusal::Port);
            }
            // Through the patch link now: what the other end has waiting first, then this
            // frame, received there (its transmit counted as sent, as the link does).
            let Some(mut pkt) = host.outputs().ports[out_id as usize].pkts.pop() else {
                return Err(Refusal::Outputs);
            };
            host.drain_patch(peer);
            pkt.port = peer;
            host.count_worker_rx(peer, 1);
            (in_id, in_index, in_len) = (peer, peer_index, pkt.len());
            host.rx().push(pkt);
            host.process();
        };
        let frames: Vec<&[u8]> = self.frames[..=self.hops.len()]
            .iter()
            .map(Vec::as_slice)
            .collect();
        // The mirror copies (decision 80): each destination as an output the program clones
        // to (a plain interface: not a TAP, a bond, a tunnel or a patch link).
        let mut seen = Vec::with_capacity(copies.len());
        for &(dst, pos) in &copies {
            let e = host.egress(dst).ok_or(Refusal::Port)?;
            let plain = !e.into_host
                && e.vxlan.is_none()
                && e.patch_peer.is_none()
                && e.ifindex != super::bond::BOND_EGRESS;
            let pkt = &host.outputs_ref().ports[dst as usize].pkts[pos];
            let bytes = pkt.frame();
            seen.push(SeenCopy {
                port: dst,
                index: e.index,
                ifindex: if plain { e.ifindex } else { 0 },
                len: pkt.len(),
                frame: &bytes[..bytes.len().min(PREFIX)],
            });
        }
        install(
            &self.shared,
            &Forwarded {
                plan: host.plan(),
                hops: &self.hops,
                frames: &frames,
                out_ifindex: out.ifindex,
                out_peer_mac: out.peer_mac,
                out_into_host: out.into_host,
                out_vxlan: out.vxlan.as_deref(),
                copies: &seen,
                generation: self.generation,
            },
        )
    }
}

/// The outputs of a frame forwarded alone, split: the port of the frame itself and where the
/// mirror copies the pipeline made of it are (destination port, position in its batch, in the
/// pipeline's delivery order), or why a flow cannot be made of it ([`super::split_copies`]).
fn split_outputs(
    outputs: &Outputs,
    plan: &Plan,
    in_id: u16,
    input: &[u8],
) -> Result<(u16, Vec<(u16, usize)>), Refusal> {
    if !plan.has_mirrors() {
        return one_output(outputs).map(|o| (o, Vec::new()));
    }
    if outputs.mirror_sinks.iter().any(|b| !b.is_empty()) || !outputs.punt.is_empty() {
        return Err(Refusal::Outputs);
    }
    let mut sent: Vec<(u16, &[u8])> = Vec::new();
    let mut at: Vec<(u16, usize)> = Vec::new();
    for (j, b) in outputs.ports.iter().enumerate() {
        for (k, p) in b.pkts.iter().enumerate() {
            sent.push((j as u16, p.frame()));
            at.push((j as u16, k));
        }
    }
    let (frame, copies) = super::split_copies(plan, in_id, input, &sent)?;
    Ok((at[frame].0, copies.into_iter().map(|c| at[c]).collect()))
}

/// The one output of the last forwarding of a single frame: its port, or why a flow cannot
/// be made of it.
fn one_output(outputs: &Outputs) -> Result<u16, Refusal> {
    if !outputs.mirror_sinks.is_empty() || !outputs.punt.is_empty() {
        return Err(Refusal::Outputs);
    }
    let mut one = None;
    for (j, b) in outputs.ports.iter().enumerate() {
        if b.is_empty() {
            continue;
        }
        if one.is_some() || b.len() != 1 {
            return Err(Refusal::Outputs);
        }
        one = Some(j as u16);
    }
    one.ok_or(Refusal::Outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_bridge::PortId;

    fn frame(o: &mut Outputs) -> PacketBuf {
        let mut p = o.pool.get();
        p.extend_from_slice(&[2; 60]);
        p
    }

    #[test]
    fn a_flow_needs_exactly_one_frame_on_one_port() {
        let mut o = Outputs::new();
        assert_eq!(one_output(&o), Err(Refusal::Outputs));
        let p = frame(&mut o);
        o.batch_mut(PortId(3)).push(p);
        assert_eq!(one_output(&o), Ok(3));
        // A flood: a second port, or a second frame on the same one.
        let p = frame(&mut o);
        o.batch_mut(PortId(5)).push(p);
        assert_eq!(one_output(&o), Err(Refusal::Outputs));
        let mut o = Outputs::new();
        for _ in 0..2 {
            let p = frame(&mut o);
            o.batch_mut(PortId(3)).push(p);
        }
        assert_eq!(one_output(&o), Err(Refusal::Outputs));
        // A trapped copy besides the one output.
        let mut o = Outputs::new();
        let p = frame(&mut o);
        o.batch_mut(PortId(3)).push(p);
        let p = frame(&mut o);
        o.punt.push(p);
        assert_eq!(one_output(&o), Err(Refusal::Outputs));
    }
}
