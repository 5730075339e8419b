//! Velodyne data packets: a zero-copy packet view, the VLP-16 point decoder, and the
//! [`VelodyneStream`] (decoder + sensor clock + scan assembly) for every Velodyne model. The
//! VLP-32C, HDL-32E, HDL-64E S2/S3 and VLS-128 decoder lives in [`multi`]; the stream picks it
//! from the configured model. Overview and verification: `docs/sensors.md`, section Velodyne.
//!
//! Source: *VLP-16 User Manual* (Velodyne, 63-9243), section 9 "Sensor Data": data packet format
//! and firing timing table. Cross-checked against Tier IV Nebula's `vlp16_decoder.cpp`.
//!
//! ## Data packet layout (UDP payload, 1206 bytes, little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | `100·b + 0` | 2 | block flag `0xFF 0xEE` (b = 0..11) |
//! | `100·b + 2` | 2 | azimuth, u16, 0.01° units, 0..35999 |
//! | `100·b + 4 + 3·k` | 2 | distance of channel slot k = 0..31, u16, 2 mm units (0 = no return) |
//! | `100·b + 6 + 3·k` | 1 | calibrated reflectivity of slot k |
//! | 1200 | 4 | timestamp, u32, µs past the top of the hour (time of the first firing of block 0) |
//! | 1204 | 1 | return mode: 0x37 strongest, 0x38 last, 0x39 dual |
//! | 1205 | 1 | product id: 0x22 VLP-16 (ignored: the configured model wins) |
//!
//! Slots 0..15 are the first firing sequence (laser ids 0..15), slots 16..31 the second one,
//! fired 55.296 µs later. Lasers fire every 2.304 µs inside a sequence.
//! In single-return modes each block is two firing sequences at consecutive times. In dual mode
//! blocks come in pairs (2p, 2p+1) that describe the same two firing sequences: block 2p holds
//! the last return, block 2p+1 the strongest one (or the second strongest when the strongest is
//! also the last); both carry the same azimuth.
//!
//! ## Decoding a block
//! Both decoders work a data block (32 slots) at a time: stage 1 (`slot_mask`, SSE2 on
//! x86-64) finds the slots that carry a point; stage 2 computes them, all 32 at once for a
//! single-return block (`dense`, SSE2) or only the kept ones otherwise; the result is a
//! [`BlockPoints`], which its consumers turn into points ([`block`]).

mod arith;
pub mod block;
pub(crate) mod dense;
mod model;
pub mod multi;
mod packet;
pub mod position;
mod stream;
mod vlp16;

pub(crate) use arith::{
    RAD_PER_CDEG, TrigTable, azimuth_rad, f32_above, f32_below, lift_round_cdeg, raw_distance,
    raw_window, slot_mask, trig_table,
};
use arith::{slot_view, wrap_round_cdeg};
pub use block::BlockPoints;
pub use model::{
    calibration_laser_count, confirm_detected_model, detection_needs_calibration,
    models_with_lasers,
};
pub use packet::{MALFORMED_LEN_TOLERANCE, Packet, PacketError, classify, firing_offset_ns};
pub use stream::{VELODYNE_COUNTERS, VelodyneCounters, VelodyneStream, VelodyneTables};
pub use vlp16::Vlp16Decoder;

use crate::point::PointXYZIRCAEDT;
use crate::scan::AZIMUTH_UNITS;
use crate::vendor::{DecodeFlavor, ReturnMode};

/// Size of a VLP-16 data packet (UDP payload), bytes.
pub const DATA_PACKET_LEN: usize = 1206;
/// Size of a VLP-16 position (GPS/telemetry) packet, bytes, sent to port 8308.
pub const POSITION_PACKET_LEN: usize = 512;
/// Data blocks per packet.
pub const BLOCKS: usize = 12;
/// Size of one data block, bytes.
pub const BLOCK_LEN: usize = 100;
/// Channel slots (2 firing sequences × 16 lasers) per block.
pub const SLOTS_PER_BLOCK: usize = 32;
/// Lasers per firing sequence.
pub const LASERS: usize = 16;
/// Block flag bytes at the start of every block.
pub const BLOCK_FLAG: [u8; 2] = [0xFF, 0xEE];
/// Offset of the u32 timestamp (µs past the hour).
pub const TIMESTAMP_OFFSET: usize = 1200;
/// Offset of the return-mode byte.
pub const RETURN_MODE_OFFSET: usize = 1204;
/// Offset of the product-id byte.
pub const PRODUCT_ID_OFFSET: usize = 1205;
/// Return-mode byte: strongest.
pub const RETURN_MODE_STRONGEST: u8 = 0x37;
/// Return-mode byte: last.
pub const RETURN_MODE_LAST: u8 = 0x38;
/// Return-mode byte: dual.
pub const RETURN_MODE_DUAL: u8 = 0x39;
/// Product-id byte of a VLP-16.
pub const PRODUCT_ID_VLP16: u8 = 0x22;
/// Time between two laser firings inside a firing sequence, ns (manual: 2.304 µs).
pub const FIRING_NS: u32 = 2_304;
/// Duration of one firing sequence (16 firings + recharge), ns (manual: 55.296 µs).
pub const SEQUENCE_NS: u32 = 55_296;

