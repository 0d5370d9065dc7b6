//! Output of the show commands: text shaped like iproute2's, and JSON (`-j`) with the keys
//! iproute2 uses where it has an equivalent.
//!
//! Text lines carry no trailing spaces (iproute2's do). JSON is one line per show command, or
//! indented with `-p`.

use crate::command::{OutputOptions, PortSpec};
use crate::error::ControlError;
use crate::session::{BackendStatus, Session};
use qbridge_bridge::{DropReason, FdbEntryView, FdbKind, LinkView, PcpMode, PortCounters, Switch};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::fmt::Write;

fn to_json<T: Serialize>(v: &T, out: OutputOptions) -> String {
    let mut s = if out.pretty {
        serde_json::to_string_pretty(v)
    } else {
        serde_json::to_string(v)
    }
    .expect("views serialize");
    s.push('\n');
    s
}

/// Seconds from nanoseconds, without a fraction when whole: `300`, `1.5`.
pub fn format_secs(ns: u64) -> String {
    let (s, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        return s.to_string();
    }
    let f = format!("{frac:09}");
    format!("{s}.{}", f.trim_end_matches('0'))
}

pub(crate) fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

// ----- fdb -----

/// One `bridge -j fdb show` object: key names and order as bridge/fdb.c `print_fdb` (mac,
/// ifname, vlan, with `-s` `used` and `updated` from `fdb_print_stats`, flags, master, state).
#[derive(Serialize)]
struct FdbJson<'a> {
    mac: String,
    ifname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    vlan: Option<u16>,
    /// qbridge's: the inner C-VID of an entry learned per inner VID (`learn_inner_vid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    inner_vlan: Option<u16>,
    /// Seconds since the entry was last refreshed (`-s` only). qbridge does not track when an
    /// entry was last used as a destination: `used` is the same number.
    #[serde(skip_serializing_if = "Option::is_none")]
    used: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated: Option<u64>,
    flags: Vec<&'static str>,
    master: &'a str,
    state: &'static str,
}

/// iproute2's names for the entry kinds: learned and `dynamic` entries have no state word.
fn fdb_state(kind: FdbKind) -> &'static str {
    match kind {
        FdbKind::Dynamic => "",
        FdbKind::Static => "static",
        FdbKind::Permanent => "permanent",
    }
}

/// `fdb show`: `02:00:00:00:00:01 dev p1 vlan 10 master br0 static`.
pub fn fdb(entries: &[FdbEntryView], out: OutputOptions) -> String {
    if out.json {
        let v: Vec<FdbJson<'_>> = entries
            .iter()
            .map(|e| FdbJson {
                mac: e.mac.to_string(),
                ifname: &e.ifname,
                vlan: e.vlan,
                inner_vlan: e.inner_vlan,
                used: out.stats.then_some(e.idle_ns / 1_000_000_000),
                updated: out.stats.then_some(e.idle_ns / 1_000_000_000),
                flags: [
                    (e.extern_learn, "extern_learn"),
                    (e.sticky, "sticky"),
                    (e.locked, "locked"),
                ]
                .into_iter()
                .filter_map(|(on, f)| on.then_some(f))
                .collect(),
                master: &e.master,
                state: fdb_state(e.kind),
            })
            .collect();
        return to_json(&v, out);
    }
    let mut s = String::new();
    for e in entries {
        let _ = write!(s, "{} dev {}", e.mac, e.ifname);
        if let Some(v) = e.vlan {
            let _ = write!(s, " vlan {v}");
        }
        if let Some(v) = e.inner_vlan {
            let _ = write!(s, " inner_vlan {v}");
        }
        if out.stats {
            let _ = write!(s, " updated {}", e.idle_ns / 1_000_000_000);
        }
        if e.extern_learn {
            s.push_str(" extern_learn");
        }
        if e.sticky {
            s.push_str(" sticky");
        }
        if e.locked {
            s.push_str(" locked");
        }
        let _ = write!(s, " master {}", e.master);
        let state = fdb_state(e.kind);
        if !state.is_empty() {
            let _ = write!(s, " {state}");
        }
        s.push('\n');
    }
    s
}

