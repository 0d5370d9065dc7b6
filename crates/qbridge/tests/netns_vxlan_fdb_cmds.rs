//! vxl88 (decision 88): `fdb del` and `fdb flush` on a VXLAN port answer as a kernel vxlan
//! device in a bridge does (root only). The same command sequences go to qbridge's vx0 and to
//! a kernel vx0 (both `id 42`, each in a bridge br0), whose tables hold the same static
//! entries, flood list and learned remotes (datagrams from one sender, 192.0.2.2, to both);
//! `fdb show dev vx0` is compared line by line after each command (the kernel's through
//! `bridge fdb show dev vx0`), and whether the command was refused.
//!
//! ```text
//!  Q: qbridge vx0 (ul 192.0.2.1) ─┐                 ┌─ K: kernel vx0 in br0 (ul 192.0.2.11)
//!                                 └─ S: bridge seg ─┘
//!                                    192.0.2.2 (sends VXLAN datagrams from M2, M3)
//! ```
//!
//! The fast path: once `fdb del` of a learned remote has answered, the next frame to that MAC
//! goes to the flood list, not to the old remote (the learn hook took it out of
//! `qb_vxl_learned` before the answer).

mod support;

use std::time::Duration;
use support::{exec_in, ip_in, Lab};

const M1: &str = "02:00:00:00:88:01";
const M2: &str = "02:00:00:00:88:02";
const M3: &str = "02:00:00:00:88:03";
const ZERO: &str = "00:00:00:00:00:00";

/// One VXLAN datagram of VNI 42 from `ns` to `to`:4789 carrying a broadcast frame from `mac`
/// (EtherType 0x88b5, 46 zero bytes).
fn vxlan_from(ns: &str, to: &str, mac: &str) {
    let hex = |s: &str| s.split(':').map(|b| format!("\\x{b}")).collect::<String>();
    let frame = format!(
        "\\x08\\x00\\x00\\x00\\x00\\x00\\x2a\\x00{}{}\\x88\\xb5{}",
        hex("ff:ff:ff:ff:ff:ff"),
        hex(mac),
        "\\x00".repeat(46)
    );
    let script = format!("printf '{frame}' > /dev/udp/{to}/4789");
    exec_in(ns, "bash", &["-c", &script]).unwrap();
}

/// `fdb show dev vx0` lines of the test's MACs, `dev vx0` left out (the kernel's filtered
/// show omits it), sorted.
fn lines(text: &str) -> Vec<String> {
    let mut v = all_lines(text);
    v.retain(|l| [M1, M2, M3, ZERO].iter().any(|m| l.starts_with(m)));
    v
}

/// Every `fdb show` line, `dev NAME` left out, sorted.
fn all_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .map(|l| {
            let mut out = Vec::new();
            let mut w = l.split_whitespace();
            while let Some(x) = w.next() {
                if x == "dev" {
                    w.next();
                    continue;
                }
                out.push(x);
            }
            out.join(" ")
        })
        .collect();
    v.sort();
    v
}

struct Pair {
    _lab: Lab,
    k: String,
    s: String,
    ctl: support::Ctl,
}

impl Pair {
    fn kernel(&self) -> Vec<String> {
        lines(&exec_in(&self.k, "bridge", &["fdb", "show", "dev", "vx0"]).unwrap())
    }

    fn qbridge(&self) -> Vec<String> {
        lines(&self.ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap())
    }

    /// `fdb WORDS` on both: whether each took it.
    fn both(&self, words: &str) -> (bool, bool) {
        let w: Vec<&str> = std::iter::once("fdb")
            .chain(words.split_whitespace())
            .collect();
        let k = exec_in(&self.k, "bridge", &w).is_ok();
        let q = self.ctl.cmd(&w).is_ok();
        (k, q)
    }

    /// `fdb WORDS` on both, then the same answer and the same `fdb show dev vx0`.
    fn same(&self, words: &str) {
        let (k, q) = self.both(words);
        assert_eq!(q, k, "fdb {words}: qbridge took it: {q}, the kernel: {k}");
        assert_eq!(
            self.qbridge(),
            self.kernel(),
            "after fdb {words}: qbridge (left), the kernel (right)"
        );
    }

