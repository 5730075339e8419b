//! Hesai decoders: Pandar40P, Pandar64, PandarQT64, PandarQT128, PandarXT16, PandarXT32,
//! PandarXT32M, Pandar128E4X/OT128 and AT128. Sans-IO: UDP payload bytes in, [`Frame`]s out.
//!
//! Sources: the Hesai user manuals (packet layouts in [`layout`], firing times in `timing`)
//! and Tier IV Nebula's generic Hesai decoder (`hesai_decoder.hpp`, `scan_cutter.hpp`), whose
//! output this module reproduces point for point (see `tests/decode/decode_hesai_golden.rs`).
//!
//! ## Points
//! For each block group (1, 2 or 3 blocks, one per return) and each channel, in that order:
//! * distance = raw · `dis_unit` (m); raw 0 is no return; kept when inside both the model's
//!   range limits and the configured range gate ([`crate::sensor::SensorConfig::range`]),
//!   **inclusive** (as Nebula).
//! * azimuth = block azimuth + the channel's CSV azimuth offset, f32 rad in [0, 2π);
//!   elevation = the CSV elevation (rad).
//! * Nebula's Hesai axes: `x = d·cos(el)·sin(az)`, `y = d·cos(el)·cos(az)`, `z = d·sin(el)`.
//! * Multi-return: two returns with equal distance and reflectivity are one point of type
//!   [`ReturnType::Identical`] (the last of them is kept); a return closer than
//!   [`DUAL_RETURN_DISTANCE_THRESHOLD_M`] to another one of the same firing is dropped unless it
//!   is the last of the group. Types follow the return mode byte (0x39: the first block is
//!   last, `LastStrongest` if also strongest, the second `Strongest` or `SecondStrongest`; 0x3b
//!   first/last — swapped for XT16/XT32/OT128, whose blocks come in the other order; etc.).
//! * `time_stamp`: firing time (packet time + block and channel offsets from the manuals'
//!   firing tables) minus the frame start.
//!
//! ## Frames
//! The frame boundary is cut per channel, exactly as Nebula's `ScanCutter`: every channel goes
//! into one of two frame buffers, and switches buffer when its own corrected azimuth passes
//! the cut angle (`last ≤ cut < current`, cyclic). A frame is published when its last channel
//! has left it, i.e. when every channel of a block group is in the other buffer. Its start time
//! is the earliest firing of the block group whose first channel entered it. So every point is
//! in exactly one frame, frames are `[cut, cut + 360°)` per channel, and the 0/360 wrap needs no
//! special case. The first frame after start-up (or after a timeout) is published partial,
//! marked not whole: `packets_expected` adds the packets between the cut and its first packet
//! (from the azimuth of its channel furthest past the cut, in measured per-packet advances),
//! and a frame closed by a timeout or flush adds those from its channel furthest behind to
//! the cut.
//! The field of view (`PipelineOptions::fov`, inclusive, may wrap) drops points outside
//! it; the cut must lie inside the field of view.
//! Deviations from Nebula: two consecutive blocks with the *same* azimuth, or a channel stepping
//! back by at most [`AZIMUTH_JITTER_CDEG`] (encoder jitter), never count as a crossing (Nebula
//! treats them as a full turn), an impossible cutter transition is ignored (Nebula throws), a
//! packet that arrived late (a few packets, [`TimeVerdict::Late`]) joins the frame buffers
//! without stepping the cutter if the cut has not passed since its azimuth (else it is counted
//! `late`), and a silence (host time past the frame timeout, and on arrival the sensor time
//! too: [`FrameBuilder::silence_before`]) publishes the buffers as they are and restarts the
//! cutter. A frame whose cutter reset fell outside the
//! field of view (the first frame after start-up with `fov`) starts at its first block
//! group, never at 0.
//!
//! ## Time
//! Packet time = tail date + µs ([`packet::Packet::date_seconds`]: the year byte in either
//! convention, or Unix seconds when the first date byte is 0). A packet whose date is no date
//! is decoded all the same and counted in `date_fallbacks` (a date never costs the sensor):
//! it is stamped on the stream's time line ([`crate::scan::StreamClock::extrapolate`]: the last accepted
//! sensor time plus the host time elapsed), or, while the stream has no valid time at all, on
//! host time, and then its frame says [`crate::frame::FrameClock::Host`]. Every packet then goes through the shared
//! [`crate::scan::StreamClock`]: a time jump is dropped (`time_jumps`) and the frame stays whole, a
//! sustained one is a restart, and a gap longer than one rotation period (measured from the
//! block azimuths) publishes the frames in progress, counting the packets missing up to the
//! cut and from it (in measured per-packet advances) and the whole turns in between
//! (`frames_lost_before` of the next frame). AT128 (mirror fields) has no gap rule.
//!
//! ## Packet accounting
//! `packets_received`: packets with at least one block group in the frame (under a field of
//! view: inside it; the head and tail estimates then count only its azimuths). `packets_expected`
//! adds the packets lost according to the tail's UDP sequence (gaps of 1..=65535; larger jumps
//! are a restart and count nothing), and around a sensor-time gap the estimate above. Models
//! and variants without a sequence count no other loss. The sequence also shows the sector a
//! sensor sends ([`crate::scan::PacketSequence`]): the head and tail estimates leave out the
//! azimuths it does not send, moved by the azimuth offset of the channel they are measured on
//! (the largest for the head, the smallest for the tail).
//! `packets_malformed`: damaged packets while the frame was being filled.
//!
//! ## CRC
//! QT128 and OT128 carry CRC-32/MPEG-2 checksums of the body and the tail; a mismatch is
//! malformed. `PipelineOptions::hesai_skip_crc` turns the check off (Nebula never checks).
//!
//! ## AT128
//! AT128E2X blocks carry a fine azimuth (0.01°/256) and its angles come from the binary
//! correction file ([`At128Correction`]): mirror fields, each mapping its encoder range onto
//! the ~120° field of view. Typical use: `fov = (30, 150)`, cut 150° (Nebula's test
//! settings). No AT128 capture is available: it is verified on synthetic packets and a
//! synthetic correction file only, and its CRCs are not checked (convention unverified).
//! The cutter's lagging/leading channels are taken per block group (the corrected azimuths
//! depend on the encoder azimuth), as Nebula's correction-based angle corrector does.
//!
//! [`Frame`]: crate::frame::Frame
//! [`AZIMUTH_JITTER_CDEG`]: crate::scan::AZIMUTH_JITTER_CDEG
//! [`TimeVerdict::Late`]: crate::scan::TimeVerdict::Late
//! [`FrameBuilder::silence_before`]: crate::scan::FrameBuilder::silence_before

