//! Field faults (issue 3), each a small synthetic VLP-32C stream with the right value asserted.
//!
//! Stream: packets of 12 blocks, block azimuths 0.40° apart (`base + 40·b`, 0.01°), 4.80° per
//! packet, sensor stamps 663.552 µs apart (12 × 55.296 µs), every laser at 20 m (5000 × 4 mm).
//! Calibration: a flat 32-laser table (no rot_correction, elevations −16°..+15°), written to a
//! temporary file. Packet 12 has base 357.82°: its blocks 5 and 6 are 359.82° and 0.22°.

use std::path::PathBuf;

use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::velodyne::VelodyneStream;
use lidarxdp_core::sensor::{
    DecodeFlavor, PipelineOptions, ScanPipeline, SensorConfig, SensorModel, VendorDecoder,
};
use lidarxdp_core::valid::Degrees;

const HOUR_NS: u64 = 3_600_000_000_000;
/// Host time of packet 0: 1 s past an hour boundary (2026-11-29 21:00 UTC).
const HOST0: u64 = 493_581 * HOUR_NS + 1_000_000_000;
const INTERVAL_NS: u64 = 663_552;

fn calib_file() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(write_calib).clone()
}

fn write_calib() -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("lidarxdp_vlp32c_flat_{}.yaml", std::process::id()));
    let mut s = String::from("lasers:\n");
    for i in 0..32 {
        s += &format!(
            "- {{laser_id: {i}, rot_correction: 0.0, vert_correction: {}}}\n",
            (-16.0 + i as f64).to_radians()
        );
    }
    s += "num_lasers: 32\ndistance_resolution: 0.004\n";
    std::fs::write(&path, s).unwrap();
    path
}

fn cfg(cut: f64) -> SensorConfig {
    let mut c = SensorConfig::new(1, SensorModel::Vlp32c, calib_file());
    c.cut_angle = Degrees::new(cut).unwrap();
    c
}

fn base(k: u64) -> u16 {
    ((35_782 + 36_000 * 10 - 480 * 12 + 480 * k) % 36_000) as u16
}

/// Packet `k` (see module docs); `mode` 0x37 strongest or 0x39 dual (pairs share azimuths and
/// distances: every return identical), product id `pid`.
fn packet(k: u64, mode: u8, pid: u8) -> Vec<u8> {
    let mut b = vec![0u8; 1206];
    for blk in 0..12 {
        let o = blk * 100;
        b[o] = 0xFF;
        b[o + 1] = 0xEE;
        let step = if mode == 0x39 { blk / 2 } else { blk } as u32;
        let az = ((u32::from(base(k)) + 40 * step) % 36_000) as u16;
        b[o + 2..o + 4].copy_from_slice(&az.to_le_bytes());
        for s in 0..32 {
            b[o + 4 + 3 * s..o + 6 + 3 * s].copy_from_slice(&5000u16.to_le_bytes());
            b[o + 6 + 3 * s] = 50;
        }
    }
    let us = 1_000_000 + (k * INTERVAL_NS / 1000) as u32;
    b[1200..1204].copy_from_slice(&us.to_le_bytes());
    b[1204] = mode;
    b[1205] = pid;
    b
}

fn host(k: u64) -> u64 {
    HOST0 + k * INTERVAL_NS
}

fn sensor_ns(k: u64) -> u64 {
    HOST0 - 1_000_000_000 + (1_000_000 + k * INTERVAL_NS / 1000) * 1000
}

