//! Parsing received messages: [`parse_header`] reads one message header, bounded by
//! [`super::MAX_HEADER_LEN`], and every length, count and offset is checked before it is used
//! (`docs/protocol.md`, "Messages").
#![forbid(unsafe_code)]

use super::fields::{FrameInfo, WireField, datatype_size};
use super::{
    ERROR_FIXED_LEN, ErrorMessage, FLAG_NO_IMU, FRAME_FIXED_LEN, HELLO_FIXED_LEN, Hello, IMU_LEN,
    ImuMessage, MAGIC, MAX_FIELD_NAME_LEN, MAX_FIELDS, MAX_HEADER_LEN, MAX_PAYLOAD_LEN,
    MAX_POINT_COUNT, MAX_POINT_STEP, MAX_REASON_LEN, MAX_SENSOR_NAME_LEN, MAX_SENSORS,
    MAX_SERVER_NAME_LEN, MSG_FRAME, MSG_HELLO, MSG_IMU, MSG_SUBSCRIBE, MSG_SUBSCRIBED, Message,
    PREFIX_LEN, Parsed, ProtocolError, SUBSCRIBE_FIXED_LEN, SUBSCRIBED_FIXED_LEN, SensorEntry,
    Subscribe, SubscribeAck, VERSION,
};
use crate::frame::{FrameClock, FrameHeader};

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
pub(super) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

pub(super) fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Smallest valid `header_len` per message type.
fn min_header_len(msg_type: u16) -> usize {
    match msg_type {
        MSG_HELLO => HELLO_FIXED_LEN,
        MSG_FRAME => align8(FRAME_FIXED_LEN + 11), // at least one one-letter field entry
        MSG_SUBSCRIBE => SUBSCRIBE_FIXED_LEN,
        MSG_SUBSCRIBED => align8(SUBSCRIBED_FIXED_LEN + 11),
        MSG_IMU => IMU_LEN,
        _ => ERROR_FIXED_LEN,
    }
}

/// Decodes the header of the message at the start of `buf`.
///
/// Returns [`Parsed::Incomplete`] while `buf` is a valid but too short prefix, so it can be
/// called on a growing buffer. Rejects bad bytes as early as they arrive (magic, version, type,
/// header_len are checked as soon as they are present). Never panics. Bytes between the end of
/// the defined fields and `header_len` are ignored (zero padding in version 4; room for
/// compatible additions).
///
/// # Errors
/// [`ProtocolError`] naming the first invalid field, its offset and valid range.
pub fn parse_header(buf: &[u8]) -> Result<Parsed, ProtocolError> {
    let n = buf.len().min(4);
    if buf[..n] != MAGIC[..n] {
        let mut found = [0u8; 4];
        found[..n].copy_from_slice(&buf[..n]);
        return Err(ProtocolError::BadMagic { found });
    }
    if buf.len() >= 6 {
        let version = u16_at(buf, 4);
        if version != VERSION {
            return Err(ProtocolError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
    }
    if buf.len() >= 8 {
        let t = u16_at(buf, 6);
        if !(MSG_HELLO..=MSG_IMU).contains(&t) {
            return Err(ProtocolError::UnknownMessageType { found: t });
        }
    }
    if buf.len() < PREFIX_LEN {
        return Ok(Parsed::Incomplete { needed: PREFIX_LEN });
    }
    let msg_type = u16_at(buf, 6);
    let header_len = u32_at(buf, 8);
    let min = min_header_len(msg_type) as u32;
    if header_len < min || header_len as usize > MAX_HEADER_LEN || !header_len.is_multiple_of(8) {
        return Err(ProtocolError::HeaderLen {
            msg_type,
            found: header_len,
            min,
            max: MAX_HEADER_LEN as u32,
        });
    }
    let header_len = header_len as usize;
    if buf.len() < header_len {
        return Ok(Parsed::Incomplete { needed: header_len });
    }
    let h = &buf[..header_len];
    let (message, payload_len) = match msg_type {
        MSG_HELLO => (Message::Hello(parse_hello(h)?), 0),
        MSG_FRAME => {
            let info = parse_frame(h)?;
            let len = info.payload_len();
            (Message::Frame(info), len)
        }
        MSG_SUBSCRIBE => (Message::Subscribe(parse_subscribe(h)?), 0),
        MSG_SUBSCRIBED => (Message::Subscribed(parse_subscribed(h)?), 0),
        MSG_IMU => (Message::Imu(parse_imu(h)?), 0),
        _ => (Message::Error(parse_error(h)?), 0),
    };
    Ok(Parsed::Complete {
        message,
        header_len,
        payload_len,
    })
}

/// Bounds-checked reader over a header (`h.len() == header_len`).
struct Cursor<'a> {
    h: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn overrun(&self, what: String, needed: usize) -> ProtocolError {
        ProtocolError::HeaderOverrun {
            what,
            offset: self.at,
            needed,
            header_len: self.h.len(),
        }
    }

    fn bytes(&mut self, n: usize, what: impl Fn() -> String) -> Result<&'a [u8], ProtocolError> {
        if self.at + n > self.h.len() {
            return Err(self.overrun(what(), n));
        }
        let s = &self.h[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    /// A `len u8` + UTF-8 name with `min..=max` bytes.
    fn name(
        &mut self,
        what: &str,
        field: &'static str,
        min: u8,
        max: u8,
    ) -> Result<String, ProtocolError> {
        let at = self.at;
        let len = self.bytes(1, || format!("{what}.name_len"))?[0];
        if len < min || len > max {
            return Err(ProtocolError::OutOfRange {
                field,
                offset: at,
                found: len.into(),
                min: min.into(),
                max: max.into(),
            });
        }
        let name_at = self.at;
        let b = self.bytes(len as usize, || format!("{what}.name"))?;
        utf8(b, what, name_at)
    }
}

fn utf8(b: &[u8], what: &str, offset: usize) -> Result<String, ProtocolError> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| ProtocolError::BadUtf8 {
            what: what.into(),
            offset,
        })
}

