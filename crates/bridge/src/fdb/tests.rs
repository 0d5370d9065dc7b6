//! Unit tests of the FDB: the table, learning, limits, fair eviction, ageing, tombstones, the
//! pair-FID allocator and readers racing the writer.

use super::inner::EPOCH_SLOTS;
use super::*;

fn k(n: u64) -> u64 {
    fdb_key(MacAddr::from_u64(0x0200_0000_0000 | n), 1)
}

fn learn(f: &Fdb, key: u64, port: u16, now: u64, bl: u32, pl: u32) -> Learned {
    let mut c = TableCache::default();
    f.learn(c.get(f), key, port, now, bl, pl)
}

#[test]
fn inner_fids_number_pairs_until_full() {
    let f = InnerFids::new();
    let first = f.fid(100, 10);
    assert_eq!(first, FIRST_INNER_FID);
    assert_eq!(f.fid(100, 10), first, "a pair keeps its FID");
    assert_eq!(f.pair(first), Some((100, 10)));
    let mut n = 1;
    'fill: for s in 1..4095u16 {
        for c in 1..4095u16 {
            if n == INNER_FIDS {
                break 'fill;
            }
            if (s, c) != (100, 10) {
                assert!(f.fid(s, c) >= FIRST_INNER_FID);
                n += 1;
            }
        }
    }
    // Full: a new pair learns in its VLAN; numbered pairs keep their FIDs.
    assert_eq!(f.fid(4000, 4000), 4000);
    assert!(f.full.load(Relaxed));
    assert_eq!(f.fid(100, 10), first);
    assert_eq!(f.pair(4000), None);
}

/// Reclaiming pair FIDs (decision 35): a pair without entries is unmapped at once; its
/// FID is free again only when no worker is in a run that began before, and never while an
/// entry uses it.
#[test]
fn inner_fids_reclaim_after_workers_move_on() {
    let f = Fdb::new(1000);
    let inner = f.inner_fids();
    let f1 = inner.fid(1, 10);
    // Worker 1 is in a run (it may hold f1 for a frame of (1, 10)).
    inner.enter(1);
    assert_eq!(f.reclaim_inner(), (1, 0), "unmapped, not freed");
    assert_eq!(inner.pair(f1), Some((1, 10)), "still named while retired");
    let f2 = inner.fid(1, 10);
    assert_ne!(f2, f1, "numbered anew, not with the retired FID");
    assert_eq!(inner.in_use(), (1, 1));
    // An entry under the new FID keeps it; worker 1 still holds f1 back.
    let mut c = TableCache::default();
    let key = fdb_key(MacAddr::from_u64(0x0200_0000_0001), f2);
    assert_eq!(f.learn(c.get(&f), key, 1, 5, 0, 0), Learned::New);
    assert_eq!(f.reclaim_inner(), (0, 0));
    // A run that began after the reclaim does not hold f1 back.
    inner.enter(2);
    inner.exit(1);
    assert_eq!(f.reclaim_inner(), (0, 1));
    inner.exit(2);
    assert_eq!(inner.pair(f1), None);
    assert_eq!(inner.fid(2, 20), f1, "the freed FID is taken first");
    assert_eq!(inner.in_use(), (2, 0));
    // No run in progress: unmapped and freed at once.
    f.remove(key);
    assert_eq!(f.reclaim_inner(), (2, 2));
    assert_eq!(inner.in_use(), (0, 0));
    // A worker beyond the tracked slots: nothing is ever freed again.
    inner.fid(3, 30);
    inner.enter(EPOCH_SLOTS);
    assert_eq!(f.reclaim_inner(), (1, 0));
}

