//! The grammar: words of ip-link(8) and bridge(8) to a [`Command`].
//!
//! Parsing is purely syntactic and needs no switch: it checks that keywords are known, that
//! values are numbers, MACs, VIDs (1-4094) or the words allowed, and that nothing is given
//! twice. Keywords after the object and command may come in any order, as in iproute2. A word
//! starting with `#` ends the line (comment). Objects, commands and keywords may be abbreviated
//! where iproute2 allows it ([`crate::words`]); a near miss is answered with "did you mean".
//!
//! Here the entry points, the word cursor and the value parsers (numbers, VIDs, lists, TPIDs)
//! every object shares; one submodule per object (`link`, `vlan`, `fdb`, `mirror`) holds its
//! commands' grammar; the unit tests are in `tests.rs`. Imports only [`crate::command`],
//! [`crate::error`] and [`crate::words`].

use crate::command::*;
use crate::error::ControlError;
use crate::words::{self, exact, lookup, or_list, Kw, Lookup};
use qbridge_bridge::check_vid;
use qbridge_bridge::{
    ConfigError, FdbFlushMatch, FdbKind, MacvlanMode, PcpMode, PvlanRole, VidList, Violation,
    VlanModeKind, VlanProtocol,
};
use qbridge_wire::{MacAddr, Tpid};

mod fdb;
mod link;
mod mirror;
mod stp;
#[cfg(test)]
mod tests;
mod trace;
mod vlan;
mod vxlan;

use fdb::parse_fdb;
use link::parse_link;
use vlan::parse_vlan;

const LINK_COMMANDS: &str = "add, set, del, show or help";
const VLAN_COMMANDS: &str = "add, del, set, map, show, tunnelshow or help";
const FDB_COMMANDS: &str = "add, append, replace, del, show, flush or help";
/// Receive ring slots per AF_PACKET socket (`ring_frames N`).
const MIN_RING_FRAMES: u64 = 64;
const MAX_RING_FRAMES: u64 = 1 << 20;
const RING_FRAMES: &str = "a number of frames from 64 to 1048576";
const RING_RANGE: &str = "64-1048576 frames";
/// Most device queues an AF_XDP port binds (`queues N`).
const MAX_XDP_QUEUES: u64 = 64;
const LINK_KINDS: &str = "bridge, bond, pcap, afpacket, afxdp, tap, patch, vlan, macvlan or vxlan";
const BRIDGE_OPTIONS: &str = "vlan_filtering, vlan_protocol, vlan_default_pvid, ageing_time, \
                              fdb_max_learned, group_fwd_mask, fdb_max_entries, learn_inner_vid, \
                              stp_state, stp_mode, priority, hello_time, max_age, \
                              forward_delay, tx_hold_count, max_hops, mst_name or mst_revision";
const PORT_OPTIONS: &str = "master, nomaster, up, down, learning, flood, mcast_flood, \
                            bcast_flood, isolated, hairpin, mtu, envhdr, tpid, fdb_max_learned, \
                            ifname, netns, address, index, vlan_mode, tag, trunks, cvlans, \
                            pcp_mode, default_pcp, locked, mab, cost, priority, guard, \
                            root_block, bpdu_filter, loop_guard, edge, auto_edge or p2p";
const ON_OFF: &str = "on or off";
const U32_RANGE: &str = "0-4294967295";

/// Splits a line into words, dropping a trailing `#` comment.
pub fn split_words(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .take_while(|w| !w.starts_with('#'))
        .collect()
}

/// Parses one line of a batch file or of a command line joined by spaces. `Ok(None)` for a
/// blank or comment-only line.
pub fn parse_line(line: &str) -> Result<Option<Command>, ControlError> {
    let words = split_words(line);
    if words.is_empty() {
        return Ok(None);
    }
    parse_words(&words).map(Some)
}

