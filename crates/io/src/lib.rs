//! Port backends: the only place where qbridge touches the outside world.
//!
//! Owns the byte-level formats and syscalls that move frames in and out of the switch:
//! classic pcap files ([`pcap`]), an in-memory port for tests ([`mem`]), and (on Linux) live
//! AF_PACKET and TAP ports. Every backend speaks the batch [`port::Port`] interface; the bridge
//! core never sees which one is behind a port.
//!
//! This is the only crate allowed `unsafe`; it is confined to the syscall modules, and every
//! block carries a `// SAFETY:` comment (clippy `undocumented_unsafe_blocks` is deny).

#[cfg(target_os = "linux")]
pub mod afpacket;
pub mod error;
pub mod pcap;

pub use error::IoError;
pub mod mem;
#[cfg(target_os = "linux")]
pub mod netns;
pub mod port;
#[cfg(target_os = "linux")]
pub mod sys;
#[cfg(target_os = "linux")]
pub mod tap;

pub use mem::{MemFrame, MemPort};
pub use port::{Port, PortCaps, TxOutcome};
