//! Ouster goldens: every capture in `shared/data/ouster` against ouster-sdk.
//!
//! * The `_digest.json` files hold ouster-sdk's md5 of each decoded field
//!   (`ouster.sdk.core._digest.StreamDigest`): `packet_hash` is, per key, one md5 over all lidar
//!   packets in file order of `packet_header(h)` (a `columns_per_packet` array: TIMESTAMP u64,
//!   ENCODER_COUNT u32, MEASUREMENT_ID u16, STATUS u32, FRAME_ID u16) or `packet_field(f)` (a
//!   `pixels_per_column × columns_per_packet` row-major array in the field's value type);
//!   `scans[i]` hashes the frame built by `FrameBatcher`: `timestamp` (w, u64), `status` (w,
//!   cast to u64), `measurement_id` (w, u16) and each field as an `h × w` image indexed by
//!   measurement_id, zero where no valid column arrived. We rebuild each array from our packet
//!   view and compare every stored hash (ENCODER_COUNT included).
//! * Our decoder's points are then checked per pixel against those verified images: the same
//!   count as non-zero ranges, `distance` = RANGE/1000, `intensity` = REFLECTIVITY, channel =
//!   row, `time_stamp` = column timestamp − frame start.
//! * XYZ: sample pixels and the per-frame sum of x, y, z compared with ouster-sdk 1.0.1's
//!   `XYZLut(meta, use_extrinsics=False)` applied to the frame's RANGE (values printed by the
//!   SDK, asserted within 1 mm per point; sums within 5 cm over ~10^5 points).
//! * os1-64 (fw 1.1x, old-style metadata) has no digest: invariants from its README (3 frames,
//!   224 / 1024 / 352 valid columns, 14 / 64 / 22 of 64 packets).

use std::collections::HashMap;
use std::path::Path;

use lidarxdp::offline::{UdpDatagram, udp_payloads};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::ouster::packet::{ChanField, Packet, field_spec};
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/ouster/");

struct Capture {
    base: String,
    meta: OusterMetadata,
    packets: Vec<UdpDatagram>,
}

fn capture(rel: &str) -> Capture {
    let base = format!("{DIR}{rel}");
    let meta = OusterMetadata::from_bytes(
        &lidarxdp::calibration::read(Path::new(&format!("{base}.json"))).unwrap(),
        Path::new(&format!("{base}.json")),
    )
    .unwrap();
    let len = meta.format.packet_len();
    let packets = udp_payloads(Path::new(&format!("{base}.pcap")))
        .unwrap()
        .map(Result::unwrap)
        .filter(|d| d.dst_port == 7502 && d.payload.len() == len)
        .collect();
    Capture {
        base,
        meta,
        packets,
    }
}

fn cfg(c: &Capture) -> SensorConfig {
    SensorConfig {
        range: RangeGate::from_m(0.0, 1000.0).unwrap(),
        ..SensorConfig::new(2, SensorModel::Ouster, format!("{}.json", c.base))
    }
}

fn decode(c: &Capture) -> Vec<Frame> {
    let mut p =
        lidarxdp::calibration::pipeline_with_options(&cfg(c), PipelineOptions::default()).unwrap();
    let mut out = Vec::new();
    for d in &c.packets {
        p.push(&d.payload, d.ts_ns, &mut out);
    }
    p.flush(&mut out);
    assert_eq!(p.counters().decoded, c.packets.len() as u64);
    out
}

fn le(v: u64, n: usize) -> Vec<u8> {
    v.to_le_bytes()[..n].to_vec()
}

fn header(p: &Packet<&[u8]>, key: &str, col: usize) -> Option<Vec<u8>> {
    Some(match key {
        "TIMESTAMP" => le(p.col_timestamp(col), 8),
        "ENCODER_COUNT" => le(u64::from(p.col_encoder(col)), 4),
        "MEASUREMENT_ID" => le(u64::from(p.col_measurement_id(col)), 2),
        "STATUS" => le(u64::from(p.col_status(col)), 4),
        "FRAME_ID" => le(u64::from(p.col_frame_id(col)), 2),
        _ => return None,
    })
}

