//! The daemon's composition root: `lidarxdp run` parses and validates its flags and
//! configuration file into a [`Plan`] ([`config`]: the configuration schema and its checks) and
//! calls [`run`].
//!
//! Start-up order:
//! 1. every sensor's pipeline is built, reading its calibration ([`workers::pipelines`]), so
//!    a bad file fails before the network is touched;
//! 2. per interface the XDP program is attached; per (interface, queue) the AF_XDP socket is
//!    opened, bound and registered with its sensors in the program's maps, or, for the socket
//!    baselines, the UDP sockets are bound ([`sources::open`]);
//! 3. the metrics, live view, Foxglove and publisher listening sockets are bound, and the
//!    signal handlers set;
//! 4. every capability is dropped and `NO_NEW_PRIVS` set (`lidarxdp::privs`,
//!    `docs/deploy.md`), on the main thread before any other thread exists, so every thread
//!    started later inherits the empty sets;
//! 5. the metrics server, the publisher (whose input queue must exist before a capture thread
//!    pushes frames) and one capture thread per queue start ([`workers::start`]).
//!
//! Everything that steers packets is in place before the publisher accepts its first
//! subscriber, so a connected subscriber knows the daemon is ready. Then the main thread
//! serves `/metrics`, applies SIGHUP calibration reloads and logs what changed every 10 s
//! (nothing when nothing did).
//! SIGTERM/SIGINT stop the capture threads, which flush their frames in progress; the
//! publisher drains and closes; the counters are written (`--stats-json`); dropping the
//! programs detaches them.

pub mod config;
pub mod http;
mod report;
mod sources;
mod workers;

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, SyncSender},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use lidarxdp::{
    foxglove::{FoxgloveHandle, FoxgloveServer, FoxgloveSettings, FoxgloveTopic},
    loader::{AttachMode, XdpProgram},
    privs::User,
    publish::{BufferPool, FrameSink, Publisher, PublisherConfig, PublisherHandle},
    ros2_dds::{DdsHandle, DdsSettings, DdsSink},
    ros2_zenoh::{ShmPool, TopicPlan, ZenohHandle, ZenohSettings, ZenohSink},
};

use config::Plan;
use workers::Worker;
pub(crate) use workers::pipeline;

/// The settings of the process around the capture plan: privileges, the metrics endpoint,
/// where the socket baselines bind, the final counters file and how the XDP program loads.
#[derive(Debug)]
pub struct Process {
    /// Account to switch to once set up (`--user`), looked up beforehand.
    pub user: Option<User>,
    /// Keep the start-up capabilities (`--keep-caps`; tests and debugging only).
    pub keep_caps: bool,
    /// Prometheus endpoint (`--metrics`), already checked to be loopback unless
    /// `--metrics-public`.
    pub metrics: Option<SocketAddr>,
    /// Address the socket baselines bind their UDP ports on (`--bind`, default 0.0.0.0).
    pub bind: Ipv4Addr,
    /// Where the final counters are written as JSON at exit (`--stats-json`).
    pub stats_json: Option<PathBuf>,
    /// XDP attach mode (`--xdp-mode`).
    pub xdp_mode: AttachMode,
    /// XDP object file instead of the embedded one (`--bpf-object`).
    pub bpf_object: Option<PathBuf>,
    /// The Foxglove WebSocket server's address (`--foxglove`), already checked to be loopback
    /// unless `--foxglove-public`.
    pub foxglove: Option<SocketAddr>,
    /// The live view's address (`--view`), already checked to be loopback unless
    /// `--view-public`, and three.js to be embedded.
    pub view: Option<SocketAddr>,
    /// `--view-public`: the view answers requests naming any host (`lidarxdp::view`).
    pub view_public: bool,
    /// `--record-pcap` and its rotation, checked ([`lidarxdp::capture::record`]).
    pub record_pcap: Option<lidarxdp::capture::RecordConfig>,
}

