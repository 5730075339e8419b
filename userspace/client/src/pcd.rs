//! PCD (Point Cloud Library format v0.7) files of frames in any point layout
//! ([`lidarxdp_core::layout::PointType`]); the header below is the `autoware` one.
//!
//! The writer produces exactly the header shape of Tier IV Nebula's ground-truth PCDs:
//!
//! ```text
//! # .PCD v0.7 - Point Cloud Data file format
//! VERSION 0.7
//! FIELDS x y z intensity return_type channel azimuth elevation distance time_stamp
//! SIZE 4 4 4 1 1 2 4 4 4 4
//! TYPE F F F U U U F F F U
//! COUNT 1 1 1 1 1 1 1 1 1 1
//! WIDTH <n>
//! HEIGHT 1
//! VIEWPOINT 0 0 0 1 0 0 0
//! POINTS <n>
//! DATA binary
//! ```
//!
//! followed by `n` packed little-endian 32-byte records (the in-memory layout of
//! [`PointXYZIRCAEDT`]). Hand-written rather than `pcd-rs`, whose writer emits a different
//! header (`VERSION .7`, padded `POINTS`) and needs a seekable sink.
//!
//! The reader accepts any `DATA binary` PCD: fields are matched by name, converted from their
//! declared `SIZE`/`TYPE`, unknown fields skipped and missing ones left 0. Source: PCL
//! "The PCD (Point Cloud Data) file format" documentation.

use std::io::{self, BufRead, Read, Write};
use std::path::Path;

use lidarxdp_core::frame::Frame;
use lidarxdp_core::layout::PointType;
use lidarxdp_core::point::{PointField, PointXYZIRCAEDT};
use lidarxdp_core::protocol::datatype_size;

/// PCD read errors.
#[derive(Debug, thiserror::Error)]
pub enum PcdError {
    /// Reading or writing the file failed.
    #[error("PCD I/O: {0}")]
    Io(#[from] io::Error),
    /// The header is invalid or unsupported (message says which line or field).
    #[error("invalid PCD: {0}")]
    Format(String),
}

/// Writes `points` as a binary PCD v0.7 (header above) to `w`.
///
/// # Errors
/// Any error of `w`.
pub fn write_points<W: Write>(w: W, points: &[PointXYZIRCAEDT]) -> io::Result<()> {
    write_layout(w, PointType::Autoware, bytemuck::cast_slice(points))
}

/// The PCD `TYPE` letter of a PointField datatype.
fn pcd_type(datatype: u8) -> &'static str {
    use lidarxdp_core::point::datatype as d;
    match datatype {
        d::FLOAT32 | d::FLOAT64 => "F",
        d::INT8 | d::INT16 | d::INT32 => "I",
        _ => "U",
    }
}

/// Writes `points`, the bytes of points in layout `point_type` (`point_step` each, as
/// [`lidarxdp_core::point_buf::PointBuf::as_bytes`] gives them), as a binary PCD v0.7 whose
/// `FIELDS`, `SIZE`, `TYPE` and `COUNT` are the layout's fields (the header above is the
/// `autoware` one). A record holds the fields in order without the layout's padding (PCL's
/// reader takes records as the header declares them). A trailing partial point is ignored.
///
/// # Errors
/// Any error of `w`.
pub fn write_layout<W: Write>(mut w: W, point_type: PointType, points: &[u8]) -> io::Result<()> {
    let fields = point_type.fields();
    let step = point_type.point_step();
    let n = points.len() / step;
    let join =
        |f: &dyn Fn(&PointField) -> String| fields.iter().map(f).collect::<Vec<_>>().join(" ");
    write!(
        w,
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS {}\nSIZE {}\nTYPE {}\n\
         COUNT {}\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA binary\n",
        join(&|f| f.name.to_owned()),
        join(&|f| datatype_size(f.datatype).to_string()),
        join(&|f| pcd_type(f.datatype).to_owned()),
        join(&|f| f.count.to_string()),
    )?;
    let runs: Vec<(usize, usize)> = fields
        .iter()
        .map(|f| {
            (
                f.offset as usize,
                (datatype_size(f.datatype) * f.count) as usize,
            )
        })
        .collect();
    let packed: usize = runs.iter().map(|r| r.1).sum();
    // Every field is little-endian on the targets we support (x86_64, aarch64).
    if packed == step {
        w.write_all(&points[..n * step])?;
    } else {
        let mut rec = Vec::with_capacity(packed * n.min(4096));
        for chunk in points.chunks_exact(step).collect::<Vec<_>>().chunks(4096) {
            rec.clear();
            for p in chunk {
                for &(o, l) in &runs {
                    rec.extend_from_slice(&p[o..o + l]);
                }
            }
            w.write_all(&rec)?;
        }
    }
    w.flush()
}

