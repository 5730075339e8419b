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

mod dds;
mod probe;
mod zenoh_frames;
mod zenoh_liveliness;
mod zenoh_slow;
mod zenoh_tls;
