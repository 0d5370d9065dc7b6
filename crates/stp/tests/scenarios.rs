//! Behaviour beyond the OVS scripts: convergence of a triangle, rapid reconvergence
//! after a link is pulled (ticks counted, RSTP against legacy STP), Port Protocol
//! Migration with a legacy neighbour, the four guards, topology-change flushes, counters,
//! the `show` snapshot, auto path cost and configuration errors.

mod harness;
use harness::Sim;
use qbridge_stp::{
    bpdu, BridgeConfig, ConfigError, Cost, Duplex, Event, GroupAddress, Link, Mode, OnOff, Output,
    PortFlag, PortRole, PortState, SendProtocol, Stp,
};

fn states(sim: &Sim, b: usize) -> Vec<(PortRole, PortState)> {
    sim.bridges[b]
        .stp
        .show()
        .ports
        .iter()
        .map(|p| (p.role, p.state))
        .collect()
}

fn blocked_ports(sim: &Sim) -> usize {
    sim.bridges
        .iter()
        .flat_map(|b| b.stp.show().ports)
        .filter(|p| p.role != PortRole::Disabled && p.state != PortState::Forwarding)
        .count()
}

/// bridge 0 (root) -a- bridge 1 -c- bridge 2 -b- bridge 0
fn triangle(mode: Mode) -> Sim {
    let mut sim = Sim::new(mode, 20_000);
    sim.script("bridge 0 0x111 = a b\nbridge 1 0x222 = a c\nbridge 2 0x333 = b c\nrun 1\n")
        .unwrap();
    sim
}

#[test]
fn triangle_converges_with_exactly_one_blocked_port() {
    for mode in [Mode::Rstp, Mode::Stp, Mode::Mstp] {
        let sim = triangle(mode);
        assert_eq!(blocked_ports(&sim), 1, "{mode:?}");
        assert_eq!(
            states(&sim, 2)[1],
            (PortRole::Alternate, PortState::Discarding),
            "{mode:?}"
        );
        for b in &sim.bridges {
            assert_eq!(b.stp.show().root_id, sim.bridges[0].stp.bridge_id());
        }
    }
}

/// Pull the link between the root and bridge 1: bridge 1 must now reach the root through
/// bridge 2, whose alternate port turns designated and hands over by proposal/agreement.
fn ticks_to_reconverge(mode: Mode) -> u64 {
    let mut sim = triangle(mode);
    sim.disconnect(0, 1);
    sim.disconnect(1, 1);
    let mut ticks = 0;
    loop {
        let ok = states(&sim, 2)
            == [
                (PortRole::Root, PortState::Forwarding),
                (PortRole::Designated, PortState::Forwarding),
            ]
            && states(&sim, 1)[1] == (PortRole::Root, PortState::Forwarding);
        if ok {
            return ticks;
        }
        assert!(
            ticks < 100,
            "{mode:?} never reconverged: {:?} {:?}",
            states(&sim, 1),
            states(&sim, 2)
        );
        sim.tick();
        ticks += 1;
    }
}

#[test]
fn rstp_reconverges_within_a_tick_by_proposal_agreement() {
    let rstp = ticks_to_reconverge(Mode::Rstp);
    assert!(rstp <= 1, "RSTP took {rstp} ticks");
    let stp = ticks_to_reconverge(Mode::Stp);
    assert!(
        stp >= 30,
        "legacy STP must wait 2 x forward delay, took {stp}"
    );
}

#[test]
fn root_port_loss_goes_straight_to_the_alternate() {
    let mut sim = triangle(Mode::Rstp);
    sim.disconnect(0, 2);
    sim.disconnect(2, 1);
    // No tick: the alternate port becomes root port and forwards at once.
    assert_eq!(states(&sim, 2)[1], (PortRole::Root, PortState::Forwarding));
    assert_eq!(sim.bridges[2].stp.show().root_path_cost, 40_000);
}

