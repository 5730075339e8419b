//! RoboSense field faults through the whole [`ScanPipeline`], each on a small synthetic
//! stream with the exact value asserted. Stream: an RS-32 in single return, blocks 0.40° apart
//! (12 per packet, 4.80° per packet), every channel 5 m, packets 666.24 µs apart on the V1
//! calendar clock (12 × 55.52 µs).

use std::path::PathBuf;

use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::robosense::{
    BLOCK_LEN, DIFOP_MAGIC, HEADER_LEN, MSOP_MAGIC_HELIOS, MSOP_MAGIC_V1, PACKET_LEN,
};
use lidarxdp_core::sensor::{DecodeCounters, ScanPipeline, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, Fov};

const PACKET_US: u64 = 666; // 666.24 µs, rounded to the clock's µs
const STEP: u32 = 40;
const BASE_NS: u64 = 1_709_210_040_000_000_000; // 2024-02-29 12:34:00 UTC

/// The RS-32 angle table (vertical −25 + i degrees, horizontal ∓2.5°), written once.
fn csv() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("lidarxdp-rsf-{}.csv", std::process::id()));
        let text: String = (0..32)
            .map(|i| format!("{},{}\n", -25 + i, if i % 2 == 0 { "-2.5" } else { "2.5" }))
            .collect();
        std::fs::write(&p, text).unwrap();
        p
    })
    .clone()
}

fn pipeline(cut: f64) -> ScanPipeline {
    let cfg = SensorConfig {
        cut_angle: Degrees::new(cut).unwrap(),
        ..SensorConfig::new(1, SensorModel::Rs32, csv())
    };
    lidarxdp::calibration::pipeline(&cfg).unwrap()
}

/// Packet `k`: block b azimuth `az0 + k·480 + b·40`, V1 time 12:34:00 + k·666 µs.
fn packet(k: u64, az0: u32, header_v1: bool) -> Vec<u8> {
    let mut b = vec![0u8; PACKET_LEN];
    if header_v1 {
        b[..8].copy_from_slice(&MSOP_MAGIC_V1);
    } else {
        b[..4].copy_from_slice(&MSOP_MAGIC_HELIOS);
    }
    let us = k * PACKET_US;
    let ts = [
        24,
        2,
        29,
        12,
        34,
        (us / 1_000_000) as u8,
        ((us / 1000 % 1000) >> 8) as u8,
        (us / 1000 % 1000) as u8,
        ((us % 1000) >> 8) as u8,
        (us % 1000) as u8,
    ];
    b[20..30].copy_from_slice(&ts);
    for blk in 0..12 {
        let o = HEADER_LEN + blk * BLOCK_LEN;
        b[o] = 0xFF;
        b[o + 1] = 0xEE;
        let az = ((az0 + k as u32 * 12 * STEP + blk as u32 * STEP) % 36_000) as u16;
        b[o + 2..o + 4].copy_from_slice(&az.to_be_bytes());
        for c in 0..32 {
            b[o + 4 + 3 * c..o + 6 + 3 * c].copy_from_slice(&1000u16.to_be_bytes());
            b[o + 6 + 3 * c] = 10;
        }
    }
    b
}

fn host(k: u64) -> u64 {
    1_000_000_000_000 + k * PACKET_US * 1000
}

fn feed(p: &mut ScanPipeline, ks: impl IntoIterator<Item = u64>, az0: u32, out: &mut Vec<Frame>) {
    for k in ks {
        p.push(&packet(k, az0, true), host(k), out);
    }
}

/// az0 chosen so that packet 10 holds blocks 357.82°, 358.22°, ..., 359.82° then 0.22°, ...
const AZ0: u32 = 30_982;

fn counts(c: &DecodeCounters) -> (u64, u64, u64, u64) {
    (c.packets, c.decoded, c.malformed, c.ignored)
}

