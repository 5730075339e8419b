//! Recording received frames as ROS 2 `sensor_msgs/msg/PointCloud2` messages (CDR) in MCAP
//! files that `ros2 bag play`, `ros2 bag info` and Foxglove open as they are, optionally split
//! into parts by size or duration.
//!
//! The files follow the MCAP `ros2` profile (mcap.dev, "Well-known profiles: ROS 2") the way
//! rosbag2's MCAP storage plugin writes them (ros2/rosbag2, `rosbag2_storage_mcap`,
//! `mcap_storage.cpp`, `create_topic`), so rosbag2 reads them as it reads its own:
//!
//! - header profile `ros2`, library `lidarxdp <version>`; uncompressed chunks of about 1 MiB
//!   (mcap-rs's default), each with its message index; the summary has the schema, channels,
//!   statistics and chunk indexes, and the summary offsets;
//! - one schema `sensor_msgs/msg/PointCloud2`, encoding `ros2msg`, the `.msg` text of
//!   [`POINTCLOUD2_SCHEMA`], and, once an IMU reading is recorded, `sensor_msgs/msg/Imu`
//!   ([`lidarxdp_core::ros2::IMU_SCHEMA`]) for the channels [`imu_topic_for`] a sensor
//!   (`/lidar/<sensor name>/imu`, [`McapRecorder::write_imu`]);
//! - one channel per topic: a frame received over TCP goes on [`topic_for`] its sensor
//!   (`/lidar/<sensor name>/points`, the daemon's default ROS 2 topic with `--zenoh`), a
//!   message read from zenoh on the topic it came from ([`McapRecorder::write_cdr`]); message
//!   encoding `cdr`, metadata
//!   `offered_qos_profiles` ([`offered_qos_profiles`]: the publisher QoS the zenoh sink
//!   announces, [`Qos::LIDAR`]) and, for Jazzy, `topic_type_hash` (RIHS01);
//! - a message is an unorganised cloud (`height` 1, `width` = point count) whose `fields`,
//!   `point_step` and `data` are the frame's wire layout and payload bytes unchanged (so a
//!   field-subset subscription records only those fields); `header.stamp` is the frame's
//!   `start_ns`, `header.frame_id` the sensor name. MCAP `log_time` is the local receive time,
//!   `publish_time` the frame's `host_ns` (its first packet's arrival at the daemon), and the
//!   message `sequence` the frame's sequence number (per sensor, low 32 bits). The encoding is
//!   `lidarxdp_core::ros2`'s (ROS 2 `sensor_msgs/msg/PointCloud2.msg`, OMG XCDR1
//!   little-endian), shared with the zenoh sink; a message read from zenoh is recorded as it
//!   arrived, with the rmw_zenoh attachment's sequence number and source time.
//!
//! Splitting (rosbag2's `--max-bag-size` / `--max-bag-duration`): with a limit, the parts of
//! `DIR/rec.mcap` are `DIR/rec_0.mcap`, `DIR/rec_1.mcap`, ... ([`part_path`], rosbag2's
//! `<name>_<n>.mcap`), each a complete MCAP with its own schema, channels and summary. A new
//! part starts only between two frames, before the frame that would take the current part
//! over a limit, never before the first frame of a part (one frame larger than the size limit
//! gets a part of its own).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::ReceivedFrame;
use lidarxdp_core::ros2::{
    CdrError, Distro, Durability, FieldRef, History, PointCloud2Prefix, Qos, Reliability,
};

pub use lidarxdp_core::ros2::POINTCLOUD2_SCHEMA;

/// The schema name of every message ([ROS 2 interface name](https://design.ros2.org/articles/interface_definition.html)).
pub const POINTCLOUD2_SCHEMA_NAME: &str = "sensor_msgs/msg/PointCloud2";

/// The MCAP header profile (mcap.dev, "Well-known profiles").
pub const PROFILE: &str = "ros2";

