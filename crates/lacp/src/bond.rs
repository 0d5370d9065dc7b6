//! A bond: its members, its mode, the Selection Logic (802.1AX-2020 6.4.14), fallback,
//! `min_links`, the transmit table, outputs and the views for `link show -d` / `-j`.
//!
//! Every public method takes `now`, runs all member machines until they are stable
//! (`run`), transmits what is due (within the 3-per-second limit) and recomputes which
//! members carry traffic; changes are queued as [`Output`]s for [`Bond::drain_outputs`].
//!
//! Selection: a port with a partner aggregates with the ports that have the same actor key
//! and the same partner system and key ([`AggKey::Group`]); a port whose own or partner's
//! Aggregation bit is clear, or that is looped back to this system, is alone
//! ([`AggKey::Individual`]). The bond, one aggregator as the bridge sees it, uses one of them:
//! the active aggregator is kept while one of its ports is attached and has a partner
//! ("stable", Linux's default `ad_select`); otherwise (at start-up, during the aggregate wait,
//! after the partner is gone) the one with the most ports with partners wins, then the most
//! ports, ties to the lowest port number. Ports of other aggregators are STANDBY: they stay in WAITING,
//! never in sync, never carry traffic. A port selects only from DETACHED, as 6.4.14 requires.
//!
//! Modes: `active-backup` keeps its active member while it is up (no preemption; failover
//! order = order of `add_member`); `balance-xor` uses every up member; `802.3ad` uses the
//! collecting-and-distributing ports of the active aggregator, or none below `min_links`.
//! `lacp_fallback active-backup` makes an 802.3ad bond with no partner on any up member and at
//! least one member DEFAULTED (no LACPDU within the expiry time) behave as active-backup until a LACPDU arrives, as Open
//! vSwitch's `lacp-fallback-ab` does; `min_links` does not apply meanwhile.

use qbridge_wire::MacAddr;
use serde::Serialize;

use crate::member::{
    ActorCtx, AggKey, ChurnState, Member, MemberConfig, MuxState, PeriodicState, RxState, Selected,
};
use crate::pdu::{parse_frame, Lacpdu, MarkerKind, MarkerPdu, PduError, PortInfo, SlowPdu};
use crate::table::TxTable;
use crate::{
    ConfigError, Event, Fallback, HashPolicy, LacpActivity, LacpRate, Link, MemberCounters,
    MemberId, Millis, Mode, OnOff, Output,
};

/// A bond's configuration: ip-link's bond words plus the LACP system identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BondConfig {
    pub mode: Mode,
    pub hash_policy: HashPolicy,
    pub lacp_rate: LacpRate,
    pub lacp_activity: LacpActivity,
    /// 802.3ad: fewer distributing members than this and the bond is down.
    pub min_links: u16,
    pub fallback: Fallback,
    /// The Actor System id (the bond's MAC, usually).
    pub system: MacAddr,
    pub system_priority: u16,
    /// The administrative aggregation key, 0..=1023 (the operational key adds speed and
    /// duplex bits, as Linux does: ports of different speeds never aggregate).
    pub key: u16,
    /// The link-watch interval the integration polls carrier at; the engine only stores it.
    pub miimon_ms: u32,
}

impl BondConfig {
    /// Linux's defaults: layer2 hash, slow rate, active, min_links 0 (treated as 1), no
    /// fallback, system priority 65535, key 0, miimon 100 ms.
    pub fn new(mode: Mode, system: MacAddr) -> BondConfig {
        BondConfig {
            mode,
            hash_policy: HashPolicy::Layer2,
            lacp_rate: LacpRate::Slow,
            lacp_activity: LacpActivity::Active,
            min_links: 0,
            fallback: Fallback::Off,
            system,
            system_priority: 65535,
            key: 0,
            miimon_ms: 100,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.key > 1023 {
            return Err(ConfigError::KeyTooLarge(self.key));
        }
        if self.system.is_multicast() {
            return Err(ConfigError::GroupSystemId(self.system));
        }
        Ok(())
    }
}

/// One member, for `link show -d` / `-j`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub id: MemberId,
    pub config: MemberConfig,
    pub link: Link,
    pub rx_state: RxState,
    pub mux_state: MuxState,
    pub selected: Selected,
    pub actor_churn: ChurnState,
    pub partner_churn: ChurnState,
    /// The aggregator's id: the lowest port number among its ports.
    pub aggregator_id: Option<u16>,
    pub actor: PortInfo,
    pub partner: PortInfo,
    pub collecting: OnOff,
    pub distributing: OnOff,
    pub counters: MemberCounters,
}

