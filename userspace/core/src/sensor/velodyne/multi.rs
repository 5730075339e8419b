//! Velodyne VLP-32C, HDL-32E, HDL-64E (S2, S3) and VLS-128: packet checks and a sans-IO point
//! decoder with the full per-laser calibration model.
//!
//! Sources: *VLP-32C User Manual* (63-9325) ch. 9 "Sensor Data" and its firing timing table;
//! *HDL-32E User Manual* (63-9113) ch. 9; *HDL-64E S2/S3 User Manual* (63-HDL64ES2, 63-HDL64ES3)
//! "Packet format" and appendix "Calibration" (the correction equations); *VLS-128 User Manual*
//! (63-9480) ch. 9 and its timing table. Cross-checked against Tier IV Nebula
//! (`vlp32_decoder.cpp`, used by Nebula for VLP-32C, HDL-32E and HDL-64E, and
//! `vls128_decoder.cpp`) and ros-drivers/velodyne `rawdata.cc`.
//!
//! ## Packet layout
//! All four models share the 1206-byte layout of the VLP-16 (see [`super`]): 12 blocks of 100
//! bytes `flag(2) azimuth(2, 0.01°) 32 × [distance u16, reflectivity u8]`, then the u32
//! timestamp (µs past the hour) at 1200, the return-mode byte at 1204 and the product id at
//! 1205. What differs is the meaning of a block:
//!
//! | model | block flags (bytes) | lasers of slot `k` | blocks per firing sequence | distance unit |
//! |---|---|---|---|---|
//! | VLP-32C (0x28) | `FF EE` | `k` | 1 | 4 mm (YAML `distance_resolution`) |
//! | HDL-32E (0x21) | `FF EE` | `k` | 1 | 2 mm (YAML) |
//! | HDL-64E S2/S3 | `FF EE` upper, `FF DD` lower | `k` (upper), `32 + k` (lower) | 2 (upper + lower) | YAML (2 mm) |
//! | VLS-128 (0xA1) | `FF EE`, `FF DD`, `FF CC`, `FF BB` | `k`, `32+k`, `64+k`, `96+k` | 4 | **4 mm, always** |
//!
//! The VLS-128 YAML tables say `distance_resolution: 0.007`; the sensor's unit is 4 mm (VLS-128
//! manual; ros-drivers hard-codes `VLS128_DISTANCE_RESOLUTION = 0.004`), so the YAML value is
//! ignored for that model.
//!
//! HDL-64E S2/S3 have no return-mode byte: bytes 1204–1205 are the rotating status type/value
//! pair. We treat an HDL-64E packet as dual return when every block pair `(2p, 2p+1)` has the
//! same flag and azimuth (the two returns of one bank), else single (upper/lower blocks
//! alternate); this rule is ours, not checked on a capture.
//!
//! ## Dual return
//! As the VLP-16: blocks `2p` and `2p+1` hold the two returns of the same firing; a point of the
//! odd block whose raw distance equals its partner's is not emitted, and the even block's point
//! is then [`ReturnType::Identical`] (also when the partner has no return). Otherwise the
//! shorter range is *first*, the higher reflectivity *strongest* (on a tie the last one), giving
//! `FirstStrongest`/`FirstWeak`/`LastStrongest`/`LastWeak` (Nebula `vlp32_decoder.cpp`). The
//! VLS-128 dual packet carries one firing sequence: blocks `2b`, `2b+1` are the last and
//! strongest return of bank `b`; blocks 8–11 are padding, never checked nor decoded
//! ([`VLS128_DUAL_DATA_BLOCKS`]).
//!
//! ## Corrections (HDL-64E manual, appendix "Calibration")
//! With `d = raw · unit + dist_correction` (for `raw > 0`), `cv, sv` the cosine/sine of
//! `vert_correction`, `ca, sa` of the corrected azimuth `α = block azimuth + interpolation −
//! rot_correction`, `h = horiz_offset_correction`, `v = vert_offset_correction`:
//! * two-point correction (when `two_pt_correction_available`): with
//!   `xx = |(d·cv − v·sv)·sa − h·ca|`, `yy = |(d·cv − v·sv)·ca + h·sa|`,
//!   `dx = (dc − dcx)·(xx − 2.4)/(25.04 − 2.4) + dcx − dc`,
//!   `dy = (dc − dcy)·(yy − 1.93)/(25.04 − 1.93) + dcy − dc`, else `dx = dy = 0`;
//! * `x = ((d+dy)·cv − v·sv)·ca + h·sa`, `y = −(((d+dx)·cv − v·sv)·sa − h·ca)`,
//!   `z = (d+dy)·sv + v·cv` (x forward, y left, z up);
//! * intensity `i + focal_slope·|256·(1 − focal_distance/13100)² − 256·(1 − raw/65535)²|`,
//!   clamped to `[min_intensity, max_intensity]`.
//!
//! The VLS-128 decoder uses `x = d·cv·ca, y = −d·cv·sa, z = d·sv` (no offsets), as Nebula.
//!
//! ## Azimuth interpolation
//! The block azimuth advances to the next firing sequence's azimuth (`diff`); a laser fired `t`
//! after the sequence start gets `az + diff · t / T`, `T` the sequence period.
//! [`DecodeFlavor::Manual`] (the default) uses each model's own firing time
//! ([`firing_offset_ns`]: HDL-32E `1.152 µs · k` over 46.08 µs, VLP-32C pairs, VLS-128 groups)
//! over its sequence period; every block of a sequence (the VLS-128's four banks, both returns)
//! shares the sequence's azimuth and advance; the last sequence reuses the previous advance, and
//! a one-sequence packet (VLS-128 dual) the advance since the previous packet
//! ([`MultiDecoder::set_packet_advance_cdeg`]); an advance over 1° ([`super::MAX_ADVANCE_CDEG`])
//! is a pause in firing (sensor-side field of view), and the other neighbour's advance is used. With [`DecodeFlavor::Nebula`]
//! (`--nebula-compat`) the arithmetic is Nebula's, bit for bit: VLP-32C/HDL-32E/HDL-64E use
//! `t/T = 2.304/55.296 · k` for slot `k` (also for HDL-32E and HDL-64E), VLS-128 uses
//! `2.665/53.3 · (g + g/8)` for firing group `g = laser/8` with the next block's difference;
//! the last block (single) gets no interpolation and odd dual blocks take the next pair's
//! azimuth.