fn field_of(name: &str) -> ChanField {
    match name {
        "RANGE" => ChanField::Range,
        "RANGE2" => ChanField::Range2,
        "FLAGS" => ChanField::Flags,
        "FLAGS2" => ChanField::Flags2,
        "REFLECTIVITY" => ChanField::Reflectivity,
        "REFLECTIVITY2" => ChanField::Reflectivity2,
        "SIGNAL" => ChanField::Signal,
        "SIGNAL2" => ChanField::Signal2,
        "NEAR_IR" => ChanField::NearIr,
        "WINDOW" => ChanField::Window,
        other => {
            let n = other.strip_prefix("RAW32_WORD").expect(other);
            ChanField::Raw32Word(n.parse().unwrap())
        }
    }
}

/// Per-frame images as ouster-sdk's FrameBatcher builds them (valid columns only).
struct Images {
    w: usize,
    h: usize,
    timestamp: Vec<u64>,
    status: Vec<u32>,
    mid: Vec<u16>,
    fields: HashMap<String, Vec<u64>>,
}

fn images(c: &Capture, names: &[String]) -> Images {
    let f = c.meta.format;
    let (w, h) = (f.columns_per_frame, f.pixels_per_column);
    let mut im = Images {
        w,
        h,
        timestamp: vec![0; w],
        status: vec![0; w],
        mid: vec![0; w],
        fields: names.iter().map(|n| (n.clone(), vec![0; w * h])).collect(),
    };
    for d in &c.packets {
        let p = Packet::new_checked(&d.payload[..], f).unwrap();
        for col in 0..f.columns_per_packet {
            let st = p.col_status(col);
            if st & 1 == 0 {
                continue;
            }
            let m = usize::from(p.col_measurement_id(col));
            im.timestamp[m] = p.col_timestamp(col);
            im.status[m] = st;
            im.mid[m] = m as u16;
            for (name, img) in &mut im.fields {
                for row in 0..h {
                    img[row * w + m] = p.field(field_of(name), col, row);
                }
            }
        }
    }
    im
}

fn check_digest(rel: &str, frame_id: u16) -> (Capture, Images) {
    let c = capture(rel);
    let digest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{}_digest.json", c.base)).unwrap())
            .unwrap();
    let f = c.meta.format;
    // Packet hashes.
    let ph = digest["packet_hash"].as_object().unwrap();
    assert!(ph.len() >= 10, "{rel}: {} packet hashes", ph.len());
    for (key, want) in ph {
        let mut ctx = md5::Context::new();
        for d in &c.packets {
            let p = Packet::new_checked(&d.payload[..], f).unwrap();
            if header(&p, key, 0).is_some() {
                for col in 0..f.columns_per_packet {
                    ctx.consume(header(&p, key, col).unwrap());
                }
            } else {
                let field = field_of(key);
                let n = field_spec(f.profile, field).unwrap().value_bytes();
                for row in 0..f.pixels_per_column {
                    for col in 0..f.columns_per_packet {
                        ctx.consume(le(p.field(field, col, row), n));
                    }
                }
            }
        }
        assert_eq!(
            format!("{:x}", ctx.finalize()),
            want.as_str().unwrap(),
            "{rel}: packet_hash {key}"
        );
    }
    // Frame hashes.
    let scans = digest["scans"].as_array().unwrap();
    assert_eq!(scans.len(), 1, "{rel}");
    let s = scans[0].as_object().unwrap();
    assert_eq!(s["FRAME_ID"].as_str().unwrap(), frame_id.to_string());
    let names: Vec<String> = s
        .keys()
        .filter(|k| {
            ![
                "FRAME_ID",
                "TIMESTAMP",
                "STATUS",
                "MEASUREMENT_ID",
                "ENCODER_COUNT",
            ]
            .contains(&k.as_str())
        })
        .cloned()
        .collect();
    assert!(names.len() >= 3, "{rel}: {names:?}");
    let im = images(&c, &names);
    let hash = |bytes: Vec<u8>| format!("{:x}", md5::compute(bytes));
    let cat = |v: &mut dyn Iterator<Item = Vec<u8>>| v.flatten().collect::<Vec<u8>>();
    assert_eq!(
        hash(cat(&mut im.timestamp.iter().map(|&t| le(t, 8)))),
        s["TIMESTAMP"].as_str().unwrap()
    );
    assert_eq!(
        hash(cat(&mut im.status.iter().map(|&t| le(u64::from(t), 8)))),
        s["STATUS"].as_str().unwrap()
    );
    assert_eq!(
        hash(cat(&mut im.mid.iter().map(|&t| le(u64::from(t), 2)))),
        s["MEASUREMENT_ID"].as_str().unwrap()
    );
    for name in &names {
        let n = field_spec(f.profile, field_of(name)).unwrap().value_bytes();
        let img = &im.fields[name];
        assert_eq!(
            hash(cat(&mut img.iter().map(|&v| le(v, n)))),
            s[name].as_str().unwrap(),
            "{rel}: frame field {name}"
        );
    }
    assert_eq!(c.meta.format.packet_len(), c.packets[0].payload.len());
    (c, im)
}