/// Writes `points` to the file `path` (created or truncated) as a binary PCD v0.7
/// (see [`write_points`]).
///
/// # Errors
/// File creation or write errors.
pub fn write_pcd(path: &Path, points: &[PointXYZIRCAEDT]) -> io::Result<()> {
    let f = std::fs::File::create(path)?;
    write_points(io::BufWriter::new(f), points)
}

/// Writes a frame's points to the file `path` (see [`write_pcd`]).
///
/// # Errors
/// File creation or write errors.
pub fn write_frame(path: &Path, frame: &Frame) -> io::Result<()> {
    let f = std::fs::File::create(path)?;
    write_layout(
        io::BufWriter::new(f),
        frame.points.point_type(),
        frame.points.as_bytes(),
    )
}

/// Reads a binary PCD file into points (see the module docs for what is accepted).
///
/// # Errors
/// [`PcdError::Io`] on read errors or a data section shorter than `POINTS` records,
/// [`PcdError::Format`] for a missing/inconsistent header line, a field type other than
/// F4/F8/U1/U2/U4/I1/I2/I4 or a `DATA` other than `binary`.
pub fn read_points(path: &Path) -> Result<Vec<PointXYZIRCAEDT>, PcdError> {
    let f = std::fs::File::open(path)?;
    read_points_from(io::BufReader::new(f))
}

#[derive(Clone, Copy)]
struct FieldSpec {
    size: usize,
    kind: u8,
    count: usize,
}

/// [`read_points`] from any buffered reader.
///
/// # Errors
/// As [`read_points`].
pub fn read_points_from<R: BufRead>(mut r: R) -> Result<Vec<PointXYZIRCAEDT>, PcdError> {
    let fmt = |m: String| PcdError::Format(m);
    let mut names: Vec<String> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    let mut kinds: Vec<u8> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut npoints: Option<usize> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(fmt("no DATA line".into()));
        }
        let mut it = line.split_whitespace();
        let Some(key) = it.next() else { continue };
        let rest: Vec<&str> = it.collect();
        let nums = |v: &[&str]| -> Result<Vec<usize>, PcdError> {
            v.iter()
                .map(|s| {
                    s.parse()
                        .map_err(|_| fmt(format!("bad number '{s}' in {key}")))
                })
                .collect()
        };
        match key {
            k if k.starts_with('#') => {}
            "FIELDS" => names = rest.iter().map(|s| s.to_string()).collect(),
            "SIZE" => sizes = nums(&rest)?,
            "TYPE" => {
                kinds = rest
                    .iter()
                    .map(|s| s.bytes().next().unwrap_or(b'?'))
                    .collect()
            }
            "COUNT" => counts = nums(&rest)?,
            "POINTS" => npoints = nums(&rest)?.first().copied(),
            "DATA" => {
                if rest.first() != Some(&"binary") {
                    return Err(fmt(format!(
                        "DATA {:?} not supported (binary only)",
                        rest.first()
                    )));
                }
                break;
            }
            _ => {}
        }
    }
    if counts.is_empty() {
        counts = vec![1; names.len()];
    }
    if names.is_empty()
        || sizes.len() != names.len()
        || kinds.len() != names.len()
        || counts.len() != names.len()
    {
        return Err(fmt("FIELDS, SIZE, TYPE and COUNT lengths differ".into()));
    }
    let n = npoints.ok_or_else(|| fmt("no POINTS line".into()))?;
    let specs: Vec<FieldSpec> = (0..names.len())
        .map(|i| FieldSpec {
            size: sizes[i],
            kind: kinds[i],
            count: counts[i],
        })
        .collect();
    for (name, s) in names.iter().zip(&specs) {
        match (s.kind, s.size) {
            (b'F', 4 | 8) | (b'U', 1 | 2 | 4) | (b'I', 1 | 2 | 4) => {}
            _ => {
                return Err(fmt(format!(
                    "field {name}: TYPE {} SIZE {} not supported",
                    s.kind as char, s.size
                )));
            }
        }
    }
    let step: usize = specs.iter().map(|s| s.size * s.count).sum();
    let want = step
        .checked_mul(n)
        .ok_or_else(|| fmt("POINTS too large".into()))?;
    // Read at most what the header promises, without trusting it for the allocation.
    let mut buf = Vec::new();
    r.take(want as u64).read_to_end(&mut buf)?;
    if buf.len() < want {
        return Err(PcdError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("data section has {} bytes, POINTS needs {want}", buf.len()),
        )));
    }
    let mut out = Vec::with_capacity(n);
    for rec in buf.chunks_exact(step.max(1)).take(n) {
        let mut p = PointXYZIRCAEDT::default();
        let mut off = 0;
        for (name, s) in names.iter().zip(&specs) {
            let v = value(&rec[off..off + s.size], *s);
            match name.as_str() {
                "x" => p.x = v as f32,
                "y" => p.y = v as f32,
                "z" => p.z = v as f32,
                "intensity" => p.intensity = v as u8,
                "return_type" => p.return_type = v as u8,
                "channel" | "ring" => p.channel = v as u16,
                "azimuth" => p.azimuth = v as f32,
                "elevation" => p.elevation = v as f32,
                "distance" => p.distance = v as f32,
                "time_stamp" => p.time_stamp = v as u32,
                _ => {}
            }
            off += s.size * s.count;
        }
        out.push(p);
    }
    Ok(out)
}

