//! VXLAN ports in the engine: opening the UDP socket (`qbridge_io::vxlan::VxlanPort`, one
//! queue on one worker) and copying into the backend's table, after every command, what the
//! session's spec and the port's bridge say: the static remotes (`fdb … dst IP [vni N]` does
//! not reopen the socket), an external port's VLAN ↔ VNI map with the bridge's TPID (when the
//! bridge filters VLANs), the bridge's `ageing_time` for learned entries, and `fdb flush dev
//! NAME` (the learned entries go).

use super::Engine;
use crate::queue::{distribute, Opened};
use qbridge_bridge::PortId;
use qbridge_control::vxlan::VxlanSpec;
use qbridge_control::PortSpec;
use qbridge_io::vxlan::{SharedVxlanTable, TunnelMap, VxlanConfig, VxlanPort, VxlanTable};
use qbridge_wire::vxlan::Vni;
use std::time::Duration;

/// Opens port `name`'s socket: one queue, on worker `rotate % workers`.
pub(super) fn open_vxlan(
    name: &str,
    spec: &VxlanSpec,
    workers: usize,
    rotate: usize,
    shared: &crate::shared::PortShared,
) -> Result<(Opened, SharedVxlanTable), String> {
    let vni = if spec.external {
        None
    } else {
        Some(
            Vni::new(spec.vni)
                .ok_or_else(|| format!("port {name}: id {} is above 16777215", spec.vni))?,
        )
    };
    let table = VxlanTable::shared();
    let cfg = VxlanConfig {
        name: name.to_owned(),
        vni,
        local: spec.local,
        dstport: spec.dstport,
        ttl: spec.ttl,
        dev: spec.dev.clone(),
        tos: spec.tos,
        learning: spec.learning,
        udp6zerocsumtx: spec.udp6zerocsumtx,
        udp6zerocsumrx: spec.udp6zerocsumrx,
    };
    let port = VxlanPort::open(cfg, table.clone()).map_err(|e| format!("port {name}: {e}"))?;
    // What the eBPF fast path needs to encapsulate as this port sends (decision 73).
    let egress = match crate::fastpath::VxlanEgress::of(&port, table.clone()) {
        Ok(e) => {
            tracing::info!(
                "port {name}: the fast path encapsulates its known unicast to static and \
                 learned remotes (underlay ifindex {}, MTU {}, source ports {:?})",
                e.underlay,
                e.underlay_mtu,
                e.sports
            );
            Some(std::sync::Arc::new(e))
        }
        Err(why) => {
            tracing::debug!("port {name}: the fast path leaves its frames to the pipeline: {why}");
            None
        }
    };
    *shared.fast_vxlan.lock().unwrap_or_else(|p| p.into_inner()) = egress;
    tracing::info!(
        "port {name}: vxlan {} on {}{} (learning {})",
        if spec.external {
            "external".to_string()
        } else {
            format!("id {}", spec.vni)
        },
        std::net::SocketAddr::new(spec.local, spec.dstport),
        spec.dev
            .as_deref()
            .map_or(String::new(), |d| format!(" dev {d}")),
        if spec.learning { "on" } else { "off" }
    );
    let queues = distribute(vec![Box::new(port)], workers, rotate)
        .map_err(|e| format!("port {name}: {e}"))?;
    Ok((queues, table))
}

impl Engine {
    /// Copies every VXLAN port's static remotes, VLAN ↔ VNI map and its bridge's TPID and
    /// ageing time into its open table.
    pub(super) fn sync_vxlan(&mut self, wanted: &[(PortId, String, PortSpec)]) {
        for (id, name, spec) in wanted {
            let PortSpec::Vxlan(v) = spec else { continue };
            // vxl88 (decision 88): the learned entries `fdb del` removed.
            let forget = self.session.take_vxlan_forgets(name);
            let Some(Some(slot)) = self.slots.get(id.0 as usize) else {
                continue;
            };
            let Some(table) = &slot.vxlan else { continue };
            let remotes: Vec<_> = v
                .remotes
                .iter()
                .filter_map(|r| Some((Vni::new(r.vni)?, r.mac, r.dst)))
                .collect();
            let sw = self.session.switch();
            let bridge = sw.port_master(*id).map(|b| sw.bridge_settings(b));
            // The map reads the bridge's tags: only in a VLAN-filtering bridge.
            let tpid = bridge
                .filter(|s| s.vlan_filtering)
                .map(|s| s.vlan_protocol.tpid().0);
            let tunnels = TunnelMap::new(&v.tunnels, tpid, v.vnifilter.then(|| v.vnis.clone()));
            let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
            // fdb89: what changes, for the fast path's flows (decision 89).
            if self.fast.is_some() {
                self.fdb89_vx.note(&t, &remotes);
            }
            t.set_statics(&remotes);
            for &(vni, mac, dst) in &forget {
                if let Some(v) = Vni::new(vni) {
                    t.forget_learned(v, mac, Some(dst));
                }
            }
            if t.tunnels != tunnels {
                t.tunnels = tunnels;
            }
            if let Some(b) = bridge {
                t.set_ageing(Duration::from_nanos(b.ageing_time_ns));
            }
            // `fdb flush dev NAME`: the learned VTEPs go.
            let flushes = self.session.vxlan_flushes(name);
            if t.flushes_seen != flushes {
                let n = t.flush_learned();
                t.flushes_seen = flushes;
                tracing::debug!("port {name}: {n} learned VTEP entries flushed");
            }
        }
    }
}

