//! A VXLAN port's remote VTEPs and VLAN ↔ VNI map, shared by the control thread (which edits
//! and shows it) and the worker that owns the port (which takes its lock once per burst).
//!
//! Keys are (VNI, MAC), as a Linux vxlan device's FDB in external mode: a static entry
//! (`fdb add MAC dev NAME dst IP [vni N]`) or one learned from a received frame's outer source
//! (aged after [`VxlanTable::ageing`], the bridge's `ageing_time`), and per VNI a flood list
//! (`fdb append 00:00:00:00:00:00 dev NAME dst IP [vni N]`, head-end replication). A port with
//! one VNI (`id N`) keys everything by it.
//!
//! The map ([`TunnelMap`]) is what a port made with `external` or `vnifilter` uses in place of
//! one VNI: a frame the bridge sends tagged with VLAN V (the bridge's TPID) leaves in V's VNI,
//! the tag removed; a datagram of VNI N enters tagged with N's VLAN. Lookups cost one array
//! read (VID → VNI) or one hash probe (VNI → VID, VNI filter by binary search); nothing is
//! allocated per frame. docs/decisions.md 58 says why the map lives here and not in the bridge.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use qbridge_wire::vxlan::Vni;
use qbridge_wire::MacAddr;

/// Learned entries age after this long without a frame from their MAC, until the engine
/// sets the bridge's `ageing_time` (Linux vxlan's default `ageing 300`).
pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);

/// Most learned entries a table keeps; a new MAC beyond it is not learned (flooded instead).
pub const MAX_LEARNED: usize = 65_536;

/// What kind of table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VxlanEntryKind {
    /// `fdb add MAC dev NAME dst IP`.
    Static,
    /// Learned from a received frame.
    Learned,
    /// A flood-list VTEP (`fdb append 00:00:00:00:00:00 dev NAME dst IP`).
    Flood,
}

/// One entry as shown (`fdb show`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VxlanEntry {
    pub vni: Vni,
    /// All zeros for a flood-list VTEP.
    pub mac: MacAddr,
    pub dst: IpAddr,
    pub kind: VxlanEntryKind,
    /// Seconds since last seen (learned entries).
    pub age_secs: u64,
}

/// An external port's VLAN ↔ VNI map (`vlan add vid V dev NAME tunnel_info id N`), the TPID
/// of the bridge's tags, and the VNIs a `vnifilter` port accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelMap {
    /// Per VID (0-4095) its VNI; 0: unmapped (Linux refuses tunnel id 0).
    vid_vni: Vec<u32>,
    vni_vid: HashMap<u32, u16>,
    /// The TPID of the bridge's tags; `None`: the port is in no VLAN-filtering bridge, and
    /// nothing is mapped.
    tpid: Option<u16>,
    /// `vnifilter`: the VNIs accepted, sorted disjoint ranges; `None`: every mapped VNI.
    filter: Option<Vec<(u32, u32)>>,
}

impl Default for TunnelMap {
    fn default() -> Self {
        TunnelMap {
            vid_vni: vec![0; 4096],
            vni_vid: HashMap::new(),
            tpid: None,
            filter: None,
        }
    }
}

impl TunnelMap {
    /// A map of `pairs` (VID, VNI; each side unique), read with the bridge's `tpid` (`None`:
    /// not in a VLAN-filtering bridge), VNIs limited to `filter` when given.
    pub fn new(pairs: &[(u16, u32)], tpid: Option<u16>, filter: Option<Vec<(u32, u32)>>) -> Self {
        let mut m = TunnelMap {
            tpid,
            filter,
            ..TunnelMap::default()
        };
        for &(vid, vni) in pairs {
            if let Some(slot) = m.vid_vni.get_mut(usize::from(vid)) {
                *slot = vni;
                m.vni_vid.insert(vni, vid);
            }
        }
        m
    }

    fn accepts(&self, vni: u32) -> bool {
        match &self.filter {
            None => true,
            Some(r) => match r.binary_search_by(|&(a, _)| a.cmp(&vni)) {
                Ok(_) => true,
                Err(0) => false,
                Err(i) => r[i - 1].1 >= vni,
            },
        }
    }

