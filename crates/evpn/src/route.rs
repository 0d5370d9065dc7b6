//! EVPN routes on the wire (RFC 7432 §7, RFC 8365 §5): the two route types qbridge speaks —
//! type 2 (MAC/IP advertisement) and type 3 (inclusive multicast Ethernet tag) — as the NLRI
//! bytes gobgpd's API carries (`Path.nlri_binary`: route type, length, route), and the path
//! attributes they need (`Path.pattrs_binary`: each attribute whole, flags, type, length,
//! value): ORIGIN, MP_REACH_NLRI (the next hop), EXTENDED_COMMUNITIES (route target, VXLAN
//! encapsulation, MAC mobility) and PMSI_TUNNEL (ingress replication).
//!
//! For VXLAN (RFC 8365 §5.1.3) the 3-byte label fields carry the VNI whole, as FRR sends it.
//! Decoding is of bytes a BGP speaker relayed from any peer: every length is checked, an
//! unknown route type or attribute is skipped (`None`), nothing panics. No I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// AFI L2VPN and SAFI EVPN (RFC 7432 §5).
pub const AFI_L2VPN: u16 = 25;
pub const SAFI_EVPN: u8 = 70;

/// A route distinguisher of type 1 (RFC 4364 §4.2): an IPv4 address and a 2-byte number,
/// what FRR derives (router id : an index) and `--rd-auto` makes (VTEP address : VNI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rd(pub [u8; 8]);

impl Rd {
    /// `--rd-auto`'s RD of a VTEP's VNI: `VTEP:VNI` for an IPv4 VTEP; an IPv6 VTEP's RD
    /// cannot hold its address (type 1 is IPv4), so it is `ROUTER-ID:VNI` as FRR's, the BGP
    /// speaker's router id (`None`: the VTEP's low 32 bits).
    pub fn for_vtep(vtep: IpAddr, router_id: Option<Ipv4Addr>, vni: u32) -> Rd {
        let assigned = (vni & 0xffff) as u16;
        match vtep {
            IpAddr::V4(a) => Rd::ip(a, assigned),
            IpAddr::V6(a) => {
                let o = a.octets();
                let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
                Rd::ip(router_id.unwrap_or(low), assigned)
            }
        }
    }

    pub fn ip(addr: Ipv4Addr, assigned: u16) -> Rd {
        let mut b = [0u8; 8];
        b[..2].copy_from_slice(&1u16.to_be_bytes());
        b[2..6].copy_from_slice(&addr.octets());
        b[6..].copy_from_slice(&assigned.to_be_bytes());
        Rd(b)
    }
}

impl std::fmt::Display for Rd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        match u16::from_be_bytes([b[0], b[1]]) {
            0 => write!(
                f,
                "{}:{}",
                u16::from_be_bytes([b[2], b[3]]),
                u32::from_be_bytes([b[4], b[5], b[6], b[7]])
            ),
            1 => write!(
                f,
                "{}:{}",
                Ipv4Addr::new(b[2], b[3], b[4], b[5]),
                u16::from_be_bytes([b[6], b[7]])
            ),
            _ => write!(
                f,
                "{}:{}",
                u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
                u16::from_be_bytes([b[6], b[7]])
            ),
        }
    }
}

/// A MAC address as logs and commands write it: `02:00:00:00:00:0a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// The NLRI of one of the two route types; other types decode to `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Nlri {
    /// Type 2 without an IP address (qbridge bridges; IP-bearing ones are read, their
    /// address ignored): RD, ESI 0, Ethernet tag, MAC, the VNI (label 1).
    Mac {
        rd: Rd,
        etag: u32,
        mac: [u8; 6],
        vni: u32,
    },
    /// Type 3: RD, Ethernet tag, the originating router's address (IPv4 or IPv6).
    Imet { rd: Rd, etag: u32, origin: IpAddr },
}