/// Checks our decoder's single frame pixel by pixel against the verified images.
fn check_points(c: &Capture, im: &Images, dual: bool) -> Frame {
    let frames = decode(c);
    assert_eq!(frames.len(), 1);
    let fr = frames.into_iter().next().unwrap();
    assert_eq!(
        (fr.header.packets_received, fr.header.packets_expected),
        (64, 64)
    );
    assert_eq!(fr.header.sensor_id, 2);
    let start = *im.timestamp.iter().filter(|&&t| t > 0).min().unwrap();
    assert_eq!(fr.header.start_ns, start);
    assert_eq!(fr.header.host_ns, c.packets[0].ts_ns);
    let col_of: HashMap<u64, usize> = im
        .timestamp
        .iter()
        .enumerate()
        .map(|(m, &t)| (t - start, m))
        .collect();
    let range = &im.fields["RANGE"];
    let refl = &im.fields["REFLECTIVITY"];
    let mut want = range.iter().filter(|&&r| r != 0).count();
    if dual {
        let r2 = &im.fields["RANGE2"];
        want += (0..r2.len())
            .filter(|&i| r2[i] != 0 && r2[i] != range[i])
            .count();
    }
    assert_eq!(fr.points.len(), want);
    let mut last_t = vec![0u32; im.h];
    for p in fr.points.autoware() {
        let m = col_of[&u64::from(p.time_stamp)];
        let row = usize::from(p.channel);
        let i = row * im.w + m;
        let (r, rf) = if p.return_type == 8 {
            (im.fields["RANGE2"][i], im.fields["REFLECTIVITY2"][i])
        } else {
            (range[i], refl[i])
        };
        assert_eq!(p.distance, r as f32 / 1000.0, "row {row} col {m}");
        assert_eq!(u64::from(p.intensity), rf.min(255));
        assert!(p.time_stamp >= last_t[row]);
        last_t[row] = p.time_stamp;
        let expected_type = if !dual {
            3
        } else if im.fields["RANGE2"][i] == range[i] {
            6
        } else if p.return_type == 8 {
            8
        } else {
            3
        };
        assert_eq!(p.return_type, expected_type);
        assert!((0.0..std::f32::consts::TAU).contains(&p.azimuth));
    }
    fr
}

/// `(row, col, x, y, z)` from ouster-sdk 1.0.1 `XYZLut(meta)(frame.field("RANGE"))`, m.
type Sample = (usize, usize, f64, f64, f64);

fn check_xyz(c: &Capture, fr: &Frame, samples: &[Sample], sum: [f64; 3]) {
    let lut = lidarxdp_core::sensor::ouster::lut::XyzLut::new(&c.meta);
    let start = fr.header.start_ns;
    // Column of every point from its time stamp.
    let f = c.meta.format;
    let mut col_at: HashMap<u32, usize> = HashMap::new();
    for d in &c.packets {
        let p = Packet::new_checked(&d.payload[..], f).unwrap();
        for col in 0..f.columns_per_packet {
            col_at.insert(
                (p.col_timestamp(col) - start) as u32,
                usize::from(p.col_measurement_id(col)),
            );
        }
    }
    let mut acc = [0f64; 3];
    let mut found = 0;
    for p in fr.points.autoware().iter().filter(|p| p.return_type != 8) {
        for (a, v) in acc.iter_mut().zip([p.x, p.y, p.z]) {
            *a += f64::from(v);
        }
        let col = col_at[&p.time_stamp];
        let e = lut.get(col, usize::from(p.channel)).unwrap();
        assert_eq!((p.azimuth, p.elevation), (e.azimuth, e.elevation));
        for &(row, scol, x, y, z) in samples {
            if row == usize::from(p.channel) && scol == col {
                found += 1;
                for (got, want) in [(p.x, x), (p.y, y), (p.z, z)] {
                    assert!(
                        (f64::from(got) - want).abs() < 1e-3,
                        "row {row} col {col}: {got} vs {want}"
                    );
                }
            }
        }
    }
    assert_eq!(found, samples.len());
    for (a, s) in acc.iter().zip(sum) {
        assert!((a - s).abs() < 0.05, "sum {a} vs {s}");
    }
}

