//! The Slow Protocols frames this crate speaks: LACPDUs (IEEE 802.1AX-2020 6.4.2, subtype 1)
//! and Marker PDUs (6.5.3, subtype 2), parsed from and emitted to whole Ethernet frames.
//!
//! Owns the byte layout only: [`parse_frame`] validates once (destination, EtherType, subtype,
//! version, TLV types and lengths) and returns owned values; after that nothing reads the bytes
//! again. [`Lacpdu::to_frame`] and [`MarkerPdu::to_frame`] emit byte-exact 124-byte frames
//! (14-byte header + 110-byte body; the FCS is the device's business).
//!
//! Versions: version 1 PDUs must carry the Actor, Partner and Collector TLVs and the
//! Terminator at their fixed offsets. A PDU of a higher version (802.1AX-2014/2020 version 2
//! adds Port Algorithm and Conversation TLVs after the Collector TLV) is accepted when its
//! first three TLVs are in place; whatever follows them is ignored, which is the rule for
//! receiving higher protocol versions (6.4.2.3, "version 1 implementations ... ignore"). Version
//! 0 is refused. Frames longer than 124 bytes (padding, trailing TLVs) are accepted; shorter
//! ones are refused. Total on any input, no allocation when parsing.

use core::ops::Range;

use qbridge_wire::MacAddr;
use serde::Serialize;

/// The Slow Protocols multicast address (802.3 Annex 57A).
pub const SLOW_PROTOCOLS_DST: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x02]);
/// The Slow Protocols EtherType.
pub const SLOW_PROTOCOLS_ETHERTYPE: u16 = 0x8809;
/// Slow Protocols subtype of LACP.
pub const SUBTYPE_LACP: u8 = 1;
/// Slow Protocols subtype of the Marker protocol.
pub const SUBTYPE_MARKER: u8 = 2;
/// The version this crate emits.
pub const LACP_VERSION: u8 = 1;
/// Bytes of a LACPDU or Marker PDU after the Ethernet header, subtype included.
pub const BODY_LEN: usize = 110;
/// Bytes of an emitted frame: Ethernet header + body (no FCS).
pub const FRAME_LEN: usize = ETH_HDR_LEN + BODY_LEN;
const ETH_HDR_LEN: usize = 14;

/// Offsets inside the body (subtype at 0).
mod field {
    use core::ops::Range;
    pub const SUBTYPE: usize = 0;
    pub const VERSION: usize = 1;
    pub const ACTOR: usize = 2;
    pub const PARTNER: usize = 22;
    pub const COLLECTOR: usize = 42;
    pub const TERMINATOR: usize = 58;
    pub const INFO_TLV_LEN: u8 = 20;
    pub const COLLECTOR_TLV_LEN: u8 = 16;
    // Inside an Actor/Partner TLV, after its type and length bytes.
    pub const SYS_PRIO: Range<usize> = 2..4;
    pub const SYSTEM: Range<usize> = 4..10;
    pub const KEY: Range<usize> = 10..12;
    pub const PORT_PRIO: Range<usize> = 12..14;
    pub const PORT: Range<usize> = 14..16;
    pub const STATE: usize = 16;
    // Marker PDU.
    pub const MARKER_TLV: usize = 2;
    pub const MARKER_TLV_LEN: u8 = 16;
    pub const MARKER_TERMINATOR: usize = 18;
}

/// Actor_State / Partner_State bits (6.4.2.3 item m).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub struct PortState(pub u8);

impl PortState {
    pub const ACTIVITY: u8 = 0x01;
    pub const TIMEOUT: u8 = 0x02;
    pub const AGGREGATION: u8 = 0x04;
    pub const SYNCHRONIZATION: u8 = 0x08;
    pub const COLLECTING: u8 = 0x10;
    pub const DISTRIBUTING: u8 = 0x20;
    pub const DEFAULTED: u8 = 0x40;
    pub const EXPIRED: u8 = 0x80;

    pub const fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    pub fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }

    /// The names of the set bits, in OVS's `lacp/show` words.
    pub fn words(self) -> Vec<&'static str> {
        const NAMES: [(u8, &str); 8] = [
            (PortState::ACTIVITY, "activity"),
            (PortState::TIMEOUT, "timeout"),
            (PortState::AGGREGATION, "aggregation"),
            (PortState::SYNCHRONIZATION, "synchronized"),
            (PortState::COLLECTING, "collecting"),
            (PortState::DISTRIBUTING, "distributing"),
            (PortState::DEFAULTED, "defaulted"),
            (PortState::EXPIRED, "expired"),
        ];
        NAMES
            .iter()
            .filter(|(b, _)| self.has(*b))
            .map(|(_, n)| *n)
            .collect()
    }
}

