//! The engine's glue to the eBPF fast path (docs/fast-path.md; the fast path itself, its
//! runtime and the workers' half: `crate::fastpath`): what the engine knows of its ports —
//! which ones the program receives for, their openings, their shared state — handed to
//! [`FastRt`], and the FDB ageing merged with the program's last-seen times.

use super::Engine;
use crate::fastpath::control::{port_entry, sweep, PortEnds};
pub(super) use crate::fastpath::control::{FastRt, FastState};
use crate::fastpath::{fdb_key, port_index, FastPathMode};
use crate::shared::{encode_peer_mac, NO_PATCH_PEER};
use crate::worker::ToWorker;
use qbridge_bridge::{Plan, PortId};
use qbridge_control::{FastPathStatus, PortSpec};
use qbridge_fastpath::Port;
use qbridge_io::afpacket::RxMode;
use qbridge_io::sys;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

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
                    rt.upcall()
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
            // Frames to the interface's own address reach the host too.
            let mac = sys::get_mac(dev).unwrap_or([0; 6]);
            want.insert(
                id,
                (
                    dev.clone(),
                    port_entry(port_index(s.token), egress, tpid, mac),
                ),
            );
        }
        for (id, ends) in rt.attach_ports(want) {
            if let Some(Some(s)) = self.slots.get(id as usize) {
                let PortEnds {
                    ifindex,
                    into_host,
                    peer_mac,
                } = ends;
                s.shared.fast_ifindex.store(ifindex, Ordering::Relaxed);
                s.shared.fast_into_host.store(into_host, Ordering::Relaxed);
                s.shared
                    .fast_peer_mac
                    .store(encode_peer_mac(peer_mac), Ordering::Relaxed);
            }
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
        // Bonds: their members' entries and tables, their egress marked (decision 74). After
        // the ports: an interface that left a port for a bond (or a bond for a port) this
        // command is detached as the one and attached as the other, in that order.
        self.bond_fast_sync();
        // VXLAN decapsulation (decision 77): what went is removed before the bump below.
        self.fast_decap_sync();
        let Some(rt) = self.fast.as_mut() else {
            return 0;
        };
        if changed || rt.dirty {
            rt.bump();
            self.fast_follow();
        }
        self.fast.as_ref().map_or(0, FastRt::generation)
    }

    /// After a bridge-FDB-only command (decision 85), before it answers: the FDB map holds
    /// what the FDB holds for every entry the command changed, and no flow made before the
    /// command can rely on an entry's older state, without bumping the generation (the other
    /// flows keep hitting). The command's changes are in the FDB's log; whoever follows it
    /// (a worker after a burst, the engine here) writes the map under the FDB's lock, so the
    /// writes are in the order of the changes. A worker's install that read an entry before
    /// the command checks it again under the lock after writing it; the barrier waits for
    /// every worker to finish what it was doing, so such a check is done before the answer.
    pub(super) fn fast_fdb_command(&mut self) {
        if self.fast.is_none() {
            return;
        }
        self.workers_barrier();
        self.fast_follow();
        // fdb89: the flows to MACs whose static VXLAN remote changed (decision 89).
        let n = self.fdb89_vx_flows();
        if n > 0 {
            tracing::debug!("fast path: {n} flows to moved VXLAN remotes removed");
        }
    }

    /// Once a second: the addresses of the ports' veth peers read again; a change makes every
    /// flow stale (a flow redirects to a peer only frames to its address, which the peer's
    /// stack takes as its own).
    pub(super) fn fast_peers(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        for (id, now) in rt.peers() {
            if let Some(Some(s)) = self.slots.get(id as usize) {
                s.shared
                    .fast_peer_mac
                    .store(encode_peer_mac(now), Ordering::Relaxed);
            }
        }
    }

    /// What daemons that died left in this namespace removed, once in a while
    /// ([`FastRt::sweep_due`]).
    pub(super) fn fast_sweep(&mut self) {
        if let Some(rt) = self.fast.as_mut() {
            rt.sweep_due();
        }
    }

    /// Port `port` on `dev` is received through the daemon's own socket (the fast path is
    /// off, or does not serve it): a fast-path filter that a daemon that died left on `dev`
    /// would forward, by that daemon's flows, frames the socket also receives — delivered
    /// twice. It is removed now (it would stop claiming frames when the dead daemon's lease
    /// ends, and a qbridge before the lease left filters that never stop).
    pub(super) fn fast_claim(&self, port: &str, dev: &str) {
        if self.fast.as_ref().is_some_and(|rt| rt.serves(dev)) {
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
        let index = |port: u16| -> Option<u16> {
            let s = self.slots.get(port as usize)?.as_ref()?;
            s.open.then(|| port_index(s.token))
        };
        // Each change written under its FDB's lock (decision 85).
        let lost = crate::fastpath::follow_plan(&shared, &plan, index);
        if lost || shared.resync.swap(false, Ordering::Relaxed) {
            self.fast_sync_fdb(&plan);
        }
    }

    /// The whole FDB map compared with the pipeline's FDB ([`FastRt::sync_fdb`]).
    fn fast_sync_fdb(&mut self, plan: &Plan) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let index = |port: u16| -> Option<u16> {
            let s = self.slots.get(port as usize)?.as_ref()?;
            s.open.then(|| port_index(s.token))
        };
        rt.sync_fdb(plan, index);
    }

    /// The program's counters since the last fold, into the switch's ([`FastRt::fold`]).
    pub(super) fn fast_fold(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let plan = self.session.switch_mut().plan();
        rt.fold(&plan);
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
            .ports()
            .filter_map(|id| Some(self.slots.get(id as usize)?.as_ref()?.name.clone()))
            .collect();
        ports.sort();
        rt.status(self.fast_state.mode, ports, count_flows)
    }
}
