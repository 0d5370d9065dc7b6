//! One aggregation port's LACP state machines (IEEE 802.1AX-2020 6.4): Receive (6.4.12),
//! Periodic Transmission (6.4.13), Mux with coupled control (6.4.15, figure 6-22), the actor
//! and partner Churn Detection machines (6.4.17), and the Transmit machine's rate limit
//! (6.4.16). Selection (6.4.14) spans ports and lives in `bond.rs`; it writes `selected` and
//! `agg` here and hands each step its aggregator's `Ready`.
//!
//! Timers are deadlines in caller milliseconds (`Option<Millis>`, `None` = stopped); a timer
//! "expires" when `now >= deadline`. Each `step_*` evaluates one machine's transitions once,
//! runs the entry actions of the state it enters and reports whether anything changed; the
//! bond repeats the steps until nothing changes (the standard's "all machines run until
//! stable"). `port_moved` (a partner seen on another port of this system) is not modelled:
//! the bond sees one port per member and a move appears as a partner change.

use qbridge_wire::MacAddr;
use serde::Serialize;

use crate::pdu::{Lacpdu, PortInfo, PortState};
use crate::{Event, LacpActivity, LacpRate, Link, MemberCounters, MemberId, Millis, OnOff, Side};

/// Fast_Periodic_Time (6.4.4).
pub const FAST_PERIODIC_MS: Millis = 1_000;
/// Slow_Periodic_Time.
pub const SLOW_PERIODIC_MS: Millis = 30_000;
/// Short_Timeout_Time: 3 × fast.
pub const SHORT_TIMEOUT_MS: Millis = 3_000;
/// Long_Timeout_Time: 3 × slow.
pub const LONG_TIMEOUT_MS: Millis = 90_000;
/// Churn_Detection_Time.
pub const CHURN_DETECTION_MS: Millis = 60_000;
/// Aggregate_Wait_Time.
pub const AGGREGATE_WAIT_MS: Millis = 2_000;
/// The transmit limit: at most this many LACPDUs in any Fast_Periodic_Time.
pub const TX_LIMIT_PER_FAST_PERIOD: usize = 3;
/// Marker Responses per second: with the LACPDUs, the Slow Protocols limit of 10 frames a
/// second (802.3 Annex 57A). Responses beyond it are dropped and counted.
pub const MARKER_RESPONSES_PER_SECOND: usize = 7;

/// Receive machine states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum RxState {
    Initialize,
    PortDisabled,
    Expired,
    LacpDisabled,
    Defaulted,
    Current,
}

/// Periodic Transmission machine states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum PeriodicState {
    NoPeriodic,
    FastPeriodic,
    SlowPeriodic,
}

/// Mux machine states (coupled control).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum MuxState {
    Detached,
    Waiting,
    Attached,
    CollectingDistributing,
}

/// The Selection Logic's verdict for a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Selected {
    Unselected,
    Selected,
    Standby,
}

/// Churn Detection machine states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ChurnState {
    Monitor,
    NoChurn,
    Churn,
}

/// Which aggregator a port selected: ports with equal keys aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum AggKey {
    /// Aggregatable: same actor key, same partner system and key.
    Group {
        actor_key: u16,
        partner_system_priority: u16,
        partner_system: MacAddr,
        partner_key: u16,
    },
    /// An Individual port (either side's Aggregation bit clear, or a loopback): alone.
    Individual { port: u16 },
}

/// The bond-wide values every port's actor information carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActorCtx {
    pub system: MacAddr,
    pub system_priority: u16,
    pub admin_key: u16,
    pub activity: LacpActivity,
    pub rate: LacpRate,
}

/// A member's configuration as the caller gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemberConfig {
    /// Source MAC of the frames the bond emits on this member.
    pub mac: MacAddr,
    /// The LACP port number (non-zero, unique in the bond).
    pub port_number: u16,
    pub port_priority: u16,
}

