//! The "why" of a trace: the stages of `docs/semantics.md` in the pipeline's order (see
//! `crate::path::pipeline`), each read from the compiled records the pipeline reads, with
//! the rule that decided. Ends with the explanation's own prediction of the verdict, checked
//! against what the sandbox did (`super::Run`).

use super::{OutputKind, Run, Trace, TraceStep, Verdict};
use crate::config::Switch;
use crate::counters::DropReason;
use crate::fdb::{fdb_key, F_EXTERN, F_LOCKED, F_PERMANENT, F_STICKY, F_USER};
use crate::path::classify::{inner_cvid, link_local_forwarded, map_in};
use crate::path::meta::{customer_vid, wire_len};
use crate::path::pipeline::pvlan_ok;
use crate::plan::{Bridge, PortId, PortRecord};
use crate::settings::{Role, StpState, VlanProtocol};
use crate::vlanmode::{violation_of, PvlanRole};
use qbridge_packet::PacketBuf;
use qbridge_wire::frame::{LINK_LOCAL_BASE, MAC_BROADCAST, MAC_GROUP_BIT};
use qbridge_wire::{summary, MacAddr, Tpid};
use std::fmt::Write;

/// What the explanation expects the pipeline to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prediction {
    Drop(DropReason),
    /// Known unicast (or local, to the host port) to this port.
    To(u16),
    /// A flood to these ports (empty: `no_destination`).
    Flood(Vec<u16>),
    ControlPlane,
    /// The walk cannot say (a stacked device took the frame).
    Unknown,
}

struct Walk<'a> {
    sw: &'a Switch,
    steps: Vec<TraceStep>,
}

impl<'a> Walk<'a> {
    fn step(&mut self, stage: &'static str, text: impl Into<String>) {
        self.steps.push(TraceStep {
            stage,
            text: text.into(),
        });
    }

    fn name(&self, id: u16) -> String {
        self.sw.port_name(PortId(id)).unwrap_or("?").to_string()
    }

    fn rec(&self, id: u16) -> Option<&'a PortRecord> {
        let sw: &'a Switch = self.sw;
        sw.recs.ports.get(usize::from(id))?.as_deref()
    }
}

fn mac(v: u64) -> MacAddr {
    let b = v.to_be_bytes();
    MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
}

fn secs(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

fn state_word(r: &PortRecord) -> &'static str {
    if r.running {
        "up"
    } else if !r.settings.up {
        "admin down"
    } else {
        "link down"
    }
}

/// Fills `t.steps`, the output kinds and the verdict's flood/forward distinction, and checks
/// the prediction against the run.
pub(super) fn explain(
    sw: &Switch,
    pkt: &PacketBuf,
    now: u64,
    run: &Run,
    forwarded: &[(PortId, Vec<Vec<u8>>)],
    t: &mut Trace,
) {
    let mut w = Walk {
        sw,
        steps: Vec::new(),
    };
    let frame = pkt.frame();
    let mut vlan = None;
    let prediction = walk(&mut w, pkt, now, run, &mut vlan);
    t.vlan = vlan;
    // A flood to one port is still a flood.
    if let Prediction::Flood(_) = prediction {
        for o in t
            .outputs
            .iter_mut()
            .filter(|o| o.kind == OutputKind::Forward)
        {
            o.kind = OutputKind::Flood;
        }
        if t.verdict == Verdict::Forwarded {
            t.verdict = Verdict::Flooded;
        }
    }
    egress_steps(&mut w, frame, forwarded, run, &prediction);
    mirror_steps(&mut w, t);
    if let Some(diff) = disagreement(&prediction, run, forwarded) {
        t.explained = false;
        w.step(
            "note",
            format!(
                "the explanation above expected {diff}; the outputs and drops below are what \
                 the pipeline does (please report this trace)"
            ),
        );
    }
    t.steps = w.steps;
}

