//! The `mirror` object on the control side: executing `mirror add|del|show` on a switch, its
//! text and JSON output, and its lines in the running configuration. The rules are the
//! switch's (`crates/bridge/src/config/mirror.rs`, `docs/semantics.md` §M).
//!
//! Works on a [`Switch`] alone: imports neither the session nor the other output modules
//! (the session calls [`execute`], the running configuration [`running_lines`]).

use crate::command::{MirrorCommand, OutputOptions};
use crate::error::ControlError;
use qbridge_bridge::counters::drop_words;
use qbridge_bridge::{MirrorDst, MirrorSpec, MirrorView, Switch};
use std::fmt::Write;

/// `mirror add|del|show` on `sw`. With `may_exist` (`apply`), adding a session identical to
/// an existing one does nothing, and deleting one that is not there is not an error; a
/// different session under the same name is an error naming both.
pub fn execute(
    sw: &mut Switch,
    may_exist: bool,
    cmd: &MirrorCommand,
    out: OutputOptions,
) -> Result<String, ControlError> {
    match cmd {
        MirrorCommand::Add(spec) => match sw.mirror_spec(&spec.name) {
            Some(have) if may_exist && have == *spec => {}
            Some(have) if may_exist => {
                return Err(ControlError::MirrorExistsDifferent {
                    name: spec.name.clone(),
                    have: spec_words(&have),
                    want: spec_words(spec),
                })
            }
            _ => sw.mirror_add(spec)?,
        },
        MirrorCommand::Del { name } => {
            if !(may_exist && sw.mirror_spec(name).is_none()) {
                sw.mirror_del(name)?;
            }
        }
        MirrorCommand::Show { name } => return show(sw, name.as_deref(), out),
    }
    Ok(String::new())
}

/// The words after `mirror add` that recreate `spec`.
pub fn spec_words(spec: &MirrorSpec) -> String {
    let mut l = format!(
        "{} src {} direction {}",
        spec.name,
        spec.src.join(","),
        spec.direction.as_str()
    );
    if let Some(v) = &spec.vids {
        let _ = write!(l, " vid {v}");
    }
    match &spec.dst {
        // A port called "pcap" needs "dev" to be read back as a port.
        MirrorDst::Port(p) if p == "pcap" => l.push_str(" dst dev pcap"),
        MirrorDst::Port(p) => {
            let _ = write!(l, " dst {p}");
        }
        MirrorDst::Pcap(f) => {
            let _ = write!(l, " dst pcap {f}");
        }
    }
    if let Some(v) = spec.rspan {
        let _ = write!(l, " rspan {v}");
    }
    l
}

/// `mirror add …` lines of every session, in creation order (for `show running-config`).
pub fn running_lines(sw: &Switch, out: &mut String) {
    for m in sw.mirrors(false) {
        if let Some(spec) = sw.mirror_spec(&m.name) {
            let _ = writeln!(out, "mirror add {}", spec_words(&spec));
        }
    }
}

/// `mirror show [NAME]`: one line per session as `mirror add` takes it; with `-s` the copies
/// delivered and the drops by reason. JSON: an array of sessions (`name`, `src`, `direction`,
/// `vid`, `dst` or `pcap`, `rspan`, with `-s` `stats`).
pub fn show(sw: &Switch, name: Option<&str>, out: OutputOptions) -> Result<String, ControlError> {
    if let Some(n) = name {
        if sw.mirror_spec(n).is_none() {
            return Err(qbridge_bridge::ConfigError::from(
                qbridge_bridge::MirrorError::NoSuchMirror(n.to_string()),
            )
            .into());
        }
    }
    let views: Vec<MirrorView> = sw
        .mirrors(out.stats)
        .into_iter()
        .filter(|m| name.is_none_or(|n| n == m.name))
        .collect();
    if out.json {
        let mut s = if out.pretty {
            serde_json::to_string_pretty(&views)
        } else {
            serde_json::to_string(&views)
        }
        .expect("mirror views serialize");
        s.push('\n');
        return Ok(s);
    }
    let mut s = String::new();
    for m in &views {
        let Some(spec) = sw.mirror_spec(&m.name) else {
            continue;
        };
        let _ = writeln!(s, "{}", spec_words(&spec));
        if let Some(c) = &m.stats {
            let _ = writeln!(s, "    TX: {} bytes {} packets", c.bytes, c.frames);
            let drops = drop_words(&c.drops);
            let drops = if drops.is_empty() {
                "none".to_string()
            } else {
                drops.join(" ")
            };
            let _ = writeln!(s, "    drops: {drops}");
        }
    }
    Ok(s)
}
