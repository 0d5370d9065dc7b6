//! `trace`: the frame built from its description, walked through the switch
//! ([`Switch::trace`]), and the answer rendered as text or JSON.

use crate::command::{
    DescribedFrame, L3Spec, L4Spec, LiveFilter, OutputOptions, TraceFrameSpec, TraceSpec,
};
use crate::error::ControlError;
use crate::status::FastPathStatus;
use qbridge_bridge::{Switch, Trace, TraceStep, Verdict};
use qbridge_wire::checksum::{combine, finish, pseudo_header_v4, pseudo_header_v6, sum};
use qbridge_wire::{summary, IpProtocol};
use std::fmt::Write;

/// Runs `trace` against `sw`.
/// `fast`: the eBPF fast path's state in a daemon (`None` offline: no `fast` stage).
pub fn execute(
    sw: &Switch,
    spec: &TraceSpec,
    fast: Option<&dyn FastStage>,
    details: &crate::trace_details::PortDetails,
    out: OutputOptions,
) -> Result<String, ControlError> {
    let port = sw.port_id(&spec.dev)?;
    let frame = match &spec.frame {
        TraceFrameSpec::Hex(b) => b.clone(),
        TraceFrameSpec::Described(d) => build(d, sw.port_tpid(port).0),
    };
    let mut t = sw.trace(port, &frame)?;
    details.add_steps(&mut t);
    if let Some(f) = fast {
        add_fast_stage(&mut t, &frame, f);
    }
    Ok(if out.json {
        let mut s = if out.pretty {
            serde_json::to_string_pretty(&t)
        } else {
            serde_json::to_string(&t)
        }
        .unwrap_or_default();
        s.push('\n');
        s
    } else {
        render(&t)
    })
}

/// What a daemon's eBPF fast path would do with a traced frame: the `fast` stage's text. The
/// daemon's engine runs the flow install's own checks on the trace (`flow_for`); the fast
/// path's state alone ([`FastPathStatus`]) tells what the outputs do.
pub trait FastStage: std::fmt::Debug + Send + Sync {
    /// The stage for `t`, the trace of `input` (the frame as received).
    fn stage(&self, t: &Trace, input: &[u8]) -> String;
}

impl FastStage for FastPathStatus {
    fn stage(&self, t: &Trace, _input: &[u8]) -> String {
        fast_stage(t, self)
    }
}

/// Adds the `fast` stage: what the eBPF fast path does with frames like the traced one
/// (`input`, as received).
pub fn add_fast_stage(t: &mut Trace, input: &[u8], f: &dyn FastStage) {
    let text = f.stage(t, input);
    t.steps.push(TraceStep {
        stage: "fast",
        text,
    });
}

/// What the eBPF fast path does with frames like the traced one (docs/fast-path.md): a flow is
/// made of a frame the pipeline forwarded alone to one port, both ports served by the program;
/// the flow's own checks (the FDB, the tag rewrite) are the worker's when it installs it, and
/// their refusals are counted by `show fast-path`.
pub fn fast_stage(t: &Trace, f: &FastPathStatus) -> String {
    if f.state != "on" {
        return match &f.reason {
            Some(r) => format!("the fast path is off ({r}): every frame takes the pipeline"),
            None => "the fast path is off: every frame takes the pipeline".into(),
        };
    }
    let served = |p: &str| f.ports.iter().any(|q| q == p);
    if !served(&t.in_port) {
        return format!(
            "{} is not served by the fast path (served: {}): its frames take the pipeline",
            t.in_port,
            if f.ports.is_empty() {
                "none".to_string()
            } else {
                f.ports.join(", ")
            }
        );
    }
    let forwarded: Vec<&str> = t
        .outputs
        .iter()
        .filter(|o| o.kind == qbridge_bridge::OutputKind::Forward)
        .map(|o| o.port.as_str())
        .collect();
    match (t.verdict, forwarded.as_slice()) {
        (Verdict::Forwarded, [out]) if t.outputs.len() == 1 && t.mirror_files.is_empty() => {
            if served(out) {
                "cacheable: one frame to one port, both served; after the pipeline forwards \
                 the first such frame, the program forwards the flow in the kernel (refusals, \
                 if any, are counted by reason in show fast-path)"
                    .to_string()
            } else {
                format!(
                    "not cached (port): {out} is not served by the fast path; such frames go up"
                )
            }
        }
        (Verdict::Forwarded, _) => {
            "not cached (outputs): mirror copies go with the frame; such frames go up".into()
        }
        (Verdict::Flooded, _) => {
            "not cached (outputs): floods go up to the pipeline, every frame".into()
        }
        (Verdict::Dropped, _) => {
            "not cached (outputs): drops are the pipeline's, every frame".into()
        }
        (Verdict::ControlPlane, _) => {
            "not cached (outputs): frames for the control plane go up".into()
        }
    }
}

