//! `lidarxdp-bench collect`: K subscribers of the daemon's TCP publisher, one thread each
//! ([`lidarxdp_client::Subscriber`]), recording every frame they receive: subscriber index,
//! sequence, `start_ns`, point count, packets received/expected, and the CLOCK_REALTIME ns at
//! which the frame was completely received. Written as JSON lines (or CSV when the file name
//! ends in `.csv`) when the duration is over, on SIGTERM/SIGINT, or when every connection was
//! closed by the daemon.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lidarxdp::sys::clock::realtime_ns;
use lidarxdp_client::{ReceivedFrame, Subscriber};
use serde::{Deserialize, Serialize};

/// `lidarxdp-bench collect` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Publisher address.
    #[arg(long, default_value = "127.0.0.1:7510")]
    pub connect: SocketAddr,
    /// Number of subscribers, 1..=1024.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub subscribers: u16,
    /// Stop after this many seconds (default: until SIGTERM or the daemon closes).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Output file: JSON lines, or CSV when it ends in `.csv`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Created once every subscriber is connected.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Keep trying to connect for this long, ms (0..=600000).
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub connect_timeout_ms: u64,
    /// Pin the process (all subscriber threads) to this CPU.
    #[arg(long)]
    pub pin_cpu: Option<usize>,
}

/// One received frame.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FrameRow {
    /// Subscriber index, 0..K.
    pub sub: u16,
    /// The frame's sequence number.
    pub sequence: u64,
    /// Frame start, ns since the Unix epoch (sensor clock).
    pub start_ns: u64,
    /// Points in the frame.
    pub points: u64,
    /// Data packets that contributed.
    pub packets_received: u32,
    /// Data packets the sensor sent for the frame.
    pub packets_expected: u32,
    /// CLOCK_REALTIME ns when the frame was completely received.
    pub recv_ns: u64,
}

fn connect(addr: SocketAddr, timeout: Duration) -> Result<Subscriber> {
    let t = Instant::now();
    loop {
        match Subscriber::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => return Ok(s),
            Err(e) if t.elapsed() < timeout => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => bail!("connect to {addr} within {timeout:?}: {e}"),
        }
    }
}

/// Writes rows as JSON lines, or CSV when `path` ends in `.csv`.
pub fn write_rows(path: &std::path::Path, rows: &[FrameRow]) -> Result<()> {
    if path.extension().is_some_and(|e| e == "csv") {
        let mut w = csv::Writer::from_path(path)?;
        for r in rows {
            w.serialize(r)?;
        }
        w.flush()?;
    } else {
        let mut s = String::new();
        for r in rows {
            s.push_str(&serde_json::to_string(r)?);
            s.push('\n');
        }
        std::fs::write(path, s)?;
    }
    Ok(())
}

/// Reads the JSON lines written by [`write_rows`].
pub fn read_rows(path: &std::path::Path) -> Result<Vec<FrameRow>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).context("collector row"))
        .collect()
}

/// Runs the collector.
pub fn run(args: Args) -> Result<()> {
    if let Some(cpu) = args.pin_cpu {
        crate::r#gen::pin_to_cpu(cpu)?;
    }
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        bail!("--duration: {d} is not valid; expected seconds > 0");
    }
    let timeout = Duration::from_millis(args.connect_timeout_ms);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
    }
    let rows: Arc<Mutex<Vec<FrameRow>>> = Arc::default();
    let running = Arc::new(AtomicUsize::new(0));
    let mut subs = Vec::new();
    for _ in 0..args.subscribers {
        subs.push(connect(args.connect, timeout)?);
    }
    for (k, mut s) in subs.into_iter().enumerate() {
        let rows = rows.clone();
        let running = running.clone();
        running.fetch_add(1, Ordering::SeqCst);
        std::thread::Builder::new()
            .name(format!("sub-{k}"))
            .spawn(move || {
                let mut f = ReceivedFrame::default();
                while let Ok(true) = s.next_frame_into(&mut f) {
                    let now = realtime_ns();
                    let h = f.header();
                    let row = FrameRow {
                        sub: k as u16,
                        sequence: h.sequence,
                        start_ns: h.start_ns,
                        points: f.point_count() as u64,
                        packets_received: h.packets_received,
                        packets_expected: h.packets_expected,
                        recv_ns: now,
                    };
                    if let Ok(mut r) = rows.lock() {
                        r.push(row);
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
            })?;
    }
    if let Some(p) = &args.ready_file {
        std::fs::write(p, b"ready\n").with_context(|| format!("{}", p.display()))?;
    }
    let t = Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    while !stop.load(Ordering::Relaxed)
        && running.load(Ordering::SeqCst) > 0
        && limit.is_none_or(|l| t.elapsed() < l)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rows = rows.lock().map(|r| r.clone()).unwrap_or_default();
    match &args.out {
        Some(p) => write_rows(p, &rows)?,
        None => {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        }
    }
    eprintln!(
        "collect: {} frames over {} subscribers",
        rows.len(),
        args.subscribers
    );
    // Subscriber threads may still block in a read; the process exit ends them.
    std::process::exit(0);
}
