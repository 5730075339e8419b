//! Golden test: VLS-128 against Tier IV Nebula's ground-truth PCD.
//!
//! Data: `shared/data/velodyne/vls128/` (see its README and its warning): 2193 packets,
//! strongest return (byte 1204 = 0x37), product id 0xA1, bank flags FF EE/DD/CC/BB, three
//! firing sequences of four blocks per packet. Nebula settings: VLS128, calibration
//! VLS128.yaml, scan_phase 0°, min_range 0.3 m, max_range 300 m, cloud_min_angle 0,
//! cloud_max_angle 359. The range unit is 4 mm although the YAML says 0.007.

use std::path::Path;

use lidarxdp::offline::decode_pcap_with_options;
use lidarxdp_client::pcd::read_points;
use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{DecodeFlavor, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Fov, RangeGate};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vls128/"
);

fn decode(cal: &str, opts: PipelineOptions) -> Vec<Frame> {
    // Nebula's VLS-128 range gate (0.3 m, 300 m), not the datasheet default.
    let cfg = SensorConfig {
        range: RangeGate::from_m(0.3, 300.0).unwrap(),
        ..SensorConfig::new(0, SensorModel::Vls128, format!("{DIR}calibration/{cal}"))
    };
    let (frames, c) = decode_pcap_with_options(
        Path::new(&format!("{DIR}vls128_strongest_nebula_2193pkt.pcap")),
        &cfg,
        Some(2368),
        opts,
    )
    .unwrap();
    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored),
        (2193, 2193, 0, 0)
    );
    frames
}

#[test]
fn second_frame_matches_nebula_ground_truth() {
    let frames = decode(
        "VLS128_nebula.yaml",
        PipelineOptions {
            flavor: DecodeFlavor::Nebula,
            fov: Some(Fov::from_deg(0.0, 359.0).unwrap()),
            ..Default::default()
        },
    );
    let sizes: Vec<usize> = frames.iter().map(|f| f.points.len()).collect();
    assert_eq!(sizes, [134_874, 208_680, 208_719, 208_977]);
    let hdr: Vec<(u32, u32)> = frames
        .iter()
        .map(|f| (f.header.packets_received, f.header.packets_expected))
        .collect();
    // First frame: the capture starts at 131.79°, 220 packets after the cut are missing.
    // The others are complete turns. Only packets that meet the field of view (0°..359°)
    // count: the completing packet, whose blocks lie in 359°..360°, counts in neither frame.
    assert_eq!(hdr, [(382, 602), (603, 603), (603, 603), (603, 603)]);
    // Packet stamp 55,311,567 µs past the hour, minus the 8.7 µs lead of the first firing.
    assert_eq!(frames[0].header.start_ns, 1_585_897_255_311_567_000 - 8_700);
    for f in &frames {
        let mut last = [0u32; 128];
        for p in f.points.autoware() {
            let c = usize::from(p.channel);
            assert!(
                p.time_stamp >= last[c],
                "time_stamp decreases on channel {c}"
            );
            last[c] = p.time_stamp;
            assert_eq!(p.return_type, 3);
        }
    }
    let gt = read_points(Path::new(&format!(
        "{DIR}vls128_nebula_groundtruth_1585897255376374245.pcd"
    )))
    .unwrap();
    assert_eq!(gt.len(), 208_680);
    let f = &frames[1];
    assert_eq!(f.points.len(), gt.len());
    let max_err = max_error(f.points.autoware(), &gt);
    // Exact: same f32 arithmetic as Nebula.
    assert_eq!(max_err, 0.0);
}

fn max_error(
    ours: &[lidarxdp_core::point::PointXYZIRCAEDT],
    gt: &[lidarxdp_core::point::PointXYZIRCAEDT],
) -> f32 {
    let mut max_err = 0f32;
    for (i, (o, g)) in ours.iter().zip(gt).enumerate() {
        let err = [(o.x - g.x).abs(), (o.y - g.y).abs(), (o.z - g.z).abs()]
            .into_iter()
            .fold(0f32, f32::max);
        assert!(err <= 1e-3, "point {i}: {o:?} vs {g:?}");
        max_err = max_err.max(err);
    }
    max_err
}

