//! Field faults on real Ouster packets (os2-128 RNG19, os1-64 LEGACY fw 1.1x) and synthetic
//! packets for the profiles without a capture (FIVE_WORD_PIXEL, identical dual returns).

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::scan::RESTART_AGREE;
use lidarxdp_core::sensor::ouster::OusterStream;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::{
    ConfigError, PipelineOptions, Rejection, ReturnMode, SensorConfig, SensorModel, VendorDecoder,
};
use lidarxdp_core::valid::{Degrees, Fov, RangeGate};

const OS2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10"
);
const OS1_64: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/ouster/os1-64/os1-64_legacy_fw1.1x_3frames"
);

/// The range gate these tests count against, (0.3, 300) m (the default before the datasheet
/// ranges; the Ouster default is now (0, 400) m).
fn cfg(base: &str) -> SensorConfig {
    SensorConfig {
        range: RangeGate::from_m(0.3, 300.0).unwrap(),
        ..SensorConfig::new(5, SensorModel::Ouster, format!("{base}.json"))
    }
}

/// All UDP payloads to port 7502 with their record times.
fn lidar(base: &str) -> Vec<(Vec<u8>, u64)> {
    udp_payloads(Path::new(&format!("{base}.pcap")))
        .unwrap()
        .map(Result::unwrap)
        .filter(|d| d.dst_port == 7502)
        .map(|d| (d.payload, d.ts_ns))
        .collect()
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    ok: u32,
    malformed: u32,
    ignored: u32,
    jumps: u32,
    late: u32,
}

