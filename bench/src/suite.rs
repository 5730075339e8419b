//! `lidarxdp-bench suite`: the AF_XDP path against the socket baselines, side by side.
//!
//! For every run: a fresh veth pair in the suite's own namespaces ([`crate::net::TestNet`]),
//! the daemon in the host namespace (`ip netns exec <host-ns> <daemon> run ... --cpu 0
//! --stats-json FILE`), optionally the collector (K subscribers) and a CPU hog, the generator
//! in the sensor namespace on core 1 (`ip netns exec <sensor-ns> taskset -c 1 lidarxdp-bench
//! gen ...`), then SIGTERM to the daemon and its stats JSON read. Loss = generator `sent` −
//! daemon `decoded` (summed over its sensors); the kernel counters around the run say where it went (veth
//! drops, the per-CPU backlog's drops in `/proc/net/softnet_stat`, UDP `RcvbufErrors` /
//! `InErrors` of `/proc/net/snmp` (proc(5)), the AF_XDP socket's `XDP_STATISTICS`).
//!
//! Scenarios: rate ladder, contention, stalls, CPU cost, latency (see `docs/benchmarks.md`).
//! Output: one CSV per scenario (raw per-repetition rows), `summary.md`, two SVG plots, and the
//! raw per-run files under `raw/`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::net::{Counters, RmemReport, TestNet};
use crate::stats;
use lidarxdp_testkit::{NotifySocket, exec_in, wait_ready};

/// The "largest" SO_RCVBUF the suite allows: 128 MiB, the size of the largest UMEM
/// (65,536 frames × 2 KiB), so both paths get the same buffer memory at their maximum.
pub const RMEM_MAX_LARGEST: u64 = 65_536 * 2_048;
/// The daemon's publisher address inside the host namespace.
const LISTEN: &str = "127.0.0.1:7510";
/// The sensor's UDP port.
const PORT: u16 = 2368;

/// `lidarxdp-bench suite` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The release daemon binary (`target/release/lidarxdp`).
    #[arg(long)]
    pub daemon: PathBuf,
    /// Output directory (default `bench/results/<YYYY-MM-DD>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// One repetition, short durations, a subset of configurations (under 2 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per configuration (default 5; 1 with --quick), 1..=100.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: Option<u32>,
    /// Capture the generator loops.
    #[arg(long, default_value = crate::r#gen::DEFAULT_PCAP)]
    pub pcap: PathBuf,
    /// Calibration for the capture (VLP-16).
    #[arg(long, default_value = crate::r#gen::DEFAULT_CALIBRATION)]
    pub calibration: PathBuf,
    /// Only these scenarios (comma-separated: ladder,contention,stall,latency; cpu comes from
    /// the ladder's 7,540 pps runs).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only these backends (comma-separated labels: xdp-native, xdp-generic, socket,
    /// recvmmsg, uring; default all).
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Idle-wait modes (issue 15): every `xdp-*` and `recvmmsg` configuration runs once per
    /// mode, with `lidarxdp run --wait MODE` (comma-separated, e.g.
    /// `poll,minwait:200,paced:250`; default: none given, the daemon's default).
    #[arg(long, value_delimiter = ',')]
    pub waits: Vec<String>,
    /// Ladder rates instead of the plan's (comma-separated datagrams/s or `max`, e.g.
    /// `7540,75400`).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<String>,
}

/// A receive path under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Label in the tables, e.g. `xdp-native`.
    pub label: &'static str,
    /// `--backend` value.
    pub backend: &'static str,
    /// `--xdp-mode` value for the xdp backend.
    pub xdp_mode: Option<&'static str>,
}

/// Every backend, in table order.
pub const BACKENDS: [Backend; 5] = [
    Backend {
        label: "xdp-native",
        backend: "xdp",
        xdp_mode: Some("native"),
    },
    Backend {
        label: "xdp-generic",
        backend: "xdp",
        xdp_mode: Some("generic"),
    },
    Backend {
        label: "socket",
        backend: "socket",
        xdp_mode: None,
    },
    Backend {
        label: "recvmmsg",
        backend: "recvmmsg",
        xdp_mode: None,
    },
    Backend {
        label: "uring",
        backend: "uring",
        xdp_mode: None,
    },
];

/// One run to do.
#[derive(Clone, Debug)]
struct Spec {
    scenario: &'static str,
    backend: Backend,
    rep: u32,
    /// `None` = max.
    pps: Option<u64>,
    duration_s: f64,
    stall_ms: Option<u64>,
    rcvbuf: Option<&'static str>,
    umem_frames: Option<u32>,
    hog: bool,
    subscribers: u16,
    pin_collector: bool,
    offline_frames: bool,
    /// `--wait` of the daemon, or `None` for its default.
    wait: Option<String>,
    /// Sensors the rate is spread over: one port each, `PORT..PORT + sensors` (one daemon
    /// config with that many `[[sensors]]`).
    sensors: u16,
}

/// Sensors (ports) a ladder rate is aggregated from: real-time VLP-16s at 754 datagrams/s
/// each, so 754 is one sensor, 7,540 ten, 75,400 and `max` a hundred.
pub fn ladder_sensors(pps: Option<u64>) -> u16 {
    match pps {
        Some(p) if p <= 754 => 1,
        Some(p) => (p / 754).clamp(1, 100) as u16,
        None => 100,
    }
}

