//! `link add|set|del|show`: devices (bridges, ports of every backend kind, stacked devices,
//! host ports) and their options, bridge and port settings.

use super::*;

pub(super) fn parse_link(w: &mut Words<'_>) -> Result<LinkCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "link",
            expected: LINK_COMMANDS,
        });
    };
    match command("link", cmd, words::LINK_COMMANDS, LINK_COMMANDS)? {
        "add" => parse_link_add(w),
        "set" => {
            let dev = w.device("device name after \"link set\"")?.to_string();
            if w.peek()
                .is_some_and(|t| lookup(t, words::LINK_SET_TYPE) == Lookup::Found("type"))
            {
                w.next();
                match w.value("type", "bridge, bridge_slave or bond")? {
                    "bridge" => {
                        let opts = parse_bridge_options(w)?;
                        return Ok(LinkCommand::SetBridge { dev, opts });
                    }
                    "bond" => {
                        let opts = parse_bond_options(w)?;
                        return Ok(LinkCommand::SetBond { dev, opts });
                    }
                    "bridge_slave" => {}
                    other => return Err(unexpected(other, "bridge, bridge_slave or bond")),
                }
            }
            let opts = parse_port_options(w)?;
            Ok(LinkCommand::SetPort { dev, opts })
        }
        "delete" => {
            let dev = w.device("device name after \"link del\"")?.to_string();
            w.end("nothing after the device name")?;
            Ok(LinkCommand::Del { dev })
        }
        // show, lst, list ("help" was taken by `parse_words`)
        _ => {
            let dev = match w.peek() {
                None => None,
                Some(_) => Some(w.device("device name")?.to_string()),
            };
            w.end("nothing after the device name")?;
            Ok(LinkCommand::Show { dev })
        }
    }
}

fn parse_link_add(w: &mut Words<'_>) -> Result<LinkCommand, ControlError> {
    // ip-link(8): `link add [link DEV] [name] NAME type KIND …`, `link DEV` before or after
    // the name.
    let (mut name, mut link, mut index) = (None, None, None);
    loop {
        let word = w.next();
        let kw = word.and_then(|wd| match lookup(wd, words::LINK_ADD) {
            Lookup::Found(k) => Some(k),
            _ => None,
        });
        match (kw, word) {
            (Some("type"), _) => break,
            (Some(kw @ "link"), _) => {
                set_once(&mut link, kw, w.value(kw, "the lower device's name")?)?
            }
            (Some(kw @ "name"), _) => set_once(&mut name, kw, w.value(kw, "a device name")?)?,
            (Some(kw @ "index"), _) => set_once(&mut index, kw, parse_index(w.value(kw, INDEX)?)?)?,
            (Some("dev"), _) if name.is_none() => name = Some(w.value("dev", "a device name")?),
            (None, Some(other)) if name.is_none() => name = Some(other),
            (_, Some(other)) => return Err(refuse(other, words::LINK_ADD, "type")),
            (_, None) if name.is_none() => {
                return Err(ControlError::MissingArgument {
                    what: "device name after \"link add\"",
                })
            }
            (_, None) => {
                return Err(ControlError::MissingArgument {
                    what: "\"type KIND\"",
                })
            }
        }
    }
    let name = name
        .ok_or(ControlError::MissingArgument {
            what: "device name after \"link add\"",
        })?
        .to_string();
    let kind = w.value("type", LINK_KINDS)?;
    let mut cmd = parse_link_kind(w, name, link, kind)?;
    match &mut cmd {
        LinkCommand::AddPort { index: slot, .. } => *slot = index,
        _ if index.is_some() => {
            return Err(unexpected(
                "index",
                "\"type KIND\" (a bridge takes no index)",
            ))
        }
        _ => {}
    }
    Ok(cmd)
}

/// The words of `index N`: a port id.
const INDEX: &str = "a port id (0-4095)";

fn parse_index(s: &str) -> Result<u16, ControlError> {
    const _: () = assert!(qbridge_bridge::MAX_PORTS == 4096);
    parse_uint("index", s, 4095, "0-4095").map(|n| n as u16)
}

