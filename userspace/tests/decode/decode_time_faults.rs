//! Time and frame faults of issue 11 (classes 1–4, 6 and 10), each a small input built in code
//! from a shared capture (one packet's time stamp, date or frame id altered, packets dropped or
//! reordered), with exact assertions against the same capture decoded without the fault.
//!
//! Captures: VLP-16 dual return (603 packets, 4 turns, `vlp16_dual_nebula_603pkt.pcap`),
//! Pandar64 dual (`pandar64_nebula.pcap`), OS2-128 (one frame of 64 packets, replicated into
//! consecutive frames by rewriting `frame_id` and the column time stamps).

use std::path::Path;

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::frame::{Frame, FrameClock};
use lidarxdp_core::sensor::{DecodeCounters, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::time::days_from_civil;
use lidarxdp_core::valid::{Degrees, Fov, RangeGate};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// `(payload, host_ns)` of every datagram to `port` in `rel` (under shared/data).
fn capture(rel: &str, port: u16) -> Vec<(Vec<u8>, u64)> {
    let (d, _) = read_udp_datagrams(Path::new(&format!("{DATA}{rel}")), Some(port)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
        .collect()
}

fn run(
    cfg: &SensorConfig,
    opts: PipelineOptions,
    input: &[(Vec<u8>, u64)],
) -> (Vec<Frame>, DecodeCounters) {
    let mut p = lidarxdp::calibration::pipeline_with_options(cfg, opts).unwrap();
    let mut out = Vec::new();
    for (payload, t) in input {
        p.push(payload, *t, &mut out);
    }
    p.flush(&mut out);
    (out, *p.counters())
}

/// `(received, expected, points, frames_lost_before)` per frame.
fn shape(frames: &[Frame]) -> Vec<(u32, u32, usize, u32)> {
    frames
        .iter()
        .map(|f| {
            let h = &f.header;
            (
                h.packets_received,
                h.packets_expected,
                f.points.len(),
                h.frames_lost_before,
            )
        })
        .collect()
}

// ---- Velodyne (VLP-16 dual) -----------------------------------------------------------------

const VLP16_DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";

fn vlp16() -> SensorConfig {
    SensorConfig::new(
        2,
        SensorModel::Vlp16,
        format!("{DATA}velodyne/vlp16/calibration/VLP16db.yaml"),
    )
}

fn toh(p: &[u8]) -> u32 {
    u32::from_le_bytes(p[1200..1204].try_into().unwrap())
}

fn set_toh(p: &mut [u8], us: u32) {
    p[1200..1204].copy_from_slice(&us.to_le_bytes());
}

#[test]
fn velodyne_one_stamp_far_off_is_dropped_and_the_frame_stays_whole() {
    let clean = capture(VLP16_DUAL, 2368);
    assert_eq!(clean.len(), 603);
    let k = 300;
    let without: Vec<_> = clean
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, d)| d.clone())
        .collect();
    let (want, wc) = run(&vlp16(), PipelineOptions::default(), &without);
    assert_eq!(wc.time_jumps, 0);
    // 48 s past the hour inside a stream at ~1235 s past the hour (backwards), and 3000 s
    // (ahead, resolved into the same hour): both dropped, the frames as without the packet.
    for bad_us in [48_000_000u32, 3_000_000_000] {
        let mut input = clean.clone();
        set_toh(&mut input[k].0, bad_us);
        let (got, c) = run(&vlp16(), PipelineOptions::default(), &input);
        assert_eq!(c.time_jumps, 1, "{bad_us}");
        assert_eq!(c.decoded, 602);
        assert_eq!(c.restarts, 0);
        assert_eq!(c.packets, c.accounted());
        assert_eq!(shape(&got), shape(&want), "{bad_us}");
        assert_eq!(got, want, "{bad_us}");
    }
}

