//! Scan (frame) assembly: cut angle, timeouts, packet accounting. Sans-IO and vendor-neutral.
//!
//! The decoder hands over packets as three calls: [`ScanAssembler::begin_packet`] with the
//! packet's times and raw first/last block azimuths, [`ScanAssembler::add_point`] per decoded
//! point, [`ScanAssembler::end_packet`]. Finished frames are appended to a caller's `Vec<Frame>`.
//!
//! ## Frame boundary (the cut), as Tier IV Nebula's Velodyne decoders
//!
//! All azimuths are "phased": `(azimuth - cut) mod 360°`, in 0.01° units.
//! 1. A packet *completes* the frame when at least one packet of the frame came before it and
//!    either its last block's phased azimuth is smaller than its first block's (the cut lies
//!    inside the packet) or its first block's phased azimuth is smaller than the previous
//!    packet's (the cut lies between the two packets).
//! 2. The completing packet's points are appended; then the *trailing run* of points whose
//!    phased azimuth is below 90° is moved to the next frame (the points past the cut). The
//!    run stops at the first point at or beyond 90°, so points before the cut stay.
//! 3. The next frame starts at the completing packet: its start time is that packet's sensor
//!    time and the moved points' `time_stamp` are rebased onto it.
//!
//! So a frame is one turn `[cut, cut + 360°)`, split at point granularity.
//!
//! [`ScanAssembler::set_carry_limit_cdeg`] changes the 90° of rule 2; a limit of 0 carries
//! nothing (Nebula's VLP-32/HDL decoder: the whole completing packet stays in the frame). Then
//! the next frame opens at its own first packet (start time, `packets_received` from there), not
//! at the completing packet. Reference:
//! Nebula `VelodyneScanDecoder::check_and_handle_scan_complete` and
//! `Vlp16Decoder::get_pointcloud` / `reset_overflow` (tier4/nebula, 2026).
//!
//! ## Time faults ([`StreamClock`], issue 11 classes 1 and 3)
//! Every packet's sensor time goes through the sensor's [`StreamClock`] first:
//! * a packet whose time jumps back, or ahead of the host time elapsed by more than
//!   [`JUMP_AHEAD_TOLERANCE_NS`], is dropped ([`ScanAssembler::begin_packet`] returns `false`;
//!   the pipeline counts it in `time_jumps`) and the frame around it stays whole;
//! * [`RESTART_AGREE`] consecutive packets on a new time base are a sensor restart: the frame in
//!   progress is closed and the stream continues on the new base (counted, logged once);
//! * a sensor-time gap longer than one rotation period closes the frame in progress; the whole
//!   turns inside the gap ([`turns_lost`]) go to the next frame's
//!   [`FrameHeader::frames_lost_before`]. The rotation period is measured from the stream (the
//!   sensor time over which the packets' first-block azimuths add up to a turn); until then it
//!   is the nominal `interval_ns × 36000 / advance_cdeg`.
//!
//! ## Other closes
//! * **Timeout**: no data packet for `frame_timeout_ns` of host time ([`ScanAssembler::poll_timeout`],
//!   or noticed when the next packet arrives) closes the frame in progress as a partial frame.
//! * **Overlong**: a frame spanning more than [`MAX_FRAME_SPAN_NS`] of sensor time closes the
//!   frame in progress first.
//! * **Flush**: [`ScanAssembler::flush`] (end of a pcap, shutdown).
//!
//! A frame holding only points carried over from the previous cut and no packet of its own
//! is dropped on timeout and flush (Nebula likewise discards its overflow after a 50 ms gap).
//!
//! ## Packet accounting
//! `packets_received` counts the data packets decoded while the frame was open, including the
//! completing packet shared with the previous frame. `packets_expected` adds an estimate of the
//! packets lost: gaps in the sensor timestamps (`round(Δt / packet interval) - 1`, bounded by
//! the azimuth turned since the previous packet's last block over the per-packet advance, so a
//! sensor that only emits a sector is not counted as losing the rest), and, for a
//! frame that did not begin at a cut (first frame, after a timeout or gap) or did not end at
//! one (timeout, gap, flush, overlong), the azimuth between the cut and the first/last packet
//! divided by the azimuth advance per packet. A complete frame has
//! `packets_expected == packets_received`.
//!
//! The packet interval is the larger of the nominal one and the smallest step between
//! consecutive packets over the last 32–64 steps: a stream replayed slower than the sensor
//! sends (the bench's 10-sensor scenario stamps a VLP-16 dual stream every 1.33 ms, twice the
//! nominal 663.552 µs) otherwise looks as if every other packet were lost, and wherever the
//! azimuth also jumps (the seam of a looped capture whose turns are not a whole number of
//! packets) a packet was counted missing: half the frames said `152/153`. The advance per
//! packet for the head/tail estimates is likewise measured (a running mean of the steps
//! between consecutive packets' first-block azimuths); the packet's own `advance_cdeg`, an
//! integer from within one packet, undercounts it by up to 0.5 %, which made the estimate one
//! packet too high near the end of a turn.
//!
//! ## Buffer reuse (no allocation once warm)
//! Each frame's point `Vec` leaves with the frame. The next frame's `Vec` comes from the
//! decoder's [`BufferSource`] if it was given one ([`PointBuffers`],
//! [`crate::sensor::ScanPipeline::set_buffer_source`]; the capture thread gives it the
//! publisher's LIFO pool, whose buffers come back when the last subscriber has sent the frame),
//! else it is allocated, pre-sized from the previous frame. The azimuth side table is
//! recycled inside the assembler. With a warm pool, decoding allocates nothing.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use crate::frame::{Frame, FrameClock, FrameHeader};
use crate::point::PointXYZIRCAEDT;

// ---- buffer reuse hook (publisher, issue 5) -------------------------------------------------

/// A source of empty point buffers for the frames an assembler starts, e.g. the publisher's
/// `lidarxdp::publish::BufferPool` of buffers whose frames have been sent.
pub trait BufferSource: Send + Sync {
    /// An empty buffer (its capacity is reused), or `None` to make the assembler allocate.
    /// Must not block: it is called on the decoder's hot path, once per frame.
    fn take_buffer(&self) -> Option<Vec<PointXYZIRCAEDT>>;
}