/// The bond, for `link show -d` / `-j`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BondView {
    pub config: BondConfig,
    pub carrier: OnOff,
    pub fallback_active: OnOff,
    pub active_aggregator_id: Option<u16>,
    pub members: Vec<MemberView>,
}

/// The engine of one bond device.
#[derive(Clone, Debug)]
pub struct Bond {
    cfg: BondConfig,
    /// In failover order (order of addition).
    members: Vec<Member>,
    active_agg: Option<AggKey>,
    /// The active-backup member (also during fallback).
    ab_active: Option<MemberId>,
    fallback: OnOff,
    carrier: OnOff,
    table: TxTable,
    outputs: Vec<Output>,
    events: Vec<Event>,
    now: Millis,
}

impl Bond {
    pub fn new(cfg: BondConfig) -> Result<Bond, ConfigError> {
        cfg.validate()?;
        Ok(Bond {
            cfg,
            members: Vec::new(),
            active_agg: None,
            ab_active: None,
            fallback: OnOff::Off,
            carrier: OnOff::Off,
            table: TxTable::default(),
            outputs: Vec::new(),
            events: Vec::new(),
            now: 0,
        })
    }

    pub fn config(&self) -> &BondConfig {
        &self.cfg
    }

    fn ctx(&self) -> ActorCtx {
        ActorCtx {
            system: self.cfg.system,
            system_priority: self.cfg.system_priority,
            admin_key: self.cfg.key,
            activity: self.cfg.lacp_activity,
            rate: self.cfg.lacp_rate,
        }
    }

    fn index(&self, id: MemberId) -> Result<usize, ConfigError> {
        self.members
            .iter()
            .position(|m| m.id == id)
            .ok_or(ConfigError::UnknownMember(id))
    }

    /// Adds a member (link down until [`Bond::set_link`] says otherwise).
    pub fn add_member(
        &mut self,
        now: Millis,
        id: MemberId,
        cfg: MemberConfig,
    ) -> Result<(), ConfigError> {
        if self.index(id).is_ok() {
            return Err(ConfigError::DuplicateMember(id));
        }
        self.check_port_number(id, cfg.port_number)?;
        self.members.push(Member::new(id, cfg));
        self.run(now);
        Ok(())
    }

    fn check_port_number(&self, id: MemberId, port: u16) -> Result<(), ConfigError> {
        if port == 0 {
            return Err(ConfigError::PortNumberZero);
        }
        match self
            .members
            .iter()
            .find(|m| m.cfg.port_number == port && m.id != id)
        {
            Some(m) => Err(ConfigError::DuplicatePortNumber { port, by: m.id }),
            None => Ok(()),
        }
    }

    /// Removes a member; if it carried traffic, a `MemberState` off is emitted for it.
    pub fn remove_member(&mut self, now: Millis, id: MemberId) -> Result<(), ConfigError> {
        let i = self.index(id)?;
        let m = self.members.remove(i);
        if m.reported == OnOff::On {
            self.outputs.push(Output::MemberState {
                member: id,
                collecting: OnOff::Off,
                distributing: OnOff::Off,
            });
        }
        self.run(now);
        Ok(())
    }

    /// Changes a member's port priority (its LACP port number is fixed while it is a member).
    pub fn set_member_priority(
        &mut self,
        now: Millis,
        id: MemberId,
        port_priority: u16,
    ) -> Result<(), ConfigError> {
        let i = self.index(id)?;
        let m = &mut self.members[i];
        if m.cfg.port_priority != port_priority {
            m.cfg.port_priority = port_priority;
            m.ntt = true;
        }
        self.run(now);
        Ok(())
    }

    /// The link watch's report for a member: carrier, speed, duplex.
    pub fn set_link(&mut self, now: Millis, id: MemberId, link: Link) -> Result<(), ConfigError> {
        let i = self.index(id)?;
        let m = &mut self.members[i];
        if m.link != link {
            let was_up = m.port_enabled();
            m.link = link;
            if was_up && !m.port_enabled() {
                m.counters.link_down += 1;
            }
            if was_up && m.port_enabled() {
                // Speed or duplex changed: the operational key did; select again, and let the
                // Receive machine re-evaluate LACP_Enabled from PORT_DISABLED.
                m.relink();
            }
        }
        self.run(now);
        Ok(())
    }

