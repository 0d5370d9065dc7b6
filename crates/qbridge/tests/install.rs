//! `scripts/install.sh` into a staging directory (no privileges needed): every file in place,
//! the man page generated from the binary's own help and readable by man(1), the completion
//! completing, the service running the daemon with two capabilities.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `scripts/install.sh --prefix /usr --destdir D --bin BIN`, which must succeed.
fn install_into(d: &Path) {
    let out = Command::new(repo().join("scripts/install.sh"))
        .args(["--prefix", "/usr", "--destdir"])
        .arg(d)
        .arg("--bin")
        .arg(BIN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stage() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install-stage");
    let _ = std::fs::remove_dir_all(&d);
    install_into(&d);
    d
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn install_puts_every_piece_in_place() {
    let d = stage();
    let bin = d.join("usr/bin/qbridge");
    // The CNI plugin, built beside the binary, goes where runtimes look for plugins.
    let cni = d.join("opt/cni/bin/qbridge-cni");
    let out = Command::new(&cni)
        .env("CNI_COMMAND", "VERSION")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("supportedVersions"),
        "{out:?}"
    );
    // The EVPN adapter, when built beside the binary (cargo test --workspace builds it).
    if Path::new(BIN).with_file_name("qbridge-evpn").exists() {
        let evpn = d.join("usr/bin/qbridge-evpn");
        let out = Command::new(&evpn).arg("--help").output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("usage: qbridge-evpn"),
            "{out:?}"
        );
    }
    let v = Command::new(&bin).arg("-V").output().unwrap();
    let v = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.starts_with(&format!("qbridge {} (", env!("CARGO_PKG_VERSION")))
            && v.contains("fast path"),
        "{v}"
    );

    // The man page holds the help texts, and man(1) formats it.
    let man = d.join("usr/share/man/man8/qbridge.8");
    let page = read(&man);
    assert!(page.starts_with(".TH QBRIDGE 8 "), "{page}");
    let help = String::from_utf8(Command::new(BIN).arg("--help").output().unwrap().stdout).unwrap();
    let first_command = help.lines().find(|l| l.starts_with("  link add ")).unwrap();
    assert!(page.contains(first_command), "{first_command}");
    assert!(
        page.contains("--state FILE"),
        "daemon --help is in the page"
    );
    if Command::new("man").arg("--version").output().is_ok() {
        let out = Command::new("man")
            .args(["-l", "-P", "cat"])
            .arg(&man)
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("QBRIDGE(8)") && text.contains("link add NAME type bridge"));
        // No roff warnings (a line that starts a request, a bad escape) in any page.
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // EXAMPLES: the four of dist/qbridge.8.examples, and every batch line there is valid.
    for title in [
        "A VLAN-aware bridge on two veths",
        "A provider edge",
        "Changing a running daemon",
        "Checking without a daemon",
    ] {
        assert!(page.contains(&format!(".SS {title}")), "{title}");
    }
    assert!(page.contains(".SH EXAMPLES") && page.contains(".BR qbridge-evpn (8),"));
    let examples = &page[page.find(".SH EXAMPLES").unwrap()..];
    let batch: String = examples
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("qbridge ").unwrap_or(l);
            ["link ", "vlan ", "fdb add "]
                .iter()
                .any(|w| l.starts_with(w))
                .then(|| format!("{l}\n"))
        })
        .collect();
    assert!(batch.lines().count() >= 20, "{batch}");
    let file = d.join("examples.batch");
    std::fs::write(&file, &batch).unwrap();
    let out = Command::new(BIN)
        .args(["-offline", "-batch"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{batch}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The other programs' pages: qbridge-cni's always (it is built beside the binary),
    // qbridge-evpn's when it was built; the version of this build, every option of
    // qbridge-evpn --help.
    let cni_page = read(&d.join("usr/share/man/man8/qbridge-cni.8"));
    assert!(
        cni_page.starts_with(&format!(
            ".TH QBRIDGE-CNI 8 \"\" \"qbridge {}\" ",
            env!("CARGO_PKG_VERSION")
        )),
        "{cni_page}"
    );
    assert!(cni_page.contains(".SH EXAMPLES") && !cni_page.contains("@VERSION@"));
    let mut pages = vec![man.clone(), d.join("usr/share/man/man8/qbridge-cni.8")];
    if Path::new(BIN).with_file_name("qbridge-evpn").exists() {
        let evpn_page = read(&d.join("usr/share/man/man8/qbridge-evpn.8"));
        assert!(evpn_page.starts_with(".TH QBRIDGE-EVPN 8 "), "{evpn_page}");
        let help = Command::new(d.join("usr/bin/qbridge-evpn"))
            .arg("--help")
            .output()
            .unwrap();
        for opt in String::from_utf8_lossy(&help.stdout)
            .split(|c: char| c.is_whitespace() || c == '[' || c == ']')
            .filter(|w| w.starts_with("--"))
        {
            assert!(
                evpn_page.contains(&opt.replace('-', "\\-")),
                "qbridge-evpn.8 lacks {opt}"
            );
        }
        pages.push(d.join("usr/share/man/man8/qbridge-evpn.8"));
    }
    if Command::new("man").arg("--version").output().is_ok() {
        for p in &pages {
            let out = Command::new("man")
                .args(["-l", "-P", "cat", "--warnings"])
                .arg(p)
                .env("MANWIDTH", "100")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", p.display());
            assert!(
                out.stderr.is_empty(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // qemu's helpers, executable.
    for h in ["qbridge-ifup", "qbridge-ifdown"] {
        let f = d.join("usr/libexec/qbridge").join(h);
        let mode = std::fs::metadata(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{}", f.display());
    }

    // The completion completes objects, commands and keywords.
    let comp = d.join("usr/share/bash-completion/completions/qbridge");
    let complete = |line: &str| -> String {
        let script = format!(
            "source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _qbridge; echo \"${{COMPREPLY[*]}}\"",
            comp.display()
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(complete("qbridge li"), "link");
    assert_eq!(complete("qbridge vlan a"), "add");
    assert_eq!(complete("qbridge link set dev p1 le"), "learning");
    assert_eq!(complete("qbridge link set dev p1 learning ''"), "on off");
    assert_eq!(complete("qbridge show r"), "running-config");

    // The service: user qbridge, two capabilities, the installed binary, state and socket group.
    let unit = read(&d.join("etc/systemd/system/qbridge.service"));
    for line in [
        "User=qbridge",
        "AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN",
        "CapabilityBoundingSet=CAP_NET_RAW CAP_NET_ADMIN",
        "Type=notify",
        "ExecStart=/usr/bin/qbridge daemon --socket /run/qbridge/qbridge.sock --socket-group \
         qbridge --state /var/lib/qbridge/state -batch /etc/qbridge/qbridge.conf",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}\n{unit}");
    }
    assert!(read(&d.join("etc/sysusers.d/qbridge.conf")).contains("\nu qbridge "));
    // The shipped configuration file is a valid (empty) batch.
    let conf = d.join("etc/qbridge/qbridge.conf");
    let out = Command::new(BIN)
        .args(["-offline", "-batch"])
        .arg(&conf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A second install keeps the administrator's configuration.
    std::fs::write(&conf, "link add br0 type bridge\n").unwrap();
    install_into(&d);
    assert_eq!(read(&conf), "link add br0 type bridge\n");
}
