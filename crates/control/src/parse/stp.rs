//! The spanning-tree words: the bridge options of `link add|set … type bridge` (`stp_state`,
//! `stp_mode`, `priority`, the timers, `tx_hold_count`, `max_hops`, `mst_name`,
//! `mst_revision`), the port options of `link set dev PORT` (`cost`, `priority`, `guard`,
//! `root_block`, `bpdu_filter`, `loop_guard`, `edge`, `auto_edge`, `p2p`) and the `stp`
//! object (`stp show [dev BR]`, `stp msti set|priority`). Ranges are checked here (802.1D-2004
//! table 17-1, 802.1Q table 13-5); the timer relation of 17.14 needs every timer and is
//! checked when the command runs.

use super::{command, parse_on_off, parse_vid_range, set_once, unexpected, Words, ON_OFF};
use crate::command::{BridgeOptions, PortOptions, StpCommand};
use crate::error::ControlError;
use crate::words;
use qbridge_stp::{Cost, Mode, PointToPoint};

const STP_COMMANDS: &str = "show, msti or help";

/// A number in `min..=max`, and a multiple of `step`.
fn number(
    what: &'static str,
    s: &str,
    (min, max, step): (u32, u32, u32),
    expected: &'static str,
) -> Result<u32, ControlError> {
    let bad = || ControlError::BadValue {
        what,
        value: s.to_string(),
        expected,
    };
    let v: u32 = s
        .parse()
        .ok()
        .filter(|_| s.chars().all(|c| c.is_ascii_digit()))
        .ok_or_else(bad)?;
    if v < min || v > max || v % step != 0 {
        return Err(bad());
    }
    Ok(v)
}

/// The spanning-tree word `kw` of `link add|set … type bridge` and its value.
pub(super) fn bridge_option(
    kw: &str,
    w: &mut Words<'_>,
    o: &mut BridgeOptions,
) -> Result<(), ControlError> {
    let s = &mut o.stp;
    match kw {
        "stp_state" => {
            let v = match w.value(kw, "0 or 1")? {
                "0" => false,
                "1" => true,
                other => {
                    return Err(ControlError::BadValue {
                        what: "stp_state",
                        value: other.to_string(),
                        expected: "0 or 1",
                    })
                }
            };
            set_once(&mut o.stp_state, kw, v)
        }
        "stp_mode" => {
            let v = w.value(kw, "stp, rstp or mstp")?;
            let m = match v {
                "stp" => Mode::Stp,
                "rstp" => Mode::Rstp,
                "mstp" => Mode::Mstp,
                _ => {
                    return Err(ControlError::BadValue {
                        what: "stp_mode",
                        value: v.to_string(),
                        expected: "stp, rstp or mstp",
                    })
                }
            };
            set_once(&mut s.mode, kw, m)
        }
        "priority" => {
            const E: &str = "a multiple of 4096 from 0 to 61440";
            let v = number("priority", w.value(kw, E)?, (0, 61440, 4096), E)?;
            set_once(&mut s.priority, kw, v as u16)
        }
        "hello_time" => {
            const E: &str = "seconds, 1 to 10";
            let v = number("hello_time", w.value(kw, E)?, (1, 10, 1), E)?;
            set_once(&mut s.hello_time, kw, v as u16)
        }
        "max_age" => {
            const E: &str = "seconds, 6 to 40";
            let v = number("max_age", w.value(kw, E)?, (6, 40, 1), E)?;
            set_once(&mut s.max_age, kw, v as u16)
        }
        "forward_delay" => {
            const E: &str = "seconds, 4 to 30";
            let v = number("forward_delay", w.value(kw, E)?, (4, 30, 1), E)?;
            set_once(&mut s.forward_delay, kw, v as u16)
        }
        "tx_hold_count" => {
            const E: &str = "a number from 1 to 10";
            let v = number("tx_hold_count", w.value(kw, E)?, (1, 10, 1), E)?;
            set_once(&mut s.tx_hold_count, kw, v as u16)
        }
        "max_hops" => {
            const E: &str = "a number from 6 to 40";
            let v = number("max_hops", w.value(kw, E)?, (6, 40, 1), E)?;
            set_once(&mut s.max_hops, kw, v as u8)
        }
        "mst_name" => {
            const E: &str = "a name of up to 32 bytes";
            let v = w.value(kw, E)?;
            if v.len() > 32 {
                return Err(ControlError::BadValue {
                    what: "mst_name",
                    value: v.to_string(),
                    expected: E,
                });
            }
            set_once(&mut s.mst_name, kw, v.to_string())
        }
        "mst_revision" => {
            const E: &str = "a number from 0 to 65535";
            let v = number("mst_revision", w.value(kw, E)?, (0, 65535, 1), E)?;
            set_once(&mut s.mst_revision, kw, v as u16)
        }
        other => Err(unexpected(other, "a spanning-tree option")),
    }
}

