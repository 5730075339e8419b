//! `lidarxdp run`: its flags, the configuration file they merge over, and the checks that
//! refuse a bad setting before anything is touched; the daemon itself is
//! [`crate::daemon`].

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
};

use anyhow::{Context, Result, bail};
use lidarxdp::{
    capture::{Backend, RcvBuf, StallSchedule, WaitMode},
    loader::AttachMode,
};
use lidarxdp_core::sensor::{SensorModel, Stamp};
use serde::Deserialize;

use crate::daemon::config::{self, Inputs, Plan, SensorSection};

/// `lidarxdp run` arguments. Every flag can also come from `--config FILE` (TOML, same names
/// with underscores); flags given on the command line win.
#[derive(clap::Args, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// TOML file with any of these settings except `config` and `cpus` (use `cpu` in
    /// `[[queues]]`), plus `[[sensors]]` and `[[queues]]` tables (e.g. `iface = "eth0"`);
    /// relative paths in it are relative to the file. Validate it with `check-config`.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Interface to attach the XDP program to and capture on (required by `--backend xdp`,
    /// ignored by the socket backends).
    #[arg(long)]
    iface: Option<String>,
    /// How packets reach the decoder: `xdp` (AF_XDP, the product) or one of the socket
    /// baselines it is benchmarked against (`socket`, `recvmmsg`, `uring`); default xdp.
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Socket backends: address the UDP sockets bind (default 0.0.0.0).
    #[arg(long, value_name = "IP")]
    bind: Option<Ipv4Addr>,
    /// Socket backends: receive buffer, `default`, `max` (net.core.rmem_max) or bytes in
    /// 1..=1073741824 (default: `default` for socket, `max` for recvmmsg and uring).
    #[arg(long, value_name = "default|max|BYTES")]
    rcvbuf: Option<RcvBuf>,
    /// Benchmarks: pause the decoder thread MS milliseconds every EVERY_MS milliseconds
    /// (`MS:EVERY_MS`, 1 <= MS < EVERY_MS <= 3600000), to measure stall tolerance.
    #[arg(long, value_name = "MS:EVERY_MS")]
    #[serde(default, deserialize_with = "de_stall")]
    stall: Option<StallSchedule>,
    /// How the capture thread waits when no packet is ready (xdp and recvmmsg backends):
    /// `poll` (wake on every packet), `minwait:USEC` (io_uring minimum wait), `paced:USEC`
    /// (after packets, sleep USEC before draining again) or `busypoll:USEC` (NAPI busy poll);
    /// USEC in 10..=1000. Default `paced:1000` (docs/benchmarks.md, "Wake-ups").
    #[arg(long, value_name = "MODE")]
    #[serde(default, deserialize_with = "de_wait")]
    wait: Option<WaitMode>,
    /// RX queue of the interface to bind the AF_XDP socket to (default 0).
    #[arg(long)]
    queue: Option<u32>,
    /// Sensor model, e.g. `vlp16`.
    #[arg(long)]
    sensor: Option<SensorModel>,
    /// Name subscribers choose the sensor by (default: the model name, e.g. `VLP16`).
    #[arg(long)]
    name: Option<String>,
    /// UDP destination port of the sensor's data packets. Default: the model's factory port,
    /// Velodyne 2368, Hesai 2368, Ouster 7502 (lidar data), RoboSense 6699 (MSOP).
    #[arg(long)]
    port: Option<u16>,
    /// A second UDP port of the same sensor, decoded by the same pipeline. Default: RoboSense's
    /// DIFOP 7788 (whose angle table then replaces the CSV; 0 = none), none for the others.
    #[arg(long)]
    extra_port: Option<u16>,
    /// IPv4 source address of the sensor (default: any source).
    #[arg(long)]
    source: Option<Ipv4Addr>,
    /// Calibration file: Velodyne ros-drivers/Nebula YAML; Hesai angle-correction CSV (AT128:
    /// binary `.dat`); Ouster sensor metadata JSON; RoboSense angle CSV (replaced by DIFOP).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Hesai: do not check the packets' CRCs (by default a CRC failure is counted malformed).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    hesai_skip_crc: Option<bool>,
    /// Velodyne: decode as Tier IV Nebula does, bit for bit, instead of by the manuals'
    /// firing timing (config file: `nebula_compat = true`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    nebula_compat: Option<bool>,
    /// Cut angle in degrees, [0, 360] (default 0).
    #[arg(long)]
    cut_angle: Option<f64>,
    /// Field of view `MIN:MAX` in degrees, each in [0, 360]; `MIN > MAX` wraps through 0°
    /// (config file: `fov = [270.0, 90.0]`).
    #[arg(long, value_name = "MIN:MAX", value_parser = super::parse_fov)]
    fov: Option<(f64, f64)>,
    /// Address subscribers connect to (default 127.0.0.1:7510). A non-loopback address also
    /// needs `--listen-public`.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Allow `--listen` on a non-loopback address (the protocol has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    listen_public: Option<bool>,
    /// Maximum simultaneous subscribers, 1..=1024 (default 16).
    #[arg(long)]
    max_subscribers: Option<usize>,
    /// Once set up, switch to this user (and its groups) before dropping every capability;
    /// needs CAP_SETUID and CAP_SETGID (root). Files written at exit (`--stats-json`) are
    /// then written as this user.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// Keep the start-up capabilities instead of dropping them all once set up (debugging).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    keep_caps: Option<bool>,
    /// XDP attach mode: auto (native, else generic), native or generic.
    #[arg(long, value_enum)]
    xdp_mode: Option<AttachMode>,
    /// XDP object file to load instead of the one embedded at build time.
    #[arg(long, value_name = "FILE")]
    bpf_object: Option<PathBuf>,
    /// UMEM frames (power of two, 64..=65536; default 4096, i.e. 8 MiB of 2 KiB frames).
    #[arg(long)]
    umem_frames: Option<u32>,
    /// Pin the capture thread to this CPU (one capture thread only; see `--cpus`).
    #[arg(long)]
    cpu: Option<usize>,
    /// Pin the capture threads, one CPU each, in configuration order (e.g. `--cpus 2,3`).
    #[arg(long, value_name = "LIST", value_parser = crate::daemon::config::parse_cpu_list)]
    #[serde(skip)]
    cpus: Option<crate::daemon::config::CpuList>,
    /// Frames of each sensor a subscriber may have queued before that sensor's oldest is
    /// dropped, 1..=64 (default 3).
    #[arg(long)]
    subscriber_queue: Option<usize>,
    /// Finished frames between the capture threads and the publisher, 1..=1024 (default 16).
    #[arg(long)]
    frame_queue: Option<usize>,
    /// Expected return mode of the (single) sensor; a different one in the packets is logged.
    #[arg(long)]
    return_mode: Option<String>,
    /// Points at this range or closer are dropped, metres, [0, max-range) (default: the
    /// model's datasheet minimum, see docs/sensors.md). Config file: `min_range`.
    #[arg(long, value_name = "M")]
    min_range: Option<f32>,
    /// Points at this range or farther are dropped, metres, (min-range, 1000] (default: the
    /// model's datasheet maximum). Config file: `max_range`.
    #[arg(long, value_name = "M")]
    max_range: Option<f32>,
    /// Clock of each frame's `start_ns`: `sensor` (the packets' time stamps, default) or
    /// `host` (receive time of the frame's first packet). Config file: `stamp`.
    #[arg(long, value_name = "sensor|host")]
    stamp: Option<Stamp>,
    /// Sensors (config file only): `[[sensors]]` tables, see `lidarxdp check-config`.
    #[arg(skip)]
    #[serde(default)]
    sensors: Vec<crate::daemon::config::SensorSection>,
    /// Per-queue settings (config file only): `[[queues]]` tables.
    #[arg(skip)]
    #[serde(default)]
    queues: Vec<crate::daemon::config::QueueSection>,
    /// Write the final counters as JSON to this file on exit.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off by default; the usual address is
    /// 127.0.0.1:9751). Loopback only unless `--metrics-public`.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Allow `--metrics` on a non-loopback address (the endpoint has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    metrics_public: Option<bool>,
    /// Serve the Foxglove WebSocket protocol at `ws://ADDR` (off by default; the usual address
    /// is 127.0.0.1:8765): Foxglove and Lichtblick show each sensor's PointCloud2 topic and a
    /// diagnostics channel. Loopback only unless `--foxglove-public`.
    #[arg(long, value_name = "ADDR")]
    foxglove: Option<SocketAddr>,
    /// Allow `--foxglove` on a non-loopback address (the server has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    foxglove_public: Option<bool>,
    /// Serve the live 3D view at `http://ADDR/` (off by default; e.g. 127.0.0.1:8080): each
    /// sensor's latest frame in any browser, coloured by intensity or height. Loopback only
    /// unless `--view-public`. Needs a build with the page's three.js (`cargo xtask setup`).
    #[arg(long, value_name = "ADDR")]
    view: Option<SocketAddr>,
    /// Allow `--view` on a non-loopback address (the page has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    view_public: Option<bool>,
    /// Also publish every frame as a ROS 2 `sensor_msgs/msg/PointCloud2` over zenoh, as
    /// rmw_zenoh does (docs/deploy.md): `ros2 topic echo` and RViz see the topics.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    zenoh: Option<bool>,
    /// zenoh's own JSON5 configuration file (mode, connect/listen endpoints, TLS, access
    /// control). Default: rmw_zenoh's, a peer connected to the router at tcp/localhost:7447.
    #[arg(long, value_name = "FILE")]
    zenoh_config: Option<PathBuf>,
    /// Also publish every frame as a ROS 2 `sensor_msgs/msg/PointCloud2` over DDS (Eclipse
    /// Cyclone DDS), as rmw_cyclonedds_cpp and rmw_fastrtps_cpp do (docs/deploy.md): ROS 2
    /// machines on Fast DDS or Cyclone DDS see the topics with no bridge. Honours
    /// `CYCLONEDDS_URI`, `ROS_AUTOMATIC_DISCOVERY_RANGE` and `ROS_STATIC_PEERS`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    dds: Option<bool>,
    /// Cyclone DDS's own XML configuration file (interfaces, multicast, peers, buffers),
    /// applied after `$CYCLONEDDS_URI`. Default: none (lidarxdp's large-frame settings and
    /// ROS 2's discovery rules only).
    #[arg(long, value_name = "FILE")]
    dds_config: Option<PathBuf>,
    /// ROS domain id of the topics, 0..=232 (default: $ROS_DOMAIN_ID, else 0).
    #[arg(long, value_name = "N")]
    ros_domain_id: Option<u32>,
    /// ROS 2 distribution of the subscribers: `jazzy` (RIHS01 type hash; also Kilted,
    /// Rolling) or `humble` (TypeHashNotSupported). Default jazzy.
    #[arg(long, value_name = "DISTRO")]
    #[serde(default, deserialize_with = "de_distro")]
    ros_distro: Option<lidarxdp_core::ros2::Distro>,
    /// Shared-memory pool for the zenoh messages, MiB, 0..=4096 (default 128; 0 publishes
    /// from the heap). Local subscribers read the frames in place from it.
    #[arg(long, value_name = "MIB")]
    zenoh_shm_mb: Option<u32>,
    /// ROS 2 topic of the (single) sensor over zenoh (default `/lidar/<name>/points`).
    /// Config file: `topic` in `[[sensors]]`.
    #[arg(long, value_name = "TOPIC")]
    topic: Option<String>,
    /// `header.frame_id` of the (single) sensor's PointCloud2 messages (default: its name).
    /// Config file: `frame_id` in `[[sensors]]`.
    #[arg(long, value_name = "FRAME")]
    frame_id: Option<String>,
    /// Record every datagram of the sensors (data and extra ports) as it arrived, with its
    /// receive time (ns), to this pcap file; `lidarxdp decode FILE` decodes it again. A slow
    /// disk drops packets from the recording (counted), never from the decoder.
    #[arg(long, value_name = "FILE")]
    record_pcap: Option<PathBuf>,
    /// With `--record-pcap`: new part `<stem>_<n>.pcap` (n = 0, 1, ...) before one exceeds MB
    /// megabytes (10^6 bytes), 1..=1048576.
    #[arg(long, value_name = "MB")]
    record_split_size: Option<u64>,
    /// With `--record-pcap`: new part `<stem>_<n>.pcap` every S seconds of packets, 1..=604800.
    #[arg(long, value_name = "S")]
    record_split_duration: Option<u64>,
}

