//! What the control plane knows of a port besides the switch: its backend's status in a
//! running daemon ([`BackendStatus`], with the backend's own counters, [`BackendCounters`]),
//! and [`Backends`], the lookup by port name of a port's backend spec and status through which
//! the output code ([`crate::render`], [`crate::running`], [`crate::stats`]) reads them
//! without knowing the [`Session`](crate::Session) that keeps them.
//!
//! Imports only [`crate::command`]; everything else in the crate may import it.

use crate::command::PortSpec;

/// A port's backend spec and runtime status, by port name (a bridge's host port goes by the
/// bridge's name). [`Session`](crate::Session) implements it; so can a test or a tool that
/// holds the two maps some other way.
pub trait Backends {
    /// The backend port `name` was added with (`None`: no such port, or a port without one).
    fn port_spec(&self, name: &str) -> Option<&PortSpec>;
    /// What a running daemon recorded about port `name`'s backend (`None` offline).
    fn backend_status(&self, name: &str) -> Option<&BackendStatus>;
    /// The LACP engine's view of bond `name` (`None`: not a bond, or no engine here).
    fn bond_view(&self, name: &str) -> Option<qbridge_lacp::BondView> {
        let _ = name;
        None
    }
}

/// No backends: output of a bare switch.
impl Backends for () {
    fn port_spec(&self, _: &str) -> Option<&PortSpec> {
        None
    }
    fn backend_status(&self, _: &str) -> Option<&BackendStatus> {
        None
    }
}

/// What a running daemon knows about a port's backend, shown by `link show`. Offline sessions
/// have none.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendStatus {
    /// The backend is open (false: waiting for the interface to appear or come back).
    pub open: bool,
    /// The interface's device MTU as last seen or set (AF_PACKET: raised for envelope frames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_mtu: Option<u32>,
    /// Whether the socket receives every frame (`PACKET_MR_PROMISC`) or only the unicast
    /// addresses the bridge needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// The kernel's interface name when it differs from what was configured (TAP `tap%d`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// Why the backend is not open, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// AF_PACKET: whether the socket sends straight to the driver (`PACKET_QDISC_BYPASS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qdisc_bypass: Option<bool>,
    /// AF_PACKET: receive ring slots per socket (one socket per worker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring_frames: Option<u32>,
    /// AF_PACKET: whether the eBPF fast path receives the port's frames (its sockets only
    /// transmit then; docs/fast-path.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<bool>,
    /// AF_PACKET: the device's transmit offloads as last read (at open, then once a second).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offloads: Option<DeviceOffloadStatus>,
    /// The backend's counters (the transmit stage's and per worker), flattened into this
    /// object in JSON: `link show -j` shows them under `runtime`.
    #[serde(flatten)]
    pub counters: BackendCounters,
    /// A bond: each member's traffic through the bond, in member order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bond_members: Vec<BondMemberTraffic>,
    /// A bond: what its queues dropped that belongs to no member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bond_drops: Option<BondDrops>,
    /// VXLAN ports: the remote VTEPs learned (VNI, MAC, VTEP), for `fdb show`'s `dst`.
    #[serde(skip)]
    pub vxlan_learned: Vec<crate::vxlan::Learned>,
}

/// A bond's own drops (daemon only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BondDrops {
    /// Slow Protocols frames dropped: too many were waiting for the control thread.
    pub pdu_overflow: u64,
    /// Frames dropped on transmit: no member distributes (also counted as `tx_error`).
    pub tx_no_member: u64,
}

/// One bond member's traffic as the bond's queues count it (daemon only).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BondMemberTraffic {
    pub name: String,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Dropped: received while the member was not collecting.
    pub rx_not_collecting: u64,
    /// Slow Protocols frames received (handed to the LACP engine) and sent.
    pub rx_pdus: u64,
    pub tx_pdus: u64,
    /// Bursts that failed on the member (its link down or gone).
    pub errors: u64,
}

/// A device's transmit offloads as the daemon last read them (`ethtool -k` names in the docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceOffloadStatus {
    /// `tx-tcp-segmentation`
    pub tso4: bool,
    /// `tx-tcp6-segmentation`
    pub tso6: bool,
    /// `tx-tcp-ecn-segmentation`
    pub tso_ecn: bool,
    /// `tx-scatter-gather`
    pub sg: bool,
    /// `tx-checksum-ipv4` or `tx-checksum-ip-generic`
    pub csum4: bool,
    /// `tx-checksum-ipv6` or `tx-checksum-ip-generic`
    pub csum6: bool,
    /// Tag depths whose super-frames the kernel refused lately (segmented in software until the
    /// direct path is tried again).
    pub refused_tag_depths: Vec<u8>,
}

