//! Hesai angle corrections: the per-channel elevation and azimuth offsets (degrees) of the
//! angle-correction CSV ([`AngleCorrection`]) and the AT128 binary correction file with its
//! mirror fields ([`At128Correction`], 1/25600° units), and why a file is refused
//! ([`CorrectionError`]). Sources: the Hesai user manuals and Nebula's calibration loaders.

#![forbid(unsafe_code)]

use std::path::Path;

use crate::vendor::ConfigError;

/// Why a Hesai angle-correction file was refused: [`AngleCorrection::parse`] (CSV, lines
/// counted from 1 with the header) and [`At128Correction::parse`] (AT128 `.dat`, byte offsets
/// counted from the `EE FF` delimiter).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorrectionError {
    /// A CSV line that is not `id,elevation,azimuth` with an integer id and two numbers.
    #[error("line {line}: expected `id,elevation,azimuth`: {text}")]
    BadLine {
        /// Line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A CSV channel id outside `1..=channels`.
    #[error("line {line}: channel id {id} outside 1..={channels}")]
    ChannelId {
        /// Line number.
        line: usize,
        /// The id found.
        id: usize,
        /// The model's channel count.
        channels: usize,
    },
    /// A CSV elevation or azimuth outside ±180° (or not finite).
    #[error("line {line}: angle outside ±180°")]
    Angle {
        /// Line number.
        line: usize,
    },
    /// A CSV channel id given twice.
    #[error("line {line}: duplicate channel id {id}")]
    DuplicateChannel {
        /// Line number of the second occurrence.
        line: usize,
        /// The channel id.
        id: usize,
    },
    /// A channel the CSV does not list (the first one missing).
    #[error("channel {channel} missing (need {channels})")]
    MissingChannel {
        /// Channel id, from 1.
        channel: usize,
        /// The model's channel count.
        channels: usize,
    },
    /// No `EE FF` delimiter in the `.dat` file.
    #[error("no EE FF delimiter")]
    NoDelimiter,
    /// A `.dat` format version other than x.5.
    #[error("version {major}.{minor} unsupported (need x.5)")]
    Version {
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// The `.dat` file's channel count differs from the model's.
    #[error("{found} channels, model has {expected}")]
    ChannelCount {
        /// Channels in the file.
        found: u8,
        /// The model's channel count.
        expected: usize,
    },
    /// No mirror, or more than 8 mirrors or fields.
    #[error("{mirrors} mirrors / {fields} fields (max 8)")]
    Mirrors {
        /// Mirrors in the file.
        mirrors: u8,
        /// Fields (frames) in the file.
        fields: u8,
    },
    /// The `.dat` file ends before a table it announces.
    #[error("file ends at byte {len} (need {need})")]
    Truncated {
        /// Bytes from the delimiter to the end of the file.
        len: usize,
        /// Bytes the next table needs.
        need: usize,
    },
}
// ---------------------------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------------------------

/// Angle-correction table: per channel, elevation and azimuth offset, degrees.
///
/// File format (Hesai "angle correction" CSV, as shipped with the sensors and in Nebula's
/// `calibration/` folder): one header line, then one row per channel
/// `id,elevation_deg,azimuth_offset_deg` with `id` 1-based. Extra columns are ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct AngleCorrection {
    /// Elevation of each channel, degrees.
    pub elevation_deg: Vec<f32>,
    /// Azimuth offset of each channel, degrees (added to the block azimuth).
    pub azimuth_deg: Vec<f32>,
}

