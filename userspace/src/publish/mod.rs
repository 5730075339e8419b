//! TCP publisher: serves finished frames to any number of subscribers over the
//! [`lidarxdp_core::protocol`] wire format without ever stalling packet ingest.
//!
//! # Design
//!
//! ```text
//! decoder thread(s)                          publisher thread (one io_uring, uring.rs)
//!   decoders take point Vecs from the          multishot accept on the listener
//!     LIFO BufferPool (no allocation)          multishot poll on the wake eventfd
//!   FrameSender::send(frame)                   completions decoded once into typed tokens
//!     ArrayQueue::push (never blocks)  ---->     -> Fanout state machine (fanout.rs) -> actions:
//!     eventfd write (nonblocking)                   SendMsg [hdr, payload, ...], Recv, close
//!                                              last Arc dropped -> point Vec back to the pool
//! ```
//!
//! - **Two halves**: `fanout` is the TCP server's logic with no syscall (per-subscriber
//!   queues, drop-oldest per sensor, stall cut-off, partial writes, handshake, protocol
//!   errors), unit-tested on its own; `uring` is the thin io_uring driver that decodes each
//!   completion once into a typed token, feeds it to the state machine and submits the
//!   actions it returns.
//! - **Decoder side never blocks, never locks**: [`FrameSender::send`] is one `ArrayQueue::push`
//!   plus one nonblocking `eventfd` write that wakes the publisher; a full queue drops the new
//!   frame and counts it. The queue belongs to the publisher ([`Publisher::spawn`] returns the
//!   sender).
//! - **The pool is passed in**: the caller creates the [`BufferPool`] and hands it to the
//!   publisher and to the decoders ([`lidarxdp_core::sensor::ScanPipeline::set_buffer_source`]).
//! - **Sinks are a seam**: every frame becomes one [`SharedFrame`] offered to each
//!   [`FrameSink`]; the TCP server is the sink built in, further ones are given to
//!   [`Publisher::spawn_on`].
//! - **No per-subscriber copy**: each frame's header is encoded once; the header and the point
//!   buffer are shared by all subscribers through one `Arc` and sent as iovecs. A subscriber
//!   that chose a subset of the point fields gets a packed copy — **one per distinct field set
//!   per frame**, shared by every subscriber with that set ([`PublisherCounters::packed_encodings`]).
//! - **Batched writes**: a subscriber with several messages waiting gets up to [`MAX_BATCH`] of
//!   them (up to [`BATCH_BYTES`]) in one `IORING_OP_SENDMSG` with `MSG_NOSIGNAL` (a vanished
//!   peer yields `EPIPE`, not a process-killing `SIGPIPE`). Partial sends resume where they
//!   stopped. Sockets get `TCP_NODELAY` and an `SO_SNDBUF` that holds a whole frame
//!   ([`PublisherConfig::sndbuf`], grown to the largest frame seen, up to 64 MiB).
//! - **Bounded queues, per sensor**: at most `queue_depth` frames *of each sensor* wait per
//!   subscriber behind the batch being sent; a new frame finding its sensor's share full drops
//!   the oldest frame of that sensor for that subscriber alone
//!   ([`PublisherCounters::frames_dropped_queue_full`]), so one sensor is never starved to serve
//!   another. A subscriber whose send makes no progress for [`PublisherConfig::stall_timeout`]
//!   is disconnected ([`PublisherCounters::subscribers_stalled`]).
//! - **Memory bound**: the pool cap of empty buffers, plus per subscriber at most
//!   `MAX_BATCH + queue_depth × max(1, announced sensors)` shared frame messages.
//! - **Handshake**: a subscriber that sends nothing gets all sensors and all fields. A
//!   [`lidarxdp_core::protocol::Subscribe`] chooses sensors by name and fields by name; the server
//!   answers with a `subscribed` acknowledgement, after which every frame follows the new
//!   choice. Anything else (garbage, a wrong version, an unknown sensor or field) is logged
//!   with its reason, answered with an error message and the connection is closed.
//!
//! Requires Linux 5.19 (multishot accept, `IORING_FEAT_NODROP`); runs on 6.x.

pub mod aux;
mod counters;
mod fanout;
mod pool;
mod sink;
mod uring;

pub use aux::{AuxMessage, AuxSender, AuxSink, AuxThread};
pub use counters::PublisherCounters;
pub use pool::{BufferPool, PoolCounters};
pub use sink::{
    FrameSink, Offered, QueueBytes, SINK_QUEUE_PER_SENSOR, SINK_QUEUES, SharedFrame,
    SinkQueueCounters, SinkReceiver, SinkThread, sink_queue,
};

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use io_uring::IoUring;

