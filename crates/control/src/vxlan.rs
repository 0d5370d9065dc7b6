//! VXLAN ports in the control plane: a port's configuration ([`VxlanSpec`]: VNI or
//! `external`, local VTEP address, UDP port, TTL, learning, its static remote VTEPs and, on an
//! external port, its VLAN ↔ VNI map), the `fdb … dst IP [vni N]` operations on it
//! ([`VxlanFdbOp`]), the `vlan add|del … tunnel_info id N` ones, a `vnifilter` port's VNI
//! list (`vni add|del`), and how they are shown (`fdb show` lines with `dst`, `vlan
//! tunnelshow`, `vni show`, running-config lines).
//!
//! The static remotes live in the spec, as a bond's members live in its spec: they are
//! configuration, shown and saved with the port, and editing them does not reopen the socket
//! (the engine copies them into the backend's table, `qbridge_io::vxlan::VxlanTable`, which
//! also holds what the port learns). Imports nothing of this crate: [`crate::command`] and
//! the session use it.

pub use qbridge_wire::vxlan::OuterTos;
use qbridge_wire::MacAddr;
use std::net::IpAddr;

/// The largest VNI (24 bits).
pub const VNI_MAX: u32 = 0x00ff_ffff;

/// A VXLAN port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// The port's one VNI (`id N`); not used when `external`.
    pub vni: u32,
    /// `external` (ip-link's collect-metadata mode): no VNI of its own; each frame's VNI
    /// comes from its VLAN (`tunnels`), as a Linux vxlan device with `external` in a
    /// VLAN-filtering bridge with `vlan_tunnel on`.
    pub external: bool,
    /// The local VTEP address, IPv4 or IPv6; every remote of the port is of its family (a
    /// kernel vxlan device refuses mixed families too).
    pub local: IpAddr,
    pub dstport: u16,
    /// The outer TTL; `None`: the kernel's default.
    pub ttl: Option<u8>,
    /// The underlay device the sockets are bound to (`dev NAME`); `None`: any.
    pub dev: Option<String>,
    /// The outer TOS (`tos T|inherit`); `None`: 0.
    pub tos: Option<OuterTos>,
    pub learning: bool,
    /// IPv6 underlays: send UDP datagrams with a zero checksum (`udp6zerocsumtx`; RFC 6935
    /// allows it for tunnels, but a peer refuses them unless it has `udp6zerocsumrx`).
    /// Default off: the checksum is computed.
    pub udp6zerocsumtx: bool,
    /// IPv6 underlays: accept datagrams with a zero UDP checksum (`udp6zerocsumrx`); default
    /// off: refused, as the kernel refuses them.
    pub udp6zerocsumrx: bool,
    /// Static remote VTEPs in the order given: (VNI, MAC) → VTEP entries and (all-zeros MAC)
    /// each VNI's flood list.
    pub remotes: Remotes,
    /// External ports: (VID, VNI) pairs by VID, each side unique (`vlan add vid V dev NAME
    /// tunnel_info id N`).
    pub tunnels: Vec<(u16, u32)>,
    /// `vnifilter` (an external port): only the VNIs of `vnis` cross, both ways.
    pub vnifilter: bool,
    /// `vnifilter` ports: the accepted VNIs (`vni add dev NAME vni N[-M]`), sorted disjoint
    /// ranges, adjacent ones merged.
    pub vnis: Vec<(u32, u32)>,
}

/// One static remote: `fdb add MAC dev NAME dst IP [vni N]` or, all-zeros MAC, a flood-list
/// VTEP of VNI `vni`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanRemote {
    pub mac: MacAddr,
    /// Of the family of the port's `local`.
    pub dst: IpAddr,
    pub origin: RemoteOrigin,
    /// The VNI the entry belongs to (the port's `id` on a port with one VNI).
    pub vni: u32,
}

/// rmt92 (decision 92): a VXLAN port's static remotes in the order given, indexed by (VNI,
/// MAC): every per-line operation (add, append, replace, del of one entry, the lookups the
/// session and the trace make) is O(1) amortised instead of a scan of every entry, so a
/// control plane's batch of N routes costs O(N), not O(N²). A removed entry leaves a hole
/// that iteration skips; the holes are closed (order kept) when more than half the slots are
/// holes. Compared, shown and saved as the sequence of its entries.
#[derive(Debug, Clone, Default)]
pub struct Remotes {
    /// The entries in the order given; `None`: removed.
    slots: Vec<Option<VxlanRemote>>,
    /// How many of `slots` are entries.
    live: usize,
    /// (VNI, MAC) → the slots of its entries, in order (one for a unicast MAC; a flood list's
    /// VTEPs for the all-zeros MAC).
    by_key: std::collections::HashMap<(u32, MacAddr), Vec<usize>>,
}

impl Remotes {
    pub fn new() -> Remotes {
        Remotes::default()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The entries in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &VxlanRemote> + '_ {
        self.slots.iter().flatten()
    }

    /// Appends an entry (the caller has checked it is not there: (VNI, MAC, VTEP) is unique).
    pub fn push(&mut self, r: VxlanRemote) {
        self.by_key
            .entry((r.vni, r.mac))
            .or_default()
            .push(self.slots.len());
        self.slots.push(Some(r));
        self.live += 1;
    }

