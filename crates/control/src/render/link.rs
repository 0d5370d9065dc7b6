//! `link show [-s] [-j] [dev NAME]`: bridges and ports as `ip -d link show` shows them, with
//! each port's backend (from a [`Backends`] lookup) and, with `-s`, the port's record of the
//! counter snapshot ([`crate::stats::PortStats`]: the switch's counters and the backend's).
//!
//! Reads the switch and the lookup; knows nothing of the session.

use super::{format_secs, on_off, to_json};
use crate::command::{OutputOptions, PortSpec};
use crate::stats::{port_text, PortStats};
use crate::status::{BackendStatus, Backends};
use qbridge_bridge::{LinkView, PcpMode, PortCounters, Switch};
use serde::Serialize;
use std::fmt::Write;

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
    Bond {
        members: Vec<&'a str>,
    },
    Vxlan {
        /// `None`: an external port (`external: true`).
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<u32>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        external: bool,
        local: String,
        dstport: u16,
        #[serde(skip_serializing_if = "Option::is_none")]
        ttl: Option<u8>,
        /// The underlay device (`dev`), under ip -j -d's key for it.
        #[serde(skip_serializing_if = "Option::is_none")]
        link: Option<&'a str>,
        /// `inherit` or the byte in hex, as ip -j -d prints it.
        #[serde(skip_serializing_if = "Option::is_none")]
        tos: Option<String>,
        /// IPv6 underlays' zero-checksum options, under ip -j -d's keys (shown when set).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        udp_zero_csum6_tx: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        udp_zero_csum6_rx: bool,
        learning: bool,
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
    /// A bond's options and LACP state (`render/bond.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    bond: Option<super::bond::BondJson<'a>>,
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

fn link_json<'a>(
    sw: &Switch,
    backends: &'a impl Backends,
    l: &'a LinkView,
    stats: Option<&'a PortCounters>,
) -> LinkJson<'a> {
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
        stats,
        backend: backends
            .port_spec(&l.ifname)
            .map(|spec| backend_json(spec, &l.ifname)),
        runtime: backends.backend_status(&l.ifname),
        bond: match backends.port_spec(&l.ifname) {
            Some(PortSpec::Bond(b)) => {
                Some(super::bond::bond_json(b, backends.bond_view(&l.ifname)))
            }
            _ => None,
        },
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
        PortSpec::Bond(b) => BackendJson::Bond {
            members: b.members.iter().map(|m| m.name.as_str()).collect(),
        },
        PortSpec::Vxlan(v) => BackendJson::Vxlan {
            id: (!v.external).then_some(v.vni),
            external: v.external,
            local: v.local.to_string(),
            dstport: v.dstport,
            ttl: v.ttl,
            link: v.dev.as_deref(),
            tos: v.tos.map(crate::vxlan::tos_word),
            udp_zero_csum6_tx: v.udp6zerocsumtx,
            udp_zero_csum6_rx: v.udp6zerocsumrx,
            learning: v.learning,
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

/// The counter snapshot's record of the port behind link `l` (a bridge's: its host port's).
fn port_stats(sw: &Switch, backends: &impl Backends, l: &LinkView) -> Option<PortStats> {
    let id = match &l.bridge {
        Some(_) => sw.host_port(sw.bridge_id(&l.ifname).ok()?)?,
        None => sw.port_id(&l.ifname).ok()?,
    };
    Some(PortStats::take(sw, id, backends))
}

/// A link's state as `ip -br link` words it: `UP`; `DOWN` when set down; `LOWERLAYERDOWN`
/// when set up but its interface has no carrier; `UNKNOWN` for a bridge without its own
/// interface (it has no state of its own).
fn brief_state(l: &LinkView) -> &'static str {
    match &l.port {
        None => "UNKNOWN",
        Some(p) if !p.settings.up => "DOWN",
        Some(p) if !p.link_up => "LOWERLAYERDOWN",
        Some(_) => "UP",
    }
}

