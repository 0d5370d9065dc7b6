//! `trace dev PORT FRAME…`: a frame described in words, or given whole in hex.
//!
//! ```text
//! trace [dev|in_port] PORT src MAC dst MAC [vlan VID [pcp N] [dei 0|1] [tpid T]]…
//!       [ethertype 0xHHHH | arp SENDER TARGET | ipv4 SRC DST | ipv6 SRC DST]
//!       [tcp SPORT DPORT | udp SPORT DPORT] [len N]
//! trace [dev|in_port] PORT hex HHHH…
//! trace live dev PORT [count N] [timeout SECONDS]
//!       [src MAC] [dst MAC] [vlan VID]… [ethertype 0xHHHH | arp | ipv4 | ipv6] [tcp | udp]
//!       [port N]
//! ```
//!
//! `trace live` explains the next frames the port receives that match the filter words (a
//! port named `live` is traced with `trace dev live …`).
//!
//! Each `vlan` adds a tag behind the ones before it (outermost first); its `pcp`, `dei` and
//! `tpid` follow it. Words are checked here; the frame is built when the command runs (the
//! outer tag's default TPID is the port's).

use super::{parse_u16, parse_uint, set_once, unexpected, Words};
use crate::command::{
    DescribedFrame, L3Spec, L4Spec, LiveFilter, TagSpec, TraceFrameSpec, TraceLiveSpec, TraceSpec,
};
use crate::error::ControlError;
use qbridge_wire::MacAddr;

const FRAME_WORDS: &str = "src, dst, vlan, pcp, dei, tpid, ethertype, arp, ipv4, ipv6, tcp, udp, \
                           len or hex";
/// The longest frame a trace builds (a 64 KB super-frame's worth).
const MAX_LEN: u64 = 65535;
/// The most tags a described frame has (far beyond any stack a port reads).
const MAX_TAGS: usize = 16;

/// `trace …`: a described frame, or `trace live …`.
pub(super) fn parse(w: &mut Words<'_>) -> Result<crate::command::Command, ControlError> {
    use crate::command::Command;
    let live = w.words.get(w.pos).is_some_and(|x| *x == "live")
        && w.words
            .get(w.pos + 1)
            .is_none_or(|x| *x == "dev" || *x == "in_port");
    if live {
        w.next();
        return parse_live(w).map(Command::TraceLive);
    }
    parse_trace(w).map(Command::Trace)
}

const LIVE_WORDS: &str =
    "count, timeout, src, dst, vlan, ethertype, arp, ipv4, ipv6, tcp, udp or port";

fn parse_live(w: &mut Words<'_>) -> Result<TraceLiveSpec, ControlError> {
    let dev = match w.next() {
        Some(kw @ ("dev" | "in_port")) => w.value(kw, "a port name")?.to_string(),
        _ => {
            return Err(ControlError::MissingArgument {
                what: "the port whose frames to trace (trace live dev PORT …)",
            })
        }
    };
    let mut count = None;
    let mut timeout = None;
    let mut f = LiveFilter::default();
    let mut l3 = None;
    while let Some(word) = w.next() {
        match word {
            "count" => {
                let v = from_one(
                    w,
                    "count",
                    "a number of frames",
                    TraceLiveSpec::MAX_COUNT,
                    "1-1000",
                )?;
                set_once(&mut count, word, v)?;
            }
            "timeout" => {
                let v = from_one(
                    w,
                    "timeout",
                    "seconds",
                    TraceLiveSpec::MAX_TIMEOUT_S,
                    "1-3600",
                )?;
                set_once(&mut timeout, word, v)?;
            }
            "src" => set_once(&mut f.src, word, mac(w.value(word, "a MAC address")?)?)?,
            "dst" => set_once(&mut f.dst, word, mac(w.value(word, "a MAC address")?)?)?,
            "vlan" | "vid" => {
                let v = tag_vid(w, word, f.vids.len())?;
                f.vids.push(v);
            }
            "ethertype" | "proto" => {
                let v = parse_u16("ethertype", w.value(word, "0xHHHH")?, "0-0xffff")?;
                set_once(&mut l3, "ethertype", v)?;
            }
            "arp" => set_once(&mut l3, word, 0x0806)?,
            "ipv4" | "ip" => set_once(&mut l3, "ipv4", 0x0800)?,
            "ipv6" => set_once(&mut l3, word, 0x86dd)?,
            "tcp" => set_once(&mut f.ip_proto, "tcp or udp", 6)?,
            "udp" => set_once(&mut f.ip_proto, "tcp or udp", 17)?,
            "port" => {
                let v = parse_u16("port", w.value(word, "a TCP or UDP port")?, "0-65535")?;
                set_once(&mut f.l4_port, word, v)?;
            }
            other => return Err(unexpected(other, LIVE_WORDS)),
        }
    }
    if f.l4_port.is_some() && f.ip_proto.is_none() {
        return Err(unexpected("port", "tcp or udp before port"));
    }
    if f.ip_proto.is_some() && !matches!(l3, None | Some(0x0800 | 0x86dd)) {
        return Err(unexpected(
            "tcp/udp",
            "ipv4 or ipv6 (or neither) with tcp or udp",
        ));
    }
    f.ethertype = l3;
    Ok(TraceLiveSpec {
        dev,
        count: count.unwrap_or(TraceLiveSpec::DEFAULT_COUNT),
        timeout_s: timeout.unwrap_or(TraceLiveSpec::DEFAULT_TIMEOUT_S),
        filter: f,
    })
}

