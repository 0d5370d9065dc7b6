//! `qbridge monitor`: changes of links, VLAN memberships and FDB entries, as event lines for
//! the monitor connections.
//!
//! The control thread keeps the last [`Observed`] state of the links, VLANs and mirror
//! sessions some monitor watches and, after every command, every link event and once a second
//! (after FDB ageing), compares it with the state now; each difference is one event. The FDB
//! is compared by change, not by copy: while a monitor watches `fdb`, each bridge's table logs
//! the keys that changed with their entry before ([`qbridge_bridge::FdbWatch`]), and each look
//! compares those entries only, before and now. Workers learn addresses without telling the
//! control thread, so learned entries (and moves) are seen within a second; an entry learned
//! and gone again within one second is not reported. A look costs O(the changes since the
//! last one), whatever the size of the FDB (a monitor on a 300 000-entry FDB took 29 % of a
//! core and 156 MB for a copy of it, compared every second); nothing without monitors. Past
//! 65 536 changed entries between two looks, further ones are counted as lost events.
//!
//! Text lines are those of the show commands (`fdb show`, a `vlan show` row with its port
//! name, the first line of `link show` with the port's link state), `Deleted ` before a
//! removal, as `bridge monitor` prints them; with `-j` one JSON object per line, the show
//! command's object with `"object"` (`link`, `fdb`, `vlan`) and, for a removal, `"deleted":true`.
//!
//! Each monitor has a bounded queue ([`MONITOR_QUEUE_LINES`]); the control thread never waits
//! for a monitor. Events that do not fit are counted and reported as one `N events lost` line
//! (`{"object":"lost","events":N}`) as soon as there is room again: before the next event, or
//! at the next once-a-second comparison if none comes.

use qbridge_bridge::{FdbChange, FdbEntryView, FdbWatch, PortId, Switch};
use qbridge_control::{mirror, render, MonitorObject, OutputOptions, Session};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, TrySendError};

/// Event lines queued per monitor before events are lost.
pub const MONITOR_QUEUE_LINES: usize = 4096;

/// One monitor connection as the control thread sees it.
#[derive(Debug)]
pub(crate) struct Monitor {
    objects: Vec<MonitorObject>,
    out: OutputOptions,
    tx: mpsc::SyncSender<String>,
    lost: u64,
}

impl Monitor {
    pub(crate) fn new(
        objects: Vec<MonitorObject>,
        out: OutputOptions,
        tx: mpsc::SyncSender<String>,
    ) -> Monitor {
        Monitor {
            objects,
            out,
            tx,
            lost: 0,
        }
    }

    /// Queues `ev` if the monitor watches its object; false when the monitor is gone.
    fn send(&mut self, ev: &Event) -> bool {
        if !self.objects.contains(&ev.object) {
            return true;
        }
        match self.flush_lost() {
            Ok(()) => {}
            Err(TrySendError::Full(())) => {
                self.lost += 1;
                return true;
            }
            Err(TrySendError::Disconnected(())) => return false,
        }
        match self.tx.try_send(ev.line(self.out)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.lost += 1;
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

impl Monitor {
    /// Queues the `N events lost` line if events were lost (`Full`: still no room).
    fn flush_lost(&mut self) -> Result<(), TrySendError<()>> {
        if self.lost == 0 {
            return Ok(());
        }
        let line = if self.out.json {
            format!("{}\n", json!({"object": "lost", "events": self.lost}))
        } else {
            format!("{} events lost\n", self.lost)
        };
        match self.tx.try_send(line) {
            Ok(()) => {
                self.lost = 0;
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(TrySendError::Full(())),
            Err(TrySendError::Disconnected(_)) => Err(TrySendError::Disconnected(())),
        }
    }
}

/// One change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    object: MonitorObject,
    deleted: bool,
    text: String,
    json: Value,
}

impl Event {
    fn line(&self, out: OutputOptions) -> String {
        if out.json {
            let mut v = self.json.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("object".into(), json!(object_name(self.object)));
                if self.deleted {
                    o.insert("deleted".into(), json!(true));
                }
            }
            let mut s = if out.pretty {
                serde_json::to_string_pretty(&v)
            } else {
                serde_json::to_string(&v)
            }
            .unwrap_or_default();
            s.push('\n');
            s
        } else if self.deleted {
            format!("Deleted {}\n", self.text)
        } else {
            format!("{}\n", self.text)
        }
    }
}

fn object_name(o: MonitorObject) -> &'static str {
    match o {
        MonitorObject::Link => "link",
        MonitorObject::Fdb => "fdb",
        MonitorObject::Vlan => "vlan",
        MonitorObject::Mirror => "mirror",
        MonitorObject::Stp => "stp",
        MonitorObject::Drops => "drops",
    }
}

/// A port's VLAN as `vlan show` prints it: the entry (flags, private-VLAN role, limit).
type VlanState = qbridge_bridge::VlanEntryView;

/// An FDB entry's identity and the order of its events: bridge, VID, inner VID
/// (`learn_inner_vid`), MAC address.
type FdbOrder<'a> = (&'a str, Option<u16>, Option<u16>, [u8; 6]);

