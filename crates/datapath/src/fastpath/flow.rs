//! The flow of a frame the pipeline forwarded alone: [`flow_for`], a pure function of the
//! plan, its FDB and the frames on the way (the worker's install and the exactness tests call
//! it), with [`qbridge_fastpath::compile`] checking that the output is the input with its tag
//! stack replaced.

use super::{fdb_key, Refusal};
use qbridge_bridge::{Plan, PortId};
use qbridge_fastpath::{FdbEntry, FdbKey, NotCached};

/// One bridge a frame crossed, as the worker that forwarded it alone saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub in_id: u16,
    /// The program's index of the ingress port's opening ([`super::port_index`]).
    pub in_index: u16,
    /// The frame's whole length as it entered.
    pub in_len: usize,
    /// [`qbridge_bridge::Forwarder::fast_class`] of the frame in this bridge.
    pub class: Option<qbridge_bridge::FastClass>,
    /// The one output: port id and the program's index of that port.
    pub out_id: u16,
    pub out_index: u16,
    /// The output's whole length.
    pub out_len: usize,
}

/// What a worker knows of a frame it forwarded alone, to make a flow of it: every bridge it
/// crossed (more than one when patch links joined them) and the frames on the way.
#[derive(Debug)]
pub struct Forwarded<'a> {
    pub plan: &'a Plan,
    pub hops: &'a [Crossing],
    /// `frames[i]`: the frame entering hop `i`, its first [`PREFIX`] bytes (or more);
    /// `frames[hops.len()]`: as it left the last.
    pub frames: &'a [&'a [u8]],
    /// The egress interface (the last hop's output port's); a bond's:
    /// [`super::bond::BOND_EGRESS`] (the program picks the member).
    pub out_ifindex: u32,
    /// The egress interface is a veth whose peer, in another namespace, has this address: a
    /// frame to it is redirected to the peer directly ([`qbridge_fastpath::ACT_PEER`]).
    pub out_peer_mac: Option<[u8; 6]>,
    /// The egress port is a TAP: the frame is delivered into its receive
    /// ([`qbridge_fastpath::ACT_INGRESS`]).
    pub out_into_host: bool,
    /// The egress port is a VXLAN port the program encapsulates for
    /// ([`qbridge_fastpath::ACT_VXLAN`], decision 73).
    pub out_vxlan: Option<&'a super::VxlanEgress>,
    /// The mirror copies the pipeline made of the frame, in its delivery order (decision
    /// 80); `flow_for` checks them against the plan's sessions byte for byte.
    pub copies: &'a [SeenCopy<'a>],
    pub generation: u32,
}

/// A mirror copy the pipeline made of a frame forwarded alone (decision 80): its destination
/// port as an output, and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct SeenCopy<'a> {
    pub port: u16,
    /// The program's index of the destination's opening.
    pub index: u16,
    /// The destination's interface (0: not one the program sends to).
    pub ifindex: u32,
    /// The copy's whole length.
    pub len: usize,
    /// Its first [`PREFIX`] bytes (or more).
    pub frame: &'a [u8],
}

/// Bytes of a frame a worker keeps to compare with what the pipeline sent: every tag and the
/// start of the payload (the pipeline edits tags only; `compile` checks the rest is equal).
pub const PREFIX: usize = 128;

/// A flow to install: its key and action, and the FDB map entries it relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPlan {
    pub key: qbridge_fastpath::FlowKey,
    pub action: qbridge_fastpath::FlowAction,
    /// Per hop, the destination's entry, and the source's when the ingress port learns or
    /// is locked;
    /// last-seen times on the engine's clock.
    pub fdb: Vec<(FdbKey, FdbEntry)>,
    /// To a VXLAN port: the tunnel the program encapsulates to (its index in the program's
    /// map is the action's `out_ifindex`, given when the flow is installed).
    pub tunnel: Option<qbridge_fastpath::Vxlan>,
    /// The flow's mirror copies ([`qbridge_fastpath::ACT_MIRROR`] in the action), written
    /// before the flow.
    pub mirror: Option<qbridge_fastpath::MirAction>,
}

