//! `cargo xtask soak [--minutes N]` (issue 40): a week's memory in an hour. One daemon with
//! every sink on, steady and churning subscribers on each sink, three faults, and the daemon's
//! memory sampled throughout; the verdict says whether memory stayed flat after the warm-up and
//! whether every steady subscriber got every frame.
//!
//! What runs (root; everything inside two network namespaces made for the run with unique
//! names, [`lidarxdp_testkit::NetnsPair`], removed at the end, on error and on Ctrl-C/SIGTERM):
//!
//! - the release daemon on the host-side veth (XDP generic mode + AF_XDP), 10 VLP-16s
//!   (`s0`..`s9`, UDP ports 2368..2377, the shared VLP16db.yaml), every sink: TCP
//!   (127.0.0.1:7510), zenoh with its shared-memory pool (peer listening on 127.0.0.1:7447),
//!   DDS (`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`, domain 0), Foxglove (8765), the view
//!   (8088), metrics (9751) and the pcap recording (`--record-split-size` [`SPLIT_MB`] MB:
//!   the recording has no file-count limit, so the soak deletes every part but the newest at
//!   each sample, and the disk does not fill);
//! - `lidarxdp-bench gen --sensors 10 --pps 7540` from the sensor namespace for `--minutes`:
//!   the VLP-16 dual-return capture looped as 10 sensors;
//! - steady subscribers, separate processes started before the first packet and counting
//!   frames: `lidarxdp subscribe 127.0.0.1:7510 --stats` (every sensor), `lidarxdp subscribe
//!   zenoh:/lidar/s0/points` and `.../s9/points` (shared memory), the tests' Fast DDS reader on
//!   `rt/lidar/s0/points` and Cyclone DDS reader on `rt/lidar/s9/points` (`--no-data`), and
//!   `foxglove_client.py count` on `/lidar/s0/points` and `/lidar/s9/points`;
//! - churn, all run long: `lidarxdp-bench soak-client tcp-churn` (connect, 2 frames, close,
//!   every second), a `lidarxdp subscribe zenoh:/lidar/s1/points --frames 2` process started
//!   every [`ZENOH_CHURN_S`] s (SIGTERM after 2 s if still running), a Fast DDS reader of
//!   `rt/lidar/s2/points` started every second (`--expect 1`), `foxglove_client.py churn` on
//!   `/lidar/s3/points` (connect, subscribe, one message, close, every second), and the view
//!   polled every second from this process (`GET /api/status`, `GET /api/frame?sensor=s0`);
//! - faults, once each, at fixed fractions of the time after the warm-up (see [`faults`]): a
//!   stalled TCP subscriber (connects, never reads, 60 s), a TCP reconnect storm (100
//!   connections/s for 10 s) and a zenoh one (sessions that open, declare a subscriber and
//!   close, 100/s asked of [`ZENOH_STORM_THREADS`] threads, for 10 s; the rate reached is
//!   reported).
//!
//! Samples every `--sample-s` s: the daemon's VmRSS and Threads (/proc/PID/status), its open
//! fds (/proc/PID/fd), and from its own client, `lidarxdp stats --json` in the daemon's
//! namespace, the process gauges (`resident_bytes`, `heap_bytes`, `heap_free_bytes`), the
//! zenoh pool's `shm_pool_used_bytes` / `shm_pool_free_bytes` and the `sink_queues` (blank in
//! the CSV when the daemon does not export them). VmRSS is also split into `RssAnon`,
//! `RssFile` and `RssShmem`, and the daemon's `/proc/PID/smaps` is saved (`smaps_*.txt`) at
//! the end of the warm-up, before each fault, a minute after each fault and at the end, so a
//! step can be traced to the mappings that grew.
//!
//! Verdict: RSS growth after the warm-up (least-squares slope of VmRSS over the samples from
//! minute W on, kB/min); RSS per whole minute from minute W on, the median of the minute's
//! samples outside the faults' own windows, each against minute W's (target: every minute
//! within 1 MB; a fault may hold memory while it lasts, not after), with the largest and the
//! last single sample beside it; the heap likewise (single samples); fds and threads at
//! minute W and at the end; per steady subscriber the frames received against the frames the
//! daemon published for its sensors (the stats JSON's `sensors[i].frames`), and the drops of
//! every sink. Exits non-zero when a steady
//! subscriber missed a frame, the daemon died, or it did not exit cleanly.
//!
//! Output in OUT (default `bench/results/<UTC date>-soak/`, or `...-soak-2/` and on when a run
//! of the day already has it): `samples.csv`, `soak.json`
//! (verdict and counters), `rss.svg` (RSS and heap against minutes), `summary.md`, and the
//! logs and stats of every process. A run of 30 minutes or more also rewrites the soak section
//! of docs/benchmarks.md (and docs/soak-rss.svg), unless `--no-docs`.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use lidarxdp_testkit::{NetnsPair, NotifySocket, PairSpec, exec_in, in_netns};
use serde_json::{Value, json};

use crate::demo::num;

/// Sensors (VLP-16 streams) the generator sends and the daemon decodes.
pub const SENSORS: usize = 10;
/// Total datagram rate over the sensors, datagrams/s (754 per VLP-16, as issue 25's soak).
pub const PPS: u64 = 7540;
/// UDP port of sensor 0; sensor i uses `BASE_PORT + i`.
pub const BASE_PORT: u16 = 2368;
/// The daemon's TCP publisher, inside its namespace.
pub const TCP_ADDR: &str = "127.0.0.1:7510";
/// Port the daemon's zenoh peer listens on (127.0.0.1).
pub const ZENOH_PORT: u16 = 7447;
/// The Foxglove WebSocket server's port.
pub const FOXGLOVE_PORT: u16 = 8765;
/// The view's port.
pub const VIEW_PORT: u16 = 8088;
/// The metrics endpoint's port.
pub const METRICS_PORT: u16 = 9751;
/// Size of a recording part, MB (10^6 bytes): at about 9.4 MB/s, a new part every ~11 s.
pub const SPLIT_MB: u64 = 100;
/// How long the stalled TCP subscriber holds its connection without reading, s.
pub const STALL_S: f64 = 60.0;
/// How long after a fault's end the soak looks again at what it left behind (the RSS reading
/// `rss_kb_1_min_after` and the `smaps_<fault>_1_min_after.txt` snapshot), s: one of the
/// daemon's minute trims has run by then.
pub const AFTER_FAULT_S: f64 = 60.0;
/// Length of each reconnect storm, s.
pub const STORM_S: f64 = 10.0;
/// Connections (TCP) or sessions (zenoh) per second a storm asks for.
pub const STORM_RATE: u64 = 100;
/// Threads of the zenoh storm: a session takes about 120 ms to open, declare and close, mostly
/// waiting (64 threads reached 91 sessions/s against an idle peer for 1.4 s of CPU in 5 s).
pub const ZENOH_STORM_THREADS: u32 = 64;
/// Period of the zenoh churn subscriber, s (a process start and a zenoh session each time).
pub const ZENOH_CHURN_S: f64 = 3.0;
/// The target: RSS after the warm-up stays within 1 MB (10^6 bytes) of its value at minute W,
/// in the kB (KiB) of VmRSS, a minute's value being the median of its samples outside the
/// faults ([`minute_medians`]).
pub const TARGET_KB: f64 = 1_000_000.0 / 1024.0;
/// The heading of the section of docs/benchmarks.md this command writes.
pub const DOCS_HEADING: &str = "## Soak: a week's memory in an hour (issue 40)";
/// The heading of the section it replaced (issue 25's `bench/soak.sh`).
pub const OLD_DOCS_HEADING: &str = "## Soak: 10 VLP-16s, every sink on (issue 25)";
/// Shortest run that rewrites the docs section, minutes.
pub const DOCS_MIN_MINUTES: f64 = 30.0;

/// `cargo xtask soak` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Length of the run (the generator's sending time), minutes, > 0.
    pub minutes: f64,
    /// Output folder (default `bench/results/<UTC date>-soak/`, `-2`, `-3`, ... for the day's
    /// later runs).
    pub out: Option<PathBuf>,
    /// The VLP-16 capture looped (default the dual-return one in ../shared/data).
    pub pcap: Option<PathBuf>,
    /// Sampling period, s, 1..=60.
    pub sample_s: f64,
    /// Warm-up, minutes, in [0, minutes).
    pub warmup_minutes: f64,
    /// Do not rewrite docs/benchmarks.md.
    pub no_docs: bool,
}

/// Options checked and resolved before anything is built.
pub struct Plan {
    opts: Options,
    pcap: PathBuf,
    calibration: PathBuf,
    out: PathBuf,
    python: PathBuf,
}

