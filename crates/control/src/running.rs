//! `qbridge show running-config`: the whole configuration as a batch file that recreates it.
//!
//! Fed to a fresh daemon (`qbridge -batch FILE`, or the daemon's `--state FILE`), the file
//! gives the same `link show -j`, `vlan show -j` and `fdb show -j`. What it holds, in the
//! order a fresh switch needs it:
//! 1. every bridge with all its options (explicit, so a later change of a default cannot
//!    change a saved switch);
//! 2. every port in creation order (a stacked device after its lower device) with its backend,
//!    its port id (`index N`, so ids and the worker each port's queues go to survive) and the
//!    address of a device that has one (a random one stays the same); a bridge's host port as
//!    `link set dev BR up …`; a patch link once, with both ends' ids;
//! 3. every port's settings and master in one `link set` line;
//! 4. every VLAN of every bridge port, after removing the default PVID a port got on joining
//!    if it no longer has it; runs of VIDs with the same flags as one range;
//! 5. every FDB entry added by a command (static, permanent, and dynamic ones added with
//!    `fdb add … dynamic`), but not learned entries, nor the permanent entries a host port
//!    gets for its own address (its VLANs recreate them);
//! 6. every mirror session, in creation order (`mirror add …`);
//! 7. last, the spanning trees' settings, which the session holds: the session appends them
//!    ([`SpanningTree::running_lines`](crate::session::SpanningTree::running_lines),
//!    `session/stp.rs`), so this module reads a switch and a backend lookup only and imports
//!    nothing of the session (imports run one way: the session imports this module).
//!
//! Counters, learned entries and backend state are not configuration and are not saved.

use crate::command::{PortSpec, XdpAttach};
use crate::render::{self, on_off};
use crate::status::Backends;
use qbridge_bridge::tpid_name;
use qbridge_bridge::{BridgeId, FdbFilter, FdbKind, PortId, PvlanRole, Role, Switch};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The running configuration of switch `sw`, with its ports' backends from `backends`, as
/// batch-file text.
pub fn running_config(sw: &Switch, backends: &impl Backends) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# qbridge {} running configuration: 'qbridge -batch FILE' on a fresh daemon recreates it",
        env!("CARGO_PKG_VERSION")
    );
    for (b, name) in sw.bridge_ids() {
        let s = sw.bridge_settings(b);
        let _ = writeln!(
            out,
            "link add {name} type bridge vlan_filtering {} vlan_protocol {} vlan_default_pvid {} \
             ageing_time {} fdb_max_learned {} group_fwd_mask {} fdb_max_entries {}",
            u8::from(s.vlan_filtering),
            s.vlan_protocol.as_str(),
            s.default_pvid,
            seconds(s.ageing_time_ns),
            s.fdb_max_learned,
            s.group_fwd_mask,
            s.fdb_max_entries
        );
        if s.learn_inner_vid {
            // Shown when on (like `link show`): a line of its own keeps the one above as it
            // was for every other bridge.
            let _ = writeln!(out, "link set dev {name} type bridge learn_inner_vid on");
        }
    }
    let ports: Vec<(PortId, String)> = sw.port_ids().map(|(id, n)| (id, n.to_owned())).collect();
    let mut done = BTreeSet::new();
    for (id, name) in &ports {
        if done.contains(name) {
            continue;
        }
        if let Some(line) = create_line(sw, backends, *id, name, &mut done) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    for (id, name) in &ports {
        out.push_str(&settings_line(sw, *id, name));
        out.push('\n');
    }
    for (id, name) in &ports {
        vlan_lines(sw, *id, name, &mut out);
        pvlan_lines(sw, *id, name, &mut out);
        limit_lines(sw, *id, name, &mut out);
        for (wire, inside) in sw.vlan_maps(*id) {
            let _ = writeln!(out, "vlan map add dev {name} vid {wire} translate {inside}");
        }
        for (a, z, svid) in sw.cvid_maps(*id) {
            let cvid = if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            };
            let _ = writeln!(out, "vlan map add dev {name} cvid {cvid} svid {svid}");
        }
        for m in sw.tag_maps(*id) {
            let _ = writeln!(
                out,
                "vlan map add dev {name} svid {} cvid {} translate {}",
                m.svid,
                m.cvid,
                render::tag_map_inside(&m)
            );
        }
    }
    // External VXLAN ports' VLAN ↔ VNI maps, after the VLANs they map.
    for (_, name) in &ports {
        if let Some(PortSpec::Vxlan(v)) = backends.port_spec(name) {
            out.push_str(&v.tunnel_lines(name));
        }
    }
    fdb_lines(sw, &mut out);
    crate::mirror::running_lines(sw, &mut out);
    out
}

