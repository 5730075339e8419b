//! `lidarxdp decode PCAP`: offline decoding, one line (or JSON object) per frame as each frame
//! closes, optional PCDs, and a summary on stderr.
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use lidarxdp::offline::DecodeSummary;
use lidarxdp_core::frame::{Frame, FrameClock};
use lidarxdp_core::sensor::{SensorModel, Stamp};

use crate::daemon::config::valid::{Degrees, FovSetting, Metres};
use lidarxdp_client::settings::DecodeSettings;

/// `lidarxdp decode` arguments.
#[derive(clap::Args)]
pub struct DecodeArgs {
    /// Capture to decode: classic pcap or pcapng; Ethernet (VLAN tags), Linux cooked (SLL,
    /// SLL2) or raw-IP link types; IPv4 fragments are reassembled. Same as `--pcap FILE`.
    #[arg(
        value_name = "PCAP",
        required_unless_present = "pcap",
        conflicts_with = "pcap"
    )]
    capture: Option<PathBuf>,
    /// The capture to decode (the same as the positional `PCAP`).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Sensor model (wins over the packet's product byte). Without it the model is identified
    /// from the capture's first 200 datagrams where the packets name it (Velodyne product byte,
    /// Hesai header); Ouster and RoboSense need `--sensor`.
    #[arg(long)]
    sensor: Option<SensorModel>,
    /// Calibration file: Velodyne ros-drivers/Nebula YAML; Hesai angle-correction CSV (AT128:
    /// binary `.dat`); Ouster sensor metadata JSON; RoboSense angle CSV (replaced by DIFOP).
    #[arg(long)]
    calibration: PathBuf,
    /// Hesai: do not check the packets' CRCs (by default a CRC failure is counted malformed).
    #[arg(long)]
    hesai_skip_crc: bool,
    /// Cut angle in degrees, [0, 360] (360 is 0).
    #[arg(long, value_name = "DEG", default_value = "0")]
    cut_angle: Degrees,
    /// Field of view `MIN:MAX` in degrees (each in [0, 360]; `MIN > MAX` wraps through 0°;
    /// `0:360` is the full circle, the same as no `--fov`).
    #[arg(long, value_name = "MIN:MAX")]
    fov: Option<FovSetting>,
    /// Points at this range or closer are dropped, metres, [0, max-range) (default: the
    /// model's datasheet minimum, see docs/sensors.md).
    #[arg(long, value_name = "M")]
    min_range: Option<Metres>,
    /// Points at this range or farther are dropped, metres, (min-range, 1000] (default: the
    /// model's datasheet maximum).
    #[arg(long, value_name = "M")]
    max_range: Option<Metres>,
    /// Clock of each frame's `start_ns`: `sensor` (the packets' time stamps, default) or
    /// `host` (offline: the pcap record time of the frame's first packet).
    #[arg(long, value_name = "sensor|host", default_value = "sensor")]
    stamp: Stamp,
    /// Only decode datagrams to this UDP destination port.
    #[arg(long)]
    port: Option<u16>,
    /// Only decode datagrams from this source: IPv4 `a.b.c.d`, IPv6 `fd00::201`, or
    /// link-local `fe80::201%eth0` (a capture has no interface: the zone is not checked).
    /// Without it, datagrams from a second source stop the decoding with an error listing the
    /// sources (two sensors must never be mixed into one frame).
    #[arg(long, value_name = "IP")]
    source: Option<lidarxdp_core::valid::SourceAddr>,
    /// Print one JSON object per frame instead of text lines: `seq`, `sensor_id`, `start_ns`,
    /// `host_ns` (offline: the pcap record time of the frame's first packet), `clock`
    /// (`sensor`|`host`), `points`, `packets`, `expected_packets`, `malformed`,
    /// `frames_lost_before`; then one `{"summary": {...}}` object with `records`, `datagrams`,
    /// `packets`, `decoded`, `malformed`, `ignored`, `frames`, `points`, `skipped_records` and
    /// `skipped` (records by reason).
    #[arg(long)]
    json: bool,
    /// Write every frame as `<DIR>/<sequence>.pcd`.
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Velodyne: decode as Tier IV Nebula does, bit for bit, instead of by the manuals'
    /// firing timing (docs/sensors.md, "Velodyne firing timing").
    #[arg(long)]
    nebula_compat: bool,
    /// The layout of the points (PCD fields): autoware (default), autoware_xyzirc, xyzi,
    /// velodyne, ouster, ouster_xyzir, hesai or robosense (docs/sensors.md, "Point layouts").
    #[arg(long, value_name = "NAME", default_value = "autoware")]
    point_type: lidarxdp_core::layout::PointType,
}

impl DecodeArgs {
    fn path(&self) -> &Path {
        self.pcap
            .as_deref()
            .or(self.capture.as_deref())
            .unwrap_or(Path::new(""))
    }
}

fn clock_name(c: FrameClock) -> &'static str {
    match c {
        FrameClock::Sensor => "sensor",
        FrameClock::Host => "host",
    }
}

