//! The spanning tree of each bridge with `stp_state 1`, in the session: one
//! [`qbridge_stp::Stp`] engine per such bridge, its configuration (kept while the tree is
//! off, so `stp_state 0` then `1` keeps what was set), each port's options, and the glue
//! between the engine and the switch:
//!
//! - [`SpanningTree::sync`] after every command and whenever a port's link changes: an
//!   engine for each bridge that has the tree on (none for the others: the switch then has
//!   no port states), a spanning-tree port for each of its ports but the host port, each
//!   port's link (up when the switch has it running; speed as the runtime reported it,
//!   [`Session::set_link_speed`]), the bridge and port parameters. The bridge's address (its
//!   bridge identifier) is its host port's, else the lowest address of its ports, else one
//!   made from the bridge's name and the process; when it changes the engine starts again,
//!   as a Linux bridge's identifier follows its ports.
//! - [`Session::stp_tick`] once a second, [`Session::stp_receive`] for each trapped BPDU
//!   (`qbridge_bridge::Outputs::punt`).
//! - The engine's outputs are applied at once: a port's state in a tree becomes the
//!   switch's state of the port in the tree's VIDs ([`Switch::set_stp_state`]; every VID for
//!   STP and RSTP, the region's table for MSTP), a flush removes the port's learned entries
//!   in those VIDs ([`Switch::stp_flush`]), BPDUs wait in [`SpanningTree::take_bpdus`] for
//!   the runtime to send, events are logged and kept for `stp show` and `monitor stp`.
//!
//! Pure: no clock (ticks are counted), no I/O.

use super::Session;
use crate::command::{StpBridgeOptions, StpPortOptions};
use crate::error::ControlError;
use crate::render::stp::StpBridgeView;
use qbridge_bridge::{BridgeId, PortId, Role, StpState, Switch, VlanProtocol, VlanSet};
use qbridge_stp::mst::Region;
use qbridge_stp::{
    BridgeConfig, Cost, Duplex, Event, GroupAddress, Link, OnOff, Output, PointToPoint, PortFlag,
    PortState, Stp, TreeId,
};
use qbridge_wire::MacAddr;
use std::collections::{BTreeMap, VecDeque};

/// Events kept per bridge for `stp show` and `monitor stp`.
const EVENTS_KEPT: usize = 64;

/// A bridge's spanning-tree configuration as the commands set it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StpConf {
    /// `stp_mode`, `priority`, the timers, `tx_hold_count`, `max_hops` (the group address
    /// follows the bridge's `vlan_protocol`).
    pub config: BridgeConfig,
    /// `mst_name` (default: the bridge address, as mstpd) and `mst_revision`.
    pub mst_name: Option<String>,
    pub mst_revision: u16,
    /// The region's VID to MSTI table (VIDs not here are in the CIST).
    pub msti_of_vid: BTreeMap<u16, u16>,
    /// The bridge's priority per MSTI (default: its CIST priority).
    pub msti_priority: BTreeMap<u16, u16>,
}

/// One bridge's running engine.
#[derive(Debug, Clone)]
struct Live {
    stp: Stp,
    mac: MacAddr,
    /// Port name → spanning-tree port number (1-4095).
    numbers: BTreeMap<String, u16>,
    /// The link last given to the engine, per port number.
    links: BTreeMap<u16, Link>,
    /// The options last applied, per port number.
    applied: BTreeMap<u16, StpPortOptions>,
    /// The per-MSTI settings last applied, per port number.
    applied_msti: BTreeMap<u16, BTreeMap<u16, (u16, Cost)>>,
    /// The region last given to the engine.
    region: Region,
    /// Recent events: (tick, event).
    events: VecDeque<(u64, Event)>,
}

/// Every bridge's spanning tree; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct SpanningTree {
    /// Per bridge name.
    conf: BTreeMap<String, StpConf>,
    /// Per port name: the options given (applied while its bridge runs the tree).
    ports: BTreeMap<String, StpPortOptions>,
    /// Per port name, per MSTI: its priority and path cost there (`stp msti port`).
    msti_ports: BTreeMap<String, BTreeMap<u16, (u16, Cost)>>,
    /// Per bridge name with the tree on.
    live: BTreeMap<String, Live>,
    /// Per port name: link speed in Mb/s as the runtime reported it.
    speeds: BTreeMap<String, u32>,
    /// BPDUs to send, in order.
    bpdus: Vec<(PortId, Vec<u8>)>,
    /// Events not yet taken by the monitors: (bridge, text, event).
    fresh: Vec<(String, String, Event)>,
    /// Salt of the bridge addresses made up when no port has one (per process).
    salt: u64,
}

