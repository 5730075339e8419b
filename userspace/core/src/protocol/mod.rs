//! The lidarxdp TCP wire format, version 4 (byte-level reference with an example of every
//! message: `docs/protocol.md`).
//!
//! Every message, in either direction, starts with the same 12-byte prefix:
//!
//! | offset | size | field | value |
//! |---|---|---|---|
//! | 0 | 4 | magic | `b"LXDP"` |
//! | 4 | 2 | version | [`VERSION`] (4), u16 LE |
//! | 6 | 2 | message type | [`MSG_HELLO`] .. [`MSG_IMU`], u16 LE |
//! | 8 | 4 | header_len | length of this message's header including the prefix, u32 LE, a multiple of 8 |
//!
//! Server → subscriber: one [`Hello`] (server name, limits, the sensors by id and name), then
//! frame messages (a header of `header_len` bytes followed by `point_count * point_step` bytes
//! of points, packed in field-list order), IMU messages ([`ImuMessage`], header only) of the
//! subscribed sensors unless the subscriber opted out, an optional [`SubscribeAck`] after each
//! [`Subscribe`], and an [`ErrorMessage`] right before the server closes a connection for a
//! protocol violation. Subscriber → server: nothing (the default subscription: all sensors, all
//! fields) or [`Subscribe`] messages choosing sensors by name and point fields by name.
//! All integers and floats are little-endian.
//!
//! This module is sans-IO: it encodes into and parses from byte slices. The blocking reader
//! over a byte stream is `lidarxdp_client::FrameReader`. [`parse_header`] never panics, whatever the input; every error names the
//! offending field and its valid range.
#![forbid(unsafe_code)]

use thiserror::Error;

/// Magic bytes at offset 0 of every message.
pub const MAGIC: [u8; 4] = *b"LXDP";
/// Wire format version written and accepted by this module. Version 4 added the IMU message
/// ([`MSG_IMU`]) and the subscribe/subscribed `flags` bit 0 (IMU messages or not). Version 3
/// added `frames_lost_before` and `clock` to the frame header (offsets 60 and 64; the field list
/// moved from 60 to 68). Versions 1 (no handshake, no sensor names) to 3 are no longer spoken:
/// such a peer gets [`ProtocolError::UnsupportedVersion`].
pub const VERSION: u16 = 4;
/// Oldest version a server of this build accepts in a [`Subscribe`] (announced in the hello).
pub const MIN_VERSION: u16 = 4;
/// Message type of the hello (server → subscriber, first message of a connection).
pub const MSG_HELLO: u16 = 1;
/// Message type of a frame message (server → subscriber).
pub const MSG_FRAME: u16 = 2;
/// Message type of a subscribe request (subscriber → server).
pub const MSG_SUBSCRIBE: u16 = 3;
/// Message type of a subscribe acknowledgement (server → subscriber).
pub const MSG_SUBSCRIBED: u16 = 4;
/// Message type of an error report (server → subscriber, then the server closes).
pub const MSG_ERROR: u16 = 5;
/// Message type of an IMU reading (server → subscriber; version 4).
pub const MSG_IMU: u16 = 6;
/// Length of an IMU message (header only, no payload), bytes.
pub const IMU_LEN: usize = 80;
/// The flags word of [`Subscribe`] / [`SubscribeAck`], bit 0: no IMU messages (subscribe), IMU
/// messages follow (subscribed, inverted: bit set when they do).
pub const FLAG_NO_IMU: u16 = 1;
/// Length of the common message prefix (magic, version, type, header_len).
pub const PREFIX_LEN: usize = 12;
/// Length of the fixed part of a hello header (before the server name).
pub const HELLO_FIXED_LEN: usize = 40;
/// Length of the fixed part of a frame header (before the field list).
pub const FRAME_FIXED_LEN: usize = 68;
/// Length of the fixed part of a subscribe request (before the names).
pub const SUBSCRIBE_FIXED_LEN: usize = 24;
/// Length of the fixed part of a subscribe acknowledgement (before the sensor ids).
pub const SUBSCRIBED_FIXED_LEN: usize = 24;
/// Length of the fixed part of an error message (before the reason).
pub const ERROR_FIXED_LEN: usize = 16;
/// Largest accepted `header_len`, bytes.
pub const MAX_HEADER_LEN: usize = 4096;
/// Largest accepted `point_count` per frame (4 Mi points, 128 MiB at 32 bytes per point).
pub const MAX_POINT_COUNT: u32 = 1 << 22;
/// Largest accepted `point_step`, bytes.
pub const MAX_POINT_STEP: u32 = 1024;
/// Largest accepted payload (`point_count * point_step`), bytes (256 MiB).
pub const MAX_PAYLOAD_LEN: u64 = 1 << 28;
/// Largest accepted field count.
pub const MAX_FIELDS: u16 = 64;
/// Largest accepted field-name length, bytes.
pub const MAX_FIELD_NAME_LEN: u8 = 64;
/// Largest accepted server-name length in a hello, bytes.
pub const MAX_SERVER_NAME_LEN: u16 = 255;
/// Largest accepted sensor count in a hello, subscribe request or acknowledgement.
pub const MAX_SENSORS: u16 = 256;
/// Largest accepted sensor-name (and model-name) length, bytes.
pub const MAX_SENSOR_NAME_LEN: u8 = 64;
/// Largest accepted error-reason length, bytes.
pub const MAX_REASON_LEN: u16 = 1024;
/// `header_len` of a frame message carrying all of [`POINT_FIELDS`](crate::point::POINT_FIELDS) (what
/// [`encode_frame_header`] writes): 68 fixed bytes + 164 bytes of field list, a multiple of 8.
pub const FRAME_HEADER_LEN: usize = 232;

