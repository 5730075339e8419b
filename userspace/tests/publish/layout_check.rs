//! Checks shared by the point layout tests (`publish_point_types` here, `point_types` of the
//! `ros2` binary, which includes this file by path): the offline decode of a capture into a
//! layout, the expected field lists written out as the independent readers report them, the
//! comparison of a layout's point bytes with the offline decode's, and reading the PCDs back
//! with `pcd_check.py` (pypcd4, in the tests' Python environment).
//!
//! The decoded layout's bytes are the reference (`Frame::points.as_bytes()`, the decoder's own
//! output in that layout); the field lists the readers report are compared with
//! [`PointType::fields`] and [`PointType::point_step`].
//!
//! Absolute time fields: a Velodyne packet carries µs past the hour, so a live daemon stamps a
//! capture in the hour of the host clock and offline decoding in the hour of the pcap record
//! time; the frames of the two differ by whole hours and so do the `hesai` and `robosense`
//! `timestamp` fields (f64 s since the Unix epoch). Those are compared as
//! `live = offline + delta` within [`TIME_TOL_S`]: a few ulps of an f64 near 1.7e9 s (one ulp
//! is 0.24 µs), well under the 2.3 µs between two firings of a VLP-16.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use lidarxdp_core::frame::Frame;
use lidarxdp_core::layout::{PointType, TimeField};
use lidarxdp_core::point::PointField;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

/// The PCD reader, beside this file.
pub const PCD_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/publish/pcd_check.py");

/// One hour in ns: the span of the Velodyne "µs past the hour" packet time.
pub const HOUR_NS: u64 = 3_600_000_000_000;

/// How far an absolute f64 time (s) may be from `offline + delta` (see the module docs).
pub const TIME_TOL_S: f64 = 1e-6;

/// `sensor_msgs/msg/PointField` datatype codes, written out from the message definition (not
/// taken from lidarxdp): 2 UINT8, 4 UINT16, 6 UINT32, 7 FLOAT32, 8 FLOAT64.
const UINT8: u8 = 2;
const UINT16: u8 = 4;
const UINT32: u8 = 6;
const FLOAT32: u8 = 7;
const FLOAT64: u8 = 8;

/// Offline decoding of `pcap` (shared data) into layout `t`, datagrams to UDP `port` only;
/// asserts every frame is in that layout, `point_step` bytes per point.
pub fn offline_as(
    pcap: &str,
    model: SensorModel,
    calib: &str,
    port: u16,
    t: PointType,
) -> Vec<Frame> {
    let cfg = SensorConfig {
        point_type: t,
        ..SensorConfig::new(0, model, lidarxdp_testkit::data(calib))
    };
    let frames = lidarxdp::offline::decode_pcap(&lidarxdp_testkit::data(pcap), &cfg, Some(port))
        .unwrap_or_else(|e| panic!("offline decode of {pcap} as {t}: {e}"))
        .0;
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.points.point_type(), t, "offline frame {i} as {t}");
        assert_eq!(
            f.points.as_bytes().len(),
            f.points.len() * t.point_step(),
            "offline frame {i} as {t}: bytes"
        );
    }
    frames
}

/// `t`'s fields as (name, offset, datatype, count), the form the readers report.
pub fn fields_of(t: PointType) -> Vec<(String, u32, u8, u32)> {
    t.fields()
        .iter()
        .map(|f| (f.name.to_owned(), f.offset, f.datatype, f.count))
        .collect()
}

/// Bytes of one element of a PointField datatype, and its PCD `TYPE` letter (PCL's "The PCD
/// file format": F float, U unsigned, I signed).
fn pcd_size_type(datatype: u8) -> (u32, &'static str) {
    match datatype {
        UINT8 => (1, "U"),
        UINT16 => (2, "U"),
        UINT32 => (4, "U"),
        FLOAT32 => (4, "F"),
        FLOAT64 => (8, "F"),
        d => panic!("datatype {d} in a layout"),
    }
}

/// numpy's dtype string of a field's column (`dtype.str`: byte order, kind, size).
fn numpy_dtype(datatype: u8) -> &'static str {
    match datatype {
        UINT8 => "|u1",
        UINT16 => "<u2",
        UINT32 => "<u4",
        FLOAT32 => "<f4",
        FLOAT64 => "<f8",
        d => panic!("datatype {d} in a layout"),
    }
}

