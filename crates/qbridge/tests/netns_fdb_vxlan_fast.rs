//! A VXLAN port's static remotes and the eBPF fast path's flows (decision 89; root only):
//! moving a MAC's remote, by one command or inside an EVPN route batch, removes the flows to
//! that MAC instead of bumping the generation.
//!
//! ```text
//!  ha (10.89.1.1) ─ qa ┐                                   ┌ kb1 ─ hb (10.89.1.2)
//!     qbridge --fast-path on: br0: p1 (qa), vx0             kernel bridge kbr: kb1, vx0
//!       vx0: type vxlan id 100 local 192.0.2.1 dev ul         vx0: kernel vxlan id 100
//!       flood list 192.0.2.2, 192.0.2.3; HB dst 192.0.2.2
//!                  └── ul 192.0.2.1 ═══ veth (MTU 1550) ═══ ul 192.0.2.2 ──┘
//! ```
//!
//! ha pings hb every 10 ms through the program (encapsulated to 192.0.2.2). Then hb's remote
//! moves to 192.0.2.3 (in the flood list already, so no decapsulation tunnel changes: the
//! request bumps nothing), once by `fdb replace` and, after it came back, once inside a batch
//! of 100 other routes: from each answer on the kernel VTEP at 192.0.2.2 receives nothing
//! more, the flow misses as `no_flow` (it was removed) and not one miss is `stale`.

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::Lab;
use vxlan_rig::{rx_packets, u};

#[test]
fn a_moved_static_remote_removes_its_flows_not_the_others() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("fdbvx");
    let a = lab.netns("fvxa").unwrap();
    let b = lab.netns("fvxb").unwrap();
    vxlan_rig::underlay(&mut lab, &a, &b, "1550");
    let ha = lab.host("ha", "10.89.1.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.89.1.2/24", &b, "kb1").unwrap();
    if let Err(e) = support::kernel_vtep(&b, "192.0.2.2", "192.0.2.1", "kb1", None) {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    // No ARP while the remote is away (a flood would reach 192.0.2.2).
    support::neighbour(&ha, &hb.ip, &hb.mac);
    support::neighbour(&hb, &ha.ip, &ha.mac);
    let batch = format!(
        "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789 nolearning
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3
fdb add {} dev vx0 dst 192.0.2.2
",
        hb.mac
    );
    let ctl = lab.daemon_args(&a, &batch, &["--fast-path", "on"]).unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&ha, &hb.ip)),
        "no ping over VXLAN\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let miss = |v: &serde_json::Value, r: &str| u(&v["misses"][r]);
    let mut pinger = std::process::Command::new("ip")
        .args([
            "netns", "exec", &ha.ns, "ping", "-q", "-i", "0.01", "-W", "1", &hb.ip,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_hits = |what: &str| {
        let h = u(&fp()["hits"]);
        assert!(
            support::wait_until(Duration::from_secs(5), || u(&fp()["hits"]) >= h + 50),
            "{what}: the pings do not take the program: {}\n{}",
            fp(),
            ctl.stats_text()
        );
    };
    // Moves hb's remote to 192.0.2.3 by `send`: nothing reaches 192.0.2.2 from the answer
    // on, the flow was removed (a `no_flow` miss), nothing went stale. Returns the misses.
    let moved = |what: &str, send: &dyn Fn()| {
        wait_hits(what);
        let before = fp();
        send();
        // (Frames already handed to the underlay at the answer arrive within microseconds.)
        std::thread::sleep(Duration::from_millis(50));
        let rx = rx_packets(&b, "vx0");
        std::thread::sleep(Duration::from_millis(1000));
        let rx_after = rx_packets(&b, "vx0");
        let after = fp();
        eprintln!(
            "{what}: stale {} no_flow {} destination {}",
            miss(&after, "stale") - miss(&before, "stale"),
            miss(&after, "no_flow") - miss(&before, "no_flow"),
            miss(&after, "destination") - miss(&before, "destination"),
        );
        assert_eq!(
            rx_after,
            rx,
            "{what}: frames reached the old remote after the answer\n{}",
            ctl.stats_text()
        );
        assert_eq!(
            miss(&after, "stale"),
            miss(&before, "stale"),
            "{what}: flows went stale: {after}"
        );
        assert!(
            miss(&after, "no_flow") > miss(&before, "no_flow"),
            "{what}: the flow to hb was not removed: {after}"
        );
    };
    moved("fdb replace", &|| {
        ctl.cmd(&["fdb", "replace", &hb.mac, "dev", "vx0", "dst", "192.0.2.3"])
            .unwrap();
    });
    ctl.cmd(&["fdb", "replace", &hb.mac, "dev", "vx0", "dst", "192.0.2.2"])
        .unwrap();
    let dir = lab.dir.clone();
    moved("an EVPN batch", &|| {
        let mut text = String::new();
        for i in 0..100 {
            let mac = format!("02:89:02:00:00:{i:02x}");
            let dst = 2 + i % 2;
            text.push_str(&format!(
                "fdb replace {mac} dev vx0 dst 192.0.2.{dst} extern_learn\n\
                 fdb replace {mac} dev vx0 extern_learn\n"
            ));
        }
        text.push_str(&format!(
            "fdb replace {} dev vx0 dst 192.0.2.3 extern_learn\n",
            hb.mac
        ));
        let f = dir.join("routes.batch");
        std::fs::write(&f, text).unwrap();
        ctl.cmd(&["-batch", f.to_str().unwrap()]).unwrap();
    });
    let _ = pinger.kill();
    let _ = pinger.wait();
}
