//! The daemon's effective configuration: `lidarxdp run` flags merged over the TOML file
//! (`--config FILE`), validated into a [`Plan`] of capture threads, each with its sensors.
//! `lidarxdp check-config FILE` builds the same plan and prints it.
//!
//! File layout (every key optional unless noted; names as the flags with underscores):
//!
//! ```toml
//! backend = "xdp"                 # xdp | socket | recvmmsg | uring
//! iface = "eth0"                  # default interface of the sensors below
//! listen = "127.0.0.1:7510"
//! max_subscribers = 16
//! subscriber_queue = 3            # frames queued per subscriber before the oldest is dropped
//! frame_queue = 16                # finished frames between the capture threads and publisher
//! wait = "paced:1000"             # idle wait: poll | minwait:USEC | paced:USEC | busypoll:USEC
//!
//! [[queues]]                      # per (interface, RX queue) settings: one capture thread each
//! iface = "eth0"
//! queue = 0
//! cpu = 2                         # pin the thread
//! umem_frames = 8192
//!
//! [[sensors]]                     # required unless the single-sensor keys/flags are used
//! name = "front"                  # unique; subscribers choose by it (default: the model name)
//! model = "vlp16"                 # required
//! calibration = "/etc/lidarxdp/VLP16db.yaml"   # required
//! port = 2368                     # default: the model's usual data port
//! source = "192.168.1.201"        # default: any source
//! queue = 0                       # RX queue its packets arrive on (default 0)
//! cut_angle = 0.0                 # degrees [0, 360]
//! fov = [270.0, 90.0]             # degrees, each [0, 360]; min > max wraps through 0
//! return_mode = "dual"            # expected return mode; a different one is logged
//! min_range = 0.3                 # metres, [0, max_range); default: the model's datasheet
//! max_range = 100.0               # metres, (min_range, 1000]; default: the model's datasheet
//! stamp = "sensor"                # sensor | host: the clock of the frames' start_ns
//! nebula_compat = false           # Velodyne: Nebula's rules bit for bit, not the manuals'
//! topic = "/lidar/front/points"   # ROS 2 topic over zenoh (default /lidar/<name>/points)
//! frame_id = "front"              # PointCloud2 header.frame_id (default: the name)
//! ```
//!
//! ROS 2 over zenoh (top level; `zenoh = true` or `--zenoh` turns it on):
//!
//! ```toml
//! zenoh = true
//! zenoh_config = "/etc/lidarxdp/zenoh.json5"  # zenoh's own JSON5 file (default: rmw_zenoh's)
//! ros_domain_id = 0               # 0..=232; default $ROS_DOMAIN_ID, else 0
//! ros_distro = "jazzy"            # jazzy (RIHS01 type hash) | humble (TypeHashNotSupported)
//! zenoh_shm_mb = 128              # shared-memory pool, MiB, 0..=4096 (0: heap)
//! ```
//!
//! The single-sensor form (`sensor = "vlp16"`, `port`, `calibration`, ... at top level, or
//! the same flags) still works and is one `[[sensors]]` entry. Command-line flags override the
//! file's top-level keys; the single-sensor flags cannot be combined with `[[sensors]]`.

use std::{collections::BTreeMap, net::Ipv4Addr, path::PathBuf};

use anyhow::{Result, bail};
use lidarxdp::{
    capture::{Backend, RcvBuf, StallSchedule, WaitMode},
    loader::AttachMode,
};
use lidarxdp_core::ros2::Distro;
use lidarxdp_core::sensor::{MAX_RANGE_M, ReturnMode, SensorModel, Stamp};
use serde::{Deserialize, Serialize};

/// One `[[sensors]]` table of the config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensorSection {
    /// Name subscribers choose the sensor by (default: the model name).
    pub name: Option<String>,
    /// Model, e.g. `vlp16` (required).
    pub model: Option<SensorModel>,
    /// Calibration / metadata file (required).
    pub calibration: Option<PathBuf>,
    /// UDP destination port of the data packets (default: the model's,
    /// [`SensorModel::default_data_port`]: Velodyne and Hesai 2368, Ouster 7502, RoboSense 6699).
    pub port: Option<u16>,
    /// Second port of the same sensor (default: RoboSense's DIFOP 7788, none for the other
    /// families, [`SensorModel::default_extra_port`]; 0 turns RoboSense's off).
    pub extra_port: Option<u16>,
    /// IPv4 source address (default: any).
    pub source: Option<Ipv4Addr>,
    /// Interface (default: the top-level `iface` / `--iface`).
    pub iface: Option<String>,
    /// RX queue the sensor's packets arrive on (default 0).
    pub queue: Option<u32>,
    /// Cut angle, degrees [0, 360].
    pub cut_angle: Option<f64>,
    /// Field of view `[min, max]`, degrees.
    pub fov: Option<(f64, f64)>,
    /// Expected return mode (`strongest`, `last`, `dual`, ...).
    pub return_mode: Option<String>,
    /// Hesai: skip the CRC check.
    pub hesai_skip_crc: Option<bool>,
    /// Points at this range or closer are dropped, metres (default: the model's datasheet).
    pub min_range: Option<f32>,
    /// Points at this range or farther are dropped, metres (default: the model's datasheet).
    pub max_range: Option<f32>,
    /// Clock of the frames' `start_ns`: `sensor` (default) or `host`.
    pub stamp: Option<Stamp>,
    /// Velodyne: decode with Tier IV Nebula's rules instead of the manuals' (default false).
    pub nebula_compat: Option<bool>,
    /// ROS 2 topic of its frames over zenoh (default `/lidar/<name>/points`).
    pub topic: Option<String>,
    /// `header.frame_id` of its `PointCloud2` messages (default: the name).
    pub frame_id: Option<String>,
}

