//! `--metrics ADDR:PORT`: Prometheus text format (version 0.0.4) on `GET /metrics`.
//!
//! A minimal HTTP/1.x responder: one request per connection, answered and closed; anything but
//! `GET /metrics` (or `/`) gets 404 or 405. Each connection has its own thread, at most
//! [`MAX_SCRAPES`] at once (more get `503` at once), and [`REQUEST_DEADLINE`] to send its
//! request head and take the answer, so a slow client delays nobody else. The counters are the
//! typed counter snapshot ([`Snapshot`], the one `link show -s` and `stats.json` render), taken
//! by the control thread between two commands (see [`Handle::metrics`]); this module only
//! names and formats it. Binds to loopback unless `--metrics-public` is given.

use anyhow::{bail, Context};
use qbridge_bridge::DropReason;
use qbridge_control::stats::{BACKEND_COUNTERS, MIRROR_COUNTERS, PORT_COUNTERS, VLAN_COUNTERS};
use qbridge_control::{BackendCounters, PortStats, Snapshot};
use qbridge_datapath::Handle;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Resolves `ADDR:PORT` and refuses a non-loopback address unless `public`.
pub fn resolve(addr: &str, public: bool) -> anyhow::Result<SocketAddr> {
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("--metrics {addr}: expected ADDR:PORT, e.g. 127.0.0.1:9477"))?
        .next()
        .with_context(|| format!("--metrics {addr}: resolves to no address"))?;
    if !sa.ip().is_loopback() && !public {
        bail!(
            "--metrics {addr}: {} is not a loopback address; add --metrics-public to serve \
             metrics on it",
            sa.ip()
        );
    }
    Ok(sa)
}

/// Binds the listener (so a taken port fails the daemon's start, before the socket exists).
pub fn bind(sa: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(sa).with_context(|| format!("--metrics: cannot listen on {sa}"))
}