    /// Both tables emptied, then: M1 static at 192.0.2.5, the flood list 192.0.2.5 and .6,
    /// M2 and M3 learned behind 192.0.2.2 (by the port and by the bridge).
    fn fill(&self) {
        self.both("flush dev vx0 self master");
        self.both(&format!("add {M1} dev vx0 dst 192.0.2.5"));
        self.both(&format!("append {ZERO} dev vx0 dst 192.0.2.5"));
        self.both(&format!("append {ZERO} dev vx0 dst 192.0.2.6"));
        let want = |v: &[String]| {
            [M2, M3].iter().all(|m| {
                v.iter()
                    .any(|l| l.starts_with(m) && l.contains("dst 192.0.2.2"))
                    && v.iter()
                        .any(|l| l.starts_with(m) && l.contains("master br0"))
            })
        };
        let learned = support::wait_until(Duration::from_secs(5), || {
            for m in [M2, M3] {
                vxlan_from(&self.s, "192.0.2.1", m);
                vxlan_from(&self.s, "192.0.2.11", m);
            }
            std::thread::sleep(Duration::from_millis(100));
            want(&self.qbridge()) && want(&self.kernel())
        });
        assert!(
            learned,
            "not learned: qbridge {:?}, kernel {:?}",
            self.qbridge(),
            self.kernel()
        );
        assert_eq!(self.qbridge(), self.kernel(), "after the fill");
    }
}

fn pair(name: &str) -> Option<Pair> {
    let mut lab = Lab::new(name);
    let q = lab.netns(&format!("{name}q")).unwrap();
    let k = lab.netns(&format!("{name}k")).unwrap();
    let s = lab.netns(&format!("{name}s")).unwrap();
    lab.veth(&q, "ul", &s, "sq").unwrap();
    lab.veth(&k, "ul", &s, "sk").unwrap();
    ip_in(&s, &["link", "add", "seg", "type", "bridge"]).unwrap();
    for p in ["sq", "sk"] {
        ip_in(&s, &["link", "set", p, "master", "seg"]).unwrap();
    }
    ip_in(&s, &["addr", "add", "192.0.2.2/24", "dev", "seg"]).unwrap();
    ip_in(&s, &["link", "set", "seg", "up"]).unwrap();
    ip_in(&q, &["addr", "add", "192.0.2.1/24", "dev", "ul"]).unwrap();
    ip_in(&k, &["addr", "add", "192.0.2.11/24", "dev", "ul"]).unwrap();
    let kernel = [
        vec![
            "link",
            "add",
            "vx0",
            "type",
            "vxlan",
            "id",
            "42",
            "dstport",
            "4789",
            "local",
            "192.0.2.11",
            "dev",
            "ul",
        ],
        vec!["link", "add", "br0", "type", "bridge"],
        vec!["link", "set", "vx0", "master", "br0"],
        vec!["link", "set", "br0", "up"],
        vec!["link", "set", "vx0", "up"],
    ];
    for c in kernel {
        if let Err(e) = ip_in(&k, &c) {
            eprintln!("SKIPPED: cannot make a kernel vxlan device: {e}");
            return None;
        }
    }
    if exec_in(&k, "bridge", &["fdb", "show", "dev", "vx0"]).is_err() {
        eprintln!("SKIPPED: no bridge(8)");
        return None;
    }
    let batch = "link add br0 type bridge vlan_filtering 0
link add vx0 type vxlan id 42 local 192.0.2.1 dev ul dstport 4789
link set dev vx0 master br0
";
    let ctl = lab.daemon(&q, batch).unwrap();
    Some(Pair {
        _lab: lab,
        k,
        s,
        ctl,
    })
}

