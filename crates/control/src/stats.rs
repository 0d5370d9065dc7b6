//! The counter snapshot: every counter qbridge keeps, typed, read at one moment — per port
//! (the switch's, by [`DropReason`] name among them, and the backend's), per bridge and VLAN,
//! per mirror session, per worker — and the renderings that are not a show command's table:
//! `stats.json` ([`Snapshot::to_stats_json`]) and the port block of `link show -s`
//! ([`port_text`]). The daemon's `/metrics` (Prometheus, `crates/qbridge/src/metrics.rs`)
//! renders the same [`Snapshot`], which the engine takes between two commands
//! (`crates/datapath/src/snapshot.rs`) with [`Snapshot::take`] and the facts only it has.
//!
//! Imports [`crate::status`] only (no session, no render): a snapshot is taken from a switch and
//! a [`Backends`] lookup.

use crate::status::{BackendCounters, BackendStatus, Backends};
use qbridge_bridge::{BridgeId, DropReason, MirrorCounters, PortCounters, Switch, VlanCounters};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::fmt::Write;

/// Every counter, at one moment.
///
/// **Adding a counter.** A counter the switch keeps per port is a field of
/// [`PortCounters`] (`crates/bridge/src/counters.rs`, summed from the per-worker cells); one
/// the daemon's datapath keeps per port is a field of [`BackendCounters`]
/// (`crates/control/src/status.rs`, filled by the engine in `crates/datapath/src/snapshot.rs`
/// from the port's `PortShared`). Then one row in [`PORT_COUNTERS`] or [`BACKEND_COUNTERS`]
/// ([`VLAN_COUNTERS`], [`MIRROR_COUNTERS`] for those records) names it for `stats.json` and
/// Prometheus (key, metric, help) and places it on a line of the `link show -s` text
/// ([`Counter::text`]: `fdb`, `gso` or a new line); `link show -j -s` shows the struct's field
/// by itself (`stats` or `runtime`). A new drop reason is one line in `drop_reasons!` and
/// appears everywhere by its name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Every port, bridges' host ports included, in creation order ([`Switch::port_ids`]).
    pub ports: Vec<PortStats>,
    /// Every bridge, in bridge id order.
    pub bridges: Vec<BridgeStats>,
    /// Every mirror session, in creation order.
    pub mirrors: Vec<MirrorStats>,
    /// Frames handed in with a port id that names no port.
    pub unknown_port_drops: u64,
    /// Datapath worker threads (the switch's counter blocks offline).
    pub workers: usize,
    /// `--state FILE`: `Some(true)` when the last write of FILE failed (the running
    /// configuration is not on disk); `None` without `--state` (and offline).
    pub state_unsaved: Option<bool>,
    /// Every bond member, bonds in port order, members in failover order.
    pub bond_members: Vec<BondMemberStats>,
    /// Every bridge that runs the spanning tree, in name order.
    pub stp: Vec<StpStats>,
    /// The eBPF fast path while it runs (daemon only; `flows` not counted).
    pub fast_path: Option<crate::status::FastPathStatus>,
}

/// One bridge's spanning tree for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StpStats {
    pub bridge: String,
    /// This bridge is the (CIST) root.
    pub root: bool,
    pub topology_changes: u64,
    pub ports: Vec<StpPortStats>,
}

/// One spanning-tree port (CIST) for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StpPortStats {
    pub port: String,
    /// `root`, `designated`, `alternate`, `backup`, `master`, `disabled`.
    pub role: &'static str,
    /// 0 discarding, 1 learning, 2 forwarding.
    pub state: u8,
    pub bpdu_rx: u64,
    pub bpdu_tx: u64,
}

/// One bond member's LACP state and counters (the engine's), and its traffic through the
/// bond (a running daemon's backend status, zero offline).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BondMemberStats {
    pub bond: String,
    pub member: String,
    pub port_number: u16,
    pub link_up: bool,
    pub collecting: bool,
    pub distributing: bool,
    pub lacpdu_rx: u64,
    pub lacpdu_tx: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames dropped: received while the member was not collecting.
    pub rx_not_collecting: u64,
}

