//! Sans-IO sensor decoders: UDP payload bytes in, [`Frame`]s out.
//!
//! [`ScanPipeline`] is the per-sensor entry point used by every capture backend: it classifies
//! each payload, decodes data packets with the model's decoder ([`velodyne`]) and hands the
//! points to the [`crate::scan::ScanAssembler`], which cuts them into frames. It does no I/O,
//! never blocks, never panics, and allocates once per frame (its point buffer, pre-sized from
//! the previous frame).
//!
//! ## Vendors
//! Each family has its module implementing [`VendorDecoder`] (decoder + scan assembly):
//! [`velodyne`], [`hesai`], [`ouster`], [`robosense`]. [`SensorModel::family`] picks it.
//!
//! ## Compatibility with Tier IV Nebula
//! By default ([`DecodeFlavor::Manual`]) every Velodyne model follows its manufacturer's manual:
//! each laser's azimuth is interpolated with its own firing time over the firing-sequence
//! period, the last sequence of a packet reuses the previous advance, and `--fov` filters
//! every point on its corrected azimuth (`docs/sensors.md`, "Velodyne firing timing").
//! With [`DecodeFlavor::Nebula`] (`--nebula-compat`, config key `nebula_compat`) a Velodyne
//! stream decodes point-for-point as Tier IV Nebula's decoders do (verified against Nebula's
//! ground-truth PCDs, see `tests/decode/decode_vlp16_golden.rs`), except: `elevation` is the beam
//! angle in rad (Nebula stores its sine), `time_stamp` follows the manual's timing table on the
//! sensor clock (Nebula uses the host stamp of the packet), and a damaged packet is dropped
//! whole (Nebula keeps the blocks before a bad flag).
#![forbid(unsafe_code)]

pub mod calibration;
pub mod hesai;
pub mod ouster;
pub mod robosense;
pub mod velodyne;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::frame::{Frame, FrameClock};

/// Sensor families; each has its own decoder module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Velodyne ([`velodyne`]).
    Velodyne,
    /// Hesai ([`hesai`]).
    Hesai,
    /// Ouster ([`ouster`]).
    Ouster,
    /// RoboSense ([`robosense`]).
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
    /// manuals, "DIFOP"). `None` for Velodyne (position packets are not used), Hesai and
    /// Ouster (whose IMU port 7503 is not decoded).
    pub const fn default_extra_port(self) -> Option<u16> {
        match self.family() {
            Family::Robosense => Some(7788),
            Family::Velodyne | Family::Hesai | Family::Ouster => None,
        }
    }
}

impl SensorModel {
    /// The model's measurement range from its vendor's datasheet / user manual, `(min, max)` in
    /// metres: the default of [`SensorConfig::min_range_m`] / [`SensorConfig::max_range_m`].
    /// Where a datasheet gives no minimum, `min` is 0 (a range of 0 is "no return" and is always
    /// dropped). Sources, per model, in `docs/sensors.md` ("Measurement range"):
    ///
    /// - Velodyne user manuals (Specifications): VLP-16 up to 100 m, VLP-32C up to 200 m,
    ///   HDL-32E 0.05 to 100 m ("valid data range"), HDL-64E S2/S3 up to 120 m, VLS-128 (Alpha
    ///   Prime) up to 245 m;
    /// - Hesai user manuals (Specifications), the same limits as Nebula's per-model `SensorT`
    ///   ([`hesai`] layouts);
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
            m => match hesai::layout::layout(m) {
                Some(l) => l.range_m,
                None => (0.0, MAX_RANGE_M),
            },
        }
    }
}

/// Largest accepted `max_range_m`, m.
pub const MAX_RANGE_M: f32 = 1000.0;

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
    /// The host's receive time of the frame's first packet (`host_ns`; offline, the pcap record
    /// time). Points' `time_stamp` stay relative to the frame's first firing.
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

/// Identifies the sensor model from one data packet, where the format names it:
///
/// - Velodyne: a 1206-byte data packet (12 blocks starting with flag `FF EE`) whose
///   product-id byte (offset 1205, VLP-16 user manual §9 "Factory bytes") names the model
///   ([`velodyne::multi::model_from_product_id`]: HDL-32E, VLP-16, VLP-32C, VLS-128; HDL-64E
///   packets carry a status byte there and are not identified);
/// - Hesai: by length and header ([`hesai::packet::detect_model`]).
///
/// `None` for anything else: Ouster packets do not name the model (its metadata JSON does),
/// RoboSense MSOP headers tell only the header family (RS-16/RS-32/Bpearl versus Helios), and
/// a firmware that writes a wrong product byte (seen on VLP-16s that say HDL-32E) is identified
/// wrongly; a configured model always wins.
pub fn detect_model(payload: &[u8]) -> Option<SensorModel> {
    if payload.len() == 1206 && payload.starts_with(&[0xFF, 0xEE]) {
        return payload
            .get(1205)
            .and_then(|&id| velodyne::multi::model_from_product_id(id));
    }
    hesai::packet::detect_model(payload)
}