#[test]
fn azimuth_wrap_inside_a_packet_splits_at_the_block() {
    let mut p = pipeline(0.0);
    let mut out = Vec::new();
    feed(&mut p, 0..10, AZ0, &mut out);
    assert!(out.is_empty());
    // Packet 10: block 5 at 359.82°, block 6 at 0.22°.
    let pk = packet(10, AZ0, true);
    let az = |b: usize| {
        u16::from_be_bytes([
            pk[HEADER_LEN + b * BLOCK_LEN + 2],
            pk[HEADER_LEN + b * BLOCK_LEN + 3],
        ])
    };
    assert_eq!((az(5), az(6)), (35_982, 22));
    feed(&mut p, 10..11, AZ0, &mut out);
    assert_eq!(out.len(), 1);
    let f = &out[0];
    // 10 packets + blocks 0..5 of packet 10, 32 points each.
    assert_eq!(f.points.len(), (10 * 12 + 6) * 32);
    assert_eq!(f.header.start_ns, BASE_NS);
    assert_eq!(f.header.host_ns, host(0));
    // Block 5 (359.82°) stays in frame 0 although its channels with a +2.5° offset lie past
    // 0°: channel 31 at 359.82° + trunc(40 · 46.08/55.52) + 2.50° = 2.65°.
    let last = f.points.autoware().last().unwrap();
    assert_eq!((last.azimuth.to_degrees() * 100.0).round(), 265.0);
    // 75 packets per turn: packet 85 holds the next cut.
    feed(&mut p, 11..86, AZ0, &mut out);
    assert_eq!(out.len(), 2);
    let g = &out[1];
    // Frame 1 begins at packet 10 (its sensor time) with blocks 6..11 carried over.
    assert_eq!(g.header.start_ns, BASE_NS + 10 * PACKET_US * 1000);
    assert_eq!(g.points.autoware()[0].time_stamp, 6 * 55_520);
    assert_eq!(g.points.len(), (6 + 74 * 12 + 6) * 32);
    assert_eq!(
        (g.header.packets_received, g.header.packets_expected),
        (76, 76)
    );
    // Time stamps per channel never decrease; every point in exactly one frame.
    for fr in &out {
        let mut last = [0u32; 32];
        for pt in fr.points.autoware() {
            let c = usize::from(pt.channel);
            assert!(pt.time_stamp >= last[c]);
            last[c] = pt.time_stamp;
        }
    }
    p.flush(&mut out);
    let total: usize = out.iter().map(|f| f.points.len()).sum();
    // Every point once, except blocks 6..11 of packet 85: a frame holding only points carried
    // past the last cut is dropped at flush (shared assembler rule, as Nebula).
    assert_eq!(total, 86 * 12 * 32 - 6 * 32);
}

#[test]
fn damaged_and_foreign_datagrams() {
    let mut p = pipeline(0.0);
    let mut out = Vec::new();
    feed(&mut p, 0..5, AZ0, &mut out);
    let good = packet(5, AZ0, true);
    // A byte short, a few bytes long, a bad block flag (block 7), an azimuth of 360.00°.
    let mut bad_flag = good.clone();
    bad_flag[HEADER_LEN + 7 * BLOCK_LEN] = 0xFE;
    let mut bad_az = good.clone();
    bad_az[HEADER_LEN + 3 * BLOCK_LEN + 2..HEADER_LEN + 3 * BLOCK_LEN + 4]
        .copy_from_slice(&36_000u16.to_be_bytes());
    let mut long = good.clone();
    long.extend_from_slice(&[0, 0, 0]);
    for d in [
        &good[..PACKET_LEN - 1],
        &long[..],
        &bad_flag[..],
        &bad_az[..],
    ] {
        p.push(d, host(5), &mut out);
    }
    // A Helios packet on an RS-32's port (product disagrees with the configured model).
    p.push(&packet(5, AZ0, false), host(5), &mut out);
    // A DIFOP cut short.
    let mut difop = vec![0u8; 600];
    difop[..8].copy_from_slice(&DIFOP_MAGIC);
    p.push(&difop, host(5), &mut out);
    assert_eq!(counts(p.counters()), (11, 5, 6, 0));
    // Foreign traffic of 49, 356 and 544 bytes: ignored.
    for n in [49usize, 356, 544] {
        p.push(&vec![0x42u8; n], host(5), &mut out);
    }
    assert_eq!(counts(p.counters()), (14, 5, 6, 3));
    feed(&mut p, 5..11, AZ0, &mut out);
    assert_eq!(out.len(), 1);
    let h = out[0].header;
    assert_eq!(h.packets_malformed, 6);
    // Nothing of the dropped datagrams reached the frame.
    assert_eq!(out[0].points.len(), (10 * 12 + 6) * 32);
}

