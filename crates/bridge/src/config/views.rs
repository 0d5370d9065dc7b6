//! What the control plane shows: the link, port and VLAN views (`link show`, `vlan show`) the
//! switch renders into, and [`Switch::links`].
use super::*;
use serde::Serialize;

/// A link as `link show` presents it.
#[derive(Debug, Clone, Serialize)]
pub struct LinkView {
    pub ifname: String,
    /// "bridge" or the port's backend kind ("pcap", "afpacket", "tap", …).
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// The lower port of a stacked device (`ip link`'s `eth0.100@eth0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The host-side MAC address of a stacked device or of a bridge's host port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// As `ip -j -d link show`: `{"info_kind":"vlan","info_data":{"protocol":"802.1ad","id":100}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linkinfo: Option<LinkInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<PortView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<PortCounters>,
}

/// A stacked device's kind and data, named as `ip -j -d link show` names them.
#[derive(Debug, Clone, Serialize)]
pub struct LinkInfo {
    pub info_kind: &'static str,
    pub info_data: LinkInfoData,
}

#[derive(Debug, Clone, Serialize)]
pub struct LinkInfoData {
    /// VLAN devices: "802.1Q", "802.1ad", or the TPID in hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// VLAN devices: the VID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u16>,
    /// Macvlan endpoints: the mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
}

/// A TPID as ip-link(8) names a VLAN protocol.
pub fn tpid_name(tpid: u16) -> String {
    match tpid {
        0x8100 => "802.1Q".to_string(),
        0x88a8 => "802.1ad".to_string(),
        t => format!("0x{t:04x}"),
    }
}

/// Port settings with the values in force.
#[derive(Debug, Clone, Serialize)]
pub struct PortView {
    pub id: u16,
    #[serde(flatten)]
    pub settings: PortSettings,
    pub envhdr_effective: u32,
    pub tpid_effective: String,
    pub max_frame: u32,
    /// The backend's link (carrier) state.
    pub link_up: bool,
    /// `vlan_mode` as configured, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan_mode: Option<VlanMode>,
}

/// One port's VLAN configuration, for `vlan show`.
#[derive(Debug, Clone, Serialize)]
pub struct VlanView {
    pub ifname: String,
    pub vlans: Vec<VlanEntryView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VlanEntryView {
    pub vlan: u16,
    pub flags: Vec<&'static str>,
    /// The port's private-VLAN role in this VLAN (`vlan set … pvlan`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvlan: Option<String>,
    /// The port's learning limit in this VLAN (`vlan set … fdb_max_learned`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fdb_max_learned: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
}

impl Switch {
    // ----- views -----

    /// All links (bridges first, then ports), for `link show`. A bridge's host port shows
    /// in the bridge's entry.
    pub fn links(&self, with_stats: bool) -> Vec<LinkView> {
        let mut out = Vec::new();
        for (bid, name) in self.bridge_ids() {
            let b = self.bridge(bid);
            let host = b.host.map(PortId);
            out.push(LinkView {
                ifname: name.to_string(),
                kind: "bridge".to_string(),
                master: None,
                link: None,
                address: host.and_then(|h| self.port_mac(h)).map(|m| m.to_string()),
                linkinfo: None,
                bridge: Some(b.settings.clone()),
                port: host.map(|h| self.port_view(h)),
                stats: with_stats
                    .then(|| host.map(|h| self.port(h).counters.sum()))
                    .flatten(),
            });
        }
        for (id, name) in self.port_ids() {
            let p = self.port(id);
            if let Role::Host { .. } = p.role {
                continue;
            }
            let linkinfo = match p.role {
                Role::Vlan { tpid, vid, .. } => Some(LinkInfo {
                    info_kind: "vlan",
                    info_data: LinkInfoData {
                        protocol: Some(tpid_name(tpid)),
                        id: Some(vid),
                        mode: None,
                    },
                }),
                Role::Macvlan { mode, .. } => Some(LinkInfo {
                    info_kind: "macvlan",
                    info_data: LinkInfoData {
                        protocol: None,
                        id: None,
                        mode: Some(mode.as_str()),
                    },
                }),
                Role::Device | Role::Host { .. } => None,
            };
            out.push(LinkView {
                ifname: name.to_string(),
                kind: p.kind.clone(),
                master: p.master.map(|b| self.bridge(BridgeId(b)).name.clone()),
                link: p.role.lower().map(|l| self.port(PortId(l)).name.clone()),
                address: self.port_mac(id).map(|m| m.to_string()),
                linkinfo,
                bridge: None,
                port: Some(self.port_view(id)),
                stats: with_stats.then(|| p.counters.sum()),
            });
        }
        out
    }

    pub(crate) fn port_view(&self, id: PortId) -> PortView {
        let p = self.port(id);
        PortView {
            id: id.0,
            settings: p.settings.clone(),
            envhdr_effective: self.recs.envhdr(id),
            tpid_effective: format!("0x{:04x}", p.tpid),
            max_frame: p.max_frame,
            link_up: p.link_up,
            vlan_mode: p.vlan_mode.clone(),
        }
    }
}
