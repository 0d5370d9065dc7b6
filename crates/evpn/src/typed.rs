//! gobgpd's typed route messages (gobgp 3.10 `api/attribute.proto`), as `WatchEvent` sends
//! them: its paths carry the NLRI and attributes only as `google.protobuf.Any` messages
//! (`EVPNMACIPAdvertisementRoute`, `EVPNInclusiveMulticastEthernetTagRoute`, the route
//! distinguisher messages, `MpReachNLRIAttribute`, `NextHopAttribute`,
//! `ExtendedCommunitiesAttribute` with `TwoOctetAsSpecificExtended` / `EncapExtended` /
//! `MacMobilityExtended`, `PmsiTunnelAttribute`), never as BGP bytes (docs/decisions.md 70,
//! 76). Decoded here into the same [`Nlri`] and [`Attrs`] the byte codec ([`crate::route`])
//! gives, so the decision cannot tell which way a route came.
//!
//! Field numbers are those of gobgp v3.10's `attribute.proto`; fields qbridge does not read
//! are left out (protobuf skips them). As with the byte codec, anything unknown or malformed
//! is skipped (`None`, or the attribute left out), nothing panics. Labels are gobgpd's raw
//! 24-bit label fields (`labelDecode`), which for VXLAN hold the VNI whole.

use crate::gobgp::{Any, Path};
use crate::route::{Attrs, ExtCommunity, Nlri, Rd};
use prost::Message;
use std::net::{IpAddr, Ipv4Addr};

#[derive(Clone, PartialEq, prost::Message)]
pub struct EthernetSegmentIdentifier {
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// Type 2.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EvpnMacIpAdvertisementRoute {
    #[prost(message, optional, tag = "1")]
    pub rd: Option<Any>,
    #[prost(message, optional, tag = "2")]
    pub esi: Option<EthernetSegmentIdentifier>,
    #[prost(uint32, tag = "3")]
    pub ethernet_tag: u32,
    #[prost(string, tag = "4")]
    pub mac_address: String,
    #[prost(string, tag = "5")]
    pub ip_address: String,
    #[prost(uint32, repeated, tag = "6")]
    pub labels: Vec<u32>,
}

/// Type 3.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EvpnInclusiveMulticastEthernetTagRoute {
    #[prost(message, optional, tag = "1")]
    pub rd: Option<Any>,
    #[prost(uint32, tag = "2")]
    pub ethernet_tag: u32,
    #[prost(string, tag = "3")]
    pub ip_address: String,
}

/// `RouteDistinguisherTwoOctetASN` (type 0) and `…FourOctetASN` (type 2): numbers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RdNumbers {
    #[prost(uint32, tag = "1")]
    pub admin: u32,
    #[prost(uint32, tag = "2")]
    pub assigned: u32,
}