impl AngleCorrection {
    /// Parses CSV text for `channels` channels.
    ///
    /// # Errors
    /// A message naming the first bad line: unparsable numbers, an id outside `1..=channels`,
    /// a duplicate id, a missing channel, or an angle outside ±180°.
    pub fn parse(text: &str, channels: usize) -> Result<Self, CorrectionError> {
        let mut el = vec![f32::NAN; channels];
        let mut az = vec![f32::NAN; channels];
        for (i, line) in text.lines().enumerate().skip(1) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let bad = || CorrectionError::BadLine {
                line: i + 1,
                text: line.to_owned(),
            };
            let (Some(id), Some(e), Some(a)) = (cols.first(), cols.get(1), cols.get(2)) else {
                return Err(bad());
            };
            let id: usize = id.parse().map_err(|_| bad())?;
            let e: f32 = e.parse().map_err(|_| bad())?;
            let a: f32 = a.parse().map_err(|_| bad())?;
            if !(1..=channels).contains(&id) {
                return Err(CorrectionError::ChannelId {
                    line: i + 1,
                    id,
                    channels,
                });
            }
            if !(e.abs() <= 180.0 && a.abs() <= 180.0) {
                return Err(CorrectionError::Angle { line: i + 1 });
            }
            if !el[id - 1].is_nan() {
                return Err(CorrectionError::DuplicateChannel { line: i + 1, id });
            }
            el[id - 1] = e;
            az[id - 1] = a;
        }
        if let Some(missing) = el.iter().position(|v| v.is_nan()) {
            return Err(CorrectionError::MissingChannel {
                channel: missing + 1,
                channels,
            });
        }
        Ok(Self {
            elevation_deg: el,
            azimuth_deg: az,
        })
    }

    /// Parses a CSV file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] (not UTF-8) or [`ConfigError::Calibration`] (see
    /// [`Self::parse`]).
    pub fn from_bytes(bytes: &[u8], channels: usize, source: &Path) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::parse(text, channels).map_err(|e| ConfigError::Calibration {
            path: source.to_path_buf(),
            message: e.to_string(),
        })
    }
}

/// AT128 angle-correction file (binary, the `.dat` the sensor serves; format version 1.5), as
/// read by Nebula's `HesaiCorrection::load_from_bytes` and Hesai's SDK:
///
/// | offset (from `EE FF`) | size | field |
/// |---|---|---|
/// | 0 | 2 | delimiter `EE FF` |
/// | 2, 3 | 1 + 1 | version major, minor (5) |
/// | 4 | 1 | channel count C (128) |
/// | 5 | 1 | mirror count M (≤ 8) |
/// | 6 | 1 | frame (field) count F (≤ 8) |
/// | 7 | 8 | frame config |
/// | 15 | 1 | resolution R (multiplies every value below) |
/// | 16 | 4·M | field start azimuths, u32 LE, 0.01°/256 |
/// | .. | 4·M | field end azimuths, u32 LE |
/// | .. | 4·C | channel azimuth, i32 LE, 0.01°/256 |
/// | .. | 4·C | channel elevation, i32 LE, 0.01°/256 |
/// | .. | 180·C | azimuth adjustment, i8, 0.01° (per channel, per 2° of encoder azimuth) |
/// | .. | 180·C | elevation adjustment, i8, 0.01° |
/// | .. | 32 | SHA-256 |
///
/// Corrected azimuth of channel c at encoder azimuth a (field f with start ≤ a ≤ end):
/// `(a − start_f)·2 − azimuth_c + adj_az(c, a)·256`, elevation `elevation_c + adj_el(c, a)·256`,
/// both in 0.01°/256; `adj(c, a)` interpolates linearly between the entries `⌊a/51200⌋` and the
/// next one, rounded (Nebula `get_azimuth_adjust_v3`). Deviation: Nebula multiplies the i8
/// adjustments by R in i8 (wrapping for R > 1); we do it in i32.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At128Correction {
    /// Field start / end encoder azimuths, 0.01°/256.
    pub fields: Vec<(i64, i64)>,
    /// Channel azimuth, 0.01°/256.
    pub azimuth: Vec<i32>,
    /// Channel elevation, 0.01°/256.
    pub elevation: Vec<i32>,
    /// Azimuth adjustments, 0.01° (180 per channel).
    pub azimuth_adjust: Vec<i32>,
    /// Elevation adjustments, 0.01° (180 per channel).
    pub elevation_adjust: Vec<i32>,
}

/// Encoder azimuth units per turn for AT128 (360° in 0.01°/256).
pub const AT128_UNITS: i64 = 360 * 25_600;

