//! RoboSense mechanical LiDARs: RS-LiDAR-16, RS-LiDAR-32, RS-Bpearl, RS-Helios and
//! RS-Helios-16P. Zero-copy MSOP/DIFOP packet views, a sans-IO point decoder and the RoboSense
//! [`VendorDecoder`].
//!
//! Sources: the RS-LiDAR-16 / RS-LiDAR-32 / RS-Bpearl / RS-Helios user manuals (appendix
//! "MSOP/DIFOP packet format") as implemented by RoboSense's own SDK `rs_driver` (v1.5,
//! `decoder_RS16.hpp`, `decoder_RS32.hpp`, `decoder_RSBP.hpp`, `decoder_RSHELIOS.hpp`,
//! `decoder_RSHELIOS_16P.hpp`, `block_iterator.hpp`, `chan_angles.hpp`); this module follows
//! `rs_driver`'s arithmetic (integer 0.01° angles, f32 geometry, lens-centre offset) so points
//! agree with the vendor's software. No code was copied.
//!
//! ## MSOP (data) packet, UDP port 6699, 1248 bytes, **big-endian**
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 / 4 | magic: `55 AA 05 0A 5A A5 50 A0` (RS-16, RS-32, Bpearl: "V1 header") or `55 AA 05 5A` (Helios, Helios-16P) |
//! | 20 | 10 | timestamp. V1: year−2000, month, day, hour, minute, second (u8 each), ms (u16), µs (u16). Helios: seconds (u48) + µs (u32) since the Unix epoch |
//! | 30 | 1 | Helios: lidar type (informative); V1: 30 legacy type, 31 lidar type, 32 lidar model (type 0x03 + model 0x04 = Bpearl V4 firmware: 2.5 mm, Unix timestamp, see [`BPEARL_V4`]) |
//! | `42 + 100·b` | 2 | block flag `FF EE` (b = 0..11) |
//! | `42 + 100·b + 2` | 2 | block azimuth, u16, 0.01°, 0..35999 |
//! | `42 + 100·b + 4 + 3·c` | 2 | distance of channel c = 0..31, u16; unit 5 mm (RS-16/32/Bpearl) or 2.5 mm (Helios, Helios-16P); 0 = no return |
//! | `42 + 100·b + 6 + 3·c` | 1 | intensity of channel c |
//! | 1242 | 6 | packet index + tail |
//!
//! Block / channel layout (rs_driver `block_iterator.hpp`):
//! * **32-channel models** (RS-32, Bpearl, Helios): a block is one firing of channels 0..31
//!   (laser = channel). Single return: block b fired at `b·T`; dual return: blocks 2k and 2k+1
//!   are the two returns of the same firing at `k·T` (same azimuth).
//! * **16-laser models** (RS-16, Helios-16P): laser = channel % 16. Single return: a block is two
//!   firing sequences (channels 0..15, then 16..31), fired at `b·2T`; dual return: a block is one
//!   sequence, channels 0..15 the first return and 16..31 the second, fired at `b·T`.
//!
//! `T` (block duration) is 55.50 µs (RS-16), 55.52 µs (RS-32, Bpearl), 55.56 µs (Helios,
//! Helios-16P); each channel has a firing offset inside the block ([`ModelSpec::firing_us`]).
//! A 16-laser single-return packet whose blocks advance by less than 1.5 nominal firings is
//! timed one firing per block ([`RobosenseDecoder::sequences_per_block`]), which keeps time
//! stamps monotonic on the Helios-16P capture in `shared/data`.
//!
//! ## DIFOP (device info) packet, UDP port 7788, 1248 bytes, magic `A5 FF 00 5A 11 11 55 55`
//!
//! | offset | size | field |
//! |---|---|---|
//! | 8 | 2 | motor speed, rpm |
//! | 32 | 4 | FOV start / end, 0.01° |
//! | 300 | 1 | return mode: V1 models `0` dual, `1` strongest, `2` last; Helios `0` dual, `4` strongest, `5` last, `6` first (nearest) |
//! | 468 | 96 | RS-32/Bpearl/Helios: 32 vertical angles, each `sign u8 (0 = +) + value u16` (0.01°; RS-32 0.001°) |
//! | 564 | 96 | RS-32/Bpearl/Helios: 32 horizontal angle offsets, same encoding |
//! | 1165 | 48 | RS-16: 16 vertical angles, u24 in 0.0001°, lasers 0..7 negative |
//!
//! A valid angle table in the DIFOP overrides the CSV (as rs_driver does when it waits for
//! DIFOP); a table with a `0xFF` sign byte or an angle outside [−90°, 180°) is "not
//! calibrated" and ignored.
//!
//! ## One pipeline, two ports
//! The capture thread dispatches by UDP port, so a RoboSense sensor whose DIFOP arrives on its
//! own port (7788) must be configured with the DIFOP port as a *second port of the same
//! sensor*: [`RobosenseStream::push`] (and so [`super::ScanPipeline::push`]) accepts both kinds
//! and tells them apart by the magic. A DIFOP updates the angle table and return mode and is
//! counted `ignored` (it carries no points).
//!
//! ## Geometry (rs_driver)
//! With integer 0.01° angles: `h = block_az + trunc(az_diff · firing/T')` (the channel's
//! interpolated azimuth), `hf = h + horiz[laser]`, `v = vert[laser]`, distance `d` (f32 m):
//! `x = d·cos v·cos hf + Rx·cos h`, `y = −d·cos v·sin hf − Rx·sin h`, `z = d·sin v + Rz`, where
//! `(Rx, Rz)` is the optical centre offset of the model. `az_diff` is the azimuth to the next
//! block (pair); more than 1° (a blind zone) or the last block use the nominal block advance
//! from the DIFOP rpm (10 Hz until a DIFOP arrives). Channel numbers are the laser's rank by
//! vertical angle (0 = lowest), as rs_driver's `toUserChan`.
//!
//! ## Frames
//! Frames are cut on the raw **block** azimuth (rs_driver's `SplitStrategyByAngle`: the block
//! whose azimuth reaches the cut angle starts the next frame), through the shared
//! [`ScanAssembler`]: every point is passed to it with its block's azimuth, so the carry rule
//! moves whole blocks. The corrected point azimuth may lie a few degrees (the horizontal angle
//! offsets, up to ±5°) on the other side of the cut.
//!
//! ## Damaged and foreign payloads
//! See [`classify`]: a packet with a bad block flag or azimuth is dropped whole and counted
//! malformed (rs_driver keeps the blocks before the bad one); payloads of other sizes without a
//! RoboSense magic are ignored and leave the frame in progress untouched.
//!
//! ## Sensor time
//! Frame start time is the packet timestamp (time of block 0) of the frame's first packet,
//! converted to ns since the Unix epoch (V1 date fields read as UTC; rs_driver uses the host's
//! local time zone via `mktime`); a V1 date that is not a valid calendar date falls back to the
//! host receive time. Point `time_stamp` = packet time + block offset + channel firing offset
//! − frame start.

