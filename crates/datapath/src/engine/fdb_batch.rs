//! fdb89: FDB-only requests and the fast path's flows (decision 89). A batch of FDB entries
//! (`qbridge-evpn`'s routes) is checked on a copy of the session and then done on the live
//! one (`Session::execute_batch`), so its bridge entries reach the program's FDB map through
//! the FDBs' change log as one command's do (decision 85), without bumping the generation. A
//! VXLAN port's static remotes are not in any FDB: a flow to a static remote embeds its
//! tunnel (decision 73), so the flows to a MAC whose remote changed are removed here, after
//! the barrier, before the request answers; the decapsulation's tunnels follow the tables,
//! and a change there still bumps (decision 77).

use super::Engine;
use qbridge_io::vxlan::{VxlanEntryKind, VxlanTable};
use qbridge_wire::vxlan::Vni;
use qbridge_wire::MacAddr;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// What a request changed in the VXLAN ports' tables (noted by `Engine::sync_vxlan` before it
/// writes them).
#[derive(Debug, Default)]
pub(super) struct VxChanges {
    /// Destination MACs whose static remote was added, moved or removed (any port, any VNI).
    macs: HashSet<[u8; 6]>,
    /// A static remote or a flood list changed: the decapsulation's tunnels may follow.
    touched: bool,
    /// The request being done changes only FDB entries: only then is a change noted (any
    /// other bumps the generation, which makes every flow stale anyway).
    pub(super) armed: bool,
}

impl VxChanges {
    /// Notes what writing `remotes` (a port's static entries and flood lists, as
    /// `VxlanTable::set_statics` takes them) into `t` changes.
    pub(super) fn note(&mut self, t: &VxlanTable, remotes: &[(Vni, MacAddr, IpAddr)]) {
        if !self.armed {
            return;
        }
        let mut old: HashMap<(Vni, [u8; 6]), IpAddr> = HashMap::new();
        let mut old_flood = Vec::new();
        for e in t.entries(std::time::Instant::now()) {
            match e.kind {
                VxlanEntryKind::Static => {
                    old.insert((e.vni, e.mac.0), e.dst);
                }
                VxlanEntryKind::Flood => old_flood.push((e.vni, e.dst)),
                _ => {}
            }
        }
        let mut new: HashMap<(Vni, [u8; 6]), IpAddr> = HashMap::new();
        let mut new_flood = Vec::new();
        for &(vni, mac, dst) in remotes {
            if mac.is_zero() {
                new_flood.push((vni, dst));
            } else {
                // As `set_statics`: the last one of a key wins.
                new.insert((vni, mac.0), dst);
            }
        }
        let before = self.macs.len();
        for (k, d) in &new {
            if old.get(k) != Some(d) {
                self.macs.insert(k.1);
            }
        }
        for k in old.keys() {
            if !new.contains_key(k) {
                self.macs.insert(k.1);
            }
        }
        old_flood.sort_unstable();
        old_flood.dedup();
        new_flood.sort_unstable();
        new_flood.dedup();
        self.touched |= self.macs.len() != before || old_flood != new_flood;
    }
}

impl Engine {
    /// After an FDB-only request, before `publish`: when it changed a VXLAN port's table, the
    /// decapsulation's tunnels follow it (a change there makes the next publish bump, as
    /// decision 77 has it).
    pub(super) fn fdb89_decap(&mut self) {
        if std::mem::take(&mut self.fdb89_vx.touched) {
            self.fast_decap_sync();
        }
    }

    /// After the barrier of an FDB-only request (`fast_fdb_command`): the flows to every MAC
    /// whose static VXLAN remote changed are removed (each embeds its tunnel). An install that
    /// read the old remote did so in a burst the barrier waited for, so its flow is in the map
    /// now; one that reads the table after the request changed it takes the new remote.
    /// Returns the flows removed.
    pub(super) fn fdb89_vx_flows(&mut self) -> usize {
        let macs = std::mem::take(&mut self.fdb89_vx.macs);
        if macs.is_empty() {
            return 0;
        }
        let Some(rt) = self.fast.as_mut() else {
            return 0;
        };
        match rt.remove_flows_to(&macs) {
            Some(n) => n,
            None => {
                // Every flow stale, the workers told the new generation, before the answer.
                rt.dirty = true;
                self.publish();
                0
            }
        }
    }

    /// After a request: what it noted in the VXLAN tables is forgotten (used, or the
    /// generation was bumped anyway: every flow stale), and nothing is noted until the next
    /// FDB-only request.
    pub(super) fn fdb89_forget(&mut self) {
        self.fdb89_vx = VxChanges::default();
    }
}