/// The spanning-tree word `kw` of `link set dev PORT` and its value.
pub(super) fn port_option(
    kw: &str,
    w: &mut Words<'_>,
    o: &mut PortOptions,
) -> Result<(), ControlError> {
    let s = &mut o.stp;
    match kw {
        "cost" => {
            const E: &str = "a path cost from 1 to 200000000, or auto";
            let v = w.value(kw, E)?;
            let c = if v == "auto" {
                Cost::Auto
            } else {
                Cost::Fixed(number("cost", v, (1, 200_000_000, 1), E)?)
            };
            set_once(&mut s.cost, kw, c)
        }
        "priority" => {
            const E: &str = "a multiple of 16 from 0 to 240";
            let v = number("priority", w.value(kw, E)?, (0, 240, 16), E)?;
            set_once(&mut s.priority, kw, v as u16)
        }
        "p2p" => {
            const E: &str = "yes, no or auto";
            let v = w.value(kw, E)?;
            let p = match v {
                "yes" | "on" => PointToPoint::Yes,
                "no" | "off" => PointToPoint::No,
                "auto" => PointToPoint::Auto,
                _ => {
                    return Err(ControlError::BadValue {
                        what: "p2p",
                        value: v.to_string(),
                        expected: E,
                    })
                }
            };
            set_once(&mut s.p2p, kw, p)
        }
        "guard" | "root_block" | "bpdu_filter" | "loop_guard" | "edge" | "auto_edge" => {
            let (slot, name) = match kw {
                "guard" => (&mut s.guard, "guard"),
                "root_block" => (&mut s.root_block, "root_block"),
                "bpdu_filter" => (&mut s.bpdu_filter, "bpdu_filter"),
                "loop_guard" => (&mut s.loop_guard, "loop_guard"),
                "edge" => (&mut s.edge, "edge"),
                _ => (&mut s.auto_edge, "auto_edge"),
            };
            let v = parse_on_off(name, w.value(kw, ON_OFF)?)?;
            set_once(slot, kw, v)
        }
        other => Err(unexpected(other, "a spanning-tree option")),
    }
}

/// `stp show [dev BR]`, `stp msti set dev BR vid V[-V2] msti M`, `stp msti priority dev BR
/// msti M priority P`, `stp msti port dev PORT msti M [priority P] [cost C|auto]`.
pub(super) fn parse_stp(w: &mut Words<'_>) -> Result<StpCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "stp",
            expected: STP_COMMANDS,
        });
    };
    match command("stp", cmd, words::STP_COMMANDS, STP_COMMANDS)? {
        "show" => {
            let dev = match w.next() {
                None => None,
                Some("dev") => Some(w.value("dev", "a bridge name")?.to_string()),
                Some(other) => return Err(unexpected(other, "dev")),
            };
            w.end("nothing after the bridge's name")?;
            Ok(StpCommand::Show { dev })
        }
        _ => parse_msti(w),
    }
}

