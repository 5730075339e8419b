//! The publisher thread's io_uring driver: one ring over the listener, the wake-up eventfd and
//! every subscriber socket. It decodes each completion once into a typed [`Completion`], hands
//! it to the [`Fanout`] state machine (and the input frames to every [`FrameSink`]), and turns
//! the [`Action`]s the state machine returns into submissions. All the logic is in
//! [`super::fanout`]; this file only moves bytes and file descriptors.
//!
//! Kernel interfaces: io_uring(7) (`IORING_OP_ACCEPT` multishot, `IORING_OP_POLL_ADD` multishot,
//! `IORING_OP_SENDMSG`, `IORING_OP_RECV`, `IORING_OP_ASYNC_CANCEL`), eventfd(2), tcp(7)
//! (`SIOCOUTQ`), socket(7) (`SO_SNDBUF`, `SO_SNDBUFFORCE`).

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use super::counters::add;
use super::fanout::{Action, Fanout, SubId};
use super::sink::{FrameSink, SharedFrame};
use super::{MAX_BATCH, Shared};

/// Bytes one `Recv` takes from a subscriber (subscribe requests are a few hundred bytes).
const RX_CHUNK: usize = 1024;

/// Interval of the housekeeping tick (stall checks, per-subscriber stats) while subscribers
/// are connected.
const TICK: Duration = Duration::from_millis(50);

/// Back-off after a failed accept (e.g. `EMFILE`) before it is armed again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What an io_uring operation was for: packed into its `user_data` (kind in bits 56..64, the
/// subscriber's generation in bits 32..56, its slot in bits 0..32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// The multishot accept on the listener.
    Accept,
    /// The multishot poll on the wake-up eventfd.
    Wake,
    /// A subscriber's `SENDMSG`.
    Send(SubId),
    /// A subscriber's `RECV`.
    Recv(SubId),
    /// An `ASYNC_CANCEL` request.
    Cancel,
}

impl Token {
    const ACCEPT: u64 = 1;
    const WAKE: u64 = 2;
    const SEND: u64 = 3;
    const RECV: u64 = 4;
    const CANCEL: u64 = 5;

    /// The `user_data` of an operation.
    pub(crate) fn encode(self) -> u64 {
        let sub = |kind: u64, s: SubId| {
            (kind << 56) | (u64::from(s.generation & 0xff_ffff) << 32) | u64::from(s.slot)
        };
        match self {
            Token::Accept => Self::ACCEPT << 56,
            Token::Wake => Self::WAKE << 56,
            Token::Send(s) => sub(Self::SEND, s),
            Token::Recv(s) => sub(Self::RECV, s),
            Token::Cancel => Self::CANCEL << 56,
        }
    }

    /// The token of a completion's `user_data`; `None` for a value no submission carries.
    pub(crate) fn decode(user_data: u64) -> Option<Token> {
        let s = SubId {
            slot: user_data as u32,
            generation: ((user_data >> 32) & 0xff_ffff) as u32,
        };
        Some(match user_data >> 56 {
            Self::ACCEPT => Token::Accept,
            Self::WAKE => Token::Wake,
            Self::SEND => Token::Send(s),
            Self::RECV => Token::Recv(s),
            Self::CANCEL => Token::Cancel,
            _ => return None,
        })
    }
}

/// A completion decoded once from its raw `(user_data, res, flags)`.
#[derive(Debug)]
pub(crate) enum Completion {
    /// A connection (the new socket) or the accept's error; `more`: the multishot accept
    /// stays armed (`IORING_CQE_F_MORE`).
    Accept {
        /// The accepted socket.
        result: io::Result<OwnedFd>,
        /// The multishot operation stays armed.
        more: bool,
    },
    /// The wake-up eventfd became readable (or the poll failed); `more` as for accept.
    Wake {
        /// `Ok` or the poll's error.
        result: io::Result<()>,
        /// The multishot operation stays armed.
        more: bool,
    },
    /// A send completed: bytes written, or its error.
    Send(SubId, io::Result<usize>),
    /// A receive completed: bytes read (0: hang-up), or its error.
    Recv(SubId, io::Result<usize>),
    /// A cancel request completed (nothing to do), or a completion of unknown origin.
    Other,
}