/// Parses `OBJECT COMMAND ARGS…`.
pub fn parse_words<S: AsRef<str>>(words: &[S]) -> Result<Command, ControlError> {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    if let Some(bad) = words.iter().find(|w| w.chars().any(char::is_control)) {
        return Err(ControlError::ControlCharacter {
            word: crate::error::escape_controls(bad),
        });
    }
    let mut w = Words {
        words: &words,
        pos: 0,
    };
    let Some(word) = w.next() else {
        return Err(ControlError::MissingArgument {
            what: "object (link, vlan, fdb, mirror, stp, vni or trace)",
        });
    };
    let object = match lookup(word, words::OBJECTS) {
        Lookup::Found("link") => Object::Link,
        Lookup::Found("vlan") => Object::Vlan,
        Lookup::Found("fdb") => Object::Fdb,
        Lookup::Found("mirror") => Object::Mirror,
        Lookup::Found("stp") => Object::Stp,
        Lookup::Found("vni") => Object::Vni,
        Lookup::Found("show") => return parse_show(&mut w),
        Lookup::Found("trace") => return trace::parse(&mut w),
        Lookup::Found(_) => return parse_help(&mut w),
        Lookup::Ambiguous(c) => return Err(ambiguous(word, &c)),
        Lookup::Unknown(near) => {
            return Err(ControlError::UnknownObject {
                word: word.to_string(),
                hint: hint(near, "link, vlan, fdb, mirror, stp or vni"),
            })
        }
    };
    // `OBJECT help`, as `ip link help` and `bridge fdb help`.
    if w.peek()
        .is_some_and(|c| lookup(c, commands_of(object)) == Lookup::Found("help"))
    {
        w.next();
        w.end("nothing after \"help\"")?;
        return Ok(Command::Help(Some(object)));
    }
    match object {
        Object::Link => parse_link(&mut w).map(Command::Link),
        Object::Vlan => parse_vlan(&mut w).map(Command::Vlan),
        Object::Fdb => parse_fdb(&mut w).map(Command::Fdb),
        Object::Mirror => mirror::parse_mirror(&mut w).map(Command::Mirror),
        Object::Stp => stp::parse_stp(&mut w).map(Command::Stp),
        Object::Vni => vxlan::parse_vni(&mut w).map(Command::Vni),
    }
}

fn commands_of(object: Object) -> &'static [Kw] {
    match object {
        Object::Link => words::LINK_COMMANDS,
        Object::Vlan => words::VLAN_COMMANDS,
        Object::Fdb => words::FDB_COMMANDS,
        Object::Mirror => words::MIRROR_COMMANDS,
        Object::Stp => words::STP_COMMANDS,
        Object::Vni => words::VNI_COMMANDS,
    }
}

/// `show running-config`, `show fast-path`.
fn parse_show(w: &mut Words<'_>) -> Result<Command, ControlError> {
    match w.next() {
        Some("running-config") => {
            w.end("nothing after \"running-config\"")?;
            Ok(Command::ShowRunningConfig)
        }
        Some("fast-path") => {
            w.end("nothing after \"fast-path\"")?;
            Ok(Command::ShowFastPath)
        }
        Some(other) => Err(refuse(
            other,
            &[exact("running-config"), exact("fast-path")],
            "running-config or fast-path",
        )),
        None => Err(ControlError::MissingArgument {
            what: "\"running-config\" or \"fast-path\" after \"show\"",
        }),
    }
}

/// `help [OBJECT]`.
fn parse_help(w: &mut Words<'_>) -> Result<Command, ControlError> {
    let Some(word) = w.next() else {
        return Ok(Command::Help(None));
    };
    let object = match keyword(
        word,
        words::HELP_OBJECTS,
        "link, vlan, fdb, mirror, stp or vni",
    )? {
        "link" => Object::Link,
        "vlan" => Object::Vlan,
        "mirror" => Object::Mirror,
        "stp" => Object::Stp,
        "vni" => Object::Vni,
        _ => Object::Fdb,
    };
    w.end("nothing after the object")?;
    Ok(Command::Help(Some(object)))
}

