//! Field faults of issue 39, class 2 (rotation speed, 300 to 1200 rpm, and a speed change
//! mid-run) and class 3 (return mode switched mid-stream), on streams built from the shared
//! captures with exact assertions.
//!
//! Speed: a sensor at another speed keeps its firing rate, so the packet interval stays and
//! each packet covers `speed / 600 rpm` times the azimuth (VLP-16, Hesai XT32, RoboSense: fixed
//! firing cycle; only the azimuth resolution changes). [`resample`] builds such a stream from a
//! 600 rpm capture: at 1200 rpm every 2nd packet, at 300 rpm every packet twice (the second at
//! the half step), the block azimuths inside a packet spread by the speed factor, sensor and
//! host times re-stamped at the capture's mean interval, the Hesai UDP sequence renumbered,
//! motor speed and CRC rewritten; the capture is looped with continuous azimuth when longer
//! streams are needed.
//!
//! Models: VLP-16, VLS-128, Hesai XT32, Pandar64 and QT128, RoboSense Helios-16P (its motor
//! speed is announced by a DIFOP before the first packet at the new speed).
//!
//! Return mode: the old-mode stream then the new-mode one, time, azimuth (and the Hesai UDP
//! sequence) running on: the frames before the switch equal the old-mode decode, the switch
//! frame holds the old part and the new part, every point once, counted whole, the frames
//! after it equal the new-mode decode. VLP-16: the strongest and dual captures, re-stamped
//! and turned, both ways, the switch also at and just after the cut (30 constructions each
//! way: five cut positions by six lead distances). Hesai: the single-return
//! (last) stream derived from the dual capture by [`hesai_single`] (the last-return block of
//! each firing, two dual packets to one). RoboSense: the Helios-16P capture read as dual
//! return and its single-return stream derived by [`robo_single`]; a DIFOP announces each
//! mode.