/// One side's information as an Actor or Partner TLV carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub struct PortInfo {
    pub system_priority: u16,
    pub system: MacAddr,
    pub key: u16,
    pub port_priority: u16,
    pub port: u16,
    pub state: PortState,
}

impl PortInfo {
    fn parse(tlv: &[u8; 20]) -> PortInfo {
        PortInfo {
            system_priority: be16(tlv, field::SYS_PRIO),
            system: MacAddr::from_bytes(&tlv[field::SYSTEM]),
            key: be16(tlv, field::KEY),
            port_priority: be16(tlv, field::PORT_PRIO),
            port: be16(tlv, field::PORT),
            state: PortState(tlv[field::STATE]),
        }
    }

    fn emit(&self, tlv_type: u8, tlv: &mut [u8]) {
        tlv[0] = tlv_type;
        tlv[1] = field::INFO_TLV_LEN;
        tlv[field::SYS_PRIO].copy_from_slice(&self.system_priority.to_be_bytes());
        tlv[field::SYSTEM].copy_from_slice(self.system.as_bytes());
        tlv[field::KEY].copy_from_slice(&self.key.to_be_bytes());
        tlv[field::PORT_PRIO].copy_from_slice(&self.port_priority.to_be_bytes());
        tlv[field::PORT].copy_from_slice(&self.port.to_be_bytes());
        tlv[field::STATE] = self.state.0;
    }

    /// The fields 6.4.9's update_Selected compares: everything but the state, plus the
    /// Aggregation bit.
    pub fn same_link(&self, other: &PortInfo) -> bool {
        self.system_priority == other.system_priority
            && self.system == other.system
            && self.key == other.key
            && self.port_priority == other.port_priority
            && self.port == other.port
            && self.state.has(PortState::AGGREGATION) == other.state.has(PortState::AGGREGATION)
    }
}

/// A LACPDU (6.4.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lacpdu {
    /// The version field as received; [`LACP_VERSION`] when emitted.
    pub version: u8,
    pub actor: PortInfo,
    pub partner: PortInfo,
    /// CollectorMaxDelay, tens of microseconds.
    pub collector_max_delay: u16,
}

/// Which Marker TLV a Marker PDU carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    Information,
    Response,
}

/// A Marker PDU (6.5.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MarkerPdu {
    pub kind: MarkerKind,
    pub requester_port: u16,
    pub requester_system: MacAddr,
    pub transaction_id: u32,
}

/// A validated Slow Protocols PDU of a subtype this crate handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlowPdu {
    Lacp(Lacpdu),
    Marker(MarkerPdu),
}

/// Why a frame was refused; each has a member counter (`MemberCounters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error, Serialize)]
pub enum PduError {
    #[error("not a Slow Protocols frame (destination or EtherType 0x{ethertype:04x})")]
    NotSlowProtocols { ethertype: u16 },
    #[error("Slow Protocols frame of {len_bytes} bytes is shorter than {FRAME_LEN}")]
    BadLength { len_bytes: usize },
    #[error("Slow Protocols subtype {0} is not LACP (1) or Marker (2)")]
    UnknownSubtype(u8),
    #[error("version {0} is not a valid protocol version")]
    BadVersion(u8),
    #[error("TLV at body offset {offset}: type {tlv_type} length {len}, expected type {expected_type} length {expected_len}")]
    BadTlv {
        offset: usize,
        tlv_type: u8,
        len: u8,
        expected_type: u8,
        expected_len: u8,
    },
}

