//! The live view (`lidarxdp run --view 127.0.0.1:8080`, issue 14): a page that shows each
//! sensor's latest frame in 3D in any browser, with nothing installed.
//!
//! - The page (`web/index.html`, `web/view.js`) draws the points with three.js and its
//!   OrbitControls (npm `three`, pinned in `web/package-lock.json`), which `cargo xtask setup`
//!   fetches with `npm ci` and `build.rs` embeds in the binary ([`assets`]); the browser loads
//!   them as ES modules through an import map, from the daemon.
//! - [`ViewSink`], a [`FrameSink`] on the publisher thread, keeps the latest frame of each
//!   sensor (an `Arc` swapped under a short lock: [`FrameSink::offer`] never waits for the
//!   HTTP thread) and per-sensor statistics (frame rate, loss).
//! - [`server`]: a `tiny_http` server on its own thread (`view-http`, started after the
//!   capabilities are dropped) serves the page, `GET /api/status` (JSON) and
//!   `GET /api/frame?sensor=NAME&after=SEQ` (the latest frame as compact binary, layout in
//!   [`wire`], at most [`MAX_POINTS`] points).
//!
//! The endpoints have no authentication: the address must be loopback (checked by `run`), and
//! a request whose `Host` is not a loopback name is refused (403), so a web page in the same
//! browser cannot reach the view through DNS rebinding. Its counters are [`ViewCounters`].

pub mod assets;
pub mod server;
pub mod wire;

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::publish::{FrameSink, SharedFrame};

/// Most points one frame response carries; a frame with more is decimated to every `step`-th
/// point, `step = ceil(points / MAX_POINTS)` (16 bytes a point: at most 4.8 MB a response).
/// The demo's VLP-16 frames hold about 15 000 points, a 128-beam sensor's about 240 000: all
/// sent whole.
pub const MAX_POINTS: usize = 300_000;

/// Frames of each sensor in the window [`SensorStatus::fps`] and [`SensorStatus::loss_percent`]
/// are measured over.
pub const WINDOW_FRAMES: usize = 10;

/// A sensor without a frame for this long shows a frame rate of 0.
pub const STALE_AFTER: Duration = Duration::from_secs(2);

/// The live view's counters: daemon-wide, no labels (`lidarxdp_view_*`; stats JSON `view`).
pub const VIEW_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "view",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of the live view's counters.
    pub struct ViewCounters in VIEW_COUNTERS;
    shared
    /// Written by the sink (on the publisher thread) and the HTTP thread.
    pub struct SharedViewCounters;
    {
        /// Each replaces the sensor's latest frame.
        frames: Counter "frames" "Frames handed to the live view.",
        /// Not one of the sensors the view was started with.
        frames_unknown_sensor: Counter "frames" "Frames of a sensor the live view does not show, ignored.",
        /// `GET /api/frame` answered with a frame (not 204 "no newer frame").
        frames_served: Counter "frames" "Frames sent to browsers.",
    }
}

/// A sensor the view shows, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSensor {
    /// The frames' `sensor_id` (the configuration index).
    pub id: u16,
    /// Its name (`--name`, `[[sensors]] name`): how the page and the API name it.
    pub name: String,
    /// Its model's name (`VLP16`, ...).
    pub model: String,
}

/// One frame's arrival, for the windowed statistics.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    at: Instant,
    received: u32,
    expected: u32,
}

/// What the view holds of one sensor.
#[derive(Debug, Default)]
struct Slot {
    latest: Option<Arc<SharedFrame>>,
    frames: u64,
    packets_received: u64,
    packets_expected: u64,
    frames_lost: u64,
    window: VecDeque<Arrival>,
}

/// A sensor's statistics at one moment, as `GET /api/status` reports them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SensorStatus {
    /// Its name.
    pub name: String,
    /// Its model's name.
    pub model: String,
    /// Frames received since the start.
    pub frames: u64,
    /// Sequence of the latest frame (`null`: none yet).
    pub sequence: Option<u64>,
    /// Points of the latest frame (0: none yet).
    pub points: usize,
    /// Frames per second over the last [`WINDOW_FRAMES`] arrivals within [`STALE_AFTER`] of
    /// now (publisher hand-over times); 0 with fewer than two such frames.
    pub fps: f64,
    /// Packets missing from the frames of the same window, percent of those expected
    /// (`FrameHeader::packets_expected - packets_received`); 0 without frames.
    pub loss_percent: f64,
    /// Milliseconds since the latest frame (`null`: none yet).
    pub age_ms: Option<u64>,
    /// Data packets in all frames received.
    pub packets_received: u64,
    /// Data packets the sensor sent for those frames.
    pub packets_expected: u64,
    /// Whole frames the sensor sent that never arrived (`FrameHeader::frames_lost_before`).
    pub frames_lost: u64,
}