impl Spec {
    fn config(&self) -> String {
        let mut s = self.backend.label.to_string();
        if let Some(r) = self.rcvbuf {
            s.push_str(&format!(" rcvbuf={r}"));
        }
        if let Some(u) = self.umem_frames {
            s.push_str(&format!(" umem={u}"));
        }
        if let Some(w) = &self.wait {
            s.push_str(&format!(" wait={w}"));
        }
        s
    }
    fn name(&self, idx: usize) -> String {
        format!(
            "{idx:03}-{}-{}-{}-r{}",
            self.scenario,
            self.backend.label,
            self.pps.map_or("max".into(), |p| p.to_string()),
            self.rep
        ) + &self
            .stall_ms
            .map_or(String::new(), |s| format!("-stall{s}"))
            + &self.rcvbuf.map_or(String::new(), |r| format!("-rcv{r}"))
            + &self
                .wait
                .as_ref()
                .map_or(String::new(), |w| format!("-w{}", w.replace(':', "")))
    }
}

/// One CSV row: everything measured in one run (missing values are empty).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Backend label.
    pub backend: String,
    /// Backend label with its buffer settings.
    pub config: String,
    /// Repetition, 1-based.
    pub rep: u32,
    /// Target rate, datagrams/s (empty = max).
    pub pps_target: Option<u64>,
    /// Seconds of sending asked for.
    pub duration_s: f64,
    /// `--stall MS:1000` of the run, ms.
    pub stall_ms: Option<u64>,
    /// `--rcvbuf` of the run.
    pub rcvbuf: Option<String>,
    /// `--umem-frames` of the run.
    pub umem_frames: Option<u32>,
    /// `--wait` of the run (empty: the daemon's default).
    pub wait: Option<String>,
    /// A CPU hog shared core 0.
    pub hog: bool,
    /// Subscribers connected.
    pub subscribers: u16,
    /// Sensors (UDP ports) the rate was spread over.
    pub sensors: u16,
    /// Datagrams the generator sent (exact).
    pub sent: u64,
    /// Datagrams the generator gave up on.
    pub not_sent: u64,
    /// Rate the generator achieved, datagrams/s.
    pub achieved_pps: f64,
    /// Datagrams sent > 1 ms late.
    pub gen_late: u64,
    /// Largest generator lag, µs.
    pub gen_max_lag_us: f64,
    /// Datagrams the backend handed to the decoder (`backend.received`, else
    /// `sensors[0].datagrams`).
    pub received: u64,
    /// Datagrams decoded (`sensors[0].decoded`).
    pub decoded: u64,
    /// Frames the daemon emitted (`sensors[0].frames`).
    pub frames: u64,
    /// sent − decoded.
    pub lost: i64,
    /// Loss in percent of sent.
    pub lost_pct: f64,
    /// veth drop counters (rx + tx, both ends), delta.
    pub veth_dropped: u64,
    /// `/proc/net/softnet_stat` dropped (backlog full), all CPUs, delta.
    pub backlog_dropped: u64,
    /// `Udp: RcvbufErrors`, host namespace, delta.
    pub udp_rcvbuf_errors: u64,
    /// `Udp: InErrors`, host namespace, delta (includes RcvbufErrors).
    pub udp_in_errors: u64,
    /// XDP program `redirected`.
    pub xdp_redirected: Option<u64>,
    /// XDP_STATISTICS rx_dropped (fill ring empty or frame too big).
    pub xsk_rx_dropped: Option<u64>,
    /// XDP_STATISTICS rx_invalid_descs.
    pub xsk_rx_invalid_descs: Option<u64>,
    /// XDP_STATISTICS tx_invalid_descs.
    pub xsk_tx_invalid_descs: Option<u64>,
    /// XDP_STATISTICS rx_ring_full (consumer too slow).
    pub xsk_rx_ring_full: Option<u64>,
    /// XDP_STATISTICS rx_fill_ring_empty_descs (refill too slow; overlaps rx_dropped).
    pub xsk_fill_ring_empty: Option<u64>,
    /// XDP_STATISTICS tx_ring_empty_descs.
    pub xsk_tx_ring_empty: Option<u64>,
    /// received − decoded (malformed or ignored by the decoder).
    pub decoder_rejected: u64,
    /// lost − every counted drop above (negative when layers count the same packet twice).
    pub unexplained: i64,
    /// Effective SO_RCVBUF, bytes (`backend.rcvbuf_bytes`).
    pub rcvbuf_bytes: Option<u64>,
    /// Daemon process CPU (all threads, utime + stime, proc(5)) during sending, ns per decoded
    /// datagram.
    pub cpu_ns_per_pkt: Option<f64>,
    /// `backend.receiver_cpu_ns` / received, ns per datagram.
    pub receiver_ns_per_pkt: Option<f64>,
    /// `backend.decoder_cpu_ns` / received, ns per datagram.
    pub decoder_ns_per_pkt: Option<f64>,
    /// Idle waits of the capture thread (`capture.waits`) per received datagram.
    pub waits_per_pkt: Option<f64>,
    /// Frames received by the collector (all subscribers).
    pub sub_frames: Option<u64>,
    /// Points per received frame: mean.
    pub points_mean: Option<f64>,
    /// Points per received frame: standard deviation.
    pub points_std: Option<f64>,
    /// Points per received frame: minimum.
    pub points_min: Option<f64>,
    /// Points per received frame: 0.1 % quantile.
    pub points_p0_1: Option<f64>,
    /// Points per received frame: 1 % quantile.
    pub points_p1: Option<f64>,
    /// Points per received frame: 10 % quantile.
    pub points_p10: Option<f64>,
    /// Points per received frame: median.
    pub points_p50: Option<f64>,
    /// Received frames with fewer packets than expected, percent.
    pub frames_incomplete_pct: Option<f64>,
    /// Latency send → received, p50, µs.
    pub lat_p50_us: Option<f64>,
    /// Latency p99, µs.
    pub lat_p99_us: Option<f64>,
    /// Latency max, µs.
    pub lat_max_us: Option<f64>,
    /// Latency samples joined.
    pub lat_samples: Option<u64>,
    /// Received frames not joined to a generator frame.
    pub lat_unmatched: Option<u64>,
    /// Why the run failed (empty when it did not).
    pub error: String,
    #[serde(skip)]
    latencies_ns: Vec<i64>,
}