#[test]
fn fdb_del_and_flush_on_vx0_answer_as_the_kernels_vxlan() {
    skip_unless_netns!();
    let _serial = support::serial();
    let Some(p) = pair("vxc") else {
        return;
    };
    // `del` one by one, learned and static entries, each word.
    p.fill();
    p.same(&format!("del {M2} dev vx0 self"));
    p.same(&format!("del {M3} dev vx0 master"));
    p.same(&format!("del {M3} dev vx0 dst 192.0.2.2"));
    p.same(&format!("del {M1} dev vx0"));
    p.same(&format!("del {M1} dev vx0 self"));
    p.same(&format!("del {ZERO} dev vx0 dst 192.0.2.6"));
    p.same(&format!("del {ZERO} dev vx0"));
    p.same(&format!("del {M2} dev vx0 master"));
    p.same(&format!("del {M2} dev vx0 master"));
    assert!(p.qbridge().is_empty(), "{:?}", p.qbridge());
    p.fill();
    // `add` of a learned MAC refused (`File exists`), `replace` makes it static.
    p.same(&format!("add {M2} dev vx0 dst 192.0.2.7"));
    p.same(&format!("replace {M2} dev vx0 dst 192.0.2.7"));
    p.same(&format!("del {M2} dev vx0 self master"));
    // No word: the port's own entry goes as in the kernel; qbridge takes the bridge's too
    // (decision 88), the kernel leaves it.
    let (k, q) = p.both(&format!("del {M3} dev vx0"));
    assert!(k && q);
    let own =
        |v: Vec<String>| -> Vec<String> { v.into_iter().filter(|l| l.contains(" dst ")).collect() };
    assert_eq!(own(p.qbridge()), own(p.kernel()));
    assert!(
        p.kernel().contains(&format!("{M3} master br0")),
        "{:?}",
        p.kernel()
    );
    assert!(
        !p.qbridge().iter().any(|l| l.starts_with(M3)),
        "{:?}",
        p.qbridge()
    );

    // `flush … self` by kind, `master`, both.
    p.fill();
    p.same("flush dev vx0 self dynamic");
    p.same("flush dev vx0 self static");
    p.same("flush dev vx0 self permanent");
    p.fill();
    p.same("flush dev vx0 self");
    p.same("flush dev vx0 master");
    p.fill();
    p.same("flush dev vx0 self master");
    assert!(p.qbridge().is_empty(), "{:?}", p.qbridge());
}

