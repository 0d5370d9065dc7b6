//! Port VLAN modes in Open vSwitch's words (`link set dev P vlan_mode …`), compiled into the
//! membership, PVID and untagged sets every port already has, plus the one thing those cannot
//! say: a `dot1q-tunnel` port pushes its tag on *every* frame, whatever tags the frame carries,
//! and may admit only some customer VLANs (`cvlans`). See `docs/semantics.md` §G.

use crate::vlanset::VlanSet;
use serde::Serialize;

/// `vlan_mode` of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VlanModeKind {
    /// Untagged in VLAN `tag`; tagged frames of another VID are dropped.
    Access,
    /// Tagged members `trunks` (default all); untagged frames are dropped.
    Trunk,
    /// A trunk whose native VLAN `tag` is untagged both ways.
    NativeUntagged,
    /// A trunk whose native VLAN `tag` takes untagged frames and sends tagged ones.
    NativeTagged,
    /// Every frame entering gets the bridge tag `tag`, whatever it carries; frames leaving lose
    /// exactly that tag. `cvlans` restricts the customer VLANs admitted.
    Dot1qTunnel,
}

impl VlanModeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VlanModeKind::Access => "access",
            VlanModeKind::Trunk => "trunk",
            VlanModeKind::NativeUntagged => "native-untagged",
            VlanModeKind::NativeTagged => "native-tagged",
            VlanModeKind::Dot1qTunnel => "dot1q-tunnel",
        }
    }

    pub fn from_name(s: &str) -> Option<VlanModeKind> {
        Some(match s {
            "access" => VlanModeKind::Access,
            "trunk" => VlanModeKind::Trunk,
            "native-untagged" => VlanModeKind::NativeUntagged,
            "native-tagged" => VlanModeKind::NativeTagged,
            "dot1q-tunnel" => VlanModeKind::Dot1qTunnel,
            _ => return None,
        })
    }
}

/// A list of VIDs as ranges (`10,20-30`), sorted and merged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VidList(Vec<(u16, u16)>);

impl VidList {
    /// From ranges in any order; overlapping and adjacent ranges are merged. Ranges must have
    /// `a <= z`.
    pub fn new(mut ranges: Vec<(u16, u16)>) -> VidList {
        ranges.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for (a, z) in ranges {
            match out.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(z),
                _ => out.push((a, z)),
            }
        }
        VidList(out)
    }

    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.0
    }

    pub fn contains(&self, vid: u16) -> bool {
        self.0.iter().any(|&(a, z)| (a..=z).contains(&vid))
    }

    pub fn to_set(&self) -> VlanSet {
        let mut s = VlanSet::default();
        for &(a, z) in &self.0 {
            for v in a..=z {
                s.insert(v);
            }
        }
        s
    }
}

impl std::fmt::Display for VidList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, &(a, z)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == z {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{z}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for VidList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A port's VLAN mode as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VlanMode {
    pub mode: VlanModeKind,
    /// The access, native or tunnel VLAN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<u16>,
    /// Trunk VLANs; `None`: all (1-4094).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trunks: Option<VidList>,
    /// Customer VLANs a `dot1q-tunnel` port admits (0: untagged frames); `None`: all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cvlans: Option<VidList>,
}

/// What a mode compiles into: membership, untagged set and PVID (0: none), and for a tunnel
/// port the customer VLANs it admits (`Some(None)`: all).
pub(crate) struct Compiled {
    pub member: VlanSet,
    pub untagged: VlanSet,
    pub pvid: u16,
    pub tunnel: Option<Option<VlanSet>>,
}

impl VlanMode {
    /// Checks that the words given fit the mode (which needs `tag`, which takes `trunks` or
    /// `cvlans`); the message names the word.
    pub fn check(&self) -> Result<(), String> {
        let m = self.mode.as_str();
        let needs_tag = self.mode != VlanModeKind::Trunk;
        match (needs_tag, self.tag) {
            (true, None) => return Err(format!("vlan_mode {m} needs \"tag VID\"")),
            (false, Some(_)) => {
                return Err("vlan_mode trunk takes no \"tag\" (native-untagged or \
                            native-tagged give a trunk a native VLAN)"
                    .to_string())
            }
            _ => {}
        }
        let trunk_like = matches!(
            self.mode,
            VlanModeKind::Trunk | VlanModeKind::NativeUntagged | VlanModeKind::NativeTagged
        );
        if self.trunks.is_some() && !trunk_like {
            return Err(format!("vlan_mode {m} takes no \"trunks\""));
        }
        if self.cvlans.is_some() && self.mode != VlanModeKind::Dot1qTunnel {
            return Err(format!(
                "\"cvlans\" applies to vlan_mode dot1q-tunnel only, not {m}"
            ));
        }
        for (word, list) in [("trunks", &self.trunks), ("cvlans", &self.cvlans)] {
            if let Some(&(a, z)) = list.iter().flat_map(|l| l.ranges()).find(|(a, z)| a > z) {
                return Err(format!(
                    "{word}: range {a}-{z} is reversed (write it {z}-{a})"
                ));
            }
        }
        if let Some(t) = &self.trunks {
            if t.contains(0) || t.contains(4095) {
                return Err("trunks are VIDs 1 to 4094".to_string());
            }
        }
        if let Some(c) = &self.cvlans {
            if c.contains(4095) {
                return Err("cvlans are VIDs 0 (untagged) to 4094".to_string());
            }
        }
        Ok(())
    }

    /// What the mode makes of a port's VLANs: members, untagged members and PVID (0: none).
    pub fn membership(&self) -> (VlanSet, VlanSet, u16) {
        let c = self.compile();
        (c.member, c.untagged, c.pvid)
    }

