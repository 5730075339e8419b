//! RoboSense mechanical LiDARs: RS-LiDAR-16, RS-LiDAR-32, RS-Bpearl, RS-Helios and
//! RS-Helios-16P. Zero-copy MSOP/DIFOP packet views, a sans-IO point decoder and the RoboSense
//! [`VendorDecoder`](crate::vendor::VendorDecoder).
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
//! | 12 | 4 | Helios: MSOP packet counter, u32, one more per packet ([`PACKET_COUNTER_OFFSET`]: the frame accounting counts its gaps as the packets lost, [`crate::scan::PacketSequence`]); V1: reserved |
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
//! sensor*: [`RobosenseStream::push`](crate::vendor::VendorDecoder::push) (and so [`super::ScanPipeline::push`]) accepts both kinds
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
//!
//! [`ScanAssembler`]: crate::scan::ScanAssembler

mod angles;
mod decoder;
mod model;
mod packet;
mod stream;

pub use angles::AngleTable;
pub use decoder::{DecodedPoint, DecoderSettings, RobosenseDecoder};
pub use model::{BPEARL_V4, BPEARL_V4_TYPE_MODEL, ModelSpec, spec};
pub use packet::{DifopPacket, MsopPacket, PacketError, Payload, classify, detect_header};
pub use stream::{ROBOSENSE_COUNTERS, RobosenseCounters, RobosenseStream};

/// A RoboSense sensor's calibration tables ([`crate::vendor::VendorDecoder::Tables`]): the
/// point decoder built from the model, the angle table (CSV, or the last DIFOP's) and the
/// range and field-of-view settings.
pub type RobosenseTables = RobosenseDecoder;

use std::f64::consts::PI;

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
/// Offset of a Helios MSOP header's packet counter (u32 big-endian; Nebula's Helios header
/// `bottom_packet_count`, after the top board's counter at 8, which on the Helios-16P capture
/// does not count packets).
pub const PACKET_COUNTER_OFFSET: usize = 12;
/// Default MSOP (data) UDP port.
pub const MSOP_PORT: u16 = 6699;
/// Default DIFOP UDP port.
pub const DIFOP_PORT: u16 = 7788;
/// Payload sizes within this many bytes of 1248 are treated as damaged RoboSense packets.
pub const MALFORMED_LEN_TOLERANCE: usize = 64;
/// [`crate::scan::AZIMUTH_UNITS`] (0.01° per turn), signed: RoboSense's azimuth arithmetic
/// works on `i32` (mirrored and offset azimuths fall below 0 before they are wrapped).
const TURN_CDEG: i32 = crate::scan::AZIMUTH_UNITS as i32;
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
#[cfg(test)]
mod tests;