/// Packets `ns`'s INPUT took for UDP to `dst` port 4789 (the rule added by [`count_to`]).
fn counted(ns: &str, dst: &str) -> u64 {
    exec_in(ns, "iptables", &["-L", "INPUT", "-v", "-x", "-n"])
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains(dst) && l.contains("dpt:4789"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count_to(ns: &str, dst: &str) -> bool {
    exec_in(
        ns,
        "iptables",
        &["-A", "INPUT", "-p", "udp", "-d", dst, "--dport", "4789"],
    )
    .is_ok()
}

/// `n` UDP datagrams from `from` to `to` port 9.
fn blast(from: &support::Host, to: &str, n: u32) {
    let script = format!("for i in $(seq {n}); do echo x > /dev/udp/{to}/9; done");
    exec_in(&from.ns, "bash", &["-c", &script]).unwrap();
}

/// ```text
///  ha (10.88.0.1) ─ qa ┐                                 ┌ kb1 ─ hb (10.88.0.2)
///     qbridge --fast-path on: br0: p1 (qa), vx0           kernel bridge kbr: kb1, vx0
///       vx0 id 100 local 192.0.2.1, flood list 192.0.2.3    vx0 id 100 local 192.0.2.2
///                └── ul 192.0.2.1 ═══ veth ═══ ul 192.0.2.2, 192.0.2.3 ──┘
/// ```
///
/// qbridge learns hb behind 192.0.2.2 (hb's pings come flooded by the kernel VTEP); ha's
/// datagrams to hb are encapsulated to it by the program. `fdb del HB dev vx0 self`: once it
/// answers, every datagram to hb goes to the flood list (192.0.2.3), none to 192.0.2.2.
#[test]
fn a_learned_remote_deleted_is_out_of_the_fast_path_when_the_command_answers() {
    skip_unless_netns!();
    let _serial = support::serial();
    let name = "vxd";
    let mut lab = Lab::new(name);
    let a = lab.netns(&format!("{name}a")).unwrap();
    let b = lab.netns(&format!("{name}b")).unwrap();
    lab.veth(&a, "ul", &b, "ul").unwrap();
    ip_in(&a, &["addr", "add", "192.0.2.1/24", "dev", "ul"]).unwrap();
    for addr in ["192.0.2.2/24", "192.0.2.3/24"] {
        ip_in(&b, &["addr", "add", addr, "dev", "ul"]).unwrap();
    }
    for ns in [&a, &b] {
        ip_in(ns, &["link", "set", "ul", "mtu", "1550"]).unwrap();
    }
    let ha = lab.host("ha", "10.88.0.1/24", &a, "qa").unwrap();
    let hb = lab.host("hb", "10.88.0.2/24", &b, "kb1").unwrap();
    let kernel = [
        vec![
            "link",
            "add",
            "vx0",
            "type",
            "vxlan",
            "id",
            "100",
            "local",
            "192.0.2.2",
            "dev",
            "ul",
            "dstport",
            "4789",
        ],
        vec!["link", "set", "vx0", "mtu", "1500"],
        vec!["link", "add", "kbr", "type", "bridge"],
        vec!["link", "set", "kb1", "master", "kbr"],
        vec!["link", "set", "vx0", "master", "kbr"],
        vec!["link", "set", "kbr", "up"],
        vec!["link", "set", "vx0", "up"],
    ];
    for c in kernel {
        if let Err(e) = ip_in(&b, &c) {
            eprintln!("SKIPPED: cannot make a kernel VTEP: {e}");
            return;
        }
    }
    exec_in(
        &b,
        "bridge",
        &["fdb", "append", ZERO, "dev", "vx0", "dst", "192.0.2.1"],
    )
    .unwrap();
    if !(count_to(&b, "192.0.2.2") && count_to(&b, "192.0.2.3")) {
        eprintln!("SKIPPED: no iptables in the namespace");
        return;
    }
    // hb receives and answers nothing from here on (no ARP, UDP to port 9 dropped): it is
    // not learned again after the delete.
    support::neighbour(&ha, &hb.ip, &hb.mac);
    support::neighbour(&hb, &ha.ip, &ha.mac);
    let batch = "link add br0 type bridge vlan_filtering 0
link add p1 type afpacket dev qa
link add vx0 type vxlan id 100 local 192.0.2.1 dev ul dstport 4789
link set dev p1 master br0
link set dev vx0 master br0
fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.3
";
    let ctl = lab.daemon_args(&a, batch, &["--fast-path", "on"]).unwrap();
    let own = |ctl: &support::Ctl| all_lines(&ctl.cmd(&["fdb", "show", "dev", "vx0"]).unwrap());
    let hb_line = format!("{} dst 192.0.2.2 self", hb.mac);
    assert!(
        support::wait_until(Duration::from_secs(5), || {
            support::ping_ok(&hb, &ha.ip)
                && own(&ctl).iter().any(|l| l.eq_ignore_ascii_case(&hb_line))
        }),
        "vx0 did not learn hb behind 192.0.2.2: {:?}\n{}",
        ctl.cmd(&["fdb", "show", "dev", "vx0"]),
        ctl.stats_text()
    );
    exec_in(
        &hb.ns,
        "iptables",
        &["-A", "INPUT", "-p", "udp", "--dport", "9", "-j", "DROP"],
    )
    .unwrap();
    let fp = || ctl.json(&["show", "fast-path"]).unwrap_or_default();
    let hits = || fp()["hits"].as_u64().unwrap_or(0);

    // Encapsulated to the learned remote, by the program.
    let (h0, to2, to3) = (hits(), counted(&b, "192.0.2.2"), counted(&b, "192.0.2.3"));
    blast(&ha, &hb.ip, 200);
    let (h1, to2_1, to3_1) = (hits(), counted(&b, "192.0.2.2"), counted(&b, "192.0.2.3"));
    assert_eq!(to2_1 - to2, 200, "ha -> hb: to the learned remote");
    assert_eq!(to3_1, to3, "ha -> hb: none flooded");
    assert!(
        h1 - h0 >= 180,
        "{} of 200 datagrams encapsulated by the program: {}",
        h1 - h0,
        fp()
    );

    // Deleted: from the answer on, every datagram floods, none goes to 192.0.2.2.
    ctl.cmd(&["fdb", "del", &hb.mac, "dev", "vx0", "self"])
        .unwrap();
    blast(&ha, &hb.ip, 50);
    let (to2_2, to3_2) = (counted(&b, "192.0.2.2"), counted(&b, "192.0.2.3"));
    assert_eq!(
        to2_2,
        to2_1,
        "datagrams went to the deleted remote after the answer: {}\n{}",
        fp(),
        ctl.stats_text()
    );
    assert_eq!(to3_2 - to3_1, 50, "not flooded to the flood list");
    let left = own(&ctl);
    assert!(
        !left.iter().any(|l| l.eq_ignore_ascii_case(&hb_line)),
        "{left:?}"
    );
    // `self`: the bridge's entry of hb on vx0 stays.
    assert!(
        left.iter()
            .any(|l| l.eq_ignore_ascii_case(&format!("{} master br0", hb.mac))),
        "{left:?}"
    );
}