/// `link add … type KIND ARGS`, after the name (and `link LOWER`).
fn parse_link_kind(
    w: &mut Words<'_>,
    name: String,
    link: Option<&str>,
    kind: &str,
) -> Result<LinkCommand, ControlError> {
    if let Some(link) = link {
        return parse_stacked(w, name, link.to_string(), kind);
    }
    match kind {
        "vlan" | "macvlan" => Err(ControlError::MissingArgument {
            what: "\"link LOWER\" (the device to stack on) before the name",
        }),
        "bridge" => Ok(LinkCommand::AddBridge {
            name,
            opts: parse_bridge_options(w)?,
        }),
        "bond" => {
            let opts = parse_bond_options(w)?;
            let base =
                qbridge_lacp::BondConfig::new(qbridge_lacp::Mode::ActiveBackup, MacAddr([0; 6]));
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Bond(Box::new(BondSpec {
                    config: opts.merge(base),
                    members: Vec::new(),
                })),
                index: None,
                peer_index: None,
            })
        }
        "pcap" => {
            w.end("nothing after \"type pcap\"")?;
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Pcap,
                index: None,
                peer_index: None,
            })
        }
        "afpacket" => {
            let (mut dev, mut bypass, mut ring) = (None, None, None);
            let table = [exact("dev"), exact("qdisc_bypass"), exact("ring_frames")];
            while let Some(kw) = w.next_kw(&table, "dev, qdisc_bypass or ring_frames")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a host interface name")?)?,
                    "qdisc_bypass" => {
                        let v = parse_on_off("qdisc_bypass", w.value(kw, ON_OFF)?)?;
                        set_once(&mut bypass, kw, v)?;
                    }
                    "ring_frames" => {
                        let v = w.value(kw, RING_FRAMES)?;
                        let n = parse_uint("ring_frames", v, MAX_RING_FRAMES, RING_RANGE)?;
                        if n < MIN_RING_FRAMES {
                            return Err(ControlError::OutOfRange {
                                what: "ring_frames",
                                value: v.to_string(),
                                range: RING_RANGE,
                            });
                        }
                        set_once(&mut ring, kw, n as u32)?;
                    }
                    other => return Err(unexpected(other, "dev, qdisc_bypass or ring_frames")),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev IFNAME\" for type afpacket",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::AfPacket {
                    dev,
                    qdisc_bypass: bypass.unwrap_or(true),
                    ring_frames: ring,
                },
                index: None,
                peer_index: None,
            })
        }
        "tap" => {
            let (mut ifname, mut netns) = (None, None);
            let table = [exact("ifname"), exact("netns")];
            while let Some(kw) = w.next_kw(&table, "ifname or netns")? {
                match kw {
                    "ifname" => set_once(&mut ifname, kw, w.value(kw, "a TAP device name")?)?,
                    "netns" => set_once(&mut netns, kw, w.value(kw, "a network namespace")?)?,
                    other => return Err(unexpected(other, "ifname or netns")),
                }
            }
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Tap {
                    ifname: ifname.map(str::to_string),
                    netns: netns.map(str::to_string),
                },
                index: None,
                peer_index: None,
            })
        }
        "afxdp" => {
            let (mut dev, mut queues, mut mode, mut zc) = (None, None, None, None);
            let table = [
                exact("dev"),
                exact("queues"),
                exact("mode"),
                exact("zerocopy"),
            ];
            while let Some(kw) = w.next_kw(&table, "dev, queues, mode or zerocopy")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a host interface name")?)?,
                    "queues" => {
                        let v = w.value(kw, "a number of device queues")?;
                        let n = parse_uint("queues", v, MAX_XDP_QUEUES, "1-64")?;
                        if n == 0 {
                            return Err(ControlError::OutOfRange {
                                what: "queues",
                                value: v.to_string(),
                                range: "1-64",
                            });
                        }
                        set_once(&mut queues, kw, n as u32)?;
                    }
                    "mode" => {
                        let v = match w.value(kw, "native or skb")? {
                            "native" => XdpAttach::Native,
                            "skb" => XdpAttach::Skb,
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "mode",
                                    value: other.to_string(),
                                    expected: "native or skb",
                                })
                            }
                        };
                        set_once(&mut mode, kw, v)?;
                    }
                    "zerocopy" => {
                        let v = parse_on_off("zerocopy", w.value(kw, ON_OFF)?)?;
                        set_once(&mut zc, kw, v)?;
                    }
                    other => return Err(unexpected(other, "dev, queues, mode or zerocopy")),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev IFNAME\" for type afxdp",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::AfXdp {
                    dev,
                    queues: queues.unwrap_or(1),
                    mode: mode.unwrap_or(XdpAttach::Native),
                    zerocopy: zc.unwrap_or(false),
                },
                index: None,
                peer_index: None,
            })
        }
        "vxlan" => super::vxlan::parse_vxlan(w, name),
        "patch" => {
            let (mut peer, mut peer_index) = (None, None);
            while let Some(kw) = w.next_kw(&[exact("peer"), exact("index")], "peer")? {
                match kw {
                    "peer" => set_once(&mut peer, kw, w.device("the peer port's name")?)?,
                    "index" if peer.is_some() => {
                        let i = parse_index(w.value(kw, INDEX)?)?;
                        set_once(&mut peer_index, kw, i)?;
                    }
                    other => return Err(unexpected(other, "peer")),
                }
            }
            let peer = peer
                .ok_or(ControlError::MissingArgument {
                    what: "\"peer NAME\" for type patch",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Patch { peer },
                index: None,
                peer_index,
            })
        }
        other => Err(ControlError::BadValue {
            what: "link type",
            value: other.to_string(),
            expected: LINK_KINDS,
        }),
    }
}