/// The state the sink writes and the HTTP thread reads: the configured sensors and one slot
/// each, under one mutex held only to swap an `Arc` or copy a few numbers.
#[derive(Debug)]
pub struct ViewState {
    sensors: Vec<ViewSensor>,
    slots: Mutex<Vec<Slot>>,
    counters: SharedViewCounters,
}

impl ViewState {
    /// State for `sensors`, no frame yet.
    pub fn new(sensors: Vec<ViewSensor>) -> Self {
        let slots = sensors.iter().map(|_| Slot::default()).collect();
        ViewState {
            sensors,
            slots: Mutex::new(slots),
            counters: SharedViewCounters::default(),
        }
    }

    /// The view's counters now.
    pub fn counters(&self) -> ViewCounters {
        self.counters.snapshot()
    }

    /// The configured sensors, in configuration order.
    pub fn sensors(&self) -> &[ViewSensor] {
        &self.sensors
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic while holding the lock leaves consistent numbers (plain assignments).
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `frame`, handed over at `now`; a frame of an unknown sensor id is ignored.
    pub fn record(&self, frame: &Arc<SharedFrame>, now: Instant) {
        let h = frame.header();
        let Some(i) = self.sensors.iter().position(|s| s.id == h.sensor_id) else {
            self.counters.frames_unknown_sensor.fetch_add(1, Relaxed);
            return;
        };
        self.counters.frames.fetch_add(1, Relaxed);
        let mut slots = self.slots();
        let slot = &mut slots[i];
        // The previous frame is dropped after the lock is released (its buffer goes back to
        // the pool under the pool's own lock).
        let old = slot.latest.replace(frame.clone());
        slot.frames += 1;
        slot.packets_received += u64::from(h.packets_received);
        slot.packets_expected += u64::from(h.packets_expected);
        slot.frames_lost += u64::from(h.frames_lost_before);
        if slot.window.len() == WINDOW_FRAMES {
            slot.window.pop_front();
        }
        slot.window.push_back(Arrival {
            at: now,
            received: h.packets_received,
            expected: h.packets_expected,
        });
        drop(slots);
        drop(old);
    }

    /// The latest frame of sensor `index` (in [`Self::sensors`] order) when its sequence is
    /// greater than `after` (any frame when `after` is `None`).
    pub fn latest(&self, index: usize, after: Option<u64>) -> Option<Arc<SharedFrame>> {
        let slots = self.slots();
        let f = slots.get(index)?.latest.as_ref()?;
        match after {
            Some(a) if f.header().sequence <= a => None,
            _ => {
                self.counters.frames_served.fetch_add(1, Relaxed);
                Some(f.clone())
            }
        }
    }

    /// Every sensor's statistics at `now`.
    pub fn status(&self, now: Instant) -> Vec<SensorStatus> {
        let slots = self.slots();
        self.sensors
            .iter()
            .zip(slots.iter())
            .map(|(s, slot)| {
                let recent: Vec<&Arrival> = slot
                    .window
                    .iter()
                    .filter(|a| now.saturating_duration_since(a.at) <= STALE_AFTER)
                    .collect();
                let fps = match (recent.first(), recent.last()) {
                    (Some(a), Some(b)) if recent.len() >= 2 && b.at > a.at => {
                        (recent.len() - 1) as f64 / (b.at - a.at).as_secs_f64()
                    }
                    _ => 0.0,
                };
                let (rx, ex) = slot.window.iter().fold((0u64, 0u64), |(r, e), a| {
                    (r + u64::from(a.received), e + u64::from(a.expected))
                });
                let loss_percent = if ex == 0 {
                    0.0
                } else {
                    100.0 * ex.saturating_sub(rx) as f64 / ex as f64
                };
                SensorStatus {
                    name: s.name.clone(),
                    model: s.model.clone(),
                    frames: slot.frames,
                    sequence: slot.latest.as_ref().map(|f| f.header().sequence),
                    points: slot.latest.as_ref().map_or(0, |f| f.points().len()),
                    fps,
                    loss_percent,
                    age_ms: slot
                        .window
                        .back()
                        .map(|a| now.saturating_duration_since(a.at).as_millis() as u64),
                    packets_received: slot.packets_received,
                    packets_expected: slot.packets_expected,
                    frames_lost: slot.frames_lost,
                }
            })
            .collect()
    }
}

/// The view's [`FrameSink`]: records each frame in the shared [`ViewState`]; dropping it (the
/// publisher's shutdown) stops the HTTP thread.
pub struct ViewSink {
    state: Arc<ViewState>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ViewSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewSink")
            .field("sensors", &self.state.sensors.len())
            .finish_non_exhaustive()
    }
}