use std::path::Path;

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::hesai::crc::crc32_mpeg2;
use lidarxdp_core::sensor::hesai::layout::{self as hl, Layout};
use lidarxdp_core::sensor::{DecodeCounters, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

type Input = Vec<(Vec<u8>, u64)>;

fn capture(rel: &str, port: u16) -> Input {
    let (d, _) = read_udp_datagrams(Path::new(&format!("{DATA}{rel}")), Some(port)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
        .collect()
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

/// `(received, expected, points, frames_lost_before)` of a frame.
type Shape = (u32, u32, usize, u32);

fn shape(frames: &[Frame]) -> Vec<Shape> {
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

/// How a vendor's packet carries what a speed change rewrites.
trait Format {
    /// Block azimuths, 0.01°.
    fn azimuths(&self, p: &[u8]) -> Vec<u32>;
    fn set_azimuths(&self, p: &mut [u8], az: &[u32]);
    fn sensor_ns(&self, p: &[u8]) -> u64;
    fn set_sensor_ns(&self, p: &mut [u8], ns: u64);
    fn set_rpm(&self, _p: &mut [u8], _rpm: u32) {}
    fn finish(&self, _p: &mut [u8], _serial: u32) {}
}

/// Rewrites `src` into the stream of a sensor turning `speed(m)` times as fast as the capture
/// (600 rpm) at output packet `m`: the packet interval stays (the firing rate is fixed), so
/// each packet covers `speed` times the azimuth; contents of the source packet at the same
/// turned azimuth; azimuth and time continuous.
fn resample(
    f: &dyn Format,
    src: &[(Vec<u8>, u64)],
    n_out: usize,
    speed_x2: impl Fn(usize) -> u32,
) -> Input {
    let n = src.len();
    let t0 = f.sensor_ns(&src[0].0);
    let interval = (f.sensor_ns(&src[n - 1].0) - t0) / (n as u64 - 1);
    let h0 = src[0].1;
    let first_az = |i: usize| f.azimuths(&src[i].0)[0];
    // The source's turned azimuth (0.01°, unwrapped) at each packet, looping the capture:
    // across the seam (its last packet to its first) the mean advance.
    let turned = first_az(n - 1) + 36_000 * crossings(f, src) as u32 - first_az(0);
    let mean = turned / (n as u32 - 1);
    let step = |i: usize| {
        let j = i % n;
        if j + 1 == n {
            mean
        } else {
            (36_000 + first_az(j + 1) - first_az(j)) % 36_000
        }
    };
    // Source position in half packets, and the unwrapped azimuth of the packet it is in.
    let mut u2 = 0usize;
    let mut base = u64::from(first_az(0));
    let mut out = Vec::with_capacity(n_out);
    for m in 0..n_out {
        let s2 = speed_x2(m);
        let i = u2 / 2;
        let az = f.azimuths(&src[i % n].0);
        let first = base
            + if u2 % 2 == 1 {
                u64::from(step(i) / 2)
            } else {
                0
            };
        let new: Vec<u32> = az
            .iter()
            .map(|&a| ((first + u64::from((36_000 + a - az[0]) % 36_000 * s2 / 2)) % 36_000) as u32)
            .collect();
        let mut p = src[i % n].0.clone();
        f.set_azimuths(&mut p, &new);
        f.set_sensor_ns(&mut p, t0 + m as u64 * interval);
        f.set_rpm(&mut p, 300 * s2);
        f.finish(&mut p, m as u32);
        out.push((p, h0 + m as u64 * interval));
        let next = u2 + s2 as usize;
        for k in i..next / 2 {
            base += u64::from(step(k));
        }
        u2 = next;
    }
    out
}

/// Cut crossings of the block-0 azimuths of `input` (cut 0°).
fn crossings(f: &dyn Format, input: &[(Vec<u8>, u64)]) -> usize {
    input
        .windows(2)
        .filter(|w| f.azimuths(&w[1].0)[0] < f.azimuths(&w[0].0)[0])
        .count()
}

// ---- Hesai ------------------------------------------------------------------------------------

struct Hesai {
    l: &'static Layout,
    rpm_at: usize,
}

fn days_to_civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl Format for Hesai {
    fn azimuths(&self, p: &[u8]) -> Vec<u32> {
        (0..self.l.blocks)
            .map(|b| {
                let o = self.l.azimuth_offset(b);
                u32::from(u16::from_le_bytes([p[o], p[o + 1]]))
            })
            .collect()
    }
    fn set_azimuths(&self, p: &mut [u8], az: &[u32]) {
        for (b, &a) in az.iter().enumerate() {
            let o = self.l.azimuth_offset(b);
            p[o..o + 2].copy_from_slice(&(a as u16).to_le_bytes());
        }
    }
    fn sensor_ns(&self, p: &[u8]) -> u64 {
        let t = self.l.tail_offset();
        let d = &p[t + self.l.t_date..t + self.l.t_date + 6];
        let days = lidarxdp_core::time::days_from_civil(
            i64::from(self.l.year_base) + i64::from(d[0]),
            i64::from(d[1]),
            i64::from(d[2]),
        );
        let s = days * 86_400 + i64::from(d[3]) * 3600 + i64::from(d[4]) * 60 + i64::from(d[5]);
        let o = t + self.l.t_timestamp;
        let us = u32::from_le_bytes(p[o..o + 4].try_into().unwrap());
        s as u64 * 1_000_000_000 + u64::from(us) * 1000
    }
    fn set_sensor_ns(&self, p: &mut [u8], ns: u64) {
        let t = self.l.tail_offset();
        let s = (ns / 1_000_000_000) as i64;
        let (y, mo, d) = days_to_civil(s.div_euclid(86_400));
        let sod = s.rem_euclid(86_400);
        let o = t + self.l.t_date;
        p[o..o + 6].copy_from_slice(&[
            (y - i64::from(self.l.year_base)) as u8,
            mo as u8,
            d as u8,
            (sod / 3600) as u8,
            (sod / 60 % 60) as u8,
            (sod % 60) as u8,
        ]);
        let o = t + self.l.t_timestamp;
        let us = (ns % 1_000_000_000 / 1000) as u32;
        p[o..o + 4].copy_from_slice(&us.to_le_bytes());
    }
    fn set_rpm(&self, p: &mut [u8], rpm: u32) {
        let o = self.l.tail_offset() + self.rpm_at;
        p[o..o + 2].copy_from_slice(&(rpm as u16).to_le_bytes());
    }
    fn finish(&self, p: &mut [u8], serial: u32) {
        let t = self.l.tail_offset();
        // The UDP sequence: in the tail, or (Pandar64) the u32 after it.
        let seq = match self.l.t_udp_seq {
            Some(s) => Some(t + s),
            None => (p.len() >= self.l.base_len() + 4).then_some(self.l.base_len()),
        };
        if let Some(s) = seq {
            p[s..s + 4].copy_from_slice(&serial.to_le_bytes());
        }
        if self.l.body_crc {
            let (h, e) = (self.l.header_len(), self.l.body_end());
            let crc = crc32_mpeg2(&p[h..e]);
            p[e..e + 4].copy_from_slice(&crc.to_le_bytes());
        }
        if let Some(c) = self.l.t_crc {
            let crc = crc32_mpeg2(&p[t..t + c]);
            p[t + c..t + c + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

const XT32: Hesai = Hesai {
    l: &hl::PANDARXT32,
    rpm_at: 11,
};

fn xt32() -> SensorConfig {
    let mut c = SensorConfig::new(
        0,
        SensorModel::PandarXt32,
        format!("{DATA}hesai/pandarxt32/PandarXT32.csv"),
    );
    c.range = RangeGate::from_m(0.05, 120.0).unwrap();
    c
}

struct Velodyne;

impl Format for Velodyne {
    fn azimuths(&self, p: &[u8]) -> Vec<u32> {
        (0..12)
            .map(|b| u32::from(u16::from_le_bytes([p[100 * b + 2], p[100 * b + 3]])))
            .collect()
    }
    fn set_azimuths(&self, p: &mut [u8], az: &[u32]) {
        for (b, &a) in az.iter().enumerate() {
            p[100 * b + 2..100 * b + 4].copy_from_slice(&(a as u16).to_le_bytes());
        }
    }
    fn sensor_ns(&self, p: &[u8]) -> u64 {
        u64::from(u32::from_le_bytes(p[1200..1204].try_into().unwrap())) * 1000
    }
    fn set_sensor_ns(&self, p: &mut [u8], ns: u64) {
        p[1200..1204].copy_from_slice(&((ns / 1000) as u32).to_le_bytes());
    }
}

fn vlp16() -> SensorConfig {
    SensorConfig::new(
        2,
        SensorModel::Vlp16,
        format!("{DATA}velodyne/vlp16/calibration/VLP16db.yaml"),
    )
}

/// The VLP-16 strongest capture, then the dual capture re-stamped and turned so that azimuth
/// and time run on (the dual packets' azimuths rotated by a constant).
fn vlp16_single_then_dual() -> (Input, Input, Input) {
    let single = capture("velodyne/vlp16/vlp16_strongest_84pkt.pcap", 2368);
    let dual = capture("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", 2368);
    let v = Velodyne;
    let (ls, ld) = (single.len(), dual.len());
    let s_int = (v.sensor_ns(&single[ls - 1].0) - v.sensor_ns(&single[0].0)) / (ls as u64 - 1);
    let s_adv =
        (36_000 + v.azimuths(&single[ls - 1].0)[0] - v.azimuths(&single[ls - 2].0)[0]) % 36_000;
    let t_next = v.sensor_ns(&single[ls - 1].0) + s_int;
    let h_next = single[ls - 1].1 + s_int;
    let az_next = (v.azimuths(&single[ls - 1].0)[0] + s_adv) % 36_000;
    let rot = (36_000 + az_next - v.azimuths(&dual[0].0)[0]) % 36_000;
    let (t0, h0) = (v.sensor_ns(&dual[0].0), dual[0].1);
    let moved: Input = dual
        .iter()
        .map(|(p, h)| {
            let mut p = p.clone();
            let az: Vec<u32> = v.azimuths(&p).iter().map(|a| (a + rot) % 36_000).collect();
            v.set_azimuths(&mut p, &az);
            let t = v.sensor_ns(&p) - t0 + t_next;
            v.set_sensor_ns(&mut p, t);
            (p, h - h0 + h_next)
        })
        .collect();
    let _ = ld;
    let mut both = single.clone();
    both.extend(moved.iter().cloned());
    (single, moved, both)
}

fn rotate(f: &dyn Format, input: &Input, by: u32) -> Input {
    input
        .iter()
        .map(|(p, h)| {
            let mut p = p.clone();
            let az: Vec<u32> = f.azimuths(&p).iter().map(|a| (a + by) % 36_000).collect();
            f.set_azimuths(&mut p, &az);
            (p, *h)
        })
        .collect()
}

/// Frames between the first and the last (the capture's edges) are whole.
fn middle_whole(frames: &[Frame]) -> bool {
    frames[1..frames.len() - 1]
        .iter()
        .all(|f| f.header.packets_received == f.header.packets_expected)
}

const VLP16_DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const XT32_PCAP: &str = "hesai/pandarxt32/pandarxt32_nebula.pcap";

#[test]
fn velodyne_one_frame_per_turn_at_300_to_1200_rpm() {
    let clean = capture(VLP16_DUAL, 2368);
    // Speed ×2 (1200 rpm), ×1.5 (900), ×0.5 (300): 5 cuts crossed, 6 frames, each turn whole.
    let want: [(u32, usize, Vec<Shape>); 3] = [
        (
            4,
            450,
            vec![
                (76, 77, 7397, 0),
                (76, 76, 7392, 0),
                (77, 77, 7437, 0),
                (76, 76, 7390, 0),
                (76, 76, 7447, 0),
                (74, 76, 7226, 0),
            ],
        ),
        (
            3,
            600,
            vec![
                (101, 102, 9889, 0),
                (101, 101, 9870, 0),
                (102, 102, 9892, 0),
                (101, 101, 9922, 0),
                (102, 102, 9904, 0),
                (98, 101, 9618, 0),
            ],
        ),
        (
            1,
            1800,
            vec![
                (301, 302, 29658, 0),
                (303, 303, 29637, 0),
                (302, 302, 29687, 0),
                (303, 303, 29765, 0),
                (302, 302, 29707, 0),
                (294, 302, 28854, 0),
            ],
        ),
    ];
    for (s2, n, shape_want) in want {
        let input = resample(&Velodyne, &clean, n, |_| s2);
        assert_eq!(crossings(&Velodyne, &input), 5, "×{s2}/2");
        let (got, c) = run(&vlp16(), &input);
        assert_eq!(shape(&got), shape_want, "×{s2}/2");
        assert!(middle_whole(&got));
        let points: usize = got.iter().map(|f| f.points.len()).sum();
        assert_eq!(c.points, points as u64);
        assert_eq!((c.decoded, c.frames_lost, c.time_jumps), (n as u64, 0, 0));
    }
    // ×1 (600 rpm): the capture as recorded but re-stamped at its mean interval: the frames
    // and points of the capture's own decode.
    let (want, _) = run(&vlp16(), &clean);
    let same = resample(&Velodyne, &clean, clean.len(), |_| 2);
    let (got, _) = run(&vlp16(), &same);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.points.len(), w.points.len());
        for (a, b) in g.points.autoware().iter().zip(w.points.autoware()) {
            assert_eq!((a.x, a.y, a.z, a.channel), (b.x, b.y, b.z, b.channel));
        }
    }
}

#[test]
fn hesai_xt32_one_frame_per_turn_at_300_and_1200_rpm() {
    let clean = capture(XT32_PCAP, 2368);
    // 1200 rpm over 12 turns (the capture looped 3 times): 13 frames, the 11 between the
    // edges whole (250 packets a turn + the one that holds the cut, in both frames).
    let fast = resample(&XT32, &clean, 3000, |_| 4);
    assert_eq!(crossings(&XT32, &fast), 11);
    let (got, c) = run(&xt32(), &fast);
    let mut want = vec![(250, 250, 31397, 0), (251, 251, 31491, 0)];
    for _ in 0..3 {
        want.extend([
            (251, 251, 31495, 0),
            (251, 251, 31472, 0),
            (251, 251, 31479, 0),
            (251, 251, 31491, 0),
        ]);
    }
    want.truncate(12);
    want.push((1, 250, 82, 0));
    assert_eq!(shape(&got), want);
    assert!(middle_whole(&got));
    assert_eq!((c.decoded, c.frames_lost, c.time_jumps), (3000, 0, 0));
    // 300 rpm: 1000 packets a turn.
    let slow = resample(&XT32, &clean, 3996, |_| 1);
    assert_eq!(crossings(&XT32, &slow), 3);
    let (got, c) = run(&xt32(), &slow);
    assert_eq!(
        shape(&got),
        vec![
            (998, 1001, 125639, 0),
            (1001, 1001, 126116, 0),
            (1001, 1001, 126080, 0),
            (999, 1000, 125879, 0)
        ]
    );
    assert_eq!((c.decoded, c.frames_lost, c.time_jumps), (3996, 0, 0));
}

/// 600 rpm for 300 packets, 1200 for 300, then 300 rpm (VLP-16 dual: 151, 76 and 302 packets
/// a turn).
fn vlp16_600_1200_300(clean: &Input) -> Input {
    resample(&Velodyne, clean, 1500, |m| match m {
        0..300 => 2,
        300..600 => 4,
        _ => 1,
    })
}

#[test]
fn speed_changes_mid_run_one_frame_per_turn() {
    let clean = capture(VLP16_DUAL, 2368);
    let input = vlp16_600_1200_300(&clean);
    assert_eq!(crossings(&Velodyne, &input), 8);
    let (got, c) = run(&vlp16(), &input);
    // The turn that holds the 1200 → 300 change: 83 packets (both speeds), whole.
    assert_eq!(
        shape(&got),
        vec![
            (151, 152, 14829, 0),
            (151, 151, 14766, 0),
            (77, 77, 7437, 0),
            (76, 76, 7390, 0),
            (76, 76, 7447, 0),
            (83, 83, 8014, 0),
            (302, 302, 29686, 0),
            (302, 302, 29763, 0),
            (290, 303, 28579, 0)
        ]
    );
    assert!(middle_whole(&got));
    assert_eq!((c.frames_lost, c.time_jumps, c.restarts), (0, 0, 0));
    // Hesai XT32: 300 rpm for 700 packets, 1200 for 600, 600 for 600.
    let clean = capture(XT32_PCAP, 2368);
    let input = resample(&XT32, &clean, 1900, |m| match m {
        0..700 => 1,
        700..1300 => 4,
        _ => 2,
    });
    assert_eq!(crossings(&XT32, &input), 4);
    let (got, c) = run(&xt32(), &input);
    assert_eq!(
        shape(&got),
        vec![
            (775, 775, 98063, 0),
            (251, 251, 31491, 0),
            (251, 251, 31495, 0),
            (475, 475, 59946, 0),
            (152, 500, 18378, 0)
        ]
    );
    assert_eq!((c.frames_lost, c.time_jumps, c.restarts), (0, 0, 0));
}

#[test]
fn loss_after_a_slow_down_stays_in_its_turn() {
    // 150 packets (half a turn at 300 rpm, inside one turn) lost 50 packets after the
    // 1200 → 300 change. Measured at the old speed (a period of 50 ms, or 1200 rpm samples
    // rejecting every slower one) the 100 ms gap was "two turns": the turn was split in two
    // frames and one counted lost. Re-measured: one frame, 150 packets lost in it.
    let clean = capture(VLP16_DUAL, 2368);
    let full = vlp16_600_1200_300(&clean);
    let input: Input = full
        .iter()
        .enumerate()
        .filter(|(i, _)| !(650..800).contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    let (got, c) = run(&vlp16(), &input);
    let (want, _) = run(&vlp16(), &full);
    let mut shape_want = shape(&want);
    shape_want[6] = (152, 302, 12670, 0);
    assert_eq!(shape(&got), shape_want);
    assert_eq!(c.frames_lost, 0);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if k != 6 {
            assert_eq!(g.points, w.points, "frame {k}");
        }
    }
}

#[test]
fn loss_after_a_speed_up_counts_the_lost_turn() {
    // 135 packets (1.78 turns at 1200 rpm, crossing the cut twice) lost 30 packets after the
    // 600 → 1200 change. Measured at the old speed (100 ms) the 90 ms gap was no gap: no turn
    // counted lost, the frame after it "whole" (62 of 62). Re-measured: the frame before ends
    // at the gap (76 expected), one turn lost, the next misses its head (62 of 76).
    let clean = capture(VLP16_DUAL, 2368);
    let full = resample(&Velodyne, &clean, 900, |m| if m < 300 { 2 } else { 4 });
    let input: Input = full
        .iter()
        .enumerate()
        .filter(|(i, _)| !(330..465).contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    let (got, c) = run(&vlp16(), &input);
    assert_eq!(
        shape(&got),
        vec![
            (151, 152, 14829, 0),
            (151, 151, 14766, 0),
            (30, 76, 2605, 0),
            (62, 76, 6041, 1),
            (77, 77, 7427, 0),
            (76, 76, 7406, 0),
            (76, 76, 7491, 0),
            (77, 77, 7410, 0),
            (72, 76, 7094, 0)
        ]
    );
    assert_eq!(c.frames_lost, 1);
}

/// `(x, y, z, intensity, return_type, channel, distance)` of each point (its `time_stamp` is
/// relative to its own frame's start).
fn geometry(f: &[Frame]) -> Vec<(f32, f32, f32, u8, u8, u16, f32)> {
    f.iter()
        .flat_map(|f| f.points.autoware().to_vec())
        .map(|p| {
            (
                p.x,
                p.y,
                p.z,
                p.intensity,
                p.return_type,
                p.channel,
                p.distance,
            )
        })
        .collect()
}

#[test]
fn velodyne_single_to_dual_switch_frame_is_whole() {
    let (single, dual, both) = vlp16_single_then_dual();
    // The switch at 115.84° (and, turned, at 355.84°, 4° before the cut).
    for by in [0u32, 24_000] {
        let (s, d, b) = (
            rotate(&Velodyne, &single, by),
            rotate(&Velodyne, &dual, by),
            rotate(&Velodyne, &both, by),
        );
        let (fs, _) = run(&vlp16(), &s);
        let (fd, _) = run(&vlp16(), &d);
        let (fb, c) = run(&vlp16(), &b);
        assert_eq!(c.decoded, 687);
        // Before the switch: the single-return decode's first frame.
        assert_eq!(fb[0], fs[0], "{by}");
        // The switch frame: the single-return part (the rest of the single capture) then the
        // dual-return part up to the cut, every point once, counted whole.
        let switch = &fb[1];
        let parts = [&fs[1..2], &fd[0..1]];
        assert_eq!(
            switch.points.len(),
            fs[1].points.len() + fd[0].points.len(),
            "{by}"
        );
        assert_eq!(
            geometry(std::slice::from_ref(switch)),
            [geometry(parts[0]), geometry(parts[1])].concat()
        );
        let h = switch.header;
        assert_eq!(
            h.packets_received,
            fs[1].header.packets_received + fd[0].header.packets_received,
            "{by}"
        );
        assert_eq!(h.packets_received, h.packets_expected, "{by}");
        // After it: the dual-return decode (its frames numbered one on).
        assert_eq!(fb.len(), fd.len() + 1, "{by}");
        for (g, w) in fb[2..].iter().zip(&fd[1..]) {
            let mut h = w.header;
            h.sequence += 1;
            assert_eq!((g.header, &g.points), (h, &w.points), "{by}");
        }
    }
}

// ---- Pandar64, PandarQT128, VLS-128, Helios-16P ---------------------------------------------

/// Pandar64: motor speed u16 at tail offset 8 (0x0257 = 599 rpm in the capture).
const P64: Hesai = Hesai {
    l: &hl::PANDAR64,
    rpm_at: 8,
};
/// PandarQT128: motor speed u16 at tail offset 13 (0x0258 = 600 rpm in the capture).
const QT128: Hesai = Hesai {
    l: &hl::PANDARQT128,
    rpm_at: 13,
};
const P64_PCAP: &str = "hesai/pandar64/pandar64_nebula.pcap";
const QT128_PCAP: &str = "hesai/pandarqt128/pandarqt128_nebula.pcap";
const VLS128_PCAP: &str = "velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap";
const HELIOS_PCAP: &str = "robosense/helios16p/helios16p_nebula_pr79.pcap";

fn p64() -> SensorConfig {
    let mut c = SensorConfig::new(
        0,
        SensorModel::Pandar64,
        format!("{DATA}hesai/pandar64/Pandar64.csv"),
    );
    c.range = RangeGate::from_m(0.3, 200.0).unwrap();
    c
}

fn qt128() -> SensorConfig {
    let mut c = SensorConfig::new(
        0,
        SensorModel::PandarQt128,
        format!("{DATA}hesai/pandarqt128/PandarQT128.csv"),
    );
    c.range = RangeGate::from_m(0.3, 300.0).unwrap();
    c
}

fn vls128() -> SensorConfig {
    let mut c = SensorConfig::new(
        0,
        SensorModel::Vls128,
        format!("{DATA}velodyne/vls128/calibration/VLS128.yaml"),
    );
    c.range = RangeGate::from_m(0.3, 300.0).unwrap();
    c
}

fn helios16p() -> SensorConfig {
    SensorConfig::new(
        0,
        SensorModel::Helios16p,
        format!("{DATA}robosense/helios16p/RobosenseHelios16P.csv"),
    )
}

/// RoboSense MSOP (big-endian): block azimuths at `42 + 100·b + 2`, the time at 20 (u48
/// Unix seconds + u32 µs, Helios). The motor speed is in the DIFOP ([`helios_difop`]).
struct Robo;

impl Format for Robo {
    fn azimuths(&self, p: &[u8]) -> Vec<u32> {
        (0..12)
            .map(|b| u32::from(u16::from_be_bytes([p[44 + 100 * b], p[45 + 100 * b]])))
            .collect()
    }
    fn set_azimuths(&self, p: &mut [u8], az: &[u32]) {
        for (b, &a) in az.iter().enumerate() {
            p[44 + 100 * b..46 + 100 * b].copy_from_slice(&(a as u16).to_be_bytes());
        }
    }
    fn sensor_ns(&self, p: &[u8]) -> u64 {
        let mut s = [0u8; 8];
        s[2..].copy_from_slice(&p[20..26]);
        let us = u32::from_be_bytes(p[26..30].try_into().unwrap());
        u64::from_be_bytes(s) * 1_000_000_000 + u64::from(us) * 1000
    }
    fn set_sensor_ns(&self, p: &mut [u8], ns: u64) {
        p[20..26].copy_from_slice(&(ns / 1_000_000_000).to_be_bytes()[2..]);
        p[26..30].copy_from_slice(&((ns % 1_000_000_000 / 1000) as u32).to_be_bytes());
    }
}

/// The capture's DIFOP with motor speed `rpm` (offset 8, BE) and return-mode byte `mode`
/// (offset 300: 0 dual, 4 strongest).
fn helios_difop(rpm: u32, mode: u8) -> Vec<u8> {
    let mut d = capture(HELIOS_PCAP, 7788).remove(0).0;
    d[8..10].copy_from_slice(&(rpm as u16).to_be_bytes());
    d[300] = mode;
    d
}

/// `input` with each `(i, payload)` of `extra` inserted before packet `i` (at its host time).
fn insert(input: &[(Vec<u8>, u64)], extra: &[(usize, Vec<u8>)]) -> Input {
    let mut out = Vec::with_capacity(input.len() + extra.len());
    for (i, d) in input.iter().enumerate() {
        for (_, p) in extra.iter().filter(|(at, _)| *at == i) {
            out.push((p.clone(), d.1));
        }
        out.push(d.clone());
    }
    out
}

/// Renumbers the UDP sequence of a Hesai stream from 0 (tail CRCs rewritten).
fn renumber(h: &Hesai, input: &[(Vec<u8>, u64)]) -> Input {
    input
        .iter()
        .enumerate()
        .map(|(i, (p, t))| {
            let mut p = p.clone();
            h.finish(&mut p, i as u32);
            (p, *t)
        })
        .collect()
}

/// The speed runs of one model: steady 1200 rpm over `n_fast` packets, 300 rpm over `n_slow`,
/// and 1200 then 300 rpm (the change at packet `at` of `n_change`); each with its cut crossings
/// and decode shape. `pre` turns a resampled stream into the pipeline's input (RoboSense: the
/// DIFOPs announcing each speed).
fn speed_runs(
    f: &dyn Format,
    cfg: &SensorConfig,
    clean: &Input,
    n: [usize; 3],
    at: usize,
    edge: usize,
    pre: impl Fn(Input, &dyn Fn(usize) -> u32) -> Input,
) -> Vec<(usize, Vec<Shape>)> {
    let runs: [(usize, &dyn Fn(usize) -> u32); 3] = [
        (n[0], &|_| 4),
        (n[1], &|_| 1),
        (n[2], &move |m| if m < at { 4 } else { 1 }),
    ];
    runs.into_iter()
        .map(|(n, s2)| {
            let input = resample(f, clean, n, s2);
            let x = crossings(f, &input);
            let input = pre(input, s2);
            let (got, c) = run(cfg, &input);
            let whole = got[edge..got.len() - edge]
                .iter()
                .all(|f| f.header.packets_received == f.header.packets_expected);
            assert!(whole, "{:?}", shape(&got));
            let points: usize = got.iter().map(|f| f.points.len()).sum();
            assert_eq!(c.points, points as u64);
            assert_eq!(
                (c.decoded, c.frames_lost, c.time_jumps, c.restarts),
                (n as u64, 0, 0, 0)
            );
            (x, shape(&got))
        })
        .collect()
}

/// The single-return (last, 0x38) stream of a dual-return (last + strongest, 0x39) Hesai stream,
/// from packet `first` on. A dual packet holds `blocks / 2` firings, each as two blocks: the
/// last return first, then the strongest (or second strongest when the last is the
/// strongest; `hesai::return_type`, module `layout`). A single-return packet holds `blocks`
/// firings at the same firing rate, so two dual packets make one: the last-return block of
/// each firing of both, in order; the header, tail and time of the second (a Hesai packet is
/// stamped at its last firing: Pandar64 `-42.58 µs − 55.56 µs · (5 − b) / returns`, QT128
/// `111.11 µs · (1 − b) / returns` before it); the return-mode byte 0x38, the 12-byte
/// header's return count 1. QT128 alternates its two firing loops per firing (mode flag bit 0,
/// 1 = loop 1), and single-return blocks 0 and 1 are loops 1 and 2: `first` is a loop-1
/// packet. So every point of the single stream is a point of the dual capture, fired at the
/// same time: what the sensor set to last return would have sent.
fn hesai_single(h: &Hesai, dual: &[(Vec<u8>, u64)], first: usize) -> Input {
    let l = h.l;
    let bl = l.block_len();
    let single: Input = dual[first..]
        .chunks_exact(2)
        .map(|pair| {
            let mut p = pair[1].0.clone();
            let firings = pair
                .iter()
                .flat_map(|(src, _)| (0..l.blocks).step_by(2).map(move |k| (src, k)));
            for (j, (src, k)) in firings.enumerate() {
                let (o, so) = (l.header_len() + j * bl, l.header_len() + k * bl);
                p[o..o + bl].copy_from_slice(&src[so..so + bl]);
            }
            p[l.tail_offset() + l.t_return_mode] = 0x38;
            if l.header == hl::HeaderKind::Long12 {
                p[10] = 1;
            }
            (p, pair[1].1)
        })
        .collect();
    renumber(h, &single)
}

/// The single-return (strongest) stream of the Helios-16P capture read as dual return. A
/// 16-laser dual-return block is one firing of the 16 lasers, channels 0..15 the first return
/// and 16..31 the second (rs_driver), one firing per block, 12 per packet: the capture's MSOPs
/// fit that (0.20° per block at 600 rpm, 1500 packets/s). A single-return block holds two
/// firings (channels 0..15, then 16..31), 24 per packet: two dual packets make one, block `j`
/// the first returns of firings `2j` and `2j + 1`, at the azimuth of the first; stamped with
/// the first packet's time (a RoboSense packet is stamped at block 0), received with the
/// second.
fn robo_single(dual: &[(Vec<u8>, u64)]) -> Input {
    let single: Input = dual
        .chunks_exact(2)
        .map(|pair| {
            let mut p = pair[0].0.clone();
            for j in 0..12 {
                let src = &pair[j / 6].0;
                let f = 42 + 100 * (2 * (j % 6));
                let o = 42 + 100 * j;
                p[o..o + 52].copy_from_slice(&src[f..f + 52]);
                p[o + 52..o + 100].copy_from_slice(&src[f + 104..f + 152]);
            }
            (p, pair[1].1)
        })
        .collect();
    robo_renumber(&single)
}

/// `input` with the Helios MSOP packet counter (u32 big-endian at byte 12, which a sensor
/// steps by one per packet) renumbered from the first MSOP's on, as a sensor sends it; DIFOP
/// packets (first byte 0xA5) are left alone.
fn robo_renumber(input: &[(Vec<u8>, u64)]) -> Input {
    let mut next = None;
    input
        .iter()
        .map(|(p, t)| {
            let mut p = p.clone();
            if p.first() == Some(&0x55) && p.len() >= 16 {
                let n: u32 =
                    next.unwrap_or_else(|| u32::from_be_bytes(p[12..16].try_into().unwrap()));
                p[12..16].copy_from_slice(&n.to_be_bytes());
                next = Some(n.wrapping_add(1));
            }
            (p, *t)
        })
        .collect()
}

/// Decodes `before`, `after` and `both` (`before` then `after`, as one stream) and checks
/// the switch between them: the frames wholly before it equal `before`'s decode; the switch
/// frame holds the points of `before`'s last frame then those of `after`'s first, every
/// packet of both counted, and is whole; the frames after it equal `after`'s decode
/// (numbered on). Returns the stream's shape and the switch frame's index.
fn check_switch(
    cfg: &SensorConfig,
    before: &Input,
    after: &Input,
    both: &Input,
) -> (Vec<Shape>, usize) {
    let (fa, _) = run(cfg, before);
    let (fz, _) = run(cfg, after);
    let (fb, c) = run(cfg, both);
    assert_eq!((c.time_jumps, c.restarts, c.frames_lost), (0, 0, 0));
    let k = fa.len() - 1;
    for (g, w) in fb[..k].iter().zip(&fa[..k]) {
        assert_eq!(g, w);
    }
    let sw = &fb[k];
    assert_eq!(sw.points.len(), fa[k].points.len() + fz[0].points.len());
    assert_eq!(
        geometry(std::slice::from_ref(sw)),
        [geometry(&fa[k..]), geometry(&fz[..1])].concat()
    );
    let h = sw.header;
    assert_eq!(
        h.packets_received,
        fa[k].header.packets_received + fz[0].header.packets_received
    );
    assert_eq!(h.packets_received, h.packets_expected);
    assert_eq!(fb.len(), k + fz.len());
    for (g, w) in fb[k + 1..].iter().zip(&fz[1..]) {
        let mut h = w.header;
        h.sequence += k as u64;
        assert_eq!((g.header, &g.points), (h, &w.points));
    }
    (shape(&fb), k)
}

/// `second` moved to run on after `first`: its first packet `adv` (0.01°) past the block-0
/// azimuth of `first`'s last packet and `dt` ns after it (sensor and host time), its azimuths
/// turned by a constant, its times shifted by a constant.
fn vlp16_after(first: &Input, second: &Input, adv: u32, dt: u64) -> Input {
    let v = Velodyne;
    let last = &first[first.len() - 1];
    let az_next = (v.azimuths(&last.0)[0] + adv) % 36_000;
    let rot = (36_000 + az_next - v.azimuths(&second[0].0)[0]) % 36_000;
    let (t0, h0) = (v.sensor_ns(&second[0].0), second[0].1);
    let (t_next, h_next) = (v.sensor_ns(&last.0) + dt, last.1 + dt);
    second
        .iter()
        .map(|(p, h)| {
            let mut p = p.clone();
            let az: Vec<u32> = v.azimuths(&p).iter().map(|a| (a + rot) % 36_000).collect();
            v.set_azimuths(&mut p, &az);
            let t = v.sensor_ns(&p) - t0 + t_next;
            v.set_sensor_ns(&mut p, t);
            (p, h - h0 + h_next)
        })
        .collect()
}

/// Every point of `input` in packet order: its decode with the cut turned half a turn from
/// `az` (0.01°), so that no packet near `az` holds the cut (frames concatenated keep the
/// decode order; the carry only moves a frame's tail to the next one).
fn all_points(
    cfg: &SensorConfig,
    input: &Input,
    az: u32,
) -> Vec<(f32, f32, f32, u8, u8, u16, f32)> {
    let mut cfg = cfg.clone();
    cfg.cut_angle =
        lidarxdp_core::valid::Degrees::new(f64::from((az + 18_000) % 36_000) / 100.0).unwrap();
    geometry(&run(&cfg, input).0)
}

/// The switch from `before` to `after` (the block-azimuth cut policy, where frames keep the
/// packet order): `both` holds every point of `before` then every point of `after`, once;
/// the frames before the one holding the last point of `before` equal `before`'s decode; that
/// frame (the switch frame) is whole and holds the first point of `after` too, unless every
/// point of the switch packet lies past the cut (then it holds none of `after` and `after`'s
/// frames all follow it); the frames after it equal `after`'s decode (numbered on). Where
/// `before`'s decode ends with a flushed frame that keeps its last packet's points past the
/// cut, `both` carries those into the switch frame. Returns the stream's shape, the switch
/// frame's index and its old-mode and new-mode point counts.
fn check_switch_kept(
    cfg: &SensorConfig,
    before: &Input,
    after: &Input,
    switch_az: u32,
) -> (Vec<Shape>, usize, usize, usize) {
    let both: Input = [before.clone(), after.clone()].concat();
    let (fa, _) = run(cfg, before);
    let (fz, _) = run(cfg, after);
    let (fb, c) = run(cfg, &both);
    assert_eq!((c.time_jumps, c.restarts, c.frames_lost), (0, 0, 0));
    let (pa, pz) = (
        all_points(cfg, before, switch_az),
        all_points(cfg, after, switch_az),
    );
    // Every point once, but for a flushed tail of points carried past the stream's last cut
    // (dropped, as at the end of `after` alone).
    let got = geometry(&fb);
    let fz_points: usize = fz.iter().map(|f| f.points.len()).sum();
    assert!(
        [pa.clone(), pz.clone()].concat().starts_with(&got),
        "every point once"
    );
    assert_eq!(pa.len() + pz.len() - got.len(), pz.len() - fz_points);
    let mut seen = 0;
    let k = fb
        .iter()
        .position(|f| {
            seen += f.points.len();
            seen >= pa.len()
        })
        .unwrap();
    let old = pa.len() - (seen - fb[k].points.len());
    let new = fb[k].points.len() - old;
    let h = fb[k].header;
    assert_eq!(h.packets_received, h.packets_expected, "switch frame whole");
    // The switch frame stands for `after`'s first frame when it holds new-mode points, else
    // it comes before all of `after`'s frames.
    assert_eq!(fb.len(), k + fz.len() + usize::from(new == 0));
    // A frame next to the switch whose neighbouring packet holds the cut shares that
    // (completing) packet with the switch frame in `both` but not in the one-mode decode: its
    // start and packet count differ, its points are the same.
    let same = |g: &Frame, w: &Frame, seq: u64| {
        let mut h = w.header;
        h.sequence += seq;
        if g.header != h {
            assert_eq!(
                geometry(std::slice::from_ref(g)),
                geometry(std::slice::from_ref(w))
            );
        } else {
            assert_eq!(g.points, w.points);
        }
    };
    for (i, (g, w)) in fb[..k].iter().zip(&fa[..k]).enumerate() {
        if i + 1 < k {
            assert_eq!(g, w);
        } else if fa.len() == k && g.header != w.header {
            // `before`'s last frame (flushed, no packet after it to cut it) keeps the points
            // of its last packet past the cut (a dual-return packet's last firing sequence,
            // interpolated past its last block azimuth); in `both` the switch packet completes
            // that frame and they are carried into the switch frame: the frame is whole and
            // with them holds `before`'s last frame's points. (When `before`'s last packet
            // completes its last frame itself, the frames are equal and the carry is the
            // tail `before` alone drops on flush.)
            assert_eq!(g.header.packets_received, g.header.packets_expected);
            assert_eq!(
                [
                    geometry(std::slice::from_ref(g)),
                    geometry(&fb[k..=k])[..old].to_vec()
                ]
                .concat(),
                geometry(std::slice::from_ref(w))
            );
        } else {
            same(g, w, 0);
        }
    }
    if new > 0 {
        assert_eq!(new, fz[0].points.len());
    }
    let z0 = usize::from(new > 0);
    for (i, (g, w)) in fb[k + 1..].iter().zip(&fz[z0..]).enumerate() {
        let seq = (k + 1 - z0) as u64;
        if i == 0 {
            same(g, w, seq);
        } else {
            let mut h = w.header;
            h.sequence += seq;
            assert_eq!((g.header, &g.points), (h, &w.points));
        }
    }
    (shape(&fb), k, old, new)
}

#[test]
fn pandar64_qt128_vls128_helios16p_one_frame_per_turn_at_300_and_1200_rpm() {
    // Each: 1200 rpm, 300 rpm, and 1200 then 300 rpm; `(cut crossings of block 0, shape)`.
    // Hesai cuts per channel (azimuth offsets of several degrees): a turn counts the packets
    // that straddle the cut too (Pandar64: 300 + 9 at 1200 rpm, 1200 + 35 at 300 rpm), and
    // two frames at each end of a stream are edges (the start-up cutter, the flush).
    let none = |i: Input, _: &dyn Fn(usize) -> u32| i;
    let clean = capture(P64_PCAP, 2368);
    let got = speed_runs(&P64, &p64(), &clean, [1500, 4200, 3900], 900, 2, none);
    assert_eq!(
        got,
        vec![
            (
                4,
                vec![
                    (4, 298, 133, 0),
                    (304, 308, 46525, 0),
                    (309, 309, 46834, 0),
                    (309, 309, 46829, 0),
                    (309, 309, 46901, 0),
                    (305, 308, 46601, 0),
                    (5, 303, 208, 0)
                ]
            ),
            (
                3,
                vec![
                    (15, 1213, 483, 0),
                    (1215, 1234, 186133, 0),
                    (1235, 1235, 187350, 0),
                    (1236, 1236, 187175, 0),
                    (621, 1235, 90229, 0)
                ]
            ),
            // The turn holding the change: 320 packets (both speeds), whole.
            (
                5,
                vec![
                    (4, 298, 133, 0),
                    (304, 308, 46525, 0),
                    (309, 309, 46834, 0),
                    (320, 320, 47102, 0),
                    (1219, 1219, 186732, 0),
                    (1235, 1235, 186894, 0),
                    (621, 1234, 90379, 0)
                ]
            )
        ]
    );
    let clean = capture(QT128_PCAP, 2368);
    let got = speed_runs(&QT128, &qt128(), &clean, [2250, 6300, 5850], 1350, 2, none);
    assert_eq!(
        got,
        vec![
            (
                5,
                vec![
                    (450, 476, 30946, 0),
                    (476, 476, 31886, 0),
                    (476, 476, 31891, 0),
                    (476, 476, 31886, 0),
                    (476, 476, 31891, 0),
                    (26, 475, 947, 0)
                ]
            ),
            (
                3,
                vec![
                    (1797, 1901, 143087, 0),
                    (1901, 1901, 147121, 0),
                    (1901, 1901, 147127, 0),
                    (1004, 1901, 77117, 0)
                ]
            ),
            (
                5,
                vec![
                    (450, 476, 30946, 0),
                    (476, 476, 31886, 0),
                    (476, 476, 31891, 0),
                    (1823, 1823, 144021, 0),
                    (1901, 1901, 147127, 0),
                    (1004, 1901, 77117, 0)
                ]
            )
        ]
    );
    let clean = capture(VLS128_PCAP, 2368);
    let got = speed_runs(
        &Velodyne,
        &vls128(),
        &clean,
        [1500, 4200, 3900],
        900,
        1,
        none,
    );
    assert_eq!(
        got,
        vec![
            (
                5,
                vec![
                    (192, 302, 68085, 0),
                    (303, 303, 105178, 0),
                    (302, 302, 104791, 0),
                    (303, 303, 105177, 0),
                    (302, 302, 104742, 0),
                    (103, 302, 35199, 0)
                ]
            ),
            (
                3,
                vec![
                    (765, 1205, 271207, 0),
                    (1208, 1208, 420181, 0),
                    (1207, 1207, 419832, 0),
                    (1023, 1207, 350740, 0)
                ]
            ),
            (
                5,
                vec![
                    (192, 302, 68085, 0),
                    (303, 303, 105178, 0),
                    (302, 302, 104791, 0),
                    (890, 890, 313368, 0),
                    (1207, 1207, 419844, 0),
                    (1011, 1207, 359352, 0)
                ]
            )
        ]
    );
    // Helios-16P: a DIFOP with the new motor speed before the first packet at it.
    let clean = capture(HELIOS_PCAP, 6699);
    let difops = |i: Input, s2: &dyn Fn(usize) -> u32| {
        let changes: Vec<(usize, Vec<u8>)> = (0..i.len())
            .filter(|&m| m == 0 || s2(m) != s2(m - 1))
            .map(|m| (m, helios_difop(300 * s2(m), 4)))
            .collect();
        insert(&i, &changes)
    };
    let got = speed_runs(
        &Robo,
        &helios16p(),
        &clean,
        [375, 1050, 975],
        225,
        1,
        difops,
    );
    assert_eq!(
        got,
        vec![
            (
                4,
                vec![
                    (75, 76, 7669, 0),
                    (76, 76, 7967, 0),
                    (76, 76, 7969, 0),
                    (76, 76, 7904, 0),
                    (76, 76, 7934, 0)
                ]
            ),
            (
                3,
                vec![
                    (297, 302, 30487, 0),
                    (301, 301, 31592, 0),
                    (301, 301, 31563, 0),
                    (154, 301, 20380, 0)
                ]
            ),
            (
                5,
                vec![
                    (75, 76, 7669, 0),
                    (76, 76, 7967, 0),
                    (76, 76, 7969, 0),
                    (298, 298, 30499, 0),
                    (301, 301, 31569, 0),
                    (154, 300, 20420, 0)
                ]
            )
        ]
    );
}

#[test]
fn hesai_return_mode_switch_frame_is_whole() {
    // Pandar64 (6 blocks, 3 firings × 2 returns) and QT128 (2 blocks, 1 firing × 2 returns,
    // looped to 4 turns with continuous azimuth): the single-return stream derived from the
    // dual one (`hesai_single`), then switched at a firing half a turn from the cut, single →
    // dual and dual → single, time, azimuth and UDP sequence running on.
    let cases = [
        (&P64, p64(), capture(P64_PCAP, 2368), 0, 450),
        (
            &QT128,
            qt128(),
            resample(&QT128, &capture(QT128_PCAP, 2368), 3600, |_| 2),
            1,
            750,
        ),
    ];
    let mut got = Vec::new();
    for (h, cfg, dual, first, k) in cases {
        let dual = renumber(h, &dual);
        let single = hesai_single(h, &dual, first);
        let d = first + 2 * k;
        for (b, a) in [
            (single[..k].to_vec(), dual[d..].to_vec()),
            (dual[..d].to_vec(), single[k..].to_vec()),
        ] {
            let both = renumber(h, &[b.clone(), a.clone()].concat());
            let (s, k) = check_switch(&cfg, &b, &a, &both);
            got.push((s[k], k, s.len()));
        }
    }
    assert_eq!(
        got,
        vec![
            ((463, 463, 91923, 0), 2, 6),
            ((464, 464, 91704, 0), 2, 6),
            ((625, 625, 71013, 0), 1, 5),
            ((802, 802, 72539, 0), 1, 5)
        ]
    );
}

#[test]
fn robosense_return_mode_switch_frame_is_whole() {
    // Helios-16P: the capture read as dual return (a DIFOP saying so first), its single-return
    // stream derived by `robo_single`; the switch: a DIFOP announcing the new mode, then data
    // in it, 2.5 turns in (at 196.72°).
    let dual: Input = capture(HELIOS_PCAP, 6699);
    let single = robo_single(&dual);
    let with = |mode: u8, i: &[(Vec<u8>, u64)]| insert(i, &[(0, helios_difop(600, mode))]);
    let (fs, _) = run(&helios16p(), &with(4, &single));
    let (fd, _) = run(&helios16p(), &with(0, &dual));
    assert_eq!(shape(&fs)[1], (76, 76, 6587, 0));
    assert_eq!(shape(&fd)[1], (151, 151, 15788, 0));
    let k = 190;
    let (b, a) = (with(4, &single[..k]), with(0, &dual[2 * k..]));
    let both = |b: &Input, a: &Input| robo_renumber(&[b.clone(), a.clone()].concat());
    let (s, i) = check_switch(&helios16p(), &b, &a, &both(&b, &a));
    assert_eq!((s[i], i, s.len()), ((110, 110, 9095, 0), 2, 6));
    let (b, a) = (with(0, &dual[..2 * k]), with(4, &single[k..]));
    let (s, i) = check_switch(&helios16p(), &b, &a, &both(&b, &a));
    assert_eq!((s[i], i, s.len()), ((117, 117, 13229, 0), 2, 5));
}

/// VLP-16 single-return capture, dual-return capture, and their packet interval (ns) and
/// block-0 advance per packet (0.01°).
fn vlp16_modes() -> (Input, Input, [(u64, u32); 2]) {
    let single = capture("velodyne/vlp16/vlp16_strongest_84pkt.pcap", 2368);
    let dual = capture(VLP16_DUAL, 2368);
    let v = Velodyne;
    let m = |i: &Input| {
        let n = i.len();
        (
            (v.sensor_ns(&i[n - 1].0) - v.sensor_ns(&i[0].0)) / (n as u64 - 1),
            (36_000 + v.azimuths(&i[n - 1].0)[0] - v.azimuths(&i[n - 2].0)[0]) % 36_000,
        )
    };
    let modes = [m(&single), m(&dual)];
    assert_eq!(modes, [(1_327_289, 478), (663_551, 239)]);
    (single, dual, modes)
}

#[test]
fn velodyne_dual_to_single_switch_frame_is_whole() {
    // The dual capture, then the single one a dual packet interval and advance later.
    let (single, dual, [_, (dt, adv)]) = vlp16_modes();
    let after = vlp16_after(&dual, &single, adv, dt);
    let sw = Velodyne.azimuths(&after[0].0)[0];
    let (s, k, old, new) = check_switch_kept(&vlp16(), &dual, &after, sw);
    assert_eq!(
        s,
        vec![
            (151, 152, 14829, 0),
            (152, 152, 14820, 0),
            (152, 152, 14844, 0),
            (151, 151, 14881, 0),
            (77, 77, 28345, 0),
            (9, 76, 3325, 0)
        ]
    );
    assert_eq!((k, old, new), (4, 40, 28305));
}

#[test]
fn velodyne_single_to_dual_switch_at_and_after_the_cut() {
    // The switch packet (the first dual one) `adv` past the last single packet's block 0
    // (its single-mode advance; the dual one; 2°; 0°, i.e. behind the single packet's last
    // blocks, as a sensor restarting its firing sequence could send) and `dt` later (the
    // single or the dual interval); turned so the cut lies: as recorded (115.84°), 1° into
    // the switch packet, 2° into the last single packet (the switch packet is the first after
    // the cut), 1° before the switch packet, 4° into the last single packet. Every point
    // once, the switch frame whole, in all 30.
    let (single, dual, [(s_dt, s_adv), (d_dt, d_adv)]) = vlp16_modes();
    let v = Velodyne;
    let mut got = Vec::new();
    for (adv, dt) in [
        (s_adv, s_dt),
        (s_adv, d_dt),
        (d_adv, d_dt),
        (d_adv, s_dt),
        (200, s_dt),
        (0, s_dt),
    ] {
        let moved = vlp16_after(&single, &dual, adv, dt);
        let az_last = v.azimuths(&single[single.len() - 1].0)[0];
        let az_sw = v.azimuths(&moved[0].0)[0];
        for by in [
            0,
            71_900 - az_sw,
            71_800 - az_last,
            36_100 - az_sw,
            71_600 - az_last,
        ] {
            let by = by % 36_000;
            let (b, z) = (rotate(&v, &single, by), rotate(&v, &moved, by));
            let (s, k, old, new) = check_switch_kept(&vlp16(), &b, &z, (az_sw + by) % 36_000);
            got.push((adv, by, s[k], old, new));
        }
    }
    // The cut inside the switch packet: the switch frame ends inside it (41 dual points);
    // inside the last single packet: it holds that packet's 216 points past the cut and the
    // dual turn up to the cut.
    assert_eq!(got[1], (478, 8316, (76, 76, 28348, 0), 28307, 41));
    assert_eq!(got[2], (478, 8694, (151, 151, 14961, 0), 216, 14745));
    assert_eq!(got[3], (478, 8516, (152, 152, 14894, 0), 79, 14815));
    assert_eq!(got[26], (0, 8794, (3, 3, 328, 0), 287, 41));
    assert_eq!(got.len(), 30);
}

#[test]
fn velodyne_dual_to_single_switch_at_and_after_the_cut() {
    // The switch packet (the first single one) `adv` past the last dual packet's block 0 (the
    // dual advance, then `dt` the dual or the single interval; the single advance, likewise;
    // 2°; 0°, behind the dual packet's last blocks); turned so the cut lies: as recorded,
    // 1° into the switch packet, 2° into the last dual packet
    // (between its last block azimuth and its last, interpolated, firing sequence), 1° before
    // the switch packet, 4° past the last dual packet's block 0. Every point once, the switch
    // frame whole, the frames after it those of the single stream alone, in all 30.
    let (single, dual, [(s_dt, s_adv), (d_dt, d_adv)]) = vlp16_modes();
    let v = Velodyne;
    let mut got = Vec::new();
    for (adv, dt) in [
        (d_adv, d_dt),
        (d_adv, s_dt),
        (s_adv, s_dt),
        (s_adv, d_dt),
        (200, d_dt),
        (0, d_dt),
    ] {
        let moved = vlp16_after(&dual, &single, adv, dt);
        let az_last = v.azimuths(&dual[dual.len() - 1].0)[0];
        let az_sw = v.azimuths(&moved[0].0)[0];
        for by in [
            0,
            71_900 - az_sw,
            71_800 - az_last,
            36_100 - az_sw,
            71_600 - az_last,
        ] {
            let by = by % 36_000;
            let (b, z) = (rotate(&v, &dual, by), rotate(&v, &moved, by));
            let (s, k, old, new) = check_switch_kept(&vlp16(), &b, &z, (az_sw + by) % 36_000);
            got.push((adv, by, s[k], old, new, *s.last().unwrap()));
        }
    }
    // `(adv, turn, switch frame, its old and new points, last frame)`. The cut 2° into the
    // last dual packet: its 15 points past the cut open the switch frame (the dual stream
    // alone keeps them in its flushed last frame). The single advance with the cut 2° into or
    // 4° past the last dual packet: the switch packet lies wholly past the cut, the switch
    // frame holds no single point. The last frames at 0° and 4° past (lead 239 or 0) were
    // `(9, 77, ..)`, one packet more than the single stream alone, while the dual advance
    // lingered in the measured mean.
    let want = [
        (239, 0, (77, 77, 28345, 0), 40, 28305, (9, 76, 3325, 0)),
        (
            239,
            35796,
            (152, 152, 14921, 0),
            14840,
            81,
            (9, 76, 3166, 0),
        ),
        (239, 35935, (76, 76, 28368, 0), 15, 28353, (9, 76, 3277, 0)),
        (239, 35996, (77, 77, 28345, 0), 40, 28305, (9, 76, 3325, 0)),
        (
            239,
            35735,
            (151, 151, 14947, 0),
            14816,
            131,
            (9, 76, 3118, 0),
        ),
        (239, 0, (77, 77, 28345, 0), 40, 28305, (9, 76, 3325, 0)),
        (
            239,
            35796,
            (152, 152, 14921, 0),
            14840,
            81,
            (9, 76, 3166, 0),
        ),
        (239, 35935, (76, 76, 28368, 0), 15, 28353, (9, 76, 3277, 0)),
        (239, 35996, (77, 77, 28345, 0), 40, 28305, (9, 76, 3325, 0)),
        (
            239,
            35735,
            (151, 151, 14947, 0),
            14816,
            131,
            (9, 76, 3118, 0),
        ),
        (478, 0, (76, 76, 28158, 0), 40, 28118, (10, 76, 3512, 0)),
        (
            478,
            35557,
            (151, 151, 14825, 0),
            14744,
            81,
            (9, 76, 3166, 0),
        ),
        (478, 35935, (75, 75, 28179, 0), 15, 28164, (10, 77, 3466, 0)),
        (478, 35757, (151, 151, 14824, 0), 14824, 0, (9, 76, 3325, 0)),
        (478, 35735, (151, 151, 14816, 0), 14816, 0, (9, 76, 3309, 0)),
        (478, 0, (76, 76, 28158, 0), 40, 28118, (10, 76, 3512, 0)),
        (
            478,
            35557,
            (151, 151, 14825, 0),
            14744,
            81,
            (9, 76, 3166, 0),
        ),
        (478, 35935, (75, 75, 28179, 0), 15, 28164, (10, 77, 3466, 0)),
        (478, 35757, (151, 151, 14824, 0), 14824, 0, (9, 76, 3325, 0)),
        (478, 35735, (151, 151, 14816, 0), 14816, 0, (9, 76, 3309, 0)),
        (200, 0, (77, 77, 28377, 0), 40, 28337, (9, 76, 3293, 0)),
        (
            200,
            35835,
            (152, 152, 14937, 0),
            14856,
            81,
            (9, 76, 3166, 0),
        ),
        (200, 35935, (76, 76, 28400, 0), 15, 28385, (9, 76, 3245, 0)),
        (200, 35, (77, 77, 28361, 0), 56, 28305, (9, 76, 3325, 0)),
        (
            200,
            35735,
            (151, 151, 14978, 0),
            14816,
            162,
            (9, 77, 3087, 0),
        ),
        (0, 0, (3, 3, 152, 0), 40, 112, (9, 76, 3134, 0)),
        (0, 35, (3, 3, 137, 0), 56, 81, (9, 76, 3166, 0)),
        (0, 35935, (152, 152, 15057, 0), 14895, 162, (9, 77, 3087, 0)),
        (0, 235, (78, 78, 28441, 0), 136, 28305, (9, 76, 3325, 0)),
        (0, 35735, (151, 151, 15132, 0), 14816, 316, (8, 76, 2933, 0)),
    ];
    assert_eq!(got, want);
}
