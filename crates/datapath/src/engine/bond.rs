//! Bonds on the control thread: opening a bond's queues ([`crate::bond_port::BondPort`] over
//! its members' AF_PACKET sockets), and driving the bonds' LACP engines (which live in the
//! session: `qbridge_control::Session::bond_mut`) with the engine's clock — member link
//! watch every `miimon` ms, Slow Protocols frames the bond's queues hand up, timers at
//! `next_deadline` — and applying what they say: protocol frames sent on a member, each
//! member's collecting state and the transmit table published to the bond's queues, events
//! logged, and the bond's carrier as the core port's link state.

use super::Engine;
use crate::backends::{default_ring_frames, open_afpacket_queues};
use crate::bond_port::{AbsentMember, BondPort, BondShared};
use crate::queue::{Opened, Queue};
use crate::shared::RxFilter;
use qbridge_bridge::PortId;
use qbridge_control::{BondSpec, PortSpec};
use qbridge_io::afpacket::RxFilterHandle;
use qbridge_io::sys;
use qbridge_lacp::{Duplex, Event, HashPolicy, Link, MemberId, OnOff, Output, BUCKETS};
use std::collections::HashMap;
use std::sync::Arc;

/// A bond's runtime state on the control thread.
#[derive(Debug)]
pub(super) struct BondRt {
    pub(super) shared: Arc<BondShared>,
    /// The members' receive filters (promiscuous), held while the bond is open.
    handles: Vec<Arc<RxFilterHandle>>,
    /// The link each member was last reported with, by LACP port number.
    links: HashMap<u16, Link>,
    last_watch_ms: u64,
    /// What the queues were last given: table generation, policy, member order.
    published: Option<(u64, HashPolicy, Vec<u16>)>,
    /// Members whose interface did not exist at the last opening (name, device): the bond is
    /// opened again when one appears.
    absent: Vec<(String, String)>,
    /// The member names the shared per-member counters are kept for, by position.
    counted_as: Vec<String>,
    /// The fast path receives for the members (their sockets take only Slow Protocols
    /// frames) and sends to them (decision 74).
    fast: bool,
    /// Each member's interface, its index and address when the bond opened (0 and zeros:
    /// absent), by position.
    ends: Vec<(String, u32, [u8; 6])>,
}

fn member_dev(spec: &PortSpec) -> Option<&str> {
    match spec {
        PortSpec::AfPacket { dev, .. } => Some(dev),
        _ => None,
    }
}

