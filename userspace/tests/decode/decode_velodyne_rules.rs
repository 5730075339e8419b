//! Issue 11, Velodyne: the default (manual) rules on every model, with exact assertions.
//!
//! * `--fov` keeps exactly the points whose corrected azimuth lies in the field of view, for
//!   every model (VLP-16, VLP-32C, HDL-32E, HDL-64E, VLS-128; single and dual return), for
//!   fields of view that do and do not wrap through 0°.
//! * Dual return: every channel's time stamps are non-decreasing inside a frame (default);
//!   `--nebula-compat` keeps Nebula's order (block, firing sequence, laser).
//! * VLS-128 dual-return packets: blocks 0..7 decoded, padding blocks 8..11 ignored in flags,
//!   azimuth, cut and accounting.
//! * Model detection: the calibration's laser count against the product byte and the
//!   configured model.
//! * The range gate `min < d < max` of `SensorConfig::range` on every model.
//!
//! Data: `shared/data/velodyne/` (README of each folder). HDL-32E and HDL-64E streams are built
//! from the VLP-32C capture: product byte 0x21 (HDL-32E); odd blocks flagged `FF DD` (the
//! HDL-64E lower bank) with a 64-laser calibration made of the VLP-32C table twice.

use std::path::{Path, PathBuf};

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::calibration::VelodyneCalibration;
use lidarxdp_core::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp_core::sensor::velodyne::{
    self, DecodedPoint, DecoderSettings, VelodyneFov, Vlp16Decoder,
};
use lidarxdp_core::sensor::{
    ConfigError, DecodeFlavor, PipelineOptions, SensorConfig, SensorModel,
};
use lidarxdp_core::valid::{Fov, RangeGate};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

fn data(rel: &str) -> PathBuf {
    PathBuf::from(format!("{DATA}{rel}"))
}

/// Payloads (with their pcap record times) of a capture.
fn capture(rel: &str) -> Vec<(Vec<u8>, u64)> {
    udp_payloads(&data(rel))
        .unwrap()
        .map(|d| {
            let d = d.unwrap();
            (d.payload, d.ts_ns)
        })
        .collect()
}

/// A 64-laser calibration: the VLP-32C table (lasers 0..31) and again as lasers 32..63.
fn hdl64_calibration() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let c = VelodyneCalibration::from_bytes(
            &lidarxdp::calibration::read(&data("vlp32c/calibration/VLP32_nebula.yaml")).unwrap(),
            32,
            &data("vlp32c/calibration/VLP32_nebula.yaml"),
        )
        .unwrap();
        let mut s = String::from("lasers:\n");
        for i in 0..64 {
            let l = &c.lasers[i % 32];
            s += &format!(
                "- {{laser_id: {i}, rot_correction: {}, vert_correction: {}}}\n",
                l.rot_correction,
                l.vert_correction + if i >= 32 { 0.001 } else { 0.0 }
            );
        }
        s += "num_lasers: 64\ndistance_resolution: 0.004\n";
        let path = std::env::temp_dir().join(format!(
            "lidarxdp_hdl64_from_vlp32c_{}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, s).unwrap();
        path
    })
    .clone()
}

/// The VLP-32C capture as another 32/64-laser model.
fn relabel(model: SensorModel, mut p: Vec<u8>) -> Vec<u8> {
    if p.len() != 1206 {
        return p;
    }
    match model {
        SensorModel::Hdl32e => p[1205] = 0x21,
        SensorModel::Hdl64eS3 => {
            for b in (1..12).step_by(2) {
                p[b * 100 + 1] = 0xDD;
            }
        }
        _ => {}
    }
    p
}

