//! `qbridge-evpn`: EVPN (RFC 7432, RFC 8365) for a qbridge daemon's VXLAN ports through a
//! BGP speaker that is not ours: gobgpd, driven by its gRPC API (docs/evpn.md,
//! docs/decisions.md 57).
//!
//! One thread runs a loop: read the daemon's VXLAN ports and FDB (control socket) and the
//! speaker's EVPN RIB (`ListPath`), decide ([`reconcile`]), act (`AddPath`/`DeletePath`,
//! `fdb … extern_learn` commands). A second thread holds a `monitor -j fdb link` stream, a
//! third gobgpd's `WatchEvent` stream (best-path changes); both wake the loop on every event,
//! and without events it runs every `--interval-ms` anyway. Either connection lost is retried on
//! the next pass; nothing is remembered between passes, so a restart of either side (or of
//! the adapter) re-derives everything.

use anyhow::{bail, Context, Result};
use qbridge_evpn::reconcile::{self, Action, Route};
use qbridge_evpn::{daemon, gobgp, route};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: qbridge-evpn [--socket PATH] [--gobgp HOST:PORT] [--asn N] [--interval-ms N] [--once]

EVPN for a qbridge daemon's VXLAN ports through gobgpd's gRPC API (docs/evpn.md):
advertises a type-3 route per bridge domain (a VXLAN port's `id`, or each VNI an `external`
port maps a VLAN to) and a type-2 route per MAC the port's bridge learned elsewhere (in that
VLAN), installs the peers' routes as `fdb … extern_learn` entries.

  --socket PATH      the daemon's control socket (default: $QBRIDGE_SOCKET, else the
                     default of this network namespace, as qbridge finds it:
                     /run/qbridge/qbridge.sock in the host's, /run/qbridge/netns/NAME.sock
                     in namespace NAME)
  --gobgp HOST:PORT  gobgpd's API (default: 127.0.0.1:50051)
  --asn N            the AS of the route targets ASN:VNI (default: gobgpd's own AS)
  --interval-ms N    how often both sides are read when neither reports a change
                     (default: 2000)
  --once             one pass, then exit (its actions printed)
  --rd-auto          route distinguishers VTEP:VNI (the default and only mode today)
";

#[derive(Debug)]
struct Options {
    socket: PathBuf,
    gobgp: String,
    asn: Option<u16>,
    interval: Duration,
    once: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        socket: std::env::var_os("QBRIDGE_SOCKET")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| qbridge_io::netns::OwnNetns::current().default_socket()),
        gobgp: "127.0.0.1:50051".into(),
        asn: None,
        interval: Duration::from_millis(2000),
        once: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .with_context(|| format!("{a} needs {what}\n{USAGE}"))
        };
        match a.as_str() {
            "--socket" => o.socket = PathBuf::from(value("a path")?),
            "--gobgp" => o.gobgp = value("HOST:PORT")?,
            "--asn" => {
                let v = value("an AS number")?;
                o.asn = Some(v.parse().with_context(|| {
                    format!("--asn {v}: a 2-byte AS number (1-65535) for the route targets")
                })?);
            }
            "--interval-ms" => {
                let v = value("milliseconds")?;
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|&ms| (10..=60_000).contains(&ms))
                    .with_context(|| format!("--interval-ms {v}: 10 to 60000"))?;
                o.interval = Duration::from_millis(ms);
            }
            "--once" => o.once = true,
            "--rd-auto" => {}
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown option {other:?}\n{USAGE}"),
        }
    }
    Ok(o)
}

/// The live connections; `None` until (re)connected.
struct Links {
    daemon: Option<daemon::Daemon>,
    gobgp: Option<gobgp::Gobgp>,
    asn: Option<u16>,
    /// gobgpd's router id: the RD of an IPv6 VTEP's routes (`Rd::for_vtep`).
    router_id: Option<std::net::Ipv4Addr>,
    /// The refusals of the last pass (logged when new).
    refused: std::collections::BTreeSet<String>,
}

