//! Issue 17 item 17b, on a real daemon (root): an interface's lock file
//! (`$QBRIDGE_LOCK_DIR/NETNS-IFNAME.lock`) is removed when its port is deleted and when the
//! daemon stops; before, every interface ever used left its file behind.

mod support;

use support::Lab;

fn lock_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn lock_files_go_with_their_port_and_with_the_daemon() {
    skip_unless_netns!();
    let mut lab = Lab::new("iflock");
    let locks = lab.dir.join("locks");
    // The daemons inherit it (this binary has one test, so no other test sees it).
    std::env::set_var("QBRIDGE_LOCK_DIR", &locks);
    let sw = lab.netns("sw").unwrap();
    let _h1 = lab.host("h1", "10.9.0.1/24", &sw, "s1").unwrap();
    let _h2 = lab.host("h2", "10.9.0.2/24", &sw, "s2").unwrap();
    let ns_ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/run/netns/{sw}")).unwrap().ino()
    };
    let d = lab
        .daemon(
            &sw,
            "link add p1 type afpacket dev s1\nlink add p2 type afpacket dev s2\n",
        )
        .unwrap();
    assert_eq!(
        lock_files(&locks),
        vec![format!("{ns_ino}-s1.lock"), format!("{ns_ino}-s2.lock")]
    );
    d.cmd(&["link", "del", "dev", "p1"]).unwrap();
    assert_eq!(lock_files(&locks), vec![format!("{ns_ino}-s2.lock")]);
    // s1 is free again, for this daemon or another.
    d.cmd(&["link", "add", "q1", "type", "afpacket", "dev", "s1"])
        .unwrap();
    assert_eq!(lock_files(&locks).len(), 2);
    assert!(lab.stop_daemon(0), "daemon did not exit cleanly");
    assert_eq!(lock_files(&locks), Vec::<String>::new());
}