/// An ageing time in seconds as the grammar reads it: `300`, `1.5`, `0.000000001`.
fn seconds(ns: u64) -> String {
    render::format_secs(ns)
}

/// The name a command uses for port `id` as a lower device: a host port is its bridge.
fn lower_name(sw: &Switch, id: PortId) -> String {
    match sw.port_role(id) {
        Role::Host { bridge } => sw.bridge_name(BridgeId(bridge)).to_string(),
        _ => sw.port_name(id).unwrap_or_default().to_string(),
    }
}

/// The line that creates port `id` (`None` for a port without a backend spec).
fn create_line(
    sw: &Switch,
    backends: &impl Backends,
    id: PortId,
    name: &str,
    done: &mut BTreeSet<String>,
) -> Option<String> {
    let spec = backends.port_spec(name)?;
    done.insert(name.to_string());
    let index = id.0;
    let mut l = match spec {
        PortSpec::Pcap => format!("link add {name} index {index} type pcap"),
        PortSpec::AfPacket {
            dev,
            qdisc_bypass,
            ring_frames,
        } => {
            let mut l = format!(
                "link add {name} index {index} type afpacket dev {dev} qdisc_bypass {}",
                on_off(*qdisc_bypass)
            );
            if let Some(r) = ring_frames {
                let _ = write!(l, " ring_frames {r}");
            }
            l
        }
        PortSpec::Tap { ifname, netns } => {
            let mut l = format!("link add {name} index {index} type tap");
            if let Some(i) = ifname {
                let _ = write!(l, " ifname {i}");
            }
            if let Some(n) = netns {
                let _ = write!(l, " netns {n}");
            }
            l
        }
        PortSpec::AfXdp {
            dev,
            queues,
            mode,
            zerocopy,
        } => format!(
            "link add {name} index {index} type afxdp dev {dev} queues {queues} mode {} zerocopy {}",
            match mode {
                XdpAttach::Native => "native",
                XdpAttach::Skb => "skb",
            },
            on_off(*zerocopy)
        ),
        PortSpec::Patch { peer } => {
            done.insert(peer.clone());
            let peer_index = sw.port_id(peer).ok()?.0;
            format!("link add {name} index {index} type patch peer {peer} index {peer_index}")
        }
        PortSpec::Vlan { netns, .. } | PortSpec::Macvlan { netns, .. } => {
            let lower = lower_name(sw, PortId(sw.port_role(id).lower()?));
            let mut l = match sw.port_role(id) {
                Role::Vlan { tpid, vid, .. } => format!(
                    "link add link {lower} name {name} index {index} type vlan protocol {} id {vid}",
                    tpid_name(tpid)
                ),
                Role::Macvlan { mode, .. } => format!(
                    "link add link {lower} name {name} index {index} type macvlan mode {}",
                    mode.as_str()
                ),
                Role::Device | Role::Host { .. } => return None,
            };
            if let Some(n) = netns {
                let _ = write!(l, " netns {n}");
            }
            l
        }
        PortSpec::Bond(b) => bond_lines(name, index, b),
        PortSpec::Vxlan(v) => {
            let mut l = format!("link add {name} index {index} type vxlan {}", v.words());
            for r in &v.remotes {
                let verb = if r.mac.is_zero() { "append" } else { "add" };
                let vni = if v.external || r.vni != v.vni {
                    format!(" vni {}", r.vni)
                } else {
                    String::new()
                };
                let _ = write!(l, "\nfdb {verb} {} dev {name} dst {}{vni}", r.mac, r.dst);
                // A control plane's entry says so, as the bridge's extern_learn entries do.
                if r.origin == crate::vxlan::RemoteOrigin::ExternLearn {
                    l.push_str(" extern_learn");
                }
            }
            for line in v.vni_lines(name).lines() {
                let _ = write!(l, "\n{line}");
            }
            l
        }
        PortSpec::Host { ifname, netns, .. } => {
            let mut l = format!("link set dev {name} up index {index}");
            if let Some(i) = ifname {
                let _ = write!(l, " ifname {i}");
            }
            if let Some(n) = netns {
                let _ = write!(l, " netns {n}");
            }
            l
        }
    };
    if let Some(mac) = sw.port_mac(id) {
        let _ = write!(l, " address {mac}");
    }
    Some(l)
}

