//! VXLAN ports in the control plane: a port's configuration ([`VxlanSpec`]: VNI, local VTEP
//! address, UDP port, TTL, learning, and its static remote VTEPs), the `fdb … dst IP`
//! operations on it ([`VxlanFdbOp`]), and how they are shown (`fdb show` lines with `dst`,
//! running-config lines).
//!
//! The static remotes live in the spec, as a bond's members live in its spec: they are
//! configuration, shown and saved with the port, and editing them does not reopen the socket
//! (the engine copies them into the backend's table, `qbridge_io::vxlan::VxlanTable`, which
//! also holds what the port learns). Imports nothing of this crate: [`crate::command`] and
//! the session use it.

pub use qbridge_wire::vxlan::OuterTos;
use qbridge_wire::MacAddr;
use std::net::Ipv4Addr;

/// The largest VNI (24 bits).
pub const VNI_MAX: u32 = 0x00ff_ffff;

/// A VXLAN port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    pub vni: u32,
    pub local: Ipv4Addr,
    pub dstport: u16,
    /// The outer TTL; `None`: the kernel's default.
    pub ttl: Option<u8>,
    /// The underlay device the sockets are bound to (`dev NAME`); `None`: any.
    pub dev: Option<String>,
    /// The outer TOS (`tos T|inherit`); `None`: 0.
    pub tos: Option<OuterTos>,
    pub learning: bool,
    /// Static remote VTEPs in the order given: MAC → VTEP entries and (all-zeros MAC) the
    /// flood list.
    pub remotes: Vec<VxlanRemote>,
}

/// One static remote: `fdb add MAC dev NAME dst IP` or, all-zeros MAC, a flood-list VTEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanRemote {
    pub mac: MacAddr,
    pub dst: Ipv4Addr,
}

/// What an `fdb … dst IP` line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VxlanFdbOp {
    /// `add`: a new entry; a MAC with an entry already is refused (`replace` changes it);
    /// the all-zeros MAC: the first flood-list VTEP (refused when the list has one).
    Add,
    /// `append`: one more VTEP for the all-zeros MAC (head-end replication).
    Append,
    /// `replace`: add or change.
    Replace,
    /// `del`: remove the entry of MAC with that VTEP.
    Del,
}

impl VxlanSpec {
    /// Whether `other` needs the same socket (everything but the remotes and learning, which
    /// the engine changes in place).
    pub fn same_socket(&self, other: &VxlanSpec) -> bool {
        (self.vni, self.local, self.dstport, self.ttl)
            == (other.vni, other.local, other.dstport, other.ttl)
            && (&self.dev, self.tos) == (&other.dev, other.tos)
    }

    /// `id 100 local 10.0.0.1 [dev ul] dstport 4789 [ttl N] [tos T] learning on`: the words
    /// after `type vxlan`.
    pub fn words(&self) -> String {
        let mut s = format!("id {} local {}", self.vni, self.local);
        if let Some(d) = &self.dev {
            s.push_str(&format!(" dev {d}"));
        }
        s.push_str(&format!(" dstport {}", self.dstport));
        if let Some(t) = self.ttl {
            s.push_str(&format!(" ttl {t}"));
        }
        if let Some(t) = self.tos {
            s.push_str(&format!(" tos {}", tos_word(t)));
        }
        s.push_str(if self.learning {
            " learning on"
        } else {
            " learning off"
        });
        s
    }

    /// Applies `op` to the static remotes; the message of an error names `port`.
    pub fn apply(
        &mut self,
        port: &str,
        op: VxlanFdbOp,
        mac: MacAddr,
        dst: Ipv4Addr,
    ) -> Result<(), String> {
        let flood = mac.is_zero();
        if !flood && !mac.is_unicast() {
            return Err(format!(
                "vxlan port {port}: {mac} is a group address; only unicast MACs and \
                 00:00:00:00:00:00 (the flood list) have remote VTEPs"
            ));
        }
        if dst.is_unspecified() || dst.is_multicast() || dst.is_broadcast() {
            return Err(format!(
                "vxlan port {port}: dst {dst} is not a unicast VTEP address"
            ));
        }
        let here = self.remotes.iter().position(|r| r.mac == mac);
        let exact = self
            .remotes
            .iter()
            .position(|r| r.mac == mac && r.dst == dst);
        match op {
            VxlanFdbOp::Append if !flood => {
                return Err(format!(
                    "vxlan port {port}: \"append\" is for 00:00:00:00:00:00 (the flood list); \
                     {mac} has one VTEP: use add or replace"
                ))
            }
            VxlanFdbOp::Append | VxlanFdbOp::Add if exact.is_some() => {
                return Err(format!("vxlan port {port}: {mac} dst {dst} exists already"))
            }
            VxlanFdbOp::Append => self.remotes.push(VxlanRemote { mac, dst }),
            VxlanFdbOp::Add if here.is_some() => {
                return Err(format!(
                    "vxlan port {port}: {mac} has a VTEP already ({}){}",
                    self.remotes[here.unwrap_or_default()].dst,
                    if flood {
                        ": use append to add another"
                    } else {
                        ": use replace to change it"
                    }
                ))
            }
            VxlanFdbOp::Add => self.remotes.push(VxlanRemote { mac, dst }),
            VxlanFdbOp::Replace => match here {
                Some(i) if !flood => self.remotes[i].dst = dst,
                _ if exact.is_some() => {}
                _ => self.remotes.push(VxlanRemote { mac, dst }),
            },
            VxlanFdbOp::Del => match exact {
                Some(i) => {
                    self.remotes.remove(i);
                }
                None => return Err(format!("vxlan port {port}: no entry {mac} dst {dst}")),
            },
        }
        Ok(())
    }
}

