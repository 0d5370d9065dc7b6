//! What the engine's threads share: the control channel's messages ([`Ctl`]; a scrape is
//! answered with a `qbridge_control::Snapshot` that `crate::snapshot` builds) and the handle
//! other threads send them through ([`Handle`]), the per-port counters and offload
//! state the workers of one port write and the control thread reads ([`PortShared`]), and an
//! AF_PACKET port's receive filter as the control thread computes it and the backends apply it
//! ([`RxFilter`]).
//!
//! Its own module so that the control thread (`crate::engine`), the workers
//! (`crate::worker`) and the backends (`crate::backends`) all import it and no import runs
//! back up: the engine imports the workers and the backends, and they import this, never the
//! engine. It imports no other module of the crate but `crate::monitor` (a constant).

use crate::monitor::MONITOR_QUEUE_LINES;
use qbridge_control::{MonitorObject, Op, OutputOptions, Response, Snapshot};
use qbridge_io::DeviceOffloads;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Mutex, MutexGuard};

/// What the socket, metrics and worker threads send to the control thread.
#[derive(Debug)]
pub enum Ctl {
    Request {
        op: Op,
        reply: mpsc::Sender<Response>,
    },
    Metrics {
        reply: mpsc::Sender<Snapshot>,
    },
    /// A monitor connection: queue the events of `objects` on `events` from now on.
    Monitor {
        objects: Vec<MonitorObject>,
        out: OutputOptions,
        events: mpsc::SyncSender<String>,
    },
    /// A `trace live` connection: trace the frames `spec` asks for onto `events`; the answer
    /// (`Err`: a port that does not exist) before the first frame.
    TraceLive {
        spec: qbridge_control::TraceLiveSpec,
        out: OutputOptions,
        events: mpsc::SyncSender<String>,
        reply: mpsc::Sender<Result<(), String>>,
    },
    /// A bond's queue received a Slow Protocols frame (LACPDU, Marker) on the member at
    /// position `member` of bond `bond` (`crate::bond_port`).
    BondPdu {
        bond: std::sync::Arc<str>,
        member: u8,
        frame: Vec<u8>,
    },
    /// A worker's queue failed with a link-down error (`token` names the port's opening).
    QueueFailed {
        token: u64,
        error: String,
    },
    /// The kernel told of a link change in the daemon's namespace (`engine/link.rs`'s
    /// notification thread): run the link watch now rather than at its next second.
    LinkEvent,
    /// A BPDU port `port` received, for its bridge's spanning tree (the frame path's trap,
    /// `qbridge_bridge::Outputs::punt`). Bounded by [`PuntGate`].
    Bpdu {
        port: u16,
        frame: Vec<u8>,
    },
    Shutdown,
}

/// Most trapped frames on their way from the workers to the control thread; beyond it a
/// worker drops the copy and counts it in [`PuntGate::dropped`] (a BPDU storm must not grow
/// the control channel without bound).
pub(crate) const PUNT_MAX_IN_FLIGHT: usize = 1024;

/// The bound on trapped frames in flight ([`Ctl::Bpdu`]), shared by the workers and the
/// control thread.
#[derive(Debug, Default)]
pub(crate) struct PuntGate {
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// Copies dropped because [`PUNT_MAX_IN_FLIGHT`] were in flight.
    pub dropped: AtomicU64,
}

