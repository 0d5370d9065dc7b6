//! Thin, checked wrappers over the interface ioctls and socket options the live backends share.
//!
//! Every function here validates its arguments, makes one syscall, and turns `-1` into an
//! [`IoError`] that names the interface and the operation. The `unsafe` blocks are the FFI
//! calls themselves; each states why its pointers are valid.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::port::DeviceOffloads;
use crate::IoError;

/// `IFNAMSIZ`: interface names are at most 15 bytes plus the NUL.
pub const IFNAMSIZ: usize = 16;

/// `struct ifreq` as the ioctls used here read it: a name and one `int`/`short` value.
/// (The kernel's union is 24 bytes; the padding keeps the size right for every request.)
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IfReq {
    pub name: [libc::c_char; IFNAMSIZ],
    pub value: libc::c_int,
    _pad: [u8; 20],
}

const _: () = assert!(std::mem::size_of::<IfReq>() == 40);

impl IfReq {
    pub fn new(ifname: &str) -> Result<IfReq, IoError> {
        check_ifname(ifname)?;
        let mut r = IfReq {
            name: [0; IFNAMSIZ],
            value: 0,
            _pad: [0; 20],
        };
        for (d, s) in r.name.iter_mut().zip(ifname.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(r)
    }

    /// The `short` flags field (`ifr_flags`), which shares the first bytes of the union.
    pub fn flags(&self) -> i16 {
        self.value as i16
    }

    pub fn set_flags(&mut self, flags: i16) {
        // On little-endian the short is the low half of the int; on big-endian the high half.
        self.value = if cfg!(target_endian = "little") {
            i32::from(flags as u16)
        } else {
            i32::from(flags as u16) << 16
        };
    }

    /// The name the kernel wrote back (TUNSETIFF fills in the chosen name).
    pub fn name(&self) -> String {
        let bytes: Vec<u8> = self
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

pub(crate) fn check_ifname(ifname: &str) -> Result<(), IoError> {
    if ifname.is_empty()
        || ifname.len() >= IFNAMSIZ
        || ifname
            .bytes()
            .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
    {
        return Err(IoError::Invalid(format!(
            "interface name {ifname:?} must be 1 to 15 bytes without '/', NUL or spaces"
        )));
    }
    Ok(())
}

/// Whether an errno means the interface is down or gone.
pub(crate) fn is_link_errno(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

/// Maps a syscall error: link errors become [`IoError::LinkDown`], others [`IoError::Sys`].
pub(crate) fn sys_err(op: &'static str, ifname: &str, e: io::Error) -> IoError {
    if is_link_errno(&e) {
        IoError::LinkDown {
            ifname: ifname.to_owned(),
            source: e,
        }
    } else {
        IoError::Sys {
            op,
            ifname: ifname.to_owned(),
            source: e,
        }
    }
}

/// The interface index of `ifname` in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> Result<u32, IoError> {
    check_ifname(ifname)?;
    let c = CString::new(ifname).map_err(|_| IoError::Invalid(format!("{ifname:?}")))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(IoError::NoSuchInterface {
            ifname: ifname.to_owned(),
        });
    }
    Ok(idx)
}

/// The name of interface `index` in the calling thread's network namespace; `None` when there
/// is none.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes if_indextoname(3) may write.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// A datagram socket for interface ioctls.
fn ctl_socket(ifname: &str) -> Result<OwnedFd, IoError> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(sys_err(
            "socket(AF_INET)",
            ifname,
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq_ioctl(
    fd: RawFd,
    req: libc::c_ulong,
    op: &'static str,
    r: &mut IfReq,
) -> Result<(), IoError> {
    // SAFETY: `r` is a properly sized, initialised `struct ifreq` that the kernel may read
    // and write for the duration of the call.
    let rc = unsafe { libc::ioctl(fd, req as _, r as *mut IfReq) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(IoError::NoSuchInterface { ifname: r.name() });
        }
        return Err(sys_err(op, &r.name(), e));
    }
    Ok(())
}

/// The hardware address of `ifname` (`SIOCGIFHWADDR`, in the calling thread's namespace).
pub fn get_mac(ifname: &str) -> Result<[u8; 6], IoError> {
    let fd = ctl_socket(ifname)?;
    let mut r = IfReq::new(ifname)?;
    ifreq_ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, "SIOCGIFHWADDR", &mut r)?;
    // `ifr_hwaddr` is a `struct sockaddr` at the union's start (offset 16): `sa_family`, then
    // the address in `sa_data`, i.e. bytes 2..4 of `value` and 0..4 of the padding.
    let v = r.value.to_ne_bytes();
    Ok([v[2], v[3], r._pad[0], r._pad[1], r._pad[2], r._pad[3]])
}

/// The device MTU of `ifname` (in the calling thread's namespace).
pub fn get_mtu(ifname: &str) -> Result<u32, IoError> {
    get_mtu_via(ctl_socket(ifname)?.as_raw_fd(), ifname)
}

/// The device MTU of `ifname` in the namespace of socket `fd`.
pub(crate) fn get_mtu_via(fd: RawFd, ifname: &str) -> Result<u32, IoError> {
    let mut r = IfReq::new(ifname)?;
    ifreq_ioctl(fd, libc::SIOCGIFMTU, "SIOCGIFMTU", &mut r)?;
    Ok(r.value as u32)
}

/// Sets the device MTU of `ifname` (SIOCSIFMTU) in the namespace of socket `fd`.
pub(crate) fn set_mtu_via(fd: RawFd, ifname: &str, mtu: u32) -> Result<(), IoError> {
    let mut r = IfReq::new(ifname)?;
    r.value = i32::try_from(mtu).map_err(|_| IoError::Invalid(format!("mtu {mtu}")))?;
    match ifreq_ioctl(fd, libc::SIOCSIFMTU, "SIOCSIFMTU", &mut r) {
        // EINVAL: above the device's maximum MTU, which the kernel does not name here.
        Err(IoError::Sys { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            Err(IoError::MtuAboveMax {
                ifname: ifname.to_owned(),
                mtu,
            })
        }
        r => r,
    }
}

/// What limits the MTU of a device, as the kernel tells it (`ip -d link show`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MtuLimit {
    /// `IFLA_MAX_MTU` (`maxmtu`): the device's static maximum. A tunnel device checks its
    /// underlay on top of it.
    pub max_mtu: Option<u32>,
    /// `IFLA_INFO_KIND`: `vxlan`, `veth`, …
    pub kind: Option<String>,
    /// The lower device (`IFLA_LINK`: a VXLAN device's `dev`) and its MTU.
    pub lower: Option<(String, u32)>,
    /// A VXLAN device with an IPv6 local or remote address (70 bytes of encapsulation, not 50).
    pub vxlan_ipv6: bool,
}

impl MtuLimit {
    /// The largest MTU the device takes, when it can be told: a VXLAN device's underlay MTU
    /// less its encapsulation, else `maxmtu`.
    pub fn max(&self) -> Option<u32> {
        match (self.kind.as_deref(), &self.lower) {
            (Some("vxlan"), Some((_, m))) => Some(m.saturating_sub(self.vxlan_overhead())),
            _ => self.max_mtu,
        }
    }

    /// Bytes a VXLAN device adds: outer Ethernet, IP, UDP and VXLAN headers.
    pub fn vxlan_overhead(&self) -> u32 {
        if self.vxlan_ipv6 {
            70
        } else {
            50
        }
    }
}

// rtnetlink attributes (linux/if_link.h) the functions below read or write.
const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;

/// Attributes `(type, payload)` of a netlink attribute stream.
fn rtattrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u16::from_ne_bytes([*b.first()?, *b.get(1)?]) as usize;
        let ty = u16::from_ne_bytes([*b.get(2)?, *b.get(3)?]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[((len + 3) & !3).min(b.len())..];
        Some((ty, payload))
    })
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(0..4)?.try_into().ok()?))
}