/// Checks what the soak needs before the build: root, the capture and calibration, the Python
/// client's interpreter, and the options' ranges.
///
/// # Errors
/// Not root; a missing file (named); an option out of range (named, with the valid range).
pub fn check(opts: Options) -> Result<Plan> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "cargo xtask soak needs root (XDP, AF_XDP and network namespaces): run it as root, \
             e.g. sudo -E cargo xtask soak"
        );
    }
    ensure!(
        opts.minutes.is_finite() && opts.minutes > 0.0 && opts.minutes <= 24.0 * 60.0,
        "--minutes {}: must be in (0, 1440]",
        opts.minutes
    );
    ensure!(
        opts.warmup_minutes.is_finite()
            && opts.warmup_minutes >= 0.0
            && opts.warmup_minutes < opts.minutes,
        "--warmup-minutes {}: must be in [0, --minutes {})",
        opts.warmup_minutes,
        opts.minutes
    );
    ensure!(
        opts.sample_s.is_finite() && (1.0..=60.0).contains(&opts.sample_s),
        "--sample-s {}: must be in [1, 60]",
        opts.sample_s
    );
    let data = lidarxdp_testkit::data("velodyne/vlp16");
    let pcap = opts
        .pcap
        .clone()
        .unwrap_or_else(|| data.join("vlp16_dual_nebula_603pkt.pcap"));
    if !pcap.is_file() {
        bail!(
            "capture {} not found (the shared VLP-16 captures, ../shared/data beside the \
             repository; or give --pcap FILE)",
            pcap.display()
        );
    }
    let calibration = data.join("calibration/VLP16db.yaml");
    if !calibration.is_file() {
        bail!(
            "calibration {} not found (../shared/data beside the repository)",
            calibration.display()
        );
    }
    let python = lidarxdp_testkit::python();
    if !python.is_file() {
        bail!(
            "Python interpreter {} not found (the Foxglove client needs websockets: run \
             `cargo xtask setup`, or set LIDARXDP_PYTHON)",
            python.display()
        );
    }
    let out = match &opts.out {
        Some(o) if o.is_absolute() => o.clone(),
        Some(o) => std::env::current_dir()?.join(o),
        None => first_free(
            &crate::root().join("bench/results"),
            &format!("{}-soak", crate::peers::utc_date()),
        ),
    };
    Ok(Plan {
        opts,
        pcap,
        calibration,
        out,
        python,
    })
}

/// `dir/name`, or the first of `dir/name-2`, `dir/name-3`, ... that does not exist yet: a
/// second run on the same day keeps the first one's results.
fn first_free(dir: &Path, name: &str) -> PathBuf {
    std::iter::once(dir.join(name))
        .chain((2..).map(|k| dir.join(format!("{name}-{k}"))))
        .find(|p| !p.exists())
        .expect("an unbounded sequence of names")
}

/// Set by SIGINT/SIGTERM: the run stops and cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM so that the namespaces are removed before xtask exits (the
/// children in the terminal's process group get Ctrl-C themselves).
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` only stores to an atomic, which is async-signal-safe; the
        // handler stays valid for the life of the process.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// Everything the run started, undone on drop in order: the stop flag raised, the churn
/// threads joined (each ends its own child), every process killed and reaped, and the
/// namespaces deleted.
struct Guard {
    out: PathBuf,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Value>>,
    procs: Vec<(String, Child)>,
    net: Option<NetnsPair>,
}

impl Guard {
    fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result<usize> {
        let child = cmd.spawn().with_context(|| format!("start {name}"))?;
        self.procs.push((name.to_owned(), child));
        Ok(self.procs.len() - 1)
    }

    fn child(&mut self, i: usize) -> &mut Child {
        &mut self.procs[i].1
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for (_, c) in self.procs.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(self.net.take());
        // The recording (up to SPLIT_MB per part) is not a result, also when the run failed.
        for e in fs::read_dir(&self.out)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("rec_") && name.ends_with(".pcap") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Sends `sig` to a child not yet reaped.
fn signal(c: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on a child we own and have not reaped (its pid cannot have been reused);
    // `sig` is a valid signal number.
    unsafe { libc::kill(c.id() as libc::pid_t, sig) };
}

/// Waits up to `timeout` for `c` to exit; `None` on timeout.
fn wait_for(c: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        if t.elapsed() >= timeout {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Signals `sig`, waits up to `timeout`, then SIGKILL; returns the exit status.
fn stop_child(c: &mut Child, sig: libc::c_int, timeout: Duration) -> std::process::ExitStatus {
    if let Ok(Some(s)) = c.try_wait() {
        return s;
    }
    signal(c, sig);
    if let Some(s) = wait_for(c, timeout) {
        return s;
    }
    let _ = c.kill();
    c.wait().expect("wait after SIGKILL")
}

/// A TOML basic string holding `s`.
fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// The daemon's configuration file (module documentation).
fn daemon_config(iface: &str, out: &Path, calibration: &Path) -> Result<String> {
    let mut t = String::new();
    let o = |f: &str| -> Result<String> { Ok(toml_str(path_str(&out.join(f))?)) };
    writeln!(
        t,
        "[capture]\nbackend = \"xdp\"\niface = {}\nxdp_mode = \"generic\"\n",
        toml_str(iface)
    )?;
    writeln!(t, "[process]\nstats_json = {}\n", o("stats.json")?)?;
    writeln!(t, "[tcp]\nlisten = {}\n", toml_str(TCP_ADDR))?;
    writeln!(
        t,
        "[zenoh]\nenabled = true\nconfig = {}\n",
        o("zpub.json5")?
    )?;
    writeln!(t, "[dds]\nenabled = true\n")?;
    writeln!(t, "[foxglove]\nlisten = \"127.0.0.1:{FOXGLOVE_PORT}\"\n")?;
    writeln!(t, "[view]\nlisten = \"127.0.0.1:{VIEW_PORT}\"\n")?;
    writeln!(t, "[metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n")?;
    writeln!(
        t,
        "[recording]\npcap = {}\nsplit_size_mb = {SPLIT_MB}\n",
        o("rec.pcap")?
    )?;
    for i in 0..SENSORS {
        writeln!(
            t,
            "[[sensors]]\nname = \"s{i}\"\nmodel = \"vlp16\"\ncalibration = {}\nport = {}\n",
            toml_str(path_str(calibration)?),
            BASE_PORT + i as u16
        )?;
    }
    Ok(t)
}

/// `GET path` from `127.0.0.1:port` (HTTP/1.1, `Connection: close`, 5 s timeouts) on the
/// calling thread's network namespace; returns the status and the body (chunked transfer
/// coding undone).
fn http_get(port: u16, path: &str) -> Result<(u16, Vec<u8>)> {
    let addr = format!("127.0.0.1:{port}");
    let mut s = TcpStream::connect_timeout(&addr.parse()?, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    parse_http(&buf)
}

/// Splits an HTTP/1.1 response (RFC 9112) into status and body; undoes `Transfer-Encoding:
/// chunked` (section 7.1).
fn parse_http(buf: &[u8]) -> Result<(u16, Vec<u8>)> {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("HTTP response without the end of its header")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("HTTP status line")?;
    let mut body = &buf[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((status, body.to_vec()));
    }
    let mut out = Vec::new();
    loop {
        let nl = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("chunk size line")?;
        let size_text = String::from_utf8_lossy(&body[..nl]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .context("chunk size")?;
        body = &body[nl + 2..];
        if size == 0 {
            return Ok((status, out));
        }
        ensure!(body.len() >= size, "chunk longer than the response");
        out.extend_from_slice(&body[..size]);
        body = body.get(size + 2..).unwrap_or(&[]);
    }
}

/// The daemon's counters and gauges as the stats JSON (the layout of `run --stats-json`), read
/// by its own client: `lidarxdp stats --json` run in namespace `ns` against the metrics port.
fn stats_json(daemon: &Path, ns: &str) -> Result<Value> {
    let out = exec_in(ns)
        .arg(daemon)
        .args(["stats", "--json", &format!("127.0.0.1:{METRICS_PORT}")])
        .output()
        .context("run lidarxdp stats --json")?;
    ensure!(
        out.status.success(),
        "lidarxdp stats --json: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).context("lidarxdp stats --json output")
}

/// One sample of the daemon.
#[derive(Clone, Debug, Default)]
struct Sample {
    /// Seconds since the generator started.
    t_s: f64,
    /// VmRSS, kB.
    rss_kb: u64,
    /// VmRSS split as proc(5) does: `RssAnon` (heap, stacks, anonymous mappings), `RssFile`
    /// (the executable's and libraries' pages), `RssShmem` (shared memory: the zenoh pool), kB.
    rss_anon_kb: u64,
    rss_file_kb: u64,
    rss_shmem_kb: u64,
    /// Open file descriptors.
    fds: u64,
    /// Threads.
    threads: u64,
    /// `lidarxdp_process_resident_bytes`.
    resident: Option<f64>,
    /// `lidarxdp_process_heap_bytes`.
    heap: Option<f64>,
    /// `lidarxdp_process_heap_free_bytes`.
    heap_free: Option<f64>,
    /// `lidarxdp_zenoh_shm_pool_used_bytes`.
    shm_used: Option<f64>,
    /// `lidarxdp_zenoh_shm_pool_free_bytes`.
    shm_free: Option<f64>,
    /// `lidarxdp_sink_queue_bytes` per `sink` label.
    queues: BTreeMap<String, f64>,
}

const CSV_HEADER: &str = "t_s,minute,rss_kb,rss_anon_kb,rss_file_kb,rss_shmem_kb,fds,threads,resident_bytes,heap_bytes,\
                          heap_free_bytes,shm_used_bytes,shm_free_bytes,sink_queue_bytes_total,sink_queue_bytes";

impl Sample {
    fn csv(&self) -> String {
        let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.0}"));
        let total = (!self.queues.is_empty()).then(|| self.queues.values().sum::<f64>());
        let per: Vec<String> = self
            .queues
            .iter()
            .map(|(k, v)| format!("{k}={v:.0}"))
            .collect();
        format!(
            "{:.1},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.t_s,
            self.t_s / 60.0,
            self.rss_kb,
            self.rss_anon_kb,
            self.rss_file_kb,
            self.rss_shmem_kb,
            self.fds,
            self.threads,
            o(self.resident),
            o(self.heap),
            o(self.heap_free),
            o(self.shm_used),
            o(self.shm_free),
            o(total),
            per.join(" ")
        )
    }
}

/// `/proc/PID/status` field `key` (`VmRSS:`, `Threads:`), its first number.
fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Copies the daemon's `/proc/PID/smaps` (proc(5): every mapping with its resident kB) to
/// `OUT/smaps_<label>.txt`, for comparing mappings between two moments: what a fault left
/// behind, and where (a thread's heap arena, the executable, a stack). A failure is only
/// reported: the snapshot is a diagnosis aid, not part of the verdict.
fn save_smaps(pid: u32, out: &Path, label: &str) {
    let to = out.join(format!("smaps_{label}.txt"));
    if let Err(e) = fs::copy(format!("/proc/{pid}/smaps"), &to) {
        eprintln!("soak: could not save {}: {e}", to.display());
    }
}

/// Samples the daemon `pid` (in namespace `ns`) at `t_s`.
fn sample(daemon: &Path, pid: u32, ns: &str, t_s: f64) -> Result<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status (did the daemon die?)"))?;
    let fds = fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    let mut s = Sample {
        t_s,
        rss_kb: status_field(&status, "VmRSS:").unwrap_or(0),
        rss_anon_kb: status_field(&status, "RssAnon:").unwrap_or(0),
        rss_file_kb: status_field(&status, "RssFile:").unwrap_or(0),
        rss_shmem_kb: status_field(&status, "RssShmem:").unwrap_or(0),
        threads: status_field(&status, "Threads:").unwrap_or(0),
        fds,
        ..Sample::default()
    };
    if let Ok(v) = stats_json(daemon, ns) {
        let f = |path: &[&str]| lidarxdp_testkit::lookup(&v, path).map(|n| n as f64);
        s.resident = f(&["process", "resident_bytes"]);
        s.heap = f(&["process", "heap_bytes"]);
        s.heap_free = f(&["process", "heap_free_bytes"]);
        s.shm_used = f(&["zenoh", "shm_pool_used_bytes"]);
        s.shm_free = f(&["zenoh", "shm_pool_free_bytes"]);
        for q in v["sink_queues"].as_array().into_iter().flatten() {
            if let (Some(sink), Some(bytes)) = (q["sink"].as_str(), q["queue_bytes"].as_u64()) {
                *s.queues.entry(sink.to_owned()).or_default() += bytes as f64;
            }
        }
    }
    Ok(s)
}

