//! `lidarxdp run`: the daemon.
//!
//! Start-up order: validate the configuration and load the calibration (fail before touching
//! the network), attach the XDP program, open and bind the AF_XDP socket, register it and the
//! sensor in the program's maps, bind the publisher's listening socket, drop every capability
//! and set `NO_NEW_PRIVS` (`lidarxdp::privs`, `docs/deploy.md`), start the publisher (its queue
//! must exist before the capture thread can push frames), then the capture thread. Everything that steers packets is in place
//! before the publisher accepts its first subscriber, so a connected subscriber knows the daemon
//! is ready. SIGTERM/SIGINT stop the capture thread, which flushes its frame in progress; the
//! publisher drains and closes; the counters are written (`--stats-json`); dropping the program
//! detaches it.
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
        SensorCounters, SensorSlot, SocketSource, StallSchedule, UdpSocketConfig, UringSource,
        XdpSource,
    },
    loader::{AttachMode, XdpProgram},
    publish::{FrameSender, Publisher, PublisherConfig, PublisherCounters},
    sensor::{ScanPipeline, SensorConfig, SensorModel},
    xsk::{BindMode, UmemConfig, XskConfig, XskSocket},
};
use serde::Deserialize;

/// `lidarxdp run` arguments. Every flag can also come from `--config FILE` (TOML, same names
/// with underscores); flags given on the command line win.
#[derive(clap::Args, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// TOML file with any of these settings (e.g. `iface = "eth0"`, `port = 2368`).
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
    /// Pin the capture thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
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

/// Upper bound of `--max-subscribers` (the publisher's io_uring is sized from it).
const MAX_SUBSCRIBERS: usize = 1024;

macro_rules! merge {
    ($cli:ident, $file:ident, $($f:ident),*) => { $( if $cli.$f.is_none() { $cli.$f = $file.$f.take(); } )* };
}

fn load_config(mut a: RunArgs) -> Result<RunArgs> {
    if let Some(path) = a.config.clone() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("read config {}", path.display()))?;
        let mut f: RunArgs =
            toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
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
            metrics_public
        );
    }
    Ok(a)
}