/// `tos`'s value as ip-link(8) prints it: `inherit`, or the byte in hex (`0x28`).
pub fn tos_word(t: OuterTos) -> String {
    match t {
        OuterTos::Inherit => "inherit".to_string(),
        OuterTos::Fixed(v) => format!("{v:#04x}"),
    }
}

/// `fdb show` lines of a VXLAN port's remotes as bridge-fdb(8) prints a vxlan device's own
/// entries: `00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self permanent`; learned ones (`learned`:
/// MAC, VTEP) without `permanent`.
pub fn fdb_lines(port: &str, spec: &VxlanSpec, learned: &[(MacAddr, Ipv4Addr)]) -> String {
    let mut s = String::new();
    for r in &spec.remotes {
        s.push_str(&format!(
            "{} dev {port} dst {} self permanent\n",
            r.mac, r.dst
        ));
    }
    for (m, d) in learned {
        s.push_str(&format!("{m} dev {port} dst {d} self\n"));
    }
    s
}

/// One `fdb show -j` object of a VXLAN port's entry (keys in bridge-fdb's order).
#[derive(Debug, serde::Serialize)]
pub struct FdbJson<'a> {
    pub mac: String,
    pub ifname: &'a str,
    pub dst: String,
    pub flags: [&'static str; 1],
    pub state: &'static str,
}

/// The same entries as `fdb show -j` objects, in bridge-fdb(8)'s keys: `mac`, `ifname`, `dst`,
/// `flags` (`self`), `state` (`permanent` for static ones, empty for learned ones).
pub fn fdb_json<'a>(
    port: &'a str,
    spec: &VxlanSpec,
    learned: &[(MacAddr, Ipv4Addr)],
) -> Vec<FdbJson<'a>> {
    let obj = |m: &MacAddr, d: &Ipv4Addr, state: &'static str| FdbJson {
        mac: m.to_string(),
        ifname: port,
        dst: d.to_string(),
        flags: ["self"],
        state,
    };
    spec.remotes
        .iter()
        .map(|r| obj(&r.mac, &r.dst, "permanent"))
        .chain(learned.iter().map(|(m, d)| obj(m, d, "")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VxlanSpec {
        VxlanSpec {
            vni: 100,
            local: "10.0.0.1".parse().unwrap(),
            dstport: 4789,
            ttl: None,
            dev: None,
            tos: None,
            learning: true,
            remotes: Vec::new(),
        }
    }

    #[test]
    fn remotes_follow_bridge_fdb_rules() {
        let mut s = spec();
        let z = MacAddr([0; 6]);
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        let a: Ipv4Addr = "10.0.0.2".parse().unwrap();
        let b: Ipv4Addr = "10.0.0.3".parse().unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, a).unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, b).unwrap();
        assert!(s
            .apply("vx0", VxlanFdbOp::Append, z, b)
            .unwrap_err()
            .contains("exists already"));
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, z, "10.0.0.4".parse().unwrap())
            .is_err());
        s.apply("vx0", VxlanFdbOp::Add, m, a).unwrap();
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, m, b)
            .unwrap_err()
            .contains("replace"));
        s.apply("vx0", VxlanFdbOp::Replace, m, b).unwrap();
        assert!(s.apply("vx0", VxlanFdbOp::Append, m, a).is_err());
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, MacAddr([0xff; 6]), a)
            .unwrap_err()
            .contains("group address"));
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, m, "224.0.0.1".parse().unwrap())
            .is_err());
        assert_eq!(
            fdb_lines("vx0", &s, &[(MacAddr([2, 0, 0, 0, 0, 9]), a)]),
            "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self permanent\n\
             00:00:00:00:00:00 dev vx0 dst 10.0.0.3 self permanent\n\
             02:00:00:00:00:01 dev vx0 dst 10.0.0.3 self permanent\n\
             02:00:00:00:00:09 dev vx0 dst 10.0.0.2 self\n"
        );
        s.apply("vx0", VxlanFdbOp::Del, z, a).unwrap();
        assert!(s.apply("vx0", VxlanFdbOp::Del, z, a).is_err());
        assert_eq!(s.remotes.len(), 2);
        assert_eq!(s.words(), "id 100 local 10.0.0.1 dstport 4789 learning on");
        let mut t = s.clone();
        t.dev = Some("ul".into());
        t.ttl = Some(9);
        t.tos = Some(OuterTos::Fixed(0x28));
        assert_eq!(
            t.words(),
            "id 100 local 10.0.0.1 dev ul dstport 4789 ttl 9 tos 0x28 learning on"
        );
        assert!(!t.same_socket(&s));
        t.tos = Some(OuterTos::Inherit);
        assert!(t.words().contains(" tos inherit "));
    }
}