impl Row {
    /// The run's joined latencies, ns (latency scenario only; not in the CSV).
    pub fn latencies(&self) -> &[i64] {
        &self.latencies_ns
    }
}

struct Ctx {
    net: TestNet,
    daemon: PathBuf,
    bench: PathBuf,
    raw: PathBuf,
    pcap: PathBuf,
    calibration: PathBuf,
}

/// Children killed (and reaped) on drop.
struct Kids(Vec<Child>);
impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if c.try_wait().ok().flatten().is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

fn sigterm(c: &Child) {
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet (so the pid
    // cannot have been reused), with a valid signal number.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
}

fn wait_timeout(c: &mut Child, t: Duration) -> Result<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = c.try_wait()? {
            return Ok(s);
        }
        if start.elapsed() > t {
            let _ = c.kill();
            let s = c.wait()?;
            bail!("did not exit within {t:?} (killed: {s})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Clock ticks per second for proc(5)'s utime/stime.
fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// utime + stime of every thread of `pid`, ns, by thread name (proc(5) /proc/PID/task/TID/stat
/// fields 14 and 15).
fn thread_cpu_ns(pid: u32) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let tck = clk_tck();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return m;
    };
    for e in dir.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(l), Some(r)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        let name = format!("{}#{}", &s[l + 1..r], e.file_name().to_string_lossy());
        let f: Vec<&str> = s[r + 1..].split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| f.get(i)?.parse::<u64>().ok())
            .sum();
        m.insert(name, ticks * 1_000_000_000 / tck);
    }
    m
}

/// Dropped packets of the per-CPU input backlog, summed over CPUs (`/proc/net/softnet_stat`,
/// second column, hex).
fn softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|s| {
            s.lines()
                .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
                .sum()
        })
        .unwrap_or(0)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    let mut cur = v;
    for p in path {
        cur = match p.parse::<usize>() {
            Ok(i) if cur.is_array() => &cur[i],
            _ => &cur[*p],
        };
    }
    cur
}
fn num(v: &Value, path: &[&str]) -> Option<u64> {
    get(v, path).as_u64()
}

/// Period of the stall injection for a stall of `ms`: 1,000 ms, or 2 × `ms` for stalls of a
/// second or more (the daemon requires MS < EVERY_MS).
pub fn stall_every_ms(ms: u64) -> u64 {
    if ms < 1_000 { 1_000 } else { 2 * ms }
}

/// Runs one configuration; failures are returned as a row with `error` set.
fn run_one(ctx: &Ctx, spec: &Spec, idx: usize) -> Row {
    let mut row = Row {
        scenario: spec.scenario.into(),
        backend: spec.backend.label.into(),
        config: spec.config(),
        rep: spec.rep,
        pps_target: spec.pps,
        duration_s: spec.duration_s,
        stall_ms: spec.stall_ms,
        rcvbuf: spec.rcvbuf.map(str::to_owned),
        umem_frames: spec.umem_frames,
        wait: spec.wait.clone(),
        hog: spec.hog,
        subscribers: spec.subscribers,
        sensors: spec.sensors,
        ..Row::default()
    };
    if let Err(e) = run_inner(ctx, spec, idx, &mut row) {
        row.error = format!("{e:#}").replace('\n', " ");
        eprintln!("suite: {}: {}", spec.name(idx), row.error);
    }
    row
}

