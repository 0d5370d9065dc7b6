//! Adding ports: `link add` of every backend kind and a bridge's host port (`link set dev BR
//! up`), and the checks they need — a host interface held by one port only, and `apply`'s
//! comparison of an existing device with the one asked for (same backend: nothing to do;
//! another: an error naming both).

use super::*;

impl Session {
    /// `link add NAME … type KIND …` of a port (any backend, a stacked device, a patch link).
    pub(super) fn add_port(
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

    pub(super) fn exists_different(&self, name: &str, want: &str) -> ControlError {
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
    pub(super) fn set_host_port(
        &mut self,
        dev: &str,
        opts: &PortOptions,
    ) -> Result<String, ControlError> {
        let b = self.switch.bridge_id(dev)?;
        if opts.master.is_some() {
            return Err(ControlError::HostPortMaster(dev.to_string()));
        }
        if !opts.stp.is_empty() {
            return Err(ControlError::Stp(format!(
                "cost, priority, guard, root_block, bpdu_filter, loop_guard, edge, auto_edge and \
                 p2p are for a bridge's ports; {dev} itself (its host port) takes no part in the \
                 spanning tree"
            )));
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

/// A host interface a port holds: an AF_PACKET/AF_XDP device, or the TAP it creates.
pub(super) struct HostInterface<'a> {
    pub(super) what: &'static str,
    pub(super) ifname: &'a str,
    /// `None`: the daemon's own namespace.
    pub(super) netns: Option<&'a str>,
}

pub(super) fn host_interface<'a>(name: &'a str, spec: &'a PortSpec) -> Option<HostInterface<'a>> {
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
        PortSpec::Pcap | PortSpec::Patch { .. } | PortSpec::Bond(_) | PortSpec::Vxlan(_) => {
            return None
        }
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
        // The remotes are `fdb` lines of their own, not `link add` options.
        (PortSpec::Vxlan(x), PortSpec::Vxlan(y)) => x.same_socket(y) && x.learning == y.learning,
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
        PortSpec::Bond(_) => "a bond".to_string(),
        PortSpec::Vxlan(v) if v.external => format!("a vxlan port (external local {})", v.local),
        PortSpec::Vxlan(v) => format!("a vxlan port (id {} local {})", v.vni, v.local),
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
        PortSpec::Pcap | PortSpec::Bond(_) => vec![],
        PortSpec::Vxlan(v) => vec![
            ("id", s(&v.vni)),
            ("local", s(&v.local)),
            ("dstport", s(&v.dstport)),
            ("ttl", v.ttl.map(|t| t.to_string())),
            ("dev", v.dev.clone()),
            ("tos", v.tos.map(crate::vxlan::tos_word)),
            ("udp6zerocsumtx", on_off(v.udp6zerocsumtx)),
            ("udp6zerocsumrx", on_off(v.udp6zerocsumrx)),
            ("learning", on_off(v.learning)),
        ],
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
            ("protocol", s(&qbridge_bridge::tpid_name(protocol.0))),
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

/// A random locally administered unicast address for a device created without `address`
/// (as the kernel gives a new TAP or macvlan), fixed from then on.
pub(super) fn random_mac(seed: &str) -> MacAddr {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(seed.as_bytes());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let b = h.finish().to_be_bytes();
    MacAddr([(b[0] & 0xfe) | 0x02, b[1], b[2], b[3], b[4], b[5]])
}
