//! The host's clocks, read in one place (clock_gettime(2)): CLOCK_MONOTONIC for every timeout
//! and interval, CLOCK_REALTIME only for stamps that are published (a frame's `host_ns`,
//! `--stamp host`, a Velodyne's hour, record times, message stamps) or compared with one.
//!
//! CLOCK_REALTIME is stepped by PTP, chrony or an operator (on a vehicle, typically when the
//! time source is first acquired); an interval measured on it then jumps by the step, so every
//! open frame would time out at once (a step forward) or never (a step back). CLOCK_MONOTONIC
//! is never stepped (NTP may only slew it).

use lidarxdp_core::HostTime;

/// Reads `clock` (clock_gettime(2)) in ns; 0 if the call fails (it cannot for the clocks
/// used here: both always exist on Linux).
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if super::cvt(rc).is_err() {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC now, ns (arbitrary origin, never stepped): for timeouts and intervals.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME now, ns since the Unix epoch (may be stepped): only for published stamps
/// and for comparing with them (e.g. the age of a frame stamped by another host).
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// Both clocks now, read back to back ([`HostTime::mono_ns`] CLOCK_MONOTONIC,
/// [`HostTime::wall_ns`] CLOCK_REALTIME): the host time the capture loop hands the decoders.
pub fn host_time() -> HostTime {
    HostTime::new(monotonic_ns(), realtime_ns())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_read_and_monotonic_never_goes_back() {
        let a = host_time();
        let b = host_time();
        assert!(b.mono_ns >= a.mono_ns && a.mono_ns > 0);
        // Past 2020-01-01 on any machine that runs this.
        assert!(a.wall_ns > 1_577_836_800_000_000_000);
        let std_wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(std_wall.abs_diff(realtime_ns()) < 1_000_000_000);
    }
}
