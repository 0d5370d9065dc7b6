//! The port lifecycle on the control thread: each port's backend as the control thread knows
//! it ([`Slot`]), bringing the backends in line with the session after a command
//! ([`Engine::reconcile`]: every new port opened before anything is closed, so a command that
//! cannot open one is undone with nothing else changed), reopening a device port or a TAP the
//! link watch found back (`super::link`), and copying each port's runtime status into the
//! session ([`Engine::publish_status`]). Queues opened here are handed to the workers by the
//! control loop's next `publish` (`super`); closing is the workers' and the reaper's.
//!
//! Opening the device backends themselves (AF_PACKET fanout groups, AF_XDP under one program)
//! is `crate::backends`; this module decides what to open and keeps the books.

use super::Engine;
use crate::backends::{
    default_ring_frames, describe_offloads, describe_spec, offload_status, open_afpacket_queues,
    open_afxdp_queues, ring_bytes,
};
use crate::patch::patch_link;
use crate::pcap_port::PcapPort;
use crate::queue::{distribute, Opened, Queue, Queues};
use crate::shared::{PortShared, RxFilter};
use qbridge_bridge::PortId;
use qbridge_control::{BackendStatus, PortSpec};
use qbridge_io::afpacket::RxFilterHandle;
use qbridge_io::iflock::{self, LockError};
use qbridge_io::netns::run_in_netns;
use qbridge_io::tap::{TapConfig, TapPort};
use qbridge_io::{sys, IoError};
use std::collections::HashMap;
use std::sync::Arc;

/// One port's backend as the control thread knows it; its queues live in the workers.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) spec: PortSpec,
    /// The workers hold queues of this port (false: closed, waiting for the interface).
    pub(super) open: bool,
    /// `generation << 16 | port id` of the current opening.
    pub(super) token: u64,
    /// The link as the engine last saw it; pushed into the switch (`set_link_state`).
    pub(super) link_up: bool,
    pub(super) link_downs: u64,
    /// AF_PACKET: the filter the open sockets have, and the handle that holds it (shared by
    /// the port's sockets, changed in place).
    pub(super) filter: Option<RxFilter>,
    pub(super) filter_handle: Option<Arc<RxFilterHandle>>,
    /// TAP-backed ports: the TAP's MTU as qbridge last set or read it; raised when the port's
    /// `mtu` grows above it (as at creation).
    pub(super) tap_mtu: Option<u32>,
    pub(super) status: BackendStatus,
    pub(super) shared: Arc<PortShared>,
    /// Warnings given about this port, per condition (`"mtu"`, `"filter"`): a warning is given
    /// once, not again with every later command, until its text changes or the condition
    /// clears.
    pub(super) warned: HashMap<&'static str, String>,
    /// VXLAN ports: the backend's table of remote VTEPs, shared with the port's queue.
    pub(super) vxlan: Option<qbridge_io::vxlan::SharedVxlanTable>,
    /// AF_PACKET: the open sockets only transmit; the eBPF fast path receives (`fast.rs`).
    pub(super) fast: bool,
}

impl Slot {
    /// Adds `msg` to `warnings` unless it was given already for `condition`.
    pub(super) fn warn_once(
        &mut self,
        condition: &'static str,
        msg: String,
        warnings: &mut Vec<String>,
    ) {
        if self.warned.get(condition) != Some(&msg) {
            self.warned.insert(condition, msg.clone());
            warnings.push(msg);
        }
    }

    pub(super) fn clear_warning(&mut self, condition: &'static str) {
        self.warned.remove(condition);
    }
}

/// `12.5 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

impl Engine {
    /// AF_PACKET ports in the configuration: what the default ring sizes are shared over
    /// ([`default_ring_frames`]).
    fn afpacket_ports(&self) -> usize {
        self.session
            .ports()
            .into_iter()
            .filter(|(_, _, spec)| matches!(spec, PortSpec::AfPacket { .. }))
            .count()
    }