#[test]
fn legacy_neighbour_makes_the_port_fall_back_and_mcheck_returns() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.mode = Mode::Stp;
    sim.add_bridge(0x111);
    sim.mode = Mode::Rstp;
    sim.add_bridge(0x222);
    sim.connect(0, 1, Some(0), 20_000);
    sim.connect(1, 1, Some(0), 20_000);
    sim.run(40);
    let p = &sim.bridges[1].stp.show().ports[0];
    assert_eq!(p.protocol, SendProtocol::Stp);
    assert!(p.counters.rx_config > 0);
    assert!(sim.bridges[1].events.contains(&Event::ProtocolMigration {
        port: 1,
        now_sends: SendProtocol::Stp
    }));
    assert_eq!(states(&sim, 1)[0], (PortRole::Root, PortState::Forwarding));
    assert_eq!(
        states(&sim, 0)[0],
        (PortRole::Designated, PortState::Forwarding)
    );
    // From then on the port sends only legacy BPDUs (TCNs on a root port).
    let rst_before = sim.bridges[1].stp.show().ports[0].counters.tx_rst;
    sim.run(40);
    assert_eq!(
        sim.bridges[1].stp.show().ports[0].counters.tx_rst,
        rst_before
    );
    // The neighbour upgrades to RSTP; an mcheck makes this port try RST BPDUs again.
    let cfg = BridgeConfig {
        mode: Mode::Rstp,
        ..sim.bridges[0].stp.config().clone()
    };
    sim.bridges[0].stp.set_config(cfg).unwrap();
    sim.bridges[1].stp.mcheck(1).unwrap();
    sim.pump();
    sim.run(10);
    assert_eq!(
        sim.bridges[1].stp.show().ports[0].protocol,
        SendProtocol::Rstp
    );
    assert_eq!(
        sim.bridges[0].stp.show().ports[0].protocol,
        SendProtocol::Rstp
    );
}

#[test]
fn bpdu_guard_shuts_an_edge_port_that_hears_a_bpdu() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.add_bridge(0x111);
    sim.add_bridge(0x222);
    sim.connect(0, 1, None, 20_000);
    sim.bridges[0]
        .stp
        .set_port_flag(1, PortFlag::AdminEdge, OnOff::On)
        .unwrap();
    sim.bridges[0]
        .stp
        .set_port_flag(1, PortFlag::BpduGuard, OnOff::On)
        .unwrap();
    sim.run(1);
    assert_eq!(
        states(&sim, 0)[0],
        (PortRole::Designated, PortState::Forwarding)
    );
    sim.connect(0, 1, Some(0), 20_000);
    sim.connect(1, 1, Some(0), 20_000);
    sim.run(3);
    assert!(sim.bridges[0]
        .events
        .contains(&Event::BpduGuardShut { port: 1 }));
    assert_eq!(
        states(&sim, 0)[0],
        (PortRole::Disabled, PortState::Discarding)
    );
    sim.bridges[0].stp.set_port_admin(1, OnOff::On).unwrap();
    assert!(sim.bridges[0].stp.show().ports[0].enabled);
}

#[test]
fn bpdu_filter_neither_sends_nor_processes() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.add_bridge(0x111);
    sim.add_bridge(0x222);
    sim.connect(0, 1, Some(0), 20_000);
    sim.bridges[0]
        .stp
        .set_port_flag(1, PortFlag::BpduFilter, OnOff::On)
        .unwrap();
    sim.bridges[0].sent.clear();
    sim.connect(1, 1, Some(0), 20_000);
    sim.run(10);
    assert!(sim.bridges[0].sent.is_empty());
    let c = &sim.bridges[0].stp.show().ports[0].counters;
    assert!(c.rx_filtered > 0 && c.rx_rst == 0);
    // Both think they are root: the filter is the operator's responsibility.
    assert_eq!(
        states(&sim, 1)[0],
        (PortRole::Designated, PortState::Forwarding)
    );
}

#[test]
fn root_guard_keeps_a_superior_neighbour_out_until_its_info_ages() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.script("bridge 0 0x111 = a\nbridge 1 0x222 = a b\nrun 1\n")
        .unwrap();
    sim.bridges[1]
        .stp
        .set_port_flag(2, PortFlag::RootGuard, OnOff::On)
        .unwrap();
    sim.script("bridge 2 0x001 = b\nbridge 2 ^ 4096\nrun 1\n")
        .unwrap();
    assert!(sim.bridges[1].events.contains(&Event::RootInconsistent {
        port: 2,
        change: qbridge_stp::Inconsistency::Entered
    }));
    assert_eq!(
        states(&sim, 1)[1],
        (PortRole::Alternate, PortState::Discarding)
    );
    assert_eq!(sim.bridges[1].stp.show().root_port, Some(1));
    assert!(sim.bridges[1].stp.show().ports[1].root_inconsistent);
    // The superior bridge goes away (its BPDUs stop): the port ages out and forwards.
    sim.bridges[2]
        .stp
        .set_port_flag(1, PortFlag::BpduFilter, OnOff::On)
        .unwrap();
    sim.run(10);
    assert!(sim.bridges[1].events.contains(&Event::RootInconsistent {
        port: 2,
        change: qbridge_stp::Inconsistency::Cleared
    }));
    assert_eq!(
        states(&sim, 1)[1],
        (PortRole::Designated, PortState::Forwarding)
    );
}

