//! Ouster decoder with each metadata JSON of the shared data (every UDP profile captured
//! there), full field of view or 270°..90° (`OPT_A`): arbitrary payload sequences never panic
//! and every emitted point passes [`lidarxdp_fuzz::check_output`] (channel below the
//! metadata's pixels per column).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig};
use lidarxdp_core::valid::Fov;
use lidarxdp_fuzz::shared::{OPT_A, OUSTER};
use lidarxdp_fuzz::{Template, Templates, data_path, run_decoder};

static TEMPLATES: Templates = Templates::new();

fuzz_target!(|data: &[u8]| {
    run_decoder(&TEMPLATES, OUSTER, OPT_A, data, |e, opts| {
        let path = data_path(e.calibration?);
        let meta = OusterMetadata::from_bytes(&std::fs::read(&path).ok()?, &path).ok()?;
        let cfg = SensorConfig::new(0, e.model, path);
        let po = PipelineOptions {
            fov: (opts & OPT_A != 0).then(|| Fov::from_deg(270.0, 90.0).unwrap()),
            ..PipelineOptions::default()
        };
        Template::build(cfg, po, meta.format.pixels_per_column)
    });
});
