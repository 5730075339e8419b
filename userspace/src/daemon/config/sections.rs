//! The configuration's records, one per subsystem: each is both a set of `lidarxdp run` flags
//! (clap) and a section of the TOML file (serde), declared once by [`section!`]. Every field
//! is optional here (unset = the default, or the file's value under a flag); [`super::plan`]
//! resolves them into the validated plan.
//!
//! A new setting is one field in one record: its type (a validated one from [`super::valid`]
//! where it has a range), its doc comment (which clap prints as the flag's help), its
//! `#[arg(long)]`, and, where the TOML key differs from the flag, a `#[serde(rename)]`.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
};

use lidarxdp::{
    capture::{Backend, RcvBuf, StallSchedule, WaitMode},
    loader::AttachMode,
};
use lidarxdp_core::{
    ros2::Distro,
    sensor::{SensorModel, Stamp},
};
use serde::Deserialize;

use super::valid::{
    Degrees, DomainId, FovSetting, Metres, Percent, Ranged, RxQueue, ShmMib, SourceAddr,
    SplitDurationS, SplitSizeMb, UdpPort, UmemFrames,
};

/// Declares a configuration record: the struct (every field an `Option`, with its attributes
/// passed through) and, generated from the same field list, [`Section::merge_from`] and
/// [`Section::is_unset`], so no field is listed twice.
macro_rules! section {
    (
        $(#[$sattr:meta])*
        pub struct $name:ident {
            $(
                $(#[$fattr:meta])*
                pub $field:ident : Option<$ty:ty>,
            )*
        }
    ) => {
        $(#[$sattr])*
        #[derive(clap::Args, Deserialize, Clone, Debug, Default)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fattr])*
                pub $field: Option<$ty>,
            )*
        }

        impl Section for $name {
            fn merge_from(&mut self, file: Self) {
                $( if self.$field.is_none() { self.$field = file.$field; } )*
            }

            fn is_unset(&self) -> bool {
                true $( && self.$field.is_none() )*
            }
        }
    };
}

/// What every record can do: merge the file's values under the flags', and say whether
/// anything was set.
pub trait Section {
    /// Takes each field of `file` that is unset here (flags win over the file).
    fn merge_from(&mut self, file: Self);
    /// Whether no field is set.
    fn is_unset(&self) -> bool;
}

section! {
    /// `[capture]`: how packets reach the decoders (the backend, the interface, the AF_XDP
    /// socket, the idle wait, the queue to the publisher).
    pub struct CaptureSettings {
        /// Interface to attach the XDP program to and capture on (required by `--backend
        /// xdp`, ignored by the socket backends); the default of every sensor.
        #[arg(long)]
        pub iface: Option<String>,
        /// How packets reach the decoder: `xdp` (AF_XDP, the product) or one of the socket
        /// baselines it is benchmarked against (`socket`, `recvmmsg`, `uring`); default xdp.
        #[arg(long, value_enum)]
        pub backend: Option<Backend>,
        /// XDP attach mode: auto (native, else generic), native or generic.
        #[arg(long, value_enum)]
        pub xdp_mode: Option<AttachMode>,
        /// XDP object file to load instead of the one embedded at build time.
        #[arg(long, value_name = "FILE")]
        pub bpf_object: Option<PathBuf>,
        /// UMEM frames of each AF_XDP socket (power of two, 64..=65536; default 4096, i.e.
        /// 8 MiB of 2 KiB frames); `[[queues]]` may set one per queue.
        #[arg(long)]
        pub umem_frames: Option<UmemFrames>,
        /// Pin the capture thread to this CPU (one capture thread only; see `--cpus`).
        #[arg(long)]
        pub cpu: Option<usize>,
        /// How the capture thread waits when no packet is ready (xdp and recvmmsg backends):
        /// `poll` (wake on every packet), `minwait:USEC` (io_uring minimum wait),
        /// `paced:USEC` (after packets, sleep USEC before draining again) or `busypoll:USEC`
        /// (NAPI busy poll); USEC in 10..=1000. Default `paced:1000` (docs/benchmarks.md,
        /// "Wake-ups").
        #[arg(long, value_name = "MODE")]
        #[serde(default, deserialize_with = "de_from_str")]
        pub wait: Option<WaitMode>,
        /// Finished frames between the capture threads and the publisher, 1..=1024 (default
        /// 16).
        #[arg(long)]
        pub frame_queue: Option<Ranged<1, 1024>>,
        /// Socket backends: address the UDP sockets bind (default 0.0.0.0).
        #[arg(long, value_name = "IP")]
        pub bind: Option<Ipv4Addr>,
        /// Socket backends: receive buffer, `default`, `max` (net.core.rmem_max) or bytes in
        /// 1..=1073741824 (default: `default` for socket, `max` for recvmmsg and uring).
        #[arg(long, value_name = "default|max|BYTES")]
        pub rcvbuf: Option<RcvBuf>,
        /// Benchmarks: pause the decoder thread MS milliseconds every EVERY_MS milliseconds
        /// (`MS:EVERY_MS`, 1 <= MS < EVERY_MS <= 3600000), to measure stall tolerance.
        #[arg(long, value_name = "MS:EVERY_MS")]
        #[serde(default, deserialize_with = "de_from_str")]
        pub stall: Option<StallSchedule>,
    }
}

section! {
    /// One `[[sensors]]` table, or the single sensor of the flags (`--sensor vlp16 --port
    /// 2368 --calibration FILE ...`). The sensor's own settings, all in this one record; the
    /// daemon reads the simple ones straight from it ([`super::SensorPlan::settings`]), so a
    /// new one is this field and the line that uses it.
    #[derive(serde::Serialize, PartialEq)]
    pub struct SensorSettings {
        /// Name subscribers choose the sensor by, 1..=64 bytes, unique (default: the model
        /// name, e.g. `VLP16`).
        #[arg(long)]
        pub name: Option<String>,
        /// Sensor model, e.g. `vlp16` (required).
        #[arg(long = "sensor", value_name = "MODEL")]
        #[serde(serialize_with = "ser_model")]
        pub model: Option<SensorModel>,
        /// Calibration file (required): Velodyne ros-drivers/Nebula YAML; Hesai
        /// angle-correction CSV (AT128: binary `.dat`); Ouster sensor metadata JSON;
        /// RoboSense angle CSV (replaced by DIFOP). Relative paths in the file are relative to
        /// the file.
        #[arg(long, value_name = "FILE")]
        pub calibration: Option<PathBuf>,
        /// UDP destination port of the sensor's data packets, 1..=65535. Default: the model's
        /// factory port, Velodyne 2368, Hesai 2368, Ouster 7502 (lidar data), RoboSense 6699
        /// (MSOP).
        #[arg(long)]
        pub port: Option<UdpPort>,
        /// A second UDP port of the same sensor, decoded by the same pipeline, 0..=65535.
        /// Default: RoboSense's DIFOP 7788 (whose angle table then replaces the CSV);
        /// Velodyne's position packets 8308 (PPS and GPRMC) and Ouster's IMU 7503 when the
        /// data port is the model's default; none otherwise. 0 = none.
        #[arg(long)]
        pub extra_port: Option<Ranged<0, 65535>>,
        /// Source address of the sensor: IPv4 `a.b.c.d`, IPv6 `fd00::201`, or link-local IPv6
        /// `fe80::201%eth0` whose zone, if given, is the sensor's interface (default: any
        /// source). IPv6 needs the xdp backend.
        #[arg(long, value_name = "IP")]
        pub source: Option<SourceAddr>,
        /// Interface its packets arrive on (file only; default: `capture.iface` / `--iface`).
        #[arg(skip)]
        pub iface: Option<String>,
        /// RX queue of the interface its packets arrive on, 0..=63 (default 0).
        #[arg(long)]
        pub queue: Option<RxQueue>,
        /// Cut angle, degrees, [0, 360] (default 0; 360 is 0).
        #[arg(long, value_name = "DEG")]
        pub cut_angle: Option<Degrees>,
        /// Field of view `MIN:MAX` in degrees, each in [0, 360]; `MIN > MAX` wraps through 0°;
        /// `0:360` is the full circle, the same as none (file: `fov = [270.0, 90.0]`).
        #[arg(long, value_name = "MIN:MAX")]
        pub fov: Option<FovSetting>,
        /// Expected return mode (`strongest`, `last`, `dual`, ...); a different one in the
        /// packets is logged.
        #[arg(long)]
        pub return_mode: Option<String>,
        /// Hesai: do not check the packets' CRCs (by default a CRC failure is counted
        /// malformed).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        pub hesai_skip_crc: Option<bool>,
        /// Points at this range or closer are dropped, metres, [0, max-range) (default: the
        /// model's datasheet minimum, see docs/sensors.md).
        #[arg(long, value_name = "M")]
        pub min_range: Option<Metres>,
        /// Points at this range or farther are dropped, metres, (min-range, 1000] (default:
        /// the model's datasheet maximum).
        #[arg(long, value_name = "M")]
        pub max_range: Option<Metres>,
        /// Clock of each frame's `start_ns`: `sensor` (the packets' time stamps, default) or
        /// `host` (receive time of the frame's first packet).
        #[arg(long, value_name = "sensor|host")]
        pub stamp: Option<Stamp>,
        /// Velodyne: decode as Tier IV Nebula does, bit for bit, instead of by the manuals'
        /// firing timing (default false).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        pub nebula_compat: Option<bool>,
        /// The layout of its points on every output: autoware (default), autoware_xyzirc,
        /// xyzi, velodyne, ouster, ouster_xyzir, hesai or robosense (docs/sensors.md, "Point
        /// layouts").
        #[arg(long, value_name = "NAME")]
        pub point_type: Option<lidarxdp_core::layout::PointType>,
        /// ROS 2 topic of its frames over zenoh and DDS (default `/lidar/<name>/points`).
        #[arg(long, value_name = "TOPIC")]
        pub topic: Option<String>,
        /// `header.frame_id` of its PointCloud2 messages, 1..=255 bytes without NUL (default:
        /// its name).
        #[arg(long, value_name = "FRAME")]
        pub frame_id: Option<String>,
        /// Ouster: ROS 2 topic of its IMU over zenoh and DDS (default `/lidar/<name>/imu`).
        #[arg(long, value_name = "TOPIC")]
        pub imu_topic: Option<String>,
        /// Ouster: `header.frame_id` of its IMU messages, 1..=255 bytes without NUL (default
        /// `<frame_id>_imu`).
        #[arg(long, value_name = "FRAME")]
        pub imu_frame_id: Option<String>,
        /// `/diagnostics`: packet loss over a second above this is WARN, %, [0, 100] (default
        /// 0.1).
        #[arg(long, value_name = "PERCENT")]
        pub health_loss_warn: Option<Percent>,
        /// `/diagnostics`: packet loss over a second above this is ERROR, %, [0, 100], at or
        /// above `health_loss_warn` (default 10).
        #[arg(long, value_name = "PERCENT")]
        pub health_loss_error: Option<Percent>,
        /// `/diagnostics`: no packet for this long is ERROR, ms, 1..=3600000 (default 1000).
        #[arg(long, value_name = "MS")]
        pub health_silence_ms: Option<Ranged<1, 3_600_000>>,
        /// `/diagnostics`: a sensor clock further than this from the host's is WARN (frames on
        /// the sensor clock only), ms, 0..=3600000; 0 = never (default 60000).
        #[arg(long, value_name = "MS")]
        pub health_offset_ms: Option<Ranged<0, 3_600_000>>,
        /// Host time without a data packet after which the open frame is published as it is
        /// (counted lost where packets are missing), ms, 1..=60000 (default 200). Raise it for
        /// sensors turning slower than 5 Hz.
        #[arg(long, value_name = "MS")]
        pub frame_timeout_ms: Option<Ranged<1, 60_000>>,
    }
}

section! {
    /// One `[[queues]]` table (file only): settings of one (interface, RX queue) capture
    /// thread.
    pub struct QueueSettings {
        /// Interface (default: `capture.iface`).
        #[arg(skip)]
        pub iface: Option<String>,
        /// RX queue, 0..=63 (default 0).
        #[arg(skip)]
        pub queue: Option<RxQueue>,
        /// CPU to pin the thread to.
        #[arg(skip)]
        pub cpu: Option<usize>,
        /// UMEM frames of its AF_XDP socket (power of two, 64..=65536).
        #[arg(skip)]
        pub umem_frames: Option<UmemFrames>,
    }
}

section! {
    /// `[process]`: the daemon's identity and what it writes at exit.
    pub struct ProcessSettings {
        /// Once set up, switch to this user (and its groups) before dropping every capability;
        /// needs CAP_SETUID and CAP_SETGID (root). Files written at exit (`--stats-json`) are
        /// then written as this user.
        #[arg(long, value_name = "NAME")]
        pub user: Option<String>,
        /// Keep the start-up capabilities instead of dropping them all once set up (debugging).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        pub keep_caps: Option<bool>,
        /// Write every counter as one JSON object to this file at exit (the exit log line is
        /// a short summary; `lidarxdp stats` reads them while the daemon runs).
        #[arg(long, value_name = "FILE")]
        pub stats_json: Option<PathBuf>,
        /// `/diagnostics` warns (status `lidarxdp: memory`) when the resident memory grew
        /// faster than this over the last hour, MiB per hour, 0..=65536 (default 16; 0: never).
        #[arg(long, value_name = "MIB")]
        pub memory_growth_warn_mb_per_hour: Option<Ranged<0, 65536>>,
    }
}

section! {
    /// `[tcp]`: the publisher's subscribers (lidarxdp's own protocol, docs/protocol.md), on
    /// loopback.
    pub struct TcpSettings {
        /// Loopback address subscribers connect to (default 127.0.0.1:7510). The protocol has
        /// no authentication: across machines, use ROS 2 over zenoh (TLS) or DDS.
        #[arg(long, value_name = "ADDR")]
        pub listen: Option<SocketAddr>,
        /// Maximum simultaneous subscribers, 1..=1024 (default 16).
        #[arg(long)]
        pub max_subscribers: Option<Ranged<1, 1024>>,
        /// Frames of each sensor a subscriber may have queued before that sensor's oldest is
        /// dropped, 1..=64 (default 3).
        #[arg(long)]
        pub subscriber_queue: Option<Ranged<1, 64>>,
    }
}

section! {
    /// `[ros2]`: what the zenoh and DDS sinks share.
    pub struct Ros2Settings {
        /// ROS domain id of the topics, 0..=232 (default: $ROS_DOMAIN_ID, else 0).
        #[arg(long, value_name = "N")]
        #[serde(rename = "domain_id")]
        pub ros_domain_id: Option<DomainId>,
        /// ROS 2 distribution of the subscribers: `jazzy` (RIHS01 type hash; also Kilted,
        /// Rolling) or `humble` (TypeHashNotSupported). Default jazzy.
        #[arg(long, value_name = "DISTRO")]
        #[serde(rename = "distro", default, deserialize_with = "de_from_str")]
        pub ros_distro: Option<Distro>,
    }
}

section! {
    /// `[zenoh]`: ROS 2 over zenoh, as rmw_zenoh (docs/deploy.md, "ROS 2 over zenoh").
    pub struct ZenohSettings {
        /// Also publish every frame as a ROS 2 `sensor_msgs/msg/PointCloud2` over zenoh, as
        /// rmw_zenoh does: `ros2 topic echo` and RViz see the topics (file: `enabled = true`).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        #[serde(rename = "enabled")]
        pub zenoh: Option<bool>,
        /// zenoh's own JSON5 configuration file (mode, connect/listen endpoints, TLS, access
        /// control). Default: rmw_zenoh's, a peer connected to the router at
        /// tcp/localhost:7447, listening on loopback only (file: `config`).
        #[arg(long, value_name = "FILE")]
        #[serde(rename = "config")]
        pub zenoh_config: Option<PathBuf>,
        /// Shared-memory pool for the zenoh messages, MiB, 0..=4096 (default 128; 0 publishes
        /// from the heap). Local subscribers read the frames in place from it (file:
        /// `shm_mb`).
        #[arg(long, value_name = "MIB")]
        #[serde(rename = "shm_mb")]
        pub zenoh_shm_mb: Option<ShmMib>,
    }
}

section! {
    /// `[dds]`: ROS 2 over DDS (Eclipse Cyclone DDS), as rmw_cyclonedds_cpp and
    /// rmw_fastrtps_cpp (docs/deploy.md, "ROS 2 over DDS").
    pub struct DdsSettings {
        /// Also publish every frame as a ROS 2 `sensor_msgs/msg/PointCloud2` over DDS: ROS 2
        /// machines on Fast DDS or Cyclone DDS see the topics with no bridge. Honours
        /// `CYCLONEDDS_URI`, `ROS_AUTOMATIC_DISCOVERY_RANGE` and `ROS_STATIC_PEERS` (file:
        /// `enabled = true`).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        #[serde(rename = "enabled")]
        pub dds: Option<bool>,
        /// Cyclone DDS's own XML configuration file (interfaces, multicast, peers, buffers),
        /// applied after `$CYCLONEDDS_URI` (file: `config`).
        #[arg(long, value_name = "FILE")]
        #[serde(rename = "config")]
        pub dds_config: Option<PathBuf>,
    }
}

section! {
    /// `[foxglove]`: the Foxglove WebSocket server, on loopback.
    pub struct FoxgloveSettings {
        /// Serve the Foxglove WebSocket protocol at `ws://ADDR` (off by default; the usual
        /// address is 127.0.0.1:8765): Foxglove and Lichtblick show each sensor's PointCloud2
        /// topic and a diagnostics channel. Loopback only (file: `listen`).
        #[arg(long, value_name = "ADDR")]
        #[serde(rename = "listen")]
        pub foxglove: Option<SocketAddr>,
    }
}

section! {
    /// `[view]`: the live 3D view in a browser, on loopback.
    pub struct ViewSettings {
        /// Serve the live 3D view at `http://ADDR/` (off by default; e.g. 127.0.0.1:8080):
        /// each sensor's latest frame in any browser. Loopback only. Needs a build with the
        /// page's three.js (`cargo xtask setup`) (file: `listen`).
        #[arg(long, value_name = "ADDR")]
        #[serde(rename = "listen")]
        pub view: Option<SocketAddr>,
    }
}

section! {
    /// `[metrics]`: the Prometheus endpoint, on loopback.
    pub struct MetricsSettings {
        /// Serve Prometheus metrics at `http://ADDR/metrics` (off by default; the usual
        /// address is 127.0.0.1:9751). Loopback only (file: `listen`).
        #[arg(long, value_name = "ADDR")]
        #[serde(rename = "listen")]
        pub metrics: Option<SocketAddr>,
    }
}

section! {
    /// `[recording]`: every datagram of the sensors, as it arrived, to pcap files.
    pub struct RecordingSettings {
        /// Record every datagram of the sensors (data and extra ports) as it arrived, with its
        /// receive time (ns), to this pcap file; `lidarxdp decode FILE` decodes it again. A
        /// slow disk drops packets from the recording (counted), never from the decoder (file:
        /// `pcap`).
        #[arg(long, value_name = "FILE")]
        #[serde(rename = "pcap")]
        pub record_pcap: Option<PathBuf>,
        /// With `--record-pcap`: new part `<stem>_<n>.pcap` (n = 0, 1, ...) before one exceeds
        /// MB megabytes (10^6 bytes), 1..=1048576 (file: `split_size_mb`).
        #[arg(long, value_name = "MB")]
        #[serde(rename = "split_size_mb")]
        pub record_split_size: Option<SplitSizeMb>,
        /// With `--record-pcap`: new part `<stem>_<n>.pcap` every S seconds of packets,
        /// 1..=604800 (file: `split_duration_s`).
        #[arg(long, value_name = "S")]
        #[serde(rename = "split_duration_s")]
        pub record_split_duration: Option<SplitDurationS>,
    }
}

fn ser_model<S: serde::Serializer>(m: &Option<SensorModel>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_str(m.name()),
        None => s.serialize_none(),
    }
}

