//! A bond's queue: [`BondPort`], the one port trait (`qbridge_io::Port`) over the members'
//! queues (queue *i* of the bond is the members' queue *i*), and [`BondShared`], what the
//! bond's queues share with the control thread.
//!
//! Receive: each burst reads the members in turn (starting one further each time) into a
//! scratch batch; Slow Protocols frames (LACPDUs, Markers: `qbridge_lacp::is_slow_protocols`)
//! leave the burst and go to the control thread as [`Ctl::BondPdu`] (at most
//! [`PDU_IN_FLIGHT_MAX`] in flight, counted beyond that as `pdu_overflow`); frames from a
//! member that is not collecting are dropped and counted (`rx_not_collecting`); the rest are
//! appended to the caller's batch and enter the bridge as the bond's port.
//!
//! Transmit: each frame's member is `table[flow_hash(frame, policy) & 0xff]`, the transmit
//! table the control thread publishes into [`BondShared`] (256 atomics and a generation; the
//! queue copies the table once per burst when the generation moved, so a flow goes to one
//! member, in order, and no lock or syscall is added per frame). Frames are split into one
//! batch per member and sent with one burst per member. No member: dropped, counted as
//! `tx_no_member` (and as the port's `tx_error`).
//!
//! Protocol frames the control thread sends on a member go into the shared outbox, and an
//! eventfd in queue 0's epoll set wakes worker 0, whose queue sends them at its next burst
//! (no change to the worker loop: the bond's descriptor is an epoll fd holding the members'
//! descriptors and, for queue 0, the eventfd).
//!
//! A member's error (its link went down: ENETDOWN) is counted and not passed on: the bond
//! stays open; the control thread's member link watch takes the member out of the table.

