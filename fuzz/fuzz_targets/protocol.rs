//! The publisher/subscriber wire format: `parse_header` and, through forced valid prefixes,
//! every message parser (hello, frame, subscribe, subscribed, error, imu) on arbitrary bytes, and
//! walks over arbitrary streams of messages (format: [`lidarxdp_fuzz::shared::ProtocolMode`]).
//! The blocking reader over a stream (`lidarxdp_client::FrameReader`) is not fuzzed here: the
//! fuzz crate depends on `lidarxdp-core` alone; the client's unit tests feed it 100,000
//! mutated streams.
//! Never panics, and:
//! - `Incomplete { needed }` asks for more than it got, at most `MAX_HEADER_LEN`;
//! - a complete header fits the buffer, is a multiple of 8, at most `MAX_HEADER_LEN`, with a
//!   payload of at most `MAX_PAYLOAD_LEN`; each of its shorter prefixes is `Incomplete` (never an
//!   error), and bytes after it change nothing;
//! - a parsed message re-encoded with the library's encoder parses back to the same message
//!   (frames and acknowledgements whenever their field list is a `FieldSet`);
//! - a walk over a stream checks every one of its complete messages as above, and ends
//!   inside the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::protocol::{
    FieldSet, MAGIC, MAX_HEADER_LEN, MAX_PAYLOAD_LEN, MSG_FRAME, MSG_HELLO, MSG_IMU, MSG_SUBSCRIBE,
    MSG_SUBSCRIBED, Message, PREFIX_LEN, Parsed, VERSION, WireField, encode_error,
    encode_frame_header_fields, encode_hello, encode_imu, encode_subscribe, encode_subscribed,
    parse_header,
};
use lidarxdp_fuzz::shared::ProtocolMode;

/// `t`'s smallest valid `header_len` (as `parse_header` requires).
fn min_header_len(t: u16) -> usize {
    match t {
        MSG_HELLO => 40,
        MSG_FRAME => 80,
        MSG_SUBSCRIBE => 24,
        MSG_SUBSCRIBED => 40,
        MSG_IMU => 80,
        _ => 16,
    }
}

/// A valid prefix of type `t` followed by `body`, zero padded to its `header_len`.
fn with_prefix(t: u16, body: &[u8]) -> Vec<u8> {
    let len = (PREFIX_LEN + body.len())
        .div_ceil(8)
        .saturating_mul(8)
        .clamp(min_header_len(t), MAX_HEADER_LEN);
    let mut buf = Vec::with_capacity(len.max(PREFIX_LEN + body.len()));
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&t.to_le_bytes());
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    buf.extend_from_slice(body);
    if buf.len() < len {
        buf.resize(len, 0);
    }
    buf
}

/// The `FieldSet` of some point layout whose wire layout is exactly `fields` with
/// `point_step`, if any.
fn field_set(fields: &[WireField], point_step: u32) -> Option<FieldSet> {
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    lidarxdp_core::layout::POINT_TYPES
        .into_iter()
        .find_map(|t| {
            let set = FieldSet::from_names(t, &names).ok()?;
            let same = set.point_step() == point_step
                && set.fields().count() == fields.len()
                && set.fields().zip(fields).all(|(p, w)| w.matches(&p));
            same.then_some(set)
        })
}

/// `m` encoded by the library's encoder, when it has one for `m`'s content.
fn encode(m: &Message) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match m {
        Message::Hello(h) => encode_hello(h, &mut out),
        Message::Frame(f) => {
            let set = field_set(&f.fields, f.point_step)?;
            encode_frame_header_fields(&f.header, set, f.point_count, &mut out);
        }
        Message::Subscribe(s) => encode_subscribe(s, &mut out),
        Message::Subscribed(a) => {
            let set = field_set(&a.fields, a.point_step)?;
            encode_subscribed(&a.sensor_ids, set, a.imu, &mut out);
        }
        Message::Error(e) => encode_error(e.code, &e.reason, &mut out),
        Message::Imu(m) => encode_imu(m.sensor_id, &m.reading, &mut out),
    }
    Some(out)
}

/// Parses `buf` and checks every invariant of the module docs on the result.
fn check_header(buf: &[u8], roundtrip: bool) {
    match parse_header(buf) {
        Err(e) => {
            let _ = (e.code(), e.to_string());
        }
        Ok(Parsed::Incomplete { needed }) => {
            assert!(needed > buf.len() && needed <= MAX_HEADER_LEN, "{needed}");
        }
        Ok(Parsed::Complete {
            message,
            header_len,
            payload_len,
        }) => {
            assert!(header_len <= buf.len() && header_len <= MAX_HEADER_LEN);
            assert!(header_len.is_multiple_of(8), "{header_len}");
            assert!(payload_len as u64 <= MAX_PAYLOAD_LEN);
            let mut cuts = [0, 1, 4, 5, 6, 8, 11, 12, header_len / 2, header_len - 1];
            cuts.sort_unstable();
            for k in cuts {
                match parse_header(&buf[..k]) {
                    Ok(Parsed::Incomplete { needed }) => {
                        assert!(needed > k && needed <= header_len, "{k}: {needed}");
                    }
                    other => panic!("prefix of {k} of a {header_len}-byte header: {other:?}"),
                }
            }
            // Compared through `Debug`: an IMU message's floats may be NaN, which `==` never
            // equals (Debug tells every other f32 apart, -0.0 included).
            let exact = parse_header(&buf[..header_len]);
            assert_eq!(
                format!("{:?}", exact.as_ref().ok()),
                format!(
                    "{:?}",
                    Some(&Parsed::Complete {
                        message: message.clone(),
                        header_len,
                        payload_len
                    })
                ),
                "bytes after the header changed the result"
            );
            if roundtrip && let Some(bytes) = encode(&message) {
                match parse_header(&bytes) {
                    Ok(Parsed::Complete {
                        message: again,
                        payload_len: again_len,
                        ..
                    }) => {
                        assert_eq!(
                            format!("{again:?}"),
                            format!("{message:?}"),
                            "re-encoded message differs"
                        );
                        assert_eq!(again_len, payload_len);
                    }
                    other => panic!("re-encoded {message:?} does not parse: {other:?}"),
                }
            }
        }
    }
}

/// Walks `bytes` as a stream of messages, checking each complete header.
fn check_stream(bytes: &[u8]) {
    let mut at = 0;
    while let Some(rest) = bytes.get(at..) {
        check_header(rest, false);
        let Ok(Parsed::Complete {
            header_len,
            payload_len,
            ..
        }) = parse_header(rest)
        else {
            break;
        };
        let Some(end) = (at + header_len).checked_add(payload_len) else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    assert!(at <= bytes.len());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match ProtocolMode::from_byte(mode) {
        ProtocolMode::Raw => check_header(rest, true),
        ProtocolMode::Body(t) => check_header(&with_prefix(t, rest), true),
        ProtocolMode::Stream => check_stream(rest),
    }
});