#[test]
fn velodyne_hour_wrap_is_no_jump() {
    let clean = capture(VLP16_DUAL, 2368);
    let (want, _) = run(&vlp16(), PipelineOptions::default(), &clean);
    // Shift every stamp (and host time) so the hour wraps at packet 250: the sensor time
    // stays continuous, every frame decodes as before, only later.
    let t0 = toh(&clean[250].0);
    let shift_us = 3_600_000_000 - t0;
    let mut input = clean.clone();
    for (p, t) in &mut input {
        let us = (u64::from(toh(p)) + u64::from(shift_us)) % 3_600_000_000;
        set_toh(p, us as u32);
        *t += u64::from(shift_us) * 1000;
    }
    assert!(toh(&input[249].0) > 3_599_000_000 && toh(&input[250].0) < 1_000_000);
    let (got, c) = run(&vlp16(), PipelineOptions::default(), &input);
    assert_eq!((c.time_jumps, c.restarts, c.frames_lost), (0, 0, 0));
    assert_eq!(shape(&got), shape(&want));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.points, w.points);
        assert_eq!(
            g.header.start_ns,
            w.header.start_ns + u64::from(shift_us) * 1000
        );
    }
}

#[test]
fn velodyne_sustained_jump_is_a_restart() {
    let clean = capture(VLP16_DUAL, 2368);
    let (k, m) = (300, 60);
    // From packet k on, the sensor clock is 600 s ahead and the azimuth does not run on: the
    // packets from k + 60 on (about 0.4 turn further), on the host times of k on (a sensor
    // that restarted; a step of the clock while the azimuth runs on is no restart:
    // decode_field_clock_step.rs).
    let mut input = clean[..k].to_vec();
    input.extend(
        clean[k + m..]
            .iter()
            .zip(&clean[k..])
            .map(|((p, _), (_, t))| {
                let mut p = p.clone();
                let us = toh(&p) + 600_000_000;
                set_toh(&mut p, us);
                (p, *t)
            }),
    );
    let (got, c) = run(&vlp16(), PipelineOptions::default(), &input);
    assert_eq!((c.restarts, c.clock_steps), (1, 0));
    // The RESTART_AGREE - 1 packets that were judged jumps before the restart was confirmed
    // are held and decoded on the new time base (issue 23, class 6): nothing is lost.
    assert_eq!(c.time_jumps, 0);
    assert_eq!(c.decoded, 603 - m as u64);
    let points: usize = got.iter().map(|f| f.points.len()).sum();
    let (before, _) = run(&vlp16(), PipelineOptions::default(), &clean[..k]);
    let (after, _) = run(&vlp16(), PipelineOptions::default(), &clean[k + m..]);
    let clean_points: usize = before.iter().chain(&after).map(|f| f.points.len()).sum();
    assert_eq!(points, clean_points);
    // The frame in progress at the restart was closed before it; every frame after it starts
    // on the new time base, and no frame spans the step.
    let step = got
        .iter()
        .position(|f| f.header.start_ns >= got[0].header.start_ns + 500_000_000_000)
        .unwrap();
    assert!(step >= 1);
    for f in &got {
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.time_stamp < 200_000_000)
        );
    }
}

/// The capture without the packets `a..b`, host times as recorded (a real silence).
fn without(clean: &[(Vec<u8>, u64)], a: usize, b: usize) -> Vec<(Vec<u8>, u64)> {
    clean
        .iter()
        .enumerate()
        .filter(|(i, _)| !(a..b).contains(i))
        .map(|(_, d)| d.clone())
        .collect()
}

