//! qbridge's eBPF fast path: the TC program (`bpf/fastpath.c`, compiled by clang at build
//! time) and its loader. The program forwards frames whose decision the userspace pipeline
//! cached as a flow, and sends every other frame up; this crate loads it (aya), attaches it
//! to interfaces, fills its maps, reads its counters, and runs frames through it with
//! `BPF_PROG_TEST_RUN` for the exactness tests. docs/fast-path-design.md.

mod compile;
pub mod maps;
mod owner;
mod testrun;

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{tc, SchedClassifier, TcAttachType};
use std::collections::BTreeMap;

pub use compile::{compile, key_of, Decision, NotCached};
pub use maps::{
    Bond, MemberStats, ACT_BOND, BOND_BUCKETS, HASH_INNER_L34, HASH_L2, HASH_L2_VLAN, HASH_L34,
    MAX_BONDS, PORT_BOND_MEMBER, PORT_COLLECTING, PORT_MEMBER_SHIFT,
};
pub use maps::{
    Config, FdbEntry, FdbKey, FdbSlot, FlowAction, FlowKey, Hop, Miss, Owner, Port, PortStats,
    VlanStats, ACT_INGRESS, ACT_PEER, HIT_INDEX, HOP_LEARNING, HOP_SRC, MAX_BRIDGES, MAX_FDB_SLOTS,
    MAX_HOPS, MAX_PORTS, PORT_EGRESS, PORT_ENABLED, PORT_ID_MASK, PORT_TRACE, SLOT_FREE,
};
pub use maps::{FlowIx, FLOW_IX_SIZE, FLOW_IX_TAGS, MAX_FLOWS};
pub use maps::{MirAction, MirCopy, MirStats, ACT_MIRROR, MAX_MIRRORS, MIR_COPIES, MIR_TX};
pub use maps::{Vxlan, ACT_VXLAN, MAX_TUNNELS, VXLAN_SOCKETS, VX_INHERIT_TOS, VX_IPV6};
pub use owner::{orphans, Orphan, LEASE, RENEW};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
pub use testrun::{TestRun, Verdict};

/// The program's object, as clang made it (empty when the build had no clang).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fastpath.o"));

const PROGRAM: &str = "qb_ingress";
/// The `clsact` filter priority of the program: after every filter of a lower number (an
/// administrator's, 49152 by default), so those act first.
pub const FILTER_PRIORITY: u16 = 0xfff0;

/// The upcall device's program: drops what the daemon's socket has seen.
const SINK: &str = "qb_sink";

/// The VXLAN ports' underlay program (decision 77): decapsulates the frames of cached flows.
const DECAP: &str = "qb_vxlan_in";
/// Its filter priority: before the port program's (an underlay that is a port too): a frame
/// it does not take goes on to the next filter.
pub const DECAP_PRIORITY: u16 = 0xffe0;
pub use maps::{Vxd, VxdKey, VxdSrcKey, VxdVerdict, VXD_LEARNING, VXD_MAX_SRCS, VXD_TRACE};
pub use maps::{Vxd6Key, VXD_ZERO6RX};
pub use maps::{VxlRemote, VXL_IPV6, VXL_MAX, VX_LEARNED};

