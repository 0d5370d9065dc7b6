//! Errors of the io crate. Each message names the file, interface or syscall involved.

use std::path::PathBuf;

/// Everything a port backend or a pcap file can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// Opening, reading or writing a file failed.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a classic pcap file (bad magic, bad header field).
    #[error("{path}: not a classic pcap file: {reason}")]
    PcapFormat { path: PathBuf, reason: String },
    /// The pcap file's link type is not Ethernet (1).
    #[error(
        "{path}: link type {linktype} is not Ethernet (1); only Ethernet captures are supported"
    )]
    PcapLinkType { path: PathBuf, linktype: u32 },
    /// The file ends inside a header or a record.
    #[error("{path}: truncated at byte {offset}: {what}")]
    PcapTruncated {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
    /// A frame too long for the format or the port.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLong { len: usize, limit: usize },
    /// The interface is down or gone (ENETDOWN, ENXIO, ENODEV): mark the port down and try
    /// `reopen` later.
    #[error("interface {ifname} is down or gone: {source}")]
    LinkDown {
        ifname: String,
        #[source]
        source: std::io::Error,
    },
    /// The device refused an MTU (EINVAL from SIOCSIFMTU): above its maximum.
    #[error(
        "{ifname}: MTU {mtu} is above the device's maximum (for a VXLAN or other tunnel device \
         the maximum is its underlay's MTU minus the encapsulation: raise the underlay's MTU first)"
    )]
    MtuAboveMax { ifname: String, mtu: u32 },
    /// No interface of that name exists.
    #[error("no interface named {ifname:?}")]
    NoSuchInterface { ifname: String },
    /// Access to a device file was refused; the message says what is needed.
    #[error("{0}")]
    Access(String),
    /// A bad argument (interface name too long, bad namespace name, ...).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A syscall failed for another reason.
    #[error("{op} on {ifname}: {source}{}", permission_hint(op, source))]
    Sys {
        op: &'static str,
        ifname: String,
        #[source]
        source: std::io::Error,
    },
}

impl IoError {
    /// Whether the caller should mark the port down (and may `reopen` it later).
    pub fn is_link_down(&self) -> bool {
        matches!(
            self,
            IoError::LinkDown { .. } | IoError::NoSuchInterface { .. }
        )
    }
}

/// For a refused syscall: the capability it needs (the daemon may run without full root with
/// the capabilities `docs/operating.md` lists).
fn permission_hint(op: &str, e: &std::io::Error) -> &'static str {
    if !matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
        return "";
    }
    if op.starts_with("socket(AF_PACKET") || op.starts_with("socket(AF_XDP") {
        " (needs CAP_NET_RAW; see docs/operating.md)"
    } else if op.starts_with("setns") {
        " (moving into a network namespace needs CAP_SYS_ADMIN; see docs/operating.md)"
    } else if op.starts_with("bpf") {
        " (loading the XDP program needs CAP_BPF and CAP_NET_ADMIN; see docs/operating.md)"
    } else {
        " (needs CAP_NET_ADMIN; see docs/operating.md)"
    }
}
