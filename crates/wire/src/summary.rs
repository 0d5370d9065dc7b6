//! One line per frame, as an operator reads it: `qbridge trace`, the drop watch and the demo
//! print frames with it.
//!
//! `02:00:00:00:00:01 > 02:00:00:00:00:02, 88a8 vid 100 / 8100 vid 10 pcp 3 / IPv4 TCP
//! 10.0.0.1:40000 > 10.0.0.2:80, 64 bytes`. Tags are read through the well-known TPIDs and any
//! the caller names (a port's own TPID, such as 0x9999); PCP and DEI are shown when not 0.

use crate::{ip::Protocol, ipv4, ipv6, parse_headers, tcp, udp, EtherType, MacAddr, Tpid};
use std::fmt::Write;

/// The frame's tags, outermost first, read through the well-known TPIDs and `also`: `8100 vid
/// 10 / 88a8 vid 100 pcp 5 dei 1`, or `untagged`.
pub fn tags(frame: &[u8], also: &[u16]) -> String {
    let mut parts = Vec::new();
    let mut at = 12;
    while let Some(b) = frame.get(at..at + 4) {
        let tpid = u16::from_be_bytes([b[0], b[1]]);
        if !(Tpid(tpid).is_well_known() || also.contains(&tpid)) {
            break;
        }
        let tci = u16::from_be_bytes([b[2], b[3]]);
        let mut s = format!("{tpid:04x} vid {}", tci & 0x0fff);
        if tci >> 13 != 0 {
            let _ = write!(s, " pcp {}", tci >> 13);
        }
        if tci & 0x1000 != 0 {
            s.push_str(" dei 1");
        }
        parts.push(s);
        at += 4;
    }
    if parts.is_empty() {
        "untagged".into()
    } else {
        parts.join(" / ")
    }
}

/// What the frame carries behind its tags: `IPv4 TCP 10.0.0.1:1 > 10.0.0.2:2`, `IPv6 UDP
/// [2001:db8::1]:1 > [2001:db8::2]:2`, `IPv4 ICMP echo request 10.0.0.1 > 10.0.0.2`, `ARP
/// request who-has 10.0.0.2 tell 10.0.0.1`, `ethertype 0x88cc`, or `unparsed`.
pub fn payload(frame: &[u8], also: &[u16]) -> String {
    let Ok(h) = parse_headers(frame, |t| t.is_well_known() || also.contains(&t.0)) else {
        return "unparsed".into();
    };
    let l3 = frame.get(h.l3_offset..).unwrap_or(&[]);
    let l4 = h.l4_offset.and_then(|o| frame.get(o..)).unwrap_or(&[]);
    let ports = match h.l4_proto {
        Some(Protocol::Tcp) => tcp::Packet::new_checked(l4)
            .ok()
            .map(|t| (t.src_port(), t.dst_port())),
        Some(Protocol::Udp) => udp::Packet::new_checked(l4)
            .ok()
            .map(|u| (u.src_port(), u.dst_port())),
        _ => None,
    };
    let (family, src, dst) = if h.is_ipv4() {
        match ipv4::Packet::new_checked(l3) {
            Ok(ip) => ("IPv4", ip.src_addr().to_string(), ip.dst_addr().to_string()),
            Err(_) => return "IPv4 (cut short)".into(),
        }
    } else if h.is_ipv6() {
        match ipv6::Packet::new_checked(l3) {
            Ok(ip) => ("IPv6", ip.src_addr().to_string(), ip.dst_addr().to_string()),
            Err(_) => return "IPv6 (cut short)".into(),
        }
    } else if h.ethertype == EtherType::Arp {
        return arp(l3);
    } else {
        return format!("ethertype 0x{:04x}", u16::from(h.ethertype));
    };
    let bracket = |a: &str| {
        if family == "IPv6" {
            format!("[{a}]")
        } else {
            a.to_string()
        }
    };
    match (h.l4_proto, ports) {
        (Some(Protocol::Tcp), Some((sp, dp))) => format!(
            "{family} TCP {}:{sp} > {}:{dp}",
            bracket(&src),
            bracket(&dst)
        ),
        (Some(Protocol::Udp), Some((sp, dp))) => format!(
            "{family} UDP {}:{sp} > {}:{dp}",
            bracket(&src),
            bracket(&dst)
        ),
        (Some(Protocol::Icmp), _) | (Some(Protocol::Icmpv6), _) => {
            let kind = match (family, l4.first()) {
                ("IPv4", Some(8)) | ("IPv6", Some(128)) => "echo request",
                ("IPv4", Some(0)) | ("IPv6", Some(129)) => "echo reply",
                ("IPv6", Some(135)) => "neighbour solicitation",
                ("IPv6", Some(136)) => "neighbour advertisement",
                _ => "other",
            };
            let name = if family == "IPv4" { "ICMP" } else { "ICMPv6" };
            format!("{family} {name} {kind} {src} > {dst}")
        }
        (p, _) => {
            let p = p.map_or(0, u8::from);
            format!("{family} proto {p} {src} > {dst}")
        }
    }
}