use std::f64::consts::PI;

use crate::point::ReturnType;

use super::{
    AZIMUTH_UNITS, BLOCK_LEN, BLOCKS, BlockPoints, DATA_PACKET_LEN, DecodedPoint, DecoderSettings,
    MALFORMED_LEN_TOLERANCE, Packet, PacketError, RETURN_MODE_DUAL, RETURN_MODE_LAST,
    RETURN_MODE_STRONGEST, SLOTS_PER_BLOCK, VelodyneFov,
};
use crate::scan::PacketRejection;
use crate::sensor::calibration::{LaserCorrection, VelodyneCalibration};
use crate::vendor::{DecodeFlavor, ReturnMode, SensorModel};

/// Product-id byte (offset 1205) of an HDL-32E.
pub const PRODUCT_ID_HDL32E: u8 = 0x21;
/// Product-id byte of a VLP-32C.
pub const PRODUCT_ID_VLP32C: u8 = 0x28;
/// Product-id byte of a VLS-128 (Alpha Prime).
pub const PRODUCT_ID_VLS128: u8 = 0xA1;
/// Product-id byte of a VLP-16 Hi-Res (decoded as a VLP-16).
pub const PRODUCT_ID_VLP16_HIRES: u8 = 0x24;

/// VLS-128 range unit, m (4 mm; the YAML's `distance_resolution` is ignored).
pub const VLS128_DISTANCE_UNIT_M: f32 = 0.004;
/// VLS-128 time between the packet timestamp and the first firing group, ns: the first group
/// fires 8.7 µs *before* the stamp (VLS-128 manual timing table, as Nebula).
pub const VLS128_STAMP_LEAD_NS: u64 = 8_700;
/// VLS-128 firing-group spacing, ns (2.665 µs).
pub const VLS128_GROUP_NS: u32 = 2_665;
/// VLS-128 firing-sequence period of current firmware, ns (55.296 µs: the shared capture's
/// packets are 165.8 µs apart, 3 sequences each).
pub const VLS128_SEQUENCE_NS: u32 = 55_296;
/// VLS-128 firing-sequence period of early firmware, ns (53.3 µs, the value of the early
/// manual's timing table that ros-drivers and Nebula still use; 159.9 µs per packet).
pub const VLS128_SEQUENCE_EARLY_NS: u32 = 53_300;

/// Which VLS-128 timing table a packet spacing (ns between consecutive packet stamps, single
/// return, 3 sequences per packet) indicates: [`VLS128_SEQUENCE_EARLY_NS`] below 162.9 µs,
/// [`VLS128_SEQUENCE_NS`] from there up to 175 µs; `None` for any other spacing (loss, dual
/// return, first packet), which must not change the table in use.
pub const fn vls128_sequence_from_spacing(dt_ns: u64) -> Option<u32> {
    match dt_ns {
        150_000..=162_899 => Some(VLS128_SEQUENCE_EARLY_NS),
        162_900..=175_000 => Some(VLS128_SEQUENCE_NS),
        _ => None,
    }
}
/// VLP-32C laser-pair spacing, ns (2.304 µs; lasers fire two at a time).
pub const VLP32C_PAIR_NS: u32 = 2_304;
/// VLP-32C firing-sequence period, ns (55.296 µs).
pub const VLP32C_SEQUENCE_NS: u32 = 55_296;
/// HDL-32E laser spacing, ns (1.152 µs).
pub const HDL32E_LASER_NS: u32 = 1_152;
/// HDL-32E firing-sequence period, ns (46.080 µs).
pub const HDL32E_SEQUENCE_NS: u32 = 46_080;
/// HDL-64E firing-sequence period (upper + lower bank together), ns. The S2/S3 manuals give no
/// per-laser table; this is the S3 point rate (≈1.33 M points/s over 64 lasers) rounded, and
/// every laser of a sequence gets the sequence's time.
pub const HDL64E_SEQUENCE_NS: u32 = 48_000;

/// The model a product-id byte names, if it is a Velodyne data-packet product id
/// (0x21 HDL-32E, 0x22 VLP-16, 0x24 VLP-16 Hi-Res, 0x28 VLP-32C, 0xA1 VLS-128). HDL-64E packets
/// carry status bytes there instead, so they are never detected.
pub const fn model_from_product_id(id: u8) -> Option<SensorModel> {
    match id {
        PRODUCT_ID_HDL32E => Some(SensorModel::Hdl32e),
        super::PRODUCT_ID_VLP16 | PRODUCT_ID_VLP16_HIRES => Some(SensorModel::Vlp16),
        PRODUCT_ID_VLP32C => Some(SensorModel::Vlp32c),
        PRODUCT_ID_VLS128 => Some(SensorModel::Vls128),
        _ => None,
    }
}

/// Lasers of a Velodyne model (16, 32, 64 or 128; 0 for a non-Velodyne model).
pub const fn laser_count(model: SensorModel) -> usize {
    match model {
        SensorModel::Vlp16 => 16,
        SensorModel::Vlp32c | SensorModel::Hdl32e => 32,
        SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 => 64,
        SensorModel::Vls128 => 128,
        _ => 0,
    }
}

