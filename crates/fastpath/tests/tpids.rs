//! The one list of well-known TPIDs (`qbridge_wire::Tpid::WELL_KNOWN`) and its copy in the C
//! program, which cannot read it: through `BPF_PROG_TEST_RUN` (root; skipped otherwise), the
//! program parses as tags exactly the kernel's TPIDs (`Tpid::KERNEL`) and sends up as `tags`
//! a frame whose EtherType after them is one of the others — as the flow compiler refuses it.

mod common;

use common::skip;
use qbridge_fastpath::*;
use qbridge_wire::Tpid;

fn frame(tags: &[u16], ethertype: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
    for t in tags {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&10u16.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.resize(f.len() + 64, 0x45);
    f
}

fn compiled(f: &[u8]) -> Result<(FlowKey, FlowAction), NotCached> {
    let hop = [Hop {
        in_port: 1,
        out_port: 2,
        ..Hop::default()
    }];
    compile(&Decision {
        in_extra_tpids: [0, 0],
        input: f,
        output: f,
        out_ifindex: 9,
        hops: &hop,
        flags: 0,
        generation: 1,
        min_len: 14,
        max_len: 1522,
    })
}

#[test]
fn the_program_and_the_compiler_read_the_one_tpid_list() {
    if !FastPath::built() {
        skip("built without clang");
        return;
    }
    let mut fp = match FastPath::load() {
        Ok(fp) => fp,
        Err(e) => {
            skip(&format!("cannot load the program (not root?): {e}"));
            return;
        }
    };
    // Port entries are keyed by ifindex: `lo` (1) is in every namespace. No filter is
    // attached; the entry lives in this test's own maps.
    let lo = 1;
    fp.set_port(lo, common::port(1, 0)).unwrap();
    let mut run = |f: &[u8]| fp.test_run(f, lo, None).unwrap().verdict;
    let others: Vec<Tpid> = Tpid::WELL_KNOWN
        .into_iter()
        .filter(|t| !t.is_kernel())
        .collect();
    assert!(!others.is_empty());
    for depth in 0..=2 {
        let outer: Vec<u16> = [Tpid::DOT1AD, Tpid::DOT1Q][..depth]
            .iter()
            .map(|t| t.0)
            .collect();
        for t in &others {
            let f = frame(&outer, t.0);
            assert_eq!(run(&f), Verdict::Miss(Miss::Tags), "{t} after {depth} tags");
            assert_eq!(compiled(&f).err(), Some(NotCached::Tags), "{t}");
        }
        // The kernel's TPIDs are tags (a miss for want of a flow, not of a parse), and so
        // is any other EtherType not a tag to either.
        for t in Tpid::KERNEL.into_iter().chain([Tpid(0x9abc), Tpid(0x0800)]) {
            let f = frame(&outer, t.0);
            let deeper = t.is_kernel() && depth == 2;
            let v = run(&f);
            if deeper {
                assert_eq!(v, Verdict::Miss(Miss::Tags), "three tags");
                assert_eq!(compiled(&f).err(), Some(NotCached::Tags));
            } else {
                assert!(
                    matches!(v, Verdict::Miss(m) if m != Miss::Tags),
                    "{t} after {depth} tags: {v:?}"
                );
                assert!(compiled(&f).is_ok(), "{t} after {depth} tags");
            }
        }
    }
}
