//! Velodyne per-laser calibration tables (YAML).
//!
//! Format: the `ros-drivers/velodyne` calibration YAML, which Tier IV Nebula reads unchanged
//! (`nebula_velodyne_common/velodyne_calibration_decoder.cpp`):
//!
//! ```yaml
//! lasers:
//!   - {laser_id: 0, rot_correction: 0.0, vert_correction: -0.2617993877991494,
//!      dist_correction: 0.0, dist_correction_x: 0.0, dist_correction_y: 0.0,
//!      vert_offset_correction: 0.0, horiz_offset_correction: 0.0,
//!      focal_distance: 0.0, focal_slope: 0.0}
//!   # ... one entry per laser
//! num_lasers: 16
//! distance_resolution: 0.002
//! ```
//!
//! Angles are radians, distances metres. The VLP-16 decoder applies, like Nebula's
//! `Vlp16Decoder`, `vert_correction` (elevation), `rot_correction` (azimuth offset) and
//! `dist_correction` (added to every non-zero range) only. The 32/64/128-laser decoder
//! ([`super::velodyne::multi`]) applies the full model of the HDL-64E S2/S3 manual (appendix
//! "calibration", as ros-drivers `rawdata.cc` and Nebula `vlp32_decoder.cpp` do):
//! `dist_correction_x/y` with `two_pt_correction_available` (two-point linear distance
//! correction), `vert_offset_correction`, `horiz_offset_correction`, and the intensity
//! correction from `focal_distance`/`focal_slope` clamped to `[min_intensity, max_intensity]`.
//! Optional keys default to 0 (`max_intensity` to 255, `two_pt_correction_available` to
//! false). The VLS-128 tables say `distance_resolution: 0.007`, which is wrong: the VLS-128
//! decoder always uses 4 mm (see [`super::velodyne::multi`]).
//!
//! Rings: [`LaserCorrection::ring`] numbers the lasers by ascending `vert_correction` (0 = lowest
//! beam), the rule of both ros-drivers and Nebula; it is the `channel` of every published point.

use std::path::Path;

use serde::Deserialize;

use crate::vendor::ConfigError;

/// One laser's corrections, as read from the YAML table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaserCorrection {
    /// Index of the laser in the packet (firing order inside a firing sequence), 0-based.
    pub laser_id: u16,
    /// Ring number: rank of `vert_correction` in ascending order (0 = lowest beam).
    pub ring: u16,
    /// Azimuth offset of this laser, rad (subtracted from the block azimuth).
    pub rot_correction: f32,
    /// Elevation of this laser, rad (positive up).
    pub vert_correction: f32,
    /// Range offset added to every non-zero range, m.
    pub dist_correction: f32,
    /// `cos(vert_correction)`, computed in f32 like Nebula (`cosf`).
    pub cos_vert: f32,
    /// `sin(vert_correction)`, computed in f32 like Nebula (`sinf`).
    pub sin_vert: f32,
    /// Two-point distance correction enabled (`two_pt_correction_available`, HDL-64E S2).
    pub two_pt_correction: bool,
    /// Distance correction at the far calibration point along x, m (`dist_correction_x`).
    pub dist_correction_x: f32,
    /// Distance correction at the far calibration point along y, m (`dist_correction_y`).
    pub dist_correction_y: f32,
    /// Vertical offset of the laser from the origin, m (`vert_offset_correction`).
    pub vert_offset: f32,
    /// Horizontal offset of the laser from the origin, m (`horiz_offset_correction`).
    pub horiz_offset: f32,
    /// Focal distance of the intensity correction, raw units (`focal_distance`, HDL-64E).
    pub focal_distance: f32,
    /// Focal slope of the intensity correction (`focal_slope`, HDL-64E).
    pub focal_slope: f32,
    /// Lower clamp of the corrected intensity, `floor(min_intensity)` (default 0).
    pub min_intensity: f32,
    /// Upper clamp of the corrected intensity, `floor(max_intensity)` (default 255).
    pub max_intensity: f32,
}

