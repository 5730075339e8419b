//! The daemon process's own memory and resources: the `process` gauges of `/metrics`
//! ([`ProcessGauges`], daemon-wide, `lidarxdp_process_*`), and the growth of its resident
//! memory over the last hour ([`MemoryGrowth`], sans-IO) that `/diagnostics` judges
//! ([`memory_status`], the `lidarxdp: memory` status).
//!
//! Where each number comes from ([`ProcessGauges::sample`], read when `/metrics` or
//! `/stats.json` is served, every 10 s for the log and for the memory status, and at exit;
//! never on the packet or frame path):
//! - `resident_bytes`: `VmRSS` of `/proc/self/status` (proc(5)), bytes;
//! - `heap_bytes`, `heap_free_bytes`: both allocators added ([`crate::sys::malloc::heap_stats`]):
//!   jemalloc's `stats.allocated` and `stats.resident − stats.allocated` (the daemon's Rust
//!   allocations), glibc's `mallinfo2(3)` `uordblks + hblkhd` and `fordblks` (Cyclone DDS's).
//!   mallinfo2 walks every arena under its lock;
//! - `jemalloc_resident_bytes`: jemalloc's `stats.resident`; VmRSS minus it is the memory
//!   outside the Rust allocator (glibc's heap, Cyclone DDS's buffers, stacks, code, the pool);
//! - `threads`: entries of `/proc/self/task`; `open_fds`: entries of `/proc/self/fd`.
//!
//! A value that cannot be read (another libc, a procfs without the file) is 0.
//!
//! # Growth rule
//! [`MemoryGrowth`] keeps one resident-memory sample per [`GROWTH_SAMPLE_NS`] (a minute) in a
//! fixed ring of [`GROWTH_SAMPLES`], and fits a least-squares line through the samples of the
//! last [`GROWTH_WINDOW_NS`] (an hour): its slope, in bytes per hour, is the growth. With
//! less than [`GROWTH_MIN_SPAN_NS`] (10 minutes) between the first and last sample there is no
//! verdict. The slope of a least-squares fit is already a rate, so a shorter window (10 to 60
//! minutes, at start) is scaled to per hour by construction. A linear ramp gives its exact
//! slope; noise of at most ±`a` bytes around a flat line moves the slope by at most about
//! `3·a / span` (e.g. ±1 MiB over the full hour: 3 MiB/h; over the first 10 minutes: 18
//! MiB/h).

use lidarxdp_core::counters::Group;
use lidarxdp_core::ros2::{DiagnosticLevel, DiagnosticStatus};

/// The process gauges: daemon-wide, no labels (`lidarxdp_process_*`; stats JSON `process`).
pub const PROCESS_GAUGES: Group = Group {
    name: "process",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// The process's memory and resources, read at the metrics period (module
    /// documentation: where each comes from).
    pub struct ProcessGauges in PROCESS_GAUGES;
    {
        /// `VmRSS`, /proc/self/status.
        resident_bytes: Gauge "bytes" "Resident memory of the daemon (VmRSS of /proc/self/status).",
        /// jemalloc `stats.allocated` + `mallinfo2` `uordblks + hblkhd`.
        heap_bytes: Gauge "bytes" "Heap in use: jemalloc stats.allocated (Rust allocations) plus glibc mallinfo2 uordblks and hblkhd (C libraries).",
        /// jemalloc `stats.resident − stats.allocated` + `mallinfo2` `fordblks`.
        heap_free_bytes: Gauge "bytes" "Bytes the allocators hold beyond the heap in use: jemalloc stats.resident minus stats.allocated, plus glibc mallinfo2 fordblks: fragmentation.",
        /// jemalloc `stats.resident`.
        jemalloc_resident_bytes: Gauge "bytes" "Resident pages of jemalloc, the daemon's Rust allocator (stats.resident: its heap, freed pages not yet purged, its metadata); resident_bytes minus this is the memory outside it.",
        /// `/proc/self/task` entries.
        threads: Gauge "threads" "Threads of the daemon (entries of /proc/self/task).",
        /// `/proc/self/fd` entries.
        open_fds: Gauge "descriptors" "Open file descriptors of the daemon (entries of /proc/self/fd).",
    }
}