fn run_with(base: &str, input: &[(Vec<u8>, u64)]) -> (Vec<Frame>, Counts, OusterStream) {
    let mut s = OusterStream::new(
        &cfg(base),
        &lidarxdp::calibration::read(&cfg(base).calibration).unwrap(),
        PipelineOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut c = Counts::default();
    // As `ScanPipeline::push`: time jumps are held until a restart confirms them (then they
    // are pushed again before the confirming packet) or a packet in line releases them.
    let mut held: Vec<(&[u8], u64)> = Vec::new();
    for (p, t) in input {
        match s.push(p, HostTime::both(*t), &mut out) {
            Ok(()) => {
                c.jumps += held.len() as u32;
                held.clear();
                c.ok += 1
            }
            Err(Rejection::Malformed) => c.malformed += 1,
            Err(Rejection::Ignored) => c.ignored += 1,
            Err(Rejection::Late) => {
                c.jumps += held.len() as u32;
                held.clear();
                c.late += 1
            }
            Err(Rejection::TimeJump) => {
                if held.len() + 1 >= RESTART_AGREE as usize {
                    held.remove(0);
                    c.jumps += 1;
                }
                held.push((p, *t));
            }
            Err(Rejection::Restart | Rejection::ClockStep) => {
                for (hp, ht) in held.drain(..).chain([(&p[..], *t)]) {
                    assert_eq!(s.push(hp, HostTime::both(ht), &mut out), Ok(()));
                    c.ok += 1;
                }
            }
        }
    }
    c.jumps += held.len() as u32;
    s.flush(&mut out);
    (out, c, s)
}

fn header(f: &Frame) -> (u32, u32, u32, usize) {
    (
        f.header.packets_received,
        f.header.packets_expected,
        f.header.packets_malformed,
        f.points.len(),
    )
}

#[test]
fn damaged_and_foreign_datagrams_are_counted_and_leave_the_frame_intact() {
    let clean = lidar(OS2);
    assert_eq!(clean.len(), 64);
    let (good, gc, _) = run_with(OS2, &clean);
    assert_eq!(
        gc,
        Counts {
            ok: 64,
            malformed: 0,
            ignored: 0,
            jumps: 0,
            late: 0
        }
    );
    // 3 pixels have a range >= 300 m (the range gate's maximum in `cfg`).
    assert_eq!(header(&good[0]), (64, 64, 0, 119_679));

    let src = &clean[20].0;
    let t = clean[20].1;
    let short = src[..src.len() - 1].to_vec();
    let mut long = src.clone();
    long.extend_from_slice(&[0, 0, 0]);
    let mut bad_type = src.clone();
    bad_type[0] = 2;
    let mut bad_mid = src.clone();
    // Column 7's measurement_id (u16 @ 32 + 7·1548 + 8) set to 1024 (= columns_per_frame).
    let o = 32 + 7 * (12 + 128 * 12) + 8;
    bad_mid[o..o + 2].copy_from_slice(&1024u16.to_le_bytes());
    let half = src[..8448].to_vec(); // a datagram that lost most of its fragments: foreign size
    let mut dirty = clean.clone();
    dirty.splice(
        21..21,
        [
            (short, t),
            (long, t),
            (bad_type, t),
            (bad_mid, t),
            (vec![0xAB; 49], t),
            (vec![0x11; 356], t),
            (vec![0x45; 544], t),
            (vec![0; 48], t),
            (half, t),
            (Vec::new(), t),
        ],
    );
    let (frames, c, s) = run_with(OS2, &dirty);
    assert_eq!(
        c,
        Counts {
            ok: 64,
            malformed: 4,
            ignored: 6,
            jumps: 0,
            late: 0
        }
    );
    assert_eq!(frames.len(), 1);
    assert_eq!(header(&frames[0]), (64, 64, 4, 119_679));
    assert_eq!(frames[0].points, good[0].points);
    assert_eq!(s.stats().duplicates, 0);
}

#[test]
fn lost_packets_are_reported_and_duplicates_dropped() {
    let clean = lidar(OS2);
    let (good, _, _) = run_with(OS2, &clean);
    // Lose packets 10..14 (columns 160..223), repeat packet 30 twice.
    let mut input: Vec<_> = clean[..10].to_vec();
    input.extend_from_slice(&clean[14..31]);
    input.push(clean[30].clone());
    input.push(clean[30].clone());
    input.extend_from_slice(&clean[31..]);
    let (frames, c, s) = run_with(OS2, &input);
    assert_eq!(
        c,
        Counts {
            ok: 60,
            malformed: 0,
            ignored: 2,
            jumps: 0,
            late: 0
        }
    );
    assert_eq!(s.stats().duplicates, 2);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(
        (f.header.packets_received, f.header.packets_expected),
        (60, 64)
    );
    // Exactly the clean frame minus the lost columns: nothing duplicated.
    let t_lo = good[0]
        .points
        .autoware()
        .iter()
        .map(|p| p.time_stamp)
        .collect::<Vec<_>>();
    let col_ns = 97_656; // 100 ms / 1024 columns, rounded
    let lost: Vec<_> = good[0]
        .points
        .autoware()
        .iter()
        .filter(|p| {
            let col = (p.time_stamp + col_ns / 2) / col_ns;
            !(160..224).contains(&col)
        })
        .copied()
        .collect();
    assert_eq!(f.points, lost);
    assert!(t_lo.len() > lost.len());
}

#[test]
fn reordered_packets_give_the_same_points_in_time_order() {
    let clean = lidar(OS2);
    let (good, _, _) = run_with(OS2, &clean);
    let mut input = clean.clone();
    input.swap(0, 5); // the frame's first column now arrives sixth
    input.swap(40, 41);
    let (frames, _, _) = run_with(OS2, &input);
    let f = &frames[0];
    assert_eq!(f.header.start_ns, good[0].header.start_ns);
    assert_eq!(f.points.len(), good[0].points.len());
    let mut a = f.points.autoware().to_vec();
    let mut b = good[0].points.autoware().to_vec();
    let key = |p: &lidarxdp_core::point::PointXYZIRCAEDT| (p.time_stamp, p.channel, p.return_type);
    a.sort_by_key(key);
    b.sort_by_key(key);
    assert_eq!(a, b);
    let mut last = [0u32; 128];
    for p in f.points.autoware() {
        assert!(p.time_stamp >= last[usize::from(p.channel)]);
        last[usize::from(p.channel)] = p.time_stamp;
    }
}

#[test]
fn partial_frames_lost_start_timeouts_and_late_packets() {
    let all = lidar(OS1_64);
    assert_eq!(all.len(), 100);
    // Frame 12073 is packets 14..78. Lose its first 5 packets: the frame starts at its own first
    // received packet (column 80).
    let mut input = all.clone();
    input.drain(14..19);
    let (frames, _, _) = run_with(OS1_64, &input);
    assert_eq!(frames.len(), 3);
    assert_eq!(header(&frames[1]).0, 59);
    let col80 = u64::from_le_bytes(all[19].0[..8].try_into().unwrap());
    assert_eq!(frames[1].header.start_ns, col80);
    assert_eq!(frames[1].header.start_ns, 1_561_675_845_279_951_616);
    assert_eq!(frames[1].header.host_ns, all[19].1);
    assert_eq!(
        frames[1]
            .points
            .autoware()
            .iter()
            .map(|p| p.time_stamp)
            .min(),
        Some(0)
    );

    // Timeout: silence longer than 200 ms of host time closes the partial first frame; a late
    // packet of that frame afterwards is stale.
    let mut s = OusterStream::new(
        &cfg(OS1_64),
        &lidarxdp::calibration::read(&cfg(OS1_64).calibration).unwrap(),
        PipelineOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    for (p, t) in &all[..10] {
        s.push(p, HostTime::both(*t), &mut out).unwrap();
    }
    let t9 = all[9].1;
    s.poll_timeout(t9 + 200_000_000, &mut out);
    assert!(out.is_empty());
    s.poll_timeout(t9 + 200_000_001, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(header(&out[0]).0, 10);
    assert_eq!(
        s.push(&all[10].0, HostTime::both(t9 + 300_000_000), &mut out),
        Err(Rejection::Late)
    );
    assert_eq!(s.stats().stale, 1);
    // The next frame opens normally, with sequence 1.
    s.push(&all[14].0, HostTime::both(t9 + 300_000_001), &mut out)
        .unwrap();
    s.flush(&mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[1].header.sequence, out[1].header.packets_received),
        (1, 1)
    );
    assert_eq!(s.return_mode(), Some(ReturnMode::Strongest));
    // The same packet again is a late packet of a published frame (stale) until reset().
    assert_eq!(
        s.push(&all[14].0, HostTime::both(t9 + 300_000_002), &mut out),
        Err(Rejection::Late)
    );
    s.reset();
    s.push(&all[14].0, HostTime::both(t9 + 300_000_003), &mut out)
        .unwrap();
    s.flush(&mut out);
    assert_eq!(out.len(), 3);
    assert_eq!(out[2].points, out[1].points);
    assert_eq!(out[2].header.sequence, 2);
}

#[test]
fn frame_id_wraps_and_header_mismatches_are_counted() {
    let clean = lidar(OS2);
    let with_frame = |p: &[u8], id: u16| {
        let mut v = p.to_vec();
        v[2..4].copy_from_slice(&id.to_le_bytes());
        v
    };
    // Half a frame as id 65535, then half as id 0: two frames, 0 is newer than 65535.
    let mut input: Vec<_> = clean[..32]
        .iter()
        .map(|(p, t)| (with_frame(p, 65535), *t))
        .collect();
    input.extend(clean[32..].iter().map(|(p, t)| (with_frame(p, 0), *t)));
    // A late 65535 packet after 0 started: stale.
    input.push((with_frame(&clean[3].0, 65535), clean[63].1));
    let (frames, c, s) = run_with(OS2, &input);
    assert_eq!(
        c,
        Counts {
            ok: 64,
            malformed: 0,
            ignored: 0,
            jumps: 0,
            late: 1
        }
    );
    assert_eq!(s.stats().stale, 1);
    assert_eq!(
        frames
            .iter()
            .map(|f| f.header.packets_received)
            .collect::<Vec<_>>(),
        vec![32, 32]
    );
    // A packet whose serial number (u40 @7) and init_id (u24 @4) disagree with the metadata
    // (992210000957, 5431293): decoded all the same, counted.
    let mut input = clean.clone();
    input[7].0[7] ^= 0xFF;
    input[8].0[4] ^= 0x01;
    let (frames, c, s) = run_with(OS2, &input);
    assert_eq!(c.ok, 64);
    assert_eq!(frames[0].points.len(), 119_679);
    assert_eq!(
        (s.stats().serial_mismatch, s.stats().init_id_mismatch),
        (1, 1)
    );
}

#[test]
fn cut_angle_fov_and_range_settings() {
    for cut in [0.0, 360.0] {
        let c = SensorConfig {
            cut_angle: Degrees::new(cut).unwrap(),
            ..cfg(OS2)
        };
        assert!(lidarxdp::calibration::pipeline(&c).is_ok(), "{cut}");
    }
    let c = SensorConfig {
        cut_angle: Degrees::new(90.0).unwrap(),
        ..cfg(OS2)
    };
    let e = lidarxdp::calibration::pipeline(&c).unwrap_err();
    assert!(
        matches!(&e, ConfigError::OutOfRange { field, .. } if field == "cut_angle"),
        "{e}"
    );
    let c = SensorConfig {
        calibration: "/nonexistent/meta.json".into(),
        ..cfg(OS2)
    };
    assert!(matches!(
        lidarxdp::calibration::pipeline(&c).unwrap_err(),
        ConfigError::CalibrationIo { .. }
    ));
    let c = SensorConfig {
        calibration: concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").into(),
        ..cfg(OS2)
    };
    assert!(matches!(
        lidarxdp::calibration::pipeline(&c).unwrap_err(),
        ConfigError::Calibration { .. }
    ));

    let clean = lidar(OS2);
    let decode = |opts: PipelineOptions, c: &SensorConfig| {
        let mut p = lidarxdp::calibration::pipeline_with_options(c, opts).unwrap();
        let mut out = Vec::new();
        for (d, t) in &clean {
            p.push(d, *t, &mut out);
        }
        p.flush(&mut out);
        out.remove(0).points.into_vec()
    };
    let all = decode(PipelineOptions::default(), &cfg(OS2));
    // The range limits of `cfg`, (0.3, 300) m: everything inside, nothing at or beyond.
    assert!(all.iter().all(|p| p.distance > 0.3 && p.distance < 300.0));
    let wide = SensorConfig {
        range: RangeGate::from_m(0.0, 1000.0).unwrap(),
        ..cfg(OS2)
    };
    let n_all = decode(PipelineOptions::default(), &wide).len();
    assert_eq!(n_all, 119_682);
    assert_eq!(n_outside_default(&clean), 3);
    assert_eq!(all.len(), 119_679);
    for (min, max) in [(0.0, 90.0), (270.0, 90.0), (359.0, 1.0)] {
        let opts = PipelineOptions {
            fov: Some(Fov::from_deg(min, max).unwrap()),
            ..Default::default()
        };
        let pts = decode(opts, &wide);
        let (lo, hi) = ((min as f32).to_radians(), (max as f32).to_radians());
        let inside = |a: f32| {
            if lo <= hi {
                a >= lo && a <= hi
            } else {
                a >= lo || a <= hi
            }
        };
        assert!(!pts.is_empty());
        assert!(pts.iter().all(|p| inside(p.azimuth)), "{min}..{max}");
        let expect = decode(PipelineOptions::default(), &wide)
            .into_iter()
            .filter(|p| inside(p.azimuth))
            .count();
        assert_eq!(pts.len(), expect, "{min}..{max}");
    }
}

/// Pixels with a non-zero range outside the default (0.3, 300) m in the os2-128 frame.
fn n_outside_default(clean: &[(Vec<u8>, u64)]) -> usize {
    let meta = OusterMetadata::from_bytes(
        &lidarxdp::calibration::read(Path::new(&format!("{OS2}.json"))).unwrap(),
        Path::new(&format!("{OS2}.json")),
    )
    .unwrap();
    let mut n = 0;
    for (d, _) in clean {
        let p = lidarxdp_core::sensor::ouster::packet::Packet::new_checked(&d[..], meta.format)
            .unwrap();
        for col in 0..16 {
            for row in 0..128 {
                let r = p.field(
                    lidarxdp_core::sensor::ouster::packet::ChanField::Range,
                    col,
                    row,
                );
                let d = r as f32 / 1000.0;
                if r != 0 && (d <= 0.3 || d >= 300.0) {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Metadata for a synthetic 8-beam, 512-column sensor in `profile`.
fn synth_meta(profile: &str) -> OusterMetadata {
    let alt: Vec<String> = (0..8)
        .map(|i| format!("{}", 7.0 - 2.0 * i as f64))
        .collect();
    let az = ["0.0"; 8].join(",");
    OusterMetadata::from_json(&format!(
        r#"{{"prod_line": "OS-1-8", "prod_sn": "123", "initialization_id": 9,
            "beam_altitude_angles": [{}], "beam_azimuth_angles": [{az}], "lidar_mode": "512x10",
            "lidar_origin_to_beam_origin_mm": 0.0, "lidar_to_sensor_transform":
            [1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1],
            "data_format": {{"pixels_per_column": 8, "columns_per_packet": 16,
              "columns_per_frame": 512, "column_window": [0, 511],
              "udp_profile_lidar": "{profile}"}}}}"#,
        alt.join(",")
    ))
    .unwrap()
}

/// One synthetic non-legacy packet: frame `fid`, columns `first..first+16`, column timestamps
/// `1e9 + m·195312`, every pixel filled by `px(col, row, bytes)`.
fn synth_packet(
    meta: &OusterMetadata,
    fid: u16,
    first: u16,
    px: impl Fn(u16, usize, &mut [u8]),
) -> Vec<u8> {
    let f = meta.format;
    let mut b = vec![0u8; f.packet_len()];
    b[0] = 1;
    b[2..4].copy_from_slice(&fid.to_le_bytes());
    b[4..7].copy_from_slice(&9u32.to_le_bytes()[..3]);
    b[7..12].copy_from_slice(&123u64.to_le_bytes()[..5]);
    let pb = f.profile.pixel_bytes();
    for c in 0..16usize {
        let m = first + c as u16;
        let o = 32 + c * f.col_len();
        b[o..o + 8].copy_from_slice(&(1_000_000_000 + u64::from(m) * 195_312).to_le_bytes());
        b[o + 8..o + 10].copy_from_slice(&m.to_le_bytes());
        b[o + 10..o + 12].copy_from_slice(&1u16.to_le_bytes());
        for r in 0..8 {
            let p = o + 12 + r * pb;
            px(m, r, &mut b[p..p + pb]);
        }
    }
    b
}

fn stream(meta: OusterMetadata) -> OusterStream {
    let c = SensorConfig {
        range: RangeGate::from_m(0.0, 1000.0).unwrap(),
        ..SensorConfig::new(1, SensorModel::Ouster, "unused.json")
    };
    OusterStream::with_metadata(&c, PipelineOptions::default(), meta).unwrap()
}

#[test]
fn dual_returns_merge_identical_and_label_second_strongest() {
    for profile in ["RNG19_RFL8_SIG16_NIR16_DUAL", "FIVE_WORD_PIXEL"] {
        let meta = synth_meta(profile);
        assert_eq!(meta.packets_per_frame(), 32);
        let mut s = stream(meta.clone());
        let mut out = Vec::new();
        // Row 0: identical returns (5000 mm); row 1: 4000 + 9000 mm; row 2: only a first return;
        // row 3: nothing.
        let pkt = synth_packet(&meta, 7, 0, |_, r, px| {
            let (r1, r2) = [(5000u32, 5000u32), (4000, 9000), (3000, 0), (0, 0)][r.min(3)];
            px[0..4].copy_from_slice(&(r1 | (50 << 24)).to_le_bytes());
            px[4..8].copy_from_slice(&(r2 | (20 << 24)).to_le_bytes());
        });
        s.push(&pkt, HostTime::both(1), &mut out).unwrap();
        s.flush(&mut out);
        let f = &out[0];
        assert_eq!(
            (f.header.packets_received, f.header.packets_expected),
            (1, 32)
        );
        assert_eq!(f.header.start_ns, 1_000_000_000);
        // Per column: identical (6), strongest (3) + second strongest (8), strongest (3).
        assert_eq!(f.points.len(), 16 * 4, "{profile}");
        let col0: Vec<(u16, u8, f32, u8)> = f.points.autoware()[..4]
            .iter()
            .map(|p| (p.channel, p.return_type, p.distance, p.intensity))
            .collect();
        assert_eq!(
            col0,
            vec![
                (0, 6, 5.0, 50),
                (1, 3, 4.0, 50),
                (1, 8, 9.0, 20),
                (2, 3, 3.0, 50)
            ]
        );
        // Column 0 with zero beam offsets and identity transform: x = -r·cos(alt) (encoder
        // angle 2π maps column 0 to +x... rotated by the identity), y = 0, z = r·sin(alt).
        let p = f.points.autoware()[0];
        assert!(
            (p.x - 5.0 * 7f32.to_radians().cos()).abs() < 1e-5,
            "{}",
            p.x
        );
        assert!(p.y.abs() < 1e-5);
        assert!((p.z - 5.0 * 7f32.to_radians().sin()).abs() < 1e-5);
        assert_eq!(f.points.autoware()[4].time_stamp, 195_312);
        assert_eq!(s.return_mode(), Some(ReturnMode::Dual));
    }
}

#[test]
fn low_data_rate_and_window_columns() {
    let meta = synth_meta("RNG15_RFL8_NIR8");
    let mut s = stream(meta.clone());
    let mut out = Vec::new();
    // 15-bit range 1000 (×8 mm = 8 m), reflectivity 77; columns with status 0 are skipped.
    let mut pkt = synth_packet(&meta, 1, 32, |_, _, px| {
        px[0..2].copy_from_slice(&1000u16.to_le_bytes());
        px[2] = 77;
    });
    let o = 32 + 3 * meta.format.col_len() + 10;
    pkt[o] = 0;
    s.push(&pkt, HostTime::both(1), &mut out).unwrap();
    s.flush(&mut out);
    assert_eq!(out[0].points.len(), 15 * 8);
    assert!(
        out[0]
            .points
            .autoware()
            .iter()
            .all(|p| p.distance == 8.0 && p.intensity == 77)
    );
    assert_eq!(out[0].points.autoware()[0].return_type, 3);
    assert_eq!(s.stats().invalid_columns, 1);
}

/// A column whose time stamp is far from its frame's (0, or an hour ahead: a corrupt or stepped
/// column clock) is skipped and counted; the frame keeps its start time and no point's
/// `time_stamp` saturates.
#[test]
fn columns_with_far_time_stamps_are_skipped_and_counted() {
    let meta = synth_meta("RNG15_RFL8_NIR8");
    let f = meta.format;
    let px = |_: u16, _: usize, px: &mut [u8]| {
        px[0..2].copy_from_slice(&1000u16.to_le_bytes());
        px[2] = 77;
    };
    let clean = {
        let mut s = stream(meta.clone());
        let mut out = Vec::new();
        s.push(&synth_packet(&meta, 1, 32, px), HostTime::both(1), &mut out)
            .unwrap();
        s.flush(&mut out);
        out
    };
    let mut pkt = synth_packet(&meta, 1, 32, px);
    // Column 0 keeps its time (it opens the frame); column 3 says 0 ns, column 7 one hour on.
    for (col, ts) in [(3usize, 0u64), (7, 1_000_000_000 + 3_600_000_000_000)] {
        let o = 32 + col * f.col_len();
        pkt[o..o + 8].copy_from_slice(&ts.to_le_bytes());
    }
    let mut s = stream(meta.clone());
    let mut out = Vec::new();
    s.push(&pkt, HostTime::both(1), &mut out).unwrap();
    s.flush(&mut out);
    assert_eq!(s.stats().column_time_jumps, 2);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.start_ns, clean[0].header.start_ns);
    assert_eq!(out[0].points.len(), clean[0].points.len() - 2 * 8);
    assert!(
        out[0]
            .points
            .autoware()
            .iter()
            .all(|p| p.time_stamp < 16 * 195_312)
    );
    // Exactly the clean frame without columns 3 and 7.
    let keep: Vec<_> = clean[0]
        .points
        .autoware()
        .iter()
        .filter(|p| ![3u32, 7].contains(&(p.time_stamp / 195_312)))
        .copied()
        .collect();
    assert_eq!(out[0].points, keep);
}
