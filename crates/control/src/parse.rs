//! The grammar: words of ip-link(8) and bridge(8) to a [`Command`].
//!
//! Parsing is purely syntactic and needs no switch: it checks that keywords are known, that
//! values are numbers, MACs, VIDs (1-4094) or the words allowed, and that nothing is given
//! twice. Keywords after the object and command may come in any order, as in iproute2. A word
//! starting with `#` ends the line (comment). Objects, commands and keywords may be abbreviated
//! where iproute2 allows it ([`crate::words`]); a near miss is answered with "did you mean".

use crate::command::*;
use crate::error::ControlError;
use crate::words::{self, exact, lookup, or_list, Kw, Lookup};
use qbridge_bridge::check_vid;
use qbridge_bridge::{
    ConfigError, FdbFlushMatch, FdbKind, MacvlanMode, PcpMode, PvlanRole, VidList, Violation,
    VlanModeKind, VlanProtocol,
};
use qbridge_wire::{MacAddr, Tpid};

mod mirror;

const LINK_COMMANDS: &str = "add, set, del, show or help";
const VLAN_COMMANDS: &str = "add, del, set, map, show or help";
const FDB_COMMANDS: &str = "add, replace, del, show, flush or help";
/// Receive ring slots per AF_PACKET socket (`ring_frames N`).
const MIN_RING_FRAMES: u64 = 64;
const MAX_RING_FRAMES: u64 = 1 << 20;
const RING_FRAMES: &str = "a number of frames from 64 to 1048576";
const RING_RANGE: &str = "64-1048576 frames";
/// Most device queues an AF_XDP port binds (`queues N`).
const MAX_XDP_QUEUES: u64 = 64;
const LINK_KINDS: &str = "bridge, pcap, afpacket, afxdp, tap, patch, vlan or macvlan";
const BRIDGE_OPTIONS: &str = "vlan_filtering, vlan_protocol, vlan_default_pvid, ageing_time, \
                              fdb_max_learned, group_fwd_mask, fdb_max_entries or learn_inner_vid";
const PORT_OPTIONS: &str = "master, nomaster, up, down, learning, flood, mcast_flood, \
                            bcast_flood, isolated, hairpin, mtu, envhdr, tpid, fdb_max_learned, \
                            ifname, netns, address, index, vlan_mode, tag, trunks, cvlans, \
                            pcp_mode, default_pcp, locked or mab";
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
            what: "object (link, vlan, fdb or mirror)",
        });
    };
    let object = match lookup(word, words::OBJECTS) {
        Lookup::Found("link") => Object::Link,
        Lookup::Found("vlan") => Object::Vlan,
        Lookup::Found("fdb") => Object::Fdb,
        Lookup::Found("mirror") => Object::Mirror,
        Lookup::Found("show") => return parse_show(&mut w),
        Lookup::Found(_) => return parse_help(&mut w),
        Lookup::Ambiguous(c) => return Err(ambiguous(word, &c)),
        Lookup::Unknown(near) => {
            return Err(ControlError::UnknownObject {
                word: word.to_string(),
                hint: hint(near, "link, vlan, fdb or mirror"),
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
    }
}

fn commands_of(object: Object) -> &'static [Kw] {
    match object {
        Object::Link => words::LINK_COMMANDS,
        Object::Vlan => words::VLAN_COMMANDS,
        Object::Fdb => words::FDB_COMMANDS,
        Object::Mirror => words::MIRROR_COMMANDS,
    }
}

/// `show running-config`.
fn parse_show(w: &mut Words<'_>) -> Result<Command, ControlError> {
    match w.next() {
        Some("running-config") => {}
        Some(other) => return Err(refuse(other, &[exact("running-config")], "running-config")),
        None => {
            return Err(ControlError::MissingArgument {
                what: "\"running-config\" after \"show\"",
            })
        }
    }
    w.end("nothing after \"running-config\"")?;
    Ok(Command::ShowRunningConfig)
}

/// `help [OBJECT]`.
fn parse_help(w: &mut Words<'_>) -> Result<Command, ControlError> {
    let Some(word) = w.next() else {
        return Ok(Command::Help(None));
    };
    let object = match keyword(word, words::HELP_OBJECTS, "link, vlan, fdb or mirror")? {
        "link" => Object::Link,
        "vlan" => Object::Vlan,
        "mirror" => Object::Mirror,
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

/// `vlan map add dev P vid A translate B | add dev P cvid C[-C2] svid S | add dev P svid S
/// cvid C translate V [C2] | del dev P vid A | del dev P cvid C[-C2] | del dev P svid S cvid
/// C | show [dev P]`.
fn parse_vlan_map(w: &mut Words<'_>) -> Result<VlanCommand, ControlError> {
    const MAP_COMMANDS: &str = "add, del or show";
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingArgument {
            what: "\"add\", \"del\" or \"show\" after \"vlan map\"",
        });
    };
    let cmd = command("vlan map", cmd, words::VLAN_MAP_COMMANDS, MAP_COMMANDS)?;
    let (mut dev, mut vid, mut to) = (None, None, None);
    let (mut cvids, mut svid, mut to_cvid) = (None, None, None);
    let expected = match cmd {
        "add" => "dev, vid and translate, cvid and svid, or svid, cvid and translate",
        "del" => "dev, vid, cvid, or svid and cvid",
        _ => "dev",
    };
    while let Some(kw) = w.next_kw(words::VLAN_MAP, expected)? {
        match kw {
            "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
            "vid" if cmd != "show" => set_once(&mut vid, kw, parse_vid(w.value(kw, "a vid")?)?)?,
            "translate" if cmd == "add" => {
                set_once(&mut to, kw, parse_vid(w.value(kw, "a vid")?)?)?;
                // `translate S2 C2` (2:2): a second number right after the first.
                if let Some(c2) = w.peek().filter(|v| v.bytes().all(|b| b.is_ascii_digit())) {
                    w.next();
                    to_cvid = Some(parse_vid(c2)?);
                }
            }
            "cvid" if cmd != "show" => {
                set_once(&mut cvids, kw, parse_vid_range(w.value(kw, "C or C-C2")?)?)?
            }
            "svid" if cmd != "show" => {
                set_once(&mut svid, kw, parse_vid(w.value(kw, "an S-VID")?)?)?
            }
            other => return Err(unexpected(other, expected)),
        }
    }
    if cmd == "show" {
        return Ok(VlanCommand::MapShow { dev });
    }
    let dev = dev.ok_or(ControlError::MissingArgument {
        what: "\"dev NAME\"",
    })?;
    if let (Some(cvids), Some(s), true) = (cvids, svid, to.is_some() || cmd == "del") {
        // 2:1 or 2:2.
        if vid.is_some() {
            return Err(unexpected("vid", "svid S cvid C translate V [C2]"));
        }
        if cvids.start != cvids.end {
            return Err(ControlError::BadValue {
                what: "cvid",
                value: format!("{}-{}", cvids.start, cvids.end),
                expected: "one C-VID (ranges are for selective Q-in-Q: cvid C-C2 svid S)",
            });
        }
        return Ok(match (cmd, to) {
            ("add", Some(v)) => VlanCommand::TagMapAdd {
                dev,
                map: qbridge_bridge::TagMap {
                    svid: s,
                    cvid: cvids.start,
                    vid: v,
                    inner: to_cvid,
                },
            },
            _ => VlanCommand::TagMapDel {
                dev,
                svid: s,
                cvid: cvids.start,
            },
        });
    }
    if let Some(cvids) = cvids {
        if vid.is_some() || to.is_some() {
            return Err(unexpected(
                "cvid",
                "either vid A translate B or cvid C svid S",
            ));
        }
        return Ok(match cmd {
            "add" => VlanCommand::CvidMapAdd {
                dev,
                cvids,
                svid: svid.ok_or(ControlError::MissingArgument { what: "\"svid S\"" })?,
            },
            _ => VlanCommand::CvidMapDel { dev, cvids },
        });
    }
    let wire = vid.ok_or(ControlError::MissingArgument { what: "\"vid A\"" })?;
    Ok(match cmd {
        "add" => VlanCommand::MapAdd {
            dev,
            wire,
            inside: to.ok_or(ControlError::MissingArgument {
                what: "\"translate B\"",
            })?,
        },
        _ => VlanCommand::MapDel { dev, wire },
    })
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

// ----- link -----

fn parse_link(w: &mut Words<'_>) -> Result<LinkCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "link",
            expected: LINK_COMMANDS,
        });
    };
    match command("link", cmd, words::LINK_COMMANDS, LINK_COMMANDS)? {
        "add" => parse_link_add(w),
        "set" => {
            let dev = w.device("device name after \"link set\"")?.to_string();
            if w.peek()
                .is_some_and(|t| lookup(t, words::LINK_SET_TYPE) == Lookup::Found("type"))
            {
                w.next();
                match w.value("type", "bridge or bridge_slave")? {
                    "bridge" => {
                        let opts = parse_bridge_options(w)?;
                        return Ok(LinkCommand::SetBridge { dev, opts });
                    }
                    "bridge_slave" => {}
                    other => return Err(unexpected(other, "bridge or bridge_slave")),
                }
            }
            let opts = parse_port_options(w)?;
            Ok(LinkCommand::SetPort { dev, opts })
        }
        "delete" => {
            let dev = w.device("device name after \"link del\"")?.to_string();
            w.end("nothing after the device name")?;
            Ok(LinkCommand::Del { dev })
        }
        // show, lst, list ("help" was taken by `parse_words`)
        _ => {
            let dev = match w.peek() {
                None => None,
                Some(_) => Some(w.device("device name")?.to_string()),
            };
            w.end("nothing after the device name")?;
            Ok(LinkCommand::Show { dev })
        }
    }
}