/// Stages up to the forwarding decision. Returns the prediction.
fn walk(
    w: &mut Walk<'_>,
    pkt: &PacketBuf,
    now: u64,
    run: &Run,
    vlan: &mut Option<u16>,
) -> Prediction {
    let sw = w.sw;
    let (in_id, frame) = (pkt.port, pkt.frame());
    let Some(inp) = w.rec(in_id) else {
        w.step("port", format!("port {in_id} does not exist"));
        return Prediction::Unknown;
    };
    let mut text = format!(
        "{} ({}, port {in_id}) is {}",
        inp.name,
        inp.kind,
        state_word(inp)
    );
    let br = inp
        .master
        .and_then(|b| sw.recs.bridges.get(usize::from(b))?.as_deref());
    match (br, inp.master) {
        (Some(br), _) => {
            let s = &br.settings;
            let _ = write!(
                text,
                ", in bridge {} (vlan_filtering {}, vlan_protocol {}{}{})",
                br.name,
                s.vlan_filtering as u8,
                match s.vlan_protocol {
                    VlanProtocol::Dot1Q => "802.1Q",
                    VlanProtocol::Dot1Ad => "802.1ad",
                },
                if s.stp { ", stp on" } else { "" },
                if s.learn_inner_vid {
                    ", learn_inner_vid on"
                } else {
                    ""
                },
            );
        }
        _ => text.push_str(", in no bridge"),
    }
    if !matches!(inp.role, Role::Device) || inp.uppers.is_some() {
        let what = match inp.role {
            Role::Host { .. } => "the bridge's host port".to_string(),
            Role::Vlan { lower, vid, tpid } => {
                format!("a VLAN device ({tpid:04x} vid {vid}) on {}", w.name(lower))
            }
            Role::Macvlan { lower, .. } => format!("a macvlan on {}", w.name(lower)),
            Role::Device => "a device with VLAN devices or macvlans stacked on it".into(),
        };
        w.step("port", text);
        w.step(
            "stacked",
            format!(
                "{} is {what}: the frame takes the stacked path (up and down through the \
                 devices, a bridge pass at each bridge); the outputs and drops below are \
                 exact, the stages are not broken down",
                inp.name
            ),
        );
        return Prediction::Unknown;
    }
    if !inp.running {
        w.step("port", text);
        return Prediction::Drop(DropReason::PortDown);
    }
    let Some(br) = br else {
        w.step("port", text);
        return Prediction::Drop(DropReason::NoBridge);
    };
    w.step("port", text);

    // Size, source, link-local groups.
    if frame.len() < 14 {
        w.step(
            "size",
            format!("{} bytes: shorter than an Ethernet header", frame.len()),
        );
        return Prediction::Drop(DropReason::Runt);
    }
    let len = wire_len(pkt, inp.tpid);
    let limit = inp.max_frame;
    if len > limit as usize {
        w.step(
            "size",
            format!(
                "{len} bytes > {limit}, the largest frame {} accepts (mtu {} + 14{})",
                inp.name,
                inp.settings.mtu,
                tag_slack(inp, limit)
            ),
        );
        return Prediction::Drop(DropReason::Oversize);
    }
    w.step(
        "size",
        format!(
            "{len} bytes ≤ {limit}, the largest frame {} accepts",
            inp.name
        ),
    );
    let dst = u64::from_be_bytes([
        0, 0, frame[0], frame[1], frame[2], frame[3], frame[4], frame[5],
    ]);
    let src = u64::from_be_bytes([
        0, 0, frame[6], frame[7], frame[8], frame[9], frame[10], frame[11],
    ]);
    if src & MAC_GROUP_BIT != 0 || src == 0 {
        w.step(
            "source",
            format!("source {} is a group or all-zero address", mac(src)),
        );
        return Prediction::Drop(DropReason::InvalidSrcMac);
    }
    if dst & !0xf == LINK_LOCAL_BASE {
        let group = (dst & 0xf) as u8;
        if run.punted {
            w.step(
                "group",
                format!(
                    "{} is the bridge's spanning-tree group and stp is on: a BPDU for the \
                     bridge's own protocol",
                    mac(dst)
                ),
            );
        }
        if !link_local_forwarded(br, group) {
            if !run.punted {
                w.step(
                    "group",
                    format!(
                        "{} is link-local (01:80:c2:00:00:0{group:x}): for the bridge itself, \
                         not forwarded (group_fwd_mask 0x{:x}{})",
                        mac(dst),
                        br.settings.group_fwd_mask,
                        if group == 0 && br.settings.stp {
                            "; stp is on"
                        } else {
                            ""
                        }
                    ),
                );
            }
            return if run.punted {
                Prediction::ControlPlane
            } else {
                Prediction::Drop(DropReason::LinkLocal)
            };
        }
        w.step(
            "group",
            format!(
                "{} is link-local and forwarded (group_fwd_mask 0x{:x}{})",
                mac(dst),
                br.settings.group_fwd_mask,
                if group == 0 { ", stp off" } else { "" }
            ),
        );
    }

    // VLAN classification and the ingress filter.
    let filtering = br.settings.vlan_filtering;
    // Bytes 12..16, zero-padded as the pipeline reads a 14- or 15-byte frame.
    let mut h = [0u8; 4];
    for (d, b) in h.iter_mut().zip(frame.iter().skip(12)) {
        *d = *b;
    }
    let tag_word = u32::from_be_bytes(h);
    let outer_tpid = (tag_word >> 16) as u16;
    let vid;
    let mut tagged = false;
    if !filtering {
        w.step(
            "vlan",
            format!(
                "{} does not filter VLANs: tags are payload, the frame is in the one VLAN",
                br.name
            ),
        );
        vid = 0;
    } else {
        match classify(w, inp, frame, tag_word, outer_tpid) {
            Ok((v, t)) => {
                vid = v;
                tagged = t;
            }
            Err(p) => return p,
        }
        if !inp.member.contains(vid) {
            w.step(
                "filter",
                format!(
                    "ingress filter: {} is not a member of VLAN {vid}{}",
                    inp.name,
                    members_hint(inp)
                ),
            );
            return Prediction::Drop(DropReason::VlanNotMember);
        }
        w.step(
            "filter",
            format!("ingress filter: {} is a member of VLAN {vid}", inp.name),
        );
    }
    *vlan = Some(vid);
    // The FID the pipeline used (learn_inner_vid: the pair's).
    let fid = run.class.filter(|c| c.vid == vid).map_or(vid, |c| c.fid);
    if fid != vid {
        w.step(
            "vlan",
            format!(
                "learn_inner_vid: addresses are learned and looked up per (VLAN {vid}, C-VLAN \
                 {}) (FID {fid})",
                inner_cvid_of(frame, tagged)
            ),
        );
    }

    // Spanning tree.
    let mut learning_only = false;
    if let Some(stp) = &inp.stp {
        let st = stp.state(vid);
        let word = stp_word(st);
        match st {
            StpState::Forwarding => w.step(
                "stp",
                format!("{} is {word} in VLAN {vid}'s spanning tree", inp.name),
            ),
            StpState::Learning => {
                w.step(
                    "stp",
                    format!(
                        "{} is {word} in VLAN {vid}'s spanning tree: the source is learned, the \
                         frame is not forwarded",
                        inp.name
                    ),
                );
                learning_only = true;
            }
            StpState::Discarding => {
                w.step(
                    "stp",
                    format!(
                        "{} is {word} in VLAN {vid}'s spanning tree (a blocked port: `stp show`)",
                        inp.name
                    ),
                );
                return Prediction::Drop(DropReason::StpDiscarding);
            }
        }
    }

    // The lock.
    let fdb = &br.fdb;
    let src_entry = fdb.get(fdb_key(mac(src), fid));
    // The FDB once the frame was forwarded (the sandbox's): what learning made of the source,
    // and what the lookup saw (learning may have moved or evicted the destination's entry).
    let after = run
        .after
        .recs
        .bridges
        .get(usize::from(inp.master.unwrap_or(0)))
        .and_then(|b| b.as_deref())
        .map_or(fdb, |b| &b.fdb);
    if inp.settings.locked {
        let ok = src_entry
            .as_ref()
            .is_some_and(|e| e.port == in_id && e.flags & (F_LOCKED | F_PERMANENT) == 0);
        if !ok {
            w.step(
                "locked",
                format!(
                    "{} is locked and {} has no entry on it in VLAN {vid}{}",
                    inp.name,
                    mac(src),
                    if inp.settings.mab {
                        " (mab on: a locked entry is learned for authentication)"
                    } else {
                        ""
                    }
                ),
            );
            return Prediction::Drop(DropReason::PortLocked);
        }
        w.step(
            "locked",
            format!(
                "{} is locked; {} has an entry on it: admitted",
                inp.name,
                mac(src)
            ),
        );
    }

    // Learning (what would happen; the trace learns nothing).
    let ageing_off = br.settings.ageing_time_ns == 0;
    // What learning does comes from the sandbox, which learned: the source's entry after
    // the frame, and the limit and eviction counters.
    let learned_here = after
        .get(fdb_key(mac(src), fid))
        .is_some_and(|e| e.port == in_id);
    let learn_refused = run.after.port_counters(PortId(in_id)).fdb_learn_refused != 0;
    let evicted_from = run
        .after
        .port_ids()
        .map(|(id, _)| id)
        .find(|id| run.after.port_counters(*id).fdb_evictions != 0);
    if !inp.settings.learning || ageing_off {
        w.step(
            "learn",
            if ageing_off {
                format!("{}'s ageing_time is 0: nothing is learned", br.name)
            } else {
                format!("learning is off on {}", inp.name)
            },
        );
    } else if run_has(run, &mac_limit_reasons()) {
        let limit = vlan_limit_code(inp, vid);
        let (reason, mode) = match violation_of(limit) {
            crate::vlanmode::Violation::Protect => (DropReason::MacLimit, "protect"),
            crate::vlanmode::Violation::Restrict => (DropReason::MacLimitRestrict, "restrict"),
            crate::vlanmode::Violation::Shutdown => (DropReason::MacLimitShutdown, "shutdown"),
        };
        w.step(
            "learn",
            format!(
                "{} is new and {} is at its limit in VLAN {vid} (fdb_max_learned {} violation \
                 {}): the frame is dropped",
                mac(src),
                inp.name,
                limit & 0x00ff_ffff,
                mode
            ),
        );
        return Prediction::Drop(reason);
    } else {
        let text = match &src_entry {
            _ if learn_refused => format!(
                "{} is new but not learned: a learning limit is reached ({}'s fdb_max_learned \
                 {}, {}'s {}); the frame goes on",
                mac(src),
                br.name,
                br.settings.fdb_max_learned,
                inp.name,
                inp.settings.fdb_max_learned
            ),
            None => format!(
                "would learn {} in VLAN {vid} on {} (a new entry{})",
                mac(src),
                inp.name,
                match evicted_from {
                    Some(p) => format!(
                        "; the table is full: the oldest learned entry of {} makes room",
                        w.name(p.0)
                    ),
                    None => String::new(),
                }
            ),
            Some(e) if e.port == in_id => format!(
                "{} is known on {} (refreshed; idle {})",
                mac(src),
                inp.name,
                secs(now.saturating_sub(e.seen_ns))
            ),
            Some(e) if !learned_here => format!(
                "{} is a {} entry on {}: it does not move",
                mac(src),
                entry_kind(e.flags),
                w.name(e.port)
            ),
            Some(e) => format!(
                "would move {} in VLAN {vid} from {} to {}",
                mac(src),
                w.name(e.port),
                inp.name
            ),
        };
        w.step("learn", text);
    }
    if learning_only {
        return Prediction::Drop(DropReason::StpDiscarding);
    }

    // The lookup.
    if dst == MAC_BROADCAST {
        w.step("lookup", "broadcast: flooded");
        return flood(w, br, inp, in_id, vid, FloodKind::Broadcast);
    }
    if dst & MAC_GROUP_BIT != 0 {
        w.step("lookup", format!("{} is multicast: flooded", mac(dst)));
        return flood(w, br, inp, in_id, vid, FloodKind::Multicast);
    }
    // The FDB as the lookup saw it: the sandbox's after the frame (learning may have moved or
    // evicted the destination's entry).
    let fdb = after;
    let mut entry = fdb.get(fdb_key(mac(dst), fid));
    // `learn_inner_vid`: the user's entry of the VLAN applies to every inner VLAN of it.
    let mut via_vlan = false;
    if entry.is_none() && fid != vid {
        entry = fdb
            .get(fdb_key(mac(dst), vid))
            .filter(|e| !(e.is_learned() || (ageing_off && e.ages())));
        via_vlan = entry.is_some();
    }
    let Some(e) = entry else {
        w.step(
            "lookup",
            format!(
                "{} in VLAN {vid}: not in the FDB (unknown unicast): flooded",
                mac(dst)
            ),
        );
        return flood(w, br, inp, in_id, vid, FloodKind::Unknown);
    };
    if (ageing_off && e.ages()) || e.flags & F_LOCKED != 0 {
        w.step(
            "lookup",
            format!(
                "{} in VLAN {vid}: {} entry on {}, not used for forwarding: flooded",
                mac(dst),
                if e.flags & F_LOCKED != 0 {
                    "a locked (MAB)"
                } else {
                    "a dynamic entry with ageing_time 0, an"
                },
                w.name(e.port)
            ),
        );
        return flood(w, br, inp, in_id, vid, FloodKind::Unknown);
    }
    let age = if e.is_learned() {
        format!(", idle {}", secs(now.saturating_sub(e.seen_ns)))
    } else {
        String::new()
    };
    if e.flags & F_PERMANENT != 0 {
        w.step(
            "lookup",
            format!(
                "{} in VLAN {vid}: the bridge's own address (a permanent entry{})",
                mac(dst),
                if via_vlan { ", of the VLAN" } else { "" }
            ),
        );
        let Some(h) = br.host else {
            w.step(
                "unicast",
                format!(
                    "{} has no host port (`link set dev {} up` gives it one): not delivered",
                    br.name, br.name
                ),
            );
            return Prediction::Drop(DropReason::Local);
        };
        w.step(
            "unicast",
            format!("to the bridge's host port {}", w.name(h)),
        );
        return unicast(w, br, inp, in_id, vid, h);
    }
    w.step(
        "lookup",
        format!(
            "{} in VLAN {vid}: hit, a {} entry on {}{age}{}",
            mac(dst),
            entry_kind(e.flags),
            w.name(e.port),
            if via_vlan {
                " (the VLAN's entry, used for every inner VLAN)"
            } else {
                ""
            }
        ),
    );
    unicast(w, br, inp, in_id, vid, e.port)
}

