//! Opening the device backends of a port — AF_PACKET sockets in a fanout group with a shared
//! receive filter, AF_XDP sockets under one XDP program — and how their state is shown. Called
//! by the engine's control thread only; the queues it returns are handed to the workers.

use crate::queue::{distribute, Opened};
use crate::shared::RxFilter;
use qbridge_control::{DeviceOffloadStatus, PortSpec, XdpAttach};
use qbridge_io::afpacket::{
    AfPacketConfig, AfPacketPort, Fanout, FanoutMode, RxFilterHandle, RxMode,
};
use qbridge_io::afxdp::{AfXdpConfig, AfXdpPort, XdpMode, XdpProgram};
use qbridge_io::{sys, DeviceOffloads, IoError};
use std::sync::Arc;

/// Opens port `name`'s AF_PACKET queues on `dev`: one socket per worker, all in one
/// `PACKET_FANOUT_HASH` group (the kernel's flow hash reads through stacked tags to L4, so a
/// flow stays on one worker; docs/decisions.md 17), raising the device MTU to `want_mtu`
/// (never lowering it). Returns the queues (worker order), the device MTU now in force and
/// the device's offloads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_afpacket_queues(
    name: &str,
    dev: &str,
    qdisc_bypass: bool,
    ring_frames: u32,
    filter: &RxFilter,
    want_mtu: u32,
    workers: usize,
    rx: RxMode,
) -> Result<(Opened, Arc<RxFilterHandle>, u32, DeviceOffloads), IoError> {
    let before = sys::get_mtu(dev)?;
    let handle = RxFilterHandle::open(dev)?;
    handle.set_promisc(filter.promisc)?;
    if !filter.promisc {
        handle.set_unicast(&filter.unicast)?;
    }
    let mut cfg = AfPacketConfig::new(dev).with_ring_frames(ring_frames);
    cfg.qdisc_bypass = qdisc_bypass;
    cfg.filter = Some(handle.clone());
    cfg.device_mtu = Some(want_mtu);
    // Receiving starts when a worker takes each socket over (`Port::start`): sockets that
    // replace others of this interface (a port re-added in one batch, a changed spec) must not
    // receive alongside them meanwhile — two fanout groups would each get every frame.
    cfg.paused = true;
    cfg.rx = rx;
    if workers > 1 && rx != RxMode::None {
        // A group id the kernel picks, so it can never be one a group of a deleted port still
        // holds (its sockets close after the new ones opened: a batch that deletes a port and
        // adds another is rolled back whole if the new one cannot open; docs/decisions.md 27).
        cfg.fanout = Some(Fanout::unique(FanoutMode::Hash));
    }
    let mut queues: Opened = Vec::with_capacity(workers);
    let mut offloads = DeviceOffloads::default();
    for w in 0..workers.max(1) {
        let p = AfPacketPort::open(cfg.clone())?;
        if w == 0 {
            offloads = p.device_offloads();
            // The others join the group the first one made.
            cfg.fanout = p.fanout();
        }
        queues.push(Box::new(p));
    }
    let after = sys::get_mtu(dev).unwrap_or(before.max(want_mtu));
    if after != before {
        tracing::info!(
            "port {name}: device MTU of {dev} raised from {before} to {after} for envelope \
             frames (the kernel allows only 4 bytes of slack, for 0x8100 only)"
        );
    }
    Ok((queues, handle, after, offloads))
}

/// Receive ring frames of all AF_PACKET ports together, when they do not say (`ring_frames`):
/// 65 536 frames, 128 MiB of 2 KiB slots, shared out over the ports (docs/decisions.md 28).
pub const RING_BUDGET_FRAMES: u32 = 65_536;
/// Most frames a port gets by default: 16 384 (32 MiB), what every port had before — so up to
/// four ports (a bench-live setup, a small switch) keep the rings they had.
pub const PORT_RING_FRAMES_MAX: u32 = 16_384;
/// Fewest frames a port gets by default: 512 (1 MiB): room for
/// two 256-frame receive bursts, while its worker serves the other ports.
pub const PORT_RING_FRAMES_MIN: u32 = 512;
/// A port's share is split over at most this many sockets: with more workers each socket
/// keeps an eighth of it (2048 of the largest share, the old per-socket minimum; 64 of the
/// smallest, one 128 KiB block).
pub const RING_SPLIT_MAX: usize = 8;

/// Receive ring slots per AF_PACKET socket when the port does not say (`ring_frames`), for a
/// configuration of `afpacket_ports` AF_PACKET ports: the port's share of
/// [`RING_BUDGET_FRAMES`], between [`PORT_RING_FRAMES_MIN`] and [`PORT_RING_FRAMES_MAX`],
/// shared out over the workers' sockets (the fanout hash spreads the port's frames over
/// them), over at most [`RING_SPLIT_MAX`] of them. A ring holds a burst while the
/// worker serves other ports; the more ports, the less of the machine's rate each can have,
/// so the smaller its share. Memory: the result x 2 KiB per socket, x workers per port.
/// Ports added later get the share of the port count then; a port keeps its ring until it is
/// reopened.
pub fn default_ring_frames(workers: usize, afpacket_ports: usize) -> u32 {
    let port = (RING_BUDGET_FRAMES / afpacket_ports.max(1) as u32)
        .clamp(PORT_RING_FRAMES_MIN, PORT_RING_FRAMES_MAX);
    port / workers.clamp(1, RING_SPLIT_MAX) as u32
}