/// Encodes `frame` as a CDR `sensor_msgs/msg/PointCloud2` with `frame_id`: the
/// [`PointCloud2Prefix`] of the frame's header, fields and point count, then its payload bytes
/// and the suffix (`lidarxdp_core::ros2` has the layout).
///
/// # Errors
/// [`lidarxdp_core::ros2::CdrError`]: a payload over 4 GiB, a NUL byte in `frame_id`.
pub fn pointcloud2_cdr(frame: &ReceivedFrame, frame_id: &str) -> Result<Vec<u8>, CdrError> {
    let prefix = PointCloud2Prefix::new(
        frame.header().start_ns,
        frame_id,
        frame.fields().iter().map(FieldRef::from),
        frame.point_step() as u32,
        frame.point_count() as u32,
    )?;
    let mut out = Vec::new();
    prefix.write_message(frame.payload_bytes(), &mut out)?;
    Ok(out)
}

/// The MCAP topic of sensor `name`: `/lidar/<name>/points`
/// ([`lidarxdp_core::ros2::default_topic`], what the daemon publishes over zenoh unless its
/// configuration gives the sensor another `topic`: the TCP hello carries names only). A name
/// that is not a valid ROS 2 name token (letters, digits and `_`, not starting with a digit,
/// no `__`) is made one: every other byte becomes `_`, runs of `_` collapse, and a leading
/// digit gets an `s` before it (`front-left` -> `/lidar/front_left/points`).
pub fn topic_for(name: &str) -> String {
    lidarxdp_core::ros2::default_topic(&topic_token(name))
}

/// The IMU topic of sensor `name` in a recording: `/lidar/<name>/imu`
/// ([`lidarxdp_core::ros2::default_imu_topic`], the daemon's default IMU topic), the name made
/// a valid ROS 2 token as by [`topic_for`].
pub fn imu_topic_for(name: &str) -> String {
    lidarxdp_core::ros2::default_imu_topic(&topic_token(name))
}

/// `name` as a ROS 2 topic token: itself when `/lidar/<name>/points` is a valid topic, else
/// ASCII alphanumerics with runs of anything else as one `_`, `s` before a leading digit,
/// `sensor` when nothing is left.
fn topic_token(name: &str) -> String {
    let topic = lidarxdp_core::ros2::default_topic(name);
    if lidarxdp_core::ros2::validate_topic("topic", &topic).is_ok() {
        return name.to_owned();
    }
    let mut token = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if !(c == '_' && token.ends_with('_')) {
            token.push(c);
        }
    }
    if token.starts_with(|c: char| c.is_ascii_digit()) {
        token.insert(0, 's');
    }
    let token = token.trim_end_matches('_');
    if token.is_empty() {
        "sensor".to_owned()
    } else {
        token.to_owned()
    }
}

/// Seconds and nanoseconds of `RMW_DURATION_INFINITE` (ros2/rmw `time.h`), which rosbag2 writes
/// for the infinite deadline, lifespan and liveliness lease of a publisher.
const INFINITE: (u64, u64) = (9_223_372_036, 854_775_807);