/// Deletes every recording part `rec_<n>.pcap` in `out` but the newest; returns how many.
fn prune_parts(out: &Path) -> u64 {
    let Ok(dir) = fs::read_dir(out) else { return 0 };
    let parts: Vec<(u64, PathBuf)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name
                .strip_prefix("rec_")?
                .strip_suffix(".pcap")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    let Some(newest) = parts.iter().map(|p| p.0).max() else {
        return 0;
    };
    parts
        .iter()
        .filter(|p| p.0 < newest)
        .filter(|p| fs::remove_file(&p.1).is_ok())
        .count() as u64
}

/// A fault: when it starts (seconds after the generator started) and what it runs.
#[derive(Clone, Debug)]
struct Fault {
    name: &'static str,
    what: String,
    start_s: f64,
    length_s: f64,
    proc: Option<usize>,
    started_s: Option<f64>,
    ended_s: Option<f64>,
    /// Whether the daemon's smaps a minute after the end was saved ([`save_smaps`]).
    smaps_after: bool,
    result: Value,
}

/// The three faults at fixed fractions (0.1, 0.3, 0.5) of the time after the warm-up, so a
/// 60-minute run with a 5-minute warm-up has them at minutes 10.5, 21.5 and 32.5 and ends with
/// 27 quiet minutes; in a short run they overlap.
fn faults(minutes: f64, warmup: f64) -> Vec<Fault> {
    let (w, p) = (warmup * 60.0, (minutes - warmup) * 60.0);
    let f = |name, what: String, frac: f64, length_s| Fault {
        name,
        what,
        start_s: w + frac * p,
        length_s,
        proc: None,
        started_s: None,
        ended_s: None,
        smaps_after: false,
        result: Value::Null,
    };
    vec![
        f(
            "tcp-stall",
            format!("a TCP subscriber connects and never reads for {STALL_S:.0} s"),
            0.1,
            STALL_S,
        ),
        f(
            "tcp-storm",
            format!(
                "TCP reconnect storm: connect, read the hello, close, {STORM_RATE}/s for \
                 {STORM_S:.0} s"
            ),
            0.3,
            STORM_S,
        ),
        f(
            "zenoh-storm",
            format!(
                "zenoh reconnect storm: sessions that open, declare a subscriber of \
                 /lidar/s0/points and close, {STORM_RATE}/s asked of \
                 {ZENOH_STORM_THREADS} threads, for {STORM_S:.0} s"
            ),
            0.5,
            STORM_S,
        ),
    ]
}

/// A steady subscriber's count against what the daemon published.
#[derive(Clone, Debug)]
struct SubCheck {
    name: String,
    sink: &'static str,
    received: u64,
    published: u64,
    note: String,
}

impl SubCheck {
    fn ok(&self) -> bool {
        self.published > 0 && self.received == self.published
    }
}

/// Least-squares slope of `(x, y)` points; `None` with fewer than 2 distinct x.
fn slope(p: &[(f64, f64)]) -> Option<f64> {
    let n = p.len() as f64;
    if p.len() < 2 {
        return None;
    }
    let (mx, my) = (
        p.iter().map(|q| q.0).sum::<f64>() / n,
        p.iter().map(|q| q.1).sum::<f64>() / n,
    );
    let sxx: f64 = p.iter().map(|q| (q.0 - mx).powi(2)).sum();
    let sxy: f64 = p.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Memory of one series after the warm-up: slope (per minute), value at minute W, largest and
/// last, in the series' unit.
#[derive(Clone, Debug)]
struct Growth {
    slope_per_min: Option<f64>,
    at_w: f64,
    max: f64,
    last: f64,
    samples: usize,
}

/// [`Growth`] of `(minute, value)` points from minute `w` on; `None` without any.
fn growth(points: &[(f64, f64)], w: f64) -> Option<Growth> {
    let after: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0 >= w).collect();
    let first = after.first()?;
    Some(Growth {
        slope_per_min: slope(&after),
        at_w: first.1,
        max: after.iter().map(|p| p.1).fold(f64::MIN, f64::max),
        last: after.last()?.1,
        samples: after.len(),
    })
}

/// One whole minute of a series: the median of its samples outside the faults.
#[derive(Clone, Debug, PartialEq)]
struct MinuteMedian {
    minute: u32,
    median: f64,
    samples: usize,
}

/// Median of each whole minute `[m, m + 1)` of `(minute, value)` points from minute `floor(w)`
/// on, leaving out the points inside any of `faults` (`[start, end]`, minutes): what a minute
/// holds, not where one sample fell in the churn (a subscriber that connects every second holds
/// its buffers for part of each second). Minutes with no point left are absent.
fn minute_medians(points: &[(f64, f64)], w: f64, faults: &[(f64, f64)]) -> Vec<MinuteMedian> {
    let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for &(m, v) in points {
        if m < w.floor() || faults.iter().any(|&(a, b)| m >= a && m <= b) {
            continue;
        }
        by.entry(m.floor() as u32).or_default().push(v);
    }
    by.into_iter()
        .map(|(minute, mut v)| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            MinuteMedian {
                minute,
                median,
                samples: n,
            }
        })
        .collect()
}

/// The minute of `m` farthest from the first one, and its distance (signed, in the series'
/// unit); `None` when `m` is empty.
fn farthest_minute(m: &[MinuteMedian]) -> Option<(&MinuteMedian, f64)> {
    let first = m.first()?;
    m.iter()
        .map(|x| (x, x.median - first.median))
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
}

/// A number with thousands separators (`45,090`).
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The last line of `text` that is a JSON object.
fn last_json(text: &str) -> Value {
    text.lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l.trim())
                .ok()
                .filter(Value::is_object)
        })
        .unwrap_or(Value::Null)
}

fn read_json(p: &Path) -> Value {
    fs::read(p)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// A process with a line protocol on stdin/stdout (the DDS readers, the Foxglove client):
/// waits up to `timeout` for its "ready" line and gives its stdout back.
fn wait_ready_line(
    name: &str,
    out: BufReader<ChildStdout>,
    timeout: Duration,
) -> Result<BufReader<ChildStdout>> {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut out = out;
        let mut line = String::new();
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => return tx.send(None),
                Ok(_) if line.trim() == "ready" => return tx.send(Some(out)),
                Ok(_) => {}
            }
        }
    });
    match rx.recv_timeout(timeout) {
        Ok(Some(out)) => Ok(out),
        Ok(None) => bail!("{name} exited before it was ready"),
        // The child is killed with the others; its reader thread then sees the end of file.
        Err(_) => bail!("{name} not ready after {timeout:?}"),
    }
}

/// The commit the daemon was built from (`git describe --always --dirty`).
fn commit() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .current_dir(crate::root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".into(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

/// UTC time now, `YYYY-MM-DD HH:MM`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{} {:02}:{:02} UTC",
        crate::peers::utc_date(),
        secs % 86_400 / 3600,
        secs % 3600 / 60
    )
}