fn parse_link_add(w: &mut Words<'_>) -> Result<LinkCommand, ControlError> {
    // ip-link(8): `link add [link DEV] [name] NAME type KIND …`, `link DEV` before or after
    // the name.
    let (mut name, mut link, mut index) = (None, None, None);
    loop {
        let word = w.next();
        let kw = word.and_then(|wd| match lookup(wd, words::LINK_ADD) {
            Lookup::Found(k) => Some(k),
            _ => None,
        });
        match (kw, word) {
            (Some("type"), _) => break,
            (Some(kw @ "link"), _) => {
                set_once(&mut link, kw, w.value(kw, "the lower device's name")?)?
            }
            (Some(kw @ "name"), _) => set_once(&mut name, kw, w.value(kw, "a device name")?)?,
            (Some(kw @ "index"), _) => set_once(&mut index, kw, parse_index(w.value(kw, INDEX)?)?)?,
            (Some("dev"), _) if name.is_none() => name = Some(w.value("dev", "a device name")?),
            (None, Some(other)) if name.is_none() => name = Some(other),
            (_, Some(other)) => return Err(refuse(other, words::LINK_ADD, "type")),
            (_, None) if name.is_none() => {
                return Err(ControlError::MissingArgument {
                    what: "device name after \"link add\"",
                })
            }
            (_, None) => {
                return Err(ControlError::MissingArgument {
                    what: "\"type KIND\"",
                })
            }
        }
    }
    let name = name
        .ok_or(ControlError::MissingArgument {
            what: "device name after \"link add\"",
        })?
        .to_string();
    let kind = w.value("type", LINK_KINDS)?;
    let mut cmd = parse_link_kind(w, name, link, kind)?;
    match &mut cmd {
        LinkCommand::AddPort { index: slot, .. } => *slot = index,
        _ if index.is_some() => {
            return Err(unexpected(
                "index",
                "\"type KIND\" (a bridge takes no index)",
            ))
        }
        _ => {}
    }
    Ok(cmd)
}

/// The words of `index N`: a port id.
const INDEX: &str = "a port id (0-4095)";

fn parse_index(s: &str) -> Result<u16, ControlError> {
    const _: () = assert!(qbridge_bridge::MAX_PORTS == 4096);
    parse_uint("index", s, 4095, "0-4095").map(|n| n as u16)
}

/// `link add … type KIND ARGS`, after the name (and `link LOWER`).
fn parse_link_kind(
    w: &mut Words<'_>,
    name: String,
    link: Option<&str>,
    kind: &str,
) -> Result<LinkCommand, ControlError> {
    if let Some(link) = link {
        return parse_stacked(w, name, link.to_string(), kind);
    }
    match kind {
        "vlan" | "macvlan" => Err(ControlError::MissingArgument {
            what: "\"link LOWER\" (the device to stack on) before the name",
        }),
        "bridge" => Ok(LinkCommand::AddBridge {
            name,
            opts: parse_bridge_options(w)?,
        }),
        "pcap" => {
            w.end("nothing after \"type pcap\"")?;
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Pcap,
                index: None,
                peer_index: None,
            })
        }
        "afpacket" => {
            let (mut dev, mut bypass, mut ring) = (None, None, None);
            let table = [exact("dev"), exact("qdisc_bypass"), exact("ring_frames")];
            while let Some(kw) = w.next_kw(&table, "dev, qdisc_bypass or ring_frames")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a host interface name")?)?,
                    "qdisc_bypass" => {
                        let v = parse_on_off("qdisc_bypass", w.value(kw, ON_OFF)?)?;
                        set_once(&mut bypass, kw, v)?;
                    }
                    "ring_frames" => {
                        let v = w.value(kw, RING_FRAMES)?;
                        let n = parse_uint("ring_frames", v, MAX_RING_FRAMES, RING_RANGE)?;
                        if n < MIN_RING_FRAMES {
                            return Err(ControlError::OutOfRange {
                                what: "ring_frames",
                                value: v.to_string(),
                                range: RING_RANGE,
                            });
                        }
                        set_once(&mut ring, kw, n as u32)?;
                    }
                    other => return Err(unexpected(other, "dev, qdisc_bypass or ring_frames")),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev IFNAME\" for type afpacket",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::AfPacket {
                    dev,
                    qdisc_bypass: bypass.unwrap_or(true),
                    ring_frames: ring,
                },
                index: None,
                peer_index: None,
            })
        }
        "tap" => {
            let (mut ifname, mut netns) = (None, None);
            let table = [exact("ifname"), exact("netns")];
            while let Some(kw) = w.next_kw(&table, "ifname or netns")? {
                match kw {
                    "ifname" => set_once(&mut ifname, kw, w.value(kw, "a TAP device name")?)?,
                    "netns" => set_once(&mut netns, kw, w.value(kw, "a network namespace")?)?,
                    other => return Err(unexpected(other, "ifname or netns")),
                }
            }
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Tap {
                    ifname: ifname.map(str::to_string),
                    netns: netns.map(str::to_string),
                },
                index: None,
                peer_index: None,
            })
        }
        "afxdp" => {
            let (mut dev, mut queues, mut mode, mut zc) = (None, None, None, None);
            let table = [
                exact("dev"),
                exact("queues"),
                exact("mode"),
                exact("zerocopy"),
            ];
            while let Some(kw) = w.next_kw(&table, "dev, queues, mode or zerocopy")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a host interface name")?)?,
                    "queues" => {
                        let v = w.value(kw, "a number of device queues")?;
                        let n = parse_uint("queues", v, MAX_XDP_QUEUES, "1-64")?;
                        if n == 0 {
                            return Err(ControlError::OutOfRange {
                                what: "queues",
                                value: v.to_string(),
                                range: "1-64",
                            });
                        }
                        set_once(&mut queues, kw, n as u32)?;
                    }
                    "mode" => {
                        let v = match w.value(kw, "native or skb")? {
                            "native" => XdpAttach::Native,
                            "skb" => XdpAttach::Skb,
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "mode",
                                    value: other.to_string(),
                                    expected: "native or skb",
                                })
                            }
                        };
                        set_once(&mut mode, kw, v)?;
                    }
                    "zerocopy" => {
                        let v = parse_on_off("zerocopy", w.value(kw, ON_OFF)?)?;
                        set_once(&mut zc, kw, v)?;
                    }
                    other => return Err(unexpected(other, "dev, queues, mode or zerocopy")),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev IFNAME\" for type afxdp",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::AfXdp {
                    dev,
                    queues: queues.unwrap_or(1),
                    mode: mode.unwrap_or(XdpAttach::Native),
                    zerocopy: zc.unwrap_or(false),
                },
                index: None,
                peer_index: None,
            })
        }
        "patch" => {
            let (mut peer, mut peer_index) = (None, None);
            while let Some(kw) = w.next_kw(&[exact("peer"), exact("index")], "peer")? {
                match kw {
                    "peer" => set_once(&mut peer, kw, w.device("the peer port's name")?)?,
                    "index" if peer.is_some() => {
                        let i = parse_index(w.value(kw, INDEX)?)?;
                        set_once(&mut peer_index, kw, i)?;
                    }
                    other => return Err(unexpected(other, "peer")),
                }
            }
            let peer = peer
                .ok_or(ControlError::MissingArgument {
                    what: "\"peer NAME\" for type patch",
                })?
                .to_string();
            Ok(LinkCommand::AddPort {
                name,
                spec: PortSpec::Patch { peer },
                index: None,
                peer_index,
            })
        }
        other => Err(ControlError::BadValue {
            what: "link type",
            value: other.to_string(),
            expected: LINK_KINDS,
        }),
    }
}