/// Scrapes served at once.
pub const MAX_SCRAPES: usize = 16;
/// A scrape's whole request head must arrive, and its answer be taken, within this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// Serves scrapes until the process ends.
pub fn serve(listener: TcpListener, handle: Handle) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut backoff = Duration::from_millis(10);
    for conn in listener.incoming() {
        let c = match conn {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::debug!("metrics accept: {e}");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_SCRAPES {
            active.fetch_sub(1, Ordering::AcqRel);
            busy(c);
            continue;
        }
        let (h, a) = (handle.clone(), active.clone());
        let r = std::thread::Builder::new()
            .name("qbridge-scrape".into())
            .stack_size(256 << 10)
            .spawn(move || {
                if let Err(e) = answer(c, &h) {
                    tracing::debug!("metrics connection: {e}");
                }
                a.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = r {
            active.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!("metrics: cannot start a thread: {e}");
        }
    }
}

/// `503` without reading the request: too many scrapes at once.
fn busy(mut c: TcpStream) {
    let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
    let body = format!("more than {MAX_SCRAPES} scrapes at once\n");
    let _ = c.write_all(
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: \
             {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

fn answer(mut c: TcpStream, handle: &Handle) -> std::io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    c.set_write_timeout(Some(REQUEST_DEADLINE))?;
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        c.set_read_timeout(Some(left))?;
        let n = c.read(&mut buf[len..])?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") || buf[..len].contains(&b'\n') {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = match (method, path) {
        ("GET", "/metrics") | ("GET", "/") => match handle.metrics() {
            Some(snap) => ("200 OK", render(&snap)),
            None => ("503 Service Unavailable", "shutting down\n".to_string()),
        },
        ("GET", _) => ("404 Not Found", "only /metrics is here\n".to_string()),
        _ => ("405 Method Not Allowed", "GET only\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(resp.as_bytes())
}

/// A label value with `\`, `"` and newlines escaped.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The exposition text of one snapshot: the counter tables of [`qbridge_control::stats`]
/// (one family per row), then the gauges and the per-worker, mirror and switch-wide families.
/// Within a family, ports, bridges, VLANs and mirror sessions come in the snapshot's order
/// (port creation, bridge id, VID, session creation).
pub fn render(snap: &Snapshot) -> String {
    let mut o = String::new();
    for k in &PORT_COUNTERS {
        family(&mut o, k.metric, "counter", k.help);
        for p in &snap.ports {
            let _ = writeln!(
                o,
                "{}{{port=\"{}\"}} {}",
                k.metric,
                esc(&p.name),
                (k.get)(&p.counters)
            );
        }
    }
    let name = "qbridge_port_drops_total";
    family(
        &mut o,
        name,
        "counter",
        "Frames dropped, by port and reason.",
    );
    for p in &snap.ports {
        for reason in DropReason::ALL {
            let _ = writeln!(
                o,
                "{name}{{port=\"{}\",reason=\"{}\"}} {}",
                esc(&p.name),
                reason.name(),
                p.counters.dropped(*reason)
            );
        }
    }
    family(
        &mut o,
        "qbridge_port_up",
        "gauge",
        "1 when the port forwards (admin up and link up).",
    );
    for p in &snap.ports {
        let _ = writeln!(
            o,
            "qbridge_port_up{{port=\"{}\"}} {}",
            esc(&p.name),
            u8::from(p.running)
        );
    }
    family(
        &mut o,
        "qbridge_port_link_up",
        "gauge",
        "1 when the port's backend link is up.",
    );
    for p in &snap.ports {
        let _ = writeln!(
            o,
            "qbridge_port_link_up{{port=\"{}\"}} {}",
            esc(&p.name),
            u8::from(p.link_up)
        );
    }
    family(
        &mut o,
        "qbridge_port_link_down_events_total",
        "counter",
        "Times the port's link went down.",
    );
    for p in &snap.ports {
        let _ = writeln!(
            o,
            "qbridge_port_link_down_events_total{{port=\"{}\"}} {}",
            esc(&p.name),
            p.link_downs
        );
    }
    family(
        &mut o,
        "qbridge_port_device_mtu",
        "gauge",
        "Device MTU of the port's interface (AF_PACKET).",
    );
    for p in &snap.ports {
        if let Some(m) = p.status.as_ref().and_then(|s| s.device_mtu) {
            let _ = writeln!(
                o,
                "qbridge_port_device_mtu{{port=\"{}\"}} {m}",
                esc(&p.name)
            );
        }
    }
    let backends: Vec<BackendCounters> = snap.ports.iter().map(PortStats::backend).collect();
    for k in &BACKEND_COUNTERS {
        family(&mut o, k.metric, "counter", k.help);
        for (p, b) in snap.ports.iter().zip(&backends) {
            let _ = writeln!(
                o,
                "{}{{port=\"{}\"}} {}",
                k.metric,
                esc(&p.name),
                (k.get)(b)
            );
        }
    }
    family(
        &mut o,
        "qbridge_port_worker_rx_frames_total",
        "counter",
        "Frames received on the port by each datapath worker thread.",
    );
    for (p, b) in snap.ports.iter().zip(&backends) {
        for (w, n) in b.rx_frames_by_worker.iter().enumerate() {
            let _ = writeln!(
                o,
                "qbridge_port_worker_rx_frames_total{{port=\"{}\",worker=\"{w}\"}} {n}",
                esc(&p.name)
            );
        }
    }
    family(
        &mut o,
        "qbridge_workers",
        "gauge",
        "Datapath worker threads.",
    );
    let _ = writeln!(o, "qbridge_workers {}", snap.workers);
    if let Some(unsaved) = snap.state_unsaved {
        family(
            &mut o,
            "qbridge_state_unsaved",
            "gauge",
            "1 when the last write of the --state file failed: the running configuration is \
             not on disk.",
        );
        let _ = writeln!(o, "qbridge_state_unsaved {}", u8::from(unsaved));
    }
    family(
        &mut o,
        "qbridge_port_device_offload",
        "gauge",
        "1 when the port's device has the transmit offload on (AF_PACKET, read once a second).",
    );
    for p in &snap.ports {
        if let Some(d) = p.status.as_ref().and_then(|s| s.offloads.as_ref()) {
            for (feature, on) in [
                ("tso4", d.tso4),
                ("tso6", d.tso6),
                ("tso_ecn", d.tso_ecn),
                ("sg", d.sg),
                ("csum4", d.csum4),
                ("csum6", d.csum6),
            ] {
                let _ = writeln!(
                    o,
                    "qbridge_port_device_offload{{port=\"{}\",feature=\"{feature}\"}} {}",
                    esc(&p.name),
                    u8::from(on)
                );
            }
        }
    }

    for k in &VLAN_COUNTERS {
        family(&mut o, k.metric, "counter", k.help);
        for b in &snap.bridges {
            for v in &b.vlans {
                let _ = writeln!(
                    o,
                    "{}{{bridge=\"{}\",vlan=\"{}\"}} {}",
                    k.metric,
                    esc(&b.name),
                    v.vid,
                    (k.get)(&v.counters)
                );
            }
        }
    }
    family(
        &mut o,
        "qbridge_fdb_entries",
        "gauge",
        "FDB entries of the bridge (all kinds).",
    );
    for b in &snap.bridges {
        let _ = writeln!(
            o,
            "qbridge_fdb_entries{{bridge=\"{}\"}} {}",
            esc(&b.name),
            b.fdb_entries
        );
    }
    family(
        &mut o,
        "qbridge_fdb_learned_entries",
        "gauge",
        "Learned FDB entries of the bridge.",
    );
    for b in &snap.bridges {
        let _ = writeln!(
            o,
            "qbridge_fdb_learned_entries{{bridge=\"{}\"}} {}",
            esc(&b.name),
            b.fdb_learned
        );
    }
    for k in &MIRROR_COUNTERS {
        family(&mut o, k.metric, "counter", k.help);
        for m in &snap.mirrors {
            let _ = writeln!(
                o,
                "{}{{session=\"{}\"}} {}",
                k.metric,
                esc(&m.name),
                (k.get)(&m.counters)
            );
        }
    }
    family(
        &mut o,
        "qbridge_mirror_drops_total",
        "counter",
        "Copies of the mirror session not delivered, by reason.",
    );
    for m in &snap.mirrors {
        for reason in DropReason::ALL {
            let n = m.counters.drops[*reason as usize];
            if n != 0 {
                let _ = writeln!(
                    o,
                    "qbridge_mirror_drops_total{{session=\"{}\",reason=\"{}\"}} {n}",
                    esc(&m.name),
                    reason.name()
                );
            }
        }
    }
    stp_families(&mut o, snap);
    bond_metrics(&mut o, snap);
    fast_path_metrics(&mut o, snap);
    family(
        &mut o,
        "qbridge_unknown_port_drops_total",
        "counter",
        "Frames handed in with a port id that names no port.",
    );
    let _ = writeln!(
        o,
        "qbridge_unknown_port_drops_total {}",
        snap.unknown_port_drops
    );
    o
}

/// The eBPF fast path's counters (docs/fast-path.md), when it runs: frames it forwarded, frames
/// it sent up by reason, flows installed, forwarded misses not cached by reason. Its frames are
/// in the ports' and VLANs' counters too.
fn fast_path_metrics(o: &mut String, snap: &Snapshot) {
    let Some(fp) = &snap.fast_path else {
        return;
    };
    family(
        o,
        "qbridge_fast_path_hits_total",
        "counter",
        "Frames the eBPF fast path forwarded.",
    );
    let _ = writeln!(o, "qbridge_fast_path_hits_total {}", fp.hits);
    for (name, help, by_reason) in [
        (
            "qbridge_fast_path_misses_total",
            "Frames the eBPF fast path sent up to the pipeline, by reason.",
            &fp.misses,
        ),
        (
            "qbridge_fast_path_not_cached_total",
            "Misses the pipeline forwarded without installing a flow, by reason.",
            &fp.not_cached,
        ),
    ] {
        family(o, name, "counter", help);
        for (reason, n) in by_reason {
            let _ = writeln!(o, "{name}{{reason=\"{reason}\"}} {n}");
        }
    }
    family(
        o,
        "qbridge_fast_path_flows_installed_total",
        "counter",
        "Flows the pipeline installed in the eBPF fast path.",
    );
    let _ = writeln!(
        o,
        "qbridge_fast_path_flows_installed_total {}",
        fp.installed
    );
    family(
        o,
        "qbridge_fast_path_stale_upcalls_total",
        "counter",
        "Misses of a port closed or reopened since: dropped.",
    );
    let _ = writeln!(
        o,
        "qbridge_fast_path_stale_upcalls_total {}",
        fp.stale_upcalls
    );
    family(
        o,
        "qbridge_fast_path_upcall_ring_full_total",
        "counter",
        "Misses the kernel dropped: an upcall socket's ring was full.",
    );
    let _ = writeln!(
        o,
        "qbridge_fast_path_upcall_ring_full_total {}",
        fp.upcall_ring_full
    );
}

/// The spanning tree's families: per bridge root and topology changes, per port state,
/// role and BPDUs.
fn stp_families(o: &mut String, snap: &Snapshot) {
    family(
        o,
        "qbridge_stp_root",
        "gauge",
        "1 when the bridge is the spanning tree's root.",
    );
    for b in &snap.stp {
        let _ = writeln!(
            o,
            "qbridge_stp_root{{bridge=\"{}\"}} {}",
            esc(&b.bridge),
            u8::from(b.root)
        );
    }
    family(
        o,
        "qbridge_stp_topology_changes_total",
        "counter",
        "Topology changes the bridge's spanning tree saw.",
    );
    for b in &snap.stp {
        let _ = writeln!(
            o,
            "qbridge_stp_topology_changes_total{{bridge=\"{}\"}} {}",
            esc(&b.bridge),
            b.topology_changes
        );
    }
    family(
        o,
        "qbridge_stp_port_state",
        "gauge",
        "Spanning-tree port state (CIST): 0 discarding, 1 learning, 2 forwarding.",
    );
    for b in &snap.stp {
        for p in &b.ports {
            let _ = writeln!(
                o,
                "qbridge_stp_port_state{{bridge=\"{}\",port=\"{}\",role=\"{}\"}} {}",
                esc(&b.bridge),
                esc(&p.port),
                p.role,
                p.state
            );
        }
    }
    for (metric, help, get) in [
        (
            "qbridge_stp_bpdu_rx_total",
            "BPDUs the port received and processed.",
            (|p: &qbridge_control::stats::StpPortStats| p.bpdu_rx) as fn(&_) -> u64,
        ),
        ("qbridge_stp_bpdu_tx_total", "BPDUs the port sent.", |p| {
            p.bpdu_tx
        }),
    ] {
        family(o, metric, "counter", help);
        for b in &snap.stp {
            for p in &b.ports {
                let _ = writeln!(
                    o,
                    "{metric}{{bridge=\"{}\",port=\"{}\"}} {}",
                    esc(&b.bridge),
                    esc(&p.port),
                    get(p)
                );
            }
        }
    }
}

/// Per bond member: LACPDUs in and out, link / collecting / distributing as 0 or 1, and the
/// member's share of the bond's traffic.
fn bond_metrics(o: &mut String, snap: &Snapshot) {
    type Get = fn(&qbridge_control::BondMemberStats) -> u64;
    let rows: [(&str, &str, &str, Get); 10] = [
        (
            "qbridge_bond_member_lacpdu_rx_total",
            "counter",
            "LACPDUs received on the bond member.",
            |m| m.lacpdu_rx,
        ),
        (
            "qbridge_bond_member_lacpdu_tx_total",
            "counter",
            "LACPDUs sent on the bond member.",
            |m| m.lacpdu_tx,
        ),
        (
            "qbridge_bond_member_link_up",
            "gauge",
            "The bond member's link is up (1) or down (0).",
            |m| u64::from(m.link_up),
        ),
        (
            "qbridge_bond_member_collecting",
            "gauge",
            "The bond member accepts frames (1) or not (0).",
            |m| u64::from(m.collecting),
        ),
        (
            "qbridge_bond_member_distributing",
            "gauge",
            "The bond member is in the transmit table (1) or not (0).",
            |m| u64::from(m.distributing),
        ),
        (
            "qbridge_bond_member_rx_frames_total",
            "counter",
            "Frames received on the bond member and accepted by the bond.",
            |m| m.rx_frames,
        ),
        (
            "qbridge_bond_member_rx_bytes_total",
            "counter",
            "Bytes received on the bond member and accepted by the bond.",
            |m| m.rx_bytes,
        ),
        (
            "qbridge_bond_member_tx_frames_total",
            "counter",
            "Frames the bond sent on the member.",
            |m| m.tx_frames,
        ),
        (
            "qbridge_bond_member_tx_bytes_total",
            "counter",
            "Bytes the bond sent on the member.",
            |m| m.tx_bytes,
        ),
        (
            "qbridge_bond_member_rx_not_collecting_total",
            "counter",
            "Frames dropped: received while the member was not collecting.",
            |m| m.rx_not_collecting,
        ),
    ];
    let drops: Vec<(&str, qbridge_control::BondDrops)> = snap
        .ports
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.status.as_ref()?.bond_drops?)))
        .collect();
    if !drops.is_empty() {
        family(
            o,
            "qbridge_bond_drops_total",
            "counter",
            "Frames a bond dropped that belong to no member, by reason.",
        );
    }
    for (bond, d) in drops {
        for (reason, n) in [
            ("pdu_overflow", d.pdu_overflow),
            ("tx_no_member", d.tx_no_member),
        ] {
            let _ = writeln!(
                o,
                "qbridge_bond_drops_total{{bond=\"{}\",reason=\"{reason}\"}} {n}",
                esc(bond)
            );
        }
    }
    if snap.bond_members.is_empty() {
        return;
    }
    for (metric, kind, help, get) in rows {
        family(o, metric, kind, help);
        for m in &snap.bond_members {
            let _ = writeln!(
                o,
                "{metric}{{bond=\"{}\",member=\"{}\"}} {}",
                esc(&m.bond),
                esc(&m.member),
                get(m)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_bridge::{MirrorCounters, PortCounters, VlanCounters};
    use qbridge_control::stats::{BridgeStats, MirrorStats, VlanStats};
    use qbridge_control::BackendStatus;

    #[test]
    fn renders_ports_drops_vlans_and_fdb() {
        let mut counters = PortCounters {
            rx_frames: 3,
            rx_bytes: 180,
            ..PortCounters::default()
        };
        counters.drops[DropReason::VlanNotMember as usize] = 2;
        let mut mirror = MirrorCounters {
            frames: 4,
            bytes: 256,
            ..MirrorCounters::default()
        };
        mirror.drops[DropReason::Oversize as usize] = 1;
        let snap = Snapshot {
            ports: vec![PortStats {
                id: 0,
                name: "p1".into(),
                kind: Some("pcap".into()),
                master: Some("br0".into()),
                running: true,
                link_up: true,
                link_downs: 1,
                counters,
                status: Some(BackendStatus {
                    open: true,
                    device_mtu: Some(1504),
                    offloads: Some(qbridge_control::DeviceOffloadStatus {
                        tso4: false,
                        tso6: true,
                        ..Default::default()
                    }),
                    counters: BackendCounters {
                        tx_sw_gso: 7,
                        rx_frames_by_worker: vec![2, 1],
                        tx_gro_frames: 3,
                        tx_gro_segments: 9,
                        tx_gso_refused: 2,
                    },
                    ..BackendStatus::default()
                }),
            }],
            bridges: vec![BridgeStats {
                name: "br0".into(),
                fdb_entries: 1,
                fdb_learned: 1,
                vlans: vec![VlanStats {
                    vid: 10,
                    counters: VlanCounters {
                        rx_frames: 1,
                        rx_bytes: 60,
                        ..VlanCounters::default()
                    },
                }],
            }],
            mirrors: vec![MirrorStats {
                name: "m1".into(),
                counters: mirror,
            }],
            unknown_port_drops: 0,
            workers: 2,
            state_unsaved: Some(true),
            fast_path: None,
            stp: vec![qbridge_control::stats::StpStats {
                bridge: "br0".into(),
                root: true,
                topology_changes: 3,
                ports: vec![qbridge_control::stats::StpPortStats {
                    port: "p1".into(),
                    role: "designated",
                    state: 2,
                    bpdu_rx: 5,
                    bpdu_tx: 6,
                }],
            }],
            bond_members: vec![qbridge_control::BondMemberStats {
                bond: "bo".into(),
                member: "m1".into(),
                port_number: 1,
                link_up: true,
                collecting: true,
                distributing: true,
                lacpdu_rx: 7,
                lacpdu_tx: 8,
                tx_bytes: 1000,
                ..Default::default()
            }],
        };
        let t = render(&snap);
        assert!(
            t.contains("qbridge_port_rx_frames_total{port=\"p1\"} 3\n"),
            "{t}"
        );
        assert!(t.contains("qbridge_port_drops_total{port=\"p1\",reason=\"vlan_not_member\"} 2\n"));
        assert!(t.contains("qbridge_vlan_rx_frames_total{bridge=\"br0\",vlan=\"10\"} 1\n"));
        assert!(t.contains("qbridge_fdb_entries{bridge=\"br0\"} 1\n"));
        assert!(t.contains("qbridge_port_device_mtu{port=\"p1\"} 1504\n"));
        assert!(t.contains("qbridge_port_link_down_events_total{port=\"p1\"} 1\n"));
        assert!(t.contains("# TYPE qbridge_port_drops_total counter\n"));
        assert!(t.contains("qbridge_port_tx_sw_gso_total{port=\"p1\"} 7\n"));
        assert!(t.contains("qbridge_port_worker_rx_frames_total{port=\"p1\",worker=\"1\"} 1\n"));
        assert!(t.contains("qbridge_workers 2\n"));
        assert!(t.contains("qbridge_state_unsaved 1\n"));
        assert!(t.contains("qbridge_port_tx_gro_segments_total{port=\"p1\"} 9\n"));
        assert!(t.contains("qbridge_port_tx_gso_refused_total{port=\"p1\"} 2\n"));
        assert!(t.contains("qbridge_port_device_offload{port=\"p1\",feature=\"tso4\"} 0\n"));
        assert!(t.contains("qbridge_port_device_offload{port=\"p1\",feature=\"tso6\"} 1\n"));
        assert!(t.contains("qbridge_mirror_frames_total{session=\"m1\"} 4\n"));
        assert!(t.contains("qbridge_mirror_bytes_total{session=\"m1\"} 256\n"));
        assert!(t.contains("qbridge_mirror_drops_total{session=\"m1\",reason=\"oversize\"} 1\n"));
        assert!(t.contains("qbridge_stp_root{bridge=\"br0\"} 1\n"));
        assert!(t.contains("qbridge_stp_topology_changes_total{bridge=\"br0\"} 3\n"));
        assert!(t.contains(
            "qbridge_stp_port_state{bridge=\"br0\",port=\"p1\",role=\"designated\"} 2\n"
        ));
        assert!(t.contains("qbridge_stp_bpdu_rx_total{bridge=\"br0\",port=\"p1\"} 5\n"));
        assert!(t.contains("qbridge_stp_bpdu_tx_total{bridge=\"br0\",port=\"p1\"} 6\n"));
        assert!(t.contains("qbridge_bond_member_lacpdu_rx_total{bond=\"bo\",member=\"m1\"} 7\n"));
        assert!(t.contains("qbridge_bond_member_distributing{bond=\"bo\",member=\"m1\"} 1\n"));
        assert!(t.contains("qbridge_bond_member_tx_bytes_total{bond=\"bo\",member=\"m1\"} 1000\n"));
    }

    #[test]
    fn renders_the_fast_path() {
        let mut fp = qbridge_control::FastPathStatus {
            hits: 41,
            installed: 3,
            stale_upcalls: 2,
            ..Default::default()
        };
        fp.misses.insert("no_flow".into(), 5);
        fp.not_cached.insert("outputs".into(), 7);
        let snap = Snapshot {
            fast_path: Some(fp),
            ..Snapshot::default()
        };
        let t = render(&snap);
        assert!(t.contains("qbridge_fast_path_hits_total 41\n"), "{t}");
        assert!(t.contains("qbridge_fast_path_misses_total{reason=\"no_flow\"} 5\n"));
        assert!(t.contains("qbridge_fast_path_flows_installed_total 3\n"));
        assert!(t.contains("qbridge_fast_path_not_cached_total{reason=\"outputs\"} 7\n"));
        assert!(t.contains("qbridge_fast_path_stale_upcalls_total 2\n"));
        assert!(!render(&Snapshot::default()).contains("fast_path"));
    }

    #[test]
    fn non_loopback_needs_public() {
        assert!(resolve("127.0.0.1:9477", false).is_ok());
        let e = resolve("0.0.0.0:9477", false).unwrap_err().to_string();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!(resolve("0.0.0.0:9477", true).is_ok());
        assert!(resolve("nonsense", false).is_err());
    }
}
