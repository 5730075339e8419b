//! TCP publisher: serves finished frames to any number of subscribers over the
//! [`crate::protocol`] wire format without ever stalling packet ingest.
//!
//! # Design
//!
//! ```text
//! decoder thread(s)                          publisher thread (one io_uring)
//!   ScanAssembler takes point Vecs from        multishot accept on the listener
//!     the LIFO BufferPool (no allocation)      multishot poll on the wake eventfd
//!   FrameSender::send(frame)                   per subscriber: SendMsg [hdr, payload, hdr, ...]
//!     ArrayQueue::push (never blocks)  ---->                   + Recv (handshake, hang-up)
//!     eventfd write (nonblocking)              last Arc dropped -> point Vec back to the pool
//! ```
//!
//! - **Decoder side never blocks, never locks**: [`FrameSender::send`] is one `ArrayQueue::push`
//!   plus one nonblocking `eventfd` write; a full queue drops the new frame and counts it.
//!   [`FrameSender::buffer_source`] gives the capture thread the [`BufferPool`] its assemblers
//!   take point buffers from ([`crate::scan::install_buffer_source`]).
//! - **No per-subscriber copy**: each frame's header is encoded once; the header and the point
//!   buffer are shared by all subscribers through one `Arc` and sent as iovecs. A subscriber
//!   that chose a subset of the point fields gets a packed copy — **one per distinct field set
//!   per frame**, shared by every subscriber with that set ([`PublisherCounters::packed_encodings`]);
//!   the default (all fields) is sent straight from the decoder's buffer.
//! - **One submission per wake-up**: the loop queues SQEs (sends for every subscriber that has
//!   data, receive re-arms) and submits them all in the single `io_uring_enter` that also waits
//!   for the next completions.
//! - **Batched writes**: a subscriber with several messages waiting gets up to [`MAX_BATCH`] of
//!   them (up to [`BATCH_BYTES`]) in one `IORING_OP_SENDMSG` (header and payload iovecs of each) — the iovecs a `writev`
//!   would take, plus `MSG_NOSIGNAL`, so a vanished peer yields `EPIPE`, not a process-killing
//!   `SIGPIPE` (the reason for SendMsg rather than Writev). Partial sends resume where they
//!   stopped. Sockets get `TCP_NODELAY` and an `SO_SNDBUF` that holds a whole frame
//!   ([`PublisherConfig::sndbuf`], grown to the largest frame seen, up to 64 MiB).
//! - **Bounded per-subscriber queues**: at most `queue_depth` frames wait behind the batch being
//!   sent (the high watermark); a new frame finding the queue full drops the *oldest* waiting
//!   frame for that subscriber alone ([`PublisherCounters::frames_dropped_queue_full`]). A
//!   subscriber whose send makes no progress for [`PublisherConfig::stall_timeout`] is
//!   disconnected ([`PublisherCounters::subscribers_stalled`]).
//! - **Buffers back to the pool**: when the last subscriber has finished writing a frame its
//!   message's last `Arc` is dropped and the point `Vec` returns to the capped LIFO
//!   [`BufferPool`]. So memory is bounded by the pool cap plus, per subscriber,
//!   `MAX_BATCH + queue_depth` shared frames.
//! - **Handshake**: a subscriber that sends nothing gets all sensors and all fields. A
//!   [`crate::protocol::Subscribe`] chooses sensors by name and fields by name; the server
//!   answers with a `subscribed` acknowledgement, after which every frame follows the new
//!   choice. Anything else (garbage, a wrong version, an unknown sensor or field) is logged
//!   with its reason, answered with an error message and the connection is closed.
//!
//! Requires Linux 5.19 (multishot accept, `IORING_FEAT_NODROP`); runs on 6.x.

mod pool;

pub use pool::{BufferPool, PoolCounters};

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;
use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::frame::Frame;
use crate::point::PointXYZIRCAEDT;
use crate::protocol::{
    self, FieldSet, Hello, MAX_POINT_COUNT, Message, Parsed, ProtocolError, SensorEntry, Subscribe,
    error_code,
};

/// Default listen address of the publisher.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7510,
));

/// Most messages sent to one subscriber by one `SENDMSG` (2 iovecs each).
pub const MAX_BATCH: usize = 4;

/// A batch takes further messages only while it holds less than this many bytes (1 MiB): small
/// messages are coalesced into one `SENDMSG`, while large frames go one by one, so frames that
/// wait stay droppable (drop-oldest keeps a lagging subscriber's data fresh).
pub const BATCH_BYTES: usize = 1 << 20;

/// Largest `SO_SNDBUF` the publisher asks for, bytes (64 MiB).
pub const MAX_SNDBUF: usize = 64 << 20;

/// Publisher settings.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// TCP address to listen on (default `127.0.0.1:7510`; port 0 picks a free port, see
    /// [`PublisherHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Maximum simultaneous subscribers; further connections are accepted and closed at once
    /// (default 16).
    pub max_subscribers: usize,
    /// Frames that may wait per subscriber behind the batch being sent: the high watermark past
    /// which the oldest waiting frame is dropped (default 3, minimum 1).
    pub queue_depth: usize,
    /// Fallback wake-up interval of the publisher thread, which notices frames pushed into the
    /// queue directly (not through a [`FrameSender`]) within this delay. `None` relies on the
    /// [`FrameSender`]'s eventfd only (stall checks then run every 100 ms). Default 10 ms.
    pub idle_poll: Option<Duration>,
    /// On [`PublisherHandle::shutdown`], how long subscribers may take to receive the frames
    /// already queued for them (including frames still in the input queue) before they are
    /// disconnected anyway. Default 2 s.
    pub linger: Duration,
    /// A subscriber with data to receive whose socket accepts no byte for this long is
    /// disconnected (default 5 s).
    pub stall_timeout: Duration,
    /// The sensors announced in the hello; subscribers choose among them by name. Default:
    /// none announced (subscribers can still take the default "all sensors" subscription).
    pub sensors: Vec<SensorEntry>,
    /// Most empty point buffers kept for reuse ([`BufferPool`] cap; default 8).
    pub pool_cap: usize,
    /// Minimum `SO_SNDBUF` of subscriber sockets, bytes (default 4 MiB); raised to the largest
    /// frame message seen, up to [`MAX_SNDBUF`]. `SO_SNDBUFFORCE` is tried first (root), else
    /// `SO_SNDBUF` (capped by `net.core.wmem_max`). 0 leaves the kernel's autotuning alone.
    pub sndbuf: usize,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            listen: DEFAULT_LISTEN,
            max_subscribers: 16,
            queue_depth: 3,
            idle_poll: Some(Duration::from_millis(10)),
            linger: Duration::from_secs(2),
            stall_timeout: Duration::from_secs(5),
            sensors: Vec::new(),
            pool_cap: 8,
            sndbuf: 4 << 20,
        }
    }
}

