//! `fdb add|append|replace|del MAC dev NAME dst IP [vni N]` on a VXLAN port: edits the static
//! remotes in the port's spec (`crate::vxlan::VxlanSpec`); `vlan add|del … tunnel_info id N`
//! and `vlan tunnelshow`: an external port's VLAN ↔ VNI map, also in the spec. The engine
//! copies both into the backend's table.

use super::*;
use crate::vxlan::{RemoteOrigin, VxlanFdbOp};
use std::net::IpAddr;

impl Session {
    pub(super) fn vxlan_fdb(
        &mut self,
        op: VxlanFdbOp,
        mac: MacAddr,
        dev: &str,
        dst: IpAddr,
        vni: Option<u32>,
        origin: RemoteOrigin,
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
        let key = spec.entry_vni(dev, vni).map_err(ControlError::Vxlan)?;
        // vxl88 (decision 88): `add` of a MAC the port learned is refused, as the kernel's
        // vxlan refuses it (`File exists`); `replace` makes it static.
        if op == VxlanFdbOp::Add && !mac.is_zero() && !self.may_exist {
            if let Some(&(_, _, at)) = self.status.get(dev).and_then(|st| {
                st.vxlan_learned
                    .iter()
                    .find(|&&(v, m, _)| v == key && m == mac)
            }) {
                return Err(ControlError::Vxlan(format!(
                    "vxlan port {dev}: {mac} has a VTEP already (learned, {at}): use replace \
                     to make it static"
                )));
            }
        }
        let Some(PortSpec::Vxlan(spec)) = self.specs.get_mut(dev) else {
            return Ok(());
        };
        let r = spec.apply_from(dev, op, mac, dst, vni, origin);
        let there = spec.remotes.contains(key, mac, dst);
        // vxl88 (decision 88): `del … dst IP` of a learned entry naming that VTEP.
        if r.is_err()
            && op == VxlanFdbOp::Del
            && self.vxl88_forget_learned(dev, Some(key), mac, Some(dst))
        {
            return Ok(());
        }
        match r {
            // `apply` (-may-exist): an entry that is there already is not an error.
            Err(_) if self.may_exist && there => Ok(()),
            Err(e) if self.may_exist && op == VxlanFdbOp::Del => {
                let _ = e;
                Ok(())
            }
            r => r.map_err(ControlError::Vxlan),
        }
    }