/// The frame of a description: Ethernet, the tags (the outer one's TPID defaults to
/// `port_tpid`, the others' to 0x8100), then the payload: an ARP request, an IPv4 or IPv6
/// packet (an echo request, or a TCP segment with ACK and PSH, or a UDP datagram, each with
/// correct checksums and no data), or nothing after an ethertype (0x88b5 when none is given);
/// padded with zeros to `len`, else to 60 bytes as a NIC pads.
pub fn build(d: &DescribedFrame, port_tpid: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&d.dst.0);
    f.extend_from_slice(&d.src.0);
    for (i, t) in d.tags.iter().enumerate() {
        let tpid = t
            .tpid
            .map_or(if i == 0 { port_tpid } else { 0x8100 }, |t| t.0);
        let tci = u16::from(t.pcp) << 13 | u16::from(t.dei) << 12 | (t.vid & 0x0fff);
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    match d.l3 {
        L3Spec::Ethertype(e) => f.extend_from_slice(&e.to_be_bytes()),
        L3Spec::Arp { sender, target } => {
            f.extend_from_slice(&0x0806u16.to_be_bytes());
            f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&d.src.0);
            f.extend_from_slice(&sender.octets());
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&target.octets());
        }
        L3Spec::Ipv4 { src, dst } => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let (proto, l4) = l4_bytes(d.l4, false);
            let total = (20 + l4.len()) as u16;
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[6] = 0x40; // DF
            ip[8] = 64;
            ip[9] = u8::from(proto);
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let c = finish(sum(&ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let mut l4 = l4;
            if proto != IpProtocol::Icmp {
                let ph = pseudo_header_v4(src, dst, proto, l4.len() as u32);
                set_l4_checksum(&mut l4, proto, ph);
            } else {
                let c = finish(sum(&l4));
                l4[2..4].copy_from_slice(&c.to_be_bytes());
            }
            f.extend_from_slice(&ip);
            f.extend_from_slice(&l4);
        }
        L3Spec::Ipv6 { src, dst } => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            let (proto, mut l4) = l4_bytes(d.l4, true);
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
            ip[6] = u8::from(proto);
            ip[7] = 64;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            let ph = pseudo_header_v6(src, dst, proto, l4.len() as u32);
            set_l4_checksum(&mut l4, proto, ph);
            f.extend_from_slice(&ip);
            f.extend_from_slice(&l4);
        }
    }
    // Padded to `len`, or as a NIC pads a short frame: to 60 bytes (64 with the FCS).
    let len = d.len.map_or(60, usize::from);
    if f.len() < len {
        f.resize(len, 0);
    }
    f
}

/// The L4 header of a described packet (no data): its protocol and bytes, checksum 0.
fn l4_bytes(l4: L4Spec, v6: bool) -> (IpProtocol, Vec<u8>) {
    match l4 {
        L4Spec::Echo => {
            let t = if v6 { 128 } else { 8 };
            let p = if v6 {
                IpProtocol::Icmpv6
            } else {
                IpProtocol::Icmp
            };
            (p, vec![t, 0, 0, 0, 0x51, 0x62, 0, 1])
        }
        L4Spec::Tcp { sport, dport } => {
            let mut h = vec![0u8; 20];
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&dport.to_be_bytes());
            h[4..8].copy_from_slice(&1u32.to_be_bytes());
            h[8..12].copy_from_slice(&1u32.to_be_bytes());
            h[12] = 5 << 4;
            h[13] = 0x18; // ACK, PSH
            h[14..16].copy_from_slice(&65535u16.to_be_bytes());
            (IpProtocol::Tcp, h)
        }
        L4Spec::Udp { sport, dport } => {
            let mut h = vec![0u8; 8];
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&dport.to_be_bytes());
            h[4..6].copy_from_slice(&8u16.to_be_bytes());
            (IpProtocol::Udp, h)
        }
    }
}