/// VLS-128 dual return built from a single-return packet: firing sequence `s`'s four banks,
/// each twice (last; strongest with raw + 100 on slots k % 3 == 0), then padding blocks
/// 8..11 filled by `pad`, stamp + 55·s µs, return byte 0x39.
fn vls_dual(p: &[u8], s: usize, pad: impl Fn(usize) -> u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(1206);
    for b in 0..4 {
        let last = &p[(4 * s + b) * 100..(4 * s + b + 1) * 100];
        let mut strong = last.to_vec();
        for k in (0..32).step_by(3) {
            let o = 4 + 3 * k;
            let raw = u16::from_le_bytes([strong[o], strong[o + 1]]);
            if raw != 0 {
                strong[o..o + 2].copy_from_slice(&raw.saturating_add(100).to_le_bytes());
            }
        }
        out.extend_from_slice(last);
        out.extend_from_slice(&strong);
    }
    out.extend((800..1200).map(pad));
    let stamp = u32::from_le_bytes([p[1200], p[1201], p[1202], p[1203]]) + 55 * s as u32;
    out.extend_from_slice(&stamp.to_le_bytes());
    out.extend_from_slice(&[0x39, p[1205]]);
    out
}

fn vls_dual_stream(pad: impl Fn(usize) -> u8 + Copy) -> Vec<(Vec<u8>, u64)> {
    capture("vls128/vls128_strongest_nebula_2193pkt.pcap")
        .into_iter()
        .flat_map(|(p, t)| (0..3).map(move |s| (vls_dual(&p, s, pad), t + 55_000 * s as u64)))
        .collect()
}

/// Payloads with their pcap record times, ns.
type Payloads = Vec<(Vec<u8>, u64)>;

/// (model, calibration, payloads) of every stream this file checks.
fn streams() -> Vec<(SensorModel, PathBuf, Payloads)> {
    let vlp32 = || capture("vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap");
    let vlp32_cal = data("vlp32c/calibration/VLP32_nebula.yaml");
    let as_model = |m: SensorModel| {
        vlp32()
            .into_iter()
            .map(|(p, t)| (relabel(m, p), t))
            .collect::<Vec<_>>()
    };
    vec![
        (
            SensorModel::Vlp16,
            data("vlp16/calibration/VLP16db.yaml"),
            capture("vlp16/vlp16_strongest_84pkt.pcap"),
        ),
        (
            SensorModel::Vlp16,
            data("vlp16/calibration/VLP16_nebula.yaml"),
            capture("vlp16/vlp16_dual_nebula_603pkt.pcap"),
        ),
        (SensorModel::Vlp32c, vlp32_cal.clone(), vlp32()),
        (
            SensorModel::Hdl32e,
            vlp32_cal,
            as_model(SensorModel::Hdl32e),
        ),
        (
            SensorModel::Hdl64eS3,
            hdl64_calibration(),
            as_model(SensorModel::Hdl64eS3),
        ),
        (
            SensorModel::Vls128,
            data("vls128/calibration/VLS128_nebula.yaml"),
            capture("vls128/vls128_strongest_nebula_2193pkt.pcap"),
        ),
        (
            SensorModel::Vls128,
            data("vls128/calibration/VLS128_nebula.yaml"),
            vls_dual_stream(|_| 0),
        ),
    ]
}

fn fov_contains(fov: (u32, u32), az: u32) -> bool {
    if fov.0 <= fov.1 {
        (fov.0..=fov.1).contains(&az)
    } else {
        az >= fov.0 || az <= fov.1
    }
}

/// A point's azimuth in 0.01° (the field is `cdeg · π/18000` rounded to f32).
fn cdeg(p: &PointXYZIRCAEDT) -> u32 {
    (f64::from(p.azimuth).to_degrees() * 100.0).round() as u32 % 36_000
}

fn decode_all(
    model: SensorModel,
    calib: &VelodyneCalibration,
    payloads: &[(Vec<u8>, u64)],
    fov: Option<VelodyneFov>,
    flavor: DecodeFlavor,
) -> Vec<DecodedPoint> {
    let settings = DecoderSettings {
        min_range_m: 0.3,
        max_range_m: 300.0,
        fov,
        flavor,
    };
    let mut out = Vec::new();
    match model {
        SensorModel::Vlp16 => {
            let d = Vlp16Decoder::new(calib.clone(), settings);
            for (p, _) in payloads {
                if let Ok(pk) = velodyne::classify(p) {
                    d.decode(&pk, |x| out.push(x));
                }
            }
        }
        m => {
            let mut d = MultiDecoder::new(m, calib, settings);
            d.set_packet_advance_cdeg(20);
            for (p, _) in payloads {
                if let Ok(pk) = multi::classify_model(m, p) {
                    d.decode(&pk, |x| out.push(x));
                }
            }
        }
    }
    out
}

