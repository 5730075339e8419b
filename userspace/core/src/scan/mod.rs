//! Scan (frame) building, vendor-neutral and sans-IO: the one [`FrameBuilder`] (sequence, loss
//! accounting, time base, timeout, buffers, the frame header), the [`StreamClock`] it keeps,
//! and the cut policies that drive it. Layout:
//!
//! ```text
//!   sensor::ScanPipeline ── duplicates, held restart candidates, counters, reload
//!        │ push(payload)
//!   vendor decoder (velodyne, robosense, hesai, ouster): packet view + points
//!        │ begin/add/end packet          │ per-channel cut         │ frame_id
//!   ScanAssembler (block azimuth)   hesai::Cutter              ouster frame ids   ← cut policies
//!        └──────────────┬──────────────────┴──────────────────────────┘
//!                 FrameBuilder: FrameAccount → emit(FrameHeader), StreamClock, pool
//! ```
//!
//! Every policy keeps one [`FrameAccount`] per frame in progress and ends it through
//! [`FrameBuilder::emit`]; every policy judges packet times with the builder's
//! [`StreamClock`] (Ouster: its frame ids) and notices a silence with
//! [`FrameBuilder::silence_before`] / [`FrameBuilder::silent_at`].
//!
//! ## Rules every vendor follows
//! * **Duplicates**: a datagram identical to one of the last [`DUPLICATE_WINDOW`] decoded ones,
//!   received within [`DUPLICATE_WINDOW_NS`] of it, is dropped and counted (`duplicates`)
//!   before any decoder sees it
//!   ([`crate::sensor::ScanPipeline::push`]).
//! * **Late packets**: a packet up to [`REORDER_WINDOW_NS`] behind the stream
//!   ([`TimeVerdict::Late`]; Ouster: its frame held open for the reorder window) lands in the
//!   frame in progress if it belongs there, and takes back the packet its gap had counted
//!   lost; otherwise it is dropped and counted `late`.
//! * **Azimuth jitter**: a step back of at most [`AZIMUTH_JITTER_CDEG`] is no new turn.
//! * **Silence**: see [`FrameBuilder`]: a pause on the receiving side with nothing lost never
//!   cuts a turn; a silence on both clocks closes the frame, live and offline.
//! * **Restart**: [`RESTART_AGREE`] packets on a new time base; the first ones are held by the
//!   pipeline and decoded once the restart is confirmed ([`Rejection::Restart`]).
//! * **Clock step** (issue 39, class 1): [`RESTART_AGREE`] packets on a new time base while
//!   the sensor's position runs on (the first of them a forward azimuth step of at most a
//!   quarter turn from the last accepted packet; Ouster: the measurement id's azimuth) is a
//!   step of the sensor's clock (PTP lock, a TAI−UTC fix, a GPS time jump), forward or back,
//!   seconds to years: [`TimeVerdict::Step`], [`Rejection::ClockStep`], counted
//!   `clock_steps`. No turn is cut and nothing is lost: every policy judges and stamps packets
//!   in *stream time* ([`StreamClock::stream_ns`]: sensor time minus the steps taken, the step
//!   measured against the packets' mean spacing), and each frame publishes its start on the
//!   clock it opened on ([`FrameAccount::shift_ns`]). So the frame that holds the step keeps
//!   its start (its points after the step continue the stream within the jitter of the
//!   sensor's own stamps) and every later frame is stamped on the new time.
//! * **Field of view and range window**: [`crate::sensor::PipelineOptions::fov`] and
//!   [`crate::sensor::SensorConfig::range`] are validated types ([`crate::valid::Fov`]: its
//!   ends differ; [`crate::valid::RangeGate`]: `min < max`), checked once where they are read.
//!
//! ## The block-azimuth cut policy ([`ScanAssembler`], Velodyne and RoboSense)
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
//!    packet's (the cut lies between the two packets). A packet whose first block lies at most
//!    [`AZIMUTH_JITTER_CDEG`] behind the previous packet's is jitter: it completes nothing and
//!    the previous azimuth stays the reference (Nebula would start a new turn).
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
//!   progress is closed and the stream continues on the new base (counted, logged once); when
//!   the azimuth ran on across the change it is a clock step instead, which closes nothing
//!   (above);
//! * a sensor-time gap longer than one rotation period closes the frame in progress; the whole
//!   turns inside the gap ([`turns_lost`]) go to the next frame's
//!   [`crate::frame::FrameHeader::frames_lost_before`]. The rotation period is measured from the stream (the
//!   sensor time over which the packets' first-block azimuths add up to a turn); until then it
//!   is the nominal `interval_ns × 36000 / advance_cdeg`.
//!
//! ## Other closes
//! * **Timeout**: a silence ([`FrameBuilder`]: polled, or noticed when the next packet arrives
//!   with a sensor-time gap too) closes the frame in progress as a partial frame.
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
//! ## Sequence numbers ([`PacketSequence`], issue 39 class 4)
//! Where a vendor numbers its packets (Hesai's tail UDP sequence, RoboSense Helios's MSOP
//! packet counter; Ouster's frame and measurement ids are exact already; Velodyne has none),
//! the number outranks every azimuth or time estimate:
//! * between two received packets, the packets lost are exactly the counter's gap (wrapping
//!   at 2³²; a step over [`MAX_SEQUENCE_GAP`] is a restarted counter and counts nothing; a
//!   counter not yet seen to step by one claims nothing), and the time estimate above is not
//!   used;
//! * two consecutive packets further apart in azimuth than [`SECTOR_JUMP_PACKETS`] packet
//!   advances show the sector the sensor sends (its own field of view, which may end short of
//!   the host's `--fov`): the head and tail estimates count only azimuths inside both, so a
//!   sensor sending 40°..300° decoded with `--fov 40:310 --cut-angle 310` loses nothing on
//!   paper, its first and flushed frames included. A packet outside the sector forgets it.
//! * Azimuth estimates remain only where no number can tell: the head of a stream's first
//!   frame before a sector is seen, a frame closed by a silence, a sensor-time gap or a flush
//!   (the counter is forgotten there), and vendors without numbers.
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
//! packet too high near the end of a turn. Both measurements restart when the sensor's speed
//! changes ([`StreamClock::speed_changes`]) and when the return mode does (issue 39, class 3;
//! seen as a change of the packets' nominal interval, [`PacketInfo::interval_ns`]: a VLP-16
//! single-return packet spans twice the firings of a dual-return one); the step across the
//! switch is no sample of either mode. Before, the dual-return advance (2.39°) lingered in the
//! mean after a switch to single return (4.78°), and the tail estimate of a frame closed early
//! a turn later still counted one packet more than the single-return stream alone.
//!
//! ## Buffer reuse (no allocation once warm)
//! Each frame's point `Vec` leaves with the frame. The next frame's `Vec` comes from the
//! decoder's [`BufferSource`] if it was given one ([`PointBuffers`],
//! [`crate::sensor::ScanPipeline::set_buffer_source`]; the capture thread gives it the
//! publisher's LIFO pool, whose buffers come back when the last subscriber has sent the frame),
//! else it is allocated, pre-sized from the previous frame. The azimuth side table is
//! recycled inside the assembler. With a warm pool, decoding allocates nothing.
#![forbid(unsafe_code)]

