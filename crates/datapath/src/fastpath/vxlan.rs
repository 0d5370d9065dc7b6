//! VXLAN ports in the fast path (decision 73): what the program needs to encapsulate a flow
//! as the port's userspace VTEP sends it ([`VxlanEgress`], made when the port opens), and the
//! tunnel of a frame the pipeline forwarded alone to the port ([`tunnel_for`]: the inner frame
//! as the port sends it, its VNI, and the remote of a static entry, read with the port's own
//! table functions).
//!
//! Cached: known unicast to a remote VTEP given by `fdb … dst` (a static entry: it changes
//! only by a command, which makes every flow stale before it answers), over an IPv4 or (decision
//! 78) IPv6 underlay whose interface is known (`dev`, or the one holding `local`), inner IP
//! frames left untagged (an `id N` port, or an external port's VLAN → VNI map) or keeping up
//! to two tags inside (Q-in-VNI, decision 86: an 802.1ad bridge's S-VLAN mapped to a VNI, the
//! customer's C-tag riding inside). A learned remote (decision 83, IPv4 or IPv6) only while
//! the port's table writes its learned entries into `qb_vxl_learned` (the program checks the
//! entry per frame: they move with traffic, and age into floods); floods and a port sending
//! zero IPv6 checksums (`udp6zerocsumtx`) stay with the pipeline.
//!
//! Over IPv6 the program writes, per send socket, the flow label the tunnel entry gives: 0.
//! The socket's own is the kernel's automatic label (`auto_flowlabels`), a hash of the
//! datagram's addresses and ports keyed by a secret drawn at boot, which nothing outside the
//! kernel can compute (docs/fast-path.md, "VXLAN").

use qbridge_io::vxlan::{SharedVxlanTable, VxlanPort, TX_SOCKETS};
use qbridge_wire::vxlan::{OuterTos, Vni};
use qbridge_wire::MacAddr;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

/// A VXLAN port as the program encapsulates for it.
#[derive(Debug, Clone)]
pub struct VxlanEgress {
    pub table: SharedVxlanTable,
    /// The port's VNI (`id N`); `None`: external (the frame's VLAN selects it).
    pub vni: Option<Vni>,
    /// The local VTEP (the send sockets' address; its family is the underlay's).
    pub local: IpAddr,
    pub dstport: u16,
    /// The send sockets' TTL or hop limit (the port's `ttl`, else the default: IPv4's
    /// `ip_default_ttl`, IPv6's the underlay interface's `hop_limit`).
    pub ttl: u8,
    pub tos: Option<OuterTos>,
    /// The send sockets' source ports, by socket.
    pub sports: [u16; TX_SOCKETS],
    /// The underlay interface and its MTU (the socket never fragments: the inner frame is at
    /// most the MTU less the outer headers, [`VxlanEgress::max_inner`]).
    pub underlay: u32,
    pub underlay_mtu: u32,
}

impl VxlanEgress {
    /// What the program needs of `port`, or why it cannot encapsulate for it (the port's
    /// frames then stay with the pipeline).
    pub fn of(port: &VxlanPort, table: SharedVxlanTable) -> Result<VxlanEgress, String> {
        let cfg = port.config();
        let local = cfg.local;
        if local.is_unspecified() {
            return Err("no local address".into());
        }
        if local.is_ipv6() && cfg.udp6zerocsumtx {
            return Err("udp6zerocsumtx (zero IPv6 checksums)".into());
        }
        let dev = match (&cfg.dev, local) {
            (Some(d), _) => d.clone(),
            (None, IpAddr::V4(l)) => qbridge_io::vxlan::device_of(l)
                .ok_or_else(|| format!("no interface holds {local}"))?,
            (None, IpAddr::V6(l)) => {
                device_of6(l).ok_or_else(|| format!("no interface holds {local}"))?
            }
        };
        let underlay = qbridge_io::sys::ifindex(&dev).map_err(|e| e.to_string())?;
        let underlay_mtu = qbridge_io::sys::get_mtu(&dev).map_err(|e| e.to_string())?;
        let sports = port.send_ports();
        if sports.contains(&0) {
            return Err("a send socket's port is unknown".into());
        }
        // The default of an unconnected socket: IPv4's ip_default_ttl; IPv6's the hop_limit
        // of the route's device (ip6_dst_hoplimit: no route here sets one).
        let default = match local {
            IpAddr::V4(_) => "/proc/sys/net/ipv4/ip_default_ttl".to_string(),
            IpAddr::V6(_) => format!("/proc/sys/net/ipv6/conf/{dev}/hop_limit"),
        };
        let ttl = cfg.ttl.unwrap_or_else(|| {
            std::fs::read_to_string(&default)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(64)
        });
        Ok(VxlanEgress {
            table,
            vni: cfg.vni,
            local,
            dstport: cfg.dstport,
            ttl,
            tos: cfg.tos,
            sports,
            underlay,
            underlay_mtu,
        })
    }
}