fn run_inner(ctx: &Ctx, spec: &Spec, idx: usize, row: &mut Row) -> Result<()> {
    let name = spec.name(idx);
    let raw = |ext: &str| ctx.raw.join(format!("{name}.{ext}"));
    let stats_path = raw("daemon.json");
    let _ = std::fs::remove_file(&stats_path);
    ctx.net.reset_link()?;
    let mut kids = Kids(Vec::new());

    // Daemon: one sensor by flags, or N sensors on consecutive ports by a config file.
    let mut d = exec_in(&ctx.net.host_ns);
    d.arg(&ctx.daemon).args([
        "run",
        "--iface",
        &ctx.net.host_if,
        "--listen",
        LISTEN,
        "--max-subscribers",
        "32",
        "--cpu",
        "0",
    ]);
    // Every sensor on RX queue 0 (the veth has one); `--queue` is a sensor flag, which a
    // configuration with `[[sensors]]` refuses beside them.
    if spec.sensors <= 1 {
        d.args([
            "--sensor",
            "vlp16",
            "--port",
            &PORT.to_string(),
            "--queue",
            "0",
        ])
        .arg("--calibration")
        .arg(&ctx.calibration);
    } else {
        let cfg = raw("sensors.toml");
        let mut text = String::new();
        for k in 0..spec.sensors {
            text.push_str(&format!(
                "[[sensors]]\nname = \"vlp16-{k}\"\nmodel = \"vlp16\"\nport = {}\ncalibration = {:?}\n\n",
                PORT + k,
                ctx.calibration.display().to_string()
            ));
        }
        std::fs::write(&cfg, text).with_context(|| format!("write {}", cfg.display()))?;
        d.arg("--config").arg(&cfg);
    }
    d.arg("--stats-json").arg(&stats_path);
    if spec.backend.backend != "xdp" {
        d.args(["--backend", spec.backend.backend]);
    }
    if let Some(m) = spec.backend.xdp_mode {
        d.args(["--xdp-mode", m]);
    }
    if let Some(u) = spec.umem_frames {
        d.args(["--umem-frames", &u.to_string()]);
    }
    if let Some(w) = &spec.wait {
        d.args(["--wait", w]);
    }
    if let Some(r) = spec.rcvbuf {
        d.args(["--rcvbuf", r]);
    }
    if let Some(s) = spec.stall_ms {
        d.args(["--stall", &format!("{s}:{}", stall_every_ms(s))]);
    }
    let log = std::fs::File::create(raw("daemon.log"))?;
    // Ready = READY=1 on its notify socket (sd_notify(3)): every thread runs. Its publisher
    // accepts connections earlier, while the start-up still uses CPU. Kept open to the end of
    // the run for its STOPPING=1.
    let mut notify = NotifySocket::new();
    d.stdout(Stdio::null())
        .stderr(log)
        .env("RUST_LOG", "warn")
        .env("NOTIFY_SOCKET", &notify.path);
    kids.0.push(d.spawn().context("start daemon")?);
    let daemon_pid = kids.0[0].id();

    let ready = wait_ready(&mut kids.0[0], "daemon", Duration::from_secs(25), || {
        notify.ready()
    });
    if let Err(e) = ready {
        let log = std::fs::read_to_string(raw("daemon.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(2).collect();
        bail!("{e:#}; daemon log: {}", tail.join(" / "));
    }

    // Collector.
    let frames_path = raw("frames.jsonl");
    let mut collector_idx = None;
    if spec.subscribers > 0 {
        let ready = raw("ready");
        let _ = std::fs::remove_file(&ready);
        let mut c = exec_in(&ctx.net.host_ns);
        c.arg(&ctx.bench).args([
            "collect",
            "--connect",
            LISTEN,
            "--subscribers",
            &spec.subscribers.to_string(),
        ]);
        c.arg("--out")
            .arg(&frames_path)
            .arg("--ready-file")
            .arg(&ready);
        if spec.pin_collector {
            c.args(["--pin-cpu", "0"]);
        }
        c.stdout(Stdio::null()).stderr(Stdio::null());
        kids.0.push(c.spawn().context("start collector")?);
        let i = kids.0.len() - 1;
        wait_ready(&mut kids.0[i], "collector", Duration::from_secs(20), || {
            ready.exists()
        })?;
        collector_idx = Some(i);
    }
    // CPU hog on core 0.
    let mut hog_idx = None;
    if spec.hog {
        hog_idx = Some(kids.0.len());
        kids.0.push(
            Command::new("taskset")
                .args(["-c", "0"])
                .arg(&ctx.bench)
                .arg("hog")
                .stdout(Stdio::null())
                .spawn()
                .context("start hog")?,
        );
    }

    let before = ctx.net.counters();
    let backlog_before = softnet_dropped();
    let cpu_before: u64 = thread_cpu_ns(daemon_pid).values().sum();

    // Generator.
    let gen_path = raw("gen.json");
    let mut g = exec_in(&ctx.net.sensor_ns);
    g.args(["taskset", "-c", "1"]).arg(&ctx.bench).arg("gen");
    g.arg("--pcap").arg(&ctx.pcap).args([
        "--to",
        &ctx.net.host_ip,
        "--base-port",
        &PORT.to_string(),
        "--sensors",
        &spec.sensors.max(1).to_string(),
        "--pps",
        &spec.pps.map_or("max".into(), |p| p.to_string()),
        "--duration",
        &spec.duration_s.to_string(),
    ]);
    g.arg("--report").arg(&gen_path);
    if spec.offline_frames {
        g.args(["--sensor", "vlp16"])
            .arg("--calibration")
            .arg(&ctx.calibration);
    }
    let out = g
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("run generator")?;
    if !out.status.success() {
        bail!(
            "generator failed: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let gen_report: Value = serde_json::from_slice(&std::fs::read(&gen_path)?)?;

    // Drain: the longest stall plus the frame timeout (200 ms) and margin.
    std::thread::sleep(Duration::from_millis(
        500 + spec.stall_ms.map_or(0, |s| s.min(5_000)),
    ));
    let threads = thread_cpu_ns(daemon_pid);
    let cpu_after: u64 = threads.values().sum();
    let after = ctx.net.counters();
    let backlog_after = softnet_dropped();
    if let Some(h) = hog_idx.and_then(|i| kids.0.get_mut(i)) {
        let _ = h.kill();
        let _ = h.wait();
    }

    sigterm(&kids.0[0]);
    let status = wait_timeout(&mut kids.0[0], Duration::from_secs(20)).context("daemon stop")?;
    if let Some(i) = collector_idx {
        // On a timeout the collector is killed and its output may be missing.
        let _ = wait_timeout(&mut kids.0[i], Duration::from_secs(3));
    }
    drop(kids);
    if !status.success() {
        bail!("daemon exited with {status}");
    }
    let ds: Value = serde_json::from_slice(
        &std::fs::read(&stats_path).with_context(|| format!("{}", stats_path.display()))?,
    )
    .context("daemon stats JSON")?;
    std::fs::write(
        raw("threads.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "before_total_ns": cpu_before, "after": threads,
            "counters_before": before, "counters_after": after,
        }))?,
    )?;
    fill_row(
        row,
        &gen_report,
        &ds,
        &before,
        &after,
        backlog_after.saturating_sub(backlog_before),
        cpu_after.saturating_sub(cpu_before),
    );
    if spec.subscribers > 0 {
        let rows = crate::collect::read_rows(&frames_path).unwrap_or_default();
        fill_frames(row, &rows, &gen_report);
    }
    Ok(())
}

fn fill_row(
    row: &mut Row,
    g: &Value,
    d: &Value,
    before: &Counters,
    after: &Counters,
    backlog: u64,
    cpu_ns: u64,
) {
    row.sent = num(g, &["sent"]).unwrap_or(0);
    row.not_sent = num(g, &["not_sent"]).unwrap_or(0);
    row.achieved_pps = get(g, &["achieved_pps"]).as_f64().unwrap_or(0.0);
    row.gen_late = num(g, &["late"]).unwrap_or(0);
    row.gen_max_lag_us = num(g, &["max_lag_ns"]).unwrap_or(0) as f64 / 1e3;
    let per_sensor = |key: &str| -> Option<u64> {
        d.get("sensors")?
            .as_array()?
            .iter()
            .map(|s| s.get(key).and_then(serde_json::Value::as_u64))
            .sum()
    };
    row.decoded = per_sensor("decoded").unwrap_or(0);
    row.received = num(d, &["backend", "received"])
        .or_else(|| per_sensor("packets"))
        .unwrap_or(0);
    row.frames = per_sensor("frames").unwrap_or(0);
    row.lost = row.sent as i64 - row.decoded as i64;
    row.lost_pct = if row.sent > 0 {
        100.0 * row.lost as f64 / row.sent as f64
    } else {
        0.0
    };
    let dl = |a: &lidarxdp_testkit::LinkDrops, b: &lidarxdp_testkit::LinkDrops| {
        (b.rx_dropped + b.tx_dropped).saturating_sub(a.rx_dropped + a.tx_dropped)
    };
    row.veth_dropped =
        dl(&before.host_link, &after.host_link) + dl(&before.sensor_link, &after.sensor_link);
    row.backlog_dropped = backlog;
    row.udp_rcvbuf_errors = after
        .udp
        .rcvbuf_errors
        .saturating_sub(before.udp.rcvbuf_errors);
    row.udp_in_errors = after.udp.in_errors.saturating_sub(before.udp.in_errors);
    row.xdp_redirected = num(d, &["xdp", "redirected"]);
    row.xsk_rx_dropped = num(d, &["xsk", "rx_dropped"]);
    row.xsk_rx_invalid_descs = num(d, &["xsk", "rx_invalid_descs"]);
    row.xsk_tx_invalid_descs = num(d, &["xsk", "tx_invalid_descs"]);
    row.xsk_rx_ring_full = num(d, &["xsk", "rx_ring_full"]);
    row.xsk_fill_ring_empty = num(d, &["xsk", "rx_fill_ring_empty_descs"]);
    row.xsk_tx_ring_empty = num(d, &["xsk", "tx_ring_empty_descs"]);
    row.decoder_rejected = row.received.saturating_sub(row.decoded);
    // rx_fill_ring_empty_descs is not added: a fill-ring miss is also counted in rx_dropped.
    // With native XDP the veth counts a failed redirect to the AF_XDP socket as its own
    // drop too: the two layers count the same packets, so only the larger is summed.
    let xsk = row.xsk_rx_dropped.unwrap_or(0) + row.xsk_rx_ring_full.unwrap_or(0);
    let (veth, xsk) = if row.xsk_rx_dropped.is_some() {
        (row.veth_dropped.max(xsk), 0)
    } else {
        (row.veth_dropped, xsk)
    };
    let counted = veth + xsk + row.backlog_dropped + row.udp_in_errors + row.decoder_rejected;
    row.unexplained = row.lost - counted as i64;
    row.rcvbuf_bytes = num(d, &["backend", "rcvbuf_bytes"]);
    let per = |ns: u64| {
        if row.received > 0 {
            Some(ns as f64 / row.received as f64)
        } else {
            None
        }
    };
    row.cpu_ns_per_pkt = if row.decoded > 0 {
        Some(cpu_ns as f64 / row.decoded as f64)
    } else {
        None
    };
    row.receiver_ns_per_pkt = num(d, &["backend", "receiver_cpu_ns"]).and_then(per);
    row.decoder_ns_per_pkt = num(d, &["backend", "decoder_cpu_ns"]).and_then(per);
    row.waits_per_pkt = num(d, &["capture", "waits"]).and_then(per);
}

fn fill_frames(row: &mut Row, rows: &[crate::collect::FrameRow], g: &Value) {
    row.sub_frames = Some(rows.len() as u64);
    let pts: Vec<f64> = rows.iter().map(|r| r.points as f64).collect();
    if let Some(d) = stats::distribution(&pts) {
        row.points_mean = Some(d.mean);
        row.points_std = Some(d.std);
        row.points_min = Some(d.min);
        row.points_p0_1 = Some(d.p0_1);
        row.points_p1 = Some(d.p1);
        row.points_p10 = Some(d.p10);
        row.points_p50 = Some(d.p50);
    }
    if !rows.is_empty() {
        let inc = rows
            .iter()
            .filter(|r| r.packets_received < r.packets_expected)
            .count();
        row.frames_incomplete_pct = Some(100.0 * inc as f64 / rows.len() as f64);
    }
    if let Some(frames) = get(g, &["frames"]).as_array()
        && !frames.is_empty()
    {
        let sent: Vec<(u64, Option<u64>)> = frames
            .iter()
            .filter_map(|f| Some((f["start_ns"].as_u64()?, f["send_ns"].as_u64())))
            .collect();
        let recv: Vec<(u64, u64)> = rows.iter().map(|r| (r.start_ns, r.recv_ns)).collect();
        let j = stats::join_latency(&sent, &recv);
        let mut l: Vec<f64> = j.latencies_ns.iter().map(|&x| x as f64 / 1e3).collect();
        l.sort_by(f64::total_cmp);
        row.lat_p50_us = stats::quantile(&l, 0.5);
        row.lat_p99_us = stats::quantile(&l, 0.99);
        row.lat_max_us = l.last().copied();
        row.lat_samples = Some(l.len() as u64);
        row.lat_unmatched = Some(j.unmatched as u64);
        row.latencies_ns = j.latencies_ns;
    }
}

/// The plan of runs.
struct Plan {
    reps: u32,
    ladder_rates: Vec<Option<u64>>,
    ladder_s: f64,
    ladder_backends: Vec<Backend>,
    stall_ms: Vec<u64>,
    stall_s: f64,
    stall_configs: Vec<(Backend, Option<&'static str>, Option<u32>)>,
    contention_backends: Vec<Backend>,
    contention_s: f64,
    latency_backends: Vec<Backend>,
    latency_s: f64,
}

/// Rate of the contention runs, datagrams/s (10 VLP-16s aggregated on one port).
const CONTENTION_PPS: u64 = 7_540;
/// Rate of the stall runs, datagrams/s.
const STALL_PPS: u64 = 36_000;
/// Rate of the latency runs, datagrams/s (one real-time VLP-16).
const LATENCY_PPS: u64 = 754;
/// Rate whose ladder runs give the CPU cost, datagrams/s.
const CPU_PPS: u64 = 7_540;

fn stall_configs(backends: &[Backend]) -> Vec<(Backend, Option<&'static str>, Option<u32>)> {
    let mut v = Vec::new();
    for b in backends {
        if b.backend == "xdp" {
            v.push((*b, None, Some(XDP_UMEM_FRAMES)));
        } else {
            v.push((*b, Some("default"), None));
            v.push((*b, Some("max"), None));
        }
    }
    v
}

impl Plan {
    fn new(quick: bool, reps: Option<u32>) -> Self {
        if quick {
            let xs = [BACKENDS[0], BACKENDS[2]];
            Plan {
                reps: reps.unwrap_or(1),
                ladder_rates: vec![Some(CPU_PPS), None],
                ladder_s: 2.0,
                ladder_backends: BACKENDS.to_vec(),
                stall_ms: vec![200],
                stall_s: 2.5,
                stall_configs: stall_configs(&xs),
                contention_backends: xs.to_vec(),
                contention_s: 2.0,
                latency_backends: xs.to_vec(),
                latency_s: 2.0,
            }
        } else {
            Plan {
                reps: reps.unwrap_or(5),
                ladder_rates: vec![Some(754), Some(7_540), Some(75_400), None],
                ladder_s: 5.0,
                ladder_backends: BACKENDS.to_vec(),
                stall_ms: vec![10, 50, 200, 500, 1_000, 2_000],
                stall_s: 3.0,
                stall_configs: stall_configs(&BACKENDS),
                contention_backends: BACKENDS.to_vec(),
                contention_s: 6.0,
                latency_backends: BACKENDS.to_vec(),
                latency_s: 8.0,
            }
        }
    }
}

/// UMEM frames of every AF_XDP run: 65,536 × 2 KiB = 128 MiB, the memory the socket
/// baselines get with their largest `SO_RCVBUF` (`RMEM_MAX_LARGEST`).
const XDP_UMEM_FRAMES: u32 = 65_536;

fn base(scenario: &'static str, b: Backend, rep: u32, pps: Option<u64>, s: f64) -> Spec {
    Spec {
        scenario,
        backend: b,
        rep,
        pps,
        duration_s: s,
        stall_ms: None,
        rcvbuf: None,
        umem_frames: (b.backend == "xdp").then_some(XDP_UMEM_FRAMES),
        hog: false,
        subscribers: 0,
        pin_collector: false,
        offline_frames: false,
        wait: None,
        sensors: 1,
    }
}

/// The configurations of `backends` to run: each `xdp-*` and `recvmmsg` backend once per
/// wait mode in `waits` (none: once, with the daemon's default), the others once.
fn with_waits(backends: &[Backend], waits: &[String]) -> Vec<(Backend, Option<String>)> {
    let mut v = Vec::new();
    for b in backends {
        if waits.is_empty() || !(b.backend == "xdp" || b.backend == "recvmmsg") {
            v.push((*b, None));
        } else {
            v.extend(waits.iter().map(|w| (*b, Some(w.clone()))));
        }
    }
    v
}

fn write_csv(path: &Path, rows: &[&Row]) -> Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("{}", path.display()))?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// Environment facts for the summary.
#[derive(Debug, Default, Serialize)]
struct Env {
    date: String,
    kernel: String,
    cpus: usize,
    loadavg: String,
    rmem: RmemReport,
    quick: bool,
    reps: u32,
}

fn today() -> String {
    Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "unknown-date".into())
}

/// Runs the suite.
pub fn run(args: Args) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the suite creates namespaces and attaches XDP: run it as root");
    }
    if !args.daemon.is_file() {
        bail!("--daemon: {} is not a file", args.daemon.display());
    }
    if !args.pcap.is_file() {
        bail!("--pcap: {} is not a file", args.pcap.display());
    }
    if !args.calibration.is_file() {
        bail!(
            "--calibration: {} is not a file",
            args.calibration.display()
        );
    }
    let known = ["ladder", "contention", "stall", "latency"];
    if let Some(bad) = args.only.iter().find(|s| !known.contains(&s.as_str())) {
        bail!(
            "--only: {bad:?} is not a scenario; valid: {}",
            known.join(",")
        );
    }
    let want = |s: &str| args.only.is_empty() || args.only.iter().any(|o| o == s);
    let date = today();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench/results").join(&date));
    let raw = out.join("raw");
    std::fs::create_dir_all(&raw).with_context(|| format!("create {}", raw.display()))?;
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut plan = Plan::new(args.quick, args.reps);
    if let Some(bad) = args
        .backends
        .iter()
        .find(|b| !BACKENDS.iter().any(|k| k.label == b.as_str()))
    {
        let all: Vec<&str> = BACKENDS.iter().map(|b| b.label).collect();
        bail!(
            "--backends: {bad:?} is not a backend; valid: {}",
            all.join(",")
        );
    }
    if !args.backends.is_empty() {
        let keep = |v: &mut Vec<Backend>| v.retain(|b| args.backends.iter().any(|k| k == b.label));
        keep(&mut plan.ladder_backends);
        keep(&mut plan.contention_backends);
        keep(&mut plan.latency_backends);
        plan.stall_configs
            .retain(|(b, _, _)| args.backends.iter().any(|k| k == b.label));
    }
    if !args.rates.is_empty() {
        plan.ladder_rates = args
            .rates
            .iter()
            .map(|r| match r.as_str() {
                "max" => Ok(None),
                n => n
                    .parse::<u64>()
                    .ok()
                    .filter(|&p| (1..=10_000_000).contains(&p))
                    .map(Some)
                    .with_context(|| {
                        format!("--rates: {n:?} is not max or an integer in 1..=10000000")
                    }),
            })
            .collect::<Result<_>>()?;
    }
    if let Some(bad) = args.waits.iter().find(|w| {
        let (k, u) = w.split_once(':').unwrap_or((w.as_str(), ""));
        !(w.as_str() == "poll"
            || ["minwait", "paced", "busypoll"].contains(&k) && u.parse::<u32>().is_ok())
    }) {
        bail!(
            "--waits: {bad:?} is not a wait mode; valid: poll, minwait:USEC, paced:USEC, \
             busypoll:USEC (the daemon checks USEC)"
        );
    }

    let mut net = TestNet::up().context("test network")?;
    let rmem = net.raise_rmem_max(RMEM_MAX_LARGEST);
    let env = Env {
        date: date.clone(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .into(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .into(),
        rmem,
        quick: args.quick,
        reps: plan.reps,
    };
    let ctx = Ctx {
        net,
        daemon: abs(&args.daemon),
        bench: std::env::current_exe().context("own path")?,
        raw: abs(&raw),
        pcap: abs(&args.pcap),
        calibration: abs(&args.calibration),
    };

    let mut specs: Vec<Spec> = Vec::new();
    for rep in 1..=plan.reps {
        if want("ladder") {
            for &pps in &plan.ladder_rates {
                for (b, wait) in with_waits(&plan.ladder_backends, &args.waits) {
                    specs.push(Spec {
                        sensors: ladder_sensors(pps),
                        wait,
                        ..base("ladder", b, rep, pps, plan.ladder_s)
                    });
                }
            }
        }
        if want("contention") {
            for (b, wait) in with_waits(&plan.contention_backends, &args.waits) {
                specs.push(Spec {
                    wait,
                    hog: true,
                    subscribers: 8,
                    pin_collector: true,
                    ..base(
                        "contention",
                        b,
                        rep,
                        Some(CONTENTION_PPS),
                        plan.contention_s,
                    )
                });
            }
        }
        if want("latency") {
            for (b, wait) in with_waits(&plan.latency_backends, &args.waits) {
                specs.push(Spec {
                    wait,
                    subscribers: 1,
                    offline_frames: true,
                    ..base("latency", b, rep, Some(LATENCY_PPS), plan.latency_s)
                });
            }
        }
    }
    let t0 = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    let mut idx = 0usize;
    for s in &specs {
        idx += 1;
        eprintln!(
            "suite: [{:.0} s] {}",
            t0.elapsed().as_secs_f64(),
            s.name(idx)
        );
        rows.push(run_one(&ctx, s, idx));
    }
    // Stalls: increasing stall lengths per configuration; once every repetition of a length
    // lost packets, longer stalls are not run (they cannot be absorbed either).
    if want("stall") {
        for &(b, rcvbuf, umem) in &plan.stall_configs {
            for &ms in &plan.stall_ms {
                let mut all_lost = true;
                for rep in 1..=plan.reps {
                    idx += 1;
                    let s = Spec {
                        stall_ms: Some(ms),
                        rcvbuf,
                        umem_frames: umem,
                        // At least two stalls fall inside the sending time.
                        ..base(
                            "stall",
                            b,
                            rep,
                            Some(STALL_PPS),
                            plan.stall_s
                                .max((2 * stall_every_ms(ms)) as f64 / 1e3 + 0.5),
                        )
                    };
                    eprintln!(
                        "suite: [{:.0} s] {}",
                        t0.elapsed().as_secs_f64(),
                        s.name(idx)
                    );
                    let r = run_one(&ctx, &s, idx);
                    all_lost &= r.error.is_empty() && r.lost > 0 || !r.error.is_empty();
                    rows.push(r);
                }
                if all_lost {
                    break;
                }
            }
        }
    }
    drop(ctx);

    for sc in ["ladder", "contention", "stall", "latency"] {
        let v: Vec<&Row> = rows.iter().filter(|r| r.scenario == sc).collect();
        if !v.is_empty() {
            write_csv(&out.join(format!("{sc}.csv")), &v)?;
        }
    }
    let cpu: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "ladder" && r.pps_target == Some(CPU_PPS))
        .collect();
    if !cpu.is_empty() {
        write_csv(&out.join("cpu.csv"), &cpu)?;
    }
    let md = crate::report::summary(&rows, &env_lines(&env), &plan.stall_ms);
    std::fs::write(out.join("summary.md"), &md)?;
    std::fs::write(raw.join("env.json"), serde_json::to_string_pretty(&env)?)?;
    crate::report::plot_loss_vs_rate(&rows, &out.join("loss_vs_rate.svg"))?;
    crate::report::plot_stalls(&rows, &out.join("stall_tolerance.svg"))?;
    println!("{md}");
    if rows.iter().all(|r| !r.error.is_empty()) {
        bail!("every run failed; see {}", out.join("summary.md").display());
    }
    eprintln!(
        "suite: {} runs in {:.0} s; results in {}",
        rows.len(),
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

fn env_lines(e: &Env) -> Vec<String> {
    let r = &e.rmem;
    let o = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    vec![
        format!(
            "date {} (UTC), kernel {}, {} CPUs, load average at start {}",
            e.date, e.kernel, e.cpus, e.loadavg
        ),
        format!(
            "{} (repetitions per configuration: {})",
            if e.quick { "quick run" } else { "full run" },
            e.reps
        ),
        format!(
            "net.core.rmem_max raised to {} bytes (= 65,536 UMEM frames × 2 KiB): init namespace {} → {}; \
             host namespace {} → {} after the init write, write inside the namespace {} → {} \
             (this is what `--rcvbuf max` sees; restored afterwards)",
            r.wanted,
            o(r.init_before),
            o(r.init_after),
            o(r.host_before),
            o(r.host_after_init_write),
            if r.host_write_ok {
                "succeeded"
            } else {
                "failed"
            },
            o(r.host_after)
        ),
        "veth pair, one RX/TX queue, AF_XDP in copy mode (veth has no zero-copy); decoder \
         pinned to core 0, generator to core 1"
            .into(),
    ]
}
