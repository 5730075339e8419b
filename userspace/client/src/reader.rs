//! The blocking reader of the lidarxdp wire format over any byte stream (e.g. a `TcpStream`):
//! framing, payload reads into 32-byte-aligned buffers, and the errors a subscriber sees. The
//! byte-level codec it drives is [`lidarxdp_core::protocol`] (sans-IO); the format is
//! `docs/protocol.md`.

use std::io::{self, Read};

use lidarxdp_core::point::{POINT_SIZE, PointXYZIRCAEDT};
use lidarxdp_core::protocol::{
    FRAME_HEADER_LEN, FrameInfo, Hello, Message, PREFIX_LEN, Parsed, ProtocolError, parse_header,
};
use thiserror::Error;

/// An error of the blocking [`FrameReader`] and the client.
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
    /// The server reported an error (and closes the connection).
    #[error("server error {code}: {reason}")]
    Server {
        /// [`error_code`](lidarxdp_core::protocol::error_code) value.
        code: u16,
        /// Human-readable reason.
        reason: String,
    },
    /// An I/O error (including read timeouts: `WouldBlock`/`TimedOut`).
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// Blocking message reader over a byte stream (e.g. a `TcpStream`).
///
/// Reads each header with at most two `read_exact`-style loops and each payload directly into
/// the caller's 32-byte-aligned buffer (no intermediate copy).
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

    /// Reads the next message. A frame's payload (any layout) is read into `storage` as raw
    /// bytes: `storage` is resized to `ceil(payload_len / 32)` elements and the payload fills
    /// its first `payload_len` bytes (for the full [`PointXYZIRCAEDT`] layout `storage` then
    /// holds exactly the points). Other messages leave `storage` untouched.
    ///
    /// # Errors
    /// [`ReadError::Closed`] at a clean end of stream between messages; `Truncated`,
    /// `Protocol` or `Io` otherwise. After any error other than an `Io` timeout *before any
    /// byte of the message was read*, the stream is out of sync and must be dropped.
    pub fn read_message(
        &mut self,
        storage: &mut Vec<PointXYZIRCAEDT>,
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
        if let Message::Frame(_) = &message {
            storage.clear();
            storage.resize(payload_len.div_ceil(POINT_SIZE), PointXYZIRCAEDT::default());
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(storage.as_mut_slice());
            if let Err(e) = read_full(&mut self.inner, &mut bytes[..payload_len]) {
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
    ///
    /// # Errors
    /// As [`read_message`](Self::read_message); an error message from the server becomes
    /// [`ReadError::Server`]; any other message [`ProtocolError::UnexpectedMessage`].
    pub fn read_hello(&mut self) -> Result<Hello, ReadError> {
        let mut none = Vec::new();
        match self.read_message(&mut none)? {
            Message::Hello(h) => Ok(h),
            Message::Error(e) => Err(ReadError::Server {
                code: e.code,
                reason: e.reason,
            }),
            m => Err(ProtocolError::UnexpectedMessage {
                expected: "hello",
                found: m.kind(),
            }
            .into()),
        }
    }

    /// Reads the next message and requires it to be a frame with the full
    /// [`PointXYZIRCAEDT`] layout (points into `points`).
    ///
    /// # Errors
    /// As [`read_hello`](Self::read_hello), plus [`ProtocolError::UnsupportedLayout`].
    pub fn read_frame(
        &mut self,
        points: &mut Vec<PointXYZIRCAEDT>,
    ) -> Result<FrameInfo, ReadError> {
        match self.read_message(points)? {
            Message::Frame(f) => {
                f.check_layout()?;
                Ok(f)
            }
            Message::Error(e) => Err(ReadError::Server {
                code: e.code,
                reason: e.reason,
            }),
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
    use lidarxdp_core::frame::{FrameClock, FrameHeader};
    use lidarxdp_core::protocol::{SensorEntry, encode_frame_header, encode_hello};

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
        encode_frame_header(
            h,
            lidarxdp_core::layout::PointType::Autoware,
            pts.len() as u32,
            &mut v,
        );
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
            sensors: vec![SensorEntry {
                id: 0,
                name: "front".into(),
                model: "VLP16".into(),
            }],
        }
    }

    #[test]
    fn reads_hello_frames_and_a_clean_close() {
        let h = sample_header();
        let pts = points(1000);
        let mut stream = Vec::new();
        encode_hello(&hello(), &mut stream);
        assert_eq!(stream.len() % 8, 0);
        stream.extend_from_slice(&frame_bytes(&h, &pts));
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
    fn layout_mismatch_is_detected_by_the_reader() {
        let mut v = frame_bytes(&sample_header(), &points(1));
        // The first field's name "x" becomes "q": parseable, but not our point layout.
        v[69] = b'q';
        let mut r = FrameReader::new(v.as_slice());
        assert!(matches!(
            r.read_frame(&mut Vec::new()),
            Err(ReadError::Protocol(ProtocolError::UnsupportedLayout { .. }))
        ));
    }

    #[test]
    fn pseudo_random_garbage_never_panics() {
        let good = frame_bytes(&sample_header(), &points(2));
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..100_000 {
            let mut v = good.clone();
            for _ in 0..1 + rnd() % 4 {
                let at = (rnd() as usize) % v.len();
                v[at] = rnd() as u8;
            }
            let cut = (rnd() as usize) % (v.len() + 1);
            let _ = FrameReader::new(&v[..cut]).read_message(&mut Vec::new());
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
}