/// Blocks per firing sequence (all banks fired together): 1, 2 (HDL-64E) or 4 (VLS-128).
pub const fn blocks_per_sequence(model: SensorModel) -> usize {
    match model {
        SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 => 2,
        SensorModel::Vls128 => 4,
        _ => 1,
    }
}

/// First laser of the block with flag bytes `[0xFF, second]` for `model`, or `None` if the
/// flag is not valid for it (table in the module docs).
pub const fn bank_origin(model: SensorModel, second: u8) -> Option<u16> {
    match (model, second) {
        (_, 0xEE) => Some(0),
        (SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 | SensorModel::Vls128, 0xDD) => Some(32),
        (SensorModel::Vls128, 0xCC) => Some(64),
        (SensorModel::Vls128, 0xBB) => Some(96),
        _ => None,
    }
}

const fn is_hdl64(model: SensorModel) -> bool {
    matches!(model, SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3)
}

/// Validates a payload as a data packet of `model`: exactly 1206 bytes, every block flag valid
/// for the model ([`bank_origin`]), every azimuth < 36000, and (except HDL-64E, whose byte 1204
/// is a status byte) a return-mode byte of 0x37/0x38/0x39. In a VLS-128 dual-return packet
/// (byte 1204 = 0x39) only blocks 0..7 are checked: blocks 8..11 are padding.
///
/// # Errors
/// The first problem found, as [`PacketError`].
pub fn check(model: SensorModel, b: &[u8]) -> Result<(), PacketError> {
    if b.len() != DATA_PACKET_LEN {
        return Err(PacketError::Length { len: b.len() });
    }
    let p = Packet::new_unchecked(b);
    // A VLS-128 dual-return packet carries one firing sequence in blocks 0..7; blocks 8..11
    // are padding (VLS-128 manual, dual-return packet layout), whose flag and azimuth bytes
    // mean nothing and are not checked.
    let checked = if model == SensorModel::Vls128 && p.return_mode_byte() == RETURN_MODE_DUAL {
        VLS128_DUAL_DATA_BLOCKS
    } else {
        BLOCKS
    };
    for block in 0..checked {
        let o = block * BLOCK_LEN;
        let (f0, f1) = (p.byte_at(o), p.byte_at(o + 1));
        if f0 != 0xFF || bank_origin(model, f1).is_none() {
            return Err(PacketError::BlockFlag {
                block,
                flag: u16::from_be_bytes([f0, f1]),
            });
        }
        let azimuth = p.azimuth(block);
        if u32::from(azimuth) >= AZIMUTH_UNITS {
            return Err(PacketError::Azimuth { block, azimuth });
        }
    }
    if is_hdl64(model) {
        return Ok(());
    }
    match p.return_mode_byte() {
        RETURN_MODE_STRONGEST | RETURN_MODE_LAST | RETURN_MODE_DUAL => Ok(()),
        other => Err(PacketError::ReturnMode(other)),
    }
}

/// [`super::classify`] for any Velodyne model: a valid packet, or how to count the payload
/// (1206 bytes failing [`check`], or a length within [`MALFORMED_LEN_TOLERANCE`] of 1206, or
/// a payload starting with a block flag valid for the model: malformed; anything else ignored).
pub fn classify_model(
    model: SensorModel,
    payload: &[u8],
) -> Result<Packet<&[u8]>, PacketRejection<PacketError>> {
    match check(model, payload) {
        Ok(()) => Ok(Packet::new_unchecked(payload)),
        Err(e @ PacketError::Length { len }) => {
            let flagged = matches!(payload, [0xFF, f1, ..] if bank_origin(model, *f1).is_some());
            if len.abs_diff(DATA_PACKET_LEN) <= MALFORMED_LEN_TOLERANCE || flagged {
                Err(PacketRejection::Malformed(e))
            } else {
                Err(PacketRejection::Ignored)
            }
        }
        Err(e) => Err(PacketRejection::Malformed(e)),
    }
}

/// Return mode of a checked packet of `model` (byte 1204; HDL-64E: the pair rule of the module
/// docs).
pub fn return_mode(model: SensorModel, p: &Packet<&[u8]>) -> ReturnMode {
    if is_hdl64(model) {
        let paired = (0..BLOCKS / 2).all(|q| {
            p.byte_at(2 * q * BLOCK_LEN + 1) == p.byte_at((2 * q + 1) * BLOCK_LEN + 1)
                && p.azimuth(2 * q) == p.azimuth(2 * q + 1)
        });
        return if paired {
            ReturnMode::Dual
        } else {
            ReturnMode::Strongest
        };
    }
    p.return_mode()
}

/// Blocks of a VLS-128 dual-return packet that hold data (0..7: the four banks of one firing
/// sequence, last and strongest return of each bank in blocks `2b`, `2b+1`); blocks 8..11 are
/// padding (VLS-128 manual, dual-return packet layout).
pub const VLS128_DUAL_DATA_BLOCKS: usize = 8;

/// Number of blocks holding data in `mode` (8 for a VLS-128 dual packet, else 12).
pub const fn data_blocks(model: SensorModel, mode: ReturnMode) -> usize {
    match (model, mode) {
        (SensorModel::Vls128, ReturnMode::Dual) => VLS128_DUAL_DATA_BLOCKS,
        _ => BLOCKS,
    }
}

/// Blocks of one firing sequence in a packet of `model` in `mode`: [`blocks_per_sequence`],
/// doubled in dual return (both returns of every bank), e.g. 8 for a VLS-128 dual packet.
pub const fn blocks_per_sequence_in(model: SensorModel, mode: ReturnMode) -> usize {
    blocks_per_sequence(model)
        * match mode {
            ReturnMode::Dual => 2,
            _ => 1,
        }
}

/// Firing sequences per packet: `data_blocks / blocks_per_sequence_in` (12 VLP-32C/HDL-32E
/// single, 6 dual; 6/3 HDL-64E; 3 VLS-128 single, 1 dual).
pub const fn sequences_per_packet(model: SensorModel, mode: ReturnMode) -> usize {
    data_blocks(model, mode) / blocks_per_sequence_in(model, mode)
}