/// The channel metadata `offered_qos_profiles`: a YAML sequence holding one publisher profile,
/// [`Qos::LIDAR`] (best effort, volatile, keep last 5: what the zenoh sink offers), with
/// deadline, lifespan and liveliness lease infinite and liveliness automatic (rmw_zenoh's
/// defaults). The policy values are written as rosbag2 writes them for `distro`
/// (`rosbag2_storage/src/rosbag2_storage/qos.cpp`): Jazzy (bag metadata version 9) as strings
/// (`best_effort`, `volatile`, `keep_last`, `automatic`: rmw `qos_string_conversions.c`),
/// Humble as the `rmw_qos_*_policy_t` numbers. `ros2 bag play` republishes with this profile.
pub fn offered_qos_profiles(distro: Distro) -> String {
    let q = Qos::LIDAR;
    let (history, reliability, durability, liveliness) = match distro {
        Distro::Jazzy => (
            yaml_str(match q.history {
                History::KeepLast => "keep_last",
                History::KeepAll => "keep_all",
            }),
            yaml_str(match q.reliability {
                Reliability::Reliable => "reliable",
                Reliability::BestEffort => "best_effort",
            }),
            yaml_str(match q.durability {
                Durability::TransientLocal => "transient_local",
                Durability::Volatile => "volatile",
            }),
            yaml_str("automatic"),
        ),
        // RMW_QOS_POLICY_LIVELINESS_AUTOMATIC = 1.
        Distro::Humble => (
            (q.history as u64).into(),
            (q.reliability as u64).into(),
            (q.durability as u64).into(),
            1u64.into(),
        ),
    };
    let infinite = || {
        let mut m = serde_yaml::Mapping::new();
        m.insert(yaml_str("sec"), INFINITE.0.into());
        m.insert(yaml_str("nsec"), INFINITE.1.into());
        serde_yaml::Value::Mapping(m)
    };
    let mut p = serde_yaml::Mapping::new();
    p.insert(yaml_str("history"), history);
    p.insert(yaml_str("depth"), u64::from(q.depth).into());
    p.insert(yaml_str("reliability"), reliability);
    p.insert(yaml_str("durability"), durability);
    p.insert(yaml_str("deadline"), infinite());
    p.insert(yaml_str("lifespan"), infinite());
    p.insert(yaml_str("liveliness"), liveliness);
    p.insert(yaml_str("liveliness_lease_duration"), infinite());
    p.insert(yaml_str("avoid_ros_namespace_conventions"), false.into());
    let seq = serde_yaml::Value::Sequence(vec![serde_yaml::Value::Mapping(p)]);
    // Serialising a tree of strings, numbers and booleans cannot fail.
    serde_yaml::to_string(&seq).unwrap_or_default()
}

fn yaml_str(s: &str) -> serde_yaml::Value {
    serde_yaml::Value::String(s.to_owned())
}

/// Path of part `n` of the recording `base`: `<stem>_<n>` plus `base`'s extension, in
/// `base`'s folder (`rec.mcap` -> `rec_0.mcap`, `rec` -> `rec_0`).
pub fn part_path(base: &Path, n: u32) -> PathBuf {
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match base.extension() {
        Some(ext) => format!("{stem}_{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}_{n}"),
    };
    base.with_file_name(name)
}

/// How [`McapRecorder`] writes: split limits and the ROS 2 distribution the QoS metadata is
/// written for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McapOptions {
    /// Start a new part before a frame whose message would take the part's message bytes
    /// (CDR, record overhead not counted) over this many bytes.
    pub split_size_bytes: Option<u64>,
    /// Start a new part before a frame received this long (ns of `log_time`) or longer after
    /// the part's first frame.
    pub split_duration_ns: Option<u64>,
    /// Encoding of `offered_qos_profiles` ([`offered_qos_profiles`]) and whether
    /// `topic_type_hash` is written (Jazzy).
    pub distro: Distro,
}

impl McapOptions {
    /// Whether the recording is split into `<stem>_<n>` parts.
    pub fn splits(&self) -> bool {
        self.split_size_bytes.is_some() || self.split_duration_ns.is_some()
    }
}

/// Errors of the recorder: file I/O or MCAP encoding. After one, the recording should be
/// dropped (the part being written has no summary).
#[derive(Debug, thiserror::Error)]
pub enum McapError {
    /// A part could not be created.
    #[error("create {}: {source}", path.display())]
    Create {
        /// The part's path.
        path: PathBuf,
        /// The error of `open(2)`.
        source: std::io::Error,
    },
    /// The MCAP writer failed (it writes through a buffer: an I/O error may show here).
    #[error("MCAP: {0}")]
    Mcap(#[from] ::mcap::McapError),
    /// Flushing or syncing a finished part failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The frame cannot be encoded as a `PointCloud2`.
    #[error(transparent)]
    Cdr(#[from] CdrError),
    /// A write after an earlier error that left no part open.
    #[error("MCAP recording already failed")]
    Failed,
    /// More than `u32::MAX` parts.
    #[error("too many MCAP parts")]
    TooManyParts,
}

/// One finished file of a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedFile {
    /// Its path.
    pub path: PathBuf,
    /// Messages (frames) in it.
    pub messages: u64,
}

/// The MCAP file being written.
struct Part {
    writer: ::mcap::Writer<BufWriter<File>>,
    path: PathBuf,
    schema: u16,
    /// The `sensor_msgs/msg/Imu` schema, added with the first IMU message.
    imu_schema: Option<u16>,
    /// Channel id by topic.
    channels: HashMap<String, u16>,
    messages: u64,
    /// CDR bytes of its messages.
    bytes: u64,
    first_log_ns: u64,
}

impl Part {
    fn create(path: PathBuf) -> Result<Self, McapError> {
        let file = match File::create(&path) {
            Ok(f) => f,
            Err(source) => return Err(McapError::Create { path, source }),
        };
        let mut writer = ::mcap::WriteOptions::new()
            .profile(PROFILE)
            .library(concat!("lidarxdp ", env!("CARGO_PKG_VERSION")))
            .compression(None)
            .create(BufWriter::new(file))?;
        let schema = writer.add_schema(
            POINTCLOUD2_SCHEMA_NAME,
            "ros2msg",
            POINTCLOUD2_SCHEMA.as_bytes(),
        )?;
        Ok(Part {
            writer,
            path,
            schema,
            imu_schema: None,
            channels: HashMap::new(),
            messages: 0,
            bytes: 0,
            first_log_ns: 0,
        })
    }