/// One pass: read both sides, decide, act. Returns how many actions it took.
fn pass(o: &Options, l: &mut Links) -> Result<usize> {
    if l.daemon.is_none() {
        l.daemon = Some(daemon::Daemon::connect(&o.socket)?);
        eprintln!(
            "qbridge-evpn: connected to the daemon at {}",
            o.socket.display()
        );
    }
    if l.gobgp.is_none() {
        let mut g = gobgp::Gobgp::connect(&o.gobgp)?;
        if l.asn.is_none() {
            let asn = g.asn()?;
            // gobgpd answers before it has read its configuration: AS 0 until then (route
            // targets 0:VNI would match no peer's); the next pass asks again.
            if asn == 0 {
                bail!(
                    "gobgpd at {} has no AS yet (configuration not read, or no [global.config] as)",
                    o.gobgp
                );
            }
            l.asn = Some(u16::try_from(asn).with_context(|| {
                format!("gobgpd's AS {asn} does not fit a 2-byte route target; give --asn")
            })?);
        }
        l.router_id = g.router_id()?;
        l.gobgp = Some(g);
        eprintln!("qbridge-evpn: connected to gobgpd at {}", o.gobgp);
    }
    let (Some(d), Some(g), Some(asn)) = (l.daemon.as_mut(), l.gobgp.as_mut(), l.asn) else {
        return Ok(0);
    };
    let ports = d.vxlan_ports()?;
    let fdb = d.fdb()?;
    let rib: Vec<Route> = g
        .list_paths()?
        .into_iter()
        .filter_map(|p| {
            let nlri = route::Nlri::decode(&p.nlri_binary)?;
            // Paths gobgpd originated for us have no neighbour address.
            let local = p
                .neighbor_ip
                .parse::<IpAddr>()
                .map_or(true, |ip| ip.is_unspecified());
            Some(Route {
                nlri,
                attrs: route::Attrs::decode(&p.pattrs_binary),
                local,
                best: p.best,
            })
        })
        .collect();
    let actions = reconcile::reconcile_rid(asn, l.router_id, &ports, &fdb, &rib);
    let mut refused = std::collections::BTreeSet::new();
    // The daemon's commands of the pass go as one batch (one request, one change of its
    // state, however many routes: decision 70); BGP's actions one call each.
    let mut cmds: Vec<String> = Vec::new();
    for a in &actions {
        eprintln!("qbridge-evpn: {a}");
        match a {
            Action::Advertise {
                nlri,
                next_hop,
                communities,
                pmsi_vni,
            } => {
                let attrs = route::originate_attrs(nlri, *next_hop, communities, *pmsi_vni);
                g.add_path(nlri.encode(), attrs)?;
            }
            Action::Withdraw(nlri) => {
                g.delete_path(nlri.encode())?;
            }
            Action::Daemon(cmd) => cmds.push(cmd.clone()),
        }
    }
    let batched = match cmds.len() {
        0 => Ok(()),
        1 => Err(()),
        _ => match d.batch(&cmds) {
            Ok(()) => Ok(()),
            Err(daemon::DaemonError::Refused { .. }) => Err(()),
            Err(e) => return Err(e.into()),
        },
    };
    // One command, or a batch refused (all-or-nothing: one line stood in the way): each
    // alone, so the others are done and the refused one is named.
    if batched.is_err() {
        for cmd in &cmds {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            // A refusal (the entry changed under us, or the operator's configuration
            // stands in the way) is logged once; the next passes see why.
            if let Err(e) = d.run(&words) {
                match e {
                    daemon::DaemonError::Refused { .. } => {
                        let msg = e.to_string();
                        if !l.refused.contains(&msg) {
                            eprintln!("qbridge-evpn: {msg}");
                        }
                        refused.insert(msg);
                    }
                    e => return Err(e.into()),
                }
            }
        }
    }
    l.refused = refused;
    Ok(actions.len())
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qbridge-evpn: {e:#}");
            std::process::exit(2);
        }
    };
    let mut l = Links {
        daemon: None,
        gobgp: None,
        asn: o.asn,
        router_id: None,
        refused: Default::default(),
    };
    if o.once {
        match pass(&o, &mut l) {
            Ok(n) => {
                println!("{n} actions");
                return;
            }
            Err(e) => {
                eprintln!("qbridge-evpn: {e:#}");
                std::process::exit(1);
            }
        }
    }
    let (wake, events) = mpsc::channel();
    let wake_bgp = wake.clone();
    let socket = o.socket.clone();
    std::thread::spawn(move || loop {
        if let Err(e) = daemon::watch(&socket, &wake) {
            let _ = e;
        }
        // A new stream (or a daemon back) is worth a pass too.
        if wake.send(()).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    // gobgpd's best-path changes wake the loop too (the peers' routes, at once).
    let (addr, wake) = (o.gobgp.clone(), wake_bgp);
    std::thread::spawn(move || loop {
        if let Ok(mut g) = gobgp::Gobgp::connect_watch(&addr) {
            let _ = g.watch(|| wake.send(()).is_ok());
        }
        if wake.send(()).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    let mut failing = false;
    let mut busy = 0u32;
    let mut last = Duration::ZERO;
    loop {
        // Act again at once after a pass that acted (up to 3 in a row), else wait.
        if busy == 0 || busy > 3 {
            busy = 0;
            let _ = events.recv_timeout(o.interval);
        }
        // Coalesce a burst (routes arrive an UPDATE at a time, each a WatchEvent): wait
        // until the events pause for 20 ms, or as long as the last pass took (at most 1 s),
        // so one pass takes in many routes and its whole reads stay a bounded share of the
        // time however large the tables (decision 70).
        let settle = last.clamp(Duration::from_millis(20), Duration::from_secs(1));
        let t0 = Instant::now();
        while t0.elapsed() < settle {
            match events.recv_timeout(Duration::from_millis(20)) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        while events.try_recv().is_ok() {}
        let t0 = Instant::now();
        let r = pass(&o, &mut l);
        last = t0.elapsed();
        match r {
            Ok(n) => {
                if failing {
                    eprintln!("qbridge-evpn: in sync again");
                    failing = false;
                }
                busy = if n > 0 { busy + 1 } else { 0 };
            }
            Err(e) => {
                if !failing {
                    eprintln!(
                        "qbridge-evpn: {e:#}; retrying every {} ms",
                        o.interval.as_millis()
                    );
                    failing = true;
                }
                // Reconnect both: either may have restarted.
                l.daemon = None;
                l.gobgp = None;
                if o.asn.is_none() {
                    l.asn = None;
                }
                busy = 0;
            }
        }
    }
}