// ----- vlan -----

/// bridge/vlan.c: `%-16s  ` (IFNAMSIZ and two spaces) before the VID.
const PORT_COL: usize = 18;

/// The header `vlan show` prints even when there is nothing under it (bridge/vlan.c
/// `vlan_show`), without iproute2's trailing spaces.
fn vlan_header(s: &mut String) {
    let _ = writeln!(s, "{:<PORT_COL$}vlan-id", "port");
}

/// One entry of `bridge -j vlan show`: bridge/vlan.c `print_vlan_info` — `vlan`, `vlanEnd`
/// for a range (`-c`, lib/json_print.c `print_range`), `flags` only when there are some
/// (lib/bridge.c `bridge_print_vlan_flags`).
#[derive(Serialize)]
struct VlanJson {
    vlan: u16,
    #[serde(rename = "vlanEnd", skip_serializing_if = "Option::is_none")]
    vlan_end: Option<u16>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    flags: Vec<&'static str>,
    /// qbridge's: the private-VLAN role (`vlan set … pvlan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pvlan: Option<String>,
    /// qbridge's: the learning limit (`vlan set … fdb_max_learned N violation V`).
    #[serde(skip_serializing_if = "Option::is_none")]
    fdb_max_learned: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    violation: Option<&'static str>,
}

#[derive(Serialize)]
struct PortVlansJson<'a> {
    ifname: &'a str,
    vlans: Vec<VlanJson>,
}

/// A port's VLANs as entries: one per VID, or with `compress` runs of consecutive VIDs with
/// the same flags as one range (the kernel's `RTEXT_FILTER_BRVLAN_COMPRESSED`; the PVID has
/// a flag no other VID has, so it stands alone). With `vid`, only the entry that holds it.
fn vlan_entries(
    view: &qbridge_bridge::VlanView,
    compress: bool,
    vid: Option<u16>,
) -> Vec<VlanJson> {
    let mut out: Vec<VlanJson> = Vec::new();
    for e in &view.vlans {
        if let Some(last) = out.last_mut() {
            let end = last.vlan_end.unwrap_or(last.vlan);
            if compress
                && e.vlan == end + 1
                && last.flags == e.flags
                && last.pvlan == e.pvlan
                && last.fdb_max_learned == e.fdb_max_learned
                && last.violation == e.violation.map(|v| v.as_str())
            {
                last.vlan_end = Some(e.vlan);
                continue;
            }
        }
        out.push(VlanJson {
            vlan: e.vlan,
            vlan_end: None,
            flags: e.flags.clone(),
            pvlan: e.pvlan.clone(),
            fdb_max_learned: e.fdb_max_learned,
            violation: e.violation.map(|v| v.as_str()),
        });
    }
    out.retain(|e| vid.is_none_or(|v| (e.vlan..=e.vlan_end.unwrap_or(e.vlan)).contains(&v)));
    out
}

/// `vlan show [dev NAME] [vid V]`: iproute2's table, one VID per line, or one range per line
/// with `-c` (bridge/vlan.c `print_vlan_info`).
pub fn vlans(
    sw: &Switch,
    dev: Option<&str>,
    vid: Option<u16>,
    out: OutputOptions,
) -> Result<String, ControlError> {
    let views = sw.vlans(dev)?;
    let ports: Vec<PortVlansJson<'_>> = views
        .iter()
        .map(|v| PortVlansJson {
            ifname: &v.ifname,
            vlans: vlan_entries(v, out.compress_vlans, vid),
        })
        .filter(|p| !p.vlans.is_empty())
        .collect();
    if out.json {
        return Ok(to_json(&ports, out));
    }
    let mut s = String::new();
    vlan_header(&mut s);
    for p in &ports {
        for (i, e) in p.vlans.iter().enumerate() {
            let name = if i == 0 { p.ifname } else { "" };
            let mut line = format!("{name:<PORT_COL$}{}", e.vlan);
            if let Some(end) = e.vlan_end {
                let _ = write!(line, "-{end}");
            }
            for f in &e.flags {
                line.push(' ');
                line.push_str(f);
            }
            if let Some(r) = &e.pvlan {
                let _ = write!(line, " pvlan {r}");
            }
            if let (Some(n), Some(v)) = (e.fdb_max_learned, e.violation) {
                let _ = write!(line, " fdb_max_learned {n} violation {v}");
            }
            s.push_str(&line);
            s.push('\n');
        }
    }
    Ok(s)
}

