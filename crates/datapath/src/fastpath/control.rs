//! The control thread's runtime of the fast path: the loaded program and its upcall device,
//! the ports it is attached to, the configuration generation, the FDB map compared whole
//! with the pipeline's, the program's counters folded into the switch's, and what
//! `show fast-path` says. The engine (`engine/fast.rs`) calls these with what it knows of its
//! ports; what is about flows lives here, in the fast path's room.

use super::{fdb_key, mono_now, FastPathMode, FastShared, Refusal};
use qbridge_bridge::{Plan, PortId};
use qbridge_control::FastPathStatus;
use qbridge_fastpath::{FastPath, Miss, Port, PortStats, VlanStats, PORT_EGRESS, PORT_TRACE};
use qbridge_io::afpacket::{AfPacketConfig, AfPacketPort, Fanout, FanoutMode, RxMode};
use qbridge_io::sys;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames the upcall sockets' rings hold together (each at least 4 096, at most 8 192).
const UPCALL_RING_FRAMES: u32 = 16_384;

/// A port the program is attached to.
#[derive(Debug)]
struct Attached {
    dev: String,
    ifindex: u32,
    port: Port,
    /// The address of the veth's other end when that is in another namespace.
    peer_mac: Option<[u8; 6]>,
}

/// The fast path while it runs.
#[derive(Debug)]
pub(crate) struct FastRt {
    pub(super) fp: FastPath,
    /// The bonds the program serves (`super::bond`, decision 74).
    pub(super) bonds: super::bond::Bonds,
    /// VXLAN decapsulation: what `qb_vxlan_in` was given (`super::decap`, decision 77).
    pub(super) decap: super::decap::Decap,
    shared: Arc<FastShared>,
    /// The upcall veth (its other end is `upcall` with a `p` appended).
    upcall: String,
    attached: HashMap<u16, Attached>,
    /// The program's per-port and per-VLAN counters as last folded into the switch's.
    port_seen: HashMap<u16, PortStats>,
    vlan_seen: HashMap<u16, VlanStats>,
    /// Each mirror session index's copies sent by the program, as last folded (decision 80).
    mir_seen: Vec<qbridge_fastpath::MirStats>,
    /// A command changed something the flows may depend on: bump before it answers.
    pub(crate) dirty: bool,
    /// The id of the program's `qb_owner` map (never an orphan to [`sweep`]).
    own_owner: Option<u32>,
    /// When [`sweep`] last ran.
    swept: Instant,
}

/// How often the daemon looks for what daemons that died left in its namespace.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Removes what fast-path programs whose daemon died left in this namespace (their lease
/// ended; classic `clsact` filters outlive their process): their upcall devices, and their
/// filters on interfaces no live daemon serves. Such a filter already claims nothing; this
/// takes away the cost of running it, and the devices. Needs what loading a program needs
/// (an error is logged at debug level and the next sweep tries again).
pub(crate) fn sweep(own: Option<u32>) {
    let found = match qbridge_fastpath::orphans(own) {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!("fast path: cannot look for what stopped daemons left: {e}");
            return;
        }
    };
    // The name is checked too (`qbfpPID`, as FastRt::start names it): an index is the
    // device's only while it exists.
    let upcall_like = |n: &String| {
        n.strip_prefix("qbfp")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    for o in found {
        if let Some(dev) = sys::ifname(o.upcall_ifindex).filter(upcall_like) {
            match sys::delete_link(&dev) {
                Ok(()) => tracing::info!(
                    "fast path: removed {dev}, the upcall device of a qbridge that stopped \
                     without removing it"
                ),
                Err(e) => {
                    tracing::warn!("fast path: cannot remove {dev}, a stopped qbridge's: {e}")
                }
            }
        }
        for dev in o.ports.iter().filter_map(|&i| sys::ifname(i)) {
            if qbridge_fastpath::remove_filters(&dev) > 0 {
                tracing::info!(
                    "fast path: removed from {dev} the program of a qbridge that stopped \
                     without removing it"
                );
            }
        }
    }
}

/// What `show fast-path` says when the fast path does not run.
#[derive(Debug, Default)]
pub(crate) struct FastState {
    pub(crate) mode: FastPathMode,
    pub(crate) reason: Option<String>,
}