/// Field `f`'s bytes of every point of `bytes` (points of `step` bytes), in order.
fn column(bytes: &[u8], step: usize, f: &PointField) -> Vec<u8> {
    let (size, _) = pcd_size_type(f.datatype);
    let (o, len) = (f.offset as usize, (size * f.count) as usize);
    bytes
        .chunks_exact(step)
        .flat_map(|p| &p[o..o + len])
        .copied()
        .collect()
}

/// Whether `f` holds an absolute time of `t` (f64 s since the Unix epoch).
fn absolute_time(t: PointType, f: &PointField) -> bool {
    t.time() == TimeField::AbsoluteSecF64 && f.datatype == FLOAT64
}

/// Asserts column `got` of field `f` of layout `t` equals `want` (the offline decode's):
/// byte for byte, or for an absolute time as `offline + delta_ns` within [`TIME_TOL_S`].
fn assert_column(who: &str, t: PointType, f: &PointField, got: &[u8], want: &[u8], delta_ns: i128) {
    assert_eq!(got.len(), want.len(), "{who}: field {} length", f.name);
    if absolute_time(t, f) && delta_ns != 0 {
        assert_eq!(
            delta_ns % i128::from(HOUR_NS),
            0,
            "{who}: live and offline frame starts differ by {delta_ns} ns, not whole hours"
        );
        // Whole hours: an exact number of seconds.
        let delta_s = (delta_ns / 1_000_000_000) as f64;
        for (p, (g, w)) in got.chunks_exact(8).zip(want.chunks_exact(8)).enumerate() {
            let g = f64::from_le_bytes(g.try_into().unwrap());
            let w = f64::from_le_bytes(w.try_into().unwrap());
            assert!(
                (g - (w + delta_s)).abs() <= TIME_TOL_S,
                "{who}: point {p} {} {g} vs offline {w} + {delta_s} s",
                f.name
            );
        }
        return;
    }
    if got != want {
        let size = (pcd_size_type(f.datatype).0 * f.count) as usize;
        let p = (0..want.len() / size)
            .find(|&p| got[p * size..(p + 1) * size] != want[p * size..(p + 1) * size])
            .unwrap_or(0);
        panic!(
            "{who}: field {} differs from the offline decode, first at point {p}: {:?} vs {:?}",
            f.name,
            got.get(p * size..p * size + size),
            want.get(p * size..p * size + size)
        );
    }
}

/// Asserts `got`, points of layout `t` as an output carried them (PointCloud2 `data`, a TCP
/// frame's payload), equal `off`'s bytes: exactly, padding included; for a layout with an
/// absolute time whose frame start differs from the offline one by `delta_ns` (whole hours),
/// every other field exactly and the time as [`assert_column`] says.
pub fn assert_layout_bytes(who: &str, t: PointType, got: &[u8], off: &Frame, delta_ns: i128) {
    let want = off.points.as_bytes();
    let step = t.point_step();
    assert_eq!(
        got.len(),
        want.len(),
        "{who}: {} bytes of points, offline {} ({} points of {step})",
        got.len(),
        want.len(),
        off.points.len()
    );
    if t.time() == TimeField::AbsoluteSecF64 && delta_ns != 0 {
        // The layouts with an absolute time are packed: their fields cover every byte.
        let covered: u32 = t
            .fields()
            .iter()
            .map(|f| pcd_size_type(f.datatype).0 * f.count)
            .sum();
        assert_eq!(covered as usize, step, "{t}: fields cover the point");
        for f in t.fields() {
            assert_column(
                who,
                t,
                f,
                &column(got, step, f),
                &column(want, step, f),
                delta_ns,
            );
        }
        return;
    }
    if got != want {
        let p = (0..off.points.len())
            .find(|&p| got[p * step..(p + 1) * step] != want[p * step..(p + 1) * step])
            .unwrap_or(0);
        panic!(
            "{who}: points differ from the offline decode as {t}, first at point {p}: {:?} vs \
             {:?}",
            &got[p * step..(p + 1) * step],
            &want[p * step..(p + 1) * step]
        );
    }
}