/// Error codes of an [`ErrorMessage`].
pub mod error_code {
    /// The subscriber's bytes are not a valid message (bad magic, lengths, UTF-8, ...).
    pub const MALFORMED: u16 = 1;
    /// The subscriber speaks a protocol version the server does not.
    pub const UNSUPPORTED_VERSION: u16 = 2;
    /// A [`super::Subscribe`] names a sensor the server does not have.
    pub const UNKNOWN_SENSOR: u16 = 3;
    /// A [`super::Subscribe`] names a point field that does not exist.
    pub const UNKNOWN_FIELD: u16 = 4;
    /// The subscriber sent a message type only servers send (hello, frame, ...).
    pub const UNEXPECTED_MESSAGE: u16 = 5;
    /// Reserved: a subscriber that stopped reading for longer than the server's stall timeout
    /// is disconnected without an error message (it would not read it).
    pub const STALLED: u16 = 6;
}

/// A protocol violation found while decoding. Every variant names the field and its valid range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// Bytes 0..4 are not `LXDP`.
    #[error("magic (offset 0) is {found:02x?}, expected \"LXDP\" (4c 58 44 50)")]
    BadMagic {
        /// The bytes found (only the ones received so far are meaningful).
        found: [u8; 4],
    },
    /// Unsupported version.
    #[error("version (offset 4) is {found}, this decoder supports only {supported}")]
    UnsupportedVersion {
        /// Version found.
        found: u16,
        /// Version this decoder supports.
        supported: u16,
    },
    /// Unknown message type.
    #[error("message type (offset 6) is {found}, valid range 1..=6")]
    UnknownMessageType {
        /// Type found.
        found: u16,
    },
    /// `header_len` out of range or not a multiple of 8.
    #[error(
        "header_len (offset 8) is {found}, expected a multiple of 8 in {min}..={max} for message type {msg_type}"
    )]
    HeaderLen {
        /// Message type.
        msg_type: u16,
        /// Value found.
        found: u32,
        /// Smallest valid value for this message.
        min: u32,
        /// Largest valid value.
        max: u32,
    },
    /// A scalar field is outside its valid range.
    #[error("{field} (offset {offset}) is {found}, valid range {min}..={max}")]
    OutOfRange {
        /// Field name as in `docs/protocol.md`.
        field: &'static str,
        /// Byte offset of the field in the message.
        offset: usize,
        /// Value found.
        found: u64,
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
    },
    /// `point_count * point_step` exceeds [`MAX_PAYLOAD_LEN`].
    #[error("payload length point_count*point_step = {found} bytes, valid range 0..={max}")]
    PayloadTooLarge {
        /// Payload length found.
        found: u64,
        /// Limit.
        max: u64,
    },
    /// A variable-length part runs past `header_len`.
    #[error("{what} at offset {offset} needs {needed} bytes but header_len is {header_len}")]
    HeaderOverrun {
        /// What was being read (e.g. `fields[3].name`).
        what: String,
        /// Offset where it starts.
        offset: usize,
        /// Bytes it needs from `offset`.
        needed: usize,
        /// Declared header length.
        header_len: usize,
    },
    /// A name is not UTF-8.
    #[error("{what} (offset {offset}) is not valid UTF-8")]
    BadUtf8 {
        /// Which name (`server_name`, `fields[i].name`, `sensors[i].name`, `reason`).
        what: String,
        /// Offset of the name.
        offset: usize,
    },
    /// A field-list entry is invalid.
    #[error("fields[{index}].{field} (offset {offset}) is {found}, valid range {min}..={max}")]
    BadField {
        /// Index in the field list.
        index: usize,
        /// Which member of the entry (`name_len`, `datatype`, `count`, `offset`).
        field: &'static str,
        /// Byte offset of the member in the message.
        offset: usize,
        /// Value found.
        found: u64,
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
    },
    /// A message type arrived where another was required (e.g. a frame before the hello).
    #[error("expected a {expected} message, got a {found} message")]
    UnexpectedMessage {
        /// Expected message kind.
        expected: &'static str,
        /// Kind received.
        found: &'static str,
    },
    /// The frame is valid but its point layout is not all of [`crate::point::PointXYZIRCAEDT`]
    /// ([`POINT_FIELDS`](crate::point::POINT_FIELDS), `point_step` 32), so it cannot be viewed as that struct.
    #[error("point layout is not PointXYZIRCAEDT: {detail}")]
    UnsupportedLayout {
        /// What differs.
        detail: String,
    },
}