/// The signal flags the main loop reads (signal-hook sets them from the handlers).
struct Signals {
    /// SIGTERM or SIGINT.
    stop: Arc<AtomicBool>,
    /// SIGHUP: reload the calibrations.
    hangup: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
        }
        let hangup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hangup.clone())
            .context("install SIGHUP handler")?;
        Ok(Self { stop, hangup })
    }
}

/// Runs the daemon for `plan` until SIGTERM/SIGINT or a capture thread ends (module docs).
///
/// Errors: any start-up step (naming the file, interface, queue, port or address), a capture
/// thread that failed (after the counters are written, so a supervisor with
/// `Restart=on-failure` restarts the daemon), a capture thread that panicked (at once: its
/// counters may be inconsistent), or the publisher's shutdown.
pub fn run(plan: &Plan, process: &Process) -> Result<()> {
    let pipelines = workers::pipelines(plan)?;
    let (programs, sources) = sources::open(plan, process)?;

    // Bound before anything else starts so a busy port fails the start-up; its thread starts
    // only after the capabilities are dropped, so it holds none.
    let metrics_listener = match process.metrics {
        Some(addr) => Some((
            addr,
            TcpListener::bind(addr).with_context(|| format!("--metrics: bind {addr}"))?,
        )),
        None => None,
    };
    // The live view's socket likewise; its server and thread start after the drop.
    let view_listener = match process.view {
        Some(addr) => {
            Some(TcpListener::bind(addr).with_context(|| format!("--view: bind {addr}"))?)
        }
        None => None,
    };
    // The Foxglove server's socket likewise, bound on this thread; its threads start after
    // the drop (`lidarxdp::foxglove`).
    let foxglove = match process.foxglove {
        Some(addr) => Some(FoxgloveServer::bind(&foxglove_settings(plan, addr))?),
        None => None,
    };
    let signals = Signals::install()?;
    let listen = plan.listen;
    // Bound (and listening) before the capabilities go, so a privileged port still works;
    // EADDRINUSE is retried like the AF_XDP bind's EBUSY (a crashed predecessor's socket).
    let listener = lidarxdp::publish::bind_listener(listen, Duration::from_secs(10))
        .with_context(|| format!("publisher on {listen}"))?;

    // zenoh locks its shared memory (mlock(2)): the pool is created and locked now, with
    // CAP_IPC_LOCK, and creating it starts no thread (checked by `ShmPool::create`).
    let shm = match &plan.zenoh {
        Some(z) if z.shm_mb > 0 => Some(ShmPool::create((z.shm_mb as usize) << 20)?),
        _ => None,
    };
    drop_privileges(process, shm_keep_caps(shm.as_ref()))?;

    let metrics = match metrics_listener {
        Some((addr, listener)) => {
            let (tx, rx) = std::sync::mpsc::channel();
            http::spawn_server(listener, tx)?;
            log::info!("metrics at http://{addr}/metrics");
            Some(rx)
        }
        None => None,
    };
    // `--record-pcap`: its first file is created, and its writer thread started, as the
    // daemon's final identity, like every later part (`lidarxdp::capture::record`).
    let recorder = match &process.record_pcap {
        Some(cfg) => {
            let r = lidarxdp::capture::Recorder::start(cfg.clone()).context("--record-pcap")?;
            log::info!("recording the sensors' packets to {}", cfg.path.display());
            Some(r)
        }
        None => None,
    };
    // One pool of point buffers: the decoders take from it, the publisher gives back to it.
    let pool = Arc::new(BufferPool::new(lidarxdp::publish::DEFAULT_POOL_CAP));
    // zenoh's runtime threads start here, after the capabilities are gone.
    let mut sinks: Vec<Box<dyn FrameSink>> = Vec::new();
    let zenoh = match &plan.zenoh {
        Some(z) => {
            let (sink, handle) = ZenohSink::start(&zenoh_settings(plan, z), shm)?;
            sinks.push(Box::new(sink));
            Some(handle)
        }
        None => None,
    };
    // Cyclone DDS's threads (receive, lease, garbage collection, events) start here, after the
    // capabilities are gone.
    let dds = match &plan.dds {
        Some(d) => {
            let (sink, handle) = DdsSink::start(&dds_settings(plan, d))?;
            sinks.push(Box::new(sink));
            Some(handle)
        }
        None => None,
    };
    let foxglove = match foxglove {
        Some(server) => {
            let (sink, handle) = server.start()?;
            sinks.push(Box::new(sink));
            Some(handle)
        }
        None => None,
    };
    if let Some(listener) = view_listener {
        let addr = listener.local_addr().context("--view: local address")?;
        let sensors = plan
            .sensors()
            .map(|s| lidarxdp::view::ViewSensor {
                id: s.id,
                name: s.name.clone(),
                model: s.model.name().to_owned(),
            })
            .collect();
        sinks.push(Box::new(lidarxdp::view::ViewSink::start(
            listener,
            sensors,
            process.view_public,
        )?));
        log::info!("live view at http://{addr}/");
    }
    let (publisher, sender) = Publisher::spawn_on(
        listener,
        PublisherConfig {
            listen,
            max_subscribers: plan.max_subscribers,
            queue_depth: plan.subscriber_queue,
            frame_queue: plan.frame_queue,
            sensors: plan
                .sensors()
                .map(|s| lidarxdp_core::protocol::SensorEntry {
                    id: s.id,
                    name: s.name.clone(),
                    model: s.model.name().to_owned(),
                })
                .collect(),
            ..PublisherConfig::default()
        },
        pool.clone(),
        sinks,
    )
    .with_context(|| format!("publisher on {listen}"))?;
    let worker_stop = Arc::new(AtomicBool::new(false));
    let tap = recorder.as_ref().map(lidarxdp::capture::Recorder::tap);
    let mut workers = workers::start(
        plan,
        sources,
        pipelines,
        &sender,
        &pool,
        tap.as_ref(),
        &worker_stop,
    )?;
    drop(tap);
    for s in plan.sensors() {
        log::info!(
            "serving sensor {:?} ({}) on UDP port {}{}; subscribers at {}",
            s.name,
            s.model.name(),
            s.port,
            s.source.map_or(String::new(), |ip| format!(" from {ip}")),
            publisher.local_addr()
        );
    }

    // Every thread is running under its final identity: tell the service manager
    // (sd_notify(3), `Type=notify` in docs/lidarxdp.service; nothing when NOTIFY_SOCKET is unset).
    notify(sd_notify::NotifyState::Ready);

    supervise(
        &programs,
        &workers,
        &publisher,
        Sinks {
            zenoh: zenoh.as_ref(),
            dds: dds.as_ref(),
            recorder: recorder.as_ref(),
            foxglove: foxglove.as_ref(),
        },
        metrics.as_ref(),
        &signals,
    );

    log::info!("stopping");
    notify(sd_notify::NotifyState::Stopping);
    worker_stop.store(true, Ordering::Relaxed);
    let failed = join(&mut workers)?;
    // Every capture thread has ended: what they queued is written, the file closed.
    let recording = recorder.map(lidarxdp::capture::Recorder::finish);
    let publisher_counters = publisher.shutdown().context("publisher")?;
    // The publisher thread dropped the zenoh and DDS sinks, whose threads wrote what was
    // queued, and the Foxglove sink, whose threads are joined.
    let sink_counters = report::SinkCounters {
        zenoh: zenoh.as_ref().map(ZenohHandle::counters),
        dds: dds.as_ref().map(DdsHandle::counters),
        recording,
        foxglove: foxglove.as_ref().map(FoxgloveHandle::counters),
    };
    let summary = report::stats_json(
        &programs,
        &workers,
        &publisher_counters,
        sink_counters,
        Vec::new(),
    );
    log::info!("final counters: {summary}");
    if let Some(path) = &process.stats_json {
        std::fs::write(path, summary.to_string())
            .with_context(|| format!("write {}", path.display()))?;
    }
    drop(programs);
    match failed {
        Some(e) => bail!(e),
        None => Ok(()),
    }
}

