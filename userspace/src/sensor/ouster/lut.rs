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
//! mapped to [0, 2π); its `elevation` is `asin(d'.z)`. The table stores `d'/1000` and `o'/1000`
//! as f32 (error below 0.1 mm up to 500 m).

use std::f64::consts::PI;

use super::metadata::OusterMetadata;

/// One pixel's entry: direction and offset (m per mm of range, m) and the beam angles (rad).
#[repr(C)]
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

/// The table for one metadata: `columns_per_frame × pixels_per_column` entries, column-major
/// (`index = column·h + row`), the order packets deliver pixels in.
#[derive(Clone, Debug)]
pub struct XyzLut {
    /// Columns per frame.
    pub w: usize,
    /// Rows (beams).
    pub h: usize,
    entries: Vec<LutEntry>,
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
        let mut entries = Vec::with_capacity(w * h);
        for c in 0..w {
            let enc = 2.0 * PI - (c as f64) * (2.0 * PI / w as f64);
            for r in 0..h {
                let az = -meta.beam_azimuth_angles.get(r).copied().unwrap_or(0.0) * PI / 180.0;
                let alt = meta.beam_altitude_angles.get(r).copied().unwrap_or(0.0) * PI / 180.0;
                let d = [
                    (enc + az).cos() * alt.cos(),
                    (enc + az).sin() * alt.cos(),
                    alt.sin(),
                ];
                let o = [
                    enc.cos() * b03 - d[0] * n,
                    enc.sin() * b03 - d[1] * n,
                    -d[2] * n + b23,
                ];
                let rot = |v: [f64; 3], i: usize| {
                    t[4 * i] * v[0] + t[4 * i + 1] * v[1] + t[4 * i + 2] * v[2]
                };
                let ds = [rot(d, 0), rot(d, 1), rot(d, 2)];
                let os = [rot(o, 0) + t[3], rot(o, 1) + t[7], rot(o, 2) + t[11]];
                let azimuth = ds[1].atan2(ds[0]).rem_euclid(2.0 * PI);
                let norm = (ds[0] * ds[0] + ds[1] * ds[1] + ds[2] * ds[2]).sqrt();
                let elevation = if norm > 0.0 {
                    (ds[2] / norm).clamp(-1.0, 1.0).asin()
                } else {
                    0.0
                };
                entries.push(LutEntry {
                    dir: ds.map(|x| (x * 0.001) as f32),
                    offset: os.map(|x| (x * 0.001) as f32),
                    // rem_euclid can round up to exactly 2π in f32.
                    azimuth: if (azimuth as f32) >= std::f32::consts::TAU {
                        0.0
                    } else {
                        azimuth as f32
                    },
                    elevation: elevation as f32,
                });
            }
        }
        Self { w, h, entries }
    }

    /// The entries of column `col` (rows 0..h); empty if `col >= w`.
    #[inline]
    pub fn column(&self, col: usize) -> &[LutEntry] {
        self.entries
            .get(col * self.h..(col + 1) * self.h)
            .unwrap_or(&[])
    }

    /// The entry of (`col`, `row`), if inside the table.
    pub fn get(&self, col: usize, row: usize) -> Option<&LutEntry> {
        if row < self.h {
            self.entries.get(col * self.h + row)
        } else {
            None
        }
    }

    /// The point of a pixel with range `range_mm` (mm, > 0), metres in the sensor frame.
    #[inline]
    pub fn xyz(e: &LutEntry, range_mm: u32) -> [f32; 3] {
        let r = range_mm as f32;
        [
            r * e.dir[0] + e.offset[0],
            r * e.dir[1] + e.offset[1],
            r * e.dir[2] + e.offset[2],
        ]
    }
}
