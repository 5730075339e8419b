//! Ouster sensor metadata (the JSON from the sensor's `get_metadata` / `api/v1/sensor/metadata`,
//! or the `.json` stored beside a recording).
//!
//! Three layouts are read, as ouster-sdk 1.0.1 reads them (`ouster_core/src/metadata.cpp`):
//! * **nested** (fw 2.4+ / 3.x): `sensor_info`, `beam_intrinsics`, `imu_intrinsics`,
//!   `lidar_intrinsics`, `config_params`, `lidar_data_format` objects. Firmware 3.x adds
//!   the profiles `RNG15_RFL8_NIR8_DUAL` and `FUSA_RNG15_RFL8_NIR8_DUAL`,
//!   `lidar_data_format.fps` (frames per second, which then sets the frame period) and, from
//!   3.2, `lidar_data_format.header_type` (`STANDARD` or `FUSA`; without it the FUSA profile
//!   has the FUSA header and every other profile the STANDARD one, as ouster-sdk 1.0.1
//!   decides); other new sections (`imu_data_format`, `calibration_status`, `ouster-sdk`,
//!   `user_data`, `zone_set`) and `config_params` keys carry nothing the lidar decoder needs
//!   and are ignored;
//! * **flat, new-style** (fw 2.0–2.3): the same keys at the top level, with a `data_format`
//!   object (`columns_per_frame`, `columns_per_packet`, `pixels_per_column`, `column_window`,
//!   `pixel_shift_by_row`, `udp_profile_lidar`);
//! * **flat, old-style** (fw 1.1x): only `beam_altitude_angles`, `beam_azimuth_angles`,
//!   `lidar_mode` (and possibly the transforms).
//!
//! Missing items take ouster-sdk's defaults: data format from `lidar_mode` (64 pixels per
//! column, or the beam count of `prod_line`; 16 columns per packet; window = all columns;
//! LEGACY profile); `lidar_origin_to_beam_origin_mm` by product line (OS-0 27.67, OS-1 15.806,
//! OS-2 13.762, otherwise the gen-1 12.163 mm); `beam_to_lidar_transform` = identity with
//! that offset in its x translation; `lidar_to_sensor_transform` = diag(-1, -1, 1) with a
//! 36.18 mm z translation.

use std::path::Path;

use serde_json::Value;

use super::packet::{HeaderType, PacketFormat, Profile};
use crate::vendor::ConfigError;

/// Why Ouster metadata was refused ([`OusterMetadata::from_json`],
/// [`OusterMetadata::validate`]); each message names the item, its index and value.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The text is not JSON (serde_json's message, with line and column).
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// A transform element outside its range: `field` with its index (`name[i]`), the value
    /// and the valid range (rotation [-1, 1], translation ±[`MAX_OFFSET_MM`] mm, last row
    /// `0 0 0 1`).
    #[error("{field} = {value:?} is out of range; valid {valid}")]
    OutOfRange {
        /// Field and index, e.g. `lidar_to_sensor_transform[5]`.
        field: String,
        /// The value found.
        value: f64,
        /// The valid range, in words.
        valid: String,
    },
    /// Any other invalid, missing or inconsistent item, described by the message.
    #[error("{0}")]
    Invalid(String),
}

/// [`MetadataError::Invalid`] with a formatted message.
macro_rules! invalid {
    ($($t:tt)*) => {
        MetadataError::Invalid(format!($($t)*))
    };
}

/// Default lidar-to-sensor transform (row-major 4×4, translation in mm): a 180° turn about z
/// and the lidar origin 36.18 mm above the sensor's base.
pub const DEFAULT_LIDAR_TO_SENSOR: [f64; 16] = [
    -1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 36.18, 0.0, 0.0, 0.0, 1.0,
];