/// What a frame forwarded alone left as, `sent` (each frame with its port, ports in order and
/// each port's frames in order), split with the plan's mirror sessions (decision 80): the
/// index of the frame itself and the indexes of the copies in the pipeline's delivery order.
/// The frame is the first on its port and the copies follow on their destinations: the port
/// whose first frame makes the plan's copies ([`Plan::fast_copies`]) match `sent` exactly is
/// the frame's. `Outputs`: no such port (a flood, a drop, a copy the pipeline dropped for
/// size); `Port`: a copy the program does not make (to a pcap file, to a destination that
/// is down).
pub fn split_copies(
    plan: &Plan,
    in_id: u16,
    input: &[u8],
    sent: &[(u16, &[u8])],
) -> Result<(usize, Vec<usize>), Refusal> {
    let mut used: Vec<u16> = sent.iter().map(|s| s.0).collect();
    used.dedup();
    if sent.is_empty() || sent.len() > 1 + qbridge_fastpath::MIR_COPIES {
        return Err(Refusal::Outputs);
    }
    for &c in &used {
        let Some(first) = sent.iter().position(|s| s.0 == c) else {
            continue;
        };
        let want = plan
            .fast_copies(PortId(in_id), input, PortId(c), sent[first].1)
            .ok_or(Refusal::Port)?;
        // Each port's frames in order: the frame first on its own.
        let mut next: Vec<(u16, usize)> = used.iter().map(|&j| (j, 0)).collect();
        let mut take = |port: u16| -> Option<usize> {
            let (_, k) = next.iter_mut().find(|(j, _)| *j == port)?;
            let i = sent
                .iter()
                .enumerate()
                .filter(|(_, s)| s.0 == port)
                .nth(*k)?
                .0;
            *k += 1;
            Some(i)
        };
        let frame = take(c);
        let copies: Option<Vec<usize>> = want
            .iter()
            .filter(|w| w.running)
            .map(|w| take(w.dst))
            .collect();
        let all_taken = next
            .iter()
            .all(|&(j, k)| sent.iter().filter(|s| s.0 == j).count() == k);
        if let (Some(frame), Some(copies), true) = (frame, copies, all_taken) {
            if copies.len() != want.len() {
                // A destination that does not run: its copies are dropped (`port_down`).
                return Err(Refusal::Port);
            }
            return Ok((frame, copies));
        }
    }
    Err(Refusal::Outputs)
}

/// The mirror copies of `f`'s frame the program must clone (decision 80): what the plan's
/// sessions copy of it, each checked against the copy the pipeline made (its destination,
/// length and bytes: the input, or the output for a tx copy, with the RSPAN tag pushed
/// outermost). `None`: no copies.
fn mirror_for(
    f: &Forwarded<'_>,
    generation: u32,
) -> Result<Option<qbridge_fastpath::MirAction>, Refusal> {
    if !f.plan.has_mirrors() {
        return if f.copies.is_empty() {
            Ok(None)
        } else {
            Err(Refusal::Outputs)
        };
    }
    let mut all = Vec::new();
    for (i, h) in f.hops.iter().enumerate() {
        let want = f
            .plan
            .fast_copies(
                PortId(h.in_id),
                f.frames[i],
                PortId(h.out_id),
                f.frames[i + 1],
            )
            .ok_or(Refusal::Port)?;
        // Copies inside a chain of patch links stay with the pipeline.
        if !want.is_empty() && f.hops.len() > 1 {
            return Err(Refusal::Port);
        }
        all.extend(want);
    }
    if all.len() != f.copies.len() {
        return Err(Refusal::Outputs);
    }
    if all.is_empty() {
        return Ok(None);
    }
    if all.len() > qbridge_fastpath::MIR_COPIES
        || f.out_vxlan.is_some()
        || f.out_ifindex == super::bond::BOND_EGRESS
    {
        return Err(Refusal::Port);
    }
    let (first, last) = (f.hops[0], f.hops[f.hops.len() - 1]);
    let mut m = qbridge_fastpath::MirAction {
        generation,
        n: all.len() as u8,
        ..Default::default()
    };
    for ((want, seen), slot) in all.iter().zip(f.copies).zip(m.copies.iter_mut()) {
        // The program pushes only the tags the kernel accelerates.
        let rspan_ok = want
            .rspan
            .is_none_or(|(tpid, _)| qbridge_wire::Tpid(tpid).is_kernel());
        if !want.running || seen.port != want.dst || seen.ifindex == 0 || !rspan_ok {
            return Err(Refusal::Port);
        }
        let (base, base_len) = if want.tx {
            (f.frames[f.hops.len()], last.out_len)
        } else {
            (f.frames[0], first.in_len)
        };
        let mut expect = base.to_vec();
        if let Some((tpid, vid)) = want.rspan {
            if expect.len() < 12 {
                return Err(Refusal::Rewrite);
            }
            let tag = [(tpid >> 8) as u8, tpid as u8, (vid >> 8) as u8, vid as u8];
            expect.splice(12..12, tag);
        }
        let rspan_len = if want.rspan.is_some() { 4 } else { 0 };
        let n = expect.len().min(seen.frame.len());
        if seen.len != base_len + rspan_len
            || expect[..n] != seen.frame[..n]
            || n < expect.len().min(PREFIX)
        {
            return Err(Refusal::Rewrite);
        }
        *slot = qbridge_fastpath::MirCopy {
            ifindex: seen.ifindex,
            port: u32::from(seen.index),
            max_len: want.max_frame.min(u32::from(u16::MAX)) as u16,
            rspan_tpid_be: want.rspan.map_or(0, |(t, _)| t.to_be()),
            rspan_tci_be: want.rspan.map_or(0, |(_, v)| v.to_be()),
            session: want.session,
            flags: if want.tx { qbridge_fastpath::MIR_TX } else { 0 },
        };
    }
    Ok(Some(m))
}

