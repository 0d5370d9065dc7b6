//! `qbridge-cni`: a CNI plugin (specification 1.0/1.1) that attaches a container to a bridge
//! of a running qbridge daemon. The runtime runs it with `CNI_COMMAND`, `CNI_CONTAINERID`,
//! `CNI_NETNS`, `CNI_IFNAME`, `CNI_PATH` set and the network configuration on stdin; it prints
//! the result (or an error object with `code` and `msg`, and exits 1). docs/cni.md.
//!
//! ADD makes a veth pair, moves one end into the container's namespace as `CNI_IFNAME`, adds
//! the other as an `afpacket` port of the configured bridge through the daemon's control
//! socket, sets its VLANs, and delegates addresses to the IPAM plugin. The host end and the
//! port are both named `qbc` + 12 hex digits of a hash of (container id, ifname), so DEL and
//! CHECK find them from the environment alone, also after a daemon restart (the daemon's state
//! file restores the port). It is a second binary of the `qbridge` package (decision 54).

mod conf;
mod ctl;
mod ipam;
mod record;
mod sys;

use conf::NetConf;
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// A CNI error: `code` (1-99 the specification's, 100+ this plugin's) and `msg`.
#[derive(Debug, Clone)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
}

impl CniError {
    pub fn new(code: u32, msg: String) -> CniError {
        CniError { code, msg }
    }
}

/// Error code for "the interface or port already exists" (ADD twice) and for CHECK finding the
/// attachment not as configured.
const CODE_CONFLICT: u32 = 100;
const CODE_CHECK: u32 = 101;

fn env(name: &str) -> Result<String, CniError> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(CniError::new(4, format!("{name} is not set"))),
    }
}