/// Snapshot of the publisher's counters (monotonic totals unless noted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublisherCounters {
    /// Currently connected subscribers (a gauge).
    pub subscribers: u64,
    /// Subscribers accepted since start.
    pub subscribers_accepted: u64,
    /// Connections closed at once because `max_subscribers` were connected.
    pub subscribers_rejected: u64,
    /// Subscribers removed (hang-up, send error, stall, protocol error, shutdown).
    pub subscribers_disconnected: u64,
    /// Subscribers disconnected because their send made no progress for the stall timeout.
    pub subscribers_stalled: u64,
    /// Subscribers disconnected for a protocol violation (garbage, unknown sensor/field, ...).
    pub protocol_errors: u64,
    /// Subscribe requests accepted.
    pub subscriptions: u64,
    /// Frames taken from the input queue.
    pub frames_in: u64,
    /// Frames completely sent, summed over subscribers.
    pub frames_sent: u64,
    /// Frames dropped from a subscriber's full queue, summed over subscribers.
    pub frames_dropped_queue_full: u64,
    /// Frames dropped by [`FrameSender`]s because the input queue was full.
    pub frames_dropped_input_full: u64,
    /// Frames dropped because they have more than [`MAX_POINT_COUNT`] points.
    pub frames_dropped_too_large: u64,
    /// Packed copies made for subscribers that chose a subset of the fields (one per distinct
    /// field set per frame, never one per subscriber).
    pub packed_encodings: u64,
    /// Frame messages alive now (queued or being sent to someone), a gauge.
    pub frames_alive: u64,
    /// Largest `frames_alive` seen.
    pub frames_alive_high_water: u64,
    /// Largest number of frames ever waiting in one subscriber's queue (`<= queue_depth`).
    pub queue_high_water: u64,
    /// Bytes sent (all messages), summed over subscribers.
    pub bytes_sent: u64,
    /// The point-buffer pool.
    pub pool: PoolCounters,
}

/// Counters of the [`FrameSender`]s of one publisher (shared by all clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderCounters {
    /// Frames accepted into the queue.
    pub sent: u64,
    /// Frames dropped because the queue was full.
    pub dropped_queue_full: u64,
}

/// Lock-free counters, written by one thread each (relaxed atomics: they are statistics, not
/// synchronisation).
#[derive(Default)]
struct Counters {
    subscribers: AtomicU64,
    subscribers_accepted: AtomicU64,
    subscribers_rejected: AtomicU64,
    subscribers_disconnected: AtomicU64,
    subscribers_stalled: AtomicU64,
    protocol_errors: AtomicU64,
    subscriptions: AtomicU64,
    frames_in: AtomicU64,
    frames_sent: AtomicU64,
    frames_dropped_queue_full: AtomicU64,
    frames_dropped_too_large: AtomicU64,
    packed_encodings: AtomicU64,
    frames_alive: AtomicU64,
    frames_alive_high_water: AtomicU64,
    queue_high_water: AtomicU64,
    bytes_sent: AtomicU64,
    sender_sent: AtomicU64,
    sender_dropped: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// State shared by the handle, the senders and the publisher thread.
struct Shared {
    counters: Counters,
    stop: AtomicBool,
    /// Nonblocking eventfd; a write wakes the publisher thread.
    wake: OwnedFd,
    /// Emptied point buffers for reuse by the decoder.
    pool: Arc<BufferPool>,
}

impl Shared {
    fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; the fd is nonblocking so
        // this never blocks (EAGAIN only if the counter would overflow, then a wake-up is
        // pending anyway).
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    fn drain_wake(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; nonblocking eventfd.
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut v).cast(), 8) };
    }
}

/// The decoder side's handle on the publisher: pushes frames without ever blocking.
///
/// Cheap to clone; all clones share counters.
#[derive(Clone)]
pub struct FrameSender {
    frames: Arc<ArrayQueue<Frame>>,
    shared: Arc<Shared>,
}

impl FrameSender {
    /// A sender for `publisher`. `frames` must be the queue the publisher was spawned with
    /// (otherwise its frames are never published); same as [`PublisherHandle::frame_sender`].
    pub fn new(frames: Arc<ArrayQueue<Frame>>, publisher: &PublisherHandle) -> Self {
        if !Arc::ptr_eq(&frames, &publisher.frames) {
            log::warn!(
                "FrameSender::new: queue differs from the publisher's; frames will not be published"
            );
        }
        FrameSender {
            frames,
            shared: publisher.shared.clone(),
        }
    }

    /// Queues a frame for publishing and wakes the publisher. Returns `false` (and counts the
    /// drop) if the queue is full; the frame's buffer then goes back to the pool.
    pub fn send(&self, frame: Frame) -> bool {
        match self.try_send(frame) {
            Ok(()) => true,
            Err(f) => {
                self.shared.pool.try_give(f.points);
                false
            }
        }
    }

    /// Like [`send`](Self::send) but hands a rejected frame back.
    ///
    /// # Errors
    /// The frame itself when the input queue is full (counted as dropped).
    pub fn try_send(&self, frame: Frame) -> Result<(), Frame> {
        match self.frames.push(frame) {
            Ok(()) => {
                add(&self.shared.counters.sender_sent, 1);
                self.shared.notify();
                Ok(())
            }
            Err(frame) => {
                add(&self.shared.counters.sender_dropped, 1);
                Err(frame)
            }
        }
    }