/// The ros-drivers table (same angles) gives the same cloud: its `distance_resolution: 0.007`
/// is ignored, the unit is 4 mm.
#[test]
fn ros_drivers_table_and_yaml_resolution_ignored() {
    let frames = decode(
        "VLS128.yaml",
        PipelineOptions {
            flavor: DecodeFlavor::Nebula,
            fov: Some(Fov::from_deg(0.0, 359.0).unwrap()),
            ..Default::default()
        },
    );
    let gt = read_points(Path::new(&format!(
        "{DIR}vls128_nebula_groundtruth_1585897255376374245.pcd"
    )))
    .unwrap();
    assert_eq!(frames[1].points.len(), gt.len());
    assert!(max_error(frames[1].points.autoware(), &gt) < 1e-5);
    // The table says 7 mm; the decoder uses 4 mm.
    let calib = lidarxdp_core::sensor::calibration::VelodyneCalibration::from_bytes(
        &lidarxdp::calibration::read(Path::new(&format!("{DIR}calibration/VLS128.yaml"))).unwrap(),
        128,
        Path::new(&format!("{DIR}calibration/VLS128.yaml")),
    )
    .unwrap();
    assert_eq!(calib.distance_resolution_m, 0.007);
    let d = lidarxdp_core::sensor::velodyne::multi::MultiDecoder::new(
        SensorModel::Vls128,
        &calib,
        lidarxdp_core::sensor::velodyne::DecoderSettings {
            min_range_m: 0.3,
            max_range_m: 300.0,
            fov: None,
            flavor: DecodeFlavor::Nebula,
        },
    );
    assert_eq!(d.distance_unit_m(), 0.004);
    // Every distance is a multiple of 4 mm (no dist_correction in the table).
    for p in frames[1].points.autoware() {
        // f32 distances: about 6e-8 relative error, < 0.01 of a 4 mm unit up to 300 m.
        let units = f64::from(p.distance) / 0.004;
        assert!((units - units.round()).abs() < 1e-2, "{}", p.distance);
    }
}

/// Firmware timing variants: the shared capture (165.8 µs per packet) selects the 55.296 µs
/// sequence table; packets 159.9 µs apart (early firmware) select 53.3 µs, which moves the
/// points of the second firing sequence (blocks 4-7) to 53.3 µs + group offset.
#[test]
fn firmware_timing_variant_from_packet_spacing() {
    use lidarxdp_core::sensor::VendorDecoder;
    use lidarxdp_core::sensor::velodyne::VelodyneStream;
    let cfg = SensorConfig::new(
        0,
        SensorModel::Vls128,
        format!("{DIR}calibration/VLS128.yaml"),
    );
    let pkts: Vec<Vec<u8>> = lidarxdp::offline::udp_payloads(Path::new(&format!(
        "{DIR}vls128_strongest_nebula_2193pkt.pcap"
    )))
    .unwrap()
    .take(40)
    .map(|d| d.unwrap().payload)
    .collect();
    let run = |spacing_us: u32| {
        let mut s = VelodyneStream::new(
            &cfg,
            &lidarxdp::calibration::read(&cfg.calibration).unwrap(),
            PipelineOptions::default(),
        )
        .unwrap();
        assert_eq!(s.firing_sequence_ns(), Some(55_296));
        let mut out = Vec::new();
        for (i, p) in pkts.iter().enumerate() {
            let mut p = p.clone();
            // Rewrite the stamps: 55,311,567 µs past the hour + i · spacing.
            let us = 55_311_567 + i as u32 * spacing_us;
            p[1200..1204].copy_from_slice(&us.to_le_bytes());
            s.push(
                &p,
                HostTime::both(1_585_897_255_313_147_068 + i as u64 * 160_000),
                &mut out,
            )
            .unwrap();
        }
        s.flush(&mut out);
        (s.firing_sequence_ns(), out)
    };
    let (seq, frames) = run(166);
    assert_eq!(seq, Some(55_296));
    // Block 4 (sequence 1), laser 0 (group 0) of packet 0: 55.296 µs after the first firing.
    let p = frames[0]
        .points
        .autoware()
        .iter()
        .find(|p| p.time_stamp >= 50_000)
        .unwrap();
    assert_eq!(p.time_stamp, 55_296);
    let (seq, frames) = run(160);
    assert_eq!(seq, Some(53_300));
    // Packet 0 is decoded before the spacing is known; packet 1 onwards use 53.3 µs:
    // packet 1 is 160 µs after packet 0, its block 4 laser 0 at 160 + 53.3 µs.
    assert!(
        frames[0]
            .points
            .autoware()
            .iter()
            .any(|p| p.time_stamp == 160_000 + 53_300)
    );
    assert!(
        !frames[0]
            .points
            .autoware()
            .iter()
            .any(|p| p.time_stamp == 160_000 + 55_296)
    );
}