impl ProcessGauges {
    /// Reads every gauge now (module documentation); one that cannot be read is 0. Costs a
    /// read of /proc/self/status, two directory listings and one `mallinfo2` call.
    pub fn sample() -> ProcessGauges {
        use crate::sys::{malloc, process};
        let heap = malloc::heap_stats().unwrap_or_default();
        ProcessGauges {
            resident_bytes: process::resident_bytes().unwrap_or(0),
            heap_bytes: heap.in_use,
            heap_free_bytes: heap.free,
            jemalloc_resident_bytes: heap.jemalloc_resident,
            threads: process::threads().unwrap_or(0),
            open_fds: process::open_fds().unwrap_or(0),
        }
    }
}

/// Spacing of the samples [`MemoryGrowth`] keeps, ns (one minute).
pub const GROWTH_SAMPLE_NS: u64 = 60_000_000_000;
/// The window the growth is measured over, ns (one hour).
pub const GROWTH_WINDOW_NS: u64 = 3_600_000_000_000;
/// Shortest span of samples that gives a verdict, ns (ten minutes).
pub const GROWTH_MIN_SPAN_NS: u64 = 600_000_000_000;
/// Samples the ring holds: one per minute over the hour, both ends included.
pub const GROWTH_SAMPLES: usize = (GROWTH_WINDOW_NS / GROWTH_SAMPLE_NS) as usize + 1;

/// ms per hour.
const HOUR_MS: i128 = 3_600_000;
/// Bytes per MiB.
pub const MIB: u64 = 1 << 20;

/// The growth [`MemoryGrowth::growth`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    /// Slope of the least-squares line through the window's samples, bytes per hour, rounded
    /// to the nearest byte (negative when shrinking).
    pub bytes_per_hour: i64,
    /// Time between the window's first and last sample, ns (at least
    /// [`GROWTH_MIN_SPAN_NS`]).
    pub span_ns: u64,
    /// Samples in the window.
    pub samples: usize,
}

/// The resident memory's history and its growth, sans-IO (module documentation, "Growth
/// rule"): fed `(t, bytes)` samples in time order, keeps at most [`GROWTH_SAMPLES`] of them
/// in a fixed ring (never allocates after [`MemoryGrowth::new`]).
#[derive(Clone, Debug)]
pub struct MemoryGrowth {
    /// `(t ns, bytes)`, oldest at `start`.
    ring: [(u64, u64); GROWTH_SAMPLES],
    start: usize,
    len: usize,
}

impl Default for MemoryGrowth {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryGrowth {
    /// An empty history.
    pub fn new() -> Self {
        MemoryGrowth {
            ring: [(0, 0); GROWTH_SAMPLES],
            start: 0,
            len: 0,
        }
    }

    /// Offers a sample: `bytes` at monotonic time `t_ns`. It is kept when it comes at least
    /// [`GROWTH_SAMPLE_NS`] after the last one kept (the first always is); the oldest sample
    /// leaves a full ring. A sample older than the last one kept is ignored. Returns whether
    /// it was kept.
    pub fn record(&mut self, t_ns: u64, bytes: u64) -> bool {
        if let Some(&(last, _)) = self.last()
            && t_ns < last.saturating_add(GROWTH_SAMPLE_NS)
        {
            return false;
        }
        if self.len == GROWTH_SAMPLES {
            self.ring[self.start] = (t_ns, bytes);
            self.start = (self.start + 1) % GROWTH_SAMPLES;
        } else {
            self.ring[(self.start + self.len) % GROWTH_SAMPLES] = (t_ns, bytes);
            self.len += 1;
        }
        true
    }

    fn last(&self) -> Option<&(u64, u64)> {
        (self.len > 0).then(|| &self.ring[(self.start + self.len - 1) % GROWTH_SAMPLES])
    }

    /// The samples kept, oldest first.
    fn samples(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.len).map(|i| self.ring[(self.start + i) % GROWTH_SAMPLES])
    }