use std::f64::consts::PI;
use std::path::Path;

use crate::HostTime;
use crate::frame::Frame;
use crate::point::{PointXYZIRCAEDT, ReturnType};
use crate::scan::{PacketInfo, ScanAssembler};

use crate::vendor::{
    ConfigError, PipelineOptions, Rejection, ReturnMode, SensorConfig, SensorModel, VendorDecoder,
};

/// Size of MSOP and DIFOP packets (UDP payload), bytes.
pub const PACKET_LEN: usize = 1248;
/// MSOP magic of the RS-16 / RS-32 / Bpearl ("V1" header).
pub const MSOP_MAGIC_V1: [u8; 8] = [0x55, 0xAA, 0x05, 0x0A, 0x5A, 0xA5, 0x50, 0xA0];
/// MSOP magic of the Helios / Helios-16P header.
pub const MSOP_MAGIC_HELIOS: [u8; 4] = [0x55, 0xAA, 0x05, 0x5A];
/// DIFOP magic.
pub const DIFOP_MAGIC: [u8; 8] = [0xA5, 0xFF, 0x00, 0x5A, 0x11, 0x11, 0x55, 0x55];
/// Block flag at the start of every MSOP block.
pub const BLOCK_FLAG: [u8; 2] = [0xFF, 0xEE];
/// MSOP header length, bytes (offset of block 0).
pub const HEADER_LEN: usize = 42;
/// Blocks per MSOP packet.
pub const BLOCKS: usize = 12;
/// Block length, bytes.
pub const BLOCK_LEN: usize = 100;
/// Channels per block.
pub const CHANNELS: usize = 32;
/// Offset of the MSOP timestamp (10 bytes).
pub const TIMESTAMP_OFFSET: usize = 20;
/// Default MSOP (data) UDP port.
pub const MSOP_PORT: u16 = 6699;
/// Default DIFOP UDP port.
pub const DIFOP_PORT: u16 = 7788;
/// Payload sizes within this many bytes of 1248 are treated as damaged RoboSense packets.
pub const MALFORMED_LEN_TOLERANCE: usize = 64;
/// Azimuth units per turn (0.01°).
pub const AZIMUTH_UNITS: i32 = 36_000;
/// Radians per 0.01°.
const CDEG_TO_RAD: f64 = 0.01 * PI / 180.0;

/// MSOP header family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    /// RS-16, RS-32, Bpearl: 8-byte magic, calendar timestamp.
    V1,
    /// Helios, Helios-16P: 4-byte magic, Unix seconds + µs timestamp.
    Helios,
}

impl HeaderKind {
    fn magic(self) -> &'static [u8] {
        match self {
            HeaderKind::V1 => &MSOP_MAGIC_V1,
            HeaderKind::Helios => &MSOP_MAGIC_HELIOS,
        }
    }
}

/// Constants of one RoboSense model (rs_driver `getConstParam` / `calcParam`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelSpec {
    /// The model.
    pub model: SensorModel,
    /// MSOP header family.
    pub header: HeaderKind,
    /// Lasers (rows of the angle table): 16 or 32.
    pub lasers: usize,
    /// 16-laser layout (laser = channel % 16, two sequences per block in single return).
    pub rs16_layout: bool,
    /// Distance unit, m (0.005 or 0.0025).
    pub distance_res_m: f32,
    /// Block (firing) duration `T`, µs.
    pub block_us: f32,
    /// Firing offset of channel 0..31 inside its block, µs.
    pub firing_us: [f32; CHANNELS],
    /// Optical centre offset along x, m.
    pub rx_m: f32,
    /// Optical centre offset along z, m.
    pub rz_m: f32,
    /// The timestamp is Unix seconds (u48) + µs (u32) rather than calendar fields.
    pub unix_time: bool,
}

const HELIOS_FIRING: [f32; 32] = [
    0.00, 1.73, 3.46, 5.19, 6.92, 8.65, 10.38, 12.11, 13.84, 15.57, 17.3, 19.03, 20.76, 22.49,
    24.22, 25.95, 27.68, 29.41, 31.14, 32.87, 34.6, 36.33, 38.06, 39.79, 41.52, 43.25, 44.98,
    46.71, 48.44, 50.17, 51.9, 53.63,
];

static SPECS: [ModelSpec; 5] = [
    ModelSpec {
        model: SensorModel::Rs16,
        header: HeaderKind::V1,
        lasers: 16,
        rs16_layout: true,
        distance_res_m: 0.005,
        block_us: 55.50,
        firing_us: [
            0.00, 2.80, 5.60, 8.40, 11.20, 14.00, 16.80, 19.60, 22.40, 25.20, 28.00, 30.80, 33.60,
            36.40, 39.20, 42.00, 55.50, 58.30, 61.10, 63.90, 66.70, 69.50, 72.30, 75.10, 77.90,
            80.70, 83.50, 86.30, 89.10, 91.90, 94.70, 97.50,
        ],
        rx_m: 0.03825,
        rz_m: 0.0,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Rs32,
        header: HeaderKind::V1,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.005,
        block_us: 55.52,
        firing_us: [
            0.00, 2.88, 5.76, 8.64, 11.52, 14.40, 17.28, 20.16, 23.04, 25.92, 28.80, 31.68, 34.56,
            37.44, 40.32, 44.64, 1.44, 4.32, 7.20, 10.08, 12.96, 15.84, 18.72, 21.60, 24.48, 27.36,
            30.24, 33.12, 36.00, 38.88, 41.76, 46.08,
        ],
        rx_m: 0.03997,
        rz_m: 0.0,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Bpearl,
        header: HeaderKind::V1,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.005,
        block_us: 55.52,
        firing_us: [
            0.00, 2.56, 5.12, 7.68, 10.24, 12.80, 15.36, 17.92, 25.68, 28.24, 30.80, 33.36, 35.92,
            38.48, 41.04, 43.60, 1.28, 3.84, 6.40, 8.96, 11.52, 14.08, 16.64, 19.20, 26.96, 29.52,
            32.08, 34.64, 37.20, 39.76, 42.32, 44.88,
        ],
        rx_m: 0.01473,
        rz_m: 0.09427,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Helios,
        header: HeaderKind::Helios,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.0025,
        block_us: 55.56,
        firing_us: HELIOS_FIRING,
        rx_m: 0.03498,
        rz_m: 0.0,
        unix_time: true,
    },
    ModelSpec {
        model: SensorModel::Helios16p,
        header: HeaderKind::Helios,
        lasers: 16,
        rs16_layout: true,
        distance_res_m: 0.0025,
        block_us: 55.56,
        firing_us: HELIOS_FIRING,
        rx_m: 0.03498,
        rz_m: 0.0,
        unix_time: true,
    },
];

