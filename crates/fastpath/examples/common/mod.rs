//! What the cost examples (`scale`, `vlans`) share: their MACs, the one port on the loopback
//! interface, FDB entries and the 802.1Q flow the daemon would install for a VLAN.
#![allow(dead_code)]

use qbridge_fastpath::*;

/// MAC number `i` (02:00 and `i`'s four bytes).
pub fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// Port 1 on the loopback interface (a test run needs only an ifindex), enabled, and the
/// configuration of generation 1; returns the ifindex.
pub fn loopback_port(fp: &mut FastPath) -> u32 {
    let lo = 1;
    fp.set_port(
        lo,
        Port {
            index: 1,
            flags: PORT_ENABLED,
            ..Port::default()
        },
    )
    .unwrap();
    fp.set_config(Config {
        generation: 1,
        upcall_ifindex: 0,
        trace_ifindex: 0,
    })
    .unwrap();
    lo
}

/// MAC `mac` of bridge 0's FID `fid` on port `port`, version 0; `Err` when the map is full.
pub fn set_fdb(w: &MapWriter, fid: u16, mac: [u8; 6], port: u32) -> std::io::Result<()> {
    w.set_fdb(
        &FdbKey {
            bridge: 0,
            fid,
            mac,
            pad: 0,
        },
        &FdbEntry {
            port,
            version: 0,
            last_seen_ns: 0,
        },
    )
}

/// The flow of generation 1 for IPv4 frames of VLAN `vid` (an 802.1Q tag) from port 1 to
/// `dst`: to `out_ifindex` (port 2) in FID `vid`, the same tag out; one hop of `hop_flags`.
pub fn vlan_flow(vid: u16, dst: [u8; 6], out_ifindex: u32, hop_flags: u8) -> (FlowKey, FlowAction) {
    let key = FlowKey {
        in_port: 1,
        tpid_be: [0x8100u16.to_be(), 0],
        tci_be: [vid.to_be(), 0],
        dst,
        ntags: 1,
        ethertype_be: 0x0800u16.to_be(),
        ..FlowKey::default()
    };
    let mut action = FlowAction {
        generation: 1,
        out_ifindex,
        min_len: 14,
        max_len: 1522,
        push_n: 1,
        n_hops: 1,
        push_tpid_be: [0x8100u16.to_be(), 0],
        push_tci_be: [vid.to_be(), 0],
        ..FlowAction::default()
    };
    action.hops[0] = Hop {
        in_port: 1,
        out_port: 2,
        fid: vid,
        vlan_slot: vid,
        flags: hop_flags,
        in_tags: 1,
        out_tags: 1,
        ..Hop::default()
    };
    (key, action)
}
