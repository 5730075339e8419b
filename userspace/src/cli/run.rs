//! `lidarxdp run`: the daemon.
//!
//! Start-up order: merge the flags over the config file and validate them into a plan of
//! capture threads ([`super::config`]), load every calibration (fail before touching the
//! network); per interface attach the XDP program; per (interface, queue) open and bind the
//! AF_XDP socket (or, for the socket baselines, bind the UDP sockets) and register it and its
//! sensors in the program's maps; bind the publisher's listening socket; drop every capability
//! and set `NO_NEW_PRIVS` (`lidarxdp::privs`, `docs/deploy.md`); start the publisher (its queue
//! must exist before a capture thread can push frames), then one capture thread per queue.
//! Everything that steers packets is in place before the publisher accepts its first
//! subscriber, so a connected subscriber knows the daemon is ready. SIGTERM/SIGINT stop the
//! capture threads, which flush their frames in progress; the publisher drains and closes; the
//! counters are written (`--stats-json`); dropping the programs detaches them.
use std::{
    net::{Ipv4Addr, SocketAddr},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, Result, bail};
use crossbeam_queue::ArrayQueue;
use lidarxdp::{
    capture::{
        Backend, CaptureExit, CaptureStats, CaptureWorker, PacketSource, RcvBuf, RecvmmsgSource,
        Reload, SensorCounters, SensorSlot, SocketSource, StallSchedule, UdpSocketConfig,
        UringSource, XdpSource,
    },
    loader::{AttachMode, ProgramCounters, XdpProgram},
    publish::{BufferPool, FrameSender, Publisher, PublisherConfig, PublisherCounters},
    xsk::{BindMode, UmemConfig, XskConfig, XskSocket},
};
use lidarxdp_core::sensor::{ScanPipeline, SensorConfig, SensorModel, Stamp};
use serde::Deserialize;

use super::config::{self, Inputs, Plan, SensorPlan, SensorSection};

