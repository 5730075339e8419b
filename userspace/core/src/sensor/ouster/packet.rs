//! Ouster lidar packets: the layout of each UDP profile and a zero-copy, checked packet view.
//!
//! Sources: Ouster *Sensor Documentation*, "Lidar Data Packet Format" (firmware 2.x/3.x; the
//! LEGACY format also in the OS1 *Software User Manual* v1.13, section 3.4), cross-checked
//! against ouster-sdk 1.0.1 (`ouster_core/src/parsing.cpp`, the per-profile field tables that
//! its digest files were produced with). All values are little-endian.
//!
//! ## Packet layout
//!
//! | part | LEGACY | all other profiles |
//! |---|---|---|
//! | packet header | none | 32 bytes, see below |
//! | column header | 16 bytes: timestamp u64 ns @0, measurement_id u16 @8, frame_id u16 @10, encoder count u32 @12 | 12 bytes: timestamp u64 ns @0, measurement_id u16 @8, status u16 @10 |
//! | pixels | `pixels_per_column` × [`Profile::pixel_bytes`] | same |
//! | column footer | status u32 (bit 0 = valid; 0xFFFFFFFF when valid) | none |
//! | packet footer | none | 32 bytes: reserved, the last 8 a CRC-64 in the STANDARD header (see below) |
//!
//! A packet holds `columns_per_packet` columns (16 by default). The non-legacy packet header
//! comes in two types ([`HeaderType`], the metadata's `lidar_data_format.header_type`,
//! firmware 3.2+; without it FUSA for `FUSA_RNG15_RFL8_NIR8_DUAL`, else STANDARD, as
//! ouster-sdk 1.0.1 `metadata.cpp` decides):
//!
//! | field | STANDARD | FUSA |
//! |---|---|---|
//! | packet type (1 = lidar) | u16 @0 | u8 @0 |
//! | init_id | u24 @4 | u24 @1 |
//! | frame_id | u16 @2 (wraps at 2^16) | u32 @4 (wraps at 2^32) |
//! | alert flags | u8 @12 | u8 @8 |
//! | product serial number | u40 @7 | u40 @11 |
//! | thermal-shutdown countdown, shot-limiting countdown (s) | u8 @16, u8 @17 | same |
//! | thermal-shutdown status, shot-limiting status | low nibble @18, low nibble @19 | same |
//! | footer CRC | CRC-64/XZ of every byte before it, u64 @`len - 8` | none |
//!
//! The CRC (ECMA-182 polynomial, reflected, register and result inverted: CRC-64/XZ, as
//! ouster-sdk's `crc64_compute`) is written by firmware 3.x; 2.x leaves those bytes zero or
//! fills them with a marker (fw 2.3: `0xDEADBEEF0000C0DE`), so the view only reports whether
//! the CRC matches ([`Packet::crc_matches`]); the stream decides what a mismatch means
//! (`super` module docs, "Rejections"). ouster-sdk reads the CRC but decodes either way.
//!
//! ## Pixel layouts (bit offsets inside the pixel; `×8` = the value is in units of 8 mm etc.)
//!
//! | profile | bytes | fields |
//! |---|---|---|
//! | LEGACY | 12 | RANGE bits 0–19 (mm), FLAGS bits 28–31, REFLECTIVITY byte 4 (fw 1.1x: u16 @4), SIGNAL u16 @6, NEAR_IR u16 @8 |
//! | RNG19_RFL8_SIG16_NIR16 | 12 | RANGE bits 0–18 (mm), FLAGS bits 19–23, REFLECTIVITY byte 4, SIGNAL u16 @6, NEAR_IR u16 @8, WINDOW byte 11 |
//! | RNG19_RFL8_SIG16_NIR16_DUAL | 16 | RANGE bits 0–18, FLAGS 19–23, REFLECTIVITY byte 3, RANGE2 bits 32–50, FLAGS2 51–55, REFLECTIVITY2 byte 7, SIGNAL u16 @8, SIGNAL2 u16 @10, NEAR_IR u16 @12, WINDOW byte 15 |
//! | RNG15_RFL8_NIR8 | 4 | RANGE bits 0–14 (×8 mm), FLAGS bit 15, REFLECTIVITY byte 2, NEAR_IR byte 3 (×16) |
//! | FIVE_WORD_PIXEL | 20 | as the DUAL profile for bytes 0–13 (no WINDOW), five raw 32-bit words |
//! | RNG15_RFL8_NIR8_DUAL, FUSA_RNG15_RFL8_NIR8_DUAL | 8 | RANGE bits 0–14 (×8 mm), FLAGS bit 15, REFLECTIVITY byte 2, NEAR_IR byte 3 (×16), RANGE2 bits 32–46 (×8 mm), FLAGS2 bit 47, REFLECTIVITY2 byte 6, WINDOW byte 7 |
//!
//! Every profile also exposes `RAW32_WORDn`, the n-th little-endian u32 of the pixel.

