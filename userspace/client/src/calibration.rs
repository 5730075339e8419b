//! Calibration and metadata files, read for the sans-IO core: the core's parsers and
//! [`ScanPipeline`] take a file's contents, and this module reads them (bounded and
//! non-blocking), so the daemon, `decode`, the tests and the benches load calibrations one
//! way.
//!
//! Every error is a [`ConfigError`] naming the file.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use lidarxdp_core::sensor::velodyne::{self, detection_needs_calibration};
use lidarxdp_core::sensor::{
    ConfigError, PipelineOptions, ScanPipeline, SensorConfig, SensorModel,
};

/// Largest calibration / metadata file read: 16 MiB. The largest real one (an Ouster OS-128
/// metadata JSON) is about 200 KiB.
pub const MAX_CALIBRATION_BYTES: u64 = 16 << 20;

/// Reads a calibration or metadata file whole, bounded: a regular file larger than
/// [`MAX_CALIBRATION_BYTES`] is refused before any byte is read; anything else (a FIFO, a
/// character device such as `/dev/zero`) is read up to the cap and refused if it goes beyond.
/// Opened with `O_NONBLOCK` (open(2)): a FIFO without a writer must not block start-up or a
/// SIGHUP reload (it reads as empty, and the parser refuses it); regular files are unaffected.
///
/// # Errors
/// [`ConfigError::CalibrationIo`] naming the file: the open/read error, or (kind
/// `InvalidData`) a file over the cap, naming the cap.
pub fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let io = |source| ConfigError::CalibrationIo {
        path: path.to_path_buf(),
        source,
    };
    let too_big = |what: String| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{what}; calibration and metadata files are capped at {MAX_CALIBRATION_BYTES} \
                 bytes (16 MiB)"
            ),
        ))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_file() && meta.len() > MAX_CALIBRATION_BYTES {
        return Err(too_big(format!("file is {} bytes", meta.len())));
    }
    let mut buf = Vec::new();
    file.take(MAX_CALIBRATION_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io)?;
    if buf.len() as u64 > MAX_CALIBRATION_BYTES {
        return Err(too_big(if meta.is_file() {
            "file grew while it was read".to_owned()
        } else {
            "not a regular file and longer than the cap".to_owned()
        }));
    }
    Ok(buf)
}

/// [`ScanPipeline::new`] with the calibration `cfg.calibration` names, read by [`read`].
///
/// # Errors
/// As [`read`] and [`ScanPipeline::new`].
pub fn pipeline(cfg: &SensorConfig) -> Result<ScanPipeline, ConfigError> {
    pipeline_with_options(cfg, PipelineOptions::default())
}

/// [`ScanPipeline::with_options`] with the calibration `cfg.calibration` names, read by
/// [`read`]. (Every numeric setting is a validated type already: nothing is left to check
/// before the file is read.)
///
/// # Errors
/// As [`read`] and [`ScanPipeline::with_options`].
pub fn pipeline_with_options(
    cfg: &SensorConfig,
    opts: PipelineOptions,
) -> Result<ScanPipeline, ConfigError> {
    ScanPipeline::with_options(cfg, &read(&cfg.calibration)?, opts)
}

/// [`velodyne::confirm_detected_model`] for the calibration file `path`, which is read (by
/// [`read`]) only for a model whose detection looks at it (a Velodyne model).
///
/// # Errors
/// As [`read`] and [`velodyne::confirm_detected_model`].
pub fn confirm_detected_model(
    named: SensorModel,
    path: &Path,
) -> Result<(SensorModel, Option<String>), ConfigError> {
    if !detection_needs_calibration(named) {
        return Ok((named, None));
    }
    velodyne::confirm_detected_model(named, &read(path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing file is refused naming it, as the open error.
    #[test]
    fn missing_file_names_it() {
        let e = read(Path::new("/nonexistent/cal.yaml")).unwrap_err();
        assert!(matches!(e, ConfigError::CalibrationIo { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "cannot read calibration file /nonexistent/cal.yaml: No such file or directory \
             (os error 2)"
        );
        let cfg = SensorConfig::new(0, SensorModel::Vlp16, "/nonexistent/cal.yaml");
        assert!(matches!(
            pipeline(&cfg).unwrap_err(),
            ConfigError::CalibrationIo { .. }
        ));
    }
}