/// VLAN classification on a filtering bridge: `Ok((vid, tagged))`, or the drop.
fn classify(
    w: &mut Walk<'_>,
    inp: &PortRecord,
    frame: &[u8],
    tag_word: u32,
    outer_tpid: u16,
) -> Result<(u16, bool), Prediction> {
    let len = frame.len();
    let mode = inp
        .vlan_mode
        .as_ref()
        .map(|m| format!(" (vlan_mode {})", m.mode.as_str()))
        .unwrap_or_default();
    if let Some(cvlans) = &inp.cvlans {
        let c = customer_vid(tag_word, len);
        if !cvlans.contains(c) {
            w.step(
                "vlan",
                format!(
                    "{} is a dot1q-tunnel port whose cvlans do not include the frame's customer \
                     VLAN {}",
                    inp.name,
                    if c == 0 {
                        "(untagged)".to_string()
                    } else {
                        c.to_string()
                    }
                ),
            );
            return Err(Prediction::Drop(DropReason::CvlanNotAllowed));
        }
    }
    if !inp.tunnel && outer_tpid == inp.tpid {
        if len < 18 {
            w.step("vlan", "the tag is cut short");
            return Err(Prediction::Drop(DropReason::Runt));
        }
        let v = (tag_word & 0x0fff) as u16;
        let pcp = (tag_word >> 13) & 7;
        let head = format!(
            "outer tag {outer_tpid:04x} is {}'s TPID{mode}: tagged, VID {v}, PCP {pcp}",
            inp.name
        );
        let vid = match v {
            0x0fff => {
                w.step("vlan", format!("{head}: VID 4095 is reserved"));
                return Err(Prediction::Drop(DropReason::ReservedVid));
            }
            0 if inp.pvid == 0 => {
                w.step(
                    "vlan",
                    format!("{head}: priority-tagged and {} has no PVID", inp.name),
                );
                return Err(Prediction::Drop(DropReason::NoPvid));
            }
            0 => {
                w.step(
                    "vlan",
                    format!("{head}: priority-tagged, so in the PVID: VLAN {}", inp.pvid),
                );
                return Ok((inp.pvid, true));
            }
            v if inp.tag2.is_some() || inp.vid_in.is_some() => match map_in(inp, v, frame) {
                0 => {
                    w.step(
                        "vlan",
                        format!(
                            "{head}: VLAN {v} is what a `vlan map` of {} sends translated, and \
                             it has no map of its own",
                            inp.name
                        ),
                    );
                    return Err(Prediction::Drop(DropReason::TranslatedVid));
                }
                m if m != v => {
                    let inner = inner_cvid(frame);
                    w.step(
                        "vlan",
                        format!(
                            "{head}: `vlan map` on {} takes wire VLAN {v}{} to VLAN {m} inside \
                             the bridge",
                            inp.name,
                            if inp.tag2.is_some() && inner != 0 {
                                format!(" (C-VLAN {inner})")
                            } else {
                                String::new()
                            }
                        ),
                    );
                    m
                }
                m => {
                    w.step("vlan", format!("{head}: VLAN {m}"));
                    m
                }
            },
            v => {
                w.step("vlan", format!("{head}: VLAN {v}"));
                v
            }
        };
        return Ok((vid, true));
    }
    let why = if inp.tunnel {
        format!(
            "{} is a dot1q-tunnel port: whatever the frame carries ({}) is the customer's; it \
             enters untagged to the bridge",
            inp.name,
            summary::tags(frame, &[])
        )
    } else if len >= 16 && Tpid(outer_tpid).is_well_known() {
        format!(
            "outer tag {outer_tpid:04x} is not {}'s TPID {:04x}{mode}: untagged to the bridge \
             (the tag is payload)",
            inp.name, inp.tpid
        )
    } else {
        format!("untagged{mode}")
    };
    let svid = match &inp.cvid_in {
        Some(t) if outer_tpid == 0x8100 && len >= 18 => t[usize::from(tag_word as u16 & 0x0fff)],
        _ => 0,
    };
    if svid != 0 {
        w.step(
            "vlan",
            format!(
                "{why}; `vlan map … cvid {} svid {svid}` (selective Q-in-Q) puts C-VLAN {} in \
                 S-VLAN {svid}",
                tag_word as u16 & 0x0fff,
                tag_word as u16 & 0x0fff
            ),
        );
        return Ok((svid, false));
    }
    if inp.pvid == 0 {
        w.step("vlan", format!("{why}; {} has no PVID", inp.name));
        return Err(Prediction::Drop(DropReason::NoPvid));
    }
    w.step(
        "vlan",
        format!("{why}: in the PVID of {}, VLAN {}", inp.name, inp.pvid),
    );
    Ok((inp.pvid, false))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FloodKind {
    Unknown,
    Broadcast,
    Multicast,
}

/// The flood set: every port of the bridge with its reason to be in or out.
fn flood(
    w: &mut Walk<'_>,
    br: &Bridge,
    inp: &PortRecord,
    in_id: u16,
    vid: u16,
    kind: FloodKind,
) -> Prediction {
    let list = &br.flood[usize::from(vid & 0x0fff)];
    let mut targets = Vec::new();
    let mut lines = Vec::new();
    for &p in &br.ports {
        let Some(ep) = w.rec(p) else { continue };
        let out = if !list.contains(&p) {
            if br.settings.vlan_filtering && !ep.member.contains(vid) {
                Some(format!("not a member of VLAN {vid}"))
            } else if ep.stp.as_ref().is_some_and(|s| !s.fwd.contains(vid)) {
                Some(format!(
                    "{} in VLAN {vid}'s spanning tree",
                    stp_word(
                        ep.stp
                            .as_ref()
                            .map_or(StpState::Forwarding, |s| s.state(vid))
                    )
                ))
            } else {
                Some("not in the VLAN's flood list".to_string())
            }
        } else {
            let s = &ep.settings;
            let (flag, name) = match kind {
                FloodKind::Unknown => (s.flood, "flood"),
                FloodKind::Broadcast => (s.bcast_flood, "bcast_flood"),
                FloodKind::Multicast => (s.mcast_flood, "mcast_flood"),
            };
            if !flag {
                Some(format!("{name} off"))
            } else if !ep.running {
                Some(state_word(ep).to_string())
            } else if p == in_id && !inp.settings.hairpin {
                Some("the ingress port, hairpin off".to_string())
            } else if inp.settings.isolated && s.isolated {
                Some("isolated, as is the ingress port".to_string())
            } else if (inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, vid) {
                Some(format!(
                    "private VLAN: {} does not talk to {}",
                    pvlan_word(inp, vid),
                    pvlan_word(ep, vid)
                ))
            } else {
                None
            }
        };
        match out {
            None => {
                targets.push(p);
                lines.push(format!("+ {}", ep.name));
            }
            Some(why) => lines.push(format!("- {} ({why})", ep.name)),
        }
    }
    let head = match targets.len() {
        0 => "flood set: no port".to_string(),
        1 => "flood set: 1 port".to_string(),
        n => format!("flood set: {n} ports"),
    };
    w.step("flood", format!("{head}: {}", lines.join(", ")));
    if targets.is_empty() {
        return Prediction::Drop(DropReason::NoDestination);
    }
    Prediction::Flood(targets)
}

/// The checks on the way to one port (`crate::path::pipeline::unicast`, in its order).
fn unicast(
    w: &mut Walk<'_>,
    br: &Bridge,
    inp: &PortRecord,
    in_id: u16,
    vid: u16,
    e: u16,
) -> Prediction {
    let Some(ep) = w.rec(e) else {
        w.step("unicast", format!("port {e} no longer exists"));
        return Prediction::Drop(DropReason::EgressDown);
    };
    let name = ep.name.clone();
    let filtering = br.settings.vlan_filtering;
    if e == in_id && !inp.settings.hairpin {
        w.step(
            "unicast",
            format!("{name} is the ingress port and hairpin is off: not sent back"),
        );
        return Prediction::Drop(DropReason::SamePort);
    }
    if filtering && !ep.member.contains(vid) {
        w.step(
            "unicast",
            format!("egress filter: {name} is not a member of VLAN {vid}"),
        );
        return Prediction::Drop(DropReason::EgressNotMember);
    }
    if let Some(s) = &ep.stp {
        if !s.fwd.contains(vid) {
            w.step(
                "unicast",
                format!(
                    "{name} is {} in VLAN {vid}'s spanning tree",
                    stp_word(s.state(vid))
                ),
            );
            return Prediction::Drop(DropReason::StpDiscarding);
        }
    }
    if !ep.running {
        w.step("unicast", format!("{name} is {}", state_word(ep)));
        return Prediction::Drop(DropReason::EgressDown);
    }
    if inp.settings.isolated && ep.settings.isolated {
        w.step(
            "unicast",
            format!("{} and {name} are both isolated", inp.name),
        );
        return Prediction::Drop(DropReason::Isolated);
    }
    if (inp.pvlan.is_some() || ep.pvlan.is_some()) && !pvlan_ok(inp, ep, vid) {
        w.step(
            "unicast",
            format!(
                "private VLAN {vid}: {} ({}) does not talk to {name} ({})",
                inp.name,
                pvlan_word(inp, vid),
                pvlan_word(ep, vid)
            ),
        );
        return Prediction::Drop(DropReason::Pvlan);
    }
    w.step(
        "unicast",
        format!(
            "to {name}: {}up{}",
            if filtering {
                format!("a member of VLAN {vid}, ")
            } else {
                String::new()
            },
            if ep.stp.is_some() { ", forwarding" } else { "" }
        ),
    );
    Prediction::To(e)
}

/// One `egress` step per port a frame leaves: its tags before and after.
fn egress_steps(
    w: &mut Walk<'_>,
    frame: &[u8],
    forwarded: &[(PortId, Vec<Vec<u8>>)],
    run: &Run,
    decided: &Prediction,
) {
    for (p, frames) in forwarded {
        let Some(ep) = w.rec(p.0) else { continue };
        let tpids = [ep.tpid];
        let before = summary::tags(frame, &tpids);
        for f in frames {
            let after = summary::tags(f, &tpids);
            let change = if before == after {
                format!("tags unchanged ({after})")
            } else {
                format!("tags {before} → {after}")
            };
            w.step(
                "egress",
                format!(
                    "{}: {change}; {} bytes ≤ {}{}",
                    ep.name,
                    f.len(),
                    ep.max_frame,
                    egress_why(ep)
                ),
            );
        }
    }
    // Copies refused at their port: only once the frame was on its way to ports (an ingress
    // `oversize` is the size stage's).
    if !matches!(decided, Prediction::To(_) | Prediction::Flood(_)) {
        return;
    }
    for (p, reason, _) in &run.drops {
        if matches!(
            reason,
            DropReason::Oversize | DropReason::EgressCvlanNotAllowed
        ) && forwarded.iter().all(|(q, _)| q != p)
        {
            let Some(ep) = w.rec(p.0) else { continue };
            if *reason == DropReason::Oversize {
                w.step(
                    "egress",
                    format!(
                        "{}: the copy is longer than {}, the largest frame it sends: dropped \
                         (oversize)",
                        ep.name, ep.max_frame
                    ),
                );
            } else {
                w.step(
                    "egress",
                    format!(
                        "{}: the copy's customer VLAN is not in its cvlans: dropped",
                        ep.name
                    ),
                );
            }
        }
    }
}

/// Why the egress port tags as it does (a short clause).
fn egress_why(ep: &PortRecord) -> String {
    let mut s = String::new();
    if let Some(m) = &ep.vlan_mode {
        let _ = write!(s, " (vlan_mode {})", m.mode.as_str());
    }
    if ep.vid_out.is_some() || ep.tag2.is_some() {
        s.push_str(" (its `vlan map` translates on the way out)");
    }
    s
}

/// Mirror sessions that copied the frame.
fn mirror_steps(w: &mut Walk<'_>, t: &Trace) {
    let copies: Vec<String> = t
        .outputs
        .iter()
        .filter(|o| o.kind == OutputKind::Mirror)
        .map(|o| o.port.clone())
        .collect();
    if !copies.is_empty() {
        w.step("mirror", format!("mirror copies to {}", copies.join(", ")));
    }
    for c in &t.mirror_files {
        w.step("mirror", format!("mirror copy to pcap {}", c.file));
    }
}

/// `None` when the run did what the prediction said; else what was expected.
fn disagreement(p: &Prediction, run: &Run, forwarded: &[(PortId, Vec<Vec<u8>>)]) -> Option<String> {
    let out_ports: Vec<u16> = forwarded.iter().map(|(p, _)| p.0).collect();
    // Ports that got a copy or lost it at their egress checks.
    let egress_dropped: Vec<u16> = run
        .drops
        .iter()
        .filter(|(_, r, _)| matches!(r, DropReason::Oversize | DropReason::EgressCvlanNotAllowed))
        .map(|(p, _, _)| p.0)
        .collect();
    let reached = |ports: &[u16]| {
        let mut all: Vec<u16> = out_ports.iter().chain(&egress_dropped).copied().collect();
        all.sort_unstable();
        all.dedup();
        let mut want = ports.to_vec();
        want.sort_unstable();
        all == want
    };
    match p {
        Prediction::Unknown => None,
        Prediction::ControlPlane => (!run.punted || !out_ports.is_empty())
            .then(|| "a BPDU for the bridge's spanning tree".to_string()),
        Prediction::Drop(r) => (!out_ports.is_empty() || !run.drops.iter().any(|(_, d, _)| d == r))
            .then(|| format!("a drop ({})", r.name())),
        Prediction::To(e) => (!reached(&[*e])).then(|| format!("the frame to port {e}")),
        Prediction::Flood(ports) => {
            (!reached(ports)).then(|| format!("a flood to ports {ports:?}"))
        }
    }
}

fn run_has(run: &Run, reasons: &[DropReason]) -> bool {
    run.drops.iter().any(|(_, r, _)| reasons.contains(r))
}

fn mac_limit_reasons() -> [DropReason; 3] {
    [
        DropReason::MacLimit,
        DropReason::MacLimitRestrict,
        DropReason::MacLimitShutdown,
    ]
}

fn vlan_limit_code(inp: &PortRecord, vid: u16) -> u32 {
    inp.vlan_limits
        .as_ref()
        .map_or(0, |t| t[usize::from(vid & 0x0fff)])
}

fn entry_kind(flags: u8) -> &'static str {
    if flags & F_PERMANENT != 0 {
        "permanent"
    } else if flags & F_STICKY != 0 {
        "sticky"
    } else if flags & F_EXTERN != 0 {
        "extern_learn"
    } else if flags & F_LOCKED != 0 {
        "locked"
    } else if flags & F_USER != 0 && flags & crate::fdb::F_STATIC != 0 {
        "static"
    } else if flags & F_USER != 0 {
        "user-added dynamic"
    } else {
        "learned"
    }
}