/// A bond: `link add B index I type bond …every option…`, then per member the line that
/// creates it as a port and `link set dev P master B` (members in failover order).
fn bond_lines(name: &str, index: u16, b: &crate::command::BondSpec) -> String {
    let mut l = format!(
        "link add {name} index {index} type bond {}",
        render::bond_options(&b.config)
    );
    for m in &b.members {
        if let PortSpec::AfPacket {
            dev,
            qdisc_bypass,
            ring_frames,
        } = &m.spec
        {
            let _ = write!(
                l,
                "\nlink add {} type afpacket dev {dev} qdisc_bypass {}",
                m.name,
                on_off(*qdisc_bypass)
            );
            if let Some(r) = ring_frames {
                let _ = write!(l, " ring_frames {r}");
            }
            let _ = write!(l, "\nlink set dev {} master {name}", m.name);
        }
    }
    l
}

/// `link set dev NAME [master BR] …every setting…`.
fn settings_line(sw: &Switch, id: PortId, name: &str) -> String {
    let s = sw.port_settings(id);
    let mut l = format!("link set dev {name}");
    if let Some(b) = sw.port_master(id) {
        if !matches!(sw.port_role(id), Role::Host { .. }) {
            let _ = write!(l, " master {}", sw.bridge_name(b));
        }
    }
    let _ = write!(
        l,
        " {} learning {} flood {} mcast_flood {} bcast_flood {} isolated {} hairpin {} mtu {}",
        if s.up { "up" } else { "down" },
        on_off(s.learning),
        on_off(s.flood),
        on_off(s.mcast_flood),
        on_off(s.bcast_flood),
        on_off(s.isolated),
        on_off(s.hairpin),
        s.mtu
    );
    match s.envhdr_len {
        Some(n) => {
            let _ = write!(l, " envhdr len {n}");
        }
        None => l.push_str(" envhdr len auto"),
    }
    match s.tpid {
        Some(t) => {
            let _ = write!(l, " tpid 0x{:04x}", t.0);
        }
        None => l.push_str(" tpid default"),
    }
    let _ = write!(
        l,
        " fdb_max_learned {} pcp_mode {} default_pcp {} locked {} mab {}",
        s.fdb_max_learned,
        s.pcp_mode,
        s.default_pcp,
        on_off(s.locked),
        on_off(s.mab)
    );
    if let Some(mode) = sw.port_vlan_mode(id) {
        let _ = write!(l, " {mode}");
    }
    l
}

/// The VLAN lines of bridge port `id`: the default PVID it got on joining removed if it no
/// longer has it, then its VIDs, runs with equal flags as ranges, the PVID alone.
fn vlan_lines(sw: &Switch, id: PortId, name: &str, out: &mut String) {
    let Some(b) = sw.port_master(id) else {
        return;
    };
    let self_ = if matches!(sw.port_role(id), Role::Host { .. }) {
        " self"
    } else {
        ""
    };
    // What the port has after its settings line: the VLANs its mode compiles into, else the
    // default PVID it got on joining. Those it no longer has go first, in runs.
    let baseline: Vec<u16> = match sw.port_vlan_mode(id) {
        Some(mode) => mode.membership().0.iter().collect(),
        None => {
            let d = sw.bridge_settings(b).default_pvid;
            if d == 0 {
                Vec::new()
            } else {
                vec![d]
            }
        }
    };
    let mut gone: Option<(u16, u16)> = None;
    let del = |r: Option<(u16, u16)>, out: &mut String| {
        if let Some((a, z)) = r {
            let vids = if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            };
            let _ = writeln!(out, "vlan del vid {vids} dev {name}{self_}");
        }
    };
    for vid in baseline {
        if sw.vlan_membership(id, vid).is_some() {
            del(gone.take(), out);
            continue;
        }
        gone = match gone {
            Some((a, z)) if z + 1 == vid => Some((a, vid)),
            g => {
                del(g, out);
                Some((vid, vid))
            }
        };
    }
    del(gone, out);
    // (first, last, untagged) runs of non-PVID VIDs.
    let mut run: Option<(u16, u16, bool)> = None;
    let flush = |run: Option<(u16, u16, bool)>, out: &mut String| {
        if let Some((a, z, untagged)) = run {
            let vids = if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            };
            let flag = if untagged { " untagged" } else { "" };
            let _ = writeln!(out, "vlan add vid {vids} dev {name}{flag}{self_}");
        }
    };
    for vid in 1..=4094u16 {
        match sw.vlan_membership(id, vid) {
            Some((true, untagged)) => {
                flush(run.take(), out);
                let flag = if untagged { " untagged" } else { "" };
                let _ = writeln!(out, "vlan add vid {vid} dev {name} pvid{flag}{self_}");
            }
            Some((false, untagged)) => match run {
                Some((a, z, u)) if z + 1 == vid && u == untagged => run = Some((a, vid, u)),
                _ => {
                    flush(run.take(), out);
                    run = Some((vid, vid, untagged));
                }
            },
            None => flush(run.take(), out),
        }
    }
    flush(run, out);
}

