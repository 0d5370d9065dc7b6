//! Differential property test: random switches, configurations and frame sequences go through
//! the fast path and the reference model; both must send the same bytes on the same ports in
//! the same order, and end every step with the same FDB and counters.
//!
//! `PROPTEST_CASES=N` runs N cases instead of the default; `PROPTEST_RNG_SEED=S` changes the
//! otherwise fixed seed (CI runs the same cases every time). A failure prints the shrunk
//! scenario and the first step where the two disagree.
//!
//! The generated space covers `ageing_time 0`, idle times exactly at `ageing_time`, ports going
//! down and up during a run, `fdb add|del` in unconfigured VLANs and into full tables: the
//! divergences once found there are fixed, and `divergences.rs` keeps their minimal cases.
//! Bridges have spanning tree on or off, and ports get random STP states over random VIDs.

mod common;

use common::{Hex, Op, Pair, PortSpec, Scenario, S};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use qbridge_bridge::{BridgeSettings, FdbKind, PcpMode, PortSettings, VlanProtocol};
use qbridge_packet::OffloadMeta;
use qbridge_wire::virtio::F_NEEDS_CSUM;
use qbridge_wire::{MacAddr, Tpid};

/// Default number of cases: about 35 s in a debug build on a busy 2-core machine (each case is
/// a switch and up to 40 steps, about 100 frames on average).
const DEFAULT_CASES: u32 = 1000;

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let seeded = std::env::var("PROPTEST_RNG_SEED").is_ok();
    let mut c = Config {
        cases,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    if !seeded {
        c.rng_seed = RngSeed::Fixed(0x9b71_d224_0a5e_c0de);
    }
    c
}

const NVID: u32 = 12;
const NMAC: u8 = 6;

fn vid() -> impl Strategy<Value = u32> {
    1..=NVID
}

fn bridge_settings(small_tables: bool) -> impl Strategy<Value = BridgeSettings> {
    let max_entries = if small_tables {
        1u32..=8
    } else {
        1u32 << 21..=1u32 << 21
    };
    (
        prop::bool::weighted(0.8),
        prop::bool::ANY,
        prop_oneof![3 => Just(1u16), 1 => Just(0u16), 1 => Just(2u16)],
        prop_oneof![9 => 1u64..=20, 1 => Just(0u64)],
        prop_oneof![3 => Just(0u32), 1 => 1u32..=6],
        prop_oneof![2 => Just(0u16), 1 => any::<u16>().prop_map(|m| m & !7)],
        prop_oneof![3 => Just(1u32 << 21), 1 => max_entries],
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(
                filtering,
                ad,
                default_pvid,
                ageing_s,
                max_learned,
                mask,
                max_entries,
                inner,
                stp,
            )| {
                BridgeSettings {
                    vlan_filtering: filtering,
                    vlan_protocol: if ad {
                        VlanProtocol::Dot1Ad
                    } else {
                        VlanProtocol::Dot1Q
                    },
                    default_pvid,
                    ageing_time_ns: ageing_s * S,
                    fdb_max_learned: max_learned,
                    group_fwd_mask: mask,
                    fdb_max_entries: max_entries,
                    learn_inner_vid: inner,
                    stp,
                }
            },
        )
}

