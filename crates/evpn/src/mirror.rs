//! The adapter's mirrors of both sides, kept from their event streams so a pass decides only
//! for what changed (docs/decisions.md 76): the speaker's EVPN RIB ([`RibMirror`], from
//! `WatchEvent`'s best-path changes) and the daemon's FDB ([`FdbMirror`], from `monitor -j
//! fdb` lines and the adapter's own commands). Both are indexed by MAC, the unit of the
//! decision ([`crate::reconcile::reconcile_part`]), with the flood lists (MAC 0) and the
//! type-3 routes as one group of their own. A whole read replaces a mirror (at start, after a
//! stream is lost or reports lost events, and every `--interval-ms`).
//!
//! An event is the whole current state of one route or entry (added or changed: its
//! attributes; withdrawn or deleted: gone), so applying the events that arrived after a
//! whole read, even ones older than the read, leaves each route or entry as its last event
//! says — what it is.

use crate::reconcile::{FdbEntry, Route, VxlanPort};
use crate::route::RouteKey;
use std::collections::HashMap;
use std::net::IpAddr;

const ZERO_MAC: [u8; 6] = [0; 6];

/// The speaker's EVPN paths by key: per key the locally originated path and the best
/// received one (a `WatchEvent` names only the best; `ListPath` gives them all).
#[derive(Debug, Default)]
pub struct RibMirror {
    /// Type-2 paths by MAC; type-3 paths under `None`.
    groups: HashMap<Option<[u8; 6]>, Vec<(RouteKey, Route)>>,
    len: usize,
}

