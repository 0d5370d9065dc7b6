//! Macvlan endpoints on real namespaces (root only): each mode's isolation rule, checked with
//! the kernel's ping between namespaces and captures that show where the frames went.
//!
//! ```text
//!  m1 (TAP, netns M1) ─┐ macvlan                      ┌─ kernel bridge kbr ─ x1 ═ eth0  E
//!  m2 (TAP, netns M2) ─┴ on qbridge port up0 ═ veth ═ x0 (hairpin on or off)
//!                        (namespace sw)              (namespace ext, no VLAN filtering)
//! ```
//!
//! `up0` is an AF_PACKET port on a veth whose peer is a port of a plain kernel bridge, the
//! "external switch"; hairpin on that port sends frames back the way they came (802.1Qbg
//! reflective relay). The endpoints' TAPs are created by the daemon inside their own
//! namespaces and get their addresses there. See `docs/conformance.md`.

mod support;

use std::time::Duration;

use support::{
    assert_ping, frame, inject, ip_in, mac_of, ping, ping_ok, wait_until, Capture, Captured, Ctl,
    Host, Lab,
};

const NET: &str = "10.77.0";
/// The endpoints' addresses (locally administered, fixed so the captures can name them).
const M1_MAC: &str = "02:00:00:4d:00:01";
const M2_MAC: &str = "02:00:00:4d:00:02";
/// A destination nobody has, for the passthru endpoint.
const STRANGER: &str = "02:00:5e:00:77:77";
/// IEEE 802 local experimental EtherType, for injected frames.
const ETH_EXPERIMENTAL: u16 = 0x88b5;

/// The topology above with endpoints `m1`, `m2`… on `up0` in the given modes.
struct MacvlanLab {
    _lab: Lab,
    ext: String,
    sw: String,
    /// The external host behind the kernel bridge.
    e: Host,
    /// The endpoints, as hosts: namespace, TAP name, address, MAC.
    m: Vec<Host>,
    ctl: Ctl,
}

fn build(test: &str, modes: &[&str]) -> MacvlanLab {
    let mut lab = Lab::new(test);
    let sw = lab.netns("sw").unwrap();
    let ext = lab.netns("ext").unwrap();
    lab.veth(&sw, "up0", &ext, "x0").unwrap();
    let e = lab.host("e", &format!("{NET}.1/24"), &ext, "x1").unwrap();
    ip_in(&ext, &["link", "add", "kbr", "type", "bridge"]).unwrap();
    for dev in ["x0", "x1"] {
        ip_in(&ext, &["link", "set", dev, "master", "kbr"]).unwrap();
    }
    ip_in(&ext, &["link", "set", "kbr", "up"]).unwrap();

    let macs = [M1_MAC, M2_MAC];
    let mut batch = String::from("link add up0 type afpacket dev up0\n");
    let mut m = Vec::new();
    for (i, mode) in modes.iter().enumerate() {
        let name = format!("m{}", i + 1);
        let ns = lab.netns(&name).unwrap();
        batch += &format!(
            "link add link up0 name {name} type macvlan mode {mode} netns {ns} address {}\n",
            macs[i]
        );
        m.push(Host {
            name: name.clone(),
            ns,
            ifname: name,
            ip: format!("{NET}.{}", 11 + i),
            mac: macs[i].to_owned(),
        });
    }
    let ctl = lab.daemon(&sw, &batch).unwrap();
    // The daemon creates each TAP and moves it into its namespace; address it once it is there.
    for h in &m {
        assert!(
            wait_until(Duration::from_secs(5), || mac_of(&h.ns, &h.ifname).is_ok()),
            "TAP {} did not appear in {}",
            h.ifname,
            h.ns
        );
        assert_eq!(
            mac_of(&h.ns, &h.ifname).unwrap(),
            h.mac,
            "{}'s TAP has not the endpoint's address",
            h.name
        );
        ip_in(
            &h.ns,
            &["addr", "add", &format!("{}/24", h.ip), "dev", &h.ifname],
        )
        .unwrap();
        ip_in(&h.ns, &["link", "set", &h.ifname, "up"]).unwrap();
    }
    MacvlanLab {
        _lab: lab,
        ext,
        sw,
        e,
        m,
        ctl,
    }
}