    /// The VNI a frame the bridge sends leaves in: its outermost tag must be the bridge's
    /// TPID and its VID mapped (and accepted). `None`: unmapped.
    #[inline]
    pub fn vni_of_frame(&self, frame: &[u8]) -> Option<Vni> {
        let tpid = self.tpid?;
        let t = frame.get(12..16)?;
        if u16::from_be_bytes([t[0], t[1]]) != tpid {
            return None;
        }
        let vid = u16::from_be_bytes([t[2], t[3]]) & 0x0fff;
        let vni = self.vid_vni[usize::from(vid)];
        if vni == 0 || !self.accepts(vni) {
            return None;
        }
        Vni::new(vni)
    }

    /// The tag (4 wire bytes) a datagram of `vni` enters with; `None`: unmapped (or filtered).
    #[inline]
    pub fn tag_of_vni(&self, vni: Vni) -> Option<[u8; 4]> {
        let tpid = self.tpid?;
        if !self.accepts(vni.get()) {
            return None;
        }
        let vid = *self.vni_vid.get(&vni.get())?;
        let [a, b] = tpid.to_be_bytes();
        let [c, d] = vid.to_be_bytes();
        Some([a, b, c, d])
    }

    /// Whether the port accepts datagrams of `vni` at all (`vnifilter`).
    pub fn filters_out(&self, vni: Vni) -> bool {
        !self.accepts(vni.get())
    }
}

/// vxl_: told of every change of a learned entry (decision 83), under the table's lock and
/// before the port forwards with it: `Some((remote, last seen, ageing))` when (VNI, MAC) is
/// learned behind `remote` (new, moved, learned again after it aged, its last-seen time moved
/// by [`VxlanTable::refresh`], the ageing time changed), `None` when it goes (aged out and
/// removed, deleted, flushed, replaced by a static entry). The eBPF fast path's copy of the
/// learned remotes is written by it.
pub type LearnHook = Box<dyn FnMut(Vni, MacAddr, Option<(IpAddr, Instant, Duration)>) + Send>;

/// The hook, if any (not `Debug` itself).
#[derive(Default)]
struct VxlHook(Option<LearnHook>);

impl std::fmt::Debug for VxlHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(hook)"
        } else {
            "None"
        })
    }
}

impl VxlHook {
    #[inline]
    fn tell(&mut self, vni: Vni, mac: MacAddr, e: Option<(IpAddr, Instant, Duration)>) {
        if let Some(h) = self.0.as_mut() {
            h(vni, mac, e);
        }
    }
}

/// A VXLAN port's remote VTEPs: (VNI, MAC) → VTEP entries, per-VNI flood lists, the VLAN ↔
/// VNI map.
#[derive(Debug)]
pub struct VxlanTable {
    statics: HashMap<(Vni, MacAddr), IpAddr>,
    learned: HashMap<(Vni, MacAddr), (IpAddr, Instant)>,
    /// vxl_: the learned entries' changes go there too (decision 83).
    vxl_hook: VxlHook,
    flood: HashMap<Vni, Vec<IpAddr>>,
    /// Learned entries unrefreshed for longer are ignored and removed (the bridge's
    /// `ageing_time`, set by the engine; 0: every learned entry is expired at once).
    pub ageing: Duration,
    /// External ports: the VLAN ↔ VNI map.
    pub tunnels: TunnelMap,
    /// The control plane's count of `fdb flush dev NAME` this table has acted on.
    pub flushes_seen: u64,
}

impl Default for VxlanTable {
    fn default() -> Self {
        VxlanTable {
            statics: HashMap::new(),
            learned: HashMap::new(),
            vxl_hook: VxlHook::default(),
            flood: HashMap::new(),
            ageing: DEFAULT_AGEING,
            tunnels: TunnelMap::default(),
            flushes_seen: 0,
        }
    }
}

const NO_VTEPS: &[IpAddr] = &[];

/// vxl_: a table that goes (its port deleted or opened again) takes its learned entries out of
/// the hook's map with it.
impl Drop for VxlanTable {
    fn drop(&mut self) {
        for ((v, m), _) in self.learned.drain() {
            self.vxl_hook.tell(v, m, None);
        }
    }
}

impl VxlanTable {
    pub fn shared() -> super::SharedVxlanTable {
        std::sync::Arc::new(std::sync::Mutex::new(VxlanTable::default()))
    }

