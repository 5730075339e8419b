//! Velodyne decoders (VLP-16, VLP-32C, VLS-128 with their shared calibrations): arbitrary
//! payload sequences never panic and every emitted point passes
//! [`lidarxdp_fuzz::check_output`]. Selector options: `OPT_A` manual flavor, `OPT_B` field of
//! view 270°..90°, `OPT_C` cut at 180°.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::sensor::velodyne::multi::laser_count;
use lidarxdp_core::sensor::{DecodeFlavor, PipelineOptions, SensorConfig};
use lidarxdp_core::valid::{Degrees, Fov};
use lidarxdp_fuzz::shared::{OPT_A, OPT_B, OPT_C, VELODYNE};
use lidarxdp_fuzz::{Template, Templates, data_path, run_decoder};

static TEMPLATES: Templates = Templates::new();

fuzz_target!(|data: &[u8]| {
    run_decoder(
        &TEMPLATES,
        VELODYNE,
        OPT_A | OPT_B | OPT_C,
        data,
        |e, opts| {
            let mut cfg = SensorConfig::new(0, e.model, data_path(e.calibration?));
            if opts & OPT_C != 0 {
                cfg.cut_angle = Degrees::new(180.0).unwrap();
            }
            let po = PipelineOptions {
                flavor: if opts & OPT_A != 0 {
                    DecodeFlavor::Manual
                } else {
                    DecodeFlavor::Nebula
                },
                fov: (opts & OPT_B != 0).then(|| Fov::from_deg(270.0, 90.0).unwrap()),
                ..PipelineOptions::default()
            };
            Template::build(cfg, po, laser_count(e.model))
        },
    );
});