mod assembler;
mod builder;
mod clock;
mod window;

pub use assembler::{PacketInfo, PointBatch, ScanAssembler};
pub use builder::{
    BufferSource, FrameAccount, FrameBuilder, MAX_SEQUENCE_GAP, PacketSequence, PointBuffers,
    SECTOR_JUMP_PACKETS,
};
pub use clock::{
    GAP_PERIODS_X10, JUMP_AHEAD_TOLERANCE_NS, MAX_SAMPLE_DT_NS, REORDER_WINDOW_NS, RESTART_AGREE,
    StreamClock, TimeVerdict, turns_lost,
};
pub use window::{Bound, Fov, arc_in_view, in_sector, raw_window};

/// Azimuth units per turn (0.01°).
pub const AZIMUTH_UNITS: u32 = 36_000;
/// Phased azimuth below which trailing points move to the next frame, 0.01° (90°).
pub const CARRY_LIMIT_CDEG: u32 = 9_000;
/// Longest sensor-time span of one frame before it is force-closed, ns (1 s; a VLP-16 turns at
/// 5–20 Hz). Also keeps every `time_stamp` within `u32`.
pub const MAX_FRAME_SPAN_NS: u64 = 1_000_000_000;
/// Largest step back of a packet's (or, for Hesai, a channel's) azimuth that is encoder jitter
/// inside a turn rather than the start of a new one, 0.01° (1°). A new turn steps back by
/// almost 360°, or by the width of a sensor-side field of view, far more than this.
pub const AZIMUTH_JITTER_CDEG: u32 = 100;
/// Decoded datagrams the pipeline remembers to recognise a duplicate (the same datagram again:
/// port mirrors, bonded links, replay tools): 64, about 40 ms of a VLP-16, 32 ms of a Hesai
/// XT32.
pub const DUPLICATE_WINDOW: usize = 64;
/// Largest host-time distance between a datagram and an identical one for the second to be a
/// duplicate, ns (50 ms: copies from mirrors and bonded links arrive microseconds apart; a
/// capture replayed in a loop repeats its datagrams only a loop later, at least one turn).
pub const DUPLICATE_WINDOW_NS: u64 = 50_000_000;