    /// `fdb add|replace MAC dev NAME dst IP [vni N]`: a static entry (it replaces a learned
    /// one). The all-zeros MAC is the flood list's: see [`VxlanTable::append_flood`].
    pub fn add_static(&mut self, vni: Vni, mac: MacAddr, dst: IpAddr) {
        if self.learned.remove(&(vni, mac)).is_some() {
            self.vxl_hook.tell(vni, mac, None);
        }
        self.statics.insert((vni, mac), dst);
    }

    /// Makes the static entries and the flood lists exactly `remotes` (VNI, MAC, VTEP;
    /// all-zeros MAC: a flood-list VTEP), in order; learned entries of keys now static are
    /// dropped.
    pub fn set_statics(&mut self, remotes: &[(Vni, MacAddr, IpAddr)]) {
        self.flood.clear();
        self.statics.clear();
        for &(vni, m, d) in remotes {
            if m.is_zero() {
                self.flood.entry(vni).or_default().push(d);
            } else {
                if self.learned.remove(&(vni, m)).is_some() {
                    self.vxl_hook.tell(vni, m, None);
                }
                self.statics.insert((vni, m), d);
            }
        }
    }

    /// `fdb append 00:00:00:00:00:00 dev NAME dst IP [vni N]`; false if `dst` is listed
    /// already.
    pub fn append_flood(&mut self, vni: Vni, dst: IpAddr) -> bool {
        let l = self.flood.entry(vni).or_default();
        if l.contains(&dst) {
            return false;
        }
        l.push(dst);
        true
    }

    /// VNI `vni`'s flood list.
    #[inline]
    pub fn flood(&self, vni: Vni) -> &[IpAddr] {
        self.flood.get(&vni).map_or(NO_VTEPS, Vec::as_slice)
    }

    /// `fdb del MAC dev NAME [dst IP]`: removes the entry of `mac` in `vni` (a flood-list
    /// VTEP when `mac` is all zeros: `dst`, or the whole list without it). False if nothing
    /// matched.
    pub fn remove(&mut self, vni: Vni, mac: MacAddr, dst: Option<IpAddr>) -> bool {
        if mac.is_zero() {
            let Some(l) = self.flood.get_mut(&vni) else {
                return false;
            };
            let before = l.len();
            l.retain(|d| dst.is_some_and(|x| x != *d));
            return l.len() != before;
        }
        let key = (vni, mac);
        let matches = |d: &IpAddr| dst.is_none_or(|x| x == *d);
        let s = self.statics.get(&key).is_some_and(matches) && self.statics.remove(&key).is_some();
        let l = self.learned.get(&key).is_some_and(|(d, _)| matches(d))
            && self.learned.remove(&key).is_some();
        if l {
            self.vxl_hook.tell(vni, mac, None);
        }
        s || l
    }

    /// vxl88 (decision 88): `fdb del MAC dev NAME [dst IP]` of a learned entry: removes the
    /// learned entry of (`vni`, `mac`) if it names `dst` (any VTEP without it); the hook is
    /// told before this returns. Static entries are the spec's ([`Self::set_statics`]). False
    /// if nothing matched (it aged out or moved meanwhile).
    pub fn forget_learned(&mut self, vni: Vni, mac: MacAddr, dst: Option<IpAddr>) -> bool {
        let key = (vni, mac);
        match self.learned.get(&key) {
            Some((d, _)) if dst.is_none_or(|x| x == *d) => {}
            _ => return false,
        }
        self.learned.remove(&key);
        self.vxl_hook.tell(vni, mac, None);
        true
    }

    /// Forgets every learned entry (`fdb flush dev NAME`); returns how many there were.
    pub fn flush_learned(&mut self) -> usize {
        let n = self.learned.len();
        for ((v, m), _) in self.learned.drain() {
            self.vxl_hook.tell(v, m, None);
        }
        n
    }

    /// The VTEP a static entry (`fdb … dst`) gives `dst` in `vni`: what [`Self::lookup`]
    /// answers first, and changes only by a command (decision 73; learned remotes reach the
    /// fast path through the learn hook instead, decision 83).
    pub fn static_remote(&self, vni: Vni, dst: MacAddr) -> Option<IpAddr> {
        self.statics.get(&(vni, dst)).copied()
    }

