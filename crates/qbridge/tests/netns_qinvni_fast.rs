//! Q-in-VNI in the eBPF fast path (issue 31 item 1, decision 86), against the kernel's own
//! VTEP at its defaults (root only): the shape of the kernel's `q_in_vni.sh` with qbridge's
//! 802.1ad bridge as the provider edge, `--fast-path on`.
//!
//! ```text
//!  cust (10.86.0.1, C-VLAN 10) ─ c1 ┐ qbridge pe: 802.1ad bridge, c1 dot1q-tunnel tag 100,
//!                                    │   vx0 external: S-VLAN 100 ↔ VNI 5000, static entry
//!                                    │   for far's MAC (dst 192.0.2.2 vni 5000)
//!                                    └── ul 192.0.2.1 ═══ veth (MTU 1600) ═══ ul 192.0.2.2
//!                                           kernel vx5000 (id 5000) ─ kbr ─ kb1 ─ far (10.86.0.2, C-VLAN 10)
//! ```
//!
//! The customers' C-tag 10 is pushed and popped by a small tc BPF program on each customer's
//! `eth0` (this kernel has no 8021q and no act_vlan), so their TCP is the kernel's own, with
//! super-frames (TSO over veth) carrying the C-tag as an accelerated tag. Checked: verified
//! TCP both ways (cust's super-frames encapsulated by `qb_ingress` with the C-tag inside the
//! VNI, the kernel VTEP's super-frames decapsulated by `qb_vxlan_in`), the program's hits
//! counted and the daemon's UDP sockets nearly idle meanwhile (the program sent and took the
//! datagrams); tshark decodes the underlay: VNI 5000, C-tag 10 inside, no S-tag, nothing
//! malformed; then `vlan del vid 100 dev vx0 tunnel_info` while cust and far ping each other
//! every 10 ms: from the answer on, neither the kernel VTEP nor cust receives anything more.

mod support;
mod vxlan_rig;

use std::time::Duration;
use support::{exec_in, tcp_transfer, Host, Lab};
use vxlan_rig::{
    datagrams_of, kernel_vtep, rx_packets, start_dump, stop_dump, tshark_fields, u, underlay,
};

/// `Udp: InDatagrams` and `OutDatagrams` of namespace `ns` (its sockets' datagrams).
fn udp_datagrams(ns: &str) -> (u64, u64) {
    let c = |name| support::kernel_counter(ns, "Udp", name);
    (c("InDatagrams"), c("OutDatagrams"))
}