impl ProtocolError {
    /// The [`error_code`] a server reports for this violation by a subscriber.
    pub fn code(&self) -> u16 {
        match self {
            ProtocolError::UnsupportedVersion { .. } => error_code::UNSUPPORTED_VERSION,
            ProtocolError::UnexpectedMessage { .. } => error_code::UNEXPECTED_MESSAGE,
            _ => error_code::MALFORMED,
        }
    }
}

/// One sensor as announced in a [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SensorEntry {
    /// The id carried by its frames ([`FrameHeader::sensor_id`](crate::header::FrameHeader::sensor_id)).
    pub id: u16,
    /// Name to subscribe by (UTF-8, 1..=64 bytes), e.g. `front` or `VLP16`.
    pub name: String,
    /// Model name (UTF-8, 0..=64 bytes), e.g. `VLP16`.
    pub model: String,
}

/// The server's hello, sent once right after a subscriber connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Server software name and version, e.g. `lidarxdp/0.1.0` (UTF-8, at most 255 bytes).
    pub server_name: String,
    /// Maximum number of simultaneous subscribers the server accepts.
    pub max_subscribers: u32,
    /// Per-subscriber queue depth in frames; older frames are dropped for a subscriber that
    /// falls further behind (visible as gaps in [`FrameHeader::sequence`](crate::header::FrameHeader::sequence)).
    pub queue_depth: u32,
    /// Server wall-clock time when the connection was accepted, ns since the Unix epoch.
    pub server_time_ns: u64,
    /// Oldest protocol version the server accepts in a [`Subscribe`] (the prefix carries the
    /// newest, which the server speaks).
    pub min_version: u16,
    /// The sensors the server publishes, at most [`MAX_SENSORS`].
    pub sensors: Vec<SensorEntry>,
}

/// A subscriber's choice of sensors and point fields (the [`MSG_SUBSCRIBE`] message).
///
/// Empty lists mean "all": the default subscription that a subscriber has before (or
/// without) sending one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscribe {
    /// Sensor names as announced in the hello (exact, case-sensitive); empty = all sensors.
    pub sensors: Vec<String>,
    /// Point field names from [`POINT_FIELDS`](crate::point::POINT_FIELDS) (any order, duplicates ignored); empty = all.
    pub fields: Vec<String>,
    /// No IMU messages ([`MSG_IMU`]) of the chosen sensors: `flags` bit 0 ([`FLAG_NO_IMU`]).
    /// `false` (the default, also without a subscribe) sends them.
    pub no_imu: bool,
}