/// A churn loop run on a thread until `stop`: `cycle` starts one short-lived child, which is
/// given `limit` to finish (then SIGTERM, then SIGKILL after 2 s); one cycle starts every
/// `period`. Returns `{"cycles", "completed"}` (completed: exited 0 on its own).
fn churn_thread(
    stop: Arc<AtomicBool>,
    period: Duration,
    limit: Duration,
    cycle: impl Fn() -> std::io::Result<Child> + Send + 'static,
) -> JoinHandle<Value> {
    thread::spawn(move || {
        let (mut cycles, mut completed, mut failed_starts) = (0u64, 0u64, 0u64);
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            cycles += 1;
            match cycle() {
                Ok(mut c) => {
                    let mut done = None;
                    while done.is_none() && t.elapsed() < limit && !stop.load(Ordering::SeqCst) {
                        done = c.try_wait().ok().flatten();
                        thread::sleep(Duration::from_millis(20));
                    }
                    match done {
                        Some(s) if s.success() => completed += 1,
                        Some(_) => {}
                        None => {
                            stop_child(&mut c, libc::SIGTERM, Duration::from_secs(2));
                        }
                    }
                }
                Err(_) => failed_starts += 1,
            }
            while t.elapsed() < period && !stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(20));
            }
        }
        json!({"cycles": cycles, "completed": completed, "failed_starts": failed_starts})
    })
}

/// The view polled every second from a thread in namespace `ns` until `stop`.
fn view_thread(stop: Arc<AtomicBool>, ns: String) -> JoinHandle<Value> {
    thread::spawn(move || {
        in_netns(&ns, || {
            let (mut polls, mut ok, mut frames, mut errors) = (0u64, 0u64, 0u64, 0u64);
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                polls += 1;
                match http_get(VIEW_PORT, "/api/status") {
                    Ok((200, _)) => ok += 1,
                    _ => errors += 1,
                }
                match http_get(VIEW_PORT, "/api/frame?sensor=s0") {
                    Ok((200, _)) => frames += 1,
                    Ok((204, _)) => {}
                    _ => errors += 1,
                }
                while t.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(20));
                }
            }
            json!({"polls": polls, "status_ok": ok, "frames": frames, "errors": errors})
        })
    })
}