/// RS-Bpearl V4 firmware (MSOP V1 header with lidar type 0x03 at byte 31 and lidar model 0x04
/// at byte 32, rs_driver `DecoderRSBP`): 2.5 mm distance unit, Unix timestamp, 55.56 µs
/// blocks, its own firing table and optical centre. Chosen per stream from the first MSOP.
pub static BPEARL_V4: ModelSpec = ModelSpec {
    model: SensorModel::Bpearl,
    header: HeaderKind::V1,
    lasers: 32,
    rs16_layout: false,
    distance_res_m: 0.0025,
    block_us: 55.56,
    firing_us: [
        0.00, 1.67, 3.34, 5.00, 6.67, 8.34, 10.01, 11.68, 13.34, 15.01, 16.68, 18.35, 20.02, 21.68,
        23.35, 25.02, 26.69, 28.36, 30.02, 31.69, 33.36, 35.03, 36.70, 38.36, 40.03, 41.70, 43.37,
        45.04, 46.70, 48.37, 50.04, 51.71,
    ],
    rx_m: 0.01619,
    rz_m: 0.09571,
    unix_time: true,
};

/// Byte 31 (lidar type) and 32 (lidar model) of a V1 MSOP header marking a Bpearl V4.
pub const BPEARL_V4_TYPE_MODEL: (u8, u8) = (0x03, 0x04);

/// The constants of a RoboSense model, `None` for other families.
pub fn spec(model: SensorModel) -> Option<&'static ModelSpec> {
    SPECS.iter().find(|s| s.model == model)
}

impl ModelSpec {
    /// Return mode of a DIFOP return-mode byte (offset 300), `None` for an unknown value.
    pub fn return_mode_of(&self, byte: u8) -> Option<ReturnMode> {
        match (self.header, byte) {
            (_, 0) => Some(ReturnMode::Dual),
            (HeaderKind::V1, 1) | (HeaderKind::Helios, 4) => Some(ReturnMode::Strongest),
            (HeaderKind::V1, 2) | (HeaderKind::Helios, 5) => Some(ReturnMode::Last),
            (HeaderKind::Helios, 6) => Some(ReturnMode::First),
            _ => None,
        }
    }

    /// Nominal packet interval, ns, in `mode` (12 firings single / 6 dual for 32-channel models;
    /// 24 sequences single / 12 dual for 16-laser models).
    pub fn packet_interval_ns(&self, mode: ReturnMode) -> u64 {
        let dual = mode.returns() > 1;
        let blocks = match (self.rs16_layout, dual) {
            (true, false) => 24.0,
            (false, true) => 6.0,
            _ => 12.0,
        };
        (f64::from(self.block_us) * blocks * 1000.0).round() as u64
    }
}

/// Why a payload is not a valid MSOP packet of the configured model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The payload is not 1248 bytes long.
    #[error("payload is {len} bytes, a RoboSense MSOP packet is 1248")]
    Length {
        /// Payload length, bytes.
        len: usize,
    },
    /// The magic is not the configured model's MSOP header (e.g. a V1 header for a Helios).
    #[error("MSOP magic does not match the configured model's header")]
    Magic,
    /// A block does not start with `FF EE`.
    #[error("block {block} flag is {flag:#06x}, expected 0xffee")]
    BlockFlag {
        /// Block index 0..11.
        block: usize,
        /// The two flag bytes.
        flag: u16,
    },
    /// A block azimuth is 36000 or more (0.01°).
    #[error("block {block} azimuth {azimuth} is outside [0, 35999] (0.01 deg)")]
    Azimuth {
        /// Block index 0..11.
        block: usize,
        /// Raw azimuth.
        azimuth: u16,
    },
}

/// A zero-copy view of an MSOP packet (smoltcp `wire` style): [`MsopPacket::new_checked`]
/// validates length, magic, every block flag and azimuth once; accessors never panic (they
/// return 0 past the end of an unchecked buffer).
#[derive(Clone, Copy, Debug)]
pub struct MsopPacket<T: AsRef<[u8]>> {
    buffer: T,
    header: HeaderKind,
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([
        b.get(o).copied().unwrap_or(0),
        b.get(o + 1).copied().unwrap_or(0),
    ])
}

