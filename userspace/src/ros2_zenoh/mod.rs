//! ROS 2 over zenoh: frames published as `sensor_msgs/msg/PointCloud2` the way ROS 2's
//! rmw_zenoh publishes them, so that `ros2 topic echo`, RViz and Autoware receive them with no
//! bridge, and local subscribers read them in place from shared memory.
//!
//! - [`ZenohSettings`] and [`open_session`]: the session, from zenoh's own JSON5 configuration
//!   file (`--zenoh-config`) or rmw_zenoh's defaults for a ROS 2 host ([`default_config`]).
//! - [`ZenohSink`]: a [`crate::publish::FrameSink`] beside the TCP server. Its thread builds
//!   each message (CDR prefix, points, suffix: [`lidarxdp_core::ros2`]) in a shared-memory
//!   buffer and puts it with rmw_zenoh's attachment, after declaring the node's and the
//!   publishers' liveliness tokens.
//! - [`subscribe`]: the reading side for `lidarxdp subscribe zenoh:/topic`, a zero-copy view of
//!   the points when the message arrived through shared memory.
//!
//! The key expressions, tokens, QoS string and attachment are built by
//! [`lidarxdp_core::ros2`], which cites rmw_zenoh's `docs/design.md` and
//! `rmw_zenoh_cpp/src/detail/liveliness_utils.cpp`.

mod shm;
mod sink;
mod subscribe;

pub use shm::ShmPool;
pub use sink::{ZENOH_COUNTERS, ZenohCounters, ZenohHandle, ZenohSink};
pub use subscribe::{ZenohFrame, ZenohFrameError, ZenohSubscriber, points_of};

use std::path::{Path, PathBuf};

use lidarxdp_core::ros2::{Distro, Qos};

/// Largest `--zenoh-config` file read, bytes (1 MiB): zenoh configurations are a few KB, so a
/// larger file is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Default shared-memory pool of the sink, MiB (`--zenoh-shm-mb`): room for several 15 MB
/// frames (a 128-channel dual-return scan) in flight at once.
pub const DEFAULT_SHM_MB: u32 = 128;

/// Locked memory needed beyond the pool (16 MiB): zenoh's metadata segments and the
/// subscribers' segments it maps, which it locks too.
pub const LOCK_HEADROOM: u64 = 16 << 20;

/// Largest `--zenoh-shm-mb`, MiB (4 GiB).
pub const MAX_SHM_MB: u32 = 4096;

/// Frames that may wait for the zenoh sink's thread (two 10 Hz frames of each of two sensors):
/// past it the sink drops, never the capture.
pub const SINK_QUEUE: usize = 4;

/// Largest ROS domain id (`--ros-domain-id`, `ROS_DOMAIN_ID`): ROS 2 "The ROS_DOMAIN_ID"
/// concept page gives 0..=232 as the range every RMW accepts.
pub const MAX_ROS_DOMAIN_ID: u32 = 232;

/// The ROS domain id: `flag` (`--ros-domain-id`) when given, else the `ROS_DOMAIN_ID`
/// environment value `env` (blank counts as unset), else 0.
///
/// # Errors
/// The source named (`--ros-domain-id` or `ROS_DOMAIN_ID`) with its value and the valid range
/// 0..=[`MAX_ROS_DOMAIN_ID`]: not a number, or out of range.
pub fn domain_id(flag: Option<u32>, env: Option<&str>) -> Result<u32, String> {
    let env = env.map(str::trim).filter(|v| !v.is_empty());
    let (id, from) = match (flag, env) {
        (Some(d), _) => (d, "--ros-domain-id"),
        (None, Some(v)) => (
            v.parse::<u32>().map_err(|_| {
                format!(
                    "ROS_DOMAIN_ID: {v:?} is not a number; valid 0..={MAX_ROS_DOMAIN_ID} \
                     (or pass --ros-domain-id)"
                )
            })?,
            "ROS_DOMAIN_ID",
        ),
        (None, None) => (0, "ROS_DOMAIN_ID"),
    };
    if id > MAX_ROS_DOMAIN_ID {
        return Err(format!(
            "{from}: {id} is out of range; valid 0..={MAX_ROS_DOMAIN_ID}"
        ));
    }
    Ok(id)
}

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
}

/// Everything the zenoh sink needs, validated.
#[derive(Clone, Debug)]
pub struct ZenohSettings {
    /// zenoh's JSON5 configuration file (`--zenoh-config`), or `None` for [`default_config`].
    pub config_file: Option<PathBuf>,
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

/// The configuration a session uses when `--zenoh-config` is not given: rmw_zenoh's default
/// session configuration for a ROS 2 host (rmw_zenoh `DEFAULT_RMW_ZENOH_SESSION_CONFIG.json5`):
/// peer mode, connected to the `rmw_zenohd` router at `tcp/localhost:7447` (retried for ever
/// if it is not up yet), no multicast scouting, shared memory on.
///
/// # Errors
/// None in practice: the keys are zenoh's own; an error names the key zenoh refused.
pub fn default_config() -> Result<zenoh::Config, ZenohError> {
    let mut c = zenoh::Config::default();
    for (key, value) in [
        ("mode", r#""peer""#),
        ("connect/endpoints", r#"["tcp/localhost:7447"]"#),
        ("scouting/multicast/enabled", "false"),
        ("transport/shared_memory/enabled", "true"),
    ] {
        c.insert_json5(key, value)
            .map_err(|e| ZenohError::Session(format!("default configuration key {key}: {e}")))?;
    }
    Ok(c)
}

/// Reads zenoh's JSON5 configuration file, refusing a file over [`MAX_CONFIG_BYTES`] before
/// reading it.
///
/// # Errors
/// [`ZenohError::Config`] naming the file: unreadable, too big, or refused by zenoh (whose
/// message names the key).
pub fn load_config(path: &Path) -> Result<zenoh::Config, ZenohError> {
    let err = |reason: String| ZenohError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(err(format!(
            "{} bytes; a zenoh configuration is at most {MAX_CONFIG_BYTES} bytes (1 MiB)",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    zenoh::Config::from_json5(&text).map_err(|e| err(e.to_string()))
}

/// Opens a zenoh session (this spawns zenoh's runtime threads: call it after the capabilities
/// are dropped, so that none of them holds one).
///
/// # Errors
/// [`ZenohError::Config`] or [`ZenohError::Session`].
pub fn open_session(config_file: Option<&Path>) -> Result<zenoh::Session, ZenohError> {
    use zenoh::Wait;
    let mut config = match config_file {
        Some(p) => load_config(p)?,
        None => default_config()?,
    };
    // lidarxdp writes its messages into its own locked pool (`ShmPool`), created before the
    // capabilities are dropped; zenoh's implicit copy of large payloads into a second pool
    // (16 MiB, locked when the session opens, after the drop) is not wanted.
    config
        .insert_json5(
            "transport/shared_memory/transport_optimization/enabled",
            "false",
        )
        .map_err(|e| ZenohError::Session(format!("configure shared memory: {e}")))?;
    zenoh::open(config)
        .wait()
        .map_err(|e| ZenohError::Session(format!("open session: {e}")))
}