    /// At start: what the AF_PACKET ports' receive rings pin in the kernel, in total.
    pub(super) fn log_rings(&self) {
        let n = self.workers.len() as u64;
        let (mut ports, mut bytes, mut frames) = (0u64, 0u64, Vec::new());
        for s in self.slots.iter().flatten() {
            if let (PortSpec::AfPacket { .. }, Some(r)) = (&s.spec, s.status.ring_frames) {
                ports += 1;
                bytes += ring_bytes(r) * n;
                frames.push(r);
            }
        }
        if ports == 0 {
            return;
        }
        frames.sort_unstable();
        frames.dedup();
        tracing::info!(
            "AF_PACKET receive rings: {ports} ports x {n} sockets, {} frames per socket, {} \
             in total (pinned in the kernel; 'ring_frames N' sizes a port)",
            frames
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("/"),
            mib(bytes)
        );
    }

    /// Brings the backends in line with the session. Opens every new port first; if one
    /// fails hard, closes what it opened and returns the error with nothing else changed.
    /// The queues opened and the ports closed are handed to the workers by the next
    /// [`Engine::publish`].
    pub(super) fn reconcile(&mut self) -> Result<Vec<String>, String> {
        self.sync_mirror_files()?;
        let mut warnings = Vec::new();
        let wanted: Vec<(PortId, String, PortSpec)> = self
            .session
            .ports()
            .into_iter()
            .map(|(id, n, s)| (id, n.to_owned(), s.clone()))
            .collect();
        // Phase 1: open what is new or changed.
        let mut opened: Vec<(u16, Slot, Option<Opened>)> = Vec::new();
        for (id, name, spec) in &wanted {
            let same = matches!(self.slots.get(id.0 as usize),
                Some(Some(s)) if s.name == *name && same_backend(&s.spec, spec));
            if same {
                continue;
            }
            match self.open_slot(*id, name, spec) {
                Ok((slot, queues, warning)) => {
                    warnings.extend(warning);
                    opened.push((id.0, slot, queues));
                }
                Err(e) => {
                    for (_, _, queues) in opened {
                        close_queues(queues.unwrap_or_default());
                    }
                    for (_, queues) in self.patch_peers.drain() {
                        close_queues(queues);
                    }
                    let slots = &self.slots;
                    self.iface_locks.retain(|dev, _| {
                        slots
                            .iter()
                            .flatten()
                            .any(|s| devices_of(&s.spec).contains(&dev.as_str()))
                    });
                    return Err(e);
                }
            }
        }
        for (_, queues) in self.patch_peers.drain() {
            close_queues(queues);
        }
        // Interfaces no port uses any more are free for another daemon.
        self.iface_locks.retain(|dev, _| {
            wanted
                .iter()
                .any(|(_, _, sp)| devices_of(sp).contains(&dev.as_str()))
        });
        // Phase 2: close what is gone or replaced, install the new.
        for i in 0..self.slots.len() {
            let keep = matches!(&self.slots[i], Some(s)
                if wanted.iter().any(|(id, n, sp)| id.0 as usize == i && *n == s.name && same_backend(sp, &s.spec)));
            if !keep {
                if let Some(s) = self.slots[i].take() {
                    tracing::info!("port {}: closed", s.name);
                    if s.open {
                        self.detach.push(i as u16);
                    }
                }
            }
        }
        for (id, mut slot, queues) in opened {
            let i = id as usize;
            if self.slots.len() <= i {
                self.slots.resize_with(i + 1, || None);
            }
            self.generation += 1;
            slot.token = (self.generation << 16) | u64::from(id);
            self.detach.retain(|&d| d != id);
            if let Some(q) = queues {
                self.attach.push((id, q));
            }
            self.slots[i] = Some(slot);
        }
        self.sync_vxlan(&wanted);
        // Phase 3: link state, device MTU and receive filters follow the configuration.
        for (id, _, _) in &wanted {
            self.sync_port(id.0, &mut warnings);
        }
        Ok(warnings)
    }

