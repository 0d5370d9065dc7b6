//! `mirror add|del|show`: the grammar of port mirroring sessions (`docs/commands.md`, mirror).
//!
//! `mirror add NAME src P1[,P2…] [direction rx|tx|both] [vid LIST] dst PORT|pcap FILE
//! [rspan VID]`: keywords after NAME in any order; `dst pcap FILE` names a file, `dst dev
//! NAME` a port even if it is called `pcap`. Names and files are the switch's to check.

use super::{command, parse_vid, parse_vid_list, set_once, unexpected, Words};
use crate::command::MirrorCommand;
use crate::error::ControlError;
use crate::words;
use qbridge_bridge::{MirrorDirection, MirrorDst, MirrorSpec};

const MIRROR_COMMANDS: &str = "add, del, show or help";
const ADD_WORDS: &str = "src, direction, vid, dst or rspan";

pub(super) fn parse_mirror(w: &mut Words<'_>) -> Result<MirrorCommand, ControlError> {
    let Some(cmd) = w.next() else {
        return Err(ControlError::MissingCommand {
            object: "mirror",
            expected: MIRROR_COMMANDS,
        });
    };
    match command("mirror", cmd, words::MIRROR_COMMANDS, MIRROR_COMMANDS)? {
        "add" => parse_add(w).map(MirrorCommand::Add),
        "delete" => {
            let name = name(w, "mirror name after \"mirror del\"")?;
            w.end("nothing after the mirror's name")?;
            Ok(MirrorCommand::Del { name })
        }
        _ => {
            let name = w.next().map(str::to_string);
            w.end("nothing after the mirror's name")?;
            Ok(MirrorCommand::Show { name })
        }
    }
}

fn name(w: &mut Words<'_>, what: &'static str) -> Result<String, ControlError> {
    match w.next() {
        Some(n) => Ok(n.to_string()),
        None => Err(ControlError::MissingArgument { what }),
    }
}