/// The JSON object printed for one frame by `decode --json`.
fn frame_json(f: &Frame) -> serde_json::Value {
    let h = &f.header;
    serde_json::json!({
        "seq": h.sequence,
        "sensor_id": h.sensor_id,
        "start_ns": h.start_ns,
        "host_ns": h.host_ns,
        "clock": clock_name(h.clock),
        "points": f.points.len(),
        "packets": h.packets_received,
        "expected_packets": h.packets_expected,
        "malformed": h.packets_malformed,
        "frames_lost_before": h.frames_lost_before,
    })
}

/// The final JSON object of `decode --json`: `{"summary": {...}}` with the record counters,
/// every decoder counter ([`lidarxdp::sensor::DecodeCounters`], keyed by descriptor name) and
/// the skipped records by reason.
fn summary_json(s: &DecodeSummary) -> serde_json::Value {
    let skipped: serde_json::Map<String, serde_json::Value> = s
        .skipped
        .reasons()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    let mut summary = lidarxdp::metrics::counters_json(&s.counters);
    summary["records"] = s.records.into();
    summary["datagrams"] = s.datagrams.into();
    summary["skipped_records"] = s.skipped.total().into();
    summary["skipped"] = skipped.into();
    serde_json::json!({ "summary": summary })
}

/// The readable summary line printed on stderr.
fn summary_line(s: &DecodeSummary) -> String {
    let c = &s.counters;
    format!(
        "decode: {} records, {} datagrams: {} packets ({} decoded, {} malformed, {} ignored), \
         {} frames, {} points; skipped records: {} ({})",
        s.records,
        s.datagrams,
        c.packets,
        c.decoded,
        c.malformed,
        c.ignored,
        c.frames,
        c.points,
        s.skipped.total(),
        s.skipped
    )
}

/// Decodes the capture and prints one line (or JSON object) per frame as it closes, writes
/// PCDs with `--pcd`, and a summary on stderr (and as a last JSON object with `--json`).
pub fn decode(a: DecodeArgs) -> Result<()> {
    let settings = DecodeSettings {
        sensor: a.sensor,
        calibration: a.calibration.clone(),
        cut_angle: a.cut_angle,
        fov: a.fov.and_then(FovSetting::fov),
        min_range: a.min_range,
        max_range: a.max_range,
        stamp: a.stamp,
        port: a.port,
        source: a.source.as_ref().map(|s| s.ip()),
        nebula_compat: a.nebula_compat,
        hesai_skip_crc: a.hesai_skip_crc,
        point_type: a.point_type,
    };
    let (model, notes) = settings.model(a.path())?;
    for n in notes {
        eprintln!("decode: {n}");
    }
    let (cfg, opts) = settings.resolve(model)?;
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let bar = progress_bar(a.path());
    let stdout_is_terminal = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout().lock();
    let mut listening = true;
    let on_progress = |read: u64| {
        if let Some(b) = &bar {
            b.set_position(read);
        }
    };
    let result = lidarxdp::offline::decode_pcap_each_with_progress(
        a.path(),
        &cfg,
        &opts,
        |f| {
            let h = &f.header;
            // A closed pipe (`| head`) stops the listing, not the PCD output.
            if listening {
                let print = |stdout: &mut std::io::StdoutLock| {
                    if a.json {
                        writeln!(stdout, "{}", frame_json(&f))
                    } else {
                        writeln!(
                            stdout,
                            "frame seq={} start_ns={} points={} packets={}/{} malformed={}",
                            h.sequence,
                            h.start_ns,
                            f.points.len(),
                            h.packets_received,
                            h.packets_expected,
                            h.packets_malformed
                        )
                    }
                };
                // Lines to the terminal the bar is drawn on go above the bar.
                let r = match &bar {
                    Some(b) if stdout_is_terminal => b.suspend(|| print(&mut stdout)),
                    _ => print(&mut stdout),
                };
                if let Err(e) = r {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(e);
                    }
                    listening = false;
                }
            }
            if let Some(dir) = &a.pcd {
                let path = dir.join(format!("{:06}.pcd", h.sequence));
                lidarxdp_client::pcd::write_frame(&path, &f).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("write {}: {e}", path.display()))
                })?;
            }
            Ok(())
        },
        on_progress,
    );
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let summary = result?;
    if a.json && listening {
        let _ = writeln!(stdout, "{}", summary_json(&summary));
    }
    eprintln!("{}", summary_line(&summary));
    if summary.datagrams == 0 {
        bail!(
            "{}: no datagram decoded{}; skipped records: {}",
            a.path().display(),
            match (a.port, &a.source) {
                (None, None) => String::new(),
                _ => " with the --port/--source given".to_owned(),
            },
            summary.skipped
        );
    }
    Ok(())
}

/// Files at least this big get a progress bar (bytes), 64 MiB: about 6 s of a VLS-128.
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// A progress bar over the file's bytes on stderr, when stderr is a terminal and the file is
/// at least [`PROGRESS_MIN_BYTES`]; `None` otherwise (pipes, logs and CI see no bar).
fn progress_bar(path: &Path) -> Option<indicatif::ProgressBar> {
    let len = std::fs::metadata(path).ok()?.len();
    if len < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "decode {bar:40} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta} left)",
        )
        .ok()?,
    );
    Some(bar)
}