/// Where a decoder takes its new frames' point buffers: a [`BufferSource`] given with
/// [`crate::sensor::ScanPipeline::set_buffer_source`], else the allocator. `Clone` shares the
/// source.
#[derive(Clone, Default)]
pub struct PointBuffers(Option<Arc<dyn BufferSource>>);

impl fmt::Debug for PointBuffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PointBuffers")
            .field(&self.0.as_ref().map(|_| "source"))
            .finish()
    }
}

impl PointBuffers {
    /// Buffers from `source` (the allocator when it has none).
    pub fn new(source: Arc<dyn BufferSource>) -> Self {
        PointBuffers(Some(source))
    }

    /// An empty point buffer with room for `capacity` points: from the source if it has one,
    /// else freshly allocated. Every vendor decoder takes its frame buffers here so a warm
    /// decoder does not allocate.
    pub fn take(&self, capacity: usize) -> Vec<PointXYZIRCAEDT> {
        match self.0.as_ref().and_then(|s| s.take_buffer()) {
            Some(mut v) => {
                v.clear();
                v.reserve(capacity);
                v
            }
            None => Vec::with_capacity(capacity),
        }
    }
}

/// Azimuth units per turn (0.01°).
pub const AZIMUTH_UNITS: u32 = 36_000;
/// Phased azimuth below which trailing points move to the next frame, 0.01° (90°).
pub const CARRY_LIMIT_CDEG: u32 = 9_000;
/// Longest sensor-time span of one frame before it is force-closed, ns (1 s; a VLP-16 turns at
/// 5–20 Hz). Also keeps every `time_stamp` within `u32`.
pub const MAX_FRAME_SPAN_NS: u64 = 1_000_000_000;

// ---- stream time guard (fault classes 1 and 3 of issue 11) ----------------------------------

/// How far a packet's sensor time may run ahead of the host time elapsed since the previous
/// accepted packet before the packet counts as a time jump, ns (100 ms). Sensor time cannot
/// legitimately advance faster than host time: packets queued during a host stall keep their
/// spacing, and packets lost on the way leave a sensor gap matched by a host gap.
pub const JUMP_AHEAD_TOLERANCE_NS: u64 = 100_000_000;
/// Consecutive packets that must agree on a new time base (each in line with the one before)
/// before it is taken as a sensor restart ([`TimeVerdict::Restart`]). The first
/// `RESTART_AGREE - 1` of them are dropped as time jumps.
pub const RESTART_AGREE: u32 = 3;
/// A sensor-time gap between two consecutive packets longer than this many rotation periods,
/// in tenths (10 = one period), closes the frame in progress: no frame holds two turns. (Issue
/// 11 asks for 1.5 periods at most; between 1 and 1.5 periods a frame kept open would hold
/// parts of two turns whenever the azimuth after the gap has not passed the cut, and nothing
/// but a loss stops a sensor for a whole turn: a sensor-side field of view pauses for less.)
pub const GAP_PERIODS_X10: u64 = 10;

/// What [`StreamClock::check`] says about a packet's sensor time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeVerdict {
    /// In line with the stream: at or after the previous accepted packet, and not ahead of the
    /// host time elapsed by more than [`JUMP_AHEAD_TOLERANCE_NS`]. `gap_ns` is `Some(dt)` when
    /// the sensor time since the previous accepted packet (`dt`, ns) exceeds
    /// [`GAP_PERIODS_X10`]/10 rotation periods (one): the frame in progress must be closed
    /// first.
    InLine {
        /// The sensor-time gap, ns, when it is longer than one rotation period.
        gap_ns: Option<u64>,
    },
    /// Far back or ahead of the stream (a single corrupt, late or foreign stamp, or one of the
    /// first packets of a new time base): drop the packet.
    Jump,
    /// [`RESTART_AGREE`] consecutive packets agree on a new time base: the sensor restarted
    /// (or its clock was stepped, e.g. by PTP). Close the frame in progress and start a new
    /// stream with this packet.
    Restart,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    sensor_ns: u64,
    host_ns: u64,
    azimuth_cdeg: Option<u32>,
}

/// Longest sensor time between two packets that still samples the rotation speed, ns (1 s).
pub const MAX_SAMPLE_DT_NS: u64 = 1_000_000_000;

/// The rotation period, ns, from `dt_ns` of sensor time over `cdeg` of azimuth (0.01°, > 0):
/// `dt · 36000 / cdeg` in u128, saturating at `u64::MAX`.
fn period_from(dt_ns: u64, cdeg: u64) -> u64 {
    let p = u128::from(dt_ns) * u128::from(AZIMUTH_UNITS) / u128::from(cdeg.max(1));
    u64::try_from(p).unwrap_or(u64::MAX)
}

/// Per-sensor guard on the packets' sensor time, shared by every vendor's frame builder
/// (Velodyne and RoboSense through [`ScanAssembler`], Hesai directly). Sans-IO.
///
/// ## Rules
/// * A packet is **in line** when its sensor time is not before the previous accepted packet's
///   and not ahead of it by more than the host time elapsed plus [`JUMP_AHEAD_TOLERANCE_NS`].
///   Anything else is a **jump** ([`TimeVerdict::Jump`]): the packet is dropped and counted,
///   and the frame around it stays whole. The Velodyne hour wrap (µs past the hour going from
///   3599.99 s to 0) is resolved to a continuous time by the decoder before this check, so it
///   is no jump.
/// * A jump that is followed by packets in line with *it* (not with the stream) is a candidate
///   new time base; at the [`RESTART_AGREE`]-th agreeing packet it becomes the stream's base:
///   [`TimeVerdict::Restart`], counted in [`StreamClock::restarts`] and logged once per
///   sensor. A packet in line with the old base in between discards the candidate.
/// * **Rotation period**: measured from the stream: the sensor time over which the first-block
///   azimuth of consecutive in-line packets (at most a quarter turn apart each) adds up to a
///   full turn (pairs further apart, e.g. across the pause of a sensor-side field of view or a
///   loss, are skipped); before a full turn, over the first 30° or more; before that, the
///   caller's nominal period (packet interval × packets per turn) or none. The guard is kept
///   across a host-time silence (frame timeout), so the turns lost in it are counted; but
///   after a silence ([`StreamClock::note_silence`]) a packet out of line starts a new time
///   base at once (a restart, nothing dropped). A sensor-time gap between consecutive accepted
///   packets longer than one period ([`GAP_PERIODS_X10`]) is reported in
///   [`TimeVerdict::InLine`]'s `gap_ns`.
#[derive(Clone, Debug, Default)]
pub struct StreamClock {
    last: Option<Stamp>,
    candidate: Option<(Stamp, u32)>,
    period_ns: u64,
    turn_dt_ns: u64,
    turn_cdeg: u64,
    step_cdeg: u32,
    step_dt_ns: u64,
    /// A host-time silence (frame timeout) came before the next packet.
    silent: bool,
    jumps: u64,
    restarts: u64,
    warned: bool,
}

