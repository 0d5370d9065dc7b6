//! The bash completion (`dist/qbridge.bash-completion`), sourced into bash with a stand-in
//! `qbridge` that lists two devices as `qbridge -j link show` would: objects complete to
//! their commands, `dev` to device names, keywords to their values.

use std::path::Path;
use std::process::Command;

/// COMPREPLY for the command line `line` (its last word the one being completed; `''` for
/// an empty one), one reply per space.
fn complete(line: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/qbridge.bash-completion");
    let bash = format!(
        "qbridge() {{ echo '[{{\"ifname\":\"br0\"}},{{\"ifname\":\"p1\"}}]'; }}; \
         source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
         _qbridge; echo \"${{COMPREPLY[*]}}\"",
        script.display()
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &bash])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn objects_complete_to_their_commands() {
    assert_eq!(complete("qbridge link ''"), "add set del show help");
    assert_eq!(
        complete("qbridge vlan ''"),
        "add del show tunnelshow map set help"
    );
    assert_eq!(
        complete("qbridge fdb ''"),
        "add append replace del show flush help"
    );
    assert_eq!(complete("qbridge mirror ''"), "add del show help");
    assert_eq!(
        complete("qbridge monitor ''"),
        "all link vlan fdb mirror stp drops"
    );
    // Options before the object, with their arguments, are skipped.
    assert_eq!(
        complete("qbridge -j -n blue --socket /tmp/s link ''"),
        "add set del show help"
    );
    assert_eq!(complete("qbridge -br link s"), "set show");
}

#[test]
fn dev_completes_to_device_names() {
    assert_eq!(complete("qbridge link set dev ''"), "br0 p1");
    assert_eq!(complete("qbridge link set dev p"), "p1");
    assert_eq!(complete("qbridge vlan add vid 10 dev ''"), "br0 p1");
    assert_eq!(complete("qbridge fdb show br ''"), "br0 p1");
    // `link add link LOWER`: the keyword link, not the object.
    assert_eq!(complete("qbridge link add link ''"), "br0 p1");
    assert_eq!(complete("qbridge link show ''"), "dev br0 p1");
}

#[test]
fn keywords_and_their_values() {
    assert_eq!(complete("qbridge li"), "link");
    assert_eq!(complete("qbridge link set dev p1 le"), "learning");
    assert_eq!(complete("qbridge link set dev p1 learning ''"), "on off");
    assert_eq!(complete("qbridge -b"), "-br -batch");
    assert_eq!(complete("qbridge show r"), "running-config");
}

#[test]
fn trace_completes_its_port_and_frame_words() {
    assert_eq!(complete("qbridge trace ''"), "dev in_port live");
    assert_eq!(
        complete("qbridge trace live ''"),
        "dev in_port count timeout src dst vlan ethertype arp ipv4 ipv6 tcp udp port"
    );
    assert_eq!(complete("qbridge trace live dev ''"), "br0 p1");
    assert_eq!(complete("qbridge trace live dev p1 co"), "count");
    assert_eq!(complete("qbridge trace dev ''"), "br0 p1");
    assert_eq!(complete("qbridge trace dev p1 v"), "vlan");
    assert_eq!(
        complete("qbridge trace dev p1 vlan 10 tpid 802.1"),
        "802.1Q 802.1ad"
    );
}
