//! The loop of `subscribe` ([`run`]): prints, counts and writes every frame of a
//! [`FrameSource`], then finishes the MCAP recording and reports the summary.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lidarxdp_client::mcap::{McapOptions, McapRecorder};

use super::SubscribeArgs;
use super::output::{Out, files_text, mcap_error, report_summary};
use super::source::FrameSource;
use super::stats::{Totals, Window};
use super::stop::{Stop, StopReason};

/// Prints, counts and writes every frame of `src` until it ends, `--frames` frames arrived,
/// or a signal; then finishes the MCAP recording and reports the summary (`from` names the
/// source in it).
pub(super) fn run(a: &SubscribeArgs, src: &mut FrameSource, from: &str, stop: &Stop) -> Result<()> {
    let mut out = Out::new();
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut mcap = match &a.mcap {
        Some(p) => Some(
            McapRecorder::create(
                p,
                McapOptions {
                    split_size_bytes: a.split_size.map(|mb| mb * 1_000_000),
                    split_duration_ns: a.split_duration.map(|s| s * 1_000_000_000),
                    distro: a.ros_distro.unwrap_or_default(),
                },
            )
            .with_context(|| format!("create {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(f) = &a.ready_file {
        std::fs::write(f, b"").with_context(|| format!("write {}", f.display()))?;
    }
    let mut totals = Totals::default();
    let mut window = Window::default();
    let mut window_start = Instant::now();
    let mut gaps_before = 0;
    let mut imu_recorded = 0u64;
    let mut error: Option<anyhow::Error> = None;
    let reason = loop {
        if let Some(why) = stop.signal() {
            break why;
        }
        let f = match src.next(stop) {
            Ok(f) => f,
            Err(Ok(why)) => break why,
            Err(Err(e)) => {
                error = Some(e);
                break StopReason::Error;
            }
        };
        if a.stats {
            window.frames += 1;
            window.bytes += f.bytes as u64;
            window.ages_us.push(f.latency_us);
            let el = window_start.elapsed();
            if el >= Duration::from_secs(1) {
                let gaps = totals.sum().gaps;
                window.report(&mut out, el.as_secs_f64(), gaps, &mut gaps_before);
                window_start = Instant::now();
            }
        } else {
            out.line(&f.text(a.json));
        }
        if let Some(dir) = &a.pcd {
            let Some((path, points)) = f.pcd(dir) else {
                error = Some(anyhow::anyhow!(
                    "--pcd needs all point fields (drop --fields)"
                ));
                break StopReason::Error;
            };
            let written = std::fs::File::create(&path).and_then(|file| {
                lidarxdp_client::pcd::write_layout(
                    std::io::BufWriter::new(file),
                    points.0,
                    points.1,
                )
            });
            if let Err(e) = written {
                error = Some(anyhow::Error::new(e).context(format!("write {}", path.display())));
                break StopReason::Error;
            }
        }
        if let Some(m) = mcap.as_mut()
            && let Err(e) = f.record(m)
        {
            error = Some(mcap_error(m, e));
            break StopReason::Error;
        }
        totals.add(f.key, f.seq, f.points as u64);
        if let Some(m) = mcap.as_mut() {
            match src.record_imu(m) {
                Ok(n) => imu_recorded += n,
                Err(e) => {
                    error = Some(mcap_error(m, e));
                    break StopReason::Error;
                }
            }
        }
        if a.frames.is_some_and(|n| totals.sum().frames >= n) {
            break StopReason::Frames;
        }
    };
    if a.stats && window.frames > 0 {
        let secs = window_start.elapsed().as_secs_f64().max(1e-3);
        window.report(&mut out, secs, totals.sum().gaps, &mut gaps_before);
    }
    let mut files = Vec::new();
    // IMU readings that came after the last frame.
    if let Some(m) = mcap.as_mut()
        && error.is_none()
    {
        match src.record_imu(m) {
            Ok(n) => imu_recorded += n,
            Err(e) => error = Some(anyhow::Error::new(e).context("write MCAP")),
        }
    }
    if let Some(m) = mcap {
        match m.finish() {
            Ok(f) => files = f,
            Err(e) => {
                let e = anyhow::Error::new(e).context("finish MCAP");
                error = Some(match error {
                    Some(first) => first.context(format!("{e:#}")),
                    None => e,
                });
            }
        }
    }
    let t = totals.sum();
    let mut summary = serde_json::json!({
        "frames": t.frames, "points": t.points, "gaps": t.gaps,
        "stopped_by": reason.text(), "sensors": totals.json(),
    });
    let extra = src.summarize(&mut summary);
    let mut line = format!("{}{extra} (stopped by {})", totals.text(), reason.text());
    if a.mcap.is_some() {
        summary["mcap"] = (files.iter())
            .map(|f| serde_json::json!({"path": f.path, "messages": f.messages}))
            .collect::<Vec<_>>()
            .into();
        summary["imu_recorded"] = imu_recorded.into();
        let messages: u64 = files.iter().map(|f| f.messages).sum();
        if !files.is_empty() {
            let frames = messages.saturating_sub(imu_recorded);
            let imu = if imu_recorded > 0 {
                format!(" and {imu_recorded} IMU readings")
            } else {
                String::new()
            };
            line.push_str(&format!(
                "; recorded {frames} frames{imu} in {}",
                files_text(&files)
            ));
        }
    }
    report_summary(a, &mut out, from, line, summary)?;
    error.map_or(Ok(()), Err)
}