/// `vlan set vid V[-V2] dev NAME pvlan ROLE`: runs of VIDs with the same role.
fn pvlan_lines(sw: &Switch, id: PortId, name: &str, out: &mut String) {
    if sw.port_master(id).is_none() {
        return;
    }
    let self_ = if matches!(sw.port_role(id), Role::Host { .. }) {
        " self"
    } else {
        ""
    };
    let mut run: Option<(u16, u16, PvlanRole)> = None;
    let flush = |run: Option<(u16, u16, PvlanRole)>, out: &mut String| {
        if let Some((a, z, r)) = run {
            let vids = if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            };
            let _ = writeln!(out, "vlan set vid {vids} dev {name} pvlan {r}{self_}");
        }
    };
    for vid in 1..=4094u16 {
        match (sw.port_pvlan(id, vid), run) {
            (Some(r), Some((a, z, rr))) if rr == r && z + 1 == vid => run = Some((a, vid, r)),
            (Some(r), _) => {
                flush(run.take(), out);
                run = Some((vid, vid, r));
            }
            (None, _) => flush(run.take(), out),
        }
    }
    flush(run, out);
}

/// `vlan set vid V dev NAME fdb_max_learned N violation M`, one line per VID that has one.
fn limit_lines(sw: &Switch, id: PortId, name: &str, out: &mut String) {
    if sw.port_master(id).is_none() {
        return;
    }
    let self_ = if matches!(sw.port_role(id), Role::Host { .. }) {
        " self"
    } else {
        ""
    };
    for vid in 1..=4094u16 {
        if let Some((n, v)) = sw.port_vlan_limit(id, vid) {
            let _ = writeln!(
                out,
                "vlan set vid {vid} dev {name} fdb_max_learned {n} violation {}{self_}",
                v.as_str()
            );
        }
    }
}

/// Every FDB entry a command added, except a host port's own address.
fn fdb_lines(sw: &Switch, out: &mut String) {
    let Ok(entries) = sw.fdb_entries(&FdbFilter::default()) else {
        return;
    };
    for e in entries.iter().filter(|e| e.added_by_user) {
        let Ok(id) = resolve(sw, &e.ifname, &e.master) else {
            continue;
        };
        let host = matches!(sw.port_role(id), Role::Host { .. });
        if host && e.kind == FdbKind::Permanent && sw.port_mac(id) == Some(e.mac) {
            continue;
        }
        let filtering = sw
            .port_master(id)
            .is_some_and(|b| sw.bridge_settings(b).vlan_filtering);
        let vlan = match (e.vlan, e.inner_vlan) {
            (Some(v), Some(c)) => format!(" vlan {v} inner_vlan {c}"),
            (Some(v), None) => format!(" vlan {v}"),
            // The VLAN-0 entry alone; without `vlan` a filtering bridge adds one per VLAN.
            (None, _) if filtering => " vlan 0".to_string(),
            (None, _) => String::new(),
        };
        let kind = match e.kind {
            FdbKind::Static => "static",
            FdbKind::Dynamic => "dynamic",
            FdbKind::Permanent => "permanent",
        };
        let sticky = if e.sticky { " sticky" } else { "" };
        if e.extern_learn {
            let _ = writeln!(out, "fdb add {} dev {}{vlan} extern_learn", e.mac, e.ifname);
            continue;
        }
        let _ = writeln!(
            out,
            "fdb add {} dev {}{vlan} {kind}{sticky}",
            e.mac, e.ifname
        );
    }
}

