//! The network configuration a runtime hands `qbridge-cni` on stdin, validated once, and the
//! qbridge words it becomes. Keys follow the reference bridge plugin and ovs-cni (`bridge`,
//! `vlan`, `vlanTrunk`/`trunk`, `mtu`, `hairpinMode`, `portIsolation`, `macspoofchk`,
//! `enabledad`, `runtimeConfig.mac`, `socket_file`) plus qbridge's own (`svid` + `cvlans`:
//! Q-in-Q; `pcp`; `locked`). The reference plugin's keys qbridge cannot honour (`isGateway`,
//! `ipMasq`, … set to true) are refused by name ([`REFUSED`]): a pod must not come up
//! without what its configuration asked for. Unknown keys are ignored, as the CNI
//! specification expects of plugins (a configuration may carry keys for other plugins of a
//! chain). docs/cni.md has the table of every reference key.

use crate::CniError;
use serde_json::Value;

/// The CNI versions this plugin speaks (`VERSION`'s `supportedVersions`).
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The reference bridge plugin's boolean keys that qbridge-cni cannot honour when true, and
/// why (the error message's tail). `false` (their default) is accepted: nothing to do.
pub const REFUSED: [(&str, &str); 7] = [
    ("isGateway", "qbridge-cni does not give the bridge an address: a qbridge bridge's own interface (link set dev BR up ifname IF) is configured by its operator, and a gateway on it is theirs to add"),
    ("isDefaultGateway", "qbridge-cni does not make the bridge a gateway; for a default route through a router of the VLAN, put {\"dst\":\"0.0.0.0/0\"} in ipam.routes"),
    ("forceAddress", "it only applies to the bridge's gateway address, which qbridge-cni does not set (isGateway)"),
    ("ipMasq", "qbridge is a layer-2 switch: no NAT; masquerade on the router of the VLAN"),
    ("promiscMode", "a qbridge bridge has no kernel device to make promiscuous (its ports already receive every frame)"),
    ("preserveDefaultVlan", "a pod's port is a member of its configured VLANs only; keeping the default VLAN as well would put VLAN 1's untagged frames in the pod"),
    ("disableContainerInterface", "the container's interface is always brought up (its addresses are set on it)"),
];

/// A port's VLAN membership, from `vlan`, `trunk`, `svid`/`cvlans`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// No VLAN key: the bridge's default PVID, untagged (as the reference bridge plugin).
    Default,
    /// `vlan` only: untagged member of V.
    Access(u16),
    /// `trunk` only: tagged member of LIST.
    Trunk(String),
    /// `vlan` and `trunk`: V untagged, LIST tagged (ovs-cni's native-untagged).
    NativeUntagged(u16, String),
    /// `svid` (+ `cvlans`): every frame from the pod gets the S-tag; C-tags kept inside.
    Tunnel { svid: u16, cvlans: Option<String> },
}

impl Membership {
    /// The `vlan_mode …` words, as `link set dev P` takes them and `link show` prints them.
    pub fn vlan_mode_words(&self) -> Option<String> {
        match self {
            Membership::Default => None,
            Membership::Access(v) => Some(format!("vlan_mode access tag {v}")),
            Membership::Trunk(l) => Some(format!("vlan_mode trunk trunks {l}")),
            Membership::NativeUntagged(v, l) => {
                Some(format!("vlan_mode native-untagged tag {v} trunks {l}"))
            }
            Membership::Tunnel { svid, cvlans: None } => {
                Some(format!("vlan_mode dot1q-tunnel tag {svid}"))
            }
            Membership::Tunnel {
                svid,
                cvlans: Some(l),
            } => Some(format!("vlan_mode dot1q-tunnel tag {svid} cvlans {l}")),
        }
    }