/// One `-br -j link show` object: ip -br -j's `ifname` and `operstate`, `link` and `master`
/// as `ip -j link show` has them, and the VLANs as `-c -j vlan show` gives them.
#[derive(Serialize)]
struct BriefJson<'a> {
    ifname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<&'a str>,
    operstate: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    master: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    vlans: Vec<super::VlanJson>,
}

/// `-br link show [dev NAME]`: one line per link, as `ip -br link`: the name (`NAME@LOWER`
/// for a stacked device), its state, its master, its VLANs
/// (`p1               UP             br0              pvid 10 untagged 10 tagged 11-12`).
fn links_brief(sw: &Switch, views: &[LinkView], out: OutputOptions) -> String {
    let vlans: Vec<qbridge_bridge::VlanView> = sw.vlans(None).unwrap_or_default();
    let vlans_of = |name: &str| vlans.iter().find(|v| v.ifname == name);
    if out.json {
        let v: Vec<BriefJson<'_>> = views
            .iter()
            .map(|l| BriefJson {
                ifname: &l.ifname,
                link: l.link.as_deref(),
                operstate: brief_state(l),
                master: l.master.as_deref(),
                vlans: vlans_of(&l.ifname)
                    .map(|v| super::vlan_entries(v, true, None))
                    .unwrap_or_default(),
            })
            .collect();
        return to_json(&v, out);
    }
    let mut s = String::new();
    for l in views {
        let name = match &l.link {
            Some(lower) => format!("{}@{lower}", l.ifname),
            None => l.ifname.clone(),
        };
        let line = format!(
            "{name:<name_col$} {:<state_col$} {:<name_col$} {}",
            brief_state(l),
            l.master.as_deref().unwrap_or(""),
            vlans_of(&l.ifname)
                .map(super::vlan_brief)
                .unwrap_or_default(),
            name_col = super::BRIEF_NAME_COL,
            state_col = super::BRIEF_STATE_COL,
        );
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// `link show [dev NAME]`: bridges first, then ports in id order; each port's backend from
/// `backends`, and with `-s` its counters; with `-br` one line per link.
pub fn links(
    sw: &Switch,
    backends: &impl Backends,
    dev: Option<&str>,
    out: OutputOptions,
) -> String {
    if out.brief {
        let views: Vec<LinkView> = sw
            .links(false)
            .into_iter()
            .filter(|l| dev.is_none_or(|d| d == l.ifname))
            .collect();
        return links_brief(sw, &views, out);
    }
    let views: Vec<(LinkView, Option<PortStats>)> = sw
        .links(false)
        .into_iter()
        .filter(|l| dev.is_none_or(|d| d == l.ifname))
        .map(|l| {
            let stats = out.stats.then(|| port_stats(sw, backends, &l)).flatten();
            (l, stats)
        })
        .collect();
    if out.json {
        let v: Vec<LinkJson<'_>> = views
            .iter()
            .map(|(l, st)| link_json(sw, backends, l, st.as_ref().map(|p| &p.counters)))
            .collect();
        return to_json(&v, out);
    }
    let mut s = String::new();
    for (l, stats) in &views {
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
            if let Some((ifname, netns)) = backends
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
            match backends.port_spec(&l.ifname) {
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
                Some(PortSpec::Vxlan(v)) => {
                    let _ = write!(s, " {}", v.words());
                }
                Some(PortSpec::Bond(b)) => {
                    let _ = write!(s, " {}", super::bond_options(&b.config));
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
        if let Some(rt) = backends.backend_status(&l.ifname) {
            runtime_text(&mut s, rt, p.link_up);
        }
        if let (true, Some(PortSpec::Bond(b))) = (out.details, backends.port_spec(&l.ifname)) {
            super::bond::bond_text(&mut s, b, backends.bond_view(&l.ifname).as_ref());
        }
        if let Some(ps) = stats {
            port_text(
                &mut s,
                &ps.counters,
                ps.status.as_ref().map(|st| &st.counters),
            );
        }
        if let (true, Some(rt)) = (out.stats, backends.backend_status(&l.ifname)) {
            super::bond::traffic_text(&mut s, &rt.bond_members, rt.bond_drops);
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
    if let Some(f) = rt.fast_path {
        let _ = write!(s, " fast_path {}", on_off(f));
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
