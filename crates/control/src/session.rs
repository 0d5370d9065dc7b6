//! A [`Session`]: the switch plus what only the control plane knows (each port's backend), and
//! the execution of commands against it.
//!
//! Execution resolves names, merges the options given with the settings in force and calls the
//! [`Switch`]; it re-implements no semantics. A single command changes nothing when it fails:
//! names and values are all checked before the first switch operation, and the operations the
//! switch can still refuse come first. A batch is applied to a clone and committed only when
//! every line succeeded.

use crate::command::*;
use crate::error::ControlError;
use crate::parse::parse_line;
use crate::render;
use qbridge_bridge::{BridgeSettings, FdbFilter, PortId, PortSettings, Switch, VlanMode};
use qbridge_wire::MacAddr;
use std::collections::BTreeMap;

/// What a running daemon knows about a port's backend, shown by `link show`. Offline sessions
/// have none.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendStatus {
    /// The backend is open (false: waiting for the interface to appear or come back).
    pub open: bool,
    /// The interface's device MTU as last seen or set (AF_PACKET: raised for envelope frames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_mtu: Option<u32>,
    /// Whether the socket receives every frame (`PACKET_MR_PROMISC`) or only the unicast
    /// addresses the bridge needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// The kernel's interface name when it differs from what was configured (TAP `tap%d`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// Why the backend is not open, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// AF_PACKET: whether the socket sends straight to the driver (`PACKET_QDISC_BYPASS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qdisc_bypass: Option<bool>,
    /// AF_PACKET: receive ring slots per socket (one socket per worker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring_frames: Option<u32>,
    /// AF_PACKET: the device's transmit offloads as last read (at open, then once a second).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offloads: Option<DeviceOffloadStatus>,
    /// TCP super-frames the daemon segmented in software for this port (the port or its device
    /// could not take them whole, or the kernel refused them). Not drops.
    pub tx_sw_gso: u64,
    /// Of `tx_sw_gso`: super-frames the kernel refused whole (`ENOBUFS` on a qdisc-bypass
    /// socket, the device would not segment them), segmented and resent at once. Not drops.
    pub tx_gso_refused: u64,
    /// Receive coalescing for this port (it takes super-frames): super-frames the daemon made
    /// of TCP segments of one flow, and the segments merged into them. Not drops.
    pub tx_gro_frames: u64,
    pub tx_gro_segments: u64,
    /// Frames received on this port by each datapath worker (index = worker), since the
    /// port was added: how the port's load spreads over the workers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rx_frames_by_worker: Vec<u64>,
}

/// A device's transmit offloads as the daemon last read them (`ethtool -k` names in the docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceOffloadStatus {
    /// `tx-tcp-segmentation`
    pub tso4: bool,
    /// `tx-tcp6-segmentation`
    pub tso6: bool,
    /// `tx-tcp-ecn-segmentation`
    pub tso_ecn: bool,
    /// `tx-scatter-gather`
    pub sg: bool,
    /// `tx-checksum-ipv4` or `tx-checksum-ip-generic`
    pub csum4: bool,
    /// `tx-checksum-ipv6` or `tx-checksum-ip-generic`
    pub csum6: bool,
    /// Tag depths whose super-frames the kernel refused lately (segmented in software until the
    /// direct path is tried again).
    pub refused_tag_depths: Vec<u8>,
}

/// The switch and the backend spec of each port.
#[derive(Debug, Clone, Default)]
pub struct Session {
    switch: Switch,
    specs: BTreeMap<String, PortSpec>,
    status: BTreeMap<String, BackendStatus>,
    /// `qbridge apply`: what exists already is not an error (see [`Session::apply_batch`]).
    may_exist: bool,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// A session whose switch counts for `workers` datapath workers (see
    /// [`Switch::with_workers`]).
    pub fn with_workers(workers: usize) -> Session {
        Session {
            switch: Switch::with_workers(workers),
            ..Session::default()
        }
    }

    pub fn switch(&self) -> &Switch {
        &self.switch
    }

    /// The switch, for the datapath (`process`, `age`). Configuration should go through
    /// [`Session::execute`] so that backend specs stay in step.
    pub fn switch_mut(&mut self) -> &mut Switch {
        &mut self.switch
    }

    /// Backend of port `name`.
    pub fn port_spec(&self, name: &str) -> Option<&PortSpec> {
        self.specs.get(name)
    }

    /// Records what the runtime knows about port `name`'s backend (for `link show`).
    pub fn set_backend_status(&mut self, name: &str, status: BackendStatus) {
        self.status.insert(name.to_owned(), status);
    }

    /// What the runtime recorded for port `name`, if it did.
    pub fn backend_status(&self, name: &str) -> Option<&BackendStatus> {
        self.status.get(name)
    }