fn mac_bytes(m: MacAddr) -> [u8; 6] {
    m.0
}

/// The VIDs of `tree` under `region` (every VID outside MSTP).
fn tree_vids(mstp: bool, region: &Region, tree: TreeId) -> VlanSet {
    let mut v = VlanSet::default();
    for vid in 1..=4094u16 {
        if !mstp || region.tree_of(vid) == tree {
            v.insert(vid);
        }
    }
    v
}

fn state_of(s: PortState) -> StpState {
    match s {
        PortState::Discarding => StpState::Discarding,
        PortState::Learning => StpState::Learning,
        PortState::Forwarding => StpState::Forwarding,
    }
}

impl SpanningTree {
    /// The configuration of bridge `name` (defaults when none was set).
    pub fn conf(&self, name: &str) -> StpConf {
        self.conf.get(name).cloned().unwrap_or_default()
    }

    /// The spanning-tree options given to port `name`.
    pub fn port_options(&self, name: &str) -> Option<&StpPortOptions> {
        self.ports.get(name)
    }

    /// Checks `opts` on top of bridge `name`'s configuration (the timer relation of
    /// 802.1D-2004 17.14) and returns the result, without keeping it.
    pub fn merged(&self, name: &str, opts: &StpBridgeOptions) -> Result<StpConf, ControlError> {
        let mut c = self.conf(name);
        let cfg = &mut c.config;
        if let Some(v) = opts.mode {
            cfg.mode = v;
        }
        if let Some(v) = opts.priority {
            cfg.priority = v;
        }
        if let Some(v) = opts.hello_time {
            cfg.hello_time = v;
        }
        if let Some(v) = opts.max_age {
            cfg.max_age = v;
        }
        if let Some(v) = opts.forward_delay {
            cfg.forward_delay = v;
        }
        if let Some(v) = opts.tx_hold_count {
            cfg.tx_hold_count = v;
        }
        if let Some(v) = opts.max_hops {
            cfg.max_hops = v;
        }
        if let Some(v) = &opts.mst_name {
            c.mst_name = Some(v.clone());
        }
        if let Some(v) = opts.mst_revision {
            c.mst_revision = v;
        }
        c.config
            .validate()
            .map_err(|e| ControlError::Stp(e.to_string()))?;
        Ok(c)
    }

    pub fn set_conf(&mut self, name: &str, conf: StpConf) {
        self.conf.insert(name.to_string(), conf);
    }

    pub fn set_port_options(&mut self, name: &str, opts: StpPortOptions) {
        self.ports.insert(name.to_string(), opts);
    }

    /// Port `name`'s priority and cost in each MSTI it has its own for.
    pub fn msti_port_options(&self, name: &str) -> Option<&BTreeMap<u16, (u16, Cost)>> {
        self.msti_ports.get(name)
    }

    /// Link speed of port `name` (Mb/s; 0 unknown), for `cost auto`.
    pub fn set_speed(&mut self, name: &str, mbps: u32) {
        self.speeds.insert(name.to_string(), mbps);
    }

    /// BPDUs waiting to be sent.
    pub fn take_bpdus(&mut self) -> Vec<(PortId, Vec<u8>)> {
        std::mem::take(&mut self.bpdus)
    }

    /// Events since the last call: (bridge, the event in words, the event).
    pub fn take_events(&mut self) -> Vec<(String, String, Event)> {
        std::mem::take(&mut self.fresh)
    }

    /// Whether any bridge runs the tree.
    pub fn running(&self) -> bool {
        !self.live.is_empty()
    }