    /// An empty point buffer (with capacity) whose frame has been sent to every subscriber, if
    /// one is available: the most recently freed one (LIFO). Never blocks.
    pub fn recycled_buffer(&self) -> Option<Vec<PointXYZIRCAEDT>> {
        self.shared.pool.take()
    }

    /// The pool as a [`crate::scan::BufferSource`], for
    /// [`crate::scan::install_buffer_source`] on the decoder thread.
    pub fn buffer_source(&self) -> Arc<dyn crate::scan::BufferSource> {
        self.shared.pool.clone()
    }

    /// Counter snapshot of all clones.
    pub fn counters(&self) -> SenderCounters {
        SenderCounters {
            sent: self.shared.counters.sender_sent.load(Relaxed),
            dropped_queue_full: self.shared.counters.sender_dropped.load(Relaxed),
        }
    }
}

/// Namespace of [`Publisher::spawn`].
#[derive(Debug)]
pub struct Publisher;

impl Publisher {
    /// Binds the listener, sets up the io_uring and starts the publisher thread, which publishes
    /// every frame that appears in `frames` (push through [`PublisherHandle::frame_sender`] to
    /// wake it immediately).
    ///
    /// # Errors
    /// Bind failure, io_uring unavailable (e.g. `kernel.io_uring_disabled`), eventfd or thread
    /// creation failure.
    pub fn spawn(
        cfg: PublisherConfig,
        frames: Arc<ArrayQueue<Frame>>,
    ) -> io::Result<PublisherHandle> {
        let listener = TcpListener::bind(cfg.listen)?;
        let local_addr = listener.local_addr()?;
        let max_subscribers = cfg.max_subscribers.max(1);
        let entries = (max_subscribers * 3 + 16)
            .next_power_of_two()
            .clamp(64, 4096) as u32;
        let ring = IoUring::new(entries)?;
        // SAFETY: plain syscall; the returned fd (checked) is owned by the OwnedFd below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh, valid fd that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wake,
            pool: Arc::new(BufferPool::new(cfg.pool_cap)),
        });
        let (frames2, shared2) = (frames.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("lidarxdp-publish".into())
            .spawn(move || {
                // Built on the publisher thread: `Loop` holds raw pointers (msghdr) and is not Send.
                let mut state = Loop {
                    ring,
                    listener,
                    frames: frames2,
                    shared: shared2,
                    max_subscribers,
                    queue_depth: cfg.queue_depth.max(1),
                    idle_poll: cfg.idle_poll,
                    linger: cfg.linger,
                    stall_timeout: cfg.stall_timeout,
                    sndbuf: cfg.sndbuf.min(MAX_SNDBUF),
                    sensors: cfg.sensors,
                    stop_deadline: None,
                    subs: Vec::new(),
                    free: Vec::new(),
                    active: 0,
                    inflight: 0,
                    accept_armed: false,
                    accept_retry_at: None,
                    wake_armed: false,
                    stopping: false,
                    cqes: Vec::with_capacity(entries as usize * 2),
                    encodings: Vec::new(),
                    next_stall_check: Instant::now(),
                };
                let r = state.run();
                if let Err(e) = &r {
                    log::error!("publisher thread failed: {e}");
                }
                r
            })?;
        Ok(PublisherHandle {
            local_addr,
            shared,
            frames,
            thread: Some(thread),
        })
    }
}

/// Handle on a running publisher. Dropping it shuts the publisher down (like
/// [`shutdown`](Self::shutdown), ignoring errors).
pub struct PublisherHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    frames: Arc<ArrayQueue<Frame>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl std::fmt::Debug for PublisherHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl PublisherHandle {
    /// The address the publisher listens on (with the real port when configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A sender for the decoder side, bound to this publisher's queue and wake-up eventfd.
    pub fn frame_sender(&self) -> FrameSender {
        FrameSender {
            frames: self.frames.clone(),
            shared: self.shared.clone(),
        }
    }

    /// The point-buffer pool (shared with every [`FrameSender`]).
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.shared.pool
    }

    /// Counter snapshot.
    pub fn counters(&self) -> PublisherCounters {
        let c = &self.shared.counters;
        PublisherCounters {
            subscribers: c.subscribers.load(Relaxed),
            subscribers_accepted: c.subscribers_accepted.load(Relaxed),
            subscribers_rejected: c.subscribers_rejected.load(Relaxed),
            subscribers_disconnected: c.subscribers_disconnected.load(Relaxed),
            subscribers_stalled: c.subscribers_stalled.load(Relaxed),
            protocol_errors: c.protocol_errors.load(Relaxed),
            subscriptions: c.subscriptions.load(Relaxed),
            frames_in: c.frames_in.load(Relaxed),
            frames_sent: c.frames_sent.load(Relaxed),
            frames_dropped_queue_full: c.frames_dropped_queue_full.load(Relaxed),
            frames_dropped_input_full: c.sender_dropped.load(Relaxed),
            frames_dropped_too_large: c.frames_dropped_too_large.load(Relaxed),
            packed_encodings: c.packed_encodings.load(Relaxed),
            frames_alive: c.frames_alive.load(Relaxed),
            frames_alive_high_water: c.frames_alive_high_water.load(Relaxed),
            queue_high_water: c.queue_high_water.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
            pool: self.shared.pool.counters(),
        }
    }

    /// Stops the publisher and returns its final counters: stops accepting, publishes the
    /// frames still in the input queue, lets each subscriber receive what is queued for it for
    /// up to [`PublisherConfig::linger`], then closes every connection (clients see a clean
    /// end of stream between two messages), waits for all in-flight io_uring operations to
    /// finish and joins the thread.
    ///
    /// # Errors
    /// The publisher thread's error, if it failed.
    pub fn shutdown(mut self) -> io::Result<PublisherCounters> {
        self.stop()?;
        Ok(self.counters())
    }

    fn stop(&mut self) -> io::Result<()> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        self.shared.stop.store(true, Relaxed);
        self.shared.notify();
        match t.join() {
            Ok(r) => r,
            Err(_) => Err(io::Error::other("publisher thread panicked")),
        }
    }
}