/// `… type vlan [protocol P] id VID [netns NS] [address MAC]` or
/// `… type macvlan mode MODE [netns NS] [address MAC]`, after `link add link LOWER NAME`.
fn parse_stacked(
    w: &mut Words<'_>,
    name: String,
    link: String,
    kind: &str,
) -> Result<LinkCommand, ControlError> {
    let (mut protocol, mut id, mut mode, mut netns, mut address) = (None, None, None, None, None);
    let vlan = match kind {
        "vlan" => true,
        "macvlan" => false,
        other => {
            return Err(ControlError::BadValue {
                what: "link type with \"link LOWER\"",
                value: other.to_string(),
                expected: "vlan or macvlan",
            })
        }
    };
    let expected = if vlan {
        "protocol, id, netns or address"
    } else {
        "mode, netns or address"
    };
    let table = if vlan {
        words::VLAN_DEVICE_OPTIONS
    } else {
        words::MACVLAN_OPTIONS
    };
    while let Some(kw) = w.next_kw(table, expected)? {
        match kw {
            "protocol" if vlan => {
                let v = w.value(kw, "802.1Q, 802.1ad or 0xHHHH")?;
                let t = parse_tpid(v)?.ok_or_else(|| ControlError::BadValue {
                    what: "protocol",
                    value: v.to_string(),
                    expected: "802.1Q, 802.1ad or 0xHHHH",
                })?;
                set_once(&mut protocol, kw, t)?;
            }
            "id" if vlan => set_once(&mut id, kw, parse_vid(w.value(kw, "a vid")?)?)?,
            "mode" if !vlan => {
                let v = w.value(kw, MACVLAN_MODES)?;
                let m = match v {
                    "private" => MacvlanMode::Private,
                    "vepa" => MacvlanMode::Vepa,
                    "bridge" => MacvlanMode::Bridge,
                    "passthru" => MacvlanMode::Passthru,
                    other => {
                        return Err(ControlError::BadValue {
                            what: "macvlan mode",
                            value: other.to_string(),
                            expected: MACVLAN_MODES,
                        })
                    }
                };
                set_once(&mut mode, kw, m)?;
            }
            "netns" => set_once(&mut netns, kw, w.value(kw, NETNS)?.to_string())?,
            "address" => set_once(
                &mut address,
                kw,
                parse_address(w.value(kw, "a MAC address")?)?,
            )?,
            other => return Err(unexpected(other, expected)),
        }
    }
    let spec = if vlan {
        PortSpec::Vlan {
            link,
            protocol: protocol.unwrap_or(Tpid(0x8100)),
            id: id.ok_or(ControlError::MissingArgument {
                what: "\"id VID\" for type vlan",
            })?,
            netns,
            address,
        }
    } else {
        PortSpec::Macvlan {
            link,
            mode: mode.ok_or(ControlError::MissingArgument {
                what: "\"mode private|vepa|bridge|passthru\" for type macvlan",
            })?,
            netns,
            address,
        }
    };
    Ok(LinkCommand::AddPort {
        name,
        spec,
        index: None,
        peer_index: None,
    })
}