fn one_way_failure(loop_guard: OnOff) -> (PortRole, PortState, Vec<Event>) {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.script("bridge 0 0x111 = a b\nbridge 1 0x222 = a b\nrun 1\n")
        .unwrap();
    assert_eq!(
        states(&sim, 1)[1],
        (PortRole::Alternate, PortState::Discarding)
    );
    sim.bridges[1]
        .stp
        .set_port_flag(2, PortFlag::LoopGuard, loop_guard)
        .unwrap();
    // Bridge 0 stops sending on LAN b (a unidirectional link): bridge 1 hears nothing.
    sim.bridges[0]
        .stp
        .set_port_flag(2, PortFlag::BpduFilter, OnOff::On)
        .unwrap();
    sim.run(20);
    let (r, s) = states(&sim, 1)[1];
    (r, s, sim.bridges[1].events.clone())
}

#[test]
fn loop_guard_keeps_a_silent_alternate_port_discarding() {
    let (role, state, _) = one_way_failure(OnOff::Off);
    assert_eq!(
        (role, state),
        (PortRole::Designated, PortState::Forwarding),
        "without the guard: a loop"
    );
    let (role, state, events) = one_way_failure(OnOff::On);
    assert_eq!(state, PortState::Discarding, "{role:?}");
    assert!(events.contains(&Event::LoopInconsistent {
        port: 2,
        change: qbridge_stp::Inconsistency::Entered
    }));
}

#[test]
fn topology_change_flushes_ports_not_the_table() {
    let mut sim = triangle(Mode::Rstp);
    for b in &mut sim.bridges {
        b.flushes.clear();
        b.events.clear();
    }
    let before = sim.bridges[1].stp.show().topology_changes;
    sim.disconnect(0, 1);
    sim.disconnect(1, 1);
    sim.run(3);
    // Bridge 2 learns of the change on its root port: it flushes its other port only.
    let f2 = &sim.bridges[2].flushes;
    assert!(f2.contains(&(1, 0)) && !f2.contains(&(2, 0)), "{f2:?}");
    assert!(sim.bridges[1].stp.show().topology_changes > before);
    let show = sim.bridges[2].stp.show();
    assert!(show.last_topology_change_tick.is_some());
    assert!(sim.bridges[2]
        .events
        .iter()
        .any(|e| matches!(e, Event::TopologyChange { .. })));
}

#[test]
fn counters_bad_bpdus_and_show_json() {
    let mut sim = triangle(Mode::Rstp);
    let stp = &mut sim.bridges[0].stp;
    assert!(stp.receive(1, &[0u8; 5]).is_err());
    assert!(stp.receive(1, &[0xffu8; 64]).is_err());
    assert!(stp.receive(9, &[0u8; 64]).is_err());
    let show = stp.show();
    let c = &show.ports[0].counters;
    assert_eq!(c.bad(bpdu::BadBpdu::TooShort), 1);
    assert_eq!(c.bad(bpdu::BadBpdu::BadLength), 1);
    assert!(c.tx_rst > 0 && c.rx_rst > 0);
    let json = serde_json::to_string(&show).unwrap();
    assert!(json.contains("\"root_status\":\"root\""), "{json}");
    assert!(json.contains("\"role\":\"designated\""));
    assert!(
        json.contains("\"rx_bad\":{\"too_short\":1,\"bad_length\":1,"),
        "{json}"
    );
}

#[test]
fn own_bpdu_looped_back_is_dropped() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.add_bridge(0x111);
    sim.connect(0, 1, Some(0), 20_000);
    let (_, frame) = sim.bridges[0].sent.last().cloned().unwrap();
    assert_eq!(
        sim.bridges[0].stp.receive(1, &frame),
        Err(qbridge_stp::RxError::Bad(bpdu::BadBpdu::OwnBpdu))
    );
}