/// The learned entries of a VXLAN port's table (VNI, MAC, VTEP), for `fdb show`.
pub(super) fn learned(t: &SharedVxlanTable) -> Vec<qbridge_control::vxlan::Learned> {
    let t = t.lock().unwrap_or_else(|p| p.into_inner());
    t.entries(std::time::Instant::now())
        .into_iter()
        .filter(|e| e.kind == qbridge_io::vxlan::VxlanEntryKind::Learned)
        .map(|e| (e.vni.get(), e.mac, e.dst))
        .collect()
}

impl Engine {
    /// The fast path's decapsulation (decision 77) brought in line with the VXLAN ports: each
    /// open, fast-path-servable port with an underlay the program encapsulates on has
    /// `qb_vxlan_in` on that underlay and a tunnel for every remote its table knows (IPv6
    /// ones, decision 82, with the port's `udp6zerocsumrx`)
    /// (static entries and flood lists) and VNI it serves (an external port's: each mapped VNI
    /// its `vnifilter` accepts, tagged with a VID of a TPID the program parses), and, when it
    /// learns, its static sources. Called before the generation is bumped for a command.
    pub(super) fn fast_decap_sync(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let mut want = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            vxl_hook_set(rt, i as u16, s);
            let w = decap_want(i as u16, s);
            s.shared
                .fast_decap
                .store(w.is_some(), std::sync::atomic::Ordering::Relaxed);
            want.extend(w);
        }
        rt.sync_decap(&want);
    }
}

/// vxl_ (decision 83): a learning VXLAN port the program encapsulates for gets, once, the hook
/// that writes its table's learned entries into `qb_vxl_learned` (a port opened again has a
/// new table).
fn vxl_hook_set(rt: &mut crate::fastpath::control::FastRt, id: u16, s: &super::ports::Slot) {
    let PortSpec::Vxlan(spec) = &s.spec else {
        return;
    };
    if !s.open || !spec.learning || !crate::fastpath::servable(id) {
        return;
    }
    let Some(table) = s.vxlan.as_ref() else {
        return;
    };
    if s.shared
        .fast_vxlan
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_none()
    {
        return;
    }
    let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
    if t.has_learn_hook() {
        return;
    }
    let Some(map) = rt.vxl_map() else { return };
    let port = crate::fastpath::port_index(s.token);
    t.set_learn_hook(Some(crate::fastpath::vxlan::vxl_hook(map, port)));
}

impl Engine {
    /// vxl_ (decision 83), once a second: each learning VXLAN port's learned entries refreshed
    /// from what the program decapsulated, the aged ones removed (`vxl_age`), and the
    /// decapsulation tunnels of learned remotes brought in line (no flow is invalidated).
    pub(super) fn fast_vxl_age(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let mut map = None;
        for s in self.slots.iter().flatten() {
            let Some(table) = s.vxlan.as_ref() else {
                continue;
            };
            let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
            if !t.has_learn_hook() {
                continue;
            }
            if map.is_none() {
                map = rt.vxl_map();
            }
            let Some(m) = map.as_ref() else { return };
            crate::fastpath::vxlan::vxl_age(m, crate::fastpath::port_index(s.token), &mut t);
        }
        if map.is_some() {
            let want: Vec<_> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| decap_want(i as u16, s.as_ref()?))
                .collect();
            rt.sync_decap_learned(&want);
        }
    }
}