/// Lidar UDP profile (`udp_profile_lidar` in the metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Firmware < 2.0 format (also selectable on 2.x): no packet header, 12-byte pixels.
    Legacy,
    /// Single return, 12-byte pixels: 19-bit range, reflectivity, signal, near-IR.
    Rng19Rfl8Sig16Nir16,
    /// Dual return (strongest and second strongest), 16-byte pixels.
    Rng19Rfl8Sig16Nir16Dual,
    /// Low data rate, single return, 4-byte pixels: 15-bit range in 8 mm units.
    Rng15Rfl8Nir8,
    /// Dual return, 20-byte pixels (five 32-bit words).
    FiveWordPixel,
    /// Low data rate, dual return (firmware 3.x), 8-byte pixels: two 15-bit ranges in 8 mm
    /// units, no signal.
    Rng15Rfl8Nir8Dual,
    /// The functional-safety (FuSa) variant of [`Profile::Rng15Rfl8Nir8Dual`] (firmware 3.1+):
    /// the same pixels, by default the FUSA packet header ([`HeaderType::Fusa`]).
    FusaRng15Rfl8Nir8Dual,
}

impl Profile {
    /// Every supported profile.
    pub const ALL: [Profile; 7] = [
        Profile::Legacy,
        Profile::Rng19Rfl8Sig16Nir16,
        Profile::Rng19Rfl8Sig16Nir16Dual,
        Profile::Rng15Rfl8Nir8,
        Profile::FiveWordPixel,
        Profile::Rng15Rfl8Nir8Dual,
        Profile::FusaRng15Rfl8Nir8Dual,
    ];

    /// The metadata spelling, e.g. `RNG19_RFL8_SIG16_NIR16_DUAL`.
    pub const fn name(self) -> &'static str {
        match self {
            Profile::Legacy => "LEGACY",
            Profile::Rng19Rfl8Sig16Nir16 => "RNG19_RFL8_SIG16_NIR16",
            Profile::Rng19Rfl8Sig16Nir16Dual => "RNG19_RFL8_SIG16_NIR16_DUAL",
            Profile::Rng15Rfl8Nir8 => "RNG15_RFL8_NIR8",
            Profile::FiveWordPixel => "FIVE_WORD_PIXEL",
            Profile::Rng15Rfl8Nir8Dual => "RNG15_RFL8_NIR8_DUAL",
            Profile::FusaRng15Rfl8Nir8Dual => "FUSA_RNG15_RFL8_NIR8_DUAL",
        }
    }

    /// Parses the metadata spelling (exact, as the sensor writes it).
    pub fn from_name(s: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Bytes per pixel (channel data block).
    pub const fn pixel_bytes(self) -> usize {
        match self {
            Profile::Legacy | Profile::Rng19Rfl8Sig16Nir16 => 12,
            Profile::Rng19Rfl8Sig16Nir16Dual => 16,
            Profile::Rng15Rfl8Nir8 => 4,
            Profile::FiveWordPixel => 20,
            Profile::Rng15Rfl8Nir8Dual | Profile::FusaRng15Rfl8Nir8Dual => 8,
        }
    }

    /// Returns per pixel: 2 for the dual profiles, else 1.
    pub const fn returns(self) -> usize {
        match self {
            Profile::Rng19Rfl8Sig16Nir16Dual
            | Profile::FiveWordPixel
            | Profile::Rng15Rfl8Nir8Dual
            | Profile::FusaRng15Rfl8Nir8Dual => 2,
            _ => 1,
        }
    }

    /// Channel fields the profile carries, in ouster-sdk's naming.
    pub fn fields(self) -> Vec<ChanField> {
        use ChanField::*;
        let mut v = match self {
            Profile::Legacy => vec![Range, Flags, Reflectivity, Signal, NearIr],
            Profile::Rng19Rfl8Sig16Nir16 => {
                vec![Range, Flags, Reflectivity, Signal, NearIr, Window]
            }
            Profile::Rng19Rfl8Sig16Nir16Dual => vec![
                Range,
                Flags,
                Reflectivity,
                Range2,
                Flags2,
                Reflectivity2,
                Signal,
                Signal2,
                NearIr,
                Window,
            ],
            Profile::Rng15Rfl8Nir8 => vec![Range, Flags, Reflectivity, NearIr],
            Profile::FiveWordPixel => vec![
                Range,
                Flags,
                Reflectivity,
                Range2,
                Flags2,
                Reflectivity2,
                Signal,
                Signal2,
                NearIr,
            ],
            Profile::Rng15Rfl8Nir8Dual | Profile::FusaRng15Rfl8Nir8Dual => vec![
                Range,
                Flags,
                Reflectivity,
                NearIr,
                Range2,
                Flags2,
                Reflectivity2,
                Window,
            ],
        };
        for w in 1..=(self.pixel_bytes() / 4) as u8 {
            v.push(Raw32Word(w));
        }
        v
    }
}

/// A per-pixel channel field (ouster-sdk `ChanField` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChanField {
    /// Range of the (strongest) return, mm.
    Range,
    /// Range of the second strongest return, mm (dual profiles).
    Range2,
    /// Return flags.
    Flags,
    /// Flags of the second return.
    Flags2,
    /// Calibrated reflectivity, 0–255.
    Reflectivity,
    /// Reflectivity of the second return.
    Reflectivity2,
    /// Signal photons.
    Signal,
    /// Signal photons of the second return.
    Signal2,
    /// Near-infrared (ambient) photons.
    NearIr,
    /// Window blockage indicator.
    Window,
    /// The n-th (1-based) little-endian 32-bit word of the pixel.
    Raw32Word(u8),
}