/// `… type vlan [protocol P] id VID [netns NS] [address MAC]` or
/// `… type macvlan mode MODE [netns NS] [address MAC]`, after `link add link LOWER NAME`.
fn parse_stacked(
    w: &mut Words<'_>,
    name: String,
    link: String,
    kind: &str,
) -> Result<LinkCommand, ControlError> {
    let (mut protocol, mut id, mut mode, mut netns, mut address) = (None, None, None, None, None);
    let vlan = match kind {
        "vlan" => true,
        "macvlan" => false,
        other => {
            return Err(ControlError::BadValue {
                what: "link type with \"link LOWER\"",
                value: other.to_string(),
                expected: "vlan or macvlan",
            })
        }
    };
    let expected = if vlan {
        "protocol, id, netns or address"
    } else {
        "mode, netns or address"
    };
    let table = if vlan {
        words::VLAN_DEVICE_OPTIONS
    } else {
        words::MACVLAN_OPTIONS
    };
    while let Some(kw) = w.next_kw(table, expected)? {
        match kw {
            "protocol" if vlan => {
                let v = w.value(kw, "802.1Q, 802.1ad or 0xHHHH")?;
                let t = parse_tpid(v)?.ok_or_else(|| ControlError::BadValue {
                    what: "protocol",
                    value: v.to_string(),
                    expected: "802.1Q, 802.1ad or 0xHHHH",
                })?;
                set_once(&mut protocol, kw, t)?;
            }
            "id" if vlan => set_once(&mut id, kw, parse_vid(w.value(kw, "a vid")?)?)?,
            "mode" if !vlan => {
                let v = w.value(kw, MACVLAN_MODES)?;
                let m = match v {
                    "private" => MacvlanMode::Private,
                    "vepa" => MacvlanMode::Vepa,
                    "bridge" => MacvlanMode::Bridge,
                    "passthru" => MacvlanMode::Passthru,
                    other => {
                        return Err(ControlError::BadValue {
                            what: "macvlan mode",
                            value: other.to_string(),
                            expected: MACVLAN_MODES,
                        })
                    }
                };
                set_once(&mut mode, kw, m)?;
            }
            "netns" => set_once(&mut netns, kw, w.value(kw, NETNS)?.to_string())?,
            "address" => set_once(
                &mut address,
                kw,
                parse_address(w.value(kw, "a MAC address")?)?,
            )?,
            other => return Err(unexpected(other, expected)),
        }
    }
    let spec = if vlan {
        PortSpec::Vlan {
            link,
            protocol: protocol.unwrap_or(Tpid(0x8100)),
            id: id.ok_or(ControlError::MissingArgument {
                what: "\"id VID\" for type vlan",
            })?,
            netns,
            address,
        }
    } else {
        PortSpec::Macvlan {
            link,
            mode: mode.ok_or(ControlError::MissingArgument {
                what: "\"mode private|vepa|bridge|passthru\" for type macvlan",
            })?,
            netns,
            address,
        }
    };
    Ok(LinkCommand::AddPort {
        name,
        spec,
        index: None,
        peer_index: None,
    })
}

const MACVLAN_MODES: &str = "private, vepa, bridge or passthru";
const NETNS: &str = "a network namespace";

/// The value of `address` (a device's MAC).
fn parse_address(v: &str) -> Result<MacAddr, ControlError> {
    v.parse().map_err(|_| ControlError::BadValue {
        what: "address",
        value: v.to_string(),
        expected: "a MAC address (aa:bb:cc:dd:ee:ff)",
    })
}

fn parse_bridge_options(w: &mut Words<'_>) -> Result<BridgeOptions, ControlError> {
    let mut o = BridgeOptions::default();
    while let Some(kw) = w.next_kw(words::BRIDGE_OPTIONS, BRIDGE_OPTIONS)? {
        match kw {
            "vlan_filtering" => {
                let v = match w.value(kw, "0 or 1")? {
                    "0" => false,
                    "1" => true,
                    other => {
                        return Err(ControlError::BadValue {
                            what: "vlan_filtering",
                            value: other.to_string(),
                            expected: "0 or 1",
                        })
                    }
                };
                set_once(&mut o.vlan_filtering, kw, v)?;
            }
            "vlan_protocol" => {
                let v = parse_vlan_protocol(w.value(kw, "802.1Q or 802.1ad")?)?;
                set_once(&mut o.vlan_protocol, kw, v)?;
            }
            "vlan_default_pvid" => {
                let s = w.value(kw, "a vid, or 0 for none")?;
                let v = if s == "0" { 0 } else { parse_vid(s)? };
                set_once(&mut o.vlan_default_pvid, kw, v)?;
            }
            "ageing_time" => {
                let v = parse_ageing_time(w.value(kw, "seconds")?)?;
                set_once(&mut o.ageing_time_ns, kw, v)?;
            }
            "fdb_max_learned" => {
                let v = w.value(kw, "a number, 0 for no limit")?;
                let v = parse_u32("fdb_max_learned", v, U32_RANGE)?;
                set_once(&mut o.fdb_max_learned, kw, v)?;
            }
            "group_fwd_mask" => {
                let v = w.value(kw, "a 16-bit mask")?;
                let v = parse_u16("group_fwd_mask", v, "0-0xffff")?;
                set_once(&mut o.group_fwd_mask, kw, v)?;
            }
            "fdb_max_entries" => {
                let v = w.value(kw, "a number of entries")?;
                let v = parse_u32("fdb_max_entries", v, "1-16777216")?;
                set_once(&mut o.fdb_max_entries, kw, v)?;
            }
            "learn_inner_vid" => {
                let v = parse_on_off("learn_inner_vid", w.value(kw, ON_OFF)?)?;
                set_once(&mut o.learn_inner_vid, kw, v)?;
            }
            other => return Err(unexpected(other, BRIDGE_OPTIONS)),
        }
    }
    Ok(o)
}

