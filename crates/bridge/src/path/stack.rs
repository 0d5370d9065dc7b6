//! Devices stacked on ports, as Linux stacks network devices: VLAN sub-interfaces (`eth0.100`,
//! `eth0.100.10`), macvlan endpoints, and a bridge's own interface (its *host port*, `br0`).
//!
//! Every port has a [`Role`]. A `Device` is what a bridge port always was: frames read from its
//! queue were received on the wire, frames written to it are sent. The other roles are devices
//! of the host: their queue is a TAP whose reads are what the host *sends* on the device and
//! whose writes are what the device *receives*. A `Vlan` or `Macvlan` device has a lower port
//! (its parent, any role); the host port belongs to a bridge.
//!
//! Two directions, as in the kernel:
//! - **receive** (up): a frame received on port P goes to the first of: the VLAN device on P
//!   whose TPID and VID are the frame's outer tag (the tag popped, then on to that device's own
//!   uppers); the macvlan endpoints on P that take its destination; P's bridge, if P is a bridge
//!   port (a host port: the host); the host, if P is a host device; otherwise the bridge
//!   pipeline counts it (`no_bridge`).
//! - **transmit** (down): a frame sent on a VLAN device gets the device's tag pushed outermost
//!   and is sent on its lower port; on a macvlan endpoint it is sent on the lower port (in
//!   `bridge` mode a sibling's address is delivered to the sibling directly); on a device it
//!   leaves through the device's queue; on a host port it enters the bridge.
//!
//! The bridge pipeline (`super::pipeline`) is unchanged: frames that reach a bridge are
//! forwarded by it, and what it sends to a VLAN device or a host port goes down or up from
//! there. A frame may cross several bridges of one daemon this way (a VLAN device of one
//! bridge's host port enslaved to another bridge); past [`MAX_BRIDGE_PASSES`] it is dropped as
//! `stack_loop`. A plan without stacked devices never enters this module's loop.
//!
//! Counters: VLAN and macvlan devices count as Linux's do (rx: arrived from the lower port, tx:
//! sent towards it); the host port counts as the bridge port it is (rx: from the host into the
//! bridge, tx: from the bridge to the host).

use super::{Forwarder, Outputs, Path};
use crate::counters::DropReason;
use crate::plan::{PortRecord, Uppers};
use crate::settings::{MacvlanMode, Role, MAX_STACK_DEPTH};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::frame::{self, LINK_LOCAL_BASE, MAC_GROUP_BIT};
use qbridge_wire::{Tag, Tci, Tpid};

/// Most bridges one frame crosses inside the daemon before it is dropped as `stack_loop`.
pub const MAX_BRIDGE_PASSES: usize = 8;

/// A worker's scratch for the stacked path; kept between batches to avoid allocating.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Frames entering a bridge in the next pass.
    bridge_in: Batch,
    /// What the bridge pipeline sent, by port, before it goes up or down from there.
    stage: Outputs,
}

/// A frame's destination and source MAC as 48-bit integers (0: the frame ends before it).
fn dst_mac(f: &[u8]) -> u64 {
    frame::dst_u64(f).unwrap_or(0)
}

fn src_mac(f: &[u8]) -> u64 {
    frame::src_u64(f).unwrap_or(0)
}

#[inline]
fn count_rx(p: &PortRecord, wi: usize, len: usize) {
    let c = p.counters.writer(wi);
    c.rx_frames.add(1);
    c.rx_bytes.add(len as u64);
}

#[inline]
fn count_tx(p: &PortRecord, wi: usize, len: usize) {
    let c = p.counters.writer(wi);
    c.tx_frames.add(1);
    c.tx_bytes.add(len as u64);
}

/// Where [`Plan::transmit`] starts: whether the first device's tx is already counted (the
/// bridge pipeline counts what it sends to a port).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    No,
    First,
}