/// The host-side name of (container, ifname): `qbc` + 12 hex digits of FNV-1a 64.
fn port_name(container: &str, ifname: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in container.bytes().chain([0u8]).chain(ifname.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("qbc{:012x}", h >> 16)
}

/// The daemon's default socket, as `qbridge` finds it: `$QBRIDGE_SOCKET`, else the default
/// of the namespace the plugin runs in (the runtime's: `/run/qbridge/qbridge.sock` on a host).
fn default_socket() -> PathBuf {
    std::env::var_os("QBRIDGE_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| qbridge_io::netns::OwnNetns::current().default_socket())
}

/// `MAC=aa:bb:…` of `CNI_ARGS` (`K=V;K=V`, as the reference plugins read it; podman 4 passes
/// `--mac-address` so). The configuration's `runtimeConfig.mac` / `args.cni.mac` win.
fn mac_from_cni_args() -> Result<Option<String>, CniError> {
    let args = std::env::var("CNI_ARGS").unwrap_or_default();
    args.split(';')
        .find_map(|kv| kv.strip_prefix("MAC="))
        .map(|m| {
            conf::unicast_mac(&Value::from(m), "CNI_ARGS MAC").map_err(|e| CniError::new(4, e.msg))
        })
        .transpose()
}

/// The environment of ADD, DEL, CHECK.
struct Call {
    container: String,
    netns: Option<String>,
    ifname: String,
    host: String,
}

impl Call {
    fn from_env(need_netns: bool) -> Result<Call, CniError> {
        let container = env("CNI_CONTAINERID")?;
        if !container
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(CniError::new(
                4,
                format!("CNI_CONTAINERID \"{container}\" has characters other than letters, digits, '_', '.', '-'"),
            ));
        }
        let netns = if need_netns {
            Some(env("CNI_NETNS")?)
        } else {
            std::env::var("CNI_NETNS").ok().filter(|s| !s.is_empty())
        };
        let ifname = env("CNI_IFNAME")?;
        conf::check_name("CNI_IFNAME", &ifname).map_err(|e| CniError::new(4, e.msg))?;
        let host = port_name(&container, &ifname);
        Ok(Call {
            container,
            netns,
            ifname,
            host,
        })
    }
}

fn add(c: &NetConf, call: &Call) -> Result<Value, CniError> {
    let netns = call.netns.as_deref().unwrap_or_default();
    if !sys::netns_exists(netns) {
        return Err(CniError::new(
            3,
            format!("CNI_NETNS {netns} does not exist"),
        ));
    }
    // CNI spec, ADD: "If an interface of the requested name already exists in the container,
    // the CNI plugin MUST return with an error." Refused before anything is touched.
    if sys::link_exists(Some(netns), &call.ifname) {
        return Err(CniError::new(
            CODE_CONFLICT,
            format!(
                "interface {} already exists in {netns} (ADD twice for container {}? DEL it first)",
                call.ifname, call.container
            ),
        ));
    }
    if sys::link_exists(None, &call.host) || ctl::port(&c.socket, &call.host)?.is_some() {
        return Err(CniError::new(
            CODE_CONFLICT,
            format!(
                "{} (container {}, {}) is already attached; DEL it first",
                call.host, call.container, call.ifname
            ),
        ));
    }
    let tmp = format!("qbt{}", &call.host[3..]);
    sys::create_veth(&call.host, &tmp, netns, &call.ifname, c.mtu)?;
    let undo = |e: CniError| {
        let _ = ctl::call(&c.socket, &["link", "del", "dev", &call.host]);
        let _ = sys::delete_veth(&call.host);
        let _ = record::remove(c, &call.host);
        e
    };
    if let Some(mac) = &c.mac {
        sys::ip_in(netns, &["link", "set", "dev", &call.ifname, "address", mac]).map_err(undo)?;
    }
    sys::set_alias(&call.host, &owner(&c.name, &call.container, &call.ifname)).map_err(undo)?;
    record::write(c, &call.host, &call.container, &call.ifname).map_err(undo)?;
    attach(c, call, netns).map_err(undo)?;
    let mut result = json!({});
    if let Some(ty) = &c.ipam_type {
        result = ipam::exec(ty, "ADD", &c.raw).map_err(undo)?;
        if let Err(e) = ipam::apply(netns, &call.ifname, &result, c.dad) {
            let _ = ipam::exec(ty, "DEL", &c.raw);
            return Err(undo(e));
        }
    }
    let host_mac = sys::mac_of(None, &call.host).map_err(undo)?;
    let mac = sys::mac_of(Some(netns), &call.ifname).map_err(undo)?;
    let mut out = json!({
        "cniVersion": c.cni_version,
        "interfaces": [
            {"name": call.host, "mac": host_mac},
            {"name": call.ifname, "mac": mac, "sandbox": netns},
        ],
    });
    if let Some(ips) = result.get("ips").and_then(Value::as_array) {
        let ips: Vec<Value> = ips
            .iter()
            .map(|ip| {
                let mut ip = ip.clone();
                ip["interface"] = json!(1);
                ip
            })
            .collect();
        out["ips"] = Value::Array(ips);
    }
    for k in ["routes", "dns"] {
        if let Some(v) = result.get(k) {
            out[k] = v.clone();
        }
    }
    Ok(out)
}

/// The daemon side of ADD: the port, its bridge, VLANs, MTU, hairpin, isolation, PCP, port
/// security.
fn attach(c: &NetConf, call: &Call, netns: &str) -> Result<(), CniError> {
    let p = call.host.as_str();
    let s = &c.socket;
    ctl::must(s, &["link", "add", p, "type", "afpacket", "dev", p])?;
    ctl::must(s, &["link", "set", "dev", p, "master", &c.bridge])?;
    if let Some(words) = c.membership.vlan_mode_words() {
        let mut v = vec!["link", "set", "dev", p];
        v.extend(words.split(' '));
        ctl::must(s, &v)?;
    }
    if let Some(m) = c.mtu {
        ctl::must(s, &["link", "set", "dev", p, "mtu", &m.to_string()])?;
    }
    if c.hairpin {
        ctl::must(s, &["link", "set", "dev", p, "hairpin", "on"])?;
    }
    if c.isolated {
        ctl::must(s, &["link", "set", "dev", p, "isolated", "on"])?;
    }
    if let Some(pcp) = c.pcp {
        ctl::must(
            s,
            &["link", "set", "dev", p, "default_pcp", &pcp.to_string()],
        )?;
    }
    if c.locked {
        // Only the pod's own address may send: a static entry for it, then the lock.
        let mac = sys::mac_of(Some(netns), &call.ifname)?;
        let vid = c.membership.untagged_vid().unwrap_or(1).to_string();
        ctl::must(s, &["fdb", "add", &mac, "dev", p, "vlan", &vid, "static"])?;
        ctl::must(s, &["link", "set", "dev", p, "locked", "on"])?;
    }
    Ok(())
}

/// DEL: every step runs; a missing port, veth, namespace or address is not an error. The
/// first real failure is reported (the runtime retries DEL).
fn del(c: &NetConf, call: &Call) -> Result<(), CniError> {
    del_attachment(c, call, None)
}

/// DEL's steps for `call`; `who` runs the IPAM plugin for another attachment than the
/// environment's (GC).
fn del_attachment(c: &NetConf, call: &Call, who: Option<(&str, &str)>) -> Result<(), CniError> {
    let mut first = del_port(c, &call.host).err();
    if let Err(e) = sys::delete_veth(&call.host) {
        first.get_or_insert(e);
    }
    if let Some(ty) = &c.ipam_type {
        if let Err(e) = ipam::exec_for(ty, "DEL", &c.raw, who) {
            first.get_or_insert(e);
        }
    }
    // The record goes last, and only when everything else is gone: a DEL that failed
    // half-way is retried by the runtime, or finished by GC.
    match first {
        None => record::remove(c, &call.host),
        Some(e) => Err(e),
    }
}

/// `link del dev PORT`; a port that does not exist is success.
fn del_port(c: &NetConf, port: &str) -> Result<(), CniError> {
    match ctl::call(&c.socket, &["link", "del", "dev", port])? {
        ctl::Answer::Ok(_) => Ok(()),
        ctl::Answer::Refused(m) if m.contains("does not exist") => Ok(()),
        ctl::Answer::Refused(m) => Err(CniError::new(
            5,
            format!("qbridge link del dev {port}: {m}"),
        )),
    }
}

/// The host veth's alias: `qbridge-cni NETWORK CONTAINERID IFNAME` (no field has a space).
fn owner(network: &str, container: &str, ifname: &str) -> String {
    format!("qbridge-cni {network} {container} {ifname}")
}

/// GC (CNI 1.1): removes this network's attachments that are not in
/// `cni.dev/valid-attachments` (their port, veth and IPAM reservation; owners from the
/// attachment records, and from the host veths' aliases for attachments made before records
/// were kept), then every `qbc…` port of `bridge` whose host interface is gone and that no
/// valid attachment names.
fn gc(c: &NetConf) -> Result<(), CniError> {
    let valid: Vec<(String, String)> = c
        .raw
        .get("cni.dev/valid-attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                a.get("containerID")?.as_str()?.to_owned(),
                a.get("ifname")?.as_str()?.to_owned(),
            ))
        })
        .collect();
    let valid_ports: Vec<String> = valid.iter().map(|(c, i)| port_name(c, i)).collect();
    let mut first: Option<CniError> = None;
    // port → (container, ifname): the records, then the aliases of live veths.
    let mut owners = std::collections::BTreeMap::new();
    for (port, container, ifname) in record::list(c)? {
        owners.insert(port, (container, ifname));
    }
    let prefix = format!("qbridge-cni {} ", c.name);
    for (host, alias) in sys::veths_with_alias(&prefix)? {
        let mut f = alias[prefix.len()..].split(' ');
        if let (Some(container), Some(ifname)) = (f.next(), f.next()) {
            owners.insert(host, (container.to_owned(), ifname.to_owned()));
        }
    }
    for (host, (container, ifname)) in owners {
        if valid
            .iter()
            .any(|(vc, vi)| *vc == container && *vi == ifname)
        {
            continue;
        }
        let call = Call {
            container: container.clone(),
            netns: None,
            ifname: ifname.clone(),
            host,
        };
        if let Err(e) = del_attachment(c, &call, Some((&container, &ifname))) {
            first.get_or_insert(e);
        }
    }
    let ports = ctl::links(&ctl::must(&c.socket, &["-j", "link", "show"])?)?;
    for p in &ports {
        let (name, Some(master)) = (p.ifname.as_str(), p.master.as_deref()) else {
            continue;
        };
        if master != c.bridge
            || !name.starts_with("qbc")
            || valid_ports.iter().any(|v| v == name)
            || sys::link_exists(None, name)
        {
            continue;
        }
        if let Err(e) = del_port(c, name) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// CHECK: the port exists in the configured bridge with the configured VLAN mode, its veth
/// exists, the container's interface exists; then the IPAM plugin's CHECK.
fn check(c: &NetConf, call: &Call) -> Result<(), CniError> {
    let netns = call.netns.as_deref().unwrap_or_default();
    let fail = |m: String| Err(CniError::new(CODE_CHECK, m));
    if !sys::netns_exists(netns) || !sys::link_exists(Some(netns), &call.ifname) {
        return fail(format!("interface {} is not in {netns}", call.ifname));
    }
    if !sys::link_exists(None, &call.host) {
        return fail(format!("host interface {} does not exist", call.host));
    }
    let Some(port) = ctl::port(&c.socket, &call.host)? else {
        return fail(format!(
            "port {} does not exist in the qbridge daemon at {}",
            call.host,
            c.socket.display()
        ));
    };
    let master = port.master.as_deref().unwrap_or("");
    if master != c.bridge {
        return fail(format!(
            "port {} is in bridge \"{master}\", not \"{}\"",
            call.host, c.bridge
        ));
    }
    let flags = port.port.as_ref();
    for (key, want, have) in [
        ("hairpin", c.hairpin, flags.is_some_and(|p| p.hairpin)),
        ("isolated", c.isolated, flags.is_some_and(|p| p.isolated)),
        ("locked", c.locked, flags.is_some_and(|p| p.locked)),
    ] {
        if want != have {
            let onoff = |b: bool| if b { "on" } else { "off" };
            return fail(format!(
                "port {} has {key} {}, not {key} {}",
                call.host,
                onoff(have),
                onoff(want)
            ));
        }
    }
    if let Some(want) = c.membership.vlan_mode_words() {
        let have = port
            .port
            .as_ref()
            .and_then(|p| p.vlan_mode.as_ref())
            .map(|m| m.words());
        if have.as_deref() != Some(want.as_str()) {
            return fail(format!(
                "port {} has {}, not {want}",
                call.host,
                have.unwrap_or_else(|| "no vlan_mode".into())
            ));
        }
    }
    if let Some(m) = c.mtu {
        let have = port.mtu;
        if have != Some(m) {
            let have = have.map_or_else(|| "no mtu".to_string(), |h| format!("mtu {h}"));
            return fail(format!("port {} has {have}, not mtu {m}", call.host));
        }
    }
    // The addresses of the ADD result the runtime hands back (`prevResult`) are on the
    // interface.
    let prev_ips = c.raw.get("prevResult").and_then(|r| r.get("ips"));
    if let Some(ips) = prev_ips.and_then(Value::as_array) {
        let have = sys::ip_in(netns, &["-o", "addr", "show", "dev", &call.ifname])?;
        for ip in ips {
            let Some(addr) = ip.get("address").and_then(Value::as_str) else {
                continue;
            };
            if !have.split_whitespace().any(|w| w == addr) {
                return fail(format!(
                    "{} has no address {addr} (prevResult)",
                    call.ifname
                ));
            }
        }
    }
    if let Some(ty) = &c.ipam_type {
        ipam::exec(ty, "CHECK", &c.raw)?;
    }
    Ok(())
}

/// STATUS (CNI 1.1): ready when the daemon answers and has the bridge.
fn status(c: &NetConf) -> Result<(), CniError> {
    match ctl::port(&c.socket, &c.bridge) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(CniError::new(
            50,
            format!("the qbridge daemon has no bridge \"{}\"", c.bridge),
        )),
        Err(e) => Err(CniError::new(50, e.msg)),
    }
}