impl Engine {
    /// Milliseconds on the engine's clock, for the LACP engines.
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Opens bond `name`'s queues: each member's AF_PACKET sockets (promiscuous: the bond
    /// takes every frame its members see, Slow Protocols frames included), one [`BondPort`]
    /// per worker over the members' queues of that worker.
    pub(super) fn open_bond(
        &mut self,
        id: PortId,
        name: &str,
        spec: &BondSpec,
    ) -> Result<Opened, String> {
        let n = self.workers.len();
        let mut rt = match self.bonds.remove(name) {
            Some(rt) => rt,
            None => BondRt {
                shared: Arc::new(
                    BondShared::new(name).map_err(|e| format!("bond {name}: eventfd: {e}"))?,
                ),
                handles: Vec::new(),
                links: HashMap::new(),
                last_watch_ms: 0,
                published: None,
                absent: Vec::new(),
                counted_as: Vec::new(),
                fast: false,
                ends: Vec::new(),
            },
        };
        let order: Vec<String> = spec.members.iter().map(|m| m.name.clone()).collect();
        if rt.counted_as != order {
            rt.shared.reorder_members(&rt.counted_as, &order);
            rt.counted_as = order;
        }
        let filter = RxFilter {
            promisc: true,
            unicast: Vec::new(),
        };
        let want_mtu = self.session.switch().port_max_frame(id).saturating_sub(14);
        // With the fast path, the program receives the members' frames at TC ingress; their
        // sockets take only the Slow Protocols frames it passes on (decision 74).
        let fast = self.fast_rx(id.0, true) == qbridge_io::afpacket::RxMode::None;
        let rx = if fast {
            qbridge_io::afpacket::RxMode::Slow
        } else {
            qbridge_io::afpacket::RxMode::Frames
        };
        let mut ends = Vec::new();
        let mut handles = Vec::new();
        let mut absent = Vec::new();
        let mut per_member: Vec<std::vec::IntoIter<Queue>> = Vec::new();
        for m in &spec.members {
            let PortSpec::AfPacket {
                dev,
                qdisc_bypass,
                ring_frames,
            } = &m.spec
            else {
                self.bonds.insert(name.to_string(), rt);
                return Err(format!(
                    "bond {name}: member {} is not an afpacket port",
                    m.name
                ));
            };
            let ring = ring_frames.unwrap_or_else(|| default_ring_frames(n, spec.members.len()));
            match open_afpacket_queues(&m.name, dev, *qdisc_bypass, ring, &filter, want_mtu, n, rx)
            {
                Ok((queues, handle, mtu, _)) => {
                    tracing::info!(
                        "bond {name}: member {} on {dev} (device mtu {mtu}, {n} queues)",
                        m.name
                    );
                    if !fast {
                        // Its sockets take every frame: a dead daemon's filter must not
                        // forward them as well (as for an afpacket port).
                        self.fast_claim(&m.name, dev);
                    }
                    handles.push(handle);
                    per_member.push(queues.into_iter());
                    ends.push((
                        dev.clone(),
                        sys::ifindex(dev).unwrap_or(0),
                        sys::get_mac(dev).unwrap_or([0; 6]),
                    ));
                }
                Err(e) if e.is_link_down() => {
                    // As an afpacket port whose interface is missing: the bond opens without
                    // it and again when it appears.
                    tracing::warn!(
                        "bond {name}: member {}: {e}; the member stays down until {dev} exists",
                        m.name
                    );
                    absent.push((m.name.clone(), dev.clone()));
                    ends.push((dev.clone(), 0, [0; 6]));
                    let q: Vec<Queue> = (0..n)
                        .map(|_| {
                            Box::new(AbsentMember {
                                name: m.name.clone(),
                            }) as Queue
                        })
                        .collect();
                    per_member.push(q.into_iter());
                }
                Err(e) => {
                    self.bonds.insert(name.to_string(), rt);
                    return Err(format!("bond {name}: member {}: {e}", m.name));
                }
            }
        }
        let mut opened: Opened = Vec::with_capacity(n);
        for q in 0..n {
            let members: Vec<Queue> = per_member.iter_mut().filter_map(Iterator::next).collect();
            match BondPort::new(name, q, members, rt.shared.clone(), self.ctl_tx.clone()) {
                Ok(port) => opened.push(Box::new(port)),
                Err(e) => {
                    self.bonds.insert(name.to_string(), rt);
                    return Err(format!("bond {name}: {e}"));
                }
            }
        }
        let mut rt = rt;
        rt.handles = handles;
        rt.published = None;
        rt.absent = absent;
        rt.fast = fast;
        rt.ends = ends;
        // Every member's link is told to the LACP engine again: a member added now (its port
        // number may be one a removed member had) starts with its link down there.
        rt.links.clear();
        self.bonds.insert(name.to_string(), rt);
        Ok(opened)
    }

    /// Whether `op` is one command that moves a port into or out of a bond (`master BOND`,
    /// `nomaster` or `link del` of a member, `link del` of a bond): it reopens backends, so
    /// it must be undone whole if they cannot open.
    pub(super) fn bond_membership_change(&self, op: &qbridge_control::Op) -> bool {
        use qbridge_control::{Command, LinkCommand, MasterChange};
        let qbridge_control::Op::Command { words, .. } = op else {
            return false;
        };
        let is_bond = |n: &str| matches!(self.session.port_spec(n), Some(PortSpec::Bond(_)));
        let member = |n: &str| self.session.bond_of_member(n).is_some();
        match qbridge_control::parse_words(words) {
            Ok(Command::Link(LinkCommand::SetPort { dev, opts })) => match &opts.master {
                Some(MasterChange::Set(m)) => is_bond(m) || member(&dev),
                Some(MasterChange::Unset) => member(&dev),
                None => false,
            },
            Ok(Command::Link(LinkCommand::Del { dev })) => is_bond(&dev) || member(&dev),
            _ => false,
        }
    }

    /// After a command: raises bond port `id`'s members' device MTUs to the bond's largest
    /// frame, as for an afpacket port (stacked VLANs on the bond grow its envelope).
    pub(super) fn bond_sync_mtu(&mut self, id: u16, warnings: &mut Vec<String>) {
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            return;
        };
        let PortSpec::Bond(b) = &slot.spec else {
            return;
        };
        let want = self
            .session
            .switch()
            .port_max_frame(PortId(id))
            .saturating_sub(14);
        for m in &b.members {
            let Some(dev) = member_dev(&m.spec) else {
                continue;
            };
            let Ok(have) = sys::get_mtu(dev) else {
                continue;
            };
            if want <= have {
                continue;
            }
            match sys::raise_mtu(dev, want) {
                Ok(mtu) => tracing::info!(
                    "bond {}: device MTU of member {} ({dev}) raised from {have} to {mtu}",
                    slot.name,
                    m.name
                ),
                Err(e) => warnings.push(format!(
                    "bond {}: member {}: cannot raise the MTU of {dev} to {want}: {e}",
                    slot.name, m.name
                )),
            }
        }
    }