/// Runs the soak with the release daemon `daemon` and harness `bench` (module documentation).
///
/// # Errors
/// A step that failed to start, the daemon not becoming ready or dying, a steady subscriber
/// that missed a frame (after everything was written), or Ctrl-C.
pub fn soak(plan: &Plan, daemon: &Path, bench: &Path) -> Result<()> {
    let o = &plan.opts;
    let out = &plan.out;
    fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    // Earlier runs' files (the recording parts above all).
    for e in fs::read_dir(out)?.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name.starts_with("rec")
            || name.starts_with("sub_")
            || name.starts_with("dds_")
            || name.starts_with("fox_")
            || [
                "soak.toml",
                "zpub.json5",
                "zsub.json5",
                "daemon.log",
                "gen.log",
                "gen.json",
                "stats.json",
                "samples.csv",
                "soak.json",
                "rss.svg",
                "summary.md",
                "churn.log",
                "faults.log",
            ]
            .contains(&name.as_str());
        if ours && e.path().is_file() {
            let _ = fs::remove_file(e.path());
        }
    }
    let checkers = lidarxdp_testkit::build_dds_checkers(&crate::target_dir().join("soak-dds"))
        .map_err(anyhow::Error::msg)?;
    let script = crate::root().join("userspace/tests/live/foxglove_client.py");
    let zpub = out.join("zpub.json5");
    let zsub = out.join("zsub.json5");
    fs::write(
        &zpub,
        format!(
            "{{ mode: \"peer\", listen: {{ endpoints: [\"tcp/127.0.0.1:{ZENOH_PORT}\"] }}, \
             scouting: {{ multicast: {{ enabled: false }} }} }}\n"
        ),
    )?;
    fs::write(
        &zsub,
        format!(
            "{{ mode: \"peer\", connect: {{ endpoints: [\"tcp/127.0.0.1:{ZENOH_PORT}\"] }}, \
             listen: {{ endpoints: [] }}, scouting: {{ multicast: {{ enabled: false }} }} }}\n"
        ),
    )?;

    catch_signals();
    let stop = Arc::new(AtomicBool::new(false));
    let mut g = Guard {
        out: out.clone(),
        stop: stop.clone(),
        threads: Vec::new(),
        procs: Vec::new(),
        net: None,
    };
    let net = NetnsPair::create(PairSpec::unique("soak"))?;
    let (host, sensor) = (net.host_ns.clone(), net.sensor_ns.clone());
    let (host_if, host_ip) = (net.host_if.clone(), net.host_ip.clone());
    g.net = Some(net);
    eprintln!(
        "soak: namespaces {sensor} -> {host} ({host_if} {host_ip}); output {}",
        out.display()
    );

    let config = out.join("soak.toml");
    fs::write(&config, daemon_config(&host_if, out, &plan.calibration)?)?;
    let log = |name: &str| -> Result<fs::File> {
        fs::File::create(out.join(name)).with_context(|| format!("create {name}"))
    };
    let in_ns = |ns: &str, exe: &Path| {
        let mut c = exec_in(ns);
        c.arg(exe);
        c
    };

    // The daemon.
    let mut notify = NotifySocket::new();
    let d = g.spawn(
        "daemon",
        in_ns(&host, daemon)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env_remove("ROS_DOMAIN_ID")
            .env_remove("CYCLONEDDS_URI")
            .env_remove("ROS_STATIC_PEERS")
            .env_remove("ROS_LOCALHOST_ONLY")
            .env_remove("ZENOH_SESSION_CONFIG_URI")
            .env_remove("ZENOH_CONFIG_OVERRIDE")
            .env("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
            .env("NOTIFY_SOCKET", &notify.path)
            .stdout(log("daemon.log")?)
            .stderr(log("daemon.log")?.try_clone()?),
    )?;
    lidarxdp_testkit::wait_ready(g.child(d), "daemon", Duration::from_secs(60), || {
        notify.ready()
    })?;
    let pid = g.child(d).id();
    eprintln!("soak: daemon ready (pid {pid})");

    // Steady subscribers.
    let ready = |f: &str| out.join(f);
    let tcp = g.spawn(
        "TCP subscriber",
        in_ns(&host, daemon)
            .args([
                "subscribe",
                TCP_ADDR,
                "--stats",
                "--connect-timeout-ms",
                "15000",
            ])
            .arg("--ready-file")
            .arg(ready("sub_tcp.ready"))
            .arg("--summary-json")
            .arg(out.join("sub_tcp.json"))
            .stdout(log("sub_tcp.log")?)
            .stderr(Stdio::null()),
    )?;
    let mut zenoh_subs = Vec::new();
    for s in [0usize, 9] {
        let i = g.spawn(
            &format!("zenoh subscriber s{s}"),
            in_ns(&host, daemon)
                .arg("subscribe")
                .arg(format!("zenoh:/lidar/s{s}/points"))
                .arg("--zenoh-config")
                .arg(&zsub)
                .arg("--stats")
                .arg("--ready-file")
                .arg(ready(&format!("sub_z{s}.ready")))
                .arg("--summary-json")
                .arg(out.join(format!("sub_z{s}.json")))
                .stdout(log(&format!("sub_z{s}.log"))?)
                .stderr(Stdio::null()),
        )?;
        zenoh_subs.push((s, i));
    }
    for (name, i) in [("TCP subscriber", tcp)]
        .into_iter()
        .chain(zenoh_subs.iter().map(|&(_, i)| ("zenoh subscriber", i)))
    {
        let f = match i {
            _ if i == tcp => ready("sub_tcp.ready"),
            _ => {
                let s = zenoh_subs.iter().find(|z| z.1 == i).map_or(0, |z| z.0);
                ready(&format!("sub_z{s}.ready"))
            }
        };
        lidarxdp_testkit::wait_ready(g.child(i), name, Duration::from_secs(30), || f.exists())?;
    }
    // DDS readers (Fast DDS on s0, Cyclone DDS on s9) and the Foxglove client: "ready" lines.
    let mut lined: Vec<(String, usize, Option<ChildStdin>, BufReader<ChildStdout>)> = Vec::new();
    for (name, exe, s, prefix) in [
        ("Fast DDS reader s0", &checkers.fastdds, 0, "dds_fastdds_s0"),
        (
            "Cyclone DDS reader s9",
            &checkers.cyclone,
            9,
            "dds_cyclone_s9",
        ),
    ] {
        let i = g.spawn(
            name,
            in_ns(&host, exe)
                .args(["--topic", &format!("rt/lidar/s{s}/points")])
                .arg("--out")
                .arg(out.join(prefix))
                .args(["--localhost", "--no-data"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log(&format!("{prefix}.log"))?),
        )?;
        let stdin = g.child(i).stdin.take();
        let stdout = BufReader::new(g.child(i).stdout.take().context("stdout")?);
        let stdout = wait_ready_line(name, stdout, Duration::from_secs(60))?;
        lined.push((name.to_owned(), i, stdin, stdout));
    }
    let fox_url = format!("ws://127.0.0.1:{FOXGLOVE_PORT}");
    let fox_topics = "/lidar/s0/points,/lidar/s9/points";
    {
        let name = "Foxglove client s0,s9";
        let i = g.spawn(
            name,
            exec_in(&host)
                .arg(&plan.python)
                .arg(&script)
                .args(["count", "--url", &fox_url, "--protocols", "foxglove.sdk.v1"])
                .args(["--topics", fox_topics])
                .arg("--out")
                .arg(out.join("fox_steady"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log("fox_steady.log")?),
        )?;
        let stdin = g.child(i).stdin.take();
        let stdout = BufReader::new(g.child(i).stdout.take().context("stdout")?);
        let stdout = wait_ready_line(name, stdout, Duration::from_secs(60))?;
        lined.push((name.to_owned(), i, stdin, stdout));
    }
    // The DDS writer matches a reader a little after the reader matched it (discovery runs
    // both ways): wait until the daemon counts both, so no first frame goes to discovery.
    let t = Instant::now();
    loop {
        let subs = stats_json(daemon, &host)
            .ok()
            .and_then(|v| lidarxdp_testkit::lookup(&v, &["dds", "subscribers"]))
            .unwrap_or(0);
        if subs >= 2 {
            break;
        }
        ensure!(
            t.elapsed() < Duration::from_secs(30),
            "the daemon's DDS writers matched {subs} of the 2 DDS readers within 30 s"
        );
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "soak: steady subscribers ready: TCP, zenoh s0 and s9, Fast DDS s0, Cyclone DDS s9, Foxglove s0 and s9"
    );

    // Churn.
    let tcp_churn = g.spawn(
        "TCP churn",
        in_ns(&host, bench)
            .args(["soak-client", "tcp-churn", "--addr", TCP_ADDR])
            .args(["--frames", "2", "--every-ms", "1000"])
            .stdout(Stdio::piped())
            .stderr(log("churn_tcp.log")?),
    )?;
    let fox_churn = g.spawn(
        "Foxglove churn",
        exec_in(&host)
            .arg(&plan.python)
            .arg(&script)
            .args(["churn", "--url", &fox_url, "--protocols", "foxglove.sdk.v1"])
            .args([
                "--topics",
                "/lidar/s3/points",
                "--every",
                "1",
                "--timeout",
                "10",
            ])
            .arg("--out")
            .arg(out.join("fox_churn"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log("fox_churn.log")?),
    )?;
    let fox_churn_stdin = g.child(fox_churn).stdin.take();
    let zenoh_churn = {
        let (host, daemon, zsub) = (host.clone(), daemon.to_path_buf(), zsub.clone());
        churn_thread(
            stop.clone(),
            Duration::from_secs_f64(ZENOH_CHURN_S),
            Duration::from_secs(2),
            move || {
                exec_in(&host)
                    .arg(&daemon)
                    .args(["subscribe", "zenoh:/lidar/s1/points", "--frames", "2"])
                    .arg("--zenoh-config")
                    .arg(&zsub)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            },
        )
    };
    let dds_churn = {
        let (host, exe, prefix) = (
            host.clone(),
            checkers.fastdds.clone(),
            out.join("dds_churn"),
        );
        churn_thread(
            stop.clone(),
            Duration::from_secs(1),
            Duration::from_secs(5),
            move || {
                let _ = fs::remove_file(prefix.with_extension("jsonl"));
                exec_in(&host)
                    .arg(&exe)
                    .args(["--topic", "rt/lidar/s2/points", "--out"])
                    .arg(&prefix)
                    .args([
                        "--localhost",
                        "--no-data",
                        "--expect",
                        "1",
                        "--timeout-s",
                        "4",
                    ])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            },
        )
    };
    let view = view_thread(stop.clone(), host.clone());
    g.threads.extend([zenoh_churn, dds_churn, view]);

    // The load.
    let secs = o.minutes * 60.0;
    let gen_ = g.spawn(
        "generator",
        in_ns(&sensor, bench)
            .arg("gen")
            .arg("--pcap")
            .arg(&plan.pcap)
            .args(["--to", &host_ip, "--sensors", &SENSORS.to_string()])
            .args(["--pps", &PPS.to_string(), "--duration", &format!("{secs}")])
            .arg("--report")
            .arg(out.join("gen.json"))
            .stdout(log("gen.log")?)
            .stderr(log("gen.log")?.try_clone()?),
    )?;
    let started = utc_now();
    let t0 = Instant::now();
    eprintln!(
        "soak: {SENSORS} VLP-16s at {PPS} datagrams/s for {} min (warm-up {} min), a sample every {} s",
        o.minutes, o.warmup_minutes, o.sample_s
    );

    let mut faults = faults(o.minutes, o.warmup_minutes);
    let mut csv = fs::File::create(out.join("samples.csv"))?;
    writeln!(csv, "{CSV_HEADER}")?;
    let mut samples: Vec<Sample> = Vec::new();
    let mut pruned = 0u64;
    let mut next_sample = Duration::ZERO;
    let mut next_minute = 1u64;
    let gen_status = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted: processes stopped, namespaces removed");
        }
        if let Some(s) = g.child(d).try_wait()? {
            bail!(
                "the daemon died after {:.1} min: {s} (see {})",
                t0.elapsed().as_secs_f64() / 60.0,
                out.join("daemon.log").display()
            );
        }
        let now = t0.elapsed();
        if now >= next_sample {
            let s = sample(daemon, pid, &host, now.as_secs_f64())?;
            writeln!(csv, "{}", s.csv())?;
            csv.flush()?;
            samples.push(s);
            pruned += prune_parts(out);
            next_sample += Duration::from_secs_f64(o.sample_s);
        }
        if now.as_secs() >= next_minute * 60 {
            let s = samples.last().cloned().unwrap_or_default();
            eprintln!(
                "soak: minute {next_minute}: RSS {:.1} MiB, fds {}, threads {}",
                s.rss_kb as f64 / 1024.0,
                s.fds,
                s.threads
            );
            // The first whole minute at or after the warm-up (minute 1 for no warm-up).
            if next_minute == (o.warmup_minutes.ceil() as u64).max(1) {
                save_smaps(pid, out, "end_of_warm_up");
            }
            next_minute += 1;
        }
        for f in faults.iter_mut() {
            if f.started_s.is_none() && now.as_secs_f64() >= f.start_s {
                save_smaps(pid, out, &format!("{}_before", f.name));
                let mut c = in_ns(&host, bench);
                c.args(["soak-client", f.name]);
                match f.name {
                    "tcp-stall" => c.args(["--addr", TCP_ADDR, "--seconds", &format!("{STALL_S}")]),
                    "tcp-storm" => c
                        .args(["--addr", TCP_ADDR, "--rate", &STORM_RATE.to_string()])
                        .args(["--seconds", &format!("{STORM_S}"), "--threads", "4"]),
                    _ => c
                        .arg("--zenoh-config")
                        .arg(&zsub)
                        .args(["--topic", "/lidar/s0/points"])
                        .args(["--rate", &STORM_RATE.to_string()])
                        .args(["--seconds", &format!("{STORM_S}")])
                        .args(["--threads", &ZENOH_STORM_THREADS.to_string()]),
                };
                c.stdout(Stdio::piped())
                    .stderr(log(&format!("fault_{}.log", f.name))?);
                f.proc = Some(g.spawn(f.name, &mut c)?);
                f.started_s = Some(now.as_secs_f64());
                eprintln!(
                    "soak: {:.2} min: fault {}: {}",
                    now.as_secs_f64() / 60.0,
                    f.name,
                    f.what
                );
            }
            if let (Some(i), None) = (f.proc, f.ended_s)
                && g.child(i).try_wait()?.is_some()
            {
                f.ended_s = Some(t0.elapsed().as_secs_f64());
                let mut text = String::new();
                if let Some(mut so) = g.child(i).stdout.take() {
                    let _ = so.read_to_string(&mut text);
                }
                f.result = last_json(&text);
                eprintln!("soak: fault {} over: {}", f.name, f.result);
            }
            if let Some(e) = f.ended_s
                && !f.smaps_after
                && now.as_secs_f64() >= e + AFTER_FAULT_S
            {
                save_smaps(pid, out, &format!("{}_1_min_after", f.name));
                f.smaps_after = true;
            }
        }
        if let Some(s) = g.child(gen_).try_wait()? {
            break s;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let sent_s = t0.elapsed().as_secs_f64();
    save_smaps(pid, out, "end");
    ensure!(
        gen_status.success(),
        "the generator failed: {gen_status} (see gen.log)"
    );
    eprintln!(
        "soak: generator done after {:.1} min; stopping",
        sent_s / 60.0
    );

    // Churn off, faults still running cut short.
    stop.store(true, Ordering::SeqCst);
    let churn: Vec<Value> = g
        .threads
        .drain(..)
        .map(|t| t.join().unwrap_or(Value::Null))
        .collect();
    let tcp_churn_status = stop_child(g.child(tcp_churn), libc::SIGTERM, Duration::from_secs(10));
    let mut tcp_churn_text = String::new();
    if let Some(mut so) = g.child(tcp_churn).stdout.take() {
        let _ = so.read_to_string(&mut tcp_churn_text);
    }
    drop(fox_churn_stdin);
    if wait_for(g.child(fox_churn), Duration::from_secs(15)).is_none() {
        // SIGTERM: it still writes its counts.
        stop_child(g.child(fox_churn), libc::SIGTERM, Duration::from_secs(5));
    }
    for f in faults.iter_mut() {
        if let (Some(i), None) = (f.proc, f.ended_s) {
            stop_child(g.child(i), libc::SIGTERM, Duration::from_secs(5));
            f.ended_s = Some(t0.elapsed().as_secs_f64());
            f.result = json!({"cut_short": true});
        }
    }
    // The last frames (closed on their timeouts) reach every sink.
    thread::sleep(Duration::from_secs(2));
    if let Ok(s) = sample(daemon, pid, &host, t0.elapsed().as_secs_f64()) {
        writeln!(csv, "{}", s.csv())?;
        samples.push(s);
    }
    pruned += prune_parts(out);

    // The daemon stops and writes its counters; then the steady subscribers report.
    let daemon_status = stop_child(g.child(d), libc::SIGTERM, Duration::from_secs(30));
    let stats = read_json(&out.join("stats.json"));
    let tcp_status = match wait_for(g.child(tcp), Duration::from_secs(10)) {
        Some(s) => s,
        None => stop_child(g.child(tcp), libc::SIGINT, Duration::from_secs(10)),
    };
    let _ = tcp_status;
    for &(_, i) in &zenoh_subs {
        stop_child(g.child(i), libc::SIGINT, Duration::from_secs(10));
    }
    let mut lined_results = BTreeMap::new();
    for (name, i, stdin, mut stdout) in lined {
        if let Some(mut w) = stdin {
            let _ = w.write_all(b"stop\n");
        }
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        let status = stop_child(g.child(i), libc::SIGTERM, Duration::from_secs(15));
        let mut r = last_json(&rest);
        if !r.is_object() {
            r = json!({"output": rest});
        }
        r["exit"] = json!(status.to_string());
        lined_results.insert(name, r);
    }
    drop(g);
    eprintln!("soak: processes stopped, namespaces removed");
    // The readiness files and the DDS readers' empty `.bin` files
    // (`--no-data`) are not results.
    for e in fs::read_dir(out)?.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let gone = name.ends_with(".ready")
            || name.starts_with("dds_churn")
            || (name.ends_with(".bin") && e.metadata().is_ok_and(|m| m.len() == 0));
        if gone {
            let _ = fs::remove_file(e.path());
        }
    }

    // Verdict.
    let frames = |s: usize| num(&stats, &["sensors", &s.to_string(), "frames"]);
    let all: u64 = (0..SENSORS).map(frames).sum();
    let mut subs = Vec::new();
    let tcp_sum = read_json(&out.join("sub_tcp.json"));
    let mut tcp_note = String::new();
    for s in 0..SENSORS {
        let got = num(&tcp_sum, &["sensors", &format!("s{s}"), "frames"]);
        if got != frames(s) {
            let _ = write!(tcp_note, "s{s}: {got} of {}; ", frames(s));
        }
    }
    subs.push(SubCheck {
        name: "`lidarxdp subscribe` (every sensor)".into(),
        sink: "TCP",
        received: num(&tcp_sum, &["frames"]),
        published: all,
        note: tcp_note,
    });
    for &(s, _) in &zenoh_subs {
        let z = read_json(&out.join(format!("sub_z{s}.json")));
        subs.push(SubCheck {
            name: format!("`lidarxdp subscribe zenoh:/lidar/s{s}/points`"),
            sink: "zenoh (shared memory)",
            received: num(&z, &["frames"]),
            published: frames(s),
            note: String::new(),
        });
    }
    for (name, s, sink) in [
        ("Fast DDS reader s0", 0, "DDS (Fast DDS 2.9 reader)"),
        ("Cyclone DDS reader s9", 9, "DDS (Cyclone DDS 0.10 reader)"),
    ] {
        let r = lined_results.get(name).cloned().unwrap_or(Value::Null);
        subs.push(SubCheck {
            name: format!("{name} (`rt/lidar/s{s}/points`)"),
            sink,
            received: num(&r, &["received"]),
            published: frames(s),
            note: format!("reader's lost count {}; {}", r["lost"], r["exit"]),
        });
    }
    let fox = read_json(&out.join("fox_steady.json"));
    for s in [0usize, 9] {
        let topic = format!("/lidar/s{s}/points");
        subs.push(SubCheck {
            name: format!("`foxglove_client.py count` {topic}"),
            sink: "Foxglove",
            received: fox["messages"][&topic].as_u64().unwrap_or(0),
            published: frames(s),
            note: String::new(),
        });
    }

    let w = o.warmup_minutes;
    let pts = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| Some((s.t_s / 60.0, f(s)?)))
            .collect()
    };
    let rss = growth(&pts(&|s| Some(s.rss_kb as f64)), w);
    let heap = growth(&pts(&|s| s.heap.map(|h| h / 1024.0)), w);
    let at_w = samples
        .iter()
        .find(|s| s.t_s / 60.0 >= w)
        .cloned()
        .unwrap_or_default();
    let end = samples.last().cloned().unwrap_or_default();
    for f in faults.iter_mut() {
        let (Some(a), Some(b)) = (f.started_s, f.ended_s) else {
            continue;
        };
        let before = samples.iter().rev().find(|s| s.t_s <= a).map(|s| s.rss_kb);
        let after = samples.iter().find(|s| s.t_s >= b).map(|s| s.rss_kb);
        let later = samples
            .iter()
            .find(|s| s.t_s >= b + AFTER_FAULT_S)
            .map(|s| s.rss_kb);
        f.result["rss_kb_before"] = json!(before);
        f.result["rss_kb_at_end"] = json!(after);
        f.result["rss_kb_1_min_after"] = json!(later);
    }

    let drops = json!({
        "tcp": {
            "frames_dropped_queue_full": num(&stats, &["publisher", "frames_dropped_queue_full"]),
            "frames_dropped_input_full": num(&stats, &["publisher", "frames_dropped_input_full"]),
            "subscribers_stalled": num(&stats, &["publisher", "subscribers_stalled"]),
            "subscribers_accepted": num(&stats, &["publisher", "subscribers_accepted"]),
            "subscribers_rejected": num(&stats, &["publisher", "subscribers_rejected"]),
        },
        "zenoh": {
            "published": num(&stats, &["zenoh", "published"]),
            "dropped": num(&stats, &["zenoh", "dropped"]),
            "loaned": num(&stats, &["zenoh", "loaned"]),
            "copied_bytes": num(&stats, &["zenoh", "copied_bytes"]),
            "loans_refused": num(&stats, &["zenoh", "loans_refused"]),
            "shm_exhausted": num(&stats, &["zenoh", "shm_exhausted"]),
            "errors": num(&stats, &["zenoh", "errors"]),
        },
        "dds": {
            "published": num(&stats, &["dds", "published"]),
            "dropped": num(&stats, &["dds", "dropped"]),
            "errors": num(&stats, &["dds", "errors"]),
        },
        "foxglove": {
            "frames": num(&stats, &["foxglove", "frames"]),
            "dropped": num(&stats, &["foxglove", "dropped"]),
            "connections": num(&stats, &["foxglove", "connections"]),
            "errors": num(&stats, &["foxglove", "errors"]),
        },
        "view": {
            "frames": num(&stats, &["view", "frames"]),
            "frames_served": num(&stats, &["view", "frames_served"]),
        },
        "recording": {
            "packets": num(&stats, &["recording", "packets"]),
            "files": num(&stats, &["recording", "files"]),
            "dropped": num(&stats, &["recording", "dropped"]),
            "errors": num(&stats, &["recording", "errors"]),
            "parts_deleted_by_soak": pruned,
        },
        "capture": {
            "sensor_datagrams": num(&stats, &["capture", "sensor_datagrams"]),
            "frames_out": num(&stats, &["capture", "frames_out"]),
            "frames_dropped": num(&stats, &["capture", "frames_dropped"]),
            "xsk_rx_dropped": num(&stats, &["xsk", "rx_dropped"]),
            "xsk_rx_ring_full": num(&stats, &["xsk", "rx_ring_full"]),
            "xsk_fill_ring_empty": num(&stats, &["xsk", "rx_fill_ring_empty_descs"]),
        },
    });
    let gen_report = read_json(&out.join("gen.json"));
    let churn_json = json!({
        "tcp": last_json(&tcp_churn_text),
        "tcp_exit": tcp_churn_status.to_string(),
        "zenoh": churn.first(),
        "dds_fastdds": churn.get(1),
        "view": churn.get(2),
        "foxglove": read_json(&out.join("fox_churn.json")),
    });

    let fault_windows: Vec<(f64, f64)> = faults
        .iter()
        .filter_map(|f| Some((f.started_s? / 60.0, f.ended_s? / 60.0)))
        .collect();
    let rss_minutes = minute_medians(&pts(&|s| Some(s.rss_kb as f64)), w, &fault_windows);
    let rss_met = farthest_minute(&rss_minutes).is_some_and(|(_, d)| d.abs() <= TARGET_KB);
    let mut lines = Vec::new();
    let mb = |kb: f64| kb / 1024.0;
    if let Some(r) = &rss {
        lines.push(format!(
            "RSS growth after the warm-up: {} kB/min (least squares over {} samples from minute {w})",
            r.slope_per_min.map_or("n/a".into(), |s| format!("{s:+.1}")),
            r.samples
        ));
        match (
            rss_minutes.first(),
            farthest_minute(&rss_minutes),
            rss_minutes.last(),
        ) {
            (Some(first), Some((far, d)), Some(last)) => {
                lines.push(format!(
                    "RSS per minute (the median of its samples outside the faults): minute {} \
                     {:.1} MiB; farthest: minute {} {:.1} MiB ({d:+.0} kB); last: minute {} \
                     {:.1} MiB ({:+.0} kB); target within 1 MB of minute {}: {}",
                    first.minute,
                    mb(first.median),
                    far.minute,
                    mb(far.median),
                    last.minute,
                    mb(last.median),
                    last.median - first.median,
                    first.minute,
                    if rss_met { "met" } else { "NOT met" }
                ));
            }
            _ => lines.push("RSS per minute: no minute after the warm-up".into()),
        }
        lines.push(format!(
            "RSS single samples against the first one from minute {w}: largest {:+.0} kB, \
             last {:+.0} kB",
            r.max - r.at_w,
            r.last - r.at_w,
        ));
    }
    match &heap {
        Some(h) => lines.push(format!(
            "Heap in use: {} kB/min; minute {w} {:.1} MiB, largest {:.1} MiB ({:+.0} kB), last \
             {:.1} MiB ({:+.0} kB)",
            h.slope_per_min.map_or("n/a".into(), |s| format!("{s:+.1}")),
            mb(h.at_w),
            mb(h.max),
            h.max - h.at_w,
            mb(h.last),
            h.last - h.at_w
        )),
        None => lines.push(
            "Heap in use: not exported by this daemon (lidarxdp_process_heap_bytes absent)".into(),
        ),
    }
    lines.push(format!(
        "File descriptors: {} at minute {w}, {} at the end; threads: {} and {}",
        at_w.fds, end.fds, at_w.threads, end.threads
    ));
    let missed: Vec<&SubCheck> = subs.iter().filter(|s| !s.ok()).collect();
    lines.push(if missed.is_empty() {
        format!(
            "Every frame to every steady subscriber: {} subscribers, {} frames published over \
             {SENSORS} sensors",
            subs.len(),
            thousands(all)
        )
    } else {
        format!(
            "MISSED frames: {}",
            missed
                .iter()
                .map(|s| format!("{} {} of {}", s.name, s.received, s.published))
                .collect::<Vec<_>>()
                .join("; ")
        )
    });
    lines.push(format!(
        "Drops: TCP queue {} (stalled subscribers {}), zenoh {}, DDS {}, Foxglove {}, \
         recording {}, capture {}",
        drops["tcp"]["frames_dropped_queue_full"],
        drops["tcp"]["subscribers_stalled"],
        drops["zenoh"]["dropped"],
        drops["dds"]["dropped"],
        drops["foxglove"]["dropped"],
        drops["recording"]["dropped"],
        drops["capture"]["frames_dropped"]
    ));
    let daemon_ok = daemon_status.success();
    if !daemon_ok {
        lines.push(format!("The daemon did not exit cleanly: {daemon_status}"));
    }
    let pass = missed.is_empty() && daemon_ok && all > 0;

    let report = json!({
        "command": command_line(o),
        "out": out
            .strip_prefix(crate::root())
            .unwrap_or(out)
            .display()
            .to_string(),
        "started": started,
        "commit": commit(),
        "minutes": o.minutes,
        "sent_minutes": sent_s / 60.0,
        "warmup_minutes": w,
        "sample_s": o.sample_s,
        "pass": pass,
        "verdict": lines,
        "rss_kb": rss.as_ref().map(|r| json!({
            "slope_per_min": r.slope_per_min, "at_warmup": r.at_w, "max": r.max, "last": r.last,
            "minute_medians": rss_minutes.iter().map(|m| json!({
                "minute": m.minute, "median": m.median, "samples": m.samples,
            })).collect::<Vec<_>>(),
            "target_met": rss_met,
        })),
        "heap_kb": heap.as_ref().map(|h| json!({
            "slope_per_min": h.slope_per_min, "at_warmup": h.at_w, "max": h.max, "last": h.last,
        })),
        "fds": {"at_warmup": at_w.fds, "end": end.fds},
        "threads": {"at_warmup": at_w.threads, "end": end.threads},
        "subscribers": subs.iter().map(|s| json!({
            "name": s.name, "sink": s.sink, "received": s.received, "published": s.published,
            "ok": s.ok(), "note": s.note,
        })).collect::<Vec<_>>(),
        "churn": churn_json,
        "steady_outputs": lined_results,
        "faults": faults.iter().map(|f| json!({
            "name": f.name, "what": f.what, "start_min": f.started_s.map(|s| s / 60.0),
            "end_min": f.ended_s.map(|s| s / 60.0), "result": f.result,
        })).collect::<Vec<_>>(),
        "drops": drops,
        "generator": gen_report,
        "daemon_exit": daemon_status.to_string(),
    });
    fs::write(
        out.join("soak.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    plot(&out.join("rss.svg"), &samples, w, &faults)?;
    fs::write(
        out.join("summary.md"),
        docs_section(&report, &samples, &faults, &subs, "rss.svg"),
    )?;
    println!("{}", lines.join("\n"));
    for s in &subs {
        println!(
            "  {} [{}]: {} of {} frames{}",
            s.name,
            s.sink,
            s.received,
            s.published,
            if s.ok() { "" } else { "  <- MISSED" }
        );
    }
    println!("  churn: {}", report["churn"]);
    println!("results: {}", out.display());

    if o.no_docs {
        eprintln!("soak: --no-docs: docs/benchmarks.md left as it is");
    } else if o.minutes < DOCS_MIN_MINUTES {
        eprintln!(
            "soak: a {}-minute run does not rewrite docs/benchmarks.md (only runs of {} \
             minutes or more do)",
            o.minutes, DOCS_MIN_MINUTES
        );
    } else if !pass {
        eprintln!("soak: the run failed; docs/benchmarks.md left as it is");
    } else {
        let docs = crate::root().join("docs/benchmarks.md");
        let text = fs::read_to_string(&docs)?;
        let section = docs_section(&report, &samples, &faults, &subs, "soak-rss.svg");
        fs::write(&docs, splice_docs(&text, &section)?)?;
        fs::copy(out.join("rss.svg"), crate::root().join("docs/soak-rss.svg"))?;
        eprintln!(
            "soak: rewrote the soak section of {} and docs/soak-rss.svg",
            docs.display()
        );
    }
    ensure!(daemon_ok, "the daemon exited with {daemon_status}");
    ensure!(
        pass,
        "a steady subscriber missed frames (see above and {})",
        out.display()
    );
    Ok(())
}

/// The command as run, for the report.
fn command_line(o: &Options) -> String {
    let mut s = format!("cargo xtask soak --minutes {}", o.minutes);
    if o.warmup_minutes != 5.0 {
        let _ = write!(s, " --warmup-minutes {}", o.warmup_minutes);
    }
    if o.sample_s != 5.0 {
        let _ = write!(s, " --sample-s {}", o.sample_s);
    }
    s
}

/// RSS (left axis) and heap in use (right axis), MiB, against minutes, each axis spanning its
/// series' range (so a growth of 1 MB shows), the warm-up and the faults marked, as SVG
/// (plotters).
fn plot(path: &Path, samples: &[Sample], warmup: f64, faults: &[Fault]) -> Result<()> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot {}: {e}", path.display());
    let rss: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (s.t_s / 60.0, s.rss_kb as f64 / 1024.0))
        .collect();
    let heap: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|s| Some((s.t_s / 60.0, s.heap? / 1_048_576.0)))
        .collect();
    // An axis from 2 MB below the series' smallest value to 2 MB above its largest.
    let range = |p: &[(f64, f64)]| {
        let lo = p.iter().map(|q| q.1).fold(f64::INFINITY, f64::min);
        let hi = p.iter().map(|q| q.1).fold(f64::NEG_INFINITY, f64::max);
        if lo.is_finite() {
            ((lo - 2.0).max(0.0), hi + 2.0)
        } else {
            (0.0, 1.0)
        }
    };
    let x1 = rss.iter().map(|p| p.0).fold(1.0f64, f64::max);
    let (y0, y1) = range(&rss);
    let (h0, h1) = range(&heap);
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            "lidarxdp soak: the daemon's memory (10 VLP-16s, every sink, churn and faults)",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..x1, y0..y1)
        .map_err(|e| err(&e))?
        .set_secondary_coord(0.0..x1, h0..h1);
    c.configure_mesh()
        .x_desc("minutes")
        .y_desc("RSS, MiB")
        .draw()
        .map_err(|e| err(&e))?;
    c.configure_secondary_axes()
        .y_desc("heap in use, MiB")
        .draw()
        .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(rss.iter().copied(), BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("RSS (VmRSS), left axis")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    if !heap.is_empty() {
        c.draw_secondary_series(LineSeries::new(heap.iter().copied(), RED.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label("heap in use, right axis")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    let grey = RGBColor(120, 120, 120);
    c.draw_series(std::iter::once(PathElement::new(
        vec![(warmup, y0), (warmup, y1)],
        grey.stroke_width(1),
    )))
    .map_err(|e| err(&e))?
    .label("end of warm-up")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    let orange = RGBColor(230, 140, 0);
    let band = (y1 - y0) * 0.03;
    for f in faults {
        let (Some(a), Some(b)) = (f.started_s, f.ended_s) else {
            continue;
        };
        let (a, b) = (a / 60.0, b / 60.0);
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, y0), (b.max(a + x1 / 300.0), y0 + band)],
            orange.filled(),
        )))
        .map_err(|e| err(&e))?;
        c.draw_series(std::iter::once(Text::new(
            f.name,
            (a, y0 + 2.5 * band),
            ("sans-serif", 12).into_font().color(&orange),
        )))
        .map_err(|e| err(&e))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The sample nearest to minute `m`.
