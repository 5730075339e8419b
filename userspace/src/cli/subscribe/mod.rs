//! `lidarxdp subscribe ADDR`: one line (or JSON object) per frame, or statistics, optional PCD
//! and MCAP output, and a readable summary on stderr at the end. `ADDR` is the daemon's TCP
//! address, or `zenoh:/topic` for its ROS 2 topic over zenoh (read in place from shared memory
//! on the same host).
//!
//! One loop ([`run`]) serves both: a [`FrameSource`] (`lidarxdp_client`'s [`Subscriber`], or
//! `lidarxdp_client::zenoh`'s reader) yields each frame as a [`Got`] (its header values, and
//! its points in place), and the loop prints, counts and writes it (`--stats`, `--json`,
//! `--pcd`, `--mcap`).
//!
//! SIGINT and SIGTERM stop it cleanly: the frame being received is dropped, the MCAP recording
//! is finished (summary, chunk indexes, footer), the summary printed, and the exit code is 0.
//! A second signal during that exits at once with 128 + the signal number.
//!
//! [`run`]: run::run
//! [`FrameSource`]: source::FrameSource
//! [`Got`]: source::Got
//! [`Subscriber`]: lidarxdp_client::Subscriber
mod output;
mod run;
mod source;
mod stats;
mod stop;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Result, bail};

use output::{Out, report_summary};
use run::run;
use source::open_tcp;
#[cfg(feature = "zenoh")]
use source::open_zenoh;
use stop::Stop;

/// `--split-size` range, MB (10^6 bytes).
const SPLIT_SIZE_MB: std::ops::RangeInclusive<u64> = 1..=1_048_576;
/// `--split-duration` range, seconds (one week at most).
const SPLIT_DURATION_S: std::ops::RangeInclusive<u64> = 1..=604_800;

/// `lidarxdp subscribe` arguments.
#[derive(clap::Args)]
pub struct SubscribeArgs {
    /// Daemon address `HOST:PORT`, or `zenoh:/TOPIC` to read the ROS 2 topic (e.g.
    /// `zenoh:/lidar/front/points`) over zenoh.
    #[arg(value_name = "ADDR", default_value = "127.0.0.1:7510")]
    addr: Source,
    /// Subscribe to this sensor, by name (repeatable; default: all sensors).
    #[arg(long = "sensor", value_name = "NAME")]
    sensors: Vec<String>,
    /// Point fields to receive, comma-separated, e.g. `x,y,z,intensity` (default: all).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    fields: Vec<String>,
    /// Print statistics once per second (frames/s, MB/s, drops, latency) instead of one line
    /// per frame.
    #[arg(long)]
    stats: bool,
    /// Print one JSON object per frame instead of a text line (`sensor` name, `seq`,
    /// `start_ns`, `host_ns`, `clock`, `points`, `packets`, `expected_packets`, `malformed`,
    /// `frames_lost_before`; zenoh: `topic`, `seq`, `stamp_ns`, `frame_id`, `points`, `shm`,
    /// `latency_us`), then one `{"summary": {...}}` object (docs/seeing-and-recording.md).
    #[arg(long, conflicts_with = "stats")]
    json: bool,
    /// Write every frame as `<DIR>/<sensor name>_<sequence, 6 digits>.pcd` with its layout's
    /// fields (needs all fields;
    /// `zenoh:`: the message's `frame_id` and rmw_zenoh sequence number).
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Record every frame into this MCAP file as ROS 2 `sensor_msgs/msg/PointCloud2` (CDR,
    /// profile `ros2`), one channel `/lidar/<sensor name>/points` per sensor (`zenoh:`: the
    /// topic, each message as received); `ros2 bag play` and Foxglove open it. Finished
    /// cleanly on SIGINT/SIGTERM.
    #[arg(long, value_name = "FILE")]
    mcap: Option<PathBuf>,
    /// `--mcap`: start a new file before a frame that would take the current one over MB
    /// megabytes (10^6 bytes of messages), 1..=1048576. Files are then `<stem>_0.mcap`,
    /// `<stem>_1.mcap`, ... (rosbag2's naming), each complete.
    #[arg(long, value_name = "MB")]
    split_size: Option<u64>,
    /// `--mcap`: start a new file before the first frame received S seconds or more after the
    /// current file's first frame, 1..=604800; naming as `--split-size`.
    #[arg(long, value_name = "S")]
    split_duration: Option<u64>,
    /// Exit after this many frames (at least 1).
    #[arg(long)]
    frames: Option<u64>,
    /// TCP only: keep retrying the connection for this long (ms) while the daemon starts.
    #[arg(long, default_value_t = 0)]
    connect_timeout_ms: u64,
    /// Create this file once connected (for scripts).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write the summary object (`frames`, `points`, `gaps`, ...: the `summary` of `--json`)
    /// here at the end.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// `zenoh:` only: zenoh's JSON5 configuration file (default: rmw_zenoh's, a peer of the
    /// router at tcp/localhost:7447).
    #[arg(long, value_name = "FILE")]
    zenoh_config: Option<PathBuf>,
    /// `zenoh:` only: ROS domain id, 0..=232 (default: $ROS_DOMAIN_ID, else 0).
    #[arg(long, value_name = "N")]
    ros_domain_id: Option<u32>,
    /// ROS 2 distribution, `jazzy` (default) or `humble`: with `zenoh:`, the publisher's;
    /// with `--mcap`, the rosbag2 that will read the file (how `offered_qos_profiles` is
    /// written).
    #[arg(long, value_name = "DISTRO")]
    ros_distro: Option<lidarxdp_core::ros2::Distro>,
    /// `zenoh:` only: exit once no message came for this long (ms) after the first one
    /// (zenoh has no end of stream); default: run until `--frames` or a signal.
    #[arg(long, value_name = "MS")]
    idle_exit_ms: Option<u64>,
}

/// Where `subscribe` reads frames from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The daemon's TCP publisher.
    Tcp(SocketAddr),
    /// A ROS 2 topic over zenoh (`zenoh:/lidar/front/points`).
    Zenoh(String),
}

