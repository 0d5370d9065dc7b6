//! qbridge's live datapath engine, as a library: worker threads that receive, forward with the
//! bridge core, fix up offloads and transmit; the backends behind `qbridge_io`'s one port
//! trait (a worker's [`Queue`] is a boxed [`qbridge_io::Port`]), which the engine opens and
//! wires to the bridge core; and the control thread that runs commands on a live switch and
//! hands each worker the compiled plan and the queues it owns.
//!
//! ```text
//!  socket/metrics threads ──Ctl──► Engine (control thread: Session, reconcile, link watch,
//!                                          ageing)
//!                                     │ ToWorker::Update { plan, attach, detach } (one message,
//!                                     ▼ applied between two batches)
//!  worker 0 … worker N-1: epoll ─► rx_burst ─► Forwarder::process ─► egress (GSO/csum fix-up)
//!                                                                      ─► tx_burst on its own queue
//!  queues a worker loses ─► reaper threads (close off the forwarding path; crate::reaper)
//! ```
//!
//! Modules, and which way they import (no circle):
//!
//! * `engine` — the control thread: its loop (`engine.rs`) and rooms (`engine/`: port
//!   lifecycle, link state and MTU with the link watch, receive filters, learning watches).
//!   Imports `worker`, `backends`, `queue`, `patch`, `pcap_port`, `mirror_sink`, `monitor`,
//!   `reaper`, `shared`.
//! * `worker` — a worker thread; [`transmit`] — its transmit stage. Imports `shared`, `queue`,
//!   `transmit`, `mirror_sink`, `reaper`.
//! * `shared` — what the threads share ([`Ctl`], [`Handle`], [`PortShared`], `RxFilter`).
//! * `backends` (AF_PACKET and AF_XDP queues), [`patch`] (patch links), [`pcap_port`] (the
//!   pcap-file port), [`queue`] (queues spread over workers) — the ports the engine opens.
//! * `mirror_sink` (mirror sessions' pcap files), [`monitor`] (`monitor` streams), [`state`]
//!   (the state file), `reaper` (closing off the workers).
//!
//! The binary keeps only the wiring (arguments, control socket, metrics endpoint, signals).

mod backends;
pub mod bond_port;
mod dropwatch;
mod engine;
pub mod fastpath;
mod mirror_sink;
pub mod monitor;
pub mod patch;
pub mod pcap_port;
pub mod queue;
mod reaper;
mod shared;
mod snapshot;
pub mod state;
mod tracelive;
pub mod transmit;
mod worker;

pub use backends::default_ring_frames;
pub use engine::{Engine, EngineConfig};
pub use fastpath::FastPathMode;
pub use queue::{Queue, Queues, SharedQueue};
pub use shared::{Ctl, Handle, PortShared};
pub use worker::BURST;