/// A port's counters kept outside the switch, by the daemon's datapath: what the transmit stage
/// did (software GSO, GRO) and how the port's receive load spreads over the workers. Part of a
/// port's record in the counter snapshot ([`crate::stats::PortStats`]). Drops the backend
/// counts (`rx_ring_full`, `tx_queue_full`, …) are not here: they are counted into the switch
/// under their [`DropReason`](qbridge_bridge::DropReason) name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendCounters {
    /// TCP super-frames the daemon segmented in software for this port (the port or its device
    /// could not take them whole, or the kernel refused them). Not drops.
    pub tx_sw_gso: u64,
    /// Of `tx_sw_gso`: super-frames the kernel refused whole (`ENOBUFS` on a qdisc-bypass
    /// socket, the device would not segment them), segmented and resent at once. Not drops.
    pub tx_gso_refused: u64,
    /// Receive coalescing for this port (it takes super-frames): super-frames the daemon made
    /// of TCP segments of one flow, and the segments merged into them. Not drops.
    pub tx_gro_frames: u64,
    pub tx_gro_segments: u64,
    /// Frames received on this port by each datapath worker (index = worker), since the
    /// port was added: how the port's load spreads over the workers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rx_frames_by_worker: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `link show -j`'s `runtime` object keeps its keys and their order with the counters in a
    /// struct of their own.
    #[test]
    fn backend_status_json_is_one_flat_object() {
        let st = BackendStatus {
            open: true,
            device_mtu: Some(1504),
            promisc: Some(false),
            ifname: Some("tap3".into()),
            error: Some("gone".into()),
            qdisc_bypass: Some(true),
            ring_frames: Some(256),
            fast_path: Some(true),
            offloads: Some(DeviceOffloadStatus {
                tso4: true,
                refused_tag_depths: vec![2],
                ..DeviceOffloadStatus::default()
            }),
            counters: BackendCounters {
                tx_sw_gso: 1,
                tx_gso_refused: 2,
                tx_gro_frames: 3,
                tx_gro_segments: 4,
                rx_frames_by_worker: vec![5, 6],
            },
            bond_members: Vec::new(),
            bond_drops: None,
            vxlan_learned: Vec::new(),
        };
        assert_eq!(
            serde_json::to_string(&st).unwrap(),
            r#"{"open":true,"device_mtu":1504,"promisc":false,"ifname":"tap3","error":"gone","qdisc_bypass":true,"ring_frames":256,"fast_path":true,"offloads":{"tso4":true,"tso6":false,"tso_ecn":false,"sg":false,"csum4":false,"csum6":false,"refused_tag_depths":[2]},"tx_sw_gso":1,"tx_gso_refused":2,"tx_gro_frames":3,"tx_gro_segments":4,"rx_frames_by_worker":[5,6]}"#
        );
        let empty = serde_json::to_string(&BackendStatus::default()).unwrap();
        assert_eq!(
            empty,
            r#"{"open":false,"tx_sw_gso":0,"tx_gso_refused":0,"tx_gro_frames":0,"tx_gro_segments":0}"#
        );
    }
}

/// The eBPF fast path as the daemon's engine sees it (`show fast-path`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FastPathStatus {
    /// `--fast-path`: auto, on or off.
    pub mode: String,
    /// on or off.
    pub state: String,
    /// Why it is off.
    pub reason: Option<String>,
    /// The device misses go up through.
    pub upcall: Option<String>,
    /// The ports whose frames it receives.
    pub ports: Vec<String>,
    /// Flows of the current configuration generation in the program's table.
    pub flows: u64,
    /// Frames it forwarded.
    pub hits: u64,
    /// Frames it sent up, by reason.
    pub misses: std::collections::BTreeMap<String, u64>,
    /// Flows installed since the start.
    pub installed: u64,
    /// Frames forwarded by the pipeline whose flow was not installed, by reason.
    pub not_cached: std::collections::BTreeMap<String, u64>,
    /// Upcalls of a port closed or reopened since: dropped.
    pub stale_upcalls: u64,
    /// Misses the kernel dropped because an upcall socket's ring was full (the pipeline fell
    /// behind the misses).
    pub upcall_ring_full: u64,
    /// Mirror copies the program's clone failed to send (the kernel refused them: the
    /// destination gone or down), since the start; each also a `tx_error` drop of its session.
    pub mirror_copies_failed: u64,
}
