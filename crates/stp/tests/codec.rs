//! BPDU codec byte vectors (written for these tests from the 802.1D-2004 clause 9 and
//! 802.1Q-2022 clause 14 layouts), validation reasons, and the MST configuration digest
//! vectors of 802.1Q table 13-2.

use qbridge_stp::bpdu::{self, BadBpdu, Bpdu, ConfigBody, MstPart, MstiMsg};
use qbridge_stp::mst::{self, Region};
use qbridge_stp::{BridgeId, PortId, Times};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn mac(s: &str) -> [u8; 6] {
    let v = hex(&s.replace(':', ""));
    [v[0], v[1], v[2], v[3], v[4], v[5]]
}

/// A Configuration BPDU as a switch sends it: root 8000.001c0e877800 cost 4, bridge
/// 8000.001c0e878500 port 0x8004, age 1 s, max age 20, hello 2, forward delay 15.
const CONFIG_FRAME: &str = "0180c2000000 001c0e878504 0026 424203
    0000 00 00 00 8000001c0e877800 00000004 8000001c0e878500 8004 0100 1400 0200 0f00
    0000000000000000";

fn config_body() -> ConfigBody {
    ConfigBody {
        flags: 0,
        root: BridgeId::new(0x8000, mac("00:1c:0e:87:78:00")),
        root_path_cost: 4,
        bridge: BridgeId::new(0x8000, mac("00:1c:0e:87:85:00")),
        port: PortId(0x8004),
        times: Times {
            message_age: 1,
            max_age: 20,
            hello_time: 2,
            forward_delay: 15,
        },
    }
}

#[test]
fn config_bpdu_parse_and_emit_byte_exact() {
    let frame = hex(CONFIG_FRAME);
    assert_eq!(frame.len(), 60);
    let b = bpdu::parse_frame(&frame).unwrap();
    assert_eq!(b, Bpdu::Config(config_body()));
    assert_eq!(
        b.emit_frame(bpdu::STP_GROUP_ADDRESS, mac("00:1c:0e:87:85:04")),
        frame
    );
}

#[test]
fn tcn_bpdu() {
    let frame = hex("0180c2000000 001c0e878504 0007 424203 00000080 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000");
    let frame = &frame[..60];
    assert_eq!(bpdu::parse_frame(frame).unwrap(), Bpdu::Tcn);
    assert_eq!(
        Bpdu::Tcn.emit_frame(bpdu::STP_GROUP_ADDRESS, mac("00:1c:0e:87:85:04")),
        frame
    );
}

