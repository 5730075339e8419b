//! The validated plan: [`build`] resolves the merged [`Settings`] into a [`Plan`] with every
//! default filled in, checking the rules that span fields (a sensor's range gate against its
//! model, unique names, ports and topics, the capture threads and their CPUs, settings that
//! need another). What `check-config` prints, section by section.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
};

use anyhow::{Result, anyhow, bail};
use lidarxdp::{
    capture::{Backend, RcvBuf, RecordConfig, StallSchedule, WaitMode},
    loader::AttachMode,
};
use lidarxdp_core::ros2::Distro;
use lidarxdp_core::sensor::{ReturnMode, SensorModel, Stamp};
use serde::Serialize;

use super::sections::{SensorSettings, Settings};
use super::valid::{Degrees, Fov, FovSetting, RangeGate, Ranged, SourceAddr, UmemFrames};

/// A validated sensor: its settings with every default resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SensorPlan {
    /// Index in the configuration (frames' `sensor_id`, the XDP filter value).
    pub id: u16,
    /// Unique name, 1..=64 bytes.
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
    /// Source address (IPv4, IPv6, link-local IPv6 with its interface), if restricted.
    pub source: Option<SourceAddr>,
    /// Cut angle, degrees [0, 360].
    pub cut_angle: Degrees,
    /// Field of view `(min, max)`, degrees.
    pub fov: Option<Fov>,
    /// Expected return mode.
    #[serde(serialize_with = "ser_return_mode")]
    pub return_mode: Option<ReturnMode>,
    /// Hesai CRC check skipped.
    pub hesai_skip_crc: bool,
    /// Range gate, metres: points at `min_range` or closer and at `max_range` or farther are
    /// dropped (printed as those two keys).
    #[serde(flatten)]
    pub range: RangeGate,
    /// Clock of the frames' `start_ns`.
    #[serde(serialize_with = "ser_display")]
    pub stamp: Stamp,
    /// Velodyne decoded with Nebula's rules (`nebula_compat`).
    pub nebula_compat: bool,
    /// The layout of its points (`point_type`, default `autoware`).
    #[serde(serialize_with = "ser_display")]
    pub point_type: lidarxdp_core::layout::PointType,
    /// ROS 2 topic over zenoh and DDS, a valid fully qualified name when either is on.
    pub topic: String,
    /// `header.frame_id`, 1..=255 bytes without NUL.
    pub frame_id: String,
    /// Ouster: the ROS 2 topic of its IMU (`sensor_msgs/msg/Imu`, default
    /// `/lidar/<name>/imu`); `None` for the models without an IMU stream.
    pub imu_topic: Option<String>,
    /// `header.frame_id` of its IMU messages (default `<frame_id>_imu`).
    pub imu_frame_id: String,
    /// The levels of its `/diagnostics` status.
    #[serde(skip)]
    pub health: lidarxdp_core::health::Thresholds,
    /// The sensor's settings as given (flags or its `[[sensors]]` table); the fields above
    /// are the ones resolved with other settings, the others are read from here where they
    /// are used (`check-config` prints them as `given`).
    #[serde(rename = "given")]
    pub settings: SensorSettings,
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

/// `[capture]`, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapturePlan {
    /// Backend.
    #[serde(serialize_with = "ser_backend")]
    pub backend: Backend,
    /// XDP attach mode.
    #[serde(serialize_with = "ser_debug_lower")]
    pub xdp_mode: AttachMode,
    /// XDP object file instead of the embedded one.
    pub bpf_object: Option<PathBuf>,
    /// How the capture threads wait when idle (xdp and recvmmsg backends).
    #[serde(serialize_with = "ser_display")]
    pub wait: WaitMode,
    /// Frames between capture threads and the publisher, 1..=1024.
    pub frame_queue: usize,
    /// Address the socket backends bind their UDP ports on.
    pub bind: Ipv4Addr,
    /// Socket backends' receive buffer.
    #[serde(serialize_with = "ser_opt_debug")]
    pub rcvbuf: Option<RcvBuf>,
    /// Injected stalls (benchmarks).
    #[serde(serialize_with = "ser_opt_debug")]
    pub stall: Option<StallSchedule>,
}

