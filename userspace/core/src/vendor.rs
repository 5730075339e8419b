//! The neutral types every vendor module shares, below the vendors and the dispatcher
//! ([`crate::sensor`]): sensor models and families, their range gate rule, the per-sensor
//! configuration (of the validated types of [`crate::valid`]), decoding options, return modes, configuration errors, the decode counters and
//! the [`VendorDecoder`] contract. Nothing here knows a vendor's packet layout.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::HostTime;
use crate::frame::Frame;
use crate::layout::PointType;
pub use crate::scan::Rejection;
use crate::valid::{Degrees, Fov, FrameTimeout, Metres, RangeGate};

/// Sensor families; each has its own decoder module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Velodyne ([`crate::sensor::velodyne`]).
    Velodyne,
    /// Hesai ([`crate::sensor::hesai`]).
    Hesai,
    /// Ouster ([`crate::sensor::ouster`]).
    Ouster,
    /// RoboSense ([`crate::sensor::robosense`]).
    Robosense,
}

macro_rules! models {
    ($( $(#[$doc:meta])* $v:ident => $family:ident, $name:literal, [$($alias:literal),*]; )*) => {
        /// Supported sensor models. The configured model always wins over what a packet says
        /// (see the VLP-16 capture whose product byte claims HDL-32E).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum SensorModel {
            $( $(#[$doc])* $v, )*
        }

        impl SensorModel {
            /// Every supported model, in documentation order.
            pub const ALL: &'static [SensorModel] = &[$(SensorModel::$v),*];

            /// The model's family (which decoder module handles it).
            pub const fn family(self) -> Family {
                match self { $(SensorModel::$v => Family::$family,)* }
            }

            /// Canonical name, as printed and accepted by the CLI and config files.
            pub const fn name(self) -> &'static str {
                match self { $(SensorModel::$v => $name,)* }
            }

            fn lookup(norm: &str) -> Option<SensorModel> {
                $( if normalise($name) == norm $(|| normalise($alias) == norm)* {
                    return Some(SensorModel::$v);
                } )*
                None
            }
        }
    };
}

models! {
    /// Velodyne VLP-16 (Puck): 16 lasers, 1206-byte data packets.
    Vlp16 => Velodyne, "VLP16", ["puck"];
    /// Velodyne VLP-32C (Ultra Puck): 32 lasers, 1206-byte data packets.
    Vlp32c => Velodyne, "VLP32C", ["vlp32", "ultrapuck"];
    /// Velodyne HDL-32E: 32 lasers, 1206-byte data packets.
    Hdl32e => Velodyne, "HDL32E", ["hdl32"];
    /// Velodyne HDL-64E S2 (S2.1): 64 lasers in upper/lower blocks, per-laser calibration.
    Hdl64eS2 => Velodyne, "HDL64E_S2", ["hdl64es2", "hdl64e"];
    /// Velodyne HDL-64E S3: 64 lasers in upper/lower blocks, per-laser calibration.
    Hdl64eS3 => Velodyne, "HDL64E_S3", ["hdl64es3"];
    /// Velodyne VLS-128 (Alpha Prime): 128 lasers, 1206-byte data packets.
    Vls128 => Velodyne, "VLS128", ["alphaprime"];
    /// Hesai Pandar40P.
    Pandar40p => Hesai, "Pandar40P", [];
    /// Hesai Pandar64.
    Pandar64 => Hesai, "Pandar64", [];
    /// Hesai PandarQT64.
    PandarQt64 => Hesai, "PandarQT64", ["qt64"];
    /// Hesai PandarQT128 (QT128C2X).
    PandarQt128 => Hesai, "PandarQT128", ["qt128"];
    /// Hesai PandarXT16.
    PandarXt16 => Hesai, "PandarXT16", ["xt16"];
    /// Hesai PandarXT32.
    PandarXt32 => Hesai, "PandarXT32", ["xt32"];
    /// Hesai PandarXT32M (XT32M2X).
    PandarXt32m => Hesai, "PandarXT32M", ["xt32m"];
    /// Hesai Pandar128E4X / OT128.
    Pandar128e4x => Hesai, "Pandar128E4X", ["ot128", "pandar128"];
    /// Hesai AT128 (AT128E2X).
    At128 => Hesai, "AT128", ["pandarat128", "at128e2x"];
    /// Ouster OS0/OS1/OS2 (any beam count and UDP profile, from the metadata JSON).
    Ouster => Ouster, "Ouster", ["os0", "os1", "os2", "os"];
    /// RoboSense RS-LiDAR-16.
    Rs16 => Robosense, "RS16", ["rslidar16"];
    /// RoboSense RS-LiDAR-32.
    Rs32 => Robosense, "RS32", ["rslidar32"];
    /// RoboSense RS-Bpearl.
    Bpearl => Robosense, "Bpearl", ["rsbp"];
    /// RoboSense RS-Helios (32 beams).
    Helios => Robosense, "Helios", ["helios32"];
    /// RoboSense RS-Helios-16P.
    Helios16p => Robosense, "Helios16P", [];
}

/// Lower-cases and drops `-`, `_` and spaces, so `VLP-16`, `vlp_16` and `VLP16` compare equal.
fn normalise(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .collect::<String>()
        .to_ascii_lowercase()
}

impl SensorModel {
    /// Factory default UDP destination port of data packets (Velodyne 2368, Hesai 2368,
    /// Ouster lidar 7502, RoboSense MSOP 6699).
    pub const fn default_data_port(self) -> u16 {
        match self.family() {
            Family::Velodyne | Family::Hesai => 2368,
            Family::Ouster => 7502,
            Family::Robosense => 6699,
        }
    }

    /// Factory default UDP destination port of the model's second packet stream that the same
    /// pipeline decodes, if it has one: RoboSense DIFOP 7788 (device information: the angle
    /// table that replaces the calibration CSV; RS-LiDAR-16/32, RS-Bpearl and RS-Helios user
    /// manuals, "DIFOP"). `None` for the others (see [`Self::default_health_port`] for
    /// Velodyne's and Ouster's second stream).
    pub const fn default_extra_port(self) -> Option<u16> {
        match self.family() {
            Family::Robosense => Some(7788),
            Family::Velodyne | Family::Hesai | Family::Ouster => None,
        }
    }

    /// Factory default UDP destination port of the model's health stream, read by the
    /// pipeline when the sensor uses its default data port: Velodyne position packets 8308
    /// (PPS state, `$GPRMC`: VLP-16 user manual, "Position Packet"), Ouster IMU 7503 (Ouster
    /// sensor documentation, `udp_port_imu`). `None` for Hesai and RoboSense.
    pub const fn default_health_port(self) -> Option<u16> {
        match self.family() {
            Family::Velodyne => Some(8308),
            Family::Ouster => Some(7503),
            Family::Hesai | Family::Robosense => None,
        }
    }
}

impl SensorModel {
    /// The model's measurement range from its vendor's datasheet / user manual, `(min, max)` in
    /// metres: the default of [`SensorConfig::range`] ([`SensorModel::datasheet_range`]).
    /// Where a datasheet gives no minimum, `min` is 0 (a range of 0 is "no return" and is always
    /// dropped). Sources, per model, in `docs/sensors.md` ("Measurement range"):
    ///
    /// - Velodyne user manuals (Specifications): VLP-16 up to 100 m, VLP-32C up to 200 m,
    ///   HDL-32E 0.05 to 100 m ("valid data range"), HDL-64E S2/S3 up to 120 m, VLS-128 (Alpha
    ///   Prime) up to 245 m;
    /// - Hesai user manuals (Specifications), the same limits as Nebula's per-model `SensorT`:
    ///   Pandar40P and Pandar64 0.3 to 200 m, PandarQT64 0.1 to 60 m, PandarQT128 0.05 to 50 m,
    ///   PandarXT16/XT32 0.05 to 120 m, PandarXT32M 0.5 to 300 m, Pandar128E4X 0.1 to 230 m,
    ///   AT128 1 to 180 m;
    /// - Ouster (one model for OS0/OS1/OS2): up to 400 m, above every product line's datasheet
    ///   maximum; no minimum (the sensor reports 0, no return, below its own minimum);
    /// - RoboSense user manuals, the same limits as `rs_driver`'s per-model clamps: RS-LiDAR-16
    ///   0.2 to 150 m, RS-LiDAR-32 0.4 to 200 m, RS-Bpearl 0.1 to 100 m, RS-Helios and
    ///   RS-Helios-16P 0.2 to 150 m.
    pub fn datasheet_range_m(self) -> (f32, f32) {
        match self {
            SensorModel::Vlp16 => (0.0, 100.0),
            SensorModel::Vlp32c => (0.0, 200.0),
            SensorModel::Hdl32e => (0.05, 100.0),
            SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 => (0.0, 120.0),
            SensorModel::Vls128 => (0.0, 245.0),
            SensorModel::Ouster => (0.0, 400.0),
            SensorModel::Rs16 => (0.2, 150.0),
            SensorModel::Rs32 => (0.4, 200.0),
            SensorModel::Bpearl => (0.1, 100.0),
            SensorModel::Helios | SensorModel::Helios16p => (0.2, 150.0),
            SensorModel::Pandar40p | SensorModel::Pandar64 => (0.3, 200.0),
            SensorModel::PandarQt64 => (0.1, 60.0),
            SensorModel::PandarQt128 => (0.05, 50.0),
            SensorModel::PandarXt16 | SensorModel::PandarXt32 => (0.05, 120.0),
            SensorModel::PandarXt32m => (0.5, 300.0),
            SensorModel::Pandar128e4x => (0.1, 230.0),
            SensorModel::At128 => (1.0, 180.0),
        }
    }
}

pub use crate::valid::MAX_RANGE_M;

/// A range gate whose minimum is not below its maximum: the message names the field, its
/// value, the valid range and the model's datasheet range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RangeGateError(String);

impl SensorModel {
    /// The model's datasheet range ([`SensorModel::datasheet_range_m`]) as a gate: the default
    /// of [`SensorConfig::range`].
    pub fn datasheet_range(self) -> RangeGate {
        let (lo, hi) = self.datasheet_range_m();
        Metres::new(lo)
            .and_then(|lo| RangeGate::new(lo, Metres::new(hi)?))
            .unwrap_or(RangeGate::FULL)
    }

    /// The sensor's range gate from `min` and `max`, each defaulting to the model's datasheet
    /// range ([`SensorModel::datasheet_range_m`]): the one rule of `run` (flags and
    /// `[[sensors]]`), `decode` and Python; `names` are the two fields as the caller's source
    /// names them (`--min-range`, `sensors[0].max_range`).
    ///
    /// # Errors
    /// [`RangeGateError`], naming the field at fault, its value and its valid range: the minimum
    /// when it is at or above a maximum that was not given, else the maximum.
    pub fn range_gate(
        self,
        min: Option<Metres>,
        max: Option<Metres>,
        names: (&str, &str),
    ) -> Result<RangeGate, RangeGateError> {
        let (dmin, dmax) = self.datasheet_range_m();
        let datasheet = self.datasheet_range();
        let lo = min.unwrap_or(datasheet.min());
        let hi = max.unwrap_or(datasheet.max());
        // A minimum at or above a maximum that was not given is the minimum's fault.
        let ceiling = if max.is_some() { MAX_RANGE_M } else { hi.get() };
        if lo.get() >= ceiling {
            return Err(RangeGateError(format!(
                "{}: {lo} is out of range; valid [0, {ceiling}) m (the {} datasheet range is \
                 {dmin} to {dmax} m)",
                names.0,
                self.name()
            )));
        }
        RangeGate::new(lo, hi).map_err(|e| {
            RangeGateError(format!(
                "{}: {e} (the {} datasheet range is {dmin} to {dmax} m)",
                names.1,
                self.name()
            ))
        })
    }
}

/// A calibration or metadata file's contents as UTF-8 text (`source` names the file in the
/// error). The bytes come from the caller: core does no I/O (the daemon reads files with
/// `lidarxdp::calibration::read`, bounded and non-blocking).
///
/// # Errors
/// [`ConfigError::CalibrationIo`] (kind `InvalidData`) naming `source` when the bytes are not
/// UTF-8.
pub fn calibration_text<'a>(bytes: &'a [u8], source: &Path) -> Result<&'a str, ConfigError> {
    std::str::from_utf8(bytes).map_err(|e| ConfigError::CalibrationIo {
        path: source.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// Which clock a frame's [`crate::frame::FrameHeader::start_ns`] is on (`stamp = "sensor"` /
/// `"host"`, `--stamp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stamp {
    /// The sensor's clock: the time of the frame's first firing from the packets' time stamps
    /// (default).
    #[default]
    Sensor,
    /// The host's receive time of the frame's first packet (`host_ns`, CLOCK_REALTIME; offline,
    /// the pcap record time). Points' `time_stamp` stay relative to the frame's first firing.
    Host,
}

impl FromStr for Stamp {
    type Err = ParseEnumError;

    /// `sensor` or `host` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match normalise(s).as_str() {
            "sensor" => Ok(Stamp::Sensor),
            "host" => Ok(Stamp::Host),
            _ => Err(ParseEnumError {
                what: "stamp",
                given: s.into(),
                valid: "sensor, host",
            }),
        }
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stamp::Sensor => "sensor",
            Stamp::Host => "host",
        })
    }
}

