//! XYZ look-up table: range (mm) to a point in the sensor frame (m), exactly as ouster-sdk's
//! `XYZLut` (`ouster_core/src/xyzlut.cpp`, `make_xyz_lut` + `cartesian`).
//!
//! For column `c` of `w` and row (beam) `r`, in f64:
//! * encoder angle `θe = 2π − c·2π/w`; beam azimuth `θa = −beam_azimuth_angles[r]·π/180`;
//!   beam altitude `φ = beam_altitude_angles[r]·π/180`;
//! * unit direction `d = (cos(θe+θa)·cos φ, sin(θe+θa)·cos φ, sin φ)`;
//! * beam-origin offset, with `b = beam_to_lidar_transform` and `n = b[0][3]` (or
//!   `sqrt(b[0][3]² + b[2][3]²)` when `b[2][3] ≠ 0`):
//!   `o = (cos θe·b[0][3] − d.x·n, sin θe·b[0][3] − d.y·n, −d.z·n + b[2][3])` (mm);
//! * both through `lidar_to_sensor_transform` `T`: `d' = R·d`, `o' = R·o + t` (mm);
//! * a pixel of range `R_mm ≠ 0` is at `R_mm·d'/1000 + o'/1000` metres.
//!
//! The point's `azimuth` is the direction of `d'` in the sensor's x-y plane, `atan2(d'.y, d'.x)`
//! mapped to [0, 2π); its `elevation` is `asin(d'.z)`.
//!
//! Storage (the decode loop is memory-bound): since
//! `o = b[0][3]·(cos θe, sin θe, 0) − n·d + (0, 0, b[2][3])`, the rotated offset is
//! `o' = C(c) − n·d'` with a per-column term `C(c) = b[0][3]·R·(cos θe, sin θe, 0) + R·(0, 0, b[2][3]) + t`,
//! so a point is `(R_mm − n)·d'/1000 + C(c)/1000`. The table keeps 20 bytes per pixel (`d'/1000`,
//! the azimuth and the elevation, f32, one array each) and `C/1000` per column; the f32
//! arithmetic stays within 0.1 mm of the SDK's f64 up to 500 m.

use std::f64::consts::PI;

use super::metadata::OusterMetadata;

/// One pixel in ouster-sdk's form: direction and offset (m per mm of range, m) and the beam
/// angles (rad). `range·dir + offset` equals [`XyzLut::point`] within f32 rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LutEntry {
    /// Direction × 0.001: multiply by the range in mm to get metres.
    pub dir: [f32; 3],
    /// Beam-origin offset, m.
    pub offset: [f32; 3],
    /// Beam azimuth in the sensor frame, rad, [0, 2π).
    pub azimuth: f32,
    /// Beam elevation, rad.
    pub elevation: f32,
}

pub use crate::simd::Column;

impl Column<'_> {
    /// The point of row `row` of this column with range `range_mm` (mm, > 0), m, sensor frame:
    /// `(range_mm − n)·d + C`, each product and sum rounded to f32 in that order (the SIMD
    /// kernel, `simd::ouster_column_points`, does the same operations, so both agree bit for
    /// bit). A row outside the column has direction 0: the column offset `C`.
    #[inline]
    pub fn xyz(&self, row: usize, range_mm: u32) -> [f32; 3] {
        let r = range_mm as f32 - self.n_mm;
        [
            r * at(self.dx, row) + self.offset[0],
            r * at(self.dy, row) + self.offset[1],
            r * at(self.dz, row) + self.offset[2],
        ]
    }
}

/// Row `row` of one of a [`Column`]'s arrays; 0 outside it.
#[inline(always)]
pub(crate) fn at(v: &[f32], row: usize) -> f32 {
    v.get(row).copied().unwrap_or(0.0)
}

/// The table for one metadata: `columns_per_frame × pixels_per_column` pixels, column-major
/// (`index = column·stride + row`), the order packets deliver pixels in; one array per
/// quantity (x, y, z direction, azimuth, elevation).
#[derive(Clone, Debug)]
pub struct XyzLut {
    /// Columns per frame.
    pub w: usize,
    /// Rows (beams).
    pub h: usize,
    /// Rows stored per column: `h` rounded up to a multiple of 4, the rows past `h` zero.
    pub stride: usize,
    dx: Vec<f32>,
    dy: Vec<f32>,
    dz: Vec<f32>,
    azimuth: Vec<f32>,
    elevation: Vec<f32>,
    col_offset: Vec<[f32; 3]>,
    n_mm: f32,
}

/// `v[range]`, or empty when out of bounds.
fn part<'a>(v: &'a [f32], range: &std::ops::Range<usize>) -> &'a [f32] {
    v.get(range.clone()).unwrap_or(&[])
}

