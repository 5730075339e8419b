//! `lidarxdp-bench soak-client`: the short-lived and misbehaving subscribers of `cargo xtask
//! soak` (issue 40), each one process that the soak starts inside the daemon's namespace and
//! that prints one JSON object on stdout when it ends:
//!
//! * `tcp-churn`: a TCP subscriber ([`lidarxdp_client::Subscriber`], the default subscription:
//!   every sensor, every field) that connects, reads `--frames` frames and closes, every
//!   `--every-ms`, until SIGTERM/SIGINT. Prints `{"cycles", "frames", "errors"}`.
//! * `tcp-stall`: connects (hello read, so the publisher counts it) and never reads, for
//!   `--seconds`, then closes. Prints `{"connected", "seconds"}`.
//! * `tcp-storm`: connect, read the hello, close, at `--rate` connections/s for `--seconds`, on
//!   `--threads` threads. Prints `{"attempted", "connected", "errors", "seconds", "rate"}`
//!   (`rate`: connections that read the hello per second of the storm).
//! * `zenoh-storm`: open a zenoh session configured as `lidarxdp subscribe zenoh:` configures
//!   it ([`lidarxdp_client::zenoh::open_session`]), declare a subscriber on `--topic`'s key
//!   expression (rmw_zenoh's, [`lidarxdp_core::ros2::topic_key_expr`]) and close the session,
//!   at up to `--rate` sessions/s for `--seconds`, on `--threads` threads: a subscriber crashing
//!   in a restart loop, as the daemon sees it (session set-up and teardown, the declaration
//!   routed). With `--full` each session is a whole `lidarxdp subscribe` subscriber instead
//!   ([`lidarxdp_client::zenoh::ZenohSubscriber::open`]: the publishers' shared-memory
//!   segments are also mapped and locked, 128 MiB each, and the liveliness queries waited
//!   for), which costs the client tens of ms a session. Prints the same object as
//!   `tcp-storm`; the rate reached is what the threads manage, below `--rate` on a small
//!   machine.
//!
//! Errors (a refused connection, a failed session) are counted, never fatal: the soak wants
//! the daemon's side of them.
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lidarxdp_client::Subscriber;

/// `lidarxdp-bench soak-client` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub kind: Kind,
}

/// The kinds of soak client (module documentation).
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Kind {
    /// Connect, read a few frames, close; again every `--every-ms` until SIGTERM.
    TcpChurn {
        /// Publisher address (inside the daemon's namespace).
        #[arg(long)]
        addr: SocketAddr,
        /// Frames read per connection, 1..=100.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
        frames: u64,
        /// Period of the cycle, ms (100..=600000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
        every_ms: u64,
    },
    /// Connect and never read for `--seconds`, then close.
    TcpStall {
        /// Publisher address.
        #[arg(long)]
        addr: SocketAddr,
        /// How long to hold the connection, s (1..=86400).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        seconds: u64,
    },
    /// Connect, read the hello, close, at `--rate` per second for `--seconds`.
    TcpStorm {
        /// Publisher address.
        #[arg(long)]
        addr: SocketAddr,
        /// Connections per second (1..=10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rate: u64,
        /// Length of the storm, s (0 < s <= 3600).
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Threads sharing the rate (1..=64).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
    },
    /// Open and close zenoh subscribers of `--topic`, up to `--rate` per second for `--seconds`.
    ZenohStorm {
        /// zenoh's JSON5 configuration (a peer connecting to the daemon's session).
        #[arg(long)]
        zenoh_config: PathBuf,
        /// ROS 2 topic, e.g. `/lidar/s0/points`.
        #[arg(long)]
        topic: String,
        /// ROS domain id, 0..=232.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=232))]
        domain: u32,
        /// Sessions per second asked (1..=10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rate: u64,
        /// Length of the storm, s (0 < s <= 3600).
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Threads sharing the rate (1..=64).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Each session a whole `lidarxdp subscribe` subscriber (shared memory mapped).
        #[arg(long)]
        full: bool,
    },
}

/// Prints `v` as one line on stdout.
fn report(v: serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    out.flush()?;
    Ok(())
}

/// Checks a storm's length: finite, in (0, 3600] s.
fn check_seconds(s: f64) -> Result<Duration> {
    anyhow::ensure!(
        s.is_finite() && s > 0.0 && s <= 3600.0,
        "--seconds {s}: must be in (0, 3600]"
    );
    Ok(Duration::from_secs_f64(s))
}