/// Parsed metadata: what decoding and XYZ need.
#[derive(Clone, Debug, PartialEq)]
pub struct OusterMetadata {
    /// Product line, e.g. `OS-1-32-G` (empty if absent).
    pub prod_line: String,
    /// Product serial number, if given (compared with the packets' `prod_sn`).
    pub prod_sn: Option<u64>,
    /// Initialization id, if given (compared with the packets' `init_id`).
    pub init_id: Option<u32>,
    /// Firmware (`build_rev`), if given.
    pub build_rev: Option<String>,
    /// Lidar mode, e.g. `1024x10`, if given.
    pub lidar_mode: Option<String>,
    /// Lidar UDP port from the metadata, if given.
    pub udp_port_lidar: Option<u16>,
    /// `config_params.timestamp_mode` (Ouster sensor configuration: `TIME_FROM_INTERNAL_OSC`,
    /// `TIME_FROM_SYNC_PULSE_IN`, `TIME_FROM_PTP_1588`), when the metadata has it.
    pub timestamp_mode: Option<String>,
    /// Frames per second, `lidar_data_format.fps` (firmware 3.x), if given (1..=100).
    pub fps: Option<u32>,
    /// Packet geometry, profile and header type.
    pub format: PacketFormat,
    /// First and last valid column (inclusive; `first > last` wraps through column 0).
    pub column_window: (u16, u16),
    /// Destaggering shift of each row, columns (not used for points; kept for consumers).
    pub pixel_shift_by_row: Vec<i32>,
    /// Elevation of each beam, degrees (row 0 = top beam).
    pub beam_altitude_angles: Vec<f64>,
    /// Azimuth offset of each beam, degrees (positive = counter-clockwise seen from above, in
    /// the lidar frame before the encoder angle is applied).
    pub beam_azimuth_angles: Vec<f64>,
    /// Distance from the lidar origin to the beam origin, mm.
    pub lidar_origin_to_beam_origin_mm: f64,
    /// Beam-to-lidar transform, row-major 4×4, translation in mm.
    pub beam_to_lidar_transform: [f64; 16],
    /// Lidar-to-sensor transform, row-major 4×4, translation in mm.
    pub lidar_to_sensor_transform: [f64; 16],
}

/// Columns of a lidar mode name (`512x10` … `4096x5`).
fn mode_columns(mode: &str) -> Option<usize> {
    let cols: usize = mode.split('x').next()?.parse().ok()?;
    matches!(cols, 512 | 1024 | 2048 | 4096).then_some(cols)
}

/// Beam count of a product line such as `OS-0-128` or `OS-1-32-G`.
fn prod_line_beams(prod_line: &str) -> Option<usize> {
    prod_line.split('-').nth(2)?.parse().ok()
}

fn default_beam_origin_mm(prod_line: &str) -> f64 {
    if prod_line.starts_with("OS-0-") {
        27.67
    } else if prod_line.starts_with("OS-1-") {
        15.806
    } else if prod_line.starts_with("OS-2-") {
        13.762
    } else {
        12.163
    }
}

/// ouster-sdk's default `pixel_shift_by_row` for a column count (gen-1 OS-1-64 staggering).
fn default_pixel_shift(cols: usize, rows: usize) -> Vec<i32> {
    let k = (cols / 512 * 3) as i32;
    (0..rows).map(|r| [3 * k, 2 * k, k, 0][r % 4]).collect()
}

struct Doc<'a> {
    root: &'a Value,
    nested: bool,
}

impl<'a> Doc<'a> {
    /// Looks `key` up in `section` (nested layout) or at the top level (flat layouts).
    fn get(&self, section: &str, key: &str) -> Option<&'a Value> {
        if self.nested {
            self.root.get(section)?.get(key)
        } else {
            self.root.get(key)
        }
    }

    fn data_format(&self, key: &str) -> Option<&'a Value> {
        if self.nested {
            self.root.get("lidar_data_format")?.get(key)
        } else {
            self.root.get("data_format")?.get(key)
        }
    }
}

impl OusterMetadata {
    /// What the sensor's clock follows, from [`Self::timestamp_mode`]: internal oscillator,
    /// sync pulse in (PPS) or PTP; [`SyncSource::Unknown`](crate::msg::SyncSource::Unknown) without it or for another value.
    pub fn sync_source(&self) -> crate::msg::SyncSource {
        use crate::msg::SyncSource;
        match self.timestamp_mode.as_deref() {
            Some("TIME_FROM_INTERNAL_OSC") => SyncSource::Internal,
            Some("TIME_FROM_SYNC_PULSE_IN") => SyncSource::Pps,
            Some("TIME_FROM_PTP_1588") => SyncSource::Ptp,
            _ => SyncSource::Unknown,
        }
    }

