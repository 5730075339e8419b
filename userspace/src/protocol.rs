//! The lidarxdp TCP wire format, version 1 (byte-level reference: `docs/protocol.md`).
//!
//! A connection is a one-way byte stream from the server (the [`crate::publish`] publisher) to
//! the subscriber (e.g. [`crate::client::Subscriber`]). Every message starts with the same
//! 12-byte prefix:
//!
//! | offset | size | field | value |
//! |---|---|---|---|
//! | 0 | 4 | magic | `b"LXDP"` |
//! | 4 | 2 | version | [`VERSION`] (1), u16 LE |
//! | 6 | 2 | message type | [`MSG_HELLO`] or [`MSG_FRAME`], u16 LE |
//! | 8 | 4 | header_len | length of this message's header including the prefix, u32 LE, a multiple of 8 |
//!
//! The server sends one hello, then one frame message per published frame: a header of
//! `header_len` bytes followed by `point_count * point_step` bytes of points
//! ([`PointXYZIRCAEDT`], 32 bytes each). All integers and floats are little-endian.
//!
//! This module is sans-IO except for [`FrameReader`], a blocking reader over any
//! [`std::io::Read`]. [`parse_header`] never panics, whatever the input; every error names the
//! offending field and its valid range.

use std::io::{self, Read};

use thiserror::Error;

use crate::frame::FrameHeader;
use crate::point::{POINT_FIELDS, POINT_SIZE, PointField, PointXYZIRCAEDT};

/// Magic bytes at offset 0 of every message.
pub const MAGIC: [u8; 4] = *b"LXDP";
/// Wire format version written and accepted by this module.
pub const VERSION: u16 = 1;
/// Message type of the hello message (first message of a connection).
pub const MSG_HELLO: u16 = 1;
/// Message type of a frame message.
pub const MSG_FRAME: u16 = 2;
/// Length of the common message prefix (magic, version, type, header_len).
pub const PREFIX_LEN: usize = 12;
/// Length of the fixed part of a hello header (before the server name).
pub const HELLO_FIXED_LEN: usize = 32;
/// Length of the fixed part of a frame header (before the field list).
pub const FRAME_FIXED_LEN: usize = 60;
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
/// `header_len` of a frame message carrying [`POINT_FIELDS`] (what [`encode_frame_header`]
/// writes): 60 fixed bytes + 164 bytes of field list, already a multiple of 8.
pub const FRAME_HEADER_LEN: usize = 224;

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
    #[error("message type (offset 6) is {found}, expected 1 (hello) or 2 (frame)")]
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
    /// The field list or server name runs past `header_len`.
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
        /// Which name (`server_name`, `fields[i].name`).
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
    /// The frame is valid but its point layout is not [`PointXYZIRCAEDT`] ([`POINT_FIELDS`],
    /// `point_step` 32), so it cannot be viewed as such.
    #[error("point layout is not PointXYZIRCAEDT: {detail}")]
    UnsupportedLayout {
        /// What differs.
        detail: String,
    },
}

/// An error of the blocking [`FrameReader`].
#[derive(Debug, Error)]
pub enum ReadError {
    /// The peer closed the connection cleanly between two messages.
    #[error("connection closed by peer")]
    Closed,
    /// The stream ended inside a message.
    #[error("connection closed inside the {part}: got {got} of {needed} bytes")]
    Truncated {
        /// `header` or `payload`.
        part: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes required.
        needed: usize,
    },
    /// The bytes violate the protocol.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An I/O error (including read timeouts: `WouldBlock`/`TimedOut`).
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// The server's hello, sent once right after a subscriber connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Server software name and version, e.g. `lidarxdp/0.1.0` (UTF-8, at most 255 bytes).
    pub server_name: String,
    /// Maximum number of simultaneous subscribers the server accepts.
    pub max_subscribers: u32,
    /// Per-subscriber queue depth in frames; older frames are dropped for a subscriber that
    /// falls further behind (visible as gaps in [`FrameHeader::sequence`]).
    pub queue_depth: u32,
    /// Server wall-clock time when the connection was accepted, ns since the Unix epoch.
    pub server_time_ns: u64,
}

/// One entry of a decoded field list (owned counterpart of [`PointField`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireField {
    /// Field name.
    pub name: String,
    /// Byte offset inside a point.
    pub offset: u32,
    /// [`crate::point::datatype`] code.
    pub datatype: u8,
    /// Number of elements.
    pub count: u32,
}

impl WireField {
    /// Whether this entry equals a static [`PointField`].
    pub fn matches(&self, f: &PointField) -> bool {
        self.name == f.name
            && self.offset == f.offset
            && self.datatype == f.datatype
            && self.count == f.count
    }
}

