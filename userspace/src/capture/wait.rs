//! The idle wait shared by the backends whose packets arrive on file descriptors (AF_XDP,
//! `recvmmsg`): one io_uring `IORING_OP_POLL_ADD` per fd, kept armed until it fires, and one
//! `io_uring_enter` with a timeout (`IORING_ENTER_EXT_ARG`, kernel 5.11+) that returns when any
//! fd is readable or the timeout passed. The thread neither spins nor sleeps blindly.
//!
//! How soon it returns once a packet is readable is the [`WaitMode`] (`lidarxdp run --wait`,
//! issue 15). Waking on the first packet ([`WaitMode::Poll`]) costs one wake-up per packet
//! at a few thousand packets per second, far more CPU than decoding the packet; the other
//! modes let packets gather for a bounded time, so one wake-up serves several of them.

use std::{fmt, io, os::fd::RawFd, str::FromStr, time::Duration};

use io_uring::{IoUring, opcode, types};

/// The shortest and longest batching time of [`WaitMode::MinWait`] and [`WaitMode::Paced`]
/// and busy-poll time of [`WaitMode::BusyPoll`], µs. The upper bound keeps the added frame
/// latency within the 1.5 ms p99 budget of issue 15 (measured p99 without batching: about
/// 1.0 ms at 754 pps, `docs/benchmarks.md`).
pub const WAIT_USEC_RANGE: std::ops::RangeInclusive<u32> = 10..=1000;

/// How a capture thread waits when its source is empty (`lidarxdp run --wait`, configuration
/// key `wait`). Written `poll`, `minwait:USEC`, `paced:USEC` or `busypoll:USEC`, USEC in
/// [`WAIT_USEC_RANGE`]. Applies to the `xdp` and `recvmmsg` backends (the `socket` backend
/// blocks in `recvfrom`, `uring` waits on its own ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Wake on the first readable packet: an `IORING_OP_POLL_ADD` and an `io_uring_enter`
    /// per wake-up, so one wake-up per packet whenever packets are more than a wake-up apart
    /// (the behaviour before issue 15).
    Poll,
    /// As `Poll`, but `io_uring_enter` is given `min_wait_usec` (`struct
    /// io_uring_getevents_arg`, kernel 6.12+, `IORING_FEAT_MIN_TIMEOUT`) and asks for one
    /// completion more than there are fds (one poll each, so the count is never reached): a
    /// packet that arrives within USEC of the start of the wait returns it at USEC; one
    /// arriving later returns it at once. The ring is created with
    /// `IORING_SETUP_DEFER_TASKRUN` (kernel 6.1+), whose waiter the kernel switches to "any
    /// completion wakes" when the minimum wait expires empty. A kernel without the feature
    /// falls back to `Poll` (logged).
    MinWait(u32),
    /// After a wait that was followed by packets, sleep USEC (`clock_nanosleep`, no poll) and
    /// let the thread drain what arrived; after a wait followed by nothing, poll as `Poll`.
    /// Packets at least USEC apart cost nothing extra in latency; under load a wake-up serves
    /// about USEC × rate packets and adds at most USEC of latency.
    Paced(u32),
    /// As `Poll`, with NAPI busy polling: `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` = USEC and
    /// `SO_BUSY_POLL_BUDGET` = 64 on the socket (socket(7); needs `CAP_NET_ADMIN`, set before
    /// the daemon drops it) and io_uring NAPI busy polling (`IORING_REGISTER_NAPI`, kernel
    /// 6.9+) for USEC before sleeping. For measurement (issue 15); it spins.
    BusyPoll(u32),
}

impl Default for WaitMode {
    /// `paced:1000`, the mode measured best in issue 15 (`docs/benchmarks.md`, "Wake-ups").
    fn default() -> Self {
        WaitMode::Paced(1000)
    }
}

impl fmt::Display for WaitMode {
    /// The command-line form, e.g. `minwait:200`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitMode::Poll => f.write_str("poll"),
            WaitMode::MinWait(u) => write!(f, "minwait:{u}"),
            WaitMode::Paced(u) => write!(f, "paced:{u}"),
            WaitMode::BusyPoll(u) => write!(f, "busypoll:{u}"),
        }
    }
}

/// A `--wait` value that is not `poll`, `minwait:USEC`, `paced:USEC` or `busypoll:USEC` with
/// USEC in [`WAIT_USEC_RANGE`] ([`WaitMode`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--wait {value:?}: expected poll, minwait:USEC, paced:USEC or busypoll:USEC with USEC in \
     {}..={} (microseconds)",
    WAIT_USEC_RANGE.start(),
    WAIT_USEC_RANGE.end()
)]
pub struct WaitModeError {
    /// The value as given.
    pub value: String,
}