#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub id: MemberId,
    pub cfg: MemberConfig,
    pub link: Link,
    pub rx: RxState,
    pub current_while: Option<Millis>,
    pub periodic: PeriodicState,
    pub periodic_timer: Option<Millis>,
    pub mux: MuxState,
    pub wait_while: Option<Millis>,
    pub ready_n: bool,
    pub selected: Selected,
    pub agg: Option<AggKey>,
    pub ntt: bool,
    /// Actor state bits this port owns: Synchronization, Collecting, Distributing, Defaulted,
    /// Expired (Activity, Timeout and Aggregation come from the configuration).
    pub actor_state: PortState,
    pub partner: PortInfo,
    /// The partner information came from a LACPDU (not the administrative default).
    pub partner_from_pdu: bool,
    pub actor_churn: ChurnState,
    pub actor_churn_timer: Option<Millis>,
    pub partner_churn: ChurnState,
    pub partner_churn_timer: Option<Millis>,
    /// Send times of the last LACPDUs, oldest first (the rate limit's window).
    pub tx_times: [Option<Millis>; TX_LIMIT_PER_FAST_PERIOD],
    pub tx_deferred: bool,
    /// Send times of the last Marker Responses, oldest first.
    pub marker_times: [Option<Millis>; MARKER_RESPONSES_PER_SECOND],
    /// The traffic state last reported to the caller.
    pub reported: OnOff,
    pub counters: MemberCounters,
}

fn expired(t: Option<Millis>, now: Millis) -> bool {
    t.is_some_and(|d| now >= d)
}

/// The speed bits of the operational key (as Linux bonding does it: ports of different
/// speeds or half duplex get different keys, so they never aggregate).
fn speed_code(mbps: u32) -> u16 {
    const SPEEDS: [u32; 15] = [
        10, 100, 1_000, 2_500, 5_000, 10_000, 20_000, 25_000, 40_000, 50_000, 56_000, 100_000,
        200_000, 400_000, 800_000,
    ];
    SPEEDS
        .iter()
        .position(|&s| s == mbps)
        .map_or(0, |i| i as u16 + 1)
}

impl Member {
    pub fn new(id: MemberId, cfg: MemberConfig) -> Member {
        let mut m = Member {
            id,
            cfg,
            link: Link::Down,
            rx: RxState::Initialize,
            current_while: None,
            periodic: PeriodicState::NoPeriodic,
            periodic_timer: None,
            mux: MuxState::Detached,
            wait_while: None,
            ready_n: false,
            selected: Selected::Unselected,
            agg: None,
            ntt: true,
            actor_state: PortState::default(),
            partner: PortInfo::default(),
            partner_from_pdu: false,
            actor_churn: ChurnState::Monitor,
            actor_churn_timer: None,
            partner_churn: ChurnState::Monitor,
            partner_churn_timer: None,
            tx_times: [None; TX_LIMIT_PER_FAST_PERIOD],
            tx_deferred: false,
            marker_times: [None; MARKER_RESPONSES_PER_SECOND],
            reported: OnOff::Off,
            counters: MemberCounters::default(),
        };
        m.record_default();
        m
    }

    /// BEGIN: every machine back to its initial state (mode change, re-registration).
    pub fn begin(&mut self) {
        let keep = (
            self.id,
            self.cfg,
            self.link,
            self.tx_times,
            self.reported,
            self.counters,
        );
        *self = Member::new(keep.0, keep.1);
        (self.link, self.tx_times, self.reported, self.counters) = (keep.2, keep.3, keep.4, keep.5);
    }

    /// Speed or duplex changed on an up link: the operational key and LACP_Enabled may have
    /// changed, so the port selects again and its Receive machine restarts from PORT_DISABLED
    /// (the partner information is kept; a LACPDU refreshes it).
    pub fn relink(&mut self) {
        self.selected = Selected::Unselected;
        self.rx = RxState::PortDisabled;
        self.current_while = None;
        self.partner.state.set(PortState::SYNCHRONIZATION, false);
        self.ntt = true;
    }