    /// Every port with its id and backend, in creation order ([`Switch::port_ids`]).
    pub fn ports(&self) -> Vec<(PortId, &str, &PortSpec)> {
        self.switch
            .port_ids()
            .filter_map(|(id, name)| self.specs.get(name).map(|s| (id, name, s)))
            .collect()
    }

    /// Parses and executes one line (a comment or blank line does nothing).
    pub fn execute_line(&mut self, line: &str, out: OutputOptions) -> Result<String, ControlError> {
        match parse_line(line)? {
            Some(cmd) => self.execute(&cmd, out),
            None => Ok(String::new()),
        }
    }

    /// Applies a batch (one command per line, `#` comments, blank lines) all-or-nothing.
    /// Returns the output of the show commands in it, in order. On error the session is
    /// unchanged and the error carries the 1-based line number.
    pub fn execute_batch(
        &mut self,
        text: &str,
        out: OutputOptions,
    ) -> Result<String, ControlError> {
        let mut work = self.clone();
        let mut output = String::new();
        for (i, line) in text.lines().enumerate() {
            let r = work.execute_line(line, out);
            match r {
                Ok(s) => output.push_str(&s),
                Err(e) => {
                    return Err(ControlError::Line {
                        line: i + 1,
                        error: Box::new(e),
                    })
                }
            }
        }
        *self = work;
        Ok(output)
    }

    /// `qbridge apply FILE`: applies a batch all-or-nothing like [`Session::execute_batch`],
    /// but so that applying it again changes nothing and is not an error (Open vSwitch's
    /// `--may-exist` and `--if-exists`): `link add` of a device that exists with the same kind
    /// and backend does nothing (a bridge takes the options given), one that exists as
    /// something else is an error naming both; `link del`, `vlan del` and `fdb del` of what is
    /// not there do nothing; `fdb add` of an entry that exists replaces it; a bridge's host
    /// port that exists accepts its own `ifname`, `netns`, `address` and `index` again.
    pub fn apply_batch(&mut self, text: &str, out: OutputOptions) -> Result<String, ControlError> {
        self.may_exist = true;
        let r = self.execute_batch(text, out);
        self.may_exist = false;
        r
    }

    /// Executes one command; returns its output (empty for commands that change state).
    pub fn execute(&mut self, cmd: &Command, out: OutputOptions) -> Result<String, ControlError> {
        match cmd {
            Command::Link(c) => self.link(c, out),
            Command::Vlan(c) => self.vlan(c, out),
            Command::Fdb(c) => self.fdb(c, out),
            Command::ShowRunningConfig => Ok(self.running_config()),
            Command::Help(Some(o)) => Ok(crate::usage::object(*o)),
            Command::Help(None) => Ok(crate::usage::all()),
            Command::Mirror(c) => self.mirror(c, out),
        }
    }

