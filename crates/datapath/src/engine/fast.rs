//! The control thread's half of the eBPF fast path (docs/fast-path.md; the workers' half and
//! what both share: `crate::fastpath`): loading the program, the upcall device, attaching the
//! program to the ports it receives for, the configuration generation, the FDB map kept in
//! line with the pipeline's FDB (last-seen times merged before ageing, entries that aged or
//! were removed taken out after), and the program's counters folded into the switch's.

use super::Engine;
use crate::fastpath::{fdb_key, mono_now, port_index, FastPathMode, FastShared, Refusal};
use crate::shared::{encode_peer_mac, NO_PATCH_PEER};
use crate::worker::ToWorker;
use qbridge_bridge::{Plan, PortId};
use qbridge_control::{FastPathStatus, PortSpec};
use qbridge_fastpath::{FastPath, Miss, Port, PortStats, VlanStats, PORT_EGRESS, PORT_ENABLED};
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
pub(super) struct FastRt {
    fp: FastPath,
    shared: Arc<FastShared>,
    /// The upcall veth (its other end is `upcall` with a `p` appended).
    upcall: String,
    attached: HashMap<u16, Attached>,
    /// The program's per-port and per-VLAN counters as last folded into the switch's.
    port_seen: HashMap<u16, PortStats>,
    vlan_seen: HashMap<u16, VlanStats>,
    /// A command changed something the flows may depend on: bump before it answers.
    pub(super) dirty: bool,
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
fn sweep(own: Option<u32>) {
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
pub(super) struct FastState {
    pub(super) mode: FastPathMode,
    pub(super) reason: Option<String>,
}

impl FastRt {
    /// Loads the program and makes the upcall device; `None` with the reason when the kernel
    /// or the build cannot.
    pub(super) fn start(epoch: Instant) -> Result<FastRt, String> {
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
            shared,
            upcall,
            attached: HashMap::new(),
            port_seen: HashMap::new(),
            vlan_seen: HashMap::new(),
            dirty: true,
            own_owner: None,
            swept: Instant::now(),
        };
        let setup = (|| -> Result<(), String> {
            rt.fp
                .attach_sink(&rt.upcall)
                .map_err(|e| format!("upcall device {}: {e}", rt.upcall))?;
            let ifindex = sys::ifindex(&rt.upcall).map_err(|e| e.to_string())?;
            let mut c = rt.fp.config().map_err(|e| e.to_string())?;
            c.upcall_ifindex = ifindex;
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
    pub(super) fn open_upcall(&self, workers: usize) -> Result<Vec<crate::Queue>, String> {
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

    pub(super) fn shared(&self) -> Arc<FastShared> {
        self.shared.clone()
    }

    pub(super) fn generation(&self) -> u32 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Makes every flow so far stale (a miss on its next frame).
    pub(super) fn bump(&mut self) {
        match self.fp.bump_generation() {
            Ok(g) => self.shared.generation.store(g, Ordering::Release),
            Err(e) => tracing::error!("fast path: cannot bump the generation: {e}"),
        }
        self.dirty = false;
    }

    /// Detaches everything and removes the upcall device. The lease ends first: a filter
    /// that cannot be detached claims nothing from then on.
    pub(super) fn stop(&mut self) {
        if let Err(e) = self.fp.end_lease() {
            tracing::warn!("fast path: cannot end the program's lease: {e}");
        }
        let ids: Vec<u16> = self.attached.keys().copied().collect();
        for id in ids {
            self.detach(id);
        }
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

impl Engine {
    /// The receive mode of an AF_PACKET port opened now: transmit only when the fast path
    /// receives for it (in the daemon's namespace, a port id the program's 12 bits hold, a
    /// promiscuous port: the program does not filter by destination as a unicast receive
    /// filter does).
    pub(super) fn fast_rx(&self, id: u16, promisc: bool) -> RxMode {
        if self.fast.is_some() && promisc && crate::fastpath::servable(id) {
            RxMode::None
        } else {
            RxMode::Frames
        }
    }

    /// Starts the fast path as `mode` says; hands each worker its upcall socket.
    pub(super) fn fast_start(&mut self, mode: FastPathMode) -> Result<(), String> {
        self.fast_state.mode = mode;
        if mode == FastPathMode::Off {
            self.fast_state.reason = Some("off (--fast-path off)".into());
            sweep(None);
            return Ok(());
        }
        let started = FastRt::start(self.epoch).and_then(|rt| {
            let queues = match rt.open_upcall(self.workers.len()) {
                Ok(q) => q,
                Err(e) => {
                    let mut rt = rt;
                    rt.stop();
                    return Err(e);
                }
            };
            Ok((rt, queues))
        });
        match started {
            Ok((rt, queues)) => {
                for (w, q) in self.workers.iter().zip(queues) {
                    super::send(
                        w,
                        ToWorker::Upcall {
                            queue: q,
                            shared: rt.shared(),
                        },
                    );
                }
                tracing::info!(
                    "fast path on: eBPF program on the ports' TC ingress, misses through {}",
                    rt.upcall
                );
                self.fast = Some(rt);
                Ok(())
            }
            Err(e) if mode == FastPathMode::On => Err(format!("--fast-path on: {e}")),
            Err(e) => {
                tracing::info!("fast path off: {e}");
                self.fast_state.reason = Some(e);
                Ok(())
            }
        }
    }

    /// Before a plan goes to the workers: the program attached to every port it receives for
    /// (and to no other), each port's entry current, and the generation bumped when the plan
    /// or a command changed anything. Returns the generation the workers get.
    pub(super) fn fast_publish(&mut self, plan: &Plan, changed: bool) -> u32 {
        let Some(rt) = self.fast.as_mut() else {
            return 0;
        };
        plan.log_fast(true);
        let mut want: HashMap<u16, (String, Port)> = HashMap::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            // AF_PACKET ports opened to only transmit, and TAP ports in this namespace (the
            // program on the TAP's egress, where what the host sends it leaves the kernel).
            let (dev, egress) = match (&s.spec, s.open) {
                (PortSpec::AfPacket { dev, .. }, true) if s.fast => (dev.clone(), false),
                (
                    PortSpec::Tap {
                        ifname,
                        netns: None,
                    },
                    true,
                ) if crate::fastpath::servable(i as u16) => {
                    let dev = s.status.ifname.as_deref().or(ifname.as_deref());
                    (dev.unwrap_or(&s.name).to_owned(), true)
                }
                _ => continue,
            };
            let dev = &dev;
            let id = i as u16;
            let tpid = plan.port_tpid(PortId(id)).0;
            let extra = if tpid == 0x8100 || tpid == 0x88a8 {
                0
            } else {
                tpid.to_be()
            };
            want.insert(
                id,
                (
                    dev.clone(),
                    Port {
                        index: u32::from(port_index(s.token)),
                        flags: PORT_ENABLED | if egress { PORT_EGRESS } else { 0 },
                        extra_tpid_be: [extra, 0],
                        // Frames to the interface's own address reach the host too.
                        mac: sys::get_mac(dev).unwrap_or([0; 6]),
                        pad: 0,
                    },
                ),
            );
        }
        let gone: Vec<u16> = rt
            .attached
            .iter()
            .filter(|(id, a)| want.get(id).is_none_or(|(dev, _)| *dev != a.dev))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            rt.detach(id);
            if let Some(Some(s)) = self.slots.get(id as usize) {
                s.shared.fast_ifindex.store(0, Ordering::Relaxed);
                s.shared.fast_peer_mac.store(0, Ordering::Relaxed);
                s.shared.fast_into_host.store(false, Ordering::Relaxed);
            }
        }
        for (id, (dev, port)) in want {
            if rt.attached.get(&id).is_some_and(|a| a.port == port) {
                continue;
            }
            let ifindex = match sys::ifindex(&dev) {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!("fast path: port on {dev}: {e}");
                    continue;
                }
            };
            let attached = if port.flags & PORT_EGRESS != 0 {
                rt.fp.attach_egress(&dev)
            } else {
                rt.fp.attach(&dev)
            };
            if let Err(e) = attached {
                tracing::warn!("fast path: cannot attach to {dev}: {e}; its frames are lost");
                continue;
            }
            if let Err(e) = rt.fp.set_port(ifindex, port) {
                tracing::warn!("fast path: port on {dev}: {e}");
            }
            let peer_mac = peer_mac(&dev);
            if let Some(Some(s)) = self.slots.get(id as usize) {
                s.shared.fast_ifindex.store(ifindex, Ordering::Relaxed);
                s.shared
                    .fast_into_host
                    .store(port.flags & PORT_EGRESS != 0, Ordering::Relaxed);
                s.shared
                    .fast_peer_mac
                    .store(encode_peer_mac(peer_mac), Ordering::Relaxed);
            }
            rt.attached.insert(
                id,
                Attached {
                    dev,
                    ifindex,
                    port,
                    peer_mac,
                },
            );
        }
        // Patch links: each end learns the other's port id (the workers fold links into
        // flows through it).
        let ends: HashMap<&str, u16> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                (s.open && matches!(s.spec, PortSpec::Patch { .. }))
                    .then_some((s.name.as_str(), i as u16))
            })
            .collect();
        for s in self.slots.iter().flatten() {
            let peer = match &s.spec {
                PortSpec::Patch { peer } if s.open => ends.get(peer.as_str()).copied(),
                _ => None,
            };
            s.shared
                .patch_peer
                .store(peer.map_or(NO_PATCH_PEER, u32::from), Ordering::Relaxed);
        }
        if changed || rt.dirty {
            rt.bump();
            self.fast_follow();
        }
        self.fast.as_ref().map_or(0, FastRt::generation)
    }

    /// Once a second: the addresses of the ports' veth peers read again; a change makes every
    /// flow stale (a flow redirects to a peer only frames to its address, which the peer's
    /// stack takes as its own).
    pub(super) fn fast_peers(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        for (id, a) in rt.attached.iter_mut() {
            let now = peer_mac(&a.dev);
            if now == a.peer_mac {
                continue;
            }
            tracing::debug!("fast path: {}: peer address now {now:?}", a.dev);
            a.peer_mac = now;
            if let Some(Some(s)) = self.slots.get(*id as usize) {
                s.shared
                    .fast_peer_mac
                    .store(encode_peer_mac(now), Ordering::Relaxed);
            }
            rt.dirty = true;
        }
    }

    /// Every [`SWEEP_EVERY`]: what daemons that died left in this namespace removed
    /// ([`sweep`]).
    pub(super) fn fast_sweep(&mut self) {
        if let Some(rt) = self.fast.as_mut() {
            if rt.swept.elapsed() >= SWEEP_EVERY {
                rt.swept = Instant::now();
                sweep(rt.own_owner);
            }
        }
    }

    /// Port `port` on `dev` is received through the daemon's own socket (the fast path is
    /// off, or does not serve it): a fast-path filter that a daemon that died left on `dev`
    /// would forward, by that daemon's flows, frames the socket also receives — delivered
    /// twice. It is removed now (it would stop claiming frames when the dead daemon's lease
    /// ends, and a qbridge before the lease left filters that never stop).
    pub(super) fn fast_claim(&self, port: &str, dev: &str) {
        if self
            .fast
            .as_ref()
            .is_some_and(|rt| rt.attached.values().any(|a| a.dev == dev))
        {
            return;
        }
        if qbridge_fastpath::remove_filters(dev) > 0 {
            tracing::info!(
                "port {port}: removed from {dev} the fast-path program of a qbridge that \
                 stopped without removing it"
            );
        }
    }

    /// FDB ageing with the fast path's last-seen times: an entry about to age is kept when
    /// the program saw frames from it since (one map read per such entry). Returns the entries
    /// aged out.
    pub(super) fn fast_age(&mut self, now: u64) -> usize {
        let Some(shared) = self.fast.as_ref().map(FastRt::shared) else {
            return self.session.switch_mut().age(now);
        };
        self.session.switch_mut().age_with(now, |bridge, mac, fid| {
            let e = shared.writer.fdb(&fdb_key(bridge, mac.0, fid)).ok()??;
            Some(shared.engine_time(e.last_seen_ns))
        })
    }

    /// The FDB map follows the entries the pipeline's FDB moved, changed or removed since the
    /// last look (learning, ageing, commands); when a change log overflowed, the whole map is
    /// compared with the FDB.
    pub(super) fn fast_follow(&mut self) {
        let Some(rt) = self.fast.as_ref() else {
            return;
        };
        let shared = rt.shared();
        let plan = self.session.switch_mut().plan();
        let mut changes = Vec::new();
        let lost = plan.take_fast_changes(&mut changes);
        let index = |port: u16| -> Option<u16> {
            let s = self.slots.get(port as usize)?.as_ref()?;
            s.open.then(|| port_index(s.token))
        };
        crate::fastpath::follow_changes(&shared, &changes, index);
        if lost || shared.resync.swap(false, Ordering::Relaxed) {
            self.fast_sync_fdb(&plan);
        }
    }

    /// The whole FDB map compared with the pipeline's FDB: entries it no longer has, or has on
    /// another port (or not forwarding), are removed; the flows that relied on them miss.
    /// Two system calls per mirrored entry: only when a change log overflowed.
    fn fast_sync_fdb(&mut self, plan: &Plan) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let entries = match rt.fp.fdb_entries() {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!("fast path: FDB map: {e}");
                return;
            }
        };
        tracing::debug!("fast path: comparing {} FDB map entries", entries.len());
        let index = |port: u16| -> Option<u16> {
            let s = self.slots.get(port as usize)?.as_ref()?;
            s.open.then(|| port_index(s.token))
        };
        for (k, e) in entries {
            let now = plan.fdb_entry(k.bridge, qbridge_wire::MacAddr(k.mac), k.fid);
            let keep = now.is_some_and(|n| {
                n.forwards && index(n.port).is_some_and(|i| u32::from(i) == e.port)
            });
            if !keep {
                let _ = rt
                    .shared
                    .writer
                    .remove_fdb(&fdb_key(k.bridge, k.mac, k.fid));
            }
        }
    }

