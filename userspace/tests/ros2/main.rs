//! ROS 2 output checked by independent implementations, never by lidarxdp's own reader:
//! - the zenoh sink (`lidarxdp run --zenoh`, issue 13): `ros2_probe.py`, Python eclipse-zenoh
//!   from PyPI decoding the CDR with rosbags, run in the virtual environment `cargo xtask
//!   setup` makes ([`lidarxdp_testkit::python`]); the expected key expressions and liveliness
//!   tokens are written out literally from rmw_zenoh's rules (ros2/rmw_zenoh `docs/design.md`,
//!   `liveliness_utils.cpp`);
//! - the DDS sink (`lidarxdp run --dds`, issue 22): subscribers on Debian's Fast DDS 2.9 and
//!   Cyclone DDS 0.10.2, compiled by the test ([`dds`]).
//!
//! Every test is privileged (XDP + AF_XDP in its own [`lidarxdp_testkit::NetnsPair`]); it
//! returns early with a message when not root (or, for the zenoh ones, without that
//! interpreter), and fails instead under `LIDARXDP_REQUIRE_PRIVILEGED=1` (`cargo xtask test`).

use lidarxdp_testkit as common;

use std::sync::{Mutex, MutexGuard};

/// Held by every test of this binary for its whole run, so its tests run one at a time. Each
/// starts a daemon, subscriber processes and a replay at the capture's real rate, and two of
/// them (`zenoh_slow`) check best-effort delivery of 7 MB frames to a Python subscriber within
/// zenoh's drop deadline: run beside another such test on a 2-core machine (the 10 router
/// trials, the DDS subscribers) that subscriber lost the last frame (1 run in 4). A test that
/// panics poisons the lock; the next one takes it all the same.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

mod dds;
mod health;
#[path = "../publish/layout_check.rs"]
mod layout_check;
mod memory;
mod point_types;
mod probe;
mod zenoh_frames;
mod zenoh_liveliness;
mod zenoh_slow;
mod zenoh_tls;