impl<T: AsRef<[u8]>> MsopPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T, header: HeaderKind) -> Self {
        Self { buffer, header }
    }

    /// Wraps and validates a buffer for a model with header `header`.
    ///
    /// # Errors
    /// [`PacketError`] for a length other than 1248, the wrong magic, a block flag other than
    /// `FF EE` or a block azimuth >= 36000.
    pub fn new_checked(buffer: T, header: HeaderKind) -> Result<Self, PacketError> {
        let p = Self { buffer, header };
        let b = p.buffer.as_ref();
        if b.len() != PACKET_LEN {
            return Err(PacketError::Length { len: b.len() });
        }
        if !b.starts_with(header.magic()) {
            return Err(PacketError::Magic);
        }
        for block in 0..BLOCKS {
            let o = HEADER_LEN + block * BLOCK_LEN;
            if b.get(o..o + 2) != Some(&BLOCK_FLAG[..]) {
                return Err(PacketError::BlockFlag {
                    block,
                    flag: be16(b, o),
                });
            }
            let azimuth = p.azimuth(block);
            if i32::from(azimuth) >= AZIMUTH_UNITS {
                return Err(PacketError::Azimuth { block, azimuth });
            }
        }
        Ok(p)
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Azimuth of block `block` (0..11), 0.01°.
    pub fn azimuth(&self, block: usize) -> u16 {
        be16(self.bytes(), HEADER_LEN + block * BLOCK_LEN + 2)
    }

    /// Raw distance of channel `chan` (0..31) in block `block`, model units; 0 = no return.
    pub fn distance_raw(&self, block: usize, chan: usize) -> u16 {
        be16(self.bytes(), HEADER_LEN + block * BLOCK_LEN + 4 + 3 * chan)
    }

    /// Intensity of channel `chan` in block `block` (0..255).
    pub fn intensity(&self, block: usize, chan: usize) -> u8 {
        self.bytes()
            .get(HEADER_LEN + block * BLOCK_LEN + 6 + 3 * chan)
            .copied()
            .unwrap_or(0)
    }

    /// The 10 timestamp bytes at offset 20 (zeros past the end of a short buffer).
    pub fn timestamp_bytes(&self) -> [u8; 10] {
        let mut t = [0u8; 10];
        for (i, v) in t.iter_mut().enumerate() {
            *v = self.bytes().get(TIMESTAMP_OFFSET + i).copied().unwrap_or(0);
        }
        t
    }

    /// Packet time (block 0), ns since the Unix epoch, from the timestamp field in the
    /// header's usual format (V1 calendar, Helios Unix); see [`MsopPacket::sensor_time_ns_as`].
    pub fn sensor_time_ns(&self) -> Option<u64> {
        self.sensor_time_ns_as(self.header == HeaderKind::Helios)
    }

    /// Bytes 31 and 32 of a V1 header: lidar type and lidar model (0 past the end).
    pub fn lidar_type_model(&self) -> (u8, u8) {
        let b = self.bytes();
        (
            b.get(31).copied().unwrap_or(0),
            b.get(32).copied().unwrap_or(0),
        )
    }

    /// Packet time, ns since the Unix epoch: `unix` = u48 seconds + u32 µs (big-endian), else
    /// calendar fields (year − 2000, month, day, hour, minute, second, ms u16, µs u16, UTC);
    /// `None` for an invalid calendar date (month 0, day 32, ms >= 1000, ...).
    pub fn sensor_time_ns_as(&self, unix: bool) -> Option<u64> {
        let t = self.timestamp_bytes();
        match unix {
            true => {
                let sec = t[..6].iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
                let us = t[6..].iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
                sec.checked_mul(1_000_000_000)?.checked_add(us * 1000)
            }
            false => ymd_to_ns(&t),
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// V1 calendar timestamp (year−2000, month, day, hour, minute, second, ms BE, µs BE) → ns (UTC).
fn ymd_to_ns(t: &[u8; 10]) -> Option<u64> {
    let (y, mo, d, h, mi, s) = (t[0], t[1], t[2], t[3], t[4], t[5]);
    let ms = u16::from_be_bytes([t[6], t[7]]);
    let us = u16::from_be_bytes([t[8], t[9]]);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    if ms >= 1000 || us >= 1000 {
        return None;
    }
    let days = days_from_civil(2000 + i64::from(y), i64::from(mo), i64::from(d));
    let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
    let ns = secs * 1_000_000_000 + i64::from(ms) * 1_000_000 + i64::from(us) * 1000;
    u64::try_from(ns).ok()
}

/// A zero-copy view of a DIFOP packet; [`DifopPacket::new_checked`] checks length and magic.
#[derive(Clone, Copy, Debug)]
pub struct DifopPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DifopPacket<T> {
    /// Wraps and validates a DIFOP payload.
    ///
    /// # Errors
    /// [`PacketError::Length`] unless 1248 bytes, [`PacketError::Magic`] without the DIFOP magic.
    pub fn new_checked(buffer: T) -> Result<Self, PacketError> {
        let b = buffer.as_ref();
        if b.len() != PACKET_LEN {
            return Err(PacketError::Length { len: b.len() });
        }
        if !b.starts_with(&DIFOP_MAGIC) {
            return Err(PacketError::Magic);
        }
        Ok(Self { buffer })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Motor speed, rpm (offset 8).
    pub fn rpm(&self) -> u16 {
        be16(self.bytes(), 8)
    }

    /// FOV start and end, 0.01° (offset 32).
    pub fn fov_cdeg(&self) -> (u16, u16) {
        (be16(self.bytes(), 32), be16(self.bytes(), 34))
    }

    /// Bpearl "reversal" flag (offset 337, non-zero = mounted upside down: azimuths are
    /// mirrored, rs_driver `DecoderRSBP`).
    pub fn bpearl_reversal(&self) -> bool {
        self.bytes().get(337).is_some_and(|&b| b != 0)
    }

    /// Return-mode byte (offset 300); see [`ModelSpec::return_mode_of`].
    pub fn return_mode_byte(&self) -> u8 {
        self.bytes().get(300).copied().unwrap_or(0xFF)
    }

    /// The angle table for `spec`'s model, or `None` if the DIFOP holds no valid table
    /// (sign byte 0xFF, or an angle outside [−90°, 180°)).
    pub fn angles(&self, spec: &ModelSpec) -> Option<AngleTable> {
        let b = self.bytes();
        let ok = |v: i32| (-9000..18000).contains(&v);
        let mut t = AngleTable {
            vert_cdeg: Vec::with_capacity(spec.lasers),
            horiz_cdeg: Vec::with_capacity(spec.lasers),
        };
        if spec.model == SensorModel::Rs16 {
            for i in 0..16 {
                let o = 1165 + 3 * i;
                let raw = u32::from_be_bytes([0, *b.get(o)?, *b.get(o + 1)?, *b.get(o + 2)?]);
                // 0.0001° -> 0.01°, truncated; lasers 0..7 point down.
                let v = (f64::from(raw) * 0.01) as i32;
                let v = if i < 8 { -v } else { v };
                if !ok(v) {
                    return None;
                }
                t.vert_cdeg.push(v);
                t.horiz_cdeg.push(0);
            }
            return Some(t);
        }
        let read = |o: usize| -> Option<i32> {
            let sign = *b.get(o)?;
            if sign == 0xFF {
                return None;
            }
            let raw = be16(b, o + 1);
            let v = if spec.model == SensorModel::Rs32 {
                (f32::from(raw) * 0.1f32).round() as i32 // 0.001° -> 0.01°
            } else {
                i32::from(raw)
            };
            let v = if sign != 0 { -v } else { v };
            ok(v).then_some(v)
        };
        for i in 0..spec.lasers {
            t.vert_cdeg.push(read(468 + 3 * i)?);
            t.horiz_cdeg.push(read(564 + 3 * i)?);
        }
        Some(t)
    }
}

/// Per-laser angle table, 0.01° integers (rs_driver `ChanAngles`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AngleTable {
    /// Vertical angle of each laser, 0.01°.
    pub vert_cdeg: Vec<i32>,
    /// Horizontal offset of each laser, 0.01°.
    pub horiz_cdeg: Vec<i32>,
}

impl AngleTable {
    /// Parses a RoboSense angle CSV: one line per laser, `vertical[,horizontal]` in degrees
    /// (e.g. `14.94,-4.05`); values are converted to 0.01° by truncation of `f32 · 100`, as
    /// rs_driver does. Exactly `lasers` lines are needed (more are ignored).
    ///
    /// # Errors
    /// [`ConfigError::Calibration`] naming the line for a missing line, a non-number or an
    /// angle outside [−90°, 180°).
    pub fn from_csv_str(text: &str, lasers: usize, path: &Path) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError::Calibration {
            path: path.to_path_buf(),
            message,
        };
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let mut t = AngleTable {
            vert_cdeg: Vec::with_capacity(lasers),
            horiz_cdeg: Vec::with_capacity(lasers),
        };
        for i in 0..lasers {
            let line = lines
                .next()
                .ok_or_else(|| err(format!("has fewer than {lasers} lines (line {})", i + 1)))?;
            let mut it = line.split(',').map(str::trim);
            let parse = |s: Option<&str>, what: &str| -> Result<i32, ConfigError> {
                let s = s.unwrap_or("0");
                let v: f32 = if s.is_empty() {
                    0.0
                } else {
                    s.parse().map_err(|_| {
                        err(format!(
                            "line {}: {what} angle '{s}' is not a number",
                            i + 1
                        ))
                    })?
                };
                let c = (v * 100.0) as i32;
                if !v.is_finite() || !(-9000..18000).contains(&c) {
                    return Err(err(format!(
                        "line {}: {what} angle {v} is outside [-90, 180) deg",
                        i + 1
                    )));
                }
                Ok(c)
            };
            t.vert_cdeg.push(parse(it.next(), "vertical")?);
            t.horiz_cdeg.push(parse(it.next(), "horizontal")?);
        }
        Ok(t)
    }

    /// [`AngleTable::from_csv_str`] of a file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] when not UTF-8, else as [`AngleTable::from_csv_str`].
    pub fn from_bytes(bytes: &[u8], lasers: usize, source: &Path) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::from_csv_str(text, lasers, source)
    }

    /// Published channel number of each laser: its rank by vertical angle (0 = lowest).
    pub fn user_channels(&self) -> Vec<u16> {
        self.vert_cdeg
            .iter()
            .map(|a| self.vert_cdeg.iter().filter(|b| *b < a).count() as u16)
            .collect()
    }
}

/// `cdeg` reduced to [0, 36000): two compares for the usual range (−360°, 720°), a division
/// otherwise.
#[inline]
fn wrap_cdeg(cdeg: i32) -> i32 {
    if (0..AZIMUTH_UNITS).contains(&cdeg) {
        cdeg
    } else if (AZIMUTH_UNITS..2 * AZIMUTH_UNITS).contains(&cdeg) {
        cdeg - AZIMUTH_UNITS
    } else if (-AZIMUTH_UNITS..0).contains(&cdeg) {
        cdeg + AZIMUTH_UNITS
    } else {
        cdeg.rem_euclid(AZIMUTH_UNITS)
    }
}

/// One decoded point plus what the scan assembler needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodedPoint {
    /// The point; `time_stamp` is left 0 (the assembler sets it).
    pub point: PointXYZIRCAEDT,
    /// Corrected azimuth, 0.01°, 0..35999.
    pub azimuth_cdeg: u16,
    /// Raw azimuth of the point's block, 0.01° (used for the frame cut).
    pub block_azimuth_cdeg: u16,
    /// Firing time after the packet timestamp, ns.
    pub offset_ns: u32,
    /// Block 0..11.
    pub block: u8,
    /// Channel 0..31 in the block.
    pub chan: u8,
}