    /// Bond `name`'s own drops (`None`: not a bond).
    pub(super) fn bond_drops(&self, name: &str) -> Option<qbridge_control::BondDrops> {
        let rt = self.bonds.get(name)?;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        Some(qbridge_control::BondDrops {
            pdu_overflow: get(&rt.shared.pdu_overflow),
            tx_no_member: get(&rt.shared.tx_no_member),
        })
    }

    /// Bond `name`'s members' traffic as its queues count it (empty: not a bond).
    pub(super) fn bond_member_traffic(
        &mut self,
        name: &str,
    ) -> Vec<qbridge_control::BondMemberTraffic> {
        // What the fast path received, sent and dropped on each member (decision 74): the
        // members' counters hold the frames of both paths.
        let id = self.session.switch().port_id(name).ok();
        let mut fast = [qbridge_fastpath::MemberStats::default(); crate::bond_port::MAX_MEMBERS];
        if let (Some(rt), Some(id), Some(true)) =
            (self.fast.as_mut(), id, self.bonds.get(name).map(|b| b.fast))
        {
            for (pos, d) in fast.iter_mut().enumerate() {
                *d = rt.member_stats(id.0, pos);
            }
        }
        let (Some(rt), Some(PortSpec::Bond(b))) =
            (self.bonds.get(name), self.session.port_spec(name))
        else {
            return Vec::new();
        };
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        b.members
            .iter()
            .zip(rt.shared.members.iter())
            .zip(fast)
            .map(|((m, t), f)| qbridge_control::BondMemberTraffic {
                name: m.name.clone(),
                rx_frames: get(&t.rx_frames) + f.rx_frames,
                rx_bytes: get(&t.rx_bytes) + f.rx_bytes,
                tx_frames: get(&t.tx_frames) + f.tx_frames,
                tx_bytes: get(&t.tx_bytes) + f.tx_bytes,
                rx_not_collecting: get(&t.rx_not_collecting) + f.rx_not_collecting,
                rx_pdus: get(&t.rx_pdus),
                tx_pdus: get(&t.tx_pdus),
                errors: get(&t.errors),
            })
            .collect()
    }

    /// A Slow Protocols frame one of bond `bond`'s queues handed up, from the member at
    /// position `pos`.
    pub(super) fn bond_pdu(&mut self, bond: &str, pos: u8, frame: &[u8]) {
        if let Some(rt) = self.bonds.get(bond) {
            rt.shared.pdu_taken();
        }
        let number = match self.session.port_spec(bond) {
            Some(PortSpec::Bond(b)) => b.members.get(pos as usize).map(|m| m.port_number),
            _ => None,
        };
        let now = self.now_ms();
        if let (Some(number), Some(engine)) = (number, self.session.bond_mut(bond)) {
            let _ = engine.receive(now, MemberId(u32::from(number)), frame);
        }
    }

    /// How long the control loop may wait before [`Engine::bond_run`] is due: the earliest
    /// LACP timer or member link watch, in nanoseconds (`u64::MAX` without bonds).
    pub(super) fn bond_wait_ns(&self) -> u64 {
        let now = self.now_ms();
        let mut due = u64::MAX;
        for (name, rt) in &self.bonds {
            let Some(b) = self.session.bond(name) else {
                continue;
            };
            let miimon = u64::from(b.config().miimon_ms.max(10));
            due = due.min(rt.last_watch_ms + miimon);
            if let Some(d) = b.next_deadline() {
                due = due.min(d);
            }
        }
        if due == u64::MAX {
            return u64::MAX;
        }
        due.saturating_sub(now).max(1) * 1_000_000
    }