impl<'de> serde::Deserialize<'de> for Stamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for SensorModel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for SensorModel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A string that names no supported model or return mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{given}'; valid: {valid}")]
pub struct ParseEnumError {
    what: &'static str,
    given: String,
    valid: &'static str,
}

impl FromStr for SensorModel {
    type Err = ParseEnumError;

    /// Accepts the canonical names and aliases, case-insensitive, `-`/`_`/spaces ignored
    /// (`VLP16`, `vlp-16`, `pandar_xt32`, `OT128`, `os1`, ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SensorModel::lookup(&normalise(s)).ok_or_else(|| ParseEnumError {
            what: "sensor model",
            given: s.into(),
            valid: "VLP16, VLP32C, HDL32E, HDL64E_S2, HDL64E_S3, VLS128, Pandar40P, Pandar64, \
                    PandarQT64, PandarQT128, PandarXT16, PandarXT32, PandarXT32M, Pandar128E4X, \
                    AT128, Ouster, RS16, RS32, Bpearl, Helios, Helios16P",
        })
    }
}

impl fmt::Display for SensorModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Return mode of a sensor, detected per packet where the format carries it (Velodyne byte
/// 1204: 0x37 strongest, 0x38 last, 0x39 dual, VLP-16 manual section 9; Hesai tail "return
/// mode" byte; RoboSense `return_mode`; Ouster from the metadata's UDP profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReturnMode {
    /// Strongest return only.
    Strongest,
    /// Last return only.
    Last,
    /// First return only.
    First,
    /// Dual: last and strongest returns (Velodyne 0x39, Hesai 0x39).
    Dual,
    /// Dual: first and last returns.
    FirstLast,
    /// Dual: first and strongest returns.
    FirstStrongest,
    /// Triple: first, last and strongest returns.
    Triple,
}