/// Decoder settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderSettings {
    /// Points with distance `<= min_range_m` are dropped, m.
    pub min_range_m: f32,
    /// Points with distance `>= max_range_m` are dropped, m.
    pub max_range_m: f32,
    /// Field of view `(min, max)` on the corrected azimuth, 0.01°, inclusive; `min > max`
    /// wraps through 0°. `None` keeps everything.
    pub fov_cdeg: Option<crate::scan::Fov>,
}

/// The RoboSense point decoder: model constants, angle table, settings. Stateless between
/// packets except for what a DIFOP sets (angles, rpm).
#[derive(Clone)]
pub struct RobosenseDecoder {
    spec: &'static ModelSpec,
    angles: AngleTable,
    user_chan: Vec<u16>,
    settings: DecoderSettings,
    /// Nominal azimuth advance per block (firing), 0.01° (rs_driver `block_az_diff_`).
    nominal_az_diff: i32,
    /// `(cos, sin)` per 0.01°, f32 of the f64 value (rs_driver `Trigon`).
    trig: Box<[[f32; 2]]>,
    /// Per channel, `[single, dual]`: azimuth fraction `firing / T'` (rs_driver `CHAN_AZIS`,
    /// f32) and firing offset in ns.
    chan: [ChanTiming; 2],
    /// Per laser: `(cos v, sin v)` and the elevation in rad.
    laser_vert: Vec<([f32; 2], f32)>,
    /// Motor speed, rpm (600 until a DIFOP says otherwise).
    rpm: u16,
    /// Azimuths mirrored (`36000 − h`), Bpearl reversal flag.
    mirrored: bool,
}

/// Per-channel timing of one return mode (precomputed from [`ModelSpec::firing_us`]).
#[derive(Clone, Copy, Debug, Default)]
struct ChanTiming {
    azis: [f32; CHANNELS],
    ns: [u32; CHANNELS],
}

impl ChanTiming {
    fn new(spec: &ModelSpec, dual: bool) -> Self {
        let mut t = Self::default();
        for c in 0..CHANNELS {
            let (firing, div) = match (spec.rs16_layout, dual) {
                (true, false) => (spec.firing_us[c], spec.block_us * 2.0),
                (true, true) => (spec.firing_us[c % 16], spec.block_us),
                (false, _) => (spec.firing_us[c], spec.block_us),
            };
            t.azis[c] = firing / div;
            t.ns[c] = (f64::from(firing) * 1000.0).round() as u32;
        }
        t
    }
}

impl std::fmt::Debug for RobosenseDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobosenseDecoder")
            .field("model", &self.spec.model)
            .field("angles", &self.angles)
            .field("settings", &self.settings)
            .field("nominal_az_diff", &self.nominal_az_diff)
            .finish_non_exhaustive()
    }
}

impl RobosenseDecoder {
    /// Builds a decoder for `spec` with `angles` (as many rows as `spec.lasers`; missing rows
    /// decode with 0° angles).
    pub fn new(spec: &'static ModelSpec, angles: AngleTable, settings: DecoderSettings) -> Self {
        let trig = (0..AZIMUTH_UNITS)
            .map(|i| {
                let rad = f64::from(i) * 0.01 * PI / 180.0;
                [rad.cos() as f32, rad.sin() as f32]
            })
            .collect();
        let mut d = Self {
            spec,
            user_chan: Vec::new(),
            angles: AngleTable {
                vert_cdeg: Vec::new(),
                horiz_cdeg: Vec::new(),
            },
            settings,
            nominal_az_diff: 0,
            trig,
            chan: [ChanTiming::new(spec, false), ChanTiming::new(spec, true)],
            laser_vert: Vec::new(),
            rpm: 600,
            mirrored: false,
        };
        d.set_angles(angles);
        d.set_rpm(600);
        d
    }

