//! `qbridge-evpn`: EVPN (RFC 7432, RFC 8365) for a qbridge daemon's VXLAN ports through a
//! BGP speaker that is not ours: gobgpd, driven by its gRPC API (docs/evpn.md,
//! docs/decisions.md 57).
//!
//! One thread runs a loop that keeps mirrors of both sides ([`mirror`]) and decides
//! ([`reconcile`]) and acts (`AddPath`/`DeletePath`, `fdb … extern_learn` commands, one batch
//! a pass). A second thread holds the daemon's `monitor -j fdb link vlan` stream, a third
//! gobgpd's `WatchEvent` stream (best-path changes, typed: [`typed`]); their events change
//! the mirrors and name the MACs to decide for, so a pass costs what changed, not the size of
//! the tables (docs/decisions.md 76). A whole pass — both sides read whole (`fdb show -j`,
//! `ListPath`), every MAC decided — runs at start, whenever a stream (re)starts, ends or
//! says it lost events, when a link or VLAN changes, and every `--interval-ms` as the safety
//! net; while either stream is down, every pass is whole (the level-triggered adapter of
//! before). A connection lost is retried; a restart of either side (or of the adapter)
//! re-derives everything from the whole pass.

use anyhow::{bail, Context, Result};
use qbridge_evpn::mirror::{FdbMirror, RibMirror};
use qbridge_evpn::reconcile::{self, Action, FdbEntry, Route, VxlanPort};
use qbridge_evpn::route::RouteKey;
use qbridge_evpn::{daemon, gobgp, route, typed};
use std::collections::BTreeSet;
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
  --interval-ms N    how often both sides are read whole anyway, the safety net
                     (default: 30000; changes are followed from the event streams)
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
        interval: Duration::from_millis(30_000),
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
                    .filter(|&ms| (10..=3_600_000).contains(&ms))
                    .with_context(|| format!("--interval-ms {v}: 10 to 3600000"))?;
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
    refused: BTreeSet<String>,
    /// The peers' routes the last whole pass left out, their VTEP of the other address
    /// family than the port's (decision 81; logged when new).
    ignored: BTreeSet<String>,
}

/// Both sides as the adapter knows them: read whole by the last whole pass, changed since by
/// the streams' events and the adapter's own actions.
#[derive(Default)]
struct Mirrors {
    ports: Vec<VxlanPort>,
    rib: RibMirror,
    fdb: FdbMirror,
}

fn connect(o: &Options, l: &mut Links) -> Result<()> {
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
    Ok(())
}

/// A path of gobgpd's as the decision takes it, with its key (`None`: not an EVPN route of
/// the two types). Paths gobgpd originated for us have no neighbour address.
fn route_of(p: &gobgp::Path) -> Option<(RouteKey, Route)> {
    if p.family.as_ref().is_some_and(|f| *f != gobgp::evpn()) {
        return None;
    }
    let (nlri, ip, attrs) = typed::path(p)?;
    let local = p
        .neighbor_ip
        .parse::<IpAddr>()
        .map_or(true, |ip| ip.is_unspecified());
    Some((
        RouteKey::of(&nlri, ip),
        Route {
            nlri,
            attrs,
            local,
            best: p.best,
        },
    ))
}

/// The whole pass: read both sides, replace the mirrors, decide for everything, act.
fn whole(o: &Options, l: &mut Links, m: &mut Mirrors) -> Result<usize> {
    connect(o, l)?;
    let (Some(d), Some(g)) = (l.daemon.as_mut(), l.gobgp.as_mut()) else {
        return Ok(0);
    };
    m.ports = d.vxlan_ports()?;
    m.fdb = FdbMirror::from_entries(d.fdb()?);
    m.rib = RibMirror::from_paths(g.list_paths()?.iter().filter_map(route_of));
    let fdb: Vec<FdbEntry> = m.fdb.all().cloned().collect();
    let rib: Vec<Route> = m.rib.all().cloned().collect();
    let asn = l.asn.unwrap_or_default();
    let actions = reconcile::reconcile_rid(asn, l.router_id, &m.ports, &fdb, &rib);
    let ignored: BTreeSet<String> = reconcile::ignored(asn, &m.ports, &rib)
        .into_iter()
        .collect();
    for i in ignored.difference(&l.ignored) {
        eprintln!("qbridge-evpn: {i}");
    }
    l.ignored = ignored;
    act(l, m, &actions)
}

