//! Port mirroring sessions as configuration: `mirror add/del/show` on the [`Switch`], by name,
//! with ports by id ([`MirrorSession`]). The plan compiles them (`crate::plan::mirror`); the
//! frame path copies frames (`crate::path::mirror`); docs/semantics.md §M has the rules.

use super::*;
use crate::plan::mirror::MirrorCounters;
use crate::vlanmode::VidList;
use serde::Serialize;

/// A session for `mirror show`: its configuration and, if asked for, its counters.
#[derive(Clone, Debug, Serialize)]
pub struct MirrorView {
    pub name: String,
    pub src: Vec<String>,
    pub direction: MirrorDirection,
    #[serde(rename = "vid", skip_serializing_if = "Option::is_none")]
    pub vids: Option<VidList>,
    /// The destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// The destination pcap file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcap: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rspan: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<MirrorCounters>,
}

pub(crate) fn check_name(name: &str) -> Result<(), MirrorError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_MIRROR_NAME
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(MirrorError::BadName(name.to_string()))
    }
}

impl Switch {
    /// `mirror add …`: a new session, after checking everything (see [`MirrorError`]).
    pub fn mirror_add(&mut self, spec: &MirrorSpec) -> Result<(), ConfigError> {
        let name = &spec.name;
        check_name(name)?;
        if self.mirrors.iter().any(|m| m.name == *name) {
            return Err(MirrorError::Exists(name.clone()).into());
        }
        if self.mirrors.len() >= MAX_MIRRORS {
            return Err(MirrorError::TooMany(MAX_MIRRORS).into());
        }
        if spec.src.is_empty() {
            return Err(MirrorError::NoSource(name.clone()).into());
        }
        let mut src = Vec::with_capacity(spec.src.len());
        for p in &spec.src {
            let id = self.mirror_port(name, p)?;
            if src.contains(&id) {
                return Err(MirrorError::DuplicateSource {
                    name: name.clone(),
                    port: p.clone(),
                }
                .into());
            }
            src.push(id);
        }
        let dst = match &spec.dst {
            MirrorDst::Port(p) => {
                let id = self.mirror_port(name, p)?;
                if src.contains(&id) {
                    return Err(MirrorError::DstIsSource {
                        name: name.clone(),
                        port: p.clone(),
                    }
                    .into());
                }
                Dst::Port(id)
            }
            MirrorDst::Pcap(file) => {
                if !valid_pcap_file(file) {
                    return Err(MirrorError::BadPcapFile {
                        name: name.clone(),
                        file: file.clone(),
                    }
                    .into());
                }
                if let Some(other) = self
                    .mirrors
                    .iter()
                    .find(|m| m.dst == Dst::Pcap(file.clone()))
                {
                    return Err(MirrorError::PcapFileBusy {
                        name: name.clone(),
                        file: file.clone(),
                        other: other.name.clone(),
                    }
                    .into());
                }
                if spec.rspan.is_some() {
                    return Err(MirrorError::RspanToPcap(name.clone()).into());
                }
                Dst::Pcap(file.clone())
            }
        };
        if let Some(v) = spec.rspan {
            super::check_vid(v.into())?;
        }
        if let Some(list) = &spec.vids {
            for &(a, z) in list.ranges() {
                super::check_vid(a.into())?;
                super::check_vid(z.into())?;
                if z < a {
                    return Err(ConfigError::BadRange { start: a, end: z });
                }
            }
        }
        self.mirrors.push(MirrorSession {
            name: name.clone(),
            src,
            direction: spec.direction,
            vids: spec.vids.clone(),
            dst,
            rspan: spec.rspan,
            counters: MirrorCounterSet::new(self.workers() + 1),
        });
        self.mirrors_changed();
        Ok(())
    }

    /// `mirror del NAME`.
    pub fn mirror_del(&mut self, name: &str) -> Result<(), ConfigError> {
        let Some(i) = self.mirrors.iter().position(|m| m.name == name) else {
            return Err(MirrorError::NoSuchMirror(name.to_string()).into());
        };
        self.mirrors.remove(i);
        self.mirrors_changed();
        Ok(())
    }

    /// Session `name` as configured, with names (what `mirror add` was given, normalised).
    pub fn mirror_spec(&self, name: &str) -> Option<MirrorSpec> {
        let m = self.mirrors.iter().find(|m| m.name == name)?;
        Some(MirrorSpec {
            name: m.name.clone(),
            src: m.src.iter().map(|&p| self.port_name_of(p)).collect(),
            direction: m.direction,
            vids: m.vids.clone(),
            dst: match &m.dst {
                Dst::Port(p) => MirrorDst::Port(self.port_name_of(*p)),
                Dst::Pcap(f) => MirrorDst::Pcap(f.clone()),
            },
            rspan: m.rspan,
        })
    }

    /// Every session, in creation order, for `mirror show` (with counters if `with_stats`).
    pub fn mirrors(&self, with_stats: bool) -> Vec<MirrorView> {
        self.mirrors
            .iter()
            .map(|m| MirrorView {
                name: m.name.clone(),
                src: m.src.iter().map(|&p| self.port_name_of(p)).collect(),
                direction: m.direction,
                vids: m.vids.clone(),
                dst: match m.dst {
                    Dst::Port(p) => Some(self.port_name_of(p)),
                    Dst::Pcap(_) => None,
                },
                pcap: match &m.dst {
                    Dst::Pcap(f) => Some(f.clone()),
                    Dst::Port(_) => None,
                },
                rspan: m.rspan,
                stats: with_stats.then(|| m.counters.sum()),
            })
            .collect()
    }

    /// Counters of session `name`, summed over the workers.
    pub fn mirror_counters(&self, name: &str) -> Option<MirrorCounters> {
        let m = self.mirrors.iter().find(|m| m.name == name)?;
        Some(m.counters.sum())
    }

    pub(crate) fn port_name_of(&self, id: u16) -> String {
        self.port_name(PortId(id))
            .map_or_else(|| format!("#{id}"), str::to_owned)
    }

    /// Port `port` as an end of session `name`: it must exist and be a device.
    pub(crate) fn mirror_port(&self, name: &str, port: &str) -> Result<u16, ConfigError> {
        let id = self.port_id(port)?;
        let what = match self.port_role(id) {
            Role::Device => return Ok(id.0),
            Role::Host { .. } => "bridge's host port",
            Role::Vlan { .. } => "vlan device",
            Role::Macvlan { .. } => "macvlan endpoint",
        };
        Err(MirrorError::NotADevice {
            name: name.to_string(),
            port: port.to_string(),
            what,
        }
        .into())
    }

    /// Port `id` is being deleted: it leaves every session's sources; a session left without
    /// a source, or whose destination it is, is deleted (its pcap file, if any, is closed).
    /// Returns the names of the sessions deleted.
    pub(crate) fn mirror_port_gone(&mut self, id: PortId) -> Vec<String> {
        if self.mirrors.is_empty() {
            return Vec::new();
        }
        let mut gone = Vec::new();
        self.mirrors.retain_mut(|m| {
            m.src.retain(|&p| p != id.0);
            let keep = !m.src.is_empty() && m.dst != Dst::Port(id.0);
            if !keep {
                gone.push(m.name.clone());
            }
            keep
        });
        self.mirrors_changed();
        gone
    }
}
