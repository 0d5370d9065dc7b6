//! The qbridge daemon's control socket (docs/daemon.md, protocol v1), as the adapter uses
//! it: one command per request (`{"v":1,"args":[…]}`), the JSON of `link show -j` (with
//! `vlan tunnelshow -j` and `vni show -j` for external ports) and `fdb show -j` read through
//! `qbridge_control::json`'s typed structs (the ones tested against the daemon's renderers)
//! into [`crate::reconcile`]'s types, and a `monitor -j fdb link vlan` stream on its own
//! connection and thread, read into [`Change`]s that keep the adapter's FDB mirror
//! ([`crate::mirror`]).

use crate::reconcile::{FdbEntry, PortVnis, VxlanPort};
use qbridge_control::json::{self, Link, PortTunnels};
use qbridge_control::{OutputOptions, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("qbridge daemon at {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("qbridge daemon at {path}: `{cmd}` refused: {error}")]
    Refused {
        path: PathBuf,
        cmd: String,
        error: String,
    },
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Daemon {
    path: PathBuf,
    reader: BufReader<UnixStream>,
}

impl Daemon {
    pub fn connect(path: &Path) -> Result<Daemon, DaemonError> {
        let s = UnixStream::connect(path).map_err(|e| io(path, &e))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| io(path, &e))?;
        Ok(Daemon {
            path: path.to_path_buf(),
            reader: BufReader::new(s),
        })
    }

    /// Runs one command (words as the CLI takes them); its output.
    pub fn run(&mut self, args: &[&str]) -> Result<String, DaemonError> {
        let words: Vec<String> = args.iter().map(|w| w.to_string()).collect();
        self.exchange(Request::command(&words).to_line(), || args.join(" "))
    }

    /// Runs many commands as one batch (streamed, `batch_len`), all-or-nothing: one request
    /// and one change of the daemon's state however many lines (the adapter's `fdb` commands
    /// of a pass). A refusal names the line (`line 7: …`) and changes nothing.
    pub fn batch(&mut self, lines: &[String]) -> Result<(), DaemonError> {
        let mut text = lines.join("\n");
        text.push('\n');
        let mut req =
            Request::batch_stream(text.len() as u64, OutputOptions::default(), false).to_line();
        req.push_str(&text);
        self.exchange(req, || format!("a batch of {} fdb commands", lines.len()))
            .map(|_| ())
    }

    /// Sends `req` (whole lines) and reads the answer: the output, or the refusal of what
    /// `what` names.
    fn exchange(
        &mut self,
        req: String,
        what: impl FnOnce() -> String,
    ) -> Result<String, DaemonError> {
        self.reader
            .get_mut()
            .write_all(req.as_bytes())
            .map_err(|e| io(&self.path, &e))?;
        let mut answer = String::new();
        match self.reader.read_line(&mut answer) {
            Ok(0) => return Err(io(&self.path, &"closed the connection")),
            Ok(_) => {}
            Err(e) => return Err(io(&self.path, &e)),
        }
        let r = Response::parse(answer.trim_end()).map_err(|e| io(&self.path, &e))?;
        if r.ok {
            Ok(r.output.unwrap_or_default())
        } else {
            Err(DaemonError::Refused {
                path: self.path.clone(),
                cmd: what(),
                error: r.error.unwrap_or_else(|| "no reason given".to_string()),
            })
        }
    }

    /// The VXLAN ports (`link show -j`); the maps of external ones (`vlan tunnelshow -j`,
    /// `vni show -j`, read only when there is one).
    pub fn vxlan_ports(&mut self) -> Result<Vec<VxlanPort>, DaemonError> {
        let links: Vec<Link> = self.json(&["-j", "link", "show"])?;
        let (mut tunnels, mut vnis) = (Vec::new(), Vec::new());
        if parse_ports(&links, &tunnels, &vnis)
            .iter()
            .any(|p| matches!(p.vnis, PortVnis::External { .. }))
        {
            tunnels = self.json(&["-j", "vlan", "tunnelshow"])?;
            vnis = self.json(&["-j", "vni", "show"])?;
        }
        Ok(parse_ports(&links, &tunnels, &vnis))
    }

    /// A show command's JSON objects, typed (`qbridge_control::json`; objects that do not
    /// read are skipped).
    fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        args: &[&str],
    ) -> Result<Vec<T>, DaemonError> {
        let out = self.run(args)?;
        json::objects(&out).map_err(|e| io(&self.path, &e))
    }

    /// The FDB (`fdb show -j`): the bridges' entries, then the VXLAN ports' own.
    pub fn fdb(&mut self) -> Result<Vec<FdbEntry>, DaemonError> {
        let entries: Vec<json::FdbEntry> = self.json(&["-j", "fdb", "show"])?;
        Ok(parse_fdb(&entries))
    }
}