/// The decoded header of a frame message.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameInfo {
    /// Frame metadata.
    pub header: FrameHeader,
    /// Number of points in the payload.
    pub point_count: u32,
    /// Bytes per point.
    pub point_step: u32,
    /// Field list describing a point.
    pub fields: Vec<WireField>,
}

impl FrameInfo {
    /// Whether the layout is exactly [`PointXYZIRCAEDT`] ([`POINT_FIELDS`], step 32).
    pub fn check_layout(&self) -> Result<(), ProtocolError> {
        if self.point_step as usize != POINT_SIZE {
            return Err(ProtocolError::UnsupportedLayout {
                detail: format!("point_step {} != {POINT_SIZE}", self.point_step),
            });
        }
        if self.fields.len() != POINT_FIELDS.len()
            || !self
                .fields
                .iter()
                .zip(POINT_FIELDS.iter())
                .all(|(a, b)| a.matches(b))
        {
            return Err(ProtocolError::UnsupportedLayout {
                detail: format!("field list {:?} differs from POINT_FIELDS", self.fields),
            });
        }
        Ok(())
    }
}

/// A decoded message header.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The hello (first message of a connection); no payload.
    Hello(Hello),
    /// A frame header; `point_count * point_step` payload bytes follow.
    Frame(FrameInfo),
}

impl Message {
    fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Frame(_) => "frame",
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
        /// Payload bytes that follow the header (0 for a hello).
        payload_len: usize,
    },
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn datatype_size(dt: u8) -> Option<u32> {
    Some(match dt {
        1 | 2 => 1,
        3 | 4 => 2,
        5..=7 => 4,
        8 => 8,
        _ => return None,
    })
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Decodes the header of the message at the start of `buf`.
///
/// Returns [`Parsed::Incomplete`] while `buf` is a valid but too short prefix, so it can be
/// called on a growing buffer. Rejects bad bytes as early as they arrive (magic, version, type,
/// header_len are checked as soon as they are present). Never panics. Bytes between the end of
/// the defined fields and `header_len` are ignored (zero padding in version 1; room for
/// compatible additions).
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
        if t != MSG_HELLO && t != MSG_FRAME {
            return Err(ProtocolError::UnknownMessageType { found: t });
        }
    }
    if buf.len() < PREFIX_LEN {
        return Ok(Parsed::Incomplete { needed: PREFIX_LEN });
    }
    let msg_type = u16_at(buf, 6);
    let header_len = u32_at(buf, 8);
    let min = match msg_type {
        MSG_HELLO => HELLO_FIXED_LEN,
        _ => align8(FRAME_FIXED_LEN + 11), // at least one one-letter field entry
    } as u32;
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
        _ => {
            let info = parse_frame(h)?;
            let len = info.point_count as usize * info.point_step as usize;
            (Message::Frame(info), len)
        }
    };
    Ok(Parsed::Complete {
        message,
        header_len,
        payload_len,
    })
}

fn parse_hello(h: &[u8]) -> Result<Hello, ProtocolError> {
    // h.len() == header_len >= HELLO_FIXED_LEN, checked by the caller.
    let name_len = u16_at(h, 14);
    if name_len > MAX_SERVER_NAME_LEN {
        return Err(ProtocolError::OutOfRange {
            field: "server_name_len",
            offset: 14,
            found: name_len.into(),
            min: 0,
            max: MAX_SERVER_NAME_LEN.into(),
        });
    }
    let end = HELLO_FIXED_LEN + name_len as usize;
    if end > h.len() {
        return Err(ProtocolError::HeaderOverrun {
            what: "server_name".into(),
            offset: HELLO_FIXED_LEN,
            needed: name_len as usize,
            header_len: h.len(),
        });
    }
    let server_name = std::str::from_utf8(&h[HELLO_FIXED_LEN..end])
        .map_err(|_| ProtocolError::BadUtf8 {
            what: "server_name".into(),
            offset: HELLO_FIXED_LEN,
        })?
        .to_owned();
    Ok(Hello {
        server_name,
        max_subscribers: u32_at(h, 16),
        queue_depth: u32_at(h, 20),
        server_time_ns: u64_at(h, 24),
    })
}

