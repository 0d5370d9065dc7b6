//! What the fast path's tests share: flow keys and actions as the pipeline would install
//! them, and the skip rule.
#![allow(dead_code)]

use std::process::Command;

use qbridge_fastpath::{
    FastPath, FdbEntry, FdbKey, FlowAction, FlowKey, Hop, Port, VxdKey, HOP_LEARNING, PORT_ENABLED,
};
use std::net::Ipv4Addr;

/// The key of an IPv4 frame to `dst` arriving on port `port` with `tags` (TPID, TCI), outer
/// first.
pub fn key(port: u32, dst: [u8; 6], tags: &[(u16, u16)]) -> FlowKey {
    let mut k = FlowKey {
        in_port: port,
        dst,
        ntags: tags.len() as u8,
        ethertype_be: 0x0800u16.to_be(),
        ..FlowKey::default()
    };
    for (i, (tpid, tci)) in tags.iter().enumerate() {
        k.tpid_be[i] = tpid.to_be();
        k.tci_be[i] = tci.to_be();
    }
    k
}

/// An action of generation `gen` for frames of port `in_port` with `in_tags` tags: to
/// `out_ifindex` (port `out_port`) in FID `fid` of bridge 0, leaving with `push` (outer
/// first); one hop, whose ingress port learns; the destination's FDB version 7, frames of 60
/// to 1522 bytes.
pub fn action(
    gen: u32,
    (in_port, in_tags): (u32, usize),
    out_ifindex: u32,
    out_port: u32,
    fid: u16,
    push: &[(u16, u16)],
) -> FlowAction {
    let mut a = FlowAction {
        generation: gen,
        out_ifindex,
        min_len: 60,
        max_len: 1522,
        push_n: push.len() as u8,
        n_hops: 1,
        ..FlowAction::default()
    };
    a.hops[0] = Hop {
        in_port,
        out_port,
        dst_version: 7,
        fid,
        vlan_slot: fid,
        flags: HOP_LEARNING,
        in_tags: in_tags as u8,
        out_tags: push.len() as u8,
        ..Hop::default()
    };
    for (i, (tpid, tci)) in push.iter().enumerate() {
        a.push_tpid_be[i] = tpid.to_be();
        a.push_tci_be[i] = tci.to_be();
    }
    a
}

/// Says why a test does nothing; with `QBRIDGE_REQUIRE_NETNS=1` (the test command as root)
/// that is a failure instead.
pub fn skip(why: &str) {
    if std::env::var_os("QBRIDGE_REQUIRE_NETNS").is_some_and(|v| v == "1") {
        panic!("cannot run: {why} (QBRIDGE_REQUIRE_NETNS=1)");
    }
    eprintln!("skipped: {why}");
}

/// A fast-path port of index `index` that also takes `extra_tpid` as a tag (0: none).
pub fn port(index: u32, extra_tpid: u16) -> Port {
    Port {
        index,
        flags: PORT_ENABLED,
        extra_tpid_be: [extra_tpid.to_be(), 0],
        ..Port::default()
    }
}

/// Runs `ip ARGS` in the test's namespace; a failure fails the test.
pub fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The index of interface `n` in the test's namespace.
pub fn ifindex(n: &str) -> u32 {
    let o = Command::new("ip")
        .args(["-o", "link", "show", n])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// An Ethernet header: destination, source, EtherType.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A TCP (data offset 5, ACK) or UDP header with `payload` bytes after it.
pub fn ports_l4(tcp: bool, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    if tcp {
        l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        l4.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        l4.extend_from_slice(&[0, 0]);
    }
    l4.extend((0..payload).map(|i| i as u8));
    l4
}

/// Gives this thread a network namespace of its own (`unshare(CLONE_NEWNET)`), for a test
/// that loads the program; false, after saying why (`skip`), when the fast path is not built
/// or the namespace cannot be made (not root).
pub fn own_netns() -> bool {
    if !qbridge_fastpath::FastPath::built() {
        skip("built without clang");
        return false;
    }
    // SAFETY: unshare(2) with a flag, no memory; it changes only this thread's namespace.
    #[allow(unsafe_code)]
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        skip("cannot unshare a network namespace (not root?)");
        return false;
    }
    true
}

/// Puts `entries` (MAC, port) in bridge 0's FDB in FID `fid`, each of version 7 (the one
/// [`action`]'s hop expects), never seen.
pub fn fdb(fp: &mut FastPath, fid: u16, entries: &[([u8; 6], u32)]) {
    for &(mac, port) in entries {
        fp.set_fdb(
            FdbKey {
                bridge: 0,
                fid,
                mac,
                pad: 0,
            },
            FdbEntry {
                port,
                version: 7,
                last_seen_ns: 0,
            },
        )
        .unwrap();
    }
}

/// The key of the IPv4 VXLAN tunnel from `remote` to `local`, VNI `vni`, on port 4789.
pub fn vxd_key(local: Ipv4Addr, remote: Ipv4Addr, vni: u32) -> VxdKey {
    VxdKey {
        local: local.octets(),
        remote: remote.octets(),
        vni: qbridge_wire::vxlan::Vni::new(vni).unwrap().word(),
        dstport: 4789u16.to_be_bytes(),
        pad: 0,
    }
}

/// `frame` (untagged) with `tags` (TPID, TCI; outer first) after its addresses.
pub fn tagged(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&frame[12..]);
    f
}

/// An ARP reply from `src` to `dst` (a frame that is not IP), 60 bytes.
pub fn arp(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = eth(dst, src, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&[1; 38]);
    f
}