    /// Where a frame of `vni` to `dst` goes: `Some(ip)` one VTEP, `None` the flood list.
    #[inline]
    pub fn lookup(&self, vni: Vni, dst: MacAddr, now: Instant) -> Option<IpAddr> {
        if dst.is_multicast() {
            return None;
        }
        if let Some(ip) = self.statics.get(&(vni, dst)) {
            return Some(*ip);
        }
        match self.learned.get(&(vni, dst)) {
            Some((ip, seen)) if now.saturating_duration_since(*seen) < self.ageing => Some(*ip),
            _ => None,
        }
    }

    /// A frame of `vni` from `src` arrived from VTEP `from`: learn or refresh it (statics
    /// win; at most [`MAX_LEARNED`] entries, aged ones removed first when full).
    pub fn learn(&mut self, vni: Vni, src: MacAddr, from: IpAddr, now: Instant) {
        let key = (vni, src);
        if !src.is_unicast() || src.is_zero() || self.statics.contains_key(&key) {
            return;
        }
        if let Some(e) = self.learned.get_mut(&key) {
            // vxl_: a move, or the entry learned again after it aged, is told; a refresh is
            // not (the fast path's ager asks, `refresh`).
            let told = e.0 != from || now.saturating_duration_since(e.1) >= self.ageing;
            *e = (from, now);
            if told {
                self.vxl_hook.tell(vni, src, Some((from, now, self.ageing)));
            }
            return;
        }
        if self.learned.len() >= MAX_LEARNED {
            self.expire(now);
            if self.learned.len() >= MAX_LEARNED {
                return;
            }
        }
        self.learned.insert(key, (from, now));
        self.vxl_hook.tell(vni, src, Some((from, now, self.ageing)));
    }

    /// Removes learned entries older than the ageing time.
    pub fn expire(&mut self, now: Instant) {
        let ageing = self.ageing;
        let hook = &mut self.vxl_hook;
        self.learned.retain(|(v, m), (_, seen)| {
            let keep = now.saturating_duration_since(*seen) < ageing;
            if !keep {
                hook.tell(*v, *m, None);
            }
            keep
        });
    }

    /// vxl_: sets the hook told of every learned entry's change (decision 83; `None`: none),
    /// and tells it of every learned entry now.
    pub fn set_learn_hook(&mut self, hook: Option<LearnHook>) {
        self.vxl_hook = VxlHook(hook);
        let ageing = self.ageing;
        for (&(v, m), &(d, seen)) in &self.learned {
            self.vxl_hook.tell(v, m, Some((d, seen, ageing)));
        }
    }

    /// Whether a hook is set.
    pub fn has_learn_hook(&self) -> bool {
        self.vxl_hook.0.is_some()
    }

    /// Sets the ageing time of learned entries (the bridge's `ageing_time`); the hook is told
    /// of every learned entry when it changes.
    pub fn set_ageing(&mut self, ageing: Duration) {
        if self.ageing == ageing {
            return;
        }
        self.ageing = ageing;
        for (&(v, m), &(d, seen)) in &self.learned {
            self.vxl_hook.tell(v, m, Some((d, seen, ageing)));
        }
    }

    /// vxl_: the learned entries (VNI, MAC, VTEP, last seen), aged ones included.
    pub fn learned_entries(&self) -> Vec<(Vni, MacAddr, IpAddr, Instant)> {
        self.learned
            .iter()
            .map(|(&(v, m), &(d, seen))| (v, m, d, seen))
            .collect()
    }

    /// vxl_: a frame of `vni` from `mac` behind `from` was seen at `at` by someone else (the
    /// fast path's decapsulation): the learned entry's last-seen time moves there if it is
    /// later and the entry still names `from` (the hook is told); false if nothing changed.
    pub fn refresh(&mut self, vni: Vni, mac: MacAddr, from: IpAddr, at: Instant) -> bool {
        let Some(e) = self.learned.get_mut(&(vni, mac)) else {
            return false;
        };
        if e.0 != from || at <= e.1 {
            return false;
        }
        e.1 = at;
        self.vxl_hook.tell(vni, mac, Some((from, at, self.ageing)));
        true
    }

