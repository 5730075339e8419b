//! Issue 39, classes 4 and 5, on the shared captures:
//! * class 5: `--fov 0:360` (Nebula's default `cloud_min_angle` 0, `cloud_max_angle` 360) is the
//!   full circle and `cut 360` is cut 0: every vendor's frames, points and headers equal those
//!   of no field of view and cut 0; the refusals name a valid range that holds;
//! * class 4: a sensor whose own field of view ends short of the host's, with continuous
//!   sequence numbers, has lost nothing. Built from each capture whose packets carry a sequence
//!   counter (Hesai's tail UDP sequence, RoboSense Helios's MSOP packet counter): every packet
//!   with a block azimuth outside [40°, 300°] is dropped and the counters renumbered (tail CRC
//!   recomputed), as a sensor with its own field of view 40°..300° sends; decoded with
//!   `--fov 40:310 --cut-angle 310` every frame is whole, with the points of the clean decode
//!   that those packets fired; then single packets dropped mid-turn are each counted once.

use std::collections::BTreeMap;
use std::path::Path;

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::hesai::crc::crc32_mpeg2;
use lidarxdp_core::sensor::hesai::layout::{self, Layout};
use lidarxdp_core::sensor::hesai::{firing_offset_ns, packet};
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, FovSetting, RangeGate};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// `(payload, host_ns)` of every datagram to `port` in `rel` (under shared/data).
fn capture(rel: &str, port: u16) -> Vec<(Vec<u8>, u64)> {
    let (d, _) = read_udp_datagrams(Path::new(&format!("{DATA}{rel}")), Some(port)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
        .collect()
}

/// Decodes `input` with `cfg`, field of view `fov` and cut angle `cut` (both as the flags read
/// them), then flushes.
fn decode(cfg: &SensorConfig, fov: &str, cut: &str, input: &[(Vec<u8>, u64)]) -> Vec<Frame> {
    let cfg = SensorConfig {
        cut_angle: cut.parse::<Degrees>().unwrap(),
        ..cfg.clone()
    };
    let opts = PipelineOptions {
        fov: (!fov.is_empty())
            .then(|| fov.parse::<FovSetting>().unwrap())
            .and_then(FovSetting::fov),
        ..Default::default()
    };
    let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
    let mut out = Vec::new();
    for (payload, t) in input {
        p.push(payload, *t, &mut out);
    }
    p.flush(&mut out);
    out
}

/// `(payload, host_ns)` of each datagram.
type Input = Vec<(Vec<u8>, u64)>;
/// A reader of a packet's field.
type Field<T> = Box<dyn Fn(&[u8]) -> T>;

/// A vendor's capture and configuration.
fn streams() -> Vec<(&'static str, SensorConfig, Input)> {
    let hesai = |model: SensorModel, dir: &str, csv: &str| {
        (
            model.name(),
            SensorConfig::new(1, model, format!("{DATA}hesai/{dir}/{csv}")),
            capture(&format!("hesai/{dir}/{dir}_nebula.pcap"), 2368),
        )
    };
    let os2 = "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10";
    vec![
        (
            "VLP16 dual",
            SensorConfig::new(
                0,
                SensorModel::Vlp16,
                format!("{DATA}velodyne/vlp16/calibration/VLP16db.yaml"),
            ),
            capture("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", 2368),
        ),
        (
            "VLS128",
            SensorConfig::new(
                0,
                SensorModel::Vls128,
                format!("{DATA}velodyne/vls128/calibration/VLS128_nebula.yaml"),
            ),
            capture("velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap", 2368),
        ),
        hesai(SensorModel::PandarXt32, "pandarxt32", "PandarXT32.csv"),
        hesai(SensorModel::Pandar64, "pandar64", "Pandar64.csv"),
        (
            "OS2-128",
            SensorConfig::new(5, SensorModel::Ouster, format!("{DATA}{os2}.json")),
            capture(&format!("{os2}.pcap"), 7502),
        ),
        helios16p(),
    ]
}

fn helios16p() -> (&'static str, SensorConfig, Input) {
    (
        "Helios16P",
        SensorConfig {
            range: RangeGate::from_m(0.2, 200.0).unwrap(),
            ..SensorConfig::new(
                3,
                SensorModel::Helios16p,
                format!("{DATA}robosense/helios16p/RobosenseHelios16P.csv"),
            )
        },
        capture("robosense/helios16p/helios16p_nebula_pr79.pcap", 6699),
    )
}

/// Class 5: `--fov 0:360` and `--cut-angle 360` decode every capture exactly as no field of
/// view and cut 0 (frames, headers, points).
#[test]
fn full_circle_fov_and_cut_360_are_no_fov_and_cut_0() {
    for (name, cfg, input) in streams() {
        let want = decode(&cfg, "", "0", &input);
        assert!(!want.is_empty(), "{name}");
        for (fov, cut) in [("0:360", "0"), ("", "360"), ("0:360", "360")] {
            let got = decode(&cfg, fov, cut, &input);
            assert_eq!(got, want, "{name} fov {fov:?} cut {cut}");
        }
    }
}

/// Class 5, the flags through the binary: `--fov 0:360 --cut-angle 360` prints the same
/// frames as no flag; equal ends other than the full circle, an end past 360 and a cut
/// outside the field of view are refused naming the flag or field and a valid range that
/// holds.
#[test]
fn full_circle_flags_and_refusals_through_the_binary() {
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("decode")
            .arg(format!("{DATA}hesai/pandarxt32/pandarxt32_nebula.pcap"))
            .args(["--sensor", "pandarxt32", "--json", "--calibration"])
            .arg(format!("{DATA}hesai/pandarxt32/PandarXT32.csv"))
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (ok, plain, _) = run(&[]);
    assert!(ok && plain.lines().count() == 6, "{plain}");
    let (ok, full, _) = run(&["--fov", "0:360", "--cut-angle", "360"]);
    assert!(ok);
    assert_eq!(full, plain);
    let valid = "valid MIN:MAX with MIN and MAX in [0, 360] deg and MAX not equal to MIN modulo \
                 360 at 0.01 deg (MIN > MAX wraps through 0), or 0:360 for the full circle (no \
                 field of view)";
    for (fov, shown) in [("10:10", "10:10"), ("360:0", "360:0"), ("0:0", "0:0")] {
        let (ok, _, err) = run(&["--fov", fov]);
        assert!(!ok);
        assert_eq!(
            err.lines().next().unwrap(),
            format!(
                "error: invalid value '{fov}' for '--fov <MIN:MAX>': {shown} is out of range; \
                 {valid}"
            )
        );
    }
    let (ok, _, err) = run(&["--fov", "10:370"]);
    assert!(!ok);
    assert_eq!(
        err.lines().next().unwrap(),
        "error: invalid value '10:370' for '--fov <MIN:MAX>': 370 is out of range; valid \
         [0, 360] deg"
    );
    let (ok, _, err) = run(&["--fov", "40:310", "--cut-angle", "360"]);
    assert!(!ok);
    assert!(
        err.contains(
            "error: cut_angle = 360 is out of range; valid: (40, 310] deg, inside the field of \
             view (fov = 40:310) and not at its start"
        ),
        "{err}"
    );
    let (ok, _, _) = run(&["--fov", "40:310", "--cut-angle", "310"]);
    assert!(ok);
}

/// Where a capture's packets carry their sequence counter, and how to rewrite it.
struct Numbered {
    name: &'static str,
    cfg: SensorConfig,
    input: Input,
    /// The Hesai layout (the PandarXT32's for RoboSense, unused there).
    layout: &'static Layout,
    /// Raw block azimuths of a packet, 0.01°.
    azimuths: Field<Vec<u32>>,
    /// Writes counter value `seq` into a packet (and its CRC where one covers it).
    set_seq: fn(&'static Layout, &mut [u8], u32),
    /// The counter of a packet.
    seq: Field<u32>,
    /// `(first, last)` firing time of a packet, ns since the epoch; `None` for models the
    /// test does not time (RoboSense).
    firings: Option<Field<(u64, u64)>>,
}

/// The offset of a Hesai packet's UDP sequence (in the tail, or the u32 after it).
fn hesai_seq_offset(l: &Layout, len: usize) -> usize {
    match l.t_udp_seq {
        Some(o) => l.tail_offset() + o,
        None => {
            assert_eq!(len, l.base_len() + 4);
            l.base_len()
        }
    }
}

fn hesai_numbered(model: SensorModel, dir: &str, csv: &str) -> Numbered {
    let l: &'static Layout = layout::layout(model).unwrap();
    Numbered {
        name: model.name(),
        cfg: SensorConfig::new(1, model, format!("{DATA}hesai/{dir}/{csv}")),
        input: capture(&format!("hesai/{dir}/{dir}_nebula.pcap"), 2368),
        layout: l,
        azimuths: Box::new(move |p| {
            (0..l.blocks)
                .map(|b| {
                    let o = l.azimuth_offset(b);
                    u32::from(u16::from_le_bytes([p[o], p[o + 1]]))
                })
                .collect()
        }),
        set_seq: |l, p, seq| {
            let o = hesai_seq_offset(l, p.len());
            p[o..o + 4].copy_from_slice(&seq.to_le_bytes());
            if let Some(c) = l.t_crc {
                let t = l.tail_offset();
                let crc = crc32_mpeg2(&p[t..t + c]);
                p[t + c..t + c + 4].copy_from_slice(&crc.to_le_bytes());
            }
        },
        seq: Box::new(move |p| {
            let o = hesai_seq_offset(l, p.len());
            u32::from_le_bytes(p[o..o + 4].try_into().unwrap())
        }),
        firings: Some(Box::new(move |p| {
            let pk = packet::classify(p, l, true).unwrap();
            let t = pk.sensor_time_ns().unwrap() as i64;
            let offs: Vec<i64> = (0..l.blocks)
                .flat_map(|b| (0..l.channels).map(move |c| (b, c)))
                .filter_map(|(b, c)| firing_offset_ns(&pk, b, c))
                .collect();
            let lo = offs.iter().min().unwrap();
            let hi = offs.iter().max().unwrap();
            ((t + lo) as u64, (t + hi) as u64)
        })),
    }
}

fn numbered() -> Vec<Numbered> {
    let (name, cfg, input) = helios16p();
    let be_az = |p: &[u8]| -> Vec<u32> {
        (0..12)
            .map(|b| {
                u32::from(u16::from_be_bytes([
                    p[42 + 100 * b + 2],
                    p[42 + 100 * b + 3],
                ]))
            })
            .collect()
    };
    vec![
        hesai_numbered(SensorModel::PandarXt32, "pandarxt32", "PandarXT32.csv"),
        // PandarXT32M's capture is not used: its counters jump three times (414, 45 and 396
        // packets missing between bag messages), so renumbering would fake a sensor that skips
        // azimuth mid-turn.
        hesai_numbered(SensorModel::Pandar64, "pandar64", "Pandar64.csv"),
        hesai_numbered(SensorModel::PandarQt64, "pandarqt64", "PandarQT64.csv"),
        hesai_numbered(SensorModel::PandarQt128, "pandarqt128", "PandarQT128.csv"),
        Numbered {
            name,
            cfg,
            input,
            layout: layout::layout(SensorModel::PandarXt32).unwrap(),
            azimuths: Box::new(be_az),
            set_seq: |_, p, seq| p[12..16].copy_from_slice(&seq.to_be_bytes()),
            seq: Box::new(|p| u32::from_be_bytes(p[12..16].try_into().unwrap())),
            firings: None,
        },
    ]
}

/// The packets of `s` whose block azimuths all lie in [40°, 300°], renumbered from the first
/// one's counter on, with their indices in the capture.
fn own_sector(s: &Numbered) -> (Vec<(Vec<u8>, u64)>, Vec<usize>) {
    // The capture itself lost nothing: its counters are continuous.
    let first = (s.seq)(&s.input[0].0);
    for (i, (p, _)) in s.input.iter().enumerate() {
        assert_eq!(
            (s.seq)(p),
            first.wrapping_add(i as u32),
            "{} packet {i}",
            s.name
        );
    }
    let keep: Vec<usize> = (0..s.input.len())
        .filter(|&i| {
            (s.azimuths)(&s.input[i].0)
                .iter()
                .all(|a| (4_000..=30_000).contains(a))
        })
        .collect();
    let first = (s.seq)(&s.input[keep[0]].0);
    let out = keep
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let mut p = s.input[i].clone();
            (s.set_seq)(s.layout, &mut p.0, first.wrapping_add(k as u32));
            p
        })
        .collect();
    (out, keep)
}