impl Drop for PublisherHandle {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

// ---- publisher thread --------------------------------------------------------------------

/// Payload of a message.
enum Body {
    /// Control message (hello, acknowledgement, error): header only.
    None,
    /// All fields: the decoder's point buffer, sent as is.
    Points(Vec<PointXYZIRCAEDT>),
    /// A packed field subset ([`FieldSet::pack`]).
    Packed(Vec<u8>),
}

/// A message as sent: encoded header plus payload, shared by all subscribers through `Arc`.
/// Dropping the last `Arc` returns the point buffer to the pool.
struct Outgoing {
    header: Vec<u8>,
    body: Body,
    shared: Arc<Shared>,
}

impl Outgoing {
    fn frame(header: Vec<u8>, body: Body, shared: &Arc<Shared>) -> Arc<Outgoing> {
        let c = &shared.counters;
        let alive = c.frames_alive.fetch_add(1, Relaxed) + 1;
        c.frames_alive_high_water.fetch_max(alive, Relaxed);
        Arc::new(Outgoing {
            header,
            body,
            shared: shared.clone(),
        })
    }

    fn control(header: Vec<u8>, shared: &Arc<Shared>) -> Arc<Outgoing> {
        Arc::new(Outgoing {
            header,
            body: Body::None,
            shared: shared.clone(),
        })
    }

    fn is_frame(&self) -> bool {
        !matches!(self.body, Body::None)
    }

    fn payload(&self) -> &[u8] {
        match &self.body {
            Body::None => &[],
            Body::Points(p) => bytemuck::cast_slice(p),
            Body::Packed(b) => b,
        }
    }

    fn len(&self) -> usize {
        self.header.len() + self.payload().len()
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        if self.is_frame() {
            self.shared.counters.frames_alive.fetch_sub(1, Relaxed);
        }
        if let Body::Points(p) = &mut self.body {
            self.shared.pool.give(std::mem::take(p));
        }
    }
}

/// The `msghdr` and iovecs of a subscriber's in-flight send, boxed so their address is stable.
struct SendBuf {
    iov: [libc::iovec; 2 * MAX_BATCH],
    msg: libc::msghdr,
}

/// Receive buffer of a subscriber's in-flight `Recv`, boxed so its address is stable.
const RX_CHUNK: usize = 1024;

struct Sub {
    fd: OwnedFd,
    generation: u32,
    peer: String,
    /// Messages of the in-flight batch, in order; `written` bytes of them are sent.
    batch: Vec<Arc<Outgoing>>,
    written: usize,
    /// Control messages (acknowledgement, error) to send before the waiting frames.
    control: VecDeque<Arc<Outgoing>>,
    /// Frames waiting behind the batch (at most `queue_depth`).
    queue: VecDeque<Arc<Outgoing>>,
    buf: Box<SendBuf>,
    rx: Box<[u8; RX_CHUNK]>,
    /// Bytes of an incomplete client message.
    rx_acc: Vec<u8>,
    send_pending: bool,
    recv_pending: bool,
    closing: bool,
    /// An error message is queued: close once it is sent.
    close_after_send: bool,
    /// Last time the socket accepted bytes, its send queue shrank, or the batch started.
    last_progress: Instant,
    /// Bytes in the socket's send queue at the last stall check (`SIOCOUTQ`).
    outq: i32,
    /// Subscribed sensor ids; `None` = all.
    sensors: Option<Vec<u16>>,
    fields: FieldSet,
    dropped: u64,
    frames_sent: u64,
}

impl Sub {
    fn wants(&self, sensor_id: u16) -> bool {
        self.sensors
            .as_ref()
            .is_none_or(|s| s.binary_search(&sensor_id).is_ok())
    }
}

const K_ACCEPT: u64 = 1;
const K_WAKE: u64 = 2;
const K_SEND: u64 = 3;
const K_RECV: u64 = 4;
const K_CANCEL: u64 = 5;

fn ud(kind: u64, slot: usize, generation: u32) -> u64 {
    (kind << 56) | (u64::from(generation & 0xff_ffff) << 32) | slot as u64
}
fn ud_kind(u: u64) -> u64 {
    u >> 56
}
fn ud_slot(u: u64) -> usize {
    (u & 0xffff_ffff) as usize
}
fn ud_gen(u: u64) -> u32 {
    ((u >> 32) & 0xff_ffff) as u32
}

struct Loop {
    ring: IoUring,
    listener: TcpListener,
    frames: Arc<ArrayQueue<Frame>>,
    shared: Arc<Shared>,
    max_subscribers: usize,
    queue_depth: usize,
    idle_poll: Option<Duration>,
    linger: Duration,
    stall_timeout: Duration,
    /// Current SO_SNDBUF target of subscriber sockets.
    sndbuf: usize,
    sensors: Vec<SensorEntry>,
    /// Set when stopping: subscribers still sending after it are disconnected.
    stop_deadline: Option<Instant>,
    subs: Vec<Option<Sub>>,
    free: Vec<usize>,
    /// Subscribers not closing.
    active: usize,
    /// Submitted operations whose final CQE has not arrived yet.
    inflight: usize,
    accept_armed: bool,
    accept_retry_at: Option<Instant>,
    wake_armed: bool,
    stopping: bool,
    cqes: Vec<(u64, i32, u32)>,
    /// Per-publish scratch: the encoding of the current frame per field set.
    encodings: Vec<(FieldSet, Arc<Outgoing>)>,
    next_stall_check: Instant,
}

impl Drop for Loop {
    fn drop(&mut self) {
        if self.inflight > 0 {
            // Only reached if the loop failed or panicked with operations in flight. The kernel
            // may still read from the subscribers' send buffers until the ring is torn down
            // asynchronously, so leak them rather than free memory it may read.
            std::mem::forget(std::mem::take(&mut self.subs));
        }
    }
}

impl Loop {
    fn run(&mut self) -> io::Result<()> {
        self.arm_accept()?;
        self.arm_wake()?;
        let mut gen_counter: u32 = 0;
        loop {
            if !self.stopping && self.shared.stop.load(Relaxed) {
                self.begin_stop()?;
            }
            if self.stopping && self.inflight == 0 {
                break;
            }
            let now = Instant::now();
            if self.stop_deadline.is_some_and(|t| now >= t) {
                self.stop_deadline = None;
                log::warn!(
                    "publisher: linger time over, disconnecting subscribers still receiving"
                );
                for slot in 0..self.subs.len() {
                    self.close_sub(slot)?;
                }
            }
            if now >= self.next_stall_check {
                self.next_stall_check = now + Duration::from_millis(50);
                self.check_stalls(now)?;
            }
            if !self.stopping {
                self.drain_input()?;
                if !self.accept_armed && self.accept_retry_at.is_some_and(|t| now >= t) {
                    self.accept_retry_at = None;
                    self.arm_accept()?;
                }
            }
            self.wait()?;
            self.cqes.clear();
            self.cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            for i in 0..self.cqes.len() {
                let (u, res, flags) = self.cqes[i];
                match ud_kind(u) {
                    K_ACCEPT => self.on_accept(res, flags, &mut gen_counter)?,
                    K_WAKE => self.on_wake(res, flags)?,
                    K_SEND => self.on_send(ud_slot(u), ud_gen(u), res)?,
                    K_RECV => self.on_recv(ud_slot(u), ud_gen(u), res)?,
                    _ => self.inflight -= 1, // K_CANCEL: nothing to do
                }
            }
        }
        Ok(())
    }

