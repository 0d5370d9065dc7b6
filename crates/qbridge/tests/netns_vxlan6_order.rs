//! The order of a TCP connection's segments through qbridge's fast path to an IPv6 VXLAN
//! remote (decision 91), against the kernel's own VTEP at its defaults (root only):
//!
//! ```text
//!  ha (10.23.0.1) ─ qa ┐                                       ┌ kb1 ─ hb (10.23.0.2)
//!     qbridge --fast-path on: br0: p1 (qa), vx0                  kernel bridge kbr: kb1, vx0
//!       fdb add HB dev vx0 dst 2001:db8:102::2 (static)            vx0: kernel vxlan id 100
//!                  └── ul 2001:db8:102::1 ═══ veth (MTU 1570) ═══ ul 2001:db8:102::2 ──┘
//! ```
//!
//! ha sends with TSO on (its defaults): its super-frames go up to the daemon (the program does
//! not encapsulate them over IPv6, decision 78), while the connection's occasional single
//! segments would be encapsulated by the program at once and overtake them (decision 90:
//! thousands of retransmissions a 4-s figure). With the order keeper those follow the
//! super-frames up (`misses: order`). Checked, in one of up to three transfers (a segment lost
//! in the daemon under load reads alike): 48 MiB of verified bytes ha -> hb, hb's TCP
//! queued no segment out of order (`TcpExt: TCPOFOQueue`), ha detected no reordering
//! (`TCPSACKReorder`, `TCPTSReorder`, `TCPRenoReorder`) and retransmitted nothing
//! (`Tcp: RetransSegs`); the program sent super-frames up (`vxlan`).

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::{tcp_transfer, Lab};

/// What says a connection's segments arrived out of order: hb's out-of-order queueings, ha's
/// reorderings detected, ha's retransmitted segments.
fn disorder(ha: &str, hb: &str) -> [u64; 5] {
    [
        support::kernel_counter(hb, "TcpExt", "TCPOFOQueue"),
        support::kernel_counter(ha, "TcpExt", "TCPSACKReorder"),
        support::kernel_counter(ha, "TcpExt", "TCPTSReorder"),
        support::kernel_counter(ha, "TcpExt", "TCPRenoReorder"),
        support::kernel_counter(ha, "Tcp", "RetransSegs"),
    ]
}

/// `QB_ORDER_OFF=1` (by hand, to see what the keeper prevents; alone on the machine: it
/// turns off every loaded program's keeper): each `qb_order_window` map set to all ones.
fn order_off() {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "map", "show"])
        .output()
        .expect("bpftool");
    let maps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    for m in maps.as_array().into_iter().flatten() {
        if m["name"] == "qb_order_window" {
            let id = m["id"].to_string();
            let mut args = vec![
                "map", "update", "id", &id, "key", "0", "0", "0", "0", "value",
            ];
            args.extend(["0xff"; 8]);
            let st = std::process::Command::new("bpftool").args(&args).status();
            assert!(st.is_ok_and(|s| s.success()), "bpftool map update id {id}");
        }
    }
}

#[test]
fn tso_segments_to_an_ipv6_remote_keep_their_order() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("vx6ord");
    let Some((a, _b, ha, hb)) = vxlan_rig::underlay6(&mut lab, "vx6oa", "vx6ob", "10.23.0") else {
        return;
    };
    let ctl = vxlan_rig::static_remote6(&mut lab, &a, &ha, &hb);
    if std::env::var_os("QB_ORDER_OFF").is_some_and(|v| v == "1") {
        order_off();
    }
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let miss = |f: &serde_json::Value, m: &str| f["misses"][m].as_u64().unwrap_or(0);
    // A segment lost in the daemon under a loaded machine also shows as out-of-order and
    // retransmitted: up to three transfers, one of them clean passes. Without the keeper every
    // transfer here showed them (QB_ORDER_OFF=1: 3 out of order, 66 retransmitted in one).
    let mut seen = Vec::new();
    for attempt in 1..=3 {
        let f0 = fp();
        let d0 = disorder(&ha.ns, &hb.ns);
        let r = tcp_transfer(&ha, &hb, 48 << 20, Duration::from_secs(40))
            .unwrap_or_else(|e| panic!("TCP ha -> hb: {e}\n{}", ctl.stats_text()));
        assert_eq!(r.bytes, 48 << 20);
        let f1 = fp();
        let d1 = disorder(&ha.ns, &hb.ns);
        let d: Vec<u64> = d0.iter().zip(d1).map(|(x, y)| y - x).collect();
        eprintln!(
            "attempt {attempt}: {:.2} Gbit/s; hb TCPOFOQueue {}, ha TCPSACKReorder {} \
             TCPTSReorder {} TCPRenoReorder {} RetransSegs {}; misses vxlan {} order {}, hits {}",
            r.gbit_per_s(),
            d[0],
            d[1],
            d[2],
            d[3],
            d[4],
            miss(&f1, "vxlan") - miss(&f0, "vxlan"),
            miss(&f1, "order") - miss(&f0, "order"),
            f1["hits"].as_u64().unwrap_or(0) - f0["hits"].as_u64().unwrap_or(0),
        );
        assert!(
            miss(&f1, "vxlan") > miss(&f0, "vxlan"),
            "ha's super-frames did not go up: {f1}"
        );
        if d == [0, 0, 0, 0, 0] {
            return;
        }
        seen.push(d);
    }
    panic!(
        "segments out of order in every transfer (hb TCPOFOQueue, ha TCPSACKReorder, \
         TCPTSReorder, TCPRenoReorder, RetransSegs): {seen:?}\n{}\n{}",
        fp(),
        ctl.stats_text()
    );
}