/// As a log line names a route: `type-2 rd 192.0.2.1:100 mac 02:00:00:00:00:0a vni 100`,
/// `type-3 rd 192.0.2.1:100 origin 192.0.2.1` (the Ethernet tag only when it is not 0).
impl std::fmt::Display for Nlri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let etag = |f: &mut std::fmt::Formatter<'_>, etag: u32| {
            if etag == 0 {
                Ok(())
            } else {
                write!(f, " etag {etag}")
            }
        };
        match self {
            Nlri::Mac {
                rd,
                etag: e,
                mac,
                vni,
            } => {
                write!(f, "type-2 rd {rd}")?;
                etag(f, *e)?;
                write!(f, " mac {} vni {vni}", Mac(*mac))
            }
            Nlri::Imet {
                rd,
                etag: e,
                origin,
            } => {
                write!(f, "type-3 rd {rd}")?;
                etag(f, *e)?;
                write!(f, " origin {origin}")
            }
        }
    }
}

const TYPE_MAC_IP: u8 = 2;
const TYPE_IMET: u8 = 3;

impl Nlri {
    /// The NLRI bytes: route type, length, route.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(40);
        match self {
            Nlri::Mac { rd, etag, mac, vni } => {
                v.extend_from_slice(&[TYPE_MAC_IP, 33]);
                v.extend_from_slice(&rd.0);
                v.extend_from_slice(&[0; 10]); // ESI 0: single-homed
                v.extend_from_slice(&etag.to_be_bytes());
                v.push(48);
                v.extend_from_slice(mac);
                v.push(0); // no IP address
                v.extend_from_slice(&label(*vni));
            }
            Nlri::Imet { rd, etag, origin } => {
                let o = octets(*origin);
                v.extend_from_slice(&[TYPE_IMET, 13 + o.len() as u8]);
                v.extend_from_slice(&rd.0);
                v.extend_from_slice(&etag.to_be_bytes());
                v.push(8 * o.len() as u8);
                v.extend_from_slice(&o);
            }
        }
        v
    }

    /// One NLRI from its bytes; `None` for another route type or a malformed one.
    pub fn decode(b: &[u8]) -> Option<Nlri> {
        let (&kind, rest) = b.split_first()?;
        let (&len, rest) = rest.split_first()?;
        let r = rest.get(..usize::from(len))?;
        match kind {
            TYPE_MAC_IP => {
                let rd = Rd(r.get(..8)?.try_into().ok()?);
                let etag = u32::from_be_bytes(r.get(18..22)?.try_into().ok()?);
                if *r.get(22)? != 48 {
                    return None;
                }
                let mac: [u8; 6] = r.get(23..29)?.try_into().ok()?;
                let ip_bits = usize::from(*r.get(29)?);
                let at = 30 + ip_bits / 8;
                let vni = unlabel(r.get(at..at + 3)?);
                Some(Nlri::Mac { rd, etag, mac, vni })
            }
            TYPE_IMET => {
                let rd = Rd(r.get(..8)?.try_into().ok()?);
                let etag = u32::from_be_bytes(r.get(8..12)?.try_into().ok()?);
                let origin = match *r.get(12)? {
                    32 => ip_from(r.get(13..17)?)?,
                    128 => ip_from(r.get(13..29)?)?,
                    _ => return None,
                };
                Some(Nlri::Imet { rd, etag, origin })
            }
            _ => None,
        }
    }
}

/// A type-2 NLRI's IP address (`None`: none, another type, or malformed). Not part of
/// [`Nlri`] (qbridge bridges, so it ignores it), but part of the route's key (RFC 7432 §7.2),
/// so the RIB mirror keeps it ([`RouteKey`]).
pub fn mac_ip(b: &[u8]) -> Option<IpAddr> {
    if *b.first()? != TYPE_MAC_IP {
        return None;
    }
    let r = b.get(2..2 + usize::from(*b.get(1)?))?;
    match *r.get(29)? {
        32 => ip_from(r.get(30..34)?),
        128 => ip_from(r.get(30..46)?),
        _ => None,
    }
}

/// A route's key as BGP keys it (RFC 7432 §7.2, §7.3; gobgpd's): type 2 by RD, Ethernet
/// tag, MAC and IP address (not the ESI or the labels, which are attributes); type 3 by RD,
/// Ethernet tag and originator. A withdrawal names this, and only this route goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKey {
    Mac {
        rd: Rd,
        etag: u32,
        mac: [u8; 6],
        ip: Option<IpAddr>,
    },
    Imet {
        rd: Rd,
        etag: u32,
        origin: IpAddr,
    },
}

impl RouteKey {
    pub fn of(nlri: &Nlri, ip: Option<IpAddr>) -> RouteKey {
        match *nlri {
            Nlri::Mac { rd, etag, mac, .. } => RouteKey::Mac { rd, etag, mac, ip },
            Nlri::Imet { rd, etag, origin } => RouteKey::Imet { rd, etag, origin },
        }
    }