    fn link(&mut self, cmd: &LinkCommand, out: OutputOptions) -> Result<String, ControlError> {
        let sw = &mut self.switch;
        match cmd {
            LinkCommand::AddBridge { name, opts } if self.may_exist && sw.exists(name) => {
                let id = match sw.bridge_id(name) {
                    Ok(id) => id,
                    Err(_) => return Err(self.exists_different(name, "a bridge")),
                };
                let settings = merge_bridge(sw.bridge_settings(id).clone(), opts);
                sw.set_bridge(id, settings)?;
            }
            LinkCommand::AddBridge { name, opts } => {
                let settings = merge_bridge(BridgeSettings::default(), opts);
                sw.add_bridge(name, settings)?;
            }
            LinkCommand::SetBridge { dev, opts } => {
                let id = sw.bridge_id(dev)?;
                let settings = merge_bridge(sw.bridge_settings(id).clone(), opts);
                sw.set_bridge(id, settings)?;
            }
            LinkCommand::AddPort {
                name,
                spec,
                index,
                peer_index,
            } => return self.add_port(name, spec, *index, *peer_index),
            LinkCommand::SetPort { dev, opts } if sw.is_bridge(dev) => {
                return self.set_host_port(dev, opts);
            }
            LinkCommand::SetPort { dev, opts } => {
                if opts.ifname.is_some()
                    || opts.netns.is_some()
                    || opts.address.is_some()
                    || opts.index.is_some()
                {
                    return Err(ControlError::HostOnlyOptions(
                        "ifname, netns, address and index",
                    ));
                }
                let id = sw.port_id(dev)?;
                let master = match &opts.master {
                    Some(MasterChange::Set(br)) => Some(Some(sw.bridge_id(br)?)),
                    Some(MasterChange::Unset) => Some(None),
                    None => None,
                };
                if let Some(mode) = vlan_mode_of(opts)? {
                    let settings = merge_port(sw.port_settings(id).clone(), opts);
                    if master.is_none() && settings == *sw.port_settings(id) {
                        // The mode alone: one operation, no copy (a copy costs every FDB
                        // entry).
                        sw.set_vlan_mode(id, mode)?;
                        return Ok(String::new());
                    }
                    // Master first (joining resets the VLANs), then the settings, then the
                    // mode; on a copy, so that a refusal changes nothing.
                    let mut probe = sw.clone();
                    if let Some(m) = master {
                        probe.set_master(id, m)?;
                    }
                    let settings = merge_port(probe.port_settings(id).clone(), opts);
                    probe.set_port(id, settings)?;
                    probe.set_vlan_mode(id, mode)?;
                    *sw = probe;
                    return Ok(String::new());
                }
                if !opts.only_master() {
                    let settings = merge_port(sw.port_settings(id).clone(), opts);
                    sw.set_port(id, settings)?;
                }
                if let Some(m) = master {
                    sw.set_master(id, m)?;
                }
            }
            LinkCommand::Del { dev } if self.may_exist && !sw.exists(dev) => {}
            LinkCommand::Del { dev } => {
                let peer = match self.specs.get(dev) {
                    Some(PortSpec::Patch { peer }) => Some(peer.clone()),
                    _ => None,
                };
                let mut gone = sw.del_link(dev)?;
                // A patch link goes as a whole, as a veth pair does.
                if let Some(peer) = peer {
                    if sw.exists(&peer) {
                        gone.extend(sw.del_link(&peer)?);
                    }
                }
                for name in gone {
                    self.specs.remove(&name);
                    self.status.remove(&name);
                }
            }
            LinkCommand::Show { dev } => {
                if let Some(d) = dev {
                    if !sw.exists(d) {
                        return Err(qbridge_bridge::ConfigError::NoSuchDevice(d.clone()).into());
                    }
                }
                return Ok(render::links(self, dev.as_deref(), out));
            }
        }
        Ok(String::new())
    }

    fn vlan(&mut self, cmd: &VlanCommand, out: OutputOptions) -> Result<String, ControlError> {
        let sw = &mut self.switch;
        match cmd {
            VlanCommand::Add {
                dev,
                vids,
                pvid,
                untagged,
                self_,
            } => {
                let id = vlan_target(sw, dev, *self_)?;
                sw.vlan_add(id, vids.start.into(), vids.end.into(), *pvid, *untagged)?;
            }
            VlanCommand::Del { dev, vids, self_ } => {
                let id = vlan_target(sw, dev, *self_)?;
                if self.may_exist {
                    // Only the VIDs the port carries, in runs.
                    let mut run: Option<(u16, u16)> = None;
                    let mut runs = Vec::new();
                    for vid in vids.start..=vids.end {
                        if sw.vlan_membership(id, vid).is_some() {
                            run = Some(run.map_or((vid, vid), |(a, _)| (a, vid)));
                        } else if let Some(r) = run.take() {
                            runs.push(r);
                        }
                    }
                    runs.extend(run);
                    for (a, b) in runs {
                        sw.vlan_del(id, a.into(), b.into())?;
                    }
                } else {
                    sw.vlan_del(id, vids.start.into(), vids.end.into())?;
                }
            }
            VlanCommand::Set {
                dev,
                vids,
                pvlan,
                limit,
                self_,
            } => {
                let id = vlan_target(sw, dev, *self_)?;
                let (a, z) = (vids.start.into(), vids.end.into());
                match (pvlan, limit) {
                    (Some(role), Some((n, v))) => {
                        // Both on a copy: a refusal of the second changes nothing.
                        let mut probe = sw.clone();
                        probe.set_pvlan(id, a, z, *role)?;
                        probe.set_vlan_limit(id, a, z, *n, *v)?;
                        *sw = probe;
                    }
                    // One operation: no copy (a copy costs every FDB entry).
                    (Some(role), None) => sw.set_pvlan(id, a, z, *role)?,
                    (None, Some((n, v))) => sw.set_vlan_limit(id, a, z, *n, *v)?,
                    (None, None) => {}
                }
            }
            VlanCommand::MapAdd { dev, wire, inside } => {
                let id = sw.port_id(dev)?;
                let same = sw.vlan_maps(id).contains(&(*wire, *inside));
                if !(self.may_exist && same) {
                    sw.vlan_map_add(id, *wire, *inside)?;
                }
            }
            VlanCommand::MapDel { dev, wire } => {
                let id = sw.port_id(dev)?;
                match sw.vlan_map_del(id, *wire) {
                    Err(qbridge_bridge::ConfigError::NoVlanMap { .. }) if self.may_exist => {}
                    r => r?,
                }
            }
            VlanCommand::CvidMapAdd { dev, cvids, svid } => {
                let id = sw.port_id(dev)?;
                let same = sw
                    .cvid_maps(id)
                    .iter()
                    .any(|&(a, z, s)| a <= cvids.start && cvids.end <= z && s == *svid);
                if !(self.may_exist && same) {
                    sw.cvid_map_add(id, cvids.start, cvids.end, *svid)?;
                }
            }
            VlanCommand::CvidMapDel { dev, cvids } => {
                let id = sw.port_id(dev)?;
                match sw.cvid_map_del(id, cvids.start, cvids.end) {
                    Err(qbridge_bridge::ConfigError::NoVlanMap { .. }) if self.may_exist => {}
                    r => r?,
                }
            }
            VlanCommand::TagMapAdd { dev, map } => {
                let id = sw.port_id(dev)?;
                let same = sw.tag_maps(id).contains(map);
                if !(self.may_exist && same) {
                    sw.tag_map_add(id, *map)?;
                }
            }
            VlanCommand::TagMapDel { dev, svid, cvid } => {
                let id = sw.port_id(dev)?;
                match sw.tag_map_del(id, *svid, *cvid) {
                    Err(qbridge_bridge::ConfigError::NoTagMap { .. }) if self.may_exist => {}
                    r => r?,
                }
            }
            VlanCommand::MapShow { dev } => return render::vlan_maps(sw, dev.as_deref(), out),
            VlanCommand::Show { dev, vid } => {
                return if out.stats {
                    render::vlan_stats(sw, dev.as_deref(), *vid, out)
                } else {
                    render::vlans(sw, dev.as_deref(), *vid, out)
                };
            }
        }
        Ok(String::new())
    }