impl ReturnMode {
    /// Returns per firing carried by the packet in this mode (1, 2 or 3).
    pub const fn returns(self) -> usize {
        match self {
            ReturnMode::Strongest | ReturnMode::Last | ReturnMode::First => 1,
            ReturnMode::Dual | ReturnMode::FirstLast | ReturnMode::FirstStrongest => 2,
            ReturnMode::Triple => 3,
        }
    }
}

impl FromStr for ReturnMode {
    type Err = ParseEnumError;

    /// Accepts `strongest`, `last`, `first`, `dual`, `first-last`, `first-strongest`, `triple`
    /// (case-insensitive, `-`/`_` ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match normalise(s).as_str() {
            "strongest" => Ok(ReturnMode::Strongest),
            "last" => Ok(ReturnMode::Last),
            "first" => Ok(ReturnMode::First),
            "dual" | "laststrongest" => Ok(ReturnMode::Dual),
            "firstlast" => Ok(ReturnMode::FirstLast),
            "firststrongest" => Ok(ReturnMode::FirstStrongest),
            "triple" => Ok(ReturnMode::Triple),
            _ => Err(ParseEnumError {
                what: "return mode",
                given: s.into(),
                valid: "Strongest, Last, First, Dual, FirstLast, FirstStrongest, Triple",
            }),
        }
    }
}

