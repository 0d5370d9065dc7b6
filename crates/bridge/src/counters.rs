//! Drop reasons and counters.
//!
//! Every frame the core does not forward is counted under exactly one [`DropReason`], on the
//! port where the decision was made: whole-frame decisions (including `EgressNotMember`,
//! `EgressDown`, `Isolated`, `SamePort`, `Local`, `NoDestination`) on the receiving port; the
//! per-copy egress checks (`Oversize` after a tag push, `EgressCvlanNotAllowed`) and known
//! unicast to a port not Forwarding in the VLAN (`StpDiscarding`) on the port the copy was
//! meant for;
//! `TxQueueFull` and `TxError` by the I/O layer on the transmitting port (also for frames it could
//! not segment or checksum in software).

use serde::Serialize;

macro_rules! drop_reasons {
    ($($(#[doc = $doc:literal])* $name:ident = $label:literal,)*) => {
        /// Why a frame (or one flooded copy of it) was not sent.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "snake_case")]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[doc = $doc])* $name,)*
        }

        impl DropReason {
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];
            pub const COUNT: usize = Self::ALL.len();

            /// The stable snake_case name used in JSON, Prometheus and docs.
            pub const fn name(self) -> &'static str {
                match self { $(DropReason::$name => $label,)* }
            }

            pub fn from_name(s: &str) -> Option<DropReason> {
                match s { $($label => Some(DropReason::$name),)* _ => None }
            }

            /// What the reason means, in words (its documentation above, one line): what
            /// `qbridge trace` and the drop watch print beside the name.
            pub fn describe(self) -> String {
                let doc: &'static str = match self { $(DropReason::$name => concat!($($doc, "\n"),*),)* };
                doc.split_whitespace().collect::<Vec<_>>().join(" ")
            }
        }
    };
}

drop_reasons! {
    /// Port is not attached to a bridge.
    NoBridge = "no_bridge",
    /// Port is down (admin down, or its link is down).
    PortDown = "port_down",
    /// Shorter than an Ethernet header, or a bridge tag cut short.
    Runt = "runt",
    /// Longer than 14 + mtu + envhdr (per segment for GSO frames), at ingress or egress.
    Oversize = "oversize",
    /// Source MAC is multicast, broadcast or all-zero.
    InvalidSrcMac = "invalid_src_mac",
    /// Link-local group frame for the bridge itself (01-80-C2-00-00-0X not in group_fwd_mask),
    /// or MAC pause (01).
    LinkLocal = "link_local",
    /// Bridge tag with VID 4095.
    ReservedVid = "reserved_vid",
    /// Untagged or priority-tagged frame on a port without a PVID.
    NoPvid = "no_pvid",
    /// Ingress filter: the frame's VID is not a member of the port.
    VlanNotMember = "vlan_not_member",
    /// A `dot1q-tunnel` port with `cvlans`: the frame's customer VLAN (its 0x8100 outer tag's
    /// VID, 0 when it has none) is not in the list.
    CvlanNotAllowed = "cvlan_not_allowed",
    /// A copy for a `dot1q-tunnel` port with `cvlans`: its customer VLAN as it would leave
    /// (the VID of its 0x8100 outer tag once the bridge tag is off, 0 when it has none) is not
    /// in the list. Counted on that (egress) port, per copy.
    EgressCvlanNotAllowed = "egress_cvlan_not_allowed",
    /// A frame tagged, on the wire, with a VLAN the port's `vlan map` sends translated (the
    /// inside VID of a 1:1 or 2:1 map, or the inside pair of a 2:2 map) and no map of its own:
    /// the VLAN is not taken untranslated from that port.
    TranslatedVid = "translated_vid",
    /// A locked port received a frame whose source has no FDB entry on it (or only a
    /// `locked` one).
    PortLocked = "port_locked",
    /// Known unicast between two ports whose private-VLAN roles in the frame's VLAN do not
    /// talk (isolated to isolated, or to another community).
    Pvlan = "pvlan",
    /// A new source over the port's `fdb_max_learned` in the frame's VLAN (`violation
    /// protect`).
    MacLimit = "mac_limit",
    /// The same with `violation restrict` (the daemon also logs it).
    MacLimitRestrict = "mac_limit_restrict",
    /// The same with `violation shutdown` (the daemon also takes the port down).
    MacLimitShutdown = "mac_limit_shutdown",
    /// Destination is a permanent (local) FDB entry, for the bridge itself, and the bridge has
    /// no host port (`link set dev BR up` gives it one; then such frames go to the host).
    Local = "local",
    /// Known unicast destination is the ingress port and the port is not hairpin.
    SamePort = "same_port",
    /// Known unicast from an isolated port to another isolated port.
    Isolated = "isolated",
    /// Known unicast destination port is not a member of the frame's VID (egress filter).
    EgressNotMember = "egress_not_member",
    /// Known unicast destination port is down (admin or link).
    EgressDown = "egress_down",
    /// Spanning tree (bridge `stp` on): a frame received on a port not Forwarding in its VLAN
    /// (Discarding: dropped unlearned; Learning: its source learned, then dropped), counted on
    /// that port; or known unicast to a port not Forwarding in the VLAN, counted on that
    /// (egress) port. Link-local frames for the bridge are not subject to it.
    StpDiscarding = "stp_discarding",
    /// Flooding found no port to send to (all excluded by VLAN, flags, isolation, hairpin).
    NoDestination = "no_destination",
    /// A flood whose copies the ingress port's flood credit could not pay for: the daemon's
    /// workers share their flood work fairly among the ports they serve (`crate::Forwarder::
    /// set_flood_credit`, docs/semantics.md "Flood fairness"). Known unicast is never dropped
    /// for it.
    FloodRate = "flood_rate",
    /// A received frame was longer than the receive buffer and arrived cut short (set by I/O
    /// layers).
    RxTruncated = "rx_truncated",
    /// A port without promiscuous mode received a unicast frame for an address it does not
    /// serve, which the device delivered anyway (set by I/O layers).
    RxFiltered = "rx_filtered",
    /// A read from the backend was too short to hold a frame (set by I/O layers).
    RxShort = "rx_short",
    /// The kernel dropped the frame because the port's receive ring was full (AF_PACKET
    /// `PACKET_STATISTICS`, or its socket queue for frames longer than a ring slot; AF_XDP
    /// `XDP_STATISTICS`, ring full or fill ring empty): the datapath did not keep up. Counted
    /// about once a second (set by I/O layers).
    RxRingFull = "rx_ring_full",
    /// A VXLAN port received a datagram that is not VXLAN (short, the I flag clear) or whose
    /// inner frame is shorter than an Ethernet header (set by I/O layers).
    VxlanMalformed = "vxlan_malformed",
    /// A VXLAN port received a datagram of a VNI other than its own (set by I/O layers).
    VxlanWrongVni = "vxlan_wrong_vni",
    /// A frame for a VXLAN port had no remote VTEP to go to: no MAC entry and an empty flood
    /// list (set by I/O layers).
    VxlanNoRemote = "vxlan_no_remote",
    /// A frame for an external VXLAN port whose VLAN maps to no VNI (`tunnel_info`), or
    /// that the bridge sent untagged (set by I/O layers).
    VxlanUnmappedVlan = "vxlan_unmapped_vlan",
    /// An external VXLAN port received a datagram whose VNI maps to no VLAN (set by I/O
    /// layers).
    VxlanUnmappedVni = "vxlan_unmapped_vni",
    /// The egress port's socket buffer or ring was full (`EAGAIN`; set by I/O layers).
    TxQueueFull = "tx_queue_full",
    /// The kernel took the frame and the device or its peer dropped it (`ENOBUFS`: a veth whose
    /// peer's backlog is full, a full qdisc; set by I/O layers). Not a super-frame the kernel
    /// refused to segment: those are segmented in software and resent, and counted as events.
    TxKernelDrop = "tx_kernel_drop",
    /// The kernel refused the frame as longer than the device's MTU allows (`EMSGSIZE`; set by
    /// I/O layers).
    TxTooLong = "tx_too_long",
    /// A frame crossed more bridges inside the daemon than a stack of devices allows (a loop
    /// of VLAN devices on host ports enslaved to each other's bridges).
    StackLoop = "stack_loop",
    /// The egress port failed to send for another reason, or the frame could not be segmented
    /// or checksummed in software for a port without those offloads (set by I/O layers).
    TxError = "tx_error",
}

