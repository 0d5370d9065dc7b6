//! A bridge's own interface (its host port) and a VLAN device on it, on real namespaces (root
//! only):
//!
//! ```text
//!   h1 (10.10.0.1) ─ s1/p1 (access VLAN 10, PVID untagged) ─┐
//!                                                            br0 (vlan_filtering 1) ─ host port
//!   h2 (10.1.0.1)  ─ s2/p2 (VLAN 1, the default)  ──────────┘      │
//!                                                  TAP br0 (VLAN 1 untagged) 10.1.0.254
//!                                                  TAP br0.10 (vlan id 10 on br0) 10.10.0.254
//! ```
//!
//! The daemon runs in namespace `sw` and creates both TAPs there; the kernel of `sw` is the
//! host behind the bridge, as with a Linux bridge `br0` and `ip link add link br0 name br0.10
//! type vlan id 10`. `sw` answers ARP only for an address of the interface the request arrived
//! on (`arp_ignore=1`), so a reply on the VLAN-1 address can only come from a frame that reached
//! `br0` itself, not from Linux's weak host model answering on `br0.10`.
//! See `docs/conformance.md`.

mod support;

use std::time::Duration;

use support::{assert_ping, ip_in, mac_of, ping, tcp_transfer, Capture, Host, Lab};

const BATCH: &str = "\
link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev s1
link add p2 type afpacket dev s2
link set dev p1 master br0
link set dev p2 master br0
vlan del vid 1 dev p1
vlan add vid 10 dev p1 pvid untagged
link set dev br0 up
vlan add vid 10 dev br0 self
link add link br0 name br0.10 type vlan id 10
";

/// LLDP's destination (nearest bridge group), which a bridge never forwards.
const LLDP_DST: &str = "01:80:c2:00:00:0e";
const ETHERTYPE_LLDP: u16 = 0x88cc;

/// The host side in `sw`: interface `ifname` with `cidr`, as a [`Host`] for the helpers.
fn sw_host(sw: &str, ifname: &str, cidr: &str) -> Host {
    ip_in(sw, &["addr", "add", cidr, "dev", ifname]).unwrap();
    Host {
        name: format!("sw/{ifname}"),
        ns: sw.to_owned(),
        ifname: ifname.to_owned(),
        ip: cidr.split('/').next().unwrap().to_owned(),
        mac: mac_of(sw, ifname).unwrap(),
    }
}