/// The name and MTU of interface `index`.
fn lower_of(index: u32) -> Option<(String, u32)> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` is IF_NAMESIZE bytes, as if_indextoname(3) requires.
    let r = unsafe { libc::if_indextoname(index, name.as_mut_ptr()) };
    if r.is_null() {
        return None;
    }
    let bytes: Vec<u8> = name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let lname = String::from_utf8_lossy(&bytes).into_owned();
    let m = get_mtu(&lname).ok()?;
    Some((lname, m))
}

/// What limits the MTU of `ifname`: one `RTM_GETLINK` on a netlink socket, in the calling
/// thread's namespace. For messages: the ioctl that refuses an MTU does not say why.
pub fn mtu_limit(ifname: &str) -> Result<MtuLimit, IoError> {
    const IFLA_MAX_MTU: u16 = 51;
    const IFLA_VXLAN_LINK: u16 = 3;
    const IFLA_VXLAN_GROUP6: u16 = 16;
    const IFLA_VXLAN_LOCAL6: u16 = 17;
    let index = ifindex(ifname)?;
    let msg = rtnl_getlink(ifname, index, None)?;
    let mut l = MtuLimit::default();
    for (ty, p) in rtattrs(&msg) {
        match ty {
            IFLA_MAX_MTU => l.max_mtu = u32_of(p),
            IFLA_LINK => {
                if let Some(i) = u32_of(p).filter(|&i| i != 0 && i != index) {
                    l.lower = lower_of(i).or(l.lower);
                }
            }
            IFLA_LINKINFO => {
                for (ity, ip) in rtattrs(p) {
                    match ity {
                        IFLA_INFO_KIND => {
                            let k = ip.split(|&b| b == 0).next().unwrap_or_default();
                            l.kind = Some(String::from_utf8_lossy(k).into_owned());
                        }
                        IFLA_INFO_DATA if l.kind.as_deref() == Some("vxlan") => {
                            for (t, v) in rtattrs(ip) {
                                match t {
                                    IFLA_VXLAN_GROUP6 | IFLA_VXLAN_LOCAL6 => {
                                        l.vxlan_ipv6 |= v.iter().any(|&b| b != 0);
                                    }
                                    IFLA_VXLAN_LINK => {
                                        if let Some(i) = u32_of(v).filter(|&i| i != 0) {
                                            l.lower = lower_of(i);
                                        }
                                    }
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(l)
}

/// The queues attached to TAP (tun) device `ifname` (`IFLA_TUN_NUM_QUEUES` plus
/// `IFLA_TUN_NUM_DISABLED_QUEUES`, as `ip -d link show` prints them), in the calling thread's
/// namespace; `None` for a device that is not a tun/tap or a kernel that does not say (before
/// Linux 4.20). qbridge's TAP ports count them: a queue it did not open is someone else's
/// process (qemu with `queues=N`) wired to qbridge's end of the device.
pub fn tun_queues(ifname: &str) -> Result<Option<u32>, IoError> {
    const IFLA_TUN_NUM_QUEUES: u16 = 8;
    const IFLA_TUN_NUM_DISABLED_QUEUES: u16 = 9;
    let index = ifindex(ifname)?;
    let msg = rtnl_getlink(ifname, index, None)?;
    let Some((_, info)) = rtattrs(&msg).find(|(t, _)| *t == IFLA_LINKINFO) else {
        return Ok(None);
    };
    if !rtattrs(info).any(|(t, k)| t == IFLA_INFO_KIND && k.starts_with(b"tun\0")) {
        return Ok(None);
    }
    let Some((_, data)) = rtattrs(info).find(|(t, _)| *t == IFLA_INFO_DATA) else {
        return Ok(None);
    };
    let mut queues = None;
    for (ty, p) in rtattrs(data) {
        if ty == IFLA_TUN_NUM_QUEUES || ty == IFLA_TUN_NUM_DISABLED_QUEUES {
            queues = Some(queues.unwrap_or(0) + u32_of(p).unwrap_or(0));
        }
    }
    Ok(queues)
}

/// The attributes of interface `index` (`RTM_GETLINK`; `what`: for errors): in the calling
/// thread's namespace, or in the one of namespace id `nsid` there (`IFLA_TARGET_NETNSID`).
fn rtnl_getlink(what: &str, index: u32, nsid: Option<i32>) -> Result<Vec<u8>, IoError> {
    const HDR: usize = 16; // struct nlmsghdr
    const IFI: usize = 16; // struct ifinfomsg
    const IFLA_TARGET_NETNSID: u16 = 46;
    let err = |op: &'static str| sys_err(op, what, io::Error::last_os_error());
    let fd = rtnl_socket(what)?;
    let mut req = vec![0u8; HDR + IFI];
    req[4..6].copy_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[HDR] = libc::AF_UNSPEC as u8;
    req[HDR + 4..HDR + 8].copy_from_slice(&(index as i32).to_ne_bytes());
    if let Some(id) = nsid {
        rtattr(&mut req, IFLA_TARGET_NETNSID, &id.to_ne_bytes());
    }
    let total = req.len() as u32;
    req[0..4].copy_from_slice(&total.to_ne_bytes());
    // SAFETY: `req` is a live buffer of the length given; the kernel only reads it.
    let n = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(err("send(RTM_GETLINK)"));
    }
    let mut buf = vec![0u8; 32 << 10];
    // SAFETY: `buf` is a live, writable buffer of the length given.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(err("recv(RTM_GETLINK)"));
    }
    let msg = &buf[..n as usize];
    let ty = msg.get(4..6).map(|x| u16::from_ne_bytes([x[0], x[1]]));
    let len = msg.get(0..4).and_then(u32_of).unwrap_or(0) as usize;
    if ty != Some(libc::RTM_NEWLINK) || len < HDR + IFI || len > msg.len() {
        return Err(IoError::Invalid(format!(
            "{what}: no RTM_NEWLINK answer from the kernel"
        )));
    }
    Ok(msg[HDR + IFI..len].to_vec())
}

/// When `ifname` is a veth whose other end is in another namespace: that end's address
/// (`None`: another kind of device, or both ends here).
pub fn veth_peer_mac(ifname: &str) -> Result<Option<[u8; 6]>, IoError> {
    const IFLA_ADDRESS: u16 = 1;
    const IFLA_LINK_NETNSID: u16 = 37;
    let index = ifindex(ifname)?;
    let (mut veth, mut peer, mut nsid) = (false, None, None);
    for (ty, p) in rtattrs(&rtnl_getlink(ifname, index, None)?) {
        match ty {
            IFLA_LINK => peer = u32_of(p).filter(|&i| i != 0),
            IFLA_LINK_NETNSID => nsid = u32_of(p).map(|v| v as i32).filter(|&v| v >= 0),
            IFLA_LINKINFO => {
                veth |= rtattrs(p).any(|(t, k)| t == IFLA_INFO_KIND && k.starts_with(b"veth\0"));
            }
            _ => {}
        }
    }
    let (true, Some(peer), Some(nsid)) = (veth, peer, nsid) else {
        return Ok(None);
    };
    let attrs = rtnl_getlink(ifname, peer, Some(nsid))?;
    let mac = rtattrs(&attrs)
        .find(|(t, _)| *t == IFLA_ADDRESS)
        .and_then(|(_, a)| <[u8; 6]>::try_from(a).ok());
    Ok(mac)
}

/// Raises the device MTU of `ifname` to at least `mtu`; never lowers it. Returns the MTU now
/// in force.
pub fn raise_mtu(ifname: &str, mtu: u32) -> Result<u32, IoError> {
    raise_mtu_via(ctl_socket(ifname)?.as_raw_fd(), ifname, mtu)
}

pub(crate) fn raise_mtu_via(fd: RawFd, ifname: &str, mtu: u32) -> Result<u32, IoError> {
    let cur = get_mtu_via(fd, ifname)?;
    if cur >= mtu {
        return Ok(cur);
    }
    set_mtu_via(fd, ifname, mtu)?;
    Ok(mtu)
}

/// Link state as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively down (`IFF_UP` clear).
    AdminDown,
    /// Up, but no carrier (`IFF_RUNNING` clear), e.g. a veth whose peer is down.
    NoCarrier,
    Up,
}

/// The link state of `ifname`; [`IoError::NoSuchInterface`] when it is gone.
pub fn link_state(ifname: &str) -> Result<LinkState, IoError> {
    link_state_via(ctl_socket(ifname)?.as_raw_fd(), ifname)
}

/// The link state of `ifname` in the namespace of socket `fd`.
pub(crate) fn link_state_via(fd: RawFd, ifname: &str) -> Result<LinkState, IoError> {
    let mut r = IfReq::new(ifname)?;
    ifreq_ioctl(fd, libc::SIOCGIFFLAGS, "SIOCGIFFLAGS", &mut r)?;
    let f = i32::from(r.flags() as u16);
    Ok(if f & libc::IFF_UP == 0 {
        LinkState::AdminDown
    } else if f & libc::IFF_RUNNING == 0 {
        LinkState::NoCarrier
    } else {
        LinkState::Up
    })
}

/// `struct ifreq` with `ifr_hwaddr` (a `struct sockaddr`) for SIOCSIFHWADDR.
#[repr(C)]
struct IfReqHw {
    name: [libc::c_char; IFNAMSIZ],
    family: libc::sa_family_t,
    data: [u8; 14],
    _pad: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<IfReqHw>() == 40);

/// Sets the MAC address of `ifname` (SIOCSIFHWADDR; a TAP takes it while down or up).
pub fn set_mac(ifname: &str, mac: [u8; 6]) -> Result<(), IoError> {
    let base = IfReq::new(ifname)?;
    let mut r = IfReqHw {
        name: base.name,
        family: libc::ARPHRD_ETHER,
        data: [0; 14],
        _pad: [0; 8],
    };
    r.data[..6].copy_from_slice(&mac);
    let fd = ctl_socket(ifname)?;
    // SAFETY: `r` is a properly sized, initialised `struct ifreq` the kernel reads for the
    // duration of the call.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::SIOCSIFHWADDR as _,
            &mut r as *mut IfReqHw,
        )
    };
    if rc < 0 {
        return Err(sys_err("SIOCSIFHWADDR", ifname, io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets `IFF_UP` on `ifname`.
pub fn set_up(ifname: &str) -> Result<(), IoError> {
    set_up_via(ctl_socket(ifname)?.as_raw_fd(), ifname)
}

pub(crate) fn set_up_via(fd: RawFd, ifname: &str) -> Result<(), IoError> {
    let mut r = IfReq::new(ifname)?;
    ifreq_ioctl(fd, libc::SIOCGIFFLAGS, "SIOCGIFFLAGS", &mut r)?;
    let f = r.flags() | libc::IFF_UP as i16;
    r.set_flags(f);
    ifreq_ioctl(fd, libc::SIOCSIFFLAGS, "SIOCSIFFLAGS", &mut r)
}

// ----- ethtool -----

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// More feature names than any kernel has (about 70 today); a bound on what a device may make
/// us allocate.
const MAX_FEATURES: u32 = 1024;

/// `struct ifreq` with the `ifr_data` pointer, for SIOCETHTOOL.
#[repr(C)]
struct IfReqData {
    name: [libc::c_char; IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<IfReqData>() == 40);

/// One SIOCETHTOOL request on `ifname` through socket `fd`: `buf` is the ethtool command
/// structure (its first word the command), which the kernel reads and fills in.
fn ethtool(fd: RawFd, ifname: &str, op: &'static str, buf: &mut [u32]) -> Result<(), IoError> {
    let r = IfReq::new(ifname)?;
    let mut req = IfReqData {
        name: r.name,
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    // SAFETY: `req` is a live ifreq whose `ifr_data` points to `buf`, a live, 4-byte aligned
    // buffer that the caller sized for the command it holds (the kernel writes no more than
    // the lengths given in the command: `len` strings, `size` feature blocks, one count per
    // requested set).
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut req as *mut IfReqData) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(IoError::NoSuchInterface {
                ifname: ifname.to_owned(),
            });
        }
        return Err(sys_err(op, ifname, e));
    }
    Ok(())
}

/// Where the transmit offload features that matter to qbridge sit in a device's feature
/// bitmap (`ETH_SS_FEATURES`), found by name once: the order is the kernel's and may differ
/// between kernels, never while one runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureBits {
    /// Number of feature bits (names) the kernel has.
    pub count: u32,
    tso4: Option<u32>,
    tso6: Option<u32>,
    tso_ecn: Option<u32>,
    sg: Option<u32>,
    csum4: Option<u32>,
    csum6: Option<u32>,
    csum_generic: Option<u32>,
}

impl FeatureBits {
    fn set(&mut self, name: &str, bit: u32) {
        let slot = match name {
            "tx-tcp-segmentation" => &mut self.tso4,
            "tx-tcp6-segmentation" => &mut self.tso6,
            "tx-tcp-ecn-segmentation" => &mut self.tso_ecn,
            "tx-scatter-gather" => &mut self.sg,
            "tx-checksum-ipv4" => &mut self.csum4,
            "tx-checksum-ipv6" => &mut self.csum6,
            "tx-checksum-ip-generic" => &mut self.csum_generic,
            _ => return,
        };
        *slot = Some(bit);
    }
}

/// Looks up the feature names of the kernel (ETHTOOL_GSSET_INFO, then ETHTOOL_GSTRINGS for
/// `ETH_SS_FEATURES`) through socket `fd`, asking device `ifname` (any device gives the same
/// names).
pub(crate) fn feature_bits_via(fd: RawFd, ifname: &str) -> Result<FeatureBits, IoError> {
    // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, then one u32 per set asked.
    let mut info = [0u32; 5];
    info[0] = ETHTOOL_GSSET_INFO;
    let mask = 1u64 << ETH_SS_FEATURES;
    info[2] = mask as u32;
    info[3] = (mask >> 32) as u32;
    ethtool(fd, ifname, "ETHTOOL_GSSET_INFO", &mut info)?;
    let got = u64::from(info[2]) | (u64::from(info[3]) << 32);
    if got & mask == 0 {
        return Err(IoError::Invalid(format!(
            "{ifname}: the kernel reports no ethtool feature names"
        )));
    }
    let count = info[4].min(MAX_FEATURES);
    // struct ethtool_gstrings: cmd, string_set, len, then len names of 32 bytes.
    let words = 3 + count as usize * ETH_GSTRING_LEN / 4;
    let mut strings = vec![0u32; words];
    strings[0] = ETHTOOL_GSTRINGS;
    strings[1] = ETH_SS_FEATURES;
    strings[2] = count;
    ethtool(fd, ifname, "ETHTOOL_GSTRINGS", &mut strings)?;
    let count = strings[2].min(count);
    let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut bits = FeatureBits {
        count,
        ..FeatureBits::default()
    };
    for (i, raw) in bytes
        .chunks_exact(ETH_GSTRING_LEN)
        .take(count as usize)
        .enumerate()
    {
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        if let Ok(name) = std::str::from_utf8(&raw[..end]) {
            bits.set(name, i as u32);
        }
    }
    Ok(bits)
}

/// The active transmit offloads of `ifname` (ETHTOOL_GFEATURES) through socket `fd`, with
/// the bit positions from [`feature_bits_via`]. A feature the kernel does not name is off.
pub(crate) fn device_offloads_via(
    fd: RawFd,
    ifname: &str,
    bits: &FeatureBits,
) -> Result<DeviceOffloads, IoError> {
    // struct ethtool_gfeatures: cmd, size, then `size` blocks of
    // {available, requested, active, never_changed}, 32 features per block.
    let blocks = bits.count.div_ceil(32).max(1);
    let mut buf = vec![0u32; 2 + 4 * blocks as usize];
    buf[0] = ETHTOOL_GFEATURES;
    buf[1] = blocks;
    ethtool(fd, ifname, "ETHTOOL_GFEATURES", &mut buf)?;
    let active = |bit: Option<u32>| {
        bit.is_some_and(|b| {
            let (block, shift) = ((b / 32) as usize, b % 32);
            block < blocks as usize && buf[2 + 4 * block + 2] & (1 << shift) != 0
        })
    };
    let generic = active(bits.csum_generic);
    Ok(DeviceOffloads {
        tso4: active(bits.tso4),
        tso6: active(bits.tso6),
        tso_ecn: active(bits.tso_ecn),
        sg: active(bits.sg),
        csum4: generic || active(bits.csum4),
        csum6: generic || active(bits.csum6),
        refused_tags: 0,
    })
}

/// The active transmit offloads of `ifname` in the calling thread's namespace (as
/// `ethtool -k` shows them).
pub fn device_offloads(ifname: &str) -> Result<DeviceOffloads, IoError> {
    let s = ctl_socket(ifname)?;
    let bits = feature_bits_via(s.as_raw_fd(), ifname)?;
    device_offloads_via(s.as_raw_fd(), ifname, &bits)
}

/// setsockopt with an `int` value.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt_raw(fd, level, name, &value)
}

/// setsockopt with any plain-old-data value.
pub(crate) fn setsockopt_raw<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly the length passed; the kernel only
    // reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// getsockopt into a plain-old-data value; returns how many bytes the kernel wrote.
pub(crate) fn getsockopt_raw<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` points to a live, writable `T` and `len` holds its size; the kernel
    // writes at most `len` bytes and stores the length written back into `len`.
    let rc = unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