fn io(path: &Path, e: &dyn std::fmt::Display) -> DaemonError {
    DaemonError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// `link show -j`'s VXLAN ports (`backend.type` `vxlan`, with `id` or `external`, and
/// `local`); an external port's map from `tunnels` (`vlan tunnelshow -j`), and its VNI list
/// from `vnis` when the port is there (`vni show -j`, which lists the `vnifilter` ports
/// only). Ports that do not read (no VNI, a bad address) are skipped.
pub fn parse_ports(
    links: &[Link],
    tunnels: &[PortTunnels],
    vnis: &[json::PortVnis],
) -> Vec<VxlanPort> {
    // Out of a VLAN-filtering bridge an external port maps nothing (docs/semantics.md §T 3):
    // its map gives no domain there.
    let unfiltered = |master: Option<&str>| {
        links.iter().any(|l| {
            master.is_some()
                && Some(l.ifname.as_str()) == master
                && l.bridge.as_ref().is_some_and(|b| !b.vlan_filtering)
        })
    };
    links
        .iter()
        .filter_map(|l| {
            let b = l.backend.as_ref()?;
            if b.kind != "vxlan" {
                return None;
            }
            let name = l.ifname.as_str();
            let vnis = if b.external {
                let mut map = Vec::new();
                let runs: &[json::Tunnel] = if unfiltered(l.master.as_deref()) {
                    &[]
                } else {
                    tunnels
                        .iter()
                        .find(|p| p.ifname == name)
                        .map_or(&[], |p| &p.tunnels)
                };
                for t in runs {
                    let end = t.vlan_end.unwrap_or(t.vlan);
                    for (k, v) in (t.vlan..=end.min(4094)).enumerate() {
                        map.push((v, t.tunid.saturating_add(k as u32)));
                    }
                }
                let filter = vnis.iter().find(|p| p.ifname == name).map(|p| {
                    p.vnis
                        .iter()
                        .map(|r| (r.vni, r.vni_end.unwrap_or(r.vni)))
                        .collect()
                });
                PortVnis::External { map, filter }
            } else {
                PortVnis::Id(b.id?)
            };
            Some(VxlanPort {
                name: name.to_string(),
                vnis,
                local: b.local.as_deref()?.parse().ok()?,
                master: l.master.clone(),
            })
        })
        .collect()
}

/// Parses `02:00:00:00:00:0a`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// `fdb show -j`'s entries as the decision takes them (an entry whose MAC does not read is
/// skipped).
pub fn parse_fdb(entries: &[json::FdbEntry]) -> Vec<FdbEntry> {
    entries
        .iter()
        .filter_map(|e| {
            Some(FdbEntry {
                mac: parse_mac(&e.mac)?,
                ifname: e.ifname.clone(),
                master: e.master.clone(),
                vlan: e.vlan,
                dst: e.dst.as_deref().and_then(|d| d.parse::<IpAddr>().ok()),
                vni: e.vni,
                state: e.state.clone(),
                extern_learn: e.has_flag("extern_learn"),
            })
        })
        .collect()
}

/// What the daemon's `monitor -j fdb link vlan` stream said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The monitor is answered: from now on every change is told.
    Watching,
    /// An entry added, learned, moved or changed; or (`deleted`) gone.
    Fdb { entry: FdbEntry, deleted: bool },
    /// Something a mirror cannot follow line by line: a link or VLAN changed (ports, maps),
    /// or the monitor lost events. The adapter reads the daemon whole.
    Resync,
}

/// One line of the stream (`None`: one the adapter has no use for, or that does not read).
pub fn parse_change(line: &str) -> Option<Change> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("ok").is_some() {
        return Some(Change::Watching);
    }
    match v.get("object")?.as_str()? {
        "fdb" => {
            let deleted = v.get("deleted").and_then(|d| d.as_bool()).unwrap_or(false);
            let e: json::FdbEntry = serde_json::from_value(v).ok()?;
            let entry = parse_fdb(std::slice::from_ref(&e)).pop()?;
            Some(Change::Fdb { entry, deleted })
        }
        "link" | "vlan" | "lost" => Some(Change::Resync),
        _ => None,
    }
}