/// `vlan map show [dev NAME]`: `p1 vid 10 translate 100`; JSON
/// `[{"ifname":"p1","vid":10,"translate":100}]`.
/// What a 2:1 or 2:2 map translates to, in the words of `translate`: `V` or `S2 C2`.
pub fn tag_map_inside(m: &qbridge_bridge::TagMap) -> String {
    match m.inner {
        None => m.vid.to_string(),
        Some(c) => format!("{} {c}", m.vid),
    }
}

pub fn vlan_maps(
    sw: &Switch,
    dev: Option<&str>,
    out: OutputOptions,
) -> Result<String, ControlError> {
    let only = dev.map(|d| sw.port_id(d)).transpose()?;
    let mut rows = Vec::new();
    for (id, name) in sw.port_ids() {
        if only.is_some_and(|o| o != id) {
            continue;
        }
        for (wire, inside) in sw.vlan_maps(id) {
            rows.push(json!({"ifname": name, "vid": wire, "translate": inside}));
        }
        for (a, z, svid) in sw.cvid_maps(id) {
            let cvid = if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            };
            rows.push(json!({"ifname": name, "cvid": cvid, "svid": svid}));
        }
        for m in sw.tag_maps(id) {
            let mut row =
                json!({"ifname": name, "svid": m.svid, "cvid": m.cvid, "translate": m.vid});
            if let Some(c) = m.inner {
                row["translate_cvid"] = json!(c);
            }
            rows.push(row);
        }
    }
    if out.json {
        return Ok(to_json(&rows, out));
    }
    let mut s = String::new();
    for r in rows {
        let name = r["ifname"].as_str().unwrap_or("");
        let _ = match (r.get("cvid"), r.get("vid")) {
            (Some(Value::String(c)), _) => writeln!(s, "{name} cvid {c} svid {}", r["svid"]),
            (Some(c), _) => match r.get("translate_cvid") {
                Some(c2) => writeln!(
                    s,
                    "{name} svid {} cvid {c} translate {} {c2}",
                    r["svid"], r["translate"]
                ),
                None => writeln!(
                    s,
                    "{name} svid {} cvid {c} translate {}",
                    r["svid"], r["translate"]
                ),
            },
            _ => writeln!(s, "{name} vid {} translate {}", r["vid"], r["translate"]),
        };
    }
    Ok(s)
}

/// One entry of `bridge -j -s vlan show`: lib/bridge.c `bridge_print_vlan_stats` (`vid`,
/// then `bridge_print_vlan_stats_only`'s counters). qbridge's counters are per bridge and VID,
/// which have no flags: `flags` is never printed.
#[derive(Serialize)]
struct VlanStatsJson {
    vid: u16,
    rx_bytes: u64,
    rx_packets: u64,
    tx_bytes: u64,
    tx_packets: u64,
}

#[derive(Serialize)]
struct BridgeVlanStatsJson<'a> {
    ifname: &'a str,
    vlans: Vec<VlanStatsJson>,
}