impl ChanField {
    /// ouster-sdk's name, e.g. `REFLECTIVITY2`, `RAW32_WORD1`.
    pub fn name(self) -> String {
        match self {
            ChanField::Range => "RANGE".into(),
            ChanField::Range2 => "RANGE2".into(),
            ChanField::Flags => "FLAGS".into(),
            ChanField::Flags2 => "FLAGS2".into(),
            ChanField::Reflectivity => "REFLECTIVITY".into(),
            ChanField::Reflectivity2 => "REFLECTIVITY2".into(),
            ChanField::Signal => "SIGNAL".into(),
            ChanField::Signal2 => "SIGNAL2".into(),
            ChanField::NearIr => "NEAR_IR".into(),
            ChanField::Window => "WINDOW".into(),
            ChanField::Raw32Word(n) => format!("RAW32_WORD{n}"),
        }
    }
}

/// Where a field sits inside a pixel and how to scale it (ouster-sdk `FieldDecodeInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// First bit of the field, counted from the pixel start (little-endian bit order).
    pub bit_start: u16,
    /// Width, bits.
    pub bits: u8,
    /// Left shift applied after extraction (3 for the 8 mm range, 4 for the 8-bit near-IR).
    pub upshift: u8,
}

impl FieldSpec {
    const fn new(bit_start: u16, bits: u8, upshift: u8) -> Self {
        Self {
            bit_start,
            bits,
            upshift,
        }
    }

    /// Size of the value type ouster-sdk stores this field in, bytes (1, 2, 4 or 8):
    /// `ceil((bits + upshift) / 8)` rounded up to a power of two.
    pub const fn value_bytes(self) -> usize {
        match (self.bits as usize + self.upshift as usize).div_ceil(8) {
            1 => 1,
            2 => 2,
            3 | 4 => 4,
            _ => 8,
        }
    }

    /// Extracts the field from `pixel` (bytes past its end read as 0).
    #[inline]
    pub fn get(self, pixel: &[u8]) -> u64 {
        let first = usize::from(self.bit_start / 8);
        let shift = u32::from(self.bit_start % 8);
        let nbytes = (shift as usize + usize::from(self.bits)).div_ceil(8);
        let mut word = 0u64;
        for i in 0..nbytes.min(8) {
            word |= u64::from(pixel.get(first + i).copied().unwrap_or(0)) << (8 * i);
        }
        let mask = if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        };
        ((word >> shift) & mask) << self.upshift
    }
}

/// The bit layout of `field` in `profile`, or `None` if the profile lacks it.
pub const fn field_spec(profile: Profile, field: ChanField) -> Option<FieldSpec> {
    use ChanField::*;
    use Profile::*;
    let s = FieldSpec::new;
    Some(match (profile, field) {
        (_, Raw32Word(n)) => {
            if n == 0 || n as usize > profile.pixel_bytes() / 4 {
                return None;
            }
            s((n as u16 - 1) * 32, 32, 0)
        }
        (Legacy, Range) => s(0, 20, 0),
        (Legacy, Flags) => s(28, 4, 0),
        (Legacy, Reflectivity) => s(32, 8, 0),
        (Legacy, Signal) => s(48, 16, 0),
        (Legacy, NearIr) => s(64, 16, 0),
        (Rng19Rfl8Sig16Nir16, Range) => s(0, 19, 0),
        (Rng19Rfl8Sig16Nir16, Flags) => s(19, 5, 0),
        (Rng19Rfl8Sig16Nir16, Reflectivity) => s(32, 8, 0),
        (Rng19Rfl8Sig16Nir16, Signal) => s(48, 16, 0),
        (Rng19Rfl8Sig16Nir16, NearIr) => s(64, 16, 0),
        (Rng19Rfl8Sig16Nir16, Window) => s(88, 8, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Range) => s(0, 19, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Flags) => s(19, 5, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Reflectivity) => s(24, 8, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Range2) => s(32, 19, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Flags2) => s(51, 5, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Reflectivity2) => s(56, 8, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Signal) => s(64, 16, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, Signal2) => s(80, 16, 0),
        (Rng19Rfl8Sig16Nir16Dual | FiveWordPixel, NearIr) => s(96, 16, 0),
        (Rng19Rfl8Sig16Nir16Dual, Window) => s(120, 8, 0),
        (Rng15Rfl8Nir8, Range) => s(0, 15, 3),
        (Rng15Rfl8Nir8, Flags) => s(15, 1, 0),
        (Rng15Rfl8Nir8, Reflectivity) => s(16, 8, 0),
        (Rng15Rfl8Nir8, NearIr) => s(24, 8, 4),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Range) => s(0, 15, 3),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Flags) => s(15, 1, 0),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Reflectivity) => s(16, 8, 0),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, NearIr) => s(24, 8, 4),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Range2) => s(32, 15, 3),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Flags2) => s(47, 1, 0),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Reflectivity2) => s(48, 8, 0),
        (Rng15Rfl8Nir8Dual | FusaRng15Rfl8Nir8Dual, Window) => s(56, 8, 0),
        _ => return None,
    })
}