/// IPv4 from `src` to `dst` of protocol `proto` with `l4` after its header (192.168.1.1 to
/// .2, id 1, TTL 64, header checksum 0); `frag`: the flags and offset word; padded to 60
/// bytes with `pad` (Ethernet padding, beyond the IP length).
pub fn ipv4(
    dst: [u8; 6],
    src: [u8; 6],
    tos: u8,
    proto: u8,
    frag: u16,
    l4: &[u8],
    pad: u8,
) -> Vec<u8> {
    let mut f = eth(dst, src, 0x0800);
    let len = 20 + l4.len() as u16;
    f.extend_from_slice(&[0x45, tos]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 1]);
    f.extend_from_slice(&frag.to_be_bytes());
    f.extend_from_slice(&[64, proto, 0, 0, 192, 168, 1, 1, 192, 168, 1, 2]);
    f.extend_from_slice(l4);
    f.resize(f.len().max(60), pad);
    f
}

/// IPv6 from `src` to `dst` (fd.. to fe.., hop limit 64) of traffic class `tclass`, next
/// header `next`, with `l4` after its header.
pub fn ipv6(dst: [u8; 6], src: [u8; 6], tclass: u8, next: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(dst, src, 0x86dd);
    f.push(0x60 | tclass >> 4);
    f.extend_from_slice(&[tclass << 4, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 64]);
    f.extend_from_slice(&[0xfd; 16]);
    f.extend_from_slice(&[0xfe; 16]);
    f.extend_from_slice(l4);
    f
}

/// The quartiles of `x` (sorted in place): a cost study's figures.
pub fn quartiles(x: &mut [u32]) -> (u32, u32, u32) {
    x.sort_unstable();
    (x[x.len() / 4], x[x.len() / 2], x[3 * x.len() / 4])
}

/// Veth pairs `(a, b)` in the test's namespace, every end up.
pub fn veths(pairs: &[(&str, &str)]) {
    for (a, b) in pairs {
        ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
        ip(&["link", "set", a, "up"]);
        ip(&["link", "set", b, "up"]);
    }
}

/// `addr` a permanent neighbour of `dev` at `mac` (the underlay's remote for
/// `bpf_redirect_neigh`).
pub fn neighbour(addr: &str, mac: &str, dev: &str) {
    ip(&[
        "neigh",
        "replace",
        addr,
        "lladdr",
        mac,
        "nud",
        "permanent",
        "dev",
        dev,
    ]);
}

/// The datagram a remote VTEP sends for `inner`: Ethernet `macs` (destination, source), then
/// IPv4 or IPv6 (as `src` is) from `src` to `dst`, UDP 50000 to 4789, TTL 64, TOS 0, flow
/// label 0, as `qbridge_io::vxlan::outer::encapsulate` builds it (`zero_csum`: no UDP
/// checksum), VNI `vni`.
pub fn from_vtep(
    macs: ([u8; 6], [u8; 6]),
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    vni: u32,
    inner: &[u8],
    zero_csum: bool,
) -> Vec<u8> {
    use qbridge_io::vxlan::outer::{encapsulate, Outer};
    let mut f = eth(macs.0, macs.1, if src.is_ipv6() { 0x86dd } else { 0x0800 });
    encapsulate(
        &Outer {
            src,
            dst,
            sport: 50_000,
            dport: 4789,
            hop_limit: 64,
            tos: 0,
            flow_label: 0,
            zero_csum,
        },
        qbridge_wire::vxlan::Vni::new(vni).unwrap(),
        inner,
        &mut f,
    )
    .unwrap();
    f
}

/// What the pipeline's VTEP sends for `inner` through tunnel `t` with outer TOS (traffic
/// class) `tos`: `qbridge_io::vxlan::outer::encapsulate` from `t`'s local address to its
/// remote (IPv6 with `VX_IPV6`, then with `t`'s flow label for the socket), from the send
/// socket `qbridge_wire::vxlan::source_port` picks, with `t`'s hop limit, port and VNI; the UDP
/// checksum 0 over IPv4 (the program's one difference), computed over IPv6 as the socket
/// does. The outer Ethernet addresses are left to `bpf_redirect_neigh` (0 in a test run,
/// which does not redirect).
pub fn vtep_sends(t: &qbridge_fastpath::Vxlan, inner: &[u8], tos: u8) -> Vec<u8> {
    use qbridge_fastpath::{VXLAN_SOCKETS, VX_IPV6};
    use qbridge_io::vxlan::outer::{encapsulate, Outer};
    use std::net::{IpAddr, Ipv6Addr};
    let sock = usize::from(qbridge_wire::vxlan::source_port(inner)) % VXLAN_SOCKETS;
    let v6 = t.flags & VX_IPV6 != 0;
    let (src, dst) = if v6 {
        (
            IpAddr::V6(Ipv6Addr::from(t.local6)),
            IpAddr::V6(Ipv6Addr::from(t.remote6)),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::from(t.local)),
            IpAddr::V4(Ipv4Addr::from(t.remote)),
        )
    };
    let mut out = eth([0; 6], [0; 6], if v6 { 0x86dd } else { 0x0800 });
    encapsulate(
        &Outer {
            src,
            dst,
            sport: u16::from_be_bytes(t.sport[sock]),
            dport: u16::from_be_bytes(t.dstport),
            hop_limit: t.ttl,
            tos,
            flow_label: u32::from_be_bytes(t.flow_label[sock]),
            zero_csum: !v6,
        },
        qbridge_wire::vxlan::Vni::new(u32::from_be_bytes([0, t.vni[0], t.vni[1], t.vni[2]]))
            .unwrap(),
        inner,
        &mut out,
    )
    .unwrap();
    out
}