    /// Writes the summary and footer, flushes, and closes the file.
    fn finish(mut self) -> Result<RecordedFile, McapError> {
        self.writer.finish()?;
        let file = self
            .writer
            .into_inner()
            .into_inner()
            .map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(RecordedFile {
            path: self.path,
            messages: self.messages,
        })
    }
}

/// Writes received frames into an MCAP file, or a series of parts (module documentation).
pub struct McapRecorder {
    base: PathBuf,
    options: McapOptions,
    part: Option<Part>,
    done: Vec<RecordedFile>,
    metadata: BTreeMap<String, String>,
    /// Channel metadata of the IMU channels (the IMU's type hash for Jazzy).
    imu_metadata: BTreeMap<String, String>,
    /// IMU messages recorded per topic: their MCAP `sequence`.
    imu_sequence: HashMap<String, u64>,
}

impl std::fmt::Debug for McapRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McapRecorder")
            .field("base", &self.base)
            .field(
                "parts",
                &(self.done.len() + usize::from(self.part.is_some())),
            )
            .finish_non_exhaustive()
    }
}

impl McapRecorder {
    /// Creates (truncates) `path`, or its part 0 ([`part_path`]) when `options` splits.
    ///
    /// # Errors
    /// File creation or MCAP header errors.
    pub fn create(path: &Path, options: McapOptions) -> Result<Self, McapError> {
        let first = if options.splits() {
            part_path(path, 0)
        } else {
            path.to_path_buf()
        };
        let mut metadata = BTreeMap::new();
        metadata.insert(
            "offered_qos_profiles".to_owned(),
            offered_qos_profiles(options.distro),
        );
        let mut imu_metadata = metadata.clone();
        if options.distro == Distro::Jazzy {
            metadata.insert(
                "topic_type_hash".to_owned(),
                options.distro.pointcloud2_type_hash().to_owned(),
            );
            imu_metadata.insert(
                "topic_type_hash".to_owned(),
                lidarxdp_core::ros2::IMU.rihs01.to_owned(),
            );
        }
        Ok(McapRecorder {
            base: path.to_path_buf(),
            options,
            part: Some(Part::create(first)?),
            done: Vec::new(),
            metadata,
            imu_metadata,
            imu_sequence: HashMap::new(),
        })
    }

    /// Appends `frame` (received over TCP) on the channel [`topic_for`] its sensor, named
    /// `sensor_name` (also the message's `header.frame_id`), starting a new part first when a
    /// split limit says so; `log_time_ns` is the local receive time (ns since the Unix epoch),
    /// the publish time the frame's `host_ns`.
    ///
    /// # Errors
    /// [`McapError`]: MCAP encoding or I/O errors (the recording should then be dropped).
    pub fn write(
        &mut self,
        frame: &ReceivedFrame,
        sensor_name: &str,
        log_time_ns: u64,
    ) -> Result<(), McapError> {
        let data = pointcloud2_cdr(frame, sensor_name)?;
        let h = frame.header();
        self.write_cdr(
            &topic_for(sensor_name),
            &data,
            h.sequence,
            log_time_ns,
            h.host_ns,
        )
    }

