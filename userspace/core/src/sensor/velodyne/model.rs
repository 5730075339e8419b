//! Velodyne model detection for a capture without a configured model: the packets' product
//! byte (offset 1205) against the calibration file's laser count (16, 32, 64, 128).

#![forbid(unsafe_code)]

use super::multi;
use crate::sensor::calibration::VelodyneCalibration;
use crate::vendor::{ConfigError, SensorModel};

// ---------------------------------------------------------------------------------------------
// Model detection: the product byte against the calibration's laser count.
// ---------------------------------------------------------------------------------------------

/// Velodyne models with `lasers` lasers ([`multi::laser_count`]), in [`SensorModel::ALL`]
/// order: one for 16 (VLP-16) and 128 (VLS-128), two for 32 (VLP-32C, HDL-32E) and 64
/// (HDL-64E S2, S3), none otherwise.
pub fn models_with_lasers(lasers: usize) -> Vec<SensorModel> {
    SensorModel::ALL
        .iter()
        .copied()
        .filter(|&m| multi::laser_count(m) == lasers && lasers > 0)
        .collect()
}

/// Laser count of a Velodyne calibration YAML file's contents `calibration` (`path` names it
/// in errors): the `n` in 16, 32, 64, 128 for which [`VelodyneCalibration::from_bytes`]
/// accepts it (its `num_lasers` and `lasers` entries agree with `n`).
///
/// # Errors
/// When no count fits: the error [`VelodyneCalibration::from_bytes`] gives for
/// `prefer_lasers` lasers (naming the field: `num_lasers`, `lasers`, `lasers[i].…`), or
/// [`ConfigError::CalibrationIo`] for contents that are not UTF-8.
pub fn calibration_laser_count(
    calibration: &[u8],
    path: &std::path::Path,
    prefer_lasers: usize,
) -> Result<usize, ConfigError> {
    for n in [16, 32, 64, 128] {
        if VelodyneCalibration::from_bytes(calibration, n, path).is_ok() {
            return Ok(n);
        }
    }
    VelodyneCalibration::from_bytes(calibration, prefer_lasers.max(1), path).map(|c| c.lasers.len())
}

/// Whether [`confirm_detected_model`] looks at the calibration for `named`: a Velodyne model
/// with a known laser count. A caller reads the file only then.
pub fn detection_needs_calibration(named: SensorModel) -> bool {
    named.family() == crate::vendor::Family::Velodyne && multi::laser_count(named) != 0
}

/// Model detection for a capture without a configured model (`decode` without `--sensor`):
/// `named` is the model the packets' product byte (offset 1205) names, `calibration` the
/// contents of the calibration file `path` given. Non-Velodyne models are returned unchanged
/// ([`detection_needs_calibration`]: `calibration` is not looked at). For a Velodyne model
/// the calibration's laser count ([`calibration_laser_count`]) decides:
/// * it equals `named`'s: `named`, no warning;
/// * it differs and one Velodyne model has that many lasers ([`models_with_lasers`]): that
///   model, with a warning to show the user (firmware that sends 0x21, HDL-32E, on a VLP-16
///   exists);
/// * it differs and two models have that many lasers (32: VLP-32C or HDL-32E; 64: HDL-64E S2
///   or S3), or none: an error asking for `--sensor`.
///
/// # Errors
/// [`ConfigError::Calibration`] naming `num_lasers` and both models for the last case; the
/// calibration's own error when it fits no laser count.
pub fn confirm_detected_model(
    named: SensorModel,
    calibration: &[u8],
    path: &std::path::Path,
) -> Result<(SensorModel, Option<String>), ConfigError> {
    let expected = multi::laser_count(named);
    if !detection_needs_calibration(named) {
        return Ok((named, None));
    }
    let lasers = calibration_laser_count(calibration, path, expected)?;
    if lasers == expected {
        return Ok((named, None));
    }
    match models_with_lasers(lasers).as_slice() {
        [only] => Ok((
            *only,
            Some(format!(
                "the packets' product byte (offset 1205) names {named} ({expected} lasers) but \
                 the calibration {} has {lasers} lasers: decoding as {only} (pass --sensor to \
                 choose)",
                path.display()
            )),
        )),
        several => Err(ConfigError::Calibration {
            path: path.to_path_buf(),
            message: format!(
                "num_lasers = {lasers} contradicts the packets' product byte (offset 1205), \
                 which names {named} ({expected} lasers); a {lasers}-laser calibration fits {}; \
                 give --sensor MODEL",
                if several.is_empty() {
                    "no Velodyne model".to_owned()
                } else {
                    several
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(" or ")
                }
            ),
        }),
    }
}