/// Datagrams a [`ScanPipeline`] receives before it logs, once, that none of them decoded
/// (64: a fraction of a second for every model at its packet rate).
pub const REJECTION_DIAGNOSIS_PACKETS: u64 = 64;

/// What `payload` looks like, for a person reading a diagnosis: the model
/// [`detect_model`] names (Velodyne product byte at offset 1205, Hesai header), or a RoboSense
/// packet by its magic header (RS-LiDAR-16/32 and RS-Bpearl MSOP `55 AA 05 0A 5A A5 50 A0`,
/// RS-Helios MSOP `55 AA 05 5A`, DIFOP `A5 FF 00 5A 11 11 55 55`; RoboSense user manuals,
/// "MSOP"/"DIFOP" packet headers), or `None`. Ouster packets carry no magic and are never named.
pub fn describe_payload(payload: &[u8]) -> Option<String> {
    if let Some(m) = detect_model(payload) {
        return Some(format!("a {m} data packet"));
    }
    if payload.len() == robosense::PACKET_LEN {
        if payload.starts_with(&robosense::MSOP_MAGIC_V1) {
            return Some("a RoboSense RS-LiDAR-16/32 or RS-Bpearl MSOP packet".to_owned());
        }
        if payload.starts_with(&robosense::MSOP_MAGIC_HELIOS) {
            return Some("a RoboSense RS-Helios MSOP packet".to_owned());
        }
        if payload.starts_with(&robosense::DIFOP_MAGIC) {
            return Some("a RoboSense DIFOP packet".to_owned());
        }
    }
    None
}

/// Per-sensor configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorConfig {
    /// Index of the sensor in the daemon configuration; copied into every [`Frame`].
    pub sensor_id: u16,
    /// Sensor model; wins over the packet's product-id byte.
    pub model: SensorModel,
    /// The calibration / metadata file (Velodyne YAML, see [`calibration`]; Hesai CSV or
    /// AT128 `.dat`; Ouster metadata JSON; RoboSense CSV). Core never opens it: it names the
    /// file in errors, and the caller passes its contents to [`ScanPipeline::new`].
    pub calibration: PathBuf,
    /// Frame boundary azimuth, degrees, valid [0, 360] (360 ≡ 0); default 0.
    pub cut_angle_deg: f64,
    /// Host-time silence that closes a frame, ns, valid [1 ms, 60 s]; default 200 ms.
    pub frame_timeout_ns: u64,
    /// Points with range <= this are dropped, m, valid [0, max_range_m); default the model's
    /// [`SensorModel::datasheet_range_m`] minimum.
    pub min_range_m: f32,
    /// Points with range >= this are dropped, m, valid (min_range_m, 1000]; default the model's
    /// [`SensorModel::datasheet_range_m`] maximum. (Hesai keeps both bounds inclusive, as
    /// Nebula; see [`hesai`].)
    pub max_range_m: f32,
    /// Clock of the frames' `start_ns`; default [`Stamp::Sensor`].
    pub stamp: Stamp,
}

impl SensorConfig {
    /// A configuration with the defaults: cut 0°, timeout 200 ms, the model's datasheet range
    /// ([`SensorModel::datasheet_range_m`]), sensor-clock stamps.
    pub fn new(sensor_id: u16, model: SensorModel, calibration: impl Into<PathBuf>) -> Self {
        Self {
            sensor_id,
            model,
            calibration: calibration.into(),
            cut_angle_deg: 0.0,
            frame_timeout_ns: 200_000_000,
            min_range_m: model.datasheet_range_m().0,
            max_range_m: model.datasheet_range_m().1,
            stamp: Stamp::Sensor,
        }
    }

    /// Checks every numeric field (not the calibration file).
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the first invalid field and its valid range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &str, value: String, valid: &str| {
            Err(ConfigError::OutOfRange {
                field: field.into(),
                value,
                valid: valid.into(),
            })
        };
        if !(self.cut_angle_deg.is_finite() && (0.0..=360.0).contains(&self.cut_angle_deg)) {
            return err(
                "cut_angle_deg",
                self.cut_angle_deg.to_string(),
                "[0, 360] deg",
            );
        }
        if !(1_000_000..=60_000_000_000).contains(&self.frame_timeout_ns) {
            return err(
                "frame_timeout_ns",
                self.frame_timeout_ns.to_string(),
                "[1000000, 60000000000] ns (1 ms to 60 s)",
            );
        }
        if !(self.min_range_m.is_finite()
            && self.min_range_m >= 0.0
            && self.min_range_m < MAX_RANGE_M)
        {
            return err(
                "min_range_m",
                self.min_range_m.to_string(),
                &format!("[0, max_range_m) m, below {MAX_RANGE_M} m"),
            );
        }
        if !(self.max_range_m.is_finite()
            && self.max_range_m > self.min_range_m
            && self.max_range_m <= MAX_RANGE_M)
        {
            return err(
                "max_range_m",
                self.max_range_m.to_string(),
                &format!("(min_range_m = {}, {MAX_RANGE_M}] m", self.min_range_m),
            );
        }
        Ok(())
    }
}