fn bits(p: &PointXYZIRCAEDT) -> Vec<u8> {
    bytemuck::bytes_of(p).to_vec()
}

/// Fields of view (0.01°): plain, wrapping through 0°, narrow across 0°, a sliver.
const FOVS: [(u32, u32); 4] = [(1000, 10000), (27000, 9000), (35050, 2025), (18000, 18100)];

#[test]
fn fov_keeps_exactly_the_points_inside_on_every_model() {
    for (model, cal, payloads) in streams() {
        let calib = VelodyneCalibration::from_bytes(
            &lidarxdp::calibration::read(&cal).unwrap(),
            multi::laser_count(model),
            &cal,
        )
        .unwrap();
        let all = decode_all(model, &calib, &payloads, None, DecodeFlavor::Manual);
        assert!(all.len() > 10_000, "{model}: {} points", all.len());
        for fov in FOVS {
            let what = format!("{model} {cal:?} fov {fov:?}");
            let kept = decode_all(
                model,
                &calib,
                &payloads,
                Some(VelodyneFov::from(
                    Fov::from_deg(f64::from(fov.0) / 100.0, f64::from(fov.1) / 100.0).unwrap(),
                )),
                DecodeFlavor::Manual,
            );
            // Every kept point is inside, on its corrected azimuth (both representations).
            for d in &kept {
                assert!(
                    fov_contains(fov, u32::from(d.azimuth_cdeg)),
                    "{what}: {d:?}"
                );
                assert!(fov_contains(fov, cdeg(&d.point)), "{what}: {d:?}");
            }
            // And every point inside is kept: the unfiltered decode, filtered here, in order.
            let want: Vec<Vec<u8>> = all
                .iter()
                .filter(|d| fov_contains(fov, u32::from(d.azimuth_cdeg)))
                .map(|d| bits(&d.point))
                .collect();
            let got: Vec<Vec<u8>> = kept.iter().map(|d| bits(&d.point)).collect();
            assert_eq!(got.len(), want.len(), "{what}");
            assert!(got == want, "{what}: kept points differ");
            assert!(
                !got.is_empty() || fov == (18000, 18100),
                "{what}: nothing kept"
            );
        }
    }
}

/// Pipeline level: with `--fov`, no frame carries a point outside it (default rules).
#[test]
fn fov_pipeline_frames_hold_only_points_inside() {
    for (model, cal, payloads) in streams() {
        for fov in [(270.0, 90.0), (10.0, 100.0)] {
            let frames = pipeline_frames(model, &cal, &payloads, Some(fov), DecodeFlavor::Manual);
            let pts: usize = frames.iter().map(|f| f.points.len()).sum();
            assert!(pts > 0, "{model} {fov:?}");
            let fc = ((fov.0 * 100.0) as u32, (fov.1 * 100.0) as u32);
            for f in &frames {
                for p in f.points.autoware() {
                    assert!(fov_contains(fc, cdeg(p)), "{model} {fov:?}: {p:?}");
                }
            }
        }
    }
}

fn pipeline_frames(
    model: SensorModel,
    cal: &Path,
    payloads: &[(Vec<u8>, u64)],
    fov: Option<(f64, f64)>,
    flavor: DecodeFlavor,
) -> Vec<Frame> {
    let cfg = SensorConfig::new(0, model, cal);
    let opts = PipelineOptions {
        flavor,
        fov: fov.map(|(a, b)| Fov::from_deg(a, b).unwrap()),
        ..Default::default()
    };
    let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
    let mut out = Vec::new();
    for (payload, t) in payloads {
        p.push(payload, *t, &mut out);
    }
    p.flush(&mut out);
    out
}

