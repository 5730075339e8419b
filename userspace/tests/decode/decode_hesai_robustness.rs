//! Hesai decoders on synthetic packets built from the documented layouts
//! (`lidarxdp_core::sensor::hesai::layout`): exact point values for models without a capture
//! (PandarXT16, Pandar128E4X/OT128), and the field faults of issue 3, each with its value.
//!
//! Calibration CSVs are generated into the temp directory (no data is copied into the repo).

use lidarxdp_testkit as tmpfile;

use std::path::PathBuf;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::point::ReturnType;
use lidarxdp_core::scan::PacketRejection;
use lidarxdp_core::sensor::hesai::layout::{self, HeaderKind, Layout};
use lidarxdp_core::sensor::hesai::packet::{self, PacketError, crc32_mpeg2, return_mode};
use lidarxdp_core::sensor::{PipelineOptions, ScanPipeline, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, Fov};

/// 2024-01-02 03:04:05 UTC, s.
const DATE_S: u64 = 1_704_164_645;

/// Writes a CSV: elevation `15 - 2·(i mod 16)`°, azimuth offset `az(i)`°.
fn csv(name: &str, channels: usize, az: impl Fn(usize) -> f32) -> PathBuf {
    let mut s = String::from("Channel,Elevation,Azimuth\n");
    for i in 0..channels {
        s += &format!("{},{},{}\n", i + 1, 15.0 - 2.0 * (i % 16) as f32, az(i));
    }
    let _ = name;
    tmpfile::content_file("csv", s.as_bytes())
}

/// Writes an AT128 correction file (version 1.5, resolution 1): 3 fields, field k covering
/// encoder azimuths [120°·k, 120°·k + 119.99°]; channel azimuth `az(c)` (0.01°/256),
/// elevation `5 − c mod 16` degrees; azimuth adjustment `adj` (0.01°) for channel 1 only.
fn at128_dat(name: &str, az: impl Fn(usize) -> i32, adj: i8) -> PathBuf {
    let mut b = vec![0xEE, 0xFF, 1, 5, 128, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    for k in 0..3u32 {
        b.extend_from_slice(&(k * 120 * 25_600).to_le_bytes());
    }
    for k in 0..3u32 {
        b.extend_from_slice(&(k * 120 * 25_600 + 119 * 25_600).to_le_bytes());
    }
    for c in 0..128 {
        b.extend_from_slice(&az(c).to_le_bytes());
    }
    for c in 0..128 {
        b.extend_from_slice(&((5 - c % 16) * 25_600i32).to_le_bytes());
    }
    for c in 0..128 {
        b.extend(std::iter::repeat_n(if c == 1 { adj as u8 } else { 0 }, 180));
    }
    b.extend(std::iter::repeat_n(0u8, 180 * 128 + 32));
    let _ = name;
    tmpfile::content_file("dat", &b)
}

/// A calibration file for any layout: a CSV, or for AT128 a correction file.
fn calib_for(l: &Layout, name: &str) -> PathBuf {
    if l.fine_azimuth {
        at128_dat(name, |c| (c as i32 % 5) * 25_600, 3)
    } else {
        csv(name, l.channels, |i| (i % 7) as f32 - 3.0)
    }
}

/// A packet of `l`: block azimuths `az`, return mode `mode`, units `(distance, reflectivity)`
/// from `unit(block, channel)`, UDP sequence `seq`, timestamp `us` µs past [`DATE_S`]; CRCs
/// filled in; OT128 in standard (non-high-resolution) mode.
fn build(
    l: &Layout,
    az: &[u16],
    mode: u8,
    unit: impl Fn(usize, usize) -> (u16, u8),
    seq: u32,
    us: u32,
) -> Vec<u8> {
    let mut b = vec![0u8; l.base_len()];
    match l.header {
        HeaderKind::None => {}
        HeaderKind::Short8 => {
            b[..6].copy_from_slice(&[0xEE, 0xFF, l.channels as u8, l.blocks as u8, 0, 4]);
        }
        HeaderKind::Long12 => {
            b[..12].copy_from_slice(&[
                0xEE,
                0xFF,
                l.protocol.0,
                l.protocol.1,
                0,
                0,
                l.channels as u8,
                l.blocks as u8,
                0,
                4,
                return_mode::returns(mode).unwrap_or(1) as u8,
                0,
            ]);
        }
    }
    for (blk, a) in az.iter().enumerate().take(l.blocks) {
        if l.header == HeaderKind::None {
            let o = blk * l.block_len();
            b[o..o + 2].copy_from_slice(&[0xFF, 0xEE]);
        }
        let o = l.azimuth_offset(blk);
        b[o..o + 2].copy_from_slice(&a.to_le_bytes());
        for ch in 0..l.channels {
            let (d, r) = unit(blk, ch);
            let o = l.unit_offset(blk, ch);
            b[o..o + 2].copy_from_slice(&d.to_le_bytes());
            b[o + 2] = r;
        }
    }
    let t = l.tail_offset();
    b[t + l.t_return_mode] = mode;
    b[t + l.t_timestamp..t + l.t_timestamp + 4].copy_from_slice(&us.to_le_bytes());
    let date = if l.epoch_date {
        let be = DATE_S.to_be_bytes();
        [0, be[3], be[4], be[5], be[6], be[7]]
    } else {
        [(2024 - l.year_base) as u8, 1, 2, 3, 4, 5]
    };
    b[t + l.t_date..t + l.t_date + 6].copy_from_slice(&date);
    if let Some(o) = l.t_udp_seq {
        b[t + o..t + o + 4].copy_from_slice(&seq.to_le_bytes());
    }
    if let Some(o) = l.t_azimuth_state {
        b[t + o + 2] = 1; // operational state: standard
    }
    if l.body_crc {
        let e = l.body_end();
        let c = crc32_mpeg2(&b[l.header_len()..e]);
        b[e..e + 4].copy_from_slice(&c.to_le_bytes());
    }
    if let Some(o) = l.t_crc {
        let c = crc32_mpeg2(&b[t..t + o]);
        b[t + o..t + o + 4].copy_from_slice(&c.to_le_bytes());
    }
    b
}

fn pipeline(model: SensorModel, calib: PathBuf, cut: f64, opts: PipelineOptions) -> ScanPipeline {
    let mut cfg = SensorConfig::new(0, model, calib);
    cfg.cut_angle = Degrees::new(cut).unwrap();
    lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap()
}

fn xt16_flat() -> ScanPipeline {
    pipeline(
        SensorModel::PandarXt16,
        csv("xt16_flat", 16, |_| 0.0),
        0.0,
        PipelineOptions::default(),
    )
}

/// XT16 single-return packet: blocks at `az0 + 40·b` (0.01°), 10 m everywhere.
fn xt16(az0: u32, seq: u32, us: u32) -> Vec<u8> {
    let az: Vec<u16> = (0..8).map(|b| ((az0 + 40 * b) % 36_000) as u16).collect();
    build(
        &layout::PANDARXT16,
        &az,
        return_mode::STRONGEST,
        |_, _| (2500, 7),
        seq,
        us,
    )
}

fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() < 1e-5
}

