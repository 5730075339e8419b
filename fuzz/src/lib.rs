//! Helpers shared by the lidarxdp fuzz targets (`fuzz_targets/*.rs`, run with `cargo fuzz`):
//! one configured [`ScanPipeline`] per selector, built once and cloned per input, and the
//! invariants every decoder target checks on what comes out. See `docs/fuzzing.md`.
pub mod shared;

use std::sync::{Mutex, OnceLock};

use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{ScanPipeline, SensorConfig};

use shared::{GAP_UNIT_NS, SensorEntry, records};

/// Host time of an input's first payload, ns since the Unix epoch (2023-01-11).
pub const BASE_HOST_NS: u64 = 1_673_400_000_000_000_000;

/// Sensor id configured in every pipeline (checked in every frame header).
pub const SENSOR_ID: u16 = 7;

/// A configured pipeline and what its output must satisfy.
pub struct Template {
    /// The pipeline as built, cloned for each input.
    pub pipeline: ScanPipeline,
    /// Channels of the sensor: every point's `channel` is below.
    pub channels: usize,
    /// The configured range gate `(min, max)`, m: every point's distance lies inside (inclusive).
    pub range_m: (f32, f32),
}

impl Template {
    /// A template for `cfg` (its `sensor_id` replaced by [`SENSOR_ID`]), or `None` when the
    /// configuration is rejected (an option combination the model does not accept).
    pub fn build(
        mut cfg: SensorConfig,
        opts: lidarxdp_core::sensor::PipelineOptions,
        channels: usize,
    ) -> Option<Template> {
        cfg.sensor_id = SENSOR_ID;
        let calibration = std::fs::read(&cfg.calibration).ok()?;
        let pipeline = ScanPipeline::with_options(&cfg, &calibration, opts).ok()?;
        Some(Template {
            pipeline,
            channels,
            range_m: (cfg.range.min().get(), cfg.range.max().get()),
        })
    }
}

/// One lazily built [`Template`] per normalised selector byte (behind a `Mutex` only because
/// a `static` must be `Sync` and a pipeline is just `Send`; fuzzing is single-threaded).
pub struct Templates([OnceLock<Option<Mutex<Template>>>; 256]);

impl Templates {
    /// No template built yet.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Templates([const { OnceLock::new() }; 256])
    }
}

/// Runs one decoder input (format in [`shared`]): picks the entry and options from the
/// selector byte (only the option bits in `used_opts` count), clones the entry's template
/// (`build` makes it on first use), pushes every record, polls the frame timeout after gaps of
/// 100 ms or more, flushes, and checks [`check_output`].
pub fn run_decoder(
    templates: &Templates,
    entries: &'static [SensorEntry],
    used_opts: u8,
    data: &[u8],
    build: impl FnOnce(&'static SensorEntry, u8) -> Option<Template>,
) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let index = usize::from(selector & 0x0F) % entries.len();
    let opts = selector & used_opts & 0xF0;
    let Some(slot) = templates.0.get(index | usize::from(opts)) else {
        return;
    };
    let Some(template) = slot.get_or_init(|| build(&entries[index], opts).map(Mutex::new)) else {
        return;
    };
    let template = template.lock().unwrap_or_else(|e| e.into_inner());
    let mut p = template.pipeline.clone();
    let mut out = Vec::new();
    let mut host_ns = BASE_HOST_NS;
    let mut pushed = 0u64;
    for (gap, payload) in records(rest) {
        host_ns += u64::from(gap) * GAP_UNIT_NS;
        if gap >= 10_000 {
            p.poll_timeout(host_ns, &mut out);
        }
        p.push(payload, host_ns, &mut out);
        pushed += 1;
    }
    p.flush(&mut out);
    check_output(&template, &p, pushed, &out);
}

/// The invariants of a pipeline's output after `pushed` payloads and a flush: counters add up
/// (`packets == accounted + held`, frames and points match what was
/// emitted),
/// frames carry the configured sensor id and consecutive sequence numbers from 0, never
/// receive more packets than expected, and every point is finite, inside the configured
/// range, with an azimuth in [0, 2π) and a channel below the sensor's channel count.
///
/// # Panics
/// On the first violated invariant (that is the fuzzer's finding).
pub fn check_output(t: &Template, p: &ScanPipeline, pushed: u64, out: &[Frame]) {
    let c = p.counters();
    assert_eq!(c.packets, pushed, "{c:?}");
    assert_eq!(c.packets, c.accounted() + p.held() as u64, "{c:?}");
    assert_eq!(c.frames, out.len() as u64, "{c:?}");
    let points: usize = out.iter().map(|f| f.points.len()).sum();
    assert_eq!(c.points, points as u64, "{c:?}");
    let (lo, hi) = t.range_m;
    for (i, f) in out.iter().enumerate() {
        let h = &f.header;
        assert_eq!(h.sensor_id, SENSOR_ID, "{h:?}");
        assert_eq!(h.sequence, i as u64, "{h:?}");
        assert!(h.packets_received <= h.packets_expected, "{h:?}");
        for pt in f.points.autoware() {
            let finite = [pt.x, pt.y, pt.z, pt.azimuth, pt.elevation, pt.distance]
                .iter()
                .all(|v| v.is_finite());
            assert!(finite, "non-finite point {pt:?} in frame {h:?}");
            assert!(
                (lo..=hi).contains(&pt.distance),
                "distance outside [{lo}, {hi}]: {pt:?}"
            );
            assert!(
                (0.0..std::f32::consts::TAU).contains(&pt.azimuth),
                "azimuth outside [0, 2π): {pt:?}"
            );
            assert!(
                usize::from(pt.channel) < t.channels,
                "channel >= {}: {pt:?}",
                t.channels
            );
        }
    }
}

/// The path of a calibration under [`shared::data_dir`].
pub fn data_path(rel: &str) -> std::path::PathBuf {
    shared::data_dir().join(rel)
}