/// Bytes of receive ring one AF_PACKET socket with `frames` frames pins (whole blocks).
pub fn ring_bytes(frames: u32) -> u64 {
    AfPacketConfig::new("-")
        .with_ring_frames(frames)
        .ring_bytes()
}

/// Opens an AF_XDP port's queues: the XDP program once for the device, one socket per device
/// queue, spread over the workers.
pub(crate) fn open_afxdp_queues(
    spec: &PortSpec,
    want_mtu: u32,
    workers: usize,
    rotate: usize,
) -> Result<Opened, IoError> {
    let PortSpec::AfXdp {
        dev,
        queues,
        mode,
        zerocopy,
    } = spec
    else {
        return Err(IoError::Invalid("not an AF_XDP port".into()));
    };
    if *queues as usize > workers {
        return Err(IoError::Invalid(format!(
            "queues {queues} is more than the daemon's {workers} workers (--workers)"
        )));
    }
    let mode = match mode {
        XdpAttach::Native => XdpMode::Native,
        XdpAttach::Skb => XdpMode::Skb,
    };
    // XDP takes what the device receives: the device must receive everything (a veth does
    // anyway; a NIC filters unicast without promiscuous mode). The membership lives as long
    // as the handle, which the queues keep (`AfXdpPort::keep_promisc`).
    let promisc = RxFilterHandle::open(dev)?;
    promisc.set_promisc(true)?;
    let prog = XdpProgram::attach(dev, mode)?;
    let mut opened: Opened = Vec::new();
    for q in 0..*queues {
        let mut cfg = AfXdpConfig::new(dev, q);
        cfg.mode = mode;
        cfg.zerocopy = *zerocopy;
        cfg.device_mtu = Some(want_mtu);
        let mut port = AfXdpPort::open_with(cfg, &prog)?;
        port.keep_promisc(promisc.clone());
        opened.push(Box::new(port));
    }
    distribute(opened, workers, rotate)
}

/// `queues 2 mode native zerocopy off` for the log.
pub(crate) fn describe_spec(spec: &PortSpec) -> String {
    match spec {
        PortSpec::AfXdp {
            queues,
            mode,
            zerocopy,
            ..
        } => format!(
            "queues {queues} mode {} zerocopy {}",
            mode.as_str(),
            if *zerocopy { "on" } else { "off" }
        ),
        other => other.kind().to_owned(),
    }
}

/// A device's offloads as `link show` and the metrics report them.
pub(crate) fn offload_status(d: DeviceOffloads) -> DeviceOffloadStatus {
    DeviceOffloadStatus {
        tso4: d.tso4,
        tso6: d.tso6,
        tso_ecn: d.tso_ecn,
        sg: d.sg,
        csum4: d.csum4,
        csum6: d.csum6,
        refused_tag_depths: (0..8u8)
            .filter(|&i| d.refused_tags & (1 << i) != 0)
            .collect(),
    }
}

/// `tso4 on tso6 off …` for the log.
pub(crate) fn describe_offloads(o: &DeviceOffloadStatus) -> String {
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "tso4 {} tso6 {} tso_ecn {} sg {} csum4 {} csum6 {}",
        on(o.tso4),
        on(o.tso6),
        on(o.tso_ecn),
        on(o.sg),
        on(o.csum4),
        on(o.csum6)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Up to four ports keep the rings they had (16 384 frames a port over the workers, at
    /// least 2048 a socket); more share 65 536, down to 512 a port; split over at most 8.
    #[test]
    fn default_rings_share_a_budget() {
        assert_eq!(default_ring_frames(1, 1), 16_384);
        assert_eq!(default_ring_frames(2, 2), 8192);
        assert_eq!(default_ring_frames(2, 4), 8192);
        assert_eq!(default_ring_frames(8, 1), 2048);
        assert_eq!(default_ring_frames(16, 3), 2048);
        assert_eq!(default_ring_frames(2, 50), 655);
        assert_eq!(default_ring_frames(2, 1000), 256);
        assert_eq!(default_ring_frames(16, 1000), 64);
        // 1000 ports, 2 workers: 512 KiB per socket, 1000 MiB in all (was 32 GiB).
        assert_eq!(
            ring_bytes(default_ring_frames(2, 1000)) * 2 * 1000,
            1000 << 20
        );
        // 50 ports: 137.5 MiB (was 1600 MiB).
        assert_eq!(ring_bytes(655) * 2 * 50, 1100 << 17);
    }
}
