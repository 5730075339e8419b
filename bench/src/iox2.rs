//! `lidarxdp-bench publish --imp iox2`: the same frames as `zenoh-shm`, through iceoryx2
//! instead of zenoh, to compare the two (issue 13 asks for both when zenoh's shared memory
//! misses the latency target).
//!
//! Pipeline, as for `zenoh-shm`: [`crate::publish::produce`] hands frames to the lidarxdp
//! [`Publisher`], which offers each one to a [`FrameSink`] here; the sink's thread loans a slice
//! from an iceoryx2 publish-subscribe service, copies the points into it once (the one copy
//! the zenoh sink also makes), sends it and wakes the subscribers through an iceoryx2 event
//! service. The subscribers are processes (`lidarxdp-bench iox2-sub`, hidden) that sleep on
//! the event, read every sample in place and report frames, sequence gaps and the frame age
//! (receive time minus the hand-over stamp, so the copy is counted) in a JSON summary.
//!
//! Settings (see `Ports::create`): safe overflow on, so a full subscriber buffer drops
//! its oldest sample and the publisher never waits; a subscriber buffer of
//! [`SUB_BUFFER`] samples, no history (volatile, as the ROS 2 QoS), one borrowed sample per
//! subscriber. The publisher's data segment (one POSIX shared-memory file) is sized by
//! iceoryx2 for the worst case, `max_subscribers × (buffer + borrowed) + history + loans`
//! chunks of one frame each: with `max_subscribers` = subscribers + [`EXTRA_SUBS`] and
//! [`WARM_LOANS`] loans, 16 subscribers of 15 MB frames reserve (18 × 3 + 4) × 15 MB = 870 MB
//! of address space in /dev/shm, of which only the pages written are allocated (the pool
//! hands out the most recently returned chunk first, so a few chunks are reused).
//!
//! Subscribers of another Unix user: iceoryx2 creates its files owner-only unless built with
//! its `dev_permissions` feature (then everything is world read-write), which bench/Cargo.toml
//! enables. To start such a subscriber by hand, `LIDARXDP_BENCH_IOX2_WAIT_MS` holds the frames
//! back that long after the benchmark's own subscribers are ready; the service name is printed
//! on stderr.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use iceoryx2::prelude::*;
use lidarxdp::publish::{FrameSink, SharedFrame};
use lidarxdp::sys::clock::realtime_ns;
use lidarxdp_core::point::{POINT_SIZE, PointXYZIRCAEDT};

use crate::publish::{SubResult, produce_through, sink_publisher};

/// Samples a subscriber buffers before the oldest is overwritten (safe overflow).
pub const SUB_BUFFER: usize = 2;
/// Samples the publisher pre-faults (loans and writes once) before the first frame, so that
/// first-touch page faults of the shared memory are not measured (zenoh's pool is locked in
/// memory when it is created, for the same reason).
const WARM_LOANS: usize = 4;
/// The event id that tells subscribers the run is over (data uses the default id 0).
const END: EventId = EventId::new(1);
/// Subscriber ports allowed beyond the benchmark's own, for a subscriber started by hand.
const EXTRA_SUBS: usize = 2;

/// User header of every sample.
#[derive(Debug, Default, Clone, Copy, ZeroCopySend)]
#[repr(C)]
#[type_name("LidarxdpBenchFrameHeader")]
pub struct FrameHeaderIox {
    /// The frame's sequence number.
    pub sequence: u64,
    /// Hand-over time, CLOCK_REALTIME ns (the frame's `header.start_ns`).
    pub start_ns: u64,
    /// CLOCK_REALTIME ns just before `send()`, after the copy into shared memory.
    pub sent_ns: u64,
    /// Number of points (the payload holds `points × 8` `u32` words).
    pub points: u64,
}

