//! The link-aggregation engine of qbridge (issue 19), sans-I/O: bonds in the modes
//! `active-backup`, `balance-xor` and `802.3ad` (LACP, IEEE 802.1AX-2020 clause 6), the
//! transmit hash and the bucket table that picks a member per flow.
//!
//! No I/O, no threads, no clock. The caller (later: the daemon's control-plane thread) owns a
//! [`Bond`] per bond device and drives it with method calls that each take `now` in
//! milliseconds on any monotonic clock: member link changes ([`Bond::set_link`]), received
//! Slow Protocols frames ([`Bond::receive`]), configuration changes, and [`Bond::poll`] at
//! [`Bond::next_deadline`] at the latest. After each call it takes the [`Output`]s
//! ([`Bond::drain_outputs`]): frames to send on a member, member traffic state changes
//! (collecting / distributing) and [`Event`]s for logs and `monitor`. The forwarding side
//! reads [`Bond::tx_table`] (copy it into the plan) and picks a member with
//! [`TxTable::member_for`]`(`[`flow_hash`]`(frame, policy))`.
//!
//! ```
//! use qbridge_lacp::{flow_hash, Bond, BondConfig, Duplex, Link, MemberConfig, MemberId, Mode, Output};
//! use qbridge_wire::MacAddr;
//!
//! let mut bond = Bond::new(BondConfig::new(Mode::Lacp, MacAddr([2, 0, 0, 0, 0, 1])))?;
//! let member = MemberId(7); // the caller's port id
//! let cfg = MemberConfig { mac: MacAddr([2, 0, 0, 0, 0, 7]), port_number: 1, port_priority: 255 };
//! bond.add_member(0, member, cfg)?;
//! bond.set_link(0, member, Link::Up { speed_mbps: 10_000, duplex: Duplex::Full })?;
//! for out in bond.drain_outputs() {
//!     if let Output::Transmit { member, frame } = out {
//!         assert_eq!((member, frame.len()), (MemberId(7), 124)); // a LACPDU to send
//!     }
//! }
//! // No partner yet: nothing distributes, the bond cannot transmit.
//! assert_eq!(bond.member_for(flow_hash(&[0u8; 60], bond.config().hash_policy)), None);
//! assert_eq!(bond.next_deadline(), Some(1_000)); // fast periodic until a partner answers
//! # Ok::<(), qbridge_lacp::ConfigError>(())
//! ```
//!
//! Module map: [`pdu`] owns the LACPDU and Marker PDU bytes; [`member`] one port's state
//! machines (Receive, Periodic, Mux, Churn, the transmit rate limit); [`bond`] the Selection
//! Logic, the modes, fallback, `min_links`, outputs and views; [`hash`] the flow hash;
//! [`table`] the 256-bucket transmit table. `docs/lacp.md` describes the engine and what is
//! left to the integration.
//!
//! Total on any input: no method panics, whatever the bytes or the order of calls (property
//! tested). Time going backwards is treated as no time passing.

pub mod bond;
pub mod hash;
pub mod member;
pub mod pdu;
pub mod table;

pub use bond::{Bond, BondConfig, BondView, MemberView};
pub use hash::{flow_hash, HashPolicy};
pub use member::{AggKey, ChurnState, MemberConfig, MuxState, PeriodicState, RxState, Selected};
pub use pdu::{
    is_slow_protocols, parse_frame, Lacpdu, MarkerKind, MarkerPdu, PduError, PortInfo, PortState,
    SlowPdu,
};
pub use table::{TxTable, BUCKETS};

use serde::Serialize;

/// Milliseconds on the caller's monotonic clock.
pub type Millis = u64;

/// The caller's name for a member port (e.g. its qbridge port id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MemberId(pub u32);

impl core::fmt::Display for MemberId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "member {}", self.0)
    }
}

/// Duplex of an up link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Duplex {
    Full,
    Half,
}

/// A member's link as the link watch (carrier, ethtool) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Link {
    Down,
    /// Up; `speed_mbps` 0 when unknown.
    Up {
        speed_mbps: u32,
        duplex: Duplex,
    },
}

/// A two-valued state in outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum OnOff {
    On,
    Off,
}

/// Which side of a link a churn verdict is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Side {
    Actor,
    Partner,
}

/// The bond's mode: ip-link's `mode` word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Mode {
    /// One member carries traffic; the next up member in failover order takes over.
    ActiveBackup,
    /// Every up member carries traffic, picked by hash; no protocol.
    BalanceXor,
    /// IEEE 802.3ad / 802.1AX LACP; only collecting+distributing members carry traffic.
    Lacp,
}

impl Mode {
    pub const fn word(self) -> &'static str {
        match self {
            Mode::ActiveBackup => "active-backup",
            Mode::BalanceXor => "balance-xor",
            Mode::Lacp => "802.3ad",
        }
    }

    pub fn from_word(word: &str) -> Option<Mode> {
        [Mode::ActiveBackup, Mode::BalanceXor, Mode::Lacp]
            .into_iter()
            .find(|m| m.word() == word)
    }
}