/// Reads and clears the socket's pending error (`SO_ERROR`).
pub(crate) fn take_socket_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live locals of the sizes the kernel expects for SO_ERROR.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut i32).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((v != 0).then(|| io::Error::from_raw_os_error(v)))
}

/// Waits until `fd` is readable or `timeout_ms` passes (-1: forever). Returns whether it is
/// readable (or has an error pending, which the next receive reports).
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one live pollfd, matching the count of 1.
        let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A datagram socket in the calling thread's network namespace, for interface ioctls on
/// behalf of a socket that takes none itself (AF_XDP).
pub(crate) fn control_socket(ifname: &str) -> Result<OwnedFd, IoError> {
    ctl_socket(ifname)
}

/// Reads with `read(ptr, len)` into `buf` at offset `at` (the bytes before it kept, zeroed where
/// `buf` was shorter), with room for `want` bytes: afterwards `buf` is `at + n` bytes long when
/// `read` returned `n >= 0`, and `at` long otherwise. Returns what `read` returned. A receive
/// path reads a frame this way straight into the vector that will become a pool buffer's
/// (`PacketBuf::swap_in_frame`), its headroom in front.
///
/// # Safety
/// `read` must write at most `len` bytes at `ptr` (a `recv(2)`/`read(2)` of `len` bytes into
/// `ptr` does) and return how many it wrote, or a negative value.
pub(crate) unsafe fn read_at(
    buf: &mut Vec<u8>,
    at: usize,
    want: usize,
    read: impl FnOnce(*mut u8, usize) -> isize,
) -> isize {
    if buf.len() < at {
        buf.resize(at, 0);
    }
    buf.truncate(at);
    buf.reserve(want);
    // SAFETY: `at` is the vector's length, so `ptr .. ptr + want` is inside its capacity.
    let ptr = unsafe { buf.as_mut_ptr().add(at) };
    let rc = read(ptr, want);
    if rc > 0 {
        // SAFETY: `read` initialised `rc <= want` bytes from `at` (the caller's promise),
        // inside the capacity; the `at` bytes before them were initialised above.
        unsafe { buf.set_len(at + (rc as usize).min(want)) };
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_validation() {
        assert!(check_ifname("veth0").is_ok());
        assert!(check_ifname("").is_err());
        assert!(check_ifname("a_name_too_long_").is_err());
        assert!(check_ifname("a/b").is_err());
        assert!(matches!(
            ifindex("qbnoexist0"),
            Err(IoError::NoSuchInterface { .. })
        ));
    }

    #[test]
    fn loopback_offloads_are_read() {
        let s = ctl_socket("lo").unwrap();
        let bits = feature_bits_via(s.as_raw_fd(), "lo").unwrap();
        assert!(bits.count > 32, "{bits:?}");
        assert!(bits.tso4.is_some() && bits.tso6.is_some() && bits.sg.is_some());
        // Loopback segments everything itself (ethtool -k lo: all "on [fixed]").
        let d = device_offloads("lo").unwrap();
        assert!(d.tso4 && d.tso6 && d.sg && d.csum4 && d.csum6, "{d:?}");
    }

    #[test]
    fn loopback_is_up() {
        assert_eq!(link_state("lo").unwrap(), LinkState::Up);
        assert!(get_mtu("lo").unwrap() >= 1500);
    }

    #[test]
    fn a_device_that_is_not_a_tap_has_no_tun_queues() {
        assert_eq!(tun_queues("lo").unwrap(), None);
        assert!(tun_queues("qb-no-such-if").is_err());
    }
}

/// A netlink socket subscribed to the kernel's link notifications (RTMGRP_LINK) in the
/// namespace of the thread that opened it: [`LinkEvents::wait`] returns when an interface
/// was added, removed or changed (admin state, carrier), so that a link watch can look at
/// once instead of at its next poll.
#[derive(Debug)]
pub struct LinkEvents {
    fd: OwnedFd,
}

impl LinkEvents {
    /// Opens and binds the socket; `timeout_ms` bounds each [`LinkEvents::wait`].
    pub fn open(timeout_ms: u32) -> Result<LinkEvents, IoError> {
        let err = |op: &'static str| sys_err(op, "netlink", io::Error::last_os_error());
        // SAFETY: socket(2) takes no pointers.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(err("socket(AF_NETLINK)"));
        }
        // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_nl is valid; the fields are set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = libc::RTMGRP_LINK as u32;
        // SAFETY: `sa` is a live sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("bind(RTMGRP_LINK)"));
        }
        let tv = libc::timeval {
            tv_sec: (timeout_ms / 1000) as libc::time_t,
            tv_usec: ((timeout_ms % 1000) * 1000) as libc::suseconds_t,
        };
        // SAFETY: `tv` is a live timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(err("setsockopt(SO_RCVTIMEO)"));
        }
        Ok(LinkEvents { fd })
    }

    /// Waits for notifications (at most the timeout given to [`LinkEvents::open`]) and reads
    /// every one queued; true when there was at least one (or the socket overran: events
    /// were lost, so the caller must look anyway).
    pub fn wait(&self) -> bool {
        let mut buf = [0u8; 8192];
        let mut any = false;
        let mut flags = 0;
        loop {
            // SAFETY: `buf` is a live, writable buffer of the length given.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    flags,
                )
            };
            if n > 0 {
                any = true;
                flags = libc::MSG_DONTWAIT;
                continue;
            }
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                any = true;
                continue;
            }
            return any;
        }
    }
}

