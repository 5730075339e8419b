//! Sans-IO sensor decoders: UDP payload bytes in, [`Frame`]s out.
//!
//! [`ScanPipeline`] is the per-sensor entry point used by every capture backend: it classifies
//! each payload, decodes data packets with the model's decoder ([`velodyne`]) and hands the
//! points to the [`crate::scan::ScanAssembler`], which cuts them into frames. It does no I/O,
//! never blocks, never panics, and allocates once per frame (its point buffer, pre-sized from
//! the previous frame).
//!
//! ## Sensor clock
//! A VLP-16 stamps each packet with µs past the top of the hour (manual section 9). The hour
//! comes from the host: for the first packet, the hour whose `top + µs` is nearest to the
//! packet's host time (so a sensor clock within ±30 min of the host resolves correctly across
//! an hour boundary, as ros-drivers/velodyne does); afterwards, the hour nearest to
//! `previous sensor time + host time elapsed`, so an unsynchronised sensor clock never jumps
//! by an hour in the middle of a stream.
//!
//! ## Compatibility with Tier IV Nebula
//! With [`DecodeFlavor::Nebula`] (the default) a VLP-16 stream decodes point-for-point as
//! Nebula's `Vlp16Decoder` does (verified against Nebula's ground-truth PCD, see
//! `tests/decode_vlp16.rs`), except: `elevation` is the beam angle in rad (Nebula stores its
//! sine), `time_stamp` follows the manual's dual-return timing table on the sensor clock (Nebula
//! uses the host stamp of the packet), and a damaged packet is dropped whole (Nebula keeps the
//! blocks before a bad flag).

pub mod calibration;
pub mod velodyne;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::frame::Frame;
use crate::scan::{PacketInfo, ScanAssembler};

use self::calibration::VelodyneCalibration;
use self::velodyne::{DecoderSettings, FovCdeg, Packet, Rejection, Vlp16Decoder};

/// Supported sensor models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SensorModel {
    /// Velodyne VLP-16 (Puck): 16 lasers, 1206-byte data packets on UDP port 2368.
    #[serde(rename = "VLP16", alias = "vlp16", alias = "VLP-16", alias = "vlp-16")]
    Vlp16,
}

impl SensorModel {
    /// Every supported model (for CLI help).
    pub const ALL: [SensorModel; 1] = [SensorModel::Vlp16];

    /// Number of lasers (channels).
    pub const fn lasers(self) -> usize {
        match self {
            SensorModel::Vlp16 => 16,
        }
    }

    /// UDP payload size of a data packet, bytes.
    pub const fn data_packet_len(self) -> usize {
        match self {
            SensorModel::Vlp16 => velodyne::DATA_PACKET_LEN,
        }
    }

    /// Factory default UDP destination port of data packets.
    pub const fn default_data_port(self) -> u16 {
        match self {
            SensorModel::Vlp16 => 2368,
        }
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

    /// Accepts `VLP16`, `vlp16`, `VLP-16` (case-insensitive, `-`/`_` ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm: String = s
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .collect::<String>()
            .to_ascii_lowercase();
        match norm.as_str() {
            "vlp16" => Ok(SensorModel::Vlp16),
            _ => Err(ParseEnumError {
                what: "sensor model",
                given: s.into(),
                valid: "VLP16",
            }),
        }
    }
}

impl fmt::Display for SensorModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SensorModel::Vlp16 => "VLP16",
        })
    }
}

/// Return mode of a Velodyne sensor, detected per packet from byte 1204
/// (0x37 strongest, 0x38 last, 0x39 dual; VLP-16 manual section 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReturnMode {
    /// Strongest return only (0x37).
    Strongest,
    /// Last return only (0x38).
    Last,
    /// Last and strongest returns in block pairs (0x39).
    Dual,
}

impl FromStr for ReturnMode {
    type Err = ParseEnumError;