/// One `[[queues]]` table: settings of one (interface, RX queue) capture thread.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSection {
    /// Interface (default: the top-level `iface`).
    pub iface: Option<String>,
    /// RX queue (default 0).
    pub queue: Option<u32>,
    /// CPU to pin the thread to.
    pub cpu: Option<usize>,
    /// UMEM frames of its AF_XDP socket (power of two, 64..=65536).
    pub umem_frames: Option<u32>,
}

/// A validated sensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SensorPlan {
    /// Index in the configuration (frames' `sensor_id`, the XDP filter value).
    pub id: u16,
    /// Unique name.
    pub name: String,
    /// Model.
    #[serde(serialize_with = "ser_model")]
    pub model: SensorModel,
    /// Calibration file.
    pub calibration: PathBuf,
    /// Data port, 1..=65535.
    pub port: u16,
    /// Second port, if any.
    pub extra_port: Option<u16>,
    /// Source address, if restricted.
    pub source: Option<Ipv4Addr>,
    /// Cut angle, degrees [0, 360].
    pub cut_angle: f64,
    /// Field of view, degrees.
    pub fov: Option<(f64, f64)>,
    /// Expected return mode.
    #[serde(serialize_with = "ser_return_mode")]
    pub return_mode: Option<ReturnMode>,
    /// Hesai CRC check skipped.
    pub hesai_skip_crc: bool,
    /// Range gate, metres: points at `min_range` or closer and at `max_range` or farther are
    /// dropped.
    pub min_range: f32,
    /// See `min_range`.
    pub max_range: f32,
    /// Clock of the frames' `start_ns`.
    pub stamp: Stamp,
    /// Velodyne decoded with Nebula's rules (`nebula_compat`).
    pub nebula_compat: bool,
    /// ROS 2 topic over zenoh, a valid fully qualified name when zenoh is on.
    pub topic: String,
    /// `header.frame_id`, 1..=255 bytes without NUL.
    pub frame_id: String,
}

/// Validated ROS 2 over zenoh settings (`--zenoh`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ZenohPlan {
    /// zenoh's JSON5 configuration file (`--zenoh-config`, else `$ZENOH_SESSION_CONFIG_URI`),
    /// or rmw_zenoh's defaults.
    pub config: Option<PathBuf>,
    /// `$ZENOH_CONFIG_OVERRIDE` entries, `(key, JSON5 value)`, applied over it in order.
    pub overrides: Vec<(String, String)>,
    /// ROS domain id, 0..=232.
    pub ros_domain_id: u32,
    /// `jazzy` or `humble`.
    #[serde(serialize_with = "ser_distro")]
    pub ros_distro: Distro,
    /// Shared-memory pool, MiB, 0..=4096.
    pub shm_mb: u32,
}

/// Validated ROS 2 over DDS settings (`--dds`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DdsPlan {
    /// Cyclone DDS XML configuration file (`--dds-config`), applied after `$CYCLONEDDS_URI`.
    pub config: Option<PathBuf>,
    /// `$CYCLONEDDS_URI` at start-up, honoured as rmw_cyclonedds does.
    pub cyclonedds_uri: Option<String>,
    /// ROS domain id (= DDS domain id), 0..=232.
    pub ros_domain_id: u32,
    /// `jazzy` or `humble`.
    #[serde(serialize_with = "ser_distro")]
    pub ros_distro: Distro,
    /// `ROS_AUTOMATIC_DISCOVERY_RANGE` and `ROS_STATIC_PEERS` at start-up.
    #[serde(serialize_with = "ser_discovery")]
    pub discovery: lidarxdp::ros2_dds::Discovery,
}

fn ser_discovery<S: serde::Serializer>(
    d: &lidarxdp::ros2_dds::Discovery,
    s: S,
) -> Result<S::Ok, S::Error> {
    use lidarxdp::ros2_dds::DiscoveryRange::*;
    let range = match d.range {
        Subnet => "SUBNET",
        Localhost => "LOCALHOST",
        Off => "OFF",
        SystemDefault => "SYSTEM_DEFAULT",
    };
    s.serialize_str(&format!(
        "{range}; static peers [{}]",
        d.static_peers.join(";")
    ))
}

fn ser_distro<S: serde::Serializer>(d: &Distro, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

fn ser_model<S: serde::Serializer>(m: &SensorModel, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}

fn ser_return_mode<S: serde::Serializer>(m: &Option<ReturnMode>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_str(&m.to_string()),
        None => s.serialize_none(),
    }
}

/// A validated capture thread: one (interface, RX queue) and the sensors it decodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueuePlan {
    /// Interface (`-` for the socket backends, which do not use one).
    pub iface: String,
    /// RX queue, 0..=63.
    pub queue: u32,
    /// CPU the thread is pinned to.
    pub cpu: Option<usize>,
    /// UMEM frames (AF_XDP).
    pub umem_frames: u32,
    /// Sensors, in configuration order.
    pub sensors: Vec<SensorPlan>,
}

/// The effective configuration (what `check-config` prints).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Backend name.
    #[serde(serialize_with = "ser_backend")]
    pub backend: Backend,
    /// Publisher address.
    pub listen: std::net::SocketAddr,
    /// Subscriber limit, 1..=1024.
    pub max_subscribers: usize,
    /// Frames per subscriber queue, 1..=64.
    pub subscriber_queue: usize,
    /// Frames between capture threads and the publisher, 1..=1024.
    pub frame_queue: usize,
    /// Socket backends' receive buffer.
    #[serde(serialize_with = "ser_debug")]
    pub rcvbuf: Option<RcvBuf>,
    /// Injected stalls.
    #[serde(serialize_with = "ser_debug")]
    pub stall: Option<StallSchedule>,
    /// How the capture threads wait when idle (`--wait`; xdp and recvmmsg backends).
    #[serde(serialize_with = "ser_display")]
    pub wait: WaitMode,
    /// ROS 2 over zenoh, when on.
    pub zenoh: Option<ZenohPlan>,
    /// ROS 2 over DDS, when on.
    pub dds: Option<DdsPlan>,
    /// Capture threads.
    pub queues: Vec<QueuePlan>,
}