fn set_l4_checksum(l4: &mut [u8], proto: IpProtocol, pseudo: u32) {
    let at = match proto {
        IpProtocol::Tcp => 16,
        IpProtocol::Udp => 6,
        _ => 2,
    };
    let mut c = finish(combine(pseudo, sum(l4)));
    if proto == IpProtocol::Udp && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// The text answer: the frame, the stages, the verdict with every frame that leaves (decoded
/// and in hex), the drops with their reasons in words.
pub fn render(t: &Trace) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trace: {} ← {}", t.in_port, t.frame.summary);
    s.push('\n');
    for st in &t.steps {
        let _ = writeln!(s, "  {:<8} {}", st.stage, st.text);
    }
    s.push('\n');
    let n = t
        .outputs
        .iter()
        .filter(|o| o.kind != qbridge_bridge::OutputKind::Mirror)
        .count();
    let verdict = match t.verdict {
        Verdict::Forwarded => "forwarded".to_string(),
        Verdict::Flooded => format!("flooded ({n} {})", if n == 1 { "copy" } else { "copies" }),
        Verdict::Dropped => "dropped".to_string(),
        Verdict::ControlPlane => "to the spanning tree (a BPDU for this bridge)".to_string(),
    };
    let _ = writeln!(
        s,
        "verdict: {verdict}{}",
        match t.vlan {
            Some(v) if t.bridge.is_some() =>
                format!(" in VLAN {v} of {}", t.bridge.as_deref().unwrap_or("")),
            _ => String::new(),
        }
    );
    for o in &t.outputs {
        let kind = match o.kind {
            qbridge_bridge::OutputKind::Forward => "out",
            qbridge_bridge::OutputKind::Flood => "flood",
            qbridge_bridge::OutputKind::Mirror => "mirror",
        };
        let _ = writeln!(s, "  {kind} {}: {}", o.port, o.frame.summary);
        s.push_str(&summary::hex_lines(&o.frame.bytes(), "      "));
    }
    for c in &t.mirror_files {
        let _ = writeln!(s, "  mirror to pcap {}: {}", c.file, c.frame.summary);
    }
    for d in &t.drops {
        let _ = writeln!(
            s,
            "  drop on {}: {} — {}",
            d.port,
            d.reason.name(),
            d.description
        );
    }
    s
}

impl LiveFilter {
    /// Whether `frame`, received on a port whose own TPID is `port_tpid`, matches every word
    /// given. Tags are read through the well-known TPIDs and the port's, as the drop watch
    /// shows them.
    pub fn matches(&self, frame: &[u8], port_tpid: u16) -> bool {
        if frame.len() < 14 {
            return false;
        }
        if self.dst.is_some_and(|m| frame[..6] != m.0)
            || self.src.is_some_and(|m| frame[6..12] != m.0)
        {
            return false;
        }
        let is_tag =
            |t: u16| t == port_tpid || qbridge_wire::Tpid::WELL_KNOWN.iter().any(|w| w.0 == t);
        let mut off = 12;
        let mut depth = 0;
        let ethertype = loop {
            let Some(t) = frame.get(off..off + 2) else {
                return false;
            };
            let t = u16::from_be_bytes([t[0], t[1]]);
            if !is_tag(t) {
                break t;
            }
            let Some(tci) = frame.get(off + 2..off + 4) else {
                return false;
            };
            if let Some(&want) = self.vids.get(depth) {
                if u16::from_be_bytes([tci[0], tci[1]]) & 0x0fff != want {
                    return false;
                }
            }
            depth += 1;
            off += 4;
        };
        if depth < self.vids.len() || self.ethertype.is_some_and(|e| e != ethertype) {
            return false;
        }
        let Some(proto) = self.ip_proto else {
            return true;
        };
        let Ok(h) = qbridge_wire::parse_headers(frame, |t| is_tag(t.0)) else {
            return false;
        };
        let want = if proto == 6 {
            IpProtocol::Tcp
        } else {
            IpProtocol::Udp
        };
        if h.l4_proto != Some(want) {
            return false;
        }
        let Some(port) = self.l4_port else {
            return true;
        };
        h.l4_offset
            .and_then(|o| frame.get(o..o + 4))
            .is_some_and(|p| {
                u16::from_be_bytes([p[0], p[1]]) == port || u16::from_be_bytes([p[2], p[3]]) == port
            })
    }
}