    /// Parses a metadata file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] if not UTF-8, [`ConfigError::Calibration`] naming the
    /// first invalid item (see [`OusterMetadata::from_json`]).
    pub fn from_bytes(bytes: &[u8], source: &Path) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::from_json(text).map_err(|e| ConfigError::Calibration {
            path: source.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Parses metadata text.
    ///
    /// # Errors
    /// A message naming the item: not JSON; `lidar_mode`/`columns_per_frame` missing or not
    /// 512/1024/2048/4096; an unknown or unsupported `udp_profile_lidar`; `columns_per_packet`
    /// not in 1..=64 or not dividing into a packet ≤ 65535 bytes; `pixels_per_column` not in
    /// 1..=256; beam angle arrays missing, non-numeric or not `pixels_per_column` long; a
    /// transform that is not 16 numbers; a `column_window` outside the frame; and absurd finite
    /// values (see [`OusterMetadata::validate`]): a beam altitude beyond ±90°, a beam azimuth
    /// beyond ±[`MAX_BEAM_AZIMUTH_DEG`], `lidar_origin_to_beam_origin_mm` or a transform
    /// translation beyond ±[`MAX_OFFSET_MM`], a rotation element outside [-1, 1], a last row
    /// other than `0 0 0 1`. Each message names the field and its index.
    pub fn from_json(text: &str) -> Result<Self, MetadataError> {
        let root: Value = serde_json::from_str(text)?;
        let meta = Self::from_value(&root)?;
        meta.validate()?;
        Ok(meta)
    }

    /// [`OusterMetadata::from_json`] after the JSON parse, before [`OusterMetadata::validate`].
    fn from_value(root: &Value) -> Result<Self, MetadataError> {
        if !root.is_object() {
            return Err(MetadataError::Invalid(
                "top level is not a JSON object".into(),
            ));
        }
        let nested = root.get("beam_intrinsics").is_some() && root.get("sensor_info").is_some();
        let d = Doc { root, nested };
        let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let prod_line = string(d.get("sensor_info", "prod_line")).unwrap_or_default();
        let prod_sn = d.get("sensor_info", "prod_sn").and_then(|v| match v {
            Value::String(s) => s.parse().ok(),
            other => other.as_u64(),
        });
        let init_id = d
            .get("sensor_info", "initialization_id")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok());
        let build_rev = string(d.get("sensor_info", "build_rev"));
        let lidar_mode = string(d.get("config_params", "lidar_mode"));
        let timestamp_mode = string(d.get("config_params", "timestamp_mode"));
        let udp_port_lidar = d
            .get("config_params", "udp_port_lidar")
            .and_then(Value::as_u64)
            .and_then(|v| u16::try_from(v).ok());

        let uint = |name: &str, v: Option<&Value>| -> Result<Option<usize>, MetadataError> {
            match v {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| invalid!("{name} is not an unsigned integer: {v}")),
            }
        };
        let columns_per_frame = match uint(
            "data_format.columns_per_frame",
            d.data_format("columns_per_frame"),
        )? {
            Some(c) => c,
            None => lidar_mode
                .as_deref()
                .and_then(mode_columns)
                .ok_or_else(|| {
                    invalid!(
                        "neither data_format.columns_per_frame nor a valid lidar_mode (got {:?})",
                        lidar_mode
                    )
                })?,
        };
        if !matches!(columns_per_frame, 512 | 1024 | 2048 | 4096) {
            return Err(invalid!(
                "columns_per_frame = {columns_per_frame}; valid: 512, 1024, 2048, 4096"
            ));
        }
        let columns_per_packet = uint(
            "data_format.columns_per_packet",
            d.data_format("columns_per_packet"),
        )?
        .unwrap_or(16);
        if !(1..=64).contains(&columns_per_packet) {
            return Err(invalid!(
                "columns_per_packet = {columns_per_packet}; valid: 1..=64"
            ));
        }
        let altitude = angles(&d, "beam_altitude_angles")?;
        let azimuth = angles(&d, "beam_azimuth_angles")?;
        let pixels_per_column = match uint(
            "data_format.pixels_per_column",
            d.data_format("pixels_per_column"),
        )? {
            Some(p) => p,
            None => prod_line_beams(&prod_line).unwrap_or(altitude.len()),
        };
        if !(1..=256).contains(&pixels_per_column) {
            return Err(invalid!(
                "pixels_per_column = {pixels_per_column}; valid: 1..=256"
            ));
        }
        for (name, v) in [
            ("beam_altitude_angles", &altitude),
            ("beam_azimuth_angles", &azimuth),
        ] {
            if v.len() != pixels_per_column {
                return Err(invalid!(
                    "{name} has {} entries; pixels_per_column is {pixels_per_column}",
                    v.len()
                ));
            }
        }
        let profile = match d.data_format("udp_profile_lidar") {
            None => Profile::Legacy,
            Some(v) => {
                let s = v.as_str().unwrap_or_default();
                Profile::from_name(s).ok_or_else(|| {
                    invalid!(
                        "udp_profile_lidar {v} is not supported; valid: LEGACY, \
                         RNG19_RFL8_SIG16_NIR16, RNG19_RFL8_SIG16_NIR16_DUAL, RNG15_RFL8_NIR8, \
                         FIVE_WORD_PIXEL, RNG15_RFL8_NIR8_DUAL, FUSA_RNG15_RFL8_NIR8_DUAL"
                    )
                })?
            }
        };
        let header = match d.data_format("header_type") {
            None => HeaderType::default_for(profile),
            Some(v) => HeaderType::from_name(v.as_str().unwrap_or_default()).ok_or_else(|| {
                invalid!(
                    "lidar_data_format.header_type {v} is not supported; valid: STANDARD, FUSA"
                )
            })?,
        };
        let fps = match uint("lidar_data_format.fps", d.data_format("fps"))? {
            None => None,
            Some(f) if (1..=100).contains(&f) => Some(f as u32),
            Some(f) => return Err(invalid!("lidar_data_format.fps = {f}; valid: 1..=100")),
        };
        let format = PacketFormat {
            profile,
            header,
            pixels_per_column,
            columns_per_packet,
            columns_per_frame,
        };
        if format.packet_len() > 65_507 {
            return Err(invalid!(
                "packet of {} bytes exceeds a UDP datagram (columns_per_packet {columns_per_packet} \
                 × pixels_per_column {pixels_per_column})",
                format.packet_len()
            ));
        }
        let column_window = match d.data_format("column_window") {
            None => (0, (columns_per_frame - 1) as u16),
            Some(v) => {
                let w: Vec<u64> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_u64).collect())
                    .unwrap_or_default();
                match w[..] {
                    [a, b]
                        if (a as usize) < columns_per_frame && (b as usize) < columns_per_frame =>
                    {
                        (a as u16, b as u16)
                    }
                    _ => {
                        return Err(invalid!(
                            "data_format.column_window {v} is not two columns in 0..{columns_per_frame}"
                        ));
                    }
                }
            }
        };
        let pixel_shift_by_row = match d.data_format("pixel_shift_by_row") {
            Some(Value::Array(a)) => {
                let mut v: Vec<i32> = a
                    .iter()
                    .map(|x| x.as_i64().unwrap_or(0).clamp(-4096, 4096) as i32)
                    .collect();
                v.resize(pixels_per_column, 0);
                v
            }
            _ => default_pixel_shift(columns_per_frame, pixels_per_column),
        };
        let lidar_origin_to_beam_origin_mm =
            match d.get("beam_intrinsics", "lidar_origin_to_beam_origin_mm") {
                None => default_beam_origin_mm(&prod_line),
                Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                    invalid!("lidar_origin_to_beam_origin_mm is not a number: {v}")
                })?,
            };
        let beam_to_lidar_transform = match transform(
            d.get("beam_intrinsics", "beam_to_lidar_transform"),
            "beam_to_lidar_transform",
        )? {
            Some(t) => t,
            None => {
                let mut t = identity();
                t[3] = lidar_origin_to_beam_origin_mm;
                t
            }
        };
        let lidar_to_sensor_transform = transform(
            d.get("lidar_intrinsics", "lidar_to_sensor_transform"),
            "lidar_to_sensor_transform",
        )?
        .unwrap_or(DEFAULT_LIDAR_TO_SENSOR);
        let meta = Self {
            prod_line,
            prod_sn,
            init_id,
            build_rev,
            lidar_mode,
            udp_port_lidar,
            timestamp_mode,
            fps,
            format,
            column_window,
            pixel_shift_by_row,
            beam_altitude_angles: altitude,
            beam_azimuth_angles: azimuth,
            lidar_origin_to_beam_origin_mm,
            beam_to_lidar_transform,
            lidar_to_sensor_transform,
        };
        Ok(meta)
    }

    /// Checks the invariants [`OusterMetadata::from_json`] establishes, for metadata built or
    /// edited by hand (the fields are public): 512/1024/2048/4096 columns, 1..=64 columns per
    /// packet, 1..=256 pixels per column, one altitude and azimuth per pixel row, a column
    /// window inside the frame, a packet that fits a UDP datagram; beam altitudes within
    /// ±[`MAX_BEAM_ALTITUDE_DEG`], beam azimuths within ±[`MAX_BEAM_AZIMUTH_DEG`],
    /// `lidar_origin_to_beam_origin_mm` within ±[`MAX_OFFSET_MM`], and both transforms rigid
    /// within bounds (rotation elements in [-1, 1], translations within ±[`MAX_OFFSET_MM`] mm,
    /// last row `0 0 0 1`).
    ///
    /// # Errors
    /// [`MetadataError::OutOfRange`] for a transform element, [`MetadataError::Invalid`] with a
    /// message naming any other first violated item.
    pub fn validate(&self) -> Result<(), MetadataError> {
        let f = &self.format;
        if !matches!(f.columns_per_frame, 512 | 1024 | 2048 | 4096) {
            return Err(MetadataError::Invalid(format!(
                "columns_per_frame = {}; valid: 512, 1024, 2048, 4096",
                f.columns_per_frame
            )));
        }
        if !(1..=64).contains(&f.columns_per_packet) {
            return Err(MetadataError::Invalid(format!(
                "columns_per_packet = {}; valid: 1..=64",
                f.columns_per_packet
            )));
        }
        if !(1..=256).contains(&f.pixels_per_column) {
            return Err(MetadataError::Invalid(format!(
                "pixels_per_column = {}; valid: 1..=256",
                f.pixels_per_column
            )));
        }
        if self.beam_altitude_angles.len() != f.pixels_per_column
            || self.beam_azimuth_angles.len() != f.pixels_per_column
        {
            return Err(MetadataError::Invalid(format!(
                "beam angle arrays have {} / {} entries; pixels_per_column is {}",
                self.beam_altitude_angles.len(),
                self.beam_azimuth_angles.len(),
                f.pixels_per_column
            )));
        }
        let w = f.columns_per_frame;
        if usize::from(self.column_window.0) >= w || usize::from(self.column_window.1) >= w {
            return Err(MetadataError::Invalid(format!(
                "column_window {:?} is outside 0..{w}",
                self.column_window
            )));
        }
        if f.packet_len() > 65_507 {
            return Err(MetadataError::Invalid(format!(
                "packet of {} bytes exceeds a UDP datagram",
                f.packet_len()
            )));
        }
        for (i, a) in self.beam_altitude_angles.iter().enumerate() {
            if !(a.is_finite() && a.abs() <= MAX_BEAM_ALTITUDE_DEG) {
                return Err(MetadataError::Invalid(format!(
                    "beam_altitude_angles[{i}] = {a:?} is out of range; valid \
                     [-{MAX_BEAM_ALTITUDE_DEG}, {MAX_BEAM_ALTITUDE_DEG}] deg"
                )));
            }
        }
        for (i, a) in self.beam_azimuth_angles.iter().enumerate() {
            if !(a.is_finite() && a.abs() <= MAX_BEAM_AZIMUTH_DEG) {
                return Err(MetadataError::Invalid(format!(
                    "beam_azimuth_angles[{i}] = {a:?} is out of range; valid \
                     [-{MAX_BEAM_AZIMUTH_DEG}, {MAX_BEAM_AZIMUTH_DEG}] deg"
                )));
            }
        }
        let o = self.lidar_origin_to_beam_origin_mm;
        if !(o.is_finite() && o.abs() <= MAX_OFFSET_MM) {
            return Err(MetadataError::Invalid(format!(
                "lidar_origin_to_beam_origin_mm = {o:?} is out of range; valid \
                 [-{MAX_OFFSET_MM}, {MAX_OFFSET_MM}] mm"
            )));
        }
        check_transform("beam_to_lidar_transform", &self.beam_to_lidar_transform)?;
        check_transform("lidar_to_sensor_transform", &self.lidar_to_sensor_transform)?;
        Ok(())
    }

    /// Columns inside the column window (ouster-sdk `valid_columns_per_frame`).
    pub fn valid_columns_per_frame(&self) -> usize {
        let (a, b) = (
            usize::from(self.column_window.0),
            usize::from(self.column_window.1),
        );
        if a <= b {
            b - a + 1
        } else {
            b + (self.format.columns_per_frame - a) + 1
        }
    }

    /// Lidar packets the sensor sends per frame: those whose columns meet the column window
    /// (ouster-sdk `lidar_packets_per_frame`). 64 for 1024 columns, 16 per packet, full window.
    pub fn packets_per_frame(&self) -> usize {
        let cpp = self.format.columns_per_packet;
        let start = usize::from(self.column_window.0) / cpp;
        let end = usize::from(self.column_window.1) / cpp;
        if self.column_window.1 < self.column_window.0 {
            let max = self.format.packets_per_frame();
            if start == end {
                max
            } else {
                (max - start) + 1 + end
            }
        } else {
            end - start + 1
        }
    }
}

