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
//! 3. the sinks' listening sockets and zenoh's shared memory ([`sinks::Sinks::bind`]) and the
//!    publisher's socket are bound, and the signal handlers set;
//! 4. every capability is dropped and `NO_NEW_PRIVS` set (`lidarxdp::privs`,
//!    `docs/deploy.md`), on the main thread before any other thread exists, so every thread
//!    started later inherits the empty sets;
//! 5. the sinks ([`sinks::Bound::start`]), the publisher (whose input queue must exist before
//!    a capture thread pushes frames) and one capture thread per queue start
//!    ([`workers::start`]).
//!
//! Everything that steers packets is in place before the publisher accepts its first
//! subscriber, so a connected subscriber knows the daemon is ready. Then the main thread
//! serves `/metrics`, applies SIGHUP calibration reloads and logs what changed every 10 s
//! (nothing when nothing did).
//! SIGTERM/SIGINT stop the capture threads, which flush their frames in progress; the
//! publisher drains and closes; a short summary of the counters is logged
//! ([`report::exit_summary`]) and all of them written as JSON (`--stats-json`); dropping the
//! programs detaches them.

pub mod config;
mod health;
pub mod http;
mod report;
mod sinks;
mod sources;
mod workers;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use lidarxdp::{
    loader::XdpProgram,
    privs::User,
    publish::{BufferPool, Publisher, PublisherConfig, PublisherHandle},
};

use config::Plan;
use sinks::Sinks;
use workers::Worker;
pub(crate) use workers::pipeline;

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

/// Runs the daemon for `plan` until SIGTERM/SIGINT or a capture thread ends (module docs);
/// `user` is `plan.process.user`, looked up.
///
/// Errors: any start-up step (naming the file, interface, queue, port or address), a capture
/// thread that failed (after the counters are written, so a supervisor with
/// `Restart=on-failure` restarts the daemon), a capture thread that panicked (at once: its
/// counters may be inconsistent), or the publisher's shutdown.
pub fn run(plan: &Plan, user: Option<User>) -> Result<()> {
    let pipelines = workers::pipelines(plan)?;
    let (programs, sources) = sources::open(plan)?;
    // Every listener is bound (and zenoh's pool locked) before the capabilities go, so a
    // privileged or busy port fails the start-up; no sink thread runs yet.
    let bound = Sinks::bind(plan)?;
    let signals = Signals::install()?;
    let listen = plan.sinks.tcp.listen;
    // EADDRINUSE is retried like the AF_XDP bind's EBUSY (a crashed predecessor's socket).
    let listener = lidarxdp::publish::bind_listener(listen, Duration::from_secs(10))
        .with_context(|| format!("publisher on {listen}"))?;
    drop_privileges(plan, user.as_ref(), bound.keep_caps())?;

    // Every sink's threads start here, after the capabilities are gone.
    let (mut sinks, frame_sinks) = bound.start(plan)?;
    // One pool of heap point buffers: the decoders take from it, the publisher gives back to
    // it. With zenoh's shared-memory pool the decoders write into chunks of that instead.
    let pool = Arc::new(BufferPool::new(lidarxdp::publish::DEFAULT_POOL_CAP));
    let buffers = sinks.buffer_source(&pool);
    let tcp = &plan.sinks.tcp;
    let (publisher, sender) = Publisher::spawn_on(
        listener,
        PublisherConfig {
            listen,
            max_subscribers: tcp.max_subscribers,
            queue_depth: tcp.subscriber_queue,
            frame_queue: plan.capture.frame_queue,
            sensors: plan
                .sensors()
                .map(|s| lidarxdp_core::protocol::SensorEntry {
                    id: s.id,
                    name: s.name.clone(),
                    model: s.model.name().to_owned(),
                })
                .collect(),
            point_types: plan.sensors().map(|s| (s.id, s.point_type)).collect(),
            ..PublisherConfig::default()
        },
        pool.clone(),
        frame_sinks,
    )
    .with_context(|| format!("publisher on {listen}"))?;
    let worker_stop = Arc::new(AtomicBool::new(false));
    let tap = sinks.record_tap();
    // IMU readings and /diagnostics go to the ROS 2 sinks through one thread of their own.
    // IMU readings also go to the TCP subscribers (protocol message `imu`).
    let mut aux_sinks = sinks.take_aux();
    aux_sinks.push(Box::new(sender.imu_sink()));
    let (aux_thread, aux) =
        lidarxdp::publish::AuxThread::spawn(aux_sinks).context("start the aux-sink thread")?;
    let outputs = workers::Outputs {
        sender: &sender,
        buffers: &buffers,
        record: tap.as_ref(),
        aux: &aux,
    };
    let mut workers = workers::start(plan, sources, pipelines, &outputs, &worker_stop)?;
    drop(tap);
    for s in plan.sensors() {
        log::info!(
            "serving sensor {:?} ({}) on UDP port {}{}; subscribers at {}",
            s.name,
            s.model.name(),
            s.port,
            s.source
                .as_ref()
                .map_or(String::new(), |ip| format!(" from {ip}")),
            publisher.local_addr()
        );
    }

    // Every thread is running under its final identity: tell the service manager
    // (sd_notify(3), `Type=notify` in docs/lidarxdp.service; nothing when NOTIFY_SOCKET is unset).
    notify(sd_notify::NotifyState::Ready);

    supervise(
        plan, &programs, &workers, &publisher, &sinks, &signals, &aux,
    );

    log::info!("stopping");
    notify(sd_notify::NotifyState::Stopping);
    worker_stop.store(true, Ordering::Relaxed);
    let failed = join(&mut workers)?;
    // The capture threads' senders are gone with them; the last one ends the aux thread,
    // before the sinks' sessions close with the publisher.
    drop(aux);
    aux_thread.join();
    // Every capture thread has ended: what they queued is written, the file closed.
    sinks.stop_recording();
    let tcp_queue = publisher.queue_bytes();
    let publisher_counters = publisher.shutdown().context("publisher")?;
    // The publisher thread dropped the frame sinks: the zenoh and DDS threads wrote what was
    // queued, the Foxglove and view threads are joined.
    let snap = report::metrics_snapshot(
        &programs,
        &workers,
        &publisher_counters,
        sinks.counters(),
        sink_queues(&tcp_queue, &sinks),
        Vec::new(),
    );
    for line in report::exit_summary(&snap) {
        log::info!("{line}");
    }
    if let Some(path) = &plan.process.stats_json {
        let json = report::stats_json(&programs, &workers, snap);
        std::fs::write(path, json.to_string())
            .with_context(|| format!("write {}", path.display()))?;
    }
    drop(programs);
    match failed {
        Some(e) => bail!(e),
        None => Ok(()),
    }
}