/// Extra decoding options that are not part of a sensor's deployment configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PipelineOptions {
    /// Velodyne: manual (default) or Nebula-compatible (`--nebula-compat`) rules.
    pub flavor: DecodeFlavor,
    /// Field of view `(min, max)`, degrees in [0, 360], inclusive, on the corrected point
    /// azimuth; `min > max` wraps through 0° (Nebula `cloud_min_angle`/`cloud_max_angle`).
    /// `None` (default) keeps all azimuths. With [`DecodeFlavor::Nebula`] the Velodyne
    /// decoders skip whole blocks outside `[min, max]` as Nebula does (see there).
    pub fov_deg: Option<(f64, f64)>,
    /// Hesai only: skip the body/tail CRC-32 check of models that carry one (QT128, OT128).
    /// Default `false`: a CRC mismatch makes the packet malformed. See [`hesai`].
    pub hesai_skip_crc: bool,
}

/// An invalid configuration or calibration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A field is outside its valid range.
    #[error("{field} = {value} is out of range; valid: {valid}")]
    OutOfRange {
        /// Field name, e.g. `cut_angle_deg` or `lasers[3].vert_correction`.
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
    /// Decoder counters of one [`ScanPipeline`] (monotonic, never reset).
    ///
    /// `packets == decoded + malformed + ignored + time_jumps + duplicates + late + held`,
    /// where `held` ([`ScanPipeline::held`], at most [`crate::scan::RESTART_AGREE`] − 1) are
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
        /// Other sizes, e.g. 512-byte position packets.
        ignored: Counter "datagrams" "Datagrams ignored (not data packets).",
        frames: Counter "frames" "Frames (scans) produced.",
        /// In emitted frames.
        points: Counter "points" "Points produced.",
        /// Velodyne: decoded data packets whose product-id byte (offset 1205) names another
        /// model than the configured one (which the calibration's laser count confirmed);
        /// decoded as configured, logged once. 0 for other vendors.
        product_mismatches: Counter "packets" "Velodyne data packets whose product-id byte names another model than the configured one.",
        /// Sensor time (Velodyne, Hesai, RoboSense) or frame id (Ouster) jumped far back or
        /// ahead of the stream ([`crate::scan::StreamClock`], [`ouster`]); the frame around
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
        /// The sum of the emitted frames' [`crate::frame::FrameHeader::frames_lost_before`].
        frames_lost: Counter "frames" "Whole frames (turns) lost.",
        /// Stamped on the stream's time line (last accepted sensor time + host time elapsed),
        /// or with the host time when the stream has no valid time yet (then their frame says
        /// [`crate::frame::FrameClock::Host`]).
        date_fallbacks: Counter "packets" "Data packets with an invalid date, stamped with host time.",
        /// Emitted frames on the sensor clock whose start time is before 2000 or more than
        /// [`IMPLAUSIBLE_CLOCK_OFFSET_NS`] from the host receive time (an unsynchronised
        /// sensor clock, a clock years off, or a Velodyne whose hour had to be taken from the
        /// host). Logged once per sensor.
        implausible_time: Counter "frames" "Frames whose sensor start time is implausible (before 2000, or over 60 s from host time).",
    }
}