/// The Foxglove server's settings: one channel per sensor, on its ROS topic, from the plan.
fn foxglove_settings(plan: &Plan, addr: SocketAddr) -> FoxgloveSettings {
    FoxgloveSettings {
        addr,
        topics: plan
            .sensors()
            .map(|s| FoxgloveTopic {
                sensor_id: s.id,
                name: s.name.clone(),
                model: s.model.name().to_owned(),
                topic: s.topic.clone(),
                frame_id: s.frame_id.clone(),
            })
            .collect(),
    }
}

/// The zenoh sink's settings: one topic per sensor, from the plan.
fn zenoh_settings(plan: &Plan, z: &config::ZenohPlan) -> ZenohSettings {
    ZenohSettings {
        session: lidarxdp::ros2_zenoh::SessionConfig {
            file: z.config.clone(),
            overrides: z.overrides.clone(),
        },
        domain_id: z.ros_domain_id,
        distro: z.ros_distro,
        qos: lidarxdp_core::ros2::Qos::LIDAR,
        queue: lidarxdp::ros2_zenoh::SINK_QUEUE,
        topics: topic_plans(plan),
    }
}

/// The DDS sink's settings: one topic per sensor, from the plan.
fn dds_settings(plan: &Plan, d: &config::DdsPlan) -> DdsSettings {
    DdsSettings {
        config_file: d.config.clone(),
        cyclonedds_uri: d.cyclonedds_uri.clone(),
        domain_id: d.ros_domain_id,
        distro: d.ros_distro,
        discovery: d.discovery.clone(),
        queue: lidarxdp::ros2_dds::SINK_QUEUE,
        topics: topic_plans(plan),
    }
}