/// Arguments of the hidden `iox2-sub` subcommand: one subscriber process.
#[derive(clap::Args)]
pub struct SubArgs {
    /// Service name prefix: `<NAME>/frames` (publish-subscribe) and `<NAME>/wake` (event).
    #[arg(long)]
    service: String,
    /// Write `{"frames","gaps","bad","age_us":{p50,p99,max},"delivery_us":{...}}` here at exit.
    #[arg(long)]
    summary: PathBuf,
    /// Create this (empty) file once subscribed.
    #[arg(long)]
    ready: Option<PathBuf>,
    /// Exit once no sample came for this long (ms) after the first one.
    #[arg(long, default_value_t = 1500)]
    idle_exit_ms: u64,
}

fn frames_name(base: &str) -> Result<ServiceName> {
    format!("{base}/frames")
        .as_str()
        .try_into()
        .map_err(|e| anyhow!("service name {base}/frames: {e:?}"))
}

fn wake_name(base: &str) -> Result<ServiceName> {
    format!("{base}/wake")
        .as_str()
        .try_into()
        .map_err(|e| anyhow!("service name {base}/wake: {e:?}"))
}

fn node() -> Result<Node<ipc::Service>> {
    // Without a config file iceoryx2 warns that it uses its defaults, which is what we want.
    set_log_level(LogLevel::Error);
    NodeBuilder::new()
        // The bench and its children handle their own signals.
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .map_err(|e| anyhow!("iceoryx2 node: {e:?}"))
}

/// The payload element: the points travel as `u32` words (8 per point), which keeps the
/// alignment of `PointXYZIRCAEDT` (4) so that subscribers view them in place. (A `[u8]`
/// payload with a larger `payload_alignment` would pad every element to that alignment.)
type Word = u32;
/// Words per point.
const WORDS: usize = POINT_SIZE / std::mem::size_of::<Word>();

/// Per-sink counters.
#[derive(Default, Debug)]
struct Counters {
    offered: AtomicU64,
    /// Frames the sink queue had no room for.
    dropped: AtomicU64,
    sent: AtomicU64,
    errors: AtomicU64,
}

/// The iceoryx2 sink: hands frames to its thread, never blocks the publisher thread.
struct Iox2Sink {
    tx: Option<SyncSender<Arc<SharedFrame>>>,
    counters: Arc<Counters>,
}

/// Owns the sink thread: it keeps the iceoryx2 publisher alive (so that subscribers can still
/// take what was sent) until [`Iox2Handle::finish`].
struct Iox2Handle {
    release: SyncSender<()>,
    thread: std::thread::JoinHandle<Vec<u64>>,
    counters: Arc<Counters>,
}

impl Iox2Handle {
    /// Lets the thread drop its ports; returns the per-frame loan + copy + send + notify
    /// durations, ns.
    fn finish(self) -> Vec<u64> {
        let _ = self.release.send(());
        self.thread.join().unwrap_or_default()
    }
}

impl Iox2Sink {
    /// Creates the services and ports on a new thread (iceoryx2's `ipc::Service` ports stay
    /// on the thread that made them) and returns once they exist.
    fn start(base: &str, points: usize, subs: usize) -> Result<(Self, Iox2Handle)> {
        let (tx, rx) = mpsc::sync_channel::<Arc<SharedFrame>>(lidarxdp::ros2_zenoh::SINK_QUEUE);
        let (up_tx, up_rx) = mpsc::sync_channel::<Result<()>>(1);
        let (release_tx, release_rx) = mpsc::sync_channel::<()>(1);
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let base = base.to_owned();
        let thread = std::thread::Builder::new()
            .name("iox2-sink".into())
            .spawn(move || {
                let ports = match Ports::create(&base, points, subs) {
                    Ok(p) => {
                        let _ = up_tx.send(Ok(()));
                        p
                    }
                    Err(e) => {
                        let _ = up_tx.send(Err(e));
                        return Vec::new();
                    }
                };
                let t = ports.serve(rx, &c);
                let _ = release_rx.recv();
                t
            })?;
        up_rx
            .recv()
            .context("iox2 sink thread")?
            .context("iox2 sink")?;
        Ok((
            Iox2Sink {
                tx: Some(tx),
                counters: counters.clone(),
            },
            Iox2Handle {
                release: release_tx,
                thread,
                counters,
            },
        ))
    }
}