/// A pass for the MACs the events named (and the flood lists when `flood`): only their
/// entries and paths, from the mirrors; nothing is read.
fn part(
    o: &Options,
    l: &mut Links,
    m: &mut Mirrors,
    macs: &BTreeSet<[u8; 6]>,
    flood: bool,
) -> Result<usize> {
    connect(o, l)?;
    let mut fdb: Vec<FdbEntry> = Vec::new();
    let mut rib: Vec<Route> = Vec::new();
    for mac in macs {
        fdb.extend(m.fdb.of_mac(mac).iter().cloned());
        rib.extend(m.rib.of_mac(mac).cloned());
    }
    if flood {
        fdb.extend(m.fdb.of_mac(&[0; 6]).iter().cloned());
        rib.extend(m.rib.imets().cloned());
    }
    let asn = l.asn.unwrap_or_default();
    let actions = reconcile::reconcile_part(asn, l.router_id, &m.ports, &fdb, &rib, flood);
    // A route of the other family is said when it first comes, not at the next whole pass
    // (which then keeps the set whole: it drops the withdrawn ones).
    for i in reconcile::ignored(asn, &m.ports, &rib) {
        if !l.ignored.contains(&i) {
            eprintln!("qbridge-evpn: {i}");
            l.ignored.insert(i);
        }
    }
    act(l, m, &actions)
}