/// `lacp_rate`: the rate we ask the partner to send at (our Timeout bit), and so our
/// expiry time (3 × it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum LacpRate {
    Slow,
    Fast,
}

/// `lacp_active`: whether we send LACPDUs to a partner that does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum LacpActivity {
    Active,
    Passive,
}

impl LacpRate {
    /// ip-link's `lacp_rate` word: `slow` or `fast`.
    pub const fn word(self) -> &'static str {
        match self {
            LacpRate::Slow => "slow",
            LacpRate::Fast => "fast",
        }
    }

    pub fn from_word(word: &str) -> Option<LacpRate> {
        [LacpRate::Slow, LacpRate::Fast]
            .into_iter()
            .find(|r| r.word() == word)
    }
}

impl LacpActivity {
    /// ip-link's `lacp_active` word: `on` (active) or `off` (passive).
    pub const fn word(self) -> &'static str {
        match self {
            LacpActivity::Active => "on",
            LacpActivity::Passive => "off",
        }
    }

    pub fn from_word(word: &str) -> Option<LacpActivity> {
        [LacpActivity::Active, LacpActivity::Passive]
            .into_iter()
            .find(|a| a.word() == word)
    }
}

/// `lacp_fallback`: what an 802.3ad bond does when no member hears a partner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Fallback {
    /// Nothing carries traffic (the standard).
    Off,
    /// One member carries traffic, as in active-backup (OVS `lacp-fallback-ab`).
    ActiveBackup,
}

/// Why a configuration call was refused; the bond is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is already in the bond")]
    DuplicateMember(MemberId),
    #[error("{0} is not in the bond")]
    UnknownMember(MemberId),
    #[error("LACP port number 0 is reserved")]
    PortNumberZero,
    #[error("LACP port number {port} is already used by {by}")]
    DuplicatePortNumber { port: u16, by: MemberId },
    #[error("aggregation key {0} is above 1023")]
    KeyTooLarge(u16),
    #[error("system id {0} is a group address")]
    GroupSystemId(qbridge_wire::MacAddr),
}

/// Something to log or show in `monitor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Event {
    /// A LACPDU named a different partner (system, key, port or aggregation) than before.
    PartnerChanged { member: MemberId, partner: PortInfo },
    /// The partner's information timed out (CURRENT → EXPIRED).
    Expired { member: MemberId },
    /// No partner: the administrative default is in use (EXPIRED → DEFAULTED).
    Defaulted { member: MemberId },
    /// Fallback to active-backup began (`On`) or ended; `member` carries traffic meanwhile.
    Fallback {
        state: OnOff,
        member: Option<MemberId>,
    },
    /// A churn machine detected churn (`On`: no synchronization for 60 s) or its end.
    Churn {
        member: MemberId,
        side: Side,
        state: OnOff,
    },
    /// The bond's carrier: up when a member distributes and `min_links` is met.
    Carrier { state: OnOff },
    /// A malformed Slow Protocols frame was dropped (counted in the member's counters).
    BadPdu { member: MemberId, error: PduError },
}

/// What the caller must do after a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send `frame` (a whole Ethernet frame, no FCS) on `member`.
    Transmit {
        member: MemberId,
        frame: Vec<u8>,
    },
    /// A member starts or stops collecting (accepting frames from the link) and distributing
    /// (being chosen by the transmit table).
    MemberState {
        member: MemberId,
        collecting: OnOff,
        distributing: OnOff,
    },
    Event(Event),
}

/// Per-member protocol counters (`link show -s -d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
pub struct MemberCounters {
    pub rx_lacpdu: u64,
    pub tx_lacpdu: u64,
    pub rx_marker: u64,
    pub rx_marker_response: u64,
    pub tx_marker_response: u64,
    /// Marker Responses not sent: the Slow Protocols limit (10 frames a second) was reached.
    pub tx_marker_rate_limited: u64,
    /// Valid LACPDUs received while the Receive machine ignores them (port disabled, LACP
    /// disabled, or a mode without LACP).
    pub rx_ignored: u64,
    /// Frames shorter than a Slow Protocols PDU.
    pub rx_bad_length: u64,
    /// Slow Protocols subtypes other than LACP and Marker (OAM, ...).
    pub rx_unknown_subtype: u64,
    /// Version 0.
    pub rx_bad_version: u64,
    /// TLV type or length not where the format puts it.
    pub rx_bad_tlv: u64,
    /// Frames that are not Slow Protocols frames at all.
    pub rx_not_slow_protocols: u64,
    /// Times a LACPDU waited for the transmit limit (3 per second).
    pub tx_rate_limited: u64,
    pub expired: u64,
    pub defaulted: u64,
    pub actor_churn: u64,
    pub partner_churn: u64,
    pub link_down: u64,
}