fn at_minute(samples: &[Sample], m: f64) -> Option<&Sample> {
    samples.iter().min_by(|a, b| {
        (a.t_s / 60.0 - m)
            .abs()
            .total_cmp(&(b.t_s / 60.0 - m).abs())
    })
}

/// The soak section of docs/benchmarks.md (also OUT/summary.md): command, what ran, date and
/// commit, the memory table (every 5 minutes; every minute in runs under 10 minutes), the
/// verdict, the plot, and issue 25's lesson.
fn docs_section(
    r: &Value,
    samples: &[Sample],
    faults: &[Fault],
    subs: &[SubCheck],
    svg: &str,
) -> String {
    let mut s = String::new();
    let minutes = r["minutes"].as_f64().unwrap_or(0.0);
    let w = r["warmup_minutes"].as_f64().unwrap_or(0.0);
    let _ = writeln!(s, "{DOCS_HEADING}\n");
    let _ = writeln!(
        s,
        "`{}` (root; written by it from here to the next section). One daemon (XDP generic \
         mode on a veth pair in two namespaces the command creates and removes) decodes 10 \
         VLP-16s (the dual-return capture looped by `lidarxdp-bench gen --sensors 10 --pps \
         7540`, ports 2368–2377) with every sink on: TCP, zenoh with its shared-memory pool, \
         DDS, Foxglove, the view, metrics and the pcap recording ({SPLIT_MB} MB parts, all \
         but the newest deleted as the run goes). The daemon's VmRSS, fds and threads and its \
         gauges (`lidarxdp stats --json`) are sampled every {} s into `samples.csv`.\n",
        r["command"].as_str().unwrap_or(""),
        r["sample_s"]
    );
    let _ = writeln!(
        s,
        "- Steady subscribers, separate processes counting frames: {}.",
        subs.iter()
            .map(|x| format!("{}: {}", x.sink, x.name))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        s,
        "- Churn, the whole run: a TCP subscriber that connects, reads 2 frames and closes every \
         second; a `lidarxdp subscribe zenoh:/lidar/s1/points --frames 2` process every {ZENOH_CHURN_S:.0} s; \
         a Fast DDS reader of `rt/lidar/s2/points` started every second (`--expect 1`); a \
         Foxglove client that connects, subscribes to `/lidar/s3/points`, reads one message \
         and closes every second; the view's `/api/status` and `/api/frame` polled every second."
    );
    let _ = writeln!(s, "- Faults, once each:");
    for f in faults {
        let _ = writeln!(
            s,
            "  - minute {}–{} (planned at {:.1}, {:.0} s): {}; {}",
            f.started_s
                .map_or("–".into(), |a| format!("{:.1}", a / 60.0)),
            f.ended_s.map_or("–".into(), |b| format!("{:.1}", b / 60.0)),
            f.start_s / 60.0,
            f.length_s,
            f.what,
            fault_outcome(f)
        );
    }
    let _ = writeln!(
        s,
        "\nRun {} (commit `{}`), {minutes} min, warm-up {w} min; files in `{}`.\n",
        r["started"].as_str().unwrap_or(""),
        r["commit"].as_str().unwrap_or(""),
        r["out"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "| minute | RSS MiB | heap MiB | fds | threads | SHM used MiB |\n|---:|---:|---:|---:|---:|---:|"
    );
    let step = if minutes >= 10.0 { 5.0 } else { 1.0 };
    let mut m = 0.0;
    let mb = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{:.1}", v / 1_048_576.0));
    while m <= minutes + 1e-9 {
        if let Some(x) = at_minute(samples, m) {
            let _ = writeln!(
                s,
                "| {m:.0} | {:.1} | {} | {} | {} | {} |",
                x.rss_kb as f64 / 1024.0,
                mb(x.heap),
                x.fds,
                x.threads,
                mb(x.shm_used)
            );
        }
        m += step;
    }
    let _ = writeln!(s);
    for l in r["verdict"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "- {}", l.as_str().unwrap_or(""));
    }
    let _ = writeln!(
        s,
        "\n![RSS and heap over the soak]({svg})\n\n(RSS on the left axis, heap in use on the \
         right, MiB, against minutes; grey: the end of the warm-up; orange: the faults.)\n"
    );
    let _ = writeln!(
        s,
        "Earlier (issue 25, `bench/results/2026-12-06-soak/`): the zenoh sink dropped 18.7 % at \
         its queue, which held 4 frames while 10 sensors cut at about the same moment. Sink \
         queues now hold two frames per sensor (`publish::sink_queue`). A run before the \
         first-frame fix lent 6,010 of 6,020 frames (the first frame of each sensor was decoded \
         into a buffer made before the pool was set); with the fix, every frame is lent.\n"
    );
    s
}