/// VIDs of bridge `bid` that some port is a member of, or that have counted traffic.
fn bridge_vids(sw: &Switch, bid: qbridge_bridge::BridgeId) -> BTreeSet<u16> {
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

/// `vlan show -s [dev NAME] [vid V]`: per-VLAN counters of each bridge (of NAME's bridge, and
/// only NAME's VIDs, when NAME is a port).
pub fn vlan_stats(
    sw: &Switch,
    dev: Option<&str>,
    vid: Option<u16>,
    out: OutputOptions,
) -> Result<String, ControlError> {
    let (only_bridge, only_port) = match dev {
        None => (None, None),
        Some(d) if sw.is_bridge(d) => (Some(sw.bridge_id(d)?), None),
        Some(d) => {
            let pid = sw.port_id(d)?;
            (sw.port_master(pid), Some(pid))
        }
    };
    if dev.is_some() && only_bridge.is_none() {
        return Ok(if out.json {
            to_json(&Vec::<()>::new(), out)
        } else {
            let mut s = String::new();
            vlan_header(&mut s);
            s
        });
    }
    let mut all = Vec::new();
    for (bid, bname) in sw.bridge_ids() {
        if only_bridge.is_some_and(|b| b != bid) {
            continue;
        }
        let vlans: Vec<VlanStatsJson> = bridge_vids(sw, bid)
            .into_iter()
            .filter(|&v| vid.is_none_or(|only| only == v))
            .filter(|&vid| only_port.is_none_or(|p| sw.vlan_membership(p, vid).is_some()))
            .map(|vid| {
                let c = sw.vlan_counters(bid, vid);
                VlanStatsJson {
                    vid,
                    rx_bytes: c.rx_bytes,
                    rx_packets: c.rx_frames,
                    tx_bytes: c.tx_bytes,
                    tx_packets: c.tx_frames,
                }
            })
            .collect();
        if !vlans.is_empty() {
            all.push(BridgeVlanStatsJson {
                ifname: bname,
                vlans,
            });
        }
    }
    if out.json {
        return Ok(to_json(&all, out));
    }
    let mut s = String::new();
    vlan_header(&mut s);
    for b in &all {
        for (i, v) in b.vlans.iter().enumerate() {
            let name = if i == 0 { b.ifname } else { "" };
            let _ = writeln!(s, "{name:<PORT_COL$}{}", v.vid);
            let pad = "";
            let _ = writeln!(
                s,
                "{pad:<20}RX: {} bytes {} packets",
                v.rx_bytes, v.rx_packets
            );
            let _ = writeln!(
                s,
                "{pad:<20}TX: {} bytes {} packets",
                v.tx_bytes, v.tx_packets
            );
        }
    }
    Ok(s)
}

// ----- link -----

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum BackendJson<'a> {
    Pcap,
    Afpacket {
        dev: &'a str,
        qdisc_bypass: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        ring_frames: Option<u32>,
    },
    Tap {
        #[serde(skip_serializing_if = "Option::is_none")]
        ifname: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        netns: Option<&'a str>,
    },
    Patch {
        peer: &'a str,
    },
    Afxdp {
        dev: &'a str,
        queues: u32,
        mode: &'static str,
        zerocopy: bool,
    },
}

/// The TAP of a stacked device or host port, as `backend` in `link show -j`.
#[derive(Serialize)]
struct HostTapJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    ifname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    netns: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum AnyBackendJson<'a> {
    Port(BackendJson<'a>),
    HostTap(HostTapJson<'a>),
}

/// One `link show -j` object: the keys of `ip -j -d link show` where qbridge has the thing
/// (ip/ipaddress.c `print_linkinfo`: ifname, mtu, master, operstate, link, address,
/// linkinfo), then qbridge's own (`kind`, `bridge`, `port`, `stats`, `backend`, `runtime`).
#[derive(Serialize)]
struct LinkJson<'a> {
    ifname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    master: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operstate: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    linkinfo: Option<LinkInfoJson<'a>>,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    bridge: Option<&'a qbridge_bridge::BridgeSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<&'a qbridge_bridge::PortView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats: Option<&'a PortCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<AnyBackendJson<'a>>,
    /// Only from a running daemon: the backend's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a BackendStatus>,
}

/// `linkinfo` of `ip -j -d link show`: the device's kind and data, and as a bridge port the
/// port's (`info_slave_kind` "bridge").
#[derive(Serialize)]
struct LinkInfoJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    info_kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    info_data: Option<InfoDataJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    info_slave_kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    info_slave_data: Option<SlaveDataJson>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum InfoDataJson<'a> {
    Bridge(BridgeDataJson),
    Stacked(&'a qbridge_bridge::LinkInfoData),
}

