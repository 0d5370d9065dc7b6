//! The adapter's decision, sans I/O: from what the daemon shows (its VXLAN ports, its FDB)
//! and what the BGP speaker holds (every EVPN path of its RIB), the routes to originate or
//! withdraw and the `fdb` commands to run. Level-triggered: the same inputs give the same
//! actions, and once they are done the next pass gives none, so a restart of the daemon, of
//! gobgpd or of the adapter itself is handled by the same pass (re-derive, then converge).
//!
//! A bridge domain is a (VXLAN port, VNI) pair ([`Domain`], [`VxlanPort::domains`]): a port
//! with `id N` has one, which carries whatever VLAN the bridge sends it; an `external` port has
//! one per VLAN mapped to a VNI (`vlan … tunnel_info id N`; on a `vnifilter` port only the
//! mapped VNIs also listed by `vni add`), which carries that VLAN only. The rules below are per
//! domain; on an external port "the bridge's entries" are those of the domain's VLAN, the
//! port's own entries those of its VNI, and the commands name both (`vlan V`, `vni N`).
//!
//! Rules (RFC 7432, RFC 8365):
//! - per domain, a type-3 route: RD `VTEP:VNI`, Ethernet tag 0, originator the VTEP, PMSI
//!   tunnel ingress replication to the VTEP with the VNI as label, RT `ASN:VNI` (FRR's auto
//!   RT), encapsulation VXLAN;
//! - per MAC the bridge of the domain's port has on another, non-VXLAN port (learned, or a
//!   user's `static`/`dynamic` entry; not the bridge's own `permanent` ones, not a control
//!   plane's `extern_learn` ones), a type-2 route with the same RD, RT and encapsulation,
//!   label the VNI, next hop the VTEP;
//! - MAC mobility (RFC 7432 §15): a MAC newly local that a peer advertises is advertised
//!   with sequence number the peer's + 1; a peer's route with a higher number (or the same
//!   number from a lower VTEP address) wins: ours is withdrawn and the bridge's local entry
//!   deleted, so traffic follows the route;
//! - peers' routes (best paths, RT `ASN:VNI`, not from our own VTEP) are installed with
//!   `extern_learn`: type-3 → the flood list, type-2 → the MAC's VTEP on the port and the
//!   bridge's entry of the MAC on the port; an installed entry without its route, or of a
//!   domain that is gone (VLAN unmapped, VNI unlisted, port out of its bridge), is removed;
//!   the operator's static entries are never touched (a MAC or flood VTEP that has one is
//!   left to it).

use crate::route::{Attrs, ExtCommunity, Nlri, Rd, TUNNEL_VXLAN};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

/// A VXLAN port of the daemon, as `link show -j` (and for an external port `vlan tunnelshow
/// -j` and `vni show -j`) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanPort {
    pub name: String,
    pub vnis: PortVnis,
    pub local: IpAddr,
    pub master: Option<String>,
}

/// The VNIs a VXLAN port carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortVnis {
    /// `id N`: one VNI, whatever the VLAN of the frame.
    Id(u32),
    /// `external`: the VLAN → VNI map (`vlan tunnelshow -j`, one pair per VID); `filter`: on a
    /// `vnifilter` port, the VNIs it accepts (`vni show -j`, inclusive ranges), else `None`.
    External {
        map: Vec<(u16, u32)>,
        filter: Option<Vec<(u32, u32)>>,
    },
}

/// (VXLAN port, VNI): one bridge domain stretched over EVPN; `vlan`: the bridge's VLAN of it
/// on an external port, `None` for a port with `id` (every VLAN).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Domain {
    pub port: String,
    pub vni: u32,
    pub vlan: Option<u16>,
}

impl VxlanPort {
    /// The port's bridge domains, by VNI. A VNI the map gives twice (which the daemon refuses)
    /// is taken once, with its lowest VID.
    pub fn domains(&self) -> Vec<Domain> {
        let d = |vni, vlan| Domain {
            port: self.name.clone(),
            vni,
            vlan,
        };
        match &self.vnis {
            PortVnis::Id(vni) => vec![d(*vni, None)],
            PortVnis::External { map, filter } => {
                let mut by_vni: BTreeMap<u32, u16> = BTreeMap::new();
                for &(vid, vni) in map {
                    let listed = filter
                        .as_ref()
                        .is_none_or(|f| f.iter().any(|&(a, z)| (a..=z).contains(&vni)));
                    if listed {
                        let e = by_vni.entry(vni).or_insert(vid);
                        *e = (*e).min(vid);
                    }
                }
                by_vni
                    .into_iter()
                    .map(|(vni, vid)| d(vni, Some(vid)))
                    .collect()
            }
        }
    }

    /// The VNI of one of the port's own entries (`fdb show -j`'s `vni`, else the port's `id`).
    fn entry_vni(&self, e: &FdbEntry) -> Option<u32> {
        match self.vnis {
            PortVnis::Id(id) => Some(e.vni.unwrap_or(id)),
            PortVnis::External { .. } => e.vni,
        }
    }
}

/// One `fdb show -j` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdbEntry {
    pub mac: [u8; 6],
    pub ifname: String,
    pub master: Option<String>,
    pub vlan: Option<u16>,
    /// A VXLAN port's own entry: its VTEP.
    pub dst: Option<IpAddr>,
    /// A VXLAN port's own entry: its VNI where it is not the port's `id` (always on an
    /// external port).
    pub vni: Option<u32>,
    /// `permanent`, `static` or empty.
    pub state: String,
    pub extern_learn: bool,
}

/// One path of the speaker's RIB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub nlri: Nlri,
    pub attrs: Attrs,
    /// Originated here (through the API) rather than received from a peer.
    pub local: bool,
    pub best: bool,
}

/// What the pass decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Originate (or re-originate with new attributes).
    Advertise {
        nlri: Nlri,
        next_hop: IpAddr,
        communities: Vec<ExtCommunity>,
        pmsi_vni: Option<u32>,
    },
    Withdraw(Nlri),
    /// A command for the daemon (one line of its grammar).
    Daemon(String),
}

