//! The one frame builder every vendor's cut policy drives: frame sequence, loss accounting,
//! time base and timeout, point buffers from the pool, and the one place a [`FrameHeader`] is
//! filled in. Sans-IO.
//!
//! A vendor module owns a *cut policy* (Velodyne and RoboSense: [`super::ScanAssembler`],
//! the block-azimuth cut; Hesai: its per-channel cutter; Ouster: the sensor's `frame_id`) that
//! decides when a turn opens and ends and which points it holds. It keeps one [`FrameAccount`]
//! per frame in progress and hands it to [`FrameBuilder::emit`] when the frame ends. So:
//! * `sequence` starts at 0 and grows by one per emitted frame, whatever the policy, across
//!   a calibration reload ([`crate::sensor::ScanPipeline::reload`]) too;
//! * `packets_expected = packets_received + lost`, where `lost` is what the policy estimated
//!   (sequence gaps, time gaps, the azimuth between the cut and a frame's first or last packet);
//! * `frames_lost_before` is what [`FrameBuilder::lose_frames`] collected since the previous
//!   emitted frame, plus the policy's own count ([`FrameAccount::lost_before`]);
//! * `clock` is [`FrameClock::Host`] when any packet of the frame was stamped with host time;
//! * the next frame's point buffer comes from the pool ([`FrameBuilder::take_points`]).
//!
//! ## Timeouts ([`FrameBuilder::silence_before`], [`FrameBuilder::silent_at`])
//! A frame in progress is closed by a *silence*: no data packet for `frame_timeout_ns`.
//! Host time here is always CLOCK_MONOTONIC ([`crate::HostTime::mono_ns`]): a step of the wall
//! clock neither closes a frame nor keeps one open.
//! * Polled with no packet ([`FrameBuilder::silent_at`], the capture thread's idle wake-up):
//!   host time since the last packet over the timeout is a silence.
//! * Noticed when the next packet arrives ([`FrameBuilder::silence_before`]): only if the
//!   *sensor* time since the last accepted packet also exceeds the timeout (or the packet is
//!   not in line with it). A host-side pause with nothing lost (the decoder thread stalled and
//!   the packets waited in the ring, or a capture's record times jump while the sensor times run
//!   on) is no silence: the turn goes on. A real silence leaves a gap on both clocks, live and
//!   offline.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use crate::frame::{Frame, FrameClock, FrameHeader};
use crate::layout::PointType;
use crate::point_buf::PointBuf;

use super::{Fov, StreamClock, arc_in_view};

/// A source of empty point buffers for the frames a decoder starts: the publisher's
/// `lidarxdp::publish::BufferPool` of heap buffers whose frames have been sent, or the
/// daemon's shared-memory pool, which lends each frame a chunk ([`crate::point_buf`]).
pub trait BufferSource: Send + Sync {
    /// An empty buffer for a frame of sensor `sensor_id` (the filter map's id) in layout
    /// `point_type` with room for about `capacity` points, or `None` to make the decoder
    /// allocate on the heap. Must not block: it is called on the decoder's hot path, once per
    /// frame.
    fn take_buffer(
        &self,
        sensor_id: u16,
        point_type: PointType,
        capacity: usize,
    ) -> Option<PointBuf>;
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

    /// An empty point buffer for sensor `sensor_id` in layout `point_type` with room for
    /// `capacity` points: from the source if it has one (and it gave that layout), else freshly
    /// allocated. Every vendor decoder takes its frame buffers here so a warm decoder does not
    /// allocate.
    pub fn take(&self, sensor_id: u16, point_type: PointType, capacity: usize) -> PointBuf {
        match self
            .0
            .as_ref()
            .and_then(|s| s.take_buffer(sensor_id, point_type, capacity))
            .filter(|v| v.point_type() == point_type || v.memory().is_none())
        {
            Some(mut v) => {
                v.clear();
                v.set_point_type(point_type);
                v.reserve(capacity);
                v
            }
            None => PointBuf::with_type(point_type, capacity),
        }
    }
}
/// The accounting of one frame in progress, kept by a vendor's cut policy and handed to
/// [`FrameBuilder::emit`] when the frame ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameAccount {
    /// Sensor time of the frame's first firing, ns since the Unix epoch (the host wall time of
    /// its first packet when `host_clock`).
    pub start_ns: u64,
    /// Host receive time of the frame's first packet, CLOCK_REALTIME ns since the Unix epoch
    /// ([`crate::HostTime::wall_ns`]; offline the record time): the header's published stamp.
    pub host_ns: u64,
    /// Data packets that contributed to the frame.
    pub received: u32,
    /// Data packets the policy estimates lost inside the frame (sequence or time gaps, the
    /// packets between the cut and the first or last packet).
    pub lost: u32,
    /// Packets rejected as malformed while the frame was open.
    pub malformed: u32,
    /// Whole frames the policy itself knows were lost right before this one (Ouster: skipped
    /// frame ids); added to what [`FrameBuilder::lose_frames`] collected.
    pub lost_before: u32,
    /// A packet of the frame was stamped with host time (its own time was invalid).
    pub host_clock: bool,
    /// Sensor time minus stream time for this frame, ns: [`StreamClock::shift_ns`] when the
    /// frame opened. The policy keeps `start_ns` and the points' times on the stream's
    /// continuous time line ([`StreamClock::stream_ns`]); [`FrameBuilder::emit`] publishes
    /// the start `start_ns + shift_ns`, so a frame that holds a clock step keeps the start it
    /// opened with and every frame after it is stamped on the new time.
    pub shift_ns: i64,
}