#[test]
fn lost_packets_mid_frame_are_counted_not_duplicated() {
    let mut p = pipeline(0.0);
    let mut out = Vec::new();
    feed(
        &mut p,
        (0..86).filter(|k| !(40..43).contains(k)),
        AZ0,
        &mut out,
    );
    assert_eq!(out.len(), 2);
    let g = &out[1];
    // Frame 1 = packets 10..85 (76) minus 3 lost.
    assert_eq!(
        (g.header.packets_received, g.header.packets_expected),
        (73, 76)
    );
    // 71 whole packets + blocks 6..11 of packet 10 + blocks 0..5 of packet 85.
    assert_eq!(g.points.len(), (71 * 12 + 6 + 6) * 32);
}

#[test]
fn lost_frame_start_takes_the_time_of_the_next_packet() {
    let mut p = pipeline(0.0);
    let mut out = Vec::new();
    // Packet 10 (holding the cut) is lost: packet 11 (0.62°..5.02°) completes frame 0.
    feed(&mut p, (0..90).filter(|&k| k != 10), AZ0, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].points.len(), 10 * 12 * 32);
    assert_eq!(out[1].header.start_ns, BASE_NS + 11 * PACKET_US * 1000);
    assert_eq!(out[1].points.autoware()[0].time_stamp, 0);
}

#[test]
fn cut_at_0_and_360_are_the_same_and_the_first_frame_is_partial() {
    let run = |cut: f64| {
        let mut p = pipeline(cut);
        let mut out = Vec::new();
        feed(&mut p, 0..170, AZ0, &mut out);
        p.flush(&mut out);
        out
    };
    let (a, b) = (run(0.0), run(360.0));
    assert_eq!(a, b);
    // Cuts in packets 10, 85, 160; the rest flushed.
    assert_eq!(a.len(), 4);
    assert_eq!(a[3].points.len(), (6 + 9 * 12) * 32);
    // The first frame starts at 309.82°: 75 packets expected for a full turn, 10 received + 1.
    assert_eq!(
        (a[0].header.packets_received, a[0].header.packets_expected),
        (11, 76)
    );
    // A cut at 90° splits the same stream elsewhere: packet 29 holds 89.82° -> 90.22°
    // (blocks 2 and 3).
    let c = {
        let mut p = pipeline(90.0);
        let mut out = Vec::new();
        feed(&mut p, 0..30, AZ0, &mut out);
        out
    };
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].points.len(), (29 * 12 + 3) * 32);
}

#[test]
fn host_silence_closes_the_frame() {
    let mut p = pipeline(0.0);
    let mut out = Vec::new();
    feed(&mut p, 0..5, AZ0, &mut out);
    p.poll_timeout(host(4) + 200_000_000, &mut out);
    assert!(out.is_empty());
    p.poll_timeout(host(4) + 200_000_001, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].points.len(), 5 * 12 * 32);
}