    /// Submits every queued SQE (all subscribers' sends and re-arms of this wake-up) in one
    /// `io_uring_enter` that also waits for at least one CQE (or the idle timeout).
    fn wait(&mut self) -> io::Result<()> {
        let mut timeout = if self.stopping {
            Duration::from_millis(20)
        } else {
            self.idle_poll.unwrap_or(Duration::from_millis(100))
        };
        if let Some(t) = self.accept_retry_at {
            timeout = timeout.min(t.saturating_duration_since(Instant::now()));
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Queues an SQE, flushing the submission queue to the kernel only if it is full.
    ///
    /// # Safety
    /// Every buffer the entry points to must stay valid and unmoved until its final CQE has
    /// been reaped.
    unsafe fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: forwarded from this function's contract.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.inflight += 1;
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn arm_accept(&mut self) -> io::Result<()> {
        let e = opcode::AcceptMulti::new(types::Fd(self.listener.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(ud(K_ACCEPT, 0, 0));
        // SAFETY: multishot accept without a sockaddr buffer references no memory; the listener
        // fd outlives the ring's operations (the loop only exits when `inflight` is 0).
        unsafe { self.push(e)? };
        self.accept_armed = true;
        Ok(())
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(self.shared.wake.as_raw_fd()), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(ud(K_WAKE, 0, 0));
        // SAFETY: a poll references no memory; the eventfd is kept alive by `self.shared`.
        unsafe { self.push(e)? };
        self.wake_armed = true;
        Ok(())
    }

    fn cancel(&mut self, target: u64) -> io::Result<()> {
        let e = opcode::AsyncCancel::new(target)
            .build()
            .user_data(ud(K_CANCEL, 0, 0));
        // SAFETY: a cancel request references no memory.
        unsafe { self.push(e) }
    }

    fn begin_stop(&mut self) -> io::Result<()> {
        self.drain_input()?;
        self.stopping = true;
        self.stop_deadline = Some(Instant::now() + self.linger);
        if self.accept_armed {
            self.cancel(ud(K_ACCEPT, 0, 0))?;
        }
        if self.wake_armed {
            self.cancel(ud(K_WAKE, 0, 0))?;
        }
        for slot in 0..self.subs.len() {
            // Idle subscribers are closed now; busy ones when their queue is empty.
            if self.subs[slot].as_ref().is_some_and(|s| s.batch.is_empty()) {
                self.close_sub(slot)?;
            }
        }
        Ok(())
    }

    /// Disconnects subscribers whose peer has taken no byte for the stall timeout. Progress is
    /// a completed (partial) send or a shrinking kernel send queue (`SIOCOUTQ`): the kernel
    /// wakes a blocked send only once a third of the send buffer is free, which a slow but
    /// live reader of a large buffer may take longer than the timeout to free.
    fn check_stalls(&mut self, now: Instant) -> io::Result<()> {
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot].as_mut() else {
                continue;
            };
            if sub.closing || sub.batch.is_empty() {
                continue;
            }
            let q = send_queue_len(sub.fd.as_raw_fd());
            if q < sub.outq {
                sub.last_progress = now;
            }
            sub.outq = q;
            if now.duration_since(sub.last_progress) < self.stall_timeout {
                continue;
            }
            log::warn!(
                "publisher: subscriber {slot} ({}) stalled: took no byte for {:?}; disconnecting ({} frames sent, {} dropped)",
                sub.peer,
                self.stall_timeout,
                sub.frames_sent,
                sub.dropped
            );
            add(&self.shared.counters.subscribers_stalled, 1);
            self.close_sub(slot)?;
        }
        Ok(())
    }

    fn hello(&self) -> Vec<u8> {
        let mut header = Vec::with_capacity(128);
        protocol::encode_hello(
            &Hello {
                server_name: concat!("lidarxdp/", env!("CARGO_PKG_VERSION")).into(),
                max_subscribers: self.max_subscribers as u32,
                queue_depth: self.queue_depth as u32,
                server_time_ns: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                min_version: protocol::MIN_VERSION,
                sensors: self.sensors.clone(),
            },
            &mut header,
        );
        header
    }

    fn on_accept(&mut self, res: i32, flags: u32, gen_counter: &mut u32) -> io::Result<()> {
        if !cqueue::more(flags) {
            self.inflight -= 1;
            self.accept_armed = false;
        }
        if res < 0 {
            if !self.stopping && res != -libc::ECANCELED {
                log::warn!(
                    "publisher: accept failed: {}",
                    io::Error::from_raw_os_error(-res)
                );
            }
            if !self.accept_armed && !self.stopping {
                // Back off (e.g. EMFILE) instead of spinning on a failing accept.
                self.accept_retry_at = Some(Instant::now() + Duration::from_millis(100));
            }
            return Ok(());
        }
        if !self.accept_armed && !self.stopping {
            self.arm_accept()?;
        }
        // SAFETY: a successful accept returned a new fd that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(res) };
        let c = &self.shared.counters;
        if self.stopping || self.active >= self.max_subscribers {
            add(&c.subscribers_rejected, 1);
            log::info!(
                "publisher: rejecting subscriber (max_subscribers = {})",
                self.max_subscribers
            );
            return Ok(()); // closes fd
        }
        set_sockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
        if self.sndbuf > 0 {
            set_sndbuf(fd.as_raw_fd(), self.sndbuf);
        }
        let peer = peer_name(fd.as_raw_fd());
        *gen_counter = gen_counter.wrapping_add(1);
        let hello = Outgoing::control(self.hello(), &self.shared);
        let sub = Sub {
            fd,
            generation: *gen_counter & 0xff_ffff,
            peer,
            batch: Vec::with_capacity(MAX_BATCH),
            written: 0,
            control: VecDeque::from([hello]),
            queue: VecDeque::with_capacity(self.queue_depth + 1),
            // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths) and iovec.
            buf: Box::new(unsafe { std::mem::zeroed::<SendBuf>() }),
            rx: Box::new([0; RX_CHUNK]),
            rx_acc: Vec::new(),
            send_pending: false,
            recv_pending: false,
            closing: false,
            close_after_send: false,
            last_progress: Instant::now(),
            outq: 0,
            sensors: None,
            fields: FieldSet::ALL,
            dropped: 0,
            frames_sent: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.subs[s] = Some(sub);
                s
            }
            None => {
                self.subs.push(Some(sub));
                self.subs.len() - 1
            }
        };
        self.active += 1;
        add(&c.subscribers, 1);
        add(&c.subscribers_accepted, 1);
        log::info!(
            "publisher: subscriber {slot} connected ({} active)",
            self.active
        );
        self.start_batch(slot)?;
        self.arm_recv(slot)
    }

    fn arm_recv(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        let e = opcode::Recv::new(
            types::Fd(sub.fd.as_raw_fd()),
            sub.rx.as_mut_ptr(),
            RX_CHUNK as u32,
        )
        .build()
        .user_data(ud(K_RECV, slot, sub.generation));
        sub.recv_pending = true;
        // SAFETY: the entry points to `sub.rx`, boxed (stable address when `subs` reallocates)
        // and not freed while `recv_pending` is set (see `maybe_free`); the loop does not exit
        // while `inflight > 0`.
        unsafe { self.push(e) }
    }

    fn on_wake(&mut self, res: i32, flags: u32) -> io::Result<()> {
        if !cqueue::more(flags) {
            self.inflight -= 1;
            self.wake_armed = false;
            if !self.stopping {
                if res < 0 && res != -libc::ECANCELED {
                    log::warn!(
                        "publisher: wake poll failed: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                self.arm_wake()?;
            }
        }
        // Reset the eventfd before draining the queue: a frame pushed after the drain has begun
        // leaves the eventfd readable again, so it is never missed.
        self.shared.drain_wake();
        Ok(())
    }

    /// Takes every frame waiting in the input queue (a batch per wake-up).
    fn drain_input(&mut self) -> io::Result<()> {
        while let Some(frame) = self.frames.pop() {
            self.publish(frame)?;
        }
        Ok(())
    }

    /// The shared encoding of the current frame for `fields`, packed on first use.
    fn encoding(&mut self, frame: &Frame, fields: FieldSet) -> Arc<Outgoing> {
        if let Some((_, o)) = self.encodings.iter().find(|(f, _)| *f == fields) {
            return o.clone();
        }
        let n = frame.points.len() as u32;
        let mut header = Vec::with_capacity(protocol::FRAME_HEADER_LEN);
        protocol::encode_frame_header_fields(&frame.header, fields, n, &mut header);
        let mut packed = Vec::with_capacity(frame.points.len() * fields.point_step() as usize);
        fields.pack(&frame.points, &mut packed);
        add(&self.shared.counters.packed_encodings, 1);
        let o = Outgoing::frame(header, Body::Packed(packed), &self.shared);
        self.encodings.push((fields, o.clone()));
        o
    }

    fn publish(&mut self, frame: Frame) -> io::Result<()> {
        let c = &self.shared.counters;
        add(&c.frames_in, 1);
        if frame.points.len() > MAX_POINT_COUNT as usize {
            add(&c.frames_dropped_too_large, 1);
            log::warn!(
                "publisher: dropping frame seq {} with {} points (> {MAX_POINT_COUNT})",
                frame.header.sequence,
                frame.points.len()
            );
            self.shared.pool.give(frame.points);
            return Ok(());
        }
        let sensor = frame.header.sensor_id;
        // Subsets first (they read the points), then the zero-copy full encoding.
        self.encodings.clear();
        let mut wants_all = false;
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot].as_ref() else {
                continue;
            };
            if sub.closing || sub.close_after_send || !sub.wants(sensor) {
                continue;
            }
            if sub.fields.is_all() {
                wants_all = true;
            } else {
                let f = sub.fields;
                self.encoding(&frame, f);
            }
        }
        if wants_all {
            let msg_len = protocol::FRAME_HEADER_LEN + frame.points.len() * 32;
            if self.sndbuf > 0 && msg_len > self.sndbuf && self.sndbuf < MAX_SNDBUF {
                self.sndbuf = msg_len.next_power_of_two().min(MAX_SNDBUF);
                for s in self.subs.iter().flatten() {
                    set_sndbuf(s.fd.as_raw_fd(), self.sndbuf);
                }
            }
            let mut header = Vec::with_capacity(protocol::FRAME_HEADER_LEN);
            protocol::encode_frame_header(&frame.header, frame.points.len() as u32, &mut header);
            let o = Outgoing::frame(header, Body::Points(frame.points), &self.shared);
            self.encodings.push((FieldSet::ALL, o));
        } else {
            self.shared.pool.give(frame.points);
        }
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot].as_mut() else {
                continue;
            };
            if sub.closing || sub.close_after_send || !sub.wants(sensor) {
                continue;
            }
            let Some((_, out)) = self.encodings.iter().find(|(f, _)| *f == sub.fields) else {
                continue;
            };
            if sub.queue.len() >= self.queue_depth {
                // High watermark: drop the oldest waiting frame for this subscriber alone.
                sub.queue.pop_front();
                sub.dropped += 1;
                add(&self.shared.counters.frames_dropped_queue_full, 1);
            }
            sub.queue.push_back(out.clone());
            self.shared
                .counters
                .queue_high_water
                .fetch_max(sub.queue.len() as u64, Relaxed);
            if sub.batch.is_empty() {
                self.start_batch(slot)?;
            }
        }
        self.encodings.clear();
        Ok(())
    }

