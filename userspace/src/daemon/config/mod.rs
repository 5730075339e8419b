//! The daemon's configuration: one typed record per subsystem ([`sections`]), each both a set
//! of `lidarxdp run` flags and a section of the TOML file (`--config FILE`); flags win over the
//! file field by field ([`Settings::over`]). Ranges are checked once, when a flag or key is
//! parsed, by the validated types of [`valid`]; [`plan::build`] resolves the defaults and the
//! rules between fields into the [`Plan`] the daemon runs and `check-config` prints.
//!
//! File layout (every key optional unless noted; a section's keys are its flags' names with
//! underscores, except where noted):
//!
//! ```toml
//! [capture]
//! backend = "xdp"                 # xdp | socket | recvmmsg | uring
//! iface = "eth0"                  # default interface of the sensors below
//! xdp_mode = "auto"               # auto | native | generic
//! umem_frames = 4096              # power of two, 64..=65536
//! wait = "paced:1000"             # idle wait: poll | minwait:USEC | paced:USEC | busypoll:USEC
//! frame_queue = 16                # finished frames between the capture threads and publisher
//!
//! [[queues]]                      # per (interface, RX queue) settings: one capture thread each
//! iface = "eth0"
//! queue = 0
//! cpu = 2                         # pin the thread
//! umem_frames = 8192
//!
//! [[sensors]]                     # one table per sensor (the flags describe one sensor)
//! name = "front"                  # unique; subscribers choose by it (default: the model name)
//! model = "vlp16"                 # required (flag: --sensor)
//! calibration = "/etc/lidarxdp/VLP16db.yaml"   # required
//! port = 2368                     # default: the model's usual data port
//! source = "192.168.1.201"        # default: any source; also "fd00::201", "fe80::201%eth0"
//! queue = 0                       # RX queue its packets arrive on (default 0)
//! cut_angle = 0.0                 # degrees [0, 360] (360 is 0)
//! fov = [270.0, 90.0]             # degrees, each [0, 360]; min > max wraps through 0; [0, 360]: none
//! return_mode = "dual"            # expected return mode; a different one is logged
//! min_range = 0.3                 # metres, [0, max_range); default: the model's datasheet
//! max_range = 100.0               # metres, (min_range, 1000]; default: the model's datasheet
//! stamp = "sensor"                # sensor | host: the clock of the frames' start_ns
//! nebula_compat = false           # Velodyne: Nebula's rules bit for bit, not the manuals'
//! topic = "/lidar/front/points"   # ROS 2 topic (default /lidar/<name>/points)
//! frame_id = "front"              # PointCloud2 header.frame_id (default: the name)
//!
//! [process]
//! user = "lidarxdp"               # switch to this user once set up
//! stats_json = "/var/lib/lidarxdp/stats.json"   # every counter as JSON at exit
//! memory_growth_warn_mb_per_hour = 16   # MiB/h, 0..=65536; /diagnostics WARN above; 0: never
//!
//! [tcp]                           # lidarxdp's protocol, loopback only
//! listen = "127.0.0.1:7510"
//! max_subscribers = 16            # 1..=1024
//! subscriber_queue = 3            # frames per sensor queued per subscriber, 1..=64
//!
//! [ros2]                          # shared by [zenoh] and [dds]
//! domain_id = 0                   # 0..=232; default $ROS_DOMAIN_ID, else 0
//! distro = "jazzy"                # jazzy (RIHS01 type hash) | humble
//!
//! [zenoh]                         # ROS 2 over zenoh (rmw_zenoh)
//! enabled = true                  # flag: --zenoh
//! config = "/etc/lidarxdp/zenoh.json5"   # zenoh's own JSON5 file (flag: --zenoh-config)
//! shm_mb = 128                    # shared-memory pool, MiB, 0..=4096 (flag: --zenoh-shm-mb)
//!
//! [dds]                           # ROS 2 over DDS (Cyclone DDS)
//! enabled = true                  # flag: --dds
//! config = "/etc/lidarxdp/cyclonedds.xml"   # flag: --dds-config
//!
//! [foxglove]
//! listen = "127.0.0.1:8765"       # flag: --foxglove; loopback only
//! [view]
//! listen = "127.0.0.1:8080"       # flag: --view; loopback only
//! [metrics]
//! listen = "127.0.0.1:9751"       # flag: --metrics; loopback only
//!
//! [recording]
//! pcap = "/var/lib/lidarxdp/rec.pcap"   # flag: --record-pcap
//! split_size_mb = 1000            # 1..=1048576 (flag: --record-split-size)
//! split_duration_s = 600          # 1..=604800 (flag: --record-split-duration)
//! ```

pub mod plan;
pub mod sections;
#[cfg(test)]
mod tests;
/// Checked setting values: `lidarxdp_core::valid` (one implementation, shared with the Python
/// package), and the limits of the daemon's own sinks.
pub mod valid {
    pub use lidarxdp_core::valid::*;

    /// The zenoh sink's shared-memory pool, MiB, 0..=[`lidarxdp::ros2_zenoh::MAX_SHM_MB`].
    pub type ShmMib = Ranged<0, { lidarxdp::ros2_zenoh::MAX_SHM_MB as u64 }>;

    /// A recording part's size limit, MB, in [`lidarxdp::capture::record::SPLIT_SIZE_MB`].
    pub type SplitSizeMb = Ranged<
        { *lidarxdp::capture::record::SPLIT_SIZE_MB.start() },
        { *lidarxdp::capture::record::SPLIT_SIZE_MB.end() },
    >;

    /// A recording part's duration limit, s, in [`lidarxdp::capture::record::SPLIT_DURATION_S`].
    pub type SplitDurationS = Ranged<
        { *lidarxdp::capture::record::SPLIT_DURATION_S.start() },
        { *lidarxdp::capture::record::SPLIT_DURATION_S.end() },
    >;
}

use std::path::Path;

use anyhow::{Context, Result};

pub use plan::{Plan, Ros2Env, SensorPlan, build};
pub use sections::Settings;

/// The largest configuration file read, bytes (1 MiB): a larger one is refused before it is
/// read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads the TOML file at `path` into [`Settings`], its relative paths anchored at its
/// folder.
///
/// # Errors
/// The file cannot be read or is larger than [`MAX_FILE_BYTES`]; a key is unknown, or its
/// value is invalid (the TOML reader names the line and key; the message gives the valid
/// range).
pub fn read_file(path: &Path) -> Result<Settings> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("read config {}", path.display()))?
        .len();
    if len > MAX_FILE_BYTES {
        anyhow::bail!(
            "config {}: {len} bytes is larger than the {MAX_FILE_BYTES} bytes a configuration \
             file may have",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("read config {}", path.display()))?;
    let mut s: Settings =
        toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
    s.anchor_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(s)
}

/// `--cpus LIST`: one CPU per capture thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// A `--cpus` list that is not comma-separated CPU numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--cpus {0:?}: expected comma-separated CPU numbers, e.g. 0,1")]
pub struct CpuListError(String);

impl std::str::FromStr for CpuList {
    type Err = CpuListError;
    /// Parses `0,2,3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(|c| {
                c.trim()
                    .parse::<usize>()
                    .map_err(|_| CpuListError(s.into()))
            })
            .collect::<Result<_, _>>()
            .map(CpuList)
    }
}
