//! VLAN configuration of ports: membership (`vlan add/del`), port VLAN modes, private-VLAN
//! roles, VLAN maps (1:1, selective Q-in-Q, 2:1 and 2:2), per-VLAN learning limits, and the
//! `vlan show` view.
use super::*;

impl Switch {
    /// `vlan add vid V[-V2] dev NAME [pvid] [untagged]`. Re-adding a VID replaces its flags, as
    /// in Linux: without `untagged` it becomes tagged; without `pvid` it stops being the PVID.
    pub fn vlan_add(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        pvid: bool,
        untagged: bool,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        if pvid && start != end {
            return Err(ConfigError::PvidRange);
        }
        let b = self.attached(id)?;
        let port = self.port_mut(id);
        for vid in start..=end {
            port.member.insert(vid);
            if untagged {
                port.untagged.insert(vid);
            } else {
                port.untagged.remove(vid);
            }
            if pvid {
                port.pvid = vid;
            } else if port.pvid == vid {
                port.pvid = 0;
            }
        }
        self.recs.recompile_port(id);
        self.recs.recompile_flood(b, start..=end);
        if let Role::Host { .. } = self.port(id).role {
            self.sync_host_fdb(id);
        }
        self.sync_local_fdb(id);
        Ok(())
    }

    /// `vlan del vid V[-V2] dev NAME`: also flushes the port's dynamic entries in those VLANs
    /// (on a host port, its own address's permanent entries in them too).
    pub fn vlan_del(&mut self, id: PortId, start: u32, end: u32) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        let b = self.attached(id)?;
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let port = self.port_mut(id);
        for vid in start..=end {
            port.member.remove(vid);
            port.untagged.remove(vid);
            if port.pvid == vid {
                port.pvid = 0;
            }
        }
        set_pvlan_codes(port, start, end, 0);
        set_limit_codes(port, start, end, 0);
        self.flush_port_vlans(id, start, end);
        let (mac, host) = (
            Self::local_mac(self.port(id)),
            matches!(self.port(id).role, Role::Host { .. }),
        );
        if mac != 0 {
            // Its own address's local entries in those VLANs (Linux
            // `br_fdb_find_delete_local`).
            let fdb = &self.bridge(b).fdb;
            fdb.remove_where(|s| {
                s.port == id.0
                    && s.key & 0xffff_ffff_ffff == mac
                    && (host || s.flags & F_PERMANENT != 0)
                    && (start..=end).contains(&fdb.key_vlan(s.key).0)
            });
        }
        self.recs.recompile_port(id);
        self.recs.recompile_flood(b, start..=end);
        Ok(())
    }

    /// `link set dev P vlan_mode MODE [tag V] [trunks LIST] [cvlans LIST]`: replaces the
    /// port's membership, untagged set and PVID with what the mode compiles into (see
    /// [`VlanMode`]), and makes it a tunnel port or not. VLANs the port leaves lose its
    /// dynamic entries, as with `vlan del`. The port must be in a bridge.
    pub fn set_vlan_mode(&mut self, id: PortId, mode: VlanMode) -> Result<(), ConfigError> {
        mode.check().map_err(ConfigError::BadVlanMode)?;
        let b = self.attached(id)?;
        let c = mode.compile();
        let old = self.port(id).member.clone();
        let port = self.port_mut(id);
        port.member = c.member;
        port.untagged = c.untagged;
        port.pvid = c.pvid;
        port.tunnel = c.tunnel.is_some();
        port.cvlans = c.tunnel.flatten().map(Box::new);
        port.vlan_mode = Some(mode);
        let new = self.port(id).member.clone();
        let gone: Vec<u16> = old.iter().filter(|&v| !new.contains(v)).collect();
        for &v in &gone {
            set_pvlan_codes(self.port_mut(id), v, v, 0);
            set_limit_codes(self.port_mut(id), v, v, 0);
        }
        let changed: BTreeSet<u16> = old.iter().chain(new.iter()).collect();
        if !gone.is_empty() {
            let mac = Self::local_mac(self.port(id));
            let host = matches!(self.port(id).role, Role::Host { .. });
            let gone_set: BTreeSet<u16> = gone.iter().copied().collect();
            let fdb = &self.bridge(b).fdb;
            fdb.remove_where(|s| {
                s.port == id.0
                    && gone_set.contains(&fdb.key_vlan(s.key).0)
                    && (s.ages()
                        || (mac != 0
                            && s.key & 0xffff_ffff_ffff == mac
                            && (host || s.flags & F_PERMANENT != 0)))
            });
        }
        self.recs.recompile_port(id);
        self.recs.recompile_flood(b, changed);
        if let Role::Host { .. } = self.port(id).role {
            self.sync_host_fdb(id);
        }
        self.sync_local_fdb(id);
        Ok(())
    }

    /// `vlan set dev P vid V[-V2] pvlan ROLE|none`: P's private-VLAN role in those VLANs,
    /// which P must carry.
    pub fn set_pvlan(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        role: Option<PvlanRole>,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        self.attached(id)?;
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let code = role.map_or(0, PvlanRole::code);
        set_pvlan_codes(self.port_mut(id), start, end, code);
        Ok(())
    }

    /// `vlan map add dev P vid A translate B`: frames tagged A on P's wire are in VLAN B inside
    /// the bridge, and frames of VLAN B leave P tagged A. One map per wire VID and per VID
    /// inside: a map that would reuse either is refused naming the one in the way. Maps stay
    /// when the port leaves its bridge (they are the port's, like its settings).
    pub fn vlan_map_add(&mut self, id: PortId, wire: u16, inside: u16) -> Result<(), ConfigError> {
        let wire = check_vid(wire.into())?;
        let inside = check_vid(inside.into())?;
        let p = self.port(id);
        let get = |t: &Option<Arc<[u16]>>, v: u16| t.as_ref().map_or(0, |t| t[usize::from(v)]);
        let taken_in = get(&p.vid_in, wire);
        if taken_in != 0 {
            return Err(ConfigError::VlanMapConflict(format!(
                "vid {wire} on {} is translated to {taken_in} already (vlan map del dev {} vid {wire} first)",
                p.name, p.name
            )));
        }
        let taken_out = get(&p.vid_out, inside);
        if taken_out != 0 {
            return Err(ConfigError::VlanMapConflict(format!(
                "{inside} on {} is already the translation of vid {taken_out}",
                p.name
            )));
        }
        if let Some(m) = p.tag2.as_ref().and_then(|t| t.by_inside(inside, 0)) {
            return Err(ConfigError::VlanMapConflict(format!(
                "{inside} on {} is already the translation of {}",
                p.name,
                tag_map_words(m)
            )));
        }
        let port = self.port_mut(id);
        set_map(&mut port.vid_in, wire, inside);
        set_map(&mut port.vid_out, inside, wire);
        Ok(())
    }

    /// `vlan map del dev P vid A`: removes the map of wire VID A.
    pub fn vlan_map_del(&mut self, id: PortId, wire: u16) -> Result<(), ConfigError> {
        let p = self.port(id);
        let inside = p
            .vid_in
            .as_ref()
            .map_or(0, |t| t[usize::from(wire & 0x0fff)]);
        if inside == 0 {
            return Err(ConfigError::NoVlanMap {
                dev: p.name.clone(),
                vid: wire,
            });
        }
        let port = self.port_mut(id);
        set_map(&mut port.vid_in, wire, 0);
        set_map(&mut port.vid_out, inside, 0);
        Ok(())
    }

    /// `vlan map add dev P cvid C[-C2] svid S` (selective Q-in-Q): a frame entering P whose
    /// outer tag is a C-tag (0x8100) with VID in C..C2 is in S-VLAN S, its C-tag kept; a frame
    /// of S leaving P whose inner C-tag has such a VID loses the S-tag. A C-VID mapped already
    /// is refused naming its S-VLAN.
    pub fn cvid_map_add(
        &mut self,
        id: PortId,
        start: u16,
        end: u16,
        svid: u16,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start.into(), end.into())?;
        let svid = check_vid(svid.into())?;
        let p = self.port(id);
        if let Some(t) = &p.cvid_in {
            if let Some(c) = (start..=end).find(|&c| t[usize::from(c)] != 0) {
                return Err(ConfigError::VlanMapConflict(format!(
                    "cvid {c} on {} is mapped to svid {} already",
                    p.name,
                    t[usize::from(c)]
                )));
            }
        }
        if let Some(m) = p
            .tag2
            .as_ref()
            .and_then(|t| (start..=end).find_map(|c| t.by_inside(svid, c)))
        {
            return Err(ConfigError::VlanMapConflict(format!(
                "svid {svid} cvid {} on {} is already the translation of {}",
                m.inner.unwrap_or(0),
                p.name,
                tag_map_words(m)
            )));
        }
        let port = self.port_mut(id);
        for c in start..=end {
            set_map(&mut port.cvid_in, c, svid);
        }
        Ok(())
    }

    /// `vlan map del dev P cvid C[-C2]`: every C-VID must be mapped.
    pub fn cvid_map_del(&mut self, id: PortId, start: u16, end: u16) -> Result<(), ConfigError> {
        let (start, end) = check_range(start.into(), end.into())?;
        let p = self.port(id);
        let mapped = |c: u16| p.cvid_in.as_ref().is_some_and(|t| t[usize::from(c)] != 0);
        if let Some(c) = (start..=end).find(|&c| !mapped(c)) {
            return Err(ConfigError::NoVlanMap {
                dev: p.name.clone(),
                vid: c,
            });
        }
        let port = self.port_mut(id);
        for c in start..=end {
            set_map(&mut port.cvid_in, c, 0);
        }
        Ok(())
    }

    /// `vlan map add dev P svid S cvid C translate V` (2:1, `inner` `None`) or `… translate S2
    /// C2` (2:2): an S-tag S with the C-tag C right behind it on P's wire is VLAN V (one tag
    /// inside), or S-VLAN S2 with C-tag C2, both ways. Refused naming the map in the way: a
    /// second map of (S, C); a second way out for VLAN V (a 2:1 map or a 1:1 `translate V`);
    /// a second way out for (S2, C2) (a 2:2 map or selective Q-in-Q `cvid C2 svid S2`).
    pub fn tag_map_add(&mut self, id: PortId, map: TagMap) -> Result<(), ConfigError> {
        let map = TagMap {
            svid: check_vid(map.svid.into())?,
            cvid: check_vid(map.cvid.into())?,
            vid: check_vid(map.vid.into())?,
            inner: map.inner.map(|c| check_vid(c.into())).transpose()?,
        };
        let p = self.port(id);
        let conflict = |what: String| Err(ConfigError::VlanMapConflict(what));
        let maps = p.tag2.as_ref();
        if let Some(m) = maps.and_then(|t| t.by_wire(map.svid, map.cvid)) {
            return conflict(format!(
                "svid {} cvid {} on {} is mapped already ({})",
                map.svid,
                map.cvid,
                p.name,
                tag_map_words(m)
            ));
        }
        match map.inner {
            None => {
                if let Some(m) = maps.and_then(|t| t.by_inside(map.vid, 0)) {
                    return conflict(format!(
                        "{} on {} is already the translation of {}",
                        map.vid,
                        p.name,
                        tag_map_words(m)
                    ));
                }
                let wire = p.vid_out.as_ref().map_or(0, |t| t[usize::from(map.vid)]);
                if wire != 0 {
                    return conflict(format!(
                        "{} on {} is already the translation of vid {wire}",
                        map.vid, p.name
                    ));
                }
            }
            Some(c2) => {
                if let Some(m) = maps.and_then(|t| t.by_inside(map.vid, c2)) {
                    return conflict(format!(
                        "svid {} cvid {c2} on {} is already the translation of {}",
                        map.vid,
                        p.name,
                        tag_map_words(m)
                    ));
                }
                if p.cvid_in
                    .as_ref()
                    .is_some_and(|t| t[usize::from(c2)] == map.vid)
                {
                    return conflict(format!(
                        "cvid {c2} svid {} on {} is selective Q-in-Q already (vlan map cvid {c2} svid {})",
                        map.vid, p.name, map.vid
                    ));
                }
            }
        }
        let mut all = maps.map_or_else(Vec::new, |t| t.maps.clone());
        all.push(map);
        self.port_mut(id).tag2 = Some(Arc::new(TagMaps::from_maps(all)));
        self.recs.recompile_port(id);
        Ok(())
    }

    /// `vlan map del dev P svid S cvid C`: removes the 2:1 or 2:2 map of (S, C).
    pub fn tag_map_del(&mut self, id: PortId, svid: u16, cvid: u16) -> Result<(), ConfigError> {
        let p = self.port(id);
        let Some(maps) = p.tag2.as_ref().filter(|t| t.by_wire(svid, cvid).is_some()) else {
            return Err(ConfigError::NoTagMap {
                dev: p.name.clone(),
                svid,
                cvid,
            });
        };
        let rest: Vec<TagMap> = maps
            .maps
            .iter()
            .filter(|m| (m.svid, m.cvid) != (svid, cvid))
            .copied()
            .collect();
        self.port_mut(id).tag2 = (!rest.is_empty()).then(|| Arc::new(TagMaps::from_maps(rest)));
        self.recs.recompile_port(id);
        Ok(())
    }

    /// Port `id`'s 2:1 and 2:2 maps, by (S-VID, C-VID).
    pub fn tag_maps(&self, id: PortId) -> Vec<TagMap> {
        self.port(id)
            .tag2
            .as_ref()
            .map_or_else(Vec::new, |t| t.maps.clone())
    }

    /// Port `id`'s selective Q-in-Q maps as runs: (C-VID first, last, S-VID).
    pub fn cvid_maps(&self, id: PortId) -> Vec<(u16, u16, u16)> {
        let Some(t) = self.port(id).cvid_in.as_ref() else {
            return Vec::new();
        };
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for c in 1..4095u16 {
            let s = t[usize::from(c)];
            if s == 0 {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 + 1 == c && last.2 == s => last.1 = c,
                _ => out.push((c, c, s)),
            }
        }
        out
    }

    /// Port `id`'s 1:1 maps: (wire VID, VID inside), by wire VID.
    pub fn vlan_maps(&self, id: PortId) -> Vec<(u16, u16)> {
        let Some(t) = self.port(id).vid_in.as_ref() else {
            return Vec::new();
        };
        (1..4095u16)
            .filter(|&v| t[usize::from(v)] != 0)
            .map(|v| (v, t[usize::from(v)]))
            .collect()
    }

    /// `vlan set vid V[-V2] dev P fdb_max_learned N [violation V]`: at most N learned entries
    /// of P in each of those VLANs (0: no limit); a new source beyond it is dropped as the
    /// violation mode says. The VLANs must be configured on P.
    pub fn set_vlan_limit(
        &mut self,
        id: PortId,
        start: u32,
        end: u32,
        limit: u32,
        violation: Violation,
    ) -> Result<(), ConfigError> {
        let (start, end) = check_range(start, end)?;
        self.attached(id)?;
        if limit > 0x00ff_ffff {
            return Err(ConfigError::BadVlanLimit(limit));
        }
        let port = self.port(id);
        if let Some(vid) = (start..=end).find(|&v| !port.member.contains(v)) {
            return Err(ConfigError::VlanNotConfigured {
                dev: port.name.clone(),
                vid,
            });
        }
        let code = if limit == 0 {
            0
        } else {
            (violation as u32) << 24 | limit
        };
        set_limit_codes(self.port_mut(id), start, end, code);
        Ok(())
    }

    /// Port `id`'s learning limit in `vid`, if it has one.
    pub fn port_vlan_limit(&self, id: PortId, vid: u16) -> Option<(u32, Violation)> {
        limit_of(self.port(id), vid)
    }

    /// Port `id`'s private-VLAN role in `vid`.
    pub fn port_pvlan(&self, id: PortId, vid: u16) -> Option<PvlanRole> {
        let t = self.port(id).pvlan.as_ref()?;
        PvlanRole::from_code(t[usize::from(vid & 0x0fff)])
    }

    /// Removes the port's dynamic entries in VIDs `start..=end` (one walk of the table).
    pub(crate) fn flush_port_vlans(&mut self, id: PortId, start: u16, end: u16) {
        if let Some(b) = self.port(id).master {
            let fdb = &self.bridge(BridgeId(b)).fdb;
            fdb.remove_where(|s| {
                s.port == id.0 && (start..=end).contains(&fdb.key_vlan(s.key).0) && s.ages()
            });
        }
    }

    /// VLAN configuration of every attached port (or of `dev` only), for `vlan show`.
    pub fn vlans(&self, dev: Option<&str>) -> Result<Vec<VlanView>, ConfigError> {
        let only = match dev {
            // A bridge's own VLANs are its host port's.
            Some(d) => match self.link(d)? {
                Link::Bridge(b) => match self.bridge(BridgeId(b)).host {
                    Some(h) => Some(PortId(h)),
                    None => return Err(ConfigError::NotAPort(d.to_string())),
                },
                Link::Port(p) => Some(PortId(p)),
            },
            None => None,
        };
        let mut out = Vec::new();
        for (id, name) in self.port_ids() {
            if only.is_some_and(|o| o != id) {
                continue;
            }
            let p = self.port(id);
            if p.master.is_none() {
                continue;
            }
            let vlans = p
                .member
                .iter()
                .map(|vid| {
                    let mut flags = Vec::new();
                    if p.pvid == vid {
                        flags.push("PVID");
                    }
                    if p.untagged.contains(vid) {
                        flags.push("Egress Untagged");
                    }
                    VlanEntryView {
                        vlan: vid,
                        flags,
                        pvlan: p
                            .pvlan
                            .as_ref()
                            .and_then(|t| PvlanRole::from_code(t[usize::from(vid)]))
                            .map(|r| r.to_string()),
                        fdb_max_learned: limit_of(p, vid).map(|(n, _)| n),
                        violation: limit_of(p, vid).map(|(_, v)| v),
                    }
                })
                .collect();
            out.push(VlanView {
                ifname: name.to_string(),
                vlans,
            });
        }
        Ok(out)
    }

    /// The `vlan_mode` port `id` was given, if any (cleared when it leaves its bridge).
    pub fn port_vlan_mode(&self, id: PortId) -> Option<&VlanMode> {
        self.port(id).vlan_mode.as_ref()
    }

    /// Membership of `vid` on port `id`: `None` if not a member, else `(is_pvid, untagged)`.
    pub fn vlan_membership(&self, id: PortId, vid: u16) -> Option<(bool, bool)> {
        let p = self.port(id);
        p.member
            .contains(vid)
            .then(|| (p.pvid == vid, p.untagged.contains(vid)))
    }

    // ----- FDB -----
}
