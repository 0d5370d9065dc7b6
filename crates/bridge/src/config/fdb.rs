//! FDB operations of the control plane: `fdb add/replace/del/flush`, inner-VID entries, the
//! `fdb show` listing and lookups. The table itself and its memory ordering are `crate::fdb`'s.
use super::*;

impl Switch {
    /// `fdb add|replace MAC dev NAME [vlan V] [static|dynamic|permanent] [sticky]`. Without a
    /// VLAN on a VLAN-filtering bridge the entry is added for VLAN 0 and for every VLAN of the
    /// port, as Linux does.
    pub fn fdb_add(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let b = self.attached(id)?;
        let vids = self.fdb_vids(id, b, vlan)?;
        self.fdb_add_fids(mac, id, b, vids, kind, sticky, replace, false)
    }

    /// `fdb add|replace MAC dev NAME [vlan V [inner_vlan C]] extern_learn`: an entry a control
    /// plane learned (Linux `NTF_EXT_LEARNED`): dynamic, added by the user, never aged, kept
    /// on port down and `vlan del`, not a learned entry (limits, eviction); learning the
    /// address on another port takes it over. As Linux, it replaces an existing entry of the
    /// key whatever the command (`add` included), except the bridge's own (permanent) ones.
    pub fn fdb_add_extern(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
        inner: Option<u32>,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let (b, vids) = match (vlan, inner) {
            (Some(v), Some(c)) => {
                let (b, _, _, fid) = self.inner_fid_of(id, v, c)?;
                (b, vec![fid])
            }
            _ => {
                let b = self.attached(id)?;
                (b, self.fdb_vids(id, b, vlan)?)
            }
        };
        let fdb = &self.bridge(b).fdb;
        if let Some(&fid) = vids.iter().find(|&&v| {
            fdb.get(fdb_key(mac, v))
                .is_some_and(|s| s.kind() == FdbKind::Permanent)
        }) {
            let (vid, _) = fdb.key_vlan(fdb_key(mac, fid));
            return Err(ConfigError::FdbEntryExists {
                mac,
                vid,
                dev: self.port(id).name.clone(),
            });
        }
        self.fdb_add_fids(mac, id, b, vids, FdbKind::Dynamic, false, true, true)
    }