impl Completion {
    /// Decodes a CQE. `res < 0` is `-errno` (io_uring_enter(2)).
    pub(crate) fn decode(user_data: u64, res: i32, flags: u32) -> Completion {
        let err = || io::Error::from_raw_os_error(-res);
        let len = || {
            if res < 0 {
                Err(err())
            } else {
                Ok(res as usize)
            }
        };
        let more = cqueue::more(flags);
        match Token::decode(user_data) {
            Some(Token::Accept) => Completion::Accept {
                result: if res < 0 {
                    Err(err())
                } else {
                    // SAFETY: a successful accept's result is a new socket fd that nothing
                    // else owns; it is decoded exactly once, here.
                    Ok(unsafe { OwnedFd::from_raw_fd(res) })
                },
                more,
            },
            Some(Token::Wake) => Completion::Wake {
                result: if res < 0 { Err(err()) } else { Ok(()) },
                more,
            },
            Some(Token::Send(s)) => Completion::Send(s, len()),
            Some(Token::Recv(s)) => Completion::Recv(s, len()),
            Some(Token::Cancel) | None => Completion::Other,
        }
    }

    /// Whether this is the operation's last completion (it is no longer in flight).
    fn is_final(&self) -> bool {
        match self {
            Completion::Accept { more, .. } | Completion::Wake { more, .. } => !more,
            _ => true,
        }
    }
}

/// The `msghdr` and iovecs of a subscriber's in-flight send, boxed so their address is stable.
struct SendBuf {
    iov: [libc::iovec; 2 * MAX_BATCH],
    msg: libc::msghdr,
}

/// A subscriber's socket and the memory its in-flight operations use.
struct Conn {
    sock: TcpStream,
    buf: Box<SendBuf>,
    rx: Box<[u8; RX_CHUNK]>,
}

/// The publisher thread's state.
pub(super) struct Driver {
    ring: IoUring,
    listener: TcpListener,
    shared: Arc<Shared>,
    fanout: Fanout,
    /// Further sinks, offered every frame before the TCP subscribers.
    sinks: Vec<Box<dyn FrameSink>>,
    /// Sockets by subscriber slot.
    conns: Vec<Option<Conn>>,
    linger: Duration,
    /// Submitted operations whose final CQE has not arrived yet.
    inflight: usize,
    accept_armed: bool,
    accept_retry_at: Option<Instant>,
    wake_armed: bool,
    stopping: bool,
    /// Set when stopping: subscribers still sending after it are disconnected.
    stop_deadline: Option<Instant>,
    next_tick: Instant,
    /// The last published per-subscriber stats were not empty.
    stats_shown: bool,
    cqes: Vec<(u64, i32, u32)>,
    actions: Vec<Action>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.inflight > 0 {
            // Only reached if the loop failed with operations in flight. The kernel may still
            // read the send buffers and batches until the ring is torn down asynchronously, so
            // leak them rather than free memory it may read.
            std::mem::forget(std::mem::take(&mut self.conns));
            self.fanout.leak();
        }
    }
}

impl Driver {
    pub(super) fn new(
        ring: IoUring,
        listener: TcpListener,
        shared: Arc<Shared>,
        fanout: Fanout,
        sinks: Vec<Box<dyn FrameSink>>,
        linger: Duration,
        cqe_capacity: usize,
    ) -> Self {
        Driver {
            ring,
            listener,
            shared,
            fanout,
            sinks,
            conns: Vec::new(),
            linger,
            inflight: 0,
            accept_armed: false,
            accept_retry_at: None,
            wake_armed: false,
            stopping: false,
            stop_deadline: None,
            next_tick: Instant::now(),
            stats_shown: false,
            cqes: Vec::with_capacity(cqe_capacity),
            actions: Vec::new(),
        }
    }

    /// Runs until stopped and every operation has completed.
    ///
    /// # Errors
    /// `io_uring_enter` failures other than `ETIME`, `EINTR` and `EBUSY`.
    pub(super) fn run(&mut self) -> io::Result<()> {
        for s in &self.sinks {
            log::info!("publisher: frames also go to sink '{}'", s.name());
        }
        self.arm_accept()?;
        self.arm_wake()?;
        loop {
            if !self.stopping && self.shared.stop.load(Relaxed) {
                self.begin_stop();
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
                self.fanout.close_all();
            }
            if now >= self.next_tick {
                self.tick(now);
            }
            if !self.stopping {
                self.drain_input(now);
                if !self.accept_armed && self.accept_retry_at.is_some_and(|t| now >= t) {
                    self.accept_retry_at = None;
                    self.arm_accept()?;
                }
            }
            self.execute(now)?;
            self.wait()?;
            self.cqes.clear();
            self.cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            let now = Instant::now();
            for i in 0..self.cqes.len() {
                let (user_data, res, flags) = self.cqes[i];
                let c = Completion::decode(user_data, res, flags);
                if c.is_final() {
                    self.inflight -= 1;
                }
                self.handle(c, now)?;
                self.execute(now)?;
            }
        }
        Ok(())
    }