use counters::{Counters, add};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::protocol::SensorEntry;
use lidarxdp_core::sensor::ImuReading;

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
    /// Frames of one sensor that may wait per subscriber behind the batch being sent: the high
    /// watermark past which the oldest waiting frame of that sensor is dropped (default 3,
    /// minimum 1). Memory bound: a subscriber holds at most
    /// `queue_depth × max(1, sensors.len())` waiting frames in all, plus its batch of at most
    /// [`MAX_BATCH`] messages (frames are shared between subscribers, not copied).
    pub queue_depth: usize,
    /// Capacity of the input queue between the [`FrameSender`]s and the publisher thread,
    /// frames (default 16, minimum 1); a frame sent to a full queue is dropped and counted.
    pub frame_queue: usize,
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
    /// Each sensor's point layout by id ([`lidarxdp_core::layout::PointType`]); a sensor not
    /// listed is `autoware`. A subscriber's fields must be fields of its sensors' layouts.
    pub point_types: Vec<(u16, lidarxdp_core::layout::PointType)>,
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
            frame_queue: 16,
            linger: Duration::from_secs(2),
            stall_timeout: Duration::from_secs(5),
            sensors: Vec::new(),
            point_types: Vec::new(),
            sndbuf: 4 << 20,
        }
    }
}

/// IMU readings the publisher's IMU input queue holds (2.5 s of one Ouster's 100 Hz); a
/// reading sent to a full queue is dropped and counted
/// ([`PublisherCounters::imu_dropped_input_full`]).
pub const IMU_INPUT_QUEUE: usize = 256;

/// IMU messages that may wait per subscriber (0.64 s of one Ouster's 100 Hz); past it the
/// oldest waiting one is dropped ([`PublisherCounters::imu_dropped_queue_full`]). They go out
/// before the frames waiting beside them.
pub const IMU_QUEUE_PER_SUBSCRIBER: usize = 64;

/// Default cap of the point-buffer pool a daemon creates ([`BufferPool::new`]), buffers.
pub const DEFAULT_POOL_CAP: usize = 8;

/// State shared by the handle, the senders and the publisher thread.
struct Shared {
    /// The input queue.
    frames: ArrayQueue<Frame>,
    /// The IMU input queue ([`IMU_INPUT_QUEUE`]): sensor id and reading.
    imu: ArrayQueue<(u16, ImuReading)>,
    counters: Arc<Counters>,
    stop: AtomicBool,
    /// Nonblocking eventfd; a write wakes the publisher thread.
    wake: OwnedFd,
    /// Emptied point buffers for reuse by the decoders.
    pool: Arc<BufferPool>,
    /// Per-subscriber counters, refreshed by the publisher thread every 50 ms (a lock on the
    /// frame-rate side only: the decoder threads never touch it).
    subscriber_stats: std::sync::Mutex<Vec<SubscriberStats>>,
}

/// Per connected subscriber: `lidarxdp_subscriber_*{subscriber,peer}`.
pub const SUBSCRIBER_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "subscriber",
    labels: &["subscriber", "peer"],
};

lidarxdp_core::counter_set! {
    /// One subscriber's counters.
    pub struct SubscriberCounters in SUBSCRIBER_COUNTERS;
    {
        frames_sent: Counter "frames" "Frames completely sent to this subscriber.",
        /// It read too slowly.
        frames_dropped: Counter "frames" "Frames dropped from this subscriber's full queue (it reads too slowly).",
        queued_frames: Gauge "frames" "Frames waiting in this subscriber's queue.",
    }
}

/// One connected subscriber's counters, as the publisher thread last published them (at most
/// 50 ms old).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// Publisher slot (the `subscriber N` of the logs); reused after a disconnect.
    pub slot: usize,
    /// Peer address, `IP:PORT`.
    pub peer: String,
    /// Its counters.
    pub counters: SubscriberCounters,
}

impl Shared {
    /// Every counter the publisher keeps, the pool's included (relaxed loads).
    fn counters(&self) -> PublisherCounters {
        PublisherCounters {
            pool: self.pool.counters(),
            ..self.counters.snapshot()
        }
    }

    fn notify(&self) {
        // Nonblocking: EAGAIN only if the counter would overflow, and then a wake-up is
        // pending anyway.
        let _ = crate::sys::event::eventfd_add(self.wake.as_raw_fd(), 1);
    }

    fn drain_wake(&self) {
        // EAGAIN when no wake-up is pending.
        let _ = crate::sys::event::eventfd_take(self.wake.as_raw_fd());
    }
}

