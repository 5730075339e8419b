//! RoboSense models without a capture (RS-16, RS-32, Bpearl, Helios): synthetic MSOP/DIFOP
//! packets built from the documented layout (module docs of `sensor::robosense`), decoded and
//! checked against values computed by hand from the manual's formulas:
//! 12 blocks of 100 B (`FF EE`, azimuth BE 0.01°, 32 × (BE distance, intensity)); RS-16 two
//! firing sequences per block (single return) vs one for RS-32; distance unit 5 mm (RS-16/32,
//! Bpearl) vs 2.5 mm (Helios); x = d·cos v·cos hf + Rx·cos h, y = −d·cos v·sin hf − Rx·sin h,
//! z = d·sin v + Rz.

use std::path::PathBuf;

use lidarxdp_core::point::ReturnType;
use lidarxdp_core::sensor::robosense::{
    self, AngleTable, BLOCK_LEN, DIFOP_MAGIC, DecodedPoint, DecoderSettings, DifopPacket,
    HEADER_LEN, HeaderKind, MSOP_MAGIC_HELIOS, MSOP_MAGIC_V1, MsopPacket, PACKET_LEN,
    RobosenseDecoder,
};
use lidarxdp_core::sensor::{ReturnMode, SensorConfig, SensorModel};

/// RS-16 rows in packet order: −15..−1° then 15..1° (RS-LiDAR-16 manual, laser table).
const RS16_CSV: &str = "-15,0\n-13,0\n-11,0\n-9,0\n-7,0\n-5,0\n-3,0\n-1,0\n\
                        15,0\n13,0\n11,0\n9,0\n7,0\n5,0\n3,0\n1,0\n";

fn rs32_csv() -> String {
    // 32 rows: vertical −25 + i degrees, horizontal alternating ±2.5 degrees.
    (0..32)
        .map(|i| format!("{},{}\n", -25 + i, if i % 2 == 0 { "-2.5" } else { "2.5" }))
        .collect()
}