fn port_settings() -> impl Strategy<Value = PortSettings> {
    (
        prop::bool::weighted(0.85),
        [
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.8),
        ],
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop_oneof![Just(1500u32), Just(68u32), 69u32..=300],
        prop_oneof![3 => Just(None), 1 => (0u32..=12).prop_map(Some)],
        prop_oneof![
            4 => Just(None),
            1 => Just(Some(Tpid(0x8100))),
            1 => Just(Some(Tpid(0x88a8))),
            1 => Just(Some(Tpid(0x9100))),
            1 => Just(Some(Tpid(0x9abc))),
        ],
        prop_oneof![3 => Just(0u32), 1 => 1u32..=3],
        (
            prop_oneof![
                4 => Just(PcpMode::Keep),
                2 => Just(PcpMode::Copy),
                1 => (0u8..8).prop_map(PcpMode::Fixed),
                2 => any::<[u8; 8]>().prop_map(|m| PcpMode::Map(m.map(|x| x & 7))),
            ],
            prop_oneof![3 => Just(0u8), 1 => 0u8..8],
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.6),
        ),
    )
        .prop_map(
            |(
                learning,
                [flood, mcast, bcast],
                isolated,
                hairpin,
                mtu,
                envhdr,
                tpid,
                lim,
                (pcp_mode, default_pcp, locked, mab),
            )| {
                PortSettings {
                    learning,
                    flood,
                    mcast_flood: mcast,
                    bcast_flood: bcast,
                    isolated,
                    hairpin,
                    mtu,
                    envhdr_len: envhdr,
                    tpid,
                    fdb_max_learned: lim,
                    up: true,
                    pcp_mode,
                    default_pcp,
                    locked,
                    // MAB needs a locked port that learns (refusals: unit tests).
                    mab: mab && locked && learning,
                }
            },
        )
}

fn unicast() -> impl Strategy<Value = MacAddr> {
    (1..=NMAC).prop_map(common::mac)
}

fn dst_mac() -> impl Strategy<Value = MacAddr> {
    prop_oneof![
        6 => unicast(),
        2 => Just(MacAddr::BROADCAST),
        1 => (0u8..=255).prop_map(|x| MacAddr([0x01, 0x00, 0x5e, 0, 0, x])),
        2 => (0u8..=15).prop_map(|x| MacAddr([0x01, 0x80, 0xc2, 0, 0, x])),
    ]
}

fn src_mac() -> impl Strategy<Value = MacAddr> {
    prop_oneof![
        20 => unicast(),
        1 => Just(MacAddr::ZERO),
        1 => Just(MacAddr([0x01, 0x00, 0x5e, 0, 0, 1])),
    ]
}

fn tag() -> impl Strategy<Value = (u16, u16)> {
    (
        prop_oneof![
            3 => Just(0x8100u16),
            3 => Just(0x88a8u16),
            1 => Just(0x9100u16),
            1 => Just(0x9abcu16),
        ],
        0u16..8,
        prop::bool::weighted(0.1),
        prop_oneof![8 => 1u16..=(NVID as u16 + 1), 2 => Just(0u16), 1 => Just(4095u16), 1 => 1u16..4095],
    )
        .prop_map(|(tpid, pcp, dei, vid)| (tpid, pcp << 13 | (dei as u16) << 12 | vid))
}

fn offload() -> impl Strategy<Value = OffloadMeta> {
    prop_oneof![
        6 => Just(OffloadMeta::default()),
        1 => (18u16..80, 18u16..80).prop_map(|(cs, off)| OffloadMeta {
            flags: F_NEEDS_CSUM,
            csum_start: cs,
            csum_offset: off % 20,
            ..Default::default()
        }),
        1 => (18u16..80, prop_oneof![3 => 1u16..400, 1 => 1400u16..1500], prop::bool::ANY, prop::sample::select(vec![1u8, 3, 4, 0x81]))
            .prop_map(|(hdr, gso, csum, ty)| OffloadMeta {
                flags: if csum { F_NEEDS_CSUM } else { 0 },
                gso_type: ty,
                hdr_len: hdr,
                gso_size: gso,
                csum_start: if csum { hdr - 4 } else { 0 },
                csum_offset: 16,
            }),
    ]
}

