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

use crate::cells::PortCells;
use crate::config::{VlanProtocol, GROUP_FWD_8021AD};
use crate::counters::DropReason;
use crate::fdb::{Learned, Table, TableCache, F_PERMANENT};
use crate::switch::{Bridge, Outputs, Plan, Port, Worker};
use qbridge_packet::{Batch, PacketBuf};
use qbridge_wire::parse_headers;
use std::sync::Arc;

type Ports = [Option<Arc<Port>>];

/// The I/G bit of a MAC held in the low 48 bits of a u64.
const MAC_GROUP_BIT: u64 = 1 << 40;
const MAC_BROADCAST: u64 = 0xffff_ffff_ffff;
/// 01-80-C2-00-00-00: the IEEE 802.1D reserved groups are this plus 0..=15.
const LINK_LOCAL_BASE: u64 = 0x0180_c200_0000;

/// FDB key of a 48-bit MAC in FID `fid` (see `fdb::fdb_key`).
#[inline(always)]
fn fid_key(mac: u64, fid: u16) -> u64 {
    mac | ((fid as u64 & 0x0fff) << 48)
}

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

/// Where a frame goes after the decision: one port (the buffer moves there), or nowhere (it was
/// dropped and counted, and goes back to the pool).
type Verdict = Option<usize>;

impl Plan {
    /// Forwards every frame of `rx` (each buffer's `port` is its ingress port id) at time
    /// `now_ns` as worker `w`, appending what leaves to `out.ports[egress]`. `rx` is left
    /// empty. Any number of workers may call this on one plan at once, each with its own
    /// [`Worker`] and [`Outputs`].
    pub fn process(&self, w: &mut Worker, now_ns: u64, rx: &mut Batch, out: &mut Outputs) {
        out.ensure(self.ports.len());
        let Plan {
            bridges,
            ports,
            unknown_port_drops,
        } = self;
        let Worker {
            index,
            scratch,
            tables,
        } = w;
        let wi = *index;
        if tables.len() < bridges.len() {
            tables.resize_with(bridges.len(), TableCache::default);
        }
        if rx.len() > 1 {
            warm_fdb(bridges, ports, tables, &rx.pkts);
        }
        for mut pkt in rx.pkts.drain(..) {
            let in_id = pkt.port as usize;
            let verdict = match ports.get(in_id) {
                Some(Some(inp)) => {
                    let (br, cache) = match inp.master {
                        Some(b) => (bridges[b as usize].as_deref(), tables.get_mut(b as usize)),
                        None => (None, None),
                    };
                    forward(
                        br, cache, ports, inp, in_id, wi, scratch, now_ns, &mut pkt, out,
                    )
                }
                _ => {
                    if let Some(u) = unknown_port_drops {
                        u.writer(wi).add(1);
                    }
                    None
                }
            };
            match verdict {
                Some(e) => out.ports[e].push(pkt),
                None => out.pool.put(pkt),
            }
        }
    }
}

/// Tables smaller than this stay in cache and are not worth a warming pass.
const FDB_WARM_MIN_SLOTS: usize = 1 << 17;

/// First pass over a batch: touch the FDB home slots of every frame's source and destination
/// so the misses of a large table overlap (memory-level parallelism) before the main pass,
/// which then finds them cached. Reads only; every decision is made in the main pass.
#[inline(never)]
fn warm_fdb(
    bridges: &[Option<Arc<Bridge>>],
    ports: &Ports,
    tables: &mut [TableCache],
    pkts: &[PacketBuf],
) {
    let mut acc = 0u64;
    for pkt in pkts {
        let Some(Some(inp)) = ports.get(pkt.port as usize) else {
            continue;
        };
        let Some(b) = inp.master else { continue };
        let Some(Some(br)) = bridges.get(b as usize) else {
            continue;
        };
        let t = tables[b as usize].get(&br.fdb);
        if t.capacity() < FDB_WARM_MIN_SLOTS {
            continue;
        }
        let Some(h) = pkt.frame().first_chunk::<16>() else {
            continue;
        };
        let dst = u64::from_be_bytes([0, 0, h[0], h[1], h[2], h[3], h[4], h[5]]);
        let src = u64::from_be_bytes([0, 0, h[6], h[7], h[8], h[9], h[10], h[11]]);
        let vid = if !br.settings.vlan_filtering {
            0
        } else if u16::from_be_bytes([h[12], h[13]]) == inp.tpid {
            u16::from_be_bytes([h[14], h[15]]) & 0x0fff
        } else {
            inp.pvid
        };
        acc ^= t.touch(fid_key(src, vid)) ^ t.touch(fid_key(dst, vid));
    }
    std::hint::black_box(acc);
}