    /// Every entry: flood lists first (by VNI, each in order), then statics and learned
    /// entries by VNI and MAC.
    pub fn entries(&self, now: Instant) -> Vec<VxlanEntry> {
        let mut vnis: Vec<&Vni> = self.flood.keys().collect();
        vnis.sort_unstable();
        let mut out: Vec<VxlanEntry> = vnis
            .into_iter()
            .flat_map(|v| {
                self.flood[v].iter().map(move |d| VxlanEntry {
                    vni: *v,
                    mac: MacAddr([0; 6]),
                    dst: *d,
                    kind: VxlanEntryKind::Flood,
                    age_secs: 0,
                })
            })
            .collect();
        let mut rest: Vec<VxlanEntry> = self
            .statics
            .iter()
            .map(|((v, m), d)| VxlanEntry {
                vni: *v,
                mac: *m,
                dst: *d,
                kind: VxlanEntryKind::Static,
                age_secs: 0,
            })
            .chain(
                self.learned
                    .iter()
                    .filter(|(_, (_, seen))| now.saturating_duration_since(*seen) < self.ageing)
                    .map(|((v, m), (d, seen))| VxlanEntry {
                        vni: *v,
                        mac: *m,
                        dst: *d,
                        kind: VxlanEntryKind::Learned,
                        age_secs: now.saturating_duration_since(*seen).as_secs(),
                    }),
            )
            .collect();
        rest.sort_by_key(|e| (e.vni, e.mac.to_u64()));
        out.extend(rest);
        out
    }

