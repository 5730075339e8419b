//! The daemon's `/diagnostics`: once per [`PERIOD`], one `DiagnosticStatus` per sensor
//! ([`lidarxdp_core::health::assess`]) from its counters' change over the period, its silence
//! and its clock health, sent to the sinks through the [`lidarxdp::publish::AuxThread`].
//! Runs on the main thread, beside the metrics.

use std::time::{Duration, Instant};

use lidarxdp_core::health::{HealthInputs, Thresholds, assess};
use lidarxdp_core::ros2::DiagnosticStatus;
use lidarxdp_core::sensor::DecodeCounters;

use super::workers::Worker;

/// How often the statuses are made and published (REP 107 diagnostics: about 1 Hz).
pub(super) const PERIOD: Duration = Duration::from_secs(1);

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
    last: Instant,
}

impl HealthMonitor {
    /// Follows every sensor of `workers` from `now` (a sensor that sends nothing is silent
    /// from the daemon's start).
    pub(super) fn new(workers: &[Worker], now: Instant) -> Self {
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
        Self { sensors, last: now }
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

    /// The statuses, once [`PERIOD`] has passed since the last ones (`None` before).
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
        let out = self
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
        Some(out)
    }
}
