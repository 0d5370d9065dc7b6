//! `link add NAME type vxlan {id VNI | external [vnifilter]} local ADDR [dstport PORT] [ttl N]
//! [learning on|off]` (ip-link(8)'s words; `nolearning` as ip-link accepts it), the `dst IP` of
//! `fdb` lines, and `vni add|del|show` (bridge(8)'s vnifilter words).

use super::*;
use crate::vxlan::{VxlanSpec, VNI_MAX};
use std::net::Ipv4Addr;

const EXPECTED: &str = "id, external, vnifilter, local, dstport, ttl, learning or nolearning";

/// The words after `type vxlan`.
pub(super) fn parse_vxlan(w: &mut Words<'_>, name: String) -> Result<LinkCommand, ControlError> {
    let (mut id, mut local, mut dstport, mut ttl, mut learning) = (None, None, None, None, None);
    let (mut external, mut vnifilter) = (None, None);
    let table = [
        exact("external"),
        exact("vnifilter"),
        exact("id"),
        exact("vni"),
        exact("local"),
        exact("dstport"),
        exact("ttl"),
        exact("hoplimit"),
        exact("learning"),
        exact("nolearning"),
    ];
    while let Some(kw) = w.next_kw(&table, EXPECTED)? {
        match kw {
            "id" | "vni" => {
                let v = parse_uint(
                    "id",
                    w.value(kw, "a VNI (0-16777215)")?,
                    u64::from(VNI_MAX),
                    "0-16777215",
                )?;
                set_once(&mut id, "id", v as u32)?;
            }
            "local" => set_once(
                &mut local,
                kw,
                parse_ipv4("local", w.value(kw, "an IPv4 address")?)?,
            )?,
            "dstport" => {
                let v = w.value(kw, "a UDP port (1-65535)")?;
                let n = parse_uint("dstport", v, 65535, "1-65535")?;
                if n == 0 {
                    return Err(ControlError::OutOfRange {
                        what: "dstport",
                        value: v.to_string(),
                        range: "1-65535",
                    });
                }
                set_once(&mut dstport, kw, n as u16)?;
            }
            "ttl" | "hoplimit" => {
                let v = w.value(kw, "a TTL (1-255)")?;
                let n = parse_uint("ttl", v, 255, "1-255")?;
                if n == 0 {
                    return Err(ControlError::OutOfRange {
                        what: "ttl",
                        value: v.to_string(),
                        range: "1-255",
                    });
                }
                set_once(&mut ttl, "ttl", n as u8)?;
            }
            "learning" => set_once(
                &mut learning,
                kw,
                parse_on_off("learning", w.value(kw, ON_OFF)?)?,
            )?,
            "nolearning" => set_once(&mut learning, "learning", false)?,
            "external" => set_once(&mut external, kw, true)?,
            // ip-link(8): only with external; here it implies it.
            "vnifilter" => set_once(&mut vnifilter, kw, true)?,
            other => return Err(unexpected(other, EXPECTED)),
        }
    }
    let vnifilter = vnifilter.unwrap_or(false);
    let external = external.unwrap_or(false) || vnifilter;
    let vni = match (id, external) {
        (Some(_), true) => {
            return Err(unexpected(
                "id",
                "no id with external (an external port's VNIs come from its VLANs: vlan add \
                 … tunnel_info id VNI)",
            ))
        }
        (Some(v), false) => v,
        (None, true) => 0,
        (None, false) => {
            return Err(ControlError::MissingArgument {
                what: "\"id VNI\" (or \"external\") for type vxlan",
            })
        }
    };
    let local = local.ok_or(ControlError::MissingArgument {
        what: "\"local ADDR\" (the local VTEP's IPv4 address) for type vxlan",
    })?;
    Ok(LinkCommand::AddPort {
        name,
        spec: PortSpec::Vxlan(Box::new(VxlanSpec {
            vni,
            local,
            dstport: dstport.unwrap_or(4789),
            ttl,
            learning: learning.unwrap_or(true),
            remotes: Vec::new(),
            external,
            tunnels: Vec::new(),
            vnifilter,
            vnis: Vec::new(),
        })),
        index: None,
        peer_index: None,
    })
}

/// An IPv4 address; IPv6 underlays are not supported yet and say so.
pub(super) fn parse_ipv4(what: &'static str, s: &str) -> Result<Ipv4Addr, ControlError> {
    s.parse().map_err(|_| ControlError::BadValue {
        what,
        value: s.to_string(),
        expected: if s.contains(':') {
            "an IPv4 address (IPv6 underlays are not supported yet)"
        } else {
            "an IPv4 address"
        },
    })
}

/// `vni add|del dev NAME vni N[-M]`, `vni show [dev NAME]`.
pub(super) fn parse_vni(w: &mut Words<'_>) -> Result<VniCommand, ControlError> {
    const COMMANDS: &str = "add, del, show or help";
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "vni",
            expected: COMMANDS,
        });
    };
    let cmd = command("vni", cmd, words::VNI_COMMANDS, COMMANDS)?;
    let (mut dev, mut vnis) = (None, None);
    let expected = if cmd == "add" || cmd == "delete" {
        "dev or vni"
    } else {
        "dev"
    };
    while let Some(kw) = w.next_kw(words::VNI_OPTIONS, expected)? {
        match kw {
            "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
            "vni" if expected != "dev" => {
                let v = w.value(kw, "a VNI or VNI-VNI2 (0-16777215)")?;
                let (a, z) = v.split_once('-').unwrap_or((v, v));
                let n = |t: &str| {
                    parse_uint("vni", t, u64::from(VNI_MAX), "0-16777215").map(|n| n as u32)
                };
                let (a, z) = (n(a)?, n(z)?);
                if z < a {
                    return Err(ControlError::BadValue {
                        what: "vni",
                        value: v.to_string(),
                        expected: "a VNI or VNI-VNI2 with VNI2 not below VNI",
                    });
                }
                set_once(&mut vnis, kw, (a, z))?
            }
            other => return Err(unexpected(other, expected)),
        }
    }
    if expected == "dev" {
        return Ok(VniCommand::Show { dev });
    }
    let dev = dev.ok_or(ControlError::MissingArgument {
        what: "\"dev NAME\"",
    })?;
    let vnis = vnis.ok_or(ControlError::MissingArgument {
        what: "\"vni N[-M]\"",
    })?;
    Ok(if cmd == "add" {
        VniCommand::Add { dev, vnis }
    } else {
        VniCommand::Del { dev, vnis }
    })
}
