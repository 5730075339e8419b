//! The ouster-ros layouts (`ouster`, `ouster_xyzir`) of every capture in `shared/data/ouster`,
//! decoded beside the default `autoware` layout:
//!
//! * the same frames (count and headers) and the same points in the same order: x, y, z bit
//!   for bit, `ring` = `channel`, `t` = `time_stamp` (`ouster`), `range` (mm) = the pixel's
//!   range = `(distance * 1000).round()`;
//! * `intensity` = SIGNAL, `reflectivity` = REFLECTIVITY, `ambient` = NEAR_IR of the point's
//!   own pixel and return (SIGNAL2 / REFLECTIVITY2 / RANGE2 for a dual profile's second
//!   return), checked against [`Pixels`], a reader of the packets written here from Ouster's
//!   "Lidar Data Packet Format" and ouster-sdk 1.0.1's field tables
//!   (`ouster_core/src/parsing.cpp`), which shares no code with the decoder;
//! * for the captures with an ouster-sdk digest (`*_digest.json`, see
//!   `decode_ouster_golden.rs`), the frame's images rebuilt from our points (every pixel with a
//!   point takes the point's values; the others, range 0 or an identical second return, the
//!   reader's) hash to ouster-sdk's md5 of SIGNAL, SIGNAL2, NEAR_IR, REFLECTIVITY,
//!   REFLECTIVITY2, RANGE and RANGE2.
//!
//! ouster-ros fills `intensity` with SIGNAL (0 for RNG15_RFL8_NIR8, which has none),
//! `ambient` with NEAR_IR and `reflectivity` with REFLECTIVITY as ouster-sdk decodes them
//! (`src/point_transform.h`, `include/ouster_ros/sensor_point_types.h`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lidarxdp::offline::{decode_pcap, udp_payloads};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::layout::{OusterPoint, OusterXYZIR, PointType};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/ouster/");

/// Every capture: the path of its metadata JSON without `.json` (a `.pcap` beside it).
fn captures() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(DIR).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            let name = f.to_str().unwrap();
            if let Some(base) = name.strip_suffix(".json")
                && !base.ends_with("_digest")
                && Path::new(&format!("{base}.pcap")).exists()
            {
                out.push(PathBuf::from(base));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 5, "{out:?}");
    out
}

fn decode(base: &Path, point_type: PointType) -> Vec<Frame> {
    let b = base.to_str().unwrap();
    let cfg = SensorConfig {
        range: RangeGate::from_m(0.0, 1000.0).unwrap(),
        point_type,
        ..SensorConfig::new(2, SensorModel::Ouster, format!("{b}.json"))
    };
    let (frames, counters) =
        decode_pcap(Path::new(&format!("{b}.pcap")), &cfg, Some(7502)).unwrap();
    assert!(counters.decoded > 0, "{b}");
    frames
}

/// One return of a pixel as ouster-sdk 1.0.1 decodes it: RANGE (mm), SIGNAL, REFLECTIVITY,
/// NEAR_IR (the second return: RANGE2, SIGNAL2, REFLECTIVITY2, the shared NEAR_IR).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ret {
    range: u32,
    signal: u16,
    refl: u8,
    nir: u16,
}

/// The pixels of every valid column of a capture, by column time stamp (ns): the column's
/// measurement_id and per row its first and second return (the second all 0 in the
/// single-return profiles).
struct Pixels {
    /// `udp_profile_lidar`.
    profile: String,
    h: usize,
    w: usize,
    cols: HashMap<u64, (usize, Vec<[Ret; 2]>)>,
}

fn le(b: &[u8], o: usize, n: usize) -> u64 {
    b[o..o + n]
        .iter()
        .rev()
        .fold(0, |v, &x| (v << 8) | u64::from(x))
}