/// Marks the end of the configuration text in a state file that changes were appended to
/// (the daemon's `--state FILE`, [`change_line`]): the lines after it are applied as
/// `qbridge apply` applies a file.
pub const CHANGES_MARKER: &str =
    "# changes since the configuration above, applied as 'qbridge apply' applies a file\n";

/// The line to append to a state file for `cmd` (given as `words`), a single command that
/// succeeded, when the command alone recreates its effect on the configuration above it,
/// applied with `apply`'s meaning: `None` for a command whose effect is not a function of the
/// configuration and the command alone (`link add` picks free interface indexes, `link del`
/// and `mirror` commands open and close backends and files) — the whole configuration is
/// written for those.
///
/// - `fdb add`/`fdb replace` and `fdb del`: rendered in the running configuration's words (an
///   `fdb add` of an entry that exists replaces it, an `fdb del` of an absent one does
///   nothing);
/// - `vlan add|del|set`, the VLAN maps, `link set` of a port or a bridge and `fdb flush`: the
///   command's own words, which the parser reads again the same way (names are single words
///   without control characters; a word with white space in it makes it `None`).
///
/// Replayed in order from the configuration they were appended after, these commands meet the
/// state they first met, so they do what they did; that makes a change O(the change) on the
/// disk, whatever the size of the FDB (issue 17 item 7).
pub fn change_line(cmd: &crate::Command, words: &[String]) -> Option<String> {
    use crate::command::{Command, FdbCommand, LinkCommand, VlanCommand};
    let vlan = |v: &Option<u16>, c: &Option<u16>| match (v, c) {
        (Some(v), Some(c)) => format!(" vlan {v} inner_vlan {c}"),
        (Some(v), None) => format!(" vlan {v}"),
        (None, _) => String::new(),
    };
    match cmd {
        Command::Fdb(FdbCommand::Add {
            mac,
            dev,
            vlan: v,
            inner_vlan,
            kind,
            sticky,
            replace: _,
            extern_learn,
        }) => {
            if *extern_learn {
                return Some(format!(
                    "fdb add {mac} dev {dev}{} extern_learn\n",
                    vlan(v, inner_vlan)
                ));
            }
            let kind = match kind {
                FdbKind::Static => "static",
                FdbKind::Dynamic => "dynamic",
                FdbKind::Permanent => "permanent",
            };
            let sticky = if *sticky { " sticky" } else { "" };
            Some(format!(
                "fdb add {mac} dev {dev}{} {kind}{sticky}\n",
                vlan(v, inner_vlan)
            ))
        }
        Command::Fdb(FdbCommand::Del {
            mac,
            dev,
            vlan: v,
            inner_vlan,
            self_,
            master,
            vni,
        }) => Some(format!(
            "fdb del {mac} dev {dev}{}{}{}{}\n",
            vlan(v, inner_vlan),
            vni.map_or(String::new(), |n| format!(" vni {n}")),
            if *self_ { " self" } else { "" },
            if *master { " master" } else { "" }
        )),
        Command::Fdb(FdbCommand::Flush { .. })
        | Command::Link(LinkCommand::SetPort { .. } | LinkCommand::SetBridge { .. })
        | Command::Vlan(
            VlanCommand::Add { .. }
            | VlanCommand::Del { .. }
            | VlanCommand::Set { .. }
            | VlanCommand::MapAdd { .. }
            | VlanCommand::MapDel { .. }
            | VlanCommand::CvidMapAdd { .. }
            | VlanCommand::CvidMapDel { .. }
            | VlanCommand::TagMapAdd { .. }
            | VlanCommand::TagMapDel { .. },
        ) => {
            let plain = |w: &String| !w.is_empty() && !w.chars().any(char::is_whitespace);
            words.iter().all(plain).then(|| {
                let mut line = words.join(" ");
                line.push('\n');
                line
            })
        }
        _ => None,
    }
}

/// The port an FDB entry's `ifname` names: a port, or (a host port's name being its bridge's)
/// the host port of bridge `master`.
fn resolve(sw: &Switch, ifname: &str, master: &str) -> Result<PortId, ()> {
    if let Ok(id) = sw.port_id(ifname) {
        return Ok(id);
    }
    let b = sw.bridge_id(master).map_err(|_| ())?;
    sw.host_port(b).ok_or(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_trip_the_grammar() {
        assert_eq!(seconds(300_000_000_000), "300");
        assert_eq!(seconds(1_500_000_000), "1.5");
        assert_eq!(seconds(1), "0.000000001");
        assert_eq!(seconds(0), "0");
    }
}