    /// The VTEP a learned or static entry of (`vni`, `mac`) points to.
    pub fn dst_of(&self, vni: Vni, mac: MacAddr) -> Option<IpAddr> {
        self.statics
            .get(&(vni, mac))
            .or_else(|| self.learned.get(&(vni, mac)).map(|(d, _)| d))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn vni(n: u32) -> Vni {
        Vni::new(n).unwrap()
    }

    #[test]
    fn table_learns_ages_and_lists() {
        let mut t = VxlanTable::default();
        let v = vni(100);
        let t0 = Instant::now();
        let ip2: IpAddr = "10.0.0.2".parse().unwrap();
        let ip3: IpAddr = "10.0.0.3".parse().unwrap();
        t.learn(v, MacAddr(B), ip2, t0);
        t.learn(v, MacAddr([0xff; 6]), ip2, t0);
        assert_eq!(t.lookup(v, MacAddr(B), t0), Some(ip2));
        // Moves with the frames.
        t.learn(v, MacAddr(B), ip3, t0);
        assert_eq!(t.lookup(v, MacAddr(B), t0), Some(ip3));
        // Aged: flooded again, not shown.
        let later = t0 + DEFAULT_AGEING;
        assert_eq!(t.lookup(v, MacAddr(B), later), None);
        assert!(t.entries(later).is_empty());
        t.append_flood(v, ip2);
        t.add_static(v, MacAddr(A), ip3);
        let e = t.entries(t0);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].kind, VxlanEntryKind::Flood);
        assert_eq!(e[1].mac, MacAddr(A));
        assert_eq!(e[1].kind, VxlanEntryKind::Static);
        assert_eq!(e[2].kind, VxlanEntryKind::Learned);
        // Multicast always floods.
        assert_eq!(t.lookup(v, MacAddr([1, 0, 0x5e, 0, 0, 1]), t0), None);
        assert!(t.remove(v, MacAddr([0; 6]), Some(ip2)));
        assert!(!t.remove(v, MacAddr(A), Some(ip2)));
        assert!(t.remove(v, MacAddr(A), None));
        assert_eq!(t.flush_learned(), 1);
    }

    #[test]
    fn keys_are_vni_and_mac_and_ageing_follows_the_setting() {
        let mut t = VxlanTable::default();
        let t0 = Instant::now();
        let ip2: IpAddr = "10.0.0.2".parse().unwrap();
        let ip3: IpAddr = "10.0.0.3".parse().unwrap();
        // One MAC in two VNIs, at two VTEPs: two entries.
        t.learn(vni(1000), MacAddr(B), ip2, t0);
        t.learn(vni(2000), MacAddr(B), ip3, t0);
        assert_eq!(t.lookup(vni(1000), MacAddr(B), t0), Some(ip2));
        assert_eq!(t.lookup(vni(2000), MacAddr(B), t0), Some(ip3));
        assert_eq!(t.lookup(vni(3000), MacAddr(B), t0), None);
        // Flood lists per VNI.
        t.set_statics(&[
            (vni(1000), MacAddr([0; 6]), ip2),
            (vni(2000), MacAddr([0; 6]), ip3),
            (vni(2000), MacAddr([0; 6]), ip2),
        ]);
        assert_eq!(t.flood(vni(1000)), &[ip2]);
        assert_eq!(t.flood(vni(2000)), &[ip3, ip2]);
        assert!(t.flood(vni(3000)).is_empty());
        // The bridge's ageing_time: 10 s.
        t.ageing = Duration::from_secs(10);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(t.lookup(vni(1000), MacAddr(B), later), None);
        t.expire(later);
        assert_eq!(t.flush_learned(), 0);
    }

    #[test]
    fn tunnel_map_reads_the_bridge_tag_and_filters_vnis() {
        let m = TunnelMap::new(&[(10, 1000), (20, 2000)], Some(0x8100), None);
        let mut f = vec![0u8; 60];
        f[12..16].copy_from_slice(&[0x81, 0x00, 0x20, 10]); // PCP 1, VID 10
        assert_eq!(m.vni_of_frame(&f), Some(vni(1000)));
        f[12..16].copy_from_slice(&[0x81, 0x00, 0, 30]);
        assert_eq!(m.vni_of_frame(&f), None, "VLAN 30 is unmapped");
        f[12..16].copy_from_slice(&[0x88, 0xa8, 0, 10]);
        assert_eq!(m.vni_of_frame(&f), None, "not the bridge's TPID: untagged");
        assert_eq!(m.vni_of_frame(&f[..14]), None);
        assert_eq!(m.tag_of_vni(vni(2000)), Some([0x81, 0, 0, 20]));
        assert_eq!(m.tag_of_vni(vni(3000)), None);
        // vnifilter: 2000 not accepted.
        let m = TunnelMap::new(
            &[(10, 1000), (20, 2000)],
            Some(0x88a8),
            Some(vec![(900, 1000), (5000, 6000)]),
        );
        f[12..16].copy_from_slice(&[0x88, 0xa8, 0, 10]);
        assert_eq!(m.vni_of_frame(&f), Some(vni(1000)));
        assert_eq!(m.tag_of_vni(vni(2000)), None);
        assert!(m.filters_out(vni(2000)));
        assert!(!m.filters_out(vni(5500)));
        assert!(m.filters_out(vni(899)));
        // Not in a VLAN-filtering bridge: nothing is mapped.
        let m = TunnelMap::new(&[(10, 1000)], None, None);
        assert_eq!(m.vni_of_frame(&f), None);
        assert_eq!(m.tag_of_vni(vni(1000)), None);
    }

    /// vxl88 (decision 88): `fdb del` of a learned entry takes it out (the hook told), only
    /// when it still names the VTEP given; static entries and flood lists stay the spec's.
    #[test]
    fn forget_learned_takes_only_the_learned_entry_named() {
        use std::sync::{Arc, Mutex};
        let heard: Arc<Mutex<Vec<(MacAddr, bool)>>> = Arc::default();
        let mut t = VxlanTable::default();
        let h = heard.clone();
        t.set_learn_hook(Some(Box::new(move |_, m, e| {
            h.lock().unwrap().push((m, e.is_some()));
        })));
        let v = vni(42);
        let t0 = Instant::now();
        let ip2: IpAddr = "10.0.0.2".parse().unwrap();
        let ip3: IpAddr = "10.0.0.3".parse().unwrap();
        t.learn(v, MacAddr(A), ip2, t0);
        t.learn(v, MacAddr(B), ip2, t0);
        t.set_statics(&[
            (v, MacAddr([0; 6]), ip3),
            (v, MacAddr([2, 0, 0, 0, 0, 0xc]), ip3),
        ]);
        heard.lock().unwrap().clear();
        // It moved meanwhile (another VTEP named), another VNI, a static key: nothing.
        assert!(!t.forget_learned(v, MacAddr(A), Some(ip3)));
        assert!(!t.forget_learned(vni(43), MacAddr(A), None));
        assert!(!t.forget_learned(v, MacAddr([2, 0, 0, 0, 0, 0xc]), None));
        assert!(heard.lock().unwrap().is_empty());
        assert!(t.forget_learned(v, MacAddr(A), Some(ip2)));
        assert!(t.forget_learned(v, MacAddr(B), None));
        assert_eq!(
            *heard.lock().unwrap(),
            [(MacAddr(A), false), (MacAddr(B), false)]
        );
        assert_eq!(t.lookup(v, MacAddr(A), t0), None);
        assert_eq!(t.lookup(v, MacAddr([2, 0, 0, 0, 0, 0xc]), t0), Some(ip3));
        assert_eq!(t.flood(v), &[ip3]);
        assert!(t.learned_entries().is_empty());
    }

    /// vxl_: the hook hears of every learned entry's change before the table answers with it
    /// (decision 83): new, moved, learned again after ageing, refreshed from outside, the
    /// ageing changed; gone by deletion, a static entry, a flush or ageing out.
    #[test]
    fn the_learn_hook_hears_every_change_of_a_learned_entry() {
        use std::sync::{Arc, Mutex};
        type Heard = Vec<(u32, MacAddr, Option<(IpAddr, Instant)>)>;
        let heard: Arc<Mutex<Heard>> = Arc::default();
        let mut t = VxlanTable::default();
        let h = heard.clone();
        t.set_learn_hook(Some(Box::new(move |v, m, e| {
            h.lock()
                .unwrap()
                .push((v.get(), m, e.map(|(d, seen, _)| (d, seen))));
        })));
        let take = || std::mem::take(&mut *heard.lock().unwrap());
        let v = vni(100);
        let t0 = Instant::now();
        let ip2: IpAddr = "10.0.0.2".parse().unwrap();
        let ip3: IpAddr = "10.0.0.3".parse().unwrap();
        t.learn(v, MacAddr(B), ip2, t0);
        assert_eq!(take(), vec![(100, MacAddr(B), Some((ip2, t0)))]);
        // A refresh by a frame is not told; a move is.
        let t1 = t0 + Duration::from_secs(1);
        t.learn(v, MacAddr(B), ip2, t1);
        assert!(take().is_empty());
        t.learn(v, MacAddr(B), ip3, t1);
        assert_eq!(take(), vec![(100, MacAddr(B), Some((ip3, t1)))]);
        // Learned again after it aged: told (its deadline moves).
        let t2 = t1 + DEFAULT_AGEING;
        t.learn(v, MacAddr(B), ip3, t2);
        assert_eq!(take(), vec![(100, MacAddr(B), Some((ip3, t2)))]);
        // Refreshed from outside: only later, only for the same remote.
        let t3 = t2 + Duration::from_secs(2);
        assert!(!t.refresh(v, MacAddr(B), ip2, t3));
        assert!(!t.refresh(v, MacAddr(B), ip3, t1));
        assert!(t.refresh(v, MacAddr(B), ip3, t3));
        assert_eq!(take(), vec![(100, MacAddr(B), Some((ip3, t3)))]);
        assert_eq!(t.learned_entries(), vec![(v, MacAddr(B), ip3, t3)]);
        // The ageing changed: every entry told again.
        t.set_ageing(Duration::from_secs(5));
        assert_eq!(take(), vec![(100, MacAddr(B), Some((ip3, t3)))]);
        // Gone: deleted, replaced by a static entry, flushed, aged out.
        assert!(t.remove(v, MacAddr(B), None));
        assert_eq!(take(), vec![(100, MacAddr(B), None)]);
        t.learn(v, MacAddr(B), ip2, t3);
        t.add_static(v, MacAddr(B), ip3);
        assert_eq!(take()[1], (100, MacAddr(B), None));
        t.learn(v, MacAddr(A), ip2, t3);
        assert_eq!(t.flush_learned(), 1);
        assert_eq!(take()[1], (100, MacAddr(A), None));
        t.learn(v, MacAddr(A), ip2, t3);
        t.expire(t3 + Duration::from_secs(5));
        assert_eq!(take()[1], (100, MacAddr(A), None));
        assert!(t.learned_entries().is_empty());
        // A table that goes takes its learned entries with it.
        t.learn(v, MacAddr(A), ip2, t3);
        take();
        drop(t);
        assert_eq!(take(), vec![(100, MacAddr(A), None)]);
    }
}
