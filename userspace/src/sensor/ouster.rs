//! Ouster decoders (not implemented yet: every Ouster model is refused at configuration time).
use super::{ConfigError, PipelineOptions, SensorConfig, SensorModel, VendorDecoder};

/// Builds the decoder for a Ouster model.
///
/// # Errors
/// [`ConfigError::Unsupported`] until the Ouster decoders land.
pub fn build(
    cfg: &SensorConfig,
    _opts: PipelineOptions,
) -> Result<Box<dyn VendorDecoder>, ConfigError> {
    Err(ConfigError::Unsupported {
        model: cfg.model,
        supported: supported(),
    })
}

fn supported() -> String {
    SensorModel::ALL
        .iter()
        .filter(|m| m.family() == super::Family::Velodyne && **m == SensorModel::Vlp16)
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ")
}
