//! `qbridge monitor drops`: each frame the switch drops, as it happens, from the workers.
//!
//! While no one watches, a worker pays one relaxed load per batch ([`DropWatch::active`]).
//! While someone does, it keeps the first [`HEAD_BYTES`] of each frame of a batch before
//! forwarding it, and afterwards asks its forwarder which frames were dropped and why
//! ([`qbridge_bridge::Forwarder::dropped`]: the reason the pipeline counted, written where it
//! decided, only for the frames it dropped). Each dropped frame becomes one line for
//! every watcher: the ingress port, the VLAN it was classified into, the reason, the frame.
//! Frames are never held up: lines go to each watcher's bounded queue with `try_send`, at most
//! [`LINES_PER_SECOND`] a second per watcher; the rest are counted and told as one `N more
//! drops` line when the second is over. The counters (`link show -s`, Prometheus
//! `qbridge_port_drops_total{reason}`) count every drop whatever the watch shows.
//!
//! The eBPF fast path drops nothing itself: a frame it cannot forward from its flow cache goes
//! up to the pipeline (a miss), which decides and counts the drop; so the watch sees both
//! paths' drops here. Frames of a plan with stacked devices (VLAN devices, macvlans, host
//! ports) are forwarded in passes of their own and are counted, not told one by one.

use qbridge_bridge::{DropReason, Forwarder, Plan, PortId};
use qbridge_control::OutputOptions;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Mutex;

/// Bytes of each frame kept while watching: enough for its addresses, four tags and an IPv6
/// header with the ports behind it.
pub(crate) const HEAD_BYTES: usize = 128;
/// Lines per watcher per second; the rest are counted.
pub(crate) const LINES_PER_SECOND: u32 = 100;
const NS_PER_SEC: u64 = 1_000_000_000;

#[derive(Debug)]
struct Watcher {
    tx: SyncSender<String>,
    out: OutputOptions,
    window_ns: u64,
    sent: u32,
    more: u64,
}

impl Watcher {
    /// Opens a new second when the last is over, first telling what it left out. False
    /// when the watcher is gone.
    fn roll(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.window_ns) < NS_PER_SEC {
            return true;
        }
        if self.more != 0 {
            let line = if self.out.json {
                format!("{}\n", json!({"object": "drops", "more": self.more}))
            } else {
                format!(
                    "{} more drops (at most {LINES_PER_SECOND} lines a second)\n",
                    self.more
                )
            };
            match self.tx.try_send(line) {
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(_)) => return true,
                Ok(()) => self.more = 0,
            }
        }
        self.window_ns = now_ns;
        self.sent = 0;
        true
    }
}

/// The watchers, shared by the control thread (which adds them) and the workers (which tell
/// them).
#[derive(Debug, Default)]
pub(crate) struct DropWatch {
    active: AtomicBool,
    watchers: Mutex<Vec<Watcher>>,
}

/// One dropped frame.
pub(crate) struct Dropped<'a> {
    pub port: &'a str,
    /// The port's TPID: its tags are shown as tags even when not a well-known TPID.
    pub tpid: u16,
    /// 0: not classified (dropped before, or by a VLAN-unaware bridge).
    pub vlan: u16,
    pub reason: DropReason,
    pub head: &'a [u8],
    pub len: usize,
}