/// Runs the daemon until SIGTERM/SIGINT; see the module documentation.
pub fn run(args: RunArgs) -> Result<()> {
    let a = load_config(args)?;
    let backend = a.backend.unwrap_or_default();
    let iface = match (&a.iface, backend) {
        (Some(i), _) => i.clone(),
        (None, Backend::Xdp) => {
            bail!("--iface (or `iface` in the config file) is required with --backend xdp")
        }
        (None, _) => String::from("-"),
    };
    let queue = a.queue.unwrap_or(0);
    let model = a
        .sensor
        .context("--sensor is required, e.g. --sensor vlp16")?;
    let calibration = a
        .calibration
        .clone()
        .context("--calibration FILE is required")?;
    let port = a.port.unwrap_or(2368);
    let port = match port {
        0 => bail!("--port: 0 is not a valid UDP port (valid range 1..=65535)"),
        p => p,
    };
    match a.extra_port {
        Some(0) => bail!("--extra-port: 0 is not a valid UDP port (valid range 1..=65535)"),
        Some(p) if p == port => bail!("--extra-port: {p} equals --port; give a different port"),
        _ => {}
    }
    if queue >= lidarxdp_common::XSK_MAP_CAPACITY {
        bail!(
            "--queue: {queue} is out of range; valid 0..={} (and below the interface's RX queue count)",
            lidarxdp_common::XSK_MAP_CAPACITY - 1
        );
    }
    if let Some(cpu) = a.cpu {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpu >= n.min(libc::CPU_SETSIZE as usize) {
            bail!(
                "--cpu: {cpu} is out of range; valid 0..={} on this machine",
                n - 1
            );
        }
    }
    let umem_frames = a.umem_frames.unwrap_or(4096);
    if !(64..=65536).contains(&umem_frames) || !umem_frames.is_power_of_two() {
        bail!("--umem-frames: {umem_frames} is not a power of two in 64..=65536");
    }
    let listen = a.listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7510)));
    if !listen.ip().is_loopback() && !a.listen_public.unwrap_or(false) {
        bail!(
            "--listen: {listen} is not a loopback address; subscribers are not authenticated, \
             so pass --listen-public to serve it anyway"
        );
    }
    let max_subscribers = a.max_subscribers.unwrap_or(16);
    if !(1..=MAX_SUBSCRIBERS).contains(&max_subscribers) {
        bail!("--max-subscribers: {max_subscribers} is out of range; valid 1..={MAX_SUBSCRIBERS}");
    }

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

    let cfg = SensorConfig {
        cut_angle_deg: a.cut_angle.unwrap_or(0.0),
        ..SensorConfig::new(0, model, calibration)
    };
    let opts = lidarxdp::sensor::PipelineOptions {
        fov_deg: a.fov,
        hesai_skip_crc: a.hesai_skip_crc.unwrap_or(false),
        ..Default::default()
    };
    let pipeline = ScanPipeline::with_options(&cfg, opts).context("sensor configuration")?;

    // The sensors' ports: the data port and, for RoboSense, the DIFOP port.
    let mut ports = vec![port];
    ports.extend(a.extra_port);
    let (program, source) = match backend {
        Backend::Xdp => {
            let (program, xsk) = attach_xdp(&a, &iface, queue, umem_frames, &ports)?;
            (
                Some(program),
                Source::Xdp(XdpSource::new(xsk).context("io_uring for the capture thread")?),
            )
        }
        other => {
            let ucfg = UdpSocketConfig {
                bind: a.bind.unwrap_or(Ipv4Addr::UNSPECIFIED),
                ports: ports.clone(),
                rcvbuf: a.rcvbuf.unwrap_or(match other {
                    Backend::Socket => RcvBuf::Default,
                    _ => RcvBuf::Max,
                }),
                max_datagram: max_datagram(model),
            };
            let what = || format!("--backend {}: UDP sockets on ports {ports:?}", other.name());
            let source = match other {
                Backend::Socket => Source::Socket(SocketSource::open(&ucfg).with_context(what)?),
                Backend::Recvmmsg => {
                    Source::Recvmmsg(RecvmmsgSource::open(&ucfg).with_context(what)?)
                }
                _ => Source::Uring(
                    UringSource::open(&ucfg, uring_buffers(model)).with_context(what)?,
                ),
            };
            log::info!(
                "--backend {}: UDP sockets bound to {}:{ports:?}, SO_RCVBUF {:?}",
                other.name(),
                ucfg.bind,
                ucfg.rcvbuf
            );
            (None, source)
        }
    };

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
    let queue_frames = Arc::new(ArrayQueue::new(16));
    // Bound (and listening) before the capabilities go, so a privileged port still works.
    let listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("publisher on {listen}"))?;
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
    let publisher = Publisher::spawn_on(
        listener,
        PublisherConfig {
            listen,
            max_subscribers,
            sensors: vec![lidarxdp::protocol::SensorEntry {
                id: 0,
                name: a.name.clone().unwrap_or_else(|| model.name().to_owned()),
                model: model.name().to_owned(),
            }],
            ..PublisherConfig::default()
        },
        queue_frames.clone(),
    )
    .with_context(|| format!("publisher on {listen}"))?;
    let sender = FrameSender::new(queue_frames, &publisher);
    let stats = Arc::new(CaptureStats {
        sensors: vec![SensorCounters::default()],
        ..CaptureStats::default()
    });
    let slots = vec![SensorSlot {
        port,
        extra_port: a.extra_port,
        source: a.source.map(|ip| ip.octets()),
        pipeline,
    }];
    let spawn = WorkerParts {
        slots,
        sender,
        stop: worker_stop.clone(),
        stats: stats.clone(),
        stall: a.stall,
        cpu: a.cpu,
        name: format!("capture-{iface}-{queue}"),
    };
    let thread = match source {
        Source::Xdp(s) => spawn.spawn(s)?,
        Source::Socket(s) => spawn.spawn(s)?,
        Source::Recvmmsg(s) => spawn.spawn(s)?,
        Source::Uring(s) => spawn.spawn(s)?,
    };
    log::info!(
        "serving sensor {model} on UDP port {port}; subscribers at {}",
        publisher.local_addr()
    );

    let mut last_log = std::time::Instant::now();
    let sensor_model = model.name().to_owned();
    let snapshot = |program: Option<&XdpProgram>,
                    publisher: &lidarxdp::publish::PublisherHandle| {
        metrics_snapshot(
            program,
            &stats,
            &publisher.counters(),
            &iface,
            queue,
            &sensor_model,
        )
    };
    while !stop.load(Ordering::Relaxed) && !thread.is_finished() {
        match &metrics {
            Some(rx) => {
                if let Ok(reply) = rx.recv_timeout(Duration::from_millis(50)) {
                    let _ = reply.send(lidarxdp::metrics::render(&snapshot(
                        program.as_ref(),
                        &publisher,
                    )));
                }
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            last_log = std::time::Instant::now();
            log::info!(
                "{}",
                stats_json(program.as_ref(), None, &stats, &publisher.counters())
            );
        }
    }
    log::info!("stopping");
    worker_stop.store(true, Ordering::Relaxed);
    let exit = match thread.join() {
        Ok(Ok(exit)) => Some(exit),
        Ok(Err(e)) => {
            log::error!("capture thread: {e}");
            None
        }
        Err(_) => bail!("capture thread panicked"),
    };
    let publisher_counters = publisher.shutdown().context("publisher")?;
    let summary = stats_json(program.as_ref(), exit.as_ref(), &stats, &publisher_counters);
    log::info!("final counters: {summary}");
    if let Some(path) = &a.stats_json {
        std::fs::write(path, summary.to_string())
            .with_context(|| format!("write {}", path.display()))?;
    }
    drop(program);
    Ok(())
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
    sender: FrameSender,
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
            idle_wait: Duration::from_millis(20),
            stop: self.stop,
            stats: self.stats,
            stall: self.stall,
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
        lidarxdp::sensor::Family::Ouster => 65_507,
        _ => 2048,
    }
}

