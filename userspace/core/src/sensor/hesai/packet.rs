//! Zero-copy view of a Hesai data packet ([`Packet`]), its validation and classification.

use super::layout::{HeaderKind, Layout};
use crate::scan::PacketRejection;
use crate::time::days_from_civil;
use crate::vendor::SensorModel;

/// Return-mode byte values (tail), per the Hesai manuals.
pub mod return_mode {
    /// Single, first return.
    pub const FIRST: u8 = 0x33;
    /// Single, second return.
    pub const SECOND: u8 = 0x34;
    /// Single, strongest return.
    pub const STRONGEST: u8 = 0x37;
    /// Single, last return.
    pub const LAST: u8 = 0x38;
    /// Dual, last + strongest.
    pub const LAST_STRONGEST: u8 = 0x39;
    /// Dual, first + second.
    pub const FIRST_SECOND: u8 = 0x3a;
    /// Dual, first + last.
    pub const FIRST_LAST: u8 = 0x3b;
    /// Dual, first + strongest.
    pub const FIRST_STRONGEST: u8 = 0x3c;
    /// Triple, first + last + strongest.
    pub const TRIPLE: u8 = 0x3d;
    /// Dual, strongest + second strongest.
    pub const STRONGEST_SECOND: u8 = 0x3e;

    /// Returns per firing for a return-mode byte (1, 2, 3), `None` for an unknown byte.
    pub const fn returns(byte: u8) -> Option<usize> {
        match byte {
            FIRST | SECOND | STRONGEST | LAST => Some(1),
            LAST_STRONGEST | FIRST_SECOND | FIRST_LAST | FIRST_STRONGEST | STRONGEST_SECOND => {
                Some(2)
            }
            TRIPLE => Some(3),
            _ => None,
        }
    }
}

/// Why a payload is not a valid data packet of the configured model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not one of the model's known lengths.
    #[error("payload is {len} bytes; this model's data packets are {expected} (+ known variants)")]
    Length {
        /// Payload length, bytes.
        len: usize,
        /// Documented length, bytes.
        expected: usize,
    },
    /// Header does not start with `EE FF` (or a Pandar40P block with `FF EE`).
    #[error("start-of-packet / block flag missing at byte {offset}")]
    Flag {
        /// Offset of the missing flag.
        offset: usize,
    },
    /// Header laser / block counts disagree with the configured model.
    #[error(
        "header says {lasers} lasers × {blocks} blocks, configured model has {want_lasers} × {want_blocks}"
    )]
    Header {
        /// Laser count in the header.
        lasers: u8,
        /// Block count in the header.
        blocks: u8,
        /// The configured model's laser count.
        want_lasers: usize,
        /// The configured model's block count.
        want_blocks: usize,
    },
    /// `dis_unit` is zero.
    #[error("distance unit is 0 mm")]
    DisUnit,
    /// Unknown return-mode byte, or a return count that does not divide the block count.
    #[error("return mode byte {0:#04x} is unknown or does not fit the block count")]
    ReturnMode(u8),
    /// Block azimuth ≥ 36000 (0.01°).
    #[error("block {block} azimuth {azimuth} is outside [0, 35999] (0.01 deg)")]
    Azimuth {
        /// Block index.
        block: usize,
        /// Raw value.
        azimuth: u16,
    },
    /// Body CRC mismatch.
    #[error("body CRC {stored:#010x} != computed {computed:#010x}")]
    BodyCrc {
        /// CRC in the packet.
        stored: u32,
        /// CRC computed over the blocks.
        computed: u32,
    },
    /// Tail CRC mismatch.
    #[error("tail CRC {stored:#010x} != computed {computed:#010x}")]
    TailCrc {
        /// CRC in the packet.
        stored: u32,
        /// CRC computed over the tail.
        computed: u32,
    },
    /// The tail date is not a calendar date. Not produced by [`Packet::new_checked`] since
    /// invalid dates fall back to host time (the decoder counts them); kept for callers that
    /// want to reject them ([`Packet::date_seconds`] is `None`).
    #[error("tail date is invalid")]
    Date,
}

/// Payload lengths within this many bytes of the documented length are damaged data packets.
pub const MALFORMED_LEN_TOLERANCE: usize = 16;

/// CRC-32/MPEG-2 (poly 0x04C11DB7, init 0xFFFFFFFF, no reflection, no final xor), the CRC of
/// Hesai body and tail checksums: PCLMULQDQ folding where the CPU has it, else slicing by 8
/// (see [`super::crc`]).
pub use super::crc::crc32_mpeg2;