/// A log line's words for an action: `advertise type-2 rd 192.0.2.1:100 mac
/// 02:00:00:00:00:0a vni 100 next-hop 192.0.2.1 rt 65000:100 encap vxlan`, `withdraw …`, or
/// the daemon command itself.
impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Advertise {
                nlri,
                next_hop,
                communities,
                pmsi_vni,
            } => {
                write!(f, "advertise {nlri} next-hop {next_hop}")?;
                for c in communities {
                    write!(f, " {c}")?;
                }
                if let Some(vni) = pmsi_vni {
                    write!(f, " pmsi ingress-replication vni {vni}")?;
                }
                Ok(())
            }
            Action::Withdraw(nlri) => write!(f, "withdraw {nlri}"),
            Action::Daemon(cmd) => f.write_str(cmd),
        }
    }
}

fn mac_str(m: &[u8; 6]) -> String {
    crate::route::Mac(*m).to_string()
}

const ZERO_MAC: [u8; 6] = [0; 6];

/// The VTEP a peer's route names: a type-3 route's PMSI tunnel endpoint (else its
/// originator), a type-2 route's next hop.
fn route_vtep(r: &Route) -> Option<IpAddr> {
    match r.nlri {
        Nlri::Imet { origin, .. } => Some(r.attrs.pmsi.map_or(origin, |(ip, _)| ip)),
        Nlri::Mac { .. } => r.attrs.next_hop,
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// The peers' routes of a port's domains that the pass leaves out because their VTEP is of
/// the other address family than the port's `local` (decision 81: a VXLAN port's tunnels
/// are of its `local`'s family, the daemon refuses a `dst` of the other; FRR 8.4 with a
/// kernel VTEP whose `local` is IPv6 advertises its IPv4 router id). One line each, as the
/// log says it: `ignored type-3 rd 192.0.2.2:2 origin 192.0.2.2 on vx0 (vni 100): VTEP
/// 192.0.2.2 is IPv4, the port's local 2001:db8::1 is IPv6`.
pub fn ignored(asn: u16, ports: &[VxlanPort], rib: &[Route]) -> Vec<String> {
    let family = |ip: IpAddr| if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let mut out = Vec::new();
    for (p, d) in ports
        .iter()
        .filter(|p| p.master.is_some())
        .flat_map(|p| p.domains().into_iter().map(move |d| (p, d)))
    {
        for r in rib
            .iter()
            .filter(|r| !r.local && r.best && r.attrs.has_rt(asn, d.vni))
        {
            if let Some(v) = route_vtep(r).filter(|v| !same_family(*v, p.local)) {
                out.push(format!(
                    "ignored {} on {} (vni {}): VTEP {v} is {}, the port's local {} is {}",
                    r.nlri,
                    p.name,
                    d.vni,
                    family(v),
                    p.local,
                    family(p.local)
                ));
            }
        }
    }
    out
}

/// The pass. `asn`: the speaker's AS (the RT's administrator, 2 bytes as FRR's auto RT).
pub fn reconcile(asn: u16, ports: &[VxlanPort], fdb: &[FdbEntry], rib: &[Route]) -> Vec<Action> {
    reconcile_rid(asn, None, ports, fdb, rib)
}

/// The pass, with the speaker's router id: the RD of an IPv6 VTEP's routes
/// ([`Rd::for_vtep`]; an IPv4 VTEP's RD is its own address).
pub fn reconcile_rid(
    asn: u16,
    router_id: Option<Ipv4Addr>,
    ports: &[VxlanPort],
    fdb: &[FdbEntry],
    rib: &[Route],
) -> Vec<Action> {
    reconcile_part(asn, router_id, ports, fdb, rib, true)
}

/// The pass over a part of both sides (docs/decisions.md 76): `fdb` and `rib` hold only what
/// concerns some MACs — every entry of those MACs (any port, any VLAN) and every type-2 path
/// of them — and, when `flood`, also every flood-list entry (MAC 0) and every type-3 path.
/// Every rule above is per MAC, or per flood list, so the actions are exactly those a whole
/// pass would take for them; only the type-3 routes to originate are left out when `flood`
/// is not set (their inputs are not there). With `flood` and whole inputs it is the pass.
pub fn reconcile_part(
    asn: u16,
    router_id: Option<Ipv4Addr>,
    ports: &[VxlanPort],
    fdb: &[FdbEntry],
    rib: &[Route],
    flood: bool,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let vxlan_names: BTreeSet<&str> = ports.iter().map(|p| p.name.as_str()).collect();
    // What we want originated: NLRI → (next hop, communities, pmsi).
    let mut want: BTreeMap<Nlri, (IpAddr, Vec<ExtCommunity>, Option<u32>)> = BTreeMap::new();
    let ours: BTreeMap<Nlri, &Attrs> = rib
        .iter()
        .filter(|r| r.local)
        .map(|r| (r.nlri, &r.attrs))
        .collect();

    for (p, d) in ports
        .iter()
        .flat_map(|p| p.domains().into_iter().map(move |d| (p, d)))
    {
        // A port in no bridge stretches nothing.
        let Some(bridge) = p.master.as_deref() else {
            continue;
        };
        // The words an external port's commands need: the VNI of its own entries, the VLAN
        // of the bridge's.
        let (vni_word, vlan_word) = match d.vlan {
            Some(v) => (format!(" vni {}", d.vni), format!(" vlan {v}")),
            None => (String::new(), String::new()),
        };
        let rd = Rd::for_vtep(p.local, router_id, d.vni);
        let rt = ExtCommunity::RouteTarget { asn, value: d.vni };
        let encap = ExtCommunity::Encapsulation {
            tunnel_type: TUNNEL_VXLAN,
        };
        want.insert(
            Nlri::Imet {
                rd,
                etag: 0,
                origin: p.local,
            },
            (p.local, vec![rt, encap], Some(d.vni)),
        );

        // Peers' routes of this domain, whose VTEP the port can reach (decision 81: of its
        // `local`'s address family; [`ignored`] names the others).
        let peer = |r: &&Route| {
            !r.local
                && r.best
                && r.attrs.has_rt(asn, d.vni)
                && r.attrs.next_hop != Some(p.local)
                && route_vtep(r).is_none_or(|v| same_family(v, p.local))
        };
        let mut flood_peers: BTreeSet<IpAddr> = BTreeSet::new();
        // MAC → (seq, VTEP) of the winning peer route.
        let mut mac_peers: BTreeMap<[u8; 6], (u32, IpAddr)> = BTreeMap::new();
        for r in rib.iter().filter(peer) {
            match r.nlri {
                Nlri::Imet { origin, .. } => {
                    let vtep = r.attrs.pmsi.map(|(ip, _)| ip).unwrap_or(origin);
                    if vtep != p.local {
                        flood_peers.insert(vtep);
                    }
                }
                Nlri::Mac { mac, .. } => {
                    let Some(vtep) = r.attrs.next_hop else {
                        continue;
                    };
                    let seq = r.attrs.mobility_seq().unwrap_or(0);
                    let e = mac_peers.entry(mac).or_insert((seq, vtep));
                    if (seq, std::cmp::Reverse(vtep)) > (e.0, std::cmp::Reverse(e.1)) {
                        *e = (seq, vtep);
                    }
                }
            }
        }

        // Local MACs of the bridge, on ports that are not VXLAN ports.
        let mut local_macs: BTreeMap<[u8; 6], &FdbEntry> = BTreeMap::new();
        for e in fdb {
            if e.master.as_deref() == Some(bridge)
                && e.dst.is_none()
                && !vxlan_names.contains(e.ifname.as_str())
                && e.state != "permanent"
                && !e.extern_learn
                && d.vlan.is_none_or(|v| e.vlan == Some(v))
            {
                local_macs.entry(e.mac).or_insert(e);
            }
        }
        let mut lost: BTreeSet<[u8; 6]> = BTreeSet::new();
        for (mac, entry) in &local_macs {
            let nlri = Nlri::Mac {
                rd,
                etag: 0,
                mac: *mac,
                vni: d.vni,
            };
            let our_seq = ours.get(&nlri).map(|a| a.mobility_seq().unwrap_or(0));
            let seq = match (our_seq, mac_peers.get(mac)) {
                (None, None) => None,
                // Moved here: one more than the peer's (RFC 7432 §15.1).
                (None, Some((s, _))) => Some(s.saturating_add(1)),
                (Some(s), Some((ps, pv))) if *ps > s || (*ps == s && *pv < p.local) => {
                    // Moved away: the peer's route wins; the stale local entry goes.
                    lost.insert(*mac);
                    let mut cmd = format!("fdb del {} dev {}", mac_str(mac), entry.ifname);
                    if let Some(v) = entry.vlan {
                        cmd.push_str(&format!(" vlan {v}"));
                    }
                    actions.push(Action::Daemon(cmd));
                    continue;
                }
                // Ours stands: keep its sequence number.
                (Some(_), _) => ours.get(&nlri).and_then(|a| a.mobility_seq()),
            };
            let mut comms = vec![rt, encap];
            if let Some(seq) = seq {
                comms.push(ExtCommunity::MacMobility { sticky: false, seq });
            }
            want.insert(nlri, (p.local, comms, None));
        }

        // The port's own entries of the domain's VNI now.
        let own = |e: &&FdbEntry| e.ifname == d.port && p.entry_vni(e) == Some(d.vni);
        let statics: BTreeSet<([u8; 6], IpAddr)> = fdb
            .iter()
            .filter(own)
            .filter(|e| !e.extern_learn && e.state == "permanent")
            .filter_map(|e| e.dst.map(|dst| (e.mac, dst)))
            .collect();
        let static_macs: BTreeSet<[u8; 6]> = statics.iter().map(|(m, _)| *m).collect();
        let installed: Vec<([u8; 6], IpAddr)> = fdb
            .iter()
            .filter(own)
            .filter(|e| e.extern_learn)
            .filter_map(|e| e.dst.map(|dst| (e.mac, dst)))
            .collect();
        let port = &d.port;
        // Flood list.
        let want_flood: BTreeSet<IpAddr> = flood_peers
            .into_iter()
            .filter(|v| !statics.contains(&(ZERO_MAC, *v)))
            .collect();
        let have_flood: BTreeSet<IpAddr> = installed
            .iter()
            .filter(|(m, _)| *m == ZERO_MAC)
            .map(|(_, v)| *v)
            .collect();
        for v in have_flood.difference(&want_flood) {
            actions.push(Action::Daemon(format!(
                "fdb del 00:00:00:00:00:00 dev {port} dst {v}{vni_word}"
            )));
        }
        for v in want_flood.difference(&have_flood) {
            actions.push(Action::Daemon(format!(
                "fdb append 00:00:00:00:00:00 dev {port} dst {v}{vni_word} extern_learn"
            )));
        }
        // MAC → VTEP.
        let want_macs: BTreeMap<[u8; 6], IpAddr> = mac_peers
            .iter()
            .filter(|(m, _)| {
                (!local_macs.contains_key(*m) || lost.contains(*m)) && !static_macs.contains(*m)
            })
            .map(|(m, (_, v))| (*m, *v))
            .collect();
        let have_macs: BTreeMap<[u8; 6], IpAddr> = installed
            .iter()
            .filter(|(m, _)| *m != ZERO_MAC)
            .copied()
            .collect();
        for (m, v) in &have_macs {
            if !want_macs.contains_key(m) {
                actions.push(Action::Daemon(format!(
                    "fdb del {} dev {port} dst {v}{vni_word}",
                    mac_str(m)
                )));
            }
        }
        for (m, v) in &want_macs {
            if have_macs.get(m) != Some(v) {
                actions.push(Action::Daemon(format!(
                    "fdb replace {} dev {port} dst {v}{vni_word} extern_learn",
                    mac_str(m)
                )));
            }
        }
        // The bridge's own entry of a remote MAC, on the VXLAN port (as zebra installs
        // `master extern_learn` beside the device's `self` entry): unicast to it is not
        // flooded, and a frame from it on a local port takes it over (a move).
        let bridge_remote: BTreeMap<[u8; 6], &FdbEntry> = fdb
            .iter()
            .filter(|e| e.ifname == d.port && e.dst.is_none() && e.extern_learn)
            .filter(|e| d.vlan.is_none_or(|v| e.vlan == Some(v)))
            .map(|e| (e.mac, e))
            .collect();
        for (m, e) in &bridge_remote {
            if !want_macs.contains_key(m) {
                let mut cmd = format!("fdb del {} dev {port}", mac_str(m));
                if let Some(v) = e.vlan {
                    cmd.push_str(&format!(" vlan {v}"));
                }
                // The bridge's entry only: without `master` the port's own entries of the
                // MAC would go too (decision 88), an operator's static one included.
                cmd.push_str(" master");
                actions.push(Action::Daemon(cmd));
            }
        }
        for m in want_macs.keys() {
            if !bridge_remote.contains_key(m) {
                actions.push(Action::Daemon(format!(
                    "fdb replace {} dev {port}{vlan_word} extern_learn",
                    mac_str(m)
                )));
            }
        }
    }

    // A control plane's entries of a domain that is gone (a VLAN unmapped, a VNI no longer
    // listed, the port out of its bridge): no pass above sees them, so they go here.
    for p in ports {
        let domains = if p.master.is_some() {
            p.domains()
        } else {
            Vec::new()
        };
        let external = matches!(p.vnis, PortVnis::External { .. });
        for e in fdb.iter().filter(|e| e.ifname == p.name && e.extern_learn) {
            let mac = mac_str(&e.mac);
            match e.dst {
                Some(dst) => {
                    let vni = p.entry_vni(e);
                    if vni.is_some_and(|v| domains.iter().any(|d| d.vni == v)) {
                        continue;
                    }
                    let vni_word = match (external, vni) {
                        (true, Some(v)) => format!(" vni {v}"),
                        _ => String::new(),
                    };
                    actions.push(Action::Daemon(format!(
                        "fdb del {mac} dev {} dst {dst}{vni_word}",
                        p.name
                    )));
                }
                None => {
                    if domains.iter().any(|d| d.vlan.is_none() || d.vlan == e.vlan) {
                        continue;
                    }
                    let vlan_word = e.vlan.map(|v| format!(" vlan {v}")).unwrap_or_default();
                    // `master`: the bridge's entry only (decision 88).
                    actions.push(Action::Daemon(format!(
                        "fdb del {mac} dev {}{vlan_word} master",
                        p.name
                    )));
                }
            }
        }
    }

    // Originate what is missing or changed, withdraw what is no longer wanted.
    for (nlri, (nh, comms, pmsi)) in &want {
        if !flood && matches!(nlri, Nlri::Imet { .. }) {
            continue;
        }
        let same = ours.get(nlri).is_some_and(|a| {
            let mut x = a.communities.clone();
            let mut y = comms.clone();
            x.sort();
            y.sort();
            a.next_hop == Some(*nh) && x == y && a.pmsi.map(|(_, l)| l) == *pmsi
        });
        if !same {
            actions.push(Action::Advertise {
                nlri: *nlri,
                next_hop: *nh,
                communities: comms.clone(),
                pmsi_vni: *pmsi,
            });
        }
    }
    for nlri in ours.keys() {
        if !flood && matches!(nlri, Nlri::Imet { .. }) {
            continue;
        }
        if !want.contains_key(nlri) {
            actions.push(Action::Withdraw(*nlri));
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
    const M: [u8; 6] = [2, 0, 0, 0, 0, 0xa];

    #[test]
    fn actions_log_in_words_not_debug_structures() {
        let nlri = Nlri::Mac {
            rd: Rd::for_vtep(A, None, 100),
            etag: 0,
            mac: M,
            vni: 100,
        };
        let adv = Action::Advertise {
            nlri,
            next_hop: A,
            communities: vec![
                ExtCommunity::RouteTarget {
                    asn: 65000,
                    value: 100,
                },
                ExtCommunity::Encapsulation {
                    tunnel_type: TUNNEL_VXLAN,
                },
            ],
            pmsi_vni: None,
        };
        assert_eq!(
            adv.to_string(),
            "advertise type-2 rd 192.0.2.1:100 mac 02:00:00:00:00:0a vni 100 next-hop \
             192.0.2.1 rt 65000:100 encap vxlan"
        );
        let imet = Nlri::Imet {
            rd: Rd::for_vtep(B, None, 100),
            etag: 0,
            origin: B,
        };
        let adv3 = Action::Advertise {
            nlri: imet,
            next_hop: B,
            communities: vec![],
            pmsi_vni: Some(100),
        };
        assert_eq!(
            adv3.to_string(),
            "advertise type-3 rd 192.0.2.2:100 origin 192.0.2.2 next-hop 192.0.2.2 pmsi \
             ingress-replication vni 100"
        );
        assert_eq!(
            Action::Withdraw(imet).to_string(),
            "withdraw type-3 rd 192.0.2.2:100 origin 192.0.2.2"
        );
        let cmd = "fdb del 02:00:00:00:00:0a dev p1 vlan 10";
        assert_eq!(Action::Daemon(cmd.into()).to_string(), cmd);
        assert_eq!(mac_str(&M), "02:00:00:00:00:0a");
    }

    fn ports() -> Vec<VxlanPort> {
        vec![VxlanPort {
            name: "vx0".into(),
            vnis: PortVnis::Id(100),
            local: A,
            master: Some("br0".into()),
        }]
    }

    fn learned(mac: [u8; 6], dev: &str) -> FdbEntry {
        FdbEntry {
            mac,
            ifname: dev.into(),
            master: Some("br0".into()),
            vlan: None,
            dst: None,
            vni: None,
            state: String::new(),
            extern_learn: false,
        }
    }

    fn remote(mac: [u8; 6], dst: IpAddr, extern_learn: bool) -> FdbEntry {
        FdbEntry {
            mac,
            ifname: "vx0".into(),
            master: None,
            vlan: None,
            dst: Some(dst),
            vni: None,
            state: if extern_learn { "" } else { "permanent" }.into(),
            extern_learn,
        }
    }

    fn comms(seq: Option<u32>) -> Vec<ExtCommunity> {
        let mut c = vec![
            ExtCommunity::RouteTarget {
                asn: 65000,
                value: 100,
            },
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            },
        ];
        if let Some(seq) = seq {
            c.push(ExtCommunity::MacMobility { sticky: false, seq });
        }
        c
    }

    fn route(nlri: Nlri, nh: IpAddr, seq: Option<u32>, local: bool) -> Route {
        let pmsi = matches!(nlri, Nlri::Imet { .. }).then_some(100);
        let bytes = crate::route::originate_attrs(&nlri, nh, &comms(seq), pmsi);
        Route {
            nlri,
            attrs: Attrs::decode(&bytes),
            local,
            best: true,
        }
    }

    fn mac_route(vtep: IpAddr, mac: [u8; 6], seq: Option<u32>, local: bool) -> Route {
        let nlri = Nlri::Mac {
            rd: Rd::for_vtep(vtep, None, 100),
            etag: 0,
            mac,
            vni: 100,
        };
        route(nlri, vtep, seq, local)
    }

    fn imet(vtep: IpAddr, local: bool) -> Route {
        let nlri = Nlri::Imet {
            rd: Rd::for_vtep(vtep, None, 100),
            etag: 0,
            origin: vtep,
        };
        route(nlri, vtep, None, local)
    }

    fn daemon(a: &[Action]) -> Vec<&str> {
        a.iter()
            .filter_map(|a| match a {
                Action::Daemon(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_fresh_vtep_advertises_its_vni_and_macs_and_installs_the_peers() {
        let fdb = [
            learned(M, "p1"),
            // The bridge's own address and what it learned on the VXLAN port: not advertised.
            FdbEntry {
                state: "permanent".into(),
                ..learned([2, 0, 0, 0, 0, 1], "br0")
            },
            learned([2, 0, 0, 0, 0, 0xb], "vx0"),
        ];
        let rib = [
            imet(B, false),
            mac_route(B, [2, 0, 0, 0, 0, 0xb], None, false),
        ];
        let a = reconcile(65000, &ports(), &fdb, &rib);
        assert_eq!(
            daemon(&a),
            [
                "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 dst 192.0.2.2 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 extern_learn"
            ]
        );
        let adv: Vec<_> = a
            .iter()
            .filter_map(|a| match a {
                Action::Advertise {
                    nlri,
                    pmsi_vni,
                    communities,
                    ..
                } => Some((*nlri, *pmsi_vni, communities.len())),
                _ => None,
            })
            .collect();
        assert_eq!(adv.len(), 2, "{a:?}");
        assert!(adv.contains(&(imet(A, true).nlri, Some(100), 2)));
        assert!(adv.contains(&(mac_route(A, M, None, true).nlri, None, 2)));
    }

    /// An IPv6 underlay (docs/semantics.md §R): the VTEP's address is the type-3 route's
    /// originator, the next hop and the PMSI endpoint; the RD is the router id's (type 1
    /// holds IPv4 only); a peer's IPv6 VTEP is installed as the `dst` of its entries.
    #[test]
    fn ipv6_vteps_are_advertised_and_installed() {
        let a6: IpAddr = "2001:db8::1".parse().unwrap();
        let b6: IpAddr = "2001:db8::2".parse().unwrap();
        let rid = Ipv4Addr::new(198, 51, 100, 1);
        let ports = [VxlanPort {
            local: a6,
            ..ports()[0].clone()
        }];
        let rib = [
            imet(b6, false),
            mac_route(b6, [2, 0, 0, 0, 0, 0xb], None, false),
        ];
        let a = reconcile_rid(65000, Some(rid), &ports, &[learned(M, "p1")], &rib);
        assert_eq!(
            daemon(&a),
            [
                "fdb append 00:00:00:00:00:00 dev vx0 dst 2001:db8::2 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 dst 2001:db8::2 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 extern_learn"
            ]
        );
        let rd = Rd::ip(rid, 100);
        let want_imet = Action::Advertise {
            nlri: Nlri::Imet {
                rd,
                etag: 0,
                origin: a6,
            },
            next_hop: a6,
            communities: comms(None),
            pmsi_vni: Some(100),
        };
        assert!(a.contains(&want_imet), "{a:?}");
        assert!(
            a.iter().any(|x| matches!(x, Action::Advertise {
            nlri: Nlri::Mac { rd: r, mac, .. }, next_hop, ..
        } if *r == rd && *mac == M && *next_hop == a6)),
            "{a:?}"
        );
        assert_eq!(
            want_imet.to_string(),
            "advertise type-3 rd 198.51.100.1:100 origin 2001:db8::1 next-hop 2001:db8::1 \
             rt 65000:100 encap vxlan pmsi ingress-replication vni 100"
        );
    }

    /// Decision 81: a peer's route whose VTEP is of the other address family than the port's
    /// `local` is left out — no flood-list entry, no MAC entry (the daemon would refuse the
    /// `dst`), and it does not take a MAC away by MAC mobility — and [`ignored`] names it.
    /// As FRR 8.4 advertises for a kernel VTEP whose `local` is IPv6: its IPv4 router id.
    #[test]
    fn a_peer_vtep_of_the_other_family_is_ignored() {
        let a6: IpAddr = "2001:db8::1".parse().unwrap();
        let b6: IpAddr = "2001:db8::2".parse().unwrap();
        let ports6 = [VxlanPort {
            local: a6,
            ..ports()[0].clone()
        }];
        let rid = Ipv4Addr::new(198, 51, 100, 1);
        let ours = route(
            Nlri::Mac {
                rd: Rd::ip(rid, 100),
                etag: 0,
                mac: M,
                vni: 100,
            },
            a6,
            None,
            true,
        );
        let rib = [
            // B over IPv4: its flood route, M with a higher sequence number, another MAC.
            imet(B, false),
            mac_route(B, M, Some(5), false),
            mac_route(B, [2, 0, 0, 0, 0, 0xb], None, false),
            // C over IPv6: installed.
            imet(b6, false),
            ours.clone(),
        ];
        let fdb = [learned(M, "p1")];
        let a = reconcile_rid(65000, Some(rid), &ports6, &fdb, &rib);
        assert_eq!(
            daemon(&a),
            ["fdb append 00:00:00:00:00:00 dev vx0 dst 2001:db8::2 extern_learn"],
            "{a:?}"
        );
        // M stays ours: not withdrawn, its local entry kept, no sequence number added (the
        // only route advertised is our type-3, not in this RIB).
        assert!(
            !a.iter().any(|x| matches!(
                x,
                Action::Withdraw(_)
                    | Action::Advertise {
                        nlri: Nlri::Mac { .. },
                        ..
                    }
            )),
            "{a:?}"
        );
        assert_eq!(
            ignored(65000, &ports6, &rib),
            [
                "ignored type-3 rd 192.0.2.2:100 origin 192.0.2.2 on vx0 (vni 100): VTEP \
                 192.0.2.2 is IPv4, the port's local 2001:db8::1 is IPv6",
                "ignored type-2 rd 192.0.2.2:100 mac 02:00:00:00:00:0a vni 100 on vx0 (vni \
                 100): VTEP 192.0.2.2 is IPv4, the port's local 2001:db8::1 is IPv6",
                "ignored type-2 rd 192.0.2.2:100 mac 02:00:00:00:00:0b vni 100 on vx0 (vni \
                 100): VTEP 192.0.2.2 is IPv4, the port's local 2001:db8::1 is IPv6",
            ]
        );
        // And the other way: an IPv4 port ignores an IPv6 VTEP; same family, nothing ignored.
        assert_eq!(
            daemon(&reconcile(65000, &ports(), &[], &[imet(b6, false)])),
            Vec::<&str>::new()
        );
        assert_eq!(ignored(65000, &ports(), &[imet(b6, false)]).len(), 1);
        assert!(ignored(65000, &ports(), &[imet(B, false)]).is_empty());
    }

    #[test]
    fn converged_state_gives_no_action_and_withdraws_follow() {
        let fdb = [
            learned(M, "p1"),
            remote(ZERO_MAC, B, true),
            remote([2, 0, 0, 0, 0, 0xb], B, true),
            FdbEntry {
                extern_learn: true,
                ..learned([2, 0, 0, 0, 0, 0xb], "vx0")
            },
        ];
        let mut rib = vec![
            imet(A, true),
            mac_route(A, M, None, true),
            imet(B, false),
            mac_route(B, [2, 0, 0, 0, 0, 0xb], None, false),
        ];
        assert_eq!(reconcile(65000, &ports(), &fdb, &rib), []);
        // M ages out; B withdraws everything (its session went down).
        rib.truncate(2);
        let a = reconcile(65000, &ports(), &fdb[1..], &rib);
        assert_eq!(
            a,
            [
                Action::Daemon("fdb del 00:00:00:00:00:00 dev vx0 dst 192.0.2.2".into()),
                Action::Daemon("fdb del 02:00:00:00:00:0b dev vx0 dst 192.0.2.2".into()),
                Action::Daemon("fdb del 02:00:00:00:00:0b dev vx0 master".into()),
                Action::Withdraw(mac_route(A, M, None, true).nlri),
            ]
        );
    }

    #[test]
    fn static_entries_are_the_operators() {
        let fdb = [
            remote(ZERO_MAC, B, false),
            remote([2, 0, 0, 0, 0, 0xb], B, false),
        ];
        let rib = [
            imet(A, true),
            imet(B, false),
            mac_route(B, [2, 0, 0, 0, 0, 0xb], None, false),
        ];
        assert_eq!(reconcile(65000, &ports(), &fdb, &rib), []);
        // Another VNI's routes (another RT) are not imported.
        let other = Route {
            attrs: Attrs {
                communities: vec![ExtCommunity::RouteTarget {
                    asn: 65000,
                    value: 200,
                }],
                ..imet(B, false).attrs
            },
            ..imet(IpAddr::from([192, 0, 2, 3]), false)
        };
        assert_eq!(
            daemon(&reconcile(65000, &ports(), &[], &[imet(A, true), other])),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn mac_mobility_sequence_numbers() {
        // M moves here from B (B advertised it with seq 4): ours gets 5.
        let rib = [imet(A, true), mac_route(B, M, Some(4), false)];
        let a = reconcile(65000, &ports(), &[learned(M, "p1")], &rib);
        assert!(
            a.contains(&Action::Advertise {
                nlri: mac_route(A, M, None, true).nlri,
                next_hop: A,
                communities: comms(Some(5)),
                pmsi_vni: None,
            }),
            "{a:?}"
        );
        // Ours (seq 5) stands against B's 4: nothing to do.
        let rib = [
            imet(A, true),
            mac_route(A, M, Some(5), true),
            mac_route(B, M, Some(4), false),
        ];
        assert_eq!(reconcile(65000, &ports(), &[learned(M, "p1")], &rib), []);
        // M moves to B, which advertises seq 6: ours is withdrawn, the stale local entry
        // deleted, B's installed.
        let rib = [
            imet(A, true),
            mac_route(A, M, Some(5), true),
            mac_route(B, M, Some(6), false),
        ];
        let a = reconcile(65000, &ports(), &[learned(M, "p1")], &rib);
        assert_eq!(
            a,
            [
                Action::Daemon("fdb del 02:00:00:00:00:0a dev p1".into()),
                Action::Daemon(
                    "fdb replace 02:00:00:00:00:0a dev vx0 dst 192.0.2.2 extern_learn".into()
                ),
                Action::Daemon("fdb replace 02:00:00:00:00:0a dev vx0 extern_learn".into()),
                Action::Withdraw(mac_route(A, M, None, true).nlri),
            ]
        );
    }
    #[test]
    fn what_is_not_installed_or_advertised() {
        // A port in no bridge: nothing advertised, nothing installed.
        let mut lone = ports();
        lone[0].master = None;
        assert_eq!(reconcile(65000, &lone, &[], &[imet(B, false)]), []);
        // Our own routes reflected back by a peer (next hop ours), and a peer's path that is
        // not the best: ignored.
        let reflected = imet(A, false);
        let not_best = Route {
            best: false,
            ..mac_route(B, [2, 0, 0, 0, 0, 0xc], None, false)
        };
        assert_eq!(
            reconcile(65000, &ports(), &[], &[imet(A, true), reflected, not_best]),
            []
        );
        // The operator's static entry for a MAC wins over a peer's route for it.
        let fdb = [remote(
            [2, 0, 0, 0, 0, 0xd],
            IpAddr::from([192, 0, 2, 9]),
            false,
        )];
        let rib = [
            imet(A, true),
            mac_route(B, [2, 0, 0, 0, 0, 0xd], None, false),
        ];
        assert_eq!(reconcile(65000, &ports(), &fdb, &rib), []);
    }

    #[test]
    fn equal_sequence_numbers_go_to_the_lower_vtep() {
        // B (192.0.2.2) and we (192.0.2.1) both at 3: ours stands.
        let rib = [
            imet(A, true),
            mac_route(A, M, Some(3), true),
            mac_route(B, M, Some(3), false),
        ];
        assert_eq!(reconcile(65000, &ports(), &[learned(M, "p1")], &rib), []);
        // A VTEP below ours at 3: it wins.
        let low = IpAddr::from([192, 0, 2, 0]);
        let rib = [
            imet(A, true),
            mac_route(A, M, Some(3), true),
            mac_route(low, M, Some(3), false),
        ];
        let a = reconcile(65000, &ports(), &[learned(M, "p1")], &rib);
        assert!(
            a.contains(&Action::Withdraw(mac_route(A, M, None, true).nlri)),
            "{a:?}"
        );
    }

    // ----- external ports: one domain per mapped VLAN -----

    /// vx0 external, VLAN 10 → VNI 1000, 20 → 2000; `filter` as `vni show -j` lists it.
    fn external(filter: Option<Vec<(u32, u32)>>) -> Vec<VxlanPort> {
        vec![VxlanPort {
            name: "vx0".into(),
            vnis: PortVnis::External {
                map: vec![(10, 1000), (20, 2000)],
                filter,
            },
            local: A,
            master: Some("br0".into()),
        }]
    }

    fn in_vlan(e: FdbEntry, vlan: u16) -> FdbEntry {
        FdbEntry {
            vlan: Some(vlan),
            ..e
        }
    }

    fn in_vni(e: FdbEntry, vni: u32) -> FdbEntry {
        FdbEntry {
            vni: Some(vni),
            ..e
        }
    }

    fn comms_vni(vni: u32) -> Vec<ExtCommunity> {
        vec![
            ExtCommunity::RouteTarget {
                asn: 65000,
                value: vni,
            },
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            },
        ]
    }

    fn imet_vni(vtep: IpAddr, vni: u32, local: bool) -> Route {
        let nlri = Nlri::Imet {
            rd: Rd::for_vtep(vtep, None, vni),
            etag: 0,
            origin: vtep,
        };
        let bytes = crate::route::originate_attrs(&nlri, vtep, &comms_vni(vni), Some(vni));
        Route {
            nlri,
            attrs: Attrs::decode(&bytes),
            local,
            best: true,
        }
    }

    fn mac_vni(vtep: IpAddr, mac: [u8; 6], vni: u32, local: bool) -> Route {
        let nlri = Nlri::Mac {
            rd: Rd::for_vtep(vtep, None, vni),
            etag: 0,
            mac,
            vni,
        };
        let bytes = crate::route::originate_attrs(&nlri, vtep, &comms_vni(vni), None);
        Route {
            nlri,
            attrs: Attrs::decode(&bytes),
            local,
            best: true,
        }
    }

    #[test]
    fn an_external_port_has_a_domain_per_mapped_vlan() {
        assert_eq!(
            external(None)[0].domains(),
            [
                Domain {
                    port: "vx0".into(),
                    vni: 1000,
                    vlan: Some(10)
                },
                Domain {
                    port: "vx0".into(),
                    vni: 2000,
                    vlan: Some(20)
                }
            ]
        );
        assert_eq!(
            ports()[0].domains(),
            [Domain {
                port: "vx0".into(),
                vni: 100,
                vlan: None
            }]
        );
    }

    #[test]
    fn two_vnis_on_one_port_and_an_unmapped_vlan() {
        const M20: [u8; 6] = [2, 0, 0, 0, 0, 0x14];
        const M30: [u8; 6] = [2, 0, 0, 0, 0, 0x1e];
        const MB: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
        let fdb = [
            in_vlan(learned(M, "p10"), 10),
            in_vlan(learned(M20, "p20"), 20),
            // VLAN 30 has no VNI: its MACs stay home.
            in_vlan(learned(M30, "p30"), 30),
        ];
        let rib = [
            imet_vni(B, 1000, false),
            imet_vni(B, 2000, false),
            mac_vni(B, MB, 1000, false),
        ];
        let a = reconcile(65000, &external(None), &fdb, &rib);
        assert_eq!(
            daemon(&a),
            [
                "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 1000 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 dst 192.0.2.2 vni 1000 extern_learn",
                "fdb replace 02:00:00:00:00:0b dev vx0 vlan 10 extern_learn",
                "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 2000 extern_learn",
            ]
        );
        let adv: Vec<(Nlri, Vec<ExtCommunity>)> = a
            .iter()
            .filter_map(|a| match a {
                Action::Advertise {
                    nlri, communities, ..
                } => Some((*nlri, communities.clone())),
                _ => None,
            })
            .collect();
        let want = [
            imet_vni(A, 1000, true),
            imet_vni(A, 2000, true),
            mac_vni(A, M, 1000, true),
            mac_vni(A, M20, 2000, true),
        ];
        assert_eq!(adv.len(), want.len(), "{a:?}");
        for r in &want {
            assert!(
                adv.contains(&(r.nlri, r.attrs.communities.clone())),
                "{r:?}\n{a:?}"
            );
        }
        // Installed and advertised: nothing more to do.
        let mut done = fdb.to_vec();
        done.extend([
            in_vni(remote(ZERO_MAC, B, true), 1000),
            in_vni(remote(MB, B, true), 1000),
            in_vlan(
                FdbEntry {
                    extern_learn: true,
                    ..learned(MB, "vx0")
                },
                10,
            ),
            in_vni(remote(ZERO_MAC, B, true), 2000),
        ]);
        let mut rib = rib.to_vec();
        rib.extend(want.iter().cloned());
        assert_eq!(reconcile(65000, &external(None), &done, &rib), []);
        // B withdraws VNI 1000: its entries go, with the VNI and VLAN named; VNI 2000's stay.
        let full = rib.clone();
        rib.retain(|r| !r.attrs.has_rt(65000, 1000) || r.local);
        assert_eq!(
            daemon(&reconcile(65000, &external(None), &done, &rib)),
            [
                "fdb del 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 1000",
                "fdb del 02:00:00:00:00:0b dev vx0 dst 192.0.2.2 vni 1000",
                "fdb del 02:00:00:00:00:0b dev vx0 vlan 10 master",
            ]
        );
        // VLAN 20's map removed: VNI 2000's domain goes — its routes withdrawn, the entries
        // installed for it deleted (the VNI's on the port, the VLAN's in the bridge).
        let mut only_10 = external(None);
        only_10[0].vnis = PortVnis::External {
            map: vec![(10, 1000)],
            filter: None,
        };
        let mut rib = full;
        rib.push(mac_vni(B, [2, 0, 0, 0, 0, 0x2b], 2000, false));
        let mut done = done.clone();
        done.extend([
            in_vni(remote([2, 0, 0, 0, 0, 0x2b], B, true), 2000),
            in_vlan(
                FdbEntry {
                    extern_learn: true,
                    ..learned([2, 0, 0, 0, 0, 0x2b], "vx0")
                },
                20,
            ),
        ]);
        let a = reconcile(65000, &only_10, &done, &rib);
        assert_eq!(
            daemon(&a),
            [
                "fdb del 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 2000",
                "fdb del 02:00:00:00:00:2b dev vx0 dst 192.0.2.2 vni 2000",
                "fdb del 02:00:00:00:00:2b dev vx0 vlan 20 master",
            ]
        );
        let withdrawn: Vec<&Action> = a
            .iter()
            .filter(|a| matches!(a, Action::Withdraw(_)))
            .collect();
        assert_eq!(
            withdrawn,
            [
                &Action::Withdraw(mac_vni(A, M20, 2000, true).nlri),
                &Action::Withdraw(imet_vni(A, 2000, true).nlri)
            ]
        );

        // The same MAC in both VLANs: a route per VNI, and a move is per (VNI, MAC).
        let fdb = [
            in_vlan(learned(M, "p10"), 10),
            in_vlan(learned(M, "p20"), 20),
        ];
        let rib = [
            imet_vni(A, 1000, true),
            imet_vni(A, 2000, true),
            mac_vni(A, M, 1000, true),
            mac_vni(A, M, 2000, true),
            Route {
                attrs: Attrs {
                    communities: {
                        let mut c = comms_vni(2000);
                        c.push(ExtCommunity::MacMobility {
                            sticky: false,
                            seq: 1,
                        });
                        c
                    },
                    ..mac_vni(B, M, 2000, false).attrs
                },
                ..mac_vni(B, M, 2000, false)
            },
        ];
        assert_eq!(
            reconcile(65000, &external(None), &fdb, &rib),
            [
                Action::Daemon("fdb del 02:00:00:00:00:0a dev p20 vlan 20".into()),
                Action::Daemon(
                    "fdb replace 02:00:00:00:00:0a dev vx0 dst 192.0.2.2 vni 2000 extern_learn"
                        .into()
                ),
                Action::Daemon("fdb replace 02:00:00:00:00:0a dev vx0 vlan 20 extern_learn".into()),
                Action::Withdraw(mac_vni(A, M, 2000, true).nlri),
            ]
        );
    }

    #[test]
    fn a_vnifilter_port_serves_its_listed_vnis_only() {
        let ports = external(Some(vec![(1000, 1000)]));
        assert_eq!(ports[0].domains().len(), 1);
        let fdb = [
            in_vlan(learned(M, "p10"), 10),
            in_vlan(learned([2, 0, 0, 0, 0, 0x14], "p20"), 20),
        ];
        let rib = [imet_vni(B, 1000, false), imet_vni(B, 2000, false)];
        let a = reconcile(65000, &ports, &fdb, &rib);
        assert_eq!(
            daemon(&a),
            ["fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 1000 extern_learn"]
        );
        let adv: Vec<Nlri> = a
            .iter()
            .filter_map(|a| match a {
                Action::Advertise { nlri, .. } => Some(*nlri),
                _ => None,
            })
            .collect();
        assert_eq!(
            adv,
            [mac_vni(A, M, 1000, true).nlri, imet_vni(A, 1000, true).nlri]
        );
        // A vnifilter port listing nothing, or a map out of a bridge: nothing at all.
        let none = external(Some(Vec::new()));
        assert_eq!(reconcile(65000, &none, &fdb, &rib), []);
        let mut lone = external(None);
        lone[0].master = None;
        assert_eq!(reconcile(65000, &lone, &fdb, &rib), []);
    }

    /// A pass over the MACs an event named decides exactly what the whole pass decides for
    /// them (docs/decisions.md 76): the union of the parts, one per MAC plus the flood lists,
    /// is the whole pass's actions.
    #[test]
    fn parts_decide_as_the_whole_pass() {
        const C: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 3));
        let m = |i: u8| [2, 0, 0, 0, 1, i];
        // 1: installed, its route withdrawn; 2: new from B; 3: from B and C (C wins, higher
        // sequence); 4: local, not yet advertised; 5: local, but B's route is newer (moved);
        // 6: installed and current; 7: ours advertised, no longer local.
        let fdb = vec![
            remote(m(1), B, true),
            FdbEntry {
                master: Some("br0".into()),
                dst: None,
                ..remote(m(1), B, true)
            },
            learned(m(4), "p1"),
            learned(m(5), "p1"),
            remote(m(6), B, true),
            FdbEntry {
                master: Some("br0".into()),
                dst: None,
                ..remote(m(6), B, true)
            },
            remote([0; 6], C, true),
        ];
        let rib = vec![
            imet(A, true),
            imet(B, false),
            mac_route(B, m(2), None, false),
            mac_route(B, m(3), Some(1), false),
            mac_route(C, m(3), Some(2), false),
            mac_route(A, m(5), None, true),
            mac_route(B, m(5), Some(1), false),
            mac_route(B, m(6), None, false),
            mac_route(A, m(7), None, true),
        ];
        let whole = reconcile(65000, &ports(), &fdb, &rib);
        let mut parts = Vec::new();
        for i in 1..=7 {
            let f: Vec<_> = fdb.iter().filter(|e| e.mac == m(i)).cloned().collect();
            let r: Vec<_> = rib
                .iter()
                .filter(|r| matches!(r.nlri, Nlri::Mac { mac, .. } if mac == m(i)))
                .cloned()
                .collect();
            parts.extend(reconcile_part(65000, None, &ports(), &f, &r, false));
        }
        let f: Vec<_> = fdb.iter().filter(|e| e.mac == [0; 6]).cloned().collect();
        let r: Vec<_> = rib
            .iter()
            .filter(|r| matches!(r.nlri, Nlri::Imet { .. }))
            .cloned()
            .collect();
        parts.extend(reconcile_part(65000, None, &ports(), &f, &r, true));
        let key = |a: &Action| a.to_string();
        let mut w: Vec<_> = whole.iter().map(key).collect();
        let mut p: Vec<_> = parts.iter().map(key).collect();
        w.sort();
        p.sort();
        assert_eq!(p, w);
        // Something was decided for each kind of MAC.
        assert!(w.len() >= 9, "{w:#?}");
    }
}