    fn fdb(&mut self, cmd: &FdbCommand, out: OutputOptions) -> Result<String, ControlError> {
        let sw = &mut self.switch;
        match cmd {
            FdbCommand::Add {
                mac,
                dev,
                vlan,
                inner_vlan,
                kind,
                sticky,
                replace,
                extern_learn,
            } => {
                let id = port_or_host(sw, dev)?;
                let replace = *replace || self.may_exist;
                match (vlan, inner_vlan) {
                    // Linux ignores the kind and `sticky` with `extern_learn`, and replaces.
                    _ if *extern_learn => {
                        sw.fdb_add_extern(*mac, id, vlan.map(u32::from), inner_vlan.map(u32::from))?
                    }
                    (Some(v), Some(c)) => sw.fdb_add_inner(
                        *mac,
                        id,
                        (*v).into(),
                        (*c).into(),
                        *kind,
                        *sticky,
                        replace,
                    )?,
                    _ => sw.fdb_add(*mac, id, vlan.map(u32::from), *kind, *sticky, replace)?,
                }
            }
            FdbCommand::Del {
                mac,
                dev,
                vlan,
                inner_vlan,
            } => {
                let id = port_or_host(sw, dev)?;
                let r = match (vlan, inner_vlan) {
                    (Some(v), Some(c)) => sw.fdb_del_inner(*mac, id, (*v).into(), (*c).into()),
                    _ => sw.fdb_del(*mac, id, vlan.map(u32::from)),
                };
                match r {
                    Err(
                        qbridge_bridge::ConfigError::NoSuchFdbEntry { .. }
                        | qbridge_bridge::ConfigError::NoSuchInnerFdbEntry { .. },
                    ) if self.may_exist => {}
                    r => r?,
                }
            }
            FdbCommand::Show { br, dev, vlan } => {
                let filter = FdbFilter {
                    bridge: br.clone(),
                    dev: dev.clone(),
                    vlan: *vlan,
                };
                let entries = sw.fdb_entries(&filter)?;
                return Ok(render::fdb(&entries, out));
            }
            FdbCommand::Flush { dev, vlan, which } => {
                sw.fdb_flush_matching(dev, vlan.map(u32::from), *which)?;
            }
        }
        Ok(String::new())
    }

    /// The whole configuration as a batch file that recreates it on a fresh switch (see
    /// [`crate::running`]).
    pub fn running_config(&self) -> String {
        crate::running::running_config(self)
    }

    /// Per-port counters with drops by reason (every reason, zeros included), per-VLAN counters
    /// of each bridge, and the switch-level `unknown_port_drops`, as one JSON value.
    pub fn stats_json(&self) -> serde_json::Value {
        render::stats_json(self)
    }
}

