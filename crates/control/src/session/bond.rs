//! Bonds in the session: `link add NAME type bond …` (one port of the switch), `link set dev
//! BOND type bond …`, `link set dev P master BOND` / `nomaster` (a port's backend moves under
//! the bond's spec and back), `link del` of a bond or a member. The bonds' LACP engines
//! (`qbridge_lacp::Bond`) live here, so commands, `link show`, `show running-config` and
//! all-or-nothing batches (the session is cloned) see them; the daemon's control thread drives
//! them with its clock through [`Session::bond_mut`].
//!
//! Commands pass `now = 0` to the engines: an engine treats an earlier time as no time passing,
//! so a change made by a command happens at the last time the daemon drove the engine.
//!
//! A member is not a port of the switch: it leaves the port table when it joins and comes back
//! as a standalone port (same name, same backend, default settings) with `nomaster` or when its
//! bond is deleted, as Linux frees a bond's slaves. Only AF_PACKET ports can be members (what
//! the datapath's `BondPort` opens); a port in a bridge, with devices stacked on it, or in
//! another bond is refused, as Linux refuses to enslave a bridged port.

use super::ports::{self, random_mac};
use super::*;
use qbridge_lacp::{Bond, MemberConfig, MemberId};

/// Most members a bond takes (the datapath's per-member arrays).
pub const MAX_BOND_MEMBERS: usize = 16;

impl Session {
    /// The LACP engine of bond `name`.
    pub fn bond(&self, name: &str) -> Option<&Bond> {
        self.bonds.get(name)
    }

    /// The LACP engine of bond `name`, for the daemon's control thread (link changes,
    /// received PDUs, timers).
    pub fn bond_mut(&mut self, name: &str) -> Option<&mut Bond> {
        self.bonds.get_mut(name)
    }

    /// The names of the bonds, in name order.
    pub fn bond_names(&self) -> Vec<String> {
        self.bonds.keys().cloned().collect()
    }

    /// The bond that has member `name`, and the member.
    pub fn bond_of_member(&self, name: &str) -> Option<(&str, &BondMember)> {
        self.specs.iter().find_map(|(b, spec)| match spec {
            PortSpec::Bond(bs) => bs
                .members
                .iter()
                .find(|m| m.name == name)
                .map(|m| (b.as_str(), m)),
            _ => None,
        })
    }

    fn bond_spec(&self, name: &str) -> Option<&BondSpec> {
        match self.specs.get(name) {
            Some(PortSpec::Bond(b)) => Some(b),
            _ => None,
        }
    }