#[test]
fn learn_move_sticky_static() {
    let f = Fdb::new(1000);
    assert_eq!(learn(&f, k(1), 1, 10, 0, 0), Learned::New);
    assert_eq!(learn(&f, k(1), 1, 20, 0, 0), Learned::Kept);
    assert_eq!(f.get(k(1)).unwrap().seen_ns, 20);
    assert_eq!(learn(&f, k(1), 2, 30, 0, 0), Learned::Moved);
    assert_eq!(
        (f.port_learned(1), f.port_learned(2), f.learned()),
        (0, 1, 1)
    );
    f.add_user(k(2), 3, F_STICKY | F_STATIC, 0, false).unwrap();
    assert_eq!(learn(&f, k(2), 4, 1, 0, 0), Learned::Kept);
    assert_eq!(f.get(k(2)).unwrap().port, 3);
    f.add_user(k(3), 3, F_STATIC, 0, false).unwrap();
    assert_eq!(learn(&f, k(3), 4, 1, 0, 0), Learned::Moved);
    assert_eq!(f.get(k(3)).unwrap().kind(), FdbKind::Static);
    assert_eq!(
        f.add_user(k(3), 3, F_STATIC, 0, false),
        Err(AddError::Exists(4))
    );
    assert_eq!(f.learned(), 1);
}

#[test]
fn limits_refuse() {
    let f = Fdb::new(1000);
    assert_eq!(learn(&f, k(1), 1, 0, 2, 0), Learned::New);
    assert_eq!(learn(&f, k(2), 2, 0, 2, 0), Learned::New);
    assert_eq!(learn(&f, k(3), 2, 0, 2, 0), Learned::Refused);
    assert_eq!(learn(&f, k(3), 1, 0, 0, 1), Learned::Refused);
    assert_eq!(learn(&f, k(3), 3, 0, 0, 1), Learned::New);
}

#[test]
fn fair_eviction_takes_oldest_of_largest_port() {
    let f = Fdb::new(6);
    learn(&f, k(100), 1, 0, 0, 0);
    for n in 0..5 {
        learn(&f, k(n), 2, n, 0, 0);
    }
    assert_eq!(
        learn(&f, k(50), 3, 9, 0, 0),
        Learned::NewEvicting { port: 2 }
    );
    assert!(f.get(k(0)).is_none());
    assert!(f.get(k(100)).is_some() && f.get(k(1)).is_some());
    assert_eq!(f.len(), 6);
}

#[test]
fn delete_keeps_all_other_keys_reachable() {
    let f = Fdb::new(1 << 20);
    for n in 0..5000 {
        learn(&f, k(n), (n % 7) as u16, n, 0, 0);
    }
    for n in (0..5000).step_by(3) {
        assert!(f.remove(k(n)).is_some());
    }
    for n in 0..5000 {
        assert_eq!(f.get(k(n)).is_some(), n % 3 != 0, "key {n}");
    }
    assert_eq!(f.age(10_000, 4000), 3333);
    learn(&f, k(1), 1, 100, 0, 0);
    assert_eq!(f.age(199, 100), 0, "idle 99 < 100 kept");
    assert_eq!(
        f.age(200, 100),
        1,
        "idle exactly ageing_time expires (Linux)"
    );
    learn(&f, k(2), 1, 5, 0, 0);
    assert_eq!(
        f.age(5, 0),
        1,
        "ageing_time 0: every dynamic entry is expired"
    );
    assert_eq!((f.len(), f.learned()), (0, 0));
}

#[test]
fn tombstones_are_reused_and_rebuilt_away() {
    let f = Fdb::new(1 << 20);
    for round in 0..20u64 {
        for n in 0..1000 {
            learn(&f, k(n), 1, round, 0, 0);
        }
        assert_eq!(f.remove_where(|_| true), 1000);
    }
    let w = f.lock();
    assert_eq!((w.len, w.learned), (0, 0));
    assert!(w.table.slots.len() <= 4096, "{}", w.table.slots.len());
}

#[test]
fn lowering_max_entries_evicts_fairly() {
    let f = Fdb::new(100);
    for n in 0..10 {
        learn(&f, k(n), 1, n, 0, 0);
    }
    for n in 10..13 {
        learn(&f, k(n), 2, n, 0, 0);
    }
    f.add_user(k(99), 3, F_STATIC, 0, false).unwrap();
    // 14 entries into 8: port 1 holds most until it is down to 4 (port 2 has 3).
    assert_eq!(f.set_max_entries(8), vec![1; 6]);
    assert_eq!(f.len(), 8);
    assert!(f.get(k(5)).is_none() && f.get(k(6)).is_some());
    assert_eq!(f.set_max_entries(0).len(), 7, "user entries stay");
    assert_eq!(f.len(), 1);
}