fn range(
    field: &'static str,
    offset: usize,
    found: u64,
    min: u64,
    max: u64,
) -> Result<(), ProtocolError> {
    if found < min || found > max {
        Err(ProtocolError::OutOfRange {
            field,
            offset,
            found,
            min,
            max,
        })
    } else {
        Ok(())
    }
}

fn parse_hello(h: &[u8]) -> Result<Hello, ProtocolError> {
    // h.len() == header_len >= HELLO_FIXED_LEN, checked by the caller.
    let name_len = u16_at(h, 14);
    range(
        "server_name_len",
        14,
        name_len.into(),
        0,
        MAX_SERVER_NAME_LEN.into(),
    )?;
    let sensor_count = u16_at(h, 32);
    range(
        "sensor_count",
        32,
        sensor_count.into(),
        0,
        MAX_SENSORS.into(),
    )?;
    let min_version = u16_at(h, 34);
    range("min_version", 34, min_version.into(), 1, VERSION.into())?;
    let mut c = Cursor {
        h,
        at: HELLO_FIXED_LEN,
    };
    let name = c.bytes(name_len as usize, || "server_name".into())?;
    let server_name = utf8(name, "server_name", HELLO_FIXED_LEN)?;
    let mut sensors = Vec::with_capacity(sensor_count as usize);
    for i in 0..sensor_count as usize {
        let id = c.bytes(2, || format!("sensors[{i}].id"))?;
        let id = u16::from_le_bytes([id[0], id[1]]);
        let name = c.name(
            &format!("sensors[{i}].name"),
            "sensor name_len",
            1,
            MAX_SENSOR_NAME_LEN,
        )?;
        let model = c.name(
            &format!("sensors[{i}].model"),
            "sensor model_len",
            0,
            MAX_SENSOR_NAME_LEN,
        )?;
        sensors.push(SensorEntry { id, name, model });
    }
    Ok(Hello {
        server_name,
        max_subscribers: u32_at(h, 16),
        queue_depth: u32_at(h, 20),
        server_time_ns: u64_at(h, 24),
        min_version,
        sensors,
    })
}