/// What port slot `s` (id `id`) asks of the decapsulating program, if anything.
fn decap_want(id: u16, s: &super::ports::Slot) -> Option<crate::fastpath::decap::DecapWant> {
    use qbridge_fastpath::{Vxd, VxdKey, VxdSrcKey, VXD_LEARNING};
    let PortSpec::Vxlan(spec) = &s.spec else {
        return None;
    };
    if !s.open || !crate::fastpath::servable(id) {
        return None;
    }
    let table = s.vxlan.as_ref()?;
    let egress = s
        .shared
        .fast_vxlan
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()?;
    let underlay = qbridge_io::sys::ifname(egress.underlay)?;
    let port = crate::fastpath::port_index(s.token);
    let t = table.lock().unwrap_or_else(|p| p.into_inner());
    let entries = t.entries(std::time::Instant::now());
    // The VNIs the port serves, with the tag its frames enter with.
    let mut vnis: Vec<(Vni, [u8; 2], [u8; 2])> = Vec::new();
    match egress.vni {
        Some(v) => vnis.push((v, [0; 2], [0; 2])),
        None => {
            for &(_, n) in &spec.tunnels {
                let Some(v) = Vni::new(n) else { continue };
                let Some(tag) = t.tunnels.tag_of_vni(v) else {
                    continue;
                };
                let tpid = u16::from_be_bytes([tag[0], tag[1]]);
                if tpid != 0x8100 && tpid != 0x88a8 {
                    continue;
                }
                if !vnis.iter().any(|(w, _, _)| *w == v) {
                    vnis.push((v, [tag[0], tag[1]], [tag[2], tag[3]]));
                }
            }
        }
    }
    // vxl_ (decision 83): learned remotes only where the table writes its learned entries
    // for the program.
    let learned_too = spec.learning && t.has_learn_hook();
    let flags = if spec.learning { VXD_LEARNING } else { 0 };
    let mut w = crate::fastpath::decap::DecapWant {
        underlay,
        ..Default::default()
    };
    // An IPv4 underlay's tunnels (decision 77), each IPv4 remote x VNI.
    if let std::net::IpAddr::V4(local) = egress.local {
        let all = tunnel_remotes(&entries, learned_too, |d| match d {
            std::net::IpAddr::V4(a) => Some(a),
            std::net::IpAddr::V6(_) => None,
        });
        for &(v, tpid, tci) in &vnis {
            for &(r, more) in &all {
                w.tunnels.push((
                    VxdKey {
                        local: local.octets(),
                        remote: r.octets(),
                        vni: v.word(),
                        dstport: egress.dstport.to_be_bytes(),
                        pad: 0,
                    },
                    Vxd {
                        port: u32::from(port),
                        tag_tpid: tpid,
                        tag_tci: tci,
                        flags: flags | more,
                    },
                ));
            }
        }
    }
    // Decision 82: an IPv6 underlay's tunnels, each IPv6 remote of its static entries and
    // flood lists x VNI, a zero UDP checksum taken if the port takes it (udp6zerocsumrx).
    if let std::net::IpAddr::V6(local6) = egress.local {
        let zero = if spec.udp6zerocsumrx {
            qbridge_fastpath::VXD_ZERO6RX
        } else {
            0
        };
        let all6 = tunnel_remotes(&entries, learned_too, |d| match d {
            std::net::IpAddr::V6(a) => Some(a),
            std::net::IpAddr::V4(_) => None,
        });
        for &(v, tpid, tci) in &vnis {
            for &(r, more) in &all6 {
                let key = qbridge_fastpath::Vxd6Key {
                    local: local6.octets(),
                    remote: r.octets(),
                    vni: v.word(),
                    dstport: egress.dstport.to_be_bytes(),
                    pad: 0,
                };
                let vxd = Vxd {
                    port: u32::from(port),
                    tag_tpid: tpid,
                    tag_tci: tci,
                    flags: flags | zero | more,
                };
                w.tunnels6.push((key, vxd));
            }
        }
    }
    if spec.learning {
        for e in &entries {
            if e.kind == qbridge_io::vxlan::VxlanEntryKind::Static
                && vnis.iter().any(|(v, _, _)| *v == e.vni)
            {
                w.srcs.push(VxdSrcKey {
                    port: u32::from(port),
                    vni: e.vni.word(),
                    mac: e.mac.0,
                    pad: 0,
                });
            }
        }
    }
    (!w.tunnels.is_empty() || !w.tunnels6.is_empty()).then_some(w)
}

/// A VXLAN port's remotes of one address family (`of` picks them), each once: those of its
/// static entries and flood lists, then, if `learned_too`, those only a learned entry names,
/// marked [`crate::fastpath::decap::VXL_TUNNEL`] (decision 83).
fn tunnel_remotes<A: Ord + Copy>(
    entries: &[qbridge_io::vxlan::VxlanEntry],
    learned_too: bool,
    of: impl Fn(std::net::IpAddr) -> Option<A>,
) -> Vec<(A, u32)> {
    use qbridge_io::vxlan::VxlanEntryKind::Learned;
    let family = |learned: bool| {
        let mut v: Vec<A> = entries
            .iter()
            .filter(|e| (e.kind == Learned) == learned)
            .filter_map(|e| of(e.dst))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let fixed = family(false);
    let learned = if learned_too {
        family(true)
    } else {
        Vec::new()
    };
    let only_learned = learned
        .into_iter()
        .filter(|a| fixed.binary_search(a).is_err());
    let vxl = crate::fastpath::decap::VXL_TUNNEL;
    let fixed = fixed.iter().map(|&a| (a, 0));
    fixed.chain(only_learned.map(|a| (a, vxl))).collect()
}