    /// The model constants.
    pub fn spec(&self) -> &'static ModelSpec {
        self.spec
    }

    /// The angle table in use.
    pub fn angles(&self) -> &AngleTable {
        &self.angles
    }

    /// Replaces the angle table (from a DIFOP).
    pub fn set_angles(&mut self, mut angles: AngleTable) {
        angles.vert_cdeg.resize(self.spec.lasers, 0);
        angles.horiz_cdeg.resize(self.spec.lasers, 0);
        self.user_chan = angles.user_channels();
        self.laser_vert = angles
            .vert_cdeg
            .iter()
            .map(|&v| (self.trig(v), (f64::from(v) * 0.01 * PI / 180.0) as f32))
            .collect();
        self.angles = angles;
    }

    /// Mirrors every azimuth (`h → 36000 − h`, before the geometry), as rs_driver does for a
    /// Bpearl whose DIFOP sets the reversal flag.
    pub fn set_mirrored(&mut self, mirrored: bool) {
        self.mirrored = mirrored;
    }

    /// Switches to another spec of the same model (a firmware variant such as [`BPEARL_V4`]),
    /// keeping the angle table, settings and rpm.
    pub fn set_spec(&mut self, spec: &'static ModelSpec) {
        self.spec = spec;
        self.chan = [ChanTiming::new(spec, false), ChanTiming::new(spec, true)];
        self.set_rpm(self.rpm);
    }

    /// Sets the motor speed (rpm; below 60 means 600, as rs_driver): the nominal block advance
    /// becomes `round(36000 · rps · T)` 0.01°.
    pub fn set_rpm(&mut self, rpm: u16) {
        self.rpm = rpm;
        let rps = match rpm / 60 {
            0 => 10,
            r => r,
        };
        let t = f64::from(self.spec.block_us) / 1e6;
        self.nominal_az_diff = (f64::from(AZIMUTH_UNITS) * f64::from(rps) * t).round() as i32;
    }

    /// Nominal azimuth advance per block, 0.01°.
    pub fn nominal_az_diff(&self) -> i32 {
        self.nominal_az_diff
    }

    fn trig(&self, cdeg: i32) -> [f32; 2] {
        self.trig
            .get(wrap_cdeg(cdeg) as usize)
            .copied()
            .unwrap_or([1.0, 0.0])
    }

    /// Firing sequences per block of a 16-laser single-return packet: 2 (rs_driver) unless the
    /// blocks advance by less than 1.5 nominal firings on average, as in the Helios-16P capture
    /// of `shared/data` (0.20° per block at 600 rpm, 1500 packets/s): then 1, so that packet
    /// times and point times stay consistent (rs_driver would place the blocks 111 µs apart
    /// while the packets are 667 µs apart, and points of consecutive packets would interleave).
    pub fn sequences_per_block(&self, p: &MsopPacket<&[u8]>) -> f64 {
        let span =
            (i32::from(p.azimuth(BLOCKS - 1)) - i32::from(p.azimuth(0))).rem_euclid(AZIMUTH_UNITS);
        if 2 * span >= 3 * self.nominal_az_diff * (BLOCKS as i32 - 1) {
            2.0
        } else {
            1.0
        }
    }

    /// `(az_diff, block time offset µs)` of block `b` (rs_driver block iterators).
    fn block_timing(&self, p: &MsopPacket<&[u8]>, dual: bool, b: usize) -> (i32, f64) {
        let s = self.spec;
        let t = f64::from(s.block_us);
        let (step, per_block, nominal) = match (s.rs16_layout, dual) {
            (true, false) => (1, self.sequences_per_block(p) * t, 2 * self.nominal_az_diff),
            (true, true) => (1, t, self.nominal_az_diff),
            (false, false) => (1, t, self.nominal_az_diff),
            (false, true) => (2, t, self.nominal_az_diff),
        };
        let first = b - b % step;
        let idx = first / step;
        let diff = if first + step < BLOCKS {
            let d = (i32::from(p.azimuth(first + step)) - i32::from(p.azimuth(first)))
                .rem_euclid(AZIMUTH_UNITS);
            if d > 100 { nominal } else { d }
        } else {
            nominal
        };
        (diff, idx as f64 * per_block)
    }

    /// Decodes one validated packet in `mode`, calling `emit` for every point that survives the
    /// range and FOV filters, in packet order (block, channel).
    ///
    /// Dual return: the two returns of a laser (channels c and c+16 of a block for 16-laser
    /// models, the same channel of blocks 2k and 2k+1 otherwise) with equal raw distance are
    /// one point of type [`ReturnType::Identical`] (emitted once, from the first slot), as is a
    /// return whose partner slot is empty; otherwise the shorter is "first", the longer "last",
    /// and the one with the higher intensity (the first on a tie) "strongest"
    /// (`FirstStrongest`, `LastWeak`, ...).
    pub fn decode(
        &self,
        p: &MsopPacket<&[u8]>,
        mode: ReturnMode,
        mut emit: impl FnMut(DecodedPoint),
    ) {
        let s = self.spec;
        let dual = mode.returns() > 1;
        let set = &self.settings;
        let single_type = match mode {
            ReturnMode::Last => ReturnType::Last,
            ReturnMode::First => ReturnType::First,
            _ => ReturnType::Strongest,
        };
        let timing = &self.chan[usize::from(dual)];
        for block in 0..BLOCKS {
            let (az_diff, block_off_us) = self.block_timing(p, dual, block);
            let block_off_ns = (block_off_us * 1000.0).round() as u32;
            let block_az = i32::from(p.azimuth(block));
            for chan in 0..CHANNELS {
                let raw = p.distance_raw(block, chan);
                if raw == 0 {
                    continue;
                }
                // Partner slot in dual mode, and whether this is the second slot.
                let (partner, second) = match (dual, s.rs16_layout) {
                    (false, _) => (None, false),
                    (true, true) => (Some((block, chan ^ 16)), chan >= 16),
                    (true, false) => (Some((block ^ 1, chan)), block % 2 == 1),
                };
                let other = partner.map_or(0, |(b, c)| p.distance_raw(b, c));
                if second && other == raw {
                    continue;
                }
                let distance = f32::from(raw) * s.distance_res_m;
                if !(distance > set.min_range_m && distance < set.max_range_m) {
                    continue;
                }
                let laser = if s.rs16_layout { chan % 16 } else { chan };
                let mut h = block_az + (az_diff as f32 * timing.azis[chan]) as i32;
                let (Some(&dh), Some(&([cos_v, sin_v], elevation))) = (
                    self.angles.horiz_cdeg.get(laser),
                    self.laser_vert.get(laser),
                ) else {
                    continue;
                };
                let mut hf = h + dh;
                if self.mirrored {
                    hf = AZIMUTH_UNITS - hf;
                    h = AZIMUTH_UNITS - h;
                }
                let az_c = wrap_cdeg(hf);
                if let Some(fov) = set.fov_cdeg
                    && !fov.contains_cdeg(az_c as u32)
                {
                    continue;
                }
                let [cos_hf, sin_hf] = self.trig(hf);
                let [cos_h, sin_h] = self.trig(h);
                let x = distance * cos_v * cos_hf + s.rx_m * cos_h;
                let y = -distance * cos_v * sin_hf - s.rx_m * sin_h;
                let z = distance * sin_v + s.rz_m;
                let intensity = p.intensity(block, chan);
                let return_type = match partner {
                    None => single_type,
                    Some((pb, pc)) => {
                        if other == 0 || other == raw {
                            ReturnType::Identical
                        } else {
                            let oi = p.intensity(pb, pc);
                            let first = raw < other;
                            let strongest = if oi == intensity {
                                !second
                            } else {
                                intensity > oi
                            };
                            match (first, strongest) {
                                (true, true) => ReturnType::FirstStrongest,
                                (true, false) => ReturnType::FirstWeak,
                                (false, true) => ReturnType::LastStrongest,
                                (false, false) => ReturnType::LastWeak,
                            }
                        }
                    }
                };
                emit(DecodedPoint {
                    point: PointXYZIRCAEDT {
                        x,
                        y,
                        z,
                        intensity,
                        return_type: return_type as u8,
                        channel: self.user_chan.get(laser).copied().unwrap_or(laser as u16),
                        azimuth: (f64::from(az_c) * CDEG_TO_RAD) as f32,
                        elevation,
                        distance,
                        time_stamp: 0,
                    },
                    azimuth_cdeg: az_c as u16,
                    block_azimuth_cdeg: block_az as u16,
                    offset_ns: block_off_ns + timing.ns[chan],
                    block: block as u8,
                    chan: chan as u8,
                });
            }
        }
    }
}