impl FrameAccount {
    /// A frame opened by a packet with sensor time `start_ns` received at wall time `host_ns`
    /// (CLOCK_REALTIME ns since the Unix epoch), with nothing counted yet.
    pub fn open(start_ns: u64, host_ns: u64) -> Self {
        Self {
            start_ns,
            host_ns,
            ..Self::default()
        }
    }

    /// The published start: `start_ns + shift_ns` (ns since the Unix epoch, saturating).
    pub fn published_start_ns(&self) -> u64 {
        self.start_ns.saturating_add_signed(self.shift_ns)
    }

    /// Takes back one packet counted lost: a packet that arrived late into this frame after
    /// the gap it left had been counted (saturating at 0).
    pub fn found_late(&mut self) {
        self.received = self.received.saturating_add(1);
        self.lost = self.lost.saturating_sub(1);
    }
}

/// Largest forward step of a packet sequence counter that counts as packets lost, packets:
/// a larger step (or a step back) is a counter that restarted (a sensor reboot, a second
/// source): nothing is counted lost for it (Hesai's UDP sequence: 65535, as before).
pub const MAX_SEQUENCE_GAP: u32 = 65_535;

/// The per-packet sequence counter of a vendor whose packets carry one, and the one rule of
/// loss accounting it drives (module documentation, "Sequence numbers"): between two received
/// packets the packets lost are exactly the counter's gap, and a sensor whose own field of
/// view ends short of a turn (its counter continuous across the azimuth it does not send) is
/// known to send only its own sector, which the azimuth estimates then leave out.
///
/// Vendors: Hesai's UDP sequence in the packet tail (u32, the models and variants whose tail
/// has one, [`crate::sensor::hesai::layout::Layout::t_udp_seq`]); RoboSense Helios and
/// Helios-16P's MSOP packet counter (u32 big-endian at offset 12, Nebula `robosense_packet::
/// Header::bottom_packet_count`). Ouster's frame and measurement ids are exact already;
/// Velodyne has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketSequence {
    /// The previous numbered packet's counter.
    last: Option<u32>,
    /// The counter has stepped by exactly one since it was last forgotten: it counts packets
    /// (a field that stays 0 or counts something else never claims a loss).
    counting: bool,
    /// Raw azimuth of the previous numbered packet's last block, 0.01°.
    last_end_cdeg: Option<u32>,
    /// The sector the sensor sends, `(start, len)` 0.01° (inclusive start, `len` units):
    /// learned when two consecutive packets lie further apart in azimuth than
    /// [`SECTOR_JUMP_PACKETS`] packet advances (the sensor skipped the azimuth between them),
    /// forgotten when a packet arrives outside it.
    sector: Option<(u32, u32)>,
}

/// Packet advances between two consecutive packets (the previous packet's last block and the
/// next one's first) beyond which the azimuth between them is outside the sensor's own field
/// of view. Two consecutive packets of a whole turn lie one block step apart.
pub const SECTOR_JUMP_PACKETS: u32 = 2;

