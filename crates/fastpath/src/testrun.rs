//! `BPF_PROG_TEST_RUN` for the exactness tests: a frame in, the program's verdict and the
//! frame as it would leave out, nothing sent.
#![allow(unsafe_code)]

use crate::maps::Miss;

/// What the program decided for one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forwarded to this interface.
    Hit { ifindex: u32 },
    /// Sent up, for this reason.
    Miss(Miss),
    /// Neither (a verdict the loader does not know: a bug).
    Other { retval: u32, cb: [u32; 5] },
}

/// One test run's outcome.
#[derive(Debug, Clone)]
pub struct TestRun {
    pub verdict: Verdict,
    /// The TC return code (`TC_ACT_*`).
    pub retval: u32,
    /// The frame as it leaves on a hit, the accelerated tag put back at offset 12 as the
    /// wire carries it; on a miss, the program's output bytes.
    pub frame: Vec<u8>,
    /// The kernel's mean time per run, in ns (`repeat` runs).
    pub ns_per_run: u32,
}

/// `union bpf_attr`'s test-run member.
#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `struct __sk_buff`, as 48 u32 words; the offsets (in words) test runs use.
const SKB_WORDS: usize = 48;
const SKB_IFINDEX: usize = 10;
const SKB_CB: usize = 12;
const SKB_GSO_SEGS: usize = 41;
const SKB_GSO_SIZE: usize = 44;

pub(crate) fn run(
    prog_fd: i32,
    frame: &[u8],
    ifindex: u32,
    gso: Option<(u16, u16)>,
    repeat: u32,
) -> std::io::Result<TestRun> {
    let mut ctx_in = [0u32; SKB_WORDS];
    ctx_in[SKB_IFINDEX] = ifindex;
    if let Some((size, segs)) = gso {
        ctx_in[SKB_GSO_SIZE] = u32::from(size);
        ctx_in[SKB_GSO_SEGS] = u32::from(segs);
    }
    let mut ctx_out = [0u32; SKB_WORDS];
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestAttr {
        prog_fd: prog_fd as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: repeat.max(1),
        ctx_size_in: std::mem::size_of_val(&ctx_in) as u32,
        ctx_size_out: std::mem::size_of_val(&ctx_out) as u32,
        ctx_in: ctx_in.as_ptr() as u64,
        ctx_out: ctx_out.as_mut_ptr() as u64,
        ..TestAttr::default()
    };
    // SAFETY: bpf(2) reads `attr` (its size passed) and the buffers it points to, all alive
    // and of the sizes given, and writes only into `out`, `ctx_out` and `attr`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestAttr,
            std::mem::size_of::<TestAttr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    out.truncate(attr.data_size_out as usize);
    let cb: [u32; 5] = ctx_out[SKB_CB..SKB_CB + 5].try_into().unwrap_or([0; 5]);
    let verdict = if cb[0] != 0 && cb[1] == 0 {
        if cb[3] & 0x10000 != 0 && out.len() >= 12 {
            let tpid = u16::from_be(cb[2] as u16);
            let tci = cb[3] as u16;
            let mut tag = [0u8; 4];
            tag[..2].copy_from_slice(&tpid.to_be_bytes());
            tag[2..].copy_from_slice(&tci.to_be_bytes());
            out.splice(12..12, tag);
        }
        Verdict::Hit { ifindex: cb[0] }
    } else if let Some(m) = cb[1].checked_sub(1).and_then(Miss::from_index) {
        Verdict::Miss(m)
    } else {
        Verdict::Other {
            retval: attr.retval,
            cb,
        }
    };
    Ok(TestRun {
        verdict,
        retval: attr.retval,
        frame: out,
        ns_per_run: attr.duration,
    })
}
