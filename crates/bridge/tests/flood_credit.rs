//! The flood credit of a worker (`Forwarder::set_flood_credit`, issue 17 item 6): a flood to `k`
//! ports takes `k` copies of credit or is dropped as `flood_rate` on its ingress port; a frame
//! to one known port neither uses credit nor is dropped for it; without credit (`None`) there
//! is no bound.

mod common;

use common::{frame, mac};
use qbridge_bridge::{
    BridgeSettings, DropReason, Forwarder, Outputs, PortId, PortSettings, Switch,
};
use qbridge_packet::{Batch, PacketBuf};

/// A VLAN-unaware bridge of four ports; returns the switch and the port ids.
fn switch() -> (Switch, Vec<PortId>) {
    let mut sw = Switch::new();
    sw.add_bridge("br0", BridgeSettings::default()).unwrap();
    let b = sw.bridge_id("br0").unwrap();
    let ports = (0..4)
        .map(|i| {
            let id = sw
                .add_port(&format!("p{i}"), "mem", PortSettings::default())
                .unwrap();
            sw.set_master(id, Some(b)).unwrap();
            id
        })
        .collect();
    (sw, ports)
}

/// Frames out of each port after one batch of `frames` from port `from`.
fn send(sw: &mut Switch, w: &mut Forwarder, from: PortId, frames: &[Vec<u8>]) -> Vec<usize> {
    let plan = sw.plan();
    let mut rx = Batch::default();
    for f in frames {
        let mut p = PacketBuf::from_frame(f);
        p.port = from.0;
        rx.push(p);
    }
    let mut out = Outputs::new();
    w.process(&plan, 1, &mut rx, &mut out);
    out.ports.iter().map(|b| b.len()).collect()
}

#[test]
fn floods_pay_with_credit_known_unicast_never_does() {
    let (mut sw, p) = switch();
    let mut w = Forwarder::new(0);
    // p1's address is known: frames to it go to one port.
    send(&mut sw, &mut w, p[1], &[frame(mac(0xff), mac(1), &[], 60)]);
    let bcast = frame(qbridge_wire::MacAddr([0xff; 6]), mac(0), &[], 60);
    let to_p1 = frame(mac(1), mac(0), &[], 60);

    // 7 copies of credit: two broadcasts (3 copies each) pass, the third is dropped; the
    // unicast frames around them pass and cost nothing.
    w.set_flood_credit(Some(7));
    let frames = [
        bcast.clone(),
        to_p1.clone(),
        bcast.clone(),
        bcast.clone(),
        to_p1.clone(),
    ];
    let out = send(&mut sw, &mut w, p[0], &frames);
    assert_eq!(out, vec![0, 4, 2, 2]);
    assert_eq!(w.flood_credit(), Some(1));
    let drops = |sw: &Switch, id: PortId| sw.port_counters(id).drops;
    assert_eq!(drops(&sw, p[0])[DropReason::FloodRate as usize], 1);

    // No credit left for a flood: only known unicast gets through.
    let out = send(&mut sw, &mut w, p[0], &[bcast.clone(), to_p1.clone()]);
    assert_eq!(out, vec![0, 1, 0, 0]);
    assert_eq!(drops(&sw, p[0])[DropReason::FloodRate as usize], 2);

    // Without a bound: every flood.
    w.set_flood_credit(None);
    let out = send(&mut sw, &mut w, p[0], &vec![bcast; 100]);
    assert_eq!(out, vec![0, 100, 100, 100]);
    assert_eq!(drops(&sw, p[0])[DropReason::FloodRate as usize], 2);
}