impl FastRt {
    /// Loads the program and makes the upcall device; `None` with the reason when the kernel
    /// or the build cannot.
    pub(crate) fn start(epoch: Instant) -> Result<FastRt, String> {
        if !FastPath::built() {
            return Err("this qbridge was built without clang: no eBPF program".into());
        }
        let mut fp = FastPath::load().map_err(|e| e.to_string())?;
        let shared = {
            let writer = fp.writer().map_err(|e| e.to_string())?;
            // The program's clock at the engine's epoch (engine times count from 1 there).
            let offset = mono_now().saturating_sub(epoch.elapsed().as_nanos() as u64 + 1);
            Arc::new(FastShared::new(writer, offset))
        };
        let upcall = format!("qbfp{}", std::process::id() % 1_000_000_000);
        let peer = format!("{upcall}p");
        if sys::ifindex(&upcall).is_ok() {
            // Left by a daemon of the same pid that died (another namespace's pid, or a
            // restarted container).
            let _ = sys::delete_link(&upcall);
        }
        let made = sys::create_veth(&upcall, &peer)
            .map(|()| {
                // Nothing of the host's may arrive there (IPv6 router solicitations, DAD):
                // every frame on the upcall device comes from the program.
                for dev in [&upcall, &peer] {
                    let _ =
                        std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
                }
            })
            .and_then(|()| sys::set_up(&peer))
            .and_then(|()| sys::set_up(&upcall));
        if let Err(e) = made {
            let _ = sys::delete_link(&upcall);
            return Err(format!("cannot make the upcall device {upcall}: {e}"));
        }
        let mut rt = FastRt {
            fp,
            bonds: Default::default(),
            decap: Default::default(),
            shared,
            upcall,
            attached: HashMap::new(),
            port_seen: HashMap::new(),
            vlan_seen: HashMap::new(),
            mir_seen: Vec::new(),
            dirty: true,
            own_owner: None,
            swept: Instant::now(),
        };
        let setup = (|| -> Result<(), String> {
            rt.fp
                .attach_sink(&rt.upcall)
                .map_err(|e| format!("upcall device {}: {e}", rt.upcall))?;
            // The other end takes the copies of hits `trace live` asks for (`trace_device`).
            let trace = rt.trace_device();
            rt.fp
                .attach_sink(&trace)
                .map_err(|e| format!("trace device {trace}: {e}"))?;
            let ifindex = sys::ifindex(&rt.upcall).map_err(|e| e.to_string())?;
            let mut c = rt.fp.config().map_err(|e| e.to_string())?;
            c.upcall_ifindex = ifindex;
            c.trace_ifindex = sys::ifindex(&trace).map_err(|e| e.to_string())?;
            c.generation = 1;
            rt.fp.set_config(c).map_err(|e| e.to_string())?;
            rt.shared.generation.store(1, Ordering::Release);
            rt.fp
                .lease(ifindex)
                .map_err(|e| format!("the program's lease: {e}"))?;
            Ok(())
        })();
        if let Err(e) = setup {
            rt.stop();
            return Err(e);
        }
        rt.own_owner = rt.fp.owner_map_id().ok();
        sweep(rt.own_owner);
        rt.swept = Instant::now();
        Ok(rt)
    }

    /// One socket per worker on the upcall device, in one fanout group.
    pub(crate) fn open_upcall(&self, workers: usize) -> Result<Vec<crate::Queue>, String> {
        // A burst of new flows waits here for the workers: 16 384 frames across the sockets
        // (4 096 to 8 192 each, 2 KiB per frame).
        let frames = (UPCALL_RING_FRAMES / workers.max(1) as u32).clamp(4096, 8192);
        let mut cfg = AfPacketConfig::new(&self.upcall).with_ring_frames(frames);
        cfg.rx = RxMode::Upcall;
        if workers > 1 {
            cfg.fanout = Some(Fanout::unique(FanoutMode::Hash));
        }
        let mut queues: Vec<crate::Queue> = Vec::with_capacity(workers);
        for w in 0..workers.max(1) {
            let p = AfPacketPort::open(cfg.clone())
                .map_err(|e| format!("upcall device {}: {e}", self.upcall))?;
            if w == 0 {
                cfg.fanout = p.fanout();
            }
            queues.push(Box::new(p));
        }
        Ok(queues)
    }

    pub(crate) fn shared(&self) -> Arc<FastShared> {
        self.shared.clone()
    }

    /// The device the program copies the hits of traced ports to (`crate::tracelive`): the
    /// upcall veth's other end.
    pub(crate) fn trace_device(&self) -> String {
        format!("{}p", self.upcall)
    }