impl fmt::Display for ReturnMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReturnMode::Strongest => "Strongest",
            ReturnMode::Last => "Last",
            ReturnMode::First => "First",
            ReturnMode::Dual => "Dual",
            ReturnMode::FirstLast => "FirstLast",
            ReturnMode::FirstStrongest => "FirstStrongest",
            ReturnMode::Triple => "Triple",
        })
    }
}

/// Which rules the Velodyne decoders follow where Tier IV Nebula and the manufacturer's
/// manuals differ (`docs/sensors.md`, "Velodyne firing timing"). Other vendors ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeFlavor {
    /// Nebula's `Vlp16Decoder`, `Vlp32Decoder` (VLP-32C, HDL-32E, HDL-64E) and
    /// `Vls128Decoder`, bit for bit (`--nebula-compat`, for comparing with Autoware): the last
    /// block (single) / block 10 (dual) is not interpolated, an odd dual block takes the next
    /// pair's azimuth without interpolation, HDL-32E/HDL-64E lasers are spread as the
    /// VLP-32C's (`2.304/55.296` per slot), VLS-128 banks interpolate with the next block's
    /// difference; in VLP-16 dual mode the return with the *longer* range is labelled "first"
    /// (`First*`); `--fov` skips whole blocks outside it first (VLP-32C, HDL-32E, HDL-64E:
    /// on the raw block azimuth only, so points up to one block advance plus the laser's
    /// `rot_correction` outside the field of view remain, as in Nebula).
    Nebula,
    /// The manufacturers' manuals (default): every laser is interpolated between its firing
    /// sequence's azimuth and the next sequence's with its own firing time (VLP-16 63-9243
    /// §9, VLP-32C 63-9325 §9, HDL-32E 63-9113 appendix "firing timing": 1.152 µs per laser
    /// in a 46.08 µs cycle, VLS-128 63-9480 §9: the four banks of a sequence share its
    /// azimuth and advance); the last sequence of a packet reuses the previous advance; in
    /// dual mode the shorter range is "first" and points come out per firing sequence (each
    /// channel's time stamps non-decreasing); `--fov` filters every point on its corrected
    /// azimuth.
    #[default]
    Manual,
}