/// Deserializes a value from its text form, through the type's `FromStr` (the flag's
/// parser), so the file and the flag share one rule and one message.
fn de_from_str<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

/// Every setting of `lidarxdp run`: the flags (each record flattened into the command line)
/// or the TOML file (each record one section). The file's layout is in [`super`].
#[derive(clap::Args, Deserialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `[capture]`.
    #[command(flatten)]
    #[serde(default)]
    pub capture: CaptureSettings,
    /// The single sensor of the flags (the file uses `[[sensors]]`).
    #[command(flatten)]
    #[serde(skip)]
    pub sensor: SensorSettings,
    /// `[[sensors]]` (file only).
    #[arg(skip)]
    #[serde(default)]
    pub sensors: Vec<SensorSettings>,
    /// `[[queues]]` (file only).
    #[arg(skip)]
    #[serde(default)]
    pub queues: Vec<QueueSettings>,
    /// `[process]`.
    #[command(flatten)]
    #[serde(default)]
    pub process: ProcessSettings,
    /// `[tcp]`.
    #[command(flatten)]
    #[serde(default)]
    pub tcp: TcpSettings,
    /// `[ros2]`.
    #[command(flatten)]
    #[serde(default)]
    pub ros2: Ros2Settings,
    /// `[zenoh]`.
    #[command(flatten)]
    #[serde(default)]
    pub zenoh: ZenohSettings,
    /// `[dds]`.
    #[command(flatten)]
    #[serde(default)]
    pub dds: DdsSettings,
    /// `[foxglove]`.
    #[command(flatten)]
    #[serde(default)]
    pub foxglove: FoxgloveSettings,
    /// `[view]`.
    #[command(flatten)]
    #[serde(default)]
    pub view: ViewSettings,
    /// `[metrics]`.
    #[command(flatten)]
    #[serde(default)]
    pub metrics: MetricsSettings,
    /// `[recording]`.
    #[command(flatten)]
    #[serde(default)]
    pub recording: RecordingSettings,
}