    /// Bridge `name`'s view, if it runs the tree.
    pub fn view<'a>(&'a self, sw: &'a Switch, name: &'a str) -> Option<StpBridgeView<'a>> {
        let live = self.live.get(name)?;
        let mstp = live.stp.config().mode == qbridge_stp::Mode::Mstp;
        Some(StpBridgeView {
            name,
            show: live.stp.show(),
            port_names: live
                .numbers
                .iter()
                .filter(|(n, _)| sw.exists(n))
                .map(|(n, no)| (*no, n.as_str()))
                .collect(),
            events: live.events.iter().copied().collect(),
            region: mstp.then(|| {
                let id = live.region.config_id();
                (
                    String::from_utf8_lossy(&id.name)
                        .trim_end_matches('\0')
                        .to_string(),
                    id.revision,
                    id.digest,
                )
            }),
        })
    }

    /// The metrics of every bridge that runs the tree.
    pub fn stats(&self, sw: &Switch) -> Vec<crate::stats::StpStats> {
        self.live_bridges()
            .filter_map(|n| self.view(sw, n))
            .map(|v| crate::stats::StpStats {
                bridge: v.name.to_string(),
                root: v.show.root_status == qbridge_stp::RootStatus::Root,
                topology_changes: v.show.topology_changes,
                ports: v
                    .show
                    .ports
                    .iter()
                    .map(|p| {
                        let c = &p.counters;
                        crate::stats::StpPortStats {
                            port: v
                                .port_names
                                .get(&p.port)
                                .copied()
                                .unwrap_or("?")
                                .to_string(),
                            role: crate::render::stp::role_word(p.role),
                            state: match p.state {
                                PortState::Discarding => 0,
                                PortState::Learning => 1,
                                PortState::Forwarding => 2,
                            },
                            bpdu_rx: c.rx_config + c.rx_tcn + c.rx_rst + c.rx_mst,
                            bpdu_tx: c.tx_config + c.tx_tcn + c.tx_rst + c.tx_mst,
                        }
                    })
                    .collect(),
            })
            .collect()
    }

    /// The names of the bridges that run the tree, in order.
    pub fn live_bridges(&self) -> impl Iterator<Item = &str> {
        self.live.keys().map(String::as_str)
    }

    /// Makes the engines follow the switch and the configuration (see the module
    /// documentation), then applies what they output.
    pub fn sync(&mut self, sw: &mut Switch) {
        if self.salt == 0 {
            self.salt = u64::from(std::process::id()) << 16 | 1;
        }
        let bridges: Vec<(BridgeId, String)> =
            sw.bridge_ids().map(|(b, n)| (b, n.to_string())).collect();
        self.live.retain(|name, _| {
            bridges
                .iter()
                .any(|(b, n)| n == name && sw.bridge_settings(*b).stp)
        });
        self.conf.retain(|name, _| sw.is_bridge(name));
        self.ports.retain(|name, _| sw.exists(name));
        self.msti_ports.retain(|name, _| sw.exists(name));
        for (b, name) in &bridges {
            if sw.bridge_settings(*b).stp {
                self.sync_bridge(sw, *b, name);
            }
        }
    }

    fn bridge_mac(&self, sw: &Switch, b: BridgeId, name: &str) -> MacAddr {
        if let Some(m) = sw.host_port(b).and_then(|h| sw.port_mac(h)) {
            return m;
        }
        let lowest = sw
            .bridge_ports(b)
            .filter_map(|p| sw.port_address(p))
            .min_by_key(|m| m.to_u64());
        if let Some(m) = lowest {
            return m;
        }
        // FNV-1a of the name and the salt; locally administered, unicast.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ self.salt;
        for byte in name.bytes() {
            h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
        let mut m = MacAddr::from_u64(h & 0xffff_ffff_ffff);
        m.0[0] = (m.0[0] & 0xfc) | 0x02;
        m
    }

    fn region_of(conf: &StpConf, mac: MacAddr) -> Region {
        let name = conf.mst_name.clone().unwrap_or_else(|| mac.to_string());
        let mut r = Region::new(&name, conf.mst_revision).unwrap_or_default();
        for (&vid, &msti) in &conf.msti_of_vid {
            let _ = r.map(vid, msti);
        }
        r
    }

    fn sync_bridge(&mut self, sw: &mut Switch, b: BridgeId, name: &str) {
        let conf = self.conf(name);
        let mut cfg = conf.config.clone();
        cfg.group_address = match sw.bridge_settings(b).vlan_protocol {
            VlanProtocol::Dot1Ad => GroupAddress::Provider,
            _ => GroupAddress::Customer,
        };
        let mac = self.bridge_mac(sw, b, name);
        let region = Self::region_of(&conf, mac);
        let restart = self.live.get(name).is_none_or(|l| l.mac != mac);
        if restart {
            let stp = match Stp::new(mac_bytes(mac), cfg.clone()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("{name}: spanning tree not started: {e}");
                    self.live.remove(name);
                    return;
                }
            };
            if let Some(old) = self.live.remove(name) {
                tracing::info!(
                    "{name}: bridge address {} -> {mac}: the spanning tree starts again",
                    old.mac
                );
            }
            // BPDUs the old engine queued and nobody sent yet would announce a bridge that
            // no longer exists (at a daemon's start, the engine made while the batch ran,
            // before the ports had addresses): its stale root would circulate until Max Age.
            let ours: Vec<PortId> = sw.bridge_ports(b).collect();
            self.bpdus.retain(|(id, _)| !ours.contains(id));
            // A new engine starts every port discarding; so does the switch.
            for p in sw.bridge_ports(b).collect::<Vec<_>>() {
                if !matches!(sw.port_role(p), Role::Host { .. })
                    && sw.stp_state(p, 0) != StpState::Discarding
                {
                    let all = tree_vids(false, &region, TreeId::CIST);
                    let _ = sw.set_stp_state(p, &all, StpState::Discarding);
                }
            }
            let mut live = Live {
                stp,
                mac,
                numbers: BTreeMap::new(),
                links: BTreeMap::new(),
                applied: BTreeMap::new(),
                applied_msti: BTreeMap::new(),
                region: Region::default(),
                events: VecDeque::new(),
            };
            live.stp.set_region(region.clone());
            live.region = region.clone();
            for (&msti, &prio) in &conf.msti_priority {
                let _ = live.stp.set_msti_priority(TreeId(msti), prio);
            }
            self.live.insert(name.to_string(), live);
        }
        let live = self.live.get_mut(name).expect("inserted above");
        if !restart {
            if *live.stp.config() != cfg {
                if let Err(e) = live.stp.set_config(cfg) {
                    tracing::error!("{name}: spanning-tree parameters refused: {e}");
                }
            }
            if live.region != region {
                live.stp.set_region(region.clone());
                live.region = region;
                // VIDs that changed tree take their new tree's state now (the engine reports
                // changes of state, not of the table).
                resync_states(live, sw);
            }
            for (&msti, &prio) in &conf.msti_priority {
                let _ = live.stp.set_msti_priority(TreeId(msti), prio);
            }
        }
        // Ports: the bridge's, but its host port.
        let ports: Vec<(PortId, String)> = sw
            .bridge_ports(b)
            .filter(|p| !matches!(sw.port_role(*p), Role::Host { .. }))
            .filter_map(|p| sw.port_name(p).map(|n| (p, n.to_string())))
            .collect();
        let gone: Vec<String> = live
            .numbers
            .keys()
            .filter(|n| !ports.iter().any(|(_, m)| m == *n))
            .cloned()
            .collect();
        for n in gone {
            if let Some(no) = live.numbers.remove(&n) {
                let _ = live.stp.remove_port(no);
                live.links.remove(&no);
                live.applied.remove(&no);
                live.applied_msti.remove(&no);
            }
        }
        for (id, pname) in &ports {
            let no = match live.numbers.get(pname) {
                Some(&no) => no,
                None => {
                    let Some(no) = (1..=4095u16).find(|n| !live.numbers.values().any(|m| m == n))
                    else {
                        tracing::error!(
                            "{name}: more than 4095 ports; {pname} has no spanning tree"
                        );
                        continue;
                    };
                    let pmac = sw.port_address(*id).unwrap_or(mac);
                    if let Err(e) = live.stp.add_port(no, mac_bytes(pmac)) {
                        tracing::error!("{name}: {pname}: {e}");
                        continue;
                    }
                    live.numbers.insert(pname.clone(), no);
                    no
                }
            };
            let opts = self.ports.get(pname).cloned().unwrap_or_default();
            if live.applied.get(&no) != Some(&opts) {
                apply_port_options(&mut live.stp, no, &opts, live.applied.get(&no));
                live.applied.insert(no, opts);
            }
            let per_msti = self.msti_ports.get(pname).cloned().unwrap_or_default();
            if live.applied_msti.get(&no).is_none_or(|a| *a != per_msti) {
                let before = live.applied_msti.remove(&no).unwrap_or_default();
                for (&m, &(prio, cost)) in &per_msti {
                    if let Err(e) = live.stp.set_msti_port(no, TreeId(m), prio, cost) {
                        tracing::debug!("{name}: {pname} in MSTI {m}: {e}");
                    }
                }
                // Settings removed go back to the defaults.
                for m in before.keys().filter(|m| !per_msti.contains_key(m)) {
                    let _ = live.stp.set_msti_port(no, TreeId(*m), 128, Cost::Auto);
                }
                live.applied_msti.insert(no, per_msti);
            }
            let link = if sw.port_running(*id) {
                Link::Up {
                    speed_mbps: self.speeds.get(pname).copied().unwrap_or(0),
                    duplex: Duplex::Full,
                }
            } else {
                Link::Down
            };
            if live.links.get(&no) != Some(&link) {
                let _ = live.stp.set_link(no, link);
                live.links.insert(no, link);
            }
        }
        self.drain(sw, name);
    }

    /// One second passed.
    pub fn tick(&mut self, sw: &mut Switch) {
        let names: Vec<String> = self.live.keys().cloned().collect();
        for n in names {
            if let Some(l) = self.live.get_mut(&n) {
                l.stp.tick();
            }
            self.drain(sw, &n);
        }
    }

    /// A BPDU port `id` received. Returns whether a spanning tree took it.
    pub fn receive(&mut self, sw: &mut Switch, id: PortId, frame: &[u8]) -> bool {
        let Some(b) = sw.port_master(id) else {
            return false;
        };
        let name = sw.bridge_name(b).to_string();
        let Some(pname) = sw.port_name(id).map(str::to_string) else {
            return false;
        };
        let Some(live) = self.live.get_mut(&name) else {
            return false;
        };
        let Some(&no) = live.numbers.get(&pname) else {
            return false;
        };
        if let Err(e) = live.stp.receive(no, frame) {
            tracing::debug!("{name}: {pname}: BPDU not taken: {e}");
        }
        self.drain(sw, &name);
        true
    }

    /// Applies bridge `name`'s engine outputs to the switch.
    fn drain(&mut self, sw: &mut Switch, name: &str) {
        let Some(live) = self.live.get_mut(name) else {
            return;
        };
        let outputs = live.stp.take_outputs();
        if outputs.is_empty() {
            return;
        }
        let mstp = live.stp.config().mode == qbridge_stp::Mode::Mstp;
        let by_no: BTreeMap<u16, String> = live
            .numbers
            .iter()
            .map(|(n, no)| (*no, n.clone()))
            .collect();
        let ids: BTreeMap<u16, PortId> = by_no
            .iter()
            .filter_map(|(no, n)| sw.port_id(n).ok().map(|id| (*no, id)))
            .collect();
        let port_of = |no: u16| ids.get(&no).copied();
        let now = live.stp.now();
        for out in outputs {
            match out {
                Output::Bpdu { port, frame } => {
                    if let Some(id) = port_of(port) {
                        self.bpdus.push((id, frame));
                    }
                }
                Output::PortState { port, tree, state } => {
                    let Some(id) = port_of(port) else { continue };
                    let vids = tree_vids(mstp, &live.region, tree);
                    if let Err(e) = sw.set_stp_state(id, &vids, state_of(state)) {
                        tracing::error!("{name}: port {port}: state not applied: {e}");
                    }
                    tracing::debug!(
                        "{name}: {} {} {:?}",
                        by_no.get(&port).map_or("?", String::as_str),
                        if tree == TreeId::CIST {
                            "cist".to_string()
                        } else {
                            format!("msti {}", tree.0)
                        },
                        state
                    );
                }
                Output::Flush { port, tree } => {
                    let Some(id) = port_of(port) else { continue };
                    let n = if mstp && tree != TreeId::CIST {
                        sw.stp_flush(id, Some(&tree_vids(true, &live.region, tree)))
                    } else if mstp {
                        sw.stp_flush(id, Some(&tree_vids(true, &live.region, TreeId::CIST)))
                    } else {
                        sw.stp_flush(id, None)
                    };
                    tracing::debug!("{name}: port {port}: topology change flushed {n} entries");
                }
                Output::Event(ev) => {
                    let text = describe(name, &by_no, &ev);
                    match ev {
                        Event::BpduGuardShut { .. } => tracing::warn!("{text}"),
                        Event::TopologyChange { .. } => tracing::debug!("{text}"),
                        _ => tracing::info!("{text}"),
                    }
                    if live.events.len() == EVENTS_KEPT {
                        live.events.pop_front();
                    }
                    live.events.push_back((now, ev));
                    self.fresh.push((name.to_string(), text, ev));
                }
            }
        }
    }
}

