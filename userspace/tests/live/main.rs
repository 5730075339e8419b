//! Live viewers of a running daemon (issue 14), each checked by an independent client:
//! - `live_foxglove`: `run --foxglove`, the Foxglove WebSocket server, read by
//!   `foxglove_client.py` (Python `websockets`, CDR decoded with `mcap_ros2` and rosbags) in the
//!   virtual environment `cargo xtask setup` makes ([`lidarxdp_testkit::python`]).
//! - `live_view`: `run --view`, the live 3D page, in Debian's chromium (headless, software
//!   WebGL): screenshots decoded and their point pixels counted, the panel read from the DOM,
//!   the status and frame endpoints checked by their documented layout.
//!
//! The daemon tests are privileged (XDP + AF_XDP in their own [`lidarxdp_testkit::NetnsPair`])
//! and need that interpreter; they return early with a message when either is missing, and fail
//! instead under `LIDARXDP_REQUIRE_PRIVILEGED=1` (`cargo xtask test`).

use lidarxdp_testkit as common;

mod live_foxglove;
mod live_view;