#[test]
fn velodyne_lost_turn_shows_and_no_frame_spans_two_turns() {
    let clean = capture(VLP16_DUAL, 2368);
    let (want, _) = run(&vlp16(), PipelineOptions::default(), &clean);
    assert_eq!(
        shape(&want),
        vec![
            (151, 152, 14829, 0),
            (152, 152, 14820, 0),
            (152, 152, 14844, 0),
            (151, 151, 14881, 0)
        ]
    );
    // 300 packets (1.99 turns) missing from 0.32 turns into frame 1: the gap passes the cut
    // twice, so frame 1 ends at the gap (its tail missing), the turn after it is lost whole,
    // and the frame after the gap misses its head (frames_lost_before 1).
    let (got, c) = run(
        &vlp16(),
        PipelineOptions::default(),
        &without(&clean, 200, 500),
    );
    assert_eq!(
        shape(&got),
        vec![
            (151, 152, 14829, 0),
            (50, 152, 4466, 0),
            (103, 152, 10512, 1)
        ]
    );
    assert_eq!((c.frames_lost, c.time_jumps), (1, 0));
    // 200 packets (1.32 turns) from 0.66 turns into frame 0: one cut passed, nothing lost
    // whole; the turn the gap ends in shows as the 2 packets received before its cut.
    let (got, c) = run(
        &vlp16(),
        PipelineOptions::default(),
        &without(&clean, 100, 300),
    );
    assert_eq!(
        shape(&got),
        vec![
            (100, 152, 11192, 0),
            (2, 152, 111, 0),
            (152, 152, 14844, 0),
            (151, 151, 14881, 0)
        ]
    );
    assert_eq!(c.frames_lost, 0);
    // No frame holds more than one turn of sensor time (100 ms at 600 rpm).
    for f in &got {
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.time_stamp < 101_000_000)
        );
    }
}

#[test]
fn velodyne_fov_first_frame_has_a_start_and_no_saturated_stamp() {
    let clean = capture(VLP16_DUAL, 2368);
    // The capture starts near 200°: a field of view of 300°..100° excludes its first packets.
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(300.0, 100.0).unwrap()),
        ..Default::default()
    };
    let (got, _) = run(&vlp16(), opts, &clean);
    assert!(got.len() >= 4);
    for f in &got {
        assert_ne!(f.header.start_ns, 0);
        assert!(f.points.autoware().iter().all(|p| p.time_stamp != u32::MAX));
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.time_stamp < 110_000_000)
        );
    }
}

/// The bench's 10-sensor scenario (issue 11 class 10): one VLP-16 dual stream among 10 sharing
/// 7,540 pps, so each packet is stamped 10/7540 s after the previous one (twice the dual
/// packet interval) while the azimuth advances as usual. Nothing is lost, so every frame that
/// begins and ends at a cut is complete.
#[test]
fn slow_replay_marks_no_frame_incomplete() {
    let all = capture(VLP16_DUAL, 2368);
    // As the bench's generator: the whole turns between the first and the last azimuth wrap,
    // looped.
    let az = |p: &[u8]| u16::from_le_bytes([p[2], p[3]]);
    let wraps: Vec<usize> = (1..all.len())
        .filter(|&i| az(&all[i].0) < az(&all[i - 1].0))
        .collect();
    let clean = &all[wraps[0]..*wraps.last().unwrap()];
    let n = clean.len() as u64;
    let t0 = 1_764_600_000_123_456_789u64;
    let input: Vec<_> = (0..8 * n)
        .map(|i| {
            let mut p = clean[(i % n) as usize].0.clone();
            let t = t0 + i * 10_000_000_000 / 7540;
            set_toh(&mut p, ((t / 1000) % 3_600_000_000) as u32);
            (p, t)
        })
        .collect();
    let (got, c) = run(&vlp16(), PipelineOptions::default(), &input);
    assert_eq!((c.time_jumps, c.frames_lost), (0, 0));
    let inner = &got[1..got.len() - 1];
    assert_eq!(inner.len(), 14);
    let incomplete: Vec<_> = inner
        .iter()
        .filter(|f| f.header.packets_expected != f.header.packets_received)
        .map(|f| {
            (
                f.header.sequence,
                f.header.packets_received,
                f.header.packets_expected,
            )
        })
        .collect();
    assert_eq!(incomplete, vec![]);
}

// ---- Hesai (Pandar64 dual) ------------------------------------------------------------------

const P64: &str = "hesai/pandar64/pandar64_nebula.pcap";

fn p64() -> SensorConfig {
    let mut c = SensorConfig::new(
        4,
        SensorModel::Pandar64,
        format!("{DATA}hesai/pandar64/Pandar64.csv"),
    );
    c.range = RangeGate::from_m(0.3, 200.0).unwrap();
    c
}