    pub fn port_enabled(&self) -> bool {
        matches!(self.link, Link::Up { .. })
    }

    /// LACP_Enabled: full duplex (6.4.8); a half-duplex port is LACP_DISABLED.
    pub fn lacp_enabled(&self) -> bool {
        matches!(
            self.link,
            Link::Up {
                duplex: crate::Duplex::Full,
                ..
            }
        )
    }

    pub fn oper_key(&self, ctx: &ActorCtx) -> u16 {
        let (code, full) = match self.link {
            Link::Up { speed_mbps, duplex } => {
                (speed_code(speed_mbps), duplex == crate::Duplex::Full)
            }
            Link::Down => (0, true),
        };
        (ctx.admin_key << 6) | (code << 1) | u16::from(full)
    }

    pub fn actor_info(&self, ctx: &ActorCtx) -> PortInfo {
        let mut state = self.actor_state;
        state.set(PortState::ACTIVITY, ctx.activity == LacpActivity::Active);
        state.set(PortState::TIMEOUT, ctx.rate == LacpRate::Fast);
        state.set(PortState::AGGREGATION, self.lacp_enabled());
        PortInfo {
            system_priority: ctx.system_priority,
            system: ctx.system,
            key: self.oper_key(ctx),
            port_priority: self.cfg.port_priority,
            port: self.cfg.port_number,
            state,
        }
    }

    /// The aggregator this port belongs with, from its current information.
    pub fn agg_key(&self, ctx: &ActorCtx) -> AggKey {
        let actor = self.actor_info(ctx);
        let individual = !actor.state.has(PortState::AGGREGATION)
            || !self.partner.state.has(PortState::AGGREGATION)
            || self.partner.system == ctx.system;
        if individual {
            AggKey::Individual {
                port: self.cfg.port_number,
            }
        } else {
            AggKey::Group {
                actor_key: actor.key,
                partner_system_priority: self.partner.system_priority,
                partner_system: self.partner.system,
                partner_key: self.partner.key,
            }
        }
    }

    fn record_default(&mut self) {
        self.partner = PortInfo::default();
        self.partner_from_pdu = false;
        self.actor_state.set(PortState::DEFAULTED, true);
    }

    fn enter_rx(&mut self, state: RxState, now: Millis, ctx: &ActorCtx, events: &mut Vec<Event>) {
        let from = self.rx;
        self.rx = state;
        match state {
            RxState::Initialize => {
                self.selected = Selected::Unselected;
                self.record_default();
                self.actor_state.set(PortState::EXPIRED, false);
            }
            RxState::PortDisabled => {
                self.partner.state.set(PortState::SYNCHRONIZATION, false);
                self.current_while = None;
            }
            RxState::Expired => {
                self.partner.state.set(PortState::SYNCHRONIZATION, false);
                self.partner.state.set(PortState::TIMEOUT, true);
                self.current_while = Some(now.saturating_add(SHORT_TIMEOUT_MS));
                self.actor_state.set(PortState::EXPIRED, true);
                if from == RxState::Current {
                    self.counters.expired += 1;
                    events.push(Event::Expired { member: self.id });
                }
            }
            RxState::LacpDisabled => {
                self.selected = Selected::Unselected;
                self.record_default();
                self.partner.state.set(PortState::AGGREGATION, false);
                self.actor_state.set(PortState::EXPIRED, false);
                self.current_while = None;
            }
            RxState::Defaulted => {
                // update_Default_Selected: the administrative partner replaces the operational.
                if !self.partner.same_link(&PortInfo::default()) {
                    self.selected = Selected::Unselected;
                }
                self.record_default();
                self.actor_state.set(PortState::EXPIRED, false);
                self.current_while = None;
                self.counters.defaulted += 1;
                events.push(Event::Defaulted { member: self.id });
            }
            RxState::Current => {
                let timeout = match ctx.rate {
                    LacpRate::Fast => SHORT_TIMEOUT_MS,
                    LacpRate::Slow => LONG_TIMEOUT_MS,
                };
                self.current_while = Some(now.saturating_add(timeout));
                self.actor_state.set(PortState::EXPIRED, false);
            }
        }
    }