impl ViewSink {
    /// Starts the HTTP server on `listener` (bound beforehand, possibly before the
    /// capabilities were dropped, on a loopback address) for `sensors`; only requests naming a
    /// loopback host are answered.
    ///
    /// Errors: the three.js files were not embedded at build time ([`assets::check`]), or the
    /// server or its thread could not start.
    pub fn start(listener: TcpListener, sensors: Vec<ViewSensor>) -> anyhow::Result<Self> {
        assets::check()?;
        let state = Arc::new(ViewState::new(sensors));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = server::spawn(listener, state.clone(), stop.clone())?;
        Ok(ViewSink {
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// The state the server reads (tests).
    pub fn state(&self) -> &Arc<ViewState> {
        &self.state
    }
}

impl FrameSink for ViewSink {
    fn name(&self) -> &str {
        "view"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, now: Instant) {
        self.state.record(frame, now);
    }
}

impl Drop for ViewSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // The thread checks the flag every `server::POLL`; a request being answered
            // finishes first (bounded by the server's write timeout).
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::BufferPool;
    use lidarxdp_core::frame::{Frame, FrameHeader};
    use lidarxdp_core::point::PointXYZIRCAEDT;

    pub(crate) fn frame(sensor_id: u16, sequence: u64, n: usize, rx: u32, ex: u32) -> Frame {
        Frame {
            header: FrameHeader {
                sensor_id,
                sequence,
                packets_received: rx,
                packets_expected: ex,
                ..FrameHeader::default()
            },
            points: (0..n)
                .map(|i| PointXYZIRCAEDT {
                    x: i as f32,
                    y: -(i as f32),
                    z: 0.5,
                    intensity: (i % 256) as u8,
                    return_type: 1,
                    channel: (i % 16) as u16,
                    ..PointXYZIRCAEDT::default()
                })
                .collect(),
        }
    }

    fn sensors() -> Vec<ViewSensor> {
        vec![
            ViewSensor {
                id: 0,
                name: "front".into(),
                model: "VLP16".into(),
            },
            ViewSensor {
                id: 3,
                name: "rear".into(),
                model: "Pandar40P".into(),
            },
        ]
    }

    #[test]
    fn latest_frame_and_windowed_statistics() {
        let pool = Arc::new(BufferPool::new(4));
        let st = ViewState::new(sensors());
        let t0 = Instant::now();
        assert!(st.latest(0, None).is_none());
        // 11 frames of `rear` 100 ms apart; the first has 10 packets lost of 100 and falls
        // out of the 10-frame window, the last has 5 of 100.
        for k in 0..11u64 {
            let rx = match k {
                0 => 90,
                10 => 95,
                _ => 100,
            };
            let f = SharedFrame::new(frame(3, k, 50, rx, 100), pool.clone());
            st.record(&f, t0 + Duration::from_millis(100 * k));
        }
        // A frame of an unconfigured sensor id changes nothing.
        st.record(&SharedFrame::new(frame(9, 0, 1, 1, 1), pool.clone()), t0);
        let now = t0 + Duration::from_millis(1000);
        let s = st.status(now);
        assert_eq!(s[0].frames, 0);
        assert_eq!(s[0].sequence, None);
        assert_eq!(s[0].fps, 0.0);
        assert_eq!(s[1].name, "rear");
        assert_eq!(s[1].frames, 11);
        assert_eq!(s[1].sequence, Some(10));
        assert_eq!(s[1].points, 50);
        assert_eq!(s[1].age_ms, Some(0));
        assert_eq!(s[1].packets_expected, 1100);
        assert_eq!(s[1].packets_received, 1085);
        // Window: frames 1..=10, 9 intervals over 0.9 s; 5 lost of 1000.
        assert!((s[1].fps - 10.0).abs() < 1e-9, "{}", s[1].fps);
        assert!(
            (s[1].loss_percent - 0.5).abs() < 1e-9,
            "{}",
            s[1].loss_percent
        );
        // Only the newer sequence is returned.
        assert_eq!(st.latest(1, None).unwrap().header().sequence, 10);
        assert!(st.latest(1, Some(10)).is_none());
        assert_eq!(st.latest(1, Some(9)).unwrap().header().sequence, 10);
        // Frames older than STALE_AFTER no longer count for the rate.
        let later = t0 + Duration::from_millis(1000) + STALE_AFTER + Duration::from_millis(1);
        assert_eq!(st.status(later)[1].fps, 0.0);
        assert_eq!(st.status(later)[1].age_ms, Some(2001));
    }

    #[test]
    fn replaced_frames_return_their_buffers_to_the_pool() {
        let pool = Arc::new(BufferPool::new(4));
        let st = ViewState::new(sensors());
        let t0 = Instant::now();
        st.record(&SharedFrame::new(frame(0, 0, 10, 1, 1), pool.clone()), t0);
        assert_eq!(pool.len(), 0);
        st.record(&SharedFrame::new(frame(0, 1, 10, 1, 1), pool.clone()), t0);
        assert_eq!(pool.len(), 1, "the first frame's buffer is back");
    }
}