impl Pixels {
    /// Reads the capture's lidar packets with the geometry of its metadata (fw 2.x+
    /// `data_format` / `lidar_data_format`; fw 1.1x metadata has none: LEGACY, 16 columns
    /// per packet, one row per beam angle).
    fn read(base: &Path) -> Pixels {
        let b = base.to_str().unwrap();
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{b}.json")).unwrap()).unwrap();
        let fmt = meta
            .get("lidar_data_format")
            .or_else(|| meta.get("data_format"));
        let get = |k: &str| fmt.and_then(|f| f.get(k));
        let profile = get("udp_profile_lidar")
            .and_then(|v| v.as_str())
            .unwrap_or("LEGACY")
            .to_owned();
        let h = get("pixels_per_column")
            .and_then(|v| v.as_u64())
            .map_or_else(
                || meta["beam_altitude_angles"].as_array().unwrap().len(),
                |v| v as usize,
            );
        let cpp = get("columns_per_packet")
            .and_then(|v| v.as_u64())
            .unwrap_or(16) as usize;
        let w = get("columns_per_frame")
            .and_then(|v| v.as_u64())
            .unwrap_or(1024) as usize;
        let legacy = profile == "LEGACY";
        // Packet header, column header, pixel, column footer sizes (bytes).
        let (ph, ch, cf) = if legacy { (0, 16, 4) } else { (32, 12, 0) };
        let pb = match profile.as_str() {
            "LEGACY" | "RNG19_RFL8_SIG16_NIR16" => 12,
            "RNG19_RFL8_SIG16_NIR16_DUAL" => 16,
            "RNG15_RFL8_NIR8" => 4,
            "FIVE_WORD_PIXEL" => 20,
            other => panic!("{b}: profile {other}"),
        };
        let col_len = ch + h * pb + cf;
        let len = 2 * ph + cpp * col_len;
        let mut cols = HashMap::new();
        for d in udp_payloads(Path::new(&format!("{b}.pcap"))).unwrap() {
            let d = d.unwrap();
            if d.dst_port != 7502 || d.payload.len() != len {
                continue;
            }
            let p = &d.payload[..];
            for c in 0..cpp {
                let o = ph + c * col_len;
                let status = if legacy {
                    le(p, o + col_len - 4, 4)
                } else {
                    le(p, o + 10, 2)
                };
                if status & 1 == 0 {
                    continue;
                }
                let ts = le(p, o, 8);
                let m = le(p, o + 8, 2) as usize;
                let rows = (0..h)
                    .map(|r| {
                        let x = &p[o + ch + r * pb..][..pb];
                        let u16_at = |i: usize| le(x, i, 2) as u16;
                        let word = |i: usize| le(x, 4 * i, 4) as u32;
                        match profile.as_str() {
                            "LEGACY" | "RNG19_RFL8_SIG16_NIR16" => {
                                let mask = if legacy { 0xF_FFFF } else { 0x7_FFFF };
                                let r = Ret {
                                    range: word(0) & mask,
                                    refl: x[4],
                                    signal: u16_at(6),
                                    nir: u16_at(8),
                                };
                                [r, Ret::default()]
                            }
                            "RNG15_RFL8_NIR8" => {
                                let r = Ret {
                                    range: (u32::from(u16_at(0)) & 0x7FFF) * 8,
                                    refl: x[2],
                                    signal: 0,
                                    nir: u16::from(x[3]) * 16,
                                };
                                [r, Ret::default()]
                            }
                            _ => {
                                let nir = u16_at(12);
                                [
                                    Ret {
                                        range: word(0) & 0x7_FFFF,
                                        refl: x[3],
                                        signal: u16_at(8),
                                        nir,
                                    },
                                    Ret {
                                        range: word(1) & 0x7_FFFF,
                                        refl: x[7],
                                        signal: u16_at(10),
                                        nir,
                                    },
                                ]
                            }
                        }
                    })
                    .collect();
                cols.insert(ts, (m, rows));
            }
        }
        Pixels {
            profile,
            h,
            w,
            cols,
        }
    }
}