fn parse_add(w: &mut Words<'_>) -> Result<MirrorSpec, ControlError> {
    let name = name(w, "mirror name after \"mirror add\"")?;
    let (mut src, mut direction, mut vids, mut dst, mut rspan) = (None, None, None, None, None);
    while let Some(kw) = w.next_kw(words::MIRROR_ADD, ADD_WORDS)? {
        match kw {
            "src" => {
                let v = w.value(kw, "PORT or PORT,PORT,…")?;
                let ports: Vec<String> = v.split(',').map(str::to_string).collect();
                if ports.iter().any(String::is_empty) {
                    return Err(ControlError::BadValue {
                        what: "src",
                        value: v.to_string(),
                        expected: "port names separated by commas",
                    });
                }
                set_once(&mut src, kw, ports)?;
            }
            "direction" => {
                let v = w.value(kw, "rx, tx or both")?;
                let d = match v {
                    "rx" => MirrorDirection::Rx,
                    "tx" => MirrorDirection::Tx,
                    "both" => MirrorDirection::Both,
                    _ => {
                        return Err(ControlError::BadValue {
                            what: "direction",
                            value: v.to_string(),
                            expected: "rx, tx or both",
                        })
                    }
                };
                set_once(&mut direction, kw, d)?;
            }
            "vid" => {
                let list =
                    parse_vid_list("vid", w.value(kw, "a list of VIDs, e.g. 10,20-30")?, false)?;
                set_once(&mut vids, kw, list)?;
            }
            "dst" => {
                let d = match w.value(kw, "a port, or pcap FILE")? {
                    "pcap" => MirrorDst::Pcap(w.value("pcap", "a file name")?.to_string()),
                    "dev" => MirrorDst::Port(w.value("dev", "a port name")?.to_string()),
                    port => MirrorDst::Port(port.to_string()),
                };
                set_once(&mut dst, kw, d)?;
            }
            "rspan" => {
                let v = parse_vid(w.value(kw, "the RSPAN VLAN, 1-4094")?)?;
                set_once(&mut rspan, kw, v)?;
            }
            other => return Err(unexpected(other, ADD_WORDS)),
        }
    }
    Ok(MirrorSpec {
        name,
        src: src.ok_or(ControlError::MissingArgument {
            what: "\"src PORT[,PORT…]\"",
        })?,
        direction: direction.unwrap_or(MirrorDirection::Both),
        vids,
        dst: dst.ok_or(ControlError::MissingArgument {
            what: "\"dst PORT\" or \"dst pcap FILE\"",
        })?,
        rspan,
    })
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, MirrorCommand};
    use crate::parse::parse_line;
    use qbridge_bridge::{MirrorDirection, MirrorDst, MirrorSpec, VidList};

    fn p(s: &str) -> Result<Command, String> {
        parse_line(s)
            .map(|c| c.expect("a command"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn mirror_words() {
        assert_eq!(
            p("mirror add m1 src p1,p2 dir rx vid 10,20-30 dst p3 rspan 999").unwrap(),
            Command::Mirror(MirrorCommand::Add(MirrorSpec {
                name: "m1".into(),
                src: vec!["p1".into(), "p2".into()],
                direction: MirrorDirection::Rx,
                vids: Some(VidList::new(vec![(10, 10), (20, 30)])),
                dst: MirrorDst::Port("p3".into()),
                rspan: Some(999),
            }))
        );
        let Command::Mirror(MirrorCommand::Add(s)) = p("mi a m dst pcap m.pcap src p1").unwrap()
        else {
            panic!("not a mirror add");
        };
        assert_eq!(s.direction, MirrorDirection::Both);
        assert_eq!(s.dst, MirrorDst::Pcap("m.pcap".into()));
        let Command::Mirror(MirrorCommand::Add(s)) = p("mirror add m src p1 dst dev pcap").unwrap()
        else {
            panic!("not a mirror add");
        };
        assert_eq!(s.dst, MirrorDst::Port("pcap".into()));
        assert_eq!(
            p("mirror del m").unwrap(),
            Command::Mirror(MirrorCommand::Del { name: "m".into() })
        );
        assert_eq!(
            p("mirror s").unwrap(),
            Command::Mirror(MirrorCommand::Show { name: None })
        );
        assert_eq!(
            p("mirror show m").unwrap(),
            Command::Mirror(MirrorCommand::Show {
                name: Some("m".into())
            })
        );
        assert_eq!(
            p("mirror help").unwrap(),
            Command::Help(Some(crate::Object::Mirror))
        );
        assert_eq!(
            p("help mi").unwrap(),
            Command::Help(Some(crate::Object::Mirror))
        );
    }

    #[test]
    fn mirror_errors_name_the_word() {
        let e = |s: &str| p(s).unwrap_err();
        assert_eq!(e("mirror add"), "missing mirror name after \"mirror add\"");
        assert_eq!(e("mirror add m dst p3"), "missing \"src PORT[,PORT…]\"");
        assert_eq!(
            e("mirror add m src p1"),
            "missing \"dst PORT\" or \"dst pcap FILE\""
        );
        assert_eq!(
            e("mirror add m src p1 direction in dst p2"),
            "invalid direction \"in\" (expected rx, tx or both)"
        );
        assert_eq!(
            e("mirror add m src p1,,p2 dst p3"),
            "invalid src \"p1,,p2\" (expected port names separated by commas)"
        );
        assert_eq!(
            e("mirror add m src p1 dst p3 vid 30-20"),
            "invalid vid \"30-20\" (expected ranges written low-high, e.g. 10,20-30)"
        );
        assert_eq!(
            e("mirror add m src p1 dst p3 rspan 4095"),
            "vid 4095 is reserved"
        );
        assert_eq!(
            e("mirror add m src p1 dst p3 rspan 5000"),
            "vid 5000 is out of range (1-4094)"
        );
        assert_eq!(
            e("mirror add m src p1 dst pcap"),
            "\"pcap\" needs a value (a file name)"
        );
        assert_eq!(
            e("mirror add m src p1 src p2 dst p3"),
            "\"src\" given twice"
        );
        assert_eq!(
            e("mirror add m src p1 dts p3"),
            "unexpected \"dts\" (did you mean \"dst\"?)"
        );
        assert_eq!(e("mirror del"), "missing mirror name after \"mirror del\"");
        assert_eq!(
            e("mirror show m extra"),
            "unexpected \"extra\" (expected nothing after the mirror's name)"
        );
        assert_eq!(
            e("mirror frob"),
            "unknown command \"frob\" for mirror (expected add, del, show or help)"
        );
        assert_eq!(
            e("mirror"),
            "missing command after \"mirror\" (expected add, del, show or help)"
        );
    }
}