fn be16(b: &[u8], r: Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

fn check_tlv(
    body: &[u8; BODY_LEN],
    offset: usize,
    expected_type: u8,
    expected_len: u8,
) -> Result<(), PduError> {
    let (tlv_type, len) = (body[offset], body[offset + 1]);
    if tlv_type == expected_type && len == expected_len {
        Ok(())
    } else {
        Err(PduError::BadTlv {
            offset,
            tlv_type,
            len,
            expected_type,
            expected_len,
        })
    }
}

/// Whether the datapath must hand `frame` to [`crate::Bond::receive`] rather than the
/// bridge: untagged, to the Slow Protocols address, EtherType 0x8809. A cheap check on the
/// first 14 bytes; total.
pub fn is_slow_protocols(frame: &[u8]) -> bool {
    frame.get(0..6) == Some(SLOW_PROTOCOLS_DST.as_bytes().as_slice())
        && frame.get(12..14) == Some(SLOW_PROTOCOLS_ETHERTYPE.to_be_bytes().as_slice())
}

/// Validates a whole Ethernet frame (without FCS, untagged: Slow Protocols frames are never
/// tagged) and returns its PDU.
pub fn parse_frame(frame: &[u8]) -> Result<SlowPdu, PduError> {
    let ethertype = match frame.get(12..14) {
        Some(t) => u16::from_be_bytes([t[0], t[1]]),
        None => {
            return Err(PduError::BadLength {
                len_bytes: frame.len(),
            })
        }
    };
    if frame.get(0..6) != Some(SLOW_PROTOCOLS_DST.as_bytes().as_slice())
        || ethertype != SLOW_PROTOCOLS_ETHERTYPE
    {
        return Err(PduError::NotSlowProtocols { ethertype });
    }
    let body: &[u8; BODY_LEN] = frame
        .get(ETH_HDR_LEN..FRAME_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(PduError::BadLength {
            len_bytes: frame.len(),
        })?;
    let version = body[field::VERSION];
    match body[field::SUBTYPE] {
        SUBTYPE_LACP => parse_lacp(body, version).map(SlowPdu::Lacp),
        SUBTYPE_MARKER => parse_marker(body, version).map(SlowPdu::Marker),
        other => Err(PduError::UnknownSubtype(other)),
    }
}

fn parse_lacp(body: &[u8; BODY_LEN], version: u8) -> Result<Lacpdu, PduError> {
    if version == 0 {
        return Err(PduError::BadVersion(version));
    }
    check_tlv(body, field::ACTOR, 1, field::INFO_TLV_LEN)?;
    check_tlv(body, field::PARTNER, 2, field::INFO_TLV_LEN)?;
    check_tlv(body, field::COLLECTOR, 3, field::COLLECTOR_TLV_LEN)?;
    if version == 1 {
        check_tlv(body, field::TERMINATOR, 0, 0)?;
    }
    let tlv = |at: usize| -> [u8; 20] {
        let mut t = [0u8; 20];
        t.copy_from_slice(&body[at..at + 20]);
        t
    };
    Ok(Lacpdu {
        version,
        actor: PortInfo::parse(&tlv(field::ACTOR)),
        partner: PortInfo::parse(&tlv(field::PARTNER)),
        collector_max_delay: be16(body, field::COLLECTOR + 2..field::COLLECTOR + 4),
    })
}

fn parse_marker(body: &[u8; BODY_LEN], version: u8) -> Result<MarkerPdu, PduError> {
    if version == 0 {
        return Err(PduError::BadVersion(version));
    }
    let kind = match body[field::MARKER_TLV] {
        1 => MarkerKind::Information,
        2 => MarkerKind::Response,
        _ => {
            return Err(PduError::BadTlv {
                offset: field::MARKER_TLV,
                tlv_type: body[field::MARKER_TLV],
                len: body[field::MARKER_TLV + 1],
                expected_type: 1,
                expected_len: field::MARKER_TLV_LEN,
            })
        }
    };
    let expected_type = body[field::MARKER_TLV];
    check_tlv(
        body,
        field::MARKER_TLV,
        expected_type,
        field::MARKER_TLV_LEN,
    )?;
    if version == 1 {
        check_tlv(body, field::MARKER_TERMINATOR, 0, 0)?;
    }
    let t = field::MARKER_TLV;
    Ok(MarkerPdu {
        kind,
        requester_port: be16(body, t + 2..t + 4),
        requester_system: MacAddr::from_bytes(&body[t + 4..t + 10]),
        transaction_id: u32::from_be_bytes([
            body[t + 10],
            body[t + 11],
            body[t + 12],
            body[t + 13],
        ]),
    })
}

fn frame_header(src: MacAddr, subtype: u8) -> Vec<u8> {
    let mut f = vec![0u8; FRAME_LEN];
    f[0..6].copy_from_slice(SLOW_PROTOCOLS_DST.as_bytes());
    f[6..12].copy_from_slice(src.as_bytes());
    f[12..14].copy_from_slice(&SLOW_PROTOCOLS_ETHERTYPE.to_be_bytes());
    f[ETH_HDR_LEN + field::SUBTYPE] = subtype;
    f[ETH_HDR_LEN + field::VERSION] = LACP_VERSION;
    f
}

impl Lacpdu {
    /// The whole frame: Slow Protocols header from `src`, version 1 body, reserved bytes zero.
    pub fn to_frame(&self, src: MacAddr) -> Vec<u8> {
        let mut f = frame_header(src, SUBTYPE_LACP);
        let body = &mut f[ETH_HDR_LEN..];
        self.actor
            .emit(1, &mut body[field::ACTOR..field::ACTOR + 20]);
        self.partner
            .emit(2, &mut body[field::PARTNER..field::PARTNER + 20]);
        body[field::COLLECTOR] = 3;
        body[field::COLLECTOR + 1] = field::COLLECTOR_TLV_LEN;
        body[field::COLLECTOR + 2..field::COLLECTOR + 4]
            .copy_from_slice(&self.collector_max_delay.to_be_bytes());
        // Terminator TLV (type 0, length 0) and the 50 reserved bytes are already zero.
        f
    }
}

impl MarkerPdu {
    /// The whole frame: Slow Protocols header from `src`, version 1 body.
    pub fn to_frame(&self, src: MacAddr) -> Vec<u8> {
        let mut f = frame_header(src, SUBTYPE_MARKER);
        let t = ETH_HDR_LEN + field::MARKER_TLV;
        f[t] = match self.kind {
            MarkerKind::Information => 1,
            MarkerKind::Response => 2,
        };
        f[t + 1] = field::MARKER_TLV_LEN;
        f[t + 2..t + 4].copy_from_slice(&self.requester_port.to_be_bytes());
        f[t + 4..t + 10].copy_from_slice(self.requester_system.as_bytes());
        f[t + 10..t + 14].copy_from_slice(&self.transaction_id.to_be_bytes());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lacpdu {
        let info = |port, state| PortInfo {
            system_priority: 0x8000,
            system: MacAddr([0xaa, 0x55, 0xaa, 0x55, 0, 0]),
            key: 2,
            port_priority: 0xff,
            port,
            state: PortState(state),
        };
        Lacpdu {
            version: 1,
            actor: info(1, 0x3f),
            partner: info(3, 0x07),
            collector_max_delay: 0,
        }
    }

    #[test]
    fn emit_is_byte_exact() {
        let f = sample().to_frame(MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.len(), 124);
        let head: [u8; 38] = [
            0x01, 0x80, 0xc2, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0x09, // Ethernet
            1, 1, // subtype, version
            1, 20, 0x80, 0x00, 0xaa, 0x55, 0xaa, 0x55, 0, 0, 0, 2, 0, 0xff, 0, 1, 0x3f, 0, 0,
            0, // actor
            2, 20, // partner TLV header
        ];
        assert_eq!(&f[..38], &head);
        assert_eq!(&f[14 + 42..14 + 46], &[3, 16, 0, 0]);
        assert_eq!(&f[14 + 58..14 + 60], &[0, 0]);
        assert!(f[14 + 60..].iter().all(|&b| b == 0));
    }

    #[test]
    fn round_trip_and_errors() {
        let f = sample().to_frame(MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(parse_frame(&f), Ok(SlowPdu::Lacp(sample())));
        assert!(is_slow_protocols(&f) && !is_slow_protocols(&f[..13]));
        assert_eq!(
            parse_frame(&f[..123]),
            Err(PduError::BadLength { len_bytes: 123 })
        );
        let mut g = f.clone();
        g[14] = 9;
        assert_eq!(parse_frame(&g), Err(PduError::UnknownSubtype(9)));
        let mut g = f.clone();
        g[14 + 3] = 19;
        assert!(matches!(
            parse_frame(&g),
            Err(PduError::BadTlv { offset: 2, .. })
        ));
        let mut g = f.clone();
        g[14 + 58] = 7;
        assert!(matches!(
            parse_frame(&g),
            Err(PduError::BadTlv { offset: 58, .. })
        ));
        // Version 2: whatever follows the Collector TLV is ignored.
        g[15] = 2;
        let SlowPdu::Lacp(p) = parse_frame(&g).unwrap() else {
            panic!()
        };
        assert_eq!((p.version, p.actor), (2, sample().actor));
        let mut g = f.clone();
        g[15] = 0;
        assert_eq!(parse_frame(&g), Err(PduError::BadVersion(0)));
        let mut g = f;
        g[12] = 0x81;
        assert!(matches!(
            parse_frame(&g),
            Err(PduError::NotSlowProtocols { .. })
        ));
    }

    #[test]
    fn marker_round_trip() {
        let m = MarkerPdu {
            kind: MarkerKind::Information,
            requester_port: 7,
            requester_system: MacAddr([2, 0, 0, 0, 0, 9]),
            transaction_id: 0xdead_beef,
        };
        let f = m.to_frame(MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.len(), 124);
        assert_eq!(&f[14..20], &[2, 1, 1, 16, 0, 7]);
        assert_eq!(parse_frame(&f), Ok(SlowPdu::Marker(m)));
    }
}