fn frame_spec(nports: usize) -> impl Strategy<Value = common::FrameSpec> {
    (
        0..nports,
        dst_mac(),
        src_mac(),
        prop_oneof![4 => Just(0usize), 4 => Just(1usize), 2 => Just(2usize), 1 => Just(3usize)],
        prop::collection::vec(tag(), 3),
        prop_oneof![
            6 => 60usize..=200,
            2 => 200usize..=400,
            1 => 1500usize..=1530,
            1 => 0usize..14,
            1 => 14usize..18,
            1 => 2000usize..=3000,
        ],
        offload(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(port, dst, src, ntags, tags, len, meta, real_ip)| {
            let mut bytes = common::frame(dst, src, &tags[..ntags], len);
            // Runt lengths cut the frame; a runt of 14-17 bytes often keeps a tag's TPID.
            bytes.truncate(len);
            // Real IPv4 + TCP headers after the tags, so GSO frames are judged per segment
            // (headers as parsed + gso_size) where the tags let the parser through.
            let l3 = 14 + 4 * ntags;
            if real_ip && bytes.len() >= l3 + 40 {
                let total = ((bytes.len() - l3) as u16).to_be_bytes();
                let ip = [
                    0x45, 0, total[0], total[1], 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0,
                    2,
                ];
                bytes[l3..l3 + 20].copy_from_slice(&ip);
                bytes[l3 + 20..l3 + 40].fill(0);
                bytes[l3 + 32] = 5 << 4;
            }
            common::FrameSpec {
                port,
                bytes: Hex(bytes),
                meta,
            }
        })
}

fn batch(nports: usize) -> impl Strategy<Value = Op> {
    let sizes = prop_oneof![
        3 => Just(1usize),
        1 => Just(2usize),
        1 => Just(31usize),
        1 => Just(32usize),
        1 => Just(33usize),
        3 => 1usize..=8,
    ];
    sizes.prop_flat_map(move |n| prop::collection::vec(frame_spec(nports), n).prop_map(Op::Batch))
}

fn fdb_kind() -> impl Strategy<Value = FdbKind> {
    prop_oneof![
        Just(FdbKind::Dynamic),
        Just(FdbKind::Static),
        Just(FdbKind::Permanent)
    ]
}

fn vlan_op(nports: usize) -> impl Strategy<Value = Op> {
    (
        0..nports,
        vid(),
        0u32..4,
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.4),
        prop::bool::ANY,
    )
        .prop_map(|(port, start, span, pvid, untagged, add)| {
            let end = (start + span).min(NVID);
            if add {
                let end = if pvid { start } else { end };
                Op::VlanAdd {
                    port,
                    start,
                    end,
                    pvid,
                    untagged,
                }
            } else {
                Op::VlanDel { port, start, end }
            }
        })
}

/// `vlan_mode` with small lists over the scenario's VIDs; sometimes ill-formed (a trunk with a
/// tag, a mode without one), which both must refuse alike.
fn vlan_mode_op(nports: usize) -> impl Strategy<Value = Op> {
    use qbridge_bridge::{VidList, VlanMode, VlanModeKind as K};
    let list = |lo: u16| {
        prop::collection::vec((lo..=NVID as u16, 0u16..3), 1..3).prop_map(|r| {
            VidList::new(
                r.into_iter()
                    .map(|(a, n)| (a, (a + n).min(NVID as u16)))
                    .collect(),
            )
        })
    };
    (
        0..nports,
        prop_oneof![
            1 => Just(K::Access),
            1 => Just(K::Trunk),
            1 => Just(K::NativeUntagged),
            1 => Just(K::NativeTagged),
            3 => Just(K::Dot1qTunnel),
        ],
        prop_oneof![6 => vid().prop_map(|v| Some(v as u16)), 1 => Just(None)],
        // Mostly short trunk lists: "all 4094" is costly to compile in debug builds.
        prop_oneof![6 => list(1).prop_map(Some), 1 => Just(None)],
        prop::option::of(list(0)),
    )
        .prop_map(|(port, mode, tag, trunks, cvlans)| {
            let tag = if mode == K::Trunk && tag.is_some() {
                None
            } else {
                tag
            };
            let trunks =
                trunks.filter(|_| matches!(mode, K::Trunk | K::NativeUntagged | K::NativeTagged));
            let cvlans = cvlans.filter(|_| mode == K::Dot1qTunnel);
            Op::VlanMode {
                port,
                mode: VlanMode {
                    mode,
                    tag,
                    trunks,
                    cvlans,
                },
            }
        })
}