/// Carries out a pass's actions and applies them to the mirrors. Returns their count.
fn act(l: &mut Links, m: &mut Mirrors, actions: &[Action]) -> Result<usize> {
    let (Some(d), Some(g)) = (l.daemon.as_mut(), l.gobgp.as_mut()) else {
        return Ok(0);
    };
    let mut refused = BTreeSet::new();
    // The daemon's commands of the pass go as one batch (one request, one change of its
    // state, however many routes: decision 70); BGP's actions one call each.
    let mut cmds: Vec<String> = Vec::new();
    for a in actions {
        eprintln!("qbridge-evpn: {a}");
        match a {
            Action::Advertise {
                nlri,
                next_hop,
                communities,
                pmsi_vni,
            } => {
                let attrs = route::originate_attrs(nlri, *next_hop, communities, *pmsi_vni);
                let decoded = route::Attrs::decode(&attrs);
                g.add_path(nlri.encode(), attrs)?;
                m.rib.originated(
                    RouteKey::of(nlri, None),
                    Route {
                        nlri: *nlri,
                        attrs: decoded,
                        local: true,
                        best: true,
                    },
                );
            }
            Action::Withdraw(nlri) => {
                g.delete_path(nlri.encode())?;
                m.rib.withdrew(&RouteKey::of(nlri, None));
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
    if batched.is_ok() {
        for cmd in &cmds {
            m.fdb.apply(cmd, &m.ports);
        }
    } else {
        // One command, or a batch refused (all-or-nothing: one line stood in the way): each
        // alone, so the others are done and the refused one is named.
        for cmd in &cmds {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            // A refusal (the entry changed under us, or the operator's configuration
            // stands in the way) is logged once; the next passes see why.
            match d.run(&words) {
                Ok(_) => {
                    m.fdb.apply(cmd, &m.ports);
                }
                Err(e @ daemon::DaemonError::Refused { .. }) => {
                    let msg = e.to_string();
                    if !l.refused.contains(&msg) {
                        eprintln!("qbridge-evpn: {msg}");
                    }
                    refused.insert(msg);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    l.refused = refused;
    Ok(actions.len())
}

/// What the streams' threads tell the loop.
enum Event {
    Daemon(daemon::Change),
    /// The daemon's monitor ended (the daemon went, or the connection broke).
    DaemonLost,
    /// gobgpd's watch is established: its first message (the best paths then, `init`) came.
    BgpWatching,
    /// A best-path change: the paths.
    Bgp(Vec<gobgp::Path>),
    BgpLost,
}

/// The loop's state between passes.
struct Follow {
    /// Both streams are up, and a whole pass ran since they came up: the mirrors are
    /// followed by events and a pass may be a part.
    daemon_watching: bool,
    bgp_watching: bool,
    mirrored: bool,
    /// Why the next pass must be whole, every reason that came before it ran (`None`: a part
    /// will do).
    whole: Option<String>,
    macs: BTreeSet<[u8; 6]>,
    flood: bool,
}

impl Follow {
    fn resync(&mut self, why: &'static str) {
        match &mut self.whole {
            Some(w) if w.split(", ").any(|r| r == why) => {}
            Some(w) => {
                w.push_str(", ");
                w.push_str(why);
            }
            None => self.whole = Some(why.to_string()),
        }
    }

    fn take(&mut self, ev: Event, m: &mut Mirrors) {
        match ev {
            Event::Daemon(daemon::Change::Watching) => {
                self.daemon_watching = true;
                self.resync("the daemon's monitor started");
            }
            Event::Daemon(daemon::Change::Resync) => self.resync("a link or VLAN changed"),
            Event::Daemon(daemon::Change::Fdb { entry, deleted }) => {
                let mac = entry.mac;
                if self.mirrored {
                    if deleted {
                        m.fdb.remove(&entry);
                    } else {
                        m.fdb.upsert(entry);
                    }
                }
                self.name(mac);
            }
            Event::DaemonLost => {
                self.daemon_watching = false;
                self.mirrored = false;
                self.resync("the daemon's monitor ended");
            }
            Event::BgpWatching => {
                self.bgp_watching = true;
                self.resync("gobgpd's watch started");
            }
            Event::Bgp(paths) => {
                for p in &paths {
                    let Some((key, r)) = route_of(p) else {
                        continue;
                    };
                    if self.mirrored {
                        m.rib.best(key, r, p.is_withdraw);
                    }
                    match key.mac() {
                        Some(mac) => self.name(mac),
                        None => self.flood = true,
                    }
                }
            }
            Event::BgpLost => {
                self.bgp_watching = false;
                self.mirrored = false;
                self.resync("gobgpd's watch ended");
            }
        }
    }

    fn name(&mut self, mac: [u8; 6]) {
        if mac == [0; 6] {
            self.flood = true;
        } else {
            self.macs.insert(mac);
        }
    }
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
        ignored: Default::default(),
    };
    let mut m = Mirrors::default();
    if o.once {
        match whole(&o, &mut l, &mut m) {
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
    let (tx, events) = mpsc::channel();
    let tx_bgp = tx.clone();
    let socket = o.socket.clone();
    std::thread::spawn(move || loop {
        let _ = daemon::watch(&socket, |c| tx.send(Event::Daemon(c)).is_ok());
        if tx.send(Event::DaemonLost).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    let (addr, tx) = (o.gobgp.clone(), tx_bgp);
    std::thread::spawn(move || loop {
        if let Ok(mut g) = gobgp::Gobgp::connect_watch(&addr) {
            // The first message is the table then (`init`): the watch is registered, so
            // a whole read from now on misses no change.
            let mut first = true;
            let _ = g.watch(|paths| {
                if std::mem::take(&mut first) {
                    tx.send(Event::BgpWatching).is_ok()
                } else {
                    tx.send(Event::Bgp(paths)).is_ok()
                }
            });
        }
        if tx.send(Event::BgpLost).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    });
    let mut f = Follow {
        daemon_watching: false,
        bgp_watching: false,
        mirrored: false,
        whole: Some("start".to_string()),
        macs: BTreeSet::new(),
        flood: false,
    };
    let mut failing = false;
    let mut last = Duration::ZERO;
    let mut last_whole = Instant::now();
    loop {
        let idle = f.whole.is_none() && f.macs.is_empty() && !f.flood;
        if idle {
            let wait = o.interval.saturating_sub(last_whole.elapsed());
            match events.recv_timeout(wait) {
                Ok(ev) => f.take(ev, &mut m),
                Err(_) => f.resync("every --interval-ms"),
            }
        }
        // Coalesce a burst (routes arrive an UPDATE at a time, each a WatchEvent; the
        // daemon's lines follow the batch): wait until the events pause for 20 ms, or as
        // long as the last pass took (at most 1 s), so one pass takes in many (decision 70).
        let settle = last.clamp(Duration::from_millis(20), Duration::from_secs(1));
        let t0 = Instant::now();
        while t0.elapsed() < settle {
            match events.recv_timeout(Duration::from_millis(20)) {
                Ok(ev) => f.take(ev, &mut m),
                Err(_) => break,
            }
        }
        while let Ok(ev) = events.try_recv() {
            f.take(ev, &mut m);
        }
        if last_whole.elapsed() >= o.interval {
            f.resync("every --interval-ms");
        }
        // Without both streams every pass is whole: nothing else is sure to see a change.
        if !(f.daemon_watching && f.bgp_watching) && (f.flood || !f.macs.is_empty()) {
            f.resync("a stream is down");
        }
        let t0 = Instant::now();
        let r = match f.whole.take() {
            Some(why) => {
                f.macs.clear();
                f.flood = false;
                last_whole = Instant::now();
                let r = whole(&o, &mut l, &mut m);
                if let (Ok(n), false) = (&r, why.starts_with("every")) {
                    eprintln!(
                        "qbridge-evpn: whole pass ({why}): {} paths, {} entries, {n} actions",
                        m.rib.len(),
                        m.fdb.len()
                    );
                }
                if r.is_ok() {
                    f.mirrored = f.daemon_watching && f.bgp_watching;
                }
                r
            }
            None => {
                let macs = std::mem::take(&mut f.macs);
                let flood = std::mem::take(&mut f.flood);
                part(&o, &mut l, &mut m, &macs, flood)
            }
        };
        last = t0.elapsed();
        match r {
            Ok(_) => {
                if failing {
                    eprintln!("qbridge-evpn: in sync again");
                    failing = false;
                }
            }
            Err(e) => {
                if !failing {
                    eprintln!(
                        "qbridge-evpn: {e:#}; retrying every {} ms",
                        o.interval.as_millis().min(2000)
                    );
                    failing = true;
                }
                // Reconnect both: either may have restarted; then read both whole.
                l.daemon = None;
                l.gobgp = None;
                if o.asn.is_none() {
                    l.asn = None;
                }
                f.mirrored = false;
                f.resync("after an error");
                std::thread::sleep(Duration::from_millis(
                    o.interval.as_millis().min(2000) as u64
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole pass names every reason that came before it ran, once each: a watch that starts
    /// while the first pass is pending is in that pass's log line (`netns_evpn` waits for it).
    #[test]
    fn a_pending_whole_pass_keeps_every_reason() {
        let mut f = Follow {
            daemon_watching: false,
            bgp_watching: false,
            mirrored: false,
            whole: Some("start".to_string()),
            macs: BTreeSet::new(),
            flood: false,
        };
        f.resync("the daemon's monitor started");
        f.resync("gobgpd's watch started");
        f.resync("gobgpd's watch started");
        assert_eq!(
            f.whole.take().as_deref(),
            Some("start, the daemon's monitor started, gobgpd's watch started")
        );
        f.resync("every --interval-ms");
        assert_eq!(f.whole.as_deref(), Some("every --interval-ms"));
    }
}