/// The link speed of `ifname` in Mb/s as the kernel reports it (`/sys/class/net/IF/speed`,
/// read in the calling thread's namespace's sysfs); `None` when unknown (no carrier, a
/// device without a speed, another namespace's sysfs).
pub fn link_speed(ifname: &str) -> Option<u32> {
    if ifname.contains('/') || ifname.starts_with('.') {
        return None;
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|&v| v > 0)
        .map(|v| v.min(i64::from(u32::MAX)) as u32)
}

/// Whether `ifname` has carrier now (ETHTOOL_GLINK: the driver's `netif_carrier_ok`, not the
/// operational state the kernel's linkwatch publishes up to a second later); `None` when the
/// interface or the request is not there.
pub fn carrier(ifname: &str) -> Option<bool> {
    const ETHTOOL_GLINK: u32 = 0x0a;
    let fd = ctl_socket(ifname).ok()?;
    let mut buf = [ETHTOOL_GLINK, 0];
    ethtool(fd.as_raw_fd(), ifname, "ETHTOOL_GLINK", &mut buf).ok()?;
    Some(buf[1] != 0)
}

/// The link state of `ifname` as it is now: admin state from the interface flags, carrier
/// from the driver ([`carrier`]) — the flags' `IFF_RUNNING` follows the operational state,
/// which the kernel's linkwatch updates up to a second after the carrier changed (a veth
/// just set up reads "no carrier" for that long). Falls back to [`link_state`] where the
/// device has no carrier query.
pub fn link_state_now(ifname: &str) -> Result<LinkState, IoError> {
    match link_state(ifname)? {
        LinkState::AdminDown => Ok(LinkState::AdminDown),
        flags => Ok(match carrier(ifname) {
            Some(true) => LinkState::Up,
            Some(false) => LinkState::NoCarrier,
            None => flags,
        }),
    }
}