impl PuntGate {
    /// Takes a place for one frame; false when the gate is full (counted).
    pub fn enter(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.in_flight.fetch_add(1, Relaxed) >= PUNT_MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Relaxed);
            self.dropped.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    /// Gives a place back (the control thread took the frame).
    pub fn leave(&self) {
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The other threads' way in.
#[derive(Debug, Clone)]
pub struct Handle {
    pub(crate) tx: mpsc::Sender<Ctl>,
}

impl Handle {
    /// Runs one request on the control thread and waits for its answer.
    pub fn call(&self, op: Op) -> Response {
        let (reply, rx) = mpsc::channel();
        if self.tx.send(Ctl::Request { op, reply }).is_err() {
            return Response::err("the daemon is shutting down");
        }
        rx.recv()
            .unwrap_or_else(|_| Response::err("the daemon is shutting down"))
    }

    pub fn metrics(&self) -> Option<Snapshot> {
        let (reply, rx) = mpsc::channel();
        self.tx.send(Ctl::Metrics { reply }).ok()?;
        rx.recv().ok()
    }

    /// Starts a monitor (see [`crate::monitor`]): the event lines, text or JSON as `out`
    /// says, each ending in a newline. `None` when the engine has stopped.
    pub fn monitor(
        &self,
        objects: Vec<MonitorObject>,
        out: OutputOptions,
    ) -> Option<mpsc::Receiver<String>> {
        let (events, rx) = mpsc::sync_channel(MONITOR_QUEUE_LINES);
        self.tx
            .send(Ctl::Monitor {
                objects,
                out,
                events,
            })
            .ok()?;
        Some(rx)
    }

    /// Starts `trace live` (see `crate::tracelive`): the traced frames, text or JSON as `out`
    /// says; the stream ends after its last frame or its timeout. `Err`: the request's error.
    pub fn trace_live(
        &self,
        spec: qbridge_control::TraceLiveSpec,
        out: OutputOptions,
    ) -> Result<mpsc::Receiver<String>, String> {
        let (events, rx) = mpsc::sync_channel(MONITOR_QUEUE_LINES);
        let (reply, answer) = mpsc::channel();
        self.tx
            .send(Ctl::TraceLive {
                spec,
                out,
                events,
                reply,
            })
            .map_err(|_| "the daemon is shutting down".to_string())?;
        answer
            .recv()
            .map_err(|_| "the daemon is shutting down".to_string())??;
        Ok(rx)
    }

    pub fn shutdown(&self) {
        let _ = self.tx.send(Ctl::Shutdown);
    }
}

/// What the workers of one port share with the control thread: counters the control thread
/// reads for `link show` and metrics.
#[derive(Debug, Default)]
pub struct PortShared {
    pub tx_sw_gso: AtomicU64,
    pub tx_gso_refused: AtomicU64,
    /// GRO: super-frames made for the port, and the segments merged into them.
    pub tx_gro_frames: AtomicU64,
    pub tx_gro_segments: AtomicU64,
    /// Frames received on the port, per worker (written once per burst by that worker).
    pub rx_frames_by_worker: Box<[AtomicU64]>,
    /// AF_PACKET: the device's offloads as a worker last read them.
    offloads: Mutex<Option<DeviceOffloads>>,
    /// The port's ifindex while the eBPF fast path receives for it (0: it does not).
    pub fast_ifindex: std::sync::atomic::AtomicU32,
    /// A veth port whose other end is in another namespace: that end's address, `1 << 63 |`
    /// the address as a big-endian 48-bit number (0: none, or unknown). Flows to it are
    /// redirected to the peer directly (`crate::fastpath`).
    pub fast_peer_mac: AtomicU64,
    /// A TAP port the fast path serves: frames to it are delivered into the TAP's own
    /// receive (the host's stack), as writing them to the TAP does.
    pub fast_into_host: std::sync::atomic::AtomicBool,
    /// A VXLAN port whose underlay the fast path decapsulates (decision 77): what its socket
    /// receives are the program's misses, forwarded as a served TAP's (flows installed).
    pub fast_decap: std::sync::atomic::AtomicBool,
    /// A patch link end: the port id of the other end ([`NO_PATCH_PEER`]: none), for the
    /// workers to fold the link into flows.
    pub patch_peer: std::sync::atomic::AtomicU32,
    /// A VXLAN port: what the fast path needs to encapsulate for it (decision 73; `None`: the
    /// program does not, its frames stay with the pipeline).
    pub fast_vxlan: crate::fastpath::vxlan::SharedEgress,
}

/// [`PortShared::patch_peer`] of a port that is no patch link end (or whose peer is absent).
pub const NO_PATCH_PEER: u32 = u32::MAX;

/// [`PortShared::fast_peer_mac`]'s encoding of `mac`.
pub fn encode_peer_mac(mac: Option<[u8; 6]>) -> u64 {
    mac.map_or(0, |m| {
        1 << 63 | m.iter().fold(0u64, |a, &b| a << 8 | u64::from(b))
    })
}

/// The address [`encode_peer_mac`] encoded.
pub fn decode_peer_mac(v: u64) -> Option<[u8; 6]> {
    (v >> 63 == 1).then(|| {
        let b = v.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    })
}

impl PortShared {
    pub(crate) fn new(workers: usize) -> PortShared {
        PortShared {
            rx_frames_by_worker: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            patch_peer: NO_PATCH_PEER.into(),
            ..PortShared::default()
        }
    }

    pub(crate) fn lock_offloads(&self) -> MutexGuard<'_, Option<DeviceOffloads>> {
        self.offloads.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Receive filter of an AF_PACKET port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RxFilter {
    pub promisc: bool,
    pub unicast: Vec<[u8; 6]>,
}
