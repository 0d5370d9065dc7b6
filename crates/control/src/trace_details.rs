//! What the ports a traced frame leaves on do with it beyond the bridge (`trace`'s `vxlan`
//! and `bond` stages): a VXLAN port's VNI, its UDP source port and the remote VTEPs the
//! datagram goes to; a bond's member, chosen by the frame's hash in the bond's transmit
//! table.
//!
//! Read from the session as [`PortDetails`], an owned copy (a `trace live` session holds one
//! while frames arrive). The rules are the backends' own: a VXLAN port with one VNI sends
//! every frame in it; an `external` port takes the VNI of the frame's VLAN (`tunnel_info`,
//! its outer tag in the bridge's TPID, removed before encapsulation; a `vnifilter` port only
//! the VNIs it accepts); the remote is the static entry for (VNI, destination), else a learned
//! one, else the VNI's flood list (every frame to a group address goes to the flood list);
//! `qbridge_io::vxlan`. A bond sends a frame on `table[flow_hash(frame, policy) & 0xff]`
//! (`qbridge_lacp`; `crate::session::bond` keeps the engines, the daemon their state).

use crate::vxlan::{Learned, VxlanSpec};
use qbridge_bridge::{Trace, TraceStep};
use qbridge_lacp::HashPolicy;
use qbridge_wire::MacAddr;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

/// A VXLAN port as the trace needs it.
#[derive(Debug, Clone)]
struct Vxlan {
    spec: VxlanSpec,
    /// The bridge's TPID when the port is in a VLAN-filtering bridge (an `external` port's
    /// VNIs come from the frames' tags then).
    tpid: Option<u16>,
    learned: Vec<Learned>,
}

/// A bond as the trace needs it.
#[derive(Debug, Clone)]
struct Bond {
    policy: HashPolicy,
    policy_word: String,
    /// The member of each of the 256 buckets (`None`: no member distributes).
    buckets: Vec<Option<String>>,
}

/// The VXLAN ports and bonds of a session.
#[derive(Debug, Clone, Default)]
pub struct PortDetails {
    vxlan: BTreeMap<String, Vxlan>,
    bonds: BTreeMap<String, Bond>,
}

impl PortDetails {
    pub(crate) fn add_vxlan(
        &mut self,
        port: &str,
        spec: VxlanSpec,
        tpid: Option<u16>,
        learned: Vec<Learned>,
    ) {
        self.vxlan.insert(
            port.to_string(),
            Vxlan {
                spec,
                tpid,
                learned,
            },
        );
    }

    pub(crate) fn add_bond(
        &mut self,
        port: &str,
        policy: HashPolicy,
        policy_word: String,
        buckets: Vec<Option<String>>,
    ) {
        self.bonds.insert(
            port.to_string(),
            Bond {
                policy,
                policy_word,
                buckets,
            },
        );
    }

    /// Adds a `vxlan` or `bond` stage for every output of `t` on such a port.
    pub fn add_steps(&self, t: &mut Trace) {
        if self.vxlan.is_empty() && self.bonds.is_empty() {
            return;
        }
        let mut steps = Vec::new();
        for o in &t.outputs {
            let frame = o.frame.bytes();
            if let Some(v) = self.vxlan.get(&o.port) {
                steps.push(TraceStep {
                    stage: "vxlan",
                    text: format!("{}: {}", o.port, vxlan_text(v, &frame)),
                });
            }
            if let Some(b) = self.bonds.get(&o.port) {
                steps.push(TraceStep {
                    stage: "bond",
                    text: format!("{}: {}", o.port, bond_text(b, &frame)),
                });
            }
        }
        t.steps.extend(steps);
    }
}