/// Gives every port of `live` the state the engine has for it in each tree, over the VIDs
/// the region gives the tree now.
fn resync_states(live: &Live, sw: &mut Switch) {
    let mstp = live.stp.config().mode == qbridge_stp::Mode::Mstp;
    let trees = live.stp.trees();
    let sets: Vec<(TreeId, VlanSet)> = trees
        .iter()
        .map(|t| (*t, tree_vids(mstp, &live.region, *t)))
        .collect();
    for (pname, &no) in &live.numbers {
        let Ok(id) = sw.port_id(pname) else { continue };
        for (t, vids) in &sets {
            if let Some(st) = live.stp.port_state(no, *t) {
                let _ = sw.set_stp_state(id, vids, state_of(st));
            }
        }
    }
}

/// An event in words, with port names: `br0: root 8000.0200000000aa via eth1`.
pub fn describe(bridge: &str, names: &BTreeMap<u16, String>, ev: &Event) -> String {
    use qbridge_stp::{Inconsistency, TcSource};
    let port = |p: &u16| {
        names
            .get(p)
            .map_or_else(|| format!("port {p}"), Clone::clone)
    };
    let change = |c: &Inconsistency| match c {
        Inconsistency::Entered => "holds",
        Inconsistency::Cleared => "releases",
    };
    match ev {
        Event::NewRoot { root, root_port } => match root_port {
            Some(p) => format!("{bridge}: root {root} via {}", port(p)),
            None => format!("{bridge}: root {root} (this bridge)"),
        },
        Event::TopologyChange { port: p, source } => format!(
            "{bridge}: topology change {} {}",
            match source {
                TcSource::Detected => "detected on",
                TcSource::Notified => "notified through",
            },
            port(p)
        ),
        Event::BpduGuardShut { port: p } => format!(
            "{bridge}: BPDU guard shut {}: an edge port heard a BPDU (link set dev {} guard off \
             re-admits it)",
            port(p),
            port(p)
        ),
        Event::RootInconsistent { port: p, change: c } => {
            format!("{bridge}: root guard {} {} discarding", change(c), port(p))
        }
        Event::LoopInconsistent { port: p, change: c } => {
            format!("{bridge}: loop guard {} {} discarding", change(c), port(p))
        }
        Event::ProtocolMigration { port: p, now_sends } => format!(
            "{bridge}: {} now sends {} BPDUs",
            port(p),
            match now_sends {
                qbridge_stp::SendProtocol::Rstp => "RST/MST",
                qbridge_stp::SendProtocol::Stp => "802.1D",
            }
        ),
    }
}

