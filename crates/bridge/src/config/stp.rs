//! Spanning-tree port states: per port, per VID, the [`StpState`] the protocol engine
//! (`crates/stp`, wired in later) decides. The state applies while the port's bridge has
//! `stp` on; a port joining such a bridge (or in it when `stp` goes on) starts Discarding in
//! every VID, a port leaving it (or `stp` going off) has no state. A bridge's host port has
//! none either (it is the bridge's own interface, not a spanning-tree port). A change
//! recompiles the flood lists of the VIDs it touches (and VID 0, the VLAN-unaware list).

use super::*;
use crate::plan::StpSets;

impl Switch {
    /// Sets port `id`'s spanning-tree state in every VID of `vids` (1-4094). Refused when the
    /// port is in no bridge, is a host port, or its bridge has `stp` off.
    pub fn set_stp_state(
        &mut self,
        id: PortId,
        vids: &VlanSet,
        state: StpState,
    ) -> Result<(), ConfigError> {
        let b = self.attached(id)?;
        if let Role::Host { .. } = self.port(id).role {
            return Err(ConfigError::StpHostPort(self.port(id).name.clone()));
        }
        if !self.bridge(b).settings.stp {
            return Err(ConfigError::StpOff(self.bridge(b).name.clone()));
        }
        if vids.contains(0) {
            return Err(ConfigError::VidOutOfRange(0));
        }
        if vids.contains(4095) {
            return Err(ConfigError::ReservedVid(4095));
        }
        let cur = self.port(id).stp.as_deref().cloned();
        let mut sets = cur.clone().unwrap_or_else(StpSets::discarding);
        for v in vids.iter() {
            sets.set(v, state);
        }
        sets.fix_vid0();
        if cur.as_ref() == Some(&sets) {
            return Ok(());
        }
        self.port_mut(id).stp = Some(Arc::new(sets));
        let touched: Vec<u16> = std::iter::once(0).chain(vids.iter()).collect();
        self.recs.recompile_flood(b, touched);
        Ok(())
    }

    /// [`Switch::set_stp_state`] over VID ranges (`start..=end` each), validated whole first.
    pub fn set_stp_state_ranges(
        &mut self,
        id: PortId,
        ranges: &[(u32, u32)],
        state: StpState,
    ) -> Result<(), ConfigError> {
        let mut vids = VlanSet::default();
        for &(start, end) in ranges {
            let (s, e) = (check_vid(start)?, check_vid(end)?);
            if e < s {
                return Err(ConfigError::BadRange { start: s, end: e });
            }
            for v in s..=e {
                vids.insert(v);
            }
        }
        self.set_stp_state(id, &vids, state)
    }

    /// Port `id`'s spanning-tree state in `vid` as it applies to frames: Forwarding when its
    /// bridge has `stp` off (or it is in no bridge, or is a host port). VID 0: the state on a
    /// VLAN-unaware bridge (the port's least state over VIDs 1-4094).
    pub fn stp_state(&self, id: PortId, vid: u16) -> StpState {
        match &self.port(id).stp {
            Some(s) => s.state(vid),
            None => StpState::Forwarding,
        }
    }

    /// Gives port `id`, just attached to bridge `b`, its starting state: Discarding in every
    /// VID when `b` has `stp` on and the port is not the host port; else none.
    pub(crate) fn stp_start(&mut self, id: PortId, b: BridgeId) {
        let on = self.bridge(b).settings.stp && !matches!(self.port(id).role, Role::Host { .. });
        if on {
            self.port_mut(id).stp = Some(Arc::new(StpSets::discarding()));
        }
    }
}

impl Switch {
    /// The spanning tree's flush (802.1D-2004 17.19.7 fdbFlush, 802.1Q 13.x per MSTI): removes
    /// the dynamic (learned) entries of port `id` in the VIDs of `vids` (`None`: every VID,
    /// and VID 0 of a VLAN-unaware bridge). Static and permanent entries stay. Returns the
    /// number removed; 0 for a port in no bridge.
    pub fn stp_flush(&mut self, id: PortId, vids: Option<&VlanSet>) -> usize {
        let Some(b) = self.port(id).master else {
            return 0;
        };
        let fdb = &self.bridge(BridgeId(b)).fdb;
        let n = fdb.remove_where(|s| {
            s.kind() == FdbKind::Dynamic
                && s.port == id.0
                && vids.is_none_or(|v| v.contains(fdb.key_vlan(s.key).0))
        });
        fdb.reclaim_inner();
        n
    }
}