/// Firing-sequence period of `model`, ns.
pub const fn sequence_ns(model: SensorModel) -> u32 {
    match model {
        SensorModel::Hdl32e => HDL32E_SEQUENCE_NS,
        SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 => HDL64E_SEQUENCE_NS,
        SensorModel::Vls128 => VLS128_SEQUENCE_NS,
        _ => VLP32C_SEQUENCE_NS,
    }
}

/// Nominal time between two data packets of `model` in `mode`, ns.
pub const fn packet_interval_ns(model: SensorModel, mode: ReturnMode) -> u64 {
    sequences_per_packet(model, mode) as u64 * sequence_ns(model) as u64
}

/// Firing sequence (0-based, in packet order) of `block`.
pub const fn sequence_of_block(model: SensorModel, mode: ReturnMode, block: usize) -> usize {
    block / blocks_per_sequence_in(model, mode)
}

/// Firing time of `laser` (0..lasers) in `block`, ns after the first firing of the packet
/// (the manuals' timing tables):
/// * VLP-32C: `seq·55.296 µs + (laser/2)·2.304 µs` (lasers fire in pairs);
/// * HDL-32E: `seq·46.080 µs + laser·1.152 µs`;
/// * HDL-64E: `seq·48 µs` ([`HDL64E_SEQUENCE_NS`]);
/// * VLS-128: `seq·55.296 µs + (g + g/8)·2.665 µs`, group `g = laser/8` (one maintenance slot
///   after group 7); the packet's sensor time is its stamp − 8.7 µs ([`VLS128_STAMP_LEAD_NS`]).
///   Early firmware fires sequences 53.3 µs apart: [`MultiDecoder::set_sequence_ns`].
///
/// `seq` is [`sequence_of_block`].
pub const fn firing_offset_ns(
    model: SensorModel,
    mode: ReturnMode,
    block: usize,
    laser: usize,
) -> u32 {
    let seq = sequence_of_block(model, mode, block) as u32;
    let l = laser as u32;
    match model {
        SensorModel::Hdl32e => seq * HDL32E_SEQUENCE_NS + (l % 32) * HDL32E_LASER_NS,
        SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3 => seq * HDL64E_SEQUENCE_NS,
        SensorModel::Vls128 => {
            let g = (l % 128) / 8;
            seq * VLS128_SEQUENCE_NS + (g + g / 8) * VLS128_GROUP_NS
        }
        _ => seq * VLP32C_SEQUENCE_NS + ((l % 32) / 2) * VLP32C_PAIR_NS,
    }
}

/// Per-laser constants of the decoder, precomputed from the calibration.
#[derive(Clone, Copy, Debug, Default)]
struct Laser {
    /// The laser's calibration (default values for a laser missing from the calibration,
    /// which [`MultiDecoder::bank_valid`] masks out).
    corr: LaserCorrection,
    /// The intensity correction is the identity (no focal slope, no clamp).
    plain_intensity: bool,
    /// `rot_correction` in 0.01° units, f64 (Nebula's expression).
    rot_cdeg: f64,
    /// Interpolation factor (fraction of the block advance) for this laser, f32.
    frac: f32,
    /// Intensity focal offset `256·(1 − fd/13100)²`.
    focal_offset: f32,
    /// Firing time of the laser inside its sequence, ns ([`firing_offset_ns`] of block 0).
    laser_ns: u32,
}

