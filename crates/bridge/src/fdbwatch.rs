//! Watching FDBs by change, for `monitor`: [`Switch::fdb_watch`] turns on a bridge table's
//! change log (`ChangeLog`, in `fdb/writer.rs`: each key changed since the last look, with its
//! entry before the first change; kept by the writer under the lock it already holds, bounded), and
//! [`FdbWatch::changes`] takes it: each changed key's entry before and now, as views. A
//! monitor thus costs O(the changes) per look, not a walk and a copy of every entry, and
//! nothing while no one watches. Refreshes (an entry's last-seen time) are not changes.
//!
//! A watch follows one table. A batch of commands works on a copy of the switch, tables
//! included, and the copy replaces the original; the copy carries the original's log, so
//! [`Switch::fdb_watch`] on the new table (`reset` false) continues where the old one left. A
//! deleted bridge's table lives on in its watch until [`FdbWatch::gone`] has told its entries.

use crate::fdb::{Fdb, FdbEntryView, Slot};
use crate::plan::BridgeId;
use crate::Switch;
use std::collections::HashSet;
use std::sync::Arc;

/// A watch on one bridge's FDB table (see the module documentation).
#[derive(Debug)]
pub struct FdbWatch {
    bridge: BridgeId,
    name: String,
    fdb: Arc<Fdb>,
}

/// One entry's change: before and now (`None`: absent), idle time 0.
pub type FdbChange = (Option<FdbEntryView>, Option<FdbEntryView>);

impl Switch {
    /// Watches bridge `b`'s FDB table from now on: `reset` starts an empty log; without it a
    /// log the table has (a batch's copy of a watched table) is kept. Returns the watch and
    /// whether the table had no log yet (a new table: its entries are news to the watcher).
    pub fn fdb_watch(&self, b: BridgeId, reset: bool) -> (FdbWatch, bool) {
        let fdb = self.bridge_fdb(b).clone();
        let fresh = !fdb.watched();
        fdb.watch(reset);
        let w = FdbWatch {
            bridge: b,
            name: self.bridge_name(b).to_owned(),
            fdb,
        };
        (w, fresh)
    }
}

impl FdbWatch {
    pub fn bridge(&self) -> BridgeId {
        self.bridge
    }

    pub fn bridge_name(&self) -> &str {
        &self.name
    }

    /// Whether bridge `self.bridge()` of `sw` is still this bridge with this table.
    pub fn is_current(&self, sw: &Switch) -> bool {
        sw.bridge_ids()
            .any(|(b, n)| b == self.bridge && n == self.name)
            && Arc::ptr_eq(sw.bridge_fdb(self.bridge), &self.fdb)
    }

    /// Stops the table's log (the last watcher is gone).
    pub fn stop(&self) {
        self.fdb.unwatch();
    }

    /// The entries changed since the last call, before and now. `name` gives a port's name
    /// (the watcher's, for ports deleted since it last looked).
    pub fn changes(&self, name: &dyn Fn(u16) -> String) -> (Vec<FdbChange>, u64) {
        let (changes, lost) = self.fdb.take_changes();
        let out = changes
            .into_iter()
            .map(|(b, n)| {
                (
                    b.map(|s| self.view(&s, name)),
                    n.map(|s| self.view(&s, name)),
                )
            })
            .collect();
        (out, lost)
    }

    /// The bridge is gone: every entry it had when the watcher last looked, as it was then
    /// (logged changes undone, entries never changed as they are).
    pub fn gone(&self, name: &dyn Fn(u16) -> String) -> (Vec<FdbEntryView>, u64) {
        let (changes, lost) = self.fdb.take_changes();
        let mut logged = HashSet::new();
        let mut out = Vec::new();
        for (before, now) in changes {
            if let Some(s) = before.or(now) {
                logged.insert(s.key);
            }
            if let Some(s) = before {
                out.push(self.view(&s, name));
            }
        }
        for s in self.fdb.entries() {
            if !logged.contains(&s.key) {
                out.push(self.view(&s, name));
            }
        }
        self.fdb.unwatch();
        (out, lost)
    }

    /// Every entry now (a new table's, for a watcher that had not seen it).
    pub fn entries(&self, name: &dyn Fn(u16) -> String) -> Vec<FdbEntryView> {
        self.fdb
            .entries()
            .iter()
            .map(|s| self.view(s, name))
            .collect()
    }

    fn view(&self, s: &Slot, name: &dyn Fn(u16) -> String) -> FdbEntryView {
        self.fdb.view(s, name(s.port), self.name.clone(), 0)
    }
}