fn vxlan_text(v: &Vxlan, frame: &[u8]) -> String {
    if frame.len() < 14 {
        return "a frame shorter than an Ethernet header: not sent (counted as a transmit error)"
            .into();
    }
    let mut s = String::new();
    let (vni, inner): (u32, std::borrow::Cow<'_, [u8]>) = if v.spec.external {
        let tag = frame.get(12..16).map(|t| {
            (
                u16::from_be_bytes([t[0], t[1]]),
                u16::from_be_bytes([t[2], t[3]]) & 0x0fff,
            )
        });
        let Some(tpid) = v.tpid else {
            return "an external port in no VLAN-filtering bridge maps no VLAN to a VNI: \
                    dropped (unmapped_vlan)"
                .into();
        };
        let Some((t, vid)) = tag.filter(|(t, _)| *t == tpid) else {
            return format!(
                "external: the frame has no {tpid:#06x} tag to take a VNI from: dropped \
                 (unmapped_vlan)"
            );
        };
        let _ = t;
        let Some(&(_, vni)) = v.spec.tunnels.iter().find(|(x, _)| *x == vid) else {
            return format!("external: VLAN {vid} has no tunnel_info id: dropped (unmapped_vlan)");
        };
        if v.spec.vnifilter && !in_ranges(&v.spec.vnis, vni) {
            return format!(
                "external: VLAN {vid}'s VNI {vni} is not in the port's vnifilter list: dropped \
                 (unmapped_vlan)"
            );
        }
        let _ = write!(s, "VNI {vni} (VLAN {vid}'s tunnel_info, its tag removed)");
        let mut f = frame[..12].to_vec();
        f.extend_from_slice(&frame[16..]);
        (vni, f.into())
    } else {
        let _ = write!(s, "VNI {} (the port's id)", v.spec.vni);
        (v.spec.vni, frame.into())
    };
    let dst = MacAddr::from_bytes(&inner[..6]);
    let sport = qbridge_wire::vxlan::source_port(&inner);
    let flood: Vec<IpAddr> = v
        .spec
        .remotes
        .of(vni, MacAddr::ZERO)
        .map(|r| r.dst)
        .collect();
    let one = if dst.is_multicast() {
        None
    } else if let Some(r) = v.spec.remotes.get(vni, dst) {
        Some((r.dst, "its static entry"))
    } else {
        v.learned
            .iter()
            .find(|(n, m, _)| *n == vni && *m == dst)
            .map(|(_, _, ip)| (*ip, "a learned entry"))
    };
    let _ = write!(
        s,
        ", from {} UDP {sport} (the inner flow's hash)",
        v.spec.local
    );
    match (one, flood.as_slice()) {
        (Some((ip, why)), _) => {
            let _ = write!(s, " to VTEP {ip} port {} ({why} for {dst})", v.spec.dstport);
        }
        (None, []) => {
            let _ = write!(
                s,
                ": no VTEP for {dst} and no flood list for VNI {vni}: dropped (no_remote)"
            );
        }
        (None, l) => {
            let list: Vec<String> = l.iter().map(IpAddr::to_string).collect();
            let _ = write!(
                s,
                " to the flood list of VNI {vni}, {} VTEP{} ({}), port {}{}",
                l.len(),
                if l.len() == 1 { "" } else { "s" },
                list.join(", "),
                v.spec.dstport,
                if dst.is_multicast() {
                    ""
                } else {
                    " (no entry for the destination)"
                }
            );
        }
    }
    s
}

fn in_ranges(r: &[(u32, u32)], vni: u32) -> bool {
    r.iter().any(|&(a, z)| (a..=z).contains(&vni))
}

fn bond_text(b: &Bond, frame: &[u8]) -> String {
    let hash = qbridge_lacp::flow_hash(frame, b.policy);
    let bucket = (hash & 0xff) as usize;
    match b.buckets.get(bucket).cloned().flatten() {
        Some(m) => format!(
            "member {m} (xmit_hash_policy {}: hash {hash:#010x}, bucket {bucket} of the \
             transmit table)",
            b.policy_word
        ),
        None => "no member distributes: dropped (tx_no_member)".into(),
    }
}