impl DropWatch {
    /// Whether anyone watches (one relaxed load: a worker asks once per batch).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.active.load(Relaxed)
    }

    pub(crate) fn add(&self, tx: SyncSender<String>, out: OutputOptions) {
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.push(Watcher {
            tx,
            out,
            window_ns: 0,
            sent: 0,
            more: 0,
        });
        self.active.store(true, Relaxed);
    }

    /// Tells every watcher of `drops` (rate-limited, never waiting).
    pub(crate) fn report(&self, now_ns: u64, drops: &[Dropped<'_>]) {
        if drops.is_empty() {
            return;
        }
        let mut ws = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        ws.retain_mut(|w| {
            for d in drops {
                if !w.roll(now_ns) {
                    return false;
                }
                if w.sent >= LINES_PER_SECOND {
                    w.more += 1;
                    continue;
                }
                match w.tx.try_send(line(d, w.out)) {
                    Ok(()) => w.sent += 1,
                    Err(TrySendError::Full(_)) => w.more += 1,
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            true
        });
        self.active.store(!ws.is_empty(), Relaxed);
    }

    /// Once a second from the control thread: tells what the last second left out and lets go
    /// of watchers that are gone.
    pub(crate) fn tick(&self, now_ns: u64) {
        let mut ws = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if ws.is_empty() {
            return;
        }
        ws.retain_mut(|w| {
            // An empty line writes nothing: a probe for a watcher that is gone.
            w.roll(now_ns)
                && !matches!(
                    w.tx.try_send(String::new()),
                    Err(TrySendError::Disconnected(_))
                )
        });
        self.active.store(!ws.is_empty(), Relaxed);
    }
}

/// One line: `p1 vlan 10 drop vlan_not_member: 02:…:01 > 02:…:02, 8100 vid 30 / IPv4 …, 60
/// bytes` (JSON: `{"object":"drops","port":…,"vlan":…,"reason":…,"frame":…,"len":…}`).
fn line(d: &Dropped<'_>, out: OutputOptions) -> String {
    let mut frame = qbridge_wire::summary::describe(d.head, &[d.tpid]);
    if d.head.len() < d.len {
        // The description counted the bytes kept; the frame's own length is told.
        if let Some(at) = frame.rfind(", ") {
            frame.truncate(at);
        }
        frame.push_str(&format!(", {} bytes", d.len));
    }
    if out.json {
        let mut v = json!({
            "object": "drops",
            "port": d.port,
            "reason": d.reason.name(),
            "frame": frame,
            "len": d.len,
        });
        if d.vlan != 0 {
            v["vlan"] = json!(d.vlan);
        }
        format!("{v}\n")
    } else if d.vlan != 0 {
        format!(
            "{} vlan {} drop {}: {frame}\n",
            d.port,
            d.vlan,
            d.reason.name()
        )
    } else {
        format!("{} drop {}: {frame}\n", d.port, d.reason.name())
    }
}

/// A worker's part: the heads of the batch it is about to forward, kept while someone
/// watches, and the dropped frames found afterwards.
#[derive(Debug, Default)]
pub(crate) struct WatchScratch {
    heads: Vec<(u16, usize, [u8; HEAD_BYTES])>,
}

impl WatchScratch {
    /// Keeps the head of every frame of `rx`.
    pub(crate) fn capture(&mut self, rx: &qbridge_packet::Batch) {
        self.heads.clear();
        for p in &rx.pkts {
            let f = p.frame();
            let mut h = [0u8; HEAD_BYTES];
            let n = f.len().min(HEAD_BYTES);
            h[..n].copy_from_slice(&f[..n]);
            self.heads.push((p.port, f.len(), h));
        }
    }

    /// Tells `watch` of the frames of the captured batch that `core` dropped.
    pub(crate) fn report(&self, watch: &DropWatch, core: &Forwarder, plan: &Plan, now_ns: u64) {
        let mut drops = Vec::new();
        for (i, (port, len, head)) in self.heads.iter().enumerate() {
            let Some(reason) = core.dropped(i) else {
                continue;
            };
            drops.push(Dropped {
                port: plan.port_name(PortId(*port)).unwrap_or("?"),
                tpid: plan.port_tpid(PortId(*port)).0,
                vlan: core.classified_vid(i).unwrap_or(0),
                reason,
                head: &head[..(*len).min(HEAD_BYTES)],
                len: *len,
            });
        }
        watch.report(now_ns, &drops);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn dropped(reason: DropReason) -> Dropped<'static> {
        const F: [u8; 18] = [
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0, 0, 30, 0x88, 0xb5,
        ];
        Dropped {
            port: "p1",
            tpid: 0x8100,
            vlan: 30,
            reason,
            head: &F,
            len: 60,
        }
    }

    #[test]
    fn lines_are_rate_limited_and_the_rest_told_as_more() {
        let w = DropWatch::default();
        assert!(!w.active());
        let (tx, rx) = mpsc::sync_channel(1000);
        w.add(tx, OutputOptions::default());
        assert!(w.active());
        let d: Vec<Dropped<'_>> = (0..150)
            .map(|_| dropped(DropReason::VlanNotMember))
            .collect();
        w.report(1, &d);
        let lines: Vec<String> = rx.try_iter().collect();
        assert_eq!(lines.len(), LINES_PER_SECOND as usize);
        assert_eq!(
            lines[0],
            "p1 vlan 30 drop vlan_not_member: 02:00:00:00:00:01 > 02:00:00:00:00:02, 8100 vid 30 \
             / ethertype 0x88b5, 60 bytes\n"
        );
        // The next second opens with the count of what was left out.
        w.tick(1 + NS_PER_SEC);
        let lines: Vec<String> = rx.try_iter().filter(|l| !l.is_empty()).collect();
        assert_eq!(
            lines,
            vec!["50 more drops (at most 100 lines a second)\n".to_string()]
        );
        // A watcher that is gone is let go, and the workers stop watching.
        drop(rx);
        w.tick(2 + 2 * NS_PER_SEC);
        assert!(!w.active());
    }

    #[test]
    fn json_lines() {
        let w = DropWatch::default();
        let (tx, rx) = mpsc::sync_channel(10);
        w.add(
            tx,
            OutputOptions {
                json: true,
                ..Default::default()
            },
        );
        w.report(1, &[dropped(DropReason::PortLocked)]);
        let l = rx.try_recv().unwrap();
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["object"], "drops");
        assert_eq!(v["port"], "p1");
        assert_eq!(v["vlan"], 30);
        assert_eq!(v["reason"], "port_locked");
        assert_eq!(v["len"], 60);
    }
}
