//! AF_PACKET receive filters, on the control thread: what each port must receive
//! ([`Engine::rx_filter`]: promiscuous when its bridge learns or floods, else the unicast
//! addresses behind the bridge's other ports and those of the devices stacked on it), and
//! changing a port's filter in place through the handle its sockets share
//! ([`Engine::change_filter`]: nothing reopened, no frame lost).

use super::Engine;
use crate::shared::RxFilter;
use qbridge_bridge::{FdbFilter, FdbKind, MacvlanMode, PortId, Role};

/// Most unicast addresses an AF_PACKET port's receive filter holds; with more, the port goes
/// promiscuous (see `rx_filter`).
pub const UNICAST_FILTER_MAX: usize = 4096;

impl Engine {
    /// Changes AF_PACKET port `id`'s receive filter in place: promiscuous mode on or off, and
    /// one membership added or dropped per changed unicast address, through the handle its
    /// sockets share — nothing is reopened, no frame is lost.
    pub(super) fn change_filter(&mut self, id: u16, filter: RxFilter, warnings: &mut Vec<String>) {
        let Some(Some(slot)) = self.slots.get_mut(id as usize) else {
            return;
        };
        let Some(h) = slot.filter_handle.clone() else {
            return;
        };
        let unicast: &[[u8; 6]] = if filter.promisc { &[] } else { &filter.unicast };
        // Promiscuous first when turning it on, last when turning it off: the port never
        // accepts less than either filter in between.
        let r = if filter.promisc {
            h.set_promisc(true).and_then(|()| h.set_unicast(unicast))
        } else {
            h.set_unicast(unicast)
                .and_then(|c| h.set_promisc(false).map(|()| c))
        };
        match r {
            Ok((added, removed)) => {
                slot.clear_warning("filter");
                tracing::debug!(
                    "port {}: receive filter now {} ({added} unicast addresses added, {removed} \
                     removed)",
                    slot.name,
                    if filter.promisc {
                        "promiscuous".to_string()
                    } else {
                        format!("{} unicast addresses", filter.unicast.len())
                    }
                );
                slot.status.promisc = Some(filter.promisc);
                slot.filter = Some(filter);
            }
            Err(e) => {
                let msg = format!("port {}: cannot change the receive filter: {e}", slot.name);
                slot.warn_once("filter", msg, warnings);
                // Known state unknown: make the next command try again.
                slot.filter = None;
            }
        }
    }

    /// What port `id` must receive. Promiscuous when it learns or floods, or when another
    /// port of its bridge learns or floods (then frames for addresses behind that port, or for
    /// unknown addresses, must come in here); otherwise only the unicast addresses of the
    /// bridge's FDB entries on other ports (besides broadcast, multicast and the interface's
    /// own address, which the kernel always delivers) — up to [`UNICAST_FILTER_MAX`] of them,
    /// promiscuous beyond.
    ///
    /// Devices stacked on the port add their host-side addresses (a VLAN device's, a macvlan
    /// endpoint's: seeds S6, no promiscuous mode for sub-interfaces); one that is a bridge port,
    /// or a passthru macvlan, makes the port promiscuous.
    pub(super) fn rx_filter(&self, id: PortId) -> RxFilter {
        let mut f = self.bridge_rx_filter(id);
        let sw = self.session.switch();
        if f.promisc || !sw.has_stacked(id) {
            return f;
        }
        let mut todo = sw.stacked_on(id);
        while let Some(u) = todo.pop() {
            let passthru = matches!(
                sw.port_role(u),
                Role::Macvlan {
                    mode: MacvlanMode::Passthru,
                    ..
                }
            );
            if passthru || sw.port_master(u).is_some() {
                return RxFilter {
                    promisc: true,
                    unicast: Vec::new(),
                };
            }
            if let Some(m) = sw.port_mac(u) {
                f.unicast.push(m.0);
            }
            todo.extend(sw.stacked_on(u));
        }
        f.unicast.sort_unstable();
        f.unicast.dedup();
        if f.unicast.len() > UNICAST_FILTER_MAX {
            f = RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        f
    }

    /// [`Engine::rx_filter`] for the port's own bridge.
    fn bridge_rx_filter(&self, id: PortId) -> RxFilter {
        let sw = self.session.switch();
        let Some(bid) = sw.port_master(id) else {
            return RxFilter {
                promisc: false,
                unicast: Vec::new(),
            };
        };
        let me = sw.port_settings(id);
        let needs = me.learning
            || me.flood
            || sw.bridge_ports(bid).any(|p| {
                let s = sw.port_settings(p);
                p != id && (s.learning || s.flood)
            });
        if needs {
            return RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        let filter = FdbFilter {
            bridge: Some(sw.bridge_name(bid).to_owned()),
            dev: None,
            vlan: None,
        };
        let my_name = sw.port_name(id).unwrap_or_default();
        let mut unicast: Vec<[u8; 6]> = sw
            .fdb_entries(&filter)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.ifname != my_name && e.kind != FdbKind::Permanent)
            .map(|e| e.mac.0)
            .collect();
        unicast.sort_unstable();
        unicast.dedup();
        if unicast.len() > UNICAST_FILTER_MAX {
            // As a NIC whose unicast filter overflows: every address costs the kernel a walk
            // of the device's address list, so past this many the port takes everything and
            // the bridge sorts it out (frames for nobody are dropped by the bridge then,
            // counted there, instead of as `rx_filtered`).
            return RxFilter {
                promisc: true,
                unicast: Vec::new(),
            };
        }
        RxFilter {
            promisc: false,
            unicast,
        }
    }
}
