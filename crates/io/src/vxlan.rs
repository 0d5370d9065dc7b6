//! VXLAN port (RFC 7348): a UDP socket bound to `local:dstport` in the caller's network
//! namespace, carrying the port's frames to and from remote VTEPs. The kernel builds the outer
//! IP and UDP headers, routes and resolves neighbours; this backend adds and checks the 8-byte
//! VXLAN header ([`qbridge_wire::vxlan`]) and chooses where each frame goes.
//!
//! Where a frame goes is the port's own table, [`VxlanTable`] (`vxlan/table.rs`), as a Linux
//! vxlan device's FDB (`bridge fdb … self`) is the device's and not the bridge's: a unicast
//! destination MAC with an entry in the frame's VNI (static: `fdb add MAC dev NAME dst IP
//! [vni N]`; learned from a received frame's outer source when `learning` is on, aged after
//! [`VxlanTable::ageing`]) goes to that VTEP; any other frame — unknown unicast, broadcast,
//! multicast — to every VTEP of the VNI's flood list (`fdb append 00:00:00:00:00:00 dev NAME
//! dst IP [vni N]`, head-end replication). The bridge's FDB stays what it is for every port
//! (MAC → port, 8-byte keys); the remote IP lives here, where only this port's frames pay
//! for it (docs/decisions.md 55).
//!
//! A frame's VNI: the port's `id`, or on an external port (`external`, `vnifilter`) its VLAN's
//! in the table's [`TunnelMap`]: the bridge hands the port the frame tagged with its VLAN,
//! the port removes the tag and sends it in the VLAN's VNI; a received datagram enters tagged
//! with its VNI's VLAN (docs/decisions.md 58). Unmapped: dropped, counted
//! (`vxlan_unmapped_vlan`, `vxlan_unmapped_vni`).
//!
//! Threads and cost: the table is shared (`Arc<Mutex<_>>`) between the control thread, which
//! edits and shows it, and the worker that owns the port, which takes the lock once per burst
//! (never per frame; ports of other kinds never see it). A receive burst is one `recvmmsg(2)`
//! of up to [`BURST`] messages into fixed slots (a message: a datagram, or with `UDP_GRO` a
//! run of them), each inner frame then copied into a pool buffer; a transmit burst is one
//! `sendmmsg(2)` per [`BURST`] messages of one send socket (so one per socket used, in the
//! common case), the VXLAN header
//! and the frame as two iovecs (no copy), one datagram per destination VTEP. Nothing is
//! allocated after warm-up (flood lists are read in place under the lock; each frame's VXLAN
//! header is written into a vector the port keeps).
//!
//! Drops, each counted ([`VxlanDrops`], switch reasons of the same names): a datagram that is
//! not VXLAN or whose inner frame is shorter than an Ethernet header (`vxlan_malformed`), of
//! another VNI or one a `vnifilter` port does not accept (`vxlan_wrong_vni`), of a VNI mapped
//! to no VLAN (`vxlan_unmapped_vni`), longer than a slot (`rx_truncated`); a frame with no
//! VTEP to go to, the flood list empty (`vxlan_no_remote`), of a VLAN mapped to no VNI
//! (`vxlan_unmapped_vlan`). The socket never fragments
//! (`IP_PMTUDISC_DO`): an inner frame too long for the path is refused with `EMSGSIZE` and
//! counted `tx_too_long` (a VXLAN port's inner MTU is the underlay's minus
//! [`qbridge_wire::vxlan::IPV4_OVERHEAD`], or [`qbridge_wire::vxlan::IPV6_OVERHEAD`]).
//!
//! The outer source port follows the inner flow (RFC 7348 §5): a UDP socket cannot choose it
//! per datagram, so frames leave from [`TX_SOCKETS`] send sockets bound to `local` and ports
//! the kernel picks, each frame from the one [`qbridge_wire::vxlan::source_port`] (the flow
//! hash through every tag) selects; one flow, one port, in order. Receiving is on `dstport`.
//!
//! Segmented sends: runs of same-length datagrams to one VTEP from one send socket leave as
//! one `UDP_SEGMENT` message (up to [`GSO_MAX_SEGS`]), which the kernel splits; refused for
//! good (`EIO`, no such option), the port sends datagram by datagram.
//!
//! Coalesced receive: with `UDP_GRO` (where the kernel has it) a run of datagrams from one
//! sender arrives as one message of up to 64 KiB ([`GRO_SLOT_BYTES`] slots), split here into
//! its datagrams; frames beyond the caller's `max` wait for the next burst
//! ([`Port::rx_pending`]).
//!
//! Underlay options (ip-link(8)'s): `dev` binds every socket to the underlay device
//! (`SO_BINDTODEVICE`; a missing one refuses the port); a fixed `tos` is the sockets'
//! `IP_TOS`; `tos inherit` sends each message's TOS (the inner packet's,
//! [`qbridge_wire::vxlan::inherited_tos`]) as an `IP_TOS` control message beside the
//! `UDP_SEGMENT` one — no extra system call — and cuts segmented runs where it changes
//! (docs/semantics.md §U).
//!
//! IPv6 underlays (docs/decisions.md 69): a port whose `local` is IPv6 opens `AF_INET6`
//! sockets (`IPV6_V6ONLY`, `IPV6_PMTUDISC_DO` and `IPV6_DONTFRAG`: never fragmenting; `ttl` as `IPV6_UNICAST_HOPS`, a fixed `tos` as
//! `IPV6_TCLASS`, `tos inherit` as an `IPV6_TCLASS` control message); its table's VTEPs are
//! IPv6 (the control plane refuses the other family). The UDP checksum is the socket's,
//! computed; `udp6zerocsumtx`/`udp6zerocsumrx` are `UDP_NO_CHECK6_TX`/`_RX`. The outer
//! headers are [`qbridge_wire::vxlan::IPV6_OVERHEAD`] (70) bytes; [`outer`] is the same
//! arithmetic as a codec.
#![allow(unsafe_code)]

pub mod outer;
mod table;
pub use table::LearnHook;
pub use table::{TunnelMap, VxlanEntry, VxlanEntryKind, VxlanTable, DEFAULT_AGEING, MAX_LEARNED};

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use qbridge_packet::{Batch, BufPool};
use qbridge_wire::vxlan::{self, Vni};
use qbridge_wire::MacAddr;

use crate::port::{recycle, BackendDrops, Port, PortCaps, TxOutcome, TxReport};
use crate::IoError;

/// The L3 MTU a received TSO super-frame is cut back to (its sender's segment size is lost on
/// the way through the UDP socket): the default MTU of the hosts behind a VXLAN port, so the
/// segments fit every port at its default (docs/semantics.md §U.5).
pub const INNER_L3_MTU: usize = 1500;
/// Datagrams per `recvmmsg`/`sendmmsg`.
pub const BURST: usize = 32;
/// Send sockets per port: the outer source ports a port's flows spread over.
pub const TX_SOCKETS: usize = 8;
/// Most datagrams in one segmented send (`UDP_SEGMENT`; the kernel allows 64 or more).
pub const GSO_MAX_SEGS: usize = 64;
/// Most bytes of UDP payload in one segmented send (an IPv4 datagram's limit).
const GSO_MAX_BYTES: usize = 65_535 - 20 - 8;
/// `UDP_SEGMENT` (linux/udp.h): the size of each datagram of a segmented send.
const UDP_SEGMENT: libc::c_int = 103;

/// `UDP_NO_CHECK6_TX` (linux/udp.h): send IPv6 datagrams with a zero UDP checksum
/// (`udp6zerocsumtx`).
const UDP_NO_CHECK6_TX: libc::c_int = 101;
/// `UDP_NO_CHECK6_RX` (linux/udp.h): accept IPv6 datagrams with a zero UDP checksum
/// (`udp6zerocsumrx`; without it the kernel drops them, RFC 6935).
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// `IPV6_DONTFRAG` (linux/in6.h; not in libc for Linux): a datagram longer than the path MTU
/// is refused with `EMSGSIZE` at the send, as `IP_PMTUDISC_DO` does over IPv4 (IPv6 senders
/// may otherwise fragment).
const IPV6_DONTFRAG: libc::c_int = 62;

/// `UDP_GRO` (linux/udp.h): coalesced receive; the control message gives the datagram size.
const UDP_GRO: libc::c_int = 104;
/// A receive slot's bytes with `UDP_GRO`: one coalesced message, at most an IPv4 datagram.
pub const GRO_SLOT_BYTES: usize = 65_536;

/// The bytes of a control-message buffer.
fn bytemuck_u64(b: &[u64; 4]) -> &[u8] {
    // SAFETY: a [u64; 4] is 32 initialized bytes; u8 has no alignment or validity needs.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), 32) }
}

/// Datagrams received and not yet handed over: `slots[slot][off..end]`, `seg` bytes each.
#[derive(Clone, Copy, Debug)]
struct Pending {
    slot: usize,
    off: usize,
    end: usize,
    seg: usize,
    from: IpAddr,
}

/// One `UDP_SEGMENT` control message, laid out as `CMSG_SPACE(2)`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SegmentCmsg {
    hdr: libc::cmsghdr,
    seg: u16,
    _pad: [u8; 6],
}

/// One `IP_TOS` (IPv6: `IPV6_TCLASS`) control message (`tos inherit`: the TOS of one
/// message), `CMSG_SPACE(4)`.
#[repr(C)]
#[derive(Clone, Copy)]
struct TosCmsg {
    hdr: libc::cmsghdr,
    tos: libc::c_int,
    _pad: [u8; 4],
}

