//! ROS 2 over zenoh: frames published as `sensor_msgs/msg/PointCloud2` the way ROS 2's
//! rmw_zenoh publishes them, so that `ros2 topic echo`, RViz and Autoware receive them with no
//! bridge, and local subscribers read them in place from shared memory.
//!
//! - [`ZenohSettings`] and [`open_session`]: the session, from zenoh's own JSON5 configuration
//!   file (`--zenoh-config`) or rmw_zenoh's defaults for a ROS 2 host ([`default_config`]);
//!   the session configuration is `lidarxdp_client::zenoh`'s, shared with the subscriber, and
//!   re-exported here with [`domain_id`] (`lidarxdp_core::ros2`).
//! - [`ZenohSink`]: a [`crate::publish::FrameSink`] beside the TCP server. Its thread builds
//!   each message (CDR prefix, points, suffix: [`lidarxdp_core::ros2`]) in a shared-memory
//!   buffer and puts it with rmw_zenoh's attachment, after declaring the node's and the
//!   publishers' liveliness tokens.
//! - the reading side (`lidarxdp subscribe zenoh:/topic`) is `lidarxdp_client::zenoh`'s
//!   `ZenohSubscriber`: a zero-copy view of the points when the message arrived through
//!   shared memory.
//!
//! The key expressions, tokens, QoS string and attachment are built by
//! [`lidarxdp_core::ros2`], which cites rmw_zenoh's `docs/design.md` and
//! `rmw_zenoh_cpp/src/detail/liveliness_utils.cpp`.

#[cfg(feature = "zenoh")]
mod aux;
#[cfg(feature = "zenoh")]
mod shm;
#[cfg(feature = "zenoh")]
mod sink;
#[cfg(all(test, feature = "zenoh"))]
mod tests;

#[cfg(feature = "zenoh")]
pub use aux::ZenohAux;
#[cfg(feature = "zenoh")]
pub use lidarxdp_client::zenoh::{
    DEFAULT_LISTEN, MAX_CONFIG_BYTES, SessionConfig, default_config, load_config, open_session,
    session_config,
};
pub use lidarxdp_core::ros2::{MAX_ROS_DOMAIN_ID, domain_id};
#[cfg(feature = "zenoh")]
pub use shm::{ShmFrames, ShmPool};
#[cfg(feature = "zenoh")]
pub use sink::{ZENOH_COUNTERS, ZenohCounters, ZenohHandle, ZenohSink};

#[cfg(feature = "zenoh")]
use std::path::PathBuf;

#[cfg(feature = "zenoh")]
use lidarxdp_core::ros2::{Distro, Qos};

/// Default shared-memory pool of the sink, MiB (`--zenoh-shm-mb`): room for several 15 MB
/// frames (a 128-channel dual-return scan) in flight at once.
pub const DEFAULT_SHM_MB: u32 = 128;

/// Locked memory needed beyond the pool (16 MiB): zenoh's metadata segments and the
/// subscribers' segments it maps, which it locks too.
pub const LOCK_HEADROOM: u64 = 16 << 20;

/// Largest `--zenoh-shm-mb`, MiB (4 GiB).
pub const MAX_SHM_MB: u32 = 4096;

/// Frames that may wait for the zenoh sink's thread with one or two sensors (two frames each;
/// the daemon gives more sensors [`crate::publish::sink_queue`]): past it the sink drops,
/// never the capture.
pub const SINK_QUEUE: usize = 4;

/// The ROS 2 node name lidarxdp's liveliness tokens announce.
pub const NODE_NAME: &str = "lidarxdp";

/// One sensor's ROS 2 topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPlan {
    /// The frames' `sensor_id` (index in the configuration).
    pub sensor_id: u16,
    /// Fully qualified topic, e.g. `/lidar/front/points` (checked by
    /// [`lidarxdp_core::ros2::validate_topic`]).
    pub topic: String,
    /// `header.frame_id` of its messages.
    pub frame_id: String,
    /// Its IMU topic (`sensor_msgs/msg/Imu`), for the models that send IMU packets (Ouster).
    pub imu_topic: Option<String>,
    /// `header.frame_id` of its IMU messages.
    pub imu_frame_id: String,
}

/// Everything the zenoh sink needs, validated.
#[cfg(feature = "zenoh")]
#[derive(Clone, Debug)]
pub struct ZenohSettings {
    /// The session's configuration: file (`--zenoh-config` or `$ZENOH_SESSION_CONFIG_URI`)
    /// or [`default_config`], and `$ZENOH_CONFIG_OVERRIDE`.
    pub session: SessionConfig,
    /// ROS domain id, 0..=[`MAX_ROS_DOMAIN_ID`]: the first chunk of every key expression.
    pub domain_id: u32,
    /// Which distribution's type hash the keys carry.
    pub distro: Distro,
    /// QoS announced in the publishers' tokens (the sink always publishes best effort and
    /// drops under congestion, matching [`Qos::LIDAR`]).
    pub qos: Qos,
    /// Frames that may wait for the sink's thread; a frame finding the queue full is dropped
    /// for this sink alone and counted ([`ZenohCounters::dropped`]).
    pub queue: usize,
    /// One entry per sensor.
    pub topics: Vec<TopicPlan>,
}

/// Errors of the zenoh sink's start-up.
#[cfg(feature = "zenoh")]
#[derive(Debug, thiserror::Error)]
pub enum ZenohError {
    /// `--zenoh-config` could not be read, is over [`MAX_CONFIG_BYTES`], or zenoh refused it.
    #[error("--zenoh-config {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The session could not be opened (e.g. a `listen` endpoint in use), or a declaration
    /// failed.
    #[error("zenoh: {0}")]
    Session(String),
    /// The shared-memory pool could not be created (`/dev/shm` too small or absent).
    #[error("zenoh shared memory ({bytes} bytes, --zenoh-shm-mb): {reason}")]
    Shm {
        /// Requested pool size.
        bytes: usize,
        /// zenoh's error.
        reason: String,
    },
}

#[cfg(feature = "zenoh")]
impl From<lidarxdp_client::zenoh::ZenohError> for ZenohError {
    fn from(e: lidarxdp_client::zenoh::ZenohError) -> Self {
        match e {
            lidarxdp_client::zenoh::ZenohError::Config { path, reason } => {
                ZenohError::Config { path, reason }
            }
            lidarxdp_client::zenoh::ZenohError::Session(s) => ZenohError::Session(s),
        }
    }
}
