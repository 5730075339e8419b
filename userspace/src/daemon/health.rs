//! The daemon's `/diagnostics`: once per [`PERIOD`], one `DiagnosticStatus` per sensor
//! ([`lidarxdp_core::health::assess`]) from its counters' change over the period, its silence
//! and its clock health, sent to the sinks through the [`lidarxdp::publish::AuxThread`].
//! Runs on the main thread, beside the metrics.
//!
//! After the sensors' statuses comes one `lidarxdp: memory` status ([`MemoryHealth`],
//! [`lidarxdp::process::memory_status`]): the resident and heap bytes, and the resident
//! memory's growth per hour over the last hour, WARN above `[process]
//! memory_growth_warn_mb_per_hour` (MiB/h; 0: never). The memory is sampled every
//! [`MEMORY_SAMPLE_PERIOD`] (the 10 s of the metrics log, not every status: `mallinfo2` takes
//! glibc's arena locks), and the growth keeps one sample a minute
//! ([`lidarxdp::process::MemoryGrowth`]).
//!
//! Once every [`TRIM_PERIOD`], before that sample, the allocators' free pages go back to the
//! kernel ([`lidarxdp::sys::malloc::trim`]: jemalloc's purge and glibc's `malloc_trim(0)`):
//! what a burst of subscribers allocated on zenoh's and the sinks' threads and freed again
//! does not stay resident (issue 40).

use std::time::{Duration, Instant};

use lidarxdp::process::{MemoryGrowth, ProcessGauges, memory_status};
use lidarxdp_core::health::{HealthInputs, Thresholds, assess};
use lidarxdp_core::ros2::DiagnosticStatus;
use lidarxdp_core::sensor::DecodeCounters;

use super::workers::Worker;

/// How often the statuses are made and published (REP 107 diagnostics: about 1 Hz).
pub(super) const PERIOD: Duration = Duration::from_secs(1);

/// How often the memory status samples the process's memory (the metrics log's period).
pub(super) const MEMORY_SAMPLE_PERIOD: Duration = Duration::from_secs(10);

/// How often the allocator's free pages are handed back to the kernel (module documentation).
pub(super) const TRIM_PERIOD: Duration = Duration::from_secs(60);

/// The `lidarxdp: memory` status's state: the resident memory's history and the last sample.
pub(super) struct MemoryHealth {
    growth: MemoryGrowth,
    warn_mib_per_hour: u64,
    /// Times are ns since this instant.
    start: Instant,
    /// The last sample and when it was taken.
    last: Option<(Instant, ProcessGauges)>,
    /// When the allocator was last trimmed.
    trimmed: Option<Instant>,
}

impl MemoryHealth {
    /// No sample yet; WARN above `warn_mib_per_hour` MiB/h (0: never).
    pub(super) fn new(warn_mib_per_hour: u64, start: Instant) -> Self {
        Self {
            growth: MemoryGrowth::new(),
            warn_mib_per_hour,
            start,
            last: None,
            trimmed: None,
        }
    }

    /// The status at `now`, from a new sample (`sample()`) when [`MEMORY_SAMPLE_PERIOD`] has
    /// passed since the last one, else from the last. Before a sample, `trim()` runs when
    /// [`TRIM_PERIOD`] has passed since it last ran (the first time: a period after the start).
    pub(super) fn status(
        &mut self,
        now: Instant,
        sample: impl FnOnce() -> ProcessGauges,
        trim: impl FnOnce(),
    ) -> DiagnosticStatus {
        let due = self
            .last
            .as_ref()
            .is_none_or(|(t, _)| now.duration_since(*t) >= MEMORY_SAMPLE_PERIOD);
        if due {
            let since = now.duration_since(self.trimmed.unwrap_or(self.start));
            if since >= TRIM_PERIOD {
                trim();
                self.trimmed = Some(now);
            }
            let g = sample();
            let t_ns = now.duration_since(self.start).as_nanos() as u64;
            self.growth.record(t_ns, g.resident_bytes);
            self.last = Some((now, g));
        }
        let now_gauges = self.last.map(|(_, g)| g).unwrap_or_default();
        memory_status(&now_gauges, self.growth.growth(), self.warn_mib_per_hour)
    }
}

/// One sensor as the monitor follows it.
struct Tracked {
    name: String,
    hardware_id: String,
    thresholds: Thresholds,
    /// Its counters at the previous assessment.
    prev: DecodeCounters,
    /// `packets` when last looked at, and when it last changed.
    packets: u64,
    last_packet: Instant,
}

/// Every sensor's health state, in worker then slot order.
pub(super) struct HealthMonitor {
    sensors: Vec<Tracked>,
    memory: MemoryHealth,
    last: Instant,
}

impl HealthMonitor {
    /// Follows every sensor of `workers` from `now` (a sensor that sends nothing is silent
    /// from the daemon's start), and the process's memory (WARN above `warn_mib_per_hour`
    /// MiB/h of growth; 0: never).
    pub(super) fn new(workers: &[Worker], warn_mib_per_hour: u64, now: Instant) -> Self {
        let sensors = workers
            .iter()
            .flat_map(|w| w.sensors.iter())
            .map(|s| Tracked {
                name: s.name.clone(),
                hardware_id: format!(
                    "{} udp:{}{}",
                    s.model.name(),
                    s.port,
                    s.source
                        .as_ref()
                        .map_or(String::new(), |ip| format!(" from {ip}"))
                ),
                thresholds: s.health,
                prev: DecodeCounters::default(),
                packets: 0,
                last_packet: now,
            })
            .collect();
        Self {
            sensors,
            memory: MemoryHealth::new(warn_mib_per_hour, now),
            last: now,
        }
    }