/// Length the frame has on the wire: its length, or for a GSO super-frame the length of its
/// largest segment — the real headers plus `gso_size`. Headers are parsed through the
/// well-known TPIDs and the TPID of the port judging (`tpid`). The `hdr_len` a sender puts in the
/// virtio-net header is not trusted: Linux fills it with the length of the skb's linear part,
/// which can include payload.
#[inline(always)]
fn wire_len(pkt: &PacketBuf, tpid: u16) -> usize {
    if pkt.offload.is_gso() {
        gso_segment_len(pkt, tpid)
    } else {
        pkt.len()
    }
}

#[cold]
#[inline(never)]
fn gso_segment_len(pkt: &PacketBuf, tpid: u16) -> usize {
    let len = pkt.len();
    match parse_headers(pkt.frame(), |t| t.is_well_known() || t.0 == tpid) {
        Ok(h) => match h.payload_offset {
            Some(hdrs) => (hdrs + pkt.offload.gso_size as usize).min(len),
            None => len,
        },
        // Not a parsable TCP/UDP super-frame: judged whole.
        Err(_) => len,
    }
}

#[cold]
#[inline(never)]
fn drop(counters: &PortCells, reason: DropReason) -> Verdict {
    counters.drop(reason);
    None
}

#[inline(always)]
fn be16(b: &[u8; 18], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn forward(
    br: Option<&Bridge>,
    cache: Option<&mut TableCache>,
    ports: &Ports,
    inp: &Port,
    in_id: usize,
    wi: usize,
    scratch: &mut Vec<u16>,
    now_ns: u64,
    pkt: &mut PacketBuf,
    out: &mut Outputs,
) -> Verdict {
    let len = pkt.len();
    let c = inp.counters.writer(wi);
    c.rx_frames.add(1);
    c.rx_bytes.add(len as u64);
    if !inp.running {
        return drop(c, DropReason::PortDown);
    }
    let (Some(br), Some(cache)) = (br, cache) else {
        return drop(c, DropReason::NoBridge);
    };
    if len < 14 {
        return drop(c, DropReason::Runt);
    }
    if wire_len(pkt, inp.tpid) > inp.max_frame as usize {
        return drop(c, DropReason::Oversize);
    }
    // The first 18 bytes (two MACs and one tag), zero-padded for 14..17-byte frames whose tag
    // is checked against `len` below: one bounds check for the whole header.
    let mut hdr = [0u8; 18];
    let n = len.min(18);
    hdr[..n].copy_from_slice(&pkt.frame()[..n]);
    // MACs as 48-bit integers: the class tests below are single compares.
    let dst = u64::from_be_bytes([0, 0, hdr[0], hdr[1], hdr[2], hdr[3], hdr[4], hdr[5]]);
    let src = u64::from_be_bytes([0, 0, hdr[6], hdr[7], hdr[8], hdr[9], hdr[10], hdr[11]]);
    if src & MAC_GROUP_BIT != 0 || src == 0 {
        return drop(c, DropReason::InvalidSrcMac);
    }
    if dst & !0xf == LINK_LOCAL_BASE {
        let group = (dst & 0xf) as u8;
        let mut mask = br.settings.group_fwd_mask;
        if br.settings.vlan_protocol == VlanProtocol::Dot1Ad {
            mask |= GROUP_FWD_8021AD;
        }
        // No STP in qbridge: 01-80-C2-00-00-00 is forwarded, as by a Linux bridge with STP off.
        let forwarded = group == 0 || (group != 1 && mask & (1 << group) != 0);
        if !forwarded {
            return drop(c, DropReason::LinkLocal);
        }
    }
    let filtering = br.settings.vlan_filtering;
    let class = if filtering {
        let class = if be16(&hdr, 12) == inp.tpid {
            if len < 18 {
                return drop(c, DropReason::Runt);
            }
            let tci = be16(&hdr, 14);
            let vid = match tci & 0x0fff {
                0x0fff => return drop(c, DropReason::ReservedVid),
                0 if inp.pvid == 0 => return drop(c, DropReason::NoPvid),
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
                return drop(c, DropReason::NoPvid);
            }
            Class {
                vid: inp.pvid,
                tagged: false,
                tci_hi: 0,
            }
        };
        if !inp.member.contains(class.vid) {
            return drop(c, DropReason::VlanNotMember);
        }
        class
    } else {
        Class {
            vid: 0,
            tagged: false,
            tci_hi: 0,
        }
    };
    let vc = br.vlan_counters.writer(wi, class.vid);
    vc.rx_frames.add(1);
    vc.rx_bytes.add(len as u64);

    // ageing_time 0 makes every dynamic entry expire at once: nothing is learned and dynamic
    // entries are not used, so the bridge floods like a hub (as Linux does).
    let ageing_off = br.settings.ageing_time_ns == 0;
    let mut table: &Table = cache.get(&br.fdb);
    if inp.settings.learning && !ageing_off {
        let learned = br.fdb.learn(
            table,
            fid_key(src, class.vid),
            in_id as u16,
            now_ns,
            br.settings.fdb_max_learned,
            inp.settings.fdb_max_learned,
        );
        match learned {
            Learned::Kept => {}
            Learned::New => table = cache.get(&br.fdb),
            Learned::Moved => {
                c.fdb_moves.add(1);
                table = cache.get(&br.fdb);
            }
            Learned::Refused => c.fdb_learn_refused.add(1),
            Learned::NewEvicting { port } => {
                if let Some(Some(v)) = ports.get(port as usize) {
                    v.counters.writer(wi).fdb_evictions.add(1);
                }
                table = cache.get(&br.fdb);
            }
        }
    }

    let flood_class = if dst == MAC_BROADCAST {
        FloodClass::Broadcast
    } else if dst & MAC_GROUP_BIT != 0 {
        FloodClass::Multicast
    } else {
        match table.find(fid_key(dst, class.vid)) {
            Some((_, entry)) if !(ageing_off && entry.ages()) => {
                if entry.flags & F_PERMANENT != 0 {
                    return drop(c, DropReason::Local);
                }
                let e = entry.port as usize;
                if e == in_id && !inp.settings.hairpin {
                    return drop(c, DropReason::SamePort);
                }
                let Some(ep) = ports[e].as_deref() else {
                    return drop(c, DropReason::EgressDown);
                };
                if filtering && !ep.member.contains(class.vid) {
                    return drop(c, DropReason::EgressNotMember);
                }
                if !ep.running {
                    return drop(c, DropReason::EgressDown);
                }
                if inp.settings.isolated && ep.settings.isolated {
                    return drop(c, DropReason::Isolated);
                }
                return egress(br, ep, e, wi, class, filtering, pkt);
            }
            _ => FloodClass::Unknown,
        }
    };
    flood(
        br,
        ports,
        inp,
        in_id,
        wi,
        scratch,
        class,
        filtering,
        flood_class,
        pkt,
        out,
    )
}

/// Floods to the VID's member ports that the flags, isolation and hairpin allow: pool copies to
/// all targets but the last, which gets the original buffer (returned as the verdict).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn flood(
    br: &Bridge,
    ports: &Ports,
    inp: &Port,
    in_id: usize,
    wi: usize,
    scratch: &mut Vec<u16>,
    class: Class,
    filtering: bool,
    flood_class: FloodClass,
    pkt: &mut PacketBuf,
    out: &mut Outputs,
) -> Verdict {
    let list = &br.flood[class.vid as usize & 0x0fff];
    scratch.clear();
    for &p in list.iter() {
        let Some(ep) = ports[p as usize].as_deref() else {
            continue;
        };
        let s = &ep.settings;
        let allowed = match flood_class {
            FloodClass::Unknown => s.flood,
            FloodClass::Broadcast => s.bcast_flood,
            FloodClass::Multicast => s.mcast_flood,
        };
        if !allowed
            || !ep.running
            || (p as usize == in_id && !inp.settings.hairpin)
            || (inp.settings.isolated && s.isolated)
        {
            continue;
        }
        scratch.push(p);
    }
    let Some((&last, rest)) = scratch.split_last() else {
        return drop(inp.counters.writer(wi), DropReason::NoDestination);
    };
    for &p in rest {
        let mut copy = out.pool.get();
        copy.copy_from(pkt);
        let ep = ports[p as usize].as_deref().expect("listed port exists");
        match egress(br, ep, p as usize, wi, class, filtering, &mut copy) {
            Some(e) => out.ports[e].push(copy),
            None => out.pool.put(copy),
        }
    }
    let ep = ports[last as usize].as_deref().expect("listed port exists");
    egress(br, ep, last as usize, wi, class, filtering, pkt)
}

/// Rewrites the bridge tag for egress port `ep` and checks the size; counts the frame.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn egress(
    br: &Bridge,
    ep: &Port,
    e: usize,
    wi: usize,
    class: Class,
    filtering: bool,
    pkt: &mut PacketBuf,
) -> Verdict {
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
    let c = ep.counters.writer(wi);
    if wire_len(pkt, ep.tpid) > ep.max_frame as usize {
        return drop(c, DropReason::Oversize);
    }
    c.tx_frames.add(1);
    c.tx_bytes.add(len as u64);
    let vc = br.vlan_counters.writer(wi, class.vid);
    vc.tx_frames.add(1);
    vc.tx_bytes.add(len as u64);
    pkt.port = e as u16;
    Some(e)
}