fn temp_csv(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("lidarxdp-rs-{name}-{}.csv", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// 2024-02-29 12:34:56.789123 as a V1 calendar timestamp.
const YMD: [u8; 10] = [24, 2, 29, 12, 34, 56, 0x03, 0x15, 0x00, 0x7B];
const YMD_NS: u64 = 1_709_210_096_789_123_000;

fn helios_ts(sec: u64, us: u32) -> [u8; 10] {
    let mut t = [0u8; 10];
    t[..6].copy_from_slice(&sec.to_be_bytes()[2..]);
    t[6..].copy_from_slice(&us.to_be_bytes());
    t
}

/// An MSOP packet: block b azimuth `az0 + step·(b or b/2 when paired)`, distance `dist(b, c)`,
/// intensity `inten(b, c)`.
fn msop(
    header: HeaderKind,
    az0: u16,
    step: u16,
    paired: bool,
    ts: [u8; 10],
    dist: impl Fn(usize, usize) -> u16,
    inten: impl Fn(usize, usize) -> u8,
) -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    match header {
        HeaderKind::V1 => b[..8].copy_from_slice(&MSOP_MAGIC_V1),
        HeaderKind::Helios => b[..4].copy_from_slice(&MSOP_MAGIC_HELIOS),
    }
    b[20..30].copy_from_slice(&ts);
    for blk in 0..12 {
        let o = HEADER_LEN + blk * BLOCK_LEN;
        b[o] = 0xFF;
        b[o + 1] = 0xEE;
        let k = if paired { blk / 2 } else { blk } as u32;
        let az = ((u32::from(az0) + u32::from(step) * k) % 36_000) as u16;
        b[o + 2..o + 4].copy_from_slice(&az.to_be_bytes());
        for c in 0..32 {
            b[o + 4 + 3 * c..o + 6 + 3 * c].copy_from_slice(&dist(blk, c).to_be_bytes());
            b[o + 6 + 3 * c] = inten(blk, c);
        }
    }
    b
}

fn decoder(model: SensorModel, csv: &str) -> RobosenseDecoder {
    let spec = robosense::spec(model).unwrap();
    let angles = AngleTable::from_csv_str(csv, spec.lasers, std::path::Path::new("x.csv")).unwrap();
    RobosenseDecoder::new(
        spec,
        angles,
        DecoderSettings {
            min_range_m: 0.2,
            max_range_m: 200.0,
            fov_cdeg: None,
        },
    )
}

fn decode(d: &RobosenseDecoder, pkt: &[u8], mode: ReturnMode) -> Vec<DecodedPoint> {
    let p = MsopPacket::new_checked(pkt, d.spec().header).unwrap();
    let mut v = Vec::new();
    d.decode(&p, mode, |x| v.push(x));
    v
}

fn find(v: &[DecodedPoint], block: u8, chan: u8) -> Option<DecodedPoint> {
    v.iter()
        .copied()
        .find(|d| d.block == block && d.chan == chan)
}

#[test]
fn rs16_single_return_two_sequences_per_block() {
    let d = decoder(SensorModel::Rs16, RS16_CSV);
    assert_eq!(d.nominal_az_diff(), 20); // round(36000 · 10 Hz · 55.50 µs)
    // 10 m everywhere (2000 · 5 mm), 90.00° + 0.40° per block.
    let pkt = msop(HeaderKind::V1, 9000, 40, false, YMD, |_, _| 2000, |_, _| 7);
    let p = MsopPacket::new_checked(&pkt[..], HeaderKind::V1).unwrap();
    assert_eq!(p.sensor_time_ns(), Some(YMD_NS));
    let v = decode(&d, &pkt, ReturnMode::Strongest);
    assert_eq!(v.len(), 12 * 32);
    let a = find(&v, 0, 0).unwrap();
    assert_eq!((a.azimuth_cdeg, a.offset_ns, a.point.channel), (9000, 0, 0));
    assert_eq!(a.point.distance, 10.0);
    assert_eq!(a.point.intensity, 7);
    assert_eq!(a.point.return_type, ReturnType::Strongest as u8);
    assert!(a.point.x.abs() < 1e-5);
    assert!((a.point.y - -9.697_508).abs() < 1e-5, "{}", a.point.y); // −10·cos15° − Rx
    assert!((a.point.z - -2.588_191).abs() < 1e-5);
    assert!((a.point.elevation - (-15f32).to_radians()).abs() < 1e-6);
    // Second sequence of laser 0 (channel 16): half a block later, +0.20°.
    let b = find(&v, 0, 16).unwrap();
    assert_eq!(
        (b.azimuth_cdeg, b.offset_ns, b.point.channel),
        (9020, 55_500, 0)
    );
    // Laser 15 (+1°): trunc(40 · 42.0/111.0) = 15; rank 8 among the 16 angles.
    let c = find(&v, 0, 15).unwrap();
    assert_eq!(
        (c.azimuth_cdeg, c.offset_ns, c.point.channel),
        (9015, 42_000, 8)
    );
    // Laser 8 (+15°) is the top channel.
    assert_eq!(find(&v, 0, 8).unwrap().point.channel, 15);
    // Block 11 (last): nominal advance 2·20, second sequence at 11·111 + 55.5 µs.
    let e = find(&v, 11, 16).unwrap();
    assert_eq!((e.azimuth_cdeg, e.offset_ns), (9000 + 440 + 20, 1_276_500));
}

#[test]
fn rs16_dual_return_channels_16_to_31_are_second_returns() {
    let d = decoder(SensorModel::Rs16, RS16_CSV);
    // Laser k: first return 2000; second: equal for k%4==0, missing for 1, 3000 for 2 & 3
    // (3: second return stronger).
    let pkt = msop(
        HeaderKind::V1,
        100,
        20,
        false,
        YMD,
        |_, c| match (c / 16, c % 4) {
            (0, _) => 2000,
            (_, 0) => 2000,
            (_, 1) => 0,
            _ => 3000,
        },
        |_, c| if c >= 16 && c % 4 == 3 { 200 } else { 50 },
    );
    let v = decode(&d, &pkt, ReturnMode::Dual);
    // Per block: 16 first returns + 8 second returns (k%4 in {2,3}).
    assert_eq!(v.len(), 12 * 24);
    let ty = |b, c| find(&v, b, c).map(|x| x.point.return_type);
    assert_eq!(ty(0, 0), Some(ReturnType::Identical as u8));
    assert_eq!(ty(0, 16), None, "identical second return merged");
    assert_eq!(ty(0, 1), Some(ReturnType::Identical as u8));
    assert_eq!(ty(0, 2), Some(ReturnType::FirstStrongest as u8));
    assert_eq!(ty(0, 18), Some(ReturnType::LastWeak as u8));
    assert_eq!(ty(0, 3), Some(ReturnType::FirstWeak as u8));
    assert_eq!(ty(0, 19), Some(ReturnType::LastStrongest as u8));
    // Both returns share the firing time and azimuth: one sequence per block, 55.5 µs apart.
    let (f, s) = (find(&v, 2, 2).unwrap(), find(&v, 2, 18).unwrap());
    assert_eq!(
        (f.offset_ns, s.offset_ns),
        (111_000 + 5_600, 111_000 + 5_600)
    );
    assert_eq!(f.azimuth_cdeg, s.azimuth_cdeg);
    assert_eq!(f.azimuth_cdeg, 100 + 40 + 2); // trunc(20 · 5.6/55.5) = 2
    assert_eq!(s.point.distance, 15.0);
}

#[test]
fn rs32_single_and_dual() {
    let csv = rs32_csv();
    let d = decoder(SensorModel::Rs32, &csv);
    let pkt = msop(
        HeaderKind::V1,
        35_900,
        20,
        false,
        YMD,
        |_, _| 1000,
        |_, _| 9,
    );
    let v = decode(&d, &pkt, ReturnMode::Last);
    assert_eq!(v.len(), 384);
    // Channel 15 fires 44.64 µs into the block: trunc(20 · 44.64/55.52) = 16; its horizontal
    // offset +2.5°; −25 + 15 = −10°.
    let a = find(&v, 0, 15).unwrap();
    assert_eq!(a.azimuth_cdeg, (35_900 + 16 + 250) % 36_000);
    assert_eq!((a.offset_ns, a.point.channel), (44_640, 15));
    assert_eq!(a.point.return_type, ReturnType::Last as u8);
    assert_eq!(a.point.distance, 5.0);
    // The block azimuths wrap inside the packet (359.00, 359.20, ..., 1.20): h keeps growing.
    let w = find(&v, 6, 0).unwrap();
    assert_eq!((w.block_azimuth_cdeg, w.azimuth_cdeg), (20, 35_770));
    assert_eq!(w.offset_ns, 6 * 55_520);
    let x = 5.0 * (-25f32).to_radians().cos() * (-2.3f32).to_radians().cos()
        + 0.03997 * 0.2f32.to_radians().cos();
    assert!((w.point.x - x).abs() < 1e-5, "{} {x}", w.point.x);
    // Dual: blocks 2k, 2k+1 share an azimuth and a firing time.
    let pkt = msop(
        HeaderKind::V1,
        1000,
        20,
        true,
        YMD,
        |b, c| if b % 2 == 0 || c < 16 { 1000 } else { 1200 },
        |_, _| 9,
    );
    let v = decode(&d, &pkt, ReturnMode::Dual);
    assert_eq!(v.len(), 6 * (32 + 16));
    // Channel 20 fires 12.96 µs into the firing of pair 1 (55.52 µs).
    let a = find(&v, 3, 20).unwrap();
    let b = find(&v, 2, 20).unwrap();
    assert_eq!(
        (a.offset_ns, b.offset_ns),
        (55_520 + 12_960, 55_520 + 12_960)
    );
    // Equal intensity: the first slot (block 2, shorter) is the strongest.
    assert_eq!(
        (b.point.return_type, a.point.return_type),
        (ReturnType::FirstStrongest as u8, ReturnType::LastWeak as u8)
    );
    assert!(find(&v, 3, 0).is_none());
    assert_eq!(
        find(&v, 2, 0).unwrap().point.return_type,
        ReturnType::Identical as u8
    );
}

#[test]
fn helios_and_bpearl_units_and_lens_offsets() {
    let csv = rs32_csv();
    let h = decoder(SensorModel::Helios, &csv);
    let pkt = msop(
        HeaderKind::Helios,
        0,
        20,
        false,
        helios_ts(1_700_000_000, 250_000),
        |_, _| 4000,
        |_, _| 1,
    );
    let p = MsopPacket::new_checked(&pkt[..], HeaderKind::Helios).unwrap();
    assert_eq!(p.sensor_time_ns(), Some(1_700_000_000_250_000_000));
    let v = decode(&h, &pkt, ReturnMode::Strongest);
    let a = find(&v, 0, 31).unwrap(); // 4000 · 2.5 mm; 53.63 µs: trunc(20·53.63/55.56) = 19
    assert_eq!(a.point.distance, 10.0);
    assert_eq!((a.azimuth_cdeg, a.offset_ns), (19 + 250, 53_630));
    let b = decoder(SensorModel::Bpearl, &csv);
    let pkt = msop(HeaderKind::V1, 0, 20, false, YMD, |_, _| 4000, |_, _| 1);
    let v = decode(&b, &pkt, ReturnMode::Strongest);
    let a = find(&v, 0, 25).unwrap(); // 20 m, vertical 0°, z = Rz
    assert_eq!(a.point.distance, 20.0);
    assert!((a.point.z - 0.09427).abs() < 1e-6);
    // A Helios header is not a V1 packet and vice versa; the magic tells the families apart.
    assert!(MsopPacket::new_checked(&pkt[..], HeaderKind::Helios).is_err());
    assert_eq!(robosense::detect_header(&pkt), Some(HeaderKind::V1));
    let helios = msop(
        HeaderKind::Helios,
        0,
        20,
        false,
        [0; 10],
        |_, _| 1,
        |_, _| 1,
    );
    assert_eq!(robosense::detect_header(&helios), Some(HeaderKind::Helios));
    assert_eq!(robosense::detect_header(&DIFOP_MAGIC), None);
}

fn difop_v1(return_mode: u8, rpm: u16) -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    b[..8].copy_from_slice(&DIFOP_MAGIC);
    b[8..10].copy_from_slice(&rpm.to_be_bytes());
    b[34..36].copy_from_slice(&36_000u16.to_be_bytes());
    b[300] = return_mode;
    b
}