fn parse_port_options(w: &mut Words<'_>) -> Result<PortOptions, ControlError> {
    let mut o = PortOptions::default();
    while let Some(kw) = w.next_kw(words::PORT_OPTIONS, PORT_OPTIONS)? {
        match kw {
            "master" => {
                let br = w.value(kw, "a bridge name")?;
                set_once(
                    &mut o.master,
                    "master/nomaster",
                    MasterChange::Set(br.to_string()),
                )?;
            }
            "nomaster" => set_once(&mut o.master, "master/nomaster", MasterChange::Unset)?,
            "up" => set_once(&mut o.up, "up/down", true)?,
            "down" => set_once(&mut o.up, "up/down", false)?,
            "learning" | "flood" | "mcast_flood" | "bcast_flood" | "isolated" | "hairpin"
            | "locked" | "mab" => {
                let (slot, name) = match kw {
                    "locked" => (&mut o.locked, "locked"),
                    "mab" => (&mut o.mab, "mab"),
                    "learning" => (&mut o.learning, "learning"),
                    "flood" => (&mut o.flood, "flood"),
                    "mcast_flood" => (&mut o.mcast_flood, "mcast_flood"),
                    "bcast_flood" => (&mut o.bcast_flood, "bcast_flood"),
                    "isolated" => (&mut o.isolated, "isolated"),
                    _ => (&mut o.hairpin, "hairpin"),
                };
                let v = parse_on_off(name, w.value(kw, ON_OFF)?)?;
                set_once(slot, kw, v)?;
            }
            "mtu" => {
                let v = parse_u32("mtu", w.value(kw, "a number of bytes")?, "68-65535")?;
                set_once(&mut o.mtu, kw, v)?;
            }
            "envhdr" => {
                match w.value(kw, "len N or len auto")? {
                    "len" => {}
                    other => return Err(unexpected(other, "len")),
                }
                let s = w.value("envhdr len", "a number of bytes or auto")?;
                let v = if s == "auto" {
                    None
                } else {
                    Some(parse_u32("envhdr len", s, "0-482")?)
                };
                set_once(&mut o.envhdr_len, "envhdr", v)?;
            }
            "tpid" => {
                let v = parse_tpid(w.value(kw, "0xHHHH or default")?)?;
                set_once(&mut o.tpid, kw, v)?;
            }
            "fdb_max_learned" => {
                let v = w.value(kw, "a number, 0 for no limit")?;
                let v = parse_u32("fdb_max_learned", v, U32_RANGE)?;
                set_once(&mut o.fdb_max_learned, kw, v)?;
            }
            "ifname" => set_once(&mut o.ifname, kw, w.value(kw, "a TAP name")?.to_string())?,
            "netns" => set_once(&mut o.netns, kw, w.value(kw, NETNS)?.to_string())?,
            "address" => set_once(
                &mut o.address,
                kw,
                parse_address(w.value(kw, "a MAC address")?)?,
            )?,
            "index" => set_once(&mut o.index, kw, parse_index(w.value(kw, INDEX)?)?)?,
            "vlan_mode" => {
                let v = w.value(kw, VLAN_MODES)?;
                let m = VlanModeKind::from_name(v).ok_or_else(|| ControlError::BadValue {
                    what: "vlan_mode",
                    value: v.to_string(),
                    expected: VLAN_MODES,
                })?;
                set_once(&mut o.vlan_mode, kw, m)?;
            }
            "tag" => set_once(&mut o.tag, kw, parse_vid(w.value(kw, "a VID (1-4094)")?)?)?,
            "trunks" => {
                let v = parse_vid_list("trunks", w.value(kw, VID_LIST)?, false)?;
                set_once(&mut o.trunks, kw, v)?;
            }
            "cvlans" => {
                let v = parse_vid_list("cvlans", w.value(kw, VID_LIST)?, true)?;
                set_once(&mut o.cvlans, kw, v)?;
            }
            "pcp_mode" => {
                let v = match w.value(kw, PCP_MODES)? {
                    "keep" => PcpMode::Keep,
                    "copy" => PcpMode::Copy,
                    "fixed" => PcpMode::Fixed(parse_pcp(w.value("fixed", "a PCP (0-7)")?)?),
                    "map" => PcpMode::Map(parse_pcp_map(w.value("map", PCP_MAP)?)?),
                    other => {
                        return Err(ControlError::BadValue {
                            what: "pcp_mode",
                            value: other.to_string(),
                            expected: PCP_MODES,
                        })
                    }
                };
                set_once(&mut o.pcp_mode, kw, v)?;
            }
            "default_pcp" => {
                let v = parse_pcp(w.value(kw, "a PCP (0-7)")?)?;
                set_once(&mut o.default_pcp, kw, v)?;
            }
            other => return Err(unexpected(other, PORT_OPTIONS)),
        }
    }
    Ok(o)
}

// ----- vlan -----

fn parse_vlan(w: &mut Words<'_>) -> Result<VlanCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "vlan",
            expected: VLAN_COMMANDS,
        });
    };
    match command("vlan", cmd, words::VLAN_COMMANDS, VLAN_COMMANDS)? {
        cmd @ ("add" | "delete") => {
            let add = cmd == "add";
            let (mut vids, mut dev, mut pvid, mut untagged) = (None, None, None, None);
            let mut target = None;
            let (table, expected) = if add {
                (words::VLAN_ADD, "vid, dev, pvid, untagged, self or master")
            } else {
                (words::VLAN_DEL, "vid, dev, self or master")
            };
            while let Some(kw) = w.next_kw(table, expected)? {
                match kw {
                    "vid" => {
                        let r = parse_vid_range(w.value(kw, "V or V-V2")?)?;
                        set_once(&mut vids, kw, r)?;
                    }
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "pvid" if add => set_once(&mut pvid, kw, true)?,
                    "untagged" if add => set_once(&mut untagged, kw, true)?,
                    "self" => set_once(&mut target, "self/master", true)?,
                    "master" => set_once(&mut target, "self/master", false)?,
                    other => return Err(unexpected(other, expected)),
                }
            }
            let vids = vids.ok_or(ControlError::MissingArgument {
                what: "\"vid V[-V2]\"",
            })?;
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev NAME\"",
                })?
                .to_string();
            let self_ = target.unwrap_or(false);
            Ok(if add {
                VlanCommand::Add {
                    dev,
                    vids,
                    pvid: pvid.is_some(),
                    untagged: untagged.is_some(),
                    self_,
                }
            } else {
                VlanCommand::Del { dev, vids, self_ }
            })
        }
        "map" => parse_vlan_map(w),
        "set" => {
            let (mut vids, mut dev, mut role, mut self_) = (None, None, None, None);
            let (mut limit, mut violation) = (None, None);
            let expected = "vid, dev, pvlan, fdb_max_learned, violation or self";
            while let Some(kw) = w.next_kw(words::VLAN_SET, expected)? {
                match kw {
                    "vid" => {
                        let r = parse_vid_range(w.value(kw, "V or V-V2")?)?;
                        set_once(&mut vids, kw, r)?;
                    }
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "self" => set_once(&mut self_, kw, true)?,
                    "pvlan" => {
                        let r = match w.value(kw, PVLAN_ROLES)? {
                            "promiscuous" => Some(PvlanRole::Promiscuous),
                            "isolated" => Some(PvlanRole::Isolated),
                            "none" => None,
                            "community" => {
                                let n = w.value("community", "a community number")?;
                                Some(PvlanRole::Community(parse_uint(
                                    "community",
                                    n,
                                    65000,
                                    "0-65000",
                                )?
                                    as u16))
                            }
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "pvlan",
                                    value: other.to_string(),
                                    expected: PVLAN_ROLES,
                                })
                            }
                        };
                        set_once(&mut role, kw, r)?;
                    }
                    "fdb_max_learned" => {
                        let v = w.value(kw, "a number, 0 for no limit")?;
                        let n = parse_uint("fdb_max_learned", v, 0x00ff_ffff, "0-16777215")?;
                        set_once(&mut limit, kw, n as u32)?;
                    }
                    "violation" => {
                        let v = match w.value(kw, VIOLATIONS)? {
                            "protect" => Violation::Protect,
                            "restrict" => Violation::Restrict,
                            "shutdown" => Violation::Shutdown,
                            other => {
                                return Err(ControlError::BadValue {
                                    what: "violation",
                                    value: other.to_string(),
                                    expected: VIOLATIONS,
                                })
                            }
                        };
                        set_once(&mut violation, kw, v)?;
                    }
                    other => return Err(unexpected(other, expected)),
                }
            }
            if violation.is_some() && limit.is_none() {
                return Err(ControlError::MissingArgument {
                    what: "\"fdb_max_learned N\" with \"violation\"",
                });
            }
            if role.is_none() && limit.is_none() {
                return Err(ControlError::MissingArgument {
                    what: "\"pvlan ROLE\" or \"fdb_max_learned N\"",
                });
            }
            Ok(VlanCommand::Set {
                dev: dev
                    .ok_or(ControlError::MissingArgument {
                        what: "\"dev NAME\"",
                    })?
                    .to_string(),
                vids: vids.ok_or(ControlError::MissingArgument {
                    what: "\"vid V[-V2]\"",
                })?,
                pvlan: role,
                limit: limit.map(|n| (n, violation.unwrap_or_default())),
                self_: self_.is_some(),
            })
        }
        // show, lst, list
        _ => {
            let (mut dev, mut vid) = (None, None);
            while let Some(kw) = w.next_kw(words::VLAN_SHOW, "dev or vid")? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?.to_string())?,
                    "vid" => set_once(&mut vid, kw, parse_vid(w.value(kw, "a vid")?)?)?,
                    other => return Err(unexpected(other, "dev or vid")),
                }
            }
            Ok(VlanCommand::Show { dev, vid })
        }
    }
}

