//! Exact-value tests of the RoboSense packet views, classification, model constants, angle
//! tables and the point decoder (the parts that do not depend on how frames are cut).

use std::path::Path;

use super::*;
use crate::point::ReturnType;
use crate::vendor::ConfigError;
use crate::vendor::{Rejection, ReturnMode, SensorModel};

/// The Helios-16P angle CSV shipped with the capture.
const HELIOS16P_CSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/robosense/helios16p/RobosenseHelios16P.csv"
);

/// A valid MSOP for `header`: magic, every block flagged `FF EE` with azimuth `az(b)`, no
/// returns.
fn msop(header: HeaderKind, az: impl Fn(usize) -> u16) -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    b[..header.magic().len()].copy_from_slice(header.magic());
    for block in 0..BLOCKS {
        let o = HEADER_LEN + block * BLOCK_LEN;
        b[o..o + 2].copy_from_slice(&BLOCK_FLAG);
        b[o + 2..o + 4].copy_from_slice(&az(block).to_be_bytes());
    }
    b
}

/// Writes the raw distance and intensity of `(block, chan)`.
fn set_unit(b: &mut [u8], block: usize, chan: usize, raw: u16, intensity: u8) {
    let o = HEADER_LEN + block * BLOCK_LEN + 4 + 3 * chan;
    b[o..o + 2].copy_from_slice(&raw.to_be_bytes());
    b[o + 2] = intensity;
}

/// A DIFOP with its magic and every other byte 0.
fn difop() -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    b[..8].copy_from_slice(&DIFOP_MAGIC);
    b
}

/// Writes a DIFOP angle (`sign` byte, then u16 BE `value`) at offset `o`.
fn put_angle(b: &mut [u8], o: usize, sign: u8, value: u16) {
    b[o] = sign;
    b[o + 1..o + 3].copy_from_slice(&value.to_be_bytes());
}

/// The angle table `b` holds for `model`.
fn difop_angles(b: &[u8], model: SensorModel) -> Option<AngleTable> {
    DifopPacket::new_checked(b)
        .unwrap()
        .angles(spec(model).unwrap())
}