impl VxlanEgress {
    /// The longest inner frame the send socket takes: the underlay MTU less the outer IP,
    /// UDP and VXLAN headers (36 bytes over IPv4, 56 over IPv6).
    pub fn max_inner(&self) -> i64 {
        i64::from(self.underlay_mtu)
            - qbridge_io::vxlan::outer::headers_len(self.local.is_ipv6()) as i64
    }
}

/// The interface holding IPv6 address `a` (`/proc/net/if_inet6`: the address in hex, its
/// interface's index, prefix, scope, flags and name).
fn device_of6(a: Ipv6Addr) -> Option<String> {
    let want: String = a.octets().iter().map(|b| format!("{b:02x}")).collect();
    let t = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    t.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 6 && f[0] == want).then(|| f[5].to_string())
    })
}

/// The tunnel of a frame the pipeline handed to VXLAN port `v` as `output` (its whole first
/// bytes, the tags as the pipeline left them): the inner frame as the port sends it (an
/// external port removes the VLAN's tag), and the program's tunnel entry; `None` when the port
/// would not send it to one remote of a static entry of the underlay's family.
pub fn tunnel_for(v: &VxlanEgress, output: &[u8]) -> Option<(Vec<u8>, qbridge_fastpath::Vxlan)> {
    let t = v.table.lock().unwrap_or_else(|p| p.into_inner());
    let (vni, inner) = match v.vni {
        Some(vni) => (vni, output.to_vec()),
        None => {
            let vni = t.tunnels.vni_of_frame(output)?;
            let mut f = output.get(..12)?.to_vec();
            f.extend_from_slice(output.get(16..)?);
            (vni, f)
        }
    };
    let dst = MacAddr::from_bytes(inner.get(..6)?);
    let now = std::time::Instant::now();
    // A static entry's remote, or (vxl_, decision 83) a learned one (IPv4 or IPv6, the
    // underlay's family: checked below) while the port's table has a hook writing its learned
    // entries into qb_vxl_learned: the tunnel is marked VX_LEARNED and the program checks
    // that entry on every frame.
    let (remote, learned) = match t.static_remote(vni, dst) {
        Some(r) => (r, false),
        None if t.has_learn_hook() => (t.lookup(vni, dst, now)?, true),
        None => return None,
    };
    // What the port's lookup answers (statics first): the same remote.
    if t.lookup(vni, dst, now) != Some(remote) {
        return None;
    }
    let n = vni.get().to_be_bytes();
    let mut sport = [[0u8; 2]; qbridge_fastpath::VXLAN_SOCKETS];
    for (s, p) in sport.iter_mut().zip(v.sports) {
        *s = p.to_be_bytes();
    }
    let (tos, flags) = match v.tos {
        Some(OuterTos::Fixed(t)) => (t, 0),
        Some(OuterTos::Inherit) => (0, qbridge_fastpath::VX_INHERIT_TOS),
        None => (0, 0),
    };
    let mut t = qbridge_fastpath::Vxlan {
        vni: [n[1], n[2], n[3], 0],
        ifindex: v.underlay,
        sport,
        dstport: v.dstport.to_be_bytes(),
        ttl: v.ttl,
        tos,
        flags,
        ..Default::default()
    };
    match (v.local, remote) {
        (IpAddr::V4(l), IpAddr::V4(r)) => {
            t.local = l.octets();
            t.remote = r.octets();
            if learned {
                // The port's index (qb_vxl_learned's key) is the flow's to fill in.
                t.flags |= qbridge_fastpath::VX_LEARNED;
            }
        }
        // The flow labels stay 0 (the module's comment: the socket's are the kernel's secret).
        (IpAddr::V6(l), IpAddr::V6(r)) => {
            t.flags |= qbridge_fastpath::VX_IPV6;
            t.local6 = l.octets();
            t.remote6 = r.octets();
            if learned {
                // vxl_: the entry the program checks is an IPv6 one (QB_VXL_IPV6).
                t.flags |= qbridge_fastpath::VX_LEARNED;
            }
        }
        _ => return None,
    }
    Some((inner, t))
}

/// vxl_ (decision 83): the program stops using a learned entry this long before the port's
/// table ages it: its clock (`bpf_ktime_get_coarse_ns`) may be a tick behind the daemon's.
pub(crate) const VXL_MARGIN_NS: u64 = 20_000_000;