/// Non-legacy packet header type (ouster-sdk `HeaderType`; the metadata's
/// `lidar_data_format.header_type`, firmware 3.2+). Field offsets in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderType {
    /// The header of firmware 2.x and 3.x: 16-bit frame id, CRC-64 in the footer (3.x).
    Standard,
    /// The functional-safety header: 32-bit frame id, no footer CRC.
    Fusa,
}

impl HeaderType {
    /// The metadata spelling: `STANDARD` or `FUSA`.
    pub const fn name(self) -> &'static str {
        match self {
            HeaderType::Standard => "STANDARD",
            HeaderType::Fusa => "FUSA",
        }
    }

    /// Parses the metadata spelling (exact).
    pub fn from_name(s: &str) -> Option<HeaderType> {
        [HeaderType::Standard, HeaderType::Fusa]
            .into_iter()
            .find(|h| h.name() == s)
    }

    /// The header a profile has when the metadata names none (ouster-sdk 1.0.1
    /// `metadata.cpp`): FUSA for `FUSA_RNG15_RFL8_NIR8_DUAL`, else STANDARD.
    pub const fn default_for(profile: Profile) -> HeaderType {
        match profile {
            Profile::FusaRng15Rfl8Nir8Dual => HeaderType::Fusa,
            _ => HeaderType::Standard,
        }
    }
}

/// Packet geometry derived from the metadata's data format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketFormat {
    /// UDP profile.
    pub profile: Profile,
    /// Packet header type (ignored for LEGACY, which has no packet header).
    pub header: HeaderType,
    /// Beams (rows) per column.
    pub pixels_per_column: usize,
    /// Columns per packet (16 by default).
    pub columns_per_packet: usize,
    /// Columns per frame (512, 1024, 2048 or 4096).
    pub columns_per_frame: usize,
}

/// Non-legacy packet header size, bytes.
pub const PACKET_HEADER_LEN: usize = 32;
/// Non-legacy packet footer size, bytes.
pub const PACKET_FOOTER_LEN: usize = 32;
/// Packet type of a lidar packet in the non-legacy header.
pub const PACKET_TYPE_LIDAR: u16 = 1;
/// Size of a LEGACY IMU packet (sent to the IMU port, 7503), bytes.
pub const IMU_PACKET_LEN: usize = 48;

impl PacketFormat {
    /// The header type in effect: [`PacketFormat::header`], except `Standard` for LEGACY
    /// (whose frame id is the column header's u16).
    pub const fn header_type(&self) -> HeaderType {
        match self.profile {
            Profile::Legacy => HeaderType::Standard,
            _ => self.header,
        }
    }

    /// Largest frame id (ouster-sdk `max_frame_id`): 2^32 - 1 for the FUSA header, else
    /// 2^16 - 1. Frame ids wrap to 0 after it.
    pub const fn max_frame_id(&self) -> u32 {
        match self.header_type() {
            HeaderType::Fusa => u32::MAX,
            HeaderType::Standard => u16::MAX as u32,
        }
    }

    /// Signed distance from frame id `from` to `to` modulo `max_frame_id + 1` (2^16 or 2^32),
    /// in `-2^(n-1)..2^(n-1)` (ouster-sdk `frame_id_difference`).
    pub const fn frame_id_diff(&self, from: u32, to: u32) -> i64 {
        match self.header_type() {
            HeaderType::Fusa => to.wrapping_sub(from) as i32 as i64,
            HeaderType::Standard => (to as u16).wrapping_sub(from as u16) as i16 as i64,
        }
    }

    /// Packet header size: 0 (LEGACY) or 32 bytes.
    pub const fn packet_header_len(&self) -> usize {
        match self.profile {
            Profile::Legacy => 0,
            _ => PACKET_HEADER_LEN,
        }
    }

    /// Packet footer size: 0 (LEGACY) or 32 bytes.
    pub const fn packet_footer_len(&self) -> usize {
        self.packet_header_len()
    }

    /// Whether the footer's last 8 bytes are a CRC-64 (the STANDARD header, not LEGACY).
    pub const fn has_crc(&self) -> bool {
        !matches!(self.profile, Profile::Legacy) && matches!(self.header, HeaderType::Standard)
    }

    /// Column header size: 16 (LEGACY) or 12 bytes.
    pub const fn col_header_len(&self) -> usize {
        match self.profile {
            Profile::Legacy => 16,
            _ => 12,
        }
    }

    /// Column footer size: 4 (LEGACY status word) or 0 bytes.
    pub const fn col_footer_len(&self) -> usize {
        match self.profile {
            Profile::Legacy => 4,
            _ => 0,
        }
    }

    /// Column size: header + pixels + footer, bytes.
    pub const fn col_len(&self) -> usize {
        self.col_header_len()
            + self.pixels_per_column * self.profile.pixel_bytes()
            + self.col_footer_len()
    }

    /// Lidar packet (UDP payload) size, bytes: e.g. 6464 for LEGACY 32×16, 24832 for
    /// RNG19_RFL8_SIG16_NIR16 128×16, 8448 for RNG15_RFL8_NIR8 128×16, 16640 for
    /// (FUSA_)RNG15_RFL8_NIR8_DUAL 128×16.
    pub const fn packet_len(&self) -> usize {
        self.packet_header_len()
            + self.columns_per_packet * self.col_len()
            + self.packet_footer_len()
    }