/// Gives the engine port `no`'s options; `before` are the options applied last (a value no
/// longer given goes back to its default).
fn apply_port_options(stp: &mut Stp, no: u16, o: &StpPortOptions, before: Option<&StpPortOptions>) {
    let first = before.is_none();
    let before = before.cloned().unwrap_or_default();
    let on = |v: bool| if v { OnOff::On } else { OnOff::Off };
    if first || o.cost != before.cost {
        let _ = stp.set_port_cost(no, o.cost.unwrap_or(Cost::Auto));
    }
    if first || o.priority != before.priority {
        let _ = stp.set_port_priority(no, o.priority.unwrap_or(128));
    }
    if first || o.p2p != before.p2p {
        let _ = stp.set_port_p2p(no, o.p2p.unwrap_or(PointToPoint::Auto));
    }
    let flags = [
        (PortFlag::AdminEdge, o.edge, before.edge, false),
        (PortFlag::AutoEdge, o.auto_edge, before.auto_edge, true),
        (PortFlag::BpduGuard, o.guard, before.guard, false),
        (
            PortFlag::BpduFilter,
            o.bpdu_filter,
            before.bpdu_filter,
            false,
        ),
        (PortFlag::RootGuard, o.root_block, before.root_block, false),
        (PortFlag::LoopGuard, o.loop_guard, before.loop_guard, false),
    ];
    for (flag, now, was, default) in flags {
        if first || now != was {
            let _ = stp.set_port_flag(no, flag, on(now.unwrap_or(default)));
        }
    }
    // Guard off again, or any option given anew, re-admits a port BPDU guard shut.
    if o.guard == Some(false) && before.guard == Some(true) {
        let _ = stp.set_port_admin(no, OnOff::On);
    }
}

