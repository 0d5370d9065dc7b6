//! IPAM delegation (CNI spec, "Delegated plugins"): the plugin named by `ipam.type` is looked
//! up in `CNI_PATH` and run with this plugin's environment (`CNI_COMMAND` as given) and the
//! same configuration on stdin; its result (ADD) is applied inside the container's namespace.

use crate::CniError;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn find(ty: &str) -> Result<PathBuf, CniError> {
    let path = std::env::var("CNI_PATH").unwrap_or_default();
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = PathBuf::from(dir).join(ty);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(CniError::new(
        5,
        format!("IPAM plugin \"{ty}\" not found in CNI_PATH \"{path}\""),
    ))
}

/// Runs IPAM plugin `ty` for `command` (ADD, DEL, CHECK) with `conf` on stdin; its stdout as
/// JSON (`Null` when it printed nothing, as DEL and CHECK do), or its error.
pub fn exec(ty: &str, command: &str, conf: &Value) -> Result<Value, CniError> {
    exec_for(ty, command, conf, None)
}

/// As [`exec`], for another attachment than the environment's: `(container id, ifname)`
/// (GC releases the addresses of attachments no runtime asked about).
pub fn exec_for(
    ty: &str,
    command: &str,
    conf: &Value,
    who: Option<(&str, &str)>,
) -> Result<Value, CniError> {
    match exec_once(ty, command, conf, who) {
        // A 1.1 configuration and an IPAM plugin of 1.0 (Debian 12's host-local, 1.1.1, says
        // "incompatible CNI versions"): the 1.0 and 1.1 results are the same, so ask in 1.0.
        Err(e) if e.code == 1 && conf["cniVersion"] == "1.1.0" => {
            let mut older = conf.clone();
            older["cniVersion"] = Value::from("1.0.0");
            exec_once(ty, command, &older, who).map(|mut v| {
                if v.is_object() {
                    v["cniVersion"] = Value::from("1.1.0");
                }
                v
            })
        }
        r => r,
    }
}

fn exec_once(
    ty: &str,
    command: &str,
    conf: &Value,
    who: Option<(&str, &str)>,
) -> Result<Value, CniError> {
    let prog = find(ty)?;
    let mut cmd = Command::new(&prog);
    if let Some((container, ifname)) = who {
        cmd.env("CNI_CONTAINERID", container)
            .env("CNI_IFNAME", ifname)
            .env_remove("CNI_NETNS");
    }
    let mut child = cmd
        .env("CNI_COMMAND", command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CniError::new(5, format!("cannot run {}: {e}", prog.display())))?;
    let input = serde_json::to_vec(conf).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&input);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::new(5, format!("{}: {e}", prog.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).map_err(|e| {
            CniError::new(
                5,
                format!("IPAM plugin {ty} {command}: bad JSON ({e}): {text}"),
            )
        })?
    };
    if out.status.success() {
        return Ok(v);
    }
    let msg = v
        .get("msg")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_owned());
    let code = v.get("code").and_then(Value::as_u64).unwrap_or(5) as u32;
    Err(CniError::new(
        code,
        format!("IPAM plugin {ty} {command}: {msg}"),
    ))
}

/// Applies an IPAM result's `ips` and `routes` to `ifname` inside `netns`. A route without a
/// gateway goes through the gateway of the first address of its family, as the reference
/// plugins' `ipam.ConfigureIface` does. IPv6 addresses are added `nodad` unless `dad`
/// (`enabledad`; the reference bridge plugin's default is off too).
pub fn apply(netns: &str, ifname: &str, result: &Value, dad: bool) -> Result<(), CniError> {
    let empty = Vec::new();
    let ips = result
        .get("ips")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for ip in ips {
        let addr = ip
            .get("address")
            .and_then(Value::as_str)
            .ok_or_else(|| CniError::new(5, format!("IPAM result: an ip without address: {ip}")))?;
        let mut args = vec!["addr", "add", addr, "dev", ifname];
        if addr.contains(':') && !dad {
            args.push("nodad");
        }
        crate::sys::ip_in(netns, &args)?;
    }
    let gw_for = |v6: bool| {
        ips.iter()
            .filter(|i| i["address"].as_str().is_some_and(|a| a.contains(':') == v6))
            .find_map(|i| i.get("gateway").and_then(Value::as_str))
    };
    let routes = result
        .get("routes")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for r in routes {
        let dst = r
            .get("dst")
            .and_then(Value::as_str)
            .ok_or_else(|| CniError::new(5, format!("IPAM result: a route without dst: {r}")))?;
        let gw = r
            .get("gw")
            .and_then(Value::as_str)
            .or_else(|| gw_for(dst.contains(':')));
        let mut args = vec!["route", "add", dst];
        if let Some(g) = gw {
            args.extend(["via", g]);
        }
        args.extend(["dev", ifname]);
        crate::sys::ip_in(netns, &args)?;
    }
    Ok(())
}
