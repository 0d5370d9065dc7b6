//! Attachment records: one file per attachment, `DATADIR/NETWORK/PORT`, holding `CONTAINERID
//! IFNAME`. ADD writes it once the veth exists, DEL removes it when every step succeeded, GC
//! reads them. The host veth's alias says the same while the veth lives; the record outlives
//! a pod namespace destroyed without DEL (which takes the veth with it), so GC can still name
//! the owner to the IPAM plugin and release the address.

use crate::conf::NetConf;
use crate::CniError;
use std::path::PathBuf;

fn dir(c: &NetConf) -> PathBuf {
    c.data_dir.join(&c.name)
}

fn io_err(what: &str, path: &std::path::Path, e: std::io::Error) -> CniError {
    CniError::new(5, format!("cannot {what} {}: {e}", path.display()))
}

/// Records `port` as (container, ifname)'s; written whole or not at all (a rename).
pub fn write(c: &NetConf, port: &str, container: &str, ifname: &str) -> Result<(), CniError> {
    let d = dir(c);
    std::fs::create_dir_all(&d).map_err(|e| io_err("create", &d, e))?;
    let tmp = d.join(format!(".{port}.tmp"));
    std::fs::write(&tmp, format!("{container} {ifname}\n"))
        .map_err(|e| io_err("write", &tmp, e))?;
    let path = d.join(port);
    std::fs::rename(&tmp, &path).map_err(|e| io_err("rename to", &path, e))
}

/// Removes `port`'s record; a missing one is not an error.
pub fn remove(c: &NetConf, port: &str) -> Result<(), CniError> {
    let path = dir(c).join(port);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", &path, e)),
    }
}

/// `(port, container, ifname)` of every record of this network; unreadable or malformed
/// files are skipped (a record is only a hint for GC).
pub fn list(c: &NetConf) -> Result<Vec<(String, String, String)>, CniError> {
    let d = dir(c);
    let entries = match std::fs::read_dir(&d) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("read", &d, e)),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let port = e.file_name().to_string_lossy().into_owned();
        if !port.starts_with("qbc") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let mut f = text.split_whitespace();
        if let (Some(container), Some(ifname), None) = (f.next(), f.next(), f.next()) {
            out.push((port, container.to_owned(), ifname.to_owned()));
        }
    }
    Ok(out)
}