    /// Accepts `strongest`, `last`, `dual` (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "strongest" => Ok(ReturnMode::Strongest),
            "last" => Ok(ReturnMode::Last),
            "dual" => Ok(ReturnMode::Dual),
            _ => Err(ParseEnumError {
                what: "return mode",
                given: s.into(),
                valid: "Strongest, Last, Dual",
            }),
        }
    }
}

impl fmt::Display for ReturnMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReturnMode::Strongest => "Strongest",
            ReturnMode::Last => "Last",
            ReturnMode::Dual => "Dual",
        })
    }
}

/// Which rules the decoder follows where Tier IV Nebula and the VLP-16 manual differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeFlavor {
    /// Nebula's `Vlp16Decoder`, bit for bit (default; Autoware's reference): the last block
    /// (single) / block 10 (dual) is not interpolated, an odd dual block takes the next pair's
    /// azimuth without interpolation, and in dual mode the return with the *longer* range is
    /// labelled "first" (`First*`), the shorter one "last".
    #[default]
    Nebula,
    /// The VLP-16 manual: every firing sequence interpolated between its block (pair) azimuth
    /// and the next one, the last block (pair) reusing the previous advance; in dual mode the
    /// shorter range is "first".
    Manual,
}

/// Per-sensor configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SensorConfig {
    /// Index of the sensor in the daemon configuration; copied into every [`Frame`].
    pub sensor_id: u16,
    /// Sensor model; wins over the packet's product-id byte.
    pub model: SensorModel,
    /// Calibration YAML (ros-drivers / Nebula Velodyne format), see [`calibration`].
    pub calibration: PathBuf,
    /// Frame boundary azimuth, degrees, valid [0, 360] (360 ≡ 0); default 0.
    pub cut_angle_deg: f64,
    /// Host-time silence that closes a frame, ns, valid [1 ms, 60 s]; default 200 ms.
    pub frame_timeout_ns: u64,
    /// Points with range <= this are dropped, m, valid [0, max_range_m); default 0.3.
    pub min_range_m: f32,
    /// Points with range >= this are dropped, m, valid (min_range_m, 1000]; default 300.
    pub max_range_m: f32,
}

impl SensorConfig {
    /// A configuration with the defaults: cut 0°, timeout 200 ms, range (0.3, 300) m.
    pub fn new(sensor_id: u16, model: SensorModel, calibration: impl Into<PathBuf>) -> Self {
        Self {
            sensor_id,
            model,
            calibration: calibration.into(),
            cut_angle_deg: 0.0,
            frame_timeout_ns: 200_000_000,
            min_range_m: 0.3,
            max_range_m: 300.0,
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
        if !(self.min_range_m.is_finite() && self.min_range_m >= 0.0) {
            return err(
                "min_range_m",
                self.min_range_m.to_string(),
                "[0, max_range_m) m",
            );
        }
        if !(self.max_range_m.is_finite()
            && self.max_range_m > self.min_range_m
            && self.max_range_m <= 1000.0)
        {
            return err(
                "max_range_m",
                self.max_range_m.to_string(),
                "(min_range_m, 1000] m",
            );
        }
        Ok(())
    }
}

/// Extra decoding options that are not part of a sensor's deployment configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PipelineOptions {
    /// Nebula- or manual-style azimuth interpolation and dual-return labels.
    pub flavor: DecodeFlavor,
    /// Field of view `(min, max)`, degrees in [0, 360], inclusive, on the corrected point
    /// azimuth; `min > max` wraps through 0° (Nebula `cloud_min_angle`/`cloud_max_angle`).
    /// `None` (default) keeps all azimuths. With [`DecodeFlavor::Nebula`] whole blocks whose
    /// azimuth lies outside `[min, max]` are skipped first, as Nebula does.
    pub fov_deg: Option<(f64, f64)>,
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
    /// The calibration file is not valid calibration YAML.
    #[error("calibration file {path} is not a valid Velodyne calibration: {message}")]
    CalibrationYaml {
        /// The file (empty when parsed from a string).
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
}

/// Decoder counters of one [`ScanPipeline`] (monotonic, never reset).
///
/// `packets == decoded + malformed + ignored` always holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeCounters {
    /// Payloads pushed.
    pub packets: u64,
    /// Valid data packets decoded.
    pub decoded: u64,
    /// Damaged data packets dropped: wrong size near 1206 bytes, bad block flag, azimuth >=
    /// 36000, unknown return-mode byte.
    pub malformed: u64,
    /// Foreign payloads dropped (other sizes, e.g. 512-byte position packets).
    pub ignored: u64,
    /// Frames emitted.
    pub frames: u64,
    /// Points in emitted frames.
    pub points: u64,
}