impl DecodeFlavor {
    /// The rules `--nebula-compat` (config `nebula_compat`) selects: [`DecodeFlavor::Nebula`]
    /// when set, else [`DecodeFlavor::Manual`].
    pub fn from_nebula_compat(nebula_compat: bool) -> Self {
        if nebula_compat {
            DecodeFlavor::Nebula
        } else {
            DecodeFlavor::Manual
        }
    }
}

/// Per-sensor configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorConfig {
    /// Index of the sensor in the daemon configuration; copied into every [`Frame`].
    pub sensor_id: u16,
    /// Sensor model; wins over the packet's product-id byte.
    pub model: SensorModel,
    /// The calibration / metadata file (Velodyne YAML, see [`crate::sensor::calibration`]; Hesai CSV or
    /// AT128 `.dat`; Ouster metadata JSON; RoboSense CSV). Core never opens it: it names the
    /// file in errors, and the caller passes its contents to [`crate::sensor::ScanPipeline::new`].
    pub calibration: PathBuf,
    /// Frame boundary azimuth, degrees, [0, 360] (360 ≡ 0); default 0.
    pub cut_angle: Degrees,
    /// Host-time silence that closes a frame, 1 ms..=60 s; default 200 ms.
    pub frame_timeout: FrameTimeout,
    /// The range gate, metres: points at its minimum or closer and at its maximum or farther
    /// are dropped (Hesai keeps both bounds, as Nebula; see [`crate::sensor::hesai`]); default
    /// the model's datasheet range ([`SensorModel::datasheet_range`]).
    pub range: RangeGate,
    /// Clock of the frames' `start_ns`; default [`Stamp::Sensor`].
    pub stamp: Stamp,
    /// The layout the decoder writes the points in ([`crate::layout`]); default
    /// [`PointType::Autoware`].
    pub point_type: PointType,
}

impl SensorConfig {
    /// A configuration with the defaults: cut 0°, timeout 200 ms, the model's datasheet range
    /// ([`SensorModel::datasheet_range`]), sensor-clock stamps.
    pub fn new(sensor_id: u16, model: SensorModel, calibration: impl Into<PathBuf>) -> Self {
        Self {
            sensor_id,
            model,
            calibration: calibration.into(),
            cut_angle: Degrees::default(),
            frame_timeout: FrameTimeout::DEFAULT,
            range: model.datasheet_range(),
            stamp: Stamp::Sensor,
            point_type: PointType::Autoware,
        }
    }
}

/// Extra decoding options that are not part of a sensor's deployment configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PipelineOptions {
    /// Velodyne: manual (default) or Nebula-compatible (`--nebula-compat`) rules.
    pub flavor: DecodeFlavor,
    /// Field of view, inclusive, on the corrected point azimuth; `min > max` wraps through 0°
    /// (Nebula `cloud_min_angle`/`cloud_max_angle`). `None` (default) keeps all azimuths. With
    /// [`DecodeFlavor::Nebula`] the Velodyne decoders skip whole blocks outside `[min, max]`
    /// as Nebula does (see there).
    pub fov: Option<Fov>,
    /// Hesai only: skip the body/tail CRC-32 check of models that carry one (QT128, OT128).
    /// Default `false`: a CRC mismatch makes the packet malformed. See [`crate::sensor::hesai`].
    pub hesai_skip_crc: bool,
}