    /// A type-2 route's MAC.
    pub fn mac(&self) -> Option<[u8; 6]> {
        match self {
            RouteKey::Mac { mac, .. } => Some(*mac),
            RouteKey::Imet { .. } => None,
        }
    }
}

/// An address's bytes (4 or 16).
fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// An address from 4 or 16 bytes.
fn ip_from(b: &[u8]) -> Option<IpAddr> {
    if let Ok(o) = <[u8; 4]>::try_from(b) {
        Some(IpAddr::V4(Ipv4Addr::from(o)))
    } else {
        <[u8; 16]>::try_from(b)
            .ok()
            .map(|o| IpAddr::V6(Ipv6Addr::from(o)))
    }
}

fn label(vni: u32) -> [u8; 3] {
    let b = vni.to_be_bytes();
    [b[1], b[2], b[3]]
}

fn unlabel(b: &[u8]) -> u32 {
    b.iter().fold(0, |a, &x| (a << 8) | u32::from(x))
}

/// The extended communities qbridge reads and writes (RFC 4360, RFC 7432 §7.7, RFC 9012).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExtCommunity {
    /// Route target, 2-byte AS specific (type 0x00 or 0x01 with 0x02): `ASN:VNI` as FRR's
    /// auto RT.
    RouteTarget { asn: u16, value: u32 },
    /// Encapsulation (type 0x03 sub 0x0c), tunnel type 8 = VXLAN.
    Encapsulation { tunnel_type: u16 },
    /// MAC mobility (type 0x06 sub 0x00): sticky flag and sequence number.
    MacMobility { sticky: bool, seq: u32 },
}

pub const TUNNEL_VXLAN: u16 = 8;

/// As FRR and gobgp write them: `rt 65000:100`, `encap vxlan` (another tunnel type by its
/// number), `mac-mobility seq 7` (` sticky` when set).
impl std::fmt::Display for ExtCommunity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExtCommunity::RouteTarget { asn, value } => write!(f, "rt {asn}:{value}"),
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            } => f.write_str("encap vxlan"),
            ExtCommunity::Encapsulation { tunnel_type } => write!(f, "encap {tunnel_type}"),
            ExtCommunity::MacMobility { sticky, seq } => {
                write!(f, "mac-mobility seq {seq}")?;
                if sticky {
                    f.write_str(" sticky")?;
                }
                Ok(())
            }
        }
    }
}

impl ExtCommunity {
    fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        match *self {
            ExtCommunity::RouteTarget { asn, value } => {
                b[0] = 0x00;
                b[1] = 0x02;
                b[2..4].copy_from_slice(&asn.to_be_bytes());
                b[4..].copy_from_slice(&value.to_be_bytes());
            }
            ExtCommunity::Encapsulation { tunnel_type } => {
                b[0] = 0x03;
                b[1] = 0x0c;
                b[6..].copy_from_slice(&tunnel_type.to_be_bytes());
            }
            ExtCommunity::MacMobility { sticky, seq } => {
                b[0] = 0x06;
                b[1] = 0x00;
                b[2] = u8::from(sticky);
                b[4..].copy_from_slice(&seq.to_be_bytes());
            }
        }
        b
    }

    fn decode(b: &[u8; 8]) -> Option<ExtCommunity> {
        match (b[0] & 0x3f, b[1]) {
            (0x00, 0x02) => Some(ExtCommunity::RouteTarget {
                asn: u16::from_be_bytes([b[2], b[3]]),
                value: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            }),
            (0x03, 0x0c) => Some(ExtCommunity::Encapsulation {
                tunnel_type: u16::from_be_bytes([b[6], b[7]]),
            }),
            (0x06, 0x00) => Some(ExtCommunity::MacMobility {
                sticky: b[2] & 1 == 1,
                seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            }),
            _ => None,
        }
    }
}

/// What qbridge reads of a path's attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs {
    pub next_hop: Option<IpAddr>,
    pub communities: Vec<ExtCommunity>,
    /// PMSI tunnel: ingress replication's tunnel endpoint and its label (the VNI).
    pub pmsi: Option<(IpAddr, u32)>,
}

