//! Bonds in the fast path (decision 74): the program on each member's interface, whose entry
//! names the bond's port (its frames enter as the bond's) and whether the member collects, and
//! the bond's transmit table in `qb_bonds`, from which the program picks the member of a flow
//! to the bond by the pipeline's own hash. The engine (`engine/bond.rs`) hands these over
//! whenever it publishes a table to the bond's queues and before every plan.

use super::control::FastRt;
use qbridge_fastpath::{Bond, Port};
use qbridge_io::sys;
use std::collections::{HashMap, HashSet};

/// [`crate::shared::PortShared::fast_ifindex`] of a bond the program sends to: no interface
/// of its own, the program picks a member's per frame (`qbridge_fastpath::ACT_BOND`).
pub(crate) const BOND_EGRESS: u32 = u32::MAX;

/// A member interface the program is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    dev: String,
    ifindex: u32,
    port: Port,
}

/// The bonds the program serves, by port id.
#[derive(Debug, Default)]
pub(crate) struct Bonds {
    bonds: HashMap<u16, (Vec<Member>, Option<Bond>)>,
    /// Each bond's slot (below `qbridge_fastpath::MAX_BONDS`): where its members' counters
    /// are in the program.
    slots: HashMap<u16, u32>,
}

impl Bonds {
    /// Bond `id`'s slot, the lowest free one when it has none (`None`: every slot is taken).
    fn slot_for(&mut self, id: u16) -> Option<u32> {
        if let Some(&s) = self.slots.get(&id) {
            return Some(s);
        }
        let s = (0..qbridge_fastpath::MAX_BONDS).find(|s| !self.slots.values().any(|v| v == s))?;
        self.slots.insert(id, s);
        Some(s)
    }
}

impl Bonds {
    /// The bonds' port ids (`show fast-path` lists them with the ports).
    pub(crate) fn ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.bonds.keys().copied()
    }

    /// Whether `dev` is a member interface the program is attached to.
    pub(crate) fn serves(&self, dev: &str) -> bool {
        self.bonds
            .values()
            .any(|(m, _)| m.iter().any(|m| m.dev == dev))
    }
}

impl FastRt {
    /// Bond `id`'s members (interface, entry) and transmit table as the program must have
    /// them: attaches to new members, detaches from those gone, writes what changed (nothing
    /// when nothing did: the engine calls this often).
    pub(crate) fn set_bond(&mut self, id: u16, members: Vec<(String, Port)>, mut table: Bond) {
        // Beyond the slots the members are still served (their frames enter as the bond's),
        // counted in the last slot; its table is not written (`qb_bonds` has as many entries
        // as slots), so frames to the bond go up.
        let assigned = self.bonds.slot_for(id);
        if assigned.is_none() && !self.bonds.bonds.contains_key(&id) {
            tracing::warn!(
                "fast path: more than {} bonds; frames to the bond of port {id} go through the \
                 pipeline",
                qbridge_fastpath::MAX_BONDS
            );
        }
        let slot = assigned.unwrap_or(qbridge_fastpath::MAX_BONDS - 1);
        table.slot = slot;
        let members: Vec<(String, Port)> = members
            .into_iter()
            .map(|(dev, mut port)| {
                port.flags |= slot << (qbridge_fastpath::PORT_MEMBER_SHIFT + 4);
                (dev, port)
            })
            .collect();
        let (mut have, written) = self.bonds.bonds.remove(&id).unwrap_or_default();
        have.retain(|m| {
            let keep = members.iter().any(|(dev, _)| *dev == m.dev);
            if !keep {
                self.detach_member(m);
            }
            keep
        });
        // A member that joins a traced bond is traced too.
        let traced = have
            .iter()
            .any(|m| m.port.flags & qbridge_fastpath::PORT_TRACE != 0);
        for (dev, mut port) in members {
            if traced {
                port.flags |= qbridge_fastpath::PORT_TRACE;
            }
            if let Some(m) = have.iter_mut().find(|m| m.dev == dev) {
                if m.port != port {
                    if let Err(e) = self.fp.set_port(m.ifindex, port) {
                        tracing::warn!("fast path: bond member {dev}: {e}");
                    }
                    m.port = port;
                }
                continue;
            }
            // An absent member: attached when the bond opens again with it.
            let Ok(ifindex) = sys::ifindex(&dev) else {
                continue;
            };
            if let Err(e) = self.fp.attach(&dev) {
                tracing::warn!("fast path: cannot attach to bond member {dev}: {e}");
                continue;
            }
            if let Err(e) = self.fp.set_port(ifindex, port) {
                tracing::warn!("fast path: bond member {dev}: {e}");
            }
            have.push(Member { dev, ifindex, port });
        }
        let written = if assigned.is_some() && written != Some(table) {
            match self.fp.set_bond(u32::from(id), &table) {
                Ok(()) => Some(table),
                Err(e) => {
                    tracing::warn!("fast path: bond of port {id}: {e}");
                    None
                }
            }
        } else {
            written
        };
        self.bonds.bonds.insert(id, (have, written));
    }

    /// `trace live`: the members of the bonds in `ports` (port ids) carry `PORT_TRACE`, so the
    /// program copies their hits (entering as the bond's) to the trace device; the others
    /// do not.
    pub(crate) fn set_traced_bonds(&mut self, ports: &[u16]) {
        for (id, (members, _)) in self.bonds.bonds.iter_mut() {
            let want = ports.contains(id);
            for m in members.iter_mut() {
                if want == (m.port.flags & qbridge_fastpath::PORT_TRACE != 0) {
                    continue;
                }
                m.port.flags ^= qbridge_fastpath::PORT_TRACE;
                if let Err(e) = self.fp.set_port(m.ifindex, m.port) {
                    tracing::warn!("fast path: bond member {}: {e}", m.dev);
                }
            }
        }
    }

    /// Forgets the bonds not in `keep` (deleted, closed, or no longer served).
    pub(crate) fn keep_bonds(&mut self, keep: &HashSet<u16>) {
        let gone: Vec<u16> = self
            .bonds
            .bonds
            .keys()
            .filter(|id| !keep.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.bonds.slots.remove(&id);
            if let Some((members, _)) = self.bonds.bonds.remove(&id) {
                for m in &members {
                    self.detach_member(m);
                }
            }
            if let Err(e) = self.fp.remove_bond(u32::from(id)) {
                tracing::debug!("fast path: bond of port {id}: {e}");
            }
        }
    }

    /// Member `pos` of bond `id`'s frames through the program.
    pub(crate) fn member_stats(&mut self, id: u16, pos: usize) -> qbridge_fastpath::MemberStats {
        let Some(&slot) = self.bonds.slots.get(&id) else {
            return Default::default();
        };
        self.fp.member_stats(slot, pos as u32).unwrap_or_default()
    }

    fn detach_member(&mut self, m: &Member) {
        // The interface is a port of its own now, or another bond's member (it left this
        // bond): that entry stands. (This bond's own members are out of `self.bonds` here.)
        if self.serves(&m.dev) {
            return;
        }
        let _ = self.fp.remove_port(m.ifindex);
        if let Err(e) = self.fp.detach(&m.dev) {
            tracing::debug!("fast path: detaching from {}: {e}", m.dev);
        }
    }
}
