//! HDL-32E and HDL-64E S2/S3 have no shared capture: these tests decode synthetic packets laid
//! out as the manuals describe and assert the exact values of the layout and of the
//! calibration math (HDL-64E manual, appendix "Calibration"; see `sensor::velodyne::multi`).
//! Expected values were computed independently in f64 (Python) from the formulas; the
//! decoder works in f32, hence the 1e-5 m tolerance on coordinates.

use lidarxdp_core::point::ReturnType;
use lidarxdp_core::sensor::calibration::VelodyneCalibration;
use lidarxdp_core::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp_core::sensor::velodyne::{DecodedPoint, DecoderSettings, PacketError};
use lidarxdp_core::sensor::{DecodeFlavor, ReturnMode, SensorModel};

/// A 1206-byte packet: block flags `FF flag[b]`, azimuths `az[b]`, distances `dist(b, slot)`,
/// reflectivity 100, timestamp 1,000,000 µs, return-mode byte `mode`, product id `pid`.
fn packet(
    flags: [u8; 12],
    az: [u16; 12],
    dist: impl Fn(usize, usize) -> u16,
    mode: u8,
    pid: u8,
) -> Vec<u8> {
    let mut b = vec![0u8; 1206];
    for blk in 0..12 {
        let o = blk * 100;
        b[o] = 0xFF;
        b[o + 1] = flags[blk];
        b[o + 2..o + 4].copy_from_slice(&az[blk].to_le_bytes());
        for s in 0..32 {
            b[o + 4 + 3 * s..o + 6 + 3 * s].copy_from_slice(&dist(blk, s).to_le_bytes());
            b[o + 6 + 3 * s] = 100;
        }
    }
    b[1200..1204].copy_from_slice(&1_000_000u32.to_le_bytes());
    b[1204] = mode;
    b[1205] = pid;
    b
}

fn settings(flavor: DecodeFlavor) -> DecoderSettings {
    DecoderSettings {
        min_range_m: 0.3,
        max_range_m: 300.0,
        fov: None,
        flavor,
    }
}

/// HDL-32E vertical angles (manual, laser table): even ids from −30.67° up by 4/3°, odd ids
/// from −9.33° up by 4/3°.
fn hdl32_yaml() -> String {
    let mut s = String::from("lasers:\n");
    for i in 0..32 {
        let deg: f64 = if i % 2 == 0 {
            -30.67 + (i / 2) as f64 * 4.0 / 3.0
        } else {
            -9.33 + (i / 2) as f64 * 4.0 / 3.0
        };
        s += &format!(
            "- {{laser_id: {i}, rot_correction: 0.0, vert_correction: {}}}\n",
            deg.to_radians()
        );
    }
    s + "num_lasers: 32\ndistance_resolution: 0.002\n"
}

fn decode(d: &MultiDecoder, model: SensorModel, pkt: &[u8]) -> Vec<DecodedPoint> {
    let p = multi::classify_model(model, pkt).expect("valid packet");
    let mut v = Vec::new();
    d.decode(&p, |x| v.push(x));
    v
}

fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() < 1e-5
}

#[test]
fn hdl32e_layout_geometry_and_timing() {
    let calib = VelodyneCalibration::from_yaml_str(&hdl32_yaml(), 32).unwrap();
    // Rings: even ids are the 16 lowest beams.
    assert_eq!(calib.lasers[0].ring, 0);
    assert_eq!(calib.lasers[1].ring, 16);
    assert_eq!(calib.lasers[31].ring, 31);
    let az: [u16; 12] = std::array::from_fn(|b| 1000 + 17 * b as u16);
    // Laser 0 at 10 m (5000 × 2 mm), laser 1 at 5 m, others no return.
    let pkt = packet(
        [0xEE; 12],
        az,
        |_, s| [5000, 2500].get(s).copied().unwrap_or(0),
        0x37,
        0x21,
    );
    let neb = MultiDecoder::new(SensorModel::Hdl32e, &calib, settings(DecodeFlavor::Nebula));
    let pts = decode(&neb, SensorModel::Hdl32e, &pkt);
    assert_eq!(pts.len(), 24); // 2 lasers × 12 blocks
    let p0 = pts[0];
    assert_eq!((p0.block, p0.slot, p0.azimuth_cdeg), (0, 0, 1000));
    assert!(close(p0.point.x, 8.470523258863135), "{:?}", p0.point);
    assert!(close(p0.point.y, -1.4935817912561637));
    assert!(close(p0.point.z, -5.100926303514556));
    assert_eq!(p0.point.distance, 10.0);
    assert_eq!(p0.point.return_type, ReturnType::Strongest as u8);
    assert_eq!(p0.point.channel, 0);
    // Laser 1: Nebula interpolates 17 · 2.304/55.296 · 1 = 0.71 → 10.01°.
    let p1 = pts[1];
    assert_eq!((p1.slot, p1.azimuth_cdeg, p1.point.channel), (1, 1001, 16));
    assert!(close(p1.point.x, 4.858748880768764));
    assert!(close(p1.point.y, -0.8576029244435764));
    assert!(close(p1.point.z, -0.8106025768612588));
    // Manual: laser 1 fires 1.152 µs into a 46.08 µs sequence: 17 · 0.025 = 0.43 → 10.00°.
    let man = MultiDecoder::new(SensorModel::Hdl32e, &calib, settings(DecodeFlavor::Manual));
    let pm = decode(&man, SensorModel::Hdl32e, &pkt);
    assert_eq!(pm[1].azimuth_cdeg, 1000);
    // Timing: block 3, laser 1 = 3 · 46.08 µs + 1.152 µs; packet interval 12 · 46.08 µs.
    assert_eq!(pts[7].block, 3);
    assert_eq!(pts[7].offset_ns, 3 * 46_080 + 1_152);
    assert_eq!(
        multi::firing_offset_ns(SensorModel::Hdl32e, ReturnMode::Strongest, 11, 31),
        11 * 46_080 + 31 * 1_152
    );
    assert_eq!(
        multi::packet_interval_ns(SensorModel::Hdl32e, ReturnMode::Strongest),
        552_960
    );
    assert_eq!(
        multi::packet_interval_ns(SensorModel::Hdl32e, ReturnMode::Dual),
        276_480
    );
    // A lower-bank flag is not valid for a 32-laser model.
    let mut bad = pkt.clone();
    bad[101] = 0xDD;
    assert_eq!(
        multi::check(SensorModel::Hdl32e, &bad),
        Err(PacketError::BlockFlag {
            block: 1,
            flag: 0xffdd
        })
    );
}

