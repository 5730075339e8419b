//! The diagnostics channel's content, sans-IO: per sensor, what the frame headers the sink saw
//! say about the sensor and the capture (frame rate, points, packet loss, lost frames,
//! malformed packets), as one JSON message ([`DIAGNOSTICS_SCHEMA`] describes it).
//!
//! Two views per sensor:
//! - the **window**: the last [`WINDOW_FRAMES`] frames (fewer at start), what a viewer shows as
//!   "now" — `frame_rate_hz` from their sensor time stamps (`start_ns`), packet counts and
//!   `loss_percent` summed over them;
//! - the **totals** since the daemon started.
//!
//! Every value is computed from [`FrameHeader`] fields only, so a client that has the same
//! frames (e.g. from the TCP subscriber, or offline decoding of the same capture) can compute
//! the exact same numbers.

use std::collections::VecDeque;

use lidarxdp_core::frame::FrameHeader;
use serde_json::{Value, json};

/// Frames in the window (one second of a 10 Hz sensor).
pub const WINDOW_FRAMES: usize = 10;

/// The JSON Schema (draft 2020-12) of a diagnostics message, advertised with the channel
/// (schema encoding `jsonschema`), so that Foxglove's and Lichtblick's panels (Raw Messages,
/// Plot, Indicator) know the fields.
pub const DIAGNOSTICS_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "lidarxdp.Diagnostics",
  "description": "Per sensor frame rate, points and loss, from the frame headers the daemon published.",
  "type": "object",
  "properties": {
    "time_ns": {"type": "integer", "description": "CLOCK_REALTIME when the message was made, ns since the Unix epoch"},
    "window_frames": {"type": "integer", "description": "Largest number of frames in a sensor's window"},
    "sensors": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "model": {"type": "string"},
          "topic": {"type": "string", "description": "The sensor's PointCloud2 channel"},
          "sequence": {"type": ["integer", "null"], "description": "Sequence number of its last frame"},
          "last_host_ns": {"type": ["integer", "null"], "description": "Receive time of its last frame's first packet, ns since the Unix epoch"},
          "points": {"type": "integer", "description": "Points in its last frame"},
          "frame_rate_hz": {"type": ["number", "null"], "description": "(n - 1) / (last start_ns - first start_ns) over the n frames of the window; null below 2 frames"},
          "window": {
            "type": "object",
            "properties": {
              "frames": {"type": "integer"},
              "packets_received": {"type": "integer"},
              "packets_expected": {"type": "integer"},
              "packets_malformed": {"type": "integer"},
              "frames_lost": {"type": "integer"},
              "loss_percent": {"type": "number", "description": "100 (expected - received) / expected; 0 when nothing was expected"}
            }
          },
          "totals": {
            "type": "object",
            "properties": {
              "frames": {"type": "integer"},
              "points": {"type": "integer"},
              "packets_received": {"type": "integer"},
              "packets_expected": {"type": "integer"},
              "packets_malformed": {"type": "integer"},
              "frames_lost": {"type": "integer"},
              "loss_percent": {"type": "number"}
            }
          }
        }
      }
    }
  }
}"#;

/// Packet and frame counts summed over some frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    frames: u64,
    points: u64,
    received: u64,
    expected: u64,
    malformed: u64,
    lost: u64,
}

impl Sums {
    fn add(&mut self, h: &FrameHeader, points: u64) {
        self.frames += 1;
        self.points += points;
        self.received += u64::from(h.packets_received);
        self.expected += u64::from(h.packets_expected);
        self.malformed += u64::from(h.packets_malformed);
        self.lost += u64::from(h.frames_lost_before);
    }

    /// Packet loss, % ([`lidarxdp_core::header::loss_percent`]).
    fn loss_percent(&self) -> f64 {
        lidarxdp_core::header::loss_percent(self.expected, self.received)
    }
}