/// Why the fast path cannot do something.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("this qbridge was built without the eBPF fast path (clang was missing at build time)")]
    NotBuilt,
    #[error("cannot load the fast path's BPF object: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("fast-path program: {0}")]
    Program(#[from] aya::programs::ProgramError),
    #[error("fast-path map {map}: {source}")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The object has no map `map` of the expected type.
fn no_map(map: &'static str) -> Error {
    Error::Map {
        map,
        source: aya::maps::MapError::InvalidName { name: map.into() },
    }
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> Error {
    move |source| Error::Map { map, source }
}

/// The loaded program and its maps; its filters are removed when it is dropped. A daemon that
/// dies leaves its filters (classic `clsact` filters outlive their process): with a
/// [`FastPath::lease`] they claim no frame once the lease ends, [`orphans`] finds them and
/// [`remove_filters`] removes them (as the next [`FastPath::attach`] on the interface does).
pub struct FastPath {
    ebpf: aya::Ebpf,
    links: BTreeMap<String, (&'static str, aya::programs::tc::SchedClassifierLinkId)>,
    lease: Option<owner::Lease>,
    /// The flow and FDB maps, with the FDB slots' allocation every writer shares.
    maps: MapWriter,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("attached", &self.links.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl FastPath {
    /// Whether the program was compiled into this build.
    pub fn built() -> bool {
        !OBJECT.is_empty()
    }

    /// Loads the object and its program into the kernel (needs CAP_BPF/CAP_SYS_ADMIN), the
    /// flow index (decisions 79, 93) on unless `QBRIDGE_FLOW_INDEX=0` (then not allocated).
    pub fn load() -> Result<FastPath, Error> {
        let on = std::env::var_os("QBRIDGE_FLOW_INDEX").is_none_or(|v| v != "0");
        Self::load_with_flow_index(on)
    }

    /// [`FastPath::load`], the flow index on or off whatever the environment says. Off, its
    /// maps take one entry each (decision 84: 152 + 4 bytes instead of 1.3 MB per CPU), and
    /// [`FastPath::set_flow_index`] cannot turn it on.
    pub fn load_with_flow_index(on: bool) -> Result<FastPath, Error> {
        if !Self::built() {
            return Err(Error::NotBuilt);
        }
        Self::load_object(OBJECT, on)
    }

    /// [`FastPath::load_with_flow_index`] of another object built from `bpf/fastpath.c` (the
    /// per-VLAN cost study of `examples/vlans`, decision 84, loads variants built with
    /// `QB_STUDY_*` defines).
    #[doc(hidden)]
    pub fn load_object(object: &[u8], flow_index: bool) -> Result<FastPath, Error> {
        // The flow index: its copies and tags for each CPU it serves (decision 79); one
        // entry each when off (the program then finds no copy and uses the hash).
        let cpus = if flow_index { flow_ix_cpus() } else { 0 };
        // The flow table's size (decision 84): its bucket array is as many 16-byte buckets,
        // and a frame spread over thousands of VLANs reads one at random from all of them.
        let flows = flow_table_size();
        let mut ebpf = aya::EbpfLoader::new()
            .set_max_entries("qb_flows", flows)
            .set_max_entries("qb_flow_ix", (cpus * FLOW_IX_SIZE).max(1))
            .set_max_entries("qb_flow_ix_tags", (cpus * FLOW_IX_TAGS).max(1))
            .load(object)?;
        for name in [PROGRAM, SINK] {
            load_verified(program(&mut ebpf, name)?)?;
        }
        let maps = MapWriter {
            flows: map_fd(&mut ebpf, "qb_flows")?,
            fdb: map_fd(&mut ebpf, "qb_fdb")?,
            slots_fd: map_fd(&mut ebpf, "qb_fdb_slots")?,
            vxlan: map_fd(&mut ebpf, "qb_vxlan")?,
            mir_flows: map_fd(&mut ebpf, "qb_mir_flows")?,
            flow_epoch: map_fd(&mut ebpf, "qb_flow_epoch")?,
            flow_ix: std::sync::Arc::new(std::sync::Mutex::new(FlowIxState::new(flows))),
            tunnels: std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new())),
            slots: std::sync::Arc::new(std::sync::Mutex::new(Slots::default())),
        };
        let mut fp = FastPath {
            ebpf,
            links: BTreeMap::new(),
            lease: None,
            maps,
        };
        // No lease until one is taken: the program claims frames as long as it is attached.
        let owner = Owner {
            deadline_ns: u64::MAX,
            netns_ino: owner::netns_ino()?,
            upcall_ifindex: 0,
            pad: 0,
        };
        maps::raw::update(fp.owner_fd()?.as_raw_fd(), &0u32, &owner)?;
        // The flow index's first epoch (its entries start at 0: empty); 0 while it is off
        // (decision 93: on unless QBRIDGE_FLOW_INDEX=0).
        fp.maps.flow_ix().allocated = flow_index;
        fp.set_flow_index(flow_index)?;
        Ok(fp)
    }

    fn owner_fd(&mut self) -> Result<OwnedFd, Error> {
        let name = "qb_owner";
        let map = self.ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
        let aya::maps::Map::Array(data) = map else {
            return Err(no_map(name));
        };
        Ok(data.fd().as_fd().try_clone_to_owned()?)
    }

    /// The id of the program's `qb_owner` map (what [`orphans`] is told is the caller's own).
    pub fn owner_map_id(&mut self) -> Result<u32, Error> {
        let name = "qb_owner";
        match self.ebpf.map("qb_owner") {
            Some(aya::maps::Map::Array(data)) => Ok(data.info().map_err(map_err(name))?.id()),
            _ => Err(no_map(name)),
        }
    }

    /// Takes a lease on the program for this process: renewed every [`RENEW`] by a thread
    /// of its own, it lets the program claim frames until [`LEASE`] after the last renewal.
    /// When the process dies the renewals stop and its filters, wherever they were left, claim
    /// nothing after at most [`LEASE`]; dropping the `FastPath` ends the lease at once.
    /// `upcall_ifindex` is recorded for whoever removes what an orphan left.
    pub fn lease(&mut self, upcall_ifindex: u32) -> Result<(), Error> {
        if self.lease.is_some() {
            return Ok(());
        }
        let owner = Owner {
            deadline_ns: 0,
            netns_ino: owner::netns_ino()?,
            upcall_ifindex,
            pad: 0,
        };
        self.lease = Some(owner::Lease::start(self.owner_fd()?, owner)?);
        Ok(())
    }

    /// Ends the lease (or the lease-less life [`FastPath::load`] gives) now: from here on
    /// the program claims no frame, wherever it is attached — what it does once a daemon that
    /// held the lease died. The daemon ends it first when it stops.
    pub fn end_lease(&mut self) -> Result<(), Error> {
        let Some(lease) = self.lease.take() else {
            let fd = self.owner_fd()?;
            let mut o: Owner = maps::raw::lookup(fd.as_raw_fd(), &0u32)?.unwrap_or_default();
            o.deadline_ns = 0;
            return Ok(maps::raw::update(fd.as_raw_fd(), &0u32, &o)?);
        };
        drop(lease);
        Ok(())
    }

    /// Attaches the program to `ifname`'s ingress (in the calling thread's namespace) as a
    /// classic `clsact` filter of priority [`FILTER_PRIORITY`]: the last of the usual ones, so
    /// a filter an administrator added (`tc filter add dev X ingress …`, priority 49152 when
    /// unsaid) runs first, as it does before the kernel bridge. A filter of this program left
    /// by a daemon that died is removed first.
    pub fn attach(&mut self, ifname: &str) -> Result<(), Error> {
        self.attach_program(ifname, PROGRAM, TcAttachType::Ingress)
    }

    /// Attaches the program to `ifname`'s egress, as [`FastPath::attach`] does to an
    /// ingress: a TAP port's interface, where what the host sends leaves the kernel (its port
    /// entry has [`PORT_EGRESS`]).
    pub fn attach_egress(&mut self, ifname: &str) -> Result<(), Error> {
        self.attach_program(ifname, PROGRAM, TcAttachType::Egress)
    }

    /// Attaches the sink (drop everything) to the upcall device `ifname`'s ingress.
    pub fn attach_sink(&mut self, ifname: &str) -> Result<(), Error> {
        self.attach_program(ifname, SINK, TcAttachType::Ingress)
    }

    fn attach_program(
        &mut self,
        ifname: &str,
        name: &'static str,
        way: TcAttachType,
    ) -> Result<(), Error> {
        if self.links.contains_key(ifname) {
            return Ok(());
        }
        if let Err(e) = tc::qdisc_add_clsact(ifname) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e.into());
            }
        }
        // A filter of ours an earlier daemon left (it died without detaching).
        let _ = tc::qdisc_detach_program(ifname, way, name);
        let prog = program(&mut self.ebpf, name)?;
        let id = prog.attach_with_options(
            ifname,
            way,
            tc::TcAttachOptions::Netlink(tc::NlOptions {
                priority: FILTER_PRIORITY,
                handle: 0,
            }),
        )?;
        self.links.insert(ifname.to_owned(), (name, id));
        Ok(())
    }

    /// Detaches the program from `ifname`; not attached is not an error.
    pub fn detach(&mut self, ifname: &str) -> Result<(), Error> {
        if let Some((name, id)) = self.links.remove(ifname) {
            program(&mut self.ebpf, name)?.detach(id)?;
        }
        Ok(())
    }

    fn hash<K: aya::Pod, V: aya::Pod>(
        &mut self,
        name: &'static str,
    ) -> Result<HashMap<&mut MapData, K, V>, Error> {
        let map = self.ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
        HashMap::try_from(map).map_err(map_err(name))
    }

    /// Makes `ifindex` a fast-path port (or changes it).
    pub fn set_port(&mut self, ifindex: u32, port: Port) -> Result<(), Error> {
        self.hash::<u32, Port>("qb_ports")?
            .insert(ifindex, port, 0)
            .map_err(map_err("qb_ports"))
    }

    /// Writes bond `id`'s transmit table (decision 74): flows whose egress port is the bond
    /// ([`ACT_BOND`]) go to the member of their hash bucket from the next frame on.
    pub fn set_bond(&mut self, id: u32, bond: &Bond) -> Result<(), Error> {
        self.hash::<u32, Bond>("qb_bonds")?
            .insert(id, *bond, 0)
            .map_err(map_err("qb_bonds"))
    }

    /// Forgets bond `id` (its flows miss, as [`Miss::Bond`]).
    pub fn remove_bond(&mut self, id: u32) -> Result<(), Error> {
        ignore_missing(self.hash::<u32, Bond>("qb_bonds")?.remove(&id), "qb_bonds")
    }

    /// The frames the program received and sent on the member at position `pos` of the bond
    /// of slot `slot` ([`Bond::slot`]), and dropped while it did not collect.
    pub fn member_stats(&mut self, slot: u32, pos: u32) -> Result<MemberStats, Error> {
        let k = (slot % MAX_BONDS) << 4 | (pos & 0xf);
        self.per_cpu_sum("qb_member_stats", k, |s: &mut MemberStats, v| {
            s.rx_frames += v.rx_frames;
            s.rx_bytes += v.rx_bytes;
            s.tx_frames += v.tx_frames;
            s.tx_bytes += v.tx_bytes;
            s.rx_not_collecting += v.rx_not_collecting;
        })
    }

    /// Forgets `ifindex`: its frames pass to the stack untouched.
    pub fn remove_port(&mut self, ifindex: u32) -> Result<(), Error> {
        ignore_missing(
            self.hash::<u32, Port>("qb_ports")?.remove(&ifindex),
            "qb_ports",
        )
    }

    pub fn insert_flow(&mut self, key: FlowKey, action: FlowAction) -> Result<(), Error> {
        Ok(self.maps.insert_flow(&key, &action)?)
    }

    /// Writes the mirror copies of the flow of `key` ([`MapWriter::set_mirror`]).
    pub fn set_mirror(&mut self, key: FlowKey, m: MirAction) -> Result<(), Error> {
        Ok(self.maps.set_mirror(&key, &m)?)
    }

    pub fn remove_flow(&mut self, key: &FlowKey) -> Result<(), Error> {
        Ok(self.maps.remove_flow(key)?)
    }

    /// Turns the flow index on or off (decision 79; off, the program uses the hash alone).
    /// Either way every copy made before is stale. On needs a program loaded with the index
    /// ([`FastPath::load_with_flow_index`]; decision 84).
    pub fn set_flow_index(&mut self, on: bool) -> Result<(), Error> {
        let mut ix = self.maps.flow_ix();
        if on && !ix.allocated {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the flow index was not allocated at load (QBRIDGE_FLOW_INDEX=0 was set, or \
                 FastPath::load_with_flow_index(true))",
            )));
        }
        ix.enabled = on;
        ix.epoch += 1;
        let epoch = if on { ix.epoch } else { 0 };
        maps::raw::update(self.maps.flow_epoch.as_raw_fd(), &0u32, &epoch)?;
        Ok(())
    }

    /// The flow index's copies under the current epoch, with their index (CPU *
    /// [`FLOW_IX_SIZE`] + n; decision 79): what the program would use.
    pub fn flow_index(&mut self) -> Result<Vec<(u32, FlowIx)>, Error> {
        let epoch = self.maps.flow_epoch();
        let map = self
            .ebpf
            .map_mut("qb_flow_ix")
            .ok_or_else(|| no_map("qb_flow_ix"))?;
        let a: Array<&mut MapData, FlowIx> = Array::try_from(map).map_err(map_err("qb_flow_ix"))?;
        let mut out = Vec::new();
        for i in 0..a.len() {
            let e = a.get(&i, 0).map_err(map_err("qb_flow_ix"))?;
            if e.epoch == epoch {
                out.push((i, e));
            }
        }
        Ok(out)
    }

    /// The flows in the table (for `show fast-path` and tests), as they were inserted (the
    /// slots the program keeps in them read as 0).
    pub fn flows(&mut self) -> Result<Vec<(FlowKey, FlowAction)>, Error> {
        let m = self.hash::<FlowKey, FlowAction>("qb_flows")?;
        m.iter()
            .map(|r| r.map(|(k, a)| (k, without_slots(a))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("qb_flows"))
    }

    pub fn set_fdb(&mut self, key: FdbKey, entry: FdbEntry) -> Result<(), Error> {
        Ok(self.maps.set_fdb(&key, &entry)?)
    }

    pub fn remove_fdb(&mut self, key: &FdbKey) -> Result<(), Error> {
        Ok(self.maps.remove_fdb(key)?)
    }

    pub fn fdb(&mut self, key: &FdbKey) -> Result<Option<FdbEntry>, Error> {
        Ok(self.maps.fdb(key)?)
    }

    /// Every entry of the FDB map (the engine's sync walks it), its version without the slot;
    /// the last-seen times are the hash entries' (the ager asks [`FastPath::fdb`], which
    /// takes the later of those and the slots').
    pub fn fdb_entries(&mut self) -> Result<Vec<(FdbKey, FdbEntry)>, Error> {
        let m = self.hash::<FdbKey, FdbEntry>("qb_fdb")?;
        m.iter()
            .map(|r| {
                r.map(|(k, mut e)| {
                    e.version &= 0xffff;
                    (k, e)
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("qb_fdb"))
    }

    /// A handle on the flow and FDB maps that other threads may use (the datapath workers
    /// install flows with it); every handle shares the FDB slots' allocation.
    pub fn writer(&mut self) -> Result<MapWriter, Error> {
        Ok(MapWriter {
            flows: self.maps.flows.try_clone()?,
            fdb: self.maps.fdb.try_clone()?,
            slots_fd: self.maps.slots_fd.try_clone()?,
            slots: self.maps.slots.clone(),
            vxlan: self.maps.vxlan.try_clone()?,
            mir_flows: self.maps.mir_flows.try_clone()?,
            flow_epoch: self.maps.flow_epoch.try_clone()?,
            flow_ix: self.maps.flow_ix.clone(),
            tunnels: self.maps.tunnels.clone(),
        })
    }

    fn config_map(&mut self) -> Result<Array<&mut MapData, Config>, Error> {
        let map = self
            .ebpf
            .map_mut("qb_config")
            .ok_or_else(|| no_map("qb_config"))?;
        Array::try_from(map).map_err(map_err("qb_config"))
    }

    pub fn config(&mut self) -> Result<Config, Error> {
        self.config_map()?.get(&0, 0).map_err(map_err("qb_config"))
    }

    pub fn set_config(&mut self, c: Config) -> Result<(), Error> {
        self.config_map()?
            .set(0, c, 0)
            .map_err(map_err("qb_config"))
    }

    /// Makes every flow installed so far stale (a miss on its next frame): the configuration
    /// changed. Returns the new generation, which flows installed from now on carry.
    pub fn bump_generation(&mut self) -> Result<u32, Error> {
        let mut c = self.config()?;
        c.generation = c.generation.wrapping_add(1);
        self.set_config(c)?;
        Ok(c.generation)
    }

    fn per_cpu_sum<V: aya::Pod + Default>(
        &mut self,
        name: &'static str,
        index: u32,
        add: impl Fn(&mut V, &V),
    ) -> Result<V, Error> {
        let map = self.ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
        let a: PerCpuArray<&mut MapData, V> = PerCpuArray::try_from(map).map_err(map_err(name))?;
        let values = a.get(&index, 0).map_err(map_err(name))?;
        let mut sum = V::default();
        for v in values.iter() {
            add(&mut sum, v);
        }
        Ok(sum)
    }

    /// Frames forwarded by the program (`hits`) and sent up, by reason.
    pub fn verdicts(&mut self) -> Result<(u64, Vec<(Miss, u64)>), Error> {
        let add = |s: &mut u64, v: &u64| *s += *v;
        let hits = self.per_cpu_sum("qb_verdicts", HIT_INDEX, add)?;
        let mut misses = Vec::new();
        for m in Miss::ALL {
            misses.push((m, self.per_cpu_sum("qb_verdicts", m as u32, add)?));
        }
        Ok((hits, misses))
    }

    /// vxo_ (decision 91): the order window in ns (0: the program's own, 20 ms; `u64::MAX`:
    /// none, the keeper off): how long after a flow's frame went up for a reason of its own
    /// the flow's frames follow it up.
    pub fn set_order_window(&mut self, ns: u64) -> Result<(), Error> {
        let name = "qb_order_window";
        let map = self.ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
        let mut a: Array<&mut MapData, u64> = Array::try_from(map).map_err(map_err(name))?;
        a.set(0, ns, 0).map_err(map_err(name))
    }

    /// vxo_ (decision 91): forgets every flow's order deadline, as if each window had passed.
    pub fn clear_order(&mut self) -> Result<(), Error> {
        let name = "qb_order";
        let map = self.ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
        let mut a: Array<&mut MapData, u64> = Array::try_from(map).map_err(map_err(name))?;
        for i in 0..a.len() {
            a.set(i, 0, 0).map_err(map_err(name))?;
        }
        Ok(())
    }

    pub fn port_stats(&mut self, port: u32) -> Result<PortStats, Error> {
        self.per_cpu_sum("qb_port_stats", port, |s: &mut PortStats, v| {
            s.rx_frames += v.rx_frames;
            s.rx_bytes += v.rx_bytes;
            s.tx_frames += v.tx_frames;
            s.tx_bytes += v.tx_bytes;
            for (a, b) in s.rx_pcp.iter_mut().zip(v.rx_pcp) {
                *a += b;
            }
        })
    }

    /// Mirror session `index`'s copies sent by the program (decision 80).
    pub fn mir_stats(&mut self, index: u32) -> Result<MirStats, Error> {
        self.per_cpu_sum("qb_mir_stats", index, |s: &mut MirStats, v| {
            s.frames += v.frames;
            s.bytes += v.bytes;
            s.failed += v.failed;
        })
    }

    pub fn vlan_stats(&mut self, slot: u32) -> Result<VlanStats, Error> {
        self.per_cpu_sum("qb_vlan_stats", slot, |s: &mut VlanStats, v| {
            s.rx_frames += v.rx_frames;
            s.rx_bytes += v.rx_bytes;
            s.tx_frames += v.tx_frames;
            s.tx_bytes += v.tx_bytes;
        })
    }

    /// Runs `frame` through the program as if it arrived on `ifindex` (which must exist in
    /// the calling thread's namespace), without sending it anywhere (`BPF_PROG_TEST_RUN`).
    /// `gso`: (segment size, segments) to present it as a super-frame.
    pub fn test_run(
        &mut self,
        frame: &[u8],
        ifindex: u32,
        gso: Option<(u16, u16)>,
    ) -> Result<TestRun, Error> {
        let prog = program(&mut self.ebpf, PROGRAM)?;
        let fd = prog.fd()?.as_fd().as_raw_fd();
        testrun::run(fd, frame, ifindex, gso, 1).map_err(Error::Io)
    }

    /// [`FastPath::test_run`] `repeat` times in the kernel (the map state persists between
    /// runs, as for a stream of equal frames); [`TestRun::ns_per_run`] is the mean time.
    pub fn test_run_repeat(
        &mut self,
        frame: &[u8],
        ifindex: u32,
        repeat: u32,
    ) -> Result<TestRun, Error> {
        let prog = program(&mut self.ebpf, PROGRAM)?;
        let fd = prog.fd()?.as_fd().as_raw_fd();
        testrun::run(fd, frame, ifindex, None, repeat).map_err(Error::Io)
    }
}

/// A map's descriptor, of our own.
fn map_fd(ebpf: &mut aya::Ebpf, name: &'static str) -> Result<OwnedFd, Error> {
    let map = ebpf.map_mut(name).ok_or_else(|| no_map(name))?;
    let data: &MapData = match map {
        aya::maps::Map::HashMap(d) | aya::maps::Map::LruHashMap(d) | aya::maps::Map::Array(d) => d,
        _ => return Err(no_map(name)),
    };
    Ok(data.fd().as_fd().try_clone_to_owned()?)
}

/// The flows `qb_flows` holds: `QBRIDGE_FAST_PATH_FLOWS` (a power of two from 1024 to
/// [`MAX_FLOWS`], others rounded up and bounded), else [`MAX_FLOWS`]. Decision 84: spread over
/// 4093 VLANs a frame's flow lookup cost 56-80 ns less a frame with 8192 (128 KB of buckets
/// instead of 1 MB: fewer pages to walk), the price being fewer flows before the LRU evicts.
pub fn flow_table_size() -> u32 {
    std::env::var("QBRIDGE_FAST_PATH_FLOWS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(MAX_FLOWS, |n| n.clamp(1024, MAX_FLOWS).next_power_of_two())
}

/// CPUs the flow index serves (decision 79): those numbered below 16 (its copies are per
/// CPU, 1.3 MB each: 8192 copies of 152 bytes and 16 384 tags; a CPU past them uses the hash
/// alone).
fn flow_ix_cpus() -> u32 {
    possible_cpus().clamp(1, 16)
}

/// The kernel's possible CPUs (`nr_cpu_ids`): the highest in /sys/devices/system/cpu/possible,
/// plus one.
fn possible_cpus() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split([',', '-'])
                .filter_map(|n| n.parse::<u32>().ok())
                .max()
        })
        .map_or(1, |n| n + 1)
}

/// The flow index's epoch as the loader keeps it, and a bound on the flows in `qb_flows`
/// (decision 79).
#[derive(Debug)]
struct FlowIxState {
    /// `qb_flow_epoch`'s value (1 at load: 0 marks an empty entry).
    epoch: u64,
    /// At least the flows in the hash: inserts of new keys less removals (an eviction the
    /// kernel made leaves it higher than the truth, never lower).
    live_bound: u32,
    /// With this many flows or more the LRU hash may evict on an insert: a common LRU
    /// evicts only when a CPU refills its local free list (up to 128 nodes) from a global
    /// list holding fewer than that, and every CPU's local lists hold at most 128.
    evict_at: u32,
    /// [`FastPath::set_flow_index`] (off: the epoch stays 0, no copy is made or used).
    enabled: bool,
    /// The index's maps were sized for its CPUs at load (else one entry each: decision 84).
    allocated: bool,
}

impl FlowIxState {
    fn new(flows: u32) -> FlowIxState {
        FlowIxState {
            epoch: 1,
            live_bound: 0,
            evict_at: flows.saturating_sub((possible_cpus() + 2) * 128),
            enabled: false,
            allocated: false,
        }
    }

    fn may_evict(&self) -> bool {
        self.live_bound + 1 >= self.evict_at
    }
}

/// `action` without what the program keeps in it (the hops' slots).
fn without_slots(mut action: FlowAction) -> FlowAction {
    for h in &mut action.hops {
        h.dst_version &= 0xffff;
        h.pad = 0;
    }
    action
}

/// Which slot of `qb_fdb_slots` each FDB map entry has (decision 71). Slot 0 is none: an
/// entry written when every slot is taken has none, and the program looks it up in the hash
/// (as it did before the slots).
#[derive(Debug, Default)]
struct Slots {
    by_key: std::collections::HashMap<FdbKey, u16>,
    free: Vec<u16>,
    /// The next never-used slot.
    next: u32,
}

impl Slots {
    fn get_or_take(&mut self, key: &FdbKey) -> (u16, bool) {
        if let Some(&s) = self.by_key.get(key) {
            return (s, false);
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None if self.next.max(1) < MAX_FDB_SLOTS => {
                self.next = self.next.max(1) + 1;
                (self.next - 1) as u16
            }
            None => return (0, false),
        };
        self.by_key.insert(*key, s);
        (s, true)
    }

    fn give_back(&mut self, key: &FdbKey) -> Option<u16> {
        let s = self.by_key.remove(key)?;
        self.free.push(s);
        Some(s)
    }
}

/// The flow and FDB maps, for any thread (plain `bpf(2)` calls on descriptors of its own).
/// Every FDB entry written also gets a dense copy in `qb_fdb_slots` (while slots last), which
/// the program reads instead of the hash on a flow's later frames (decision 71); the handles
/// of one program share the slots' allocation.
#[derive(Debug)]
pub struct MapWriter {
    flows: OwnedFd,
    fdb: OwnedFd,
    slots_fd: OwnedFd,
    slots: std::sync::Arc<std::sync::Mutex<Slots>>,
    vxlan: OwnedFd,
    /// `qb_mir_flows`: the flows' mirror copies (decision 80).
    mir_flows: OwnedFd,
    /// `qb_flow_epoch`, and what decides its bumps (the flow index, decision 79).
    flow_epoch: OwnedFd,
    flow_ix: std::sync::Arc<std::sync::Mutex<FlowIxState>>,
    /// The tunnels written to `qb_vxlan`, by content: an entry never changes once written
    /// (a flow's encapsulation is a pure function of its action; another remote, VNI or
    /// source port is another entry), so nothing a flow reads moves under it.
    tunnels: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Vxlan, u32>>>,
}

impl MapWriter {
    /// The index of tunnel `t` in `qb_vxlan` (decision 73), written there if it is new;
    /// `None` when the map is full (the flow is not made).
    pub fn tunnel(&self, t: &Vxlan) -> std::io::Result<Option<u32>> {
        let mut m = self.tunnels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&i) = m.get(t) {
            return Ok(Some(i));
        }
        let i = m.len() as u32;
        if i >= MAX_TUNNELS {
            return Ok(None);
        }
        maps::raw::update(self.vxlan.as_raw_fd(), &i, t)?;
        m.insert(*t, i);
        Ok(Some(i))
    }

    /// Installs (or replaces) a flow. The hops' slot fields are the program's: written 0.
    /// A flow replaced, or an insert that may have made the LRU hash evict one, bumps the
    /// flow index's epoch (decision 79): no copy of the flow before is used after this.
    pub fn insert_flow(&self, key: &FlowKey, action: &FlowAction) -> std::io::Result<()> {
        let mut ix = self.flow_ix();
        let fd = self.flows.as_raw_fd();
        let action = without_slots(*action);
        let mut bump = ix.may_evict();
        let r = match maps::raw::update_ix_flags(fd, key, &action, maps::raw::NOEXIST) {
            Ok(()) => {
                ix.live_bound += 1;
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                bump = true;
                maps::raw::update(fd, key, &action)
            }
            Err(e) => Err(e),
        };
        if bump {
            self.bump_flow_epoch(&mut ix)?;
        }
        r
    }

    /// Removes a flow; the flow index's epoch is bumped after (decision 79).
    pub fn remove_flow(&self, key: &FlowKey) -> std::io::Result<()> {
        let mut ix = self.flow_ix();
        let r = maps::raw::delete(self.flows.as_raw_fd(), key);
        if r.is_ok() {
            ix.live_bound = ix.live_bound.saturating_sub(1);
        }
        self.bump_flow_epoch(&mut ix)?;
        r
    }

    fn flow_ix(&self) -> std::sync::MutexGuard<'_, FlowIxState> {
        self.flow_ix.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every copy in the flow index stale: the program copies flows again from the
    /// hash, under the new epoch.
    fn bump_flow_epoch(&self, ix: &mut FlowIxState) -> std::io::Result<()> {
        ix.epoch += 1;
        if !ix.enabled {
            return Ok(());
        }
        maps::raw::update(self.flow_epoch.as_raw_fd(), &0u32, &ix.epoch)
    }

    /// The flow index's epoch now (tests: a copy of another epoch is not used).
    pub fn flow_epoch(&self) -> u64 {
        self.flow_ix().epoch
    }

    /// Writes the mirror copies of the flow of `key` (before the flow, which names them
    /// with [`ACT_MIRROR`]; decision 80).
    pub fn set_mirror(&self, key: &FlowKey, m: &MirAction) -> std::io::Result<()> {
        maps::raw::update(self.mir_flows.as_raw_fd(), key, m)
    }

    /// The mirror copies written for the flow of `key`.
    pub fn mirror(&self, key: &FlowKey) -> std::io::Result<Option<MirAction>> {
        maps::raw::lookup(self.mir_flows.as_raw_fd(), key)
    }

    /// The flow of `key`, if the program has one (`trace live` tells a miss's reason).
    pub fn flow(&self, key: &FlowKey) -> std::io::Result<Option<FlowAction>> {
        maps::raw::lookup(self.flows.as_raw_fd(), key)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes an FDB map entry (its version's low 16 bits kept) and its slot's copy. The
    /// slot is written first: the hash entry that names it finds it filled.
    pub fn set_fdb(&self, key: &FdbKey, entry: &FdbEntry) -> std::io::Result<()> {
        let mut slots = self.slots();
        let (slot, new) = slots.get_or_take(key);
        let version = (entry.version & 0xffff) as u16;
        let r = (|| {
            if slot != 0 {
                let copy = FdbSlot {
                    mac: key.mac,
                    bridge: key.bridge,
                    fid: key.fid,
                    version,
                    port: entry.port,
                    last_seen_ns: entry.last_seen_ns,
                };
                maps::raw::update(self.slots_fd.as_raw_fd(), &u32::from(slot), &copy)?;
            }
            let e = FdbEntry {
                version: u32::from(slot) << 16 | u32::from(version),
                ..*entry
            };
            maps::raw::update(self.fdb.as_raw_fd(), key, &e)
        })();
        if r.is_err() && new {
            self.free_slot(&mut slots, key);
        }
        r
    }

    /// Marks `key`'s slot free (a flow that remembers it no longer finds its entry there) and
    /// gives it back.
    fn free_slot(&self, slots: &mut Slots, key: &FdbKey) {
        if let Some(s) = slots.give_back(key) {
            let gone = FdbSlot {
                mac: key.mac,
                bridge: key.bridge,
                fid: key.fid,
                port: SLOT_FREE,
                ..FdbSlot::default()
            };
            if let Err(e) = maps::raw::update(self.slots_fd.as_raw_fd(), &u32::from(s), &gone) {
                tracing::debug!("fast path: FDB slot {s}: {e}");
            }
        }
    }

    /// An FDB map entry (its version without the slot), with the later of the last-seen
    /// times the program wrote into the hash entry and into its slot.
    pub fn fdb(&self, key: &FdbKey) -> std::io::Result<Option<FdbEntry>> {
        let Some(mut e) = maps::raw::lookup::<_, FdbEntry>(self.fdb.as_raw_fd(), key)? else {
            return Ok(None);
        };
        let slot = e.version >> 16;
        e.version &= 0xffff;
        if slot != 0 {
            if let Some(s) = maps::raw::lookup::<_, FdbSlot>(self.slots_fd.as_raw_fd(), &slot)? {
                if (s.mac, s.bridge, s.fid) == (key.mac, key.bridge, key.fid) {
                    e.last_seen_ns = e.last_seen_ns.max(s.last_seen_ns);
                }
            }
        }
        Ok(Some(e))
    }

    pub fn remove_fdb(&self, key: &FdbKey) -> std::io::Result<()> {
        let mut slots = self.slots();
        self.free_slot(&mut slots, key);
        maps::raw::delete(self.fdb.as_raw_fd(), key)
    }
}

/// Removes every filter of qbridge's program (ingress and egress, the upcall device's sink
/// included) from `ifname` in the calling thread's namespace, whoever attached it; returns
/// how many went. For an interface a daemon takes as its own, where a daemon that died left
/// its program.
pub fn remove_filters(ifname: &str) -> usize {
    let mut removed = 0;
    for (way, name) in [
        (TcAttachType::Ingress, PROGRAM),
        (TcAttachType::Egress, PROGRAM),
        (TcAttachType::Ingress, SINK),
        (TcAttachType::Ingress, DECAP),
    ] {
        if tc::qdisc_detach_program(ifname, way, name).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn program<'a>(ebpf: &'a mut aya::Ebpf, name: &str) -> Result<&'a mut SchedClassifier, Error> {
    let p = ebpf
        .program_mut(name)
        .ok_or(aya::programs::ProgramError::UnexpectedProgramType)?;
    Ok(p.try_into()?)
}

/// Loads a program, again when the verifier gave up with EAGAIN: it does so when a signal
/// reaches the loading thread during a long verification (`qb_ingress` takes the verifier
/// about 775 000 instructions), which says nothing about the program. Seen once in the test
/// suite under load; a daemon would have started without its fast path.
fn load_verified(prog: &mut SchedClassifier) -> Result<(), Error> {
    let mut tries = 0;
    loop {
        match prog.load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && tries < 4 =>
            {
                tries += 1;
                tracing::debug!("the verifier was interrupted (EAGAIN); loading again");
            }
            r => return Ok(r?),
        }
    }
}

fn ignore_missing(r: Result<(), aya::maps::MapError>, map: &'static str) -> Result<(), Error> {
    match r {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        // aya reports a delete of a missing key as the system call's ENOENT.
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
        {
            Ok(())
        }
        Err(e) => Err(Error::Map { map, source: e }),
    }
}

/// VXLAN decapsulation (decision 77): `qb_vxlan_in` on a VXLAN port's underlay, its maps and
/// counters.
impl FastPath {
    /// The decapsulating program, loaded on first use.
    fn decap_program(&mut self) -> Result<&mut SchedClassifier, Error> {
        let prog = program(&mut self.ebpf, DECAP)?;
        if prog.fd().is_err() {
            load_verified(prog)?;
        }
        Ok(prog)
    }

    /// Attaches the decapsulating program to `ifname`'s ingress (a VXLAN port's underlay),
    /// at [`DECAP_PRIORITY`]; a filter of it an earlier daemon left is removed first.
    pub fn attach_decap(&mut self, ifname: &str) -> Result<(), Error> {
        let link = format!("{ifname}\u{0}decap");
        if self.links.contains_key(&link) {
            return Ok(());
        }
        if let Err(e) = tc::qdisc_add_clsact(ifname) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e.into());
            }
        }
        let _ = tc::qdisc_detach_program(ifname, TcAttachType::Ingress, DECAP);
        let id = self.decap_program()?.attach_with_options(
            ifname,
            TcAttachType::Ingress,
            tc::TcAttachOptions::Netlink(tc::NlOptions {
                priority: DECAP_PRIORITY,
                handle: 0,
            }),
        )?;
        self.links.insert(link, (DECAP, id));
        Ok(())
    }

    /// Detaches the decapsulating program from `ifname`; not attached is not an error.
    pub fn detach_decap(&mut self, ifname: &str) -> Result<(), Error> {
        self.detach(&format!("{ifname}\u{0}decap"))
    }

    /// Makes `key`'s frames the program's to take for VXLAN port `v.port` (a miss or anything
    /// unusual still goes to the port's socket).
    pub fn set_vxd_tunnel(&mut self, key: VxdKey, v: Vxd) -> Result<(), Error> {
        self.hash::<VxdKey, Vxd>("qb_vxd_tunnels")?
            .insert(key, v, 0)
            .map_err(map_err("qb_vxd_tunnels"))
    }

    pub fn remove_vxd_tunnel(&mut self, key: &VxdKey) -> Result<(), Error> {
        ignore_missing(
            self.hash::<VxdKey, Vxd>("qb_vxd_tunnels")?.remove(key),
            "qb_vxd_tunnels",
        )
    }

    /// The tunnels the program takes frames of.
    pub fn vxd_tunnels(&mut self) -> Result<Vec<(VxdKey, Vxd)>, Error> {
        let m = self.hash::<VxdKey, Vxd>("qb_vxd_tunnels")?;
        m.iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("qb_vxd_tunnels"))
    }

    /// [`FastPath::set_vxd_tunnel`] for an IPv6 underlay (`qb_vxd6_tunnels`, decision 82).
    pub fn set_vxd6_tunnel(&mut self, key: Vxd6Key, v: Vxd) -> Result<(), Error> {
        self.hash::<Vxd6Key, Vxd>("qb_vxd6_tunnels")?
            .insert(key, v, 0)
            .map_err(map_err("qb_vxd6_tunnels"))
    }

    pub fn remove_vxd6_tunnel(&mut self, key: &Vxd6Key) -> Result<(), Error> {
        ignore_missing(
            self.hash::<Vxd6Key, Vxd>("qb_vxd6_tunnels")?.remove(key),
            "qb_vxd6_tunnels",
        )
    }

    /// A static entry's source of a learning port: its frames may be taken.
    pub fn set_vxd_src(&mut self, key: VxdSrcKey) -> Result<(), Error> {
        self.hash::<VxdSrcKey, u32>("qb_vxd_srcs")?
            .insert(key, 0, 0)
            .map_err(map_err("qb_vxd_srcs"))
    }

    pub fn remove_vxd_src(&mut self, key: &VxdSrcKey) -> Result<(), Error> {
        ignore_missing(
            self.hash::<VxdSrcKey, u32>("qb_vxd_srcs")?.remove(key),
            "qb_vxd_srcs",
        )
    }

    /// What the decapsulating program did with the frames it saw, by verdict.
    pub fn vxd_stats(&mut self) -> Result<Vec<(VxdVerdict, u64)>, Error> {
        let add = |s: &mut u64, v: &u64| *s += *v;
        let mut out = Vec::new();
        for v in VxdVerdict::ALL {
            out.push((v, self.per_cpu_sum("qb_vxd_stats", v as u32, add)?));
        }
        Ok(out)
    }

    /// Runs `frame` through the decapsulating program as [`FastPath::test_run`] does through
    /// the port program; a frame it passes on reads as [`Verdict::Other`], its reason in
    /// [`decap_pass_reason`].
    pub fn test_run_decap(
        &mut self,
        frame: &[u8],
        ifindex: u32,
        repeat: u32,
    ) -> Result<TestRun, Error> {
        let fd = self.decap_program()?.fd()?.as_fd().as_raw_fd();
        testrun::run(fd, frame, ifindex, None, repeat).map_err(Error::Io)
    }
}