    /// If the subscriber is idle, moves up to [`MAX_BATCH`] waiting messages (control first)
    /// into its batch and submits the send.
    fn start_batch(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        if !sub.batch.is_empty() || sub.send_pending || sub.closing {
            return Ok(());
        }
        let mut bytes = 0;
        while sub.batch.len() < MAX_BATCH && bytes < BATCH_BYTES {
            match sub.control.pop_front().or_else(|| sub.queue.pop_front()) {
                Some(m) => {
                    bytes += m.len();
                    sub.batch.push(m);
                }
                None => break,
            }
        }
        if sub.batch.is_empty() {
            return Ok(());
        }
        sub.written = 0;
        sub.last_progress = Instant::now();
        self.submit_send(slot)
    }

    /// Submits a send of the unsent rest of the subscriber's batch.
    fn submit_send(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        let mut skip = sub.written;
        let mut n = 0;
        for m in &sub.batch {
            for part in [&m.header[..], m.payload()] {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                let rest = &part[skip..];
                skip = 0;
                sub.buf.iov[n] = libc::iovec {
                    iov_base: rest.as_ptr() as *mut libc::c_void,
                    iov_len: rest.len(),
                };
                n += 1;
            }
        }
        if n == 0 {
            return Ok(());
        }
        sub.buf.msg.msg_iov = sub.buf.iov.as_mut_ptr();
        sub.buf.msg.msg_iovlen = n;
        let e = opcode::SendMsg::new(types::Fd(sub.fd.as_raw_fd()), &raw const sub.buf.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(ud(K_SEND, slot, sub.generation));
        sub.send_pending = true;
        // SAFETY: the entry points to `sub.buf` (boxed: its address does not change when `subs`
        // reallocates) and through it to the headers and payloads of `sub.batch` (Arc'd,
        // never-mutated messages). While `send_pending` is set, the batch is not changed nor
        // the Sub freed (see `on_send` and `maybe_free`), and the loop does not exit (nor drop
        // `subs`) while `inflight > 0`; so all of it outlives the operation.
        unsafe { self.push(e) }
    }

    fn on_send(&mut self, slot: usize, generation: u32, res: i32) -> io::Result<()> {
        self.inflight -= 1;
        let Some(sub) = self.subs.get_mut(slot).and_then(|s| s.as_mut()) else {
            return Ok(());
        };
        if sub.generation != generation {
            return Ok(());
        }
        sub.send_pending = false;
        if sub.closing {
            self.maybe_free(slot);
            return Ok(());
        }
        if res == -libc::EINTR || res == -libc::EAGAIN {
            return self.submit_send(slot);
        }
        if res <= 0 {
            if res < 0 {
                log::info!(
                    "publisher: subscriber {slot} ({}): send failed: {}; disconnecting",
                    sub.peer,
                    io::Error::from_raw_os_error(-res)
                );
            } else {
                log::info!(
                    "publisher: subscriber {slot} ({}): sent 0 bytes, disconnecting",
                    sub.peer
                );
            }
            return self.close_sub(slot);
        }
        add(&self.shared.counters.bytes_sent, res as u64);
        sub.written += res as usize;
        sub.last_progress = Instant::now();
        // Retire the fully sent messages at the front of the batch.
        let mut done = 0;
        while let Some(m) = sub.batch.get(done) {
            if sub.written < m.len() {
                break;
            }
            sub.written -= m.len();
            if m.is_frame() {
                sub.frames_sent += 1;
                add(&self.shared.counters.frames_sent, 1);
            }
            done += 1;
        }
        sub.batch.drain(..done); // last Arc of a frame: its buffer goes back to the pool
        if !sub.batch.is_empty() {
            return self.submit_send(slot); // partial send: resume
        }
        if sub.close_after_send && sub.control.is_empty() {
            return self.close_sub(slot);
        }
        let more = !sub.control.is_empty() || !sub.queue.is_empty();
        if more {
            self.start_batch(slot)
        } else if self.stopping {
            self.close_sub(slot)
        } else {
            Ok(())
        }
    }

    fn on_recv(&mut self, slot: usize, generation: u32, res: i32) -> io::Result<()> {
        self.inflight -= 1;
        let Some(sub) = self.subs.get_mut(slot).and_then(|s| s.as_mut()) else {
            return Ok(());
        };
        if sub.generation != generation {
            return Ok(());
        }
        sub.recv_pending = false;
        if sub.closing {
            self.maybe_free(slot);
            return Ok(());
        }
        if res == -libc::EINTR || res == -libc::EAGAIN {
            return self.arm_recv(slot);
        }
        if res <= 0 {
            if res < 0 {
                log::info!(
                    "publisher: subscriber {slot} ({}): receive failed: {}; disconnecting",
                    sub.peer,
                    io::Error::from_raw_os_error(-res)
                );
            } else {
                log::info!("publisher: subscriber {slot} ({}) hung up", sub.peer);
            }
            return self.close_sub(slot);
        }
        if sub.close_after_send {
            return Ok(()); // already rejected: ignore further input, stop receiving
        }
        let n = res as usize;
        sub.rx_acc.extend_from_slice(&sub.rx[..n]);
        loop {
            let Some(sub) = self.subs[slot].as_mut() else {
                return Ok(());
            };
            match protocol::parse_header(&sub.rx_acc) {
                Ok(Parsed::Incomplete { .. }) => break,
                Ok(Parsed::Complete {
                    message,
                    header_len,
                    ..
                }) => {
                    sub.rx_acc.drain(..header_len);
                    match message {
                        Message::Subscribe(req) => {
                            if !self.subscribe(slot, req)? {
                                return Ok(());
                            }
                        }
                        other => {
                            let e = ProtocolError::UnexpectedMessage {
                                expected: "subscribe",
                                found: other.kind(),
                            };
                            return self.reject(slot, e.code(), &e.to_string());
                        }
                    }
                }
                Err(e) => return self.reject(slot, e.code(), &e.to_string()),
            }
        }
        self.arm_recv(slot)
    }

    /// Applies a subscribe request; `Ok(false)` if it was rejected.
    fn subscribe(&mut self, slot: usize, req: Subscribe) -> io::Result<bool> {
        let mut ids = Vec::with_capacity(req.sensors.len());
        for name in &req.sensors {
            match self.sensors.iter().find(|s| &s.name == name) {
                Some(s) => ids.push(s.id),
                None => {
                    let known: Vec<&str> = self.sensors.iter().map(|s| s.name.as_str()).collect();
                    let reason = format!(
                        "unknown sensor '{name}'; this server has: {}",
                        known.join(", ")
                    );
                    self.reject(slot, error_code::UNKNOWN_SENSOR, &reason)?;
                    return Ok(false);
                }
            }
        }
        let fields = match FieldSet::from_names(&req.fields) {
            Ok(f) => f,
            Err(name) => {
                let valid: Vec<&str> = crate::point::POINT_FIELDS.iter().map(|f| f.name).collect();
                let reason = format!("unknown field '{name}'; valid: {}", valid.join(", "));
                self.reject(slot, error_code::UNKNOWN_FIELD, &reason)?;
                return Ok(false);
            }
        };
        ids.sort_unstable();
        ids.dedup();
        let mut ack = Vec::with_capacity(256);
        let all_ids: Vec<u16> = self.sensors.iter().map(|s| s.id).collect();
        protocol::encode_subscribed(
            if ids.is_empty() { &all_ids } else { &ids },
            fields,
            &mut ack,
        );
        let ack = Outgoing::control(ack, &self.shared);
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(false);
        };
        log::info!(
            "publisher: subscriber {slot} ({}) subscribed to sensors {:?}, fields {:?}",
            sub.peer,
            if req.sensors.is_empty() {
                vec!["*".to_string()]
            } else {
                req.sensors.clone()
            },
            if req.fields.is_empty() {
                vec!["*".to_string()]
            } else {
                req.fields.clone()
            }
        );
        sub.sensors = (!ids.is_empty()).then_some(ids);
        sub.fields = fields;
        // Frames already waiting follow the old choice: drop them; the acknowledgement marks
        // where the new choice starts.
        sub.queue.clear();
        sub.control.push_back(ack);
        add(&self.shared.counters.subscriptions, 1);
        self.start_batch(slot)?;
        Ok(true)
    }