    /// The entries of `mac` in VNI `vni`, in order (a flood list's VTEPs for the all-zeros
    /// MAC).
    pub fn of(&self, vni: u32, mac: MacAddr) -> impl Iterator<Item = &VxlanRemote> + '_ {
        self.by_key
            .get(&(vni, mac))
            .into_iter()
            .flatten()
            .filter_map(|&i| self.slots[i].as_ref())
    }

    /// The first entry of `mac` in VNI `vni`.
    pub fn get(&self, vni: u32, mac: MacAddr) -> Option<&VxlanRemote> {
        self.of(vni, mac).next()
    }

    /// Whether `mac` in VNI `vni` has an entry with VTEP `dst`.
    pub fn contains(&self, vni: u32, mac: MacAddr, dst: IpAddr) -> bool {
        self.of(vni, mac).any(|r| r.dst == dst)
    }

    /// The first entry of `mac` in VNI `vni`, to change in place (its place in the order kept).
    pub fn get_mut(&mut self, vni: u32, mac: MacAddr) -> Option<&mut VxlanRemote> {
        let &i = self.by_key.get(&(vni, mac))?.first()?;
        self.slots[i].as_mut()
    }

    /// Removes the entry of `mac` in VNI `vni` with VTEP `dst`; whether there was one.
    pub fn remove(&mut self, vni: u32, mac: MacAddr, dst: IpAddr) -> bool {
        let Some(at) = self.by_key.get_mut(&(vni, mac)) else {
            return false;
        };
        let slots = &mut self.slots;
        let Some(k) = at
            .iter()
            .position(|&i| slots[i].is_some_and(|r| r.dst == dst))
        else {
            return false;
        };
        slots[at.remove(k)] = None;
        if at.is_empty() {
            self.by_key.remove(&(vni, mac));
        }
        self.live -= 1;
        self.compact_if_sparse();
        true
    }

    /// Removes every entry of `mac` in VNI `vni` (`None`: in every VNI); whether there were
    /// any. O(1) amortised with a VNI, O(entries) without.
    pub fn remove_mac(&mut self, mac: MacAddr, vni: Option<u32>) -> bool {
        let Some(vni) = vni else {
            let before = self.live;
            self.retain(|r| r.mac != mac);
            return self.live != before;
        };
        let Some(at) = self.by_key.remove(&(vni, mac)) else {
            return false;
        };
        for i in at {
            if self.slots[i].take().is_some() {
                self.live -= 1;
            }
        }
        self.compact_if_sparse();
        true
    }

    /// Keeps the entries `keep` says (O(entries)).
    pub fn retain(&mut self, mut keep: impl FnMut(&VxlanRemote) -> bool) {
        let kept: Vec<VxlanRemote> = self.iter().filter(|r| keep(r)).copied().collect();
        *self = kept.into_iter().collect();
    }

    pub fn clear(&mut self) {
        *self = Remotes::default();
    }

    /// Closes the holes when more than half the slots are holes (order kept).
    fn compact_if_sparse(&mut self) {
        if self.slots.len() - self.live > self.live {
            self.retain(|_| true);
        }
    }
}

impl PartialEq for Remotes {
    fn eq(&self, other: &Remotes) -> bool {
        self.live == other.live && self.iter().eq(other.iter())
    }
}

impl Eq for Remotes {}

impl FromIterator<VxlanRemote> for Remotes {
    fn from_iter<I: IntoIterator<Item = VxlanRemote>>(it: I) -> Remotes {
        let mut s = Remotes::default();
        for r in it {
            s.push(r);
        }
        s
    }
}

impl From<Vec<VxlanRemote>> for Remotes {
    fn from(v: Vec<VxlanRemote>) -> Remotes {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Remotes {
    type Item = &'a VxlanRemote;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Option<VxlanRemote>>>;
    fn into_iter(self) -> Self::IntoIter {
        self.slots.iter().flatten()
    }
}

/// Who put a remote there: the operator, or a control plane (`extern_learn`, bridge-fdb(8)'s
/// word; EVPN's `qbridge-evpn`). A control plane's entries are shown and saved with the flag
/// (as the bridge's `extern_learn` entries are); the control plane owns them: it re-derives
/// them and removes those it no longer has a route for, and never touches the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteOrigin {
    #[default]
    Static,
    ExternLearn,
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
        (self.vni, self.external, self.vnifilter, self.local)
            == (other.vni, other.external, other.vnifilter, other.local)
            && (self.dstport, self.ttl) == (other.dstport, other.ttl)
            && (&self.dev, self.tos) == (&other.dev, other.tos)
            && (self.udp6zerocsumtx, self.udp6zerocsumrx)
                == (other.udp6zerocsumtx, other.udp6zerocsumrx)
    }

    /// `id 100 local 10.0.0.1 [dev ul] dstport 4789 [ttl N] [tos T] [udp6zerocsumtx]
    /// [udp6zerocsumrx] learning on` (`external` in place of `id N`; `local 2001:db8::1` on an
    /// IPv6 underlay): the words after `type vxlan`.
    pub fn words(&self) -> String {
        let id = if self.vnifilter {
            "external vnifilter".to_string()
        } else if self.external {
            "external".to_string()
        } else {
            format!("id {}", self.vni)
        };
        let mut s = format!("{id} local {}", self.local);
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
        if self.udp6zerocsumtx {
            s.push_str(" udp6zerocsumtx");
        }
        if self.udp6zerocsumrx {
            s.push_str(" udp6zerocsumrx");
        }
        s.push_str(if self.learning {
            " learning on"
        } else {
            " learning off"
        });
        s
    }

    /// The VNI an `fdb … dst IP [vni N]` line names: the port's `id` (which `vni` may
    /// repeat), or on an external port the `vni` it must give.
    pub fn entry_vni(&self, port: &str, vni: Option<u32>) -> Result<u32, String> {
        match (self.external, vni) {
            (false, None) => Ok(self.vni),
            (false, Some(v)) if v == self.vni => Ok(v),
            (false, Some(v)) => Err(format!(
                "vxlan port {port} carries VNI {} only (id {}): vni {v} is for an external \
                 port's entries",
                self.vni, self.vni
            )),
            (true, Some(v)) => Ok(v),
            (true, None) => Err(format!(
                "vxlan port {port} is external: name the entry's VNI (vni N)"
            )),
        }
    }

