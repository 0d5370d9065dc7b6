//! VXLAN decapsulation in the fast path (decision 77): what the daemon writes for
//! `qb_vxlan_in` — the program on each served VXLAN port's underlay, the tunnels whose frames it
//! may take (the port's local address and UDP port, each IPv4 remote the port's table knows,
//! each VNI the port serves with an external port's tag for it), the static sources of a
//! learning port — and keeps in line with the ports after every command. A change removes what
//! went before the generation is bumped (`FastRt::dirty`), so no frame of a removed tunnel, VNI
//! or port is taken after the command answers; the VXLAN port's own frames (the program's
//! misses, and every frame it passes) go through the worker's fast path as a served TAP's do,
//! which installs their flows.

use super::control::FastRt;
use qbridge_fastpath::{FastPath, Vxd, Vxd6Key, VxdKey, VxdSrcKey, VxdVerdict, VXD_TRACE};
use std::collections::{BTreeSet, HashMap, HashSet};

/// What the program was last given.
#[derive(Debug, Default)]
pub(crate) struct Decap {
    tunnels: HashMap<TunnelKey, Vxd>,
    srcs: HashSet<VxdSrcKey>,
    underlays: BTreeSet<String>,
    /// The ports `trace live` watches: their tunnels carry `VXD_TRACE` (their frames all go
    /// to the socket, where the pipeline traces them).
    traced: Vec<u16>,
}

/// vxl_ (decision 83): a tunnel the port asks for only because a learned entry names its
/// remote (the program ignores the flag). Adding or removing it invalidates no flow: what a
/// tunnel gates is only whether the program looks at a frame, and a learned source is checked
/// in `qb_vxl_learned` on every frame; so the engine brings these in line once a second too.
pub(crate) const VXL_TUNNEL: u32 = 0x100;

/// A tunnel of either outer family: `qb_vxd_tunnels`' (IPv4) or `qb_vxd6_tunnels`' (IPv6,
/// decision 82).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TunnelKey {
    V4(VxdKey),
    V6(Vxd6Key),
}

impl TunnelKey {
    fn set(self, fp: &mut FastPath, v: Vxd) -> Result<(), qbridge_fastpath::Error> {
        match self {
            TunnelKey::V4(k) => fp.set_vxd_tunnel(k, v),
            TunnelKey::V6(k) => fp.set_vxd6_tunnel(k, v),
        }
    }

    fn remove(&self, fp: &mut FastPath) -> Result<(), qbridge_fastpath::Error> {
        match self {
            TunnelKey::V4(k) => fp.remove_vxd_tunnel(k),
            TunnelKey::V6(k) => fp.remove_vxd6_tunnel(k),
        }
    }
}

/// What one VXLAN port asks of the program.
#[derive(Debug, Clone, Default)]
pub(crate) struct DecapWant {
    pub underlay: String,
    pub tunnels: Vec<(VxdKey, Vxd)>,
    /// An IPv6 underlay's (decision 82).
    pub tunnels6: Vec<(Vxd6Key, Vxd)>,
    pub srcs: Vec<VxdSrcKey>,
}