/// A validated calibration table, indexed by laser id.
#[derive(Clone, Debug, PartialEq)]
pub struct VelodyneCalibration {
    /// Range unit of the raw distance field, m per count (0.002 for VLP-16; manual section 9).
    pub distance_resolution_m: f32,
    /// Corrections, `lasers[i].laser_id == i`.
    pub lasers: Vec<LaserCorrection>,
}

#[derive(Deserialize)]
struct RawFile {
    lasers: Vec<RawLaser>,
    num_lasers: Option<i64>,
    distance_resolution: Option<f64>,
}

#[derive(Deserialize)]
struct RawLaser {
    laser_id: i64,
    rot_correction: f64,
    vert_correction: f64,
    #[serde(default)]
    dist_correction: f64,
    #[serde(default)]
    dist_correction_x: f64,
    #[serde(default)]
    dist_correction_y: f64,
    #[serde(default)]
    vert_offset_correction: f64,
    #[serde(default)]
    horiz_offset_correction: f64,
    #[serde(default)]
    two_pt_correction_available: bool,
    #[serde(default)]
    focal_distance: f64,
    #[serde(default)]
    focal_slope: f64,
    #[serde(default)]
    min_intensity: Option<f64>,
    #[serde(default)]
    max_intensity: Option<f64>,
}

/// Largest accepted `|rot_correction|`, rad (π).
pub const MAX_ROT_CORRECTION_RAD: f64 = std::f64::consts::PI;
/// Largest accepted `|vert_correction|`, rad (π/2).
pub const MAX_VERT_CORRECTION_RAD: f64 = std::f64::consts::FRAC_PI_2;
/// Largest accepted `|dist_correction|` and offset corrections, m.
pub const MAX_DIST_CORRECTION_M: f64 = 10.0;

fn check_range(field: String, value: f64, min: f64, max: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value: value.to_string(),
            valid: format!("[{min}, {max}]"),
        })
    }
}