mod calibration;
mod convert;
pub mod crc;
mod cutter;
mod decode;
pub mod layout;
pub mod packet;
mod stream;
mod timing;

pub use calibration::{AT128_UNITS, AngleCorrection, At128Correction, CorrectionError};
pub use stream::{HesaiStream, HesaiTables};

use self::packet::{Packet, return_mode as rm};
use crate::point::ReturnType;
use crate::vendor::{ReturnMode, SensorModel};

/// Nebula's default `dual_return_distance_threshold`, m.
pub const DUAL_RETURN_DISTANCE_THRESHOLD_M: f32 = 0.1;

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

/// Firing time of (`block`, `channel`) relative to the packet timestamp, ns (may be negative:
/// several models stamp the packet at its end). `None` where the channel does not fire (OT128
/// high-resolution mode). Formulas from the manuals' timing appendices, as Nebula, except
/// PandarQT128 in multi-return mode: both blocks are the same firing, so both get the block
/// offset 9 µs (Nebula computes `111110·1/2` ns for block 0, which puts a channel's first
/// return 55.6 µs after its second and makes `time_stamp` go backwards).
pub fn firing_offset_ns<T: AsRef<[u8]>>(
    p: &Packet<T>,
    block: usize,
    channel: usize,
) -> Option<i64> {
    use timing::*;
    let n = p.returns() as i64;
    let b = block as i64;
    let ch = channel;
    let at = |t: &[i32]| t.get(ch).map(|&v| i64::from(v));
    let v = match p.layout().model {
        SensorModel::Pandar40p => -28_580 - 55_560 * ((9 - b) / n) + at(&P40_FIRING_NS)?,
        SensorModel::Pandar64 => -42_580 - 55_560 * ((5 - b) / n) + at(&P64_FIRING_NS)?,
        SensorModel::PandarQt64 => 25_710 + (500_000 * (b / n)) / 3 + at(&QT64_FIRING_NS)?,
        SensorModel::PandarXt16 => 5_632 - 50_000 * ((7 - b) / n) + 368 + 3_024 * ch as i64,
        SensorModel::PandarXt32 => 5_632 - 50_000 * ((7 - b) / n) + 368 + 1_512 * ch as i64,
        SensorModel::PandarXt32m => {
            let blk = if n < 3 { (7 - b) / n } else { (5 - b) / 3 };
            5_632 - 50_000 * blk + 368 + 2_888 * (ch % 16) as i64
        }
        SensorModel::PandarQt128 => {
            let loop1 = if n == 1 {
                block.is_multiple_of(2)
            } else {
                p.mode_flag() & 1 == 1
            };
            let t = if loop1 {
                &QT128_LOOP1_NS
            } else {
                &QT128_LOOP2_NS
            };
            9_000 + 111_110 * ((1 - b).max(0) / n) + at(t)?
        }
        SensorModel::Pandar128e4x => {
            let blk = if n == 1 { -27_778 * 2 * (1 - b) } else { 0 };
            let t = if p.operational_state() != 0 {
                &OT128_STATIC_NS
            } else if p.azimuth_state(block) == 0 {
                &OT128_AS0_NS
            } else {
                &OT128_AS1_NS
            };
            let c = at(t)?;
            if c < 0 {
                return None;
            }
            blk + 43_346 + c
        }
        SensorModel::At128 => {
            let blk = if n == 1 {
                -9_249 - 41_666 * (2 - b)
            } else {
                -9_249 - 41_666
            };
            blk + at(&AT128_FIRING_NS)?
        }
        _ => 0,
    };
    Some(v)
}