/// A fault's result in words.
fn fault_outcome(f: &Fault) -> String {
    let r = &f.result;
    let rss = |k: &str| {
        r[k].as_u64()
            .map_or("–".into(), |v| format!("{:.1} MiB", v as f64 / 1024.0))
    };
    let mem = format!(
        "RSS {} before, {} at its end, {} a minute later",
        rss("rss_kb_before"),
        rss("rss_kb_at_end"),
        rss("rss_kb_1_min_after")
    );
    if r["cut_short"].as_bool() == Some(true) {
        return format!("cut short by the end of the run; {mem}");
    }
    match f.name {
        "tcp-stall" => format!("connected: {}; {mem}", r["connected"]),
        _ => format!(
            "{} of {} attempts succeeded, {:.0}/s reached; {mem}",
            r["connected"],
            r["attempted"],
            r["rate"].as_f64().unwrap_or(0.0)
        ),
    }
}

/// `docs` with its soak section (from [`OLD_DOCS_HEADING`] or [`DOCS_HEADING`] up to the next
/// `## ` heading) replaced by `section`.
///
/// # Errors
/// Neither heading is in `docs`.
pub fn splice_docs(docs: &str, section: &str) -> Result<String> {
    let start = [DOCS_HEADING, OLD_DOCS_HEADING]
        .iter()
        .find_map(|h| {
            docs.match_indices(h)
                .find(|(i, _)| *i == 0 || docs[..*i].ends_with('\n'))
                .map(|(i, _)| i)
        })
        .context("docs/benchmarks.md has no soak section heading")?;
    let rest = &docs[start + 3..];
    let end = rest.find("\n## ").map_or(docs.len(), |i| start + 3 + i + 1);
    let mut out = String::with_capacity(docs.len() + section.len());
    out.push_str(&docs[..start]);
    out.push_str(section.trim_end());
    out.push_str("\n\n");
    out.push_str(&docs[end..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_the_soak_section() {
        let docs = format!("# B\n\n## A\n\na\n\n{OLD_DOCS_HEADING}\n\nold\n\n## C\n\nc\n");
        let out = splice_docs(&docs, &format!("{DOCS_HEADING}\n\nnew\n")).unwrap();
        assert_eq!(
            out,
            format!("# B\n\n## A\n\na\n\n{DOCS_HEADING}\n\nnew\n\n## C\n\nc\n")
        );
        // A second run finds the new heading; a last section runs to the end of the file.
        let again = splice_docs(&out, &format!("{DOCS_HEADING}\n\nnewer\n")).unwrap();
        assert_eq!(
            again,
            format!("# B\n\n## A\n\na\n\n{DOCS_HEADING}\n\nnewer\n\n## C\n\nc\n")
        );
        let last = format!("# B\n\n{DOCS_HEADING}\n\nx\n");
        assert_eq!(
            splice_docs(&last, &format!("{DOCS_HEADING}\n\ny")).unwrap(),
            format!("# B\n\n{DOCS_HEADING}\n\ny\n\n")
        );
        assert!(splice_docs("# B\n\n## C\n", "x").is_err());
    }

    #[test]
    fn slope_of_a_line_and_growth_after_the_warm_up() {
        let p: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64, 100.0 + 2.5 * i as f64))
            .collect();
        assert_eq!(slope(&p), Some(2.5));
        assert_eq!(slope(&p[..1]), None);
        let g = growth(&p, 4.0).unwrap();
        assert_eq!((g.at_w, g.max, g.last, g.samples), (110.0, 122.5, 122.5, 6));
        assert!(growth(&p, 10.0).is_none());
    }

    #[test]
    fn minute_medians_leave_out_the_faults_and_the_warm_up() {
        // Minute 4 (warm-up), minute 5 with one sample in a fault, minute 6 with two samples.
        let p = [
            (4.5, 1.0),
            (5.0, 10.0),
            (5.3, 500.0),
            (5.5, 14.0),
            (5.9, 12.0),
            (6.1, 20.0),
            (6.7, 30.0),
        ];
        let m = minute_medians(&p, 5.0, &[(5.2, 5.4)]);
        assert_eq!(
            m,
            vec![
                MinuteMedian {
                    minute: 5,
                    median: 12.0,
                    samples: 3
                },
                MinuteMedian {
                    minute: 6,
                    median: 25.0,
                    samples: 2
                },
            ]
        );
        let (far, d) = farthest_minute(&m).unwrap();
        assert_eq!((far.minute, d), (6, 13.0));
        assert!(farthest_minute(&[]).is_none());
        // A warm-up that ends inside a minute starts at that whole minute.
        assert_eq!(minute_medians(&p, 4.6, &[])[0].minute, 4);
    }

    #[test]
    fn a_second_run_of_the_day_gets_its_own_folder() {
        let dir = std::env::temp_dir().join(format!("lidarxdp-soak-free-{}", std::process::id()));
        fs::create_dir_all(dir.join("d-soak")).unwrap();
        assert_eq!(first_free(&dir, "x-soak"), dir.join("x-soak"));
        assert_eq!(first_free(&dir, "d-soak"), dir.join("d-soak-2"));
        fs::create_dir_all(dir.join("d-soak-2")).unwrap();
        assert_eq!(first_free(&dir, "d-soak"), dir.join("d-soak-3"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn chunked_http() {
        let r = parse_http(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r, (200, b"abcde".to_vec()));
        let r = parse_http(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(r, (204, Vec::new()));
    }

    #[test]
    fn faults_sit_at_fixed_fractions_after_the_warm_up() {
        let f = faults(60.0, 5.0);
        let at: Vec<f64> = f.iter().map(|f| f.start_s / 60.0).collect();
        assert_eq!(at, [10.5, 21.5, 32.5]);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(45_090), "45,090");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(6_786_000), "6,786,000");
    }
}
