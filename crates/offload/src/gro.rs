//! Software GRO: coalesces the TCP segments of one flow in a batch into super-frames, at any
//! VLAN tag depth, for an egress port that takes super-frames (a TAP, a device with TSO). The
//! userspace counterpart of Linux's `napi_gro_receive`/`tcp_gro_receive` and VPP's `gro`, but
//! over one batch: nothing is held back between calls, so GRO adds no latency.
//!
//! **Data structure.** [`Gro`] owns a table of at most [`MAX_OPEN_FLOWS`] *open heads*: the
//! first segment of a run being merged, identified by its index in the output batch and by
//! its flow (MAC addresses, the whole tag stack — TPIDs and TCIs —, EtherType, IP addresses,
//! TCP ports). The batch is walked once in order; each frame is either pushed to the output in
//! place, or merged into the open head of its flow, whose buffer receives its payload. The
//! table is searched linearly, a 64-bit key mixed from the addresses and ports rejecting
//! almost every entry; when it is full the oldest head (furthest back in the output) is
//! closed. A second vector holds the batch while it is rebuilt; both keep their capacity, so
//! after warm-up a call allocates nothing. One `Gro` per worker thread; no locks, no I/O.
//!
//! **What is merged.** A segment joins the open head of its flow when, as in Linux's
//! `tcp_gro_receive`: it is IPv4 without options or fragmentation, or IPv6 with TCP directly
//! after the fixed header; it is not a GSO frame; its TCP flags are ACK or ACK|PSH; it carries
//! payload; its sequence number is the head's next; its ACK number, window, TCP header length
//! and option bytes (timestamps included) equal the head's; TTL/hop limit and TOS/traffic
//! class (ECN bits included) equal, and for IPv6 the flow label; DF equal, and without DF the
//! IPv4 identifier is the head's plus the segments already merged; its payload is at most the
//! head's (`gso_size`, the first segment's payload length); the merged IP packet stays within
//! [`GroLimits::max_ip_bytes`] (at most 65535) and [`GroLimits::max_segments`]. A segment
//! shorter than `gso_size`, or with PSH, is merged and ends the run (PSH is kept on the
//! super-frame, which GSO puts back on the last segment). With DF, merged segments' IPv4
//! identifiers are not kept: GSO numbers them up from the first again.
//!
//! **Checksums.** A segment takes part in a merge only if its checksums are good: the IPv4
//! header checksum is always verified; the TCP checksum is verified over the segment unless
//! the frame's metadata vouches for it: `DATA_VALID` (the kernel or device verified it, or our
//! own GSO made it — Linux's `CHECKSUM_UNNECESSARY`, which Linux's GRO trusts too) or
//! `NEEDS_CSUM` with `csum_start` at the TCP header and `csum_offset` 16 (a local sender's
//! partial checksum, completed later; a `NEEDS_CSUM` pointing elsewhere is not merged). The
//! first segment of a run is verified only when a second one joins it, so a segment that stays
//! alone costs no checksum pass. A segment with a bad checksum is passed through untouched (the
//! receiver drops and counts it) and ends its flow's run.
//!
//! **The super-frame.** The first segment's buffer, its Ethernet padding dropped, followed by
//! the payload of every merged segment; IPv4 total length and header checksum (or IPv6
//! payload length) rewritten; PSH added if the last segment had it; the TCP checksum field
//! holding the folded pseudo-header sum; metadata `NEEDS_CSUM`, `csum_start` = TCP header,
//! `csum_offset` 16, `gso_type` TCPv4/TCPv6, `gso_size` = the first payload length, `hdr_len`
//! = all headers — what a Linux guest hands a TAP with TSO, and what [`segment`] takes back.
//! Port and receive time are the first segment's.
//!
//! **What is never merged** (passed through untouched, counted by [`PassReason`]): frames that
//! do not parse, non-TCP, IP fragments, GSO frames, IPv4 options and IPv6 extension headers,
//! SYN/FIN/RST/URG/ECE/CWR, segments without payload, bad checksums, and a run of one segment.
//!
//! **Order.** A merged segment's bytes move to its head's position, earlier in the batch, past
//! frames of other flows only: any frame of the same flow that is not merged (a pure ACK, a
//! FIN, a bad checksum, a gap) closes the flow's head first, so nothing moves past it; an IP
//! fragment closes the heads of its address pair (it has no ports to say which flow), and a
//! frame whose headers do not parse closes every head. Frames of other flows keep their
//! relative order.
//!
//! **Buffers.** Merged segments' buffers go back to the caller's [`BufPool`]; the head's buffer
//! grows to hold the super-frame (`PacketBuf` has no `reserve`, so a buffer grows by doubling
//! the first time it heads a run, then keeps its capacity). **Cost:** one header walk per
//! frame (a tag walk only, when the buffer has a recorded layout), one checksum pass per merged segment unless trusted, one copy of each merged payload
//! (measured in `docs/benchmarks.md`: ~2600 instructions per 1448-byte segment summed, ~1100
//! trusted).
//!
//! [`segment`]: crate::segment