    /// Appends one CDR-encoded `sensor_msgs/msg/PointCloud2` message (e.g. as read from zenoh:
    /// encapsulation header included) on the channel of `topic`, a fully qualified ROS 2 topic,
    /// starting a new part first when a split limit says so. `sequence` is written as its low
    /// 32 bits; `log_time_ns` is the local receive time and `publish_time_ns` the publisher's
    /// (ns since the Unix epoch). The bytes are not checked.
    ///
    /// # Errors
    /// [`McapError`]: MCAP encoding or I/O errors (the recording should then be dropped).
    pub fn write_cdr(
        &mut self,
        topic: &str,
        data: &[u8],
        sequence: u64,
        log_time_ns: u64,
        publish_time_ns: u64,
    ) -> Result<(), McapError> {
        self.write_on(topic, false, data, sequence, (log_time_ns, publish_time_ns))
    }

    /// Appends an IMU reading of sensor `sensor_name` (received over TCP,
    /// [`lidarxdp_core::protocol::MSG_IMU`]) as a CDR `sensor_msgs/msg/Imu`
    /// ([`lidarxdp_core::ros2::imu_message`]: m/s², rad/s, orientation unknown) on the channel
    /// [`imu_topic_for`] the sensor, `header.frame_id` `<sensor_name>_imu`, `header.stamp` the
    /// reading's stamp; `log_time_ns` is the local receive time, the publish time the
    /// reading's `host_ns`, the MCAP `sequence` the count of IMU messages on that channel.
    ///
    /// # Errors
    /// [`McapError`]: a NUL byte in the name, MCAP encoding or I/O errors.
    pub fn write_imu(
        &mut self,
        imu: &lidarxdp_core::protocol::ImuMessage,
        sensor_name: &str,
        log_time_ns: u64,
    ) -> Result<(), McapError> {
        let r = &imu.reading;
        let data = lidarxdp_core::ros2::imu_message(
            r.stamp_ns,
            &format!("{sensor_name}_imu"),
            r.sample.angular_velocity(),
            r.sample.linear_acceleration(),
        )?;
        let topic = imu_topic_for(sensor_name);
        let seq = self.imu_sequence.entry(topic.clone()).or_default();
        let sequence = *seq;
        *seq += 1;
        self.write_on(&topic, true, &data, sequence, (log_time_ns, r.host_ns))
    }

    /// Appends one message on `topic`: a PointCloud2 channel, or an Imu one when `imu`.
    fn write_on(
        &mut self,
        topic: &str,
        imu: bool,
        data: &[u8],
        sequence: u64,
        (log_time_ns, publish_time_ns): (u64, u64),
    ) -> Result<(), McapError> {
        if self.needs_new_part(data.len() as u64, log_time_ns) {
            self.rotate()?;
        }
        let Some(part) = self.part.as_mut() else {
            return Err(McapError::Failed);
        };
        let channel = match part.channels.get(topic) {
            Some(&c) => c,
            None => {
                let (schema, metadata) = if imu {
                    let s = match part.imu_schema {
                        Some(s) => s,
                        None => {
                            let s = part.writer.add_schema(
                                lidarxdp_core::ros2::IMU_SCHEMA_NAME,
                                "ros2msg",
                                lidarxdp_core::ros2::IMU_SCHEMA.as_bytes(),
                            )?;
                            part.imu_schema = Some(s);
                            s
                        }
                    };
                    (s, &self.imu_metadata)
                } else {
                    (part.schema, &self.metadata)
                };
                let c = part.writer.add_channel(schema, topic, "cdr", metadata)?;
                part.channels.insert(topic.to_owned(), c);
                c
            }
        };
        part.writer.write_to_known_channel(
            &::mcap::records::MessageHeader {
                channel_id: channel,
                sequence: sequence as u32,
                log_time: log_time_ns,
                publish_time: publish_time_ns,
            },
            data,
        )?;
        if part.messages == 0 {
            part.first_log_ns = log_time_ns;
        }
        part.messages += 1;
        part.bytes += data.len() as u64;
        Ok(())
    }