/// Offset of the 6-byte date in a Pandar64 packet (tail offset 16).
const P64_DATE: usize = lidarxdp_core::sensor::hesai::layout::PANDAR64.tail_offset()
    + lidarxdp_core::sensor::hesai::layout::PANDAR64.t_date;

#[test]
fn hesai_dates_in_either_year_convention_and_as_unix_seconds() {
    let clean = capture(P64, 2368);
    // The capture's dates are 2020-06-25 in the Pandar64 convention (years since 1900: 120).
    assert_eq!(clean[0].0[P64_DATE], 120);
    let (want, wc) = run(&p64(), PipelineOptions::default(), &clean);
    assert_eq!(wc.date_fallbacks, 0);
    // Years since 2000 (20): same time.
    let mut y2000 = clean.clone();
    for (p, _) in &mut y2000 {
        p[P64_DATE] -= 100;
    }
    let (got, _) = run(&p64(), PipelineOptions::default(), &y2000);
    assert_eq!(got, want);
    // Unix seconds (HesaiLidar_SDK_2.0): 0, then 40-bit big-endian seconds.
    let mut unix = clean.clone();
    for (p, _) in &mut unix {
        let d = &p[P64_DATE..P64_DATE + 6];
        let days = days_from_civil(1900 + i64::from(d[0]), d[1].into(), d[2].into());
        let secs = days * 86_400 + i64::from(d[3]) * 3600 + i64::from(d[4]) * 60 + i64::from(d[5]);
        let b = (secs as u64).to_be_bytes();
        p[P64_DATE] = 0;
        p[P64_DATE + 1..P64_DATE + 6].copy_from_slice(&b[3..8]);
    }
    let (got, _) = run(&p64(), PipelineOptions::default(), &unix);
    assert_eq!(got, want);
}

#[test]
fn hesai_invalid_dates_fall_back_to_host_time() {
    let clean = capture(P64, 2368);
    let (want, _) = run(&p64(), PipelineOptions::default(), &clean);
    // Every packet says month 13: decoded all the same, on host time, counted.
    let mut input = clean.clone();
    for (p, _) in &mut input {
        p[P64_DATE + 1] = 13;
    }
    let (got, c) = run(&p64(), PipelineOptions::default(), &input);
    assert_eq!(c.decoded, clean.len() as u64);
    assert_eq!(c.date_fallbacks, clean.len() as u64);
    assert_eq!(c.malformed, 0);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.header.clock, FrameClock::Host);
        assert_eq!(g.points.len(), w.points.len());
        assert_eq!(g.header.packets_received, w.header.packets_received);
        // Whole frames stay whole; the fragments at the capture's start and end stay marked
        // (their head/tail estimates use the advance measured on the host clock here).
        let whole = |f: &Frame| f.header.packets_expected == f.header.packets_received;
        assert_eq!(whole(g), whole(w));
    }
    assert!(want.iter().all(|f| f.header.clock == FrameClock::Sensor));
    // One packet with no date inside a stream of valid ones: stamped on the stream's time
    // line, decoded, counted; no jump, every frame stays on the sensor clock and whole.
    let mut input = clean.clone();
    input[700].0[P64_DATE + 1] = 13;
    let (got, c) = run(&p64(), PipelineOptions::default(), &input);
    assert_eq!(
        (c.decoded, c.date_fallbacks, c.time_jumps, c.restarts),
        (clean.len() as u64, 1, 0, 0)
    );
    assert_eq!(shape(&got), shape(&want));
    assert!(got.iter().all(|f| f.header.clock == FrameClock::Sensor));
}

#[test]
fn hesai_one_packet_with_a_far_date_is_dropped() {
    let clean = capture(P64, 2368);
    let k = 700;
    let without: Vec<_> = clean
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, d)| d.clone())
        .collect();
    let (want, _) = run(&p64(), PipelineOptions::default(), &without);
    for day in [1u8, 28] {
        let mut input = clean.clone();
        input[k].0[P64_DATE + 2] = day;
        let (got, c) = run(&p64(), PipelineOptions::default(), &input);
        assert_eq!((c.time_jumps, c.restarts), (1, 0), "day {day}");
        assert_eq!(shape(&got), shape(&want), "day {day}");
        assert_eq!(got, want, "day {day}");
    }
}