/// A route netlink socket in the calling thread's namespace (`what`: for errors).
fn rtnl_socket(what: &str) -> Result<OwnedFd, IoError> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(sys_err(
            "socket(AF_NETLINK)",
            what,
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends one rtnetlink request (`flags` besides `NLM_F_REQUEST | NLM_F_ACK`) in the calling
/// thread's namespace and waits for its acknowledgement.
fn rtnl_request(ty: u16, flags: u16, body: &[u8], what: &str) -> Result<(), IoError> {
    const HDR: usize = 16;
    let err = |op: &'static str| sys_err(op, what, io::Error::last_os_error());
    let fd = rtnl_socket(what)?;
    let mut req = Vec::with_capacity(HDR + body.len());
    req.extend_from_slice(&((HDR + body.len()) as u32).to_ne_bytes());
    req.extend_from_slice(&ty.to_ne_bytes());
    req.extend_from_slice(
        &(libc::NLM_F_REQUEST as u16 | libc::NLM_F_ACK as u16 | flags).to_ne_bytes(),
    );
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(body);
    // SAFETY: `req` is a live buffer of the length given; the kernel only reads it.
    let n = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(err("send(netlink)"));
    }
    let mut buf = [0u8; 4096];
    // SAFETY: `buf` is a live buffer of the length given.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(err("recv(netlink)"));
    }
    let msg = &buf[..n as usize];
    if msg.len() >= HDR + 4 && u16::from_ne_bytes([msg[4], msg[5]]) == libc::NLMSG_ERROR as u16 {
        let code = i32::from_ne_bytes([msg[16], msg[17], msg[18], msg[19]]);
        if code != 0 {
            return Err(sys_err(
                "rtnetlink",
                what,
                io::Error::from_raw_os_error(-code),
            ));
        }
        return Ok(());
    }
    Err(IoError::Invalid(format!(
        "{what}: no acknowledgement from the kernel"
    )))
}