#[test]
fn hdl32e_dual_return_types_and_identical_merge() {
    let calib = VelodyneCalibration::from_yaml_str(&hdl32_yaml(), 32).unwrap();
    let d = MultiDecoder::new(SensorModel::Hdl32e, &calib, settings(DecodeFlavor::Nebula));
    let az: [u16; 12] = std::array::from_fn(|b| 1000 + 17 * (b / 2) as u16);
    // Slot 0: both blocks 5000 (identical); slot 1: even 4000 / odd 6000; slot 2: only even.
    let pkt = packet(
        [0xEE; 12],
        az,
        |b, s| match (s, b % 2) {
            (0, _) => 5000,
            (1, 0) => 4000,
            (1, _) => 6000,
            (2, 0) => 3000,
            _ => 0,
        },
        0x39,
        0x21,
    );
    let pts = decode(&d, SensorModel::Hdl32e, &pkt);
    // Per pair: slot 0 once (identical), slot 1 twice, slot 2 once: 4 points × 6 pairs.
    assert_eq!(pts.len(), 24);
    let b0: Vec<(u8, u8, u8)> = pts
        .iter()
        .filter(|p| p.block < 2)
        .map(|p| (p.block, p.slot, p.point.return_type))
        .collect();
    // Equal reflectivity: the first (shorter) return is weak, the last strongest.
    assert_eq!(
        b0,
        [
            (0, 0, ReturnType::Identical as u8),
            (0, 1, ReturnType::FirstWeak as u8),
            (0, 2, ReturnType::Identical as u8),
            (1, 1, ReturnType::LastStrongest as u8),
        ]
    );
    // Both returns of a pair share the firing time (sequence = pair index).
    assert_eq!(pts[1].offset_ns, pts[3].offset_ns);
    assert_eq!(pts[1].offset_ns, 1_152);
}

/// 64 lasers: laser 0 carries every correction, the others plain angles
/// `-0.45 + 0.0075·i` rad.
fn hdl64_yaml() -> String {
    let mut s = String::from("lasers:\n");
    s += "- {laser_id: 0, rot_correction: 0.05, vert_correction: -0.12, dist_correction: 1.2, \
          dist_correction_x: 1.25, dist_correction_y: 1.18, two_pt_correction_available: true, \
          vert_offset_correction: 0.2, horiz_offset_correction: 0.026, focal_distance: 1500, \
          focal_slope: 1.1, min_intensity: 5, max_intensity: 250}\n";
    for i in 1..64 {
        s += &format!(
            "- {{laser_id: {i}, rot_correction: 0.0, vert_correction: {}}}\n",
            -0.45 + 0.0075 * i as f64
        );
    }
    s + "num_lasers: 64\ndistance_resolution: 0.002\n"
}

fn hdl64_flags() -> [u8; 12] {
    std::array::from_fn(|b| if b % 2 == 0 { 0xEE } else { 0xDD })
}

