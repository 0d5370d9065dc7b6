//! qbridge's live datapath engine, as a library: worker threads that receive, forward with the
//! bridge core, fix up offloads and transmit; the backends behind `qbridge_io`'s one port
//! trait (a worker's [`Queue`] is a boxed [`qbridge_io::Port`]), which the engine opens and
//! wires; and the control thread that runs commands on a live switch and hands each worker the
//! compiled plan and the queues it owns.
//!
//! ```text
//!  socket/metrics threads ──Ctl──► Engine (control thread: Session, reconcile, link watch,
//!                                          ageing)
//!                                     │ ToWorker::Update { plan, attach, detach } (one message,
//!                                     ▼ applied between two batches)
//!  worker 0 … worker N-1: epoll ─► rx_burst ─► Plan::process ─► egress (GSO/csum fix-up)
//!                                                                 ─► tx_burst on its own queue
//!  queues a worker loses ─► reaper threads (close off the forwarding path; crate::reaper)
//! ```
//!
//! The binary keeps only the wiring (arguments, control socket, metrics endpoint, signals).

mod backends;
mod engine;
mod mirror_sink;
pub mod monitor;
pub mod patch;
pub mod pcap_port;
pub mod queue;
mod reaper;
mod shared;
pub mod state;
pub mod transmit;
mod worker;

pub use backends::default_ring_frames;
pub use engine::{Engine, EngineConfig};
pub use queue::{Queue, Queues, SharedQueue};
pub use shared::{Ctl, Handle, MetricsSnapshot, PortRuntime, PortShared};
pub use worker::BURST;
