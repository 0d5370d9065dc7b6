//! `qbridge-evpn-bench`: the control plane's benchmark (issue 31; run by
//! `scripts/bench-evpn.sh`, which builds the namespaces and starts the processes).
//!
//! Injects N type-2 (MAC only) routes from M VTEPs, and one type-3 route per VTEP, into one
//! or more gobgpds through their API (`AddPathStream`, 1000 paths a message; VTEP `m`'s
//! routes into injector `m % K`, the K in parallel), then times how long the
//! receivers take to hold all N: the qbridge daemon behind `qbridge-evpn` (`fdb show -j`:
//! the VXLAN port's `extern_learn` entries with a `dst`) and, when given, FRR (the kernel FDB
//! of zebra's vxlan device, `bridge fdb show dev DEV`); then withdraws them all (`DeletePath`
//! of the family) and times how long until both hold none. The CPU each listed process spent
//! (utime + stime, /proc/PID/stat) from the injection to the side's completion is printed
//! beside it.
//!
//! Why several injectors: gobgpd 3.10 checks every type-2 route added through its API
//! against every EVPN best path it holds (`fixupApiPath`, for MAC mobility), so one gobgpd
//! takes N routes in O(N²): 50 000 took 507 s alone here (99 routes/s). K injectors, each
//! standing for its share of the VTEPs as real VTEPs each have their own speaker, take
//! 1/K² of that each.

use anyhow::{bail, Context, Result};
use qbridge_evpn::daemon::Daemon;
use qbridge_evpn::gobgp::Gobgp;
use qbridge_evpn::route::{self, ExtCommunity, Nlri, Rd, TUNNEL_VXLAN};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: qbridge-evpn-bench --inject HOST:PORT,... --routes N --vteps M --socket PATH
                          [--pids NAME=PID,...] [--frr-ns NS --frr-dev DEV
                          --frr-pids NAME=PID,...] [--vni N] [--asn N] [--timeout-s S]
                          [--ipv6]

  --inject HOST:PORT,...  the gobgpds the routes are injected into (their APIs; VTEP m's
                      routes into the (m mod K)th)
  --routes N          type-2 routes (MAC only), spread evenly over the VTEPs
  --vteps M           remote VTEPs 10.100.0.1 onwards (a type-3 route each)
  --ipv6              the remote VTEPs are 2001:db8:100::1 onwards (next hops, originators
                      and PMSI endpoints IPv6; RDs 10.100.0.N:VNI): an IPv6 underlay
  --socket PATH       the qbridge daemon's control socket (the adapter's side)
  --dev NAME          its VXLAN port (default vx0)
  --pids              the qbridge side's processes to account (qbridge-evpn, gobgpd, ...)
  --frr-ns NS         FRR's namespace; --frr-dev its vxlan device; --frr-pids bgpd, zebra
  --vni N             default 100; --asn N: the route targets' AS (default 65000)
  --timeout-s S       give up on a side after S seconds (default 900)
  --withdraw no       leave the routes in place (tests): install only
";

struct Options {
    inject: Vec<String>,
    routes: u32,
    vteps: u32,
    socket: PathBuf,
    dev: String,
    pids: Vec<(String, u32)>,
    frr_ns: Option<String>,
    frr_dev: String,
    frr_pids: Vec<(String, u32)>,
    vni: u32,
    asn: u16,
    timeout: Duration,
    withdraw: bool,
    ipv6: bool,
}

fn pids(s: &str) -> Result<Vec<(String, u32)>> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, pid) = p.split_once('=').context("NAME=PID")?;
            Ok((n.to_string(), pid.parse().context("a PID")?))
        })
        .collect()
}

