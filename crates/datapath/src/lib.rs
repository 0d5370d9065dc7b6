//! qbridge's live datapath engine, as a library: worker threads that receive, forward with the
//! bridge core, fix up offloads and transmit; the port backends behind one [`Queue`] trait; and
//! the control thread that runs commands on a live switch and hands each worker the compiled
//! plan and the queues it owns.
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
//! The binary keeps only the wiring (arguments, control socket, metrics endpoint, signals).

mod backends;
pub mod egress;
mod engine;
mod mirror;
pub mod monitor;
pub mod patch;
pub mod pcap;
pub mod queue;
mod reaper;
pub mod state;
mod worker;

pub use backends::default_ring_frames;
pub use engine::{Ctl, Engine, EngineConfig, Handle, MetricsSnapshot, PortRuntime, PortShared};
pub use queue::{BackendDrops, Queue, Queues, SharedQueue, Tick};
pub use worker::BURST;