fn value(b: &[u8], s: FieldSpec) -> f64 {
    let le = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    match (s.kind, s.size) {
        (b'F', 4) => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        (b'F', 8) => f64::from_le_bytes(le(8)),
        (b'U', n) => u64::from_le_bytes(le(n)) as f64,
        (b'I', 1) => f64::from(b[0] as i8),
        (b'I', 2) => f64::from(i16::from_le_bytes([b[0], b[1]])),
        (b'I', 4) => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GT: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/vlp16_dual_nebula_groundtruth_1673400472138016708.pcd"
    );

    #[test]
    fn round_trip_and_nebula_header_shape() {
        let gt = read_points(Path::new(GT)).unwrap();
        assert_eq!(gt.len(), 14_831);
        let mut bytes = Vec::new();
        write_points(&mut bytes, &gt).unwrap();
        let orig = std::fs::read(GT).unwrap();
        // Same header and the same records (the Nebula file has one extra trailing byte).
        assert_eq!(&orig[..bytes.len()], &bytes[..]);
        assert_eq!(read_points_from(&bytes[..]).unwrap(), gt);
        let tmp = std::env::temp_dir().join(format!("lidarxdp-pcd-{}.pcd", std::process::id()));
        write_frame(
            &tmp,
            &Frame {
                points: gt.clone().into(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(read_points(&tmp).unwrap(), gt);
        let _ = std::fs::remove_file(&tmp);
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(matches!(
            read_points_from(&b"VERSION 0.7\n"[..]),
            Err(PcdError::Format(_))
        ));
        let ascii = b"FIELDS x\nSIZE 4\nTYPE F\nCOUNT 1\nPOINTS 1\nDATA ascii\n1.0\n";
        assert!(matches!(
            read_points_from(&ascii[..]),
            Err(PcdError::Format(_))
        ));
        let short = b"FIELDS x\nSIZE 4\nTYPE F\nCOUNT 1\nPOINTS 2\nDATA binary\n\0\0\0\0";
        assert!(matches!(read_points_from(&short[..]), Err(PcdError::Io(_))));
        let odd = b"FIELDS x\nSIZE 3\nTYPE F\nCOUNT 1\nPOINTS 1\nDATA binary\n\0\0\0";
        assert!(matches!(
            read_points_from(&odd[..]),
            Err(PcdError::Format(_))
        ));
    }
}
