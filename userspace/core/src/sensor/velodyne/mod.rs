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

pub mod block;
pub(crate) mod dense;
pub mod multi;
pub mod position;

pub use block::BlockPoints;

use std::f64::consts::PI;

use crate::point::{PointXYZIRCAEDT, ReturnType};

use super::calibration::VelodyneCalibration;
use crate::HostTime;
use crate::frame::Frame;
use crate::scan::{PacketInfo, ScanAssembler};
use crate::vendor::{
    ConfigError, DecodeFlavor, PipelineOptions, ReturnMode, SensorConfig, SensorModel,
    VendorDecoder,
};

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
/// Number of azimuth units per turn (0.01° units).
pub const AZIMUTH_UNITS: u32 = 36_000;

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

/// Why a payload is not a valid VLP-16 data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The payload is not 1206 bytes long.
    #[error("payload is {len} bytes, a VLP-16 data packet is 1206")]
    Length {
        /// Payload length, bytes.
        len: usize,
    },
    /// A block does not start with `0xFF 0xEE`.
    #[error("block {block} flag is {flag:#06x}, expected 0xffee")]
    BlockFlag {
        /// Block index 0..11.
        block: usize,
        /// The two flag bytes, big-endian for display.
        flag: u16,
    },
    /// A block azimuth is 36000 or more (0.01° units).
    #[error("block {block} azimuth {azimuth} is outside [0, 35999] (0.01 deg)")]
    Azimuth {
        /// Block index 0..11.
        block: usize,
        /// Raw azimuth value.
        azimuth: u16,
    },
    /// Byte 1204 is not 0x37, 0x38 or 0x39.
    #[error("return mode byte {0:#04x} is not 0x37/0x38/0x39")]
    ReturnMode(u8),
}

/// How a payload that is not a valid data packet is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Not a data packet at all (e.g. a 512-byte position packet): counted `ignored`.
    Ignored,
    /// Looks like a data packet but is damaged: counted `malformed`.
    Malformed(PacketError),
}

/// Payload sizes within this many bytes of 1206 are treated as damaged data packets.
pub const MALFORMED_LEN_TOLERANCE: usize = 64;

/// A zero-copy view of a VLP-16 data packet (smoltcp `wire` style).
///
/// [`Packet::new_checked`] validates the length, every block flag, every block azimuth and the
/// return-mode byte once; after that no accessor can panic or read out of bounds.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it. Accessors on an unchecked short buffer return 0
    /// instead of panicking, but use [`Packet::new_checked`] for untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps and validates a buffer (see the module table).
    ///
    /// # Errors
    /// [`PacketError::Length`] unless exactly 1206 bytes, [`PacketError::BlockFlag`] for a block
    /// not starting with `FF EE`, [`PacketError::Azimuth`] for an azimuth >= 36000,
    /// [`PacketError::ReturnMode`] for a byte 1204 other than 0x37/0x38/0x39.
    pub fn new_checked(buffer: T) -> Result<Self, PacketError> {
        let p = Self { buffer };
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), PacketError> {
        let b = self.buffer.as_ref();
        if b.len() != DATA_PACKET_LEN {
            return Err(PacketError::Length { len: b.len() });
        }
        for block in 0..BLOCKS {
            let o = block * BLOCK_LEN;
            if b[o..o + 2] != BLOCK_FLAG {
                return Err(PacketError::BlockFlag {
                    block,
                    flag: u16::from_be_bytes([b[o], b[o + 1]]),
                });
            }
            let azimuth = self.azimuth(block);
            if u32::from(azimuth) >= AZIMUTH_UNITS {
                return Err(PacketError::Azimuth { block, azimuth });
            }
        }
        match b[RETURN_MODE_OFFSET] {
            RETURN_MODE_STRONGEST | RETURN_MODE_LAST | RETURN_MODE_DUAL => Ok(()),
            other => Err(PacketError::ReturnMode(other)),
        }
    }

    fn byte(&self, offset: usize) -> u8 {
        self.buffer.as_ref().get(offset).copied().unwrap_or(0)
    }

    /// The whole underlying buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Byte at `offset`, 0 past the end of the buffer.
    pub(crate) fn byte_at(&self, offset: usize) -> u8 {
        self.byte(offset)
    }

    fn u16_at(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.byte(offset), self.byte(offset + 1)])
    }

    /// Azimuth of block `block` (0..11), 0.01° units (bytes `100·b+2..+4`).
    pub fn azimuth(&self, block: usize) -> u16 {
        self.u16_at(block * BLOCK_LEN + 2)
    }

    /// Raw distance of slot `slot` (0..31) in block `block`, 2 mm units; 0 means no return.
    pub fn distance_raw(&self, block: usize, slot: usize) -> u16 {
        self.u16_at(block * BLOCK_LEN + 4 + 3 * slot)
    }

    /// Calibrated reflectivity of slot `slot` (0..31) in block `block` (0..255).
    pub fn reflectivity(&self, block: usize, slot: usize) -> u8 {
        self.byte(block * BLOCK_LEN + 6 + 3 * slot)
    }

    /// Timestamp: µs past the top of the hour of the first firing of block 0 (bytes 1200..1204).
    pub fn timestamp_us(&self) -> u32 {
        let o = TIMESTAMP_OFFSET;
        u32::from_le_bytes([
            self.byte(o),
            self.byte(o + 1),
            self.byte(o + 2),
            self.byte(o + 3),
        ])
    }

    /// Raw return-mode byte (offset 1204).
    pub fn return_mode_byte(&self) -> u8 {
        self.byte(RETURN_MODE_OFFSET)
    }

    /// Decoded return mode (offset 1204); `Strongest` for an unchecked unknown byte.
    pub fn return_mode(&self) -> ReturnMode {
        match self.return_mode_byte() {
            RETURN_MODE_LAST => ReturnMode::Last,
            RETURN_MODE_DUAL => ReturnMode::Dual,
            _ => ReturnMode::Strongest,
        }
    }

    /// Product-id byte (offset 1205); informative only.
    pub fn product_id(&self) -> u8 {
        self.byte(PRODUCT_ID_OFFSET)
    }
}

/// Classifies a payload: `Ok(packet)` for a valid data packet, else how to count it.
///
/// Rule: a payload of exactly 1206 bytes that fails [`Packet::new_checked`] is malformed; one
/// whose length is within [`MALFORMED_LEN_TOLERANCE`] bytes of 1206, or that starts with the
/// block flag `FF EE`, is a damaged (truncated / padded) data packet, hence malformed; any other
/// size (512-byte position packets, foreign traffic) is ignored.
pub fn classify(payload: &[u8]) -> Result<Packet<&[u8]>, Rejection> {
    match Packet::new_checked(payload) {
        Ok(p) => Ok(p),
        Err(e @ PacketError::Length { len }) => {
            if len.abs_diff(DATA_PACKET_LEN) <= MALFORMED_LEN_TOLERANCE
                || payload.starts_with(&BLOCK_FLAG)
            {
                Err(Rejection::Malformed(e))
            } else {
                Err(Rejection::Ignored)
            }
        }
        Err(e) => Err(Rejection::Malformed(e)),
    }
}

/// Firing time of `slot` in `block`, ns after the packet timestamp (manual section 9, firing
/// timing table): single return `(2·b + slot/16)·55.296 µs + (slot%16)·2.304 µs`; dual return
/// uses the pair index, `(2·(b/2) + slot/16)·55.296 µs + (slot%16)·2.304 µs`.
pub const fn firing_offset_ns(mode: ReturnMode, block: usize, slot: usize) -> u32 {
    let seq = match mode {
        ReturnMode::Dual => 2 * (block / 2) + slot / LASERS,
        _ => 2 * block + slot / LASERS,
    };
    seq as u32 * SEQUENCE_NS + (slot % LASERS) as u32 * FIRING_NS
}

/// Field-of-view filter on the corrected point azimuth, 0.01° units, inclusive bounds
/// (Nebula's `cloud_min_angle`/`cloud_max_angle` semantics; `min > max` wraps through 0°).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FovCdeg {
    /// Lower bound, 0.01°.
    pub min: u32,
    /// Upper bound, 0.01°.
    pub max: u32,
}

impl FovCdeg {
    fn block_passes(self, az: u16) -> bool {
        let az = u32::from(az);
        (self.min < self.max && az >= self.min && az <= self.max) || self.min > self.max
    }