/// A bridge's `info_data`: ip/iplink_bridge.c `bridge_print_opt`, its keys in its order, the
/// ones qbridge has; `ageing_time` in centiseconds as the kernel gives it, `group_fwd_mask` a
/// `%#llx` string (`print_0xhex`). `fdb_max_entries` is qbridge's.
#[derive(Serialize)]
struct BridgeDataJson {
    ageing_time: u64,
    vlan_filtering: u8,
    vlan_protocol: &'static str,
    fdb_n_learned: usize,
    fdb_max_learned: u32,
    vlan_default_pvid: u16,
    group_fwd_mask: String,
    fdb_max_entries: u32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    learn_inner_vid: bool,
}

/// A bridge port's `info_slave_data`: ip/iplink_bridge_slave.c `bridge_slave_print_opt`
/// (`print_on_off`: booleans in JSON), the ones qbridge has, in its order.
#[derive(Serialize)]
struct SlaveDataJson {
    hairpin: bool,
    learning: bool,
    flood: bool,
    mcast_flood: bool,
    bcast_flood: bool,
    isolated: bool,
}

/// The `%#llx` of iproute2's `print_0xhex`: `0` for zero, else `0x…`.
fn hex_0x(v: u16) -> String {
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

fn link_json<'a>(session: &'a Session, l: &'a LinkView) -> LinkJson<'a> {
    let sw = session.switch();
    let bridge_data = l.bridge.as_ref().map(|b| {
        let learned = sw
            .bridge_id(&l.ifname)
            .map(|id| sw.fdb_len(id).1)
            .unwrap_or(0);
        InfoDataJson::Bridge(BridgeDataJson {
            ageing_time: b.ageing_time_ns / 10_000_000,
            vlan_filtering: u8::from(b.vlan_filtering),
            vlan_protocol: b.vlan_protocol.as_str(),
            fdb_n_learned: learned,
            fdb_max_learned: b.fdb_max_learned,
            vlan_default_pvid: b.default_pvid,
            group_fwd_mask: hex_0x(b.group_fwd_mask),
            fdb_max_entries: b.fdb_max_entries,
            learn_inner_vid: b.learn_inner_vid,
        })
    });
    let (info_kind, info_data) = match (&l.linkinfo, bridge_data) {
        (_, Some(b)) => (Some("bridge"), Some(b)),
        (Some(i), None) => (Some(i.info_kind), Some(InfoDataJson::Stacked(&i.info_data))),
        (None, None) => (None, None),
    };
    let slave = match (&l.master, &l.port) {
        (Some(_), Some(p)) if l.bridge.is_none() => Some(SlaveDataJson {
            hairpin: p.settings.hairpin,
            learning: p.settings.learning,
            flood: p.settings.flood,
            mcast_flood: p.settings.mcast_flood,
            bcast_flood: p.settings.bcast_flood,
            isolated: p.settings.isolated,
        }),
        _ => None,
    };
    let linkinfo = (info_kind.is_some() || slave.is_some()).then(|| LinkInfoJson {
        info_kind,
        info_data,
        info_slave_kind: slave.as_ref().map(|_| "bridge"),
        info_slave_data: slave,
    });
    LinkJson {
        ifname: &l.ifname,
        mtu: l.port.as_ref().map(|p| p.settings.mtu),
        master: l.master.as_deref(),
        operstate: l.port.as_ref().map(|p| {
            if p.settings.up && p.link_up {
                "UP"
            } else {
                "DOWN"
            }
        }),
        link: l.link.as_deref(),
        address: l.address.as_deref(),
        linkinfo,
        kind: &l.kind,
        bridge: l.bridge.as_ref(),
        port: l.port.as_ref(),
        stats: l.stats.as_ref(),
        backend: session
            .port_spec(&l.ifname)
            .map(|spec| backend_json(spec, &l.ifname)),
        runtime: session.backend_status(&l.ifname),
    }
}

/// A port's backend for `link show -j`; for a VLAN device, a macvlan endpoint or a host port
/// the TAP it shows the host (`link`, `linkinfo` and `address` are in the link itself).
fn backend_json<'a>(spec: &'a PortSpec, port: &'a str) -> AnyBackendJson<'a> {
    AnyBackendJson::Port(match spec {
        PortSpec::Pcap => BackendJson::Pcap,
        PortSpec::AfPacket {
            dev,
            qdisc_bypass,
            ring_frames,
        } => BackendJson::Afpacket {
            dev,
            qdisc_bypass: *qdisc_bypass,
            ring_frames: *ring_frames,
        },
        PortSpec::Tap { ifname, netns } => BackendJson::Tap {
            ifname: ifname.as_deref(),
            netns: netns.as_deref(),
        },
        PortSpec::Patch { peer } => BackendJson::Patch { peer },
        PortSpec::AfXdp {
            dev,
            queues,
            mode,
            zerocopy,
        } => BackendJson::Afxdp {
            dev,
            queues: *queues,
            mode: mode.as_str(),
            zerocopy: *zerocopy,
        },
        PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
            let (ifname, netns) = spec.host_tap(port).unwrap_or((port, None));
            return AnyBackendJson::HostTap(HostTapJson {
                kind: "tap",
                ifname,
                netns,
            });
        }
    })
}

