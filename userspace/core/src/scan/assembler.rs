//! The block-azimuth cut policy of Velodyne and RoboSense: [`ScanAssembler`] (rules in the
//! [`super`] module documentation).
#![forbid(unsafe_code)]

use std::sync::Arc;

use super::{
    AZIMUTH_JITTER_CDEG, AZIMUTH_UNITS, BufferSource, CARRY_LIMIT_CDEG, Fov, FrameAccount,
    FrameBuilder, MAX_FRAME_SPAN_NS, PacketSequence, Rejection, StreamClock, TimeVerdict,
    turns_lost,
};
use crate::HostTime;
use crate::frame::Frame;
use crate::layout::{PointType, TimeField};
use crate::point::PointXYZIRCAEDT;
use crate::point_buf::PointBuf;
use crate::valid::{Degrees, FrameTimeout};

/// What the assembler needs to know about one data packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacketInfo {
    /// Host receive time on both clocks (offline the pcap record time): intervals on
    /// [`HostTime::mono_ns`], the frame's published `host_ns` from [`HostTime::wall_ns`].
    pub host: HostTime,
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
    /// The packet's sequence counter where the vendor has one (RoboSense Helios: the MSOP
    /// packet counter), else `None`: between two numbered packets the packets lost are its
    /// gap, not the time estimate ([`PacketSequence`]).
    pub sequence: Option<u32>,
}

/// Frame being built.
#[derive(Clone, Debug, Default)]
struct Building {
    points: PointBuf,
    azimuths: Vec<u16>,
    /// Each point's `time_stamp`, ns after the frame start, for a layout that keeps none or
    /// keeps it inexactly (f32 or absolute f64 seconds): the carry across a cut moves
    /// them exactly. Empty for `autoware` and `ouster` (u32 ns in the point).
    times: Vec<u32>,
    /// Start, host time and packet counts (see [`FrameAccount`]).
    acct: FrameAccount,
    /// A start time is set (a packet or a carry has opened the frame).
    open: bool,
    /// At least one packet after the cut has been decoded into this frame.
    own_packet: bool,
    /// The frame did not begin at a cut: the arc from the cut to its first packet, 0.01°,
    /// and the advance per packet then, 0.01°/256. Counted when the frame is emitted (by
    /// then the sector the sensor sends may be known, [`PacketSequence::arc_sent`]).
    head: Option<(u32, u64)>,
}

/// The frame buffers [`ScanAssembler::batch`] lends to a decoder; the two vectors must grow
/// together (one azimuth per point).
#[derive(Debug)]
pub struct PointBatch<'a> {
    /// Points of the frame in progress.
    pub points: &'a mut PointBuf,
    /// Corrected azimuth of each point, 0.01°.
    pub azimuths: &'a mut Vec<u16>,
    /// Each point's `time_stamp`, when the layout needs them kept beside the points (one per
    /// point then).
    pub times: Option<&'a mut Vec<u32>>,
    /// Sensor time of the current packet, ns.
    pub packet_ns: u64,
    /// Start time of the frame in progress, ns.
    pub start_ns: u64,
}

/// The block-azimuth cut policy (Velodyne, RoboSense) over the sensor's [`FrameBuilder`]. See
/// the module documentation for the rules.
#[derive(Clone, Debug)]
pub struct ScanAssembler {
    cut_cdeg: u32,
    /// The configured field of view: the head and tail estimates count only its packets.
    fov: Option<Fov>,
    /// The last packet meets the field of view (it counts as received).
    last_in_view: bool,
    builder: FrameBuilder,
    cur: Building,
    /// The current packet arrived late ([`TimeVerdict::Late`]) into the frame in progress: it
    /// never completes the frame.
    late: bool,
    /// Packets since the last cut (Nebula `processed_packets_`).
    packets_since_cut: u32,
    prev_first_phased: u32,
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
    /// Time table of the last emitted frame, reused likewise.
    spare_times: Vec<u32>,
    /// The layout needs the points' times kept beside them ([`Building::times`]).
    keep_times: bool,
    /// Smallest sensor-time step between consecutive packets in the current / previous block
    /// of [`INTERVAL_BLOCK`] steps, ns (`u64::MAX`: none yet).
    dt_min: [u64; 2],
    dt_count: u32,
    /// Measured azimuth advance between consecutive packets, 0.01°/256 (0: none yet).
    adv_q8: u64,
    /// [`StreamClock::speed_changes`] when `adv_q8` was last sampled: a new speed restarts
    /// the average (the old speed's advance is no estimate of the new one).
    speed_changes: u64,
    /// The packets' sequence counter (vendors that have one).
    seq: PacketSequence,
}