// ----- fdb -----

fn parse_fdb(w: &mut Words<'_>) -> Result<FdbCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "fdb",
            expected: FDB_COMMANDS,
        });
    };
    match command("fdb", cmd, words::FDB_COMMANDS, FDB_COMMANDS)? {
        cmd @ ("add" | "replace" | "delete") => {
            let mac_word = w.next().ok_or(ControlError::MissingArgument {
                what: "MAC address",
            })?;
            let mac = mac_word.parse()?;
            let (mut dev, mut vlan, mut kind, mut sticky) = (None, None, None, None);
            let (mut inner_vlan, mut extern_learn) = (None, None);
            let expected =
                "dev, vlan, inner_vlan, static, dynamic, permanent, sticky, extern_learn or master";
            while let Some(kw) = w.next_kw(words::FDB_ADD, expected)? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "vlan" => set_once(&mut vlan, kw, parse_fdb_vid(w.value(kw, "a vid")?)?)?,
                    "inner_vlan" => {
                        set_once(&mut inner_vlan, kw, parse_vid(w.value(kw, "a C-VID")?)?)?
                    }
                    "static" | "dynamic" | "permanent" | "local" => {
                        let k = match kw {
                            "static" => FdbKind::Static,
                            "dynamic" => FdbKind::Dynamic,
                            _ => FdbKind::Permanent,
                        };
                        if kind.is_some() {
                            return Err(unexpected(kw, "only one of static, dynamic, permanent"));
                        }
                        kind = Some(k);
                    }
                    "sticky" => set_once(&mut sticky, kw, true)?,
                    "extern_learn" => set_once(&mut extern_learn, kw, true)?,
                    // All qbridge FDB entries are the bridge's ("master") entries.
                    "master" => {}
                    other => return Err(unexpected(other, expected)),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev NAME\"",
                })?
                .to_string();
            if inner_vlan.is_some() && matches!(vlan, None | Some(0)) {
                return Err(ControlError::MissingArgument {
                    what: "\"vlan V\" (1-4094) with \"inner_vlan\"",
                });
            }
            Ok(match cmd {
                "add" | "replace" => FdbCommand::Add {
                    mac,
                    dev,
                    vlan,
                    inner_vlan,
                    // iproute2: neither static nor dynamic means permanent.
                    kind: kind.unwrap_or(FdbKind::Permanent),
                    sticky: sticky.is_some(),
                    replace: cmd == "replace",
                    extern_learn: extern_learn.is_some(),
                },
                _ => FdbCommand::Del {
                    mac,
                    dev,
                    vlan,
                    inner_vlan,
                },
            })
        }
        "show" | "lst" | "list" => {
            let (mut br, mut dev, mut vlan) = (None, None, None);
            while let Some(kw) = w.next_kw(words::FDB_SHOW, "br, dev or vlan")? {
                match kw {
                    "br" => set_once(&mut br, kw, w.value(kw, "a bridge name")?.to_string())?,
                    "dev" | "brport" => {
                        set_once(&mut dev, "dev", w.value(kw, "a port name")?.to_string())?
                    }
                    "vlan" => set_once(&mut vlan, kw, parse_vid(w.value(kw, "a vid")?)?)?,
                    other => return Err(unexpected(other, "br, dev or vlan")),
                }
            }
            Ok(FdbCommand::Show { br, dev, vlan })
        }
        // flush
        _ => parse_fdb_flush(w),
    }
}