fn arp(b: &[u8]) -> String {
    if b.len() < 28 || b[0..2] != [0, 1] || b[2..4] != [8, 0] {
        return "ARP".into();
    }
    let ip = |o: usize| std::net::Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]);
    match u16::from_be_bytes([b[6], b[7]]) {
        1 => format!("ARP request who-has {} tell {}", ip(24), ip(14)),
        2 => format!(
            "ARP reply {} is-at {}",
            ip(14),
            MacAddr(b[8..14].try_into().unwrap_or([0; 6]))
        ),
        op => format!("ARP op {op}"),
    }
}

/// The whole line: addresses, tags, payload and length.
pub fn describe(frame: &[u8], also: &[u16]) -> String {
    if frame.len() < 14 {
        return format!("runt, {} bytes", frame.len());
    }
    let mac = |o: usize| MacAddr(frame[o..o + 6].try_into().unwrap_or([0; 6]));
    format!(
        "{} > {}, {} / {}, {} bytes",
        mac(6),
        mac(0),
        tags(frame, also),
        payload(frame, also),
        frame.len()
    )
}

/// `hex` of a frame, 16 bytes a line with its offset (tcpdump's `-xx` layout), each line
/// prefixed by `indent`.
pub fn hex_lines(frame: &[u8], indent: &str) -> String {
    let mut s = String::new();
    for (i, chunk) in frame.chunks(16).enumerate() {
        let _ = write!(s, "{indent}{:04x} ", i * 16);
        for (j, b) in chunk.iter().enumerate() {
            if j % 2 == 0 {
                s.push(' ');
            }
            let _ = write!(s, "{b:02x}");
        }
        s.push('\n');
    }
    s
}

/// The frame as one lowercase hex string (JSON, and `trace hex …` reads it back).
pub fn hex(frame: &[u8]) -> String {
    let mut s = String::with_capacity(frame.len() * 2);
    for b in frame {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tags: &[(u16, u16)], ethertype: u16, l3: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for (t, tci) in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    #[test]
    fn tags_payload_and_addresses_in_one_line() {
        let mut ip = vec![
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend_from_slice(&[0x9c, 0x40, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 2, 0, 0]);
        ip.extend_from_slice(&[0; 4]);
        let f = frame(&[(0x88a8, 100), (0x8100, 0x600a)], 0x0800, &ip);
        assert_eq!(
            describe(&f, &[]),
            "02:00:00:00:00:01 > 02:00:00:00:00:02, 88a8 vid 100 / 8100 vid 10 pcp 3 / \
             IPv4 TCP 10.0.0.1:40000 > 10.0.0.2:80, 62 bytes"
        );
        // A TPID that is not well known is a tag only when named.
        let f = frame(&[(0x9999, 0x1007)], 0x88cc, &[0; 46]);
        assert_eq!(tags(&f, &[]), "untagged");
        assert_eq!(tags(&f, &[0x9999]), "9999 vid 7 dei 1");
        assert_eq!(payload(&f, &[0x9999]), "ethertype 0x88cc");
    }

    #[test]
    fn arp_icmp_and_short_frames() {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1];
        a.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
        let f = frame(&[], 0x0806, &a);
        assert_eq!(
            payload(&f, &[]),
            "ARP request who-has 10.0.0.2 tell 10.0.0.1"
        );
        let icmp = [
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 8, 0, 0, 0, 0, 0, 0,
            0,
        ];
        let f = frame(&[], 0x0800, &icmp);
        assert_eq!(
            payload(&f, &[]),
            "IPv4 ICMP echo request 10.0.0.1 > 10.0.0.2"
        );
        assert_eq!(describe(&[1, 2, 3], &[]), "runt, 3 bytes");
        assert_eq!(hex(&[0xab, 1]), "ab01");
        assert_eq!(hex_lines(&[0xab, 1, 2], "  "), "  0000  ab01 02\n");
    }
}