/// A zero-copy view of a data packet of one [`Layout`] (smoltcp `wire` style).
///
/// [`Packet::new_checked`] validates once; afterwards no accessor can panic (every read is
/// bounds-checked and yields 0 past the end).
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    layout: &'static Layout,
    /// Offset of the UDP sequence, if this variant has one.
    seq_offset: Option<usize>,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checking (accessors on short buffers return 0).
    pub fn new_unchecked(buffer: T, layout: &'static Layout) -> Self {
        Self {
            buffer,
            layout,
            seq_offset: layout.t_udp_seq.map(|o| layout.tail_offset() + o),
        }
    }

    /// Wraps and validates: length (documented or a known variant), flags, header counts,
    /// `dis_unit`, return mode, block azimuths, date, and — when `check_crc` — the body and
    /// tail CRCs of models that carry them.
    ///
    /// # Errors
    /// The first [`PacketError`] found.
    pub fn new_checked(
        buffer: T,
        layout: &'static Layout,
        check_crc: bool,
    ) -> Result<Self, PacketError> {
        let len = buffer.as_ref().len();
        let base = layout.base_len();
        let Some(&(_, seq)) = layout.variants.iter().find(|(x, _)| base + x == len) else {
            return Err(PacketError::Length {
                len,
                expected: base,
            });
        };
        let mut p = Self::new_unchecked(buffer, layout);
        if seq {
            p.seq_offset = Some(base);
        }
        p.check(check_crc)?;
        Ok(p)
    }

    fn check(&self, check_crc: bool) -> Result<(), PacketError> {
        let l = self.layout;
        match l.header {
            HeaderKind::None => {
                for b in 0..l.blocks {
                    let o = b * l.block_len();
                    if self.u16_at(o) != 0xEEFF {
                        return Err(PacketError::Flag { offset: o });
                    }
                }
            }
            HeaderKind::Short8 | HeaderKind::Long12 => {
                if self.u16_at(0) != 0xFFEE {
                    return Err(PacketError::Flag { offset: 0 });
                }
                let (lasers, blocks) = self.header_counts();
                if usize::from(lasers) != l.channels || usize::from(blocks) != l.blocks {
                    return Err(PacketError::Header {
                        lasers,
                        blocks,
                        want_lasers: l.channels,
                        want_blocks: l.blocks,
                    });
                }
            }
        }
        if self.dis_unit_mm() == 0 {
            return Err(PacketError::DisUnit);
        }
        let rm = self.return_mode_byte();
        match return_mode::returns(rm) {
            Some(n) if l.blocks.is_multiple_of(n) => {}
            _ => return Err(PacketError::ReturnMode(rm)),
        }
        for block in 0..l.blocks {
            let azimuth = self.azimuth(block);
            if azimuth >= 36_000 {
                return Err(PacketError::Azimuth { block, azimuth });
            }
        }
        if check_crc && l.crc_verified {
            let b = self.buffer.as_ref();
            if l.body_crc {
                let end = l.body_end();
                let computed = crc32_mpeg2(b.get(l.header_len()..end).unwrap_or_default());
                let stored = self.u32_at(end);
                if computed != stored {
                    return Err(PacketError::BodyCrc { stored, computed });
                }
            }
            if let Some(c) = l.t_crc {
                let t = l.tail_offset();
                let computed = crc32_mpeg2(b.get(t..t + c).unwrap_or_default());
                let stored = self.u32_at(t + c);
                if computed != stored {
                    return Err(PacketError::TailCrc { stored, computed });
                }
            }
        }
        Ok(())
    }

    /// The layout.
    pub fn layout(&self) -> &'static Layout {
        self.layout
    }

    /// The whole payload.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn byte(&self, o: usize) -> u8 {
        self.buffer.as_ref().get(o).copied().unwrap_or(0)
    }

    fn u16_at(&self, o: usize) -> u16 {
        u16::from_le_bytes([self.byte(o), self.byte(o + 1)])
    }

    fn u32_at(&self, o: usize) -> u32 {
        u32::from_le_bytes([
            self.byte(o),
            self.byte(o + 1),
            self.byte(o + 2),
            self.byte(o + 3),
        ])
    }

    /// `(laser count, block count)` from the header (0, 0 for Pandar40P).
    pub fn header_counts(&self) -> (u8, u8) {
        match self.layout.header {
            HeaderKind::None => (0, 0),
            HeaderKind::Short8 => (self.byte(2), self.byte(3)),
            HeaderKind::Long12 => (self.byte(6), self.byte(7)),
        }
    }

    /// Distance unit, mm (header byte 5 / 9; fixed 4 for Pandar40P).
    pub fn dis_unit_mm(&self) -> u8 {
        match self.layout.header {
            HeaderKind::None => 4,
            HeaderKind::Short8 => self.byte(5),
            HeaderKind::Long12 => self.byte(9),
        }
    }

    /// Azimuth of `block`, 0.01° (the coarse part for AT128).
    pub fn azimuth(&self, block: usize) -> u16 {
        self.u16_at(self.layout.azimuth_offset(block))
    }

    /// Azimuth of `block` in the layout's unit ([`Layout::azimuth_units_per_deg`]): 0.01°, or
    /// for AT128 `coarse·256 + fine` in 0.01°/256.
    pub fn azimuth_fine(&self, block: usize) -> u32 {
        let coarse = u32::from(self.azimuth(block));
        if self.layout.fine_azimuth {
            (coarse << 8) + u32::from(self.byte(self.layout.azimuth_offset(block) + 2))
        } else {
            coarse
        }
    }

    /// Raw distance of `channel` in `block`, `dis_unit` mm units (0 = no return).
    pub fn distance_raw(&self, block: usize, channel: usize) -> u16 {
        self.u16_at(self.layout.unit_offset(block, channel))
    }

    /// Reflectivity of `channel` in `block` (0–255).
    pub fn reflectivity(&self, block: usize, channel: usize) -> u8 {
        self.byte(self.layout.unit_offset(block, channel) + 2)
    }

    fn tail(&self, o: usize) -> usize {
        self.layout.tail_offset() + o
    }

    /// Return-mode byte (see [`return_mode`]).
    pub fn return_mode_byte(&self) -> u8 {
        self.byte(self.tail(self.layout.t_return_mode))
    }

    /// Returns per firing (1–3; 1 for an unchecked unknown byte).
    pub fn returns(&self) -> usize {
        return_mode::returns(self.return_mode_byte()).unwrap_or(1)
    }

    /// Timestamp: µs within the second of the date.
    pub fn timestamp_us(&self) -> u32 {
        self.u32_at(self.tail(self.layout.t_timestamp))
    }

    /// Whole seconds since the Unix epoch from the 6-byte tail date (UTC), `None` if it is not
    /// a valid date. Rules, for every model (HesaiLidar_SDK_2.0's `GetMicroLidarTimeU64`):
    /// * models whose date field is Unix time ([`Layout::epoch_date`], AT128), and **any model
    ///   whose first date byte is 0**: bytes 1..6 are the seconds since the Unix epoch, a
    ///   40-bit big-endian integer (Nebula `SecondsSinceEpoch`; the SDK reads bytes 2..6,
    ///   which is the same value below 2^32 s);
    /// * otherwise the bytes are year, month (1–12), day (1–31), hour (0–23), minute
    ///   (0–59), second (0–60). The year byte is read in **either convention**: a byte of
    ///   100 or more counts from 1900 (Pandar40P/64/QT64: 124 = 2024), a byte below 100 from
    ///   2000 (XT32/QT128/OT128: 24 = 2024), so a firmware that uses the other convention
    ///   than its model's manual still decodes to 2000–2155. ([`Layout::year_base`] documents
    ///   the manual's convention; both agree on every year from 2000 to 2099.)
    pub fn date_seconds(&self) -> Option<u64> {
        let o = self.tail(self.layout.t_date);
        if self.layout.epoch_date || self.byte(o) == 0 {
            return Some((1..6).fold(0u64, |s, k| (s << 8) | u64::from(self.byte(o + k))));
        }
        let yb = i64::from(self.byte(o));
        let y = if yb >= 100 { 1900 + yb } else { 2000 + yb };
        let (mo, d, h, mi, s) = (
            self.byte(o + 1),
            self.byte(o + 2),
            self.byte(o + 3),
            self.byte(o + 4),
            self.byte(o + 5),
        );
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
            return None;
        }
        let days = days_from_civil(y, i64::from(mo), i64::from(d));
        let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
        u64::try_from(secs).ok()
    }

    /// Sensor time of the packet, ns since the Unix epoch: date seconds + timestamp µs
    /// (0 for an invalid date).
    pub fn sensor_ns(&self) -> u64 {
        self.sensor_time_ns().unwrap_or(0)
    }

    /// Sensor time of the packet, ns since the Unix epoch (date seconds + timestamp µs), or
    /// `None` when the date is invalid.
    pub fn sensor_time_ns(&self) -> Option<u64> {
        let us = self.timestamp_us();
        self.date_seconds()?
            .checked_mul(1_000_000_000)?
            .checked_add(u64::from(us) * 1000)
    }

    /// UDP sequence number, if the model / variant carries one.
    pub fn udp_sequence(&self) -> Option<u32> {
        self.seq_offset.map(|o| self.u32_at(o))
    }

    /// QT128 mode flag byte (0 for other models).
    pub fn mode_flag(&self) -> u8 {
        self.layout
            .t_mode_flag
            .map_or(0, |o| self.byte(self.tail(o)))
    }

    /// OT128 azimuth state of `block` (2 bits from the azimuth-state word: block 0 in bits
    /// 15..14, block 1 in bits 13..12).
    pub fn azimuth_state(&self, block: usize) -> u8 {
        self.layout.t_azimuth_state.map_or(0, |o| {
            let w = self.u16_at(self.tail(o));
            ((w >> (14usize.saturating_sub(2 * block) & 15)) & 3) as u8
        })
    }

    /// OT128 operational state (0 high resolution, 1 standard).
    pub fn operational_state(&self) -> u8 {
        self.layout
            .t_azimuth_state
            .map_or(0, |o| self.byte(self.tail(o + 2)))
    }
}