/// An invalid configuration or calibration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A field is outside its valid range.
    #[error("{field} = {value} is out of range; valid: {valid}")]
    OutOfRange {
        /// Field name, e.g. `cut_angle` or `lasers[3].vert_correction`.
        field: String,
        /// The rejected value.
        value: String,
        /// The valid range, with unit.
        valid: String,
    },
    /// The calibration file cannot be read.
    #[error("cannot read calibration file {path}: {source}")]
    CalibrationIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The model's decoder is not available in this build.
    #[error("sensor model {model}: decoder not implemented yet; supported now: {supported}")]
    Unsupported {
        /// The configured model.
        model: SensorModel,
        /// Models that are decodable.
        supported: String,
    },
    /// The calibration / metadata file is invalid for this model (CSV, JSON, binary).
    #[error("calibration file {path} is invalid: {message}")]
    Calibration {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the row/field where possible.
        message: String,
    },
    /// The calibration file is not valid calibration YAML.
    #[error("calibration file {path} is not a valid Velodyne calibration: {message}")]
    CalibrationYaml {
        /// The file (empty when parsed from a string).
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
}

/// The per-sensor counters: `lidarxdp_sensor_*{sensor,model}` ([`DecodeCounters`], and the
/// capture thread's traffic counters), and the vendor decoders' own groups
/// ([`VendorDecoder::visit_counters`]) with the same labels.
pub const SENSOR_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "sensor",
    labels: &["sensor", "model"],
};

crate::counter_set! {
    /// Decoder counters of one [`crate::sensor::ScanPipeline`] (monotonic, never reset).
    ///
    /// `packets == decoded + malformed + ignored + auxiliary + time_jumps + duplicates + late + held`,
    /// where `held` ([`crate::sensor::ScanPipeline::held`], at most [`crate::scan::RESTART_AGREE`] − 1) are
    /// the time jumps waiting to be judged a restart or counted in `time_jumps`.
    pub struct DecodeCounters in SENSOR_COUNTERS;
    shared
    /// [`DecodeCounters`] shared with other threads (the capture thread publishes them).
    pub struct SharedDecodeCounters;
    {
        /// Payloads pushed.
        packets: Counter "datagrams" "UDP datagrams handed to the sensor's pipeline.",
        decoded: Counter "packets" "Data packets decoded.",
        /// Wrong size near the packet size, bad block flag, azimuth >= 36000, unknown
        /// return-mode byte, bad CRC.
        malformed: Counter "packets" "Packets rejected as malformed.",
        /// Other sizes and unknown packets.
        ignored: Counter "datagrams" "Datagrams ignored (not data packets).",
        /// Velodyne position packets (PPS, `$GPRMC`), Ouster IMU packets: read for what they
        /// say ([`crate::sensor::ScanPipeline::clock_health`], `take_imu`), no points.
        auxiliary: Counter "datagrams" "Datagrams read for what the sensor says besides points: Velodyne position packets, Ouster IMU packets.",
        frames: Counter "frames" "Frames (scans) produced.",
        /// In emitted frames.
        points: Counter "points" "Points produced.",
        /// Velodyne: decoded data packets whose product-id byte (offset 1205) names another
        /// model than the configured one (which the calibration's laser count confirmed);
        /// decoded as configured, logged once. 0 for other vendors.
        product_mismatches: Counter "packets" "Velodyne data packets whose product-id byte names another model than the configured one.",
        /// Sensor time (Velodyne, Hesai, RoboSense) or frame id (Ouster) jumped far back or
        /// ahead of the stream ([`crate::scan::StreamClock`], [`crate::sensor::ouster`]); the frame around
        /// them stays whole.
        time_jumps: Counter "packets" "Data packets dropped: their time or frame id jumped away from the stream.",
        /// The same bytes as one of the last [`crate::scan::DUPLICATE_WINDOW`] decoded
        /// datagrams (port mirrors, bonded links, replay tools): never a frame holding the
        /// same packet's returns twice.
        duplicates: Counter "datagrams" "Data packets dropped because the same datagram was just decoded.",
        /// Behind the stream by at most [`crate::scan::REORDER_WINDOW_NS`] (Ouster: of a frame
        /// no longer open) when their frame had already been published.
        late: Counter "packets" "Data packets that arrived after their frame was published, dropped.",
        /// A new stream (logged once per sensor).
        restarts: Counter "restarts" "Sustained time jumps taken as a sensor restart.",
        /// The sensor time stepped while the position ran on ([`crate::scan::TimeVerdict::Step`]:
        /// PTP lock, a TAI−UTC fix, a GPS time jump); no turn was cut. Logged once per sensor.
        clock_steps: Counter "steps" "Sensor clock steps taken while the sensor kept turning (no frame cut).",
        /// The sum of the emitted frames' [`crate::frame::FrameHeader::frames_lost_before`].
        frames_lost: Counter "frames" "Whole frames (turns) lost.",
        /// Stamped on the stream's time line (last accepted sensor time + host monotonic time
        /// elapsed), or with the host wall time when the stream has no valid time yet (then their frame says
        /// [`crate::frame::FrameClock::Host`]).
        date_fallbacks: Counter "packets" "Data packets with an invalid date, stamped with host time.",
        /// Emitted frames on the sensor clock whose start time is before 2000 or more than
        /// [`IMPLAUSIBLE_CLOCK_OFFSET_NS`] from the host receive time (an unsynchronised
        /// sensor clock, a clock years off, or a Velodyne whose hour had to be taken from the
        /// host). Logged once per sensor.
        implausible_time: Counter "frames" "Frames whose sensor start time is implausible (before 2000, or over 60 s from host time).",
        /// The sum of the emitted frames' [`crate::frame::FrameHeader::packets_expected`]:
        /// with `packets_framed`, the packet loss.
        packets_expected: Counter "packets" "Data packets the emitted frames should have held.",
        /// The sum of the emitted frames' [`crate::frame::FrameHeader::packets_received`].
        packets_framed: Counter "packets" "Data packets the emitted frames held.",
    }
}

