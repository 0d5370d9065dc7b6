//! Once-a-second watches on learning, on the control thread: MAC addresses flapping between
//! ports (a forwarding loop, most likely: logged) and per-VLAN learning limits (`violation
//! restrict` logged, `violation shutdown` takes the port down as `link set dev P down` would).
//! Both read the switch's counters; neither touches a backend.

use super::{Engine, NS_PER_SEC};
use qbridge_bridge::DropReason;
use qbridge_control::{Op, OutputOptions};

/// FDB moves per second in one bridge from which a MAC address is reported as flapping.
pub const FLAP_MOVES_PER_SEC: u64 = 50;
/// At most one flapping report per bridge in this long.
const FLAP_LOG_INTERVAL_NS: u64 = 10 * NS_PER_SEC;

impl Engine {
    /// Once a second: a bridge whose learned addresses moved between ports more than
    /// [`FLAP_MOVES_PER_SEC`] times in the last second has a MAC address flapping — most
    /// likely a forwarding loop (qbridge has no STP). Logged, naming the address, VLAN and
    /// ports of the latest move, at most once per bridge every 10 s.
    pub(super) fn flap_watch(&mut self, now: u64) {
        let sw = self.session.switch();
        for (bid, bname) in sw.bridge_ids() {
            let (moves, last) = sw.fdb_moves(bid);
            let st = self.flaps.entry(bid.0).or_insert((moves, 0));
            let delta = moves.saturating_sub(st.0);
            st.0 = moves;
            if delta < FLAP_MOVES_PER_SEC || (st.1 != 0 && now - st.1 < FLAP_LOG_INTERVAL_NS) {
                continue;
            }
            st.1 = now;
            if let Some((m, from, to)) = last {
                tracing::warn!(
                    "bridge {bname}: MAC {} in VLAN {} is flapping between ports {from} and \
                     {to} ({delta} address moves in the last second): a forwarding loop? \
                     (qbridge runs no STP)",
                    m.mac,
                    m.vid
                );
            }
        }
    }

    /// Per-VLAN learning limits (`docs/semantics.md` §L): `violation restrict` drops are
    /// logged at most once per 10 s per port; a `violation shutdown` drop takes the port down
    /// (`link set dev P down`, as an operator would), until `link set dev P up`.
    pub(super) fn mac_limit_watch(&mut self, now: u64) {
        let sw = self.session.switch();
        let mut shut = Vec::new();
        for (id, name) in sw.port_ids() {
            let c = sw.port_counters(id);
            let restrict = c.drops[DropReason::MacLimitRestrict as usize];
            let shutdown = c.drops[DropReason::MacLimitShutdown as usize];
            let st = self
                .mac_limits
                .entry(name.to_owned())
                .or_insert((restrict, shutdown, 0));
            // A port deleted and made again under the same name starts from zero.
            if restrict < st.0 || shutdown < st.1 {
                *st = (restrict, shutdown, 0);
            }
            if restrict > st.0 && (st.2 == 0 || now - st.2 >= FLAP_LOG_INTERVAL_NS) {
                tracing::warn!(
                    "port {name}: {} frames from new sources over its fdb_max_learned in a VLAN \
                     dropped (violation restrict; mac_limit_restrict {restrict})",
                    restrict - st.0
                );
                st.0 = restrict;
                st.2 = now;
            }
            if shutdown > st.1 {
                st.1 = shutdown;
                if sw.port_settings(id).up {
                    shut.push(name.to_owned());
                }
            }
        }
        self.mac_limits.retain(|n, _| sw.port_id(n).is_ok());
        for name in shut {
            tracing::warn!(
                "port {name}: a new source over its fdb_max_learned in a VLAN (violation \
                 shutdown): port taken down; 'link set dev {name} up' brings it back"
            );
            let op = Op::Command {
                out: OutputOptions::default(),
                words: vec![
                    "link".into(),
                    "set".into(),
                    "dev".into(),
                    name,
                    "down".into(),
                ],
            };
            let r = self.execute(op);
            if let Some(e) = r.error {
                tracing::error!("violation shutdown: {e}");
            }
        }
    }
}