fn run(command: &str, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    if command == "VERSION" {
        return Ok(Some(json!({
            "cniVersion": "1.1.0",
            "supportedVersions": conf::SUPPORTED_VERSIONS,
        })));
    }
    let mut c = NetConf::parse(stdin, &default_socket())?;
    if c.mac.is_none() {
        c.mac = mac_from_cni_args()?;
    }
    match command {
        "ADD" => add(&c, &Call::from_env(true)?).map(Some),
        "DEL" => del(&c, &Call::from_env(false)?).map(|()| None),
        "CHECK" => check(&c, &Call::from_env(true)?).map(|()| None),
        "STATUS" => status(&c).map(|()| None),
        "GC" => gc(&c).map(|()| None),
        other => Err(CniError::new(
            4,
            format!("CNI_COMMAND \"{other}\" is not ADD, DEL, CHECK, STATUS, GC or VERSION"),
        )),
    }
}

const USAGE: &str = "qbridge-cni: a CNI plugin; run by a container runtime, not by hand.
Environment: CNI_COMMAND (ADD|DEL|CHECK|STATUS|GC|VERSION), CNI_CONTAINERID, CNI_NETNS,
CNI_IFNAME, CNI_PATH; the network configuration (JSON) on stdin. docs/cni.md.
Config keys: bridge, vlan, trunk or vlanTrunk [{\"id\":N}|{\"minID\":A,\"maxID\":B}], svid +
cvlans (Q-in-Q), mtu, pcp, locked or macspoofchk, hairpinMode, portIsolation, enabledad,
runtimeConfig.mac; isGateway, isDefaultGateway, forceAddress, ipMasq, promiscMode,
preserveDefaultVlan, disableContainerInterface only false; socket_file (default $QBRIDGE_SOCKET, else qbridge's default
for the plugin's network namespace: /run/qbridge/qbridge.sock in the host's), dataDir (default /var/lib/cni/qbridge-cni), ipam.
";

fn main() -> ExitCode {
    let Ok(command) = std::env::var("CNI_COMMAND") else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut input = Vec::new();
    if command != "VERSION" {
        if let Err(e) = std::io::stdin().read_to_end(&mut input) {
            return fail(&CniError::new(5, format!("cannot read stdin: {e}")));
        }
    }
    match run(&command, &input) {
        Ok(Some(v)) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &CniError) -> ExitCode {
    println!(
        "{}",
        json!({"cniVersion": "1.1.0", "code": e.code, "msg": e.msg})
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    #[test]
    fn port_names_fit_ifnamsiz_and_differ() {
        let a = super::port_name("abc", "eth0");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("qbc"));
        assert_ne!(a, super::port_name("abc", "net1"));
        assert_eq!(a, super::port_name("abc", "eth0"));
    }
}