#[test]
fn readers_see_whole_entries_while_a_writer_works() {
    use std::sync::atomic::AtomicBool;
    let f = Arc::new(Fdb::new(1 << 20));
    for n in 0..64 {
        learn(&f, k(n), 7, 1, 0, 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut cache = TableCache::default();
            let mut seen = 0u64;
            while !stop.load(Relaxed) {
                let t = cache.get(&f);
                for n in 0..64 {
                    // Moved back and forth between ports 7 and 8 only, never torn or lost.
                    let (_, s) = t.find(k(n)).expect("key stays reachable");
                    assert!(s.port == 7 || s.port == 8, "port {}", s.port);
                    assert_eq!(s.key, k(n));
                    seen += 1;
                }
            }
            seen
        })
    };
    for round in 0..2000u64 {
        let port = 7 + (round % 2) as u16;
        for n in 0..64 {
            learn(&f, k(n), port, round, 0, 0);
        }
        // Growth and churn on other keys: rebuilds publish new tables.
        for n in 0..50 {
            learn(&f, k(1000 + round * 50 + n), 9, round, 0, 0);
        }
        f.remove_where(|s| s.port == 9);
    }
    stop.store(true, Relaxed);
    assert!(reader.join().unwrap() > 0);
}

/// Key 0 (MAC 00:00:00:00:00:00 in FID 0, e.g. a bridge without VLAN filtering) is the empty
/// slot's marker: it is never found (an empty slot once read as an entry on port 0, so a frame
/// to that MAC went to port 0 alone and `fdb del` of it panicked the control thread) and never
/// stored.
#[test]
fn the_zero_key_is_never_found_nor_stored() {
    let f = Fdb::new(1024);
    let z = fdb_key(MacAddr::from_u64(0), 0);
    assert_eq!(z, 0);
    assert!(f.get(z).is_none());
    assert!(f.remove(z).is_none());
    assert_eq!(f.add_local(z, 1, 5), (false, None));
    assert!(matches!(learn(&f, z, 2, 5, 0, 0), Learned::Refused));
    assert!(f.get(z).is_none());
    assert_eq!(f.len(), 0);
    assert!(f.entries().is_empty());
    // Other keys of the zero MAC (another FID) are ordinary.
    let z1 = fdb_key(MacAddr::from_u64(0), 1);
    assert!(matches!(learn(&f, z1, 2, 5, 0, 0), Learned::New));
    assert_eq!(f.get(z1).map(|s| s.port), Some(2));
}

/// A port detached from the bridge: its entries go, and a frame of it that a worker still
/// passes to learning (its plan from before the detach) learns nothing, neither a new entry
/// nor a move of another port's entry, until the port is attached again (a learned entry of
/// a deleted port made `fdb show` panic the control thread).
#[test]
fn a_closed_port_learns_nothing_until_it_is_opened() {
    let f = Fdb::new(64);
    assert_eq!(learn(&f, k(1), 3, 1, 0, 0), Learned::New);
    assert_eq!(learn(&f, k(2), 4, 1, 0, 0), Learned::New);
    assert_eq!(f.close_port(3), 1);
    assert!(f.get(k(1)).is_none());
    assert_eq!(learn(&f, k(1), 3, 2, 0, 0), Learned::Refused);
    assert_eq!(
        learn(&f, k(2), 3, 2, 0, 0),
        Learned::Refused,
        "no move onto it"
    );
    assert_eq!(f.get(k(2)).map(|s| s.port), Some(4));
    assert_eq!(
        f.learn_mab(k(5), 3, 2, 0, 0, 0),
        Learned::Refused,
        "no locked entry either"
    );
    assert_eq!(f.len(), 1);
    f.open_port(3);
    assert_eq!(learn(&f, k(1), 3, 3, 0, 0), Learned::New);
    assert_eq!(f.get(k(1)).map(|s| s.port), Some(3));
}