impl DecodeCounters {
    /// The datagrams whose fate is counted: `decoded + malformed + ignored + time_jumps +
    /// duplicates + late`; `packets` equals it plus [`ScanPipeline::held`].
    pub fn accounted(&self) -> u64 {
        self.decoded + self.malformed + self.ignored + self.time_jumps + self.duplicates + self.late
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
    /// See [`DecodeCounters::date_fallbacks`].
    pub date_fallbacks: u64,
}

pub use crate::scan::Rejection;

/// A sans-IO decoder plus scan assembler for one sensor family: UDP payloads in, finished
/// [`Frame`]s out. Implemented by [`velodyne::VelodyneStream`] and the other vendor modules.
///
/// Contract: no method panics or reads out of bounds on any input; no I/O; `push` appends
/// the frames the payload completed to `out` and nothing else.
pub trait VendorDecoder: Send + fmt::Debug {
    /// Decodes one UDP payload received at `host_ns` (ns since the Unix epoch, or the pcap
    /// record time).
    ///
    /// # Errors
    /// [`Rejection`] says how the pipeline counts a payload that was not decoded; the decoder
    /// itself records a malformed packet in the frame in progress.
    fn push(&mut self, payload: &[u8], host_ns: u64, out: &mut Vec<Frame>)
    -> Result<(), Rejection>;
    /// Closes the frame in progress if no data packet arrived for the frame timeout before
    /// `now_host_ns`.
    fn poll_timeout(&mut self, now_host_ns: u64, out: &mut Vec<Frame>);
    /// Closes the frame in progress (end of a capture, shutdown).
    fn flush(&mut self, out: &mut Vec<Frame>);
    /// Return mode of the last decoded data packet, if any.
    fn return_mode(&self) -> Option<ReturnMode>;
    /// A boxed copy of this decoder in its current state (calibration tables, frame in
    /// progress, counters): what [`ScanPipeline`]'s `Clone` uses.
    fn clone_box(&self) -> Box<dyn VendorDecoder>;
    /// Takes new frames' point buffers from `source` from now on (instead of allocating).
    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>);
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
    /// Restarts and date fallbacks counted so far (monotonic); none by default.
    fn time_faults(&self) -> TimeFaults {
        TimeFaults::default()
    }
    /// A frame is in progress (something a flush would publish or drop).
    fn in_progress(&self) -> bool;
    /// Takes the calibration tables of `fresh`, a decoder of the same model built from new
    /// calibration contents, in place of this one's; the stream state (frame builder, cut
    /// state, counters) stays. Called by [`ScanPipeline`] at a frame boundary. `fresh` of
    /// another vendor is ignored (the pipeline never passes one).
    fn recalibrate(&mut self, fresh: Box<dyn VendorDecoder>);
    /// This decoder as [`std::any::Any`], for [`Self::recalibrate`] to take a fresh one's
    /// tables.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// New calibration tables for a running [`ScanPipeline`] ([`ScanPipeline::reload`]), parsed
/// off the decoder's thread ([`ScanPipeline::into_calibration`]).
#[derive(Debug)]
pub struct Calibration {
    model: SensorModel,
    decoder: Box<dyn VendorDecoder>,
}

/// A fast 64-bit digest of a datagram for the duplicate check (four multiply-rotate lanes
/// over 8-byte words, then the tail and the length): equal bytes give equal digests; two
/// different datagrams collide with probability about 2^-64 per pair.
fn digest(payload: &[u8]) -> u64 {
    const K: [u64; 4] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0x85EB_CA77_C2B2_AE63,
    ];
    let mut lane = K;
    let (chunks, rest) = payload.as_chunks::<32>();
    for c in chunks {
        for (k, (l, w)) in lane.iter_mut().zip(c.as_chunks::<8>().0).enumerate() {
            *l = (*l ^ u64::from_le_bytes(*w))
                .wrapping_mul(K[k])
                .rotate_left(29);
        }
    }
    let mut h =
        lane[0] ^ lane[1].rotate_left(17) ^ lane[2].rotate_left(34) ^ lane[3].rotate_left(51);
    for &b in rest {
        h = (h ^ u64::from(b)).wrapping_mul(K[0]);
    }
    (h ^ payload.len() as u64).wrapping_mul(K[1]) ^ (h >> 31)
}

/// The digests of the last [`crate::scan::DUPLICATE_WINDOW`] decoded datagrams.
#[derive(Clone, Debug)]
struct RecentDigests {
    ring: [u64; crate::scan::DUPLICATE_WINDOW],
    len: usize,
    next: usize,
}

impl Default for RecentDigests {
    fn default() -> Self {
        Self {
            ring: [0; crate::scan::DUPLICATE_WINDOW],
            len: 0,
            next: 0,
        }
    }
}

impl RecentDigests {
    fn contains(&self, d: u64) -> bool {
        self.ring[..self.len].contains(&d)
    }

    fn insert(&mut self, d: u64) {
        self.ring[self.next] = d;
        self.next = (self.next + 1) % self.ring.len();
        self.len = (self.len + 1).min(self.ring.len());
    }
}

/// Applies `stamp` to frames just produced: with [`Stamp::Host`], `start_ns` becomes the host
/// receive time of the frame's first packet (`host_ns`) and `clock` [`FrameClock::Host`];
/// points' `time_stamp` (relative to the frame start) are unchanged. With [`Stamp::Sensor`] the
/// frames are left as the assembler made them (it may itself fall back to the host clock, and
/// says so in `clock`).
pub fn apply_stamp(stamp: Stamp, frames: &mut [Frame]) {
    if stamp == Stamp::Host {
        for f in frames {
            f.header.start_ns = f.header.host_ns;
            f.header.clock = FrameClock::Host;
        }
    }
}

/// Decoder + scan assembler for one sensor: the per-sensor entry point of every capture
/// backend. Dispatches to the model's [`VendorDecoder`] and keeps the [`DecodeCounters`].
///
/// `Clone` copies the whole state (calibration tables, frame in progress, counters): cloning a
/// freshly built pipeline is a cheaper way to get another one for the same sensor than
/// parsing its calibration file again (the fuzz targets in `fuzz/` do it once per input).
#[derive(Debug)]
pub struct ScanPipeline {
    model: SensorModel,
    decoder: Box<dyn VendorDecoder>,
    counters: DecodeCounters,
    stamp: Stamp,
    /// An implausible sensor time has been logged.
    warned_time: bool,
    /// The "every packet rejected" diagnosis has been made ([`REJECTION_DIAGNOSIS_PACKETS`]).
    diagnosed: bool,
    /// Name in log lines (the sensor's name in the daemon; default the model name).
    name: String,
    frame_timeout_ns: u64,
    /// Digests of the last decoded datagrams (duplicates).
    recent: RecentDigests,
    /// Payloads judged time jumps since the last accepted packet, with their host times: the
    /// candidates of a restart, pushed again once it is confirmed ([`Rejection::Restart`]).
    held: Vec<(Vec<u8>, u64)>,
    /// Buffers of released held payloads, reused.
    spare_held: Vec<Vec<u8>>,
    /// New calibration tables waiting for the next frame boundary ([`ScanPipeline::reload`]).
    pending: Option<Calibration>,
    /// Calibrations applied ([`ScanPipeline::reload`]).
    reloads: u64,
}