#[test]
fn xt16_exact_point_values() {
    let mut p = pipeline(
        SensorModel::PandarXt16,
        csv("xt16_off", 16, |i| if i == 1 { 1.0 } else { 0.0 }),
        0.0,
        PipelineOptions::default(),
    );
    let pkt = xt16(9000, 1, 500_000);
    assert_eq!(pkt.len(), 568);
    let mut out = Vec::new();
    p.push(&pkt, 7, &mut out);
    assert!(out.is_empty());
    p.flush(&mut out);
    assert_eq!(out.len(), 1);
    let f = &out[0];
    assert_eq!(f.points.len(), 8 * 16);
    // Frame start: earliest firing of block 0 = 5632 - 7·50000 + 368 ns after the packet time.
    let packet_ns = DATE_S * 1_000_000_000 + 500_000_000;
    assert_eq!(f.header.start_ns, packet_ns - 344_000);
    assert_eq!(f.header.host_ns, 7);
    assert_eq!(
        (f.header.packets_received, f.header.packets_expected),
        (1, 1)
    );
    let p0 = f.points.autoware()[0];
    let el = 15f64.to_radians();
    assert!(close(p0.x, 10.0 * el.cos()), "{p0:?}"); // sin(90°) = 1
    assert!(close(p0.y, 0.0));
    assert!(close(p0.z, 10.0 * el.sin()));
    assert_eq!((p0.channel, p0.intensity, p0.time_stamp), (0, 7, 0));
    assert_eq!(p0.return_type, ReturnType::Strongest as u8);
    assert!(close(p0.distance, 10.0));
    assert!(close(p0.azimuth, 90f64.to_radians()));
    // Channel 1: azimuth offset +1°, elevation 13°, fired 3024 ns after channel 0.
    let p1 = f.points.autoware()[1];
    assert!(close(p1.azimuth, 91f64.to_radians()));
    assert!(close(p1.elevation, 13f64.to_radians()));
    assert!(close(
        p1.y,
        10.0 * 13f64.to_radians().cos() * 91f64.to_radians().cos()
    ));
    assert_eq!(p1.time_stamp, 3024);
    // Last point: block 7, channel 15: 5632 + 368 + 15·3024 ns after the packet time.
    let last = f.points.autoware()[127];
    assert_eq!(
        (last.channel, last.time_stamp),
        (15, 344_000 + 6000 + 45_360)
    );
}

