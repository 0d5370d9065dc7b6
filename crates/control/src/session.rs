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
use qbridge_bridge::{BridgeSettings, FdbFilter, PortId, PortSettings, Switch};
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

    /// Every port with its id and backend, in port id order.
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

    /// Executes one command; returns its output (empty for commands that change state).
    pub fn execute(&mut self, cmd: &Command, out: OutputOptions) -> Result<String, ControlError> {
        match cmd {
            Command::Link(c) => self.link(c, out),
            Command::Vlan(c) => self.vlan(c, out),
            Command::Fdb(c) => self.fdb(c, out),
            Command::Help(Some(o)) => Ok(crate::usage::object(*o)),
            Command::Help(None) => Ok(crate::usage::all()),
        }
    }

    fn link(&mut self, cmd: &LinkCommand, out: OutputOptions) -> Result<String, ControlError> {
        let sw = &mut self.switch;
        match cmd {
            LinkCommand::AddBridge { name, opts } => {
                let settings = merge_bridge(BridgeSettings::default(), opts);
                sw.add_bridge(name, settings)?;
            }
            LinkCommand::SetBridge { dev, opts } => {
                let id = sw.bridge_id(dev)?;
                let settings = merge_bridge(sw.bridge_settings(id).clone(), opts);
                sw.set_bridge(id, settings)?;
            }
            LinkCommand::AddPort { name, spec } => {
                if let PortSpec::Vlan {
                    link,
                    protocol,
                    id,
                    address,
                    ..
                } = spec
                {
                    let lower = resolve_lower(sw, link)?;
                    let mac = address.unwrap_or_else(|| random_mac(name));
                    sw.add_vlan_device(name, lower, *protocol, (*id).into(), mac)?;
                    self.specs.insert(name.clone(), spec.clone());
                    self.status.remove(name);
                    return Ok(String::new());
                }
                if let PortSpec::Macvlan {
                    link,
                    mode,
                    address,
                    ..
                } = spec
                {
                    let lower = resolve_lower(sw, link)?;
                    let mac = address.unwrap_or_else(|| random_mac(name));
                    sw.add_macvlan(name, lower, *mode, mac)?;
                    self.specs.insert(name.clone(), spec.clone());
                    self.status.remove(name);
                    return Ok(String::new());
                }
                if let PortSpec::Patch { peer } = spec {
                    if peer == name {
                        return Err(ControlError::PatchSelfPeer(name.clone()));
                    }
                    if sw.exists(peer) {
                        return Err(qbridge_bridge::ConfigError::DeviceExists(peer.clone()).into());
                    }
                }
                sw.add_port(name, spec.kind(), PortSettings::default())?;
                if let PortSpec::Patch { peer } = spec {
                    // Both ends or neither: undo the first if the second is refused.
                    if let Err(e) = sw.add_port(peer, spec.kind(), PortSettings::default()) {
                        let _ = sw.del_link(name);
                        return Err(e.into());
                    }
                    let back = PortSpec::Patch { peer: name.clone() };
                    self.specs.insert(peer.clone(), back);
                    self.status.remove(peer);
                }
                self.specs.insert(name.clone(), spec.clone());
                self.status.remove(name);
            }
            LinkCommand::SetPort { dev, opts } if sw.is_bridge(dev) => {
                return self.set_host_port(dev, opts);
            }
            LinkCommand::SetPort { dev, opts } => {
                if opts.ifname.is_some() || opts.netns.is_some() || opts.address.is_some() {
                    return Err(ControlError::HostOnlyOptions("ifname, netns and address"));
                }
                let id = sw.port_id(dev)?;
                let master = match &opts.master {
                    Some(MasterChange::Set(br)) => Some(Some(sw.bridge_id(br)?)),
                    Some(MasterChange::Unset) => Some(None),
                    None => None,
                };
                if !opts.only_master() {
                    let settings = merge_port(sw.port_settings(id).clone(), opts);
                    sw.set_port(id, settings)?;
                }
                if let Some(m) = master {
                    sw.set_master(id, m)?;
                }
            }
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
                sw.vlan_del(id, vids.start.into(), vids.end.into())?;
            }
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
                kind,
                sticky,
                replace,
            } => {
                let id = port_or_host(sw, dev)?;
                sw.fdb_add(*mac, id, vlan.map(u32::from), *kind, *sticky, *replace)?;
            }
            FdbCommand::Del { mac, dev, vlan } => {
                let id = port_or_host(sw, dev)?;
                sw.fdb_del(*mac, id, vlan.map(u32::from))?;
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

    /// Per-port counters with drops by reason (every reason, zeros included), per-VLAN counters
    /// of each bridge, and the switch-level `unknown_port_drops`, as one JSON value.
    pub fn stats_json(&self) -> serde_json::Value {
        render::stats_json(self)
    }
}

impl Session {
    /// `link set dev BR [up|down] [ifname IF] [netns NS] [address MAC] [mtu …]`: the bridge's
    /// host port. `up` creates it the first time (a TAP named `ifname`, default the bridge's
    /// name, in `netns`); its TAP name, namespace and address are fixed from then on.
    fn set_host_port(&mut self, dev: &str, opts: &PortOptions) -> Result<String, ControlError> {
        let sw = &mut self.switch;
        let b = sw.bridge_id(dev)?;
        if opts.master.is_some() {
            return Err(ControlError::HostPortMaster(dev.to_string()));
        }
        let id = match sw.host_port(b) {
            Some(id) => {
                if opts.ifname.is_some() || opts.netns.is_some() || opts.address.is_some() {
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
                let mut probe = sw.clone();
                let mac = opts.address.unwrap_or_else(|| random_mac(dev));
                let id = probe.add_host_port(b, mac)?;
                probe.set_port(id, settings)?;
                *sw = probe;
                self.specs.insert(
                    dev.to_string(),
                    PortSpec::Host {
                        ifname: opts.ifname.clone(),
                        netns: opts.netns.clone(),
                        address: opts.address,
                    },
                );
                self.status.remove(dev);
                return Ok(String::new());
            }
        };
        let settings = merge_port(sw.port_settings(id).clone(), opts);
        sw.set_port(id, settings)?;
        Ok(String::new())
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
    s
}

fn merge_port(mut s: PortSettings, o: &PortOptions) -> PortSettings {
    let flags = [
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
    s
}
