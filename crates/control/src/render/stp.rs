//! `stp show [dev BR]`: each bridge that runs the spanning tree, in text (in the manner of
//! mstpctl's `showbridge` and `showport`) and JSON (`-j`).

use super::to_json;
use crate::command::OutputOptions;
use qbridge_stp::{BridgeId, Event, PortRole, PortShow, PortState, RootStatus, TreeShow};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// What `stp show` reads of one bridge.
#[derive(Debug)]
pub struct StpBridgeView<'a> {
    pub name: &'a str,
    pub show: qbridge_stp::Show,
    /// Spanning-tree port number → port name.
    pub port_names: BTreeMap<u16, &'a str>,
    /// Recent events: (tick, event).
    pub events: Vec<(u64, Event)>,
    /// MSTP: the region's name, revision and digest.
    pub region: Option<(String, u16, [u8; 16])>,
}

/// A role as `stp show` and the metrics name it.
pub fn role_word(r: PortRole) -> &'static str {
    match r {
        PortRole::Disabled => "disabled",
        PortRole::Root => "root",
        PortRole::Designated => "designated",
        PortRole::Alternate => "alternate",
        PortRole::Backup => "backup",
        PortRole::Master => "master",
    }
}

fn state_word(s: PortState) -> &'static str {
    match s {
        PortState::Discarding => "discarding",
        PortState::Learning => "learning",
        PortState::Forwarding => "forwarding",
    }
}

fn mode_word(m: qbridge_stp::Mode) -> &'static str {
    match m {
        qbridge_stp::Mode::Stp => "stp",
        qbridge_stp::Mode::Rstp => "rstp",
        qbridge_stp::Mode::Mstp => "mstp",
    }
}

#[derive(Serialize)]
struct BridgeJson<'a> {
    bridge: &'a str,
    mode: &'static str,
    bridge_id: String,
    root_id: String,
    root: bool,
    root_port: Option<&'a str>,
    root_path_cost: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    regional_root: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    internal_root_path_cost: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<RegionJson>,
    max_age: u16,
    forward_delay: u16,
    hello_time: u16,
    topology_changes: u64,
    /// Seconds since the last topology change.
    time_since_topology_change: Option<u64>,
    ports: Vec<PortJson<'a>>,
    events: Vec<EventJson>,
}

#[derive(Serialize)]
struct RegionJson {
    name: String,
    revision: u16,
    digest: String,
}

#[derive(Serialize)]
struct PortJson<'a> {
    port: &'a str,
    number: u16,
    port_id: String,
    role: &'static str,
    state: &'static str,
    enabled: bool,
    path_cost: u32,
    designated_root: String,
    designated_bridge: String,
    designated_port: String,
    designated_cost: u32,
    edge: bool,
    point_to_point: bool,
    sends: &'static str,
    root_inconsistent: bool,
    loop_inconsistent: bool,
    counters: qbridge_stp::PortCounters,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mstis: Vec<MstiJson>,
}

#[derive(Serialize)]
struct MstiJson {
    msti: u16,
    role: &'static str,
    state: &'static str,
    path_cost: u32,
    designated_root: String,
    designated_bridge: String,
}

#[derive(Serialize)]
struct EventJson {
    /// Seconds ago.
    ago: u64,
    #[serde(flatten)]
    event: Event,
}

fn id(b: BridgeId) -> String {
    b.to_string()
}

fn port_json<'a>(v: &StpBridgeView<'a>, p: &PortShow) -> PortJson<'a> {
    PortJson {
        port: v.port_names.get(&p.port).copied().unwrap_or("?"),
        number: p.port,
        port_id: format!("{:?}", p.port_id),
        role: role_word(p.role),
        state: state_word(p.state),
        enabled: p.enabled,
        path_cost: p.path_cost,
        designated_root: id(p.designated_root),
        designated_bridge: id(p.designated_bridge),
        designated_port: format!("{:?}", p.designated_port),
        designated_cost: p.designated_cost,
        edge: p.edge,
        point_to_point: p.point_to_point,
        sends: match p.protocol {
            qbridge_stp::SendProtocol::Rstp => "rstp",
            qbridge_stp::SendProtocol::Stp => "stp",
        },
        root_inconsistent: p.root_inconsistent,
        loop_inconsistent: p.loop_inconsistent,
        counters: p.counters.clone(),
        mstis: p.mstis.iter().map(msti_json).collect(),
    }
}