/// `lidarxdp run` arguments. Every flag can also come from `--config FILE` (TOML, same names
/// with underscores); flags given on the command line win.
#[derive(clap::Args, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// TOML file with any of these settings except `config` and `cpus` (use `cpu` in
    /// `[[queues]]`), plus `[[sensors]]` and `[[queues]]` tables (e.g. `iface = "eth0"`);
    /// relative paths in it are relative to the file. Validate it with `check-config`.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Interface to attach the XDP program to and capture on (required by `--backend xdp`,
    /// ignored by the socket backends).
    #[arg(long)]
    iface: Option<String>,
    /// How packets reach the decoder: `xdp` (AF_XDP, the product) or one of the socket
    /// baselines it is benchmarked against (`socket`, `recvmmsg`, `uring`); default xdp.
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Socket backends: address the UDP sockets bind (default 0.0.0.0).
    #[arg(long, value_name = "IP")]
    bind: Option<Ipv4Addr>,
    /// Socket backends: receive buffer, `default`, `max` (net.core.rmem_max) or bytes in
    /// 1..=1073741824 (default: `default` for socket, `max` for recvmmsg and uring).
    #[arg(long, value_name = "default|max|BYTES")]
    rcvbuf: Option<RcvBuf>,
    /// Benchmarks: pause the decoder thread MS milliseconds every EVERY_MS milliseconds
    /// (`MS:EVERY_MS`, 1 <= MS < EVERY_MS <= 3600000), to measure stall tolerance.
    #[arg(long, value_name = "MS:EVERY_MS")]
    #[serde(default, deserialize_with = "de_stall")]
    stall: Option<StallSchedule>,
    /// RX queue of the interface to bind the AF_XDP socket to (default 0).
    #[arg(long)]
    queue: Option<u32>,
    /// Sensor model, e.g. `vlp16`.
    #[arg(long)]
    sensor: Option<SensorModel>,
    /// Name subscribers choose the sensor by (default: the model name, e.g. `VLP16`).
    #[arg(long)]
    name: Option<String>,
    /// UDP destination port of the sensor's data packets (default 2368).
    #[arg(long)]
    port: Option<u16>,
    /// A second UDP port of the same sensor, decoded by the same pipeline (RoboSense DIFOP:
    /// 7788, whose angle table then replaces the CSV).
    #[arg(long)]
    extra_port: Option<u16>,
    /// IPv4 source address of the sensor (default: any source).
    #[arg(long)]
    source: Option<Ipv4Addr>,
    /// Calibration file: Velodyne ros-drivers/Nebula YAML; Hesai angle-correction CSV (AT128:
    /// binary `.dat`); Ouster sensor metadata JSON; RoboSense angle CSV (replaced by DIFOP).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Hesai: do not check the packets' CRCs (by default a CRC failure is counted malformed).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    hesai_skip_crc: Option<bool>,
    /// Velodyne: decode as Tier IV Nebula does, bit for bit, instead of by the manuals'
    /// firing timing (config file: `nebula_compat = true`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    nebula_compat: Option<bool>,
    /// Cut angle in degrees, [0, 360] (default 0).
    #[arg(long)]
    cut_angle: Option<f64>,
    /// Field of view `MIN:MAX` in degrees, each in [0, 360]; `MIN > MAX` wraps through 0°
    /// (config file: `fov = [270.0, 90.0]`).
    #[arg(long, value_name = "MIN:MAX", value_parser = super::parse_fov)]
    fov: Option<(f64, f64)>,
    /// Address subscribers connect to (default 127.0.0.1:7510). A non-loopback address also
    /// needs `--listen-public`.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Allow `--listen` on a non-loopback address (the protocol has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    listen_public: Option<bool>,
    /// Maximum simultaneous subscribers, 1..=1024 (default 16).
    #[arg(long)]
    max_subscribers: Option<usize>,
    /// Once set up, switch to this user (and its groups) before dropping every capability;
    /// needs CAP_SETUID and CAP_SETGID (root). Files written at exit (`--stats-json`) are
    /// then written as this user.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// Keep the start-up capabilities instead of dropping them all once set up (debugging).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    keep_caps: Option<bool>,
    /// XDP attach mode: auto (native, else generic), native or generic.
    #[arg(long, value_enum)]
    xdp_mode: Option<AttachMode>,
    /// XDP object file to load instead of the one embedded at build time.
    #[arg(long, value_name = "FILE")]
    bpf_object: Option<PathBuf>,
    /// UMEM frames (power of two, 64..=65536; default 4096, i.e. 8 MiB of 2 KiB frames).
    #[arg(long)]
    umem_frames: Option<u32>,
    /// Pin the capture thread to this CPU (one capture thread only; see `--cpus`).
    #[arg(long)]
    cpu: Option<usize>,
    /// Pin the capture threads, one CPU each, in configuration order (e.g. `--cpus 2,3`).
    #[arg(long, value_name = "LIST", value_parser = super::config::parse_cpu_list)]
    #[serde(skip)]
    cpus: Option<super::config::CpuList>,
    /// Frames of each sensor a subscriber may have queued before that sensor's oldest is
    /// dropped, 1..=64 (default 3).
    #[arg(long)]
    subscriber_queue: Option<usize>,
    /// Finished frames between the capture threads and the publisher, 1..=1024 (default 16).
    #[arg(long)]
    frame_queue: Option<usize>,
    /// Expected return mode of the (single) sensor; a different one in the packets is logged.
    #[arg(long)]
    return_mode: Option<String>,
    /// Points at this range or closer are dropped, metres, [0, max-range) (default: the
    /// model's datasheet minimum, see docs/sensors.md). Config file: `min_range`.
    #[arg(long, value_name = "M")]
    min_range: Option<f32>,
    /// Points at this range or farther are dropped, metres, (min-range, 1000] (default: the
    /// model's datasheet maximum). Config file: `max_range`.
    #[arg(long, value_name = "M")]
    max_range: Option<f32>,
    /// Clock of each frame's `start_ns`: `sensor` (the packets' time stamps, default) or
    /// `host` (receive time of the frame's first packet). Config file: `stamp`.
    #[arg(long, value_name = "sensor|host")]
    stamp: Option<Stamp>,
    /// Sensors (config file only): `[[sensors]]` tables, see `lidarxdp check-config`.
    #[arg(skip)]
    #[serde(default)]
    sensors: Vec<super::config::SensorSection>,
    /// Per-queue settings (config file only): `[[queues]]` tables.
    #[arg(skip)]
    #[serde(default)]
    queues: Vec<super::config::QueueSection>,
    /// Write the final counters as JSON to this file on exit.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off by default; the usual address is
    /// 127.0.0.1:9751). Loopback only unless `--metrics-public`.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Allow `--metrics` on a non-loopback address (the endpoint has no authentication).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    metrics_public: Option<bool>,
}

