//! Links: bridges and ports (add, set, attach, delete), the link state the I/O layer reports,
//! stacked devices (VLAN devices, macvlan endpoints, host ports) and a port's own address as a
//! local FDB entry. Each operation validates, changes the records through
//! [`Records`](crate::plan::compile::Records) and recompiles what it touched.
use super::*;

impl Switch {
    // ----- links -----

    /// `link add NAME type bridge …`
    pub fn add_bridge(
        &mut self,
        name: &str,
        settings: BridgeSettings,
    ) -> Result<BridgeId, ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        check_bridge_settings(&settings)?;
        let idx = match self.recs.bridges.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.recs.bridges.push(None);
                self.recs.bridges.len() - 1
            }
        };
        let fdb = Arc::new(Fdb::new(settings.fdb_max_entries as usize));
        let empty: Arc<[u16]> = Arc::from(Vec::new());
        self.recs.plan = None;
        self.recs.bridges[idx] = Some(Arc::new(Bridge {
            name: name.to_string(),
            settings,
            fdb,
            ports: Vec::new(),
            flood: (0..4096).map(|_| empty.clone()).collect(),
            vlan_counters: VlanCounterSet::new(self.workers + 1),
            host: None,
        }));
        self.names
            .insert(name.to_string(), Link::Bridge(idx as u16));
        Ok(BridgeId(idx as u16))
    }

    /// `link set dev BR type bridge …`: replaces the settings, with Linux's side effects
    /// (a new `default_pvid` moves ports that still use the old default).
    pub fn set_bridge(
        &mut self,
        id: BridgeId,
        settings: BridgeSettings,
    ) -> Result<(), ConfigError> {
        check_bridge_settings(&settings)?;
        let old = self.bridge(id).settings.clone();
        if old.default_pvid != settings.default_pvid {
            self.change_default_pvid(id, old.default_pvid, settings.default_pvid);
        }
        let victims = self
            .bridge(id)
            .fdb
            .set_max_entries(settings.fdb_max_entries as usize);
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
        let inner_before = old.vlan_filtering && old.learn_inner_vid;
        if inner_before && !(settings.vlan_filtering && settings.learn_inner_vid) {
            // Entries learned per inner VID go with the rule that made them.
            let fdb = &self.bridge(id).fdb;
            fdb.remove_where(|s| key_fid(s.key) >= FIRST_INNER_FID);
            fdb.reclaim_inner();
        }
        let stp_turned = old.stp != settings.stp;
        self.bridge_mut(id).settings = settings;
        if stp_turned {
            // On: every port starts Discarding everywhere; off: no state at all.
            for p in self.bridge(id).ports.clone() {
                self.port_mut(PortId(p)).stp = None;
                self.stp_start(PortId(p), id);
            }
        }
        self.recs.recompile_bridge(id);
        Ok(())
    }

    pub(crate) fn change_default_pvid(&mut self, id: BridgeId, old: u16, new: u16) {
        let ports = self.bridge(id).ports.clone();
        for p in ports {
            let port = self.port_mut(PortId(p));
            let old_is_default = old != 0 && port.pvid == old && port.untagged.contains(old);
            if old != 0 && !old_is_default {
                continue;
            }
            if new != 0 && port.member.contains(new) {
                continue;
            }
            if old != 0 {
                port.member.remove(old);
                port.untagged.remove(old);
                port.pvid = 0;
            }
            if new != 0 {
                port.member.insert(new);
                port.untagged.insert(new);
                port.pvid = new;
            }
            if old != 0 {
                self.flush_port_vlans(PortId(p), old, old);
            }
        }
    }

    /// `link add NAME type KIND`: a port, not yet attached to a bridge.
    pub fn add_port(
        &mut self,
        name: &str,
        kind: &str,
        settings: PortSettings,
    ) -> Result<PortId, ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        check_port_settings(&settings)?;
        let id = self.new_port(name, kind, settings, Role::Device, 0)?;
        let idx = id.0 as usize;
        self.names.insert(name.to_string(), Link::Port(idx as u16));
        self.recs.recompile_port(PortId(idx as u16));
        Ok(PortId(idx as u16))
    }

    /// `link add … index N`: the next port created takes id `index` (as ip-link(8)'s `index`
    /// asks for an ifindex), so a saved configuration restores every port under its id. Fails
    /// if the id is taken or out of range; the reservation is used by the next port created.
    pub fn reserve_port_index(&mut self, index: u16) -> Result<(), ConfigError> {
        let i = usize::from(index);
        if i >= MAX_PORTS {
            return Err(ConfigError::BadPortIndex {
                index,
                max: MAX_PORTS - 1,
            });
        }
        if let Some(Some(p)) = self.recs.ports.get(i) {
            return Err(ConfigError::PortIndexBusy {
                index,
                dev: p.name.clone(),
            });
        }
        self.next_index = Some(index);
        Ok(())
    }

    /// A new port record in the first free slot, or the one [`Switch::reserve_port_index`]
    /// reserved (not named in `names`, not compiled).
    pub(crate) fn new_port(
        &mut self,
        name: &str,
        kind: &str,
        settings: PortSettings,
        role: Role,
        mac: u64,
    ) -> Result<PortId, ConfigError> {
        let idx = match self.next_index.take() {
            Some(i) => {
                let i = usize::from(i);
                if self.recs.ports.len() <= i {
                    self.recs.ports.resize_with(i + 1, || None);
                }
                i
            }
            None => match self.recs.ports.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    if self.recs.ports.len() >= MAX_PORTS {
                        return Err(ConfigError::TooManyPorts(MAX_PORTS));
                    }
                    self.recs.ports.push(None);
                    self.recs.ports.len() - 1
                }
            },
        };
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        self.recs.plan = None;
        self.recs.ports[idx] = Some(Arc::new(PortRecord {
            name: name.to_string(),
            kind: kind.to_string(),
            master: None,
            settings,
            member: VlanSet::default(),
            untagged: VlanSet::default(),
            pvid: 0,
            tpid: 0x8100,
            max_frame: 0,
            link_up: true,
            running: true,
            generation,
            counters: PortCounterSet::new(self.workers + 1),
            role,
            mac,
            if_mac: 0,
            uppers: None,
            vlan_mode: None,
            tunnel: false,
            cvlans: None,
            pcp_inner: false,
            pcp_untagged: 0,
            pcp_table: [0; 16],
            pvlan: None,
            vid_in: None,
            vid_out: None,
            vlan_limits: None,
            cvid_in: None,
            tag2: None,
            stp: None,
            tx_member: VlanSet::default(),
            sends: false,
            plain: false,
        }));
        Ok(PortId(idx as u16))
    }

    /// `link set dev NAME …` on a port. Turning `mab` off removes the port's `locked`
    /// entries, as Linux's `br_setport` flushes them (`BR_FDB_LOCKED`).
    pub fn set_port(&mut self, id: PortId, settings: PortSettings) -> Result<(), ConfigError> {
        check_port_settings(&settings)?;
        let mab_off = self.port(id).settings.mab && !settings.mab;
        self.port_mut(id).settings = settings;
        self.recs.recompile_port(id);
        if mab_off {
            if let Some(b) = self.port(id).master {
                self.bridge(BridgeId(b))
                    .fdb
                    .remove_where(|s| s.port == id.0 && s.flags & F_LOCKED != 0);
            }
        }
        Ok(())
    }

    /// The I/O layer reports the port's link (carrier) going down or coming back. A port that
    /// stops running loses its dynamic FDB entries, as a Linux bridge port does on carrier loss.
    pub fn set_link_state(&mut self, id: PortId, up: bool) {
        self.port_mut(id).link_up = up;
        self.recs.recompile_port(id);
    }

    /// Admin up and link up.
    pub fn port_running(&self, id: PortId) -> bool {
        self.port(id).running
    }

    pub fn port_link_up(&self, id: PortId) -> bool {
        self.port(id).link_up
    }

    /// `link set dev NAME master BR` (or `nomaster` with `None`).
    pub fn set_master(&mut self, id: PortId, master: Option<BridgeId>) -> Result<(), ConfigError> {
        let current = self.port(id).master;
        if current == master.map(|b| b.0) {
            return Ok(());
        }
        if let Role::Host { .. } = self.port(id).role {
            return Err(ConfigError::HostPortMaster(self.port(id).name.clone()));
        }
        if master.is_some() && self.has_macvlans(id) {
            return Err(ConfigError::MacvlanLowerBusy(self.port(id).name.clone()));
        }
        if let Some(b) = master {
            if self.stacked_on_host_of(id, b) {
                return Err(ConfigError::StackedOnOwnBridge {
                    dev: self.port(id).name.clone(),
                    bridge: self.bridge(b).name.clone(),
                });
            }
        }
        if let Some(b) = current {
            self.detach(id, BridgeId(b));
        }
        if let Some(b) = master {
            self.set_master_unchecked(id, b);
        }
        Ok(())
    }

    /// Attaches port `id` (in no bridge) to bridge `b` with the bridge's default PVID.
    pub(crate) fn set_master_unchecked(&mut self, id: PortId, b: BridgeId) {
        self.bridge(b).fdb.open_port(id.0);
        let pvid = self.bridge(b).settings.default_pvid;
        let port = self.port_mut(id);
        port.master = Some(b.0);
        port.member = VlanSet::default();
        port.untagged = VlanSet::default();
        port.pvid = 0;
        if pvid != 0 {
            port.member.insert(pvid);
            port.untagged.insert(pvid);
            port.pvid = pvid;
        }
        self.bridge_mut(b).ports.push(id.0);
        self.stp_start(id, b);
        self.recs.recompile_port(id);
        let vids: Vec<u16> = std::iter::once(0)
            .chain(self.port(id).member.iter())
            .collect();
        self.recs.recompile_flood(b, vids);
        self.sync_local_fdb(id);
    }

    pub(crate) fn detach(&mut self, id: PortId, b: BridgeId) {
        let vids: Vec<u16> = std::iter::once(0)
            .chain(self.port(id).member.iter())
            .collect();
        self.bridge_mut(b).ports.retain(|&p| p != id.0);
        self.bridge(b).fdb.close_port(id.0);
        let port = self.port_mut(id);
        port.master = None;
        port.member = VlanSet::default();
        port.untagged = VlanSet::default();
        port.pvid = 0;
        port.vlan_mode = None;
        port.tunnel = false;
        port.cvlans = None;
        port.pvlan = None;
        port.vlan_limits = None;
        port.stp = None;
        self.recs.recompile_flood(b, vids);
        self.recs.recompile_port(id);
    }

    /// `link del dev NAME`. Deleting a bridge detaches its ports and deletes its host port;
    /// deleting a port deletes the devices stacked on it (as unregistering `eth0` deletes
    /// `eth0.100`). Returns the names of the ports deleted, the stacked ones first.
    pub fn del_link(&mut self, name: &str) -> Result<Vec<String>, ConfigError> {
        let mut gone = Vec::new();
        match self.link(name)? {
            Link::Port(p) => {
                if let Role::Host { .. } = self.port(PortId(p)).role {
                    return Err(ConfigError::NotAPort(name.to_string()));
                }
                self.del_port(PortId(p), &mut gone);
            }
            Link::Bridge(b) => {
                if let Some(h) = self.bridge(BridgeId(b)).host {
                    self.del_port(PortId(h), &mut gone);
                }
                for p in self.bridge(BridgeId(b)).ports.clone() {
                    self.detach(PortId(p), BridgeId(b));
                }
                self.recs.plan = None;
                self.recs.bridges[b as usize] = None;
                self.names.remove(name);
            }
        }
        Ok(gone)
    }

    /// Deletes port `id` and, first, every device stacked on it.
    pub(crate) fn del_port(&mut self, id: PortId, gone: &mut Vec<String>) {
        for up in self.stacked_on(id) {
            self.del_port(up, gone);
        }
        let port = self.port(id);
        let (name, role) = (port.name.clone(), port.role);
        if let Some(b) = port.master {
            self.detach(id, BridgeId(b));
        }
        self.recs.plan = None;
        self.recs.ports[id.0 as usize] = None;
        match role {
            Role::Host { bridge } => {
                if let Some(Some(b)) = self.recs.bridges.get_mut(bridge as usize) {
                    Arc::make_mut(b).host = None;
                }
            }
            _ => {
                self.names.remove(&name);
            }
        }
        if let Some(lower) = role.lower() {
            self.recs.recompile_uppers(PortId(lower));
        }
        gone.push(name);
        self.mirror_port_gone(id);
    }

    // ----- stacked devices -----

    /// The ports stacked directly on port `id` (VLAN devices, macvlan endpoints), in id order.
    pub fn stacked_on(&self, id: PortId) -> Vec<PortId> {
        self.recs.stacked_on(id)
    }

    /// Whether any device is stacked on port `id` (compiled: no scan).
    pub fn has_stacked(&self, id: PortId) -> bool {
        self.port(id).uppers.is_some()
    }

    pub(crate) fn has_macvlans(&self, id: PortId) -> bool {
        self.recs
            .ports
            .iter()
            .flatten()
            .any(|p| matches!(p.role, Role::Macvlan { lower, .. } if lower == id.0))
    }

    /// Whether port `id` is a device stacked (at any depth) on bridge `b`'s host port: as a
    /// port of `b` it would be a loop (Linux: an upper device of its own master, `EBUSY`).
    pub(crate) fn stacked_on_host_of(&self, id: PortId, b: BridgeId) -> bool {
        let mut cur = self.port(id).role;
        for _ in 0..=MAX_STACK_DEPTH {
            match cur.lower() {
                Some(l) => cur = self.port(PortId(l)).role,
                None => break,
            }
            if cur == (Role::Host { bridge: b.0 }) {
                return true;
            }
        }
        false
    }

    pub fn port_role(&self, id: PortId) -> Role {
        self.port(id).role
    }

    /// The host-side MAC address of a stacked device or host port.
    pub fn port_mac(&self, id: PortId) -> Option<MacAddr> {
        let m = self.port(id).mac;
        (m != 0).then(|| MacAddr::from_u64(m))
    }

    /// The host port of bridge `b`, if it has one.
    pub fn host_port(&self, b: BridgeId) -> Option<PortId> {
        self.bridge(b).host.map(PortId)
    }

    /// Checks what every stacked device needs: a name, a lower port that can take it, a MAC.
    pub(crate) fn check_stacked(
        &self,
        name: &str,
        lower: PortId,
        mac: MacAddr,
    ) -> Result<(), ConfigError> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(ConfigError::DeviceExists(name.to_string()));
        }
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadDeviceMac(mac));
        }
        if self.recs.stack_depth(lower) + 1 > MAX_STACK_DEPTH {
            return Err(ConfigError::StackTooDeep {
                dev: self.port(lower).name.clone(),
                max: MAX_STACK_DEPTH,
            });
        }
        if let Some(Role::Macvlan {
            mode: MacvlanMode::Passthru,
            ..
        }) = self.stacked_on(lower).first().map(|&u| self.port(u).role)
        {
            return Err(ConfigError::PassthruBusy(self.port(lower).name.clone()));
        }
        Ok(())
    }

    /// `link add link LOWER name NAME type vlan [protocol P] id VID`: a VLAN sub-interface of
    /// port `lower` (any role: a device, a host port, another VLAN device) with the tag
    /// `tpid`/`vid`, whose host side has address `mac`.
    pub fn add_vlan_device(
        &mut self,
        name: &str,
        lower: PortId,
        tpid: Tpid,
        vid: u32,
        mac: MacAddr,
    ) -> Result<PortId, ConfigError> {
        let vid = check_vid(vid)?;
        check_tpid(tpid)?;
        self.check_stacked(name, lower, mac)?;
        let key = (tpid.0 as u32) << 16 | vid as u32;
        if let Some(&other) = self
            .port(lower)
            .uppers
            .as_ref()
            .and_then(|u| u.vlans.get(&key))
        {
            return Err(ConfigError::VlanDeviceExists {
                lower: self.port(lower).name.clone(),
                tpid: tpid.0,
                vid,
                dev: self.port(PortId(other)).name.clone(),
            });
        }
        let id = self.add_port(name, "vlan", PortSettings::default())?;
        self.set_role(
            id,
            Role::Vlan {
                lower: lower.0,
                tpid: tpid.0,
                vid,
            },
            mac,
        );
        Ok(id)
    }

    /// `link add link LOWER name NAME type macvlan mode MODE`: a macvlan endpoint on port
    /// `lower` with address `mac`. Refused on a bridge port and next to a passthru endpoint
    /// (as Linux does), for a passthru endpoint next to any other, and for an address another
    /// endpoint of `lower` has.
    pub fn add_macvlan(
        &mut self,
        name: &str,
        lower: PortId,
        mode: MacvlanMode,
        mac: MacAddr,
    ) -> Result<PortId, ConfigError> {
        self.check_stacked(name, lower, mac)?;
        if self.port(lower).master.is_some() {
            return Err(ConfigError::MacvlanLowerBusy(self.port(lower).name.clone()));
        }
        let siblings = self.stacked_on(lower);
        let key = mac.to_u64();
        for &u in &siblings {
            let p = self.port(u);
            if matches!(p.role, Role::Macvlan { .. }) {
                if mode == MacvlanMode::Passthru {
                    return Err(ConfigError::PassthruBusy(self.port(lower).name.clone()));
                }
                if p.mac == key {
                    return Err(ConfigError::MacvlanAddressInUse {
                        mac,
                        dev: p.name.clone(),
                    });
                }
            }
        }
        let id = self.add_port(name, "macvlan", PortSettings::default())?;
        self.set_role(
            id,
            Role::Macvlan {
                lower: lower.0,
                mode,
            },
            mac,
        );
        Ok(id)
    }

    /// `link set dev BR up`: gives bridge `b` its host port (the bridge's own interface, whose
    /// host side has address `mac`), joined with the bridge's default PVID, and installs `mac`
    /// as a permanent (local) FDB entry in each of its VLANs, as Linux does for `br0`. Returns
    /// the existing host port if there is one.
    pub fn add_host_port(&mut self, b: BridgeId, mac: MacAddr) -> Result<PortId, ConfigError> {
        if let Some(h) = self.bridge(b).host {
            return Ok(PortId(h));
        }
        if mac.is_multicast() || mac.is_zero() {
            return Err(ConfigError::BadDeviceMac(mac));
        }
        let name = self.bridge(b).name.clone();
        let settings = PortSettings::default();
        let id = self.new_port(
            &name,
            "host",
            settings,
            Role::Host { bridge: b.0 },
            mac.to_u64(),
        )?;
        self.bridge_mut(b).host = Some(id.0);
        self.recs.recompile_port(id);
        self.set_master_unchecked(id, b);
        self.sync_host_fdb(id);
        Ok(id)
    }

    pub(crate) fn set_role(&mut self, id: PortId, role: Role, mac: MacAddr) {
        let p = self.port_mut(id);
        p.role = role;
        p.mac = mac.to_u64();
        if let Some(l) = role.lower() {
            self.recs.recompile_uppers(PortId(l));
        }
    }

    /// (`mac`) or a device's interface address (`if_mac`); 0: none.
    pub(crate) fn local_mac(p: &PortRecord) -> u64 {
        match p.role {
            Role::Host { .. } => p.mac,
            Role::Device => p.if_mac,
            Role::Vlan { .. } | Role::Macvlan { .. } => 0,
        }
    }

    /// The I/O layer tells the switch device port `id`'s own interface address (AF_PACKET,
    /// AF_XDP: the device's; a TAP's interface is the far end of the wire), or none (`None`).
    /// In a bridge the address is a local (permanent) FDB entry in VLAN 0 and each VLAN of
    /// the port, as Linux adds one for every port (`br_fdb_add_local`): it replaces a learned
    /// entry of that address elsewhere, frames to it go up to the host port (or count as
    /// `local`), and it is not a learned entry. A changed address moves the entries. Ports
    /// of other roles keep their own addresses; this changes nothing for them.
    pub fn set_port_address(&mut self, id: PortId, mac: Option<MacAddr>) {
        let new = mac
            .filter(|m| !m.is_multicast() && !m.is_zero())
            .map_or(0, |m| m.to_u64());
        let p = self.port(id);
        if p.role != Role::Device || p.if_mac == new {
            return;
        }
        let old = p.if_mac;
        if let (Some(b), true) = (p.master, old != 0) {
            self.bridge(BridgeId(b)).fdb.remove_where(|s| {
                s.port == id.0
                    && s.key & 0xffff_ffff_ffff == old
                    && s.flags & (F_PERMANENT | F_USER) == F_PERMANENT
            });
        }
        self.port_mut(id).if_mac = new;
        self.sync_local_fdb(id);
    }

    /// The address the I/O layer reported for device port `id` ([`Switch::set_port_address`]).
    pub fn port_address(&self, id: PortId) -> Option<MacAddr> {
        let m = self.port(id).if_mac;
        (m != 0).then(|| MacAddr::from_u64(m))
    }

    /// A device port's interface address as a local entry in VLAN 0 and each of its VLANs
    /// (those it has already are kept).
    pub(crate) fn sync_local_fdb(&mut self, id: PortId) {
        let p = self.port(id);
        let (Some(b), Role::Device, mac) = (p.master, p.role, p.if_mac) else {
            return;
        };
        if mac == 0 {
            return;
        }
        let b = BridgeId(b);
        let Ok(vids) = self.fdb_vids(id, b, None) else {
            return;
        };
        let now = self.now_ns;
        let mut victims = Vec::new();
        let fdb = &self.bridge(b).fdb;
        for vid in vids {
            let key = mac | (u64::from(vid) << 48);
            if fdb
                .get(key)
                .is_some_and(|s| s.port == id.0 && s.kind() == FdbKind::Permanent)
            {
                continue;
            }
            victims.extend(fdb.add_local(key, id.0, now).1);
        }
        for v in victims {
            if let Some(c) = self.control_counters(v) {
                c.fdb_evictions.add(1);
            }
        }
    }

    /// The host port's address as a permanent entry in each of its VLANs (and VLAN 0).
    pub(crate) fn sync_host_fdb(&mut self, id: PortId) {
        let Some(mac) = self.port_mac(id) else {
            return;
        };
        if self.port(id).master.is_none() {
            return;
        }
        // Cannot fail for lack of room: permanent entries evict learned ones, and a full table
        // of user entries only refuses (the host port still learns its address then).
        let _ = self.fdb_add(mac, id, None, FdbKind::Permanent, false, true);
    }

    // ----- VLANs -----

    pub(crate) fn attached(&self, id: PortId) -> Result<BridgeId, ConfigError> {
        self.port(id)
            .master
            .map(BridgeId)
            .ok_or_else(|| ConfigError::NoMaster(self.port(id).name.clone()))
    }
}