/// Parses `count` field-list entries starting at `at`, checked against `point_step`.
fn parse_fields(
    h: &[u8],
    at: usize,
    count: usize,
    point_step: u32,
) -> Result<Vec<WireField>, ProtocolError> {
    let mut fields = Vec::with_capacity(count);
    let mut o = at;
    for index in 0..count {
        let overrun = |what: &str, offset: usize, needed: usize| ProtocolError::HeaderOverrun {
            what: format!("fields[{index}].{what}"),
            offset,
            needed,
            header_len: h.len(),
        };
        if o + 1 > h.len() {
            return Err(overrun("name_len", o, 1));
        }
        let name_len = h[o];
        if name_len == 0 || name_len > MAX_FIELD_NAME_LEN {
            return Err(ProtocolError::BadField {
                index,
                field: "name_len",
                offset: o,
                found: name_len.into(),
                min: 1,
                max: MAX_FIELD_NAME_LEN.into(),
            });
        }
        let name_at = o + 1;
        let rest_at = name_at + name_len as usize;
        if rest_at + 9 > h.len() {
            return Err(overrun("entry", o, 10 + name_len as usize));
        }
        let name = utf8(
            &h[name_at..rest_at],
            &format!("fields[{index}].name"),
            name_at,
        )?;
        let offset = u32_at(h, rest_at);
        let datatype = h[rest_at + 4];
        let count = u32_at(h, rest_at + 5);
        let Some(size) = Some(datatype_size(datatype)).filter(|&n| n > 0) else {
            return Err(ProtocolError::BadField {
                index,
                field: "datatype",
                offset: rest_at + 4,
                found: datatype.into(),
                min: 1,
                max: 8,
            });
        };
        let max_count = u64::from(point_step / size);
        if count == 0 || u64::from(count) > max_count {
            return Err(ProtocolError::BadField {
                index,
                field: "count",
                offset: rest_at + 5,
                found: count.into(),
                min: 1,
                max: max_count,
            });
        }
        let max_offset = u64::from(point_step) - u64::from(size) * u64::from(count);
        if u64::from(offset) > max_offset {
            return Err(ProtocolError::BadField {
                index,
                field: "offset",
                offset: rest_at,
                found: offset.into(),
                min: 0,
                max: max_offset,
            });
        }
        fields.push(WireField {
            name,
            offset,
            datatype,
            count,
        });
        o = rest_at + 9;
    }
    Ok(fields)
}

fn parse_frame(h: &[u8]) -> Result<FrameInfo, ProtocolError> {
    // h.len() == header_len >= FRAME_FIXED_LEN, checked by the caller.
    let field_count = u16_at(h, 14);
    range("field_count", 14, field_count.into(), 1, MAX_FIELDS.into())?;
    let point_step = u32_at(h, 52);
    range(
        "point_step",
        52,
        point_step.into(),
        1,
        MAX_POINT_STEP.into(),
    )?;
    let point_count = u32_at(h, 56);
    range(
        "point_count",
        56,
        point_count.into(),
        0,
        MAX_POINT_COUNT.into(),
    )?;
    let payload = u64::from(point_count) * u64::from(point_step);
    if payload > MAX_PAYLOAD_LEN {
        return Err(ProtocolError::PayloadTooLarge {
            found: payload,
            max: MAX_PAYLOAD_LEN,
        });
    }
    let header = FrameHeader {
        sensor_id: u16_at(h, 12),
        sequence: u64_at(h, 16),
        start_ns: u64_at(h, 24),
        host_ns: u64_at(h, 32),
        packets_received: u32_at(h, 40),
        packets_expected: u32_at(h, 44),
        packets_malformed: u32_at(h, 48),
        frames_lost_before: u32_at(h, 60),
        clock: clock_at(h, 64)?,
    };
    let fields = parse_fields(h, FRAME_FIXED_LEN, field_count as usize, point_step)?;
    Ok(FrameInfo {
        header,
        point_count,
        point_step,
        fields,
    })
}