/// Spanning-tree port states over random VID ranges, Forwarding most often (ports of a
/// bridge with `stp` start Discarding), sometimes over every VID (what a VLAN-unaware bridge's
/// VID 0 follows). Refused alike on a bridge with `stp` off or a port in no bridge.
fn stp_op(nports: usize) -> impl Strategy<Value = Op> {
    use qbridge_bridge::StpState as St;
    (
        0..nports,
        prop_oneof![3 => (vid(), 0u32..4).prop_map(|(s, n)| (s, (s + n).min(NVID))), 1 => Just((1u32, 4094u32))],
        prop_oneof![4 => Just(St::Forwarding), 1 => Just(St::Learning), 1 => Just(St::Discarding)],
    )
        .prop_map(|(port, (start, end), state)| Op::Stp {
            port,
            start,
            end,
            state,
        })
}

/// Private-VLAN roles over the scenario's VIDs (two communities, so that both "same" and
/// "other" communities occur).
fn pvlan_op(nports: usize) -> impl Strategy<Value = Op> {
    use qbridge_bridge::PvlanRole as R;
    (
        0..nports,
        vid(),
        0u32..3,
        prop_oneof![
            1 => Just(None),
            2 => Just(Some(R::Promiscuous)),
            3 => Just(Some(R::Isolated)),
            3 => (1u16..=2).prop_map(|n| Some(R::Community(n))),
        ],
    )
        .prop_map(|(port, start, span, role)| Op::Pvlan {
            port,
            start,
            end: (start + span).min(NVID),
            role,
        })
}

/// Per-VLAN learning limits (small, so that they are reached) with each violation mode.
fn vlan_limit_op(nports: usize) -> impl Strategy<Value = Op> {
    use qbridge_bridge::Violation as V;
    (
        0..nports,
        vid(),
        0u32..2,
        prop_oneof![1 => Just(0u32), 3 => 1u32..=3],
        prop::sample::select(vec![V::Protect, V::Restrict, V::Shutdown]),
    )
        .prop_map(|(port, start, span, limit, violation)| Op::VlanLimit {
            port,
            start,
            end: (start + span).min(NVID),
            limit,
            violation,
        })
}

/// Selective Q-in-Q maps over the scenario's VIDs (overlaps occur).
fn cvid_map_op(nports: usize) -> impl Strategy<Value = Op> {
    (
        0..nports,
        vid(),
        0u32..3,
        prop_oneof![3 => vid().prop_map(|v| Some(v as u16)), 1 => Just(None)],
    )
        .prop_map(|(port, start, span, svid)| Op::CvidMap {
            port,
            start: start as u16,
            end: (start + span).min(NVID) as u16,
            svid,
        })
}

/// 1:1 VLAN maps over the scenario's VIDs (conflicts occur: few VIDs).
fn vlan_map_op(nports: usize) -> impl Strategy<Value = Op> {
    (
        0..nports,
        vid(),
        prop_oneof![3 => vid().prop_map(|v| Some(v as u16)), 1 => Just(None)],
    )
        .prop_map(|(port, wire, inside)| Op::VlanMap {
            port,
            wire: wire as u16,
            inside,
        })
}

/// 2:1 and 2:2 maps over the scenario's VIDs (conflicts with each other and with 1:1 and
/// selective Q-in-Q maps occur: few VIDs).
fn tag_map_op(nports: usize) -> impl Strategy<Value = Op> {
    let v = || vid().prop_map(|v| v as u16);
    (
        0..nports,
        v(),
        v(),
        prop_oneof![
            2 => v().prop_map(|x| Some((x, None))),
            2 => (v(), v()).prop_map(|(x, c)| Some((x, Some(c)))),
            1 => Just(None),
        ],
    )
        .prop_map(|(port, svid, cvid, to)| Op::TagMap {
            port,
            svid,
            cvid,
            to,
        })
}