/// Largest azimuth advance between consecutive firing sequences (or block pairs) that the
/// default rules interpolate with, 0.01° (1°). Real advances are at most 0.8° (a VLP-16
/// block, two 55.296 µs sequences, at 1200 rpm); a larger step between blocks is a pause in
/// firing (a sensor-side field of view skips the azimuths outside it, inside a packet too),
/// not rotation.
pub const MAX_ADVANCE_CDEG: f32 = 100.0;

/// The advance (0.01°) a firing sequence is interpolated with under the default rules: the
/// forward advance (to the next sequence) when known and at most [`MAX_ADVANCE_CDEG`], else
/// the backward one (from the previous sequence; only computed then) under the same bound,
/// else 0 (no interpolation).
#[inline(always)]
pub(crate) fn pick_advance(forward: Option<f32>, backward: impl FnOnce() -> Option<f32>) -> f32 {
    if let Some(f) = forward
        && f <= MAX_ADVANCE_CDEG
    {
        return f;
    }
    match backward() {
        Some(b) if b <= MAX_ADVANCE_CDEG => b,
        _ => 0.0,
    }
}

/// Time between two data packets, ns: 24 firing sequences in single-return modes, 12 in dual.
pub const fn packet_interval_ns(mode: ReturnMode) -> u64 {
    match mode {
        ReturnMode::Dual => 12 * SEQUENCE_NS as u64,
        _ => 24 * SEQUENCE_NS as u64,
    }
}

/// A field of view as the Velodyne decoders apply it: the one point-level test of every
/// vendor ([`crate::scan::Fov`], on the corrected point azimuth) and, with
/// [`DecodeFlavor::Nebula`], Nebula's block-level prefilter, whose bounds are `100 ×` the
/// configured degrees as Nebula computes them (`cloud_min_angle`/`cloud_max_angle`), not
/// wrapped: 360° is 36000, and `min > max` passes every block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VelodyneFov {
    /// The point-level test.
    pub point: crate::scan::Fov,
    /// Nebula's block bounds `(min, max)`, 0.01°, in 0..=36000.
    pub nebula_block_cdeg: (u32, u32),
}

impl From<crate::valid::Fov> for VelodyneFov {
    fn from(f: crate::valid::Fov) -> Self {
        let raw = |d: crate::valid::Degrees| (d.get() * 100.0).round() as u32;
        VelodyneFov {
            point: f.into(),
            nebula_block_cdeg: (raw(f.min()), raw(f.max())),
        }
    }
}

impl VelodyneFov {
    /// Nebula's block-level test on a block azimuth `az` (0.01°).
    fn block_passes(self, az: u16) -> bool {
        let (min, max) = self.nebula_block_cdeg;
        let az = u32::from(az);
        (min < max && az >= min && az <= max) || min > max
    }
}

/// Decoder settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderSettings {
    /// Points with range `<= min_range_m` are dropped, m (exclusive, as Nebula).
    pub min_range_m: f64,
    /// Points with range `>= max_range_m` are dropped, m (exclusive, as Nebula).
    pub max_range_m: f64,
    /// Optional field of view; `None` keeps every azimuth.
    pub fov: Option<VelodyneFov>,
    /// Azimuth interpolation and dual-return labelling rules.
    pub flavor: DecodeFlavor,
}

/// One decoded point plus what the scan assembler needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodedPoint {
    /// The point; `time_stamp` is left 0 (the assembler sets it).
    pub point: PointXYZIRCAEDT,
    /// Corrected azimuth, 0.01° units, 0..35999.
    pub azimuth_cdeg: u16,
    /// Firing time after the packet timestamp, ns ([`firing_offset_ns`]).
    pub offset_ns: u32,
    /// Block index 0..11 the point came from.
    pub block: u8,
    /// Slot 0..31 inside the block (laser id = slot % 16, firing sequence = slot / 16).
    pub slot: u8,
}

#[cfg(test)]
mod tests;
