//! GRO on arbitrary batches: nothing may panic, the counters must add up, and every super-frame
//! GRO makes must carry consistent metadata and cut back (GSO) into segments whose checksums
//! verify.
//!
//! Input: byte 0 = `max_segments` (0: the default), byte 1 bit 0 = only 0x8100 is a tag; then
//! records `[kind][len: u16 BE][len bytes]`. `kind` bits 0-1 are the frame's offload flags
//! (`NEEDS_CSUM`, `DATA_VALID`); bit 3 points `NEEDS_CSUM` at the parsed TCP checksum; bit 2
//! makes the record a virtio-net header (legacy) + super-frame that is segmented first, its
//! segments entering the batch with the flags of bits 0-1 (so seeds are real segment trains).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qbridge_offload::{read_vnet_header, segment, Gro, GroLimits};
use qbridge_packet::{Batch, BufPool, PacketBuf};
use qbridge_wire::{ipv4, ipv6, parse_headers, tcp, virtio::HeaderKind, EtherType, Tpid};

include!("gro_oracle.rs");

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