/// One ROS topic per sensor, from the plan (zenoh and DDS alike).
fn topic_plans(plan: &Plan) -> Vec<TopicPlan> {
    plan.sensors()
        .map(|s| TopicPlan {
            sensor_id: s.id,
            topic: s.topic.clone(),
            frame_id: s.frame_id.clone(),
        })
        .collect()
}

/// The capabilities the zenoh shared-memory pool needs kept (`lidarxdp::privs`): none when
/// `RLIMIT_MEMLOCK`, raised to its hard limit, covers the pool and the segments zenoh locks
/// later; else `CAP_IPC_LOCK`, said in the log.
fn shm_keep_caps(shm: Option<&ShmPool>) -> u64 {
    let Some(pool) = shm else { return 0 };
    let need = pool.bytes() as u64 + lidarxdp::ros2_zenoh::LOCK_HEADROOM;
    match lidarxdp::sys::rlimit::memlock_to_hard() {
        Ok(limit) if limit >= need => 0,
        limit => {
            log::warn!(
                "zenoh shared memory: keeping CAP_IPC_LOCK (and no other capability): zenoh \
                 locks its segments and RLIMIT_MEMLOCK ({}) is below the {need} bytes needed; \
                 raise it (systemd LimitMEMLOCK=infinity) to drop it too",
                limit.map_or_else(|e| e.to_string(), |l| format!("{l} bytes"))
            );
            1 << lidarxdp::sys::caps::CAP_IPC_LOCK
        }
    }
}

/// Everything privileged is done. Capabilities are per thread: they are dropped here, on the
/// main thread before the publisher and capture threads exist, so those inherit the empty sets.
fn drop_privileges(process: &Process, keep: u64) -> Result<()> {
    if process.keep_caps {
        log::warn!("--keep-caps: keeping the start-up capabilities");
        return Ok(());
    }
    let user = process.user.as_ref();
    let caps = lidarxdp::privs::drop_all(user, keep).context("dropping capabilities")?;
    match user {
        Some(u) => log::info!(
            "now user {} (uid {}, gid {}); capabilities dropped: {caps}",
            u.name,
            u.uid,
            u.gid
        ),
        None => log::info!("capabilities dropped: {caps}"),
    }
    Ok(())
}