/// Provided buffers of the `uring` backend: 4,096 of ~2 KiB, or 512 of ~64 KiB for Ouster
/// (about 8 MiB and 32 MiB).
fn uring_buffers(model: SensorModel) -> lidarxdp::capture::UringBuffers {
    match model.family() {
        lidarxdp::sensor::Family::Ouster => lidarxdp::capture::UringBuffers { count: 512 },
        _ => lidarxdp::capture::UringBuffers::default(),
    }
}

/// Loads and attaches the XDP program, opens and binds the AF_XDP socket, and registers the
/// socket and the sensor's ports in the program's maps.
fn attach_xdp(
    a: &RunArgs,
    iface: &str,
    queue: u32,
    umem_frames: u32,
    ports: &[u16],
) -> Result<(XdpProgram, XskSocket)> {
    let object = match &a.bpf_object {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("read {}", p.display()))?),
        None => None,
    };
    let mut program = XdpProgram::load_and_attach(
        object.as_deref(),
        iface,
        a.xdp_mode.unwrap_or(AttachMode::Auto),
    )?;
    log::info!(
        "XDP program attached to {iface} ({:?} mode)",
        program.mode()
    );
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
    program.bind_socket(queue, &xsk)?;
    for &p in ports {
        program.add_sensor(p, a.source.map(|ip| ip.octets()), 0)?;
    }
    Ok((program, xsk))
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads it for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        log::warn!(
            "--cpu {cpu}: sched_setaffinity failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The counters [`lidarxdp::metrics::render`] exposes, read now.
fn metrics_snapshot(
    program: Option<&XdpProgram>,
    stats: &CaptureStats,
    publisher: &PublisherCounters,
    iface: &str,
    queue: u32,
    model: &str,
) -> lidarxdp::metrics::Snapshot {
    use lidarxdp::metrics::{QueueSnapshot, Snapshot};
    Snapshot {
        xdp: program.and_then(|p| p.counters().ok()),
        queues: vec![QueueSnapshot {
            iface: iface.to_owned(),
            queue,
            xsk: stats.xdp_statistics.load(),
            capture: stats.capture.snapshot(),
            reassembly: stats.reassembly.load(),
        }],
        sensors: stats
            .sensors
            .iter()
            .enumerate()
            .map(|(i, s)| s.snapshot(i as u16, model))
            .collect(),
        publisher: *publisher,
    }
}

/// All counters as one JSON object: `xdp` (program), `xsk` (XDP_STATISTICS and socket RX
/// counters, present at exit), `capture`, `sensors[]`, `reassembly` (IPv4 fragments), `publisher`.
fn stats_json(
    program: Option<&XdpProgram>,
    exit: Option<&CaptureExit>,
    stats: &CaptureStats,
    publisher: &PublisherCounters,
) -> serde_json::Value {
    use serde_json::json;
    let xdp = match program.map(XdpProgram::counters) {
        None => serde_json::Value::Null,
        Some(Ok(c)) => json!({
            "seen": c.seen, "redirected": c.redirected, "passed": c.passed,
            "malformed": c.malformed, "no_socket": c.no_socket,
            "frag_tracked": c.frag_tracked, "frag_redirected": c.frag_redirected,
            "frag_passed": c.frag_passed, "frag_track_failed": c.frag_track_failed,
        }),
        Some(Err(e)) => json!({ "error": e.to_string() }),
    };
    let xsk = match exit {
        Some(e) => {
            let mut v = json!({
                "packets": e.xsk.packets, "bytes": e.xsk.bytes, "bursts": e.xsk.bursts,
                "wakeups": e.xsk.wakeups, "invalid_descs": e.xsk.invalid_descs,
            });
            if let Some(s) = e.xdp_statistics {
                v["rx_dropped"] = s.rx_dropped.into();
                v["rx_invalid_descs"] = s.rx_invalid_descs.into();
                v["tx_invalid_descs"] = s.tx_invalid_descs.into();
                v["rx_ring_full"] = s.rx_ring_full.into();
                v["rx_fill_ring_empty_descs"] = s.rx_fill_ring_empty_descs.into();
                v["tx_ring_empty_descs"] = s.tx_ring_empty_descs.into();
            }
            v
        }
        None => json!({}),
    };
    let backend = match exit {
        Some(e) => json!({
            "name": e.backend.name, "received": e.backend.received,
            "rcvbuf_bytes": e.backend.rcvbuf_bytes,
            "receiver_cpu_ns": e.backend.receiver_cpu_ns,
            "decoder_cpu_ns": e.backend.decoder_cpu_ns,
            "truncated": e.backend.truncated, "backpressure": e.backend.backpressure,
            "stalls": e.stalls,
        }),
        None => json!({}),
    };
    let c = stats.capture.snapshot();
    let ra = stats.reassembly.load();
    let sensors: Vec<_> = stats
        .sensors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.snapshot(i as u16, "");
            json!({
                "decoded": s.decoded, "malformed": s.malformed, "ignored": s.ignored,
                "frames": s.frames, "points": s.points,
                "datagrams": s.packets, "reassembled": s.reassembled,
                "bytes": s.bytes,
            })
        })
        .collect();
    json!({
        "xdp": xdp,
        "xsk": xsk,
        "backend": backend,
        "capture": {
            "rx_frames": c.rx_frames, "rx_bytes": c.rx_bytes,
            "sensor_datagrams": c.sensor_datagrams, "not_udp": c.not_udp,
            "fragments": c.fragments, "unknown_sensor": c.unknown_sensor,
            "waits": c.waits, "frames_out": c.frames_out,
            "frames_dropped": c.frames_dropped,
        },
        "sensors": sensors,
        "reassembly": {
            "fragments": ra.fragments, "completed": ra.completed,
            "completed_bytes": ra.completed_bytes, "failed": ra.failed(),
            "timed_out": ra.timed_out, "overlaps": ra.overlaps, "duplicates": ra.duplicates,
            "too_big": ra.too_big, "too_many": ra.too_many, "malformed": ra.malformed,
            "dropped_fragments": ra.dropped_fragments,
        },
        "publisher": {
            "subscribers_accepted": publisher.subscribers_accepted,
            "frames_in": publisher.frames_in, "frames_sent": publisher.frames_sent,
            "frames_dropped_queue_full": publisher.frames_dropped_queue_full,
            "frames_dropped_input_full": publisher.frames_dropped_input_full,
            "bytes_sent": publisher.bytes_sent,
        },
    })
}