impl StreamClock {
    /// Judges a packet with sensor time `sensor_ns` (ns), received at `host_ns` (ns), whose
    /// first firing is at `azimuth_cdeg` (0.01°, `None` where the packet carries no azimuth);
    /// `nominal_period_ns` is the rotation period to use until one has been measured (0 =
    /// unknown: no gap rule until measured). Updates the stream state.
    pub fn check(
        &mut self,
        sensor_ns: u64,
        host_ns: u64,
        azimuth_cdeg: Option<u32>,
        nominal_period_ns: u64,
    ) -> TimeVerdict {
        let now = Stamp {
            sensor_ns,
            host_ns,
            azimuth_cdeg: azimuth_cdeg.map(|a| a % AZIMUTH_UNITS),
        };
        let Some(last) = self.last else {
            self.last = Some(now);
            return TimeVerdict::InLine { gap_ns: None };
        };
        let silent = std::mem::take(&mut self.silent);
        if silent && !Self::in_line(&last, &now) {
            // After a silence there is no stream to protect: a new time base (a sensor or
            // replay restarted while it was quiet) is taken at once, nothing dropped.
            self.new_time_base(now);
            return TimeVerdict::InLine { gap_ns: None };
        }
        if Self::in_line(&last, &now) {
            self.candidate = None;
            let dt = sensor_ns - last.sensor_ns;
            let period = match self.period_ns() {
                0 => nominal_period_ns,
                p => p,
            };
            let gap = period > 0 && dt.saturating_mul(10) > period.saturating_mul(GAP_PERIODS_X10);
            if !gap {
                self.measure(&last, &now, dt);
            }
            self.last = Some(now);
            return TimeVerdict::InLine {
                gap_ns: gap.then_some(dt),
            };
        }
        let agree = match self.candidate {
            Some((c, n)) if Self::in_line(&c, &now) => n + 1,
            _ => 1,
        };
        if agree >= RESTART_AGREE {
            self.new_time_base(now);
            if !self.warned {
                self.warned = true;
                log::warn!(
                    "sensor time jumped from {} ns to {sensor_ns} ns and stayed there for \
                     {RESTART_AGREE} packets: taken as a sensor restart (new stream); further \
                     restarts are counted in `restarts` without a log line",
                    last.sensor_ns
                );
            }
            return TimeVerdict::Restart;
        }
        self.candidate = Some((now, agree));
        self.jumps += 1;
        TimeVerdict::Jump
    }

    /// Takes `now` as the stream's new time base (a restart): the candidate and the rotation
    /// measurement of the old base are dropped, the restart counted.
    fn new_time_base(&mut self, now: Stamp) {
        self.candidate = None;
        self.last = Some(now);
        self.period_ns = 0;
        self.turn_dt_ns = 0;
        self.turn_cdeg = 0;
        self.restarts += 1;
    }

    fn in_line(prev: &Stamp, now: &Stamp) -> bool {
        let host_dt = now.host_ns.saturating_sub(prev.host_ns);
        now.sensor_ns >= prev.sensor_ns
            && now.sensor_ns - prev.sensor_ns <= host_dt.saturating_add(JUMP_AHEAD_TOLERANCE_NS)
    }

    fn measure(&mut self, last: &Stamp, now: &Stamp, dt: u64) {
        let (Some(a), Some(b)) = (last.azimuth_cdeg, now.azimuth_cdeg) else {
            return;
        };
        let daz = (AZIMUTH_UNITS + b - a) % AZIMUTH_UNITS;
        // A stalled or reversed azimuth, or a gap (also one of whole turns, whose azimuth
        // aliases to a small step: its rate is far below the previous sample's): not a sample
        // of the rotation speed.
        let slow = self.step_cdeg > 0
            && u128::from(dt) * u128::from(self.step_cdeg)
                > 3 * u128::from(self.step_dt_ns) * u128::from(daz);
        // A step of at most a quarter turn that took over MAX_SAMPLE_DT_NS is no rotation
        // sample either (every spinning LiDAR turns a quarter turn in well under 1 s); this
        // also bounds `turn_dt_ns`, so the period arithmetic below cannot overflow.
        if daz == 0 || daz > AZIMUTH_UNITS / 4 || dt == 0 || dt > MAX_SAMPLE_DT_NS || slow {
            return;
        }
        self.step_cdeg = daz;
        self.step_dt_ns = dt;
        self.turn_dt_ns = self.turn_dt_ns.saturating_add(dt);
        self.turn_cdeg += u64::from(daz);
        if self.turn_cdeg >= u64::from(AZIMUTH_UNITS) {
            self.period_ns = period_from(self.turn_dt_ns, self.turn_cdeg);
            self.turn_dt_ns = 0;
            self.turn_cdeg = 0;
        }
    }

    /// Records a host-time silence longer than the frame timeout (the frame in progress was
    /// closed): the next packet starts a new time base at once if it is not in line (counted
    /// as a restart, nothing dropped); if it is in line, the gap rule still counts the turns
    /// lost in the silence.
    pub fn note_silence(&mut self) {
        self.silent = true;
    }

