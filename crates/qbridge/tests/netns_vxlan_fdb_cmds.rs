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
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| [M1, M2, M3, ZERO].iter().any(|m| l.starts_with(m)))
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