impl DecodeCounters {
    /// The datagrams whose fate is counted: `decoded + malformed + ignored + auxiliary +
    /// time_jumps + duplicates + late`; `packets` equals it plus
    /// [`crate::sensor::ScanPipeline::held`].
    pub fn accounted(&self) -> u64 {
        self.decoded
            + self.malformed
            + self.ignored
            + self.auxiliary
            + self.time_jumps
            + self.duplicates
            + self.late
    }
}

/// Largest plausible difference between a frame's sensor-clock start and the host receive time
/// of its first packet, ns (60 s).
pub const IMPLAUSIBLE_CLOCK_OFFSET_NS: u64 = 60_000_000_000;
/// 2000-01-01T00:00:00Z, ns since the Unix epoch: a sensor time before it is implausible.
pub const PLAUSIBLE_EPOCH_NS: u64 = 946_684_800_000_000_000;

/// Fault counters a vendor decoder keeps itself ([`VendorDecoder::time_faults`]), copied into
/// the pipeline's [`DecodeCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeFaults {
    /// See [`DecodeCounters::restarts`].
    pub restarts: u64,
    /// See [`DecodeCounters::clock_steps`].
    pub clock_steps: u64,
    /// See [`DecodeCounters::date_fallbacks`].
    pub date_fallbacks: u64,
}

