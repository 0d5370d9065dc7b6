//! The transmit hash and table together: spreading of Q-in-Q flows, flow stickiness, minimal
//! disruption on failover, the policies' differences.

use qbridge_lacp::{flow_hash, HashPolicy, MemberId, TxTable};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// An Ethernet frame with `tags` ((TPID, VID), outermost first) carrying IPv4 + TCP or UDP.
fn frame(
    tags: &[(u16, u16)],
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    sport: u16,
    dport: u16,
    payload: usize,
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa];
    for &(tpid, vid) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let l4_len = if proto == 6 { 20 } else { 8 } + payload;
    let total = (20 + l4_len) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    }
    f.extend(std::iter::repeat_n(0xa5, payload));
    f
}

const QINQ: [(u16, u16); 2] = [(0x88a8, 100), (0x8100, 10)];

fn random_flow(rng: &mut Rng, tags: &[(u16, u16)]) -> Vec<u8> {
    let r = rng.next();
    let s = rng.next();
    frame(
        tags,
        [10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8],
        [10, (s >> 8) as u8, (s >> 16) as u8, (s >> 24) as u8],
        if r & 1 == 0 { 6 } else { 17 },
        (r >> 32) as u16,
        (s >> 32) as u16,
        (s >> 48) as usize % 64,
    )
}

fn two_members() -> TxTable {
    let mut t = TxTable::default();
    t.set_members(&[MemberId(1), MemberId(2)]);
    t
}

#[test]
fn flows_of_one_cvlan_in_one_svlan_spread_over_two_members() {
    for policy in [HashPolicy::Layer34, HashPolicy::InnerLayer34] {
        for tpids in [
            [(0x88a8, 100), (0x8100, 10)],
            [(0x9100, 100), (0x8100, 10)],
            [(0x8100, 100), (0x8100, 10)],
        ] {
            let t = two_members();
            let mut rng = Rng(0x1234_5678_9abc_def1);
            let on_1 = (0..1000)
                .filter(|_| {
                    t.member_for(flow_hash(&random_flow(&mut rng, &tpids), policy))
                        == Some(MemberId(1))
                })
                .count();
            assert!(
                (350..=650).contains(&on_1),
                "{policy:?} {tpids:x?}: member 1 got {on_1} of 1000"
            );
        }
    }
}

#[test]
fn layer2_keeps_one_mac_pair_on_one_member_and_layer2_vlan_splits_by_outer_vid() {
    let mut rng = Rng(99);
    let a = random_flow(&mut rng, &QINQ);
    let b = random_flow(&mut rng, &QINQ);
    assert_eq!(
        flow_hash(&a, HashPolicy::Layer2),
        flow_hash(&b, HashPolicy::Layer2)
    );
    assert_ne!(
        flow_hash(&a, HashPolicy::Layer34),
        flow_hash(&b, HashPolicy::Layer34)
    );
    let other_svlan = {
        let mut f = a.clone();
        f[15] = 101;
        f
    };
    let other_cvlan = {
        let mut f = a.clone();
        f[19] = 11;
        f
    };
    assert_ne!(
        flow_hash(&a, HashPolicy::Layer2Vlan),
        flow_hash(&other_svlan, HashPolicy::Layer2Vlan)
    );
    assert_eq!(
        flow_hash(&a, HashPolicy::Layer2Vlan),
        flow_hash(&other_cvlan, HashPolicy::Layer2Vlan)
    );
    assert_eq!(
        flow_hash(&a, HashPolicy::Layer2),
        flow_hash(&other_svlan, HashPolicy::Layer2)
    );
}

#[test]
fn one_flow_always_one_member() {
    let t = two_members();
    let mut rng = Rng(7);
    for _ in 0..100 {
        let r = rng.next();
        let member = |payload: usize, tags: &[(u16, u16)]| {
            let f = frame(
                tags,
                [10, 0, 0, r as u8],
                [10, 0, 1, (r >> 8) as u8],
                6,
                (r >> 16) as u16,
                443,
                payload,
            );
            t.member_for(flow_hash(&f, HashPolicy::Layer34))
        };
        // Same five-tuple, any payload, any tag stack: the same member.
        let m = member(0, &QINQ);
        for payload in [1, 100, 1400] {
            assert_eq!(member(payload, &QINQ), m);
            assert_eq!(member(payload, &[]), m);
            assert_eq!(member(payload, &[(0x8100, 5)]), m);
        }
    }
}