/// `RouteDistinguisherIPAddress` (type 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RdIpAddress {
    #[prost(string, tag = "1")]
    pub admin: String,
    #[prost(uint32, tag = "2")]
    pub assigned: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NextHopAttribute {
    #[prost(string, tag = "1")]
    pub next_hop: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MpReachNlriAttribute {
    #[prost(message, optional, tag = "1")]
    pub family: Option<crate::gobgp::Family>,
    /// The global next hop, then a link-local one when there is one.
    #[prost(string, repeated, tag = "2")]
    pub next_hops: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExtendedCommunitiesAttribute {
    #[prost(message, repeated, tag = "1")]
    pub communities: Vec<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TwoOctetAsSpecificExtended {
    #[prost(bool, tag = "1")]
    pub is_transitive: bool,
    #[prost(uint32, tag = "2")]
    pub sub_type: u32,
    #[prost(uint32, tag = "3")]
    pub asn: u32,
    #[prost(uint32, tag = "4")]
    pub local_admin: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EncapExtended {
    #[prost(uint32, tag = "1")]
    pub tunnel_type: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MacMobilityExtended {
    #[prost(bool, tag = "1")]
    pub is_sticky: bool,
    #[prost(uint32, tag = "2")]
    pub sequence_num: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PmsiTunnelAttribute {
    #[prost(uint32, tag = "1")]
    pub flags: u32,
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    #[prost(uint32, tag = "3")]
    pub label: u32,
    /// The tunnel id as BGP writes it: for ingress replication the endpoint's 4 or 16 bytes.
    #[prost(bytes = "vec", tag = "4")]
    pub id: Vec<u8>,
}

/// The message name of an `Any` (`type.googleapis.com/apipb.EncapExtended` → `EncapExtended`;
/// a type URL of another package is no name of ours).
fn name(a: &Any) -> &str {
    let full = a.type_url.rsplit('/').next().unwrap_or("");
    full.strip_prefix("apipb.").unwrap_or("")
}

fn decode<M: Message + Default>(a: &Any) -> Option<M> {
    M::decode(a.value.as_slice()).ok()
}

fn rd(a: &Any) -> Option<Rd> {
    let mut b = [0u8; 8];
    match name(a) {
        "RouteDistinguisherTwoOctetASN" => {
            let r: RdNumbers = decode(a)?;
            b[1] = 0;
            b[2..4].copy_from_slice(&u16::try_from(r.admin).ok()?.to_be_bytes());
            b[4..].copy_from_slice(&r.assigned.to_be_bytes());
        }
        "RouteDistinguisherIPAddress" => {
            let r: RdIpAddress = decode(a)?;
            let ip: Ipv4Addr = r.admin.parse().ok()?;
            return Some(Rd::ip(ip, u16::try_from(r.assigned).ok()?));
        }
        "RouteDistinguisherFourOctetASN" => {
            let r: RdNumbers = decode(a)?;
            b[1] = 2;
            b[2..6].copy_from_slice(&r.admin.to_be_bytes());
            b[6..].copy_from_slice(&u16::try_from(r.assigned).ok()?.to_be_bytes());
        }
        _ => return None,
    }
    Some(Rd(b))
}

/// An EVPN NLRI of the two types qbridge speaks, and a type-2 route's IP address (part of the
/// route's key, RFC 7432 §7.2, though qbridge does not use it); `None` for another type or a
/// malformed one.
pub fn nlri(a: &Any) -> Option<(Nlri, Option<IpAddr>)> {
    match name(a) {
        "EVPNMACIPAdvertisementRoute" => {
            let r: EvpnMacIpAdvertisementRoute = decode(a)?;
            let mac = crate::daemon::parse_mac(&r.mac_address)?;
            // gobgp writes an absent address as "" (or "<nil>"): none.
            let ip = r.ip_address.parse::<IpAddr>().ok();
            let vni = *r.labels.first()?;
            if vni > 0xff_ffff {
                return None;
            }
            Some((
                Nlri::Mac {
                    rd: rd(r.rd.as_ref()?)?,
                    etag: r.ethernet_tag,
                    mac,
                    vni,
                },
                ip,
            ))
        }
        "EVPNInclusiveMulticastEthernetTagRoute" => {
            let r: EvpnInclusiveMulticastEthernetTagRoute = decode(a)?;
            Some((
                Nlri::Imet {
                    rd: rd(r.rd.as_ref()?)?,
                    etag: r.ethernet_tag,
                    origin: r.ip_address.parse().ok()?,
                },
                None,
            ))
        }
        _ => None,
    }
}

fn community(a: &Any) -> Option<ExtCommunity> {
    match name(a) {
        // Route target: sub-type 2 (RFC 4360), 2-byte AS, as the byte codec reads it.
        "TwoOctetAsSpecificExtended" => {
            let c: TwoOctetAsSpecificExtended = decode(a)?;
            (c.sub_type == 2).then_some(())?;
            Some(ExtCommunity::RouteTarget {
                asn: u16::try_from(c.asn).ok()?,
                value: c.local_admin,
            })
        }
        "EncapExtended" => {
            let c: EncapExtended = decode(a)?;
            Some(ExtCommunity::Encapsulation {
                tunnel_type: u16::try_from(c.tunnel_type).ok()?,
            })
        }
        "MacMobilityExtended" => {
            let c: MacMobilityExtended = decode(a)?;
            Some(ExtCommunity::MacMobility {
                sticky: c.is_sticky,
                seq: c.sequence_num,
            })
        }
        _ => None,
    }
}

fn ip_from(b: &[u8]) -> Option<IpAddr> {
    if let Ok(o) = <[u8; 4]>::try_from(b) {
        Some(IpAddr::from(o))
    } else {
        <[u8; 16]>::try_from(b).ok().map(IpAddr::from)
    }
}

/// What qbridge reads of the typed attributes: the next hop (MP_REACH's first, the global
/// one, else NEXT_HOP), the extended communities it knows, the PMSI tunnel of ingress
/// replication (type 6). Others and malformed ones are skipped.
pub fn attrs(pattrs: &[Any]) -> Attrs {
    let mut out = Attrs::default();
    for a in pattrs {
        match name(a) {
            "NextHopAttribute" => {
                if let Some(ip) =
                    decode::<NextHopAttribute>(a).and_then(|n| n.next_hop.parse::<IpAddr>().ok())
                {
                    out.next_hop = Some(ip);
                }
            }
            "MpReachNLRIAttribute" => {
                if let Some(ip) = decode::<MpReachNlriAttribute>(a)
                    .and_then(|m| m.next_hops.first()?.parse::<IpAddr>().ok())
                {
                    out.next_hop = Some(ip);
                }
            }
            "ExtendedCommunitiesAttribute" => {
                if let Some(c) = decode::<ExtendedCommunitiesAttribute>(a) {
                    out.communities
                        .extend(c.communities.iter().filter_map(community));
                }
            }
            "PmsiTunnelAttribute" => {
                if let Some(p) = decode::<PmsiTunnelAttribute>(a) {
                    if p.kind == 6 && p.label <= 0xff_ffff {
                        if let Some(ip) = ip_from(&p.id) {
                            out.pmsi = Some((ip, p.label));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A path as the decision and the mirror take it: its NLRI and type-2 IP, and attributes —
/// from the binary fields when gobgpd sent them (`ListPath` with `enable_only_binary`), else
/// from the typed ones (`WatchEvent`). `None`: not an EVPN route of the two types.
pub fn path(p: &Path) -> Option<(Nlri, Option<IpAddr>, Attrs)> {
    if !p.nlri_binary.is_empty() {
        let n = Nlri::decode(&p.nlri_binary)?;
        return Some((
            n,
            crate::route::mac_ip(&p.nlri_binary),
            Attrs::decode(&p.pattrs_binary),
        ));
    }
    let (n, ip) = nlri(p.nlri.as_ref()?)?;
    Some((n, ip, attrs(&p.pattrs)))
}

/// Builders of the typed messages, as gobgpd writes them (tests, and a check that the
/// decoders read what they are meant to).
pub mod build {
    use super::*;

    pub fn any<M: Message>(name: &str, m: &M) -> Any {
        Any {
            type_url: format!("type.googleapis.com/apipb.{name}"),
            value: m.encode_to_vec(),
        }
    }

    /// The RD message gobgpd sends for `rd` (by its type).
    pub fn rd(rd: &Rd) -> Any {
        let b = rd.0;
        match u16::from_be_bytes([b[0], b[1]]) {
            0 => any(
                "RouteDistinguisherTwoOctetASN",
                &RdNumbers {
                    admin: u32::from(u16::from_be_bytes([b[2], b[3]])),
                    assigned: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                },
            ),
            1 => any(
                "RouteDistinguisherIPAddress",
                &RdIpAddress {
                    admin: Ipv4Addr::new(b[2], b[3], b[4], b[5]).to_string(),
                    assigned: u32::from(u16::from_be_bytes([b[6], b[7]])),
                },
            ),
            _ => any(
                "RouteDistinguisherFourOctetASN",
                &RdNumbers {
                    admin: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
                    assigned: u32::from(u16::from_be_bytes([b[6], b[7]])),
                },
            ),
        }
    }

    pub fn nlri(n: &Nlri, ip: Option<IpAddr>) -> Any {
        match *n {
            Nlri::Mac {
                rd: r,
                etag,
                mac,
                vni,
            } => any(
                "EVPNMACIPAdvertisementRoute",
                &EvpnMacIpAdvertisementRoute {
                    rd: Some(rd(&r)),
                    esi: Some(EthernetSegmentIdentifier {
                        kind: 0,
                        value: vec![0; 9],
                    }),
                    ethernet_tag: etag,
                    mac_address: crate::route::Mac(mac).to_string(),
                    ip_address: ip.map(|i| i.to_string()).unwrap_or_default(),
                    labels: vec![vni],
                },
            ),
            Nlri::Imet {
                rd: r,
                etag,
                origin,
            } => any(
                "EVPNInclusiveMulticastEthernetTagRoute",
                &EvpnInclusiveMulticastEthernetTagRoute {
                    rd: Some(rd(&r)),
                    ethernet_tag: etag,
                    ip_address: origin.to_string(),
                },
            ),
        }
    }

    pub fn community(c: &ExtCommunity) -> Any {
        match *c {
            ExtCommunity::RouteTarget { asn, value } => any(
                "TwoOctetAsSpecificExtended",
                &TwoOctetAsSpecificExtended {
                    is_transitive: true,
                    sub_type: 2,
                    asn: u32::from(asn),
                    local_admin: value,
                },
            ),
            ExtCommunity::Encapsulation { tunnel_type } => any(
                "EncapExtended",
                &EncapExtended {
                    tunnel_type: u32::from(tunnel_type),
                },
            ),
            ExtCommunity::MacMobility { sticky, seq } => any(
                "MacMobilityExtended",
                &MacMobilityExtended {
                    is_sticky: sticky,
                    sequence_num: seq,
                },
            ),
        }
    }

    /// ORIGIN, MP_REACH (the next hops as gobgpd writes them: global, then link-local), the
    /// extended communities, and the PMSI tunnel when given.
    pub fn attrs(
        next_hops: &[IpAddr],
        comms: &[ExtCommunity],
        pmsi: Option<(IpAddr, u32)>,
    ) -> Vec<Any> {
        #[derive(Clone, PartialEq, prost::Message)]
        struct Origin {
            #[prost(uint32, tag = "1")]
            origin: u32,
        }
        let mut v = vec![
            any("OriginAttribute", &Origin { origin: 0 }),
            any(
                "MpReachNLRIAttribute",
                &MpReachNlriAttribute {
                    family: Some(crate::gobgp::evpn()),
                    next_hops: next_hops.iter().map(|h| h.to_string()).collect(),
                },
            ),
            any(
                "ExtendedCommunitiesAttribute",
                &ExtendedCommunitiesAttribute {
                    communities: comms.iter().map(community).collect(),
                },
            ),
        ];
        if let Some((ip, label)) = pmsi {
            let id = match ip {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            v.push(any(
                "PmsiTunnelAttribute",
                &PmsiTunnelAttribute {
                    flags: 0,
                    kind: 6,
                    label,
                    id,
                },
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{originate_attrs, TUNNEL_VXLAN};

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xa];

    fn comms(seq: Option<u32>) -> Vec<ExtCommunity> {
        let mut c = vec![
            ExtCommunity::RouteTarget {
                asn: 65000,
                value: 100,
            },
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            },
        ];
        c.extend(seq.map(|seq| ExtCommunity::MacMobility { sticky: false, seq }));
        c
    }

    fn typed_path(n: &Nlri, ip: Option<IpAddr>, attrs: Vec<Any>) -> Path {
        Path {
            nlri: Some(build::nlri(n, ip)),
            pattrs: attrs,
            ..Path::default()
        }
    }

    /// A type-2 route built as gobgpd's WatchEvent sends it decodes to the same NLRI and
    /// attributes as its BGP bytes do (IPv4 next hop, MAC mobility, a VNI over 16 bits).
    #[test]
    fn type2_ipv4_reads_as_its_bytes_do() {
        let n = Nlri::Mac {
            rd: Rd::ip(Ipv4Addr::new(192, 0, 2, 1), 100),
            etag: 0,
            mac: MAC,
            vni: 0x12_3456,
        };
        let p = typed_path(&n, None, build::attrs(&[A], &comms(Some(7)), None));
        let (got, ip, attrs) = path(&p).unwrap();
        assert_eq!(got, n);
        assert_eq!(ip, None);
        assert_eq!(attrs.next_hop, Some(A));
        assert_eq!(attrs.mobility_seq(), Some(7));
        assert!(attrs.has_rt(65000, 100));
        let bytes = Attrs::decode(&originate_attrs(&n, A, &comms(Some(7)), None));
        assert_eq!(attrs, bytes);
    }

    /// IPv6 next hops: the global one (first; gobgpd adds the link-local one after it) is
    /// the VTEP; a type-2 route's IP address is read as part of its key.
    #[test]
    fn type2_ipv6_next_hop_and_ip() {
        let g: IpAddr = "2001:db8::2".parse().unwrap();
        let ll: IpAddr = "fe80::2".parse().unwrap();
        let n = Nlri::Mac {
            rd: Rd::ip(Ipv4Addr::new(198, 51, 100, 2), 100),
            etag: 0,
            mac: MAC,
            vni: 100,
        };
        let host: IpAddr = "2001:db8:1::5".parse().unwrap();
        let p = typed_path(&n, Some(host), build::attrs(&[g, ll], &comms(None), None));
        let (got, ip, attrs) = path(&p).unwrap();
        assert_eq!((got, ip, attrs.next_hop), (n, Some(host), Some(g)));
        // NEXT_HOP alone (IPv4 unicast style) is read too.
        let nh = build::any(
            "NextHopAttribute",
            &NextHopAttribute {
                next_hop: "192.0.2.9".into(),
            },
        );
        assert_eq!(
            attrs_of(&[nh]).next_hop,
            Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)))
        );
    }

    fn attrs_of(a: &[Any]) -> Attrs {
        attrs(a)
    }

    /// Type 3 over IPv4 and IPv6: originator, PMSI ingress replication endpoint and label.
    #[test]
    fn type3_ipv4_and_ipv6() {
        for vtep in [A, "2001:db8::1".parse().unwrap()] {
            let n = Nlri::Imet {
                rd: Rd::for_vtep(vtep, Some(Ipv4Addr::new(198, 51, 100, 1)), 100),
                etag: 0,
                origin: vtep,
            };
            let p = typed_path(
                &n,
                None,
                build::attrs(&[vtep], &comms(None), Some((vtep, 100))),
            );
            let (got, _, attrs) = path(&p).unwrap();
            assert_eq!(got, n);
            assert_eq!(attrs.pmsi, Some((vtep, 100)));
            assert_eq!(attrs.next_hop, Some(vtep));
            let bytes = Attrs::decode(&originate_attrs(&n, vtep, &comms(None), Some(100)));
            assert_eq!(attrs, bytes);
        }
    }

    /// Every RD type gobgpd writes reads back to its bytes.
    #[test]
    fn route_distinguishers_of_each_type() {
        for b in [
            [0, 0, 0xfd, 0xe8, 0, 1, 0, 0x64],
            [0, 1, 10, 0, 0, 1, 0, 0x64],
            [0, 2, 0, 1, 0, 0, 0, 0x64],
        ] {
            assert_eq!(rd(&build::rd(&Rd(b))), Some(Rd(b)));
        }
        // A 2-byte AS RD whose admin does not fit: refused, not cut.
        let bad = build::any(
            "RouteDistinguisherTwoOctetASN",
            &RdNumbers {
                admin: 70000,
                assigned: 1,
            },
        );
        assert_eq!(rd(&bad), None);
    }

    /// Other route types, other communities, unknown or malformed messages are skipped.
    #[test]
    fn unknown_and_malformed_messages_are_skipped() {
        let n = Nlri::Mac {
            rd: Rd::ip(Ipv4Addr::new(192, 0, 2, 1), 100),
            etag: 0,
            mac: MAC,
            vni: 100,
        };
        let mut good = build::nlri(&n, None);
        good.value.truncate(good.value.len() / 2);
        assert_eq!(nlri(&good), None);
        let other = Any {
            type_url: "type.googleapis.com/apipb.EVPNIPPrefixRoute".into(),
            value: vec![],
        };
        assert_eq!(nlri(&other), None);
        let foreign = Any {
            type_url: "type.googleapis.com/other.EVPNMACIPAdvertisementRoute".into(),
            value: build::nlri(&n, None).value,
        };
        assert_eq!(nlri(&foreign), None);
        // No label: no VNI, no route.
        let nolabel = build::any(
            "EVPNMACIPAdvertisementRoute",
            &EvpnMacIpAdvertisementRoute {
                rd: Some(build::rd(&Rd::ip(Ipv4Addr::new(192, 0, 2, 1), 100))),
                mac_address: "02:00:00:00:00:0a".into(),
                ..Default::default()
            },
        );
        assert_eq!(nlri(&nolabel), None);
        let junk = Any {
            type_url: "type.googleapis.com/apipb.ExtendedCommunitiesAttribute".into(),
            value: vec![0xff, 0xff, 0xff],
        };
        let rt4 = build::any(
            "TwoOctetAsSpecificExtended",
            &TwoOctetAsSpecificExtended {
                is_transitive: true,
                sub_type: 3, // route origin, not a target
                asn: 65000,
                local_admin: 100,
            },
        );
        let ec = build::any(
            "ExtendedCommunitiesAttribute",
            &ExtendedCommunitiesAttribute {
                communities: vec![rt4],
            },
        );
        assert_eq!(attrs(&[junk, ec]), Attrs::default());
        assert_eq!(path(&Path::default()), None);
    }
}
