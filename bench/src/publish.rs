//! The `publish` benchmark (see the crate documentation).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lidarxdp::publish::{
    BufferPool, FrameSender, FrameSink, Publisher, PublisherConfig, PublisherCounters,
    PublisherHandle,
};
use lidarxdp::sys::clock::realtime_ns;
use lidarxdp_client::{ReceivedFrame, Subscriber};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::{POINT_SIZE, PointXYZIRCAEDT};
use lidarxdp_core::protocol::{self, Hello};

/// `lidarxdp-bench publish` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Frame sizes, MB (10^6 bytes of points), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,15")]
    frame_mb: Vec<f64>,
    /// Frame rates, Hz, comma-separated; 0 = as fast as the slowest subscriber takes them.
    #[arg(long, value_delimiter = ',', default_value = "10,20")]
    hz: Vec<f64>,
    /// Subscriber counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    subs: Vec<usize>,
    /// Seconds per configuration.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Extra subscribers that connect and never read (0 = none), to show isolation.
    #[arg(long, default_value_t = 0)]
    stalled: usize,
    /// Which implementations, comma-separated: `publisher` (TCP), `baseline` (copy + write),
    /// `zenoh-shm` (the zenoh sink writing into its shared-memory pool, subscribers reading in
    /// place), `zenoh` (the zenoh sink from the heap, over loopback TCP), `iox2` (an iceoryx2
    /// sink, subscriber processes reading in place), `dds` (the DDS sink, Cyclone DDS 11, to
    /// subscriber processes on Debian's Cyclone DDS 0.10 over loopback UDP), `dds-fastdds` (the
    /// same to subscriber processes on Debian's Fast DDS 2.9).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "publisher,baseline,zenoh-shm"
    )]
    imp: Vec<String>,
    /// Also write one JSON object per configuration to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// The `lidarxdp` binary whose `subscribe zenoh:/TOPIC` the zenoh implementations run as
    /// subscriber processes (default: `lidarxdp` beside this executable).
    #[arg(long, value_name = "FILE")]
    daemon: Option<std::path::PathBuf>,
}

/// Result of one subscriber.
pub(crate) struct SubResult {
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
    pub(crate) gaps: u64,
    pub(crate) lat_us: Vec<f64>,
    /// `(p50, p99, max)` µs reported by a subscriber process, instead of `lat_us`.
    pub(crate) pct_us: Option<(f64, f64, f64)>,
}