const MACVLAN_MODES: &str = "private, vepa, bridge or passthru";
const NETNS: &str = "a network namespace";

/// The value of `address` (a device's MAC).
fn parse_address(v: &str) -> Result<MacAddr, ControlError> {
    v.parse().map_err(|_| ControlError::BadValue {
        what: "address",
        value: v.to_string(),
        expected: "a MAC address (aa:bb:cc:dd:ee:ff)",
    })
}

fn parse_bridge_options(w: &mut Words<'_>) -> Result<BridgeOptions, ControlError> {
    let mut o = BridgeOptions::default();
    while let Some(kw) = w.next_kw(words::BRIDGE_OPTIONS, BRIDGE_OPTIONS)? {
        match kw {
            "vlan_filtering" => {
                let v = match w.value(kw, "0 or 1")? {
                    "0" => false,
                    "1" => true,
                    other => {
                        return Err(ControlError::BadValue {
                            what: "vlan_filtering",
                            value: other.to_string(),
                            expected: "0 or 1",
                        })
                    }
                };
                set_once(&mut o.vlan_filtering, kw, v)?;
            }
            "vlan_protocol" => {
                let v = parse_vlan_protocol(w.value(kw, "802.1Q or 802.1ad")?)?;
                set_once(&mut o.vlan_protocol, kw, v)?;
            }
            "vlan_default_pvid" => {
                let s = w.value(kw, "a vid, or 0 for none")?;
                let v = if s == "0" { 0 } else { parse_vid(s)? };
                set_once(&mut o.vlan_default_pvid, kw, v)?;
            }
            "ageing_time" => {
                let v = parse_ageing_time(w.value(kw, "seconds")?)?;
                set_once(&mut o.ageing_time_ns, kw, v)?;
            }
            "fdb_max_learned" => {
                let v = w.value(kw, "a number, 0 for no limit")?;
                let v = parse_u32("fdb_max_learned", v, U32_RANGE)?;
                set_once(&mut o.fdb_max_learned, kw, v)?;
            }
            "group_fwd_mask" => {
                let v = w.value(kw, "a 16-bit mask")?;
                let v = parse_u16("group_fwd_mask", v, "0-0xffff")?;
                set_once(&mut o.group_fwd_mask, kw, v)?;
            }
            "fdb_max_entries" => {
                let v = w.value(kw, "a number of entries")?;
                let v = parse_u32("fdb_max_entries", v, "1-16777216")?;
                set_once(&mut o.fdb_max_entries, kw, v)?;
            }
            "learn_inner_vid" => {
                let v = parse_on_off("learn_inner_vid", w.value(kw, ON_OFF)?)?;
                set_once(&mut o.learn_inner_vid, kw, v)?;
            }
            "stp_state" | "stp_mode" | "priority" | "hello_time" | "max_age" | "forward_delay"
            | "tx_hold_count" | "max_hops" | "mst_name" | "mst_revision" => {
                super::stp::bridge_option(kw, w, &mut o)?
            }
            other => return Err(unexpected(other, BRIDGE_OPTIONS)),
        }
    }
    Ok(o)
}

