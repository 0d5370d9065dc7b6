//! The XDP half of AF_XDP: a minimal BPF loader for the one program qbridge needs.
//!
//! An AF_XDP socket receives only what an XDP program on its interface redirects to it, so
//! each interface gets one [`XdpProgram`]: an `XSKMAP` (queue index → socket) made with
//! `bpf(BPF_MAP_CREATE)`, a five-instruction program assembled here (no clang, no libbpf, no
//! ELF) that does what libxdp's default program does —
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index
//! r1 = map_fd ll              ; the XSKMAP (a 16-byte load the kernel resolves)
//! r3 = XDP_PASS               ; bpf_redirect_map's action when the slot is empty
//! call bpf_redirect_map
//! exit
//! ```
//!
//! — loaded with `bpf(BPF_PROG_LOAD, BPF_PROG_TYPE_XDP)` and attached with
//! `bpf(BPF_LINK_CREATE, BPF_XDP)` in native (driver) or generic (skb) mode. A BPF link
//! detaches when its last descriptor closes, so a crashed daemon leaves no program behind
//! (unlike a netlink attachment). Frames of a queue without a socket go on to the kernel
//! stack (`XDP_PASS`), as before the program was attached.
//!
//! Sockets of several queues share one program and map: the object is `Arc`'d, and each
//! [`crate::afxdp::AfXdpPort`] registers its socket at its queue index and removes it when
//! dropped. Control path only; everything here is thread-safe (the bpf syscalls are, and the
//! queue registry is behind a mutex).
//!
//! Namespaces: maps and programs are global, but the interface index given to
//! `BPF_LINK_CREATE` is looked up in the calling thread's network namespace, so attach from
//! a thread in the interface's namespace ([`crate::netns::run_in_netns`]).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use crate::sys;
use crate::IoError;

// ----- instruction encoding (include/uapi/linux/bpf.h, bpf_common.h) -----

/// One eBPF instruction, `struct bpf_insn`: opcode, destination and source registers (4 bits
/// each, destination in the low nibble on little-endian hosts), offset, immediate.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

/// Opcode parts: instruction classes, sizes, modes, operations.
pub mod op {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const JMP: u8 = 0x05;
    pub const ALU64: u8 = 0x07;
    pub const W: u8 = 0x00;
    pub const DW: u8 = 0x18;
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const K: u8 = 0x00;
    pub const MOV: u8 = 0xb0;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
}