    /// One Receive machine evaluation without a PDU (timers, port state).
    pub fn step_rx(&mut self, now: Millis, ctx: &ActorCtx, events: &mut Vec<Event>) -> bool {
        let enabled = self.port_enabled();
        let next = match self.rx {
            RxState::Initialize => Some(RxState::PortDisabled),
            s if !enabled && s != RxState::PortDisabled => Some(RxState::PortDisabled),
            RxState::PortDisabled if enabled && self.lacp_enabled() => Some(RxState::Expired),
            RxState::PortDisabled if enabled => Some(RxState::LacpDisabled),
            RxState::LacpDisabled if self.lacp_enabled() => Some(RxState::PortDisabled),
            RxState::Expired if expired(self.current_while, now) => Some(RxState::Defaulted),
            RxState::Current if expired(self.current_while, now) => Some(RxState::Expired),
            _ => None,
        };
        match next {
            Some(s) => {
                self.enter_rx(s, now, ctx, events);
                true
            }
            None => false,
        }
    }

    /// A valid LACPDU arrived: the Receive machine's "rx PDU" into CURRENT (recordPDU,
    /// update_Selected, update_NTT). Returns false when the state ignores PDUs.
    pub fn receive_pdu(
        &mut self,
        pdu: &Lacpdu,
        now: Millis,
        ctx: &ActorCtx,
        events: &mut Vec<Event>,
    ) -> bool {
        if !matches!(
            self.rx,
            RxState::Expired | RxState::Defaulted | RxState::Current
        ) {
            return false;
        }
        let actor = self.actor_info(ctx);
        // update_Selected.
        if !pdu.actor.same_link(&self.partner) {
            self.selected = Selected::Unselected;
            events.push(Event::PartnerChanged {
                member: self.id,
                partner: pdu.actor,
            });
        }
        // update_NTT: the partner's view of us is out of date.
        const NTT_BITS: u8 = PortState::ACTIVITY
            | PortState::TIMEOUT
            | PortState::SYNCHRONIZATION
            | PortState::AGGREGATION;
        let theirs = pdu.partner;
        if theirs.port != actor.port
            || theirs.port_priority != actor.port_priority
            || theirs.system != actor.system
            || theirs.system_priority != actor.system_priority
            || theirs.key != actor.key
            || theirs.state.0 & NTT_BITS != actor.state.0 & NTT_BITS
        {
            self.ntt = true;
        }
        // recordPDU.
        let matched = theirs.same_link(&actor);
        let sync = pdu.actor.state.has(PortState::SYNCHRONIZATION)
            && (matched || !pdu.actor.state.has(PortState::AGGREGATION))
            && (ctx.activity == LacpActivity::Active || pdu.actor.state.has(PortState::ACTIVITY));
        self.partner = pdu.actor;
        self.partner.state.set(PortState::SYNCHRONIZATION, sync);
        self.partner_from_pdu = true;
        self.actor_state.set(PortState::DEFAULTED, false);
        self.enter_rx(RxState::Current, now, ctx, events);
        true
    }