/// Mirror sessions over the scenario's ports and VIDs: few names (so that deletions hit and
/// duplicates are refused alike), sometimes ill-formed (a destination among the sources, a
/// source twice, RSPAN VID 4095).
fn mirror_op(nports: usize) -> impl Strategy<Value = Op> {
    use qbridge_bridge::{MirrorDirection as D, VidList};
    let add = (
        0..common::MIRROR_NAMES,
        prop::collection::vec(0..nports, 1..=2),
        prop::sample::select(vec![D::Rx, D::Tx, D::Both]),
        prop::option::weighted(
            0.3,
            prop::collection::vec((1u16..=NVID as u16, 0u16..3), 1..3).prop_map(|r| {
                VidList::new(
                    r.into_iter()
                        .map(|(a, n)| (a, (a + n).min(NVID as u16)))
                        .collect(),
                )
            }),
        ),
        0..nports,
        prop_oneof![
            3 => Just(None),
            2 => (1u16..=NVID as u16).prop_map(Some),
            1 => Just(Some(4095u16)),
        ],
    )
        .prop_map(|(name, src, direction, vids, dst, rspan)| Op::MirrorAdd {
            name,
            src,
            direction,
            vids,
            dst,
            rspan,
        });
    prop_oneof![
        4 => add,
        1 => (0..common::MIRROR_NAMES).prop_map(|name| Op::MirrorDel { name }),
    ]
}