    /// A frame received on a member that the caller classified as Slow Protocols (destination
    /// 01:80:C2:00:00:02 or EtherType 0x8809). Malformed frames are counted and reported as
    /// [`Event::BadPdu`]; only an unknown member is an error.
    pub fn receive(&mut self, now: Millis, id: MemberId, frame: &[u8]) -> Result<(), ConfigError> {
        let i = self.index(id)?;
        let now = now.max(self.now);
        let ctx = self.ctx();
        let lacp = self.cfg.mode == Mode::Lacp;
        let m = &mut self.members[i];
        match parse_frame(frame) {
            Err(error) => {
                let c = &mut m.counters;
                match error {
                    PduError::NotSlowProtocols { .. } => c.rx_not_slow_protocols += 1,
                    PduError::BadLength { .. } => c.rx_bad_length += 1,
                    PduError::UnknownSubtype(_) => c.rx_unknown_subtype += 1,
                    PduError::BadVersion(_) => c.rx_bad_version += 1,
                    PduError::BadTlv { .. } => c.rx_bad_tlv += 1,
                }
                self.events.push(Event::BadPdu { member: id, error });
            }
            Ok(SlowPdu::Lacp(pdu)) => {
                m.counters.rx_lacpdu += 1;
                if !lacp || !m.receive_pdu(&pdu, now, &ctx, &mut self.events) {
                    m.counters.rx_ignored += 1;
                }
            }
            Ok(SlowPdu::Marker(marker)) => match marker.kind {
                MarkerKind::Information if lacp && m.port_enabled() => {
                    m.counters.rx_marker += 1;
                    if m.take_marker_slot(now) {
                        let reply = MarkerPdu {
                            kind: MarkerKind::Response,
                            ..marker
                        };
                        self.outputs.push(Output::Transmit {
                            member: id,
                            frame: reply.to_frame(m.cfg.mac),
                        });
                        m.counters.tx_marker_response += 1;
                    } else {
                        m.counters.tx_marker_rate_limited += 1;
                    }
                }
                MarkerKind::Information => {
                    m.counters.rx_marker += 1;
                    m.counters.rx_ignored += 1;
                }
                MarkerKind::Response => m.counters.rx_marker_response += 1,
            },
        }
        self.run(now);
        Ok(())
    }

    /// Runs the timers; call it at [`Bond::next_deadline`] (or on any periodic tick).
    pub fn poll(&mut self, now: Millis) {
        self.run(now);
    }

    /// When [`Bond::poll`] must run next, if any timer runs.
    pub fn next_deadline(&self) -> Option<Millis> {
        if self.cfg.mode != Mode::Lacp {
            return None;
        }
        self.members.iter().filter_map(Member::next_deadline).min()
    }

    /// Takes the queued outputs, oldest first.
    pub fn drain_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    /// The bond's carrier: `On` when a member distributes (and `min_links` is met).
    pub fn carrier(&self) -> OnOff {
        self.carrier
    }

    /// The transmit table (hash bucket → distributing member).
    pub fn tx_table(&self) -> &TxTable {
        &self.table
    }

    /// The member that carries a flow of hash `hash`, if the bond can transmit.
    pub fn member_for(&self, hash: u32) -> Option<MemberId> {
        self.table.member_for(hash)
    }

    /// Changes the configuration. A mode change restarts every member's machines (BEGIN);
    /// identity changes (system, key) make every port select again; rate and activity
    /// changes are announced to the partner at once.
    pub fn set_config(&mut self, now: Millis, cfg: BondConfig) -> Result<(), ConfigError> {
        cfg.validate()?;
        let old = std::mem::replace(&mut self.cfg, cfg);
        if old.mode != cfg.mode {
            for m in &mut self.members {
                m.begin();
            }
            self.active_agg = None;
        } else if (old.system, old.system_priority, old.key)
            != (cfg.system, cfg.system_priority, cfg.key)
        {
            for m in &mut self.members {
                m.selected = Selected::Unselected;
                m.ntt = true;
            }
        } else if (old.lacp_rate, old.lacp_activity) != (cfg.lacp_rate, cfg.lacp_activity) {
            for m in &mut self.members {
                m.ntt = true;
            }
        }
        self.run(now);
        Ok(())
    }