impl Session {
    /// `link add NAME … type KIND …` of a port (any backend, a stacked device, a patch link).
    fn add_port(
        &mut self,
        name: &str,
        spec: &PortSpec,
        index: Option<u16>,
        peer_index: Option<u16>,
    ) -> Result<String, ControlError> {
        if self.may_exist && self.switch.exists(name) {
            return match self.specs.get(name) {
                Some(have) if same_spec(have, spec, self.port_address(name)) => Ok(String::new()),
                Some(have) => Err(self.exists_with_options(name, have, spec)),
                None => Err(self.exists_different(name, &describe_spec(spec))),
            };
        }
        self.check_interface(name, spec)?;
        if let PortSpec::Patch { peer } = spec {
            if peer == name {
                return Err(ControlError::PatchSelfPeer(name.to_string()));
            }
            if self.switch.exists(peer) {
                return Err(qbridge_bridge::ConfigError::DeviceExists(peer.clone()).into());
            }
        }
        // On a copy when two operations must succeed together: a patch link is both ends or
        // neither, and an index reservation must not outlive a refused command. One switch
        // operation checks everything before it changes anything, so a plain `link add` needs
        // no copy (a copy costs every FDB entry: milliseconds on a large table).
        let needs_copy = index.is_some() || matches!(spec, PortSpec::Patch { .. });
        let mut copy = needs_copy.then(|| self.switch.clone());
        let sw = match copy.as_mut() {
            Some(c) => c,
            None => &mut self.switch,
        };
        if let Some(i) = index {
            sw.reserve_port_index(i)?;
        }
        match spec {
            PortSpec::Vlan {
                link,
                protocol,
                id,
                address,
                ..
            } => {
                let lower = resolve_lower(sw, link)?;
                let mac = address.unwrap_or_else(|| random_mac(name));
                sw.add_vlan_device(name, lower, *protocol, (*id).into(), mac)?;
            }
            PortSpec::Macvlan {
                link,
                mode,
                address,
                ..
            } => {
                let lower = resolve_lower(sw, link)?;
                let mac = address.unwrap_or_else(|| random_mac(name));
                sw.add_macvlan(name, lower, *mode, mac)?;
            }
            PortSpec::Patch { peer } => {
                sw.add_port(name, spec.kind(), PortSettings::default())?;
                if let Some(i) = peer_index {
                    sw.reserve_port_index(i)?;
                }
                sw.add_port(peer, spec.kind(), PortSettings::default())?;
            }
            _ => {
                sw.add_port(name, spec.kind(), PortSettings::default())?;
            }
        }
        if let Some(c) = copy {
            self.switch = c;
        }
        if let PortSpec::Patch { peer } = spec {
            let back = PortSpec::Patch {
                peer: name.to_string(),
            };
            self.specs.insert(peer.clone(), back);
            self.status.remove(peer);
        }
        self.specs.insert(name.to_string(), spec.clone());
        self.status.remove(name);
        Ok(String::new())
    }

    /// The MAC address of port (or bridge host port) `name`, if it has one of its own.
    fn port_address(&self, name: &str) -> Option<MacAddr> {
        let sw = &self.switch;
        let id = resolve_lower(sw, name).ok()?;
        sw.port_mac(id)
    }

    fn exists_different(&self, name: &str, want: &str) -> ControlError {
        let have = match self.specs.get(name) {
            _ if self.switch.is_bridge(name) => "a bridge".to_string(),
            Some(spec) => describe_spec(spec),
            None => "another device".to_string(),
        };
        ControlError::ExistsDifferent {
            name: name.to_string(),
            have,
            want: want.to_string(),
        }
    }

    /// [`Session::exists_different`] for a port that exists with a spec: when the kind and
    /// device are the same, the options that differ (`an afpacket port on eth1 with
    /// qdisc_bypass on, not qdisc_bypass off`).
    fn exists_with_options(&self, name: &str, have: &PortSpec, want: &PortSpec) -> ControlError {
        let (have_desc, want_desc) = (describe_spec(have), describe_spec(want));
        if self.switch.is_bridge(name) || have_desc != want_desc {
            return self.exists_different(name, &want_desc);
        }
        let mac = self.port_address(name).map(|m| m.to_string());
        let (h, w) = (spec_options(have, mac), spec_options(want, None));
        let (mut hd, mut wd) = (Vec::new(), Vec::new());
        for ((k, hv), (_, wv)) in h.iter().zip(&w) {
            // An address not asked for matches any (`same_spec`).
            if hv != wv && !(*k == "address" && wv.is_none()) {
                let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(default)".into());
                hd.push(format!("{k} {}", show(hv)));
                wd.push(format!("{k} {}", show(wv)));
            }
        }
        if hd.is_empty() {
            return self.exists_different(name, &want_desc);
        }
        ControlError::ExistsDifferent {
            name: name.to_string(),
            have: format!("{have_desc} with {}", hd.join(", ")),
            want: wd.join(", "),
        }
    }

