//! The program's member choice against the pipeline's own bond queue (decision 74): frames
//! go through a `BondPort` over four in-memory members with a published transmit table, and
//! through the fast-path program (`BPF_PROG_TEST_RUN`, root; skipped otherwise) with a flow
//! to the bond and the same table in `qb_bonds`; every frame the program forwards must leave
//! on the member the bond's queue sent it on, under every hash policy, through zero to two
//! tags in and out. (`crates/fastpath/tests/bond.rs` holds the program to `flow_hash`; this
//! holds it to the queue the pipeline transmits with.)

use qbridge_datapath::bond_port::{BondPort, BondShared};
use qbridge_datapath::Queue;
use qbridge_fastpath::{
    Bond, FastPath, FdbEntry, FdbKey, FlowAction, FlowKey, Hop, Miss, Port, Verdict, ACT_BOND,
    HASH_INNER_L34, HASH_L2, HASH_L2_VLAN, HASH_L34, PORT_ENABLED,
};
use qbridge_io::{IoError, MemPort, Port as _, PortCaps, TxOutcome};
use qbridge_lacp::{HashPolicy, BUCKETS};
use qbridge_packet::{Batch, BufPool, PacketBuf};
use std::sync::{mpsc, Arc, Mutex};

/// A member whose transmitted frames the test reads.
struct Probe(Arc<Mutex<MemPort>>);

impl qbridge_io::Port for Probe {
    fn rx_burst(&mut self, b: &mut Batch, p: &mut BufPool, max: usize) -> Result<usize, IoError> {
        self.0.lock().unwrap().rx_burst(b, p, max)
    }
    fn tx_burst(&mut self, b: &mut Batch, p: &mut BufPool) -> Result<TxOutcome, IoError> {
        self.0.lock().unwrap().tx_burst(b, p)
    }
    fn caps(&self) -> PortCaps {
        self.0.lock().unwrap().caps()
    }
    fn name(&self) -> &str {
        "probe"
    }
}

