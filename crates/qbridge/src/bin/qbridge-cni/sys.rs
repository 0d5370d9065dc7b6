//! The kernel side, through iproute2: the veth pair, moving one end into the container's
//! namespace (`ip link set … netns PATH` opens the path CNI_NETNS names), and what is done
//! inside it (`nsenter --net=PATH ip …`). Shelling out keeps `unsafe` (setns) out of this
//! binary (it lives in crates/io only) and the commands are the ones an operator would type.

use crate::CniError;
use std::process::Command;

/// Runs `prog args…`; stdout, or an error quoting the command and its stderr.
fn run(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `ip ARGS` in this (the daemon's) namespace.
pub fn ip(args: &[&str]) -> Result<String, CniError> {
    run("ip", args).map_err(|m| CniError::new(5, m))
}

/// `ip ARGS` inside the namespace at `netns`.
pub fn ip_in(netns: &str, args: &[&str]) -> Result<String, CniError> {
    let net = format!("--net={netns}");
    let mut v = vec![net.as_str(), "ip"];
    v.extend_from_slice(args);
    run("nsenter", &v).map_err(|m| CniError::new(5, m))
}

/// Whether interface `name` exists here (`None`) or inside `netns`.
pub fn link_exists(netns: Option<&str>, name: &str) -> bool {
    let args = ["link", "show", "dev", name];
    match netns {
        None => ip(&args).is_ok(),
        Some(ns) => ip_in(ns, &args).is_ok(),
    }
}

/// The MAC address of `name` (here or inside `netns`).
pub fn mac_of(netns: Option<&str>, name: &str) -> Result<String, CniError> {
    let args = ["-j", "link", "show", "dev", name];
    let out = match netns {
        None => ip(&args)?,
        Some(ns) => ip_in(ns, &args)?,
    };
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| CniError::new(5, format!("ip -j link show {name}: bad JSON: {e}")))?;
    v.get(0)
        .and_then(|l| l.get("address"))
        .and_then(|a| a.as_str())
        .map(str::to_owned)
        .ok_or_else(|| CniError::new(5, format!("{name} has no MAC address")))
}

/// Whether the namespace file exists (a missing one is not an error for DEL).
pub fn netns_exists(netns: &str) -> bool {
    std::path::Path::new(netns).exists()
}

/// Creates `host` (here) — `ifname` (inside `netns`), both up, with `mtu` if given. On failure
/// nothing is left behind.
pub fn create_veth(
    host: &str,
    tmp: &str,
    netns: &str,
    ifname: &str,
    mtu: Option<u32>,
) -> Result<(), CniError> {
    let mtu_s = mtu.map(|m| m.to_string());
    let mut add = vec!["link", "add", host];
    if let Some(m) = &mtu_s {
        add.extend(["mtu", m.as_str()]);
    }
    add.extend(["type", "veth", "peer", "name", tmp]);
    if let Some(m) = &mtu_s {
        add.extend(["mtu", m.as_str()]);
    }
    ip(&add)?;
    let rest = (|| {
        ip(&["link", "set", "dev", tmp, "netns", netns])?;
        ip_in(netns, &["link", "set", "dev", tmp, "name", ifname])?;
        ip_in(netns, &["link", "set", "dev", ifname, "up"])?;
        ip(&["link", "set", "dev", host, "up"])?;
        Ok(())
    })();
    if rest.is_err() {
        let _ = ip(&["link", "del", "dev", host]);
    }
    rest
}

/// Deletes `host` (and so its peer); a missing one is not an error.
pub fn delete_veth(host: &str) -> Result<(), CniError> {
    if !link_exists(None, host) {
        return Ok(());
    }
    match ip(&["link", "del", "dev", host]) {
        Ok(_) => Ok(()),
        Err(_) if !link_exists(None, host) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sets `host`'s alias to `text` (IFLA_IFALIAS, at most 255 bytes): the attachment's owner,
/// read back by GC.
pub fn set_alias(host: &str, text: &str) -> Result<(), CniError> {
    ip(&["link", "set", "dev", host, "alias", text]).map(|_| ())
}

/// `(name, alias)` of every veth here whose alias starts with `prefix`.
pub fn veths_with_alias(prefix: &str) -> Result<Vec<(String, String)>, CniError> {
    let out = ip(&["-j", "link", "show", "type", "veth"])?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| CniError::new(5, format!("ip -j link show type veth: bad JSON: {e}")))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let name = l.get("ifname")?.as_str()?;
            let alias = l.get("ifalias")?.as_str()?;
            alias
                .starts_with(prefix)
                .then(|| (name.to_owned(), alias.to_owned()))
        })
        .collect())
}