/// `link show [dev NAME]`: bridges first, then ports in id order.
pub fn links(session: &Session, dev: Option<&str>, out: OutputOptions) -> String {
    let views: Vec<LinkView> = session
        .switch()
        .links(out.stats)
        .into_iter()
        .filter(|l| dev.is_none_or(|d| d == l.ifname))
        .collect();
    if out.json {
        let v: Vec<LinkJson<'_>> = views.iter().map(|l| link_json(session, l)).collect();
        return to_json(&v, out);
    }
    let mut s = String::new();
    for l in &views {
        let _ = write!(s, "{}: {}", l.ifname, l.kind);
        if let Some(b) = &l.bridge {
            let _ = writeln!(
                s,
                " vlan_filtering {} vlan_protocol {} vlan_default_pvid {} ageing_time {} \
                 fdb_max_learned {} group_fwd_mask 0x{:x} fdb_max_entries {}{}",
                u8::from(b.vlan_filtering),
                b.vlan_protocol.as_str(),
                b.default_pvid,
                format_secs(b.ageing_time_ns),
                b.fdb_max_learned,
                b.group_fwd_mask,
                b.fdb_max_entries,
                if b.learn_inner_vid {
                    " learn_inner_vid on"
                } else {
                    ""
                },
            );
            if l.port.is_none() {
                continue;
            }
            s.push_str("    host port:");
            if let Some((ifname, netns)) = session
                .port_spec(&l.ifname)
                .and_then(|spec| spec.host_tap(&l.ifname))
            {
                let _ = write!(s, " ifname {ifname}");
                if let Some(n) = netns {
                    let _ = write!(s, " netns {n}");
                }
            }
            if let Some(a) = &l.address {
                let _ = write!(s, " address {a}");
            }
        } else {
            match session.port_spec(&l.ifname) {
                Some(PortSpec::AfPacket {
                    dev,
                    qdisc_bypass,
                    ring_frames,
                }) => {
                    let _ = write!(s, " dev {dev} qdisc_bypass {}", on_off(*qdisc_bypass));
                    if let Some(n) = ring_frames {
                        let _ = write!(s, " ring_frames {n}");
                    }
                }
                Some(PortSpec::Patch { peer }) => {
                    let _ = write!(s, " peer {peer}");
                }
                Some(PortSpec::AfXdp {
                    dev,
                    queues,
                    mode,
                    zerocopy,
                }) => {
                    let _ = write!(
                        s,
                        " dev {dev} queues {queues} mode {} zerocopy {}",
                        mode.as_str(),
                        on_off(*zerocopy)
                    );
                }
                Some(PortSpec::Tap { ifname, netns }) => {
                    if let Some(i) = ifname {
                        let _ = write!(s, " ifname {i}");
                    }
                    if let Some(n) = netns {
                        let _ = write!(s, " netns {n}");
                    }
                }
                Some(PortSpec::Vlan { netns, .. } | PortSpec::Macvlan { netns, .. }) => {
                    if let Some(lower) = &l.link {
                        let _ = write!(s, " link {lower}");
                    }
                    if let Some(info) = &l.linkinfo {
                        let d = &info.info_data;
                        if let (Some(p), Some(id)) = (&d.protocol, d.id) {
                            let _ = write!(s, " protocol {p} id {id}");
                        }
                        if let Some(m) = d.mode {
                            let _ = write!(s, " mode {m}");
                        }
                    }
                    if let Some(n) = netns {
                        let _ = write!(s, " netns {n}");
                    }
                    if let Some(a) = &l.address {
                        let _ = write!(s, " address {a}");
                    }
                }
                _ => {}
            }
        }
        if let Some(m) = &l.master {
            let _ = write!(s, " master {m}");
        }
        let Some(p) = &l.port else {
            s.push('\n');
            continue;
        };
        let st = &p.settings;
        let envhdr = match st.envhdr_len {
            Some(v) => v.to_string(),
            None => format!("auto ({})", p.envhdr_effective),
        };
        let tpid = match st.tpid {
            Some(t) => t.to_string(),
            None => format!("default ({})", p.tpid_effective),
        };
        let _ = writeln!(
            s,
            " state {} mtu {} envhdr len {} tpid {} max_frame {}",
            if st.up { "UP" } else { "DOWN" },
            st.mtu,
            envhdr,
            tpid,
            p.max_frame,
        );
        let _ = writeln!(
            s,
            "    learning {} flood {} mcast_flood {} bcast_flood {} isolated {} hairpin {} \
             fdb_max_learned {}",
            on_off(st.learning),
            on_off(st.flood),
            on_off(st.mcast_flood),
            on_off(st.bcast_flood),
            on_off(st.isolated),
            on_off(st.hairpin),
            st.fdb_max_learned,
        );
        if let Some(mode) = &p.vlan_mode {
            let _ = writeln!(s, "    {mode}");
        }
        if st.locked || st.mab {
            let _ = writeln!(s, "    locked {} mab {}", on_off(st.locked), on_off(st.mab));
        }
        if st.pcp_mode != PcpMode::Keep || st.default_pcp != 0 {
            let _ = writeln!(
                s,
                "    pcp_mode {} default_pcp {}",
                st.pcp_mode, st.default_pcp
            );
        }
        if let Some(rt) = session.backend_status(&l.ifname) {
            runtime_text(&mut s, rt, p.link_up);
        }
        if let Some(c) = &l.stats {
            port_stats_text(&mut s, c);
            if let Some(rt) = session.backend_status(&l.ifname) {
                let _ = writeln!(
                    s,
                    "    gso: tx_sw_gso {} tx_gso_refused {} tx_gro_frames {} tx_gro_segments {}",
                    rt.tx_sw_gso, rt.tx_gso_refused, rt.tx_gro_frames, rt.tx_gro_segments
                );
                if !rt.rx_frames_by_worker.is_empty() {
                    let by: Vec<String> =
                        rt.rx_frames_by_worker.iter().map(u64::to_string).collect();
                    let _ = writeln!(s, "    workers: rx_frames {}", by.join(" "));
                }
            }
        }
    }
    s
}