#[test]
fn difop_tables_override_csv() {
    // RS-32: 0.001° units, rounded to 0.01°.
    let mut b = difop_v1(0, 1200);
    for i in 0..32 {
        let v = 15_000u16 - 1000 * (i as u16 % 10); // 15.000°, 14.000°, ...
        b[468 + 3 * i] = 0;
        b[469 + 3 * i..471 + 3 * i].copy_from_slice(&v.to_be_bytes());
        b[564 + 3 * i] = 1;
        b[565 + 3 * i..567 + 3 * i].copy_from_slice(&2_504u16.to_be_bytes()); // −2.504°
    }
    let d = DifopPacket::new_checked(&b[..]).unwrap();
    let spec = robosense::spec(SensorModel::Rs32).unwrap();
    let t = d.angles(spec).unwrap();
    assert_eq!(
        (t.vert_cdeg[0], t.vert_cdeg[1], t.horiz_cdeg[0]),
        (1500, 1400, -250)
    );
    assert_eq!(
        spec.return_mode_of(d.return_mode_byte()),
        Some(ReturnMode::Dual)
    );
    let mut dec = decoder(SensorModel::Rs32, &rs32_csv());
    dec.set_rpm(d.rpm());
    assert_eq!(dec.nominal_az_diff(), 40); // round(36000 · 20 Hz · 55.52 µs)
    // Uncalibrated (sign 0xFF) tables are ignored.
    b[468] = 0xFF;
    assert!(
        DifopPacket::new_checked(&b[..])
            .unwrap()
            .angles(spec)
            .is_none()
    );
    // RS-16: 16 × u24 in 0.0001°, lasers 0..7 negative.
    let mut b = difop_v1(2, 600);
    for i in 0..16 {
        let v = 150_000u32 - 20_000 * (i as u32 % 8);
        b[1165 + 3 * i..1168 + 3 * i].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    let spec16 = robosense::spec(SensorModel::Rs16).unwrap();
    let d = DifopPacket::new_checked(&b[..]).unwrap();
    let t = d.angles(spec16).unwrap();
    assert_eq!(&t.vert_cdeg[..2], &[-1500, -1300]);
    assert_eq!(&t.vert_cdeg[8..10], &[1500, 1300]);
    assert_eq!(spec16.return_mode_of(2), Some(ReturnMode::Last));
    assert_eq!(spec16.return_mode_of(4), None);
    // A DIFOP through the pipeline switches RS-32 to dual without any MSOP hint.
    let csv = temp_csv("rs32d", &rs32_csv());
    let mut p =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Rs32, &csv)).unwrap();
    let mut out = Vec::new();
    p.push(&difop_v1(0, 600), 0, &mut out);
    p.push(
        &msop(HeaderKind::V1, 0, 20, false, YMD, |_, _| 1000, |_, _| 1),
        1,
        &mut out,
    );
    assert_eq!(p.return_mode(), Some(ReturnMode::Dual));
    let _ = std::fs::remove_file(csv);
}

