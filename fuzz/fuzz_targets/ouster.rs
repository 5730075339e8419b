//! Ouster decoder with each metadata JSON of the shared data (every UDP profile captured
//! there), full field of view or 270°..90° (`OPT_A`), and, with `OPT_B` / `OPT_C`, the same
//! metadata turned into a firmware 3.x low-data-rate dual profile with the STANDARD or the FUSA
//! header ([`lidarxdp_fuzz::shared::ouster_fw3_variant`]): arbitrary payload sequences never
//! panic and every emitted point passes [`lidarxdp_fuzz::check_output`] (channel below the
//! metadata's pixels per column).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig};
use lidarxdp_core::valid::Fov;
use lidarxdp_fuzz::shared::{OPT_A, OPT_B, OPT_C, OUSTER, ouster_fw3_metadata};
use lidarxdp_fuzz::{Template, Templates, data_path, run_decoder};

static TEMPLATES: Templates = Templates::new();

fuzz_target!(|data: &[u8]| {
    run_decoder(
        &TEMPLATES,
        OUSTER,
        OPT_A | OPT_B | OPT_C,
        data,
        |e, opts| {
            let mut path = data_path(e.calibration?);
            if opts & (OPT_B | OPT_C) != 0 {
                // The firmware 3.x variant, written once per template (templates are cached).
                let text = ouster_fw3_metadata(&std::fs::read_to_string(&path).ok()?, opts)?;
                let name = format!(
                    "lidarxdp-fuzz-ouster-fw3-{}-{opts:02x}-{}.json",
                    path.file_stem()?.to_str()?,
                    std::process::id()
                );
                path = std::env::temp_dir().join(name);
                std::fs::write(&path, text).ok()?;
            }
            let meta = OusterMetadata::from_bytes(&std::fs::read(&path).ok()?, &path).ok()?;
            let cfg = SensorConfig::new(0, e.model, path);
            let po = PipelineOptions {
                fov: (opts & OPT_A != 0).then(|| Fov::from_deg(270.0, 90.0).unwrap()),
                ..PipelineOptions::default()
            };
            Template::build(cfg, po, meta.format.pixels_per_column)
        },
    );
});
