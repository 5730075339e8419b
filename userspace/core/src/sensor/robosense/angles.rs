//! The per-laser angle table ([`AngleTable`], 0.01° integers, rs_driver `ChanAngles`) from
//! a calibration CSV or the DIFOP, and the 0.01° azimuth wrap.

#![forbid(unsafe_code)]

use std::path::Path;

use super::TURN_CDEG;

use crate::vendor::ConfigError;

/// Per-laser angle table, 0.01° integers (rs_driver `ChanAngles`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AngleTable {
    /// Vertical angle of each laser, 0.01°.
    pub vert_cdeg: Vec<i32>,
    /// Horizontal offset of each laser, 0.01°.
    pub horiz_cdeg: Vec<i32>,
}

impl AngleTable {
    /// Parses a RoboSense angle CSV: one line per laser, `vertical[,horizontal]` in degrees
    /// (e.g. `14.94,-4.05`); values are converted to 0.01° by truncation of `f32 · 100`, as
    /// rs_driver does. Exactly `lasers` lines are needed (more are ignored).
    ///
    /// # Errors
    /// [`ConfigError::Calibration`] naming the line for a missing line, a non-number or an
    /// angle outside [−90°, 180°).
    pub fn from_csv_str(text: &str, lasers: usize, path: &Path) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError::Calibration {
            path: path.to_path_buf(),
            message,
        };
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let mut t = AngleTable {
            vert_cdeg: Vec::with_capacity(lasers),
            horiz_cdeg: Vec::with_capacity(lasers),
        };
        for i in 0..lasers {
            let line = lines
                .next()
                .ok_or_else(|| err(format!("has fewer than {lasers} lines (line {})", i + 1)))?;
            let mut it = line.split(',').map(str::trim);
            let parse = |s: Option<&str>, what: &str| -> Result<i32, ConfigError> {
                let s = s.unwrap_or("0");
                let v: f32 = if s.is_empty() {
                    0.0
                } else {
                    s.parse().map_err(|_| {
                        err(format!(
                            "line {}: {what} angle '{s}' is not a number",
                            i + 1
                        ))
                    })?
                };
                let c = (v * 100.0) as i32;
                if !v.is_finite() || !(-9000..18000).contains(&c) {
                    return Err(err(format!(
                        "line {}: {what} angle {v} is outside [-90, 180) deg",
                        i + 1
                    )));
                }
                Ok(c)
            };
            t.vert_cdeg.push(parse(it.next(), "vertical")?);
            t.horiz_cdeg.push(parse(it.next(), "horizontal")?);
        }
        Ok(t)
    }

    /// [`AngleTable::from_csv_str`] of a file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] when not UTF-8, else as [`AngleTable::from_csv_str`].
    pub fn from_bytes(bytes: &[u8], lasers: usize, source: &Path) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::from_csv_str(text, lasers, source)
    }

    /// Published channel number of each laser: its rank by vertical angle (0 = lowest).
    pub fn user_channels(&self) -> Vec<u16> {
        self.vert_cdeg
            .iter()
            .map(|a| self.vert_cdeg.iter().filter(|b| *b < a).count() as u16)
            .collect()
    }
}

/// `cdeg` reduced to [0, 36000): two compares for the usual range (−360°, 720°), a division
/// otherwise.
#[inline]
pub(super) fn wrap_cdeg(cdeg: i32) -> i32 {
    if (0..TURN_CDEG).contains(&cdeg) {
        cdeg
    } else if (TURN_CDEG..2 * TURN_CDEG).contains(&cdeg) {
        cdeg - TURN_CDEG
    } else if (-TURN_CDEG..0).contains(&cdeg) {
        cdeg + TURN_CDEG
    } else {
        cdeg.rem_euclid(TURN_CDEG)
    }
}
