//! Captures on an interface written by `tcpdump -w`, decoded by Wireshark's `tshark`: the
//! VXLAN tests check the outer and inner headers with the dissectors the field uses, and that
//! no frame is malformed or carries a bad checksum.
//!
//! [`PcapCapture::start`] runs `tcpdump -w FILE` in a namespace (stopped by pid with SIGINT,
//! so the file is complete; also when dropped); [`decode`] runs `tshark -r FILE` twice: once for per-frame
//! fields (protocol chain, addresses, UDP ports, VNI, Ethernet sources), once with checksum
//! validation on for the protocols asked, listing every malformed frame and every frame with
//! an expert error (a bad checksum is one). `tshark` is installed by `scripts/test.sh`
//! (package `tshark`); [`have_tshark`] says whether it is here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ovs::find_program;
use super::Result;

/// Whether `tshark` is on this machine.
pub fn have_tshark() -> bool {
    find_program("tshark").is_some()
}

/// A running `tcpdump -w` in a namespace.
pub struct PcapCapture {
    child: Child,
    pub path: PathBuf,
}

impl PcapCapture {
    /// `ip netns exec NS tcpdump -i IFNAME -s 0 -U -w PATH FILTER…`; waits until tcpdump says
    /// it listens (up to 3 s).
    pub fn start(ns: &str, ifname: &str, path: &Path, filter: &[&str]) -> Result<PcapCapture> {
        let err = path.with_extension("err");
        let err_file = std::fs::File::create(&err).map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args([
                "netns", "exec", ns, "tcpdump", "-i", ifname, "-s", "0", "-U", "-w",
            ])
            .arg(path)
            .args(filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("tcpdump: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if std::fs::read_to_string(&err).is_ok_and(|s| s.contains("listening on")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(PcapCapture {
            child,
            path: path.to_owned(),
        })
    }

    /// Stops tcpdump (SIGINT: it flushes and closes the file) and returns the file's path.
    pub fn stop(mut self) -> PathBuf {
        self.interrupt();
        self.path.clone()
    }

    /// SIGINT to this tcpdump (by pid), up to 5 s for it to exit, then SIGKILL.
    fn interrupt(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test that panics before [`PcapCapture::stop`] still stops its tcpdump.
impl Drop for PcapCapture {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// One frame as tshark dissected it (outer and inner values in order, outer first).
#[derive(Clone, Debug, Default)]
pub struct Dissected {
    /// `frame.len`: bytes on the wire (a super-packet handed over unsegmented shows whole).
    pub len: usize,
    /// `frame.protocols`, e.g. `eth:ethertype:ip:udp:vxlan:eth:ethertype:arp`.
    pub protocols: String,
    pub ip_src: Vec<String>,
    pub udp_dstport: Vec<u16>,
    pub vni: Vec<u32>,
    pub eth_src: Vec<String>,
    /// `ip.dsfield`: each IPv4 header's DSCP and ECN byte.
    pub dsfield: Vec<u8>,
}

/// What tshark said about a capture.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    pub frames: Vec<Dissected>,
    /// One line per malformed frame or frame with an expert error, with tshark's summary.
    pub errors: Vec<String>,
}

impl Decoded {
    /// Frames whose protocol chain contains `chain`.
    pub fn count(&self, chain: &str) -> usize {
        self.frames
            .iter()
            .filter(|f| f.protocols.contains(chain))
            .count()
    }
}

fn tshark(args: &[&str]) -> Result<String> {
    let out = Command::new("tshark")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("tshark: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tshark {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Dissects `pcap`; `check_checksums` names the protocols whose checksums tshark validates
/// (`ip`, `udp`, `tcp`; ICMP's is always checked), for the `errors` list.
pub fn decode(pcap: &Path, check_checksums: &[&str]) -> Result<Decoded> {
    let file = pcap.to_string_lossy().into_owned();
    let fields = tshark(&[
        "-r",
        &file,
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "aggregator=,",
        "-e",
        "frame.len",
        "-e",
        "frame.protocols",
        "-e",
        "ip.src",
        "-e",
        "udp.dstport",
        "-e",
        "vxlan.vni",
        "-e",
        "eth.src",
        "-e",
        "ip.dsfield",
    ])?;
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let frames = fields
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            let get = |i: usize| c.get(i).copied().unwrap_or("");
            Dissected {
                len: get(0).parse().unwrap_or(0),
                protocols: get(1).to_owned(),
                ip_src: list(get(2)),
                udp_dstport: list(get(3)).iter().filter_map(|x| x.parse().ok()).collect(),
                vni: list(get(4)).iter().filter_map(|x| x.parse().ok()).collect(),
                eth_src: list(get(5)),
                dsfield: list(get(6))
                    .iter()
                    .filter_map(|x| {
                        let h = x.trim_start_matches("0x");
                        u8::from_str_radix(h, if h.len() < x.len() { 16 } else { 10 }).ok()
                    })
                    .collect(),
            }
        })
        .collect();
    let mut args: Vec<String> = vec!["-r".into(), file];
    for p in check_checksums {
        args.push("-o".into());
        args.push(format!("{p}.check_checksum:TRUE"));
    }
    args.push("-Y".into());
    args.push("_ws.malformed || _ws.expert.severity == \"Error\"".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let errors = tshark(&refs)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    Ok(Decoded { frames, errors })
}

/// What every VXLAN underlay capture of the tests must show: only VXLAN to UDP 4789 in VNI
/// `vni`, inner ARP (at least 2), ICMP (8) and TCP (`min_tcp`) frames, each `(inner source
/// MAC, outer source address)` of `senders` at least once, and no malformed frame or bad
/// checksum.
pub fn check_vxlan(d: &Decoded, vni: u32, senders: &[(&str, &str)], min_tcp: usize) {
    let vx = "eth:ethertype:ip:udp:vxlan:eth:ethertype:";
    assert!(d.count(&format!("{vx}arp")) >= 2, "{:#?}", d.frames);
    assert!(d.count(&format!("{vx}ip:icmp")) >= 8, "{:#?}", d.frames);
    assert!(
        d.count(&format!("{vx}ip:tcp")) >= min_tcp,
        "{} frames",
        d.frames.len()
    );
    for f in &d.frames {
        assert!(f.protocols.starts_with(vx), "{f:?}");
        assert_eq!(f.vni, [vni], "{f:?}");
        assert_eq!(f.udp_dstport.first(), Some(&4789), "{f:?}");
    }
    for (mac, outer) in senders {
        assert!(
            d.frames
                .iter()
                .any(|f| f.ip_src.first().map(String::as_str) == Some(*outer)
                    && f.eth_src
                        .get(1)
                        .is_some_and(|m| m.eq_ignore_ascii_case(mac))),
            "no frame of {mac} from VTEP {outer}"
        );
    }
    assert!(
        d.errors.is_empty(),
        "tshark: malformed or bad checksums:\n{}",
        d.errors.join("\n")
    );
}
