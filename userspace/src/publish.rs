//! TCP publisher: serves finished frames to subscribers over the [`crate::protocol`] wire format.
//!
//! # Design
//!
//! ```text
//! decoder thread(s)                         publisher thread (one io_uring)
//!   FrameSender::send(frame)                  multishot accept on the listener
//!     ArrayQueue::push (never blocks)  ---->  multishot poll on the wake eventfd
//!     eventfd write (nonblocking)             per subscriber: SendMsg [header, payload] + poll(RDHUP)
//! ```
//!
//! - The decoder side never blocks and never takes a lock: [`FrameSender::send`] is one
//!   `ArrayQueue::push` plus one nonblocking `eventfd` write. A full queue drops the new frame
//!   and counts it ([`SenderCounters::dropped_queue_full`]).
//! - The publisher thread encodes each frame's header once and shares header and points between
//!   all subscribers through one `Arc` (no per-subscriber copy of point data). Each subscriber
//!   has a bounded queue of `queue_depth` frames *waiting behind the one being sent*; when it is
//!   full the oldest waiting frame is dropped for that subscriber alone and counted, so a slow
//!   subscriber never slows the others.
//! - A frame is sent with one `IORING_OP_SENDMSG` of two iovecs (header, payload) — the same
//!   iovecs a `writev` would take, plus `MSG_NOSIGNAL` so a vanished peer gives `EPIPE` rather
//!   than a process-killing `SIGPIPE`. Partial sends are resumed from where they stopped.
//! - Disconnects are noticed both by send errors (`EPIPE`, `ECONNRESET`, 0 bytes) and by a
//!   `POLLRDHUP` poll per subscriber, so an idle subscriber that hangs up is removed at once.
//! - Points buffers whose last subscriber has finished go to a small recycling pool that the
//!   decoder can take from ([`FrameSender::recycled_buffer`]) instead of allocating.
//!
//! Requires Linux 5.19 (multishot accept, `IORING_FEAT_NODROP`); runs on 6.x.

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
use crate::protocol::{self, FRAME_HEADER_LEN, Hello, MAX_POINT_COUNT};

/// Default listen address of the publisher.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7510,
));