impl FrameSink for Iox2Sink {
    fn name(&self) -> &str {
        "iox2"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, _now: Instant) {
        let Some(tx) = &self.tx else { return };
        self.counters.offered.fetch_add(1, Relaxed);
        match tx.try_send(frame.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counters.dropped.fetch_add(1, Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {
                self.counters.errors.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The sink thread's iceoryx2 node and ports.
struct Ports {
    _node: Node<ipc::Service>,
    publisher: iceoryx2::port::publisher::Publisher<ipc::Service, [Word], FrameHeaderIox>,
    notifier: iceoryx2::port::notifier::Notifier<ipc::Service>,
}

impl Ports {
    fn create(base: &str, points: usize, subs: usize) -> Result<Self> {
        let node = node()?;
        let max_subs = subs + EXTRA_SUBS;
        let frames = node
            .service_builder(&frames_name(base)?)
            .publish_subscribe::<[Word]>()
            .user_header::<FrameHeaderIox>()
            // A full subscriber buffer loses its oldest sample; the publisher never waits.
            .enable_safe_overflow(true)
            .subscriber_max_buffer_size(SUB_BUFFER)
            .subscriber_max_borrowed_samples(1)
            .history_size(0)
            .max_publishers(1)
            .max_subscribers(max_subs)
            .max_nodes(max_subs + 1)
            .create()
            .map_err(|e| anyhow!("create {base}/frames: {e:?}"))?;
        let publisher = frames
            .publisher_builder()
            .initial_max_slice_len(points * WORDS)
            .allocation_strategy(AllocationStrategy::Static)
            .max_loaned_samples(WARM_LOANS)
            .create()
            .map_err(|e| anyhow!("iceoryx2 publisher: {e:?}"))?;
        let wake = node
            .service_builder(&wake_name(base)?)
            .event()
            .max_notifiers(1)
            .max_listeners(max_subs)
            .max_nodes(max_subs + 1)
            .event_id_max_value(END.as_value())
            .create()
            .map_err(|e| anyhow!("create {base}/wake: {e:?}"))?;
        let notifier = wake
            .notifier_builder()
            .create()
            .map_err(|e| anyhow!("iceoryx2 notifier: {e:?}"))?;
        // Fault in the chunks the first frames will use (the pool hands out the most
        // recently returned chunk first, so these are reused).
        let mut warm = Vec::new();
        for _ in 0..WARM_LOANS {
            let s = publisher
                .loan_slice_uninit(points * WORDS)
                .map_err(|e| anyhow!("iceoryx2 loan: {e:?}"))?;
            warm.push(s.write_from_fn(|_| 0));
        }
        drop(warm);
        Ok(Ports {
            _node: node,
            publisher,
            notifier,
        })
    }

    /// Publishes every frame from `rx` until it closes, then tells the subscribers the run
    /// is over. Returns the per-frame publish durations, ns.
    fn serve(&self, rx: Receiver<Arc<SharedFrame>>, c: &Counters) -> Vec<u64> {
        let mut took = Vec::new();
        while let Ok(frame) = rx.recv() {
            let t = Instant::now();
            match self.publish(&frame) {
                Ok(()) => {
                    c.sent.fetch_add(1, Relaxed);
                    took.push(t.elapsed().as_nanos() as u64);
                }
                Err(e) => {
                    c.errors.fetch_add(1, Relaxed);
                    eprintln!("  iox2: frame {}: {e:#}", frame.header().sequence);
                }
            }
        }
        if let Err(e) = self.notifier.notify_with_custom_event_id(END) {
            eprintln!("  iox2: end notification: {e:?}");
        }
        took
    }

    /// Loan, one copy of the points, send, wake.
    fn publish(&self, frame: &SharedFrame) -> Result<()> {
        let words: &[Word] = bytemuck::cast_slice(frame.points().as_bytes());
        let mut s = self
            .publisher
            .loan_slice_uninit(words.len())
            .map_err(|e| anyhow!("loan: {e:?}"))?;
        let h = frame.header();
        *s.user_header_mut() = FrameHeaderIox {
            sequence: h.sequence,
            start_ns: h.start_ns,
            sent_ns: 0,
            points: frame.points().len() as u64,
        };
        let mut s = s.write_from_slice(words);
        s.user_header_mut().sent_ns = realtime_ns();
        s.send().map_err(|e| anyhow!("send: {e:?}"))?;
        self.notifier
            .notify()
            .map_err(|e| anyhow!("notify: {e:?}"))?;
        Ok(())
    }
}

static RUN: AtomicU32 = AtomicU32::new(0);

fn pct(sorted: &[u64], p: f64) -> Option<u64> {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
}

/// `publish --imp iox2`: frames through the lidarxdp publisher into an iceoryx2 sink,
/// `subs` subscriber processes reading in place. Returns the frames sent and one result per
/// subscriber, like the other implementations.
pub(crate) fn run(points: usize, hz: f64, subs: usize, secs: f64) -> Result<(u64, Vec<SubResult>)> {
    let pid = std::process::id();
    let base = format!("lidarxdp-bench/{pid}/{}", RUN.fetch_add(1, Relaxed));
    eprintln!("  iox2 service {base}");
    let (sink, handle) = Iox2Sink::start(&base, points, subs)?;
    let (p, sender) = sink_publisher(Box::new(sink))?;
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir();
    let mut children: super::publish::SubProcs = Vec::new();
    for i in 0..subs {
        let summary = dir.join(format!("lidarxdp-bench-{pid}-iox2-sub{i}.json"));
        let ready = dir.join(format!("lidarxdp-bench-{pid}-iox2-sub{i}.ready"));
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_file(&summary);
        let child = std::process::Command::new(&exe)
            .arg("iox2-sub")
            .arg("--service")
            .arg(&base)
            .arg("--summary")
            .arg(&summary)
            .arg("--ready")
            .arg(&ready)
            .args(["--idle-exit-ms", "1500"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("start {}", exe.display()))?;
        children.push((child, summary, ready));
    }
    super::publish::wait_ready_files(&mut children, "iox2 subscriber")?;
    // Optional pause for a subscriber started by hand (the cross-user check).
    if let Some(ms) = std::env::var("LIDARXDP_BENCH_IOX2_WAIT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let (sent, c) = produce_through(p, &sender, None, points, hz, secs)?;
    let mut res = Vec::new();
    let mut delivery = (0u64, 0u64, 0u64);
    let mut bad = 0;
    for (mut child, summary, ready) in children {
        let st = child.wait()?;
        anyhow::ensure!(st.success(), "iox2 subscriber: {st}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary)?)?;
        let f = |o: &str, k: &str| v[o][k].as_f64().unwrap_or(f64::NAN);
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        bad += n("bad");
        let d = |k: &str| v["delivery_us"][k].as_u64().unwrap_or(0);
        delivery = (
            delivery.0.max(d("p50")),
            delivery.1.max(d("p99")),
            delivery.2.max(d("max")),
        );
        res.push(SubResult {
            frames: n("frames"),
            bytes: n("frames") * (points * POINT_SIZE) as u64,
            gaps: n("gaps"),
            lat_us: Vec::new(),
            pct_us: Some((f("age_us", "p50"), f("age_us", "p99"), f("age_us", "max"))),
        });
        let _ = std::fs::remove_file(summary);
        let _ = std::fs::remove_file(ready);
    }
    let counters = format!("{:?}", handle.counters);
    let mut took = handle.finish();
    took.sort_unstable();
    eprintln!(
        "  iox2 counters: {counters}; publisher frames_in {}; loan+copy+send+notify µs p50 {} max {}; \
         send→receive µs (worst sub) p50 {} p99 {} max {}; frames with a wrong first point {bad}",
        c.frames_in,
        pct(&took, 0.5).unwrap_or(0) / 1000,
        took.last().copied().unwrap_or(0) / 1000,
        delivery.0,
        delivery.1,
        delivery.2,
    );
    Ok((sent, res))
}

/// `lidarxdp-bench iox2-sub`: subscribes to `<service>/frames`, sleeps on `<service>/wake`,
/// takes every sample, reads its first and last point in place, and writes the summary when
/// the publisher says the run is over (or after `--idle-exit-ms` without a sample).
pub fn sub_main(a: SubArgs) -> Result<()> {
    let node = node()?;
    // Opening states only the types: the creator's settings apply.
    let frames = node
        .service_builder(&frames_name(&a.service)?)
        .publish_subscribe::<[Word]>()
        .user_header::<FrameHeaderIox>()
        .open()
        .map_err(|e| anyhow!("open {}/frames: {e:?}", a.service))?;
    let subscriber = frames
        .subscriber_builder()
        .buffer_size(SUB_BUFFER)
        .create()
        .map_err(|e| anyhow!("iceoryx2 subscriber: {e:?}"))?;
    let listener = node
        .service_builder(&wake_name(&a.service)?)
        .event()
        .open()
        .map_err(|e| anyhow!("open {}/wake: {e:?}", a.service))?
        .listener_builder()
        .create()
        .map_err(|e| anyhow!("iceoryx2 listener: {e:?}"))?;
    if let Some(f) = &a.ready {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let idle = Duration::from_millis(a.idle_exit_ms);
    let started = Instant::now();
    let (mut n, mut gaps, mut bad) = (0u64, 0u64, 0u64);
    let mut last_seq: Option<u64> = None;
    let mut last_sample: Option<Instant> = None;
    let (mut age_ns, mut delivery_ns) = (Vec::new(), Vec::new());
    loop {
        let mut end = false;
        listener
            .timed_wait(|e| end |= e.id == END, Duration::from_millis(100))
            .map_err(|e| anyhow!("wait: {e:?}"))?;
        while let Some(s) = subscriber
            .receive()
            .map_err(|e| anyhow!("receive: {e:?}"))?
        {
            let now = realtime_ns();
            let h = *s.user_header();
            age_ns.push(now.saturating_sub(h.start_ns));
            delivery_ns.push(now.saturating_sub(h.sent_ns));
            if let Some(prev) = last_seq
                && h.sequence > prev + 1
            {
                gaps += h.sequence - prev - 1;
            }
            last_seq = Some(h.sequence);
            // Read in place: the first point carries the sequence (see `produce`), the last
            // is touched so that the whole range is mapped and readable.
            let pts: &[PointXYZIRCAEDT] = bytemuck::try_cast_slice(s.payload())
                .map_err(|e| anyhow!("payload is not points: {e:?}"))?;
            match (pts.first(), pts.last()) {
                (Some(first), Some(last)) if pts.len() as u64 == h.points => {
                    if first.time_stamp != h.sequence as u32 {
                        bad += 1;
                    }
                    std::hint::black_box(last.x);
                }
                _ => bad += 1,
            }
            n += 1;
            last_sample = Some(Instant::now());
        }
        if end {
            break;
        }
        match last_sample {
            Some(t) if t.elapsed() >= idle => break,
            None if started.elapsed() >= Duration::from_secs(60) => break,
            _ => {}
        }
    }
    write_summary(&a.summary, n, gaps, bad, &mut age_ns, &mut delivery_ns)
}

fn write_summary(
    path: &Path,
    frames: u64,
    gaps: u64,
    bad: u64,
    age_ns: &mut [u64],
    delivery_ns: &mut [u64],
) -> Result<()> {
    let pcts = |v: &mut [u64]| {
        v.sort_unstable();
        let us = |x: Option<u64>| x.map(|x| x / 1000);
        serde_json::json!({
            "p50": us(pct(v, 0.5)), "p99": us(pct(v, 0.99)), "max": us(v.last().copied()),
        })
    };
    std::fs::write(
        path,
        serde_json::json!({
            "frames": frames, "gaps": gaps, "bad": bad,
            "age_us": pcts(age_ns), "delivery_us": pcts(delivery_ns),
        })
        .to_string(),
    )
    .with_context(|| format!("write {}", path.display()))
}