/// One PCD as `pcd_check.py` read it.
#[derive(Debug, serde::Deserialize)]
pub struct Pcd {
    /// The file.
    pub path: PathBuf,
    /// `VERSION`.
    pub version: String,
    /// (`FIELDS`, `SIZE`, `TYPE`, `COUNT`) per field.
    pub fields: Vec<(String, u32, String, u32)>,
    /// `WIDTH`.
    pub width: u64,
    /// `HEIGHT`.
    pub height: u64,
    /// `POINTS`.
    pub points: u64,
    /// `DATA`.
    pub data: String,
    /// The columns, in field order.
    pub columns: Vec<PcdColumn>,
    /// The columns' bytes, filled from the `.bin` file.
    #[serde(skip)]
    pub bytes: Vec<Vec<u8>>,
}

/// One column of a [`Pcd`]: a field's values of every point.
#[derive(Debug, serde::Deserialize)]
pub struct PcdColumn {
    /// Field name (pypcd4's: `NAME__000i` for the elements of a field of COUNT > 1).
    pub name: String,
    /// numpy's dtype string.
    pub dtype: String,
    /// Where its bytes are in the `.bin` file.
    pub offset: usize,
    /// Their length.
    pub len: usize,
}

/// Runs `pcd_check.py --out <out> FILES...` with the tests' Python and reads what it wrote,
/// one [`Pcd`] per file, in order.
pub fn read_pcds(files: &[PathBuf], out: &Path) -> Vec<Pcd> {
    let o = Command::new(lidarxdp_testkit::python())
        .arg(PCD_CHECK)
        .arg("--out")
        .arg(out)
        .args(files)
        .output()
        .expect("run pcd_check.py");
    assert!(
        o.status.success(),
        "pcd_check.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let with = |ext: &str| {
        let mut p = out.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let text = std::fs::read_to_string(with(".jsonl")).expect("pcd_check .jsonl");
    let bin = std::fs::read(with(".bin")).expect("pcd_check .bin");
    let pcds: Vec<Pcd> = text
        .lines()
        .map(|l| {
            let mut p: Pcd = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            p.bytes = (p.columns.iter())
                .map(|c| bin[c.offset..c.offset + c.len].to_vec())
                .collect();
            p
        })
        .collect();
    assert_eq!(pcds.len(), files.len(), "pcd_check.py records");
    pcds
}

/// Asserts `pcd` is frame `off` in layout `t` as pypcd4 read it: version 0.7, binary data,
/// the layout's fields in order with their PCD size, type and count, `off`'s point count as
/// WIDTH and POINTS (HEIGHT 1), and every field's values equal to the offline decode's
/// ([`assert_column`]; `delta_ns` as there).
pub fn assert_pcd_equal(who: &str, t: PointType, pcd: &Pcd, off: &Frame, delta_ns: i128) {
    let n = off.points.len() as u64;
    let fields: Vec<(String, u32, String, u32)> = t
        .fields()
        .iter()
        .map(|f| {
            let (size, ty) = pcd_size_type(f.datatype);
            (f.name.to_owned(), size, ty.to_owned(), f.count)
        })
        .collect();
    assert_eq!(pcd.fields, fields, "{who}: PCD fields of {t}");
    assert_eq!(
        (pcd.version.as_str(), pcd.data.as_str()),
        ("0.7", "binary"),
        "{who}: VERSION, DATA"
    );
    assert_eq!(
        (pcd.width, pcd.height, pcd.points),
        (n, 1, n),
        "{who}: WIDTH, HEIGHT, POINTS"
    );
    assert!(
        t.fields().iter().all(|f| f.count == 1),
        "{t}: a field of count > 1 (pypcd4 splits it into columns)"
    );
    let names: Vec<&str> = pcd.columns.iter().map(|c| c.name.as_str()).collect();
    let want_names: Vec<&str> = t.fields().iter().map(|f| f.name).collect();
    assert_eq!(names, want_names, "{who}: pypcd4's columns");
    let want = off.points.as_bytes();
    for ((f, c), got) in t.fields().iter().zip(&pcd.columns).zip(&pcd.bytes) {
        assert_eq!(
            c.dtype,
            numpy_dtype(f.datatype),
            "{who}: dtype of {}",
            f.name
        );
        assert_column(who, t, f, got, &column(want, t.point_step(), f), delta_ns);
    }
}