    /// One Periodic Transmission machine evaluation.
    pub fn step_periodic(&mut self, now: Millis, ctx: &ActorCtx) -> bool {
        let both_passive =
            ctx.activity == LacpActivity::Passive && !self.partner.state.has(PortState::ACTIVITY);
        let partner_fast = self.partner.state.has(PortState::TIMEOUT);
        let before = (self.periodic, self.periodic_timer, self.ntt);
        if !self.lacp_enabled() || both_passive {
            self.periodic = PeriodicState::NoPeriodic;
            self.periodic_timer = None;
        } else {
            match self.periodic {
                PeriodicState::NoPeriodic => {
                    self.periodic = PeriodicState::FastPeriodic;
                    self.periodic_timer = Some(now.saturating_add(FAST_PERIODIC_MS));
                }
                PeriodicState::FastPeriodic if !partner_fast => {
                    self.periodic = PeriodicState::SlowPeriodic;
                    self.periodic_timer = Some(now.saturating_add(SLOW_PERIODIC_MS));
                }
                PeriodicState::SlowPeriodic if partner_fast => self.periodic_tx(now, partner_fast),
                _ if expired(self.periodic_timer, now) => self.periodic_tx(now, partner_fast),
                _ => {}
            }
        }
        before != (self.periodic, self.periodic_timer, self.ntt)
    }

    /// PERIODIC_TX: NTT, then back to the fast or slow wait by the partner's Timeout.
    fn periodic_tx(&mut self, now: Millis, partner_fast: bool) {
        self.ntt = true;
        (self.periodic, self.periodic_timer) = if partner_fast {
            (
                PeriodicState::FastPeriodic,
                Some(now.saturating_add(FAST_PERIODIC_MS)),
            )
        } else {
            (
                PeriodicState::SlowPeriodic,
                Some(now.saturating_add(SLOW_PERIODIC_MS)),
            )
        };
    }

    fn set_mux_bits(&mut self, sync: bool, collecting: bool, distributing: bool) {
        self.actor_state.set(PortState::SYNCHRONIZATION, sync);
        self.actor_state.set(PortState::COLLECTING, collecting);
        self.actor_state.set(PortState::DISTRIBUTING, distributing);
        self.ntt = true;
    }

    fn enter_mux(&mut self, state: MuxState, now: Millis) {
        self.mux = state;
        match state {
            MuxState::Detached => {
                self.set_mux_bits(false, false, false);
                self.wait_while = None;
                self.ready_n = false;
            }
            MuxState::Waiting => {
                self.wait_while = Some(now.saturating_add(AGGREGATE_WAIT_MS));
                self.ready_n = false;
            }
            MuxState::Attached => self.set_mux_bits(true, false, false),
            MuxState::CollectingDistributing => self.set_mux_bits(true, true, true),
        }
    }

    /// One Mux machine evaluation; `ready` is the aggregator's Ready (all its waiting ports
    /// have Ready_N).
    pub fn step_mux(&mut self, now: Millis, ready: bool) -> bool {
        if self.mux == MuxState::Waiting && !self.ready_n && expired(self.wait_while, now) {
            self.ready_n = true;
            self.wait_while = None;
            return true;
        }
        let partner_sync = self.partner.state.has(PortState::SYNCHRONIZATION);
        let next = match (self.mux, self.selected) {
            (MuxState::Detached, Selected::Selected | Selected::Standby) => Some(MuxState::Waiting),
            (MuxState::Waiting, Selected::Unselected) => Some(MuxState::Detached),
            (MuxState::Waiting, Selected::Selected) if ready => Some(MuxState::Attached),
            (MuxState::Attached, Selected::Unselected | Selected::Standby) => {
                Some(MuxState::Detached)
            }
            (MuxState::Attached, Selected::Selected) if partner_sync => {
                Some(MuxState::CollectingDistributing)
            }
            (MuxState::CollectingDistributing, Selected::Unselected | Selected::Standby) => {
                Some(MuxState::Attached)
            }
            (MuxState::CollectingDistributing, _) if !partner_sync => Some(MuxState::Attached),
            _ => None,
        };
        match next {
            Some(s) => {
                self.enter_mux(s, now);
                true
            }
            None => false,
        }
    }