/// `[process]`, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessPlan {
    /// Account to switch to once set up, looked up by [`super::check_process`].
    pub user: Option<String>,
    /// Keep the start-up capabilities (tests and debugging only).
    pub keep_caps: bool,
    /// Where every counter is written as JSON at exit.
    pub stats_json: Option<PathBuf>,
    /// Resident-memory growth above which `/diagnostics` warns, MiB per hour, 0..=65536
    /// (0: never; default [`DEFAULT_MEMORY_GROWTH_WARN_MB_PER_HOUR`]).
    pub memory_growth_warn_mb_per_hour: u64,
}

/// Default of `[process] memory_growth_warn_mb_per_hour`, MiB per hour: a daemon whose
/// buffers are all pooled grows by nothing once warm; 16 MiB/h is 2.7 GiB a week.
pub const DEFAULT_MEMORY_GROWTH_WARN_MB_PER_HOUR: u64 = 16;

/// `[tcp]`, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TcpPlan {
    /// Publisher address, loopback.
    pub listen: SocketAddr,
    /// Subscriber limit, 1..=1024.
    pub max_subscribers: usize,
    /// Frames per sensor in a subscriber's queue, 1..=64.
    pub subscriber_queue: usize,
}

/// Validated ROS 2 over zenoh settings (`[zenoh]`).
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

/// Validated ROS 2 over DDS settings (`[dds]`).
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

/// `[recording]`, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecordingPlan {
    /// The first part's file.
    pub pcap: PathBuf,
    /// Split size, MB (10^6 bytes).
    pub split_size_mb: Option<u64>,
    /// Split duration, s.
    pub split_duration_s: Option<u64>,
    /// The checked recorder configuration.
    #[serde(skip)]
    pub config: RecordConfig,
}

/// The sinks, resolved: each `None` when off (`check-config` prints `"off"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SinksPlan {
    /// The TCP publisher (always on).
    pub tcp: TcpPlan,
    /// ROS 2 over zenoh.
    #[serde(serialize_with = "ser_or_off")]
    pub zenoh: Option<ZenohPlan>,
    /// ROS 2 over DDS.
    #[serde(serialize_with = "ser_or_off")]
    pub dds: Option<DdsPlan>,
    /// The Foxglove WebSocket server's loopback address.
    #[serde(serialize_with = "ser_or_off")]
    pub foxglove: Option<SocketAddr>,
    /// The live view's loopback address.
    #[serde(serialize_with = "ser_or_off")]
    pub view: Option<SocketAddr>,
    /// The Prometheus endpoint's loopback address.
    #[serde(serialize_with = "ser_or_off")]
    pub metrics: Option<SocketAddr>,
    /// The packet recording.
    #[serde(serialize_with = "ser_or_off")]
    pub recording: Option<RecordingPlan>,
}

/// A sink's settings, or `"off"`: `check-config` names every sink, on or not.
fn ser_or_off<S: serde::Serializer, T: Serialize>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => v.serialize(s),
        None => s.serialize_str("off"),
    }
}

/// The effective configuration: every section resolved (what `check-config` prints).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// `[capture]`.
    pub capture: CapturePlan,
    /// `[process]`.
    pub process: ProcessPlan,
    /// The sinks (`[tcp]`, `[zenoh]`, `[dds]`, `[foxglove]`, `[view]`, `[metrics]`,
    /// `[recording]`).
    pub sinks: SinksPlan,
    /// Capture threads, each with its sensors.
    pub queues: Vec<QueuePlan>,
}

impl Plan {
    /// Every sensor, in id order.
    pub fn sensors(&self) -> impl Iterator<Item = &SensorPlan> {
        let mut all: Vec<&SensorPlan> = self.queues.iter().flat_map(|q| &q.sensors).collect();
        all.sort_by_key(|s| s.id);
        all.into_iter()
    }
}

