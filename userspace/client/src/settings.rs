//! The settings of an offline decode, checked and resolved into a sensor configuration and
//! decode options: the one rule set of `lidarxdp decode` and the Python package's
//! `read_pcap` / `Decoder`, so both refuse the same input with the same sentence (the field,
//! its value and its valid range).

use lidarxdp_core::layout::PointType;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use lidarxdp_core::sensor::{
    DecodeFlavor, PipelineOptions, SensorConfig, SensorModel, Stamp, detect_model,
};
use lidarxdp_core::valid::{Degrees, Fov, Metres};

use crate::offline::{CaptureReader, DatagramFilter, DecodeOptions, OfflineError};

/// Datagrams [`detect`] looks at: 200.
pub const DETECT_DATAGRAMS: usize = 200;

/// Why settings were refused: the sentence names the setting as the CLI names it (`--sensor`,
/// `--min-range`, `--cut-angle`), its value and its valid range.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A setting is out of its range or contradicts another.
    #[error("{0}")]
    Invalid(String),
    /// The capture or the calibration file could not be read.
    #[error(transparent)]
    Offline(#[from] OfflineError),
}

/// What an offline decode is asked to do (the options of `lidarxdp decode`).
#[derive(Clone, Debug)]
pub struct DecodeSettings {
    /// The model; `None`: identified from the capture ([`detect`]) where the packets name it.
    pub sensor: Option<SensorModel>,
    /// Calibration file (Velodyne YAML, Hesai CSV/DAT, Ouster metadata JSON, RoboSense CSV).
    pub calibration: PathBuf,
    /// Cut angle, degrees in [0, 360].
    pub cut_angle: Degrees,
    /// Field of view, degrees (`min > max` wraps through 0°).
    pub fov: Option<Fov>,
    /// Points at this range or closer are dropped, m (default: the datasheet minimum).
    pub min_range: Option<Metres>,
    /// Points at this range or farther are dropped, m (default: the datasheet maximum).
    pub max_range: Option<Metres>,
    /// The clock of each frame's `start_ns`.
    pub stamp: Stamp,
    /// Only datagrams to this UDP destination port.
    pub port: Option<u16>,
    /// Only datagrams from this IP source.
    pub source: Option<IpAddr>,
    /// Velodyne: decode as Tier IV Nebula does, bit for bit.
    pub nebula_compat: bool,
    /// Hesai: do not check the packets' CRCs.
    pub hesai_skip_crc: bool,
    /// The layout of the frames' points ([`lidarxdp_core::layout::PointType`]).
    pub point_type: PointType,
}

impl DecodeSettings {
    /// Defaults for `calibration`: model detected, cut angle 0°, no field of view, the
    /// datasheet range, sensor clock, every port and source, the manuals' rules.
    pub fn new(calibration: impl Into<PathBuf>) -> Self {
        DecodeSettings {
            sensor: None,
            calibration: calibration.into(),
            cut_angle: Degrees::default(),
            fov: None,
            min_range: None,
            max_range: None,
            stamp: Stamp::Sensor,
            port: None,
            source: None,
            nebula_compat: false,
            hesai_skip_crc: false,
            point_type: PointType::Autoware,
        }
    }

    /// The model: [`DecodeSettings::sensor`], else the one the first datagrams of `capture`
    /// name, confirmed against the calibration (a Velodyne's laser count). Returns it and the
    /// notes to show the user (what was detected, a warning).
    ///
    /// # Errors
    /// [`SettingsError::Invalid`] when no datagram names a model (Ouster, RoboSense) or the
    /// calibration contradicts it; [`SettingsError::Offline`] when a file cannot be read.
    pub fn model(&self, capture: &Path) -> Result<(SensorModel, Vec<String>), SettingsError> {
        if let Some(m) = self.sensor {
            return Ok((m, Vec::new()));
        }
        let (detected, note) = detect(capture, self.port, self.source)?;
        let (model, warning) =
            crate::calibration::confirm_detected_model(detected, &self.calibration)
                .map_err(|e| SettingsError::Offline(e.into()))?;
        let mut notes = vec![note];
        notes.extend(warning.map(|w| format!("warning: {w}")));
        Ok((model, notes))
    }

    /// The sensor configuration (id 0) and decode options for `model`.
    ///
    /// # Errors
    /// [`SettingsError::Invalid`]: a range gate whose minimum is not below its maximum
    /// ([`SensorModel::range_gate`]), named by its flag.
    pub fn resolve(
        &self,
        model: SensorModel,
    ) -> Result<(SensorConfig, DecodeOptions), SettingsError> {
        let range = model
            .range_gate(
                self.min_range,
                self.max_range,
                ("--min-range", "--max-range"),
            )
            .map_err(|e| SettingsError::Invalid(e.to_string()))?;
        let cfg = SensorConfig {
            cut_angle: self.cut_angle,
            range,
            stamp: self.stamp,
            point_type: self.point_type,
            ..SensorConfig::new(0, model, &self.calibration)
        };
        let opts = DecodeOptions {
            port: self.port,
            source: self.source,
            pipeline: PipelineOptions {
                fov: self.fov,
                hesai_skip_crc: self.hesai_skip_crc,
                flavor: DecodeFlavor::from_nebula_compat(self.nebula_compat),
            },
        };
        Ok((cfg, opts))
    }
}

/// The model most of the first [`DETECT_DATAGRAMS`] datagrams of `capture` (to `port`, from
/// `source`) name ([`detect_model`]), and a sentence saying so.
///
/// # Errors
/// [`SettingsError::Invalid`] when none names a model (Ouster and RoboSense packets never do);
/// [`SettingsError::Offline`] when the capture cannot be read.
pub fn detect(
    capture: &Path,
    port: Option<u16>,
    source: Option<IpAddr>,
) -> Result<(SensorModel, String), SettingsError> {
    let mut votes: Vec<(SensorModel, usize)> = Vec::new();
    let mut seen = 0usize;
    for d in CaptureReader::open(capture, DatagramFilter { port, source })? {
        let d = d?;
        seen += 1;
        if let Some(m) = detect_model(&d.payload) {
            match votes.iter_mut().find(|(v, _)| *v == m) {
                Some((_, n)) => *n += 1,
                None => votes.push((m, 1)),
            }
        }
        if seen >= DETECT_DATAGRAMS {
            break;
        }
    }
    let Some(&(model, n)) = votes.iter().max_by_key(|(_, n)| *n) else {
        return Err(SettingsError::Invalid(format!(
            "--sensor: none of the first {seen} datagrams of {} names its model (Ouster and \
             RoboSense packets never do); give --sensor MODEL",
            capture.display()
        )));
    };
    let note = format!(
        "--sensor not given; {n} of the first {seen} datagrams say {} (pass --sensor to \
         override)",
        model.name()
    );
    Ok((model, note))
}