impl Session {
    /// `link set dev PORT …` with spanning-tree options: the other options first (as without
    /// them), then the spanning-tree ones are kept for the port. Refused, with nothing
    /// changed, for a port that is in no bridge and not joining one.
    pub(super) fn set_port_stp(
        &mut self,
        dev: &str,
        id: PortId,
        opts: &crate::command::PortOptions,
    ) -> Result<String, ControlError> {
        use crate::command::{LinkCommand, MasterChange, PortOptions};
        let joins = matches!(opts.master, Some(MasterChange::Set(_)));
        let leaves = matches!(opts.master, Some(MasterChange::Unset));
        if leaves || (!joins && self.switch.port_master(id).is_none()) {
            return Err(ControlError::Stp(format!(
                "{dev} is in no bridge: spanning-tree options are for a bridge's ports"
            )));
        }
        let rest = PortOptions {
            stp: StpPortOptions::default(),
            ..opts.clone()
        };
        if rest != PortOptions::default() {
            self.link(
                &LinkCommand::SetPort {
                    dev: dev.to_string(),
                    opts: rest,
                },
                crate::command::OutputOptions::default(),
            )?;
        }
        let merged = self
            .stp
            .port_options(dev)
            .cloned()
            .unwrap_or_default()
            .merged(&opts.stp);
        self.stp.set_port_options(dev, merged);
        Ok(String::new())
    }