fn parse_port_options(w: &mut Words<'_>) -> Result<PortOptions, ControlError> {
    let mut o = PortOptions::default();
    while let Some(kw) = w.next_kw(words::PORT_OPTIONS, PORT_OPTIONS)? {
        match kw {
            "master" => {
                let br = w.value(kw, "a bridge name")?;
                set_once(
                    &mut o.master,
                    "master/nomaster",
                    MasterChange::Set(br.to_string()),
                )?;
            }
            "nomaster" => set_once(&mut o.master, "master/nomaster", MasterChange::Unset)?,
            "up" => set_once(&mut o.up, "up/down", true)?,
            "down" => set_once(&mut o.up, "up/down", false)?,
            "learning" | "flood" | "mcast_flood" | "bcast_flood" | "isolated" | "hairpin"
            | "locked" | "mab" => {
                let (slot, name) = match kw {
                    "locked" => (&mut o.locked, "locked"),
                    "mab" => (&mut o.mab, "mab"),
                    "learning" => (&mut o.learning, "learning"),
                    "flood" => (&mut o.flood, "flood"),
                    "mcast_flood" => (&mut o.mcast_flood, "mcast_flood"),
                    "bcast_flood" => (&mut o.bcast_flood, "bcast_flood"),
                    "isolated" => (&mut o.isolated, "isolated"),
                    _ => (&mut o.hairpin, "hairpin"),
                };
                let v = parse_on_off(name, w.value(kw, ON_OFF)?)?;
                set_once(slot, kw, v)?;
            }
            "mtu" => {
                let v = parse_u32("mtu", w.value(kw, "a number of bytes")?, "68-65535")?;
                set_once(&mut o.mtu, kw, v)?;
            }
            "envhdr" => {
                match w.value(kw, "len N or len auto")? {
                    "len" => {}
                    other => return Err(unexpected(other, "len")),
                }
                let s = w.value("envhdr len", "a number of bytes or auto")?;
                let v = if s == "auto" {
                    None
                } else {
                    Some(parse_u32("envhdr len", s, "0-482")?)
                };
                set_once(&mut o.envhdr_len, "envhdr", v)?;
            }
            "tpid" => {
                let v = parse_tpid(w.value(kw, "0xHHHH or default")?)?;
                set_once(&mut o.tpid, kw, v)?;
            }
            "fdb_max_learned" => {
                let v = w.value(kw, "a number, 0 for no limit")?;
                let v = parse_u32("fdb_max_learned", v, U32_RANGE)?;
                set_once(&mut o.fdb_max_learned, kw, v)?;
            }
            "ifname" => set_once(&mut o.ifname, kw, w.value(kw, "a TAP name")?.to_string())?,
            "netns" => set_once(&mut o.netns, kw, w.value(kw, NETNS)?.to_string())?,
            "address" => set_once(
                &mut o.address,
                kw,
                parse_address(w.value(kw, "a MAC address")?)?,
            )?,
            "index" => set_once(&mut o.index, kw, parse_index(w.value(kw, INDEX)?)?)?,
            "vlan_mode" => {
                let v = w.value(kw, VLAN_MODES)?;
                let m = VlanModeKind::from_name(v).ok_or_else(|| ControlError::BadValue {
                    what: "vlan_mode",
                    value: v.to_string(),
                    expected: VLAN_MODES,
                })?;
                set_once(&mut o.vlan_mode, kw, m)?;
            }
            "tag" => set_once(&mut o.tag, kw, parse_vid(w.value(kw, "a VID (1-4094)")?)?)?,
            "trunks" => {
                let v = parse_vid_list("trunks", w.value(kw, VID_LIST)?, false)?;
                set_once(&mut o.trunks, kw, v)?;
            }
            "cvlans" => {
                let v = parse_vid_list("cvlans", w.value(kw, VID_LIST)?, true)?;
                set_once(&mut o.cvlans, kw, v)?;
            }
            "pcp_mode" => {
                let v = match w.value(kw, PCP_MODES)? {
                    "keep" => PcpMode::Keep,
                    "copy" => PcpMode::Copy,
                    "fixed" => PcpMode::Fixed(parse_pcp(w.value("fixed", "a PCP (0-7)")?)?),
                    "map" => PcpMode::Map(parse_pcp_map(w.value("map", PCP_MAP)?)?),
                    other => {
                        return Err(ControlError::BadValue {
                            what: "pcp_mode",
                            value: other.to_string(),
                            expected: PCP_MODES,
                        })
                    }
                };
                set_once(&mut o.pcp_mode, kw, v)?;
            }
            "default_pcp" => {
                let v = parse_pcp(w.value(kw, "a PCP (0-7)")?)?;
                set_once(&mut o.default_pcp, kw, v)?;
            }
            "cost" | "priority" | "guard" | "root_block" | "bpdu_filter" | "loop_guard"
            | "edge" | "auto_edge" | "p2p" => super::stp::port_option(kw, w, &mut o)?,
            other => return Err(unexpected(other, PORT_OPTIONS)),
        }
    }
    Ok(o)
}

