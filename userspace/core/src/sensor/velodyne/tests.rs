//! Unit tests of the VLP-16 packet view, decoder and sensor clock on synthetic packets.

use super::*;
use crate::HostTime;
use crate::point::ReturnType;
use crate::scan::PacketRejection;
use crate::sensor::calibration::VelodyneCalibration;
use crate::vendor::{PipelineOptions, SensorConfig, SensorModel};

/// A synthetic packet: every block flagged, azimuth `az0 + step·b` (pairs in dual mode),
/// distances `dist(block, slot)`, reflectivity 100.
pub(crate) fn synth(az0: u16, step: u16, mode: u8, dist: impl Fn(usize, usize) -> u16) -> Vec<u8> {
    let mut b = vec![0u8; DATA_PACKET_LEN];
    for blk in 0..BLOCKS {
        let o = blk * BLOCK_LEN;
        b[o..o + 2].copy_from_slice(&BLOCK_FLAG);
        let idx = if mode == RETURN_MODE_DUAL {
            blk / 2
        } else {
            blk
        } as u32;
        let az = ((u32::from(az0) + u32::from(step) * idx) % AZIMUTH_UNITS) as u16;
        b[o + 2..o + 4].copy_from_slice(&az.to_le_bytes());
        for s in 0..SLOTS_PER_BLOCK {
            b[o + 4 + 3 * s..o + 6 + 3 * s].copy_from_slice(&dist(blk, s).to_le_bytes());
            b[o + 6 + 3 * s] = 100;
        }
    }
    b[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
    b[RETURN_MODE_OFFSET] = mode;
    b[PRODUCT_ID_OFFSET] = PRODUCT_ID_VLP16;
    b
}

fn decoder(flavor: DecodeFlavor) -> Vlp16Decoder {
    let calib =
        VelodyneCalibration::from_bytes(&vlp16_cal(), 16, std::path::Path::new(DB)).unwrap();
    Vlp16Decoder::new(
        calib,
        DecoderSettings {
            min_range_m: 0.3,
            max_range_m: 300.0,
            fov: None,
            flavor,
        },
    )
}

#[test]
fn checked_view_rejects_every_bad_shape() {
    let good = synth(100, 20, RETURN_MODE_STRONGEST, |_, _| 500);
    assert!(Packet::new_checked(&good[..]).is_ok());
    assert_eq!(
        Packet::new_checked(&good[..1205]).unwrap_err(),
        PacketError::Length { len: 1205 }
    );
    let mut bad = good.clone();
    bad[300] = 0xDD;
    assert_eq!(
        Packet::new_checked(&bad[..]).unwrap_err(),
        PacketError::BlockFlag {
            block: 3,
            flag: 0xddee
        }
    );
    let mut bad = good.clone();
    bad[502..504].copy_from_slice(&36000u16.to_le_bytes());
    assert_eq!(
        Packet::new_checked(&bad[..]).unwrap_err(),
        PacketError::Azimuth {
            block: 5,
            azimuth: 36000
        }
    );
    let mut bad = good.clone();
    bad[RETURN_MODE_OFFSET] = 0x3a;
    assert_eq!(
        Packet::new_checked(&bad[..]).unwrap_err(),
        PacketError::ReturnMode(0x3a)
    );
    // Unchecked views over short buffers never panic.
    let p = Packet::new_unchecked(&good[..10]);
    assert_eq!(
        (p.distance_raw(11, 31), p.timestamp_us(), p.product_id()),
        (0, 0, 0)
    );
}

#[test]
fn classify_sizes() {
    assert_eq!(classify(&[0u8; 512]).unwrap_err(), PacketRejection::Ignored);
    assert_eq!(classify(&[]).unwrap_err(), PacketRejection::Ignored);
    assert!(matches!(
        classify(&[0u8; 1207]).unwrap_err(),
        PacketRejection::Malformed(PacketError::Length { len: 1207 })
    ));
    assert!(matches!(
        classify(&[0xFF, 0xEE, 0, 0]).unwrap_err(),
        PacketRejection::Malformed(_)
    ));
    assert!(matches!(
        classify(&[0u8; 1206]).unwrap_err(),
        PacketRejection::Malformed(PacketError::BlockFlag { block: 0, .. })
    ));
}

#[test]
fn firing_timing_table() {
    // Manual section 9: last firing of a single-return packet at 23·55.296 + 15·2.304 µs.
    assert_eq!(
        firing_offset_ns(ReturnMode::Strongest, 11, 31),
        23 * 55_296 + 15 * 2_304
    );
    assert_eq!(
        firing_offset_ns(ReturnMode::Dual, 11, 31),
        11 * 55_296 + 15 * 2_304
    );
    assert_eq!(firing_offset_ns(ReturnMode::Dual, 1, 0), 0);
    assert_eq!(packet_interval_ns(ReturnMode::Dual), 663_552);
    assert_eq!(packet_interval_ns(ReturnMode::Last), 1_327_104);
}

#[test]
fn single_return_geometry() {
    // 10 m everywhere, azimuth 90.00 deg + 0.20 deg per block.
    let pkt = synth(9000, 20, RETURN_MODE_STRONGEST, |_, _| 5000);
    let p = Packet::new_checked(&pkt[..]).unwrap();
    let mut pts = Vec::new();
    decoder(DecodeFlavor::Manual).decode(&p, |d| pts.push(d));
    assert_eq!(pts.len(), BLOCKS * SLOTS_PER_BLOCK);
    let first = pts[0]; // laser 0: -15 deg, ring 0, azimuth 90.00 deg
    assert_eq!(first.azimuth_cdeg, 9000);
    assert_eq!(first.point.channel, 0);
    assert_eq!(first.point.return_type, ReturnType::Strongest as u8);
    assert!((first.point.distance - 10.0).abs() < 1e-6);
    // Nebula axes: x = d cos(el) cos(az) ~ 0, y = -d cos(el) sin(az) < 0, z = d sin(el).
    assert!(first.point.x.abs() < 1e-4);
    assert!((first.point.y + 10.0 * (15f32.to_radians()).cos()).abs() < 1e-4);
    assert!((first.point.z + 10.0 * (15f32.to_radians()).sin()).abs() < 1e-4);
    // Second firing sequence of block 0 is half-way to block 1: +0.10 deg.
    assert_eq!(pts[16].azimuth_cdeg, 9010);
    // Manual: the last block reuses the previous advance; Nebula does not interpolate it.
    assert_eq!(pts[11 * 32 + 16].azimuth_cdeg, 9000 + 11 * 20 + 10);
    let mut neb = Vec::new();
    decoder(DecodeFlavor::Nebula).decode(&p, |d| neb.push(d));
    assert_eq!(neb[11 * 32 + 16].azimuth_cdeg, 9000 + 11 * 20);
    assert_eq!(neb[16].azimuth_cdeg, 9010);
}

/// The integer window equals the float range gate for every raw value, for the real
/// resolutions (2 mm, 4 mm), positive and negative corrections, and exact-bound ranges.
#[test]
fn raw_window_equals_the_float_gate_for_every_raw_value() {
    let cases = [
        (0.002f32, 0.0f32, 0.3f64, 300.0f64),
        (0.002, 1.25, 0.3, 300.0),
        (0.002, -0.4, 0.3, 130.0),
        (0.004, 0.07, 1.0, 200.0),
        (0.004, 0.0, 0.0, 1e9),
        (0.002, 0.0, 200.0, 100.0),
    ];
    for (res, corr, min_m, max_m) in cases {
        let (min_f, max_f) = (f32_above(min_m), f32_below(max_m));
        let (lo, hi) = raw_window(res, corr, min_f, max_f);
        let mut passing = 0u32;
        for raw in 0..=u16::MAX {
            let d = raw_distance(raw, res, corr);
            let float = raw != 0 && f64::from(d) > min_m && f64::from(d) < max_m;
            assert_eq!(
                raw >= lo && raw <= hi,
                float,
                "res {res} corr {corr} raw {raw}"
            );
            passing += u32::from(float);
        }
        let expected = if min_m < max_m { 1 } else { 0 };
        assert_eq!(passing.min(1), expected, "res {res} corr {corr}");
    }
}

#[test]
fn range_filter_is_exclusive_and_zero_is_no_return() {
    // 150 counts = 0.300 m exactly: Nebula keeps it (f32 0.3 > f64 0.3); 0 is no return.
    let pkt = synth(0, 20, RETURN_MODE_LAST, |_, s| {
        [0u16, 150, 149, 65535][s % 4]
    });
    let p = Packet::new_checked(&pkt[..]).unwrap();
    let mut pts = Vec::new();
    decoder(DecodeFlavor::Nebula).decode(&p, |d| pts.push(d));
    assert_eq!(pts.len(), BLOCKS * 16);
    assert!(
        pts.iter()
            .all(|d| d.point.return_type == ReturnType::Last as u8)
    );
}

#[test]
fn dual_return_rules() {
    // Even block (last return) / odd block (strongest) per slot:
    // slot%4==0 identical, ==1 odd missing, ==2 different & odd stronger, ==3 even missing.
    let pkt = synth(1000, 40, RETURN_MODE_DUAL, |b, s| match (s % 4, b % 2) {
        (0, _) => 1000,
        (1, 0) => 1000,
        (1, _) => 0,
        (2, 0) => 2000,
        (2, _) => 1000,
        (3, 0) => 0,
        (3, _) => 1500,
        _ => unreachable!(),
    });
    let mut pkt = pkt;
    // Make odd blocks' slot 2 stronger than the even partner.
    for b in (1..BLOCKS).step_by(2) {
        for s in (2..SLOTS_PER_BLOCK).step_by(4) {
            pkt[b * BLOCK_LEN + 6 + 3 * s] = 200;
        }
    }
    let p = Packet::new_checked(&pkt[..]).unwrap();
    for flavor in [DecodeFlavor::Nebula, DecodeFlavor::Manual] {
        let mut pts = Vec::new();
        decoder(flavor).decode(&p, |d| pts.push(d));
        // Per pair and per 4 slots: even block emits 3 (slots 0,1,2), odd emits 2 (2,3).
        assert_eq!(pts.len(), 6 * 8 * 5);
        let ty = |blk: u8, slot: u8| {
            pts.iter()
                .find(|d| d.block == blk && d.slot == slot)
                .map(|d| d.point.return_type)
        };
        let id = ReturnType::Identical as u8;
        assert_eq!(ty(0, 0), Some(id));
        assert_eq!(ty(1, 0), None, "identical odd return merged");
        assert_eq!(ty(0, 1), Some(id));
        assert_eq!(ty(1, 3), Some(id));
        let (far, near) = (ty(0, 2).unwrap(), ty(1, 2).unwrap());
        match flavor {
            // Nebula labels the longer range "first".
            DecodeFlavor::Nebula => {
                assert_eq!(
                    (far, near),
                    (ReturnType::FirstWeak as u8, ReturnType::LastStrongest as u8)
                )
            }
            DecodeFlavor::Manual => {
                assert_eq!(
                    (far, near),
                    (ReturnType::LastWeak as u8, ReturnType::FirstStrongest as u8)
                )
            }
        }
        // Both returns of a pair share the firing time.
        let t = |blk: u8, slot: u8| {
            pts.iter()
                .find(|d| d.block == blk && d.slot == slot)
                .unwrap()
                .offset_ns
        };
        assert_eq!(t(2, 2), t(3, 2));
    }
    // Azimuth of the odd block: Nebula takes the next pair's azimuth without interpolation;
    // the manual interpolates inside the pair.
    let az = |flavor, blk: u8, slot: u8| {
        let mut v = None;
        decoder(flavor).decode(&p, |d| {
            if d.block == blk && d.slot == slot {
                v = Some(d.azimuth_cdeg)
            }
        });
        v.unwrap()
    };
    assert_eq!(az(DecodeFlavor::Nebula, 1, 18), 1040);
    assert_eq!(az(DecodeFlavor::Manual, 1, 18), 1000 + 20 + 2); // 40·(55.296+2·2.304)/110.592 = 21.67
    assert_eq!(az(DecodeFlavor::Nebula, 0, 18), 1022);
}

/// Default rules, dual return: per block pair, first firing sequence of both blocks, then
/// the second one; offsets non-decreasing per laser. Nebula: block by block.
#[test]
fn dual_points_come_per_firing_sequence() {
    let pkt = synth(1000, 40, RETURN_MODE_DUAL, |b, _| 1000 + b as u16 % 2);
    let p = Packet::new_checked(&pkt[..]).unwrap();
    let mut man = Vec::new();
    decoder(DecodeFlavor::Manual).decode(&p, |d| man.push((d.block, d.slot, d.offset_ns)));
    assert_eq!(man.len(), BLOCKS * SLOTS_PER_BLOCK);
    let want: Vec<(u8, u8)> = (0..6u8)
        .flat_map(|pair| {
            [(0, 0u8), (1, 0), (0, 16), (1, 16)]
                .into_iter()
                .flat_map(move |(odd, s0)| (s0..s0 + 16).map(move |s| (2 * pair + odd, s)))
        })
        .collect();
    let got: Vec<(u8, u8)> = man.iter().map(|&(b, s, _)| (b, s)).collect();
    assert_eq!(got, want);
    let mut last = [0u32; LASERS];
    for &(_, s, t) in &man {
        assert!(t >= last[usize::from(s) % LASERS]);
        last[usize::from(s) % LASERS] = t;
    }
    let mut neb = Vec::new();
    decoder(DecodeFlavor::Nebula).decode(&p, |d| neb.push((d.block, d.slot)));
    let want: Vec<(u8, u8)> = (0..12u8)
        .flat_map(|b| (0..32u8).map(move |s| (b, s)))
        .collect();
    assert_eq!(neb, want);
}

#[test]
fn decode_never_panics_on_garbage() {
    let d = decoder(DecodeFlavor::Nebula);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..200 {
        let mut pkt = synth(0, 0, RETURN_MODE_DUAL, |_, _| 0);
        for byte in pkt.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
        for blk in 0..BLOCKS {
            pkt[blk * BLOCK_LEN..blk * BLOCK_LEN + 2].copy_from_slice(&BLOCK_FLAG);
            let az =
                (u16::from_le_bytes([pkt[blk * BLOCK_LEN + 2], pkt[blk * BLOCK_LEN + 3]])) % 36000;
            pkt[blk * BLOCK_LEN + 2..blk * BLOCK_LEN + 4].copy_from_slice(&az.to_le_bytes());
        }
        pkt[RETURN_MODE_OFFSET] = [RETURN_MODE_DUAL, RETURN_MODE_LAST][(x & 1) as usize];
        let p = Packet::new_checked(&pkt[..]).unwrap();
        d.decode(&p, |dp| {
            assert!(dp.azimuth_cdeg < 36000 && dp.point.distance < 300.0)
        });
    }
}

const DB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
);