/// Classifies a payload for `layout`: a valid packet, or how to count it.
///
/// Rule: a known length that fails validation is malformed; a length within
/// [`MALFORMED_LEN_TOLERANCE`] bytes of the documented one (truncated / padded / unknown
/// firmware variant) is malformed; a longer payload that starts like this model's packets
/// (`EE FF` header with the model's laser and block counts, or `FF EE` for Pandar40P) is
/// malformed; anything else (foreign traffic, other models) is ignored.
pub fn classify<'a>(
    payload: &'a [u8],
    layout: &'static Layout,
    check_crc: bool,
) -> Result<Packet<&'a [u8]>, PacketRejection<PacketError>> {
    match Packet::new_checked(payload, layout, check_crc) {
        Ok(p) => Ok(p),
        Err(e @ PacketError::Length { len, expected }) => {
            let p = Packet::new_unchecked(payload, layout);
            let looks_like = match layout.header {
                HeaderKind::None => payload.starts_with(&[0xFF, 0xEE]),
                _ => {
                    payload.starts_with(&[0xEE, 0xFF])
                        && len >= layout.header_len()
                        && p.header_counts() == (layout.channels as u8, layout.blocks as u8)
                }
            };
            if len.abs_diff(expected) <= MALFORMED_LEN_TOLERANCE || looks_like {
                Err(PacketRejection::Malformed(e))
            } else {
                Err(PacketRejection::Ignored)
            }
        }
        Err(e) => Err(PacketRejection::Malformed(e)),
    }
}

