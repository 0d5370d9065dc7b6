//! vxl88 (decision 88): `fdb del` and `fdb flush` on a VXLAN port with Linux's meaning, as a
//! kernel vxlan device in a bridge answers them (iproute2 6.1, kernel 6.18): `self` (the
//! default of `del`) is the port's own entry, static or learned, `master` the bridge's; a
//! learned entry removed is handed to the engine (`take_vxlan_forgets`).

use qbridge_control::status::BackendStatus;
use qbridge_control::{OutputOptions, Session};

const M1: &str = "02:00:00:00:00:01";
const M2: &str = "02:00:00:00:00:02";
const ZERO: &str = "00:00:00:00:00:00";

fn session() -> Session {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge
link add p1 type pcap
link add vx0 type vxlan id 42 local 192.0.2.1
link set dev p1 master br0
link set dev vx0 master br0
",
        OutputOptions::default(),
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    s
}

fn run(s: &mut Session, line: &str) -> Result<String, String> {
    s.execute_line(line, OutputOptions::default())
        .map_err(|e| e.to_string())
}

fn ok(s: &mut Session, line: &str) {
    run(s, line).unwrap_or_else(|e| panic!("{line}: {e}"));
}

/// `fdb show dev vx0`, sorted, without `vlan`/`master` column differences.
fn show(s: &mut Session) -> Vec<String> {
    let mut v: Vec<String> = run(s, "fdb show dev vx0")
        .unwrap()
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    v.sort();
    v
}

/// The daemon's report of what vx0 learned (VNI 42, `mac` behind 192.0.2.2).
fn learned(s: &mut Session, macs: &[&str]) {
    let st = BackendStatus {
        open: true,
        vxlan_learned: macs
            .iter()
            .map(|m| (42, m.parse().unwrap(), "192.0.2.2".parse().unwrap()))
            .collect(),
        ..Default::default()
    };
    s.set_backend_status("vx0", st);
}

#[test]
fn del_without_words_takes_the_ports_own_entry_static_or_learned() {
    let mut s = session();
    ok(&mut s, &format!("fdb add {M1} dev vx0 dst 192.0.2.2"));
    assert_eq!(
        show(&mut s),
        [format!("{M1} dev vx0 dst 192.0.2.2 self permanent")]
    );
    ok(&mut s, &format!("fdb del {M1} dev vx0"));
    assert!(show(&mut s).is_empty());
    assert!(s.take_vxlan_forgets("vx0").is_empty());
    // Learned: gone from `fdb show` at once, handed to the engine.
    learned(&mut s, &[M1, M2]);
    ok(&mut s, &format!("fdb del {M1} dev vx0"));
    assert_eq!(show(&mut s), [format!("{M2} dev vx0 dst 192.0.2.2 self")]);
    assert_eq!(
        s.take_vxlan_forgets("vx0"),
        [(42, M1.parse().unwrap(), "192.0.2.2".parse().unwrap())]
    );
    // `self` the same; nothing left: an error, as the kernel's ENOENT.
    ok(&mut s, &format!("fdb del {M2} dev vx0 self"));
    assert!(show(&mut s).is_empty());
    assert_eq!(s.take_vxlan_forgets("vx0").len(), 1);
    let e = run(&mut s, &format!("fdb del {M2} dev vx0 self")).unwrap_err();
    assert!(e.contains("no entry"), "{e}");
    let e = run(&mut s, &format!("fdb del {M2} dev vx0")).unwrap_err();
    assert!(e.contains("neither the port's own nor the bridge's"), "{e}");
}

#[test]
fn self_master_and_neither_pick_the_tables() {
    let mut s = session();
    let bridge = format!("{M1} dev vx0 master br0 static");
    let own = format!("{M1} dev vx0 dst 192.0.2.2 self permanent");
    let both = |s: &mut Session| {
        ok(s, &format!("fdb add {M1} dev vx0 master static"));
        ok(s, &format!("fdb add {M1} dev vx0 dst 192.0.2.2"));
    };
    both(&mut s);
    assert_eq!(show(&mut s), [own.clone(), bridge.clone()]);
    // `master`: the bridge's only (the kernel: its bridge's entry).
    ok(&mut s, &format!("fdb del {M1} dev vx0 master"));
    assert_eq!(show(&mut s), std::slice::from_ref(&own));
    let e = run(&mut s, &format!("fdb del {M1} dev vx0 master")).unwrap_err();
    assert!(e.contains(M1), "{e}");
    // `self`: the port's only (the kernel: the same).
    ok(&mut s, &format!("fdb add {M1} dev vx0 master static"));
    ok(&mut s, &format!("fdb del {M1} dev vx0 self"));
    assert_eq!(show(&mut s), std::slice::from_ref(&bridge));
    // `self master`: both; neither word: both too (decision 88: qbridge's `fdb del MAC dev
    // vx0` kept removing the bridge's entry, which the kernel's default `self` leaves).
    ok(&mut s, &format!("fdb add {M1} dev vx0 dst 192.0.2.2"));
    ok(&mut s, &format!("fdb del {M1} dev vx0 self master"));
    assert!(show(&mut s).is_empty());
    both(&mut s);
    ok(&mut s, &format!("fdb del {M1} dev vx0"));
    assert!(show(&mut s).is_empty());
    // With `vlan`: the bridge's entry only (the port's own have no VLAN).
    both(&mut s);
    ok(&mut s, &format!("fdb del {M1} dev vx0 vlan 0"));
    assert_eq!(show(&mut s), std::slice::from_ref(&own));
    let e = run(&mut s, &format!("fdb del {M1} dev vx0 master vni 42")).unwrap_err();
    assert!(e.contains("\"vni\""), "{e}");
    let e = run(&mut s, &format!("fdb del {M1} dev p1 vni 42")).unwrap_err();
    assert!(e.contains("not a vxlan port"), "{e}");
    let e = run(&mut s, &format!("fdb add {M1} dev vx0 self")).unwrap_err();
    assert!(e.contains("dst IP"), "{e}");
}