/// A sans-IO decoder plus scan assembler for one sensor family: UDP payloads in, finished
/// [`Frame`]s out. Every vendor has the same two parts: its calibration tables
/// ([`Self::Tables`]: parsed once, immutable, shared by `Arc` between clones and swapped whole
/// by a reload) and its cut policy, the per-stream state over the one
/// [`crate::scan::FrameBuilder`]. Implemented by [`crate::sensor::velodyne::VelodyneStream`],
/// [`crate::sensor::hesai::HesaiStream`], [`crate::sensor::ouster::OusterStream`] and
/// [`crate::sensor::robosense::RobosenseStream`], held in the closed enum
/// [`crate::sensor::Decoder`].
///
/// Contract: no method panics or reads out of bounds on any input; no I/O; `push` appends
/// the frames the payload completed to `out` and nothing else.
pub trait VendorDecoder: Clone + Send + fmt::Debug {
    /// The calibration tables: everything the decoder derives from the calibration file and
    /// the sensor's configuration. Velodyne, Hesai and Ouster keep what the stream learns from
    /// packets outside them (so their tables never change); RoboSense's tables also hold what
    /// its DIFOP packets state (motor speed, angle table, Bpearl reversal and firmware variant),
    /// written copy-on-write ([`std::sync::Arc::make_mut`]) and carried over a reload.
    type Tables: fmt::Debug + Send + Sync;
    /// Decodes one UDP payload received at `host` (both host clocks; offline the pcap record
    /// time on both): every interval (silence, time-jump tolerance, extrapolation) is measured
    /// on [`HostTime::mono_ns`], every stamp (the frame's `host_ns`, a host-clock fallback
    /// start, the hour of a Velodyne clock) taken from [`HostTime::wall_ns`].
    ///
    /// # Errors
    /// [`Rejection`] says how the pipeline counts a payload that was not decoded; the decoder
    /// itself records a malformed packet in the frame in progress.
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection>;
    /// Closes the frame in progress if no data packet arrived for the frame timeout of host
    /// monotonic time before `now_mono_ns` (CLOCK_MONOTONIC, ns).
    fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>);
    /// Closes the frame in progress (end of a capture, shutdown).
    fn flush(&mut self, out: &mut Vec<Frame>);
    /// Return mode of the last decoded data packet, if any.
    fn return_mode(&self) -> Option<ReturnMode>;
    /// Takes new frames' point buffers from `source` from now on (instead of allocating).
    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>);
    /// Writes the points in layout `point_type` from the next frame on (the frames in
    /// progress too while they hold no point).
    fn set_point_type(&mut self, point_type: PointType);
    /// Data packets whose model byte names another model than the configured one
    /// ([`DecodeCounters::product_mismatches`]); 0 where the format has no such byte.
    fn product_mismatches(&self) -> u64 {
        0
    }
    /// The decoder's own counters beyond [`DecodeCounters`], declared with
    /// [`crate::counter_set!`] in a group labelled like [`SENSOR_COUNTERS`]: their
    /// descriptors, the same on every call (none by default).
    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        &[]
    }
    /// Calls `f` with each of [`Self::counter_descs`] and its value, in that order.
    fn visit_counters(&self, _f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {}
    /// What the sensor's clock follows, as its calibration or metadata says (Ouster's
    /// `timestamp_mode`); [`crate::msg::SyncSource::Unknown`] by default.
    fn sync_source(&self) -> crate::msg::SyncSource {
        crate::msg::SyncSource::Unknown
    }
    /// Restarts and date fallbacks counted so far (monotonic); none by default.
    fn time_faults(&self) -> TimeFaults {
        TimeFaults::default()
    }
    /// A frame is in progress (something a flush would publish or drop).
    fn in_progress(&self) -> bool;
    /// The calibration tables in use.
    fn tables(&self) -> &std::sync::Arc<Self::Tables>;
    /// Decodes with `tables` (built for the same model from new calibration contents) from
    /// now on; the stream state (frame builder, cut state, counters, what the stream learned
    /// from packets) stays. Called by [`crate::sensor::ScanPipeline`] at a frame boundary.
    fn set_tables(&mut self, tables: std::sync::Arc<Self::Tables>);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every model's datasheet range is a gate as it is; a gate names the field at fault.
    #[test]
    fn datasheet_ranges_are_gates_and_the_gate_names_the_field() {
        for &m in SensorModel::ALL {
            let g = m.datasheet_range();
            assert_eq!((g.min().get(), g.max().get()), m.datasheet_range_m(), "{m}");
        }
        let metres = |v| Some(Metres::new(v).unwrap());
        let names = ("--min-range", "--max-range");
        let g = SensorModel::Vlp16
            .range_gate(metres(0.5), None, names)
            .unwrap();
        assert_eq!((g.min().get(), g.max().get()), (0.5, 100.0));
        let e = |min, max| {
            SensorModel::Vlp16
                .range_gate(min, max, names)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e(metres(150.0), None),
            "--min-range: 150 is out of range; valid [0, 100) m (the VLP16 datasheet range is 0 \
             to 100 m)"
        );
        assert_eq!(
            e(metres(5.0), metres(2.0)),
            "--max-range: 2 is out of range; valid (min_range = 5, 1000] m (the VLP16 datasheet \
             range is 0 to 100 m)"
        );
        assert_eq!(
            e(metres(1000.0), metres(1000.0)),
            "--min-range: 1000 is out of range; valid [0, 1000) m (the VLP16 datasheet range is \
             0 to 100 m)"
        );
    }
}