/// The environment variables the ROS 2 sinks honour, read once at start-up.
#[derive(Clone, Debug, Default)]
#[cfg_attr(not(all(feature = "dds", feature = "zenoh")), allow(dead_code))]
pub struct Ros2Env {
    /// `ROS_DOMAIN_ID`.
    pub ros_domain_id: Option<String>,
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
            ros_domain_id: v("ROS_DOMAIN_ID"),
            zenoh_session_config_uri: v("ZENOH_SESSION_CONFIG_URI"),
            zenoh_config_override: v("ZENOH_CONFIG_OVERRIDE"),
            cyclonedds_uri: v("CYCLONEDDS_URI"),
            discovery_range: v("ROS_AUTOMATIC_DISCOVERY_RANGE"),
            static_peers: v("ROS_STATIC_PEERS"),
            localhost_only: v("ROS_LOCALHOST_ONLY"),
        }
    }
}

/// Refuses a listener off loopback: none of lidarxdp's listeners (TCP publisher, metrics,
/// live view, Foxglove) authenticates its clients. Across machines, frames go over zenoh
/// (TLS, docs/deploy.md) or DDS; the others are reached through an SSH tunnel.
fn loopback(flag: &str, key: &str, addr: SocketAddr) -> Result<SocketAddr> {
    if addr.ip().is_loopback() {
        return Ok(addr);
    }
    bail!(
        "--{flag} ({key}): {addr} is not a loopback address; it has no authentication, so it \
         listens on loopback only (valid: 127.0.0.0/8 or [::1]). From another machine use an \
         SSH tunnel (ssh -L PORT:{addr_lo}), or ROS 2 over zenoh with TLS or DDS for the frames",
        addr_lo = SocketAddr::from(([127, 0, 0, 1], addr.port()))
    )
}