impl Settings {
    /// These settings (the flags) over `file`'s: each record merged field by field, the
    /// flags winning; the file's `[[sensors]]` and `[[queues]]` taken as they are.
    pub fn over(mut self, file: Settings) -> Settings {
        self.capture.merge_from(file.capture);
        self.process.merge_from(file.process);
        self.tcp.merge_from(file.tcp);
        self.ros2.merge_from(file.ros2);
        self.zenoh.merge_from(file.zenoh);
        self.dds.merge_from(file.dds);
        self.foxglove.merge_from(file.foxglove);
        self.view.merge_from(file.view);
        self.metrics.merge_from(file.metrics);
        self.recording.merge_from(file.recording);
        self.sensors = file.sensors;
        self.queues = file.queues;
        self
    }

    /// Makes every relative path of a file's settings relative to `dir` (the file's folder),
    /// not to the working directory (which is `/` under systemd).
    pub fn anchor_paths(&mut self, dir: &std::path::Path) {
        let mut paths: Vec<&mut Option<PathBuf>> = vec![
            &mut self.capture.bpf_object,
            &mut self.process.stats_json,
            &mut self.zenoh.zenoh_config,
            &mut self.dds.dds_config,
            &mut self.recording.record_pcap,
        ];
        paths.extend(self.sensors.iter_mut().map(|s| &mut s.calibration));
        for p in paths {
            if let Some(x) = p.as_mut()
                && x.is_relative()
            {
                *x = dir.join(&*x);
            }
        }
    }
}
