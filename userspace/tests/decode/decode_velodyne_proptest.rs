//! Property tests: arbitrary bytes into every Velodyne decoder (VLP-16, VLP-32C, HDL-32E,
//! HDL-64E S2/S3, VLS-128) never panic (Rust has no out-of-bounds read without a panic and the
//! decoders hold no `unsafe`), keep the counters consistent, and only emit finite points
//! inside the configured range.

use std::path::PathBuf;

use proptest::prelude::*;

use lidarxdp_core::sensor::{DecodeFlavor, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, Fov};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

/// A flat table of `n` lasers in a temporary file (HDL-32E / HDL-64E have no shared table).
fn flat_table(n: usize) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lidarxdp_prop_{n}_{}.yaml", std::process::id()));
    if !path.exists() {
        let mut s = String::from("lasers:\n");
        for i in 0..n {
            s += &format!(
                "- {{laser_id: {i}, rot_correction: 0.01, vert_correction: {}, \
                 two_pt_correction_available: true, dist_correction: 1.2, \
                 dist_correction_x: 1.1, dist_correction_y: 1.3, focal_distance: 1000, \
                 focal_slope: 1.5, vert_offset_correction: 0.2, horiz_offset_correction: 0.03}}\n",
                -0.4 + 0.005 * i as f64
            );
        }
        // A temporary name unique to this call: tests run in parallel threads and may write
        // the same table at once; each renames its own complete file into place.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{k}"));
        std::fs::write(&tmp, s + &format!("num_lasers: {n}\n")).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

fn models() -> Vec<SensorConfig> {
    let mut v = vec![
        SensorConfig::new(
            0,
            SensorModel::Vlp16,
            format!("{DATA}vlp16/calibration/VLP16db.yaml"),
        ),
        SensorConfig::new(
            0,
            SensorModel::Vlp32c,
            format!("{DATA}vlp32c/calibration/VLP32_nebula.yaml"),
        ),
        SensorConfig::new(
            0,
            SensorModel::Vls128,
            format!("{DATA}vls128/calibration/VLS128.yaml"),
        ),
        SensorConfig::new(0, SensorModel::Hdl32e, flat_table(32)),
        SensorConfig::new(0, SensorModel::Hdl64eS2, flat_table(64)),
        SensorConfig::new(0, SensorModel::Hdl64eS3, flat_table(64)),
    ];
    v[0].cut_angle = Degrees::new(360.0).unwrap();
    v[1].cut_angle = Degrees::new(180.0).unwrap();
    v
}

/// Bytes shaped like a data packet: valid-looking flags (any Velodyne bank), azimuths and
/// return-mode bytes mostly in range, everything else arbitrary.
fn shaped() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 1206),
        prop_oneof![
            Just(vec![0xEEu8; 12]),
            Just((0..12).map(|b| [0xEE, 0xDD][b % 2]).collect::<Vec<u8>>()),
            Just(
                (0..12)
                    .map(|b| [0xEE, 0xEE, 0xDD, 0xDD][b % 4])
                    .collect::<Vec<u8>>()
            ),
            Just(
                (0..12)
                    .map(|b| [0xEE, 0xDD, 0xCC, 0xBB][b % 4])
                    .collect::<Vec<u8>>()
            ),
            prop::collection::vec(prop::sample::select(vec![0xEEu8, 0xDD, 0xCC, 0xBB]), 12),
        ],
        prop::collection::vec(prop_oneof![0u16..36_000, 35_990u16..36_010], 12),
        prop::sample::select(vec![0x37u8, 0x38, 0x39, b'H', 0x00]),
        prop::sample::select(vec![1200usize, 1205, 1206, 1206, 1206, 1207, 1210]),
    )
        .prop_map(|(mut b, flags, az, mode, len)| {
            for blk in 0..12 {
                b[blk * 100] = 0xFF;
                b[blk * 100 + 1] = flags[blk];
                b[blk * 100 + 2..blk * 100 + 4].copy_from_slice(&az[blk].to_le_bytes());
            }
            b[1204] = mode;
            b.resize(len, 0);
            b
        })
}

fn check(payloads: &[Vec<u8>], flavor: DecodeFlavor, fov: Option<(f64, f64)>) {
    for cfg in models() {
        let mut p = lidarxdp::calibration::pipeline_with_options(
            &cfg,
            PipelineOptions {
                flavor,
                fov: fov.map(|(a, b)| Fov::from_deg(a, b).unwrap()),
                ..Default::default()
            },
        )
        .unwrap();
        let mut out = Vec::new();
        for (i, b) in payloads.iter().enumerate() {
            p.push(b, 1_000_000_000 + i as u64 * 300_000, &mut out);
        }
        p.poll_timeout(u64::MAX / 2, &mut out);
        p.flush(&mut out);
        let c = *p.counters();
        assert_eq!(c.packets, payloads.len() as u64);
        assert_eq!(c.packets, c.accounted());
        for f in &out {
            for pt in f.points.autoware() {
                assert!(pt.x.is_finite() && pt.y.is_finite() && pt.z.is_finite());
                assert!(pt.distance > cfg.range.min().get() && pt.distance < cfg.range.max().get());
                assert!((0.0..std::f32::consts::TAU).contains(&pt.azimuth));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1300), 1..8)) {
        check(&payloads, DecodeFlavor::Nebula, None);
    }

    #[test]
    fn packet_shaped_bytes_never_panic(
        payloads in prop::collection::vec(shaped(), 1..6),
        manual in any::<bool>(),
        // A field of view from `min` over `width` 0.01° (never empty nor the full circle, which
        // the settings refuse).
        fov in prop::option::of((0u32..36_000, 1u32..36_000)),
    ) {
        let flavor = if manual { DecodeFlavor::Manual } else { DecodeFlavor::Nebula };
        let fov = fov.map(|(min, width)| {
            (f64::from(min) / 100.0, f64::from((min + width) % 36_000) / 100.0)
        });
        check(&payloads, flavor, fov);
    }
}