fn hint(near: Option<&str>, expected: &str) -> String {
    match near {
        Some(s) => format!("did you mean \"{s}\"?"),
        None => format!("expected {expected}"),
    }
}

fn ambiguous(word: &str, candidates: &[&str]) -> ControlError {
    ControlError::Ambiguous {
        word: word.to_string(),
        candidates: or_list(candidates),
    }
}

/// The keyword `word` names in `table` (whole or abbreviated), or the error for a word that
/// names none: a near miss, an ambiguous abbreviation, or `expected`.
fn keyword(word: &str, table: &[Kw], expected: &str) -> Result<&'static str, ControlError> {
    match lookup(word, table) {
        Lookup::Found(k) => Ok(k),
        Lookup::Ambiguous(c) => Err(ambiguous(word, &c)),
        Lookup::Unknown(Some(near)) => Err(ControlError::NearMiss {
            word: word.to_string(),
            suggestion: near,
        }),
        Lookup::Unknown(None) => Err(unexpected(word, expected)),
    }
}

/// The error for `word` where the grammar takes none of `table` (a keyword out of place, or a
/// near miss of one).
fn refuse(word: &str, table: &[Kw], expected: &str) -> ControlError {
    match keyword(word, table, expected) {
        Ok(_) => unexpected(word, expected),
        Err(e) => e,
    }
}

/// The command `word` names for `object`.
fn command(
    object: &'static str,
    word: &str,
    table: &[Kw],
    expected: &'static str,
) -> Result<&'static str, ControlError> {
    match lookup(word, table) {
        Lookup::Found(k) => Ok(k),
        Lookup::Ambiguous(c) => Err(ambiguous(word, &c)),
        Lookup::Unknown(near) => Err(ControlError::UnknownCommand {
            object,
            word: word.to_string(),
            hint: hint(near, expected),
        }),
    }
}

struct Words<'a> {
    words: &'a [&'a str],
    pos: usize,
}

impl<'a> Words<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let w = self.words.get(self.pos).copied();
        if w.is_some() {
            self.pos += 1;
        }
        w
    }

    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.pos).copied()
    }

    /// The value after keyword `kw`.
    fn value(&mut self, kw: &str, expected: &'static str) -> Result<&'a str, ControlError> {
        self.next().ok_or_else(|| ControlError::MissingValue {
            keyword: kw.to_string(),
            expected,
        })
    }

    /// A device name: `dev NAME` or just `NAME` (iproute2 lets `dev` be omitted).
    fn device(&mut self, what: &'static str) -> Result<&'a str, ControlError> {
        match self.next() {
            Some(kw @ ("dev" | "name")) => self.value(kw, "a device name"),
            Some(name) => Ok(name),
            None => Err(ControlError::MissingArgument { what }),
        }
    }

    /// The next word as a keyword of `table` (see [`keyword`]); `None` at the end.
    fn next_kw(
        &mut self,
        table: &[Kw],
        expected: &str,
    ) -> Result<Option<&'static str>, ControlError> {
        self.next().map(|w| keyword(w, table, expected)).transpose()
    }

    fn end(&mut self, expected: &str) -> Result<(), ControlError> {
        match self.next() {
            None => Ok(()),
            Some(w) => Err(unexpected(w, expected)),
        }
    }
}

fn unexpected(word: &str, expected: &str) -> ControlError {
    ControlError::Unexpected {
        word: word.to_string(),
        expected: expected.to_string(),
    }
}

fn set_once<T>(slot: &mut Option<T>, kw: &str, v: T) -> Result<(), ControlError> {
    if slot.is_some() {
        return Err(ControlError::Duplicate(kw.to_string()));
    }
    *slot = Some(v);
    Ok(())
}