/// Publisher settings.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// TCP address to listen on (default `127.0.0.1:7510`; port 0 picks a free port, see
    /// [`PublisherHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Maximum simultaneous subscribers; further connections are accepted and closed at once
    /// (default 16).
    pub max_subscribers: usize,
    /// Frames that may wait per subscriber behind the one being sent (default 4, minimum 1).
    pub queue_depth: usize,
    /// Fallback wake-up interval of the publisher thread, which notices frames pushed into the
    /// queue directly (not through a [`FrameSender`]) within this delay. `None` relies on the
    /// [`FrameSender`]'s eventfd only. Default 10 ms.
    pub idle_poll: Option<Duration>,
    /// On [`PublisherHandle::shutdown`], how long subscribers may take to receive the frames
    /// already queued for them (including frames still in the input queue) before they are
    /// disconnected anyway. Default 2 s.
    pub linger: Duration,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            listen: DEFAULT_LISTEN,
            max_subscribers: 16,
            queue_depth: 4,
            idle_poll: Some(Duration::from_millis(10)),
            linger: Duration::from_secs(2),
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
    /// Subscribers removed after a disconnect or send error.
    pub subscribers_disconnected: u64,
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
    /// Bytes sent (headers + payloads + hellos), summed over subscribers.
    pub bytes_sent: u64,
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
    frames_in: AtomicU64,
    frames_sent: AtomicU64,
    frames_dropped_queue_full: AtomicU64,
    frames_dropped_too_large: AtomicU64,
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
    pool: ArrayQueue<Vec<PointXYZIRCAEDT>>,
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
    /// drop) if the queue is full; the frame is then dropped.
    pub fn send(&self, frame: Frame) -> bool {
        self.try_send(frame).is_ok()
    }

    /// Like [`send`](Self::send) but hands a rejected frame back, so its buffer can be reused.
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
    /// one is available.
    pub fn recycled_buffer(&self) -> Option<Vec<PointXYZIRCAEDT>> {
        self.shared.pool.pop()
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
    /// Errors: bind failure, io_uring unavailable (e.g. `kernel.io_uring_disabled`), eventfd
    /// or thread creation failure.
    pub fn spawn(
        cfg: PublisherConfig,
        frames: Arc<ArrayQueue<Frame>>,
    ) -> io::Result<PublisherHandle> {
        let listener = TcpListener::bind(cfg.listen)?;
        let local_addr = listener.local_addr()?;
        let max_subscribers = cfg.max_subscribers.max(1);
        let queue_depth = cfg.queue_depth.max(1);
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
            pool: ArrayQueue::new(4),
        });
        let (frames2, shared2) = (frames.clone(), shared.clone());
        let (idle_poll, linger) = (cfg.idle_poll, cfg.linger);
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
                    queue_depth,
                    idle_poll,
                    linger,
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

    /// Counter snapshot.
    pub fn counters(&self) -> PublisherCounters {
        let c = &self.shared.counters;
        PublisherCounters {
            subscribers: c.subscribers.load(Relaxed),
            subscribers_accepted: c.subscribers_accepted.load(Relaxed),
            subscribers_rejected: c.subscribers_rejected.load(Relaxed),
            subscribers_disconnected: c.subscribers_disconnected.load(Relaxed),
            frames_in: c.frames_in.load(Relaxed),
            frames_sent: c.frames_sent.load(Relaxed),
            frames_dropped_queue_full: c.frames_dropped_queue_full.load(Relaxed),
            frames_dropped_input_full: c.sender_dropped.load(Relaxed),
            frames_dropped_too_large: c.frames_dropped_too_large.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
        }
    }

    /// Stops the publisher and returns its final counters: stops accepting, publishes the
    /// frames still in the input queue, lets each subscriber receive what is queued for it for
    /// up to [`PublisherConfig::linger`], then closes every connection (clients see a clean
    /// end of stream between two messages), waits for all in-flight io_uring operations to
    /// finish and joins the thread. Errors if the thread failed.
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

/// A message as sent: encoded header plus points, shared by all subscribers through `Arc`.
struct Outgoing {
    header: Vec<u8>,
    points: Vec<PointXYZIRCAEDT>,
    is_frame: bool,
}

impl Outgoing {
    fn payload(&self) -> &[u8] {
        bytemuck::cast_slice(&self.points)
    }
    fn len(&self) -> usize {
        self.header.len() + self.points.len() * crate::point::POINT_SIZE
    }
}

/// The `msghdr` and iovecs of a subscriber's in-flight send, boxed so their address is stable.
struct SendBuf {
    iov: [libc::iovec; 2],
    msg: libc::msghdr,
}

struct Sub {
    fd: OwnedFd,
    generation: u32,
    current: Option<Arc<Outgoing>>,
    written: usize,
    queue: VecDeque<Arc<Outgoing>>,
    buf: Box<SendBuf>,
    send_pending: bool,
    poll_pending: bool,
    closing: bool,
}