fn counts(frames: &[Frame]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .map(|f| (f.header.packets_received, f.header.packets_expected))
        .collect()
}

/// A point with its absolute firing time instead of its time after the frame start.
fn absolute(h: &FrameHeader, p: &PointXYZIRCAEDT) -> (u64, u16, u8, u32, u32, u32, u32, u8) {
    (
        h.start_ns + u64::from(p.time_stamp),
        p.channel,
        p.return_type,
        p.distance.to_bits(),
        p.azimuth.to_bits(),
        p.x.to_bits(),
        p.elevation.to_bits(),
        p.intensity,
    )
}

/// Class 4: a sensor sending only its own sector 40°..300° with continuous counters, decoded
/// with `--fov 40:310 --cut-angle 310`: every frame is whole (`packets_expected ==
/// packets_received`, the first frame's head and the flushed last frame's tail included: the
/// counters show the sector the sensor sends), its points are the clean capture's points fired
/// by those packets (same frames, same firing times); single packets dropped mid-turn are
/// each counted lost exactly once, in their frame.
#[test]
fn a_sensor_sending_its_own_sector_with_continuous_counters_has_lost_nothing() {
    for s in numbered() {
        let (sector, keep) = own_sector(&s);
        let got = decode(&s.cfg, "40:310", "310", &sector);
        assert!(got.len() >= 2, "{}: {} frames", s.name, got.len());
        for (k, f) in got.iter().enumerate() {
            let h = f.header;
            assert_eq!(
                h.packets_expected,
                h.packets_received,
                "{} frame {k}: {:?}",
                s.name,
                counts(&got)
            );
            assert!(h.packets_received > 0 && !f.points.is_empty(), "{}", s.name);
        }
        // The points: those of the clean decode that the kept packets fired.
        if let Some(firings) = &s.firings {
            let clean = decode(&s.cfg, "40:310", "310", &s.input);
            let windows: Vec<(u64, u64)> = keep.iter().map(|&i| firings(&s.input[i].0)).collect();
            assert!(windows.windows(2).all(|w| w[0].1 < w[1].0), "{}", s.name);
            let fired = |t: u64| {
                let i = windows.partition_point(|w| w.0 <= t);
                i > 0 && t <= windows[i - 1].1
            };
            let points = |frames: &[Frame], filter: bool| -> Vec<Vec<_>> {
                frames
                    .iter()
                    .map(|f| {
                        let mut v: Vec<_> = f
                            .points
                            .autoware()
                            .iter()
                            .map(|p| absolute(&f.header, p))
                            .filter(|p| !filter || fired(p.0))
                            .collect();
                        v.sort_unstable();
                        v
                    })
                    .filter(|v| !v.is_empty())
                    .collect()
            };
            let want = points(&clean, true);
            let have = points(&got, false);
            assert_eq!(have.len(), want.len(), "{}", s.name);
            for (k, (h, w)) in have.iter().zip(&want).enumerate() {
                assert!(
                    h == w,
                    "{} frame {k}: {} vs {} points",
                    s.name,
                    h.len(),
                    w.len()
                );
            }
        }
        // Single packets dropped mid-turn: each counted once, in its frame.
        let frame_of: Vec<usize> = {
            let cfg = SensorConfig {
                cut_angle: Degrees::new(310.0).unwrap(),
                ..s.cfg.clone()
            };
            let opts = PipelineOptions {
                fov: "40:310".parse::<FovSetting>().unwrap().fov(),
                ..Default::default()
            };
            let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
            let mut out = Vec::new();
            sector
                .iter()
                .map(|(payload, t)| {
                    p.push(payload, *t, &mut out);
                    out.len()
                })
                .collect()
        };
        let mid = |i: usize| i >= 4 && i + 4 < sector.len() && frame_of[i - 4] == frame_of[i + 4];
        let dropped: Vec<usize> = (0..sector.len())
            .filter(|&i| i % 37 == 11 && mid(i))
            .collect();
        assert!(dropped.len() >= 6, "{}: {dropped:?}", s.name);
        let input: Vec<_> = (0..sector.len())
            .filter(|i| !dropped.contains(i))
            .map(|i| sector[i].clone())
            .collect();
        let lossy = decode(&s.cfg, "40:310", "310", &input);
        assert_eq!(lossy.len(), got.len(), "{}", s.name);
        let mut per_frame: BTreeMap<usize, u32> = BTreeMap::new();
        for &i in &dropped {
            *per_frame.entry(frame_of[i]).or_default() += 1;
        }
        for (k, (l, g)) in lossy.iter().zip(&got).enumerate() {
            let n = per_frame.get(&k).copied().unwrap_or(0);
            assert_eq!(
                (
                    l.header.packets_received,
                    l.header.packets_expected - l.header.packets_received
                ),
                (g.header.packets_received - n, n),
                "{} frame {k}",
                s.name
            );
        }
    }
}