    /// The growth over the samples of the last [`GROWTH_WINDOW_NS`] before the newest one:
    /// `None` while they span less than [`GROWTH_MIN_SPAN_NS`].
    pub fn growth(&self) -> Option<Growth> {
        let &(t_last, _) = self.last()?;
        let from = t_last.saturating_sub(GROWTH_WINDOW_NS);
        let window = || self.samples().filter(|&(t, _)| t >= from);
        let (t0, b0) = window().next()?;
        let span_ns = t_last - t0;
        if span_ns < GROWTH_MIN_SPAN_NS {
            return None;
        }
        // Least squares on x = t - t0 (ms) and y = bytes - b0, in exact integers:
        // slope = (n Σxy - Σx Σy) / (n Σx² - (Σx)²). With x < 3.6e6 ms, |y| < 2^63 and
        // n <= 61, every term fits an i128.
        let (mut n, mut sx, mut sy, mut sxy, mut sxx) = (0i128, 0i128, 0i128, 0i128, 0i128);
        for (t, b) in window() {
            let x = ((t - t0) / 1_000_000) as i128;
            let y = b as i128 - b0 as i128;
            n += 1;
            sx += x;
            sy += y;
            sxy += x * y;
            sxx += x * x;
        }
        let num = n * sxy - sx * sy;
        let den = n * sxx - sx * sx;
        if den <= 0 {
            return None;
        }
        // Rounded to the nearest byte per hour (half up).
        let per_hour = (2 * num * HOUR_MS + den).div_euclid(2 * den);
        Some(Growth {
            bytes_per_hour: per_hour.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            span_ns,
            samples: n as usize,
        })
    }
}