/// The `ConfigError::Calibration` message of parsing `text` for `lasers` lasers.
fn csv_err(text: &str, lasers: usize) -> String {
    match AngleTable::from_csv_str(text, lasers, Path::new("a.csv")) {
        Err(ConfigError::Calibration { path, message }) => {
            assert_eq!(path, Path::new("a.csv"));
            message
        }
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn msop_new_checked_accepts_a_valid_packet_and_reads_big_endian() {
    let mut b = msop(HeaderKind::V1, |k| 35_999 - k as u16);
    set_unit(&mut b, 11, 31, 0xABCD, 0xEF);
    b[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 10]
        .copy_from_slice(&[24, 2, 29, 23, 59, 60, 3, 231, 3, 231]);
    let p = MsopPacket::new_checked(&b[..], HeaderKind::V1).unwrap();
    assert_eq!((p.azimuth(0), p.azimuth(11)), (35_999, 35_988));
    assert_eq!(
        (p.distance_raw(11, 31), p.intensity(11, 31)),
        (0xABCD, 0xEF)
    );
    assert_eq!((p.distance_raw(0, 0), p.intensity(0, 0)), (0, 0));
    // 2024-02-29 23:59:60 + 999 ms + 999 µs, UTC.
    assert_eq!(p.sensor_time_ns(), Some(1_709_251_200_999_999_000));
}

#[test]
fn msop_new_checked_errors() {
    let v1 = msop(HeaderKind::V1, |_| 0);
    let check = |b: &[u8], h| MsopPacket::new_checked(b, h).map(|_| ()).unwrap_err();
    for len in [0, 1247, 1249] {
        let mut b = v1.clone();
        b.resize(len, 0);
        assert_eq!(check(&b, HeaderKind::V1), PacketError::Length { len });
    }
    // Each header family rejects the other's magic.
    assert_eq!(check(&v1, HeaderKind::Helios), PacketError::Magic);
    let helios = msop(HeaderKind::Helios, |_| 0);
    assert_eq!(check(&helios, HeaderKind::V1), PacketError::Magic);
    assert!(MsopPacket::new_checked(&helios[..], HeaderKind::Helios).is_ok());
    let mut b = v1.clone();
    b[HEADER_LEN + 3 * BLOCK_LEN + 1] = 0xEF;
    let e = check(&b, HeaderKind::V1);
    assert_eq!(
        e,
        PacketError::BlockFlag {
            block: 3,
            flag: 0xFFEF
        }
    );
    assert_eq!(e.to_string(), "block 3 flag is 0xffef, expected 0xffee");
    let mut b = v1.clone();
    b[HEADER_LEN + 5 * BLOCK_LEN + 2..][..2].copy_from_slice(&36_000u16.to_be_bytes());
    let e = check(&b, HeaderKind::V1);
    assert_eq!(
        e,
        PacketError::Azimuth {
            block: 5,
            azimuth: 36_000
        }
    );
    assert_eq!(
        e.to_string(),
        "block 5 azimuth 36000 is outside [0, 35999] (0.01 deg)"
    );
    // Blocks are checked in order, flag then azimuth: block 2's azimuth before block 7's flag.
    let mut b = v1;
    b[HEADER_LEN + 7 * BLOCK_LEN] = 0;
    b[HEADER_LEN + 2 * BLOCK_LEN + 2..][..2].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(
        check(&b, HeaderKind::V1),
        PacketError::Azimuth {
            block: 2,
            azimuth: u16::MAX
        }
    );
}

#[test]
fn classify_msop_difop_malformed_and_foreign() {
    let v1 = msop(HeaderKind::V1, |_| 100);
    let class = |b: &[u8]| match classify(b, HeaderKind::V1) {
        Ok(Payload::Msop(_)) => "msop",
        Ok(Payload::Difop(_)) => "difop",
        Err(Rejection::Malformed) => "malformed",
        Err(Rejection::Ignored) => "ignored",
        Err(_) => "other",
    };
    assert_eq!(class(&v1), "msop");
    assert_eq!(class(&difop()), "difop");
    let mut short_difop = difop();
    short_difop.pop();
    assert_eq!(class(&short_difop), "malformed");
    // The other header family, a bad block flag, or a RoboSense magic at any length.
    assert_eq!(class(&msop(HeaderKind::Helios, |_| 100)), "malformed");
    let mut bad_flag = v1.clone();
    bad_flag[HEADER_LEN] = 0;
    assert_eq!(class(&bad_flag), "malformed");
    assert_eq!(class(&v1[..60]), "malformed");
    assert_eq!(class(&MSOP_MAGIC_HELIOS), "malformed");
    // No magic: malformed within 64 bytes of 1248, ignored beyond.
    for (len, want) in [
        (1248, "malformed"),
        (1184, "malformed"),
        (1312, "malformed"),
        (1183, "ignored"),
        (1313, "ignored"),
        (100, "ignored"),
        (0, "ignored"),
    ] {
        assert_eq!(class(&vec![0u8; len]), want, "{len}");
    }
}

#[test]
fn detect_header_by_magic() {
    assert_eq!(detect_header(&MSOP_MAGIC_V1), Some(HeaderKind::V1));
    assert_eq!(detect_header(&MSOP_MAGIC_HELIOS), Some(HeaderKind::Helios));
    assert_eq!(
        detect_header(&msop(HeaderKind::V1, |_| 0)),
        Some(HeaderKind::V1)
    );
    assert_eq!(
        detect_header(&msop(HeaderKind::Helios, |_| 0)),
        Some(HeaderKind::Helios)
    );
    assert_eq!(detect_header(&difop()), None);
    assert_eq!(detect_header(&MSOP_MAGIC_V1[..7]), None);
    assert_eq!(detect_header(&MSOP_MAGIC_HELIOS[..3]), None);
    assert_eq!(detect_header(&[]), None);
}

#[test]
fn difop_accessors() {
    let mut b = difop();
    b[8..10].copy_from_slice(&1200u16.to_be_bytes());
    b[32..34].copy_from_slice(&1_000u16.to_be_bytes());
    b[34..36].copy_from_slice(&35_000u16.to_be_bytes());
    b[300] = 5;
    let d = DifopPacket::new_checked(&b[..]).unwrap();
    assert_eq!(d.rpm(), 1200);
    assert_eq!(d.fov_cdeg(), (1_000, 35_000));
    assert_eq!(d.return_mode_byte(), 5);
    assert!(!d.bpearl_reversal());
    b[337] = 2;
    assert!(DifopPacket::new_checked(&b[..]).unwrap().bpearl_reversal());
    let e = DifopPacket::new_checked(&b[..1247])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e, PacketError::Length { len: 1247 });
    let data = msop(HeaderKind::V1, |_| 0);
    let e = DifopPacket::new_checked(&data[..]).map(|_| ()).unwrap_err();
    assert_eq!(e, PacketError::Magic);
}

#[test]
fn difop_angles_rs32_in_thousandths_rounded() {
    let mut b = difop();
    put_angle(&mut b, 468, 0, 15_000); // 15.000° -> 1500
    put_angle(&mut b, 471, 1, 25_005); // -25.005° -> -2501 (half away from zero)
    put_angle(&mut b, 474, 0, 1_234); // 1.234° -> 123
    put_angle(&mut b, 477, 0, 2_345); // 2.345° -> 235
    put_angle(&mut b, 564, 1, 4_050); // horizontal -4.050° -> -405
    put_angle(&mut b, 564 + 3 * 31, 0, 65_535); // 65.535° -> 6554
    let t = difop_angles(&b, SensorModel::Rs32).unwrap();
    assert_eq!((t.vert_cdeg.len(), t.horiz_cdeg.len()), (32, 32));
    assert_eq!(t.vert_cdeg[..5], [1500, -2501, 123, 235, 0]);
    assert_eq!(
        (t.horiz_cdeg[0], t.horiz_cdeg[1], t.horiz_cdeg[31]),
        (-405, 0, 6554)
    );
    // A 0xFF sign byte anywhere in either table: not calibrated.
    b[564 + 3 * 31] = 0xFF;
    assert_eq!(difop_angles(&b, SensorModel::Rs32), None);
    let mut b = difop();
    b[468 + 3 * 20] = 0xFF;
    assert_eq!(difop_angles(&b, SensorModel::Rs32), None);
    // The default all-0xFF table of an uncalibrated sensor.
    let mut b = difop();
    b[468..660].fill(0xFF);
    assert_eq!(difop_angles(&b, SensorModel::Bpearl), None);
}

#[test]
fn difop_angles_helios_in_hundredths_with_range_check() {
    let mut b = difop();
    put_angle(&mut b, 468, 0, 1_494);
    put_angle(&mut b, 468 + 3 * 31, 1, 9_000); // -90° is the lower bound, included
    put_angle(&mut b, 564 + 3 * 31, 2, 361); // any sign byte but 0 / 0xFF is negative
    put_angle(&mut b, 564 + 3 * 30, 0, 17_999);
    let t = difop_angles(&b, SensorModel::Helios).unwrap();
    assert_eq!(
        (t.vert_cdeg[0], t.vert_cdeg[1], t.vert_cdeg[31]),
        (1_494, 0, -9_000)
    );
    assert_eq!((t.horiz_cdeg[30], t.horiz_cdeg[31]), (17_999, -361));
    // Helios-16P reads the first 16 rows of the same tables.
    let t = difop_angles(&b, SensorModel::Helios16p).unwrap();
    assert_eq!((t.vert_cdeg.len(), t.vert_cdeg[0]), (16, 1_494));
    assert_eq!(t.horiz_cdeg, [0; 16]);
    let mut low = b.clone();
    put_angle(&mut low, 468 + 3 * 31, 1, 9_001);
    assert_eq!(difop_angles(&low, SensorModel::Helios), None);
    let mut high = b.clone();
    put_angle(&mut high, 564 + 3 * 30, 0, 18_000);
    assert_eq!(difop_angles(&high, SensorModel::Helios), None);
    let mut ff = b;
    ff[468 + 3 * 31] = 0xFF;
    assert_eq!(difop_angles(&ff, SensorModel::Helios), None);
    assert!(difop_angles(&ff, SensorModel::Helios16p).is_some());
}

#[test]
fn difop_angles_rs16_u24_ten_thousandths_lower_half_negative() {
    let mut b = difop();
    let put = |b: &mut [u8], laser: usize, raw: u32| {
        let o = 1165 + 3 * laser;
        b[o..o + 3].copy_from_slice(&raw.to_be_bytes()[1..]);
    };
    put(&mut b, 0, 150_000); // -15°
    put(&mut b, 7, 900_000); // -90°
    put(&mut b, 8, 12_345); // +1.2345° -> 123 (truncated)
    put(&mut b, 15, 1_799_999); // 179.9999° -> 17999
    b[468] = 0xFF; // The 32-laser tables are not read for the RS-16.
    let t = difop_angles(&b, SensorModel::Rs16).unwrap();
    let mut want = [0; 16];
    (want[0], want[7], want[8], want[15]) = (-1_500, -9_000, 123, 17_999);
    assert_eq!(t.vert_cdeg, want);
    assert_eq!(t.horiz_cdeg, [0; 16]);
    let mut high = b.clone();
    put(&mut high, 15, 1_800_000);
    assert_eq!(difop_angles(&high, SensorModel::Rs16), None);
    put(&mut b, 0, 900_100);
    assert_eq!(difop_angles(&b, SensorModel::Rs16), None);
}

#[test]
fn return_mode_of_each_byte() {
    let v1 = spec(SensorModel::Rs16).unwrap();
    let helios = spec(SensorModel::Helios).unwrap();
    for byte in 0..=u8::MAX {
        let want_v1 = match byte {
            0 => Some(ReturnMode::Dual),
            1 => Some(ReturnMode::Strongest),
            2 => Some(ReturnMode::Last),
            _ => None,
        };
        let want_helios = match byte {
            0 => Some(ReturnMode::Dual),
            4 => Some(ReturnMode::Strongest),
            5 => Some(ReturnMode::Last),
            6 => Some(ReturnMode::First),
            _ => None,
        };
        assert_eq!(v1.return_mode_of(byte), want_v1, "V1 {byte}");
        assert_eq!(helios.return_mode_of(byte), want_helios, "Helios {byte}");
    }
    assert_eq!(BPEARL_V4.return_mode_of(1), Some(ReturnMode::Strongest));
}

#[test]
fn packet_interval_ns_per_model_and_mode() {
    let cases: [(&ModelSpec, u64, u64); 6] = [
        (spec(SensorModel::Rs16).unwrap(), 1_332_000, 666_000),
        (spec(SensorModel::Rs32).unwrap(), 666_240, 333_120),
        (spec(SensorModel::Bpearl).unwrap(), 666_240, 333_120),
        (spec(SensorModel::Helios).unwrap(), 666_720, 333_360),
        (spec(SensorModel::Helios16p).unwrap(), 1_333_440, 666_720),
        (&BPEARL_V4, 666_720, 333_360),
    ];
    for (s, single, dual) in cases {
        for m in [ReturnMode::Strongest, ReturnMode::Last, ReturnMode::First] {
            assert_eq!(s.packet_interval_ns(m), single, "{:?} {m:?}", s.model);
        }
        for m in [
            ReturnMode::Dual,
            ReturnMode::FirstLast,
            ReturnMode::FirstStrongest,
            ReturnMode::Triple,
        ] {
            assert_eq!(s.packet_interval_ns(m), dual, "{:?} {m:?}", s.model);
        }
    }
}

#[test]
fn spec_constants() {
    let s = spec(SensorModel::Rs16).unwrap();
    assert_eq!(
        (s.model, s.header, s.lasers, s.rs16_layout),
        (SensorModel::Rs16, HeaderKind::V1, 16, true)
    );
    assert_eq!(
        (s.distance_res_m, s.block_us, s.rx_m, s.rz_m),
        (0.005, 55.5, 0.03825, 0.0)
    );
    assert_eq!(
        (s.firing_us[15], s.firing_us[16], s.firing_us[31]),
        (42.0, 55.5, 97.5)
    );
    assert!(!s.unix_time);
    let s = spec(SensorModel::Rs32).unwrap();
    assert_eq!(
        (s.header, s.lasers, s.rs16_layout, s.block_us),
        (HeaderKind::V1, 32, false, 55.52)
    );
    assert_eq!(
        (s.firing_us[15], s.firing_us[16], s.rx_m),
        (44.64, 1.44, 0.03997)
    );
    let s = spec(SensorModel::Bpearl).unwrap();
    assert_eq!(
        (s.distance_res_m, s.rx_m, s.rz_m, s.unix_time),
        (0.005, 0.01473, 0.09427, false)
    );
    let s = spec(SensorModel::Helios).unwrap();
    assert_eq!(
        (s.header, s.lasers, s.distance_res_m, s.block_us),
        (HeaderKind::Helios, 32, 0.0025, 55.56)
    );
    assert_eq!(
        (s.firing_us[31], s.rx_m, s.unix_time),
        (53.63, 0.03498, true)
    );
    let s = spec(SensorModel::Helios16p).unwrap();
    assert_eq!(
        (s.header, s.lasers, s.rs16_layout, s.firing_us[1]),
        (HeaderKind::Helios, 16, true, 1.73)
    );
    assert_eq!(
        (BPEARL_V4.distance_res_m, BPEARL_V4.rx_m, BPEARL_V4.rz_m),
        (0.0025, 0.01619, 0.09571)
    );
    assert!(BPEARL_V4.unix_time);
    for other in [SensorModel::Vlp16, SensorModel::Pandar40p] {
        assert_eq!(spec(other), None, "{other:?}");
    }
}

#[test]
fn angle_table_from_the_helios16p_csv() {
    let bytes = std::fs::read(HELIOS16P_CSV).unwrap();
    let t = AngleTable::from_bytes(&bytes, 16, Path::new(HELIOS16P_CSV)).unwrap();
    // Truncated f32·100: 8.90 is 889.99994 -> 889.
    assert_eq!(
        t.vert_cdeg,
        [
            1494, 1303, 1092, 889, 696, 546, 398, 267, 133, 0, -133, -267, -396, -523, -663, -801
        ]
    );
    assert_eq!(
        t.horiz_cdeg,
        [
            -405, 361, -400, 358, -397, 356, -396, 355, -395, 355, -395, 355, -396, 356, -397, 357
        ]
    );
    assert_eq!(t.user_channels(), (0..16).rev().collect::<Vec<u16>>());
    let e = AngleTable::from_bytes(&bytes, 17, Path::new("h.csv")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "calibration file h.csv is invalid: has fewer than 17 lines (line 17)"
    );
    assert!(matches!(
        AngleTable::from_bytes(&[b'1', 0xC0], 1, Path::new("h.csv")),
        Err(ConfigError::CalibrationIo { .. })
    ));
}

#[test]
fn angle_table_csv_rules() {
    let p = Path::new("a.csv");
    let t = AngleTable::from_csv_str(
        "1.5\n  \t\n1.5,\n,2\n -1.999 , 1.005 , 7\n179.999,-90\n0,0\n",
        5,
        p,
    )
    .unwrap();
    assert_eq!(t.vert_cdeg, [150, 150, 0, -199, 17_999]);
    assert_eq!(t.horiz_cdeg, [0, 0, 200, 100, -9_000]);
    // Ranks by vertical angle; equal angles share the rank.
    assert_eq!(t.user_channels(), [2, 2, 1, 0, 4]);
    assert_eq!(
        csv_err("1,0\n\n2,0\n", 3),
        "has fewer than 3 lines (line 3)"
    );
    assert_eq!(csv_err("", 1), "has fewer than 1 lines (line 1)");
    assert_eq!(
        csv_err("1,0\nabc,1\n", 2),
        "line 2: vertical angle 'abc' is not a number"
    );
    assert_eq!(
        csv_err("1,x\n", 1),
        "line 1: horizontal angle 'x' is not a number"
    );
    let range = |what: &str, v: &str| format!("line 1: {what} angle {v} is outside [-90, 180) deg");
    assert_eq!(csv_err("180,0", 1), range("vertical", "180"));
    assert_eq!(csv_err("-90.01,0", 1), range("vertical", "-90.01"));
    assert_eq!(csv_err("NaN,0", 1), range("vertical", "NaN"));
    assert_eq!(csv_err("0,inf", 1), range("horizontal", "inf"));
    assert_eq!(csv_err("0,200", 1), range("horizontal", "200"));
}

/// A Helios decoder (range (1, 100) m, bounds excluded; no FOV): laser `i` at `10° − i°` vertical, except laser 5 at
/// 4.5° with a −1.5° horizontal offset (so its channel is its rank, 26).
fn helios_decoder() -> RobosenseDecoder {
    let mut vert: Vec<i32> = (0..32).map(|i| 1000 - 100 * i).collect();
    let mut horiz = vec![0; 32];
    (vert[5], horiz[5]) = (450, -150);
    let settings = DecoderSettings {
        min_range_m: 1.0,
        max_range_m: 100.0,
        fov_cdeg: None,
    };
    let angles = AngleTable {
        vert_cdeg: vert,
        horiz_cdeg: horiz,
    };
    RobosenseDecoder::new(spec(SensorModel::Helios).unwrap(), angles, settings)
}

/// Every point `d` decodes from `b` in `mode`.
fn decode_all(d: &RobosenseDecoder, b: &[u8], mode: ReturnMode) -> Vec<DecodedPoint> {
    let p = MsopPacket::new_checked(b, HeaderKind::Helios).unwrap();
    let mut v = Vec::new();
    d.decode(&p, mode, |x| v.push(x));
    v
}

/// `|a − b| ≤ 1e-5`.
fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() <= 1e-5
}