    /// `trace live`: the program copies the hits of `ports` (port ids), and of no other, to
    /// the trace device.
    pub(crate) fn set_traced(&mut self, ports: &[u16]) {
        for (id, a) in self.attached.iter_mut() {
            let want = ports.contains(id);
            if want == (a.port.flags & PORT_TRACE != 0) {
                continue;
            }
            a.port.flags ^= PORT_TRACE;
            if let Err(e) = self.fp.set_port(a.ifindex, a.port) {
                tracing::warn!("fast path: port on {}: {e}", a.dev);
            }
        }
        self.set_traced_bonds(ports);
        self.set_traced_decap(ports);
    }

    /// The upcall device's name.
    pub(crate) fn upcall(&self) -> &str {
        &self.upcall
    }

    pub(crate) fn generation(&self) -> u32 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Makes every flow so far stale (a miss on its next frame).
    pub(crate) fn bump(&mut self) {
        match self.fp.bump_generation() {
            Ok(g) => self.shared.generation.store(g, Ordering::Release),
            Err(e) => tracing::error!("fast path: cannot bump the generation: {e}"),
        }
        self.dirty = false;
    }

    /// Detaches everything and removes the upcall device. The lease ends first: a filter
    /// that cannot be detached claims nothing from then on.
    pub(crate) fn stop(&mut self) {
        if let Err(e) = self.fp.end_lease() {
            tracing::warn!("fast path: cannot end the program's lease: {e}");
        }
        let ids: Vec<u16> = self.attached.keys().copied().collect();
        for id in ids {
            self.detach(id);
        }
        self.keep_bonds(&Default::default());
        let _ = self.fp.detach(&self.upcall);
        let _ = sys::delete_link(&self.upcall);
    }

    fn detach(&mut self, id: u16) {
        if let Some(a) = self.attached.remove(&id) {
            let _ = self.fp.remove_port(a.ifindex);
            if let Err(e) = self.fp.detach(&a.dev) {
                tracing::debug!("fast path: detaching from {}: {e}", a.dev);
            }
        }
    }
}

/// The address of `dev`'s other end when `dev` is a veth whose other end is in another
/// namespace.
fn peer_mac(dev: &str) -> Option<[u8; 6]> {
    sys::veth_peer_mac(dev).unwrap_or_else(|e| {
        tracing::debug!("fast path: {dev}: {e}");
        None
    })
}

/// Where a port's frames go now that [`FastRt::attach_ports`] ran: the interface the program
/// redirects to (0: not attached), whether it delivers into the interface's receive (a TAP),
/// and the address of its veth peer in another namespace. The engine writes these into the
/// port's shared state, where the workers read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortEnds {
    pub ifindex: u32,
    pub into_host: bool,
    pub peer_mac: Option<[u8; 6]>,
}

impl PortEnds {
    pub const NONE: PortEnds = PortEnds {
        ifindex: 0,
        into_host: false,
        peer_mac: None,
    };
}

/// The program's entry of a port that the fast path receives for: its opening's `index`,
/// on the interface's egress (a TAP) or ingress, with the port's bridge TPID (`tpid`), and
/// the interface's own address `mac`.
pub(crate) fn port_entry(index: u16, egress: bool, tpid: u16, mac: [u8; 6]) -> Port {
    // The program parses the kernel's TPIDs; another bridge TPID makes its frames misses.
    let extra = if qbridge_wire::Tpid(tpid).is_kernel() {
        0
    } else {
        tpid.to_be()
    };
    Port {
        index: u32::from(index),
        flags: qbridge_fastpath::PORT_ENABLED | if egress { PORT_EGRESS } else { 0 },
        extra_tpid_be: [extra, 0],
        mac,
        pad: 0,
    }
}