/// An unsigned number, decimal or `0x` hexadecimal, at most `max`; `range` names the values
/// the keyword takes, for the message when the number is beyond `max` (reported as typed).
fn parse_uint(
    what: &'static str,
    s: &str,
    max: u64,
    range: &'static str,
) -> Result<u64, ControlError> {
    let bad = || ControlError::BadValue {
        what,
        value: s.to_string(),
        expected: "a number, decimal or 0x hexadecimal",
    };
    let out_of_range = || ControlError::OutOfRange {
        what,
        value: s.to_string(),
        range,
    };
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).map_err(|_| out_of_range())?
        }
        Some(_) => return Err(bad()),
        None if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) => {
            s.parse::<u64>().map_err(|_| out_of_range())?
        }
        None => return Err(bad()),
    };
    if v > max {
        return Err(out_of_range());
    }
    Ok(v)
}

/// A 32-bit number; `range` as [`parse_uint`]. Values in 32 bits but out of `range` are the
/// switch's to refuse.
fn parse_u32(what: &'static str, s: &str, range: &'static str) -> Result<u32, ControlError> {
    parse_uint(what, s, u32::MAX as u64, range).map(|v| v as u32)
}

fn parse_u16(what: &'static str, s: &str, range: &'static str) -> Result<u16, ControlError> {
    parse_uint(what, s, u16::MAX as u64, range).map(|v| v as u16)
}

const VID_EXPECTED: &str = "a number from 1 to 4094";

/// A VID for membership or FDB entries: 1-4094 (the switch's own check names the error; a
/// number too large for it is reported as typed).
fn parse_vid(s: &str) -> Result<u16, ControlError> {
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
        return Err(ControlError::BadValue {
            what: "vid",
            value: s.to_string(),
            expected: VID_EXPECTED,
        });
    }
    match s.parse::<u32>() {
        Ok(v) => Ok(check_vid(v)?),
        Err(_) => Err(ControlError::OutOfRange {
            what: "vid",
            value: s.to_string(),
            range: "1-4094",
        }),
    }
}

/// `fdb add|del … vlan V`: a VID, or 0 for the VLAN-0 entry alone (qbridge extension: the
/// entry `fdb add` without `vlan` makes next to the per-VLAN ones on a VLAN-filtering bridge).
fn parse_fdb_vid(s: &str) -> Result<u16, ControlError> {
    if s == "0" {
        return Ok(0);
    }
    parse_vid(s)
}

const VIOLATIONS: &str = "protect, restrict or shutdown";

const PVLAN_ROLES: &str = "promiscuous, isolated, community N or none";

const PCP_MODES: &str = "keep, copy, fixed N or map LIST";
const PCP_MAP: &str = "FROM:TO pairs of PCPs, e.g. 0:1,5:5";

fn parse_pcp(s: &str) -> Result<u8, ControlError> {
    parse_uint("PCP", s, 7, "0-7").map(|n| n as u8)
}

/// `0:1,5:5`: inner PCP → pushed PCP; PCPs not named map to themselves.
fn parse_pcp_map(s: &str) -> Result<[u8; 8], ControlError> {
    let mut m = [0, 1, 2, 3, 4, 5, 6, 7];
    for pair in s.split(',') {
        let bad = || ControlError::BadValue {
            what: "pcp map",
            value: s.to_string(),
            expected: PCP_MAP,
        };
        let (a, b) = pair.split_once(':').ok_or_else(bad)?;
        m[parse_pcp(a)? as usize] = parse_pcp(b)?;
    }
    Ok(m)
}

const VLAN_MODES: &str = "access, trunk, native-untagged, native-tagged or dot1q-tunnel";
const VID_LIST: &str = "VIDs and ranges, e.g. 10,20-30";