    fn needs_new_part(&self, len: u64, log_time_ns: u64) -> bool {
        let Some(p) = &self.part else {
            return false;
        };
        p.messages > 0
            && (self
                .options
                .split_size_bytes
                .is_some_and(|max| p.bytes + len > max)
                || self
                    .options
                    .split_duration_ns
                    .is_some_and(|max| log_time_ns.saturating_sub(p.first_log_ns) >= max))
    }

    /// Finishes the current part and opens the next one.
    fn rotate(&mut self) -> Result<(), McapError> {
        if let Some(p) = self.part.take() {
            self.done.push(p.finish()?);
        }
        let n = u32::try_from(self.done.len()).map_err(|_| McapError::TooManyParts)?;
        self.part = Some(Part::create(part_path(&self.base, n))?);
        Ok(())
    }

    /// The files finished so far (each a complete MCAP), in order.
    pub fn finished(&self) -> &[RecordedFile] {
        &self.done
    }

    /// The file being written.
    pub fn current(&self) -> Option<&Path> {
        self.part.as_ref().map(|p| p.path.as_path())
    }

    /// Writes the current part's summary and footer and closes it; returns every file of the
    /// recording in order.
    ///
    /// # Errors
    /// MCAP or I/O errors.
    pub fn finish(mut self) -> Result<Vec<RecordedFile>, McapError> {
        if let Some(p) = self.part.take() {
            self.done.push(p.finish()?);
        }
        Ok(std::mem::take(&mut self.done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lidarxdp-record-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// (topic, sequence, log_time) of every message of `path`, and its header profile.
    fn read(path: &Path) -> (String, Vec<(String, u32, u64)>) {
        let bytes = std::fs::read(path).unwrap();
        let summary = ::mcap::Summary::read(&bytes).unwrap().expect("summary");
        assert!(!summary.chunk_indexes.is_empty(), "chunk indexes");
        let msgs = ::mcap::MessageStream::new(&bytes)
            .unwrap()
            .map(|m| {
                let m = m.unwrap();
                (m.channel.topic.clone(), m.sequence, m.log_time)
            })
            .collect();
        let profile = match ::mcap::read::LinearReader::new(&bytes).unwrap().next() {
            Some(Ok(::mcap::records::Record::Header(h))) => h.profile,
            r => panic!("first record {r:?}"),
        };
        (profile, msgs)
    }

    #[test]
    fn parts_are_named_like_rosbag2() {
        assert_eq!(
            part_path(Path::new("/d/rec.mcap"), 0),
            Path::new("/d/rec_0.mcap")
        );
        assert_eq!(
            part_path(Path::new("rec.x.mcap"), 12),
            Path::new("rec.x_12.mcap")
        );
        assert_eq!(part_path(Path::new("/d/rec"), 3), Path::new("/d/rec_3"));
    }

    #[test]
    fn topics_are_ros_names() {
        assert_eq!(topic_for("VLP16"), "/lidar/VLP16/points");
        assert_eq!(topic_for("front-left"), "/lidar/front_left/points");
        assert_eq!(topic_for("3d  lidar!"), "/lidar/s3d_lidar/points");
        assert_eq!(topic_for("--"), "/lidar/sensor/points");
    }

    #[test]
    fn qos_yaml_is_rosbag2s() {
        let inf = "  deadline:\n    sec: 9223372036\n    nsec: 854775807\n";
        let jazzy = offered_qos_profiles(Distro::Jazzy);
        assert!(
            jazzy.starts_with(
                "- history: keep_last\n  depth: 5\n  reliability: best_effort\n  \
                 durability: volatile\n"
            ),
            "{jazzy}"
        );
        assert!(jazzy.contains(inf), "{jazzy}");
        assert!(jazzy.contains("  liveliness: automatic\n"), "{jazzy}");
        assert!(
            jazzy.ends_with("  avoid_ros_namespace_conventions: false\n"),
            "{jazzy}"
        );
        let humble = offered_qos_profiles(Distro::Humble);
        assert!(
            humble.starts_with("- history: 1\n  depth: 5\n  reliability: 2\n  durability: 2\n"),
            "{humble}"
        );
        assert!(humble.contains("  liveliness: 1\n"), "{humble}");
    }

    /// Size split: a part takes messages while their bytes stay within the limit; a message
    /// larger than the limit gets a part of its own; no part is empty.
    #[test]
    fn splits_by_size_between_messages() {
        let d = scratch("size");
        let base = d.join("rec.mcap");
        let mut r = McapRecorder::create(
            &base,
            McapOptions {
                split_size_bytes: Some(1000),
                ..McapOptions::default()
            },
        )
        .unwrap();
        for (seq, len) in [(0u64, 400usize), (1, 600), (2, 1), (3, 2000), (4, 10)] {
            r.write_cdr("/lidar/a/points", &vec![0u8; len], seq, 1000 + seq, 7)
                .unwrap();
        }
        let files = r.finish().unwrap();
        let counts: Vec<_> = files.iter().map(|f| f.messages).collect();
        assert_eq!(counts, vec![2, 1, 1, 1]);
        for (i, f) in files.iter().enumerate() {
            assert_eq!(f.path, d.join(format!("rec_{i}.mcap")));
        }
        let seqs: Vec<Vec<u32>> = files
            .iter()
            .map(|f| {
                let (profile, m) = read(&f.path);
                assert_eq!(profile, "ros2");
                m.iter()
                    .map(|(t, s, _)| {
                        assert_eq!(t, "/lidar/a/points");
                        *s
                    })
                    .collect()
            })
            .collect();
        assert_eq!(seqs, vec![vec![0, 1], vec![2], vec![3], vec![4]]);
        assert!(!base.exists(), "a split recording has no unsuffixed file");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Duration split by log time, with two sensors: each part has the channels of the
    /// sensors it holds, with the QoS metadata.
    #[test]
    fn splits_by_duration() {
        let d = scratch("duration");
        let base = d.join("rec");
        let mut r = McapRecorder::create(
            &base,
            McapOptions {
                split_duration_ns: Some(1_000),
                distro: Distro::Jazzy,
                ..McapOptions::default()
            },
        )
        .unwrap();
        for (seq, t) in [
            (0u64, 10_000u64),
            (1, 10_500),
            (2, 10_999),
            (3, 11_000),
            (4, 13_000),
        ] {
            let name = if seq % 2 == 0 { "front" } else { "rear" };
            r.write_cdr(&topic_for(name), b"x", seq, t, t).unwrap();
        }
        let files = r.finish().unwrap();
        let counts: Vec<_> = files.iter().map(|f| f.messages).collect();
        assert_eq!(counts, vec![3, 1, 1]);
        let (_, m) = read(&d.join("rec_0"));
        assert_eq!(
            m,
            vec![
                ("/lidar/front/points".into(), 0, 10_000),
                ("/lidar/rear/points".into(), 1, 10_500),
                ("/lidar/front/points".into(), 2, 10_999)
            ]
        );
        let bytes = std::fs::read(d.join("rec_1")).unwrap();
        let summary = ::mcap::Summary::read(&bytes).unwrap().unwrap();
        assert_eq!(summary.channels.len(), 1);
        let c = summary.channels.values().next().unwrap();
        assert_eq!(c.topic, "/lidar/rear/points");
        assert_eq!(
            c.metadata["offered_qos_profiles"],
            offered_qos_profiles(Distro::Jazzy)
        );
        assert_eq!(
            c.metadata["topic_type_hash"],
            lidarxdp_core::ros2::POINTCLOUD2_TYPE_HASH_RIHS01
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Without limits the file is the path given, finished even when empty.
    #[test]
    fn unsplit_recording_keeps_its_name() {
        let d = scratch("plain");
        let base = d.join("rec.mcap");
        let r = McapRecorder::create(&base, McapOptions::default()).unwrap();
        let files = r.finish().unwrap();
        assert_eq!(
            files,
            vec![RecordedFile {
                path: base.clone(),
                messages: 0
            }]
        );
        let bytes = std::fs::read(&base).unwrap();
        let summary = ::mcap::Summary::read(&bytes).unwrap().unwrap();
        assert_eq!(summary.stats.unwrap().message_count, 0);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
