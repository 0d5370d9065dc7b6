//! Property test over random networks: bridges with random priorities and port costs,
//! attached to random LANs (shared segments included), in RSTP and in legacy STP. After
//! convergence every bridge agrees on the root (the lowest bridge id of its connected
//! part), the forwarding ports form a spanning tree of each connected part (connected, no
//! cycle), and both protocol versions choose the same roles and root path costs. Then a
//! random link is pulled and the same must hold again.

mod harness;
use harness::Sim;
use proptest::prelude::*;
use qbridge_stp::mst::Region;
use qbridge_stp::{Mode, PortRole, PortState, TreeId};

/// A port: its LAN (None = on no LAN) and its path cost.
type PortSpec = (Option<usize>, u32);

#[derive(Clone, Debug)]
struct Net {
    /// Per bridge: priority (in units of 4096) and ports.
    bridges: Vec<(u16, Vec<PortSpec>)>,
    pull: (usize, usize),
}

fn net() -> impl Strategy<Value = Net> {
    let port = (
        proptest::option::weighted(0.9, 0usize..5),
        prop_oneof![Just(20_000u32), 1u32..50_000],
    );
    let bridge = (0u16..3, proptest::collection::vec(port, 1..5));
    (
        proptest::collection::vec(bridge, 2..7),
        (0usize..7, 0usize..5),
    )
        .prop_map(|(bridges, pull)| Net { bridges, pull })
}

fn build(net: &Net, mode: Mode) -> Sim {
    let mut sim = Sim::new(mode, 20_000);
    for (i, (prio, ports)) in net.bridges.iter().enumerate() {
        let b = sim.add_bridge(0x100 + i as u64);
        sim.set_bridge_priority(b, u64::from(*prio) * 4096);
        for (k, (lan, cost)) in ports.iter().enumerate() {
            sim.connect(b, k as u16 + 1, *lan, *cost);
        }
    }
    sim
}

fn find(uf: &mut [usize], x: usize) -> usize {
    let mut x = x;
    while uf[x] != x {
        uf[x] = uf[uf[x]];
        x = uf[x];
    }
    x
}

/// Checks the spanning-tree properties of the CIST; Err says which failed.
fn check(sim: &Sim) -> Result<(), String> {
    check_tree(sim, TreeId::CIST, true)
}

/// Checks that `tree`'s forwarding ports form a spanning tree of every connected part;
/// with `roots`, also that every bridge agrees on the root (the CIST root, or the regional
/// root of an MSTI when all bridges share one region).
fn check_tree(sim: &Sim, tree: TreeId, roots: bool) -> Result<(), String> {
    let nb = sim.bridges.len();
    let node_of_lan = |l: usize| nb + l;
    let mut phys: Vec<usize> = (0..nb + 26).collect();
    let mut fwd: Vec<usize> = (0..nb + 26).collect();
    for (b, br) in sim.bridges.iter().enumerate() {
        let show = br.stp.show();
        for (k, lan) in br.lans.iter().enumerate() {
            let Some(lan) = lan else { continue };
            let p = &show.ports[k];
            if p.role == PortRole::Disabled {
                continue;
            }
            let state = br.stp.port_state(p.port, tree).ok_or("no such tree")?;
            let (x, y) = (find(&mut phys, b), find(&mut phys, node_of_lan(*lan)));
            phys[x] = y;
            if state == PortState::Forwarding {
                let (x, y) = (find(&mut fwd, b), find(&mut fwd, node_of_lan(*lan)));
                if x == y {
                    return Err(format!(
                        "tree {tree:?}: cycle through bridge {b} port {}",
                        k + 1
                    ));
                }
                fwd[x] = y;
            } else if state == PortState::Learning {
                return Err(format!(
                    "tree {tree:?} bridge {b} port {} still learning",
                    k + 1
                ));
            }
        }
    }
    for b in 0..nb {
        let comp = find(&mut phys, b);
        let id = |o: usize| {
            if tree == TreeId::CIST {
                sim.bridges[o].stp.bridge_id()
            } else {
                sim.bridges[o].stp.bridge_id_in(tree).unwrap()
            }
        };
        let best = (0..nb)
            .filter(|o| find(&mut phys, *o) == comp)
            .map(id)
            .min()
            .unwrap();
        let seen = if tree == TreeId::CIST {
            sim.bridges[b].stp.show().root_id
        } else {
            sim.bridges[b].stp.msti_root(tree).unwrap()
        };
        if roots && seen != best {
            return Err(format!(
                "tree {tree:?}: bridge {b} has root {seen}, want {best}"
            ));
        }
        let root = (0..nb)
            .find(|o| find(&mut phys, *o) == comp && id(*o) == best)
            .unwrap();
        if find(&mut fwd, b) != find(&mut fwd, root) {
            return Err(format!(
                "tree {tree:?}: bridge {b} is cut off from bridge {root}"
            ));
        }
    }
    Ok(())
}