    /// `fdb add|replace MAC dev NAME vlan V inner_vlan C …`: an entry for the pair (V, C) on a
    /// bridge with `learn_inner_vid on` (`docs/semantics.md` §K7), used before the VLAN's own.
    #[allow(clippy::too_many_arguments)]
    pub fn fdb_add_inner(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: u32,
        inner: u32,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
    ) -> Result<(), ConfigError> {
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadFdbMac(mac));
        }
        let (b, vid, inner, fid) = self.inner_fid_of(id, vlan, inner)?;
        if !replace && self.bridge(b).fdb.get(fdb_key(mac, fid)).is_some() {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::InnerFdbEntryExists {
                mac,
                vid,
                inner,
                dev,
            });
        }
        self.fdb_add_fids(mac, id, b, vec![fid], kind, sticky, replace, false)
    }

    /// `fdb del MAC dev NAME vlan V inner_vlan C`.
    pub fn fdb_del_inner(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: u32,
        inner: u32,
    ) -> Result<(), ConfigError> {
        let (b, vid, inner, fid) = self.inner_fid_of(id, vlan, inner)?;
        let fdb = &self.bridge(b).fdb;
        let key = fdb_key(mac, fid);
        if fdb.get(key).is_none_or(|s| s.port != id.0) {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::NoSuchInnerFdbEntry {
                mac,
                vid,
                inner,
                dev,
            });
        }
        fdb.remove(key);
        Ok(())
    }

    /// The bridge, VID, inner VID and FID of `vlan V inner_vlan C` on port `id`: the bridge
    /// learns per inner VID, the port carries V, and the pair has (or gets) a FID.
    pub(crate) fn inner_fid_of(
        &self,
        id: PortId,
        vlan: u32,
        inner: u32,
    ) -> Result<(BridgeId, u16, u16, u16), ConfigError> {
        let b = self.attached(id)?;
        let s = &self.bridge(b).settings;
        if !(s.learn_inner_vid && s.vlan_filtering) {
            return Err(ConfigError::InnerVlanOff(self.bridge(b).name.clone()));
        }
        let vid = check_vid(vlan)?;
        let inner = check_vid(inner)?;
        if !self.port(id).member.contains(vid) {
            let dev = self.port(id).name.clone();
            return Err(ConfigError::VlanNotConfigured { dev, vid });
        }
        let fid = self.bridge(b).fdb.inner_fids().fid(vid, inner);
        if fid == vid {
            return Err(ConfigError::InnerFidsFull(self.bridge(b).name.clone()));
        }
        Ok((b, vid, inner, fid))
    }

    /// Adds (or with `replace` replaces) the user entry of `mac` on port `id` in each of
    /// `vids` (FIDs) of bridge `b`, all or none; `extern_learn`: marked so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fdb_add_fids(
        &mut self,
        mac: MacAddr,
        id: PortId,
        b: BridgeId,
        vids: Vec<u16>,
        kind: FdbKind,
        sticky: bool,
        replace: bool,
        extern_learn: bool,
    ) -> Result<(), ConfigError> {
        let flags = match kind {
            FdbKind::Dynamic => 0,
            FdbKind::Static => F_STATIC,
            FdbKind::Permanent => F_PERMANENT,
        } | if sticky { F_STICKY } else { 0 }
            | if extern_learn { F_EXTERN } else { 0 };
        let now = self.now_ns;
        let name = self.port(id).name.clone();
        let fdb = &self.bridge(b).fdb;
        if !replace {
            for &vid in &vids {
                if fdb.get(fdb_key(mac, vid)).is_some() {
                    return Err(ConfigError::FdbEntryExists {
                        mac,
                        vid,
                        dev: name,
                    });
                }
            }
        }
        // Existing keys are replaced first (they need no room, and once user entries they
        // cannot be evicted); new keys then take room, evicting learned entries fairly. Room is
        // checked for all of them before anything changes: nothing is half-applied.
        let (existing, fresh): (Vec<u16>, Vec<u16>) = vids
            .iter()
            .partition(|&&v| fdb.get(fdb_key(mac, v)).is_some());
        let replaced_learned = existing
            .iter()
            .filter(|&&v| fdb.get(fdb_key(mac, v)).is_some_and(|s| s.is_learned()))
            .count();
        let evictable = fdb.learned() - replaced_learned;
        let needed = (fdb.len() + fresh.len()).saturating_sub(fdb.max_entries());
        if needed > evictable {
            return Err(ConfigError::FdbFull(fdb.max_entries()));
        }
        let mut victims = Vec::new();
        for &vid in existing.iter().chain(&fresh) {
            match fdb.add_user(fdb_key(mac, vid), id.0, flags, now, replace) {
                Ok(Some(victim)) => victims.push(victim),
                Ok(None) => {}
                Err(AddError::Exists(_)) => unreachable!("checked above"),
                // Not expected after the room check; an error, never a panic, if it happens.
                Err(AddError::Full) => return Err(ConfigError::FdbFull(fdb.max_entries())),
            }
        }
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
        Ok(())
    }

    pub(crate) fn fdb_vids(
        &self,
        id: PortId,
        b: BridgeId,
        vlan: Option<u32>,
    ) -> Result<Vec<u16>, ConfigError> {
        Ok(match vlan {
            // `vlan 0`: the VLAN-0 entry alone (a qbridge extension; Linux refuses vlan 0 and
            // has no way to name that entry on a VLAN-filtering bridge).
            Some(0) => vec![0],
            Some(v) => {
                let vid = check_vid(v)?;
                // Linux refuses an entry in a VLAN the port does not carry ("unconfigured vlan"),
                // with or without vlan_filtering: ports keep their VLANs either way.
                if !self.port(id).member.contains(vid) {
                    let dev = self.port(id).name.clone();
                    return Err(ConfigError::VlanNotConfigured { dev, vid });
                }
                vec![vid]
            }
            None if self.bridge(b).settings.vlan_filtering => std::iter::once(0)
                .chain(self.port(id).member.iter())
                .collect(),
            None => vec![0],
        })
    }

    /// `fdb del MAC dev NAME [vlan V]`.
    pub fn fdb_del(
        &mut self,
        mac: MacAddr,
        id: PortId,
        vlan: Option<u32>,
    ) -> Result<(), ConfigError> {
        let b = self.attached(id)?;
        let vids = self.fdb_vids(id, b, vlan)?;
        let name = self.port(id).name.clone();
        let fdb = &self.bridge(b).fdb;
        let present: Vec<u16> = vids
            .iter()
            .copied()
            .filter(|&v| fdb.get(fdb_key(mac, v)).is_some_and(|s| s.port == id.0))
            .collect();
        if present.is_empty() || (vlan.is_some() && present.len() != vids.len()) {
            return Err(ConfigError::NoSuchFdbEntry {
                mac,
                vid: vids[0],
                dev: name,
            });
        }
        for vid in present {
            fdb.remove(fdb_key(mac, vid));
        }
        Ok(())
    }

    /// `fdb flush dev NAME [vlan V] [dynamic|static]`: NAME is a bridge (whole table) or a
    /// port. Permanent entries stay. Returns the number of entries removed.
    pub fn fdb_flush(
        &mut self,
        dev: &str,
        vlan: Option<u32>,
        which: FdbFlushKind,
    ) -> Result<usize, ConfigError> {
        self.fdb_flush_matching(dev, vlan, which.into())
    }

    /// `fdb flush dev DEV [vlan V]` with bridge-fdb(8)'s kind and flag words: removes the
    /// entries `which` selects (permanent ones only when it selects them).
    pub fn fdb_flush_matching(
        &mut self,
        dev: &str,
        vlan: Option<u32>,
        which: FdbFlushMatch,
    ) -> Result<usize, ConfigError> {
        let vid = vlan.map(check_vid).transpose()?;
        let (b, port) = match self.link(dev)? {
            Link::Bridge(b) => (BridgeId(b), None),
            Link::Port(p) => (self.attached(PortId(p))?, Some(p)),
        };
        let fdb = &self.bridge(b).fdb;
        let n = fdb.remove_where(|s| {
            which.selects(s)
                && port.is_none_or(|p| s.port == p)
                && vid.is_none_or(|v| fdb.key_vlan(s.key).0 == v)
        });
        // (S-VID, C-VID) pairs left without entries give their FIDs back.
        fdb.reclaim_inner();
        Ok(n)
    }

    /// FDB entries matching `filter`, sorted by bridge, port (in creation order, as
    /// [`Switch::port_ids`]), VLAN and MAC.
    pub fn fdb_entries(&self, filter: &FdbFilter) -> Result<Vec<FdbEntryView>, ConfigError> {
        let only_bridge = filter
            .bridge
            .as_deref()
            .map(|n| self.bridge_id(n))
            .transpose()?;
        let only_port = filter.dev.as_deref().map(|n| self.port_id(n)).transpose()?;
        // Sort keys carry the ids, so ordering needs no name lookups.
        let mut keyed = Vec::new();
        for (bid, bname) in self.bridge_ids() {
            if only_bridge.is_some_and(|b| b != bid) {
                continue;
            }
            let b = self.bridge(bid);
            for s in b.fdb.entries() {
                if only_port.is_some_and(|p| p.0 != s.port) {
                    continue;
                }
                let (fid, inner) = b.fdb.key_vlan(s.key);
                if filter.vlan.is_some_and(|v| v != fid) {
                    continue;
                }
                // An entry of a port that is gone cannot be shown (nor is one left: detaching
                // flushes a port's entries and closes it to learning); never a panic.
                let Some(port) = self
                    .recs
                    .ports
                    .get(s.port as usize)
                    .and_then(|p| p.as_ref())
                else {
                    continue;
                };
                let view = b.fdb.view(
                    &s,
                    port.name.clone(),
                    bname.to_string(),
                    self.now_ns.saturating_sub(s.seen_ns),
                );
                let created = port.generation;
                keyed.push(((bid.0, created, fid, inner, key_mac(s.key)), view));
            }
        }
        keyed.sort_unstable_by_key(|k| k.0);
        let out = keyed.into_iter().map(|(_, v)| v).collect();
        Ok(out)
    }

    /// Looks up `mac` in VLAN `vid` (0 on a VLAN-unaware bridge) of bridge `b`.
    pub fn fdb_lookup(&self, b: BridgeId, mac: MacAddr, vid: u16) -> Option<(PortId, FdbKind)> {
        self.bridge(b)
            .fdb
            .get(fdb_key(mac, vid))
            .map(|s| (PortId(s.port), s.kind()))
    }
}
