//! Writing the program's maps from a worker: a flow and the FDB entries it relies on
//! ([`install`]), and the mirrored FDB entries kept in line with the pipeline's log of
//! changes ([`follow_changes`], the workers' and the engine's).

use super::{fdb_key, flow_for, FastShared, Forwarded, Refusal};
use qbridge_bridge::FastChange;
use qbridge_fastpath::FdbEntry;
use std::sync::atomic::Ordering;

/// Brings the FDB map's mirrored entries in line with `changes` (entries that moved, changed or
/// went in the pipeline's FDB): an entry the map has is rewritten (its port now, its opening
/// from `index`) or removed; entries the map does not have stay out.
pub(crate) fn follow_changes(
    shared: &FastShared,
    changes: &[FastChange],
    index: impl Fn(u16) -> Option<u16>,
) {
    for (bridge, mac, fid, entry) in changes {
        let key = fdb_key(*bridge, mac.0, *fid);
        if !matches!(shared.writer.fdb(&key), Ok(Some(_))) {
            continue;
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
    for (k, mut e) in p.fdb {
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
    shared.installed.fetch_add(1, Ordering::Relaxed);
    shared.note_installed(p.key);
    Ok(())
}