const MEMBERS: usize = 4;
const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const IN_PORT: u32 = 1;
const BOND_PORT: u32 = 7;
/// The member of position `m` is "interface" `MEMBER0 + m` (a test run redirects nowhere).
const MEMBER0: u32 = 2000;
/// Test runs need an interface of the calling thread's namespace: the loopback.
const LO: u32 = 1;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// An L3 packet and its EtherType: TCP, UDP (some to 4789), ICMP, fragments, IPv6 with and
/// without extension headers, ARP; lengths sometimes wrong.
fn l3(r: &mut Rng) -> (u16, Vec<u8>) {
    let l4 = |r: &mut Rng, proto: u8| -> Vec<u8> {
        let n = r.below(40) as usize;
        match proto {
            6 => {
                let mut t = r.bytes(20);
                t[12] = if r.below(8) == 0 { 0x30 } else { 0x50 };
                t.extend(r.bytes(n));
                t
            }
            17 => {
                let mut u = r.bytes(8);
                if r.below(4) == 0 {
                    u[2..4].copy_from_slice(&4789u16.to_be_bytes());
                }
                let len = 8 + n as u16 + if r.below(8) == 0 { 9 } else { 0 };
                u[4..6].copy_from_slice(&len.to_be_bytes());
                u.extend(r.bytes(n));
                u
            }
            _ => r.bytes(n),
        }
    };
    match r.below(8) {
        0..=3 => {
            let proto = [6u8, 17, 1, 4, 47][r.below(5) as usize];
            let mut ip = r.bytes(20);
            ip[0] = 0x45;
            ip[9] = proto;
            let frag: u16 = match r.below(6) {
                0 => 0x2000,
                1 => 0x0020,
                _ => 0x4000,
            };
            ip[6..8].copy_from_slice(&frag.to_be_bytes());
            ip.extend(l4(r, proto));
            let total = ip.len() as u16 + if r.below(10) == 0 { 6 } else { 0 };
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            (0x0800, ip)
        }
        4..=6 => {
            let nh = [6u8, 17, 58, 59, 0, 44][r.below(6) as usize];
            let mut ip = r.bytes(40);
            ip[0] = 0x60;
            ip[6] = nh;
            let body = l4(r, nh);
            ip[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
            ip.extend(body);
            (0x86dd, ip)
        }
        _ => (0x0806, r.bytes(28)),
    }
}

fn tags(r: &mut Rng) -> Vec<(u16, u16)> {
    (0..r.below(3))
        .map(|_| {
            let tpid = [0x8100, 0x88a8][r.below(2) as usize];
            (tpid, r.below(0x10000) as u16)
        })
        .collect()
}

fn frame(src: &[u8], tags: &[(u16, u16)], ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = DST.to_vec();
    f.extend_from_slice(src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    while f.len() < 60 + 4 * tags.len() {
        f.push(0);
    }
    f
}

#[test]
fn the_program_picks_the_member_the_bond_queue_sends_on() {
    if !FastPath::built() {
        eprintln!("skipped: built without clang");
        return;
    }
    let mut fp = match FastPath::load() {
        Ok(fp) => fp,
        Err(e) => {
            if std::env::var_os("QBRIDGE_REQUIRE_NETNS").is_some_and(|v| v == "1") {
                panic!("cannot load the program: {e}");
            }
            eprintln!("skipped: cannot load the program (not root?): {e}");
            return;
        }
    };
    fp.set_port(
        LO,
        Port {
            index: IN_PORT,
            flags: PORT_ENABLED,
            ..Port::default()
        },
    )
    .unwrap();
    let generation = fp.bump_generation().unwrap();
    fp.set_fdb(
        FdbKey {
            fid: 10,
            mac: DST,
            ..FdbKey::default()
        },
        FdbEntry {
            port: BOND_PORT,
            version: 7,
            last_seen_ns: 0,
        },
    )
    .unwrap();
    // The pipeline's bond: four members; bucket b on member (7 b + 3) mod 4.
    let members: Vec<Arc<Mutex<MemPort>>> = (0..MEMBERS)
        .map(|i| Arc::new(Mutex::new(MemPort::new(&format!("m{i}")))))
        .collect();
    let shared = Arc::new(BondShared::new("bo").unwrap());
    let (ctl, _ctl_rx) = mpsc::channel();
    let queues: Vec<Queue> = members
        .iter()
        .map(|m| Box::new(Probe(m.clone())) as Queue)
        .collect();
    let mut bond = BondPort::new("bo", 0, queues, shared.clone(), ctl).unwrap();
    let member_of = |b: usize| (7 * b + 3) % MEMBERS;
    let table: [Option<usize>; BUCKETS] = std::array::from_fn(|b| Some(member_of(b)));
    let mut pool = BufPool::new(64);
    let mut r = Rng(0x1234_5678_9abc_def1);
    let (mut hits, mut up) = (0u32, 0u32);
    for (policy, code) in [
        (HashPolicy::Layer2, HASH_L2),
        (HashPolicy::Layer2Vlan, HASH_L2_VLAN),
        (HashPolicy::Layer34, HASH_L34),
        (HashPolicy::InnerLayer34, HASH_INNER_L34),
    ] {
        shared.publish(policy, &table);
        let mut map = Bond {
            policy: code,
            ..Bond::default()
        };
        for b in 0..BUCKETS {
            map.member_ifindex[b] = MEMBER0 + member_of(b) as u32;
            map.member_pos[b] = member_of(b) as u8;
        }
        fp.set_bond(BOND_PORT, &map).unwrap();
        for _ in 0..800 {
            let mut src = r.bytes(6);
            src[0] = src[0] & 0xfe | 0x02;
            let (tin, tout) = (tags(&mut r), tags(&mut r));
            let (et, l3) = l3(&mut r);
            let input = frame(&src, &tin, et, &l3);
            let mut out = frame(&src, &tout, et, &l3);
            out.truncate(input.len() - 4 * tin.len() + 4 * tout.len());
            // The flow the daemon would install: these tags in, those out, to the bond.
            let mut key = FlowKey {
                in_port: IN_PORT,
                dst: DST,
                ntags: tin.len() as u8,
                ethertype_be: et.to_be(),
                ..FlowKey::default()
            };
            for (i, (tpid, tci)) in tin.iter().enumerate() {
                key.tpid_be[i] = tpid.to_be();
                key.tci_be[i] = tci.to_be();
            }
            let mut act = FlowAction {
                generation,
                min_len: 14,
                max_len: u16::MAX,
                push_n: tout.len() as u8,
                n_hops: 1,
                flags: ACT_BOND,
                ..FlowAction::default()
            };
            act.hops[0] = Hop {
                in_port: IN_PORT,
                out_port: BOND_PORT,
                dst_version: 7,
                fid: 10,
                vlan_slot: 10,
                in_tags: tin.len() as u8,
                out_tags: tout.len() as u8,
                ..Hop::default()
            };
            for (i, (tpid, tci)) in tout.iter().enumerate() {
                act.push_tpid_be[i] = tpid.to_be();
                act.push_tci_be[i] = tci.to_be();
            }
            fp.insert_flow(key, act).unwrap();
            let Ok(run) = fp.test_run(&input, LO, None) else {
                continue; // shorter than its network header: the test run refuses it
            };
            // The pipeline's queue sends the frame as it leaves the bridge.
            let mut batch = Batch::with_capacity(1);
            batch.push(PacketBuf::from_frame(&out));
            let sent = bond.tx_burst(&mut batch, &mut pool).unwrap();
            assert_eq!(sent.sent, 1);
            let on: Vec<usize> = (0..MEMBERS)
                .filter(|&m| !members[m].lock().unwrap().take_sent().is_empty())
                .collect();
            assert_eq!(on.len(), 1);
            match run.verdict {
                Verdict::Hit { ifindex } => {
                    assert_eq!(
                        (ifindex - MEMBER0) as usize,
                        on[0],
                        "{policy:?}: {out:02x?}"
                    );
                    hits += 1;
                }
                Verdict::Miss(Miss::Bond) => up += 1,
                v => panic!("{policy:?}: {v:?} for {input:02x?}"),
            }
        }
    }
    eprintln!("{hits} frames on the queue's member, {up} left to the pipeline");
    assert!(hits > 2500, "{hits}");
}