    /// The point-level test: the one field of view of every vendor ([`crate::scan::Fov`]).
    pub(crate) fn point_passes(self, az: u32) -> bool {
        crate::scan::Fov {
            min_cdeg: self.min % AZIMUTH_UNITS,
            max_cdeg: self.max % AZIMUTH_UNITS,
        }
        .contains_cdeg(az)
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
    pub fov: Option<FovCdeg>,
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

/// The VLP-16 point decoder: calibration + settings, no state between packets.
#[derive(Clone)]
pub struct Vlp16Decoder {
    calib: VelodyneCalibration,
    settings: DecoderSettings,
    /// `(cos, sin)` of every azimuth unit, f32 (as Nebula's lookup tables), then the azimuth
    /// in rad (`cdeg · π/18000`, f64 rounded to f32) and padding.
    trig: TrigTable,
    /// Range gate of each slot as an inclusive window of raw distance values
    /// ([`raw_window`]); `(1, 0)` (empty) when the slot's laser is not in the calibration.
    raw_lo: [u16; SLOTS_PER_BLOCK],
    /// See `raw_lo`.
    raw_hi: [u16; SLOTS_PER_BLOCK],
    /// Firing time of each slot after its block's first firing, ns.
    slot_ns: [u32; SLOTS_PER_BLOCK],
    /// `rot_correction` of each slot's laser, 0.01° (f64, as Nebula computes it).
    slot_rot: [f64; SLOTS_PER_BLOCK],
    /// `dist_correction` of each slot's laser, m.
    slot_corr: [f32; SLOTS_PER_BLOCK],
    /// Cosine of each slot's laser elevation.
    slot_cos_vert: [f32; SLOTS_PER_BLOCK],
    /// Sine of each slot's laser elevation.
    slot_sin_vert: [f32; SLOTS_PER_BLOCK],
    /// Elevation of each slot's laser, rad.
    slot_vert: [f32; SLOTS_PER_BLOCK],
    /// Ring (channel) of each slot's laser.
    slot_ring: [u16; SLOTS_PER_BLOCK],
    /// Firing time of each slot in µs as Nebula's f32 expression `laser·2.304 + firing·55.296`.
    slot_us: [f32; SLOTS_PER_BLOCK],
    /// `frac[diff][slot] = diff · slot_us[slot] / 110.592` (f32, Nebula's expression) for every
    /// integer block advance `diff` in `0..FRAC_DIFFS`: the hot loop looks the interpolation
    /// up instead of dividing; larger advances (only across gaps) are computed directly.
    frac: Box<[[f32; SLOTS_PER_BLOCK]]>,
}

/// Block advances (0.01°) covered by the interpolation table: up to 2.55°, far above the
/// 0.4° of a VLP-16 at 20 Hz.
const FRAC_DIFFS: usize = 256;

/// One laser's constants, from which [`Vlp16Decoder::new`] builds the per-slot arrays (slot `k`
/// fires laser `k % 16`).
#[derive(Clone, Copy, Debug, Default)]
struct LaserConst {
    /// `rot_correction` in 0.01° units (f64, as Nebula computes it).
    rot_cdeg: f64,
    cos_vert: f32,
    sin_vert: f32,
    dist_correction: f32,
    vert: f32,
    ring: u16,
}

/// Radians per 0.01° (`π / 18000`).
pub(crate) const RAD_PER_CDEG: f64 = PI / 18_000.0;

/// The largest f32 `F` with `f64::from(F) <= m`, so that for every f32 `x`,
/// `f64::from(x) > m` iff `x > F` (NaN `m`: NaN, both sides always false).
pub(crate) fn f32_above(m: f64) -> f32 {
    let c = m as f32;
    if f64::from(c) > m { c.next_down() } else { c }
}

/// The smallest f32 `G` with `f64::from(G) >= m`, so that for every f32 `x`,
/// `f64::from(x) < m` iff `x < G` (NaN `m`: NaN, both sides always false).
pub(crate) fn f32_below(m: f64) -> f32 {
    let c = m as f32;
    if f64::from(c) < m { c.next_up() } else { c }
}

/// Distance in m of raw value `raw` (units of `res` m) with the laser's `dist_correction`
/// `corr` m, in Nebula's f32 arithmetic: `raw·res`, plus `corr` unless the product is
/// `<= 1e-6` (no return).
#[inline(always)]
pub(crate) fn raw_distance(raw: u16, res: f32, corr: f32) -> f32 {
    let x = f32::from(raw) * res;
    // `x + (-0.0)` is `x`, bit for bit: a select of the addend, not a branch.
    x + if x > 1e-6 { corr } else { -0.0 }
}

/// The range gate `raw != 0 && min_f < raw_distance(raw) < max_f` as an inclusive window
/// `(lo, hi)` of raw values (`lo > hi`: nothing passes), so the decoder's per-slot test is two
/// integer compares. Exact for `res > 1e-6` m (every real sensor: 2 mm or 4 mm): then
/// `raw·res > 1e-6` for every `raw >= 1`, so `raw_distance` is `raw·res + corr`, non-decreasing
/// in `raw` (f32 multiplication and addition by constants are monotonic), and the passing
/// values form one interval, found by bisection. For a smaller `res` (the calibration loader
/// accepts down to any positive value) the window is the hull of the passing values, found by
/// a scan, and may pass a few raw values the float test would not.
pub(crate) fn raw_window(res: f32, corr: f32, min_f: f32, max_f: f32) -> (u16, u16) {
    let pass = |r: u16| {
        let d = raw_distance(r, res, corr);
        d > min_f && d < max_f
    };
    if res <= 1e-6 {
        let lo = (1..=u16::MAX).find(|&r| pass(r));
        let hi = (1..=u16::MAX).rev().find(|&r| pass(r));
        return lo.zip(hi).unwrap_or((1, 0));
    }
    // Smallest raw >= 1 above the minimum, and the smallest at or past the maximum.
    let first = |pred: &dyn Fn(f32) -> bool| {
        let (mut lo, mut hi) = (1u32, 1u32 << 16);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(raw_distance(mid as u16, res, corr)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    let lo = first(&|d| d > min_f);
    let end = first(&|d| d >= max_f);
    if lo >= end || lo > u32::from(u16::MAX) {
        return (1, 0);
    }
    (lo as u16, (end - 1) as u16)
}

/// Dual-return point type by `[identical][first][strongest]`, index
/// `identical·4 + first·2 + strongest` ([`ReturnType`] codes).
pub(crate) const DUAL_TYPES: [u8; 8] = [
    ReturnType::LastWeak as u8,
    ReturnType::LastStrongest as u8,
    ReturnType::FirstWeak as u8,
    ReturnType::FirstStrongest as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
];

/// Dual-return type of a point with raw range `raw` and reflectivity `intensity` whose
/// partner return (the other block of the pair) has `other` and `other_i`: a partner without a
/// return (0) or with the same range makes it `identical`; otherwise first/last by range
/// (`nebula`: the larger range counts as first, see [`DecodeFlavor`]) and strongest/weak by
/// reflectivity (a tie makes the last one the strongest). Returns a [`ReturnType`] code.
#[inline(always)]
pub(crate) fn dual_type(raw: u16, intensity: u8, other: u16, other_i: u8, nebula: bool) -> u8 {
    // Identical partners are the common case in real captures: a predictable branch.
    if other == 0 || other == raw {
        return ReturnType::Identical as u8;
    }
    let first = if nebula { raw > other } else { raw < other };
    let strongest = (intensity > other_i) | ((intensity == other_i) & !first);
    DUAL_TYPES[usize::from(first) * 2 + usize::from(strongest)]
}

/// Stage 1 of the Velodyne decoders: bit `k` of the result is set when slot `k`'s raw range
/// (bytes 0-1 of `[distance lo, distance hi, reflectivity]`) lies in `[lo[k], hi[k]]` and,
/// with a `partner` block (the first block of a dual-return pair), differs from the partner
/// slot's raw range (identical returns are merged into the partner's point).
///
/// x86-64: SSE2 (part of the x86-64 baseline), eight slots per instruction
/// ([`crate::simd::velodyne_slot_mask`]): an unsigned window test as two saturating
/// subtractions, the partner test as an equality, packed to one byte per slot and collected
/// with `movemask`. Elsewhere: the same test per slot.
#[inline(always)]
pub(crate) fn slot_mask(
    slots: &[[u8; 3]; SLOTS_PER_BLOCK],
    lo: &[u16; SLOTS_PER_BLOCK],
    hi: &[u16; SLOTS_PER_BLOCK],
    partner: Option<&[[u8; 3]; SLOTS_PER_BLOCK]>,
) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        crate::simd::velodyne_slot_mask(slots, lo, hi, partner)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut mask = 0u32;
        for k in 0..SLOTS_PER_BLOCK {
            let raw = u16::from_le_bytes([slots[k][0], slots[k][1]]);
            let same = partner.is_some_and(|p| u16::from_le_bytes([p[k][0], p[k][1]]) == raw);
            let keep = (raw >= lo[k]) & (raw <= hi[k]) & !same;
            mask |= u32::from(keep) << k;
        }
        mask
    }
}

/// [`AZIMUTH_UNITS`] as an index bound.
pub(crate) const AZ_USIZE: usize = AZIMUTH_UNITS as usize;

/// `[cos, sin]` of every azimuth unit (0.01°), in f32 of the f32 angle (as Nebula's lookup
/// tables). A fixed-size array, so an index reduced modulo 36000 needs no bounds check.
/// Shared by every Velodyne decoder of the process (288 KiB, built once): a daemon serving many
/// sensors keeps one copy in cache instead of one per sensor. The angle in rad is computed
/// ([`azimuth_rad`]), not stored: the table stays small enough for the L2 cache.
pub(crate) type TrigTable = &'static [[f32; 2]; AZ_USIZE];

/// An azimuth in 0.01° as rad: `cdeg · π/18000` in f64, rounded to f32.
#[inline(always)]
pub(crate) fn azimuth_rad(cdeg: u32) -> f32 {
    (f64::from(cdeg) * RAD_PER_CDEG) as f32
}

/// The [`TrigTable`], built on first use.
pub(crate) fn trig_table() -> TrigTable {
    static TABLE: std::sync::OnceLock<Box<[[f32; 2]; AZ_USIZE]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let v: Vec<[f32; 2]> = (0..AZIMUTH_UNITS)
            .map(|i| {
                let rad = (f64::from(i) * 0.01 * PI / 180.0) as f32;
                [rad.cos(), rad.sin()]
            })
            .collect();
        v.into_boxed_slice()
            .try_into()
            .unwrap_or_else(|_| unreachable!("36000 entries"))
    })
}