/// `CLOCK_MONOTONIC` (the program's clock) at `at`.
fn mono_of(at: std::time::Instant) -> u64 {
    let now = std::time::Instant::now();
    let m = super::mono_now();
    match now.checked_duration_since(at) {
        Some(d) => m.saturating_sub(d.as_nanos() as u64),
        None => m + at.duration_since(now).as_nanos() as u64,
    }
}

/// The `Instant` of `CLOCK_MONOTONIC` time `ns` (in the past).
fn instant_of(ns: u64) -> std::time::Instant {
    let now = std::time::Instant::now();
    let back = std::time::Duration::from_nanos(super::mono_now().saturating_sub(ns));
    now.checked_sub(back).unwrap_or(now)
}

/// vxl_: `qb_vxl_learned`'s key for port index `port`.
fn vxl_key(port: u16, vni: Vni, mac: MacAddr) -> qbridge_fastpath::VxdSrcKey {
    qbridge_fastpath::VxdSrcKey {
        port: u32::from(port),
        vni: vni.word(),
        mac: mac.0,
        pad: 0,
    }
}

/// vxl_ (decision 83): the hook a learning VXLAN port's table (port index `port`) writes its
/// learned entries into `qb_vxl_learned` with, under its lock: (VNI, MAC) → the remote (IPv4,
/// or IPv6 with `VXL_IPV6`), the deadline (when the table ages the entry, less
/// [`VXL_MARGIN_NS`]) and the last-seen time. An entry that goes or a write the kernel refuses
/// (the map full) removes the key: the program then leaves the MAC's frames to the pipeline.
pub(crate) fn vxl_hook(map: qbridge_fastpath::VxlMap, port: u16) -> qbridge_io::vxlan::LearnHook {
    Box::new(move |vni, mac, e| {
        let key = vxl_key(port, vni, mac);
        let r = match e {
            Some((a, seen, ageing)) => {
                let seen_ns = mono_of(seen);
                let v = qbridge_fastpath::VxlRemote {
                    deadline_ns: (seen_ns + ageing.as_nanos() as u64).saturating_sub(VXL_MARGIN_NS),
                    last_seen_ns: seen_ns,
                    ..vxl_remote(a)
                };
                map.set(&key, &v).or_else(|e| map.remove(&key).and(Err(e)))
            }
            None => map.remove(&key),
        };
        if let Err(e) = r {
            tracing::debug!("fast path: learned VXLAN remote of port index {port}: {e}");
        }
    })
}

/// vxl_: the remote fields of `qb_vxl_learned`'s value for remote `a` (either family).
fn vxl_remote(a: IpAddr) -> qbridge_fastpath::VxlRemote {
    match a {
        IpAddr::V4(a) => qbridge_fastpath::VxlRemote {
            remote: a.octets(),
            ..Default::default()
        },
        IpAddr::V6(a) => qbridge_fastpath::VxlRemote {
            flags: qbridge_fastpath::VXL_IPV6,
            remote6: a.octets(),
            ..Default::default()
        },
    }
}

/// vxl_ (decision 83), the ager of a learning VXLAN port's table (port index `port`), once a
/// second: a learned entry past half its ageing time is refreshed to the last time the
/// program decapsulated a frame from it (behind the same remote), then the entries aged
/// out are removed (the hook removes them from the map). One map read per such entry.
pub(crate) fn vxl_age(
    map: &qbridge_fastpath::VxlMap,
    port: u16,
    t: &mut qbridge_io::vxlan::VxlanTable,
) {
    let now = std::time::Instant::now();
    let ageing = t.ageing;
    for (vni, mac, d, seen) in t.learned_entries() {
        if now.saturating_duration_since(seen) * 2 < ageing {
            continue;
        }
        let Ok(Some(r)) = map.get(&vxl_key(port, vni, mac)) else {
            continue;
        };
        let w = vxl_remote(d);
        if (r.flags, r.remote, r.remote6) == (w.flags, w.remote, w.remote6)
            && r.last_seen_ns > mono_of(seen)
        {
            t.refresh(vni, mac, d, instant_of(r.last_seen_ns));
        }
    }
    t.expire(now);
}

