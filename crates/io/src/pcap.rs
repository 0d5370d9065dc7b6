//! Classic pcap files (the libpcap format, not pcapng): a reader and a writer.
//!
//! The reader accepts both byte orders and both timestamp resolutions (magic `a1b2c3d4`
//! microseconds, `a1b23c4d` nanoseconds) and hands out records with nanosecond timestamps. It
//! refuses captures whose link type is not Ethernet (`LINKTYPE_ETHERNET`, 1), since every
//! consumer in qbridge expects Ethernet frames, and it reports a file that ends inside a header
//! or a record as [`IoError::PcapTruncated`] rather than as a clean end. Every error names the
//! file.
//!
//! The writer always writes the most portable form: native little-endian, microsecond
//! resolution, Ethernet, snap length 262144 (what tcpdump writes).
//!
//! Written by hand rather than with the `pcap-file` crate: the format is two fixed headers, and
//! owning it gives errors that name the file and the offset, and no extra dependency.
//!
//! Cost: one buffered read or write per record; the reader allocates the record's `Vec` (pcap
//! replay is not the fast path). Single-threaded; no unsafe.

use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::IoError;

/// Who may read a file the daemon creates ([`PcapWriter::create_in`]): its owner only (mode
/// 0600), or also group `group` (0640; the daemon's `--socket-group`). Captured traffic is
/// never readable by every local user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileAccess {
    pub group: Option<u32>,
}

impl FileAccess {
    /// 0600, or 0640 with a group.
    pub fn mode(self) -> u32 {
        if self.group.is_some() {
            0o640
        } else {
            0o600
        }
    }
}

/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Snap length the writer declares (and the most bytes of a frame it stores).
pub const WRITER_SNAPLEN: u32 = 262_144;
/// Largest record the reader accepts, whatever the header's snap length says: a guard against
/// allocating gigabytes for a corrupt length field.
pub const MAX_RECORD_LEN: u32 = 16 * 1024 * 1024;

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// One captured frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapRecord {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The captured bytes (`incl_len` of them; may be shorter than the frame was on the wire).
    pub data: Vec<u8>,
}

/// Reads a classic pcap file record by record.
#[derive(Debug)]
pub struct PcapReader {
    path: PathBuf,
    input: BufReader<File>,
    swapped: bool,
    nanos: bool,
    snaplen: u32,
    /// Bytes consumed so far, for error messages.
    offset: u64,
}

impl PcapReader {
    /// Opens `path` and validates its file header.
    pub fn open(path: &Path) -> Result<PcapReader, IoError> {
        let file = File::open(path).map_err(|source| IoError::File {
            path: path.to_owned(),
            source,
        })?;
        let mut r = PcapReader {
            path: path.to_owned(),
            input: BufReader::with_capacity(64 * 1024, file),
            swapped: false,
            nanos: false,
            snaplen: 0,
            offset: 0,
        };
        let mut hdr = [0u8; FILE_HEADER_LEN];
        match r.read_full(&mut hdr)? {
            n if n == FILE_HEADER_LEN => {}
            n => {
                return Err(IoError::PcapTruncated {
                    path: r.path,
                    offset: n as u64,
                    what: "file header (24 bytes)",
                })
            }
        }
        let magic_le = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        (r.swapped, r.nanos) = match magic_le {
            MAGIC_MICROS => (false, false),
            MAGIC_NANOS => (false, true),
            m if m.swap_bytes() == MAGIC_MICROS => (true, false),
            m if m.swap_bytes() == MAGIC_NANOS => (true, true),
            m => {
                return Err(IoError::PcapFormat {
                    path: r.path,
                    reason: format!("bad magic number 0x{m:08x} (pcapng is not supported)"),
                })
            }
        };
        let (major, minor) = (r.u16_at(&hdr, 4), r.u16_at(&hdr, 6));
        if major != 2 {
            return Err(IoError::PcapFormat {
                path: r.path,
                reason: format!("unsupported version {major}.{minor}"),
            });
        }
        r.snaplen = r.u32_at(&hdr, 16);
        // The low 16 bits are the link type; the upper bits may carry FCS information.
        let linktype = r.u32_at(&hdr, 20) & 0xffff;
        if linktype != LINKTYPE_ETHERNET {
            return Err(IoError::PcapLinkType {
                path: r.path,
                linktype,
            });
        }
        Ok(r)
    }