#[test]
fn csv_errors_name_the_line() {
    let p = std::path::Path::new("cal.csv");
    let e = AngleTable::from_csv_str("1,2\nx,3\n", 2, p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("'x'"), "{e}");
    let e = AngleTable::from_csv_str("1,2\n", 2, p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("fewer than 2"), "{e}");
    let e = AngleTable::from_csv_str("1,2\n185,0\n", 2, p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("[-90, 180)"), "{e}");
    let t = AngleTable::from_csv_str("-1.5\n2.25,-0.5\n", 2, p).unwrap();
    assert_eq!((t.vert_cdeg, t.horiz_cdeg), (vec![-150, 225], vec![0, -50]));
}

/// The V4 variant's 2.5 mm unit moves the range gate's raw window with it: the datasheet's
/// (0.1, 100) m exclusive gate keeps raw 41 (0.1025 m) and 39,999 (99.9975 m) and drops raw 40
/// (0.1 m) and 40,000 (100 m); with the V1 unit (5 mm) raw 39,999 would be 199.995 m and raw 21
/// would pass.
#[test]
fn bpearl_v4_range_gate_follows_its_distance_unit() {
    let raws: [u16; 5] = [21, 40, 41, 39_999, 40_000];
    let pkt = msop(
        HeaderKind::V1,
        0,
        20,
        false,
        helios_ts(1_700_000_000, 5),
        |_, c| raws[c % raws.len()],
        |_, _| 1,
    );
    let csv = temp_csv("bpv4gate", &rs32_csv());
    let mut pl =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Bpearl, &csv)).unwrap();
    let mut v4 = pkt.clone();
    v4[31] = 0x03;
    v4[32] = 0x04;
    let mut out = Vec::new();
    pl.push(&v4, 42, &mut out);
    pl.flush(&mut out);
    let _ = std::fs::remove_file(csv);
    assert_eq!(out.len(), 1);
    let mut kept: Vec<f32> = out[0]
        .points
        .autoware()
        .iter()
        .map(|p| p.distance)
        .collect();
    kept.sort_by(f32::total_cmp);
    kept.dedup();
    assert_eq!(kept, vec![41.0f32 * 0.0025, 39_999.0f32 * 0.0025]);
}