/// Largest beam elevation accepted, degrees: straight up or down.
pub const MAX_BEAM_ALTITUDE_DEG: f64 = 90.0;

/// Largest beam azimuth offset accepted, degrees. Ouster beams sit within a few degrees of the
/// encoder angle (about ±4° on OS0/OS1/OS2); 45° leaves room for any lens and still catches a
/// broken file.
pub const MAX_BEAM_AZIMUTH_DEG: f64 = 45.0;

/// Largest offset or translation accepted, mm: 10 m, far beyond any sensor's housing (the
/// real ones are a few cm), still small enough that nothing overflows downstream.
pub const MAX_OFFSET_MM: f64 = 10_000.0;

/// Checks a row-major 4×4 rigid transform: rotation elements in [-1, 1] (with 1e-3 slack for
/// rounding in the JSON), translations within ±[`MAX_OFFSET_MM`], last row `0 0 0 1`.
fn check_transform(name: &str, t: &[f64; 16]) -> Result<(), MetadataError> {
    for (i, &x) in t.iter().enumerate() {
        let (ok, valid) = match (i / 4, i % 4) {
            (3, 3) => (
                (x - 1.0).abs() <= 1e-6,
                "1 (homogeneous row 0 0 0 1)".to_owned(),
            ),
            (3, _) => (x.abs() <= 1e-6, "0 (homogeneous row 0 0 0 1)".to_owned()),
            (_, 3) => (
                x.abs() <= MAX_OFFSET_MM,
                format!("[-{MAX_OFFSET_MM}, {MAX_OFFSET_MM}] mm (translation)"),
            ),
            _ => (x.abs() <= 1.001, "[-1, 1] (rotation)".to_owned()),
        };
        if !(x.is_finite() && ok) {
            return Err(MetadataError::OutOfRange {
                field: format!("{name}[{i}]"),
                value: x,
                valid,
            });
        }
    }
    Ok(())
}