/// Why a vendor's packet parser did not take a payload as a data packet, with the vendor's
/// own packet error `E` (Velodyne's and Hesai's `classify`): the pipeline counts it as
/// [`Rejection::Ignored`] or [`Rejection::Malformed`] (`From`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketRejection<E> {
    /// Not a data packet of this sensor at all (position packets, foreign datagrams of other
    /// sizes): counted `ignored`.
    Ignored,
    /// Looks like a data packet but is damaged (what is wrong: `E`): counted `malformed`.
    Malformed(E),
}

impl<E> From<PacketRejection<E>> for Rejection {
    fn from(r: PacketRejection<E>) -> Self {
        match r {
            PacketRejection::Ignored => Rejection::Ignored,
            PacketRejection::Malformed(_) => Rejection::Malformed,
        }
    }
}

/// How a payload that is not decoded into a frame is counted (every vendor's
/// [`crate::sensor::VendorDecoder::push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Not a data packet of this sensor at all (position/DIFOP packets, foreign datagrams on
    /// the port): counted `ignored`, leaves the frame in progress untouched.
    Ignored,
    /// Looks like a data packet but is damaged (size a few bytes off, bad block flag, bad CRC,
    /// out-of-range field): counted `malformed` and in the frame's `packets_malformed`.
    Malformed,
    /// A valid data packet whose sensor time or frame id jumped far from the stream's: dropped,
    /// counted `time_jumps` (held first: it may be the start of a restart); the frame in
    /// progress is untouched.
    TimeJump,
    /// A valid data packet that confirmed a sensor restart ([`TimeVerdict::Restart`]): the
    /// frames in progress are closed and nothing of this packet is decoded yet; the pipeline
    /// pushes the held candidates and then this packet again, onto the new time base.
    Restart,
    /// A valid data packet that confirmed a sensor clock step ([`TimeVerdict::Step`]): the
    /// frames in progress stay open and nothing of this packet is decoded yet; the pipeline
    /// pushes the held candidates and then this packet again, mapped onto the stream's time
    /// line ([`StreamClock::stream_ns`]).
    ClockStep,
    /// A valid data packet that arrived late ([`TimeVerdict::Late`]) for a frame already
    /// published: dropped, counted `late`.
    Late,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parser's rejection is counted as the pipeline's: ignored stays ignored, a damaged
    /// packet is malformed whatever the vendor's error says.
    #[test]
    fn packet_rejections_count_as_the_pipelines() {
        assert_eq!(
            Rejection::from(PacketRejection::<u8>::Ignored),
            Rejection::Ignored
        );
        assert_eq!(
            Rejection::from(PacketRejection::Malformed(7u8)),
            Rejection::Malformed
        );
    }
}