/// What is kept of one frame in the window.
#[derive(Clone, Copy, Debug)]
struct Seen {
    header: FrameHeader,
    points: u64,
}

/// One sensor's diagnostics state.
#[derive(Debug)]
struct SensorDiag {
    id: u16,
    name: String,
    model: String,
    topic: String,
    window: VecDeque<Seen>,
    totals: Sums,
}

/// Every configured sensor's diagnostics, fed one frame header at a time.
#[derive(Debug)]
pub struct Diagnostics {
    sensors: Vec<SensorDiag>,
}

/// One sensor as the diagnostics name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SensorInfo {
    /// Frames' `sensor_id`.
    pub id: u16,
    /// Its name (`--name`, `[[sensors]] name`).
    pub name: String,
    /// Model name, e.g. `VLP16`.
    pub model: String,
    /// Its PointCloud2 topic.
    pub topic: String,
}

impl Diagnostics {
    /// Empty diagnostics of `sensors` (listed in that order in every message).
    pub fn new(sensors: &[SensorInfo]) -> Self {
        Self {
            sensors: sensors
                .iter()
                .map(|s| SensorDiag {
                    id: s.id,
                    name: s.name.clone(),
                    model: s.model.clone(),
                    topic: s.topic.clone(),
                    window: VecDeque::with_capacity(WINDOW_FRAMES),
                    totals: Sums::default(),
                })
                .collect(),
        }
    }

    /// Counts one frame of `points` points. Returns false (and counts nothing) when its
    /// `sensor_id` is not a configured sensor.
    pub fn add(&mut self, h: &FrameHeader, points: usize) -> bool {
        let Some(s) = self.sensors.iter_mut().find(|s| s.id == h.sensor_id) else {
            return false;
        };
        if s.window.len() == WINDOW_FRAMES {
            s.window.pop_front();
        }
        s.window.push_back(Seen {
            header: *h,
            points: points as u64,
        });
        s.totals.add(h, points as u64);
        true
    }

    /// The message: `time_ns` (`now_ns`), `window_frames`, and per sensor in configuration
    /// order its name, model, topic, last frame (`sequence`, `last_host_ns`, `points`),
    /// `frame_rate_hz`, `window` and `totals` ([`DIAGNOSTICS_SCHEMA`]).
    pub fn to_json(&self, now_ns: u64) -> Value {
        let sums = |s: &Sums| {
            json!({
                "frames": s.frames,
                "packets_received": s.received,
                "packets_expected": s.expected,
                "packets_malformed": s.malformed,
                "frames_lost": s.lost,
                "loss_percent": s.loss_percent(),
            })
        };
        let sensors: Vec<Value> = self
            .sensors
            .iter()
            .map(|s| {
                let mut w = Sums::default();
                for f in &s.window {
                    w.add(&f.header, f.points);
                }
                let last = s.window.back();
                let mut totals = sums(&s.totals);
                totals["points"] = s.totals.points.into();
                json!({
                    "name": s.name,
                    "model": s.model,
                    "topic": s.topic,
                    "sequence": last.map(|f| f.header.sequence),
                    "last_host_ns": last.map(|f| f.header.host_ns),
                    "points": last.map_or(0, |f| f.points),
                    "frame_rate_hz": frame_rate_hz(&s.window),
                    "window": sums(&w),
                    "totals": totals,
                })
            })
            .collect();
        json!({
            "time_ns": now_ns,
            "window_frames": WINDOW_FRAMES,
            "sensors": sensors,
        })
    }
}