    /// Logs a protocol violation, queues an error message and closes the connection once it
    /// is sent (or when the stall timeout expires).
    fn reject(&mut self, slot: usize, code: u16, reason: &str) -> io::Result<()> {
        let mut m = Vec::with_capacity(64 + reason.len());
        protocol::encode_error(code, reason, &mut m);
        let m = Outgoing::control(m, &self.shared);
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        log::warn!(
            "publisher: subscriber {slot} ({}): protocol error {code}: {reason}; disconnecting",
            sub.peer
        );
        add(&self.shared.counters.protocol_errors, 1);
        sub.queue.clear();
        sub.control.clear();
        sub.control.push_back(m);
        sub.close_after_send = true;
        sub.rx_acc = Vec::new();
        if sub.batch.is_empty() {
            self.start_batch(slot)?;
        }
        Ok(())
    }

    /// Starts removing a subscriber: cancels its operations; it is freed once they completed.
    fn close_sub(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        if sub.closing {
            return Ok(());
        }
        sub.closing = true;
        let (send, recv, g) = (sub.send_pending, sub.recv_pending, sub.generation);
        sub.queue.clear();
        sub.control.clear();
        // Make a send stuck on a full socket buffer fail promptly even if the cancel misses it.
        // SAFETY: plain syscall on an fd we own.
        unsafe { libc::shutdown(sub.fd.as_raw_fd(), libc::SHUT_RDWR) };
        self.active -= 1;
        let c = &self.shared.counters;
        c.subscribers.fetch_sub(1, Relaxed);
        add(&c.subscribers_disconnected, 1);
        log::info!(
            "publisher: subscriber {slot} ({}) disconnected: {} frames sent, {} dropped",
            sub.peer,
            sub.frames_sent,
            sub.dropped
        );
        if send {
            self.cancel(ud(K_SEND, slot, g))?;
        }
        if recv {
            self.cancel(ud(K_RECV, slot, g))?;
        }
        self.maybe_free(slot);
        Ok(())
    }

