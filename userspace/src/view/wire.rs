//! The view's frame format, `GET /api/frame` (`application/octet-stream`), all little-endian:
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 | 4 bytes | magic `LXV2` |
//! | 4 | u16 | header length, 40 ([`HEADER_LEN`]) |
//! | 6 | u16 | point stride, 16 ([`STRIDE`]) |
//! | 8 | u64 | frame sequence (per sensor, from 0) |
//! | 16 | u32 | points in this response, `n` |
//! | 20 | u32 | points in the frame (more than `n` when decimated) |
//! | 24 | u32 | decimation step: point `i` of the response is point `i * step` of the frame |
//! | 28 | u32 | packets missing from the frame (`packets_expected - packets_received`) |
//! | 32 | u32 | flags: bit 0 set when the sensor's point layout has an intensity (the page then colours by it; else by height) |
//! | 36 | u32 | reserved, 0 |
//! | 40 | `n` x 16 bytes | points |
//!
//! Each point (16 bytes, so the x, y, z of point `i` are the f32 at float index `8 + 4 i`):
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 | f32 | x, m (forward) |
//! | 4 | f32 | y, m (left) |
//! | 8 | f32 | z, m (up) |
//! | 12 | u8 | intensity, 0-255 (a float intensity rounded and clamped; 0 without one) |
//! | 13 | u8 | return type (`lidarxdp_core::point::ReturnType`; 0 where the layout has none) |
//! | 14 | u16 | channel or ring (0 where the layout has neither) |
//!
//! Every layout ([`lidarxdp_core::layout`]) has x, y, z as f32 at bytes 0, 4, 8; the other
//! fields are read by name from the layout's field list.
//!
//! The body is exactly `HEADER_LEN + n * STRIDE` bytes; `n <= super::MAX_POINTS`.

use lidarxdp_core::frame::FrameHeader;
use lidarxdp_core::point::{PointField, datatype};
use lidarxdp_core::point_buf::PointBuf;

/// First four bytes of a frame response.
pub const MAGIC: &[u8; 4] = b"LXV2";
/// Bytes before the first point.
pub const HEADER_LEN: usize = 40;
/// Header flag: the layout has an intensity.
pub const FLAG_INTENSITY: u32 = 1;
/// Bytes per point.
pub const STRIDE: usize = 16;

/// The decimation step for a frame of `points` points: 1 up to `cap`, else
/// `ceil(points / cap)` (`cap` 0 is taken as 1).
pub fn step(points: usize, cap: usize) -> usize {
    points.div_ceil(cap.max(1)).max(1)
}

/// The value of field `f` (an integer or float PointField type) of the point `p`, as f64.
fn value(p: &[u8], f: &PointField) -> f64 {
    let o = f.offset as usize;
    let b = |n: usize| &p[o..o + n];
    match f.datatype {
        datatype::UINT8 => f64::from(p[o]),
        datatype::INT8 => f64::from(p[o] as i8),
        datatype::UINT16 => f64::from(u16::from_le_bytes([p[o], p[o + 1]])),
        datatype::INT16 => f64::from(i16::from_le_bytes([p[o], p[o + 1]])),
        datatype::UINT32 => f64::from(u32::from_le_bytes(b(4).try_into().unwrap_or([0; 4]))),
        datatype::INT32 => f64::from(i32::from_le_bytes(b(4).try_into().unwrap_or([0; 4]))),
        datatype::FLOAT32 => f64::from(f32::from_le_bytes(b(4).try_into().unwrap_or([0; 4]))),
        datatype::FLOAT64 => f64::from_le_bytes(b(8).try_into().unwrap_or([0; 8])),
        _ => 0.0,
    }
}

