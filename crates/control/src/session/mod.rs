//! A [`Session`]: the switch plus what only the control plane knows (each port's backend, and
//! in a daemon its status), and the execution of commands against it.
//!
//! The top of the crate's import graph: it calls [`crate::parse`], [`crate::render`],
//! [`crate::running`], [`crate::mirror`] and [`crate::stats`], which read the switch and, for
//! the backends, the session as a [`Backends`] lookup; none of them imports this module.
//! Adding ports and host ports, with the checks they need, is in `ports.rs`.
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
use crate::stats::Snapshot;
use crate::status::{BackendStatus, Backends};
use qbridge_bridge::{BridgeSettings, FdbFilter, PortId, PortSettings, Switch, VlanMode};
use qbridge_wire::MacAddr;
use std::collections::BTreeMap;

mod bond;
mod ports;
mod stp;
mod vxlan;

pub use stp::{SpanningTree, StpConf};

pub use bond::MAX_BOND_MEMBERS;

/// The switch and the backend spec of each port.
#[derive(Debug, Clone, Default)]
pub struct Session {
    switch: Switch,
    specs: BTreeMap<String, PortSpec>,
    status: BTreeMap<String, BackendStatus>,
    /// `qbridge apply`: what exists already is not an error (see [`Session::apply_batch`]).
    may_exist: bool,
    /// The spanning tree of each bridge with `stp_state 1` (`stp.rs`).
    stp: SpanningTree,
    /// The LACP engine of each bond, by name (`bond.rs`).
    bonds: BTreeMap<String, qbridge_lacp::Bond>,
    /// `fdb flush dev NAME` of each VXLAN port so far (`vxlan.rs`): the engine empties the
    /// port's learned VTEPs when the count moves.
    vxlan_flushes: BTreeMap<String, u64>,
    /// vxl88: learned VTEP entries (VNI, MAC, VTEP) `fdb del` removed from each VXLAN port,
    /// for the engine to take out of the port's table before it answers (decision 88).
    vxl88_forget: BTreeMap<String, Vec<crate::vxlan::Learned>>,
    /// What the daemon's engine last said of the eBPF fast path (`show fast-path`).
    fast_path: Option<crate::status::FastPathStatus>,
    /// The daemon's engine's `fast` stage for `trace` (the install's checks run on the
    /// traced frame); without it, `fast_path` alone says what the outputs do.
    fast_stage: Option<std::sync::Arc<dyn crate::trace::FastStage>>,
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

    /// Records the eBPF fast path's state for `show fast-path` (the daemon's engine).
    pub fn set_fast_path(&mut self, status: crate::status::FastPathStatus) {
        self.fast_path = Some(status);
    }