fn options() -> Result<Options> {
    let mut o = Options {
        inject: Vec::new(),
        routes: 0,
        vteps: 1,
        socket: PathBuf::new(),
        dev: "vx0".into(),
        pids: Vec::new(),
        frr_ns: None,
        frr_dev: "vx100".into(),
        frr_pids: Vec::new(),
        vni: 100,
        asn: 65000,
        timeout: Duration::from_secs(900),
        withdraw: true,
        ipv6: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--ipv6" {
            o.ipv6 = true;
            continue;
        }
        let v = args
            .next()
            .with_context(|| format!("{a} needs a value\n{USAGE}"))?;
        match a.as_str() {
            "--inject" => o.inject = v.split(',').map(String::from).collect(),
            "--routes" => o.routes = v.parse().context("--routes")?,
            "--vteps" => o.vteps = v.parse().context("--vteps")?,
            "--socket" => o.socket = v.into(),
            "--dev" => o.dev = v,
            "--pids" => o.pids = pids(&v)?,
            "--frr-ns" => o.frr_ns = Some(v),
            "--frr-dev" => o.frr_dev = v,
            "--frr-pids" => o.frr_pids = pids(&v)?,
            "--vni" => o.vni = v.parse().context("--vni")?,
            "--asn" => o.asn = v.parse().context("--asn")?,
            "--timeout-s" => o.timeout = Duration::from_secs(v.parse().context("--timeout-s")?),
            "--withdraw" => o.withdraw = v != "no",
            _ => bail!("unknown option {a:?}\n{USAGE}"),
        }
    }
    if o.inject.is_empty() || o.routes == 0 || o.vteps == 0 || o.socket.as_os_str().is_empty() {
        bail!("--inject, --routes, --vteps and --socket are needed\n{USAGE}");
    }
    Ok(o)
}

/// The `i`th remote VTEP's RD address: 10.100.0.1, 10.100.0.2, ...
fn vtep4(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 100, 0, 0)) + 1 + i)
}

/// The `i`th remote VTEP: 10.100.0.1, ... (`--ipv6`: 2001:db8:100::1, ...).
fn vtep(o: &Options, i: u32) -> IpAddr {
    if o.ipv6 {
        let base = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0));
        IpAddr::V6(Ipv6Addr::from(base + 1 + u128::from(i)))
    } else {
        IpAddr::V4(vtep4(i))
    }
}

type Routes = Vec<(Vec<u8>, Vec<Vec<u8>>)>;

/// The routes per injector: a type-3 per VTEP, then N type-2, route `i` from VTEP `i % M`,
/// VTEP `m`'s routes into injector `m % K`.
fn routes(o: &Options) -> Vec<Routes> {
    let k = o.inject.len();
    let comms = [
        ExtCommunity::RouteTarget {
            asn: o.asn,
            value: o.vni,
        },
        ExtCommunity::Encapsulation {
            tunnel_type: TUNNEL_VXLAN,
        },
    ];
    let rd_of = |m: u32| Rd::ip(vtep4(m), (o.vni & 0xffff) as u16);
    let mut out: Vec<Routes> = vec![Vec::new(); k];
    for m in 0..o.vteps {
        let v = vtep(o, m);
        let nlri = Nlri::Imet {
            rd: rd_of(m),
            etag: 0,
            origin: v,
        };
        out[m as usize % k].push((
            nlri.encode(),
            route::originate_attrs(&nlri, v, &comms, Some(o.vni)),
        ));
    }
    for i in 0..o.routes {
        let v = vtep(o, i % o.vteps);
        let b = i.to_be_bytes();
        let nlri = Nlri::Mac {
            rd: rd_of(i % o.vteps),
            etag: 0,
            mac: [0x02, 0xbe, b[0], b[1], b[2], b[3]],
            vni: o.vni,
        };
        out[(i % o.vteps) as usize % k].push((
            nlri.encode(),
            route::originate_attrs(&nlri, v, &comms, None),
        ));
    }
    out
}

/// utime + stime of `pid`, in seconds (0 when it is gone).
fn cpu(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(rest) = s.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

fn cpus(p: &[(String, u32)]) -> Vec<f64> {
    p.iter().map(|(_, pid)| cpu(*pid)).collect()
}

/// How many remote MACs the qbridge daemon's VXLAN port holds.
fn qbridge_count(o: &Options, d: &mut Option<Daemon>) -> Result<usize> {
    if d.is_none() {
        *d = Some(Daemon::connect(&o.socket)?);
    }
    let fdb = d.as_mut().map(|d| d.fdb()).transpose()?.unwrap_or_default();
    Ok(fdb
        .iter()
        .filter(|e| e.ifname == o.dev && e.dst.is_some() && e.mac != [0; 6] && e.extern_learn)
        .count())
}

/// How many remote MACs FRR's vxlan device holds in the kernel.
fn frr_count(ns: &str, dev: &str) -> Result<usize> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "bridge", "fdb", "show", "dev", dev])
        .output()
        .context("bridge fdb show")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" dst ") && !l.starts_with("00:00:00:00:00:00"))
        .count())
}