    fn open_slot(
        &mut self,
        id: PortId,
        name: &str,
        spec: &PortSpec,
    ) -> Result<(Slot, Option<Opened>, Option<String>), String> {
        let mut slot = Slot {
            name: name.to_owned(),
            spec: spec.clone(),
            open: false,
            token: 0,
            link_up: true,
            link_downs: 0,
            filter: None,
            filter_handle: None,
            tap_mtu: None,
            status: BackendStatus::default(),
            shared: Arc::new(PortShared::new(self.workers.len())),
            warned: HashMap::new(),
            vxlan: None,
            fast: false,
        };
        let n = self.workers.len();
        let mut warning = None;
        for dev in devices_of(spec) {
            self.lock_interface(dev, name)?;
        }
        let queues = match spec {
            PortSpec::Pcap => {
                let Some(dir) = &self.cfg.pcap_dir else {
                    return Err(format!(
                        "pcap port {name} needs a directory: start the daemon with --pcap-dir DIR \
                         (or use 'qbridge replay' for pcap files)"
                    ));
                };
                if self.mirror_files.contains_key(&format!("{name}.pcap")) {
                    return Err(format!(
                        "pcap port {name}: {}/{name}.pcap is written by a mirror session",
                        dir.display()
                    ));
                }
                let p = PcapPort::open(dir, name, self.cfg.file_access)
                    .map_err(|e| format!("port {name}: {e}"))?;
                tracing::info!("port {name}: pcap, writing {}/{name}.pcap", dir.display());
                Some(
                    distribute(vec![Box::new(p)], n, id.0 as usize)
                        .map_err(|e| format!("port {name}: {e}"))?,
                )
            }
            PortSpec::AfPacket {
                dev,
                qdisc_bypass,
                ring_frames,
            } => {
                let ring =
                    ring_frames.unwrap_or_else(|| default_ring_frames(n, self.afpacket_ports()));
                slot.status.ring_frames = Some(ring);
                let filter = self.rx_filter(id);
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                slot.status.qdisc_bypass = Some(*qdisc_bypass);
                let rx = self.fast_rx(id.0, filter.promisc);
                if rx != qbridge_io::afpacket::RxMode::None {
                    self.fast_claim(name, dev);
                }
                match open_afpacket_queues(name, dev, *qdisc_bypass, ring, &filter, want_mtu, n, rx)
                {
                    Ok((queues, handle, mtu, offloads)) => {
                        slot.fast = rx == qbridge_io::afpacket::RxMode::None;
                        slot.filter_handle = Some(handle);
                        let offloads = offload_status(offloads);
                        tracing::info!(
                            "port {name}: AF_PACKET on {dev} (device mtu {mtu}, {}, qdisc \
                             bypass {}, device offloads {}, receive rings {ring} frames x {n} \
                             sockets = {})",
                            if filter.promisc {
                                "promiscuous"
                            } else {
                                "unicast filter"
                            },
                            if *qdisc_bypass { "on" } else { "off" },
                            describe_offloads(&offloads),
                            mib(ring_bytes(ring) * n as u64)
                        );
                        slot.filter = Some(filter.clone());
                        slot.status.device_mtu = Some(mtu);
                        slot.status.promisc = Some(filter.promisc);
                        slot.status.offloads = Some(offloads);
                        Some(queues)
                    }
                    Err(e @ IoError::MtuAboveMax { .. }) => {
                        return Err(self.mtu_error(id, dev, want_mtu, &e));
                    }
                    Err(e) => {
                        warning = Some(open_failed(&mut slot, dev, e)?);
                        None
                    }
                }
            }
            PortSpec::Tap { ifname, netns } => {
                let ifname = ifname.as_deref().unwrap_or(name);
                let (queues, tap_name, mtu) =
                    self.open_tap(id, name, ifname, netns.as_deref(), None)?;
                slot.tap_mtu = Some(mtu);
                if tap_name != ifname {
                    slot.status.ifname = Some(tap_name);
                }
                Some(queues)
            }
            PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
                let (ifname, netns) = spec.host_tap(name).unwrap_or((name, None));
                let mac = self.session.switch().port_mac(id).map(|m| m.0);
                let (queues, _, mtu) = self.open_tap(id, name, ifname, netns, mac)?;
                slot.tap_mtu = Some(mtu);
                Some(queues)
            }
            PortSpec::AfXdp { dev, .. } => {
                let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
                match open_afxdp_queues(spec, want_mtu, n, id.0 as usize) {
                    Ok(queues) => {
                        tracing::info!("port {name}: AF_XDP on {dev} ({})", describe_spec(spec));
                        slot.status.device_mtu = sys::get_mtu(dev).ok();
                        Some(queues)
                    }
                    Err(e) => {
                        warning = Some(open_failed(&mut slot, dev, e)?);
                        None
                    }
                }
            }
            PortSpec::Bond(b) => {
                slot.link_up = self
                    .session
                    .bond(name)
                    .is_some_and(|e| e.carrier() == qbridge_lacp::OnOff::On);
                Some(self.open_bond(id, name, b)?)
            }
            PortSpec::Vxlan(v) => {
                let (queues, table) =
                    super::vxlan::open_vxlan(name, v, n, id.0 as usize, &slot.shared)?;
                slot.vxlan = Some(table);
                Some(queues)
            }
            PortSpec::Patch { peer } => {
                let queues = match self.patch_peers.remove(name) {
                    Some(q) => q,
                    None => {
                        let (mine, theirs) = patch_link(name, peer, n);
                        self.patch_peers.insert(peer.clone(), theirs);
                        tracing::info!("port {name}: patch link to {peer}");
                        mine
                    }
                };
                Some(queues)
            }
        };
        slot.open = queues.is_some();
        slot.status.open = slot.open;
        if slot.open {
            // The interface's own address is a local FDB entry of its bridge (Linux
            // `br_fdb_add_local`); pcap ports and patch links have none.
            let mac = own_interface(spec)
                .and_then(|i| sys::get_mac(i).ok())
                .map(qbridge_wire::MacAddr);
            self.session.switch_mut().set_port_address(id, mac);
        }
        Ok((slot, queues, warning))
    }

    /// Takes host interface `dev`'s lock for port `name` unless a port of this daemon holds it.
    /// Another daemon holding it is an error; a lock directory that cannot be used is a
    /// warning (once), and the interface goes unlocked.
    fn lock_interface(&mut self, dev: &str, name: &str) -> Result<(), String> {
        if self.iface_locks.contains_key(dev) {
            return Ok(());
        }
        match iflock::lock_interface(dev, name) {
            Ok(l) => {
                self.iface_locks.insert(dev.to_owned(), l);
                Ok(())
            }
            Err(e @ LockError::Busy { .. }) => Err(format!("port {name}: {e}")),
            Err(e @ LockError::Unavailable(_)) => {
                if !self.locks_unavailable {
                    self.locks_unavailable = true;
                    tracing::warn!(
                        "{e}; interfaces are not protected against a second daemon \
                         (set QBRIDGE_LOCK_DIR to a writable directory)"
                    );
                }
                Ok(())
            }
        }
    }

    /// Whether a port of this daemon owns the TAP `ifname` in `netns` (then it is ours to
    /// reopen, not someone else's interface).
    fn owns_tap(&self, ifname: &str, netns: Option<&str>) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|s| s.spec.tap(&s.name) == Some((ifname, netns)))
    }

    /// Creates TAP `ifname` (in `netns`) with one queue per worker for port `id`; returns the
    /// queues, the TAP's name and its MTU. `mac`: the address to give it (stacked devices, host
    /// ports).
    fn open_tap(
        &self,
        id: PortId,
        name: &str,
        ifname: &str,
        netns: Option<&str>,
        mac: Option<[u8; 6]>,
    ) -> Result<(Opened, String, u32), String> {
        // TUNSETIFF on an existing name would join someone else's TAP (or fail on another
        // kind of device): qbridge creates its TAPs itself.
        if !ifname.contains('%') && !self.owns_tap(ifname, netns) {
            let exists = match netns {
                None => sys::ifindex(ifname).is_ok(),
                Some(ns) => run_in_netns(ns, || sys::ifindex(ifname).is_ok()).unwrap_or(false),
            };
            if exists {
                return Err(format!(
                    "port {name}: interface {ifname} already exists{}; qbridge creates its TAP \
                     itself (delete that interface or choose another name)",
                    netns.map(|n| format!(" in netns {n}")).unwrap_or_default()
                ));
            }
        }
        let n = self.workers.len();
        let mut cfg = TapConfig::new(Some(ifname));
        cfg.netns = netns.map(str::to_owned);
        // One queue per worker (IFF_MULTI_QUEUE): the kernel picks a queue per flow for what
        // it sends into the TAP, so each worker reads its own.
        cfg.queues = n;
        // Always multi-queue, also with one worker: a port that replaces another on the same
        // TAP in one batch attaches its queues to the existing device, which the old port's
        // queues leave afterwards (a single-queue TAP refuses a second queue: EBUSY).
        cfg.multi_queue = true;
        cfg.mac = mac;
        let mtu = self.session.switch().port_settings(id).mtu;
        if mtu != 1500 {
            cfg.device_mtu = Some(mtu);
        }
        let ports = TapPort::open_queues(cfg).map_err(|e| format!("port {name}: {e}"))?;
        let tap_name = ports
            .first()
            .map(|p| p.ifname().to_owned())
            .unwrap_or_default();
        let tap_mtu = ports.first().map_or(mtu, TapPort::device_mtu);
        tracing::info!(
            "port {name}: TAP {tap_name}{} with {} queues",
            netns.map(|n| format!(" in netns {n}")).unwrap_or_default(),
            ports.len()
        );
        let queues: Queues = ports.into_iter().map(|p| Box::new(p) as Queue).collect();
        let opened =
            distribute(queues, n, id.0 as usize).map_err(|e| format!("port {name}: {e}"))?;
        Ok((opened, tap_name, tap_mtu))
    }

    /// (Re)opens the queues of device port `id` (AF_PACKET, AF_XDP) as the configuration asks
    /// for now; the new queues replace the old ones in the workers at the next publish.
    pub(super) fn reopen_device(&mut self, id: u16, dev: &str) -> Result<(), IoError> {
        let spec = match self.slots.get(id as usize) {
            Some(Some(s)) => s.spec.clone(),
            _ => return Ok(()),
        };
        // A device that came back may have another address: its local FDB entries follow.
        let mac = sys::get_mac(dev).ok().map(qbridge_wire::MacAddr);
        self.session.switch_mut().set_port_address(PortId(id), mac);
        if let PortSpec::AfXdp { .. } = spec {
            let want_mtu = self
                .session
                .switch()
                .port_max_frame(PortId(id))
                .saturating_sub(14);
            let queues = open_afxdp_queues(&spec, want_mtu, self.workers.len(), id as usize)?;
            let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
                return Ok(());
            };
            slot.open = true;
            slot.status.open = true;
            slot.status.device_mtu = sys::get_mtu(dev).ok();
            self.generation += 1;
            slot.token = (self.generation << 16) | u64::from(id);
            self.detach.retain(|&d| d != id);
            self.attach.retain(|(a, _)| *a != id);
            self.attach.push((id, queues));
            self.publish_status(id);
            return Ok(());
        }
        self.open_afpacket(id, dev)
    }

    /// (Re)opens the AF_PACKET sockets of port `id` with the filter and MTU the configuration
    /// asks for now; the new queues replace the old ones in the workers at the next publish.
    pub(super) fn open_afpacket(&mut self, id: u16, dev: &str) -> Result<(), IoError> {
        let pid = PortId(id);
        let filter = self.rx_filter(pid);
        let want_mtu = self.session.switch().port_max_frame(pid).saturating_sub(14);
        let n = self.workers.len();
        let ports = self.afpacket_ports();
        let rx = self.fast_rx(id, filter.promisc);
        if rx != qbridge_io::afpacket::RxMode::None {
            if let Some(Some(slot)) = self.slots.get(id as usize) {
                self.fast_claim(&slot.name, dev);
            }
        }
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return Ok(());
        };
        // A reopened port keeps the ring it had.
        let had = slot.status.ring_frames;
        let (bypass, ring) = match &slot.spec {
            PortSpec::AfPacket {
                qdisc_bypass,
                ring_frames,
                ..
            } => (
                *qdisc_bypass,
                ring_frames
                    .or(had)
                    .unwrap_or_else(|| default_ring_frames(n, ports)),
            ),
            _ => (true, had.unwrap_or_else(|| default_ring_frames(n, ports))),
        };
        let (queues, handle, mtu, offloads) =
            open_afpacket_queues(&slot.name, dev, bypass, ring, &filter, want_mtu, n, rx)?;
        slot.fast = rx == qbridge_io::afpacket::RxMode::None;
        slot.status.ring_frames = Some(ring);
        slot.filter_handle = Some(handle);
        slot.status.offloads = Some(offload_status(offloads));
        *slot.shared.lock_offloads() = Some(offloads);
        slot.open = true;
        slot.status.open = true;
        slot.status.device_mtu = Some(mtu);
        slot.status.promisc = Some(filter.promisc);
        slot.filter = Some(filter);
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id);
        self.detach.retain(|&d| d != id);
        self.attach.retain(|(a, _)| *a != id);
        self.attach.push((id, queues));
        self.publish_status(id);
        Ok(())
    }

    /// Creates again the TAP of port `id` (a TAP port, a VLAN device, a macvlan endpoint, a
    /// host port) after its interface was deleted from outside, as it was first made (name,
    /// namespace, MAC address, MTU); its new queues replace the old ones at the next publish.
    pub(super) fn reopen_tap(&mut self, id: u16) -> Result<(), String> {
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return Ok(());
        };
        let (name, spec) = (slot.name.clone(), slot.spec.clone());
        let pid = PortId(id);
        let (queues, tap_name, mtu) = match &spec {
            PortSpec::Tap { ifname, netns } => self.open_tap(
                pid,
                &name,
                ifname.as_deref().unwrap_or(&name),
                netns.as_deref(),
                None,
            )?,
            PortSpec::Vlan { .. } | PortSpec::Macvlan { .. } | PortSpec::Host { .. } => {
                let (ifname, netns) = spec.host_tap(&name).unwrap_or((&name, None));
                let mac = self.session.switch().port_mac(pid).map(|m| m.0);
                self.open_tap(pid, &name, ifname, netns, mac)?
            }
            _ => return Ok(()),
        };
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            close_queues(queues);
            return Ok(());
        };
        slot.open = true;
        slot.status.open = true;
        slot.tap_mtu = Some(mtu);
        // A `tap%d` name may come back as another number.
        if let PortSpec::Tap { ifname, .. } = &spec {
            slot.status.ifname =
                (Some(tap_name.as_str()) != ifname.as_deref().or(Some(&name))).then_some(tap_name);
        }
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id);
        self.detach.retain(|&d| d != id);
        self.attach.retain(|(a, _)| *a != id);
        self.attach.push((id, queues));
        tracing::info!("port {name}: its TAP was deleted; created it again");
        Ok(())
    }

    pub(super) fn publish_status(&mut self, id: u16) {
        let (bond, bond_drops) = match self.slots.get(id as usize) {
            Some(Some(s)) => {
                let name = s.name.clone();
                (self.bond_member_traffic(&name), self.bond_drops(&name))
            }
            _ => (Vec::new(), None),
        };
        if let Some(Some(slot)) = self.slots.get_mut(id as usize) {
            slot.status.counters = crate::snapshot::backend_counters(&slot.shared);
            if matches!(slot.spec, PortSpec::AfPacket { .. }) {
                slot.status.fast_path = Some(
                    slot.open
                        && slot
                            .shared
                            .fast_ifindex
                            .load(std::sync::atomic::Ordering::Relaxed)
                            != 0,
                );
            }
            slot.status.bond_members = bond;
            slot.status.bond_drops = bond_drops;
            if let Some(o) = *slot.shared.lock_offloads() {
                slot.status.offloads = Some(offload_status(o));
            }
            if let Some(t) = &slot.vxlan {
                slot.status.vxlan_learned = super::vxlan::learned(t);
            }
            let st = slot.status.clone();
            let name = slot.name.clone();
            self.session.set_backend_status(&name, st);
        }
    }

    /// Copies every port's runtime status (its counters move with every batch) into the
    /// session, for a show command or a metrics scrape.
    pub(super) fn publish_all(&mut self) {
        self.fast_fold();
        for i in 0..self.slots.len() {
            self.publish_status(i as u16);
        }
    }
}