/// Fault 1: block azimuths 359.02, 359.42, 359.82, then 0.22 inside one packet.
#[test]
fn azimuth_wraps_inside_packet() {
    let mut p = xt16_flat();
    let mut out = Vec::new();
    p.push(&xt16(35_902, 1, 0), 0, &mut out);
    assert_eq!(out.len(), 1, "first (partial) frame published at the wrap");
    assert_eq!(out[0].points.len(), 3 * 16);
    assert!(close(
        out[0].points.autoware()[47].azimuth,
        359.82f64.to_radians()
    ));
    p.flush(&mut out);
    assert_eq!(out.len(), 2);
    let g = &out[1];
    assert_eq!(g.points.len(), 5 * 16);
    assert!(close(g.points.autoware()[0].azimuth, 0.22f64.to_radians()));
    // Starts at block 3's earliest firing: 5632 - 4·50000 + 368 ns after the packet time.
    assert_eq!(g.header.start_ns, DATE_S * 1_000_000_000 - 194_000);
    assert_eq!(g.points.autoware()[0].time_stamp, 0);
    assert_eq!(out[0].header.packets_received, 1);
    assert_eq!(g.header.packets_received, 1);
    assert_eq!((out[0].header.sequence, g.header.sequence), (0, 1));
}

/// Fault 2: a byte short, a few bytes long, bad flags; every prefix of a packet.
#[test]
fn damaged_datagrams_are_counted_never_read_out_of_bounds() {
    let good = xt16(100, 1, 0);
    let mut p = xt16_flat();
    let mut out = Vec::new();
    p.push(&good, 0, &mut out);
    let mut long = good.clone();
    long.extend_from_slice(&[0; 3]);
    let mut flag = good.clone();
    flag[1] = 0x00;
    for d in [&good[..567], &long[..], &flag[..]] {
        p.push(d, 1, &mut out);
    }
    assert_eq!(p.counters().malformed, 3);
    p.flush(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.packets_malformed, 3);
    assert_eq!(out[0].points.len(), 128);
    // Every prefix: shorter than a header is foreign, otherwise a damaged XT16 packet.
    let mut p = xt16_flat();
    for n in 0..good.len() {
        p.push(&good[..n], 0, &mut out);
    }
    assert_eq!((p.counters().ignored, p.counters().malformed), (12, 556));
    // Pandar40P block flag damaged in block 3.
    let l = &layout::PANDAR40P;
    let mut pkt = build(l, &[100; 10], return_mode::LAST, |_, _| (0, 0), 0, 0);
    let calib = csv("p40", 40, |_| 0.0);
    assert!(packet::classify(&pkt, l, true).is_ok());
    pkt[3 * 124] = 0;
    assert_eq!(
        packet::classify(&pkt, l, true).unwrap_err(),
        PacketRejection::Malformed(PacketError::Flag { offset: 372 })
    );
    let mut p = pipeline(
        SensorModel::Pandar40p,
        calib,
        0.0,
        PipelineOptions::default(),
    );
    p.push(&pkt, 0, &mut out);
    assert_eq!(p.counters().malformed, 1);
}

/// Fault 3: 49-, 356- and 544-byte foreign datagrams between two packets change nothing.
#[test]
fn foreign_datagrams_are_ignored() {
    let run = |foreign: bool| {
        let mut p = xt16_flat();
        let mut out = Vec::new();
        p.push(&xt16(35_000, 1, 0), 0, &mut out);
        if foreign {
            for n in [49, 356, 544] {
                p.push(&vec![0x5A; n], 1, &mut out);
            }
        }
        p.push(&xt16(35_320, 2, 300), 2, &mut out);
        p.push(&xt16(35_820, 3, 600), 3, &mut out);
        p.flush(&mut out);
        (out, *p.counters())
    };
    let (a, ca) = run(false);
    let (b, cb) = run(true);
    assert_eq!(a, b);
    assert_eq!((cb.ignored, cb.decoded, ca.ignored), (3, 3, 0));
    assert_eq!(a.len(), 2);
    // 8 + 8 + 5 blocks up to 359.80° in the first frame, 0.20°.. in the second.
    assert_eq!(a[0].points.len(), 16 * 21);
    assert_eq!(a[1].points.len(), 16 * 3);
}

