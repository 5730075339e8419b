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
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lidarxdp_client::mcap::{McapError, McapOptions, McapRecorder, RecordedFile};
#[cfg(feature = "zenoh")]
use lidarxdp_client::zenoh::{
    SessionConfig, ZenohFrame, ZenohFrameError, ZenohSubscriber, layout_points_of,
};
use lidarxdp_client::{ReceivedFrame, Subscriber};
use lidarxdp_core::frame::{FrameClock, FrameHeader};
use lidarxdp_core::layout::PointType;
use lidarxdp_core::protocol::Subscribe;
#[cfg(feature = "zenoh")]
use lidarxdp_core::ros2::PointCloud2View;
use signal_hook::consts::{SIGINT, SIGTERM};

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

/// SIGINT/SIGTERM handling: a flag the loops poll, and a thread that shuts the TCP stream
/// down so that a blocked read returns at once.
struct Stop {
    /// The signal number received, 0 while none.
    signal: Arc<AtomicUsize>,
    stream: Arc<Mutex<Option<TcpStream>>>,
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stop {
    /// Installs the handlers. For each signal, in this order: exit at once with 128 + signal
    /// if a signal already came (signal-hook's conditional shutdown), record the signal, set
    /// the flag; the thread then wakes the reader.
    fn install() -> Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let signal = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, flag.clone())
                .context("install signal handler")?;
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
                .context("install signal handler")?;
            signal_hook::flag::register(sig, flag.clone()).context("install signal handler")?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("install signal handler")?;
        let handle = signals.handle();
        let stream: Arc<Mutex<Option<TcpStream>>> = Arc::new(Mutex::new(None));
        let watched = stream.clone();
        let thread = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    if let Some(s) = watched.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
            })
            .context("spawn the signal thread")?;
        Ok(Stop {
            signal,
            stream,
            handle,
            thread: Some(thread),
        })
    }

    /// The signal received, if any.
    fn signal(&self) -> Option<StopReason> {
        match self.signal.load(Ordering::SeqCst) as i32 {
            0 => None,
            SIGINT => Some(StopReason::Signal("SIGINT")),
            SIGTERM => Some(StopReason::Signal("SIGTERM")),
            _ => Some(StopReason::Signal("signal")),
        }
    }

    /// Shuts `stream` down when a signal comes (at once if one already came).
    fn watch(&self, stream: &TcpStream) -> Result<()> {
        let clone = stream.try_clone().context("clone the TCP stream")?;
        *self.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(clone);
        if self.signal().is_some() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Ok(())
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why the stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopReason {
    /// The server closed the connection between two frames.
    EndOfStream,
    /// `--frames` frames arrived.
    Frames,
    /// zenoh: `--idle-exit-ms` passed without a message.
    #[cfg_attr(not(feature = "zenoh"), allow(dead_code))]
    Idle,
    /// SIGINT or SIGTERM.
    Signal(&'static str),
    /// An error (reported after the summary).
    Error,
}

impl StopReason {
    fn text(self) -> &'static str {
        match self {
            StopReason::EndOfStream => "end of stream",
            StopReason::Frames => "--frames",
            StopReason::Idle => "--idle-exit-ms",
            StopReason::Signal(s) => s,
            StopReason::Error => "error",
        }
    }
}

/// Per-second statistics of `--stats`.
#[derive(Default)]
struct Window {
    frames: u64,
    bytes: u64,
    /// Frame age at receipt: local receive time minus the frame's `host_ns` (first packet), µs.
    ages_us: Vec<u64>,
}

impl Window {
    fn report(&mut self, out: &mut Out, secs: f64, gaps_total: u64, gaps_before: &mut u64) {
        self.ages_us.sort_unstable();
        let q = |p: f64| {
            self.ages_us
                .get(((self.ages_us.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        out.line(&format!(
            "{:.1} frames/s  {:.1} MB/s  drops {}  latency since first packet p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            self.frames as f64 / secs,
            self.bytes as f64 / secs / 1e6,
            gaps_total - *gaps_before,
            q(0.5) as f64 / 1e3,
            q(0.99) as f64 / 1e3,
            self.ages_us.last().copied().unwrap_or(0) as f64 / 1e3,
        ));
        *gaps_before = gaps_total;
        *self = Window::default();
    }
}

/// Standard output, where a closed pipe (`| head`) ends the listing but not the recording.
struct Out {
    out: std::io::Stdout,
    open: bool,
}

impl Out {
    fn new() -> Self {
        Out {
            out: std::io::stdout(),
            open: true,
        }
    }

    fn line(&mut self, s: &str) {
        if self.open && writeln!(self.out.lock(), "{s}").is_err() {
            self.open = false;
        }
    }
}

/// Frames, points and sequence gaps of one sensor (or topic).
#[derive(Clone, Copy, Default)]
struct Tally {
    frames: u64,
    points: u64,
    gaps: u64,
    last_seq: Option<u64>,
}

impl Tally {
    fn add(&mut self, seq: u64, points: u64) {
        if let Some(prev) = self.last_seq
            && seq > prev.saturating_add(1)
        {
            self.gaps += seq - prev - 1;
        }
        self.last_seq = Some(seq);
        self.frames += 1;
        self.points += points;
    }
}

/// The tallies of every sensor, by name.
#[derive(Default)]
struct Totals(BTreeMap<String, Tally>);

impl Totals {
    /// Counts a frame of `key` (sensor or topic).
    fn add(&mut self, key: &str, seq: u64, points: u64) {
        match self.0.get_mut(key) {
            Some(t) => t.add(seq, points),
            None => self.0.entry(key.to_owned()).or_default().add(seq, points),
        }
    }

    fn sum(&self) -> Tally {
        self.0.values().fold(Tally::default(), |a, t| Tally {
            frames: a.frames + t.frames,
            points: a.points + t.points,
            gaps: a.gaps + t.gaps,
            last_seq: None,
        })
    }

    fn json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|(k, t)| {
                (
                    k.clone(),
                    serde_json::json!({"frames": t.frames, "points": t.points, "gaps": t.gaps}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// `12 frames, 178068 points, 0 gaps`, then `; front: ...; rear: ...` with several.
    fn text(&self) -> String {
        let t = self.sum();
        let mut s = format!("{} frames, {} points, {} gaps", t.frames, t.points, t.gaps);
        if self.0.len() > 1 {
            for (name, t) in &self.0 {
                s.push_str(&format!(
                    "; {name}: {} frames, {} points, {} gaps",
                    t.frames, t.points, t.gaps
                ));
            }
        }
        s
    }
}

fn clock_name(c: FrameClock) -> &'static str {
    match c {
        FrameClock::Sensor => "sensor",
        FrameClock::Host => "host",
    }
}

/// The JSON object of one frame (`--json`).
fn frame_json(name: &str, h: &FrameHeader, points: usize) -> serde_json::Value {
    serde_json::json!({
        "sensor": name,
        "seq": h.sequence,
        "start_ns": h.start_ns,
        "host_ns": h.host_ns,
        "clock": clock_name(h.clock),
        "points": points,
        "packets": h.packets_received,
        "expected_packets": h.packets_expected,
        "malformed": h.packets_malformed,
        "frames_lost_before": h.frames_lost_before,
    })
}

/// The text line of one frame.
fn frame_line(name: &str, h: &FrameHeader, points: usize) -> String {
    format!(
        "frame sensor={name} seq={} start_ns={} host_ns={} points={points} packets={}/{} \
         malformed={} frames_lost_before={} clock={}",
        h.sequence,
        h.start_ns,
        h.host_ns,
        h.packets_received,
        h.packets_expected,
        h.packets_malformed,
        h.frames_lost_before,
        clock_name(h.clock)
    )
}

/// A sensor name as a file-name part: bytes other than ASCII letters, digits, `.`, `-` and
/// `_` become `_` (`front/left` -> `front_left`).
fn file_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `sensors front, rear, fields x,y,z`: a subscription as people write it.
fn describe(want: &Subscribe) -> String {
    let sensors = if want.sensors.is_empty() {
        "all sensors".to_owned()
    } else {
        format!("sensors {}", want.sensors.join(", "))
    };
    let fields = if want.fields.is_empty() {
        "all fields".to_owned()
    } else {
        format!("fields {}", want.fields.join(","))
    };
    format!("{sensors}, {fields}")
}

/// Prints the readable summary on stderr and, with `--json`, the summary object; writes
/// `--summary-json`.
fn report_summary(
    a: &SubscribeArgs,
    out: &mut Out,
    from: &str,
    line: String,
    summary: serde_json::Value,
) -> Result<()> {
    eprintln!("subscribe {from}: {line}");
    if a.json {
        out.line(&serde_json::json!({ "summary": summary }).to_string());
    }
    if let Some(f) = &a.summary_json {
        std::fs::write(f, summary.to_string()).with_context(|| format!("write {}", f.display()))?;
    }
    Ok(())
}

/// `rec.mcap` or `rec_0.mcap .. rec_3.mcap`.
fn files_text(files: &[RecordedFile]) -> String {
    match files {
        [] => String::new(),
        [one] => one.path.display().to_string(),
        [first, .., last] => format!(
            "{} files {} .. {}",
            files.len(),
            first.path.display(),
            last.path.display()
        ),
    }
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

/// The receive time of a frame, ns since the Unix epoch: the one clock of `subscribe`.
fn receive_time_ns() -> u64 {
    lidarxdp::sys::clock::realtime_ns()
}

/// Where [`run`] reads frames from.
enum FrameSource {
    /// The daemon's TCP publisher: `lidarxdp_client`'s [`Subscriber`], with the sensor names
    /// of its hello (`sensor<id>` for an id it did not name), and the frame it reads into.
    Tcp {
        sub: Box<Subscriber>,
        addr: SocketAddr,
        names: HashMap<u16, String>,
        frame: ReceivedFrame,
    },
    /// A ROS 2 topic over zenoh: `lidarxdp_client::zenoh`'s reader, the message last read
    /// (its points are read in place), `--idle-exit-ms`, and the summary's own values:
    /// messages read from shared memory, `delivery_us` (receive time minus the publisher's
    /// put time in the rmw_zenoh attachment) and `age_us` (receive time minus `header.stamp`).
    #[cfg(feature = "zenoh")]
    Zenoh {
        sub: Box<ZenohSubscriber>,
        topic: String,
        current: Option<ZenohFrame>,
        idle: Option<Duration>,
        last_msg: Option<Instant>,
        in_shm: u64,
        delivery_us: Vec<u64>,
        age_us: Vec<u64>,
    },
}

/// One frame, whichever the source: what the outputs need, its points in place.
struct Got<'a> {
    /// The summary's key: the sensor name (TCP) or the topic (zenoh).
    key: &'a str,
    seq: u64,
    points: usize,
    /// Bytes received (`--stats` MB/s).
    bytes: usize,
    /// `--stats` latency, µs: receive time minus the frame's `host_ns` (its first packet at
    /// the daemon; TCP) or minus the publisher's put time (zenoh).
    latency_us: u64,
    received_ns: u64,
    from: GotFrom<'a>,
}

/// The source's own view of a [`Got`] frame.
enum GotFrom<'a> {
    Tcp(&'a ReceivedFrame),
    #[cfg(feature = "zenoh")]
    Zenoh {
        msg: &'a ZenohFrame,
        view: PointCloud2View<'a>,
        /// The cloud's layout and its `data` bytes.
        points: (PointType, &'a [u8]),
        /// rmw_zenoh's sequence number (0 without an attachment).
        seq: i64,
        /// The publisher's put time, ns (the attachment's; else the receive time).
        publish_ns: u64,
    },
}

/// Connects (retrying for `--connect-timeout-ms`) and subscribes as `--sensor` and `--fields`
/// ask; `Ok(Err(why))` when a signal came first.
fn open_tcp(
    a: &SubscribeArgs,
    addr: SocketAddr,
    stop: &Stop,
) -> Result<Result<FrameSource, StopReason>> {
    let want = Subscribe {
        sensors: a.sensors.clone(),
        fields: a.fields.clone(),
        ..Subscribe::default()
    };
    let deadline = Instant::now() + Duration::from_millis(a.connect_timeout_ms);
    let stream = loop {
        if let Some(why) = stop.signal() {
            return Ok(Err(why));
        }
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                log::debug!("connect {addr}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
        }
    };
    stop.watch(&stream)?;
    let stopped = || Ok(Err(stop.signal().unwrap_or(StopReason::Error)));
    let mut sub = match Subscriber::from_stream(stream) {
        Ok(s) => s,
        Err(_) if stop.signal().is_some() => return stopped(),
        Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
    };
    let mut names: HashMap<u16, String> = (sub.hello().sensors.iter())
        .map(|s| (s.id, s.name.clone()))
        .collect();
    if want != Subscribe::default() {
        let ack = match sub.subscribe(&want) {
            Ok(ack) => ack,
            Err(_) if stop.signal().is_some() => return stopped(),
            Err(e) => return Err(e).with_context(|| format!("subscribe to {}", describe(&want))),
        };
        let chosen: Vec<String> = (ack.sensor_ids.iter())
            .map(|&id| name_of(&mut names, id).clone())
            .collect();
        log::info!(
            "subscribed to {addr}: sensors {}, {}-byte points",
            chosen.join(", "),
            ack.point_step
        );
    } else {
        log::info!("subscribed to {addr}");
    }
    Ok(Ok(FrameSource::Tcp {
        sub: Box::new(sub),
        addr,
        names,
        frame: ReceivedFrame::default(),
    }))
}

/// The name of sensor `id`: the hello's, else `sensor<id>`.
fn name_of(names: &mut HashMap<u16, String>, id: u16) -> &String {
    names.entry(id).or_insert_with(|| format!("sensor{id}"))
}

/// Resolves the domain id and the session configuration (`--zenoh-config`, rmw_zenoh's
/// environment variables) and subscribes to `topic`.
#[cfg(feature = "zenoh")]
fn open_zenoh(a: &SubscribeArgs, topic: &str) -> Result<FrameSource> {
    let domain = lidarxdp_core::ros2::domain_id(
        a.ros_domain_id,
        std::env::var("ROS_DOMAIN_ID").ok().as_deref(),
    )?;
    // zenoh locks the publisher's segments it maps (mlock(2)): allow up to the hard limit.
    if let Err(e) = lidarxdp::sys::rlimit::memlock_to_hard() {
        log::debug!("RLIMIT_MEMLOCK: {e}");
    }
    let source = SessionConfig::from_env(a.zenoh_config.as_deref())?;
    let sub = ZenohSubscriber::open(&source, domain, topic, a.ros_distro.unwrap_or_default())?;
    log::info!("subscribed to {topic} (zenoh key {})", sub.key());
    Ok(FrameSource::Zenoh {
        sub: Box::new(sub),
        topic: topic.to_owned(),
        current: None,
        idle: a.idle_exit_ms.map(Duration::from_millis),
        last_msg: None,
        in_shm: 0,
        delivery_us: Vec::new(),
        age_us: Vec::new(),
    })
}

impl FrameSource {
    /// Waits for the next frame: `Err(Ok(why))` when the stream ended or a stop condition
    /// came (signal, `--idle-exit-ms`), `Err(Err(e))` on an error.
    /// Records the IMU readings received since the last call (TCP: protocol message `imu`)
    /// on their sensors' IMU channels; returns how many. Nothing for zenoh (one topic).
    fn record_imu(&mut self, mcap: &mut McapRecorder) -> Result<u64, McapError> {
        match self {
            FrameSource::Tcp { sub, names, .. } => {
                let mut n = 0;
                for imu in sub.take_imu() {
                    let name = name_of(names, imu.message.sensor_id);
                    mcap.write_imu(&imu.message, name, imu.received_ns)?;
                    n += 1;
                }
                Ok(n)
            }
            #[cfg(feature = "zenoh")]
            FrameSource::Zenoh { .. } => Ok(0),
        }
    }

    fn next(&mut self, stop: &Stop) -> Result<Got<'_>, Result<StopReason, anyhow::Error>> {
        match self {
            FrameSource::Tcp {
                sub,
                addr,
                names,
                frame,
            } => {
                match sub.next_frame_into(frame) {
                    Ok(true) => {}
                    Ok(false) => return Err(Ok(stop.signal().unwrap_or(StopReason::EndOfStream))),
                    Err(e) => {
                        return Err(stop.signal().ok_or_else(|| {
                            anyhow::Error::new(e).context(format!("receive from {addr}"))
                        }));
                    }
                }
                let received_ns = receive_time_ns();
                let h = frame.header();
                Ok(Got {
                    key: name_of(names, h.sensor_id),
                    seq: h.sequence,
                    points: frame.point_count(),
                    bytes: frame.payload_bytes().len(),
                    latency_us: received_ns.saturating_sub(h.host_ns) / 1000,
                    received_ns,
                    from: GotFrom::Tcp(&*frame),
                })
            }
            #[cfg(feature = "zenoh")]
            FrameSource::Zenoh {
                sub,
                topic,
                current,
                idle,
                last_msg,
                in_shm,
                delivery_us,
                age_us,
            } => {
                let msg = loop {
                    if let Some(why) = stop.signal() {
                        return Err(Ok(why));
                    }
                    if let Some(msg) = sub.recv_timeout(Duration::from_millis(50)) {
                        break msg;
                    }
                    if let (Some(idle), Some(t)) = (*idle, *last_msg)
                        && t.elapsed() >= idle
                    {
                        return Err(Ok(StopReason::Idle));
                    }
                };
                *last_msg = Some(Instant::now());
                let received_ns = receive_time_ns();
                let msg: &ZenohFrame = current.insert(msg);
                let on = |e: ZenohFrameError| {
                    Err::<StopReason, _>(
                        anyhow::Error::new(e).context(format!("message on {topic}")),
                    )
                };
                let view = msg.view().map_err(|e| on(e.into()))?;
                let points = layout_points_of(&view).map_err(on)?;
                let att = msg.attachment();
                let publish_ns = att.map_or(received_ns, |t| t.source_timestamp_ns.max(0) as u64);
                let seq = att.map_or(0, |t| t.sequence_number);
                let latency_us = att.map_or(0, |_| received_ns.saturating_sub(publish_ns) / 1000);
                *in_shm += u64::from(msg.in_shared_memory());
                delivery_us.push(latency_us);
                age_us.push(received_ns.saturating_sub(view.stamp_ns) / 1000);
                Ok(Got {
                    key: topic.as_str(),
                    seq: seq.max(0) as u64,
                    points: points.1.len() / points.0.point_step(),
                    bytes: msg.bytes().len(),
                    latency_us,
                    received_ns,
                    from: GotFrom::Zenoh {
                        msg,
                        view,
                        points,
                        seq,
                        publish_ns,
                    },
                })
            }
        }
    }

    /// Adds the source's own values to the summary object; returns the text that follows the
    /// counts in the readable summary.
    #[cfg(not(feature = "zenoh"))]
    fn summarize(&mut self, _summary: &mut serde_json::Value) -> String {
        String::new()
    }

    /// Adds the source's own values to the summary object; returns the text that follows the
    /// counts in the readable summary.
    #[cfg(feature = "zenoh")]
    fn summarize(&mut self, summary: &mut serde_json::Value) -> String {
        let FrameSource::Zenoh {
            in_shm,
            delivery_us,
            age_us,
            ..
        } = self
        else {
            return String::new();
        };
        summary["shm_frames"] = (*in_shm).into();
        summary["delivery_us"] = percentiles(delivery_us);
        summary["age_us"] = percentiles(age_us);
        format!(", {in_shm} read in place from shared memory")
    }
}

impl Got<'_> {
    /// The `--json` object (`json`) or the text line of the frame.
    fn text(&self, json: bool) -> String {
        match (&self.from, json) {
            (GotFrom::Tcp(f), true) => frame_json(self.key, f.header(), self.points).to_string(),
            (GotFrom::Tcp(f), false) => frame_line(self.key, f.header(), self.points),
            #[cfg(feature = "zenoh")]
            (GotFrom::Zenoh { msg, view, seq, .. }, true) => serde_json::json!({
                "topic": self.key, "seq": seq, "stamp_ns": view.stamp_ns,
                "frame_id": view.frame_id, "points": self.points,
                "shm": msg.in_shared_memory(), "latency_us": self.latency_us,
            })
            .to_string(),
            #[cfg(feature = "zenoh")]
            (GotFrom::Zenoh { msg, view, seq, .. }, false) => format!(
                "frame topic={} seq={seq} stamp_ns={} frame_id={} points={} shm={} latency_us={}",
                self.key,
                view.stamp_ns,
                view.frame_id,
                self.points,
                if msg.in_shared_memory() { "yes" } else { "no" },
                self.latency_us,
            ),
        }
    }

    /// The PCD file of the frame in `dir`, its layout and its points' bytes, `None` without a
    /// whole layout (a subset of fields): `<sensor name or frame_id>_<sequence>.pcd`.
    fn pcd(&self, dir: &Path) -> Option<(PathBuf, (PointType, &[u8]))> {
        let (name, points) = match &self.from {
            GotFrom::Tcp(f) => (self.key, (f.point_type()?, f.payload_bytes())),
            #[cfg(feature = "zenoh")]
            GotFrom::Zenoh { view, points, .. } => (view.frame_id, *points),
        };
        Some((
            dir.join(format!("{}_{:06}.pcd", file_token(name), self.seq)),
            points,
        ))
    }

    /// Appends the frame to the MCAP recording: a TCP frame encoded on its sensor's channel,
    /// a zenoh message as received on its topic's.
    fn record(&self, mcap: &mut McapRecorder) -> Result<(), McapError> {
        match &self.from {
            GotFrom::Tcp(f) => mcap.write(f, self.key, self.received_ns),
            #[cfg(feature = "zenoh")]
            GotFrom::Zenoh {
                msg, publish_ns, ..
            } => mcap.write_cdr(
                self.key,
                msg.bytes(),
                self.seq,
                self.received_ns,
                *publish_ns,
            ),
        }
    }
}

/// A write error of the MCAP recording, naming the file being written.
fn mcap_error(m: &McapRecorder, e: McapError) -> anyhow::Error {
    let at = m.current().map(|p| p.display().to_string());
    anyhow::Error::new(e).context(format!("write MCAP {}", at.unwrap_or_default()))
}

/// Prints, counts and writes every frame of `src` until it ends, `--frames` frames arrived,
/// or a signal; then finishes the MCAP recording and reports the summary (`from` names the
/// source in it).
fn run(a: &SubscribeArgs, src: &mut FrameSource, from: &str, stop: &Stop) -> Result<()> {
    let mut out = Out::new();
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut mcap = match &a.mcap {
        Some(p) => Some(
            McapRecorder::create(
                p,
                McapOptions {
                    split_size_bytes: a.split_size.map(|mb| mb * 1_000_000),
                    split_duration_ns: a.split_duration.map(|s| s * 1_000_000_000),
                    distro: a.ros_distro.unwrap_or_default(),
                },
            )
            .with_context(|| format!("create {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let mut totals = Totals::default();
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    let mut imu_recorded = 0u64;
    let mut error: Option<anyhow::Error> = None;
    let reason = loop {
        if let Some(why) = stop.signal() {
            break why;
        }
        let f = match src.next(stop) {
            Ok(f) => f,
            Err(Ok(why)) => break why,
            Err(Err(e)) => {
                error = Some(e);
                break StopReason::Error;
            }
        };
        if a.stats {
            window.frames += 1;
            window.bytes += f.bytes as u64;
            window.ages_us.push(f.latency_us);
            let el = window_start.elapsed();
            if el >= Duration::from_secs(1) {
                let gaps = totals.sum().gaps;
                window.report(&mut out, el.as_secs_f64(), gaps, &mut gaps_before);
                window_start = Instant::now();
            }
        } else {
            out.line(&f.text(a.json));
        }
        if let Some(dir) = &a.pcd {
            let Some((path, points)) = f.pcd(dir) else {
                error = Some(anyhow::anyhow!(
                    "--pcd needs all point fields (drop --fields)"
                ));
                break StopReason::Error;
            };
            let written = std::fs::File::create(&path).and_then(|file| {
                lidarxdp_client::pcd::write_layout(
                    std::io::BufWriter::new(file),
                    points.0,
                    points.1,
                )
            });
            if let Err(e) = written {
                error = Some(anyhow::Error::new(e).context(format!("write {}", path.display())));
                break StopReason::Error;
            }
        }
        if let Some(m) = mcap.as_mut()
            && let Err(e) = f.record(m)
        {
            error = Some(mcap_error(m, e));
            break StopReason::Error;
        }
        totals.add(f.key, f.seq, f.points as u64);
        if let Some(m) = mcap.as_mut() {
            match src.record_imu(m) {
                Ok(n) => imu_recorded += n,
                Err(e) => {
                    error = Some(mcap_error(m, e));
                    break StopReason::Error;
                }
            }
        }
        if a.frames.is_some_and(|n| totals.sum().frames >= n) {
            break StopReason::Frames;
        }
    };
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(&mut out, secs, totals.sum().gaps, &mut gaps_before);
    }
    let mut files = Vec::new();
    // IMU readings that came after the last frame.
    if let Some(m) = mcap.as_mut()
        && error.is_none()
    {
        match src.record_imu(m) {
            Ok(n) => imu_recorded += n,
            Err(e) => error = Some(anyhow::Error::new(e).context("write MCAP")),
        }
    }
    if let Some(m) = mcap {
        match m.finish() {
            Ok(f) => files = f,
            Err(e) => {
                let e = anyhow::Error::new(e).context("finish MCAP");
                error = Some(match error {
                    Some(first) => first.context(format!("{e:#}")),
                    None => e,
                });
            }
        }
    }
    let t = totals.sum();
    let mut summary = serde_json::json!({
        "frames": t.frames, "points": t.points, "gaps": t.gaps,
        "stopped_by": reason.text(), "sensors": totals.json(),
    });
    let extra = src.summarize(&mut summary);
    let mut line = format!("{}{extra} (stopped by {})", totals.text(), reason.text());
    if a.mcap.is_some() {
        summary["mcap"] = (files.iter())
            .map(|f| serde_json::json!({"path": f.path, "messages": f.messages}))
            .collect::<Vec<_>>()
            .into();
        summary["imu_recorded"] = imu_recorded.into();
        let messages: u64 = files.iter().map(|f| f.messages).sum();
        if !files.is_empty() {
            let frames = messages.saturating_sub(imu_recorded);
            let imu = if imu_recorded > 0 {
                format!(" and {imu_recorded} IMU readings")
            } else {
                String::new()
            };
            line.push_str(&format!(
                "; recorded {frames} frames{imu} in {}",
                files_text(&files)
            ));
        }
    }
    report_summary(a, &mut out, from, line, summary)?;
    error.map_or(Ok(()), Err)
}

/// `{"p50", "p99", "max"}` of `v` (nearest rank), nulls when empty.
#[cfg(feature = "zenoh")]
fn percentiles(v: &mut [u64]) -> serde_json::Value {
    v.sort_unstable();
    let q = |p: f64| {
        v.get(((v.len() as f64 - 1.0) * p).round() as usize)
            .copied()
    };
    serde_json::json!({"p50": q(0.5), "p99": q(0.99), "max": v.last().copied()})
}

#[cfg(test)]
mod tests {
    use super::*;

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