    pub(crate) fn compile(&self) -> Compiled {
        let mut member = VlanSet::default();
        let mut untagged = VlanSet::default();
        let all = || VidList(vec![(1, 4094)]);
        let trunks = self.trunks.clone().unwrap_or_else(all);
        let tag = self.tag.unwrap_or(0);
        let mut pvid = 0;
        let mut tunnel = None;
        match self.mode {
            VlanModeKind::Access => {
                member.insert(tag);
                untagged.insert(tag);
                pvid = tag;
            }
            VlanModeKind::Trunk => member = trunks.to_set(),
            VlanModeKind::NativeUntagged | VlanModeKind::NativeTagged => {
                member = trunks.to_set();
                member.insert(tag);
                if self.mode == VlanModeKind::NativeUntagged {
                    untagged.insert(tag);
                }
                pvid = tag;
            }
            VlanModeKind::Dot1qTunnel => {
                member.insert(tag);
                untagged.insert(tag);
                pvid = tag;
                tunnel = Some(self.cvlans.as_ref().map(VidList::to_set));
            }
        }
        Compiled {
            member,
            untagged,
            pvid,
            tunnel,
        }
    }
}

impl std::fmt::Display for VlanMode {
    /// The words of `link set dev P …` that set this mode.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vlan_mode {}", self.mode.as_str())?;
        if let Some(t) = self.tag {
            write!(f, " tag {t}")?;
        }
        if let Some(t) = &self.trunks {
            write!(f, " trunks {t}")?;
        }
        if let Some(c) = &self.cvlans {
            write!(f, " cvlans {c}")?;
        }
        Ok(())
    }
}

/// The violation mode of a per-VLAN limit code.
pub(crate) fn violation_of(code: u32) -> Violation {
    match code >> 24 {
        0 => Violation::Protect,
        1 => Violation::Restrict,
        _ => Violation::Shutdown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_merge_and_print() {
        let l = VidList::new(vec![(20, 30), (10, 10), (25, 40), (41, 41), (0, 0)]);
        assert_eq!(l.to_string(), "0,10,20-41");
        assert!(l.contains(0) && l.contains(33) && !l.contains(42));
    }

    #[test]
    fn modes_compile_to_membership() {
        let m = |mode, tag, trunks: Option<Vec<(u16, u16)>>| VlanMode {
            mode,
            tag,
            trunks: trunks.map(VidList::new),
            cvlans: None,
        };
        let c = m(VlanModeKind::NativeTagged, Some(5), Some(vec![(10, 12)])).compile();
        assert_eq!(c.member.iter().collect::<Vec<_>>(), [5, 10, 11, 12]);
        assert_eq!(c.untagged.iter().count(), 0);
        assert_eq!(c.pvid, 5);
        let c = m(VlanModeKind::Trunk, None, None).compile();
        assert_eq!(c.member.iter().count(), 4094);
        assert_eq!(c.pvid, 0);
        assert!(m(VlanModeKind::Trunk, Some(3), None).check().is_err());
        assert!(m(VlanModeKind::Access, None, None).check().is_err());
        assert!(m(VlanModeKind::Access, Some(3), Some(vec![(1, 2)]))
            .check()
            .is_err());
    }
}

/// A port's role in a private VLAN (`vlan set dev P vid V pvlan …`, OpenBSD veb's and Cisco's
/// words; `docs/semantics.md` §J).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PvlanRole {
    /// Talks to every port of the VLAN.
    Promiscuous,
    /// Talks only to promiscuous ports (and ports without a role).
    Isolated,
    /// Talks to its community and to promiscuous ports (and ports without a role).
    Community(u16),
}

impl PvlanRole {
    /// The compiled code: 0 no role, 1 promiscuous, 2 isolated, 3 + N community N.
    pub(crate) fn code(self) -> u32 {
        match self {
            PvlanRole::Promiscuous => 1,
            PvlanRole::Isolated => 2,
            PvlanRole::Community(n) => 3 + u32::from(n),
        }
    }

    pub(crate) fn from_code(c: u32) -> Option<PvlanRole> {
        match c {
            0 => None,
            1 => Some(PvlanRole::Promiscuous),
            2 => Some(PvlanRole::Isolated),
            n => Some(PvlanRole::Community((n - 3) as u16)),
        }
    }
}

impl std::fmt::Display for PvlanRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PvlanRole::Promiscuous => f.write_str("promiscuous"),
            PvlanRole::Isolated => f.write_str("isolated"),
            PvlanRole::Community(n) => write!(f, "community {n}"),
        }
    }
}

/// Whether a frame may go from a port with private-VLAN code `from` to one with `to` (codes
/// of [`PvlanRole::code`]; 0, no role, talks to everyone like a promiscuous port).
#[inline(always)]
pub(crate) fn pvlan_allows(from: u32, to: u32) -> bool {
    from <= 1 || to <= 1 || (from >= 3 && from == to)
}

/// What a port does with a frame from a new source when its `fdb_max_learned` in the frame's
/// VLAN is reached (`vlan set … fdb_max_learned N violation …`, `docs/semantics.md` §L).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Violation {
    /// Drop the frame (counted as `mac_limit`).
    #[default]
    Protect,
    /// Drop it (`mac_limit_restrict`) and log, at most once per 10 s per port.
    Restrict,
    /// Drop it (`mac_limit_shutdown`) and take the port down until `link set dev P up`.
    Shutdown,
}

impl Violation {
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::Protect => "protect",
            Violation::Restrict => "restrict",
            Violation::Shutdown => "shutdown",
        }
    }
}