use crate::queue::Queue;
use crate::shared::Ctl;
use qbridge_io::{
    BackendDrops, DeviceOffloads, IoError, Port, PortCaps, Tick, TxOutcome, TxReport,
};
use qbridge_lacp::{flow_hash, is_slow_protocols, HashPolicy};
use qbridge_packet::{Batch, BufPool};
use rustix::event::{epoll, eventfd, EventfdFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Most members a bond has (`qbridge_control::MAX_BOND_MEMBERS`).
pub const MAX_MEMBERS: usize = qbridge_control::MAX_BOND_MEMBERS;
/// Slow Protocols frames handed to the control thread and not yet taken.
pub const PDU_IN_FLIGHT_MAX: usize = 64;
/// A table bucket with no member.
const NO_MEMBER: u8 = u8::MAX;
const BUCKETS: usize = qbridge_lacp::BUCKETS;

/// Per-member traffic counters, written by the bond's queues once per burst.
#[derive(Debug, Default)]
pub struct MemberTraffic {
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Dropped: received while the member was not collecting.
    pub rx_not_collecting: AtomicU64,
    /// Slow Protocols frames received and handed to the control thread.
    pub rx_pdus: AtomicU64,
    /// Protocol frames the control thread sent on the member.
    pub tx_pdus: AtomicU64,
    /// Bursts that failed (the member's link down or gone).
    pub errors: AtomicU64,
}

impl MemberTraffic {
    /// Every counter, in field order.
    fn cells(&self) -> [&AtomicU64; 8] {
        [
            &self.rx_frames,
            &self.rx_bytes,
            &self.tx_frames,
            &self.tx_bytes,
            &self.rx_not_collecting,
            &self.rx_pdus,
            &self.tx_pdus,
            &self.errors,
        ]
    }
}

/// What a bond's queues share with the control thread.
#[derive(Debug)]
pub struct BondShared {
    pub name: Arc<str>,
    policy: AtomicU8,
    table: [AtomicU8; BUCKETS],
    generation: AtomicU64,
    collecting: [AtomicBool; MAX_MEMBERS],
    pdus_in_flight: AtomicUsize,
    /// Slow Protocols frames dropped: [`PDU_IN_FLIGHT_MAX`] were in flight.
    pub pdu_overflow: AtomicU64,
    /// Frames dropped on transmit: no member distributes.
    pub tx_no_member: AtomicU64,
    pub members: [MemberTraffic; MAX_MEMBERS],
    outbox: Mutex<Vec<(u8, Vec<u8>)>>,
    outbox_pending: AtomicBool,
    wake: OwnedFd,
}

fn policy_code(p: HashPolicy) -> u8 {
    match p {
        HashPolicy::Layer2 => 0,
        HashPolicy::Layer2Vlan => 1,
        HashPolicy::Layer34 => 2,
        HashPolicy::InnerLayer34 => 3,
    }
}

fn policy_of(c: u8) -> HashPolicy {
    match c {
        1 => HashPolicy::Layer2Vlan,
        2 => HashPolicy::Layer34,
        3 => HashPolicy::InnerLayer34,
        _ => HashPolicy::Layer2,
    }
}

impl BondShared {
    pub fn new(name: &str) -> Result<BondShared, rustix::io::Errno> {
        Ok(BondShared {
            name: Arc::from(name),
            policy: AtomicU8::new(0),
            table: std::array::from_fn(|_| AtomicU8::new(NO_MEMBER)),
            generation: AtomicU64::new(1),
            collecting: std::array::from_fn(|_| AtomicBool::new(false)),
            pdus_in_flight: AtomicUsize::new(0),
            pdu_overflow: AtomicU64::new(0),
            tx_no_member: AtomicU64::new(0),
            members: std::array::from_fn(|_| MemberTraffic::default()),
            outbox: Mutex::new(Vec::new()),
            outbox_pending: AtomicBool::new(false),
            wake: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        })
    }

    /// The members' counters follow their members when the member list changes: `old` is
    /// the names the counters were kept for (by position), `new` the order from now on; a
    /// member that stays keeps its counts at its new position, a new member starts at zero,
    /// a removed one's are dropped. (Queues still running with the old list may add a burst
    /// at the old positions before the new queues replace them.)
    pub fn reorder_members(&self, old: &[String], new: &[String]) {
        let before: Vec<[u64; 8]> = self
            .members
            .iter()
            .map(|t| t.cells().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        for (i, t) in self.members.iter().enumerate() {
            let values = new
                .get(i)
                .and_then(|n| old.iter().position(|o| o == n))
                .and_then(|j| before.get(j).copied())
                .unwrap_or([0; 8]);
            for (c, v) in t.cells().into_iter().zip(values) {
                c.store(v, Ordering::Relaxed);
            }
        }
    }

    /// Publishes the transmit table (bucket → member position, `None`: no member) and the
    /// hash policy; the queues take it at their next burst.
    pub fn publish(&self, policy: HashPolicy, table: &[Option<usize>; BUCKETS]) {
        self.policy.store(policy_code(policy), Ordering::Relaxed);
        for (slot, m) in self.table.iter().zip(table) {
            let v = m
                .filter(|&m| m < MAX_MEMBERS)
                .map_or(NO_MEMBER, |m| m as u8);
            slot.store(v, Ordering::Relaxed);
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Member at `pos` accepts frames (collecting) or not.
    pub fn set_collecting(&self, pos: usize, on: bool) {
        if let Some(c) = self.collecting.get(pos) {
            c.store(on, Ordering::Relaxed);
        }
    }

    /// The control thread took a frame the queues handed up.
    pub fn pdu_taken(&self) {
        let _ = self
            .pdus_in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Queues `frame` to be sent on the member at `pos` by queue 0, and wakes its worker.
    pub fn send(&self, pos: usize, frame: Vec<u8>) {
        if pos >= MAX_MEMBERS {
            return;
        }
        self.outbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((pos as u8, frame));
        self.outbox_pending.store(true, Ordering::Release);
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// One queue of a bond. See the module documentation.
#[derive(Debug)]
pub struct BondPort {
    name: String,
    members: Vec<Queue>,
    epoll: OwnedFd,
    shared: Arc<BondShared>,
    ctl: mpsc::Sender<Ctl>,
    /// Queue 0: sends the control thread's protocol frames.
    sends_control: bool,
    table: [u8; BUCKETS],
    generation: u64,
    policy: HashPolicy,
    split: Vec<Batch>,
    scratch: Batch,
    next_rx: usize,
}

impl BondPort {
    /// Queue `index` of bond `name` over `members` (each member's queue `index`, in member
    /// order).
    pub fn new(
        name: &str,
        index: usize,
        members: Vec<Queue>,
        shared: Arc<BondShared>,
        ctl: mpsc::Sender<Ctl>,
    ) -> Result<BondPort, IoError> {
        let sys = |e: rustix::io::Errno| IoError::Sys {
            op: "epoll",
            ifname: name.to_string(),
            source: e.into(),
        };
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(sys)?;
        for (i, m) in members.iter().enumerate() {
            if let Some(fd) = m.fd() {
                epoll::add(
                    &ep,
                    fd,
                    epoll::EventData::new_u64(i as u64),
                    epoll::EventFlags::IN,
                )
                .map_err(sys)?;
            }
        }
        if index == 0 {
            epoll::add(
                &ep,
                shared.wake.as_fd(),
                epoll::EventData::new_u64(u64::MAX),
                epoll::EventFlags::IN,
            )
            .map_err(sys)?;
        }
        let n = members.len();
        Ok(BondPort {
            name: name.to_string(),
            members,
            epoll: ep,
            shared,
            ctl,
            sends_control: index == 0,
            table: [NO_MEMBER; BUCKETS],
            generation: 0,
            policy: HashPolicy::Layer2,
            split: (0..n).map(|_| Batch::with_capacity(64)).collect(),
            scratch: Batch::with_capacity(64),
            next_rx: 0,
        })
    }

    /// Sends the control thread's protocol frames (queue 0).
    fn drain_outbox(&mut self, pool: &mut BufPool) {
        if !self.shared.outbox_pending.swap(false, Ordering::Acquire) {
            return;
        }
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.shared.wake, &mut buf);
        let frames =
            std::mem::take(&mut *self.shared.outbox.lock().unwrap_or_else(|e| e.into_inner()));
        for (pos, frame) in frames {
            let pos = pos as usize;
            let Some(m) = self.members.get_mut(pos) else {
                continue;
            };
            let mut p = pool.get();
            p.set_frame(&frame);
            self.scratch.push(p);
            let t = &self.shared.members[pos];
            match m.tx_burst(&mut self.scratch, pool) {
                Ok(o) if o.sent == 1 => {
                    t.tx_pdus.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    t.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            pool.put_all(&mut self.scratch);
        }
    }

    fn refresh_table(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        self.generation = g;
        self.policy = policy_of(self.shared.policy.load(Ordering::Relaxed));
        for (t, s) in self.table.iter_mut().zip(&self.shared.table) {
            *t = s.load(Ordering::Relaxed);
        }
    }

    /// Splits `batch` over the members and sends each share with one burst.
    fn send(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        mut refused: Option<&mut Batch>,
    ) -> TxReport {
        self.refresh_table();
        let n = self.members.len();
        let mut report = TxReport::default();
        let mut no_member = 0usize;
        for p in batch.pkts.drain(..) {
            let m = self.table[(flow_hash(p.frame(), self.policy) & 0xff) as usize] as usize;
            match self.split.get_mut(m) {
                Some(b) if m < n => b.push(p),
                _ => {
                    no_member += 1;
                    pool.put(p);
                }
            }
        }
        if no_member != 0 {
            report.error += no_member;
            self.shared
                .tx_no_member
                .fetch_add(no_member as u64, Ordering::Relaxed);
        }
        for i in 0..n {
            let share = &mut self.split[i];
            if share.is_empty() {
                continue;
            }
            let frames = share.len();
            let bytes: usize = share.iter().map(|p| p.len()).sum();
            let member = &mut self.members[i];
            let r = match refused.as_deref_mut() {
                Some(r) => member.tx_burst_report(share, pool, r),
                None => member.tx_burst(share, pool).map(TxReport::from),
            };
            pool.put_all(share);
            let t = &self.shared.members[i];
            match r {
                Ok(r) => {
                    t.tx_frames.fetch_add(r.sent as u64, Ordering::Relaxed);
                    if r.sent == frames {
                        t.tx_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                    }
                    report.sent += r.sent;
                    report.queue_full += r.queue_full;
                    report.kernel_drop += r.kernel_drop;
                    report.too_long += r.too_long;
                    report.error += r.error;
                    report.refused += r.refused;
                }
                Err(_) => {
                    t.errors.fetch_add(1, Ordering::Relaxed);
                    report.error += frames;
                }
            }
        }
        report
    }
}

/// The queue of a member whose interface does not exist yet: receives nothing, drops what it
/// is given (its link is down, so the table names it for nothing). The control thread opens
/// the bond again when the interface appears.
#[derive(Debug)]
pub struct AbsentMember {
    pub name: String,
}

impl Port for AbsentMember {
    fn rx_burst(&mut self, _: &mut Batch, _: &mut BufPool, _: usize) -> Result<usize, IoError> {
        Ok(0)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        let n = batch.len();
        pool.put_all(batch);
        Ok(TxOutcome {
            error: n,
            ..TxOutcome::default()
        })
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            max_frame: 1518,
            ..PortCaps::default()
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Hands a Slow Protocols frame to the control thread, within the in-flight bound.
fn hand_up(shared: &BondShared, ctl: &mpsc::Sender<Ctl>, member: usize, frame: &[u8]) {
    let taken = shared
        .pdus_in_flight
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < PDU_IN_FLIGHT_MAX).then_some(n + 1)
        })
        .is_ok();
    if !taken {
        shared.pdu_overflow.fetch_add(1, Ordering::Relaxed);
        return;
    }
    shared.members[member]
        .rx_pdus
        .fetch_add(1, Ordering::Relaxed);
    let sent = ctl.send(Ctl::BondPdu {
        bond: shared.name.clone(),
        member: member as u8,
        frame: frame.to_vec(),
    });
    if sent.is_err() {
        shared.pdu_taken();
    }
}

impl Port for BondPort {
    fn rx_burst(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        max: usize,
    ) -> Result<usize, IoError> {
        if self.sends_control {
            self.drain_outbox(pool);
        }
        let n = self.members.len();
        let mut got = 0;
        for k in 0..n {
            if got >= max {
                break;
            }
            let i = (self.next_rx + k) % n;
            debug_assert!(self.scratch.is_empty());
            match self.members[i].rx_burst(&mut self.scratch, pool, max - got) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(_) => {
                    self.shared.members[i]
                        .errors
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            let collecting = self.shared.collecting[i].load(Ordering::Relaxed);
            let (mut frames, mut bytes, mut dropped) = (0u64, 0u64, 0u64);
            for p in self.scratch.pkts.drain(..) {
                if is_slow_protocols(p.frame()) {
                    hand_up(&self.shared, &self.ctl, i, p.frame());
                    pool.put(p);
                } else if !collecting {
                    dropped += 1;
                    pool.put(p);
                } else {
                    frames += 1;
                    bytes += p.len() as u64;
                    batch.push(p);
                    got += 1;
                }
            }
            let t = &self.shared.members[i];
            if frames != 0 {
                t.rx_frames.fetch_add(frames, Ordering::Relaxed);
                t.rx_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            if dropped != 0 {
                t.rx_not_collecting.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        self.next_rx = (self.next_rx + 1) % n.max(1);
        Ok(got)
    }

    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut BufPool) -> Result<TxOutcome, IoError> {
        Ok(self.send(batch, pool, None).outcome())
    }

    fn tx_burst_report(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        refused: &mut Batch,
    ) -> Result<TxReport, IoError> {
        Ok(self.send(batch, pool, Some(refused)))
    }

    /// What every collecting member can take (all members when none collects): a member
    /// whose link went down must not narrow the bond's offloads (its kernel refuses
    /// super-frames while down, which would make the bond segment in software).
    fn caps(&self) -> PortCaps {
        let any =
            (0..self.members.len()).any(|i| self.shared.collecting[i].load(Ordering::Relaxed));
        let mut it = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| !any || self.shared.collecting[*i].load(Ordering::Relaxed))
            .map(|(_, m)| m.caps());
        let Some(mut c) = it.next() else {
            return PortCaps {
                max_frame: 1518,
                ..PortCaps::default()
            };
        };
        for o in it {
            c.vnet_hdr &= o.vnet_hdr;
            c.tso &= o.tso;
            c.csum &= o.csum;
            c.max_frame = c.max_frame.min(o.max_frame);
            c.device = match (c.device, o.device) {
                (Some(a), Some(b)) => Some(DeviceOffloads {
                    tso4: a.tso4 && b.tso4,
                    tso6: a.tso6 && b.tso6,
                    tso_ecn: a.tso_ecn && b.tso_ecn,
                    sg: a.sg && b.sg,
                    csum4: a.csum4 && b.csum4,
                    csum6: a.csum6 && b.csum6,
                    refused_tags: a.refused_tags | b.refused_tags,
                }),
                (a, b) => a.or(b),
            };
        }
        c
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.as_fd())
    }

    fn rx_pending(&self) -> bool {
        self.members.iter().any(|m| m.rx_pending())
    }

    fn drops(&self) -> BackendDrops {
        let mut d = BackendDrops::default();
        for m in &self.members {
            let x = m.drops();
            d.rx_truncated += x.rx_truncated;
            d.rx_filtered += x.rx_filtered;
            d.rx_short += x.rx_short;
            d.rx_ring_full += x.rx_ring_full;
            d.vxlan_malformed += x.vxlan_malformed;
            d.vxlan_wrong_vni += x.vxlan_wrong_vni;
            d.vxlan_no_remote += x.vxlan_no_remote;
            d.vxlan_unmapped_vlan += x.vxlan_unmapped_vlan;
            d.vxlan_unmapped_vni += x.vxlan_unmapped_vni;
        }
        d
    }

    fn tick(&mut self) -> Result<Tick, IoError> {
        for m in &mut self.members {
            let _ = m.tick();
        }
        Ok(Tick::default())
    }

    fn start(&mut self) -> Result<(), IoError> {
        let mut first = Ok(());
        for m in &mut self.members {
            if let Err(e) = m.start() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn close(self: Box<Self>) -> Result<(), IoError> {
        let mut first = Ok(());
        for m in self.members {
            if let Err(e) = m.close() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_io::MemPort;
    use qbridge_packet::PacketBuf;
    use std::collections::HashMap;
    use std::sync::Mutex as StdMutex;

    /// A member: a [`MemPort`] whose frames to receive and whose transmitted frames the test
    /// keeps a handle on.
    struct Probe {
        port: Arc<StdMutex<MemPort>>,
    }

    impl Port for Probe {
        fn rx_burst(
            &mut self,
            batch: &mut Batch,
            pool: &mut BufPool,
            max: usize,
        ) -> Result<usize, IoError> {
            self.port.lock().unwrap().rx_burst(batch, pool, max)
        }
        fn tx_burst(
            &mut self,
            batch: &mut Batch,
            pool: &mut BufPool,
        ) -> Result<TxOutcome, IoError> {
            self.port.lock().unwrap().tx_burst(batch, pool)
        }
        fn caps(&self) -> PortCaps {
            self.port.lock().unwrap().caps()
        }
        fn name(&self) -> &str {
            "probe"
        }
    }

    fn udp(src_port: u16, seq: u8) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
        let ip = [
            0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        f.extend(ip);
        f.extend(src_port.to_be_bytes());
        f.extend(80u16.to_be_bytes());
        f.extend([0, 16, 0, 0]);
        f.extend([seq; 8]);
        f
    }

    fn lacpdu() -> Vec<u8> {
        let mut f = vec![
            0x01, 0x80, 0xc2, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 9, 0x88, 0x09, 1, 1,
        ];
        f.resize(124, 0);
        f
    }

    fn bond(n: usize) -> (BondPort, Vec<Arc<StdMutex<MemPort>>>, mpsc::Receiver<Ctl>) {
        let shared = Arc::new(BondShared::new("bo").unwrap());
        let ports: Vec<_> = (0..n)
            .map(|i| Arc::new(StdMutex::new(MemPort::new(&format!("m{i}")))))
            .collect();
        let queues: Vec<Queue> = ports
            .iter()
            .map(|p| Box::new(Probe { port: p.clone() }) as Queue)
            .collect();
        let (tx, rx) = mpsc::channel();
        (
            BondPort::new("bo", 0, queues, shared, tx).unwrap(),
            ports,
            rx,
        )
    }

    fn batch_of(frames: &[Vec<u8>]) -> Batch {
        let mut b = Batch::with_capacity(frames.len());
        for f in frames {
            b.push(PacketBuf::from_frame(f));
        }
        b
    }

    /// Frames go by the published table; a flow stays on one member, in order; both are used.
    #[test]
    fn transmit_follows_the_table_per_flow() {
        let (mut b, ports, _rx) = bond(2);
        let mut table = [None; BUCKETS];
        for (i, t) in table.iter_mut().enumerate() {
            *t = Some(i % 2);
        }
        b.shared.publish(HashPolicy::Layer34, &table);
        let mut pool = BufPool::new(1024);
        let frames: Vec<Vec<u8>> = (0..4u8)
            .flat_map(|seq| (0..64u16).map(move |p| udp(1000 + p, seq)))
            .collect();
        let mut batch = batch_of(&frames);
        let r = b.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((r.sent, r.dropped()), (256, 0));
        let mut member_of: HashMap<u16, usize> = HashMap::new();
        let mut per = [0usize; 2];
        for (m, p) in ports.iter().enumerate() {
            let mut last_seq: HashMap<u16, u8> = HashMap::new();
            for f in p.lock().unwrap().take_sent() {
                let sport = u16::from_be_bytes([f.data[34], f.data[35]]);
                assert_eq!(
                    *member_of.entry(sport).or_insert(m),
                    m,
                    "flow {sport} split"
                );
                let seq = f.data[42];
                if let Some(prev) = last_seq.insert(sport, seq) {
                    assert!(seq > prev, "flow {sport} out of order");
                }
                per[m] += 1;
            }
        }
        assert_eq!(member_of.len(), 64);
        assert!(per[0] >= 64 && per[1] >= 64, "one member idle: {per:?}");
        // No member: dropped and counted.
        b.shared.publish(HashPolicy::Layer34, &[None; BUCKETS]);
        let mut batch = batch_of(&frames[..10]);
        let r = b.tx_burst(&mut batch, &mut pool).unwrap();
        assert_eq!((r.sent, r.error), (0, 10));
        assert_eq!(b.shared.tx_no_member.load(Ordering::Relaxed), 10);
    }

    /// LACPDUs go up with their member; a member that does not collect is dropped and
    /// counted; a member's failure stays in the bond.
    #[test]
    fn receive_hands_pdus_up_and_drops_what_does_not_collect() {
        let (mut b, ports, rx) = bond(2);
        b.shared.set_collecting(0, true);
        ports[0].lock().unwrap().inject(&udp(1, 0));
        ports[1].lock().unwrap().inject(&udp(2, 0));
        ports[1].lock().unwrap().inject(&lacpdu());
        let mut pool = BufPool::new(64);
        let mut batch = Batch::with_capacity(8);
        let n = b.rx_burst(&mut batch, &mut pool, 8).unwrap();
        assert_eq!(n, 1);
        assert_eq!(batch.pkts[0].frame(), &udp(1, 0)[..]);
        assert_eq!(
            b.shared.members[1]
                .rx_not_collecting
                .load(Ordering::Relaxed),
            1
        );
        match rx.try_recv() {
            Ok(Ctl::BondPdu { member, frame, .. }) => {
                assert_eq!((member, frame.len()), (1, 124));
            }
            other => panic!("no PDU handed up: {other:?}"),
        }
        b.shared.pdu_taken();
        ports[0].lock().unwrap().set_link_down(true);
        assert_eq!(b.rx_burst(&mut batch, &mut pool, 8).unwrap(), 0);
        assert_eq!(b.shared.members[0].errors.load(Ordering::Relaxed), 1);
    }

    /// Beyond the in-flight bound, PDUs are dropped and counted, not queued.
    #[test]
    fn pdus_in_flight_are_bounded() {
        let (mut b, ports, rx) = bond(1);
        for _ in 0..PDU_IN_FLIGHT_MAX + 5 {
            ports[0].lock().unwrap().inject(&lacpdu());
        }
        let mut pool = BufPool::new(256);
        let mut batch = Batch::with_capacity(128);
        b.rx_burst(&mut batch, &mut pool, 128).unwrap();
        assert!(batch.is_empty());
        assert_eq!(rx.try_iter().count(), PDU_IN_FLIGHT_MAX);
        assert_eq!(b.shared.pdu_overflow.load(Ordering::Relaxed), 5);
    }

    /// The control thread's frames leave by the member it names, sent by queue 0.
    #[test]
    fn outbox_frames_leave_by_their_member() {
        let (mut b, ports, _rx) = bond(2);
        b.shared.send(1, lacpdu());
        let mut pool = BufPool::new(16);
        let mut batch = Batch::with_capacity(8);
        b.rx_burst(&mut batch, &mut pool, 8).unwrap();
        assert!(ports[0].lock().unwrap().take_sent().is_empty());
        let sent = ports[1].lock().unwrap().take_sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].data, lacpdu());
        assert_eq!(b.shared.members[1].tx_pdus.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn counters_follow_their_members_when_the_list_changes() {
        let shared = BondShared::new("bo").unwrap();
        shared.members[0].rx_frames.store(10, Ordering::Relaxed);
        shared.members[1].rx_frames.store(20, Ordering::Relaxed);
        shared.members[2].tx_bytes.store(30, Ordering::Relaxed);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // m1 leaves; m2 and m3 move up; m4 is new.
        shared.reorder_members(&names(&["m1", "m2", "m3"]), &names(&["m2", "m3", "m4"]));
        assert_eq!(shared.members[0].rx_frames.load(Ordering::Relaxed), 20);
        assert_eq!(shared.members[1].tx_bytes.load(Ordering::Relaxed), 30);
        assert_eq!(shared.members[1].rx_frames.load(Ordering::Relaxed), 0);
        assert_eq!(shared.members[2].rx_frames.load(Ordering::Relaxed), 0);
        assert_eq!(shared.members[2].tx_bytes.load(Ordering::Relaxed), 0);
    }
}
