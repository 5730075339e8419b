//! Blocking subscriber for the lidarxdp publisher (wire format: [`lidarxdp_core::protocol`]).
//!
//! ```no_run
//! use lidarxdp_client::Subscriber;
//! use lidarxdp_core::protocol::Subscribe;
//! // Default subscription: every sensor, every field.
//! let mut sub = Subscriber::connect("127.0.0.1:7510".parse().unwrap())?;
//! while let Some(frame) = sub.next_frame()? {
//!     println!("seq {} with {} points", frame.header().sequence, frame.points().len());
//! }
//! // Only sensor "front", only x, y, z: 12-byte points, read through typed field views.
//! let want = Subscribe { sensors: vec!["front".into()], fields: vec!["x".into(), "y".into(), "z".into()], ..Default::default() };
//! let mut sub = Subscriber::connect_with("127.0.0.1:7510".parse().unwrap(), &want)?;
//! if let Some(frame) = sub.next_frame()? {
//!     let x = frame.field::<f32>("x").expect("subscribed");
//!     println!("first x = {:?}", x.get(0));
//! }
//! # Ok::<(), lidarxdp_client::ClientError>(())
//! ```
//!
//! IMU readings (protocol version 4, [`lidarxdp_core::protocol::MSG_IMU`]) that arrive
//! between frames are kept, up to [`IMU_KEPT`], for [`Subscriber::take_imu`]; a subscriber
//! that wants none subscribes with `no_imu`.
//!
//! The payload is read straight into a 32-byte-aligned buffer that the returned
//! [`ReceivedFrame`] owns; [`ReceivedFrame::points`] and [`ReceivedFrame::field`] are views of
//! it (no copy, no per-point decoding). [`Subscriber::next_frame_into`] reuses that buffer.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::{POINT_SIZE, PointXYZIRCAEDT, datatype};
use lidarxdp_core::protocol::{
    self, Hello, ImuMessage, Message, ProtocolError, Subscribe, SubscribeAck, WireField,
};

/// IMU readings a [`Subscriber`] keeps until [`Subscriber::take_imu`] (10 s of one Ouster's
/// 100 Hz); past it the oldest is dropped ([`Subscriber::imu_dropped`]).
pub const IMU_KEPT: usize = 1024;

/// An IMU reading received by a [`Subscriber`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReceivedImu {
    /// The message: sensor id, the sample (g, °/s, sensor time stamps), its stamp and clock.
    pub message: ImuMessage,
    /// Local receive time, ns since the Unix epoch (CLOCK_REALTIME).
    pub received_ns: u64,
}

use crate::reader::{FrameReader, ReadError};

/// Error of a [`Subscriber`]: connection, protocol or I/O failure, or an error reported by the
/// server ([`ClientError::Server`]). (A clean close between two frames is not an error:
/// [`Subscriber::next_frame`] returns `Ok(None)`.)
pub type ClientError = ReadError;

/// A connected subscriber. Reads the server's hello on connect, then one frame per
/// [`next_frame`](Subscriber::next_frame) call.
#[derive(Debug)]
pub struct Subscriber {
    reader: FrameReader<TcpStream>,
    hello: Hello,
    peer: SocketAddr,
    ack: Option<SubscribeAck>,
    last_sequence: HashMap<u16, u64>,
    gaps: u64,
    imu: VecDeque<ReceivedImu>,
    imu_dropped: u64,
}

/// A frame received by a [`Subscriber`]: header, layout and the payload, stored in an aligned
/// buffer that the payload was read into directly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReceivedFrame {
    header: FrameHeader,
    point_count: u32,
    point_step: u32,
    fields: Vec<WireField>,
    full: bool,
    storage: Vec<PointXYZIRCAEDT>,
}

