//! `vlan add|del|set|show` (with `-s`) and `vlan map add|del|show`: VLAN membership, private
//! VLANs, learning limits and the 1:1, 2:1 and 2:2 tag maps.

use super::*;

pub(super) fn parse_vlan(w: &mut Words<'_>) -> Result<VlanCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "vlan",
            expected: VLAN_COMMANDS,
        });
    };
    match command("vlan", cmd, words::VLAN_COMMANDS, VLAN_COMMANDS)? {
        cmd @ ("add" | "delete") => {
            let add = cmd == "add";
            let (mut vids, mut dev, mut pvid, mut untagged) = (None, None, None, None);
            let (mut target, mut tunnel) = (None, None);
            let (table, expected) = if add {
                (
                    words::VLAN_ADD,
                    "vid, dev, pvid, untagged, self, master or tunnel_info",
                )
            } else {
                (words::VLAN_DEL, "vid, dev, self, master or tunnel_info")
            };
            while let Some(kw) = w.next_kw(table, expected)? {
                match kw {
                    "vid" => {
                        let r = parse_vid_range(w.value(kw, "V or V-V2")?)?;
                        set_once(&mut vids, kw, r)?;
                    }
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "pvid" if add => set_once(&mut pvid, kw, true)?,
                    "untagged" if add => set_once(&mut untagged, kw, true)?,
                    "self" => set_once(&mut target, "self/master", true)?,
                    "master" => set_once(&mut target, "self/master", false)?,
                    "tunnel_info" => set_once(&mut tunnel, kw, parse_tunnel_info(w, add)?)?,
                    other => return Err(unexpected(other, expected)),
                }
            }
            let vids = vids.ok_or(ControlError::MissingArgument {
                what: "\"vid V[-V2]\"",
            })?;
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev NAME\"",
                })?
                .to_string();
            if let Some(vnis) = tunnel {
                let others = [
                    (pvid.is_some(), "pvid"),
                    (untagged.is_some(), "untagged"),
                    (target.is_some(), "self/master"),
                ];
                if let Some(&(_, word)) = others.iter().find(|x| x.0) {
                    return Err(unexpected(
                        word,
                        "no pvid, untagged, self or master with tunnel_info",
                    ));
                }
                if vids.end < vids.start {
                    return Err(ControlError::BadValue {
                        what: "vid",
                        value: format!("{}-{}", vids.start, vids.end),
                        expected: "V or V-V2 with V2 not below V",
                    });
                }
                return Ok(match (add, vnis) {
                    (true, Some(vnis)) => VlanCommand::TunnelAdd { dev, vids, vnis },
                    _ => VlanCommand::TunnelDel { dev, vids, vnis },
                });
            }
            let self_ = target.unwrap_or(false);
            Ok(if add {
                VlanCommand::Add {
                    dev,
                    vids,
                    pvid: pvid.is_some(),
                    untagged: untagged.is_some(),
                    self_,
                }
            } else {
                VlanCommand::Del { dev, vids, self_ }
            })
        }
        "map" => parse_vlan_map(w),
        "tunnelshow" => {
            let mut dev = None;
            while let Some(kw) = w.next_kw(words::VLAN_TUNNELSHOW, "dev")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
                    other => return Err(unexpected(other, "dev")),
                }
            }
            Ok(VlanCommand::TunnelShow { dev })
        }
        "set" => {
            let (mut vids, mut dev, mut role, mut self_) = (None, None, None, None);
            let (mut limit, mut violation) = (None, None);
            let expected = "vid, dev, pvlan, fdb_max_learned, violation or self";
            while let Some(kw) = w.next_kw(words::VLAN_SET, expected)? {
                match kw {
                    "vid" => {
                        let r = parse_vid_range(w.value(kw, "V or V-V2")?)?;
                        set_once(&mut vids, kw, r)?;
                    }
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "self" => set_once(&mut self_, kw, true)?,
                    "pvlan" => {
                        let r = match w.value(kw, PVLAN_ROLES)? {
                            "promiscuous" => Some(PvlanRole::Promiscuous),
                            "isolated" => Some(PvlanRole::Isolated),
                            "none" => None,
                            "community" => {
                                let n = w.value("community", "a community number")?;
                                Some(PvlanRole::Community(parse_uint(
                                    "community",
                                    n,
                                    65000,
                                    "0-65000",
                                )?
                                    as u16))
                            }
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "pvlan",
                                    value: other.to_string(),
                                    expected: PVLAN_ROLES,
                                })
                            }
                        };
                        set_once(&mut role, kw, r)?;
                    }
                    "fdb_max_learned" => {
                        let v = w.value(kw, "a number, 0 for no limit")?;
                        let n = parse_uint("fdb_max_learned", v, 0x00ff_ffff, "0-16777215")?;
                        set_once(&mut limit, kw, n as u32)?;
                    }
                    "violation" => {
                        let v = match w.value(kw, VIOLATIONS)? {
                            "protect" => Violation::Protect,
                            "restrict" => Violation::Restrict,
                            "shutdown" => Violation::Shutdown,
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "violation",
                                    value: other.to_string(),
                                    expected: VIOLATIONS,
                                })
                            }
                        };
                        set_once(&mut violation, kw, v)?;
                    }
                    other => return Err(unexpected(other, expected)),
                }
            }
            if violation.is_some() && limit.is_none() {
                return Err(ControlError::MissingArgument {
                    what: "\"fdb_max_learned N\" with \"violation\"",
                });
            }
            if role.is_none() && limit.is_none() {
                return Err(ControlError::MissingArgument {
                    what: "\"pvlan ROLE\" or \"fdb_max_learned N\"",
                });
            }
            Ok(VlanCommand::Set {
                dev: dev
                    .ok_or(ControlError::MissingArgument {
                        what: "\"dev NAME\"",
                    })?
                    .to_string(),
                vids: vids.ok_or(ControlError::MissingArgument {
                    what: "\"vid V[-V2]\"",
                })?,
                pvlan: role,
                limit: limit.map(|n| (n, violation.unwrap_or_default())),
                self_: self_.is_some(),
            })
        }
        // show, lst, list
        _ => {
            let (mut dev, mut vid) = (None, None);
            while let Some(kw) = w.next_kw(words::VLAN_SHOW, "dev or vid")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
                    "vid" => set_once(&mut vid, kw, parse_vid(w.value(kw, "a vid")?)?)?,
                    other => return Err(unexpected(other, "dev or vid")),
                }
            }
            Ok(VlanCommand::Show { dev, vid })
        }
    }
}

