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
