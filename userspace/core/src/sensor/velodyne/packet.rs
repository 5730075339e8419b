//! The VLP-16 data packet view: [`Packet`], a checked zero-copy view of the 1206-byte UDP
//! payload (layout in the module docs of [`super`]), why a payload is refused ([`PacketError`],
//! [`PacketRejection`], [`classify`]), and the firing timing table ([`firing_offset_ns`], ns after the
//! packet timestamp).
//!
//! Source: *VLP-16 User Manual* (Velodyne, 63-9243), section 9 "Sensor Data".

#![forbid(unsafe_code)]

use crate::scan::PacketRejection;
use crate::vendor::ReturnMode;

use super::{
    AZIMUTH_UNITS, BLOCK_FLAG, BLOCK_LEN, BLOCKS, DATA_PACKET_LEN, FIRING_NS, LASERS,
    PRODUCT_ID_OFFSET, RETURN_MODE_DUAL, RETURN_MODE_LAST, RETURN_MODE_OFFSET,
    RETURN_MODE_STRONGEST, SEQUENCE_NS, TIMESTAMP_OFFSET,
};

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
pub fn classify(payload: &[u8]) -> Result<Packet<&[u8]>, PacketRejection<PacketError>> {
    match Packet::new_checked(payload) {
        Ok(p) => Ok(p),
        Err(e @ PacketError::Length { len }) => {
            if len.abs_diff(DATA_PACKET_LEN) <= MALFORMED_LEN_TOLERANCE
                || payload.starts_with(&BLOCK_FLAG)
            {
                Err(PacketRejection::Malformed(e))
            } else {
                Err(PacketRejection::Ignored)
            }
        }
        Err(e) => Err(PacketRejection::Malformed(e)),
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