fn parse_frame(h: &[u8]) -> Result<FrameInfo, ProtocolError> {
    // h.len() == header_len >= FRAME_FIXED_LEN, checked by the caller.
    let range = |field, offset, found: u64, min: u64, max: u64| {
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
    };
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
    };
    let mut fields = Vec::with_capacity(field_count as usize);
    let mut o = FRAME_FIXED_LEN;
    for index in 0..field_count as usize {
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
        let name = std::str::from_utf8(&h[name_at..rest_at])
            .map_err(|_| ProtocolError::BadUtf8 {
                what: format!("fields[{index}].name"),
                offset: name_at,
            })?
            .to_owned();
        let offset = u32_at(h, rest_at);
        let datatype = h[rest_at + 4];
        let count = u32_at(h, rest_at + 5);
        let Some(size) = datatype_size(datatype) else {
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
    Ok(FrameInfo {
        header,
        point_count,
        point_step,
        fields,
    })
}

fn put_prefix(out: &mut Vec<u8>, msg_type: u16, header_len: usize) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&msg_type.to_le_bytes());
    out.extend_from_slice(&(header_len as u32).to_le_bytes());
}

/// Appends the encoded hello message to `out` (header only; a hello has no payload).
///
/// A server name longer than [`MAX_SERVER_NAME_LEN`] bytes is truncated at a character boundary.
pub fn encode_hello(hello: &Hello, out: &mut Vec<u8>) {
    let mut name = hello.server_name.as_str();
    while name.len() > MAX_SERVER_NAME_LEN as usize {
        let mut cut = MAX_SERVER_NAME_LEN as usize;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name = &name[..cut];
    }
    let header_len = align8(HELLO_FIXED_LEN + name.len());
    let start = out.len();
    put_prefix(out, MSG_HELLO, header_len);
    out.extend_from_slice(&0u16.to_le_bytes()); // 12: flags, reserved
    out.extend_from_slice(&(name.len() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&hello.max_subscribers.to_le_bytes()); // 16
    out.extend_from_slice(&hello.queue_depth.to_le_bytes()); // 20
    out.extend_from_slice(&hello.server_time_ns.to_le_bytes()); // 24
    out.extend_from_slice(name.as_bytes()); // 32
    out.resize(start + header_len, 0);
}

/// Appends the header of a frame message for `point_count` [`PointXYZIRCAEDT`] points to `out`:
/// exactly [`FRAME_HEADER_LEN`] bytes. The `point_count * 32` payload bytes
/// (`bytemuck::cast_slice(&frame.points)`) are not written, so they can be sent as a second
/// iovec without copying.
pub fn encode_frame_header(header: &FrameHeader, point_count: u32, out: &mut Vec<u8>) {
    let start = out.len();
    put_prefix(out, MSG_FRAME, FRAME_HEADER_LEN);
    out.extend_from_slice(&header.sensor_id.to_le_bytes()); // 12
    out.extend_from_slice(&(POINT_FIELDS.len() as u16).to_le_bytes()); // 14
    out.extend_from_slice(&header.sequence.to_le_bytes()); // 16
    out.extend_from_slice(&header.start_ns.to_le_bytes()); // 24
    out.extend_from_slice(&header.host_ns.to_le_bytes()); // 32
    out.extend_from_slice(&header.packets_received.to_le_bytes()); // 40
    out.extend_from_slice(&header.packets_expected.to_le_bytes()); // 44
    out.extend_from_slice(&header.packets_malformed.to_le_bytes()); // 48
    out.extend_from_slice(&(POINT_SIZE as u32).to_le_bytes()); // 52
    out.extend_from_slice(&point_count.to_le_bytes()); // 56
    for f in &POINT_FIELDS {
        out.push(f.name.len() as u8);
        out.extend_from_slice(f.name.as_bytes());
        out.extend_from_slice(&f.offset.to_le_bytes());
        out.push(f.datatype);
        out.extend_from_slice(&f.count.to_le_bytes());
    }
    debug_assert!(out.len() - start <= FRAME_HEADER_LEN);
    out.resize(start + FRAME_HEADER_LEN, 0);
}

/// Blocking message reader over a byte stream (e.g. a `TcpStream`).
///
/// Reads each header with at most two `read_exact` calls and each payload directly into the
/// caller's `Vec<PointXYZIRCAEDT>` (no intermediate copy). Wrap the stream in a
/// `std::io::BufReader` to save a syscall per header if that matters.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    /// Wraps a byte stream positioned at a message boundary.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            buf: Vec::with_capacity(FRAME_HEADER_LEN),
        }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The underlying stream, mutably (reading from it directly desynchronises the reader).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Unwraps the stream.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Reads the next message. For a frame, its points are read into `points` (resized to
    /// `point_count`; its capacity is reused); the layout must be [`PointXYZIRCAEDT`], else
    /// [`ProtocolError::UnsupportedLayout`]. A hello leaves `points` untouched.
    ///
    /// After an error other than [`ReadError::Io`] with kind `WouldBlock`/`TimedOut`/
    /// `Interrupted` *before any byte of the message was read*, the stream is out of sync and
    /// must be dropped.
    pub fn read_message(
        &mut self,
        points: &mut Vec<PointXYZIRCAEDT>,
    ) -> Result<Message, ReadError> {
        self.buf.clear();
        let mut needed = PREFIX_LEN;
        let (message, payload_len) = loop {
            let have = self.buf.len();
            self.buf.resize(needed, 0);
            if let Err(e) = read_full(&mut self.inner, &mut self.buf[have..]) {
                return Err(match e {
                    Short(0) if have == 0 => ReadError::Closed,
                    Short(got) => ReadError::Truncated {
                        part: "header",
                        got: have + got,
                        needed,
                    },
                    Failed(e) => ReadError::Io(e),
                });
            }
            match parse_header(&self.buf)? {
                Parsed::Incomplete { needed: n } => needed = n,
                Parsed::Complete {
                    message,
                    payload_len,
                    ..
                } => break (message, payload_len),
            }
        };
        if let Message::Frame(info) = &message {
            info.check_layout()?;
            points.clear();
            points.resize(info.point_count as usize, PointXYZIRCAEDT::default());
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(points.as_mut_slice());
            debug_assert_eq!(bytes.len(), payload_len);
            if let Err(e) = read_full(&mut self.inner, bytes) {
                return Err(match e {
                    Short(got) => ReadError::Truncated {
                        part: "payload",
                        got,
                        needed: payload_len,
                    },
                    Failed(e) => ReadError::Io(e),
                });
            }
        }
        Ok(message)
    }

    /// Reads the next message and requires it to be a hello.
    pub fn read_hello(&mut self) -> Result<Hello, ReadError> {
        let mut none = Vec::new();
        match self.read_message(&mut none)? {
            Message::Hello(h) => Ok(h),
            m => Err(ProtocolError::UnexpectedMessage {
                expected: "hello",
                found: m.kind(),
            }
            .into()),
        }
    }

    /// Reads the next message and requires it to be a frame (points into `points`).
    pub fn read_frame(
        &mut self,
        points: &mut Vec<PointXYZIRCAEDT>,
    ) -> Result<FrameInfo, ReadError> {
        match self.read_message(points)? {
            Message::Frame(f) => Ok(f),
            m => Err(ProtocolError::UnexpectedMessage {
                expected: "frame",
                found: m.kind(),
            }
            .into()),
        }
    }
}

