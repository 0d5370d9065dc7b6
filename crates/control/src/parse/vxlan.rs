//! `link add NAME type vxlan {id VNI | external [vnifilter]} local ADDR [remote ADDR]
//! [dev UNDERLAY] [dstport PORT] [ttl N] [tos T|inherit] [[no]udp6zerocsumtx]
//! [[no]udp6zerocsumrx] [learning on|off]` (ip-link(8)'s words; `nolearning`, `hoplimit` and
//! `dsfield` as ip-link accepts them; ADDR IPv4 or IPv6, one family per port), the `dst IP` of
//! `fdb` lines, and `vni add|del|show` (bridge(8)'s vnifilter words).

use super::*;
use crate::vxlan::{OuterTos, VxlanSpec, VNI_MAX};
use crate::vxlan::{RemoteOrigin, VxlanRemote};
use std::net::IpAddr;

const EXPECTED: &str = "id, external, vnifilter, local, remote, dev, dstport, ttl, tos, \
     udp6zerocsumtx, udp6zerocsumrx, learning or nolearning";

/// The words after `type vxlan`.
pub(super) fn parse_vxlan(w: &mut Words<'_>, name: String) -> Result<LinkCommand, ControlError> {
    let (mut id, mut local, mut dstport, mut ttl, mut learning) = (None, None, None, None, None);
    let (mut external, mut vnifilter) = (None, None);
    let (mut dev, mut tos, mut remote) = (None, None, None);
    let (mut csum6_tx, mut csum6_rx) = (None, None);
    let table = [
        exact("external"),
        exact("vnifilter"),
        exact("id"),
        exact("vni"),
        exact("local"),
        exact("remote"),
        exact("group"),
        exact("dstport"),
        exact("dev"),
        exact("ttl"),
        exact("hoplimit"),
        exact("tos"),
        exact("dsfield"),
        exact("learning"),
        exact("nolearning"),
        exact("udp6zerocsumtx"),
        exact("noudp6zerocsumtx"),
        exact("udp6zerocsumrx"),
        exact("noudp6zerocsumrx"),
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
                parse_vtep_ip("local", w.value(kw, "an IPv4 or IPv6 address")?)?,
            )?,
            // ip-link(8)'s `remote`: the default destination, the first VTEP of the flood
            // list (kept as the `fdb append 00:00:00:00:00:00 … dst` entry it is).
            "remote" => set_once(
                &mut remote,
                kw,
                parse_vtep_ip("remote", w.value(kw, "an IPv4 or IPv6 address")?)?,
            )?,
            "group" => {
                return Err(ControlError::BadValue {
                    what: "group",
                    value: w.value(kw, "a multicast group")?.to_string(),
                    expected: "no multicast group: qbridge VXLAN ports replicate at the head \
                               end (list the remote VTEPs with fdb append \
                               00:00:00:00:00:00 dev NAME dst IP)",
                })
            }
            "udp6zerocsumtx" | "noudp6zerocsumtx" => {
                set_once(&mut csum6_tx, "udp6zerocsumtx", kw == "udp6zerocsumtx")?
            }
            "udp6zerocsumrx" | "noudp6zerocsumrx" => {
                set_once(&mut csum6_rx, "udp6zerocsumrx", kw == "udp6zerocsumrx")?
            }
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
            "dev" => {
                let v = w.value(kw, "the underlay's interface name")?;
                set_once(&mut dev, kw, parse_ifname("dev", v)?)?;
            }
            "tos" | "dsfield" => {
                let v = w.value(kw, "a TOS byte (0x00-0xfc, ECN bits 0) or inherit")?;
                set_once(&mut tos, "tos", parse_tos(v)?)?;
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
    let local: IpAddr = local.ok_or(ControlError::MissingArgument {
        what: "\"local ADDR\" (the local VTEP's IPv4 or IPv6 address) for type vxlan",
    })?;
    let mut remotes = Vec::new();
    if let Some(r) = remote {
        if external {
            return Err(unexpected(
                "remote",
                "no remote with external (each VNI's flood list: fdb append \
                 00:00:00:00:00:00 dev NAME dst IP vni N)",
            ));
        }
        if r.is_ipv6() != local.is_ipv6() {
            return Err(ControlError::Vxlan(crate::vxlan::mixed_families(
                &name, local, "remote", r,
            )));
        }
        remotes.push(VxlanRemote {
            mac: MacAddr([0; 6]),
            dst: r,
            origin: RemoteOrigin::Static,
            vni,
        });
    }
    Ok(LinkCommand::AddPort {
        name,
        spec: PortSpec::Vxlan(Box::new(VxlanSpec {
            vni,
            local,
            dstport: dstport.unwrap_or(4789),
            ttl,
            dev,
            tos,
            learning: learning.unwrap_or(true),
            udp6zerocsumtx: csum6_tx.unwrap_or(false),
            udp6zerocsumrx: csum6_rx.unwrap_or(false),
            remotes: remotes.into(),
            external,
            tunnels: Vec::new(),
            vnifilter,
            vnis: Vec::new(),
        })),
        index: None,
        peer_index: None,
    })
}

/// A VTEP address, IPv4 or IPv6. `local` and `remote` are checked here
/// ([`crate::vxlan::vtep_problem`]; an IPv4 `local` as before, unchecked: the bind says),
/// `dst` where it is applied.
pub(super) fn parse_vtep_ip(what: &'static str, s: &str) -> Result<IpAddr, ControlError> {
    let a: IpAddr = s.parse().map_err(|_| ControlError::BadValue {
        what,
        value: s.to_string(),
        expected: "an IPv4 or IPv6 address",
    })?;
    if what == "dst" || (what == "local" && a.is_ipv4()) {
        return Ok(a);
    }
    match crate::vxlan::vtep_problem(a) {
        None => Ok(a),
        Some(_) if a.is_multicast() => Err(ControlError::BadValue {
            what,
            value: s.to_string(),
            expected: "a unicast address (multicast groups are not supported: the flood list \
                       replicates at the head end)",
        }),
        Some(why) => Err(ControlError::Vxlan(format!("{what} {a} {why}"))),
    }
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

/// An interface name as the kernel takes it: 1-15 bytes, no `/`, whitespace or NUL.
fn parse_ifname(what: &'static str, s: &str) -> Result<String, ControlError> {
    let bad = s.is_empty()
        || s.len() > 15
        || s == "."
        || s == ".."
        || s.chars()
            .any(|c| c == '/' || c == '\0' || c.is_whitespace());
    if bad {
        return Err(ControlError::BadValue {
            what,
            value: s.to_string(),
            expected: "an interface name (1-15 bytes, no '/' or spaces)",
        });
    }
    Ok(s.to_string())
}

/// `inherit`, or a TOS byte in decimal or `0x` hex whose two ECN bits are 0 (the kernel reads
/// `tos 1` as `inherit`; the ECN bits of a fixed TOS would mark every datagram).
fn parse_tos(s: &str) -> Result<OuterTos, ControlError> {
    if s == "inherit" {
        return Ok(OuterTos::Inherit);
    }
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16).ok(),
        None => s.parse::<u8>().ok(),
    };
    let n = n.ok_or_else(|| ControlError::BadValue {
        what: "tos",
        value: s.to_string(),
        expected: "a TOS byte (0-255, or 0x00-0xff) or inherit",
    })?;
    OuterTos::fixed(n).ok_or_else(|| ControlError::BadValue {
        what: "tos",
        value: s.to_string(),
        expected: "a TOS byte whose two ECN bits are 0 (a multiple of 4), or inherit",
    })
}
