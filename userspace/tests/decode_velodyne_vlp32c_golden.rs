//! Golden test: VLP-32C against Tier IV Nebula's ground-truth PCD.
//!
//! Data: `shared/data/velodyne/vlp32c/` (see its README): 379 packets in 5 bursts of ~76 (the
//! sensor emits only the front field of view 270°→90°), strongest return, product id 0x28.
//! Nebula settings: VLP32, calibration VLP32.yaml, scan_phase 180°, min_range 0.4 m,
//! max_range 50 m, cloud_min_angle 270, cloud_max_angle 90.
//!
//! Nebula's `Vlp32Decoder` never carries points past the cut (see `multi` docs), so a frame is
//! every packet up to and including the one whose phased azimuths wrap. Packet 75, the last of
//! the first burst, holds blocks from 89.56° and from 270.78° and completes the first frame:
//! packets 0–75, the ground truth (26,216 points, fields x y z).

use std::path::Path;

use lidarxdp::frame::Frame;
use lidarxdp::offline::decode_pcap_with_options;
use lidarxdp::pcd::read_points;
use lidarxdp::sensor::{DecodeFlavor, PipelineOptions, SensorConfig, SensorModel};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp32c/"
);

fn cfg() -> SensorConfig {
    let mut c = SensorConfig::new(
        0,
        SensorModel::Vlp32c,
        format!("{DIR}calibration/VLP32_nebula.yaml"),
    );
    c.cut_angle_deg = 180.0;
    c.min_range_m = 0.4;
    c.max_range_m = 50.0;
    c
}

fn decode(opts: PipelineOptions) -> Vec<Frame> {
    let (frames, c) = decode_pcap_with_options(
        Path::new(&format!(
            "{DIR}vlp32c_strongest_fov270to90_nebula_379pkt.pcap"
        )),
        &cfg(),
        Some(2368),
        opts,
    )
    .unwrap();
    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored),
        (379, 379, 0, 0)
    );
    frames
}

#[test]
fn first_frame_matches_nebula_ground_truth() {
    let frames = decode(PipelineOptions {
        flavor: DecodeFlavor::Nebula,
        fov_deg: Some((270.0, 90.0)),
    });
    let sizes: Vec<usize> = frames.iter().map(|f| f.points.len()).collect();
    let recv: Vec<u32> = frames.iter().map(|f| f.header.packets_received).collect();
    eprintln!("sizes {sizes:?} recv {recv:?}");
    let gt = read_points(Path::new(&format!(
        "{DIR}vlp32c_nebula_groundtruth_1713492677464078412.pcd"
    )))
    .unwrap();
    assert_eq!(gt.len(), 26_216);
    let f = &frames[0];
    assert_eq!(f.points.len(), gt.len());
    let mut max_err = 0f32;
    for (i, (o, g)) in f.points.iter().zip(&gt).enumerate() {
        let err = [(o.x - g.x).abs(), (o.y - g.y).abs(), (o.z - g.z).abs()]
            .into_iter()
            .fold(0f32, f32::max);
        max_err = max_err.max(err);
        assert!(err <= 1e-3, "point {i}: {o:?} vs {g:?}");
    }
    eprintln!("max err {max_err}");
}