impl FastPath {
    /// vxl_: a handle on `qb_vxl_learned` for any thread (decision 83): the VXLAN ports'
    /// tables write their learned remotes through it under their own locks.
    pub fn vxl_map(&mut self) -> Result<VxlMap, Error> {
        Ok(VxlMap(std::sync::Arc::new(map_fd(
            &mut self.ebpf,
            "qb_vxl_learned",
        )?)))
    }
}

/// vxl_: `qb_vxl_learned` (decision 83), keyed by (VXLAN port, VNI word, MAC): plain `bpf(2)`
/// calls on a descriptor of its own, cheap to clone.
#[derive(Debug, Clone)]
pub struct VxlMap(std::sync::Arc<OwnedFd>);

impl VxlMap {
    pub fn set(&self, key: &VxdSrcKey, r: &VxlRemote) -> std::io::Result<()> {
        maps::raw::update(self.0.as_raw_fd(), key, r)
    }

    pub fn get(&self, key: &VxdSrcKey) -> std::io::Result<Option<VxlRemote>> {
        maps::raw::lookup(self.0.as_raw_fd(), key)
    }

    /// Removes `key`'s entry; none is not an error.
    pub fn remove(&self, key: &VxdSrcKey) -> std::io::Result<()> {
        maps::raw::delete(self.0.as_raw_fd(), key)
    }
}

/// Why the decapsulating program passed a test run's frame on (`None`: it did not).
pub fn decap_pass_reason(r: &TestRun) -> Option<VxdVerdict> {
    match &r.verdict {
        Verdict::Other { cb, .. } => cb[4].checked_sub(1).and_then(VxdVerdict::from_index),
        _ => None,
    }
}