    /// Whether the file stores nanosecond timestamps (else microseconds).
    pub fn is_nanos(&self) -> bool {
        self.nanos
    }

    /// Snap length declared in the file header.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next record, or `None` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<PcapRecord>, IoError> {
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        let start = self.offset;
        match self.read_full(&mut hdr)? {
            0 => return Ok(None),
            RECORD_HEADER_LEN => {}
            _ => {
                return Err(IoError::PcapTruncated {
                    path: self.path.clone(),
                    offset: start,
                    what: "record header (16 bytes)",
                })
            }
        }
        let sec = u64::from(self.u32_at(&hdr, 0));
        let frac = u64::from(self.u32_at(&hdr, 4));
        let incl_len = self.u32_at(&hdr, 8);
        if incl_len > MAX_RECORD_LEN {
            return Err(IoError::PcapFormat {
                path: self.path.clone(),
                reason: format!(
                    "record at byte {start} claims {incl_len} bytes (limit {MAX_RECORD_LEN})"
                ),
            });
        }
        let ts_ns = sec * 1_000_000_000 + if self.nanos { frac } else { frac * 1_000 };
        let mut data = vec![0u8; incl_len as usize];
        if self.read_full(&mut data)? != data.len() {
            return Err(IoError::PcapTruncated {
                path: self.path.clone(),
                offset: start,
                what: "record data shorter than its header says",
            });
        }
        Ok(Some(PcapRecord { ts_ns, data }))
    }

    /// Reads until `buf` is full or end of file; returns the bytes read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, IoError> {
        let mut n = 0;
        while n < buf.len() {
            match self.input.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(IoError::File {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    fn u16_at(&self, b: &[u8], at: usize) -> u16 {
        let v = u16::from_le_bytes([b[at], b[at + 1]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let v = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }
}

impl Iterator for PcapReader {
    type Item = Result<PcapRecord, IoError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// The writer's buffer: the largest record fits whole, so a record goes into the buffer whole or
/// not at all (see [`PcapWriter::write`]).
const WRITER_BUF_LEN: usize = WRITER_SNAPLEN as usize + RECORD_HEADER_LEN;

/// Writes a classic pcap file: little-endian, microseconds, Ethernet, snap length 262144.
#[derive(Debug)]
pub struct PcapWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl PcapWriter {
    /// Creates (or truncates) `path` and writes the file header.
    pub fn create(path: &Path) -> Result<PcapWriter, IoError> {
        let file = File::create(path).map_err(|source| IoError::File {
            path: path.to_owned(),
            source,
        })?;
        PcapWriter::with_file(path, file)
    }

    /// A writer on `file`, opened at `path`: writes the file header.
    fn with_file(path: &Path, file: File) -> Result<PcapWriter, IoError> {
        let mut w = PcapWriter {
            path: path.to_owned(),
            out: BufWriter::with_capacity(WRITER_BUF_LEN, file),
        };
        let mut hdr = [0u8; FILE_HEADER_LEN];
        hdr[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) stay 0.
        hdr[16..20].copy_from_slice(&WRITER_SNAPLEN.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.put(&hdr)?;
        Ok(w)
    }

    /// Appends one frame captured at `ts_ns` (nanoseconds since the epoch; stored rounded
    /// down to microseconds). A frame longer than the snap length is refused, not cut.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), IoError> {
        if frame.len() > WRITER_SNAPLEN as usize {
            return Err(IoError::FrameTooLong {
                len: frame.len(),
                limit: WRITER_SNAPLEN as usize,
            });
        }
        let sec = ts_ns / 1_000_000_000;
        let usec = (ts_ns % 1_000_000_000) / 1_000;
        // Classic pcap has 32-bit seconds; beyond 2106 the value wraps, as in libpcap.
        let len = frame.len() as u32;
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        hdr[0..4].copy_from_slice(&(sec as u32).to_le_bytes());
        hdr[4..8].copy_from_slice(&(usec as u32).to_le_bytes());
        hdr[8..12].copy_from_slice(&len.to_le_bytes());
        hdr[12..16].copy_from_slice(&len.to_le_bytes());
        // Whole records only: when the buffer has no room, it is written out first, and if
        // that fails (a full disk) nothing of this record is kept. What the file received of
        // the buffer stays in order with the rest, which a later flush writes: a file on a
        // disk that filled and had room again holds whole records (the frames in between
        // missing), never a torn one in the middle.
        if self.out.capacity() - self.out.buffer().len() < RECORD_HEADER_LEN + frame.len() {
            self.flush()?;
        }
        self.put(&hdr)?;
        self.put(frame)
    }

    /// Flushes and closes the file, reporting any error the buffered writes hid.
    pub fn finish(mut self) -> Result<(), IoError> {
        self.out.flush().map_err(|source| IoError::File {
            path: self.path.clone(),
            source,
        })?;
        self.out
            .get_ref()
            .sync_data()
            .map_err(|source| IoError::File {
                path: self.path.clone(),
                source,
            })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates file `file` in directory `dir` afresh, for a privileged daemon writing where
    /// others may have planted something: whatever is at `dir/file` (a file, a symbolic or a
    /// hard link) is unlinked, never written through, and the file is created with
    /// `O_CREAT | O_EXCL | O_NOFOLLOW` (one planted between the two steps makes the create
    /// fail, never write elsewhere), then given `access` (mode 0600, or group and 0640),
    /// whatever the umask. `file` must be a plain file name (no `/`).
    pub fn create_in(dir: &Path, file: &str, access: FileAccess) -> Result<PcapWriter, IoError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let path = dir.join(file);
        let err = |source| IoError::File {
            path: path.clone(),
            source,
        };
        if file.is_empty() || file.contains('/') || file == "." || file == ".." {
            return Err(err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "not a plain file name",
            )));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(access.mode())
            .open(&path)
            .map_err(err)?;
        if let Some(gid) = access.group {
            std::os::unix::fs::fchown(&f, None, Some(gid)).map_err(err)?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(access.mode()))
            .map_err(err)?;
        PcapWriter::with_file(&path, f)
    }

    /// Writes out what is buffered, so that a reader of the file sees every frame so far.
    pub fn flush(&mut self) -> Result<(), IoError> {
        self.out.flush().map_err(|source| IoError::File {
            path: self.path.clone(),
            source,
        })
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.out.write_all(bytes).map_err(|source| IoError::File {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A unique temporary path, removed on drop.
    struct TempPath(PathBuf);
    impl TempPath {
        fn new(tag: &str) -> TempPath {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            TempPath(
                std::env::temp_dir()
                    .join(format!("qbridge-io-{}-{tag}-{n}.pcap", std::process::id())),
            )
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn frame(n: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_add(n)).collect()
    }

    /// Builds a pcap file by hand: `be` selects big-endian fields, `nanos` the ns magic.
    fn handmade(be: bool, nanos: bool, linktype: u32, records: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let u32b = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let u16b = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut f = Vec::new();
        f.extend(u32b(if nanos { MAGIC_NANOS } else { MAGIC_MICROS }));
        f.extend(u16b(2));
        f.extend(u16b(4));
        f.extend(u32b(0));
        f.extend(u32b(0));
        f.extend(u32b(65535));
        f.extend(u32b(linktype));
        for (sec, frac, data) in records {
            f.extend(u32b(*sec));
            f.extend(u32b(*frac));
            f.extend(u32b(data.len() as u32));
            f.extend(u32b(data.len() as u32));
            f.extend_from_slice(data);
        }
        f
    }

    fn read_all(path: &Path) -> Result<Vec<PcapRecord>, IoError> {
        let mut r = PcapReader::open(path)?;
        let mut v = Vec::new();
        while let Some(rec) = r.next_record()? {
            v.push(rec);
        }
        Ok(v)
    }

    #[test]
    fn round_trip() {
        let p = TempPath::new("rt");
        let frames = [frame(1, 60), frame(2, 1522), frame(3, 9000), Vec::new()];
        let times = [
            1_700_000_000_123_456_789u64,
            1_700_000_001_000_000_000,
            5,
            999,
        ];
        let mut w = PcapWriter::create(&p.0).unwrap();
        for (t, f) in times.iter().zip(&frames) {
            w.write(*t, f).unwrap();
        }
        w.finish().unwrap();
        let got = read_all(&p.0).unwrap();
        assert_eq!(got.len(), frames.len());
        for ((rec, t), f) in got.iter().zip(times).zip(&frames) {
            assert_eq!(&rec.data, f);
            // Microsecond resolution: nanoseconds are truncated.
            assert_eq!(rec.ts_ns, t / 1000 * 1000);
        }
        let r = PcapReader::open(&p.0).unwrap();
        assert!(!r.is_nanos());
        assert_eq!(r.snaplen(), WRITER_SNAPLEN);
    }

    #[test]
    fn writer_refuses_oversize_frame() {
        let p = TempPath::new("big");
        let mut w = PcapWriter::create(&p.0).unwrap();
        let e = w
            .write(0, &vec![0; WRITER_SNAPLEN as usize + 1])
            .unwrap_err();
        assert!(matches!(e, IoError::FrameTooLong { .. }), "{e}");
    }

    #[test]
    fn byte_swapped_micros() {
        let p = TempPath::new("be");
        let a = frame(7, 64);
        let b = frame(8, 100);
        std::fs::write(
            &p.0,
            handmade(true, false, 1, &[(10, 20, &a), (11, 999_999, &b)]),
        )
        .unwrap();
        let got = read_all(&p.0).unwrap();
        assert_eq!(
            got,
            vec![
                PcapRecord {
                    ts_ns: 10_000_020_000,
                    data: a
                },
                PcapRecord {
                    ts_ns: 11_999_999_000,
                    data: b
                },
            ]
        );
    }

    #[test]
    fn nanosecond_resolution_both_orders() {
        for be in [false, true] {
            let p = TempPath::new("ns");
            let a = frame(9, 64);
            std::fs::write(&p.0, handmade(be, true, 1, &[(3, 123_456_789, &a)])).unwrap();
            let r = PcapReader::open(&p.0).unwrap();
            assert!(r.is_nanos());
            let got: Vec<_> = r.collect::<Result<_, _>>().unwrap();
            assert_eq!(
                got,
                vec![PcapRecord {
                    ts_ns: 3_123_456_789,
                    data: a
                }]
            );
        }
    }

    #[test]
    fn refuses_other_link_types_naming_file_and_type() {
        let p = TempPath::new("lt");
        std::fs::write(&p.0, handmade(false, false, 113, &[])).unwrap();
        let e = PcapReader::open(&p.0).unwrap_err();
        assert!(matches!(e, IoError::PcapLinkType { linktype: 113, .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("113") && msg.contains(&*p.0.to_string_lossy()),
            "{msg}"
        );
    }

    #[test]
    fn truncated_files_are_errors() {
        let a = frame(1, 64);
        let full = handmade(false, false, 1, &[(1, 2, &a)]);
        // Inside the file header, inside the record header, inside the record data.
        for cut in [10, FILE_HEADER_LEN + 5, full.len() - 1] {
            let p = TempPath::new("tr");
            std::fs::write(&p.0, &full[..cut]).unwrap();
            let e = read_all(&p.0).unwrap_err();
            assert!(matches!(e, IoError::PcapTruncated { .. }), "cut {cut}: {e}");
            assert!(e.to_string().contains(&*p.0.to_string_lossy()));
        }
        // A header alone is a valid, empty capture.
        let p = TempPath::new("empty");
        std::fs::write(&p.0, &full[..FILE_HEADER_LEN]).unwrap();
        assert!(read_all(&p.0).unwrap().is_empty());
    }

    #[test]
    fn bad_magic_and_missing_file() {
        let p = TempPath::new("magic");
        std::fs::write(
            &p.0,
            [0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0].repeat(2),
        )
        .unwrap();
        let e = PcapReader::open(&p.0).unwrap_err();
        assert!(matches!(e, IoError::PcapFormat { .. }), "{e}");
        let missing = TempPath::new("missing");
        assert!(matches!(
            PcapReader::open(&missing.0),
            Err(IoError::File { .. })
        ));
    }
}
