//! The zenoh sink (`lidarxdp run --zenoh`, issue 13) checked by an independent ROS 2 client:
//! `ros2_probe.py`, Python eclipse-zenoh from PyPI decoding the CDR with rosbags, run in the
//! virtual environment `cargo xtask setup` makes ([`lidarxdp_testkit::python`]).
//!
//! Every test is privileged (XDP + AF_XDP in its own [`lidarxdp_testkit::NetnsPair`]) and needs
//! that interpreter; it returns early with a message when either is missing, and fails instead
//! under `LIDARXDP_REQUIRE_PRIVILEGED=1` (`cargo xtask test`). The expected key expressions and
//! liveliness tokens are written out literally from rmw_zenoh's rules (ros2/rmw_zenoh
//! `docs/design.md`, `liveliness_utils.cpp`), not built with lidarxdp's own code.

use lidarxdp_testkit as common;

mod probe;
mod zenoh_frames;
mod zenoh_liveliness;
mod zenoh_slow;
mod zenoh_tls;