/// Runs `attempt` at `rate` per second in total for `length`, on `threads` threads (each
/// paced at `rate / threads`, never catching up a missed slot); counts what it returns.
fn storm(
    rate: u64,
    length: Duration,
    threads: u64,
    attempt: impl Fn() -> bool + Sync,
) -> serde_json::Value {
    let (attempted, connected) = (AtomicU64::new(0), AtomicU64::new(0));
    let t0 = Instant::now();
    let period = Duration::from_secs_f64(threads as f64 / rate as f64);
    std::thread::scope(|s| {
        for k in 0..threads {
            let (attempted, connected, attempt) = (&attempted, &connected, &attempt);
            s.spawn(move || {
                // Threads start spread over one period.
                let mut next = t0 + period.mul_f64(k as f64 / threads as f64);
                while next < t0 + length {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    attempted.fetch_add(1, Ordering::Relaxed);
                    if attempt() {
                        connected.fetch_add(1, Ordering::Relaxed);
                    }
                    next = (next + period).max(Instant::now());
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let (a, c) = (attempted.into_inner(), connected.into_inner());
    serde_json::json!({
        "attempted": a, "connected": c, "errors": a - c, "seconds": secs,
        "rate": c as f64 / secs, "rate_asked": rate, "threads": threads,
    })
}

/// Runs one soak client.
pub fn run(a: Args) -> Result<()> {
    match a.kind {
        Kind::TcpChurn {
            addr,
            frames,
            every_ms,
        } => {
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
                signal_hook::flag::register(sig, stop.clone()).context("signal handler")?;
            }
            let (mut cycles, mut got, mut errors) = (0u64, 0u64, 0u64);
            let period = Duration::from_millis(every_ms);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                cycles += 1;
                let one = || -> Result<u64> {
                    let mut s = Subscriber::connect_timeout(&addr, Duration::from_secs(5))?;
                    s.set_read_timeout(Some(Duration::from_secs(5)))?;
                    let mut n = 0;
                    while n < frames {
                        match s.next_frame()? {
                            Some(_) => n += 1,
                            None => break,
                        }
                    }
                    Ok(n)
                };
                match one() {
                    Ok(n) if n == frames => got += n,
                    Ok(n) => {
                        got += n;
                        errors += 1;
                    }
                    Err(_) => errors += 1,
                }
                next += period;
                while !stop.load(Ordering::Relaxed) && Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(20));
                }
                next = next.max(Instant::now());
            }
            report(serde_json::json!({"cycles": cycles, "frames": got, "errors": errors}))
        }
        Kind::TcpStall { addr, seconds } => {
            let t = Instant::now();
            let connected = Subscriber::connect_timeout(&addr, Duration::from_secs(5))
                .inspect(|_| std::thread::sleep(Duration::from_secs(seconds)))
                .is_ok();
            report(serde_json::json!({
                "connected": connected, "seconds": t.elapsed().as_secs_f64()
            }))
        }
        Kind::TcpStorm {
            addr,
            rate,
            seconds,
            threads,
        } => {
            let length = check_seconds(seconds)?;
            report(storm(rate, length, threads, || {
                Subscriber::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
            }))
        }
        Kind::ZenohStorm {
            zenoh_config,
            topic,
            domain,
            rate,
            seconds,
            threads,
            full,
        } => {
            use lidarxdp_client::zenoh::{SessionConfig, ZenohSubscriber, open_session};
            use zenoh::Wait;
            let length = check_seconds(seconds)?;
            lidarxdp_core::ros2::validate_topic("--topic", &topic)?;
            let source = SessionConfig {
                file: Some(zenoh_config),
                overrides: Vec::new(),
            };
            let distro = lidarxdp_core::ros2::Distro::Jazzy;
            let key = lidarxdp_core::ros2::topic_key_expr(domain, &topic, distro);
            report(storm(rate, length, threads, || {
                if full {
                    return ZenohSubscriber::open(&source, domain, &topic, distro).is_ok();
                }
                let Ok(session) = open_session(&source) else {
                    return false;
                };
                let declared = session.declare_subscriber(key.as_str()).wait().is_ok();
                session.close().wait().is_ok() && declared
            }))
        }
    }
}