/// `    runtime: open link up device_mtu 1504 promisc on` (daemon only).
fn runtime_text(s: &mut String, rt: &BackendStatus, link_up: bool) {
    s.push_str(if rt.open {
        "    runtime: open"
    } else {
        "    runtime: closed"
    });
    let _ = write!(s, " link {}", if link_up { "up" } else { "down" });
    if let Some(i) = &rt.ifname {
        let _ = write!(s, " ifname {i}");
    }
    if let Some(m) = rt.device_mtu {
        let _ = write!(s, " device_mtu {m}");
    }
    if let Some(p) = rt.promisc {
        let _ = write!(s, " promisc {}", on_off(p));
    }
    if let Some(b) = rt.qdisc_bypass {
        let _ = write!(s, " qdisc_bypass {}", on_off(b));
    }
    if let Some(n) = rt.ring_frames {
        let _ = write!(s, " ring_frames {n}");
    }
    if let Some(e) = &rt.error {
        let _ = write!(s, " (error: {e})");
    }
    s.push('\n');
    if let Some(o) = &rt.offloads {
        let _ = write!(
            s,
            "    offload: tso4 {} tso6 {} tso_ecn {} sg {} csum4 {} csum6 {}",
            on_off(o.tso4),
            on_off(o.tso6),
            on_off(o.tso_ecn),
            on_off(o.sg),
            on_off(o.csum4),
            on_off(o.csum6)
        );
        if !o.refused_tag_depths.is_empty() {
            let depths: Vec<String> = o.refused_tag_depths.iter().map(u8::to_string).collect();
            let _ = write!(s, " refused_tag_depths {}", depths.join(","));
        }
        s.push('\n');
    }
}

