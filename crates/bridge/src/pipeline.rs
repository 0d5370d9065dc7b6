//! The batch pipeline: classify, filter, learn, look up, rewrite, size-check, queue.
//!
//! One call handles a whole batch; each frame is decided once and its buffer moves to exactly
//! one place: an output batch, or back to the pool with a counted [`DropReason`]. Flooding sends
//! pool copies to all targets but the last, which gets the original buffer. Nothing here
//! allocates after warm-up, takes a lock, makes a syscall or calls through a `dyn`.
//!
//! Order of checks (the reference model follows the same order, see docs/semantics.md):
//! port down, no bridge, runt, oversize (ingress), invalid source MAC, link-local group,
//! VLAN classification (runt tag, reserved VID, no PVID), ingress filter, learning, then
//! forwarding: local, same port, egress filter, egress down, isolation, or flooding; and per copy
//! the oversize check on the egress port after the tag rewrite.

use crate::config::{VlanProtocol, GROUP_FWD_8021AD};
use crate::counters::{DropReason, PortCounters};
use crate::fdb::{fdb_key, Learned, F_PERMANENT};
use crate::switch::{Bridge, Outputs, Port, Switch};
use qbridge_packet::{Batch, BufPool, PacketBuf};
use qbridge_wire::MacAddr;

