//! Velodyne position packets (UDP port 8308): the PPS status, the time of the pulse and the
//! NMEA sentence the sensor received from its GPS. Sans-IO: bytes in, a [`Position`] out.
//!
//! Layout (VLP-16 User Manual, "Position Packet"; little-endian), offsets in the UDP payload:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 198 | unused (and, on newer firmware, status bytes this module does not read) |
//! | 198 | 4 | time stamp, µs since the top of the hour (u32) |
//! | 202 | 1 | PPS status: 0 absent, 1 synchronising, 2 locked, 3 error |
//! | 203 | 3 | unused (newer firmware: thermal status, temperatures) |
//! | 206 | up to 306 | NMEA sentence (`$GPRMC,...` or `$GPGGA,...`), ASCII, NUL-padded |
//!
//! The payload is 512 bytes (the older layout: 306 bytes of NMEA room) or 554 (the newer one).
#![forbid(unsafe_code)]

/// Offset of the time stamp (µs since the top of the hour), bytes.
pub const TIMESTAMP_OFFSET: usize = 198;
/// Offset of the PPS status byte.
pub const PPS_OFFSET: usize = 202;
/// Offset of the NMEA sentence.
pub const NMEA_OFFSET: usize = 206;
/// The shortest position packet, bytes (the older firmware's).
pub const MIN_LEN: usize = 512;
/// The longest position packet, bytes (the newer firmware's).
pub const MAX_LEN: usize = 554;

/// The PPS (pulse per second) input's state, as the sensor reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PpsStatus {
    /// No pulse seen.
    Absent,
    /// Pulses seen; the sensor is aligning its clock to them.
    Synchronizing,
    /// The sensor clock is locked to the pulses.
    Locked,
    /// The pulses are not usable.
    Error,
    /// A value the manual does not define (the byte as sent).
    Unknown(u8),
}

impl PpsStatus {
    /// The status byte's meaning (manual: 0 absent, 1 synchronising, 2 locked, 3 error).
    pub fn from_byte(b: u8) -> Self {
        match b {
            0 => PpsStatus::Absent,
            1 => PpsStatus::Synchronizing,
            2 => PpsStatus::Locked,
            3 => PpsStatus::Error,
            other => PpsStatus::Unknown(other),
        }
    }
}

/// One decoded position packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position<'a> {
    /// µs since the top of the hour on the sensor clock (0..3,600,000,000 when valid).
    pub top_of_hour_us: u32,
    /// The PPS input's state.
    pub pps: PpsStatus,
    /// The NMEA sentence up to its first NUL or line end (empty when the sensor has none).
    pub nmea: &'a str,
}

/// Why bytes are not a position packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    /// The payload is not 512 or 554 bytes.
    #[error("position packet of {0} bytes; a Velodyne position packet is 512 or 554")]
    Length(usize),
    /// The NMEA bytes are not ASCII.
    #[error("position packet NMEA field is not ASCII")]
    NotAscii,
}

/// Decodes a position packet (module documentation).
///
/// # Errors
/// [`PositionError`]: a payload of another length, or an NMEA field that is not ASCII.
pub fn parse(payload: &[u8]) -> Result<Position<'_>, PositionError> {
    if payload.len() != MIN_LEN && payload.len() != MAX_LEN {
        return Err(PositionError::Length(payload.len()));
    }
    let ts = u32::from_le_bytes([
        payload[TIMESTAMP_OFFSET],
        payload[TIMESTAMP_OFFSET + 1],
        payload[TIMESTAMP_OFFSET + 2],
        payload[TIMESTAMP_OFFSET + 3],
    ]);
    let field = &payload[NMEA_OFFSET..];
    let end = field
        .iter()
        .position(|&b| b == 0 || b == b'\r' || b == b'\n')
        .unwrap_or(field.len());
    let nmea = std::str::from_utf8(&field[..end])
        .ok()
        .filter(|s| s.is_ascii())
        .ok_or(PositionError::NotAscii)?;
    Ok(Position {
        top_of_hour_us: ts,
        pps: PpsStatus::from_byte(payload[PPS_OFFSET]),
        nmea,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(len: usize, ts: u32, pps: u8, nmea: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[TIMESTAMP_OFFSET..TIMESTAMP_OFFSET + 4].copy_from_slice(&ts.to_le_bytes());
        p[PPS_OFFSET] = pps;
        p[NMEA_OFFSET..NMEA_OFFSET + nmea.len()].copy_from_slice(nmea);
        p
    }

    /// The manual's offsets, both lengths, every PPS value, the sentence cut at its line end.
    #[test]
    fn fields_at_the_manuals_offsets() {
        let s = b"$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A\r\n";
        let p = packet(554, 1_234_567_890, 2, s);
        let pos = parse(&p).unwrap();
        assert_eq!(pos.top_of_hour_us, 1_234_567_890);
        assert_eq!(pos.pps, PpsStatus::Locked);
        assert_eq!(
            pos.nmea,
            "$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A"
        );
        let p = packet(512, 7, 0, b"");
        assert_eq!(
            parse(&p).unwrap(),
            Position {
                top_of_hour_us: 7,
                pps: PpsStatus::Absent,
                nmea: ""
            }
        );
        assert_eq!(PpsStatus::from_byte(1), PpsStatus::Synchronizing);
        assert_eq!(PpsStatus::from_byte(3), PpsStatus::Error);
        assert_eq!(PpsStatus::from_byte(9), PpsStatus::Unknown(9));
    }

    /// Other lengths and non-ASCII NMEA bytes are refused, never a panic.
    #[test]
    fn bad_packets_are_refused() {
        assert_eq!(parse(&[0; 100]), Err(PositionError::Length(100)));
        assert_eq!(parse(&[0; 1206]), Err(PositionError::Length(1206)));
        let p = packet(512, 0, 0, &[0xC3, 0xA9]);
        assert_eq!(parse(&p), Err(PositionError::NotAscii));
    }
}
