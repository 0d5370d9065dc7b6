//! Control never stalls forwarding (issue 6 §7): h1 pings h2 every 10 ms through a daemon
//! whose ports are not promiscuous (learning and flooding off, static entries for the hosts)
//! while the control socket (1) adds and then removes 20 000 static FDB entries, which change
//! the ports' receive filters (in place; promiscuous past 4096 addresses, and back), and (2)
//! attaches 1000 ports (500 patch links) to the bridge.
//! Echoes lost in each phase are counted against a 1 % allowance; the figures (loss, how long
//! the commands took) are printed for the record.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use support::{assert_ping, ping, skip_reason, Ctl, Host, Star};

const ENTRIES: usize = 20_000;
const PATCH_LINKS: usize = 500;
const CHUNK: usize = 1000;

/// Runs `work` on another thread while h1 pings h2 (10 ms apart) until `work` is done;
/// returns (echoes sent, echoes answered, seconds `work` took).
fn ping_during(h1: &Host, h2: &Host, work: impl FnOnce() + Send + 'static) -> (u32, u32, f64) {
    let done = Arc::new(AtomicBool::new(false));
    let t = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            work();
            done.store(true, Ordering::Relaxed);
            t0.elapsed().as_secs_f64()
        })
    };
    let (mut sent, mut got) = (0, 0);
    // Rounds of 100 echoes (1 s) until the work is done; at least one round.
    loop {
        let r = ping(h1, &h2.ip, 100);
        sent += r.transmitted;
        got += r.received;
        if done.load(Ordering::Relaxed) || sent > 60_000 {
            break;
        }
    }
    let secs = t.join().expect("work thread");
    (sent, got, secs)
}

fn batch(ctl: &Ctl, dir: &std::path::Path, text: &str) {
    let f = dir.join("chunk.batch");
    std::fs::write(&f, text).unwrap();
    ctl.cmd(&["-batch", f.to_str().unwrap()]).expect("batch");
}

fn mac(i: usize) -> String {
    format!(
        "02:5a:{:02x}:{:02x}:{:02x}:01",
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

#[test]
fn fdb_changes_and_port_attach_do_not_stall_forwarding() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = support::serial();
    let mut star = Star::new("stall", &["10.94.0.1", "10.94.0.2"]).expect("lab");
    let (h1, h2) = (star.h(1).clone(), star.h(2).clone());
    let cfg = format!(
        "link add br0 type bridge vlan_filtering 1 vlan_default_pvid 0\n{}\
         link set dev p1 master br0 learning off flood off\n\
         link set dev p2 master br0 learning off flood off\n\
         vlan add vid 10 dev p1 pvid untagged\nvlan add vid 10 dev p2 pvid untagged\n\
         fdb add {} dev p1 vlan 10 static\nfdb add {} dev p2 vlan 10 static\n",
        star.port_lines(),
        h1.mac,
        h2.mac
    );
    let ctl = star.daemon(&cfg).expect("daemon");
    let promisc =
        ctl.json(&["link", "show", "dev", "p1"]).unwrap()[0]["runtime"]["promisc"].clone();
    assert_eq!(promisc, false, "p1 should use a unicast filter");
    assert_ping(&h1, &h2, 3);
    let dir = std::env::temp_dir().join(format!("qbridge-stall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Phase 1: 20 000 static entries on p2 (each one a unicast address p1 must now accept),
    // added and then removed in batches of 1000. Past 4096 addresses p1 goes promiscuous (a
    // NIC's unicast filter overflow); with the entries gone it takes its unicast filter back.
    let promisc = |ctl: &Ctl| {
        ctl.json(&["link", "show", "dev", "p1"]).unwrap()[0]["runtime"]["promisc"].clone()
    };
    for phase in ["add", "del"] {
        let (c, d) = (ctl.clone(), dir.clone());
        let (sent, got, secs) = ping_during(&h1, &h2, move || {
            for start in (0..ENTRIES).step_by(CHUNK) {
                let text: String = (start..start + CHUNK)
                    .map(|i| match phase {
                        "add" => format!("fdb add {} dev p2 vlan 10 static\n", mac(i)),
                        _ => format!("fdb del {} dev p2 vlan 10\n", mac(i)),
                    })
                    .collect();
                batch(&c, &d, &text);
            }
        });
        println!("20 000 static entries, {phase}: {secs:.2} s; {got}/{sent} echoes answered");
        assert!(
            u64::from(sent - got) * 100 <= u64::from(sent),
            "lost {} of {sent} echoes while FDB entries changed ({phase}, {secs:.2} s)\n{}",
            sent - got,
            ctl.stats_text()
        );
        assert_eq!(promisc(&ctl), phase == "add", "p1 after {phase}");
    }
    // The ports' own interface addresses are local entries (as on Linux); besides them only
    // the hosts' entries remain.
    let fdb = ctl.json(&["fdb", "show"]).unwrap();
    let user: Vec<_> = fdb
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] != "permanent")
        .collect();
    assert_eq!(user.len(), 2, "only the hosts' entries remain: {user:?}");

    // Phase 2: 1000 ports attached (500 patch links, one end of each on br0, not learning or
    // flooding so p1 and p2 keep their unicast filters).
    let (c, d) = (ctl.clone(), dir.clone());
    let (sent, got, secs) = ping_during(&h1, &h2, move || {
        for start in (0..PATCH_LINKS).step_by(50) {
            let text: String = (start..start + 50)
                .map(|i| {
                    format!(
                        "link add qa{i} type patch peer qb{i}\n\
                         link set dev qa{i} master br0 learning off flood off\n\
                         vlan add vid 10 dev qa{i}\n"
                    )
                })
                .collect();
            batch(&c, &d, &text);
        }
    });
    println!(
        "{} ports attached in {secs:.2} s; {got}/{sent} echoes answered",
        2 * PATCH_LINKS
    );
    assert!(
        u64::from(sent - got) * 100 <= u64::from(sent),
        "lost {} of {sent} echoes while ports were attached ({secs:.2} s)\n{}",
        sent - got,
        ctl.stats_text()
    );
    let links = ctl.json(&["link", "show"]).unwrap();
    assert_eq!(
        links.as_array().unwrap().len(),
        1 + 2 + 2 * PATCH_LINKS,
        "every port is there"
    );
    assert_ping(&h1, &h2, 3);
    let _ = std::fs::remove_dir_all(&dir);
}
