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

mod event_loop;
mod pool;

pub use pool::{BufferPool, PoolCounters};

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use io_uring::IoUring;

use crate::frame::Frame;
use crate::point::PointXYZIRCAEDT;
use crate::protocol::SensorEntry;

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

/// The publisher's counters: daemon-wide, no labels (`lidarxdp_publisher_*`).
pub const PUBLISHER_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "publisher",
    labels: &[],
};

crate::counter_set! {
    /// Snapshot of the publisher's counters (monotonic totals unless noted).
    pub struct PublisherCounters in PUBLISHER_COUNTERS;
    shared
    /// Lock-free counters, written by one thread each (relaxed atomics: they are statistics,
    /// not synchronisation).
    struct Counters;
    {
        subscribers: Gauge "subscribers" "Currently connected subscribers.",
        subscribers_accepted: Counter "subscribers" "Subscribers accepted.",
        /// Because `max_subscribers` were connected.
        subscribers_rejected: Counter "connections" "Connections closed at once because the maximum number of subscribers was connected.",
        /// Hang-up, send error, stall, protocol error, shutdown.
        subscribers_disconnected: Counter "subscribers" "Subscribers removed.",
        subscribers_stalled: Counter "subscribers" "Subscribers disconnected because their send made no progress for the stall timeout.",
        /// Garbage, a wrong version, an unknown sensor or field.
        protocol_errors: Counter "subscribers" "Subscribers disconnected for a protocol violation.",
        subscriptions: Counter "requests" "Subscribe requests accepted.",
        /// By [`FrameSender`]s.
        frames_queued: Counter "frames" "Frames accepted into the publisher input queue.",
        frames_in: Counter "frames" "Frames taken from the input queue.",
        frames_sent: Counter "frames" "Frames completely sent, summed over subscribers.",
        frames_dropped_queue_full: Counter "frames" "Frames dropped from a subscriber's full queue, summed over subscribers.",
        /// By [`FrameSender`]s.
        frames_dropped_input_full: Counter "frames" "Frames dropped because the publisher input queue was full.",
        /// More than [`crate::protocol::MAX_POINT_COUNT`] points.
        frames_dropped_too_large: Counter "frames" "Frames dropped because they have too many points for the protocol.",
        /// One per distinct field set per frame, never one per subscriber.
        packed_encodings: Counter "encodings" "Packed copies made for subscribers that chose a subset of the point fields.",
        frames_alive: Gauge "frames" "Frame messages alive now (queued or being sent to someone).",
        frames_alive_high_water: Gauge "frames" "Largest number of frame messages alive at once.",
        /// `<= queue_depth`.
        queue_high_water: Gauge "frames" "Largest number of frames ever waiting in one subscriber's queue.",
        /// All messages.
        bytes_sent: Counter "bytes" "Bytes sent to subscribers.",
    }
    extra {
        /// The point-buffer pool.
        pub pool: PoolCounters,
    }
}

/// Counters of the [`FrameSender`]s of one publisher (shared by all clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderCounters {
    /// Frames accepted into the queue.
    pub sent: u64,
    /// Frames dropped because the queue was full.
    pub dropped_queue_full: u64,
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
    /// Per-subscriber counters, refreshed by the publisher thread every 50 ms (a lock on the
    /// frame-rate side only: the decoder threads never touch it).
    subscriber_stats: std::sync::Mutex<Vec<SubscriberStats>>,
}

/// Per connected subscriber: `lidarxdp_subscriber_*{subscriber,peer}`.
pub const SUBSCRIBER_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "subscriber",
    labels: &["subscriber", "peer"],
};

crate::counter_set! {
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
            sent: self.shared.counters.frames_queued.load(Relaxed),
            dropped_queue_full: self.shared.counters.frames_dropped_input_full.load(Relaxed),
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
        Self::spawn_on(listener, cfg, frames)
    }

    /// [`Publisher::spawn`] on a listener already bound (and listening) by the caller, e.g.
    /// before the daemon drops its capabilities; `cfg.listen` is ignored.
    ///
    /// # Errors
    /// io_uring unavailable, eventfd or thread creation failure.
    pub fn spawn_on(
        listener: TcpListener,
        cfg: PublisherConfig,
        frames: Arc<ArrayQueue<Frame>>,
    ) -> io::Result<PublisherHandle> {
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
            subscriber_stats: std::sync::Mutex::new(Vec::new()),
        });
        let (frames2, shared2) = (frames.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("lidarxdp-publish".into())
            .spawn(move || {
                // Built on the publisher thread: `Loop` holds raw pointers (msghdr) and is not Send.
                let mut state = event_loop::Loop::new(
                    ring,
                    listener,
                    frames2,
                    shared2,
                    &cfg,
                    max_subscribers,
                    entries as usize * 2,
                );
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

    /// Counters of every connected subscriber (at most 50 ms old), in slot order.
    pub fn subscriber_stats(&self) -> Vec<SubscriberStats> {
        self.shared
            .subscriber_stats
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Counter snapshot.
    pub fn counters(&self) -> PublisherCounters {
        PublisherCounters {
            pool: self.shared.pool.counters(),
            ..self.shared.counters.snapshot()
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