fn fdb_order(e: &FdbEntryView) -> FdbOrder<'_> {
    (&e.master, e.vlan, e.inner_vlan, e.mac.0)
}

/// The watched state at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Observed {
    /// Per link name: its text line and JSON object.
    links: Option<BTreeMap<String, (String, Value)>>,
    /// Per (port, VID): the flags and the private-VLAN role.
    vlans: Option<BTreeMap<(String, u16), VlanState>>,
    /// Per mirror session: its `mirror show` line and JSON object (no counters).
    mirrors: Option<BTreeMap<String, (String, Value)>>,
}

impl Observed {
    /// The state of `objects` in `session` now.
    pub(crate) fn take(session: &Session, objects: &[MonitorObject]) -> Observed {
        let mut o = Observed::default();
        if objects.contains(&MonitorObject::Link) {
            o.links = Some(links(session));
        }
        if objects.contains(&MonitorObject::Vlan) {
            let mut m = BTreeMap::new();
            for v in session.switch().vlans(None).unwrap_or_default() {
                for e in v.vlans {
                    m.insert((v.ifname.clone(), e.vlan), e);
                }
            }
            o.vlans = Some(m);
        }
        if objects.contains(&MonitorObject::Mirror) {
            o.mirrors = Some(mirrors(session));
        }
        o
    }

    /// The events that lead from `self` to `now`, with the FDB's (`fdb`: additions and
    /// changes, then removals): additions and changes (links, VLANs, FDB entries, mirror
    /// sessions) first, then removals (mirror sessions, FDB entries, VLANs, links).
    pub(crate) fn diff(&self, now: &Observed, fdb: (Vec<Event>, Vec<Event>)) -> Vec<Event> {
        let mut adds = Vec::new();
        let mut dels = Vec::new();
        if let (Some(a), Some(b)) = (&self.links, &now.links) {
            let (x, y) = diff_maps(a, b, |_, (text, json)| Event {
                object: MonitorObject::Link,
                deleted: false,
                text: text.clone(),
                json: json.clone(),
            });
            adds.extend(x);
            dels.push(y);
        }
        if let (Some(a), Some(b)) = (&self.vlans, &now.vlans) {
            let (x, y) = diff_maps(a, b, |(port, vid), e| {
                let mut text = format!("{port} {vid}");
                for f in &e.flags {
                    text.push(' ');
                    text.push_str(f);
                }
                let mut json = json!({"ifname": port, "vlan": vid, "flags": e.flags});
                if let Some(r) = &e.pvlan {
                    text.push_str(" pvlan ");
                    text.push_str(r);
                    json["pvlan"] = json!(r);
                }
                if let (Some(n), Some(v)) = (e.fdb_max_learned, e.violation) {
                    text.push_str(&format!(" fdb_max_learned {n} violation {}", v.as_str()));
                    json["fdb_max_learned"] = json!(n);
                    json["violation"] = json!(v.as_str());
                }
                Event {
                    object: MonitorObject::Vlan,
                    deleted: false,
                    text,
                    json,
                }
            });
            adds.extend(x);
            dels.push(y);
        }
        adds.extend(fdb.0);
        dels.push(fdb.1);
        if let (Some(a), Some(b)) = (&self.mirrors, &now.mirrors) {
            let (x, y) = diff_maps(a, b, |_, (text, json)| Event {
                object: MonitorObject::Mirror,
                deleted: false,
                text: text.clone(),
                json: json.clone(),
            });
            adds.extend(x);
            dels.push(y);
        }
        for d in dels.into_iter().rev() {
            adds.extend(d);
        }
        adds
    }
}