impl BondMemberStats {
    /// Every member of every bond of `sw`.
    pub fn take_all(sw: &Switch, backends: &impl Backends) -> Vec<BondMemberStats> {
        let mut out = Vec::new();
        for (_, name) in sw.port_ids() {
            let Some(crate::command::PortSpec::Bond(b)) = backends.port_spec(name) else {
                continue;
            };
            let view = backends.bond_view(name);
            let traffic = backends
                .backend_status(name)
                .map(|s| s.bond_members.as_slice())
                .unwrap_or_default();
            for m in &b.members {
                let t = traffic.iter().find(|t| t.name == m.name);
                let mv = view.as_ref().and_then(|v| {
                    v.members
                        .iter()
                        .find(|x| x.id.0 == u32::from(m.port_number))
                });
                let on = |v: qbridge_lacp::OnOff| v == qbridge_lacp::OnOff::On;
                out.push(BondMemberStats {
                    bond: name.to_string(),
                    member: m.name.clone(),
                    port_number: m.port_number,
                    link_up: mv.is_some_and(|v| v.link != qbridge_lacp::Link::Down),
                    collecting: mv.is_some_and(|v| on(v.collecting)),
                    distributing: mv.is_some_and(|v| on(v.distributing)),
                    lacpdu_rx: mv.map_or(0, |v| v.counters.rx_lacpdu),
                    lacpdu_tx: mv.map_or(0, |v| v.counters.tx_lacpdu),
                    rx_frames: t.map_or(0, |t| t.rx_frames),
                    rx_bytes: t.map_or(0, |t| t.rx_bytes),
                    tx_frames: t.map_or(0, |t| t.tx_frames),
                    tx_bytes: t.map_or(0, |t| t.tx_bytes),
                    rx_not_collecting: t.map_or(0, |t| t.rx_not_collecting),
                });
            }
        }
        out
    }
}

/// One port's counters and link facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortStats {
    pub id: u16,
    /// The port's name (a host port's is its bridge's).
    pub name: String,
    /// Its kind as `link show` names it (`afpacket`, `tap`, …).
    pub kind: Option<String>,
    /// Its bridge's name.
    pub master: Option<String>,
    /// Admin up and link up: the port forwards.
    pub running: bool,
    pub link_up: bool,
    /// Times the port's link went down (the engine's link watch; 0 offline).
    pub link_downs: u64,
    /// The switch's counters, summed over the workers; drops by reason, the backend's
    /// receive and transmit drops among them.
    pub counters: PortCounters,
    /// A running daemon's record of the backend, with its counters ([`BackendCounters`]);
    /// `None` offline.
    pub status: Option<BackendStatus>,
}

impl PortStats {
    /// Port `id`'s record: the switch's counters and what `backends` knows of it.
    pub fn take(sw: &Switch, id: qbridge_bridge::PortId, backends: &impl Backends) -> PortStats {
        let name = sw.port_name(id).unwrap_or_default().to_string();
        PortStats {
            id: id.0,
            kind: sw.port_kind(id).map(str::to_owned),
            master: sw.port_master(id).map(|b| sw.bridge_name(b).to_owned()),
            running: sw.port_running(id),
            link_up: sw.port_link_up(id),
            link_downs: 0,
            counters: sw.port_counters(id),
            status: backends.backend_status(&name).cloned(),
            name,
        }
    }

    /// The backend's counters (all zero offline).
    pub fn backend(&self) -> BackendCounters {
        self.status
            .as_ref()
            .map(|s| s.counters.clone())
            .unwrap_or_default()
    }
}

/// One bridge's FDB size and per-VLAN counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BridgeStats {
    pub name: String,
    /// FDB entries of every kind, and of them the learned ones.
    pub fdb_entries: usize,
    pub fdb_learned: usize,
    /// The VIDs some port of the bridge is a member of or that counted traffic (VID 0: frames
    /// of a VLAN-unaware bridge), in VID order.
    pub vlans: Vec<VlanStats>,
}