fn stp_word(s: StpState) -> &'static str {
    match s {
        StpState::Forwarding => "forwarding",
        StpState::Learning => "learning",
        StpState::Discarding => "discarding",
    }
}

fn pvlan_word(p: &PortRecord, vid: u16) -> String {
    let code = p.pvlan.as_ref().map_or(0, |t| t[usize::from(vid & 0x0fff)]);
    match PvlanRole::from_code(code) {
        Some(r) => r.to_string(),
        None => "no private-VLAN role".to_string(),
    }
}

fn members_hint(inp: &PortRecord) -> String {
    let v = inp
        .member
        .iter()
        .take(8)
        .map(|v| v.to_string())
        .collect::<Vec<_>>();
    if v.is_empty() {
        " (it is in no VLAN)".into()
    } else {
        format!(
            " (its VLANs: {}{})",
            v.join(","),
            if inp.member.iter().nth(8).is_some() {
                ",…"
            } else {
                ""
            }
        )
    }
}

fn tag_slack(inp: &PortRecord, limit: u32) -> String {
    let extra = limit.saturating_sub(inp.settings.mtu + 14);
    if extra == 0 {
        String::new()
    } else {
        format!(" + {extra} for tags")
    }
}

fn inner_cvid_of(frame: &[u8], tagged: bool) -> u16 {
    qbridge_wire::frame::full_tag_at(frame, tagged as usize)
        .filter(|t| t.tpid == Tpid::DOT1Q)
        .map_or(0, |t| t.tci.vid().get())
}