    /// The program's counters since the last fold, into the switch's (the control plane's
    /// block): a port's and a VLAN's counters then hold the frames of both paths.
    pub(super) fn fast_fold(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let plan = self.session.switch_mut().plan();
        let ctl = usize::MAX;
        let mut ids: std::collections::BTreeSet<u16> = rt.attached.keys().copied().collect();
        if let Ok(counted) = rt.shared.counted_ports.lock() {
            ids.extend(counted.iter().copied());
        }
        for id in ids {
            let Ok(now) = rt.fp.port_stats(u32::from(id)) else {
                continue;
            };
            let before = rt.port_seen.insert(id, now).unwrap_or_default();
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
        let slots: Vec<u16> = match rt.shared.vlan_slots.lock() {
            Ok(s) => s.iter().copied().collect(),
            Err(_) => Vec::new(),
        };
        for slot in slots {
            let Ok(now) = rt.fp.vlan_stats(u32::from(slot)) else {
                continue;
            };
            let before = rt.vlan_seen.insert(slot, now).unwrap_or_default();
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
    }

    /// What `show fast-path` shows (`count_flows`: walk the flow table to count the current
    /// flows, up to 65 536 map reads; the metrics leave it).
    pub(super) fn fast_status(&mut self, count_flows: bool) -> FastPathStatus {
        let mode = self.fast_state.mode.name().to_owned();
        let Some(rt) = self.fast.as_mut() else {
            return FastPathStatus {
                mode,
                state: "off".into(),
                reason: self.fast_state.reason.clone(),
                ..FastPathStatus::default()
            };
        };
        let mut ports: Vec<String> = rt
            .attached
            .keys()
            .filter_map(|id| Some(self.slots.get(*id as usize)?.as_ref()?.name.clone()))
            .collect();
        ports.sort();
        let (hits, misses) = rt.fp.verdicts().unwrap_or_default();
        FastPathStatus {
            mode,
            state: "on".into(),
            reason: None,
            upcall: Some(rt.upcall.clone()),
            ports,
            flows: if !count_flows {
                0
            } else {
                rt.fp.flows().map_or(0, |f| {
                    let g = rt.shared.generation.load(Ordering::Acquire);
                    f.iter().filter(|(_, a)| a.generation == g).count() as u64
                })
            },
            hits,
            misses: misses
                .into_iter()
                .map(|(m, n): (Miss, u64)| (m.name().to_owned(), n))
                .collect(),
            installed: rt.shared.installed.load(Ordering::Relaxed),
            not_cached: Refusal::ALL
                .iter()
                .map(|r| {
                    (
                        r.name().to_owned(),
                        rt.shared.refused[*r as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            stale_upcalls: rt.shared.stale_upcalls.load(Ordering::Relaxed),
            upcall_ring_full: rt.shared.upcall_ring_full.load(Ordering::Relaxed),
        }
    }
}