    /// vxl88 (decision 88): `fdb del MAC dev VXLAN [vni N] [vlan V] [self] [master]`: with
    /// `own` the port's own entries of MAC (static or learned; all-zeros MAC: the whole flood
    /// list) in VNI N (or the port's `id`; on an external port without `vni`, every VNI),
    /// with `bridge` the bridge's entry of MAC on the port. An error if neither removed one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn vxl88_del(
        &mut self,
        mac: MacAddr,
        dev: &str,
        vlan: Option<u16>,
        inner_vlan: Option<u16>,
        vni: Option<u32>,
        own: bool,
        bridge: bool,
    ) -> Result<(), ControlError> {
        let mut found = false;
        // Checked before anything changes: a refused command changes nothing.
        if own {
            self.vxl88_own_key(dev, vni)?;
        } else if vni.is_some() {
            return Err(ControlError::Vxlan(format!(
                "vxlan port {dev}: \"vni\" names the port's own entry, not the bridge's \
                 (\"master\")"
            )));
        }
        let id = self.switch.port_id(dev)?;
        let in_bridge = self.switch.port_master(id).is_some();
        let mut bridge_err = None;
        // The all-zeros MAC is the port's flood list, never a bridge entry (and the FDB's
        // table must not be asked for key 0); a port in no bridge has only its own entries
        // (`master` alone on it is refused, as the kernel refuses it).
        if bridge && !mac.is_zero() && (in_bridge || !own) {
            let r = match (vlan, inner_vlan) {
                (Some(v), Some(c)) => self.switch.fdb_del_inner(mac, id, v.into(), c.into()),
                _ => self.switch.fdb_del(mac, id, vlan.map(u32::from)),
            };
            match r {
                Ok(_) => found = true,
                Err(
                    e @ (qbridge_bridge::ConfigError::NoSuchFdbEntry { .. }
                    | qbridge_bridge::ConfigError::NoSuchInnerFdbEntry { .. }),
                ) => bridge_err = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        if own {
            found |= self.vxl88_del_own(dev, mac, vni)?;
        }
        if found || self.may_exist {
            return Ok(());
        }
        Err(match bridge_err {
            Some(e) if !own => e.into(),
            _ => ControlError::Vxlan(format!(
                "vxlan port {dev}: no entry {mac}{}",
                if bridge {
                    " (neither the port's own nor the bridge's)"
                } else {
                    ""
                }
            )),
        })
    }

    /// vxl88: removes VXLAN port `dev`'s own entries of `mac` in VNI `vni` (see
    /// [`Session::vxl88_del`]); whether there were any.
    fn vxl88_del_own(
        &mut self,
        dev: &str,
        mac: MacAddr,
        vni: Option<u32>,
    ) -> Result<bool, ControlError> {
        let key = self.vxl88_own_key(dev, vni)?;
        let Some(PortSpec::Vxlan(spec)) = self.specs.get_mut(dev) else {
            return Ok(false);
        };
        // rmt92 (decision 92): by the index when the VNI is known.
        let statics = spec.remotes.remove_mac(mac, key);
        Ok(self.vxl88_forget_learned(dev, key, mac, None) || statics)
    }

    /// vxl88: the VNI of VXLAN port `dev`'s own entries `vni` names (the port's `id` without
    /// it; `None`: every VNI, an external port without `vni`), or why it names none.
    fn vxl88_own_key(&self, dev: &str, vni: Option<u32>) -> Result<Option<u32>, ControlError> {
        match self.specs.get(dev) {
            Some(PortSpec::Vxlan(spec)) if spec.external && vni.is_none() => Ok(None),
            Some(PortSpec::Vxlan(spec)) => spec
                .entry_vni(dev, vni)
                .map(Some)
                .map_err(ControlError::Vxlan),
            _ => Ok(None),
        }
    }

    /// vxl88: the learned entries of `mac` on VXLAN port `dev` (in VNI `key`, at VTEP `dst`
    /// when given), as the daemon last reported them, are queued for the engine to remove
    /// from the port's table (and gone from what `fdb show` prints); whether there were any.
    fn vxl88_forget_learned(
        &mut self,
        dev: &str,
        key: Option<u32>,
        mac: MacAddr,
        dst: Option<IpAddr>,
    ) -> bool {
        if mac.is_zero() {
            return false;
        }
        let Some(st) = self.status.get_mut(dev) else {
            return false;
        };
        let hit = |&(v, m, d): &crate::vxlan::Learned| {
            m == mac && key.is_none_or(|k| k == v) && dst.is_none_or(|x| x == d)
        };
        let gone: Vec<_> = st
            .vxlan_learned
            .iter()
            .filter(|e| hit(e))
            .copied()
            .collect();
        if gone.is_empty() {
            return false;
        }
        st.vxlan_learned.retain(|e| !hit(e));
        self.vxl88_forget
            .entry(dev.to_string())
            .or_default()
            .extend(gone);
        true
    }

    /// vxl88 (decision 88): `fdb flush dev VXLAN self [KIND AND FLAG WORDS]`: the port's
    /// own entries the words select, as the kernel's vxlan reads them: learned entries are
    /// dynamic (the engine empties them), static entries and flood lists permanent (none is
    /// `static`, `sticky`; a control plane's are `extern_learn`, the operator's
    /// `added_by_user`).
    pub(super) fn vxl88_flush(
        &mut self,
        dev: &str,
        which: &qbridge_bridge::FdbFlushMatch,
        permanent: bool,
    ) {
        let flag_ok = |ext: bool, by_user: bool| {
            which.sticky != Some(true)
                && which.extern_learn.is_none_or(|e| e == ext)
                && which.added_by_user.is_none_or(|u| u == by_user)
        };
        if which.dynamic && flag_ok(false, false) {
            *self.vxlan_flushes.entry(dev.to_string()).or_default() += 1;
            if let Some(st) = self.status.get_mut(dev) {
                st.vxlan_learned.clear();
            }
        }
        if !permanent {
            return;
        }
        if let Some(PortSpec::Vxlan(spec)) = self.specs.get_mut(dev) {
            spec.remotes.retain(|r| {
                let ext = r.origin == RemoteOrigin::ExternLearn;
                !flag_ok(ext, !ext)
            });
        }
    }

    /// vxl88: the learned entries `fdb del` removed from VXLAN port `name` since the last
    /// call (the engine takes them out of the port's table before the command answers).
    pub fn take_vxlan_forgets(&mut self, name: &str) -> Vec<crate::vxlan::Learned> {
        self.vxl88_forget.remove(name).unwrap_or_default()
    }

    /// VXLAN port `dev`'s spec, or why there is none.
    fn vxlan_spec_mut(&mut self, dev: &str) -> Result<&mut crate::vxlan::VxlanSpec, ControlError> {
        match self.specs.get_mut(dev) {
            Some(PortSpec::Vxlan(spec)) => Ok(spec),
            _ if self.switch.exists(dev) => Err(ControlError::Vxlan(format!(
                "{dev} is not a vxlan port: tunnel_info maps VLANs to VNIs on an external vxlan \
                 port"
            ))),
            _ => Err(qbridge_bridge::ConfigError::NoSuchDevice(dev.to_string()).into()),
        }
    }

    /// `vlan add vid V[-V2] dev NAME tunnel_info id N[-M]`: each VID must be a member of the
    /// port that leaves tagged (the port removes the tag it reads the VLAN from).
    pub(super) fn vxlan_tunnel_add(
        &mut self,
        dev: &str,
        vids: VidRange,
        vnis: (u32, u32),
    ) -> Result<(), ControlError> {
        let spec = self.vxlan_spec_mut(dev)?;
        if !spec.external {
            return Err(ControlError::Vxlan(format!(
                "vxlan port {dev} has one VNI (id {}): tunnel_info maps VLANs on a port made \
                 with external",
                spec.vni
            )));
        }
        let id = self.switch.port_id(dev)?;
        for vid in vids.start..=vids.end {
            match self.switch.vlan_membership(id, vid) {
                None => {
                    return Err(ControlError::Vxlan(format!(
                        "vid {vid} is not a VLAN of {dev}: vlan add vid {vid} dev {dev} first"
                    )))
                }
                Some((_, true)) => {
                    return Err(ControlError::Vxlan(format!(
                        "vid {vid} leaves {dev} untagged: a tunnel VLAN must be tagged on the \
                         port (its tag selects the VNI, and is removed)"
                    )))
                }
                Some(_) => {}
            }
        }
        let may_exist = self.may_exist;
        let spec = self.vxlan_spec_mut(dev)?;
        match spec.tunnel_add(dev, (vids.start, vids.end), vnis) {
            Err(_)
                if may_exist
                    && (vids.start..=vids.end)
                        .zip(vnis.0..)
                        .all(|t| spec.tunnels.contains(&t)) =>
            {
                Ok(())
            }
            r => r.map_err(ControlError::Vxlan),
        }
    }

    /// `vlan del vid V[-V2] dev NAME tunnel_info [id N[-M]]`.
    pub(super) fn vxlan_tunnel_del(
        &mut self,
        dev: &str,
        vids: VidRange,
        vnis: Option<(u32, u32)>,
    ) -> Result<(), ControlError> {
        let may_exist = self.may_exist;
        let spec = self.vxlan_spec_mut(dev)?;
        match spec.tunnel_del(dev, (vids.start, vids.end), vnis) {
            Err(_) if may_exist => {
                spec.tunnels.retain(|t| t.0 < vids.start || t.0 > vids.end);
                Ok(())
            }
            r => r.map_err(ControlError::Vxlan),
        }
    }

    /// `vlan tunnelshow [dev NAME]`: the external VXLAN ports' maps (text or `-j`).
    pub(super) fn vxlan_tunnelshow(
        &self,
        dev: Option<&str>,
        out: OutputOptions,
    ) -> Result<String, ControlError> {
        if let Some(d) = dev {
            if !self.switch.exists(d) {
                return Err(qbridge_bridge::ConfigError::NoSuchDevice(d.to_string()).into());
            }
        }
        let ports: Vec<(&str, &crate::vxlan::VxlanSpec)> = self
            .specs
            .iter()
            .filter_map(|(n, s)| match s {
                PortSpec::Vxlan(v) if v.external && dev.is_none_or(|d| d == n) => {
                    Some((n.as_str(), &**v))
                }
                _ => None,
            })
            .collect();
        Ok(if out.json {
            render::to_json(&crate::vxlan::tunnelshow_json(&ports), out)
        } else {
            crate::vxlan::tunnelshow_text(&ports)
        })
    }

    /// `vni add|del dev NAME vni N[-M]`, `vni show [dev NAME]`: a `vnifilter` port's list.
    pub(super) fn vni_command(
        &mut self,
        cmd: &VniCommand,
        out: OutputOptions,
    ) -> Result<String, ControlError> {
        let may_exist = self.may_exist;
        let (dev, vnis, add) = match cmd {
            VniCommand::Show { dev } => {
                if let Some(d) = dev {
                    if !self.switch.exists(d) {
                        return Err(qbridge_bridge::ConfigError::NoSuchDevice(d.to_string()).into());
                    }
                }
                let ports: Vec<(&str, &crate::vxlan::VxlanSpec)> = self
                    .specs
                    .iter()
                    .filter_map(|(n, s)| match s {
                        PortSpec::Vxlan(v)
                            if v.vnifilter && dev.as_deref().is_none_or(|d| d == n) =>
                        {
                            Some((n.as_str(), &**v))
                        }
                        _ => None,
                    })
                    .collect();
                return Ok(if out.json {
                    render::to_json(&crate::vxlan::vni_show_json(&ports), out)
                } else {
                    crate::vxlan::vni_show_text(&ports)
                });
            }
            VniCommand::Add { dev, vnis } => (dev, *vnis, true),
            VniCommand::Del { dev, vnis } => (dev, *vnis, false),
        };
        let spec = match self.specs.get_mut(dev.as_str()) {
            Some(PortSpec::Vxlan(spec)) => spec,
            _ if self.switch.exists(dev) => {
                return Err(ControlError::Vxlan(format!(
                    "{dev} is not a vxlan port: vni lists the VNIs of a vxlan port with vnifilter"
                )))
            }
            _ => return Err(qbridge_bridge::ConfigError::NoSuchDevice(dev.clone()).into()),
        };
        let r = if add {
            spec.vni_add(dev, vnis)
        } else {
            match spec.vni_del(dev, vnis) {
                // `apply`: a VNI that is not there is not an error.
                Err(_) if may_exist && spec.vnifilter => Ok(()),
                r => r,
            }
        };
        r.map(|()| String::new()).map_err(ControlError::Vxlan)
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

impl Session {
    /// How many `fdb flush dev NAME` (no `vlan`, dynamic entries selected) VXLAN port `name`
    /// has had: each one empties its learned VTEPs, as the kernel's `bridge fdb flush` does
    /// on a vxlan device (the engine compares the count with the one it last acted on).
    pub fn vxlan_flushes(&self, name: &str) -> u64 {
        self.vxlan_flushes.get(name).copied().unwrap_or(0)
    }
}

pub(super) fn is_vxlan(spec: &PortSpec) -> bool {
    matches!(spec, PortSpec::Vxlan(_))
}

/// `vlan add vid V dev NAME untagged`: refused for a VID with tunnel_info on `dev` (the
/// port reads the VLAN from the tag).
pub(super) fn refuse_untagged_tunnel(
    specs: &BTreeMap<String, PortSpec>,
    dev: &str,
    vids: VidRange,
) -> Result<(), ControlError> {
    let Some(PortSpec::Vxlan(v)) = specs.get(dev) else {
        return Ok(());
    };
    match v
        .tunnels
        .iter()
        .find(|t| (vids.start..=vids.end).contains(&t.0))
    {
        Some((vid, vni)) => Err(ControlError::Vxlan(format!(
            "vid {vid} of {dev} maps to VNI {vni} (tunnel_info): it must leave the port tagged"
        ))),
        None => Ok(()),
    }
}

/// `vlan del vid V[-V2] dev NAME`: the VIDs' tunnel_info goes with them.
pub(super) fn forget_tunnels(specs: &mut BTreeMap<String, PortSpec>, dev: &str, vids: VidRange) {
    if let Some(PortSpec::Vxlan(v)) = specs.get_mut(dev) {
        v.tunnels.retain(|t| t.0 < vids.start || t.0 > vids.end);
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
        assert!(e.to_string().contains("link-local"), "{e}");
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
        t.apply_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        run(&mut s, "fdb del 00:00:00:00:00:00 dev vx0 dst 10.0.0.2").unwrap();
        assert!(!run(&mut s, "fdb show dev vx0")
            .unwrap()
            .contains("10.0.0.2"));
    }

    /// An IPv6 underlay: the words as iproute2 spells them, `remote` as the first flood-list
    /// VTEP, `fdb … dst` and the flood list over IPv6, shown (text, `-j`) and saved; mixed
    /// families and multicast groups refused with the reason.
    #[test]
    fn ipv6_vteps_show_save_and_refuse_mixed_families() {
        let mut s = Session::new();
        for l in [
            "link add br0 type bridge vlan_filtering 0",
            "link add vx6 type vxlan id 600 local 2001:db8::1 remote 2001:db8::2 dstport 4789 \
             udp6zerocsumrx",
            "link set dev vx6 master br0",
            "fdb append 00:00:00:00:00:00 dev vx6 dst 2001:db8::3",
            "fdb add 02:00:00:00:00:01 dev vx6 dst 2001:db8::3",
            "link add vx4 type vxlan id 400 local 10.0.0.1",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let json = |s: &mut Session, l: &str| {
            s.execute_line(
                l,
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap()
        };
        let j = json(&mut s, "fdb show dev vx6");
        assert!(
            j.starts_with(
                r#"[{"mac":"00:00:00:00:00:00","ifname":"vx6","dst":"2001:db8::2","flags":["self"],"state":"permanent"},"#
            ),
            "{j}"
        );
        let j = json(&mut s, "link show dev vx6");
        assert!(
            j.contains(r#""local":"2001:db8::1","dstport":4789,"udp_zero_csum6_rx":true"#),
            "{j}"
        );
        let link = run(&mut s, "link show dev vx6").unwrap();
        assert!(
            link.starts_with(
                "vx6: vxlan id 600 local 2001:db8::1 dstport 4789 udp6zerocsumrx learning on"
            ),
            "{link}"
        );
        assert_eq!(
            run(&mut s, "fdb show dev vx6").unwrap(),
            "00:00:00:00:00:00 dev vx6 dst 2001:db8::2 self permanent\n\
             00:00:00:00:00:00 dev vx6 dst 2001:db8::3 self permanent\n\
             02:00:00:00:00:01 dev vx6 dst 2001:db8::3 self permanent\n"
        );
        for (line, want) in [
            (
                "fdb append 00:00:00:00:00:00 dev vx6 dst 10.0.0.2",
                "dst 10.0.0.2 is IPv4 but local 2001:db8::1 is IPv6",
            ),
            (
                "fdb append 00:00:00:00:00:00 dev vx4 dst 2001:db8::2",
                "dst 2001:db8::2 is IPv6 but local 10.0.0.1 is IPv4",
            ),
            (
                "link add vx1 type vxlan id 5 local 2001:db8::1 remote 10.0.0.2",
                "remote 10.0.0.2 is IPv4 but local 2001:db8::1 is IPv6",
            ),
            (
                "link add vx1 type vxlan id 5 local 2001:db8::1 group ff05::100",
                "no multicast group",
            ),
            (
                "link add vx1 type vxlan id 5 local 2001:db8::1 remote ff05::100",
                "multicast groups are not supported",
            ),
            (
                "fdb add 02:00:00:00:00:02 dev vx6 dst ff02::1",
                "not a unicast VTEP address",
            ),
            (
                "link add vx1 type vxlan id 5 local 2001:db8::zz",
                "IPv6 address",
            ),
            (
                "link add vx1 type vxlan external local 2001:db8::1 remote 2001:db8::2",
                "no remote with external",
            ),
            (
                "link add vx1 type vxlan id 5 local 2001:db8::1 remote fe80::2",
                "link-local",
            ),
        ] {
            let e = run(&mut s, line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
        // The running configuration recreates it, and `apply` of it changes nothing.
        let rc = s.running_config();
        assert!(
            rc.contains(
                "type vxlan id 600 local 2001:db8::1 dstport 4789 udp6zerocsumrx learning on\n\
                 fdb append 00:00:00:00:00:00 dev vx6 dst 2001:db8::2\n\
                 fdb append 00:00:00:00:00:00 dev vx6 dst 2001:db8::3\n\
                 fdb add 02:00:00:00:00:01 dev vx6 dst 2001:db8::3\n"
            ),
            "{rc}"
        );
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        t.apply_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        run(&mut s, "fdb del 00:00:00:00:00:00 dev vx6 dst 2001:db8::2").unwrap();
        assert!(!run(&mut s, "fdb show dev vx6")
            .unwrap()
            .contains("2001:db8::2 "));
    }

    #[test]
    fn external_port_maps_vlans_and_keys_remotes_by_vni() {
        let mut s = Session::new();
        for l in [
            "link add br0 type bridge vlan_filtering 1",
            "link add vx0 type vxlan external local 10.0.0.1 dstport 4789",
            "link set dev vx0 master br0",
            "vlan add vid 10 dev vx0",
            "vlan add vid 20-21 dev vx0",
            "vlan add vid 10 dev vx0 tunnel_info id 1000",
            "vlan add vid 20-21 dev vx0 tunnel_info id 2000-2001",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2 vni 1000",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.3 src_vni 2000",
            "fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.3 vni 2000",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        assert_eq!(
            run(&mut s, "vlan tunnelshow").unwrap(),
            "port              vlan-id      tunnel-id\n\
             vx0               10           1000\n\
             \x20                 20-21        2000-2001\n"
        );
        let j = s
            .execute_line(
                "vlan tunnelshow dev vx0",
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap();
        assert_eq!(
            j.trim_end(),
            r#"[{"ifname":"vx0","tunnels":[{"vlan":10,"tunid":1000},{"vlan":20,"vlanEnd":21,"tunid":2000,"tunidEnd":2001}]}]"#
        );
        let show = run(&mut s, "fdb show dev vx0").unwrap();
        assert!(
            show.ends_with(
                "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 vni 1000 self permanent\n\
                 00:00:00:00:00:00 dev vx0 dst 10.0.0.3 vni 2000 self permanent\n\
                 02:00:00:00:00:01 dev vx0 dst 10.0.0.3 vni 2000 self permanent\n"
            ),
            "{show}"
        );
        let link = run(&mut s, "link show dev vx0").unwrap();
        assert!(
            link.starts_with("vx0: vxlan external local 10.0.0.1"),
            "{link}"
        );
        // Refusals, each naming the problem.
        for (line, want) in [
            (
                "vlan add vid 30 dev vx0 tunnel_info id 3000",
                "not a VLAN of vx0",
            ),
            (
                "vlan add vid 10 dev vx0 tunnel_info id 3000",
                "maps to VNI 1000 already",
            ),
            (
                "vlan add vid 10 dev vx0 untagged",
                "must leave the port tagged",
            ),
            (
                "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2",
                "name the entry's VNI",
            ),
            (
                "vlan add vid 10 dev br0 tunnel_info id 3000",
                "not a vxlan port",
            ),
            ("vlan tunnelshow dev nope", "nope"),
        ] {
            let e = run(&mut s, line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
        run(&mut s, "vlan add vid 30 dev vx0 untagged").unwrap();
        let e = run(&mut s, "vlan add vid 30 dev vx0 tunnel_info id 3000").unwrap_err();
        assert!(e.to_string().contains("untagged"), "{e}");
        run(
            &mut s,
            "link add vx1 type vxlan id 5 local 10.0.0.1 dstport 4790",
        )
        .unwrap();
        run(&mut s, "link set dev vx1 master br0").unwrap();
        let e = run(&mut s, "vlan add vid 10 dev vx1 tunnel_info id 1000").unwrap_err();
        assert!(e.to_string().contains("external"), "{e}");
        let e = run(
            &mut s,
            "fdb append 00:00:00:00:00:00 dev vx1 dst 10.0.0.2 vni 6",
        )
        .unwrap_err();
        assert!(e.to_string().contains("carries VNI 5 only"), "{e}");
        run(&mut s, "link del dev vx1").unwrap();
        run(&mut s, "vlan del vid 30 dev vx0").unwrap();
        // The running configuration recreates it, maps after the VLANs.
        let rc = s.running_config();
        assert!(
            rc.contains(
                "type vxlan external local 10.0.0.1 dstport 4789 learning on\n\
                 fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2 vni 1000\n"
            ),
            "{rc}"
        );
        assert!(
            rc.contains(
                "vlan add vid 10 dev vx0 tunnel_info id 1000\n\
                 vlan add vid 20-21 dev vx0 tunnel_info id 2000-2001\n"
            ),
            "{rc}"
        );
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        // `apply` of it changes nothing (maps, remotes and VLANs exist already).
        t.apply_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        // Deleting a VLAN deletes its map (a refused delete keeps it); tunnel_info del
        // removes one.
        assert!(run(&mut s, "vlan del vid 20-22 dev vx0").is_err());
        assert!(run(&mut s, "vlan tunnelshow").unwrap().contains("20-21"));
        run(&mut s, "vlan del vid 21 dev vx0").unwrap();
        run(&mut s, "vlan del vid 20 dev vx0 tunnel_info id 2000").unwrap();
        let e = run(&mut s, "vlan del vid 20 dev vx0 tunnel_info").unwrap_err();
        assert!(e.to_string().contains("no tunnel_info"), "{e}");
        assert_eq!(
            run(&mut s, "vlan tunnelshow").unwrap(),
            "port              vlan-id      tunnel-id\n\
             vx0               10           1000\n"
        );
        // Parse errors.
        for (line, want) in [
            ("vlan add vid 10 dev vx0 tunnel_info", "id VNI"),
            ("vlan add vid 10 dev vx0 tunnel_info id 0", "tunnel_info id"),
            ("vlan add vid 10 dev vx0 pvid tunnel_info id 5", "pvid"),
            (
                "link add vx2 type vxlan external id 5 local 10.0.0.1",
                "no id with external",
            ),
            ("fdb add 02:00:00:00:00:01 dev vx0 vni 5", "dst IP"),
        ] {
            let e = run(&mut s, line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn vnifilter_port_lists_its_vnis() {
        let mut s = Session::new();
        for l in [
            "link add vx0 type vxlan vnifilter local 10.0.0.1",
            "vni add dev vx0 vni 1000",
            "vni add dev vx0 vni 1001-1005",
            "vni add dev vx0 vni 2000",
            "vni del dev vx0 vni 1003",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        assert_eq!(
            run(&mut s, "vni show").unwrap(),
            "dev               vni\n\
             vx0               1000-1002\n\
             \x20                 1004-1005\n\
             \x20                 2000\n"
        );
        let j = s
            .execute_line(
                "vni show dev vx0",
                OutputOptions {
                    json: true,
                    ..OutputOptions::default()
                },
            )
            .unwrap();
        assert_eq!(
            j.trim_end(),
            r#"[{"ifname":"vx0","vnis":[{"vni":1000,"vniEnd":1002},{"vni":1004,"vniEnd":1005},{"vni":2000}]}]"#
        );
        let rc = s.running_config();
        assert!(
            rc.contains(
                "type vxlan external vnifilter local 10.0.0.1 dstport 4789 learning on\n\
                 vni add dev vx0 vni 1000-1002\n\
                 vni add dev vx0 vni 1004-1005\n\
                 vni add dev vx0 vni 2000\n"
            ),
            "{rc}"
        );
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        t.apply_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        run(
            &mut s,
            "link add vx1 type vxlan external local 10.0.0.1 dstport 4790",
        )
        .unwrap();
        for (line, want) in [
            ("vni add dev vx1 vni 5", "no vnifilter"),
            ("vni del dev vx0 vni 1003", "not in vx0's list"),
            ("vni add dev vx0", "vni N"),
            ("vni add dev vx0 vni 9-8", "not below"),
            ("vni add dev nope vni 9", "nope"),
            ("vni frob", "vni"),
        ] {
            let e = run(&mut s, line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
        assert!(run(&mut s, "vni help")
            .unwrap()
            .contains("vni add|del dev VXLAN"));
    }

    #[test]
    fn a_control_planes_remotes_carry_extern_learn() {
        let mut s = Session::new();
        for l in [
            "link add br0 type bridge vlan_filtering 0",
            "link add vx0 type vxlan id 100 local 10.0.0.1 nolearning",
            "link set dev vx0 master br0",
            "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2 extern_learn",
            "fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.3",
            "fdb replace 02:00:00:00:00:02 dev vx0 dst 10.0.0.2 extern_learn",
        ] {
            run(&mut s, l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        assert_eq!(
            run(&mut s, "fdb show dev vx0").unwrap(),
            "00:00:00:00:00:00 dev vx0 dst 10.0.0.2 self extern_learn\n\
             02:00:00:00:00:01 dev vx0 dst 10.0.0.3 self permanent\n\
             02:00:00:00:00:02 dev vx0 dst 10.0.0.2 self extern_learn\n"
        );
        // `vlan` still has no place beside `dst`.
        let e = run(
            &mut s,
            "fdb add 02:00:00:00:00:03 dev vx0 dst 10.0.0.2 vlan 5",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("no vlan or inner_vlan with dst"),
            "{e}"
        );
        let rc = s.running_config();
        assert!(
            rc.contains(
                "fdb append 00:00:00:00:00:00 dev vx0 dst 10.0.0.2 extern_learn\n\
                 fdb add 02:00:00:00:00:01 dev vx0 dst 10.0.0.3\n\
                 fdb add 02:00:00:00:00:02 dev vx0 dst 10.0.0.2 extern_learn\n"
            ),
            "{rc}"
        );
        let mut t = Session::new();
        t.execute_batch(&rc, OutputOptions::default()).unwrap();
        assert_eq!(t.running_config(), rc);
        run(&mut s, "fdb del 02:00:00:00:00:02 dev vx0 dst 10.0.0.2").unwrap();
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