/// Sends `state` to the service manager over `$NOTIFY_SOCKET` (sd_notify(3)); does nothing
/// when it is unset. A failed send is logged and otherwise ignored: the daemon serves either way.
fn notify(state: sd_notify::NotifyState) {
    if let Err(e) = sd_notify::notify(std::slice::from_ref(&state)) {
        log::warn!("sd_notify {state}: {e}");
    }
}

/// How often the main loop looks for changes worth a log line.
const LOG_PERIOD: Duration = Duration::from_secs(10);

/// The optional sinks' handles, read together for each snapshot.
#[derive(Clone, Copy)]
struct Sinks<'a> {
    zenoh: Option<&'a ZenohHandle>,
    dds: Option<&'a DdsHandle>,
    recorder: Option<&'a lidarxdp::capture::Recorder>,
    foxglove: Option<&'a FoxgloveHandle>,
}

impl Sinks<'_> {
    fn counters(&self) -> report::SinkCounters {
        report::SinkCounters {
            zenoh: self.zenoh.map(ZenohHandle::counters),
            dds: self.dds.map(DdsHandle::counters),
            recording: self.recorder.map(lidarxdp::capture::Recorder::counters),
            foxglove: self.foxglove.map(FoxgloveHandle::counters),
        }
    }
}

/// The main loop, every 50 ms until a stop signal or until a capture thread has ended: answers
/// `/metrics` requests, applies SIGHUP reloads, and every [`LOG_PERIOD`] logs what changed
/// ([`report::ChangeLog`]: nothing when nothing did).
fn supervise(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherHandle,
    sinks: Sinks<'_>,
    metrics: Option<&Receiver<SyncSender<String>>>,
    signals: &Signals,
) {
    let mut last_log = Instant::now();
    let mut changes = report::ChangeLog::default();
    let snapshot = || {
        report::metrics_snapshot(
            programs,
            workers,
            &publisher.counters(),
            sinks.counters(),
            publisher.subscriber_stats(),
        )
    };
    let finished = |w: &[Worker]| {
        w.iter()
            .any(|w| w.thread.as_ref().is_none_or(|t| t.is_finished()))
    };
    while !signals.stop.load(Ordering::Relaxed) && !finished(workers) {
        match metrics {
            Some(rx) => {
                if let Ok(reply) = rx.recv_timeout(Duration::from_millis(50)) {
                    let _ = reply.send(lidarxdp::metrics::render(&snapshot()));
                }
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        if signals.hangup.swap(false, Ordering::Relaxed) {
            workers::reload_calibrations(workers);
        }
        if last_log.elapsed() >= LOG_PERIOD {
            last_log = Instant::now();
            for line in changes.lines(&snapshot(), LOG_PERIOD.as_secs()) {
                log::info!("{line}");
            }
        }
    }
}

/// Joins every capture thread, keeping each one's exit report. Returns the first thread
/// error, which makes the daemon exit non-zero once the counters are written.
///
/// Errors: a capture thread panicked.
fn join(workers: &mut [Worker]) -> Result<Option<String>> {
    let mut panicked = false;
    let mut failed = None;
    for w in workers.iter_mut() {
        match w.thread.take().map(|t| t.join()) {
            Some(Ok(Ok(exit))) => w.exit = Some(exit),
            Some(Ok(Err(e))) => {
                log::error!("capture thread {}:{}: {e}", w.iface, w.queue);
                failed.get_or_insert(format!("capture thread {}:{}: {e}", w.iface, w.queue));
            }
            Some(Err(_)) => panicked = true,
            None => {}
        }
    }
    if panicked {
        bail!("a capture thread panicked");
    }
    Ok(failed)
}
