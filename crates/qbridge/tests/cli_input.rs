//! The CLI fed what users feed it by accident (issue 17, item 16): arguments and batch files
//! that are not UTF-8, names with terminal escape sequences. Offline (`-offline`): no daemon, no
//! privileges.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_qbridge");

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-input-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A non-UTF-8 argument panicked (exit 101, "called `Result::unwrap()` on an `Err` value").
#[test]
fn a_non_utf8_argument_is_an_error_not_a_panic() {
    let bad = std::ffi::OsStr::from_bytes(b"p\xff1");
    let o = run(&[
        "-offline".as_ref(),
        "link".as_ref(),
        "show".as_ref(),
        "dev".as_ref(),
        bad,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "qbridge: argument 5 is not valid UTF-8: \"p\\xFF1\" (names and words are UTF-8 text)\n"
    );
}

/// A non-UTF-8 batch file was refused without saying where ("stream did not contain valid
/// UTF-8").
#[test]
fn a_non_utf8_batch_file_names_the_line() {
    let dir = tmp("batch");
    let f = dir.join("bad.batch");
    std::fs::write(
        &f,
        b"link add br0 type bridge\n# ok\nlink add p\xe9 type pcap\n",
    )
    .unwrap();
    let o = run(&["-offline".as_ref(), "-batch".as_ref(), f.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "qbridge: cannot read batch file {}: line 3: not valid UTF-8\n",
            f.display()
        )
    );
}

/// A name with an escape sequence was echoed raw in the error, so the terminal obeyed it;
/// interface and namespace names with one were taken, and printed raw by `link show` and the
/// running configuration. Now a word with a control character is refused, shown escaped.
#[test]
fn control_characters_are_refused_and_not_echoed_raw() {
    let o = run(&[
        "-offline".as_ref(),
        "link".as_ref(),
        "show".as_ref(),
        "dev".as_ref(),
        "\u{1b}[2J\u{1b}[31mred\u{7}".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        !o.stderr.iter().any(|&b| b == 0x1b || b == 0x07),
        "{:?}",
        o.stderr
    );
    assert_eq!(
        stderr(&o),
        "qbridge: word \"\\u{1b}[2J\\u{1b}[31mred\\u{7}\" holds a control character (names \
         and values are printable text)\n"
    );
    for args in [
        [
            "-offline",
            "link",
            "add",
            "t1",
            "type",
            "tap",
            "ifname",
            "a\u{1b}[31mb",
        ],
        [
            "-offline",
            "link",
            "add",
            "p1",
            "type",
            "afpacket",
            "dev",
            "e\u{1b}[33mth",
        ],
    ] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("holds a control character"),
            "{}",
            stderr(&o)
        );
        assert!(!o.stderr.contains(&0x1b));
    }
    // In a batch file too, with its line.
    let dir = tmp("controls");
    let f = dir.join("esc.batch");
    std::fs::write(
        &f,
        "link add br0 type bridge\nlink add t1 type tap netns n\x1b[32mx\n",
    )
    .unwrap();
    let o = run(&["-offline".as_ref(), "-batch".as_ref(), f.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "qbridge: line 2: word \"n\\u{1b}[32mx\" holds a control character (names and values \
         are printable text)\n"
    );
}