    /// Packets per full frame: `ceil(columns_per_frame / columns_per_packet)`.
    pub const fn packets_per_frame(&self) -> usize {
        self.columns_per_frame.div_ceil(self.columns_per_packet)
    }
}

/// CRC-64/XZ lookup table (ECMA-182 polynomial 0x42F0E1EBA9EA3693, reflected: 0xC96C5795D7870F42).
const CRC64_TABLE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = i as u64;
        let mut k = 0;
        while k < 8 {
            r = if r & 1 == 1 {
                (r >> 1) ^ 0xC96C_5795_D787_0F42
            } else {
                r >> 1
            };
            k += 1;
        }
        t[i] = r;
        i += 1;
    }
    t
};

/// CRC-64/XZ of `data` (ECMA-182 polynomial, reflected input and output, register and result
/// inverted; check value of `"123456789"` = 0x995DC9BBDF1939FA): the CRC a firmware 3.x
/// sensor writes into the last 8 bytes of a STANDARD-header packet, over every byte before
/// them (ouster-sdk 1.0.1 `parsing.cpp` `crc64_compute`).
pub fn crc64_xz(data: &[u8]) -> u64 {
    !data.iter().fold(!0u64, |crc, &b| {
        CRC64_TABLE[usize::from(b ^ crc as u8)] ^ (crc >> 8)
    })
}

/// Why a payload is not a valid lidar packet of the configured format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Wrong size for the configured profile and geometry.
    #[error("payload is {len} bytes, the metadata's format needs {expected}")]
    Length {
        /// Payload length, bytes.
        len: usize,
        /// Expected length, bytes.
        expected: usize,
    },
    /// The non-legacy header's packet type is not 1 (lidar).
    #[error("packet type {0} is not 1 (lidar)")]
    PacketType(u16),

    /// A column's measurement_id is not below `columns_per_frame`.
    #[error("column {col} measurement_id {measurement_id} >= columns_per_frame {columns}")]
    MeasurementId {
        /// Column index inside the packet.
        col: usize,
        /// The raw measurement_id.
        measurement_id: u16,
        /// Columns per frame.
        columns: usize,
    },
}