/// The return a point stands for: the second iff `return_type` is 8 (second strongest).
fn ret(p: &PointXYZIRCAEDT) -> usize {
    usize::from(p.return_type == 8)
}

#[test]
fn ouster_layouts_carry_each_pixels_channels() {
    for base in captures() {
        let name = base.file_name().unwrap().to_str().unwrap().to_owned();
        let px = Pixels::read(&base);
        let auto = decode(&base, PointType::Autoware);
        let ouster = decode(&base, PointType::Ouster);
        let xyzir = decode(&base, PointType::OusterXyzir);
        assert!(!auto.is_empty(), "{name}");
        assert_eq!(auto.len(), ouster.len(), "{name}");
        assert_eq!(auto.len(), xyzir.len(), "{name}");
        let mut checked = 0usize;
        let mut seconds = 0usize;
        let mut signal_nonzero = 0usize;
        for ((a, o), x) in auto.iter().zip(&ouster).zip(&xyzir) {
            assert_eq!(a.header, o.header, "{name}");
            assert_eq!(a.header, x.header, "{name}");
            assert_eq!(o.points.point_type(), PointType::Ouster);
            assert_eq!(x.points.point_type(), PointType::OusterXyzir);
            let (a, o, x) = (
                a.points.autoware(),
                o.points.typed::<OusterPoint>().unwrap(),
                x.points.typed::<OusterXYZIR>().unwrap(),
            );
            assert_eq!(a.len(), o.len(), "{name}");
            assert_eq!(a.len(), x.len(), "{name}");
            for ((p, q), r) in a.iter().zip(o).zip(x) {
                let bits = |v: [f32; 3]| v.map(f32::to_bits);
                assert_eq!(bits([q.x, q.y, q.z]), bits([p.x, p.y, p.z]), "{name}");
                assert_eq!(bits([r.x, r.y, r.z]), bits([p.x, p.y, p.z]), "{name}");
                let (t, ring, range) = (q.t, q.ring, q.range);
                assert_eq!((t, ring, r.ring), (p.time_stamp, p.channel, p.channel));
                assert_eq!(range, (f64::from(p.distance) * 1000.0).round() as u32);
            }
        }
        // Channels against the packets, per point.
        for (a, o) in auto.iter().zip(&ouster) {
            let start = a.header.start_ns;
            let q = o.points.typed::<OusterPoint>().unwrap();
            let x = xyzir_of(&xyzir, a.header.sequence);
            for (k, p) in a.points.autoware().iter().enumerate() {
                let (_, rows) = &px.cols[&(start + u64::from(p.time_stamp))];
                let want = rows[usize::from(p.channel)][ret(p)];
                let got = q[k];
                let (range, refl, amb, inten) =
                    (got.range, got.reflectivity, got.ambient, got.intensity);
                assert_eq!(range, want.range, "{name} point {k}");
                assert_eq!(refl, u16::from(want.refl), "{name} point {k}");
                assert_eq!(amb, want.nir, "{name} point {k}");
                assert_eq!(
                    inten.to_bits(),
                    f32::from(want.signal).to_bits(),
                    "{name} {k}"
                );
                let xi = x[k].intensity;
                assert_eq!(xi.to_bits(), inten.to_bits(), "{name} point {k}");
                checked += 1;
                seconds += ret(p);
                signal_nonzero += usize::from(want.signal != 0);
            }
        }
        assert!(checked > 10_000, "{name}: {checked} points");
        if px.profile == "RNG15_RFL8_NIR8" {
            assert_eq!(signal_nonzero, 0, "{name}: RNG15 has no signal");
        } else {
            assert!(signal_nonzero > checked / 2, "{name}: {signal_nonzero}");
        }
        if px.profile == "RNG19_RFL8_SIG16_NIR16_DUAL" {
            assert_eq!(seconds, 172, "{name}: the dual capture's second returns");
        }
        check_digest(&base, &px, &ouster);
    }
}