    /// The `fast` stage `trace` runs (the daemon's engine, with the fast path's state).
    pub fn set_fast_stage(&mut self, stage: std::sync::Arc<dyn crate::trace::FastStage>) {
        self.fast_stage = Some(stage);
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
        // fdb89: a batch of FDB entries only (qbridge-evpn's routes, decision 89): the lines
        // that change a bridge's FDB, kept (parsed once) to be done on the live switch.
        let fdb_batch = batch_fdb_entries_only(text);
        let mut bridge_lines = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let r = parse_line(line).and_then(|c| match c {
                Some(c) => {
                    let r = work.execute(&c, out);
                    let own = matches!(
                        c,
                        Command::Fdb(FdbCommand::Vxlan { .. } | FdbCommand::Show { .. })
                    );
                    if fdb_batch && !own {
                        bridge_lines.push(c);
                    }
                    r
                }
                None => Ok(String::new()),
            });
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
        // fdb89: checked whole on the copy, such a batch has its bridge lines done again on
        // the live switch, which the copy then takes instead of its own: the FDBs stay the
        // ones the datapath holds (the plan unchanged: the fast path follows the entries it
        // changed); the rest (a VXLAN port's remotes, in its spec) is the copy's, not done
        // twice. A line the live switch refuses — a worker learned or moved an address
        // meanwhile — leaves the copy taken whole, as any other batch.
        if fdb_batch {
            let replayed = bridge_lines.iter().all(|c| {
                self.execute(c, OutputOptions::default())
                    .map_err(|e| tracing::info!("an FDB batch taken whole after {c:?}: {e}"))
                    .is_ok()
            });
            if replayed {
                std::mem::swap(&mut self.switch, &mut work.switch);
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
        let r = match cmd {
            Command::Link(c) => self.link(c, out),
            Command::Vlan(c) => self.vlan(c, out),
            Command::Fdb(c) => return self.fdb(c, out),
            Command::ShowRunningConfig => return Ok(self.running_config()),
            Command::ShowFastPath => {
                return Ok(crate::render::fast_path(self.fast_path.as_ref(), out))
            }
            Command::Help(Some(o)) => return Ok(crate::usage::object(*o)),
            Command::Help(None) => return Ok(crate::usage::all()),
            Command::Mirror(c) => {
                return crate::mirror::execute(&mut self.switch, self.may_exist, c, out)
            }
            Command::Stp(c) => self.stp_command(c, out),
            Command::Vni(c) => return self.vni_command(c, out),
            Command::Trace(spec) => {
                let fast = match (&self.fast_stage, &self.fast_path) {
                    (Some(f), _) => Some(&**f),
                    (None, Some(st)) => Some(st as &dyn crate::trace::FastStage),
                    (None, None) => None,
                };
                return crate::trace::execute(&self.switch, spec, fast, &self.port_details(), out);
            }
            Command::TraceLive(_) => {
                return Err(ControlError::NeedsDaemon(
                    "trace live explains frames a running daemon receives: run it against the \
                     daemon (qbridge -s SOCKET trace live …); offline, trace a described frame \
                     or one from a pcap file (trace dev PORT pcap FILE)"
                        .into(),
                ))
            }
        };
        // Ports, bridges, links and VLANs changed: the spanning trees follow.
        if r.is_ok()
            && (self.stp.running()
                || self
                    .switch
                    .bridge_ids()
                    .any(|(b, _)| self.switch.bridge_settings(b).stp))
        {
            self.stp.sync(&mut self.switch);
        }
        r
    }

    /// The VXLAN ports and bonds as `trace` tells what they do with a frame
    /// (`crate::trace_details`): VNIs, remote VTEPs (static, and learned as the daemon last
    /// told), each bond's transmit table with its members' names.
    pub fn port_details(&self) -> crate::trace_details::PortDetails {
        let mut d = crate::trace_details::PortDetails::default();
        for (name, spec) in &self.specs {
            match spec {
                PortSpec::Vxlan(v) => {
                    let tpid = self
                        .switch
                        .port_id(name)
                        .ok()
                        .and_then(|id| self.switch.port_master(id))
                        .map(|b| self.switch.bridge_settings(b))
                        .filter(|s| s.vlan_filtering)
                        .map(|s| s.vlan_protocol.tpid().0);
                    let learned = self
                        .status
                        .get(name)
                        .map(|st| st.vxlan_learned.clone())
                        .unwrap_or_default();
                    d.add_vxlan(name, (**v).clone(), tpid, learned);
                }
                PortSpec::Bond(b) => {
                    let Some(engine) = self.bonds.get(name) else {
                        continue;
                    };
                    let buckets = (0..qbridge_lacp::BUCKETS as u32)
                        .map(|h| {
                            let m = engine.member_for(h)?;
                            b.members
                                .iter()
                                .find(|x| u32::from(x.port_number) == m.0)
                                .map(|x| x.name.clone())
                        })
                        .collect();
                    let policy = b.config.hash_policy;
                    d.add_bond(name, policy, policy.word().to_string(), buckets);
                }
                _ => {}
            }
        }
        d
    }

    fn link(&mut self, cmd: &LinkCommand, out: OutputOptions) -> Result<String, ControlError> {
        if let Some(r) = self.bond_link(cmd)? {
            return Ok(r);
        }
        let sw = &mut self.switch;
        match cmd {
            LinkCommand::AddBridge { name, opts } if self.may_exist && sw.exists(name) => {
                let id = match sw.bridge_id(name) {
                    Ok(id) => id,
                    Err(_) => return Err(self.exists_different(name, "a bridge")),
                };
                let conf = self.stp.merged(name, &opts.stp)?;
                let settings = merge_bridge(sw.bridge_settings(id).clone(), opts);
                sw.set_bridge(id, settings)?;
                self.stp.set_conf(name, conf);
            }
            LinkCommand::AddBridge { name, opts } => {
                let conf = self.stp.merged(name, &opts.stp)?;
                let settings = merge_bridge(BridgeSettings::default(), opts);
                sw.add_bridge(name, settings)?;
                self.stp.set_conf(name, conf);
            }
            LinkCommand::SetBridge { dev, opts } => {
                let id = sw.bridge_id(dev)?;
                let conf = self.stp.merged(dev, &opts.stp)?;
                let settings = merge_bridge(sw.bridge_settings(id).clone(), opts);
                sw.set_bridge(id, settings)?;
                self.stp.set_conf(dev, conf);
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
                if !opts.stp.is_empty() {
                    return self.set_port_stp(dev, id, opts);
                }
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
            // `bond_link` ran it for every bond.
            LinkCommand::SetBond { dev, .. } => {
                return Err(ControlError::Bond(format!("{dev} is not a bond")))
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
                return Ok(render::links(&self.switch, self, dev.as_deref(), out));
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
                if *untagged {
                    vxlan::refuse_untagged_tunnel(&self.specs, dev, *vids)?;
                }
                sw.vlan_add(id, vids.start.into(), vids.end.into(), *pvid, *untagged)?;
            }
            VlanCommand::TunnelAdd { dev, vids, vnis } => {
                return self
                    .vxlan_tunnel_add(dev, *vids, *vnis)
                    .map(|()| String::new());
            }
            VlanCommand::TunnelDel { dev, vids, vnis } => {
                return self
                    .vxlan_tunnel_del(dev, *vids, *vnis)
                    .map(|()| String::new());
            }
            VlanCommand::TunnelShow { dev } => return self.vxlan_tunnelshow(dev.as_deref(), out),
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
                // A VLAN leaving an external VXLAN port takes its tunnel_info along (Linux).
                vxlan::forget_tunnels(&mut self.specs, dev, *vids);
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
                self_,
                master,
                vni,
            } => {
                // vxl88 (decision 88): a VXLAN port's own entry with `self`, and without
                // `master` or `vlan` (bridge-fdb(8): `self` is a vxlan device's default).
                if self.specs.get(dev).is_some_and(vxlan::is_vxlan) {
                    let own = *self_ || (!*master && vlan.is_none() && inner_vlan.is_none());
                    let bridge = *master || !*self_;
                    return self
                        .vxl88_del(*mac, dev, *vlan, *inner_vlan, *vni, own, bridge)
                        .map(|()| String::new());
                }
                if vni.is_some() {
                    return Err(ControlError::Vxlan(format!(
                        "{dev} is not a vxlan port: \"vni\" names a VXLAN port's entry"
                    )));
                }
                let sw = &mut self.switch;
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
                let text = render::fdb(&entries, out);
                if vlan.is_some() {
                    return Ok(text);
                }
                return Ok(self.with_vxlan_fdb(text, br.as_deref(), dev.as_deref(), out));
            }
            FdbCommand::Flush {
                dev,
                vlan,
                which,
                self_,
                master,
                self_permanent,
            } => {
                // vxl88 (decision 88): `self` on a VXLAN port flushes its own entries as the
                // kernel's vxlan does, the bridge's only with `master` too.
                if *self_ && self.specs.get(dev).is_some_and(vxlan::is_vxlan) {
                    if vlan.is_some() {
                        return Err(ControlError::Vxlan(format!(
                            "vxlan port {dev}: its own entries have no VLAN: \"vlan\" goes with \
                             \"master\" only"
                        )));
                    }
                    if *master {
                        sw.fdb_flush_matching(dev, None, *which)?;
                    }
                    self.vxl88_flush(dev, which, *self_permanent);
                    return Ok(String::new());
                }
                sw.fdb_flush_matching(dev, vlan.map(u32::from), *which)?;
                // A VXLAN port's learned VTEPs go too (the engine empties its table), not
                // with `master` (the bridge's entries only).
                if vlan.is_none()
                    && which.dynamic
                    && !*master
                    && self.specs.get(dev).is_some_and(vxlan::is_vxlan)
                {
                    *self.vxlan_flushes.entry(dev.clone()).or_default() += 1;
                    // vxl88: gone from `fdb show` at once, as after `fdb del`.
                    if let Some(st) = self.status.get_mut(dev) {
                        st.vxlan_learned.clear();
                    }
                }
            }
            FdbCommand::Vxlan {
                op,
                mac,
                dev,
                dst,
                origin,
                vni,
            } => {
                return self
                    .vxlan_fdb(*op, *mac, dev, *dst, *vni, *origin)
                    .map(|()| String::new());
            }
        }
        Ok(String::new())
    }

    /// The whole configuration as a batch file that recreates it on a fresh switch (see
    /// [`crate::running`]).
    pub fn running_config(&self) -> String {
        let mut text = crate::running::running_config(&self.switch, self);
        self.stp.running_lines(&self.switch, &mut text);
        text
    }

    /// Every counter of the switch and the ports' backends (see [`Snapshot::take`]).
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::take(&self.switch, self);
        snap.stp = self.stp.stats(&self.switch);
        snap
    }

    /// Per-port counters with drops by reason (every reason, zeros included), per-VLAN counters
    /// of each bridge, and the switch-level `unknown_port_drops`, as one JSON value
    /// ([`Snapshot::to_stats_json`]).
    pub fn stats_json(&self) -> serde_json::Value {
        self.snapshot().to_stats_json()
    }

    /// Applies a state file's text to the session, all or nothing: the configuration, then the
    /// changes appended after [`CHANGES_MARKER`](crate::running::CHANGES_MARKER) with `apply`'s meaning. A last appended line
    /// without its newline (a write cut short by a power cut) is left out. Errors name the line of
    /// the whole text.
    pub fn restore(&mut self, text: &str) -> Result<(), ControlError> {
        let out = crate::OutputOptions::default();
        let Some((config, changes)) = text.split_once(crate::running::CHANGES_MARKER) else {
            self.execute_batch(text, out)?;
            return Ok(());
        };
        let changes = match changes.rfind('\n') {
            Some(i) => &changes[..=i],
            None => "",
        };
        let mut work = self.clone();
        work.execute_batch(config, out)?;
        let before = config.lines().count() + 1;
        work.apply_batch(changes, out).map_err(|e| match e {
            ControlError::Line { line, error } => ControlError::Line {
                line: line + before,
                error,
            },
            e => e,
        })?;
        *self = work;
        Ok(())
    }
}

/// fdb89: whether `cmd` changes only FDB entries — a bridge's (`fdb add|append|replace|del`,
/// `fdb flush`) or a VXLAN port's remotes (`fdb … dst IP`), or reads them — and nothing a plan
/// holds (decision 89).
pub fn fdb_entries_only(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Fdb(
            FdbCommand::Add { .. }
                | FdbCommand::Del { .. }
                | FdbCommand::Flush { .. }
                | FdbCommand::Vxlan { .. }
                | FdbCommand::Show { .. }
        )
    )
}

/// fdb89: whether every line of batch `text` is a blank, a comment or an `fdb` command, all
/// [`fdb_entries_only`] when they parse (decision 89). Read from the words, not parsed: the
/// engine asks before the batch runs.
pub fn batch_fdb_entries_only(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim_start();
        l.is_empty() || l.starts_with('#') || l.starts_with("fdb ")
    })
}

impl Backends for Session {
    fn port_spec(&self, name: &str) -> Option<&PortSpec> {
        self.specs.get(name)
    }
    fn backend_status(&self, name: &str) -> Option<&BackendStatus> {
        self.status.get(name)
    }
    fn bond_view(&self, name: &str) -> Option<qbridge_lacp::BondView> {
        self.bonds.get(name).map(qbridge_lacp::Bond::view)
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
    if let Some(v) = o.stp_state {
        s.stp = v;
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