    /// The bond part of `link`: `Some(output)` when the command was a bond's (done or
    /// refused), `None` when the ordinary path runs it.
    pub(super) fn bond_link(&mut self, cmd: &LinkCommand) -> Result<Option<String>, ControlError> {
        match cmd {
            LinkCommand::AddPort { name, .. } | LinkCommand::AddBridge { name, .. }
                if self.bond_of_member(name).is_some() =>
            {
                if self.may_exist {
                    if let (Some((_, m)), Some(want)) = (self.bond_of_member(name), spec_of(cmd)) {
                        if m.spec == *want {
                            return Ok(Some(String::new()));
                        }
                    }
                }
                Err(qbridge_bridge::ConfigError::DeviceExists(name.clone()).into())
            }
            LinkCommand::AddPort {
                name,
                spec: PortSpec::Bond(b),
                index,
                ..
            } => self.add_bond(name, b, *index).map(Some),
            LinkCommand::AddPort { name, spec, .. } => {
                self.check_member_interfaces(name, spec)?;
                Ok(None)
            }
            LinkCommand::SetBond { dev, opts } => {
                let Some(spec) = self.bond_spec(dev) else {
                    return Err(ControlError::Bond(format!("{dev} is not a bond")));
                };
                let mut spec = spec.clone();
                let cfg = opts.merge(spec.config);
                let bond = self.bonds.get_mut(dev).ok_or_else(|| no_engine(dev))?;
                let mut probe = bond.clone();
                probe
                    .set_config(0, cfg)
                    .map_err(|e| ControlError::Bond(e.to_string()))?;
                *bond = probe;
                spec.config = cfg;
                self.specs
                    .insert(dev.clone(), PortSpec::Bond(Box::new(spec)));
                Ok(Some(String::new()))
            }
            LinkCommand::SetPort { dev, opts } => {
                if let Some((bond, _)) = self.bond_of_member(dev) {
                    let bond = bond.to_string();
                    return match (&opts.master, opts.only_master()) {
                        (Some(MasterChange::Unset), true) => {
                            self.release(&bond, dev, true)?;
                            Ok(Some(String::new()))
                        }
                        (Some(MasterChange::Set(b)), true) if *b == bond => Ok(Some(String::new())),
                        _ => Err(ControlError::Bond(format!(
                            "{dev} is a member of bond {bond}: only \"nomaster\" applies to it \
                             (set port options on {bond})"
                        ))),
                    };
                }
                match &opts.master {
                    Some(MasterChange::Set(b)) if self.bond_spec(b).is_some() => {
                        if !opts.only_master() {
                            return Err(ControlError::Bond(format!(
                                "\"master {b}\" (a bond) takes no other options"
                            )));
                        }
                        self.enslave(b, dev)?;
                        Ok(Some(String::new()))
                    }
                    _ => Ok(None),
                }
            }
            LinkCommand::Del { dev } => {
                if let Some((bond, _)) = self.bond_of_member(dev) {
                    let bond = bond.to_string();
                    self.release(&bond, dev, false)?;
                    return Ok(Some(String::new()));
                }
                if self.bond_spec(dev).is_some() {
                    self.del_bond(dev)?;
                    return Ok(Some(String::new()));
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    fn add_bond(
        &mut self,
        name: &str,
        spec: &BondSpec,
        index: Option<u16>,
    ) -> Result<String, ControlError> {
        if self.may_exist && self.switch.exists(name) {
            return match self.bond_spec(name) {
                Some(have) if same_config(&have.config, &spec.config) => Ok(String::new()),
                _ => Err(self.exists_different(name, "a bond")),
            };
        }
        let mut spec = spec.clone();
        if spec.config.system == MacAddr([0; 6]) {
            spec.config.system = random_mac(name);
        }
        spec.members.clear();
        let bond = Bond::new(spec.config).map_err(|e| ControlError::Bond(e.to_string()))?;
        let mut sw = self.switch.clone();
        if let Some(i) = index {
            sw.reserve_port_index(i)?;
        }
        sw.add_port(name, "bond", PortSettings::default())?;
        self.switch = sw;
        self.specs
            .insert(name.to_string(), PortSpec::Bond(Box::new(spec)));
        self.status.remove(name);
        self.bonds.insert(name.to_string(), bond);
        Ok(String::new())
    }

    /// `link set dev PORT master BOND`.
    fn enslave(&mut self, bond: &str, port: &str) -> Result<(), ControlError> {
        let id = self.switch.port_id(port)?;
        let refuse = |why: String| Err(ControlError::Bond(why));
        let Some(spec) = self.specs.get(port).cloned() else {
            return refuse(format!("{port} has no backend and cannot join bond {bond}"));
        };
        if !matches!(spec, PortSpec::AfPacket { .. }) {
            return refuse(format!(
                "{port} is {} port: only afpacket ports can join a bond",
                spec.kind()
            ));
        }
        if let Some(b) = self.switch.port_master(id) {
            let br = self.switch.bridge_name(b).to_string();
            return refuse(format!(
                "{port} is a port of bridge {br}: \"link set dev {port} nomaster\" first (a bond \
                 member is not a port of the switch)"
            ));
        }
        let bspec = self
            .bond_spec(bond)
            .cloned()
            .ok_or_else(|| no_engine(bond))?;
        if bspec.members.len() >= MAX_BOND_MEMBERS {
            return refuse(format!(
                "bond {bond} has {MAX_BOND_MEMBERS} members, the most it takes"
            ));
        }
        let mut sw = self.switch.clone();
        let gone = sw.del_link(port)?;
        if gone.len() > 1 {
            let others: Vec<&str> = gone
                .iter()
                .map(String::as_str)
                .filter(|n| *n != port)
                .collect();
            return refuse(format!(
                "{port} has devices stacked on it ({}): delete them first",
                others.join(", ")
            ));
        }
        let number = (1..=u16::MAX)
            .find(|n| bspec.members.iter().all(|m| m.port_number != *n))
            .unwrap_or(1);
        let cfg = MemberConfig {
            mac: bspec.config.system,
            port_number: number,
            port_priority: 255,
        };
        let engine = self.bonds.get_mut(bond).ok_or_else(|| no_engine(bond))?;
        let mut probe = engine.clone();
        probe
            .add_member(0, MemberId(u32::from(number)), cfg)
            .map_err(|e| ControlError::Bond(e.to_string()))?;
        *engine = probe;
        let mut bspec = bspec;
        bspec.members.push(BondMember {
            name: port.to_string(),
            spec,
            port_number: number,
        });
        self.switch = sw;
        self.specs.remove(port);
        self.status.remove(port);
        self.specs
            .insert(bond.to_string(), PortSpec::Bond(Box::new(bspec)));
        Ok(())
    }

    /// Takes member `port` out of `bond`; `keep`: it comes back as a standalone port.
    fn release(&mut self, bond: &str, port: &str, keep: bool) -> Result<(), ControlError> {
        let mut bspec = self
            .bond_spec(bond)
            .cloned()
            .ok_or_else(|| no_engine(bond))?;
        let Some(i) = bspec.members.iter().position(|m| m.name == port) else {
            return Err(ControlError::Bond(format!(
                "{port} is not a member of bond {bond}"
            )));
        };
        let m = bspec.members.remove(i);
        if keep {
            self.switch
                .add_port(&m.name, m.spec.kind(), PortSettings::default())?;
            self.specs.insert(m.name.clone(), m.spec.clone());
        }
        if let Some(engine) = self.bonds.get_mut(bond) {
            let _ = engine.remove_member(0, MemberId(u32::from(m.port_number)));
        }
        self.specs
            .insert(bond.to_string(), PortSpec::Bond(Box::new(bspec)));
        Ok(())
    }

    /// `link del dev BOND`: the bond goes (with devices stacked on it), its members come back
    /// as standalone ports.
    fn del_bond(&mut self, bond: &str) -> Result<(), ControlError> {
        let bspec = self
            .bond_spec(bond)
            .cloned()
            .ok_or_else(|| no_engine(bond))?;
        let mut sw = self.switch.clone();
        let gone = sw.del_link(bond)?;
        for m in &bspec.members {
            sw.add_port(&m.name, m.spec.kind(), PortSettings::default())?;
        }
        self.switch = sw;
        for name in gone {
            self.specs.remove(&name);
            self.status.remove(&name);
        }
        for m in bspec.members {
            self.specs.insert(m.name, m.spec);
        }
        self.bonds.remove(bond);
        Ok(())
    }

    /// Refuses a port on a host interface a bond member holds.
    fn check_member_interfaces(&self, name: &str, spec: &PortSpec) -> Result<(), ControlError> {
        let Some(want) = ports::host_interface(name, spec) else {
            return Ok(());
        };
        for (b, bspec) in &self.specs {
            let PortSpec::Bond(bs) = bspec else { continue };
            for m in &bs.members {
                let Some(have) = ports::host_interface(&m.name, &m.spec) else {
                    continue;
                };
                if have.netns == want.netns && have.ifname == want.ifname {
                    return Err(ControlError::Bond(format!(
                        "{} \"{}\" is already used by {}, a member of bond {b} (a device can \
                         be a port once)",
                        want.what, want.ifname, m.name
                    )));
                }
            }
        }
        Ok(())
    }
}

fn spec_of(cmd: &LinkCommand) -> Option<&PortSpec> {
    match cmd {
        LinkCommand::AddPort { spec, .. } => Some(spec),
        _ => None,
    }
}

fn no_engine(bond: &str) -> ControlError {
    ControlError::Bond(format!("{bond} is not a bond"))
}

/// `apply`: a bond exists as asked when every option is the same; an address not given
/// matches any.
fn same_config(have: &qbridge_lacp::BondConfig, want: &qbridge_lacp::BondConfig) -> bool {
    let mut want = *want;
    if want.system == MacAddr([0; 6]) {
        want.system = have.system;
    }
    *have == want
}