#[test]
fn os2_128_rng19_matches_sdk_digest_and_xyz() {
    let (c, im) = check_digest("os2-128/OS-2-128-U1_v2.3.0_1024x10", 1259);
    let fr = check_points(&c, &im, false);
    assert_eq!(fr.points.len(), 119_682);
    assert_eq!(fr.header.start_ns, 765_697_049_810);
    check_xyz(&c, &fr, SAMPLES_OS2_128, SUM_OS2_128);
}

#[test]
fn os0_128_rng15_matches_sdk_digest_and_xyz() {
    let (c, im) = check_digest("os0-128/OS-0-128-U1_v2.3.0_1024x10", 1491);
    let fr = check_points(&c, &im, false);
    assert_eq!(fr.points.len(), 97_299);
    assert_eq!(fr.header.start_ns, 1_462_559_461_690);
    check_xyz(&c, &fr, SAMPLES_OS0_128, SUM_OS0_128);
}

#[test]
fn os0_32_dual_matches_sdk_digest_and_xyz() {
    let (c, im) = check_digest("os0-32/OS-0-32-U1_v2.2.0_1024x10", 1453);
    let fr = check_points(&c, &im, true);
    let second = fr
        .points
        .autoware()
        .iter()
        .filter(|p| p.return_type == 8)
        .count();
    let identical = fr
        .points
        .autoware()
        .iter()
        .filter(|p| p.return_type == 6)
        .count();
    assert_eq!((fr.points.len(), second, identical), (21_631 + 172, 172, 0));
    assert_eq!(fr.header.start_ns, 515_816_892_860);
    check_xyz(&c, &fr, SAMPLES_OS0_32, SUM_OS0_32);
}

#[test]
fn os1_32_legacy_matches_sdk_digest_and_xyz() {
    let (c, im) = check_digest("os1-32/OS-1-32-G_v2.1.1_1024x10", 638);
    let fr = check_points(&c, &im, false);
    assert_eq!(fr.points.len(), 27_310);
    assert_eq!(fr.header.start_ns, 3_577_133_606_620);
    check_xyz(&c, &fr, SAMPLES_OS1_32, SUM_OS1_32);
}