    /// The VLAN the pod's untagged frames belong to, if the config names it.
    pub fn untagged_vid(&self) -> Option<u16> {
        match self {
            Membership::Access(v) | Membership::NativeUntagged(v, _) => Some(*v),
            Membership::Tunnel { svid, .. } => Some(*svid),
            Membership::Default | Membership::Trunk(_) => None,
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: String,
    /// `name`: the network; GC works on this network's attachments only.
    pub name: String,
    pub bridge: String,
    pub socket: std::path::PathBuf,
    pub membership: Membership,
    pub mtu: Option<u32>,
    pub pcp: Option<u8>,
    /// `locked` or `macspoofchk`: only the pod's own MAC may send.
    pub locked: bool,
    /// `hairpinMode`: frames may go back out of the port they came in on.
    pub hairpin: bool,
    /// `portIsolation`: the port talks only to non-isolated ports (`isolated on`).
    pub isolated: bool,
    /// `enabledad`: IPv6 duplicate address detection on the pod's addresses (the reference
    /// plugin's default is off: addresses are added `nodad`).
    pub dad: bool,
    /// `runtimeConfig.mac` (or `args.cni.mac`; else `MAC=` of `CNI_ARGS`, which podman 4's
    /// `--mac-address` sets): the MAC of the pod's interface.
    pub mac: Option<String>,
    /// `dataDir`: where the plugin records each attachment's owner (one file per attachment
    /// in `DIR/NETWORK/`), so GC can release a pod that vanished without DEL. Default
    /// `/var/lib/cni/qbridge-cni` (host-local keeps its reservations beside it).
    pub data_dir: std::path::PathBuf,
    /// `ipam`, passed whole to the IPAM plugin named by its `type`.
    pub ipam_type: Option<String>,
    /// The whole configuration as read (the IPAM plugin gets it on its stdin).
    pub raw: Value,
}

/// Where attachments are recorded when the configuration has no `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/qbridge-cni";

fn bad(msg: String) -> CniError {
    CniError::new(7, msg)
}

fn vid(v: &Value, what: &str) -> Result<u16, CniError> {
    match v.as_u64() {
        Some(n @ 1..=4094) => Ok(n as u16),
        _ => Err(bad(format!(
            "{what}: {v} is not a VLAN ID (a whole number from 1 to 4094)"
        ))),
    }
}

/// `[{"id":N}|{"minID":A,"maxID":B}|N, …]` → `N,A-B` (qbridge's LIST).
fn vid_list(v: &Value, key: &str) -> Result<String, CniError> {
    let items = v.as_array().ok_or_else(|| {
        bad(format!(
            "\"{key}\" must be a list of {{\"id\":N}} or {{\"minID\":A,\"maxID\":B}}, not {v}"
        ))
    })?;
    if items.is_empty() {
        return Err(bad(format!("\"{key}\" is an empty list")));
    }
    let mut parts = Vec::new();
    for it in items {
        if it.is_number() {
            parts.push(vid(it, key)?.to_string());
            continue;
        }
        match (it.get("id"), it.get("minID"), it.get("maxID")) {
            (Some(id), None, None) => parts.push(vid(id, key)?.to_string()),
            (None, Some(a), Some(b)) => {
                let (a, b) = (vid(a, key)?, vid(b, key)?);
                if b < a {
                    return Err(bad(format!("\"{key}\": maxID {b} is below minID {a}")));
                }
                parts.push(format!("{a}-{b}"));
            }
            _ => {
                return Err(bad(format!(
                    "\"{key}\": {it} is neither {{\"id\":N}} nor {{\"minID\":A,\"maxID\":B}}"
                )))
            }
        }
    }
    Ok(parts.join(","))
}

/// `cvlans` may also hold 0 (untagged customer frames), as qbridge's `cvlans` does.
fn cvlan_list(v: &Value) -> Result<String, CniError> {
    if let Some(items) = v.as_array() {
        if items.iter().any(|i| i.as_u64() == Some(0)) {
            let rest: Vec<Value> = items
                .iter()
                .filter(|i| i.as_u64() != Some(0))
                .cloned()
                .collect();
            if rest.is_empty() {
                return Ok("0".into());
            }
            return Ok(format!("0,{}", vid_list(&Value::Array(rest), "cvlans")?));
        }
    }
    vid_list(v, "cvlans")
}

/// An optional boolean key: absent is `false`.
fn flag(raw: &Value, key: &str) -> Result<bool, CniError> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(bad(format!("{key}: {v} is not true or false"))),
    }
}

