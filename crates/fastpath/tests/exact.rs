//! Exactness of the tag edit (root; skipped otherwise): for generated tag stacks in and out
//! (none, one or two tags of 0x8100/0x88a8, any TCI) and payloads, the flow compiled from
//! "the pipeline sent `input` as `output`" makes the program, run on `input` through
//! `BPF_PROG_TEST_RUN`, produce exactly `output`, on exactly that interface.

mod common;

use common::{port, skip};
use proptest::prelude::*;
use qbridge_fastpath::*;
use std::process::Command;

fn tag() -> impl Strategy<Value = (u16, u16)> {
    (prop_oneof![Just(0x8100u16), Just(0x88a8u16)], any::<u16>())
}

fn frame(tags: &[(u16, u16)], payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
    for (t, c) in tags {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&c.to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn compiled_flows_reproduce_the_pipelines_bytes() {
    if !FastPath::built() {
        return skip("built without clang");
    }
    // SAFETY: unshare(2) with a flag, no memory; it changes only this thread's namespace.
    #[allow(unsafe_code)]
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return skip("cannot unshare a network namespace (not root?)");
    }
    let ok = Command::new("ip")
        .args(["link", "add", "xa", "type", "veth", "peer", "name", "xb"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip link add");
    let idx = |n: &str| -> u32 {
        let o = Command::new("ip")
            .args(["-o", "link", "show", n])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split(':')
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (xa, xb) = (idx("xa"), idx("xb"));
    let mut fp = FastPath::load().expect("load");
    fp.set_port(xa, port(1, 0)).unwrap();
    let gen = fp.bump_generation().unwrap();
    for (mac, port) in [([2, 0, 0, 0, 0, 0xa], 1), ([2, 0, 0, 0, 0, 0xb], 2)] {
        fp.set_fdb(
            FdbKey {
                fid: 10,
                mac,
                ..FdbKey::default()
            },
            FdbEntry {
                port,
                version: 3,
                last_seen_ns: 0,
            },
        )
        .unwrap();
    }
    // (The runner's closure is `Fn`.)
    let fp = std::cell::RefCell::new(fp);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
    runner
        .run(
            &(
                proptest::collection::vec(tag(), 0..=2),
                proptest::collection::vec(tag(), 0..=2),
                proptest::collection::vec(any::<u8>(), 46..200),
            ),
            |(tin, tout, payload)| {
                let input = frame(&tin, &payload);
                let output = frame(&tout, &payload);
                let hop = Hop {
                    in_port: 1,
                    out_port: 2,
                    fid: 10,
                    dst_version: 3,
                    vlan_slot: 10,
                    flags: HOP_LEARNING,
                    ..Hop::default()
                };
                let (key, action) = compile(&Decision {
                    in_extra_tpids: [0, 0],
                    input: &input,
                    output: &output,
                    out_ifindex: xb,
                    hops: &[hop],
                    flags: 0,
                    generation: gen,
                    min_len: 14,
                    max_len: 1522,
                })
                .expect("a tag-stack change compiles");
                let mut fp = fp.borrow_mut();
                fp.insert_flow(key, action).unwrap();
                let r = fp.test_run(&input, xa, None).unwrap();
                fp.remove_flow(&key).unwrap();
                prop_assert_eq!(r.verdict, Verdict::Hit { ifindex: xb });
                prop_assert_eq!(r.frame, output);
                Ok(())
            },
        )
        .unwrap();
}
