//! Hesai data-packet layouts (UDP payload, little-endian) of every supported model.
//!
//! Sources: the models' user manuals, section "Point cloud data packet" (Pandar40P, Pandar64,
//! PandarQT64, PandarQT128C2X, PandarXT16/XT32/XT32M2X, Pandar128E4X/OT128 and AT128E2X), as
//! also laid out in Tier IV Nebula's `hesai_packet.hpp` and the model headers. Every packet is
//!
//! ```text
//! [header] [block 0 .. block B-1] [body CRC32] [functional safety] [tail] [variant extra]
//! ```
//!
//! | model | header | blocks × channels | unit | body CRC | FS | tail | length(s) |
//! |---|---|---|---|---|---|---|---|
//! | Pandar40P | none, each block starts `FF EE` | 10 × 40 | 3 B | – | – | 22 | 1262 (+4: UDP sequence) |
//! | Pandar64 | 8 B `EE FF` | 6 × 64 | 3 B | – | – | 22 | 1194 (+4: UDP sequence) |
//! | PandarQT64 | 12 B, protocol 3.1 | 4 × 64 | 4 B | – | – | 24 + 4 seq | 1072 |
//! | PandarQT128 | 12 B, protocol 3.2 | 2 × 128 | 4 B | yes | 17 B | 34 (seq, CRC) | 1095 (+32 signature) |
//! | PandarXT16 | 12 B, protocol 6.1 | 8 × 16 | 4 B | – | – | 24 + 4 seq | 568 |
//! | PandarXT32 | 12 B, protocol 6.1 | 8 × 32 | 4 B | – | – | 24 + 4 seq | 1080 |
//! | PandarXT32M | 12 B, protocol 6.1 | 6 × 32 | 4 B | – | – | 24 + 4 seq | 820 |
//! | Pandar128E4X/OT128 | 12 B, protocol 1.4 | 2 × 128 | 3 B | yes | 17 B | 56 (seq, IMU, CRC) | 861 (+32 signature) |
//! | AT128E2X | 12 B, protocol 4.3 | 2 × 128, fine azimuth | 4 B | yes | – | 40 (seq, CRC) | 1086 (+32 signature) |
//!
//! A block is `azimuth u16 (0.01°)` followed by the units (`distance u16` in `dis_unit` mm,
//! `reflectivity u8`, and for 4-byte units a confidence/reserved byte); Pandar40P blocks start
//! with the flag `FF EE` before the azimuth. The 12-byte header holds `EE FF`, protocol
//! major/minor @2/3, laser count @6, block count @7, `dis_unit` (mm) @9, return count @10 and
//! flags @11; the 8-byte Pandar64 header holds `EE FF`, laser count @2, block count @3,
//! `dis_unit` @5. Pandar40P has a fixed 4 mm unit.
//!
//! Tail fields (offsets from the tail start): return mode byte, timestamp (u32, µs within the
//! second), date (6 bytes: year, month, day, hour, minute, second; year counted from 2000 for
//! Pandar40P, from 1900 otherwise), UDP sequence (u32), tail CRC (CRC-32/MPEG-2 over the tail
//! bytes before it, stored little-endian). The body CRC is CRC-32/MPEG-2 over the blocks.
//! (Checked against the PandarQT128 capture in `shared/data/hesai/pandarqt128`.)

use crate::vendor::SensorModel;

/// Which header precedes the blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    /// No header (Pandar40P): every block starts with `FF EE`.
    None,
    /// 8-byte header `EE FF`, laser count @2, block count @3, `dis_unit` @5 (Pandar64).
    Short8,
    /// 12-byte header `EE FF`, protocol @2/3, laser count @6, block count @7, `dis_unit` @9.
    Long12,
}

