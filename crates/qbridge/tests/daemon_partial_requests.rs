//! Issue 17 item 12: one client holding a partial request on every one of the daemon's 64
//! control connections locked every other client out until the requests timed out (30 s, then
//! again). Now a new connection takes the place of a partial request of the client holding
//! the most connections. Unprivileged: a pcap-less daemon with a socket in a temporary
//! directory.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

mod local;

#[test]
fn partial_requests_on_every_connection_do_not_lock_others_out() {
    let dir = local::tmp("partial", "flood");
    let mut d = local::start_daemon(&dir, "link add br0 type bridge\n", &["--workers", "1"]);
    // 64 connections, each with a request begun and never finished (a line, and a streamed
    // batch header with part of its text).
    let mut held = Vec::new();
    for i in 0..64 {
        let mut c = UnixStream::connect(&d.socket).unwrap();
        if i % 2 == 0 {
            c.write_all(b"{\"v\":1,\"args\":[\"link\",").unwrap();
        } else {
            c.write_all(b"{\"v\":1,\"batch_len\":100}\nlink add")
                .unwrap();
        }
        held.push(c);
    }
    // Let the daemon see every first byte (one not yet read is an idle connection to it, and
    // goes first: the test would then pass on the old code too).
    std::thread::sleep(Duration::from_secs(1));
    // An administrator's commands go through at once, several times over.
    let t0 = Instant::now();
    for _ in 0..5 {
        let out = d
            .try_ok(&["link", "show"])
            .unwrap_or_else(|e| panic!("locked out after {:?}: {e}", t0.elapsed()));
        assert!(out.contains("br0"), "{out}");
    }
    let took = t0.elapsed();
    // 5 commands in well under one request deadline (30 s) each; measured ~0.05 s.
    assert!(took < Duration::from_secs(10), "5 commands took {took:?}");
    // The connection that made room was told why (one: the slot stays free once the command
    // is done).
    let mut told = 0;
    let t0 = Instant::now();
    for c in &held {
        c.set_nonblocking(true).unwrap();
    }
    // The evicted connection's thread answers on its own time: look for up to 10 s.
    while told == 0 && t0.elapsed() < Duration::from_secs(10) {
        for c in &held {
            let mut line = String::new();
            if BufReader::new(c).read_line(&mut line).is_ok() && !line.is_empty() {
                assert!(
                    line.contains("its request was not complete and the daemon needed room")
                        || line.contains("closing this idle connection to admit another"),
                    "{line}"
                );
                told += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(told, 1, "one partial request closed to make room");
    drop(held);
    assert!(d.stop().success());
}