fn parse_subscribe(h: &[u8]) -> Result<Subscribe, ProtocolError> {
    let sensor_count = u16_at(h, 14);
    range(
        "sensor_count",
        14,
        sensor_count.into(),
        0,
        MAX_SENSORS.into(),
    )?;
    let field_count = u16_at(h, 16);
    range("field_count", 16, field_count.into(), 0, MAX_FIELDS.into())?;
    let mut c = Cursor {
        h,
        at: SUBSCRIBE_FIXED_LEN,
    };
    let mut s = Subscribe {
        no_imu: u16_at(h, 12) & FLAG_NO_IMU != 0,
        ..Subscribe::default()
    };
    for i in 0..sensor_count {
        s.sensors.push(c.name(
            &format!("sensors[{i}]"),
            "sensor name_len",
            1,
            MAX_SENSOR_NAME_LEN,
        )?);
    }
    for i in 0..field_count {
        s.fields.push(c.name(
            &format!("fields[{i}]"),
            "field name_len",
            1,
            MAX_FIELD_NAME_LEN,
        )?);
    }
    Ok(s)
}

fn parse_subscribed(h: &[u8]) -> Result<SubscribeAck, ProtocolError> {
    let sensor_count = u16_at(h, 12);
    range(
        "sensor_count",
        12,
        sensor_count.into(),
        0,
        MAX_SENSORS.into(),
    )?;
    let field_count = u16_at(h, 14);
    range("field_count", 14, field_count.into(), 1, MAX_FIELDS.into())?;
    let point_step = u32_at(h, 16);
    range(
        "point_step",
        16,
        point_step.into(),
        1,
        MAX_POINT_STEP.into(),
    )?;
    let mut c = Cursor {
        h,
        at: SUBSCRIBED_FIXED_LEN,
    };
    let mut sensor_ids = Vec::with_capacity(sensor_count as usize);
    for i in 0..sensor_count {
        let b = c.bytes(2, || format!("sensor_ids[{i}]"))?;
        sensor_ids.push(u16::from_le_bytes([b[0], b[1]]));
    }
    let fields = parse_fields(h, c.at, field_count as usize, point_step)?;
    Ok(SubscribeAck {
        sensor_ids,
        point_step,
        fields,
        imu: u32_at(h, 20) & u32::from(FLAG_NO_IMU) != 0,
    })
}

fn clock_at(h: &[u8], offset: usize) -> Result<FrameClock, ProtocolError> {
    match h[offset] {
        0 => Ok(FrameClock::Sensor),
        1 => Ok(FrameClock::Host),
        c => Err(ProtocolError::OutOfRange {
            field: "clock",
            offset,
            found: c.into(),
            min: 0,
            max: 1,
        }),
    }
}

fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_bits(u32_at(b, o))
}

fn parse_imu(h: &[u8]) -> Result<ImuMessage, ProtocolError> {
    // h.len() == header_len >= IMU_LEN, checked by the caller.
    let clock = clock_at(h, 14)?;
    let v3 = |o: usize| [f32_at(h, o), f32_at(h, o + 4), f32_at(h, o + 8)];
    Ok(ImuMessage {
        sensor_id: u16_at(h, 12),
        reading: crate::msg::ImuReading {
            sample: crate::msg::ImuSample {
                sys_ts_ns: u64_at(h, 72),
                accel_ts_ns: u64_at(h, 32),
                gyro_ts_ns: u64_at(h, 40),
                accel_g: v3(48),
                gyro_dps: v3(60),
            },
            stamp_ns: u64_at(h, 16),
            host_ns: u64_at(h, 24),
            clock,
        },
    })
}

fn parse_error(h: &[u8]) -> Result<ErrorMessage, ProtocolError> {
    let code = u16_at(h, 12);
    let len = u16_at(h, 14);
    range("reason_len", 14, len.into(), 0, MAX_REASON_LEN.into())?;
    let mut c = Cursor {
        h,
        at: ERROR_FIXED_LEN,
    };
    let reason = utf8(c.bytes(len as usize, || "reason".into())?, "reason", 16)?;
    Ok(ErrorMessage { code, reason })
}