fn de_stall<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<StallSchedule>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

macro_rules! merge {
    ($cli:ident, $file:ident, $($f:ident),*) => { $( if $cli.$f.is_none() { $cli.$f = $file.$f.take(); } )* };
}

fn load_config(mut a: RunArgs) -> Result<RunArgs> {
    if let Some(path) = a.config.clone() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("read config {}", path.display()))?;
        let mut f: RunArgs =
            toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
        // Relative paths in the file are relative to the file, not to the working directory
        // (which is `/` under systemd).
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let anchor = |p: &mut Option<PathBuf>| {
            if let Some(x) = p.as_mut()
                && x.is_relative()
            {
                *x = dir.join(&*x);
            }
        };
        anchor(&mut f.calibration);
        anchor(&mut f.bpf_object);
        for s in &mut f.sensors {
            anchor(&mut s.calibration);
        }
        merge!(
            a,
            f,
            iface,
            backend,
            bind,
            rcvbuf,
            stall,
            queue,
            sensor,
            name,
            port,
            extra_port,
            source,
            calibration,
            hesai_skip_crc,
            nebula_compat,
            cut_angle,
            fov,
            listen,
            listen_public,
            max_subscribers,
            keep_caps,
            user,
            xdp_mode,
            bpf_object,
            umem_frames,
            cpu,
            stats_json,
            metrics,
            metrics_public,
            subscriber_queue,
            frame_queue,
            return_mode,
            min_range,
            max_range,
            stamp
        );
        a.sensors = std::mem::take(&mut f.sensors);
        a.queues = std::mem::take(&mut f.queues);
    }
    Ok(a)
}

/// The settings outside the capture plan that `run` refuses before touching anything: the
/// `--user` account must exist, `--user` excludes `--keep-caps`, a non-loopback `--metrics`
/// needs `--metrics-public`, `--bpf-object` must be a file. Shared by `run` and
/// `check-config`.
fn check_process(a: &RunArgs) -> Result<Option<lidarxdp::privs::User>> {
    let user = match &a.user {
        Some(name) => {
            Some(lidarxdp::privs::lookup_user(name).with_context(|| format!("--user {name}"))?)
        }
        None => None,
    };
    if user.is_some() && a.keep_caps.unwrap_or(false) {
        bail!("--user and --keep-caps exclude each other");
    }
    if let Some(m) = a.metrics
        && !m.ip().is_loopback()
        && !a.metrics_public.unwrap_or(false)
    {
        bail!(
            "--metrics: {m} is not a loopback address; the metrics endpoint has no \
             authentication, add --metrics-public to serve it there anyway"
        );
    }
    if let Some(p) = &a.bpf_object
        && !p.is_file()
    {
        bail!("--bpf-object: {} is not a file", p.display());
    }
    Ok(user)
}

/// Validates the merged arguments into the plan of capture threads.
fn plan(a: &RunArgs) -> Result<Plan> {
    let single_given = a.sensor.is_some()
        || a.calibration.is_some()
        || a.port.is_some()
        || a.extra_port.is_some()
        || a.source.is_some()
        || a.name.is_some()
        || a.cut_angle.is_some()
        || a.fov.is_some()
        || a.return_mode.is_some()
        || a.hesai_skip_crc.is_some()
        || a.min_range.is_some()
        || a.max_range.is_some()
        || a.stamp.is_some()
        || a.nebula_compat.is_some();
    let single = single_given.then(|| SensorSection {
        name: a.name.clone(),
        model: a.sensor,
        calibration: a.calibration.clone(),
        port: a.port,
        extra_port: a.extra_port,
        source: a.source,
        iface: None,
        queue: None,
        cut_angle: a.cut_angle,
        fov: a.fov,
        return_mode: a.return_mode.clone(),
        hesai_skip_crc: a.hesai_skip_crc,
        min_range: a.min_range,
        max_range: a.max_range,
        stamp: a.stamp,
        nebula_compat: a.nebula_compat,
    });
    config::build(Inputs {
        backend: a.backend,
        iface: a.iface.clone(),
        queue: a.queue,
        cpu: a.cpu,
        cpus: a.cpus.clone().map(|c| c.0),
        umem_frames: a.umem_frames,
        listen: a.listen,
        listen_public: a.listen_public.unwrap_or(false),
        max_subscribers: a.max_subscribers,
        subscriber_queue: a.subscriber_queue,
        frame_queue: a.frame_queue,
        rcvbuf: a.rcvbuf,
        stall: a.stall,
        single,
        sensors: a.sensors.clone(),
        queues: a.queues.clone(),
        xdp_mode: a.xdp_mode,
    })
}

