//! The host's two clocks at the receipt of a packet: monotonic time for every interval
//! (timeouts, silences, windows, the stream clock's elapsed time), wall time for every stamp
//! that is published (a frame's `host_ns`, `--stamp host`, the hour of a Velodyne's sensor
//! clock).
//!
//! A live capture reads both clocks once per batch (`lidarxdp::sys::clock`); CLOCK_REALTIME
//! may be stepped by PTP, chrony or an operator at any moment, and a step must neither close
//! every open frame at once nor keep them open for an hour, so nothing here measures an
//! interval on it. Offline (a pcap's record times, tests, fuzzing) one time serves as both:
//! [`HostTime::both`].
#![forbid(unsafe_code)]

use std::collections::VecDeque;

/// When the host received a packet (or polled for a timeout), on its two clocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HostTime {
    /// CLOCK_MONOTONIC, ns (arbitrary origin, never stepped): every interval is measured on
    /// it. Offline, the pcap record time (ns since the Unix epoch).
    pub mono_ns: u64,
    /// CLOCK_REALTIME, ns since the Unix epoch (may be stepped): only for stamps that are
    /// published or need the calendar. Offline, the pcap record time.
    pub wall_ns: u64,
}

impl HostTime {
    /// Monotonic time `mono_ns` (CLOCK_MONOTONIC, ns) and wall time `wall_ns`
    /// (CLOCK_REALTIME, ns since the Unix epoch), read together.
    pub const fn new(mono_ns: u64, wall_ns: u64) -> Self {
        Self { mono_ns, wall_ns }
    }

    /// One time `ns` on both clocks: a pcap record time (ns since the Unix epoch) when
    /// decoding offline, where intervals and stamps come from the same record times.
    pub const fn both(ns: u64) -> Self {
        Self {
            mono_ns: ns,
            wall_ns: ns,
        }
    }
}

/// A bare time is one time on both clocks ([`HostTime::both`]): offline decoding, tests.
impl From<u64> for HostTime {
    fn from(ns: u64) -> Self {
        Self::both(ns)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`): the
/// calendar time stamps of Hesai and RoboSense packets.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Host time over which [`ClockOffset::offset_ns`] takes its median, ns (10 s).
pub const OFFSET_WINDOW_NS: u64 = 10_000_000_000;
/// Host time over which [`ClockOffset::drift_ppm`] fits its line, ns (one minute).
pub const DRIFT_WINDOW_NS: u64 = 60_000_000_000;
/// Shortest span of samples a drift is given for, ns (10 s): over less, the receive jitter
/// (up to a millisecond) would read as hundreds of ppm.
pub const MIN_DRIFT_SPAN_NS: u64 = 10_000_000_000;
/// Closest spacing of kept samples, ns (50 ms): at most 1,200 are kept for the minute, at any
/// frame rate.
pub const SAMPLE_SPACING_NS: u64 = 50_000_000;

/// The offset of a sensor's clock from the host's, from frames stamped by both: each frame's
/// sensor-clock start (`start_ns`) minus the host receive time of its first packet
/// (`host_ns`, CLOCK_REALTIME), both ns since the Unix epoch. The difference also holds the
/// network and receive latency (tens of µs on a direct link), the same in every sample, so it
/// cancels out of the drift.
#[derive(Clone, Debug, Default)]
pub struct ClockOffset {
    /// `(host_ns, sensor_ns − host_ns)`, oldest first, at least [`SAMPLE_SPACING_NS`] apart,
    /// spanning at most [`DRIFT_WINDOW_NS`].
    samples: VecDeque<(u64, i64)>,
    /// [`Self::offset_ns`] and [`Self::drift_ppm`] as of the newest kept sample: worked out
    /// once per kept sample (at most every [`SAMPLE_SPACING_NS`]), not on every read, since
    /// the capture thread publishes them after every batch of packets.
    summary: (Option<i64>, Option<f64>),
}

impl ClockOffset {
    /// Takes one frame's pair of times (ns since the Unix epoch). A sample closer than
    /// [`SAMPLE_SPACING_NS`] to the last kept one is skipped; one older than the last kept
    /// one (a host clock stepped back) restarts the record.
    pub fn observe(&mut self, host_ns: u64, sensor_ns: u64) {
        let offset = (i128::from(sensor_ns) - i128::from(host_ns))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        if let Some(&(last, _)) = self.samples.back() {
            if host_ns < last {
                self.samples.clear();
            } else if host_ns - last < SAMPLE_SPACING_NS {
                return;
            }
        }
        self.samples.push_back((host_ns, offset));
        while let Some(&(first, _)) = self.samples.front() {
            if host_ns - first > DRIFT_WINDOW_NS {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        self.summary = (self.median_offset(), self.fit_drift());
    }

    /// The median offset (sensor minus host), ns, of the samples of the last
    /// [`OFFSET_WINDOW_NS`] before the newest (the lower median of an even count); `None`
    /// before the first sample.
    pub fn offset_ns(&self) -> Option<i64> {
        self.summary.0
    }

    fn median_offset(&self) -> Option<i64> {
        let &(newest, _) = self.samples.back()?;
        let mut recent: Vec<i64> = self
            .samples
            .iter()
            .filter(|(t, _)| newest - t <= OFFSET_WINDOW_NS)
            .map(|&(_, o)| o)
            .collect();
        recent.sort_unstable();
        recent.get((recent.len() - 1) / 2).copied()
    }

    /// How fast the sensor clock gains on the host's, ppm (µs per s; negative: it loses): the
    /// least-squares slope of the offset over host time across the kept minute. `None` until
    /// the samples span [`MIN_DRIFT_SPAN_NS`].
    pub fn drift_ppm(&self) -> Option<f64> {
        self.summary.1
    }

    fn fit_drift(&self) -> Option<f64> {
        let &(t0, o0) = self.samples.front()?;
        let &(t1, _) = self.samples.back()?;
        if t1 - t0 < MIN_DRIFT_SPAN_NS || self.samples.len() < 3 {
            return None;
        }
        // Centred on the first sample, in s and ns, so the squares stay exact in f64.
        let pts = self
            .samples
            .iter()
            .map(|&(t, o)| ((t - t0) as f64 * 1e-9, (o - o0) as f64));
        let n = self.samples.len() as f64;
        let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
        for (x, y) in pts {
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
        }
        let den = n * sxx - sx * sx;
        if den <= 0.0 {
            return None;
        }
        // ns per s = ppb; 1 ppm = 1,000 ns/s.
        Some((n * sxy - sx * sy) / den / 1_000.0)
    }

    /// Samples kept.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2017, 9, 6), 17_415);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }
}