#[test]
fn del_with_dst_takes_a_learned_entry_naming_that_vtep() {
    let mut s = session();
    learned(&mut s, &[M1]);
    // Another VTEP: refused (the kernel answers success and removes nothing).
    let e = run(&mut s, &format!("fdb del {M1} dev vx0 dst 192.0.2.3")).unwrap_err();
    assert!(e.contains("no entry"), "{e}");
    assert!(s.take_vxlan_forgets("vx0").is_empty());
    ok(&mut s, &format!("fdb del {M1} dev vx0 dst 192.0.2.2"));
    assert!(show(&mut s).is_empty());
    assert_eq!(s.take_vxlan_forgets("vx0").len(), 1);
    // `apply` (-may-exist): nothing there is no error.
    assert!(s
        .apply_batch(
            &format!("fdb del {M1} dev vx0 dst 192.0.2.2\nfdb del {M1} dev vx0\n"),
            OutputOptions::default()
        )
        .is_ok());
}

#[test]
fn the_flood_list_goes_one_vtep_at_a_time_or_whole() {
    let mut s = session();
    ok(&mut s, &format!("fdb append {ZERO} dev vx0 dst 192.0.2.2"));
    ok(&mut s, &format!("fdb append {ZERO} dev vx0 dst 192.0.2.3"));
    ok(&mut s, &format!("fdb del {ZERO} dev vx0 dst 192.0.2.3"));
    assert_eq!(
        show(&mut s),
        [format!("{ZERO} dev vx0 dst 192.0.2.2 self permanent")]
    );
    ok(&mut s, &format!("fdb append {ZERO} dev vx0 dst 192.0.2.3"));
    ok(&mut s, &format!("fdb del {ZERO} dev vx0"));
    assert!(show(&mut s).is_empty());
}

#[test]
fn flush_self_takes_the_ports_entries_by_the_kernels_kinds() {
    let setup = |s: &mut Session| {
        ok(s, &format!("fdb append {ZERO} dev vx0 dst 192.0.2.3"));
        ok(s, &format!("fdb add {M2} dev vx0 dst 192.0.2.3"));
        ok(s, &format!("fdb add {M1} dev vx0 master static"));
        learned(s, &[M1]);
    };
    let bridge = format!("{M1} dev vx0 master br0 static");
    let l1 = format!("{M1} dev vx0 dst 192.0.2.2 self");
    let z = format!("{ZERO} dev vx0 dst 192.0.2.3 self permanent");
    let s2 = format!("{M2} dev vx0 dst 192.0.2.3 self permanent");
    for (words, left, flushed) in [
        ("self", vec![bridge.clone()], 1),
        (
            "self dynamic",
            vec![bridge.clone(), s2.clone(), z.clone()],
            1,
        ),
        (
            "self static",
            vec![bridge.clone(), l1.clone(), s2.clone(), z.clone()],
            0,
        ),
        ("self permanent", vec![bridge.clone(), l1.clone()], 0),
        ("self master", vec![], 1),
        ("master", vec![l1.clone(), s2.clone(), z.clone()], 0),
        // qbridge's default (decision 88): the bridge's and the learned VTEPs.
        ("", vec![s2.clone(), z.clone()], 1),
    ] {
        let mut s = session();
        setup(&mut s);
        ok(&mut s, &format!("fdb flush dev vx0 {words}"));
        let mut left = left;
        left.sort();
        assert_eq!(show(&mut s), left, "flush dev vx0 {words}");
        assert_eq!(s.vxlan_flushes("vx0"), flushed, "flush dev vx0 {words}");
    }
    let mut s = session();
    setup(&mut s);
    let e = run(&mut s, "fdb flush dev vx0 self vlan 1").unwrap_err();
    assert!(e.contains("master"), "{e}");
    // A control plane's entries only.
    ok(
        &mut s,
        "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.9 extern_learn",
    );
    ok(&mut s, "fdb flush dev vx0 self extern_learn");
    assert!(!show(&mut s).iter().any(|l| l.contains("192.0.2.9")));
    assert!(show(&mut s).contains(&z));
    assert_eq!(s.vxlan_flushes("vx0"), 0);
}