struct Row {
    /// CPU time of this process (publisher, sink and producer threads; in-process readers for
    /// `publisher` and `baseline`) per frame sent, µs.
    self_cpu_us: f64,
    /// CPU time of the subscriber processes per frame sent and subscriber, µs (0 when the
    /// subscribers are threads of this process).
    sub_cpu_us: f64,
    imp: String,
    frame_mb: f64,
    hz: f64,
    subs: usize,
    stalled: usize,
    sent: u64,
    per_sub: Vec<SubResult>,
    secs: f64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Single-thread memcpy bandwidth, GB/s (bytes copied per second; best of 5 × 64 MB).
fn memcpy_gbps() -> f64 {
    let n = 64 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    dst.copy_from_slice(&src); // fault the pages in
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    n as f64 / best / 1e9
}

/// CPU time (user + system) of this process and of its waited-for children, µs
/// (getrusage(2) `RUSAGE_SELF`, `RUSAGE_CHILDREN`).
fn cpu_us() -> (f64, f64) {
    let get = |who| {
        // SAFETY: all-zero is a valid `rusage` (plain integers), which getrusage overwrites.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `r` is a valid out-pointer; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
        unsafe { libc::getrusage(who, &mut r) };
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        tv(r.ru_utime) + tv(r.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Subscriber threads: connect, then read until the end, timing every frame.
fn spawn_readers(addr: SocketAddr, n: usize) -> Result<Vec<std::thread::JoinHandle<SubResult>>> {
    let mut v = Vec::new();
    for _ in 0..n {
        let mut s = Subscriber::connect(addr).context("connect")?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        v.push(std::thread::spawn(move || {
            let mut f = ReceivedFrame::default();
            let mut r = SubResult {
                frames: 0,
                bytes: 0,
                gaps: 0,
                lat_us: Vec::new(),
                pct_us: None,
            };
            while let Ok(true) = s.next_frame_into(&mut f) {
                let now = realtime_ns();
                r.frames += 1;
                r.bytes += (f.payload_bytes().len() + protocol::FRAME_HEADER_LEN) as u64;
                r.lat_us
                    .push(now.saturating_sub(f.header().host_ns) as f64 / 1e3);
            }
            r.gaps = s.sequence_gaps();
            r
        }));
    }
    Ok(v)
}

/// Produces frames at `hz` (0 = whenever `ready()` says so) for `secs`, via `send`.
pub(crate) fn produce(
    points: usize,
    hz: f64,
    secs: f64,
    mut take: impl FnMut() -> lidarxdp_core::point_buf::PointBuf,
    mut ready: impl FnMut() -> bool,
    mut send: impl FnMut(Frame) -> bool,
) -> u64 {
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        if hz > 0.0 {
            let due = start + Duration::from_secs_f64(seq as f64 / hz);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        } else {
            while !ready() {
                if start.elapsed().as_secs_f64() >= secs {
                    return seq;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        let mut v = take();
        v.resize(points, PointXYZIRCAEDT::default());
        v.autoware_mut()[0].time_stamp = seq as u32;
        let f = Frame {
            header: FrameHeader {
                sequence: seq,
                start_ns: realtime_ns(),
                host_ns: realtime_ns(), // the hand-over time: latency reference
                ..Default::default()
            },
            points: v,
        };
        send(f);
        seq += 1;
    }
    seq
}

/// The lidarxdp `Publisher` of the sink benchmarks (zenoh, DDS, iceoryx2): `sink` its only
/// sink, its TCP server on a free loopback port with no subscriber, an input queue of 4 frames
/// and the default point-buffer pool.
pub(crate) fn sink_publisher(sink: Box<dyn FrameSink>) -> Result<(PublisherHandle, FrameSender)> {
    Ok(Publisher::spawn_on(
        TcpListener::bind("127.0.0.1:0")?,
        PublisherConfig {
            listen: "127.0.0.1:0".parse()?,
            frame_queue: 4,
            ..PublisherConfig::default()
        },
        Arc::new(BufferPool::new(lidarxdp::publish::DEFAULT_POOL_CAP)),
        vec![sink],
    )?)
}

/// [`produce`] through a [`sink_publisher`] (unpaced: while fewer than 4 frames are alive),
/// then its shutdown: the frames sent and the publisher's final counters. The frames' point
/// buffers come from `source` as a decoder's do (the zenoh sink's shared-memory pool), else
/// from the publisher's heap pool.
pub(crate) fn produce_through(
    p: PublisherHandle,
    sender: &FrameSender,
    source: Option<&dyn lidarxdp_core::scan::BufferSource>,
    points: usize,
    hz: f64,
    secs: f64,
) -> Result<(u64, PublisherCounters)> {
    let sent = produce(
        points,
        hz,
        secs,
        || match source {
            Some(s) => s
                .take_buffer(0, lidarxdp_core::layout::PointType::Autoware, points)
                .unwrap_or_default(),
            None => sender.recycled_buffer().unwrap_or_default(),
        },
        || sender.queued() == 0 && p.counters().frames_alive < 4,
        |f| sender.send(f),
    );
    Ok((sent, p.shutdown()?))
}

fn run_publisher(
    points: usize,
    hz: f64,
    subs: usize,
    stalled: usize,
    secs: f64,
) -> Result<(u64, Vec<SubResult>)> {
    let (p, sender) = Publisher::spawn(
        PublisherConfig {
            listen: "127.0.0.1:0".parse()?,
            max_subscribers: (subs + stalled).max(1),
            linger: Duration::from_secs(2),
            frame_queue: 4,
            ..PublisherConfig::default()
        },
        Arc::new(BufferPool::new(lidarxdp::publish::DEFAULT_POOL_CAP)),
    )?;
    let readers = spawn_readers(p.local_addr(), subs)?;
    let _stalled: Vec<TcpStream> = (0..stalled)
        .map(|_| TcpStream::connect(p.local_addr()))
        .collect::<Result<_, _>>()?;
    while p.counters().subscribers < (subs + stalled) as u64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent = produce(
        points,
        hz,
        secs,
        || sender.recycled_buffer().unwrap_or_default(),
        || {
            // Unpaced: keep about two frames in flight (more would only be dropped).
            sender.queued() == 0 && p.counters().frames_alive < 4 + stalled as u64 * 7
        },
        |f| sender.send(f),
    );
    let c = p.shutdown()?;
    let res = readers.into_iter().map(|r| r.join().unwrap()).collect();
    eprintln!("  publisher counters: {c:?}");
    Ok((sent, res))
}

fn run_baseline(
    points: usize,
    hz: f64,
    subs: usize,
    stalled: usize,
    secs: f64,
) -> Result<(u64, Vec<SubResult>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let total = subs + stalled;
    let acceptor = std::thread::spawn(move || -> Result<Vec<TcpStream>> {
        let mut v = Vec::new();
        for _ in 0..total {
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            // A stalled peer would block the baseline forever: give up on a write after 1 s.
            s.set_write_timeout(Some(Duration::from_secs(1)))?;
            let mut h = Vec::new();
            protocol::encode_hello(
                &Hello {
                    server_name: "baseline".into(),
                    max_subscribers: total as u32,
                    queue_depth: 0,
                    server_time_ns: realtime_ns(),
                    min_version: protocol::VERSION,
                    sensors: Vec::new(),
                },
                &mut h,
            );
            s.write_all(&h)?;
            v.push(s);
        }
        Ok(v)
    });
    let readers = spawn_readers(addr, subs)?;
    let _stalled: Vec<TcpStream> = (0..stalled)
        .map(|_| TcpStream::connect(addr))
        .collect::<Result<_, _>>()?;
    let mut streams = acceptor.join().unwrap()?;
    let mut buf: Vec<u8> = Vec::new();
    let sent = produce(
        points,
        hz,
        secs,
        lidarxdp_core::point_buf::PointBuf::new,
        || true,
        |f| {
            // The baseline: copy the frame into one Vec, one blocking write() per subscriber.
            buf.clear();
            protocol::encode_frame_header(
                &f.header,
                lidarxdp_core::layout::PointType::Autoware,
                f.points.len() as u32,
                &mut buf,
            );
            buf.extend_from_slice(f.points.as_bytes());
            for s in &mut streams {
                let _ = s.write_all(&buf);
            }
            true
        },
    );
    drop(streams);
    let res = readers.into_iter().map(|r| r.join().unwrap()).collect();
    Ok((sent, res))
}

/// Subscriber processes with their summary and ready files.
pub(crate) type SubProcs = Vec<(std::process::Child, std::path::PathBuf, std::path::PathBuf)>;

/// Waits until every subscriber process created its ready file (up to 20 s each).
///
/// Errors: a process that exited first, or one not ready in time (`what` names them).
pub(crate) fn wait_ready_files(children: &mut SubProcs, what: &str) -> Result<()> {
    for (child, _, ready) in children.iter_mut() {
        let t = Instant::now();
        while !ready.exists() {
            if let Some(st) = child.try_wait()? {
                anyhow::bail!("{what} exited at start: {st}");
            }
            anyhow::ensure!(t.elapsed() < Duration::from_secs(20), "{what} not ready");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

/// A free TCP port on loopback (bound then released).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The zenoh sink on its own session listening on loopback, `subs` subscriber sessions (one
/// thread each) connected to it. Latency: receive time minus the message's `header.stamp`,
/// which is the hand-over time [`produce`] stamps (so the sink's copy into shared memory and
/// the delivery are both counted). `shm`: the sink writes into a pool sized for eight frames
/// (at least 128 MiB), else from the heap with shared memory off on both sides.
fn run_zenoh(
    points: usize,
    hz: f64,
    subs: usize,
    secs: f64,
    shm: bool,
    daemon: &std::path::Path,
) -> Result<(u64, Vec<SubResult>)> {
    use lidarxdp::ros2_zenoh::{ShmPool, TopicPlan, ZenohSettings, ZenohSink};
    let port = free_port()?;
    let dir = std::env::temp_dir();
    let cfg = |name: &str, body: String| -> Result<std::path::PathBuf> {
        let p = dir.join(format!(
            "lidarxdp-bench-{}-{name}.json5",
            std::process::id()
        ));
        std::fs::write(&p, body)?;
        Ok(p)
    };
    let shm_json = if shm { "true" } else { "false" };
    let pub_cfg = cfg(
        "pub",
        format!(
            "{{ mode: 'peer', listen: {{ endpoints: ['tcp/127.0.0.1:{port}'] }}, \
             scouting: {{ multicast: {{ enabled: false }} }}, \
             transport: {{ shared_memory: {{ enabled: {shm_json} }} }} }}"
        ),
    )?;
    let sub_cfg = cfg(
        "sub",
        format!(
            "{{ mode: 'peer', connect: {{ endpoints: ['tcp/127.0.0.1:{port}'] }}, \
             scouting: {{ multicast: {{ enabled: false }} }}, \
             transport: {{ shared_memory: {{ enabled: {shm_json} }} }} }}"
        ),
    )?;
    let topic = "/bench/points";
    let pool = if shm {
        Some(ShmPool::create((8 * points * POINT_SIZE).max(128 << 20))?)
    } else {
        None
    };
    let (sink, handle) = ZenohSink::start(
        &ZenohSettings {
            session: lidarxdp::ros2_zenoh::SessionConfig {
                file: Some(pub_cfg.clone()),
                overrides: Vec::new(),
            },
            domain_id: 0,
            distro: lidarxdp_core::ros2::Distro::Jazzy,
            qos: lidarxdp_core::ros2::Qos::LIDAR,
            queue: lidarxdp::ros2_zenoh::SINK_QUEUE,
            topics: vec![TopicPlan {
                sensor_id: 0,
                topic: topic.into(),
                frame_id: "bench".into(),
                imu_topic: None,
                imu_frame_id: String::new(),
            }],
        },
        pool,
    )?;
    let (p, sender) = sink_publisher(Box::new(sink))?;
    // The producer writes each frame's points straight into a chunk of the pool, as the
    // daemon's decoders do.
    let frames = handle.buffer_source(Arc::new(BufferPool::new(
        lidarxdp::publish::DEFAULT_POOL_CAP,
    )));
    // Subscribers are processes, as on a vehicle's host: `lidarxdp subscribe zenoh:/TOPIC`,
    // each reporting its frames, gaps and latency percentiles (`age`: receive time minus the
    // hand-over stamp) in its summary file.
    let mut children: SubProcs = Vec::new();
    for i in 0..subs {
        let summary = dir.join(format!("lidarxdp-bench-{}-sub{i}.json", std::process::id()));
        let ready = dir.join(format!(
            "lidarxdp-bench-{}-sub{i}.ready",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&ready);
        let child = std::process::Command::new(daemon)
            .arg("subscribe")
            .arg(format!("zenoh:{topic}"))
            .arg("--zenoh-config")
            .arg(&sub_cfg)
            .args(["--idle-exit-ms", "1500", "--stats"])
            .arg("--summary-json")
            .arg(&summary)
            .arg("--ready-file")
            .arg(&ready)
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("start {}", daemon.display()))?;
        children.push((child, summary, ready));
    }
    wait_ready_files(&mut children, "zenoh subscriber")?;
    // Discovery: the subscribers' interests reach the publisher's session.
    std::thread::sleep(Duration::from_millis(1500));
    let source = frames
        .as_ref()
        .map(|f| f as &dyn lidarxdp_core::scan::BufferSource);
    let (sent, c) = produce_through(p, &sender, source, points, hz, secs)?;
    let mut res = Vec::new();
    for (mut child, summary, ready) in children {
        let st = child.wait()?;
        anyhow::ensure!(st.success(), "zenoh subscriber: {st}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
        let f = |k: &str| v["age_us"][k].as_f64().unwrap_or(f64::NAN);
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        if n("shm_frames") != n("frames") {
            eprintln!(
                "  zenoh subscriber: {} of {} frames read in place",
                n("shm_frames"),
                n("frames")
            );
        }
        res.push(SubResult {
            frames: n("frames"),
            bytes: n("frames") * (points * POINT_SIZE) as u64,
            gaps: n("gaps"),
            lat_us: Vec::new(),
            pct_us: Some((f("p50"), f("p99"), f("max"))),
        });
        let _ = std::fs::remove_file(summary);
        let _ = std::fs::remove_file(ready);
    }
    eprintln!(
        "  zenoh counters: {:?}; publisher frames_in {}",
        handle.counters(),
        c.frames_in
    );
    let _ = std::fs::remove_file(pub_cfg);
    let _ = std::fs::remove_file(sub_cfg);
    Ok((sent, res))
}

/// The DDS sink (Cyclone DDS 11 through cyclors, as `lidarxdp run --dds` runs it) on a domain
/// of its own with `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST` rules (loopback only, no
/// multicast), and `subs` subscriber processes: the tests' independent subscribers
/// ([`lidarxdp_testkit::build_dds_checkers`], `--localhost --no-data`), on Debian's Cyclone DDS
/// 0.10 or (`fastdds`) Fast DDS 2.9, each taking every sample with a best-effort reader.
/// Latency: the subscriber's take time minus `header.stamp`, the hand-over time [`produce`]
/// stamps (the sink's serialisation, Cyclone's copy and fragmentation, the loopback UDP and the
/// subscriber's reassembly and decoding all counted). Drops: frames sent that a subscriber did
/// not get.
fn run_dds(
    points: usize,
    hz: f64,
    subs: usize,
    secs: f64,
    exe: &std::path::Path,
) -> Result<(u64, Vec<SubResult>)> {
    use lidarxdp::ros2_dds::{DdsSettings, DdsSink, Discovery, DiscoveryRange};
    use lidarxdp::ros2_zenoh::TopicPlan;
    use std::io::BufRead;
    // A domain of its own (100..=199), so no other participant on the host matches.
    let domain = 100 + std::process::id() % 100;
    let (sink, handle) = DdsSink::start(&DdsSettings {
        config_file: None,
        cyclonedds_uri: None,
        domain_id: domain,
        distro: lidarxdp_core::ros2::Distro::Jazzy,
        discovery: Discovery {
            range: DiscoveryRange::Localhost,
            static_peers: Vec::new(),
        },
        queue: lidarxdp::ros2_dds::SINK_QUEUE,
        topics: vec![TopicPlan {
            sensor_id: 0,
            topic: "/bench/points".into(),
            frame_id: "bench".into(),
            imu_topic: None,
            imu_frame_id: String::new(),
        }],
    })?;
    let (p, sender) = sink_publisher(Box::new(sink))?;
    let dir = std::env::temp_dir();
    let mut children = Vec::new();
    for i in 0..subs {
        let out = dir.join(format!("lidarxdp-bench-{}-dds{i}", std::process::id()));
        let mut child = std::process::Command::new(exe)
            .args([
                "--topic",
                "rt/bench/points",
                "--domain",
                &domain.to_string(),
            ])
            .args([
                "--localhost",
                "--no-data",
                "--timeout-s",
                &(secs + 60.0).to_string(),
            ])
            .arg("--out")
            .arg(&out)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("start {}", exe.display()))?;
        let mut lines = std::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
        // "ready": its reader matched the sink's writer.
        match lines.next() {
            Some(Ok(l)) if l.trim() == "ready" => {}
            other => anyhow::bail!("DDS subscriber {i} not ready: {other:?}"),
        }
        children.push((child, lines, out));
    }
    // A reader that matched the writer is not yet matched by the writer (discovery runs both
    // ways): wait until the sink's writer counts every subscriber (its gauge is read every
    // second), so the first frame is not lost to discovery.
    let t = Instant::now();
    while handle.counters().subscribers < subs as u64 {
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(10),
            "the DDS writer matched {} of {subs} subscribers",
            handle.counters().subscribers
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (sent, c) = produce_through(p, &sender, None, points, hz, secs)?;
    let mut res = Vec::new();
    for (mut child, lines, out) in children {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let st = child.wait()?;
        anyhow::ensure!(st.success(), "DDS subscriber: {st} {rest:?}");
        let mut jsonl = out.clone().into_os_string();
        jsonl.push(".jsonl");
        let mut lat_us = Vec::new();
        for l in std::fs::read_to_string(&jsonl)?.lines() {
            let v: serde_json::Value = serde_json::from_str(l)?;
            let stamp =
                v["sec"].as_i64().unwrap_or(0) * 1_000_000_000 + v["nanosec"].as_i64().unwrap_or(0);
            lat_us.push((v["recv_ns"].as_i64().unwrap_or(0) - stamp) as f64 / 1e3);
        }
        let frames = lat_us.len() as u64;
        if std::env::var_os("LIDARXDP_BENCH_DEBUG").is_some() {
            eprintln!("  dds subscriber latencies (µs, in arrival order): {lat_us:?}");
        }
        res.push(SubResult {
            frames,
            bytes: frames * (points * POINT_SIZE) as u64,
            gaps: sent.saturating_sub(frames),
            lat_us,
            pct_us: None,
        });
        let _ = std::fs::remove_file(&jsonl);
        let mut bin = out.into_os_string();
        bin.push(".bin");
        let _ = std::fs::remove_file(bin);
    }
    eprintln!(
        "  dds counters: {:?}; publisher frames_in {}",
        handle.counters(),
        c.frames_in
    );
    Ok((sent, res))
}

pub fn run(a: Args) -> Result<()> {
    let daemon = match &a.daemon {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("lidarxdp"))
            .context("own folder")?,
    };
    if a.imp.iter().any(|i| i.starts_with("zenoh")) && !daemon.is_file() {
        anyhow::bail!(
            "--daemon: {} is not a file (build it: cargo build --release -p lidarxdp)",
            daemon.display()
        );
    }
    // The DDS implementations' subscriber processes, compiled once.
    let checkers = if a.imp.iter().any(|i| i.starts_with("dds")) {
        let out = std::env::temp_dir().join(format!("lidarxdp-bench-dds-{}", std::process::id()));
        Some(lidarxdp_testkit::build_dds_checkers(&out).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let mem = memcpy_gbps();
    println!(
        "memcpy bandwidth (single thread, 64 MB): {mem:.2} GB/s; load average before: {}; {} CPUs",
        load_avg(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "| impl | frame MB | Hz | subs (+stalled) | frames sent | delivered MB/s (sum) | min per-sub frames | drops (sum) | p50 µs (worst sub) | p99 µs (worst sub) | max µs (worst sub) | agg / memcpy | CPU µs/frame: publishing process | CPU µs/frame/sub: subscriber processes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut json = match &a.json {
        Some(p) => Some(std::fs::File::create(p)?),
        None => None,
    };
    for &mb in &a.frame_mb {
        let points = ((mb * 1e6) as usize / POINT_SIZE).max(1);
        for &hz in &a.hz {
            for &subs in &a.subs {
                for imp in &a.imp {
                    let cpu0 = cpu_us();
                    let checker = |fastdds: bool| {
                        let c = checkers.as_ref().context("DDS subscribers not built")?;
                        anyhow::Ok(if fastdds {
                            c.fastdds.clone()
                        } else {
                            c.cyclone.clone()
                        })
                    };
                    let (sent, per_sub) = match imp.as_str() {
                        "publisher" => run_publisher(points, hz, subs, a.stalled, a.seconds)?,
                        "baseline" => run_baseline(points, hz, subs, a.stalled, a.seconds)?,
                        "zenoh-shm" => run_zenoh(points, hz, subs, a.seconds, true, &daemon)?,
                        "zenoh" => run_zenoh(points, hz, subs, a.seconds, false, &daemon)?,
                        "iox2" => crate::iox2::run(points, hz, subs, a.seconds)?,
                        "dds" => run_dds(points, hz, subs, a.seconds, &checker(false)?)?,
                        "dds-fastdds" => run_dds(points, hz, subs, a.seconds, &checker(true)?)?,
                        other => anyhow::bail!("unknown --imp {other}"),
                    };
                    let cpu1 = cpu_us();
                    let frames = sent.max(1) as f64;
                    let row = Row {
                        self_cpu_us: (cpu1.0 - cpu0.0) / frames,
                        sub_cpu_us: (cpu1.1 - cpu0.1) / frames / subs.max(1) as f64,
                        imp: imp.clone(),
                        frame_mb: mb,
                        hz,
                        subs,
                        stalled: a.stalled,
                        sent,
                        per_sub,
                        secs: a.seconds,
                    };
                    print_row(&row, mem, json.as_mut())?;
                }
            }
        }
    }
    println!();
    println!("load average after: {}", load_avg());
    Ok(())
}

fn print_row(r: &Row, mem_gbps: f64, json: Option<&mut std::fs::File>) -> Result<()> {
    let bytes: u64 = r.per_sub.iter().map(|s| s.bytes).sum();
    let mbps = bytes as f64 / r.secs / 1e6;
    let drops: u64 = r.per_sub.iter().map(|s| s.gaps).sum();
    let min_frames = r.per_sub.iter().map(|s| s.frames).min().unwrap_or(0);
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    let mut subs_json = Vec::new();
    for s in &r.per_sub {
        let mut l = s.lat_us.clone();
        l.sort_by(f64::total_cmp);
        let (p50, p99, max) = s
            .pct_us
            .unwrap_or((pct(&l, 0.5), pct(&l, 0.99), pct(&l, 1.0)));
        worst = (worst.0.max(p50), worst.1.max(p99), worst.2.max(max));
        subs_json.push(serde_json::json!({
            "frames": s.frames, "bytes": s.bytes, "gaps": s.gaps,
            "mb_per_s": s.bytes as f64 / r.secs / 1e6,
            "p50_us": p50, "p99_us": p99, "max_us": max,
        }));
    }
    println!(
        "| {} | {} | {} | {}{} | {} | {:.0} | {} | {} | {:.0} | {:.0} | {:.0} | {:.3} | {:.0} | {:.0} |",
        r.imp,
        r.frame_mb,
        if r.hz > 0.0 {
            format!("{}", r.hz)
        } else {
            "max".into()
        },
        r.subs,
        if r.stalled > 0 {
            format!(" (+{})", r.stalled)
        } else {
            String::new()
        },
        r.sent,
        mbps,
        min_frames,
        drops,
        worst.0,
        worst.1,
        worst.2,
        mbps / 1e3 / mem_gbps,
        r.self_cpu_us,
        r.sub_cpu_us
    );
    if let Some(f) = json {
        writeln!(
            f,
            "{}",
            serde_json::json!({
                "impl": r.imp, "frame_mb": r.frame_mb, "hz": r.hz, "subs": r.subs, "stalled": r.stalled,
                "frames_sent": r.sent, "seconds": r.secs, "delivered_mb_per_s": mbps,
                "memcpy_gb_per_s": mem_gbps, "subscribers": subs_json,
                "self_cpu_us_per_frame": r.self_cpu_us, "sub_cpu_us_per_frame": r.sub_cpu_us,
            })
        )?;
    }
    Ok(())
}