/// The server's acknowledgement of a [`Subscribe`]: every frame message after it follows the
/// new subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscribeAck {
    /// Ids of the sensors now subscribed, ascending.
    pub sensor_ids: Vec<u16>,
    /// Bytes per point of the frames that follow.
    pub point_step: u32,
    /// Field list of the frames that follow.
    pub fields: Vec<WireField>,
    /// IMU messages of the subscribed sensors follow (`flags` bit 0 at offset 20).
    pub imu: bool,
}

/// An error reported by the server before it closes the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorMessage {
    /// [`error_code`] value.
    pub code: u16,
    /// Human-readable reason (UTF-8, at most [`MAX_REASON_LEN`] bytes).
    pub reason: String,
}

/// A decoded message header.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The hello (first message of a connection); no payload.
    Hello(Hello),
    /// A frame header; `point_count * point_step` payload bytes follow.
    Frame(FrameInfo),
    /// A subscribe request (subscriber → server); no payload.
    Subscribe(Subscribe),
    /// A subscribe acknowledgement; no payload.
    Subscribed(SubscribeAck),
    /// An error report; no payload; the server closes after it.
    Error(ErrorMessage),
    /// An IMU reading of a subscribed sensor (version 4); no payload.
    Imu(ImuMessage),
}

/// One IMU reading on the wire ([`MSG_IMU`], docs/protocol.md "IMU"): the sample as the
/// sensor sent it (g, °/s, its own time stamps), so no precision is lost; convert with
/// [`crate::msg::ImuSample::linear_acceleration`] (m/s²) and
/// [`crate::msg::ImuSample::angular_velocity`] (rad/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImuMessage {
    /// The sensor's id, as in the hello.
    pub sensor_id: u16,
    /// The reading, its stamp and the clock of that stamp.
    pub reading: crate::msg::ImuReading,
}

impl Message {
    /// Short name of the message kind (`hello`, `frame`, `subscribe`, `subscribed`, `error`,
    /// `imu`).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Frame(_) => "frame",
            Message::Subscribe(_) => "subscribe",
            Message::Subscribed(_) => "subscribed",
            Message::Error(_) => "error",
            Message::Imu(_) => "imu",
        }
    }
}

/// Result of [`parse_header`] on a possibly incomplete buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// The bytes so far are a valid prefix of a message header, but at least `needed` bytes
    /// (counted from the start of the message) are required to go on.
    Incomplete {
        /// Total bytes needed before calling again.
        needed: usize,
    },
    /// A complete header.
    Complete {
        /// The decoded header.
        message: Message,
        /// Header length in bytes (where the payload starts).
        header_len: usize,
        /// Payload bytes that follow the header (0 except for a frame).
        payload_len: usize,
    },
}

mod encode;
mod fields;
mod parse;

