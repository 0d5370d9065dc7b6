//! `fdb add|append|replace|del MAC dev NAME dst IP` on a VXLAN port: edits the static remotes
//! in the port's spec (`crate::vxlan::VxlanSpec`); the engine copies them into the backend.

use super::*;
use crate::vxlan::VxlanFdbOp;
use std::net::Ipv4Addr;

impl Session {
    pub(super) fn vxlan_fdb(
        &mut self,
        op: VxlanFdbOp,
        mac: MacAddr,
        dev: &str,
        dst: Ipv4Addr,
    ) -> Result<(), ControlError> {
        let Some(PortSpec::Vxlan(spec)) = self.specs.get_mut(dev) else {
            return Err(if self.switch.exists(dev) {
                ControlError::Vxlan(format!(
                    "{dev} is not a vxlan port: \"dst\" names a remote VTEP of a vxlan port"
                ))
            } else {
                qbridge_bridge::ConfigError::NoSuchDevice(dev.to_string()).into()
            });
        };
        match spec.apply(dev, op, mac, dst) {
            // `apply` (-may-exist): an entry that is there already is not an error.
            Err(_)
                if self.may_exist && spec.remotes.iter().any(|r| r.mac == mac && r.dst == dst) =>
            {
                Ok(())
            }
            Err(e) if self.may_exist && op == VxlanFdbOp::Del => {
                let _ = e;
                Ok(())
            }
            r => r.map_err(ControlError::Vxlan),
        }
    }