/// `src_reg` of a 64-bit immediate load whose immediate is a map file descriptor.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;
/// Helper number of `bpf_redirect_map`.
pub const FN_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`: hand the frame to the kernel stack.
pub const XDP_PASS: i32 = 2;
/// Offset of `rx_queue_index` in `struct xdp_md` (data, data_end, data_meta,
/// ingress_ifindex, rx_queue_index: five u32s).
pub const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        let regs = if cfg!(target_endian = "little") {
            (dst & 0xf) | (src << 4)
        } else {
            (dst << 4) | (src & 0xf)
        };
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }

    /// `dst = *(u32 *)(src + off)`
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::LDX | op::MEM | op::W, dst, src, off, 0)
    }

    /// `dst = imm` (64-bit move of a sign-extended 32-bit immediate)
    pub const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
    }

    /// `dst = map` as the two-slot 64-bit immediate load the verifier turns into the map's
    /// address.
    pub const fn ld_map_fd(dst: u8, map_fd: i32) -> [Insn; 2] {
        [
            Insn::new(op::LD | op::IMM | op::DW, dst, BPF_PSEUDO_MAP_FD, 0, map_fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// `call helper`
    pub const fn call(helper: i32) -> Insn {
        Insn::new(op::JMP | op::CALL, 0, 0, 0, helper)
    }

    /// `exit` (returns r0)
    pub const fn exit() -> Insn {
        Insn::new(op::JMP | op::EXIT, 0, 0, 0, 0)
    }

    /// The 8 bytes the kernel reads.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// The redirect program: `return bpf_redirect_map(&xskmap, ctx->rx_queue_index, XDP_PASS);`
pub fn redirect_program(map_fd: i32) -> [Insn; 6] {
    let [ld0, ld1] = Insn::ld_map_fd(1, map_fd);
    [
        Insn::ldx_w(2, 1, XDP_MD_RX_QUEUE_INDEX),
        ld0,
        ld1,
        Insn::mov64_imm(3, XDP_PASS),
        Insn::call(FN_REDIRECT_MAP),
        Insn::exit(),
    ]
}

// ----- the bpf(2) syscall -----

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: `BPF_XDP`.
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`, `XDP_FLAGS_DRV_MODE` (include/uapi/linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const BPF_ANY: u64 = 0;

/// Slots in the XSKMAP: queue indices `0..MAX_QUEUES` can carry a socket. (8 bytes each.)
pub const MAX_QUEUES: u32 = 256;

/// The `bpf_attr` member of `BPF_MAP_CREATE` (the leading fields; the kernel zero-fills the
/// rest of the union from the size passed).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `BPF_LINK_CREATE`, the common part.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`; a new descriptor or 0 on success.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    loop {
        // SAFETY: `attr` is a live, initialised `repr(C)` prefix of `union bpf_attr` of the
        // size passed; the kernel reads it (and for the commands used here writes nothing
        // back into it). Pointers inside it (keys, values, instructions, log buffer) point to
        // buffers the caller keeps alive across this call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                (attr as *mut T).cast::<libc::c_void>(),
                std::mem::size_of::<T>() as libc::c_uint,
            )
        };
        if rc >= 0 {
            return Ok(rc);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn fd_from(rc: libc::c_long) -> OwnedFd {
    // SAFETY: the bpf commands that return a value > 0 here (MAP_CREATE, PROG_LOAD,
    // LINK_CREATE) return a fresh descriptor that nobody else owns.
    unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XdpMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`), before any skb exists; veth supports it.
    Native,
    /// Generic XDP on the skb (`XDP_FLAGS_SKB_MODE`), after the driver: works on every
    /// device, slower.
    Skb,
}

impl XdpMode {
    fn link_flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Skb => XDP_FLAGS_SKB_MODE,
        }
    }
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Skb => "skb",
        })
    }
}

impl std::str::FromStr for XdpMode {
    type Err = IoError;

    /// The words of `link add … type afxdp … mode native|skb`.
    fn from_str(s: &str) -> Result<XdpMode, IoError> {
        match s {
            "native" | "drv" => Ok(XdpMode::Native),
            "skb" | "generic" => Ok(XdpMode::Skb),
            _ => Err(IoError::Invalid(format!(
                "XDP mode {s:?} is not native or skb"
            ))),
        }
    }
}

/// The redirect program attached to one interface, with its XSKMAP; shared (`Arc`) by the
/// sockets of all its queues. Dropping the last reference detaches the program.
#[derive(Debug)]
pub struct XdpProgram {
    ifname: String,
    ifindex: u32,
    mode: XdpMode,
    map: OwnedFd,
    // Kept open: the program stays loaded while the link holds it, and the link stays
    // attached while this descriptor is open.
    _prog: OwnedFd,
    _link: OwnedFd,
    /// Bit `q` of word `q / 64`: a socket is registered at queue `q`.
    queues: Mutex<[u64; (MAX_QUEUES / 64) as usize]>,
}

impl XdpProgram {
    /// Creates the map, loads the program and attaches it to `ifname` (looked up in the
    /// calling thread's namespace) in `mode`.
    pub fn attach(ifname: &str, mode: XdpMode) -> Result<Arc<XdpProgram>, IoError> {
        let ifindex = sys::ifindex(ifname)?;
        let err = |op: &'static str| move |e: io::Error| sys::sys_err(op, ifname, e);
        let mut m = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: MAX_QUEUES,
            map_name: name16("qbridge_xsks"),
            ..MapCreateAttr::default()
        };
        let map = fd_from(bpf(BPF_MAP_CREATE, &mut m).map_err(err("bpf(BPF_MAP_CREATE)"))?);
        let prog = load_redirect(map.as_raw_fd(), ifname)?;
        let mut l = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: mode.link_flags(),
        };
        let link = match bpf(BPF_LINK_CREATE, &mut l) {
            Ok(fd) => fd_from(fd),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(IoError::Invalid(format!(
                    "{ifname}: another XDP program is attached already (`ip link set dev \
                     {ifname} xdp off` removes one attached by ip; a BPF link goes when its \
                     owner exits)"
                )));
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(IoError::Invalid(format!(
                    "{ifname}: the driver has no native XDP ({e}); use mode skb"
                )));
            }
            Err(e) => return Err(err("bpf(BPF_LINK_CREATE, BPF_XDP)")(e)),
        };
        Ok(Arc::new(XdpProgram {
            ifname: ifname.to_owned(),
            ifindex,
            mode,
            map,
            _prog: prog,
            _link: link,
            queues: Mutex::new([0; (MAX_QUEUES / 64) as usize]),
        }))
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Refuses a queue beyond the map or one that has a port already.
    pub(crate) fn check_free(&self, queue_id: u32) -> Result<(), IoError> {
        if queue_id >= MAX_QUEUES {
            return Err(IoError::Invalid(format!(
                "{}: queue {queue_id} is beyond the {MAX_QUEUES} queues an XSKMAP holds here",
                self.ifname
            )));
        }
        let q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if q[(queue_id / 64) as usize] & (1u64 << (queue_id % 64)) != 0 {
            return Err(IoError::Invalid(format!(
                "{}: queue {queue_id} has an AF_XDP port already",
                self.ifname
            )));
        }
        Ok(())
    }

    /// Puts socket `fd` in the map at `queue_id`: frames arriving on that queue go to it.
    /// Refuses a queue that already has a socket.
    pub(crate) fn register(&self, queue_id: u32, fd: RawFd) -> Result<(), IoError> {
        self.check_free(queue_id)?;
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let (w, bit) = ((queue_id / 64) as usize, 1u64 << (queue_id % 64));
        let key = queue_id;
        let value = fd as u32;
        let mut a = MapElemAttr {
            map_fd: self.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: BPF_ANY,
            ..MapElemAttr::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map_err(|e| sys::sys_err("bpf(BPF_MAP_UPDATE_ELEM)", &self.ifname, e))?;
        q[w] |= bit;
        Ok(())
    }

    /// Takes the socket at `queue_id` out of the map (its frames go to the kernel stack
    /// again). The kernel also removes a socket from every map when it closes; this makes it
    /// explicit and frees the queue for another port.
    pub(crate) fn unregister(&self, queue_id: u32) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let (w, bit) = ((queue_id / 64) as usize, 1u64 << (queue_id % 64));
        if queue_id >= MAX_QUEUES || q[w] & bit == 0 {
            return;
        }
        let key = queue_id;
        let mut a = MapElemAttr {
            map_fd: self.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            ..MapElemAttr::default()
        };
        // ENOENT: the kernel removed it already (the socket was closed).
        let _ = bpf(BPF_MAP_DELETE_ELEM, &mut a);
        q[w] &= !bit;
    }
}

/// Loads the redirect program for map `map_fd`; on failure loads it again with the
/// verifier's log and puts the log in the error.
fn load_redirect(map_fd: RawFd, ifname: &str) -> Result<OwnedFd, IoError> {
    let insns = redirect_program(map_fd);
    // bpf_redirect_map is not GPL-only; the kernel still wants a license string.
    let license = b"Dual MIT/GPL\0";
    let attr = |log: &mut [u8]| ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: u32::from(!log.is_empty()),
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name16("qbridge_xsk"),
        expected_attach_type: BPF_XDP,
        ..ProgLoadAttr::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr(&mut [])) {
        Ok(fd) => Ok(fd_from(fd)),
        Err(e) => {
            let mut log = vec![0u8; 16 * 1024];
            let again = bpf(BPF_PROG_LOAD, &mut attr(&mut log));
            if let Ok(fd) = again {
                return Ok(fd_from(fd));
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            Err(IoError::Sys {
                op: "bpf(BPF_PROG_LOAD, XDP)",
                ifname: ifname.to_owned(),
                source: io::Error::new(e.kind(), format!("{e}; verifier: {}", text.trim())),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program's bytes, written out by hand from the eBPF instruction set
    /// (Documentation/bpf/standardization/instruction-set.rst) in the form `llvm-objdump -d`
    /// prints, with map fd 7. (That the kernel's verifier accepts the program is checked by
    /// every namespace test.)
    #[test]
    #[cfg(target_endian = "little")]
    fn redirect_program_encoding() {
        let bytes: Vec<[u8; 8]> = redirect_program(7).iter().map(|i| i.to_bytes()).collect();
        assert_eq!(
            bytes,
            [
                [0x61, 0x12, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00], // r2 = *(u32 *)(r1 + 16)
                [0x18, 0x11, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00], // r1 = map_fd 7 ll
                [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
                [0xb7, 0x03, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00], // r3 = 2
                [0x85, 0x00, 0x00, 0x00, 0x33, 0x00, 0x00, 0x00], // call 51
                [0x95, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // exit
            ]
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn register_nibbles_and_negative_fields() {
        // dst in the low nibble, src in the high one; offsets and immediates two's complement.
        let i = Insn::new(0x61, 3, 10, -8, -1);
        assert_eq!(
            i.to_bytes(),
            [0x61, 0xa3, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(Insn::mov64_imm(0, -1).to_bytes()[4..], [0xff; 4]);
    }

    #[test]
    fn attr_layouts_match_the_kernel() {
        // Offsets of union bpf_attr members (include/uapi/linux/bpf.h).
        assert_eq!(std::mem::size_of::<MapCreateAttr>(), 44);
        assert_eq!(std::mem::size_of::<MapElemAttr>(), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(std::mem::size_of::<LinkCreateAttr>(), 16);
    }

    #[test]
    fn mode_names() {
        assert_eq!(XdpMode::Native.to_string(), "native");
        assert_eq!(XdpMode::Skb.to_string(), "skb");
        assert_eq!(XdpMode::Skb.link_flags(), 2);
        assert_eq!("native".parse::<XdpMode>().unwrap(), XdpMode::Native);
        assert_eq!("generic".parse::<XdpMode>().unwrap(), XdpMode::Skb);
        let e = "fast".parse::<XdpMode>().unwrap_err().to_string();
        assert!(e.contains("\"fast\" is not native or skb"), "{e}");
        assert_eq!(XdpMode::Native.link_flags(), 4);
    }
}
