//! A flow from a forwarded frame: the pipeline forwarded `input` (as received on port
//! `in_port`) as `output` (as sent on one egress port); if `output` is `input` with its tag
//! stack replaced — same addresses, same EtherType and payload — the decision is the flow
//! `key → pop the input's tags, push the output's`, which the program executes without
//! knowing any tagging rule. Anything else the pipeline did (a tag the program cannot edit,
//! a rewrite beyond the tags) is not cached, with the reason.

use crate::maps::{FlowAction, FlowKey, Hop, MAX_HOPS, MAX_TAGS};
use qbridge_wire::{TagStack, Tpid};

/// What the pipeline decided for one frame, and what the flow needs besides the two frames.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    /// TPIDs the ingress port takes as tags besides 0x8100/0x88a8 (0: none).
    pub in_extra_tpids: [u16; 2],
    /// The frame as received (tags inline, as on the wire).
    pub input: &'a [u8],
    /// The frame as the pipeline sent it on the egress port.
    pub output: &'a [u8],
    pub out_ifindex: u32,
    /// Every bridge the frame crossed, in order: the first's `in_port` is the ingress port's
    /// index (the key's), the last's `out_port` the egress port's. The first's `in_tags` and
    /// the last's `out_tags` are the frames' (filled in here); the others are the caller's.
    pub hops: &'a [Hop],
    /// [`crate::maps::ACT_PEER`] or 0.
    pub flags: u8,
    pub generation: u32,
    /// The frame lengths the pipeline treats alike: shorter ones (as received) are runts to
    /// it, longer ones (as sent) too long for a port on the way.
    pub min_len: u16,
    pub max_len: u16,
}

/// Why a decision is not cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCached {
    /// Either frame is shorter than its headers.
    Short,
    /// The destination is a group address (floods are never cached).
    Group,
    /// More tags than the program edits, or an input TPID the ingress port takes (or the
    /// pipeline parses anyway: [`Tpid::WELL_KNOWN`]) that the program does not parse. (An
    /// output tag of another TPID is not a tag to the program: that output reads as
    /// [`NotCached::Rewrite`].)
    Tags,
    /// The output differs from the input beyond the tag stack, or the hops do not chain
    /// (none, more than [`MAX_HOPS`], tag counts that do not follow).
    Rewrite,
}

/// The tags at the front of `frame` (after the addresses) that the program parses: up to
/// [`MAX_TAGS`] of the kernel's TPIDs ([`Tpid::KERNEL`], read by `qbridge_wire`'s one tag
/// parser); then the EtherType and the payload's offset. `Short` when the frame is too short;
/// `Tags` when there are more, or the EtherType is a TPID in `extra` or another of
/// [`Tpid::WELL_KNOWN`] (the pipeline parses those on any port and may read that tag: a port
/// that copies the PCP of a frame's own outer tag does; the program sends such a frame up).
pub fn tags(frame: &[u8], extra: [u16; 2]) -> Result<(TagStack, u16, usize), NotCached> {
    let after_macs = frame.get(12..).ok_or(NotCached::Short)?;
    let (stack, proto) = TagStack::parse(after_macs, Tpid::is_kernel).map_err(|e| match e {
        qbridge_wire::Error::TooManyTags => NotCached::Tags,
        _ => NotCached::Short,
    })?;
    if stack.len() > MAX_TAGS
        || extra.iter().any(|&t| t != 0 && t == proto)
        || Tpid(proto).is_well_known()
    {
        return Err(NotCached::Tags);
    }
    Ok((stack, proto, 14 + stack.wire_len()))
}

/// The key the program looks `frame`, received on the port of index `in_port`, up by (`None`:
/// a frame the program sends up before any lookup). `trace live` finds a hit's flow with it.
pub fn key_of(frame: &[u8], in_port: u32, extra: [u16; 2]) -> Option<FlowKey> {
    let (tags, proto, _) = tags(frame, extra).ok()?;
    Some(key(in_port, frame, &tags, proto))
}