impl MacvlanLab {
    /// Hairpin (reflective relay) on the kernel bridge's port towards up0.
    fn hairpin(&self, on: bool) {
        let v = if on { "on" } else { "off" };
        ip_in(
            &self.ext,
            &[
                "link",
                "set",
                "dev",
                "x0",
                "type",
                "bridge_slave",
                "hairpin",
                v,
            ],
        )
        .unwrap();
    }

    /// Drop counter `reason` of port `dev` from `qbridge -j -s link show`.
    fn drops(&self, dev: &str, reason: &str) -> u64 {
        let links = self.ctl.json(&["-s", "link", "show"]).unwrap_or_default();
        links
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["ifname"] == dev)
            .filter_map(|l| l["stats"]["drops"][reason].as_u64())
            .sum()
    }
}

/// `ip neigh replace IP lladdr MAC nud permanent` in `from` for `to`: unicast without ARP.
fn static_neigh(from: &Host, to: &Host) {
    ip_in(
        &from.ns,
        &[
            "neigh",
            "replace",
            &to.ip,
            "lladdr",
            &to.mac,
            "dev",
            &from.ifname,
            "nud",
            "permanent",
        ],
    )
    .unwrap();
}

/// ICMP frames from `a` to `b`, either way, among the kept frames of `c`.
fn icmp_between(c: &Captured, a: &str, b: &str) -> usize {
    let (a, b) = (support::parse_mac(a), support::parse_mac(b));
    c.kept_matching(|f| {
        f.ip_proto == Some(1) && ((f.src == a && f.dst == b) || (f.src == b && f.dst == a))
    })
    .len()
}

/// Private: both endpoints reach the outside, never each other — not by ARP, and not by
/// unicast to a known address that the external switch hairpins back. qbridge counts the
/// refused frames as `isolated` on the destination endpoint.
#[test]
fn macvlan_private_endpoints_never_reach_each_other() {
    skip_unless_netns!();
    let _g = support::serial();
    let l = build("mvpriv", &["private", "private"]);
    let (m1, m2, e) = (&l.m[0], &l.m[1], &l.e);
    assert_ping(m1, e, 3);
    assert_ping(m2, e, 3);
    assert_ping(e, m1, 3);
    l.hairpin(true);
    let in_m2 = Capture::start(&m2.ns, &m2.ifname, 0).unwrap();
    let back = Capture::start(&l.sw, "up0", 256).unwrap();
    assert!(!ping_ok(m1, &m2.ip), "private m1 reached m2 (ARP)");
    // With the neighbours known, m1's echoes go out as unicast to m2 and come back.
    static_neigh(m1, m2);
    static_neigh(m2, m1);
    let r = ping(m1, &m2.ip, 5);
    assert_eq!(r.received, 0, "private m1 reached m2:\n{}", r.output);
    let back = back.finish().unwrap();
    let c2 = in_m2.finish().unwrap();
    assert!(
        icmp_between(&back, M1_MAC, M2_MAC) >= 5,
        "the hairpin did not return m1's echoes to up0: {}",
        back.summary()
    );
    assert_eq!(c2.count_from(&[M1_MAC]), 0, "m2 received: {}", c2.summary());
    let isolated = l.drops("m2", "isolated");
    assert!(
        isolated >= 5,
        "isolated drops on m2: {isolated}\n{}",
        l.ctl.stats_text()
    );
}