#[test]
fn failover_moves_only_the_failed_members_flows() {
    let mut t = TxTable::default();
    t.set_members(&[MemberId(1), MemberId(2), MemberId(3)]);
    let mut rng = Rng(31337);
    let flows: Vec<u32> = (0..1000)
        .map(|_| flow_hash(&random_flow(&mut rng, &QINQ), HashPolicy::Layer34))
        .collect();
    let before: Vec<_> = flows.iter().map(|&h| t.member_for(h)).collect();
    t.set_members(&[MemberId(1), MemberId(3)]);
    let mut moved = 0;
    for (&h, &b) in flows.iter().zip(&before) {
        let a = t.member_for(h);
        if b == Some(MemberId(2)) {
            moved += 1;
            assert!(a == Some(MemberId(1)) || a == Some(MemberId(3)));
        } else {
            assert_eq!(a, b, "a flow of a surviving member moved");
        }
    }
    assert!(
        (250..=420).contains(&moved),
        "{moved} flows were on member 2"
    );
}

#[test]
fn fragments_hash_on_addresses_and_truncation_is_total() {
    let f = frame(&QINQ, [10, 0, 0, 1], [10, 0, 0, 2], 17, 1000, 2000, 100);
    let mut frag = f.clone();
    // More fragments, offset 0: the ports are left out.
    frag[8 + 14 + 6] = 0x20;
    let mut frag2 = frag.clone();
    frag2[8 + 14 + 20] = 0x99;
    assert_eq!(
        flow_hash(&frag, HashPolicy::Layer34),
        flow_hash(&frag2, HashPolicy::Layer34)
    );
    for policy in [
        HashPolicy::Layer2,
        HashPolicy::Layer2Vlan,
        HashPolicy::Layer34,
        HashPolicy::InnerLayer34,
    ] {
        for len in 0..f.len() {
            let _ = flow_hash(&f[..len], policy);
        }
    }
}

#[test]
fn inner_layer34_reads_through_vxlan() {
    let mut rng = Rng(5);
    let inner_a = random_flow(&mut rng, &[(0x8100, 10)]);
    let inner_b = random_flow(&mut rng, &[(0x8100, 10)]);
    let vxlan = |inner: &[u8]| {
        let mut f = frame(
            &[(0x88a8, 7)],
            [192, 0, 2, 1],
            [192, 0, 2, 2],
            17,
            5555,
            4789,
            8 + inner.len(),
        );
        let start = f.len() - 8 - inner.len();
        f[start] = 0x08;
        f[start + 8..].copy_from_slice(inner);
        f
    };
    let (va, vb) = (vxlan(&inner_a), vxlan(&inner_b));
    assert_eq!(
        flow_hash(&va, HashPolicy::Layer34),
        flow_hash(&vb, HashPolicy::Layer34),
        "outer tuple equal"
    );
    assert_ne!(
        flow_hash(&va, HashPolicy::InnerLayer34),
        flow_hash(&vb, HashPolicy::InnerLayer34)
    );
    assert_eq!(
        flow_hash(&va, HashPolicy::InnerLayer34),
        flow_hash(&inner_a, HashPolicy::Layer34)
    );
}

#[test]
fn policy_words_round_trip() {
    for p in [
        HashPolicy::Layer2,
        HashPolicy::Layer2Vlan,
        HashPolicy::Layer34,
        HashPolicy::InnerLayer34,
    ] {
        assert_eq!(HashPolicy::from_word(p.word()), Some(p));
    }
    assert_eq!(HashPolicy::from_word("encap3+4"), None);
}

#[test]
fn tag_depth_up_to_the_pipeline_limit_then_macs() {
    let deep: Vec<(u16, u16)> = (0..qbridge_wire::MAX_TAGS as u16)
        .map(|i| (0x8100, 10 + i))
        .collect();
    let t = two_members();
    let mut rng = Rng(77);
    let on_1 = (0..1000)
        .filter(|_| {
            let f = random_flow(&mut rng, &deep);
            t.member_for(flow_hash(&f, HashPolicy::Layer34)) == Some(MemberId(1))
        })
        .count();
    assert!((350..=650).contains(&on_1), "{} tags: {on_1}", deep.len());
    // One tag more than the limit: the defined outcome is the layer2 hash (MACs).
    let mut too_deep = deep.clone();
    too_deep.push((0x8100, 99));
    let a = random_flow(&mut rng, &too_deep);
    let b = random_flow(&mut rng, &too_deep);
    assert_eq!(
        flow_hash(&a, HashPolicy::Layer34),
        flow_hash(&b, HashPolicy::Layer34)
    );
    assert_eq!(
        flow_hash(&a, HashPolicy::Layer34),
        flow_hash(&a, HashPolicy::Layer2)
    );
}
