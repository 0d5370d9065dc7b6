//! Open vSwitch's `tests/rstp.at` and `tests/stp.at` topology cases (the 802.1D figures and
//! the UNH-IOL-derived ones), run on the simulated network of `harness/mod.rs`. The
//! scripts are the originals' topology descriptions and expected outcomes; legacy STP
//! cases run the engine in `Mode::Stp` with the 802.1D-1998 default cost of 10 that
//! test-stp uses, and read `B`/`Li` as "discarding".

mod harness;
use harness::Sim;
use qbridge_stp::Mode;

fn rstp(script: &str) {
    let mut sim = Sim::new(Mode::Rstp, 200_000);
    if let Err(e) = sim.script(script) {
        panic!("{e}");
    }
    for b in &sim.bridges {
        assert_eq!(b.stp.runaway_runs(), 0);
    }
}

fn stp(script: &str) {
    let mut sim = Sim::new(Mode::Stp, 10);
    if let Err(e) = sim.script(script) {
        panic!("{e}");
    }
}

#[test]
fn rstp_single_bridge() {
    rstp("bridge 0 0x111 = a b\nrun 1000\ncheck 0 = root\n");
}

#[test]
fn rstp_link_failure() {
    rstp(
        "bridge 0 0x111 = a b
bridge 1 0x222 = a c
bridge 2 0x333 = b c
run 1000
check 0 = root
check 1 = F:200000 F
check 2 = F:200000 Di
# Link b goes down
bridge 2 = X c
run 1000
check 1 = F:200000 F
check 2 = D F:400000
",
    );
}

#[test]
fn rstp_double_link_failure() {
    rstp(
        "bridge 0 0x111 = a b
bridge 1 0x222 = a c d
bridge 2 0x333 = b c e
bridge 3 0x444 = d f
bridge 4 0x555 = e f
run 1000
check 0 = root
check 1 = F:200000 F F
check 2 = F:200000 Di F
check 3 = F:400000 F
check 4 = F:400000 Di
# Link b goes down
bridge 2 = X c e
run 1000
check 0 = root
check 1 = F:200000 F F
check 2 = D F:400000 F
check 3 = F:400000 F
check 4 = F:600000 Di
# Link e goes down
bridge 4 = X f
run 1000
check 0 = root
check 1 = F:200000 F F
check 2 = D F:400000 F
check 3 = F:400000 F
check 4 = D F:600000
# Link f cost changes
bridge 4 = X f:100000
run 1000
check 4 = D F:500000
# Bridge 4 becomes root and
bridge 4 ^ 31000
run 1000
check 4 = root
",
    );
}

#[test]
fn rstp_ieee802_1d_2004_fig17_4() {
    rstp(
        "bridge 0 0x111 = a b e c
bridge 1 0x222 = a b d f
bridge 2 0x333 = c d l j h g
bridge 3 0x444 = e f n m k i
bridge 4 0x555 = g i 0 0
bridge 5 0x666 = h k 0 0
bridge 6 0x777 = j m 0 0
bridge 7 0x888 = l n 0 0
run 1000
check 0 = root
check 1 = F:200000 Di F F
check 2 = F:200000 Di F F F F
check 3 = F:200000 Di F F F F
check 4 = F:400000 Di F F
check 5 = F:400000 Di F F
check 6 = F:400000 Di F F
check 7 = F:400000 Di F F

# Now connect two ports of bridge 7 to the same LAN.
bridge 7 = l n o o
# Same results except for bridge 7:
run 1000
check 0 = root
check 1 = F:200000 Di F F
check 2 = F:200000 Di F F F F
check 3 = F:200000 Di F F F F
check 4 = F:400000 Di F F
check 5 = F:400000 Di F F
check 6 = F:400000 Di F F
check 7 = F:400000 Di F Di
",
    );
}