    /// Applies `op` to the static remotes of VNI `vni` (see [`VxlanSpec::entry_vni`]); the
    /// message of an error names `port`.
    pub fn apply(
        &mut self,
        port: &str,
        op: VxlanFdbOp,
        mac: MacAddr,
        dst: IpAddr,
        vni: Option<u32>,
    ) -> Result<(), String> {
        self.apply_from(port, op, mac, dst, vni, RemoteOrigin::Static)
    }

    /// [`VxlanSpec::apply`] for an entry of `origin`: an added or replaced entry gets it (a
    /// control plane's `replace` takes an operator's entry over).
    pub fn apply_from(
        &mut self,
        port: &str,
        op: VxlanFdbOp,
        mac: MacAddr,
        dst: IpAddr,
        vni: Option<u32>,
        origin: RemoteOrigin,
    ) -> Result<(), String> {
        let vni = self.entry_vni(port, vni)?;
        let flood = mac.is_zero();
        if !flood && !mac.is_unicast() {
            return Err(format!(
                "vxlan port {port}: {mac} is a group address; only unicast MACs and \
                 00:00:00:00:00:00 (the flood list) have remote VTEPs"
            ));
        }
        if let Some(why) = vtep_problem(dst) {
            return Err(format!("vxlan port {port}: dst {dst} {why}"));
        }
        if dst.is_ipv6() != self.local.is_ipv6() {
            return Err(mixed_families(port, self.local, "dst", dst));
        }
        // rmt92 (decision 92): by the index, not a scan of every entry.
        let here = self.remotes.get(vni, mac).map(|r| r.dst);
        let exact = self.remotes.contains(vni, mac, dst);
        let entry = VxlanRemote {
            mac,
            dst,
            origin,
            vni,
        };
        match op {
            VxlanFdbOp::Append if !flood => {
                return Err(format!(
                    "vxlan port {port}: \"append\" is for 00:00:00:00:00:00 (the flood list); \
                     {mac} has one VTEP: use add or replace"
                ))
            }
            VxlanFdbOp::Append | VxlanFdbOp::Add if exact => {
                return Err(format!("vxlan port {port}: {mac} dst {dst} exists already"))
            }
            VxlanFdbOp::Append => self.remotes.push(entry),
            VxlanFdbOp::Add if here.is_some() => {
                return Err(format!(
                    "vxlan port {port}: {mac} has a VTEP already ({}){}",
                    here.unwrap_or(dst),
                    if flood {
                        ": use append to add another"
                    } else {
                        ": use replace to change it"
                    }
                ))
            }
            VxlanFdbOp::Add => self.remotes.push(entry),
            VxlanFdbOp::Replace => match self.remotes.get_mut(vni, mac) {
                Some(r) if !flood => {
                    r.dst = dst;
                    r.origin = origin;
                }
                _ if exact => {}
                _ => self.remotes.push(entry),
            },
            VxlanFdbOp::Del => {
                if !self.remotes.remove(vni, mac, dst) {
                    return Err(format!("vxlan port {port}: no entry {mac} dst {dst}"));
                }
            }
        }
        Ok(())
    }
}

/// A learned entry of a VXLAN port's table: VNI, MAC, VTEP.
pub type Learned = (u32, MacAddr, IpAddr);

/// Why `a` cannot be a VTEP address (`local`, `remote`, `dst`), or `None`: a unicast address
/// of either family that a socket can bind or send to without a scope. Link-local IPv6
/// addresses are refused: their scope (the underlay device) is not part of the address a
/// flood list or an EVPN next hop names (docs/decisions.md 69).
pub fn vtep_problem(a: IpAddr) -> Option<&'static str> {
    match a {
        IpAddr::V4(v) if v.is_unspecified() || v.is_multicast() || v.is_broadcast() => {
            Some("is not a unicast VTEP address")
        }
        IpAddr::V6(v) if v.is_unspecified() || v.is_multicast() => {
            Some("is not a unicast VTEP address")
        }
        IpAddr::V6(v) if v.to_ipv4_mapped().is_some() => {
            Some("is an IPv4-mapped IPv6 address: give the IPv4 address itself")
        }
        IpAddr::V6(v) if (v.segments()[0] & 0xffc0) == 0xfe80 => Some(
            "is link-local: a VTEP address must be global or unique-local (fe80::/10 needs a \
             scope that a flood list or EVPN next hop cannot carry)",
        ),
        _ => None,
    }
}

/// The error of a VTEP address whose family differs from the port's `local` (the kernel:
/// "local and remote address must be from the same family").
pub fn mixed_families(port: &str, local: IpAddr, what: &str, a: IpAddr) -> String {
    let fam = |a: IpAddr| if a.is_ipv6() { "IPv6" } else { "IPv4" };
    format!(
        "vxlan port {port}: {what} {a} is {} but local {local} is {}: one port's VTEP \
         addresses are of one family (make a second port for the other)",
        fam(a),
        fam(local)
    )
}