const BOND_OPTIONS: &str = "mode, xmit_hash_policy, lacp_rate, lacp_active, min_links, miimon, \
                            lacp_fallback or address";
const BOND_MODES: &str = "active-backup, balance-xor or 802.3ad";
const HASH_POLICIES: &str = "layer2, layer2+vlan, layer3+4 or inner-layer3+4";

/// `… type bond [mode M] [xmit_hash_policy P] [lacp_rate slow|fast] [lacp_active on|off]
/// [min_links N] [miimon MS] [lacp_fallback on|off] [address MAC]` (ip-link(8)'s bond words,
/// plus qbridge's `lacp_fallback`).
fn parse_bond_options(w: &mut Words<'_>) -> Result<BondOptions, ControlError> {
    let mut o = BondOptions::default();
    while let Some(kw) = w.next_kw(words::BOND_OPTIONS, BOND_OPTIONS)? {
        match kw {
            "mode" => {
                let v = w.value(kw, BOND_MODES)?;
                let m = qbridge_lacp::Mode::from_word(v).ok_or_else(|| ControlError::BadValue {
                    what: "bond mode",
                    value: v.to_string(),
                    expected: BOND_MODES,
                })?;
                set_once(&mut o.mode, kw, m)?;
            }
            "xmit_hash_policy" => {
                let v = w.value(kw, HASH_POLICIES)?;
                let p = qbridge_lacp::HashPolicy::from_word(v).ok_or_else(|| {
                    ControlError::BadValue {
                        what: "xmit_hash_policy",
                        value: v.to_string(),
                        expected: HASH_POLICIES,
                    }
                })?;
                set_once(&mut o.xmit_hash_policy, kw, p)?;
            }
            "lacp_rate" => {
                let v = w.value(kw, "slow or fast")?;
                let r =
                    qbridge_lacp::LacpRate::from_word(v).ok_or_else(|| ControlError::BadValue {
                        what: "lacp_rate",
                        value: v.to_string(),
                        expected: "slow or fast",
                    })?;
                set_once(&mut o.lacp_rate, kw, r)?;
            }
            "lacp_active" => {
                let v = w.value(kw, ON_OFF)?;
                let a = qbridge_lacp::LacpActivity::from_word(v).ok_or_else(|| {
                    ControlError::BadValue {
                        what: "lacp_active",
                        value: v.to_string(),
                        expected: ON_OFF,
                    }
                })?;
                set_once(&mut o.lacp_active, kw, a)?;
            }
            "min_links" => {
                let v = parse_u16("min_links", w.value(kw, "a number of links")?, "0-65535")?;
                set_once(&mut o.min_links, kw, v)?;
            }
            "miimon" => {
                let v = w.value(kw, "milliseconds")?;
                let n = parse_uint("miimon", v, 60_000, "0-60000 ms")? as u32;
                set_once(&mut o.miimon, kw, n)?;
            }
            "lacp_fallback" => {
                let v = parse_on_off("lacp_fallback", w.value(kw, ON_OFF)?)?;
                set_once(&mut o.lacp_fallback, kw, v)?;
            }
            "address" => {
                let a = parse_address(w.value(kw, "a MAC address")?)?;
                if a.is_multicast() || a == MacAddr([0; 6]) {
                    return Err(ControlError::BadValue {
                        what: "bond address",
                        value: a.to_string(),
                        expected: "a unicast MAC address, not all zeros",
                    });
                }
                set_once(&mut o.address, kw, a)?;
            }
            other => return Err(unexpected(other, BOND_OPTIONS)),
        }
    }
    Ok(o)
}