const K_ACCEPT: u64 = 1;
const K_WAKE: u64 = 2;
const K_SEND: u64 = 3;
const K_HUP: u64 = 4;
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
            if self.stop_deadline.is_some_and(|t| Instant::now() >= t) {
                self.stop_deadline = None;
                log::warn!(
                    "publisher: linger time over, disconnecting subscribers still receiving"
                );
                for slot in 0..self.subs.len() {
                    self.close_sub(slot)?;
                }
            }
            if !self.stopping {
                self.drain_input()?;
                if !self.accept_armed && self.accept_retry_at.is_some_and(|t| Instant::now() >= t) {
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
                    K_HUP => self.on_hup(ud_slot(u), ud_gen(u), res)?,
                    _ => self.inflight -= 1, // K_CANCEL: nothing to do
                }
            }
        }
        Ok(())
    }

    /// Submits pending SQEs and waits for at least one CQE (or the idle timeout).
    fn wait(&mut self) -> io::Result<()> {
        let mut timeout = if self.stopping {
            Some(Duration::from_millis(20))
        } else {
            self.idle_poll
        };
        if let Some(t) = self.accept_retry_at {
            let d = t.saturating_duration_since(Instant::now());
            timeout = Some(timeout.map_or(d, |x| x.min(d)));
        }
        let r = match timeout {
            Some(d) => {
                let ts = types::Timespec::new()
                    .sec(d.as_secs())
                    .nsec(d.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submit_and_wait(1),
        };
        match r {
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

    /// Queues an SQE, flushing the submission queue to the kernel if it is full.
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
            if self.subs[slot]
                .as_ref()
                .is_some_and(|s| s.current.is_none())
            {
                self.close_sub(slot)?;
            }
        }
        Ok(())
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
        set_nodelay(fd.as_raw_fd());
        *gen_counter = gen_counter.wrapping_add(1);
        let hello = {
            let mut header = Vec::with_capacity(64);
            protocol::encode_hello(
                &Hello {
                    server_name: concat!("lidarxdp/", env!("CARGO_PKG_VERSION")).into(),
                    max_subscribers: self.max_subscribers as u32,
                    queue_depth: self.queue_depth as u32,
                    server_time_ns: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64),
                },
                &mut header,
            );
            Arc::new(Outgoing {
                header,
                points: Vec::new(),
                is_frame: false,
            })
        };
        let sub = Sub {
            fd,
            generation: *gen_counter & 0xff_ffff,
            current: Some(hello),
            written: 0,
            queue: VecDeque::with_capacity(self.queue_depth),
            // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths) and iovec.
            buf: Box::new(unsafe { std::mem::zeroed::<SendBuf>() }),
            send_pending: false,
            poll_pending: false,
            closing: false,
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
        self.submit_send(slot)?;
        self.arm_hup(slot)
    }

    fn arm_hup(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        let e = opcode::PollAdd::new(
            types::Fd(sub.fd.as_raw_fd()),
            (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32,
        )
        .build()
        .user_data(ud(K_HUP, slot, sub.generation));
        sub.poll_pending = true;
        // SAFETY: a poll references no memory; the fd is owned by the Sub, which is not freed
        // while `poll_pending` is set.
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

    fn drain_input(&mut self) -> io::Result<()> {
        while let Some(frame) = self.frames.pop() {
            self.publish(frame)?;
        }
        Ok(())
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
            return Ok(());
        }
        let mut header = Vec::with_capacity(FRAME_HEADER_LEN);
        protocol::encode_frame_header(&frame.header, frame.points.len() as u32, &mut header);
        let out = Arc::new(Outgoing {
            header,
            points: frame.points,
            is_frame: true,
        });
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot].as_mut() else {
                continue;
            };
            if sub.closing {
                continue;
            }
            if sub.current.is_none() {
                sub.current = Some(out.clone());
                sub.written = 0;
                self.submit_send(slot)?;
            } else {
                if sub.queue.len() >= self.queue_depth
                    && let Some(old) = sub.queue.pop_front()
                {
                    add(&self.shared.counters.frames_dropped_queue_full, 1);
                    recycle(&self.shared.pool, old);
                }
                sub.queue.push_back(out.clone());
            }
        }
        recycle(&self.shared.pool, out);
        Ok(())
    }

    /// Submits a send of the unsent rest of the subscriber's current message.
    fn submit_send(&mut self, slot: usize) -> io::Result<()> {
        let Some(sub) = self.subs[slot].as_mut() else {
            return Ok(());
        };
        let Some(cur) = sub.current.as_ref() else {
            return Ok(());
        };
        let header = &cur.header[..];
        let payload = cur.payload();
        let iov = |s: &[u8]| libc::iovec {
            iov_base: s.as_ptr() as *mut libc::c_void,
            iov_len: s.len(),
        };
        let n = if sub.written < header.len() {
            sub.buf.iov[0] = iov(&header[sub.written..]);
            sub.buf.iov[1] = iov(payload);
            if payload.is_empty() { 1 } else { 2 }
        } else {
            sub.buf.iov[0] = iov(&payload[sub.written - header.len()..]);
            1
        };
        sub.buf.msg.msg_iov = sub.buf.iov.as_mut_ptr();
        sub.buf.msg.msg_iovlen = n;
        let e = opcode::SendMsg::new(types::Fd(sub.fd.as_raw_fd()), &raw const sub.buf.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(ud(K_SEND, slot, sub.generation));
        sub.send_pending = true;
        // SAFETY: the entry points to `sub.buf` (boxed: its address does not change when `subs`
        // reallocates) and through it to the header and points of `sub.current` (an Arc'd,
        // never-mutated message). While `send_pending` is set, neither `sub.current` is replaced
        // nor the Sub freed (see `on_send` and `maybe_free`), and the loop does not exit (nor
        // drop `subs`) while `inflight > 0`; so all of it outlives the operation.
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
                    "publisher: subscriber {slot}: send failed: {}",
                    io::Error::from_raw_os_error(-res)
                );
            } else {
                log::info!("publisher: subscriber {slot}: sent 0 bytes, closing");
            }
            return self.close_sub(slot);
        }
        add(&self.shared.counters.bytes_sent, res as u64);
        sub.written += res as usize;
        let cur = sub
            .current
            .as_ref()
            .expect("send completion without a current message");
        if sub.written < cur.len() {
            return self.submit_send(slot); // partial send: resume
        }
        if cur.is_frame {
            add(&self.shared.counters.frames_sent, 1);
        }
        let done = sub.current.take();
        sub.written = 0;
        sub.current = sub.queue.pop_front();
        let more = sub.current.is_some();
        if let Some(done) = done {
            recycle(&self.shared.pool, done);
        }
        if more {
            self.submit_send(slot)
        } else if self.stopping {
            self.close_sub(slot)
        } else {
            Ok(())
        }
    }

    fn on_hup(&mut self, slot: usize, generation: u32, res: i32) -> io::Result<()> {
        self.inflight -= 1;
        let Some(sub) = self.subs.get_mut(slot).and_then(|s| s.as_mut()) else {
            return Ok(());
        };
        if sub.generation != generation {
            return Ok(());
        }
        sub.poll_pending = false;
        if sub.closing {
            self.maybe_free(slot);
            return Ok(());
        }
        if res < 0 && res != -libc::ECANCELED {
            log::debug!(
                "publisher: subscriber {slot}: poll failed: {}",
                io::Error::from_raw_os_error(-res)
            );
        }
        log::info!("publisher: subscriber {slot} hung up");
        self.close_sub(slot)
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
        let (send, poll, g) = (sub.send_pending, sub.poll_pending, sub.generation);
        for m in sub.queue.drain(..) {
            recycle(&self.shared.pool, m);
        }
        // Make a send stuck on a full socket buffer fail promptly even if the cancel misses it.
        // SAFETY: plain syscall on an fd we own.
        unsafe { libc::shutdown(sub.fd.as_raw_fd(), libc::SHUT_RDWR) };
        self.active -= 1;
        let c = &self.shared.counters;
        c.subscribers.fetch_sub(1, Relaxed);
        add(&c.subscribers_disconnected, 1);
        if send {
            self.cancel(ud(K_SEND, slot, g))?;
        }
        if poll {
            self.cancel(ud(K_HUP, slot, g))?;
        }
        self.maybe_free(slot);
        Ok(())
    }

    fn maybe_free(&mut self, slot: usize) {
        let done = self.subs[slot]
            .as_ref()
            .is_some_and(|s| s.closing && !s.send_pending && !s.poll_pending);
        if done {
            if let Some(mut sub) = self.subs[slot].take()
                && let Some(cur) = sub.current.take()
            {
                recycle(&self.shared.pool, cur);
            }
            self.free.push(slot);
        }
    }
}

/// Drops a reference to a message; if it was the last one, returns its point buffer to the pool.
fn recycle(pool: &ArrayQueue<Vec<PointXYZIRCAEDT>>, m: Arc<Outgoing>) {
    if let Some(out) = Arc::into_inner(m)
        && out.is_frame
        && out.points.capacity() > 0
    {
        let mut v = out.points;
        v.clear();
        let _ = pool.push(v);
    }
}

fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        log::warn!("publisher: TCP_NODELAY: {}", io::Error::last_os_error());
    }
}