/// The customers' C-tag: pushed on every frame `eth0` sends, popped from every frame it
/// receives with it (an accelerated tag, as veth hands it over).
const CTAG_PROG: &str = r#"
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("push")
int ctag_push(struct __sk_buff *skb)
{
	if (bpf_skb_vlan_push(skb, bpf_htons(0x8100), 10))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("pop")
int ctag_pop(struct __sk_buff *skb)
{
	if (!skb->vlan_present || (skb->vlan_tci & 0xfff) != 10)
		return TC_ACT_SHOT;
	if (bpf_skb_vlan_pop(skb))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
"#;

/// Puts C-VLAN 10 on host `h`'s interface (the tc program above, compiled to `obj`).
fn c_vlan(h: &Host, obj: &std::path::Path) -> Result<(), String> {
    let o = obj.to_str().unwrap();
    exec_in(&h.ns, "tc", &["qdisc", "add", "dev", &h.ifname, "clsact"])?;
    for (dir, sec) in [("egress", "push"), ("ingress", "pop")] {
        exec_in(
            &h.ns,
            "tc",
            &[
                "filter",
                "add",
                "dev",
                &h.ifname,
                dir,
                "bpf",
                "direct-action",
                "obj",
                o,
                "sec",
                sec,
            ],
        )?;
    }
    Ok(())
}

const PE: &str = "\
link add pe type bridge vlan_filtering 1 vlan_protocol 802.1ad
link add c1 type afpacket dev c1
link add vx0 type vxlan external local 192.0.2.1 dev ul dstport 4789
link set dev c1 master pe vlan_mode dot1q-tunnel tag 100
link set dev vx0 master pe
vlan del vid 1 dev vx0
vlan add vid 100 dev vx0
vlan add vid 100 dev vx0 tunnel_info id 5000
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 vni 5000
";

#[test]
fn q_in_vni_tcp_is_served_by_the_program_both_ways() {
    skip_unless_netns!();
    let _serial = support::serial();
    let mut lab = Lab::new("qvfast");
    let pe = lab.netns("qfpe").unwrap();
    let far = lab.netns("qffar").unwrap();
    // The customer's 1500-byte packets with their C-tag in VXLAN: 1554 bytes of outer IP.
    underlay(&mut lab, &pe, &far, "1600");
    let cust = lab.host("qfcust", "10.86.0.1/24", &pe, "c1").unwrap();
    let farh = lab.host("qffh", "10.86.0.2/24", &far, "kb1").unwrap();
    if let Err(e) = kernel_vtep(&far, "vx5000", "5000", "kbr", "kb1") {
        eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
        return;
    }
    let src = lab.dir.join("ctag.c");
    let obj = lab.dir.join("ctag.o");
    std::fs::write(&src, CTAG_PROG).unwrap();
    let cc = std::process::Command::new(std::env::var("CLANG").unwrap_or("clang".into()))
        .args([
            "-O2",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            "-c",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output();
    let required = std::env::var_os("QBRIDGE_REQUIRE_NETNS").is_some_and(|v| v == "1");
    if !cc.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(!required, "cannot compile the C-tag program: {cc:?}");
        eprintln!("SKIPPED: cannot compile the C-tag program: {cc:?}");
        return;
    }
    for h in [&cust, &farh] {
        if let Err(e) = c_vlan(h, &obj) {
            assert!(!required, "cannot attach the C-tag program: {e}");
            eprintln!("SKIPPED: cannot attach the C-tag program: {e}");
            return;
        }
    }
    let batch = format!("{PE}fdb add {} dev vx0 dst 192.0.2.2 vni 5000\n", farh.mac);
    let ctl = lab
        .daemon_args(&pe, &batch, &["--fast-path", "on"])
        .unwrap();
    assert!(
        support::wait_until(Duration::from_secs(5), || support::ping_ok(&cust, &farh.ip)),
        "no ping over Q-in-VNI\n{}",
        ctl.stats_text()
    );
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    // A flow's first frames are the pipeline's: a few pings both ways install them.
    for _ in 0..3 {
        support::ping_ok(&cust, &farh.ip);
        support::ping_ok(&farh, &cust.ip);
    }

    let pcap = lab.dir.join("ul.pcap");
    let dump = start_dump(&far, &pcap, &["-c", "400"]);

    let hits0 = u(&fp()["hits"]);
    let (in0, out0) = udp_datagrams(&pe);
    // Verified TCP both ways: each direction's data one way, its ACKs the other.
    let t = tcp_transfer(&cust, &farh, 48 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP cust -> far: {e}\n{}", ctl.stats_text()));
    let r = tcp_transfer(&farh, &cust, 48 << 20, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("TCP far -> cust: {e}\n{}", ctl.stats_text()));
    let f = fp();
    let (in1, out1) = udp_datagrams(&pe);
    let hits_end = u(&f["hits"]);
    let hits = hits_end - hits0;
    eprintln!(
        "cust->far {:.2} Gbit/s, far->cust {:.2} Gbit/s; program hits {hits}; the daemon's \
         UDP sockets: {} datagrams in, {} out; show fast-path: {f}",
        t.gbit_per_s(),
        r.gbit_per_s(),
        in1 - in0,
        out1 - out0
    );
    // 96 MiB in at most 64 KiB super-frames: 1536 of them at least, and the ACKs.
    assert!(
        hits > 1536,
        "the TCP did not take the program: {f}\n{}",
        ctl.stats_text()
    );
    assert!(
        (in1 - in0) + (out1 - out0) < hits / 10,
        "the daemon's sockets carried the TCP ({} in, {} out, {hits} hits): {f}\n{}",
        in1 - in0,
        out1 - out0,
        ctl.stats_text()
    );
    let text = ctl.cmd(&["show", "fast-path"]).unwrap();
    assert!(text.contains("vxlan"), "{text}");

    if let Some(d) = dump {
        stop_dump(d);
        let fields = [
            "vxlan.vni",
            "eth.src",
            "eth.type",
            "vlan.id",
            "_ws.malformed",
        ];
        match tshark_fields(&pcap, &fields) {
            Some(lines) => {
                // Both ways: VNI 5000, the inner frame C-tagged 10 (0x8100), no S-tag.
                for h in [&cust, &farh] {
                    let l = datagrams_of(&lines, &h.mac);
                    assert!(l.len() > 20, "{}: {lines:?}", h.name);
                    for f in &l {
                        assert_eq!(f[0], "5000", "{f:?}");
                        assert_eq!(f[3], "10", "one tag inside, C-VLAN 10: {f:?}");
                        assert!(f[2].contains("0x8100"), "{f:?}");
                        assert!(!f[2].contains("0x88a8"), "an S-tag inside: {f:?}");
                        assert!(f[4].is_empty(), "malformed: {f:?}");
                    }
                }
            }
            None => eprintln!("(no tshark decode: tshark missing or failed)"),
        }
    }

    // The VNI map changes while cust pings far: from the answer on, the kernel VTEP receives
    // nothing more (S-VLAN 100 has no VNI: the pipeline counts it unmapped).
    // Far pings cust too: from the answer on, cust receives nothing (the program no longer
    // decapsulates VNI 5000, the pipeline drops it unmapped).
    let pingers: Vec<std::process::Child> = [(&cust, &farh), (&farh, &cust)]
        .iter()
        .map(|(from, to)| {
            std::process::Command::new("ip")
                .args([
                    "netns", "exec", &from.ns, "ping", "-q", "-i", "0.01", "-W", "1", &to.ip,
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let hits1 = u(&fp()["hits"]);
    ctl.cmd(&["vlan", "del", "vid", "100", "dev", "vx0", "tunnel_info"])
        .unwrap();
    // (Frames already handed to the underlay at the answer arrive within microseconds.)
    std::thread::sleep(Duration::from_millis(50));
    let rx = (
        rx_packets(&far, "vx5000"),
        rx_packets(&cust.ns, &cust.ifname),
    );
    std::thread::sleep(Duration::from_millis(1000));
    let rx_after = (
        rx_packets(&far, "vx5000"),
        rx_packets(&cust.ns, &cust.ifname),
    );
    for mut p in pingers {
        let _ = p.kill();
        let _ = p.wait();
    }
    let hits2 = u(&fp()["hits"]);
    assert!(hits1 > hits_end, "the pings were not on the fast path");
    assert_eq!(
        rx_after,
        rx,
        "frames reached the kernel VTEP or cust after the VNI map changed (hits {hits1} -> \
         {hits2})\n{}",
        ctl.stats_text()
    );
}