/// `cases` random networks from a fixed seed, so the test command is repeatable (a network that
/// fails is a finding in the engine, kept in `topologies.proptest-regressions`); set
/// `PROPTEST_RNG_SEED` (any number) to explore other networks.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::with_cases(cases);
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = proptest::test_runner::RngSeed::Fixed(0x5717_2004);
    }
    c
}

fn roles(sim: &Sim) -> Vec<(PortRole, u32)> {
    sim.bridges
        .iter()
        .flat_map(|b| {
            let s = b.stp.show();
            s.ports
                .iter()
                .map(move |p| (p.role, s.root_path_cost))
                .collect::<Vec<_>>()
        })
        .collect()
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn random_networks_converge_to_one_spanning_tree(net in net()) {
        let mut rstp = build(&net, Mode::Rstp);
        rstp.run(40);
        prop_assert_eq!(check(&rstp), Ok(()));
        let mut stp = build(&net, Mode::Stp);
        stp.run(80);
        prop_assert_eq!(check(&stp), Ok(()));
        prop_assert_eq!(roles(&rstp), roles(&stp));
        // Pull one link and reconverge.
        let b = net.pull.0 % net.bridges.len();
        let p = net.pull.1 % net.bridges[b].1.len();
        rstp.disconnect(b, p as u16 + 1);
        // A port on a shared LAN (no proposal/agreement) that must take over waits for the
        // lost information to age out, then two forward delays (6 + 2 x 15 ticks) — unless
        // the root itself was cut off behind a loop: then RSTP counts to infinity until the
        // old root's Message Age reaches Max Age (20 hops), and only then elects a new root.
        // The network in the regressions file does that (root pulled; new root at tick 43,
        // settled at 49; docs/stp.md, "What is left"), hence 80, the legacy STP bound above.
        rstp.run(80);
        prop_assert_eq!(check(&rstp), Ok(()));
        for br in &rstp.bridges {
            prop_assert_eq!(br.stp.runaway_runs(), 0);
        }
    }
}

fn region(name: &str) -> Region {
    let mut r = Region::new(name, 1).unwrap();
    r.map(10, 1).unwrap();
    r.map(20, 2).unwrap();
    r
}

/// MSTP: every bridge gets random MSTI priorities; `regions` picks each bridge's region
/// (all the same, or two regions side by side).
fn build_mstp(net: &Net, msti_prio: &[(u16, u16)], regions: &[bool]) -> Sim {
    let mut sim = Sim::new(Mode::Mstp, 20_000);
    for (i, (prio, ports)) in net.bridges.iter().enumerate() {
        let other = regions.get(i).copied().unwrap_or(false);
        sim.region = Some(region(if other { "east" } else { "west" }));
        let b = sim.add_bridge(0x100 + i as u64);
        sim.set_bridge_priority(b, u64::from(*prio) * 4096);
        let (m1, m2) = msti_prio.get(i).copied().unwrap_or((8, 8));
        sim.bridges[b]
            .stp
            .set_msti_priority(TreeId(1), m1 * 4096)
            .unwrap();
        sim.bridges[b]
            .stp
            .set_msti_priority(TreeId(2), m2 * 4096)
            .unwrap();
        for (k, (lan, cost)) in ports.iter().enumerate() {
            sim.connect(b, k as u16 + 1, *lan, *cost);
        }
    }
    sim
}