#[test]
fn os1_64_legacy_fw1_three_partial_and_complete_frames() {
    let c = capture("os1-64/os1-64_legacy_fw1.1x_3frames");
    assert_eq!(c.packets.len(), 100);
    assert_eq!(c.meta.format.pixels_per_column, 64);
    assert_eq!(c.meta.lidar_origin_to_beam_origin_mm, 12.163);
    let frames = decode(&c);
    let got: Vec<(u64, u32, u32, usize)> = frames
        .iter()
        .map(|f| {
            (
                f.header.sequence,
                f.header.packets_received,
                f.header.packets_expected,
                f.points.len(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 14, 64, 12_783),
            (1, 64, 64, 58_797),
            (2, 22, 64, 20_690)
        ]
    );
    // Valid columns per frame (README: 224 / 1024 / 352), via the distinct time stamps.
    let cols: Vec<usize> = frames
        .iter()
        .map(|f| {
            let mut t: Vec<u32> = f.points.autoware().iter().map(|p| p.time_stamp).collect();
            t.sort_unstable();
            t.dedup();
            t.len()
        })
        .collect();
    assert!(
        cols[0] <= 224 && cols[1] <= 1024 && cols[2] <= 352,
        "{cols:?}"
    );
    assert_eq!(
        frames.iter().map(|f| f.header.start_ns).collect::<Vec<_>>(),
        vec![
            1_561_675_845_250_318_848,
            1_561_675_845_272_136_192,
            1_561_675_845_372_078_080
        ]
    );
    // XYZ of the complete frame against ouster-sdk (default fw 1.1x intrinsics: 12.163 mm
    // beam offset, lidar_to_sensor diag(-1, -1, 1) + 36.18 mm).
    let mut acc = [0f64; 3];
    for p in frames[1].points.autoware() {
        for (a, v) in acc.iter_mut().zip([p.x, p.y, p.z]) {
            *a += f64::from(v);
        }
    }
    let sdk = [-65771.18093467478, 86899.08393871317, 37003.95913473203];
    for (a, s) in acc.iter().zip(sdk) {
        assert!((a - s).abs() < 0.05, "sum {a} vs {s}");
    }
    let lut = lidarxdp_core::sensor::ouster::lut::XyzLut::new(&c.meta);
    for (row, col, x, y, z) in [
        (4, 765, -0.351156, -9.666999, 2.561567),
        (43, 744, 1.296346, -6.364506, -0.636408),
    ] {
        let p = &c.packets[14 + col / 16];
        let pk = Packet::new_checked(&p.payload[..], c.meta.format).unwrap();
        let r = pk.field(ChanField::Range, col % 16, row) as u32;
        let got = lut.point(col, row, r).unwrap();
        for (g, w) in got.iter().zip([x, y, z]) {
            assert!((f64::from(*g) - w).abs() < 1e-3, "{row},{col}: {g} vs {w}");
        }
        assert!(
            frames[1]
                .points
                .autoware()
                .iter()
                .any(|q| q.x == got[0] && q.channel == row as u16)
        );
    }
    for f in &frames {
        for p in f.points.autoware() {
            assert!(p.distance > 0.0 && p.distance < 200.0);
            assert!(p.channel < 64);
            assert!((0.0..std::f32::consts::TAU).contains(&p.azimuth));
            assert!(p.elevation.abs() < 17.0f32.to_radians());
            // A frame lasts 100 ms at 10 Hz.
            assert!(p.time_stamp < 100_000_000);
        }
    }
}

const SAMPLES_OS2_128: &[Sample] = &[
    (0, 0, -49.953052, 1.805008, 9.574794),
    (4, 765, -0.704722, -39.792506, 7.165083),
    (17, 758, 1.846480, -37.407729, 5.273458),
    (30, 751, 0.919754, -7.870548, 0.863671),
    (43, 744, 1.232682, -6.661771, 0.483532),
    (56, 737, 1.184829, -7.634012, 0.234446),
];
const SUM_OS2_128: [f64; 3] = [-50169.85007094444, -96761.72133523099, 70409.94141442368];
const SAMPLES_OS0_128: &[Sample] = &[
    (4, 765, -0.521869, -3.066038, 2.883038),
    (17, 758, 0.010760, -4.161040, 2.697954),
    (30, 751, 1.295715, -8.372397, 3.678169),
    (43, 744, 2.541264, -8.363903, 2.239563),
    (56, 737, 0.362630, -8.385552, 0.748988),
    (69, 730, 0.450599, -2.407549, -0.142935),
];
const SUM_OS0_128: [f64; 3] = [-45145.71728621608, 80345.93970574375, 123035.37147086588];
const SAMPLES_OS0_32: &[Sample] = &[
    (0, 0, -4.311854, -0.217027, 4.161346),
    (30, 751, 0.275974, -1.541281, -1.367403),
];
const SUM_OS0_32: [f64; 3] = [-3881.663000211869, -24364.462795361327, 1579.6522660582793];
const SAMPLES_OS1_32: &[Sample] = &[
    (0, 0, -12.604653, -0.928885, 2.892489),
    (4, 765, 0.297733, -6.870378, 0.445002),
    (17, 758, 0.289281, -7.857446, -0.221389),
    (30, 751, 0.224230, -7.357354, -1.796498),
];
const SUM_OS1_32: [f64; 3] = [27528.300727537724, 24873.942747037698, -1977.3809764689856];
