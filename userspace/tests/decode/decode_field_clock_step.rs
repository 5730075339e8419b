//! Issue 39, fault class 1: a step of the sensor's clock (PTP lock acquired, a TAI−UTC fix, a
//! GPS time jump), forward or back, seconds to years, while the sensor keeps turning. Every
//! vendor: the step cuts no turn and loses nothing; the frame that holds it keeps its start,
//! every later frame is stamped on the new time ([`lidarxdp_core::scan::TimeVerdict::Step`]).
//!
//! Inputs are built in code from the shared captures: from packet `k` on (mid-frame), every
//! time field of the packet is moved by the step; host times stay as recorded. Each is checked
//! against the same capture decoded without the step, frame by frame:
//! * the counters: one clock step, no restart, no time jump, every packet decoded;
//! * the same frames (count, packets received and expected, points, frames lost);
//! * frames before the step and the frame that holds it: the clean start; frames after it:
//!   the clean start plus the step;
//! * points equal field by field, except the `time_stamp` of the points after the step in the
//!   frame that holds it, which the stream continues from the packets' own spacing: within the
//!   sensor's time stamp resolution (Velodyne, Hesai, RoboSense: 1 µs) or, for Ouster, whose
//!   column stamps are ns with jitter, within one column's jitter.

use std::path::Path;

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{DecodeCounters, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::time::days_from_civil;
use lidarxdp_core::valid::RangeGate;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// `(payload, host_ns)` of every datagram to `port` in `rel` (under shared/data).
fn capture(rel: &str, port: u16) -> Vec<(Vec<u8>, u64)> {
    let (d, _) = read_udp_datagrams(Path::new(&format!("{DATA}{rel}")), Some(port)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
        .collect()
}

/// Twice the largest deviation of one packet interval from the mean interval of `times` (the
/// packets' sensor times, ns): how far a continuation from the mean spacing may lie from a
/// sensor's own (jittered, or µs-rounded) stamp.
fn twice_jitter(times: &[u64]) -> u32 {
    let dt: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let mean = dt.iter().sum::<f64>() / dt.len() as f64;
    let dev = dt.iter().map(|d| (d - mean).abs()).fold(0.0, f64::max);
    (2.0 * dev).ceil() as u32
}

fn run(cfg: &SensorConfig, input: &[(Vec<u8>, u64)]) -> (Vec<Frame>, DecodeCounters) {
    let mut p =
        lidarxdp::calibration::pipeline_with_options(cfg, PipelineOptions::default()).unwrap();
    let mut out = Vec::new();
    for (payload, t) in input {
        p.push(payload, *t, &mut out);
    }
    p.flush(&mut out);
    (out, *p.counters())
}

/// Decodes `clean` and `clean` with `step_at(k)` applied to every packet from `k` on, and
/// checks the class-1 contract (module documentation) for a step of `step_ns`, with the
/// points after the step in the frame that holds it within `tol_ns` of the clean stamps.
/// Returns the index of the first frame stamped on the new time.
fn check_step(
    cfg: &SensorConfig,
    clean: &[(Vec<u8>, u64)],
    k: usize,
    step_ns: i64,
    tol_ns: u32,
    step_at: impl Fn(&mut [u8]),
) -> usize {
    let (want, wc) = run(cfg, clean);
    let mut input = clean.to_vec();
    for (p, _) in &mut input[k..] {
        step_at(p);
    }
    let (got, c) = run(cfg, &input);
    let what = format!("{} step {step_ns} ns at packet {k}", cfg.model);
    assert_eq!(
        (c.clock_steps, c.restarts, c.time_jumps, c.late, c.decoded),
        (1, 0, 0, 0, wc.decoded),
        "{what}"
    );
    assert_eq!(got.len(), want.len(), "{what}");
    // The frames keep their start up to the one that holds the step; from the next one on,
    // the new time.
    let j = got
        .iter()
        .zip(&want)
        .position(|(g, w)| g.header.start_ns != w.header.start_ns)
        .unwrap_or(got.len());
    assert!(
        j >= 1 && j < got.len(),
        "{what}: the step lies inside the run"
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let mut h = w.header;
        if i >= j {
            h.start_ns = h.start_ns.checked_add_signed(step_ns).unwrap();
        }
        assert_eq!(g.header, h, "{what}: frame {i}");
        if i >= j {
            assert_eq!(g.points, w.points, "{what}: frame {i}");
            continue;
        }
        // The frames on the old time (the one that holds the step; for Hesai's per-channel
        // cut also the one before it, still open for the channels behind the cut): every
        // field exact, the stamps after the step continued from the packets' spacing.
        let (gp, wp) = (g.points.autoware(), w.points.autoware());
        assert_eq!(gp.len(), wp.len(), "{what}");
        let mut off = 0;
        for (a, b) in gp.iter().zip(wp) {
            let d = a.time_stamp.abs_diff(b.time_stamp);
            off = off.max(d);
            let mut a = *a;
            a.time_stamp = b.time_stamp;
            assert_eq!(a, *b, "{what}: frame {i}");
        }
        assert!(off <= tol_ns, "{what}: stamps off by {off} ns");
    }
    j
}

// ---- Velodyne (VLP-16 dual) -----------------------------------------------------------------

#[test]
fn velodyne_clock_step_cuts_no_turn() {
    let clean = capture("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", 2368);
    let cfg = SensorConfig::new(
        2,
        SensorModel::Vlp16,
        format!("{DATA}velodyne/vlp16/calibration/VLP16db.yaml"),
    );
    // Microseconds past the hour at 1200: the capture's lie 140.5 to 141 s past the hour, so
    // a step of 37 s (TAI − UTC) either way, 15 minutes on or 2 minutes back stays inside it.
    let toh = |p: &[u8]| u32::from_le_bytes(p[1200..1204].try_into().unwrap());
    assert_eq!(toh(&clean[0].0), 140_554_572);
    let times: Vec<u64> = clean
        .iter()
        .map(|(p, _)| u64::from(toh(p)) * 1000)
        .collect();
    // 663 or 664 µs between packets (663.552 µs, stamped in µs).
    let tol = twice_jitter(&times);
    assert_eq!(tol, 1_103);
    for step_s in [37i64, -37, 900, -120] {
        let j = check_step(&cfg, &clean, 300, step_s * 1_000_000_000, tol, |p| {
            let us = (i64::from(toh(p)) + step_s * 1_000_000) as u32;
            p[1200..1204].copy_from_slice(&us.to_le_bytes());
        });
        assert_eq!(j, 2, "{step_s} s");
    }
}

// ---- Hesai (Pandar64 dual: date and time in the tail) ---------------------------------------

const P64_DATE: usize = lidarxdp_core::sensor::hesai::layout::PANDAR64.tail_offset()
    + lidarxdp_core::sensor::hesai::layout::PANDAR64.t_date;

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[test]
fn hesai_clock_step_cuts_no_turn() {
    let clean = capture("hesai/pandar64/pandar64_nebula.pcap", 2368);
    let mut cfg = SensorConfig::new(
        4,
        SensorModel::Pandar64,
        format!("{DATA}hesai/pandar64/Pandar64.csv"),
    );
    cfg.range = RangeGate::from_m(0.3, 200.0).unwrap();
    // The date's calendar fields (years since 1900), moved by whole seconds.
    let shift = |p: &mut [u8], secs: i64| {
        let d = &p[P64_DATE..P64_DATE + 6];
        let days = days_from_civil(1900 + i64::from(d[0]), d[1].into(), d[2].into());
        let t = days * 86_400 + i64::from(d[3]) * 3600 + i64::from(d[4]) * 60 + i64::from(d[5]);
        let t = t + secs;
        let (y, m, d) = civil_from_days(t.div_euclid(86_400));
        let s = t.rem_euclid(86_400);
        let f = [y - 1900, m, d, s / 3600, s / 60 % 60, s % 60];
        for (o, v) in f.iter().enumerate() {
            p[P64_DATE + o] = *v as u8;
        }
    };
    // A TAI − UTC fix, a GPS week-number rollover (1024 weeks back), a clock a year on.
    let year = 365 * 86_400;
    for step_s in [37i64, -1024 * 7 * 86_400, year] {
        // The Pandar64 stamps its packets to the µs: within 1 µs of the clean stamps.
        let j = check_step(
            &cfg,
            &clean,
            clean.len() / 2,
            step_s * 1_000_000_000,
            1_000,
            |p| shift(p, step_s),
        );
        assert!(j >= 1, "{step_s} s");
    }
}

// ---- RoboSense (Helios-16P: u48 Unix seconds + u32 µs in the header) ------------------------

#[test]
fn robosense_clock_step_cuts_no_turn() {
    let dir = "robosense/helios16p/";
    let cfg = SensorConfig::new(
        6,
        SensorModel::Helios16p,
        format!("{DATA}{dir}RobosenseHelios16P.csv"),
    );
    let clean = capture(&format!("{dir}helios16p_nebula_pr79.pcap"), 6699);
    // From a sensor clock counting from power-on (1970) to UTC, and back by 37 s.
    let secs = |p: &[u8]| {
        let mut b = [0u8; 8];
        b[2..8].copy_from_slice(&p[20..26]);
        i64::from_be_bytes(b)
    };
    // The Helios stamps jitter: 654 to 673 µs between packets (666.7 µs on average).
    let times: Vec<u64> = clean
        .iter()
        .map(|(p, _)| {
            let us = u32::from_be_bytes(p[26..30].try_into().unwrap());
            secs(p) as u64 * 1_000_000_000 + u64::from(us) * 1000
        })
        .collect();
    let tol = twice_jitter(&times);
    assert_eq!(tol, 25_314);
    for step_s in [-37i64, 56 * 365 * 86_400] {
        let j = check_step(&cfg, &clean, 400, step_s * 1_000_000_000, tol, |p| {
            let s = (secs(p) + step_s) as u64;
            p[20..26].copy_from_slice(&s.to_be_bytes()[2..8]);
        });
        assert!(j >= 1, "{step_s} s");
    }
}

// ---- Ouster (OS2-128, one frame replicated) -------------------------------------------------

const OS2: &str = "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10";

/// Frames 0..n of the OS2-128 frame replicated: `frame_id` and the column stamps moved on by
/// one frame (100 ms) per copy, host times likewise.
fn os2_stream(n: u16) -> Vec<(Vec<u8>, u64)> {
    let one = capture(&format!("{OS2}.pcap"), 7502);
    assert_eq!(one.len(), 64);
    (0..n)
        .flat_map(|f| {
            one.iter().map(move |(p, t)| {
                let mut v = p.clone();
                let id = u16::from_le_bytes([v[2], v[3]]).wrapping_add(f);
                v[2..4].copy_from_slice(&id.to_le_bytes());
                let dt = u64::from(f) * 100_000_000;
                move_columns(&mut v, dt as i64);
                (v, t + dt)
            })
        })
        .collect()
}

/// Moves every column stamp of an RNG19 OS2-128 packet by `dt_ns` (16 columns of 12 + 128·12
/// bytes after a 32-byte header).
fn move_columns(v: &mut [u8], dt_ns: i64) {
    for col in 0..16 {
        let o = 32 + col * (12 + 128 * 12);
        let ts = u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
        v[o..o + 8].copy_from_slice(&ts.checked_add_signed(dt_ns).unwrap().to_le_bytes());
    }
}

#[test]
fn ouster_clock_step_cuts_no_turn_and_loses_no_column() {
    let cfg = SensorConfig::new(5, SensorModel::Ouster, format!("{DATA}{OS2}.json"));
    let clean = os2_stream(3);
    // The capture's column clock counts from power-on (TIME_FROM_INTERNAL_OSC): PTP lock puts
    // it on TAI, 56 years on; a TAI − UTC fix steps it back 37 s.
    // The first column's stamps lie 1 557.4 to 1 568.0 µs apart (1 561.5 µs on average).
    let times: Vec<u64> = clean
        .iter()
        .take(64)
        .map(|(p, _)| u64::from_le_bytes(p[32..40].try_into().unwrap()))
        .collect();
    let tol = twice_jitter(&times);
    assert_eq!(tol, 12_842);
    for step_s in [56 * 365 * 86_400i64, -37] {
        let step = step_s * 1_000_000_000;
        let j = check_step(&cfg, &clean, 64 + 20, step, tol, |p| move_columns(p, step));
        assert_eq!(j, 2, "{step_s} s");
    }
}
