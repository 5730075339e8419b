//! RoboSense decoders (Helios-16P with its table, RS16 with the same table, RS32 / Bpearl /
//! Helios with a synthetic 32-row table), full field of view or 270°..90° (`OPT_A`), cut at 0°
//! or 180° (`OPT_B`): arbitrary payload sequences (MSOP and DIFOP) never panic and every
//! emitted point passes [`lidarxdp_fuzz::check_output`]. Each payload is also given to the
//! header detection.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::sensor::robosense::{detect_header, spec};
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig};
use lidarxdp_core::valid::{Degrees, Fov};
use lidarxdp_fuzz::shared::{OPT_A, OPT_B, ROBOSENSE, records};
use lidarxdp_fuzz::{Template, Templates, data_path, run_decoder};

static TEMPLATES: Templates = Templates::new();

/// A 32-row angle table (elevations -19.5°..11.5°, azimuth offsets 0..4°), written once.
fn synthetic_table() -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::temp_dir().join(format!(
            "lidarxdp-fuzz-robosense32-{}.csv",
            std::process::id()
        ));
        let text: String = (0..32)
            .map(|i| format!("{}.5,{}\n", i - 20, i % 5))
            .collect();
        std::fs::write(&path, text).ok()?;
        Some(path)
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    for (_, payload) in records(data.get(1..).unwrap_or_default()) {
        let _ = detect_header(payload);
    }
    run_decoder(&TEMPLATES, ROBOSENSE, OPT_A | OPT_B, data, |e, opts| {
        let path = match e.calibration {
            Some(rel) => data_path(rel),
            None => synthetic_table()?,
        };
        let mut cfg = SensorConfig::new(0, e.model, path);
        if opts & OPT_B != 0 {
            cfg.cut_angle = Degrees::new(180.0).unwrap();
        }
        let po = PipelineOptions {
            fov: (opts & OPT_A != 0).then(|| Fov::from_deg(270.0, 90.0).unwrap()),
            ..PipelineOptions::default()
        };
        Template::build(cfg, po, spec(e.model)?.lasers)
    });
});