/// Events for keys added or changed in `b`, and (separately) for keys gone from `a`.
fn diff_maps<K: Ord, V: PartialEq>(
    a: &BTreeMap<K, V>,
    b: &BTreeMap<K, V>,
    ev: impl Fn(&K, &V) -> Event,
) -> (Vec<Event>, Vec<Event>) {
    let mut adds = Vec::new();
    for (k, v) in b {
        if a.get(k) != Some(v) {
            adds.push(ev(k, v));
        }
    }
    let mut dels = Vec::new();
    for (k, v) in a {
        if !b.contains_key(k) {
            let mut e = ev(k, v);
            e.deleted = true;
            dels.push(e);
        }
    }
    (adds, dels)
}

fn fdb_event(e: &FdbEntryView) -> Event {
    let entries = std::slice::from_ref(e);
    let text = render::fdb(entries, OutputOptions::default());
    let json = render::fdb(
        entries,
        OutputOptions {
            json: true,
            ..OutputOptions::default()
        },
    );
    let json: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
    Event {
        object: MonitorObject::Fdb,
        deleted: false,
        text: text.trim_end().to_owned(),
        json: json.get(0).cloned().unwrap_or(Value::Null),
    }
}

/// Every mirror session's `mirror show` line and `mirror show -j` object, by name.
fn mirrors(session: &Session) -> BTreeMap<String, (String, Value)> {
    let sw = session.switch();
    let text = mirror::show(sw, None, OutputOptions::default()).unwrap_or_default();
    let json = mirror::show(
        sw,
        None,
        OutputOptions {
            json: true,
            ..OutputOptions::default()
        },
    )
    .unwrap_or_default();
    let mut objects: BTreeMap<String, Value> = BTreeMap::new();
    if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(&json) {
        for v in a {
            if let Some(name) = v["name"].as_str() {
                objects.insert(name.to_owned(), v.clone());
            }
        }
    }
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if let Some(obj) = objects.remove(name) {
            m.insert(name.to_owned(), (line.to_owned(), obj));
        }
    }
    m
}

/// Every link's monitor line (the first line of `link show`, and the port's link state) and
/// its JSON object (`link show -j`'s, without the runtime counters).
fn links(session: &Session) -> BTreeMap<String, (String, Value)> {
    let text = render::links(session.switch(), session, None, OutputOptions::default());
    let json = render::links(
        session.switch(),
        session,
        None,
        OutputOptions {
            json: true,
            ..OutputOptions::default()
        },
    );
    let mut objects: BTreeMap<String, Value> = BTreeMap::new();
    if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(&json) {
        for mut v in a {
            // Counters are not link changes (`bridge monitor` reports neither).
            if let Some(o) = v.as_object_mut() {
                o.remove("runtime");
            }
            // A bond's LACP state is a link change (partner, mux, collecting); its PDU
            // counters are not.
            if let Some(ms) = v.pointer_mut("/bond/members").and_then(Value::as_array_mut) {
                for m in ms.iter_mut().filter_map(Value::as_object_mut) {
                    m.remove("counters");
                }
            }
            if let Some(d) = v
                .pointer_mut("/linkinfo/info_data")
                .and_then(Value::as_object_mut)
            {
                d.remove("fdb_n_learned");
            }
            if let Some(name) = v["ifname"].as_str() {
                objects.insert(name.to_owned(), v.clone());
            }
        }
    }
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let Some((name, _)) = line.split_once(": ") else {
            continue;
        };
        let obj = objects.remove(name).unwrap_or(Value::Null);
        let mut line = line.to_owned();
        if let Some(up) = obj["port"]["link_up"].as_bool() {
            line.push_str(if up { " link up" } else { " link down" });
        }
        m.insert(name.to_owned(), (line, obj));
    }
    m
}