/// Per-port counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// FDB entries not learned because a limit (port or bridge `fdb_max_learned`) was reached.
    pub fdb_learn_refused: u64,
    /// Learned FDB entries of this port evicted to make room because the table was full (the
    /// port holding most learned entries loses its oldest first).
    pub fdb_evictions: u64,
    /// Times a MAC address moved to this port.
    pub fdb_moves: u64,
    #[serde(serialize_with = "ser_drops")]
    pub drops: [u64; DropReason::COUNT],
    /// Frames that passed ingress on a VLAN-filtering bridge, by their priority (PCP) in the
    /// bridge: the bridge tag's, or what `pcp_mode` gave an untagged frame.
    pub rx_pcp: [u64; 8],
}

/// `NAME N` for every reason with a count, in [`DropReason::ALL`]'s order (for text output).
pub fn drop_words(d: &[u64; DropReason::COUNT]) -> Vec<String> {
    DropReason::ALL
        .iter()
        .filter(|r| d[**r as usize] != 0)
        .map(|r| format!("{} {}", r.name(), d[*r as usize]))
        .collect()
}

/// Drop counters as a JSON object of the reasons with a count.
pub(crate) fn ser_drops<S: serde::Serializer>(
    d: &[u64; DropReason::COUNT],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(None)?;
    for r in DropReason::ALL {
        let v = d[*r as usize];
        if v != 0 {
            m.serialize_entry(r.name(), &v)?;
        }
    }
    m.end()
}

impl Default for PortCounters {
    fn default() -> Self {
        PortCounters {
            rx_frames: 0,
            rx_bytes: 0,
            tx_frames: 0,
            tx_bytes: 0,
            fdb_learn_refused: 0,
            fdb_evictions: 0,
            fdb_moves: 0,
            drops: [0; DropReason::COUNT],
            rx_pcp: [0; 8],
        }
    }
}

impl PortCounters {
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Per-VLAN counters of one bridge: frames admitted on the VID, and copies sent on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VlanCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
}
