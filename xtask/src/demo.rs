//! `cargo xtask demo`: the whole product once, on a real capture.
//!
//! Namespaces up; the daemon attached to the host-side veth (XDP + AF_XDP); a subscriber on the
//! daemon's TCP port printing one line per frame; the capture replayed at its recorded rate from
//! the sensor namespace; then SIGTERM to the daemon, which flushes and writes its counters; one
//! summary line; namespaces down. Exits non-zero when any sent packet did not arrive through
//! AF_XDP, or the subscriber did not receive every frame.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::netns;

const LISTEN: &str = "127.0.0.1:7510";
const PORT: u16 = 2368;

struct Cleanup(Vec<Child>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in self.0.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        netns::down();
    }
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Result<std::process::ExitStatus> {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if t.elapsed() > timeout {
            let _ = child.kill();
            bail!("process did not exit within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A JSON number at a path of keys / array indices; 0 when absent.
pub(crate) fn num(v: &Value, path: &[&str]) -> u64 {
    lidarxdp_testkit::lookup(v, path).unwrap_or(0)
}

/// Runs the demo with the release daemon at `bin`.
pub fn demo(bin: &Path, pcap: Option<PathBuf>, calibration: Option<PathBuf>) -> Result<()> {
    let data = lidarxdp_testkit::data("velodyne/vlp16");
    let pcap = pcap.unwrap_or_else(|| data.join("vlp16_dual_nebula_603pkt.pcap"));
    let calibration = calibration.unwrap_or_else(|| data.join("calibration/VLP16db.yaml"));
    if !pcap.exists() {
        bail!("capture {} not found", pcap.display());
    }
    let work = std::env::temp_dir().join(format!("lidarxdp-demo-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let stats = work.join("daemon.json");
    let sub_ready = work.join("subscriber.ready");
    let sub_summary = work.join("subscriber.json");

    let mut guard = Cleanup(Vec::new());
    netns::up()?;

    let daemon = lidarxdp_testkit::exec_in(netns::HOST_NS)
        .arg(bin)
        .args([
            "run",
            "--iface",
            netns::HOST_IF,
            "--queue",
            "0",
            "--sensor",
            "vlp16",
        ])
        .args(["--port", &PORT.to_string(), "--listen", LISTEN])
        .arg("--calibration")
        .arg(&calibration)
        .arg("--stats-json")
        .arg(&stats)
        .spawn()
        .context("start daemon")?;
    let daemon_pid = daemon.id();
    guard.0.push(daemon);

    let sub = lidarxdp_testkit::exec_in(netns::HOST_NS)
        .arg(bin)
        .args(["subscribe", LISTEN, "--connect-timeout-ms", "15000"])
        .arg("--ready-file")
        .arg(&sub_ready)
        .arg("--summary-json")
        .arg(&sub_summary)
        .spawn()
        .context("start subscriber")?;
    guard.0.push(sub);
    lidarxdp_testkit::wait_ready(
        &mut guard.0[1],
        "subscriber",
        Duration::from_secs(20),
        || sub_ready.exists(),
    )?;
    if let Some(s) = guard.0[0].try_wait()? {
        bail!("daemon exited early: {s}");
    }

    let out = lidarxdp_testkit::exec_in(netns::SENSOR_NS)
        .arg(bin)
        .arg("replay")
        .arg(&pcap)
        .args([
            "--to",
            &format!("{}:{PORT}", netns::HOST_IP),
            "--rate",
            "realtime",
            "--json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("run replay")?;
    if !out.status.success() {
        bail!("replay failed: {}", out.status);
    }
    let replay: Value = serde_json::from_slice(&out.stdout).context("replay --json output")?;

    // Let the last frame close on its timeout, then stop the daemon gracefully.
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped) and a valid signal.
    unsafe { libc::kill(daemon_pid as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut guard.0[0], Duration::from_secs(10))?;
    if !status.success() {
        bail!("daemon exited with {status}");
    }
    let sub_status = wait_timeout(&mut guard.0[1], Duration::from_secs(10))?;
    if !sub_status.success() {
        bail!("subscriber exited with {sub_status}");
    }
    drop(guard);

    let d: Value = serde_json::from_slice(&fs::read(&stats).context("daemon stats")?)?;
    let s: Value = serde_json::from_slice(&fs::read(&sub_summary).context("subscriber summary")?)?;
    let sent = num(&replay, &["sent"]);
    let redirected = num(&d, &["xdp", "redirected"]);
    let received = num(&d, &["capture", "sensor_datagrams"]);
    let decoded = num(&d, &["sensors", "0", "decoded"]);
    let malformed = num(&d, &["sensors", "0", "malformed"]);
    let frames = num(&d, &["capture", "frames_out"]);
    let points = num(&d, &["sensors", "0", "points"]);
    let sub_frames = num(&s, &["frames"]);
    let sub_points = num(&s, &["points"]);
    let lost = sent.saturating_sub(received);
    println!(
        "demo: packets sent {sent}, redirected to AF_XDP {redirected}, decoded {decoded}, \
         malformed {malformed}, lost {lost}; frames {frames}, points {points}; \
         subscriber received {sub_frames} frames, {sub_points} points; \
         XDP_STATISTICS rx_dropped {} rx_ring_full {} fill_ring_empty {}",
        num(&d, &["xsk", "rx_dropped"]),
        num(&d, &["xsk", "rx_ring_full"]),
        num(&d, &["xsk", "rx_fill_ring_empty_descs"]),
    );
    let _ = fs::remove_dir_all(&work);
    if lost != 0 || sent == 0 {
        bail!("{lost} of {sent} packets lost");
    }
    if sub_frames != frames || sub_points != points {
        bail!(
            "subscriber got {sub_frames} frames / {sub_points} points, daemon published {frames} / {points}"
        );
    }
    Ok(())
}