/// Everything privileged is done. Capabilities are per thread: they are dropped here, on the
/// main thread before the publisher and capture threads exist, so those inherit the empty sets.
fn drop_privileges(plan: &Plan, user: Option<&User>, keep: u64) -> Result<()> {
    if plan.process.keep_caps {
        log::warn!("--keep-caps: keeping the start-up capabilities");
        return Ok(());
    }
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

/// Every sink's queue for the metrics: the TCP publisher's (`tcp`) first, then the other
/// sinks' ([`Sinks::queue_counters`]).
fn sink_queues(
    tcp: &lidarxdp::publish::QueueBytes,
    sinks: &Sinks,
) -> Vec<(String, lidarxdp::publish::SinkQueueCounters)> {
    let mut q = vec![("tcp".to_owned(), tcp.counters())];
    q.extend(sinks.queue_counters());
    q
}

/// How often the main loop looks for changes worth a log line.
const LOG_PERIOD: Duration = Duration::from_secs(10);

/// The main loop, every 50 ms until a stop signal or until a capture thread has ended: answers
/// `/metrics` and `/stats.json` requests, applies SIGHUP reloads, and every [`LOG_PERIOD`] logs what changed
/// ([`report::ChangeLog`]: nothing when nothing did).
fn supervise(
    plan: &Plan,
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherHandle,
    sinks: &Sinks,
    signals: &Signals,
    aux: &lidarxdp::publish::AuxSender,
) {
    let metrics = sinks.metrics_requests();
    let mut health = health::HealthMonitor::new(
        workers,
        plan.process.memory_growth_warn_mb_per_hour,
        Instant::now(),
    );
    let tcp_queue = publisher.queue_bytes();
    let mut last_log = Instant::now();
    let mut changes = report::ChangeLog::default();
    let snapshot = || {
        report::metrics_snapshot(
            programs,
            workers,
            &publisher.counters(),
            sinks.counters(),
            sink_queues(&tcp_queue, sinks),
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
                if let Ok((doc, reply)) = rx.recv_timeout(Duration::from_millis(50)) {
                    let _ = reply.send(match doc {
                        http::Doc::Metrics => lidarxdp::metrics::render(&snapshot()),
                        http::Doc::StatsJson => {
                            report::stats_json(programs, workers, snapshot()).to_string()
                        }
                    });
                }
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        let now = Instant::now();
        health.observe(workers, now);
        if let Some(status) = health.assess(workers, now) {
            aux.send(lidarxdp::publish::AuxMessage::Diagnostics {
                stamp_ns: lidarxdp::sys::clock::realtime_ns(),
                status: status.into(),
            });
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