impl RibMirror {
    /// The mirror of a whole read.
    pub fn from_paths(paths: impl IntoIterator<Item = (RouteKey, Route)>) -> RibMirror {
        let mut m = RibMirror::default();
        for (k, r) in paths {
            m.groups.entry(k.mac()).or_default().push((k, r));
            m.len += 1;
        }
        m
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn group(&mut self, k: &RouteKey) -> &mut Vec<(RouteKey, Route)> {
        self.groups.entry(k.mac()).or_default()
    }

    /// A best-path event: `route` is now the key's best path, or (`withdrawn`) the key has
    /// no path left.
    pub fn best(&mut self, key: RouteKey, route: Route, withdrawn: bool) {
        let g = self.group(&key);
        let before = g.len();
        if withdrawn {
            g.retain(|(k, _)| *k != key);
        } else {
            for (k, r) in g.iter_mut() {
                if *k == key {
                    r.best = false;
                }
            }
            let route = Route {
                best: true,
                ..route
            };
            match g
                .iter_mut()
                .find(|(k, r)| *k == key && r.local == route.local)
            {
                Some(slot) => slot.1 = route,
                None => g.push((key, route)),
            }
        }
        let after = g.len();
        self.len = self.len + after - before;
        if after == 0 {
            self.groups.remove(&key.mac());
        }
    }

    /// The adapter originated `route` (or changed it): what gobgpd now holds, before its
    /// event says so.
    pub fn originated(&mut self, key: RouteKey, route: Route) {
        let g = self.group(&key);
        let route = Route {
            local: true,
            best: true,
            ..route
        };
        match g.iter_mut().find(|(k, r)| *k == key && r.local) {
            Some(slot) => slot.1 = route,
            None => {
                g.push((key, route));
                self.len += 1;
            }
        }
    }

    /// The adapter withdrew its route of `key`.
    pub fn withdrew(&mut self, key: &RouteKey) {
        let g = self.group(key);
        let before = g.len();
        g.retain(|(k, r)| !(k == key && r.local));
        self.len -= before - g.len();
    }

    /// The type-2 paths of `mac`.
    pub fn of_mac(&self, mac: &[u8; 6]) -> impl Iterator<Item = &Route> {
        self.groups
            .get(&Some(*mac))
            .into_iter()
            .flatten()
            .map(|(_, r)| r)
    }

    /// The type-3 paths.
    pub fn imets(&self) -> impl Iterator<Item = &Route> {
        self.groups.get(&None).into_iter().flatten().map(|(_, r)| r)
    }

    /// Every path (tests, and a check against a whole read).
    pub fn all(&self) -> impl Iterator<Item = &Route> {
        self.groups.values().flatten().map(|(_, r)| r)
    }
}

/// The daemon's FDB by MAC.
#[derive(Debug, Default)]
pub struct FdbMirror {
    macs: HashMap<[u8; 6], Vec<FdbEntry>>,
    len: usize,
}

/// Whether `a` and `b` are the same entry of the FDB, whatever their contents: a bridge's
/// entry is one per (bridge, VLAN, MAC) — a move to another port changes it, and `monitor`
/// says so with the new line only; a VXLAN port's own entry is one per (port, VNI, MAC), one
/// per VTEP on the flood list (MAC 0). Ports in no bridge key by port.
fn same_slot(a: &FdbEntry, b: &FdbEntry) -> bool {
    if a.mac != b.mac {
        return false;
    }
    match (a.dst, b.dst) {
        (None, None) => {
            a.vlan == b.vlan && a.master == b.master && (a.master.is_some() || a.ifname == b.ifname)
        }
        (Some(x), Some(y)) => {
            a.ifname == b.ifname && a.vni == b.vni && (a.mac != ZERO_MAC || x == y)
        }
        _ => false,
    }
}

impl FdbMirror {
    pub fn from_entries(entries: Vec<FdbEntry>) -> FdbMirror {
        let mut m = FdbMirror::default();
        for e in entries {
            m.macs.entry(e.mac).or_default().push(e);
            m.len += 1;
        }
        m
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An entry added, learned, moved or changed.
    pub fn upsert(&mut self, e: FdbEntry) {
        let g = self.macs.entry(e.mac).or_default();
        match g.iter_mut().find(|x| same_slot(x, &e)) {
            Some(x) => *x = e,
            None => {
                g.push(e);
                self.len += 1;
            }
        }
    }

    /// An entry deleted: it goes if the mirror still has it there (the same port and VTEP);
    /// a later move or change of the same slot, already applied, stays.
    pub fn remove(&mut self, e: &FdbEntry) {
        let Some(g) = self.macs.get_mut(&e.mac) else {
            return;
        };
        let before = g.len();
        g.retain(|x| !(same_slot(x, e) && x.ifname == e.ifname && x.dst == e.dst));
        self.len -= before - g.len();
        if g.is_empty() {
            self.macs.remove(&e.mac);
        }
    }

    /// The entries of `mac` (MAC 0: the flood lists).
    pub fn of_mac(&self, mac: &[u8; 6]) -> &[FdbEntry] {
        self.macs.get(mac).map_or(&[], |v| v.as_slice())
    }

    pub fn all(&self) -> impl Iterator<Item = &FdbEntry> {
        self.macs.values().flatten()
    }

    /// What one of the adapter's own commands (`fdb append|replace|del MAC dev PORT [dst IP]
    /// [vni N] [vlan V] [extern_learn]`, as [`crate::reconcile`] writes them) did, once the
    /// daemon accepted it; its `monitor` line, when it comes, says the same. `false`: not a
    /// command of that form (nothing changed).
    pub fn apply(&mut self, cmd: &str, ports: &[VxlanPort]) -> bool {
        let w: Vec<&str> = cmd.split_whitespace().collect();
        let (Some(&"fdb"), Some(&op), Some(mac), Some(&"dev"), Some(&port)) =
            (w.first(), w.get(1), w.get(2), w.get(3), w.get(4))
        else {
            return false;
        };
        let Some(mac) = crate::daemon::parse_mac(mac) else {
            return false;
        };
        let (mut dst, mut vni, mut vlan) = (None::<IpAddr>, None::<u32>, None::<u16>);
        let mut i = 5;
        while i < w.len() {
            let v = w.get(i + 1);
            match w[i] {
                "dst" => dst = v.and_then(|v| v.parse().ok()),
                "vni" => vni = v.and_then(|v| v.parse().ok()),
                "vlan" => vlan = v.and_then(|v| v.parse().ok()),
                _ => {
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        let master = match dst {
            Some(_) => None,
            None => ports
                .iter()
                .find(|p| p.name == port)
                .and_then(|p| p.master.clone())
                .or_else(|| {
                    self.of_mac(&mac)
                        .iter()
                        .find(|e| e.ifname == port && e.dst.is_none())
                        .and_then(|e| e.master.clone())
                }),
        };
        let e = FdbEntry {
            mac,
            ifname: port.to_string(),
            master,
            vlan,
            dst,
            vni,
            state: String::new(),
            extern_learn: true,
        };
        match op {
            "append" | "replace" => self.upsert(e),
            "del" => {
                // The entry named: on this port (a local entry whose MAC moved away, the
                // bridge's entry of a remote MAC) or this VTEP.
                if let Some(g) = self.macs.get_mut(&mac) {
                    let before = g.len();
                    g.retain(|x| {
                        !(x.ifname == e.ifname
                            && x.dst == e.dst
                            && x.vlan == e.vlan
                            && (e.dst.is_none() || x.vni == e.vni))
                    });
                    self.len -= before - g.len();
                    if g.is_empty() {
                        self.macs.remove(&mac);
                    }
                }
            }
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::PortVnis;
    use crate::route::{Attrs, Nlri, Rd};
    use std::net::Ipv4Addr;

    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 3));
    const M: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn ports() -> Vec<VxlanPort> {
        vec![VxlanPort {
            name: "vx0".into(),
            vnis: PortVnis::Id(100),
            local: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            master: Some("br0".into()),
        }]
    }

    fn route(vtep: IpAddr, local: bool) -> (RouteKey, Route) {
        let IpAddr::V4(v4) = vtep else { unreachable!() };
        let nlri = Nlri::Mac {
            rd: Rd::ip(v4, 100),
            etag: 0,
            mac: M,
            vni: 100,
        };
        let attrs = Attrs {
            next_hop: Some(vtep),
            ..Attrs::default()
        };
        (
            RouteKey::of(&nlri, None),
            Route {
                nlri,
                attrs,
                local,
                best: true,
            },
        )
    }

    /// A withdrawal removes exactly its route; another VTEP's route of the same MAC stays,
    /// and a route of the same MAC and RD with an IP address is another route.
    #[test]
    fn withdrawals_are_exact() {
        let (kb, rb) = route(B, false);
        let (kc, rc) = route(C, false);
        let mut m = RibMirror::from_paths([(kb, rb.clone()), (kc, rc.clone())]);
        let kip = RouteKey::of(&rb.nlri, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))));
        m.best(kip, rb.clone(), false);
        assert_eq!(m.len(), 3);
        m.best(kb, rb.clone(), true);
        assert_eq!(m.len(), 2);
        let left: Vec<_> = m.of_mac(&M).map(|r| r.attrs.next_hop).collect();
        assert_eq!(left, [Some(C), Some(B)]);
        m.best(kip, rb.clone(), true);
        m.best(kc, rc, true);
        assert!(m.is_empty());
        assert_eq!(m.of_mac(&M).count(), 0);
    }

    /// A new best path of a key replaces the received one, keeps the local one (no longer
    /// best); the adapter's own advertise and withdraw are seen at once.
    #[test]
    fn best_paths_and_own_routes() {
        let (k, peer) = route(B, false);
        let (_, ours) = route(B, true);
        let mut m = RibMirror::default();
        m.originated(k, ours.clone());
        m.best(k, peer.clone(), false);
        assert_eq!(m.len(), 2);
        let local: Vec<_> = m.of_mac(&M).map(|r| (r.local, r.best)).collect();
        assert_eq!(local, [(true, false), (false, true)]);
        m.withdrew(&k);
        assert_eq!(m.len(), 1);
        assert!(m.all().all(|r| !r.local));
    }

    fn entry(mac: [u8; 6], ifname: &str, dst: Option<IpAddr>) -> FdbEntry {
        FdbEntry {
            mac,
            ifname: ifname.into(),
            master: dst.is_none().then(|| "br0".into()),
            vlan: None,
            dst,
            vni: None,
            state: String::new(),
            extern_learn: false,
        }
    }

    /// Monitor lines: a move replaces the bridge's entry (the new line only); a stale
    /// deletion of the old port leaves the moved entry; flood-list VTEPs are one entry each.
    #[test]
    fn monitor_lines_keep_the_fdb() {
        let mut f = FdbMirror::default();
        f.upsert(entry(M, "p1", None));
        f.upsert(entry(M, "p2", None));
        assert_eq!(f.len(), 1);
        f.remove(&entry(M, "p1", None));
        assert_eq!(f.of_mac(&M)[0].ifname, "p2");
        f.upsert(entry(ZERO_MAC, "vx0", Some(B)));
        f.upsert(entry(ZERO_MAC, "vx0", Some(C)));
        f.upsert(entry(M, "vx0", Some(B)));
        assert_eq!(f.len(), 4);
        // A replaced remote MAC (another VTEP) is one entry.
        f.upsert(entry(M, "vx0", Some(C)));
        assert_eq!(f.len(), 4);
        f.remove(&entry(M, "vx0", Some(B)));
        assert_eq!(f.len(), 4, "stale: the entry points at C now");
        f.remove(&entry(ZERO_MAC, "vx0", Some(B)));
        assert_eq!(f.of_mac(&ZERO_MAC).len(), 1);
    }

    /// The adapter's own commands, as the daemon carries them out.
    #[test]
    fn own_commands_apply() {
        let p = ports();
        let mut f = FdbMirror::default();
        f.upsert(entry(M, "p1", None));
        for cmd in [
            "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 extern_learn",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3 extern_learn",
            "fdb replace 02:00:00:00:00:0b dev vx0 dst 192.0.2.2 extern_learn",
            "fdb replace 02:00:00:00:00:0b dev vx0 extern_learn",
        ] {
            assert!(f.apply(cmd, &p), "{cmd}");
        }
        // The bridge's entry moved from p1 to vx0.
        let bridge: Vec<_> = f
            .of_mac(&M)
            .iter()
            .filter(|e| e.dst.is_none())
            .map(|e| (e.ifname.as_str(), e.extern_learn))
            .collect();
        assert_eq!(bridge, [("vx0", true)]);
        assert_eq!(f.len(), 4);
        assert!(f.apply("fdb del 02:00:00:00:00:0b dev vx0 dst 192.0.2.2", &p));
        assert!(f.apply("fdb del 02:00:00:00:00:0b dev vx0", &p));
        assert!(f.apply("fdb del 00:00:00:00:00:00 dev vx0 dst 192.0.2.3", &p));
        assert_eq!(f.len(), 1);
        assert_eq!(f.of_mac(&ZERO_MAC)[0].dst, Some(B));
        assert!(!f.apply("link set dev vx0 up", &p));
        assert!(!f.apply("fdb frob 02:00:00:00:00:0b dev vx0", &p));
    }
}