    fn maybe_free(&mut self, slot: usize) {
        let done = self.subs[slot]
            .as_ref()
            .is_some_and(|s| s.closing && !s.send_pending && !s.recv_pending);
        if done {
            self.subs[slot] = None; // drops the batch: buffers back to the pool
            self.free.push(slot);
        }
    }
}

fn set_sockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Sets the socket's send buffer to hold `bytes` (the kernel doubles the value for its own
/// bookkeeping, so half is asked). `SO_SNDBUFFORCE` (CAP_NET_ADMIN) ignores `wmem_max`.
fn set_sndbuf(fd: RawFd, bytes: usize) {
    let v = (bytes / 2).min(i32::MAX as usize) as libc::c_int;
    if !set_sockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v)
        && !set_sockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v)
    {
        log::debug!("publisher: SO_SNDBUF: {}", io::Error::last_os_error());
    }
}

/// Bytes in the socket's send queue (sent but unacknowledged, plus unsent), 0 on error.
fn send_queue_len(fd: RawFd) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one c_int into the live `n`.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut n) };
    if r == 0 { n } else { 0 }
}

fn peer_name(fd: RawFd) -> String {
    // SAFETY: sockaddr_storage is plain data; getpeername writes at most `len` bytes into it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: pointers to a live sockaddr_storage and its length.
    let r = unsafe { libc::getpeername(fd, (&raw mut ss).cast(), &mut len) };
    if r != 0 {
        return "?".into();
    }
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { std::ptr::read((&raw const ss).cast()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            format!("{ip}:{}", u16::from_be(a.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read((&raw const ss).cast()) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            format!("[{ip}]:{}", u16::from_be(a.sin6_port))
        }
        _ => "?".into(),
    }
}