#[test]
fn decode_single_return_geometry() {
    let mut d = helios_decoder();
    assert_eq!(d.nominal_az_diff(), 20);
    // Blocks 0.20° apart (the nominal advance at 600 rpm).
    let mut b = msop(HeaderKind::Helios, |k| 10_000 + 20 * k as u16);
    set_unit(&mut b, 2, 5, 4_000, 77); // 10 m
    set_unit(&mut b, 11, 0, 2_000, 9); // 5 m, last block: nominal advance
    set_unit(&mut b, 0, 2, 400, 1); // 1.0 m: not above min_range_m
    set_unit(&mut b, 0, 3, 40_000, 1); // 100.0 m: not below max_range_m
    let pts = decode_all(&d, &b, ReturnMode::Strongest);
    assert_eq!(pts.len(), 2);
    let (a, z) = (pts[0], pts[1]);
    // h = 10040 + trunc(20 · 8.65 / 55.56) = 10043, hf = h − 150, v = 450.
    assert_eq!(
        (a.block, a.chan, a.block_azimuth_cdeg, a.azimuth_cdeg),
        (2, 5, 10_040, 9_893)
    );
    // 2 · 55.56 µs + 8.65 µs.
    assert_eq!(a.offset_ns, 111_120 + 8_650);
    let q = a.point;
    assert_eq!((q.channel, q.intensity, q.time_stamp), (26, 77, 0));
    assert_eq!(q.return_type, ReturnType::Strongest as u8);
    assert_eq!(q.distance, 10.0);
    // x = d·cos v·cos hf + Rx·cos h, y = −d·cos v·sin hf − Rx·sin h, z = d·sin v.
    assert!(close(q.x, -1.553_824_019_167_663_8), "{}", q.x);
    assert!(close(q.y, -9.882_736_256_617_976), "{}", q.y);
    assert!(close(q.z, 0.784_590_957_278_449_4), "{}", q.z);
    assert!(close(q.azimuth, 1.726_654_171_943_664_6), "{}", q.azimuth);
    assert!(
        close(q.elevation, 0.078_539_816_339_744_83),
        "{}",
        q.elevation
    );
    // Channel 0 of the last block fires at the block time and azimuth.
    assert_eq!(
        (z.block, z.chan, z.azimuth_cdeg, z.offset_ns),
        (11, 0, 10_220, 611_160)
    );
    let q = z.point;
    assert_eq!((q.channel, q.intensity, q.distance), (31, 9, 5.0));
    assert!(close(q.x, -1.047_963_631_144_977_1), "{}", q.x);
    assert!(close(q.y, -4.847_023_761_033_667), "{}", q.y);
    assert!(close(q.z, 0.868_240_888_334_651_6), "{}", q.z);
    assert!(close(q.azimuth, 1.783_726_453_781_128), "{}", q.azimuth);
    assert!(
        close(q.elevation, 0.174_532_925_199_432_95),
        "{}",
        q.elevation
    );
    // The single-return type follows the mode.
    for (mode, rt) in [
        (ReturnMode::Last, ReturnType::Last),
        (ReturnMode::First, ReturnType::First),
    ] {
        let pts = decode_all(&d, &b, mode);
        assert_eq!(pts[0].point.return_type, rt as u8, "{mode:?}");
    }
    // At 1200 rpm the nominal advance doubles; the interpolation uses the measured one.
    d.set_rpm(1200);
    assert_eq!(d.nominal_az_diff(), 40);
    assert_eq!(
        decode_all(&d, &b, ReturnMode::Strongest)[0].azimuth_cdeg,
        9_893
    );
}

