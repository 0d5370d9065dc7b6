//! Port backends: the only place where qbridge touches the outside world.
//!
//! Owns the byte-level formats and syscalls that move frames in and out of the switch:
//! classic pcap files ([`pcap`]), an in-memory port for tests ([`mem`]), and on Linux live
//! AF_PACKET ([`afpacket`], with a receive filter its sockets share: [`rxfilter`]), AF_XDP
//! ([`afxdp`], with its own minimal XDP loader) and TAP ([`tap`]) ports, with the interface
//! ioctls they share ([`sys`]), VXLAN ports over a UDP socket ([`vxlan`]), a helper to open ports inside a network namespace ([`netns`])
//! and a lock per interface across daemons ([`iflock`]). Every port speaks the batch [`Port`]
//! interface, which also carries what a poll loop needs (descriptor, backend drops, a
//! once-a-second tick, start, close). The bridge core never sees which backend is behind it,
//! and this crate never sees the bridge: the datapath engine (`qbridge_datapath`) opens the
//! backends and wires them to the core; the binary and the examples use them directly too
//! (replay's pcap files, the demo's AF_PACKET ports).
//!
//! The workspace denies `unsafe_code`; this crate holds most of qbridge's `unsafe`, confined
//! to the syscall modules (each allows it for itself), and every block carries a `// SAFETY:`
//! comment (clippy `undocumented_unsafe_blocks` is deny). The two other places that allow it:
//! `qbridge-fastpath` (aya's `Pod` impls, a bpf syscall, BPF_PROG_TEST_RUN) and the bench
//! crate's `qbridge-blast` binary (an XDP sender).

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(target_os = "linux")]
pub mod afxdp;
pub mod error;
#[cfg(target_os = "linux")]
pub mod iflock;
pub mod mem;
#[cfg(target_os = "linux")]
pub mod netns;
pub mod pcap;
pub mod port;
#[cfg(target_os = "linux")]
pub mod rxfilter;
#[cfg(target_os = "linux")]
pub mod sys;
#[cfg(target_os = "linux")]
pub mod tap;
#[cfg(target_os = "linux")]
pub mod vxlan;

pub use error::IoError;
pub use mem::{MemFrame, MemPort};
pub use port::{BackendDrops, DeviceOffloads, Port, PortCaps, Tick, TxOutcome, TxReport};