proptest! {
    #![proptest_config(config(10))]

    /// One region: the CIST and both MSTIs are spanning trees with the expected roots.
    #[test]
    fn mstp_one_region_every_tree_spans(net in net(),
                                        prio in proptest::collection::vec((0u16..15, 0u16..15), 7)) {
        let mut sim = build_mstp(&net, &prio, &[]);
        sim.run(40);
        for t in 0..3 {
            prop_assert_eq!(check_tree(&sim, TreeId(t), true), Ok(()));
        }
        let b = net.pull.0 % net.bridges.len();
        let p = net.pull.1 % net.bridges[b].1.len();
        sim.disconnect(b, p as u16 + 1);
        sim.run(MSTP_SETTLE);
        for t in 0..3 {
            prop_assert_eq!(check_tree(&sim, TreeId(t), true), Ok(()));
        }
        for br in &sim.bridges {
            prop_assert_eq!(br.stp.runaway_runs(), 0);
        }
    }

    /// Two regions side by side: every tree is still loop-free and connected.
    #[test]
    fn mstp_two_regions_every_tree_spans(net in net(),
                                         prio in proptest::collection::vec((0u16..15, 0u16..15), 7),
                                         regions in proptest::collection::vec(any::<bool>(), 7)) {
        let mut sim = build_mstp(&net, &prio, &regions);
        sim.run(40);
        prop_assert_eq!(check_tree(&sim, TreeId(0), true), Ok(()));
        for t in 1..3 {
            prop_assert_eq!(check_tree(&sim, TreeId(t), false), Ok(()));
        }
    }
}

/// Seconds allowed for MSTP to settle after a change: stale regional-root information is
/// only removed by remaining hops (one per BPDU hop), as the standard designs it.
const MSTP_SETTLE: u32 = 90;

#[test]
fn mstp_regression_stale_regional_root_dies_by_hops() {
    let net = Net {
        bridges: vec![
            (
                0,
                vec![
                    (Some(0), 20000),
                    (None, 20000),
                    (Some(1), 20000),
                    (Some(3), 20000),
                ],
            ),
            (0, vec![(Some(0), 20000)]),
            (0, vec![(Some(1), 20000), (Some(1), 20000)]),
            (0, vec![(Some(0), 31758)]),
            (
                1,
                vec![
                    (Some(3), 46532),
                    (Some(2), 37521),
                    (Some(3), 32699),
                    (Some(0), 20000),
                ],
            ),
            (2, vec![(Some(3), 20000), (Some(3), 19172)]),
        ],
        pull: (1, 4),
    };
    let prio = [(12, 14), (3, 5), (6, 1), (6, 2), (8, 10), (3, 7), (5, 1)];
    let mut sim = build_mstp(&net, &prio, &[]);
    sim.run(40);
    for t in 0..3 {
        assert_eq!(check_tree(&sim, TreeId(t), true), Ok(()));
    }
    // Bridge 1 (the MSTI 1 regional root) leaves: its information circulates around
    // the ring of shared LANs with a growing cost until remaining hops (MaxHops 20) kill
    // it, about 36 s here; the bound is what the test checks.
    sim.disconnect(1, 1);
    sim.run(MSTP_SETTLE);
    for t in 0..3 {
        assert_eq!(check_tree(&sim, TreeId(t), true), Ok(()));
    }
}

/// A shared LAN with bridges of both regions: the MSTI must not take its root port
/// through the boundary port, whose MSTI role follows the CIST (Alternate here).
#[test]
fn mstp_regression_two_regions() {
    let net = Net {
        bridges: vec![
            (1, vec![(Some(2), 20000), (Some(4), 20005)]),
            (1, vec![(Some(1), 20000)]),
            (
                0,
                vec![(Some(0), 20000), (Some(3), 20000), (Some(2), 20000)],
            ),
            (
                2,
                vec![(Some(1), 46328), (Some(3), 20000), (Some(3), 20000)],
            ),
            (
                1,
                vec![
                    (Some(2), 439),
                    (Some(0), 28595),
                    (Some(4), 20000),
                    (Some(2), 20000),
                ],
            ),
        ],
        pull: (2, 4),
    };
    let prio = [(11, 2), (13, 13), (4, 7), (3, 5), (6, 7), (12, 6), (14, 8)];
    let regions = [true, false, false, false, true, false, false];
    let mut sim = build_mstp(&net, &prio, &regions);
    sim.run(40);
    assert_eq!(check_tree(&sim, TreeId(0), true), Ok(()));
    for t in 1..3 {
        assert_eq!(check_tree(&sim, TreeId(t), false), Ok(()));
    }
}