pub use encode::*;
pub use fields::*;
pub use parse::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameClock, FrameHeader};
    use crate::layout::PointType;
    use crate::point::PointXYZIRCAEDT;
    use parse::u32_at;
    const AW: PointType = PointType::Autoware;

    fn sample_header() -> FrameHeader {
        FrameHeader {
            sensor_id: 3,
            sequence: 0x0102_0304_0506_0708,
            start_ns: 1_700_000_000_123_456_789,
            host_ns: 1_700_000_000_223_456_789,
            packets_received: 75,
            packets_expected: 76,
            packets_malformed: 1,
            frames_lost_before: 0x0A0B_0C0D,
            clock: FrameClock::Host,
        }
    }

    fn points(n: usize) -> Vec<PointXYZIRCAEDT> {
        (0..n)
            .map(|i| PointXYZIRCAEDT {
                x: i as f32 * 0.5,
                y: -(i as f32),
                z: 1.25,
                intensity: (i % 256) as u8,
                return_type: 3,
                channel: (i % 16) as u16,
                azimuth: 0.01 * i as f32,
                elevation: -0.2,
                distance: 10.0 + i as f32,
                time_stamp: i as u32 * 55,
            })
            .collect()
    }

    fn frame_bytes(h: &FrameHeader, pts: &[PointXYZIRCAEDT]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_frame_header(h, AW, pts.len() as u32, &mut v);
        v.extend_from_slice(bytemuck::cast_slice(pts));
        v
    }

    fn hello() -> Hello {
        Hello {
            server_name: "lidarxdp/0.1.0".into(),
            max_subscribers: 16,
            queue_depth: 4,
            server_time_ns: 1_700_000_000_000_000_000,
            min_version: 3,
            sensors: vec![
                SensorEntry {
                    id: 0,
                    name: "front".into(),
                    model: "VLP16".into(),
                },
                SensorEntry {
                    id: 1,
                    name: "roof".into(),
                    model: "Pandar128E4X".into(),
                },
            ],
        }
    }

    #[test]
    fn frame_header_layout_is_stable() {
        let mut v = Vec::new();
        encode_frame_header(&sample_header(), AW, 2, &mut v);
        assert_eq!(v.len(), FRAME_HEADER_LEN);
        assert_eq!(&v[0..4], b"LXDP");
        assert_eq!(&v[4..12], &[4, 0, 2, 0, 232, 0, 0, 0]);
        assert_eq!(&v[12..16], &[3, 0, 10, 0]);
        assert_eq!(&v[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(u32_at(&v, 52), 32);
        assert_eq!(u32_at(&v, 56), 2);
        // First entry: "x", offset 0, float32, count 1.
        // frames_lost_before, clock (1 = host), 3 reserved zero bytes.
        assert_eq!(&v[60..68], &[0x0D, 0x0C, 0x0B, 0x0A, 1, 0, 0, 0]);
        assert_eq!(&v[68..78], &[1, b'x', 0, 0, 0, 0, 7, 1, 0, 0]);
        // Last entry ends exactly at 232.
        assert_eq!(
            &v[212..232],
            b"\x0atime_stamp\x1c\x00\x00\x00\x06\x01\x00\x00\x00"
        );
    }

    #[test]
    fn round_trip_frame_and_hello() {
        let h = sample_header();
        let pts = points(1000);
        let bytes = frame_bytes(&h, &pts);
        let Ok(Parsed::Complete {
            message: Message::Frame(info),
            header_len,
            payload_len,
        }) = parse_header(&bytes)
        else {
            panic!("not a complete frame");
        };
        assert_eq!(header_len, FRAME_HEADER_LEN);
        assert_eq!(payload_len, 32_000);
        assert_eq!(info.header, h);
        assert_eq!(info.point_count, 1000);
        info.check_layout().unwrap();
    }

    #[test]
    fn every_prefix_is_incomplete_not_error() {
        let bytes = frame_bytes(&sample_header(), &points(3));
        for n in 0..FRAME_HEADER_LEN {
            match parse_header(&bytes[..n]) {
                Ok(Parsed::Incomplete { needed }) => assert!(needed > n),
                other => panic!("prefix {n}: {other:?}"),
            }
        }
        let mut hb = Vec::new();
        encode_hello(&hello(), &mut hb);
        for n in 0..hb.len() {
            assert!(
                matches!(parse_header(&hb[..n]), Ok(Parsed::Incomplete { .. })),
                "hello prefix {n}"
            );
        }
    }

    #[test]
    fn garbage_is_rejected_with_named_fields() {
        let good = frame_bytes(&sample_header(), &points(1));
        let with = |off: usize, b: &[u8]| {
            let mut v = good.clone();
            v[off..off + b.len()].copy_from_slice(b);
            parse_header(&v)
        };
        assert_eq!(
            with(0, b"LXDQ"),
            Err(ProtocolError::BadMagic { found: *b"LXDQ" })
        );
        assert!(matches!(
            parse_header(b"GET / HTTP/1.1\r\n"),
            Err(ProtocolError::BadMagic { .. })
        ));
        assert!(matches!(
            parse_header(b"X"),
            Err(ProtocolError::BadMagic { .. })
        ));
        assert_eq!(
            with(4, &2u16.to_le_bytes()),
            Err(ProtocolError::UnsupportedVersion {
                found: 2,
                supported: 4
            })
        );
        assert_eq!(
            with(6, &9u16.to_le_bytes()),
            Err(ProtocolError::UnknownMessageType { found: 9 })
        );
        assert!(matches!(
            with(8, &233u32.to_le_bytes()),
            Err(ProtocolError::HeaderLen { found: 233, .. })
        ));
        assert!(matches!(
            with(8, &8u32.to_le_bytes()),
            Err(ProtocolError::HeaderLen { found: 8, .. })
        ));
        assert!(matches!(
            with(8, &u32::MAX.to_le_bytes()),
            Err(ProtocolError::HeaderLen { .. })
        ));
        let e = with(56, &u32::MAX.to_le_bytes()).unwrap_err();
        assert_eq!(
            e,
            ProtocolError::OutOfRange {
                field: "point_count",
                offset: 56,
                found: u32::MAX.into(),
                min: 0,
                max: MAX_POINT_COUNT.into()
            }
        );
        assert!(e.to_string().contains("point_count"), "{e}");
        assert!(e.to_string().contains("0..=4194304"), "{e}");
        assert!(matches!(
            with(52, &0u32.to_le_bytes()),
            Err(ProtocolError::OutOfRange {
                field: "point_step",
                ..
            })
        ));
        let mut v = good.clone();
        v[52..56].copy_from_slice(&1024u32.to_le_bytes());
        v[56..60].copy_from_slice(&MAX_POINT_COUNT.to_le_bytes());
        assert!(matches!(
            parse_header(&v),
            Err(ProtocolError::PayloadTooLarge {
                found: 0x1_0000_0000,
                ..
            })
        ));
        assert!(matches!(
            with(14, &0u16.to_le_bytes()),
            Err(ProtocolError::OutOfRange {
                field: "field_count",
                ..
            })
        ));
        assert!(matches!(
            with(14, &60u16.to_le_bytes()),
            Err(ProtocolError::HeaderOverrun { .. })
        ));
        assert!(matches!(
            with(64, &[2]),
            Err(ProtocolError::OutOfRange {
                field: "clock",
                offset: 64,
                found: 2,
                ..
            })
        ));
        assert!(matches!(
            with(74, &[9]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "datatype",
                ..
            })
        ));
        assert!(matches!(
            with(70, &[31, 0, 0, 0]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "offset",
                ..
            })
        ));
        assert!(matches!(
            with(68, &[0]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "name_len",
                ..
            })
        ));
        assert!(matches!(
            with(69, &[0xff]),
            Err(ProtocolError::BadUtf8 { .. })
        ));
    }

    fn example_frame() -> (FrameHeader, [PointXYZIRCAEDT; 2]) {
        let h = FrameHeader {
            sensor_id: 1,
            sequence: 42,
            start_ns: 1_700_000_000_100_000_000,
            host_ns: 1_700_000_000_100_250_000,
            packets_received: 75,
            packets_expected: 76,
            packets_malformed: 0,
            ..Default::default()
        };
        let pts = [
            PointXYZIRCAEDT {
                x: 1.0,
                y: 0.5,
                z: -0.25,
                intensity: 100,
                return_type: 3,
                channel: 7,
                azimuth: 0.0,
                elevation: -0.261_799_4,
                distance: 1.1456,
                time_stamp: 0,
            },
            PointXYZIRCAEDT {
                x: 10.0,
                y: -2.0,
                z: 0.75,
                intensity: 12,
                return_type: 1,
                channel: 15,
                azimuth: std::f32::consts::PI,
                elevation: 0.261_799_4,
                distance: 10.225,
                time_stamp: 2304,
            },
        ];
        (h, pts)
    }

    /// The hex examples in docs/protocol.md are what the encoders produce, in document order:
    /// hello, subscribe, subscribed, error, full frame, `x,y,z,intensity` frame.
    #[test]
    fn docs_examples_match_the_encoder() {
        let doc = include_str!("../../../../docs/protocol.md");
        let mut dumps: Vec<Vec<u8>> = Vec::new();
        let mut in_block = false;
        for line in doc.lines() {
            if line.starts_with("```") {
                in_block = !in_block;
                if in_block {
                    dumps.push(Vec::new());
                }
            } else if in_block
                && line.len() > 6
                && line.as_bytes()[..4].iter().all(u8::is_ascii_hexdigit)
                && line.as_bytes()[4] == b' '
            {
                let hex = &line[6..line.len().min(6 + 48)];
                let last = dumps.last_mut().unwrap();
                last.extend(
                    hex.split_whitespace()
                        .map(|b| u8::from_str_radix(b, 16).unwrap()),
                );
            }
        }
        dumps.retain(|d| !d.is_empty());
        assert_eq!(dumps.len(), 7, "hex blocks in docs/protocol.md");
        let mut v = Vec::new();
        encode_hello(&hello(), &mut v);
        assert_eq!(dumps[0], v, "hello");
        v.clear();
        let sub = Subscribe {
            sensors: vec!["roof".into()],
            fields: vec!["x".into(), "y".into(), "z".into(), "intensity".into()],
            no_imu: false,
        };
        encode_subscribe(&sub, &mut v);
        assert_eq!(dumps[1], v, "subscribe");
        let xyzi = FieldSet::from_names(AW, &sub.fields).unwrap();
        v.clear();
        encode_subscribed(&[1], xyzi, true, &mut v);
        assert_eq!(dumps[2], v, "subscribed");
        v.clear();
        encode_error(error_code::UNKNOWN_SENSOR, "unknown sensor 'rear'", &mut v);
        assert_eq!(dumps[3], v, "error");
        let (h, pts) = example_frame();
        assert_eq!(dumps[4], frame_bytes(&h, &pts), "full frame");
        v.clear();
        encode_frame_header_fields(&h, xyzi, 2, &mut v);
        xyzi.pack(bytemuck::cast_slice(&pts), &mut v);
        assert_eq!(dumps[5], v, "x,y,z,intensity frame");
        v.clear();
        encode_imu(1, &example_imu(), &mut v);
        assert_eq!(dumps[6], v, "imu");
    }

    /// The IMU example of docs/protocol.md: 1 g up, 0.5 °/s about z, on the sensor clock.
    fn example_imu() -> crate::msg::ImuReading {
        crate::msg::ImuReading {
            sample: crate::msg::ImuSample {
                sys_ts_ns: 1_700_000_000_000_000_000,
                accel_ts_ns: 1_700_000_000_099_000_000,
                gyro_ts_ns: 1_700_000_000_100_000_000,
                accel_g: [0.0, 0.0, 1.0],
                gyro_dps: [0.0, 0.0, 0.5],
            },
            stamp_ns: 1_700_000_000_100_000_000,
            host_ns: 1_700_000_000_100_250_000,
            clock: FrameClock::Sensor,
        }
    }

    #[test]
    fn imu_round_trips_and_bad_clock_is_refused() {
        let mut v = Vec::new();
        let mut r = example_imu();
        r.clock = FrameClock::Host;
        r.sample.accel_g = [-0.25, 0.125, f32::MIN_POSITIVE];
        encode_imu(7, &r, &mut v);
        assert_eq!(v.len(), IMU_LEN);
        match parse_header(&v) {
            Ok(Parsed::Complete {
                message: Message::Imu(m),
                header_len: IMU_LEN,
                payload_len: 0,
            }) => assert_eq!(
                m,
                ImuMessage {
                    sensor_id: 7,
                    reading: r
                }
            ),
            other => panic!("{other:?}"),
        }
        v[14] = 2;
        assert_eq!(
            parse_header(&v).unwrap_err().to_string(),
            "clock (offset 14) is 2, valid range 0..=1"
        );
        v[14] = 0;
        v[8] = 72;
        assert_eq!(
            parse_header(&v).unwrap_err().to_string(),
            "header_len (offset 8) is 72, expected a multiple of 8 in 80..=4096 for message type 6"
        );
    }

    #[test]
    fn client_messages_round_trip() {
        let sub = Subscribe {
            sensors: vec!["front".into(), "roof".into()],
            fields: vec!["z".into(), "x".into()],
            no_imu: true,
        };
        let mut v = Vec::new();
        encode_subscribe(&sub, &mut v);
        assert_eq!(v.len(), 40); // 24 + (1+5) + (1+4) + (1+1) + (1+1) = 39, padded
        match parse_header(&v) {
            Ok(Parsed::Complete {
                message: Message::Subscribe(s),
                header_len: 40,
                payload_len: 0,
            }) => assert_eq!(s, sub),
            other => panic!("{other:?}"),
        }
        let fs = FieldSet::from_names(AW, &sub.fields).unwrap();
        assert_eq!(fs.bits(), 0b101);
        assert_eq!(fs.point_step(), 8);
        v.clear();
        encode_subscribed(&[0, 1], fs, false, &mut v);
        match parse_header(&v) {
            Ok(Parsed::Complete {
                message: Message::Subscribed(a),
                ..
            }) => {
                assert!(!a.imu);
                assert_eq!(a.sensor_ids, vec![0, 1]);
                assert_eq!(a.point_step, 8);
                assert_eq!(a.fields.len(), 2);
                assert_eq!((a.fields[1].name.as_str(), a.fields[1].offset), ("z", 4));
            }
            other => panic!("{other:?}"),
        }
        v.clear();
        encode_error(error_code::MALFORMED, "bad", &mut v);
        assert_eq!(v.len(), 24);
        match parse_header(&v) {
            Ok(Parsed::Complete {
                message: Message::Error(e),
                ..
            }) => assert_eq!((e.code, e.reason.as_str()), (1, "bad")),
            other => panic!("{other:?}"),
        }
        for n in 0..v.len() {
            assert!(matches!(
                parse_header(&v[..n]),
                Ok(Parsed::Incomplete { .. })
            ));
        }
        assert_eq!(
            FieldSet::from_names(AW, &["x", "colour"]),
            Err(UnknownField {
                name: "colour".to_string(),
                point_type: AW,
                valid: "x, y, z, intensity, return_type, channel, azimuth, elevation, distance, \
                        time_stamp"
                    .to_string(),
            })
        );
        assert_eq!(FieldSet::from_names::<&str>(AW, &[]), Ok(FieldSet::all(AW)));
        // A field of another layout is unknown to this one, and named with the valid set.
        let e = FieldSet::from_names(PointType::Xyzi, &["ring"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown field 'ring' for point_type xyzi; valid: x, y, z, intensity"
        );
    }

    #[test]
    fn field_sets_pack_exact_bytes() {
        let pts = points(3);
        let bytes = bytemuck::cast_slice::<_, u8>(&pts);
        assert_eq!(FieldSet::all(AW).point_step(), 32);
        let mut all = Vec::new();
        FieldSet::all(AW).pack(bytes, &mut all);
        assert_eq!(all, bytes);
        let fs = FieldSet::from_names(AW, &["channel", "x", "time_stamp"]).unwrap();
        assert_eq!(fs.point_step(), 10);
        let mut v = Vec::new();
        fs.pack(bytes, &mut v);
        assert_eq!(v.len(), 30);
        // point 2: x = 1.0, channel = 2, time_stamp = 110.
        assert_eq!(&v[20..30], &[0, 0, 0x80, 0x3f, 2, 0, 110, 0, 0, 0]);
        let offs: Vec<u32> = fs.fields().map(|f| f.offset).collect();
        assert_eq!(offs, vec![0, 4, 6]);
        // A header for it parses back with the packed layout.
        let mut h = Vec::new();
        let n = encode_frame_header_fields(&sample_header(), fs, 3, &mut h);
        assert_eq!(n, 120); // 68 + 11 (x) + 17 (channel) + 20 (time_stamp) = 116, padded
        assert_eq!(h.len(), n);
        let Ok(Parsed::Complete {
            message: Message::Frame(info),
            payload_len: 30,
            ..
        }) = parse_header(&h)
        else {
            panic!()
        };
        assert!(info.check_layout().is_err());
        assert_eq!(info.point_step, 10);
    }

    #[test]
    fn pseudo_random_garbage_never_panics() {
        let good = frame_bytes(&sample_header(), &points(2));
        let mut hb = Vec::new();
        encode_hello(&hello(), &mut hb);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut sb = Vec::new();
        encode_subscribe(
            &Subscribe {
                sensors: vec!["front".into()],
                fields: vec!["x".into()],
                no_imu: true,
            },
            &mut sb,
        );
        encode_subscribed(&[3, 4], FieldSet::all(AW), true, &mut sb);
        encode_imu(3, &example_imu(), &mut sb);
        encode_error(1, "reason", &mut sb);
        for i in 0..300_000 {
            let base = match i % 3 {
                0 => &good,
                1 => &hb,
                _ => &sb,
            };
            let mut v = base.clone();
            let flips = 1 + rnd() % 4;
            for _ in 0..flips {
                let at = (rnd() as usize) % v.len();
                v[at] = rnd() as u8;
            }
            let cut = (rnd() as usize) % (v.len() + 1);
            let _ = parse_header(&v[..cut]);
        }
        for len in 0..300 {
            let v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            let _ = parse_header(&v);
        }
    }
}