/// Fault class 5: in dual return, every channel's time stamps are non-decreasing inside a
/// frame under the default rules (VLP-16, whose blocks hold two firing sequences, VLP-32C
/// and VLS-128 dual streams).
#[test]
fn dual_return_channel_time_stamps_never_decrease() {
    let vlp32_dual: Vec<(Vec<u8>, u64)> =
        capture("vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap")
            .into_iter()
            .map(|(mut p, t)| {
                // Dual: blocks 2p+1 repeat block 2p's azimuth (slots keep their own ranges).
                if p.len() == 1206 {
                    for b in (1..12).step_by(2) {
                        let (a, z) = (p[(b - 1) * 100 + 2], p[(b - 1) * 100 + 3]);
                        p[b * 100 + 2] = a;
                        p[b * 100 + 3] = z;
                    }
                    p[1204] = 0x39;
                }
                (p, t)
            })
            .collect();
    let cases = [
        (
            SensorModel::Vlp16,
            data("vlp16/calibration/VLP16_nebula.yaml"),
            capture("vlp16/vlp16_dual_nebula_603pkt.pcap"),
        ),
        (
            SensorModel::Vlp32c,
            data("vlp32c/calibration/VLP32_nebula.yaml"),
            vlp32_dual,
        ),
        (
            SensorModel::Vls128,
            data("vls128/calibration/VLS128_nebula.yaml"),
            vls_dual_stream(|_| 0),
        ),
    ];
    for (model, cal, payloads) in cases {
        let frames = pipeline_frames(model, &cal, &payloads, None, DecodeFlavor::Manual);
        let mut checked = 0usize;
        let mut dual_pairs = 0usize;
        for f in &frames {
            let mut last = std::collections::HashMap::<u16, u32>::new();
            for p in f.points.autoware() {
                if let Some(&t) = last.get(&p.channel) {
                    assert!(
                        p.time_stamp >= t,
                        "{model} frame {}: channel {} at {} after {t}",
                        f.header.sequence,
                        p.channel,
                        p.time_stamp
                    );
                    dual_pairs += usize::from(p.time_stamp == t);
                }
                last.insert(p.channel, p.time_stamp);
                checked += 1;
            }
        }
        assert!(checked > 50_000, "{model}: {checked} points");
        // Both returns of a firing share its time: equal neighbours exist.
        assert!(dual_pairs > 500, "{model}: {dual_pairs} equal pairs");
    }
    // Nebula's order (block, firing sequence, laser) is kept under --nebula-compat: on the
    // VLP-16 dual capture a channel's second-return point of a pair's first sequence follows
    // its first-return point of the second sequence, 55.296 µs earlier.
    let frames = pipeline_frames(
        SensorModel::Vlp16,
        &data("vlp16/calibration/VLP16_nebula.yaml"),
        &capture("vlp16/vlp16_dual_nebula_603pkt.pcap"),
        None,
        DecodeFlavor::Nebula,
    );
    let steps_back = frames
        .iter()
        .flat_map(|f| {
            let mut last = std::collections::HashMap::<u16, u32>::new();
            f.points
                .autoware()
                .iter()
                .filter(|p| {
                    let back = last.get(&p.channel).is_some_and(|&t| p.time_stamp < t);
                    last.insert(p.channel, p.time_stamp);
                    back
                })
                .map(|p| p.time_stamp)
                .collect::<Vec<_>>()
        })
        .count();
    assert_eq!(steps_back, 359);
}