    fn handle(&mut self, c: Completion, now: Instant) -> io::Result<()> {
        match c {
            Completion::Accept { result, more } => {
                if !more {
                    self.accept_armed = false;
                }
                self.on_accept(result, now)?;
            }
            Completion::Wake { result, more } => {
                if !more {
                    self.wake_armed = false;
                    if !self.stopping {
                        if let Err(e) = result
                            && e.raw_os_error() != Some(libc::ECANCELED)
                        {
                            log::warn!("publisher: wake poll failed: {e}");
                        }
                        self.arm_wake()?;
                    }
                }
                // Reset the eventfd before the next drain of the input queue: a frame pushed
                // after the drain has begun leaves the eventfd readable again.
                self.shared.drain_wake();
            }
            Completion::Send(sub, result) => self.fanout.on_send(sub, now, result),
            Completion::Recv(sub, result) => {
                let rx = self.conns.get(sub.slot as usize).and_then(Option::as_ref);
                let result = match (result, rx) {
                    (Ok(n), Some(c)) => Ok(&c.rx[..n.min(RX_CHUNK)]),
                    (Ok(_), None) => Ok(&[][..]),
                    (Err(e), _) => Err(e),
                };
                self.fanout.on_recv(sub, now, result);
            }
            Completion::Other => {}
        }
        Ok(())
    }

    fn on_accept(&mut self, result: io::Result<OwnedFd>, now: Instant) -> io::Result<()> {
        let fd = match result {
            Ok(fd) => fd,
            Err(e) => {
                if !self.stopping && e.raw_os_error() != Some(libc::ECANCELED) {
                    log::warn!("publisher: accept failed: {e}");
                }
                if !self.accept_armed && !self.stopping {
                    // Back off (e.g. EMFILE) instead of spinning on a failing accept.
                    self.accept_retry_at = Some(now + ACCEPT_RETRY);
                }
                return Ok(());
            }
        };
        if !self.accept_armed && !self.stopping {
            self.arm_accept()?;
        }
        let sock = TcpStream::from(fd);
        let peer = sock
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        let wall_ns = crate::sys::clock::realtime_ns();
        let Some(id) = self.fanout.accept(now, wall_ns, peer) else {
            return Ok(()); // rejected: dropping `sock` closes it
        };
        if let Err(e) = sock.set_nodelay(true) {
            log::debug!("publisher: TCP_NODELAY: {e}");
        }
        let slot = id.slot as usize;
        if self.conns.len() <= slot {
            self.conns.resize_with(slot + 1, || None);
        }
        self.conns[slot] = Some(Conn {
            sock,
            // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths) and iovec.
            buf: Box::new(unsafe { std::mem::zeroed::<SendBuf>() }),
            rx: Box::new([0; RX_CHUNK]),
        });
        Ok(())
    }

    /// Stall checks and the per-subscriber stats snapshot, every [`TICK`].
    fn tick(&mut self, now: Instant) {
        self.next_tick = now + TICK;
        let conns = &self.conns;
        self.fanout.check_stalls(now, |sub| {
            conns
                .get(sub.slot as usize)
                .and_then(Option::as_ref)
                // 0 on error: the stall check then relies on completed sends alone.
                .map_or(0, |c| {
                    crate::sys::net::send_queue_len(c.sock.as_raw_fd()).unwrap_or(0)
                })
        });
        let stats = self.fanout.subscriber_stats();
        self.stats_shown = !stats.is_empty();
        if let Ok(mut v) = self.shared.subscriber_stats.lock() {
            *v = stats;
        }
    }

    /// Takes every frame waiting in the input queue and offers it to every sink, then every
    /// IMU reading waiting to the subscribers.
    fn drain_input(&mut self, now: Instant) {
        while let Some((sensor, reading)) = self.shared.imu.pop() {
            self.fanout.offer_imu(sensor, &reading, now);
        }
        while let Some(frame) = self.shared.frames.pop() {
            add(&self.shared.counters.frames_in, 1);
            let frame = SharedFrame::new(frame, self.shared.pool.clone());
            for s in &mut self.sinks {
                s.offer(&frame, now);
            }
            self.fanout.offer(&frame, now);
        }
    }

    fn begin_stop(&mut self) {
        let now = Instant::now();
        self.drain_input(now);
        self.stopping = true;
        self.stop_deadline = Some(now + self.linger);
        if self.accept_armed {
            self.cancel(Token::Accept);
        }
        if self.wake_armed {
            self.cancel(Token::Wake);
        }
        self.fanout.begin_stop();
    }