fn ser_backend<S: serde::Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(b.name())
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn ser_debug<S: serde::Serializer, T: std::fmt::Debug>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:?}")),
        None => s.serialize_none(),
    }
}

impl Plan {
    /// Every sensor, in id order.
    pub fn sensors(&self) -> impl Iterator<Item = &SensorPlan> {
        let mut all: Vec<&SensorPlan> = self.queues.iter().flat_map(|q| &q.sensors).collect();
        all.sort_by_key(|s| s.id);
        all.into_iter()
    }
}

/// Inputs of [`build`]: the merged top-level settings.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// `backend`.
    pub backend: Option<Backend>,
    /// `iface`.
    pub iface: Option<String>,
    /// `queue` (single-sensor form).
    pub queue: Option<u32>,
    /// `cpu` (single queue) .
    pub cpu: Option<usize>,
    /// `--cpus`: one CPU per capture thread, in plan order.
    pub cpus: Option<Vec<usize>>,
    /// `umem_frames` default.
    pub umem_frames: Option<u32>,
    /// `listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `listen_public`.
    pub listen_public: bool,
    /// `max_subscribers`.
    pub max_subscribers: Option<usize>,
    /// `subscriber_queue`.
    pub subscriber_queue: Option<usize>,
    /// `frame_queue`.
    pub frame_queue: Option<usize>,
    /// `rcvbuf`.
    pub rcvbuf: Option<RcvBuf>,
    /// `stall`.
    pub stall: Option<StallSchedule>,
    /// `wait`.
    pub wait: Option<WaitMode>,
    /// The single-sensor keys as one section (`None` when none was given).
    pub single: Option<SensorSection>,
    /// `[[sensors]]`.
    pub sensors: Vec<SensorSection>,
    /// `[[queues]]`.
    pub queues: Vec<QueueSection>,
    /// XDP attach mode (only checked for consistency).
    pub xdp_mode: Option<AttachMode>,
    /// `zenoh`.
    pub zenoh: bool,
    /// `zenoh_config`.
    pub zenoh_config: Option<PathBuf>,
    /// `ros_domain_id` (flag or file), else the `ROS_DOMAIN_ID` environment value (given
    /// here as text, checked like the flag).
    pub ros_domain_id: Option<u32>,
    /// The `ROS_DOMAIN_ID` environment variable, when set.
    pub ros_domain_id_env: Option<String>,
    /// `ros_distro`.
    pub ros_distro: Option<Distro>,
    /// `zenoh_shm_mb`.
    pub zenoh_shm_mb: Option<u32>,
    /// `dds`.
    pub dds: bool,
    /// `dds_config`.
    pub dds_config: Option<PathBuf>,
    /// The ROS 2 middleware environment at start-up (zenoh's and DDS's variables).
    pub ros2_env: Ros2Env,
}

/// The environment variables the zenoh and DDS sinks honour, read once at start-up.
#[derive(Clone, Debug, Default)]
pub struct Ros2Env {
    /// `ZENOH_SESSION_CONFIG_URI` (rmw_zenoh: the session's JSON5 file).
    pub zenoh_session_config_uri: Option<String>,
    /// `ZENOH_CONFIG_OVERRIDE` (rmw_zenoh: `key=value;...` over the configuration).
    pub zenoh_config_override: Option<String>,
    /// `CYCLONEDDS_URI`.
    pub cyclonedds_uri: Option<String>,
    /// `ROS_AUTOMATIC_DISCOVERY_RANGE`.
    pub discovery_range: Option<String>,
    /// `ROS_STATIC_PEERS`.
    pub static_peers: Option<String>,
    /// `ROS_LOCALHOST_ONLY` (deprecated in Jazzy; `1` means LOCALHOST when the range is unset).
    pub localhost_only: Option<String>,
}

impl Ros2Env {
    /// Reads the variables from this process's environment.
    pub fn from_process() -> Self {
        let v = |k: &str| std::env::var(k).ok();
        Ros2Env {
            zenoh_session_config_uri: v("ZENOH_SESSION_CONFIG_URI"),
            zenoh_config_override: v("ZENOH_CONFIG_OVERRIDE"),
            cyclonedds_uri: v("CYCLONEDDS_URI"),
            discovery_range: v("ROS_AUTOMATIC_DISCOVERY_RANGE"),
            static_peers: v("ROS_STATIC_PEERS"),
            localhost_only: v("ROS_LOCALHOST_ONLY"),
        }
    }
}

/// Upper bound of `max_subscribers` (the publisher's io_uring is sized from it).
pub const MAX_SUBSCRIBERS: usize = 1024;

fn check_port(field: &str, p: u16) -> Result<u16> {
    if p == 0 {
        bail!("{field}: 0 is not a valid UDP port (valid range 1..=65535)");
    }
    Ok(p)
}

fn check_umem(field: &str, n: u32) -> Result<u32> {
    if !(64..=65536).contains(&n) || !n.is_power_of_two() {
        bail!("{field}: {n} is not a power of two in 64..=65536");
    }
    Ok(n)
}

fn check_cpu(field: &str, cpu: usize) -> Result<usize> {
    let n = lidarxdp::capture::usable_cpus();
    if cpu >= n {
        bail!(
            "{field}: {cpu} is out of range; valid 0..={} on this machine",
            n - 1
        );
    }
    Ok(cpu)
}

fn check_angle(field: &str, v: f64) -> Result<f64> {
    if !(v.is_finite() && (0.0..=360.0).contains(&v)) {
        bail!("{field}: {v} is out of range; valid [0, 360] deg");
    }
    Ok(v)
}