    /// Drives every bond: member link watch, timers, outputs, table, carrier. Publishes a new
    /// plan when a bond's carrier changed.
    pub(super) fn bond_run(&mut self) {
        if self.bonds.is_empty() {
            return;
        }
        let now = self.now_ms();
        let names = self.session.bond_names();
        self.bonds.retain(|k, _| names.contains(k));
        let mut carrier_changed = false;
        let mut reopen = Vec::new();
        for name in names {
            let Some(PortSpec::Bond(spec)) = self.session.port_spec(&name).cloned() else {
                continue;
            };
            let Some(rt) = self.bonds.get_mut(&name) else {
                continue;
            };
            let Some(engine) = self.session.bond_mut(&name) else {
                continue;
            };
            let miimon = u64::from(engine.config().miimon_ms.max(10));
            if now >= rt.last_watch_ms + miimon || rt.last_watch_ms == 0 {
                rt.last_watch_ms = now.max(1);
                if rt.absent.iter().any(|(_, dev)| sys::ifindex(dev).is_ok()) {
                    reopen.push(name.clone());
                }
                for m in &spec.members {
                    let Some(dev) = member_dev(&m.spec) else {
                        continue;
                    };
                    // The driver's carrier, not IFF_RUNNING, which the kernel's linkwatch
                    // updates up to a second late (`sys::link_state_now`).
                    let link = match sys::link_state_now(dev) {
                        Ok(sys::LinkState::Up) => Link::Up {
                            speed_mbps: sys::link_speed(dev).unwrap_or(0),
                            duplex: Duplex::Full,
                        },
                        _ => Link::Down,
                    };
                    if rt.links.get(&m.port_number) != Some(&link) {
                        rt.links.insert(m.port_number, link);
                        tracing::info!("bond {name}: member {} link {link:?}", m.name);
                        let _ = engine.set_link(now, MemberId(u32::from(m.port_number)), link);
                    }
                }
            }
            if engine.next_deadline().is_some_and(|d| d <= now) {
                engine.poll(now);
            }
            let pos_of = |id: MemberId| {
                spec.members
                    .iter()
                    .position(|m| u32::from(m.port_number) == id.0)
            };
            for out in engine.drain_outputs() {
                match out {
                    Output::Transmit { member, frame } => {
                        if let Some(p) = pos_of(member) {
                            rt.shared.send(p, frame);
                        }
                    }
                    Output::MemberState { .. } => {}
                    Output::Event(e) => log_event(&name, &spec, e),
                }
            }
            for (p, m) in spec.members.iter().enumerate() {
                let on = engine
                    .member_view(MemberId(u32::from(m.port_number)))
                    .is_some_and(|v| v.collecting == OnOff::On);
                rt.shared.set_collecting(p, on);
            }
            let order: Vec<u16> = spec.members.iter().map(|m| m.port_number).collect();
            let policy = engine.config().hash_policy;
            let table = engine.tx_table();
            let want = (table.generation(), policy, order);
            if rt.published.as_ref() != Some(&want) {
                let mut buckets = [None; BUCKETS];
                for (b, m) in buckets.iter_mut().zip(table.buckets()) {
                    *b = m.and_then(pos_of);
                }
                rt.shared.publish(policy, &buckets);
                rt.published = Some(want);
            }
            let carrier = engine.carrier() == OnOff::On;
            if let Ok(id) = self.session.switch().port_id(&name) {
                if let Some(Some(slot)) = self.slots.get_mut(id.0 as usize) {
                    if slot.link_up != carrier {
                        slot.link_up = carrier;
                        tracing::info!(
                            "bond {name}: carrier {}",
                            if carrier { "up" } else { "down" }
                        );
                        self.session.switch_mut().set_link_state(id, carrier);
                        carrier_changed = true;
                    }
                }
            }
        }
        for name in reopen {
            self.reopen_bond(&name);
            carrier_changed = true;
        }
        // The program's tables as the queues' were just published.
        self.bond_fast_sync();
        if carrier_changed {
            self.publish();
            self.monitors.notify(&self.session);
        }
    }

    /// Opens bond `name`'s queues again (a member's interface appeared); they replace the old
    /// ones at the next publish.
    fn reopen_bond(&mut self, name: &str) {
        let Ok(id) = self.session.switch().port_id(name) else {
            return;
        };
        let Some(PortSpec::Bond(spec)) = self.session.port_spec(name).cloned() else {
            return;
        };
        let queues = match self.open_bond(id, name, &spec) {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!("{e}");
                return;
            }
        };
        tracing::info!("bond {name}: opened again (a member's interface appeared)");
        let Some(Some(slot)) = self.slots.get_mut(id.0 as usize) else {
            return;
        };
        slot.open = true;
        slot.status.open = true;
        self.generation += 1;
        slot.token = (self.generation << 16) | u64::from(id.0);
        self.detach.retain(|&d| d != id.0);
        self.attach.retain(|(a, _)| *a != id.0);
        self.attach.push((id.0, queues));
    }
}