/// The byte layout of one model's data packet. All offsets in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Layout {
    /// The model.
    pub model: SensorModel,
    /// Header kind.
    pub header: HeaderKind,
    /// Protocol version `(major, minor)` in the 12-byte header; used for auto-detection only.
    pub protocol: (u8, u8),
    /// Blocks per packet.
    pub blocks: usize,
    /// Channels (lasers) per block.
    pub channels: usize,
    /// Bytes per unit (3: distance + reflectivity; 4: + confidence).
    pub unit_len: usize,
    /// The block body is followed by a CRC-32/MPEG-2 of the blocks.
    pub body_crc: bool,
    /// Functional-safety bytes between body (CRC) and tail.
    pub fs_len: usize,
    /// Documented tail length, including the UDP sequence / tail CRC where documented.
    pub tail_len: usize,
    /// Tail offset of the return-mode byte.
    pub t_return_mode: usize,
    /// Tail offset of the u32 timestamp (µs within the second).
    pub t_timestamp: usize,
    /// Tail offset of the 6-byte date.
    pub t_date: usize,
    /// Year the date's year byte counts from (2000 or 1900).
    pub year_base: u16,
    /// Tail offset of the u32 UDP sequence, when documented.
    pub t_udp_seq: Option<usize>,
    /// Tail offset of the u32 tail CRC (covering the tail bytes before it), when present.
    pub t_crc: Option<usize>,
    /// Tail offset of the QT128 mode flag (bit 0: firing loop).
    pub t_mode_flag: Option<usize>,
    /// Tail offset of the OT128 azimuth-state word (u16) and operational-state byte (+2).
    pub t_azimuth_state: Option<usize>,
    /// Accepted extra bytes after the documented packet: `(extra, has_udp_sequence)`. The UDP
    /// sequence of a `true` variant is the u32 right after the tail.
    pub variants: &'static [(usize, bool)],
    /// Blocks carry a fine-azimuth byte after the azimuth (AT128: azimuth = `coarse·256 +
    /// fine`, in 0.01°/256).
    pub fine_azimuth: bool,
    /// The date is 6 bytes `0, seconds since the epoch (5 bytes, big-endian)` (AT128), not
    /// year..second.
    pub epoch_date: bool,
    /// The CRC convention was verified on a capture; CRCs are checked only when true.
    pub crc_verified: bool,
}

impl Layout {
    /// Header length, bytes.
    pub const fn header_len(&self) -> usize {
        match self.header {
            HeaderKind::None => 0,
            HeaderKind::Short8 => 8,
            HeaderKind::Long12 => 12,
        }
    }
    /// Bytes before the first unit in a block (azimuth, plus `FF EE` for Pandar40P, plus the
    /// fine azimuth byte for AT128).
    pub const fn block_prefix(&self) -> usize {
        match (self.header, self.fine_azimuth) {
            (HeaderKind::None, _) => 4,
            (_, true) => 3,
            _ => 2,
        }
    }
    /// Block length, bytes.
    pub const fn block_len(&self) -> usize {
        self.block_prefix() + self.channels * self.unit_len
    }
    /// Offset of the body CRC (right after the blocks).
    pub const fn body_end(&self) -> usize {
        self.header_len() + self.blocks * self.block_len()
    }
    /// Offset of the tail.
    pub const fn tail_offset(&self) -> usize {
        self.body_end() + if self.body_crc { 4 } else { 0 } + self.fs_len
    }
    /// Documented packet length, bytes.
    pub const fn base_len(&self) -> usize {
        self.tail_offset() + self.tail_len
    }
    /// Offset of the (coarse) azimuth of `block`.
    pub const fn azimuth_offset(&self, block: usize) -> usize {
        let back = if self.fine_azimuth { 3 } else { 2 };
        self.header_len() + block * self.block_len() + self.block_prefix() - back
    }
    /// Azimuth units per degree: 100, or 25600 with a fine azimuth byte.
    pub const fn azimuth_units_per_deg(&self) -> u32 {
        if self.fine_azimuth { 25_600 } else { 100 }
    }
    /// Offset of the unit of `channel` in `block`.
    pub const fn unit_offset(&self, block: usize, channel: usize) -> usize {
        self.header_len() + block * self.block_len() + self.block_prefix() + channel * self.unit_len
    }
}