/// A device port that could not be opened: if its interface is only absent or down, the port
/// stays down (link watch) and the warning says so; any other failure is the command's error.
fn open_failed(slot: &mut Slot, dev: &str, e: IoError) -> Result<String, String> {
    if !e.is_link_down() {
        return Err(format!("port {}: {e}", slot.name));
    }
    slot.link_up = false;
    slot.status.error = Some(e.to_string());
    Ok(format!(
        "port {}: {e}; the port stays down and is opened when {dev} is up",
        slot.name
    ))
}

fn close_queues(queues: Opened) {
    for q in queues {
        let name = q.name().to_owned();
        if let Err(e) = q.close() {
            tracing::warn!("port {name}: {e}");
        }
    }
}

/// The interface name of a TAP-backed port (a TAP port, a VLAN device, a macvlan endpoint, a
/// host port): the name the kernel gave it (a `tap%d` pattern), else the `ifname` asked for,
/// else the port's name. The link watch asks the kernel about this name, never the port's own
/// name: `link add G type tap ifname tg` is interface `tg`.
pub(super) fn tap_ifname(slot: &Slot) -> String {
    if let Some(n) = &slot.status.ifname {
        return n.clone();
    }
    slot.spec
        .tap(&slot.name)
        .map_or_else(|| slot.name.clone(), |(i, _)| i.to_owned())
}