impl PacketSequence {
    /// Steps to the packet numbered `seq` whose blocks run from raw azimuth `first_cdeg` to
    /// `last_cdeg` (0.01°, `None` where the azimuth is no turn angle: AT128 mirror fields),
    /// the sensor turning `advance_cdeg` (0.01°, 0 when not measured yet) per packet. Returns
    /// the packets lost since the previous numbered packet (`seq - last - 1`, wrapping at
    /// 2³²), or `None` when the counter cannot tell: no previous packet since
    /// [`Self::forget`], the counter not yet seen to count by one, or a step beyond
    /// [`MAX_SEQUENCE_GAP`] (a restarted counter).
    pub fn step(
        &mut self,
        seq: u32,
        azimuths: Option<(u32, u32)>,
        advance_cdeg: u32,
    ) -> Option<u32> {
        let gap = self
            .last
            .map(|l| seq.wrapping_sub(l.wrapping_add(1)))
            .filter(|&g| g <= MAX_SEQUENCE_GAP);
        if gap == Some(0) {
            self.counting = true;
        } else if gap.is_none() && self.last.is_some() {
            self.counting = false;
        }
        if let Some((first, last)) = azimuths {
            let u = super::AZIMUTH_UNITS;
            let (first, last) = (first % u, last % u);
            let margin = SECTOR_JUMP_PACKETS.saturating_mul(advance_cdeg);
            match (self.last_end_cdeg, gap) {
                (Some(end), Some(0)) if advance_cdeg > 0 && (u + first - end) % u > margin => {
                    self.sector = Some((first, (u + end - first) % u + 1));
                }
                _ => {
                    let outside = self.sector.is_some_and(|(s, len)| {
                        (u + first + margin - s) % u >= (len + 2 * margin).min(u)
                    });
                    if outside {
                        self.sector = None;
                    }
                }
            }
            self.last_end_cdeg = Some(last);
        }
        self.last = Some(seq);
        gap.filter(|_| self.counting)
    }

    /// Forgets the previous packet (a frame closed by a silence, a restart, a sensor-time
    /// gap): the next packet's gap is unknown. The learned sector is kept.
    pub fn forget(&mut self) {
        self.last = None;
        self.last_end_cdeg = None;
    }

    /// The sector the sensor was seen to send, `(start, len)` 0.01°, if learned.
    pub fn sector(&self) -> Option<(u32, u32)> {
        self.sector
    }

    /// How much of the arc of `len_cdeg` (0.01°, at most a turn) from azimuth `from_cdeg`
    /// lies inside `fov` ([`arc_in_view`]) and inside the sector the sensor sends: the head
    /// and tail estimates of a frame count only azimuths a packet could have come from.
    pub fn arc_sent(&self, fov: Option<Fov>, from_cdeg: u32, len_cdeg: u32) -> u32 {
        self.arc_sent_by(fov, from_cdeg, len_cdeg, 0)
    }

    /// [`Self::arc_sent`] for an arc of one channel's corrected azimuths, the channel's
    /// azimuth offset `offset_cdeg` (0.01°) from the block azimuths the sector was learned
    /// from (Hesai's per-channel cut measures its head and tail on a channel).
    pub fn arc_sent_by(
        &self,
        fov: Option<Fov>,
        from_cdeg: u32,
        len_cdeg: u32,
        offset_cdeg: i32,
    ) -> u32 {
        let Some((s0, slen)) = self.sector else {
            return arc_in_view(fov, from_cdeg, len_cdeg);
        };
        let s0 = (i64::from(s0) + i64::from(offset_cdeg))
            .rem_euclid(i64::from(super::AZIMUTH_UNITS)) as u32;
        let u = i64::from(super::AZIMUTH_UNITS);
        // Cyclic overlap of the linear piece [a0, a1) with the arc (b0, blen).
        let overlap = |a0: i64, a1: i64, b0: i64, blen: i64| -> i64 {
            (-1..=2)
                .map(|k| (a1.min(b0 + blen + k * u) - a0.max(b0 + k * u)).max(0))
                .sum()
        };
        let (f0, flen) = match fov {
            Some(f) => (i64::from(f.min_cdeg), i64::from(f.width_cdeg())),
            None => (0, u),
        };
        let (s0, slen) = (i64::from(s0), i64::from(slen));
        let (a0, alen) = (
            i64::from(from_cdeg % super::AZIMUTH_UNITS),
            i64::from(len_cdeg.min(super::AZIMUTH_UNITS)),
        );
        // The field of view and the sector meet in at most two pieces.
        let sent: i64 = (-1..=1)
            .map(|k| {
                let lo = f0.max(s0 + k * u);
                let hi = (f0 + flen).min(s0 + slen + k * u);
                if lo < hi {
                    overlap(lo, hi, a0, alen)
                } else {
                    0
                }
            })
            .sum();
        sent.clamp(0, alen) as u32
    }
}