/// The VID after `vlan` (`word`), one more tag behind `have`.
fn tag_vid(w: &mut Words<'_>, word: &str, have: usize) -> Result<u16, ControlError> {
    if have == MAX_TAGS {
        return Err(unexpected(word, "at most 16 tags"));
    }
    let v = parse_uint(
        "vlan",
        w.value(word, "a VID from 0 to 4095")?,
        4095,
        "0-4095",
    )?;
    Ok(v as u16)
}

/// The value of `word`: a whole number from 1 to `max` (`range` in words).
fn from_one(
    w: &mut Words<'_>,
    word: &'static str,
    what: &'static str,
    max: u32,
    range: &'static str,
) -> Result<u32, ControlError> {
    let v = parse_uint(word, w.value(word, what)?, u64::from(max), range)?;
    if v == 0 {
        return Err(ControlError::OutOfRange {
            what: word,
            value: "0".into(),
            range,
        });
    }
    Ok(v as u32)
}

fn parse_trace(w: &mut Words<'_>) -> Result<TraceSpec, ControlError> {
    let dev = match w.next() {
        Some(kw @ ("dev" | "in_port")) => w.value(kw, "a port name")?,
        Some(name) => name,
        None => {
            return Err(ControlError::MissingArgument {
                what: "the port the frame enters (trace dev PORT …)",
            })
        }
    }
    .to_string();
    let mut src = None;
    let mut dst = None;
    let mut tags: Vec<TagSpec> = Vec::new();
    let mut l3 = None;
    let mut l4 = None;
    let mut len = None;
    while let Some(word) = w.next() {
        match word {
            "hex" => {
                if src.is_some() || dst.is_some() || !tags.is_empty() || l3.is_some() {
                    return Err(unexpected(word, "no frame words besides hex"));
                }
                let h = w.value(word, "the frame's bytes in hex")?;
                let bytes = parse_hex(h)?;
                w.end("nothing after the hex bytes")?;
                return Ok(TraceSpec {
                    dev,
                    frame: TraceFrameSpec::Hex(bytes),
                });
            }
            "src" => set_once(&mut src, word, mac(w.value(word, "a MAC address")?)?)?,
            "dst" => set_once(&mut dst, word, mac(w.value(word, "a MAC address")?)?)?,
            "vlan" | "vid" => {
                let vid = tag_vid(w, word, tags.len())?;
                tags.push(TagSpec {
                    vid,
                    pcp: 0,
                    dei: false,
                    tpid: None,
                });
            }
            "pcp" | "dei" | "tpid" => {
                let Some(t) = tags.last_mut() else {
                    return Err(unexpected(word, "vlan VID before pcp, dei or tpid"));
                };
                let v = w.value(word, "a value")?;
                match word {
                    "pcp" => t.pcp = parse_uint("pcp", v, 7, "0-7")? as u8,
                    "dei" => t.dei = parse_uint("dei", v, 1, "0 or 1")? == 1,
                    _ => t.tpid = super::parse_tpid(v)?,
                }
            }
            "ethertype" | "proto" => {
                let v = parse_u16("ethertype", w.value(word, "0xHHHH")?, "0-0xffff")?;
                set_once(&mut l3, "ethertype", L3Spec::Ethertype(v))?;
            }
            "arp" => {
                let sender = ip4(w.value(word, "the sender's IPv4 address")?)?;
                let target = ip4(w.value(word, "the target's IPv4 address")?)?;
                set_once(&mut l3, "arp", L3Spec::Arp { sender, target })?;
            }
            "ipv4" | "ip" => {
                let src = ip4(w.value(word, "the source IPv4 address")?)?;
                let dst = ip4(w.value(word, "the destination IPv4 address")?)?;
                set_once(&mut l3, "ipv4", L3Spec::Ipv4 { src, dst })?;
            }
            "ipv6" => {
                let src = ip6(w.value(word, "the source IPv6 address")?)?;
                let dst = ip6(w.value(word, "the destination IPv6 address")?)?;
                set_once(&mut l3, "ipv6", L3Spec::Ipv6 { src, dst })?;
            }
            "tcp" | "udp" => {
                let sport = parse_u16("port", w.value(word, "the source port")?, "0-65535")?;
                let dport = parse_u16("port", w.value(word, "the destination port")?, "0-65535")?;
                let v = if word == "tcp" {
                    L4Spec::Tcp { sport, dport }
                } else {
                    L4Spec::Udp { sport, dport }
                };
                set_once(&mut l4, "tcp or udp", v)?;
            }
            "len" => {
                let v = parse_uint(
                    "len",
                    w.value(word, "the frame's length")?,
                    MAX_LEN,
                    "14-65535",
                )?;
                set_once(&mut len, word, v as u16)?;
            }
            other => return Err(unexpected(other, FRAME_WORDS)),
        }
    }
    let (Some(src), Some(dst)) = (src, dst) else {
        return Err(ControlError::MissingArgument {
            what: "src MAC and dst MAC (or hex …) to describe the frame",
        });
    };
    // No payload given: the local experimental ethertype 1 (IEEE 802), nothing behind it.
    let l3 = l3.unwrap_or(L3Spec::Ethertype(0x88b5));
    if l4.is_some() && !matches!(l3, L3Spec::Ipv4 { .. } | L3Spec::Ipv6 { .. }) {
        return Err(unexpected(
            "tcp/udp",
            "ipv4 SRC DST or ipv6 SRC DST before tcp or udp",
        ));
    }
    Ok(TraceSpec {
        dev,
        frame: TraceFrameSpec::Described(DescribedFrame {
            src,
            dst,
            tags,
            l3,
            l4: l4.unwrap_or(L4Spec::Echo),
            len,
        }),
    })
}