/// VEPA: every frame goes out of up0, so endpoints reach each other only when the external
/// switch hairpins: with hairpin on the echoes between them are on the wire; with it off,
/// nothing comes back (even with m2's address known, qbridge does not short-cut).
#[test]
fn macvlan_vepa_endpoints_meet_only_through_a_hairpin() {
    skip_unless_netns!();
    let _g = support::serial();
    let l = build("mvvepa", &["vepa", "vepa"]);
    let (m1, m2, e) = (&l.m[0], &l.m[1], &l.e);
    assert_ping(m1, e, 3);
    assert!(!ping_ok(m1, &m2.ip), "vepa m1 reached m2 without a hairpin");
    l.hairpin(true);
    // Forget the failed resolution (its probes may still be pending), so ARP starts afresh.
    ip_in(&m1.ns, &["neigh", "flush", "dev", &m1.ifname]).unwrap();
    let wire = Capture::start(&l.ext, "x0", 256).unwrap();
    assert_ping(m1, m2, 5);
    let wire = wire.finish().unwrap();
    assert!(
        icmp_between(&wire, M1_MAC, M2_MAC) >= 10,
        "echoes between m1 and m2 not on the wire: {}",
        wire.summary()
    );
    l.hairpin(false);
    let r = ping(m1, &m2.ip, 3);
    assert_eq!(
        r.received, 0,
        "vepa m1 reached m2, hairpin off:\n{}",
        r.output
    );
}

/// Bridge: endpoints reach each other directly — no echo between them on the wire — and
/// everything else goes out. A passthru endpoint is refused next to them.
#[test]
fn macvlan_bridge_endpoints_talk_directly() {
    skip_unless_netns!();
    let _g = support::serial();
    let l = build("mvbr", &["bridge", "bridge"]);
    let (m1, m2, e) = (&l.m[0], &l.m[1], &l.e);
    let wire = Capture::start(&l.ext, "x0", 256).unwrap();
    assert_ping(m1, m2, 5);
    let wire = wire.finish().unwrap();
    assert_eq!(
        icmp_between(&wire, M1_MAC, M2_MAC),
        0,
        "echoes between bridge-mode endpoints on the wire: {}",
        wire.summary()
    );
    assert_ping(m1, e, 3);
    assert_ping(e, m2, 3);
    let err = l
        .ctl
        .cmd(&[
            "link", "add", "link", "up0", "name", "m3", "type", "macvlan", "mode", "passthru",
        ])
        .unwrap_err();
    assert!(err.contains("passthru"), "{err}");
}

/// Passthru: one endpoint takes up0 whole — another endpoint is refused, and frames to any
/// destination and with any VLAN tag reach it.
#[test]
fn macvlan_passthru_takes_the_lower_device_whole() {
    skip_unless_netns!();
    let _g = support::serial();
    let l = build("mvpt", &["passthru"]);
    let (m1, e) = (&l.m[0], &l.e);
    for mode in ["bridge", "passthru"] {
        let err = l
            .ctl
            .cmd(&[
                "link", "add", "link", "up0", "name", "m2", "type", "macvlan", "mode", mode,
            ])
            .unwrap_err();
        assert!(
            err.contains("\"up0\" is busy") && err.contains("passthru"),
            "second endpoint ({mode}): {err}"
        );
    }
    assert!(
        l.ctl.cmd(&["link", "show", "dev", "m2"]).is_err(),
        "a refused endpoint exists"
    );
    assert_ping(e, m1, 3);
    let cap = Capture::start(&m1.ns, &m1.ifname, 64).unwrap();
    let plain = frame(STRANGER, &e.mac, &[], ETH_EXPERIMENTAL, 46);
    let tagged = frame(STRANGER, &e.mac, &[(0x8100, 42)], ETH_EXPERIMENTAL, 46);
    inject(&e.ns, &e.ifname, &[plain.clone(), plain.clone(), plain]).unwrap();
    inject(&e.ns, &e.ifname, &[tagged.clone(), tagged.clone(), tagged]).unwrap();
    let c = cap.finish().unwrap();
    let stranger = support::parse_mac(STRANGER);
    let arrived = |tags: &[(u16, u16)]| {
        c.kept_matching(|f| f.dst == stranger && f.tags == tags && f.ethertype == ETH_EXPERIMENTAL)
            .len()
    };
    assert_eq!(arrived(&[]), 3, "untagged to {STRANGER}: {}", c.summary());
    assert_eq!(
        arrived(&[(0x8100, 42)]),
        3,
        "tagged vid 42 to {STRANGER}: {}",
        c.summary()
    );
}