/// Streams `monitor -j fdb link vlan` from the daemon at `path` and calls `each` per change
/// ([`Change::Watching`] first, once the daemon answered), until it returns `false` or the
/// connection ends (then returns; the caller reconnects).
pub fn watch(path: &Path, mut each: impl FnMut(Change) -> bool) -> Result<(), DaemonError> {
    let mut s = UnixStream::connect(path).map_err(|e| io(path, &e))?;
    let req =
        serde_json::json!({"v": 1, "monitor": ["fdb", "link", "vlan"], "opts": {"json": true}});
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| io(path, &e))?;
    let reader = BufReader::new(s);
    for line in reader.lines() {
        let line = line.map_err(|e| io(path, &e))?;
        if let Some(c) = parse_change(&line) {
            if !each(c) {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The typed objects of a `json!` array, as [`Daemon::json`] reads the daemon's answer.
    fn read<T: serde::de::DeserializeOwned>(v: Value) -> Vec<T> {
        json::objects(&v.to_string()).unwrap()
    }

    /// A pass's commands reach the daemon as one streamed batch (header, then exactly its
    /// bytes); a refusal comes back as `Refused` naming the batch and the daemon's reason.
    #[test]
    fn commands_go_as_one_streamed_batch() {
        let dir = std::env::temp_dir().join(format!("qbridge-evpn-batch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s);
            let mut got = Vec::new();
            for answer in [
                r#"{"v":1,"ok":true,"output":""}"#,
                r#"{"v":1,"ok":false,"error":"line 2: no port vx9"}"#,
            ] {
                let mut head = String::new();
                r.read_line(&mut head).unwrap();
                let h: Value = serde_json::from_str(&head).unwrap();
                let mut text = vec![0u8; h["batch_len"].as_u64().unwrap() as usize];
                std::io::Read::read_exact(&mut r, &mut text).unwrap();
                got.push(String::from_utf8(text).unwrap());
                r.get_mut()
                    .write_all(format!("{answer}\n").as_bytes())
                    .unwrap();
            }
            got
        });
        let mut d = Daemon::connect(&path).unwrap();
        let cmds = vec![
            "fdb append 00:00:00:00:00:00 dev vx0 dst 192.0.2.2 extern_learn".to_string(),
            "fdb replace 02:00:00:00:00:0a dev vx0 dst 192.0.2.2 extern_learn".to_string(),
        ];
        d.batch(&cmds).unwrap();
        let e = d.batch(&cmds).unwrap_err().to_string();
        assert!(
            e.contains("a batch of 2 fdb commands") && e.contains("line 2: no port vx9"),
            "{e}"
        );
        let got = server.join().unwrap();
        assert_eq!(got[0], format!("{}\n{}\n", cmds[0], cmds[1]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The monitor's lines: the answer, entries added and deleted, what forces a whole read.
    #[test]
    fn reads_monitor_lines() {
        assert_eq!(
            parse_change(r#"{"v":1,"ok":true,"output":""}"#),
            Some(Change::Watching)
        );
        let add = r#"{"object":"fdb","mac":"02:00:00:00:00:0a","ifname":"p1","flags":[],"master":"br0","state":""}"#;
        let Some(Change::Fdb { entry, deleted }) = parse_change(add) else {
            panic!()
        };
        assert_eq!(
            (entry.mac, entry.ifname.as_str(), deleted),
            ([2, 0, 0, 0, 0, 0xa], "p1", false)
        );
        let del = r#"{"object":"fdb","mac":"00:00:00:00:00:00","ifname":"vx0","dst":"192.0.2.2","flags":["self","extern_learn"],"state":"","deleted":true}"#;
        let Some(Change::Fdb { entry, deleted }) = parse_change(del) else {
            panic!()
        };
        assert!(deleted && entry.extern_learn);
        assert_eq!(
            entry.dst,
            Some(std::net::Ipv4Addr::new(192, 0, 2, 2).into())
        );
        for l in [
            r#"{"object":"lost","events":7}"#,
            r#"{"object":"link","ifname":"vx0"}"#,
            r#"{"object":"vlan","ifname":"vx0"}"#,
        ] {
            assert_eq!(parse_change(l), Some(Change::Resync), "{l}");
        }
        assert_eq!(parse_change(r#"{"object":"stp"}"#), None);
        assert_eq!(parse_change("not json"), None);
        assert_eq!(parse_change(r#"{"object":"fdb","mac":"zz"}"#), None);
    }

    #[test]
    fn reads_link_and_fdb_json() {
        let links = serde_json::json!([
            {"ifname": "br0", "backend": {"type": "bridge"}},
            {"ifname": "vx0", "master": "br0",
             "backend": {"type": "vxlan", "id": 100, "local": "192.0.2.1", "dstport": 4789,
                         "learning": false}}
        ]);
        assert_eq!(
            parse_ports(&read(links.clone()), &[], &[]),
            [VxlanPort {
                name: "vx0".into(),
                vnis: PortVnis::Id(100),
                local: std::net::Ipv4Addr::new(192, 0, 2, 1).into(),
                master: Some("br0".into()),
            }]
        );
        let fdb = serde_json::json!([
            {"mac": "02:00:00:00:00:0a", "ifname": "p1", "flags": [], "master": "br0",
             "state": ""},
            {"mac": "00:00:00:00:00:00", "ifname": "vx0", "dst": "192.0.2.2",
             "flags": ["self", "extern_learn"], "state": ""},
            {"mac": "not a mac", "ifname": "p1"}
        ]);
        let e = parse_fdb(&read(fdb));
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].mac, [2, 0, 0, 0, 0, 0xa]);
        assert_eq!(e[0].master.as_deref(), Some("br0"));
        assert!(e[1].extern_learn);
        assert_eq!(e[1].dst, Some(std::net::Ipv4Addr::new(192, 0, 2, 2).into()));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:00:01"), None);
    }

    #[test]
    fn reads_external_ports_with_their_maps() {
        let links = serde_json::json!([
            {"ifname": "vx0", "master": "br0",
             "backend": {"type": "vxlan", "external": true, "local": "192.0.2.1",
                         "dstport": 4789, "learning": false}},
            {"ifname": "vx1",
             "backend": {"type": "vxlan", "external": true, "local": "192.0.2.1",
                         "dstport": 4790, "learning": false}}
        ]);
        let tunnels = serde_json::json!([
            {"ifname": "vx0", "tunnels": [{"vlan": 10, "tunid": 1000},
                                          {"vlan": 20, "vlanEnd": 21, "tunid": 2000,
                                           "tunidEnd": 2001}]},
            {"ifname": "vx1", "tunnels": [{"vlan": 5, "tunid": 5000}]}
        ]);
        let vnis = serde_json::json!([{"ifname": "vx1", "vnis": [{"vni": 4000, "vniEnd": 4001}]}]);
        let p = parse_ports(
            &read(links.clone()),
            &read(tunnels.clone()),
            &read(vnis.clone()),
        );
        assert_eq!(
            p[0].vnis,
            PortVnis::External {
                map: vec![(10, 1000), (20, 2000), (21, 2001)],
                filter: None
            }
        );
        assert_eq!(
            p[1].vnis,
            PortVnis::External {
                map: vec![(5, 5000)],
                filter: Some(vec![(4000, 4001)])
            }
        );
        // In a bridge that does not filter VLANs, the map gives no domain.
        let mut links = links;
        links.as_array_mut().unwrap().push(serde_json::json!(
            {"ifname": "br0", "kind": "bridge", "bridge": {"vlan_filtering": false}}));
        assert!(parse_ports(
            &read(links.clone()),
            &read(tunnels.clone()),
            &read(vnis.clone())
        )[0]
        .domains()
        .is_empty());
        // Without the maps read, an external port has no domain; an entry's VNI is read.
        let p = parse_ports(&read(links.clone()), &[], &[]);
        assert!(p[0].domains().is_empty());
        let fdb = serde_json::json!([{"mac": "00:00:00:00:00:00", "ifname": "vx0",
            "dst": "192.0.2.2", "vni": 1000, "flags": ["self"], "state": "permanent"}]);
        assert_eq!(parse_fdb(&read(fdb))[0].vni, Some(1000));
    }
}