    /// `stp show|msti …`.
    pub(super) fn stp_command(
        &mut self,
        cmd: &crate::command::StpCommand,
        out: crate::command::OutputOptions,
    ) -> Result<String, ControlError> {
        use crate::command::StpCommand;
        match cmd {
            StpCommand::Show { dev } => {
                if let Some(d) = dev {
                    self.switch.bridge_id(d)?;
                    if self.stp.view(&self.switch, d).is_none() {
                        return Err(ControlError::Stp(format!(
                            "{d} has the spanning tree off (link set dev {d} type bridge \
                             stp_state 1)"
                        )));
                    }
                }
                let views: Vec<StpBridgeView<'_>> = self
                    .stp
                    .live_bridges()
                    .filter(|n| dev.as_deref().is_none_or(|d| d == *n))
                    .filter_map(|n| self.stp.view(&self.switch, n))
                    .collect();
                Ok(crate::render::stp::show(&views, out))
            }
            StpCommand::MstiMap { dev, vids, msti } => {
                self.switch.bridge_id(dev)?;
                if vids.end < vids.start {
                    return Err(qbridge_bridge::ConfigError::BadRange {
                        start: vids.start,
                        end: vids.end,
                    }
                    .into());
                }
                let mut conf = self.stp.conf(dev);
                for v in vids.start..=vids.end {
                    if *msti == 0 {
                        conf.msti_of_vid.remove(&v);
                    } else {
                        conf.msti_of_vid.insert(v, *msti);
                    }
                }
                self.stp.set_conf(dev, conf);
                Ok(String::new())
            }
            StpCommand::MstiPort {
                dev,
                msti,
                priority,
                cost,
            } => {
                let id = self.switch.port_id(dev)?;
                if self.switch.port_master(id).is_none() {
                    return Err(ControlError::Stp(format!(
                        "{dev} is in no bridge: spanning-tree options are for a bridge's ports"
                    )));
                }
                let per = self.stp.msti_ports.entry(dev.clone()).or_default();
                let cur = per.get(msti).copied().unwrap_or((128, Cost::Auto));
                per.insert(*msti, (priority.unwrap_or(cur.0), cost.unwrap_or(cur.1)));
                Ok(String::new())
            }
            StpCommand::MstiPriority {
                dev,
                msti,
                priority,
            } => {
                self.switch.bridge_id(dev)?;
                let mut conf = self.stp.conf(dev);
                conf.msti_priority.insert(*msti, *priority);
                self.stp.set_conf(dev, conf);
                Ok(String::new())
            }
        }
    }

    /// Records port `name`'s link speed (Mb/s, 0 unknown) for `cost auto`.
    pub fn set_link_speed(&mut self, name: &str, mbps: u32) {
        self.stp.set_speed(name, mbps);
    }

    /// The spanning trees follow the switch (after a link change the runtime saw).
    pub fn stp_sync(&mut self) {
        self.stp.sync(&mut self.switch);
    }

    /// One second passed for every spanning tree.
    pub fn stp_tick(&mut self) {
        self.stp.tick(&mut self.switch);
    }

    /// A trapped BPDU from port `id`; false when no spanning tree took it.
    pub fn stp_receive(&mut self, id: PortId, frame: &[u8]) -> bool {
        self.stp.receive(&mut self.switch, id, frame)
    }

    /// The BPDUs the spanning trees want sent, in order: (port, frame).
    pub fn stp_take_bpdus(&mut self) -> Vec<(PortId, Vec<u8>)> {
        self.stp.take_bpdus()
    }

    /// Spanning-tree events since the last call, for `monitor stp`: (bridge, text, event).
    pub fn stp_take_events(&mut self) -> Vec<(String, String, Event)> {
        self.stp.take_events()
    }

    /// The spanning trees, for `stp show` and the metrics.
    pub fn spanning_tree(&self) -> &SpanningTree {
        &self.stp
    }
}