#[test]
fn bpearl_v4_firmware_variant_is_detected_from_the_header() {
    // V1 magic, lidar type 0x03 / model 0x04 at bytes 31/32: 2.5 mm, Unix timestamp, 55.56 µs.
    let mut pkt = msop(
        HeaderKind::V1,
        0,
        20,
        false,
        helios_ts(1_700_000_000, 5),
        |_, _| 4000,
        |_, _| 1,
    );
    pkt[31] = 0x03;
    pkt[32] = 0x04;
    let p = MsopPacket::new_checked(&pkt[..], HeaderKind::V1).unwrap();
    assert_eq!(p.lidar_type_model(), robosense::BPEARL_V4_TYPE_MODEL);
    assert_eq!(p.sensor_time_ns_as(true), Some(1_700_000_000_000_005_000));
    assert_eq!(p.sensor_time_ns(), None, "not a calendar date");
    let mut d = decoder(SensorModel::Bpearl, &rs32_csv());
    d.set_spec(&robosense::BPEARL_V4);
    let v = decode(&d, &pkt, ReturnMode::Strongest);
    let a = find(&v, 1, 25).unwrap(); // vertical 0°: z = Rz (V4)
    assert_eq!(a.point.distance, 10.0);
    assert!((a.point.z - 0.09571).abs() < 1e-6);
    assert_eq!(a.offset_ns, 55_560 + 41_700);
    // Through the pipeline: the frame start comes from the Unix timestamp.
    let csv = temp_csv("bpv4", &rs32_csv());
    let mut pl =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Bpearl, &csv)).unwrap();
    let mut out = Vec::new();
    pl.push(&pkt, 42, &mut out);
    pl.flush(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.start_ns, 1_700_000_000_000_005_000);
    assert_eq!(out[0].points.len(), 384);
    assert!(out[0].points.autoware().iter().all(|p| p.distance == 10.0));
    // A DIFOP with the reversal flag (byte 337) mirrors azimuths. Its (all-zero, valid) angle
    // table replaces the CSV, so channel 0 of block 1 (h = 0.20°) lands at 359.80°.
    let mut difop = difop_v1(1, 600);
    difop[337] = 1;
    assert!(
        DifopPacket::new_checked(&difop[..])
            .unwrap()
            .bpearl_reversal()
    );
    let mut pl =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Bpearl, &csv)).unwrap();
    let mut out = Vec::new();
    pl.push(&difop, 1, &mut out);
    pl.push(&pkt, 42, &mut out);
    pl.flush(&mut out);
    let az = (out[0].points.autoware()[32].azimuth.to_degrees() * 100.0).round();
    assert_eq!(az, 35_980.0);
    let _ = std::fs::remove_file(csv);
}