/// Fault class 7: a VLS-128 dual-return packet is blocks 0..7; padding blocks 8..11 (here
/// garbage: flag 0x1234, azimuth 65535, every distance set) change nothing: same points,
/// frames, counters; no packet malformed; every frame of a whole turn complete.
#[test]
fn vls128_dual_padding_blocks_are_ignored() {
    let model = SensorModel::Vls128;
    let cal = data("vls128/calibration/VLS128_nebula.yaml");
    let clean = vls_dual_stream(|_| 0);
    let garbage = vls_dual_stream(|i| match i % 100 {
        0 => 0x12,
        1 => 0x34,
        _ => 0xFF,
    });
    assert_eq!(clean.len(), 3 * 2193);
    let run = |payloads: &[(Vec<u8>, u64)], flavor: DecodeFlavor| {
        let cfg = SensorConfig::new(0, model, &cal);
        let opts = PipelineOptions {
            flavor,
            ..Default::default()
        };
        let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
        let mut out = Vec::new();
        for (payload, t) in payloads {
            p.push(payload, *t, &mut out);
        }
        p.flush(&mut out);
        (out, *p.counters())
    };
    // Padding is never read, under either rule set.
    let (n_clean, _) = run(&clean, DecodeFlavor::Nebula);
    let (n_garbage, _) = run(&garbage, DecodeFlavor::Nebula);
    assert!(n_clean == n_garbage, "--nebula-compat reads the padding");
    let (a, ca) = run(&clean, DecodeFlavor::Manual);
    let (b, cb) = run(&garbage, DecodeFlavor::Manual);
    assert_eq!(ca, cb);
    assert_eq!((ca.decoded, ca.malformed, ca.ignored), (6579, 0, 0));
    assert_eq!(a, b);
    // Blocks 0..7 decoded: the points of each packet are its 8 blocks' returns.
    let calib =
        VelodyneCalibration::from_bytes(&lidarxdp::calibration::read(&cal).unwrap(), 128, &cal)
            .unwrap();
    let single = decode_all(
        model,
        &calib,
        &capture("vls128/vls128_strongest_nebula_2193pkt.pcap"),
        None,
        DecodeFlavor::Manual,
    );
    let dual = decode_all(model, &calib, &clean, None, DecodeFlavor::Manual);
    // Every single-return point appears once (last return or identical), plus one strongest
    // point for each return moved by +100 counts on slots k % 3 == 0 that stays in range.
    let moved = single.iter().filter(|d| d.slot % 32 % 3 == 0).count();
    assert!(dual.len() >= single.len() && dual.len() <= single.len() + moved);
    assert!(dual.len() > single.len() + moved * 9 / 10, "{}", dual.len());
    assert!(dual.iter().all(|d| d.block < 8));
    // Cut and accounting: 2193 · 3 packets over ~3.6 turns; the whole turns in the middle
    // are complete (received = expected, nothing lost).
    assert!(a.len() >= 3, "{} frames", a.len());
    for f in &a[1..a.len() - 1] {
        let h = &f.header;
        assert_eq!(h.packets_received, h.packets_expected, "{h:?}");
        assert_eq!((h.packets_malformed, h.frames_lost_before), (0, 0), "{h:?}");
        // ~10 Hz: about 1,800 one-sequence packets per turn.
        assert!((1_700..1_900).contains(&h.packets_received), "{h:?}");
    }
}