    /// Notes which sensors received a packet since the last call (call it often: the silence
    /// is measured to its period).
    pub(super) fn observe(&mut self, workers: &[Worker], now: Instant) {
        let counters = workers.iter().flat_map(|w| w.stats.sensors.iter());
        for (t, c) in self.sensors.iter_mut().zip(counters) {
            let packets = c.decode.packets.load(std::sync::atomic::Ordering::Relaxed);
            if packets != t.packets {
                t.packets = packets;
                t.last_packet = now;
            }
        }
    }

    /// The statuses, once [`PERIOD`] has passed since the last ones (`None` before): one per
    /// sensor, then the memory's.
    pub(super) fn assess(
        &mut self,
        workers: &[Worker],
        now: Instant,
    ) -> Option<Vec<DiagnosticStatus>> {
        let period = now.duration_since(self.last);
        if period < PERIOD {
            return None;
        }
        self.last = now;
        self.observe(workers, now);
        let counters = workers.iter().flat_map(|w| w.stats.sensors.iter());
        let mut out: Vec<DiagnosticStatus> = self
            .sensors
            .iter_mut()
            .zip(counters)
            .map(|(t, c)| {
                let d = c.decode.snapshot();
                let clock = c.clock.load();
                let p = &t.prev;
                let inputs = HealthInputs {
                    name: t.name.clone(),
                    hardware_id: t.hardware_id.clone(),
                    period_ns: period.as_nanos() as u64,
                    packets: d.packets - p.packets,
                    frames: d.frames - p.frames,
                    packets_expected: d.packets_expected - p.packets_expected,
                    packets_received: d.packets_framed - p.packets_framed,
                    frames_lost: d.frames_lost - p.frames_lost,
                    malformed: d.malformed - p.malformed,
                    silence_ns: now.duration_since(t.last_packet).as_nanos() as u64,
                    sensor_clock: clock.sensor_clock,
                    offset_ns: clock.offset_ns,
                    drift_ppm: clock.drift_ppm,
                    sync: clock.sync,
                };
                t.prev = d;
                assess(&inputs, &t.thresholds)
            })
            .collect();
        out.push(self.memory.status(now, ProcessGauges::sample, || {
            if let Err(e) = lidarxdp::sys::malloc::trim() {
                log::debug!("malloc_trim: {e}");
            }
        }));
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lidarxdp_core::msg::DiagnosticLevel;

    /// The memory status over 70 minutes of samples every 10 s (the main loop's clock given,
    /// not waited for): WARN with the resident memory growing 32 MiB/h against a 16 MiB/h
    /// threshold, OK when flat, OK before 10 minutes of history, and the values of the last
    /// sample taken.
    #[test]
    fn memory_warns_on_a_growing_series_and_not_on_a_flat_one() {
        let t0 = Instant::now();
        let gauges = |resident_bytes| ProcessGauges {
            resident_bytes,
            heap_bytes: 50 << 20,
            ..ProcessGauges::default()
        };
        let run = |rss_at_s: &dyn Fn(u64) -> u64| {
            let mut m = MemoryHealth::new(16, t0);
            let mut levels = Vec::new();
            let mut sampled = 0;
            let mut trimmed = Vec::new();
            // A status every second, as the main loop makes them.
            for s in 0..=70 * 60 {
                let st = m.status(
                    t0 + Duration::from_secs(s),
                    || {
                        sampled += 1;
                        gauges(rss_at_s(s))
                    },
                    || trimmed.push(s),
                );
                if s % 60 == 0 {
                    levels.push((s / 60, st.level, st.values[3].1.clone()));
                }
            }
            (levels, sampled, trimmed)
        };
        // 32 MiB an hour: (32 << 20) / 3600 bytes a second, rounded down.
        let (levels, sampled, trimmed) = run(&|s| (200 << 20) + s * ((32 << 20) / 3600));
        assert_eq!(sampled, 70 * 6 + 1, "one sample every 10 s");
        // Trimmed once a minute, from a minute after the start, before that minute's sample.
        assert_eq!(trimmed, (1..=70).map(|m| m * 60).collect::<Vec<u64>>());
        assert_eq!(levels[9], (9, DiagnosticLevel::Ok, "unknown".to_owned()));
        assert_eq!(levels[10].1, DiagnosticLevel::Warn);
        assert_eq!(levels[70].1, DiagnosticLevel::Warn);
        // 9320 bytes a second: 33,552,000 bytes an hour, 31.998 MiB.
        assert_eq!(levels[70].2, "31.998");
        let (levels, _, _) = run(&|_| 200 << 20);
        assert!(
            levels.iter().all(|l| l.1 == DiagnosticLevel::Ok),
            "{levels:?}"
        );
        assert_eq!(levels[70].2, "0.000");
    }
}
