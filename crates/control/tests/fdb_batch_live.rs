//! fdb89 (decision 89): a batch of only FDB commands is checked on a copy and then done on the
//! live session, whose FDBs (and plan) stay the ones the datapath holds; any other batch is
//! taken whole, a new plan; a bad line changes nothing.

use qbridge_control::session::{batch_fdb_entries_only, fdb_entries_only};
use qbridge_control::{parse_line, OutputOptions, Session};
use std::sync::Arc;

const SETUP: &str = "link add br0 type bridge vlan_filtering 1
link add p1 type afpacket dev eth1
link add p2 type afpacket dev eth2
link add vx0 type vxlan id 100 local 192.0.2.1 dstport 4789 nolearning
link set dev p1 master br0
link set dev p2 master br0
link set dev vx0 master br0
fdb add 02:00:00:00:00:01 dev p1 vlan 1 static
";

fn session() -> Session {
    let mut s = Session::new();
    s.execute_batch(SETUP, OutputOptions::default())
        .expect("setup applies");
    s
}

fn fdb(s: &mut Session) -> String {
    s.execute_line("fdb show", OutputOptions::default())
        .unwrap()
}

#[test]
fn a_batch_of_fdb_entries_keeps_the_plan_and_does_every_line() {
    let mut s = session();
    let plan = s.switch_mut().plan();
    let text = "# routes
fdb replace 02:00:00:00:00:0a dev vx0 dst 192.0.2.2 extern_learn
fdb replace 02:00:00:00:00:0a dev vx0 vlan 1 extern_learn
fdb del 02:00:00:00:00:01 dev p1 vlan 1
fdb add 02:00:00:00:00:02 dev p2 vlan 1 static

fdb flush dev p1
";
    assert!(batch_fdb_entries_only(text));
    s.execute_batch(text, OutputOptions::default()).unwrap();
    assert!(
        Arc::ptr_eq(&plan, &s.switch_mut().plan()),
        "the batch replaced the plan"
    );
    let shown = fdb(&mut s);
    assert!(
        shown.contains("02:00:00:00:00:0a dev vx0 vlan 1"),
        "{shown}"
    );
    assert!(
        shown.contains("02:00:00:00:00:0a dev vx0 dst 192.0.2.2"),
        "{shown}"
    );
    assert!(shown.contains("02:00:00:00:00:02 dev p2 vlan 1"), "{shown}");
    assert!(!shown.contains("02:00:00:00:00:01"), "{shown}");
}

#[test]
fn a_bad_line_changes_nothing_and_names_its_line() {
    let mut s = session();
    let plan = s.switch_mut().plan();
    let before = fdb(&mut s);
    let text = "fdb add 02:00:00:00:00:03 dev p2 vlan 1 static
fdb del 02:00:00:00:00:09 dev p2 vlan 1
";
    assert!(batch_fdb_entries_only(text));
    let e = s.execute_batch(text, OutputOptions::default()).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert_eq!(fdb(&mut s), before);
    assert!(Arc::ptr_eq(&plan, &s.switch_mut().plan()));
}

#[test]
fn a_batch_with_any_other_command_is_taken_whole() {
    let mut s = session();
    let plan = s.switch_mut().plan();
    let text = "fdb add 02:00:00:00:00:04 dev p2 vlan 1 static
vlan add vid 10 dev p2
";
    assert!(!batch_fdb_entries_only(text));
    s.execute_batch(text, OutputOptions::default()).unwrap();
    assert!(!Arc::ptr_eq(&plan, &s.switch_mut().plan()));
    assert!(fdb(&mut s).contains("02:00:00:00:00:04 dev p2 vlan 1"));
}

#[test]
fn which_commands_change_only_fdb_entries() {
    let only = |l: &str| fdb_entries_only(&parse_line(l).unwrap().unwrap());
    for l in [
        "fdb add 02:00:00:00:00:01 dev p1",
        "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3",
        "fdb replace 02:00:00:00:00:01 dev p1 vlan 1 extern_learn",
        "fdb del 02:00:00:00:00:01 dev p1",
        "fdb flush dev p1",
        "fdb add 02:00:00:00:00:01 dev vx0 dst 192.0.2.2",
        "fdb show",
    ] {
        assert!(only(l), "{l}");
    }
    for l in [
        "vlan add vid 10 dev p1",
        "link set dev p1 learning off",
        "link add p3 type afpacket dev eth3",
    ] {
        assert!(!only(l), "{l}");
    }
    assert!(batch_fdb_entries_only("# routes\n\n  fdb show\n"));
    assert!(!batch_fdb_entries_only(
        "fdb show\nvlan add vid 10 dev p1\n"
    ));
}