#[test]
fn hesai_fov_first_frame_has_a_start_and_no_saturated_stamp() {
    let clean = capture(P64, 2368);
    let (all, _) = run(&p64(), PipelineOptions::default(), &clean);
    // Find where the capture starts: a field of view that excludes the first block azimuths.
    let first_az = u16::from_le_bytes([clean[0].0[8], clean[0].0[9]]);
    let lo = (f64::from(first_az) / 100.0 + 60.0) % 360.0;
    let hi = (lo + 180.0) % 360.0;
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(lo, hi).unwrap()),
        ..Default::default()
    };
    let mut cfg = p64();
    cfg.cut_angle = Degrees::new((lo + 90.0) % 360.0).unwrap();
    let (got, _) = run(&cfg, opts, &clean);
    assert!(got.len() >= 2, "{}", got.len());
    let start_min = all.iter().map(|f| f.header.start_ns).min().unwrap();
    for f in &got {
        assert!(f.header.start_ns >= start_min, "{}", f.header.start_ns);
        assert!(f.points.autoware().iter().all(|p| p.time_stamp != u32::MAX));
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.time_stamp < 110_000_000)
        );
    }
}

#[test]
fn hesai_lost_turn_shows() {
    let clean = capture(P64, 2368);
    let (want, _) = run(&p64(), PipelineOptions::default(), &clean);
    assert_eq!(clean.len(), 2400);
    assert_eq!(
        shape(&want),
        vec![
            (8, 588, 244, 0),
            (608, 617, 93079, 0),
            (618, 618, 93672, 0),
            (618, 618, 93591, 0),
            (610, 617, 93463, 0),
            (11, 607, 410, 0)
        ]
    );
    // 6000 packets/s at 10 Hz: 600 per turn. 1200 packets (exactly 2 turns, so the azimuth
    // after the gap is the one before it) from 0.49 turns into frame 1: frame 1 ends at the
    // gap, one turn is lost whole, the next frame misses its head; the UDP sequence gap is
    // split between them.
    let (got, c) = run(
        &p64(),
        PipelineOptions::default(),
        &without(&clean, 300, 1500),
    );
    assert_eq!(
        shape(&got),
        vec![
            (8, 588, 244, 0),
            (300, 608, 44495, 0),
            (308, 610, 48582, 1),
            (610, 617, 93463, 0),
            (11, 607, 410, 0)
        ]
    );
    assert_eq!((c.frames_lost, c.time_jumps), (1, 0));
    // The same 1200 packets 0.14 turns into frame 2 (a 200 ms host silence: the frame
    // timeout closes frame 2 too, and the turn is still counted).
    let (got, c) = run(
        &p64(),
        PipelineOptions::default(),
        &without(&clean, 700, 1900),
    );
    assert_eq!(
        shape(&got),
        vec![
            (8, 588, 244, 0),
            (608, 617, 93079, 0),
            (110, 601, 16291, 0),
            (500, 608, 77129, 1),
            (11, 607, 410, 0)
        ]
    );
    assert_eq!(c.frames_lost, 1);
    for f in &got {
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.time_stamp < 104_000_000)
        );
    }
}

// ---- Ouster (OS2-128, one frame replicated) -------------------------------------------------

const OS2: &str = "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10";

fn os2() -> SensorConfig {
    SensorConfig::new(5, SensorModel::Ouster, format!("{DATA}{OS2}.json"))
}