    /// The stream's time at host time `host_ns`: the last accepted packet's sensor time plus
    /// the host time elapsed since it, ns (`None` before the first packet). For packets whose
    /// own time field is invalid.
    pub fn extrapolate(&self, host_ns: u64) -> Option<u64> {
        self.last.map(|l| {
            l.sensor_ns
                .saturating_add(host_ns.saturating_sub(l.host_ns))
        })
    }

    /// Forgets the stream (the next packet is in line whatever its time). Counters stay.
    pub fn reset(&mut self) {
        self.last = None;
        self.candidate = None;
    }

    /// The measured rotation period, ns: over the last full turn, or before one full turn
    /// was seen over at least 30° of it; 0 while less has been measured.
    pub fn period_ns(&self) -> u64 {
        if self.period_ns > 0 {
            self.period_ns
        } else if self.turn_cdeg >= 3_000 {
            period_from(self.turn_dt_ns, self.turn_cdeg)
        } else {
            0
        }
    }

    /// Azimuth between the first firings of the last two consecutive in-line packets that
    /// sampled the rotation, 0.01° (the advance per packet; 0 = none yet).
    pub fn step_cdeg(&self) -> u32 {
        self.step_cdeg
    }

    /// Packets judged [`TimeVerdict::Jump`] so far.
    pub fn jumps(&self) -> u64 {
        self.jumps
    }

    /// Sensor restarts ([`TimeVerdict::Restart`]) so far.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }
}

/// Whole turns (frames) lost in a sensor-time gap of `gap_ns` (ns) between a packet at phased
/// azimuth `from_cdeg` and the next one at `to_cdeg` (0.01°, measured from the cut), for a
/// rotation period of `period_ns` (ns): the turn count is the time estimate rounded to the
/// one that agrees with the azimuths; the frame in progress ends at the first cut crossed and
/// the next one begins at the last, so the frames in between are lost (cuts crossed − 1).
pub fn turns_lost(from_cdeg: u32, to_cdeg: u32, gap_ns: u64, period_ns: u64) -> u32 {
    if period_ns == 0 {
        return 0;
    }
    let units = u128::from(AZIMUTH_UNITS);
    let from = u128::from(from_cdeg % AZIMUTH_UNITS);
    let diff = u128::from(
        (AZIMUTH_UNITS + to_cdeg % AZIMUTH_UNITS - from_cdeg % AZIMUTH_UNITS) % AZIMUTH_UNITS,
    );
    let est = u128::from(gap_ns) * units / u128::from(period_ns);
    // Whole turns on top of the azimuth difference, rounded to the nearest.
    let whole = (est.saturating_sub(diff) + units / 2) / units;
    let turned = diff + whole * units;
    let cuts = (from + turned) / units;
    cuts.saturating_sub(1).min(u128::from(u32::MAX)) as u32
}

/// What the assembler needs to know about one data packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacketInfo {
    /// Host receive time (or pcap record time), ns since the Unix epoch.
    pub host_ns: u64,
    /// Sensor time of the packet (its first firing), ns since the Unix epoch.
    pub sensor_ns: u64,
    /// Raw azimuth of the first block, 0.01° (0..35999).
    pub first_azimuth_cdeg: u16,
    /// Raw azimuth of the last block, 0.01° (0..35999).
    pub last_azimuth_cdeg: u16,
    /// Azimuth the sensor turns during one packet, 0.01° (estimated from the packet).
    pub advance_cdeg: u32,
    /// Nominal time between two data packets, ns.
    pub interval_ns: u64,
}

/// Frame being built.
#[derive(Clone, Debug, Default)]
struct Building {
    points: Vec<PointXYZIRCAEDT>,
    azimuths: Vec<u16>,
    start_ns: u64,
    host_ns: u64,
    /// A start time is set (a packet or a carry has opened the frame).
    open: bool,
    /// At least one packet after the cut has been decoded into this frame.
    own_packet: bool,
    received: u32,
    lost: u32,
    malformed: u32,
    /// A packet of this frame was stamped with host time (its sensor time was invalid).
    host_clock: bool,
}

/// The frame buffers [`ScanAssembler::batch`] lends to a decoder; the two vectors must grow
/// together (one azimuth per point).
#[derive(Debug)]
pub struct PointBatch<'a> {
    /// Points of the frame in progress.
    pub points: &'a mut Vec<PointXYZIRCAEDT>,
    /// Corrected azimuth of each point, 0.01°.
    pub azimuths: &'a mut Vec<u16>,
    /// Sensor time of the current packet, ns.
    pub packet_ns: u64,
    /// Start time of the frame in progress, ns.
    pub start_ns: u64,
}

/// Scan assembler for one sensor. See the module documentation for the rules.
#[derive(Clone, Debug)]
pub struct ScanAssembler {
    sensor_id: u16,
    cut_cdeg: u32,
    frame_timeout_ns: u64,
    sequence: u64,
    cur: Building,
    /// Packets since the last cut (Nebula `processed_packets_`).
    packets_since_cut: u32,
    prev_first_phased: u32,
    last_host_ns: Option<u64>,
    last_sensor_ns: Option<u64>,
    last: Option<PacketInfo>,
    cut_pending: bool,
    packet_sensor_ns: u64,
    carry_limit_cdeg: u32,
    /// The previous frame ended at a cut with nothing carried: the next packet opens a frame
    /// that begins at the cut (no lost-packet estimate for its start).
    at_cut: bool,
    /// Azimuth table of the last emitted frame, reused by the next one (no allocation).
    spare_azimuths: Vec<u16>,
    /// Jump / restart / rotation-period guard on the packets' sensor time.
    time: StreamClock,
    /// Whole frames lost in a gap, to report in the next emitted frame's header.
    pending_lost_frames: u32,
    /// Smallest sensor-time step between consecutive packets in the current / previous block
    /// of [`INTERVAL_BLOCK`] steps, ns (`u64::MAX`: none yet).
    dt_min: [u64; 2],
    dt_count: u32,
    /// Measured azimuth advance between consecutive packets, 0.01°/256 (0: none yet).
    adv_q8: u64,
    /// Where new frames' point buffers come from.
    buffers: PointBuffers,
}

/// Steps per block of the windowed minimum that measures the packet interval.
const INTERVAL_BLOCK: u32 = 32;