/// An `ADDR` that is neither `HOST:PORT` nor `zenoh:/TOPIC` with a valid ROS 2 topic.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `zenoh:` followed by a name that is not a valid ROS 2 topic.
    #[error(transparent)]
    Topic(#[from] lidarxdp_core::ros2::NameError),
    /// Not `zenoh:` and not a socket address.
    #[error("{0:?} is neither HOST:PORT nor zenoh:/TOPIC (e.g. zenoh:/lidar/front/points)")]
    Neither(String),
}

impl FromStr for Source {
    type Err = SourceError;

    fn from_str(s: &str) -> Result<Self, SourceError> {
        match s.strip_prefix("zenoh:") {
            Some(topic) => {
                lidarxdp_core::ros2::validate_topic("ADDR", topic)?;
                Ok(Source::Zenoh(topic.to_owned()))
            }
            None => s
                .parse()
                .map(Source::Tcp)
                .map_err(|_| SourceError::Neither(s.to_owned())),
        }
    }
}

/// Refuses flags that conflict or do not apply, before anything is opened or connected.
fn check_flags(a: &SubscribeArgs) -> Result<()> {
    let zenoh = matches!(a.addr, Source::Zenoh(_));
    let split = [
        ("--split-size", a.split_size.is_some()),
        ("--split-duration", a.split_duration.is_some()),
    ];
    if zenoh {
        let tcp_only = [
            ("--sensor", !a.sensors.is_empty()),
            ("--fields", !a.fields.is_empty()),
            ("--connect-timeout-ms", a.connect_timeout_ms != 0),
        ];
        for (flag, given) in tcp_only {
            if given {
                bail!(
                    "{flag}: not available with a zenoh:/TOPIC address (one topic is one sensor)"
                );
            }
        }
    } else {
        for (flag, given) in [
            ("--zenoh-config", a.zenoh_config.is_some()),
            ("--ros-domain-id", a.ros_domain_id.is_some()),
            ("--idle-exit-ms", a.idle_exit_ms.is_some()),
        ] {
            if given {
                bail!("{flag}: only meaningful with a zenoh:/TOPIC address");
            }
        }
        if a.ros_distro.is_some() && a.mcap.is_none() {
            bail!("--ros-distro: only meaningful with a zenoh:/TOPIC address or with --mcap");
        }
    }
    if a.pcd.is_some() && !a.fields.is_empty() && !all_fields(&a.fields) {
        bail!(
            "--pcd and --fields {}: PCD files hold every point field; drop --fields",
            a.fields.join(",")
        );
    }
    if a.mcap.is_none() {
        for (flag, given) in split {
            if given {
                bail!("{flag}: only with --mcap FILE (it splits the recording)");
            }
        }
    }
    if let Some(mb) = a.split_size
        && !SPLIT_SIZE_MB.contains(&mb)
    {
        bail!(
            "--split-size {mb}: out of range {}..={} (MB)",
            SPLIT_SIZE_MB.start(),
            SPLIT_SIZE_MB.end()
        );
    }
    if let Some(s) = a.split_duration
        && !SPLIT_DURATION_S.contains(&s)
    {
        bail!(
            "--split-duration {s}: out of range {}..={} (seconds)",
            SPLIT_DURATION_S.start(),
            SPLIT_DURATION_S.end()
        );
    }
    if a.frames == Some(0) {
        bail!("--frames 0: out of range 1..");
    }
    Ok(())
}