/// Fault class 8: the calibration's laser count decides between the product byte and the
/// configured model.
#[test]
fn model_detection_uses_the_calibration_laser_count() {
    use lidarxdp::calibration::confirm_detected_model;
    use lidarxdp_core::sensor::velodyne::calibration_laser_count;
    let vlp16 = data("vlp16/calibration/VLP16db.yaml");
    let vlp32 = data("vlp32c/calibration/VLP32_nebula.yaml");
    let vls = data("vls128/calibration/VLS128_nebula.yaml");
    assert_eq!(
        calibration_laser_count(&lidarxdp::calibration::read(&vlp16).unwrap(), &vlp16, 32).unwrap(),
        16
    );
    assert_eq!(
        calibration_laser_count(&lidarxdp::calibration::read(&vlp32).unwrap(), &vlp32, 16).unwrap(),
        32
    );
    assert_eq!(
        calibration_laser_count(&lidarxdp::calibration::read(&vls).unwrap(), &vls, 16).unwrap(),
        128
    );
    assert_eq!(
        calibration_laser_count(
            &lidarxdp::calibration::read(&hdl64_calibration()).unwrap(),
            &hdl64_calibration(),
            16
        )
        .unwrap(),
        64
    );
    // The product byte says HDL-32E (0x21) but the calibration has 16 lasers: a VLP-16, with
    // a warning naming both.
    let (m, w) = confirm_detected_model(SensorModel::Hdl32e, &vlp16).unwrap();
    assert_eq!(m, SensorModel::Vlp16);
    let w = w.unwrap();
    assert!(
        w.contains("HDL32E") && w.contains("16 lasers") && w.contains("VLP16"),
        "{w}"
    );
    // Agreement: no warning.
    assert_eq!(
        confirm_detected_model(SensorModel::Vlp32c, &vlp32).unwrap(),
        (SensorModel::Vlp32c, None)
    );
    assert_eq!(
        confirm_detected_model(SensorModel::Hdl32e, &vlp32).unwrap(),
        (SensorModel::Hdl32e, None)
    );
    // 128 lasers: only the VLS-128.
    assert_eq!(
        confirm_detected_model(SensorModel::Vlp16, &vls).unwrap().0,
        SensorModel::Vls128
    );
    // 32 lasers while the packets say VLP-16: VLP-32C or HDL-32E, ambiguous: refused.
    let e = confirm_detected_model(SensorModel::Vlp16, &vlp32)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("num_lasers = 32") && e.contains("VLP32C or HDL32E") && e.contains("--sensor"),
        "{e}"
    );
    // Non-Velodyne models are not looked at.
    assert_eq!(
        confirm_detected_model(SensorModel::Pandar64, Path::new("/nonexistent")).unwrap(),
        (SensorModel::Pandar64, None)
    );
    // A calibration that contradicts the configured model is refused, naming the field.
    for (model, cal, field) in [
        (SensorModel::Vlp16, &vlp32, "num_lasers"),
        (SensorModel::Hdl32e, &vlp16, "num_lasers"),
        (SensorModel::Vls128, &vlp32, "num_lasers"),
    ] {
        let e = lidarxdp::calibration::pipeline(&SensorConfig::new(0, model, cal)).unwrap_err();
        assert!(matches!(e, ConfigError::OutOfRange { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with(field) && e.contains("laser"), "{model}: {e}");
    }
    // The VLP-16 whose firmware says HDL-32E, configured as a VLP-16 with its 16-laser
    // calibration: decoded as a VLP-16, every data packet counted as a mismatch.
    let mut p =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Vlp16, &vlp16)).unwrap();
    let mut out = Vec::new();
    for (payload, t) in capture("vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap") {
        p.push(&payload, t, &mut out);
    }
    let c = p.counters();
    // The 16 position packets are read for their PPS state, not decoded (`auxiliary`).
    assert_eq!(
        (c.decoded, c.ignored, c.auxiliary, c.product_mismatches),
        (84, 0, 16, 84)
    );
    // The same stream with the right product byte counts none.
    let mut p =
        lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Vlp16, &vlp16)).unwrap();
    for (payload, t) in capture("vlp16/vlp16_strongest_84pkt.pcap") {
        p.push(&payload, t, &mut out);
    }
    assert_eq!(
        (p.counters().decoded, p.counters().product_mismatches),
        (84, 0)
    );
}

/// `decode` without `--sensor` on the VLP-16 capture that says HDL-32E: decoded as a VLP-16
/// with a warning; with a 32-laser calibration the HDL-32E claim and the calibration agree.
/// A 32-laser calibration for a capture that says VLP-16 stops with an error.
#[test]
fn decode_cli_autodetect_checks_the_calibration() {
    let run = |pcap: &str, cal: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("decode")
            .arg(data(pcap))
            .arg("--calibration")
            .arg(data(cal))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(
        "vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
        "vlp16/calibration/VLP16db.yaml",
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("names HDL32E (32 lasers)") && stderr.contains("decoding as VLP16"),
        "{stderr}"
    );
    assert!(stdout.starts_with("frame seq="), "{stdout}");
    let (ok, _, stderr) = run(
        "vlp16/vlp16_strongest_84pkt.pcap",
        "vlp32c/calibration/VLP32_nebula.yaml",
    );
    assert!(!ok);
    assert!(
        stderr.contains("num_lasers = 32") && stderr.contains("VLP32C or HDL32E"),
        "{stderr}"
    );
}