fn phased(az: u32, cut: u32) -> u32 {
    (AZIMUTH_UNITS + az % AZIMUTH_UNITS - cut) % AZIMUTH_UNITS
}

impl ScanAssembler {
    /// Creates an assembler. `cut_deg` in [0, 360] (360 ≡ 0) is the frame boundary azimuth,
    /// degrees; `frame_timeout_ns` the host-time silence that closes a frame, ns.
    /// Out-of-range values are clamped (validation happens in [`crate::sensor::SensorConfig`]).
    pub fn new(sensor_id: u16, cut_deg: f64, frame_timeout_ns: u64) -> Self {
        let cut = if cut_deg.is_finite() {
            (cut_deg.clamp(0.0, 360.0) * 100.0).round() as u32
        } else {
            0
        };
        Self {
            sensor_id,
            cut_cdeg: cut % AZIMUTH_UNITS,
            frame_timeout_ns: frame_timeout_ns.max(1),
            sequence: 0,
            cur: Building::default(),
            packets_since_cut: 0,
            prev_first_phased: 0,
            last_host_ns: None,
            last_sensor_ns: None,
            last: None,
            cut_pending: false,
            packet_sensor_ns: 0,
            carry_limit_cdeg: CARRY_LIMIT_CDEG,
            at_cut: false,
            spare_azimuths: Vec::new(),
            time: StreamClock::default(),
            pending_lost_frames: 0,
            dt_min: [u64::MAX; 2],
            dt_count: 0,
            adv_q8: 0,
            buffers: PointBuffers::default(),
        }
    }

    /// Takes new frames' point buffers from `source` from now on (instead of allocating).
    pub fn set_buffer_source(&mut self, source: Arc<dyn BufferSource>) {
        self.buffers = PointBuffers::new(source);
    }

    /// The packet interval in use for the loss estimate, ns: the larger of the nominal one
    /// and the smallest step between consecutive packets over the last 32 to 64 steps. A
    /// stream replayed slower than the sensor sends (every step 2 nominal intervals, as the
    /// bench's multi-sensor replays) then loses nothing on paper; losses only ever lengthen a
    /// step, so the minimum over a window still sees the true interval while any two
    /// consecutive packets arrive.
    fn interval_ns(&self, nominal: u64) -> u64 {
        match self.dt_min[0].min(self.dt_min[1]) {
            u64::MAX => nominal,
            m => m.max(nominal),
        }
    }

    fn note_step(&mut self, dt: u64, daz_cdeg: u32, nominal: u64) {
        if dt == 0 {
            return;
        }
        let interval = self.interval_ns(nominal);
        if dt <= interval + interval / 2 && daz_cdeg > 0 && daz_cdeg < AZIMUTH_UNITS / 8 {
            // A step without loss: a sample of the azimuth advance per packet.
            let a = u64::from(daz_cdeg) << 8;
            self.adv_q8 = if self.adv_q8 == 0 {
                a
            } else {
                self.adv_q8 - self.adv_q8 / 16 + a / 16
            };
        }
        self.dt_min[1] = self.dt_min[1].min(dt);
        self.dt_count += 1;
        if self.dt_count == INTERVAL_BLOCK {
            self.dt_min = [self.dt_min[1], u64::MAX];
            self.dt_count = 0;
        }
    }

    /// Packets needed to turn `cdeg` (0.01°), rounded up, with the measured advance per packet
    /// if any, else `fallback_adv` (0.01°).
    fn packets_for(&self, cdeg: u32, fallback_adv: u32) -> u32 {
        let adv = if self.adv_q8 > 0 {
            self.adv_q8
        } else {
            u64::from(fallback_adv.max(1)) << 8
        };
        (u64::from(cdeg) << 8)
            .div_ceil(adv)
            .min(u64::from(u32::MAX)) as u32
    }

    /// The sensor-time guard (time jumps, restarts, measured rotation period).
    pub fn stream_clock(&self) -> &StreamClock {
        &self.time
    }

    /// Marks the current packet as stamped with host time (the decoder found no valid sensor
    /// time in it): the frame it belongs to gets [`FrameClock::Host`].
    pub fn mark_host_clock(&mut self) {
        self.cur.host_clock = true;
    }

    /// Sets the phased azimuth below which the trailing points of the completing packet move to
    /// the next frame, 0.01° (default [`CARRY_LIMIT_CDEG`], 90°; 0 carries nothing, see the
    /// module docs). Values above 36000 are clamped.
    pub fn set_carry_limit_cdeg(&mut self, limit: u32) {
        self.carry_limit_cdeg = limit.min(AZIMUTH_UNITS);
    }

    /// Number of points in the frame in progress (including points carried over from the cut).
    pub fn points_in_progress(&self) -> usize {
        self.cur.points.len()
    }

    /// Records a packet rejected as malformed against the frame in progress.
    pub fn note_malformed(&mut self) {
        self.cur.malformed = self.cur.malformed.saturating_add(1);
    }