impl FastRt {
    /// Brings the program's filters and maps to `want` (every served VXLAN port's); returns
    /// whether anything changed (the flows are then made stale before the command answers).
    pub(crate) fn sync_decap(&mut self, want: &[DecapWant]) -> bool {
        let traced = &self.decap.traced;
        let tunnels: HashMap<TunnelKey, Vxd> = want
            .iter()
            .flat_map(|w| {
                let v4 = w.tunnels.iter().map(|&(k, v)| (TunnelKey::V4(k), v));
                v4.chain(w.tunnels6.iter().map(|&(k, v)| (TunnelKey::V6(k), v)))
            })
            .map(|(k, mut v)| {
                if traced.contains(&((v.port & qbridge_fastpath::PORT_ID_MASK) as u16)) {
                    v.flags |= VXD_TRACE;
                }
                (k, v)
            })
            .collect();
        let srcs: HashSet<VxdSrcKey> = want.iter().flat_map(|w| w.srcs.iter().copied()).collect();
        let underlays: BTreeSet<String> = want.iter().map(|w| w.underlay.clone()).collect();
        let mut changed = false;
        // What goes, first.
        let gone: Vec<(TunnelKey, Vxd)> = self
            .decap
            .tunnels
            .iter()
            .filter(|(k, v)| tunnels.get(k) != Some(v))
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, v) in gone {
            if let Err(e) = k.remove(&mut self.fp) {
                tracing::warn!("fast path: decapsulation tunnel: {e}");
            }
            self.decap.tunnels.remove(&k);
            changed |= v.flags & VXL_TUNNEL == 0;
        }
        let gone: Vec<VxdSrcKey> = self.decap.srcs.difference(&srcs).copied().collect();
        for k in gone {
            if let Err(e) = self.fp.remove_vxd_src(&k) {
                tracing::warn!("fast path: decapsulation source: {e}");
            }
            self.decap.srcs.remove(&k);
            changed = true;
        }
        let gone: Vec<String> = self
            .decap
            .underlays
            .difference(&underlays)
            .cloned()
            .collect();
        for dev in gone {
            if let Err(e) = self.fp.detach_decap(&dev) {
                tracing::debug!("fast path: decapsulation on {dev}: {e}");
            }
            self.decap.underlays.remove(&dev);
            changed = true;
        }
        for dev in underlays {
            if self.decap.underlays.contains(&dev) {
                continue;
            }
            match self.fp.attach_decap(&dev) {
                Ok(()) => {
                    tracing::info!("fast path: decapsulating VXLAN on {dev}");
                    self.decap.underlays.insert(dev);
                    changed = true;
                }
                Err(e) => tracing::warn!(
                    "fast path: cannot decapsulate on {dev}: {e}; the port's socket receives"
                ),
            }
        }
        for k in srcs {
            if self.decap.srcs.contains(&k) {
                continue;
            }
            match self.fp.set_vxd_src(k) {
                Ok(()) => {
                    self.decap.srcs.insert(k);
                    changed = true;
                }
                Err(e) => tracing::warn!("fast path: decapsulation source: {e}"),
            }
        }
        for (k, v) in tunnels {
            if self.decap.tunnels.get(&k) == Some(&v) {
                continue;
            }
            match k.set(&mut self.fp, v) {
                Ok(()) => {
                    self.decap.tunnels.insert(k, v);
                    changed |= v.flags & VXL_TUNNEL == 0;
                }
                Err(e) => tracing::warn!("fast path: decapsulation tunnel: {e}"),
            }
        }
        if changed {
            self.dirty = true;
        }
        changed
    }

    /// `trace live` watches `ports` now: a VXLAN port among them has its frames all passed to
    /// its socket (the pipeline traces them), the others decapsulated again.
    pub(crate) fn set_traced_decap(&mut self, ports: &[u16]) {
        self.decap.traced = ports.to_vec();
        let all: Vec<(TunnelKey, Vxd)> = self.decap.tunnels.iter().map(|(k, v)| (*k, *v)).collect();
        for (k, mut v) in all {
            let id = (v.port & qbridge_fastpath::PORT_ID_MASK) as u16;
            let want = ports.contains(&id);
            if want == (v.flags & VXD_TRACE != 0) {
                continue;
            }
            v.flags ^= VXD_TRACE;
            match k.set(&mut self.fp, v) {
                Ok(()) => {
                    self.decap.tunnels.insert(k, v);
                }
                Err(e) => tracing::warn!("fast path: decapsulation tunnel: {e}"),
            }
        }
    }

    /// Whether the program decapsulates for VXLAN port `id`.
    pub(crate) fn decap_serves(&self, id: u16) -> bool {
        self.decap
            .tunnels
            .values()
            .any(|v| (v.port & qbridge_fastpath::PORT_ID_MASK) as u16 == id)
    }

    /// Whether the program decapsulates on any interface.
    pub(crate) fn decapsulates(&self) -> bool {
        !self.decap.underlays.is_empty()
    }

    /// For `show fast-path` while the program decapsulates: the frames it decapsulated (hits),
    /// and those it passed to the VXLAN ports' sockets, by reason (`decap-…`); the `other`
    /// frames of the underlay, not VXLAN to a served tunnel, are left out.
    pub(crate) fn decap_counts(&mut self) -> (u64, Vec<(String, u64)>) {
        if !self.decapsulates() {
            return (0, Vec::new());
        }
        let stats = self.fp.vxd_stats().unwrap_or_default();
        let mut hits = 0;
        let mut passes = Vec::new();
        for (v, n) in stats {
            match v {
                VxdVerdict::Hit => hits = n,
                VxdVerdict::Other => {}
                v => passes.push((format!("decap-{}", v.name()), n)),
            }
        }
        (hits, passes)
    }
}

impl FastRt {
    /// vxl_ (decision 83), once a second: only the learned remotes' tunnels ([`VXL_TUNNEL`])
    /// brought to `want`'s — nothing attached or detached, no flow made stale, a tunnel the
    /// program has for a static or flood-list remote left alone.
    pub(crate) fn sync_decap_learned(&mut self, want: &[DecapWant]) {
        let traced = &self.decap.traced;
        let wanted: HashMap<TunnelKey, Vxd> = want
            .iter()
            .flat_map(|w| {
                let v4 = w.tunnels.iter().map(|&(k, v)| (TunnelKey::V4(k), v));
                v4.chain(w.tunnels6.iter().map(|&(k, v)| (TunnelKey::V6(k), v)))
            })
            .filter(|(_, v)| v.flags & VXL_TUNNEL != 0)
            .map(|(k, mut v)| {
                if traced.contains(&((v.port & qbridge_fastpath::PORT_ID_MASK) as u16)) {
                    v.flags |= VXD_TRACE;
                }
                (k, v)
            })
            .collect();
        let gone: Vec<TunnelKey> = self
            .decap
            .tunnels
            .iter()
            .filter(|(k, v)| v.flags & VXL_TUNNEL != 0 && wanted.get(k) != Some(v))
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Err(e) = k.remove(&mut self.fp) {
                tracing::debug!("fast path: a learned remote's decapsulation tunnel: {e}");
            }
            self.decap.tunnels.remove(&k);
        }
        for (k, v) in wanted {
            if self.decap.tunnels.contains_key(&k) {
                continue;
            }
            match k.set(&mut self.fp, v) {
                Ok(()) => {
                    self.decap.tunnels.insert(k, v);
                }
                Err(e) => {
                    tracing::debug!("fast path: a learned remote's decapsulation tunnel: {e}")
                }
            }
        }
    }

    /// vxl_: a handle on `qb_vxl_learned` (decision 83).
    pub(crate) fn vxl_map(&mut self) -> Option<qbridge_fastpath::VxlMap> {
        self.fp
            .vxl_map()
            .map_err(|e| tracing::warn!("fast path: learned VXLAN remotes: {e}"))
            .ok()
    }
}
