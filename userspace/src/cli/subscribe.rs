//! `lidarxdp subscribe ADDR`: one line per frame, optional PCD output.
use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use lidarxdp::client::Subscriber;

/// `lidarxdp subscribe` arguments.
#[derive(clap::Args)]
pub struct SubscribeArgs {
    /// Daemon address.
    #[arg(value_name = "ADDR", default_value = "127.0.0.1:7510")]
    addr: SocketAddr,
    /// Write every frame as `<DIR>/<sensor>_<sequence>.pcd`.
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Exit after this many frames.
    #[arg(long)]
    frames: Option<u64>,
    /// Keep retrying the connection for this long (ms) while the daemon starts.
    #[arg(long, default_value_t = 0)]
    connect_timeout_ms: u64,
    /// Create this file once connected (for scripts).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Write `{"frames":N,"points":M}` here when the stream ends.
    #[arg(long)]
    summary_json: Option<PathBuf>,
}

/// Connects (retrying for `--connect-timeout-ms`) and prints one line per frame until the
/// stream ends or `--frames` frames arrived.
pub fn subscribe(a: SubscribeArgs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(a.connect_timeout_ms);
    let mut sub = loop {
        match Subscriber::connect(a.addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                log::debug!("connect {}: {e}; retrying", a.addr);
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("connect to {}", a.addr)),
        }
    };
    log::info!("subscribed to {}", a.addr);
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let (mut frames, mut points) = (0u64, 0u64);
    while let Some(frame) = sub.next_frame()? {
        let h = frame.header();
        let pts = frame.points();
        println!(
            "frame sensor={} seq={} start_ns={} host_ns={} points={} packets={}/{} malformed={}",
            h.sensor_id,
            h.sequence,
            h.start_ns,
            h.host_ns,
            pts.len(),
            h.packets_received,
            h.packets_expected,
            h.packets_malformed
        );
        if let Some(dir) = &a.pcd {
            let path = dir.join(format!("{}_{:06}.pcd", h.sensor_id, h.sequence));
            lidarxdp::pcd::write_pcd(&path, pts)
                .with_context(|| format!("write {}", path.display()))?;
        }
        frames += 1;
        points += pts.len() as u64;
        if a.frames.is_some_and(|n| frames >= n) {
            break;
        }
    }
    log::info!("stream ended: {frames} frames, {points} points");
    if let Some(f) = &a.summary_json {
        std::fs::write(
            f,
            serde_json::json!({"frames": frames, "points": points}).to_string(),
        )
        .with_context(|| format!("write {}", f.display()))?;
    }
    Ok(())
}