    /// Starts a data packet. May first close the frame in progress (host gap longer than the
    /// timeout, sensor-time gap over one rotation period, sensor restart, overlong frame),
    /// appending it to `out`.
    ///
    /// Returns `false` when the packet's sensor time jumps away from the stream
    /// ([`StreamClock`], [`TimeVerdict::Jump`]): the packet must be dropped (no
    /// [`Self::add_point`] / [`Self::end_packet`] for it) and the frame in progress is
    /// untouched.
    #[must_use = "a packet whose time jumped must be dropped"]
    pub fn begin_packet(&mut self, info: PacketInfo, out: &mut Vec<Frame>) -> bool {
        if let Some(h) = self.last_host_ns
            && info.host_ns.saturating_sub(h) > self.frame_timeout_ns
        {
            self.close_partial(out);
            self.time.note_silence();
        }
        let adv = u64::from(info.advance_cdeg.max(1));
        let nominal = info.interval_ns.saturating_mul(u64::from(AZIMUTH_UNITS)) / adv;
        let first_phased = phased(u32::from(info.first_azimuth_cdeg), self.cut_cdeg);
        match self.time.check(
            info.sensor_ns,
            info.host_ns,
            Some(u32::from(info.first_azimuth_cdeg)),
            nominal,
        ) {
            TimeVerdict::Jump => return false,
            TimeVerdict::Restart => self.close_partial(out),
            TimeVerdict::InLine { gap_ns: Some(gap) } => {
                let from = self.last.map_or(first_phased, |l| {
                    phased(u32::from(l.first_azimuth_cdeg), self.cut_cdeg)
                });
                let period = match self.time.period_ns() {
                    0 => nominal,
                    p => p,
                };
                self.close_partial(out);
                self.pending_lost_frames = self.pending_lost_frames.saturating_add(turns_lost(
                    from,
                    first_phased,
                    gap,
                    period,
                ));
            }
            TimeVerdict::InLine { gap_ns: None } => {}
        }
        if self.cur.open
            && (info.sensor_ns < self.last_sensor_ns.unwrap_or(0)
                || info.sensor_ns.saturating_sub(self.cur.start_ns) > MAX_FRAME_SPAN_NS)
        {
            self.close_partial(out);
        }
        // Loss detection on the sensor clock.
        let interval = self.interval_ns(info.interval_ns);
        if let (Some(prev), Some(l)) = (self.last_sensor_ns, self.last) {
            let daz = phased(
                u32::from(info.first_azimuth_cdeg),
                u32::from(l.first_azimuth_cdeg),
            );
            self.note_step(info.sensor_ns.saturating_sub(prev), daz, info.interval_ns);
        }
        if (self.cur.open || self.at_cut)
            && let Some(prev) = self.last_sensor_ns
            && interval > 0
        {
            let dt = info.sensor_ns.saturating_sub(prev);
            if dt > interval + interval / 2 {
                let missing = (dt + interval / 2) / interval - 1;
                // A sensor that only sends a sector (sensor-side FoV) pauses without losing
                // anything: also bound the estimate by the azimuth turned since the previous
                // packet's last block, in packet advances.
                let az_missing = match self.last {
                    Some(l) => {
                        let gap = phased(
                            u32::from(info.first_azimuth_cdeg),
                            u32::from(l.last_azimuth_cdeg),
                        );
                        let adv = info.advance_cdeg.max(1);
                        u64::from((gap + adv / 2) / adv)
                    }
                    None => missing,
                };
                self.cur.lost = self
                    .cur
                    .lost
                    .saturating_add(missing.min(az_missing).min(u64::from(u32::MAX)) as u32);
            }
        }
        // Nebula's completion test.
        self.packets_since_cut += 1;
        let first = phased(u32::from(info.first_azimuth_cdeg), self.cut_cdeg);
        let last = phased(u32::from(info.last_azimuth_cdeg), self.cut_cdeg);
        self.cut_pending =
            self.packets_since_cut > 1 && (last < first || first < self.prev_first_phased);
        self.prev_first_phased = first;

        if !self.cur.open {
            // A frame that does not begin at a cut: estimate the packets between the cut and us.
            self.cur.open = true;
            self.cur.start_ns = info.sensor_ns;
            self.cur.host_ns = info.host_ns;
            let adv = info.advance_cdeg.max(1);
            if first + adv <= AZIMUTH_UNITS && !self.at_cut {
                let head = self.packets_for(first, adv);
                self.cur.lost = self.cur.lost.saturating_add(head);
            }
        }
        self.at_cut = false;
        self.cur.own_packet = true;
        self.cur.received = self.cur.received.saturating_add(1);
        self.last_host_ns = Some(info.host_ns);
        self.last_sensor_ns = Some(info.sensor_ns);
        self.packet_sensor_ns = info.sensor_ns;
        self.last = Some(info);
        true
    }

    /// Adds one point of the current packet. `offset_ns` is its firing time after the packet's
    /// sensor time; `azimuth_cdeg` its corrected azimuth (0.01°), used for the cut.
    pub fn add_point(&mut self, mut point: PointXYZIRCAEDT, azimuth_cdeg: u16, offset_ns: u32) {
        let t = self
            .packet_sensor_ns
            .saturating_add(u64::from(offset_ns))
            .saturating_sub(self.cur.start_ns);
        point.time_stamp = t.min(u64::from(u32::MAX)) as u32;
        self.cur.points.push(point);
        self.cur.azimuths.push(azimuth_cdeg);
    }