/// Decoder + scan assembler for one sensor.
#[derive(Debug)]
pub struct ScanPipeline {
    model: SensorModel,
    decoder: Vlp16Decoder,
    assembler: ScanAssembler,
    counters: DecodeCounters,
    /// Last `(host_ns, sensor_ns)` pair, for resolving the hour of the sensor clock.
    clock: Option<(u64, u64)>,
    return_mode: Option<ReturnMode>,
}

const HOUR_NS: i128 = 3_600_000_000_000;

/// f32 → f64 through the shortest decimal, so `0.3f32` compares as the `0.3` the user wrote.
fn decimal_f64(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

impl ScanPipeline {
    /// Builds the pipeline with default [`PipelineOptions`] (Nebula flavor, full field of view).
    ///
    /// # Errors
    /// [`ConfigError`] for an out-of-range field (see [`SensorConfig::validate`]) or an
    /// unreadable / invalid calibration file.
    pub fn new(cfg: &SensorConfig) -> Result<Self, ConfigError> {
        Self::with_options(cfg, PipelineOptions::default())
    }

    /// Builds the pipeline with explicit options.
    ///
    /// # Errors
    /// As [`ScanPipeline::new`], plus [`ConfigError::OutOfRange`] for a `fov_deg` bound
    /// outside [0, 360].
    pub fn with_options(cfg: &SensorConfig, opts: PipelineOptions) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let fov = match opts.fov_deg {
            None => None,
            Some((min, max)) => {
                for (field, v) in [("fov_deg.min", min), ("fov_deg.max", max)] {
                    if !(v.is_finite() && (0.0..=360.0).contains(&v)) {
                        return Err(ConfigError::OutOfRange {
                            field: field.into(),
                            value: v.to_string(),
                            valid: "[0, 360] deg".into(),
                        });
                    }
                }
                Some(FovCdeg {
                    min: (min * 100.0).round() as u32,
                    max: (max * 100.0).round() as u32,
                })
            }
        };
        let calib = VelodyneCalibration::from_file(&cfg.calibration, cfg.model.lasers())?;
        let settings = DecoderSettings {
            min_range_m: decimal_f64(cfg.min_range_m),
            max_range_m: decimal_f64(cfg.max_range_m),
            fov,
            flavor: opts.flavor,
        };
        Ok(Self {
            model: cfg.model,
            decoder: Vlp16Decoder::new(calib, settings),
            assembler: ScanAssembler::new(cfg.sensor_id, cfg.cut_angle_deg, cfg.frame_timeout_ns),
            counters: DecodeCounters::default(),
            clock: None,
            return_mode: None,
        })
    }

    /// The configured model.
    pub fn model(&self) -> SensorModel {
        self.model
    }

    /// Return mode of the last decoded data packet (byte 1204), if any.
    pub fn return_mode(&self) -> Option<ReturnMode> {
        self.return_mode
    }

    /// Resolves a µs-past-the-hour stamp to ns since the Unix epoch (see the module docs).
    fn sensor_time_ns(&mut self, toh_us: u32, host_ns: u64) -> u64 {
        let reference: i128 = match self.clock {
            Some((h, s)) => i128::from(s) + (i128::from(host_ns) - i128::from(h)),
            None => i128::from(host_ns),
        };
        let t = reference.div_euclid(HOUR_NS) * HOUR_NS + i128::from(toh_us) * 1000;
        let best = [t - HOUR_NS, t, t + HOUR_NS]
            .into_iter()
            .min_by_key(|c| (c - reference).abs())
            .unwrap_or(t);
        let ns = best.clamp(0, i128::from(u64::MAX)) as u64;
        self.clock = Some((host_ns, ns));
        ns
    }

    /// Pushes one UDP payload received at `host_ns` (ns since the Unix epoch, or the pcap
    /// record time). Frames completed by this payload are appended to `out`.
    ///
    /// Never panics: a 1206-byte payload is validated once by [`Packet::new_checked`]; anything
    /// else is counted `malformed` or `ignored` (rule in [`velodyne::classify`]) and leaves the
    /// frame in progress untouched apart from its malformed count. A host-time gap longer than
    /// the frame timeout closes the frame in progress before this packet is decoded.
    pub fn push(&mut self, payload: &[u8], host_ns: u64, out: &mut Vec<Frame>) {
        self.counters.packets += 1;
        let packet: Packet<&[u8]> = match velodyne::classify(payload) {
            Ok(p) => p,
            Err(Rejection::Ignored) => {
                self.counters.ignored += 1;
                return;
            }
            Err(Rejection::Malformed(_)) => {
                self.counters.malformed += 1;
                self.assembler.note_malformed();
                return;
            }
        };
        self.counters.decoded += 1;
        let before = out.len();
        let mode = packet.return_mode();
        self.return_mode = Some(mode);
        let sensor_ns = self.sensor_time_ns(packet.timestamp_us(), host_ns);
        let span = |a: u16, b: u16| {
            (velodyne::AZIMUTH_UNITS + u32::from(b) - u32::from(a)) % velodyne::AZIMUTH_UNITS
        };
        // Azimuth turned per packet: 11 block steps (single) or 5 pair steps (dual), scaled to 12/6.
        let advance = match mode {
            ReturnMode::Dual => span(packet.azimuth(0), packet.azimuth(10)) * 6 / 5,
            ReturnMode::Strongest | ReturnMode::Last => {
                span(packet.azimuth(0), packet.azimuth(11)) * 12 / 11
            }
        };
        self.assembler.begin_packet(
            PacketInfo {
                host_ns,
                sensor_ns,
                first_azimuth_cdeg: packet.azimuth(0),
                last_azimuth_cdeg: packet.azimuth(velodyne::BLOCKS - 1),
                advance_cdeg: advance,
                interval_ns: velodyne::packet_interval_ns(mode),
            },
            out,
        );
        let asm = &mut self.assembler;
        self.decoder.decode(&packet, |d| {
            asm.add_point(d.point, d.azimuth_cdeg, d.offset_ns)
        });
        self.assembler.end_packet(out);
        self.count_frames(before, out);
    }

    fn count_frames(&mut self, before: usize, out: &[Frame]) {
        for f in out.get(before..).unwrap_or_default() {
            self.counters.frames += 1;
            self.counters.points += f.points.len() as u64;
        }
    }

    /// Closes the frame in progress if no data packet arrived for more than
    /// `frame_timeout_ns` of host time before `now_host_ns` (ns since the Unix epoch).
    pub fn poll_timeout(&mut self, now_host_ns: u64, out: &mut Vec<Frame>) {
        let before = out.len();
        self.assembler.poll_timeout(now_host_ns, out);
        self.count_frames(before, out);
    }

    /// Closes the frame in progress (end of a pcap, shutdown). A frame that holds only the
    /// points carried past the last cut, with no packet of its own, is dropped.
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        let before = out.len();
        self.assembler.flush(out);
        self.count_frames(before, out);
    }

    /// The counters.
    pub fn counters(&self) -> &DecodeCounters {
        &self.counters
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
        let e = "HDL32".parse::<SensorModel>().unwrap_err().to_string();
        assert!(e.contains("HDL32") && e.contains("VLP16"), "{e}");
        assert_eq!("dual".parse::<ReturnMode>().unwrap(), ReturnMode::Dual);
        assert_eq!(
            ReturnMode::Last.to_string().parse::<ReturnMode>().unwrap(),
            ReturnMode::Last
        );
        let m: SensorModel = serde_yaml::from_str("VLP-16").unwrap();
        assert_eq!(m, SensorModel::Vlp16);
    }

    fn cfg() -> SensorConfig {
        SensorConfig::new(
            3,
            SensorModel::Vlp16,
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
            ),
        )
    }

    #[test]
    fn config_errors_name_field_and_range() {
        let mut c = cfg();
        c.cut_angle_deg = 361.0;
        let e = ScanPipeline::new(&c).unwrap_err().to_string();
        assert!(e.contains("cut_angle_deg") && e.contains("[0, 360]"), "{e}");
        let mut c = cfg();
        c.max_range_m = 0.1;
        assert!(
            ScanPipeline::new(&c)
                .unwrap_err()
                .to_string()
                .contains("max_range_m")
        );
        let mut c = cfg();
        c.frame_timeout_ns = 0;
        assert!(
            ScanPipeline::new(&c)
                .unwrap_err()
                .to_string()
                .contains("frame_timeout_ns")
        );
        let mut c = cfg();
        c.min_range_m = f32::NAN;
        assert!(
            ScanPipeline::new(&c)
                .unwrap_err()
                .to_string()
                .contains("min_range_m")
        );
        let opts = PipelineOptions {
            fov_deg: Some((0.0, 400.0)),
            ..Default::default()
        };
        assert!(
            ScanPipeline::with_options(&cfg(), opts)
                .unwrap_err()
                .to_string()
                .contains("fov_deg.max")
        );
        let mut c = cfg();
        c.calibration = "/nonexistent/cal.yaml".into();
        assert!(matches!(
            ScanPipeline::new(&c).unwrap_err(),
            ConfigError::CalibrationIo { .. }
        ));
        assert!(ScanPipeline::new(&cfg()).is_ok());
    }

    #[test]
    fn sensor_clock_hour_resolution() {
        let mut p = ScanPipeline::new(&cfg()).unwrap();
        let h = 3_600_000_000_000u64;
        let host = 400_000 * h + 10_000_000_000; // 10 s past an hour
        // Sensor says 3599.5 s past the hour: it is the previous hour, 10.5 s earlier.
        assert_eq!(
            p.sensor_time_ns(3_599_500_000, host),
            400_000 * h - 500_000_000
        );
        // The sensor clock then wraps to 0.5 s: still continuous although the host moved 1 s.
        assert_eq!(
            p.sensor_time_ns(500_000, host + 1_000_000_000),
            400_000 * h + 500_000_000
        );
        // An unsynchronised sensor (:10 while the host says :50) resolves to the nearest hour,
        // 20 min ahead, and then stays continuous.
        let mut p = ScanPipeline::new(&cfg()).unwrap();
        let host = 400_000 * h + 50 * 60 * 1_000_000_000; // :50
        let s0 = p.sensor_time_ns(10 * 60 * 1_000_000, host);
        assert_eq!(s0, 400_001 * h + 10 * 60 * 1_000_000_000);
        let s1 = p.sensor_time_ns(10 * 60 * 1_000_000 + 1_000, host + 11 * 60 * 1_000_000_000);
        assert_eq!(s1, s0 + 1_000_000);
    }

    #[test]
    fn push_counts_and_never_panics() {
        let mut p = ScanPipeline::new(&cfg()).unwrap();
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