#[test]
fn rst_bpdu_flags_and_version1_length() {
    // Designated, proposal, learning+forwarding, agreement, TC: flags 0x7f.
    let frame = hex("0180c2000000 000000000002 0027 424203
        0000 02 02 7f 1000000000000001 00030d40 2000000000000002 8002 0100 1400 0200 0f00 00
        00000000000000");
    let b = bpdu::parse_frame(&frame).unwrap();
    let Bpdu::Rst(c) = &b else { panic!("{b:?}") };
    assert_eq!(c.flags, 0x7f);
    assert_eq!(c.root_path_cost, 200_000);
    assert_eq!(
        bpdu::WireRole::from_flags(c.flags),
        bpdu::WireRole::Designated
    );
    assert_eq!(
        b.emit_frame(bpdu::STP_GROUP_ADDRESS, mac("00:00:00:00:00:02")),
        frame
    );
    // The provider group address is only the destination.
    let p = b.emit_frame(bpdu::PROVIDER_GROUP_ADDRESS, mac("00:00:00:00:00:02"));
    assert_eq!(&p[..6], &[0x01, 0x80, 0xc2, 0, 0, 0x08]);
    assert_eq!(p[6..], frame[6..]);
}

fn mst_bpdu(n: usize) -> Bpdu {
    let region = Region::new("region1", 7).unwrap();
    Bpdu::Mst(
        ConfigBody {
            flags: 0x3c,
            ..config_body()
        },
        Box::new(MstPart {
            config_id: region.config_id(),
            internal_root_path_cost: 20_000,
            cist_bridge: BridgeId::new(0x8000, [0, 0, 0, 0, 0, 9]),
            remaining_hops: 19,
            mstis: (0..n)
                .map(|i| MstiMsg {
                    flags: 0x3c,
                    regional_root: BridgeId::new(0x8000 | (i as u16 + 1), [0, 0, 0, 0, 0, 9]),
                    internal_root_path_cost: 0,
                    bridge_priority: 0x80,
                    port_priority: 0x80,
                    remaining_hops: 20,
                })
                .collect(),
        }),
    )
}

#[test]
fn mst_bpdu_round_trip_and_layout() {
    for n in [0usize, 1, 2, 64] {
        let b = mst_bpdu(n);
        let bytes = b.emit();
        assert_eq!(bytes.len(), 102 + 16 * n);
        assert_eq!(&bytes[2..4], &[3, 2]);
        assert_eq!(bytes[35], 0, "version 1 length");
        assert_eq!(
            u16::from_be_bytes([bytes[36], bytes[37]]) as usize,
            64 + 16 * n
        );
        assert_eq!(&bytes[39..46], b"region1");
        assert_eq!(&bytes[71..73], &[0, 7], "revision");
        assert_eq!(bpdu::parse(&bytes).unwrap(), b);
    }
}

#[test]
fn mst_bpdu_with_bad_version3_length_is_read_as_rst() {
    let mut bytes = mst_bpdu(1).emit();
    bytes[37] = bytes[37].wrapping_add(3); // not a multiple of 16
    assert!(matches!(bpdu::parse(&bytes), Ok(Bpdu::Rst(_))));
    let mut bytes = mst_bpdu(0).emit();
    bytes[35] = 1; // version 1 length must be 0
    assert!(matches!(bpdu::parse(&bytes), Ok(Bpdu::Rst(_))));
    let bytes = mst_bpdu(0).emit();
    assert!(
        matches!(bpdu::parse(&bytes[..60]), Ok(Bpdu::Rst(_))),
        "short MST is RST"
    );
}

#[test]
fn validation_reasons() {
    let good = hex(CONFIG_FRAME);
    assert_eq!(bpdu::parse_frame(&good[..10]), Err(BadBpdu::TooShort));
    let mut f = good.clone();
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::BadLength));
    let mut f = good.clone();
    f[14] = 0xaa;
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::BadLlc));
    let mut f = good.clone();
    f[18] = 1;
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::BadProtocolId));
    let mut f = good.clone();
    f[20] = 0x55;
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::UnknownType));
    let mut f = good.clone();
    f[12..14].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::Truncated));
    let mut f = good.clone();
    f[17 + 27] = 20; // message age 20 s = max age
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::MessageAgeExceedsMaxAge));
    // An RST type with version 0 is not a BPDU type we know.
    let mut f = good.clone();
    f[20] = 2;
    assert_eq!(bpdu::parse_frame(&f), Err(BadBpdu::UnknownType));
}

fn digest_hex(r: &Region) -> String {
    r.digest().iter().map(|b| format!("{b:02X}")).collect()
}

#[test]
fn digest_table_13_2_all_cist() {
    assert_eq!(
        digest_hex(&Region::default()),
        "AC36177F50283CD4B83821D8AB26DE62"
    );
}

#[test]
fn digest_table_13_2_all_msti_1() {
    let mut r = Region::default();
    for vid in 1..=4094 {
        r.map(vid, 1).unwrap();
    }
    assert_eq!(digest_hex(&r), "E13A80F11ED0856ACD4EE3476941C73B");
}

#[test]
fn digest_table_13_2_vid_mod_32() {
    let mut r = Region::default();
    for vid in 1..=4094 {
        r.map(vid, vid % 32 + 1).unwrap();
    }
    assert_eq!(digest_hex(&r), "9D145C267DBE9FB5D893441BE3BA08CE");
}

#[test]
fn md5_and_hmac_rfc_vectors() {
    let h = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(h(mst::md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
    assert_eq!(
        h(mst::md5(b"The quick brown fox jumps over the lazy dog")),
        "9e107d9d372bb6826bd81d3542a419d6"
    );
    // RFC 2202 test case 2.
    assert_eq!(
        h(mst::hmac_md5(b"Jefe", b"what do ya want for nothing?")),
        "750c783e6ab0b503eaa86e310a5db738"
    );
}

#[test]
fn region_identity() {
    let a = Region::new("r", 1).unwrap();
    let mut b = a.clone();
    let from = |r: &Region| {
        let Bpdu::Mst(c, mut m) = mst_bpdu(0) else {
            unreachable!()
        };
        m.config_id = r.config_id();
        Bpdu::Mst(c, m)
    };
    assert!(mst::from_same_region(&from(&b), &a.config_id()));
    b.map(10, 2).unwrap();
    assert!(!mst::from_same_region(&from(&b), &a.config_id()));
    assert!(!mst::from_same_region(
        &Bpdu::Rst(config_body()),
        &a.config_id()
    ));
    assert_eq!(
        Region::new(&"x".repeat(33), 0),
        Err(mst::RegionError::NameTooLong(33))
    );
    assert_eq!(a.clone().map(4095, 1), Err(mst::RegionError::BadVid(4095)));
    assert_eq!(b.mstis(), vec![qbridge_stp::TreeId(2)]);
    assert_eq!(b.tree_of(10), qbridge_stp::TreeId(2));
}
