//! `lidarxdp subscribe ADDR`: one line per frame (or statistics), optional PCD and MCAP output.
//! `ADDR` is the daemon's TCP address, or `zenoh:/topic` for its ROS 2 topic over zenoh (read
//! in place from shared memory on the same host).
use std::{
    net::SocketAddr,
    path::PathBuf,
    str::FromStr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use lidarxdp::record::McapRecorder;
use lidarxdp_client::{ReceivedFrame, Subscriber};
use lidarxdp_core::protocol::Subscribe;

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
    /// Write every frame as `<DIR>/<sensor>_<sequence>.pcd` (needs all fields).
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Record every frame into this MCAP file as ROS 2 `sensor_msgs/msg/PointCloud2` (CDR),
    /// one channel `/lidarxdp/<sensor>` per sensor; opens in Foxglove.
    #[arg(long, value_name = "FILE")]
    mcap: Option<PathBuf>,
    /// Exit after this many frames.
    #[arg(long)]
    frames: Option<u64>,
    /// Keep retrying the connection for this long (ms) while the daemon starts.
    #[arg(long, default_value_t = 0)]
    connect_timeout_ms: u64,
    /// Create this file once connected (for scripts).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write `{"frames":N,"points":M,"gaps":G}` here when the stream ends.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// `zenoh:` only: zenoh's JSON5 configuration file (default: rmw_zenoh's, a peer of the
    /// router at tcp/localhost:7447).
    #[arg(long, value_name = "FILE")]
    zenoh_config: Option<PathBuf>,
    /// `zenoh:` only: ROS domain id, 0..=232 (default: $ROS_DOMAIN_ID, else 0).
    #[arg(long, value_name = "N")]
    ros_domain_id: Option<u32>,
    /// `zenoh:` only: the publisher's ROS 2 distribution, `jazzy` (default) or `humble`.
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

/// Per-second statistics of `--stats`.
#[derive(Default)]
struct Window {
    frames: u64,
    bytes: u64,
    /// Frame age at receipt: local receive time minus the frame's `host_ns` (first packet), µs.
    ages_us: Vec<u64>,
}

impl Window {
    fn report(&mut self, secs: f64, gaps_total: u64, gaps_before: &mut u64) {
        self.ages_us.sort_unstable();
        let q = |p: f64| {
            self.ages_us
                .get(((self.ages_us.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        println!(
            "{:.1} frames/s  {:.1} MB/s  drops {}  latency since first packet p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            self.frames as f64 / secs,
            self.bytes as f64 / secs / 1e6,
            gaps_total - *gaps_before,
            q(0.5) as f64 / 1e3,
            q(0.99) as f64 / 1e3,
            self.ages_us.last().copied().unwrap_or(0) as f64 / 1e3,
        );
        *gaps_before = gaps_total;
        *self = Window::default();
    }
}

/// Connects (retrying for `--connect-timeout-ms`) and prints one line per frame until the
/// stream ends or `--frames` frames arrived.
pub fn subscribe(a: SubscribeArgs) -> Result<()> {
    let addr = match &a.addr {
        Source::Tcp(addr) => *addr,
        Source::Zenoh(topic) => return subscribe_zenoh(&a, topic),
    };
    for (flag, given) in [
        ("--zenoh-config", a.zenoh_config.is_some()),
        ("--ros-domain-id", a.ros_domain_id.is_some()),
        ("--ros-distro", a.ros_distro.is_some()),
        ("--idle-exit-ms", a.idle_exit_ms.is_some()),
    ] {
        if given {
            bail!("{flag}: only meaningful with a zenoh:/TOPIC address");
        }
    }
    let want = Subscribe {
        sensors: a.sensors.clone(),
        fields: a.fields.clone(),
    };
    let deadline = Instant::now() + Duration::from_millis(a.connect_timeout_ms);
    let mut sub = loop {
        match Subscriber::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                log::debug!("connect {}: {e}; retrying", addr);
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("connect to {}", addr)),
        }
    };
    if want != Subscribe::default() {
        let ack = sub
            .subscribe(&want)
            .with_context(|| format!("subscribe to {want:?}"))?;
        log::info!(
            "subscribed: sensors {:?}, {}-byte points",
            ack.sensor_ids,
            ack.point_step
        );
    }
    log::info!("subscribed to {}", addr);
    let names: std::collections::HashMap<u16, String> = sub
        .hello()
        .sensors
        .iter()
        .map(|s| (s.id, s.name.clone()))
        .collect();
    let name_of = |id: u16| names.get(&id).cloned().unwrap_or_else(|| id.to_string());
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut mcap = match &a.mcap {
        Some(p) => Some(
            McapRecorder::create(p)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("create {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let (mut frames, mut points) = (0u64, 0u64);
    let mut frame = ReceivedFrame::default();
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    while sub.next_frame_into(&mut frame)? {
        let now_ns = lidarxdp::capture::realtime_ns();
        let h = *frame.header();
        if a.stats {
            window.frames += 1;
            window.bytes += frame.payload_bytes().len() as u64;
            window.ages_us.push(now_ns.saturating_sub(h.host_ns) / 1000);
            let el = window_start.elapsed();
            if el >= Duration::from_secs(1) {
                window.report(el.as_secs_f64(), sub.sequence_gaps(), &mut gaps_before);
                window_start = Instant::now();
            }
        } else {
            println!(
                "frame sensor={} seq={} start_ns={} host_ns={} points={} packets={}/{} malformed={} \
                 frames_lost_before={} clock={}",
                h.sensor_id,
                h.sequence,
                h.start_ns,
                h.host_ns,
                frame.point_count(),
                h.packets_received,
                h.packets_expected,
                h.packets_malformed,
                h.frames_lost_before,
                match h.clock {
                    lidarxdp_core::frame::FrameClock::Sensor => "sensor",
                    lidarxdp_core::frame::FrameClock::Host => "host",
                }
            );
        }
        if let Some(dir) = &a.pcd {
            if !frame.is_full_layout() {
                bail!("--pcd needs all point fields (drop --fields)");
            }
            let path = dir.join(format!("{}_{:06}.pcd", h.sensor_id, h.sequence));
            lidarxdp_client::pcd::write_pcd(&path, frame.points())
                .with_context(|| format!("write {}", path.display()))?;
        }
        if let Some(m) = mcap.as_mut() {
            m.write(&frame, &name_of(h.sensor_id), now_ns)
                .map_err(|e| anyhow::anyhow!("write MCAP: {e}"))?;
        }
        frames += 1;
        points += frame.point_count() as u64;
        if a.frames.is_some_and(|n| frames >= n) {
            break;
        }
    }
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(secs, sub.sequence_gaps(), &mut gaps_before);
    }
    if let Some(m) = mcap {
        m.finish()
            .map_err(|e| anyhow::anyhow!("finish MCAP: {e}"))?;
    }
    log::info!(
        "stream ended: {frames} frames, {points} points, {} gaps",
        sub.sequence_gaps()
    );
    if let Some(f) = &a.summary_json {
        std::fs::write(
            f,
            serde_json::json!({"frames": frames, "points": points, "gaps": sub.sequence_gaps()})
                .to_string(),
        )
        .with_context(|| format!("write {}", f.display()))?;
    }
    Ok(())
}

/// `lidarxdp subscribe zenoh:/TOPIC`: one line per message (or `--stats` once per second)
/// until `--frames` messages arrived, `--idle-exit-ms` passed without one, or the process is
/// stopped. Two latencies: `delivery` is the receive time minus the publisher's source time
/// in the rmw_zenoh attachment (the put), `age` the receive time minus `header.stamp` (the
/// frame's start). Refuses the TCP-only flags before subscribing.
fn subscribe_zenoh(a: &SubscribeArgs, topic: &str) -> Result<()> {
    use lidarxdp::ros2_zenoh::ZenohSubscriber;
    for (flag, given) in [
        ("--sensor", !a.sensors.is_empty()),
        ("--fields", !a.fields.is_empty()),
        ("--mcap", a.mcap.is_some()),
        ("--pcd", a.pcd.is_some()),
        ("--connect-timeout-ms", a.connect_timeout_ms != 0),
    ] {
        if given {
            bail!("{flag}: not available with a zenoh:/TOPIC address (one topic is one sensor)");
        }
    }
    let domain = lidarxdp::ros2_zenoh::domain_id(
        a.ros_domain_id,
        std::env::var("ROS_DOMAIN_ID").ok().as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    // zenoh locks the publisher's segments it maps (mlock(2)): allow up to the hard limit.
    if let Err(e) = lidarxdp::sys::rlimit::memlock_to_hard() {
        log::debug!("RLIMIT_MEMLOCK: {e}");
    }
    let sub = ZenohSubscriber::open(
        a.zenoh_config.as_deref(),
        domain,
        topic,
        a.ros_distro.unwrap_or_default(),
    )?;
    log::info!("subscribed to {topic} (zenoh key {})", sub.key());
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let (mut frames, mut points, mut gaps, mut in_shm) = (0u64, 0u64, 0u64, 0u64);
    let mut last_seq: Option<i64> = None;
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    let (mut delivery_us, mut age_ns) = (Vec::new(), Vec::new());
    let mut last_msg: Option<Instant> = None;
    while a.frames.is_none_or(|n| frames < n) {
        let Some(msg) = sub.recv_timeout(Duration::from_millis(50)) else {
            if let (Some(idle), Some(t)) = (a.idle_exit_ms, last_msg)
                && t.elapsed() >= Duration::from_millis(idle)
            {
                break;
            }
            continue;
        };
        last_msg = Some(Instant::now());
        let now_ns = lidarxdp::capture::realtime_ns();
        let view = msg.view().with_context(|| format!("message on {topic}"))?;
        let pts = lidarxdp::ros2_zenoh::points_of(&view)
            .with_context(|| format!("message on {topic}"))?;
        let att = msg.attachment();
        let seq = att.map_or(0, |t| t.sequence_number);
        if let Some(prev) = last_seq
            && seq > prev + 1
        {
            gaps += (seq - prev - 1) as u64;
        }
        last_seq = Some(seq);
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
                window.report(el.as_secs_f64(), gaps, &mut gaps_before);
                window_start = Instant::now();
            }
        } else {
            println!(
                "frame topic={topic} seq={seq} stamp_ns={} frame_id={} points={} shm={} latency_us={age_us}",
                view.stamp_ns,
                view.frame_id,
                pts.len(),
                if msg.in_shared_memory() { "yes" } else { "no" },
            );
        }
        frames += 1;
        points += pts.len() as u64;
    }
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(secs, gaps, &mut gaps_before);
    }
    log::info!(
        "{frames} frames, {points} points, {gaps} gaps, {in_shm} read in place from shared memory"
    );
    if let Some(f) = &a.summary_json {
        std::fs::write(
            f,
            serde_json::json!({
                "frames": frames, "points": points, "gaps": gaps, "shm_frames": in_shm,
                "delivery_us": percentiles(&mut delivery_us),
                "age_us": percentiles(&mut age_ns.iter().map(|n| n / 1000).collect::<Vec<_>>()),
            })
            .to_string(),
        )
        .with_context(|| format!("write {}", f.display()))?;
    }
    Ok(())
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