impl Path<'_> {
    #[inline(never)]
    pub(super) fn process_stacked(
        &self,
        w: &mut Forwarder,
        now_ns: u64,
        rx: &mut Batch,
        out: &mut Outputs,
    ) {
        out.ensure(self.ports.len());
        let mut s = w.stack.take().unwrap_or_default();
        s.stage.ensure(self.ports.len());
        let wi = w.index;
        // The common case, frames of bridge ports with nothing stacked on them: to the bridge
        // as one batch.
        let plain = rx.pkts.iter().all(|p| {
            matches!(self.ports.get(p.port as usize), Some(Some(port))
                if port.role == Role::Device && port.uppers.is_none())
        });
        if plain && s.bridge_in.is_empty() {
            std::mem::swap(&mut s.bridge_in.pkts, &mut rx.pkts);
        }
        for pkt in rx.pkts.drain(..) {
            let p = pkt.port;
            match self.ports.get(p as usize).and_then(|p| p.as_deref()) {
                // Unknown ports and devices: the bridge pipeline counts them.
                None => s.bridge_in.push(pkt),
                Some(port) => match port.role {
                    Role::Device => self.receive(wi, p, pkt, &mut s, out),
                    Role::Host { .. } => s.bridge_in.push(pkt),
                    Role::Vlan { .. } | Role::Macvlan { .. } => {
                        self.transmit(wi, p, pkt, Counted::No, &mut s, out)
                    }
                },
            }
        }
        let mut passes = 0;
        while !s.bridge_in.is_empty() {
            if passes == MAX_BRIDGE_PASSES {
                for pkt in s.bridge_in.pkts.drain(..) {
                    if let Some(Some(p)) = self.ports.get(pkt.port as usize) {
                        p.counters.writer(wi).drop(DropReason::StackLoop);
                    }
                    out.pool.put(pkt);
                }
                break;
            }
            passes += 1;
            self.bridge_pass(w, wi, now_ns, &mut s, out);
        }
        w.stack = Some(s);
    }

    /// Runs the bridge pipeline over `s.bridge_in`, then sends each port's share on: out of a
    /// device, up to the host from a host port, down from a stacked device.
    fn bridge_pass(
        &self,
        w: &mut Forwarder,
        wi: usize,
        now_ns: u64,
        s: &mut Scratch,
        out: &mut Outputs,
    ) {
        let mut input = std::mem::take(&mut s.bridge_in);
        // Host ports: link-local frames the bridge does not forward go to the host.
        self.link_local_to_host(wi, &mut input, out);
        // The pipeline takes its flood copies from, and returns drops to, the worker's pool.
        std::mem::swap(&mut s.stage.pool, &mut out.pool);
        self.process_flat(w, now_ns, &mut input, &mut s.stage);
        std::mem::swap(&mut s.stage.pool, &mut out.pool);
        s.bridge_in = input;
        for e in 0..s.stage.ports.len() {
            if s.stage.ports[e].is_empty() {
                continue;
            }
            let role = match self.ports.get(e).and_then(|p| p.as_deref()) {
                Some(p) => p.role,
                None => Role::Device,
            };
            match role {
                Role::Device => {
                    let q = &mut out.ports[e].pkts;
                    if q.is_empty() {
                        std::mem::swap(q, &mut s.stage.ports[e].pkts);
                    } else {
                        q.append(&mut s.stage.ports[e].pkts);
                    }
                }
                Role::Host { .. } => {
                    let mut batch = std::mem::take(&mut s.stage.ports[e].pkts);
                    for pkt in batch.drain(..) {
                        self.deliver_host(wi, e as u16, pkt, s, out);
                    }
                    s.stage.ports[e].pkts = batch;
                }
                Role::Vlan { .. } | Role::Macvlan { .. } => {
                    let mut batch = std::mem::take(&mut s.stage.ports[e].pkts);
                    for pkt in batch.drain(..) {
                        self.transmit(wi, e as u16, pkt, Counted::First, s, out);
                    }
                    s.stage.ports[e].pkts = batch;
                }
            }
        }
    }

    /// Moves the link-local frames (01-80-C2-00-00-0X) that a bridge with a host port does not
    /// forward out of `input` to that host port, as received (Linux passes them up; an LLDP or
    /// STP daemon on the host sees them). Counted as the host port's tx.
    fn link_local_to_host(&self, wi: usize, input: &mut Batch, out: &mut Outputs) {
        let has_link_local = input
            .pkts
            .iter()
            .any(|p| dst_mac(p.frame()) & !0xf == LINK_LOCAL_BASE);
        if !has_link_local {
            return;
        }
        let mut keep = Vec::with_capacity(input.pkts.len());
        for pkt in input.pkts.drain(..) {
            let host = self.link_local_host(&pkt);
            match host {
                Some(h) => {
                    let hp = self.ports[h as usize].as_deref().expect("host port exists");
                    let inp = self.ports[pkt.port as usize]
                        .as_deref()
                        .expect("port exists");
                    count_rx(inp, wi, pkt.len());
                    let mut pkt = pkt;
                    if !hp.running {
                        hp.counters.writer(wi).drop(DropReason::PortDown);
                        out.pool.put(pkt);
                        continue;
                    }
                    count_tx(hp, wi, pkt.len());
                    pkt.port = h;
                    out.ports[h as usize].push(pkt);
                }
                None => keep.push(pkt),
            }
        }
        input.pkts = keep;
    }

    /// The host port a link-local frame goes to instead of being dropped by its bridge, if any.
    fn link_local_host(&self, pkt: &PacketBuf) -> Option<u16> {
        let dst = dst_mac(pkt.frame());
        if dst & !0xf != LINK_LOCAL_BASE || pkt.len() < 14 {
            return None;
        }
        let inp = self.ports.get(pkt.port as usize)?.as_deref()?;
        if !inp.running || matches!(inp.role, Role::Host { .. }) {
            return None;
        }
        let br = self.bridges.get(inp.master? as usize)?.as_deref()?;
        let host = br.host?;
        let group = (dst & 0xf) as u8;
        (!super::classify::link_local_forwarded(br, group)).then_some(host)
    }

    /// A frame received on port `p` (from its wire, or popped out of a lower port's tag): to a
    /// stacked device that takes it, else to `p`'s bridge or host.
    fn receive(
        &self,
        wi: usize,
        mut p: u16,
        mut pkt: PacketBuf,
        s: &mut Scratch,
        out: &mut Outputs,
    ) {
        loop {
            let Some(Some(port)) = self.ports.get(p as usize) else {
                return s.bridge_in.push(pkt);
            };
            if let Some(up) = port.uppers.as_deref() {
                if !port.running {
                    // The pipeline counts a bridge port's frames; this is a lower device.
                    if port.master.is_none() {
                        count_rx(port, wi, pkt.len());
                        port.counters.writer(wi).drop(DropReason::PortDown);
                        return out.pool.put(pkt);
                    }
                    pkt.port = p;
                    return s.bridge_in.push(pkt);
                }
                if let Some(child) = vlan_child(up, pkt.frame()) {
                    count_rx(port, wi, pkt.len());
                    pkt.remove_tag(frame::tag_offset(0));
                    pkt.offload.shift_headers(-4);
                    p = child;
                    continue;
                }
                if !up.macvlans.is_empty() {
                    match self.macvlan_receive(wi, port, up, pkt, s, out) {
                        Some(back) => pkt = back,
                        None => return,
                    }
                }
            }
            match port.role {
                Role::Device => {
                    pkt.port = p;
                    return s.bridge_in.push(pkt);
                }
                Role::Vlan { .. } | Role::Macvlan { .. } if port.master.is_some() => {
                    pkt.port = p;
                    return s.bridge_in.push(pkt);
                }
                Role::Vlan { .. } | Role::Macvlan { .. } => {
                    return self.send_to_host(wi, port, p, pkt, out);
                }
                // Never stacked on anything, so only reached by its own bridge's output.
                Role::Host { .. } => {
                    pkt.port = p;
                    return out.ports[p as usize].push(pkt);
                }
            }
        }
    }

    /// What the bridge sends to its host port: to a VLAN device of the host port whose tag it
    /// carries, or to the macvlan endpoints on it that take it, else to the host.
    fn deliver_host(
        &self,
        wi: usize,
        h: u16,
        mut pkt: PacketBuf,
        s: &mut Scratch,
        out: &mut Outputs,
    ) {
        let Some(Some(hp)) = self.ports.get(h as usize) else {
            return self.drop_unknown(wi, pkt, out);
        };
        if let Some(up) = hp.uppers.as_deref() {
            if let Some(child) = vlan_child(up, pkt.frame()) {
                pkt.remove_tag(frame::tag_offset(0));
                pkt.offload.shift_headers(-4);
                return self.receive(wi, child, pkt, s, out);
            }
            if !up.macvlans.is_empty() {
                match self.macvlan_receive(wi, hp, up, pkt, s, out) {
                    Some(back) => pkt = back,
                    None => return,
                }
            }
        }
        pkt.port = h;
        out.ports[h as usize].push(pkt);
    }

    /// A frame for a port id that names no port in this plan (an I/O layer's mistake): counted
    /// with the switch's `unknown_port_drops`, as the bridge pipeline counts them.
    #[cold]
    fn drop_unknown(&self, wi: usize, pkt: PacketBuf, out: &mut Outputs) {
        if let Some(u) = &self.unknown_port_drops {
            u.writer(wi).add(1);
        }
        out.pool.put(pkt);
    }

    /// Writes `pkt` to the host side of stacked device `p` (its TAP), counted as `p`'s rx.
    fn send_to_host(
        &self,
        wi: usize,
        port: &PortRecord,
        p: u16,
        mut pkt: PacketBuf,
        out: &mut Outputs,
    ) {
        count_rx(port, wi, pkt.len());
        if !port.running {
            port.counters.writer(wi).drop(DropReason::PortDown);
            return out.pool.put(pkt);
        }
        pkt.port = p;
        out.ports[p as usize].push(pkt);
    }

    /// The macvlan endpoints on `lower` take `pkt` if it is theirs (Linux's
    /// `macvlan_handle_frame`): a unicast frame goes to the endpoint with its destination (in
    /// passthru mode: the one endpoint, whatever the destination); a group frame is copied to
    /// every endpoint the source's mode lets it reach and goes on up the lower port too.
    /// Returns the frame when no endpoint consumed it.
    fn macvlan_receive(
        &self,
        wi: usize,
        lower: &PortRecord,
        up: &Uppers,
        pkt: PacketBuf,
        s: &mut Scratch,
        out: &mut Outputs,
    ) -> Option<PacketBuf> {
        let frame = pkt.frame();
        if frame.len() < 14 {
            return Some(pkt);
        }
        if let Some(p) = up.passthru() {
            count_rx(lower, wi, pkt.len());
            self.receive(wi, p, pkt, s, out);
            return None;
        }
        let dst = dst_mac(frame);
        let src = src_mac(frame);
        let source = up.macvlan(src).map(|(_, mode)| mode);
        if dst & MAC_GROUP_BIT != 0 {
            for &(mac, p, mode) in &up.macvlans {
                let reaches = mac != src
                    && match source {
                        None => true,
                        Some(MacvlanMode::Vepa) => {
                            matches!(mode, MacvlanMode::Vepa | MacvlanMode::Bridge)
                        }
                        // Bridge-mode endpoints saw it on the way out.
                        Some(MacvlanMode::Bridge) => mode == MacvlanMode::Vepa,
                        Some(_) => false,
                    };
                if reaches {
                    let copy = out.pool.get_copy(&pkt);
                    self.receive(wi, p, copy, s, out);
                }
            }
            return Some(pkt);
        }
        let Some((p, mode)) = up.macvlan(dst) else {
            return Some(pkt);
        };
        count_rx(lower, wi, pkt.len());
        // Private: nothing from a sibling, even hairpinned by the external switch.
        let private = mode == MacvlanMode::Private || source == Some(MacvlanMode::Private);
        if source.is_some() && private {
            if let Some(Some(d)) = self.ports.get(p as usize) {
                count_rx(d, wi, pkt.len());
                d.counters.writer(wi).drop(DropReason::Isolated);
            }
            out.pool.put(pkt);
            return None;
        }
        self.receive(wi, p, pkt, s, out);
        None
    }

    /// A frame sent on port `p` (by the host on a stacked device, or by a bridge to one): down
    /// the stack to a device's queue, or into a bridge from a host port.
    fn transmit(
        &self,
        wi: usize,
        mut p: u16,
        mut pkt: PacketBuf,
        mut counted: Counted,
        s: &mut Scratch,
        out: &mut Outputs,
    ) {
        for _ in 0..=MAX_STACK_DEPTH {
            let Some(Some(port)) = self.ports.get(p as usize) else {
                return self.drop_unknown(wi, pkt, out);
            };
            if let Role::Host { .. } = port.role {
                // A device on the host port sends into the bridge, as the host does (the
                // pipeline counts it as the host port's rx, or drops it if the port is down).
                pkt.port = p;
                return s.bridge_in.push(pkt);
            }
            if counted == Counted::No {
                count_tx(port, wi, pkt.len());
            }
            counted = Counted::No;
            if !port.running {
                port.counters.writer(wi).drop(DropReason::PortDown);
                return out.pool.put(pkt);
            }
            if pkt.len() < 14 {
                port.counters.writer(wi).drop(DropReason::Runt);
                return out.pool.put(pkt);
            }
            match port.role {
                Role::Vlan { lower, tpid, vid } => {
                    let tag = frame::tag_bytes(Tag::new(Tpid(tpid), Tci(vid)));
                    pkt.insert_tag(frame::tag_offset(0), tag);
                    pkt.offload.shift_headers(4);
                    p = lower;
                }
                Role::Macvlan { lower, mode } => {
                    if mode == MacvlanMode::Bridge {
                        match self.macvlan_bridge(wi, p, lower, pkt, s, out) {
                            Some(back) => pkt = back,
                            None => return,
                        }
                    }
                    p = lower;
                }
                Role::Host { .. } => unreachable!("handled above"),
                Role::Device => {
                    if super::meta::wire_len(&pkt, port.tpid) > port.max_frame as usize {
                        port.counters.writer(wi).drop(DropReason::Oversize);
                        return out.pool.put(pkt);
                    }
                    pkt.port = p;
                    return out.ports[p as usize].push(pkt);
                }
            }
        }
        // Deeper than any stack the switch accepts: a loop.
        if let Some(Some(port)) = self.ports.get(p as usize) {
            port.counters.writer(wi).drop(DropReason::StackLoop);
        }
        out.pool.put(pkt);
    }

    /// Bridge mode: a frame for a sibling endpoint in bridge mode goes to it directly
    /// (consumed: `None`); a group frame is copied to every bridge-mode sibling and goes on
    /// out of the lower port (returned).
    fn macvlan_bridge(
        &self,
        wi: usize,
        me: u16,
        lower: u16,
        pkt: PacketBuf,
        s: &mut Scratch,
        out: &mut Outputs,
    ) -> Option<PacketBuf> {
        let up = self
            .ports
            .get(lower as usize)
            .and_then(|p| p.as_deref())
            .and_then(|p| p.uppers.as_deref());
        let Some(up) = up else {
            return Some(pkt);
        };
        let dst = dst_mac(pkt.frame());
        if dst & MAC_GROUP_BIT != 0 {
            for &(_, p, mode) in &up.macvlans {
                if p != me && mode == MacvlanMode::Bridge {
                    let copy = out.pool.get_copy(&pkt);
                    self.receive(wi, p, copy, s, out);
                }
            }
            return Some(pkt);
        }
        match up.macvlan(dst) {
            Some((p, MacvlanMode::Bridge)) if p != me => {
                self.receive(wi, p, pkt, s, out);
                None
            }
            _ => Some(pkt),
        }
    }
}

/// The VLAN device among `up` whose tag is the frame's outer tag.
#[inline]
fn vlan_child(up: &Uppers, frame: &[u8]) -> Option<u16> {
    if up.vlans.is_empty() || frame.len() < 18 {
        return None;
    }
    let tag = frame::tag_word_at(frame, 0)?;
    let vid = tag & 0x0fff;
    if vid == 0 || vid == 0x0fff {
        return None;
    }
    up.vlans.get(&(tag & 0xffff_0000 | vid)).copied()
}