/// Builds a sensor's decoding pipeline (reads its calibration).
fn pipeline(s: &SensorPlan) -> Result<ScanPipeline> {
    let cfg = SensorConfig {
        cut_angle_deg: s.cut_angle,
        min_range_m: s.min_range,
        max_range_m: s.max_range,
        stamp: s.stamp,
        ..SensorConfig::new(s.id, s.model, &s.calibration)
    };
    let opts = lidarxdp_core::sensor::PipelineOptions {
        fov_deg: s.fov,
        hesai_skip_crc: s.hesai_skip_crc,
        flavor: super::decode::flavor(s.nebula_compat),
    };
    lidarxdp::calibration::pipeline_with_options(&cfg, opts)
        .with_context(|| format!("sensor {:?} ({})", s.name, s.model.name()))
}

/// `lidarxdp check-config FILE`: validates the file as `lidarxdp run --config FILE` would
/// (ranges, names, filter keys, every calibration file) and prints the effective configuration
/// as TOML. Touches no network interface.
///
/// Errors: the first invalid field (named as in the file, with its value and valid range), or
/// a calibration file that cannot be read or parsed.
pub fn check_config(path: PathBuf) -> Result<()> {
    let a = load_config(RunArgs {
        config: Some(path.clone()),
        ..RunArgs::default()
    })?;
    let plan = plan(&a).with_context(|| format!("config {}", path.display()))?;
    check_process(&a).with_context(|| format!("config {}", path.display()))?;
    for s in plan.sensors() {
        pipeline(s).with_context(|| format!("config {}", path.display()))?;
    }
    println!(
        "# Effective configuration of {} (a summary for reading, not a loadable file).",
        path.display()
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!(
        "# xdp_mode {}, metrics {}, user {}",
        opt(a.xdp_mode.map(|m| format!("{m:?}").to_lowercase())),
        opt(a.metrics.map(|m| m.to_string())),
        opt(a.user.clone())
    );
    print!(
        "{}",
        toml::to_string_pretty(&plan).context("print the effective configuration")?
    );
    eprintln!(
        "check-config: {} OK: {} sensor(s) on {} capture thread(s), backend {}",
        path.display(),
        plan.sensors().count(),
        plan.queues.len(),
        plan.backend.name()
    );
    Ok(())
}

/// Runs the daemon until SIGTERM/SIGINT; see the module documentation.
pub fn run(args: RunArgs) -> Result<()> {
    let a = load_config(args)?;
    let plan = plan(&a)?;
    let backend = plan.backend;

    let user = check_process(&a)?;

    // Every calibration is read before the network is touched.
    let mut pipelines: Vec<Vec<ScanPipeline>> = Vec::with_capacity(plan.queues.len());
    for q in &plan.queues {
        pipelines.push(q.sensors.iter().map(pipeline).collect::<Result<_>>()?);
    }

    let mut programs: Vec<(String, XdpProgram)> = Vec::new();
    let mut sources: Vec<Source> = Vec::with_capacity(plan.queues.len());
    for q in &plan.queues {
        let mut ports: Vec<u16> = Vec::new();
        for s in &q.sensors {
            for p in std::iter::once(s.port).chain(s.extra_port) {
                if !ports.contains(&p) {
                    ports.push(p);
                }
            }
        }
        match backend {
            Backend::Xdp => {
                let k = match programs.iter().position(|(i, _)| *i == q.iface) {
                    Some(k) => k,
                    None => {
                        // Before attaching: frames longer than a UMEM chunk would be dropped.
                        lidarxdp::xsk::check_mtu(&q.iface, UmemConfig::default().frame_size)?;
                        programs.push((q.iface.clone(), attach_program(&a, &q.iface)?));
                        programs.len() - 1
                    }
                };
                let program = &mut programs[k].1;
                let xsk = open_xsk(&q.iface, q.queue, q.umem_frames)?;
                program.bind_socket(q.queue, &xsk)?;
                for s in &q.sensors {
                    for p in std::iter::once(s.port).chain(s.extra_port) {
                        program.add_sensor(p, s.source.map(|ip| ip.octets()), s.id)?;
                    }
                }
                sources.push(Source::Xdp(
                    XdpSource::new(xsk).context("io_uring for the capture thread")?,
                ));
            }
            other => {
                let models = || q.sensors.iter().map(|s| s.model);
                let ucfg = UdpSocketConfig {
                    bind: a.bind.unwrap_or(Ipv4Addr::UNSPECIFIED),
                    ports: ports.clone(),
                    rcvbuf: plan.rcvbuf.unwrap_or(match other {
                        Backend::Socket => RcvBuf::Default,
                        _ => RcvBuf::Max,
                    }),
                    max_datagram: models().map(max_datagram).max().unwrap_or(2048),
                };
                let what = || format!("--backend {}: UDP sockets on ports {ports:?}", other.name());
                let source = match other {
                    Backend::Socket => {
                        Source::Socket(SocketSource::open(&ucfg).with_context(what)?)
                    }
                    Backend::Recvmmsg => {
                        Source::Recvmmsg(RecvmmsgSource::open(&ucfg).with_context(what)?)
                    }
                    _ => {
                        let buffers = models()
                            .map(uring_buffers)
                            .min_by_key(|b| b.count)
                            .unwrap_or_default();
                        Source::Uring(UringSource::open(&ucfg, buffers).with_context(what)?)
                    }
                };
                log::info!(
                    "--backend {}: UDP sockets bound to {}:{ports:?}, SO_RCVBUF {:?}",
                    other.name(),
                    ucfg.bind,
                    ucfg.rcvbuf
                );
                sources.push(source);
            }
        }
    }

    // Bound before anything else starts so a busy port fails the start-up; its thread starts
    // only after the capabilities are dropped (below), so it holds none.
    let metrics_listener = match a.metrics {
        Some(addr) => Some((
            addr,
            std::net::TcpListener::bind(addr).with_context(|| format!("--metrics: bind {addr}"))?,
        )),
        None => None,
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    let worker_stop = Arc::new(AtomicBool::new(false));
    let hangup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hangup.clone())
        .context("install SIGHUP handler")?;
    let listen = plan.listen;
    // Bound (and listening) before the capabilities go, so a privileged port still works;
    // EADDRINUSE is retried like the AF_XDP bind's EBUSY (a crashed predecessor's socket).
    let listener = lidarxdp::publish::bind_listener(listen, Duration::from_secs(10))
        .with_context(|| format!("publisher on {listen}"))?;
    // Everything privileged is done. Capabilities are per thread: drop them here, on the main
    // thread before the publisher and capture threads exist, so those inherit the empty sets.
    if a.keep_caps.unwrap_or(false) {
        log::warn!("--keep-caps: keeping the start-up capabilities");
    } else {
        let caps = lidarxdp::privs::drop_all(user.as_ref()).context("dropping capabilities")?;
        match &user {
            Some(u) => log::info!(
                "now user {} (uid {}, gid {}); capabilities dropped: {caps}",
                u.name,
                u.uid,
                u.gid
            ),
            None => log::info!("capabilities dropped: {caps}"),
        }
    }
    let metrics = match metrics_listener {
        Some((addr, listener)) => {
            let (tx, rx) = std::sync::mpsc::channel();
            super::http::spawn_server(listener, tx)?;
            log::info!("metrics at http://{addr}/metrics");
            Some(rx)
        }
        None => None,
    };
    // One pool of point buffers: the decoders take from it, the publisher gives back to it.
    let pool = Arc::new(BufferPool::new(lidarxdp::publish::DEFAULT_POOL_CAP));
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
        Vec::new(),
    )
    .with_context(|| format!("publisher on {listen}"))?;

    let mut workers = Vec::with_capacity(plan.queues.len());
    for ((q, source), pipes) in plan.queues.iter().zip(sources).zip(pipelines) {
        let slots: Vec<SensorSlot> = q
            .sensors
            .iter()
            .zip(pipes)
            .map(|(s, pipeline)| SensorSlot {
                port: s.port,
                extra_port: s.extra_port,
                source: s.source.map(|ip| ip.octets()),
                pipeline,
                expect_return_mode: s.return_mode,
            })
            .collect();
        let stats = Arc::new(CaptureStats {
            sensors: slots
                .iter()
                .map(|s| SensorCounters::new(&s.pipeline))
                .collect(),
            ..CaptureStats::default()
        });
        let reloads = Arc::new(ArrayQueue::new(q.sensors.len().max(1)));
        let parts = WorkerParts {
            slots,
            reloads: reloads.clone(),
            sender: sender.clone(),
            buffers: pool.clone(),
            stop: worker_stop.clone(),
            stats: stats.clone(),
            stall: plan.stall,
            cpu: q.cpu,
            name: format!("capture-{}-{}", q.iface, q.queue),
        };
        let thread = match source {
            Source::Xdp(s) => parts.spawn(s)?,
            Source::Socket(s) => parts.spawn(s)?,
            Source::Recvmmsg(s) => parts.spawn(s)?,
            Source::Uring(s) => parts.spawn(s)?,
        };
        workers.push(Worker {
            iface: q.iface.clone(),
            queue: q.queue,
            sensors: q.sensors.clone(),
            reloads,
            models: q.sensors.iter().map(|s| (s.id, s.model.name())).collect(),
            stats,
            thread: Some(thread),
            exit: None,
        });
    }
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

    let mut last_log = std::time::Instant::now();
    let finished = |w: &[Worker]| {
        w.iter()
            .any(|w| w.thread.as_ref().is_none_or(|t| t.is_finished()))
    };
    while !stop.load(Ordering::Relaxed) && !finished(&workers) {
        match &metrics {
            Some(rx) => {
                if let Ok(reply) = rx.recv_timeout(Duration::from_millis(50)) {
                    let snap = metrics_snapshot(
                        &programs,
                        &workers,
                        &publisher.counters(),
                        publisher.subscriber_stats(),
                    );
                    let _ = reply.send(lidarxdp::metrics::render(&snap));
                }
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        if hangup.swap(false, Ordering::Relaxed) {
            reload_calibrations(&workers);
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            last_log = std::time::Instant::now();
            log::info!(
                "{}",
                stats_json(
                    &programs,
                    &workers,
                    &publisher.counters(),
                    publisher.subscriber_stats()
                )
            );
        }
    }
    log::info!("stopping");
    worker_stop.store(true, Ordering::Relaxed);
    let mut panicked = false;
    let mut failed = None;
    for w in &mut workers {
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
    let publisher_counters = publisher.shutdown().context("publisher")?;
    let summary = stats_json(&programs, &workers, &publisher_counters, Vec::new());
    log::info!("final counters: {summary}");
    if let Some(path) = &a.stats_json {
        std::fs::write(path, summary.to_string())
            .with_context(|| format!("write {}", path.display()))?;
    }
    drop(programs);
    // A capture thread that failed (e.g. its interface was removed) is an error exit, so a
    // supervisor with Restart=on-failure restarts the daemon; the counters are written first.
    match failed {
        Some(e) => bail!(e),
        None => Ok(()),
    }
}

/// A running capture thread and what the main thread knows of it.
struct Worker {
    iface: String,
    queue: u32,
    /// The thread's sensors, in slot order (for reloads).
    sensors: Vec<SensorPlan>,
    /// Where reloaded pipelines go.
    reloads: Arc<ArrayQueue<Reload>>,
    /// (sensor id, model name) per slot.
    models: Vec<(u16, &'static str)>,
    stats: Arc<CaptureStats>,
    thread: Option<std::thread::JoinHandle<std::io::Result<CaptureExit>>>,
    exit: Option<CaptureExit>,
}

/// SIGHUP: re-reads every sensor's calibration and hands the rebuilt pipelines to the capture
/// threads. A sensor whose file no longer parses keeps its loaded calibration (error logged);
/// the others are reloaded. Runs on the main thread, which holds no capability by now, so the
/// files must be readable by the daemon's user.
fn reload_calibrations(workers: &[Worker]) {
    let (mut ok, mut failed) = (0usize, 0usize);
    for w in workers {
        for (slot, s) in w.sensors.iter().enumerate() {
            match pipeline(s) {
                Ok(p) => {
                    if w.reloads.push(Reload { slot, pipeline: p }).is_err() {
                        log::warn!(
                            "SIGHUP: sensor {:?}: the previous reload is not applied yet; \
                             skipped",
                            s.name
                        );
                        failed += 1;
                    } else {
                        ok += 1;
                    }
                }
                Err(e) => {
                    failed += 1;
                    log::error!("SIGHUP: {e:#}; keeping the loaded calibration");
                }
            }
        }
    }
    log::info!("SIGHUP: calibration reloaded for {ok} sensor(s), {failed} kept as they were");
}

/// The counters [`lidarxdp::metrics::render`] and the stats JSON export, read now. The XDP
/// program counters are summed over the interfaces.
fn metrics_snapshot(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherCounters,
    subscribers: Vec<lidarxdp::publish::SubscriberStats>,
) -> lidarxdp::metrics::Snapshot {
    use lidarxdp::metrics::{QueueSnapshot, SensorSnapshot, Snapshot};
    let mut xdp: Option<ProgramCounters> = None;
    for (_, p) in programs {
        if let Ok(c) = p.counters() {
            xdp.get_or_insert_with(ProgramCounters::default).add(&c);
        }
    }
    let mut sensors: Vec<_> = workers
        .iter()
        .flat_map(|w| {
            w.stats
                .sensors
                .iter()
                .zip(&w.models)
                .map(|(s, (id, model))| SensorSnapshot {
                    id: *id,
                    model: (*model).to_owned(),
                    decode: s.decode.snapshot(),
                    traffic: s.traffic.snapshot(),
                    vendor: s.vendor_snapshot(),
                })
        })
        .collect();
    sensors.sort_by_key(|s| s.id);
    Snapshot {
        xdp,
        queues: workers
            .iter()
            .map(|w| QueueSnapshot {
                iface: w.iface.clone(),
                queue: w.queue,
                xsk: w.stats.xdp_statistics.load(),
                capture: w.stats.capture.snapshot(),
                reassembly: w.stats.reassembly.snapshot(),
            })
            .collect(),
        sensors,
        publisher: *publisher,
        subscribers,
    }
}

/// A capture thread's exit report (`backend` in the stats JSON; `{}` while it runs): not
/// counters but the backend's own measurements at exit (name, datagrams received, receive
/// buffer, thread CPU times, truncations, back-pressure, injected stalls, link changes).
fn backend_json(w: &Worker) -> serde_json::Value {
    use serde_json::json;
    match &w.exit {
        Some(e) => json!({
            "name": e.backend.name, "received": e.backend.received,
            "rcvbuf_bytes": e.backend.rcvbuf_bytes,
            "receiver_cpu_ns": e.backend.receiver_cpu_ns,
            "decoder_cpu_ns": e.backend.decoder_cpu_ns,
            "truncated": e.backend.truncated, "backpressure": e.backend.backpressure,
            "stalls": e.stalls, "link_changes": e.backend.link_changes,
        }),
        None => json!({}),
    }
}

/// All counters as one JSON object, derived from the descriptors
/// ([`lidarxdp::metrics::Snapshot::to_json`]: `xdp` summed over interfaces, `queues[]`,
/// the first queue's `xsk`, `capture`, `reassembly` also at top level, `sensors[]`,
/// `publisher`, `publisher_pool`, `subscribers[]`), plus `interfaces[]` (each interface's
/// XDP program counters) and each queue's `backend` exit report (the first one's also at top
/// level).
fn stats_json(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherCounters,
    subscribers: Vec<lidarxdp::publish::SubscriberStats>,
) -> serde_json::Value {
    use serde_json::{Value, json};
    let mut v = metrics_snapshot(programs, workers, publisher, subscribers).to_json();
    v["interfaces"] = programs
        .iter()
        .map(|(i, p)| {
            let xdp = match p.counters() {
                Ok(c) => lidarxdp::metrics::counters_json(&c),
                Err(e) => json!({ "error": e.to_string() }),
            };
            json!({ "iface": i, "xdp": xdp })
        })
        .collect::<Vec<_>>()
        .into();
    if let Some(queues) = v["queues"].as_array_mut() {
        for (q, w) in queues.iter_mut().zip(workers) {
            q["backend"] = backend_json(w);
        }
    }
    v["backend"] = workers.first().map_or(Value::Null, backend_json);
    v
}

/// The capture thread's packet source, one variant per `--backend`.
enum Source {
    Xdp(XdpSource),
    Socket(SocketSource),
    Recvmmsg(RecvmmsgSource),
    Uring(UringSource),
}

/// Everything but the source that the capture thread is started with.
struct WorkerParts {
    slots: Vec<SensorSlot>,
    reloads: Arc<ArrayQueue<Reload>>,
    sender: FrameSender,
    buffers: Arc<BufferPool>,
    stop: Arc<AtomicBool>,
    stats: Arc<CaptureStats>,
    stall: Option<StallSchedule>,
    cpu: Option<usize>,
    name: String,
}

impl WorkerParts {
    fn spawn<S: PacketSource + Send + 'static>(
        self,
        source: S,
    ) -> Result<std::thread::JoinHandle<std::io::Result<CaptureExit>>> {
        let worker = CaptureWorker {
            source,
            sensors: self.slots,
            sender: self.sender,
            buffers: self.buffers,
            idle_wait: Duration::from_millis(20),
            stop: self.stop,
            stats: self.stats,
            stall: self.stall,
            reloads: self.reloads,
        };
        let cpu = self.cpu;
        Ok(std::thread::Builder::new().name(self.name).spawn(move || {
            if let Some(cpu) = cpu {
                pin_to_cpu(cpu);
            }
            worker.run()
        })?)
    }
}

/// Largest datagram the socket backends receive, bytes: Ouster lidar packets reach 25 KB (IPv4
/// reassembles them before the socket), every other family's packets fit in 2 KiB.
fn max_datagram(model: SensorModel) -> usize {
    match model.family() {
        lidarxdp_core::sensor::Family::Ouster => 65_507,
        _ => 2048,
    }
}

/// Provided buffers of the `uring` backend: 4,096 of ~2 KiB, or 512 of ~64 KiB for Ouster
/// (about 8 MiB and 32 MiB).
fn uring_buffers(model: SensorModel) -> lidarxdp::capture::UringBuffers {
    match model.family() {
        lidarxdp_core::sensor::Family::Ouster => lidarxdp::capture::UringBuffers { count: 512 },
        _ => lidarxdp::capture::UringBuffers::default(),
    }
}

/// Loads the XDP program and attaches it to `iface` (`--xdp-mode`, `--bpf-object`).
fn attach_program(a: &RunArgs, iface: &str) -> Result<XdpProgram> {
    let object = match &a.bpf_object {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("read {}", p.display()))?),
        None => None,
    };
    let program = XdpProgram::load_and_attach(
        object.as_deref(),
        iface,
        a.xdp_mode.unwrap_or(AttachMode::Auto),
    )?;
    log::info!(
        "XDP program attached to {iface} ({:?} mode)",
        program.mode()
    );
    Ok(program)
}

/// Opens and binds the AF_XDP socket of (`iface`, `queue`) on a UMEM of `umem_frames` frames.
fn open_xsk(iface: &str, queue: u32, umem_frames: u32) -> Result<XskSocket> {
    // Fill and RX rings as large as the UMEM, so every frame can wait on the RX ring while
    // the decoder is busy (the stall a UMEM absorbs is then frame_count packets).
    let umem = UmemConfig {
        frame_count: umem_frames,
        fill_size: umem_frames,
        rx_size: umem_frames,
        ..UmemConfig::default()
    };
    let xcfg = XskConfig {
        ifname: iface.to_owned(),
        queue,
        mode: BindMode::Auto,
        need_wakeup: true,
        bind_retry: Duration::from_secs(10),
    };
    let xsk = XskSocket::open(&umem, &xcfg)
        .with_context(|| format!("AF_XDP socket on {iface} queue {queue}"))?;
    log::info!(
        "AF_XDP socket bound to {iface} queue {queue}: {:?} mode, UMEM {} frames on {}",
        xsk.bound_mode(),
        umem_frames,
        if xsk.uses_huge_pages() {
            "2 MiB hugepages"
        } else {
            "normal pages"
        }
    );
    Ok(xsk)
}

fn pin_to_cpu(cpu: usize) {
    if let Err(e) = lidarxdp::capture::pin_to_cpu(cpu) {
        log::warn!("pinning the capture thread to CPU {cpu}: {e}");
    }
}