impl FastRt {
    /// The program attached to the ports in `want` (port id → interface and entry) and to
    /// no other; returns the ports whose ends changed (detached: [`PortEnds::NONE`]).
    pub(crate) fn attach_ports(
        &mut self,
        want: HashMap<u16, (String, Port)>,
    ) -> Vec<(u16, PortEnds)> {
        let mut changed = Vec::new();
        let gone: Vec<u16> = self
            .attached
            .iter()
            .filter(|(id, a)| want.get(id).is_none_or(|(dev, _)| *dev != a.dev))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.detach(id);
            changed.push((id, PortEnds::NONE));
        }
        for (id, (dev, mut port)) in want {
            // A traced port stays traced (`set_traced`).
            if let Some(a) = self.attached.get(&id) {
                port.flags |= a.port.flags & PORT_TRACE;
                if a.port == port {
                    continue;
                }
            }
            let ifindex = match sys::ifindex(&dev) {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!("fast path: port on {dev}: {e}");
                    continue;
                }
            };
            let attached = if port.flags & PORT_EGRESS != 0 {
                self.fp.attach_egress(&dev)
            } else {
                self.fp.attach(&dev)
            };
            if let Err(e) = attached {
                tracing::warn!("fast path: cannot attach to {dev}: {e}; its frames are lost");
                continue;
            }
            if let Err(e) = self.fp.set_port(ifindex, port) {
                tracing::warn!("fast path: port on {dev}: {e}");
            }
            let peer_mac = peer_mac(&dev);
            changed.push((
                id,
                PortEnds {
                    ifindex,
                    into_host: port.flags & PORT_EGRESS != 0,
                    peer_mac,
                },
            ));
            self.attached.insert(
                id,
                Attached {
                    dev,
                    ifindex,
                    port,
                    peer_mac,
                },
            );
        }
        changed
    }

    /// The addresses of the ports' veth peers read again; returns the ports whose peer
    /// changed (a change makes every flow stale: a flow redirects to a peer only frames to
    /// its address, which the peer's stack takes as its own).
    pub(crate) fn peers(&mut self) -> Vec<(u16, Option<[u8; 6]>)> {
        let mut changed = Vec::new();
        for (id, a) in self.attached.iter_mut() {
            let now = peer_mac(&a.dev);
            if now == a.peer_mac {
                continue;
            }
            tracing::debug!("fast path: {}: peer address now {now:?}", a.dev);
            a.peer_mac = now;
            changed.push((*id, now));
            self.dirty = true;
        }
        changed
    }

    /// Every [`SWEEP_EVERY`]: what daemons that died left in this namespace removed
    /// ([`sweep`]).
    pub(crate) fn sweep_due(&mut self) {
        if self.swept.elapsed() >= SWEEP_EVERY {
            self.swept = Instant::now();
            sweep(self.own_owner);
        }
    }

    /// Whether the program is attached to `dev`.
    pub(crate) fn serves(&self, dev: &str) -> bool {
        self.attached.values().any(|a| a.dev == dev) || self.bonds.serves(dev)
    }

    /// The ports the program is attached to.
    pub(crate) fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.attached.keys().copied().chain(self.bonds.ids())
    }

    /// fdb89: removes every flow to a MAC of `macs` (whatever its ingress and tags: a flow
    /// to a VXLAN remote that changed embeds its tunnel, decision 89); one walk of the flow
    /// table. Returns the flows removed; `None` when the table cannot be read (the caller
    /// makes every flow stale instead).
    pub(crate) fn remove_flows_to(
        &mut self,
        macs: &std::collections::HashSet<[u8; 6]>,
    ) -> Option<usize> {
        let flows = match self.fp.flows() {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("fast path: flows: {e}; every flow made stale instead");
                return None;
            }
        };
        let mut n = 0;
        for (k, _) in flows {
            if macs.contains(&k.dst) && self.shared.writer.remove_flow(&k).is_ok() {
                n += 1;
            }
        }
        Some(n)
    }

    /// The whole FDB map compared with the pipeline's FDB: entries it no longer has, or has on
    /// another port (or not forwarding), are removed; the flows that relied on them miss.
    /// `index`: the program's index of a port's opening (`None`: not open). Two system calls
    /// per mirrored entry: only when a change log overflowed.
    pub(crate) fn sync_fdb(&mut self, plan: &Plan, index: impl Fn(u16) -> Option<u16>) {
        let entries = match self.fp.fdb_entries() {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!("fast path: FDB map: {e}");
                return;
            }
        };
        tracing::debug!("fast path: comparing {} FDB map entries", entries.len());
        for (k, e) in entries {
            let now = plan.fdb_entry(k.bridge, qbridge_wire::MacAddr(k.mac), k.fid);
            let keep = now.is_some_and(|n| {
                n.forwards && index(n.port).is_some_and(|i| u32::from(i) == e.port)
            });
            if !keep {
                let _ = self
                    .shared
                    .writer
                    .remove_fdb(&fdb_key(k.bridge, k.mac, k.fid));
            }
        }
    }

    /// The program's counters since the last fold, into the switch's (the control plane's
    /// block): a port's and a VLAN's counters then hold the frames of both paths.
    pub(crate) fn fold(&mut self, plan: &Plan) {
        let ctl = usize::MAX;
        let mut ids: std::collections::BTreeSet<u16> = self.attached.keys().copied().collect();
        if let Ok(counted) = self.shared.counted_ports.lock() {
            ids.extend(counted.iter().copied());
        }
        for id in ids {
            let Ok(now) = self.fp.port_stats(u32::from(id)) else {
                continue;
            };
            let before = self.port_seen.insert(id, now).unwrap_or_default();
            let d = |a: u64, b: u64| a.wrapping_sub(b);
            let (rf, rb) = (
                d(now.rx_frames, before.rx_frames),
                d(now.rx_bytes, before.rx_bytes),
            );
            let (tf, tb) = (
                d(now.tx_frames, before.tx_frames),
                d(now.tx_bytes, before.tx_bytes),
            );
            if rf != 0 {
                let pcp: [u64; 8] = std::array::from_fn(|i| d(now.rx_pcp[i], before.rx_pcp[i]));
                plan.count_rx(PortId(id), ctl, rf, rb, &pcp);
            }
            if tf != 0 {
                plan.count_tx(PortId(id), ctl, tf, tb);
            }
        }
        let slots: Vec<u16> = match self.shared.vlan_slots.lock() {
            Ok(s) => s.iter().copied().collect(),
            Err(_) => Vec::new(),
        };
        for slot in slots {
            let Ok(now) = self.fp.vlan_stats(u32::from(slot)) else {
                continue;
            };
            let before = self.vlan_seen.insert(slot, now).unwrap_or_default();
            let d = |a: u64, b: u64| a.wrapping_sub(b);
            let rx = (
                d(now.rx_frames, before.rx_frames),
                d(now.rx_bytes, before.rx_bytes),
            );
            let tx = (
                d(now.tx_frames, before.tx_frames),
                d(now.tx_bytes, before.tx_bytes),
            );
            if rx.0 != 0 || tx.0 != 0 {
                plan.count_vlan(slot >> 12, slot & 0xfff, ctl, rx, tx);
            }
        }
        self.fold_mirrors(plan);
    }

    /// The copies the program sent for each mirror session since the last fold, into the
    /// session of that index in `plan` (decision 80). The engine folds with the plan whose
    /// numbering the flows used before a plan renumbers the sessions.
    pub(crate) fn fold_mirrors(&mut self, plan: &Plan) {
        let ctl = usize::MAX;
        let n = plan.mirror_sessions().max(self.mir_seen.len());
        self.mir_seen.resize(n, Default::default());
        for i in 0..n {
            let Ok(now) = self.fp.mir_stats(i as u32) else {
                continue;
            };
            let before = std::mem::replace(&mut self.mir_seen[i], now);
            let frames = now.frames.wrapping_sub(before.frames);
            if frames != 0 {
                plan.count_mirror(i, ctl, frames, now.bytes.wrapping_sub(before.bytes));
            }
            let failed = now.failed.wrapping_sub(before.failed);
            if failed != 0 {
                plan.count_mirror_failed(i, ctl, failed);
            }
        }
    }

    /// What `show fast-path` shows while the fast path runs: `ports`, the names of the
    /// ports it receives for; `count_flows`: walk the flow table to count the current flows
    /// (up to 65 536 map reads; the metrics leave it).
    pub(crate) fn status(
        &mut self,
        mode: FastPathMode,
        ports: Vec<String>,
        count_flows: bool,
    ) -> FastPathStatus {
        let (hits, misses) = self.fp.verdicts().unwrap_or_default();
        // VXLAN decapsulation's (decision 77) hits and passes with the port program's.
        let (decap_hits, decap_passes) = self.decap_counts();
        FastPathStatus {
            mode: mode.name().to_owned(),
            state: "on".into(),
            reason: None,
            upcall: Some(self.upcall.clone()),
            ports,
            flows: if !count_flows {
                0
            } else {
                self.fp.flows().map_or(0, |f| {
                    let g = self.shared.generation.load(Ordering::Acquire);
                    f.iter().filter(|(_, a)| a.generation == g).count() as u64
                })
            },
            hits: hits + decap_hits,
            misses: misses
                .into_iter()
                .map(|(m, n): (Miss, u64)| (m.name().to_owned(), n))
                .chain(decap_passes)
                .collect(),
            installed: self.shared.installed.load(Ordering::Relaxed),
            not_cached: Refusal::ALL
                .iter()
                .map(|r| {
                    (
                        r.name().to_owned(),
                        self.shared.refused[*r as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            stale_upcalls: self.shared.stale_upcalls.load(Ordering::Relaxed),
            upcall_ring_full: self.shared.upcall_ring_full.load(Ordering::Relaxed),
            mirror_copies_failed: (0..qbridge_fastpath::MAX_MIRRORS)
                .filter_map(|i| self.fp.mir_stats(i).ok())
                .map(|s| s.failed)
                .sum(),
        }
    }
}