#[test]
fn decode_dual_return_types_and_times() {
    use ReturnType::*;
    let d = helios_decoder();
    // Blocks 2k and 2k+1 are the two returns of one firing (same azimuth).
    let mut b = msop(HeaderKind::Helios, |k| 10_000 + 20 * (k / 2) as u16);
    set_unit(&mut b, 4, 5, 4_000, 77);
    set_unit(&mut b, 5, 5, 6_000, 90); // farther and stronger
    set_unit(&mut b, 4, 6, 5_000, 10);
    set_unit(&mut b, 5, 6, 5_000, 20); // same distance: one Identical point
    set_unit(&mut b, 5, 7, 5_000, 20); // partner empty: Identical
    set_unit(&mut b, 4, 8, 3_000, 50);
    set_unit(&mut b, 5, 8, 7_000, 50); // intensity tie: the first slot is strongest
    let got: Vec<_> = decode_all(&d, &b, ReturnMode::Dual)
        .iter()
        .map(|p| {
            (
                p.block,
                p.chan,
                p.point.return_type,
                p.offset_ns,
                p.azimuth_cdeg,
            )
        })
        .collect();
    let t = |r: ReturnType| r as u8;
    assert_eq!(
        got,
        [
            (4, 5, t(FirstWeak), 111_120 + 8_650, 9_893),
            (4, 6, t(Identical), 111_120 + 10_380, 10_043),
            (4, 8, t(FirstStrongest), 111_120 + 13_840, 10_044),
            (5, 5, t(LastStrongest), 111_120 + 8_650, 9_893),
            (5, 7, t(Identical), 111_120 + 12_110, 10_044),
            (5, 8, t(LastWeak), 111_120 + 13_840, 10_044),
        ]
    );
}