impl Engine {
    /// The fast path's view of every bond (decision 74): for each bond whose members the
    /// program receives for, each member's entry (the bond's port index, whether it collects)
    /// and the transmit table the bond's queues have (bucket → member interface), written
    /// where they changed; the bond's egress marked for the workers' flows
    /// ([`crate::fastpath::bond::BOND_EGRESS`]). Bonds gone or not served are forgotten.
    /// Called when a bond's table is published and before every plan, so a member that
    /// stops distributing (its link went down, LACP) takes no frame from the program after
    /// the daemon knows it.
    pub(super) fn bond_fast_sync(&mut self) {
        let Some(rt) = self.fast.as_mut() else {
            return;
        };
        let plan = self.session.switch_mut().plan();
        let mut keep = std::collections::HashSet::new();
        for (name, b) in &self.bonds {
            let Ok(id) = self.session.switch().port_id(name) else {
                continue;
            };
            let Some(Some(slot)) = self.slots.get(id.0 as usize) else {
                continue;
            };
            let served = b.fast && slot.open;
            slot.shared.fast_ifindex.store(
                if served {
                    crate::fastpath::bond::BOND_EGRESS
                } else {
                    0
                },
                std::sync::atomic::Ordering::Relaxed,
            );
            let (Some(PortSpec::Bond(spec)), Some(engine), true) = (
                self.session.port_spec(name),
                self.session.bond(name),
                served,
            ) else {
                continue;
            };
            keep.insert(id.0);
            let index = crate::fastpath::port_index(slot.token);
            let tpid = plan.port_tpid(id).0;
            let mut members = Vec::with_capacity(spec.members.len());
            for (pos, (m, (dev, _, mac))) in spec.members.iter().zip(&b.ends).enumerate() {
                let collecting = engine
                    .member_view(MemberId(u32::from(m.port_number)))
                    .is_some_and(|v| v.collecting == OnOff::On);
                let mut port = crate::fastpath::control::port_entry(index, false, tpid, *mac);
                port.flags |= qbridge_fastpath::PORT_BOND_MEMBER
                    | (pos as u32 & 0xf) << qbridge_fastpath::PORT_MEMBER_SHIFT
                    | if collecting {
                        qbridge_fastpath::PORT_COLLECTING
                    } else {
                        0
                    };
                members.push((dev.clone(), port));
            }
            let mut table = qbridge_fastpath::Bond {
                policy: match engine.config().hash_policy {
                    HashPolicy::Layer2 => qbridge_fastpath::HASH_L2,
                    HashPolicy::Layer2Vlan => qbridge_fastpath::HASH_L2_VLAN,
                    HashPolicy::Layer34 => qbridge_fastpath::HASH_L34,
                    HashPolicy::InnerLayer34 => qbridge_fastpath::HASH_INNER_L34,
                },
                ..qbridge_fastpath::Bond::default()
            };
            for (i, m) in engine.tx_table().buckets().iter().enumerate() {
                let pos = m.and_then(|m| {
                    spec.members
                        .iter()
                        .position(|x| u32::from(x.port_number) == m.0)
                });
                if let Some((p, e)) = pos.and_then(|p| Some((p, b.ends.get(p)?))) {
                    if let (Some(t), Some(q)) =
                        (table.member_ifindex.get_mut(i), table.member_pos.get_mut(i))
                    {
                        *t = e.1;
                        *q = p as u8;
                    }
                }
            }
            rt.set_bond(id.0, members, table);
        }
        rt.keep_bonds(&keep);
    }
}

fn log_event(bond: &str, spec: &BondSpec, e: Event) {
    let name = |id: MemberId| {
        spec.members
            .iter()
            .find(|m| u32::from(m.port_number) == id.0)
            .map_or_else(|| id.to_string(), |m| m.name.clone())
    };
    match e {
        Event::PartnerChanged { member, partner } => tracing::info!(
            "bond {bond}: member {}: partner system {} key {} port {}",
            name(member),
            partner.system,
            partner.key,
            partner.port
        ),
        Event::Expired { member } => {
            tracing::warn!("bond {bond}: member {}: partner expired", name(member))
        }
        Event::Defaulted { member } => {
            tracing::warn!(
                "bond {bond}: member {}: no partner (defaulted)",
                name(member)
            )
        }
        Event::Fallback { state, member } => tracing::info!(
            "bond {bond}: fallback to active-backup {state:?} ({})",
            member.map_or_else(|| "no member".to_string(), name)
        ),
        Event::Churn {
            member,
            side,
            state,
        } => tracing::warn!(
            "bond {bond}: member {}: {side:?} churn {state:?}",
            name(member)
        ),
        Event::Carrier { .. } => {}
        Event::BadPdu { member, error } => {
            tracing::debug!("bond {bond}: member {}: bad PDU: {error}", name(member))
        }
    }
}
