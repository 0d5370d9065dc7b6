//! Writing the program's maps from a worker: a flow and the FDB entries it relies on
//! ([`install`]), and the mirrored FDB entries kept in line with the pipeline's log of
//! changes ([`follow_plan`], the workers' and the engine's).

use super::{fdb_key, flow_for, FastShared, Forwarded, Refusal};
use qbridge_bridge::FastChange;
use qbridge_fastpath::FdbEntry;
use std::sync::atomic::Ordering;

/// Brings the FDB map's mirrored entries in line with the plan's log of changes (entries that
/// moved, changed or went in the pipeline's FDB): an entry the map has is rewritten (its port
/// now, its opening from `index`) or removed; entries the map does not have stay out. Each
/// change is written while its bridge's FDB writer lock is held (decision 85): the map's
/// writes are then in the order of the FDB's changes,
/// whichever of the workers and the engine follows the log, so none writes an entry's older
/// state over a newer one. True when a log overflowed (the caller compares the whole map).
pub(crate) fn follow_plan(
    shared: &FastShared,
    plan: &qbridge_bridge::Plan,
    index: impl Fn(u16) -> Option<u16>,
) -> bool {
    plan.follow_fast_changes(|c| follow_change(shared, c, &index))
}

fn follow_change(shared: &FastShared, c: &FastChange, index: &impl Fn(u16) -> Option<u16>) {
    let (bridge, mac, fid, entry) = c;
    let key = fdb_key(*bridge, mac.0, *fid);
    if !matches!(shared.writer.fdb(&key), Ok(Some(_))) {
        return;
    }
    let now = entry
        .filter(|e| e.forwards)
        .and_then(|e| Some((index(e.port)?, e.seen_ns)));
    let r = match now {
        Some((port, seen)) => shared.writer.set_fdb(
            &key,
            &FdbEntry {
                port: u32::from(port),
                version: 0,
                last_seen_ns: shared.mono_time(seen),
            },
        ),
        None => shared.writer.remove_fdb(&key),
    };
    if let Err(e) = r {
        tracing::debug!("fast path: FDB map: {e}");
    }
}

/// Installs the flow of `f`, or says why not.
pub(crate) fn install(shared: &FastShared, f: &Forwarded<'_>) -> Result<(), Refusal> {
    let mut p = flow_for(f)?;
    let w = &shared.writer;
    if let Some(t) = &p.tunnel {
        p.action.out_ifindex = match w.tunnel(t) {
            Ok(Some(i)) => i,
            Ok(None) => return Err(Refusal::Map),
            Err(e) => {
                tracing::debug!("fast path: writing a VXLAN tunnel: {e}");
                return Err(Refusal::Map);
            }
        };
    }
    let mut r = Ok(());
    for (k, mut e) in p.fdb.iter().copied() {
        e.last_seen_ns = shared.mono_time(e.last_seen_ns);
        r = r.and_then(|()| w.set_fdb(&k, &e));
    }
    // A flow's mirror copies before the flow that names them (decision 80).
    if let Some(m) = &p.mirror {
        r = r.and_then(|()| w.set_mirror(&p.key, m));
    }
    r.and_then(|()| w.insert_flow(&p.key, &p.action))
        .map_err(|e| {
            tracing::debug!("fast path: installing a flow: {e}");
            Refusal::Map
        })?;
    if let Ok(mut slots) = shared.vlan_slots.lock() {
        slots.extend(p.action.hops().iter().map(|h| h.vlan_slot));
    }
    if let Ok(mut ports) = shared.counted_ports.lock() {
        for h in p.action.hops() {
            ports.insert((h.in_port & qbridge_fastpath::PORT_ID_MASK) as u16);
            ports.insert((h.out_port & qbridge_fastpath::PORT_ID_MASK) as u16);
        }
        for c in p.mirror.iter().flat_map(|m| m.copies()) {
            ports.insert((c.port & qbridge_fastpath::PORT_ID_MASK) as u16);
        }
    }
    // The entries were read from the FDB before they were written (decision 85): one that
    // changed meanwhile — a command, a move the log's followers already wrote — is checked
    // now under its FDB's writer lock and removed from the map when it no longer says the
    // same (the flows relying on it miss; the next install writes it again). A change after
    // this check is logged, and its follower writes it after.
    for (k, e) in &p.fdb {
        f.plan
            .with_fdb_entry_locked(k.bridge, qbridge_wire::MacAddr(k.mac), k.fid, |now| {
                let same = now.is_some_and(|n| {
                    n.forwards && u32::from(n.port) == e.port & qbridge_fastpath::PORT_ID_MASK
                });
                if !same {
                    if let Err(e) = w.remove_fdb(k) {
                        tracing::debug!("fast path: FDB map: {e}");
                    }
                }
            });
    }
    shared.installed.fetch_add(1, Ordering::Relaxed);
    shared.note_installed(p.key);
    Ok(())
}