/// Whether a port's open backend serves `b` as it is: the same spec, or for a bond the same
/// members (its options reach the queues through `BondShared`, no reopening).
fn same_backend(a: &PortSpec, b: &PortSpec) -> bool {
    match (a, b) {
        (PortSpec::Bond(x), PortSpec::Bond(y)) => x.members == y.members,
        // Remotes are copied into the open socket's table (`Engine::sync_vxlan`).
        (PortSpec::Vxlan(x), PortSpec::Vxlan(y)) => x.same_socket(y) && x.learning == y.learning,
        _ => a == b,
    }
}

/// The host interfaces a port's backend binds to: an AF_PACKET or AF_XDP port's device, a
/// bond's members' devices.
fn devices_of(spec: &PortSpec) -> Vec<&str> {
    match spec {
        PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => vec![dev],
        // A bond's members hold their interfaces as ports do.
        PortSpec::Bond(b) => b.members.iter().flat_map(|m| devices_of(&m.spec)).collect(),
        _ => Vec::new(),
    }
}

/// The interface whose address is a port's own (the bridge side of its wire): an AF_PACKET or
/// AF_XDP port's device. A TAP's interface is the far end of the wire (the host or VM behind
/// the port, whose address is learned like any host's), stacked devices and host ports have
/// addresses the switch knows, pcap ports and patch links have none.
fn own_interface(spec: &PortSpec) -> Option<&str> {
    match spec {
        PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. } => Some(dev),
        _ => None,
    }
}
