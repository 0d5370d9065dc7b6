//! R-M: port mirroring in the model, written from `docs/semantics.md` §M as a second, plain
//! reading of the rules (no masks, no pool: sessions scanned in order, frames cloned).
//!
//! For one `process` call (one batch): before forwarding, every frame received on a running
//! port is copied for each session (in creation order) that has the port as an rx source and
//! whose VLAN list admits it (runts are counted, not copied); after forwarding, for each port
//! in ascending id, each frame the batch sent on it is copied for each session with the port
//! as a tx source. Then the copies, rx ones first, go to their destination: dropped
//! (`port_down`) if it is down, the RSPAN tag pushed, dropped (`oversize`) if longer than the
//! destination takes, else sent after everything the batch sent, counted on the session and
//! as the destination's tx.

use crate::{be16, refuse, Frame, Model, Res};
use qbridge_bridge::{DropReason, MirrorCounters, MirrorDirection, MirrorDst, MirrorSpec};
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub(crate) struct Mirror {
    name: String,
    src: Vec<u16>,
    direction: MirrorDirection,
    vids: Option<BTreeSet<u16>>,
    dst: u16,
    rspan: Option<u16>,
    counters: MirrorCounters,
}

/// Copies taken from one batch: (session index, frame).
pub(crate) type Pending = Vec<(usize, Frame)>;

fn valid_name(n: &str) -> bool {
    (1..=32).contains(&n.len())
        && !n.starts_with('-')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl Model {
    fn port_by_name(&self, name: &str) -> Option<u16> {
        self.ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.name == name))
            .map(|i| i as u16)
    }

    /// `mirror add` with a port destination (the model has no pcap files).
    pub fn mirror_add(&mut self, spec: &MirrorSpec) -> Res<()> {
        if !valid_name(&spec.name) {
            return refuse("bad mirror name");
        }
        if self.mirrors.iter().any(|m| m.name == spec.name) {
            return refuse("mirror exists");
        }
        if self.mirrors.len() >= 32 {
            return refuse("too many mirrors");
        }
        if spec.src.is_empty() {
            return refuse("no source");
        }
        let mut src = Vec::new();
        for n in &spec.src {
            let Some(p) = self.port_by_name(n) else {
                return refuse("no such source");
            };
            if src.contains(&p) {
                return refuse("source twice");
            }
            src.push(p);
        }
        let MirrorDst::Port(d) = &spec.dst else {
            return refuse("the model mirrors to ports only");
        };
        let Some(dst) = self.port_by_name(d) else {
            return refuse("no such destination");
        };
        if src.contains(&dst) {
            return refuse("destination is a source");
        }
        if spec.rspan.is_some_and(|v| !(1..=4094).contains(&v)) {
            return refuse("rspan vid out of range");
        }
        let vids = match &spec.vids {
            None => None,
            Some(l) => {
                let mut set = BTreeSet::new();
                for &(a, z) in l.ranges() {
                    if a == 0 || z > 4094 || z < a {
                        return refuse("bad vid list");
                    }
                    set.extend(a..=z);
                }
                Some(set)
            }
        };
        self.mirrors.push(Mirror {
            name: spec.name.clone(),
            src,
            direction: spec.direction,
            vids,
            dst,
            rspan: spec.rspan,
            counters: MirrorCounters::default(),
        });
        Ok(())
    }

    pub fn mirror_del(&mut self, name: &str) -> Res<()> {
        let Some(i) = self.mirrors.iter().position(|m| m.name == name) else {
            return refuse("no such mirror");
        };
        self.mirrors.remove(i);
        Ok(())
    }

    pub fn mirror_counters(&self, name: &str) -> Option<MirrorCounters> {
        self.mirrors
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.counters.clone())
    }

    /// The VLAN a session's list judges a frame on `port` by: its outer tag's VID when the
    /// tag is the port's bridge TPID and the VID is not 0, else the port's PVID (none: 0).
    fn mirror_vlan(&self, port: u16, bytes: &[u8]) -> u16 {
        let pvid = self.port(port).pvid.unwrap_or(0);
        if bytes.len() >= 18 && be16(bytes, 12) == self.port_tpid(port) {
            let vid = be16(bytes, 14) & 0x0fff;
            if vid != 0 {
                return vid;
            }
        }
        pvid
    }

    /// Copies `f` (seen on `port`) for session `i` into `pending` if its list admits it.
    fn mirror_take(&mut self, i: usize, port: u16, f: &Frame, pending: &mut Pending) {
        if f.bytes.len() < 14 {
            self.mirrors[i].counters.drops[DropReason::Runt as usize] += 1;
            return;
        }
        let vlan = self.mirror_vlan(port, &f.bytes);
        if self.mirrors[i]
            .vids
            .as_ref()
            .is_some_and(|v| !v.contains(&vlan))
        {
            return;
        }
        pending.push((i, f.clone()));
    }

    /// Before forwarding: the rx copies of the batch.
    pub(crate) fn mirror_rx(&mut self, frames: &[Frame]) -> Pending {
        let mut pending = Vec::new();
        if self.mirrors.is_empty() {
            return pending;
        }
        for f in frames {
            let live = self.ports.get(f.port as usize).is_some_and(Option::is_some);
            if !live || !self.port(f.port).settings.up {
                continue;
            }
            for i in 0..self.mirrors.len() {
                let m = &self.mirrors[i];
                if m.direction != MirrorDirection::Tx && m.src.contains(&f.port) {
                    self.mirror_take(i, f.port, f, &mut pending);
                }
            }
        }
        pending
    }

    /// After forwarding: the tx copies of what the batch sent (`out`), then every copy
    /// delivered after it.
    pub(crate) fn mirror_deliver(&mut self, mut pending: Pending, out: &mut Vec<Frame>) {
        if self.mirrors.is_empty() {
            return;
        }
        let tx_ports: BTreeSet<u16> = self
            .mirrors
            .iter()
            .filter(|m| m.direction != MirrorDirection::Rx)
            .flat_map(|m| m.src.iter().copied())
            .collect();
        for p in tx_ports {
            let sent: Vec<Frame> = out.iter().filter(|f| f.port == p).cloned().collect();
            for f in &sent {
                for i in 0..self.mirrors.len() {
                    let m = &self.mirrors[i];
                    if m.direction != MirrorDirection::Rx && m.src.contains(&p) {
                        self.mirror_take(i, p, f, &mut pending);
                    }
                }
            }
        }
        for (i, mut f) in pending {
            let dst = self.mirrors[i].dst;
            if !self.port(dst).settings.up {
                self.mirrors[i].counters.drops[DropReason::PortDown as usize] += 1;
                continue;
            }
            let tpid = self.port_tpid(dst);
            if let Some(vid) = self.mirrors[i].rspan {
                let mut tag = tpid.to_be_bytes().to_vec();
                tag.extend_from_slice(&vid.to_be_bytes());
                f.bytes.splice(12..12, tag);
                f.meta = f.meta.moved_by(4);
            }
            if f.meta.wire_len(&f.bytes, tpid) > self.port_max_frame(dst) as usize {
                self.mirrors[i].counters.drops[DropReason::Oversize as usize] += 1;
                continue;
            }
            let len = f.bytes.len() as u64;
            let c = &mut self.mirrors[i].counters;
            c.frames += 1;
            c.bytes += len;
            let pc = &mut self.port_mut(dst).counters;
            pc.tx_frames += 1;
            pc.tx_bytes += len;
            f.port = dst;
            out.push(f);
        }
    }
}