use qbridge_packet::{Batch, BufPool, OffloadMeta, PacketBuf};
use qbridge_wire::tcp::Flags;
use qbridge_wire::virtio::{GsoType, F_DATA_VALID, F_NEEDS_CSUM};
use qbridge_wire::{checksum, ipv4, ipv6, tcp, EtherType, Fragment};
use qbridge_wire::{IpProtocol, Tpid};

/// Most runs open at once in one call; when full, the oldest is closed. Linux keeps 8 flows per
/// GRO bucket; a batch of 64 frames seldom interleaves more than a few dozen flows.
pub const MAX_OPEN_FLOWS: usize = 32;

/// Bounds on one super-frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroLimits {
    /// Most bytes of the merged IP packet (IP header, TCP header, payload); values above 65535
    /// (the IPv4 total length field) are treated as 65535.
    pub max_ip_bytes: u32,
    /// Most segments in one super-frame (at most [`crate::MAX_SEGMENTS`], so [`crate::segment`]
    /// can always cut it again).
    pub max_segments: u16,
}

impl Default for GroLimits {
    /// 64 KB (IP length 65535) and 64 segments.
    fn default() -> Self {
        GroLimits {
            max_ip_bytes: 65_535,
            max_segments: 64,
        }
    }
}

/// Why a frame left [`Gro::coalesce`] as it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PassReason {
    /// The headers do not parse (tag stack, IP or TCP header).
    Malformed,
    /// Not IPv4/IPv6, or not TCP.
    NotTcp,
    /// An IP fragment.
    Fragment,
    /// Already a GSO super-frame.
    Gso,
    /// IPv4 options or IPv6 extension headers.
    IpOptions,
    /// TCP flags other than ACK, or ACK|PSH.
    Flags,
    /// No TCP payload (a pure ACK).
    NoPayload,
    /// `NEEDS_CSUM` whose `csum_start`/`csum_offset` are not the TCP checksum.
    CsumMeta,
    /// IPv4 header checksum or TCP checksum wrong.
    BadChecksum,
    /// Mergeable, but no following segment of its flow joined it.
    Single,
}

impl PassReason {
    pub const COUNT: usize = 10;
    pub const ALL: [PassReason; PassReason::COUNT] = [
        PassReason::Malformed,
        PassReason::NotTcp,
        PassReason::Fragment,
        PassReason::Gso,
        PassReason::IpOptions,
        PassReason::Flags,
        PassReason::NoPayload,
        PassReason::CsumMeta,
        PassReason::BadChecksum,
        PassReason::Single,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            PassReason::Malformed => "malformed",
            PassReason::NotTcp => "not_tcp",
            PassReason::Fragment => "fragment",
            PassReason::Gso => "gso",
            PassReason::IpOptions => "ip_options",
            PassReason::Flags => "flags",
            PassReason::NoPayload => "no_payload",
            PassReason::CsumMeta => "csum_meta",
            PassReason::BadChecksum => "bad_checksum",
            PassReason::Single => "single",
        }
    }
}