/// `(n - 1) * 1e9 / (last start_ns - first start_ns)` over the `n` frames of `window` (the
/// sensor's rotation rate by its own clock); `None` below two frames or when the time stamps do
/// not increase (a clock step).
fn frame_rate_hz(window: &VecDeque<Seen>) -> Option<f64> {
    let (first, last) = (window.front()?, window.back()?);
    let span = last.header.start_ns.checked_sub(first.header.start_ns)?;
    if window.len() < 2 || span == 0 {
        return None;
    }
    Some((window.len() - 1) as f64 * 1e9 / span as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(seq: u64, start_ns: u64, rx: u32, exp: u32) -> FrameHeader {
        FrameHeader {
            sensor_id: 3,
            sequence: seq,
            start_ns,
            host_ns: start_ns + 7,
            packets_received: rx,
            packets_expected: exp,
            packets_malformed: 1,
            frames_lost_before: u32::from(seq == 2),
            ..FrameHeader::default()
        }
    }

    fn info() -> Vec<SensorInfo> {
        vec![SensorInfo {
            id: 3,
            name: "front".into(),
            model: "VLP16".into(),
            topic: "/lidar/front/points".into(),
        }]
    }

    #[test]
    fn empty_sensor_has_no_rate_and_zeros() {
        let d = Diagnostics::new(&info());
        let v = d.to_json(5);
        assert_eq!(v["time_ns"], 5);
        let s = &v["sensors"][0];
        assert_eq!(s["name"], "front");
        assert_eq!(s["model"], "VLP16");
        assert_eq!(s["topic"], "/lidar/front/points");
        assert_eq!(s["sequence"], Value::Null);
        assert_eq!(s["frame_rate_hz"], Value::Null);
        assert_eq!(s["points"], 0);
        assert_eq!(s["window"]["loss_percent"], 0.0);
        assert_eq!(s["totals"]["frames"], 0);
    }

    #[test]
    fn window_keeps_the_last_ten_frames_and_totals_keep_all() {
        let mut d = Diagnostics::new(&info());
        assert!(
            !d.add(&FrameHeader::default(), 5),
            "sensor 0 is not configured"
        );
        // 12 frames 100 ms apart; each 80 of 100 packets except the last (100 of 100).
        for i in 0..12u64 {
            let rx = if i == 11 { 100 } else { 80 };
            assert!(d.add(
                &header(i, 1_000_000_000 + i * 100_000_000, rx, 100),
                1000 + i as usize
            ));
        }
        let v = d.to_json(0);
        let s = &v["sensors"][0];
        assert_eq!(s["sequence"], 11);
        assert_eq!(s["last_host_ns"], 1_000_000_000u64 + 1_100_000_000 + 7);
        assert_eq!(s["points"], 1011);
        // Frames 2..=11: 9 intervals over 900 ms.
        assert_eq!(s["frame_rate_hz"], 9.0 * 1e9 / 900_000_000.0);
        let w = &s["window"];
        assert_eq!(w["frames"], 10);
        assert_eq!(w["packets_received"], 9 * 80 + 100);
        assert_eq!(w["packets_expected"], 1000);
        assert_eq!(w["packets_malformed"], 10);
        assert_eq!(w["frames_lost"], 1);
        assert_eq!(w["loss_percent"], 100.0 * 180.0 / 1000.0);
        let t = &s["totals"];
        assert_eq!(t["frames"], 12);
        assert_eq!(t["points"], (1000..1012).sum::<u64>());
        assert_eq!(t["packets_received"], 11 * 80 + 100);
        assert_eq!(t["packets_expected"], 1200);
        assert_eq!(t["loss_percent"], 100.0 * 220.0 / 1200.0);
    }

    #[test]
    fn a_clock_step_back_gives_no_rate() {
        let mut d = Diagnostics::new(&info());
        d.add(&header(0, 2_000, 1, 1), 1);
        d.add(&header(1, 1_000, 1, 1), 1);
        assert_eq!(d.to_json(0)["sensors"][0]["frame_rate_hz"], Value::Null);
    }

    #[test]
    fn schema_is_json() {
        let v: Value = serde_json::from_str(DIAGNOSTICS_SCHEMA).expect("schema JSON");
        assert_eq!(v["title"], "lidarxdp.Diagnostics");
    }
}