/// The TCP publisher as an [`AuxSink`]: queues each IMU reading for the publisher thread
/// (never blocking: a full [`IMU_INPUT_QUEUE`] drops it, counted) and wakes it; the thread
/// encodes it once and queues it for every subscriber of its sensor that takes IMU messages.
/// `/diagnostics` is not carried over TCP.
pub struct ImuToTcp {
    shared: Arc<Shared>,
}

impl AuxSink for ImuToTcp {
    fn name(&self) -> &str {
        "tcp"
    }

    fn imu(&mut self, sensor_id: u16, reading: &ImuReading) {
        if self.shared.imu.push((sensor_id, *reading)).is_ok() {
            add(&self.shared.counters.imu_queued, 1);
            self.shared.notify();
        } else {
            add(&self.shared.counters.imu_dropped_input_full, 1);
        }
    }

    fn diagnostics(&mut self, _stamp_ns: u64, _status: &[lidarxdp_core::ros2::DiagnosticStatus]) {}
}

/// The decoder side's handle on the publisher: pushes frames into its input queue without ever
/// blocking, and wakes it.
///
/// Cheap to clone; all clones share the queue and the counters.
#[derive(Clone)]
pub struct FrameSender {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FrameSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameSender")
            .field("queued", &self.shared.frames.len())
            .finish_non_exhaustive()
    }
}

