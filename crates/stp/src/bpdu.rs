//! BPDU codec: STP Configuration and TCN BPDUs, RST BPDUs (version 2) and MST BPDUs
//! (version 3 with MSTI configuration messages), inside their 802.3 + LLC frame.
//!
//! Parsing validates once, as 802.1D-2004 9.3.4 and 802.1Q-2022 14.4 say, and returns a
//! [`Bpdu`] or a [`BadBpdu`] reason (one per early exit, counted per port by the engine);
//! it never panics and never reads outside the slice. Emitting is byte-exact: a frame is
//! padded to the 60-byte 802.3 minimum with zeros. Times go on the wire in 1/256 s and are
//! read back truncated to whole seconds.

use crate::types::{BridgeId, Mac, PortId, Times};
use serde::Serialize;

/// The group address every bridge listens to (802.1D table 7-10).
pub const STP_GROUP_ADDRESS: Mac = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00];
/// The provider bridge group address (802.1ad / 802.1Q table 8-2).
pub const PROVIDER_GROUP_ADDRESS: Mac = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x08];
/// Ethernet (14) + LLC (3) header bytes before the BPDU.
pub const FRAME_HDR_LEN: usize = 17;
/// Configuration BPDU length.
pub const CONFIG_LEN: usize = 35;
/// TCN BPDU length.
pub const TCN_LEN: usize = 4;
/// RST BPDU length.
pub const RST_LEN: usize = 36;
/// MST BPDU length without MSTI messages.
pub const MST_BASE_LEN: usize = 102;
/// One MSTI configuration message.
pub const MSTI_MSG_LEN: usize = 16;
/// At most 64 MSTIs per region (802.1Q 13.3).
pub const MAX_MSTIS: usize = 64;

/// Flag bits of the BPDU flags octet (9.3.3).
pub mod flags {
    /// Topology Change.
    pub const TC: u8 = 0x01;
    /// Proposal.
    pub const PROPOSAL: u8 = 0x02;
    /// Port role mask (two bits).
    pub const ROLE_MASK: u8 = 0x0c;
    /// Learning.
    pub const LEARNING: u8 = 0x10;
    /// Forwarding.
    pub const FORWARDING: u8 = 0x20;
    /// Agreement.
    pub const AGREEMENT: u8 = 0x40;
    /// Topology Change Acknowledgment.
    pub const TC_ACK: u8 = 0x80;
}

/// The port role as encoded in an RST/MST BPDU's flags (9.3.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub enum WireRole {
    /// 0: unknown (MSTP: master).
    Unknown,
    /// 1: alternate or backup.
    AlternateOrBackup,
    /// 2: root.
    Root,
    /// 3: designated.
    Designated,
}

impl WireRole {
    /// Decode the role bits of a flags octet.
    pub fn from_flags(f: u8) -> Self {
        match (f & flags::ROLE_MASK) >> 2 {
            1 => WireRole::AlternateOrBackup,
            2 => WireRole::Root,
            3 => WireRole::Designated,
            _ => WireRole::Unknown,
        }
    }
    /// The role bits, in place.
    pub fn to_flags(self) -> u8 {
        (match self {
            WireRole::Unknown => 0,
            WireRole::AlternateOrBackup => 1,
            WireRole::Root => 2,
            WireRole::Designated => 3,
        }) << 2
    }
}

/// The fields common to Configuration, RST and MST BPDUs (the CIST part).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ConfigBody {
    /// Flags octet.
    pub flags: u8,
    /// (CIST) Root Identifier.
    pub root: BridgeId,
    /// (CIST External) Root Path Cost.
    pub root_path_cost: u32,
    /// Bridge Identifier (MST: the CIST Regional Root Identifier).
    pub bridge: BridgeId,
    /// Port Identifier.
    pub port: PortId,
    /// Timers.
    pub times: Times,
}

/// MST Configuration Identifier (802.1Q 13.8).
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct MstConfigId {
    /// Format selector (0).
    pub format_selector: u8,
    /// Configuration name, 32 octets, NUL padded.
    pub name: [u8; 32],
    /// Revision level.
    pub revision: u16,
    /// HMAC-MD5 digest of the VID to MSTID table.
    pub digest: [u8; 16],
}