/// The frame builder of one sensor (module documentation): the frame sequence, the frames lost
/// between two emitted frames, the time base ([`StreamClock`]), the frame timeout and the point
/// buffers.
#[derive(Clone, Debug)]
pub struct FrameBuilder {
    sensor_id: u16,
    sequence: u64,
    frame_timeout_ns: u64,
    buffers: PointBuffers,
    point_type: PointType,
    clock: StreamClock,
    pending_lost_frames: u32,
    /// Host monotonic time (CLOCK_MONOTONIC, ns) of the last data packet seen (accepted or
    /// late).
    last_mono_ns: Option<u64>,
}

impl FrameBuilder {
    /// A builder for sensor `sensor_id` (copied into every header) closing frames after
    /// `frame_timeout_ns` (ns, at least 1) of silence.
    pub fn new(sensor_id: u16, frame_timeout_ns: u64) -> Self {
        Self {
            sensor_id,
            sequence: 0,
            frame_timeout_ns: frame_timeout_ns.max(1),
            buffers: PointBuffers::default(),
            point_type: PointType::Autoware,
            clock: StreamClock::default(),
            pending_lost_frames: 0,
            last_mono_ns: None,
        }
    }

    /// The sequence number the next emitted frame gets.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The frame timeout, ns.
    pub fn frame_timeout_ns(&self) -> u64 {
        self.frame_timeout_ns
    }

    /// The time guard on the packets' sensor time.
    pub fn clock(&self) -> &StreamClock {
        &self.clock
    }

    /// The time guard, to judge a packet ([`StreamClock::check`]) or note a silence.
    pub fn clock_mut(&mut self) -> &mut StreamClock {
        &mut self.clock
    }

    /// Takes new frames' point buffers from `source` from now on (instead of allocating).
    pub fn set_buffer_source(&mut self, source: Arc<dyn BufferSource>) {
        self.buffers = PointBuffers::new(source);
    }

    /// Writes new frames' points in layout `point_type` from now on.
    pub fn set_point_type(&mut self, point_type: PointType) {
        self.point_type = point_type;
    }

    /// The layout new frames' points are written in.
    pub fn point_type(&self) -> PointType {
        self.point_type
    }

    /// An empty point buffer in the sensor's layout with room for `capacity` points, from the
    /// pool if there is one.
    pub fn take_points(&self, capacity: usize) -> PointBuf {
        self.buffers.take(self.sensor_id, self.point_type, capacity)
    }

    /// `points` if it is empty and in the sensor's layout, else a new buffer of its capacity
    /// from [`Self::take_points`]: a vendor's frame in progress after the source or the layout
    /// changed.
    pub fn renew_if_empty(&self, points: &mut PointBuf) {
        if points.is_empty() {
            *points = self.take_points(points.capacity());
        }
    }

    /// A frame's account opened in stream time `start_ns` (ns, [`StreamClock::stream_ns`])
    /// by a packet received at wall time `host_ns` (CLOCK_REALTIME ns), with the stream's
    /// current clock shift ([`FrameAccount::shift_ns`]).
    pub fn open_account(&self, start_ns: u64, host_ns: u64) -> FrameAccount {
        FrameAccount {
            shift_ns: self.clock.shift_ns(),
            ..FrameAccount::open(start_ns, host_ns)
        }
    }

    /// Records `n` whole frames (turns) lost, for the next emitted frame's
    /// `frames_lost_before`.
    pub fn lose_frames(&mut self, n: u32) {
        self.pending_lost_frames = self.pending_lost_frames.saturating_add(n);
    }

    /// Records that a data packet arrived at host monotonic time `mono_ns` (CLOCK_MONOTONIC,
    /// ns) with sensor time `sensor_ns` (ns; `None` when it has none the clock could judge yet)
    /// and says whether a silence came before it (module documentation): the monotonic time
    /// since the previous packet exceeds the frame timeout *and* the sensor time since the
    /// last accepted packet is not within the timeout. The caller then closes its frames in
    /// progress and calls [`StreamClock::note_silence`].
    pub fn silence_before(&mut self, mono_ns: u64, sensor_ns: Option<u64>) -> bool {
        let host_gap = self
            .last_mono_ns
            .is_some_and(|h| mono_ns.saturating_sub(h) > self.frame_timeout_ns);
        self.last_mono_ns = Some(mono_ns);
        if !host_gap {
            return false;
        }
        let sensor_in_line = match (self.clock.last_sensor_ns(), sensor_ns) {
            (Some(last), Some(now)) => {
                now >= last.saturating_sub(super::REORDER_WINDOW_NS)
                    && now.saturating_sub(last) <= self.frame_timeout_ns
            }
            _ => false,
        };
        !sensor_in_line
    }