/// Encodes a frame (`header`, `points` in any layout) as the table above, keeping every
/// [`step`]`(points.len(), cap)`-th point.
pub fn encode(header: &FrameHeader, points: &PointBuf, cap: usize) -> Vec<u8> {
    let t = points.point_type();
    let (intensity, return_type) = (t.field("intensity"), t.field("return_type"));
    let channel = t.field("channel").or_else(|| t.field("ring"));
    let point_step = t.point_step();
    let step = step(points.len(), cap);
    let n = points.len().div_ceil(step);
    let mut out = Vec::with_capacity(HEADER_LEN + n * STRIDE);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&(STRIDE as u16).to_le_bytes());
    out.extend_from_slice(&header.sequence.to_le_bytes());
    // Frames hold far fewer than 2^32 points (the decoders' buffers are bounded).
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&(points.len() as u32).to_le_bytes());
    out.extend_from_slice(&(step as u32).to_le_bytes());
    let missing = header
        .packets_expected
        .saturating_sub(header.packets_received);
    out.extend_from_slice(&missing.to_le_bytes());
    let flags = if intensity.is_some() {
        FLAG_INTENSITY
    } else {
        0
    };
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let get = |p: &[u8], f: Option<PointField>| f.map_or(0.0, |f| value(p, &f));
    for p in points.as_bytes().chunks_exact(point_step).step_by(step) {
        out.extend_from_slice(&p[..12]);
        out.push(get(p, intensity).round().clamp(0.0, 255.0) as u8);
        out.push(get(p, return_type) as u8);
        out.extend_from_slice(&(get(p, channel) as u16).to_le_bytes());
    }
    debug_assert_eq!(out.len(), HEADER_LEN + n * STRIDE);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lidarxdp_core::layout::PointType;
    use lidarxdp_core::point::PointXYZIRCAEDT;

    fn pt(i: usize) -> PointXYZIRCAEDT {
        PointXYZIRCAEDT {
            x: i as f32 + 0.25,
            y: -(i as f32),
            z: 1.5,
            intensity: (i % 256) as u8,
            return_type: 2,
            channel: (i % 1000) as u16,
            ..PointXYZIRCAEDT::default()
        }
    }

    #[test]
    fn layout_of_a_small_frame() {
        let h = FrameHeader {
            sequence: 0x0102_0304_0506_0708,
            packets_expected: 10,
            packets_received: 7,
            ..FrameHeader::default()
        };
        let pts: PointBuf = (0..3).map(pt).collect();
        let b = encode(&h, &pts, 300_000);
        assert_eq!(b.len(), 40 + 3 * 16);
        assert_eq!(&b[0..4], b"LXV2");
        assert_eq!(&b[4..8], &[40, 0, 16, 0]);
        assert_eq!(&b[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(
            &b[16..40],
            &[
                3, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        // Point 2: x 2.25, y -2, z 1.5, intensity 2, return type 2, channel 2.
        let p = &b[72..88];
        assert_eq!(&p[0..4], &2.25f32.to_le_bytes());
        assert_eq!(&p[4..8], &(-2.0f32).to_le_bytes());
        assert_eq!(&p[8..12], &1.5f32.to_le_bytes());
        assert_eq!(&p[12..16], &[2, 2, 2, 0]);
    }

    /// Other layouts: the float intensity rounded, the ring as the channel, 0 for a field the
    /// layout lacks (the return type of most).
    #[test]
    fn other_layouts_by_field_name() {
        let h = FrameHeader::default();
        let mut v = PointBuf::with_type(PointType::Velodyne, 3);
        v.extend((0..3).map(pt));
        let b = encode(&h, &v, 10);
        assert_eq!(&b[32..36], &[1, 0, 0, 0]);
        assert_eq!(
            &b[72..88][12..16],
            &[2, 0, 2, 0],
            "intensity 2.0, no return type, ring 2"
        );
        let mut c = PointBuf::with_type(PointType::AutowareXyzirc, 3);
        c.extend((0..3).map(pt));
        let b = encode(&h, &c, 10);
        assert_eq!(&b[72..88][8..16], &[0, 0, 0xc0, 0x3f, 2, 2, 2, 0]);
        let mut x = PointBuf::with_type(PointType::Xyzi, 3);
        x.extend((0..3).map(pt));
        let b = encode(&h, &x, 10);
        assert_eq!(&b[32..36], &[1, 0, 0, 0]);
        let mut o = PointBuf::with_type(PointType::OusterXyzir, 3);
        o.extend((0..3).map(pt));
        assert_eq!(&encode(&h, &o, 10)[72..88][12..16], &[2, 0, 2, 0]);
    }

    #[test]
    fn decimation_above_the_cap() {
        assert_eq!(step(0, 10), 1);
        assert_eq!(step(10, 10), 1);
        assert_eq!(step(11, 10), 2);
        assert_eq!(step(700_001, 300_000), 3);
        assert_eq!(step(5, 0), 5);
        let pts: PointBuf = (0..25).map(pt).collect();
        let b = encode(&FrameHeader::default(), &pts, 10);
        // step 3: points 0, 3, ..., 24.
        assert_eq!(b.len(), 40 + 9 * 16);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 9);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 25);
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 3);
        let last = &b[40 + 8 * 16..];
        assert_eq!(&last[0..4], &24.25f32.to_le_bytes());
        assert_eq!(last[12], 24);
    }
}
