//! Property test over random networks: bridges with random priorities and port costs,
//! attached to random LANs (shared segments included), in RSTP and in legacy STP. After
//! convergence every bridge agrees on the root (the lowest bridge id of its connected
//! part), the forwarding ports form a spanning tree of each connected part (connected, no
//! cycle), and both protocol versions choose the same roles and root path costs. Then a
//! random link is pulled and the same must hold again.

mod harness;
use harness::Sim;
use proptest::prelude::*;
use qbridge_stp::{Mode, PortRole, PortState};

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

/// Checks the spanning-tree properties; Err says which failed.
fn check(sim: &Sim) -> Result<(), String> {
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
            let (x, y) = (find(&mut phys, b), find(&mut phys, node_of_lan(*lan)));
            phys[x] = y;
            if p.state == PortState::Forwarding {
                let (x, y) = (find(&mut fwd, b), find(&mut fwd, node_of_lan(*lan)));
                if x == y {
                    return Err(format!("cycle through bridge {b} port {}", k + 1));
                }
                fwd[x] = y;
            } else if p.state == PortState::Learning {
                return Err(format!("bridge {b} port {} still learning", k + 1));
            }
        }
    }
    for b in 0..nb {
        let comp = find(&mut phys, b);
        let best = (0..nb)
            .filter(|o| find(&mut phys, *o) == comp)
            .map(|o| sim.bridges[o].stp.bridge_id())
            .min()
            .unwrap();
        let show = sim.bridges[b].stp.show();
        if show.root_id != best {
            return Err(format!("bridge {b} has root {}, want {best}", show.root_id));
        }
        let root = (0..nb)
            .find(|o| sim.bridges[*o].stp.bridge_id() == best)
            .unwrap();
        if find(&mut fwd, b) != find(&mut fwd, root) {
            return Err(format!("bridge {b} is cut off from root bridge {root}"));
        }
    }
    Ok(())
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
    #![proptest_config(ProptestConfig::with_cases(24))]

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
        rstp.run(40);
        prop_assert_eq!(check(&rstp), Ok(()));
        for br in &rstp.bridges {
            prop_assert_eq!(br.stp.runaway_runs(), 0);
        }
    }
}