impl XyzLut {
    /// Builds the table from the metadata's beam intrinsics and transforms.
    pub fn new(meta: &OusterMetadata) -> Self {
        let w = meta.format.columns_per_frame;
        let h = meta.format.pixels_per_column;
        let b = &meta.beam_to_lidar_transform;
        let t = &meta.lidar_to_sensor_transform;
        let (b03, b23) = (b[3], b[11]);
        let n = if b23 != 0.0 {
            (b03 * b03 + b23 * b23).sqrt()
        } else {
            b03
        };
        let rot =
            |v: [f64; 3], i: usize| t[4 * i] * v[0] + t[4 * i + 1] * v[1] + t[4 * i + 2] * v[2];
        let stride = h.next_multiple_of(4);
        let mut dx = vec![0.0; w * stride];
        let mut dy = vec![0.0; w * stride];
        let mut dz = vec![0.0; w * stride];
        let mut azimuths = vec![0.0; w * stride];
        let mut elevation = vec![0.0; w * stride];
        let mut col_offset = Vec::with_capacity(w);
        for c in 0..w {
            let enc = 2.0 * PI - (c as f64) * (2.0 * PI / w as f64);
            let cv = [enc.cos() * b03, enc.sin() * b03, b23];
            col_offset.push([0, 1, 2].map(|i| ((rot(cv, i) + t[4 * i + 3]) * 0.001) as f32));
            for r in 0..h {
                let az = -meta.beam_azimuth_angles.get(r).copied().unwrap_or(0.0) * PI / 180.0;
                let alt = meta.beam_altitude_angles.get(r).copied().unwrap_or(0.0) * PI / 180.0;
                let d = [
                    (enc + az).cos() * alt.cos(),
                    (enc + az).sin() * alt.cos(),
                    alt.sin(),
                ];
                let ds = [rot(d, 0), rot(d, 1), rot(d, 2)];
                let azimuth = ds[1].atan2(ds[0]).rem_euclid(2.0 * PI);
                let norm = (ds[0] * ds[0] + ds[1] * ds[1] + ds[2] * ds[2]).sqrt();
                let el = if norm > 0.0 {
                    (ds[2] / norm).clamp(-1.0, 1.0).asin()
                } else {
                    0.0
                };
                let i = c * stride + r;
                dx[i] = (ds[0] * 0.001) as f32;
                dy[i] = (ds[1] * 0.001) as f32;
                dz[i] = (ds[2] * 0.001) as f32;
                // rem_euclid can round up to exactly 2π in f32.
                azimuths[i] = if (azimuth as f32) >= std::f32::consts::TAU {
                    0.0
                } else {
                    azimuth as f32
                };
                elevation[i] = el as f32;
            }
        }
        Self {
            w,
            h,
            stride,
            dx,
            dy,
            dz,
            azimuth: azimuths,
            elevation,
            col_offset,
            n_mm: n as f32,
        }
    }

    /// Column `col` of the table, `stride` rows (empty slices if `col >= w`).
    #[inline]
    pub fn column(&self, col: usize) -> Column<'_> {
        let range = col * self.stride..(col + 1) * self.stride;
        Column {
            dx: part(&self.dx, &range),
            dy: part(&self.dy, &range),
            dz: part(&self.dz, &range),
            azimuth: part(&self.azimuth, &range),
            elevation: part(&self.elevation, &range),
            offset: self.col_offset.get(col).copied().unwrap_or_default(),
            n_mm: self.n_mm,
        }
    }

    /// The entry of (`col`, `row`) in ouster-sdk's form (direction and offset), if inside.
    pub fn get(&self, col: usize, row: usize) -> Option<LutEntry> {
        if row >= self.h {
            return None;
        }
        let i = col * self.stride + row;
        let dir = [*self.dx.get(i)?, *self.dy.get(i)?, *self.dz.get(i)?];
        let c = self.col_offset.get(col)?;
        Some(LutEntry {
            dir,
            offset: [0, 1, 2].map(|k| c[k] - self.n_mm * dir[k]),
            azimuth: *self.azimuth.get(i)?,
            elevation: *self.elevation.get(i)?,
        })
    }

    /// The point (m, sensor frame) of pixel (`col`, `row`) with range `range_mm` (mm, > 0),
    /// computed exactly as the decoder does; `None` outside the table.
    pub fn point(&self, col: usize, row: usize, range_mm: u32) -> Option<[f32; 3]> {
        (col < self.w && row < self.h).then(|| self.column(col).xyz(row, range_mm))
    }
}