/// Fault 4: Pandar40P firmware variant with the 4-byte UDP sequence (1266 bytes) is decoded;
/// unknown lengths near 1262 are malformed.
#[test]
fn pandar40p_variants() {
    let l = &layout::PANDAR40P;
    let pkt = build(
        l,
        &[1000; 10],
        return_mode::LAST_STRONGEST,
        |_, _| (1000, 9),
        0,
        0,
    );
    assert_eq!(pkt.len(), 1262);
    let mut v = pkt.clone();
    v.extend_from_slice(&77u32.to_le_bytes());
    let p = packet::classify(&v, l, true).unwrap();
    assert_eq!(p.udp_sequence(), Some(77));
    assert_eq!(
        packet::classify(&pkt, l, true).unwrap().udp_sequence(),
        None
    );
    for n in [1256, 1261, 1268] {
        let mut x = pkt.clone();
        x.resize(n, 0);
        assert!(matches!(
            packet::classify(&x, l, true),
            Err(PacketRejection::Malformed(PacketError::Length { .. }))
        ));
    }
    let mut p = pipeline(
        SensorModel::Pandar40p,
        csv("p40v", 40, |_| 0.0),
        0.0,
        PipelineOptions::default(),
    );
    let mut out = Vec::new();
    p.push(&v, 0, &mut out);
    p.flush(&mut out);
    // Dual, identical returns everywhere: one point per channel and block pair (4 m).
    assert_eq!(out[0].points.len(), 5 * 40);
    assert!(
        out[0]
            .points
            .autoware()
            .iter()
            .all(|q| q.return_type == ReturnType::Identical as u8 && close(q.distance, 4.0))
    );
}

/// Fault 5: a header that disagrees with the configured model; model auto-detection.
#[test]
fn header_disagreeing_with_model() {
    let mut pkt = xt16(0, 1, 0);
    pkt[6] = 32; // laser count of an XT32
    assert_eq!(
        packet::classify(&pkt, &layout::PANDARXT16, true).unwrap_err(),
        PacketRejection::Malformed(PacketError::Header {
            lasers: 32,
            blocks: 8,
            want_lasers: 16,
            want_blocks: 8
        })
    );
    let xt32 = build(
        &layout::PANDARXT32,
        &[0; 8],
        return_mode::STRONGEST,
        |_, _| (0, 0),
        0,
        0,
    );
    // A whole XT32 packet on an XT16's port: another model's traffic, ignored.
    assert_eq!(
        packet::classify(&xt32, &layout::PANDARXT16, true).unwrap_err(),
        PacketRejection::Ignored
    );
    assert_eq!(
        packet::detect_model(&xt16(0, 1, 0)),
        Some(SensorModel::PandarXt16)
    );
    assert_eq!(packet::detect_model(&xt32), Some(SensorModel::PandarXt32));
    for l in layout::ALL {
        let pkt = build(l, &[0; 10], return_mode::STRONGEST, |_, _| (0, 0), 0, 0);
        assert_eq!(packet::detect_model(&pkt), Some(l.model));
    }
    assert_eq!(packet::detect_model(&[0x5A; 544]), None);
    // Real captures identify themselves.
    for (dir, model) in [
        ("pandar40p", SensorModel::Pandar40p),
        ("pandar64", SensorModel::Pandar64),
        ("pandarqt64", SensorModel::PandarQt64),
        ("pandarqt128", SensorModel::PandarQt128),
        ("pandarxt32", SensorModel::PandarXt32),
        ("pandarxt32m", SensorModel::PandarXt32m),
    ] {
        let path = format!(
            "{}/../../shared/data/hesai/{dir}/{dir}_nebula.pcap",
            env!("CARGO_MANIFEST_DIR")
        );
        let first = udp_payloads(std::path::Path::new(&path))
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(packet::detect_model(&first.payload), Some(model), "{dir}");
    }
}

/// Fault 6: three packets lost mid-frame (UDP sequence 12..14 missing).
#[test]
fn lost_packets_from_udp_sequence() {
    let mut p = xt16_flat();
    let mut out = Vec::new();
    let mut seq = 10;
    for i in 0..20u32 {
        if (2..5).contains(&i) {
            seq += 1;
            continue;
        }
        p.push(&xt16(1000 + 320 * i, seq, 300 * i), u64::from(i), &mut out);
        seq += 1;
    }
    p.flush(&mut out);
    assert_eq!(out.len(), 1);
    let h = out[0].header;
    // 17 received + 3 lost by sequence; the frame neither began (10°) nor ended (73.6°, flush)
    // at the cut: + 3 packets of head (10° / 3.2°) + 89 of tail (to 360°).
    assert_eq!(
        (h.packets_received, h.packets_expected),
        (17, 17 + 3 + 3 + 89)
    );
    assert_eq!(out[0].points.len(), 17 * 128);
}