/// The MSOP header family a payload announces by its magic (`None` for a DIFOP or anything
/// else): auto-detection of RS-16/RS-32/Bpearl (V1) versus Helios/Helios-16P. The configured
/// model still decides how a packet is decoded; a mismatch is counted malformed.
pub fn detect_header(payload: &[u8]) -> Option<HeaderKind> {
    if payload.starts_with(&MSOP_MAGIC_V1) {
        Some(HeaderKind::V1)
    } else if payload.starts_with(&MSOP_MAGIC_HELIOS) {
        Some(HeaderKind::Helios)
    } else {
        None
    }
}

/// What a payload is, by its magic and length (see [`classify`]).
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// A valid MSOP packet of the configured model.
    Msop(MsopPacket<&'a [u8]>),
    /// A valid DIFOP packet.
    Difop(DifopPacket<&'a [u8]>),
}

/// Classifies a payload for a model with MSOP header `header`.
///
/// Rules: a 1248-byte payload with the configured MSOP magic is validated by
/// [`MsopPacket::new_checked`] (failure: malformed); one with the DIFOP magic is a DIFOP. A
/// payload that starts with either MSOP magic or the DIFOP magic but is not a valid packet of
/// the configured model (wrong length, the other header family, bad block flag or azimuth),
/// or whose length is within [`MALFORMED_LEN_TOLERANCE`] bytes of 1248, is
/// [`Rejection::Malformed`]; anything else (foreign traffic of other sizes) is
/// [`Rejection::Ignored`].
pub fn classify(payload: &[u8], header: HeaderKind) -> Result<Payload<'_>, Rejection> {
    if payload.starts_with(&DIFOP_MAGIC) {
        return DifopPacket::new_checked(payload)
            .map(Payload::Difop)
            .map_err(|_| Rejection::Malformed);
    }
    match MsopPacket::new_checked(payload, header) {
        Ok(p) => Ok(Payload::Msop(p)),
        Err(_) => {
            let robosense =
                payload.starts_with(&MSOP_MAGIC_HELIOS) || payload.starts_with(&MSOP_MAGIC_V1);
            if robosense || payload.len().abs_diff(PACKET_LEN) <= MALFORMED_LEN_TOLERANCE {
                Err(Rejection::Malformed)
            } else {
                Err(Rejection::Ignored)
            }
        }
    }
}

/// The RoboSense decoder's own counters: `lidarxdp_robosense_*{sensor,model}`.
pub const ROBOSENSE_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "robosense",
    labels: crate::vendor::SENSOR_COUNTERS.labels,
};

crate::counter_set! {
    /// RoboSense-specific counters (monotonic), beside the pipeline's [`crate::vendor::DecodeCounters`].
    pub struct RobosenseCounters in ROBOSENSE_COUNTERS;
    {
        /// They set the rpm, the return mode and (if valid) the angle table.
        difop_packets: Counter "packets" "RoboSense DIFOP (device information) packets applied.",
    }
}

/// A RoboSense sensor's decoder, return-mode state and [`ScanAssembler`]: the RoboSense
/// [`VendorDecoder`].
///
/// Return mode: from the DIFOP (offset 300); until a DIFOP arrives, dual return is inferred
/// for 32-channel models when blocks 0 and 1 share an azimuth, else single return
/// (strongest), as rs_driver's default.
#[derive(Clone, Debug)]
pub struct RobosenseStream {
    decoder: RobosenseDecoder,
    assembler: ScanAssembler,
    difop_mode: Option<ReturnMode>,
    return_mode: Option<ReturnMode>,
    /// The decoder's own counters (`difop_packets`).
    counters: RobosenseCounters,
    variant_checked: bool,
    /// MSOPs whose time field was invalid (stamped on the stream's time line, or host time).
    date_fallbacks: u64,
    /// The stream's time base is the host clock: no packet since it (re)started carried a
    /// valid header time.
    host_base: bool,
}