fn xyzir_of(frames: &[Frame], seq: u64) -> &[OusterXYZIR] {
    let f = frames.iter().find(|f| f.header.sequence == seq).unwrap();
    f.points.typed::<OusterXYZIR>().unwrap()
}

/// For a capture with an ouster-sdk digest (one frame): the frame's field images, each pixel
/// from our `ouster` point when it has one, else from [`Pixels`], hash to ouster-sdk's.
fn check_digest(base: &Path, px: &Pixels, ouster: &[Frame]) {
    let b = base.to_str().unwrap();
    let Ok(text) = std::fs::read_to_string(format!("{b}_digest.json")) else {
        return;
    };
    let digest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let scan = digest["scans"][0].as_object().unwrap();
    assert_eq!(ouster.len(), 1, "{b}");
    let fr = &ouster[0];
    let (h, w) = (px.h, px.w);
    // Per field: value bytes and image (row-major h × w, by measurement_id).
    type Field = (usize, Vec<u64>);
    let names = [
        ("RANGE", 4),
        ("RANGE2", 4),
        ("SIGNAL", 2),
        ("SIGNAL2", 2),
        ("NEAR_IR", 2),
        ("REFLECTIVITY", 1),
        ("REFLECTIVITY2", 1),
    ];
    let mut img: HashMap<&str, Field> = names
        .iter()
        .map(|&(n, bytes)| (n, (bytes, vec![0u64; h * w])))
        .collect();
    let set = |img: &mut HashMap<&str, Field>, n: &str, i: usize, v: u64| {
        img.get_mut(n).unwrap().1[i] = v;
    };
    for (m, rows) in px.cols.values() {
        for (row, [r1, r2]) in rows.iter().enumerate() {
            let i = row * w + m;
            for (sfx, r) in [("", r1), ("2", r2)] {
                set(&mut img, &format!("RANGE{sfx}"), i, u64::from(r.range));
                set(&mut img, &format!("SIGNAL{sfx}"), i, u64::from(r.signal));
                set(
                    &mut img,
                    &format!("REFLECTIVITY{sfx}"),
                    i,
                    u64::from(r.refl),
                );
            }
            set(&mut img, "NEAR_IR", i, u64::from(r1.nir));
        }
    }
    // Our points overwrite their pixels.
    let start = fr.header.start_ns;
    let mut from_points = 0usize;
    for q in fr.points.typed::<OusterPoint>().unwrap() {
        let (m, rows) = &px.cols[&(start + u64::from(q.t))];
        let row = usize::from(q.ring);
        let i = row * w + m;
        // The return: the one whose range the point has (a second return is emitted only
        // when it differs from the first).
        let (range, refl, amb, inten) = (q.range, q.reflectivity, q.ambient, q.intensity);
        let sfx = if range == rows[row][0].range { "" } else { "2" };
        set(&mut img, &format!("RANGE{sfx}"), i, u64::from(range));
        set(&mut img, &format!("SIGNAL{sfx}"), i, inten as u64);
        set(&mut img, &format!("REFLECTIVITY{sfx}"), i, u64::from(refl));
        set(&mut img, "NEAR_IR", i, u64::from(amb));
        from_points += 1;
    }
    assert_eq!(from_points, fr.points.len());
    let mut hashed = Vec::new();
    for (n, (bytes, v)) in &img {
        let Some(want) = scan.get(*n) else { continue };
        let data: Vec<u8> = v
            .iter()
            .flat_map(|x| x.to_le_bytes()[..*bytes].to_vec())
            .collect();
        assert_eq!(
            format!("{:x}", md5::compute(data)),
            want.as_str().unwrap(),
            "{b}: {n}"
        );
        hashed.push(*n);
    }
    assert!(
        hashed.contains(&"NEAR_IR") && hashed.contains(&"REFLECTIVITY"),
        "{b}: {hashed:?}"
    );
}