fn de_distro<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<lidarxdp_core::ros2::Distro>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

fn de_wait<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<WaitMode>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

fn de_stall<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<StallSchedule>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

macro_rules! merge {
    ($cli:ident, $file:ident, $($f:ident),*) => { $( if $cli.$f.is_none() { $cli.$f = $file.$f.take(); } )* };
}

fn load_config(mut a: RunArgs) -> Result<RunArgs> {
    if let Some(path) = a.config.clone() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("read config {}", path.display()))?;
        let mut f: RunArgs =
            toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
        // Relative paths in the file are relative to the file, not to the working directory
        // (which is `/` under systemd).
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let anchor = |p: &mut Option<PathBuf>| {
            if let Some(x) = p.as_mut()
                && x.is_relative()
            {
                *x = dir.join(&*x);
            }
        };
        anchor(&mut f.calibration);
        anchor(&mut f.bpf_object);
        anchor(&mut f.zenoh_config);
        anchor(&mut f.dds_config);
        anchor(&mut f.record_pcap);
        for s in &mut f.sensors {
            anchor(&mut s.calibration);
        }
        merge!(
            a,
            f,
            iface,
            backend,
            bind,
            rcvbuf,
            stall,
            wait,
            queue,
            sensor,
            name,
            port,
            extra_port,
            source,
            calibration,
            hesai_skip_crc,
            nebula_compat,
            cut_angle,
            fov,
            listen,
            listen_public,
            max_subscribers,
            keep_caps,
            user,
            xdp_mode,
            bpf_object,
            umem_frames,
            cpu,
            stats_json,
            metrics,
            metrics_public,
            foxglove,
            foxglove_public,
            view,
            view_public,
            subscriber_queue,
            frame_queue,
            return_mode,
            min_range,
            max_range,
            stamp,
            zenoh,
            zenoh_config,
            ros_domain_id,
            ros_distro,
            zenoh_shm_mb,
            dds,
            dds_config,
            topic,
            frame_id,
            record_pcap,
            record_split_size,
            record_split_duration
        );
        a.sensors = std::mem::take(&mut f.sensors);
        a.queues = std::mem::take(&mut f.queues);
    }
    Ok(a)
}