#[test]
fn hdl64e_full_calibration_model() {
    let calib = VelodyneCalibration::from_yaml_str(&hdl64_yaml(), 64).unwrap();
    // 43 lasers lie below -0.12 rad.
    assert_eq!(calib.lasers[0].ring, 43);
    // Upper and lower block of a firing share the azimuth (20°, then +0.09° per firing).
    let az: [u16; 12] = std::array::from_fn(|b| 2000 + 9 * (b / 2) as u16);
    // Status bytes 'H' / 0x12 at 1204-1205: not a return mode, not validated.
    let pkt = packet(
        hdl64_flags(),
        az,
        |b, s| {
            if s == 0 && b % 2 == 0 {
                6000
            } else if s == 5 {
                1000
            } else {
                0
            }
        },
        b'H',
        0x12,
    );
    for model in [SensorModel::Hdl64eS2, SensorModel::Hdl64eS3] {
        let d = MultiDecoder::new(model, &calib, settings(DecodeFlavor::Nebula));
        let pts = decode(&d, model, &pkt);
        // Upper blocks: laser 0 and laser 5; lower blocks: laser 37.
        assert_eq!(pts.len(), 6 * 2 + 6);
        let p = pts[0];
        assert_eq!((p.block, p.slot), (0, 0));
        // 20° − 0.05 rad (2.8648°) = 17.1352° → 17.14°.
        assert_eq!(p.azimuth_cdeg, 1714);
        // 6000 × 2 mm + dist_correction 1.2 m.
        assert!(close(p.point.distance, 13.2));
        assert!(close(p.point.x, 12.543334541469392), "{:?}", p.point);
        assert!(close(p.point.y, -3.8580707263285667));
        assert!(close(p.point.z, -1.3803457905835286));
        // 100 + 1.1 · |256(1 − 1500/13100)² − 256(1 − 6000/65535)²| = 111.59 → 111.
        assert_eq!(p.point.intensity, 111);
        assert_eq!(p.point.channel, 43);
        assert_eq!(p.point.elevation, -0.12);
        // Lower block: laser 32 + 5 = 37 at 2 m.
        let low = pts.iter().find(|p| p.block == 1).unwrap();
        assert_eq!(low.slot, 37);
        assert!(close(low.point.distance, 2.0));
        // Upper and lower bank of one firing share its time; firings 48 µs apart.
        assert_eq!(low.offset_ns, 0);
        assert_eq!(pts.iter().find(|p| p.block == 2).unwrap().offset_ns, 48_000);
        assert_eq!(
            multi::return_mode(model, &multi::classify_model(model, &pkt).unwrap()),
            ReturnMode::Strongest
        );
    }
    // Intensity clamp: raw 250 + 11.59 = 261 is capped at max_intensity 250.
    let mut hot = pkt.clone();
    hot[6] = 250;
    let d = MultiDecoder::new(
        SensorModel::Hdl64eS3,
        &calib,
        settings(DecodeFlavor::Nebula),
    );
    assert_eq!(
        decode(&d, SensorModel::Hdl64eS3, &hot)[0].point.intensity,
        250
    );
    // A VLS-128 bank flag is not valid for an HDL-64E.
    let mut bad = pkt.clone();
    bad[201] = 0xCC;
    assert!(matches!(
        multi::check(SensorModel::Hdl64eS3, &bad),
        Err(PacketError::BlockFlag { block: 2, .. })
    ));
}

#[test]
fn hdl64e_dual_pairs_detected_by_layout() {
    let calib = VelodyneCalibration::from_yaml_str(&hdl64_yaml(), 64).unwrap();
    // Dual: pairs (2p, 2p+1) of the same bank and azimuth: upper, upper, lower, lower, ...
    let flags: [u8; 12] = std::array::from_fn(|b| if (b / 2) % 2 == 0 { 0xEE } else { 0xDD });
    let az: [u16; 12] = std::array::from_fn(|b| 2000 + 9 * (b / 4) as u16);
    let pkt = packet(
        flags,
        az,
        |b, s| match s {
            3 => 4000,
            4 => {
                if b % 2 == 0 {
                    3000
                } else {
                    3500
                }
            }
            _ => 0,
        },
        b'H',
        0,
    );
    let model = SensorModel::Hdl64eS3;
    let p = multi::classify_model(model, &pkt).unwrap();
    assert_eq!(multi::return_mode(model, &p), ReturnMode::Dual);
    let d = MultiDecoder::new(model, &calib, settings(DecodeFlavor::Nebula));
    let pts = decode(&d, model, &pkt);
    // Per pair: slot 3 once (identical), slot 4 twice.
    assert_eq!(pts.len(), 6 * 3);
    let types: Vec<(u8, u8)> = pts
        .iter()
        .filter(|p| p.block < 2)
        .map(|p| (p.slot, p.point.return_type))
        .collect();
    assert_eq!(
        types,
        [
            (3, ReturnType::Identical as u8),
            (4, ReturnType::FirstWeak as u8),
            (4, ReturnType::LastStrongest as u8)
        ]
    );
    // Lower pair (blocks 2, 3) maps to lasers 32+.
    assert_eq!(pts.iter().find(|p| p.block == 2).unwrap().slot, 35);
}

#[test]
fn product_ids_name_models() {
    assert_eq!(
        multi::model_from_product_id(0x21),
        Some(SensorModel::Hdl32e)
    );
    assert_eq!(multi::model_from_product_id(0x22), Some(SensorModel::Vlp16));
    assert_eq!(
        multi::model_from_product_id(0x28),
        Some(SensorModel::Vlp32c)
    );
    assert_eq!(
        multi::model_from_product_id(0xA1),
        Some(SensorModel::Vls128)
    );
    assert_eq!(multi::model_from_product_id(0x00), None);
}