impl SpanningTree {
    /// The spanning-tree lines of `show running-config`, after everything else (the ports
    /// exist and are in their bridges): each bridge's parameters when not the defaults, its MSTP
    /// region, each port's options, then `stp_state 1` for the bridges that run the tree.
    pub fn running_lines(&self, sw: &Switch, out: &mut String) {
        use crate::render::on_off;
        use qbridge_stp::Mode;
        use std::fmt::Write;
        let defaults = StpConf::default();
        for (b, name) in sw.bridge_ids() {
            let c = self.conf(name);
            if c.config != defaults.config {
                let k = &c.config;
                let mode = match k.mode {
                    Mode::Stp => "stp",
                    Mode::Rstp => "rstp",
                    Mode::Mstp => "mstp",
                };
                let _ = writeln!(
                    out,
                    "link set dev {name} type bridge stp_mode {mode} priority {} hello_time {} \
                     max_age {} forward_delay {} tx_hold_count {} max_hops {}",
                    k.priority,
                    k.hello_time,
                    k.max_age,
                    k.forward_delay,
                    k.tx_hold_count,
                    k.max_hops
                );
            }
            if let Some(n) = &c.mst_name {
                let _ = writeln!(out, "link set dev {name} type bridge mst_name {n}");
            }
            if c.mst_revision != 0 {
                let _ = writeln!(
                    out,
                    "link set dev {name} type bridge mst_revision {}",
                    c.mst_revision
                );
            }
            // Runs of VIDs with one MSTI as ranges.
            let mut run: Option<(u16, u16, u16)> = None;
            let flush = |r: (u16, u16, u16), out: &mut String| {
                let (a, z, m) = r;
                let vids = if a == z {
                    a.to_string()
                } else {
                    format!("{a}-{z}")
                };
                let _ = writeln!(out, "stp msti set dev {name} vid {vids} msti {m}");
            };
            for (&vid, &m) in &c.msti_of_vid {
                run = match run {
                    Some((a, z, rm)) if rm == m && z + 1 == vid => Some((a, vid, m)),
                    Some(r) => {
                        flush(r, out);
                        Some((vid, vid, m))
                    }
                    None => Some((vid, vid, m)),
                };
            }
            if let Some(r) = run {
                flush(r, out);
            }
            for (m, p) in &c.msti_priority {
                let _ = writeln!(out, "stp msti priority dev {name} msti {m} priority {p}");
            }
            for port in sw.bridge_ports(b) {
                let Some(pname) = sw.port_name(port) else {
                    continue;
                };
                let Some(o) = self.port_options(pname) else {
                    continue;
                };
                let mut words = String::new();
                if let Some(c) = o.cost {
                    match c {
                        Cost::Auto => words.push_str(" cost auto"),
                        Cost::Fixed(v) => {
                            let _ = write!(words, " cost {v}");
                        }
                    }
                }
                if let Some(p) = o.priority {
                    let _ = write!(words, " priority {p}");
                }
                let flags = [
                    ("guard", o.guard),
                    ("root_block", o.root_block),
                    ("bpdu_filter", o.bpdu_filter),
                    ("loop_guard", o.loop_guard),
                    ("edge", o.edge),
                    ("auto_edge", o.auto_edge),
                ];
                for (w, v) in flags {
                    if let Some(v) = v {
                        let _ = write!(words, " {w} {}", on_off(v));
                    }
                }
                if let Some(p) = o.p2p {
                    let w = match p {
                        PointToPoint::Auto => "auto",
                        PointToPoint::Yes => "yes",
                        PointToPoint::No => "no",
                    };
                    let _ = write!(words, " p2p {w}");
                }
                if !words.is_empty() {
                    let _ = writeln!(out, "link set dev {pname}{words}");
                }
            }
            for port in sw.bridge_ports(b) {
                let Some(pname) = sw.port_name(port) else {
                    continue;
                };
                for (m, (prio, cost)) in self.msti_port_options(pname).into_iter().flatten() {
                    let cost = match cost {
                        Cost::Auto => "auto".to_string(),
                        Cost::Fixed(v) => v.to_string(),
                    };
                    let _ = writeln!(
                        out,
                        "stp msti port dev {pname} msti {m} priority {prio} cost {cost}"
                    );
                }
            }
        }
        for (b, name) in sw.bridge_ids() {
            if sw.bridge_settings(b).stp {
                let _ = writeln!(out, "link set dev {name} type bridge stp_state 1");
            }
        }
    }
}