/// `vlan map add dev P vid A translate B | add dev P cvid C[-C2] svid S | add dev P svid S
/// cvid C translate V [C2] | del dev P vid A | del dev P cvid C[-C2] | del dev P svid S cvid
/// C | show [dev P]`.
fn parse_vlan_map(w: &mut Words<'_>) -> Result<VlanCommand, ControlError> {
    const MAP_COMMANDS: &str = "add, del or show";
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingArgument {
            what: "\"add\", \"del\" or \"show\" after \"vlan map\"",
        });
    };
    let cmd = command("vlan map", cmd, words::VLAN_MAP_COMMANDS, MAP_COMMANDS)?;
    let (mut dev, mut vid, mut to) = (None, None, None);
    let (mut cvids, mut svid, mut to_cvid) = (None, None, None);
    let expected = match cmd {
        "add" => "dev, vid and translate, cvid and svid, or svid, cvid and translate",
        "del" => "dev, vid, cvid, or svid and cvid",
        _ => "dev",
    };
    while let Some(kw) = w.next_kw(words::VLAN_MAP, expected)? {
        match kw {
            "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
            "vid" if cmd != "show" => set_once(&mut vid, kw, parse_vid(w.value(kw, "a vid")?)?)?,
            "translate" if cmd == "add" => {
                set_once(&mut to, kw, parse_vid(w.value(kw, "a vid")?)?)?;
                // `translate S2 C2` (2:2): a second number right after the first.
                if let Some(c2) = w.peek().filter(|v| v.bytes().all(|b| b.is_ascii_digit())) {
                    w.next();
                    to_cvid = Some(parse_vid(c2)?);
                }
            }
            "cvid" if cmd != "show" => {
                set_once(&mut cvids, kw, parse_vid_range(w.value(kw, "C or C-C2")?)?)?
            }
            "svid" if cmd != "show" => {
                set_once(&mut svid, kw, parse_vid(w.value(kw, "an S-VID")?)?)?
            }
            other => return Err(unexpected(other, expected)),
        }
    }
    if cmd == "show" {
        return Ok(VlanCommand::MapShow { dev });
    }
    let dev = dev.ok_or(ControlError::MissingArgument {
        what: "\"dev NAME\"",
    })?;
    if let (Some(cvids), Some(s), true) = (cvids, svid, to.is_some() || cmd == "del") {
        // 2:1 or 2:2.
        if vid.is_some() {
            return Err(unexpected("vid", "svid S cvid C translate V [C2]"));
        }
        if cvids.start != cvids.end {
            return Err(ControlError::BadValue {
                what: "cvid",
                value: format!("{}-{}", cvids.start, cvids.end),
                expected: "one C-VID (ranges are for selective Q-in-Q: cvid C-C2 svid S)",
            });
        }
        return Ok(match (cmd, to) {
            ("add", Some(v)) => VlanCommand::TagMapAdd {
                dev,
                map: qbridge_bridge::TagMap {
                    svid: s,
                    cvid: cvids.start,
                    vid: v,
                    inner: to_cvid,
                },
            },
            _ => VlanCommand::TagMapDel {
                dev,
                svid: s,
                cvid: cvids.start,
            },
        });
    }
    if let Some(cvids) = cvids {
        if vid.is_some() || to.is_some() {
            return Err(unexpected(
                "cvid",
                "either vid A translate B or cvid C svid S",
            ));
        }
        return Ok(match cmd {
            "add" => VlanCommand::CvidMapAdd {
                dev,
                cvids,
                svid: svid.ok_or(ControlError::MissingArgument { what: "\"svid S\"" })?,
            },
            _ => VlanCommand::CvidMapDel { dev, cvids },
        });
    }
    let wire = vid.ok_or(ControlError::MissingArgument { what: "\"vid A\"" })?;
    Ok(match cmd {
        "add" => VlanCommand::MapAdd {
            dev,
            wire,
            inside: to.ok_or(ControlError::MissingArgument {
                what: "\"translate B\"",
            })?,
        },
        _ => VlanCommand::MapDel { dev, wire },
    })
}

/// After `tunnel_info`: `id VNI[-VNI2]` (required by `add`, optional for `del`).
fn parse_tunnel_info(w: &mut Words<'_>, add: bool) -> Result<Option<(u32, u32)>, ControlError> {
    if w.peek() != Some("id") {
        if add {
            return Err(ControlError::MissingArgument {
                what: "\"id VNI[-VNI2]\" after \"tunnel_info\"",
            });
        }
        return Ok(None);
    }
    w.next();
    let v = w.value("id", "a VNI or VNI-VNI2 (1-16777215)")?;
    let (a, z) = v.split_once('-').unwrap_or((v, v));
    let vni = |t: &str| {
        parse_uint(
            "tunnel_info id",
            t,
            u64::from(crate::vxlan::VNI_MAX),
            "1-16777215",
        )
        .map(|n| n as u32)
    };
    let (a, z) = (vni(a)?, vni(z)?);
    if a == 0 || z < a {
        return Err(ControlError::BadValue {
            what: "tunnel_info id",
            value: v.to_string(),
            expected: "a VNI or VNI-VNI2 from 1 to 16777215, VNI2 not below VNI",
        });
    }
    Ok(Some((a, z)))
}
