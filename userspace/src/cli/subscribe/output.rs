//! What `subscribe` writes: standard output ([`Out`]), each frame's text line or `--json`
//! object, its PCD file and its MCAP record (the outputs of a [`Got`] frame), and the summary
//! (`report_summary`, `--summary-json`).
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lidarxdp_client::mcap::{McapError, McapRecorder, RecordedFile};
use lidarxdp_core::frame::{FrameClock, FrameHeader};
use lidarxdp_core::layout::PointType;
use lidarxdp_core::protocol::Subscribe;

use super::SubscribeArgs;
use super::source::{Got, GotFrom};

/// Standard output, where a closed pipe (`| head`) ends the listing but not the recording.
pub(super) struct Out {
    out: std::io::Stdout,
    open: bool,
}

impl Out {
    pub(super) fn new() -> Self {
        Out {
            out: std::io::stdout(),
            open: true,
        }
    }

    pub(super) fn line(&mut self, s: &str) {
        if self.open && writeln!(self.out.lock(), "{s}").is_err() {
            self.open = false;
        }
    }
}

fn clock_name(c: FrameClock) -> &'static str {
    match c {
        FrameClock::Sensor => "sensor",
        FrameClock::Host => "host",
    }
}

/// The JSON object of one frame (`--json`).
fn frame_json(name: &str, h: &FrameHeader, points: usize) -> serde_json::Value {
    serde_json::json!({
        "sensor": name,
        "seq": h.sequence,
        "start_ns": h.start_ns,
        "host_ns": h.host_ns,
        "clock": clock_name(h.clock),
        "points": points,
        "packets": h.packets_received,
        "expected_packets": h.packets_expected,
        "malformed": h.packets_malformed,
        "frames_lost_before": h.frames_lost_before,
    })
}

/// The text line of one frame.
fn frame_line(name: &str, h: &FrameHeader, points: usize) -> String {
    format!(
        "frame sensor={name} seq={} start_ns={} host_ns={} points={points} packets={}/{} \
         malformed={} frames_lost_before={} clock={}",
        h.sequence,
        h.start_ns,
        h.host_ns,
        h.packets_received,
        h.packets_expected,
        h.packets_malformed,
        h.frames_lost_before,
        clock_name(h.clock)
    )
}

/// A sensor name as a file-name part: bytes other than ASCII letters, digits, `.`, `-` and
/// `_` become `_` (`front/left` -> `front_left`).
pub(super) fn file_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `sensors front, rear, fields x,y,z`: a subscription as people write it.
pub(super) fn describe(want: &Subscribe) -> String {
    let sensors = if want.sensors.is_empty() {
        "all sensors".to_owned()
    } else {
        format!("sensors {}", want.sensors.join(", "))
    };
    let fields = if want.fields.is_empty() {
        "all fields".to_owned()
    } else {
        format!("fields {}", want.fields.join(","))
    };
    format!("{sensors}, {fields}")
}

/// Prints the readable summary on stderr and, with `--json`, the summary object; writes
/// `--summary-json`.
pub(super) fn report_summary(
    a: &SubscribeArgs,
    out: &mut Out,
    from: &str,
    line: String,
    summary: serde_json::Value,
) -> Result<()> {
    eprintln!("subscribe {from}: {line}");
    if a.json {
        out.line(&serde_json::json!({ "summary": summary }).to_string());
    }
    if let Some(f) = &a.summary_json {
        std::fs::write(f, summary.to_string()).with_context(|| format!("write {}", f.display()))?;
    }
    Ok(())
}

/// `rec.mcap` or `rec_0.mcap .. rec_3.mcap`.
pub(super) fn files_text(files: &[RecordedFile]) -> String {
    match files {
        [] => String::new(),
        [one] => one.path.display().to_string(),
        [first, .., last] => format!(
            "{} files {} .. {}",
            files.len(),
            first.path.display(),
            last.path.display()
        ),
    }
}

impl Got<'_> {
    /// The `--json` object (`json`) or the text line of the frame.
    pub(super) fn text(&self, json: bool) -> String {
        match (&self.from, json) {
            (GotFrom::Tcp(f), true) => frame_json(self.key, f.header(), self.points).to_string(),
            (GotFrom::Tcp(f), false) => frame_line(self.key, f.header(), self.points),
            #[cfg(feature = "zenoh")]
            (GotFrom::Zenoh { msg, view, seq, .. }, true) => serde_json::json!({
                "topic": self.key, "seq": seq, "stamp_ns": view.stamp_ns,
                "frame_id": view.frame_id, "points": self.points,
                "shm": msg.in_shared_memory(), "latency_us": self.latency_us,
            })
            .to_string(),
            #[cfg(feature = "zenoh")]
            (GotFrom::Zenoh { msg, view, seq, .. }, false) => format!(
                "frame topic={} seq={seq} stamp_ns={} frame_id={} points={} shm={} latency_us={}",
                self.key,
                view.stamp_ns,
                view.frame_id,
                self.points,
                if msg.in_shared_memory() { "yes" } else { "no" },
                self.latency_us,
            ),
        }
    }

    /// The PCD file of the frame in `dir`, its layout and its points' bytes, `None` without a
    /// whole layout (a subset of fields): `<sensor name or frame_id>_<sequence>.pcd`.
    pub(super) fn pcd(&self, dir: &Path) -> Option<(PathBuf, (PointType, &[u8]))> {
        let (name, points) = match &self.from {
            GotFrom::Tcp(f) => (self.key, (f.point_type()?, f.payload_bytes())),
            #[cfg(feature = "zenoh")]
            GotFrom::Zenoh { view, points, .. } => (view.frame_id, *points),
        };
        Some((
            dir.join(format!("{}_{:06}.pcd", file_token(name), self.seq)),
            points,
        ))
    }

    /// Appends the frame to the MCAP recording: a TCP frame encoded on its sensor's channel,
    /// a zenoh message as received on its topic's.
    pub(super) fn record(&self, mcap: &mut McapRecorder) -> Result<(), McapError> {
        match &self.from {
            GotFrom::Tcp(f) => mcap.write(f, self.key, self.received_ns),
            #[cfg(feature = "zenoh")]
            GotFrom::Zenoh {
                msg, publish_ns, ..
            } => mcap.write_cdr(
                self.key,
                msg.bytes(),
                self.seq,
                self.received_ns,
                *publish_ns,
            ),
        }
    }
}

/// A write error of the MCAP recording, naming the file being written.
pub(super) fn mcap_error(m: &McapRecorder, e: McapError) -> anyhow::Error {
    let at = m.current().map(|p| p.display().to_string());
    anyhow::Error::new(e).context(format!("write MCAP {}", at.unwrap_or_default()))
}