/// `10,20-30`: VIDs 1-4094, and 0 (untagged) where `zero` allows it.
fn parse_vid_list(what: &'static str, s: &str, zero: bool) -> Result<VidList, ControlError> {
    let mut ranges = Vec::new();
    for part in s.split(',') {
        let r = if zero && part == "0" {
            VidRange { start: 0, end: 0 }
        } else {
            parse_vid_range(part).map_err(|_| ControlError::BadValue {
                what,
                value: s.to_string(),
                expected: if zero {
                    "VIDs 0 (untagged) to 4094 and ranges, e.g. 0,10,20-30"
                } else {
                    "VIDs 1 to 4094 and ranges, e.g. 10,20-30"
                },
            })?
        };
        if r.start > r.end {
            return Err(ControlError::BadValue {
                what,
                value: s.to_string(),
                expected: "ranges written low-high, e.g. 10,20-30",
            });
        }
        ranges.push((r.start, r.end));
    }
    Ok(VidList::new(ranges))
}

/// `V` or `V-V2`.
fn parse_vid_range(s: &str) -> Result<VidRange, ControlError> {
    let (start, end) = s.split_once('-').unwrap_or((s, s));
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    if !digits(start) || !digits(end) {
        return Err(ControlError::BadValue {
            what: "vid",
            value: s.to_string(),
            expected: "V or V-V2, numbers from 1 to 4094",
        });
    }
    Ok(VidRange {
        start: parse_vid(start)?,
        end: parse_vid(end)?,
    })
}

fn parse_on_off(kw: &'static str, s: &str) -> Result<bool, ControlError> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(ControlError::BadValue {
            what: kw,
            value: s.to_string(),
            expected: ON_OFF,
        }),
    }
}

/// Seconds with an optional fraction (`300`, `0.25` is refused, `1.5`), to nanoseconds.
/// Allowed: 0 (every dynamic entry expires at once: the bridge floods like a hub, as in Linux)
/// or 1 to 1000000 seconds.
fn parse_ageing_time(s: &str) -> Result<u64, ControlError> {
    let bad = || ControlError::BadValue {
        what: "ageing_time",
        value: s.to_string(),
        expected: "seconds, decimals allowed, e.g. 300 or 1.5",
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || (s.contains('.') && frac.is_empty()) {
        return Err(bad());
    }
    let out_of_range = || ControlError::Config(ConfigError::BadAgeingTime(s.to_string()));
    let secs: u64 = int.parse().map_err(|_| out_of_range())?;
    if frac.len() > 9 {
        return Err(bad());
    }
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(9 - frac.len() as u32)
    };
    let ns = secs
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(frac_ns));
    match ns {
        Some(0) => Ok(0),
        Some(ns) if (1_000_000_000..=1_000_000 * 1_000_000_000).contains(&ns) => Ok(ns),
        _ => Err(out_of_range()),
    }
}

fn parse_vlan_protocol(s: &str) -> Result<VlanProtocol, ControlError> {
    if s.eq_ignore_ascii_case("802.1q") {
        Ok(VlanProtocol::Dot1Q)
    } else if s.eq_ignore_ascii_case("802.1ad") {
        Ok(VlanProtocol::Dot1Ad)
    } else {
        Err(ControlError::BadValue {
            what: "vlan_protocol",
            value: s.to_string(),
            expected: "802.1Q or 802.1ad",
        })
    }
}

fn parse_tpid(s: &str) -> Result<Option<Tpid>, ControlError> {
    let expected = "0xHHHH, 802.1Q, 802.1ad or default";
    if s == "default" {
        return Ok(None);
    }
    if let Ok(p) = parse_vlan_protocol(s) {
        return Ok(Some(p.tpid()));
    }
    let bad = || ControlError::BadValue {
        what: "tpid",
        value: s.to_string(),
        expected,
    };
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or_else(bad)?;
    if hex.is_empty() || hex.len() > 4 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    Ok(Some(Tpid(u16::from_str_radix(hex, 16).map_err(|_| bad())?)))
}