    /// Refuses a port on a host interface (or a TAP name, in its namespace) that another port
    /// uses: as Linux gives a device one master and `ovs-vsctl add-port` refuses a port twice.
    fn check_interface(&self, name: &str, spec: &PortSpec) -> Result<(), ControlError> {
        let Some(want) = host_interface(name, spec) else {
            return Ok(());
        };
        for (other, ospec) in &self.specs {
            let Some(have) = host_interface(other, ospec) else {
                continue;
            };
            if have.netns == want.netns && have.ifname == want.ifname {
                return Err(ControlError::InterfaceTaken {
                    what: want.what,
                    ifname: want.ifname.to_string(),
                    ns: want
                        .netns
                        .map(|n| format!(" in netns {n}"))
                        .unwrap_or_default(),
                    port: other.clone(),
                });
            }
        }
        if let PortSpec::Patch { peer } = spec {
            for (other, ospec) in &self.specs {
                if let PortSpec::Patch { peer: p } = ospec {
                    if p == peer {
                        return Err(qbridge_bridge::ConfigError::DeviceExists(other.clone()).into());
                    }
                }
            }
        }
        Ok(())
    }

    /// `link set dev BR [up|down] [ifname IF] [netns NS] [address MAC] [mtu …]`: the bridge's
    /// host port. `up` creates it the first time (a TAP named `ifname`, default the bridge's
    /// name, in `netns`); its TAP name, namespace and address are fixed from then on.
    fn set_host_port(&mut self, dev: &str, opts: &PortOptions) -> Result<String, ControlError> {
        let b = self.switch.bridge_id(dev)?;
        if opts.master.is_some() {
            return Err(ControlError::HostPortMaster(dev.to_string()));
        }
        let id = match self.switch.host_port(b) {
            Some(id) => {
                let fixed_given = opts.ifname.is_some()
                    || opts.netns.is_some()
                    || opts.address.is_some()
                    || opts.index.is_some();
                if fixed_given && !(self.may_exist && self.host_port_matches(dev, id, opts)) {
                    return Err(ControlError::HostPortFixed(dev.to_string()));
                }
                id
            }
            None => {
                if opts.up != Some(true) {
                    return Err(ControlError::NoHostPort(dev.to_string()));
                }
                // Validate the other settings before creating anything.
                let settings = merge_port(PortSettings::default(), opts);
                let spec = PortSpec::Host {
                    ifname: opts.ifname.clone(),
                    netns: opts.netns.clone(),
                    address: opts.address,
                };
                self.check_interface(dev, &spec)?;
                let sw = &mut self.switch;
                let mut probe = sw.clone();
                if let Some(i) = opts.index {
                    probe.reserve_port_index(i)?;
                }
                let mac = opts.address.unwrap_or_else(|| random_mac(dev));
                let id = probe.add_host_port(b, mac)?;
                probe.set_port(id, settings)?;
                *sw = probe;
                self.specs.insert(dev.to_string(), spec);
                self.status.remove(dev);
                return Ok(String::new());
            }
        };
        let mode = vlan_mode_of(opts)?;
        let sw = &mut self.switch;
        let settings = merge_port(sw.port_settings(id).clone(), opts);
        match mode {
            Some(mode) => {
                let mut probe = sw.clone();
                probe.set_port(id, settings)?;
                probe.set_vlan_mode(id, mode)?;
                *sw = probe;
            }
            None => sw.set_port(id, settings)?,
        }
        Ok(String::new())
    }
}

impl Session {
    /// Whether the `ifname`, `netns`, `address` and `index` given for existing host port `id`
    /// of bridge `dev` are the ones it has.
    fn host_port_matches(&self, dev: &str, id: PortId, opts: &PortOptions) -> bool {
        let Some(PortSpec::Host { ifname, netns, .. }) = self.specs.get(dev) else {
            return false;
        };
        let tap = ifname.as_deref().unwrap_or(dev);
        opts.ifname.as_deref().is_none_or(|i| i == tap)
            && opts
                .netns
                .as_deref()
                .is_none_or(|n| Some(n) == netns.as_deref())
            && opts
                .address
                .is_none_or(|a| Some(a) == self.switch.port_mac(id))
            && opts.index.is_none_or(|i| i == id.0)
    }
}

/// `vlan_mode MODE [tag V] [trunks LIST] [cvlans LIST]` of a `link set`, if given; `tag`,
/// `trunks` and `cvlans` only go with it.
fn vlan_mode_of(opts: &PortOptions) -> Result<Option<VlanMode>, ControlError> {
    let Some(mode) = opts.vlan_mode else {
        if opts.tag.is_some() || opts.trunks.is_some() || opts.cvlans.is_some() {
            return Err(ControlError::VlanModeWords);
        }
        return Ok(None);
    };
    Ok(Some(VlanMode {
        mode,
        tag: opts.tag,
        trunks: opts.trunks.clone(),
        cvlans: opts.cvlans.clone(),
    }))
}