/// A message's control messages: `UDP_SEGMENT` (a run), then `IP_TOS` (`tos inherit`),
/// adjacent as `CMSG_NXTHDR` finds them; a message uses either or both.
#[repr(C)]
#[derive(Clone, Copy)]
struct SendCmsgs {
    seg: SegmentCmsg,
    tos: TosCmsg,
}
const _: () = assert!(mem::size_of::<SegmentCmsg>() == 24 && mem::size_of::<TosCmsg>() == 24);
/// Bytes of a receive slot: a VXLAN header and a 9216-byte jumbo inner frame.
pub const SLOT_BYTES: usize = vxlan::HEADER_LEN + 9216;

/// How to open a VXLAN port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanConfig {
    /// The port's name, for logs and errors.
    pub name: String,
    /// The one VNI of every frame (`id N`); `None`: an external port (`external`,
    /// `vnifilter`), whose frames' VNIs come from the table's VLAN ↔ VNI map
    /// ([`TunnelMap`]).
    pub vni: Option<Vni>,
    /// The local VTEP address the sockets bind; its family is the underlay's (every remote
    /// VTEP of the table is of it).
    pub local: IpAddr,
    /// The UDP port bound and sent to (4789).
    pub dstport: u16,
    /// The outer TTL; `None`: the kernel's default.
    pub ttl: Option<u8>,
    /// The underlay device every socket is bound to (`SO_BINDTODEVICE`); `None`: any.
    pub dev: Option<String>,
    /// The outer TOS; `None`: 0. `Fixed` is every socket's `IP_TOS`; `Inherit` is per datagram.
    pub tos: Option<vxlan::OuterTos>,
    /// Learn the outer source of received frames into the table.
    pub learning: bool,
    /// IPv6: send with a zero UDP checksum (`UDP_NO_CHECK6_TX`); default off: computed.
    pub udp6zerocsumtx: bool,
    /// IPv6: accept a zero UDP checksum (`UDP_NO_CHECK6_RX`); default off: the kernel drops
    /// such datagrams.
    pub udp6zerocsumrx: bool,
}

/// The table as the control thread and the port's worker share it.
pub type SharedVxlanTable = Arc<Mutex<VxlanTable>>;

/// What a VXLAN port dropped, by cause (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VxlanDrops {
    /// Not a VXLAN packet (short, the I flag clear) or an inner frame shorter than 14 bytes.
    pub malformed: u64,
    /// A VNI other than the port's.
    pub wrong_vni: u64,
    /// A frame with no VTEP to go to (no entry, empty flood list).
    pub no_remote: u64,
    /// A datagram longer than a receive slot.
    pub truncated: u64,
    /// External ports: a frame from the bridge whose VLAN maps to no VNI (or is untagged).
    pub unmapped_vlan: u64,
    /// External ports: a datagram of an accepted VNI that maps to no VLAN.
    pub unmapped_vni: u64,
}

/// The interface holding IPv4 address `a` in this namespace (the fast path encapsulates to
/// the underlay a port's `local` is on, decision 73).
pub fn device_of(a: Ipv4Addr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs(3) fills `head` with a list freed below with freeifaddrs(3).
    #[allow(unsafe_code)]
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs;
        // ifa_addr is null or a sockaddr of family sa_family (AF_INET: a sockaddr_in).
        #[allow(unsafe_code)]
        unsafe {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null() && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                if Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)) == a {
                    found = Some(
                        std::ffi::CStr::from_ptr(ifa.ifa_name)
                            .to_string_lossy()
                            .into_owned(),
                    );
                    break;
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    #[allow(unsafe_code)]
    unsafe {
        libc::freeifaddrs(head)
    };
    found
}

/// A VXLAN port: one UDP socket.
pub struct VxlanPort {
    cfg: VxlanConfig,
    /// Bound to `local:dstport`: receives.
    fd: OwnedFd,
    /// Send sockets, each on its own source port; a frame takes the one its inner flow
    /// hashes to (RFC 7348 §5), so one flow keeps one source port and order.
    tx: Vec<OwnedFd>,
    table: SharedVxlanTable,
    drops: VxlanDrops,
    hdr: [u8; vxlan::HEADER_LEN],
    slots: Vec<Vec<u8>>,
    /// Bytes of each slot: [`GRO_SLOT_BYTES`] with `UDP_GRO`, else [`SLOT_BYTES`].
    slot_bytes: usize,
    /// The receive socket coalesces (`UDP_GRO`).
    gro: bool,
    rx_cmsgs: Vec<[u64; 4]>,
    pending: Vec<Pending>,
    pending_at: usize,
    /// Messages received holding several datagrams (`UDP_GRO`).
    coalesced_receives: u64,
    /// Inner frames received with their TCP/UDP checksum left partial by the sender's
    /// offload, marked `NEEDS_CSUM` ([`qbridge_offload::find_partial_checksum`]).
    partial_checksums: u64,
    /// Each message's peer: a `sockaddr_in` (IPv4, in the first bytes) or a `sockaddr_in6`.
    names: Vec<libc::sockaddr_in6>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Per datagram to send: (send socket, frame index in the batch, destination).
    plan: Vec<(usize, usize, IpAddr)>,
    /// Per message of a `sendmmsg`: (datagrams, bytes each, destination, outer TOS).
    segs: Vec<(usize, usize, IpAddr, u8)>,
    /// The control messages of each message (`UDP_SEGMENT`, `IP_TOS`).
    cmsgs: Vec<SendCmsgs>,
    /// `tos inherit`: each datagram's outer TOS from its inner packet (an `IP_TOS` control
    /// message per message; runs are cut where the TOS changes).
    inherit_tos: bool,
    /// Segmented sends (`UDP_SEGMENT`) are used until the kernel refuses them for good.
    gso: bool,
    /// Segmented sends made (each several datagrams).
    segmented_sends: u64,
    /// Per frame of the burst being sent, its VXLAN header (VNIs differ on external ports).
    hdrs: Vec<[u8; vxlan::HEADER_LEN]>,
}

impl std::fmt::Debug for VxlanPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VxlanPort")
            .field("cfg", &self.cfg)
            .field("drops", &self.drops)
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers in `iovs` and `msgs` are scratch space, rebuilt before every
// syscall from buffers the port owns or borrows for that call; none outlives a call.
unsafe impl Send for VxlanPort {}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all zeros is a valid value.
    let mut s: libc::sockaddr_in = unsafe { mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    s
}

fn sockaddr6(a: Ipv6Addr, port: u16) -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain old data; all zeros is a valid value.
    let mut s: libc::sockaddr_in6 = unsafe { mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    s.sin6_port = port.to_be();
    s.sin6_addr.s6_addr = a.octets();
    s
}