fn fdb_add(nports: usize) -> impl Strategy<Value = Op> {
    (
        unicast(),
        0..nports,
        prop_oneof![Just(None), vid().prop_map(Some)],
        fdb_kind(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(mac, port, vlan, kind, sticky, replace)| Op::FdbAdd {
            mac,
            port,
            vlan,
            kind,
            sticky,
            replace,
        })
}

/// `fdb add|del … vlan V inner_vlan C` over the scenario's VIDs (refused on bridges without
/// `learn_inner_vid`, and for VLANs the port does not carry).
fn fdb_inner(nports: usize) -> impl Strategy<Value = Op> {
    (
        unicast(),
        0..nports,
        vid(),
        vid(),
        prop_oneof![3 => fdb_kind().prop_map(Some), 1 => Just(None)],
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(mac, port, vlan, inner, kind, sticky, replace)| Op::FdbInner {
                mac,
                port,
                vlan,
                inner,
                kind,
                sticky,
                replace,
            },
        )
}

/// Time steps: k quarter seconds, sometimes plus 1_000_003 ns, so idle times both hit the
/// `ageing_time` boundary exactly and fall between boundaries.
fn advance() -> impl Strategy<Value = Op> {
    (prop_oneof![3 => 0u64..=8, 1 => 8u64..=100], prop::bool::ANY)
        .prop_map(|(k, odd)| Op::Advance(k * S / 4 + if odd { 1_000_003 } else { 0 }))
}

fn run_op(nbridges: usize, nports: usize, ports: Vec<PortSettings>) -> impl Strategy<Value = Op> {
    let _ = &ports;
    let set_port = (0..nports, port_settings()).prop_map(move |(p, s)| Op::SetPort {
        port: p,
        settings: s,
    });
    prop_oneof![
        30 => batch(nports),
        8 => advance(),
        4 => Just(Op::Age),
        2 => vlan_op(nports),
        1 => vlan_mode_op(nports),
        1 => pvlan_op(nports),
        3 => stp_op(nports),
        1 => vlan_map_op(nports),
        1 => cvid_map_op(nports),
        1 => tag_map_op(nports),
        1 => fdb_inner(nports),
        1 => vlan_limit_op(nports),
        1 => mirror_op(nports),
        1 => fdb_add(nports),
        1 => (
            unicast(),
            0..nports,
            prop_oneof![2 => Just(None), 2 => vid().prop_map(Some)],
            prop::option::weighted(0.25, vid()),
        )
            .prop_map(|(mac, port, vlan, inner)| Op::FdbExtern {
                mac,
                port,
                vlan,
                inner: inner.filter(|_| vlan.is_some()),
            }),
        1 => (unicast(), 0..nports, prop_oneof![Just(None), vid().prop_map(Some)])
            .prop_map(|(mac, port, vlan)| Op::FdbDel { mac, port, vlan }),
        1 => (0..nbridges + nports, prop_oneof![2 => Just(None), 1 => vid().prop_map(Some)], 0u8..3)
            .prop_map(|(dev, vlan, which)| Op::FdbFlush { dev, vlan, which }),
        1 => set_port,
        1 => (0..nbridges, prop_oneof![3 => 1u32..=8, 1 => Just(1u32 << 21)])
            .prop_map(|(bridge, max)| Op::SetMaxEntries { bridge, max }),
    ]
}

fn scenario(small_tables: bool) -> impl Strategy<Value = Scenario> {
    (1usize..=3, 2usize..=8)
        .prop_flat_map(move |(nb, np)| {
            (
                prop::collection::vec(bridge_settings(small_tables), nb),
                prop::collection::vec(
                    (
                        prop_oneof![12 => (0..nb).prop_map(Some), 1 => Just(None)],
                        port_settings(),
                        prop::bool::weighted(0.07),
                    ),
                    np,
                ),
            )
        })
        .prop_flat_map(|(bridges, ports)| {
            let nb = bridges.len();
            let np = ports.len();
            let ports: Vec<PortSpec> = ports
                .into_iter()
                .map(|(bridge, mut settings, down)| {
                    settings.up = !down;
                    PortSpec { bridge, settings }
                })
                .collect();
            let settings: Vec<PortSettings> = ports.iter().map(|p| p.settings.clone()).collect();
            let setup = prop::collection::vec(
                prop_oneof![4 => vlan_op(np), 1 => vlan_mode_op(np), 2 => pvlan_op(np), 2 => vlan_map_op(np), 2 => cvid_map_op(np), 2 => tag_map_op(np), 2 => vlan_limit_op(np), 2 => fdb_add(np), 2 => fdb_inner(np), 2 => mirror_op(np), 4 => stp_op(np)],
                0..=np * 3,
            );
            let run = prop::collection::vec(run_op(nb, np, settings), 1..=40);
            (Just(bridges), Just(ports), setup, run).prop_map(|(bridges, ports, setup, run)| {
                Scenario {
                    bridges,
                    ports,
                    setup,
                    run,
                }
            })
        })
}

proptest! {
    #![proptest_config(config())]

    /// Mostly large tables; `eviction_matches_model` covers small ones.
    #[test]
    fn fast_path_matches_model(sc in scenario(false)) {
        if let Err(e) = Pair::run(&sc) {
            return Err(TestCaseError::fail(e));
        }
    }

    /// The same with small tables (1-8 entries), so fair eviction runs often.
    #[test]
    fn eviction_matches_model(sc in scenario(true)) {
        if let Err(e) = Pair::run(&sc) {
            return Err(TestCaseError::fail(e));
        }
    }

    /// Both kinds of table, each batch spread over 2-4 workers by flow hash: one published
    /// plan, one shared FDB, per-worker counters summed on read.
    #[test]
    fn workers_match_model(
        sc in prop::bool::ANY.prop_flat_map(scenario),
        workers in 2usize..=4,
    ) {
        if let Err(e) = Pair::run_with_workers(&sc, workers) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// Cases of `trace_names_what_the_pipeline_does`: each traces every frame of its scenario (a
/// sandbox copy of the switch per frame), so it takes fewer than the other properties;
/// `TRACE_CASES` overrides.
fn trace_config() -> Config {
    let cases = std::env::var("TRACE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    Config { cases, ..config() }
}

proptest! {
    #![proptest_config(trace_config())]

    /// `trace` names exactly what the pipeline then does with each frame (issue 32): the
    /// frames on each port, the drops and their reasons, and an explanation that agrees.
    #[test]
    fn trace_names_what_the_pipeline_does(sc in scenario(false)) {
        if let Err(e) = Pair::run_traced(&sc) {
            return Err(TestCaseError::fail(e));
        }
    }
}