/// Steps per block of the windowed minimum that measures the packet interval.
const INTERVAL_BLOCK: u32 = 32;

fn phased(az: u32, cut: u32) -> u32 {
    (AZIMUTH_UNITS + az % AZIMUTH_UNITS - cut) % AZIMUTH_UNITS
}

/// Packets needed to turn `cdeg` (0.01°) at `adv_q8` (0.01°/256, > 0) per packet, rounded up.
fn packets_for_q8(cdeg: u32, adv_q8: u64) -> u32 {
    (u64::from(cdeg) << 8)
        .div_ceil(adv_q8.max(1))
        .min(u64::from(u32::MAX)) as u32
}

impl ScanAssembler {
    /// Creates an assembler: `cut` is the frame boundary azimuth (360° ≡ 0), rounded to 0.01°;
    /// `frame_timeout` the host-time silence that closes a frame.
    pub fn new(sensor_id: u16, cut: Degrees, frame_timeout: FrameTimeout) -> Self {
        Self {
            cut_cdeg: cut.cdeg(),
            fov: None,
            last_in_view: true,
            builder: FrameBuilder::new(sensor_id, frame_timeout.ns()),
            cur: Building::default(),
            late: false,
            packets_since_cut: 0,
            prev_first_phased: 0,
            last_sensor_ns: None,
            last: None,
            cut_pending: false,
            packet_sensor_ns: 0,
            carry_limit_cdeg: CARRY_LIMIT_CDEG,
            at_cut: false,
            spare_azimuths: Vec::new(),
            spare_times: Vec::new(),
            keep_times: false,
            dt_min: [u64::MAX; 2],
            dt_count: 0,
            adv_q8: 0,
            speed_changes: 0,
            seq: PacketSequence::default(),
        }
    }

    /// Counts, in the packets estimated lost between the cut and a frame's first packet (or
    /// its last packet and the cut), only those inside `fov`: a sensor whose own field of view
    /// is `fov` sends nothing outside it, so a frame that opened mid-turn expects only the
    /// packets the field of view holds (issue 23, class 5).
    pub fn set_fov(&mut self, fov: Option<Fov>) {
        self.fov = fov;
    }

    /// Takes new frames' point buffers from `source` from now on (instead of allocating),
    /// the frame in progress's too while it holds no point.
    pub fn set_buffer_source(&mut self, source: Arc<dyn BufferSource>) {
        self.builder.set_buffer_source(source);
        self.builder.renew_if_empty(&mut self.cur.points);
    }

