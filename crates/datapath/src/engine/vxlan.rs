//! VXLAN ports in the engine: opening the UDP socket (`qbridge_io::vxlan::VxlanPort`, one
//! queue on one worker) and copying the static remotes of the session's spec into the
//! backend's table after every change (`fdb … dst IP` does not reopen the socket).

use super::Engine;
use crate::queue::{distribute, Opened};
use qbridge_bridge::PortId;
use qbridge_control::vxlan::VxlanSpec;
use qbridge_control::PortSpec;
use qbridge_io::vxlan::{SharedVxlanTable, VxlanConfig, VxlanPort, VxlanTable};
use qbridge_wire::vxlan::Vni;

/// Opens port `name`'s socket: one queue, on worker `rotate % workers`.
pub(super) fn open_vxlan(
    name: &str,
    spec: &VxlanSpec,
    workers: usize,
    rotate: usize,
) -> Result<(Opened, SharedVxlanTable), String> {
    let vni = Vni::new(spec.vni)
        .ok_or_else(|| format!("port {name}: id {} is above 16777215", spec.vni))?;
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
    };
    let port = VxlanPort::open(cfg, table.clone()).map_err(|e| format!("port {name}: {e}"))?;
    tracing::info!(
        "port {name}: vxlan id {} on {}:{}{} (learning {})",
        spec.vni,
        spec.local,
        spec.dstport,
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
    /// Copies every VXLAN port's static remotes from the session into its open table.
    pub(super) fn sync_vxlan(&mut self, wanted: &[(PortId, String, PortSpec)]) {
        for (id, _, spec) in wanted {
            let PortSpec::Vxlan(v) = spec else { continue };
            let Some(Some(slot)) = self.slots.get(id.0 as usize) else {
                continue;
            };
            let Some(table) = &slot.vxlan else { continue };
            let remotes: Vec<_> = v.remotes.iter().map(|r| (r.mac, r.dst)).collect();
            table
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .set_statics(&remotes);
        }
    }
}

/// The learned entries of a VXLAN port's table (MAC, VTEP), for `fdb show`.
pub(super) fn learned(t: &SharedVxlanTable) -> Vec<(qbridge_wire::MacAddr, std::net::Ipv4Addr)> {
    let t = t.lock().unwrap_or_else(|p| p.into_inner());
    t.entries(std::time::Instant::now())
        .into_iter()
        .filter(|e| e.kind == qbridge_io::vxlan::VxlanEntryKind::Learned)
        .map(|e| (e.mac, e.dst))
        .collect()
}
