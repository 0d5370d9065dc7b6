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
                "port {name}: the fast path encapsulates its known unicast to static remotes \
                 (underlay ifindex {}, MTU {}, source ports {:?})",
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
            t.set_statics(&remotes);
            if t.tunnels != tunnels {
                t.tunnels = tunnels;
            }
            if let Some(b) = bridge {
                t.ageing = Duration::from_nanos(b.ageing_time_ns);
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