#[test]
fn rstp_ieee802_1d_2004_fig17_6() {
    rstp(
        "bridge 0 0x111 = a b l
bridge 1 0x222 = b c d
bridge 2 0x333 = d e f
bridge 3 0x444 = f g h
bridge 4 0x555 = j h i
bridge 5 0x666 = l j k
run 1000
check 0 = root
check 1 = F:200000 F F
check 2 = F:400000 F F
check 3 = F:600000 F Di
check 4 = F:400000 F F
check 5 = F:200000 F F
",
    );
}

#[test]
fn rstp_ieee802_1d_2004_fig17_7() {
    rstp(
        "bridge 0 0x000 = b
bridge 1 0x111 = a b d f h g e c
bridge 2 0x222 = g h j l n m k i
run 1000
check 0 = root
check 1 = F F:200000 F F F F F F
check 2 = Di F:400000 F F F F F F
# Link g priority increment
bridge 1 = a b d f h g^112 e c
run 1000
check 0 = root
check 1 = F F:200000 F F F F F F
check 2 = F:400000 Di F F F F F F
",
    );
}

/// The checker itself: a wrong expectation must fail.
#[test]
fn harness_rejects_wrong_expectations() {
    let mut sim = Sim::new(Mode::Rstp, 200_000);
    let r = sim.script("bridge 0 0x111 = a b\nbridge 1 0x222 = a c\nbridge 2 0x333 = b c\nrun 1000\ncheck 2 = F:200000 F\n");
    assert!(r.is_err(), "{r:?}");
    let mut sim = Sim::new(Mode::Rstp, 200_000);
    let r = sim.script("bridge 0 0x111 = a b\nbridge 1 0x222 = a c\nrun 1000\ncheck 1 = root\n");
    assert!(r.is_err(), "{r:?}");
    let mut sim = Sim::new(Mode::Rstp, 200_000);
    let r =
        sim.script("bridge 0 0x111 = a b\nbridge 1 0x222 = a c\nrun 1000\ncheck 1 = F:400000 F\n");
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn stp_ieee802_1d_1998() {
    stp("bridge 0 0x42 = a b
bridge 1 0x97 = c:5 a d:5
bridge 2 0x45 = b e
bridge 3 0x57 = b:5 e:5
bridge 4 0x83 = a:5 e:5
run 1000
check 0 = root
check 1 = F F:10 F
check 2 = F:10 B
check 3 = F:5 F
check 4 = F:5 B
");
}

#[test]
fn stp_ieee802_1d_2004_fig17_4() {
    stp("bridge 0 0x111 = a b e c
bridge 1 0x222 = a b d f
bridge 2 0x333 = c d l j h g
bridge 3 0x444 = e f n m k i
bridge 4 0x555 = g i 0 0
bridge 5 0x666 = h k 0 0
bridge 6 0x777 = j m 0 0
bridge 7 0x888 = l n 0 0
run 1000
check 0 = root
check 1 = F:10 B F F
check 2 = F:10 B F F F F
check 3 = F:10 B F F F F
check 4 = F:20 B F F
check 5 = F:20 B F F
check 6 = F:20 B F F
check 7 = F:20 B F F
bridge 7 = l n o o
run 1000
check 0 = root
check 1 = F:10 B F F
check 2 = F:10 B F F F F
check 3 = F:10 B F F F F
check 4 = F:20 B F F
check 5 = F:20 B F F
check 6 = F:20 B F F
check 7 = F:20 B F B
");
}

#[test]
fn stp_ieee802_1d_2004_fig17_6() {
    stp("bridge 0 0x111 = a b l
bridge 1 0x222 = b c d
bridge 2 0x333 = d e f
bridge 3 0x444 = f g h
bridge 4 0x555 = j h i
bridge 5 0x666 = l j k
run 1000
check 0 = root
check 1 = F:10 F F
check 2 = F:20 F F
check 3 = F:30 F B
check 4 = F:20 F F
check 5 = F:10 F F
");
}

#[test]
fn stp_ieee802_1d_2004_fig17_7() {
    stp("bridge 0 0xaa = b
bridge 1 0x111 = a b d f h g e c
bridge 2 0x222 = g h j l n m k i
run 1000
check 0 = root
check 1 = F F:10 F F F F F F
check 2 = B F:20 F F F F F F
bridge 2 = g X j l n m k i
run 1000
check 0 = root
check 1 = F F:10 F F F F F F
check 2 = F:20 D F F F F F F
");
}

#[test]
fn stp_iol_io_1_1_link_failure() {
    stp("bridge 0 0x111 = a b c
bridge 1 0x222 = a b c
run 1000
check 0 = root
check 1 = F:10 B B
bridge 1 = 0 _ _
run 1000
check 0 = root
check 1 = F F:10 B
bridge 1 = X _ _
run 1000
check 0 = root
check 1 = D F:10 B
bridge 1 = _ 0 _
run 1000
check 0 = root
check 1 = D F F:10
bridge 1 = _ X _
run 1000
check 0 = root
check 1 = D D F:10
");
}

#[test]
fn stp_iol_io_1_2_repeated_network() {
    stp("bridge 0 0x111 = a a
bridge 1 0x222 = a a
run 1000
check 0 = rootid:0x111 F B
check 1 = rootid:0x111 F:10 B
bridge 1 = a^0x90 _
run 1000
check 0 = rootid:0x111 F B
check 1 = rootid:0x111 B F:10
");
}

#[test]
fn stp_iol_io_1_4_network_initialization() {
    stp("bridge 0 0x111 = a b c
bridge 1 0x222 = b d e
bridge 2 0x333 = a d f
bridge 3 0x444 = c e f
run 1000
check 0 = root
check 1 = F:10 F F
check 2 = F:10 B F
check 3 = F:10 B B
");
}

#[test]
fn stp_iol_io_1_5_topology_change() {
    stp("bridge 0 0x111 = a b d c
bridge 1 0x222 = a b f e
bridge 2 0x333 = c d g h
bridge 3 0x444 = e f g h
run 1000
check 0 = root
check 1 = F:10 B F F
check 2 = B F:10 F F
check 3 = B F:20 B B
bridge 1^0x7000
run 1000
check 0 = F:10 B F F
check 1 = root
check 2 = B F:20 B B
check 3 = B F:10 F F
bridge 2^0x6000
run 1000
check 0 = F F B F:10
check 1 = F:20 B B B
check 2 = root
check 3 = F F F:10 B
bridge 3^0x5000
run 1000
check 0 = B B B F:20
check 1 = F F B F:10
check 2 = F F F:10 B
check 3 = root
bridge 0^0x4000
bridge 1^0x4001
bridge 2^0x4002
bridge 3^0x4003
run 1000
check 0 = root
check 1 = F:10 B F F
check 2 = B F:10 F F
check 3 = B F:20 B B
");
}

#[test]
fn stp_iol_op_1_1_root_id_initialized() {
    stp("bridge 0 0x123 =\ncheck 0 = root\n");
}

#[test]
fn stp_iol_op_1_4_all_ports_initialized_designated() {
    stp("bridge 0 0x123 = a b c d e f
check 0 = Li Li Li Li Li Li
run 1000
check 0 = F F F F F F
");
}

#[test]
fn stp_iol_op_3_1_root_bridge_selection_root_id() {
    stp("bridge 0 0x111 = a
bridge 1 0x222 = a
check 0 = rootid:0x111 Li
check 1 = rootid:0x222 Li
run 1000
check 0 = rootid:0x111 root
check 1 = rootid:0x111 F:10
");
}

#[test]
fn stp_iol_op_3_3_root_bridge_selection_bridge_id() {
    stp("bridge 0 0x333^0x6000 = a
bridge 1 0x222^0x7000 = b
bridge 2 0x111 = a b
run 1000
check 0 = rootid:0x333^0x6000 root
check 1 = rootid:0x333^0x6000 F:20
check 2 = rootid:0x333^0x6000 F:10 F
");
}