/// Why a run of one flow ended before a following segment of that flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The segment's sequence number is not the run's next.
    SeqGap,
    /// ACK number, window, TCP options, TTL, TOS, flow label, DF or IPv4 identifier differ.
    HeaderMismatch,
    /// The segment is larger than the run's `gso_size`.
    Size,
    /// The run reached [`GroLimits`].
    Limit,
    /// A frame of the flow that cannot be merged (see [`PassReason`]) came next.
    Interrupted,
    /// The table of open runs was full.
    Evicted,
}

impl EndReason {
    pub const COUNT: usize = 6;
    pub const ALL: [EndReason; EndReason::COUNT] = [
        EndReason::SeqGap,
        EndReason::HeaderMismatch,
        EndReason::Size,
        EndReason::Limit,
        EndReason::Interrupted,
        EndReason::Evicted,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            EndReason::SeqGap => "seq_gap",
            EndReason::HeaderMismatch => "header_mismatch",
            EndReason::Size => "size",
            EndReason::Limit => "limit",
            EndReason::Interrupted => "interrupted",
            EndReason::Evicted => "evicted",
        }
    }
}

/// What one [`Gro::coalesce`] call did. `frames_in = frames_out + segments_merged` and
/// `frames_out = super_frames + passed.sum()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroStats {
    pub frames_in: u64,
    pub frames_out: u64,
    /// Super-frames made (each of two segments or more).
    pub super_frames: u64,
    /// Segments whose payload was appended to an earlier one (frames removed from the batch).
    pub segments_merged: u64,
    /// Frames out unchanged, by [`PassReason`] (indexed by `reason as usize`).
    pub passed: [u64; PassReason::COUNT],
    /// Runs cut short, by [`EndReason`]; informational (the frames are counted above).
    pub ended: [u64; EndReason::COUNT],
}

impl GroStats {
    pub fn passed(&self, r: PassReason) -> u64 {
        self.passed[r as usize]
    }

    pub fn ended(&self, r: EndReason) -> u64 {
        self.ended[r as usize]
    }

    /// Adds `other` into `self` (a port's running totals).
    pub fn accumulate(&mut self, other: &GroStats) {
        self.frames_in += other.frames_in;
        self.frames_out += other.frames_out;
        self.super_frames += other.super_frames;
        self.segments_merged += other.segments_merged;
        for (a, b) in self.passed.iter_mut().zip(other.passed) {
            *a += b;
        }
        for (a, b) in self.ended.iter_mut().zip(other.ended) {
            *a += b;
        }
    }
}

/// Reusable GRO state: the open-run table and the batch scratch. One per worker thread.
#[derive(Debug, Default)]
pub struct Gro {
    runs: Table,
    input: Vec<PacketBuf>,
}

/// The open runs, with their keys apart so that [`Table::find`] compares keys in one tight
/// branch-free loop and looks only at runs whose key matches. Order is not kept: removal moves the last entry in.
#[derive(Debug, Default)]
struct Table {
    /// `keys[i]` is `runs[i].first.key` for `i < runs.len()`; the rest is stale.
    keys: [u64; MAX_OPEN_FLOWS],
    runs: Vec<Run>,
}

const _: () = assert!(MAX_OPEN_FLOWS <= 64, "Table::find's match mask is a u64");

impl Table {
    fn with_capacity(n: usize) -> Table {
        Table {
            keys: [0; MAX_OPEN_FLOWS],
            runs: Vec::with_capacity(n),
        }
    }

    fn len(&self) -> usize {
        self.runs.len()
    }

    fn clear(&mut self) {
        self.runs.clear();
    }

    /// The caller keeps `len() < MAX_OPEN_FLOWS`.
    fn push(&mut self, run: Run) {
        self.keys[self.runs.len()] = run.first.key;
        self.runs.push(run);
    }

    fn remove(&mut self, i: usize) -> Run {
        let last = self.runs.len() - 1;
        self.keys[i] = self.keys[last];
        self.runs.swap_remove(i)
    }

    fn pop(&mut self) -> Option<Run> {
        self.runs.pop()
    }