    /// Whether no data packet arrived for more than the frame timeout of host monotonic time
    /// before `now_mono_ns` (CLOCK_MONOTONIC, ns): the idle poll's silence. False before the
    /// first packet.
    pub fn silent_at(&self, now_mono_ns: u64) -> bool {
        self.last_mono_ns
            .is_some_and(|h| now_mono_ns.saturating_sub(h) > self.frame_timeout_ns)
    }

    /// Emits a finished frame: fills in its header (the only place a [`FrameHeader`] is built
    /// outside tests) from `account`, with `extra_lost` more packets counted lost (the tail
    /// estimate of a frame that did not end at a cut), and appends it to `out`. The sequence
    /// grows by one; the frames lost collected since the previous frame go into this one.
    /// A frame opened after a clock step ([`FrameAccount::shift_ns`] ≠ 0) is published on
    /// the sensor's new time: its start and its points' absolute times
    /// ([`PointBuf::shift_start`]) move by the shift.
    pub fn emit(
        &mut self,
        account: &FrameAccount,
        extra_lost: u32,
        mut points: PointBuf,
        out: &mut Vec<Frame>,
    ) {
        if account.shift_ns != 0 {
            points.shift_start(account.shift_ns);
        }
        let header = FrameHeader {
            sensor_id: self.sensor_id,
            sequence: self.sequence,
            start_ns: account.published_start_ns(),
            host_ns: account.host_ns,
            packets_received: account.received,
            packets_expected: account
                .received
                .saturating_add(account.lost)
                .saturating_add(extra_lost),
            packets_malformed: account.malformed,
            frames_lost_before: std::mem::take(&mut self.pending_lost_frames)
                .saturating_add(account.lost_before),
            clock: if account.host_clock {
                FrameClock::Host
            } else {
                FrameClock::Sensor
            },
        };
        self.sequence += 1;
        out.push(Frame { header, points });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame contract, exact values: sequence from 0 by one, expected = received + lost +
    /// extra, frames lost collected between frames, the host-clock flag.
    #[test]
    fn emit_fills_the_header_by_the_contract() {
        let mut b = FrameBuilder::new(9, 100_000_000);
        let mut out = Vec::new();
        let mut a = FrameAccount::open(5_000, 7_000);
        a.received = 10;
        a.lost = 2;
        a.malformed = 1;
        b.emit(&a, 3, PointBuf::new(), &mut out);
        b.lose_frames(2);
        b.lose_frames(1);
        let mut c = FrameAccount::open(6_000, 8_000);
        c.received = 4;
        c.lost_before = 1;
        c.host_clock = true;
        c.found_late();
        let three = vec![crate::point::PointXYZIRCAEDT::default(); 3];
        b.emit(&c, 0, three.into(), &mut out);
        b.emit(&FrameAccount::default(), 0, PointBuf::new(), &mut out);
        let h: Vec<FrameHeader> = out.iter().map(|f| f.header).collect();
        assert_eq!(
            h[0],
            FrameHeader {
                sensor_id: 9,
                sequence: 0,
                start_ns: 5_000,
                host_ns: 7_000,
                packets_received: 10,
                packets_expected: 15,
                packets_malformed: 1,
                frames_lost_before: 0,
                clock: FrameClock::Sensor,
            }
        );
        assert_eq!(
            (h[1].sequence, h[1].packets_received, h[1].packets_expected),
            (1, 5, 5)
        );
        assert_eq!((h[1].frames_lost_before, h[1].clock), (4, FrameClock::Host));
        assert_eq!(out[1].points.len(), 3);
        assert_eq!((h[2].sequence, h[2].frames_lost_before), (2, 0));
        assert_eq!(b.sequence(), 3);
    }

    /// A frame opened after a clock step is published on the new time: its start, and in an
    /// absolute-time layout every point's time, move by the frame's shift; relative times stay.
    #[test]
    fn emit_publishes_a_shifted_frame_on_the_new_time() {
        use crate::layout::PointType;
        let mut b = FrameBuilder::new(1, 100_000_000);
        let mut out = Vec::new();
        let start = 1_000_000_000_000u64;
        let shift = -37_000_000_000i64;
        for pt in [PointType::Autoware, PointType::Robosense] {
            let mut points = PointBuf::with_type(pt, 2);
            points.set_start_ns(start);
            for t in [0u32, 123_456] {
                let p = crate::point::PointXYZIRCAEDT {
                    time_stamp: t,
                    ..Default::default()
                };
                points.push(p);
            }
            let a = FrameAccount {
                shift_ns: shift,
                ..FrameAccount::open(start, 5)
            };
            b.emit(&a, 0, points, &mut out);
        }
        let new_start = start - 37_000_000_000;
        for f in &out {
            assert_eq!(f.header.start_ns, new_start);
            assert_eq!(f.points.start_ns(), new_start);
            assert_eq!(
                (f.points.time_ns(0), f.points.time_ns(1)),
                (Some(0), Some(123_456))
            );
        }
    }

    /// The sequence rule: a gap is counted once the counter counts by one, wrapping at 2^32;
    /// a jump past MAX_SEQUENCE_GAP tells nothing; consecutive packets far apart in azimuth
    /// teach the sensor's sector, which the estimates then leave out, until a packet lands
    /// outside it.
    #[test]
    fn sequence_gaps_and_the_sensors_sector() {
        let mut s = PacketSequence::default();
        let az = |a: u32| Some((a, a + 54));
        assert_eq!(s.step(10, az(4_068), 72), None);
        assert_eq!(s.step(12, az(4_212), 72), None, "not yet seen counting");
        assert_eq!(s.step(13, az(4_284), 72), Some(0));
        assert_eq!(s.step(15, az(4_428), 72), Some(1));
        assert_eq!(s.step(15 + MAX_SEQUENCE_GAP + 2, az(4_500), 72), None);
        assert_eq!(s.step(u32::MAX, az(4_572), 72), None);
        assert_eq!(s.step(0, az(4_644), 72), Some(0), "wraps");
        assert_eq!(s.step(2, az(4_788), 72), Some(1));
        assert_eq!(s.sector(), None);
        // Last block at 299.70 deg, the next packet (consecutive) at 40.68 deg.
        assert_eq!(s.step(3, Some((29_916, 29_970)), 72), Some(0));
        assert_eq!(s.step(4, Some((4_068, 4_122)), 72), Some(0));
        assert_eq!(s.sector(), Some((4_068, 29_970 - 4_068 + 1)));
        let fov = Some(Fov {
            min_cdeg: 4_000,
            max_cdeg: 31_000,
        });
        // From the cut at 310 deg to 40.76 deg: only 40.68..40.76 is sent.
        assert_eq!(s.arc_sent(fov, 31_000, 9_076), 8);
        assert_eq!(arc_in_view(fov, 31_000, 9_076), 77);
        // From 299.16 deg to the cut: 299.16..299.70 inclusive.
        assert_eq!(s.arc_sent(fov, 29_916, 1_084), 55);
        assert_eq!(s.arc_sent_by(fov, 29_916, 1_084, 8), 63);
        s.forget();
        assert_eq!(s.step(9, az(20_000), 72), None);
        assert!(s.sector().is_some());
        assert_eq!(s.step(11, az(1_000), 72), Some(1));
        assert_eq!(s.sector(), None, "a packet outside the sector forgets it");
    }

    /// A silence noticed on arrival needs a gap on both clocks; the idle poll needs host time.
    #[test]
    fn a_host_pause_with_the_sensor_in_line_is_no_silence() {
        let ms = 1_000_000u64;
        let mut b = FrameBuilder::new(0, 200 * ms);
        assert!(!b.silence_before(1_000 * ms, Some(5_000 * ms)));
        assert_eq!(
            b.clock_mut().check(5_000 * ms, 1_000 * ms, None, 0),
            crate::scan::TimeVerdict::InLine { gap_ns: None }
        );
        assert!(!b.silent_at(1_200 * ms));
        assert!(b.silent_at(1_200 * ms + 1));
        // 500 ms on the host, 1 ms on the sensor: a stall on our side, no silence.
        assert!(!b.silence_before(1_500 * ms, Some(5_001 * ms)));
        // 500 ms on both: a silence.
        assert!(b.silence_before(2_000 * ms, Some(5_501 * ms)));
        // A time that is no time (None) after a host gap: a silence.
        assert!(b.silence_before(3_000 * ms, None));
        // Within the timeout on the host: never a silence.
        assert!(!b.silence_before(3_100 * ms, Some(9_000_000 * ms)));
    }
}