/// The refusal of a setting whose sink this binary was built without (`cargo xtask demo`
/// builds the daemon without its optional sinks).
#[allow(dead_code)] // Used only when a sink's feature is off.
fn without_feature(flag: &str, feature: &str) -> String {
    format!(
        "{flag}: this lidarxdp was built without the `{feature}` feature (the demo's build); \
         build the full daemon with `cargo xtask build`"
    )
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

fn get<const A: u64, const B: u64>(v: Option<Ranged<A, B>>, default: u64) -> u64 {
    v.map_or(default, Ranged::get)
}

/// Validates the merged settings into a [`Plan`]: resolves every default and checks the
/// rules between fields; does not read calibration files (the caller builds the pipelines,
/// which does) nor look users up.
///
/// # Errors
/// The first invalid field, named as in the file (`sensors[1].port`) or as the flag
/// (`--max-subscribers`), with its value and the valid range.
pub fn build(s: Settings, cpus: Option<Vec<usize>>, env: &Ros2Env) -> Result<Plan> {
    let c = &s.capture;
    let backend = c.backend.unwrap_or_default();
    if backend != Backend::Xdp && c.xdp_mode.is_some() {
        bail!(
            "--xdp-mode (capture.xdp_mode): only meaningful with --backend xdp (not {})",
            backend.name()
        );
    }
    if backend == Backend::Xdp && c.rcvbuf.is_some() {
        bail!(
            "--rcvbuf (capture.rcvbuf): only meaningful with the socket backends (socket, \
             recvmmsg, uring)"
        );
    }
    let capture = CapturePlan {
        backend,
        xdp_mode: c.xdp_mode.unwrap_or(AttachMode::Auto),
        bpf_object: c.bpf_object.clone(),
        wait: c.wait.unwrap_or_default(),
        frame_queue: get(c.frame_queue, 16) as usize,
        bind: c.bind.unwrap_or(Ipv4Addr::UNSPECIFIED),
        rcvbuf: c.rcvbuf,
        stall: c.stall,
    };
    if let Some(p) = &capture.bpf_object
        && !p.is_file()
    {
        bail!(
            "--bpf-object (capture.bpf_object): {} is not a file",
            p.display()
        );
    }
    let process = ProcessPlan {
        user: s.process.user.clone(),
        keep_caps: s.process.keep_caps.unwrap_or(false),
        stats_json: s.process.stats_json.clone(),
        memory_growth_warn_mb_per_hour: get(
            s.process.memory_growth_warn_mb_per_hour,
            DEFAULT_MEMORY_GROWTH_WARN_MB_PER_HOUR,
        ),
    };
    if process.user.is_some() && process.keep_caps {
        bail!("--user and --keep-caps exclude each other");
    }
    let sinks = sinks_plan(&s, &capture, env)?;
    let queues = queues_plan(&s, backend, cpus, ros_on(&sinks))?;
    Ok(Plan {
        capture,
        process,
        sinks,
        queues,
    })
}

fn ros_on(sinks: &SinksPlan) -> bool {
    sinks.zenoh.is_some() || sinks.dds.is_some()
}

/// The sinks' sections, resolved.
fn sinks_plan(s: &Settings, capture: &CapturePlan, env: &Ros2Env) -> Result<SinksPlan> {
    let tcp = TcpPlan {
        listen: loopback(
            "listen",
            "tcp.listen",
            s.tcp
                .listen
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7510))),
        )?,
        max_subscribers: get(s.tcp.max_subscribers, 16) as usize,
        subscriber_queue: get(s.tcp.subscriber_queue, 3) as usize,
    };
    let zenoh = zenoh_plan(s, env)?;
    let dds = dds_plan(s, env)?;
    let foxglove = s
        .foxglove
        .foxglove
        .map(|a| loopback("foxglove", "foxglove.listen", a))
        .transpose()?;
    let view = s
        .view
        .view
        .map(|a| loopback("view", "view.listen", a))
        .transpose()?;
    if view.is_some() {
        #[cfg(feature = "view")]
        lidarxdp::view::assets::check()?;
        #[cfg(not(feature = "view"))]
        bail!(without_feature("--view (view.listen)", "view"));
    }
    #[cfg(not(feature = "foxglove"))]
    if foxglove.is_some() {
        bail!(without_feature("--foxglove (foxglove.listen)", "foxglove"));
    }
    let metrics = s
        .metrics
        .metrics
        .map(|a| loopback("metrics", "metrics.listen", a))
        .transpose()?;
    let r = &s.recording;
    let recording = match r.record_pcap.clone() {
        None => {
            if r.record_split_size.is_some() || r.record_split_duration.is_some() {
                bail!(
                    "--record-split-size and --record-split-duration (recording.split_size_mb, \
                     recording.split_duration_s) need --record-pcap FILE (recording.pcap)"
                );
            }
            None
        }
        Some(pcap) => {
            let size = r.record_split_size.map(Ranged::get);
            let duration = r.record_split_duration.map(Ranged::get);
            let config = RecordConfig::new(pcap.clone(), size, duration, capture.bind.octets())
                .map_err(anyhow::Error::msg)?;
            Some(RecordingPlan {
                pcap,
                split_size_mb: size,
                split_duration_s: duration,
                config,
            })
        }
    };
    Ok(SinksPlan {
        tcp,
        zenoh,
        dds,
        foxglove,
        view,
        metrics,
        recording,
    })
}

/// The ROS domain id: the flag or `[ros2] domain_id`, else `$ROS_DOMAIN_ID`, else 0
/// ([`lidarxdp_core::ros2::domain_id`], the rule `subscribe` follows too).
#[cfg(any(feature = "zenoh", feature = "dds"))]
fn domain_id(s: &Settings, env: &Ros2Env) -> Result<u32> {
    let flag = s.ros2.ros_domain_id.map(|d| d.get() as u32);
    Ok(lidarxdp_core::ros2::domain_id(
        flag,
        env.ros_domain_id.as_deref(),
    )?)
}