    /// Writes the points in layout `point_type` from the next frame on (the frame in progress
    /// too while it holds no point).
    pub fn set_point_type(&mut self, point_type: PointType) {
        self.builder.set_point_type(point_type);
        self.keep_times = !matches!(point_type.time(), TimeField::RelativeNs);
        self.builder.renew_if_empty(&mut self.cur.points);
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

    /// Samples the step `dt` (ns) / `daz_cdeg` (0.01°) from the previous packet (nominal
    /// interval `prev_nominal`, ns) to this one (`nominal`) into the measured interval and
    /// advance. A changed nominal interval is a new return mode (a VLP-16 single-return
    /// packet spans twice a dual-return one's firings, time and azimuth): both measurements
    /// restart, and the step across the switch, half in each mode, is no sample of either.
    fn note_step(&mut self, dt: u64, daz_cdeg: u32, nominal: u64, prev_nominal: u64) {
        if nominal != prev_nominal {
            self.adv_q8 = 0;
            self.dt_min = [u64::MAX; 2];
            self.dt_count = 0;
            return;
        }
        if dt == 0 {
            return;
        }
        let interval = self.interval_ns(nominal);
        let changes = self.builder.clock().speed_changes();
        if changes != self.speed_changes {
            // The sensor's speed changed (the clock's rule): restart the average.
            self.speed_changes = changes;
            self.adv_q8 = 0;
        }
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

    /// The advance per packet, 0.01°/256: the measured one if any, else `fallback_adv`
    /// (0.01°).
    fn adv_q8(&self, fallback_adv: u32) -> u64 {
        if self.adv_q8 > 0 {
            self.adv_q8
        } else {
            u64::from(fallback_adv.max(1)) << 8
        }
    }

    /// Packets needed to turn `cdeg` (0.01°), rounded up, with the measured advance per packet
    /// if any, else `fallback_adv` (0.01°).
    fn packets_for(&self, cdeg: u32, fallback_adv: u32) -> u32 {
        packets_for_q8(cdeg, self.adv_q8(fallback_adv))
    }

    /// The sensor-time guard (time jumps, restarts, measured rotation period).
    pub fn stream_clock(&self) -> &StreamClock {
        self.builder.clock()
    }

    /// Marks the current packet as stamped with host time (the decoder found no valid sensor
    /// time in it): the frame it belongs to gets [`crate::frame::FrameClock::Host`].
    pub fn mark_host_clock(&mut self) {
        self.cur.acct.host_clock = true;
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
        self.cur.acct.malformed = self.cur.acct.malformed.saturating_add(1);
    }

    /// Starts a data packet. May first close the frame in progress (a silence before it,
    /// [`FrameBuilder::silence_before`]; a sensor-time gap over one rotation period; an overlong
    /// frame), appending it to `out`.
    ///
    /// # Errors
    /// The packet must then be dropped (no [`Self::add_point`] / [`Self::end_packet`] for it):
    /// * [`Rejection::TimeJump`]: its sensor time jumps away from the stream ([`StreamClock`],
    ///   [`TimeVerdict::Jump`]); the frame in progress is untouched;
    /// * [`Rejection::Restart`]: it confirms a sensor restart; the frame in progress was
    ///   closed, and the held candidates and then this packet must be pushed again;
    /// * [`Rejection::ClockStep`]: it confirms a clock step ([`TimeVerdict::Step`]); the
    ///   frame in progress goes on, and the held candidates and then this packet must be
    ///   pushed again (they are then mapped onto the stream's time line);
    /// * [`Rejection::Late`]: it arrived late ([`TimeVerdict::Late`]) but its frame is
    ///   already published.
    ///
    /// A late packet of the frame in progress is `Ok`: its points join the frame, it counts as
    /// received and takes back one packet counted lost, and it never completes the frame.
    pub fn begin_packet(
        &mut self,
        info: PacketInfo,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        if self
            .builder
            .silence_before(info.host.mono_ns, Some(info.sensor_ns))
        {
            self.close_partial(out);
            self.builder.clock_mut().note_silence();
        }
        let adv = u64::from(info.advance_cdeg.max(1));
        let nominal = info.interval_ns.saturating_mul(u64::from(AZIMUTH_UNITS)) / adv;
        let first_phased = phased(u32::from(info.first_azimuth_cdeg), self.cut_cdeg);
        let verdict = self.builder.clock_mut().check(
            info.sensor_ns,
            info.host.mono_ns,
            Some(u32::from(info.first_azimuth_cdeg)),
            nominal,
        );
        // From here on the packet is judged and stamped in stream time: across a clock step
        // the turn runs on (TimeVerdict::Step).
        let info = PacketInfo {
            sensor_ns: self.builder.clock().stream_ns(info.sensor_ns),
            ..info
        };
        match verdict {
            TimeVerdict::Jump => return Err(Rejection::TimeJump),
            TimeVerdict::Step => return Err(Rejection::ClockStep),
            TimeVerdict::Restart => {
                self.close_partial(out);
                return Err(Rejection::Restart);
            }
            TimeVerdict::Late => {
                // In the frame in progress if it is not older than the frame's start (the
                // completing packet of the previous cut).
                if !self.cur.own_packet || info.sensor_ns < self.cur.acct.start_ns {
                    return Err(Rejection::Late);
                }
                self.cur.acct.found_late();
                self.packet_sensor_ns = info.sensor_ns;
                self.cur.points.set_packet_ns(info.sensor_ns);
                self.late = true;
                return Ok(());
            }
            TimeVerdict::InLine { gap_ns: Some(gap) } => {
                let from = self.last.map_or(first_phased, |l| {
                    phased(u32::from(l.first_azimuth_cdeg), self.cut_cdeg)
                });
                let period = match self.builder.clock().period_ns() {
                    0 => nominal,
                    p => p,
                };
                self.close_partial(out);
                self.builder
                    .lose_frames(turns_lost(from, first_phased, gap, period));
            }
            TimeVerdict::InLine { gap_ns: None } => {}
        }
        if self.cur.open
            && (info.sensor_ns < self.last_sensor_ns.unwrap_or(0)
                || info.sensor_ns.saturating_sub(self.cur.acct.start_ns) > MAX_FRAME_SPAN_NS)
        {
            self.close_partial(out);
        }
        // Under a field of view only the packets that meet it count (received, lost).
        let span = phased(
            u32::from(info.last_azimuth_cdeg),
            u32::from(info.first_azimuth_cdeg),
        );
        let in_view = self
            .fov
            .is_none_or(|f| f.arc_inside(u32::from(info.first_azimuth_cdeg), span + 1) > 0);
        // Packets lost since the previous packet: exactly the sequence gap where the vendor
        // numbers its packets, else estimated on the sensor clock.
        let seq_gap = info.sequence.and_then(|s| {
            let az = (
                u32::from(info.first_azimuth_cdeg),
                u32::from(info.last_azimuth_cdeg),
            );
            self.seq.step(s, Some(az), info.advance_cdeg)
        });
        if let Some(gap) = seq_gap {
            self.cur.acct.lost = self.cur.acct.lost.saturating_add(gap);
        }
        let interval = self.interval_ns(info.interval_ns);
        if let (Some(prev), Some(l)) = (self.last_sensor_ns, self.last) {
            let daz = phased(
                u32::from(info.first_azimuth_cdeg),
                u32::from(l.first_azimuth_cdeg),
            );
            self.note_step(
                info.sensor_ns.saturating_sub(prev),
                daz,
                info.interval_ns,
                l.interval_ns,
            );
        }
        if (self.cur.open || self.at_cut)
            && seq_gap.is_none()
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
                        let gap = self
                            .seq
                            .arc_sent(self.fov, u32::from(l.last_azimuth_cdeg), gap);
                        let adv = info.advance_cdeg.max(1);
                        u64::from((gap + adv / 2) / adv)
                    }
                    None => missing,
                };
                self.cur.acct.lost = self
                    .cur
                    .acct
                    .lost
                    .saturating_add(missing.min(az_missing).min(u64::from(u32::MAX)) as u32);
            }
        }
        // Nebula's completion test, except that a step back of at most AZIMUTH_JITTER_CDEG
        // (encoder jitter) is no new turn: such a packet never completes the frame, and the
        // furthest azimuth reached stays the reference.
        self.packets_since_cut += 1;
        let first = phased(u32::from(info.first_azimuth_cdeg), self.cut_cdeg);
        let last = phased(u32::from(info.last_azimuth_cdeg), self.cut_cdeg);
        let back = (AZIMUTH_UNITS + self.prev_first_phased - first) % AZIMUTH_UNITS;
        let jitter = self.packets_since_cut > 1 && back > 0 && back <= AZIMUTH_JITTER_CDEG;
        self.cut_pending = self.packets_since_cut > 1
            && !jitter
            && ((last < first && first - last > AZIMUTH_JITTER_CDEG)
                || first < self.prev_first_phased);
        if !jitter {
            self.prev_first_phased = first;
        }

        if !self.cur.open {
            // A frame that does not begin at a cut: estimate the packets between the cut and us.
            self.cur.open = true;
            self.cur.acct.start_ns = info.sensor_ns;
            self.cur.acct.shift_ns = self.builder.clock().shift_ns();
            self.cur.points.set_start_ns(info.sensor_ns);
            self.cur.acct.host_ns = info.host.wall_ns;
            let adv = info.advance_cdeg.max(1);
            if first + adv <= AZIMUTH_UNITS && !self.at_cut {
                self.cur.head = Some((first, self.adv_q8(adv)));
            }
        }
        self.at_cut = false;
        self.cur.own_packet = true;
        self.cur.acct.received = self.cur.acct.received.saturating_add(u32::from(in_view));
        self.last_in_view = in_view;
        self.last_sensor_ns = Some(info.sensor_ns);
        self.packet_sensor_ns = info.sensor_ns;
        self.cur.points.set_packet_ns(info.sensor_ns);
        self.last = Some(info);
        Ok(())
    }

    /// Adds one point of the current packet. `offset_ns` is its firing time after the packet's
    /// sensor time; `azimuth_cdeg` its corrected azimuth (0.01°), used for the cut.
    pub fn add_point(&mut self, mut point: PointXYZIRCAEDT, azimuth_cdeg: u16, offset_ns: u32) {
        let t = self
            .packet_sensor_ns
            .saturating_add(u64::from(offset_ns))
            .saturating_sub(self.cur.acct.start_ns);
        point.time_stamp = t.min(u64::from(u32::MAX)) as u32;
        self.cur.points.push(point);
        self.cur.azimuths.push(azimuth_cdeg);
        if self.keep_times {
            self.cur.times.push(point.time_stamp);
        }
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
            times: self.keep_times.then_some(&mut self.cur.times),
            packet_ns: self.packet_sensor_ns,
            start_ns: self.cur.acct.start_ns,
        }
    }

    /// Ends the current packet; if it completed the frame, appends the frame to `out` and
    /// carries the points past the cut into the next frame.
    pub fn end_packet(&mut self, out: &mut Vec<Frame>) {
        if std::mem::take(&mut self.late) || !std::mem::take(&mut self.cut_pending) {
            return;
        }
        let cut = self.cut_cdeg;
        let split = self
            .cur
            .azimuths
            .iter()
            .rposition(|&a| phased(u32::from(a), cut) >= self.carry_limit_cdeg)
            .map_or(0, |i| i + 1);
        let (packet_start, new_host) = match self.last {
            Some(i) => (i.sensor_ns, i.host.wall_ns),
            None => (self.cur.acct.start_ns, self.cur.acct.host_ns),
        };
        // The next frame starts at the completing packet, or at its earliest carried firing if
        // that is earlier: the previous packet's last firings can be interpolated past the cut
        // (a VLP-16 dual-return packet's last sequence, from its block azimuth plus the advance),
        // and a point's `time_stamp` cannot be negative.
        let start = self.cur.acct.start_ns;
        let new_start = if self.keep_times {
            self.cur.times[split.min(self.cur.times.len())..]
                .iter()
                .map(|&t| start + u64::from(t))
                .fold(packet_start, u64::min)
        } else {
            (split..self.cur.points.len())
                .filter_map(|i| self.cur.points.time_ns(i))
                .map(|t| start + t)
                .fold(packet_start, u64::min)
        };
        let mut azimuths = std::mem::take(&mut self.spare_azimuths);
        azimuths.reserve(self.cur.azimuths.len() + self.cur.azimuths.len() / 8);
        let mut times = std::mem::take(&mut self.spare_times);
        if self.keep_times {
            times.reserve(self.cur.times.len() + self.cur.times.len() / 8);
        }
        let mut next = Building {
            points: self
                .builder
                .take_points(self.cur.points.len() + self.cur.points.len() / 8),
            azimuths,
            times,
            acct: FrameAccount {
                received: u32::from(self.last_in_view),
                ..self.builder.open_account(new_start, new_host)
            },
            open: true,
            own_packet: false,
            head: None,
        };
        let shift = new_start.saturating_sub(self.cur.acct.start_ns);
        next.points.set_start_ns(new_start);
        let carried = self
            .keep_times
            .then(|| &self.cur.times[split.min(self.cur.times.len())..]);
        self.cur.points.move_tail(split, &mut next.points, carried);
        if self.keep_times {
            let tail = self.cur.times.drain(split.min(self.cur.times.len())..);
            next.times
                .extend(tail.map(|t| (u64::from(t).saturating_sub(shift)) as u32));
        }
        next.azimuths.extend(self.cur.azimuths.drain(split..));
        if self.carry_limit_cdeg == 0 {
            // Nothing carried: the next frame opens at its own first packet.
            next.open = false;
            next.acct.received = 0;
            self.at_cut = true;
        }
        let done = std::mem::replace(&mut self.cur, next);
        self.emit(done, 0, out);
        self.packets_since_cut = 0;
    }

    /// Closes the frame in progress if no data packet arrived for more than the frame timeout
    /// of host monotonic time before `now_mono_ns` (CLOCK_MONOTONIC, ns). Returns whether a
    /// frame was closed or dropped.
    pub fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) -> bool {
        if self.cur.open && self.builder.silent_at(now_mono_ns) {
            self.close_partial(out);
            self.builder.clock_mut().note_silence();
            true
        } else {
            false
        }
    }

    /// A frame is in progress (a packet or a carry opened it).
    pub fn in_progress(&self) -> bool {
        self.cur.open
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
                    let to_cut =
                        self.seq
                            .arc_sent(self.fov, u32::from(i.first_azimuth_cdeg), to_cut);
                    self.packets_for(to_cut, i.advance_cdeg).saturating_sub(1)
                }
                None => 0,
            };
            self.emit(cur, tail, out);
            self.cur.points = self.builder.take_points(hint);
            self.cur.azimuths = std::mem::take(&mut self.spare_azimuths);
            self.cur.times = std::mem::take(&mut self.spare_times);
        } else {
            // A dropped carry-only frame: keep its buffers for the next one.
            self.cur.points = cur.points;
            self.cur.points.clear();
            self.cur.azimuths = cur.azimuths;
            self.cur.azimuths.clear();
            self.cur.times = cur.times;
            self.cur.times.clear();
        }
        self.packets_since_cut = 0;
        self.prev_first_phased = 0;
        self.last_sensor_ns = None;
        self.at_cut = false;
        self.seq.forget();
    }

    fn emit(&mut self, b: Building, extra_lost: u32, out: &mut Vec<Frame>) {
        // Packets between the cut and the first packet of a frame that did not begin at one.
        let head = b.head.map_or(0, |(arc, adv_q8)| {
            packets_for_q8(self.seq.arc_sent(self.fov, self.cut_cdeg, arc), adv_q8)
        });
        let extra_lost = extra_lost.saturating_add(head);
        let mut azimuths = b.azimuths;
        azimuths.clear();
        self.spare_azimuths = azimuths;
        let mut times = b.times;
        times.clear();
        self.spare_times = times;
        self.builder.emit(&b.acct, extra_lost, b.points, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deg(v: f64) -> Degrees {
        Degrees::new(v).unwrap()
    }

    fn timeout(ns: u64) -> FrameTimeout {
        FrameTimeout::from_ns(ns).unwrap()
    }

    fn info(i: u64, az0: u16) -> PacketInfo {
        PacketInfo {
            host: HostTime::both(1_000_000_000 + i * 1_000_000),
            sensor_ns: 5_000_000_000 + i * 1_000_000,
            first_azimuth_cdeg: az0,
            last_azimuth_cdeg: ((u32::from(az0) + 1100) % AZIMUTH_UNITS) as u16,
            advance_cdeg: 1200,
            interval_ns: 1_000_000,
            sequence: None,
        }
    }

    /// Feeds packets of 12 points 1° apart starting at `az0` = 12°·i + `phase`.
    fn feed(a: &mut ScanAssembler, from: u64, to: u64, phase: u32, out: &mut Vec<Frame>) {
        for i in from..to {
            let az0 = ((i as u32 * 1200 + phase) % AZIMUTH_UNITS) as u16;
            if a.begin_packet(info(i, az0), out).is_err() {
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
        let mut a = ScanAssembler::new(7, deg(0.0), timeout(200_000_000));
        let mut out = Vec::new();
        // Packets start at 6°, 18°, ... : packet 29 covers 354°..365°(=5°) and holds the cut.
        feed(&mut a, 0, 29, 600, &mut out);
        assert!(out.is_empty());
        feed(&mut a, 29, 30, 600, &mut out);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        // 29 packets × 12 points + the 6 points of packet 29 before 360°.
        assert_eq!(f.points.len(), 29 * 12 + 6);
        assert_eq!(f.points.autoware().last().unwrap().azimuth, 35900.0);
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
        assert_eq!(g.points.autoware()[0].azimuth, 0.0);
        assert_eq!(g.points.autoware()[0].time_stamp, 6000);
        assert_eq!(g.points.len(), 360);
        assert_eq!(
            (g.header.packets_received, g.header.packets_expected),
            (31, 31)
        );
    }

    #[test]
    fn cut_between_packets_moves_whole_packet() {
        let mut a = ScanAssembler::new(0, deg(0.0), timeout(200_000_000));
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
        let mut a = ScanAssembler::new(0, deg(90.0), timeout(200_000_000));
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
        let mut a = ScanAssembler::new(0, deg(0.0), timeout(200_000_000));
        let mut out = Vec::new();
        feed(&mut a, 0, 30, 600, &mut out);
        assert_eq!((out.len(), a.points_in_progress()), (1, 6));
        a.flush(&mut out);
        assert_eq!(out.len(), 1);
    }

    /// A return-mode switch (issue 39, class 3): packets of half the interval and half the
    /// advance (dual return), then of the full ones (single return). The measured advance
    /// restarts at the switch, so the tail estimate of a frame closed early uses the new
    /// mode's advance only.
    #[test]
    fn return_mode_switch_restarts_the_measured_advance() {
        let mut a = ScanAssembler::new(0, deg(0.0), timeout(200_000_000));
        let mut out = Vec::new();
        let (mut ns, mut az) = (5_000_000_000u64, 300u32);
        // 40 packets of 6° (0.5 ms), then 8 of 12° (1 ms): 3°..339°, no cut.
        for (n, adv, interval) in [(40, 600u32, 500_000u64), (8, 1200, 1_000_000)] {
            for _ in 0..n {
                let info = PacketInfo {
                    host: HostTime::both(ns - 4_000_000_000),
                    sensor_ns: ns,
                    first_azimuth_cdeg: az as u16,
                    last_azimuth_cdeg: (az + adv - 100) as u16,
                    advance_cdeg: adv,
                    interval_ns: interval,
                    sequence: None,
                };
                a.begin_packet(info, &mut out).unwrap();
                a.end_packet(&mut out);
                ns += interval;
                az += adv;
            }
        }
        a.flush(&mut out);
        let h = out[0].header;
        // 48 received; 1 packet (of the first 6°) before 3°; from the last packet at 327° to
        // the cut 33° in packets of 12°: 3 with that one, 2 to come. Before the restart the
        // 6° advance lingered in the mean (under 8.25° after 8 samples): 5 with it, 4 to
        // come, (48, 53).
        assert_eq!((h.packets_received, h.packets_expected), (48, 51));
    }

    #[test]
    fn host_gap_closes_before_the_next_packet() {
        let mut a = ScanAssembler::new(0, deg(0.0), timeout(5_000_000));
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