/// A Rust type that a point field can be viewed as ([`ReceivedFrame::field`]).
pub trait FieldType: Copy + 'static {
    /// The [`datatype`] code of this type.
    const DATATYPE: u8;
    /// Decodes the little-endian bytes at the start of `b` (`b.len() >= size_of::<Self>()`).
    fn read(b: &[u8]) -> Self;
}

macro_rules! field_type {
    ($t:ty, $code:expr) => {
        impl FieldType for $t {
            const DATATYPE: u8 = $code;
            fn read(b: &[u8]) -> Self {
                let mut a = [0u8; size_of::<$t>()];
                a.copy_from_slice(&b[..size_of::<$t>()]);
                <$t>::from_le_bytes(a)
            }
        }
    };
}
field_type!(u8, datatype::UINT8);
field_type!(u16, datatype::UINT16);
field_type!(u32, datatype::UINT32);
field_type!(f32, datatype::FLOAT32);

/// A strided, typed view of one field of every point of a [`ReceivedFrame`] (no copy).
#[derive(Clone, Copy, Debug)]
pub struct FieldView<'a, T> {
    bytes: &'a [u8],
    offset: usize,
    step: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<'a, T: FieldType> FieldView<'a, T> {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame has no point.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The field of point `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let at = i * self.step + self.offset;
        self.bytes.get(at..at + size_of::<T>()).map(T::read)
    }

    /// The field of every point, in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + 'a {
        let v = *self;
        (0..v.len).filter_map(move |i| v.get(i))
    }
}

impl ReceivedFrame {
    /// Frame metadata.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The points as [`PointXYZIRCAEDT`], a view of the receive buffer (no copy). Empty when
    /// the subscription chose a subset of the fields (then use [`field`](Self::field)); see
    /// [`is_full_layout`](Self::is_full_layout).
    pub fn points(&self) -> &[PointXYZIRCAEDT] {
        if self.full {
            &self.storage[..self.point_count as usize]
        } else {
            &[]
        }
    }

    /// Whether the payload has the full 32-byte [`PointXYZIRCAEDT`] layout (the default).
    pub fn is_full_layout(&self) -> bool {
        self.full
    }

    /// The point layout of the payload when it is a whole layout
    /// ([`lidarxdp_core::layout::PointType::from_fields`]; `hesai` for the bytes `hesai` and
    /// `robosense` share), `None` for a subset of fields.
    pub fn point_type(&self) -> Option<lidarxdp_core::layout::PointType> {
        lidarxdp_core::layout::PointType::from_fields(
            self.point_step,
            self.fields
                .iter()
                .map(|f| (f.name.as_str(), f.offset, f.datatype, f.count)),
        )
    }

    /// Number of points.
    pub fn point_count(&self) -> usize {
        self.point_count as usize
    }

    /// Bytes per point on the wire.
    pub fn point_step(&self) -> usize {
        self.point_step as usize
    }

    /// The field list of the payload (PointCloud2 style).
    pub fn fields(&self) -> &[WireField] {
        &self.fields
    }

    /// The raw payload bytes (`point_count() * point_step()`, little-endian, packed as
    /// [`fields`](Self::fields) says).
    pub fn payload_bytes(&self) -> &[u8] {
        let b: &[u8] = bytemuck::cast_slice(&self.storage);
        &b[..self.point_count as usize * self.point_step as usize]
    }

    /// A typed view of field `name`, or `None` if the payload lacks that field or its datatype
    /// is not `T` (e.g. `field::<f32>("x")`, `field::<u16>("channel")`).
    pub fn field<T: FieldType>(&self, name: &str) -> Option<FieldView<'_, T>> {
        let f = self.fields.iter().find(|f| f.name == name)?;
        (f.datatype == T::DATATYPE).then(|| FieldView {
            bytes: self.payload_bytes(),
            offset: f.offset as usize,
            step: self.point_step as usize,
            len: self.point_count as usize,
            _t: PhantomData,
        })
    }

    /// Converts into a [`Frame`] without copying the points (empty points unless
    /// [`is_full_layout`](Self::is_full_layout)).
    pub fn into_frame(mut self) -> Frame {
        if self.full {
            self.storage.truncate(self.point_count as usize);
        } else {
            self.storage.clear();
        }
        Frame {
            header: self.header,
            points: self.storage.into(),
        }
    }
}

impl Subscriber {
    /// Connects to a publisher and reads its hello; the subscription is the default one (all
    /// sensors, all fields). (For a host name, resolve it with [`std::net::ToSocketAddrs`] and
    /// use [`from_stream`](Self::from_stream) or try each address.)
    ///
    /// # Errors
    /// Connection failure, or a first message that is not a valid hello.
    pub fn connect(addr: SocketAddr) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr)?;
        Self::from_stream(stream)
    }

    /// Connects and subscribes to `want` ([`subscribe`](Self::subscribe)).
    ///
    /// # Errors
    /// As [`connect`](Self::connect) and [`subscribe`](Self::subscribe).
    pub fn connect_with(addr: SocketAddr, want: &Subscribe) -> Result<Self, ClientError> {
        let mut s = Self::connect(addr)?;
        s.subscribe(want)?;
        Ok(s)
    }

    /// Like [`connect`](Self::connect) with a connect timeout; the same timeout also bounds
    /// the wait for the hello (reset to "no timeout" afterwards).
    ///
    /// # Errors
    /// As [`connect`](Self::connect), plus the timeout.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> Result<Self, ClientError> {
        let stream = TcpStream::connect_timeout(addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        let s = Self::from_stream(stream)?;
        s.set_read_timeout(None)?;
        Ok(s)
    }

    /// Uses an already connected stream (positioned before the hello).
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn from_stream(stream: TcpStream) -> Result<Self, ClientError> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let mut reader = FrameReader::new(stream);
        let hello = reader.read_hello()?;
        Ok(Subscriber {
            reader,
            hello,
            peer,
            ack: None,
            last_sequence: HashMap::new(),
            gaps: 0,
            imu: VecDeque::new(),
            imu_dropped: 0,
        })
    }

    /// Sends a subscribe request and waits for the server's acknowledgement, discarding the
    /// frames sent under the previous subscription meanwhile. Every frame returned afterwards
    /// follows `want`. Sequence-gap tracking restarts.
    ///
    /// # Errors
    /// [`ClientError::Server`] if the server rejects the request (unknown sensor or field;
    /// it then closes the connection), or any read error.
    pub fn subscribe(&mut self, want: &Subscribe) -> Result<SubscribeAck, ClientError> {
        let mut m = Vec::new();
        protocol::encode_subscribe(want, &mut m);
        self.reader.get_mut().write_all(&m)?;
        let mut scratch = Vec::new();
        loop {
            match self.reader.read_message(&mut scratch)? {
                Message::Subscribed(ack) => {
                    self.ack = Some(ack.clone());
                    self.last_sequence.clear();
                    return Ok(ack);
                }
                Message::Frame(_) | Message::Imu(_) => continue,
                Message::Error(e) => {
                    return Err(ClientError::Server {
                        code: e.code,
                        reason: e.reason,
                    });
                }
                m => {
                    return Err(ProtocolError::UnexpectedMessage {
                        expected: "subscribed",
                        found: m.kind(),
                    }
                    .into());
                }
            }
        }
    }

    /// The server's hello (its limits and the sensors it publishes, by id and name).
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The last subscription acknowledgement, `None` while on the default subscription.
    pub fn subscription(&self) -> Option<&SubscribeAck> {
        self.ack.as_ref()
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sets a read timeout for [`next_frame`](Self::next_frame) (`None` blocks forever). A
    /// timeout surfaces as [`ClientError::Io`] of kind `WouldBlock` or `TimedOut`; if it fires
    /// inside a message the connection is out of sync and should be dropped.
    ///
    /// # Errors
    /// The `setsockopt` error.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(timeout)
    }

    /// Waits up to `timeout` for bytes from the server (`MSG_PEEK` under a read timeout, so
    /// nothing is consumed and a timeout never cuts a message); `Ok(true)` when some arrived
    /// or the server closed (the next [`next_frame`](Self::next_frame) then does not wait for
    /// the first byte). For a caller that must stay responsive, e.g. to signals, between
    /// frames. The read timeout is cleared again before returning.
    ///
    /// # Errors
    /// The socket's error (`setsockopt`, `recv`).
    pub fn wait_for_data(&self, timeout: Duration) -> io::Result<bool> {
        let s = self.reader.get_ref();
        s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let r = s.peek(&mut [0u8; 1]);
        s.set_read_timeout(None)?;
        match r {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The IMU readings received since the last call, oldest first (at most [`IMU_KEPT`]).
    pub fn take_imu(&mut self) -> std::collections::vec_deque::Drain<'_, ReceivedImu> {
        self.imu.drain(..)
    }

    /// IMU readings dropped because more than [`IMU_KEPT`] waited for
    /// [`take_imu`](Self::take_imu).
    pub fn imu_dropped(&self) -> u64 {
        self.imu_dropped
    }

    fn keep_imu(&mut self, message: ImuMessage) {
        if self.imu.len() >= IMU_KEPT {
            self.imu.pop_front();
            self.imu_dropped += 1;
        }
        let received_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.imu.push_back(ReceivedImu {
            message,
            received_ns,
        });
    }

    /// Sequence-number gaps seen so far (frames the server dropped for this subscriber, or
    /// never published), counted per sensor id and summed.
    pub fn sequence_gaps(&self) -> u64 {
        self.gaps
    }

    /// Blocks for the next frame; `Ok(None)` when the server closed the connection cleanly
    /// between two frames (e.g. on shutdown).
    ///
    /// # Errors
    /// As [`next_frame_into`](Self::next_frame_into).
    pub fn next_frame(&mut self) -> Result<Option<ReceivedFrame>, ClientError> {
        let mut f = ReceivedFrame::default();
        Ok(self.next_frame_into(&mut f)?.then_some(f))
    }

    /// Blocks for the next frame, reusing `frame`'s buffer (no allocation once the buffer is
    /// large enough). Returns `Ok(false)` at a clean end of stream.
    ///
    /// # Errors
    /// [`ClientError::Server`] when the server reports an error (e.g. this subscriber stalled);
    /// truncation, protocol and I/O errors.
    pub fn next_frame_into(&mut self, frame: &mut ReceivedFrame) -> Result<bool, ClientError> {
        let info = loop {
            match self.reader.read_message(&mut frame.storage) {
                Ok(Message::Frame(info)) => break info,
                Ok(Message::Subscribed(ack)) => self.ack = Some(ack),
                Ok(Message::Imu(m)) => self.keep_imu(m),
                Ok(Message::Error(e)) => {
                    return Err(ClientError::Server {
                        code: e.code,
                        reason: e.reason,
                    });
                }
                Ok(m) => {
                    return Err(ProtocolError::UnexpectedMessage {
                        expected: "frame",
                        found: m.kind(),
                    }
                    .into());
                }
                Err(ClientError::Closed) => return Ok(false),
                Err(e) => return Err(e),
            }
        };
        frame.full = info.point_step as usize == POINT_SIZE && info.check_layout().is_ok();
        frame.header = info.header;
        frame.point_count = info.point_count;
        frame.point_step = info.point_step;
        frame.fields = info.fields;
        let h = &frame.header;
        if let Some(&seq) = self.last_sequence.get(&h.sensor_id)
            && h.sequence > seq.saturating_add(1)
        {
            self.gaps += h.sequence - seq - 1;
        }
        self.last_sequence.insert(h.sensor_id, h.sequence);
        Ok(true)
    }
}