/// The settings outside the capture plan that `run` refuses before touching anything: the
/// `--user` account must exist, `--user` excludes `--keep-caps`, a non-loopback `--metrics`
/// needs `--metrics-public` (`--foxglove`: `--foxglove-public`), a non-loopback `--view`
/// needs `--view-public` and a build with three.js, `--bpf-object` must be a file. Shared by
/// `run` and `check-config`.
fn check_process(a: &RunArgs) -> Result<Option<lidarxdp::privs::User>> {
    let user = match &a.user {
        Some(name) => {
            Some(lidarxdp::privs::lookup_user(name).with_context(|| format!("--user {name}"))?)
        }
        None => None,
    };
    if user.is_some() && a.keep_caps.unwrap_or(false) {
        bail!("--user and --keep-caps exclude each other");
    }
    loopback_unless_public(
        "metrics",
        a.metrics,
        a.metrics_public,
        "the metrics endpoint",
    )?;
    loopback_unless_public("view", a.view, a.view_public, "the view")?;
    if a.view.is_some() {
        lidarxdp::view::assets::check()?;
    }
    loopback_unless_public(
        "foxglove",
        a.foxglove,
        a.foxglove_public,
        "the Foxglove server",
    )?;
    if let Some(p) = &a.bpf_object
        && !p.is_file()
    {
        bail!("--bpf-object: {} is not a file", p.display());
    }
    Ok(user)
}

