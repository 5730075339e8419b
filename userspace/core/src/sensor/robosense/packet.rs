//! Zero-copy views of RoboSense packets: MSOP data packets ([`MsopPacket`], 1248 bytes,
//! big-endian, the V1 calendar or Helios Unix timestamp as ns since the epoch), DIFOP device
//! packets ([`DifopPacket`]: rpm, FOV, return mode, angle table), and the classification of a
//! payload ([`detect_header`], [`classify`]). Layouts in the module docs of [`super`].

#![forbid(unsafe_code)]

use crate::vendor::Rejection;

use crate::time::days_from_civil;
use crate::vendor::SensorModel;

use super::{
    AngleTable, BLOCK_FLAG, BLOCK_LEN, BLOCKS, DIFOP_MAGIC, HEADER_LEN, HeaderKind,
    MALFORMED_LEN_TOLERANCE, MSOP_MAGIC_HELIOS, MSOP_MAGIC_V1, ModelSpec, PACKET_COUNTER_OFFSET,
    PACKET_LEN, TIMESTAMP_OFFSET, TURN_CDEG,
};

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
            if i32::from(azimuth) >= TURN_CDEG {
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

    /// The MSOP packet counter of a Helios header: u32 big-endian at offset 12
    /// ([`PACKET_COUNTER_OFFSET`]; Nebula `robosense_packet::Header::bottom_packet_count`,
    /// one more per packet on the Helios-16P capture in `shared/data`), `None` for a V1 header
    /// (RS-16, RS-32, Bpearl: no counter).
    pub fn packet_counter(&self) -> Option<u32> {
        (self.header == HeaderKind::Helios).then(|| {
            let b = self.bytes();
            u32::from_be_bytes(std::array::from_fn(|i| {
                b.get(PACKET_COUNTER_OFFSET + i).copied().unwrap_or(0)
            }))
        })
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
