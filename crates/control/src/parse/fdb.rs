//! `fdb add|replace|del|show|flush`: FDB entries and flushes.

use super::*;

pub(super) fn parse_fdb(w: &mut Words<'_>) -> Result<FdbCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "fdb",
            expected: FDB_COMMANDS,
        });
    };
    match command("fdb", cmd, words::FDB_COMMANDS, FDB_COMMANDS)? {
        cmd @ ("add" | "append" | "replace" | "delete") => {
            let mac_word = w.next().ok_or(ControlError::MissingArgument {
                what: "MAC address",
            })?;
            let mac = mac_word.parse()?;
            let (mut dev, mut vlan, mut kind, mut sticky) = (None, None, None, None);
            let (mut inner_vlan, mut extern_learn, mut dst) = (None, None, None);
            let mut vni = None;
            let (mut vxl88_self, mut vxl88_master) = (false, false);
            let expected = "dev, vlan, inner_vlan, static, dynamic, permanent, sticky, \
                            extern_learn, dst, vni, self or master";
            while let Some(kw) = w.next_kw(words::FDB_ADD, expected)? {
                match kw {
                    "dev" => set_once(&mut dev, kw, w.value(kw, "a port name")?)?,
                    "vlan" => set_once(&mut vlan, kw, parse_fdb_vid(w.value(kw, "a vid")?)?)?,
                    "inner_vlan" => {
                        set_once(&mut inner_vlan, kw, parse_vid(w.value(kw, "a C-VID")?)?)?
                    }
                    "static" | "dynamic" | "permanent" | "local" => {
                        let k = match kw {
                            "static" => FdbKind::Static,
                            "dynamic" => FdbKind::Dynamic,
                            _ => FdbKind::Permanent,
                        };
                        if kind.is_some() {
                            return Err(unexpected(kw, "only one of static, dynamic, permanent"));
                        }
                        kind = Some(k);
                    }
                    "sticky" => set_once(&mut sticky, kw, true)?,
                    "extern_learn" => set_once(&mut extern_learn, kw, true)?,
                    "dst" => {
                        let v = super::vxlan::parse_vtep_ip(
                            "dst",
                            w.value(kw, "an IPv4 or IPv6 address")?,
                        )?;
                        set_once(&mut dst, kw, v)?
                    }
                    // bridge-fdb(8): `vni` (the VNI to send with) and `src_vni` (the VNI the
                    // entry belongs to) are one number here: a VXLAN port does not translate.
                    "vni" | "src_vni" => {
                        let v = w.value(kw, "a VNI (0-16777215)")?;
                        let n =
                            parse_uint("vni", v, u64::from(crate::vxlan::VNI_MAX), "0-16777215")?;
                        set_once(&mut vni, "vni", n as u32)?
                    }
                    // vxl88 (decision 88): `master` the bridge's entry, `self` a VXLAN port's
                    // own; on other devices every entry is the bridge's.
                    "master" => vxl88_master = true,
                    "self" => vxl88_self = true,
                    other => return Err(unexpected(other, expected)),
                }
            }
            let dev = dev
                .ok_or(ControlError::MissingArgument {
                    what: "\"dev NAME\"",
                })?
                .to_string();
            if let Some(dst) = dst {
                // A VXLAN port's own entry (bridge-fdb's `self`): no VLAN, no kind;
                // `extern_learn` marks a control plane's (EVPN) entry.
                if vlan.is_some() || inner_vlan.is_some() {
                    return Err(unexpected(
                        if vlan.is_some() { "vlan" } else { "inner_vlan" },
                        "no vlan or inner_vlan with dst (a VXLAN port's remote VTEP)",
                    ));
                }
                use crate::vxlan::VxlanFdbOp;
                return Ok(FdbCommand::Vxlan {
                    op: match cmd {
                        "add" => VxlanFdbOp::Add,
                        "append" => VxlanFdbOp::Append,
                        "replace" => VxlanFdbOp::Replace,
                        _ => VxlanFdbOp::Del,
                    },
                    mac,
                    dev,
                    dst,
                    origin: if extern_learn.is_some() {
                        crate::vxlan::RemoteOrigin::ExternLearn
                    } else {
                        crate::vxlan::RemoteOrigin::Static
                    },
                    vni,
                });
            }
            if vxl88_self && cmd != "delete" {
                return Err(ControlError::MissingArgument {
                    what: "\"dst IP\" with \"self\" (a VXLAN port's own entry names its VTEP)",
                });
            }
            if vni.is_some() && cmd != "delete" {
                return Err(ControlError::MissingArgument {
                    what: "\"dst IP\" with \"vni\" (a VXLAN port's remote VTEP)",
                });
            }
            if cmd == "append" {
                return Err(ControlError::MissingArgument {
                    what: "\"dst IP\" (append adds a remote VTEP to a vxlan port's flood list)",
                });
            }
            if inner_vlan.is_some() && matches!(vlan, None | Some(0)) {
                return Err(ControlError::MissingArgument {
                    what: "\"vlan V\" (1-4094) with \"inner_vlan\"",
                });
            }
            Ok(match cmd {
                "add" | "replace" => FdbCommand::Add {
                    mac,
                    dev,
                    vlan,
                    inner_vlan,
                    // iproute2: neither static nor dynamic means permanent.
                    kind: kind.unwrap_or(FdbKind::Permanent),
                    sticky: sticky.is_some(),
                    replace: cmd == "replace",
                    extern_learn: extern_learn.is_some(),
                },
                _ => FdbCommand::Del {
                    mac,
                    dev,
                    vlan,
                    inner_vlan,
                    self_: vxl88_self,
                    master: vxl88_master,
                    vni,
                },
            })
        }
        "show" | "lst" | "list" => {
            let (mut br, mut dev, mut vlan) = (None, None, None);
            while let Some(kw) = w.next_kw(words::FDB_SHOW, "br, dev or vlan")? {
                match kw {
                    "br" => set_once(&mut br, kw, w.value(kw, "a bridge name")?.to_string())?,
                    "dev" | "brport" => {
                        set_once(&mut dev, "dev", w.value(kw, "a port name")?.to_string())?
                    }
                    "vlan" => set_once(&mut vlan, kw, parse_vid(w.value(kw, "a vid")?)?)?,
                    other => return Err(unexpected(other, "br, dev or vlan")),
                }
            }
            Ok(FdbCommand::Show { br, dev, vlan })
        }
        // flush
        _ => parse_fdb_flush(w),
    }
}