/// Validates the inputs into a [`Plan`]. Checks ranges, required keys, unique names and
/// filter keys, and that every `[[queues]]` entry has a sensor; does not read calibration files
/// (the caller builds the pipelines, which does).
///
/// # Errors
/// The first invalid field, named as in the file (`sensors[1].port`) or as the flag
/// (`--max-subscribers`), with its value and the valid range.
pub fn build(i: Inputs) -> Result<Plan> {
    let backend = i.backend.unwrap_or_default();
    let zenoh = zenoh_plan(&i)?;
    let dds = dds_plan(&i)?;
    if i.single.is_some() && !i.sensors.is_empty() {
        bail!(
            "sensor flags (--sensor, --port, --calibration, ...) and [[sensors]] in the config \
             file exclude each other: describe every sensor in the file"
        );
    }
    let sections: Vec<(String, SensorSection)> = match i.single {
        Some(s) => vec![("--sensor".into(), s)],
        None if i.sensors.is_empty() => {
            bail!("--sensor is required (or [[sensors]] in the config file), e.g. --sensor vlp16")
        }
        None => i
            .sensors
            .into_iter()
            .enumerate()
            .map(|(k, s)| (format!("sensors[{k}]"), s))
            .collect(),
    };
    let single_form = sections.len() == 1 && sections[0].0 == "--sensor";
    let field = |prefix: &str, key: &str, flag: &str| {
        if single_form {
            format!("--{flag}")
        } else {
            format!("{prefix}.{key}")
        }
    };
    let listen = i
        .listen
        .unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 7510)));
    if !listen.ip().is_loopback() && !i.listen_public {
        bail!(
            "--listen: {listen} is not a loopback address; subscribers are not authenticated, \
             so pass --listen-public to serve it anyway"
        );
    }
    let max_subscribers = i.max_subscribers.unwrap_or(16);
    if !(1..=MAX_SUBSCRIBERS).contains(&max_subscribers) {
        bail!("--max-subscribers: {max_subscribers} is out of range; valid 1..={MAX_SUBSCRIBERS}");
    }
    let subscriber_queue = i.subscriber_queue.unwrap_or(3);
    if !(1..=64).contains(&subscriber_queue) {
        bail!("--subscriber-queue: {subscriber_queue} is out of range; valid 1..=64");
    }
    let frame_queue = i.frame_queue.unwrap_or(16);
    if !(1..=1024).contains(&frame_queue) {
        bail!("--frame-queue: {frame_queue} is out of range; valid 1..=1024");
    }
    if backend != Backend::Xdp && i.xdp_mode.is_some() {
        bail!(
            "--xdp-mode: only meaningful with --backend xdp (not {})",
            backend.name()
        );
    }
    if backend == Backend::Xdp && i.rcvbuf.is_some() {
        bail!("--rcvbuf: only meaningful with the socket backends (socket, recvmmsg, uring)");
    }
    let default_umem = check_umem("--umem-frames", i.umem_frames.unwrap_or(4096))?;
    let mut topics: BTreeMap<String, String> = BTreeMap::new();

    // Sensors, grouped into (iface, queue) in order of first appearance.
    let mut names = BTreeMap::new();
    let mut keys: BTreeMap<(String, u16, Option<Ipv4Addr>), String> = BTreeMap::new();
    let mut groups: Vec<QueuePlan> = Vec::new();
    for (id, (prefix, s)) in sections.into_iter().enumerate() {
        let id = u16::try_from(id).map_err(|_| anyhow::anyhow!("more than 65535 sensors"))?;
        let Some(model) = s.model else {
            bail!(
                "{}: required, e.g. vlp16",
                field(&prefix, "model", "sensor")
            );
        };
        let Some(calibration) = s.calibration else {
            bail!(
                "{}: required (the model's calibration or metadata file)",
                field(&prefix, "calibration", "calibration")
            );
        };
        let port = check_port(
            &field(&prefix, "port", "port"),
            s.port.unwrap_or(model.default_data_port()),
        )?;
        // RoboSense's DIFOP port is on by default; `extra_port = 0` turns a default off.
        let extra_port = match s.extra_port.or(model.default_extra_port()) {
            Some(0) if model.default_extra_port().is_some() => None,
            Some(p) => {
                let f = field(&prefix, "extra_port", "extra-port");
                check_port(&f, p)?;
                if p == port {
                    bail!("{f}: {p} equals the data port; give a different port");
                }
                Some(p)
            }
            None => None,
        };
        let name = s.name.unwrap_or_else(|| model.name().to_owned());
        if name.is_empty() || name.len() > 64 {
            bail!(
                "{}: {name:?} must be 1..=64 bytes",
                field(&prefix, "name", "name")
            );
        }
        if let Some(other) = names.insert(name.clone(), prefix.clone()) {
            bail!(
                "{}: {name:?} is already the name of {other}; names must be unique",
                field(&prefix, "name", "name")
            );
        }
        let iface = match (backend, s.iface.or_else(|| i.iface.clone())) {
            (Backend::Xdp, Some(f)) => f,
            (Backend::Xdp, None) => bail!(
                "{}: required with --backend xdp (or a top-level iface / --iface)",
                field(&prefix, "iface", "iface")
            ),
            (_, _) => "-".to_owned(),
        };
        let queue = match backend {
            Backend::Xdp => s.queue.or(i.queue).unwrap_or(0),
            _ => 0,
        };
        if queue >= lidarxdp_common::XSK_MAP_CAPACITY {
            bail!(
                "{}: {queue} is out of range; valid 0..={} (and below the interface's RX queue count)",
                field(&prefix, "queue", "queue"),
                lidarxdp_common::XSK_MAP_CAPACITY - 1
            );
        }
        let defaulted_extra = s.extra_port.is_none() && extra_port.is_some();
        for p in std::iter::once(port).chain(extra_port) {
            if let Some(other) = keys.insert((iface.clone(), p, s.source), prefix.clone()) {
                let is_extra = Some(p) == extra_port && p != port;
                bail!(
                    "{}: port {p} from {} on {iface} is already {other}'s; each (port, source) \
                     names one sensor{}",
                    field(
                        &prefix,
                        if is_extra { "extra_port" } else { "port" },
                        if is_extra { "extra-port" } else { "port" }
                    ),
                    s.source
                        .map_or("any source".to_owned(), |ip| ip.to_string()),
                    if is_extra && defaulted_extra {
                        " (7788 is RoboSense's default DIFOP port: give each RoboSense sensor its \
                         own source or extra_port, or extra_port = 0 for none)"
                    } else {
                        ""
                    }
                );
            }
        }
        let cut_angle = check_angle(
            &field(&prefix, "cut_angle", "cut-angle"),
            s.cut_angle.unwrap_or(0.0),
        )?;
        if let Some((a, b)) = s.fov {
            check_angle(&field(&prefix, "fov", "fov"), a)?;
            check_angle(&field(&prefix, "fov", "fov"), b)?;
        }
        let return_mode = match s.return_mode {
            Some(r) => Some(r.parse::<ReturnMode>().map_err(|e| {
                anyhow::anyhow!("{}: {e}", field(&prefix, "return_mode", "return-mode"))
            })?),
            None => None,
        };
        let (dmin, dmax) = model.datasheet_range_m();
        let min_range = s.min_range.unwrap_or(dmin);
        let max_range = s.max_range.unwrap_or(dmax);
        // A minimum at or above a maximum that was not given is the minimum's fault.
        let min_ceiling = match s.max_range {
            Some(_) => MAX_RANGE_M,
            None => max_range,
        };
        if !(min_range.is_finite() && min_range >= 0.0 && min_range < min_ceiling) {
            bail!(
                "{}: {min_range} is out of range; valid [0, {min_ceiling}) m (the {} datasheet \
                 range is {dmin} to {dmax} m)",
                field(&prefix, "min_range", "min-range"),
                model.name()
            );
        }
        if !(max_range.is_finite() && max_range > min_range && max_range <= MAX_RANGE_M) {
            bail!(
                "{}: {max_range} is out of range; valid (min_range = {min_range}, {MAX_RANGE_M}] m \
                 (the {} datasheet range is {dmin} to {dmax} m)",
                field(&prefix, "max_range", "max-range"),
                model.name()
            );
        }
        let topic_field = field(&prefix, "topic", "topic");
        let topic = s
            .topic
            .unwrap_or_else(|| lidarxdp_core::ros2::default_topic(&name));
        if zenoh.is_some() || dds.is_some() {
            lidarxdp_core::ros2::validate_topic(&topic_field, &topic)
                .map_err(|e| anyhow::anyhow!("{e} (the default is /lidar/<sensor name>/points)"))?;
            if let Some(other) = topics.insert(topic.clone(), prefix.clone()) {
                bail!("{topic_field}: {topic} is already {other}'s topic; topics must be unique");
            }
        }
        let frame_id = s
            .frame_id
            .unwrap_or_else(|| lidarxdp_core::ros2::default_frame_id(&name));
        if frame_id.is_empty() || frame_id.len() > 255 || frame_id.contains('\0') {
            bail!(
                "{}: {frame_id:?} must be 1..=255 bytes without NUL",
                field(&prefix, "frame_id", "frame-id")
            );
        }
        let plan = SensorPlan {
            id,
            name,
            model,
            calibration,
            port,
            extra_port,
            source: s.source,
            cut_angle,
            fov: s.fov,
            return_mode,
            hesai_skip_crc: s.hesai_skip_crc.unwrap_or(false),
            min_range,
            max_range,
            stamp: s.stamp.unwrap_or_default(),
            nebula_compat: s.nebula_compat.unwrap_or(false),
            topic,
            frame_id,
        };
        match groups
            .iter_mut()
            .find(|g| g.iface == iface && g.queue == queue)
        {
            Some(g) => g.sensors.push(plan),
            None => groups.push(QueuePlan {
                iface,
                queue,
                cpu: None,
                umem_frames: default_umem,
                sensors: vec![plan],
            }),
        }
    }
    for (k, q) in i.queues.into_iter().enumerate() {
        let iface = q
            .iface
            .or_else(|| i.iface.clone())
            .unwrap_or_else(|| "-".into());
        let queue = q.queue.unwrap_or(0);
        let Some(g) = groups
            .iter_mut()
            .find(|g| g.iface == iface && g.queue == queue)
        else {
            bail!(
                "queues[{k}]: no sensor is assigned to {iface} queue {queue}; give a sensor \
                 `iface = \"{iface}\"` and `queue = {queue}`, or remove the entry"
            );
        };
        if let Some(c) = q.cpu {
            g.cpu = Some(check_cpu(&format!("queues[{k}].cpu"), c)?);
        }
        if let Some(n) = q.umem_frames {
            g.umem_frames = check_umem(&format!("queues[{k}].umem_frames"), n)?;
        }
    }
    if let Some(c) = i.cpu {
        if groups.len() > 1 {
            bail!(
                "--cpu: {} capture threads are configured; pin them with --cpus LIST (one CPU each)",
                groups.len()
            );
        }
        groups[0].cpu = Some(check_cpu("--cpu", c)?);
    }
    if let Some(list) = i.cpus {
        if list.len() != groups.len() {
            bail!(
                "--cpus: {} CPUs given for {} capture threads; give exactly one per thread \
                 (order: {})",
                list.len(),
                groups.len(),
                groups
                    .iter()
                    .map(|g| format!("{}:{}", g.iface, g.queue))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for (g, c) in groups.iter_mut().zip(list) {
            g.cpu = Some(check_cpu("--cpus", c)?);
        }
    }
    Ok(Plan {
        backend,
        listen,
        max_subscribers,
        subscriber_queue,
        frame_queue,
        rcvbuf: i.rcvbuf,
        stall: i.stall,
        wait: i.wait.unwrap_or_default(),
        zenoh,
        dds,
        queues: groups,
    })
}

/// The DDS settings, or `None` when `dds` is off; `--dds-config` without it is refused.
fn dds_plan(i: &Inputs) -> Result<Option<DdsPlan>> {
    if !i.dds {
        if i.dds_config.is_some() {
            bail!("--dds-config: only meaningful with --dds (config file: dds = true)");
        }
        return Ok(None);
    }
    let ros_domain_id =
        lidarxdp::ros2_zenoh::domain_id(i.ros_domain_id, i.ros_domain_id_env.as_deref())
            .map_err(anyhow::Error::msg)?;
    if let Some(p) = &i.dds_config {
        lidarxdp::ros2_dds::config_uri(p)?;
    }
    let e = &i.ros2_env;
    let discovery = lidarxdp::ros2_dds::Discovery::from_env(
        e.discovery_range.as_deref(),
        e.static_peers.as_deref(),
        e.localhost_only.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    Ok(Some(DdsPlan {
        config: i.dds_config.clone(),
        cyclonedds_uri: e.cyclonedds_uri.clone().filter(|u| !u.trim().is_empty()),
        ros_domain_id,
        ros_distro: i.ros_distro.unwrap_or_default(),
        discovery,
    }))
}

/// The zenoh settings, or `None` when `zenoh` is off; a zenoh-only setting given without it
/// is refused.
fn zenoh_plan(i: &Inputs) -> Result<Option<ZenohPlan>> {
    if !i.zenoh {
        let given = [
            ("--zenoh-config", i.zenoh_config.is_some()),
            ("--zenoh-shm-mb", i.zenoh_shm_mb.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            bail!("{flag}: only meaningful with --zenoh (config file: zenoh = true)");
        }
        if !i.dds {
            let given = [
                ("--ros-domain-id", i.ros_domain_id.is_some()),
                ("--ros-distro", i.ros_distro.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                bail!(
                    "{flag}: only meaningful with --zenoh or --dds (config file: zenoh = true \
                     or dds = true)"
                );
            }
        }
        return Ok(None);
    }
    use lidarxdp::ros2_zenoh::{DEFAULT_SHM_MB, MAX_SHM_MB};
    let ros_domain_id =
        lidarxdp::ros2_zenoh::domain_id(i.ros_domain_id, i.ros_domain_id_env.as_deref())
            .map_err(anyhow::Error::msg)?;
    let shm_mb = i.zenoh_shm_mb.unwrap_or(DEFAULT_SHM_MB);
    if shm_mb > MAX_SHM_MB {
        bail!("--zenoh-shm-mb: {shm_mb} is out of range; valid 0..={MAX_SHM_MB} MiB");
    }
    let source = lidarxdp::ros2_zenoh::SessionConfig::resolve(
        i.zenoh_config.as_deref(),
        i.ros2_env.zenoh_session_config_uri.as_deref(),
        i.ros2_env.zenoh_config_override.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    if let Some(p) = &source.file
        && !p.is_file()
    {
        let from = if i.zenoh_config.is_some() {
            "--zenoh-config"
        } else {
            "ZENOH_SESSION_CONFIG_URI"
        };
        bail!("{from}: {} is not a file", p.display());
    }
    Ok(Some(ZenohPlan {
        config: source.file,
        overrides: source.overrides,
        ros_domain_id,
        ros_distro: i.ros_distro.unwrap_or_default(),
        shm_mb,
    }))
}

/// `--cpus LIST`: one CPU per capture thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// clap value parser of `--cpus`.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    parse_cpus(s).map(CpuList)
}

/// Parses `--cpus 0,2,3` (comma-separated CPU numbers).
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|c| {
            c.trim().parse::<usize>().map_err(|_| {
                format!("--cpus {s:?}: expected comma-separated CPU numbers, e.g. 0,1")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sensor(name: &str, port: u16) -> SensorSection {
        SensorSection {
            name: Some(name.into()),
            model: Some(SensorModel::Vlp16),
            calibration: Some("cal.yaml".into()),
            port: Some(port),
            ..SensorSection::default()
        }
    }

    fn inputs(sensors: Vec<SensorSection>) -> Inputs {
        Inputs {
            iface: Some("eth0".into()),
            sensors,
            ..Inputs::default()
        }
    }

    #[test]
    fn robosense_difop_port_is_on_by_default() {
        let rs = |name: &str, port: u16, extra: Option<u16>| SensorSection {
            model: Some(SensorModel::Helios),
            extra_port: extra,
            ..sensor(name, port)
        };
        let extra = |p: &Plan| p.sensors().map(|s| s.extra_port).collect::<Vec<_>>();
        let p = build(inputs(vec![rs("a", 6699, None), sensor("v", 2368)])).unwrap();
        assert_eq!(extra(&p), [Some(7788), None]);
        let p = build(inputs(vec![rs("a", 6699, Some(0))])).unwrap();
        assert_eq!(extra(&p), [None]);
        let p = build(inputs(vec![rs("a", 6699, Some(7789))])).unwrap();
        assert_eq!(extra(&p), [Some(7789)]);
        // Two RoboSense sensors from any source cannot both have the default DIFOP port.
        let e = build(inputs(vec![rs("a", 6699, None), rs("b", 6700, None)]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "sensors[1].extra_port: port 7788 from any source on eth0 is already sensors[0]'s; \
             each (port, source) names one sensor (7788 is RoboSense's default DIFOP port: give \
             each RoboSense sensor its own source or extra_port, or extra_port = 0 for none)"
        );
        // Velodyne's 0 is still refused.
        let e = build(inputs(vec![SensorSection {
            extra_port: Some(0),
            ..sensor("v", 2368)
        }]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("0 is not a valid UDP port"), "{e}");
    }

    #[test]
    fn sensors_group_into_queues_in_order() {
        let mut b = sensor("rear", 2369);
        b.queue = Some(1);
        let mut i = inputs(vec![sensor("front", 2368), b, sensor("left", 2370)]);
        i.queues = vec![QueueSection {
            iface: Some("eth0".into()),
            queue: Some(1),
            cpu: Some(0),
            umem_frames: Some(8192),
        }];
        let p = build(i).unwrap();
        assert_eq!(p.queues.len(), 2);
        assert_eq!((p.queues[0].queue, p.queues[0].sensors.len()), (0, 2));
        assert_eq!(p.queues[0].sensors[1].name, "left");
        assert_eq!(p.queues[0].sensors[1].id, 2);
        assert_eq!(p.queues[1].umem_frames, 8192);
        assert_eq!(p.queues[1].cpu, Some(0));
        assert_eq!(p.queues[0].umem_frames, 4096);
        let ids: Vec<u16> = p.sensors().map(|s| s.id).collect();
        assert_eq!(ids, [0, 1, 2]);
    }

    #[test]
    fn errors_name_the_field_value_and_range() {
        let e = |i: Inputs| build(i).unwrap_err().to_string();
        assert_eq!(
            e(inputs(vec![sensor("a", 2368), sensor("b", 0)])),
            "sensors[1].port: 0 is not a valid UDP port (valid range 1..=65535)"
        );
        assert!(
            e(inputs(vec![sensor("a", 2368), sensor("a", 2369)]))
                .starts_with("sensors[1].name: \"a\" is already the name of sensors[0]")
        );
        assert!(
            e(inputs(vec![sensor("a", 2368), sensor("b", 2368)])).starts_with(
                "sensors[1].port: port 2368 from any source on eth0 is already sensors[0]'s"
            )
        );
        let mut bad = sensor("a", 2368);
        bad.cut_angle = Some(361.0);
        assert_eq!(
            e(inputs(vec![bad])),
            "sensors[0].cut_angle: 361 is out of range; valid [0, 360] deg"
        );
        let mut bad = sensor("a", 2368);
        bad.queue = Some(64);
        assert!(
            e(inputs(vec![bad])).starts_with("sensors[0].queue: 64 is out of range; valid 0..=63")
        );
        let mut i = inputs(vec![sensor("a", 2368)]);
        i.max_subscribers = Some(0);
        assert_eq!(e(i), "--max-subscribers: 0 is out of range; valid 1..=1024");
        let mut i = inputs(vec![sensor("a", 2368)]);
        i.queues = vec![QueueSection {
            queue: Some(3),
            ..QueueSection::default()
        }];
        assert!(e(i).starts_with("queues[0]: no sensor is assigned to eth0 queue 3"));
        let mut i = inputs(vec![sensor("a", 2368)]);
        i.umem_frames = Some(100);
        assert_eq!(
            e(i),
            "--umem-frames: 100 is not a power of two in 64..=65536"
        );
        let mut s = sensor("a", 2368);
        s.return_mode = Some("quad".into());
        assert!(e(inputs(vec![s])).starts_with("sensors[0].return_mode: "));
        let mut s = sensor("a", 2368);
        s.min_range = Some(-1.0);
        assert_eq!(
            e(inputs(vec![s])),
            "sensors[0].min_range: -1 is out of range; valid [0, 100) m (the VLP16 datasheet \
             range is 0 to 100 m)"
        );
        let mut s = sensor("a", 2368);
        s.min_range = Some(150.0);
        assert_eq!(
            e(inputs(vec![s])),
            "sensors[0].min_range: 150 is out of range; valid [0, 100) m (the VLP16 datasheet \
             range is 0 to 100 m)"
        );
        let mut s = sensor("a", 2368);
        s.min_range = Some(150.0);
        s.max_range = Some(200.0);
        assert!(build(inputs(vec![s])).is_ok());
        let mut s = sensor("a", 2368);
        s.min_range = Some(5.0);
        s.max_range = Some(5.0);
        assert_eq!(
            e(inputs(vec![s])),
            "sensors[0].max_range: 5 is out of range; valid (min_range = 5, 1000] m \
             (the VLP16 datasheet range is 0 to 100 m)"
        );
        let mut i = inputs(vec![]);
        i.single = Some(SensorSection {
            max_range: Some(1001.0),
            ..sensor("a", 2368)
        });
        assert!(e(i).starts_with("--max-range: 1001 is out of range"));
    }

    #[test]
    fn ranges_default_to_the_datasheet_and_stamp_to_sensor() {
        let mut b = sensor("b", 2369);
        b.model = Some(SensorModel::PandarXt32);
        b.min_range = Some(0.5);
        b.stamp = Some(Stamp::Host);
        let p = build(inputs(vec![sensor("a", 2368), b])).unwrap();
        let s = &p.queues[0].sensors;
        assert_eq!(
            (s[0].min_range, s[0].max_range, s[0].stamp),
            (0.0, 100.0, Stamp::Sensor)
        );
        assert_eq!(
            (s[1].min_range, s[1].max_range, s[1].stamp),
            (0.5, 120.0, Stamp::Host)
        );
        let t: SensorSection =
            toml::from_str("min_range = 1.5\nmax_range = 80.0\nstamp = \"host\"").unwrap();
        assert_eq!(
            (t.min_range, t.max_range, t.stamp),
            (Some(1.5), Some(80.0), Some(Stamp::Host))
        );
        assert!(
            toml::from_str::<SensorSection>("stamp = \"gps\"")
                .unwrap_err()
                .to_string()
                .contains("unknown stamp 'gps'; valid: sensor, host")
        );
    }

    #[test]
    fn same_port_from_distinct_sources_is_two_sensors() {
        let mut a = sensor("a", 2368);
        a.source = Some(Ipv4Addr::new(192, 168, 1, 201));
        let mut b = sensor("b", 2368);
        b.source = Some(Ipv4Addr::new(192, 168, 1, 202));
        let p = build(inputs(vec![a, b, sensor("c", 2368)])).unwrap();
        assert_eq!(p.queues[0].sensors.len(), 3);
    }

    #[test]
    fn single_sensor_flags_and_sections_exclude_each_other() {
        let mut i = inputs(vec![sensor("a", 2368)]);
        i.single = Some(sensor("b", 2369));
        assert!(
            build(i)
                .unwrap_err()
                .to_string()
                .contains("exclude each other")
        );
        let mut i = inputs(vec![]);
        i.single = Some(SensorSection {
            model: Some(SensorModel::Vlp16),
            port: Some(0),
            calibration: Some("c".into()),
            ..SensorSection::default()
        });
        assert_eq!(
            build(i).unwrap_err().to_string(),
            "--port: 0 is not a valid UDP port (valid range 1..=65535)"
        );
    }

    #[test]
    fn zenoh_settings_are_checked_and_defaulted() {
        let zen = |mut i: Inputs| {
            i.zenoh = true;
            i
        };
        let e = |i: Inputs| build(i).unwrap_err().to_string();
        // Off: zenoh-only settings are refused, topics are not checked.
        let mut i = inputs(vec![sensor("front-left", 2368)]);
        i.ros_domain_id = Some(3);
        assert_eq!(
            e(i),
            "--ros-domain-id: only meaningful with --zenoh or --dds (config file: zenoh = true \
             or dds = true)"
        );
        let p = build(inputs(vec![sensor("front-left", 2368)])).unwrap();
        assert_eq!(p.zenoh, None);
        assert_eq!(p.queues[0].sensors[0].topic, "/lidar/front-left/points");
        // On: defaults.
        let p = build(zen(inputs(vec![sensor("front", 2368)]))).unwrap();
        assert_eq!(
            p.zenoh,
            Some(ZenohPlan {
                config: None,
                overrides: vec![],
                ros_domain_id: 0,
                ros_distro: Distro::Jazzy,
                shm_mb: 128,
            })
        );
        let s = &p.queues[0].sensors[0];
        assert_eq!(
            (s.topic.as_str(), s.frame_id.as_str()),
            ("/lidar/front/points", "front")
        );
        // The environment's ROS_DOMAIN_ID, unless the flag says otherwise; each checked.
        let mut i = zen(inputs(vec![sensor("front", 2368)]));
        i.ros_domain_id_env = Some("7".into());
        assert_eq!(build(i.clone()).unwrap().zenoh.unwrap().ros_domain_id, 7);
        i.ros_domain_id = Some(9);
        assert_eq!(build(i.clone()).unwrap().zenoh.unwrap().ros_domain_id, 9);
        i.ros_domain_id = Some(233);
        assert_eq!(
            e(i.clone()),
            "--ros-domain-id: 233 is out of range; valid 0..=232"
        );
        i.ros_domain_id = None;
        i.ros_domain_id_env = Some("x".into());
        assert_eq!(
            e(i),
            "ROS_DOMAIN_ID: \"x\" is not a number; valid 0..=232 (or pass --ros-domain-id)"
        );
        let mut i = zen(inputs(vec![sensor("front", 2368)]));
        i.zenoh_shm_mb = Some(4097);
        assert_eq!(
            e(i),
            "--zenoh-shm-mb: 4097 is out of range; valid 0..=4096 MiB"
        );
        // Topic rules, uniqueness, frame_id.
        assert!(
            e(zen(inputs(vec![sensor("front-left", 2368)])))
                .starts_with("sensors[0].topic = \"/lidar/front-left/points\": ")
        );
        let mut a = sensor("a", 2368);
        a.topic = Some("/lidar/points".into());
        let mut b = sensor("b", 2369);
        b.topic = Some("/lidar/points".into());
        assert_eq!(
            e(zen(inputs(vec![a, b]))),
            "sensors[1].topic: /lidar/points is already sensors[0]'s topic; topics must be unique"
        );
        let mut a = sensor("a", 2368);
        a.frame_id = Some(String::new());
        assert_eq!(
            e(zen(inputs(vec![a]))),
            "sensors[0].frame_id: \"\" must be 1..=255 bytes without NUL"
        );
    }

    #[test]
    fn cpus_need_one_per_thread() {
        let mut b = sensor("b", 2369);
        b.queue = Some(1);
        let mut i = inputs(vec![sensor("a", 2368), b]);
        i.cpus = Some(vec![0]);
        assert!(
            build(i)
                .unwrap_err()
                .to_string()
                .starts_with("--cpus: 1 CPUs given for 2 capture threads")
        );
        assert_eq!(parse_cpus("0, 1"), Ok(vec![0, 1]));
        assert!(parse_cpus("0,x").is_err());
    }

    #[test]
    fn socket_backends_put_every_sensor_on_one_thread() {
        let mut b = sensor("b", 2369);
        b.queue = Some(1);
        let mut i = inputs(vec![sensor("a", 2368), b]);
        i.backend = Some(Backend::Recvmmsg);
        let p = build(i).unwrap();
        assert_eq!(p.queues.len(), 1);
        assert_eq!(p.queues[0].iface, "-");
        assert_eq!(p.queues[0].sensors.len(), 2);
    }

    /// `nebula_compat` is per sensor, default false, read from the TOML key of that name.
    #[test]
    fn nebula_compat_is_a_per_sensor_key() {
        let mut a: SensorSection = toml::from_str(
            "name = \"a\"\nmodel = \"vlp16\"\ncalibration = \"c.yaml\"\nport = 2368\n\
             nebula_compat = true\n",
        )
        .unwrap();
        assert_eq!(a.nebula_compat, Some(true));
        a.port = Some(2368);
        let p = build(inputs(vec![a, sensor("b", 2369)])).unwrap();
        let flags: Vec<bool> = p.sensors().map(|s| s.nebula_compat).collect();
        assert_eq!(flags, [true, false]);
        assert!(toml::from_str::<SensorSection>("nebula_compat = 1").is_err());
    }
}
