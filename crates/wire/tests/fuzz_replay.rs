//! Replays the `parse_headers` fuzz target's seeds and regressions (`fuzz/seeds/parse_headers`,
//! `fuzz/regressions/parse_headers`) on stable.

use qbridge_wire::{flow_hash, parse_headers, Tpid};
use std::path::Path;

fn files(dir: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(dir);
    let Ok(rd) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect()
}

#[test]
fn seeds_parse_to_tcp() {
    let seeds = files("seeds/parse_headers");
    assert!(!seeds.is_empty(), "fuzz/seeds/parse_headers is missing");
    for s in seeds {
        let h = parse_headers(&s, Tpid::is_well_known).unwrap();
        assert_eq!(h.l4_proto, Some(qbridge_wire::IpProtocol::Tcp));
        let _ = flow_hash(&s);
    }
}

#[test]
fn regressions_do_not_panic() {
    for b in files("regressions/parse_headers") {
        let _ = parse_headers(&b, Tpid::is_well_known);
        let _ = parse_headers(&b, |_| true);
        let _ = flow_hash(&b);
    }
}