    fn run(&mut self, now: Millis) {
        let now = now.max(self.now);
        self.now = now;
        if self.cfg.mode == Mode::Lacp {
            let ctx = self.ctx();
            // Each pass can only move machines forward; 64 passes is far above any chain.
            for _ in 0..64 {
                let mut changed = self.select(&ctx);
                let ready: Vec<bool> = (0..self.members.len()).map(|i| self.ready(i)).collect();
                for (m, ready) in self.members.iter_mut().zip(ready) {
                    changed |= m.step_rx(now, &ctx, &mut self.events);
                    changed |= m.step_periodic(now, &ctx);
                    changed |= m.step_mux(now, ready);
                    changed |= m.step_churn(now, &mut self.events);
                }
                if !changed {
                    break;
                }
            }
            self.transmit(now, &ctx);
        }
        self.update_traffic();
        self.outputs
            .extend(self.events.drain(..).map(Output::Event));
    }

    /// Ready for member `i`'s aggregator: every port waiting on it has Ready_N.
    fn ready(&self, i: usize) -> bool {
        let agg = self.members[i].agg;
        self.members
            .iter()
            .filter(|m| {
                m.agg == agg && m.selected == Selected::Selected && m.mux == MuxState::Waiting
            })
            .all(|m| m.ready_n)
    }

    /// The Selection Logic; returns whether any port's selection changed.
    fn select(&mut self, ctx: &ActorCtx) -> bool {
        let mut changed = false;
        for m in &mut self.members {
            let operational =
                m.port_enabled() && !matches!(m.rx, RxState::Initialize | RxState::PortDisabled);
            if !operational {
                if m.selected != Selected::Unselected || m.agg.is_some() {
                    (m.selected, m.agg) = (Selected::Unselected, None);
                    changed = true;
                }
            } else if m.selected == Selected::Unselected && m.mux == MuxState::Detached {
                m.agg = Some(m.agg_key(ctx));
                m.selected = Selected::Standby;
                changed = true;
            }
        }
        // The active aggregator.
        let quality = |k: AggKey, members: &[Member]| {
            let ms = members
                .iter()
                .filter(|m| m.agg == Some(k) && m.selected != Selected::Unselected);
            let (mut with_partner, mut all, mut lowest, mut attached) = (0, 0, u16::MAX, 0);
            for m in ms {
                all += 1;
                with_partner += usize::from(m.partner_from_pdu);
                lowest = lowest.min(m.cfg.port_number);
                attached += usize::from(
                    m.partner_from_pdu
                        && matches!(m.mux, MuxState::Attached | MuxState::CollectingDistributing),
                );
            }
            (with_partner, all, lowest, attached)
        };
        let mut best: Option<(AggKey, (usize, usize, u16, usize))> = None;
        for m in self
            .members
            .iter()
            .filter(|m| m.selected != Selected::Unselected)
        {
            let Some(k) = m.agg else { continue };
            let q = quality(k, &self.members);
            let better = match best {
                None => true,
                Some((_, b)) => (q.0, q.1, u16::MAX - q.2) > (b.0, b.1, u16::MAX - b.2),
            };
            if better {
                best = Some((k, q));
            }
        }
        let current = self.active_agg.map(|k| (k, quality(k, &self.members)));
        let active = match (current, best) {
            // Stable: an aggregator with an attached port that has a partner stays active.
            // Before that (during the aggregate wait) the best one is chosen afresh, so ports
            // that come up a moment apart still gather on the larger aggregator.
            (Some((k, q)), _) if q.3 > 0 => Some(k),
            (_, b) => b.map(|(k, _)| k),
        };
        self.active_agg = active;
        for m in &mut self.members {
            if m.selected == Selected::Unselected {
                continue;
            }
            let want = if m.agg == active {
                Selected::Selected
            } else {
                Selected::Standby
            };
            if m.selected != want {
                m.selected = want;
                changed = true;
            }
        }
        changed
    }

    /// The Transmit machine: one LACPDU per member with NTT, within the rate limit.
    fn transmit(&mut self, now: Millis, ctx: &ActorCtx) {
        for m in &mut self.members {
            if !m.ntt || !m.lacp_enabled() || m.periodic == PeriodicState::NoPeriodic {
                continue;
            }
            match m.tx_window_open(now) {
                Ok(()) => {
                    let pdu = Lacpdu {
                        version: 1,
                        actor: m.actor_info(ctx),
                        partner: m.partner,
                        collector_max_delay: 0,
                    };
                    self.outputs.push(Output::Transmit {
                        member: m.id,
                        frame: pdu.to_frame(m.cfg.mac),
                    });
                    m.ntt = false;
                    m.tx_deferred = false;
                    m.record_tx(now);
                    m.counters.tx_lacpdu += 1;
                }
                Err(_) if !m.tx_deferred => {
                    m.tx_deferred = true;
                    m.counters.tx_rate_limited += 1;
                }
                Err(_) => {}
            }
        }
    }