    /// Carries out the state machine's actions (which may produce more).
    fn execute(&mut self, now: Instant) -> io::Result<()> {
        loop {
            self.fanout.drain_actions(&mut self.actions);
            if self.actions.is_empty() {
                return Ok(());
            }
            let actions = std::mem::take(&mut self.actions);
            for &a in &actions {
                self.apply(a, now)?;
            }
            self.actions = actions;
            self.actions.clear();
        }
    }

    fn apply(&mut self, a: Action, now: Instant) -> io::Result<()> {
        match a {
            Action::Send(sub) => self.submit_send(sub, now),
            Action::Recv(sub) => self.submit_recv(sub),
            Action::SetSndbuf(sub, bytes) => {
                if let Some(c) = self.conn(sub) {
                    set_sndbuf(c.sock.as_raw_fd(), bytes);
                }
                Ok(())
            }
            Action::Close {
                sub,
                cancel_send,
                cancel_recv,
            } => {
                // Makes a send stuck on a full socket buffer fail promptly even if the cancel
                // misses it.
                if let Some(c) = self.conn(sub) {
                    let _ = c.sock.shutdown(Shutdown::Both);
                }
                if cancel_send {
                    self.cancel(Token::Send(sub));
                }
                if cancel_recv {
                    self.cancel(Token::Recv(sub));
                }
                Ok(())
            }
            Action::Release(sub) => {
                if let Some(c) = self.conns.get_mut(sub.slot as usize) {
                    *c = None;
                }
                Ok(())
            }
        }
    }

    fn conn(&self, sub: SubId) -> Option<&Conn> {
        self.conns.get(sub.slot as usize).and_then(Option::as_ref)
    }