/// Whether `fields` names every point field of some layout in its order (the only subset
/// request that still delivers that layout's records).
fn all_fields(fields: &[String]) -> bool {
    lidarxdp_core::layout::POINT_TYPES.iter().any(|t| {
        let all = t.fields();
        fields.len() == all.len() && fields.iter().zip(all.iter()).all(|(f, p)| f == p.name)
    })
}

/// Checks the flags, installs the signal handlers, opens the source (TCP or zenoh) and runs
/// the loop.
pub fn subscribe(a: SubscribeArgs) -> Result<()> {
    check_flags(&a)?;
    let stop = Stop::install()?;
    let (mut src, from) = match &a.addr {
        Source::Tcp(addr) => match open_tcp(&a, *addr, &stop)? {
            Ok(src) => (src, addr.to_string()),
            Err(why) => {
                let summary = serde_json::json!({
                    "frames": 0, "points": 0, "gaps": 0, "stopped_by": why.text(), "sensors": {},
                });
                let line = format!("0 frames (stopped by {})", why.text());
                return report_summary(&a, &mut Out::new(), &addr.to_string(), line, summary);
            }
        },
        #[cfg(feature = "zenoh")]
        Source::Zenoh(topic) => (open_zenoh(&a, topic)?, format!("zenoh:{topic}")),
        #[cfg(not(feature = "zenoh"))]
        Source::Zenoh(_) => bail!(
            "zenoh:/TOPIC: this lidarxdp was built without the `zenoh` feature (the demo's \
             build); build the full daemon with `cargo xtask build`"
        ),
    };
    run(&a, &mut src, &from, &stop)
}

#[cfg(test)]
mod tests {
    use super::output::{describe, file_token, files_text};
    use super::stats::Tally;
    use super::*;
    use lidarxdp_client::mcap::RecordedFile;
    use lidarxdp_core::protocol::Subscribe;

    #[test]
    fn file_tokens_and_descriptions() {
        assert_eq!(file_token("VLP16"), "VLP16");
        assert_eq!(file_token("front/left 2"), "front_left_2");
        let want = Subscribe {
            sensors: vec!["front".into(), "rear".into()],
            fields: vec!["x".into(), "y".into()],
            ..Subscribe::default()
        };
        assert_eq!(describe(&want), "sensors front, rear, fields x,y");
        assert_eq!(describe(&Subscribe::default()), "all sensors, all fields");
    }

    #[test]
    fn full_field_list_is_recognised() {
        let all: Vec<String> = lidarxdp_core::point::POINT_FIELDS
            .iter()
            .map(|f| f.name.to_owned())
            .collect();
        assert!(all_fields(&all));
        assert!(!all_fields(&all[..3]));
        let mut swapped = all.clone();
        swapped.swap(0, 1);
        assert!(!all_fields(&swapped));
    }

    #[test]
    fn tally_counts_gaps() {
        let mut t = Tally::default();
        for s in [3, 4, 7, 8] {
            t.add(s, 10);
        }
        assert_eq!((t.frames, t.points, t.gaps), (4, 40, 2));
    }

    #[test]
    fn files_text_names_the_range() {
        let f = |p: &str| RecordedFile {
            path: p.into(),
            messages: 1,
        };
        assert_eq!(files_text(&[f("a.mcap")]), "a.mcap");
        assert_eq!(
            files_text(&[f("a_0.mcap"), f("a_1.mcap"), f("a_2.mcap")]),
            "3 files a_0.mcap .. a_2.mcap"
        );
    }
}