/// A host interface a port holds: an AF_PACKET/AF_XDP device, or the TAP it creates.
struct HostInterface<'a> {
    what: &'static str,
    ifname: &'a str,
    /// `None`: the daemon's own namespace.
    netns: Option<&'a str>,
}

fn host_interface<'a>(name: &'a str, spec: &'a PortSpec) -> Option<HostInterface<'a>> {
    let (what, ifname, netns) = match spec {
        PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => ("interface", &**dev, None),
        PortSpec::Tap { ifname, netns } => {
            let tap = ifname.as_deref().unwrap_or(name);
            if tap.contains('%') {
                // The kernel picks a free name.
                return None;
            }
            ("interface", tap, netns.as_deref())
        }
        PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
            let (tap, netns) = spec.host_tap(name)?;
            ("interface", tap, netns)
        }
        PortSpec::Pcap | PortSpec::Patch { .. } => return None,
    };
    Some(HostInterface {
        what,
        ifname,
        netns,
    })
}

/// Whether an existing port's backend is the one a `link add` asks for (`apply`). A stacked
/// device created without `address` has a random one; a request without `address` matches
/// any, one with it must name the device's `mac`.
fn same_spec(have: &PortSpec, want: &PortSpec, mac: Option<MacAddr>) -> bool {
    let address_ok = |a: &Option<MacAddr>| a.is_none_or(|a| Some(a) == mac);
    match (have, want) {
        (
            PortSpec::Vlan {
                link,
                protocol,
                id,
                netns,
                ..
            },
            PortSpec::Vlan {
                link: l2,
                protocol: p2,
                id: i2,
                netns: n2,
                address,
            },
        ) => link == l2 && protocol == p2 && id == i2 && netns == n2 && address_ok(address),
        (
            PortSpec::Macvlan {
                link, mode, netns, ..
            },
            PortSpec::Macvlan {
                link: l2,
                mode: m2,
                netns: n2,
                address,
            },
        ) => link == l2 && mode == m2 && netns == n2 && address_ok(address),
        (a, b) => a == b,
    }
}

/// How `apply`'s messages name a backend: "an afpacket port on eth0", "a vlan device".
fn describe_spec(spec: &PortSpec) -> String {
    match spec {
        PortSpec::AfPacket { dev, .. } => format!("an afpacket port on {dev}"),
        PortSpec::AfXdp { dev, .. } => format!("an afxdp port on {dev}"),
        PortSpec::Tap { ifname, .. } => match ifname {
            Some(i) => format!("a tap port (ifname {i})"),
            None => "a tap port".to_string(),
        },
        PortSpec::Patch { peer } => format!("a patch port (peer {peer})"),
        PortSpec::Vlan {
            link, protocol, id, ..
        } => format!(
            "a vlan device on {link} (protocol {} id {id})",
            qbridge_bridge::tpid_name(protocol.0)
        ),
        PortSpec::Macvlan { link, mode, .. } => {
            format!("a macvlan on {link} (mode {})", mode.as_str())
        }
        PortSpec::Host { .. } => "a bridge's host port".to_string(),
        PortSpec::Pcap => "a pcap port".to_string(),
    }
}

/// A spec's options as `link add` words, in a fixed order per kind (`None`: not given), for
/// [`Session::exists_with_options`]; `mac`: the address a stacked device has.
fn spec_options(spec: &PortSpec, mac: Option<String>) -> Vec<(&'static str, Option<String>)> {
    let s = |v: &dyn ToString| Some(v.to_string());
    let on_off = |b: bool| Some(if b { "on" } else { "off" }.to_string());
    let addr = |a: &Option<MacAddr>| a.map(|a| a.to_string()).or(mac.clone());
    match spec {
        PortSpec::Pcap => vec![],
        PortSpec::AfPacket {
            dev,
            qdisc_bypass,
            ring_frames,
        } => vec![
            ("dev", s(dev)),
            ("qdisc_bypass", on_off(*qdisc_bypass)),
            ("ring_frames", ring_frames.map(|r| r.to_string())),
        ],
        PortSpec::AfXdp {
            dev,
            queues,
            mode,
            zerocopy,
        } => vec![
            ("dev", s(dev)),
            ("queues", s(queues)),
            (
                "mode",
                s(&match mode {
                    crate::command::XdpAttach::Native => "native",
                    crate::command::XdpAttach::Skb => "skb",
                }),
            ),
            ("zerocopy", on_off(*zerocopy)),
        ],
        PortSpec::Tap { ifname, netns } => {
            vec![("ifname", ifname.clone()), ("netns", netns.clone())]
        }
        PortSpec::Patch { peer } => vec![("peer", s(peer))],
        PortSpec::Vlan {
            link,
            protocol,
            id,
            netns,
            address,
        } => vec![
            ("link", s(link)),
            (
                "protocol",
                s(&qbridge_bridge::tpid_name(protocol.0)),
            ),
            ("id", s(id)),
            ("netns", netns.clone()),
            ("address", addr(address)),
        ],
        PortSpec::Macvlan {
            link,
            mode,
            netns,
            address,
        } => vec![
            ("link", s(link)),
            ("mode", s(&mode.as_str())),
            ("netns", netns.clone()),
            ("address", addr(address)),
        ],
        PortSpec::Host {
            ifname,
            netns,
            address,
        } => vec![
            ("ifname", ifname.clone()),
            ("netns", netns.clone()),
            ("address", addr(address)),
        ],
    }
}

