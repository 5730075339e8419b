//! Golden test: VLS-128 against Tier IV Nebula's ground-truth PCD.
//!
//! Data: `shared/data/velodyne/vls128/` (see its README and its warning): 2193 packets,
//! strongest return (byte 1204 = 0x37), product id 0xA1, bank flags FF EE/DD/CC/BB, three
//! firing sequences of four blocks per packet. Nebula settings: VLS128, calibration
//! VLS128.yaml, scan_phase 0°, min_range 0.3 m, max_range 300 m, cloud_min_angle 0,
//! cloud_max_angle 359. The range unit is 4 mm although the YAML says 0.007.

use std::path::Path;

use lidarxdp::frame::Frame;
use lidarxdp::offline::decode_pcap_with_options;
use lidarxdp::pcd::read_points;
use lidarxdp::sensor::{DecodeFlavor, PipelineOptions, SensorConfig, SensorModel};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vls128/"
);

fn decode(cal: &str, opts: PipelineOptions) -> Vec<Frame> {
    let cfg = SensorConfig::new(0, SensorModel::Vls128, format!("{DIR}calibration/{cal}"));
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
            fov_deg: Some((0.0, 359.0)),
        },
    );
    let sizes: Vec<usize> = frames.iter().map(|f| f.points.len()).collect();
    let hdr: Vec<_> = frames
        .iter()
        .map(|f| (f.header.packets_received, f.header.packets_expected))
        .collect();
    eprintln!("sizes {sizes:?} {hdr:?}");
    let gt = read_points(Path::new(&format!(
        "{DIR}vls128_nebula_groundtruth_1585897255376374245.pcd"
    )))
    .unwrap();
    assert_eq!(gt.len(), 208_680);
    let f = &frames[1];
    assert_eq!(f.points.len(), gt.len());
    let mut max_err = 0f32;
    let mut bad = 0;
    for (i, (o, g)) in f.points.iter().zip(&gt).enumerate() {
        let err = [(o.x - g.x).abs(), (o.y - g.y).abs(), (o.z - g.z).abs()]
            .into_iter()
            .fold(0f32, f32::max);
        max_err = max_err.max(err);
        if err > 1e-3 {
            bad += 1;
            if bad < 5 {
                eprintln!("point {i}: {o:?} vs {g:?}");
            }
        }
    }
    eprintln!("max err {max_err} bad {bad}");
    assert_eq!(bad, 0);
}