/// Packet `p` as a packet of frame `frame_id + df`, its column time stamps and host time
/// `df` × 100 ms later (RNG19: 16 columns of 12 + 128·12 bytes after a 32-byte header).
fn shifted(p: &(Vec<u8>, u64), df: u16) -> (Vec<u8>, u64) {
    let mut v = p.0.clone();
    let id = u16::from_le_bytes([v[2], v[3]]).wrapping_add(df);
    v[2..4].copy_from_slice(&id.to_le_bytes());
    let dt = u64::from(df) * 100_000_000;
    for col in 0..16 {
        let o = 32 + col * (12 + 128 * 12);
        let ts = u64::from_le_bytes(v[o..o + 8].try_into().unwrap()) + dt;
        v[o..o + 8].copy_from_slice(&ts.to_le_bytes());
    }
    (v, p.1 + dt)
}

/// Frames 0..n of the replicated stream, packets in order.
fn os2_stream(n: u16) -> Vec<(Vec<u8>, u64)> {
    let one = capture(&format!("{OS2}.pcap"), 7502);
    assert_eq!(one.len(), 64);
    (0..n)
        .flat_map(|f| one.iter().map(move |p| shifted(p, f)))
        .collect()
}

#[test]
fn ouster_frame_id_jumps_are_dropped_and_the_frame_stays_whole() {
    let clean = os2_stream(3);
    let k = 64 + 20;
    let without: Vec<_> = clean
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, d)| d.clone())
        .collect();
    let (want, _) = run(&os2(), PipelineOptions::default(), &without);
    assert_eq!(
        shape(&want).iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        vec![(64, 64), (63, 64), (64, 64)]
    );
    // frame_id +5000, −5000, and a packet of 10 frames ago.
    for delta in [5000u16, 0u16.wrapping_sub(5000), 0u16.wrapping_sub(10)] {
        let mut input = clean.clone();
        let id = u16::from_le_bytes([input[k].0[2], input[k].0[3]]).wrapping_add(delta);
        input[k].0[2..4].copy_from_slice(&id.to_le_bytes());
        let (got, c) = run(&os2(), PipelineOptions::default(), &input);
        assert_eq!((c.time_jumps, c.restarts), (1, 0), "{delta}");
        assert_eq!(got, want, "{delta}");
    }
}

#[test]
fn ouster_late_packet_of_the_previous_frame_lands_in_its_frame() {
    let clean = os2_stream(3);
    let (want, _) = run(&os2(), PipelineOptions::default(), &clean);
    // The last packet of frame 0 arrives after the first packets of frame 1 (1, 3, and the
    // window's last position: the window closes at the 8th (64 / 8) packet of frame 1).
    for late in [1usize, 3, 7] {
        let mut input = clean.clone();
        let p = input.remove(63);
        input.insert(63 + late, p);
        let (got, c) = run(&os2(), PipelineOptions::default(), &input);
        assert_eq!(c.time_jumps, 0);
        assert_eq!(shape(&got), shape(&want), "late by {late}");
        assert_eq!(got, want, "late by {late}");
    }
    // Past the window (after 8 packets of the next frame): frame 0 was published without it.
    let mut input = clean.clone();
    let p = input.remove(63);
    input.insert(63 + 8, p);
    let (got, c) = run(&os2(), PipelineOptions::default(), &input);
    assert_eq!((c.ignored, c.late), (0, 1));
    assert_eq!(
        shape(&got).iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        vec![(63, 64), (64, 64), (64, 64)]
    );
}

#[test]
fn ouster_lost_frames_and_restart() {
    let one = capture(&format!("{OS2}.pcap"), 7502);
    // Frames 0, 1, then 4 (2 and 3 never arrive: 0.3 s of host time passes).
    let mut input: Vec<_> = one.iter().map(|p| shifted(p, 0)).collect();
    input.extend(one.iter().map(|p| shifted(p, 1)));
    input.extend(one.iter().map(|p| shifted(p, 4)));
    let (got, c) = run(&os2(), PipelineOptions::default(), &input);
    assert_eq!(
        got.iter()
            .map(|f| f.header.frames_lost_before)
            .collect::<Vec<_>>(),
        vec![0, 0, 2]
    );
    assert_eq!(c.frames_lost, 2);
    // A restart: from packet 80 on, frame ids are 30000 further on (host time continuous).
    let mut input: Vec<_> = os2_stream(3);
    for (p, _) in &mut input[80..] {
        let id = u16::from_le_bytes([p[2], p[3]]).wrapping_add(30_000);
        p[2..4].copy_from_slice(&id.to_le_bytes());
    }
    let (got, c) = run(&os2(), PipelineOptions::default(), &input);
    assert_eq!(c.restarts, 1);
    // The held candidates are decoded into the new stream's first frame: nothing is lost.
    assert_eq!(c.time_jumps, 0);
    assert_eq!(
        shape(&got).iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![64, 16, 64 - 16, 64]
    );
}