/// The monitors of one engine and the state they were last told about.
#[derive(Debug, Default)]
pub(crate) struct Monitors {
    list: Vec<Monitor>,
    last: Observed,
    /// While a monitor watches `fdb`: one watch per bridge.
    fdb: Vec<FdbWatch>,
    /// Port names when the FDB was last looked at (entries of ports deleted since are told
    /// with the name they had).
    names: HashMap<u16, String>,
}

/// The FDB events of `changes` (before, now): additions and changes, then removals, each in
/// (bridge, VID, inner VID, MAC) order.
fn fdb_events(mut changes: Vec<FdbChange>) -> (Vec<Event>, Vec<Event>) {
    changes.retain(|(b, n)| b != n);
    fn key(c: &FdbChange) -> Option<FdbOrder<'_>> {
        c.1.as_ref().or(c.0.as_ref()).map(fdb_order)
    }
    changes.sort_by(|x, y| key(x).cmp(&key(y)));
    let mut adds = Vec::new();
    let mut dels = Vec::new();
    for (before, now) in changes {
        match (before, now) {
            (_, Some(n)) => adds.push(fdb_event(&n)),
            (Some(b), None) => {
                let mut e = fdb_event(&b);
                e.deleted = true;
                dels.push(e);
            }
            (None, None) => {}
        }
    }
    (adds, dels)
}

impl Monitors {
    /// The FDB's changes since the last look (see the module documentation) and the changes
    /// the tables could not log; with `watch` false, stops watching.
    fn fdb_changes(&mut self, sw: &Switch, watch: bool) -> (Vec<FdbChange>, u64) {
        if !watch {
            for w in self.fdb.drain(..) {
                w.stop();
            }
            self.names.clear();
            return (Vec::new(), 0);
        }
        let names = std::mem::take(&mut self.names);
        let name = |p: u16| {
            names
                .get(&p)
                .cloned()
                .or_else(|| sw.port_name(PortId(p)).map(str::to_owned))
                .unwrap_or_default()
        };
        let mut changes = Vec::new();
        let mut lost = 0;
        let mut watched = Vec::new();
        let mut kept = Vec::new();
        for w in std::mem::take(&mut self.fdb) {
            if w.is_current(sw) {
                let (c, l) = w.changes(&name);
                changes.extend(c);
                lost += l;
                watched.push(w.bridge());
                kept.push(w);
                continue;
            }
            let replaced = sw
                .bridge_ids()
                .any(|(b, n)| b == w.bridge() && n == w.bridge_name());
            if replaced {
                // A batch's copy of the table, which carries the log: the old table's log is
                // in it (only what changed in the old table during the batch is not, and that
                // is gone with it).
                continue;
            }
            let (gone, l) = w.gone(&name);
            changes.extend(gone.into_iter().map(|e| (Some(e), None)));
            lost += l;
        }
        self.fdb = kept;
        for (b, _) in sw.bridge_ids() {
            if watched.contains(&b) {
                continue;
            }
            let (w, fresh) = sw.fdb_watch(b, false);
            if fresh {
                changes.extend(w.entries(&name).into_iter().map(|e| (None, Some(e))));
            } else {
                let (c, l) = w.changes(&name);
                changes.extend(c);
                lost += l;
            }
            self.fdb.push(w);
        }
        self.names = port_names(sw);
        (changes, lost)
    }