/// Writes `ip:port` into `n` (a `sockaddr_in` in its first 16 bytes for IPv4); returns the
/// length to pass.
fn fill_name(n: &mut libc::sockaddr_in6, ip: IpAddr, port: u16) -> libc::socklen_t {
    match ip {
        IpAddr::V4(a) => {
            let s = sockaddr(SocketAddrV4::new(a, port));
            const _: () = assert!(
                mem::size_of::<libc::sockaddr_in>() <= mem::size_of::<libc::sockaddr_in6>()
                    && mem::align_of::<libc::sockaddr_in>()
                        <= mem::align_of::<libc::sockaddr_in6>()
            );
            // SAFETY: a sockaddr_in fits in a sockaddr_in6, whose alignment is at least its.
            unsafe { std::ptr::write((n as *mut libc::sockaddr_in6).cast(), s) };
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        IpAddr::V6(a) => {
            *n = sockaddr6(a, port);
            mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The address the kernel wrote into `n` (`recvmmsg`'s source): IPv4 or IPv6 by its family.
fn name_ip(n: &libc::sockaddr_in6) -> IpAddr {
    if n.sin6_family == libc::AF_INET as libc::sa_family_t {
        // SAFETY: the kernel wrote a sockaddr_in there (its family says so); it fits.
        let s: libc::sockaddr_in =
            unsafe { std::ptr::read((n as *const libc::sockaddr_in6).cast()) };
        IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)))
    } else {
        let a = Ipv6Addr::from(n.sin6_addr.s6_addr);
        // A mapped source cannot reach a socket bound with IPV6_V6ONLY; read it as IPv4 if it does.
        a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
    }
}

/// `SO_BINDTODEVICE`: the socket sends and receives through `dev` only (ip-link(8)'s `dev` of
/// a vxlan device: the underlay device).
fn bind_to_device(fd: std::os::fd::RawFd, dev: &str) -> io::Result<()> {
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ || dev.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: `dev` is a valid buffer of `dev.len()` bytes, which the kernel copies (it
    // takes a name without a terminating NUL when the length says where it ends).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            dev.as_ptr().cast(),
            dev.len() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A nonblocking UDP socket bound to `cfg.local:port` (0: a port the kernel picks), never
/// fragmenting, with `cfg.ttl`, a fixed `cfg.tos`, and bound to `cfg.dev`.
fn udp_socket(cfg: &VxlanConfig, port: u16) -> Result<OwnedFd, IoError> {
    {
        let sys = |op: &'static str, e: io::Error| IoError::Sys {
            op,
            ifname: cfg.name.clone(),
            source: e,
        };
        let v6 = cfg.local.is_ipv6();
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let raw = unsafe {
            libc::socket(
                if v6 { libc::AF_INET6 } else { libc::AF_INET },
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        };
        if raw < 0 {
            return Err(sys(
                if v6 {
                    "socket(AF_INET6, SOCK_DGRAM)"
                } else {
                    "socket(AF_INET, SOCK_DGRAM)"
                },
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if v6 {
            return udp6_options(cfg, fd, port);
        }
        crate::sys::setsockopt_int(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
        .map_err(|e| sys("setsockopt(IP_MTU_DISCOVER)", e))?;
        if let Some(ttl) = cfg.ttl {
            crate::sys::setsockopt_int(
                fd.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_TTL,
                i32::from(ttl),
            )
            .map_err(|e| sys("setsockopt(IP_TTL)", e))?;
        }
        if let Some(vxlan::OuterTos::Fixed(tos)) = cfg.tos {
            crate::sys::setsockopt_int(
                fd.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_TOS,
                i32::from(tos),
            )
            .map_err(|e| sys("setsockopt(IP_TOS)", e))?;
        }
        bind_common(cfg, fd, port)
    }
}

/// The IPv6 socket's options (`ttl`: the hop limit, a fixed `tos`: the traffic class; never
/// fragmenting; the zero-checksum options), then [`bind_common`].
fn udp6_options(cfg: &VxlanConfig, fd: OwnedFd, port: u16) -> Result<OwnedFd, IoError> {
    let sys = |op: &'static str, e: io::Error| IoError::Sys {
        op,
        ifname: cfg.name.clone(),
        source: e,
    };
    let raw = fd.as_raw_fd();
    let set =
        |level, opt, v, op| crate::sys::setsockopt_int(raw, level, opt, v).map_err(|e| sys(op, e));
    set(
        libc::IPPROTO_IPV6,
        libc::IPV6_V6ONLY,
        1,
        "setsockopt(IPV6_V6ONLY)",
    )?;
    set(
        libc::IPPROTO_IPV6,
        libc::IPV6_MTU_DISCOVER,
        libc::IPV6_PMTUDISC_DO,
        "setsockopt(IPV6_MTU_DISCOVER)",
    )?;
    set(
        libc::IPPROTO_IPV6,
        IPV6_DONTFRAG,
        1,
        "setsockopt(IPV6_DONTFRAG)",
    )?;
    if let Some(ttl) = cfg.ttl {
        set(
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
            i32::from(ttl),
            "setsockopt(IPV6_UNICAST_HOPS)",
        )?;
    }
    if let Some(vxlan::OuterTos::Fixed(tos)) = cfg.tos {
        set(
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            i32::from(tos),
            "setsockopt(IPV6_TCLASS)",
        )?;
    }
    if cfg.udp6zerocsumtx {
        set(
            libc::SOL_UDP,
            UDP_NO_CHECK6_TX,
            1,
            "setsockopt(UDP_NO_CHECK6_TX)",
        )?;
    }
    if cfg.udp6zerocsumrx {
        set(
            libc::SOL_UDP,
            UDP_NO_CHECK6_RX,
            1,
            "setsockopt(UDP_NO_CHECK6_RX)",
        )?;
    }
    bind_common(cfg, fd, port)
}

/// `dev`, the buffer sizes, and the bind to `cfg.local:port`, of either family.
fn bind_common(cfg: &VxlanConfig, fd: OwnedFd, port: u16) -> Result<OwnedFd, IoError> {
    {
        if let Some(dev) = &cfg.dev {
            bind_to_device(fd.as_raw_fd(), dev).map_err(|e| {
                IoError::Invalid(format!(
                    "vxlan port {}: dev {dev}: {e}{}",
                    cfg.name,
                    match e.raw_os_error() {
                        Some(libc::ENODEV) => " (no such device in this namespace)",
                        Some(libc::EPERM) => " (binding to a device needs CAP_NET_RAW)",
                        _ => "",
                    }
                ))
            })?;
        }
        let _ =
            crate::sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
        let _ =
            crate::sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        // SAFETY: plain old data; zeros are valid.
        let mut sa: libc::sockaddr_in6 = unsafe { mem::zeroed() };
        let len = fill_name(&mut sa, cfg.local, port);
        // SAFETY: `sa` holds a valid sockaddr of the family and length passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_in6).cast(),
                len,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(IoError::Invalid(format!(
                "vxlan port {}: cannot bind {}: {e}{}",
                cfg.name,
                std::net::SocketAddr::new(cfg.local, port),
                if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                    " (local must be an address of this namespace)"
                } else if e.raw_os_error() == Some(libc::EADDRINUSE) {
                    " (another socket, a kernel vxlan device or another port, has it)"
                } else {
                    ""
                }
            )));
        }
        Ok(fd)
    }
}

/// The VXLAN header of `vni` (flags `I`).
fn header(vni: Vni) -> [u8; vxlan::HEADER_LEN] {
    let mut h = [0u8; vxlan::HEADER_LEN];
    // Cannot fail: the buffer is a header's length.
    let _ = vxlan::Repr { vni }.emit(&mut h);
    h
}

impl VxlanPort {
    /// Binds `local:dstport` (UDP, nonblocking, no fragmentation, `ttl`) for receiving, and
    /// [`TX_SOCKETS`] sockets on `local` and ports the kernel picks for sending.
    pub fn open(cfg: VxlanConfig, table: SharedVxlanTable) -> Result<VxlanPort, IoError> {
        let fd = udp_socket(&cfg, cfg.dstport)?;
        // Coalesced receive where the kernel has it (5.0 and later): one message per run of
        // datagrams from one sender.
        let gro = crate::sys::setsockopt_int(fd.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1).is_ok();
        let slot_bytes = if gro { GRO_SLOT_BYTES } else { SLOT_BYTES };
        let tx = (0..TX_SOCKETS)
            .map(|_| udp_socket(&cfg, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let hdr = cfg.vni.map_or([0; vxlan::HEADER_LEN], header);
        let inherit_tos = cfg.tos == Some(vxlan::OuterTos::Inherit);
        // A segmented send needs the checksum the device completes: with a zero IPv6 checksum
        // (`udp6zerocsumtx`) the kernel refuses it (EINVAL) every time, so never try.
        let gso = !(cfg.local.is_ipv6() && cfg.udp6zerocsumtx);
        Ok(VxlanPort {
            cfg,
            fd,
            tx,
            table,
            drops: VxlanDrops::default(),
            hdr,
            slots: (0..BURST).map(|_| vec![0u8; slot_bytes]).collect(),
            slot_bytes,
            gro,
            rx_cmsgs: vec![[0u64; 4]; BURST],
            pending: Vec::with_capacity(BURST),
            pending_at: 0,
            coalesced_receives: 0,
            partial_checksums: 0,
            // SAFETY: plain old data; zeros are valid.
            names: vec![unsafe { mem::zeroed() }; BURST],
            iovs: Vec::with_capacity(2 * BURST * GSO_MAX_SEGS),
            segs: Vec::with_capacity(BURST),
            // SAFETY: plain old data; zeros are valid.
            cmsgs: vec![unsafe { mem::zeroed() }; BURST],
            inherit_tos,
            gso,
            segmented_sends: 0,
            msgs: Vec::with_capacity(BURST),
            plan: Vec::with_capacity(4 * BURST),
            hdrs: Vec::with_capacity(BURST),
        })
    }

    pub fn config(&self) -> &VxlanConfig {
        &self.cfg
    }

    /// The send sockets' local ports, by socket: a frame leaves from socket
    /// `source_port(frame) % TX_SOCKETS` (the fast path builds the same outer header,
    /// decision 73). 0 for a socket whose name cannot be read.
    pub fn send_ports(&self) -> [u16; TX_SOCKETS] {
        let mut out = [0u16; TX_SOCKETS];
        for (o, fd) in out.iter_mut().zip(&self.tx) {
            // SAFETY: plain old data; zeros are valid.
            let mut n: libc::sockaddr_in6 = unsafe { mem::zeroed() };
            let mut len = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            // SAFETY: getsockname(2) writes at most `len` bytes into `n`, which has them.
            let rc = unsafe {
                libc::getsockname(
                    fd.as_raw_fd(),
                    (&mut n as *mut libc::sockaddr_in6).cast(),
                    &mut len,
                )
            };
            // sin_port and sin6_port are at the same offset, in network order.
            if rc == 0 {
                *o = u16::from_be(n.sin6_port);
            }
        }
        out
    }

    /// Hands the received datagrams in `self.pending` to `batch`, at most `max` frames; what
    /// is left stays for the next burst ([`Port::rx_pending`]).
    fn deliver(&mut self, batch: &mut Batch, pool: &mut BufPool, max: usize) -> usize {
        let now = Instant::now();
        // Once per burst, for learning and the VLAN ↔ VNI map (external ports).
        let mut table = if self.cfg.learning || self.cfg.vni.is_none() {
            Some(self.table.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        };
        let mut n = 0;
        while n < max && self.pending_at < self.pending.len() {
            let e = &mut self.pending[self.pending_at];
            let stop = (e.off + e.seg.max(1)).min(e.end);
            let dgram = &self.slots[e.slot][e.off..stop];
            let from = e.from;
            e.off = stop;
            if e.off >= e.end {
                self.pending_at += 1;
            }
            let Ok(pkt) = vxlan::Packet::new_checked(dgram) else {
                self.drops.malformed += 1;
                continue;
            };
            let vni = pkt.vni();
            let inner = pkt.inner();
            let tag = match (self.cfg.vni, table.as_ref()) {
                (Some(own), _) if vni != own => {
                    self.drops.wrong_vni += 1;
                    continue;
                }
                (Some(_), _) => None,
                // External: the VNI must be accepted and map to a VLAN.
                (None, Some(t)) if t.tunnels.filters_out(vni) => {
                    self.drops.wrong_vni += 1;
                    continue;
                }
                (None, Some(t)) => match t.tunnels.tag_of_vni(vni) {
                    Some(tag) => Some(tag),
                    None => {
                        self.drops.unmapped_vni += 1;
                        continue;
                    }
                },
                (None, None) => None,
            };
            if inner.len() < qbridge_wire::ethernet::HDR_LEN {
                self.drops.malformed += 1;
                continue;
            }
            if self.cfg.learning {
                if let Some(t) = table.as_mut() {
                    t.learn(vni, MacAddr::from_bytes(&inner[6..12]), from, now);
                }
            }
            let mut p = pool.take();
            p.set_frame(inner);
            // A same-host sender's offload left the inner checksum for the wire to complete
            // (a veth completes nothing, and the socket drops the skb's CHECKSUM_PARTIAL):
            // restore the state, for the egress port to pass on or complete. Read on the frame
            // as it came (its own tags are the well-known ones), before the VNI's tag, whose
            // TPID may be any.
            let partial = qbridge_offload::find_partial_checksum(
                inner,
                qbridge_wire::Tpid::is_well_known,
                INNER_L3_MTU,
            );
            if let Some(tag) = tag {
                // The VNI's VLAN, as the bridge tags it: the frame enters tagged.
                p.insert_tag(12, tag);
            }
            if let Some(mut meta) = partial {
                if tag.is_some() {
                    meta.csum_start += 4;
                    if meta.hdr_len != 0 {
                        meta.hdr_len += 4;
                    }
                }
                p.offload = meta;
                self.partial_checksums += 1;
            }
            batch.push(p);
            n += 1;
        }
        n
    }

    /// Messages received holding several datagrams (`UDP_GRO`) so far.
    pub fn coalesced_receives(&self) -> u64 {
        self.coalesced_receives
    }

    /// Inner frames received with a checksum the sender left partial, marked `NEEDS_CSUM`
    /// so far.
    pub fn partial_checksums(&self) -> u64 {
        self.partial_checksums
    }

    /// Segmented sends (`UDP_SEGMENT`, several datagrams in one) made so far.
    pub fn segmented_sends(&self) -> u64 {
        self.segmented_sends
    }

    /// What this port dropped, by VXLAN cause.
    pub fn vxlan_drops(&self) -> VxlanDrops {
        self.drops
    }

    /// The shared drop counts, for a caller that keeps the port boxed.
    pub fn table(&self) -> &SharedVxlanTable {
        &self.table
    }

    /// The outer TOS of frame `i` of `frames` with `tos inherit` (0 otherwise: unused).
    #[inline]
    fn tos_of(&self, frames: &Batch, i: usize) -> u8 {
        if self.inherit_tos {
            vxlan::inherited_tos(frames.pkts[i].frame())
        } else {
            0
        }
    }

    /// Sends the datagrams `self.plan[from..to]` (one send socket's, by destination, in frame
    /// order) of `frames`: one `sendmmsg` per [`BURST`] messages, each message one datagram
    /// or, with `UDP_SEGMENT`, a run of up to [`GSO_MAX_SEGS`] datagrams to one VTEP of one
    /// length (the last may be shorter) that the kernel splits (more calls only when one
    /// fails: the failed datagram is counted and the rest resent).
    fn send_run(
        &mut self,
        frames: &Batch,
        from: usize,
        to: usize,
        report: &mut TxReport,
    ) -> Result<(), IoError> {
        let sock = self.plan[from].0;
        let mut start = from;
        // Datagrams before this index go one by one (a segmented send of them was refused).
        let mut plain_until = from;
        while start < to {
            self.iovs.clear();
            self.msgs.clear();
            self.segs.clear();
            let mut p = start;
            while p < to && self.segs.len() < BURST {
                let (_, fi, ip) = self.plan[p];
                let len = frames.pkts[fi].len();
                let tos = self.tos_of(frames, fi);
                let mut n = 1;
                if self.gso && p >= plain_until {
                    let mut total = len + vxlan::HEADER_LEN;
                    while p + n < to && n < GSO_MAX_SEGS {
                        let (_, fj, ipj) = self.plan[p + n];
                        let lj = frames.pkts[fj].len();
                        if ipj != ip
                            || lj > len
                            || total + lj + vxlan::HEADER_LEN > GSO_MAX_BYTES
                            || self.tos_of(frames, fj) != tos
                        {
                            break;
                        }
                        total += lj + vxlan::HEADER_LEN;
                        n += 1;
                        if lj < len {
                            break;
                        }
                    }
                }
                for q in p..p + n {
                    let fi = self.plan[q].1;
                    let f = frames.pkts[fi].frame();
                    self.iovs.push(libc::iovec {
                        iov_base: self.hdrs[fi].as_mut_ptr().cast(),
                        iov_len: vxlan::HEADER_LEN,
                    });
                    self.iovs.push(libc::iovec {
                        iov_base: f.as_ptr() as *mut _,
                        iov_len: f.len(),
                    });
                }
                self.segs.push((n, len + vxlan::HEADER_LEN, ip, tos));
                p += n;
            }
            let mut at = 0;
            for k in 0..self.segs.len() {
                let (n, seg, ip, tos) = self.segs[k];
                let namelen = fill_name(&mut self.names[k], ip, self.cfg.dstport);
                // SAFETY: plain old data; zeros are valid.
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_name = (&mut self.names[k] as *mut libc::sockaddr_in6).cast();
                m.msg_hdr.msg_namelen = namelen;
                m.msg_hdr.msg_iov = self.iovs[at..].as_mut_ptr();
                m.msg_hdr.msg_iovlen = 2 * n;
                at += 2 * n;
                let c = &mut self.cmsgs[k];
                if n > 1 {
                    c.seg.hdr.cmsg_len = mem::size_of::<libc::cmsghdr>() + 2;
                    c.seg.hdr.cmsg_level = libc::SOL_UDP;
                    c.seg.hdr.cmsg_type = UDP_SEGMENT;
                    c.seg.seg = seg as u16;
                    m.msg_hdr.msg_control = (&mut c.seg as *mut SegmentCmsg).cast();
                    m.msg_hdr.msg_controllen = mem::size_of::<SegmentCmsg>();
                }
                if self.inherit_tos {
                    c.tos.hdr.cmsg_len = mem::size_of::<libc::cmsghdr>() + 4;
                    (c.tos.hdr.cmsg_level, c.tos.hdr.cmsg_type) = if ip.is_ipv6() {
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                    } else {
                        (libc::IPPROTO_IP, libc::IP_TOS)
                    };
                    c.tos.tos = libc::c_int::from(tos);
                    if n > 1 {
                        // Both: `seg` then `tos`, adjacent in `SendCmsgs`.
                        m.msg_hdr.msg_controllen = mem::size_of::<SendCmsgs>();
                    } else {
                        m.msg_hdr.msg_control = (&mut c.tos as *mut TosCmsg).cast();
                        m.msg_hdr.msg_controllen = mem::size_of::<TosCmsg>();
                    }
                }
                self.msgs.push(m);
            }
            // SAFETY: `msgs` holds headers whose names, iovecs and control messages point to
            // live buffers (the port's and the batch's frames), which the kernel only reads.
            let rc = unsafe {
                libc::sendmmsg(
                    self.tx[sock].as_raw_fd(),
                    self.msgs.as_mut_ptr(),
                    self.msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc > 0 {
                for k in 0..rc as usize {
                    report.sent += self.segs[k].0;
                    start += self.segs[k].0;
                    if self.segs[k].0 > 1 {
                        self.segmented_sends += 1;
                    }
                }
                continue;
            }
            let e = io::Error::last_os_error();
            let errno = e.raw_os_error();
            let n = self.segs[0].0;
            if errno == Some(libc::EINTR) {
                continue;
            }
            if n > 1 {
                // The segmented send was refused: the device cannot (no checksum offload:
                // `EIO`; no `UDP_SEGMENT`: `ENOPROTOOPT`/`EOPNOTSUPP`) — never again on this
                // port — or this run cannot (`EINVAL`: longer than the path allows, ...):
                // its datagrams go one by one, and are judged one by one.
                if matches!(
                    errno,
                    Some(libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                ) {
                    self.gso = false;
                }
                plain_until = start + n;
                continue;
            }
            // The datagram at `start` failed: count it and go on with the next.
            match errno {
                Some(libc::EAGAIN) => report.queue_full += 1,
                Some(libc::ENOBUFS) => report.kernel_drop += 1,
                Some(libc::EMSGSIZE) => report.too_long += 1,
                // No route, no neighbour yet: the datagram is lost, the port stays up.
                _ => report.error += 1,
            }
            start += 1;
        }
        Ok(())
    }
}

impl Port for VxlanPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        if max == 0 {
            return Ok(0);
        }
        if self.pending_at < self.pending.len() {
            return Ok(self.deliver(batch, pool, max));
        }
        self.pending.clear();
        self.pending_at = 0;
        let want = max.min(BURST);
        self.iovs.clear();
        self.msgs.clear();
        for k in 0..want {
            self.iovs.push(libc::iovec {
                iov_base: self.slots[k].as_mut_ptr().cast(),
                iov_len: self.slot_bytes,
            });
        }
        for k in 0..want {
            // SAFETY: plain old data; zeros are valid.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_name = (&mut self.names[k] as *mut libc::sockaddr_in6).cast();
            m.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            m.msg_hdr.msg_iov = &mut self.iovs[k];
            m.msg_hdr.msg_iovlen = 1;
            if self.gro {
                m.msg_hdr.msg_control = self.rx_cmsgs[k].as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = mem::size_of::<[u64; 4]>();
            }
            self.msgs.push(m);
        }
        // SAFETY: `msgs` holds `want` headers pointing to the port's own slots, names and
        // control buffers, of the stated sizes; the kernel writes at most that much.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                // An ICMP error of an earlier datagram (port unreachable, ...): not ours to
                // stop for.
                Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH) => Ok(0),
                _ => Err(IoError::Sys {
                    op: "recvmmsg",
                    ifname: self.cfg.name.clone(),
                    source: e,
                }),
            };
        }
        for k in 0..rc as usize {
            let m = &self.msgs[k];
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.drops.truncated += 1;
                continue;
            }
            let len = (m.msg_len as usize).min(self.slot_bytes);
            // With UDP_GRO, several datagrams of one size (the last may be shorter) arrive as
            // one message and a control message says the size.
            let mut seg = len;
            if self.gro && m.msg_hdr.msg_controllen >= mem::size_of::<libc::cmsghdr>() + 2 {
                let c = &self.rx_cmsgs[k];
                // SAFETY: the buffer is 32 bytes, 8-aligned, and holds at least a cmsghdr
                // (msg_controllen says the kernel wrote one); read as plain data.
                let hdr: libc::cmsghdr = unsafe { std::ptr::read(c.as_ptr().cast()) };
                if hdr.cmsg_level == libc::SOL_UDP && hdr.cmsg_type == UDP_GRO {
                    let at = mem::size_of::<libc::cmsghdr>();
                    let bytes: &[u8] = bytemuck_u64(c);
                    let v = if hdr.cmsg_len >= at + 4 {
                        i32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                            as usize
                    } else {
                        u16::from_ne_bytes([bytes[at], bytes[at + 1]]) as usize
                    };
                    if v > 0 {
                        seg = v;
                    }
                }
            }
            if seg < len {
                self.coalesced_receives += 1;
            }
            let from = name_ip(&self.names[k]);
            self.pending.push(Pending {
                slot: k,
                off: 0,
                end: len,
                seg,
                from,
            });
        }
        Ok(self.deliver(batch, pool, max))
    }

    fn rx_pending(&self) -> bool {
        self.pending_at < self.pending.len()
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        let mut refused = Batch::with_capacity(0);
        self.tx_burst_report(batch, pool, &mut refused)
            .map(|r| r.outcome())
    }

    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        _refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        let mut report = TxReport::default();
        if batch.is_empty() {
            return Ok(report);
        }
        let now = Instant::now();
        self.plan.clear();
        self.hdrs.clear();
        self.hdrs.resize(batch.len(), self.hdr);
        {
            let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
            for (i, p) in batch.pkts.iter_mut().enumerate() {
                if p.len() < 6 {
                    report.error += 1;
                    continue;
                }
                let vni = match self.cfg.vni {
                    Some(v) => v,
                    // External: the frame's VLAN selects the VNI, and its tag is removed.
                    None => match t.tunnels.vni_of_frame(p.frame()) {
                        Some(v) => {
                            p.remove_tag(12);
                            self.hdrs[i] = header(v);
                            v
                        }
                        None => {
                            self.drops.unmapped_vlan += 1;
                            continue;
                        }
                    },
                };
                let f = p.frame();
                let sock = usize::from(vxlan::source_port(f)) % TX_SOCKETS;
                match t.lookup(vni, MacAddr::from_bytes(&f[..6]), now) {
                    Some(ip) => self.plan.push((sock, i, ip)),
                    None => match t.flood(vni) {
                        [] => self.drops.no_remote += 1,
                        l => self.plan.extend(l.iter().map(|ip| (sock, i, *ip))),
                    },
                }
            }
        }
        // By socket, then destination, each in frame order (a flow keeps one socket and one
        // VTEP, so its order; runs to one VTEP can be sent segmented). No allocation: an
        // unstable sort on a key unique per datagram.
        self.plan
            .sort_unstable_by_key(|(sock, i, ip)| (*sock, *ip, *i));
        let total = self.plan.len();
        let mut from = 0;
        while from < total {
            let sock = self.plan[from].0;
            let run = self.plan[from..].iter().take_while(|e| e.0 == sock).count();
            let to = from + run;
            self.send_run(batch, from, to, &mut report)?;
            from = to;
        }
        recycle(batch, pool);
        Ok(report)
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            vnet_hdr: false,
            tso: false,
            csum: false,
            max_frame: SLOT_BYTES - vxlan::HEADER_LEN,
            device: None,
        }
    }

    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn drops(&self) -> BackendDrops {
        BackendDrops {
            rx_truncated: self.drops.truncated,
            vxlan_malformed: self.drops.malformed,
            vxlan_wrong_vni: self.drops.wrong_vni,
            vxlan_no_remote: self.drops.no_remote,
            vxlan_unmapped_vlan: self.drops.unmapped_vlan,
            vxlan_unmapped_vni: self.drops.unmapped_vni,
            ..BackendDrops::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    fn frame(dst: [u8; 6], src: [u8; 6], len: usize) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.resize(len, 0x5a);
        f
    }

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    const V100: Vni = match Vni::new(100) {
        Some(v) => v,
        None => panic!(),
    };

    /// A port on 127.0.0.1:`port` with VNI 100 and two "remote VTEPs": UDP sockets on
    /// 127.0.0.2 and 127.0.0.3 of the same port.
    fn setup(port: u16) -> Option<(VxlanPort, UdpSocket, UdpSocket)> {
        let r2 = UdpSocket::bind(("127.0.0.2", port)).ok()?;
        let r3 = UdpSocket::bind(("127.0.0.3", port)).ok()?;
        for s in [&r2, &r3] {
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
        }
        let cfg = VxlanConfig {
            name: "vx".into(),
            vni: Vni::new(100),
            local: Ipv4Addr::LOCALHOST.into(),
            dstport: port,
            ttl: Some(9),
            dev: None,
            tos: None,
            learning: true,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        Some((VxlanPort::open(cfg, VxlanTable::shared()).unwrap(), r2, r3))
    }

    /// `dev` binds every socket to the underlay device, and a missing one is refused with a
    /// reason; a fixed `tos` is the send sockets' `IP_TOS`.
    #[test]
    fn dev_and_tos_are_socket_options() {
        let cfg = |dev: &str, tos| VxlanConfig {
            name: "vx".into(),
            vni: Some(Vni::new(5).unwrap()),
            local: Ipv4Addr::LOCALHOST.into(),
            dstport: 47895,
            ttl: None,
            dev: Some(dev.into()),
            tos,
            learning: true,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        let e = VxlanPort::open(cfg("nosuch-qbx0", None), VxlanTable::shared()).unwrap_err();
        let msg = e.to_string();
        if msg.contains("CAP_NET_RAW") {
            eprintln!("SKIPPED: not allowed to bind to a device: {msg}");
            return;
        }
        assert!(
            msg.contains("dev nosuch-qbx0") && msg.contains("no such device in this namespace"),
            "{msg}"
        );
        let p = VxlanPort::open(
            cfg("lo", Some(vxlan::OuterTos::Fixed(0x28))),
            VxlanTable::shared(),
        )
        .unwrap();
        for fd in p.tx.iter().chain([&p.fd]) {
            let mut tos: libc::c_int = 0;
            let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
            let mut name = [0u8; libc::IFNAMSIZ];
            let mut name_len = name.len() as libc::socklen_t;
            // SAFETY: the out-buffers are live and of the sizes passed.
            let (rc_tos, rc_dev) = unsafe {
                (
                    libc::getsockopt(
                        fd.as_raw_fd(),
                        libc::IPPROTO_IP,
                        libc::IP_TOS,
                        (&mut tos as *mut libc::c_int).cast(),
                        &mut len,
                    ),
                    libc::getsockopt(
                        fd.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_BINDTODEVICE,
                        name.as_mut_ptr().cast(),
                        &mut name_len,
                    ),
                )
            };
            assert_eq!((rc_tos, rc_dev), (0, 0));
            assert_eq!(tos, 0x28);
            assert_eq!(&name[..3], b"lo\0");
        }
    }

    /// One datagram and the TOS byte it arrived with (`IP_RECVTOS` on `s`).
    fn recv_with_tos(s: &UdpSocket) -> Option<(Vec<u8>, u8)> {
        let mut b = vec![0u8; 65536];
        let mut ctl = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        // SAFETY: plain old data; zeros are valid.
        let mut m: libc::msghdr = unsafe { mem::zeroed() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.as_mut_ptr().cast();
        m.msg_controllen = mem::size_of_val(&ctl);
        // SAFETY: `m` points to live buffers of the sizes stated.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut m, 0) };
        if n < 0 {
            return None;
        }
        b.truncate(n as usize);
        let mut tos = None;
        // SAFETY: the kernel wrote `msg_controllen` bytes of control messages into `ctl`;
        // the CMSG macros stay within them.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m);
            while !c.is_null() {
                if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                    tos = Some(*libc::CMSG_DATA(c));
                }
                c = libc::CMSG_NXTHDR(&m, c);
            }
        }
        Some((b, tos?))
    }

    /// `tos inherit`: each datagram's outer TOS is its inner packet's DSCP and ECN (CE leaves
    /// as ECT(0)), 0 for a frame that is not IP; a run of one length is cut where the TOS
    /// changes, and each part keeps its own.
    #[test]
    fn inherited_tos_follows_each_inner_packet() {
        let r = UdpSocket::bind(("127.0.0.2", 47896)).unwrap();
        r.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        crate::sys::setsockopt_int(r.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVTOS, 1).unwrap();
        let cfg = VxlanConfig {
            name: "vx".into(),
            vni: Some(Vni::new(100).unwrap()),
            local: Ipv4Addr::LOCALHOST.into(),
            dstport: 47896,
            ttl: None,
            dev: None,
            tos: Some(vxlan::OuterTos::Inherit),
            learning: true,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        let mut p = VxlanPort::open(cfg, VxlanTable::shared()).unwrap();
        p.table()
            .lock()
            .unwrap()
            .append_flood(Vni::new(100).unwrap(), "127.0.0.2".parse().unwrap());
        let ip = |ethertype: [u8; 2], b0: u8, b1: u8, len: usize| {
            let mut f = [0xff; 6].to_vec();
            f.extend_from_slice(&A);
            f.extend_from_slice(&ethertype);
            f.extend_from_slice(&[b0, b1]);
            f.resize(len, 0);
            f
        };
        // One flow's worth of same-length frames (one source socket: the same MACs, and the
        // flow hash of frames that are not TCP/UDP reads addresses only), TOS changing.
        let frames = [
            (ip([0x08, 0x00], 0x45, 0xb8, 300), 0xb8),
            (ip([0x08, 0x00], 0x45, 0xb8, 300), 0xb8),
            (ip([0x08, 0x00], 0x45, 0xbb, 300), 0xba),
            (ip([0x86, 0xdd], 0x62, 0x80, 300), 0x28),
            (ip([0x08, 0x06], 0, 1, 300), 0),
        ];
        let mut pool = BufPool::new(16);
        let mut b = Batch::with_capacity(8);
        for (f, _) in &frames {
            b.push(qbridge_packet::PacketBuf::from_frame(f));
        }
        let rep = p.tx_burst(&mut b, &mut pool).unwrap();
        assert_eq!(rep.sent, frames.len());
        // The first two (one length, one TOS) left as one segmented send with both control
        // messages.
        assert_eq!(p.segmented_sends(), 1);
        let mut got: Vec<(Vec<u8>, u8)> = (0..frames.len())
            .map(|_| recv_with_tos(&r).unwrap())
            .map(|(d, t)| (d[8..].to_vec(), t))
            .collect();
        let mut want: Vec<(Vec<u8>, u8)> = frames.to_vec();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    fn recv(s: &UdpSocket) -> Option<Vec<u8>> {
        let mut b = vec![0u8; 65536];
        let n = s.recv(&mut b).ok()?;
        b.truncate(n);
        Some(b)
    }

    fn rx_all(p: &mut VxlanPort, pool: &mut BufPool) -> Vec<Vec<u8>> {
        let mut batch = Batch::with_capacity(64);
        for _ in 0..50 {
            let _ = p.rx_burst(&mut batch, pool, 64).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        batch.drain().map(|b| b.frame().to_vec()).collect()
    }

    #[test]
    fn floods_to_every_listed_vtep_then_unicasts_to_the_learned_one() {
        let Some((mut p, r2, r3)) = setup(47891) else {
            eprintln!("SKIPPED: cannot bind 127.0.0.2/3");
            return;
        };
        let mut pool = BufPool::new(256);
        // No flood list: a broadcast has nowhere to go, counted.
        let mut b = Batch::with_capacity(4);
        b.push(qbridge_packet::PacketBuf::from_frame(&frame(
            [0xff; 6], A, 60,
        )));
        let r = p.tx_burst(&mut b, &mut pool).unwrap();
        assert_eq!((r.sent, p.vxlan_drops().no_remote), (0, 1));
        {
            let mut t = p.table().lock().unwrap();
            assert!(t.append_flood(V100, "127.0.0.2".parse().unwrap()));
            assert!(t.append_flood(V100, "127.0.0.3".parse().unwrap()));
            assert!(!t.append_flood(V100, "127.0.0.3".parse().unwrap()));
        }
        // Broadcast and unknown unicast: one datagram to each VTEP, header + frame exactly.
        let bc = frame([0xff; 6], A, 60);
        let uu = frame(B, A, 1400);
        let mut b = Batch::with_capacity(4);
        b.push(qbridge_packet::PacketBuf::from_frame(&bc));
        b.push(qbridge_packet::PacketBuf::from_frame(&uu));
        let r = p.tx_burst(&mut b, &mut pool).unwrap();
        assert_eq!(r.sent, 4);
        // (Two flows: each in order, the two in any order — they may leave from two sockets.)
        for s in [&r2, &r3] {
            let d = recv(s).unwrap();
            let e = recv(s).unwrap();
            assert_eq!(&d[..8], &[0x08, 0, 0, 0, 0, 0, 100, 0]);
            assert_eq!(&e[..8], &[0x08, 0, 0, 0, 0, 0, 100, 0]);
            let mut got = vec![d[8..].to_vec(), e[8..].to_vec()];
            got.sort();
            let mut want = vec![bc.clone(), uu.clone()];
            want.sort();
            assert_eq!(got, want);
        }
        // B answers from 127.0.0.3: learned, with its VTEP.
        let mut dgram = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
        dgram.extend_from_slice(&frame(A, B, 60));
        r3.send_to(&dgram, ("127.0.0.1", 47891)).unwrap();
        // Another VNI, a non-VXLAN datagram and a runt inner frame: dropped, counted.
        let mut other = vec![0x08, 0, 0, 0, 0, 0, 101, 0];
        other.extend_from_slice(&frame(A, B, 60));
        r3.send_to(&other, ("127.0.0.1", 47891)).unwrap();
        r3.send_to(&[0u8; 30], ("127.0.0.1", 47891)).unwrap();
        r3.send_to(&[0x08, 0, 0, 0, 0, 0, 100, 0, 1, 2], ("127.0.0.1", 47891))
            .unwrap();
        let got = rx_all(&mut p, &mut pool);
        assert_eq!(got, vec![frame(A, B, 60)]);
        let d = p.vxlan_drops();
        assert_eq!((d.wrong_vni, d.malformed), (1, 2));
        assert_eq!(p.drops().vxlan_wrong_vni, 1);
        assert_eq!(
            p.table().lock().unwrap().dst_of(V100, MacAddr(B)),
            Some("127.0.0.3".parse().unwrap())
        );
        // Now unicast to B goes to 127.0.0.3 only.
        let mut b = Batch::with_capacity(4);
        b.push(qbridge_packet::PacketBuf::from_frame(&uu));
        assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 1);
        assert_eq!(&recv(&r3).unwrap()[8..], &uu[..]);
        r2.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(
            recv(&r2).is_none(),
            "unicast after learning reached the other VTEP"
        );
        // A static entry beats the learned one.
        p.table()
            .lock()
            .unwrap()
            .add_static(V100, MacAddr(B), "127.0.0.2".parse().unwrap());
        let mut b = Batch::with_capacity(4);
        b.push(qbridge_packet::PacketBuf::from_frame(&uu));
        assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 1);
        r2.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(&recv(&r2).unwrap()[8..], &uu[..]);

        // Outer source ports follow the inner flow (RFC 7348 §5): IPv4/UDP flows to B that
        // differ in their UDP source port leave from several ports, each flow from one.
        let flow = |sport: u16| {
            let mut f = B.to_vec();
            f.extend_from_slice(&A);
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&[
                0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
            ]);
            f.extend_from_slice(&[(sport >> 8) as u8, sport as u8, 0, 53, 0, 8, 0, 0]);
            f.resize(60, 0);
            f
        };
        let mut seen: Vec<(u16, u16)> = Vec::new();
        for round in 0..2 {
            let mut b = Batch::with_capacity(16);
            for sport in 0..16u16 {
                b.push(qbridge_packet::PacketBuf::from_frame(&flow(1000 + sport)));
            }
            assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 16);
            let mut buf = vec![0u8; 2048];
            for _ in 0..16 {
                let (n, from) = r2.recv_from(&mut buf).unwrap();
                let inner = &buf[8..n];
                let sport = u16::from_be_bytes([inner[34], inner[35]]);
                if round == 0 {
                    seen.push((sport, from.port()));
                } else {
                    assert!(
                        seen.contains(&(sport, from.port())),
                        "flow {sport} changed port"
                    );
                }
                assert_ne!(from.port(), 47891, "sent from the receive socket");
            }
        }
        let mut ports: Vec<u16> = seen.iter().map(|s| s.1).collect();
        ports.sort_unstable();
        ports.dedup();
        assert!(ports.len() >= 3, "16 flows left from {ports:?}");
        // Flows that share a send socket and a VTEP, with frames of one length, left in
        // segmented sends (loopback takes UDP_SEGMENT), each datagram whole (checked above).
        assert!(p.segmented_sends() > 0);
        // One flow, two full datagrams and a shorter last one: one segmented send, the
        // datagrams whole and in order.
        let before = p.segmented_sends();
        let sizes = [1400usize, 1400, 700];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let mut f = flow(5000);
                f.resize(*n, k as u8);
                f
            })
            .collect();
        let mut b = Batch::with_capacity(4);
        for f in &frames {
            b.push(qbridge_packet::PacketBuf::from_frame(f));
        }
        assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 3);
        for f in &frames {
            assert_eq!(&recv(&r2).unwrap()[8..], &f[..]);
        }
        assert_eq!(p.segmented_sends(), before + 1);
    }

    /// Port X sends a run of equal frames (one segmented send) to port Y; Y, with UDP_GRO,
    /// may get them as one message: every frame arrives, whole, in order, also when the
    /// caller takes fewer per burst than a message holds.
    #[test]
    fn segmented_runs_arrive_whole_and_in_order() {
        let cfg = |ip: &str| VxlanConfig {
            name: format!("vx-{ip}"),
            vni: Vni::new(7),
            local: ip.parse().unwrap(),
            dstport: 47893,
            ttl: None,
            dev: None,
            tos: None,
            learning: true,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        let Ok(mut x) = VxlanPort::open(cfg("127.0.0.5"), VxlanTable::shared()) else {
            eprintln!("SKIPPED: cannot bind 127.0.0.5");
            return;
        };
        let mut y = VxlanPort::open(cfg("127.0.0.6"), VxlanTable::shared()).unwrap();
        x.table()
            .lock()
            .unwrap()
            .append_flood(Vni::new(7).unwrap(), "127.0.0.6".parse().unwrap());
        let mut pool = BufPool::new(256);
        let frames: Vec<Vec<u8>> = (0..20u8)
            .map(|k| {
                let mut f = frame(B, A, 1000);
                f[20] = k;
                f
            })
            .collect();
        let mut b = Batch::with_capacity(32);
        for f in &frames {
            b.push(qbridge_packet::PacketBuf::from_frame(f));
        }
        assert_eq!(x.tx_burst(&mut b, &mut pool).unwrap().sent, 20);
        let mut got = Batch::with_capacity(32);
        for _ in 0..100 {
            let _ = y.rx_burst(&mut got, &mut pool, 3).unwrap();
            if got.len() == 20 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let got: Vec<Vec<u8>> = got.drain().map(|p| p.frame().to_vec()).collect();
        assert_eq!(got, frames);
        assert!(!y.rx_pending());
        // One segmented send, received as one coalesced message (this kernel has both).
        assert_eq!((x.segmented_sends(), y.coalesced_receives()), (1, 1));
        assert_eq!(
            y.table()
                .lock()
                .unwrap()
                .dst_of(Vni::new(7).unwrap(), MacAddr(A)),
            Some("127.0.0.5".parse().unwrap())
        );
    }

    /// An external port (`external`): VLAN 10 ↔ VNI 1000, VLAN 20 ↔ VNI 2000, each VNI with
    /// its own flood list; tags removed on the way out and put back on the way in; unmapped
    /// VLANs and VNIs counted.
    /// An inner IPv4 TCP frame of `payload` bytes whose checksum field holds the pseudo-header
    /// sum, as a sender with checksum offload leaves it (`CHECKSUM_PARTIAL`).
    fn partial_tcp(payload: usize) -> Vec<u8> {
        use qbridge_wire::{checksum, IpProtocol};
        let mut f = [&B[..], &A[..], &[0x08, 0x00]].concat();
        let total = 20 + 20 + payload;
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            6,
        ]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let ip_sum = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        f.extend((0..payload).map(|i| i as u8));
        let pseudo = checksum::pseudo_header_v4(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            IpProtocol::Tcp,
            (20 + payload) as u32,
        );
        f[50..52].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        f
    }

    /// A same-host sender's partial inner checksum (and a TSO super-frame, a 4 KB datagram)
    /// enter marked `NEEDS_CSUM` (and GSO), with the offsets of the frame as it enters: behind
    /// the VNI's tag, whatever its TPID (0x9100 here).
    #[test]
    fn a_partial_inner_checksum_enters_marked_behind_the_vnis_tag() {
        let Ok(r6) = UdpSocket::bind(("127.0.0.6", 47896)) else {
            eprintln!("SKIPPED: cannot bind 127.0.0.6");
            return;
        };
        let cfg = VxlanConfig {
            name: "vxp".into(),
            vni: None,
            local: "127.0.0.5".parse().unwrap(),
            dstport: 47896,
            ttl: None,
            dev: None,
            tos: None,
            learning: false,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        let mut p = VxlanPort::open(cfg, VxlanTable::shared()).unwrap();
        p.table().lock().unwrap().tunnels = TunnelMap::new(&[(20, 2000)], Some(0x9100), None);
        let mut pool = BufPool::new(64);
        for payload in [100, 4000] {
            let mut dg = vec![0x08, 0, 0, 0, 0, 0x07, 0xd0, 0];
            dg.extend_from_slice(&partial_tcp(payload));
            r6.send_to(&dg, ("127.0.0.5", 47896)).unwrap();
            let mut batch = Batch::with_capacity(8);
            for _ in 0..50 {
                if p.rx_burst(&mut batch, &mut pool, 8).unwrap() > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let got: Vec<_> = batch.drain().collect();
            assert_eq!(got.len(), 1, "{payload}");
            let f = &got[0];
            assert_eq!(&f.frame()[12..16], &[0x91, 0x00, 0x00, 20]);
            let m = f.offload;
            assert!(m.needs_csum(), "{payload}: {m:?}");
            assert_eq!(
                (m.csum_start, m.csum_offset),
                (14 + 4 + 20, 16),
                "{payload}"
            );
            if payload > 1500 {
                assert!(m.is_gso());
                assert_eq!((m.hdr_len, m.gso_size), (14 + 4 + 40, 1460));
            } else {
                assert!(!m.is_gso());
            }
        }
        assert_eq!(p.partial_checksums(), 2);
    }

    #[test]
    fn external_port_maps_vlans_to_vnis_both_ways() {
        let Ok(r8) = UdpSocket::bind(("127.0.0.8", 47895)) else {
            eprintln!("SKIPPED: cannot bind 127.0.0.8");
            return;
        };
        let r9 = UdpSocket::bind(("127.0.0.9", 47895)).unwrap();
        for s in [&r8, &r9] {
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
        }
        let cfg = VxlanConfig {
            name: "vxe".into(),
            vni: None,
            local: "127.0.0.7".parse().unwrap(),
            dstport: 47895,
            ttl: None,
            dev: None,
            tos: None,
            learning: true,
            udp6zerocsumtx: false,
            udp6zerocsumrx: false,
        };
        let mut p = VxlanPort::open(cfg, VxlanTable::shared()).unwrap();
        let (v1000, v2000) = (Vni::new(1000).unwrap(), Vni::new(2000).unwrap());
        {
            let mut t = p.table().lock().unwrap();
            t.tunnels = TunnelMap::new(&[(10, 1000), (20, 2000)], Some(0x8100), None);
            t.append_flood(v1000, "127.0.0.8".parse().unwrap());
            t.append_flood(v2000, "127.0.0.9".parse().unwrap());
        }
        let mut pool = BufPool::new(64);
        let inner = frame([0xff; 6], A, 60);
        let tagged = |vid: u8| {
            let mut f = inner[..12].to_vec();
            f.extend_from_slice(&[0x81, 0x00, 0x00, vid]);
            f.extend_from_slice(&inner[12..]);
            f
        };
        let mut b = Batch::with_capacity(4);
        for f in [tagged(10), tagged(20), tagged(30), inner.clone()] {
            b.push(qbridge_packet::PacketBuf::from_frame(&f));
        }
        assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 2);
        // VLAN 10 in VNI 1000 to 127.0.0.8 only, VLAN 20 in VNI 2000 to 127.0.0.9 only,
        // both untagged inside.
        let d = recv(&r8).unwrap();
        assert_eq!(&d[..8], &[0x08, 0, 0, 0, 0, 0x03, 0xe8, 0]);
        assert_eq!(&d[8..], &inner[..]);
        let d = recv(&r9).unwrap();
        assert_eq!(&d[..8], &[0x08, 0, 0, 0, 0, 0x07, 0xd0, 0]);
        assert_eq!(&d[8..], &inner[..]);
        assert!(recv(&r8).is_none() && recv(&r9).is_none());
        // VLAN 30 and the untagged frame: unmapped.
        assert_eq!(p.vxlan_drops().unmapped_vlan, 2);
        assert_eq!(p.drops().vxlan_unmapped_vlan, 2);
        // In: VNI 2000 enters tagged VLAN 20 and is learned in VNI 2000; VNI 3000 maps to
        // nothing.
        let mut dg = vec![0x08, 0, 0, 0, 0, 0x07, 0xd0, 0];
        dg.extend_from_slice(&frame(A, B, 60));
        r9.send_to(&dg, ("127.0.0.7", 47895)).unwrap();
        let mut other = vec![0x08, 0, 0, 0, 0, 0x0b, 0xb8, 0];
        other.extend_from_slice(&frame(A, B, 60));
        r9.send_to(&other, ("127.0.0.7", 47895)).unwrap();
        let got = rx_all(&mut p, &mut pool);
        let mut want = frame(A, B, 60);
        want.splice(12..12, [0x81, 0x00, 0x00, 20]);
        assert_eq!(got, vec![want]);
        assert_eq!(p.vxlan_drops().unmapped_vni, 1);
        {
            let t = p.table().lock().unwrap();
            assert_eq!(
                t.dst_of(v2000, MacAddr(B)),
                Some("127.0.0.9".parse().unwrap())
            );
            assert_eq!(t.dst_of(v1000, MacAddr(B)), None);
        }
        // vnifilter accepting 1000 only: VNI 2000 is another port's (wrong_vni) both ways
        // in (a datagram) and unmapped out (VLAN 20's frames).
        p.table().lock().unwrap().tunnels = TunnelMap::new(
            &[(10, 1000), (20, 2000)],
            Some(0x8100),
            Some(vec![(1000, 1000)]),
        );
        r9.send_to(&dg, ("127.0.0.7", 47895)).unwrap();
        assert!(rx_all(&mut p, &mut pool).is_empty());
        assert_eq!(p.vxlan_drops().wrong_vni, 1);
        let mut b = Batch::with_capacity(4);
        for f in [tagged(10), tagged(20)] {
            b.push(qbridge_packet::PacketBuf::from_frame(&f));
        }
        assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 1);
        assert_eq!(p.vxlan_drops().unmapped_vlan, 3);
        assert_eq!(&recv(&r8).unwrap()[8..], &inner[..]);
    }

    /// Runs `f` on a thread in a network namespace of its own (`unshare(CLONE_NEWNET)`), its
    /// loopback up with 2001:db8::1-4; `None` (a skip) where that is not allowed.
    fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        std::thread::spawn(move || {
            // SAFETY: unshare(2) of this thread's network namespace; no memory is involved.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return None;
            }
            // Children of this thread start in its namespace.
            let ip = |args: &str| {
                std::process::Command::new("ip")
                    .args(args.split(' '))
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if !ip("link set lo up") {
                return None;
            }
            for k in 1..=4 {
                if !ip(&format!("-6 addr add 2001:db8::{k}/128 dev lo nodad")) {
                    return None;
                }
            }
            // The kernel installs an address's local route from a work queue: wait until
            // each address takes a datagram from itself.
            for k in 1..=4u16 {
                let a = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, k);
                let ready = (0..200).any(|_| {
                    let ok = UdpSocket::bind((a, 0)).is_ok_and(|s| {
                        let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
                        s.local_addr().is_ok_and(|me| s.send_to(b"x", me).is_ok())
                            && s.recv(&mut [0u8; 4]).is_ok()
                    });
                    if !ok {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    ok
                });
                if !ready {
                    return None;
                }
            }
            Some(f())
        })
        .join()
        .expect("the namespace thread panicked")
    }

    /// A datagram and its hop limit and traffic class (`IPV6_RECVHOPLIMIT`, `IPV6_RECVTCLASS`).
    fn recv6(s: &UdpSocket) -> Option<(Vec<u8>, i32, i32)> {
        let mut b = vec![0u8; 65536];
        let mut ctl = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        // SAFETY: plain old data; zeros are valid.
        let mut m: libc::msghdr = unsafe { mem::zeroed() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.as_mut_ptr().cast();
        m.msg_controllen = mem::size_of_val(&ctl);
        // SAFETY: `m` points to live buffers of the sizes stated.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut m, 0) };
        if n < 0 {
            return None;
        }
        b.truncate(n as usize);
        let (mut hops, mut tclass) = (-1, -1);
        // SAFETY: the kernel wrote `msg_controllen` bytes of control messages into `ctl`;
        // the CMSG macros stay within them; each value is an int.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m);
            while !c.is_null() {
                if (*c).cmsg_level == libc::IPPROTO_IPV6 {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    match (*c).cmsg_type {
                        libc::IPV6_HOPLIMIT => hops = v,
                        libc::IPV6_TCLASS => tclass = v,
                        _ => {}
                    }
                }
                c = libc::CMSG_NXTHDR(&m, c);
            }
        }
        Some((b, hops, tclass))
    }

    /// An IPv6 underlay: the port floods to both listed IPv6 VTEPs with its hop limit and
    /// each inner packet's traffic class (`tos inherit`), learns a VTEP's IPv6 address,
    /// sends runs segmented, and refuses a zero UDP checksum unless `udp6zerocsumrx`.
    #[test]
    fn ipv6_underlay_floods_learns_and_checksums() {
        let done = in_private_netns(|| {
            let v6 = |k: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, k));
            let r2 = UdpSocket::bind((v6(2), 4789)).unwrap();
            let r3 = UdpSocket::bind((v6(3), 4789)).unwrap();
            for s in [&r2, &r3] {
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                for opt in [libc::IPV6_RECVHOPLIMIT, libc::IPV6_RECVTCLASS] {
                    crate::sys::setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, opt, 1).unwrap();
                }
            }
            let cfg = |local: IpAddr, rx0: bool| VxlanConfig {
                name: "vx6".into(),
                vni: Vni::new(600),
                local,
                dstport: 4789,
                ttl: Some(9),
                dev: None,
                tos: Some(vxlan::OuterTos::Inherit),
                learning: true,
                udp6zerocsumtx: false,
                udp6zerocsumrx: rx0,
            };
            let mut p = VxlanPort::open(cfg(v6(1), false), VxlanTable::shared()).unwrap();
            let v600 = Vni::new(600).unwrap();
            {
                let mut t = p.table().lock().unwrap();
                t.append_flood(v600, v6(2));
                t.append_flood(v600, v6(3));
            }
            let mut pool = BufPool::new(64);
            // A broadcast inner IPv4 packet with TOS 0xb8: to both, hop limit 9, TC 0xb8.
            let mut bc = [0xff; 6].to_vec();
            bc.extend_from_slice(&A);
            bc.extend_from_slice(&[0x08, 0x00, 0x45, 0xb8]);
            bc.resize(120, 7);
            let mut b = Batch::with_capacity(4);
            b.push(qbridge_packet::PacketBuf::from_frame(&bc));
            assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 2);
            for r in [&r2, &r3] {
                let (d, hops, tc) = recv6(r).unwrap();
                assert_eq!(&d[..8], &[0x08, 0, 0, 0, 0, 0x02, 0x58, 0]);
                assert_eq!(&d[8..], &bc[..]);
                assert_eq!((hops, tc), (9, 0xb8));
            }
            // B answers from 2001:db8::3: learned with its IPv6 address; unicast goes there.
            let mut dg = vec![0x08, 0, 0, 0, 0, 0x02, 0x58, 0];
            dg.extend_from_slice(&frame(A, B, 60));
            r3.send_to(&dg, (v6(1), 4789)).unwrap();
            assert_eq!(rx_all(&mut p, &mut pool), vec![frame(A, B, 60)]);
            assert_eq!(
                p.table().lock().unwrap().dst_of(v600, MacAddr(B)),
                Some(v6(3))
            );
            let entries = p.table().lock().unwrap().entries(Instant::now());
            assert!(entries
                .iter()
                .any(|e| e.kind == VxlanEntryKind::Learned && e.dst == v6(3)));
            // A run of equal frames to B: one segmented send, each datagram whole.
            let mut b = Batch::with_capacity(4);
            for _ in 0..3 {
                b.push(qbridge_packet::PacketBuf::from_frame(&frame(B, A, 900)));
            }
            assert_eq!(p.tx_burst(&mut b, &mut pool).unwrap().sent, 3);
            for _ in 0..3 {
                assert_eq!(&recv6(&r3).unwrap().0[8..], &frame(B, A, 900)[..]);
            }
            assert_eq!(p.segmented_sends(), 1);
            // A zero UDP checksum from ::2 (UDP_NO_CHECK6_TX): dropped by the kernel before
            // the port; a port with udp6zerocsumrx takes it.
            let z = UdpSocket::bind((v6(2), 0)).unwrap();
            crate::sys::setsockopt_int(z.as_raw_fd(), libc::SOL_UDP, UDP_NO_CHECK6_TX, 1).unwrap();
            let mut from2 = vec![0x08, 0, 0, 0, 0, 0x02, 0x58, 0];
            from2.extend_from_slice(&frame(A, [2, 0, 0, 0, 0, 0xc], 60));
            z.send_to(&from2, (v6(1), 4789)).unwrap();
            assert!(
                rx_all(&mut p, &mut pool).is_empty(),
                "a zero checksum was taken"
            );
            drop(p);
            let mut q = VxlanPort::open(cfg(v6(4), true), VxlanTable::shared()).unwrap();
            z.send_to(&from2, (v6(4), 4789)).unwrap();
            assert_eq!(rx_all(&mut q, &mut pool), vec![from2[8..].to_vec()]);
            // An IPv4 VTEP in an IPv6 port's table cannot be sent to: counted, not a panic.
            q.table()
                .lock()
                .unwrap()
                .append_flood(v600, "10.0.0.2".parse().unwrap());
            let mut b = Batch::with_capacity(1);
            b.push(qbridge_packet::PacketBuf::from_frame(&bc));
            let r = q.tx_burst(&mut b, &mut pool).unwrap();
            assert_eq!(r.sent, 0);
        });
        if done.is_none() {
            eprintln!("SKIPPED: no private network namespace (needs root and ip(8))");
        }
    }
}