    /// The open run of `seg`'s flow (frame `f`), if any.
    fn find(&self, out: &[PacketBuf], f: &[u8], seg: &Seg) -> Option<usize> {
        let mut mask = 0u64;
        for (i, &k) in self.keys[..self.runs.len()].iter().enumerate() {
            mask |= u64::from(k == seg.key) << i;
        }
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let r = &self.runs[i];
            if r.first.ports == seg.ports
                && r.first.family == seg.family
                && same_addrs(&r.first, out[r.out].frame(), seg, f)
            {
                return Some(i);
            }
        }
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Csum {
    /// The TCP checksum must be summed before the segment takes part in a merge.
    Verify,
    /// `DATA_VALID`, or `NEEDS_CSUM` at the TCP checksum.
    Trusted,
}

/// One TCP segment that may be merged: what the header walk found.
#[derive(Clone, Copy, Debug)]
struct Seg {
    /// Addresses and ports mixed: a quick reject for [`Table::find`], not an identity.
    key: u64,
    family: Family,
    l3: usize,
    l4: usize,
    hdr_len: usize,
    l3_end: usize,
    src: u128,
    dst: u128,
    ports: u32,
    seq: u32,
    ack: u32,
    window: u16,
    psh: bool,
    /// IPv4 TOS or IPv6 traffic class.
    tos: u8,
    /// TTL or hop limit.
    ttl: u8,
    /// IPv6 flow label; 0 for IPv4.
    flow_label: u32,
    df: bool,
    ident: u16,
    csum: Csum,
}

impl Seg {
    fn payload_len(&self) -> usize {
        self.l3_end - self.hdr_len
    }
}

/// An open run: its first segment sits at `out` in the output batch.
#[derive(Clone, Copy, Debug)]
struct Run {
    out: usize,
    first: Seg,
    gso_size: usize,
    next_seq: u32,
    ip_len: usize,
    segments: u16,
    psh: bool,
    verified: bool,
}

/// What the header walk makes of a frame.
enum Class {
    Candidate(Seg),
    /// Not mergeable and outside any flow (non-IP, non-TCP).
    Alone(PassReason),
    /// Not mergeable, in the TCP flow of `Seg` (only its key fields are meaningful).
    InFlow(PassReason, Seg),
    /// An IP fragment of the address pair in `Seg` (ports unknown).
    InAddrs(PassReason, Seg),
    /// Headers do not parse: its flow is unknown.
    Unknown,
}

impl Gro {
    pub fn new() -> Gro {
        Gro {
            runs: Table::with_capacity(MAX_OPEN_FLOWS),
            input: Vec::new(),
        }
    }