#[test]
fn provider_bridges_send_to_the_provider_group_address() {
    let cfg = BridgeConfig {
        group_address: GroupAddress::Provider,
        ..BridgeConfig::default()
    };
    let mut stp = Stp::new([2, 0, 0, 0, 0, 1], cfg).unwrap();
    stp.add_port(1, [2, 0, 0, 0, 1, 1]).unwrap();
    stp.set_link(
        1,
        Link::Up {
            speed_mbps: 1000,
            duplex: Duplex::Full,
        },
    )
    .unwrap();
    let outs = stp.take_outputs();
    let frame = outs.iter().find_map(|o| match o {
        Output::Bpdu { frame, .. } => Some(frame.clone()),
        _ => None,
    });
    let frame = frame.expect("a BPDU on link up");
    assert_eq!(&frame[..12], &[1, 0x80, 0xc2, 0, 0, 8, 2, 0, 0, 0, 1, 1]);
    assert!(outs.contains(&Output::PortState {
        port: 1,
        tree: qbridge_stp::TreeId::CIST,
        state: PortState::Discarding
    }));
}

#[test]
fn auto_cost_follows_link_speed_table_17_3() {
    let mut stp = Stp::new([2, 0, 0, 0, 0, 1], BridgeConfig::default()).unwrap();
    stp.add_port(1, [2, 0, 0, 0, 1, 1]).unwrap();
    for (speed, cost) in [
        (10, 2_000_000),
        (100, 200_000),
        (1000, 20_000),
        (10_000, 2_000),
        (100_000, 200),
        (0, 200_000),
    ] {
        stp.set_link(
            1,
            Link::Up {
                speed_mbps: speed,
                duplex: Duplex::Full,
            },
        )
        .unwrap();
        assert_eq!(stp.show().ports[0].path_cost, cost, "{speed} Mb/s");
    }
    stp.set_port_cost(1, Cost::Fixed(7)).unwrap();
    assert_eq!(stp.show().ports[0].path_cost, 7);
}