/// ` vni N` where `vni` is not the port's own VNI (always on an external port).
fn vni_word(spec: &VxlanSpec, vni: u32) -> String {
    if spec.external || vni != spec.vni {
        format!(" vni {vni}")
    } else {
        String::new()
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
/// entries: `00:00:00:00:00:00 dev vx0 dst 10.0.0.2 [vni 1000] self permanent` (`vni` where
/// it is not the port's `id`); a control plane's `… self extern_learn`; learned ones with
/// neither.
pub fn fdb_lines(port: &str, spec: &VxlanSpec, learned: &[Learned]) -> String {
    let mut s = String::new();
    for r in &spec.remotes {
        let kind = match r.origin {
            RemoteOrigin::Static => "permanent",
            RemoteOrigin::ExternLearn => "extern_learn",
        };
        s.push_str(&format!(
            "{} dev {port} dst {}{} self {kind}\n",
            r.mac,
            r.dst,
            vni_word(spec, r.vni)
        ));
    }
    for (v, m, d) in learned {
        s.push_str(&format!(
            "{m} dev {port} dst {d}{} self\n",
            vni_word(spec, *v)
        ));
    }
    s
}

/// One `fdb show -j` object of a VXLAN port's entry (keys in bridge-fdb's order).
#[derive(Debug, serde::Serialize)]
pub struct FdbJson<'a> {
    pub mac: String,
    pub ifname: &'a str,
    pub dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    pub flags: &'static [&'static str],
    pub state: &'static str,
}

/// The same entries as `fdb show -j` objects, in bridge-fdb(8)'s keys: `mac`, `ifname`, `dst`,
/// `flags` (`self`; a control plane's: `self`, `extern_learn`), `state` (`permanent` for
/// static ones, empty for learned and control-plane ones); `vni` where it is not the port's
/// `id`.
pub fn fdb_json<'a>(port: &'a str, spec: &VxlanSpec, learned: &[Learned]) -> Vec<FdbJson<'a>> {
    let obj = |v: u32, m: &MacAddr, d: &IpAddr, flags, state: &'static str| FdbJson {
        mac: m.to_string(),
        ifname: port,
        dst: d.to_string(),
        vni: (spec.external || v != spec.vni).then_some(v),
        flags,
        state,
    };
    spec.remotes
        .iter()
        .map(|r| match r.origin {
            RemoteOrigin::Static => obj(r.vni, &r.mac, &r.dst, &["self"], "permanent"),
            RemoteOrigin::ExternLearn => obj(r.vni, &r.mac, &r.dst, &["self", "extern_learn"], ""),
        })
        .chain(learned.iter().map(|(v, m, d)| obj(*v, m, d, &["self"], "")))
        .collect()
}

/// Runs of consecutive VIDs mapped to consecutive VNIs: (first VID, last VID, first VNI).
pub fn tunnel_runs(tunnels: &[(u16, u32)]) -> Vec<(u16, u16, u32)> {
    let mut runs: Vec<(u16, u16, u32)> = Vec::new();
    for &(vid, vni) in tunnels {
        match runs.last_mut() {
            Some((a, z, n)) if *z + 1 == vid && *n + u32::from(*z - *a) + 1 == vni => *z = vid,
            _ => runs.push((vid, vid, vni)),
        }
    }
    runs
}

fn range_words(a: u32, z: u32) -> String {
    if a == z {
        a.to_string()
    } else {
        format!("{a}-{z}")
    }
}

impl VxlanSpec {
    /// `vlan add vid A[-Z] dev PORT tunnel_info id N[-M]`: maps each VID to a VNI. Refused on
    /// a port that is not `external`, for ranges of unequal lengths, VNI 0, a VID mapped to
    /// another VNI, a VNI mapped from another VID. Nothing changes when refused. (That each
    /// VID is a tagged member of the port is the session's check.)
    pub fn tunnel_add(
        &mut self,
        port: &str,
        vids: (u16, u16),
        vnis: (u32, u32),
    ) -> Result<(), String> {
        if !self.external {
            return Err(format!(
                "vxlan port {port} has one VNI (id {}): tunnel_info maps VLANs on a port made \
                 with external",
                self.vni
            ));
        }
        let (a, z) = vids;
        let (n, m) = vnis;
        if z < a {
            return Err(format!("vid {a}-{z}: the range ends below its start"));
        }
        if m < n || u32::from(z - a) != m - n {
            return Err(format!(
                "tunnel_info id {}: {} VNIs for {} VLANs (vid {}); the ranges must be as long",
                range_words(n, m),
                m.saturating_sub(n) + 1,
                z - a + 1,
                range_words(a.into(), z.into())
            ));
        }
        if n == 0 {
            return Err("tunnel_info id 0: VNI 0 cannot be mapped (1-16777215)".into());
        }
        let mut next = self.tunnels.clone();
        for (k, vid) in (a..=z).enumerate() {
            let vni = n + k as u32;
            if let Some(&(_, old)) = next.iter().find(|t| t.0 == vid) {
                if old != vni {
                    return Err(format!(
                        "vid {vid} of {port} maps to VNI {old} already: delete it first"
                    ));
                }
                continue;
            }
            if let Some(&(other, _)) = next.iter().find(|t| t.1 == vni) {
                return Err(format!(
                    "VNI {vni} of {port} is mapped from vid {other} already"
                ));
            }
            next.push((vid, vni));
        }
        next.sort_unstable();
        self.tunnels = next;
        Ok(())
    }

    /// `vlan del vid A[-Z] dev PORT tunnel_info [id N[-M]]`: removes the maps of those VIDs
    /// (each must have one, to the VNI named when `vnis` is given).
    pub fn tunnel_del(
        &mut self,
        port: &str,
        vids: (u16, u16),
        vnis: Option<(u32, u32)>,
    ) -> Result<(), String> {
        let (a, z) = vids;
        if z < a {
            return Err(format!("vid {a}-{z}: the range ends below its start"));
        }
        if let Some((n, m)) = vnis {
            if m < n || u32::from(z - a) != m - n {
                return Err(format!(
                    "tunnel_info id {}: the ranges must be as long (vid {})",
                    range_words(n, m),
                    range_words(a.into(), z.into())
                ));
            }
        }
        for (k, vid) in (a..=z).enumerate() {
            match self.tunnels.iter().find(|t| t.0 == vid) {
                None => return Err(format!("vid {vid} of {port} has no tunnel_info")),
                Some(&(_, old)) => {
                    if let Some((n, _)) = vnis {
                        if old != n + k as u32 {
                            return Err(format!(
                                "vid {vid} of {port} maps to VNI {old}, not {}",
                                n + k as u32
                            ));
                        }
                    }
                }
            }
        }
        self.tunnels.retain(|t| t.0 < a || t.0 > z);
        Ok(())
    }