/// `round()` of a non-negative f32 without a libm call: exact, since `x + 0.5` is exact in f64
/// for every f32 `x`, and truncation of a non-negative value is `floor`. Equals `f32::round`
/// (half away from zero) for `0 <= x < 2^31` (azimuths in 0.01° are far below). The
/// conversion goes through `i32` because SSE2 converts f64 lanes to i32 (not u32) in one
/// instruction, so array loops over it vectorise.
#[inline(always)]
fn round_pos(x: f32) -> u32 {
    (f64::from(x) + 0.5) as i32 as u32
}

/// A corrected azimuth `azf` in 0.01° (possibly negative, at most one turn off) rounded to the
/// nearest 0.01° and brought into [0, 36000) (Nebula's rounding: negative values are lifted by a
/// turn before rounding).
#[inline(always)]
fn wrap_round_cdeg(azf: f32) -> u32 {
    wrap_cdeg(lift_round_cdeg(azf))
}

/// A corrected azimuth `azf` in 0.01° lifted by a turn when negative and rounded to the
/// nearest 0.01° (Nebula's rounding), not yet brought into [0, 36000).
#[inline(always)]
pub(crate) fn lift_round_cdeg(azf: f32) -> u32 {
    round_pos(
        azf + if azf < 0.0 {
            AZIMUTH_UNITS as f32
        } else {
            -0.0
        },
    )
}

/// `azc` (0.01°) brought into [0, 36000); the division only runs for the rare value past a turn.
#[inline(always)]
fn wrap_cdeg(azc: u32) -> u32 {
    if azc >= AZIMUTH_UNITS {
        azc % AZIMUTH_UNITS
    } else {
        azc
    }
}