/// What the frame's bridge tag looks like on ingress.
#[derive(Clone, Copy)]
struct Class {
    /// VID (FID); 0 on a VLAN-unaware bridge.
    vid: u16,
    /// The frame carries a bridge tag at offset 12 (tagged or priority-tagged).
    tagged: bool,
    /// PCP and DEI bits to keep when the tag is rewritten.
    tci_hi: u16,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FloodClass {
    Unknown,
    Broadcast,
    Multicast,
}

impl Switch {
    /// Forwards every frame of `rx` (each buffer's `port` is its ingress port id) at time
    /// `now_ns`, appending what leaves to `out.ports[egress]`. `rx` is left empty.
    pub fn process(&mut self, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        if now_ns > self.now_ns {
            self.now_ns = now_ns;
        }
        out.ensure(self.ports.len());
        let Switch {
            bridges,
            ports,
            counters,
            scratch,
            unknown_port_drops,
            ..
        } = self;
        for pkt in rx.pkts.drain(..) {
            let in_id = pkt.port as usize;
            let Some(Some(inp)) = ports.get(in_id) else {
                *unknown_port_drops += 1;
                out.pool.put(pkt);
                continue;
            };
            let br = match inp.master {
                Some(b) => bridges[b as usize].as_mut(),
                None => None,
            };
            forward(br, ports, inp, in_id, counters, scratch, now_ns, pkt, out);
        }
    }
}

#[cold]
fn drop(counters: &mut PortCounters, reason: DropReason, pkt: PacketBuf, pool: &mut BufPool) {
    counters.drop(reason);
    pool.put(pkt);
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn forward(
    br: Option<&mut Bridge>,
    ports: &[Option<Port>],
    inp: &Port,
    in_id: usize,
    counters: &mut [PortCounters],
    scratch: &mut Vec<u16>,
    now_ns: u64,
    pkt: PacketBuf,
    out: &mut Outputs,
) {
    let len = pkt.len();
    let c = &mut counters[in_id];
    c.rx_frames += 1;
    c.rx_bytes += len as u64;
    let pool = &mut out.pool;
    if !inp.settings.up {
        return drop(c, DropReason::PortDown, pkt, pool);
    }
    let Some(br) = br else {
        return drop(c, DropReason::NoBridge, pkt, pool);
    };
    if len < 14 {
        return drop(c, DropReason::Runt, pkt, pool);
    }
    if pkt.offload.segment_len(len) > inp.max_frame as usize {
        return drop(c, DropReason::Oversize, pkt, pool);
    }
    let frame = pkt.frame();
    let dst = MacAddr::from_bytes(&frame[0..6]);
    let src = MacAddr::from_bytes(&frame[6..12]);
    if src.is_multicast() || src.is_zero() {
        return drop(c, DropReason::InvalidSrcMac, pkt, pool);
    }
    if let Some(group) = dst.link_local_group() {
        let mut mask = br.settings.group_fwd_mask;
        if br.settings.vlan_protocol == VlanProtocol::Dot1Ad {
            mask |= GROUP_FWD_8021AD;
        }
        // No STP in qbridge: 01-80-C2-00-00-00 is forwarded, as by a Linux bridge with STP off.
        let forwarded = group == 0 || (group != 1 && mask & (1 << group) != 0);
        if !forwarded {
            return drop(c, DropReason::LinkLocal, pkt, pool);
        }
    }
    let filtering = br.settings.vlan_filtering;
    let class = if filtering {
        let class = if be16(frame, 12) == inp.tpid {
            if len < 18 {
                return drop(c, DropReason::Runt, pkt, pool);
            }
            let tci = be16(frame, 14);
            let vid = match tci & 0x0fff {
                0x0fff => return drop(c, DropReason::ReservedVid, pkt, pool),
                0 if inp.pvid == 0 => return drop(c, DropReason::NoPvid, pkt, pool),
                0 => inp.pvid,
                v => v,
            };
            Class {
                vid,
                tagged: true,
                tci_hi: tci & 0xf000,
            }
        } else {
            if inp.pvid == 0 {
                return drop(c, DropReason::NoPvid, pkt, pool);
            }
            Class {
                vid: inp.pvid,
                tagged: false,
                tci_hi: 0,
            }
        };
        if !inp.member.contains(class.vid) {
            return drop(c, DropReason::VlanNotMember, pkt, pool);
        }
        class
    } else {
        Class {
            vid: 0,
            tagged: false,
            tci_hi: 0,
        }
    };
    let vc = &mut br.vlan_counters[class.vid as usize];
    vc.rx_frames += 1;
    vc.rx_bytes += len as u64;

    if inp.settings.learning {
        let learned = br.fdb.learn(
            fdb_key(src, class.vid),
            in_id as u16,
            now_ns,
            br.settings.fdb_max_learned,
            inp.settings.fdb_max_learned,
        );
        match learned {
            Learned::Kept | Learned::New => {}
            Learned::Moved => counters[in_id].fdb_moves += 1,
            Learned::Refused => counters[in_id].fdb_learn_refused += 1,
            Learned::NewEvicting { port } => counters[port as usize].fdb_evictions += 1,
        }
    }

    let flood_class = if dst.is_broadcast() {
        FloodClass::Broadcast
    } else if dst.is_multicast() {
        FloodClass::Multicast
    } else {
        match br.fdb.get(fdb_key(dst, class.vid)) {
            Some(entry) => {
                let c = &mut counters[in_id];
                if entry.flags & F_PERMANENT != 0 {
                    return drop(c, DropReason::Local, pkt, &mut out.pool);
                }
                let e = entry.port as usize;
                if e == in_id && !inp.settings.hairpin {
                    return drop(c, DropReason::SamePort, pkt, &mut out.pool);
                }
                let Some(ep) = ports[e].as_ref() else {
                    return drop(c, DropReason::EgressDown, pkt, &mut out.pool);
                };
                if filtering && !ep.member.contains(class.vid) {
                    return drop(c, DropReason::EgressNotMember, pkt, &mut out.pool);
                }
                if !ep.settings.up {
                    return drop(c, DropReason::EgressDown, pkt, &mut out.pool);
                }
                if inp.settings.isolated && ep.settings.isolated {
                    return drop(c, DropReason::Isolated, pkt, &mut out.pool);
                }
                return emit(br, ep, e, counters, class, filtering, pkt, out);
            }
            None => FloodClass::Unknown,
        }
    };

    // Flood to the VID's member ports that the flags, isolation and hairpin allow.
    let vid = class.vid as usize;
    let list = &br.flood_ports[br.flood_off[vid] as usize..br.flood_off[vid + 1] as usize];
    scratch.clear();
    for &p in list {
        let Some(ep) = ports[p as usize].as_ref() else {
            continue;
        };
        let s = &ep.settings;
        let allowed = match flood_class {
            FloodClass::Unknown => s.flood,
            FloodClass::Broadcast => s.bcast_flood,
            FloodClass::Multicast => s.mcast_flood,
        };
        if !allowed
            || !s.up
            || (p as usize == in_id && !inp.settings.hairpin)
            || (inp.settings.isolated && s.isolated)
        {
            continue;
        }
        scratch.push(p);
    }
    let Some((&last, rest)) = scratch.split_last() else {
        return drop(
            &mut counters[in_id],
            DropReason::NoDestination,
            pkt,
            &mut out.pool,
        );
    };
    for &p in rest {
        let mut copy = out.pool.get();
        copy.copy_from(&pkt);
        let ep = ports[p as usize].as_ref().expect("listed port exists");
        emit(br, ep, p as usize, counters, class, filtering, copy, out);
    }
    let ep = ports[last as usize].as_ref().expect("listed port exists");
    emit(br, ep, last as usize, counters, class, filtering, pkt, out);
}

/// Rewrites the bridge tag for egress port `ep`, checks the size and queues the frame.
#[allow(clippy::too_many_arguments)]
#[inline]
fn emit(
    br: &mut Bridge,
    ep: &Port,
    e: usize,
    counters: &mut [PortCounters],
    class: Class,
    filtering: bool,
    mut pkt: PacketBuf,
    out: &mut Outputs,
) {
    if filtering {
        if ep.untagged.contains(class.vid) {
            if class.tagged {
                pkt.remove_tag(12);
                pkt.offload.shift_headers(-4);
            }
        } else {
            let tci = class.tci_hi | class.vid;
            let tag = [
                (ep.tpid >> 8) as u8,
                ep.tpid as u8,
                (tci >> 8) as u8,
                tci as u8,
            ];
            if class.tagged {
                pkt.frame_mut()[12..16].copy_from_slice(&tag);
            } else {
                pkt.insert_tag(12, tag);
                pkt.offload.shift_headers(4);
            }
        }
    }
    let len = pkt.len();
    let c = &mut counters[e];
    if pkt.offload.segment_len(len) > ep.max_frame as usize {
        return drop(c, DropReason::Oversize, pkt, &mut out.pool);
    }
    c.tx_frames += 1;
    c.tx_bytes += len as u64;
    let vc = &mut br.vlan_counters[class.vid as usize];
    vc.tx_frames += 1;
    vc.tx_bytes += len as u64;
    pkt.port = e as u16;
    out.ports[e].push(pkt);
}