    /// The running configuration's `vlan add … tunnel_info` lines of port `port`.
    pub fn tunnel_lines(&self, port: &str) -> String {
        tunnel_runs(&self.tunnels)
            .into_iter()
            .map(|(a, z, n)| {
                format!(
                    "vlan add vid {} dev {port} tunnel_info id {}\n",
                    range_words(a.into(), z.into()),
                    range_words(n, n + u32::from(z - a))
                )
            })
            .collect()
    }
}

impl VxlanSpec {
    /// `vni add dev PORT vni N[-M]`: on a `vnifilter` port, the VNIs join the accepted list.
    pub fn vni_add(&mut self, port: &str, (a, z): (u32, u32)) -> Result<(), String> {
        if !self.vnifilter {
            return Err(format!(
                "vxlan port {port} has no vnifilter: vni add lists the VNIs of a port made \
                 with vnifilter"
            ));
        }
        let mut v = self.vnis.clone();
        v.push((a, z));
        v.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.vnis = merged;
        Ok(())
    }

    /// `vni del dev PORT vni N[-M]`: every VNI of the range must be listed.
    pub fn vni_del(&mut self, port: &str, (a, z): (u32, u32)) -> Result<(), String> {
        if !self.vnis.iter().any(|&(s, e)| s <= a && z <= e) {
            return Err(format!("vni {} is not in {port}'s list", range_words(a, z)));
        }
        let mut out = Vec::with_capacity(self.vnis.len() + 1);
        for &(s, e) in &self.vnis {
            if e < a || s > z {
                out.push((s, e));
                continue;
            }
            if s < a {
                out.push((s, a - 1));
            }
            if e > z {
                out.push((z + 1, e));
            }
        }
        self.vnis = out;
        Ok(())
    }

    /// The running configuration's `vni add` lines of port `port`.
    pub fn vni_lines(&self, port: &str) -> String {
        self.vnis
            .iter()
            .map(|&(a, z)| format!("vni add dev {port} vni {}\n", range_words(a, z)))
            .collect()
    }
}

/// `vni show` text, as bridge(8) prints it: `dev vni` columns, the port's name on its first
/// line only.
pub fn vni_show_text(ports: &[(&str, &VxlanSpec)]) -> String {
    let mut s = format!("{:<16}  {}\n", "dev", "vni");
    for (name, spec) in ports {
        for (k, &(a, z)) in spec.vnis.iter().enumerate() {
            let port = if k == 0 { *name } else { "" };
            s.push_str(&format!("{port:<16}  {}\n", range_words(a, z)));
        }
    }
    s
}

/// One range of `vni show -j`, in bridge(8)'s keys.
#[derive(Debug, serde::Serialize)]
pub struct VniJson {
    pub vni: u32,
    #[serde(rename = "vniEnd", skip_serializing_if = "Option::is_none")]
    pub vni_end: Option<u32>,
}

/// One port of `vni show -j`: `{"ifname", "vnis": [...]}`.
#[derive(Debug, serde::Serialize)]
pub struct VniPortJson<'a> {
    pub ifname: &'a str,
    pub vnis: Vec<VniJson>,
}

/// `vni show -j`'s objects.
pub fn vni_show_json<'a>(ports: &[(&'a str, &VxlanSpec)]) -> Vec<VniPortJson<'a>> {
    ports
        .iter()
        .map(|(name, spec)| VniPortJson {
            ifname: name,
            vnis: spec
                .vnis
                .iter()
                .map(|&(a, z)| VniJson {
                    vni: a,
                    vni_end: (z != a).then_some(z),
                })
                .collect(),
        })
        .collect()
}

/// `vlan tunnelshow` text, as bridge(8) prints it: a header, then per port its runs, the
/// port's name on its first line only.
pub fn tunnelshow_text(ports: &[(&str, &VxlanSpec)]) -> String {
    let mut s = format!("{:<16}  {:<9}    tunnel-id\n", "port", "vlan-id");
    for (name, spec) in ports {
        for (k, (a, z, n)) in tunnel_runs(&spec.tunnels).into_iter().enumerate() {
            let port = if k == 0 { *name } else { "" };
            s.push_str(&format!(
                "{port:<16}  {:<9}    {}\n",
                range_words(a.into(), z.into()),
                range_words(n, n + u32::from(z - a))
            ));
        }
    }
    s
}

/// One run of `vlan tunnelshow -j`, in bridge(8)'s keys.
#[derive(Debug, serde::Serialize)]
pub struct TunnelJson {
    pub vlan: u16,
    #[serde(rename = "vlanEnd", skip_serializing_if = "Option::is_none")]
    pub vlan_end: Option<u16>,
    pub tunid: u32,
    #[serde(rename = "tunidEnd", skip_serializing_if = "Option::is_none")]
    pub tunid_end: Option<u32>,
}

/// One port of `vlan tunnelshow -j`: `{"ifname", "tunnels": [...]}`.
#[derive(Debug, serde::Serialize)]
pub struct TunnelPortJson<'a> {
    pub ifname: &'a str,
    pub tunnels: Vec<TunnelJson>,
}