    /// Coalesces `batch` (one egress port's output) in place; see the module doc for what is
    /// merged. Buffers of merged segments go back to `pool`. `is_tag` names the TPIDs of tags
    /// in front of L3 (the port's set, or `Tpid::is_well_known`).
    pub fn coalesce(
        &mut self,
        batch: &mut Batch,
        pool: &mut BufPool,
        is_tag: impl Fn(Tpid) -> bool,
        limits: GroLimits,
    ) -> GroStats {
        let mut st = GroStats::default();
        let max_ip = limits.max_ip_bytes.min(65_535) as usize;
        let max_segs = limits.max_segments.min(crate::MAX_SEGMENTS as u16);
        self.runs.clear();
        self.input.clear();
        std::mem::swap(&mut self.input, &mut batch.pkts);
        let out = &mut batch.pkts;
        out.reserve(self.input.len());
        let runs = &mut self.runs;
        for pkt in self.input.drain(..) {
            st.frames_in += 1;
            let seg = match classify(&pkt, &is_tag) {
                Class::Candidate(seg) => seg,
                Class::Alone(r) => {
                    pass(out, pkt, r, &mut st);
                    continue;
                }
                Class::InFlow(r, key) => {
                    if let Some(i) = runs.find(out, pkt.frame(), &key) {
                        st.ended[EndReason::Interrupted as usize] += 1;
                        close(runs.remove(i), out, &mut st);
                    }
                    pass(out, pkt, r, &mut st);
                    continue;
                }
                Class::InAddrs(r, key) => {
                    let f = pkt.frame();
                    let mut i = 0;
                    while i < runs.len() {
                        let run = runs.runs[i];
                        if same_addrs(&run.first, out[run.out].frame(), &key, f) {
                            st.ended[EndReason::Interrupted as usize] += 1;
                            close(runs.remove(i), out, &mut st);
                        } else {
                            i += 1;
                        }
                    }
                    pass(out, pkt, r, &mut st);
                    continue;
                }
                Class::Unknown => {
                    while let Some(run) = runs.pop() {
                        st.ended[EndReason::Interrupted as usize] += 1;
                        close(run, out, &mut st);
                    }
                    pass(out, pkt, PassReason::Malformed, &mut st);
                    continue;
                }
            };

            if let Some(i) = runs.find(out, pkt.frame(), &seg) {
                let run = runs.runs[i];
                match can_join(
                    &run,
                    &seg,
                    out[run.out].frame(),
                    pkt.frame(),
                    max_ip,
                    max_segs,
                ) {
                    Ok(()) => {
                        if seg.csum == Csum::Verify && !tcp_checksum_ok(&seg, pkt.frame()) {
                            st.ended[EndReason::Interrupted as usize] += 1;
                            close(runs.remove(i), out, &mut st);
                            pass(out, pkt, PassReason::BadChecksum, &mut st);
                            continue;
                        }
                        let head_ok = run.verified
                            || run.first.csum == Csum::Trusted
                            || tcp_checksum_ok(&run.first, out[run.out].frame());
                        if head_ok {
                            let r = &mut runs.runs[i];
                            r.verified = true;
                            merge(r, &mut out[r.out], &seg, &pkt);
                            st.segments_merged += 1;
                            pool.put(pkt);
                            if r.psh || seg.payload_len() < r.gso_size {
                                close(runs.remove(i), out, &mut st);
                            }
                            continue;
                        }
                        // The head is bad: it stays as it came; this segment starts a run.
                        runs.remove(i);
                        st.passed[PassReason::BadChecksum as usize] += 1;
                    }
                    Err(reason) => {
                        st.ended[reason as usize] += 1;
                        close(runs.remove(i), out, &mut st);
                    }
                }
            }

            if seg.psh {
                // PSH ends a run; alone it starts none.
                pass(out, pkt, PassReason::Single, &mut st);
                continue;
            }
            if runs.len() == MAX_OPEN_FLOWS {
                // The oldest run is the one furthest back in the output.
                let oldest = (0..runs.len())
                    .min_by_key(|&i| runs.runs[i].out)
                    .unwrap_or(0);
                st.ended[EndReason::Evicted as usize] += 1;
                close(runs.remove(oldest), out, &mut st);
            }
            runs.push(Run {
                out: out.len(),
                first: seg,
                gso_size: seg.payload_len(),
                next_seq: seg.seq.wrapping_add(seg.payload_len() as u32),
                ip_len: seg.l3_end - seg.l3,
                segments: 1,
                psh: false,
                verified: false,
            });
            out.push(pkt);
        }
        while let Some(run) = runs.pop() {
            close(run, out, &mut st);
        }
        st.frames_out = out.len() as u64;
        st
    }
}

fn pass(out: &mut Vec<PacketBuf>, pkt: PacketBuf, r: PassReason, st: &mut GroStats) {
    st.passed[r as usize] += 1;
    out.push(pkt);
}

/// Reads what merging needs from `pkt`'s headers, or says why it cannot be merged.
fn classify(pkt: &PacketBuf, is_tag: &impl Fn(Tpid) -> bool) -> Class {
    let f = pkt.frame();
    let Ok(h) = pkt.headers(is_tag) else {
        return Class::Unknown;
    };
    let family = match h.ethertype {
        EtherType::Ipv4 => Family::V4,
        EtherType::Ipv6 => Family::V6,
        _ => return Class::Alone(PassReason::NotTcp),
    };
    if h.l4_proto != Some(IpProtocol::Tcp) {
        return Class::Alone(PassReason::NotTcp);
    }
    let l3 = h.l3_offset;
    let mut seg = Seg {
        key: 0,
        family,
        l3,
        l4: 0,
        hdr_len: 0,
        l3_end: h.l3_end,
        src: 0,
        dst: 0,
        ports: 0,
        seq: 0,
        ack: 0,
        window: 0,
        psh: false,
        tos: 0,
        ttl: 0,
        flow_label: 0,
        df: true,
        ident: 0,
        csum: Csum::Verify,
    };
    // parse_headers validated the IP header at l3.
    match family {
        Family::V4 => {
            let ip = ipv4::Packet::new_unchecked(&f[l3..]);
            seg.src = u128::from(u32::from(ip.src_addr()));
            seg.dst = u128::from(u32::from(ip.dst_addr()));
            seg.tos = ip.dscp() << 2 | ip.ecn();
            seg.ttl = ip.ttl();
            seg.df = ip.dont_frag();
            seg.ident = ip.ident();
        }
        Family::V6 => {
            let ip = ipv6::Packet::new_unchecked(&f[l3..]);
            seg.src = ip.src_addr().to_bits();
            seg.dst = ip.dst_addr().to_bits();
            seg.tos = ip.traffic_class();
            seg.ttl = ip.hop_limit();
            seg.flow_label = ip.flow_label();
        }
    }
    if h.fragment != Fragment::Whole {
        return Class::InAddrs(PassReason::Fragment, seg);
    }
    // Whole TCP: parse_headers validated the TCP header at l4 within l3_end.
    let (Some(l4), Some(hdr_len)) = (h.l4_offset, h.payload_offset) else {
        return Class::Alone(PassReason::Malformed);
    };
    let t = tcp::Packet::new_unchecked(&f[l4..h.l3_end]);
    seg.l4 = l4;
    seg.hdr_len = hdr_len;
    seg.ports = u32::from(t.src_port()) << 16 | u32::from(t.dst_port());
    seg.key = flow_key(&seg);
    seg.seq = t.seq_number();
    seg.ack = t.ack_number();
    seg.window = t.window_len();
    let flags = t.flags();
    seg.psh = flags.contains(Flags::PSH);

    let meta = pkt.offload;
    if meta.is_gso() {
        return Class::InFlow(PassReason::Gso, seg);
    }
    let options = match family {
        Family::V4 => ipv4::Packet::new_unchecked(&f[l3..]).header_len() != ipv4::HEADER_LEN,
        Family::V6 => l4 != l3 + ipv6::HEADER_LEN,
    };
    if options {
        return Class::InFlow(PassReason::IpOptions, seg);
    }
    if flags.without(Flags::PSH) != Flags::ACK {
        return Class::InFlow(PassReason::Flags, seg);
    }
    if hdr_len == h.l3_end {
        return Class::InFlow(PassReason::NoPayload, seg);
    }
    if meta.needs_csum() {
        if usize::from(meta.csum_start) != l4
            || usize::from(meta.csum_offset) != tcp::CHECKSUM_OFFSET
        {
            return Class::InFlow(PassReason::CsumMeta, seg);
        }
        seg.csum = Csum::Trusted;
    } else if meta.flags & F_DATA_VALID != 0 {
        seg.csum = Csum::Trusted;
    }
    if family == Family::V4 && !ipv4::Packet::new_unchecked(&f[l3..]).verify_checksum() {
        return Class::InFlow(PassReason::BadChecksum, seg);
    }
    Class::Candidate(seg)
}

fn flow_key(seg: &Seg) -> u64 {
    let a = seg.src ^ seg.dst.rotate_left(32);
    let k = (a as u64) ^ ((a >> 64) as u64).rotate_left(7) ^ u64::from(seg.ports) << 17;
    (k ^ seg.l3 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Same MAC addresses, tag stack, EtherType and IP addresses.
fn same_addrs(a: &Seg, fa: &[u8], b: &Seg, fb: &[u8]) -> bool {
    a.l3 == b.l3 && a.src == b.src && a.dst == b.dst && fa[..a.l3] == fb[..b.l3]
}

/// Whether `seg` (frame `f`) continues `run` (first segment's frame `head`).
fn can_join(
    run: &Run,
    seg: &Seg,
    head: &[u8],
    f: &[u8],
    max_ip: usize,
    max_segs: u16,
) -> Result<(), EndReason> {
    let first = &run.first;
    if seg.seq != run.next_seq {
        return Err(EndReason::SeqGap);
    }
    let ident_ok = match (seg.family, seg.df) {
        (Family::V4, false) => seg.ident == first.ident.wrapping_add(run.segments),
        _ => true,
    };
    let same_ip = seg.tos == first.tos
        && seg.ttl == first.ttl
        && seg.flow_label == first.flow_label
        && seg.df == first.df
        && ident_ok;
    let same_tcp = seg.ack == first.ack
        && seg.window == first.window
        && seg.hdr_len - seg.l4 == first.hdr_len - first.l4
        && tcp::Packet::new_unchecked(&f[seg.l4..seg.hdr_len]).options()
            == tcp::Packet::new_unchecked(&head[first.l4..first.hdr_len]).options();
    if !(same_ip && same_tcp) {
        return Err(EndReason::HeaderMismatch);
    }
    let len = seg.payload_len();
    if len > run.gso_size {
        return Err(EndReason::Size);
    }
    if run.ip_len + len > max_ip || run.segments >= max_segs {
        return Err(EndReason::Limit);
    }
    Ok(())
}

/// The IPv4/IPv6 pseudo-header sum for an L4 length of `l4_len` bytes.
fn pseudo(seg: &Seg, l4_len: usize) -> u32 {
    let len = l4_len as u32;
    match seg.family {
        Family::V4 => checksum::pseudo_header_v4(
            (seg.src as u32).into(),
            (seg.dst as u32).into(),
            IpProtocol::Tcp,
            len,
        ),
        Family::V6 => checksum::pseudo_header_v6(
            core::net::Ipv6Addr::from_bits(seg.src),
            core::net::Ipv6Addr::from_bits(seg.dst),
            IpProtocol::Tcp,
            len,
        ),
    }
}

fn tcp_checksum_ok(seg: &Seg, f: &[u8]) -> bool {
    tcp::Packet::new_unchecked(&f[seg.l4..seg.l3_end])
        .verify_checksum(pseudo(seg, seg.l3_end - seg.l4))
}

/// Appends `seg`'s payload to the run's first buffer.
fn merge(run: &mut Run, head: &mut PacketBuf, seg: &Seg, pkt: &PacketBuf) {
    if run.segments == 1 {
        head.truncate(run.first.l3_end); // Ethernet padding
    }
    head.extend_from_slice(&pkt.frame()[seg.hdr_len..seg.l3_end]);
    let len = seg.payload_len();
    run.next_seq = run.next_seq.wrapping_add(len as u32);
    run.ip_len += len;
    run.segments += 1;
    run.psh = seg.psh;
}

/// Ends a run: a run of two segments or more becomes a super-frame; a run of one is left as
/// it came.
fn close(run: Run, out: &mut [PacketBuf], st: &mut GroStats) {
    if run.segments < 2 {
        st.passed[PassReason::Single as usize] += 1;
        return;
    }
    st.super_frames += 1;
    let first = &run.first;
    let pkt = &mut out[run.out];
    // The IP length changes: a layout recorded for the first segment no longer holds.
    pkt.clear_layout();
    let f = pkt.frame_mut();
    let l4_len = run.ip_len - (first.l4 - first.l3);
    let gso_type = match first.family {
        Family::V4 => {
            let mut ip = ipv4::Packet::new_unchecked(&mut f[first.l3..]);
            ip.set_total_len(run.ip_len as u16);
            ip.fill_checksum();
            GsoType::TcpV4.raw()
        }
        Family::V6 => {
            let mut ip = ipv6::Packet::new_unchecked(&mut f[first.l3..]);
            ip.set_payload_len((run.ip_len - ipv6::HEADER_LEN) as u16);
            GsoType::TcpV6.raw()
        }
    };
    let mut t = tcp::Packet::new_unchecked(&mut f[first.l4..]);
    if run.psh {
        t.set_flags(t.flags().union(Flags::PSH));
    }
    t.set_checksum(checksum::fold(pseudo(first, l4_len)));
    pkt.offload = OffloadMeta {
        flags: F_NEEDS_CSUM,
        gso_type,
        hdr_len: first.hdr_len as u16,
        gso_size: run.gso_size as u16,
        csum_start: first.l4 as u16,
        csum_offset: tcp::CHECKSUM_OFFSET as u16,
    };
}