fn identity() -> [f64; 16] {
    let mut t = [0.0; 16];
    for i in 0..4 {
        t[i * 5] = 1.0;
    }
    t
}

fn angles(d: &Doc<'_>, key: &str) -> Result<Vec<f64>, MetadataError> {
    let v = d
        .get("beam_intrinsics", key)
        .ok_or_else(|| invalid!("{key} is missing"))?;
    let a = v
        .as_array()
        .ok_or_else(|| invalid!("{key} is not an array"))?;
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_f64()
                .filter(|f| f.is_finite() && f.abs() <= 360.0)
                .ok_or_else(|| invalid!("{key}[{i}] = {x} is not an angle in [-360, 360] deg"))
        })
        .collect()
}

fn transform(v: Option<&Value>, name: &str) -> Result<Option<[f64; 16]>, MetadataError> {
    let Some(v) = v else { return Ok(None) };
    let a = v
        .as_array()
        .ok_or_else(|| invalid!("{name} is not an array"))?;
    if a.len() != 16 {
        return Err(invalid!(
            "{name} has {} numbers, needs 16 (4×4 row-major)",
            a.len()
        ));
    }
    let mut t = [0.0; 16];
    for (i, x) in a.iter().enumerate() {
        t[i] = x
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| invalid!("{name}[{i}] = {x} is not a number"))?;
    }
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beams(n: usize) -> String {
        let v: Vec<String> = (0..n)
            .map(|i| format!("{}", (20.0 - i as f64) * 0.5))
            .collect();
        v.join(",")
    }

    #[test]
    fn old_style_takes_sdk_defaults() {
        let json = format!(
            r#"{{"lidar_mode": "1024x10", "beam_altitude_angles": [{b}],
                "beam_azimuth_angles": [{b}]}}"#,
            b = beams(64)
        );
        let m = OusterMetadata::from_json(&json).unwrap();
        assert_eq!(m.format.profile, Profile::Legacy);
        assert_eq!(
            (m.format.pixels_per_column, m.format.columns_per_packet),
            (64, 16)
        );
        assert_eq!(m.format.columns_per_frame, 1024);
        assert_eq!(m.column_window, (0, 1023));
        assert_eq!(m.lidar_origin_to_beam_origin_mm, 12.163);
        assert_eq!(m.beam_to_lidar_transform[3], 12.163);
        assert_eq!(m.lidar_to_sensor_transform, DEFAULT_LIDAR_TO_SENSOR);
        assert_eq!(&m.pixel_shift_by_row[..5], &[18, 12, 6, 0, 18]);
        assert_eq!(m.packets_per_frame(), 64);
    }

    #[test]
    fn nested_layout_and_windows() {
        let json = format!(
            r#"{{"sensor_info": {{"prod_line": "OS-2-32-U0", "prod_sn": "992210000957",
                 "initialization_id": 77, "build_rev": "v3.0.1"}},
               "beam_intrinsics": {{"beam_altitude_angles": [{b}], "beam_azimuth_angles": [{b}],
                 "lidar_origin_to_beam_origin_mm": 13.762,
                 "beam_to_lidar_transform": [1,0,0,13.762,0,1,0,0,0,0,1,0,0,0,0,1]}},
               "imu_intrinsics": {{}}, "lidar_intrinsics": {{"lidar_to_sensor_transform":
                 [-1,0,0,0,0,-1,0,0,0,0,1,38.195,0,0,0,1]}},
               "config_params": {{"lidar_mode": "2048x10", "udp_port_lidar": 7502}},
               "lidar_data_format": {{"columns_per_frame": 2048, "columns_per_packet": 16,
                 "pixels_per_column": 32, "column_window": [2000, 40],
                 "udp_profile_lidar": "RNG19_RFL8_SIG16_NIR16_DUAL"}}}}"#,
            b = beams(32)
        );
        let m = OusterMetadata::from_json(&json).unwrap();
        assert_eq!(m.prod_sn, Some(992_210_000_957));
        assert_eq!((m.init_id, m.udp_port_lidar), (Some(77), Some(7502)));
        assert_eq!(m.format.profile, Profile::Rng19Rfl8Sig16Nir16Dual);
        assert_eq!(m.lidar_to_sensor_transform[11], 38.195);
        assert_eq!(m.column_window, (2000, 40));
        assert_eq!(m.valid_columns_per_frame(), 48 + 41);
        // packets 125..=127 and 0..=2
        assert_eq!(m.packets_per_frame(), 6);
    }

    /// Firmware 3.x nested metadata: the new profiles, `header_type` (3.2+) or its default,
    /// `fps`; the sections ouster-sdk 1.0.1 writes besides (`imu_data_format`, `ouster-sdk`,
    /// `user_data`) are ignored.
    #[test]
    fn firmware_3_profiles_header_type_and_fps() {
        let json = |profile: &str, extra: &str| {
            format!(
                r#"{{"sensor_info": {{"prod_line": "OS-1-32", "build_rev": "v3.1.0",
                     "prod_sn": "122246000293", "initialization_id": 390076}},
                   "beam_intrinsics": {{"beam_altitude_angles": [{b}],
                     "beam_azimuth_angles": [{b}]}},
                   "imu_intrinsics": {{}}, "lidar_intrinsics": {{}},
                   "config_params": {{"lidar_mode": "1024x10", "header_type": "STANDARD"}},
                   "imu_data_format": {{"imu_measurements_per_packet": 8}},
                   "ouster-sdk": {{"client_version": "ouster_client 1.0.1"}}, "user_data": "",
                   "lidar_data_format": {{"columns_per_frame": 1024, "columns_per_packet": 16,
                     "pixels_per_column": 32, "udp_profile_lidar": "{profile}"{extra}}}}}"#,
                b = beams(32)
            )
        };
        let m = |p: &str, e: &str| OusterMetadata::from_json(&json(p, e));
        let f = m("FUSA_RNG15_RFL8_NIR8_DUAL", "").unwrap();
        assert_eq!(
            (f.format.profile, f.format.header, f.fps),
            (Profile::FusaRng15Rfl8Nir8Dual, HeaderType::Fusa, None)
        );
        assert_eq!(f.format.packet_len(), 32 + 16 * (12 + 32 * 8) + 32);
        let f = m("RNG15_RFL8_NIR8_DUAL", r#", "fps": 20"#).unwrap();
        assert_eq!(
            (f.format.profile, f.format.header, f.fps),
            (Profile::Rng15Rfl8Nir8Dual, HeaderType::Standard, Some(20))
        );
        let f = m("RNG15_RFL8_NIR8_DUAL", r#", "header_type": "FUSA""#).unwrap();
        assert_eq!(f.format.header, HeaderType::Fusa);
        let f = m(
            "FUSA_RNG15_RFL8_NIR8_DUAL",
            r#", "header_type": "STANDARD""#,
        )
        .unwrap();
        assert_eq!(f.format.header, HeaderType::Standard);
        let e = m("RNG15_RFL8_NIR8", r#", "header_type": "SAFE""#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lidar_data_format.header_type \"SAFE\" is not supported; valid: STANDARD, FUSA"
        );
        let e = m("RNG15_RFL8_NIR8", r#", "fps": 0"#).unwrap_err();
        assert_eq!(e.to_string(), "lidar_data_format.fps = 0; valid: 1..=100");
        assert!(
            m("OFF", "")
                .unwrap_err()
                .to_string()
                .contains("FUSA_RNG15_RFL8_NIR8_DUAL")
        );
    }

    #[test]
    fn errors_name_the_item() {
        let e = |j: &str| OusterMetadata::from_json(j).unwrap_err().to_string();
        assert!(e("[").contains("not JSON"));
        assert!(e(r#"{"lidar_mode":"1024x10"}"#).contains("beam_altitude_angles is missing"));
        let j = format!(
            r#"{{"lidar_mode":"999x10","beam_altitude_angles":[{b}],"beam_azimuth_angles":[{b}]}}"#,
            b = beams(64)
        );
        assert!(e(&j).contains("lidar_mode"), "{}", e(&j));
        let j = format!(
            r#"{{"lidar_mode":"1024x10","beam_altitude_angles":[{a}],"beam_azimuth_angles":[{b}]}}"#,
            a = beams(64),
            b = beams(63)
        );
        assert!(e(&j).contains("beam_azimuth_angles has 63"), "{}", e(&j));
        let j = format!(
            r#"{{"lidar_mode":"1024x10","beam_altitude_angles":[{b}],"beam_azimuth_angles":[{b}],
                "data_format":{{"udp_profile_lidar":"RNG99"}}}}"#,
            b = beams(64)
        );
        assert!(e(&j).contains("udp_profile_lidar"), "{}", e(&j));
        let j = format!(
            r#"{{"lidar_mode":"1024x10","beam_altitude_angles":[{b}],"beam_azimuth_angles":[{b}],
                "lidar_to_sensor_transform":[1,2,3]}}"#,
            b = beams(64)
        );
        assert!(e(&j).contains("needs 16"), "{}", e(&j));
    }

    /// Absurd finite values: each gets an error naming the field, its index and the range.
    #[test]
    fn absurd_finite_values_name_the_field() {
        let e = |extra: &str, alt: &str, az: &str| {
            let j = format!(
                r#"{{"lidar_mode":"1024x10","beam_altitude_angles":[{alt}],
                    "beam_azimuth_angles":[{az}]{extra}}}"#
            );
            OusterMetadata::from_json(&j).unwrap_err().to_string()
        };
        let b = beams(64);
        let mut big = vec!["0"; 16];
        big[5] = "1e308";
        let t = big.join(",");
        assert_eq!(
            e(&format!(r#","lidar_to_sensor_transform":[{t}]"#), &b, &b),
            "lidar_to_sensor_transform[5] = 1e308 is out of range; valid [-1, 1] (rotation)"
        );
        let mut tr: Vec<&str> = "1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1".split(',').collect();
        tr[11] = "-20000";
        let t = tr.join(",");
        assert_eq!(
            e(&format!(r#","beam_to_lidar_transform":[{t}]"#), &b, &b),
            "beam_to_lidar_transform[11] = -20000.0 is out of range; valid [-10000, 10000] mm \
             (translation)"
        );
        tr[11] = "0";
        tr[14] = "2";
        let t = tr.join(",");
        assert_eq!(
            e(&format!(r#","beam_to_lidar_transform":[{t}]"#), &b, &b),
            "beam_to_lidar_transform[14] = 2.0 is out of range; valid 0 (homogeneous row 0 0 0 1)"
        );
        assert_eq!(
            e(r#","lidar_origin_to_beam_origin_mm":1e300"#, &b, &b),
            "lidar_origin_to_beam_origin_mm = 1e300 is out of range; valid [-10000, 10000] mm"
        );
        let mut alt: Vec<String> = (0..64).map(|i| format!("{}", 10 - i)).collect();
        alt[7] = "95".into();
        assert_eq!(
            e("", &alt.join(","), &b),
            "beam_altitude_angles[7] = 95.0 is out of range; valid [-90, 90] deg"
        );
        let mut az: Vec<String> = vec!["1.5".into(); 64];
        az[63] = "-300".into();
        assert_eq!(
            e("", &b, &az.join(",")),
            "beam_azimuth_angles[63] = -300.0 is out of range; valid [-45, 45] deg"
        );
    }
}
