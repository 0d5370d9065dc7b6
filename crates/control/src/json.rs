//! The JSON of the show commands as another program reads it: owned, deserializable structs
//! of `link show -j`, `fdb show -j`, `vlan tunnelshow -j` and `vni show -j`, holding the keys
//! those programs need (qbridge-cni, qbridge-evpn) rather than every key the renderers
//! write. The renderers (`render/`, [`crate::vxlan`]) write borrowed views; these read them
//! back, and `tests/json_read.rs` runs the renderers' output through them, so a renamed key
//! fails there, not in a pod's or a peer's setup.
//!
//! Reading is lenient as a client must be across versions: unknown keys are ignored, a
//! missing optional key takes its default, and [`objects`] skips an object that does not
//! read (one without a key it cannot do without: a link's `ifname`, an entry's `mac` and
//! `ifname`, a bridge's `vlan_filtering`, a run's `vlan` and `tunid`, a range's `vni`)
//! instead of failing the whole answer. Imports nothing of the crate.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// The objects of a show command's JSON answer: each element of the array that reads as a
/// `T` (the others are skipped); a lone object is read as a one-element answer. `Err` only
/// when `text` is not JSON.
pub fn objects<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, serde_json::Error> {
    let v: Value = serde_json::from_str(text)?;
    Ok(match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| serde_json::from_value(i).ok())
            .collect(),
        v @ Value::Object(_) => serde_json::from_value(v).into_iter().collect(),
        _ => Vec::new(),
    })
}

/// One `link show -j` object: a bridge or a port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Link {
    pub ifname: String,
    /// `bridge`, or the port's backend kind (`afpacket`, `vxlan`, …).
    #[serde(default)]
    pub kind: String,
    /// The bridge a port is in.
    pub master: Option<String>,
    /// A port's MTU.
    pub mtu: Option<u32>,
    /// A bridge's settings.
    pub bridge: Option<LinkBridge>,
    /// A port's settings.
    pub port: Option<LinkPort>,
    /// A port's backend.
    pub backend: Option<LinkBackend>,
}

/// The `bridge` object of a bridge's `link show -j` (the keys read; `BridgeSettings` has more).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LinkBridge {
    pub vlan_filtering: bool,
}

/// The `port` object of a port's `link show -j` (the keys read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LinkPort {
    #[serde(default)]
    pub up: bool,
    #[serde(default)]
    pub link_up: bool,
    /// `vlan_mode` as configured (`link set … vlan_mode`), if one was.
    pub vlan_mode: Option<VlanMode>,
    /// `hairpin on|off`.
    #[serde(default)]
    pub hairpin: bool,
    /// `isolated on|off`.
    #[serde(default)]
    pub isolated: bool,
    /// `locked on|off` (port security: only known sources send).
    #[serde(default)]
    pub locked: bool,
}

/// A port's `vlan_mode`: the words of `link set … vlan_mode MODE [tag V] [trunks LIST]
/// [cvlans LIST]`, the lists as strings (`10,20-30`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct VlanMode {
    pub mode: String,
    pub tag: Option<u16>,
    pub trunks: Option<String>,
    pub cvlans: Option<String>,
}

impl VlanMode {
    /// The words `link set` takes: `vlan_mode trunk trunks 10,20`.
    pub fn words(&self) -> String {
        let mut s = format!("vlan_mode {}", self.mode);
        if let Some(t) = self.tag {
            s += &format!(" tag {t}");
        }
        for (k, l) in [("trunks", &self.trunks), ("cvlans", &self.cvlans)] {
            if let Some(l) = l {
                s += &format!(" {k} {l}");
            }
        }
        s
    }
}

/// A port's `backend` object: `type` and the keys of the kinds read (a VXLAN port's `id` or
/// `external`, `local`; an AF_PACKET or AF_XDP port's `dev`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LinkBackend {
    #[serde(rename = "type")]
    #[serde(default)]
    pub kind: String,
    pub dev: Option<String>,
    /// A VXLAN port's VNI (`None` on an `external` one).
    pub id: Option<u32>,
    #[serde(default)]
    pub external: bool,
    /// A VXLAN port's local address.
    pub local: Option<String>,
}

/// One `fdb show -j` object: a bridge's entry, or a VXLAN port's own (`dst`, `vni`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct FdbEntry {
    pub mac: String,
    pub ifname: String,
    pub vlan: Option<u16>,
    pub inner_vlan: Option<u16>,
    /// A VXLAN port's entry: the remote VTEP.
    pub dst: Option<String>,
    /// A VXLAN port's entry: its VNI where it is not the port's `id`.
    pub vni: Option<u32>,
    /// `extern_learn`, `sticky`, `locked`, `self`.
    #[serde(default)]
    pub flags: Vec<String>,
    pub master: Option<String>,
    /// `permanent`, `static`, or empty (learned, `dynamic`, a control plane's).
    #[serde(default)]
    pub state: String,
}

impl FdbEntry {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// One port of `vlan tunnelshow -j`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PortTunnels {
    pub ifname: String,
    #[serde(default)]
    pub tunnels: Vec<Tunnel>,
}

/// One run of `vlan tunnelshow -j`: VIDs `vlan..=vlanEnd` in VNIs `tunid..=tunidEnd`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Tunnel {
    pub vlan: u16,
    #[serde(rename = "vlanEnd")]
    pub vlan_end: Option<u16>,
    pub tunid: u32,
    #[serde(rename = "tunidEnd")]
    pub tunid_end: Option<u32>,
}

/// One port of `vni show -j`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PortVnis {
    pub ifname: String,
    #[serde(default)]
    pub vnis: Vec<VniRange>,
}

/// One range of `vni show -j`: `vni..=vniEnd`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct VniRange {
    pub vni: u32,
    #[serde(rename = "vniEnd")]
    pub vni_end: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_skips_what_does_not_read() {
        let links: Vec<Link> =
            objects(r#"[{"ifname":"p1","mtu":1500,"new_key":1},{"ifname":7},{},{"ifname":"p2"}]"#)
                .unwrap();
        assert_eq!(links.len(), 2);
        assert_eq!(links[1].ifname, "p2");
        assert_eq!(links[0].ifname, "p1");
        assert_eq!(links[0].mtu, Some(1500));
        let one: Vec<Link> = objects(r#"{"ifname":"p1"}"#).unwrap();
        assert_eq!(one[0].ifname, "p1");
        assert!(objects::<Link>("3").unwrap().is_empty());
        assert!(objects::<Link>("not json").is_err());
    }

    #[test]
    fn vlan_mode_as_words() {
        let m = VlanMode {
            mode: "dot1q-tunnel".into(),
            tag: Some(100),
            trunks: None,
            cvlans: Some("0,10-20".into()),
        };
        assert_eq!(m.words(), "vlan_mode dot1q-tunnel tag 100 cvlans 0,10-20");
    }
}
