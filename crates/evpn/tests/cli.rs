//! `qbridge-evpn`'s command line: its usage, and bad options and unreachable peers named
//! (this test also makes Cargo build the binary that `crates/qbridge/tests/netns_evpn.rs`
//! runs).

use std::process::Command;

fn evpn(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qbridge-evpn"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_and_errors() {
    let (code, out, _) = evpn(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("usage: qbridge-evpn [--socket PATH] [--gobgp HOST:PORT]"),
        "{out}"
    );
    let (code, _, err) = evpn(&["--bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown option \"--bogus\""), "{err}");
    let (code, _, err) = evpn(&["--asn", "70000"]);
    assert_eq!(code, 2);
    assert!(err.contains("--asn 70000: a 2-byte AS number"), "{err}");
    let (code, _, err) = evpn(&["--interval-ms", "5"]);
    assert_eq!(code, 2);
    assert!(err.contains("--interval-ms 5: 10 to 3600000"), "{err}");
    // One pass against a daemon that is not there: the socket named, exit 1.
    let (code, _, err) = evpn(&["--once", "--socket", "/nonexistent/qbridge.sock"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("qbridge daemon at /nonexistent/qbridge.sock"),
        "{err}"
    );
}