/// The point decoder for VLP-32C, HDL-32E, HDL-64E S2/S3 and VLS-128 (module docs): calibration
/// + settings, no state between packets.
#[derive(Clone)]
pub struct MultiDecoder {
    model: SensorModel,
    settings: DecoderSettings,
    unit_m: f32,
    lasers: Vec<Laser>,
    /// Per bank of 32 lasers, the range gate of laser `32·bank + k` as an inclusive window of
    /// raw values ([`super::raw_window`]); `(1, 0)` (empty) for a laser not in the calibration.
    bank_lo: Box<[[u16; SLOTS_PER_BLOCK]; 4]>,
    /// See `bank_lo`.
    bank_hi: Box<[[u16; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, `dist_correction` (m) of laser `32·bank + k`.
    bank_corr: Box<[[f32; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, the cosine of laser `32·bank + k`'s elevation.
    bank_cos: Box<[[f32; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, the sine of laser `32·bank + k`'s elevation.
    bank_sin: Box<[[f32; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, the elevation (rad) of laser `32·bank + k`.
    bank_vert: Box<[[f32; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, the ring of laser `32·bank + k`.
    bank_ring: Box<[[u16; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, [`Laser::laser_ns`] of laser `32·bank + k`.
    bank_ns: Box<[[u32; SLOTS_PER_BLOCK]; 4]>,
    /// Every laser has zero horizontal and vertical offsets, no two-point correction and no
    /// intensity correction: the full calibration model reduces to the spherical one, and
    /// single-return blocks take the dense path.
    plain_geometry: bool,
    /// Per bank of 32 lasers, [`Laser::frac`] of laser `32·bank + k`.
    bank_frac: Box<[[f32; SLOTS_PER_BLOCK]; 4]>,
    /// Per bank of 32 lasers, [`Laser::rot_cdeg`] of laser `32·bank + k`.
    bank_rot: Box<[[f64; SLOTS_PER_BLOCK]; 4]>,
    /// `(cos, sin)` of every azimuth unit, f32, then the azimuth in rad (`cdeg · π/18000`,
    /// f64 rounded to f32) and padding.
    trig: super::TrigTable,
    /// The firing state [`Self::decode_blocks`] uses ([`Self::set_sequence_ns`],
    /// [`Self::set_packet_advance_cdeg`]); a stream keeps its own and passes it to
    /// [`Self::decode_blocks_with`], so the decoder itself stays immutable and shared.
    firing: Firing,
}

/// What a 32/64/128-laser decoder needs besides its calibration tables, learned by the stream
/// from the packets themselves ([`super::VelodyneStream`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Firing {
    /// Firing-sequence period in use, ns ([`sequence_ns`], or the VLS-128 firmware variant:
    /// [`vls128_sequence_from_spacing`]).
    pub sequence_ns: u32,
    /// Azimuth advance of a packet that holds a single firing sequence (VLS-128 dual return),
    /// 0.01° ([`MultiDecoder::set_packet_advance_cdeg`]); 0: no interpolation.
    pub packet_advance_cdeg: u16,
}

impl Firing {
    /// The model's nominal firing: its manual's sequence period ([`sequence_ns`]), no packet
    /// advance.
    pub fn nominal(model: SensorModel) -> Self {
        Self {
            sequence_ns: sequence_ns(model),
            packet_advance_cdeg: 0,
        }
    }

    /// Time between two data packets of `model` in `mode` at this firing's sequence period,
    /// ns.
    pub fn packet_interval_ns(self, model: SensorModel, mode: ReturnMode) -> u64 {
        sequences_per_packet(model, mode) as u64 * u64::from(self.sequence_ns)
    }
}

impl std::fmt::Debug for MultiDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiDecoder")
            .field("model", &self.model)
            .field("settings", &self.settings)
            .field("unit_m", &self.unit_m)
            .finish_non_exhaustive()
    }
}

impl MultiDecoder {
    /// Builds a decoder for `model` (VLP-32C, HDL-32E, HDL-64E S2/S3 or VLS-128) from a
    /// calibration of [`laser_count`] lasers; a laser missing from `calib` emits no points.
    pub fn new(model: SensorModel, calib: &VelodyneCalibration, settings: DecoderSettings) -> Self {
        let n = laser_count(model);
        let unit_m = if model == SensorModel::Vls128 {
            VLS128_DISTANCE_UNIT_M
        } else {
            calib.distance_resolution_m
        };
        let seq_us = sequence_ns(model) as f32 / 1000.0;
        let lasers: Vec<Laser> = (0..n)
            .map(|i| {
                let corr = calib.lasers.get(i).copied();
                let rot = corr.map_or(0.0, |c| c.rot_correction);
                let frac = match (settings.flavor, model) {
                    (DecodeFlavor::Nebula, SensorModel::Vls128) => {
                        let g = (i / 8) as u8;
                        (2.665f32 / 53.3f32) * f32::from(g + g / 8)
                    }
                    // Nebula's `diff * 2.304 / 55.296 * j`, evaluated left to right; the
                    // diff-dependent part is applied in `decode`.
                    (DecodeFlavor::Nebula, _) => (i % 32) as f32,
                    (DecodeFlavor::Manual, _) => {
                        firing_offset_ns(model, ReturnMode::Strongest, 0, i) as f32
                            / 1000.0
                            / seq_us
                    }
                };
                let fd = corr.map_or(0.0, |c| c.focal_distance);
                Laser {
                    corr: corr.unwrap_or_default(),
                    plain_intensity: corr.is_none_or(|c| {
                        c.focal_slope == 0.0 && c.min_intensity <= 0.0 && c.max_intensity >= 255.0
                    }),
                    rot_cdeg: f64::from(rot) * 180.0 / PI * 100.0,
                    frac,
                    focal_offset: 256.0 * (1.0 - fd / 13100.0) * (1.0 - fd / 13100.0),
                    laser_ns: firing_offset_ns(model, ReturnMode::Strongest, 0, i),
                }
            })
            .collect();
        let trig = super::trig_table();
        let (min_f, max_f) = (
            super::f32_above(settings.min_range_m),
            super::f32_below(settings.max_range_m),
        );
        let windows: Vec<(u16, u16)> = (0..4 * SLOTS_PER_BLOCK)
            .map(|i| match calib.lasers.get(i) {
                Some(c) if i < n => super::raw_window(unit_m, c.dist_correction, min_f, max_f),
                _ => (1, 0),
            })
            .collect();
        let bank_window = |pick: fn((u16, u16)) -> u16| {
            Box::new(std::array::from_fn(|b| {
                std::array::from_fn(|k| {
                    windows.get(b * SLOTS_PER_BLOCK + k).map_or(0, |&w| pick(w))
                })
            }))
        };
        let bank_frac = Box::new(std::array::from_fn(|b| {
            std::array::from_fn(|k| lasers.get(b * SLOTS_PER_BLOCK + k).map_or(0.0, |l| l.frac))
        }));
        let bank_rot = Box::new(std::array::from_fn(|b| {
            std::array::from_fn(|k| {
                lasers
                    .get(b * SLOTS_PER_BLOCK + k)
                    .map_or(0.0, |l| l.rot_cdeg)
            })
        }));
        fn bank<T: Copy + Default>(
            lasers: &[Laser],
            f: impl Fn(&Laser) -> T,
        ) -> Box<[[T; SLOTS_PER_BLOCK]; 4]> {
            Box::new(std::array::from_fn(|b| {
                std::array::from_fn(|k| {
                    lasers
                        .get(b * SLOTS_PER_BLOCK + k)
                        .map_or_else(T::default, &f)
                })
            }))
        }
        let plain_geometry = lasers.iter().all(|l| {
            l.plain_intensity
                && !l.corr.two_pt_correction
                && l.corr.horiz_offset == 0.0
                && l.corr.vert_offset == 0.0
        });
        Self {
            model,
            settings,
            unit_m,
            bank_corr: bank(&lasers, |l| l.corr.dist_correction),
            bank_cos: bank(&lasers, |l| l.corr.cos_vert),
            bank_sin: bank(&lasers, |l| l.corr.sin_vert),
            bank_vert: bank(&lasers, |l| l.corr.vert_correction),
            bank_ring: bank(&lasers, |l| l.corr.ring),
            bank_ns: bank(&lasers, |l| l.laser_ns),
            plain_geometry,
            lasers,
            bank_lo: bank_window(|w| w.0),
            bank_hi: bank_window(|w| w.1),
            bank_frac,
            bank_rot,
            trig,
            firing: Firing::nominal(model),
        }
    }

    /// Sets the azimuth advance, 0.01°, used to interpolate a packet that holds a single
    /// firing sequence (VLS-128 dual return, default rules): the sensor's azimuth change over
    /// one sequence, which the packet alone does not tell. [`super::VelodyneStream`] sets it
    /// to the first-block azimuth of this packet minus that of the previous packet when that
    /// packet is the one just before (sensor time one packet interval earlier), else to the
    /// nominal advance at 600 rpm. Default 0 (no interpolation).
    pub fn set_packet_advance_cdeg(&mut self, cdeg: u16) {
        self.firing.packet_advance_cdeg = cdeg;
    }

    /// The firing state [`Self::decode_blocks`] uses.
    pub fn firing(&self) -> Firing {
        self.firing
    }

    /// Firing-sequence period in use, ns.
    pub fn sequence_ns(&self) -> u32 {
        self.firing.sequence_ns
    }

    /// Selects the firing-sequence period, ns (VLS-128 firmware variants:
    /// [`VLS128_SEQUENCE_NS`] or [`VLS128_SEQUENCE_EARLY_NS`], see
    /// [`vls128_sequence_from_spacing`]). Affects `offset_ns` (point times) only; the azimuth
    /// interpolation of the Nebula flavour keeps Nebula's constants.
    pub fn set_sequence_ns(&mut self, ns: u32) {
        self.firing.sequence_ns = ns;
    }

    /// Nominal time between two data packets in `mode` with the period in use, ns.
    pub fn packet_interval_ns(&self, mode: ReturnMode) -> u64 {
        self.firing.packet_interval_ns(self.model, mode)
    }

    /// The configured model.
    pub fn model(&self) -> SensorModel {
        self.model
    }

    /// Range unit in use, m per count.
    pub fn distance_unit_m(&self) -> f32 {
        self.unit_m
    }

    /// Block azimuths and advances of a packet, Nebula's chain (module docs): `(az, diff)` per
    /// block, 0.01° units.
    fn azimuths(
        &self,
        p: &Packet<&[u8]>,
        mode: ReturnMode,
        advance_cdeg: u16,
    ) -> [(u16, f32); BLOCKS] {
        let dual = mode == ReturnMode::Dual;
        let nblocks = data_blocks(self.model, mode);
        // Only data blocks are read: a VLS-128 dual packet's padding blocks 8..11 never are
        // (in Nebula's chain, which looks two blocks ahead, the last data block stands in for
        // them: the same value when the padding repeats the sequence's azimuth).
        let rot = |b: usize| p.azimuth(b.min(nblocks - 1));
        let diff =
            |a: u16, b: u16| ((AZIMUTH_UNITS + u32::from(b) - u32::from(a)) % AZIMUTH_UNITS) as f32;
        let mut out = [(0u16, 0f32); BLOCKS];
        match self.settings.flavor {
            DecodeFlavor::Nebula => {
                let step = 1 + usize::from(dual);
                let (mut next, mut last_diff) = (0u16, 0f32);
                for (i, o) in out.iter_mut().enumerate().take(nblocks) {
                    let az = if i == 0 { rot(0) } else { next };
                    let d = if i < BLOCKS - step {
                        next = rot(i + step);
                        last_diff = diff(az, next);
                        last_diff
                    } else if i + 1 == BLOCKS - 4 * usize::from(dual) {
                        0.0
                    } else {
                        last_diff
                    };
                    *o = (az, d);
                }
            }
            DecodeFlavor::Manual => {
                // Every block of a firing sequence (all banks, both returns) takes the
                // sequence's azimuth (its first block's) and interpolates with the sequence's
                // own advance: the next sequence's azimuth minus this one; the last sequence
                // reuses the previous advance, and a packet of one sequence (VLS-128 dual)
                // the advance since the previous packet ([`Self::set_packet_advance_cdeg`]);
                // a jump over [`super::MAX_ADVANCE_CDEG`] is a pause in firing, not rotation
                // (`super::pick_advance`).
                let bps = blocks_per_sequence_in(self.model, mode);
                let nseq = (nblocks / bps).max(1);
                for (i, o) in out.iter_mut().enumerate().take(nblocks) {
                    let s = i / bps;
                    let az = rot(s * bps);
                    let fwd = (s + 1 < nseq).then(|| diff(az, rot((s + 1) * bps)));
                    let back = || {
                        if s > 0 {
                            Some(diff(rot((s - 1) * bps), az))
                        } else {
                            (nseq == 1).then_some(f32::from(advance_cdeg))
                        }
                    };
                    *o = (az, super::pick_advance(fwd, back));
                }
            }
        }
        out
    }

    /// Decodes one packet checked by [`check`] for this decoder's model, calling `emit` for every
    /// point that survives the range and field-of-view filters, in packet order (block, slot).
    /// `DecodedPoint::slot` is the laser number (0..127) and `offset_ns` its
    /// [`firing_offset_ns`].
    pub fn decode(&self, p: &Packet<&[u8]>, mut emit: impl FnMut(DecodedPoint)) {
        self.decode_blocks(p, |b| b.for_each(&mut emit));
    }

    /// Decodes one packet block by block (the rules of [`Self::decode`]): `sink` gets each
    /// block that keeps at least one point as a [`BlockPoints`] (`first_laser` = the block's
    /// bank origin), in packet order.
    ///
    /// Hot loop: monomorphised on the calibration model (VLS-128 or full) and on dual return;
    /// per block, the slots carrying a point are found first as a bit mask (one SIMD pass, no
    /// branch per slot). A single-return block of a calibration whose geometry is the plain
    /// spherical model (VLS-128; others when every laser has zero offsets, no two-point
    /// correction and no intensity correction) computes all 32 slots at once
    /// (`velodyne::dense`); otherwise only the kept slots are decoded.
    pub fn decode_blocks(&self, p: &Packet<&[u8]>, sink: impl FnMut(&BlockPoints<'_>)) {
        self.decode_blocks_with(p, self.firing, sink);
    }

    /// [`Self::decode_blocks`] with the firing state `firing` instead of the decoder's own (a
    /// stream's, [`super::VelodyneStream`]).
    pub fn decode_blocks_with(
        &self,
        p: &Packet<&[u8]>,
        firing: Firing,
        sink: impl FnMut(&BlockPoints<'_>),
    ) {
        let mode = return_mode(self.model, p);
        match (self.model == SensorModel::Vls128, mode == ReturnMode::Dual) {
            (true, false) => self.decode_mode::<true, false>(p, mode, firing, sink),
            (true, true) => self.decode_mode::<true, true>(p, mode, firing, sink),
            (false, false) => self.decode_mode::<false, false>(p, mode, firing, sink),
            (false, true) => self.decode_mode::<false, true>(p, mode, firing, sink),
        }
    }

    #[inline(always)]
    fn decode_mode<const VLS: bool, const DUAL: bool>(
        &self,
        p: &Packet<&[u8]>,
        mode: ReturnMode,
        firing: Firing,
        mut sink: impl FnMut(&BlockPoints<'_>),
    ) {
        let model = self.model;
        let s = &self.settings;
        let nblocks = data_blocks(model, mode);
        let azs = self.azimuths(p, mode, firing.packet_advance_cdeg);
        let Ok(buf) = <&[u8; DATA_PACKET_LEN]>::try_from(p.as_bytes()) else {
            return;
        };
        let (blocks, _) = buf.as_chunks::<BLOCK_LEN>();
        let empty = [0u8; BLOCK_LEN];
        let nebula_vlp = s.flavor == DecodeFlavor::Nebula && !VLS;
        let single_type = return_type(mode, 1, 0, 0, || 0) as u8;
        let dense = !DUAL && (VLS || self.plain_geometry);
        let point_fov = s.fov.filter(|_| VLS || s.flavor == DecodeFlavor::Manual);
        let mut bp = BlockPoints::new(&self.bank_ring[0], &self.bank_vert[0], &self.bank_ns[0]);
        if !DUAL {
            bp.return_type = [single_type; SLOTS_PER_BLOCK];
        }
        for (block, (&(az, diff), blk)) in azs.iter().zip(blocks).enumerate().take(nblocks) {
            let Some(origin) = bank_origin(model, blk[1]) else {
                continue;
            };
            let origin = usize::from(origin);
            let pblk = if DUAL {
                blocks.get(block ^ 1).unwrap_or(&empty)
            } else {
                &empty
            };
            if let Some(fov) = s.fov
                && !self.block_in_fov(fov, p.azimuth(block), az)
            {
                continue;
            }
            let odd = DUAL && block % 2 == 1;
            let slots = super::slot_view(blk);
            let pslots = super::slot_view(pblk);
            let bank_no = origin / SLOTS_PER_BLOCK;
            let (Some(lo), Some(hi)) = (self.bank_lo.get(bank_no), self.bank_hi.get(bank_no))
            else {
                continue;
            };
            // Stage 1 ([`super::slot_mask`]): the slots carrying a point (raw range inside the
            // laser's window: non-zero, inside the range filter, laser in the calibration; in
            // an odd dual block different from the partner's).
            let mut mask = super::slot_mask(slots, lo, hi, odd.then_some(pslots));
            if mask == 0 {
                continue;
            }
            let (Some(bank), Some(fr), Some(rot)) = (
                self.lasers.get(origin..),
                self.bank_frac.get(bank_no),
                self.bank_rot.get(bank_no),
            ) else {
                continue;
            };
            let (Some(ring), Some(vert), Some(ns)) = (
                self.bank_ring.get(bank_no),
                self.bank_vert.get(bank_no),
                self.bank_ns.get(bank_no),
            ) else {
                continue;
            };
            bp.channel = ring;
            bp.elevation = vert;
            bp.slot_ns = ns;
            bp.block = block as u8;
            bp.first_laser = origin as u8;
            bp.block_ns = sequence_of_block(model, mode, block) as u32 * firing.sequence_ns;
            // Nebula's VLP-32 expression `diff * 2.304f / 55.296f * j`, left to right.
            let step = if nebula_vlp {
                diff * 2.304f32 / 55.296f32
            } else {
                diff
            };
            let azf0 = f32::from(az);
            if dense {
                // Stage 2, all 32 slots at once; `azf0 + step·frac` as the scalar path.
                let t: [f32; SLOTS_PER_BLOCK] = std::array::from_fn(|k| step * fr[k]);
                let (Some(corr), Some(cos_vert), Some(sin_vert)) = (
                    self.bank_corr.get(bank_no),
                    self.bank_cos.get(bank_no),
                    self.bank_sin.get(bank_no),
                ) else {
                    continue;
                };
                super::dense::fill(
                    &mut bp,
                    buf,
                    block,
                    &t,
                    azf0,
                    super::dense::DenseLasers {
                        corr,
                        cos_vert,
                        sin_vert,
                        rot,
                        res: self.unit_m,
                        trig: self.trig,
                    },
                );
            } else {
                // Stage 2, kept slots only.
                let mut m = mask;
                while m != 0 {
                    let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                    m &= m - 1;
                    let Some(l) = bank.get(slot) else {
                        mask &= !(1 << slot);
                        continue;
                    };
                    let c = &l.corr;
                    let [r0, r1, raw_i] = slots[slot];
                    let raw = u16::from_le_bytes([r0, r1]);
                    let distance = super::raw_distance(raw, self.unit_m, c.dist_correction);
                    let azc = super::wrap_round_cdeg(
                        (f64::from(azf0 + step * l.frac) - l.rot_cdeg) as f32,
                    );
                    let [ca, sa] = self.trig[azc.min(AZIMUTH_UNITS - 1) as usize];
                    let az_rad = super::azimuth_rad(azc);
                    let (x, y, z) = if VLS {
                        let xy = distance * c.cos_vert;
                        (xy * ca, -(xy * sa), distance * c.sin_vert)
                    } else {
                        full_model(c, distance, ca, sa)
                    };
                    let intensity = if VLS || l.plain_intensity {
                        raw_i
                    } else {
                        corrected_intensity(c, l.focal_offset, raw_i, raw)
                    };
                    bp.x[slot] = x;
                    bp.y[slot] = y;
                    bp.z[slot] = z;
                    bp.distance[slot] = distance;
                    bp.azimuth[slot] = az_rad;
                    bp.azimuth_cdeg[slot] = azc;
                    bp.intensity[slot] = intensity;
                    if DUAL {
                        let [o0, o1, oi] = pslots[slot];
                        let other = u16::from_le_bytes([o0, o1]);
                        bp.return_type[slot] =
                            return_type(mode, raw, other, intensity, || oi) as u8;
                    }
                }
            }
            if let Some(fov) = point_fov {
                let mut m = mask;
                while m != 0 {
                    let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                    m &= m - 1;
                    if !fov.point.contains_cdeg(bp.azimuth_cdeg[slot]) {
                        mask &= !(1 << slot);
                    }
                }
            }
            bp.mask = mask;
            if mask != 0 {
                sink(&bp);
            }
        }
    }

    /// Nebula's block-level field-of-view test: VLP-32C/HDL use the raw block azimuth and handle
    /// the wrap; VLS-128 tests the chained azimuth and passes every block when `min > max`
    /// (its point-level test then applies).
    fn block_in_fov(&self, fov: VelodyneFov, raw_az: u16, chained_az: u16) -> bool {
        if self.settings.flavor == DecodeFlavor::Manual {
            return true;
        }
        if self.model == SensorModel::Vls128 {
            return fov.block_passes(chained_az);
        }
        fov.point.contains_cdeg(u32::from(raw_az))
    }
}

/// The HDL-64E calibration model (module docs), in Nebula's f32 order of operations.
/// Returns `(x, y, z)` in m, x forward, y left, z up.
fn full_model(c: &LaserCorrection, distance: f32, ca: f32, sa: f32) -> (f32, f32, f32) {
    let (cv, sv) = (c.cos_vert, c.sin_vert);
    let (h, v) = (c.horiz_offset, c.vert_offset);
    let (mut dx, mut dy) = (0f32, 0f32);
    if c.two_pt_correction {
        let xy = distance * cv - v * sv;
        let xx = (xy * sa - h * ca).abs();
        let yy = (xy * ca + h * sa).abs();
        let dc = c.dist_correction;
        dx = ((f64::from(dc - c.dist_correction_x) * (f64::from(xx) - 2.4) / (25.04 - 2.4)
            + f64::from(c.dist_correction_x)) as f32)
            - dc;
        dy = ((f64::from(dc - c.dist_correction_y) * (f64::from(yy) - 1.93) / (25.04 - 1.93)
            + f64::from(c.dist_correction_y)) as f32)
            - dc;
    }
    let dxv = distance + dx;
    let xy_x = dxv * cv - v * sv;
    let vel_x = xy_x * sa - h * ca;
    let dyv = distance + dy;
    let xy_y = dyv * cv - v * sv;
    let vel_y = xy_y * ca + h * sa;
    let z = dyv * sv + v * cv;
    (vel_y, -vel_x, z)
}

/// Intensity correction of the HDL-64E manual (module docs), clamped to the laser's
/// `[min_intensity, max_intensity]` and to 0..=255.
fn corrected_intensity(c: &LaserCorrection, focal_offset: f32, raw_i: u8, raw_d: u16) -> u8 {
    if c.focal_slope == 0.0 && c.min_intensity <= 0.0 && c.max_intensity >= 255.0 {
        return raw_i;
    }
    let q = 1.0 - f32::from(raw_d) / 65535.0;
    let sqr = q * q;
    let mut i = f32::from(raw_i) + c.focal_slope * (focal_offset - 256.0 * sqr).abs();
    // C++ `uint8_t += float` truncates towards zero.
    i = i.trunc().clamp(0.0, 255.0);
    i = i.max(c.min_intensity).min(c.max_intensity);
    i.clamp(0.0, 255.0) as u8
}

/// Return type of a point (module docs): `other` is the partner block's raw distance (dual),
/// `other_i` its reflectivity (only evaluated when needed).
fn return_type(
    mode: ReturnMode,
    raw: u16,
    other: u16,
    intensity: u8,
    other_i: impl FnOnce() -> u8,
) -> ReturnType {
    match mode {
        ReturnMode::Last => ReturnType::Last,
        ReturnMode::First => ReturnType::First,
        ReturnMode::Dual => {
            if other == 0 || other == raw {
                return ReturnType::Identical;
            }
            let oi = other_i();
            let first = other >= raw;
            let strongest = if oi == intensity {
                !first
            } else {
                oi < intensity
            };
            match (first, strongest) {
                (true, true) => ReturnType::FirstStrongest,
                (false, true) => ReturnType::LastStrongest,
                (true, false) => ReturnType::FirstWeak,
                (false, false) => ReturnType::LastWeak,
            }
        }
        _ => ReturnType::Strongest,
    }
}
