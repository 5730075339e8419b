//! Ouster IMU packets (UDP port 7503 by default): one accelerometer and gyroscope sample per
//! 48-byte datagram, about 100 per second. Sans-IO: bytes in, an [`ImuSample`] out.
//!
//! Layout (Ouster sensor documentation, "IMU Data Format"; little-endian), offsets in the UDP
//! payload:
//!
//! | offset | type | field | unit |
//! |---|---|---|---|
//! | 0 | u64 | diagnostic system time stamp | ns |
//! | 8 | u64 | accelerometer read time | ns (sensor clock, as the column time stamps) |
//! | 16 | u64 | gyroscope read time | ns |
//! | 24, 28, 32 | f32 ×3 | linear acceleration x, y, z | g |
//! | 36, 40, 44 | f32 ×3 | angular velocity x, y, z | °/s |
#![forbid(unsafe_code)]

/// Length of an IMU packet, bytes.
pub const IMU_PACKET_LEN: usize = 48;

pub use crate::msg::{ImuSample, STANDARD_GRAVITY};

/// Why bytes are not an Ouster IMU packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("IMU packet of {0} bytes; an Ouster IMU packet is 48")]
pub struct ImuLengthError(pub usize);

/// Decodes an IMU packet (module documentation).
///
/// # Errors
/// [`ImuLengthError`] for a payload that is not 48 bytes.
pub fn parse(payload: &[u8]) -> Result<ImuSample, ImuLengthError> {
    let Some(p) = payload.first_chunk::<IMU_PACKET_LEN>() else {
        return Err(ImuLengthError(payload.len()));
    };
    if payload.len() != IMU_PACKET_LEN {
        return Err(ImuLengthError(payload.len()));
    }
    let u64_at = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().unwrap_or([0; 8]));
    let f32_at = |o: usize| f32::from_le_bytes(p[o..o + 4].try_into().unwrap_or([0; 4]));
    Ok(ImuSample {
        sys_ts_ns: u64_at(0),
        accel_ts_ns: u64_at(8),
        gyro_ts_ns: u64_at(16),
        accel_g: [f32_at(24), f32_at(28), f32_at(32)],
        gyro_dps: [f32_at(36), f32_at(40), f32_at(44)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented offsets and the unit conversions, exact values.
    #[test]
    fn fields_and_units() {
        let mut p = [0u8; 48];
        p[0..8].copy_from_slice(&11u64.to_le_bytes());
        p[8..16].copy_from_slice(&22u64.to_le_bytes());
        p[16..24].copy_from_slice(&33u64.to_le_bytes());
        for (i, v) in [0.5f32, -1.0, 2.0, 90.0, -180.0, 45.0].iter().enumerate() {
            p[24 + 4 * i..28 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let s = parse(&p).unwrap();
        assert_eq!((s.sys_ts_ns, s.accel_ts_ns, s.gyro_ts_ns), (11, 22, 33));
        assert_eq!(s.accel_g, [0.5, -1.0, 2.0]);
        assert_eq!(s.gyro_dps, [90.0, -180.0, 45.0]);
        assert_eq!(s.linear_acceleration(), [4.903325, -9.80665, 19.6133]);
        assert_eq!(
            s.angular_velocity(),
            [
                std::f64::consts::FRAC_PI_2,
                -std::f64::consts::PI,
                std::f64::consts::FRAC_PI_4
            ]
        );
        assert_eq!(parse(&p[..47]), Err(ImuLengthError(47)));
        assert_eq!(parse(&[0; 49]), Err(ImuLengthError(49)));
    }
}