/// `vlan tunnelshow -j`'s objects.
pub fn tunnelshow_json<'a>(ports: &[(&'a str, &VxlanSpec)]) -> Vec<TunnelPortJson<'a>> {
    ports
        .iter()
        .map(|(name, spec)| TunnelPortJson {
            ifname: name,
            tunnels: tunnel_runs(&spec.tunnels)
                .into_iter()
                .map(|(a, z, n)| TunnelJson {
                    vlan: a,
                    vlan_end: (z != a).then_some(z),
                    tunid: n,
                    tunid_end: (z != a).then_some(n + u32::from(z - a)),
                })
                .collect(),
        })
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
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
            remotes: Remotes::new(),
            external: false,
            tunnels: Vec::new(),
            vnifilter: false,
            vnis: Vec::new(),
        }
    }

    #[test]
    fn remotes_follow_bridge_fdb_rules() {
        let mut s = spec();
        let z = MacAddr([0; 6]);
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "10.0.0.3".parse().unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, a, None).unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, b, None).unwrap();
        assert!(s
            .apply("vx0", VxlanFdbOp::Append, z, b, None)
            .unwrap_err()
            .contains("exists already"));
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, z, "10.0.0.4".parse().unwrap(), None)
            .is_err());
        s.apply("vx0", VxlanFdbOp::Add, m, a, None).unwrap();
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, m, b, None)
            .unwrap_err()
            .contains("replace"));
        s.apply("vx0", VxlanFdbOp::Replace, m, b, None).unwrap();
        assert!(s.apply("vx0", VxlanFdbOp::Append, m, a, None).is_err());
        assert!(s
            .apply("vx0", VxlanFdbOp::Add, MacAddr([0xff; 6]), a, None)
            .unwrap_err()
            .contains("group address"));
        assert!(s
            .apply(
                "vx0",
                VxlanFdbOp::Add,
                m,
                "224.0.0.1".parse().unwrap(),
                None
            )
            .is_err());
        assert_eq!(
            fdb_lines("vx0", &s, &[(100, MacAddr([2, 0, 0, 0, 0, 9]), a)]),
            "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self permanent\n\
             00:00:00:00:00:00 dev vx0 dst 10.0.0.3 self permanent\n\
             02:00:00:00:00:01 dev vx0 dst 10.0.0.3 self permanent\n\
             02:00:00:00:00:09 dev vx0 dst 10.0.0.2 self\n"
        );
        s.apply("vx0", VxlanFdbOp::Del, z, a, None).unwrap();
        assert!(s.apply("vx0", VxlanFdbOp::Del, z, a, None).is_err());
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

    #[test]
    fn extern_learn_remotes_are_flagged() {
        let mut s = spec();
        let z = MacAddr([0; 6]);
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        let b: IpAddr = "10.0.0.3".parse().unwrap();
        s.apply_from(
            "vx0",
            VxlanFdbOp::Append,
            z,
            a,
            None,
            RemoteOrigin::ExternLearn,
        )
        .unwrap();
        s.apply_from("vx0", VxlanFdbOp::Add, m, a, None, RemoteOrigin::Static)
            .unwrap();
        // A control plane's replace takes the entry over, flag and all.
        s.apply_from(
            "vx0",
            VxlanFdbOp::Replace,
            m,
            b,
            None,
            RemoteOrigin::ExternLearn,
        )
        .unwrap();
        assert_eq!(
            fdb_lines("vx0", &s, &[]),
            "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self extern_learn\n\
             02:00:00:00:00:01 dev vx0 dst 10.0.0.3 self extern_learn\n"
        );
        let j = serde_json::to_string(&fdb_json("vx0", &s, &[])).unwrap();
        assert!(
            j.contains(r#""dst":"10.0.0.2","flags":["self","extern_learn"],"state":"""#),
            "{j}"
        );
    }

    #[test]
    fn external_ports_key_entries_by_vni_and_map_vlans() {
        let mut s = spec();
        let z = MacAddr([0; 6]);
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        // One VNI: `vni` may repeat it, not name another; no tunnel_info.
        s.apply("vx0", VxlanFdbOp::Append, z, a, Some(100)).unwrap();
        let e = s
            .apply("vx0", VxlanFdbOp::Append, z, a, Some(200))
            .unwrap_err();
        assert!(e.contains("carries VNI 100 only"), "{e}");
        let e = s.tunnel_add("vx0", (10, 10), (1000, 1000)).unwrap_err();
        assert!(e.contains("external"), "{e}");
        // External: the VNI is required; one MAC per VNI.
        s.external = true;
        s.remotes.clear();
        let e = s.apply("vx0", VxlanFdbOp::Append, z, a, None).unwrap_err();
        assert!(e.contains("vni N"), "{e}");
        s.apply("vx0", VxlanFdbOp::Append, z, a, Some(1000))
            .unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, a, Some(2000))
            .unwrap();
        s.tunnel_add("vx0", (10, 12), (1000, 1002)).unwrap();
        s.tunnel_add("vx0", (20, 20), (2000, 2000)).unwrap();
        s.tunnel_add("vx0", (11, 11), (1001, 1001)).unwrap();
        assert!(s
            .tunnel_add("vx0", (10, 10), (3000, 3000))
            .unwrap_err()
            .contains("maps to VNI 1000 already"));
        assert!(s
            .tunnel_add("vx0", (30, 30), (2000, 2000))
            .unwrap_err()
            .contains("mapped from vid 20"));
        assert!(s
            .tunnel_add("vx0", (30, 31), (3000, 3000))
            .unwrap_err()
            .contains("as long"));
        assert!(s.tunnel_add("vx0", (30, 30), (0, 0)).is_err());
        assert!(s.tunnel_add("vx0", (31, 30), (3000, 3000)).is_err());
        assert!(s.tunnel_del("vx0", (31, 30), None).is_err());
        assert_eq!(
            fdb_lines("vx0", &s, &[(2000, MacAddr([2, 0, 0, 0, 0, 9]), a)]),
            "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 vni 1000 self permanent\n\
             00:00:00:00:00:00 dev vx0 dst 10.0.0.2 vni 2000 self permanent\n\
             02:00:00:00:00:09 dev vx0 dst 10.0.0.2 vni 2000 self\n"
        );
        assert_eq!(
            s.tunnel_lines("vx0"),
            "vlan add vid 10-12 dev vx0 tunnel_info id 1000-1002\n\
             vlan add vid 20 dev vx0 tunnel_info id 2000\n"
        );
        assert_eq!(
            tunnelshow_text(&[("vx0", &s)]),
            "port              vlan-id      tunnel-id\n\
             vx0               10-12        1000-1002\n\
             \x20                 20           2000\n"
        );
        assert!(s
            .tunnel_del("vx0", (20, 20), Some((2001, 2001)))
            .unwrap_err()
            .contains("maps to VNI 2000, not 2001"));
        s.tunnel_del("vx0", (11, 12), None).unwrap();
        assert!(s.tunnel_del("vx0", (11, 11), None).is_err());
        assert_eq!(s.tunnels, vec![(10, 1000), (20, 2000)]);
        assert_eq!(
            s.words(),
            "external local 10.0.0.1 dstport 4789 learning on"
        );
    }

    #[test]
    fn ipv6_vteps_and_one_family_per_port() {
        let mut s = spec();
        let z = MacAddr([0; 6]);
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        let v6: IpAddr = "2001:db8::2".parse().unwrap();
        // An IPv4 port refuses an IPv6 VTEP, as the kernel does.
        let e = s.apply("vx0", VxlanFdbOp::Append, z, v6, None).unwrap_err();
        assert!(e.contains("is IPv6 but local 10.0.0.1 is IPv4"), "{e}");
        // An IPv6 port: flood list, a static entry, shown and saved as IPv6.
        s.local = "2001:db8::1".parse().unwrap();
        s.apply("vx0", VxlanFdbOp::Append, z, v6, None).unwrap();
        s.apply(
            "vx0",
            VxlanFdbOp::Append,
            z,
            "2001:db8::3".parse().unwrap(),
            None,
        )
        .unwrap();
        s.apply("vx0", VxlanFdbOp::Add, m, v6, None).unwrap();
        let e = s
            .apply("vx0", VxlanFdbOp::Add, m, "10.0.0.2".parse().unwrap(), None)
            .unwrap_err();
        assert!(e.contains("is IPv4 but local 2001:db8::1 is IPv6"), "{e}");
        for bad in ["ff02::1", "::", "fe80::1", "::ffff:10.0.0.2"] {
            let e = s
                .apply("vx0", VxlanFdbOp::Replace, m, bad.parse().unwrap(), None)
                .unwrap_err();
            assert!(e.contains(&format!("dst {bad} ")), "{e}");
        }
        assert_eq!(
            fdb_lines("vx0", &s, &[(100, MacAddr([2, 0, 0, 0, 0, 9]), v6)]),
            "00:00:00:00:00:00 dev vx0 dst 2001:db8::2 self permanent\n\
             00:00:00:00:00:00 dev vx0 dst 2001:db8::3 self permanent\n\
             02:00:00:00:00:01 dev vx0 dst 2001:db8::2 self permanent\n\
             02:00:00:00:00:09 dev vx0 dst 2001:db8::2 self\n"
        );
        let j = serde_json::to_string(&fdb_json("vx0", &s, &[])).unwrap();
        assert!(j.contains(r#""dst":"2001:db8::3","flags":["self"]"#), "{j}");
        assert_eq!(
            s.words(),
            "id 100 local 2001:db8::1 dstport 4789 learning on"
        );
        let mut t = s.clone();
        t.udp6zerocsumtx = true;
        t.udp6zerocsumrx = true;
        assert_eq!(
            t.words(),
            "id 100 local 2001:db8::1 dstport 4789 udp6zerocsumtx udp6zerocsumrx learning on"
        );
        assert!(!t.same_socket(&s));
    }
}

/// rmt92 (decision 92): [`Remotes`] against a plain `Vec` and the scans it replaces.
#[cfg(test)]
mod rmt92_tests {
    use super::*;
    use proptest::prelude::*;

    /// The pre-92 `apply_from` on a `Vec` (a scan per line): the model.
    fn model_apply(v: &mut Vec<VxlanRemote>, op: VxlanFdbOp, e: VxlanRemote) -> Result<(), String> {
        let (mac, dst, vni, port) = (e.mac, e.dst, e.vni, "vx0");
        let flood = mac.is_zero();
        let here = v.iter().position(|r| r.mac == mac && r.vni == vni);
        let exact = v
            .iter()
            .position(|r| r.mac == mac && r.dst == dst && r.vni == vni);
        match op {
            VxlanFdbOp::Append if !flood => return Err("append".into()),
            VxlanFdbOp::Append | VxlanFdbOp::Add if exact.is_some() => {
                return Err(format!("vxlan port {port}: {mac} dst {dst} exists already"))
            }
            VxlanFdbOp::Append => v.push(e),
            VxlanFdbOp::Add if here.is_some() => {
                return Err(format!(
                    "vxlan port {port}: {mac} has a VTEP already ({}){}",
                    v[here.unwrap_or_default()].dst,
                    if flood {
                        ": use append to add another"
                    } else {
                        ": use replace to change it"
                    }
                ))
            }
            VxlanFdbOp::Add => v.push(e),
            VxlanFdbOp::Replace => match here {
                Some(i) if !flood => {
                    v[i].dst = dst;
                    v[i].origin = e.origin;
                }
                _ if exact.is_some() => {}
                _ => v.push(e),
            },
            VxlanFdbOp::Del => match exact {
                Some(i) => {
                    v.remove(i);
                }
                None => return Err(format!("vxlan port {port}: no entry {mac} dst {dst}")),
            },
        }
        Ok(())
    }

    fn external() -> VxlanSpec {
        VxlanSpec {
            vni: 0,
            external: true,
            local: "192.0.2.1".parse().unwrap(),
            dstport: 4789,
            ttl: None,
            dev: None,
            tos: None,
            learning: false,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
            remotes: Remotes::new(),
            tunnels: Vec::new(),
            vnifilter: false,
            vnis: Vec::new(),
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Op(u8, u8, u8, u8, bool),
        RemoveMac(u8, Option<u8>),
        RetainStatic,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => (0u8..4, 0u8..4, 0u8..3, 0u8..2, any::<bool>())
                .prop_map(|(o, m, d, v, x)| Step::Op(o, m, d, v, x)),
            1 => (0u8..4, proptest::option::of(0u8..2)).prop_map(|(m, v)| Step::RemoveMac(m, v)),
            1 => Just(Step::RetainStatic),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
        /// Every line's answer and the entries' order are the `Vec` model's; the index finds
        /// exactly the model's entries after every step.
        #[test]
        fn remotes_match_a_vec(steps in proptest::collection::vec(step(), 1..120)) {
            let mut s = external();
            let mut model: Vec<VxlanRemote> = Vec::new();
            let macs = [
                MacAddr::ZERO,
                MacAddr([2, 0, 0, 0, 0, 1]),
                MacAddr([2, 0, 0, 0, 0, 2]),
                MacAddr([2, 0, 0, 0, 0, 3]),
            ];
            let vnis = [100u32, 200];
            for st in steps {
                match st {
                    Step::Op(o, m, d, v, x) => {
                        let op = [VxlanFdbOp::Add, VxlanFdbOp::Append, VxlanFdbOp::Replace,
                            VxlanFdbOp::Del][o as usize];
                        let e = VxlanRemote {
                            mac: macs[m as usize],
                            dst: IpAddr::from([192, 0, 2, 10 + d]),
                            origin: if x { RemoteOrigin::ExternLearn } else { RemoteOrigin::Static },
                            vni: vnis[v as usize],
                        };
                        let got = s.apply_from("vx0", op, e.mac, e.dst, Some(e.vni), e.origin);
                        let want = model_apply(&mut model, op, e);
                        prop_assert_eq!(got.is_ok(), want.is_ok());
                        if let (Err(g), Err(w)) = (&got, &want) {
                            if w != "append" {
                                prop_assert_eq!(g, w);
                            }
                        }
                    }
                    Step::RemoveMac(m, v) => {
                        let (mac, vni) = (macs[m as usize], v.map(|v| vnis[v as usize]));
                        let hit = |r: &VxlanRemote| r.mac == mac && vni.is_none_or(|k| k == r.vni);
                        let want = model.iter().any(hit);
                        model.retain(|r| !hit(r));
                        prop_assert_eq!(s.remotes.remove_mac(mac, vni), want);
                    }
                    Step::RetainStatic => {
                        model.retain(|r| r.origin == RemoteOrigin::Static);
                        s.remotes.retain(|r| r.origin == RemoteOrigin::Static);
                    }
                }
                let got: Vec<VxlanRemote> = s.remotes.iter().copied().collect();
                prop_assert_eq!(&got, &model);
                prop_assert_eq!(s.remotes.len(), model.len());
                prop_assert_eq!(s.remotes.clone(), model.clone().into());
                for &vni in &vnis {
                    for &mac in &macs {
                        let want: Vec<_> =
                            model.iter().filter(|r| r.vni == vni && r.mac == mac).collect();
                        let of: Vec<_> = s.remotes.of(vni, mac).collect();
                        prop_assert_eq!(&of, &want);
                        prop_assert_eq!(s.remotes.get(vni, mac), want.first().copied());
                    }
                }
                // The holes never outnumber the entries.
                prop_assert!(s.remotes.slots.len() - s.remotes.len() <= s.remotes.len());
            }
        }
    }

    /// Order kept across a delete in the middle, a replace and the compaction.
    #[test]
    fn order_is_the_order_given() {
        let m = |i: u8| MacAddr([2, 0, 0, 0, 0, i]);
        let ip = |i: u8| IpAddr::from([192, 0, 2, i]);
        let mut r = Remotes::new();
        for i in 1..=6 {
            r.push(VxlanRemote {
                mac: m(i),
                dst: ip(i),
                origin: RemoteOrigin::Static,
                vni: 1,
            });
        }
        assert!(r.remove(1, m(2), ip(2)));
        assert!(!r.remove(1, m(2), ip(2)));
        assert!(!r.remove(1, m(3), ip(9)));
        r.get_mut(1, m(4)).unwrap().dst = ip(40);
        for i in [1, 3, 5] {
            assert!(r.remove(1, m(i), ip(i)));
        }
        r.push(VxlanRemote {
            mac: m(2),
            dst: ip(2),
            origin: RemoteOrigin::Static,
            vni: 1,
        });
        let got: Vec<_> = r.iter().map(|e| (e.mac, e.dst)).collect();
        assert_eq!(got, [(m(4), ip(40)), (m(6), ip(6)), (m(2), ip(2))]);
        assert_eq!(r.len(), 3);
        assert_eq!(r.get(1, m(6)).map(|e| e.dst), Some(ip(6)));
    }
}