fn msti_json(t: &TreeShow) -> MstiJson {
    MstiJson {
        msti: t.tree.0,
        role: role_word(t.role),
        state: state_word(t.state),
        path_cost: t.path_cost,
        designated_root: id(t.designated_root),
        designated_bridge: id(t.designated_bridge),
    }
}

fn bridge_json<'a>(v: &'a StpBridgeView<'a>) -> BridgeJson<'a> {
    let s = &v.show;
    let mstp = s.mode == qbridge_stp::Mode::Mstp;
    BridgeJson {
        bridge: v.name,
        mode: mode_word(s.mode),
        bridge_id: id(s.bridge_id),
        root_id: id(s.root_id),
        root: s.root_status == RootStatus::Root,
        root_port: s.root_port.and_then(|p| v.port_names.get(&p).copied()),
        root_path_cost: s.root_path_cost,
        regional_root: mstp.then(|| id(s.regional_root)),
        internal_root_path_cost: mstp.then_some(s.internal_root_path_cost),
        region: v
            .region
            .as_ref()
            .map(|(name, revision, digest)| RegionJson {
                name: name.clone(),
                revision: *revision,
                digest: hex(digest),
            }),
        max_age: s.max_age,
        forward_delay: s.forward_delay,
        hello_time: s.hello_time,
        topology_changes: s.topology_changes,
        time_since_topology_change: s.last_topology_change_tick.map(|t| s.now.saturating_sub(t)),
        ports: s.ports.iter().map(|p| port_json(v, p)).collect(),
        events: v
            .events
            .iter()
            .map(|(t, e)| EventJson {
                ago: s.now.saturating_sub(*t),
                event: *e,
            })
            .collect(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `stp show`: every view given, in order.
pub fn show(views: &[StpBridgeView<'_>], out: OutputOptions) -> String {
    if out.json {
        let all: Vec<BridgeJson<'_>> = views.iter().map(bridge_json).collect();
        return to_json(&all, out);
    }
    let mut o = String::new();
    for v in views {
        let b = bridge_json(v);
        let _ = writeln!(o, "{} ({}): bridge id {}", b.bridge, b.mode, b.bridge_id);
        match b.root_port {
            None if b.root => {
                let _ = writeln!(o, "  root {} (this bridge)", b.root_id);
            }
            port => {
                let _ = writeln!(
                    o,
                    "  root {} via {}, root path cost {}",
                    b.root_id,
                    port.unwrap_or("?"),
                    b.root_path_cost
                );
            }
        }
        if let (Some(rr), Some(ic)) = (&b.regional_root, b.internal_root_path_cost) {
            let _ = writeln!(o, "  regional root {rr}, internal root path cost {ic}");
        }
        if let Some(r) = &b.region {
            let _ = writeln!(
                o,
                "  region \"{}\" revision {} digest {}",
                r.name, r.revision, r.digest
            );
        }
        let tc = match b.time_since_topology_change {
            Some(t) => format!(", last {t} s ago"),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "  max age {} s, forward delay {} s, hello time {} s; topology changes {}{tc}",
            b.max_age, b.forward_delay, b.hello_time, b.topology_changes
        );
        let _ = writeln!(
            o,
            "  {:<12} {:<11} {:<11} {:>9} {:<5} {:<4} {:>9} {:>9}  flags",
            "port", "role", "state", "cost", "edge", "p2p", "bpdu rx", "bpdu tx"
        );
        for p in &b.ports {
            let c = &p.counters;
            let rx = c.rx_config + c.rx_tcn + c.rx_rst + c.rx_mst;
            let tx = c.tx_config + c.tx_tcn + c.tx_rst + c.tx_mst;
            let mut flags = Vec::new();
            if p.sends == "stp" {
                flags.push("sends-stp");
            }
            if p.root_inconsistent {
                flags.push("root-inconsistent");
            }
            if p.loop_inconsistent {
                flags.push("loop-inconsistent");
            }
            if !p.enabled {
                flags.push("disabled");
            }
            let _ = writeln!(
                o,
                "  {:<12} {:<11} {:<11} {:>9} {:<5} {:<4} {:>9} {:>9}  {}",
                p.port,
                p.role,
                p.state,
                p.path_cost,
                if p.edge { "yes" } else { "no" },
                if p.point_to_point { "yes" } else { "no" },
                rx,
                tx,
                flags.join(",")
            );
            for t in &p.mstis {
                let _ = writeln!(
                    o,
                    "    msti {:<6} {:<11} {:<11} {:>9}",
                    t.msti, t.role, t.state, t.path_cost
                );
            }
        }
    }
    o
}