impl BridgeStats {
    /// Bridge `bid`'s record.
    pub fn take(sw: &Switch, bid: BridgeId) -> BridgeStats {
        let mut vids = bridge_vids(sw, bid);
        if sw.vlan_counters(bid, 0) != Default::default() {
            vids.insert(0);
        }
        let (fdb_entries, fdb_learned) = sw.fdb_len(bid);
        BridgeStats {
            name: sw.bridge_name(bid).to_owned(),
            fdb_entries,
            fdb_learned,
            vlans: vids
                .into_iter()
                .map(|vid| VlanStats {
                    vid,
                    counters: sw.vlan_counters(bid, vid),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VlanStats {
    pub vid: u16,
    #[serde(flatten)]
    pub counters: VlanCounters,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MirrorStats {
    pub name: String,
    #[serde(flatten)]
    pub counters: MirrorCounters,
}

/// How `stats.json` and Prometheus name a counter, and where its value is.
#[derive(Debug, Clone, Copy)]
pub struct Counter<T> {
    /// The key in `stats.json`.
    pub key: &'static str,
    /// The Prometheus family.
    pub metric: &'static str,
    /// The family's `# HELP`.
    pub help: &'static str,
    pub get: fn(&T) -> u64,
    /// Where `link show -s` writes it: `(line, word)` puts `word N` on the line `    line: …`
    /// (lines in the order of their first counter, words in table order); `None`: a line of
    /// its own that [`port_text`] writes (RX and TX, iproute2's shape).
    pub text: Option<(&'static str, &'static str)>,
}

/// The switch's per-port counters, as `stats.json` and Prometheus name them.
pub const PORT_COUNTERS: [Counter<PortCounters>; 7] = [
    Counter {
        key: "rx_frames",
        metric: "qbridge_port_rx_frames_total",
        help: "Frames received on the port.",
        get: |c| c.rx_frames,
        text: None,
    },
    Counter {
        key: "rx_bytes",
        metric: "qbridge_port_rx_bytes_total",
        help: "Bytes received on the port.",
        get: |c| c.rx_bytes,
        text: None,
    },
    Counter {
        key: "tx_frames",
        metric: "qbridge_port_tx_frames_total",
        help: "Frames the switch sent to the port (GSO super-frames count once).",
        get: |c| c.tx_frames,
        text: None,
    },
    Counter {
        key: "tx_bytes",
        metric: "qbridge_port_tx_bytes_total",
        help: "Bytes the switch sent to the port.",
        get: |c| c.tx_bytes,
        text: None,
    },
    Counter {
        key: "fdb_learn_refused",
        metric: "qbridge_port_fdb_learn_refused_total",
        help: "Addresses not learned because a limit was reached.",
        get: |c| c.fdb_learn_refused,
        text: Some(("fdb", "learn_refused")),
    },
    Counter {
        key: "fdb_evictions",
        metric: "qbridge_port_fdb_evictions_total",
        help: "Learned entries of the port evicted because the table was full.",
        get: |c| c.fdb_evictions,
        text: Some(("fdb", "evictions")),
    },
    Counter {
        key: "fdb_moves",
        metric: "qbridge_port_fdb_moves_total",
        help: "Times an address moved to the port.",
        get: |c| c.fdb_moves,
        text: Some(("fdb", "moves")),
    },
];

/// The backend's per-port counters, as Prometheus names them (`stats.json` has them under
/// `runtime`, by their field names).
pub const BACKEND_COUNTERS: [Counter<BackendCounters>; 4] = [
    Counter {
        key: "tx_sw_gso",
        metric: "qbridge_port_tx_sw_gso_total",
        help: "TCP super-frames segmented in software for the port (not drops).",
        get: |c| c.tx_sw_gso,
        text: Some(("gso", "tx_sw_gso")),
    },
    Counter {
        key: "tx_gso_refused",
        metric: "qbridge_port_tx_gso_refused_total",
        help: "TCP super-frames the kernel refused whole (its device would not segment them), \
               segmented in software and resent (not drops).",
        get: |c| c.tx_gso_refused,
        text: Some(("gso", "tx_gso_refused")),
    },
    Counter {
        key: "tx_gro_frames",
        metric: "qbridge_port_tx_gro_frames_total",
        help: "TCP super-frames made for the port from segments of one flow (GRO; not drops).",
        get: |c| c.tx_gro_frames,
        text: Some(("gso", "tx_gro_frames")),
    },
    Counter {
        key: "tx_gro_segments",
        metric: "qbridge_port_tx_gro_segments_total",
        help: "TCP segments merged into those super-frames (GRO).",
        get: |c| c.tx_gro_segments,
        text: Some(("gso", "tx_gro_segments")),
    },
];

/// A bridge's per-VLAN counters, as `stats.json` and Prometheus name them.
pub const VLAN_COUNTERS: [Counter<VlanCounters>; 4] = [
    Counter {
        key: "rx_frames",
        metric: "qbridge_vlan_rx_frames_total",
        help: "Frames admitted on the VLAN.",
        get: |c| c.rx_frames,
        text: None,
    },
    Counter {
        key: "rx_bytes",
        metric: "qbridge_vlan_rx_bytes_total",
        help: "Bytes admitted on the VLAN.",
        get: |c| c.rx_bytes,
        text: None,
    },
    Counter {
        key: "tx_frames",
        metric: "qbridge_vlan_tx_frames_total",
        help: "Copies sent on the VLAN.",
        get: |c| c.tx_frames,
        text: None,
    },
    Counter {
        key: "tx_bytes",
        metric: "qbridge_vlan_tx_bytes_total",
        help: "Bytes sent on the VLAN.",
        get: |c| c.tx_bytes,
        text: None,
    },
];

/// A mirror session's counters, as Prometheus names them (`stats.json` has the
/// [`MirrorCounters`] as they serialize).
pub const MIRROR_COUNTERS: [Counter<MirrorCounters>; 2] = [
    Counter {
        key: "frames",
        metric: "qbridge_mirror_frames_total",
        help: "Copies the mirror session delivered.",
        get: |c| c.frames,
        text: None,
    },
    Counter {
        key: "bytes",
        metric: "qbridge_mirror_bytes_total",
        help: "Bytes of the copies the mirror session delivered.",
        get: |c| c.bytes,
        text: None,
    },
];

/// VIDs of bridge `bid` that some port is a member of, or that have counted traffic (1-4094).
pub fn bridge_vids(sw: &Switch, bid: BridgeId) -> BTreeSet<u16> {
    let mut vids = BTreeSet::new();
    for view in sw.vlans(None).unwrap_or_default() {
        let on_bridge = sw
            .port_id(&view.ifname)
            .ok()
            .and_then(|p| sw.port_master(p))
            == Some(bid);
        if on_bridge {
            vids.extend(view.vlans.iter().map(|v| v.vlan));
        }
    }
    for vid in 1..4095u16 {
        if sw.vlan_counters(bid, vid) != Default::default() {
            vids.insert(vid);
        }
    }
    vids
}

impl Snapshot {
    /// The switch's counters and what `backends` records of each port. The facts only a
    /// running engine has (`link_downs`, `workers`, `state_unsaved`) are left for it to fill.
    pub fn take(sw: &Switch, backends: &impl Backends) -> Snapshot {
        let ports = sw
            .port_ids()
            .map(|(id, _)| PortStats::take(sw, id, backends))
            .collect();
        let bridges = sw
            .bridge_ids()
            .map(|(bid, _)| BridgeStats::take(sw, bid))
            .collect();
        let mirrors = sw
            .mirrors(true)
            .into_iter()
            .filter_map(|m| {
                m.stats.map(|counters| MirrorStats {
                    name: m.name,
                    counters,
                })
            })
            .collect();
        Snapshot {
            stp: Vec::new(),
            ports,
            bridges,
            mirrors,
            unknown_port_drops: sw.unknown_port_drops(),
            workers: sw.workers(),
            state_unsaved: None,
            bond_members: BondMemberStats::take_all(sw, backends),
            fast_path: None,
        }
    }

    /// The `stats.json` object (replay's `--stats`): `ports` by name (the [`PORT_COUNTERS`],
    /// `drops_total`, every reason under `drops`, the backend's record as `runtime`),
    /// `bridges` by name (FDB sizes, [`VLAN_COUNTERS`] by VID), `mirrors` by name,
    /// `unknown_port_drops`.
    pub fn to_stats_json(&self) -> Value {
        let mut ports = Map::new();
        for p in &self.ports {
            let c = &p.counters;
            let drops: Map<String, Value> = DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), json!(c.dropped(*r))))
                .collect();
            let mut port = Map::new();
            port.insert("id".into(), json!(p.id));
            port.insert("kind".into(), json!(p.kind));
            port.insert("master".into(), json!(p.master));
            for k in &PORT_COUNTERS {
                port.insert(k.key.into(), json!((k.get)(c)));
            }
            port.insert("drops_total".into(), json!(c.total_drops()));
            port.insert("drops".into(), Value::Object(drops));
            if let Some(rt) = &p.status {
                port.insert("runtime".into(), json!(rt));
            }
            ports.insert(p.name.clone(), Value::Object(port));
        }
        let mut bridges = Map::new();
        for b in &self.bridges {
            let mut vlans = Map::new();
            for v in &b.vlans {
                let counters: Map<String, Value> = VLAN_COUNTERS
                    .iter()
                    .map(|k| (k.key.to_string(), json!((k.get)(&v.counters))))
                    .collect();
                vlans.insert(v.vid.to_string(), Value::Object(counters));
            }
            bridges.insert(
                b.name.clone(),
                json!({ "fdb_entries": b.fdb_entries, "fdb_learned": b.fdb_learned, "vlans": vlans }),
            );
        }
        let mut mirrors = Map::new();
        for m in &self.mirrors {
            mirrors.insert(m.name.clone(), json!(m.counters));
        }
        json!({
            "ports": ports,
            "bridges": bridges,
            "mirrors": mirrors,
            "unknown_port_drops": self.unknown_port_drops,
        })
    }
}

/// The counter lines of one port in `link show -s`: RX, TX, drops by reason, FDB, PCP; then,
/// from a running daemon (`backend`), software GSO and GRO and the frames each worker
/// received.
/// The `    line: word N word N` lines of `table`'s counters that have a [`Counter::text`]
/// place, in table order.
fn text_lines<T>(s: &mut String, table: &[Counter<T>], c: &T) {
    let mut done: Vec<&str> = Vec::new();
    for row in table {
        let Some((line, _)) = row.text else { continue };
        if done.contains(&line) {
            continue;
        }
        done.push(line);
        let _ = write!(s, "    {line}:");
        for r in table {
            if let Some((l, word)) = r.text {
                if l == line {
                    let _ = write!(s, " {word} {}", (r.get)(c));
                }
            }
        }
        s.push('\n');
    }
}

/// The `link show -s` block of one port: RX, TX, drops by name, the table-placed lines
/// (`fdb`, and for a daemon's port `gso`), per-PCP receive counts and per-worker receive counts.
pub fn port_text(s: &mut String, c: &PortCounters, backend: Option<&BackendCounters>) {
    let _ = writeln!(s, "    RX: {} bytes {} packets", c.rx_bytes, c.rx_frames);
    let _ = writeln!(s, "    TX: {} bytes {} packets", c.tx_bytes, c.tx_frames);
    s.push_str("    drops:");
    let mut any = false;
    for r in DropReason::ALL {
        let n = c.dropped(*r);
        if n != 0 {
            let _ = write!(s, " {} {n}", r.name());
            any = true;
        }
    }
    if !any {
        s.push_str(" none");
    }
    s.push('\n');
    text_lines(s, &PORT_COUNTERS, c);
    if c.rx_pcp.iter().any(|&n| n != 0) {
        let by: Vec<String> = c
            .rx_pcp
            .iter()
            .enumerate()
            .filter(|(_, &n)| n != 0)
            .map(|(p, n)| format!("{p}:{n}"))
            .collect();
        let _ = writeln!(s, "    pcp: rx {}", by.join(" "));
    }
    if let Some(b) = backend {
        text_lines(s, &BACKEND_COUNTERS, b);
        if !b.rx_frames_by_worker.is_empty() {
            let by: Vec<String> = b.rx_frames_by_worker.iter().map(u64::to_string).collect();
            let _ = writeln!(s, "    workers: rx_frames {}", by.join(" "));
        }
    }
}