/// Return type of return `k` of a firing whose returns are `units` (`(raw distance,
/// reflectivity)` per block of the group), under return-mode byte `mode` (Nebula
/// `HesaiSensor::get_return_type`, with the first/last swap of XT16/XT32/OT128).
pub fn return_type(model: SensorModel, mode: u8, k: usize, units: &[(u16, u8)]) -> ReturnType {
    let me = units.get(k).copied().unwrap_or_default();
    let others = || units.iter().enumerate().filter(move |(j, _)| *j != k);
    if others().any(|(_, u)| *u == me) {
        return ReturnType::Identical;
    }
    let strongest = others().all(|(_, u)| u.1 <= me.1);
    let t = match mode {
        rm::FIRST => ReturnType::First,
        rm::SECOND => ReturnType::Second,
        rm::STRONGEST => ReturnType::Strongest,
        rm::LAST => ReturnType::Last,
        rm::LAST_STRONGEST => match (strongest, k == 0) {
            (true, true) => ReturnType::LastStrongest,
            (true, false) => ReturnType::Strongest,
            (false, true) => ReturnType::Last,
            (false, false) => ReturnType::SecondStrongest,
        },
        rm::FIRST_SECOND => [ReturnType::First, ReturnType::Second][k.min(1)],
        rm::FIRST_LAST => [ReturnType::First, ReturnType::Last][k.min(1)],
        rm::FIRST_STRONGEST => match (strongest, k == 0) {
            (true, true) => ReturnType::FirstStrongest,
            (true, false) => ReturnType::Strongest,
            (false, true) => ReturnType::First,
            (false, false) => ReturnType::SecondStrongest,
        },
        rm::STRONGEST_SECOND => [ReturnType::Strongest, ReturnType::SecondStrongest][k.min(1)],
        rm::TRIPLE => [ReturnType::First, ReturnType::Last, ReturnType::Strongest][k.min(2)],
        _ => ReturnType::Unknown,
    };
    let swaps = matches!(
        model,
        SensorModel::PandarXt16 | SensorModel::PandarXt32 | SensorModel::Pandar128e4x
    );
    match (swaps && mode == rm::FIRST_LAST, t) {
        (true, ReturnType::First) => ReturnType::Last,
        (true, ReturnType::Last) => ReturnType::First,
        _ => t,
    }
}

/// The shared [`ReturnMode`] nearest to a Hesai return-mode byte (second / second-strongest
/// modes have no exact counterpart: 0x34 maps to `Last`, 0x3a to `FirstLast`, 0x3e to `Dual`).
pub fn return_mode_of(byte: u8) -> Option<ReturnMode> {
    Some(match byte {
        rm::FIRST => ReturnMode::First,
        rm::SECOND | rm::LAST => ReturnMode::Last,
        rm::STRONGEST => ReturnMode::Strongest,
        rm::LAST_STRONGEST | rm::STRONGEST_SECOND => ReturnMode::Dual,
        rm::FIRST_SECOND | rm::FIRST_LAST => ReturnMode::FirstLast,
        rm::FIRST_STRONGEST => ReturnMode::FirstStrongest,
        rm::TRIPLE => ReturnMode::Triple,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
