//! Compiling the plan: the records a [`Switch`](crate::Switch) changes, and the functions that
//! recompile their derived fields and publish an immutable [`Plan`] of them.
//!
//! [`Records`] is the configuration room's store (the `Arc`-shared per-port and per-bridge
//! records and the published plan); a configuration operation changes a record through
//! [`Records::port_mut`] / [`Records::bridge_mut`] (which drop the published plan) and then calls
//! the recompile function for what it changed: [`Records::recompile_port`] (TPID, largest
//! frame, running, PCP tables), [`Records::recompile_bridge`], [`Records::recompile_flood`] (the
//! per-VID flood lists), [`Records::recompile_uppers`] (the receive table of stacked devices).
//! [`Records::publish`] compiles the `plain` flags and the egress VID sets (`tx_member`) and
//! makes the [`Plan`]. All of it runs at
//! configuration time, never per frame.
//!
//! Imports: the plan's own records and the leaf vocabulary modules (settings, FDB, counters);
//! never `crate::config` nor `crate::path`.

use super::mirror::Mirrors;
use super::{Bridge, BridgeId, Plan, PortId, PortRecord, Uppers};
use crate::cells::CellSet;
use crate::settings::{PcpMode, Role, VlanProtocol, MAX_STACK_DEPTH};
use std::sync::Arc;

/// The per-port and per-bridge records of a switch (slots by id; `None`: free) and the plan
/// last published from them (`None` after a change).
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub bridges: Vec<Option<Arc<Bridge>>>,
    pub ports: Vec<Option<Arc<PortRecord>>>,
    pub plan: Option<Arc<Plan>>,
}

impl Records {
    /// Port `id`, which must exist.
    pub fn port(&self, id: PortId) -> &PortRecord {
        self.ports[id.0 as usize].as_ref().expect("live port id")
    }

    /// Port `id` for a change: copied first if a published plan still shares it.
    pub fn port_mut(&mut self, id: PortId) -> &mut PortRecord {
        self.plan = None;
        Arc::make_mut(self.ports[id.0 as usize].as_mut().expect("live port id"))
    }

    /// Bridge `id`, which must exist.
    pub fn bridge(&self, id: BridgeId) -> &Bridge {
        self.bridges[id.0 as usize]
            .as_ref()
            .expect("live bridge id")
    }

    /// Bridge `id` for a change, copied like [`Records::port_mut`] (its FDB and counters stay
    /// shared).
    pub fn bridge_mut(&mut self, id: BridgeId) -> &mut Bridge {
        self.plan = None;
        Arc::make_mut(
            self.bridges[id.0 as usize]
                .as_mut()
                .expect("live bridge id"),
        )
    }