/// One MSTI configuration message (802.1Q 14.6.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MstiMsg {
    /// Flags (the TC-Ack bit is the Master flag).
    pub flags: u8,
    /// MSTI Regional Root Identifier (its system id extension is the MSTID).
    pub regional_root: BridgeId,
    /// MSTI Internal Root Path Cost.
    pub internal_root_path_cost: u32,
    /// Bridge priority (top 4 bits of the octet).
    pub bridge_priority: u8,
    /// Port priority (top 4 bits of the octet).
    pub port_priority: u8,
    /// Remaining hops.
    pub remaining_hops: u8,
}

/// The MST-only part of an MST BPDU.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MstPart {
    /// The sender's region.
    pub config_id: MstConfigId,
    /// CIST Internal Root Path Cost.
    pub internal_root_path_cost: u32,
    /// CIST Bridge Identifier (the transmitting bridge).
    pub cist_bridge: BridgeId,
    /// CIST Remaining Hops.
    pub remaining_hops: u8,
    /// MSTI messages, at most 64.
    pub mstis: Vec<MstiMsg>,
}

/// A decoded BPDU.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Bpdu {
    /// STP Configuration BPDU (version 0, type 0).
    Config(ConfigBody),
    /// Topology Change Notification (type 0x80).
    Tcn,
    /// RST BPDU (type 2; version 2, or a later version not valid as MST).
    Rst(ConfigBody),
    /// MST BPDU (type 2, version 3, valid MST part).
    Mst(ConfigBody, Box<MstPart>),
}

/// Why a received frame was not accepted as a BPDU. Each is a named counter.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, thiserror::Error, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadBpdu {
    /// frame shorter than the Ethernet and LLC headers
    #[error("frame shorter than the Ethernet and LLC headers")]
    TooShort,
    /// the length/type field is an EtherType, or exceeds the frame
    #[error("length field is not an 802.3 length that fits the frame")]
    BadLength,
    /// LLC is not DSAP 0x42 SSAP 0x42 UI
    #[error("LLC header is not 42 42 03")]
    BadLlc,
    /// protocol identifier is not 0
    #[error("protocol identifier is not 0")]
    BadProtocolId,
    /// BPDU type is not 0x00, 0x02 or 0x80
    #[error("unknown BPDU type")]
    UnknownType,
    /// BPDU shorter than its type requires
    #[error("BPDU shorter than its type requires")]
    Truncated,
    /// Configuration BPDU whose message age is not below its max age (9.3.4 a)
    #[error("message age is not below max age")]
    MessageAgeExceedsMaxAge,
    /// the BPDU is one this port sent (looped back)
    #[error("BPDU sent by this port came back")]
    OwnBpdu,
}