const NO_VARIANTS: &[(usize, bool)] = &[(0, false)];
const SEQ_VARIANT: &[(usize, bool)] = &[(0, false), (4, true)];
const SIGNATURE_VARIANT: &[(usize, bool)] = &[(0, false), (32, false)];

const fn xt(model: SensorModel, blocks: usize, channels: usize) -> Layout {
    Layout {
        model,
        header: HeaderKind::Long12,
        protocol: (6, 1),
        blocks,
        channels,
        unit_len: 4,
        body_crc: false,
        fs_len: 0,
        tail_len: 28,
        t_return_mode: 10,
        t_timestamp: 19,
        t_date: 13,
        year_base: 1900,
        t_udp_seq: Some(24),
        t_crc: None,
        t_mode_flag: None,
        t_azimuth_state: None,
        variants: NO_VARIANTS,
        fine_azimuth: false,
        epoch_date: false,
        crc_verified: true,
    }
}

/// Pandar40P (tail: return mode @14, timestamp @10, date @16 from 2000).
pub const PANDAR40P: Layout = Layout {
    model: SensorModel::Pandar40p,
    header: HeaderKind::None,
    protocol: (0, 0),
    blocks: 10,
    channels: 40,
    unit_len: 3,
    body_crc: false,
    fs_len: 0,
    tail_len: 22,
    t_return_mode: 14,
    t_timestamp: 10,
    t_date: 16,
    year_base: 2000,
    t_udp_seq: None,
    t_crc: None,
    t_mode_flag: None,
    t_azimuth_state: None,
    variants: SEQ_VARIANT,
    fine_azimuth: false,
    epoch_date: false,
    crc_verified: true,
};

/// Pandar64 (same tail offsets as Pandar40P, but the year counts from 1900: the capture's
/// year byte is 120 for 2020. Nebula counts it from 2000 and stamps 2120.)
pub const PANDAR64: Layout = Layout {
    model: SensorModel::Pandar64,
    header: HeaderKind::Short8,
    blocks: 6,
    channels: 64,
    year_base: 1900,
    ..PANDAR40P
};

/// PandarQT64 (tail: timestamp @12, return mode @16, date @18 from 1900, sequence @24).
pub const PANDARQT64: Layout = Layout {
    model: SensorModel::PandarQt64,
    header: HeaderKind::Long12,
    protocol: (3, 1),
    blocks: 4,
    channels: 64,
    unit_len: 4,
    body_crc: false,
    fs_len: 0,
    tail_len: 28,
    t_return_mode: 16,
    t_timestamp: 12,
    t_date: 18,
    year_base: 1900,
    t_udp_seq: Some(24),
    t_crc: None,
    t_mode_flag: None,
    t_azimuth_state: None,
    variants: NO_VARIANTS,
    fine_azimuth: false,
    epoch_date: false,
    crc_verified: true,
};

/// PandarQT128C2X (tail: mode flag @5, return mode @12, date @15, timestamp @21, sequence @26,
/// CRC @30).
pub const PANDARQT128: Layout = Layout {
    model: SensorModel::PandarQt128,
    header: HeaderKind::Long12,
    protocol: (3, 2),
    blocks: 2,
    channels: 128,
    unit_len: 4,
    body_crc: true,
    fs_len: 17,
    tail_len: 34,
    t_return_mode: 12,
    t_timestamp: 21,
    t_date: 15,
    year_base: 1900,
    t_udp_seq: Some(26),
    t_crc: Some(30),
    t_mode_flag: Some(5),
    t_azimuth_state: None,
    variants: SIGNATURE_VARIANT,
    fine_azimuth: false,
    epoch_date: false,
    crc_verified: true,
};