#[test]
fn configuration_errors_name_the_value() {
    let bad = |c: BridgeConfig| Stp::new([0; 6], c).unwrap_err();
    assert_eq!(
        bad(BridgeConfig {
            priority: 100,
            ..Default::default()
        }),
        ConfigError::BridgePriority(100)
    );
    let e = bad(BridgeConfig {
        max_age: 40,
        forward_delay: 4,
        ..Default::default()
    });
    assert!(matches!(e, ConfigError::TimerRelation { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "max age 40 must lie between 2*(hello time+1)=6 and 2*(forward delay-1)=6"
    );
    let mut stp = Stp::new([0; 6], BridgeConfig::default()).unwrap();
    stp.add_port(1, [0; 6]).unwrap();
    assert_eq!(stp.add_port(1, [0; 6]), Err(ConfigError::PortNumber(1)));
    assert_eq!(stp.add_port(0, [0; 6]), Err(ConfigError::PortNumber(0)));
    assert_eq!(
        stp.set_port_priority(1, 100),
        Err(ConfigError::PortPriority(100))
    );
    assert_eq!(
        stp.set_port_cost(2, Cost::Auto),
        Err(ConfigError::NoPort(2))
    );
    assert!(stp.set_port_cost(1, Cost::Fixed(0)).is_err());
}

fn two_msti_region() -> qbridge_stp::mst::Region {
    let mut region = qbridge_stp::mst::Region::new("ring", 1).unwrap();
    region.map(10, 1).unwrap();
    region.map(20, 2).unwrap();
    region
}

#[test]
fn mstp_sends_mst_bpdus_with_a_message_per_msti_and_states_per_tree() {
    use qbridge_stp::TreeId;
    let cfg = BridgeConfig {
        mode: Mode::Mstp,
        ..BridgeConfig::default()
    };
    let mut stp = Stp::new([2, 0, 0, 0, 0, 1], cfg).unwrap();
    let region = two_msti_region();
    stp.set_region(region.clone());
    assert_eq!(stp.trees(), vec![TreeId(0), TreeId(1), TreeId(2)]);
    stp.add_port(1, [2, 0, 0, 0, 1, 1]).unwrap();
    stp.set_link(
        1,
        Link::Up {
            speed_mbps: 1000,
            duplex: Duplex::Full,
        },
    )
    .unwrap();
    for _ in 0..5 {
        stp.tick();
    }
    let outs = stp.take_outputs();
    for t in 0..3 {
        assert!(
            outs.contains(&Output::PortState {
                port: 1,
                tree: TreeId(t),
                state: PortState::Forwarding
            }),
            "tree {t}"
        );
        assert!(
            outs.contains(&Output::Flush {
                port: 1,
                tree: TreeId(t)
            }),
            "tree {t}"
        );
        assert_eq!(stp.port_state(1, TreeId(t)), Some(PortState::Forwarding));
    }
    assert_eq!(stp.port_state(1, TreeId(3)), None);
    let frame = outs
        .iter()
        .rev()
        .find_map(|o| match o {
            Output::Bpdu { frame, .. } => Some(frame.clone()),
            _ => None,
        })
        .unwrap();
    let Ok(bpdu::Bpdu::Mst(c, m)) = bpdu::parse_frame(&frame) else {
        panic!("not MST")
    };
    assert_eq!(m.config_id, region.config_id());
    assert_eq!(m.mstis.len(), 2);
    assert_eq!(m.mstis[0].regional_root.priority(), 0x8001);
    assert_eq!(m.mstis[1].regional_root.priority(), 0x8002);
    assert_eq!(
        c.bridge,
        stp.bridge_id(),
        "CIST regional root is this bridge"
    );
    assert_eq!(m.remaining_hops, 20);
    let show = stp.show();
    assert_eq!(show.ports[0].mstis.len(), 2);
    assert_eq!(show.ports[0].mstis[1].role, PortRole::Designated);
}

/// A ring of three bridges in one region, CIST root bridge 0, MSTI 1 rooted at bridge 1,
/// MSTI 2 at bridge 2: each tree blocks the link opposite its root.
#[test]
fn two_mstis_block_different_ports_of_one_ring() {
    use qbridge_stp::TreeId;
    let mut sim = Sim::new(Mode::Mstp, 20_000);
    sim.region = Some(two_msti_region());
    sim.script("bridge 0 0x111 = a c\nbridge 1 0x222 = a b\nbridge 2 0x333 = b c\n")
        .unwrap();
    sim.bridges[1]
        .stp
        .set_msti_priority(TreeId(1), 4096)
        .unwrap();
    sim.bridges[2]
        .stp
        .set_msti_priority(TreeId(2), 4096)
        .unwrap();
    sim.pump();
    sim.run(30);
    let st = |sim: &Sim, b: usize, tree: u16| -> Vec<PortState> {
        (1..=2)
            .map(|p| sim.bridges[b].stp.port_state(p, TreeId(tree)).unwrap())
            .collect()
    };
    let fwd = PortState::Forwarding;
    let dis = PortState::Discarding;
    // CIST: root 0; the b link (1-2) is blocked at bridge 2.
    assert_eq!(
        (st(&sim, 0, 0), st(&sim, 1, 0), st(&sim, 2, 0)),
        (vec![fwd, fwd], vec![fwd, fwd], vec![dis, fwd])
    );
    // MSTI 1: root 1; the c link (0-2) is blocked at bridge 2.
    assert_eq!(
        (st(&sim, 0, 1), st(&sim, 1, 1), st(&sim, 2, 1)),
        (vec![fwd, fwd], vec![fwd, fwd], vec![fwd, dis])
    );
    // MSTI 2: root 2; the a link (0-1) is blocked at bridge 1.
    assert_eq!(
        (st(&sim, 0, 2), st(&sim, 1, 2), st(&sim, 2, 2)),
        (vec![fwd, fwd], vec![dis, fwd], vec![fwd, fwd])
    );
    // One region: the CIST root is also every bridge's regional root, the external cost
    // is 0 and the internal cost counts the hops inside the region.
    let s2 = sim.bridges[2].stp.show();
    assert_eq!(s2.regional_root, sim.bridges[0].stp.bridge_id());
    assert_eq!((s2.root_path_cost, s2.internal_root_path_cost), (0, 20_000));
    for b in 0..3 {
        assert_eq!(
            sim.bridges[b].stp.msti_root(TreeId(1)),
            Some(qbridge_stp::BridgeId::new(0x1001, [0, 0, 0, 0, 0x02, 0x22]))
        );
    }
}

#[test]
fn legacy_topology_change_goes_up_as_tcn_and_comes_back_acknowledged() {
    // Chain root(0) -a- 1 -b- 2 in legacy STP; then bridge 2 gets a new leaf port.
    let mut sim = Sim::new(Mode::Stp, 10);
    sim.script("bridge 0 0x111 = a\nbridge 1 0x222 = a b\nbridge 2 0x333 = b\nrun 1\n")
        .unwrap();
    let tc_before = sim.bridges[0].stp.show().topology_changes;
    for b in &mut sim.bridges {
        b.flushes.clear();
    }
    sim.connect(2, 2, None, 10); // a new port on bridge 2: forwarding after 2 x 15 s
    sim.run(40);
    let s2 = sim.bridges[2].stp.show();
    let s1 = sim.bridges[1].stp.show();
    let s0 = sim.bridges[0].stp.show();
    assert!(
        s2.ports[0].counters.tx_tcn > 0,
        "bridge 2 notifies its root port"
    );
    assert!(
        s1.ports[1].counters.rx_tcn > 0 && s1.ports[0].counters.tx_tcn > 0,
        "bridge 1 relays"
    );
    assert!(
        s0.ports[0].counters.rx_tcn > 0 && s0.topology_changes > tc_before,
        "the root hears it"
    );
    // TCNs stop once acknowledged: none in the last hellos.
    let tcn = |sim: &Sim| sim.bridges[2].stp.show().ports[0].counters.tx_tcn;
    let n = tcn(&sim);
    sim.run(10);
    assert_eq!(tcn(&sim), n);
    // Bridge 1 flushes its port towards the root when the notification passes.
    assert!(
        sim.bridges[1].flushes.contains(&(1, 0)),
        "{:?}",
        sim.bridges[1].flushes
    );
}

#[test]
fn transmit_hold_count_limits_bursts() {
    let cfg = BridgeConfig {
        tx_hold_count: 2,
        ..BridgeConfig::default()
    };
    let mut stp = Stp::new([2, 0, 0, 0, 0, 1], cfg).unwrap();
    stp.add_port(1, [2, 0, 0, 0, 1, 1]).unwrap();
    stp.set_link(
        1,
        Link::Up {
            speed_mbps: 1000,
            duplex: Duplex::Full,
        },
    )
    .unwrap();
    let _ = stp.take_outputs();
    // Many changes within one second: at most tx_hold_count BPDUs go out.
    for prio in [0u16, 4096, 8192, 12288, 16384] {
        let c = BridgeConfig {
            priority: prio,
            tx_hold_count: 2,
            ..BridgeConfig::default()
        };
        stp.set_config(c).unwrap();
    }
    let sent = stp
        .take_outputs()
        .iter()
        .filter(|o| matches!(o, Output::Bpdu { .. }))
        .count();
    assert!(sent <= 2, "{sent} BPDUs in one second");
}

#[test]
fn auto_edge_after_silence_and_lost_on_a_bpdu() {
    let mut sim = Sim::new(Mode::Rstp, 20_000);
    sim.add_bridge(0x111);
    sim.connect(0, 1, None, 20_000);
    assert!(!sim.bridges[0].stp.show().ports[0].edge);
    sim.run(4); // edge delay on a point-to-point link: MigrateTime, 3 s
    assert!(sim.bridges[0].stp.show().ports[0].edge);
    assert_eq!(
        states(&sim, 0)[0],
        (PortRole::Designated, PortState::Forwarding)
    );
    sim.add_bridge(0x222);
    sim.connect(0, 1, Some(0), 20_000);
    sim.connect(1, 1, Some(0), 20_000);
    sim.run(1);
    assert!(!sim.bridges[0].stp.show().ports[0].edge);
}

#[test]
fn all_sim_bridges_settle_without_runaway() {
    let mut sim = Sim::new(Mode::Stp, 10);
    sim.script("bridge 0 0x111 = a b c\nbridge 1 0x222 = a b c\nrun 1\nbridge 1 = 0 _ _\nrun 1\n")
        .unwrap();
    for b in &sim.bridges {
        assert_eq!(b.stp.runaway_runs(), 0);
    }
}

#[test]
fn mstp_config_change_does_not_restart_the_mstis() {
    use qbridge_stp::TreeId;
    let mut sim = Sim::new(Mode::Mstp, 20_000);
    sim.region = Some(two_msti_region());
    sim.script("bridge 0 0x111 = a\nbridge 1 0x222 = a\n")
        .unwrap();
    sim.run(10);
    let _ = sim.bridges[0].stp.take_outputs();
    let cfg = BridgeConfig {
        hello_time: 1,
        ..sim.bridges[0].stp.config().clone()
    };
    sim.bridges[0].stp.set_config(cfg).unwrap();
    let outs = sim.bridges[0].stp.take_outputs();
    assert!(
        !outs.iter().any(|o| matches!(
            o,
            Output::PortState {
                state: PortState::Discarding,
                ..
            }
        )),
        "{outs:?}"
    );
    assert_eq!(
        sim.bridges[0].stp.port_state(1, TreeId(2)),
        Some(PortState::Forwarding)
    );
}
