//! The publisher thread: one io_uring loop over the listener, the wake-up eventfd and every
//! subscriber socket (see the design notes of [`super`]).

use std::collections::VecDeque;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;
use io_uring::{IoUring, cqueue, opcode, squeue, types};

use super::{BATCH_BYTES, MAX_BATCH, MAX_SNDBUF, PublisherConfig, Shared, add};
use crate::frame::Frame;
use crate::point::PointXYZIRCAEDT;
use crate::protocol::{
    self, FieldSet, Hello, MAX_POINT_COUNT, Message, Parsed, ProtocolError, SensorEntry, Subscribe,
    error_code,
};

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

pub(super) struct Loop {
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
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        ring: IoUring,
        listener: TcpListener,
        frames: Arc<ArrayQueue<Frame>>,
        shared: Arc<Shared>,
        cfg: &PublisherConfig,
        max_subscribers: usize,
        cqe_capacity: usize,
    ) -> Self {
        Loop {
            ring,
            listener,
            frames,
            shared,
            max_subscribers,
            queue_depth: cfg.queue_depth.max(1),
            idle_poll: cfg.idle_poll,
            linger: cfg.linger,
            stall_timeout: cfg.stall_timeout,
            sndbuf: cfg.sndbuf.min(MAX_SNDBUF),
            sensors: cfg.sensors.clone(),
            stop_deadline: None,
            subs: Vec::new(),
            free: Vec::new(),
            active: 0,
            inflight: 0,
            accept_armed: false,
            accept_retry_at: None,
            wake_armed: false,
            stopping: false,
            cqes: Vec::with_capacity(cqe_capacity),
            encodings: Vec::new(),
            next_stall_check: Instant::now(),
        }
    }

    pub(super) fn run(&mut self) -> io::Result<()> {
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
                self.publish_subscriber_stats();
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

    /// Copies every live subscriber's counters into the shared snapshot
    /// ([`super::PublisherHandle::subscriber_stats`]).
    fn publish_subscriber_stats(&self) {
        let stats: Vec<super::SubscriberStats> = self
            .subs
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let s = s.as_ref()?;
                (!s.closing).then(|| super::SubscriberStats {
                    slot,
                    peer: s.peer.clone(),
                    frames_sent: s.frames_sent,
                    frames_dropped: s.dropped,
                    queued: s.queue.len() as u64,
                })
            })
            .collect();
        if let Ok(mut v) = self.shared.subscriber_stats.lock() {
            *v = stats;
        }
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
    crate::sys::sockopt::set_int(fd, level, name, value).is_ok()
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