#[test]
fn decode_interpolates_with_the_measured_advance_up_to_1_degree() {
    let d = helios_decoder();
    // Channel 8 fires 13.84 µs into its block: h = block_az + trunc(az_diff · 13.84 / 55.56).
    let az_of = |azimuths: &dyn Fn(usize) -> u16, block: usize| {
        let mut b = msop(HeaderKind::Helios, azimuths);
        set_unit(&mut b, block, 8, 4_000, 1);
        let pts = decode_all(&d, &b, ReturnMode::Strongest);
        assert_eq!(pts.len(), 1);
        pts[0].azimuth_cdeg
    };
    // Measured 0.50° advance: trunc(50 · 0.2491) = 12.
    assert_eq!(az_of(&|k| 10_000 + 50 * k as u16, 2), 10_112);
    // Exactly 1.00°: still measured, trunc(100 · 0.2491) = 24.
    assert_eq!(az_of(&|k| 10_000 + 100 * k as u16, 2), 10_224);
    // More than 1° to the next block (a blind zone): the nominal 0.20°, trunc(20 · 0.2491) = 4.
    assert_eq!(az_of(&|k| 10_000 + 101 * k as u16, 2), 10_206);
    // The last block has no next one: the nominal advance.
    assert_eq!(az_of(&|k| 10_000 + 50 * k as u16, 11), 10_554);
    // The advance to the next block wraps through 0°.
    assert_eq!(az_of(&|k| (35_980 + 50 * k as u16) % 36_000, 0), 35_992);
}