/// How a frame `trace live` explains reached the pipeline or passed it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LivePath {
    /// Received by the daemon from a port the fast path does not serve (or with it off).
    Pipeline,
    /// Sent up by the fast path's program (a miss), with why, as far as the daemon can tell.
    Miss(String),
    /// Forwarded in the kernel by the program from a cached flow; a copy came up for the trace.
    Hit(String),
}

/// One frame of `trace live`.
#[derive(Debug)]
pub struct LiveFrame<'a> {
    /// 1-based, of `count`.
    pub index: u32,
    pub count: u32,
    /// Since the trace started.
    pub after_ns: u64,
    pub path: LivePath,
    pub trace: &'a Trace,
    /// For a frame the pipeline forwarded: the drop reason it counted for the frame (`None`:
    /// not dropped). `None` for a fast-path hit.
    pub dropped: Option<qbridge_bridge::DropReason>,
    /// The pipeline told what it did with this frame (false: a switch with stacked devices,
    /// whose frames are counted, not followed one by one; `dropped` says nothing then).
    pub followed: bool,
}

impl LiveFrame<'_> {
    /// Whether what the pipeline did agrees with the trace (a hit forwarded as its flow says).
    pub fn agrees(&self) -> bool {
        if !self.followed || matches!(self.path, LivePath::Hit(_)) {
            return true;
        }
        match self.dropped {
            Some(r) => self.trace.drops.iter().any(|d| d.reason == r),
            None => self.trace.verdict != Verdict::Dropped,
        }
    }
}

/// One frame of `trace live` as text (a header, the trace with its `fast` stage, what
/// happened) or as one JSON object on one line.
pub fn render_live(f: &LiveFrame<'_>, out: OutputOptions) -> String {
    let (path, fast) = match &f.path {
        LivePath::Pipeline => ("pipeline", None),
        LivePath::Miss(why) => ("fast_miss", Some(why.as_str())),
        LivePath::Hit(flow) => ("fast_hit", Some(flow.as_str())),
    };
    let happened = match (&f.path, f.dropped) {
        (LivePath::Hit(_), _) => "forwarded by the fast path's flow".to_string(),
        _ if !f.followed => "not followed frame by frame (a switch with stacked devices: its \
                             frames are counted, and the trace above is exact)"
            .to_string(),
        (_, Some(r)) if f.trace.verdict == Verdict::Flooded => {
            format!("flooded; the last copy dropped: {}", r.name())
        }
        (_, Some(r)) => format!("dropped: {}", r.name()),
        (_, None) if f.trace.verdict == Verdict::Dropped => "not dropped".to_string(),
        (_, None) => match f.trace.verdict {
            Verdict::ControlPlane => "to the control plane".to_string(),
            Verdict::Flooded => "flooded".to_string(),
            _ => "forwarded".to_string(),
        },
    };
    let agrees = f.agrees();
    if out.json {
        let mut s = serde_json::json!({
            "object": "trace",
            "index": f.index,
            "count": f.count,
            "after": f.after_ns as f64 / 1e9,
            "path": path,
            "fast": fast,
            "happened": happened,
            "dropped": f.dropped.map(|r| r.name()),
            "agrees": agrees,
            "trace": f.trace,
        })
        .to_string();
        s.push('\n');
        return s;
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "frame {}/{} on {}, {:.3} s after the start: {}",
        f.index,
        f.count,
        f.trace.in_port,
        f.after_ns as f64 / 1e9,
        match &f.path {
            LivePath::Pipeline => "received by the pipeline".to_string(),
            LivePath::Miss(why) => format!("a fast-path miss ({why}), forwarded by the pipeline"),
            LivePath::Hit(flow) => format!("a fast-path hit ({flow})"),
        }
    );
    s.push_str(&render(f.trace));
    let _ = writeln!(
        s,
        "happened: {happened}{}",
        if agrees {
            ""
        } else {
            " (the trace above was made from the switch's state a moment before; it differs)"
        }
    );
    s.push('\n');
    s
}