impl At128Correction {
    /// Parses the binary file contents for `channels` channels.
    ///
    /// # Errors
    /// A message: no `EE FF` delimiter, version other than 1.5, channel count mismatch, more
    /// than 8 mirrors/fields, or the file ends early.
    pub fn parse(buf: &[u8], channels: usize) -> Result<Self, CorrectionError> {
        let start = buf
            .windows(2)
            .position(|w| w == [0xEE, 0xFF])
            .ok_or(CorrectionError::NoDelimiter)?;
        let b = &buf[start..];
        let get = |o: usize, n: usize| {
            b.get(o..o + n).ok_or(CorrectionError::Truncated {
                len: b.len(),
                need: o + n,
            })
        };
        let hdr = get(0, 16)?;
        let (minor, ch, mirrors, frames, res) = (hdr[3], hdr[4], hdr[5], hdr[6], hdr[15]);
        if minor != 5 {
            return Err(CorrectionError::Version {
                major: hdr[2],
                minor,
            });
        }
        if usize::from(ch) != channels {
            return Err(CorrectionError::ChannelCount {
                found: ch,
                expected: channels,
            });
        }
        if mirrors == 0 || mirrors > 8 || frames > 8 {
            return Err(CorrectionError::Mirrors {
                mirrors,
                fields: frames,
            });
        }
        let (m, c, r) = (usize::from(mirrors), channels, i64::from(res.max(1)));
        let word = |o: usize| -> Result<u32, CorrectionError> {
            let w = get(o, 4)?;
            Ok(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        let mut o = 16;
        let mut starts = Vec::with_capacity(m);
        for k in 0..m {
            starts.push(i64::from(word(o + 4 * k)?) * r);
        }
        o += 4 * m;
        let mut fields = Vec::with_capacity(m);
        for (k, s) in starts.into_iter().enumerate() {
            fields.push((s, i64::from(word(o + 4 * k)?) * r));
        }
        fields.truncate(usize::from(frames).min(m));
        o += 4 * m;
        let ints = |o: usize| -> Result<Vec<i32>, CorrectionError> {
            (0..c)
                .map(|k| Ok((word(o + 4 * k)? as i32).wrapping_mul(res.max(1).into())))
                .collect()
        };
        let azimuth = ints(o)?;
        let elevation = ints(o + 4 * c)?;
        o += 8 * c;
        let bytes = |o: usize| -> Result<Vec<i32>, CorrectionError> {
            Ok(get(o, 180 * c)?
                .iter()
                .map(|&v| i32::from(v as i8) * i32::from(res.max(1)))
                .collect())
        };
        Ok(Self {
            fields,
            azimuth,
            elevation,
            azimuth_adjust: bytes(o)?,
            elevation_adjust: bytes(o + 180 * c)?,
        })
    }

    /// Parses a `.dat` file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::Calibration`] (see [`Self::parse`]).
    pub fn from_bytes(bytes: &[u8], channels: usize, source: &Path) -> Result<Self, ConfigError> {
        Self::parse(bytes, channels).map_err(|e| ConfigError::Calibration {
            path: source.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Interpolated adjustment (0.01°) of channel `ch` at encoder azimuth `a` (0.01°/256).
    fn adjust(table: &[i32], ch: usize, a: u32) -> i32 {
        const STEP: u32 = 200 * 256;
        let i = (a as f32 / STEP as f32).floor() as u32;
        let k = a.saturating_sub(i * STEP) as f32 / STEP as f32;
        let at = |j: u32| table.get(ch * 180 + j as usize).copied().unwrap_or(0) as f32;
        ((1.0 - k) * at(i) + k * at(i + 1)).round() as i32
    }

    /// The field (mirror) whose encoder range holds `a`.
    fn field(&self, a: u32) -> Option<(i64, i64)> {
        let a = i64::from(a);
        self.fields.iter().copied().find(|&(s, e)| {
            if s == e {
                true
            } else if e < s {
                a <= e || s <= a
            } else {
                s <= a && a <= e
            }
        })
    }

    /// Corrected `(azimuth, elevation)` of channel `ch` at encoder azimuth `a`, 0.01°/256;
    /// azimuth in `[0, AT128_UNITS)`. `None` when `a` is in no field.
    pub fn corrected(&self, ch: usize, a: u32) -> Option<(i64, i64)> {
        let (start, _) = self.field(a)?;
        let az = (i64::from(a) - start) * 2 - i64::from(*self.azimuth.get(ch)?)
            + i64::from(Self::adjust(&self.azimuth_adjust, ch, a)) * 256;
        let el = i64::from(*self.elevation.get(ch)?)
            + i64::from(Self::adjust(&self.elevation_adjust, ch, a)) * 256;
        Some((az.rem_euclid(AT128_UNITS), el))
    }
}
