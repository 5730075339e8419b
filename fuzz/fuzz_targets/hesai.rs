//! Hesai decoders (every model with an angle-correction CSV in the shared data), CRC check on
//! and off (`OPT_A` turns it off), full field of view or 270°..90° (`OPT_B`): arbitrary payload
//! sequences never panic and every emitted point passes [`lidarxdp_fuzz::check_output`].
//! Each payload is also given to the model auto-detection.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::sensor::hesai::{layout, packet};
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig};
use lidarxdp_core::valid::Fov;
use lidarxdp_fuzz::shared::{HESAI, OPT_A, OPT_B, records};
use lidarxdp_fuzz::{Template, Templates, data_path, run_decoder};

static TEMPLATES: Templates = Templates::new();

fuzz_target!(|data: &[u8]| {
    for (_, payload) in records(data.get(1..).unwrap_or_default()) {
        if let Some(m) = packet::detect_model(payload) {
            assert!(layout::layout(m).is_some(), "detected {m} has no layout");
        }
    }
    run_decoder(&TEMPLATES, HESAI, OPT_A | OPT_B, data, |e, opts| {
        let cfg = SensorConfig::new(0, e.model, data_path(e.calibration?));
        let po = PipelineOptions {
            hesai_skip_crc: opts & OPT_A != 0,
            fov: (opts & OPT_B != 0).then(|| Fov::from_deg(270.0, 90.0).unwrap()),
            ..PipelineOptions::default()
        };
        Template::build(cfg, po, layout::layout(e.model)?.channels)
    });
});