    /// Starts watching every bridge's FDB from its state now, unless watching already.
    fn fdb_baseline(&mut self, sw: &Switch) {
        if !self.fdb.is_empty() {
            return;
        }
        for (b, _) in sw.bridge_ids() {
            self.fdb.push(sw.fdb_watch(b, true).0);
        }
        self.names = port_names(sw);
    }
}

fn port_names(sw: &Switch) -> HashMap<u16, String> {
    sw.port_ids().map(|(id, n)| (id.0, n.to_owned())).collect()
}

impl Monitors {
    fn objects(&self) -> Vec<MonitorObject> {
        let mut v: Vec<MonitorObject> = self
            .list
            .iter()
            .flat_map(|m| m.objects.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Adds a monitor; it hears of changes from now on.
    pub(crate) fn add(&mut self, session: &Session, m: Monitor) {
        self.notify(session);
        self.list.push(m);
        let objects = self.objects();
        self.last = Observed::take(session, &objects);
        if objects.contains(&MonitorObject::Fdb) {
            self.fdb_baseline(session.switch());
        }
    }

    /// A spanning-tree event of bridge `bridge` (`text`: it in words), to the monitors that
    /// watch `stp`: events, not a state to diff.
    pub(crate) fn stp_event(&mut self, bridge: &str, text: &str, ev: &qbridge_stp::Event) {
        let mut json = serde_json::to_value(ev).unwrap_or_default();
        if let Some(o) = json.as_object_mut() {
            o.insert("bridge".into(), json!(bridge));
        }
        let e = Event {
            object: MonitorObject::Stp,
            deleted: false,
            text: text.to_string(),
            json,
        };
        self.list
            .retain_mut(|m| !m.objects.contains(&MonitorObject::Stp) || m.send(&e));
    }

    /// Tells every monitor what changed since the last call.
    pub(crate) fn notify(&mut self, session: &Session) {
        let objects = self.objects();
        let watch_fdb = objects.contains(&MonitorObject::Fdb);
        let (changes, lost) = self.fdb_changes(session.switch(), watch_fdb);
        if self.list.is_empty() {
            return;
        }
        let now = Observed::take(session, &objects);
        let events = self.last.diff(&now, fdb_events(changes));
        self.last = now;
        if lost > 0 {
            for m in &mut self.list {
                if m.objects.contains(&MonitorObject::Fdb) {
                    m.lost += lost;
                }
            }
        }
        if events.is_empty() {
            // A loss is told as soon as there is room (the control thread calls this once a
            // second), not only before the next event.
            self.list
                .retain_mut(|m| !matches!(m.flush_lost(), Err(TrySendError::Disconnected(()))));
            return;
        }
        let before = self.list.len();
        self.list.retain_mut(|m| events.iter().all(|e| m.send(e)));
        if self.list.len() != before {
            tracing::debug!("{} monitors gone", before - self.list.len());
            let objects = self.objects();
            self.last = Observed::take(session, &objects);
            if !objects.contains(&MonitorObject::Fdb) {
                self.fdb_changes(session.switch(), false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qbridge_control::parse_line;

    fn run(s: &mut Session, line: &str) {
        let cmd = parse_line(line).unwrap().unwrap();
        s.execute(&cmd, OutputOptions::default()).unwrap();
    }

    #[test]
    fn events_in_order_and_lost_lines() {
        let mut s = Session::new();
        run(&mut s, "link add br0 type bridge vlan_filtering 1");
        run(&mut s, "link add p1 type pcap");
        let (tx, rx) = mpsc::sync_channel(2);
        let mut ms = Monitors::default();
        ms.add(
            &s,
            Monitor::new(MonitorObject::ALL.to_vec(), OutputOptions::default(), tx),
        );
        run(&mut s, "link set dev p1 master br0");
        run(&mut s, "fdb add 02:00:00:00:00:01 dev p1 vlan 1 static");
        ms.notify(&s);
        let got: Vec<String> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![
                "p1: pcap master br0 state UP mtu 1500 envhdr len auto (4) tpid default \
                 (0x8100) max_frame 1518 link up\n",
                "p1 1 PVID Egress Untagged\n",
            ]
        );
        // The third event did not fit: one "lost" line once there is room again.
        run(&mut s, "fdb del 02:00:00:00:00:01 dev p1 vlan 1");
        ms.notify(&s);
        let got: Vec<String> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![
                "1 events lost\n",
                "Deleted 02:00:00:00:00:01 dev p1 vlan 1 master br0 static\n"
            ]
        );
    }

    /// Issue 17 item 17a: the `N events lost` line waited for the next event; now the next
    /// call with room (once a second) says it, with no new event.
    #[test]
    fn a_loss_is_told_without_waiting_for_the_next_event() {
        let mut s = Session::new();
        run(&mut s, "link add br0 type bridge vlan_filtering 1");
        run(&mut s, "link add p1 type pcap");
        let (tx, rx) = mpsc::sync_channel(2);
        let mut ms = Monitors::default();
        ms.add(
            &s,
            Monitor::new(MonitorObject::ALL.to_vec(), OutputOptions::default(), tx),
        );
        run(&mut s, "link set dev p1 master br0");
        run(&mut s, "fdb add 02:00:00:00:00:01 dev p1 vlan 1 static");
        ms.notify(&s);
        assert_eq!(rx.try_iter().count(), 2, "two lines fit, the third is lost");
        // Nothing changes any more; the next tick has room.
        ms.notify(&s);
        let got: Vec<String> = rx.try_iter().collect();
        assert_eq!(got, vec!["1 events lost\n"]);
        ms.notify(&s);
        assert_eq!(rx.try_iter().count(), 0, "told once");
    }

    /// The FDB is compared by change: with 100 000 entries a look with nothing changed does
    /// not walk them; each change is told once, whatever made it (a command, a batch, which
    /// replaces the tables with its copies, a deleted port, a deleted bridge).
    #[test]
    fn fdb_changes_are_told_by_change_not_by_copy() {
        const ENTRIES: u32 = 100_000;
        let mut s = Session::new();
        let mut batch = String::from(
            "link add br0 type bridge\nlink add br1 type bridge\nlink add p1 type pcap\n\
             link add p2 type pcap\nlink add p3 type pcap\nlink set dev p1 master br0\n\
             link set dev p2 master br0\nlink set dev p3 master br1\n\
             fdb add 02:00:00:00:00:02 dev p2 static\nfdb add 02:00:00:00:00:03 dev p3 static\n",
        );
        for i in 0..ENTRIES {
            batch.push_str(&format!(
                "fdb add 02:01:00:{:02x}:{:02x}:{:02x} dev p1 static\n",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            ));
        }
        s.execute_batch(&batch, OutputOptions::default()).unwrap();
        let (tx, rx_events) = mpsc::sync_channel(64);
        let rx_lines = |r: &mpsc::Receiver<String>| r.try_iter().collect::<Vec<String>>();
        let mut ms = Monitors::default();
        ms.add(
            &s,
            Monitor::new(vec![MonitorObject::Fdb], OutputOptions::default(), tx),
        );
        // Nothing changed: nothing told, and no walk of the table (it took 0.67 s in a debug
        // build when every look compared a copy of it).
        let t0 = std::time::Instant::now();
        for _ in 0..10 {
            ms.notify(&s);
        }
        let per_look = t0.elapsed() / 10;
        eprintln!("{per_look:?} per look with {ENTRIES} entries and no change");
        assert_eq!(rx_lines(&rx_events).len(), 0);
        assert!(
            per_look < std::time::Duration::from_millis(50),
            "{per_look:?} per look"
        );

        run(&mut s, "fdb add 02:00:00:00:00:0a dev p1 static");
        run(&mut s, "fdb del 02:01:00:00:00:00 dev p1");
        run(&mut s, "fdb replace 02:01:00:00:00:01 dev p2 static");
        // Added and deleted between two looks: not told.
        run(&mut s, "fdb add 02:00:00:00:00:0b dev p1 static");
        run(&mut s, "fdb del 02:00:00:00:00:0b dev p1");
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(
            got,
            vec![
                "02:00:00:00:00:0a dev p1 master br0 static\n",
                "02:01:00:00:00:01 dev p2 master br0 static\n",
                "Deleted 02:01:00:00:00:00 dev p1 master br0 static\n",
            ]
        );
        // A batch works on copies of the tables, which replace them.
        s.execute_batch(
            "fdb add 02:00:00:00:00:0c dev p2 static\n",
            OutputOptions::default(),
        )
        .unwrap();
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(got, vec!["02:00:00:00:00:0c dev p2 master br0 static\n"]);
        // A deleted port's entries go with it, told with its name; so do a deleted bridge's.
        run(&mut s, "link del p2");
        run(&mut s, "link del br1");
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(
            got,
            vec![
                "Deleted 02:00:00:00:00:02 dev p2 master br0 static\n",
                "Deleted 02:00:00:00:00:0c dev p2 master br0 static\n",
                "Deleted 02:01:00:00:00:01 dev p2 master br0 static\n",
                "Deleted 02:00:00:00:00:03 dev p3 master br1 static\n",
            ]
        );
        // Learned by the datapath (a worker), then aged out.
        let mut f = vec![0xff; 6];
        f.extend([0x02, 0, 0, 0, 0, 0x0e, 0x88, 0xb5]);
        f.resize(60, 0);
        let mut rx = qbridge_packet::Batch::default();
        let mut p = qbridge_packet::PacketBuf::from_frame(&f);
        p.port = s.switch().port_id("p1").unwrap().0;
        rx.push(p);
        let mut out = qbridge_bridge::Outputs::new();
        s.switch_mut().process(1, &mut rx, &mut out);
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(got, vec!["02:00:00:00:00:0e dev p1 master br0\n"]);
        s.switch_mut().age(1_000_000_000_000);
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(got, vec!["Deleted 02:00:00:00:00:0e dev p1 master br0\n"]);
        // A new bridge's entries are news.
        run(&mut s, "link add br2 type bridge");
        run(&mut s, "link set dev p3 master br2");
        run(&mut s, "fdb add 02:00:00:00:00:0d dev p3 static");
        ms.notify(&s);
        let got: Vec<String> = rx_lines(&rx_events);
        assert_eq!(got, vec!["02:00:00:00:00:0d dev p3 master br2 static\n"]);
    }

    #[test]
    fn mirror_sessions_added_changed_and_deleted() {
        let mut s = Session::new();
        run(&mut s, "link add p1 type pcap");
        run(&mut s, "link add p2 type pcap");
        let (tx, rx) = mpsc::sync_channel(16);
        let mut ms = Monitors::default();
        let json = OutputOptions {
            json: true,
            ..OutputOptions::default()
        };
        ms.add(&s, Monitor::new(vec![MonitorObject::Mirror], json, tx));
        run(&mut s, "mirror add m1 src p1 dst p2");
        ms.notify(&s);
        run(&mut s, "link del dev p2");
        ms.notify(&s);
        let got: Vec<Value> = rx
            .try_iter()
            .map(|l| serde_json::from_str(&l).unwrap())
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0]["object"], "mirror");
        assert_eq!(got[0]["name"], "m1");
        assert_eq!(got[0]["dst"], "p2");
        assert!(got[0].get("deleted").is_none(), "{}", got[0]);
        // Deleting its destination deletes the session (docs/semantics.md §M7).
        assert_eq!(got[1]["deleted"], true);
        assert_eq!(got[1]["name"], "m1");
    }
}