impl Attrs {
    pub fn mobility_seq(&self) -> Option<u32> {
        self.communities.iter().find_map(|c| match c {
            ExtCommunity::MacMobility { seq, .. } => Some(*seq),
            _ => None,
        })
    }

    pub fn has_rt(&self, asn: u16, value: u32) -> bool {
        self.communities
            .contains(&ExtCommunity::RouteTarget { asn, value })
    }

    /// Reads the attributes qbridge knows among `attrs` (each one whole: flags, type,
    /// length, value); others and malformed ones are skipped.
    pub fn decode(attrs: &[Vec<u8>]) -> Attrs {
        let mut a = Attrs::default();
        for raw in attrs {
            let Some((kind, v)) = split_attr(raw) else {
                continue;
            };
            match kind {
                ATTR_NEXT_HOP => {
                    if let Ok(o) = <[u8; 4]>::try_from(v) {
                        a.next_hop = Some(IpAddr::V4(Ipv4Addr::from(o)));
                    }
                }
                ATTR_MP_REACH => {
                    // AFI 2, SAFI 1, next-hop length 1, next hop: 4 bytes (IPv4), 16 (IPv6
                    // global) or 32 (global then link-local: the global one is the VTEP).
                    let nh = match v.get(3) {
                        Some(&4) => v.get(4..8),
                        Some(&16) | Some(&32) => v.get(4..20),
                        _ => None,
                    };
                    if let Some(ip) = nh.and_then(ip_from) {
                        a.next_hop = Some(ip);
                    }
                }
                ATTR_EXT_COMMUNITIES => {
                    for c in v.chunks_exact(8) {
                        if let Some(c) = c.try_into().ok().and_then(ExtCommunity::decode) {
                            a.communities.push(c);
                        }
                    }
                }
                ATTR_PMSI => {
                    // flags 1, tunnel type 1 (6: ingress replication), label 3, id.
                    // The tunnel id: the endpoint's address, 4 or 16 bytes.
                    if let (Some(&6), Some(l), Some(id)) = (v.get(1), v.get(2..5), v.get(5..)) {
                        if let Some(ip) = ip_from(id) {
                            a.pmsi = Some((ip, unlabel(l)));
                        }
                    }
                }
                _ => {}
            }
        }
        a
    }
}

const ATTR_ORIGIN: u8 = 1;
const ATTR_NEXT_HOP: u8 = 3;
const ATTR_MP_REACH: u8 = 14;
const ATTR_EXT_COMMUNITIES: u8 = 16;
const ATTR_PMSI: u8 = 22;
const FLAG_OPTIONAL: u8 = 0x80;
const FLAG_TRANSITIVE: u8 = 0x40;
const FLAG_EXTENDED_LENGTH: u8 = 0x10;

/// An attribute's type and value, its length checked.
fn split_attr(raw: &[u8]) -> Option<(u8, &[u8])> {
    let (&flags, rest) = raw.split_first()?;
    let (&kind, rest) = rest.split_first()?;
    let (len, rest) = if flags & FLAG_EXTENDED_LENGTH != 0 {
        (
            usize::from(u16::from_be_bytes(rest.get(..2)?.try_into().ok()?)),
            rest.get(2..)?,
        )
    } else {
        (usize::from(*rest.first()?), rest.get(1..)?)
    };
    Some((kind, rest.get(..len)?))
}

fn attr(flags: u8, kind: u8, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(value.len() + 4);
    if value.len() > 255 {
        v.extend_from_slice(&[flags | FLAG_EXTENDED_LENGTH, kind]);
        v.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        v.extend_from_slice(&[flags, kind, value.len() as u8]);
    }
    v.extend_from_slice(value);
    v
}