/// Fault 7: the packets around a frame start are lost (host silence > timeout): the partial
/// frame is published, and the next frame's start comes from its own first packet.
#[test]
fn lost_frame_start() {
    let mut p = xt16_flat();
    let mut out = Vec::new();
    p.push(&xt16(30_000, 1, 0), 0, &mut out);
    p.push(&xt16(30_320, 2, 300), 300_000, &mut out);
    // 0.3 s later (timeout 0.2 s), past the cut.
    p.push(&xt16(1_000, 900, 300_000), 300_300_000, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].points.len(), 256);
    p.flush(&mut out);
    assert_eq!(out.len(), 2);
    let g = out[1].header;
    assert_eq!(g.start_ns, DATE_S * 1_000_000_000 + 300_000_000 - 344_000);
    assert_eq!(g.host_ns, 300_300_000);
    // One packet after the silence, flushed: published marked not whole (head 10° / 3.2° = 3
    // packets, tail from 12.8° to the cut = 108), never as a whole 1-packet frame.
    assert_eq!((g.packets_received, g.packets_expected), (1, 1 + 3 + 108));
}

/// Fault 8: dual return: identical returns merged, close returns (< 0.1 m) keep the last,
/// types from the return mode; XT16 swaps first/last.
#[test]
fn dual_return_rules() {
    let az: Vec<u16> = (0..8).map(|b| 5000 + 40 * (b / 2)).collect();
    // Per channel c % 4: 0 identical; 1 different, block 0 stronger; 2 different, block 1
    // stronger; 3 only 4 cm apart.
    let unit = |b: usize, c: usize| match (c % 4, b % 2) {
        (0, _) => (2500, 50),
        (1, 0) => (2500, 90),
        (1, _) => (3000, 10),
        (2, 0) => (2500, 10),
        (2, _) => (3000, 90),
        (3, 0) => (2500, 50),
        _ => (2510, 50),
    };
    let l = &layout::PANDARXT16;
    let run = |mode: u8| {
        let mut p = xt16_flat();
        let mut out = Vec::new();
        p.push(&build(l, &az, mode, unit, 1, 0), 0, &mut out);
        p.flush(&mut out);
        out.remove(0)
    };
    let ty = |f: &Frame, ch: u16| -> Vec<u8> {
        f.points
            .autoware()
            .iter()
            .take_while(|q| q.azimuth < 0.876) // first block pair only (50°)
            .filter(|q| q.channel == ch)
            .map(|q| q.return_type)
            .collect()
    };
    use ReturnType::*;
    let f = run(return_mode::LAST_STRONGEST);
    assert_eq!(f.points.len(), 4 * 4 * 6);
    assert_eq!(ty(&f, 0), [Identical as u8]);
    assert_eq!(ty(&f, 1), [LastStrongest as u8, SecondStrongest as u8]);
    assert_eq!(ty(&f, 2), [Last as u8, Strongest as u8]);
    assert_eq!(ty(&f, 3), [Strongest as u8]);
    assert!(close(f.points.autoware()[5].distance, 10.04));
    // Both returns of a firing share its time.
    assert_eq!(
        f.points.autoware()[1].time_stamp,
        f.points.autoware()[2].time_stamp
    );
    let f = run(return_mode::FIRST_LAST);
    assert_eq!(ty(&f, 1), [Last as u8, First as u8]);
    let f = run(return_mode::FIRST_STRONGEST);
    assert_eq!(ty(&f, 1), [FirstStrongest as u8, SecondStrongest as u8]);
}

/// Fault 9: a cut angle of exactly 0 or 360 degrees; a 90° cut; the first partial frame.
#[test]
fn cut_angle_0_360_and_first_frame() {
    let calib = csv("xt16_cut", 16, |_| 0.0);
    let run = |cut: f64| {
        let mut p = pipeline(
            SensorModel::PandarXt16,
            calib.clone(),
            cut,
            PipelineOptions::default(),
        );
        let mut out = Vec::new();
        for i in 0..300u32 {
            p.push(
                &xt16((20_000 + 320 * i) % 36_000, i, 300 * i),
                u64::from(i),
                &mut out,
            );
        }
        p.flush(&mut out);
        out
    };
    let a = run(0.0);
    assert_eq!(a, run(360.0));
    let n: Vec<usize> = a.iter().map(|f| f.points.len() / 16).collect();
    // Block k is at 200.00° + 0.40°·k. A block exactly at the cut belongs to the frame before
    // (Nebula: `last <= cut < current`): k = 0..=400 (up to 360.00°), then 900 per turn.
    assert_eq!(n, [401, 900, 900, 199]);
    assert!(close(
        a[1].points.autoware()[0].azimuth,
        0.4f64.to_radians()
    ));
    let b = run(90.0);
    let n: Vec<usize> = b.iter().map(|f| f.points.len() / 16).collect();
    assert_eq!(n, [626, 900, 874]);
    assert!(close(
        b[1].points.autoware()[0].azimuth,
        90.4f64.to_radians()
    ));
}