/// `fdb flush dev NAME [vlan V] [KIND AND FLAG WORDS]`: bridge/fdb.c `fdb_flush`. Each kind
/// word narrows the kinds flushed (`static` and `dynamic` together select nothing and are
/// refused); without one, dynamic and static entries go, never permanent ones.
fn parse_fdb_flush(w: &mut Words<'_>) -> Result<FdbCommand, ControlError> {
    const EXPECTED: &str = "dev, vlan, [no]permanent, [no]static, [no]dynamic, [no]sticky, \
                            [no]added_by_user or [no]extern_learn";
    let (mut dev, mut vlan) = (None, None);
    // Dynamic, static, permanent: still selected; the word that last narrowed them.
    let mut kinds = [true; 3];
    let mut narrowed_by: Option<&str> = None;
    let (mut sticky, mut by_user, mut ext) = (None, None, None);
    let mut seen: Vec<&str> = Vec::new();
    while let Some(word) = w.next() {
        if words::FDB_FLUSH_UNSUPPORTED.contains(&word) {
            return Err(ControlError::NotSupported {
                word: word.to_string(),
                why: "its FDB entries have no such attribute",
            });
        }
        let kw = keyword(word, words::FDB_FLUSH, EXPECTED)?;
        if seen.contains(&kw) {
            return Err(ControlError::Duplicate(kw.to_string()));
        }
        seen.push(kw);
        let only: Option<[bool; 3]> = match kw {
            "dev" => {
                dev = Some(w.value(kw, "a bridge or port name")?);
                None
            }
            "vlan" => {
                vlan = Some(parse_vid(w.value(kw, "a vid")?)?);
                None
            }
            // Every qbridge entry is the bridge's; the device given decides what is flushed.
            "master" | "self" => None,
            "permanent" => Some([false, false, true]),
            "nopermanent" => Some([true, true, false]),
            "static" => Some([false, true, false]),
            "nostatic" => Some([true, false, true]),
            "dynamic" => Some([true, false, false]),
            "nodynamic" => Some([false, true, true]),
            "sticky" | "nosticky" => {
                set_once(&mut sticky, "[no]sticky", kw == "sticky")?;
                None
            }
            "extern_learn" | "noextern_learn" => {
                set_once(&mut ext, "[no]extern_learn", kw == "extern_learn")?;
                None
            }
            _ => {
                set_once(&mut by_user, "[no]added_by_user", kw == "added_by_user")?;
                None
            }
        };
        if let Some(only) = only {
            let next = [0, 1, 2].map(|i| kinds[i] && only[i]);
            if next == [false; 3] {
                return Err(ControlError::Contradicts {
                    word: kw.to_string(),
                    earlier: narrowed_by.unwrap_or_default().to_string(),
                });
            }
            kinds = next;
            narrowed_by = Some(kw);
        }
    }
    let dev = dev
        .ok_or(ControlError::MissingArgument {
            what: "\"dev NAME\"",
        })?
        .to_string();
    if narrowed_by.is_none() {
        kinds[2] = false;
    }
    Ok(FdbCommand::Flush {
        dev,
        vlan,
        which: FdbFlushMatch {
            dynamic: kinds[0],
            static_: kinds[1],
            permanent: kinds[2],
            sticky,
            added_by_user: by_user,
            extern_learn: ext,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, ControlError> {
        parse_line(s).map(|c| c.expect("a command"))
    }

    fn err(s: &str) -> String {
        p(s).unwrap_err().to_string()
    }

    #[test]
    fn link_add_bridge_with_options() {
        let c = p(
            "link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad \
                   vlan_default_pvid 0 ageing_time 1.5 group_fwd_mask 0x4000",
        )
        .unwrap();
        assert_eq!(
            c,
            Command::Link(LinkCommand::AddBridge {
                name: "br0".into(),
                opts: BridgeOptions {
                    vlan_filtering: Some(true),
                    vlan_protocol: Some(VlanProtocol::Dot1Ad),
                    vlan_default_pvid: Some(0),
                    ageing_time_ns: Some(1_500_000_000),
                    group_fwd_mask: Some(0x4000),
                    ..Default::default()
                }
            })
        );
    }

    #[test]
    fn dev_may_be_omitted() {
        assert_eq!(
            p("link set p1 learning off").unwrap(),
            p("link set dev p1 learning off").unwrap()
        );
        assert_eq!(p("link del p1").unwrap(), p("link del dev p1").unwrap());
        assert_eq!(p("link show p1").unwrap(), p("link show dev p1").unwrap());
    }

    #[test]
    fn port_options() {
        let c =
            p("link set dev p1 master br0 down hairpin on envhdr len auto tpid 0x9100 mtu 9000")
                .unwrap();
        let Command::Link(LinkCommand::SetPort { dev, opts }) = c else {
            panic!()
        };
        assert_eq!(dev, "p1");
        assert_eq!(opts.master, Some(MasterChange::Set("br0".into())));
        assert_eq!(opts.up, Some(false));
        assert_eq!(opts.hairpin, Some(true));
        assert_eq!(opts.envhdr_len, Some(None));
        assert_eq!(opts.tpid, Some(Some(Tpid(0x9100))));
        assert_eq!(opts.mtu, Some(9000));
    }

    #[test]
    fn backends() {
        assert_eq!(
            p("link add p1 type afpacket dev eth0").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "p1".into(),
                spec: PortSpec::AfPacket {
                    dev: "eth0".into(),
                    qdisc_bypass: true,
                    ring_frames: None
                },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            p("link add p1 type afpacket qdisc_bypass off dev eth0").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "p1".into(),
                spec: PortSpec::AfPacket {
                    dev: "eth0".into(),
                    qdisc_bypass: false,
                    ring_frames: None
                },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            p("link add p2 type tap netns ns1").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "p2".into(),
                spec: PortSpec::Tap {
                    ifname: None,
                    netns: Some("ns1".into())
                },
                index: None,
                peer_index: None,
            })
        );
    }

    #[test]
    fn stacked_devices() {
        let Command::Link(LinkCommand::AddPort { name, spec, .. }) =
            p("link add link eth0.100 name eth0.100.10 type vlan protocol 802.1Q id 10").unwrap()
        else {
            panic!("not a port")
        };
        assert_eq!(name, "eth0.100.10");
        assert_eq!(
            spec,
            PortSpec::Vlan {
                link: "eth0.100".into(),
                protocol: Tpid(0x8100),
                id: 10,
                netns: None,
                address: None,
            }
        );
        // ip-link(8) word orders: name before link, `name` omitted, 802.1ad, a raw TPID.
        for line in [
            "link add eth0.100 link eth0 type vlan protocol 802.1ad id 100",
            "link add link eth0 eth0.100 type vlan protocol 802.1ad id 100",
        ] {
            let Command::Link(LinkCommand::AddPort { name, spec, .. }) = p(line).unwrap() else {
                panic!("{line}")
            };
            assert_eq!(name, "eth0.100", "{line}");
            assert!(matches!(
                spec,
                PortSpec::Vlan {
                    protocol: Tpid(0x88a8),
                    id: 100,
                    ..
                }
            ));
        }
        let Command::Link(LinkCommand::AddPort { spec, .. }) =
            p("link add link eth0 name x type vlan protocol 0x9100 id 7 netns h1 address 02:00:00:00:00:09")
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            spec,
            PortSpec::Vlan {
                link: "eth0".into(),
                protocol: Tpid(0x9100),
                id: 7,
                netns: Some("h1".into()),
                address: Some("02:00:00:00:00:09".parse().unwrap()),
            }
        );
        let Command::Link(LinkCommand::AddPort { spec, .. }) =
            p("link add link eth0 name mv1 type macvlan mode vepa").unwrap()
        else {
            panic!()
        };
        assert!(matches!(
            spec,
            PortSpec::Macvlan {
                mode: MacvlanMode::Vepa,
                ..
            }
        ));
        assert_eq!(
            err("link add link eth0 name x type vlan"),
            "missing \"id VID\" for type vlan"
        );
        assert_eq!(
            err("link add link eth0 name x type macvlan mode hub"),
            "invalid macvlan mode \"hub\" (expected private, vepa, bridge or passthru)"
        );
        assert_eq!(
            err("link add link eth0 name x type vlan id 10 mode vepa"),
            "unexpected \"mode\" (expected protocol, id, netns or address)"
        );
        assert_eq!(
            err("link add x type vlan id 10"),
            "missing \"link LOWER\" (the device to stack on) before the name"
        );
        assert_eq!(
            err("link add link eth0 name x type tap"),
            "invalid link type with \"link LOWER\" \"tap\" (expected vlan or macvlan)"
        );
        assert_eq!(
            err("link add link eth0 name x type vlan protocol default id 3"),
            "invalid protocol \"default\" (expected 802.1Q, 802.1ad or 0xHHHH)"
        );
        let Command::Link(LinkCommand::SetPort { dev, opts }) =
            p("link set dev br0 up ifname br0h netns h1").unwrap()
        else {
            panic!()
        };
        assert_eq!(dev, "br0");
        assert_eq!(opts.up, Some(true));
        assert_eq!(opts.ifname.as_deref(), Some("br0h"));
        assert_eq!(opts.netns.as_deref(), Some("h1"));
    }

    #[test]
    fn vlan_and_fdb() {
        assert_eq!(
            p("vlan add dev p1 vid 10-20 untagged").unwrap(),
            Command::Vlan(VlanCommand::Add {
                dev: "p1".into(),
                vids: VidRange { start: 10, end: 20 },
                pvid: false,
                untagged: true,
                self_: false,
            })
        );
        assert_eq!(
            p("vlan add vid 10 dev br0 self pvid").unwrap(),
            Command::Vlan(VlanCommand::Add {
                dev: "br0".into(),
                vids: VidRange { start: 10, end: 10 },
                pvid: true,
                untagged: false,
                self_: true,
            })
        );
        let Command::Fdb(FdbCommand::Add {
            kind,
            sticky,
            replace,
            vlan,
            ..
        }) = p("fdb add 02:00:00:00:00:01 dev p1 vlan 10 sticky").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (kind, sticky, replace, vlan),
            (FdbKind::Permanent, true, false, Some(10))
        );
    }

    #[test]
    fn comments_and_blank_lines() {
        assert_eq!(parse_line("   # nothing").unwrap(), None);
        assert_eq!(parse_line("").unwrap(), None);
        assert!(parse_line("link show # all").unwrap().is_some());
    }

    #[test]
    fn ageing_time_forms() {
        assert_eq!(parse_ageing_time("300").unwrap(), 300_000_000_000);
        assert_eq!(parse_ageing_time("0").unwrap(), 0);
        assert_eq!(parse_ageing_time("1.000000001").unwrap(), 1_000_000_001);
        assert!(parse_ageing_time("0.5").is_err());
        assert!(parse_ageing_time("1.").is_err());
        assert!(parse_ageing_time("-1").is_err());
        assert!(parse_ageing_time("1000001").is_err());
    }

    #[test]
    fn error_messages_name_the_word() {
        assert_eq!(err("vlan add vid 4095 dev p1"), "vid 4095 is reserved");
        assert_eq!(
            err("vlan add vid 0 dev p1"),
            "vid 0 is out of range (1-4094)"
        );
        assert_eq!(
            err("route show"),
            "unknown object \"route\" (expected link, vlan, fdb or mirror)"
        );
        // "learnin" abbreviates learning now (iproute2's matches()); a word that is no
        // keyword still lists them.
        assert_eq!(
            err("link set dev p1 frob off"),
            "unexpected \"frob\" (expected master, nomaster, up, down, learning, flood, \
             mcast_flood, bcast_flood, isolated, hairpin, mtu, envhdr, tpid, fdb_max_learned, \
             ifname, netns, address, index, vlan_mode, tag, trunks, cvlans, pcp_mode, \
             default_pcp, locked or mab)"
        );
        assert_eq!(
            err("link set dev p1 flood maybe"),
            "invalid flood \"maybe\" (expected on or off)"
        );
        assert_eq!(
            err("link set dev p1 mtu"),
            "\"mtu\" needs a value (a number of bytes)"
        );
        assert_eq!(err("vlan add vid 10"), "missing \"dev NAME\"");
        assert_eq!(
            err("link add p1 type afpacket dev eth0 qdisc_bypass maybe"),
            "invalid qdisc_bypass \"maybe\" (expected on or off)"
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 qdisc_bypass"),
            "\"qdisc_bypass\" needs a value (on or off)"
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 qdisc_bypass on qdisc_bypass off"),
            "\"qdisc_bypass\" given twice"
        );
        assert_eq!(
            p("link add p1 type afpacket dev eth0 ring_frames 4096").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "p1".into(),
                spec: PortSpec::AfPacket {
                    dev: "eth0".into(),
                    qdisc_bypass: true,
                    ring_frames: Some(4096)
                },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 ring_frames 10"),
            "ring_frames 10 is out of range (64-1048576 frames)"
        );
        assert_eq!(
            p("link add x1 type afxdp dev eth0 queues 2 mode skb zerocopy off").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "x1".into(),
                spec: PortSpec::AfXdp {
                    dev: "eth0".into(),
                    queues: 2,
                    mode: XdpAttach::Skb,
                    zerocopy: false
                },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            p("link add x1 type afxdp dev eth0").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "x1".into(),
                spec: PortSpec::AfXdp {
                    dev: "eth0".into(),
                    queues: 1,
                    mode: XdpAttach::Native,
                    zerocopy: false
                },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            err("link add x1 type afxdp dev eth0 queues 0"),
            "queues 0 is out of range (1-64)"
        );
        assert_eq!(
            err("link add x1 type afxdp dev eth0 mode fast"),
            "invalid mode \"fast\" (expected native or skb)"
        );
        assert_eq!(
            err("link add x1 type afxdp queues 2"),
            "missing \"dev IFNAME\" for type afxdp"
        );
        assert_eq!(
            p("link add pa type patch peer name pb").unwrap(),
            Command::Link(LinkCommand::AddPort {
                name: "pa".into(),
                spec: PortSpec::Patch { peer: "pb".into() },
                index: None,
                peer_index: None,
            })
        );
        assert_eq!(
            err("link add pa type patch"),
            "missing \"peer NAME\" for type patch"
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 bypass off"),
            "unexpected \"bypass\" (expected dev, qdisc_bypass or ring_frames)"
        );
        assert_eq!(
            err("link add x type veth"),
            "invalid link type \"veth\" (expected bridge, pcap, afpacket, afxdp, tap, patch, vlan or macvlan)"
        );
        assert_eq!(
            err("fdb add 02:00:00:00:00:0g dev p1"),
            "invalid MAC address \"02:00:00:00:00:0g\" (expected six hex bytes like 02:00:00:00:00:01)"
        );
        assert_eq!(err("link set p1 up down"), "\"up/down\" given twice");
        assert_eq!(
            err("link add br0 type bridge ageing_time 2000000"),
            "ageing_time 2000000 is out of range (0 or 1-1000000 seconds)"
        );
        assert_eq!(
            err("fdb"),
            "missing command after \"fdb\" (expected add, replace, del, show, flush or help)"
        );
    }

    #[test]
    fn abbreviations_as_iproute2() {
        // Objects and commands: ip/ip.c, bridge/bridge.c, do_iplink, do_vlan, do_fdb.
        assert_eq!(p("l sh p1").unwrap(), p("link show dev p1").unwrap());
        assert_eq!(p("l ls").unwrap(), p("link show").unwrap());
        assert_eq!(
            p("l s p1 le off").unwrap(),
            p("link set dev p1 learning off").unwrap()
        );
        assert_eq!(p("l d p1").unwrap(), p("link del dev p1").unwrap());
        assert_eq!(p("v s").unwrap(), p("vlan show").unwrap());
        assert_eq!(
            p("v a vid 10 dev p1").unwrap(),
            p("vlan add vid 10 dev p1").unwrap()
        );
        assert_eq!(p("f s").unwrap(), p("fdb show").unwrap());
        assert_eq!(
            p("f r 02:00:00:00:00:01 dev p1 st sti").unwrap(),
            p("fdb replace 02:00:00:00:00:01 dev p1 static sticky").unwrap()
        );
        // Keywords by matches(): link add, type bridge options, bridge_slave options.
        assert_eq!(
            p("link add br0 ty bridge v 1 vlan_p 802.1ad vlan_d 0 a 10 g 0x4000").unwrap(),
            p(
                "link add br0 type bridge vlan_filtering 1 vlan_protocol 802.1ad \
               vlan_default_pvid 0 ageing_time 10 group_fwd_mask 0x4000"
            )
            .unwrap()
        );
        assert_eq!(
            p("link set p1 ma br0 fl off mc off b off i on h on").unwrap(),
            p(
                "link set p1 master br0 flood off mcast_flood off bcast_flood off isolated on \
               hairpin on"
            )
            .unwrap()
        );
        assert_eq!(
            p("link set br0 ty bridge vlan_f 0").unwrap(),
            p("link set dev br0 type bridge vlan_filtering 0").unwrap()
        );
        assert_eq!(
            // `t` is txqueuelen in iproute2, so `type` needs `ty`.
            p("link add l eth0 name eth0.5 t vlan p 802.1ad i 5")
                .unwrap_err()
                .to_string(),
            "unexpected \"t\" (expected type)"
        );
        assert_eq!(
            p("link add l eth0 eth0.5 ty vlan p 802.1ad i 5").unwrap(),
            p("link add link eth0 name eth0.5 type vlan protocol 802.1ad id 5").unwrap()
        );
        // strcmp words are whole words only: fdb flush, mtu, vlan add's keywords.
        assert_eq!(
            err("fdb fl dev br0"),
            "unknown command \"fl\" for fdb (expected add, replace, del, show, flush or help)"
        );
        assert_eq!(
            err("link set p1 mt 9000"),
            "unexpected \"mt\" (did you mean \"mtu\"?)"
        );
        assert_eq!(
            err("vlan add vi 10 dev p1"),
            "unexpected \"vi\" (did you mean \"vid\"?)"
        );
        // Two chains with no order between them: an error naming both.
        assert_eq!(
            err("link set p1 m br0"),
            "ambiguous \"m\" (could be master or mcast_flood)"
        );
        // Not a prefix, or longer than the word.
        assert_eq!(
            err("link showx"),
            "unknown command \"showx\" for link (did you mean \"show\"?)"
        );
    }

    #[test]
    fn did_you_mean() {
        assert_eq!(
            err("link shwo"),
            "unknown command \"shwo\" for link (did you mean \"show\"?)"
        );
        assert_eq!(
            err("lnik show"),
            "unknown object \"lnik\" (did you mean \"link\"?)"
        );
        assert_eq!(
            err("link add br0 type bridge vlan_filtring 1"),
            "unexpected \"vlan_filtring\" (did you mean \"vlan_filtering\"?)"
        );
        assert_eq!(
            err("fdb flush dev br0 dynamc"),
            "unexpected \"dynamc\" (did you mean \"dynamic\"?)"
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 qdisc_bypas on"),
            "unexpected \"qdisc_bypas\" (did you mean \"qdisc_bypass\"?)"
        );
    }

    #[test]
    fn help_words() {
        assert_eq!(p("help").unwrap(), Command::Help(None));
        assert_eq!(p("h").unwrap(), Command::Help(None));
        assert_eq!(p("help vlan").unwrap(), Command::Help(Some(Object::Vlan)));
        assert_eq!(p("link help").unwrap(), Command::Help(Some(Object::Link)));
        assert_eq!(p("vlan he").unwrap(), Command::Help(Some(Object::Vlan)));
        assert_eq!(p("fdb help").unwrap(), Command::Help(Some(Object::Fdb)));
        assert_eq!(
            err("fdb help me"),
            "unexpected \"me\" (expected nothing after \"help\")"
        );
    }

    #[test]
    fn numbers_are_reported_as_typed() {
        assert_eq!(
            err("vlan add vid 99999999999999999999 dev p1"),
            "vid 99999999999999999999 is out of range (1-4094)"
        );
        assert_eq!(
            err("vlan add vid 4294967296 dev p1"),
            "vid 4294967296 is out of range (1-4094)"
        );
        assert_eq!(
            err("vlan add vid 5000 dev p1"),
            "vid 5000 is out of range (1-4094)"
        );
        assert_eq!(
            err("vlan add vid -1 dev p1"),
            "invalid vid \"-1\" (expected V or V-V2, numbers from 1 to 4094)"
        );
        assert_eq!(
            err("vlan add vid 10- dev p1"),
            "invalid vid \"10-\" (expected V or V-V2, numbers from 1 to 4094)"
        );
        assert_eq!(
            err("vlan add vid 1-2-3 dev p1"),
            "invalid vid \"1-2-3\" (expected V or V-V2, numbers from 1 to 4094)"
        );
        assert_eq!(
            err("vlan add vid 10-99999999999 dev p1"),
            "vid 99999999999 is out of range (1-4094)"
        );
        assert_eq!(
            err("fdb show vlan 99999999999999999999"),
            "vid 99999999999999999999 is out of range (1-4094)"
        );
        assert_eq!(
            err("link set p1 mtu 99999999999999999999"),
            "mtu 99999999999999999999 is out of range (68-65535)"
        );
        assert_eq!(
            err("link set p1 mtu 0x1ffffffff"),
            "mtu 0x1ffffffff is out of range (68-65535)"
        );
        assert_eq!(
            err("link set p1 envhdr len 4294967296"),
            "envhdr len 4294967296 is out of range (0-482)"
        );
        assert_eq!(
            err("link set p1 fdb_max_learned 4294967296"),
            "fdb_max_learned 4294967296 is out of range (0-4294967295)"
        );
        assert_eq!(
            err("link set br0 type bridge fdb_max_entries 99999999999"),
            "fdb_max_entries 99999999999 is out of range (1-16777216)"
        );
        assert_eq!(
            err("link set br0 type bridge group_fwd_mask 0x10000"),
            "group_fwd_mask 0x10000 is out of range (0-0xffff)"
        );
        assert_eq!(
            err("link add p1 type afpacket dev eth0 ring_frames 99999999999999999999"),
            "ring_frames 99999999999999999999 is out of range (64-1048576 frames)"
        );
        assert_eq!(
            err("link add x1 type afxdp dev eth0 queues 65536"),
            "queues 65536 is out of range (1-64)"
        );
        assert_eq!(
            err("link add link eth0 name x type vlan id 99999999999"),
            "vid 99999999999 is out of range (1-4094)"
        );
        assert_eq!(
            err("link set p1 mtu -5"),
            "invalid mtu \"-5\" (expected a number, decimal or 0x hexadecimal)"
        );
        assert_eq!(
            err("link add br0 type bridge ageing_time 99999999999999999999"),
            "ageing_time 99999999999999999999 is out of range (0 or 1-1000000 seconds)"
        );
    }

    #[test]
    fn vlan_show_vid_and_fdb_flush_words() {
        assert_eq!(
            p("vlan show dev p1 vid 10").unwrap(),
            Command::Vlan(VlanCommand::Show {
                dev: Some("p1".into()),
                vid: Some(10)
            })
        );
        let flush = |line: &str| match p(line).unwrap() {
            Command::Fdb(FdbCommand::Flush { which, .. }) => which,
            c => panic!("{c:?}"),
        };
        let kinds = |m: FdbFlushMatch| (m.dynamic, m.static_, m.permanent);
        assert_eq!(kinds(flush("fdb flush dev br0")), (true, true, false));
        assert_eq!(
            kinds(flush("fdb flush dev br0 permanent")),
            (false, false, true)
        );
        assert_eq!(
            kinds(flush("fdb flush dev br0 nostatic")),
            (true, false, true)
        );
        assert_eq!(
            kinds(flush("fdb flush dev br0 nodynamic nopermanent")),
            (false, true, false)
        );
        assert_eq!(
            kinds(flush("fdb flush dev br0 dynamic")),
            (true, false, false)
        );
        let m = flush("fdb flush dev p1 vlan 10 master nosticky added_by_user");
        assert_eq!((m.sticky, m.added_by_user), (Some(false), Some(true)));
        assert_eq!(
            err("fdb flush dev br0 static dynamic"),
            "\"dynamic\" contradicts \"static\": together they select no entries"
        );
        assert_eq!(
            err("fdb flush dev br0 static static"),
            "\"static\" given twice"
        );
        assert_eq!(
            err("fdb flush dev br0 sticky nosticky"),
            "\"[no]sticky\" given twice"
        );
        assert_eq!(
            err("fdb flush dev br0 offloaded"),
            "\"offloaded\" is not supported by qbridge (its FDB entries have no such \
             attribute)"
        );
        assert_eq!(err("fdb flush permanent"), "missing \"dev NAME\"");
    }
}