/// A unicast MAC address `aa:bb:cc:dd:ee:ff` (either case), lower-cased.
pub fn unicast_mac(v: &Value, key: &str) -> Result<String, CniError> {
    let s = v.as_str().unwrap_or_default();
    let parts: Vec<&str> = s.split(':').collect();
    let hex = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    if !hex {
        return Err(bad(format!(
            "{key}: {v} is not a MAC address (aa:bb:cc:dd:ee:ff)"
        )));
    }
    let first = u8::from_str_radix(parts[0], 16).unwrap_or(1);
    if first & 1 == 1 || parts.iter().all(|p| *p == "00") {
        return Err(bad(format!(
            "{key}: {s} is not a unicast address a pod may have"
        )));
    }
    Ok(s.to_ascii_lowercase())
}

/// A port or bridge name as qbridge takes it (1-15 bytes, no `/`, `:` or white space).
pub fn check_name(what: &str, s: &str) -> Result<(), CniError> {
    if s.is_empty()
        || s.len() > 15
        || s.chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(bad(format!(
            "{what} \"{s}\" is not an interface name (1-15 bytes, no '/', ':' or white space)"
        )));
    }
    Ok(())
}

impl NetConf {
    /// Parses and validates the configuration; `default_socket` when `socket_file` is absent.
    pub fn parse(text: &[u8], default_socket: &std::path::Path) -> Result<NetConf, CniError> {
        let raw: Value = serde_json::from_slice(text)
            .map_err(|e| CniError::new(6, format!("network configuration is not JSON: {e}")))?;
        if !raw.is_object() {
            return Err(CniError::new(
                6,
                "network configuration is not a JSON object".into(),
            ));
        }
        let s = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_owned);
        let cni_version = s("cniVersion").unwrap_or_else(|| "0.3.0".into());
        if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
            return Err(CniError::new(
                1,
                format!(
                    "cniVersion \"{cni_version}\" is not supported (supported: {})",
                    SUPPORTED_VERSIONS.join(", ")
                ),
            ));
        }
        let name = s("name").ok_or_else(|| bad("\"name\" is missing".into()))?;
        // CNI spec: a network name is [a-zA-Z0-9][a-zA-Z0-9_.-]*.
        if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(bad(format!(
                "name \"{name}\" is not a network name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)"
            )));
        }
        let bridge = s("bridge")
            .ok_or_else(|| bad("\"bridge\" is missing (the qbridge bridge to attach to)".into()))?;
        check_name("bridge", &bridge)?;
        let socket = s("socket_file")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| default_socket.to_owned());
        for (key, why) in REFUSED {
            if flag(&raw, key)? {
                return Err(bad(format!("{key}: true is not supported: {why}")));
            }
        }
        // The reference plugin's `vlan: 0` is "no VLAN".
        let vlan = match raw.get("vlan") {
            Some(v) if v.as_u64() == Some(0) => None,
            v => v.map(|v| vid(v, "vlan")).transpose()?,
        };
        let trunk = match (raw.get("trunk"), raw.get("vlanTrunk")) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "\"trunk\" and \"vlanTrunk\" are the same key (ovs-cni's and the reference plugin's words): give one".into(),
                ))
            }
            (Some(v), None) => Some(vid_list(v, "trunk")?),
            (None, Some(v)) => Some(vid_list(v, "vlanTrunk")?),
            (None, None) => None,
        };
        let svid = raw.get("svid").map(|v| vid(v, "svid")).transpose()?;
        let cvlans = raw.get("cvlans").map(cvlan_list).transpose()?;
        let membership = match (vlan, trunk, svid, cvlans) {
            (None, None, None, None) => Membership::Default,
            (Some(v), None, None, None) => Membership::Access(v),
            (None, Some(l), None, None) => Membership::Trunk(l),
            (Some(v), Some(l), None, None) => Membership::NativeUntagged(v, l),
            (None, None, Some(svid), cvlans) => Membership::Tunnel { svid, cvlans },
            (_, _, None, Some(_)) => {
                return Err(bad("\"cvlans\" needs \"svid\" (the S-VLAN the C-VLANs ride in)".into()))
            }
            (_, _, Some(_), _) => {
                return Err(bad(
                    "\"svid\" (Q-in-Q) excludes \"vlan\" and \"trunk\": a tunnel port takes every frame into its S-VLAN".into(),
                ))
            }
        };
        let mtu = match raw.get("mtu") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n @ 68..=65535) => Some(n as u32),
                _ => return Err(bad(format!("mtu: {v} is not an MTU (68 to 65535)"))),
            },
        };
        let pcp = match raw.get("pcp") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(n @ 0..=7) => Some(n as u8),
                _ => return Err(bad(format!("pcp: {v} is not a priority (0 to 7)"))),
            },
        };
        let locked = flag(&raw, "locked")?;
        let spoofchk = flag(&raw, "macspoofchk")?;
        if (locked || spoofchk) && membership.untagged_vid().is_none() {
            let key = if locked { "locked" } else { "macspoofchk" };
            return Err(bad(format!(
                "\"{key}\" needs \"vlan\" or \"svid\": the pod's address is admitted in that VLAN"
            )));
        }
        let hairpin = flag(&raw, "hairpinMode")?;
        let isolated = flag(&raw, "portIsolation")?;
        let dad = flag(&raw, "enabledad")?;
        // The runtime's `mac` capability (runtimeConfig), or CNI_ARGS-style `args.cni.mac`.
        let mac = raw
            .get("runtimeConfig")
            .and_then(|r| r.get("mac"))
            .map(|v| unicast_mac(v, "runtimeConfig.mac"))
            .or_else(|| {
                raw.get("args")
                    .and_then(|a| a.get("cni"))
                    .and_then(|c| c.get("mac"))
                    .map(|v| unicast_mac(v, "args.cni.mac"))
            })
            .transpose()?;
        let data_dir = match raw.get("dataDir") {
            None => std::path::PathBuf::from(DEFAULT_DATA_DIR),
            Some(Value::String(d)) if d.starts_with('/') => std::path::PathBuf::from(d),
            Some(v) => return Err(bad(format!("dataDir: {v} is not an absolute path"))),
        };
        let ipam_type = match raw.get("ipam") {
            None => None,
            Some(i) if i.as_object().is_some_and(|o| o.is_empty()) => None,
            Some(i) => Some(
                i.get("type")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty() && !t.contains('/'))
                    .ok_or_else(|| bad("\"ipam\" has no plugin \"type\"".into()))?
                    .to_owned(),
            ),
        };
        Ok(NetConf {
            cni_version,
            name,
            bridge,
            socket,
            membership,
            mtu,
            pcp,
            locked: locked || spoofchk,
            hairpin,
            isolated,
            dad,
            mac,
            data_dir,
            ipam_type,
            raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn p(s: &str) -> Result<NetConf, CniError> {
        NetConf::parse(s.as_bytes(), Path::new("/run/qbridge/qbridge.sock"))
    }

    #[test]
    fn membership_words() {
        let c = p(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","vlan":10}"#).unwrap();
        assert_eq!(
            c.membership.vlan_mode_words().unwrap(),
            "vlan_mode access tag 10"
        );
        let c = p(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","vlan":5,"trunk":[{"id":20},{"minID":30,"maxID":40}]}"#).unwrap();
        assert_eq!(
            c.membership.vlan_mode_words().unwrap(),
            "vlan_mode native-untagged tag 5 trunks 20,30-40"
        );
        let c = p(r#"{"cniVersion":"1.1.0","name":"n","bridge":"br0","svid":100,"cvlans":[0,{"id":10},{"minID":20,"maxID":30}]}"#).unwrap();
        assert_eq!(
            c.membership.vlan_mode_words().unwrap(),
            "vlan_mode dot1q-tunnel tag 100 cvlans 0,10,20-30"
        );
        let c = p(r#"{"cniVersion":"0.4.0","name":"n","bridge":"br0"}"#).unwrap();
        assert_eq!(c.membership, Membership::Default);
        assert_eq!(c.socket, Path::new("/run/qbridge/qbridge.sock"));
    }

    #[test]
    fn bad_configs_name_the_input() {
        let e = |s: &str| p(s).unwrap_err();
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","vlan":4095}"#).msg,
            "vlan: 4095 is not a VLAN ID (a whole number from 1 to 4094)"
        );
        assert_eq!(e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","trunk":[{"minID":40,"maxID":30}]}"#).msg,
            "\"trunk\": maxID 30 is below minID 40");
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","vlan":3,"svid":100}"#).code,
            7
        );
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","cvlans":[1]}"#).code,
            7
        );
        assert_eq!(
            e(r#"{"cniVersion":"9.9.9","name":"n","bridge":"br0"}"#).code,
            1
        );
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n"}"#).msg,
            "\"bridge\" is missing (the qbridge bridge to attach to)"
        );
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0","locked":true}"#).code,
            7
        );
        assert_eq!(e("{nope").code, 6);
        assert_eq!(
            e(r#"{"cniVersion":"1.0.0","name":"n","bridge":"a/b"}"#).code,
            7
        );
    }

    /// The reference bridge plugin's keys: what a pod needs is honoured, the rest refused by
    /// name when true, accepted (nothing to do) when false.
    #[test]
    fn reference_bridge_keys() {
        let base = r#"{"cniVersion":"1.0.0","name":"n","bridge":"br0""#;
        let with = |extra: &str| p(&format!("{base},{extra}}}"));
        let c = with(r#""vlan":10,"hairpinMode":true,"portIsolation":true,"macspoofchk":true,"enabledad":true,"runtimeConfig":{"mac":"02:AA:bb:00:00:01"}"#).unwrap();
        assert!(c.hairpin && c.isolated && c.locked && c.dad);
        assert_eq!(c.mac.as_deref(), Some("02:aa:bb:00:00:01"));
        let c = with(r#""vlan":0,"hairpinMode":false,"enabledad":false"#).unwrap();
        assert_eq!(c.membership, Membership::Default);
        assert!(!c.hairpin && !c.isolated && !c.locked && !c.dad && c.mac.is_none());
        let c = with(r#""vlanTrunk":[{"id":20},{"minID":30,"maxID":40}]"#).unwrap();
        assert_eq!(c.membership, Membership::Trunk("20,30-40".into()));
        let c = with(r#""args":{"cni":{"mac":"02:00:00:00:00:09"}}"#).unwrap();
        assert_eq!(c.mac.as_deref(), Some("02:00:00:00:00:09"));
        for (key, why) in REFUSED {
            let e = with(&format!(r#""{key}":true"#)).unwrap_err();
            assert_eq!(e.code, 7);
            assert_eq!(e.msg, format!("{key}: true is not supported: {why}"));
            assert!(with(&format!(r#""{key}":false"#)).is_ok(), "{key}: false");
        }
        // ipMasqBackend only chooses how ipMasq masquerades: nothing to do without ipMasq.
        assert!(with(r#""ipMasq":false,"ipMasqBackend":"nftables""#).is_ok());
        let e = |extra: &str| with(extra).unwrap_err();
        assert_eq!(
            e(r#""hairpinMode":"yes""#).msg,
            "hairpinMode: \"yes\" is not true or false"
        );
        assert_eq!(
            e(r#""macspoofchk":true"#).msg,
            "\"macspoofchk\" needs \"vlan\" or \"svid\": the pod's address is admitted in that VLAN"
        );
        assert_eq!(e(r#""trunk":[{"id":2}],"vlanTrunk":[{"id":2}]"#).code, 7);
        assert_eq!(
            e(r#""runtimeConfig":{"mac":"03:00:00:00:00:01"}"#).msg,
            "runtimeConfig.mac: 03:00:00:00:00:01 is not a unicast address a pod may have"
        );
        assert_eq!(
            e(r#""runtimeConfig":{"mac":"nope"}"#).msg,
            "runtimeConfig.mac: \"nope\" is not a MAC address (aa:bb:cc:dd:ee:ff)"
        );
    }
}