/// OT128: exact values on a synthetic dual-return packet; CRC check and its switch.
#[test]
fn ot128_exact_values_and_crc() {
    let l = &layout::PANDAR128E4X;
    let calib = csv("ot128", 128, |i| if i == 0 { 2.5 } else { 0.0 });
    let pkt = build(
        l,
        &[18_000, 18_000],
        return_mode::LAST_STRONGEST,
        |b, c| {
            if c == 0 {
                (5000 + b as u16, 40)
            } else {
                (0, 0)
            }
        },
        5,
        250_000,
    );
    assert_eq!(pkt.len(), 861);
    let mut p = pipeline(
        SensorModel::Pandar128e4x,
        calib.clone(),
        0.0,
        PipelineOptions::default(),
    );
    let mut out = Vec::new();
    p.push(&pkt, 0, &mut out);
    p.flush(&mut out);
    let f = &out[0];
    // Two returns 4 mm apart (< 0.1 m): only the second is kept, strongest (equal reflectivity).
    assert_eq!(f.points.len(), 1);
    let q = f.points.autoware()[0];
    assert_eq!(q.return_type, ReturnType::Strongest as u8);
    assert!(close(q.distance, 20.004));
    assert!(close(q.azimuth, 182.5f64.to_radians()));
    let az = 182.5f64.to_radians();
    let el = 15f64.to_radians();
    assert!(close(q.x, 20.004 * el.cos() * az.sin()));
    assert!(close(q.y, 20.004 * el.cos() * az.cos()));
    // Start = packet + 43346 + min(static table) = +45724 ns; channel 0 fires at +93104 ns.
    assert_eq!(
        f.header.start_ns,
        DATE_S * 1_000_000_000 + 250_000_000 + 45_724
    );
    assert_eq!(q.time_stamp, 93_104 - 45_724);
    // A flipped body byte / tail byte fails the CRC; the switch turns the check off.
    let mut bad = pkt.clone();
    bad[100] ^= 1;
    assert!(matches!(
        packet::classify(&bad, l, true),
        Err(PacketRejection::Malformed(PacketError::BodyCrc { .. }))
    ));
    let mut bad_tail = pkt.clone();
    bad_tail[l.tail_offset() + 30] ^= 1;
    assert!(matches!(
        packet::classify(&bad_tail, l, true),
        Err(PacketRejection::Malformed(PacketError::TailCrc { .. }))
    ));
    let mut p = pipeline(
        SensorModel::Pandar128e4x,
        calib,
        0.0,
        PipelineOptions {
            hesai_skip_crc: true,
            ..Default::default()
        },
    );
    p.push(&bad, 0, &mut out);
    assert_eq!(p.counters().decoded, 1);
    // The 32-byte signature variant is accepted.
    let mut signed = pkt.clone();
    signed.extend_from_slice(&[0; 32]);
    assert!(packet::classify(&signed, l, true).is_ok());
}

/// A corrupted byte in a real QT128 packet is caught by the body CRC.
#[test]
fn qt128_capture_crc() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/hesai/pandarqt128/pandarqt128_nebula.pcap"
    );
    let d = udp_payloads(std::path::Path::new(path))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let l = &layout::PANDARQT128;
    let p = packet::classify(&d.payload, l, true).unwrap();
    assert_eq!(
        p.udp_sequence(),
        Some(u32::from_le_bytes([
            d.payload[1087],
            d.payload[1088],
            d.payload[1089],
            d.payload[1090]
        ]))
    );
    let mut bad = d.payload.clone();
    bad[500] ^= 0x80;
    assert!(matches!(
        packet::classify(&bad, l, true),
        Err(PacketRejection::Malformed(PacketError::BodyCrc { .. }))
    ));
    assert!(packet::classify(&bad, l, false).is_ok());
}