fn run(
    cut: f64,
    flavor: DecodeFlavor,
    ks: impl IntoIterator<Item = u64>,
) -> (Vec<Frame>, ScanPipeline) {
    let mut p = lidarxdp::calibration::pipeline_with_options(
        &cfg(cut),
        PipelineOptions {
            flavor,
            fov: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    for k in ks {
        p.push(&packet(k, 0x37, 0x28), host(k), &mut out);
    }
    (out, p)
}

fn hdr(f: &Frame) -> (u32, u32, u32) {
    (
        f.header.packets_received,
        f.header.packets_expected,
        f.header.packets_malformed,
    )
}

/// Faults (1) and (9): azimuths wrapping inside packet 12 (359.82° then 0.22°), cut angle 0
/// and 360, and the first partial frame after start-up.
#[test]
fn wrap_inside_packet_cut_0_and_360_first_partial_frame() {
    let (f0, _) = run(0.0, DecodeFlavor::Manual, 0..20);
    let (f360, _) = run(360.0, DecodeFlavor::Manual, 0..20);
    assert_eq!(f0.len(), 1);
    assert_eq!(f0[0].points, f360[0].points);
    let f = &f0[0];
    // Block 5 laser k is at 359.82° + 40·(k/2)·2.304/55.296 (0.01°): lasers 22..31 pass 360°
    // (Manual flavour), with blocks 6..11 that is 202 points moved to the next frame.
    assert_eq!(f.points.len(), 12 * 384 + 384 - 202);
    // Started 300.22° past the cut: ceil(30022 / 480) = 63 packets before it are missing.
    assert_eq!(hdr(f), (13, 13 + 63, 0));
    assert_eq!(f.header.start_ns, sensor_ns(0));
    assert_eq!(f.header.host_ns, host(0));
    assert_eq!(f.header.sequence, 0);
    // Every point before the cut: the last one is block 5 laser 21 at 359.99°.
    let last = f.points.autoware().last().unwrap();
    assert_eq!(last.channel, 21);
    assert_eq!(
        last.azimuth,
        (35_999.0 * 0.01 * std::f64::consts::PI / 180.0) as f32
    );
    // The next frame (flushed) starts at packet 12 with the 202 carried points rebased.
    let mut p = lidarxdp::calibration::pipeline_with_options(
        &cfg(0.0),
        PipelineOptions {
            flavor: DecodeFlavor::Manual,
            fov: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    for k in 0..20 {
        p.push(&packet(k, 0x37, 0x28), host(k), &mut out);
    }
    p.flush(&mut out);
    assert_eq!(out.len(), 2);
    let g = &out[1];
    assert_eq!(g.header.start_ns, sensor_ns(12));
    assert_eq!(g.points.len(), 202 + 7 * 384);
    // Flushed after packet 19 (31.42°): 68 more packets to the next cut were never seen.
    assert_eq!(hdr(g), (8, 8 + 68, 0));
    // First carried point: block 5, laser 22 = 5·55.296 µs + 11·2.304 µs after packet 12.
    assert_eq!(g.points.autoware()[0].time_stamp, 5 * 55_296 + 11 * 2_304);
    assert_eq!(g.points.autoware()[0].channel, 22);
    // Every point in exactly one frame.
    assert_eq!(out[0].points.len() + g.points.len(), 20 * 384);
    // Nebula flavour keeps the whole completing packet (no carry).
    let (n, _) = run(0.0, DecodeFlavor::Nebula, 0..20);
    assert_eq!(n[0].points.len(), 13 * 384);
}

/// Faults (2) and (3): damaged datagrams are counted malformed and dropped; foreign datagrams
/// are ignored; neither disturbs the frame being built.
#[test]
fn damaged_and_foreign_datagrams() {
    let (clean, _) = run(0.0, DecodeFlavor::Manual, 0..20);
    let mut p = lidarxdp::calibration::pipeline_with_options(
        &cfg(0.0),
        PipelineOptions {
            flavor: DecodeFlavor::Manual,
            fov: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    for k in 0..20 {
        if k == 4 {
            let good = packet(k, 0x37, 0x28);
            p.push(&good[..1205], host(k), &mut out); // a byte short
            let mut long = good.clone();
            long.extend_from_slice(&[0, 0, 0]);
            p.push(&long, host(k), &mut out); // a few bytes long
            let mut flag = good.clone();
            flag[701] = 0xDD; // lower-bank flag: not a VLP-32C block
            p.push(&flag, host(k), &mut out);
            let mut az = good.clone();
            az[902..904].copy_from_slice(&36_000u16.to_le_bytes());
            p.push(&az, host(k), &mut out);
            for n in [49usize, 356, 544] {
                p.push(&vec![0x5Au8; n], host(k), &mut out);
            }
        }
        p.push(&packet(k, 0x37, 0x28), host(k), &mut out);
    }
    let c = *p.counters();
    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored),
        (27, 20, 4, 3)
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].points, clean[0].points);
    assert_eq!(hdr(&out[0]), (13, 76, 4));
}

/// Fault (5): the product byte says HDL-32E (0x21) on a stream configured as VLP-32C: decoded
/// as configured, counted, and the detected model reported.
#[test]
fn product_byte_disagrees_with_configured_model() {
    let mut s = VelodyneStream::new(
        &cfg(0.0),
        &lidarxdp::calibration::read(&cfg(0.0).calibration).unwrap(),
        PipelineOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    for k in 0..3 {
        s.push(&packet(k, 0x37, 0x21), HostTime::both(host(k)), &mut out)
            .unwrap();
    }
    s.push(&packet(3, 0x37, 0x28), HostTime::both(host(3)), &mut out)
        .unwrap();
    assert_eq!(s.product_mismatches(), 3);
    assert_eq!(s.detected_model(), Some(SensorModel::Vlp32c));
    s.push(&packet(4, 0x37, 0x21), HostTime::both(host(4)), &mut out)
        .unwrap();
    assert_eq!(s.detected_model(), Some(SensorModel::Hdl32e));
    assert_eq!(s.product_mismatches(), 4);
    s.flush(&mut out);
    assert_eq!(out[0].points.len(), 5 * 384);
}

/// Fault (6): packets lost mid-frame: the frame is published with the loss counted and nothing
/// duplicated.
#[test]
fn packets_lost_mid_frame() {
    let (f, _) = run(
        0.0,
        DecodeFlavor::Manual,
        (0..20).filter(|k| ![5, 6].contains(k)),
    );
    assert_eq!(f[0].points.len(), 10 * 384 + 384 - 202);
    // 11 received, 2 lost in the middle + 63 before the first packet.
    assert_eq!(hdr(&f[0]), (11, 76, 0));
}

/// Fault (7): the packet holding the cut (12) is lost: packet 13 completes the frame and the
/// next frame's start time is packet 13's own stamp.
#[test]
fn lost_frame_start() {
    let mut p = lidarxdp::calibration::pipeline_with_options(
        &cfg(0.0),
        PipelineOptions {
            flavor: DecodeFlavor::Manual,
            fov: None,
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    for k in (0..20).filter(|&k| k != 12) {
        p.push(&packet(k, 0x37, 0x28), host(k), &mut out);
    }
    p.flush(&mut out);
    assert_eq!(out.len(), 2);
    // Packet 13 (2.62°..7.02°) lies wholly past the cut: all its points go to frame 1.
    assert_eq!(out[0].points.len(), 12 * 384);
    assert_eq!(hdr(&out[0]), (13, 13 + 63 + 1, 0));
    assert_eq!(out[1].header.start_ns, sensor_ns(13));
    assert_eq!(out[1].points.len(), 7 * 384);
    assert_eq!(out[1].points.autoware()[0].time_stamp, 0);
    // Flushed partial: 68 packets after packet 19 up to the next cut not seen.
    assert_eq!(hdr(&out[1]), (7, 7 + 68, 0));
    // Nebula flavour (no carry): frame 1 opens at packet 14, its own first packet.
    let (n, _) = run(0.0, DecodeFlavor::Nebula, (0..20).filter(|&k| k != 12));
    assert_eq!(n[0].points.len(), 13 * 384);
}

/// Fault (8): dual return with identical returns: one point per firing, type identical.
#[test]
fn dual_identical_returns_not_duplicated() {
    let mut p = lidarxdp::calibration::pipeline(&cfg(0.0)).unwrap();
    let mut out = Vec::new();
    for k in 0..4 {
        p.push(&packet(k, 0x39, 0x28), host(k), &mut out);
    }
    p.flush(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].points.len(), 4 * 6 * 32);
    assert!(out[0].points.autoware().iter().all(|p| p.return_type == 6));
    // Dual: 6 firing sequences per packet, 331.776 µs apart.
    assert_eq!(out[0].points.autoware()[32].time_stamp, 55_296);
}
