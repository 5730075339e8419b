//! Golden tests: every Hesai capture in `shared/data/hesai/*/` against Tier IV Nebula's
//! ground-truth PCD in its folder (x y z only, in decode order).
//!
//! Nebula's test (`hesai_ros_decoder_test_main.cpp`) feeds the bag messages' packets in order to
//! its `HesaiDecoder` and compares the scan published while the message named in the PCD's file
//! name was being decoded. Here the pcap (same payloads, same order) goes through our
//! [`ScanPipeline`] with the README's settings, and the frame published while a packet of that
//! message (`*_bag_index.json`) was pushed is compared: same point count, every x/y/z within
//! 1 mm, in order. The settings (return mode as captured, min/max range, cut 0°, FoV 0–360°)
//! are the README's; the dual-return distance threshold is Nebula's default 0.1 m.

use std::path::Path;

use lidarxdp::frame::Frame;
use lidarxdp::offline::udp_payloads;
use lidarxdp::pcd::read_points;
use lidarxdp::point::ReturnType;
use lidarxdp::sensor::{PipelineOptions, ScanPipeline, SensorConfig, SensorModel};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/hesai/");

struct Case {
    dir: &'static str,
    model: SensorModel,
    csv: &'static str,
    pcd: &'static str,
    /// Packet index range of the bag message the PCD is named after.
    packets: (usize, usize),
    range: (f32, f32),
    points: usize,
}

/// Decodes the capture; returns every frame with the index of the packet that published it.
fn decode(c: &Case) -> (Vec<(usize, Frame)>, ScanPipeline) {
    let mut cfg = SensorConfig::new(0, c.model, format!("{DIR}{}/{}", c.dir, c.csv));
    cfg.min_range_m = c.range.0;
    cfg.max_range_m = c.range.1;
    let mut p = ScanPipeline::with_options(&cfg, PipelineOptions::default()).unwrap();
    let mut frames = Vec::new();
    let mut out = Vec::new();
    let pcap = format!("{DIR}{0}/{0}_nebula.pcap", c.dir);
    for (i, d) in udp_payloads(Path::new(&pcap)).unwrap().enumerate() {
        let d = d.unwrap();
        p.push(&d.payload, d.ts_ns, &mut out);
        frames.extend(out.drain(..).map(|f| (i, f)));
    }
    p.flush(&mut out);
    frames.extend(out.drain(..).map(|f| (usize::MAX, f)));
    (frames, p)
}

fn check(c: &Case) -> Vec<(usize, Frame)> {
    let (frames, p) = decode(c);
    let in_msg: Vec<&Frame> = frames
        .iter()
        .filter(|(i, _)| (c.packets.0..=c.packets.1).contains(i))
        .map(|(_, f)| f)
        .collect();
    assert_eq!(in_msg.len(), 1, "one frame published during the message");
    let ours = &in_msg[0].points;
    let gt = read_points(Path::new(&format!("{DIR}{}/{}", c.dir, c.pcd))).unwrap();
    assert_eq!(gt.len(), c.points);
    assert_eq!(ours.len(), gt.len(), "point count");
    let mut worst = 0f32;
    for (k, (a, b)) in ours.iter().zip(&gt).enumerate() {
        let e = (a.x - b.x)
            .abs()
            .max((a.y - b.y).abs())
            .max((a.z - b.z).abs());
        assert!(e <= 1e-3, "point {k}: ours {a:?} vs {b:?}");
        worst = worst.max(e);
    }
    eprintln!("{}: {} points, max error {worst:e} m", c.dir, ours.len());
    assert_eq!(p.counters().malformed, 0);
    assert_eq!(p.counters().ignored, 0);
    frames
}

#[test]
fn pandar40p() {
    let f = check(&Case {
        dir: "pandar40p",
        model: SensorModel::Pandar40p,
        csv: "Pandar40P.csv",
        pcd: "pandar40p_nebula_groundtruth_1673400149711850138.pcd",
        packets: (1079, 1438),
        range: (0.3, 200.0),
        points: 56_762,
    });
    let _ = f;
}

#[test]
fn pandar64() {
    check(&Case {
        dir: "pandar64",
        model: SensorModel::Pandar64,
        csv: "Pandar64.csv",
        pcd: "pandar64_nebula_groundtruth_1673403880898440686.pcd",
        packets: (1800, 2399),
        range: (0.3, 200.0),
        points: 93_591,
    });
}

#[test]
fn pandarqt64() {
    check(&Case {
        dir: "pandarqt64",
        model: SensorModel::PandarQt64,
        csv: "PandarQT64.csv",
        pcd: "pandarqt64_nebula_groundtruth_1673401196087570870.pcd",
        packets: (900, 1199),
        range: (0.1, 60.0),
        points: 34_158,
    });
}

#[test]
fn pandarqt128() {
    check(&Case {
        dir: "pandarqt128",
        model: SensorModel::PandarQt128,
        csv: "PandarQT128.csv",
        pcd: "pandarqt128_nebula_groundtruth_1730273789174759609.pcd",
        packets: (900, 1799),
        range: (0.3, 300.0),
        points: 73_560,
    });
}

#[test]
fn pandarxt32() {
    check(&Case {
        dir: "pandarxt32",
        model: SensorModel::PandarXt32,
        csv: "PandarXT32.csv",
        pcd: "pandarxt32_nebula_groundtruth_1673400678101968885.pcd",
        packets: (1500, 1999),
        range: (0.05, 120.0),
        points: 63_021,
    });
}

#[test]
fn pandarxt32m() {
    check(&Case {
        dir: "pandarxt32m",
        model: SensorModel::PandarXt32m,
        csv: "PandarXT32M.csv",
        pcd: "pandarxt32m_nebula_groundtruth_1660893203292679064.pcd",
        packets: (1543, 1814),
        range: (0.5, 300.0),
        points: 13_574,
    });
}

#[allow(dead_code)]
fn _types() -> ReturnType {
    ReturnType::Unknown
}