#[test]
fn calibration_errors_name_the_line() {
    let bad = std::env::temp_dir().join(format!("lidarxdp_hesai_bad_{}.csv", std::process::id()));
    std::fs::write(&bad, "Channel,Elevation,Azimuth\n1,2,x\n").unwrap();
    let cfg = SensorConfig::new(0, SensorModel::PandarXt16, &bad);
    let e = lidarxdp::calibration::pipeline(&cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
    std::fs::write(&bad, "Channel,Elevation,Azimuth\n1,2,3\n").unwrap();
    let e = lidarxdp::calibration::pipeline(&cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("channel 2 missing"), "{e}");
    let cfg = SensorConfig::new(0, SensorModel::At128, &bad);
    let e = lidarxdp::calibration::pipeline(&cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no EE FF delimiter"), "{e}");
    // A cut outside the field of view is refused.
    let mut cfg = SensorConfig::new(0, SensorModel::PandarXt16, csv("xt16_fov", 16, |_| 0.0));
    cfg.cut_angle = Degrees::new(200.0).unwrap();
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(30.0, 150.0).unwrap()),
        ..Default::default()
    };
    assert!(
        lidarxdp::calibration::pipeline_with_options(&cfg, opts)
            .unwrap_err()
            .to_string()
            .contains("cut_angle = 200 is out of range")
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn pipelines(skip_crc: bool) -> Vec<(&'static Layout, ScanPipeline)> {
        layout::ALL
            .iter()
            .map(|l| {
                let calib = calib_for(l, &format!("prop_{}", l.model.name()));
                let opts = PipelineOptions {
                    hesai_skip_crc: skip_crc,
                    ..Default::default()
                };
                (*l, pipeline(l.model, calib, 0.0, opts))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Arbitrary bytes into every Hesai decoder: no panic, every payload counted once.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1400)) {
            for (_, mut p) in pipelines(false) {
                let mut out = Vec::new();
                p.push(&data, 1, &mut out);
                p.flush(&mut out);
                let c = *p.counters();
                prop_assert_eq!(c.packets, 1);
                prop_assert_eq!(c.accounted(), 1);
            }
        }

        /// Valid packets with random bytes overwritten (CRC check off, so the damaged packets
        /// reach the decoder): no panic, every point finite with azimuth in [0, 2π).
        #[test]
        fn mutated_packets_never_panic(
            edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..40),
            az0 in 0u16..36_000,
            mode in prop::sample::select(vec![0x33u8, 0x37, 0x38, 0x39, 0x3b, 0x3c, 0x3d, 0x3e]),
        ) {
            for (l, mut p) in pipelines(true) {
                let az: Vec<u16> = (0..l.blocks).map(|b| (az0 as usize + 30 * b) as u16 % 36_000).collect();
                let mut pkt = build(l, &az, mode, |b, c| ((b * 131 + c * 17) as u16, c as u8), 1, 0);
                for (i, v) in &edits {
                    let n = pkt.len();
                    pkt[usize::from(*i) % n] = *v;
                }
                let mut out = Vec::new();
                for k in 0..3u64 {
                    p.push(&pkt, k, &mut out);
                }
                p.flush(&mut out);
                for f in &out {
                    for q in f.points.autoware() {
                        prop_assert!(q.x.is_finite() && q.y.is_finite() && q.z.is_finite());
                        prop_assert!((0.0..std::f32::consts::TAU).contains(&q.azimuth));
                    }
                }
            }
        }
    }
}

/// AT128: exact values from a synthetic correction file and packet (fine azimuth, field
/// mapping `(a − start)·2`, channel azimuth, interpolated adjustment, epoch-seconds date).
#[test]
fn at128_exact_values() {
    let l = &layout::AT128;
    let dat = at128_dat("at128", |c| if c == 1 { 25_600 } else { 0 }, 10);
    let mut pkt = build(
        l,
        &[2000, 2010],
        return_mode::STRONGEST,
        |_, c| if c < 2 { (2500, 30) } else { (0, 0) },
        9,
        125_000,
    );
    // Fine azimuth of block 1: 128/256 of 0.01°.
    pkt[l.azimuth_offset(1) + 2] = 128;
    assert_eq!(pkt.len(), 1086);
    assert_eq!(packet::detect_model(&pkt), Some(SensorModel::At128));
    let p = packet::classify(&pkt, l, true).unwrap();
    assert_eq!((p.azimuth_fine(0), p.azimuth_fine(1)), (512_000, 514_688));
    assert_eq!(p.sensor_ns(), DATE_S * 1_000_000_000 + 125_000_000);
    let mut pl = pipeline(SensorModel::At128, dat, 0.0, PipelineOptions::default());
    let mut out = Vec::new();
    pl.push(&pkt, 0, &mut out);
    pl.flush(&mut out);
    let f = &out[0];
    assert_eq!(f.points.len(), 4);
    // Block 0 at 20°: channel 0 at (20°−0)·2 = 40°, elevation 5°.
    let (az, el) = (40f64.to_radians(), 5f64.to_radians());
    let q = f.points.autoware()[0];
    assert!(close(q.azimuth, az) && close(q.elevation, el));
    assert!(close(q.x, 10.0 * el.cos() * az.sin()));
    assert!(close(q.y, 10.0 * el.cos() * az.cos()));
    assert!(close(q.z, 10.0 * el.sin()));
    // Channel 1: −1° channel azimuth, +0.10° adjustment, elevation 4°.
    assert!(close(f.points.autoware()[1].azimuth, 39.1f64.to_radians()));
    assert!(close(f.points.autoware()[1].elevation, 4f64.to_radians()));
    // Block 1 at 20.105°: 40.21°.
    assert!(close(f.points.autoware()[2].azimuth, 40.21f64.to_radians()));
    // Single return: block b fires at −9249 − 41666·(2 − b) ns; channels 0 and 1 at +0.
    assert_eq!(
        f.header.start_ns,
        DATE_S * 1_000_000_000 + 125_000_000 - 92_581
    );
    assert_eq!(
        f.points
            .autoware()
            .iter()
            .map(|q| q.time_stamp)
            .collect::<Vec<_>>(),
        [0, 0, 41_666, 41_666]
    );
    assert_eq!(
        f.points.autoware()[0].return_type,
        ReturnType::Strongest as u8
    );
}

