//! A bond in `link show`: its options on the port's line, then (text with `-d`, JSON always,
//! under `bond`) the engine's view — carrier, fallback, the active aggregator, and per member
//! its LACP state: receive and mux machines, selection, actor and partner information with
//! their state bits in Open vSwitch's `lacp/show` words, collecting / distributing and the
//! protocol counters. Reads the spec and `Backends::bond_view`; knows nothing of the session.

use super::on_off;
use crate::command::BondSpec;
use qbridge_lacp::{BondView, MemberView, OnOff, PortInfo};
use serde::Serialize;
use std::fmt::Write;

/// `bond` of `link show -j`.
#[derive(Serialize)]
pub(super) struct BondJson<'a> {
    mode: &'static str,
    xmit_hash_policy: &'static str,
    lacp_rate: &'static str,
    lacp_active: &'static str,
    min_links: u16,
    miimon: u32,
    lacp_fallback: bool,
    address: String,
    carrier: OnOff,
    fallback_active: OnOff,
    active_aggregator_id: Option<u16>,
    members: Vec<MemberJson<'a>>,
}

#[derive(Serialize)]
struct MemberJson<'a> {
    name: &'a str,
    actor_state: Vec<&'static str>,
    partner_state: Vec<&'static str>,
    #[serde(flatten)]
    view: MemberView,
}

pub(super) fn bond_json<'a>(spec: &'a BondSpec, view: Option<BondView>) -> BondJson<'a> {
    let c = &spec.config;
    let (carrier, fallback_active, active_aggregator_id, views) = match view {
        Some(v) => (
            v.carrier,
            v.fallback_active,
            v.active_aggregator_id,
            v.members,
        ),
        None => (OnOff::Off, OnOff::Off, None, Vec::new()),
    };
    let members = spec
        .members
        .iter()
        .filter_map(|m| {
            let view = views
                .iter()
                .find(|v| v.id.0 == u32::from(m.port_number))?
                .clone();
            Some(MemberJson {
                name: &m.name,
                actor_state: view.actor.state.words(),
                partner_state: view.partner.state.words(),
                view,
            })
        })
        .collect();
    BondJson {
        mode: c.mode.word(),
        xmit_hash_policy: c.hash_policy.word(),
        lacp_rate: c.lacp_rate.word(),
        lacp_active: c.lacp_activity.word(),
        min_links: c.min_links,
        miimon: c.miimon_ms,
        lacp_fallback: c.fallback == qbridge_lacp::Fallback::ActiveBackup,
        address: c.system.to_string(),
        carrier,
        fallback_active,
        active_aggregator_id,
        members,
    }
}

fn word(v: OnOff) -> &'static str {
    on_off(v == OnOff::On)
}

fn info(p: &PortInfo) -> String {
    let words = p.state.words();
    format!(
        "system {},{} key {} port {},{} state {}",
        p.system_priority,
        p.system,
        p.key,
        p.port_priority,
        p.port,
        if words.is_empty() {
            "none".to_string()
        } else {
            words.join(",")
        }
    )
}

/// The `-d` lines of a bond in `link show`.
pub(super) fn bond_text(s: &mut String, spec: &BondSpec, view: Option<&BondView>) {
    let Some(v) = view else { return };
    let agg = v
        .active_aggregator_id
        .map_or_else(|| "none".to_string(), |a| a.to_string());
    let _ = writeln!(
        s,
        "    bond: carrier {} fallback_active {} active_aggregator {agg} members {}",
        word(v.carrier),
        word(v.fallback_active),
        spec.members.len()
    );
    for m in &spec.members {
        let Some(mv) = v
            .members
            .iter()
            .find(|x| x.id.0 == u32::from(m.port_number))
        else {
            continue;
        };
        let link = match mv.link {
            qbridge_lacp::Link::Down => "down".to_string(),
            qbridge_lacp::Link::Up { speed_mbps, .. } => format!("up {speed_mbps}Mb/s"),
        };
        let _ = writeln!(
            s,
            "    member {} port {} link {link} rx {:?} mux {:?} {:?} aggregator {} collecting {} \
             distributing {}",
            m.name,
            m.port_number,
            mv.rx_state,
            mv.mux_state,
            mv.selected,
            mv.aggregator_id
                .map_or_else(|| "none".to_string(), |a| a.to_string()),
            word(mv.collecting),
            word(mv.distributing),
        );
        let _ = writeln!(s, "      actor {}", info(&mv.actor));
        let _ = writeln!(s, "      partner {}", info(&mv.partner));
        let c = &mv.counters;
        let _ = writeln!(
            s,
            "      lacpdu rx {} tx {} ignored {} bad {} marker rx {} tx {} expired {} \
             defaulted {} churn actor {} partner {} link_down {}",
            c.rx_lacpdu,
            c.tx_lacpdu,
            c.rx_ignored,
            c.rx_bad_length + c.rx_unknown_subtype + c.rx_bad_version + c.rx_bad_tlv,
            c.rx_marker,
            c.tx_marker_response,
            c.expired,
            c.defaulted,
            c.actor_churn,
            c.partner_churn,
            c.link_down
        );
    }
}

/// `-s`: each member's traffic through the bond (a daemon's counters).
pub(super) fn traffic_text(
    s: &mut String,
    members: &[crate::status::BondMemberTraffic],
    drops: Option<crate::status::BondDrops>,
) {
    if let Some(d) = drops {
        let _ = writeln!(
            s,
            "    bond drops: pdu_overflow {} tx_no_member {}",
            d.pdu_overflow, d.tx_no_member
        );
    }
    for m in members {
        let _ = writeln!(
            s,
            "    member {}: RX {} bytes {} packets TX {} bytes {} packets not_collecting {} \
             pdus rx {} tx {} errors {}",
            m.name,
            m.rx_bytes,
            m.rx_frames,
            m.tx_bytes,
            m.tx_frames,
            m.rx_not_collecting,
            m.rx_pdus,
            m.tx_pdus,
            m.errors
        );
    }
}

/// Every option of a bond as `link add … type bond` words.
pub fn bond_options(c: &qbridge_lacp::BondConfig) -> String {
    format!(
        "mode {} xmit_hash_policy {} lacp_rate {} lacp_active {} min_links {} miimon {} \
         lacp_fallback {} address {}",
        c.mode.word(),
        c.hash_policy.word(),
        c.lacp_rate.word(),
        c.lacp_activity.word(),
        c.min_links,
        c.miimon_ms,
        on_off(c.fallback == qbridge_lacp::Fallback::ActiveBackup),
        c.system
    )
}