impl FromStr for WaitMode {
    type Err = WaitModeError;
    /// `poll`, `minwait:USEC`, `paced:USEC` or `busypoll:USEC`, USEC an integer in
    /// [`WAIT_USEC_RANGE`].
    fn from_str(s: &str) -> Result<Self, WaitModeError> {
        let err = || WaitModeError {
            value: s.to_owned(),
        };
        let t = s.trim();
        if t == "poll" {
            return Ok(WaitMode::Poll);
        }
        let (kind, usec) = t.split_once(':').ok_or_else(err)?;
        let usec: u32 = usec.trim().parse().map_err(|_| err())?;
        if !WAIT_USEC_RANGE.contains(&usec) {
            return Err(err());
        }
        match kind.trim() {
            "minwait" => Ok(WaitMode::MinWait(usec)),
            "paced" => Ok(WaitMode::Paced(usec)),
            "busypoll" => Ok(WaitMode::BusyPoll(usec)),
            _ => Err(err()),
        }
    }
}

/// Sets NAPI busy polling on socket `fd` for [`WaitMode::BusyPoll`]: `SO_PREFER_BUSY_POLL` 1,
/// `SO_BUSY_POLL` `usec`, `SO_BUSY_POLL_BUDGET` 64 (socket(7); kernel
/// `Documentation/networking/napi.rst`, "Busy polling"). Raising them needs `CAP_NET_ADMIN`.
/// Failures are logged, not returned: busy polling is a measurement option.
pub fn set_busy_poll(fd: RawFd, usec: u32) {
    use crate::sys::sockopt::set_int;
    for (name, opt, v) in [
        ("SO_PREFER_BUSY_POLL", libc::SO_PREFER_BUSY_POLL, 1),
        ("SO_BUSY_POLL", libc::SO_BUSY_POLL, usec as libc::c_int),
        ("SO_BUSY_POLL_BUDGET", libc::SO_BUSY_POLL_BUDGET, 64),
    ] {
        if let Err(e) = set_int(fd, libc::SOL_SOCKET, opt, v) {
            log::warn!("--wait busypoll:{usec}: {name} {v}: {e}");
        }
    }
}

/// Poll-with-timeout on a fixed set of fds, in the order given to [`PollWaiter::wait`].
pub struct PollWaiter {
    ring: IoUring,
    /// Per fd: a poll request is in flight.
    armed: Vec<bool>,
    /// The mode in effect (after any fall-back to [`WaitMode::Poll`]).
    mode: WaitMode,
    /// The ring was created disabled (`IORING_SETUP_R_DISABLED`) and is enabled by the first
    /// wait, in the thread that will use it: with `IORING_SETUP_SINGLE_ISSUER` the task that
    /// enables the ring is the only one allowed to submit.
    disabled: bool,
}

impl PollWaiter {
    /// A waiter for `fds` file descriptors in mode [`WaitMode::Poll`].
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, or `EPERM` under a seccomp policy or
    /// `kernel.io_uring_disabled`).
    pub fn new(fds: usize) -> io::Result<Self> {
        Self::with_mode(fds, WaitMode::Poll)
    }

    /// A waiter for `fds` file descriptors in mode `mode`. [`WaitMode::MinWait`] falls back
    /// to [`WaitMode::Poll`] (logged) when the kernel lacks `IORING_FEAT_MIN_TIMEOUT` or
    /// `IORING_SETUP_DEFER_TASKRUN`; [`WaitMode::BusyPoll`] when `IORING_REGISTER_NAPI`
    /// fails. [`Self::mode`] tells the mode in effect.
    ///
    /// Errors: `io_uring_setup(2)` failing, as [`Self::new`].
    pub fn with_mode(fds: usize, mode: WaitMode) -> io::Result<Self> {
        let entries = 8.max((fds as u32 * 2).next_power_of_two());
        let plain = |mode| -> io::Result<Self> {
            Ok(Self {
                ring: IoUring::new(entries)?,
                armed: vec![false; fds],
                mode,
                disabled: false,
            })
        };
        match mode {
            WaitMode::MinWait(usec) => {
                let ring = IoUring::builder()
                    .setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_r_disabled()
                    .build(entries);
                match ring {
                    Ok(ring) if ring.params().is_feature_min_timeout() => Ok(Self {
                        ring,
                        armed: vec![false; fds],
                        mode,
                        disabled: true,
                    }),
                    Ok(_) => {
                        log::warn!(
                            "--wait minwait:{usec}: this kernel has no io_uring minimum wait \
                             (IORING_FEAT_MIN_TIMEOUT, Linux 6.12+); waiting as --wait poll"
                        );
                        plain(WaitMode::Poll)
                    }
                    Err(e) => {
                        log::warn!(
                            "--wait minwait:{usec}: io_uring with DEFER_TASKRUN: {e}; waiting \
                             as --wait poll"
                        );
                        plain(WaitMode::Poll)
                    }
                }
            }
            WaitMode::BusyPoll(usec) => {
                let me = plain(mode)?;
                let mut napi = types::Napi::new()
                    .set_busy_poll_timeout(usec)
                    .set_prefer_busy_poll(true);
                match me.ring.submitter().register_napi(&mut napi) {
                    Ok(()) => Ok(me),
                    Err(e) => {
                        log::warn!(
                            "--wait busypoll:{usec}: IORING_REGISTER_NAPI: {e}; waiting as \
                             --wait poll"
                        );
                        Ok(Self {
                            mode: WaitMode::Poll,
                            ..me
                        })
                    }
                }
            }
            WaitMode::Poll | WaitMode::Paced(_) => plain(mode),
        }
    }