/// The last line of a `trace live` stream.
/// The last line of a `trace live` stream: frames told (`lost` of them dropped because the
/// client did not keep up), of `count`; `timed_out`: the timeout in seconds, when it ended the
/// trace.
pub fn render_live_end(
    traced: u32,
    count: u32,
    timed_out: Option<u32>,
    lost: u32,
    out: OutputOptions,
) -> String {
    if out.json {
        let mut s = serde_json::json!({
            "object": "trace_end",
            "traced": traced,
            "count": count,
            "timeout": timed_out,
            "lost": lost,
        })
        .to_string();
        s.push('\n');
        return s;
    }
    let mut s = match timed_out {
        Some(t) => format!("trace live: {traced} of {count} frames in {t} s (timeout)"),
        None if traced == 1 => "trace live: 1 frame".to_string(),
        None => format!("trace live: {traced} frames"),
    };
    if lost != 0 {
        s.push_str(&format!("; {lost} not shown (the client did not keep up)"));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::TagSpec;
    use qbridge_wire::{parse_headers, MacAddr, Tpid};

    fn described(l3: L3Spec, l4: L4Spec) -> DescribedFrame {
        DescribedFrame {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            tags: vec![
                TagSpec {
                    vid: 100,
                    pcp: 5,
                    dei: false,
                    tpid: None,
                },
                TagSpec {
                    vid: 10,
                    pcp: 0,
                    dei: true,
                    tpid: None,
                },
            ],
            l3,
            l4,
            len: None,
        }
    }

    #[test]
    fn built_frames_parse_and_their_checksums_verify() {
        let v4 = L3Spec::Ipv4 {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
        };
        let f = build(
            &described(
                v4,
                L4Spec::Tcp {
                    sport: 40000,
                    dport: 80,
                },
            ),
            0x88a8,
        );
        assert_eq!(
            summary::describe(&f, &[]),
            "02:00:00:00:00:01 > 02:00:00:00:00:02, 88a8 vid 100 pcp 5 / 8100 vid 10 dei 1 / \
             IPv4 TCP 10.0.0.1:40000 > 10.0.0.2:80, 62 bytes"
        );
        let h = parse_headers(&f, Tpid::is_well_known).unwrap();
        let l3 = &f[h.l3_offset..];
        assert!(qbridge_wire::checksum::verify(&l3[..20]));
        let ph = pseudo_header_v4(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            IpProtocol::Tcp,
            20,
        );
        assert_eq!(
            qbridge_wire::checksum::fold(combine(ph, sum(&l3[20..]))),
            0xffff
        );
        let v6 = L3Spec::Ipv6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        };
        let mut d = described(v6, L4Spec::Echo);
        d.len = Some(128);
        d.tags.clear();
        let f = build(&d, 0x8100);
        assert_eq!(f.len(), 128);
        assert_eq!(
            summary::payload(&f, &[]),
            "IPv6 ICMPv6 echo request 2001:db8::1 > 2001:db8::2"
        );
    }

    #[test]
    fn the_live_filter_reads_tags_addresses_and_ports() {
        use crate::command::LiveFilter;
        let d = described(
            L3Spec::Ipv4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
            },
            L4Spec::Tcp {
                sport: 40000,
                dport: 80,
            },
        );
        let f = build(&d, 0x8100);
        let all = LiveFilter::default();
        assert!(all.matches(&f, 0x8100));
        let m = |filter: LiveFilter| filter.matches(&f, 0x8100);
        assert!(m(LiveFilter {
            src: Some(d.src),
            dst: Some(d.dst),
            vids: d.tags.iter().map(|t| t.vid).collect(),
            ethertype: Some(0x0800),
            ip_proto: Some(6),
            l4_port: Some(80),
        }));
        assert!(m(LiveFilter {
            vids: vec![d.tags[0].vid],
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            vids: vec![d.tags[0].vid + 1],
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            vids: vec![1, 2, 3, 4],
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            src: Some(d.dst),
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            ethertype: Some(0x86dd),
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            ip_proto: Some(17),
            ..LiveFilter::default()
        }));
        assert!(!m(LiveFilter {
            ip_proto: Some(6),
            l4_port: Some(81),
            ..LiveFilter::default()
        }));
        // Short and empty frames match nothing but never panic.
        for n in 0..f.len() {
            let _ = all.matches(&f[..n], 0x8100);
            let _ = LiveFilter {
                ip_proto: Some(6),
                l4_port: Some(80),
                vids: vec![100],
                ..LiveFilter::default()
            }
            .matches(&f[..n], 0x8100);
        }
        assert!(!all.matches(&f[..13], 0x8100));
    }

    #[test]
    fn a_live_frame_tells_what_happened_and_whether_it_agrees() {
        use qbridge_bridge::DropReason;
        let mut sess = crate::Session::new();
        sess.execute_batch(
            "link add br0 type bridge\nlink add p1 type pcap\nlink add p2 type pcap\n\
             link set dev p1 master br0\nlink set dev p2 master br0\n",
            OutputOptions::default(),
        )
        .unwrap();
        let sw = sess.switch();
        let frame = [
            0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5,
        ]
        .iter()
        .copied()
        .chain([0u8; 46])
        .collect::<Vec<u8>>();
        let t = sw.trace(sw.port_id("p1").unwrap(), &frame).unwrap();
        assert_eq!(t.verdict, Verdict::Flooded);
        let f = |path: LivePath, dropped: Option<DropReason>, followed: bool| LiveFrame {
            index: 1,
            count: 2,
            after_ns: 1_500_000_000,
            path,
            trace: &t,
            dropped,
            followed,
        };
        let text = |lf: &LiveFrame<'_>| render_live(lf, OutputOptions::default());
        let a = f(LivePath::Pipeline, None, true);
        assert!(a.agrees());
        let s = text(&a);
        assert!(
            s.starts_with("frame 1/2 on p1, 1.500 s after the start: received by the pipeline"),
            "{s}"
        );
        assert!(s.contains("happened: flooded\n"), "{s}");
        // The pipeline dropped it whole where the trace flooded: told as a disagreement.
        let b = f(LivePath::Pipeline, Some(DropReason::NoDestination), true);
        assert!(!b.agrees());
        assert!(text(&b).contains("it differs"), "{}", text(&b));
        // A switch with stacked devices does not follow frames: nothing to disagree with.
        let c = f(LivePath::Pipeline, None, false);
        assert!(c.agrees());
        assert!(text(&c).contains("happened: not followed frame by frame"));
        let d = f(LivePath::Hit("its flow".into()), None, true);
        assert!(text(&d).contains("a fast-path hit (its flow)"));
        let j: serde_json::Value = serde_json::from_str(&render_live(
            &d,
            OutputOptions {
                json: true,
                ..Default::default()
            },
        ))
        .unwrap();
        assert_eq!(j["path"], "fast_hit");
        assert_eq!(j["fast"], "its flow");
        assert_eq!(j["agrees"], true);
        assert_eq!(j["trace"]["verdict"], "flooded");
        assert_eq!(
            render_live_end(1, 2, Some(5), 0, OutputOptions::default()),
            "trace live: 1 of 2 frames in 5 s (timeout)\n"
        );
        assert_eq!(
            render_live_end(3, 3, None, 2, OutputOptions::default()),
            "trace live: 3 frames; 2 not shown (the client did not keep up)\n"
        );
        let j: serde_json::Value = serde_json::from_str(&render_live_end(
            3,
            3,
            None,
            2,
            OutputOptions {
                json: true,
                ..Default::default()
            },
        ))
        .unwrap();
        assert_eq!(j["lost"], 2);
        assert_eq!(j["timeout"], serde_json::Value::Null);
    }
}