/// The all-zeros MAC is no bridge entry: `fdb del` of it on any port is refused by name (the
/// FDB's lookup of key 0 panicked the control thread before).
#[test]
fn del_of_the_zero_mac_is_refused_not_a_panic() {
    let mut s = session();
    for line in [
        format!("fdb del {ZERO} dev p1"),
        format!("fdb del {ZERO} dev p1 vlan 1"),
        format!("fdb del {ZERO} dev vx0 master"),
        format!("fdb del {ZERO} dev vx0"),
    ] {
        let e = run(&mut s, &line).unwrap_err();
        assert!(e.contains(ZERO), "{line}: {e}");
    }
}

/// An `external` port: `vni N` picks one VNI's entries; without it, `self` takes the MAC's
/// entries in every VNI, learned ones included.
#[test]
fn on_an_external_port_vni_picks_the_entries_and_no_vni_takes_all() {
    let mut s = Session::new();
    s.execute_batch(
        "link add br0 type bridge vlan_filtering 1
link add vx0 type vxlan external local 192.0.2.1
link set dev vx0 master br0
vlan add vid 10 dev vx0
vlan add vid 20 dev vx0
vlan add vid 10 dev vx0 tunnel_info id 1000
vlan add vid 20 dev vx0 tunnel_info id 2000
",
        OutputOptions::default(),
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    ok(
        &mut s,
        &format!("fdb add {M1} dev vx0 dst 192.0.2.2 vni 1000"),
    );
    ok(
        &mut s,
        &format!("fdb add {M1} dev vx0 dst 192.0.2.3 vni 2000"),
    );
    ok(&mut s, &format!("fdb del {M1} dev vx0 vni 1000"));
    assert_eq!(
        show(&mut s),
        [format!(
            "{M1} dev vx0 dst 192.0.2.3 vni 2000 self permanent"
        )]
    );
    let e = run(&mut s, &format!("fdb del {M1} dev vx0 self vni 1000")).unwrap_err();
    assert!(e.contains("no entry"), "{e}");
    // Learned in VNI 3000 too: `self` without `vni` takes both.
    let st = BackendStatus {
        open: true,
        vxlan_learned: vec![(3000, M1.parse().unwrap(), "192.0.2.4".parse().unwrap())],
        ..Default::default()
    };
    s.set_backend_status("vx0", st);
    assert_eq!(show(&mut s).len(), 2, "{:?}", show(&mut s));
    ok(&mut s, &format!("fdb del {M1} dev vx0 self"));
    assert!(show(&mut s).is_empty(), "{:?}", show(&mut s));
    assert_eq!(s.take_vxlan_forgets("vx0").len(), 1);
}

/// `add` of a learned MAC is refused (the kernel: `File exists`); `replace` makes it static.
#[test]
fn add_of_a_learned_mac_is_refused_and_replace_makes_it_static() {
    let mut s = session();
    learned(&mut s, &[M1]);
    let e = run(&mut s, &format!("fdb add {M1} dev vx0 dst 192.0.2.7")).unwrap_err();
    assert!(e.contains("learned"), "{e}");
    assert_eq!(show(&mut s), [format!("{M1} dev vx0 dst 192.0.2.2 self")]);
    ok(&mut s, &format!("fdb replace {M1} dev vx0 dst 192.0.2.7"));
    assert!(show(&mut s).contains(&format!("{M1} dev vx0 dst 192.0.2.7 self permanent")));
}

/// A VXLAN port in no bridge: its own entries go without a word; `master` is refused (the
/// kernel: `Operation not supported`).
#[test]
fn a_port_in_no_bridge_has_only_its_own_entries() {
    let mut s = Session::new();
    s.execute_batch(
        "link add vx0 type vxlan id 42 local 192.0.2.1\n",
        OutputOptions::default(),
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    ok(&mut s, &format!("fdb add {M1} dev vx0 dst 192.0.2.2"));
    ok(&mut s, &format!("fdb add {M2} dev vx0 dst 192.0.2.2"));
    ok(&mut s, &format!("fdb del {M1} dev vx0"));
    assert_eq!(
        show(&mut s),
        [format!("{M2} dev vx0 dst 192.0.2.2 self permanent")]
    );
    let e = run(&mut s, &format!("fdb del {M2} dev vx0 master")).unwrap_err();
    assert!(e.contains("not attached to a bridge"), "{e}");
    assert_eq!(show(&mut s).len(), 1);
    let e = run(&mut s, &format!("fdb del {M1} dev vx0")).unwrap_err();
    assert!(e.contains("no entry"), "{e}");
}