/// `sw` reaches h2 through br0 (VLAN 1, untagged) and h1 through br0.10 (VLAN 10, tagged on
/// the host port): real pings, 20 MB of verified TCP from h1 to br0.10's address. h1's frames
/// to br0's own address (VLAN 1) do not leak into VLAN 1: no reply, nothing from h1 on br0. An
/// LLDP frame from h2 goes up to br0 and is not forwarded to h1. `link show` shows the host
/// port; `fdb show` has the bridge's address as permanent in its VLANs.
#[test]
fn host_port_and_vlan_device_reach_their_vlans() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("hostport");
    let sw = lab.netns("sw").unwrap();
    let h1 = lab.host("h1", "10.10.0.1/24", &sw, "s1").unwrap();
    let h2 = lab.host("h2", "10.1.0.1/24", &sw, "s2").unwrap();
    support::exec_in(&sw, "sysctl", &["-qw", "net.ipv4.conf.all.arp_ignore=1"]).unwrap();
    let ctl = lab.daemon(&sw, BATCH).unwrap();

    // The daemon made the TAPs in `sw` (up, with their MACs); the host gives them addresses.
    let br0 = sw_host(&sw, "br0", "10.1.0.254/24");
    let br10 = sw_host(&sw, "br0.10", "10.10.0.254/24");
    assert_ne!(br0.mac, br10.mac, "br0 and br0.10 got one MAC");

    // The control socket shows the host port and its address.
    let link = ctl.json(&["link", "show", "dev", "br0"]).unwrap();
    eprintln!("link show -j dev br0: {link}");
    let text = ctl.cmd(&["link", "show", "dev", "br0"]).unwrap();
    assert!(
        text.contains(&format!("host port: ifname br0 address {}", br0.mac)),
        "{text}"
    );
    assert_eq!(link[0]["ifname"], "br0", "{link}");
    assert_eq!(link[0]["address"], br0.mac.as_str(), "{link}");
    assert_eq!(link[0]["backend"]["type"], "tap", "{link}");
    assert_eq!(link[0]["backend"]["ifname"], "br0", "{link}");
    let vdev = ctl.json(&["link", "show", "dev", "br0.10"]).unwrap();
    assert_eq!(vdev[0]["link"], "br0", "{vdev}");
    assert_eq!(vdev[0]["linkinfo"]["info_data"]["id"], 10, "{vdev}");
    assert_eq!(vdev[0]["address"], br10.mac.as_str(), "{vdev}");
    let fdb = ctl.json(&["fdb", "show"]).unwrap();
    let permanent: Vec<Option<u64>> = fdb
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["mac"].as_str() == Some(br0.mac.as_str()) && e["state"] == "permanent")
        .map(|e| e["vlan"].as_u64())
        .collect();
    assert!(
        permanent.contains(&Some(1)) && permanent.contains(&Some(10)),
        "the bridge's address {} is not permanent in VLANs 1 and 10: {fdb}",
        br0.mac
    );

    // Real kernel pings from the host behind the bridge, both ways of each.
    assert_ping(&br0, &h2, 20);
    assert_ping(&br10, &h1, 20);
    assert_ping(&h2, &br0, 5);
    assert_ping(&h1, &br10, 5);
    let r = tcp_transfer(&h1, &br10, 20 << 20, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("TCP h1 -> br0.10: {e}\n{}", ctl.stats_text()));
    eprintln!(
        "h1 -> br0.10: {} bytes verified in {:.2} s ({:.2} Gbit/s)",
        r.bytes,
        r.secs,
        r.gbit_per_s()
    );
    assert!(ctl.fdb_has(&h1.mac, "p1").unwrap() && ctl.fdb_has(&h2.mac, "p2").unwrap());

    // h1 sends to br0's VLAN-1 address, with br0's MAC, in its own VLAN 10 (an on-link route
    // and a static neighbour, so no ARP decides the outcome). The bridge's address is local in
    // VLAN 10 too, so the frames go up tagged 10 to br0.10, whose MAC they do not carry.
    ip_in(&h1.ns, &["route", "add", "10.1.0.0/24", "dev", "eth0"]).unwrap();
    ip_in(
        &h1.ns,
        &[
            "neigh",
            "add",
            &br0.ip,
            "lladdr",
            &br0.mac,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    )
    .unwrap();
    let cap_br0 = Capture::start(&sw, "br0", 64).unwrap();
    let cap_br10 = Capture::start(&sw, "br0.10", 64).unwrap();
    let cap_h2 = Capture::start(&h2.ns, "eth0", 64).unwrap();
    let leak = ping(&h1, &br0.ip, 5);
    let on_br0 = cap_br0.finish().unwrap();
    let on_br10 = cap_br10.finish().unwrap();
    let on_h2 = cap_h2.finish().unwrap();
    assert_eq!(
        leak.received, 0,
        "h1 (VLAN 10) reached br0's VLAN-1 address:\n{}",
        leak.output
    );
    assert_eq!(
        on_br0.count_from(&[&h1.mac]),
        0,
        "br0 received frames from h1: {}",
        on_br0.summary()
    );
    assert_eq!(
        on_h2.count_from(&[&h1.mac]),
        0,
        "h2 received frames from h1: {}",
        on_h2.summary()
    );
    let to_br0_mac = on_br10
        .kept_matching(|f| f.src == support::parse_mac(&h1.mac) && f.tags.is_empty())
        .into_iter()
        .filter(|f| f.dst == support::parse_mac(&br0.mac))
        .count();
    assert!(
        to_br0_mac >= 5,
        "h1's frames to br0's MAC should go up to br0.10 (VLAN 10), untagged: {}",
        on_br10.summary()
    );

    // A link-local frame from h2's side: up to the host (br0), not forwarded to h1.
    let cap_br0 = Capture::start(&sw, "br0", 64).unwrap();
    let cap_h1 = Capture::start(&h1.ns, "eth0", 64).unwrap();
    let lldp: Vec<Vec<u8>> = (0..3)
        .map(|_| support::frame(LLDP_DST, &h2.mac, &[], ETHERTYPE_LLDP, 46))
        .collect();
    support::inject(&h2.ns, "eth0", &lldp).unwrap();
    let up = cap_br0.finish().unwrap();
    let on_h1 = cap_h1.finish().unwrap();
    let lldp_dst = support::parse_mac(LLDP_DST);
    let at_host = up
        .kept_matching(|f| f.dst == lldp_dst && f.ethertype == ETHERTYPE_LLDP && f.tags.is_empty());
    assert_eq!(
        at_host.len(),
        3,
        "br0 should receive the 3 LLDP frames untagged: {}",
        up.summary()
    );
    assert_eq!(
        on_h1.kept_matching(|f| f.dst == lldp_dst).len(),
        0,
        "the LLDP frame was forwarded to h1: {}",
        on_h1.summary()
    );
    let stats = ctl.stats_text();
    eprintln!("{stats}");
}