fn mac(s: &str) -> Result<MacAddr, ControlError> {
    s.parse().map_err(|_| ControlError::BadValue {
        what: "MAC address",
        value: s.to_string(),
        expected: "six hex bytes, such as 02:00:00:00:00:01",
    })
}

fn ip4(s: &str) -> Result<std::net::Ipv4Addr, ControlError> {
    s.parse().map_err(|_| ControlError::BadValue {
        what: "IPv4 address",
        value: s.to_string(),
        expected: "an IPv4 address, such as 10.0.0.1",
    })
}

fn ip6(s: &str) -> Result<std::net::Ipv6Addr, ControlError> {
    s.parse().map_err(|_| ControlError::BadValue {
        what: "IPv6 address",
        value: s.to_string(),
        expected: "an IPv6 address, such as 2001:db8::1",
    })
}

/// Hex bytes, optionally with `:` or `.` between them or a `0x` prefix.
fn parse_hex(s: &str) -> Result<Vec<u8>, ControlError> {
    let bad = || ControlError::BadValue {
        what: "hex",
        value: if s.chars().count() > 40 {
            format!("{}…", s.chars().take(40).collect::<String>())
        } else {
            s.to_string()
        },
        expected: "an even number of hex digits (the frame from its destination MAC on)",
    };
    let digits: String = s
        .strip_prefix("0x")
        .unwrap_or(s)
        .chars()
        .filter(|c| *c != ':' && *c != '.')
        .collect();
    if digits.is_empty() || digits.len() % 2 != 0 || !digits.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Err(bad());
    }
    if digits.len() / 2 > MAX_LEN as usize {
        return Err(bad());
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|_| bad()))
        .collect()
}
