//! Writing messages: each `encode_*` appends one message (prefix, fixed part, variable part,
//! padded to 8 bytes) to a buffer (`docs/protocol.md`, "Messages").
#![forbid(unsafe_code)]

use super::fields::FieldSet;
use super::parse::align8;
use super::{
    FLAG_NO_IMU, Hello, IMU_LEN, MAGIC, MAX_FIELD_NAME_LEN, MAX_FIELDS, MAX_REASON_LEN,
    MAX_SENSOR_NAME_LEN, MAX_SENSORS, MAX_SERVER_NAME_LEN, MSG_ERROR, MSG_FRAME, MSG_HELLO,
    MSG_IMU, MSG_SUBSCRIBE, MSG_SUBSCRIBED, Subscribe, VERSION,
};
use crate::frame::FrameHeader;
use crate::layout::PointType;

fn put_prefix(out: &mut Vec<u8>, msg_type: u16, header_len: usize) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&msg_type.to_le_bytes());
    out.extend_from_slice(&(header_len as u32).to_le_bytes());
}

/// `s` cut to at most `max` bytes at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

fn put_name(out: &mut Vec<u8>, s: &str, max: u8) {
    let s = truncate(s, max as usize);
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// Appends the encoded hello message to `out` (header only; a hello has no payload).
///
/// Names longer than their limits ([`MAX_SERVER_NAME_LEN`], [`MAX_SENSOR_NAME_LEN`]) are
/// truncated at a character boundary; sensors past [`MAX_SENSORS`] are left out; an empty
/// sensor name is sent as `?` (names are 1..=64 bytes on the wire).
pub fn encode_hello(hello: &Hello, out: &mut Vec<u8>) {
    let name = truncate(&hello.server_name, MAX_SERVER_NAME_LEN as usize);
    let sensors = &hello.sensors[..hello.sensors.len().min(MAX_SENSORS as usize)];
    let start = out.len();
    put_prefix(out, MSG_HELLO, 0);
    out.extend_from_slice(&0u16.to_le_bytes()); // 12: flags, reserved
    out.extend_from_slice(&(name.len() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&hello.max_subscribers.to_le_bytes()); // 16
    out.extend_from_slice(&hello.queue_depth.to_le_bytes()); // 20
    out.extend_from_slice(&hello.server_time_ns.to_le_bytes()); // 24
    out.extend_from_slice(&(sensors.len() as u16).to_le_bytes()); // 32
    out.extend_from_slice(&hello.min_version.to_le_bytes()); // 34
    out.extend_from_slice(&0u32.to_le_bytes()); // 36: reserved
    out.extend_from_slice(name.as_bytes()); // 40
    for s in sensors {
        out.extend_from_slice(&s.id.to_le_bytes());
        put_name(
            out,
            if s.name.is_empty() { "?" } else { &s.name },
            MAX_SENSOR_NAME_LEN,
        );
        put_name(out, &s.model, MAX_SENSOR_NAME_LEN);
    }
    finish(out, start);
}

/// Pads the message that starts at `start` to a multiple of 8 and writes its `header_len`.
fn finish(out: &mut Vec<u8>, start: usize) {
    let len = align8(out.len() - start);
    out.resize(start + len, 0);
    out[start + 8..start + 12].copy_from_slice(&(len as u32).to_le_bytes());
}

fn put_fields(out: &mut Vec<u8>, fields: FieldSet) {
    for f in fields.fields() {
        out.push(f.name.len() as u8);
        out.extend_from_slice(f.name.as_bytes());
        out.extend_from_slice(&f.offset.to_le_bytes());
        out.push(f.datatype);
        out.extend_from_slice(&f.count.to_le_bytes());
    }
}

/// Appends the header of a frame message for `point_count` points of layout `point_type`
/// (all fields) to `out`: [`FRAME_HEADER_LEN`](super::FRAME_HEADER_LEN) bytes for `autoware`. The `point_count *
/// point_step` payload bytes (`frame.points.as_bytes()`) are not written, so they can be sent
/// as a second iovec without copying.
pub fn encode_frame_header(
    header: &FrameHeader,
    point_type: PointType,
    point_count: u32,
    out: &mut Vec<u8>,
) {
    encode_frame_header_fields(header, FieldSet::all(point_type), point_count, out);
}

/// Appends the header of a frame message whose payload is `point_count` points packed as
/// `fields` ([`FieldSet::pack`]); returns the header length (a multiple of 8, 80..=232).
pub fn encode_frame_header_fields(
    header: &FrameHeader,
    fields: FieldSet,
    point_count: u32,
    out: &mut Vec<u8>,
) -> usize {
    let start = out.len();
    put_prefix(out, MSG_FRAME, 0);
    out.extend_from_slice(&header.sensor_id.to_le_bytes()); // 12
    out.extend_from_slice(&(fields.bits().count_ones() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&header.sequence.to_le_bytes()); // 16
    out.extend_from_slice(&header.start_ns.to_le_bytes()); // 24
    out.extend_from_slice(&header.host_ns.to_le_bytes()); // 32
    out.extend_from_slice(&header.packets_received.to_le_bytes()); // 40
    out.extend_from_slice(&header.packets_expected.to_le_bytes()); // 44
    out.extend_from_slice(&header.packets_malformed.to_le_bytes()); // 48
    out.extend_from_slice(&fields.point_step().to_le_bytes()); // 52
    out.extend_from_slice(&point_count.to_le_bytes()); // 56
    out.extend_from_slice(&header.frames_lost_before.to_le_bytes()); // 60
    out.push(header.clock as u8); // 64
    out.extend_from_slice(&[0; 3]); // 65: reserved, zero
    put_fields(out, fields); // 68
    finish(out, start);
    out.len() - start
}

/// Appends an encoded subscribe request to `out`.
///
/// Names are truncated to their limits; at most [`MAX_SENSORS`] sensors and [`MAX_FIELDS`]
/// fields are written. Note that a request longer than [`MAX_HEADER_LEN`](super::MAX_HEADER_LEN) is invalid (the
/// server rejects it): 256 names of 15 bytes still fit.
pub fn encode_subscribe(s: &Subscribe, out: &mut Vec<u8>) {
    let sensors = &s.sensors[..s.sensors.len().min(MAX_SENSORS as usize)];
    let fields = &s.fields[..s.fields.len().min(MAX_FIELDS as usize)];
    let start = out.len();
    put_prefix(out, MSG_SUBSCRIBE, 0);
    let flags = if s.no_imu { FLAG_NO_IMU } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes()); // 12: flags
    out.extend_from_slice(&(sensors.len() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&(fields.len() as u16).to_le_bytes()); // 16
    out.extend_from_slice(&[0u8; 6]); // 18: reserved
    for n in sensors {
        put_name(out, n, MAX_SENSOR_NAME_LEN);
    }
    for n in fields {
        put_name(out, n, MAX_FIELD_NAME_LEN);
    }
    finish(out, start);
}

/// Appends an encoded subscribe acknowledgement for `sensor_ids` and `fields` to `out`; `imu`:
/// IMU messages of those sensors follow.
pub fn encode_subscribed(sensor_ids: &[u16], fields: FieldSet, imu: bool, out: &mut Vec<u8>) {
    let ids = &sensor_ids[..sensor_ids.len().min(MAX_SENSORS as usize)];
    let start = out.len();
    put_prefix(out, MSG_SUBSCRIBED, 0);
    out.extend_from_slice(&(ids.len() as u16).to_le_bytes()); // 12
    out.extend_from_slice(&(fields.bits().count_ones() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&fields.point_step().to_le_bytes()); // 16
    out.extend_from_slice(&u32::from(imu).to_le_bytes()); // 20: flags
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes()); // 24
    }
    put_fields(out, fields);
    finish(out, start);
}

/// Appends an encoded IMU message ([`MSG_IMU`], [`IMU_LEN`] bytes) of sensor `sensor_id` to
/// `out` (docs/protocol.md, "IMU").
pub fn encode_imu(sensor_id: u16, r: &crate::msg::ImuReading, out: &mut Vec<u8>) {
    let start = out.len();
    put_prefix(out, MSG_IMU, IMU_LEN);
    out.extend_from_slice(&sensor_id.to_le_bytes()); // 12
    out.push(r.clock as u8); // 14
    out.push(0); // 15: reserved
    out.extend_from_slice(&r.stamp_ns.to_le_bytes()); // 16
    out.extend_from_slice(&r.host_ns.to_le_bytes()); // 24
    out.extend_from_slice(&r.sample.accel_ts_ns.to_le_bytes()); // 32
    out.extend_from_slice(&r.sample.gyro_ts_ns.to_le_bytes()); // 40
    for v in r.sample.accel_g.iter().chain(&r.sample.gyro_dps) {
        out.extend_from_slice(&v.to_le_bytes()); // 48, 52, 56; 60, 64, 68
    }
    out.extend_from_slice(&r.sample.sys_ts_ns.to_le_bytes()); // 72
    debug_assert_eq!(out.len() - start, IMU_LEN);
}

/// Appends an encoded error message to `out` (reason truncated to [`MAX_REASON_LEN`] bytes).
pub fn encode_error(code: u16, reason: &str, out: &mut Vec<u8>) {
    let reason = truncate(reason, MAX_REASON_LEN as usize);
    let start = out.len();
    put_prefix(out, MSG_ERROR, 0);
    out.extend_from_slice(&code.to_le_bytes()); // 12
    out.extend_from_slice(&(reason.len() as u16).to_le_bytes()); // 14
    out.extend_from_slice(reason.as_bytes()); // 16
    finish(out, start);
}