impl VelodyneCalibration {
    /// Parses and validates a calibration YAML file's contents for a sensor with
    /// `expected_lasers` lasers; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] if the bytes are not UTF-8,
    /// [`ConfigError::CalibrationYaml`] if they are not valid YAML of the shape above,
    /// [`ConfigError::OutOfRange`] naming the field (e.g. `lasers[3].vert_correction`) and its
    /// valid range otherwise.
    pub fn from_bytes(
        bytes: &[u8],
        expected_lasers: usize,
        source: &Path,
    ) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::from_yaml_str(text, expected_lasers).map_err(|e| match e {
            ConfigError::CalibrationYaml { message, .. } => ConfigError::CalibrationYaml {
                path: source.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates a calibration table from YAML text (see [`Self::from_bytes`]).
    ///
    /// Validation: exactly `expected_lasers` entries with distinct `laser_id` in
    /// `[0, expected_lasers)`; `num_lasers` (if present) equal to `expected_lasers`;
    /// `distance_resolution` (default 0.002 m) in (0, 0.1]; `|rot_correction| <= π`,
    /// `|vert_correction| <= π/2`, `|dist_correction|` and offsets `<= 10` m.
    ///
    /// # Errors
    /// As [`Self::from_bytes`] (the YAML error carries an empty path).
    pub fn from_yaml_str(text: &str, expected_lasers: usize) -> Result<Self, ConfigError> {
        let raw: RawFile =
            serde_yaml::from_str(text).map_err(|e| ConfigError::CalibrationYaml {
                path: Default::default(),
                message: e.to_string(),
            })?;
        let n = expected_lasers;
        if let Some(num) = raw.num_lasers
            && num != n as i64
        {
            return Err(ConfigError::OutOfRange {
                field: "num_lasers".into(),
                value: num.to_string(),
                valid: format!("{n} (the sensor model's laser count)"),
            });
        }
        if raw.lasers.len() != n {
            return Err(ConfigError::OutOfRange {
                field: "lasers".into(),
                value: format!("{} entries", raw.lasers.len()),
                valid: format!("exactly {n} entries"),
            });
        }
        let res = raw.distance_resolution.unwrap_or(0.002);
        if !(res.is_finite() && res > 0.0 && res <= 0.1) {
            return Err(ConfigError::OutOfRange {
                field: "distance_resolution".into(),
                value: res.to_string(),
                valid: "(0, 0.1] m".into(),
            });
        }
        let mut slots: Vec<Option<LaserCorrection>> = vec![None; n];
        for (i, l) in raw.lasers.iter().enumerate() {
            let f = |name: &str| format!("lasers[{i}].{name}");
            check_range(f("laser_id"), l.laser_id as f64, 0.0, (n - 1) as f64)?;
            check_range(
                f("rot_correction"),
                l.rot_correction,
                -MAX_ROT_CORRECTION_RAD,
                MAX_ROT_CORRECTION_RAD,
            )?;
            check_range(
                f("vert_correction"),
                l.vert_correction,
                -MAX_VERT_CORRECTION_RAD,
                MAX_VERT_CORRECTION_RAD,
            )?;
            for (name, v) in [
                ("dist_correction", l.dist_correction),
                ("dist_correction_x", l.dist_correction_x),
                ("dist_correction_y", l.dist_correction_y),
                ("vert_offset_correction", l.vert_offset_correction),
                ("horiz_offset_correction", l.horiz_offset_correction),
            ] {
                check_range(f(name), v, -MAX_DIST_CORRECTION_M, MAX_DIST_CORRECTION_M)?;
            }
            check_range(f("focal_distance"), l.focal_distance, -1e5, 1e5)?;
            check_range(f("focal_slope"), l.focal_slope, -1e3, 1e3)?;
            let min_i = l.min_intensity.unwrap_or(0.0);
            let max_i = l.max_intensity.unwrap_or(255.0);
            check_range(f("min_intensity"), min_i, 0.0, 255.0)?;
            check_range(f("max_intensity"), max_i, min_i, 255.0)?;
            let id = l.laser_id as usize;
            if slots[id].is_some() {
                return Err(ConfigError::OutOfRange {
                    field: f("laser_id"),
                    value: id.to_string(),
                    valid: format!("distinct ids in [0, {}]", n - 1),
                });
            }
            // Nebula reads every value as a C++ float; keep the same precision.
            let vert = l.vert_correction as f32;
            slots[id] = Some(LaserCorrection {
                laser_id: id as u16,
                ring: 0,
                rot_correction: l.rot_correction as f32,
                vert_correction: vert,
                dist_correction: l.dist_correction as f32,
                cos_vert: vert.cos(),
                sin_vert: vert.sin(),
                two_pt_correction: l.two_pt_correction_available,
                dist_correction_x: l.dist_correction_x as f32,
                dist_correction_y: l.dist_correction_y as f32,
                vert_offset: l.vert_offset_correction as f32,
                horiz_offset: l.horiz_offset_correction as f32,
                focal_distance: l.focal_distance as f32,
                focal_slope: l.focal_slope as f32,
                min_intensity: min_i.floor() as f32,
                max_intensity: max_i.floor() as f32,
            });
        }
        // Every slot is filled: n distinct ids in [0, n) over n entries.
        let mut lasers: Vec<LaserCorrection> = slots.into_iter().flatten().collect();
        let mut order: Vec<usize> = (0..lasers.len()).collect();
        order.sort_by(|&a, &b| {
            lasers[a]
                .vert_correction
                .total_cmp(&lasers[b].vert_correction)
                .then(a.cmp(&b))
        });
        for (ring, &idx) in order.iter().enumerate() {
            lasers[idx].ring = ring as u16;
        }
        Ok(Self {
            distance_resolution_m: res as f32,
            lasers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
    );
    const NEB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/calibration/VLP16_nebula.yaml"
    );

    #[test]
    fn both_vlp16_tables_load_identically() {
        let load = |p: &str| {
            VelodyneCalibration::from_bytes(&std::fs::read(p).unwrap(), 16, Path::new(p)).unwrap()
        };
        let (a, b) = (load(DB), load(NEB));
        assert_eq!(a, b);
        assert_eq!(a.distance_resolution_m, 0.002);
        // VLP-16 interleaves lasers: id 0 is -15 deg (ring 0), id 1 is +1 deg (ring 8),
        // id 15 is +15 deg (ring 15) (VLP-16 manual, laser angles table).
        assert_eq!(a.lasers[0].ring, 0);
        assert_eq!(a.lasers[1].ring, 8);
        assert_eq!(a.lasers[14].ring, 7);
        assert_eq!(a.lasers[15].ring, 15);
    }

    #[test]
    fn rejects_bad_tables_naming_the_field() {
        let good = std::fs::read_to_string(DB).unwrap();
        let e = VelodyneCalibration::from_yaml_str(&good, 32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_lasers"), "{e}");
        let bad = good.replacen(
            "vert_correction: -0.2617993877991494",
            "vert_correction: 2.5",
            1,
        );
        let e = VelodyneCalibration::from_yaml_str(&bad, 16)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lasers[0].vert_correction") && e.contains("1.57"),
            "{e}"
        );
        let dup = good.replacen("laser_id: 1,", "laser_id: 0,", 1);
        let e = VelodyneCalibration::from_yaml_str(&dup, 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lasers[1].laser_id"), "{e}");
        let e = VelodyneCalibration::from_yaml_str("lasers: 3", 16).unwrap_err();
        assert!(matches!(e, ConfigError::CalibrationYaml { .. }));
        // The file's name is in the YAML error, and bytes that are not UTF-8 are refused.
        let name = Path::new("/cal/bad.yaml");
        let e = VelodyneCalibration::from_bytes(b"lasers: 3", 16, name).unwrap_err();
        assert!(
            matches!(&e, ConfigError::CalibrationYaml { path, .. } if path == name),
            "{e}"
        );
        let e = VelodyneCalibration::from_bytes(&[0xC3], 16, name).unwrap_err();
        assert!(
            matches!(&e, ConfigError::CalibrationIo { path, .. } if path == name),
            "{e}"
        );
    }

    #[test]
    fn full_hdl64_fields_parse_and_validate() {
        let yaml = "lasers:\n- {laser_id: 0, rot_correction: 0.05, vert_correction: -0.12, \
                    dist_correction: 1.2, dist_correction_x: 1.25, dist_correction_y: 1.18, \
                    two_pt_correction_available: true, vert_offset_correction: 0.2, \
                    horiz_offset_correction: 0.026, focal_distance: 1500, focal_slope: 1.1, \
                    min_intensity: 5.7, max_intensity: 250.2}\n\
                    - {laser_id: 1, rot_correction: 0.0, vert_correction: 0.1}\n";
        let c = VelodyneCalibration::from_yaml_str(yaml, 2).unwrap();
        let l = c.lasers[0];
        assert!(l.two_pt_correction);
        assert_eq!(
            (
                l.dist_correction_x,
                l.dist_correction_y,
                l.vert_offset,
                l.horiz_offset
            ),
            (1.25, 1.18, 0.2, 0.026)
        );
        assert_eq!((l.focal_distance, l.focal_slope), (1500.0, 1.1));
        // Clamps are floored, as ros-drivers/Nebula do.
        assert_eq!((l.min_intensity, l.max_intensity), (5.0, 250.0));
        // Defaults for a laser without the optional keys.
        let d = c.lasers[1];
        assert!(!d.two_pt_correction);
        assert_eq!(
            (d.min_intensity, d.max_intensity, d.focal_slope),
            (0.0, 255.0, 0.0)
        );
        let bad = yaml.replace("min_intensity: 5.7", "min_intensity: 251");
        let e = VelodyneCalibration::from_yaml_str(&bad, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lasers[0].max_intensity"), "{e}");
    }
}