/// Refuses `--FLAG ADDR` on a non-loopback address unless `--FLAG-public` is given: `what`
/// (named in the message) has no authentication.
fn loopback_unless_public(
    flag: &str,
    addr: Option<SocketAddr>,
    public: Option<bool>,
    what: &str,
) -> Result<()> {
    match addr {
        Some(a) if !a.ip().is_loopback() && !public.unwrap_or(false) => bail!(
            "--{flag}: {a} is not a loopback address; {what} has no authentication, add \
             --{flag}-public to serve it there anyway"
        ),
        _ => Ok(()),
    }
}

/// `--record-pcap` and its rotation flags, checked (ranges, a file name; the rotation flags
/// need `--record-pcap`). The socket backends' records get the `--bind` address as their
/// destination.
fn record_pcap(a: &RunArgs) -> Result<Option<lidarxdp::capture::RecordConfig>> {
    let Some(path) = a.record_pcap.clone() else {
        if a.record_split_size.is_some() || a.record_split_duration.is_some() {
            bail!("--record-split-size and --record-split-duration need --record-pcap FILE");
        }
        return Ok(None);
    };
    let dst = a.bind.unwrap_or(Ipv4Addr::UNSPECIFIED).octets();
    lidarxdp::capture::RecordConfig::new(path, a.record_split_size, a.record_split_duration, dst)
        .map(Some)
        .map_err(anyhow::Error::msg)
}

