//! Blocking subscriber for the lidarxdp publisher (wire format: [`crate::protocol`]).
//!
//! ```no_run
//! use lidarxdp::client::Subscriber;
//! let mut sub = Subscriber::connect("127.0.0.1:7510".parse().unwrap())?;
//! while let Some(frame) = sub.next_frame()? {
//!     println!("seq {} with {} points", frame.header().sequence, frame.points().len());
//! }
//! # Ok::<(), lidarxdp::client::ClientError>(())
//! ```

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::frame::{Frame, FrameHeader};
use crate::point::PointXYZIRCAEDT;
use crate::protocol::{FrameReader, Hello};

/// Error of a [`Subscriber`]: connection, protocol or I/O failure. (A clean close between two
/// frames is not an error: [`Subscriber::next_frame`] returns `Ok(None)`.)
pub type ClientError = crate::protocol::ReadError;

/// A connected subscriber. Reads the server's hello on connect, then one frame per
/// [`next_frame`](Subscriber::next_frame) call.
#[derive(Debug)]
pub struct Subscriber {
    reader: FrameReader<TcpStream>,
    hello: Hello,
    peer: SocketAddr,
    last_sequence: HashMap<u16, u64>,
    gaps: u64,
}

/// A frame received by a [`Subscriber`]: header plus points, stored in an aligned buffer that
/// the payload was read into directly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReceivedFrame {
    header: FrameHeader,
    points: Vec<PointXYZIRCAEDT>,
}

impl ReceivedFrame {
    /// Frame metadata.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The points, a view of the receive buffer (no copy).
    pub fn points(&self) -> &[PointXYZIRCAEDT] {
        &self.points
    }

    /// The raw payload bytes (`points().len() * 32`, little-endian `PointXYZIRCAEDT`).
    pub fn payload_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.points)
    }

    /// Converts into a [`Frame`] without copying the points.
    pub fn into_frame(self) -> Frame {
        Frame {
            header: self.header,
            points: self.points,
        }
    }
}

impl Subscriber {
    /// Connects to a publisher and reads its hello. (For a host name, resolve it with
    /// [`std::net::ToSocketAddrs`] and use [`from_stream`](Self::from_stream) or try each address.)
    pub fn connect(addr: SocketAddr) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr)?;
        Self::from_stream(stream)
    }

    /// Like [`connect`](Self::connect) with a connect timeout; the same timeout also bounds
    /// the wait for the hello (reset to "no timeout" afterwards).
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> Result<Self, ClientError> {
        let stream = TcpStream::connect_timeout(addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        let s = Self::from_stream(stream)?;
        s.set_read_timeout(None)?;
        Ok(s)
    }

    /// Uses an already connected stream (positioned before the hello).
    pub fn from_stream(stream: TcpStream) -> Result<Self, ClientError> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let mut reader = FrameReader::new(stream);
        let hello = reader.read_hello()?;
        Ok(Subscriber {
            reader,
            hello,
            peer,
            last_sequence: HashMap::new(),
            gaps: 0,
        })
    }

    /// The server's hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sets a read timeout for [`next_frame`](Self::next_frame) (`None` blocks forever). A
    /// timeout surfaces as [`ClientError::Io`] of kind `WouldBlock` or `TimedOut`; if it fires
    /// inside a message the connection is out of sync and should be dropped.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(timeout)
    }

    /// Sequence-number gaps seen so far (frames the server dropped for this subscriber, or
    /// never published), counted per sensor id and summed.
    pub fn sequence_gaps(&self) -> u64 {
        self.gaps
    }

    /// Blocks for the next frame; `Ok(None)` when the server closed the connection cleanly
    /// between two frames (e.g. on shutdown).
    pub fn next_frame(&mut self) -> Result<Option<ReceivedFrame>, ClientError> {
        let mut f = ReceivedFrame::default();
        Ok(self.next_frame_into(&mut f)?.then_some(f))
    }

    /// Blocks for the next frame, reusing `frame`'s point buffer (no allocation once the buffer
    /// is large enough). Returns `Ok(false)` at a clean end of stream.
    pub fn next_frame_into(&mut self, frame: &mut ReceivedFrame) -> Result<bool, ClientError> {
        let info = match self.reader.read_frame(&mut frame.points) {
            Ok(info) => info,
            Err(ClientError::Closed) => return Ok(false),
            Err(e) => return Err(e),
        };
        frame.header = info.header;
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