    /// Both Churn Detection machines.
    pub fn step_churn(&mut self, now: Millis, events: &mut Vec<Event>) -> bool {
        let running = self.lacp_enabled();
        let actor_sync = self.actor_state.has(PortState::SYNCHRONIZATION);
        let partner_sync = self.partner.state.has(PortState::SYNCHRONIZATION);
        let id = self.id;
        let a = churn_step(
            &mut self.actor_churn,
            &mut self.actor_churn_timer,
            &mut self.counters.actor_churn,
            running,
            actor_sync,
            now,
        );
        let p = churn_step(
            &mut self.partner_churn,
            &mut self.partner_churn_timer,
            &mut self.counters.partner_churn,
            running,
            partner_sync,
            now,
        );
        for (side, change) in [(Side::Actor, a), (Side::Partner, p)] {
            if let Some(state) = change {
                events.push(Event::Churn {
                    member: id,
                    side,
                    state,
                });
            }
        }
        a.is_some() || p.is_some()
    }

    /// Whether the rate limit lets a LACPDU out at `now`; when not, the time it will.
    pub fn tx_window_open(&self, now: Millis) -> Result<(), Millis> {
        match self.tx_times[0] {
            Some(oldest) if now.saturating_sub(oldest) < FAST_PERIODIC_MS => {
                Err(oldest.saturating_add(FAST_PERIODIC_MS))
            }
            _ => Ok(()),
        }
    }

    /// Records a Marker Response at `now` if the Slow Protocols budget allows one.
    pub fn take_marker_slot(&mut self, now: Millis) -> bool {
        match self.marker_times[0] {
            Some(oldest) if now.saturating_sub(oldest) < FAST_PERIODIC_MS => false,
            _ => {
                self.marker_times.rotate_left(1);
                self.marker_times[MARKER_RESPONSES_PER_SECOND - 1] = Some(now);
                true
            }
        }
    }

    pub fn record_tx(&mut self, now: Millis) {
        self.tx_times.rotate_left(1);
        self.tx_times[TX_LIMIT_PER_FAST_PERIOD - 1] = Some(now);
    }

    /// The earliest deadline of any running timer.
    pub fn next_deadline(&self) -> Option<Millis> {
        let mut t = [
            self.current_while,
            self.periodic_timer,
            if self.ready_n { None } else { self.wait_while },
            self.actor_churn_timer,
            self.partner_churn_timer,
        ]
        .into_iter()
        .flatten()
        .min();
        if self.ntt && self.periodic != PeriodicState::NoPeriodic {
            if let Err(open) = self.tx_window_open(0) {
                t = Some(t.map_or(open, |t| t.min(open)));
            }
        }
        t
    }
}

/// One churn machine step; returns the new churn verdict when it changed (On = churn).
fn churn_step(
    state: &mut ChurnState,
    timer: &mut Option<Millis>,
    count: &mut u64,
    running: bool,
    sync: bool,
    now: Millis,
) -> Option<OnOff> {
    if !running {
        let was = *state;
        (*state, *timer) = (ChurnState::Monitor, None);
        return (was == ChurnState::Churn).then_some(OnOff::Off);
    }
    match *state {
        ChurnState::Monitor if sync => {
            (*state, *timer) = (ChurnState::NoChurn, None);
            None
        }
        ChurnState::Monitor if timer.is_none() => {
            *timer = Some(now.saturating_add(CHURN_DETECTION_MS));
            None
        }
        ChurnState::Monitor if expired(*timer, now) => {
            (*state, *timer) = (ChurnState::Churn, None);
            *count += 1;
            Some(OnOff::On)
        }
        ChurnState::NoChurn if !sync => {
            (*state, *timer) = (
                ChurnState::Monitor,
                Some(now.saturating_add(CHURN_DETECTION_MS)),
            );
            None
        }
        ChurnState::Churn if sync => {
            (*state, *timer) = (ChurnState::NoChurn, None);
            Some(OnOff::Off)
        }
        _ => None,
    }
}