impl BadBpdu {
    /// Every reason, for counter tables.
    pub const ALL: [BadBpdu; 8] = [
        BadBpdu::TooShort,
        BadBpdu::BadLength,
        BadBpdu::BadLlc,
        BadBpdu::BadProtocolId,
        BadBpdu::UnknownType,
        BadBpdu::Truncated,
        BadBpdu::MessageAgeExceedsMaxAge,
        BadBpdu::OwnBpdu,
    ];
    /// Index into a counter table.
    pub fn index(self) -> usize {
        self as usize
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Byte offsets inside the BPDU (after LLC).
mod field {
    pub const VERSION: usize = 2;
    pub const TYPE: usize = 3;
    pub const FLAGS: usize = 4;
    pub const ROOT: usize = 5;
    pub const COST: usize = 13;
    pub const BRIDGE: usize = 17;
    pub const PORT: usize = 25;
    pub const MSG_AGE: usize = 27;
    pub const MAX_AGE: usize = 29;
    pub const HELLO: usize = 31;
    pub const FWD_DELAY: usize = 33;
    pub const V1_LEN: usize = 35;
    pub const V3_LEN: usize = 36;
    pub const CFG_ID: usize = 38;
    pub const INT_COST: usize = 89;
    pub const CIST_BRIDGE: usize = 93;
    pub const HOPS: usize = 101;
}

/// Parse a whole frame (destination MAC first). The destination address is not checked:
/// the caller delivers only frames to the group address it configured.
pub fn parse_frame(frame: &[u8]) -> Result<Bpdu, BadBpdu> {
    if frame.len() < FRAME_HDR_LEN {
        return Err(BadBpdu::TooShort);
    }
    let len = usize::from(be16(frame, 12));
    if !(3..=1500).contains(&len) || 14 + len > frame.len() {
        return Err(BadBpdu::BadLength);
    }
    if frame[14..17] != [0x42, 0x42, 0x03] {
        return Err(BadBpdu::BadLlc);
    }
    parse(&frame[FRAME_HDR_LEN..14 + len])
}

/// Parse a BPDU (the bytes after LLC), 802.1Q-2022 14.4 validation.
pub fn parse(b: &[u8]) -> Result<Bpdu, BadBpdu> {
    if b.len() < TCN_LEN {
        return Err(BadBpdu::Truncated);
    }
    if be16(b, 0) != 0 {
        return Err(BadBpdu::BadProtocolId);
    }
    let version = b[field::VERSION];
    match b[field::TYPE] {
        0x80 => Ok(Bpdu::Tcn),
        0x00 => {
            if b.len() < CONFIG_LEN {
                return Err(BadBpdu::Truncated);
            }
            let body = body(b);
            if body.times.message_age >= body.times.max_age {
                return Err(BadBpdu::MessageAgeExceedsMaxAge);
            }
            Ok(Bpdu::Config(body))
        }
        0x02 if version >= 2 => {
            if b.len() < RST_LEN {
                return Err(BadBpdu::Truncated);
            }
            let body = body(b);
            if version >= 3 {
                if let Some(mst) = mst_part(b) {
                    return Ok(Bpdu::Mst(body, Box::new(mst)));
                }
            }
            Ok(Bpdu::Rst(body))
        }
        _ => Err(BadBpdu::UnknownType),
    }
}

fn times_at(b: &[u8], at: usize) -> u16 {
    be16(b, at) / 256
}

fn body(b: &[u8]) -> ConfigBody {
    ConfigBody {
        flags: b[field::FLAGS],
        root: BridgeId(be64(b, field::ROOT)),
        root_path_cost: be32(b, field::COST),
        bridge: BridgeId(be64(b, field::BRIDGE)),
        port: PortId(be16(b, field::PORT)),
        times: Times {
            message_age: times_at(b, field::MSG_AGE),
            max_age: times_at(b, field::MAX_AGE),
            hello_time: times_at(b, field::HELLO),
            forward_delay: times_at(b, field::FWD_DELAY),
        },
    }
}

/// The MST part when 802.1Q 14.4 e) holds: length >= 102, Version 1 Length 0, Version 3
/// Length a whole number of MSTI messages (at most 64) that fits the BPDU.
fn mst_part(b: &[u8]) -> Option<MstPart> {
    if b.len() < MST_BASE_LEN || b[field::V1_LEN] != 0 {
        return None;
    }
    let v3 = usize::from(be16(b, field::V3_LEN));
    if v3 < 64 || (v3 - 64) % MSTI_MSG_LEN != 0 || 36 + 2 + v3 > b.len() {
        return None;
    }
    let n = (v3 - 64) / MSTI_MSG_LEN;
    if n > MAX_MSTIS {
        return None;
    }
    let mut name = [0u8; 32];
    name.copy_from_slice(&b[field::CFG_ID + 1..field::CFG_ID + 33]);
    let mut digest = [0u8; 16];
    digest.copy_from_slice(&b[field::CFG_ID + 35..field::CFG_ID + 51]);
    let mstis = (0..n)
        .map(|i| {
            let m = &b[MST_BASE_LEN + i * MSTI_MSG_LEN..MST_BASE_LEN + (i + 1) * MSTI_MSG_LEN];
            MstiMsg {
                flags: m[0],
                regional_root: BridgeId(be64(m, 1)),
                internal_root_path_cost: be32(m, 9),
                bridge_priority: m[13],
                port_priority: m[14],
                remaining_hops: m[15],
            }
        })
        .collect();
    Some(MstPart {
        config_id: MstConfigId {
            format_selector: b[field::CFG_ID],
            name,
            revision: be16(b, field::CFG_ID + 33),
            digest,
        },
        internal_root_path_cost: be32(b, field::INT_COST),
        cist_bridge: BridgeId(be64(b, field::CIST_BRIDGE)),
        remaining_hops: b[field::HOPS],
        mstis,
    })
}

fn put_body(out: &mut Vec<u8>, version: u8, bpdu_type: u8, c: &ConfigBody) {
    out.extend_from_slice(&[0, 0, version, bpdu_type, c.flags]);
    out.extend_from_slice(&c.root.to_bytes());
    out.extend_from_slice(&c.root_path_cost.to_be_bytes());
    out.extend_from_slice(&c.bridge.to_bytes());
    out.extend_from_slice(&c.port.0.to_be_bytes());
    for t in [
        c.times.message_age,
        c.times.max_age,
        c.times.hello_time,
        c.times.forward_delay,
    ] {
        out.extend_from_slice(&(t.saturating_mul(256)).to_be_bytes());
    }
}

impl Bpdu {
    /// The BPDU bytes (after LLC).
    pub fn emit(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MST_BASE_LEN);
        match self {
            Bpdu::Tcn => out.extend_from_slice(&[0, 0, 0, 0x80]),
            Bpdu::Config(c) => put_body(&mut out, 0, 0, c),
            Bpdu::Rst(c) => {
                put_body(&mut out, 2, 2, c);
                out.push(0);
            }
            Bpdu::Mst(c, m) => {
                put_body(&mut out, 3, 2, c);
                out.push(0);
                let n = m.mstis.len().min(MAX_MSTIS);
                out.extend_from_slice(&((64 + n * MSTI_MSG_LEN) as u16).to_be_bytes());
                out.push(m.config_id.format_selector);
                out.extend_from_slice(&m.config_id.name);
                out.extend_from_slice(&m.config_id.revision.to_be_bytes());
                out.extend_from_slice(&m.config_id.digest);
                out.extend_from_slice(&m.internal_root_path_cost.to_be_bytes());
                out.extend_from_slice(&m.cist_bridge.to_bytes());
                out.push(m.remaining_hops);
                for s in &m.mstis[..n] {
                    out.push(s.flags);
                    out.extend_from_slice(&s.regional_root.to_bytes());
                    out.extend_from_slice(&s.internal_root_path_cost.to_be_bytes());
                    out.extend_from_slice(&[s.bridge_priority, s.port_priority, s.remaining_hops]);
                }
            }
        }
        out
    }

    /// The whole 802.3/LLC frame: `dst`, `src`, length, 42 42 03, BPDU, zero padding to 60.
    pub fn emit_frame(&self, dst: Mac, src: Mac) -> Vec<u8> {
        let body = self.emit();
        let mut f = Vec::with_capacity(FRAME_HDR_LEN + body.len().max(43));
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&((3 + body.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0x42, 0x42, 0x03]);
        f.extend_from_slice(&body);
        if f.len() < 60 {
            f.resize(60, 0);
        }
        f
    }

    /// The CIST fields, for every type but TCN.
    pub fn body(&self) -> Option<&ConfigBody> {
        match self {
            Bpdu::Config(c) | Bpdu::Rst(c) | Bpdu::Mst(c, _) => Some(c),
            Bpdu::Tcn => None,
        }
    }

    /// Which counter this BPDU goes to.
    pub fn kind(&self) -> BpduKind {
        match self {
            Bpdu::Config(_) => BpduKind::Config,
            Bpdu::Tcn => BpduKind::Tcn,
            Bpdu::Rst(_) => BpduKind::Rst,
            Bpdu::Mst(..) => BpduKind::Mst,
        }
    }
}

/// BPDU types, for counters.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BpduKind {
    /// STP Configuration BPDU.
    Config,
    /// Topology Change Notification.
    Tcn,
    /// RST BPDU.
    Rst,
    /// MST BPDU.
    Mst,
}