fn vlp16_cal() -> Vec<u8> {
    std::fs::read(DB).unwrap()
}

fn stream_cfg() -> SensorConfig {
    SensorConfig::new(0, SensorModel::Vlp16, DB)
}

#[test]
fn sensor_clock_hour_resolution() {
    let mut p =
        VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
    let h = 3_600_000_000_000u64;
    let host = 400_000 * h + 10_000_000_000; // 10 s past an hour
    // Sensor says 3599.5 s past the hour: it is the previous hour, 10.5 s earlier.
    assert_eq!(
        p.sensor_time_ns(3_599_500_000, HostTime::both(host)),
        400_000 * h - 500_000_000
    );
    // The sensor clock then wraps to 0.5 s: still continuous although the host moved 1 s.
    assert_eq!(
        p.sensor_time_ns(500_000, HostTime::both(host + 1_000_000_000)),
        400_000 * h + 500_000_000
    );
    // An unsynchronised sensor (:10 while the host says :50) resolves to the nearest hour,
    // 20 min ahead, and then stays continuous.
    let mut p =
        VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
    let host = 400_000 * h + 50 * 60 * 1_000_000_000; // :50
    let s0 = p.sensor_time_ns(10 * 60 * 1_000_000, HostTime::both(host));
    assert_eq!(s0, 400_001 * h + 10 * 60 * 1_000_000_000);
    let s1 = p.sensor_time_ns(
        10 * 60 * 1_000_000 + 1_000,
        HostTime::both(host + 11 * 60 * 1_000_000_000),
    );
    assert_eq!(s1, s0 + 1_000_000);
}