/// Identifies the Hesai model of a payload from its length and header (protocol version,
/// laser and block counts), `None` if it matches none. Pandar40P is recognised by its length
/// and `FF EE` block flag.
pub fn detect_model(payload: &[u8]) -> Option<SensorModel> {
    super::layout::ALL.iter().find_map(|l| {
        let base = l.base_len();
        if !l.variants.iter().any(|(x, _)| base + x == payload.len()) {
            return None;
        }
        let p = Packet::new_unchecked(payload, l);
        let ok = match l.header {
            HeaderKind::None => payload.starts_with(&[0xFF, 0xEE]),
            HeaderKind::Short8 => {
                payload.starts_with(&[0xEE, 0xFF])
                    && p.header_counts() == (l.channels as u8, l.blocks as u8)
            }
            HeaderKind::Long12 => {
                payload.starts_with(&[0xEE, 0xFF])
                    && (p.byte(2), p.byte(3)) == l.protocol
                    && p.header_counts() == (l.channels as u8, l.blocks as u8)
            }
        };
        ok.then_some(l.model)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc() {
        // CRC-32/MPEG-2 check value.
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_E6E7);
        assert_eq!(crc32_mpeg2(b"12345678"), 0x49E3_C2FB);
        assert_eq!(crc32_mpeg2(b""), 0xFFFF_FFFF);
    }
}