impl RobosenseStream {
    /// Builds the stream for `cfg`: model constants, the CSV angle table `calibration` (the
    /// contents of the file `cfg.calibration` names; overridden by the first DIFOP with a
    /// valid table), cut angle, ranges, FOV.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] for a non-RoboSense model; CSV errors of
    /// [`AngleTable::from_bytes`].
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let spec = spec(cfg.model).ok_or_else(|| ConfigError::Unsupported {
            model: cfg.model,
            supported: "RS16, RS32, Bpearl, Helios, Helios16P".into(),
        })?;
        let angles = AngleTable::from_bytes(calibration, spec.lasers, &cfg.calibration)?;
        let settings = DecoderSettings {
            min_range_m: cfg.min_range_m,
            max_range_m: cfg.max_range_m,
            fov_cdeg: crate::scan::Fov::from_deg(opts.fov_deg),
        };
        let mut assembler =
            ScanAssembler::new(cfg.sensor_id, cfg.cut_angle_deg, cfg.frame_timeout_ns);
        assembler.set_fov(crate::scan::Fov::from_deg(opts.fov_deg));
        Ok(Self {
            decoder: RobosenseDecoder::new(spec, angles, settings),
            assembler,
            difop_mode: None,
            return_mode: None,
            counters: RobosenseCounters::default(),
            variant_checked: false,
            date_fallbacks: 0,
            host_base: false,
        })
    }

    /// The point decoder (angle table in use, nominal advance).
    pub fn decoder(&self) -> &RobosenseDecoder {
        &self.decoder
    }

    /// DIFOP packets consumed so far.
    pub fn difop_packets(&self) -> u64 {
        self.counters.difop_packets
    }

    /// Applies a DIFOP: rpm, return mode and (if valid) the angle table.
    pub fn apply_difop(&mut self, d: &DifopPacket<&[u8]>) {
        self.counters.difop_packets += 1;
        let spec = self.decoder.spec();
        self.decoder.set_rpm(d.rpm());
        if let Some(m) = spec.return_mode_of(d.return_mode_byte()) {
            self.difop_mode = Some(m);
        }
        if let Some(t) = d.angles(spec) {
            self.decoder.set_angles(t);
        }
        if spec.model == SensorModel::Bpearl {
            self.decoder.set_mirrored(d.bpearl_reversal());
        }
    }

    fn mode_for(&self, p: &MsopPacket<&[u8]>) -> ReturnMode {
        if let Some(m) = self.difop_mode {
            return m;
        }
        if !self.decoder.spec().rs16_layout && p.azimuth(0) == p.azimuth(1) {
            ReturnMode::Dual
        } else {
            ReturnMode::Strongest
        }
    }
}

impl VendorDecoder for RobosenseStream {
    /// MSOP: decoded into the frame in progress. DIFOP: applied, counted `ignored`. Anything
    /// else per [`classify`].
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        let p = match classify(payload, self.decoder.spec().header) {
            Ok(Payload::Msop(p)) => p,
            Ok(Payload::Difop(d)) => {
                self.apply_difop(&d);
                return Err(Rejection::Ignored);
            }
            Err(Rejection::Malformed) => {
                self.assembler.note_malformed();
                return Err(Rejection::Malformed);
            }
            Err(r) => return Err(r),
        };
        let mode = self.mode_for(&p);
        self.return_mode = Some(mode);
        let spec = self.decoder.spec();
        if !self.variant_checked {
            // rs_driver decides the Bpearl firmware variant on the first MSOP.
            self.variant_checked = true;
            if spec.model == SensorModel::Bpearl && p.lidar_type_model() == BPEARL_V4_TYPE_MODEL {
                self.decoder.set_spec(&BPEARL_V4);
            }
        }
        let spec = self.decoder.spec();
        let stamped = p.sensor_time_ns_as(spec.unix_time);
        // A header time that is no time: stamped on the stream's time line (last accepted
        // sensor time + host monotonic time elapsed, no jump, the frame stays on the sensor
        // clock), or on host wall time while the stream has no valid time yet (the frame then
        // says so; the host clock is then the stream's clock, and a step of it a restart).
        let on_host = stamped.is_none()
            && (self.host_base
                || self
                    .assembler
                    .stream_clock()
                    .extrapolate(host.mono_ns)
                    .is_none());
        let sensor_ns = match stamped {
            Some(t) => t,
            None if on_host => host.wall_ns,
            None => self
                .assembler
                .stream_clock()
                .extrapolate(host.mono_ns)
                .unwrap_or(host.wall_ns),
        };
        let dual = mode.returns() > 1;
        let span = |a: u16, b: u16| (i32::from(b) - i32::from(a)).rem_euclid(AZIMUTH_UNITS) as u32;
        let advance = if dual && !spec.rs16_layout {
            span(p.azimuth(0), p.azimuth(10)) * 6 / 5
        } else {
            span(p.azimuth(0), p.azimuth(11)) * 12 / 11
        };
        self.assembler.begin_packet(
            PacketInfo {
                host,
                sensor_ns,
                first_azimuth_cdeg: p.azimuth(0),
                last_azimuth_cdeg: p.azimuth(BLOCKS - 1),
                advance_cdeg: advance,
                interval_ns: if spec.rs16_layout && !dual {
                    (12.0
                        * self.decoder.sequences_per_block(&p)
                        * f64::from(spec.block_us)
                        * 1000.0)
                        .round() as u64
                } else {
                    spec.packet_interval_ns(mode)
                },
            },
            out,
        )?;
        if stamped.is_none() {
            self.date_fallbacks += 1;
        }
        self.host_base = on_host;
        if on_host {
            self.assembler.mark_host_clock();
        }
        let asm = &mut self.assembler;
        self.decoder.decode(&p, mode, |d| {
            asm.add_point(d.point, d.block_azimuth_cdeg, d.offset_ns)
        });
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

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.assembler.stream_clock().restarts(),
            date_fallbacks: self.date_fallbacks,
        }
    }

    fn in_progress(&self) -> bool {
        self.assembler.in_progress()
    }

    /// Takes the fresh stream's angle table (the CSV; a DIFOP with a valid table still
    /// overrides it when the next one arrives).
    fn recalibrate(&mut self, fresh: Box<dyn VendorDecoder>) {
        if let Ok(f) = fresh.into_any().downcast::<RobosenseStream>() {
            self.decoder.set_angles(f.decoder.angles.clone());
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }

    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        <RobosenseCounters as crate::counters::CounterSet>::DESCS
    }

    fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        crate::counters::CounterSet::visit(&self.counters, f);
    }
}

/// Builds the decoder for a RoboSense model (see [`RobosenseStream::new`]).
///
/// # Errors
/// As [`RobosenseStream::new`].
pub fn build(
    cfg: &SensorConfig,
    calibration: &[u8],
    opts: PipelineOptions,
) -> Result<Box<dyn VendorDecoder>, ConfigError> {
    Ok(Box::new(RobosenseStream::new(cfg, calibration, opts)?))
}
#[cfg(test)]
mod tests;