/// The flow of `f`, or why there is none: what the worker installs (a pure function of the
/// plan, its FDB and the frames; the exactness tests call it too).
pub fn flow_for(f: &Forwarded<'_>) -> Result<FlowPlan, Refusal> {
    let (first, last) = match (f.hops.first(), f.hops.last()) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(Refusal::Outputs),
    };
    if f.hops.len() > qbridge_fastpath::MAX_HOPS || f.frames.len() != f.hops.len() + 1 {
        return Err(Refusal::Port);
    }
    let out_ifindex = f.out_vxlan.map_or(f.out_ifindex, |v| v.underlay);
    if out_ifindex == 0 {
        return Err(Refusal::Port);
    }
    let input = f.frames[0];
    if input.len() < 14 {
        return Err(Refusal::Rewrite);
    }
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&input[..6]);
    src.copy_from_slice(&input[6..12]);
    let mac = qbridge_wire::MacAddr;
    let entry = |port: u16, seen: u64| FdbEntry {
        port: u32::from(port),
        version: 0,
        last_seen_ns: seen,
    };
    // Tags entering each hop, from the lengths (the program counts bytes so): the kernel's
    // TPIDs ([`qbridge_wire::Tpid::KERNEL`]), the program's.
    let tags0 = qbridge_io::port::kernel_tag_depth(input) as isize;
    let mut hops = Vec::with_capacity(f.hops.len());
    let mut fdb = Vec::with_capacity(2 * f.hops.len());
    let mut payload_max = i64::MAX;
    let mut extra = [0, 0];
    for (i, h) in f.hops.iter().enumerate() {
        let class = h.class.ok_or(Refusal::Outputs)?;
        let fin = f.plan.fast_port(PortId(h.in_id)).ok_or(Refusal::Port)?;
        let fout = f.plan.fast_port(PortId(h.out_id)).ok_or(Refusal::Port)?;
        if fin.bridge != class.bridge
            || fout.bridge != class.bridge
            || class.bridge >= qbridge_fastpath::MAX_BRIDGES
        {
            return Err(Refusal::Port);
        }
        if i == 0 && !qbridge_wire::Tpid(fin.tpid).is_kernel() {
            extra = [fin.tpid, 0];
        }
        // Every hop changes whole tags and nothing else (`compile` checks the ends).
        let (d_in, d_out) = (
            h.in_len as isize - first.in_len as isize,
            h.out_len as isize - first.in_len as isize,
        );
        if d_in % 4 != 0 || d_out % 4 != 0 {
            return Err(Refusal::Rewrite);
        }
        let (in_tags, out_tags) = (tags0 + d_in / 4, tags0 + d_out / 4);
        let most = qbridge_fastpath::maps::MAX_TAGS as isize;
        if !(0..=most).contains(&in_tags) || !(0..=most).contains(&out_tags) {
            return Err(Refusal::Rewrite);
        }
        if i > 0 && f.hops[i - 1].out_len != h.in_len {
            return Err(Refusal::Rewrite);
        }
        let d = f
            .plan
            .fdb_entry(class.bridge, mac(dst), class.fid)
            .filter(|e| e.forwards && e.port == h.out_id)
            .ok_or(Refusal::Fdb)?;
        fdb.push((
            fdb_key(class.bridge, dst, class.fid),
            entry(h.out_index, d.seen_ns),
        ));
        // A locked port's source must have an entry on it that forwards (not `locked`, not
        // the bridge's own), as the pipeline's `locked_admits` asks; the program checks it on
        // every hit, so a deleted, moved or locked entry makes the flow miss.
        if fin.learning || fin.locked {
            let s = f
                .plan
                .fdb_entry(class.bridge, mac(src), class.fid)
                .filter(|e| e.port == h.in_id && (e.forwards || !fin.locked))
                .ok_or(Refusal::Fdb)?;
            fdb.push((
                fdb_key(class.bridge, src, class.fid),
                entry(h.in_index, s.seen_ns),
            ));
        }
        // The pipeline's size checks (each port's, with the frame's tags there) as one on
        // the frame without tags.
        payload_max = payload_max
            .min(fin.max_frame as i64 - 4 * in_tags as i64)
            .min(fout.max_frame as i64 - 4 * out_tags as i64);
        hops.push(qbridge_fastpath::Hop {
            in_port: u32::from(h.in_index),
            out_port: u32::from(h.out_index),
            dst_version: 0,
            bridge: class.bridge,
            fid: class.fid,
            vlan_slot: class.bridge << 12 | (class.vid & 0xfff),
            rx_pcp: class.pcp,
            flags: if fin.learning {
                qbridge_fastpath::HOP_LEARNING
            } else {
                0
            } | if fin.locked {
                qbridge_fastpath::HOP_SRC
            } else {
                0
            },
            in_tags: in_tags as u8,
            out_tags: out_tags as u8,
            pad: 0,
        });
    }
    let output = f.frames[f.hops.len()];
    // The lengths differ by whole tags; compare the same span of payload.
    let delta = last.out_len as isize - first.in_len as isize;
    let mut out_prefix = (input.len() as isize + delta).clamp(0, output.len() as isize) as usize;
    let out_tags = hops.last().map_or(0, |h| h.out_tags);
    let mut max_len = (payload_max + 4 * i64::from(out_tags)).clamp(0, u16::MAX as i64) as u16;
    // A bond: the program picks the member per frame by the pipeline's hash (decision 74).
    let bond = f.out_ifindex == super::bond::BOND_EGRESS;
    let mut flags = match f.out_peer_mac {
        _ if bond => qbridge_fastpath::ACT_BOND,
        _ if f.out_into_host => qbridge_fastpath::ACT_INGRESS,
        Some(m) if m == dst => qbridge_fastpath::ACT_PEER,
        _ => 0,
    };
    // To a VXLAN port (decision 73): the inner frame as the port sends it (an external port's
    // VLAN tag removed), its VNI and the static entry's remote, read with the port's own
    // table; the tags the inner frame keeps (Q-in-VNI, decision 86) the program writes inside
    // the tunnel. It sends only what the socket would (the inner frame at most the underlay's
    // MTU less 36 bytes, 56 over IPv6: max_inner).
    let mut inner = Vec::new();
    let tunnel = match f.out_vxlan {
        None => None,
        Some(v) => {
            let (frame, t) =
                super::vxlan::tunnel_for(v, &output[..out_prefix]).ok_or(Refusal::Fdb)?;
            // Q-in-VNI (decision 86): tags the inner frame keeps ride inside the tunnel.
            if qbridge_io::port::kernel_tag_depth(&frame) > qbridge_fastpath::maps::MAX_TAGS {
                return Err(Refusal::Rewrite);
            }
            let sent_tags = (out_prefix - frame.len()) / 4;
            max_len = (payload_max + 4 * i64::from(out_tags) - 4 * sent_tags as i64)
                .min(v.max_inner())
                .clamp(0, u16::MAX as i64) as u16;
            flags = qbridge_fastpath::ACT_VXLAN;
            out_prefix = frame.len();
            inner = frame;
            Some(t)
        }
    };
    // vxl_: a learned remote's tunnel names the VXLAN port, qb_vxl_learned's key (decision 83).
    let tunnel = tunnel.map(|mut t| {
        if t.flags & qbridge_fastpath::VX_LEARNED != 0 {
            t.vxl_port = hops.last().map_or(0, |h| h.out_port as u16);
        }
        t
    });
    let output: &[u8] = if tunnel.is_some() { &inner } else { output };
    let (key, action) = qbridge_fastpath::compile(&qbridge_fastpath::Decision {
        in_extra_tpids: extra,
        input,
        output: &output[..out_prefix],
        out_ifindex: if bond { 0 } else { out_ifindex },
        hops: &hops,
        flags,
        generation: f.generation,
        min_len: 14,
        max_len,
    })
    .map_err(|e| match e {
        NotCached::Short | NotCached::Tags | NotCached::Rewrite => Refusal::Rewrite,
        NotCached::Group => Refusal::Outputs,
    })?;
    let mut action = action;
    let mirror = mirror_for(f, f.generation)?;
    if mirror.is_some() {
        action.flags |= qbridge_fastpath::ACT_MIRROR;
    }
    if tunnel.is_some() {
        // The port counts the frame as the pipeline handed it (with an external port's tag).
        if let Some(h) = action.hops.get_mut(f.hops.len() - 1) {
            h.out_tags = out_tags;
        }
    }
    Ok(FlowPlan {
        key,
        action,
        fdb,
        tunnel,
        mirror,
    })
}