/// The port a stacked device goes on: a port, or a bridge's host port.
fn resolve_lower(sw: &Switch, name: &str) -> Result<PortId, ControlError> {
    if sw.is_bridge(name) {
        let b = sw.bridge_id(name)?;
        return sw
            .host_port(b)
            .ok_or_else(|| ControlError::NoHostPort(name.to_string()));
    }
    Ok(sw.port_id(name)?)
}

/// A port, or with a bridge's name its host port (`fdb add MAC dev br0`).
fn port_or_host(sw: &Switch, name: &str) -> Result<PortId, ControlError> {
    resolve_lower(sw, name)
}

/// `vlan … dev NAME [self]`: a port without `self`, a bridge's host port with it.
fn vlan_target(sw: &Switch, dev: &str, self_: bool) -> Result<PortId, ControlError> {
    match (sw.is_bridge(dev), self_) {
        (true, true) => resolve_lower(sw, dev),
        (true, false) => Err(ControlError::BridgeNeedsSelf(dev.to_string())),
        (false, true) => Err(ControlError::SelfOnPort(dev.to_string())),
        (false, false) => Ok(sw.port_id(dev)?),
    }
}

/// A random locally administered unicast address for a device created without `address`
/// (as the kernel gives a new TAP or macvlan), fixed from then on.
fn random_mac(seed: &str) -> MacAddr {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(seed.as_bytes());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let b = h.finish().to_be_bytes();
    MacAddr([(b[0] & 0xfe) | 0x02, b[1], b[2], b[3], b[4], b[5]])
}

fn merge_bridge(mut s: BridgeSettings, o: &BridgeOptions) -> BridgeSettings {
    if let Some(v) = o.vlan_filtering {
        s.vlan_filtering = v;
    }
    if let Some(v) = o.vlan_protocol {
        s.vlan_protocol = v;
    }
    if let Some(v) = o.vlan_default_pvid {
        s.default_pvid = v;
    }
    if let Some(v) = o.ageing_time_ns {
        s.ageing_time_ns = v;
    }
    if let Some(v) = o.fdb_max_learned {
        s.fdb_max_learned = v;
    }
    if let Some(v) = o.group_fwd_mask {
        s.group_fwd_mask = v;
    }
    if let Some(v) = o.fdb_max_entries {
        s.fdb_max_entries = v;
    }
    if let Some(v) = o.learn_inner_vid {
        s.learn_inner_vid = v;
    }
    s
}

fn merge_port(mut s: PortSettings, o: &PortOptions) -> PortSettings {
    let flags = [
        (o.locked, &mut s.locked),
        (o.mab, &mut s.mab),
        (o.up, &mut s.up),
        (o.learning, &mut s.learning),
        (o.flood, &mut s.flood),
        (o.mcast_flood, &mut s.mcast_flood),
        (o.bcast_flood, &mut s.bcast_flood),
        (o.isolated, &mut s.isolated),
        (o.hairpin, &mut s.hairpin),
    ];
    for (given, field) in flags {
        if let Some(v) = given {
            *field = v;
        }
    }
    if let Some(v) = o.mtu {
        s.mtu = v;
    }
    if let Some(v) = o.envhdr_len {
        s.envhdr_len = v;
    }
    if let Some(v) = o.tpid {
        s.tpid = v;
    }
    if let Some(v) = o.fdb_max_learned {
        s.fdb_max_learned = v;
    }
    if let Some(v) = o.pcp_mode {
        s.pcp_mode = v;
    }
    if let Some(v) = o.default_pcp {
        s.default_pcp = v;
    }
    s
}

impl Session {
    /// Whether commands run with `apply`'s may-exist meaning (see [`Session::apply_batch`]).
    pub(crate) fn may_exist(&self) -> bool {
        self.may_exist
    }
}