/// `decode --nebula-compat` selects Nebula's rules: on the 0x21 VLP-16 capture the frame at
/// the cut splits as Nebula's last-block rule puts it (`tests/decode/decode_vlp16_strongest.rs`).
#[test]
fn decode_cli_nebula_compat_flag() {
    let points = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("decode")
            .arg(data(
                "vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
            ))
            .args(["--sensor", "VLP16", "--calibration"])
            .arg(data("vlp16/calibration/VLP16db.yaml"))
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(" points=").nth(1)?.split(' ').next()?.parse().ok())
            .collect::<Vec<usize>>()
    };
    // Two returns beyond the VLP-16 datasheet maximum (100 m) are dropped in the second frame.
    assert_eq!(points(&[]), [5_599, 13_978]);
    assert_eq!(points(&["--nebula-compat"]), [5_602, 13_975]);
}

/// The range gate `min < d < max` of `SensorConfig::range` (exclusive, on the corrected range) holds
/// on every model, for a gate narrower than the defaults.
#[test]
fn range_gate_is_honoured_by_every_model() {
    for (model, cal, payloads) in streams() {
        let mut cfg = SensorConfig::new(0, model, &cal);
        cfg.range = RangeGate::from_m(2.5, 12.0).unwrap();
        let mut p = lidarxdp::calibration::pipeline(&cfg).unwrap();
        let mut out = Vec::new();
        for (payload, t) in &payloads {
            p.push(payload, *t, &mut out);
        }
        p.flush(&mut out);
        let pts: Vec<&PointXYZIRCAEDT> = out.iter().flat_map(|f| f.points.autoware()).collect();
        assert!(pts.len() > 1_000, "{model}");
        for q in pts {
            assert!(q.distance > 2.5 && q.distance < 12.0, "{model}: {q:?}");
        }
    }
}

/// Every data packet of every stream is a valid packet of its model (the synthetic
/// HDL-32E/HDL-64E/VLS-128 dual streams included).
#[test]
fn every_stream_classifies() {
    for (model, _, payloads) in streams() {
        let n = payloads
            .iter()
            .filter(|(p, _)| match model {
                SensorModel::Vlp16 => velodyne::classify(p).is_ok(),
                m => multi::classify_model(m, p).is_ok(),
            })
            .count();
        let data = payloads.iter().filter(|(p, _)| p.len() == 1206).count();
        assert_eq!(n, data, "{model}");
    }
}

/// Fault class 8, packet rate: a stream whose packet spacing is foreign to the configured
/// model is counted and logged (a VLP-16 decoded as an HDL-32E with a 32-laser calibration);
/// every shared capture decoded as its own model counts none.
#[test]
fn packet_rate_foreign_to_the_model_is_counted() {
    use lidarxdp_core::sensor::VendorDecoder;
    use lidarxdp_core::sensor::velodyne::VelodyneStream;
    let count = |model: SensorModel, cal: &Path, payloads: &[(Vec<u8>, u64)]| {
        let cfg = SensorConfig::new(0, model, cal);
        let mut s = VelodyneStream::new(
            &cfg,
            &lidarxdp::calibration::read(&cfg.calibration).unwrap(),
            PipelineOptions::default(),
        )
        .unwrap();
        let mut out = Vec::new();
        let mut decoded = 0;
        for (p, t) in payloads {
            decoded += usize::from(s.push(p, HostTime::both(*t), &mut out).is_ok());
        }
        (decoded, s.rate_mismatches())
    };
    let vlp32_cal = data("vlp32c/calibration/VLP32_nebula.yaml");
    // The 0x21 VLP-16 capture as an HDL-32E: 1327 µs spacing against HDL-32E's 553 µs.
    assert_eq!(
        count(
            SensorModel::Hdl32e,
            &vlp32_cal,
            &capture("vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap")
        ),
        (84, 83)
    );
    // Every stream as its own model: none (HDL-32E/HDL-64E built from the VLP-32C capture
    // keep the VLP-32C's 663.5 µs spacing: the HDL-32E one is flagged, HDL-64E not checked).
    for (model, cal, payloads) in streams() {
        let (decoded, mismatches) = count(model, &cal, &payloads);
        assert!(decoded > 80, "{model}");
        if model == SensorModel::Hdl32e {
            assert!(mismatches > 300, "{mismatches}");
        } else {
            assert_eq!(mismatches, 0, "{model} {cal:?}");
        }
    }
}