impl FrameSender {
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
        match self.shared.frames.push(frame) {
            Ok(()) => {
                add(&self.shared.counters.frames_queued, 1);
                self.shared.notify();
                Ok(())
            }
            Err(frame) => {
                add(&self.shared.counters.frames_dropped_input_full, 1);
                Err(frame)
            }
        }
    }

    /// The aux sink that hands IMU readings to this publisher's subscribers
    /// ([`lidarxdp_core::protocol::MSG_IMU`], docs/protocol.md "IMU").
    pub fn imu_sink(&self) -> ImuToTcp {
        ImuToTcp {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Frames in the input queue now, not yet taken by the publisher thread.
    pub fn queued(&self) -> usize {
        self.shared.frames.len()
    }

    /// An empty point buffer (with capacity) whose frame has been sent to every subscriber, if
    /// one is available: the most recently freed one (LIFO). Never blocks.
    pub fn recycled_buffer(&self) -> Option<lidarxdp_core::point_buf::PointBuf> {
        self.shared.pool.take()
    }

    /// The publisher's counters, as [`PublisherHandle::counters`] gives them; the senders'
    /// own are [`PublisherCounters::frames_queued`] and
    /// [`PublisherCounters::frames_dropped_input_full`] (summed over all clones).
    pub fn counters(&self) -> PublisherCounters {
        self.shared.counters()
    }
}

/// Namespace of [`Publisher::spawn`].
#[derive(Debug)]
pub struct Publisher;

impl Publisher {
    /// Binds `cfg.listen`, sets up the io_uring and starts the publisher thread. Returns its
    /// handle and the sender of its input queue (clone it for every decoder thread). `pool`
    /// gets the frames' point buffers back once every subscriber has sent them: give the same
    /// pool to the decoders ([`lidarxdp_core::sensor::ScanPipeline::set_buffer_source`]).
    ///
    /// # Errors
    /// Bind failure, io_uring unavailable (e.g. `kernel.io_uring_disabled`), eventfd or thread
    /// creation failure.
    pub fn spawn(
        cfg: PublisherConfig,
        pool: Arc<BufferPool>,
    ) -> io::Result<(PublisherHandle, FrameSender)> {
        let listener = TcpListener::bind(cfg.listen)?;
        Self::spawn_on(listener, cfg, pool, Vec::new())
    }

    /// [`Publisher::spawn`] on a listener already bound (and listening) by the caller, e.g.
    /// before the daemon drops its capabilities (`cfg.listen` is ignored), with further
    /// `sinks` offered every frame beside the TCP subscribers.
    ///
    /// # Errors
    /// io_uring unavailable, eventfd or thread creation failure.
    pub fn spawn_on(
        listener: TcpListener,
        cfg: PublisherConfig,
        pool: Arc<BufferPool>,
        sinks: Vec<Box<dyn FrameSink>>,
    ) -> io::Result<(PublisherHandle, FrameSender)> {
        let local_addr = listener.local_addr()?;
        let max_subscribers = cfg.max_subscribers.max(1);
        let entries = (max_subscribers * 3 + 16)
            .next_power_of_two()
            .clamp(64, 4096) as u32;
        let ring = IoUring::new(entries)?;
        let wake = crate::sys::event::eventfd()?;
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(Shared {
            frames: ArrayQueue::new(cfg.frame_queue.max(1)),
            imu: ArrayQueue::new(IMU_INPUT_QUEUE),
            counters: counters.clone(),
            stop: AtomicBool::new(false),
            wake,
            pool,
            subscriber_stats: std::sync::Mutex::new(Vec::new()),
        });
        let fanout = fanout::Fanout::new(
            fanout::FanoutConfig {
                max_subscribers,
                queue_depth: cfg.queue_depth,
                stall_timeout: cfg.stall_timeout,
                sndbuf: cfg.sndbuf,
                sensors: cfg.sensors.clone(),
                point_types: cfg.point_types.clone(),
            },
            counters,
        );
        let queue_bytes = fanout.queue_bytes();
        let shared2 = shared.clone();
        let linger = cfg.linger;
        let thread = std::thread::Builder::new()
            .name("lidarxdp-publish".into())
            .spawn(move || {
                // Built on the publisher thread: the driver holds raw pointers (msghdr) and is
                // not Send.
                let mut driver = uring::Driver::new(
                    ring,
                    listener,
                    shared2,
                    fanout,
                    sinks,
                    linger,
                    entries as usize * 2,
                );
                let r = driver.run();
                if let Err(e) = &r {
                    log::error!("publisher thread failed: {e}");
                }
                r
            })?;
        let sender = FrameSender {
            shared: shared.clone(),
        };
        Ok((
            PublisherHandle {
                local_addr,
                shared,
                thread: Some(thread),
                queue_bytes,
            },
            sender,
        ))
    }
}

/// Handle on a running publisher. Dropping it shuts the publisher down (like
/// [`shutdown`](Self::shutdown), ignoring errors).
pub struct PublisherHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<()>>>,
    queue_bytes: QueueBytes,
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

    /// The point-buffer pool the publisher returns buffers to.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.shared.pool
    }

    /// Counters of every connected subscriber (at most 50 ms old), in slot order.
    pub fn subscriber_stats(&self) -> Vec<SubscriberStats> {
        self.shared
            .subscriber_stats
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Snapshot of every counter the publisher keeps (the pool's included).
    pub fn counters(&self) -> PublisherCounters {
        self.shared.counters()
    }

    /// The bytes of the frame messages held for the TCP subscribers (queued or being sent,
    /// each encoding once): the `tcp` sink's `lidarxdp_sink_queue_bytes`.
    pub fn queue_bytes(&self) -> QueueBytes {
        self.queue_bytes.clone()
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

/// Binds (and listens on) `addr`, retrying `EADDRINUSE` for up to `retry` (backoff 10 ms
/// doubling to 200 ms).
///
/// Why: when a daemon dies (SIGKILL, crash) its listening socket is not closed with the
/// process. The publisher's io_uring holds a reference to it through the pending accept, and
/// the kernel drops a dead ring's requests in deferred work (`io_ring_exit_work`), which on a
/// loaded machine runs tens to hundreds of milliseconds later; until then the old socket still
/// listens and a new `bind(2)` fails with `EADDRINUSE` (`SO_REUSEADDR`, which std sets, does not
/// override a listening socket). A restart right after a crash therefore waits for it, as the
/// AF_XDP bind waits out `EBUSY`.
///
/// # Errors
/// The last bind error: `EADDRINUSE` once `retry` has passed, any other error at once (e.g.
/// `EACCES` for a port < 1024 without `CAP_NET_BIND_SERVICE`, `EADDRNOTAVAIL`).
pub fn bind_listener(addr: SocketAddr, retry: Duration) -> io::Result<TcpListener> {
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(10);
    let mut logged = false;
    loop {
        match TcpListener::bind(addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                let left = retry.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(e);
                }
                if !logged {
                    logged = true;
                    log::info!(
                        "publisher: {addr} in use (a previous daemon's socket still closing?), \
                         retrying for up to {retry:?}"
                    );
                }
                std::thread::sleep(backoff.min(left));
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            other => {
                if logged && other.is_ok() {
                    log::info!("publisher: bound {addr} after {:?}", started.elapsed());
                }
                return other;
            }
        }
    }
}

#[cfg(test)]
mod bind_tests {
    use super::*;

    #[test]
    fn address_in_use_is_retried_until_it_is_free_then_reported() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let t = std::time::Instant::now();
        let e = bind_listener(addr, Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(t.elapsed() >= Duration::from_millis(100));
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        let l = bind_listener(addr, Duration::from_secs(5)).unwrap();
        assert_eq!(l.local_addr().unwrap(), addr);
        release.join().unwrap();
    }
}