    /// The mode in effect.
    pub fn mode(&self) -> WaitMode {
        self.mode
    }

    /// Waits until one of `fds` is readable or `timeout` passed, as the [`WaitMode`] says.
    /// `took` tells whether the caller received packets since its previous wait
    /// ([`WaitMode::Paced`] sleeps instead of polling then). `fds` must be the same fds, in
    /// the same order, on every call, and must stay open while this waiter exists.
    ///
    /// Errors: the submission queue is full (more fds than at construction),
    /// `IORING_REGISTER_ENABLE_RINGS` fails, or `io_uring_enter(2)` fails with anything but a
    /// timeout or `EINTR`.
    pub fn wait(&mut self, fds: &[RawFd], timeout: Duration, took: bool) -> io::Result<()> {
        if let (WaitMode::Paced(usec), true) = (self.mode, took) {
            std::thread::sleep(Duration::from_micros(u64::from(usec)).min(timeout));
            return Ok(());
        }
        if self.disabled {
            self.ring.submitter().register_enable_rings()?;
            self.disabled = false;
        }
        for (k, &fd) in fds.iter().enumerate() {
            if self.armed.get(k).copied().unwrap_or(true) {
                continue;
            }
            let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .build()
                .user_data(k as u64);
            // SAFETY: PollAdd references no user memory; the caller keeps the fd open while
            // this waiter (and so the ring holding the request) exists.
            unsafe { self.ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            self.armed[k] = true;
        }
        let ts = types::Timespec::from(timeout);
        let r = match self.mode {
            WaitMode::MinWait(usec) if timeout > Duration::from_micros(u64::from(usec)) => {
                // One completion more than there are polls: the count is never reached, so
                // the wait ends at the minimum wait once a packet is readable
                // (io_uring_enter(2), IORING_ENTER_EXT_ARG with min_wait_usec). Asking for
                // two with ten sockets ended the wait as soon as two sensors had sent.
                let args = types::SubmitArgs::new().timespec(&ts).min_wait_usec(usec);
                match self.ring.submitter().submit_with_args(fds.len() + 1, &args) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        log::warn!(
                            "--wait minwait:{usec}: io_uring_enter refused min_wait_usec \
                             (EINVAL); waiting as --wait poll"
                        );
                        self.mode = WaitMode::Poll;
                        let args = types::SubmitArgs::new().timespec(&ts);
                        self.ring.submitter().submit_with_args(1, &args)
                    }
                    r => r,
                }
            }
            _ => {
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        for cqe in self.ring.completion() {
            if let Some(a) = self.armed.get_mut(cqe.user_data() as usize) {
                *a = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{net::UdpSocket, os::fd::AsRawFd, time::Instant};

    #[test]
    fn wait_modes_parse_and_print() {
        for (s, m) in [
            ("poll", WaitMode::Poll),
            ("minwait:200", WaitMode::MinWait(200)),
            ("paced:10", WaitMode::Paced(10)),
            ("busypoll:1000", WaitMode::BusyPoll(1000)),
        ] {
            assert_eq!(s.parse::<WaitMode>(), Ok(m));
            assert_eq!(m.to_string(), s);
        }
        for bad in [
            "",
            "paced",
            "paced:9",
            "paced:1001",
            "minwait:-1",
            "spin:100",
            "poll:5",
        ] {
            let e = bad.parse::<WaitMode>().unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "--wait {bad:?}: expected poll, minwait:USEC, paced:USEC or busypoll:USEC \
                     with USEC in 10..=1000 (microseconds)"
                )
            );
        }
        assert_eq!(WaitMode::default(), WaitMode::Paced(1000));
    }

    /// Each mode returns once a datagram is readable (well before the 2 s timeout), and
    /// times out when nothing comes. The waiter is used from another thread than the one
    /// that created it, as the capture thread does.
    #[test]
    fn every_mode_wakes_on_a_datagram_and_times_out_without_one() {
        for mode in [
            WaitMode::Poll,
            WaitMode::MinWait(500),
            WaitMode::Paced(500),
            WaitMode::BusyPoll(50),
        ] {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let addr = rx.local_addr().unwrap();
            let mut w = PollWaiter::with_mode(1, mode).unwrap();
            let fd = rx.as_raw_fd();
            std::thread::scope(|s| {
                s.spawn(|| {
                    // Nothing readable: the timeout ends the wait.
                    let t = Instant::now();
                    w.wait(&[fd], Duration::from_millis(30), false).unwrap();
                    assert!(t.elapsed() >= Duration::from_millis(29), "{mode}");
                    tx.send_to(b"x", addr).unwrap();
                    let t = Instant::now();
                    w.wait(&[fd], Duration::from_secs(2), false).unwrap();
                    assert!(t.elapsed() < Duration::from_secs(1), "{mode}");
                    // Paced after packets: a sleep of the pace, not a poll.
                    let t = Instant::now();
                    w.wait(&[fd], Duration::from_secs(2), true).unwrap();
                    assert!(t.elapsed() < Duration::from_secs(1), "{mode}");
                });
            });
        }
    }
}