fn port_stats_text(s: &mut String, c: &PortCounters) {
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
    let _ = writeln!(
        s,
        "    fdb: learn_refused {} evictions {} moves {}",
        c.fdb_learn_refused, c.fdb_evictions, c.fdb_moves
    );
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
}

// ----- stats.json -----

/// See [`Session::stats_json`].
pub fn stats_json(session: &Session) -> Value {
    let sw = session.switch();
    let mut ports = Map::new();
    for (id, name) in sw.port_ids() {
        let c = sw.port_counters(id);
        let drops: Map<String, Value> = DropReason::ALL
            .iter()
            .map(|r| (r.name().to_string(), json!(c.dropped(*r))))
            .collect();
        ports.insert(
            name.to_string(),
            json!({
                "id": id.0,
                "kind": sw.port_kind(id),
                "master": sw.port_master(id).map(|b| sw.bridge_name(b)),
                "rx_frames": c.rx_frames,
                "rx_bytes": c.rx_bytes,
                "tx_frames": c.tx_frames,
                "tx_bytes": c.tx_bytes,
                "fdb_learn_refused": c.fdb_learn_refused,
                "fdb_evictions": c.fdb_evictions,
                "fdb_moves": c.fdb_moves,
                "drops_total": c.total_drops(),
                "drops": drops,
            }),
        );
        if let (Some(rt), Some(Value::Object(port))) =
            (session.backend_status(name), ports.get_mut(name))
        {
            port.insert("runtime".into(), json!(rt));
        }
    }
    let mut bridges = Map::new();
    for (bid, bname) in sw.bridge_ids() {
        let mut vlans = Map::new();
        let mut vids = bridge_vids(sw, bid);
        if sw.vlan_counters(bid, 0) != Default::default() {
            vids.insert(0);
        }
        for vid in vids {
            let c = sw.vlan_counters(bid, vid);
            vlans.insert(
                vid.to_string(),
                json!({
                    "rx_frames": c.rx_frames,
                    "rx_bytes": c.rx_bytes,
                    "tx_frames": c.tx_frames,
                    "tx_bytes": c.tx_bytes,
                }),
            );
        }
        let (entries, learned) = sw.fdb_len(bid);
        bridges.insert(
            bname.to_string(),
            json!({ "fdb_entries": entries, "fdb_learned": learned, "vlans": vlans }),
        );
    }
    let mut mirrors = Map::new();
    for m in sw.mirrors(true) {
        if let Some(c) = &m.stats {
            mirrors.insert(m.name.clone(), json!(c));
        }
    }
    json!({
        "ports": ports,
        "bridges": bridges,
        "mirrors": mirrors,
        "unknown_port_drops": sw.unknown_port_drops(),
    })
}