struct Side {
    name: &'static str,
    done: Option<Duration>,
    count: usize,
    cpu0: Vec<f64>,
    cpu: Vec<f64>,
}

/// Polls both sides until each holds `target` remote MACs (or the timeout).
fn phase(o: &Options, what: &str, target: usize, act: impl FnOnce() -> Result<()>) -> Result<()> {
    let mut d = None;
    let mut sides = vec![Side {
        name: "qbridge-evpn",
        done: None,
        count: 0,
        cpu0: cpus(&o.pids),
        cpu: Vec::new(),
    }];
    if o.frr_ns.is_some() {
        sides.push(Side {
            name: "FRR",
            done: None,
            count: 0,
            cpu0: cpus(&o.frr_pids),
            cpu: Vec::new(),
        });
    }
    let t0 = Instant::now();
    act()?;
    let injected = t0.elapsed();
    loop {
        let mut pending = false;
        for (i, s) in sides.iter_mut().enumerate() {
            if s.done.is_some() {
                continue;
            }
            s.count = if i == 0 {
                qbridge_count(o, &mut d).unwrap_or(s.count)
            } else {
                frr_count(o.frr_ns.as_deref().unwrap_or(""), &o.frr_dev).unwrap_or(s.count)
            };
            let at = t0.elapsed();
            if s.count == target || at > o.timeout {
                s.done = Some(at);
                s.cpu = cpus(if i == 0 { &o.pids } else { &o.frr_pids });
            } else {
                pending = true;
            }
        }
        if !pending {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "{what} {} type-2 routes from {} VTEPs ({} injectors took {:.2} s):",
        o.routes,
        o.vteps,
        o.inject.len(),
        injected.as_secs_f64()
    );
    for (i, s) in sides.iter().enumerate() {
        let t = s.done.unwrap_or_default().as_secs_f64();
        let names = if i == 0 { &o.pids } else { &o.frr_pids };
        let mut cpu = String::new();
        for ((n, _), (a, b)) in names.iter().zip(s.cpu0.iter().zip(&s.cpu)) {
            cpu.push_str(&format!(
                " {n} {:.2} s ({:.3} ms/route)",
                b - a,
                (b - a) * 1000.0 / f64::from(o.routes)
            ));
        }
        let ok = if s.count == target {
            String::new()
        } else {
            format!(" INCOMPLETE: {} of the {target} expected", s.count)
        };
        println!(
            "  {:<13} {:>8.2} s {:>9.0} routes/s; CPU{cpu}{ok}",
            s.name,
            t,
            f64::from(o.routes) / t.max(1e-9)
        );
    }
    Ok(())
}

/// Runs `f` on every injector at once (a thread and a connection each).
fn each_injector(
    gs: &mut [Gobgp],
    work: Vec<Routes>,
    f: fn(&mut Gobgp, Routes) -> Result<(), qbridge_evpn::gobgp::GobgpError>,
) -> Result<()> {
    std::thread::scope(|s| {
        let hs: Vec<_> = gs
            .iter_mut()
            .zip(work)
            .map(|(g, w)| s.spawn(move || f(g, w)))
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| anyhow::anyhow!("an injector thread panicked"))??;
        }
        Ok(())
    })
}

fn main() -> Result<()> {
    let o = options()?;
    // No deadline: 50 k paths take longer than a call's 5 s.
    let mut gs = o
        .inject
        .iter()
        .map(|a| Gobgp::connect_watch(a))
        .collect::<Result<Vec<_>, _>>()?;
    let n = o.routes as usize;
    let rs = routes(&o);
    let k = gs.len();
    phase(&o, "install", n, || {
        each_injector(&mut gs, rs, |g, r| g.add_paths(r))
    })?;
    if !o.withdraw {
        return Ok(());
    }
    phase(&o, "withdraw", 0, || {
        each_injector(&mut gs, vec![Vec::new(); k], |g, _| g.delete_all())
    })?;
    Ok(())
}