/// The attributes of a route qbridge originates: ORIGIN IGP, MP_REACH_NLRI (L2VPN EVPN,
/// `next_hop`, the NLRI), the extended communities, and for a type-3 route the PMSI tunnel
/// (ingress replication to `next_hop`, label the VNI).
pub fn originate_attrs(
    nlri: &Nlri,
    next_hop: IpAddr,
    communities: &[ExtCommunity],
    pmsi_vni: Option<u32>,
) -> Vec<Vec<u8>> {
    let nh = octets(next_hop);
    let mut out = vec![attr(FLAG_TRANSITIVE, ATTR_ORIGIN, &[0])];
    let n = nlri.encode();
    let mut mp = Vec::with_capacity(n.len() + 9);
    mp.extend_from_slice(&AFI_L2VPN.to_be_bytes());
    mp.push(SAFI_EVPN);
    mp.push(nh.len() as u8);
    mp.extend_from_slice(&nh);
    mp.push(0);
    mp.extend_from_slice(&n);
    out.push(attr(FLAG_OPTIONAL, ATTR_MP_REACH, &mp));
    let ec: Vec<u8> = communities.iter().flat_map(|c| c.encode()).collect();
    out.push(attr(
        FLAG_OPTIONAL | FLAG_TRANSITIVE,
        ATTR_EXT_COMMUNITIES,
        &ec,
    ));
    if let Some(vni) = pmsi_vni {
        let mut p = vec![0, 6];
        p.extend_from_slice(&label(vni));
        p.extend_from_slice(&nh);
        out.push(attr(FLAG_OPTIONAL | FLAG_TRANSITIVE, ATTR_PMSI, &p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type2_bytes_match_rfc7432() {
        let rd = Rd::ip(Ipv4Addr::new(192, 0, 2, 1), 100);
        let n = Nlri::Mac {
            rd,
            etag: 0,
            mac: [2, 0, 0, 0, 0, 1],
            vni: 100,
        };
        let b = n.encode();
        assert_eq!(
            b,
            [
                2, 33, 0, 1, 192, 0, 2, 1, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 48, 2,
                0, 0, 0, 0, 1, 0, 0, 0, 100
            ]
        );
        assert_eq!(Nlri::decode(&b), Some(n));
        assert_eq!(rd.to_string(), "192.0.2.1:100");
        // Truncated anywhere: no route, no panic.
        for cut in 0..b.len() {
            assert_eq!(Nlri::decode(&b[..cut]), None);
        }
    }

    #[test]
    fn routes_and_communities_display_as_logs_write_them() {
        let vtep = Ipv4Addr::new(192, 0, 2, 1);
        assert_eq!(Mac([2, 0, 0, 0, 0, 0x0a]).to_string(), "02:00:00:00:00:0a");
        assert_eq!(
            Mac([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]).to_string(),
            "aa:bb:cc:dd:ee:ff"
        );
        let mac = Nlri::Mac {
            rd: Rd::ip(vtep, 100),
            etag: 0,
            mac: [2, 0, 0, 0, 0, 0x0a],
            vni: 100,
        };
        assert_eq!(
            mac.to_string(),
            "type-2 rd 192.0.2.1:100 mac 02:00:00:00:00:0a vni 100"
        );
        let imet = Nlri::Imet {
            rd: Rd::ip(vtep, 7),
            etag: 5,
            origin: vtep.into(),
        };
        assert_eq!(
            imet.to_string(),
            "type-3 rd 192.0.2.1:7 etag 5 origin 192.0.2.1"
        );
        // An RD of type 0 (2-byte ASN : 4-byte number) and of type 2 (4-byte ASN : 2 bytes).
        assert_eq!(
            Rd([0, 0, 0xfd, 0xe8, 0, 1, 0, 0]).to_string(),
            "65000:65536"
        );
        assert_eq!(Rd([0, 2, 0, 1, 0, 0, 0, 9]).to_string(), "65536:9");
        let shown: Vec<String> = [
            ExtCommunity::RouteTarget {
                asn: 65000,
                value: 100,
            },
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            },
            ExtCommunity::Encapsulation { tunnel_type: 11 },
            ExtCommunity::MacMobility {
                sticky: false,
                seq: 7,
            },
            ExtCommunity::MacMobility {
                sticky: true,
                seq: 0,
            },
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            shown,
            [
                "rt 65000:100",
                "encap vxlan",
                "encap 11",
                "mac-mobility seq 7",
                "mac-mobility seq 0 sticky"
            ]
        );
    }

    #[test]
    fn type2_with_an_ipv4_address_reads_its_label() {
        let mut b = Nlri::Mac {
            rd: Rd::ip(Ipv4Addr::new(10, 0, 0, 2), 1),
            etag: 0,
            mac: [2, 0, 0, 0, 0, 7],
            vni: 0x01_02_03,
        }
        .encode();
        // Insert an IPv4 address: IP length 32 then 4 bytes, route length 37.
        b[1] = 37;
        b[31] = 32;
        b.splice(32..32, [10, 20, 0, 2]);
        match Nlri::decode(&b) {
            Some(Nlri::Mac { vni, mac, .. }) => {
                assert_eq!(vni, 0x01_02_03);
                assert_eq!(mac, [2, 0, 0, 0, 0, 7]);
            }
            other => panic!("{other:?}"),
        }
    }

    /// An IPv6 VTEP: the type-3 originator is 128 bits (length 29), MP_REACH's next hop 16
    /// bytes and the PMSI tunnel's endpoint 16; all read back. A next hop of 32 bytes
    /// (global, then link-local) reads as the global one.
    #[test]
    fn ipv6_vteps_round_trip() {
        let vtep: IpAddr = "2001:db8::1".parse().unwrap();
        let n = Nlri::Imet {
            rd: Rd::for_vtep(vtep, Some(Ipv4Addr::new(198, 51, 100, 1)), 100),
            etag: 0,
            origin: vtep,
        };
        let b = n.encode();
        assert_eq!(&b[..2], &[3, 29]);
        assert_eq!(b[2 + 12], 128);
        assert_eq!(Nlri::decode(&b), Some(n));
        assert_eq!(
            n.to_string(),
            "type-3 rd 198.51.100.1:100 origin 2001:db8::1"
        );
        let attrs = originate_attrs(&n, vtep, &[], Some(100));
        let mp = attrs.iter().find(|a| a[1] == ATTR_MP_REACH).unwrap();
        assert_eq!(mp[3 + 3], 16, "next-hop length");
        let a = Attrs::decode(&attrs);
        assert_eq!(a.next_hop, Some(vtep));
        assert_eq!(a.pmsi, Some((vtep, 100)));
        // A type-1 RD for an IPv6 VTEP without a router id: its low 32 bits.
        assert_eq!(Rd::for_vtep(vtep, None, 7).to_string(), "0.0.0.1:7");
        // Global + link-local next hop (32 bytes), as some speakers send.
        let mut v = vec![0, 25, 70, 32];
        v.extend_from_slice(&octets(vtep));
        v.extend_from_slice(&octets("fe80::1".parse().unwrap()));
        v.push(0);
        let a = Attrs::decode(&[attr(FLAG_OPTIONAL, ATTR_MP_REACH, &v)]);
        assert_eq!(a.next_hop, Some(vtep));
        // An originator of another length is refused, not misread.
        let mut bad = b.clone();
        bad[2 + 12] = 64;
        assert_eq!(Nlri::decode(&bad), None);
    }

    #[test]
    fn type3_and_its_attributes_round_trip() {
        let vtep = Ipv4Addr::new(192, 0, 2, 1);
        let n = Nlri::Imet {
            rd: Rd::ip(vtep, 100),
            etag: 0,
            origin: vtep.into(),
        };
        assert_eq!(Nlri::decode(&n.encode()), Some(n));
        let comms = [
            ExtCommunity::RouteTarget {
                asn: 65000,
                value: 100,
            },
            ExtCommunity::Encapsulation {
                tunnel_type: TUNNEL_VXLAN,
            },
            ExtCommunity::MacMobility {
                sticky: false,
                seq: 7,
            },
        ];
        let attrs = originate_attrs(&n, vtep.into(), &comms, Some(100));
        // PMSI: flags C0, type 22, length 9, flags 0, type 6, label 100, endpoint.
        assert_eq!(attrs[3], [0xc0, 22, 9, 0, 6, 0, 0, 100, 192, 0, 2, 1]);
        // The RT as FRR writes ASN:VNI (type 0x00, sub 0x02).
        assert_eq!(&attrs[2][3..11], &[0, 2, 0xfd, 0xe8, 0, 0, 0, 100]);
        let a = Attrs::decode(&attrs);
        assert_eq!(a.next_hop, Some(vtep.into()));
        assert_eq!(a.pmsi, Some((vtep.into(), 100)));
        assert_eq!(a.communities, comms);
        assert_eq!(a.mobility_seq(), Some(7));
        assert!(a.has_rt(65000, 100));
        // Malformed attributes are skipped.
        assert_eq!(
            Attrs::decode(&[vec![0x90, 14, 0, 40, 0], vec![0xc0], vec![0x40, 16, 9, 1]]),
            Attrs::default()
        );
    }
}
