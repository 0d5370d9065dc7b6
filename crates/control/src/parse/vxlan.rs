//! `link add NAME type vxlan {id VNI | external} local ADDR [dstport PORT] [ttl N] [learning
//! on|off]` (ip-link(8)'s words; `nolearning` as ip-link accepts it) and the `dst IP` of `fdb`
//! lines.

use super::*;
use crate::vxlan::{VxlanSpec, VNI_MAX};
use std::net::Ipv4Addr;

const EXPECTED: &str = "id, external, local, dstport, ttl, learning or nolearning";

/// The words after `type vxlan`.
pub(super) fn parse_vxlan(w: &mut Words<'_>, name: String) -> Result<LinkCommand, ControlError> {
    let (mut id, mut local, mut dstport, mut ttl, mut learning) = (None, None, None, None, None);
    let mut external = None;
    let table = [
        exact("external"),
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
            other => return Err(unexpected(other, EXPECTED)),
        }
    }
    let external = external.unwrap_or(false);
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