    /// The ports stacked directly on port `id` (VLAN devices, macvlan endpoints), in id order.
    pub fn stacked_on(&self, id: PortId) -> Vec<PortId> {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_deref()?;
                (p.role.lower() == Some(id.0)).then_some(PortId(i as u16))
            })
            .collect()
    }

    /// [`Switch::plan`](crate::Switch::plan) after a change: compiles [`PortRecord::plain`] and
    /// publishes a new plan, with the switch's unknown-port drop counters and its compiled
    /// mirror sessions.
    #[cold]
    #[inline(never)]
    pub fn publish(
        &mut self,
        unknown_port_drops: &Arc<CellSet>,
        mirrors: Option<Arc<Mirrors>>,
    ) -> Arc<Plan> {
        // Every change to a port went through `port_mut` (or made a new port) and cleared the
        // plan, so a port whose flag is stale is not shared with a published plan: no copy.
        let inner: Vec<bool> = self
            .bridges
            .iter()
            .map(|b| b.as_ref().is_some_and(|b| b.settings.learn_inner_vid))
            .collect();
        for p in self.ports.iter_mut().flatten() {
            // A bridge that learns per inner VID reads every frame's C-tag: not plain.
            let inner_learning = p
                .master
                .is_some_and(|b| inner.get(usize::from(b)) == Some(&true));
            let plain = p.is_plain() && !inner_learning;
            let mut tx_member = p.member.clone();
            tx_member.insert(0);
            if let Some(stp) = &p.stp {
                tx_member.retain(&stp.fwd);
            }
            let sends = p.running && p.stp.is_none();
            if p.plain != plain || p.tx_member != tx_member || p.sends != sends {
                let p = Arc::make_mut(p);
                p.plain = plain;
                p.tx_member = tx_member;
                p.sends = sends;
            }
        }
        let p = Arc::new(Plan {
            bridges: self.bridges.clone(),
            ports: self.ports.clone(),
            unknown_port_drops: Some(unknown_port_drops.clone()),
            stacked: self.ports.iter().flatten().any(|p| p.role != Role::Device),
            mirrors,
            trap_bpdu: self.ports.iter().flatten().any(|p| p.stp.is_some()),
        });
        self.plan = Some(p.clone());
        p
    }

    /// Devices between port `id` and the device at the bottom of its stack (0 for a device).
    pub fn stack_depth(&self, id: PortId) -> usize {
        let mut depth = 0;
        let mut cur = self.port(id).role;
        while let Some(l) = cur.lower() {
            depth += 1;
            cur = self.port(PortId(l)).role;
            if depth > MAX_STACK_DEPTH {
                break;
            }
        }
        depth
    }

    /// Tags the deepest chain of VLAN devices stacked on port `id` pushes on the way down.
    pub fn tags_above(&self, id: PortId) -> u32 {
        self.stacked_on(id)
            .into_iter()
            .map(|u| {
                let own = matches!(self.port(u).role, Role::Vlan { .. }) as u32;
                own + self.tags_above(u)
            })
            .max()
            .unwrap_or(0)
    }

    /// What port `id` is: a device, a host port, or a device stacked on another port.
    /// Rebuilds the receive table of the devices stacked on `lower`, and the frame size of
    /// every port below (a VLAN device adds a tag's envelope allowance to each).
    pub fn recompile_uppers(&mut self, lower: PortId) {
        let mut up = Uppers::default();
        for u in self.stacked_on(lower) {
            let p = self.port(u);
            match p.role {
                Role::Vlan { tpid, vid, .. } => {
                    up.vlans.insert((tpid as u32) << 16 | vid as u32, u.0);
                }
                Role::Macvlan { mode, .. } => up.macvlans.push((p.mac, u.0, mode)),
                Role::Device | Role::Host { .. } => {}
            }
        }
        let empty = up.vlans.is_empty() && up.macvlans.is_empty();
        self.port_mut(lower).uppers = (!empty).then(|| Arc::new(up));
        let mut cur = Some(lower);
        while let Some(id) = cur {
            self.recompile_port(id);
            cur = self.port(id).role.lower().map(PortId);
        }
    }

    /// `port`'s address as Linux gives a bridge port's address a local entry: the host port's
    /// (`mac`) or a device's interface address (`if_mac`); 0: none.
    /// Recompiles port `id`'s own compiled fields (TPID, largest frame, running); the port is
    /// copied only if one of them changes. A port that stops running loses its dynamic entries.
    /// The envelope allowance in force on port `id`: its `envhdr len`, or automatically the
    /// bridge's rule ([`PortSettings::effective_envhdr`]) plus 4 bytes per tag the VLAN devices
    /// stacked on it push (so `eth0.100.10`'s 1500-byte packets leave `eth0` as 1522 bytes).
    pub fn envhdr(&self, id: PortId) -> u32 {
        let p = self.port(id);
        let protocol = match p.master {
            Some(b) => self.bridge(BridgeId(b)).settings.vlan_protocol,
            None => VlanProtocol::Dot1Q,
        };
        let base = p.settings.effective_envhdr(protocol, has_tagged(p));
        // Two-tag maps send frames with two tags.
        let base = match (p.settings.envhdr_len, &p.tag2) {
            (None, Some(_)) => base.max(8),
            _ => base,
        };
        match (p.settings.envhdr_len, &p.uppers) {
            (None, Some(_)) => base + 4 * self.tags_above(id),
            _ => base,
        }
    }

    pub fn recompile_port(&mut self, id: PortId) {
        let p = self.port(id);
        let protocol = match p.master {
            Some(b) => self.bridge(BridgeId(b)).settings.vlan_protocol,
            None => VlanProtocol::Dot1Q,
        };
        let tpid = p.settings.tpid.unwrap_or(protocol.tpid()).0;
        let envhdr = self.envhdr(id);
        let max_frame = 14 + p.settings.mtu + envhdr;
        let running = p.settings.up && p.link_up;
        let was_running = p.running;
        let master = p.master;
        let (pcp_inner, pcp_untagged, pcp_table) =
            compile_pcp(p.settings.pcp_mode, p.settings.default_pcp);
        if (p.tpid, p.max_frame, p.running) != (tpid, max_frame, running)
            || (p.pcp_inner, p.pcp_untagged, p.pcp_table) != (pcp_inner, pcp_untagged, pcp_table)
        {
            let p = self.port_mut(id);
            p.tpid = tpid;
            p.max_frame = max_frame;
            p.running = running;
            p.pcp_inner = pcp_inner;
            p.pcp_untagged = pcp_untagged;
            p.pcp_table = pcp_table;
        }
        if was_running && !running {
            if let Some(b) = master {
                self.bridge(BridgeId(b))
                    .fdb
                    .remove_where(|s| s.port == id.0 && s.ages());
            }
        }
    }

    /// Recompiles bridge `b` whole: every port and every flood list (after a change of the
    /// bridge's settings).
    pub fn recompile_bridge(&mut self, b: BridgeId) {
        for p in self.bridge(b).ports.clone() {
            self.recompile_port(PortId(p));
        }
        self.recompile_flood(b, 0..=4095);
    }

    /// Rebuilds the flood lists of `vids` in bridge `b` (VID 0: every port), keeping lists
    /// that come out the same: a VID's members that forward in it (spanning tree). O(ports of
    /// the bridge) per VID.
    pub fn recompile_flood(&mut self, b: BridgeId, vids: impl IntoIterator<Item = u16>) {
        let mut changed: Vec<(u16, Arc<[u16]>)> = Vec::new();
        let mut list = Vec::new();
        {
            let br = self.bridge(b);
            for vid in vids {
                list.clear();
                list.extend(br.ports.iter().copied().filter(|&p| {
                    let p = self.port(PortId(p));
                    (vid == 0 || p.member.contains(vid))
                        && p.stp.as_ref().is_none_or(|s| s.fwd.contains(vid))
                }));
                let cur = &br.flood[vid as usize & 0x0fff];
                if cur[..] != list[..] {
                    changed.push((vid, Arc::from(&list[..])));
                }
            }
        }
        if !changed.is_empty() {
            let br = self.bridge_mut(b);
            for (vid, l) in changed {
                br.flood[vid as usize & 0x0fff] = l;
            }
        }
    }
}

pub(crate) fn compile_pcp(mode: PcpMode, default_pcp: u8) -> (bool, u16, [u16; 16]) {
    let untagged = u16::from(default_pcp) << 13;
    let mut table = [0u16; 16];
    for (i, t) in table.iter_mut().enumerate() {
        let (pcp, dei) = ((i >> 1) as u16, (i & 1) as u16);
        *t = match mode {
            PcpMode::Map(m) => u16::from(m[pcp as usize]) << 13 | dei << 12,
            _ => pcp << 13 | dei << 12,
        };
    }
    match mode {
        PcpMode::Keep => (false, untagged, table),
        PcpMode::Fixed(n) => (false, u16::from(n) << 13, table),
        PcpMode::Copy | PcpMode::Map(_) => (true, untagged, table),
    }
}

pub(crate) fn has_tagged(p: &PortRecord) -> bool {
    p.member.iter().any(|v| !p.untagged.contains(v))
}
