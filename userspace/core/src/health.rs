//! Per-sensor health, sans-IO: the sensor-minus-host clock offset and its drift
//! ([`ClockOffset`]), the sensor's time synchronisation as its own packets or metadata state it
//! ([`SyncState`]), and the judgement an operator reads on ROS 2's `/diagnostics`
//! ([`assess`]: one `diagnostic_msgs/msg/DiagnosticStatus` per sensor, its level set by
//! per-sensor [`Thresholds`]). `docs/deploy.md`, "Health", says what each status means and
//! what to do about it.
#![forbid(unsafe_code)]

use crate::msg::{DiagnosticLevel, DiagnosticStatus};
pub use crate::msg::{SyncLock, SyncSource, SyncState};
pub use crate::sensor::nmea::{rmc_time_of_day_s, rmc_valid};
pub use crate::time::{
    ClockOffset, DRIFT_WINDOW_NS, MIN_DRIFT_SPAN_NS, OFFSET_WINDOW_NS, SAMPLE_SPACING_NS,
};

/// The levels [`assess`] gives, per sensor (`[[sensors]]` keys `health_*`, docs/deploy.md
/// "Health").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Packet loss over the last period above this is WARN, % (default 0.1).
    pub loss_warn_percent: f64,
    /// Packet loss over the last period above this is ERROR, % (default 10).
    pub loss_error_percent: f64,
    /// No packet for this long is ERROR, ns (default 1 s).
    pub silence_error_ns: u64,
    /// A sensor-clock offset from the host larger than this is WARN, ns; 0 = never (default
    /// 60 s, [`crate::vendor::IMPLAUSIBLE_CLOCK_OFFSET_NS`]). Only frames on the sensor clock
    /// are judged.
    pub offset_warn_ns: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            loss_warn_percent: 0.1,
            loss_error_percent: 10.0,
            silence_error_ns: 1_000_000_000,
            offset_warn_ns: crate::vendor::IMPLAUSIBLE_CLOCK_OFFSET_NS,
        }
    }
}

/// What [`assess`] judges one sensor by, over the period since the previous assessment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthInputs {
    /// The sensor's name (the status is named `lidarxdp: <name>`).
    pub name: String,
    /// `hardware_id`: the model and where its packets come from, e.g. `VLP16 udp:2368`.
    pub hardware_id: String,
    /// The period, ns (> 0).
    pub period_ns: u64,
    /// Datagrams handed to the sensor's pipeline in the period.
    pub packets: u64,
    /// Frames emitted in the period.
    pub frames: u64,
    /// Data packets the period's frames should have held, and held (their headers'
    /// `packets_expected` and `packets_received`).
    pub packets_expected: u64,
    /// See `packets_expected`.
    pub packets_received: u64,
    /// Whole turns lost in the period (`frames_lost_before`).
    pub frames_lost: u64,
    /// Packets rejected as malformed in the period.
    pub malformed: u64,
    /// Host time since the sensor's last packet, ns (since the daemon started, before the first).
    pub silence_ns: u64,
    /// Whether the last frame was stamped on the sensor clock (`false`: the host's).
    pub sensor_clock: bool,
    /// [`ClockOffset::offset_ns`].
    pub offset_ns: Option<i64>,
    /// [`ClockOffset::drift_ppm`].
    pub drift_ppm: Option<f64>,
    /// The sensor's sync.
    pub sync: SyncState,
}

/// Packet loss of `inputs`, % ([`crate::header::loss_percent`] of its `packets_expected` and
/// `packets_received`).
pub fn loss_percent(inputs: &HealthInputs) -> f64 {
    crate::header::loss_percent(inputs.packets_expected, inputs.packets_received)
}