/// A zero-copy view of one Ouster lidar packet (smoltcp `wire` style).
///
/// [`Packet::new_checked`] validates the length, the packet type and every column's
/// measurement_id once; after that no accessor can panic or read out of bounds (accessors on
/// an unchecked view over a short buffer return 0).
#[derive(Clone, Copy, Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    format: PacketFormat,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T, format: PacketFormat) -> Self {
        Self { buffer, format }
    }

    /// Wraps and validates a buffer.
    ///
    /// # Errors
    /// [`PacketError::Length`] unless exactly [`PacketFormat::packet_len`] bytes,
    /// [`PacketError::PacketType`] for a non-legacy header whose type is not 1,
    /// [`PacketError::MeasurementId`] for a column id >= `columns_per_frame`. The footer CRC
    /// is not checked here ([`Packet::crc_matches`]).
    pub fn new_checked(buffer: T, format: PacketFormat) -> Result<Self, PacketError> {
        let p = Self { buffer, format };
        let len = p.buffer.as_ref().len();
        let expected = format.packet_len();
        if len != expected {
            return Err(PacketError::Length { len, expected });
        }
        if format.profile != Profile::Legacy && p.packet_type() != PACKET_TYPE_LIDAR {
            return Err(PacketError::PacketType(p.packet_type()));
        }
        for col in 0..format.columns_per_packet {
            let measurement_id = p.col_measurement_id(col);
            if usize::from(measurement_id) >= format.columns_per_frame {
                return Err(PacketError::MeasurementId {
                    col,
                    measurement_id,
                    columns: format.columns_per_frame,
                });
            }
        }
        Ok(p)
    }

    /// The packet format this view decodes with.
    pub fn format(&self) -> &PacketFormat {
        &self.format
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn le(&self, offset: usize, n: usize) -> u64 {
        let b = self.buffer.as_ref();
        let mut v = 0u64;
        for i in 0..n {
            v |= u64::from(b.get(offset + i).copied().unwrap_or(0)) << (8 * i);
        }
        v
    }

    /// Offset of a header field: `standard` in the STANDARD header, `fusa` in the FUSA one.
    fn hdr(&self, standard: usize, fusa: usize) -> usize {
        match self.format.header_type() {
            HeaderType::Standard => standard,
            HeaderType::Fusa => fusa,
        }
    }

    /// Non-legacy packet type (STANDARD u16 @0, FUSA u8 @0); 0 for LEGACY.
    pub fn packet_type(&self) -> u16 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(0, self.hdr(2, 1)) as u16,
        }
    }

    /// Frame id: STANDARD u16 @2, FUSA u32 @4, or (LEGACY) the first column's frame_id.
    pub fn frame_id(&self) -> u32 {
        match (self.format.profile, self.format.header_type()) {
            (Profile::Legacy, _) => u32::from(self.col_frame_id(0)),
            (_, HeaderType::Standard) => self.le(2, 2) as u32,
            (_, HeaderType::Fusa) => self.le(4, 4) as u32,
        }
    }

    /// Initialization id (u24, STANDARD @4, FUSA @1; changes when the sensor is
    /// reconfigured); 0 for LEGACY.
    pub fn init_id(&self) -> u32 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(self.hdr(4, 1), 3) as u32,
        }
    }

    /// Product serial number (u40, STANDARD @7, FUSA @11); 0 for LEGACY.
    pub fn prod_sn(&self) -> u64 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(self.hdr(7, 11), 5),
        }
    }

    /// Alert flags (u8, STANDARD @12, FUSA @8, ouster-sdk `alert_flags`); 0 for LEGACY.
    pub fn alert_flags(&self) -> u8 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(self.hdr(12, 8), 1) as u8,
        }
    }

    /// Thermal-shutdown countdown, s (u8 @16, both headers; 0 = none pending); 0 for LEGACY.
    pub fn countdown_thermal_shutdown(&self) -> u8 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(16, 1) as u8,
        }
    }

    /// Shot-limiting countdown, s (u8 @17, both headers); 0 for LEGACY.
    pub fn countdown_shot_limiting(&self) -> u8 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(17, 1) as u8,
        }
    }

    /// Thermal-shutdown status (low nibble @18, both headers: 0 normal, 1 imminent); 0 for
    /// LEGACY.
    pub fn thermal_shutdown(&self) -> u8 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(18, 1) as u8 & 0x0F,
        }
    }

    /// Shot-limiting status (low nibble @19, both headers: 0 normal, 1 imminent, 2..=9
    /// limiting, the reduction bands 0–10 % … 70–75 %; ouster-sdk `ShotLimitingStatus`); 0
    /// for LEGACY.
    pub fn shot_limiting(&self) -> u8 {
        match self.format.profile {
            Profile::Legacy => 0,
            _ => self.le(19, 1) as u8 & 0x0F,
        }
    }

    /// The footer CRC-64 (u64 @`len - 8`) when the format has one ([`PacketFormat::has_crc`]):
    /// `None` for LEGACY, the FUSA header, or a buffer shorter than 8 bytes.
    pub fn crc(&self) -> Option<u64> {
        let n = self.buffer.as_ref().len();
        (self.format.has_crc() && n >= 8).then(|| self.le(n - 8, 8))
    }

    /// Whether the footer CRC equals [`crc64_xz`] of the bytes before it; `None` where the
    /// format has no CRC ([`Packet::crc`]).
    pub fn crc_matches(&self) -> Option<bool> {
        let b = self.buffer.as_ref();
        self.crc().map(|c| c == crc64_xz(&b[..b.len() - 8]))
    }

    /// Byte offset of column `col` (0-based inside the packet).
    pub fn col_offset(&self, col: usize) -> usize {
        self.format.packet_header_len() + col * self.format.col_len()
    }

    /// Column timestamp, ns on the sensor clock (u64 @0 of the column).
    pub fn col_timestamp(&self, col: usize) -> u64 {
        self.le(self.col_offset(col), 8)
    }

    /// Column measurement_id: the column index within the frame, 0..columns_per_frame (u16 @8).
    pub fn col_measurement_id(&self, col: usize) -> u16 {
        self.le(self.col_offset(col) + 8, 2) as u16
    }

    /// Column status: LEGACY u32 footer, else u16 @10; bit 0 set = the column holds data.
    pub fn col_status(&self, col: usize) -> u32 {
        let o = self.col_offset(col);
        match self.format.profile {
            Profile::Legacy => self.le(o + self.format.col_len() - 4, 4) as u32,
            _ => self.le(o + 10, 2) as u32,
        }
    }

    /// LEGACY column frame_id (u16 @10); 0 for other profiles.
    pub fn col_frame_id(&self, col: usize) -> u16 {
        match self.format.profile {
            Profile::Legacy => self.le(self.col_offset(col) + 10, 2) as u16,
            _ => 0,
        }
    }

    /// LEGACY encoder count (u32 @12, 90112 ticks per turn); 0 for other profiles.
    pub fn col_encoder(&self, col: usize) -> u32 {
        match self.format.profile {
            Profile::Legacy => self.le(self.col_offset(col) + 12, 4) as u32,
            _ => 0,
        }
    }

    /// The bytes of pixel `row` of column `col` (empty if out of range on an unchecked view).
    pub fn pixel(&self, col: usize, row: usize) -> &[u8] {
        let pb = self.format.profile.pixel_bytes();
        let o = self.col_offset(col) + self.format.col_header_len() + row * pb;
        self.buffer.as_ref().get(o..o + pb).unwrap_or(&[])
    }

    /// Value of `field` at (`col`, `row`) as ouster-sdk decodes it; 0 if the profile lacks it.
    pub fn field(&self, field: ChanField, col: usize, row: usize) -> u64 {
        field_spec(self.format.profile, field).map_or(0, |s| s.get(self.pixel(col, row)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(profile: Profile, h: usize) -> PacketFormat {
        PacketFormat {
            profile,
            header: HeaderType::default_for(profile),
            pixels_per_column: h,
            columns_per_packet: 16,
            columns_per_frame: 1024,
        }
    }

    #[test]
    fn packet_sizes_match_the_captures() {
        assert_eq!(fmt(Profile::Legacy, 32).packet_len(), 6464);
        assert_eq!(fmt(Profile::Legacy, 64).packet_len(), 12608);
        assert_eq!(fmt(Profile::Rng19Rfl8Sig16Nir16, 128).packet_len(), 24832);
        assert_eq!(fmt(Profile::Rng19Rfl8Sig16Nir16Dual, 32).packet_len(), 8448);
        assert_eq!(fmt(Profile::Rng15Rfl8Nir8, 128).packet_len(), 8448);
        assert_eq!(
            fmt(Profile::FiveWordPixel, 32).packet_len(),
            16 * (12 + 640) + 64
        );
        assert_eq!(fmt(Profile::Legacy, 64).packets_per_frame(), 64);
        // ouster-sdk 1.0.1 `PacketFormat.lidar_packet_size`, and its FUSA test capture.
        assert_eq!(fmt(Profile::Rng15Rfl8Nir8Dual, 128).packet_len(), 16640);
        assert_eq!(fmt(Profile::FusaRng15Rfl8Nir8Dual, 128).packet_len(), 16640);
        assert_eq!(fmt(Profile::Rng15Rfl8Nir8Dual, 32).col_len(), 12 + 256);
    }

    #[test]
    fn crc64_is_crc64_xz() {
        // The catalogue check value of CRC-64/XZ (ECMA-182 reflected).
        assert_eq!(crc64_xz(b"123456789"), 0x995D_C9BB_DF19_39FA);
        assert_eq!(crc64_xz(b""), 0);
    }

    #[test]
    fn header_types_place_their_fields() {
        // The first header of ouster-sdk's FUSA test capture (fw 3.1.0-alpha, OS-1-128):
        // type 1, init_id 390076, frame_id 229, alert flags 0x8c, serial 122246000293.
        let head = [
            0x01, 0xbc, 0xf3, 0x05, 0xe5, 0x00, 0x00, 0x00, 0x8c, 0x00, 0x00, 0xa5, 0xee, 0x6d,
            0x76, 0x1c, 0x03, 0x04, 0x15, 0x02,
        ];
        let f = fmt(Profile::FusaRng15Rfl8Nir8Dual, 2);
        assert_eq!(f.header, HeaderType::Fusa);
        let mut b = vec![0u8; f.packet_len()];
        b[..head.len()].copy_from_slice(&head);
        let p = Packet::new_checked(&b[..], f).unwrap();
        assert_eq!(
            (p.packet_type(), p.init_id(), p.frame_id(), p.alert_flags()),
            (1, 390_076, 229, 0x8c)
        );
        assert_eq!(p.prod_sn(), 122_246_000_293);
        assert_eq!(
            (
                p.countdown_thermal_shutdown(),
                p.countdown_shot_limiting(),
                p.thermal_shutdown(),
                p.shot_limiting()
            ),
            (3, 4, 5, 2)
        );
        assert_eq!(p.crc(), None);
        // 32-bit frame ids: above 2^16, and wrapping at 2^32.
        b[4..8].copy_from_slice(&0x1_2345u32.to_le_bytes());
        assert_eq!(Packet::new_unchecked(&b[..], f).frame_id(), 0x1_2345);
        assert_eq!(f.max_frame_id(), u32::MAX);
        assert_eq!(f.frame_id_diff(u32::MAX, 1), 2);
        assert_eq!(f.frame_id_diff(1, u32::MAX), -2);
        assert_eq!(f.frame_id_diff(65_535, 65_536), 1);
        // The same profile with a STANDARD header: 16-bit ids at @2, the other offsets.
        let s = PacketFormat {
            header: HeaderType::Standard,
            ..f
        };
        let p = Packet::new_unchecked(&b[..], s);
        assert_eq!((p.frame_id(), p.init_id()), (0x05f3, 0x01_2345));
        assert_eq!(s.max_frame_id(), 65_535);
        assert_eq!(s.frame_id_diff(65_535, 0), 1);
        assert_eq!(s.frame_id_diff(0x1_0000, 0x2_0001), 1);
    }

    #[test]
    fn standard_footer_crc_is_read_and_compared() {
        let f = fmt(Profile::Rng15Rfl8Nir8Dual, 4);
        let mut b: Vec<u8> = (0..f.packet_len()).map(|i| (i * 7) as u8).collect();
        b[..2].copy_from_slice(&1u16.to_le_bytes());
        for c in 0..16 {
            let o = 32 + c * f.col_len() + 8;
            b[o..o + 2].copy_from_slice(&(c as u16).to_le_bytes());
        }
        let n = b.len();
        // fw 2.3's footer marker: read, does not match, the view is still valid.
        b[n - 8..].copy_from_slice(&0xDEAD_BEEF_0000_C0DEu64.to_le_bytes());
        let p = Packet::new_checked(&b[..], f).unwrap();
        assert_eq!(
            (p.crc(), p.crc_matches()),
            (Some(0xDEAD_BEEF_0000_C0DE), Some(false))
        );
        let crc = crc64_xz(&b[..n - 8]);
        b[n - 8..].copy_from_slice(&crc.to_le_bytes());
        let p = Packet::new_checked(&b[..], f).unwrap();
        assert_eq!((p.crc(), p.crc_matches()), (Some(crc), Some(true)));
        b[100] ^= 1;
        assert_eq!(Packet::new_unchecked(&b[..], f).crc_matches(), Some(false));
        // The FUSA header has no CRC.
        let fusa = PacketFormat {
            header: HeaderType::Fusa,
            ..f
        };
        b[0] = 1;
        let p = Packet::new_checked(&b[..], fusa).unwrap();
        assert_eq!((p.crc(), p.crc_matches()), (None, None));
        assert_eq!(Packet::new_unchecked(&b[..4], f).crc_matches(), None);
    }

    #[test]
    fn field_specs_extract_bits_like_the_sdk() {
        // Low-data-rate pixel: range 0x1234 (15 bits) ×8, flag 1, refl 0xAB, nir 0xCD ×16.
        let px = [0x34, 0x92, 0xAB, 0xCD];
        let p = Profile::Rng15Rfl8Nir8;
        let g = |f| field_spec(p, f).unwrap().get(&px);
        assert_eq!(g(ChanField::Range), 0x1234 * 8);
        assert_eq!(g(ChanField::Flags), 1);
        assert_eq!(g(ChanField::Reflectivity), 0xAB);
        assert_eq!(g(ChanField::NearIr), 0xCD * 16);
        assert_eq!(g(ChanField::Raw32Word(1)), 0xCDAB_9234);
        assert_eq!(field_spec(p, ChanField::Range).unwrap().value_bytes(), 4);
        assert_eq!(field_spec(p, ChanField::NearIr).unwrap().value_bytes(), 2);
        assert_eq!(field_spec(p, ChanField::Flags).unwrap().value_bytes(), 1);
        assert_eq!(field_spec(p, ChanField::Signal), None);
        assert_eq!(field_spec(p, ChanField::Raw32Word(2)), None);
        // Dual pixel: range 0x7FFFF with flags 0b10101, second range 1000.
        let mut px = [0u8; 16];
        px[..4].copy_from_slice(&(0x7FFFFu32 | (0b10101 << 19) | (200 << 24)).to_le_bytes());
        px[4..8].copy_from_slice(&(1000u32 | (7 << 24)).to_le_bytes());
        px[12..14].copy_from_slice(&513u16.to_le_bytes());
        let p = Profile::Rng19Rfl8Sig16Nir16Dual;
        let g = |f| field_spec(p, f).unwrap().get(&px);
        assert_eq!(
            (
                g(ChanField::Range),
                g(ChanField::Flags),
                g(ChanField::Reflectivity)
            ),
            (0x7FFFF, 0b10101, 200)
        );
        assert_eq!(
            (
                g(ChanField::Range2),
                g(ChanField::Reflectivity2),
                g(ChanField::NearIr)
            ),
            (1000, 7, 513)
        );
        assert_eq!(Profile::FiveWordPixel.fields().len(), 9 + 5);
        // Low-data-rate dual pixel: range 0x1234 ×8 with flag, refl 0xAB, nir 0xCD ×16, range2
        // 0x7FFF ×8 with flag2, refl2 0x12, window 0x34.
        let px = [0x34, 0x92, 0xAB, 0xCD, 0xFF, 0xFF, 0x12, 0x34];
        for p in [Profile::Rng15Rfl8Nir8Dual, Profile::FusaRng15Rfl8Nir8Dual] {
            let g = |f| field_spec(p, f).unwrap().get(&px);
            assert_eq!(
                (
                    g(ChanField::Range),
                    g(ChanField::Flags),
                    g(ChanField::Reflectivity)
                ),
                (0x1234 * 8, 1, 0xAB)
            );
            assert_eq!(g(ChanField::NearIr), 0xCD * 16);
            assert_eq!(
                (
                    g(ChanField::Range2),
                    g(ChanField::Flags2),
                    g(ChanField::Reflectivity2)
                ),
                (0x7FFF * 8, 1, 0x12)
            );
            assert_eq!(g(ChanField::Window), 0x34);
            assert_eq!(g(ChanField::Raw32Word(2)), 0x3412_FFFF);
            assert_eq!(field_spec(p, ChanField::Signal), None);
            assert_eq!(p.fields().len(), 8 + 2);
        }
    }

    #[test]
    fn checked_view_rejects_and_unchecked_never_panics() {
        let f = fmt(Profile::Rng19Rfl8Sig16Nir16, 16);
        let mut b = vec![0u8; f.packet_len()];
        b[0] = 1;
        assert!(Packet::new_checked(&b[..], f).is_ok());
        assert_eq!(
            Packet::new_checked(&b[..b.len() - 1], f).unwrap_err(),
            PacketError::Length {
                len: b.len() - 1,
                expected: b.len()
            }
        );
        b[0] = 2;
        assert_eq!(
            Packet::new_checked(&b[..], f).unwrap_err(),
            PacketError::PacketType(2)
        );
        b[0] = 1;
        let o = 32 + 3 * f.col_len() + 8;
        b[o..o + 2].copy_from_slice(&1024u16.to_le_bytes());
        assert_eq!(
            Packet::new_checked(&b[..], f).unwrap_err(),
            PacketError::MeasurementId {
                col: 3,
                measurement_id: 1024,
                columns: 1024
            }
        );
        let p = Packet::new_unchecked(&b[..10], f);
        assert_eq!(
            (
                p.col_timestamp(15),
                p.field(ChanField::Range, 15, 15),
                p.prod_sn()
            ),
            (0, 0, 0)
        );
    }
}