enum FillError {
    /// EOF after this many bytes.
    Short(usize),
    Failed(io::Error),
}
use FillError::{Failed, Short};

fn read_full<R: Read>(r: &mut R, mut buf: &mut [u8]) -> Result<(), FillError> {
    let mut got = 0;
    while !buf.is_empty() {
        match r.read(buf) {
            Ok(0) => return Err(Short(got)),
            Ok(n) => {
                got += n;
                buf = &mut buf[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failed(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_header() -> FrameHeader {
        FrameHeader {
            sensor_id: 3,
            sequence: 0x0102_0304_0506_0708,
            start_ns: 1_700_000_000_123_456_789,
            host_ns: 1_700_000_000_223_456_789,
            packets_received: 75,
            packets_expected: 76,
            packets_malformed: 1,
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
        encode_frame_header(h, pts.len() as u32, &mut v);
        v.extend_from_slice(bytemuck::cast_slice(pts));
        v
    }

    fn hello() -> Hello {
        Hello {
            server_name: "lidarxdp/0.1.0".into(),
            max_subscribers: 16,
            queue_depth: 4,
            server_time_ns: 1_700_000_000_000_000_000,
        }
    }

    #[test]
    fn frame_header_layout_is_stable() {
        let mut v = Vec::new();
        encode_frame_header(&sample_header(), 2, &mut v);
        assert_eq!(v.len(), FRAME_HEADER_LEN);
        assert_eq!(&v[0..4], b"LXDP");
        assert_eq!(&v[4..12], &[1, 0, 2, 0, 224, 0, 0, 0]);
        assert_eq!(&v[12..16], &[3, 0, 10, 0]);
        assert_eq!(&v[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(u32_at(&v, 52), 32);
        assert_eq!(u32_at(&v, 56), 2);
        // First entry: "x", offset 0, float32, count 1.
        assert_eq!(&v[60..70], &[1, b'x', 0, 0, 0, 0, 7, 1, 0, 0]);
        // Last entry ends exactly at 224.
        assert_eq!(
            &v[204..224],
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

        let mut stream = Vec::new();
        encode_hello(&hello(), &mut stream);
        assert_eq!(stream.len() % 8, 0);
        stream.extend_from_slice(&bytes);
        stream.extend_from_slice(&frame_bytes(&h, &[]));
        let mut r = FrameReader::new(stream.as_slice());
        assert_eq!(r.read_hello().unwrap(), hello());
        let mut got = Vec::new();
        let f = r.read_frame(&mut got).unwrap();
        assert_eq!(f.header, h);
        assert_eq!(got, pts);
        let f = r.read_frame(&mut got).unwrap();
        assert_eq!(f.point_count, 0);
        assert!(got.is_empty());
        assert!(matches!(r.read_message(&mut got), Err(ReadError::Closed)));
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
    fn truncated_stream_is_an_error() {
        let bytes = frame_bytes(&sample_header(), &points(3));
        for n in [1, 11, 12, 100, FRAME_HEADER_LEN - 1] {
            let mut r = FrameReader::new(&bytes[..n]);
            match r.read_message(&mut Vec::new()) {
                Err(ReadError::Truncated {
                    part: "header",
                    got,
                    ..
                }) => assert_eq!(got, n),
                other => panic!("{n}: {other:?}"),
            }
        }
        let mut r = FrameReader::new(&bytes[..FRAME_HEADER_LEN + 40]);
        match r.read_message(&mut Vec::new()) {
            Err(ReadError::Truncated {
                part: "payload",
                got: 40,
                needed: 96,
            }) => {}
            other => panic!("{other:?}"),
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
                supported: 1
            })
        );
        assert_eq!(
            with(6, &9u16.to_le_bytes()),
            Err(ProtocolError::UnknownMessageType { found: 9 })
        );
        assert!(matches!(
            with(8, &225u32.to_le_bytes()),
            Err(ProtocolError::HeaderLen { found: 225, .. })
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
            with(66, &[9]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "datatype",
                ..
            })
        ));
        assert!(matches!(
            with(62, &[31, 0, 0, 0]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "offset",
                ..
            })
        ));
        assert!(matches!(
            with(60, &[0]),
            Err(ProtocolError::BadField {
                index: 0,
                field: "name_len",
                ..
            })
        ));
        assert!(matches!(
            with(61, &[0xff]),
            Err(ProtocolError::BadUtf8 { .. })
        ));
        // Layout mismatch is detected by the reader, not the parser.
        let mut v = good.clone();
        v[61] = b'q';
        let mut r = FrameReader::new(v.as_slice());
        assert!(matches!(
            r.read_message(&mut Vec::new()),
            Err(ReadError::Protocol(ProtocolError::UnsupportedLayout { .. }))
        ));
    }

    /// The hex examples in docs/protocol.md are what the encoder produces.
    #[test]
    fn docs_examples_match_the_encoder() {
        let doc = include_str!("../../docs/protocol.md");
        let mut dumps: Vec<Vec<u8>> = Vec::new();
        let mut in_block = false;
        for line in doc.lines() {
            if line.starts_with("```") {
                in_block = !in_block;
                if in_block {
                    dumps.push(Vec::new());
                }
            } else if in_block && line.len() > 6 && line.as_bytes()[4] == b' ' {
                let hex = &line[6..line.len().min(6 + 48)];
                let last = dumps.last_mut().unwrap();
                last.extend(
                    hex.split_whitespace()
                        .map(|b| u8::from_str_radix(b, 16).unwrap()),
                );
            }
        }
        let mut hello_bytes = Vec::new();
        encode_hello(&hello(), &mut hello_bytes);
        assert_eq!(dumps[0], hello_bytes);
        let h = FrameHeader {
            sensor_id: 1,
            sequence: 42,
            start_ns: 1_700_000_000_100_000_000,
            host_ns: 1_700_000_000_100_250_000,
            packets_received: 75,
            packets_expected: 76,
            packets_malformed: 0,
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
        assert_eq!(dumps[1], frame_bytes(&h, &pts));
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
        for i in 0..200_000 {
            let base = if i % 2 == 0 { &good } else { &hb };
            let mut v = base.clone();
            let flips = 1 + rnd() % 4;
            for _ in 0..flips {
                let at = (rnd() as usize) % v.len();
                v[at] = rnd() as u8;
            }
            let cut = (rnd() as usize) % (v.len() + 1);
            let _ = parse_header(&v[..cut]);
            let _ = FrameReader::new(&v[..cut]).read_message(&mut Vec::new());
        }
        for len in 0..300 {
            let v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            let _ = parse_header(&v);
        }
    }
}