/// One sensor's `DiagnosticStatus`, named `lidarxdp: <name>`. Its level is the worst of:
/// - ERROR: no packet for [`Thresholds::silence_error_ns`]; loss above
///   [`Thresholds::loss_error_percent`];
/// - WARN: loss above [`Thresholds::loss_warn_percent`]; sync lost ([`SyncState::lost`]); the
///   sensor's sync source in error; an offset above [`Thresholds::offset_warn_ns`] while the
///   frames are on the sensor clock;
/// - else OK.
///
/// The message names every reason, worst first (`OK` when there is none). Values, in order:
/// `rate_hz` (packets/s), `frame_rate_hz`, `loss_percent`, `frames_lost`, `malformed`,
/// `silence_s`, `clock` (`sensor` or `host`), `sync_source`, `sync_state`, `nmea_valid`
/// (`true`, `false` or `none`), `offset_ms` and `drift_ppm` (`unknown` when not measured).
pub fn assess(inputs: &HealthInputs, t: &Thresholds) -> DiagnosticStatus {
    let period_s = inputs.period_ns.max(1) as f64 * 1e-9;
    let loss = loss_percent(inputs);
    let mut reasons: Vec<(DiagnosticLevel, String)> = Vec::new();
    if inputs.silence_ns >= t.silence_error_ns {
        reasons.push((
            DiagnosticLevel::Error,
            format!("no packet for {:.1} s", inputs.silence_ns as f64 * 1e-9),
        ));
    }
    if loss > t.loss_error_percent {
        reasons.push((DiagnosticLevel::Error, format!("packet loss {loss:.2} %")));
    } else if loss > t.loss_warn_percent {
        reasons.push((DiagnosticLevel::Warn, format!("packet loss {loss:.2} %")));
    }
    if inputs.sync.lost() {
        reasons.push((
            DiagnosticLevel::Warn,
            format!(
                "sync lost ({} {})",
                inputs.sync.source.name(),
                inputs.sync.lock.name()
            ),
        ));
    } else if inputs.sync.lock == SyncLock::Error {
        reasons.push((
            DiagnosticLevel::Warn,
            format!("{} sync in error", inputs.sync.source.name()),
        ));
    }
    if let Some(o) = inputs.offset_ns
        && inputs.sensor_clock
        && t.offset_warn_ns > 0
        && o.unsigned_abs() > t.offset_warn_ns
    {
        reasons.push((
            DiagnosticLevel::Warn,
            format!("sensor clock {:.3} s from the host's", o as f64 * 1e-9),
        ));
    }
    reasons.sort_by_key(|r| std::cmp::Reverse(r.0));
    let level = reasons.first().map_or(DiagnosticLevel::Ok, |r| r.0);
    let message = if reasons.is_empty() {
        "OK".to_owned()
    } else {
        reasons
            .iter()
            .map(|r| r.1.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "unknown".to_owned());
    let values = vec![
        (
            "rate_hz",
            format!("{:.1}", inputs.packets as f64 / period_s),
        ),
        (
            "frame_rate_hz",
            format!("{:.2}", inputs.frames as f64 / period_s),
        ),
        ("loss_percent", format!("{loss:.3}")),
        ("frames_lost", inputs.frames_lost.to_string()),
        ("malformed", inputs.malformed.to_string()),
        (
            "silence_s",
            format!("{:.3}", inputs.silence_ns as f64 * 1e-9),
        ),
        (
            "clock",
            if inputs.sensor_clock {
                "sensor"
            } else {
                "host"
            }
            .to_owned(),
        ),
        ("sync_source", inputs.sync.source.name().to_owned()),
        ("sync_state", inputs.sync.lock.name().to_owned()),
        (
            "nmea_valid",
            inputs
                .sync
                .nmea_valid
                .map_or("none".to_owned(), |v| v.to_string()),
        ),
        (
            "offset_ms",
            opt(inputs.offset_ns.map(|o| format!("{:.3}", o as f64 * 1e-6))),
        ),
        (
            "drift_ppm",
            opt(inputs.drift_ppm.map(|d| format!("{d:.3}"))),
        ),
    ];
    DiagnosticStatus {
        level,
        name: format!("lidarxdp: {}", inputs.name),
        message,
        hardware_id: inputs.hardware_id.clone(),
        values: values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn offset_is_the_median_of_the_last_ten_seconds() {
        let mut c = ClockOffset::default();
        assert_eq!(c.offset_ns(), None);
        let base = 1_700_000_000 * S;
        // Offsets 5, 1, 9, 3, 7 ms at 0.1 s spacing: median 5 ms.
        for (i, o) in [5, 1, 9, 3, 7].into_iter().enumerate() {
            let h = base + i as u64 * S / 10;
            c.observe(h, h + o * 1_000_000);
        }
        assert_eq!(c.offset_ns(), Some(5_000_000));
        // Even count: the lower median.
        let h = base + S / 2;
        c.observe(h, h + 2_000_000);
        assert_eq!(c.offset_ns(), Some(3_000_000));
        // 11 s later only the new sample is in the window.
        let h = base + 12 * S;
        c.observe(h, h - 4_000_000);
        assert_eq!(c.offset_ns(), Some(-4_000_000));
        // A sample 10 ms after the last is skipped.
        c.observe(h + 10_000_000, h);
        assert_eq!(c.samples(), 7);
    }

    #[test]
    fn drift_is_the_slope_over_the_minute_in_ppm() {
        let mut c = ClockOffset::default();
        let base = 1_700_000_000 * S;
        // The sensor gains 25 µs per s (25 ppm) on a 3 ms offset, 10 Hz for 70 s.
        for i in 0..700u64 {
            let h = base + i * S / 10;
            let sensor = h + 3_000_000 + i * 2_500;
            c.observe(h, sensor);
            if i == 99 {
                assert_eq!(c.drift_ppm(), None, "9.9 s is below the shortest span");
            }
        }
        let d = c.drift_ppm().unwrap();
        assert!((d - 25.0).abs() < 1e-6, "{d}");
        // Only the last minute is kept (601 samples: both ends included).
        assert_eq!(c.samples(), 601);
        // The median of the last 10 s (samples 599..=699) is sample 649's.
        assert_eq!(c.offset_ns(), Some(3_000_000 + 649 * 2_500));
    }

    #[test]
    fn a_host_clock_stepped_back_restarts_the_record() {
        let mut c = ClockOffset::default();
        c.observe(100 * S, 101 * S);
        c.observe(90 * S, 90 * S);
        assert_eq!((c.samples(), c.offset_ns()), (1, Some(0)));
    }

    #[test]
    fn rmc_status_and_time() {
        let s = "$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A";
        assert_eq!(rmc_valid(s), Some(true));
        assert_eq!(rmc_time_of_day_s(s), Some(45_319.0));
        assert_eq!(rmc_valid("$GNRMC,000001.50,V,,,,,,,,,,N*4D"), Some(false));
        assert_eq!(
            rmc_time_of_day_s("$GNRMC,000001.50,V,,,,,,,,,,N*4D"),
            Some(1.5)
        );
        assert_eq!(rmc_valid("$GPGGA,123519,4807.038,N"), None);
        assert_eq!(rmc_valid(""), None);
        assert_eq!(rmc_time_of_day_s("$GPRMC,,V,,"), None);
        assert_eq!(rmc_time_of_day_s("$GPRMC,256000,A,"), None);
    }

    fn inputs() -> HealthInputs {
        HealthInputs {
            name: "front".into(),
            hardware_id: "VLP16 udp:2368".into(),
            period_ns: S,
            packets: 754,
            frames: 10,
            packets_expected: 754,
            packets_received: 754,
            silence_ns: 1_000_000,
            sensor_clock: true,
            offset_ns: Some(2_000_000),
            ..HealthInputs::default()
        }
    }

    fn level_and_message(i: &HealthInputs) -> (DiagnosticLevel, String) {
        let s = assess(i, &Thresholds::default());
        (s.level, s.message)
    }

    #[test]
    fn a_healthy_sensor_is_ok_with_every_value() {
        let s = assess(&inputs(), &Thresholds::default());
        assert_eq!(s.level, DiagnosticLevel::Ok);
        assert_eq!(s.name, "lidarxdp: front");
        assert_eq!(s.message, "OK");
        let kv: Vec<(&str, &str)> = s
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            kv,
            [
                ("rate_hz", "754.0"),
                ("frame_rate_hz", "10.00"),
                ("loss_percent", "0.000"),
                ("frames_lost", "0"),
                ("malformed", "0"),
                ("silence_s", "0.001"),
                ("clock", "sensor"),
                ("sync_source", "unknown"),
                ("sync_state", "unknown"),
                ("nmea_valid", "none"),
                ("offset_ms", "2.000"),
                ("drift_ppm", "unknown"),
            ]
        );
    }

    #[test]
    fn levels_follow_the_thresholds() {
        // 1 of 754 lost: 0.133 % > 0.1 %.
        let mut i = inputs();
        i.packets_received = 753;
        assert_eq!(
            level_and_message(&i),
            (DiagnosticLevel::Warn, "packet loss 0.13 %".into())
        );
        // Exactly at the threshold is not above it.
        i.packets_expected = 1000;
        i.packets_received = 999;
        assert_eq!(level_and_message(&i).0, DiagnosticLevel::Ok);
        i.packets_received = 800;
        assert_eq!(
            level_and_message(&i),
            (DiagnosticLevel::Error, "packet loss 20.00 %".into())
        );
        let mut i = inputs();
        i.silence_ns = S;
        i.sync.set_lock(SyncLock::Locked);
        i.sync.set_lock(SyncLock::Acquiring);
        i.sync.source = SyncSource::Pps;
        assert_eq!(
            level_and_message(&i),
            (
                DiagnosticLevel::Error,
                "no packet for 1.0 s; sync lost (pps acquiring)".into()
            )
        );
        let mut i = inputs();
        i.offset_ns = Some(-61 * S as i64);
        assert_eq!(
            level_and_message(&i),
            (
                DiagnosticLevel::Warn,
                "sensor clock -61.000 s from the host's".into()
            )
        );
        // On the host clock the offset is not judged; a threshold of 0 judges nothing.
        i.sensor_clock = false;
        assert_eq!(level_and_message(&i).0, DiagnosticLevel::Ok);
        i.sensor_clock = true;
        let off = Thresholds {
            offset_warn_ns: 0,
            ..Thresholds::default()
        };
        assert_eq!(assess(&i, &off).level, DiagnosticLevel::Ok);
        // Acquiring without ever being locked is no loss of sync.
        let mut i = inputs();
        i.sync.set_lock(SyncLock::Acquiring);
        assert_eq!(level_and_message(&i).0, DiagnosticLevel::Ok);
        i.sync.set_lock(SyncLock::Error);
        assert_eq!(
            level_and_message(&i),
            (DiagnosticLevel::Warn, "unknown sync in error".into())
        );
    }
}