/// The DDS settings, or `None` when `dds` is off; `--dds-config` without it is refused.
fn dds_plan(s: &Settings, env: &Ros2Env) -> Result<Option<DdsPlan>> {
    if !s.dds.dds.unwrap_or(false) {
        if s.dds.dds_config.is_some() {
            bail!("--dds-config (dds.config): only meaningful with --dds (dds.enabled = true)");
        }
        return Ok(None);
    }
    #[cfg(not(feature = "dds"))]
    {
        let _ = env;
        bail!(without_feature("--dds (dds.enabled)", "dds"))
    }
    #[cfg(feature = "dds")]
    {
        if let Some(p) = &s.dds.dds_config {
            lidarxdp::ros2_dds::config_uri(p)?;
        }
        let discovery = lidarxdp::ros2_dds::Discovery::from_env(
            env.discovery_range.as_deref(),
            env.static_peers.as_deref(),
            env.localhost_only.as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        Ok(Some(DdsPlan {
            config: s.dds.dds_config.clone(),
            cyclonedds_uri: env.cyclonedds_uri.clone().filter(|u| !u.trim().is_empty()),
            ros_domain_id: domain_id(s, env)?,
            ros_distro: s.ros2.ros_distro.unwrap_or_default(),
            discovery,
        }))
    }
}

/// The zenoh settings, or `None` when `zenoh` is off; a zenoh-only setting given without it
/// is refused, and a `[ros2]` setting without zenoh or DDS.
fn zenoh_plan(s: &Settings, env: &Ros2Env) -> Result<Option<ZenohPlan>> {
    let z = &s.zenoh;
    if !z.zenoh.unwrap_or(false) {
        let given = [
            ("--zenoh-config (zenoh.config)", z.zenoh_config.is_some()),
            ("--zenoh-shm-mb (zenoh.shm_mb)", z.zenoh_shm_mb.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            bail!("{flag}: only meaningful with --zenoh (zenoh.enabled = true)");
        }
        if !s.dds.dds.unwrap_or(false) {
            let given = [
                (
                    "--ros-domain-id (ros2.domain_id)",
                    s.ros2.ros_domain_id.is_some(),
                ),
                ("--ros-distro (ros2.distro)", s.ros2.ros_distro.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                bail!(
                    "{flag}: only meaningful with --zenoh or --dds (zenoh.enabled = true or \
                     dds.enabled = true)"
                );
            }
        }
        return Ok(None);
    }
    #[cfg(not(feature = "zenoh"))]
    {
        let _ = env;
        bail!(without_feature("--zenoh (zenoh.enabled)", "zenoh"))
    }
    #[cfg(feature = "zenoh")]
    {
        let source = lidarxdp::ros2_zenoh::SessionConfig::resolve(
            z.zenoh_config.as_deref(),
            env.zenoh_session_config_uri.as_deref(),
            env.zenoh_config_override.as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        if let Some(p) = &source.file
            && !p.is_file()
        {
            let from = if z.zenoh_config.is_some() {
                "--zenoh-config (zenoh.config)"
            } else {
                "ZENOH_SESSION_CONFIG_URI"
            };
            bail!("{from}: {} is not a file", p.display());
        }
        Ok(Some(ZenohPlan {
            config: source.file,
            overrides: source.overrides,
            ros_domain_id: domain_id(s, env)?,
            ros_distro: s.ros2.ros_distro.unwrap_or_default(),
            shm_mb: get(
                z.zenoh_shm_mb,
                u64::from(lidarxdp::ros2_zenoh::DEFAULT_SHM_MB),
            ) as u32,
        }))
    }
}

/// The sensors, grouped into capture threads (one per (interface, queue), in order of first
/// appearance), with `[[queues]]` and `--cpu`/`--cpus` applied.
fn queues_plan(
    s: &Settings,
    backend: Backend,
    cpus: Option<Vec<usize>>,
    ros: bool,
) -> Result<Vec<QueuePlan>> {
    use super::sections::Section;
    let single = !s.sensor.is_unset();
    if single && !s.sensors.is_empty() {
        bail!(
            "sensor flags (--sensor, --port, --calibration, ...) and [[sensors]] in the config \
             file exclude each other: describe every sensor in the file"
        );
    }
    let sections: Vec<(Field, &SensorSettings)> = if single {
        vec![(Field::Flag, &s.sensor)]
    } else if s.sensors.is_empty() {
        bail!("--sensor is required (or [[sensors]] in the config file), e.g. --sensor vlp16")
    } else {
        s.sensors
            .iter()
            .enumerate()
            .map(|(k, x)| (Field::Table(k), x))
            .collect()
    };
    let default_umem = s.capture.umem_frames.unwrap_or(UmemFrames::DEFAULT).get();
    let mut names = BTreeMap::new();
    let mut topics: BTreeMap<String, String> = BTreeMap::new();
    let mut keys: BTreeMap<(String, u16, Option<IpAddr>), String> = BTreeMap::new();
    let mut groups: Vec<QueuePlan> = Vec::new();
    for (id, (f, x)) in sections.into_iter().enumerate() {
        let id = u16::try_from(id).map_err(|_| anyhow!("more than 65535 sensors"))?;
        let (plan, iface, queue) = sensor_plan(id, f, x, s, backend, ros)?;
        let prefix = f.name("", "");
        if let Some(other) = names.insert(plan.name.clone(), prefix.clone()) {
            bail!(
                "{}: {:?} is already the name of {other}; names must be unique",
                f.name("name", "name"),
                plan.name
            );
        }
        if ros && let Some(other) = topics.insert(plan.topic.clone(), prefix.clone()) {
            bail!(
                "{}: {} is already {other}'s topic; topics must be unique",
                f.name("topic", "topic"),
                plan.topic
            );
        }
        let defaulted_extra = x.extra_port.is_none() && plan.extra_port.is_some();
        for p in std::iter::once(plan.port).chain(plan.extra_port) {
            let source = plan.source.as_ref().map(SourceAddr::ip);
            if let Some(other) = keys.insert((iface.clone(), p, source), prefix.clone()) {
                let is_extra = Some(p) == plan.extra_port && p != plan.port;
                bail!(
                    "{}: port {p} from {} on {iface} is already {other}'s; each (port, source) \
                     names one sensor{}",
                    if is_extra {
                        f.name("extra_port", "extra-port")
                    } else {
                        f.name("port", "port")
                    },
                    source.map_or("any source".to_owned(), |ip| ip.to_string()),
                    if is_extra && defaulted_extra {
                        " (it is the model's default second port: RoboSense DIFOP 7788, \
                         Velodyne position 8308, Ouster IMU 7503; give each sensor its own \
                         source or extra_port, or extra_port = 0 for none)"
                    } else {
                        ""
                    }
                );
            }
        }
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
    for (k, q) in s.queues.iter().enumerate() {
        let iface = q
            .iface
            .clone()
            .or_else(|| s.capture.iface.clone())
            .unwrap_or_else(|| "-".into());
        let queue = q.queue.map_or(0, |v| v.get() as u32);
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
            g.umem_frames = n.get();
        }
    }
    if let Some(c) = s.capture.cpu {
        if groups.len() > 1 {
            bail!(
                "--cpu (capture.cpu): {} capture threads are configured; pin them with --cpus \
                 LIST (one CPU each) or `cpu` in [[queues]]",
                groups.len()
            );
        }
        groups[0].cpu = Some(check_cpu("--cpu (capture.cpu)", c)?);
    }
    if let Some(list) = cpus {
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
    Ok(groups)
}

/// Where a sensor's settings came from, for naming a field in a message.
#[derive(Clone, Copy)]
enum Field {
    /// The single-sensor flags.
    Flag,
    /// `[[sensors]]` table `k`.
    Table(usize),
}

impl Field {
    /// The field as its source names it: `--flag` or `sensors[k].key` (`sensors[k]` with an
    /// empty key, `--sensor` with an empty flag).
    fn name(self, key: &str, flag: &str) -> String {
        match (self, key.is_empty()) {
            (Field::Flag, true) => "--sensor".into(),
            (Field::Flag, false) => format!("--{flag}"),
            (Field::Table(k), true) => format!("sensors[{k}]"),
            (Field::Table(k), false) => format!("sensors[{k}].{key}"),
        }
    }
}

/// One sensor's settings with every default resolved, and the (interface, queue) it is
/// captured on.
fn sensor_plan(
    id: u16,
    f: Field,
    x: &SensorSettings,
    s: &Settings,
    backend: Backend,
    ros: bool,
) -> Result<(SensorPlan, String, u32)> {
    let Some(model) = x.model else {
        bail!("{}: required, e.g. vlp16", f.name("model", "sensor"));
    };
    let Some(calibration) = x.calibration.clone() else {
        bail!(
            "{}: required (the model's calibration or metadata file)",
            f.name("calibration", "calibration")
        );
    };
    let port = x.port.map_or(model.default_data_port(), |p| p.get() as u16);
    // RoboSense's DIFOP port is on by default, and Velodyne's position and Ouster's IMU port
    // beside their default data port; `extra_port = 0` turns a default off.
    let default_extra = model.default_extra_port().or(model
        .default_health_port()
        .filter(|_| port == model.default_data_port()));
    let extra_port = match x.extra_port.map(|p| p.get() as u16).or(default_extra) {
        Some(0) if default_extra.is_some() => None,
        Some(0) => bail!(
            "{}: 0 is out of range for {} on data port {port}; valid 1..=65535 (0 turns off \
             only a default second port: RoboSense's DIFOP 7788, Velodyne's position 8308 \
             and Ouster's IMU 7503 beside their default data port)",
            f.name("extra_port", "extra-port"),
            model.name()
        ),
        Some(p) if p == port => bail!(
            "{}: {p} equals the data port; give a different port",
            f.name("extra_port", "extra-port")
        ),
        p => p,
    };
    let name = x.name.clone().unwrap_or_else(|| model.name().to_owned());
    if name.is_empty() || name.len() > 64 {
        bail!("{}: {name:?} must be 1..=64 bytes", f.name("name", "name"));
    }
    let iface = match (backend, x.iface.clone().or_else(|| s.capture.iface.clone())) {
        (Backend::Xdp, Some(i)) => i,
        (Backend::Xdp, None) => bail!(
            "{}: required with --backend xdp (or capture.iface / --iface)",
            f.name("iface", "iface")
        ),
        (_, _) => "-".to_owned(),
    };
    if let Some(src) = &x.source {
        if src.ip().is_ipv6() && backend != Backend::Xdp {
            bail!(
                "{}: {src} is an IPv6 source; the {} backend binds IPv4 sockets only; valid: \
                 an IPv4 source, or --backend xdp",
                f.name("source", "source"),
                backend.name()
            );
        }
        if let Some(zone) = src.zone()
            && zone != iface
        {
            bail!(
                "{}: {src} names interface {zone}, but the sensor's packets arrive on {iface}; \
                 valid: {}%{iface}, or the address without a zone",
                f.name("source", "source"),
                src.ip()
            );
        }
    }
    let queue = match backend {
        Backend::Xdp => x.queue.map_or(0, |q| q.get() as u32),
        _ => 0,
    };
    let return_mode = match &x.return_mode {
        Some(r) => Some(
            r.parse::<ReturnMode>()
                .map_err(|e| anyhow!("{}: {e}", f.name("return_mode", "return-mode")))?,
        ),
        None => None,
    };
    let range = model
        .range_gate(
            x.min_range,
            x.max_range,
            (
                &f.name("min_range", "min-range"),
                &f.name("max_range", "max-range"),
            ),
        )
        .map_err(anyhow::Error::msg)?;
    let topic = x
        .topic
        .clone()
        .unwrap_or_else(|| lidarxdp_core::ros2::default_topic(&name));
    if ros {
        lidarxdp_core::ros2::validate_topic(&f.name("topic", "topic"), &topic)
            .map_err(|e| anyhow!("{e} (the default is /lidar/<sensor name>/points)"))?;
    }
    let frame_id = x
        .frame_id
        .clone()
        .unwrap_or_else(|| lidarxdp_core::ros2::default_frame_id(&name));
    if frame_id.is_empty() || frame_id.len() > 255 || frame_id.contains('\0') {
        bail!(
            "{}: {frame_id:?} must be 1..=255 bytes without NUL",
            f.name("frame_id", "frame-id")
        );
    }
    let imu_topic = match model.family() {
        lidarxdp_core::vendor::Family::Ouster => {
            let t = x
                .imu_topic
                .clone()
                .unwrap_or_else(|| lidarxdp_core::ros2::default_imu_topic(&name));
            if ros {
                lidarxdp_core::ros2::validate_topic(&f.name("imu_topic", "imu-topic"), &t)
                    .map_err(|e| anyhow!("{e} (the default is /lidar/<sensor name>/imu)"))?;
            }
            Some(t)
        }
        _ => None,
    };
    let imu_frame_id = x
        .imu_frame_id
        .clone()
        .unwrap_or_else(|| format!("{frame_id}_imu"));
    if imu_frame_id.is_empty() || imu_frame_id.len() > 255 || imu_frame_id.contains('\0') {
        bail!(
            "{}: {imu_frame_id:?} must be 1..=255 bytes without NUL",
            f.name("imu_frame_id", "imu-frame-id")
        );
    }
    let defaults = lidarxdp_core::health::Thresholds::default();
    let health = lidarxdp_core::health::Thresholds {
        loss_warn_percent: x
            .health_loss_warn
            .map_or(defaults.loss_warn_percent, |v| v.get()),
        loss_error_percent: x
            .health_loss_error
            .map_or(defaults.loss_error_percent, |v| v.get()),
        silence_error_ns: x
            .health_silence_ms
            .map_or(defaults.silence_error_ns, |v| v.get() * 1_000_000),
        offset_warn_ns: x
            .health_offset_ms
            .map_or(defaults.offset_warn_ns, |v| v.get() * 1_000_000),
    };
    if health.loss_error_percent < health.loss_warn_percent {
        bail!(
            "{}: {} is below {} = {}; the ERROR level must be at or above the WARN level",
            f.name("health_loss_error", "health-loss-error"),
            health.loss_error_percent,
            f.name("health_loss_warn", "health-loss-warn"),
            health.loss_warn_percent
        );
    }
    let plan = SensorPlan {
        id,
        name,
        model,
        calibration,
        port,
        extra_port,
        source: x.source.clone(),
        cut_angle: x.cut_angle.unwrap_or_default(),
        fov: x.fov.and_then(FovSetting::fov),
        return_mode,
        hesai_skip_crc: x.hesai_skip_crc.unwrap_or(false),
        range,
        stamp: x.stamp.unwrap_or_default(),
        nebula_compat: x.nebula_compat.unwrap_or(false),
        point_type: x.point_type.unwrap_or_default(),
        topic,
        frame_id,
        imu_topic,
        imu_frame_id,
        health,
        settings: x.clone(),
    };
    Ok((plan, iface, queue))
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

fn ser_backend<S: serde::Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(b.name())
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn ser_debug_lower<S: serde::Serializer, T: std::fmt::Debug>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:?}").to_lowercase())
}

fn ser_opt_debug<S: serde::Serializer, T: std::fmt::Debug>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&format!("{v:?}")),
        None => s.serialize_none(),
    }
}