#[test]
fn field_of_view_wraps_through_zero() {
    let cfg = SensorConfig::new(1, SensorModel::Rs32, csv());
    let opts = lidarxdp_core::sensor::PipelineOptions {
        fov: Some(Fov::from_deg(350.0, 10.0).unwrap()),
        ..Default::default()
    };
    let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
    let mut out = Vec::new();
    feed(&mut p, 0..90, AZ0, &mut out);
    assert_eq!(out.len(), 2);
    let f = &out[1];
    assert!(!f.points.is_empty());
    for pt in f.points.autoware() {
        let cdeg = (pt.azimuth.to_degrees() * 100.0).round() as i32;
        assert!(cdeg >= 35_000 || cdeg <= 1000, "{cdeg}");
    }
    // Expected count from the documented rule: one turn = 75 packets × 12 blocks (the set of
    // (block azimuth, block index) pairs of frame 1 equals that of packets 10..84); channel
    // azimuth h = block + trunc(diff · firing/55.52) with diff 40 (0.40° to the next block),
    // or the nominal 20 (10 Hz, no DIFOP) for block 11; offsets ∓2.5°; window [350°, 10°].
    let expected: usize = (0..75 * 12)
        .map(|i| {
            let az = (AZ0 as i32 + 10 * 480 + 40 * i) % 36_000;
            (az, if i % 12 == 11 { 20.0f32 } else { 40.0 })
        })
        .map(|(az, diff)| {
            (0..32)
                .filter(|&c| {
                    let firing = [
                        0.00f32, 2.88, 5.76, 8.64, 11.52, 14.40, 17.28, 20.16, 23.04, 25.92, 28.80,
                        31.68, 34.56, 37.44, 40.32, 44.64, 1.44, 4.32, 7.20, 10.08, 12.96, 15.84,
                        18.72, 21.60, 24.48, 27.36, 30.24, 33.12, 36.00, 38.88, 41.76, 46.08,
                    ][c];
                    let h = az + (diff * (firing / 55.52)) as i32;
                    let a = (h + if c % 2 == 0 { -250 } else { 250 }).rem_euclid(36_000);
                    a >= 35_000 || a <= 1000
                })
                .count()
        })
        .sum();
    assert_eq!(f.points.len(), expected);
}

#[test]
fn dual_return_stream_has_no_duplicate_identical_returns() {
    // RS-16 in dual return (set by a DIFOP, byte 300 = 0): channels c and c+16 of a block are
    // the two returns of laser c. Even lasers: both returns equal (one point, identical);
    // odd lasers: second return 1 m farther (two points).
    let path = std::env::temp_dir().join(format!("lidarxdp-rsf16-{}.csv", std::process::id()));
    std::fs::write(
        &path,
        (0..16)
            .map(|i| format!("{},0\n", 2 * i - 15))
            .collect::<String>(),
    )
    .unwrap();
    let mut p =
        lidarxdp::calibration::pipeline(&SensorConfig::new(2, SensorModel::Rs16, &path)).unwrap();
    let mut difop = vec![0u8; PACKET_LEN];
    difop[..8].copy_from_slice(&DIFOP_MAGIC);
    difop[8..10].copy_from_slice(&600u16.to_be_bytes());
    let mut out = Vec::new();
    p.push(&difop, 0, &mut out);
    for k in 0..86u64 {
        let mut b = packet(k, AZ0, true);
        for blk in 0..12 {
            let o = HEADER_LEN + blk * BLOCK_LEN;
            for c in 16..32 {
                let d: u16 = if c % 2 == 0 { 1000 } else { 1200 };
                b[o + 4 + 3 * c..o + 6 + 3 * c].copy_from_slice(&d.to_be_bytes());
            }
        }
        p.push(&b, host(k), &mut out);
    }
    assert_eq!(
        p.return_mode(),
        Some(lidarxdp_core::sensor::ReturnMode::Dual)
    );
    assert_eq!(out.len(), 2);
    let f = &out[1];
    // Frame 1: 75 packets' worth of blocks (6 + 74·12 + 6), 16 + 8 points per block.
    assert_eq!(f.points.len(), 900 * 24);
    let count = |t: u8| {
        f.points
            .autoware()
            .iter()
            .filter(|p| p.return_type == t)
            .count()
    };
    assert_eq!(count(6), 900 * 8); // identical, merged
    assert_eq!(count(9), 900 * 8); // odd lasers: first (5 m) and, equal intensity, strongest
    assert_eq!(count(5), 900 * 8); // odd lasers: last (6 m), weak
    let _ = std::fs::remove_file(path);
}