/// AT128 over one encoder turn with Nebula's settings (FoV 30°–150°, cut 150°): one frame per
/// mirror field, each holding the field's sweep 30.0°..150.0° (601 blocks at 0.1° encoder
/// steps = 0.2° spatial), nothing outside the field of view.
#[test]
fn at128_field_of_view_frames() {
    let l = &layout::AT128;
    let dat = at128_dat("at128_fov", |_| 0, 0);
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(30.0, 150.0).unwrap()),
        ..Default::default()
    };
    let mut p = pipeline(SensorModel::At128, dat, 150.0, opts);
    let mut out = Vec::new();
    for i in 0..1800u32 {
        let az = [(20 * i) as u16, (20 * i + 10) as u16];
        let pkt = build(
            l,
            &az,
            return_mode::STRONGEST,
            |_, c| if c == 0 { (2500, 1) } else { (0, 0) },
            i,
            40 * i,
        );
        p.push(&pkt, u64::from(i) * 40_000, &mut out);
    }
    p.flush(&mut out);
    let n: Vec<usize> = out.iter().map(|f| f.points.len()).collect();
    assert_eq!(n, [601, 601, 601]);
    for f in &out {
        let first = f.points.autoware()[0].azimuth;
        let last = f.points.autoware()[600].azimuth;
        assert!(close(first, 30f64.to_radians()) && close(last, 150f64.to_radians()));
    }
}

/// Fault 7 without a timeout: the packets that straddle the cut are lost (UDP sequence jumps
/// by 3); the next frame starts at the first packet after the loss, the loss is counted in the
/// frame that missed them, and no point is duplicated.
#[test]
fn packets_lost_at_the_cut() {
    let mut p = xt16_flat();
    let mut out = Vec::new();
    // Packet i covers 354.00° + 3.20°·i .. +2.80°; i = 2..=4 (360.4°..366.8°) are lost.
    for i in (0..10u32).filter(|i| !(2..=4).contains(i)) {
        let az0 = (35_400 + 320 * i) % 36_000;
        p.push(
            &xt16(az0, 100 + i, 300 * i),
            u64::from(i) * 300_000,
            &mut out,
        );
    }
    assert_eq!(out.len(), 1);
    let f = out[0].clone();
    // Packets 0 and 1 (354.0°..360.0°; a block exactly at the cut ends the frame before it).
    assert_eq!(f.points.len(), 16 * 16);
    // The start-up frame began at 354°, not at the cut: marked not whole. Its head estimate
    // uses the last measured advance, which here spans the 3 lost packets (12.8° per sample):
    // 354° / 12.8° = 27 packets.
    assert_eq!(
        (f.header.packets_received, f.header.packets_expected),
        (2, 2 + 27)
    );
    p.flush(&mut out);
    let g = &out[1];
    // Packet 5 opens the frame: its own time (5·300 µs) and block 0 offset (−344 µs).
    assert_eq!(
        g.header.start_ns,
        DATE_S * 1_000_000_000 + 1_500_000 - 344_000
    );
    assert_eq!(g.header.host_ns, 1_500_000);
    assert_eq!(g.points.autoware()[0].time_stamp, 0);
    // 5 packets received; the 3 lost ones are counted against the frame that got packet 5;
    // flushed at 27.6°, it misses the 104 packets to the next cut as well.
    assert_eq!(
        (g.header.packets_received, g.header.packets_expected),
        (5, 8 + 104)
    );
    assert_eq!(f.points.len() + g.points.len(), 7 * 128);
}