/// `fdb flush dev NAME [vlan V] [KIND AND FLAG WORDS]`: bridge/fdb.c `fdb_flush`. Each kind
/// word narrows the kinds flushed (`static` and `dynamic` together select nothing and are
/// refused); without one, dynamic and static entries go, never permanent ones.
fn parse_fdb_flush(w: &mut Words<'_>) -> Result<FdbCommand, ControlError> {
    const EXPECTED: &str = "dev, vlan, [no]permanent, [no]static, [no]dynamic, [no]sticky, \
                            [no]added_by_user or [no]extern_learn";
    let (mut dev, mut vlan) = (None, None);
    // Dynamic, static, permanent: still selected; the word that last narrowed them.
    let mut kinds = [true; 3];
    let mut narrowed_by: Option<&str> = None;
    let (mut sticky, mut by_user, mut ext) = (None, None, None);
    let (mut vxl88_self, mut vxl88_master) = (false, false);
    let mut seen: Vec<&str> = Vec::new();
    while let Some(word) = w.next() {
        if words::FDB_FLUSH_UNSUPPORTED.contains(&word) {
            return Err(ControlError::NotSupported {
                word: word.to_string(),
                why: "its FDB entries have no such attribute",
            });
        }
        let kw = keyword(word, words::FDB_FLUSH, EXPECTED)?;
        if seen.contains(&kw) {
            return Err(ControlError::Duplicate(kw.to_string()));
        }
        seen.push(kw);
        let only: Option<[bool; 3]> = match kw {
            "dev" => {
                dev = Some(w.value(kw, "a bridge or port name")?);
                None
            }
            "vlan" => {
                vlan = Some(parse_vid(w.value(kw, "a vid")?)?);
                None
            }
            // vxl88 (decision 88): on a VXLAN port `self` its own entries, `master` the
            // bridge's; elsewhere every qbridge entry is the bridge's.
            "master" => {
                vxl88_master = true;
                None
            }
            "self" => {
                vxl88_self = true;
                None
            }
            "permanent" => Some([false, false, true]),
            "nopermanent" => Some([true, true, false]),
            "static" => Some([false, true, false]),
            "nostatic" => Some([true, false, true]),
            "dynamic" => Some([true, false, false]),
            "nodynamic" => Some([false, true, true]),
            "sticky" | "nosticky" => {
                set_once(&mut sticky, "[no]sticky", kw == "sticky")?;
                None
            }
            "extern_learn" | "noextern_learn" => {
                set_once(&mut ext, "[no]extern_learn", kw == "extern_learn")?;
                None
            }
            _ => {
                set_once(&mut by_user, "[no]added_by_user", kw == "added_by_user")?;
                None
            }
        };
        if let Some(only) = only {
            let next = [0, 1, 2].map(|i| kinds[i] && only[i]);
            if next == [false; 3] {
                return Err(ControlError::Contradicts {
                    word: kw.to_string(),
                    earlier: narrowed_by.unwrap_or_default().to_string(),
                });
            }
            kinds = next;
            narrowed_by = Some(kw);
        }
    }
    let dev = dev
        .ok_or(ControlError::MissingArgument {
            what: "\"dev NAME\"",
        })?
        .to_string();
    // A vxlan device's static entries and flood lists are permanent ones: a flush without a
    // kind word takes them (the kernel's `vxlan_fdb_delete_bulk`), the bridge keeps its own.
    let self_permanent = kinds[2];
    if narrowed_by.is_none() {
        kinds[2] = false;
    }
    Ok(FdbCommand::Flush {
        dev,
        vlan,
        which: FdbFlushMatch {
            dynamic: kinds[0],
            static_: kinds[1],
            permanent: kinds[2],
            sticky,
            added_by_user: by_user,
            extern_learn: ext,
        },
        self_: vxl88_self,
        master: vxl88_master,
        self_permanent,
    })
}
