//! Link state and MTU, on the control thread: a port goes down (its link, or a worker's
//! queue failing with a link-down error) and up again; after each command the link state is
//! pushed into the switch and device and TAP MTUs are raised for the port's largest frame
//! ([`Engine::sync_port`]); once a second the link watch ([`Engine::link_watch`]) closes the
//! AF_PACKET and AF_XDP ports whose interface is not up and reopens them when it is, and
//! creates again a TAP deleted from outside (`super::ports` reopens).

use super::ports::tap_ifname;
use super::Engine;
use crate::shared::Ctl;
use qbridge_bridge::PortId;
use qbridge_control::PortSpec;
use qbridge_io::netns::run_in_netns;
use qbridge_io::{sys, IoError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

/// How long the notification thread waits in one read before it checks whether to stop.
const LINK_EVENTS_WAIT_MS: u32 = 500;

/// The kernel's link notifications, for a link watch that reacts at once (a carrier lost on
/// a ring port is a spanning-tree topology change: waiting for the next second of the
/// watch would add up to a second to the loss window). One thread blocked on a netlink socket
/// of the daemon's namespace sends [`Ctl::LinkEvent`] (at most one waiting at a time);
/// without the socket (no permission), the watch stays once a second.
#[derive(Debug)]
pub(super) struct LinkNotifier {
    /// The control thread has not taken the last event yet.
    pub pending: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl LinkNotifier {
    pub(super) fn start(tx: mpsc::Sender<Ctl>) -> Option<LinkNotifier> {
        let events = match sys::LinkEvents::open(LINK_EVENTS_WAIT_MS) {
            Ok(e) => e,
            Err(e) => {
                tracing::info!("no link notifications ({e}): the link watch looks once a second");
                return None;
            }
        };
        let pending = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (pending.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("qbridge-links".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if events.wait()
                        && !p.swap(true, Ordering::AcqRel)
                        && tx.send(Ctl::LinkEvent).is_err()
                    {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::info!("no link notification thread ({e}): the link watch looks once a second");
            return None;
        }
        Some(LinkNotifier { pending, stop })
    }
}

impl Drop for LinkNotifier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Engine {
    /// A link notification: the link watch now, and the spanning trees follow.
    pub(super) fn link_event(&mut self) {
        if let Some(n) = &self.link_events {
            n.pending.store(false, Ordering::Release);
        }
        self.link_watch();
        self.stp_sync();
    }

    /// Once a second: AF_PACKET ports whose interface is not up (gone, admin down, no carrier)
    /// go down; ports that are down are reopened when their interface is up again.
    pub(super) fn link_watch(&mut self) {
        for i in 0..self.slots.len() {
            let Some(slot) = &self.slots[i] else {
                continue;
            };
            let id = i as u16;
            match (&slot.spec, slot.link_up) {
                (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, true) => {
                    match sys::link_state_now(dev) {
                        Ok(sys::LinkState::Up) => {
                            let dev = dev.clone();
                            self.follow_address(id, &dev);
                        }
                        Ok(s) => self.link_down(id, &format!("interface {dev}: {s:?}")),
                        Err(e) => self.link_down(id, &e.to_string()),
                    }
                }
                (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, false) => {
                    if matches!(sys::link_state_now(dev), Ok(sys::LinkState::Up)) {
                        let dev = dev.clone();
                        match self.reopen_device(id, &dev) {
                            Ok(()) => self.link_up(id),
                            Err(e) => tracing::debug!("port {id}: reopen failed: {e}"),
                        }
                    }
                }
                (
                    PortSpec::Tap { netns, .. }
                    | PortSpec::Vlan { netns, .. }
                    | PortSpec::Macvlan { netns, .. }
                    | PortSpec::Host { netns, .. },
                    up,
                ) => {
                    let ifname = tap_ifname(slot);
                    let state = match netns {
                        Some(ns) => {
                            let n = ifname.clone();
                            qbridge_io::netns::run_in_netns(ns, move || sys::link_state(&n))
                                .and_then(|r| r)
                        }
                        None => sys::link_state(&ifname),
                    };
                    let gone = matches!(state, Err(IoError::NoSuchInterface { .. }));
                    let queues = if gone {
                        None
                    } else {
                        tun_queues_in(&ifname, netns.as_deref())
                    };
                    if self.foreign_tap_queues(id, &ifname, queues, up) {
                        continue;
                    }
                    if up {
                        // Workers see a deleted TAP too (EBADFD), but only if they poll it.
                        if gone {
                            self.link_down(id, &format!("TAP {ifname} was deleted"));
                        }
                    } else if gone {
                        match self.reopen_tap(id) {
                            Ok(()) => self.link_up(id),
                            Err(e) => tracing::debug!("port {id}: cannot create its TAP: {e}"),
                        }
                    } else if matches!(state, Ok(sys::LinkState::Up | sys::LinkState::NoCarrier)) {
                        self.link_up(id);
                    }
                }
                _ => {}
            }
        }
    }

    /// TAP-backed port `id` whose TAP `ifname` has `queues` queues attached: more than qbridge
    /// opened (one per worker) means another program attached to qbridge's end of the TAP —
    /// qemu given `ifname=` of a qbridge TAP with `queues=N` (without `queues` qemu's attach
    /// fails, EINVAL, as the TAP is multi-queue). Its frames would enter the bridge as the
    /// host's and the host's would reach it: refused, the port goes down (its error says why
    /// and what to do; `link show`, the log) until the extra queues close. Seen on two checks in
    /// a row, since a port replacing another on the same TAP in one batch holds both sets of
    /// queues for a moment (the first sighting is remembered as the slot's `tun_queues`
    /// condition in `warned`). Costs one `RTM_GETLINK` per TAP-backed port and second.
    /// Returns whether the port stays down.
    fn foreign_tap_queues(&mut self, id: u16, ifname: &str, queues: Option<u32>, up: bool) -> bool {
        let ours = self.workers.len() as u32;
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return false;
        };
        let Some(q) = queues.filter(|&q| q > ours) else {
            slot.warned.remove("tun_queues");
            return false;
        };
        let first = slot.warned.insert("tun_queues", String::new()).is_none();
        if up && first {
            return false;
        }
        if up {
            self.link_down(
                id,
                &format!(
                    "TAP {ifname} has {q} queues attached, qbridge opened {ours}: another program \
                     (qemu with queues=N given this TAP?) attached to qbridge's own end of it; \
                     the port stays down until it lets go. A VM needs a TAP of its own: qemu \
                     -netdev tap,ifname=…,script=qbridge-ifup (docs/hosts.md)"
                ),
            );
        }
        true
    }

    /// The interface address of an AF_PACKET or AF_XDP port read again: a change moves the
    /// port's local FDB entries to the new address (Linux follows `NETDEV_CHANGEADDR` with
    /// `br_fdb_changeaddr`). Runs on every link notification (an address change is one), once
    /// a second, and after every command (so a `link set dev P master BR` right after `ip link
    /// set dev IF address …` finds the new address). Returns whether it changed.
    pub(super) fn follow_address(&mut self, id: u16, dev: &str) -> bool {
        let Ok(mac) = sys::get_mac(dev) else {
            return false;
        };
        let mac = qbridge_wire::MacAddr(mac);
        let sw = self.session.switch_mut();
        let before = sw.port_address(PortId(id));
        sw.set_port_address(PortId(id), Some(mac));
        let after = sw.port_address(PortId(id));
        if before == after {
            return false;
        }
        tracing::info!(
            "port {}: interface {dev} now has address {}: local FDB entries moved",
            self.slots[id as usize]
                .as_ref()
                .map_or("?", |s| s.name.as_str()),
            after.map_or_else(|| "none".to_string(), |m| m.to_string())
        );
        true
    }

    /// Marks port `id` down (once): the switch stops using it and forgets its learned
    /// addresses; AF_PACKET sockets are closed and reopened by the link watch.
    pub(super) fn link_down(&mut self, id: u16, why: &str) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        if !slot.link_up {
            return;
        }
        slot.link_up = false;
        slot.link_downs += 1;
        if let PortSpec::AfPacket { .. } | PortSpec::AfXdp { .. } = slot.spec {
            if slot.open {
                self.detach.push(id);
            }
            slot.open = false;
            slot.status.open = false;
            slot.filter = None;
            slot.filter_handle = None;
        }
        slot.status.error = Some(why.to_owned());
        tracing::warn!(
            "port {}: link down ({why}); retrying every second",
            slot.name
        );
        self.session.switch_mut().set_link_state(PortId(id), false);
        self.publish_status(id);
    }

    fn link_up(&mut self, id: u16) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        if slot.link_up {
            return;
        }
        slot.link_up = true;
        slot.status.error = None;
        tracing::info!("port {}: link up; forwarding resumes", slot.name);
        self.session.switch_mut().set_link_state(PortId(id), true);
        self.publish_status(id);
    }

    /// After a command: push the link state into the switch, raise the device MTU if the
    /// port's largest frame grew (AF_PACKET, AF_XDP), and change an AF_PACKET port's receive
    /// filter in place if it must change.
    pub(super) fn sync_port(&mut self, id: u16, warnings: &mut Vec<String>) {
        let pid = PortId(id);
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let link_up = slot.link_up;
        if self.session.switch().port_link_up(pid) != link_up {
            self.session.switch_mut().set_link_state(pid, link_up);
        }
        let want_tap_mtu = self.session.switch().port_settings(pid).mtu;
        if slot.open && slot.tap_mtu.is_some_and(|m| m < want_tap_mtu) {
            self.raise_tap_mtu(id, want_tap_mtu, warnings);
        }
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let device = match (&slot.spec, slot.open) {
            (PortSpec::AfPacket { dev, .. } | PortSpec::AfXdp { dev, .. }, true) => Some(dev),
            _ => None,
        };
        if let Some(dev) = device {
            let is_afpacket = matches!(slot.spec, PortSpec::AfPacket { .. });
            let dev = dev.clone();
            let name = slot.name.clone();
            let max_frame = self.session.switch().port_max_frame(pid);
            let want = max_frame.saturating_sub(14);
            let have = slot.status.device_mtu.unwrap_or(0);
            let filter_now = slot.filter.clone();
            self.follow_address(id, &dev);
            if want > have {
                match sys::raise_mtu(&dev, want) {
                    Ok(m) => {
                        tracing::info!(
                            "port {name}: device MTU of {dev} raised from {have} to {m} \
                             (largest frame {max_frame} bytes)"
                        );
                        if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                            s.status.device_mtu = Some(m);
                            s.clear_warning("mtu");
                        }
                    }
                    Err(e) => {
                        let msg = self.mtu_error(pid, &dev, want, &e);
                        if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                            s.warn_once("mtu", msg, warnings);
                        }
                    }
                }
            } else if let Some(Some(s)) = self.slots.get_mut(id as usize) {
                s.clear_warning("mtu");
            }
            let filter = self.rx_filter(pid);
            if is_afpacket && filter_now.as_ref() != Some(&filter) {
                let fast_was = self
                    .slots
                    .get(id as usize)
                    .and_then(|s| s.as_ref())
                    .is_some_and(|s| s.fast);
                let promisc = filter.promisc;
                self.change_filter(id, filter, warnings);
                // The fast path receives only for promiscuous ports (it does not filter by
                // address); a port that turns either way is reopened the other way.
                if self.fast.is_some() && fast_was != promisc {
                    if let Err(e) = self.open_afpacket(id, &dev) {
                        warnings.push(format!("port {name}: cannot reopen {dev}: {e}"));
                    }
                }
            }
        }
        self.bond_sync_mtu(id, warnings);
        self.publish_status(id);
    }

    /// Raises the MTU of TAP-backed port `id`'s TAP to the port's `mtu` (in the TAP's
    /// namespace), as creating it does: `link set dev vm0 mtu 9000` is the TAP's MTU too, so
    /// the host behind it can send what the port forwards. Never lowered (creation does not
    /// lower it either: the host may keep a larger MTU).
    fn raise_tap_mtu(&mut self, id: u16, mtu: u32, warnings: &mut Vec<String>) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let ifname = tap_ifname(slot);
        let netns = match &slot.spec {
            PortSpec::Tap { netns, .. }
            | PortSpec::Vlan { netns, .. }
            | PortSpec::Macvlan { netns, .. }
            | PortSpec::Host { netns, .. } => netns.clone(),
            _ => None,
        };
        let r = match &netns {
            Some(ns) => {
                let n = ifname.clone();
                run_in_netns(ns, move || sys::raise_mtu(&n, mtu)).and_then(|r| r)
            }
            None => sys::raise_mtu(&ifname, mtu),
        };
        match r {
            Ok(m) => {
                tracing::info!(
                    "port {}: MTU of TAP {ifname} raised from {} to {m}",
                    slot.name,
                    slot.tap_mtu.unwrap_or(0)
                );
                slot.tap_mtu = Some(m);
                slot.clear_warning("tap_mtu");
            }
            Err(e) => {
                let msg = format!(
                    "port {}: cannot raise the MTU of TAP {ifname} to {mtu}: {e}",
                    slot.name
                );
                slot.warn_once("tap_mtu", msg, warnings);
            }
        }
    }

    /// Why port `pid` needs a device MTU of `want`: `mtu 1500 + 8 bytes for two VLAN tags,
    /// envhdr len auto`.
    fn mtu_need(&self, pid: PortId, want: u32) -> String {
        let sw = self.session.switch();
        let st = sw.port_settings(pid);
        let extra = want.saturating_sub(st.mtu);
        let what = match (extra, extra % 4) {
            (0, _) => "no VLAN tag".to_string(),
            (4, _) => "one VLAN tag".to_string(),
            (8, _) => "two VLAN tags".to_string(),
            (n, 0) => format!("{} VLAN tags", n / 4),
            _ => "the envelope".to_string(),
        };
        let envhdr = match st.envhdr_len {
            Some(n) => format!("envhdr len {n}"),
            None => "envhdr len auto".to_string(),
        };
        format!("mtu {} + {extra} bytes for {what}, {envhdr}", st.mtu)
    }

    /// The message for a device MTU port `pid` could not get: which MTU, why it is needed, and
    /// the device's maximum when the kernel tells it.
    pub(super) fn mtu_error(&self, pid: PortId, dev: &str, want: u32, e: &IoError) -> String {
        let name = self.session.switch().port_name(pid).unwrap_or("?");
        let need = self.mtu_need(pid, want);
        match e {
            IoError::MtuAboveMax { .. } => {
                let why = match sys::mtu_limit(dev) {
                    Ok(l) => match (l.kind.as_deref(), &l.lower, l.max()) {
                        (Some("vxlan"), Some((ul, ul_mtu)), Some(max)) => format!(
                            "max {max} (underlay {ul}'s MTU {ul_mtu} less {} bytes of VXLAN \
                             encapsulation: raise {ul}'s MTU to {} first, or lower the port's \
                             mtu)",
                            l.vxlan_overhead(),
                            want + l.vxlan_overhead()
                        ),
                        (_, Some((lower, lower_mtu)), _) => format!(
                            "above what {dev} takes over its lower device {lower} (MTU \
                             {lower_mtu}): raise {lower}'s MTU first, or lower the port's mtu"
                        ),
                        (_, None, Some(max)) => format!("max {max}"),
                        _ => "above the device's maximum".to_string(),
                    },
                    Err(_) => "above the device's maximum (for a tunnel device: its underlay's \
                               MTU less the encapsulation)"
                        .to_string(),
                };
                format!("port {name}: cannot raise {dev}'s MTU to {want} ({need}): {why}")
            }
            e => format!("port {name}: cannot raise {dev}'s MTU to {want} ({need}): {e}"),
        }
    }
}

/// The queues attached to TAP `ifname` (in `netns`), when the kernel says.
fn tun_queues_in(ifname: &str, netns: Option<&str>) -> Option<u32> {
    match netns {
        Some(ns) => {
            let n = ifname.to_owned();
            run_in_netns(ns, move || sys::tun_queues(&n)).ok()?.ok()?
        }
        None => sys::tun_queues(ifname).ok()?,
    }
}