/// The hour comes from the wall clock once; afterwards a step of the wall clock (PTP,
/// chrony: an hour forward, then two back) moves nothing: the elapsed time is monotonic.
#[test]
fn a_wall_clock_step_does_not_move_the_sensor_hour() {
    let mut p =
        VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
    let h = 3_600_000_000_000u64;
    let ms = 1_000_000u64;
    let wall = 400_000 * h + 10 * 60 * 1_000 * ms; // :10
    let mono = 7_000 * ms; // CLOCK_MONOTONIC has its own origin
    let toh = |t_ms: u64| ((10 * 60 * 1_000 + t_ms) * 1_000) as u32; // µs past the hour
    let s0 = p.sensor_time_ns(toh(0), HostTime::new(mono, wall));
    assert_eq!(s0, 400_000 * h + 10 * 60 * 1_000 * ms);
    // Wall stepped one hour forward, 1 ms later on both the sensor and CLOCK_MONOTONIC.
    let s1 = p.sensor_time_ns(toh(1), HostTime::new(mono + ms, wall + h + ms));
    assert_eq!(s1, s0 + ms);
    // Then two hours back: still continuous.
    let s2 = p.sensor_time_ns(toh(2), HostTime::new(mono + 2 * ms, wall - h + 2 * ms));
    assert_eq!(s2, s0 + 2 * ms);
}