    /// The current frame's buffers, for a decoder that appends many points of the current
    /// packet at once (the Velodyne decoders' [`crate::sensor::velodyne::BlockPoints`]):
    /// points go to `points` with `time_stamp = packet_ns + offset − start_ns` (ns, saturating
    /// at 0 and `u32::MAX`, as [`Self::add_point`]) and their azimuths (0.01°) to `azimuths`,
    /// one per point.
    pub fn batch(&mut self) -> PointBatch<'_> {
        PointBatch {
            points: &mut self.cur.points,
            azimuths: &mut self.cur.azimuths,
            packet_ns: self.packet_sensor_ns,
            start_ns: self.cur.start_ns,
        }
    }

    /// Ends the current packet; if it completed the frame, appends the frame to `out` and
    /// carries the points past the cut into the next frame.
    pub fn end_packet(&mut self, out: &mut Vec<Frame>) {
        if !std::mem::take(&mut self.cut_pending) {
            return;
        }
        let cut = self.cut_cdeg;
        let split = self
            .cur
            .azimuths
            .iter()
            .rposition(|&a| phased(u32::from(a), cut) >= self.carry_limit_cdeg)
            .map_or(0, |i| i + 1);
        let (new_start, new_host) = match self.last {
            Some(i) => (i.sensor_ns, i.host_ns),
            None => (self.cur.start_ns, self.cur.host_ns),
        };
        let mut azimuths = std::mem::take(&mut self.spare_azimuths);
        azimuths.reserve(self.cur.azimuths.len() + self.cur.azimuths.len() / 8);
        let mut next = Building {
            points: self
                .buffers
                .take(self.cur.points.len() + self.cur.points.len() / 8),
            azimuths,
            start_ns: new_start,
            host_ns: new_host,
            open: true,
            own_packet: false,
            received: 1,
            lost: 0,
            malformed: 0,
            host_clock: false,
        };
        let shift = new_start.saturating_sub(self.cur.start_ns);
        next.points
            .extend(self.cur.points.drain(split..).map(|mut p| {
                p.time_stamp = (u64::from(p.time_stamp).saturating_sub(shift)) as u32;
                p
            }));
        next.azimuths.extend(self.cur.azimuths.drain(split..));
        if self.carry_limit_cdeg == 0 {
            // Nothing carried: the next frame opens at its own first packet.
            next.open = false;
            next.received = 0;
            self.at_cut = true;
        }
        let done = std::mem::replace(&mut self.cur, next);
        self.emit(done, 0, out);
        self.packets_since_cut = 0;
    }

    /// Closes the frame in progress if no data packet arrived for more than the frame timeout
    /// of host time before `now_host_ns` (ns). Returns whether a frame was closed or dropped.
    pub fn poll_timeout(&mut self, now_host_ns: u64, out: &mut Vec<Frame>) -> bool {
        match self.last_host_ns {
            Some(h) if now_host_ns.saturating_sub(h) > self.frame_timeout_ns && self.cur.open => {
                self.close_partial(out);
                self.time.note_silence();
                true
            }
            _ => false,
        }
    }

    /// Closes the frame in progress (end of input). A frame with only carried-over points is
    /// dropped.
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        self.close_partial(out);
    }

    fn close_partial(&mut self, out: &mut Vec<Frame>) {
        let cur = std::mem::take(&mut self.cur);
        let hint = cur.points.len();
        if cur.own_packet {
            // Packets still to come between the last packet and the cut.
            let tail = match self.last {
                Some(i) => {
                    let to_cut = (AZIMUTH_UNITS
                        - phased(u32::from(i.first_azimuth_cdeg), self.cut_cdeg))
                        % AZIMUTH_UNITS;
                    self.packets_for(to_cut, i.advance_cdeg).saturating_sub(1)
                }
                None => 0,
            };
            self.emit(cur, tail, out);
            self.cur.points = self.buffers.take(hint);
            self.cur.azimuths = std::mem::take(&mut self.spare_azimuths);
        } else {
            // A dropped carry-only frame: keep its buffers for the next one.
            self.cur.points = cur.points;
            self.cur.points.clear();
            self.cur.azimuths = cur.azimuths;
            self.cur.azimuths.clear();
        }
        self.packets_since_cut = 0;
        self.prev_first_phased = 0;
        self.last_sensor_ns = None;
        self.at_cut = false;
    }

    fn emit(&mut self, b: Building, extra_lost: u32, out: &mut Vec<Frame>) {
        let header = FrameHeader {
            sensor_id: self.sensor_id,
            sequence: self.sequence,
            start_ns: b.start_ns,
            host_ns: b.host_ns,
            packets_received: b.received,
            packets_expected: b.received.saturating_add(b.lost).saturating_add(extra_lost),
            packets_malformed: b.malformed,
            frames_lost_before: std::mem::take(&mut self.pending_lost_frames),
            clock: if b.host_clock {
                FrameClock::Host
            } else {
                FrameClock::Sensor
            },
        };
        self.sequence += 1;
        let mut azimuths = b.azimuths;
        azimuths.clear();
        self.spare_azimuths = azimuths;
        out.push(Frame {
            header,
            points: b.points,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(i: u64, az0: u16) -> PacketInfo {
        PacketInfo {
            host_ns: 1_000_000_000 + i * 1_000_000,
            sensor_ns: 5_000_000_000 + i * 1_000_000,
            first_azimuth_cdeg: az0,
            last_azimuth_cdeg: ((u32::from(az0) + 1100) % AZIMUTH_UNITS) as u16,
            advance_cdeg: 1200,
            interval_ns: 1_000_000,
        }
    }

    /// Feeds packets of 12 points 1° apart starting at `az0` = 12°·i + `phase`.
    fn feed(a: &mut ScanAssembler, from: u64, to: u64, phase: u32, out: &mut Vec<Frame>) {
        for i in from..to {
            let az0 = ((i as u32 * 1200 + phase) % AZIMUTH_UNITS) as u16;
            if !a.begin_packet(info(i, az0), out) {
                continue;
            }
            for k in 0..12u32 {
                let az = ((u32::from(az0) + 100 * k) % AZIMUTH_UNITS) as u16;
                a.add_point(
                    PointXYZIRCAEDT {
                        azimuth: f32::from(az),
                        ..Default::default()
                    },
                    az,
                    k * 1000,
                );
            }
            a.end_packet(out);
        }
    }

    #[test]
    fn cut_inside_packet_splits_at_point_granularity() {
        let mut a = ScanAssembler::new(7, 0.0, 200_000_000);
        let mut out = Vec::new();
        // Packets start at 6°, 18°, ... : packet 29 covers 354°..365°(=5°) and holds the cut.
        feed(&mut a, 0, 29, 600, &mut out);
        assert!(out.is_empty());
        feed(&mut a, 29, 30, 600, &mut out);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        // 29 packets × 12 points + the 6 points of packet 29 before 360°.
        assert_eq!(f.points.len(), 29 * 12 + 6);
        assert_eq!(f.points.last().unwrap().azimuth, 35900.0);
        assert_eq!(f.header.sensor_id, 7);
        assert_eq!(f.header.packets_received, 30);
        // First frame began 6° after the cut: one packet (354°..6°) missing.
        assert_eq!(f.header.packets_expected, 31);
        assert_eq!(a.points_in_progress(), 6);
        // Next frame: starts at packet 29's time with the carried points rebased.
        feed(&mut a, 30, 60, 600, &mut out);
        assert_eq!(out.len(), 2);
        let g = &out[1];
        assert_eq!(g.header.sequence, 1);
        assert_eq!(g.header.start_ns, 5_000_000_000 + 29 * 1_000_000);
        assert_eq!(g.points[0].azimuth, 0.0);
        assert_eq!(g.points[0].time_stamp, 6000);
        assert_eq!(g.points.len(), 360);
        assert_eq!(
            (g.header.packets_received, g.header.packets_expected),
            (31, 31)
        );
    }

    #[test]
    fn cut_between_packets_moves_whole_packet() {
        let mut a = ScanAssembler::new(0, 0.0, 200_000_000);
        let mut out = Vec::new();
        // Packets start at 0°, 12°, ...: packet 30 starts exactly at 360°.
        feed(&mut a, 0, 31, 0, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].points.len(), 360);
        assert_eq!(
            (
                out[0].header.packets_received,
                out[0].header.packets_expected
            ),
            (31, 31)
        );
        assert_eq!(a.points_in_progress(), 12);
    }

    #[test]
    fn lost_packets_and_timeouts() {
        let mut a = ScanAssembler::new(0, 90.0, 200_000_000);
        let mut out = Vec::new();
        feed(&mut a, 0, 10, 9000, &mut out);
        feed(&mut a, 12, 20, 9000, &mut out); // packets 10, 11 lost
        assert!(!a.poll_timeout(1_000_000_000 + 19 * 1_000_000 + 200_000_000, &mut out));
        assert!(a.poll_timeout(1_000_000_000 + 19 * 1_000_000 + 200_000_001, &mut out));
        assert_eq!(out.len(), 1);
        let h = out[0].header;
        // 18 received, 2 lost inside, 30 - 20 = 10 still to come before the cut at 90°.
        assert_eq!((h.packets_received, h.packets_expected), (18, 30));
        assert!(!a.poll_timeout(u64::MAX, &mut out));
        a.flush(&mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn carry_only_frame_is_dropped_on_flush() {
        let mut a = ScanAssembler::new(0, 0.0, 200_000_000);
        let mut out = Vec::new();
        feed(&mut a, 0, 30, 600, &mut out);
        assert_eq!((out.len(), a.points_in_progress()), (1, 6));
        a.flush(&mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn stream_clock_ignores_steps_too_slow_to_be_rotation() {
        // Packets a week apart (host time too) with a 45° step, as in a damaged or stitched
        // capture with no nominal period: no rotation sample, no overflow, period unknown.
        let mut c = StreamClock::default();
        let week = 7 * 86_400 * 1_000_000_000u64;
        let inline = TimeVerdict::InLine { gap_ns: None };
        for i in 0..12u64 {
            let az = Some((i as u32 * 4_500) % AZIMUTH_UNITS);
            assert_eq!(c.check(i * week, i * week, az, 0), inline, "{i}");
        }
        assert_eq!((c.period_ns(), c.step_cdeg()), (0, 0));
        assert_eq!(period_from(u64::MAX, 1), u64::MAX);
        assert_eq!(period_from(100_000_000, 36_000), 100_000_000);
    }

    #[test]
    fn stream_clock_jumps_restarts_and_gaps() {
        let mut c = StreamClock::default();
        let t = |i: u64| 5_000_000_000 + i * 1_000_000;
        let h = |i: u64| 1_000_000_000 + i * 1_000_000;
        let az = |i: u64| Some((i as u32 * 100) % AZIMUTH_UNITS);
        let inline = TimeVerdict::InLine { gap_ns: None };
        for i in 0..400 {
            assert_eq!(c.check(t(i), h(i), az(i), 0), inline, "{i}");
        }
        // 1° per ms: 360 ms per turn, measured.
        assert_eq!(c.period_ns(), 360_000_000);
        assert_eq!(c.step_cdeg(), 100);
        // Backwards by 1 ms, ahead by 101 ms more than the host: jumps; the stream goes on.
        assert_eq!(c.check(t(398), h(400), az(400), 0), TimeVerdict::Jump);
        assert_eq!(c.check(t(501), h(400), az(400), 0), TimeVerdict::Jump);
        assert_eq!(c.check(t(400), h(400), az(400), 0), inline);
        // Ahead by exactly the tolerance: in line.
        assert_eq!(c.check(t(501), h(401), az(501), 0), inline);
        // A gap of 1.2 periods (host time too): in line, reported.
        assert_eq!(
            c.check(t(933), h(833), az(933), 0),
            TimeVerdict::InLine {
                gap_ns: Some(432_000_000)
            }
        );
        // A sustained step of +1 h: jumps, then a restart at the RESTART_AGREE-th packet.
        let hour = 3_600_000_000_000;
        for k in 0..u64::from(RESTART_AGREE) {
            let v = c.check(t(934 + k) + hour, h(834 + k), az(934 + k), 0);
            let want = if k + 1 == u64::from(RESTART_AGREE) {
                TimeVerdict::Restart
            } else {
                TimeVerdict::Jump
            };
            assert_eq!(v, want, "{k}");
        }
        assert_eq!((c.jumps(), c.restarts()), (u64::from(RESTART_AGREE) + 1, 1));
        assert_eq!(c.check(t(937) + hour, h(837), az(937), 0), inline);
    }

    #[test]
    fn turns_lost_counts_whole_frames_in_a_gap() {
        let turn = 100_000_000;
        // From 90° to 180°, 1.25 turns: one cut passed, nothing lost whole.
        assert_eq!(turns_lost(9_000, 18_000, turn + turn / 4, turn), 0);
        // From 270° to 90°, 1.5 turns: two cuts, one frame lost whole.
        assert_eq!(turns_lost(27_000, 9_000, turn + turn / 2, turn), 1);
        // From 90° to 90°, 3 turns (the time estimate 5 % off): 3 cuts, 2 frames lost.
        assert_eq!(turns_lost(9_000, 9_000, 3 * turn + turn / 20, turn), 2);
        assert_eq!(turns_lost(9_000, 9_000, 3 * turn - turn / 20, turn), 2);
        assert_eq!(turns_lost(9_000, 9_000, 3 * turn, 0), 0);
    }

    #[test]
    fn host_gap_closes_before_the_next_packet() {
        let mut a = ScanAssembler::new(0, 0.0, 5_000_000);
        let mut out = Vec::new();
        feed(&mut a, 0, 3, 600, &mut out);
        feed(&mut a, 10, 12, 600, &mut out); // 7 ms host gap
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].points.len(), 36);
        a.flush(&mut out);
        assert_eq!(out[1].points.len(), 24);
        assert_eq!(out[1].header.sequence, 1);
    }
}
