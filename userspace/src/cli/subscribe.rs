//! `lidarxdp subscribe ADDR`: one line (or JSON object) per frame, or statistics, optional PCD
//! and MCAP output, and a readable summary on stderr at the end. `ADDR` is the daemon's TCP
//! address, or `zenoh:/topic` for its ROS 2 topic over zenoh (read in place from shared memory
//! on the same host).
//!
//! SIGINT and SIGTERM stop it cleanly: the frame being received is dropped, the MCAP recording
//! is finished (summary, chunk indexes, footer), the summary printed, and the exit code is 0.
//! A second signal during that exits at once with 128 + the signal number.
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lidarxdp::record::{McapOptions, McapRecorder, RecordedFile};
use lidarxdp_client::{ReceivedFrame, Subscriber};
use lidarxdp_core::frame::{FrameClock, FrameHeader};
use lidarxdp_core::protocol::Subscribe;
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
    /// Write every frame as `<DIR>/<sensor name>_<sequence, 6 digits>.pcd` (needs all fields).
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Record every frame into this MCAP file as ROS 2 `sensor_msgs/msg/PointCloud2` (CDR,
    /// profile `ros2`), one channel `/lidar/<sensor name>/points` per sensor; `ros2 bag play`
    /// and Foxglove open it. Finished cleanly on SIGINT/SIGTERM.
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
    /// Keep retrying the connection for this long (ms) while the daemon starts.
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

impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix("zenoh:") {
            Some(topic) => {
                lidarxdp_core::ros2::validate_topic("ADDR", topic).map_err(|e| e.to_string())?;
                Ok(Source::Zenoh(topic.to_owned()))
            }
            None => s.parse().map(Source::Tcp).map_err(|_| {
                format!(
                    "{s:?} is neither HOST:PORT nor zenoh:/TOPIC (e.g. zenoh:/lidar/front/points)"
                )
            }),
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
            ("--mcap", a.mcap.is_some()),
            ("--pcd", a.pcd.is_some()),
            ("--connect-timeout-ms", a.connect_timeout_ms != 0),
        ];
        for (flag, given) in tcp_only.into_iter().chain(split) {
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

/// Whether `fields` names every point field in the full layout's order (the only subset
/// request that still delivers [`lidarxdp_core::point::PointXYZIRCAEDT`] records).
fn all_fields(fields: &[String]) -> bool {
    let all = lidarxdp_core::point::POINT_FIELDS;
    fields.len() == all.len() && fields.iter().zip(all.iter()).all(|(f, p)| f == p.name)
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

/// Checks the flags, installs the signal handlers, and subscribes over TCP or zenoh.
pub fn subscribe(a: SubscribeArgs) -> Result<()> {
    check_flags(&a)?;
    let stop = Stop::install()?;
    match &a.addr {
        Source::Tcp(addr) => subscribe_tcp(&a, *addr, &stop),
        Source::Zenoh(topic) => subscribe_zenoh(&a, topic, &stop),
    }
}

/// Connects (retrying for `--connect-timeout-ms`), then prints and records every frame until
/// the stream ends, `--frames` frames arrived, or a signal.
fn subscribe_tcp(a: &SubscribeArgs, addr: SocketAddr, stop: &Stop) -> Result<()> {
    let mut out = Out::new();
    let from = addr.to_string();
    let nothing = |out: &mut Out, why: StopReason| {
        let summary = serde_json::json!({
            "frames": 0, "points": 0, "gaps": 0, "stopped_by": why.text(), "sensors": {},
        });
        report_summary(
            a,
            out,
            &from,
            format!("0 frames (stopped by {})", why.text()),
            summary,
        )
    };
    let want = Subscribe {
        sensors: a.sensors.clone(),
        fields: a.fields.clone(),
    };
    let deadline = Instant::now() + Duration::from_millis(a.connect_timeout_ms);
    let stream = loop {
        if let Some(why) = stop.signal() {
            return nothing(&mut out, why);
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
    let mut sub = match Subscriber::from_stream(stream) {
        Ok(s) => s,
        Err(_) if stop.signal().is_some() => {
            return nothing(&mut out, stop.signal().unwrap_or(StopReason::Error));
        }
        Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
    };
    let names: std::collections::HashMap<u16, String> = sub
        .hello()
        .sensors
        .iter()
        .map(|s| (s.id, s.name.clone()))
        .collect();
    let name_of = |id: u16| {
        names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("sensor{id}"))
    };
    if want != Subscribe::default() {
        let ack = match sub.subscribe(&want) {
            Ok(ack) => ack,
            Err(_) if stop.signal().is_some() => {
                return nothing(&mut out, stop.signal().unwrap_or(StopReason::Error));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("subscribe to {}", describe(&want)));
            }
        };
        let chosen: Vec<String> = ack.sensor_ids.iter().map(|&id| name_of(id)).collect();
        log::info!(
            "subscribed to {addr}: sensors {}, {}-byte points",
            chosen.join(", "),
            ack.point_step
        );
    } else {
        log::info!("subscribed to {addr}");
    }
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
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("create {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let mut totals = Totals::default();
    let mut frame = ReceivedFrame::default();
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    let mut error: Option<anyhow::Error> = None;
    let reason = loop {
        if let Some(why) = stop.signal() {
            break why;
        }
        match sub.next_frame_into(&mut frame) {
            Ok(true) => {}
            Ok(false) => break stop.signal().unwrap_or(StopReason::EndOfStream),
            Err(e) => {
                if let Some(why) = stop.signal() {
                    break why;
                }
                error = Some(anyhow::Error::new(e).context(format!("receive from {addr}")));
                break StopReason::Error;
            }
        }
        let now_ns = lidarxdp::sys::clock::realtime_ns();
        let h = *frame.header();
        let name = name_of(h.sensor_id);
        if a.stats {
            window.frames += 1;
            window.bytes += frame.payload_bytes().len() as u64;
            window.ages_us.push(now_ns.saturating_sub(h.host_ns) / 1000);
            let el = window_start.elapsed();
            if el >= Duration::from_secs(1) {
                let gaps = totals.sum().gaps;
                window.report(&mut out, el.as_secs_f64(), gaps, &mut gaps_before);
                window_start = Instant::now();
            }
        } else if a.json {
            out.line(&frame_json(&name, &h, frame.point_count()).to_string());
        } else {
            out.line(&frame_line(&name, &h, frame.point_count()));
        }
        if let Some(dir) = &a.pcd {
            if !frame.is_full_layout() {
                error = Some(anyhow::anyhow!(
                    "--pcd needs all point fields (drop --fields)"
                ));
                break StopReason::Error;
            }
            let path = dir.join(format!("{}_{:06}.pcd", file_token(&name), h.sequence));
            if let Err(e) = lidarxdp_client::pcd::write_pcd(&path, frame.points()) {
                error = Some(anyhow::Error::new(e).context(format!("write {}", path.display())));
                break StopReason::Error;
            }
        }
        if let Some(m) = mcap.as_mut()
            && let Err(e) = m.write(&frame, &name, now_ns)
        {
            let at = m
                .current()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            error = Some(anyhow::anyhow!("write MCAP {at}: {e}"));
            break StopReason::Error;
        }
        totals
            .0
            .entry(name)
            .or_default()
            .add(h.sequence, frame.point_count() as u64);
        if a.frames.is_some_and(|n| totals.sum().frames >= n) {
            break StopReason::Frames;
        }
    };
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(&mut out, secs, totals.sum().gaps, &mut gaps_before);
    }
    let mut files = Vec::new();
    if let Some(m) = mcap {
        match m.finish() {
            Ok(f) => files = f,
            Err(e) => {
                let e = anyhow::anyhow!("finish MCAP: {e}");
                error = Some(match error {
                    Some(first) => first.context(e.to_string()),
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
    let mut line = format!("{} (stopped by {})", totals.text(), reason.text());
    if a.mcap.is_some() {
        summary["mcap"] = files
            .iter()
            .map(|f| serde_json::json!({"path": f.path, "messages": f.messages}))
            .collect::<Vec<_>>()
            .into();
        let messages: u64 = files.iter().map(|f| f.messages).sum();
        if !files.is_empty() {
            line.push_str(&format!(
                "; recorded {messages} frames in {}",
                files_text(&files)
            ));
        }
    }
    report_summary(a, &mut out, &from, line, summary)?;
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `lidarxdp subscribe zenoh:/TOPIC`: one line (or JSON object) per message, or `--stats`
/// once per second, until `--frames` messages arrived, `--idle-exit-ms` passed without one,
/// or a signal. Two latencies: `delivery` is the receive time minus the publisher's source
/// time in the rmw_zenoh attachment (the put), `age` the receive time minus `header.stamp`
/// (the frame's start).
fn subscribe_zenoh(a: &SubscribeArgs, topic: &str, stop: &Stop) -> Result<()> {
    use lidarxdp::ros2_zenoh::ZenohSubscriber;
    let mut out = Out::new();
    let domain = lidarxdp::ros2_zenoh::domain_id(
        a.ros_domain_id,
        std::env::var("ROS_DOMAIN_ID").ok().as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    // zenoh locks the publisher's segments it maps (mlock(2)): allow up to the hard limit.
    if let Err(e) = lidarxdp::sys::rlimit::memlock_to_hard() {
        log::debug!("RLIMIT_MEMLOCK: {e}");
    }
    let source = lidarxdp::ros2_zenoh::SessionConfig::from_env(a.zenoh_config.as_deref())
        .map_err(anyhow::Error::msg)?;
    let sub = ZenohSubscriber::open(&source, domain, topic, a.ros_distro.unwrap_or_default())?;
    log::info!("subscribed to {topic} (zenoh key {})", sub.key());
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let mut tally = Tally::default();
    let mut in_shm = 0u64;
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    let (mut delivery_us, mut age_ns) = (Vec::new(), Vec::new());
    let mut last_msg: Option<Instant> = None;
    let reason = loop {
        if let Some(why) = stop.signal() {
            break why;
        }
        if a.frames.is_some_and(|n| tally.frames >= n) {
            break StopReason::Frames;
        }
        let Some(msg) = sub.recv_timeout(Duration::from_millis(50)) else {
            if let (Some(idle), Some(t)) = (a.idle_exit_ms, last_msg)
                && t.elapsed() >= Duration::from_millis(idle)
            {
                break StopReason::Idle;
            }
            continue;
        };
        last_msg = Some(Instant::now());
        let now_ns = lidarxdp::sys::clock::realtime_ns();
        let view = msg.view().with_context(|| format!("message on {topic}"))?;
        let pts = lidarxdp::ros2_zenoh::points_of(&view)
            .with_context(|| format!("message on {topic}"))?;
        let att = msg.attachment();
        let seq = att.map_or(0, |t| t.sequence_number);
        tally.add(seq.max(0) as u64, pts.len() as u64);
        let age_us = att.map_or(0, |t| {
            now_ns.saturating_sub(t.source_timestamp_ns as u64) / 1000
        });
        in_shm += u64::from(msg.in_shared_memory());
        delivery_us.push(age_us);
        age_ns.push(now_ns.saturating_sub(view.stamp_ns));
        if a.stats {
            window.frames += 1;
            window.bytes += msg.bytes().len() as u64;
            window.ages_us.push(age_us);
            let el = window_start.elapsed();
            if el >= Duration::from_secs(1) {
                window.report(&mut out, el.as_secs_f64(), tally.gaps, &mut gaps_before);
                window_start = Instant::now();
            }
        } else if a.json {
            out.line(
                &serde_json::json!({
                    "topic": topic, "seq": seq, "stamp_ns": view.stamp_ns,
                    "frame_id": view.frame_id, "points": pts.len(),
                    "shm": msg.in_shared_memory(), "latency_us": age_us,
                })
                .to_string(),
            );
        } else {
            out.line(&format!(
                "frame topic={topic} seq={seq} stamp_ns={} frame_id={} points={} shm={} latency_us={age_us}",
                view.stamp_ns,
                view.frame_id,
                pts.len(),
                if msg.in_shared_memory() { "yes" } else { "no" },
            ));
        }
    };
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(&mut out, secs, tally.gaps, &mut gaps_before);
    }
    let summary = serde_json::json!({
        "frames": tally.frames, "points": tally.points, "gaps": tally.gaps,
        "shm_frames": in_shm, "stopped_by": reason.text(),
        "delivery_us": percentiles(&mut delivery_us),
        "age_us": percentiles(&mut age_ns.iter().map(|n| n / 1000).collect::<Vec<_>>()),
    });
    let line = format!(
        "{} frames, {} points, {} gaps, {in_shm} read in place from shared memory (stopped by {})",
        tally.frames,
        tally.points,
        tally.gaps,
        reason.text()
    );
    report_summary(a, &mut out, &format!("zenoh:{topic}"), line, summary)
}

/// `{"p50", "p99", "max"}` of `v` (nearest rank), nulls when empty.
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
