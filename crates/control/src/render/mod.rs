//! Output of the show commands: text shaped like iproute2's, and JSON (`-j`) with the keys
//! iproute2 uses where it has an equivalent.
//!
//! Text lines carry no trailing spaces (iproute2's do). JSON is one line per show command, or
//! indented with `-p`.
//!
//! Here `fdb show` and `vlan show` (with `-s`, from the counter snapshot's
//! [`BridgeStats`], and `map`); `link show` in [`link`]; `mirror show` in
//! [`crate::mirror`]. Every function reads a [`Switch`] (and for `link show` a
//! [`Backends`](crate::Backends) lookup), never the session; imports [`crate::stats`] and
//! [`crate::status`], not the session, the running configuration or the mirror module.

use crate::command::OutputOptions;
use crate::error::ControlError;
use crate::stats::{BridgeStats, VlanStats};
use qbridge_bridge::{FdbEntryView, FdbKind, Switch};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write;

mod bond;
pub mod link;
pub mod stp;

pub use bond::bond_options;
pub use link::links;

pub(crate) fn to_json<T: Serialize>(v: &T, out: OutputOptions) -> String {
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
pub(crate) struct VlanJson {
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
pub(crate) fn vlan_entries(
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

/// VIDs as a LIST in the words `trunks` takes: `1,10-20,30`.
fn vid_list(vids: impl IntoIterator<Item = u16>) -> String {
    let mut runs: Vec<(u16, u16)> = Vec::new();
    for v in vids {
        match runs.last_mut() {
            Some((_, z)) if *z + 1 == v => *z = v,
            _ => runs.push((v, v)),
        }
    }
    runs.iter()
        .map(|&(a, z)| {
            if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A port's VLANs in one phrase, for `-br`: `pvid 10 untagged 10 tagged 11-12` (each part
/// only when it has VIDs; the PVID's VID is in `untagged` or `tagged` as well). Empty when
/// the port is in no VLAN.
pub(crate) fn vlan_brief(view: &qbridge_bridge::VlanView) -> String {
    let has = |e: &qbridge_bridge::VlanEntryView, f: &str| e.flags.contains(&f);
    let pvid = view.vlans.iter().find(|e| has(e, "PVID"));
    let untagged = vid_list(
        view.vlans
            .iter()
            .filter(|e| has(e, "Egress Untagged"))
            .map(|e| e.vlan),
    );
    let tagged = vid_list(
        view.vlans
            .iter()
            .filter(|e| !has(e, "Egress Untagged"))
            .map(|e| e.vlan),
    );
    let mut parts = Vec::new();
    if let Some(e) = pvid {
        parts.push(format!("pvid {}", e.vlan));
    }
    if !untagged.is_empty() {
        parts.push(format!("untagged {untagged}"));
    }
    if !tagged.is_empty() {
        parts.push(format!("tagged {tagged}"));
    }
    parts.join(" ")
}

/// `-br` columns, as ip/ipaddress.c's brief output: the name `%-16s `, the state `%-14s `.
pub(crate) const BRIEF_NAME_COL: usize = 16;
pub(crate) const BRIEF_STATE_COL: usize = 14;

/// `-br vlan show [dev NAME] [vid V]`: one line per port, `p1  pvid 10 untagged 10 tagged
/// 11-12`; JSON as `-c -j vlan show`.
fn vlans_brief(views: &[qbridge_bridge::VlanView], vid: Option<u16>, out: OutputOptions) -> String {
    let shown = views
        .iter()
        .filter(|v| !v.vlans.is_empty())
        .filter(|v| vid.is_none_or(|only| v.vlans.iter().any(|e| e.vlan == only)));
    if out.json {
        let ports: Vec<PortVlansJson<'_>> = shown
            .map(|v| PortVlansJson {
                ifname: &v.ifname,
                vlans: vlan_entries(v, true, None),
            })
            .collect();
        return to_json(&ports, out);
    }
    let mut s = String::new();
    for v in shown {
        let _ = writeln!(s, "{:<BRIEF_NAME_COL$} {}", v.ifname, vlan_brief(v));
    }
    s
}

/// `vlan show [dev NAME] [vid V]`: iproute2's table, one VID per line, or one range per line
/// with `-c` (bridge/vlan.c `print_vlan_info`); with `-br` one line per port.
pub fn vlans(
    sw: &Switch,
    dev: Option<&str>,
    vid: Option<u16>,
    out: OutputOptions,
) -> Result<String, ControlError> {
    let views = sw.vlans(dev)?;
    if out.brief {
        return Ok(vlans_brief(&views, vid, out));
    }
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
        // The snapshot's record of the bridge; VID 0 (a VLAN-unaware bridge's frames) is not
        // a VLAN to show.
        let vlans: Vec<VlanStatsJson> = BridgeStats::take(sw, bid)
            .vlans
            .into_iter()
            .filter(|v| v.vid != 0)
            .filter(|v| vid.is_none_or(|only| only == v.vid))
            .filter(|v| only_port.is_none_or(|p| sw.vlan_membership(p, v.vid).is_some()))
            .map(|VlanStats { vid, counters: c }| VlanStatsJson {
                vid,
                rx_bytes: c.rx_bytes,
                rx_packets: c.rx_frames,
                tx_bytes: c.tx_bytes,
                tx_packets: c.tx_frames,
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

/// `show fast-path`: the eBPF fast path's state, its flows and its counters (`None`: not a
/// daemon).
pub fn fast_path(st: Option<&crate::status::FastPathStatus>, out: OutputOptions) -> String {
    let off = crate::status::FastPathStatus {
        mode: "off".into(),
        state: "off".into(),
        reason: Some("not a daemon".into()),
        ..Default::default()
    };
    let st = st.unwrap_or(&off);
    if out.json {
        return to_json(st, out);
    }
    let mut s = format!("fast-path {} (mode {})", st.state, st.mode);
    if let Some(r) = &st.reason {
        s.push_str(&format!(": {r}"));
    }
    s.push('\n');
    if st.state != "on" {
        return s;
    }
    let list = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    s.push_str(&format!(
        "    upcall {} ports {}\n    flows {} installed {} hits {}\n    misses: {}\n    not cached: {}\n    stale upcalls {} upcall ring full {} mirror copies failed {}\n",
        st.upcall.as_deref().unwrap_or("-"),
        if st.ports.is_empty() { "none".to_string() } else { st.ports.join(" ") },
        st.flows,
        st.installed,
        st.hits,
        list(&st.misses),
        list(&st.not_cached),
        st.stale_upcalls,
        st.upcall_ring_full,
        st.mirror_copies_failed
    ));
    s
}