/// The `lidarxdp: memory` status of `/diagnostics`: WARN when the resident memory grew faster
/// than `warn_mib_per_hour` MiB per hour ([`MemoryGrowth::growth`]; 0: never), else OK (also
/// while there is no verdict yet). Values, in order: `resident_bytes`, `heap_bytes`,
/// `heap_free_bytes` (from `now`), `growth_mib_per_hour` (3 decimals, `unknown` before a
/// verdict), `window_min` (the span measured over, minutes, 1 decimal; 0 before a verdict),
/// `warn_mib_per_hour`.
pub fn memory_status(
    now: &ProcessGauges,
    growth: Option<Growth>,
    warn_mib_per_hour: u64,
) -> DiagnosticStatus {
    let mib_h = growth.map(|g| g.bytes_per_hour as f64 / MIB as f64);
    let limit = i64::try_from(warn_mib_per_hour.saturating_mul(MIB)).unwrap_or(i64::MAX);
    let warn = warn_mib_per_hour > 0 && growth.is_some_and(|g| g.bytes_per_hour > limit);
    let window_min = growth.map_or(0.0, |g| g.span_ns as f64 / 60e9);
    let message = match mib_h {
        Some(g) if warn => format!(
            "resident memory growing {g:.1} MiB/h over the last {window_min:.0} min (warn \
             above {warn_mib_per_hour} MiB/h)"
        ),
        _ => "OK".to_owned(),
    };
    let values = [
        ("resident_bytes", now.resident_bytes.to_string()),
        ("heap_bytes", now.heap_bytes.to_string()),
        ("heap_free_bytes", now.heap_free_bytes.to_string()),
        (
            "growth_mib_per_hour",
            mib_h.map_or_else(|| "unknown".to_owned(), |g| format!("{g:.3}")),
        ),
        ("window_min", format!("{window_min:.1}")),
        ("warn_mib_per_hour", warn_mib_per_hour.to_string()),
    ];
    DiagnosticStatus {
        level: if warn {
            DiagnosticLevel::Warn
        } else {
            DiagnosticLevel::Ok
        },
        name: "lidarxdp: memory".to_owned(),
        message,
        hardware_id: "lidarxdp".to_owned(),
        values: values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000_000_000;

    fn fed(samples: impl IntoIterator<Item = (u64, u64)>) -> MemoryGrowth {
        let mut g = MemoryGrowth::new();
        for (t, b) in samples {
            g.record(t, b);
        }
        g
    }

    /// 1 MB (10^6 bytes) per 10 minutes, one sample a minute over the hour: exactly 6 MB/h;
    /// 1 MiB per 10 minutes sampled every 10 minutes: exactly 6 MiB/h.
    #[test]
    fn a_ramp_gives_its_exact_slope() {
        let t0 = 5 * MIN;
        let g = fed((0..=60).map(|k| (t0 + k * MIN, 300_000_000 + k * 100_000)));
        let got = g.growth().unwrap();
        assert_eq!(got.bytes_per_hour, 6_000_000);
        assert_eq!((got.span_ns, got.samples), (60 * MIN, 61));
        let g = fed((0..=6).map(|k| (k * 10 * MIN, (1 << 30) + (k << 20))));
        assert_eq!(g.growth().unwrap().bytes_per_hour, 6 * MIB as i64);
        // Shrinking is negative growth.
        let g = fed((0..=20).map(|k| (k * MIN, (1 << 30) - k * 50_000)));
        assert_eq!(g.growth().unwrap().bytes_per_hour, -3_000_000);
    }

    /// A flat line with ±1 MiB of alternating noise: within the stated `3·a / span` bound of 0
    /// (3 MiB/h over the hour, 18 MiB/h over the first 10 minutes).
    #[test]
    fn a_flat_series_with_noise_is_flat_within_the_bound() {
        let noisy = |k: u64| {
            if k.is_multiple_of(2) {
                500 << 20
            } else {
                502 << 20
            }
        };
        let g = fed((0..=60).map(|k| (k * MIN, noisy(k))));
        let got = g.growth().unwrap().bytes_per_hour;
        assert!(got.abs() <= 3 * MIB as i64, "{got}");
        let g = fed((0..=10).map(|k| (k * MIN, noisy(k))));
        let got = g.growth().unwrap().bytes_per_hour;
        assert!(got.abs() <= 18 * MIB as i64, "{got}");
        // Exactly flat: exactly 0.
        let g = fed((0..=30).map(|k| (k * MIN, 77 << 20)));
        assert_eq!(g.growth().unwrap().bytes_per_hour, 0);
    }

    /// Below 10 minutes of samples, no verdict; samples closer than a minute are not kept.
    #[test]
    fn under_ten_minutes_there_is_no_verdict() {
        let mut g = MemoryGrowth::new();
        assert_eq!(g.growth(), None);
        for k in 0..10 {
            assert!(g.record(k * MIN, k << 20));
            assert_eq!(g.growth(), None, "{k} min");
        }
        assert!(!g.record(9 * MIN + MIN / 2, 1 << 40));
        assert!(!g.record(MIN, 1 << 40), "older than the last one");
        assert!(g.record(10 * MIN, 10 << 20));
        assert_eq!(g.growth().unwrap().bytes_per_hour, 60 * MIB as i64);
    }

    /// The ring keeps the last hour: after 3 hours of a steep ramp then 1 hour flat, the
    /// growth is 0 (the ramp has left the window), and the ring never holds more than
    /// [`GROWTH_SAMPLES`].
    #[test]
    fn only_the_last_hour_counts() {
        let g = fed((0..=240).map(|k| (k * MIN, (100 << 20) + k.min(180) * (1 << 20))));
        assert_eq!(g.len, GROWTH_SAMPLES);
        let got = g.growth().unwrap();
        assert_eq!((got.bytes_per_hour, got.span_ns), (0, 60 * MIN));
    }

    /// WARN when fed a growing series, OK when flat, OK without a verdict, never with 0.
    #[test]
    fn the_status_warns_on_growth_only() {
        let now = ProcessGauges {
            resident_bytes: 300 << 20,
            heap_bytes: 120 << 20,
            heap_free_bytes: 8 << 20,
            jemalloc_resident_bytes: 100 << 20,
            threads: 12,
            open_fds: 40,
        };
        // 32 MiB/h: 32 MiB over an hour, one sample a minute.
        let growing = fed((0..=60).map(|k| (k * MIN, (268 << 20) + k * ((32 << 20) / 60))));
        let flat = fed((0..=60).map(|k| (k * MIN, 300 << 20)));
        let s = memory_status(&now, growing.growth(), 16);
        assert_eq!(s.level, DiagnosticLevel::Warn);
        assert_eq!(
            s.message,
            "resident memory growing 32.0 MiB/h over the last 60 min (warn above 16 MiB/h)"
        );
        assert_eq!(s.name, "lidarxdp: memory");
        let v: Vec<(&str, &str)> = s
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            v,
            [
                ("resident_bytes", "314572800"),
                ("heap_bytes", "125829120"),
                ("heap_free_bytes", "8388608"),
                ("growth_mib_per_hour", "32.000"),
                ("window_min", "60.0"),
                ("warn_mib_per_hour", "16"),
            ]
        );
        assert_eq!(
            memory_status(&now, growing.growth(), 0).level,
            DiagnosticLevel::Ok
        );
        assert_eq!(
            memory_status(&now, growing.growth(), 33).level,
            DiagnosticLevel::Ok
        );
        let s = memory_status(&now, flat.growth(), 16);
        assert_eq!((s.level, s.message.as_str()), (DiagnosticLevel::Ok, "OK"));
        assert_eq!(s.values[3].1, "0.000");
        let s = memory_status(&now, None, 16);
        assert_eq!(s.level, DiagnosticLevel::Ok);
        assert_eq!(
            (s.values[3].1.as_str(), s.values[4].1.as_str()),
            ("unknown", "0.0")
        );
    }
}