/// PandarXT16 (tail: return mode @10, date @13, timestamp @19, sequence @24).
pub const PANDARXT16: Layout = xt(SensorModel::PandarXt16, 8, 16);
/// PandarXT32.
pub const PANDARXT32: Layout = xt(SensorModel::PandarXt32, 8, 32);
/// PandarXT32M2X.
pub const PANDARXT32M: Layout = xt(SensorModel::PandarXt32m, 6, 32);

/// Pandar128E4X / OT128 (tail: azimuth state @9, operational state @11, return mode @12, date
/// @15, timestamp @21, sequence @26, IMU @30..52, CRC @52).
pub const PANDAR128E4X: Layout = Layout {
    model: SensorModel::Pandar128e4x,
    header: HeaderKind::Long12,
    protocol: (1, 4),
    blocks: 2,
    channels: 128,
    unit_len: 3,
    body_crc: true,
    fs_len: 17,
    tail_len: 56,
    t_return_mode: 12,
    t_timestamp: 21,
    t_date: 15,
    year_base: 1900,
    t_udp_seq: Some(26),
    t_crc: Some(52),
    t_mode_flag: None,
    t_azimuth_state: Some(9),
    variants: SIGNATURE_VARIANT,
    fine_azimuth: false,
    epoch_date: false,
    crc_verified: true,
};

/// AT128E2X (blocks: azimuth u16 + fine azimuth u8; tail: timestamp @20, return mode @24,
/// date @26 as seconds since the epoch, sequence @32, CRC @36). Layout from the AT128E2X manual
/// as in Nebula's `pandar_at128.hpp`; no capture is available, so the CRC convention is not
/// verified and not checked.
pub const AT128: Layout = Layout {
    model: SensorModel::At128,
    header: HeaderKind::Long12,
    protocol: (4, 3),
    blocks: 2,
    channels: 128,
    unit_len: 4,
    body_crc: true,
    fs_len: 0,
    tail_len: 40,
    t_return_mode: 24,
    t_timestamp: 20,
    t_date: 26,
    year_base: 1970,
    t_udp_seq: Some(32),
    t_crc: Some(36),
    t_mode_flag: None,
    t_azimuth_state: None,
    variants: SIGNATURE_VARIANT,
    fine_azimuth: true,
    epoch_date: true,
    crc_verified: false,
};

/// The layout of a Hesai model, `None` for other families.
pub const fn layout(model: SensorModel) -> Option<&'static Layout> {
    match model {
        SensorModel::Pandar40p => Some(&PANDAR40P),
        SensorModel::Pandar64 => Some(&PANDAR64),
        SensorModel::PandarQt64 => Some(&PANDARQT64),
        SensorModel::PandarQt128 => Some(&PANDARQT128),
        SensorModel::PandarXt16 => Some(&PANDARXT16),
        SensorModel::PandarXt32 => Some(&PANDARXT32),
        SensorModel::PandarXt32m => Some(&PANDARXT32M),
        SensorModel::Pandar128e4x => Some(&PANDAR128E4X),
        SensorModel::At128 => Some(&AT128),
        _ => None,
    }
}

/// Every decodable layout.
pub const ALL: [&Layout; 9] = [
    &PANDAR40P,
    &PANDAR64,
    &PANDARQT64,
    &PANDARQT128,
    &PANDARXT16,
    &PANDARXT32,
    &PANDARXT32M,
    &PANDAR128E4X,
    &AT128,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_lengths() {
        let lens: Vec<usize> = ALL.iter().map(|l| l.base_len()).collect();
        assert_eq!(lens, [1262, 1194, 1072, 1095, 568, 1080, 820, 861, 1086]);
        assert_eq!(AT128.azimuth_offset(1), 12 + 515);
        assert_eq!(PANDARQT128.tail_offset(), 1061);
        assert_eq!(PANDAR40P.azimuth_offset(1), 126);
        assert_eq!(PANDARXT32.unit_offset(1, 2), 12 + 130 + 2 + 8);
    }
}