/// A VXLAN port's [`VxlanEgress`] as the workers read it (`PortShared::fast_vxlan`).
pub type SharedEgress = std::sync::Mutex<Option<Arc<VxlanEgress>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_io::vxlan::{TunnelMap, VxlanTable};

    const HB: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

    fn egress(vni: Option<u32>) -> VxlanEgress {
        VxlanEgress {
            table: VxlanTable::shared(),
            vni: vni.and_then(Vni::new),
            local: "192.0.2.1".parse().unwrap(),
            dstport: 4789,
            ttl: 64,
            tos: Some(OuterTos::Inherit),
            sports: [
                40_000, 40_001, 40_002, 40_003, 40_004, 40_005, 40_006, 40_007,
            ],
            underlay: 7,
            underlay_mtu: 1550,
        }
    }

    fn frame(tag: Option<u16>) -> Vec<u8> {
        let mut f = HB.to_vec();
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
        if let Some(vid) = tag {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&vid.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 20]);
        f
    }

    /// A static remote gives the tunnel, with the port's settings; a learned one, an IPv6 one
    /// or none gives nothing (the pipeline keeps those frames).
    #[test]
    fn only_a_static_ipv4_remote_makes_a_tunnel() {
        let e = egress(Some(100));
        let vni = Vni::new(100).unwrap();
        let f = frame(None);
        assert!(tunnel_for(&e, &f).is_none(), "no entry: a flood");
        e.table.lock().unwrap().learn(
            vni,
            MacAddr(HB),
            "192.0.2.9".parse().unwrap(),
            std::time::Instant::now(),
        );
        assert!(tunnel_for(&e, &f).is_none(), "learned: not cached");
        e.table
            .lock()
            .unwrap()
            .set_statics(&[(vni, MacAddr(HB), "192.0.2.2".parse().unwrap())]);
        let (inner, t) = tunnel_for(&e, &f).unwrap();
        assert_eq!(inner, f);
        assert_eq!(
            (t.local, t.remote, t.vni, t.ifindex, t.ttl, t.tos),
            ([192, 0, 2, 1], [192, 0, 2, 2], [0, 0, 100, 0], 7, 64, 0)
        );
        assert_eq!(t.flags, qbridge_fastpath::VX_INHERIT_TOS);
        assert_eq!(t.sport[3], 40_003u16.to_be_bytes());
        assert_eq!(t.dstport, 4789u16.to_be_bytes());
        e.table
            .lock()
            .unwrap()
            .set_statics(&[(vni, MacAddr(HB), "2001:db8::2".parse().unwrap())]);
        assert!(tunnel_for(&e, &f).is_none(), "an IPv6 remote");
    }

    /// vxl_ (decision 83): with the table's learn hook set (the program has its learned
    /// entries), a learned IPv4 remote makes a VX_LEARNED tunnel; an aged one or one of the
    /// other family (an IPv6 remote over this IPv4 underlay) none; a static entry's tunnel is
    /// not marked.
    #[test]
    fn a_learned_remote_makes_a_marked_tunnel_once_the_hook_is_set() {
        let e = egress(Some(100));
        let vni = Vni::new(100).unwrap();
        let f = frame(None);
        let now = std::time::Instant::now();
        {
            let mut t = e.table.lock().unwrap();
            t.learn(vni, MacAddr(HB), "192.0.2.9".parse().unwrap(), now);
            t.set_learn_hook(Some(Box::new(|_, _, _| {})));
        }
        let (inner, t) = tunnel_for(&e, &f).unwrap();
        assert_eq!(inner, f);
        assert_eq!(t.remote, [192, 0, 2, 9]);
        assert_eq!(
            t.flags,
            qbridge_fastpath::VX_INHERIT_TOS | qbridge_fastpath::VX_LEARNED
        );
        e.table
            .lock()
            .unwrap()
            .set_ageing(std::time::Duration::ZERO);
        assert!(tunnel_for(&e, &f).is_none(), "aged");
        {
            let mut t = e.table.lock().unwrap();
            t.set_ageing(qbridge_io::vxlan::DEFAULT_AGEING);
            t.learn(vni, MacAddr(HB), "2001:db8::9".parse().unwrap(), now);
        }
        assert!(
            tunnel_for(&e, &f).is_none(),
            "an IPv6 learned remote over IPv4"
        );
        e.table
            .lock()
            .unwrap()
            .set_statics(&[(vni, MacAddr(HB), "192.0.2.2".parse().unwrap())]);
        let (_, t) = tunnel_for(&e, &f).unwrap();
        assert_eq!(t.flags, qbridge_fastpath::VX_INHERIT_TOS, "a static remote");
    }

    /// An IPv6 underlay (decision 78): a static IPv6 remote makes a tunnel with the IPv6
    /// addresses and flow labels 0; an IPv4 remote none; the inner frame at most the MTU less
    /// 56 bytes.
    #[test]
    fn a_static_ipv6_remote_makes_an_ipv6_tunnel() {
        let mut e = egress(Some(100));
        e.local = "2001:db8::1".parse().unwrap();
        let vni = Vni::new(100).unwrap();
        let f = frame(None);
        e.table
            .lock()
            .unwrap()
            .set_statics(&[(vni, MacAddr(HB), "2001:db8::2".parse().unwrap())]);
        let (inner, t) = tunnel_for(&e, &f).unwrap();
        assert_eq!(inner, f);
        assert_eq!(
            t.flags,
            qbridge_fastpath::VX_INHERIT_TOS | qbridge_fastpath::VX_IPV6
        );
        assert_eq!(
            (t.local6, t.remote6),
            (
                "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets(),
                "2001:db8::2".parse::<Ipv6Addr>().unwrap().octets()
            )
        );
        assert_eq!(
            (t.local, t.remote, t.flow_label),
            ([0; 4], [0; 4], [[0; 4]; 8])
        );
        assert_eq!(e.max_inner(), 1550 - 56);
        e.table
            .lock()
            .unwrap()
            .set_statics(&[(vni, MacAddr(HB), "192.0.2.2".parse().unwrap())]);
        assert!(tunnel_for(&e, &f).is_none(), "an IPv4 remote");
    }

    /// vxl_ over an IPv6 underlay: a learned IPv6 remote makes a VX_LEARNED IPv6 tunnel (the
    /// program checks an IPv6 entry); a learned IPv4 one none.
    #[test]
    fn a_learned_ipv6_remote_makes_a_marked_ipv6_tunnel() {
        let mut e = egress(Some(100));
        e.local = "2001:db8::1".parse().unwrap();
        let vni = Vni::new(100).unwrap();
        let f = frame(None);
        let now = std::time::Instant::now();
        {
            let mut t = e.table.lock().unwrap();
            t.learn(vni, MacAddr(HB), "2001:db8::9".parse().unwrap(), now);
            t.set_learn_hook(Some(Box::new(|_, _, _| {})));
        }
        let (_, t) = tunnel_for(&e, &f).unwrap();
        assert_eq!(
            t.flags,
            qbridge_fastpath::VX_INHERIT_TOS
                | qbridge_fastpath::VX_IPV6
                | qbridge_fastpath::VX_LEARNED
        );
        assert_eq!(
            t.remote6,
            "2001:db8::9".parse::<Ipv6Addr>().unwrap().octets()
        );
        e.table
            .lock()
            .unwrap()
            .learn(vni, MacAddr(HB), "192.0.2.9".parse().unwrap(), now);
        assert!(
            tunnel_for(&e, &f).is_none(),
            "an IPv4 learned remote over IPv6"
        );
    }

    /// An external port: the frame's VLAN selects the VNI and its tag goes; an unmapped VLAN
    /// or an untagged frame makes no tunnel.
    #[test]
    fn an_external_port_maps_the_vlan_and_removes_its_tag() {
        let e = egress(None);
        {
            let mut t = e.table.lock().unwrap();
            t.tunnels = TunnelMap::new(&[(10, 0x12_3456)], Some(0x8100), None);
            t.set_statics(&[(
                Vni::new(0x12_3456).unwrap(),
                MacAddr(HB),
                "192.0.2.2".parse().unwrap(),
            )]);
        }
        let (inner, t) = tunnel_for(&e, &frame(Some(10))).unwrap();
        assert_eq!(inner, frame(None));
        assert_eq!(t.vni, [0x12, 0x34, 0x56, 0]);
        assert!(tunnel_for(&e, &frame(Some(11))).is_none());
        assert!(tunnel_for(&e, &frame(None)).is_none());
    }

    /// Q-in-VNI (decision 86): an 802.1ad bridge's external port maps the S-VLAN; the S-tag
    /// goes and the customer's C-tag stays in the inner frame.
    #[test]
    fn an_s_vlan_maps_and_the_c_tag_rides_inside() {
        let e = egress(None);
        {
            let mut t = e.table.lock().unwrap();
            t.tunnels = TunnelMap::new(&[(20, 0x86)], Some(0x88a8), None);
            t.set_statics(&[(
                Vni::new(0x86).unwrap(),
                MacAddr(HB),
                "192.0.2.2".parse().unwrap(),
            )]);
        }
        let c = frame(Some(7));
        let mut qinq = c[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xa8, 0, 20]);
        qinq.extend_from_slice(&c[12..]);
        let (inner, t) = tunnel_for(&e, &qinq).unwrap();
        assert_eq!(inner, c, "the C-tag inside");
        assert_eq!(t.vni, [0, 0, 0x86, 0]);
    }
}