impl Clone for ScanPipeline {
    fn clone(&self) -> Self {
        Self {
            model: self.model,
            decoder: self.decoder.clone_box(),
            counters: self.counters,
            stamp: self.stamp,
            warned_time: self.warned_time,
            diagnosed: self.diagnosed,
            name: self.name.clone(),
            frame_timeout_ns: self.frame_timeout_ns,
            recent: self.recent.clone(),
            held: self.held.clone(),
            spare_held: Vec::new(),
            pending: self.pending.as_ref().map(|c| Calibration {
                model: c.model,
                decoder: c.decoder.clone_box(),
            }),
            reloads: self.reloads,
        }
    }
}

impl ScanPipeline {
    /// Builds the pipeline with default [`PipelineOptions`] (manual rules, full field of view)
    /// from `cfg` and `calibration`, the contents of the file `cfg.calibration` names (read by
    /// the caller: `lidarxdp::calibration::read` in the daemon).
    ///
    /// # Errors
    /// [`ConfigError`] for an out-of-range field (see [`SensorConfig::validate`]) or an
    /// invalid calibration (naming `cfg.calibration`).
    pub fn new(cfg: &SensorConfig, calibration: &[u8]) -> Result<Self, ConfigError> {
        Self::with_options(cfg, calibration, PipelineOptions::default())
    }

    /// Builds the pipeline with explicit options.
    ///
    /// # Errors
    /// As [`ScanPipeline::new`], plus [`ConfigError::OutOfRange`] for a `fov_deg` bound
    /// outside [0, 360], and [`ConfigError::Unsupported`] for a model whose decoder is not
    /// available yet.
    pub fn with_options(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        Self::check(cfg, opts)?;
        let decoder: Box<dyn VendorDecoder> = match cfg.model.family() {
            Family::Velodyne => Box::new(velodyne::VelodyneStream::new(cfg, calibration, opts)?),
            Family::Hesai => hesai::build(cfg, calibration, opts)?,
            Family::Ouster => ouster::build(cfg, calibration, opts)?,
            Family::Robosense => robosense::build(cfg, calibration, opts)?,
        };
        Ok(Self {
            model: cfg.model,
            decoder,
            counters: DecodeCounters::default(),
            stamp: cfg.stamp,
            warned_time: false,
            diagnosed: false,
            name: cfg.model.name().to_owned(),
            frame_timeout_ns: cfg.frame_timeout_ns,
            recent: RecentDigests::default(),
            held: Vec::with_capacity(crate::scan::RESTART_AGREE as usize),
            spare_held: Vec::new(),
            pending: None,
            reloads: 0,
        })
    }

    /// This freshly built pipeline's calibration tables, to hand to a running pipeline of the
    /// same sensor with [`Self::reload`] (the daemon parses a re-read calibration file on its
    /// main thread, so the capture thread only swaps tables).
    pub fn into_calibration(self) -> Calibration {
        Calibration {
            model: self.model,
            decoder: self.decoder,
        }
    }

    /// Reloads the calibration in place: `calibration` (of the same model, from
    /// [`Self::into_calibration`]) replaces the decoder's tables at the next frame boundary:
    /// at once if no frame is in progress, else right after the push, timeout or flush that
    /// emits the frame in progress. The stream goes on: frame sequence numbers stay
    /// continuous, counters keep counting. (The points of the packet that completes a frame
    /// and lie past the cut, carried into the next frame, were decoded with the old tables.)
    /// A newer reload replaces one still waiting.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] when `calibration` is for another model (nothing changes).
    pub fn reload(&mut self, calibration: Calibration) -> Result<(), ConfigError> {
        if calibration.model != self.model {
            return Err(ConfigError::Unsupported {
                model: calibration.model,
                supported: format!("a calibration for this pipeline's model, {}", self.model),
            });
        }
        self.pending = Some(calibration);
        if !self.decoder.in_progress() {
            self.apply_reload();
        }
        Ok(())
    }

    /// Calibrations applied so far by [`Self::reload`].
    pub fn reloads(&self) -> u64 {
        self.reloads
    }

    /// A reload is waiting for the next frame boundary.
    pub fn reload_pending(&self) -> bool {
        self.pending.is_some()
    }

    fn apply_reload(&mut self) {
        if let Some(c) = self.pending.take() {
            self.decoder.recalibrate(c.decoder);
            self.reloads += 1;
        }
    }