    /// Submits a `SENDMSG` of the unsent rest of the subscriber's batch.
    fn submit_send(&mut self, sub: SubId, now: Instant) -> io::Result<()> {
        let Some(conn) = self
            .conns
            .get_mut(sub.slot as usize)
            .and_then(Option::as_mut)
        else {
            return Ok(());
        };
        let mut n = 0;
        for (iov, part) in conn.buf.iov.iter_mut().zip(self.fanout.unsent(sub)) {
            *iov = libc::iovec {
                iov_base: part.as_ptr() as *mut libc::c_void,
                iov_len: part.len(),
            };
            n += 1;
        }
        if n == 0 {
            // Nothing to send (cannot happen: a batch always has a header left): complete the
            // send at once rather than leave the subscriber waiting for a completion.
            self.fanout
                .on_send(sub, now, Err(io::Error::other("empty send")));
            return Ok(());
        }
        conn.buf.msg.msg_iov = conn.buf.iov.as_mut_ptr();
        conn.buf.msg.msg_iovlen = n;
        let e = opcode::SendMsg::new(types::Fd(conn.sock.as_raw_fd()), &raw const conn.buf.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(Token::Send(sub).encode());
        // SAFETY: the entry points to `conn.buf` (boxed: its address does not change when
        // `conns` reallocates; dropped only on `Action::Release`, which the state machine emits
        // only once this send has completed) and through its iovecs to the headers and payloads
        // of the subscriber's batch, which the state machine neither changes nor frees while
        // the send is in flight. The loop does not exit (nor drop either) while `inflight > 0`,
        // and `Drop` leaks both if it must.
        unsafe { self.push(e) }
    }

    fn submit_recv(&mut self, sub: SubId) -> io::Result<()> {
        let Some(conn) = self
            .conns
            .get_mut(sub.slot as usize)
            .and_then(Option::as_mut)
        else {
            return Ok(());
        };
        let e = opcode::Recv::new(
            types::Fd(conn.sock.as_raw_fd()),
            conn.rx.as_mut_ptr(),
            RX_CHUNK as u32,
        )
        .build()
        .user_data(Token::Recv(sub).encode());
        // SAFETY: the entry points to `conn.rx`, boxed (stable address when `conns`
        // reallocates) and dropped only on `Action::Release`, which the state machine emits
        // only once this receive has completed; the loop does not exit while `inflight > 0`.
        unsafe { self.push(e) }
    }

    /// Submits every queued SQE (all subscribers' sends and re-arms of this wake-up) in one
    /// `io_uring_enter` that also waits for at least one CQE, or until the next deadline (the
    /// housekeeping tick while subscribers exist, an accept retry, the linger time). Frames
    /// pushed by a [`super::FrameSender`] wake it through the eventfd.
    fn wait(&mut self) -> io::Result<()> {
        let now = Instant::now();
        let tick = (self.fanout.has_subscribers() || self.stats_shown).then_some(self.next_tick);
        let deadline = [tick, self.accept_retry_at, self.stop_deadline]
            .into_iter()
            .flatten()
            .min();
        let r = match deadline {
            Some(d) => {
                let t = d.saturating_duration_since(now);
                let ts = types::Timespec::new()
                    .sec(t.as_secs())
                    .nsec(t.subsec_nanos());
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
            .user_data(Token::Accept.encode());
        // SAFETY: a multishot accept without a sockaddr buffer references no memory; the
        // listener outlives the ring's operations (the loop exits only when `inflight` is 0).
        unsafe { self.push(e)? };
        self.accept_armed = true;
        Ok(())
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(self.shared.wake.as_raw_fd()), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(Token::Wake.encode());
        // SAFETY: a poll references no memory; the eventfd is kept alive by `self.shared`.
        unsafe { self.push(e)? };
        self.wake_armed = true;
        Ok(())
    }

    /// Asks the kernel to cancel the operation `target`. A full submission queue that cannot
    /// be flushed is logged: the shutdown of the socket ends the operation anyway.
    fn cancel(&mut self, target: Token) {
        let e = opcode::AsyncCancel::new(target.encode())
            .build()
            .user_data(Token::Cancel.encode());
        // SAFETY: a cancel request references no memory.
        if let Err(e) = unsafe { self.push(e) } {
            log::warn!("publisher: cancel of {target:?} not submitted: {e}");
        }
    }
}

/// Sets the socket's send buffer to hold `bytes` (the kernel doubles the value for its own
/// bookkeeping, so half is asked). `SO_SNDBUFFORCE` (CAP_NET_ADMIN) ignores `wmem_max`.
fn set_sndbuf(fd: RawFd, bytes: usize) {
    let v = (bytes / 2).min(i32::MAX as usize) as libc::c_int;
    let set = |name| crate::sys::sockopt::set_int(fd, libc::SOL_SOCKET, name, v);
    if let Err(e) = set(libc::SO_SNDBUFFORCE).or_else(|_| set(libc::SO_SNDBUF)) {
        log::debug!("publisher: SO_SNDBUF: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_through_user_data() {
        let s = SubId {
            slot: 0xdead_beef,
            generation: 0xab_cdef,
        };
        for t in [
            Token::Accept,
            Token::Wake,
            Token::Send(s),
            Token::Recv(s),
            Token::Cancel,
        ] {
            assert_eq!(Token::decode(t.encode()), Some(t));
        }
        assert_eq!(Token::Send(s).encode(), 0x03ab_cdef_dead_beef);
        assert_eq!(Token::Recv(s).encode(), 0x04ab_cdef_dead_beef);
        assert_eq!(Token::Accept.encode(), 1 << 56);
        assert_eq!(Token::decode(0), None);
        assert_eq!(Token::decode(9 << 56), None);
    }

    #[test]
    fn completions_are_decoded_once_into_typed_results() {
        let s = SubId {
            slot: 3,
            generation: 7,
        };
        match Completion::decode(Token::Send(s).encode(), 4096, 0) {
            Completion::Send(id, Ok(4096)) => assert_eq!(id, s),
            c => panic!("{c:?}"),
        }
        match Completion::decode(Token::Send(s).encode(), -libc::EPIPE, 0) {
            Completion::Send(id, Err(e)) => {
                assert_eq!(id, s);
                assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
            }
            c => panic!("{c:?}"),
        }
        match Completion::decode(Token::Recv(s).encode(), 0, 0) {
            Completion::Recv(id, Ok(0)) => assert_eq!(id, s),
            c => panic!("{c:?}"),
        }
        // IORING_CQE_F_MORE = 1 << 1 (include/uapi/linux/io_uring.h).
        let c = Completion::decode(Token::Accept.encode(), -libc::EMFILE, 1 << 1);
        match &c {
            Completion::Accept {
                result: Err(e),
                more: true,
            } => assert_eq!(e.raw_os_error(), Some(libc::EMFILE)),
            c => panic!("{c:?}"),
        }
        assert!(!c.is_final());
        let c = Completion::decode(Token::Wake.encode(), -libc::ECANCELED, 0);
        assert!(c.is_final());
        assert!(matches!(
            c,
            Completion::Wake {
                result: Err(_),
                more: false
            }
        ));
        assert!(matches!(
            Completion::decode(Token::Cancel.encode(), 0, 0),
            Completion::Other
        ));
    }
}