/// One netlink attribute: header, payload, padding to 4 bytes.
fn rtattr(out: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(payload);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

fn ifname_attr(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// Creates a veth pair `a` — `b` in the calling thread's namespace (`ip link add a type veth
/// peer name b`).
pub fn create_veth(a: &str, b: &str) -> Result<(), IoError> {
    const VETH_INFO_PEER: u16 = 1;
    let ifinfo = [0u8; 16];
    let mut peer = ifinfo.to_vec();
    rtattr(&mut peer, IFLA_IFNAME, &ifname_attr(b));
    let mut data = Vec::new();
    rtattr(&mut data, VETH_INFO_PEER, &peer);
    let mut info = Vec::new();
    rtattr(&mut info, IFLA_INFO_KIND, b"veth");
    rtattr(&mut info, IFLA_INFO_DATA | 0x8000, &data);
    let mut body = ifinfo.to_vec();
    rtattr(&mut body, IFLA_IFNAME, &ifname_attr(a));
    rtattr(&mut body, IFLA_LINKINFO | 0x8000, &info);
    rtnl_request(
        libc::RTM_NEWLINK,
        (libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16,
        &body,
        a,
    )
}

/// Deletes interface `name` (and a veth's peer with it).
pub fn delete_link(name: &str) -> Result<(), IoError> {
    let index = ifindex(name)?;
    let mut body = [0u8; 16];
    body[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    rtnl_request(libc::RTM_DELLINK, 0, &body, name)
}