    /// Payloads judged time jumps and held as the candidates of a restart (at most
    /// [`crate::scan::RESTART_AGREE`] − 1), not yet in [`DecodeCounters::time_jumps`].
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Sets the name this pipeline's log lines give the sensor (default: the model name).
    pub fn set_name(&mut self, name: &str) {
        self.name = name.to_owned();
    }

    /// The name the log lines give the sensor ([`ScanPipeline::set_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The checks [`ScanPipeline::with_options`] makes before it looks at the calibration:
    /// every numeric field of `cfg` ([`SensorConfig::validate`]) and the `fov_deg` bounds. A
    /// caller that reads the calibration file can run them first, so a bad field is reported
    /// before a missing file.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming the first invalid field and its valid range.
    pub fn check(cfg: &SensorConfig, opts: PipelineOptions) -> Result<(), ConfigError> {
        cfg.validate()?;
        if let Some((min, max)) = opts.fov_deg {
            for (field, v) in [("fov_deg.min", min), ("fov_deg.max", max)] {
                if !(v.is_finite() && (0.0..=360.0).contains(&v)) {
                    return Err(ConfigError::OutOfRange {
                        field: field.into(),
                        value: v.to_string(),
                        valid: "[0, 360] deg".into(),
                    });
                }
            }
            // One meaning for every vendor: an empty or one-azimuth field of view is refused
            // (360 is 0, so 0:360 is refused too; leave fov_deg unset for the full circle).
            if (min.rem_euclid(360.0) * 100.0).round() == (max.rem_euclid(360.0) * 100.0).round() {
                return Err(ConfigError::OutOfRange {
                    field: "fov_deg.max".into(),
                    value: max.to_string(),
                    valid: format!(
                        "[0, 360] deg, not equal to fov_deg.min = {min} modulo 360 at 0.01 deg \
                         (min > max wraps through 0; omit fov_deg for the full circle)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The configured model.
    pub fn model(&self) -> SensorModel {
        self.model
    }

    /// The configured frame timeout ([`SensorConfig::frame_timeout_ns`]), ns.
    pub fn frame_timeout_ns(&self) -> u64 {
        self.frame_timeout_ns
    }

    /// Return mode of the last decoded data packet, if any.
    pub fn return_mode(&self) -> Option<ReturnMode> {
        self.decoder.return_mode()
    }

    /// Pushes one UDP payload received at `host_ns` (ns since the Unix epoch, or the pcap
    /// record time). Frames completed by this payload are appended to `out`.
    ///
    /// Never panics: anything that is not a valid data packet is counted `malformed` or
    /// `ignored` (rules in the vendor module) and leaves the frame in progress untouched apart
    /// from its malformed count.
    pub fn push(&mut self, payload: &[u8], host_ns: u64, out: &mut Vec<Frame>) {
        self.counters.packets += 1;
        let before = out.len();
        let d = digest(payload);
        if self.recent.contains(d) {
            self.counters.duplicates += 1;
        } else {
            match self.decoder.push(payload, host_ns, out) {
                Err(Rejection::TimeJump) => self.hold(payload, host_ns),
                Err(Rejection::Restart) => {
                    // The held candidates first, then this packet, onto the new time base.
                    let held = std::mem::take(&mut self.held);
                    for (p, h) in &held {
                        let r = self.decoder.push(p, *h, out);
                        self.count(r, digest(p));
                    }
                    self.spare_held.extend(held.into_iter().map(|(p, _)| p));
                    let r = self.decoder.push(payload, host_ns, out);
                    self.count(r, d);
                }
                r => {
                    if !matches!(r, Err(Rejection::Ignored | Rejection::Malformed)) {
                        self.release_held();
                    }
                    self.count(r, d);
                }
            }
        }
        if !self.diagnosed && self.counters.decoded == 0 {
            self.diagnose_rejections(payload);
        }
        let t = self.decoder.time_faults();
        self.counters.restarts = t.restarts;
        self.counters.date_fallbacks = t.date_fallbacks;
        self.count_frames(before, out);
    }

    /// Counts what the decoder did with a payload of digest `d` (a decoded one is remembered
    /// for the duplicate check).
    fn count(&mut self, r: Result<(), Rejection>, d: u64) {
        match r {
            Ok(()) => {
                self.counters.decoded += 1;
                self.counters.product_mismatches = self.decoder.product_mismatches();
                self.recent.insert(d);
            }
            Err(Rejection::Ignored) => self.counters.ignored += 1,
            Err(Rejection::Malformed) => self.counters.malformed += 1,
            Err(Rejection::TimeJump | Rejection::Restart) => self.counters.time_jumps += 1,
            Err(Rejection::Late) => self.counters.late += 1,
        }
    }

    /// Holds a payload judged a time jump: it may be the first of a restart. Beyond
    /// [`crate::scan::RESTART_AGREE`] − 1 held, the oldest is counted a time jump.
    fn hold(&mut self, payload: &[u8], host_ns: u64) {
        let keep = crate::scan::RESTART_AGREE.saturating_sub(1) as usize;
        if keep == 0 {
            self.counters.time_jumps += 1;
            return;
        }
        if self.held.len() >= keep {
            let (p, _) = self.held.remove(0);
            self.spare_held.push(p);
            self.counters.time_jumps += 1;
        }
        let mut buf = self.spare_held.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        self.held.push((buf, host_ns));
    }

    /// The held payloads were no restart: counted as time jumps.
    fn release_held(&mut self) {
        self.counters.time_jumps += self.held.len() as u64;
        self.spare_held.extend(self.held.drain(..).map(|(p, _)| p));
    }

    /// Once [`REJECTION_DIAGNOSIS_PACKETS`] datagrams arrived and none decoded, logs (once) why
    /// the likely cause is the configuration: what the last payload looks like
    /// ([`describe_payload`]) against the configured model.
    fn diagnose_rejections(&mut self, last: &[u8]) {
        let c = &self.counters;
        if c.packets < REJECTION_DIAGNOSIS_PACKETS {
            return;
        }
        self.diagnosed = true;
        let looks = match describe_payload(last) {
            Some(d) => format!("looks like {d}"),
            None => "matches no known data packet".to_owned(),
        };
        log::warn!(
            "{}: none of the first {} datagrams decoded as {} ({} malformed, {} ignored, {} time \
             jumps); the last one ({} bytes) {looks}. Likely cause: the wrong model (--sensor) or \
             a port that carries another stream (--port). Counted in malformed/ignored; logged once",
            self.name,
            c.packets,
            self.model,
            c.malformed,
            c.ignored,
            c.time_jumps,
            last.len()
        );
    }

    /// Counts the frames appended to `out` since `before` (points, lost turns, implausible
    /// sensor times), then applies [`Stamp`] to them.
    fn count_frames(&mut self, before: usize, out: &mut [Frame]) {
        self.reload_at_boundary(before, out);
        let new = out.get_mut(before..).unwrap_or_default();
        for f in new.iter() {
            let h = &f.header;
            self.counters.frames += 1;
            self.counters.points += f.points.len() as u64;
            self.counters.frames_lost += u64::from(h.frames_lost_before);
            if h.clock == crate::frame::FrameClock::Sensor
                && (h.start_ns < PLAUSIBLE_EPOCH_NS
                    || h.start_ns.abs_diff(h.host_ns) > IMPLAUSIBLE_CLOCK_OFFSET_NS)
            {
                self.counters.implausible_time += 1;
                if !self.warned_time {
                    self.warned_time = true;
                    log::warn!(
                        "{} ({}): frame {} starts at sensor time {} ns, {} s from the host receive time {} ns: \
                         the sensor clock is implausible (not synchronised, years off, or an \
                         hour taken from the host); counted in implausible_time, logged once",
                        self.name,
                        self.model,
                        h.sequence,
                        h.start_ns,
                        (h.start_ns as i128 - h.host_ns as i128) / 1_000_000_000,
                        h.host_ns
                    );
                }
            }
        }
        apply_stamp(self.stamp, new);
    }

    /// Closes the frame in progress if no data packet arrived for more than
    /// `frame_timeout_ns` of host time before `now_host_ns` (ns since the Unix epoch).
    pub fn poll_timeout(&mut self, now_host_ns: u64, out: &mut Vec<Frame>) {
        let before = out.len();
        self.decoder.poll_timeout(now_host_ns, out);
        self.count_frames(before, out);
    }

    /// Applies a waiting reload if the frames just appended to `out` (from `before`) ended the
    /// frame in progress, or none is in progress.
    fn reload_at_boundary(&mut self, before: usize, out: &[Frame]) {
        if self.pending.is_some() && (out.len() > before || !self.decoder.in_progress()) {
            self.apply_reload();
        }
    }

    /// Closes the frame in progress (end of a pcap, shutdown). A frame that holds only the
    /// points carried past the last cut, with no packet of its own, is dropped.
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        let before = out.len();
        self.decoder.flush(out);
        self.release_held();
        self.count_frames(before, out);
    }

    /// Takes new frames' point buffers from `source` (e.g. the publisher's
    /// `lidarxdp::publish::BufferPool`) from now on, instead of allocating them.
    pub fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.decoder.set_buffer_source(source);
    }

    /// The counters.
    pub fn counters(&self) -> &DecodeCounters {
        &self.counters
    }

    /// The vendor decoder's own counter descriptors ([`VendorDecoder::counter_descs`]).
    pub fn vendor_counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        self.decoder.counter_descs()
    }

    /// Visits the vendor decoder's own counters ([`VendorDecoder::visit_counters`]).
    pub fn visit_vendor_counters(
        &self,
        f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64),
    ) {
        self.decoder.visit_counters(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_and_mode_parse_and_display() {
        for s in ["VLP16", "vlp16", "VLP-16", "vlp_16"] {
            assert_eq!(s.parse::<SensorModel>().unwrap(), SensorModel::Vlp16);
        }
        assert_eq!(SensorModel::Vlp16.to_string(), "VLP16");
        let e = "HDL31".parse::<SensorModel>().unwrap_err().to_string();
        assert!(e.contains("HDL31") && e.contains("VLP16"), "{e}");
        for m in SensorModel::ALL {
            assert_eq!(m.name().parse::<SensorModel>().unwrap(), *m);
        }
        assert_eq!(
            "ot128".parse::<SensorModel>().unwrap(),
            SensorModel::Pandar128e4x
        );
        assert_eq!("dual".parse::<ReturnMode>().unwrap(), ReturnMode::Dual);
        assert_eq!(
            ReturnMode::Last.to_string().parse::<ReturnMode>().unwrap(),
            ReturnMode::Last
        );
        let m: SensorModel = serde_yaml::from_str("VLP-16").unwrap();
        assert_eq!(m, SensorModel::Vlp16);
    }

    const DB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
    );

    fn cfg() -> SensorConfig {
        SensorConfig::new(3, SensorModel::Vlp16, DB)
    }

    fn cal() -> Vec<u8> {
        std::fs::read(DB).unwrap()
    }

    #[test]
    fn rejections_are_diagnosed_once_after_64_datagrams() {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        p.set_name("front");
        assert_eq!(p.name(), "front");
        // RS-Helios MSOP packets on a VLP-16 pipeline: all malformed (wrong size), never decoded.
        let mut helios = vec![0u8; robosense::PACKET_LEN];
        helios[..4].copy_from_slice(&robosense::MSOP_MAGIC_HELIOS);
        let mut out = Vec::new();
        for _ in 0..REJECTION_DIAGNOSIS_PACKETS - 1 {
            p.push(&helios, 1, &mut out);
        }
        assert!(!p.diagnosed);
        p.push(&helios, 1, &mut out);
        assert!(p.diagnosed);
        assert_eq!(p.counters().decoded, 0);
        assert_eq!(
            describe_payload(&helios).as_deref(),
            Some("a RoboSense RS-Helios MSOP packet")
        );
        let mut v1 = helios.clone();
        v1[..8].copy_from_slice(&robosense::MSOP_MAGIC_V1);
        assert_eq!(
            describe_payload(&v1).as_deref(),
            Some("a RoboSense RS-LiDAR-16/32 or RS-Bpearl MSOP packet")
        );
        let mut vlp32 = vec![0u8; 1206];
        vlp32[..2].copy_from_slice(&[0xFF, 0xEE]);
        vlp32[1205] = 0x28;
        assert_eq!(
            describe_payload(&vlp32).as_deref(),
            Some("a VLP32C data packet")
        );
        assert_eq!(describe_payload(&[0u8; 100]), None);
    }

    #[test]
    fn config_errors_name_field_and_range() {
        let mut c = cfg();
        c.cut_angle_deg = 361.0;
        let e = ScanPipeline::new(&c, &cal()).unwrap_err().to_string();
        assert!(e.contains("cut_angle_deg") && e.contains("[0, 360]"), "{e}");
        let mut c = cfg();
        c.max_range_m = 1000.5;
        assert!(
            ScanPipeline::new(&c, &cal())
                .unwrap_err()
                .to_string()
                .contains("max_range_m")
        );
        let mut c = cfg();
        c.frame_timeout_ns = 0;
        assert!(
            ScanPipeline::new(&c, &cal())
                .unwrap_err()
                .to_string()
                .contains("frame_timeout_ns")
        );
        let mut c = cfg();
        c.min_range_m = f32::NAN;
        assert!(
            ScanPipeline::new(&c, &cal())
                .unwrap_err()
                .to_string()
                .contains("min_range_m")
        );
        let opts = PipelineOptions {
            fov_deg: Some((0.0, 400.0)),
            ..Default::default()
        };
        assert!(
            ScanPipeline::with_options(&cfg(), &cal(), opts)
                .unwrap_err()
                .to_string()
                .contains("fov_deg.max")
        );
        // Contents that are not UTF-8 are refused naming the file.
        let mut c = cfg();
        c.calibration = "/some/cal.yaml".into();
        let e = ScanPipeline::new(&c, &[0xFF, 0xFE]).unwrap_err();
        assert!(matches!(e, ConfigError::CalibrationIo { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "cannot read calibration file /some/cal.yaml: invalid utf-8 sequence of 1 bytes \
             from index 0"
        );
        assert!(ScanPipeline::new(&cfg(), &cal()).is_ok());
    }

    #[test]
    fn push_counts_and_never_panics() {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        let mut out = Vec::new();
        for len in [
            0usize, 1, 2, 100, 512, 554, 1142, 1205, 1206, 1207, 1270, 1271, 1500, 9000,
        ] {
            p.push(&vec![0xFFu8; len], 1, &mut out);
        }
        let c = *p.counters();
        assert_eq!(c.packets, 14);
        // 0xFF-filled: starts with FF but not FF EE; near-1206 sizes are malformed, 1206 has bad flags.
        assert_eq!((c.decoded, c.malformed, c.ignored), (0, 5, 9));
        assert!(out.is_empty());
    }
}
