//! A forwarding loop (two ports of one bridge joined by a patch link, the in-daemon form of a
//! cable) is reported in the log as a MAC address flapping between the two ports.

use qbridge_control::{OutputOptions, Session};
use qbridge_datapath::{Engine, EngineConfig};
use qbridge_io::pcap::PcapWriter;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[test]
fn a_loop_through_a_patch_link_is_logged_as_flapping() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .init();

    let d = std::env::temp_dir().join(format!("qbridge-flap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mut w = PcapWriter::create(&d.join("host.in.pcap")).unwrap();
    let mut bcast = vec![0xff; 6];
    bcast.extend([0x02, 0, 0, 0, 0, 0x42, 0x08, 0x06]);
    bcast.resize(60, 0);
    w.write(1, &bcast).unwrap();
    w.finish().unwrap();

    let mut session = Session::with_workers(2);
    session
        .execute_batch(
            "link add br0 type bridge\n\
             link add host type pcap\n\
             link add loop-a type patch peer loop-b\n\
             link set dev host master br0\n\
             link set dev loop-a master br0\n\
             link set dev loop-b master br0\n",
            OutputOptions::default(),
        )
        .unwrap();
    let (engine, h, _) = Engine::new(
        session,
        EngineConfig {
            pcap_dir: Some(d.clone()),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let t = std::thread::spawn(move || engine.run());
    let t0 = Instant::now();
    while !log.text().contains("is flapping") {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no flapping report; log:\n{}",
            log.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    h.shutdown();
    t.join().unwrap();
    let text = log.text();
    let line = text.lines().find(|l| l.contains("is flapping")).unwrap();
    assert!(
        line.contains("bridge br0: MAC 02:00:00:00:00:42 in VLAN "),
        "{line}"
    );
    assert!(
        line.contains("between ports loop-a and loop-b")
            || line.contains("between ports loop-b and loop-a")
            || line.contains("and host"),
        "{line}"
    );
    assert_eq!(text.matches("is flapping").count(), 1, "rate limit: {text}");
    let _ = std::fs::remove_dir_all(&d);
}