    /// `fdb show`'s output `text` with the VXLAN ports' own entries after the bridge's
    /// (bridge-fdb's `self` entries with `dst`): of port `dev`, or of the ports of bridge
    /// `br`, or all. JSON: objects `{"mac","ifname","dst","flags":["self"],"state"}` appended
    /// to the array.
    pub(super) fn with_vxlan_fdb(
        &self,
        mut text: String,
        br: Option<&str>,
        dev: Option<&str>,
        out: OutputOptions,
    ) -> String {
        let mut lines = String::new();
        let mut objs = Vec::new();
        for (name, spec) in &self.specs {
            let PortSpec::Vxlan(v) = spec else { continue };
            if dev.is_some_and(|d| d != name) {
                continue;
            }
            if let Some(br) = br {
                let master = self
                    .switch
                    .port_id(name)
                    .ok()
                    .and_then(|id| self.switch.port_master(id))
                    .map(|b| self.switch.bridge_name(b));
                if master != Some(br) {
                    continue;
                }
            }
            let learned = self
                .status
                .get(name)
                .map(|st| st.vxlan_learned.as_slice())
                .unwrap_or_default();
            if out.json {
                objs.extend(crate::vxlan::fdb_json(name, v, learned));
            } else {
                lines.push_str(&crate::vxlan::fdb_lines(name, v, learned));
            }
        }
        if !out.json {
            text.push_str(&lines);
            return text;
        }
        if objs.is_empty() {
            return text;
        }
        // Spliced into the bridge entries' array, whose objects keep their keys' order.
        let body = text
            .trim_end()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim();
        let mut s = String::from("[");
        if !body.is_empty() {
            s.push_str(body);
            s.push(',');
        }
        let extra = render::to_json(&objs, out);
        s.push_str(
            extra
                .trim_end()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim(),
        );
        s.push_str("]\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &mut Session, line: &str) -> Result<String, ControlError> {
        s.execute_line(line, OutputOptions::default())
    }

    #[test]
    fn vxlan_port_remotes_show_and_running_config() {
        let mut s = Session::new();
        for l in [
            "link add br0 type bridge vlan_filtering 0",
            "link add vx0 type vxlan id 100 local 10.0.0.1 dstport 4789 nolearning",
            "link set dev vx0 master br0",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.3",
            "fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.3",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let j = s
            .execute_line(
                "fdb show dev vx0",
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap();
        assert!(
            j.starts_with(
                r#"[{"mac":"00:00:00:00:00:00","ifname":"vx0","dst":"10.0.0.2","flags":["self"],"state":"permanent"},"#
            ),
            "{j}"
        );
        let link = run(&mut s, "link show dev vx0").unwrap();
        assert!(
            link.starts_with(
                "vx0: vxlan id 100 local 10.0.0.1 dstport 4789 learning off master br0"
            ),
            "{link}"
        );
        let show = run(&mut s, "fdb show dev vx0").unwrap();
        assert!(
            show.ends_with(
                "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self permanent\n\
                 00:00:00:00:00:00 dev vx0 dst 10.0.0.3 self permanent\n\
                 02:00:00:00:00:01 dev vx0 dst 10.0.0.3 self permanent\n"
            ),
            "{show}"
        );
        assert!(run(&mut s, "fdb show br br0")
            .unwrap()
            .contains("dst 10.0.0.2"));
        // Errors name the port and the problem.
        let e = run(&mut s, "fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.2").unwrap_err();
        assert!(e.to_string().contains("use replace"), "{e}");
        let e = run(&mut s, "fdb append 00:00:00:00:00:00 dev br0 dst 10.0.0.2").unwrap_err();
        assert!(e.to_string().contains("not a vxlan port"), "{e}");
        let e = run(&mut s, "fdb append 02:00:00:00:00:01 dev vx0").unwrap_err();
        assert!(e.to_string().contains("dst IP"), "{e}");
        let e = run(&mut s, "link add vx1 type vxlan id 16777216 local 10.0.0.1").unwrap_err();
        assert!(e.to_string().contains("16777216"), "{e}");
        let e = run(&mut s, "link add vx1 type vxlan id 5 local fe80::1").unwrap_err();
        assert!(e.to_string().contains("IPv6"), "{e}");
        let e = run(&mut s, "link add vx1 type vxlan id 5").unwrap_err();
        assert!(e.to_string().contains("local"), "{e}");
        // The running configuration recreates it, and `apply` of it changes nothing.
        let rc = s.running_config();
        assert!(
            rc.contains(
                "type vxlan id 100 local 10.0.0.1 dstport 4789 learning off\n\
                 fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2\n\
                 fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.3\n\
                 fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.3\n"
            ),
            "{rc}"
        );
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        run(&mut s, "fdb del 00:00:00:00:00:00 dev vx0 dst 10.0.0.2").unwrap();
        assert!(!run(&mut s, "fdb show dev vx0")
            .unwrap()
            .contains("10.0.0.2"));
    }

    /// `dev` and `tos` (ip-link's words): parsed, shown (text and `-j`, under ip's keys
    /// `link` and `tos`), written to the running configuration, refused with reasons.
    #[test]
    fn vxlan_dev_and_tos() {
        let mut s = Session::new();
        for l in [
            "link add vx0 type vxlan id 100 local 10.0.0.1 dev ul tos 0x28",
            "link add vx1 type vxlan id 101 local 10.0.0.1 dsfield inherit dstport 4790",
            "link add vx2 type vxlan id 102 local 10.0.0.1 tos 184",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let link = run(&mut s, "link show dev vx0").unwrap();
        assert!(
            link.starts_with(
                "vx0: vxlan id 100 local 10.0.0.1 dev ul dstport 4789 tos 0x28 learning on"
            ),
            "{link}"
        );
        let j = s
            .execute_line(
                "link show dev vx1",
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap();
        assert!(j.contains(r#""tos":"inherit""#), "{j}");
        assert!(!j.contains(r#""link":"#), "{j}");
        let j = s
            .execute_line(
                "link show dev vx0",
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap();
        assert!(
            j.contains(r#""link":"ul""#) && j.contains(r#""tos":"0x28""#),
            "{j}"
        );
        let rc = s.running_config();
        for want in [
            "type vxlan id 100 local 10.0.0.1 dev ul dstport 4789 tos 0x28 learning on\n",
            "type vxlan id 101 local 10.0.0.1 dstport 4790 tos inherit learning on\n",
            "type vxlan id 102 local 10.0.0.1 dstport 4789 tos 0xb8 learning on\n",
        ] {
            assert!(rc.contains(want), "{want}\n{rc}");
        }
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        for (line, says) in [
            ("tos 0x29", "ECN bits are 0"),
            ("tos 1", "ECN bits are 0"),
            ("tos 256", "0-255"),
            ("tos cs1", "0-255"),
            ("dev a/b", "interface name"),
            ("dev abcdefghijklmnop", "interface name"),
            ("dev ul dev ul2", "twice"),
        ] {
            let e = run(
                &mut s,
                &format!("link add vx9 type vxlan id 9 local 10.0.0.1 {line}"),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