impl std::fmt::Debug for Vlp16Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The 36,000-entry trig table is left out.
        f.debug_struct("Vlp16Decoder")
            .field("calib", &self.calib)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Vlp16Decoder {
    /// Builds a decoder. `calib` must have 16 lasers (as [`VelodyneCalibration::from_bytes`]
    /// with 16 enforces); missing lasers decode with zero corrections.
    pub fn new(calib: VelodyneCalibration, settings: DecoderSettings) -> Self {
        let trig = trig_table();
        let mut lasers = [LaserConst::default(); LASERS];
        let (min_f, max_f) = (
            f32_above(settings.min_range_m),
            f32_below(settings.max_range_m),
        );
        let res = calib.distance_resolution_m;
        let mut windows = [(1u16, 0u16); LASERS];
        for ((lc, w), l) in lasers.iter_mut().zip(&mut windows).zip(&calib.lasers) {
            *w = raw_window(res, l.dist_correction, min_f, max_f);
            *lc = LaserConst {
                rot_cdeg: f64::from(l.rot_correction) * 180.0 / PI * 100.0,
                cos_vert: l.cos_vert,
                sin_vert: l.sin_vert,
                dist_correction: l.dist_correction,
                vert: l.vert_correction,
                ring: l.ring,
            };
        }
        let slot_us = std::array::from_fn(|slot| {
            (slot % LASERS) as f32 * 2.304f32 + (slot / LASERS) as f32 * 55.296f32
        });
        let frac = (0..FRAC_DIFFS)
            .map(|d| std::array::from_fn(|slot| d as f32 * slot_us[slot] / 110.592f32))
            .collect();
        Self {
            calib,
            settings,
            trig,
            raw_lo: std::array::from_fn(|slot| windows[slot % LASERS].0),
            raw_hi: std::array::from_fn(|slot| windows[slot % LASERS].1),
            slot_rot: std::array::from_fn(|slot| lasers[slot % LASERS].rot_cdeg),
            slot_corr: std::array::from_fn(|slot| lasers[slot % LASERS].dist_correction),
            slot_cos_vert: std::array::from_fn(|slot| lasers[slot % LASERS].cos_vert),
            slot_sin_vert: std::array::from_fn(|slot| lasers[slot % LASERS].sin_vert),
            slot_vert: std::array::from_fn(|slot| lasers[slot % LASERS].vert),
            slot_ring: std::array::from_fn(|slot| lasers[slot % LASERS].ring),
            slot_ns: std::array::from_fn(|slot| firing_offset_ns(ReturnMode::Strongest, 0, slot)),
            slot_us,
            frac,
        }
    }

    /// The decoder settings.
    pub fn settings(&self) -> &DecoderSettings {
        &self.settings
    }

    /// Block azimuth and per-block azimuth advance (0.01° units) used for interpolation, from
    /// the packet's 12 block azimuths `azimuths` (0.01°).
    #[inline(always)]
    fn block_azimuth(&self, azimuths: &[u16; BLOCKS], dual: bool, block: usize) -> (u16, f32) {
        let rot = |b: usize| azimuths[b.min(BLOCKS - 1)];
        let diff = |a: u16, b: u16| {
            (AZIMUTH_UNITS
                .wrapping_add(u32::from(b))
                .wrapping_sub(u32::from(a))
                % AZIMUTH_UNITS) as f32
        };
        match (self.settings.flavor, dual) {
            // Nebula `Vlp16Decoder::unpack`, reproduced exactly. The azimuth of block b > 0 is
            // the value cached as "next" while decoding block b-1: rot[b] in single mode but
            // rot[b+1] in dual mode, so an odd (second-return) block takes the *next* pair's
            // azimuth. The advance is rot[b+step] - az(b) while b+step < 12 (step 1 single,
            // 2 dual); block 12-step gets 0 (no interpolation), and in dual mode block 11 reuses
            // the advance of block 9, rot[11] - rot[10] (0 for well-formed pairs).
            (DecodeFlavor::Nebula, false) => {
                let az = rot(block);
                let d = if block < BLOCKS - 1 {
                    diff(az, rot(block + 1))
                } else {
                    0.0
                };
                (az, d)
            }
            (DecodeFlavor::Nebula, true) => {
                let az = if block == 0 { rot(0) } else { rot(block + 1) };
                let d = if block < BLOCKS - 2 {
                    diff(az, rot(block + 2))
                } else if block == BLOCKS - 2 {
                    0.0
                } else {
                    // Block 11 reuses the advance computed for block 9: rot[11] - rot[10].
                    diff(rot(10), rot(11))
                };
                (az, d)
            }
            // VLP-16 manual: interpolate between this block (pair) and the next one; the last
            // block (pair) reuses the previous advance; a jump over [`MAX_ADVANCE_CDEG`] is a
            // pause in firing, not rotation ([`pick_advance`]).
            (DecodeFlavor::Manual, dual) => {
                let step = 1 + usize::from(dual);
                let first = block - block % step;
                let az = rot(first);
                let fwd = (first + step < BLOCKS).then(|| diff(az, rot(first + step)));
                let back = || (first >= step).then(|| diff(rot(first - step), az));
                (az, pick_advance(fwd, back))
            }
        }
    }

    /// Decodes one validated packet, calling `emit` for every point that survives the range and
    /// field-of-view filters, in packet order: block, firing sequence, laser; except dual
    /// return under [`DecodeFlavor::Manual`], which emits each block pair `(2p, 2p+1)` per
    /// firing sequence (block 2p slots 0..15, block 2p+1 slots 0..15, then slots 16..31 of
    /// each), so every laser's firing times are non-decreasing.
    ///
    /// Rules (Nebula-compatible): a zero distance is "no return"; distance = raw·resolution
    /// (+ `dist_correction` when non-zero), kept when `min_range < d < max_range`. Dual mode:
    /// a point of an odd block (strongest) whose raw distance equals the even block's (last)
    /// is the same return and is skipped; the even-block point is then [`ReturnType::Identical`],
    /// as is any point whose partner slot has no return. Otherwise the type combines
    /// first/last (by distance) and strongest/weak (by reflectivity; on a tie the "last" one
    /// is strongest); see [`DecodeFlavor`] for which distance counts as "first".
    pub fn decode(&self, p: &Packet<&[u8]>, mut emit: impl FnMut(DecodedPoint)) {
        self.decode_blocks(p, |b| b.for_each(&mut emit));
    }

    /// Decodes one validated packet block by block (the rules of [`Self::decode`]): `sink`
    /// gets each block that keeps at least one point as a [`BlockPoints`], in packet order.
    ///
    /// Hot loop: the packet is viewed as 12 fixed-size `[u8; 100]` blocks so no byte access is
    /// bounds-checked; the slots that carry a point come from one SIMD pass (`slot_mask`);
    /// sines/cosines, per-laser constants and the interpolation `diff · t / 110.592`
    /// (Nebula's f32 expression, bit-exact) are tables: no division per point. Single return
    /// (nearly every slot kept) computes every field for all 32 slots in array loops that
    /// vectorise; dual return (about a quarter kept) computes only the kept slots.
    pub fn decode_blocks(&self, p: &Packet<&[u8]>, sink: impl FnMut(&BlockPoints<'_>)) {
        // Two monomorphised loops: the single-return one carries no dual-return code.
        if p.return_mode() == ReturnMode::Dual {
            self.decode_mode::<true>(p, sink);
        } else {
            self.decode_mode::<false>(p, sink);
        }
    }

    #[inline(always)]
    fn decode_mode<const DUAL: bool>(
        &self,
        p: &Packet<&[u8]>,
        mut sink: impl FnMut(&BlockPoints<'_>),
    ) {
        let Ok(buf) = <&[u8; DATA_PACKET_LEN]>::try_from(p.as_bytes()) else {
            return;
        };
        let (blocks, _) = buf.as_chunks::<BLOCK_LEN>();
        let mode = p.return_mode();
        let s = &self.settings;
        let res = self.calib.distance_resolution_m;
        let nebula = s.flavor == DecodeFlavor::Nebula;
        let single_type = match mode {
            ReturnMode::Last => ReturnType::Last,
            ReturnMode::First => ReturnType::First,
            _ => ReturnType::Strongest,
        } as u8;
        let empty = [0u8; BLOCK_LEN];
        let azimuths: [u16; BLOCKS] = std::array::from_fn(|b| {
            blocks
                .get(b)
                .map_or(0, |k| u16::from_le_bytes([k[2], k[3]]))
        });
        let mut bp = BlockPoints::new(&self.slot_ring, &self.slot_vert, &self.slot_ns);
        if !DUAL {
            bp.return_type = [single_type; SLOTS_PER_BLOCK];
        }
        // Computes block `$block` into `$bp` and gives its mask of kept slots (0: nothing to
        // emit). A macro, not a function: both loops below get it inlined with their own
        // `BlockPoints`, as one loop did before.
        macro_rules! fill {
            ($bp:ident, $block:expr) => {{
                let block: usize = $block;
                let bp = &mut $bp;
                'fill: {
                    let Some(blk) = blocks.get(block) else {
                        break 'fill 0;
                    };
                    let (az, diff) = self.block_azimuth(&azimuths, DUAL, block);
                    if nebula
                        && let Some(fov) = s.fov
                        && !fov.block_passes(az)
                    {
                        break 'fill 0;
                    }
                    let pblk = if DUAL {
                        blocks.get(block ^ 1).unwrap_or(&empty)
                    } else {
                        &empty
                    };
                    let odd = DUAL && block % 2 == 1;
                    let slots = slot_view(blk);
                    let pslots = slot_view(pblk);
                    // Stage 1: the slots carrying a point: raw range inside the slot's window
                    // (non-zero, inside the range filter, laser in the calibration; [`raw_window`])
                    // and, in an odd dual block, different from the partner's (identical returns are
                    // merged).
                    let mut mask = slot_mask(slots, &self.raw_lo, &self.raw_hi, odd.then_some(pslots));
                    if mask == 0 {
                        break 'fill 0;
                    }
                    let azf0 = f32::from(az);
                    // `diff` is an integer number of 0.01° (a difference of u16 azimuths).
                    let computed: [f32; SLOTS_PER_BLOCK];
                    let table = match self.frac.get(diff as usize) {
                        Some(t) => t,
                        None => {
                            computed =
                                std::array::from_fn(|slot| diff * self.slot_us[slot] / 110.592f32);
                            &computed
                        }
                    };
                    bp.block = block as u8;
                    bp.block_ns = firing_offset_ns(mode, block, 0);
                    if DUAL {
                        // Stage 2, kept slots only.
                        let mut m = mask;
                        while m != 0 {
                            let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                            m &= m - 1;
                            let [r0, r1, intensity] = slots[slot];
                            let raw = u16::from_le_bytes([r0, r1]);
                            let distance = raw_distance(raw, res, self.slot_corr[slot]);
                            let azc = wrap_round_cdeg(
                                (f64::from(azf0 + table[slot]) - self.slot_rot[slot]) as f32,
                            );
                            let [cos_az, sin_az] = self.trig[azc.min(AZIMUTH_UNITS - 1) as usize];
                            let az_rad = azimuth_rad(azc);
                            let xy = distance * self.slot_cos_vert[slot];
                            let [o0, o1, other_i] = pslots[slot];
                            bp.x[slot] = xy * cos_az;
                            bp.y[slot] = -(xy * sin_az);
                            bp.z[slot] = distance * self.slot_sin_vert[slot];
                            bp.distance[slot] = distance;
                            bp.azimuth[slot] = az_rad;
                            bp.azimuth_cdeg[slot] = azc;
                            bp.intensity[slot] = intensity;
                            bp.return_type[slot] = dual_type(
                                raw,
                                intensity,
                                u16::from_le_bytes([o0, o1]),
                                other_i,
                                nebula,
                            );
                        }
                    } else {
                        // Stage 2, all 32 slots at once ([`dense::fill`]).
                        dense::fill(
                            bp,
                            buf,
                            block,
                            table,
                            azf0,
                            dense::DenseLasers {
                                corr: &self.slot_corr,
                                cos_vert: &self.slot_cos_vert,
                                sin_vert: &self.slot_sin_vert,
                                rot: &self.slot_rot,
                                res,
                                trig: self.trig,
                            },
                        );
                    }
                    if let Some(fov) = s.fov {
                        let mut m = mask;
                        while m != 0 {
                            let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                            m &= m - 1;
                            if !fov.point_passes(bp.azimuth_cdeg[slot]) {
                                mask &= !(1 << slot);
                            }
                        }
                    }
                    mask
                }
            }};
        }
        if DUAL && !nebula {
            // Default rules, dual return: the two blocks of a pair are emitted per firing
            // sequence (even block slots 0..15, odd block slots 0..15, then slots 16..31 of
            // each), so every channel's time stamps are non-decreasing.
            const LOW: u32 = (1 << LASERS) - 1;
            let mut odd = BlockPoints::new(&self.slot_ring, &self.slot_vert, &self.slot_ns);
            for pair in 0..BLOCKS / 2 {
                let me = fill!(bp, 2 * pair);
                let mo = fill!(odd, 2 * pair + 1);
                // Block order is already sequence order when the even block has no point of
                // the second sequence or the odd block none of the first: two sinks, not four.
                let halves: &[(bool, u32)] = if me & !LOW == 0 || mo & LOW == 0 {
                    &[(true, u32::MAX), (false, u32::MAX)]
                } else {
                    &[(true, LOW), (false, LOW), (true, !LOW), (false, !LOW)]
                };
                for &(first, m) in halves {
                    let part = if first { &mut bp } else { &mut odd };
                    part.mask = m & if first { me } else { mo };
                    if part.mask != 0 {
                        sink(part);
                    }
                }
            }
        } else {
            for block in 0..BLOCKS {
                let mask = fill!(bp, block);
                if mask != 0 {
                    bp.mask = mask;
                    sink(&bp);
                }
            }
        }
    }
}

/// The 32 `[distance lo, distance hi, reflectivity]` slots of a block.
#[inline(always)]
fn slot_view(blk: &[u8; BLOCK_LEN]) -> &[[u8; 3]; SLOTS_PER_BLOCK] {
    let (_, body) = blk.split_first_chunk::<4>().unwrap_or((&[0; 4], &[]));
    let (slots, _) = body.as_chunks::<3>();
    <&[[u8; 3]; SLOTS_PER_BLOCK]>::try_from(slots).unwrap_or(&[[0; 3]; SLOTS_PER_BLOCK])
}

// ---------------------------------------------------------------------------------------------
// Model detection: the product byte against the calibration's laser count.
// ---------------------------------------------------------------------------------------------

/// Velodyne models with `lasers` lasers ([`multi::laser_count`]), in [`SensorModel::ALL`]
/// order: one for 16 (VLP-16) and 128 (VLS-128), two for 32 (VLP-32C, HDL-32E) and 64
/// (HDL-64E S2, S3), none otherwise.
pub fn models_with_lasers(lasers: usize) -> Vec<SensorModel> {
    SensorModel::ALL
        .iter()
        .copied()
        .filter(|&m| multi::laser_count(m) == lasers && lasers > 0)
        .collect()
}

/// Laser count of a Velodyne calibration YAML file's contents `calibration` (`path` names it
/// in errors): the `n` in 16, 32, 64, 128 for which [`VelodyneCalibration::from_bytes`]
/// accepts it (its `num_lasers` and `lasers` entries agree with `n`).
///
/// # Errors
/// When no count fits: the error [`VelodyneCalibration::from_bytes`] gives for
/// `prefer_lasers` lasers (naming the field: `num_lasers`, `lasers`, `lasers[i].…`), or
/// [`ConfigError::CalibrationIo`] for contents that are not UTF-8.
pub fn calibration_laser_count(
    calibration: &[u8],
    path: &std::path::Path,
    prefer_lasers: usize,
) -> Result<usize, ConfigError> {
    for n in [16, 32, 64, 128] {
        if VelodyneCalibration::from_bytes(calibration, n, path).is_ok() {
            return Ok(n);
        }
    }
    VelodyneCalibration::from_bytes(calibration, prefer_lasers.max(1), path).map(|c| c.lasers.len())
}

/// Whether [`confirm_detected_model`] looks at the calibration for `named`: a Velodyne model
/// with a known laser count. A caller reads the file only then.
pub fn detection_needs_calibration(named: SensorModel) -> bool {
    named.family() == crate::vendor::Family::Velodyne && multi::laser_count(named) != 0
}

/// Model detection for a capture without a configured model (`decode` without `--sensor`):
/// `named` is the model the packets' product byte (offset 1205) names, `calibration` the
/// contents of the calibration file `path` given. Non-Velodyne models are returned unchanged
/// ([`detection_needs_calibration`]: `calibration` is not looked at). For a Velodyne model
/// the calibration's laser count ([`calibration_laser_count`]) decides:
/// * it equals `named`'s: `named`, no warning;
/// * it differs and one Velodyne model has that many lasers ([`models_with_lasers`]): that
///   model, with a warning to show the user (firmware that sends 0x21, HDL-32E, on a VLP-16
///   exists);
/// * it differs and two models have that many lasers (32: VLP-32C or HDL-32E; 64: HDL-64E S2
///   or S3), or none: an error asking for `--sensor`.
///
/// # Errors
/// [`ConfigError::Calibration`] naming `num_lasers` and both models for the last case; the
/// calibration's own error when it fits no laser count.
pub fn confirm_detected_model(
    named: SensorModel,
    calibration: &[u8],
    path: &std::path::Path,
) -> Result<(SensorModel, Option<String>), ConfigError> {
    let expected = multi::laser_count(named);
    if !detection_needs_calibration(named) {
        return Ok((named, None));
    }
    let lasers = calibration_laser_count(calibration, path, expected)?;
    if lasers == expected {
        return Ok((named, None));
    }
    match models_with_lasers(lasers).as_slice() {
        [only] => Ok((
            *only,
            Some(format!(
                "the packets' product byte (offset 1205) names {named} ({expected} lasers) but \
                 the calibration {} has {lasers} lasers: decoding as {only} (pass --sensor to \
                 choose)",
                path.display()
            )),
        )),
        several => Err(ConfigError::Calibration {
            path: path.to_path_buf(),
            message: format!(
                "num_lasers = {lasers} contradicts the packets' product byte (offset 1205), \
                 which names {named} ({expected} lasers); a {lasers}-laser calibration fits {}; \
                 give --sensor MODEL",
                if several.is_empty() {
                    "no Velodyne model".to_owned()
                } else {
                    several
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(" or ")
                }
            ),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// The stream: decoder + sensor clock + scan assembler, as a `VendorDecoder`.
// ---------------------------------------------------------------------------------------------

const HOUR_NS: i128 = 3_600_000_000_000;

/// f32 → f64 through the shortest decimal, so `0.3f32` compares as the `0.3` the user wrote.
fn decimal_f64(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// A Velodyne sensor's decoder, sensor clock and [`ScanAssembler`]: the Velodyne
/// [`VendorDecoder`].
///
/// ## Sensor clock
/// A Velodyne stamps each packet with µs past the top of the hour (manual section 9). The hour
/// comes from the host: for the first packet, the hour whose `top + µs` is nearest to the
/// packet's host wall time (CLOCK_REALTIME, [`HostTime::wall_ns`]: so a sensor clock within
/// ±30 min of the host resolves correctly across an hour boundary, as ros-drivers/velodyne
/// does); afterwards, the hour nearest to `previous sensor time + host time elapsed`, elapsed
/// on CLOCK_MONOTONIC ([`HostTime::mono_ns`]), so neither an unsynchronised sensor clock nor a
/// step of the host's wall clock (PTP, chrony) makes the stream jump by an hour.
#[derive(Clone, Debug)]
pub struct VelodyneStream {
    engine: Engine,
    model: SensorModel,
    assembler: ScanAssembler,
    /// Last `(host monotonic ns, sensor ns)` pair, for resolving the hour of the sensor clock.
    clock: Option<(u64, u64)>,
    return_mode: Option<ReturnMode>,
    product_mismatches: u64,
    last_product_id: Option<u8>,
    /// Sensor id, for log lines.
    sensor_id: u16,
    /// The decoder's own counters (`rate_mismatches`).
    counters: VelodyneCounters,
    /// First-block azimuth (0.01°) and sensor time (ns) of the previous data packet.
    prev_packet: Option<(u16, u64)>,
}

/// The Velodyne decoder's own counters: `lidarxdp_velodyne_*{sensor,model}` (the product-id
/// check is in [`crate::vendor::DecodeCounters::product_mismatches`]).
pub const VELODYNE_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "velodyne",
    labels: crate::vendor::SENSOR_COUNTERS.labels,
};

crate::counter_set! {
    /// Velodyne-specific counters (monotonic), beside the pipeline's [`crate::vendor::DecodeCounters`].
    pub struct VelodyneCounters in VELODYNE_COUNTERS;
    {
        /// See [`VelodyneStream::rate_mismatches`].
        rate_mismatches: Counter "packets" "Velodyne data packets whose sensor-time spacing fits no multiple of the configured model's packet interval.",
    }
}

/// Packets with a spacing foreign to the configured model before the warning
/// ([`VelodyneStream::rate_mismatches`]).
const RATE_WARN_AFTER: u64 = 16;

/// Sensor rotation rate assumed when a single-sequence packet (VLS-128 dual return) has no
/// previous packet to measure it from: 600 rpm (10 Hz), the factory default of every
/// Velodyne model; 0.01° per ns is `36000 / 100 ms`.
const NOMINAL_TURN_NS: u64 = 100_000_000;

/// Azimuth advance (0.01°) of a packet holding one firing sequence: the first-block azimuth
/// `az0` minus the previous packet's, when that packet's sensor time is between 0.5 and 1.5
/// packet intervals before `sensor_ns` (the packet just before) and the advance is at most
/// [`MAX_ADVANCE_CDEG`]; otherwise the nominal advance at 600 rpm over `interval_ns`.
fn single_sequence_advance(
    prev: Option<(u16, u64)>,
    az0: u16,
    sensor_ns: u64,
    interval_ns: u64,
) -> u32 {
    if let Some((paz, pns)) = prev {
        let dt = sensor_ns.wrapping_sub(pns);
        let advance = (AZIMUTH_UNITS + u32::from(az0) - u32::from(paz)) % AZIMUTH_UNITS;
        if sensor_ns >= pns
            && dt >= interval_ns / 2
            && dt <= interval_ns + interval_ns / 2
            && advance as f32 <= MAX_ADVANCE_CDEG
        {
            return advance;
        }
    }
    ((u64::from(AZIMUTH_UNITS) * interval_ns + NOMINAL_TURN_NS / 2) / NOMINAL_TURN_NS) as u32
}

/// The point decoder in use.
#[derive(Clone, Debug)]
enum Engine {
    Vlp16(Box<Vlp16Decoder>),
    Multi(multi::MultiDecoder),
}

impl VelodyneStream {
    /// Builds the stream for `cfg` (model, cut angle, ranges) and `calibration`, the contents
    /// of the calibration YAML `cfg.calibration` names.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid calibration, or a Velodyne model whose decoder is not
    /// available yet ([`ConfigError::Unsupported`]).
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let lasers = multi::laser_count(cfg.model);
        if lasers == 0 {
            return Err(ConfigError::Unsupported {
                model: cfg.model,
                supported: "VLP16, VLP32C, HDL32E, HDL64E_S2, HDL64E_S3, VLS128".into(),
            });
        }
        let fov = opts.fov_deg.map(|(min, max)| FovCdeg {
            min: (min * 100.0).round() as u32,
            max: (max * 100.0).round() as u32,
        });
        let calib = VelodyneCalibration::from_bytes(calibration, lasers, &cfg.calibration)?;
        let settings = DecoderSettings {
            min_range_m: decimal_f64(cfg.min_range_m),
            max_range_m: decimal_f64(cfg.max_range_m),
            fov,
            flavor: opts.flavor,
        };
        let mut assembler =
            ScanAssembler::new(cfg.sensor_id, cfg.cut_angle_deg, cfg.frame_timeout_ns);
        assembler.set_fov(crate::scan::Fov::from_deg(opts.fov_deg));
        let engine = if cfg.model == SensorModel::Vlp16 {
            Engine::Vlp16(Box::new(Vlp16Decoder::new(calib, settings)))
        } else {
            // Nebula's VLP-32/HDL decoder never carries points past the cut into the next
            // frame (its phase test is not taken modulo 360°): the cut falls between packets.
            if opts.flavor == DecodeFlavor::Nebula && cfg.model != SensorModel::Vls128 {
                assembler.set_carry_limit_cdeg(0);
            }
            Engine::Multi(multi::MultiDecoder::new(cfg.model, &calib, settings))
        };
        Ok(Self {
            engine,
            model: cfg.model,
            assembler,
            clock: None,
            return_mode: None,
            product_mismatches: 0,
            last_product_id: None,
            sensor_id: cfg.sensor_id,
            counters: VelodyneCounters::default(),
            prev_packet: None,
        })
    }

    /// Data packets whose product-id byte (offset 1205) names another model than the
    /// configured one ([`multi::model_from_product_id`]). The configured model wins: such
    /// packets are decoded as configured, counted here and logged once.
    pub fn product_mismatches(&self) -> u64 {
        self.product_mismatches
    }

    /// Consecutive data packets whose sensor-time spacing is more than 10 % away from every
    /// multiple (1 to 3) of the configured model's packet interval in the packet's return mode
    /// (the manuals' firing tables: e.g. VLP-16 1327.1 µs single, HDL-32E 552.96 µs): the
    /// packets come from another model than configured (a VLP-16 decoded as an HDL-32E with a
    /// 32-laser calibration is caught here). Spacings of 4 intervals or more (loss, a
    /// sensor-side field of view) are not judged; HDL-64E is not checked (its per-laser
    /// timing is not taken from a manual). Logged once, at the 16th such packet.
    pub fn rate_mismatches(&self) -> u64 {
        self.counters.rate_mismatches
    }

    fn check_packet_rate(&mut self, dt: u64, interval: u64, mode: ReturnMode) {
        if interval == 0
            || dt == 0
            || dt >= 4 * interval
            || matches!(self.model, SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3)
        {
            return;
        }
        let nearest = (1..=3)
            .map(|m| dt.abs_diff(m * interval))
            .min()
            .unwrap_or(u64::MAX);
        if nearest * 10 <= interval {
            return;
        }
        self.counters.rate_mismatches += 1;
        if self.counters.rate_mismatches == RATE_WARN_AFTER {
            log::warn!(
                "sensor {}: data packets arrive {} µs apart on the sensor clock, but a {} in \
                 {mode} return mode sends one every {:.1} µs: the packets are probably from \
                 another model (check --sensor and the calibration; counted in \
                 rate_mismatches)",
                self.sensor_id,
                dt / 1000,
                self.model,
                interval as f64 / 1000.0
            );
        }
    }

    /// Firing-sequence period in use for the 32/64/128-laser models, ns (for a VLS-128 it
    /// follows the firmware variant detected from the packet spacing); `None` for a VLP-16.
    pub fn firing_sequence_ns(&self) -> Option<u32> {
        match &self.engine {
            Engine::Vlp16(_) => None,
            Engine::Multi(d) => Some(d.sequence_ns()),
        }
    }

    /// The model named by the product-id byte of the last decoded packet, if any
    /// (auto-detection; `None` for HDL-64E, whose byte 1205 is a status byte).
    pub fn detected_model(&self) -> Option<SensorModel> {
        self.last_product_id.and_then(multi::model_from_product_id)
    }

    /// Resolves a µs-past-the-hour stamp to ns since the Unix epoch (see the type docs).
    fn sensor_time_ns(&mut self, toh_us: u32, host: HostTime) -> u64 {
        let reference: i128 = match self.clock {
            Some((m, s)) => i128::from(s) + (i128::from(host.mono_ns) - i128::from(m)),
            None => i128::from(host.wall_ns),
        };
        let t = reference.div_euclid(HOUR_NS) * HOUR_NS + i128::from(toh_us) * 1000;
        let best = [t - HOUR_NS, t, t + HOUR_NS]
            .into_iter()
            .min_by_key(|c| (c - reference).abs())
            .unwrap_or(t);
        let ns = best.clamp(0, i128::from(u64::MAX)) as u64;
        self.clock = Some((host.mono_ns, ns));
        ns
    }
}

impl VendorDecoder for VelodyneStream {
    /// A 1206-byte payload is validated once by [`Packet::new_checked`]; anything else is
    /// rejected by [`classify`]. A host-time gap (monotonic) longer than the frame timeout
    /// closes the frame in progress before this packet is decoded.
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), crate::vendor::Rejection> {
        let classified = match self.engine {
            Engine::Vlp16(_) => classify(payload),
            Engine::Multi(_) => multi::classify_model(self.model, payload),
        };
        let packet: Packet<&[u8]> = match classified {
            Ok(p) => p,
            Err(Rejection::Ignored) => return Err(crate::vendor::Rejection::Ignored),
            Err(Rejection::Malformed(_)) => {
                self.assembler.note_malformed();
                return Err(crate::vendor::Rejection::Malformed);
            }
        };
        let model = self.model;
        if !matches!(model, SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3) {
            let id = packet.product_id();
            self.last_product_id = Some(id);
            if multi::model_from_product_id(id).is_some_and(|m| m != model) {
                if self.product_mismatches == 0 {
                    log::warn!(
                        "sensor {}: product id {id:#04x} (byte 1205) names {:?} but the sensor \
                         is configured as {model} and its calibration has {} lasers, as a \
                         {model}; decoding as {model} (counted in product_mismatches; some \
                         VLP-16 firmware sends 0x21, HDL-32E)",
                        self.sensor_id,
                        multi::model_from_product_id(id),
                        multi::laser_count(model),
                    );
                }
                self.product_mismatches += 1;
            }
        }
        let (mode, interval, first_block, seqs) = match &self.engine {
            Engine::Vlp16(_) => {
                let m = packet.return_mode();
                let seqs = if m == ReturnMode::Dual { 6 } else { 12 };
                (
                    m,
                    packet_interval_ns(m),
                    1 + usize::from(m == ReturnMode::Dual),
                    seqs,
                )
            }
            Engine::Multi(d) => {
                let m = multi::return_mode(model, &packet);
                let bps = multi::blocks_per_sequence_in(model, m);
                (
                    m,
                    d.packet_interval_ns(m),
                    bps,
                    multi::data_blocks(model, m) / bps,
                )
            }
        };
        self.return_mode = Some(mode);
        let prev_sensor_ns = self.clock.map(|(_, s)| s);
        let mut sensor_ns = self.sensor_time_ns(packet.timestamp_us(), host);
        // VLS-128 firmware variants differ in firing-sequence period: pick the timing table
        // from the spacing of consecutive single-return packets.
        if model == SensorModel::Vls128
            && mode != ReturnMode::Dual
            && let Engine::Multi(d) = &mut self.engine
            && let Some(prev) = prev_sensor_ns
            && let Some(seq) = multi::vls128_sequence_from_spacing(sensor_ns.saturating_sub(prev))
        {
            d.set_sequence_ns(seq);
        }
        if let Some(prev) = prev_sensor_ns {
            self.check_packet_rate(sensor_ns.wrapping_sub(prev), interval, mode);
        }
        if model == SensorModel::Vls128 {
            sensor_ns = sensor_ns.saturating_sub(multi::VLS128_STAMP_LEAD_NS);
        }
        let span = |a: u16, b: u16| (AZIMUTH_UNITS + u32::from(b) - u32::from(a)) % AZIMUTH_UNITS;
        let az0 = packet.azimuth(0);
        // Azimuth turned per packet: first to last firing sequence, scaled by seqs/(seqs-1);
        // a packet of one sequence (VLS-128 dual) uses the turn since the previous packet.
        let advance = if seqs >= 2 {
            let last_seq_block = first_block * (seqs - 1);
            let steps = (seqs - 1) as u32;
            span(az0, packet.azimuth(last_seq_block)) * seqs as u32 / steps
        } else {
            single_sequence_advance(self.prev_packet, az0, sensor_ns, interval)
        };
        self.prev_packet = Some((az0, sensor_ns));
        if seqs < 2
            && let Engine::Multi(d) = &mut self.engine
        {
            d.set_packet_advance_cdeg(advance.min(u32::from(u16::MAX)) as u16);
        }
        // The last block that holds data (a VLS-128 dual packet's padding blocks 8..11 are
        // not looked at).
        let last_block = (first_block * seqs.max(1)).clamp(1, BLOCKS) - 1;
        self.assembler.begin_packet(
            PacketInfo {
                host,
                sensor_ns,
                first_azimuth_cdeg: az0,
                last_azimuth_cdeg: packet.azimuth(last_block),
                advance_cdeg: advance,
                interval_ns: interval,
            },
            out,
        )?;
        let mut b = self.assembler.batch();
        let sink = |blk: &BlockPoints<'_>| blk.append_timed(&mut b);
        match &self.engine {
            Engine::Vlp16(d) => d.decode_blocks(&packet, sink),
            Engine::Multi(d) => d.decode_blocks(&packet, sink),
        }
        self.assembler.end_packet(out);
        Ok(())
    }

    fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) {
        self.assembler.poll_timeout(now_mono_ns, out);
    }

    fn flush(&mut self, out: &mut Vec<Frame>) {
        self.assembler.flush(out);
    }

    fn return_mode(&self) -> Option<ReturnMode> {
        self.return_mode
    }

    fn clone_box(&self) -> Box<dyn VendorDecoder> {
        Box::new(self.clone())
    }

    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.assembler.set_buffer_source(source);
    }

    fn set_point_type(&mut self, point_type: crate::layout::PointType) {
        self.assembler.set_point_type(point_type);
    }

    fn product_mismatches(&self) -> u64 {
        self.product_mismatches
    }

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.assembler.stream_clock().restarts(),
            date_fallbacks: 0,
        }
    }

    fn in_progress(&self) -> bool {
        self.assembler.in_progress()
    }

    /// Takes the fresh stream's point decoder (calibration, range gates, trig tables).
    fn recalibrate(&mut self, fresh: Box<dyn VendorDecoder>) {
        if let Ok(f) = fresh.into_any().downcast::<VelodyneStream>() {
            self.engine = f.engine;
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }

    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        <VelodyneCounters as crate::counters::CounterSet>::DESCS
    }

    fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        crate::counters::CounterSet::visit(&self.counters, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic packet: every block flagged, azimuth `az0 + step·b` (pairs in dual mode),
    /// distances `dist(block, slot)`, reflectivity 100.
    pub(crate) fn synth(
        az0: u16,
        step: u16,
        mode: u8,
        dist: impl Fn(usize, usize) -> u16,
    ) -> Vec<u8> {
        let mut b = vec![0u8; DATA_PACKET_LEN];
        for blk in 0..BLOCKS {
            let o = blk * BLOCK_LEN;
            b[o..o + 2].copy_from_slice(&BLOCK_FLAG);
            let idx = if mode == RETURN_MODE_DUAL {
                blk / 2
            } else {
                blk
            } as u32;
            let az = ((u32::from(az0) + u32::from(step) * idx) % AZIMUTH_UNITS) as u16;
            b[o + 2..o + 4].copy_from_slice(&az.to_le_bytes());
            for s in 0..SLOTS_PER_BLOCK {
                b[o + 4 + 3 * s..o + 6 + 3 * s].copy_from_slice(&dist(blk, s).to_le_bytes());
                b[o + 6 + 3 * s] = 100;
            }
        }
        b[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        b[RETURN_MODE_OFFSET] = mode;
        b[PRODUCT_ID_OFFSET] = PRODUCT_ID_VLP16;
        b
    }

    fn decoder(flavor: DecodeFlavor) -> Vlp16Decoder {
        let calib =
            VelodyneCalibration::from_bytes(&vlp16_cal(), 16, std::path::Path::new(DB)).unwrap();
        Vlp16Decoder::new(
            calib,
            DecoderSettings {
                min_range_m: 0.3,
                max_range_m: 300.0,
                fov: None,
                flavor,
            },
        )
    }

    #[test]
    fn checked_view_rejects_every_bad_shape() {
        let good = synth(100, 20, RETURN_MODE_STRONGEST, |_, _| 500);
        assert!(Packet::new_checked(&good[..]).is_ok());
        assert_eq!(
            Packet::new_checked(&good[..1205]).unwrap_err(),
            PacketError::Length { len: 1205 }
        );
        let mut bad = good.clone();
        bad[300] = 0xDD;
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            PacketError::BlockFlag {
                block: 3,
                flag: 0xddee
            }
        );
        let mut bad = good.clone();
        bad[502..504].copy_from_slice(&36000u16.to_le_bytes());
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            PacketError::Azimuth {
                block: 5,
                azimuth: 36000
            }
        );
        let mut bad = good.clone();
        bad[RETURN_MODE_OFFSET] = 0x3a;
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            PacketError::ReturnMode(0x3a)
        );
        // Unchecked views over short buffers never panic.
        let p = Packet::new_unchecked(&good[..10]);
        assert_eq!(
            (p.distance_raw(11, 31), p.timestamp_us(), p.product_id()),
            (0, 0, 0)
        );
    }

    #[test]
    fn classify_sizes() {
        assert_eq!(classify(&[0u8; 512]).unwrap_err(), Rejection::Ignored);
        assert_eq!(classify(&[]).unwrap_err(), Rejection::Ignored);
        assert!(matches!(
            classify(&[0u8; 1207]).unwrap_err(),
            Rejection::Malformed(PacketError::Length { len: 1207 })
        ));
        assert!(matches!(
            classify(&[0xFF, 0xEE, 0, 0]).unwrap_err(),
            Rejection::Malformed(_)
        ));
        assert!(matches!(
            classify(&[0u8; 1206]).unwrap_err(),
            Rejection::Malformed(PacketError::BlockFlag { block: 0, .. })
        ));
    }

    #[test]
    fn firing_timing_table() {
        // Manual section 9: last firing of a single-return packet at 23·55.296 + 15·2.304 µs.
        assert_eq!(
            firing_offset_ns(ReturnMode::Strongest, 11, 31),
            23 * 55_296 + 15 * 2_304
        );
        assert_eq!(
            firing_offset_ns(ReturnMode::Dual, 11, 31),
            11 * 55_296 + 15 * 2_304
        );
        assert_eq!(firing_offset_ns(ReturnMode::Dual, 1, 0), 0);
        assert_eq!(packet_interval_ns(ReturnMode::Dual), 663_552);
        assert_eq!(packet_interval_ns(ReturnMode::Last), 1_327_104);
    }

    #[test]
    fn single_return_geometry() {
        // 10 m everywhere, azimuth 90.00 deg + 0.20 deg per block.
        let pkt = synth(9000, 20, RETURN_MODE_STRONGEST, |_, _| 5000);
        let p = Packet::new_checked(&pkt[..]).unwrap();
        let mut pts = Vec::new();
        decoder(DecodeFlavor::Manual).decode(&p, |d| pts.push(d));
        assert_eq!(pts.len(), BLOCKS * SLOTS_PER_BLOCK);
        let first = pts[0]; // laser 0: -15 deg, ring 0, azimuth 90.00 deg
        assert_eq!(first.azimuth_cdeg, 9000);
        assert_eq!(first.point.channel, 0);
        assert_eq!(first.point.return_type, ReturnType::Strongest as u8);
        assert!((first.point.distance - 10.0).abs() < 1e-6);
        // Nebula axes: x = d cos(el) cos(az) ~ 0, y = -d cos(el) sin(az) < 0, z = d sin(el).
        assert!(first.point.x.abs() < 1e-4);
        assert!((first.point.y + 10.0 * (15f32.to_radians()).cos()).abs() < 1e-4);
        assert!((first.point.z + 10.0 * (15f32.to_radians()).sin()).abs() < 1e-4);
        // Second firing sequence of block 0 is half-way to block 1: +0.10 deg.
        assert_eq!(pts[16].azimuth_cdeg, 9010);
        // Manual: the last block reuses the previous advance; Nebula does not interpolate it.
        assert_eq!(pts[11 * 32 + 16].azimuth_cdeg, 9000 + 11 * 20 + 10);
        let mut neb = Vec::new();
        decoder(DecodeFlavor::Nebula).decode(&p, |d| neb.push(d));
        assert_eq!(neb[11 * 32 + 16].azimuth_cdeg, 9000 + 11 * 20);
        assert_eq!(neb[16].azimuth_cdeg, 9010);
    }

    /// The integer window equals the float range gate for every raw value, for the real
    /// resolutions (2 mm, 4 mm), positive and negative corrections, and exact-bound ranges.
    #[test]
    fn raw_window_equals_the_float_gate_for_every_raw_value() {
        let cases = [
            (0.002f32, 0.0f32, 0.3f64, 300.0f64),
            (0.002, 1.25, 0.3, 300.0),
            (0.002, -0.4, 0.3, 130.0),
            (0.004, 0.07, 1.0, 200.0),
            (0.004, 0.0, 0.0, 1e9),
            (0.002, 0.0, 200.0, 100.0),
        ];
        for (res, corr, min_m, max_m) in cases {
            let (min_f, max_f) = (f32_above(min_m), f32_below(max_m));
            let (lo, hi) = raw_window(res, corr, min_f, max_f);
            let mut passing = 0u32;
            for raw in 0..=u16::MAX {
                let d = raw_distance(raw, res, corr);
                let float = raw != 0 && f64::from(d) > min_m && f64::from(d) < max_m;
                assert_eq!(
                    raw >= lo && raw <= hi,
                    float,
                    "res {res} corr {corr} raw {raw}"
                );
                passing += u32::from(float);
            }
            let expected = if min_m < max_m { 1 } else { 0 };
            assert_eq!(passing.min(1), expected, "res {res} corr {corr}");
        }
    }

    #[test]
    fn range_filter_is_exclusive_and_zero_is_no_return() {
        // 150 counts = 0.300 m exactly: Nebula keeps it (f32 0.3 > f64 0.3); 0 is no return.
        let pkt = synth(0, 20, RETURN_MODE_LAST, |_, s| {
            [0u16, 150, 149, 65535][s % 4]
        });
        let p = Packet::new_checked(&pkt[..]).unwrap();
        let mut pts = Vec::new();
        decoder(DecodeFlavor::Nebula).decode(&p, |d| pts.push(d));
        assert_eq!(pts.len(), BLOCKS * 16);
        assert!(
            pts.iter()
                .all(|d| d.point.return_type == ReturnType::Last as u8)
        );
    }

    #[test]
    fn dual_return_rules() {
        // Even block (last return) / odd block (strongest) per slot:
        // slot%4==0 identical, ==1 odd missing, ==2 different & odd stronger, ==3 even missing.
        let pkt = synth(1000, 40, RETURN_MODE_DUAL, |b, s| match (s % 4, b % 2) {
            (0, _) => 1000,
            (1, 0) => 1000,
            (1, _) => 0,
            (2, 0) => 2000,
            (2, _) => 1000,
            (3, 0) => 0,
            (3, _) => 1500,
            _ => unreachable!(),
        });
        let mut pkt = pkt;
        // Make odd blocks' slot 2 stronger than the even partner.
        for b in (1..BLOCKS).step_by(2) {
            for s in (2..SLOTS_PER_BLOCK).step_by(4) {
                pkt[b * BLOCK_LEN + 6 + 3 * s] = 200;
            }
        }
        let p = Packet::new_checked(&pkt[..]).unwrap();
        for flavor in [DecodeFlavor::Nebula, DecodeFlavor::Manual] {
            let mut pts = Vec::new();
            decoder(flavor).decode(&p, |d| pts.push(d));
            // Per pair and per 4 slots: even block emits 3 (slots 0,1,2), odd emits 2 (2,3).
            assert_eq!(pts.len(), 6 * 8 * 5);
            let ty = |blk: u8, slot: u8| {
                pts.iter()
                    .find(|d| d.block == blk && d.slot == slot)
                    .map(|d| d.point.return_type)
            };
            let id = ReturnType::Identical as u8;
            assert_eq!(ty(0, 0), Some(id));
            assert_eq!(ty(1, 0), None, "identical odd return merged");
            assert_eq!(ty(0, 1), Some(id));
            assert_eq!(ty(1, 3), Some(id));
            let (far, near) = (ty(0, 2).unwrap(), ty(1, 2).unwrap());
            match flavor {
                // Nebula labels the longer range "first".
                DecodeFlavor::Nebula => {
                    assert_eq!(
                        (far, near),
                        (ReturnType::FirstWeak as u8, ReturnType::LastStrongest as u8)
                    )
                }
                DecodeFlavor::Manual => {
                    assert_eq!(
                        (far, near),
                        (ReturnType::LastWeak as u8, ReturnType::FirstStrongest as u8)
                    )
                }
            }
            // Both returns of a pair share the firing time.
            let t = |blk: u8, slot: u8| {
                pts.iter()
                    .find(|d| d.block == blk && d.slot == slot)
                    .unwrap()
                    .offset_ns
            };
            assert_eq!(t(2, 2), t(3, 2));
        }
        // Azimuth of the odd block: Nebula takes the next pair's azimuth without interpolation;
        // the manual interpolates inside the pair.
        let az = |flavor, blk: u8, slot: u8| {
            let mut v = None;
            decoder(flavor).decode(&p, |d| {
                if d.block == blk && d.slot == slot {
                    v = Some(d.azimuth_cdeg)
                }
            });
            v.unwrap()
        };
        assert_eq!(az(DecodeFlavor::Nebula, 1, 18), 1040);
        assert_eq!(az(DecodeFlavor::Manual, 1, 18), 1000 + 20 + 2); // 40·(55.296+2·2.304)/110.592 = 21.67
        assert_eq!(az(DecodeFlavor::Nebula, 0, 18), 1022);
    }

    /// Default rules, dual return: per block pair, first firing sequence of both blocks, then
    /// the second one; offsets non-decreasing per laser. Nebula: block by block.
    #[test]
    fn dual_points_come_per_firing_sequence() {
        let pkt = synth(1000, 40, RETURN_MODE_DUAL, |b, _| 1000 + b as u16 % 2);
        let p = Packet::new_checked(&pkt[..]).unwrap();
        let mut man = Vec::new();
        decoder(DecodeFlavor::Manual).decode(&p, |d| man.push((d.block, d.slot, d.offset_ns)));
        assert_eq!(man.len(), BLOCKS * SLOTS_PER_BLOCK);
        let want: Vec<(u8, u8)> = (0..6u8)
            .flat_map(|pair| {
                [(0, 0u8), (1, 0), (0, 16), (1, 16)]
                    .into_iter()
                    .flat_map(move |(odd, s0)| (s0..s0 + 16).map(move |s| (2 * pair + odd, s)))
            })
            .collect();
        let got: Vec<(u8, u8)> = man.iter().map(|&(b, s, _)| (b, s)).collect();
        assert_eq!(got, want);
        let mut last = [0u32; LASERS];
        for &(_, s, t) in &man {
            assert!(t >= last[usize::from(s) % LASERS]);
            last[usize::from(s) % LASERS] = t;
        }
        let mut neb = Vec::new();
        decoder(DecodeFlavor::Nebula).decode(&p, |d| neb.push((d.block, d.slot)));
        let want: Vec<(u8, u8)> = (0..12u8)
            .flat_map(|b| (0..32u8).map(move |s| (b, s)))
            .collect();
        assert_eq!(neb, want);
    }

    #[test]
    fn decode_never_panics_on_garbage() {
        let d = decoder(DecodeFlavor::Nebula);
        let mut x: u32 = 0x1234_5678;
        for _ in 0..200 {
            let mut pkt = synth(0, 0, RETURN_MODE_DUAL, |_, _| 0);
            for byte in pkt.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *byte = x as u8;
            }
            for blk in 0..BLOCKS {
                pkt[blk * BLOCK_LEN..blk * BLOCK_LEN + 2].copy_from_slice(&BLOCK_FLAG);
                let az = (u16::from_le_bytes([pkt[blk * BLOCK_LEN + 2], pkt[blk * BLOCK_LEN + 3]]))
                    % 36000;
                pkt[blk * BLOCK_LEN + 2..blk * BLOCK_LEN + 4].copy_from_slice(&az.to_le_bytes());
            }
            pkt[RETURN_MODE_OFFSET] = [RETURN_MODE_DUAL, RETURN_MODE_LAST][(x & 1) as usize];
            let p = Packet::new_checked(&pkt[..]).unwrap();
            d.decode(&p, |dp| {
                assert!(dp.azimuth_cdeg < 36000 && dp.point.distance < 300.0)
            });
        }
    }

    const DB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
    );

    fn vlp16_cal() -> Vec<u8> {
        std::fs::read(DB).unwrap()
    }

    fn stream_cfg() -> SensorConfig {
        SensorConfig::new(0, SensorModel::Vlp16, DB)
    }

    #[test]
    fn sensor_clock_hour_resolution() {
        let mut p =
            VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
        let h = 3_600_000_000_000u64;
        let host = 400_000 * h + 10_000_000_000; // 10 s past an hour
        // Sensor says 3599.5 s past the hour: it is the previous hour, 10.5 s earlier.
        assert_eq!(
            p.sensor_time_ns(3_599_500_000, HostTime::both(host)),
            400_000 * h - 500_000_000
        );
        // The sensor clock then wraps to 0.5 s: still continuous although the host moved 1 s.
        assert_eq!(
            p.sensor_time_ns(500_000, HostTime::both(host + 1_000_000_000)),
            400_000 * h + 500_000_000
        );
        // An unsynchronised sensor (:10 while the host says :50) resolves to the nearest hour,
        // 20 min ahead, and then stays continuous.
        let mut p =
            VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
        let host = 400_000 * h + 50 * 60 * 1_000_000_000; // :50
        let s0 = p.sensor_time_ns(10 * 60 * 1_000_000, HostTime::both(host));
        assert_eq!(s0, 400_001 * h + 10 * 60 * 1_000_000_000);
        let s1 = p.sensor_time_ns(
            10 * 60 * 1_000_000 + 1_000,
            HostTime::both(host + 11 * 60 * 1_000_000_000),
        );
        assert_eq!(s1, s0 + 1_000_000);
    }

    /// The hour comes from the wall clock once; afterwards a step of the wall clock (PTP,
    /// chrony: an hour forward, then two back) moves nothing: the elapsed time is monotonic.
    #[test]
    fn a_wall_clock_step_does_not_move_the_sensor_hour() {
        let mut p =
            VelodyneStream::new(&stream_cfg(), &vlp16_cal(), PipelineOptions::default()).unwrap();
        let h = 3_600_000_000_000u64;
        let ms = 1_000_000u64;
        let wall = 400_000 * h + 10 * 60 * 1_000 * ms; // :10
        let mono = 7_000 * ms; // CLOCK_MONOTONIC has its own origin
        let toh = |t_ms: u64| ((10 * 60 * 1_000 + t_ms) * 1_000) as u32; // µs past the hour
        let s0 = p.sensor_time_ns(toh(0), HostTime::new(mono, wall));
        assert_eq!(s0, 400_000 * h + 10 * 60 * 1_000 * ms);
        // Wall stepped one hour forward, 1 ms later on both the sensor and CLOCK_MONOTONIC.
        let s1 = p.sensor_time_ns(toh(1), HostTime::new(mono + ms, wall + h + ms));
        assert_eq!(s1, s0 + ms);
        // Then two hours back: still continuous.
        let s2 = p.sensor_time_ns(toh(2), HostTime::new(mono + 2 * ms, wall - h + 2 * ms));
        assert_eq!(s2, s0 + 2 * ms);
    }
}