fn key(in_port: u32, frame: &[u8], tags: &TagStack, proto: u16) -> FlowKey {
    let mut key = FlowKey {
        in_port,
        ntags: tags.len() as u8,
        ethertype_be: proto.to_be(),
        ..FlowKey::default()
    };
    key.dst.copy_from_slice(&frame[..6]);
    for (i, t) in tags.as_slice().iter().enumerate() {
        key.tpid_be[i] = t.tpid.0.to_be();
        key.tci_be[i] = t.tci.0.to_be();
    }
    key
}

/// The flow of `d`, or why there is none.
pub fn compile(d: &Decision<'_>) -> Result<(FlowKey, FlowAction), NotCached> {
    if d.input.len() < 14 || d.output.len() < 14 {
        return Err(NotCached::Short);
    }
    if d.input[0] & 1 != 0 {
        return Err(NotCached::Group);
    }
    let (in_tags, proto, in_payload) = tags(d.input, d.in_extra_tpids)?;
    let (out_tags, out_proto, out_payload) = tags(d.output, [0, 0])?;
    if d.input[..12] != d.output[..12]
        || proto != out_proto
        || d.input[in_payload..] != d.output[out_payload..]
    {
        return Err(NotCached::Rewrite);
    }
    if d.hops.is_empty() || d.hops.len() > MAX_HOPS {
        return Err(NotCached::Rewrite);
    }
    let mut hops = [Hop::default(); MAX_HOPS];
    hops[..d.hops.len()].copy_from_slice(d.hops);
    let last = d.hops.len() - 1;
    hops[0].in_tags = in_tags.len() as u8;
    hops[last].out_tags = out_tags.len() as u8;
    if (0..last).any(|i| hops[i].out_tags != hops[i + 1].in_tags) {
        return Err(NotCached::Rewrite);
    }
    let key = key(hops[0].in_port, d.input, &in_tags, proto);
    let mut action = FlowAction {
        generation: d.generation,
        out_ifindex: d.out_ifindex,
        min_len: d.min_len,
        max_len: d.max_len,
        push_n: out_tags.len() as u8,
        n_hops: d.hops.len() as u8,
        flags: d.flags,
        hops,
        ..FlowAction::default()
    };
    for (i, t) in out_tags.as_slice().iter().enumerate() {
        action.push_tpid_be[i] = t.tpid.0.to_be();
        action.push_tci_be[i] = t.tci.0.to_be();
    }
    Ok((key, action))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
        for (t, c) in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&c.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    const HOP: [Hop; 1] = [Hop {
        in_port: 3,
        out_port: 4,
        dst_version: 9,
        bridge: 0,
        fid: 10,
        vlan_slot: 10,
        rx_pcp: 0,
        flags: 0,
        in_tags: 0,
        out_tags: 0,
        pad: 0,
    }];

    fn decision<'a>(input: &'a [u8], output: &'a [u8]) -> Decision<'a> {
        Decision {
            in_extra_tpids: [0x9100, 0],
            input,
            output,
            out_ifindex: 42,
            hops: &HOP,
            flags: 0,
            generation: 5,
            min_len: 60,
            max_len: 1522,
        }
    }

    #[test]
    fn the_tag_stacks_become_the_key_and_the_push() {
        let p = [0x45u8; 50];
        let input = frame(&[], 0x0800, &p);
        let output = frame(&[(0x88a8, 100), (0x8100, 0x200a)], 0x0800, &p);
        let (k, a) = compile(&decision(&input, &output)).unwrap();
        assert_eq!((k.in_port, k.ntags, k.dst), (3, 0, [2, 0, 0, 0, 0, 0xb]));
        assert_eq!(u16::from_be(k.ethertype_be), 0x0800);
        assert_eq!(a.push_n, 2);
        assert_eq!(a.push_tpid_be.map(u16::from_be), [0x88a8, 0x8100]);
        assert_eq!(a.push_tci_be.map(u16::from_be), [100, 0x200a]);
        assert_eq!(
            (
                a.out_ifindex,
                a.out_port(),
                a.hops[0].fid,
                a.hops[0].dst_version,
                a.generation
            ),
            (42, 4, 10, 9, 5)
        );
        assert_eq!((a.n_hops, a.hops[0].in_tags, a.hops[0].out_tags), (1, 0, 2));
        // The way back: two tags in, one out (a rewrite of VID and PCP).
        let (k, a) = compile(&decision(&output, &frame(&[(0x8100, 7)], 0x0800, &p))).unwrap();
        assert_eq!(k.ntags, 2);
        assert_eq!(k.tci_be.map(u16::from_be), [100, 0x200a]);
        assert_eq!((a.push_n, u16::from_be(a.push_tci_be[0])), (1, 7));
    }

    #[test]
    fn hops_chain_by_their_tags() {
        let p = [0x45u8; 50];
        let input = frame(&[], 0x0800, &p);
        let output = frame(&[(0x88a8, 100), (0x8100, 10)], 0x0800, &p);
        // Through a customer bridge (one tag out) and a provider bridge (two).
        let mut hops = [HOP[0], HOP[0]];
        hops[0].out_tags = 1;
        hops[1].in_tags = 1;
        hops[1].in_port = 7;
        let mut d = decision(&input, &output);
        d.hops = &hops;
        let (k, a) = compile(&d).unwrap();
        assert_eq!((k.in_port, a.n_hops, a.hops().len()), (3, 2, 2));
        assert_eq!(
            a.hops()
                .iter()
                .map(|h| (h.in_tags, h.out_tags))
                .collect::<Vec<_>>(),
            [(0, 1), (1, 2)]
        );
        let mut broken = hops;
        broken[1].in_tags = 2;
        let d = Decision { hops: &broken, ..d };
        assert_eq!(compile(&d), Err(NotCached::Rewrite));
        let d = Decision { hops: &[], ..d };
        assert_eq!(compile(&d), Err(NotCached::Rewrite));
        let five = [HOP[0]; MAX_HOPS + 1];
        let d = Decision { hops: &five, ..d };
        assert_eq!(compile(&d), Err(NotCached::Rewrite));
    }

    #[test]
    fn what_the_program_cannot_do_is_not_cached() {
        let p = [1u8; 50];
        let plain = frame(&[], 0x0800, &p);
        let mut group = plain.clone();
        group[0] = 0x01;
        assert_eq!(compile(&decision(&group, &group)), Err(NotCached::Group));
        let three = frame(&[(0x88a8, 1), (0x8100, 2), (0x8100, 3)], 0x0800, &p);
        assert_eq!(compile(&decision(&three, &plain)), Err(NotCached::Tags));
        assert_eq!(compile(&decision(&plain, &three)), Err(NotCached::Tags));
        // A TPID the ingress port takes as a tag, which the program does not parse.
        let q9100 = frame(&[], 0x9100, &p);
        assert_eq!(compile(&decision(&q9100, &q9100)), Err(NotCached::Tags));
        // One the pipeline parses on any port (it may read its PCP), after a tag.
        let q9200 = frame(&[(0x8100, 5)], 0x9200, &p);
        let mut d = decision(&q9200, &q9200);
        d.in_extra_tpids = [0, 0];
        assert_eq!(compile(&d), Err(NotCached::Tags));
        // Anything changed beyond the tags: an address, the EtherType, a payload byte.
        let mut other = plain.clone();
        other[11] ^= 1;
        assert_eq!(compile(&decision(&plain, &other)), Err(NotCached::Rewrite));
        let ipv6 = frame(&[], 0x86dd, &p);
        assert_eq!(compile(&decision(&plain, &ipv6)), Err(NotCached::Rewrite));
        let mut payload = plain.clone();
        *payload.last_mut().unwrap() ^= 1;
        assert_eq!(
            compile(&decision(&plain, &payload)),
            Err(NotCached::Rewrite)
        );
        assert_eq!(
            compile(&decision(&plain[..13], &plain)),
            Err(NotCached::Short)
        );
        let cut = frame(&[(0x8100, 1)], 0x0800, &[]);
        assert_eq!(
            compile(&decision(&cut[..15], &plain)),
            Err(NotCached::Short)
        );
    }
}