    /// The active-backup choice among up members: keep the current one while it is up.
    fn pick_ab(&mut self) -> Option<MemberId> {
        let up = |id: MemberId, ms: &[Member]| ms.iter().any(|m| m.id == id && m.port_enabled());
        let keep = self.ab_active.filter(|&id| up(id, &self.members));
        self.ab_active =
            keep.or_else(|| self.members.iter().find(|m| m.port_enabled()).map(|m| m.id));
        self.ab_active
    }

    /// Which members carry traffic now; emits the changes and rebuilds the table.
    fn update_traffic(&mut self) {
        let mut fallback = OnOff::Off;
        let on: Vec<MemberId> = match self.cfg.mode {
            Mode::ActiveBackup => self.pick_ab().into_iter().collect(),
            Mode::BalanceXor => self
                .members
                .iter()
                .filter(|m| m.port_enabled())
                .map(|m| m.id)
                .collect(),
            Mode::Lacp => {
                let up: Vec<&Member> = self.members.iter().filter(|m| m.port_enabled()).collect();
                // No partner heard on any up member, and at least one has waited out the
                // expiry (so a member coming up during fallback does not end it).
                let no_partner = !up.is_empty()
                    && !up.iter().any(|m| m.partner_from_pdu)
                    && up
                        .iter()
                        .any(|m| matches!(m.rx, RxState::Defaulted | RxState::LacpDisabled));
                if self.cfg.fallback == Fallback::ActiveBackup && no_partner {
                    fallback = OnOff::On;
                    self.pick_ab().into_iter().collect()
                } else {
                    let on: Vec<MemberId> = self
                        .members
                        .iter()
                        .filter(|m| {
                            m.mux == MuxState::CollectingDistributing
                                && m.selected == Selected::Selected
                        })
                        .map(|m| m.id)
                        .collect();
                    if on.len() < usize::from(self.cfg.min_links.max(1)) {
                        Vec::new()
                    } else {
                        on
                    }
                }
            }
        };
        if fallback != self.fallback {
            self.fallback = fallback;
            let member = if fallback == OnOff::On {
                self.ab_active
            } else {
                None
            };
            self.outputs.push(Output::Event(Event::Fallback {
                state: fallback,
                member,
            }));
        }
        for m in &mut self.members {
            let want = if on.contains(&m.id) {
                OnOff::On
            } else {
                OnOff::Off
            };
            if m.reported != want {
                m.reported = want;
                self.outputs.push(Output::MemberState {
                    member: m.id,
                    collecting: want,
                    distributing: want,
                });
            }
        }
        self.table.set_members(&on);
        let carrier = if on.is_empty() { OnOff::Off } else { OnOff::On };
        if carrier != self.carrier {
            self.carrier = carrier;
            self.outputs
                .push(Output::Event(Event::Carrier { state: carrier }));
        }
    }

    fn agg_id(&self, k: Option<AggKey>) -> Option<u16> {
        let k = k?;
        self.members
            .iter()
            .filter(|m| m.agg == Some(k))
            .map(|m| m.cfg.port_number)
            .min()
    }

    /// One member's state and counters.
    pub fn member_view(&self, id: MemberId) -> Option<MemberView> {
        let m = self.members.iter().find(|m| m.id == id)?;
        let ctx = self.ctx();
        Some(MemberView {
            id: m.id,
            config: m.cfg,
            link: m.link,
            rx_state: m.rx,
            mux_state: m.mux,
            selected: m.selected,
            actor_churn: m.actor_churn,
            partner_churn: m.partner_churn,
            aggregator_id: self.agg_id(m.agg),
            actor: m.actor_info(&ctx),
            partner: m.partner,
            collecting: m.reported,
            distributing: m.reported,
            counters: m.counters,
        })
    }

    /// The whole bond, members in failover order.
    pub fn view(&self) -> BondView {
        BondView {
            config: self.cfg,
            carrier: self.carrier,
            fallback_active: self.fallback,
            active_aggregator_id: self.agg_id(self.active_agg),
            members: self
                .members
                .iter()
                .filter_map(|m| self.member_view(m.id))
                .collect(),
        }
    }
}