fn parse_msti(w: &mut Words<'_>) -> Result<StpCommand, ControlError> {
    const E: &str = "set, priority or port";
    let what = w.next().ok_or(ControlError::MissingArgument {
        what: "set, priority or port after \"stp msti\"",
    })?;
    if !matches!(what, "set" | "priority" | "port") {
        return Err(unexpected(what, E));
    }
    let (mut dev, mut vids, mut msti, mut priority, mut cost) = (None, None, None, None, None);
    const WORDS: &str = "dev, vid, msti, priority or cost";
    while let Some(kw) = w.next_kw(words::STP_MSTI, WORDS)? {
        match kw {
            "dev" => set_once(&mut dev, kw, w.value(kw, "a device name")?.to_string())?,
            "vid" => set_once(&mut vids, kw, parse_vid_range(w.value(kw, "V or V-V2")?)?)?,
            "msti" => {
                const M: &str = "an MSTI from 0 to 4094";
                let v = number("msti", w.value(kw, M)?, (0, 4094, 1), M)?;
                set_once(&mut msti, kw, v as u16)?
            }
            "priority" => {
                // A bridge's (multiple of 4096) or a port's (multiple of 16): checked below.
                const P: &str = "a priority";
                let v = number("priority", w.value(kw, P)?, (0, 61440, 1), P)?;
                set_once(&mut priority, kw, v as u16)?
            }
            "cost" => {
                const C: &str = "a path cost from 1 to 200000000, or auto";
                let v = w.value(kw, C)?;
                let c = if v == "auto" {
                    Cost::Auto
                } else {
                    Cost::Fixed(number("cost", v, (1, 200_000_000, 1), C)?)
                };
                set_once(&mut cost, kw, c)?
            }
            other => return Err(unexpected(other, WORDS)),
        }
    }
    let dev = dev.ok_or(ControlError::MissingArgument { what: "dev NAME" })?;
    let msti = msti.ok_or(ControlError::MissingArgument { what: "msti M" })?;
    let no_cist = || ControlError::BadValue {
        what: "msti",
        value: "0".into(),
        expected: "an MSTI from 1 to 4094 (the CIST's are the bridge's and port's own)",
    };
    match what {
        "set" => {
            let vids = vids.ok_or(ControlError::MissingArgument { what: "vid V[-V2]" })?;
            if priority.is_some() || cost.is_some() {
                return Err(unexpected("priority", "dev, vid or msti"));
            }
            Ok(StpCommand::MstiMap { dev, vids, msti })
        }
        "priority" => {
            let priority = priority.ok_or(ControlError::MissingArgument { what: "priority P" })?;
            if vids.is_some() || cost.is_some() {
                return Err(unexpected("vid", "dev, msti or priority"));
            }
            if msti == 0 {
                return Err(no_cist());
            }
            if priority % 4096 != 0 {
                return Err(ControlError::BadValue {
                    what: "priority",
                    value: priority.to_string(),
                    expected: "a multiple of 4096 from 0 to 61440",
                });
            }
            Ok(StpCommand::MstiPriority {
                dev,
                msti,
                priority,
            })
        }
        _ => {
            if vids.is_some() {
                return Err(unexpected("vid", "dev, msti, priority or cost"));
            }
            if msti == 0 {
                return Err(no_cist());
            }
            if priority.is_none() && cost.is_none() {
                return Err(ControlError::MissingArgument {
                    what: "priority P or cost C",
                });
            }
            if let Some(p) = priority.filter(|p| p % 16 != 0 || *p > 240) {
                return Err(ControlError::BadValue {
                    what: "priority",
                    value: p.to_string(),
                    expected: "a multiple of 16 from 0 to 240",
                });
            }
            Ok(StpCommand::MstiPort {
                dev,
                msti,
                priority,
                cost,
            })
        }
    }
}