/// A capture replayed again after a host-time silence (a replay, or a sensor restarted while
/// quiet): its sensor time steps back, which after a silence is a new time base taken at once,
/// with nothing dropped (Velodyne and Ouster).
#[test]
fn replay_after_a_silence_is_a_new_stream_with_nothing_dropped() {
    let clean = capture(VLP16_DUAL, 2368);
    let (once, _) = run(&vlp16(), PipelineOptions::default(), &clean);
    let mut twice = clean.clone();
    let later = clean.last().unwrap().1 + 1_000_000_000 - clean[0].1;
    twice.extend(clean.iter().map(|(p, t)| (p.clone(), t + later)));
    let (got, c) = run(&vlp16(), PipelineOptions::default(), &twice);
    assert_eq!((c.decoded, c.time_jumps, c.restarts), (1206, 0, 1));
    assert_eq!(got.len(), 2 * once.len());
    for (g, w) in got.iter().zip(once.iter().chain(&once)) {
        assert_eq!(g.points, w.points);
        assert_eq!(g.header.start_ns, w.header.start_ns);
    }
    // Ouster: the second stream's frame ids far from the first's (a late packet of the last
    // published frame stays stale after a silence: decode_ouster_robustness.rs).
    let one = os2_stream(2);
    let mut twice = one.clone();
    twice.extend(one.iter().map(|(p, t)| {
        let mut p = p.clone();
        let id = u16::from_le_bytes([p[2], p[3]]).wrapping_add(30_000);
        p[2..4].copy_from_slice(&id.to_le_bytes());
        (p, t + 1_000_000_000)
    }));
    let (got, c) = run(&os2(), PipelineOptions::default(), &twice);
    assert_eq!((c.decoded, c.time_jumps), (256, 0));
    assert_eq!(
        shape(&got).iter().map(|s| (s.0, s.3)).collect::<Vec<_>>(),
        vec![(64, 0), (64, 0), (64, 0), (64, 0)]
    );
}

// ---- RoboSense (Helios-16P) -----------------------------------------------------------------

#[test]
fn robosense_one_packet_far_off_is_dropped_and_the_frame_stays_whole() {
    let dir = "robosense/helios16p/";
    let cfg = SensorConfig::new(
        6,
        SensorModel::Helios16p,
        format!("{DATA}{dir}RobosenseHelios16P.csv"),
    );
    let clean = capture(&format!("{dir}helios16p_nebula_pr79.pcap"), 6699);
    assert_eq!(clean.len(), 750);
    let k = 400;
    let without: Vec<_> = clean
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, d)| d.clone())
        .collect();
    let (want, _) = run(&cfg, PipelineOptions::default(), &without);
    // Helios header time: u48 Unix seconds (big-endian) at byte 20; ±1000 s on one packet.
    for delta in [1000i64, -1000] {
        let mut input = clean.clone();
        let p = &mut input[k].0;
        let mut b = [0u8; 8];
        b[2..8].copy_from_slice(&p[20..26]);
        let secs = (i64::from_be_bytes(b) + delta) as u64;
        p[20..26].copy_from_slice(&secs.to_be_bytes()[2..8]);
        let (got, c) = run(&cfg, PipelineOptions::default(), &input);
        assert_eq!((c.time_jumps, c.restarts), (1, 0), "{delta}");
        assert_eq!(got, want, "{delta}");
    }
}
