//! The spanning-tree BPDU trap: on a plan where some port has a spanning-tree state (its
//! bridge has `stp` on), a copy of each frame a port of such a bridge receives for the
//! bridge's BPDU group address (01-80-C2-00-00-00 on an 802.1Q bridge, -08 on an 802.1ad
//! provider bridge) goes to [`Outputs::punt`], for the control plane's spanning-tree engine.
//! The frame itself then takes the pipeline like any other: a link-local frame the bridge
//! does not forward, dropped and counted `link_local` (so counters and the reference model
//! are the same with and without the trap). Host ports have no spanning-tree state and trap
//! nothing. Plans without `stp` pay one test per batch.

use super::{Outputs, Path};
use crate::settings::VlanProtocol;
use qbridge_packet::Batch;
use qbridge_wire::frame::{self, LINK_LOCAL_BASE};

impl Path<'_> {
    /// Copies the BPDUs of `rx` to `out.punt` (see the module documentation).
    #[cold]
    #[inline(never)]
    pub(super) fn trap_bpdus(self, rx: &Batch, out: &mut Outputs) {
        for pkt in &rx.pkts {
            let Some(dst) = frame::dst_u64(pkt.frame()) else {
                continue;
            };
            if dst & !0xf != LINK_LOCAL_BASE {
                continue;
            }
            let Some(p) = self.port(crate::plan::PortId(pkt.port)) else {
                continue;
            };
            let (Some(_), Some(b)) = (&p.stp, p.master) else {
                continue;
            };
            let Some(br) = self.bridges.get(b as usize).and_then(|b| b.as_deref()) else {
                continue;
            };
            let group = match br.settings.vlan_protocol {
                VlanProtocol::Dot1Ad => 8,
                _ => 0,
            };
            if dst & 0xf == group {
                let copy = out.pool.get_copy(pkt);
                out.punt.push(copy);
            }
        }
    }
}