#[test]
fn v1_calendar_time_rejects_impossible_fields() {
    let at = |t: [u8; 10]| {
        let mut b = msop(HeaderKind::V1, |_| 0);
        b[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 10].copy_from_slice(&t);
        MsopPacket::new_checked(&b[..], HeaderKind::V1)
            .unwrap()
            .sensor_time_ns()
    };
    // 2000-01-01 00:00:00.000001 UTC.
    assert_eq!(
        at([0, 1, 1, 0, 0, 0, 0, 0, 0, 1]),
        Some(946_684_800_000_001_000)
    );
    for bad in [
        [0, 0, 1, 0, 0, 0, 0, 0, 0, 0],   // month 0
        [0, 13, 1, 0, 0, 0, 0, 0, 0, 0],  // month 13
        [0, 1, 32, 0, 0, 0, 0, 0, 0, 0],  // day 32
        [0, 1, 1, 24, 0, 0, 0, 0, 0, 0],  // hour 24
        [0, 1, 1, 0, 60, 0, 0, 0, 0, 0],  // minute 60
        [0, 1, 1, 0, 0, 61, 0, 0, 0, 0],  // second 61
        [0, 1, 1, 0, 0, 0, 3, 232, 0, 0], // 1000 ms
        [0, 1, 1, 0, 0, 0, 0, 0, 3, 232], // 1000 µs
    ] {
        assert_eq!(at(bad), None, "{bad:?}");
    }
}