/// Validates the merged arguments into the plan of capture threads.
fn plan(a: &RunArgs) -> Result<Plan> {
    let single_given = a.sensor.is_some()
        || a.calibration.is_some()
        || a.port.is_some()
        || a.extra_port.is_some()
        || a.source.is_some()
        || a.name.is_some()
        || a.cut_angle.is_some()
        || a.fov.is_some()
        || a.return_mode.is_some()
        || a.hesai_skip_crc.is_some()
        || a.min_range.is_some()
        || a.max_range.is_some()
        || a.stamp.is_some()
        || a.nebula_compat.is_some()
        || a.topic.is_some()
        || a.frame_id.is_some();
    let single = single_given.then(|| SensorSection {
        name: a.name.clone(),
        model: a.sensor,
        calibration: a.calibration.clone(),
        port: a.port,
        extra_port: a.extra_port,
        source: a.source,
        iface: None,
        queue: None,
        cut_angle: a.cut_angle,
        fov: a.fov,
        return_mode: a.return_mode.clone(),
        hesai_skip_crc: a.hesai_skip_crc,
        min_range: a.min_range,
        max_range: a.max_range,
        stamp: a.stamp,
        nebula_compat: a.nebula_compat,
        topic: a.topic.clone(),
        frame_id: a.frame_id.clone(),
    });
    config::build(Inputs {
        backend: a.backend,
        iface: a.iface.clone(),
        queue: a.queue,
        cpu: a.cpu,
        cpus: a.cpus.clone().map(|c| c.0),
        umem_frames: a.umem_frames,
        listen: a.listen,
        listen_public: a.listen_public.unwrap_or(false),
        max_subscribers: a.max_subscribers,
        subscriber_queue: a.subscriber_queue,
        frame_queue: a.frame_queue,
        rcvbuf: a.rcvbuf,
        stall: a.stall,
        wait: a.wait,
        single,
        sensors: a.sensors.clone(),
        queues: a.queues.clone(),
        xdp_mode: a.xdp_mode,
        zenoh: a.zenoh.unwrap_or(false),
        zenoh_config: a.zenoh_config.clone(),
        ros_domain_id: a.ros_domain_id,
        ros_domain_id_env: std::env::var("ROS_DOMAIN_ID").ok(),
        ros_distro: a.ros_distro,
        zenoh_shm_mb: a.zenoh_shm_mb,
        dds: a.dds.unwrap_or(false),
        dds_config: a.dds_config.clone(),
        ros2_env: config::Ros2Env::from_process(),
    })
}

/// `lidarxdp check-config FILE`: validates the file as `lidarxdp run --config FILE` would
/// (ranges, names, filter keys, every calibration file) and prints the effective configuration
/// as TOML. Touches no network interface.
///
/// Errors: the first invalid field (named as in the file, with its value and valid range), or
/// a calibration file that cannot be read or parsed.
pub fn check_config(path: PathBuf) -> Result<()> {
    let a = load_config(RunArgs {
        config: Some(path.clone()),
        ..RunArgs::default()
    })?;
    let plan = plan(&a).with_context(|| format!("config {}", path.display()))?;
    check_process(&a).with_context(|| format!("config {}", path.display()))?;
    record_pcap(&a).with_context(|| format!("config {}", path.display()))?;
    for s in plan.sensors() {
        crate::daemon::pipeline(s).with_context(|| format!("config {}", path.display()))?;
    }
    println!(
        "# Effective configuration of {} (a summary for reading, not a loadable file).",
        path.display()
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!(
        "# xdp_mode {}, metrics {}, user {}",
        opt(a.xdp_mode.map(|m| format!("{m:?}").to_lowercase())),
        opt(a.metrics.map(|m| m.to_string())),
        opt(a.user.clone())
    );
    print!(
        "{}",
        toml::to_string_pretty(&plan).context("print the effective configuration")?
    );
    eprintln!(
        "check-config: {} OK: {} sensor(s) on {} capture thread(s), backend {}",
        path.display(),
        plan.sensors().count(),
        plan.queues.len(),
        plan.backend.name()
    );
    Ok(())
}

/// `lidarxdp run`: merges the flags over the configuration file, validates them into a plan
/// and the process settings, and runs the daemon ([`crate::daemon::run`]) until
/// SIGTERM/SIGINT.
///
/// Errors: the first invalid flag or configuration field (named, with its valid range), then
/// those of [`crate::daemon::run`].
pub fn run(args: RunArgs) -> Result<()> {
    let a = load_config(args)?;
    let plan = plan(&a)?;
    let user = check_process(&a)?;
    let record_pcap = record_pcap(&a)?;
    crate::daemon::run(
        &plan,
        &crate::daemon::Process {
            user,
            keep_caps: a.keep_caps.unwrap_or(false),
            metrics: a.metrics,
            foxglove: a.foxglove,
            bind: a.bind.unwrap_or(Ipv4Addr::UNSPECIFIED),
            stats_json: a.stats_json.clone(),
            xdp_mode: a.xdp_mode.unwrap_or(AttachMode::Auto),
            bpf_object: a.bpf_object.clone(),
            view: a.view,
            view_public: a.view_public.unwrap_or(false),
            record_pcap,
        },
    )
}
